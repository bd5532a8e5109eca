/* tls_echo: a TLS echo server with OpenSSL over the fiber I/O.
 *
 *   tls_echo PORT CERT KEY [--exit-after N]
 *
 * Listens on 127.0.0.1:PORT (0: a free port; the first line of output says
 * which) with the certificate chain CERT and private key KEY (PEM), and
 * sends back whatever each client sends over TLS.  Make a throwaway pair:
 *
 *   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
 *       -nodes -keyout key.pem -out cert.pem -days 1 -subj /CN=localhost
 *   tls_echo 8443 cert.pem key.pem &
 *   openssl s_client -connect 127.0.0.1:8443 -quiet
 *
 * OpenSSL does its own reads and writes on a non-blocking socket.  When it
 * cannot go on it says SSL_ERROR_WANT_READ or SSL_ERROR_WANT_WRITE; the task
 * then waits with cbcmn_poll() for the socket to be readable or writable
 * (blocking the task, not the executor's thread) and makes the same call
 * again.  That is the whole integration: any library that drives its own
 * non-blocking descriptor fits the same way (docs/IO.md, "Foreign
 * descriptors").  A client idle for IDLE_S seconds is dropped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cbcmn.h>

#define IDLE_S 30

struct server {
	int listen_fd;
	long exit_after; /* 0: never */
	SSL_CTX *ctx;    /* shared: OpenSSL locks what it shares */
};

struct conn {
	struct server *s;
	int fd;
};

/* After an SSL call on c's socket returned rc: > 0 it is done; 0 it waited
 * with cbcmn_poll() until the socket is ready for what OpenSSL wants, and
 * the same call is to be made again; < 0 it failed: minus the SSL error
 * (-SSL_ERROR_ZERO_RETURN: the peer closed cleanly), or -SSL_ERROR_SYSCALL
 * when the poll timed out or the task was cancelled. */
static int ssl_wait(cbcmn_cx *cx, SSL *ssl, int fd, int rc)
{
	if (rc > 0)
		return rc;
	int err = SSL_get_error(ssl, rc);
	uint32_t events;
	if (err == SSL_ERROR_WANT_READ)
		events = POLLIN;
	else if (err == SSL_ERROR_WANT_WRITE)
		events = POLLOUT;
	else
		return -err;
	int64_t r = cbcmn_poll(cx, fd, events, (int64_t)IDLE_S * 1000000000);
	return r > 0 ? 0 : -SSL_ERROR_SYSCALL;
}

/* The OpenSSL error queue is per thread, and a task may run on several
 * threads over its life: each call clears it first, so that
 * SSL_get_error() reads this call's errors only. */
static int64_t echo(cbcmn_cx *cx, void *arg)
{
	struct conn *c = arg;
	int fd = c->fd, n = -1;
	SSL *ssl = SSL_new(c->s->ctx);
	if (ssl && SSL_set_fd(ssl, fd) == 1) {
		do
			ERR_clear_error();
		while ((n = ssl_wait(cx, ssl, fd, SSL_accept(ssl))) == 0);
	}
	char buf[4096];
	while (n > 0) {
		do
			ERR_clear_error();
		while ((n = ssl_wait(cx, ssl, fd, SSL_read(ssl, buf, sizeof(buf)))) == 0);
		int len = n, w = 0;
		while (len > 0 && w == 0) {
			ERR_clear_error();
			w = ssl_wait(cx, ssl, fd, SSL_write(ssl, buf, len)); /* all of it, or fails */
		}
		if (w < 0)
			n = w;
	}
	if (n == -SSL_ERROR_ZERO_RETURN)
		SSL_shutdown(ssl); /* answer the client's close_notify; best effort */
	SSL_free(ssl);
	cbcmn_close(cx, fd);
	free(c);
	return 0; /* a client that went away or failed its handshake is not the server's failure */
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
		/* Non-blocking: OpenSSL's reads and writes must never block
		 * the executor's thread. */
		fd = cbcmn_accept(cx, s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0 && accept_error_passes(fd)) {
			cbcmn_sleep(cx, 10 * 1000000); /* let connections end, then again */
			continue;
		}
		if (fd < 0)
			break;
		/* Filled in before the spawn: the task may start at once, on
		 * another executor. */
		struct conn *c = malloc(sizeof(*c));
		if (c)
			*c = (struct conn){.s = s, .fd = (int)fd};
		if (!c || (rc = cbcmn_nursery_spawn(cx, n, echo, c, NULL)) != 0) {
			free(c);
			cbcmn_close(cx, (int)fd);
			rc = rc ? rc : -ENOMEM;
			break;
		}
		served++;
	}
	cbcmn_nursery_await_all(cx, n);
	printf("tls_echo: served %ld connections\n", served);
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

/* The TLS context for CERT and KEY; NULL after saying why on one line. */
static SSL_CTX *tls_context(const char *cert, const char *key)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	const char *what = "SSL_CTX_new";
	if (ctx && (what = cert, SSL_CTX_use_certificate_chain_file(ctx, cert) == 1) &&
	    (what = key, SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1) &&
	    (what = "the key does not match the certificate", SSL_CTX_check_private_key(ctx) == 1)) {
		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
		return ctx;
	}
	char err[256] = "";
	ERR_error_string_n(ERR_get_error(), err, sizeof(err));
	fprintf(stderr, "tls_echo: %s: %s\n", what, err);
	SSL_CTX_free(ctx);
	return NULL;
}

int main(int argc, char **argv)
{
	struct server s = {0};
	long port = argc > 1 ? arg_num(argv[1], 0, 65535) : -1;
	if (argc == 6 && !strcmp(argv[4], "--exit-after"))
		s.exit_after = arg_num(argv[5], 1, 1000000000);
	if (port < 0 || (argc != 4 && argc != 6) || s.exit_after < 0 ||
	    (argc == 6 && !s.exit_after)) {
		fprintf(stderr, "usage: tls_echo PORT (0..65535, 0: any free) CERT KEY [--exit-after N]\n");
		return 2;
	}
	/* OpenSSL writes to the socket with write(2): a client gone would
	 * raise SIGPIPE and end the server.  Ignored, it is an EPIPE. */
	signal(SIGPIPE, SIG_IGN);
	if (!(s.ctx = tls_context(argv[2], argv[3])))
		return 1;
	int bound = 0;
	if ((s.listen_fd = listen_on((int)port, &bound)) < 0) {
		fprintf(stderr, "tls_echo: listen on 127.0.0.1:%ld: %s\n", port, strerror(-s.listen_fd));
		SSL_CTX_free(s.ctx);
		return 1;
	}
	printf("tls_echo: listening on 127.0.0.1:%d\n", bound);
	fflush(stdout);

	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(NULL, &rt);
	int64_t result = 0;
	if (rc == 0) {
		rc = cbcmn_runtime_run(rt, serve, &s, &result);
		cbcmn_runtime_destroy(rt);
	}
	close(s.listen_fd);
	SSL_CTX_free(s.ctx);
	if (rc || result) {
		fprintf(stderr, "tls_echo: %s\n", cbcmn_strerror(rc ? rc : (int)result));
		return 1;
	}
	return 0;
}
