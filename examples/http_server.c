/* http_server: a small HTTP/1.1 server, one task per connection.
 *
 *   http_server PORT [--exit-after N]
 *
 * Listens on 127.0.0.1:PORT (0: a free port; the first line of output says
 * which).  GET or HEAD of / answers "Hello, world!"; any other path 404,
 * any other method 405, a request it cannot parse 400 (and the connection
 * closes).  Connections are kept alive (HTTP/1.1's default; HTTP/1.0 only
 * with "Connection: keep-alive"), and pipelined requests are answered in
 * order.  Request bodies (Content-Length) are read and dropped; chunked
 * ones are refused (501).  A client idle for 30 s is dropped.  With
 * --exit-after N the server stops accepting after N connections, waits
 * for them to end, and exits 0.  Try:
 *
 *   http_server 8080 &  wrk -t2 -c64 -d5s http://127.0.0.1:8080/
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cbcmn.h>

#define REQ_MAX 8192 /* request line and headers; more is 431 */
#define BODY "Hello, world!\n"
#define IDLE_S 30

struct server {
	int listen_fd;
	long exit_after; /* 0: never */
};

/* One connection's input: what was received and not yet consumed. */
struct conn {
	int fd;
	char buf[REQ_MAX];
	size_t len;
};

/* Send all of text; false if the client is gone. */
static bool send_all(cbcmn_cx *cx, int fd, const char *text, size_t len)
{
	return cbcmn_send(cx, fd, text, len, MSG_WAITALL) == (int64_t)len;
}

static bool respond(cbcmn_cx *cx, int fd, const char *status, const char *body, bool head,
		    bool keep_alive)
{
	char out[512];
	int n = snprintf(out, sizeof(out),
			 "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n%s\r\n%s",
			 status, strlen(body), keep_alive ? "" : "Connection: close\r\n",
			 head ? "" : body);
	return send_all(cx, fd, out, (size_t)n);
}

/* The value of header `name` in the header block hdrs (lines ending in
 * \r\n), copied into out; false if absent. */
static bool header(const char *hdrs, const char *name, char *out, size_t cap)
{
	size_t nl = strlen(name);
	/* Line by line; a NUL byte inside a line ends the block (strstr()
	 * stops there: no next line). */
	for (const char *l = hdrs, *eol; *l; l = eol + 2) {
		if (!(eol = strstr(l, "\r\n")))
			return false;
		if (!strncasecmp(l, name, nl) && l[nl] == ':') {
			const char *v = l + nl + 1;
			v += strspn(v, " \t");
			size_t len = strcspn(v, "\r");
			while (len && (v[len - 1] == ' ' || v[len - 1] == '\t'))
				len--;
			snprintf(out, cap, "%.*s", (int)len, v);
			return true;
		}
	}
	return false;
}

/* Read until c->buf holds a whole header block; its length with the final
 * blank line, 0 at EOF or error, -1 if it does not fit. */
static int64_t read_head(cbcmn_cx *cx, struct conn *c)
{
	for (;;) {
		char *end = c->len ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
		if (end)
			return end + 4 - c->buf;
		if (c->len == sizeof(c->buf) - 1) /* one byte kept for the NUL */
			return -1;
		int64_t n = cbcmn_recv(cx, c->fd, c->buf + c->len, sizeof(c->buf) - 1 - c->len, 0);
		if (n <= 0)
			return 0;
		c->len += (size_t)n;
	}
}

/* Drop `len` bytes of request body: what is buffered, then from the socket. */
static bool skip_body(cbcmn_cx *cx, struct conn *c, unsigned long long len)
{
	size_t have = len < c->len ? (size_t)len : c->len;
	memmove(c->buf, c->buf + have, c->len - have);
	c->len -= have;
	len -= have;
	while (len) {
		int64_t n = cbcmn_recv(cx, c->fd, c->buf, len < sizeof(c->buf) ? len : sizeof(c->buf), 0);
		if (n <= 0)
			return false;
		len -= (unsigned long long)n;
	}
	return true;
}

