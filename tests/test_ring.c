/* test_ring.c: the executors' rings over their life: registration, submit
 * failures, reaping, and what a runtime leaves of the caller's own rings. */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helpers.h"
#include "../lib/fault.h"
#include "../lib/runtime.h" /* an executor's ring fd, its SQ size */

/* A NOP through ring u and its completion: 0, or what failed. */
static int ring_nop(struct io_uring *u)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(u);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, 42);
	int rc = io_uring_submit(u);
	if (rc != 1)
		return rc < 0 ? rc : -EIO;
	struct io_uring_cqe *cqe;
	rc = io_uring_wait_cqe(u, &cqe);
	if (rc)
		return rc;
	rc = cqe->user_data == 42 ? cqe->res : -EIO;
	io_uring_cqe_seen(u, cqe);
	return rc;
}

static int64_t noop(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

/* The bug: destroy ran liburing's io_uring_queue_exit() for every
 * executor's ring on the calling thread; each ring's fd was registered (an
 * index into its owner thread's table), and unregistering it from here
 * removed the caller's own registered ring at the same index. */
static void test_destroy_keeps_the_callers_registered_ring(void **state)
{
	(void)state;
	struct io_uring mine;
	assert_int_equal(io_uring_queue_init(8, &mine, 0), 0);
	int rc = io_uring_register_ring_fd(&mine);
	if (rc != 1) {
		io_uring_queue_exit(&mine);
		T_SKIP("registered ring fds are not supported here (%s)", strerror(-rc));
	}
	assert_int_equal(ring_nop(&mine), 0);
	/* Each set of setup flags: with SINGLE_ISSUER the kernel refuses a
	 * register call from another thread (-EEXIST), which hid the bug. */
	static const uint32_t flags[] = {0, CBCMN_RING_PLAIN, CBCMN_RING_SQPOLL};
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 2;
		cfg.ring_flags = flags[i];
		cbcmn_runtime *rt = t_runtime_cfg(&cfg);
		t_run(rt, noop, NULL, 0);
		t_destroy(rt);
		assert_int_equal(ring_nop(&mine), 0);
	}
	io_uring_queue_exit(&mine);
}

/* ---- reaping is bounded ---------------------------------------------------- */

struct flood {
	cbcmn_runtime *rt;
	_Atomic int started, flooded;
	int err;
	uint64_t max_step, total;
	uint32_t bound;
};

#define FLOOD_N 400

/* Another thread fills executor 0's CQ (and the kernel's overflow list)
 * with FLOOD_N completions while a task holds the executor. */
static void *flooder(void *arg)
{
	struct flood *f = arg;
	while (!atomic_load(&f->started))
		usleep(100);
	struct io_uring u;
	f->err = io_uring_queue_init(FLOOD_N, &u, 0);
	if (f->err == 0) {
		int fd = f->rt->exec[0]->ring.fd;
		for (int i = 0; i < FLOOD_N; i++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&u);
			/* Lands as an ignored CQE (cancel requests' tag). */
			io_uring_prep_msg_ring(sqe, fd, 0, CBCMN__UD_IGNORE, 0);
			sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		}
		int rc = io_uring_submit(&u);
		f->err = rc == FLOOD_N ? 0 : rc < 0 ? rc : -EIO;
		io_uring_queue_exit(&u);
	}
	atomic_store(&f->flooded, 1);
	return NULL;
}

static uint64_t reaped(cbcmn_runtime *rt)
{
	cbcmn_executor_stats per[1];
	cbcmn_stats st;
	if (cbcmn_stats_snapshot(rt, &st, per, 1) != 0)
		return 0;
	return per[0].cqes_reaped;
}

static int64_t busy_then_yield(cbcmn_cx *cx, void *arg)
{
	struct flood *f = arg;
	atomic_store(&f->started, 1);
	/* Hold the executor: nothing is reaped meanwhile. */
	while (!atomic_load(&f->flooded))
		;
	uint64_t last = reaped(f->rt), first = last;
	for (int i = 0; i < 200 && last - first < FLOOD_N; i++) {
		cbcmn_yield(cx); /* one turn of the loop: one reap */
		uint64_t now = reaped(f->rt);
		if (now - last > f->max_step)
			f->max_step = now - last;
		last = now;
	}
	f->total = last - first;
	return 0;
}

