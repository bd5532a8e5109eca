/* json.h: a small streaming JSON writer for the tools' --json output.
 *
 * Keys and commas are the writer's business: open an object or array,
 * then write members (key given inside an object, NULL inside an array),
 * then close it.  Strings are escaped; a double that is not finite is
 * written as null (JSON has no NaN).  Output is one line; jw_end() adds
 * the newline.  Nesting beyond JW_DEPTH levels is a programming error and
 * is ignored (the output is then not valid JSON).
 *
 *     struct jw j;
 *     jw_begin(&j, stdout);
 *     jw_obj(&j, NULL);
 *     jw_str(&j, "workload", "fib");
 *     jw_arr(&j, "pairs"); jw_u64(&j, NULL, 3); jw_close(&j);
 *     jw_close(&j);
 *     jw_end(&j);            // {"workload":"fib","pairs":[3]}\n
 */
#ifndef CBCMN_TOOLS_JSON_H
#define CBCMN_TOOLS_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JW_DEPTH 16

struct jw {
	FILE *f;
	int depth;
	char close[JW_DEPTH]; /* '}' or ']' per open level */
	bool first[JW_DEPTH]; /* nothing written at this level yet */
};

void jw_begin(struct jw *j, FILE *f);
void jw_obj(struct jw *j, const char *key);
void jw_arr(struct jw *j, const char *key);
void jw_close(struct jw *j);
void jw_str(struct jw *j, const char *key, const char *v);
void jw_i64(struct jw *j, const char *key, int64_t v);
void jw_u64(struct jw *j, const char *key, uint64_t v);
void jw_double(struct jw *j, const char *key, double v);
void jw_bool(struct jw *j, const char *key, bool v);
/* s as a JSON string, quoted and escaped (a byte that is not part of a
 * well-formed UTF-8 character as U+FFFD), for printers that write their
 * own JSON around it. */
void jw_quote(FILE *f, const char *s);
/* Close what is still open, end the line and flush.  Returns 0 or -EIO
 * when writing failed (a full disk, a closed pipe). */
int jw_end(struct jw *j);

#endif
