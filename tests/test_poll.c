/* test_poll: cbcmn_poll() waits in a task for a descriptor that another
 * library drives (cbcmn_io.h, docs/IO.md "Foreign descriptors"): readiness
 * of pipes and sockets, hang-ups and errors, timeouts (none, zero, short,
 * huge, the task's own), cancellation while waiting and racing readiness,
 * bad descriptors and bad events, descriptors closed while polled, and
 * many tasks polling at once, on one executor and across two.  Each check
 * holds on both backends (make test runs the suite again with
 * CBCMN_BACKEND=epoll); where they differ (a close while polled) the test
 * says which it expects. */
#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MS 1000000ll

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000l};
	nanosleep(&ts, NULL);
}

/* Wait (sleeping in the task) until *v reaches want; false after T_STALL_NS. */
static bool wait_for(cbcmn_cx *cx, _Atomic int *v, int want)
{
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(v) < want) {
		if (t_now_ns() > end)
			return false;
		cbcmn_sleep(cx, 200000);
	}
	return true;
}

/* One task polls fd for events with timeout_ns; the result in rc. */
struct poller {
	int fd;
	uint32_t events;
	int64_t timeout_ns;
	_Atomic int entered;
	_Atomic int returned;
	int64_t rc;
	uint64_t took_ns;
};

static int64_t poller_main(cbcmn_cx *cx, void *arg)
{
	struct poller *p = arg;
	atomic_store(&p->entered, 1);
	uint64_t t0 = t_now_ns();
	p->rc = cbcmn_poll(cx, p->fd, p->events, p->timeout_ns);
	p->took_ns = t_now_ns() - t0;
	atomic_store(&p->returned, 1);
	return 0;
}

/* What a test's root task works on. */
struct ctx {
	int fd[2];
	struct poller p;
};

static int64_t poll_of(cbcmn_runtime *rt, int fd, uint32_t events, int64_t timeout_ns);

/* Most tests' first steps: a stealable child waits in cbcmn_poll() on p,
 * and 20 ms later it still waits (nothing early), or its own timeout has
 * passed (a 20 ms sleep may take longer than a poll's 100 ms under TSan
 * on a loaded machine: seen in CI with the suites in two lanes). */
static cbcmn_nursery *start_poller(cbcmn_cx *cx, struct poller *p)
{
	cbcmn_nursery *n = NULL;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_stealable(cx, n, poller_main, p, NULL) == 0);
	TASK_CHECK(wait_for(cx, &p->entered, 1));
	cbcmn_sleep(cx, 20 * MS);
	TASK_CHECK(atomic_load(&p->returned) == 0 ||
		   (p->timeout_ns >= 0 && p->rc == -ETIMEDOUT && p->took_ns >= (uint64_t)p->timeout_ns));
	return n;
}

/* ---- readiness -------------------------------------------------------------- */

/* The poller waits (nothing early), then a write from another task (on
 * the other executor with two) wakes it with POLLIN; the byte is still
 * there for the foreign library's own read. */
static int64_t pipe_ready_main(cbcmn_cx *cx, void *arg)
{
	struct ctx *c = arg;
	cbcmn_nursery *n = start_poller(cx, &c->p);
	TASK_CHECK(write(c->fd[1], "x", 1) == 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(c->p.rc == POLLIN);
	char b;
	TASK_CHECK(read(c->fd[0], &b, 1) == 1 && b == 'x');
	/* A write end with room: ready at once, POLLOUT only. */
	TASK_CHECK(cbcmn_poll(cx, c->fd[1], POLLOUT | POLLIN, -1) == POLLOUT);
	return 0;
}

static void ready(uint32_t workers, bool sockets)
{
	cbcmn_runtime *rt = t_runtime(workers);
	struct ctx c = {0};
	if (sockets)
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c.fd), 0);
	else
		assert_int_equal(pipe2(c.fd, O_CLOEXEC), 0);
	c.p = (struct poller){.fd = c.fd[0], .events = POLLIN, .timeout_ns = -1};
	t_run(rt, pipe_ready_main, &c, 0);
	close(c.fd[0]);
	close(c.fd[1]);
	t_destroy(rt);
}