/* Answer one request; false when the connection is to close. */
static bool one_request(cbcmn_cx *cx, struct conn *c)
{
	int64_t head_len = read_head(cx, c);
	if (head_len == 0)
		return false; /* the client closed, between requests: normal */
	if (head_len < 0) {
		respond(cx, c->fd, "431 Request Header Fields Too Large", "", false, false);
		return false;
	}
	char saved = c->buf[head_len];
	c->buf[head_len] = 0; /* the header block as one string */
	char method[16], target[1024], version[16], value[256];
	/* A NUL byte before the request line's end hides its \r\n from
	 * strstr(): no request line, a 400 (the headers are then none). */
	const char *eol = strstr(c->buf, "\r\n"), *hdrs = eol ? eol + 2 : "";
	bool ok = eol && sscanf(c->buf, "%15[A-Z] %1023[^ \r\n] HTTP/%15[0-9.]\r", method, target, version) == 3 &&
		  (!strcmp(version, "1.1") || !strcmp(version, "1.0"));
	bool keep_alive = false, head = false;
	bool chunked = header(hdrs, "Transfer-Encoding", value, sizeof(value));
	unsigned long long body_len = 0;
	if (ok) {
		if (!strcmp(version, "1.1"))
			keep_alive = !header(hdrs, "Connection", value, sizeof(value)) ||
				     strcasecmp(value, "close");
		else
			keep_alive = header(hdrs, "Connection", value, sizeof(value)) &&
				     !strcasecmp(value, "keep-alive");
		head = !strcmp(method, "HEAD");
		if (header(hdrs, "Content-Length", value, sizeof(value))) {
			char *end;
			errno = 0;
			body_len = strtoull(value, &end, 10);
			ok = !errno && end != value && !*end && value[0] != '-';
		}
	}
	c->buf[head_len] = saved;
	/* The request is consumed; what follows is the next one (pipelining). */
	memmove(c->buf, c->buf + head_len, c->len - (size_t)head_len);
	c->len -= (size_t)head_len;
	if (!ok)
		return respond(cx, c->fd, "400 Bad Request", "bad request\n", false, false), false;
	if (chunked)
		return respond(cx, c->fd, "501 Not Implemented", "chunked bodies are not read\n", head,
			       false), false;
	if (body_len && !skip_body(cx, c, body_len))
		return false;
	if (strcmp(method, "GET") && !head)
		return respond(cx, c->fd, "405 Method Not Allowed", "GET or HEAD only\n", false, keep_alive) &&
		       keep_alive;
	if (strcmp(target, "/"))
		return respond(cx, c->fd, "404 Not Found", "not found\n", head, keep_alive) && keep_alive;
	return respond(cx, c->fd, "200 OK", BODY, head, keep_alive) && keep_alive;
}

static int64_t connection(cbcmn_cx *cx, void *arg)
{
	struct conn *c = arg;
	/* A client that sends nothing (or never finishes a request) for
	 * IDLE_S is dropped: each of this task's calls times out then. */
	cbcmn_io_set_timeout(cx, (uint64_t)IDLE_S * 1000000000);
	while (one_request(cx, c))
		;
	cbcmn_close(cx, c->fd);
	free(c);
	return 0; /* a client that went away is not the server's failure */
}

/* accept(2) errors that pass: out of descriptors or memory (until some
 * connections end), or a client gone before it was taken.  A server that
 * stopped at them would stop serving for good. */
static bool accept_error_passes(int64_t err)
{
	return err == -EMFILE || err == -ENFILE || err == -ENOBUFS || err == -ENOMEM ||
	       err == -ECONNABORTED || err == -EPROTO;
}

static int64_t serve(cbcmn_cx *cx, void *arg)
{
	struct server *s = arg;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	long served = 0;
	int64_t fd = 0;
	while (!s->exit_after || served < s->exit_after) {
		fd = cbcmn_accept(cx, s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0 && accept_error_passes(fd)) {
			cbcmn_sleep(cx, 10 * 1000000); /* let connections end, then again */
			continue;
		}
		if (fd < 0)
			break;
		/* Filled in before the spawn: the task may start at once, on
		 * another executor. */
		struct conn *c = malloc(sizeof(*c));
		if (c) {
			c->fd = (int)fd;
			c->len = 0;
		}
		if (!c || (rc = cbcmn_nursery_spawn(cx, n, connection, c, NULL)) != 0) {
			free(c);
			cbcmn_close(cx, (int)fd);
			rc = rc ? rc : -ENOMEM;
			break;
		}
		served++;
	}
	cbcmn_nursery_await_all(cx, n); /* the connections still open end first */
	printf("http_server: served %ld connections\n", served);
	return fd < 0 ? fd : rc;
}

/* A listening socket on 127.0.0.1:port (port 0: the kernel picks), its
 * port in *bound; -errno on failure. */
static int listen_on(int port, int *bound)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 512) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	*bound = ntohs(a.sin_port);
	return fd;
}

/* A whole number in [min, max], or -1. */
static long arg_num(const char *s, long min, long max)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	return errno || end == s || *end || v < min || v > max ? -1 : v;
}

int main(int argc, char **argv)
{
	struct server s = {0};
	long port = argc > 1 ? arg_num(argv[1], 0, 65535) : -1;
	if (argc == 4 && !strcmp(argv[2], "--exit-after"))
		s.exit_after = arg_num(argv[3], 1, 1000000000);
	if (port < 0 || (argc != 2 && argc != 4) || s.exit_after < 0 ||
	    (argc == 4 && !s.exit_after)) {
		fprintf(stderr, "usage: http_server PORT (0..65535, 0: any free) [--exit-after N]\n");
		return 2;
	}
	int bound = 0;
	if ((s.listen_fd = listen_on((int)port, &bound)) < 0) {
		fprintf(stderr, "http_server: listen on 127.0.0.1:%ld: %s\n", port, strerror(-s.listen_fd));
		return 1;
	}
	printf("http_server: listening on 127.0.0.1:%d\n", bound);
	fflush(stdout);

	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(NULL, &rt);
	if (rc) {
		fprintf(stderr, "http_server: cbcmn_runtime_create: %s\n", cbcmn_strerror(rc));
		return 1;
	}
	int64_t result = 0;
	rc = cbcmn_runtime_run(rt, serve, &s, &result);
	cbcmn_runtime_destroy(rt);
	close(s.listen_fd);
	if (rc || result) {
		fprintf(stderr, "http_server: %s\n", cbcmn_strerror(rc ? rc : (int)result));
		return 1;
	}
	return 0;
}
