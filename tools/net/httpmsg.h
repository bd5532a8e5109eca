/* httpmsg.h: the small, strict HTTP/1.1 subset that the load client and the
 * benchmark HTTP servers (epoll baseline, fiber server) share.
 *
 * The contract: a client sends requests without a body ("GET / HTTP/1.1",
 * "Host: x", blank line), possibly several back to back on one keep-alive
 * connection; the server answers each, in order, with http_hello_response().
 * Anything outside that subset (bare LF, control bytes, request bodies,
 * chunked responses, heads over HTTP_HEAD_MAX) is malformed: the parsers
 * reject it instead of guessing.
 *
 * All functions are pure (no allocation, no global state): any thread may
 * call them.
 */
#ifndef CBCMN_TOOLS_HTTPMSG_H
#define CBCMN_TOOLS_HTTPMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Largest accepted head (request or status line, headers, blank line). */
#define HTTP_HEAD_MAX 8192
/* Largest Content-Length the response parser accepts. */
#define HTTP_BODY_MAX 65536

/* The server's fixed keep-alive answer:
 *   HTTP/1.1 200 OK, Content-Length: 6, Content-Type: text/plain,
 *   Connection: keep-alive, body "hello\n".
 * Returns static storage; *len (if len is not NULL) gets its length. */
const char *http_hello_response(size_t *len);

/* The length of the first complete request head in buf[0..len): request
 * line and headers up to and including the "\r\n\r\n" that ends them.
 * Requests have no body, so that is also where the next request starts.
 * Returns 0 if the head is not complete yet (read more and call again with
 * the longer buffer), -1 if it is malformed, longer than HTTP_HEAD_MAX, or
 * announces a body (Content-Length other than 0, Transfer-Encoding). */
ssize_t http_request_end(const char *buf, size_t len);

/* A response as http_response_parse() found it. */
struct http_response {
	int status;		/* 100..999 */
	size_t head_len;	/* status line and headers, blank line included */
	size_t body_len;	/* Content-Length; the body is buf + head_len */
	bool keep_alive;	/* false if the server sent "Connection: close" */
	const char *error;	/* static text saying why, when -1 is returned */
};

/* Parses the first response in buf[0..len).  Returns its total length
 * (head_len + body_len) once the whole response, body included, is in buf;
 * 0 if more bytes are needed; -1 if it is malformed (out->error says why).
 * Content-Length is required (exactly once, at most HTTP_BODY_MAX);
 * Transfer-Encoding is refused. */
ssize_t http_response_parse(const char *buf, size_t len, struct http_response *out);

#endif