static void test_poll_pipe_ready(void **state)
{
	(void)state;
	ready(1, false);
	ready(2, false);
}

static void test_poll_socketpair_ready(void **state)
{
	(void)state;
	ready(1, true);
	ready(2, true);
}

/* Already ready: the mask at once, with a zero timeout too. */
static void test_poll_already_ready(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	int fd[2];
	assert_int_equal(pipe2(fd, O_CLOEXEC), 0);
	assert_int_equal(write(fd[1], "x", 1), 1);
	assert_int_equal(poll_of(rt, fd[0], POLLIN, -1), POLLIN);
	assert_int_equal(poll_of(rt, fd[0], POLLIN | POLLRDNORM, 0), POLLIN | POLLRDNORM);
	assert_int_equal(poll_of(rt, fd[1], POLLOUT, 0), POLLOUT);
	close(fd[0]);
	close(fd[1]);
	t_destroy(rt);
}

/* ---- hang-ups and errors ---------------------------------------------------- */

static void test_poll_hup_and_err(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	int fd[2], sp[2];
	/* A pipe whose writer is gone: POLLHUP, whatever was asked. */
	assert_int_equal(pipe2(fd, O_CLOEXEC), 0);
	close(fd[1]);
	assert_int_equal(poll_of(rt, fd[0], POLLIN, -1), POLLHUP);
	assert_int_equal(poll_of(rt, fd[0], 0, -1), POLLHUP);
	close(fd[0]);
	/* A pipe whose reader is gone: POLLERR for the writer. */
	assert_int_equal(pipe2(fd, O_CLOEXEC), 0);
	close(fd[0]);
	assert_int_equal(poll_of(rt, fd[1], POLLOUT, -1) & POLLERR, POLLERR);
	close(fd[1]);
	/* A socket whose peer closed: readable (EOF), POLLRDHUP and POLLHUP. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	close(sp[1]);
	int64_t rc = poll_of(rt, sp[0], POLLIN | POLLRDHUP, -1);
	assert_true(rc > 0);
	assert_int_equal(rc & (POLLIN | POLLRDHUP | POLLHUP), POLLIN | POLLRDHUP | POLLHUP);
	close(sp[0]);
	t_destroy(rt);
}

/* The hang-up comes while the task waits, and asking for nothing but
 * errors still wakes it. */
static int64_t hup_while_waiting_main(cbcmn_cx *cx, void *arg)
{
	struct ctx *c = arg;
	cbcmn_nursery *n = start_poller(cx, &c->p);
	TASK_CHECK(close(c->fd[1]) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(c->p.rc == POLLHUP);
	return 0;
}

static void test_poll_hup_while_waiting(void **state)
{
	(void)state;
	for (uint32_t workers = 1; workers <= 2; workers++) {
		cbcmn_runtime *rt = t_runtime(workers);
		struct ctx c = {0};
		assert_int_equal(pipe2(c.fd, O_CLOEXEC), 0);
		c.p = (struct poller){.fd = c.fd[0], .events = 0, .timeout_ns = -1};
		t_run(rt, hup_while_waiting_main, &c, 0);
		close(c.fd[0]);
		t_destroy(rt);
	}
}

/* ---- timeouts --------------------------------------------------------------- */

struct one_poll {
	int fd;
	uint32_t events;
	int64_t timeout_ns;
	uint64_t task_timeout;
	int64_t rc;
};

static int64_t one_poll_main(cbcmn_cx *cx, void *arg)
{
	struct one_poll *o = arg;
	if (o->task_timeout)
		cbcmn_io_set_timeout(cx, o->task_timeout);
	o->rc = cbcmn_poll(cx, o->fd, o->events, o->timeout_ns);
	return 0;
}

static int64_t poll_of(cbcmn_runtime *rt, int fd, uint32_t events, int64_t timeout_ns)
{
	struct one_poll o = {.fd = fd, .events = events, .timeout_ns = timeout_ns};
	t_run(rt, one_poll_main, &o, 0);
	return o.rc;
}

/* Nothing comes: -ETIMEDOUT, never early; the task's own I/O timeout
 * applies when it is the shorter; a zero timeout does not wait. */
static void test_poll_timeout(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	int fd[2];
	assert_int_equal(pipe2(fd, O_CLOEXEC), 0);
	uint64_t t0 = t_now_ns();
	assert_int_equal(poll_of(rt, fd[0], POLLIN, 30 * MS), -ETIMEDOUT);
	assert_true(t_now_ns() - t0 >= 30 * MS);
	t0 = t_now_ns();
	assert_int_equal(poll_of(rt, fd[0], POLLIN, 0), -ETIMEDOUT);
	assert_true(t_now_ns() - t0 < T_STALL_NS);
	/* The task's 30 ms against the call's hour, and no limit at all. */
	for (int64_t own = 3600000 * MS; own >= -1; own -= 3600000 * MS + 1) {
		struct one_poll o = {.fd = fd[0], .events = POLLIN, .timeout_ns = own,
				     .task_timeout = 30 * MS};
		t0 = t_now_ns();
		t_run(rt, one_poll_main, &o, 0);
		assert_int_equal(o.rc, -ETIMEDOUT);
		assert_true(t_now_ns() - t0 >= 30 * MS);
	}
	/* Nothing was consumed: the pipe is as it was. */
	assert_int_equal(write(fd[1], "y", 1), 1);
	assert_int_equal(poll_of(rt, fd[0], POLLIN, 0), POLLIN);
	close(fd[0]);
	close(fd[1]);
	t_destroy(rt);
}

/* The largest timeouts (the call's INT64_MAX, the task's UINT64_MAX) do
 * not wrap into a past deadline: the poll waits, and readiness ends it. */
static int64_t huge_timeout_main(cbcmn_cx *cx, void *arg)
{
	struct ctx *c = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, poller_main, &c->p, NULL) == 0);
	TASK_CHECK(wait_for(cx, &c->p.entered, 1));
	cbcmn_sleep(cx, 20 * MS);
	TASK_CHECK(atomic_load(&c->p.returned) == 0);
	TASK_CHECK(write(c->fd[1], "x", 1) == 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(c->p.rc == POLLIN);
	return 0;
}

static int64_t huge_task_timeout_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_io_set_timeout(cx, UINT64_MAX);
	return huge_timeout_main(cx, arg);
}

