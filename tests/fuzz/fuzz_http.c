/* fuzz_http: the HTTP/1.1 subset of the workloads (tools/net/httpmsg.c):
 * the request framing the servers run on what clients send, and the
 * response parser the load client runs on what servers send.
 *
 * Input: one byte choosing the parser (even: requests, odd: responses),
 * then the bytes as read from a socket, in a buffer of exactly that size
 * (the parsers get no NUL: ASan sees any read past the end).  Checked
 * besides memory safety: results in range, a complete message still
 * complete alone, and every prefix of it "incomplete", never "malformed"
 * (else a server would drop a client whose request came in two reads).
 */
#include "fuzz.h"
#include "net/httpmsg.h"

static void requests(const char *buf, size_t len)
{
	size_t off = 0;
	/* As a server does: consume the requests back to back. */
	for (;;) {
		ssize_t r = http_request_end(buf + off, len - off);
		FUZZ_CHECK(r >= -1 && r <= (ssize_t)(len - off) && r <= HTTP_HEAD_MAX, "r %zd", r);
		if (r == 0)
			FUZZ_CHECK(len - off < HTTP_HEAD_MAX, "incomplete at %zu bytes", len - off);
		if (r <= 0)
			return;
		FUZZ_CHECK(http_request_end(buf + off, (size_t)r) == r, "alone");
		FUZZ_CHECK(http_request_end(buf + off, (size_t)r - 1) == 0, "prefix r - 1");
		FUZZ_CHECK(http_request_end(buf + off, (size_t)r / 2) == 0, "prefix r / 2");
		off += (size_t)r;
	}
}

static void responses(const char *buf, size_t len)
{
	size_t off = 0;
	for (;;) {
		struct http_response hr;
		ssize_t n = http_response_parse(buf + off, len - off, &hr);
		FUZZ_CHECK(n >= -1 && n <= (ssize_t)(len - off), "n %zd", n);
		if (n < 0) {
			FUZZ_CHECK(hr.error != NULL, "no reason");
			FUZZ_ONE_LINE(hr.error);
			return;
		}
		if (n == 0)
			return;
		FUZZ_CHECK(hr.status >= 100 && hr.status <= 999, "status %d", hr.status);
		FUZZ_CHECK(hr.head_len + hr.body_len == (size_t)n, "lengths");
		FUZZ_CHECK(hr.head_len <= HTTP_HEAD_MAX && hr.body_len <= HTTP_BODY_MAX, "limits");
		struct http_response again;
		FUZZ_CHECK(http_response_parse(buf + off, (size_t)n, &again) == n, "alone");
		FUZZ_CHECK(http_response_parse(buf + off, (size_t)n - 1, &again) == 0, "prefix n - 1");
		FUZZ_CHECK(http_response_parse(buf + off, hr.head_len - 1, &again) == 0, "head - 1");
		off += (size_t)n;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t len = size - 1;
	char *buf = malloc(len ? len : 1);
	if (!buf)
		abort();
	memcpy(buf, data + 1, len);
	if (data[0] & 1)
		responses(buf, len);
	else
		requests(buf, len);
	free(buf);
	return 0;
}
