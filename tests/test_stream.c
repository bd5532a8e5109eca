/* test_stream.c: multishot receive streams and acceptors (cbcmn_io.h). */
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "helpers.h"

static int64_t run_on_0(cbcmn_runtime *rt, cbcmn_task_fn fn, void *arg)
{
	return t_run_pinned(rt, 0, fn, arg);
}

/* ---- streams ------------------------------------------------------------------ */

#define BIG (8u << 20) /* 8 MiB: 2048+ buffers of 4 KiB go round the ring */

struct xfer {
	int sv[2];
	uint8_t *sent;
	size_t got;
	int bad;
	int64_t end;
};

static void *writer_thread(void *arg)
{
	struct xfer *x = arg;
	size_t off = 0;
	while (off < BIG) {
		size_t chunk = 1 + (size_t)rand() % 65536;
		if (chunk > BIG - off)
			chunk = BIG - off;
		ssize_t n = write(x->sv[1], x->sent + off, chunk);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	shutdown(x->sv[1], SHUT_WR);
	return NULL;
}

static int64_t stream_reader(cbcmn_cx *cx, void *arg)
{
	struct xfer *x = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, x->sv[0], &s);
	if (rc)
		return rc;
	for (;;) {
		const void *data;
		int64_t n = cbcmn_stream_recv(cx, s, &data);
		if (n <= 0) {
			x->end = n;
			break;
		}
		if (x->got + (size_t)n > BIG || memcmp(data, x->sent + x->got, (size_t)n) != 0)
			x->bad = 1;
		x->got += (size_t)n;
	}
	return cbcmn_stream_close(cx, s);
}

static bool have_streams(cbcmn_runtime *rt);

static void test_stream_big_transfer(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	if (!have_streams(rt)) {
		t_destroy(rt);
		T_SKIP("this kernel has no multishot recv with buffer rings (6.0)");
	}
	struct xfer x = {.sent = malloc(BIG)};
	assert_non_null(x.sent);
	for (size_t i = 0; i < BIG; i++)
		x.sent[i] = (uint8_t)(i * 131 + (i >> 12));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x.sv), 0);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, writer_thread, &x), 0);
	assert_int_equal(run_on_0(rt, stream_reader, &x), 0);
	pthread_join(th, NULL);
	assert_int_equal(x.bad, 0);
	assert_int_equal(x.got, BIG);
	assert_int_equal(x.end, 0); /* EOF */
	close(x.sv[0]);
	close(x.sv[1]);
	free(x.sent);
	t_destroy(rt);
}

static int64_t probe_stream(cbcmn_cx *cx, void *arg)
{
	int *sv = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, sv[0], &s);
	if (rc)
		return rc;
	return cbcmn_stream_close(cx, s);
}

static bool have_streams(cbcmn_runtime *rt)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	int64_t r = run_on_0(rt, probe_stream, sv);
	close(sv[0]);
	close(sv[1]);
	if (r != 0 && r != -EOPNOTSUPP)
		fail_msg("cbcmn_stream_open: %s", cbcmn_strerror(r));
	return r == 0;
}

/* Streams closed with data still queued give every buffer back: more
 * streams than the ring has buffers, each left holding some. */
static int64_t many_streams(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (int i = 0; i < 1500; i++) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
			return -errno;
		char msg[100] = {0};
		cbcmn_stream *s;
		int rc = cbcmn_stream_open(cx, sv[0], &s);
		if (rc)
			return rc;
		/* Three separate chunks; take one, leave the others queued. */
		for (int k = 0; k < 3; k++) {
			if (write(sv[1], msg, sizeof(msg)) != sizeof(msg))
				return -EIO;
			const void *d;
			if (k == 0 && cbcmn_stream_recv(cx, s, &d) <= 0)
				return -EIO;
		}
		cbcmn_yield(cx); /* let the kernel post the others */
		if ((rc = cbcmn_stream_close(cx, s)) != 0)
			return rc;
		close(sv[0]);
		close(sv[1]);
	}
	return 0;
}

static void test_stream_buffers_come_back(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	if (!have_streams(rt)) {
		t_destroy(rt);
		T_SKIP("this kernel has no multishot recv with buffer rings (6.0)");
	}
	int fds = t_count_fds();
	assert_int_equal(run_on_0(rt, many_streams, NULL), 0);
	assert_int_equal(t_count_fds(), fds);
	t_destroy(rt);
}

/* A stream used from another executor: -EXDEV, nothing breaks. */
struct xdev {
	cbcmn_stream *s;
	int64_t r;
};

static int64_t use_elsewhere(cbcmn_cx *cx, void *arg)
{
	struct xdev *x = arg;
	const void *d;
	x->r = cbcmn_stream_recv(cx, x->s, &d);
	return 0;
}

static int64_t xdev_main(cbcmn_cx *cx, void *arg)
{
	int *sv = arg;
	struct xdev x = {0};
	int rc = cbcmn_stream_open(cx, sv[0], &x.s);
	if (rc)
		return rc;
	cbcmn_nursery *n;
	if ((rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n)) != 0)
		return rc;
	cbcmn_nursery_spawn_pinned(cx, n, 1, use_elsewhere, &x, NULL);
	cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(x.r == -EXDEV);
	TASK_CHECK(cbcmn_stream_recv(NULL, x.s, NULL) == -EINVAL);
	return cbcmn_stream_close(cx, x.s);
}

