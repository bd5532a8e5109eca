/* error.c: cbcmn_strerror(): one string for every result the library returns. */
#include <string.h>

#include "cbcmn.h"

const char *cbcmn_strerror(int64_t err)
{
	if (err >= 0)
		return "success";
	switch (err) {
#define CBCMN__XX(name, value, msg)                                            \
	case CBCMN_E##name:                                                     \
		return msg;
		CBCMN_ERRNO_MAP(CBCMN__XX)
#undef CBCMN__XX
	}
	if (err > -4096) {
		/* strerrordesc_np: a static string, thread-safe, no locale. */
		const char *s = strerrordesc_np((int)-err);
		if (s)
			return s;
	}
	return "unknown error";
}