static void test_poll_huge_timeouts(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct ctx c = {0};
	assert_int_equal(pipe2(c.fd, O_CLOEXEC), 0);
	c.p = (struct poller){.fd = c.fd[0], .events = POLLIN, .timeout_ns = INT64_MAX};
	t_run(rt, huge_timeout_main, &c, 0);
	char b;
	assert_int_equal(read(c.fd[0], &b, 1), 1);
	/* The child inherits nothing: the task timeout is the root's own,
	 * so poll from the root itself. */
	struct one_poll o = {.fd = c.fd[1], .events = POLLOUT, .timeout_ns = INT64_MAX,
			     .task_timeout = UINT64_MAX};
	t_run(rt, one_poll_main, &o, 0);
	assert_int_equal(o.rc, POLLOUT);
	o = (struct one_poll){.fd = c.fd[0], .events = POLLIN, .timeout_ns = 20 * MS,
			      .task_timeout = UINT64_MAX};
	t_run(rt, one_poll_main, &o, 0);
	assert_int_equal(o.rc, -ETIMEDOUT);
	c.p = (struct poller){.fd = c.fd[0], .events = POLLIN, .timeout_ns = -1};
	t_run(rt, huge_task_timeout_main, &c, 0);
	close(c.fd[0]);
	close(c.fd[1]);
	t_destroy(rt);
}

/* Lab mode: the runtime's clock is virtual and jumps over waits, but a
 * poll waits for the world outside: its timeout is in real time, as the
 * other calls' linked timeouts are (no -ETIMEDOUT before 30 ms have
 * passed on the wall clock), and readiness still ends it. */