/* The bug: a reap went on while CQEs were there, so completions that kept
 * coming (or an overflow list being flushed) held the executor in it; now
 * a turn of the loop reaps at most one SQ's worth, then runs a task. */
static void test_reap_is_bounded_per_turn(void **state)
{
	(void)state;
	T_SKIP_UNLESS_IO_URING("the executors' rings");
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.ring_entries = 32; /* CQ 64 */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct flood f = {.rt = rt, .bound = rt->exec[0]->ring.entries};
	if (!rt->ring_caps.msg_ring) {
		t_destroy(rt);
		T_SKIP("no IORING_OP_MSG_RING to flood a ring with");
	}
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, flooder, &f), 0);
	t_run(rt, busy_then_yield, &f, 0);
	pthread_join(th, NULL);
	assert_int_equal(f.err, 0);
	assert_true(f.total >= FLOOD_N); /* nothing lost */
	/* A doorbell or two may come with a turn's share. */
	if (f.max_step > f.bound + 4)
		fail_msg("one turn reaped %llu CQEs, more than the bound %u",
			 (unsigned long long)f.max_step, f.bound);
	t_destroy(rt);
}

/* ---- a doorbell whose submit fails ------------------------------------------ */

struct doorbell_try {
	_Atomic bool ran;
	bool timed_out;
};

static int64_t mark_ran(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct doorbell_try *d = arg;
	atomic_store(&d->ran, true);
	return 0;
}

/* On executor 0: with executor 1 asleep in its ring, send it a task; the
 * doorbell's io_uring_enter fails (injected); then stay busy, yielding,
 * with nothing to submit and nothing to reap, until the task has run. */
static int64_t ring_a_sleeper(cbcmn_cx *cx, void *arg)
{
	struct doorbell_try *d = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	cbcmn_sleep(cx, 20 * 1000000); /* executor 1 parks meanwhile */
	struct cbcmn__fault_plan plan = {.nth = 1, .err = -EAGAIN};
	cbcmn__fault_arm(CBCMN__F_SUBMIT, &plan);
	int rc = cbcmn_nursery_spawn_pinned(cx, n, 1, mark_ran, d, NULL);
	uint64_t end = t_now_ns() + 3000000000ull;
	while (rc == 0 && !atomic_load(&d->ran) && !(d->timed_out = t_now_ns() > end))
		cbcmn_yield(cx);
	cbcmn__fault_disarm_all();
	int64_t r = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : r;
}

/* The bug: a doorbell (MSG_RING) whose io_uring_enter failed left its SQE
 * in the kernel's SQ without the resubmit mark, so it went out only at
 * the sender's next enter: a sender that kept busy without I/O never
 * entered, and the task sent to the sleeping executor never ran. */
static void test_failed_doorbell_submit_is_retried(void **state)
{
	(void)state;
	T_SKIP_UNLESS_IO_URING("the executors' rings");
	struct cbcmn__fault_plan off = {0};
	if (!cbcmn__fault_arm(CBCMN__F_SUBMIT, &off))
		T_SKIP("no fault injection in this build (the ASan and TSan builds have it)");
	cbcmn__fault_disarm_all();
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.spin_ns = CBCMN_SPIN_NONE; /* park at once: every hand-off rings */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	if (!rt->ring_caps.msg_ring) {
		t_destroy(rt);
		T_SKIP("no IORING_OP_MSG_RING: doorbells are eventfd writes");
	}
	struct doorbell_try d = {0};
	int64_t r = t_run_pinned(rt, 0, ring_a_sleeper, &d);
	assert_int_equal(cbcmn__fault_fails(CBCMN__F_SUBMIT), 1);
	if (d.timed_out)
		fail_msg("the task sent to the sleeping executor did not run in 3 s");
	assert_int_equal(r, 0);
	t_destroy(rt);
}

/* ---- a CQE the kernel drops ------------------------------------------------ */

struct drop_try {
	int p[2];
	int64_t first, second;
	char got[8];
};

static int64_t write_with_the_next_cqe_dropped(cbcmn_cx *cx, void *arg)
{
	struct drop_try *d = arg;
	cbcmn_sleep(cx, 20 * 1000000); /* the reader waits in the kernel meanwhile */
	struct cbcmn__fault_plan plan = {.nth = 1};
	cbcmn__fault_arm(CBCMN__F_CQE_DROP, &plan);
	return write(d->p[1], "lost", 4) == 4 ? 0 : -errno;
}

