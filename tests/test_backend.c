/* test_backend.c: the choice of I/O backend (cbcmn_config.backend,
 * CBCMN_BACKEND) and the epoll backend where io_uring is refused, as in a
 * container: a seccomp filter makes io_uring_setup fail with EPERM, as
 * Docker's default profile does (docs/IO.md, "Backends").
 *
 * Each case runs in a child: a seccomp filter cannot be taken off, and the
 * environment variable is the process's. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cbcmn.h"
#include "cbcmn_io.h"
#include "helpers.h"

#define MS 1000000ull
#define CHILD_SKIP 77

/* In the child: a failed check says where, and the child fails. */
#define CHILD_CHECK(c)                                                         \
	do {                                                                    \
		if (!(c)) {                                                     \
			fprintf(stderr, "child: %s:%d: %s\n", __FILE__, __LINE__, #c); \
			_exit(1);                                               \
		}                                                               \
	} while (0)

/* Make io_uring's three system calls fail with err, as a container's
 * seccomp profile does (Docker's answers EPERM). */
static void deny_io_uring(int err)
{
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
	CHILD_CHECK(f != NULL);
	CHILD_CHECK(seccomp_rule_add(f, SCMP_ACT_ERRNO(err), SCMP_SYS(io_uring_setup), 0) == 0);
	CHILD_CHECK(seccomp_rule_add(f, SCMP_ACT_ERRNO(err), SCMP_SYS(io_uring_enter), 0) == 0);
	CHILD_CHECK(seccomp_rule_add(f, SCMP_ACT_ERRNO(err), SCMP_SYS(io_uring_register), 0) == 0);
	CHILD_CHECK(seccomp_load(f) == 0);
	seccomp_release(f);
}

/* Run body in a child (at most T_STALL_S), after setting CBCMN_BACKEND to
 * env (NULL: unset) and, if err, denying io_uring with it. */
static void in_child(void (*body)(void), const char *env, int err)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(T_STALL_S);
		if (env)
			setenv("CBCMN_BACKEND", env, 1);
		else
			unsetenv("CBCMN_BACKEND");
		if (err)
			deny_io_uring(err);
		body();
		fflush(NULL);
		_exit(0);
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == CHILD_SKIP)
		T_SKIP("the child could not set up what it tests");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("child %s %d", WIFEXITED(st) ? "exited" : "killed by signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

static uint32_t backend_of(cbcmn_runtime *rt)
{
	cbcmn_stats st;
	CHILD_CHECK(cbcmn_stats_snapshot(rt, &st, NULL, 0) == 0);
	return st.backend;
}

/* ---- a workload: fork-join, pipes, sockets, a stream, an acceptor --------- */

static int64_t fib(cbcmn_cx *cx, void *arg)
{
	int64_t n = (int64_t)(intptr_t)arg;
	if (n < 2)
		return n;
	cbcmn_nursery *nr;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nr) != 0)
		return -1;
	cbcmn_task *a, *b;
	int64_t ra = 0, rb = 0;
	if (cbcmn_nursery_spawn(cx, nr, fib, (void *)(intptr_t)(n - 1), &a) != 0 ||
	    cbcmn_nursery_spawn(cx, nr, fib, (void *)(intptr_t)(n - 2), &b) != 0)
		return -1;
	cbcmn_task_join(cx, a, &ra);
	cbcmn_task_join(cx, b, &rb);
	cbcmn_nursery_await_all(cx, nr);
	return ra + rb;
}

struct echo {
	int lfd;
	struct sockaddr_in addr;
};

/* Serves one connection: reads 3 bytes, writes them back. */
static int64_t server(cbcmn_cx *cx, void *arg)
{
	struct echo *e = arg;
	int64_t c = cbcmn_accept(cx, e->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0)
		return c;
	char b[3];
	int64_t n = cbcmn_recv(cx, (int)c, b, sizeof(b), MSG_WAITALL);
	int64_t w = n == 3 ? cbcmn_send(cx, (int)c, b, 3, 0) : -EIO;
	cbcmn_close(cx, (int)c);
	return w == 3 ? 0 : -EIO;
}