static void test_poll_lab_timeout_is_real_time(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_flags(1, CBCMN_CONFIG_LAB);
	struct ctx c = {0};
	assert_int_equal(pipe2(c.fd, O_CLOEXEC), 0);
	uint64_t t0 = t_now_ns();
	assert_int_equal(poll_of(rt, c.fd[0], POLLIN, 30 * MS), -ETIMEDOUT);
	assert_true(t_now_ns() - t0 >= 30 * MS);
	c.p = (struct poller){.fd = c.fd[0], .events = POLLIN, .timeout_ns = 3600000 * MS};
	t_run(rt, huge_timeout_main, &c, 0);
	close(c.fd[0]);
	close(c.fd[1]);
	t_destroy(rt);
}

/* ---- cancellation ----------------------------------------------------------- */

/* Cancelled while it waits: CBCMN_ECANCELED at once (not at a timeout),
 * and the descriptor untouched. */
static int64_t cancel_main(cbcmn_cx *cx, void *arg)
{
	struct ctx *c = arg;
	cbcmn_nursery *n = start_poller(cx, &c->p);
	TASK_CHECK(cbcmn_nursery_cancel(n) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == CBCMN_ECANCELED);
	TASK_CHECK(c->p.rc == CBCMN_ECANCELED);
	return 0;
}

static void test_poll_cancel_while_waiting(void **state)
{
	(void)state;
	for (uint32_t workers = 1; workers <= 2; workers++) {
		cbcmn_runtime *rt = t_runtime(workers);
		struct ctx c = {0};
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c.fd), 0);
		/* A timeout in flight too: the cancel wins, not the clock. */
		c.p = (struct poller){.fd = c.fd[0], .events = POLLIN,
				      .timeout_ns = workers == 1 ? -1 : 3600000 * MS};
		t_run(rt, cancel_main, &c, 0);
		assert_true(c.p.took_ns < T_STALL_NS);
		char b;
		assert_int_equal(recv(c.fd[0], &b, 1, MSG_DONTWAIT), -1);
		assert_int_equal(errno, EAGAIN);
		close(c.fd[0]);
		close(c.fd[1]);
		t_destroy(rt);
	}
}

/* A thread outside the runtime cancels while the executors are parked. */
static void test_poll_cancel_from_thread(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	int fd[2];
	assert_int_equal(pipe2(fd, O_CLOEXEC), 0);
	struct poller p = {.fd = fd[0], .events = POLLIN, .timeout_ns = -1};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, poller_main, &p, NULL), 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&p.entered) && t_now_ns() < end)
		sleep_ms(1);
	sleep_ms(20);
	assert_int_equal(atomic_load(&p.returned), 0);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	assert_int_equal(p.rc, CBCMN_ECANCELED);
	close(fd[0]);
	close(fd[1]);
	t_destroy(rt);
}

/* Readiness and cancellation at the same moment, from the other executor:
 * the poll returns the mask (it saw readiness) or CBCMN_ECANCELED, never
 * anything else, and never hangs. */
struct race {
	int fd[2];
	struct poller p;
	int seen_ready, seen_cancel;
};

static int64_t race_main(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	for (int i = 0; i < T_SCALE(200); i++) {
		r->p = (struct poller){.fd = r->fd[0], .events = POLLIN, .timeout_ns = -1};
		cbcmn_nursery *n;
		TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
		TASK_CHECK(cbcmn_nursery_spawn_stealable(cx, n, poller_main, &r->p, NULL) == 0);
		TASK_CHECK(wait_for(cx, &r->p.entered, 1));
		if (i % 3)
			cbcmn_yield(cx);
		if (i % 2) {
			TASK_CHECK(write(r->fd[1], "x", 1) == 1);
			cbcmn_nursery_cancel(n);
		} else {
			cbcmn_nursery_cancel(n);
			TASK_CHECK(write(r->fd[1], "x", 1) == 1);
		}
		cbcmn_nursery_await_all(cx, n);
		TASK_CHECK(r->p.rc == POLLIN || r->p.rc == CBCMN_ECANCELED);
		r->seen_ready += r->p.rc == POLLIN;
		r->seen_cancel += r->p.rc == CBCMN_ECANCELED;
		char b;
		TASK_CHECK(read(r->fd[0], &b, 1) == 1); /* the byte is still there */
	}
	return 0;
}