static void test_stream_other_executor(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	if (!have_streams(rt)) {
		t_destroy(rt);
		T_SKIP("this kernel has no multishot recv with buffer rings (6.0)");
	}
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(run_on_0(rt, xdev_main, sv), 0);
	ASSERT_TASK_CHECKS();
	close(sv[0]);
	close(sv[1]);
	t_destroy(rt);
}

/* Cancelled while waiting for data: CBCMN_ECANCELED, and closing works. */
struct cw {
	int sv[2];
	cbcmn_nursery *n;
	_Atomic int waiting;
	int64_t r, close_r;
};

static int64_t cancel_waiter(cbcmn_cx *cx, void *arg)
{
	struct cw *c = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, c->sv[0], &s);
	if (rc)
		return rc;
	const void *d;
	atomic_store(&c->waiting, 1);
	c->r = cbcmn_stream_recv(cx, s, &d);
	c->close_r = cbcmn_stream_close(cx, s);
	return 0;
}

static int64_t cancel_main(cbcmn_cx *cx, void *arg)
{
	struct cw *c = arg;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &c->n))
		return -1;
	cbcmn_nursery_spawn_pinned(cx, c->n, 0, cancel_waiter, c, NULL);
	while (!atomic_load(&c->waiting))
		cbcmn_yield(cx);
	for (int i = 0; i < 100; i++)
		cbcmn_yield(cx);
	cbcmn_nursery_cancel(c->n);
	cbcmn_nursery_await_all(cx, c->n);
	return 0;
}

/* The canceller is a task (cancel_main), or a thread outside the runtime
 * while the only executor is parked in its ring: then the cancellation
 * reaches the waiter only through the executor's own list of streams (no
 * registry holds I/O waits).  Either way promptly. */
static void stream_cancel_case(bool from_thread)
{
	cbcmn_runtime *rt = t_runtime(from_thread ? 1 : 2);
	if (!have_streams(rt)) {
		t_destroy(rt);
		T_SKIP("this kernel has no multishot recv with buffer rings (6.0)");
	}
	struct cw c = {0};
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c.sv), 0);
	uint64_t t0 = t_now_ns();
	if (!from_thread) {
		assert_int_equal(run_on_0(rt, cancel_main, &c), 0);
	} else {
		assert_int_equal(cbcmn_nursery_open(rt, NULL, &c.n), 0);
		assert_int_equal(cbcmn_nursery_spawn(NULL, c.n, cancel_waiter, &c, NULL), 0);
		uint64_t end = t_now_ns() + 10000000000ull;
		while (!atomic_load(&c.waiting) && t_now_ns() < end)
			usleep(1000);
		assert_int_equal(atomic_load(&c.waiting), 1);
		usleep(100000); /* well past the idle spin */
		cbcmn_stats st;
		cbcmn_executor_stats ex;
		assert_int_equal(cbcmn_stats_snapshot(rt, &st, &ex, 1), 0);
		assert_int_equal(ex.state, CBCMN_EXEC_PARKED);
		t0 = t_now_ns();
		assert_int_equal(cbcmn_nursery_cancel(c.n), 0);
		assert_int_equal(cbcmn_nursery_await_all(NULL, c.n), CBCMN_ECANCELED);
	}
	assert_true(t_now_ns() - t0 < 2000000000ull);
	assert_int_equal(c.r, CBCMN_ECANCELED);
	assert_int_equal(c.close_r, 0);
	close(c.sv[0]);
	close(c.sv[1]);
	t_destroy(rt);
}

static void test_stream_cancel(void **state)
{
	(void)state;
	stream_cancel_case(false);
}

static void test_stream_cancel_from_thread(void **state)
{
	(void)state;
	stream_cancel_case(true);
}

/* ---- closing a stream its reader is still inside (issue 12, item 1) ---------- */

/* The reader waits for budget inside cbcmn_stream_recv(): its stream has no
 * waiter then, but it is in use, and closing it must answer -EBUSY instead
 * of freeing it under the reader. */
struct bw {
	int sv[2];
	cbcmn_stream *s;
	_Atomic int stage; /* 1: first chunk taken, about to ask again */
	int64_t r1, r2;
	char got[4];
};

static int64_t budget_reader(cbcmn_cx *cx, void *arg)
{
	struct bw *b = arg;
	const void *d;
	b->r1 = cbcmn_stream_recv(cx, b->s, &d); /* the one syscall it may pay */
	atomic_store(&b->stage, 1);
	b->r2 = cbcmn_stream_recv(cx, b->s, &d); /* waits for budget first */
	if (b->r2 > 0)
		memcpy(b->got, d, (size_t)b->r2 < sizeof(b->got) ? (size_t)b->r2 : sizeof(b->got));
	return 0;
}

