/* json.c: the streaming JSON writer (json.h). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "util/json.h"

void jw_begin(struct jw *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
	j->first[0] = true;
}

/* The length of the well-formed UTF-8 sequence at s (RFC 3629: no
 * overlong form, no surrogate, nothing past U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *s)
{
	size_t n = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;
	if (s[0] < 0xc2 || s[0] > 0xf4)
		return 0;
	/* The second byte's range narrows after E0, ED, F0, F4. */
	unsigned char lo = s[0] == 0xe0 ? 0xa0 : s[0] == 0xf0 ? 0x90 : 0x80;
	unsigned char hi = s[0] == 0xed ? 0x9f : s[0] == 0xf4 ? 0x8f : 0xbf;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

void jw_quote(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c >= 0x80) {
			/* JSON is UTF-8: a byte that begins no whole character
			 * (a name the kernel cut at 15 bytes, /proc/PID/comm)
			 * is U+FFFD, or the file is not JSON to a strict reader. */
			size_t n = utf8_len((const unsigned char *)s);
			if (n) {
				fwrite(s, 1, n, f);
				s += n - 1;
			} else {
				fputs("\\ufffd", f);
			}
		} else if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* The separator and key before a member of the current level. */
static void member(struct jw *j, const char *key)
{
	if (!j->first[j->depth])
		fputc(',', j->f);
	j->first[j->depth] = false;
	if (key) {
		jw_quote(j->f, key);
		fputc(':', j->f);
	}
}

static void open_level(struct jw *j, const char *key, char open, char close)
{
	member(j, key);
	fputc(open, j->f);
	if (j->depth + 1 >= JW_DEPTH)
		return;
	j->depth++;
	j->close[j->depth] = close;
	j->first[j->depth] = true;
}

void jw_obj(struct jw *j, const char *key)
{
	open_level(j, key, '{', '}');
}

void jw_arr(struct jw *j, const char *key)
{
	open_level(j, key, '[', ']');
}

void jw_close(struct jw *j)
{
	if (j->depth == 0)
		return;
	fputc(j->close[j->depth], j->f);
	j->depth--;
}

void jw_str(struct jw *j, const char *key, const char *v)
{
	member(j, key);
	jw_quote(j->f, v ? v : "");
}

void jw_i64(struct jw *j, const char *key, int64_t v)
{
	member(j, key);
	fprintf(j->f, "%lld", (long long)v);
}

void jw_u64(struct jw *j, const char *key, uint64_t v)
{
	member(j, key);
	fprintf(j->f, "%llu", (unsigned long long)v);
}

void jw_double(struct jw *j, const char *key, double v)
{
	member(j, key);
	if (!isfinite(v)) {
		fputs("null", j->f);
		return;
	}
	/* Six decimals, trailing zeros trimmed: 0.25, 1234.5, 3 */
	char buf[64];
	int n = snprintf(buf, sizeof(buf), "%.6f", v);
	if (n <= 0 || n >= (int)sizeof(buf)) {
		fprintf(j->f, "%.17g", v); /* huge: exponent form */
		return;
	}
	if (strchr(buf, '.')) {
		while (buf[n - 1] == '0')
			buf[--n] = 0;
		if (buf[n - 1] == '.')
			buf[--n] = 0;
	}
	fputs(buf, j->f);
}

void jw_bool(struct jw *j, const char *key, bool v)
{
	member(j, key);
	fputs(v ? "true" : "false", j->f);
}

int jw_end(struct jw *j)
{
	while (j->depth > 0)
		jw_close(j);
	fputc('\n', j->f);
	return fflush(j->f) || ferror(j->f) ? -EIO : 0;
}