/* A read whose CQE is dropped, then a round trip through the same pipe on
 * the executor's ring as it is afterwards. */
static int64_t read_into_a_drop(cbcmn_cx *cx, void *arg)
{
	struct drop_try *d = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	if (cbcmn_nursery_spawn(cx, n, write_with_the_next_cqe_dropped, d, NULL) != 0)
		return -2;
	char buf[8];
	d->first = cbcmn_read(cx, d->p[0], buf, sizeof(buf));
	cbcmn__fault_disarm_all();
	if (cbcmn_nursery_await_all(cx, n) != 0)
		return -3;
	if (cbcmn_write(cx, d->p[1], "again", 5) != 5)
		return -4;
	d->second = cbcmn_read(cx, d->p[0], d->got, sizeof(d->got));
	return 0;
}

struct drop_run {
	cbcmn_runtime *rt;
	struct drop_try d;
	int64_t r;
	int rc;
};

static void drop_run(void *arg)
{
	struct drop_run *x = arg;
	x->rc = cbcmn_runtime_run(x->rt, read_into_a_drop, &x->d, &x->r);
}

/* Skip, saying why, unless the executors run io_uring and this build
 * injects faults (site: one of them, to ask). */
#define SKIP_UNLESS_RING_FAULTS(site)                                              \
	do {                                                                       \
		T_SKIP_UNLESS_IO_URING("the executors' rings");                    \
		struct cbcmn__fault_plan off_ = {0};                               \
		if (!cbcmn__fault_arm(site, &off_))                                \
			T_SKIP("no fault injection in this build (the ASan and "   \
			       "TSan builds have it)");                            \
		cbcmn__fault_disarm_all();                                         \
	} while (0)

/* run_bounded(), with what fn(arg) wrote on stderr meanwhile in said. */
static bool run_bounded_said(void (*fn)(void *), void *arg, char *said, size_t size)
{
	int saved, fd = t_stderr_capture(&saved);
	bool done = run_bounded(fn, arg, 20);
	t_stderr_restore(fd, saved, said, size);
	return done;
}

/* The bug: the kernel may drop a CQE (IORING_FEAT_NODROP keeps an
 * overflowing one on a list of its own, unless that allocation fails: it
 * says -EBADR and counts it in the CQ ring).  Nothing looked, and the
 * fiber waiting for that CQE slept forever. */
static void test_dropped_cqe_does_not_strand_its_fiber(void **state)
{
	(void)state;
	SKIP_UNLESS_RING_FAULTS(CBCMN__F_CQE_DROP);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	static struct drop_run x; /* left behind on a time-out */
	x.rt = t_runtime_cfg(&cfg);
	x.r = -1;
	assert_int_equal(pipe2(x.d.p, O_CLOEXEC), 0);
	char said[512];
	bool done = run_bounded_said(drop_run, &x, said, sizeof(said));
	if (!done)
		fail_msg("the reader whose CQE was dropped never woke");
	assert_int_equal(cbcmn__fault_fails(CBCMN__F_CQE_DROP), 1);
	assert_int_equal(x.rc, 0);
	assert_int_equal(x.r, 0);
	/* Its completion is lost: the read ends as cancelled (the bytes it
	 * took are gone with it), and the executor's new ring works. */
	assert_int_equal(x.d.first, CBCMN_ECANCELED);
	assert_int_equal(x.d.second, 5);
	assert_memory_equal(x.d.got, "again", 5);
	assert_non_null(strstr(said, "dropped completions"));
	close(x.d.p[0]);
	close(x.d.p[1]);
	t_destroy(x.rt);
}

/* ---- a replacement that cannot take over ---------------------------------- */

/* Executor 1 ends a child of n (its end waits in executor 1's batch,
 * nursery.c), then finds its ring dropped completions: a new thread is to
 * take over, and can make no ring.  The bug: the batch stayed with the old
 * thread, which left, and no loop ever counted it: n's await never came
 * back, though its only child had ended. */
static int64_t drop_after_ending(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct cbcmn__fault_plan plan = {.nth = 1, .every = 1, .err = -ENOMEM};
	cbcmn__fault_arm(CBCMN__F_RING, &plan); /* every ring the successor tries */
	((struct cbcmn_task *)cx)->exec->ring.dropped = true; /* as ring.c does */
	return 0;
}

