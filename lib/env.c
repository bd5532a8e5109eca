/* env.c: the CBCMN_* environment variables, ignored in a privileged
 * program (env.h). */
#include <stdlib.h>

#include "env.h"

const char *cbcmn__env(const char *name)
{
	/* secure_getenv (glibc 2.17): NULL under AT_SECURE, as ld.so does
	 * for LD_LIBRARY_PATH; getenv would let whoever started a set-uid
	 * program choose, among others, the trace rings' size (its memory)
	 * and a sysfs tree of their own (its placement). */
	return secure_getenv(name);
}
