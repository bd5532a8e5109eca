/* test_snapshot: cbcmn_runtime_snapshot() and cbcmn_runtime_is_quiescent(). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "helpers.h"

static cbcmn_snapshot snap(cbcmn_runtime *rt, cbcmn_exec_snapshot *per, uint32_t nper)
{
	cbcmn_snapshot s = {.size = sizeof(s), .version = CBCMN_SNAPSHOT_VERSION};
	assert_int_equal(cbcmn_runtime_snapshot(rt, &s, per, nper), 0);
	return s;
}

/* Poll (from this thread, outside the runtime) until cond holds of a
 * snapshot; fail after T_STALL_S. */
#define WAIT_SNAP(rt, s, cond)                                                  \
	do {                                                                    \
		uint64_t end_ = t_now_ns() + T_STALL_NS;                        \
		for (;;) {                                                      \
			s = snap(rt, NULL, 0);                                  \
			if (cond)                                               \
				break;                                          \
			if (t_now_ns() > end_)                                  \
				fail_msg("snapshot never showed " #cond);       \
			usleep(1000);                                           \
		}                                                               \
	} while (0)

struct work {
	cbcmn_chan *c;
	_Atomic int hog_running, hog_release;
	cbcmn_obligation ob;
};

static int64_t chan_blocker(cbcmn_cx *cx, void *arg)
{
	struct work *w = arg;
	int v;
	int rc = cbcmn_chan_recv(cx, w->c, &v);
	TASK_CHECK(rc == -EPIPE || rc == CBCMN_ECANCELED);
	return 0;
}

/* Holds an obligation while it waits, so the snapshot shows one. */
static int64_t chan_blocker_obliged(cbcmn_cx *cx, void *arg)
{
	struct work *w = arg;
	TASK_CHECK(cbcmn_obligation_reserve(cbcmn_cx_runtime(cx), cx, "test", &w->ob) == 0);
	int64_t r = chan_blocker(cx, arg);
	TASK_CHECK(cbcmn_obligation_commit(cx, &w->ob) == 0);
	return r;
}

static int64_t sleeper(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(cbcmn_sleep(cx, 3600ull * 1000000000ull) == CBCMN_ECANCELED);
	return 0;
}

/* Keeps the only executor busy, never yielding, so that later spawns stay
 * runnable. */
static int64_t hog(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct work *w = arg;
	atomic_store(&w->hog_running, 1);
	while (!atomic_load(&w->hog_release))
		;
	return 0;
}

static int64_t nop(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static void test_counts_match_a_known_workload(void **state)
{
	(void)state;
	enum { NCHAN = 3, NTIMER = 2, NRUN = 4 };
	cbcmn_runtime *rt = t_runtime(1);
	struct work w = {0};
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &w.c), 0);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	cbcmn_snapshot s;

	for (int i = 0; i < NCHAN - 1; i++)
		assert_int_equal(cbcmn_nursery_spawn(NULL, n, chan_blocker, &w, NULL), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, chan_blocker_obliged, &w, NULL), 0);
	for (int i = 0; i < NTIMER; i++)
		assert_int_equal(cbcmn_nursery_spawn(NULL, n, sleeper, &w, NULL), 0);
	WAIT_SNAP(rt, s, s.total.blocked_chan == NCHAN && s.total.blocked_timer == NTIMER);

	assert_int_equal(cbcmn_nursery_spawn(NULL, n, hog, &w, NULL), 0);
	while (!atomic_load(&w.hog_running))
		usleep(1000);
	for (int i = 0; i < NRUN; i++)
		assert_int_equal(cbcmn_nursery_spawn(NULL, n, nop, &w, NULL), 0);

	cbcmn_exec_snapshot per[2];
	memset(per, 0xff, sizeof(per));
	s = snap(rt, per, 2);
	assert_int_equal(s.executors, 1);
	assert_int_equal(s.tasks_live, NCHAN + NTIMER + 1 + NRUN);
	assert_int_equal(s.total.running, 1);
	assert_int_equal(s.total.runnable, NRUN); /* the inject queue: spawned from outside */
	assert_int_equal(s.total.blocked_chan, NCHAN);
	assert_int_equal(s.total.blocked_timer, NTIMER);
	assert_int_equal(s.total.blocked_io + s.total.blocked_join + s.total.blocked_blocking +
				 s.total.blocked_other + s.total.parked,
			 0);
	assert_int_equal(s.total.nurseries_open, 1); /* ours, a thread's */
	assert_int_equal(s.total.obligations, 1);
	assert_false(s.quiescent);
	/* Per executor: the waits, the obligation and the running task are
	 * the executor's; the thread's nursery is not. */
	assert_int_equal(per[0].running, 1);
	assert_int_equal(per[0].blocked_chan, NCHAN);
	assert_int_equal(per[0].blocked_timer, NTIMER);
	assert_int_equal(per[0].obligations, 1);
	assert_int_equal(per[0].nurseries_open, 0);
	assert_int_equal(per[0].state, CBCMN_EXEC_RUNNING);
	assert_int_equal(per[1].running, 0xffffffffu); /* nper beyond executors: untouched */
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 0);

	atomic_store(&w.hog_release, 1);
	WAIT_SNAP(rt, s, s.total.runnable == 0 && s.total.running == 0);
	assert_int_equal(s.tasks_live, NCHAN + NTIMER);
	assert_int_equal(cbcmn_chan_close(NULL, w.c), 0);
	/* Woken receivers are runnable a while before they end (on a slow
	 * 6.1 guest one snapshot saw 4 live): wait for them to settle. */
	WAIT_SNAP(rt, s, s.total.blocked_chan == 0 && s.total.obligations == 0 &&
			 s.total.runnable == 0 && s.total.running == 0);
	assert_int_equal(s.tasks_live, NTIMER);
	assert_int_equal(s.total.blocked_timer, NTIMER);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	s = snap(rt, NULL, 0);
	assert_int_equal(s.tasks_live, 0);
	assert_int_equal(s.total.blocked_timer, 0);
	assert_int_equal(s.total.nurseries_open, 0);
	assert_true(s.quiescent);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 1);
	assert_int_equal(cbcmn_chan_destroy(w.c), 0);
	t_destroy(rt);
}