static int64_t await_the_dropper(cbcmn_cx *cx, void *arg)
{
	uint64_t *ring_fails = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0 ||
	    cbcmn_nursery_spawn_pinned(cx, n, 1, drop_after_ending, NULL, NULL) != 0)
		return -1;
	int64_t r = cbcmn_nursery_await_all(cx, n);
	/* The successor's ring fails before the fault goes (bounded). */
	for (int i = 0; i < 2000 && cbcmn__fault_fails(CBCMN__F_RING) == 0; i++)
		cbcmn_sleep(cx, 1000000);
	*ring_fails = cbcmn__fault_fails(CBCMN__F_RING);
	cbcmn__fault_disarm_all();
	return r;
}

struct lost_run {
	cbcmn_runtime *rt;
	int64_t r;
	uint64_t ring_fails; /* the successor's tries */
};

static void lost_run(void *arg)
{
	struct lost_run *x = arg;
	x->r = t_run_pinned(x->rt, 0, await_the_dropper, &x->ring_fails);
}

static void test_ended_children_counted_before_a_replacement(void **state)
{
	(void)state;
	SKIP_UNLESS_RING_FAULTS(CBCMN__F_RING);
	static struct lost_run x; /* left behind on a time-out */
	x.rt = t_runtime(2);
	x.r = -1;
	x.ring_fails = 0;
	char said[512];
	bool done = run_bounded_said(lost_run, &x, said, sizeof(said));
	if (!done) {
		cbcmn__fault_disarm_all(); /* the other tests make rings */
		fail_msg("the nursery whose child ended before the replacement was never done");
	}
	t_destroy(x.rt); /* with executor 1 lost */
	assert_int_equal(x.r, 0);
	assert_true(x.ring_fails > 0); /* the successor had no ring */
	assert_non_null(strstr(said, "dropped completions"));
}

/* ---- I/O between long picks (issue 15, liveness 4) ----------------------- */

#define LONG_PICK_TASKS 8
#define LONG_PICK_US 1000
#define LONG_PICK_WRITES 20

struct long_picks {
	int fd;
	_Atomic uint64_t picks; /* the CPU-bound tasks' picks so far */
	_Atomic bool stop;
	uint64_t worst;         /* the most picks one write waited */
	int64_t err;
};