static void test_poll_cancel_races_readiness(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct race r = {0};
	assert_int_equal(pipe2(r.fd, O_CLOEXEC), 0);
	t_run(rt, race_main, &r, 0);
	printf("[          ] %d ready, %d cancelled\n", r.seen_ready, r.seen_cancel);
	close(r.fd[0]);
	close(r.fd[1]);
	t_destroy(rt);
}

/* The descriptor made ready, then the poller cancelled, by a task of the
 * same executor without a switch between: readiness came first, so the
 * poll returns the mask.  It said CBCMN_ECANCELED: on io_uring the
 * POLL_ADD's wake-up waits for the ring's owner (DEFER_TASKRUN) and the
 * ASYNC_CANCEL submitted first ends it with -ECANCELED; on epoll the
 * cancel ends the wait before the executor looks at its set.  The same
 * with the poll's own timeout running out as readiness comes is
 * -ETIMEDOUT or the mask, never a hang. */
static int64_t ready_then_cancelled_main(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	for (int i = 0; i < 20; i++) {
		r->p = (struct poller){.fd = r->fd[0], .events = POLLIN,
				       .timeout_ns = i % 2 ? -1 : 3600000 * MS};
		cbcmn_nursery *n;
		TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, poller_main, &r->p, NULL) == 0);
		TASK_CHECK(wait_for(cx, &r->p.entered, 1));
		cbcmn_sleep(cx, 2 * MS); /* it waits in the ring (the set) */
		TASK_CHECK(atomic_load(&r->p.returned) == 0);
		TASK_CHECK(write(r->fd[1], "x", 1) == 1);
		cbcmn_nursery_cancel(n);
		cbcmn_nursery_await_all(cx, n);
		if (r->p.rc != POLLIN)
			fprintf(stderr, "round %d: %lld, not POLLIN\n", i, (long long)r->p.rc);
		TASK_CHECK(r->p.rc == POLLIN);
		char b;
		TASK_CHECK(read(r->fd[0], &b, 1) == 1);
	}
	return 0;
}

static void test_poll_ready_then_cancelled_is_the_mask(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct race r = {0};
	assert_int_equal(pipe2(r.fd, O_CLOEXEC), 0);
	t_run(rt, ready_then_cancelled_main, &r, 0);
	close(r.fd[0]);
	close(r.fd[1]);
	t_destroy(rt);
}

/* Already cancelled: CBCMN_ECANCELED without looking, ready or not. */
static int64_t already_cancelled_main(cbcmn_cx *cx, void *arg)
{
	struct ctx *c = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_nursery_cancel(n);
	/* The opener of a cancelled nursery is not cancelled: a child is. */
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, poller_main, &c->p, NULL) == CBCMN_ECANCELED);
	cbcmn_nursery_await_all(cx, n);
	return 0;
}

/* ---- bad input -------------------------------------------------------------- */