static int64_t workload(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	/* CPU only. */
	if (fib(cx, (void *)(intptr_t)15) != 610)
		return 1;
	/* A pipe: the reader waits for readiness, the writer fills it. */
	int p[2];
	if (pipe2(p, O_CLOEXEC))
		return 2;
	char buf[8] = {0};
	if (cbcmn_write(cx, p[1], "pipe", 4) != 4 || cbcmn_read(cx, p[0], buf, 8) != 4 ||
	    memcmp(buf, "pipe", 4))
		return 3;
	/* A read that must wait, with a timeout: nothing comes. */
	cbcmn_io_set_timeout(cx, 20 * MS);
	if (cbcmn_read(cx, p[0], buf, 8) != -ETIMEDOUT)
		return 4;
	cbcmn_io_set_timeout(cx, 0);
	cbcmn_close(cx, p[0]);
	cbcmn_close(cx, p[1]);
	/* TCP on loopback: accept and connect through the runtime. */
	struct echo e = {.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
	e.addr.sin_family = AF_INET;
	e.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t al = sizeof(e.addr);
	if (e.lfd < 0 || bind(e.lfd, (struct sockaddr *)&e.addr, sizeof(e.addr)) ||
	    listen(e.lfd, 8) || getsockname(e.lfd, (struct sockaddr *)&e.addr, &al))
		return 5;
	cbcmn_nursery *nr;
	cbcmn_task *srv;
	if (cbcmn_nursery_open(rt, cx, &nr) || cbcmn_nursery_spawn(cx, nr, server, &e, &srv))
		return 6;
	int64_t s = cbcmn_socket(cx, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || cbcmn_connect(cx, (int)s, (struct sockaddr *)&e.addr, sizeof(e.addr)) != 0)
		return 7;
	if (cbcmn_send(cx, (int)s, "abc", 3, 0) != 3 || cbcmn_recv(cx, (int)s, buf, 3, MSG_WAITALL) != 3 ||
	    memcmp(buf, "abc", 3))
		return 8;
	int64_t sr = -1;
	cbcmn_task_join(cx, srv, &sr);
	cbcmn_nursery_await_all(cx, nr);
	if (sr != 0)
		return 9;
	cbcmn_close(cx, (int)s);
	/* A stream over a socket pair. */
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return 10;
	cbcmn_stream *st;
	if (cbcmn_stream_open(cx, sv[0], &st))
		return 11;
	if (write(sv[1], "stream", 6) != 6)
		return 12;
	close(sv[1]);
	size_t got = 0;
	const void *d;
	int64_t n;
	while ((n = cbcmn_stream_recv(cx, st, &d)) > 0 && got + (size_t)n <= sizeof(buf)) {
		memcpy(buf + got, d, (size_t)n);
		got += (size_t)n;
	}
	if (n != 0 || got != 6 || memcmp(buf, "stream", 6) || cbcmn_stream_close(cx, st))
		return 13;
	close(sv[0]);
	close(e.lfd);
	return 0;
}

static void run_workload(cbcmn_runtime *rt)
{
	int64_t r = -1;
	CHILD_CHECK(cbcmn_runtime_run(rt, workload, NULL, &r) == 0);
	if (r != 0)
		fprintf(stderr, "child: workload step %lld failed\n", (long long)r);
	CHILD_CHECK(r == 0);
}

/* ---- (a) no io_uring: the default falls back to epoll --------------------- */

static void fallback_body(void)
{
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 2;
	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(&c, &rt);
	if (rc)
		fprintf(stderr, "child: create: %s\n", cbcmn_strerror(rc));
	CHILD_CHECK(rc == 0);
	CHILD_CHECK(backend_of(rt) == CBCMN_BACKEND_EPOLL);
	run_workload(rt);
	CHILD_CHECK(cbcmn_runtime_destroy(rt) == 0);
}

static void test_no_io_uring_falls_back_to_epoll(void **state)
{
	(void)state;
	in_child(fallback_body, NULL, EPERM);
}

static void test_io_uring_enosys_or_eacces_falls_back(void **state)
{
	(void)state;
	in_child(fallback_body, NULL, ENOSYS);
	in_child(fallback_body, "auto", EACCES);
}

/* ---- (b) io_uring asked for where it is refused: the kernel's error -------- */

static void forced_io_uring_body(void)
{
	cbcmn_runtime *rt;
	CHILD_CHECK(cbcmn_runtime_create(NULL, &rt) == -EPERM);
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.backend = CBCMN_BACKEND_IO_URING;
	unsetenv("CBCMN_BACKEND");
	CHILD_CHECK(cbcmn_runtime_create(&c, &rt) == -EPERM);
}

static void test_forced_io_uring_without_it_fails(void **state)
{
	(void)state;
	in_child(forced_io_uring_body, "io_uring", EPERM);
}

/* A resource error is the caller's to see, never a reason to fall back. */
static void enomem_body(void)
{
	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(NULL, &rt);
	CHILD_CHECK(rc == -ENOMEM || rc == CBCMN_EMEMLOCK);
}

static void test_resource_errors_do_not_fall_back(void **state)
{
	(void)state;
	in_child(enomem_body, NULL, ENOMEM);
}

/* ---- (c) the variable and the field -------------------------------------- */

static void bad_env_body(void)
{
	cbcmn_runtime *rt;
	CHILD_CHECK(cbcmn_runtime_create(NULL, &rt) == -EINVAL);
	/* An explicit choice does not read it. */
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 1;
	c.backend = CBCMN_BACKEND_EPOLL;
	CHILD_CHECK(cbcmn_runtime_create(&c, &rt) == 0);
	CHILD_CHECK(backend_of(rt) == CBCMN_BACKEND_EPOLL);
	CHILD_CHECK(cbcmn_runtime_destroy(rt) == 0);
}

static void test_bad_env_value_is_einval(void **state)
{
	(void)state;
	in_child(bad_env_body, "kqueue", 0);
	in_child(bad_env_body, "EPOLL", 0);
}

static void env_epoll_body(void)
{
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 2;
	cbcmn_runtime *rt;
	CHILD_CHECK(cbcmn_runtime_create(&c, &rt) == 0);
	CHILD_CHECK(backend_of(rt) == CBCMN_BACKEND_EPOLL);
	run_workload(rt);
	CHILD_CHECK(cbcmn_runtime_destroy(rt) == 0);
	/* The config's explicit choice wins over the variable. */
	c.backend = CBCMN_BACKEND_IO_URING;
	int rc = cbcmn_runtime_create(&c, &rt);
	if (rc == -EPERM || rc == -ENOSYS)
		_exit(0); /* no io_uring here at all */
	CHILD_CHECK(rc == 0);
	CHILD_CHECK(backend_of(rt) == CBCMN_BACKEND_IO_URING);
	CHILD_CHECK(cbcmn_runtime_destroy(rt) == 0);
}

static void test_env_picks_epoll_unless_the_config_does(void **state)
{
	(void)state;
	in_child(env_epoll_body, "epoll", 0);
}

static void test_bad_config_value_is_einval(void **state)
{
	(void)state;
	cbcmn_config c;
	cbcmn_config_init(&c);
	assert_int_equal(c.backend, CBCMN_BACKEND_AUTO);
	c.backend = 3;
	cbcmn_runtime *rt;
	assert_int_equal(cbcmn_runtime_create(&c, &rt), -EINVAL);
	assert_string_equal(cbcmn_backend_name(CBCMN_BACKEND_EPOLL), "epoll");
	assert_string_equal(cbcmn_backend_name(CBCMN_BACKEND_IO_URING), "io_uring");
	assert_string_equal(cbcmn_backend_name(9), "?");
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_no_io_uring_falls_back_to_epoll),
		T_WATCHED_TEST(test_io_uring_enosys_or_eacces_falls_back),
		T_WATCHED_TEST(test_forced_io_uring_without_it_fails),
		T_WATCHED_TEST(test_resource_errors_do_not_fall_back),
		T_WATCHED_TEST(test_bad_env_value_is_einval),
		T_WATCHED_TEST(test_env_picks_epoll_unless_the_config_does),
		T_WATCHED_TEST(test_bad_config_value_is_einval),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