/* A task waiting for its child's join, and the child parked on a channel:
 * both counted, each as what it waits for. */
static int64_t join_parent(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, chan_blocker, arg, NULL) == 0);
	cbcmn_yield(cx); /* let the child block first: no inline run */
	return cbcmn_nursery_await_all(cx, n);
}

static void test_await_counts_as_join(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.flags = CBCMN_CONFIG_NO_INLINE;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct work w = {0};
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &w.c), 0);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, join_parent, &w, NULL), 0);
	cbcmn_snapshot s;
	WAIT_SNAP(rt, s, s.total.blocked_join == 1 && s.total.blocked_chan == 1);
	assert_int_equal(s.tasks_live, 2);
	assert_int_equal(s.total.nurseries_open, 2);
	assert_int_equal(s.total.runnable + s.total.running, 0); /* idle, not quiescent */
	assert_false(s.quiescent);
	assert_int_equal(cbcmn_chan_close(NULL, w.c), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	s = snap(rt, NULL, 0);
	assert_int_equal(s.total.blocked_join + s.total.blocked_chan + s.total.nurseries_open, 0);
	assert_true(s.quiescent);
	assert_int_equal(cbcmn_chan_destroy(w.c), 0);
	t_destroy(rt);
}

/* I/O and the blocking pool: a receive on a quiet socket, a pool call
 * that waits for the test's word. */
struct io_work {
	int fd;
	_Atomic int release;
};

static int64_t io_blocker(cbcmn_cx *cx, void *arg)
{
	struct io_work *w = arg;
	char b;
	TASK_CHECK(cbcmn_recv(cx, w->fd, &b, 1, 0) == 1);
	return 0;
}

static int64_t pool_fn(void *arg)
{
	struct io_work *w = arg;
	while (!atomic_load(&w->release))
		usleep(1000);
	return 7;
}

static int64_t pool_blocker(cbcmn_cx *cx, void *arg)
{
	int64_t r = 0;
	TASK_CHECK(cbcmn_blocking(cx, pool_fn, arg, &r) == 0);
	TASK_CHECK(r == 7);
	return 0;
}

static void test_io_and_pool_waits_are_counted(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	struct io_work w = {.fd = sv[0]};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, io_blocker, &w, NULL), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, pool_blocker, &w, NULL), 0);
	cbcmn_snapshot s;
	WAIT_SNAP(rt, s, s.total.blocked_io == 1 && s.total.blocked_blocking == 1);
	assert_int_equal(s.tasks_live, 2);
	assert_int_equal(s.total.blocked_chan + s.total.blocked_timer + s.total.blocked_join, 0);
	assert_false(s.quiescent);
	assert_int_equal(write(sv[1], "x", 1), 1);
	atomic_store(&w.release, 1);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	s = snap(rt, NULL, 0);
	assert_int_equal(s.total.blocked_io + s.total.blocked_blocking, 0);
	assert_true(s.quiescent);
	close(sv[0]);
	close(sv[1]);
	t_destroy(rt);
}