static int64_t budget_close_main(cbcmn_cx *cx, void *arg)
{
	struct bw *b = arg;
	int rc = cbcmn_stream_open(cx, b->sv[0], &b->s);
	if (rc)
		return rc;
	TASK_CHECK(write(b->sv[1], "a", 1) == 1);
	cbcmn_nursery *n;
	if ((rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n)) != 0)
		return rc;
	cbcmn_budget ask = {.syscalls = 1};
	cbcmn_caps none = {.flags = 0}; /* no CapBudget: it cannot recharge itself */
	cbcmn_spawn_opts o = {.budget = &ask, .caps = &none, .placement = CBCMN_PLACE_PINNED,
			      .shard = cbcmn_cx_executor(cx)};
	cbcmn_task *child;
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, budget_reader, b, &o, &child) == 0);
	while (!atomic_load(&b->stage))
		cbcmn_yield(cx);
	for (int i = 0; i < 20; i++)
		cbcmn_yield(cx); /* the reader is now waiting for budget */
	TASK_CHECK(cbcmn_stream_close(cx, b->s) == -EBUSY);
	TASK_CHECK(write(b->sv[1], "bc", 2) == 2);
	cbcmn_budget more = {.syscalls = 10};
	TASK_CHECK(cbcmn_budget_recharge(cx, child, &more) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(cbcmn_task_join(cx, child, NULL) == 0);
	return cbcmn_stream_close(cx, b->s);
}

static void test_close_during_budget_wait_is_ebusy(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	if (!have_streams(rt)) {
		t_destroy(rt);
		T_SKIP("this kernel has no multishot recv with buffer rings (6.0)");
	}
	struct bw b = {0};
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b.sv), 0);
	assert_int_equal(run_on_0(rt, budget_close_main, &b), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(b.r1, 1);
	assert_int_equal(b.r2, 2);
	assert_memory_equal(b.got, "bc", 2);
	close(b.sv[0]);
	close(b.sv[1]);
	t_destroy(rt);
}

/* ---- acceptors ------------------------------------------------------------------ */

static int listener(uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 512) ||
	    getsockname(fd, (struct sockaddr *)&a, &al))
		return -1;
	*port = ntohs(a.sin_port);
	return fd;
}

struct acc {
	int lfd;
	uint16_t port;
	int nconn;
	int accepted;
	int queued_left; /* connections made but never taken */
};

static int64_t acceptor_main(cbcmn_cx *cx, void *arg)
{
	struct acc *a = arg;
	cbcmn_acceptor *ac;
	int rc = cbcmn_acceptor_open(cx, a->lfd, SOCK_CLOEXEC, &ac);
	if (rc)
		return rc;
	int cfd[64];
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(a->port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	for (int i = 0; i < a->nconn + a->queued_left; i++) {
		cfd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (cfd[i] < 0 || cbcmn_connect(cx, cfd[i], (struct sockaddr *)&sa, sizeof(sa)) != 0)
			return -EIO;
	}
	for (int i = 0; i < a->nconn; i++) {
		int64_t fd = cbcmn_acceptor_next(cx, ac);
		TASK_CHECK(fd >= 0);
		if (fd >= 0) {
			a->accepted++;
			close((int)fd);
		}
	}
	for (int k = 0; k < 100; k++)
		cbcmn_yield(cx); /* the rest arrive and wait in the queue */
	rc = cbcmn_acceptor_close(cx, ac); /* closes those */
	for (int i = 0; i < a->nconn + a->queued_left; i++)
		close(cfd[i]);
	return rc;
}

static void test_acceptor(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct acc a = {.nconn = 40, .queued_left = 10};
	a.lfd = listener(&a.port);
	assert_true(a.lfd >= 0);
	int fds = t_count_fds();
	int64_t r = run_on_0(rt, acceptor_main, &a);
	if (r == -EOPNOTSUPP) {
		close(a.lfd);
		t_destroy(rt);
		T_SKIP("this kernel has no multishot accept (5.19)");
	}
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(a.accepted, 40);
	assert_int_equal(t_count_fds(), fds); /* the 10 never taken were closed */
	close(a.lfd);
	t_destroy(rt);
}

static void test_bad_input(void **state)
{
	(void)state;
	cbcmn_stream *s;
	cbcmn_acceptor *a;
	assert_int_equal(cbcmn_stream_open(NULL, 0, &s), -EINVAL);
	assert_int_equal(cbcmn_stream_close(NULL, NULL), -EINVAL);
	assert_int_equal(cbcmn_acceptor_open(NULL, 0, 0, &a), -EINVAL);
	assert_int_equal(cbcmn_acceptor_next(NULL, NULL), -EINVAL);
	assert_int_equal(cbcmn_acceptor_close(NULL, NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_stream_big_transfer),
		T_WATCHED_TEST(test_stream_buffers_come_back),
		T_WATCHED_TEST(test_stream_other_executor),
		T_WATCHED_TEST(test_stream_cancel),
		T_WATCHED_TEST(test_stream_cancel_from_thread),
		T_WATCHED_TEST(test_close_during_budget_wait_is_ebusy),
		T_WATCHED_TEST(test_acceptor),
		T_WATCHED_TEST(test_bad_input),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
