/* echo_server: a TCP echo server, one task per connection.
 *
 *   echo_server PORT [--exit-after N]
 *
 * Listens on 127.0.0.1:PORT (0: a free port; the first line of output says
 * which) and sends back whatever each client sends.  The root task accepts;
 * each connection gets a child task in the server's nursery, which reads
 * and writes with cbcmn_recv() / cbcmn_send(): they block the task, never
 * the executor's thread, so thousands of connections take thousands of
 * small fibers, not threads.  With --exit-after N the server stops
 * accepting after N connections, waits for them to end, and exits 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cbcmn.h>

struct server {
	int listen_fd;
	long exit_after; /* 0: never */
};

static int64_t echo(cbcmn_cx *cx, void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[4096];
	int64_t n;
	while ((n = cbcmn_recv(cx, fd, buf, sizeof(buf), 0)) > 0)
		if ((n = cbcmn_send(cx, fd, buf, (size_t)n, MSG_WAITALL)) < 0)
			break;
	cbcmn_close(cx, fd);
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
		if ((rc = cbcmn_nursery_spawn(cx, n, echo, (void *)(intptr_t)fd, NULL)) != 0) {
			cbcmn_close(cx, (int)fd);
			break;
		}
		served++;
	}
	cbcmn_nursery_await_all(cx, n); /* the connections still open end first */
	printf("echo_server: served %ld connections\n", served);
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
		fprintf(stderr, "usage: echo_server PORT (0..65535, 0: any free) [--exit-after N]\n");
		return 2;
	}
	int bound = 0;
	if ((s.listen_fd = listen_on((int)port, &bound)) < 0) {
		fprintf(stderr, "echo_server: listen on 127.0.0.1:%ld: %s\n", port, strerror(-s.listen_fd));
		return 1;
	}
	printf("echo_server: listening on 127.0.0.1:%d\n", bound);
	fflush(stdout);

	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(NULL, &rt);
	if (rc) {
		fprintf(stderr, "echo_server: cbcmn_runtime_create: %s\n", cbcmn_strerror(rc));
		return 1;
	}
	int64_t result = 0;
	rc = cbcmn_runtime_run(rt, serve, &s, &result);
	cbcmn_runtime_destroy(rt);
	close(s.listen_fd);
	if (rc || result) {
		fprintf(stderr, "echo_server: %s\n", cbcmn_strerror(rc ? rc : (int)result));
		return 1;
	}
	return 0;
}
