/* fuzz.h: what the libFuzzer targets of tests/fuzz share (docs/FUZZ.md).
 *
 * A target checks more than "no crash": the contract of the parser it
 * drives (an error is one line, a success satisfies the invariants the
 * callers rely on).  A broken contract is reported like a crash: a line
 * naming it, then abort(), which libFuzzer records as a crashing input.
 */
#ifndef CBCMN_FUZZ_H
#define CBCMN_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                  \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: contract broken: %s: ", __FILE__, \
				__LINE__, #cond);                              \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
			abort();                                               \
		}                                                              \
	} while (0)

/* An error message: not empty, one line. */
#define FUZZ_ONE_LINE(msg)                                                     \
	FUZZ_CHECK((msg)[0] && !strchr((msg), '\n'), "message '%s'", (msg))

/* The input as a NUL-terminated string in a buffer of its own size + 1,
 * so that ASan sees a read past the end.  free() it. */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = 0;
	return s;
}

#endif
