/* version.c: which library a program runs with (cbcmn.h, "Version"). */
#include "cbcmn.h"

#define CBCMN_STR_(x) #x
#define CBCMN_STR(x) CBCMN_STR_(x)

const char *cbcmn_version(void)
{
	return CBCMN_STR(CBCMN_VERSION_MAJOR) "." CBCMN_STR(CBCMN_VERSION_MINOR) "." CBCMN_STR(
		CBCMN_VERSION_PATCH);
}

unsigned cbcmn_version_number(void)
{
	return CBCMN_VERSION_NUMBER;
}