static void test_poll_bad_arguments(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	int fd[2];
	assert_int_equal(pipe2(fd, O_CLOEXEC), 0);
	assert_int_equal(cbcmn_poll(NULL, fd[0], POLLIN, -1), -EINVAL);
	assert_int_equal(poll_of(rt, -1, POLLIN, -1), -EBADF);
	assert_int_equal(poll_of(rt, INT32_MIN, POLLIN, 0), -EBADF);
	/* A number that is not open (the closed end of a pipe). */
	int closed = dup(fd[0]);
	assert_true(closed >= 0);
	close(closed);
	assert_int_equal(poll_of(rt, closed, POLLIN, -1), -EBADF);
	assert_int_equal(poll_of(rt, closed, POLLIN, 0), -EBADF);
	assert_int_equal(poll_of(rt, closed, POLLIN, 20 * MS), -EBADF);
	/* Modes epoll and io_uring would take as flags, and unknown bits. */
	assert_int_equal(poll_of(rt, fd[0], POLLIN | EPOLLET, -1), -EINVAL);
	assert_int_equal(poll_of(rt, fd[0], POLLIN | EPOLLONESHOT, -1), -EINVAL);
	assert_int_equal(poll_of(rt, fd[0], POLLIN | EPOLLEXCLUSIVE, -1), -EINVAL);
	assert_int_equal(poll_of(rt, fd[0], 0x80000000u, -1), -EINVAL);
	/* A regular file: always readable and writable; never anything else. */
	char path[] = "/tmp/cbcmn-poll-XXXXXX";
	int f = mkstemp(path);
	assert_true(f >= 0);
	unlink(path);
	assert_int_equal(poll_of(rt, f, POLLIN | POLLOUT, -1), POLLIN | POLLOUT);
	assert_int_equal(poll_of(rt, f, POLLPRI, -1), -EINVAL);
	close(f);
	/* Already cancelled: the child never ran its poll. */
	struct ctx c = {.p = {.fd = fd[0], .events = POLLIN, .timeout_ns = -1}};
	t_run(rt, already_cancelled_main, &c, 0);
	assert_int_equal(atomic_load(&c.p.entered), 0);
	close(fd[0]);
	close(fd[1]);
	t_destroy(rt);
}

/* From a thread that is not the task (its cx handed over): -EPERM, with
 * nothing waited for; the task itself polls fine afterwards. */
struct eperm {
	cbcmn_cx *cx;
	int fd[2];
	int64_t rc, rc0;
	_Atomic int done;
};

static void *eperm_thread(void *arg)
{
	struct eperm *e = arg;
	e->rc = cbcmn_poll(e->cx, e->fd[0], POLLIN, -1);
	e->rc0 = cbcmn_poll(e->cx, e->fd[1], POLLOUT, 0);
	atomic_store(&e->done, 1);
	return NULL;
}

static int64_t eperm_main(cbcmn_cx *cx, void *arg)
{
	struct eperm *e = arg;
	e->cx = cx;
	pthread_t th;
	TASK_CHECK(pthread_create(&th, NULL, eperm_thread, e) == 0);
	TASK_CHECK(wait_for(cx, &e->done, 1));
	pthread_join(th, NULL);
	TASK_CHECK(cbcmn_poll(cx, e->fd[1], POLLOUT, -1) == POLLOUT);
	return 0;
}

static void test_poll_outside_task_eperm(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct eperm e = {0};
	assert_int_equal(pipe2(e.fd, O_CLOEXEC), 0);
	t_run(rt, eperm_main, &e, 0);
	assert_int_equal(e.rc, -EPERM);
	assert_int_equal(e.rc0, -EPERM);
	close(e.fd[0]);
	close(e.fd[1]);
	t_destroy(rt);
}

/* ---- a descriptor closed while polled --------------------------------------- */

/* cbcmn_close() of the polled descriptor by another task: on epoll the
 * wait ends with -EBADF at once; on io_uring the request holds the file
 * (cbcmn_io.h) and waits on: its timeout ends it.  Either way it ends, and
 * a shutdown of a socket wakes it on both. */