/* BudgetExhausted: a root whose ops run out, with no CapBudget to recharge
 * itself, waits for its nursery's opener (who holds its handle): parked. */
static int64_t spinner(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (;;)
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static void test_exhausted_task_counts_as_parked(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.budget.ops = 5000;
	cfg.caps.flags = CBCMN_CAPS_EXPLICIT | CBCMN_CAP_SPAWN; /* no CapBudget */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	/* With a handle: its opener could recharge it, so it waits (a task
	 * nobody can recharge ends at once, docs/BUDGETS.md). */
	cbcmn_task *h;
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, spinner, NULL, &h), 0);
	cbcmn_snapshot s;
	WAIT_SNAP(rt, s, s.total.parked == 1);
	assert_int_equal(s.tasks_live, 1);
	assert_int_equal(s.total.running + s.total.runnable, 0);
	/* The opener gives up on it: it ends with CBCMN_EBUDGET. */
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_EBUDGET);
	int64_t r = 0;
	assert_int_equal(cbcmn_task_join(NULL, h, &r), 0);
	assert_int_equal(r, CBCMN_EBUDGET);
	s = snap(rt, NULL, 0);
	assert_int_equal(s.total.parked, 0);
	assert_true(s.quiescent);
	t_destroy(rt);
}

static void test_quiescent_at_the_right_moments(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 1); /* nothing yet */
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 0); /* a nursery open */
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 1);
	cbcmn_obligation o;
	assert_int_equal(cbcmn_obligation_reserve(rt, NULL, "q", &o), 0);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 0); /* an obligation outstanding */
	assert_int_equal(cbcmn_obligation_abort(NULL, &o), 0);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 1);
	t_run(rt, nop, NULL, 0);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 1); /* after a run */
	t_destroy(rt);
}

/* The core profile has no executor: nothing to read but the totals. */
static void test_core_profile_has_totals_only(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.profile = CBCMN_PROFILE_CORE;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	cbcmn_exec_snapshot per[1];
	cbcmn_snapshot s = snap(rt, per, 1);
	assert_int_equal(s.executors, 0);
	assert_true(s.quiescent);
	cbcmn_obligation o;
	assert_int_equal(cbcmn_obligation_reserve(rt, NULL, NULL, &o), 0);
	s = snap(rt, NULL, 0);
	assert_int_equal(s.total.obligations, 1);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 0);
	assert_int_equal(cbcmn_obligation_commit(NULL, &o), 0);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 1);
	t_destroy(rt);
}

static void test_bad_arguments_are_einval(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_snapshot s = {.size = sizeof(s), .version = CBCMN_SNAPSHOT_VERSION};
	cbcmn_exec_snapshot per[1];
	assert_int_equal(cbcmn_runtime_snapshot(NULL, &s, NULL, 0), -EINVAL);
	assert_int_equal(cbcmn_runtime_snapshot(rt, NULL, NULL, 0), -EINVAL);
	assert_int_equal(cbcmn_runtime_snapshot(rt, &s, NULL, 1), -EINVAL);
	s.size = sizeof(s) - 8;
	s.tasks_live = 12345;
	assert_int_equal(cbcmn_runtime_snapshot(rt, &s, per, 1), -EINVAL);
	assert_int_equal(s.tasks_live, 12345); /* untouched */
	s.size = sizeof(s) + 8;
	assert_int_equal(cbcmn_runtime_snapshot(rt, &s, per, 1), -EINVAL);
	s.size = sizeof(s);
	s.version = 0;
	assert_int_equal(cbcmn_runtime_snapshot(rt, &s, per, 1), -EINVAL);
	s.version = CBCMN_SNAPSHOT_VERSION + 1;
	assert_int_equal(cbcmn_runtime_snapshot(rt, &s, per, 1), -EINVAL);
	s.version = CBCMN_SNAPSHOT_VERSION;
	assert_int_equal(cbcmn_runtime_snapshot(rt, &s, per, 1), 0);
	assert_int_equal(cbcmn_runtime_snapshot(rt, &s, NULL, 0), 0);
	assert_int_equal(cbcmn_runtime_is_quiescent(NULL), -EINVAL);
	t_destroy(rt);
}

/* ---- racing readers ------------------------------------------------------- */

#define PINGS 2000