static int64_t long_picker(cbcmn_cx *cx, void *arg)
{
	struct long_picks *lp = arg;
	while (!atomic_load(&lp->stop)) {
		uint64_t end = t_now_ns() + LONG_PICK_US * 1000ull;
		while (t_now_ns() < end)
			;
		atomic_fetch_add(&lp->picks, 1);
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t long_pick_writer(cbcmn_cx *cx, void *arg)
{
	struct long_picks *lp = arg;
	for (int i = 0; i < LONG_PICK_WRITES && !lp->err; i++) {
		uint64_t p0 = atomic_load(&lp->picks);
		int64_t rc = cbcmn_write(cx, lp->fd, "x", 1);
		uint64_t waited = atomic_load(&lp->picks) - p0;
		if (rc != 1)
			lp->err = rc < 0 ? rc : -EIO;
		if (waited > lp->worst)
			lp->worst = waited;
		/* A request now and then, as a server's would come: writes
		 * back to back would also meet the slot's fairness cap (three
		 * runs in a row from the next-task slot, then behind the
		 * others), which is not what this test is about. */
		cbcmn_sleep(cx, 1000000);
	}
	atomic_store(&lp->stop, true);
	return 0;
}

/* An I/O task beside neighbours that keep its executor busy, all given
 * arg. */
struct beside {
	cbcmn_task_fn neighbour, io;
	int neighbours;
	void *arg;
};

static int64_t beside_root(cbcmn_cx *cx, void *arg)
{
	const struct beside *b = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	for (int i = 0; i < b->neighbours; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, b->neighbour, b->arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, b->io, b->arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* Run b on rt (then destroyed), its I/O task writing to one socket of a
 * pair (*fd): the bytes the other end got, read into buf (size). */
static ssize_t run_beside(cbcmn_runtime *rt, const struct beside *b, int *fd, char *buf,
			  size_t size)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	*fd = sv[0];
	int64_t r = -1;
	int rc = cbcmn_runtime_run(rt, beside_root, (void *)b, &r);
	t_destroy(rt);
	ssize_t got = read(sv[1], buf, size);
	close(sv[0]);
	close(sv[1]);
	assert_int_equal(rc, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	return got;
}

/* The bug: SQEs waited for 16 picks whatever the picks cost, so beside
 * tasks that each ran for milliseconds a write waited ~16 of them (30 ms
 * with 2 ms tasks).  Now a request whose wait would pass io_batch_ns by
 * the end of the next pick goes after the pick that queued it: the write
 * completes within a pick or two of the CPU-bound tasks, not 15. */
static void test_regression_io_is_submitted_between_long_picks(void **state)
{
	(void)state;
	T_SKIP_UNLESS_IO_URING("the executors' submission batches");
	struct long_picks lp = {.fd = -1};
	struct beside b = {long_picker, long_pick_writer, LONG_PICK_TASKS, &lp};
	char buf[LONG_PICK_WRITES + 1];
	ssize_t got = run_beside(t_runtime(1), &b, &lp.fd, buf, sizeof(buf));
	assert_int_equal(lp.err, 0);
	assert_int_equal(got, LONG_PICK_WRITES); /* nothing lost */
	if (lp.worst > 4)
		fail_msg("a write waited %llu picks of the CPU-bound tasks (16 was the old batch)",
			 (unsigned long long)lp.worst);
}

/* ---- a completion that comes with its submission ----------------------- */

#define INLINE_SENDS 200

struct inline_sends {
	int fd;
	_Atomic uint64_t yields; /* the neighbour's picks so far */
	_Atomic bool stop;
	uint64_t worst;          /* the most picks of it one send waited */
	int64_t err;
};

static int64_t inline_yielder(cbcmn_cx *cx, void *arg)
{
	struct inline_sends *is = arg;
	while (!atomic_load(&is->stop)) {
		atomic_fetch_add(&is->yields, 1);
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t inline_sender(cbcmn_cx *cx, void *arg)
{
	struct inline_sends *is = arg;
	for (int i = 0; i < INLINE_SENDS && !is->err; i++) {
		uint64_t y0 = atomic_load(&is->yields);
		int64_t rc = cbcmn_send(cx, is->fd, "x", 1, 0);
		uint64_t waited = atomic_load(&is->yields) - y0;
		if (rc != 1)
			is->err = rc < 0 ? rc : -EIO;
		if (waited > is->worst)
			is->worst = waited;
		cbcmn_yield(cx); /* the neighbour's turn: the slot's run cap stays out of it */
	}
	atomic_store(&is->stop, true);
	return 0;
}

/* A send to a socket with room completes while it is submitted: the loop
 * that submits it reaps it before its next pick, and the sender runs
 * before its ready neighbour (io_batch_ns of 1 ns: no SQE waits for a
 * pick).  A version that decided the submission after choosing the next
 * task (to save the deferral's clock read) ran the neighbour first: a
 * pick of latency for every send that completes at once, as an echo
 * server's do (docs/BENCHMARKS.md, fifteenth session, second pass). */
static void test_completion_at_submission_runs_before_the_next_pick(void **state)
{
	(void)state;
	T_SKIP_UNLESS_IO_URING("the executors' submission batches");
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.io_batch_ns = 1;
	struct inline_sends is = {.fd = -1};
	struct beside b = {inline_yielder, inline_sender, 1, &is};
	char buf[INLINE_SENDS + 1];
	ssize_t got = run_beside(t_runtime_cfg(&cfg), &b, &is.fd, buf, sizeof(buf));
	assert_int_equal(is.err, 0);
	assert_int_equal(got, INLINE_SENDS);
	if (is.worst > 0)
		fail_msg("a send that completed at its submission waited %llu picks of its neighbour",
			 (unsigned long long)is.worst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_destroy_keeps_the_callers_registered_ring),
		T_WATCHED_TEST(test_reap_is_bounded_per_turn),
		T_WATCHED_TEST(test_failed_doorbell_submit_is_retried),
		T_WATCHED_TEST(test_dropped_cqe_does_not_strand_its_fiber),
		T_WATCHED_TEST(test_ended_children_counted_before_a_replacement),
		T_WATCHED_TEST(test_regression_io_is_submitted_between_long_picks),
		T_WATCHED_TEST(test_completion_at_submission_runs_before_the_next_pick),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
