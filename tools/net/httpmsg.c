/* httpmsg.c: the strict HTTP/1.1 subset of httpmsg.h (request framing for
 * servers, response parsing for the load client). */
#include <string.h>
#include <strings.h>

#include "net/httpmsg.h"

static const char hello[] =
	"HTTP/1.1 200 OK\r\n"
	"Content-Length: 6\r\n"
	"Content-Type: text/plain\r\n"
	"Connection: keep-alive\r\n"
	"\r\n"
	"hello\n";

const char *http_hello_response(size_t *len)
{
	if (len)
		*len = sizeof(hello) - 1;
	return hello;
}

/* RFC 9110 token characters (method and header names). */
static bool is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c && strchr("!#$%&'*+-.^_`|~", c);
}

/* Finds the blank line that ends a head and checks every byte on the way:
 * CR only as part of CRLF, LF only after CR, no other control byte except
 * HT.  Returns the head's length (the final CRLFCRLF included), 0 if it is
 * not complete yet, -1 if it is malformed or would exceed HTTP_HEAD_MAX. */
static ssize_t head_end(const char *buf, size_t len)
{
	size_t n = len < HTTP_HEAD_MAX ? len : HTTP_HEAD_MAX;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)buf[i];

		if (c == '\r') {
			if (i + 1 < n && buf[i + 1] != '\n')
				return -1;
		} else if (c == '\n') {
			if (i == 0 || buf[i - 1] != '\r')
				return -1;
			/* An empty line: the previous line ended at i - 2. */
			if (i >= 3 && buf[i - 2] == '\n')
				return (ssize_t)(i + 1);
		} else if ((c < 0x20 && c != '\t') || c == 0x7f) {
			return -1;
		}
	}
	/* No blank line within the limit: a complete head cannot fit. */
	return len >= HTTP_HEAD_MAX ? -1 : 0;
}

/* One header field; name and value point into the caller's buffer. */
struct field {
	const char *name, *val;
	size_t name_len, val_len;
};

/* Reads the header line at *p (head_end() has already vouched that lines
 * end in CRLF and that the head ends with an empty line).  Returns 1 with
 * *f filled and *p moved past the line, 0 at the empty line, -1 if the line
 * is not "name: value" (obsolete line folding included). */
static int next_field(const char **p, struct field *f)
{
	const char *s = *p, *q = s;

	/* Buffers are not NUL terminated, so no str*() here: the CRLF that
	 * head_end() found ahead is what stops the scan. */
	while (!(q[0] == '\r' && q[1] == '\n'))
		q++;
	if (q == s)
		return 0;
	f->name = s;
	while (s < q && is_tchar((unsigned char)*s))
		s++;
	f->name_len = (size_t)(s - f->name);
	if (!f->name_len || s == q || *s != ':')
		return -1;
	s++;
	while (s < q && (*s == ' ' || *s == '\t'))
		s++;
	const char *e = q;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	f->val = s;
	f->val_len = (size_t)(e - s);
	*p = q + 2;
	return 1;
}

static bool field_is(const struct field *f, const char *name)
{
	size_t n = strlen(name);
	return f->name_len == n && !strncasecmp(f->name, name, n);
}

static bool value_is(const struct field *f, const char *val)
{
	size_t n = strlen(val);
	return f->val_len == n && !strncasecmp(f->val, val, n);
}

/* A Content-Length value: decimal digits only, at most max.  Returns -1
 * for anything else (empty, sign, list, too large). */
static long parse_length(const struct field *f, long max)
{
	long v = 0;

	if (!f->val_len)
		return -1;
	for (size_t i = 0; i < f->val_len; i++) {
		char c = f->val[i];
		if (c < '0' || c > '9')
			return -1;
		v = v * 10 + (c - '0');
		if (v > max)
			return -1;
	}
	return v;
}

/* Does the head [s, end) continue with the n bytes of lit? */
static bool starts(const char *s, const char *end, const char *lit)
{
	size_t n = strlen(lit);
	return (size_t)(end - s) >= n && !memcmp(s, lit, n);
}

/* "METHOD SP target SP HTTP/1.x CRLF" at the start of the head [s, end).
 * Returns the start of the first header line, or NULL. */
static const char *request_line(const char *s, const char *end)
{
	const char *m = s;

	while (is_tchar((unsigned char)*s))
		s++;
	if (s == m || *s++ != ' ')
		return NULL;
	const char *t = s;
	while ((unsigned char)*s > 0x20 && (unsigned char)*s < 0x7f)
		s++;
	if (s == t || *s++ != ' ')
		return NULL;
	if (!starts(s, end, "HTTP/1.1\r\n") && !starts(s, end, "HTTP/1.0\r\n"))
		return NULL;
	return s + 10;
}

ssize_t http_request_end(const char *buf, size_t len)
{
	ssize_t end = head_end(buf, len);
	if (end <= 0)
		return end;

	/* From here on every scan stops at a CRLF inside buf[0..end). */
	const char *p = request_line(buf, buf + end);
	if (!p)
		return -1;
	struct field f;
	int r;
	while ((r = next_field(&p, &f)) > 0) {
		/* A body would be taken for the next request: refuse it. */
		if (field_is(&f, "Transfer-Encoding"))
			return -1;
		if (field_is(&f, "Content-Length") && parse_length(&f, 0) != 0)
			return -1;
	}
	return r < 0 ? -1 : end;
}

static ssize_t bad(struct http_response *out, const char *why)
{
	out->error = why;
	return -1;
}

ssize_t http_response_parse(const char *buf, size_t len, struct http_response *out)
{
	memset(out, 0, sizeof(*out));
	ssize_t end = head_end(buf, len);
	if (end < 0)
		return bad(out, len >= HTTP_HEAD_MAX ? "response head too large or not terminated"
						     : "bad byte or line ending in response head");
	if (end == 0)
		return 0;

	/* "HTTP/1.1 SP 3DIGIT SP reason CRLF"; the reason may be empty. */
	const char *s = buf;
	if (!starts(s, buf + end, "HTTP/1.1 "))
		return bad(out, "status line does not start with \"HTTP/1.1 \"");
	s += 9;
	/* The head ends in CRLFCRLF, so a mismatch stops this before its end. */
	if (s[0] < '1' || s[0] > '9' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9' ||
	    s[3] != ' ')
		return bad(out, "bad status code");
	out->status = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
	while (!(s[0] == '\r' && s[1] == '\n'))
		s++;
	s += 2;

	long clen = -1;
	struct field f;
	int r;
	out->keep_alive = true;
	while ((r = next_field(&s, &f)) > 0) {
		if (field_is(&f, "Transfer-Encoding"))
			return bad(out, "Transfer-Encoding is not supported");
		if (field_is(&f, "Content-Length")) {
			if (clen >= 0)
				return bad(out, "Content-Length given twice");
			clen = parse_length(&f, HTTP_BODY_MAX);
			if (clen < 0)
				return bad(out, "bad or too large Content-Length");
		}
		if (field_is(&f, "Connection") && value_is(&f, "close"))
			out->keep_alive = false;
	}
	if (r < 0)
		return bad(out, "malformed header line");
	if (clen < 0)
		return bad(out, "no Content-Length");

	out->head_len = (size_t)end;
	out->body_len = (size_t)clen;
	if (len - (size_t)end < (size_t)clen)
		return 0;
	return end + clen;
}