static int64_t pinger(cbcmn_cx *cx, void *arg)
{
	cbcmn_chan **c = arg;
	for (int i = 0; i < T_SCALE(PINGS); i++) {
		TASK_CHECK(cbcmn_chan_send(cx, c[0], &i) == 0);
		int v;
		TASK_CHECK(cbcmn_chan_recv(cx, c[1], &v) == 0);
		if (i % 64 == 0)
			cbcmn_sleep(cx, 1000);
	}
	return 0;
}

static int64_t ponger(cbcmn_cx *cx, void *arg)
{
	cbcmn_chan **c = arg;
	for (int i = 0; i < T_SCALE(PINGS); i++) {
		int v;
		TASK_CHECK(cbcmn_chan_recv(cx, c[0], &v) == 0);
		cbcmn_nursery *n;
		TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, nop, NULL, NULL) == 0);
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
		TASK_CHECK(cbcmn_chan_send(cx, c[1], &v) == 0);
	}
	return 0;
}

struct reader {
	cbcmn_runtime *rt;
	_Atomic int stop;
	_Atomic uint64_t reads; /* the test starts the race after the first */
	uint64_t max_seen;
};

static void *reader_main(void *p)
{
	struct reader *r = p;
	cbcmn_exec_snapshot per[4];
	while (!atomic_load(&r->stop)) {
		cbcmn_snapshot s = {.size = sizeof(s), .version = CBCMN_SNAPSHOT_VERSION};
		if (cbcmn_runtime_snapshot(r->rt, &s, per, 4) != 0)
			abort();
		/* Never more of anything than there are tasks and nurseries
		 * that can exist here at once (4 tasks, 4 nurseries). */
		uint64_t m = s.total.blocked_chan + s.total.blocked_join + s.total.blocked_timer;
		if (s.total.running > 2 || m > 8 || s.total.nurseries_open > 8 ||
		    s.total.obligations != 0) {
			fprintf(stderr, "snapshot out of bounds: running %llu blocked %llu nurseries %llu obligations %llu\n",
				(unsigned long long)s.total.running, (unsigned long long)m,
				(unsigned long long)s.total.nurseries_open,
				(unsigned long long)s.total.obligations);
			abort();
		}
		if (m > r->max_seen)
			r->max_seen = m;
		(void)cbcmn_runtime_is_quiescent(r->rt);
		atomic_fetch_add(&r->reads, 1);
	}
	return NULL;
}

static int64_t pingpong_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, pinger, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, ponger, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_snapshot_races_a_running_runtime(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	cbcmn_chan *c[2];
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &c[0]), 0);
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &c[1]), 0);
	struct reader r = {.rt = rt};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, reader_main, &r), 0);
	/* The reader must be reading while the ping-pong runs: on a loaded
	 * machine its thread may get no CPU before the ping-pong ends.  Wait
	 * for its first read (a hang bound, not a speed limit). */
	for (uint64_t until = t_now_ns() + T_STALL_NS; atomic_load(&r.reads) == 0;) {
		assert_true(t_now_ns() < until);
		sched_yield();
	}
	t_run(rt, pingpong_main, c, 0);
	atomic_store(&r.stop, 1);
	pthread_join(th, NULL);
	assert_true(r.reads > 0);
	/* At rest again: exact, once the executor is off the root task's
	 * stack (it woke us from that stack). */
	cbcmn_snapshot s;
	WAIT_SNAP(rt, s, s.total.running == 0);
	assert_int_equal(s.tasks_live, 0);
	assert_int_equal(s.total.blocked_chan + s.total.blocked_join + s.total.blocked_timer, 0);
	assert_int_equal(s.total.running + s.total.runnable, 0);
	assert_true(s.quiescent);
	assert_int_equal(cbcmn_chan_destroy(c[0]), 0);
	assert_int_equal(cbcmn_chan_destroy(c[1]), 0);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_counts_match_a_known_workload),
		T_WATCHED_TEST(test_await_counts_as_join),
		T_WATCHED_TEST(test_io_and_pool_waits_are_counted),
		T_WATCHED_TEST(test_exhausted_task_counts_as_parked),
		T_WATCHED_TEST(test_quiescent_at_the_right_moments),
		T_WATCHED_TEST(test_core_profile_has_totals_only),
		T_WATCHED_TEST(test_bad_arguments_are_einval),
		T_WATCHED_TEST(test_snapshot_races_a_running_runtime),
	};
	return cmocka_run_group_tests_name("snapshot", tests, NULL, NULL);
}