static int64_t closed_main(cbcmn_cx *cx, void *arg)
{
	struct ctx *c = arg;
	cbcmn_nursery *n = start_poller(cx, &c->p);
	TASK_CHECK(cbcmn_close(cx, c->fd[0]) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static int64_t shut_main(cbcmn_cx *cx, void *arg)
{
	struct ctx *c = arg;
	cbcmn_nursery *n = start_poller(cx, &c->p);
	TASK_CHECK(shutdown(c->fd[0], SHUT_RDWR) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static void test_poll_fd_closed_while_polled(void **state)
{
	(void)state;
	bool ep = t_backend() == CBCMN_BACKEND_EPOLL;
	for (uint32_t workers = 1; workers <= 2; workers++) {
		cbcmn_runtime *rt = t_runtime(workers);
		struct ctx c = {0};
		assert_int_equal(pipe2(c.fd, O_CLOEXEC), 0);
		c.p = (struct poller){.fd = c.fd[0], .events = POLLIN,
				      .timeout_ns = ep ? -1 : 100 * MS};
		t_run(rt, closed_main, &c, 0);
		assert_int_equal(c.p.rc, ep ? -EBADF : -ETIMEDOUT);
		close(c.fd[1]);

		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c.fd), 0);
		c.p = (struct poller){.fd = c.fd[0], .events = POLLIN, .timeout_ns = -1};
		t_run(rt, shut_main, &c, 0);
		assert_true(c.p.rc > 0 && (c.p.rc & POLLHUP));
		close(c.fd[0]);
		close(c.fd[1]);
		t_destroy(rt);
	}
}

/* ---- many pollers ----------------------------------------------------------- */

/* 64 tasks on two executors, each polling its own socket, plus 16 polling
 * one shared pipe; the sockets are written in a scrambled order, then the
 * pipe once: every poller wakes with POLLIN, none early, none lost. */
#define NSOCK 64
#define NSHARED 16

struct many {
	int sp[NSOCK][2];
	int pipe[2];
	struct poller p[NSOCK + NSHARED];
};

static int64_t many_main(cbcmn_cx *cx, void *arg)
{
	struct many *m = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < NSOCK + NSHARED; i++)
		TASK_CHECK(cbcmn_nursery_spawn_stealable(cx, n, poller_main, &m->p[i], NULL) == 0);
	for (int i = 0; i < NSOCK + NSHARED; i++)
		TASK_CHECK(wait_for(cx, &m->p[i].entered, 1));
	cbcmn_sleep(cx, 20 * MS);
	for (int i = 0; i < NSOCK + NSHARED; i++)
		TASK_CHECK(atomic_load(&m->p[i].returned) == 0);
	for (int k = 0; k < NSOCK; k++) {
		int i = (k * 37) % NSOCK; /* 37 is prime to 64: each once */
		TASK_CHECK(send(m->sp[i][1], "x", 1, 0) == 1);
		if (k % 8 == 0)
			cbcmn_yield(cx);
	}
	TASK_CHECK(write(m->pipe[1], "x", 1) == 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	for (int i = 0; i < NSOCK + NSHARED; i++)
		TASK_CHECK(m->p[i].rc == POLLIN);
	return 0;
}

static void test_poll_many_tasks(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct many *m = calloc(1, sizeof(*m));
	assert_non_null(m);
	for (int i = 0; i < NSOCK; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, m->sp[i]), 0);
		m->p[i] = (struct poller){.fd = m->sp[i][0], .events = POLLIN, .timeout_ns = -1};
	}
	assert_int_equal(pipe2(m->pipe, O_CLOEXEC), 0);
	for (int i = NSOCK; i < NSOCK + NSHARED; i++)
		m->p[i] = (struct poller){.fd = m->pipe[0], .events = POLLIN,
					  .timeout_ns = i % 2 ? -1 : 3600000 * MS};
	t_run(rt, many_main, m, 0);
	for (int i = 0; i < NSOCK; i++) {
		close(m->sp[i][0]);
		close(m->sp[i][1]);
	}
	close(m->pipe[0]);
	close(m->pipe[1]);
	free(m);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_poll_pipe_ready),
		T_WATCHED_TEST(test_poll_socketpair_ready),
		T_WATCHED_TEST(test_poll_already_ready),
		T_WATCHED_TEST(test_poll_hup_and_err),
		T_WATCHED_TEST(test_poll_hup_while_waiting),
		T_WATCHED_TEST(test_poll_timeout),
		T_WATCHED_TEST(test_poll_huge_timeouts),
		T_WATCHED_TEST(test_poll_lab_timeout_is_real_time),
		T_WATCHED_TEST(test_poll_cancel_while_waiting),
		T_WATCHED_TEST(test_poll_cancel_from_thread),
		T_WATCHED_TEST(test_poll_cancel_races_readiness),
		T_WATCHED_TEST(test_poll_ready_then_cancelled_is_the_mask),
		T_WATCHED_TEST(test_poll_bad_arguments),
		T_WATCHED_TEST(test_poll_outside_task_eperm),
		T_WATCHED_TEST(test_poll_fd_closed_while_polled),
		T_WATCHED_TEST(test_poll_many_tasks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
