/* test_stall.c: an executor held by one run (a blocking libc call, a loop
 * without checkpoints) strands nothing (issue 15, liveness 2 and 3): the
 * stall monitor (lib/monitor.c) reports it, others take its queue, and a
 * task woken for it runs elsewhere. */
#include "helpers.h"

#include "../lib/monitor.h"

#include <cbcmn_chan.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>

#define STALL_NS 2000000ull /* cfg.stall_ns of these tests: 2 ms */

/* A pipe some task reads with a plain read(2), holding its executor, and
 * the rescue that writes it after T_STALL_NS if nobody else did: a test
 * that would deadlock fails instead, and its runtime can still end. */
struct rescue {
	int p[2];
	_Atomic int done, rescued;
	pthread_t th;
};

static void *rescue_main(void *arg)
{
	struct rescue *r = arg;
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&r->done)) {
		if (t_now_ns() > end) {
			atomic_store(&r->rescued, 1);
			if (write(r->p[1], "r", 1) != 1)
				return NULL;
			end = t_now_ns() + T_STALL_NS; /* once more later, if still stuck */
		}
		usleep(1000);
	}
	return NULL;
}

static void rescue_start(struct rescue *r)
{
	assert_int_equal(pipe2(r->p, O_CLOEXEC), 0);
	atomic_store(&r->done, 0);
	atomic_store(&r->rescued, 0);
	assert_int_equal(pthread_create(&r->th, NULL, rescue_main, r), 0);
}

/* Stop the rescue; true if it had to write. */
static bool rescue_stop(struct rescue *r)
{
	atomic_store(&r->done, 1);
	pthread_join(r->th, NULL);
	close(r->p[0]);
	close(r->p[1]);
	return atomic_load(&r->rescued);
}

/* Read one byte with a plain read(2): the executor is held meanwhile. */
static bool read_byte(int fd)
{
	char c;
	ssize_t n;
	do
		n = read(fd, &c, 1);
	while (n < 0 && errno == EINTR);
	return n == 1;
}

static cbcmn_runtime *stall_runtime(uint32_t workers, uint64_t steal_cost_ns)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cfg.policy = CBCMN_PIN_NONE;
	cfg.stall_ns = STALL_NS;
	cfg.steal_cost_ns = steal_cost_ns;
	return t_runtime_cfg(&cfg);
}

/* Wait (bounded) until executor ex reports task id stalling it. */
static bool wait_stalled(cbcmn_runtime *rt, uint32_t ex, uint64_t id)
{
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (t_now_ns() < end) {
		cbcmn_stats st;
		cbcmn_executor_stats per[CBCMN_MAX_EXECUTORS];
		assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, CBCMN_MAX_EXECUTORS), 0);
		if (per[ex].stalled_task == id)
			return true;
		usleep(500);
	}
	return false;
}

/* ---- liveness 3: the queue behind a blocked call -------------------------- */

struct behind {
	struct rescue r;
	_Atomic uint32_t parent_exec, child_exec;
};

static int64_t behind_writer(cbcmn_cx *cx, void *arg)
{
	struct behind *b = arg;
	atomic_store(&b->child_exec, cbcmn_cx_executor(cx));
	TASK_CHECK(write(b->r.p[1], "w", 1) == 1);
	return 0;
}

static int64_t behind_reader(cbcmn_cx *cx, void *arg)
{
	struct behind *b = arg;
	/* Picks enough for a mean pick time (a load window, 256 picks): a
	 * victim without one passes the gate whatever it costs. */
	for (int i = 0; i < 600; i++)
		cbcmn_yield(cx);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	/* Queued on our deque, behind the read below. */
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, behind_writer, b, NULL) == 0);
	atomic_store(&b->parent_exec, cbcmn_cx_executor(cx));
	TASK_CHECK(read_byte(b->r.p[0]));
	return cbcmn_nursery_await_all(cx, n);
}

/* Run behind_reader on rt: the child ran (on another executor than the
 * reader, which it did not wait for), b filled in. */
static void behind_run(cbcmn_runtime *rt, struct behind *b)
{
	memset(b, 0, sizeof(*b));
	rescue_start(&b->r);
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, behind_reader, b, &res), 0);
	bool rescued = rescue_stop(&b->r);
	assert_int_equal(atomic_load(&task_bad_line), 0);
	assert_false(rescued); /* the child never ran: the read waited for the rescue */
	assert_int_equal(res, 0);
	assert_int_not_equal(atomic_load(&b->child_exec), atomic_load(&b->parent_exec));
}

/* The bug: a child queued on the deque of an executor whose task then
 * blocked in read(2) waited for the steal gate, which passed only once the
 * run had lasted longer than cfg.steal_cost_ns (an hour here): the child,
 * which the read waits for, never ran.  The monitor sees the run past
 * cfg.stall_ns (2 ms) and the gate passes for it. */
static void test_regression_child_queued_behind_a_blocked_read_runs_elsewhere(void **state)
{
	(void)state;
	cbcmn_runtime *rt = stall_runtime(2, 3600ull * 1000000000ull);
	struct behind b;
	behind_run(rt, &b);
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 2), 0);
	assert_true(per[atomic_load(&b.parent_exec)].stalls >= 1);
	t_destroy(rt);
}

/* A runtime with room (min_workers 1 of 2): the one live executor stalls
 * with the child the read waits for on its deque; nobody is idle to take
 * it, so the monitor's notification starts the second executor, which
 * takes the child, and which retires once idle again: a temporary
 * replacement. */
static void test_stall_with_work_waiting_starts_a_temporary_executor(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.min_workers = 1;
	cfg.idle_retire_ms = 5;
	cfg.policy = CBCMN_PIN_NONE;
	cfg.stall_ns = STALL_NS;
	cfg.steal_cost_ns = 3600ull * 1000000000ull;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct behind b;
	behind_run(rt, &b); /* on the two executors, whichever was started */
	cbcmn_stats st;
	uint64_t end = t_now_ns() + T_STALL_NS;
	do {
		assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
		if (st.executor_retires >= 1)
			break;
		usleep(1000);
	} while (t_now_ns() < end);
	assert_true(st.executor_starts >= 1);
	assert_true(st.executor_retires >= 1); /* temporary */
	t_destroy(rt);
}

/* ---- the spare: a static runtime's replacement executor ------------------ */

/* Wait (bounded) until the spare has started and retired; the stats. */
static void wait_spare_retired(cbcmn_runtime *rt, cbcmn_stats *st)
{
	uint64_t end = t_now_ns() + T_STALL_NS;
	do {
		assert_int_equal(cbcmn_stats_snapshot(rt, st, NULL, 0), 0);
		if (st->executor_retires >= 1 && st->executors_live == 1)
			break;
		usleep(1000);
	} while (t_now_ns() < end);
}

/* The bug: a default (static) runtime of one executor whose task blocked
 * in read(2), with the child that would write the pipe queued on its
 * deque, had no executor to run the child: the monitor reported the stall
 * and only a runtime with room (min_workers < workers) got one more; the
 * read waited for the test's rescue, forever without it.  Now the spare
 * slot kept at creation is started (the blocked thread sleeps in the
 * kernel), runs the child, and retires once the stall has ended: the
 * runtime still counts one executor. */
static void test_regression_static_runtime_blocked_in_read_runs_its_child_on_the_spare(
	void **state)
{
	(void)state;
	cbcmn_runtime *rt = stall_runtime(1, 3600ull * 1000000000ull);
	assert_int_equal(rt->spare, 1);
	struct behind b;
	behind_run(rt, &b); /* the child ran on executor 1: the spare */
	assert_int_equal(atomic_load(&b.child_exec), 1);
	cbcmn_stats st;
	wait_spare_retired(rt, &st);
	assert_int_equal(st.executors, 1);
	assert_true(st.executor_starts >= 1);
	assert_true(st.executor_retires >= 1);
	assert_int_equal(st.executors_live, 1);
	assert_int_equal(cbcmn_runtime_workers(rt), 1);
	/* The spare's work is in the totals, not in per[]. */
	cbcmn_executor_stats per[2];
	memset(per, 0x5a, sizeof(per));
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 2), 0);
	assert_true(per[0].stalls >= 1);
	assert_true(st.total.tasks_run > per[0].tasks_run);
	assert_int_equal(per[1].tasks_run, 0x5a5a5a5a5a5a5a5aull);
	t_destroy(rt);
}

/* A loop of usleep(3) without a checkpoint holds the one executor too:
 * the runnable task spawned before it runs on the spare. */
struct naps {
	_Atomic int go;
	_Atomic uint32_t runner_exec;
};

static int64_t nap_runner(cbcmn_cx *cx, void *arg)
{
	struct naps *z = arg;
	atomic_store(&z->runner_exec, cbcmn_cx_executor(cx));
	atomic_store(&z->go, 1);
	return 0;
}

static int64_t napper(cbcmn_cx *cx, void *arg)
{
	struct naps *z = arg;
	for (int i = 0; i < 600; i++) /* a mean pick time (behind_reader) */
		cbcmn_yield(cx);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, nap_runner, z, NULL) == 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&z->go) && t_now_ns() < end)
		usleep(1000);
	TASK_CHECK(atomic_load(&z->go));
	return cbcmn_nursery_await_all(cx, n);
}

static void test_regression_static_runtime_napping_in_usleep_runs_the_runnable_task(void **state)
{
	(void)state;
	cbcmn_runtime *rt = stall_runtime(1, 3600ull * 1000000000ull);
	struct naps z = {0};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, napper, &z, &res), 0);
	assert_int_equal(atomic_load(&task_bad_line), 0); /* before: the nap ran out */
	assert_int_equal(res, 0);
	assert_int_equal(atomic_load(&z.runner_exec), 1);
	cbcmn_stats st;
	wait_spare_retired(rt, &st);
	assert_true(st.executor_retires >= 1);
	assert_int_equal(st.executors_live, 1);
	t_destroy(rt);
}

/* The child the spare ran goes on after the stall: it reads a pipe
 * through the spare's ring, a read completed after the stall ended.  Off
 * duty, the spare keeps its thread until its ring is empty, hands the
 * woken child to the program's executor, and retires. */
struct after {
	struct behind b;
	int q[2];
	_Atomic uint32_t sleep_exec, done_exec;
	_Atomic int done;
};

static int64_t after_child(cbcmn_cx *cx, void *arg)
{
	struct after *a = arg;
	atomic_store(&a->b.child_exec, cbcmn_cx_executor(cx));
	atomic_store(&a->sleep_exec, cbcmn_cx_executor(cx));
	TASK_CHECK(write(a->b.r.p[1], "w", 1) == 1); /* the stall ends */
	char c;
	/* On the spare's ring, completed once it is off duty (the feeder
	 * writes 5 ms later): the woken child is handed back. */
	TASK_CHECK(cbcmn_read(cx, a->q[0], &c, 1) == 1);
	TASK_CHECK(cbcmn_sleep(cx, 1000000) == 0);
	atomic_store(&a->done_exec, cbcmn_cx_executor(cx));
	atomic_store(&a->done, 1);
	return 0;
}

static int64_t after_reader(cbcmn_cx *cx, void *arg)
{
	struct after *a = arg;
	for (int i = 0; i < 600; i++)
		cbcmn_yield(cx);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, after_child, a, NULL) == 0);
	atomic_store(&a->b.parent_exec, cbcmn_cx_executor(cx));
	TASK_CHECK(read_byte(a->b.r.p[0]));
	return cbcmn_nursery_await_all(cx, n);
}

static void *after_feeder(void *arg)
{
	struct after *a = arg;
	/* Once the child waits in its read on the spare. */
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&a->sleep_exec) && t_now_ns() < end)
		usleep(1000);
	usleep(5000);
	if (write(a->q[1], "q", 1) != 1)
		return NULL;
	return NULL;
}

static void test_spare_finishes_its_io_off_duty_then_retires(void **state)
{
	(void)state;
	cbcmn_runtime *rt = stall_runtime(1, 3600ull * 1000000000ull);
	struct after *a = calloc(1, sizeof(*a));
	assert_non_null(a);
	assert_int_equal(pipe2(a->q, O_CLOEXEC), 0);
	rescue_start(&a->b.r);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, after_feeder, a), 0);
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, after_reader, a, &res), 0);
	pthread_join(th, NULL);
	bool rescued = rescue_stop(&a->b.r);
	assert_int_equal(atomic_load(&task_bad_line), 0);
	assert_false(rescued);
	assert_int_equal(res, 0);
	assert_int_equal(atomic_load(&a->done), 1);
	assert_int_equal(atomic_load(&a->sleep_exec), 1); /* it began on the spare */
	printf("  the child ended on executor %u\n", atomic_load(&a->done_exec));
	cbcmn_stats st;
	wait_spare_retired(rt, &st);
	assert_true(st.executor_retires >= 1);
	assert_int_equal(st.executors_live, 1);
	close(a->q[0]);
	close(a->q[1]);
	free(a);
	t_destroy(rt);
}

/* Destroy right after the work the spare stood in for ended: the spare
 * may still be running (on duty until the monitor's next look, then
 * retiring).  No hang, nothing left behind (ASan), a second round the
 * same. */
static void test_destroy_while_the_spare_runs(void **state)
{
	(void)state;
	for (int i = 0; i < 2; i++) {
		cbcmn_runtime *rt = stall_runtime(1, 3600ull * 1000000000ull);
		struct behind b;
		behind_run(rt, &b);
		t_destroy(rt);
	}
}

/* Which runtimes keep a spare: a static one watched by the monitor; not
 * a lab runtime (deterministic: no monitor), nor one with room of its own
 * (min_workers < workers), nor one without a monitor. */
static void test_only_static_watched_runtimes_keep_a_spare(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.policy = CBCMN_PIN_NONE;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	assert_int_equal(rt->spare, 1);
	assert_int_equal(cbcmn_runtime_workers(rt), 1);
	cbcmn_stats st;
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
	assert_int_equal(st.executors, 1);
	assert_int_equal(st.executors_live, 1);
	/* Nobody may name it. */
	cbcmn_spawn_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = 1};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn_ex(NULL, n, nap_runner, NULL, &o, NULL), -EINVAL);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	t_destroy(rt);

	cfg.flags = CBCMN_CONFIG_LAB;
	rt = t_runtime_cfg(&cfg);
	assert_int_equal(rt->spare, 0);
	assert_int_equal(rt->nexec, 1);
	t_destroy(rt);

	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.min_workers = 1;
	cfg.policy = CBCMN_PIN_NONE;
	rt = t_runtime_cfg(&cfg);
	assert_int_equal(rt->spare, 0);
	t_destroy(rt);

	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.policy = CBCMN_PIN_NONE;
	cfg.stall_ns = CBCMN_STALL_OFF;
	rt = t_runtime_cfg(&cfg);
	assert_int_equal(rt->spare, 0);
	t_destroy(rt);
}

/* The bug (found in review, before it shipped): a static runtime of
 * CBCMN_MAX_EXECUTORS executors kept a spare at index
 * CBCMN_MAX_EXECUTORS, one word past the idle and mail bitmaps (inside
 * the runtime's record: no sanitizer sees it) and past what a watcher
 * accepts (cbcmn-top would refuse the segment).  None there: it is full. */
static void test_regression_runtime_of_max_executors_keeps_no_spare(void **state)
{
	(void)state;
	/* A ring and an eventfd per executor, and room for the rest: the
	 * case needs the maximum itself, it cannot size down. */
	long need = 2L * CBCMN_MAX_EXECUTORS + 64;
	if (t_nofile_free() < need)
		T_SKIP("%u executors need about %ld descriptors; RLIMIT_NOFILE allows %ld more",
		       CBCMN_MAX_EXECUTORS, need, t_nofile_free());
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = CBCMN_MAX_EXECUTORS;
	cfg.policy = CBCMN_PIN_NONE;
	cfg.ring_entries = 8;
	cfg.spin_ns = CBCMN_SPIN_NONE;
	/* 1024 of the smallest rings take 8 MiB of locked memory where the
	 * kernel counts rings (6.13 on), the whole of a login's default
	 * limit, which is per user: a ring another process of the user holds
	 * (make test's other lane) left this test one short.  What it checks
	 * is the spare, not the rings: under a limit that cannot hold them
	 * twice over it runs on epoll. */
	struct rlimit ml;
	if (geteuid() != 0 && getrlimit(RLIMIT_MEMLOCK, &ml) == 0 && ml.rlim_cur != RLIM_INFINITY &&
	    ml.rlim_cur < 2ull * CBCMN_MAX_EXECUTORS * 8192) {
		printf("    RLIMIT_MEMLOCK %llu KiB cannot hold %u rings twice over: epoll backend\n",
		       (unsigned long long)ml.rlim_cur / 1024, CBCMN_MAX_EXECUTORS);
		cfg.backend = CBCMN_BACKEND_EPOLL;
	}
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	assert_int_equal(rt->spare, 0);
	assert_int_equal(rt->nexec, CBCMN_MAX_EXECUTORS);
	cbcmn_stats st;
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
	assert_int_equal(st.executors, CBCMN_MAX_EXECUTORS);
	t_destroy(rt);
}

/* ---- liveness 2: a task woken for a stalled home -------------------------- */

struct home {
	struct rescue r;
	cbcmn_chan *ch;
	cbcmn_runtime *rt;
	_Atomic uint32_t b_exec, b_ran_on;
	_Atomic int b_waiting;
	_Atomic uint64_t a_id;
	bool task_waker;
};

/* B: blocks on the channel (its home is where it blocked), then writes
 * the pipe A reads. */
static int64_t home_b(cbcmn_cx *cx, void *arg)
{
	struct home *h = arg;
	atomic_store(&h->b_exec, cbcmn_cx_executor(cx));
	atomic_store(&h->b_waiting, 1);
	int v;
	TASK_CHECK(cbcmn_chan_recv(cx, h->ch, &v) == 0);
	atomic_store(&h->b_ran_on, cbcmn_cx_executor(cx));
	TASK_CHECK(write(h->r.p[1], "b", 1) == 1);
	return 0;
}

/* A: pinned to B's home; holds it in read(2) until B writes. */
static int64_t home_a(cbcmn_cx *cx, void *arg)
{
	struct home *h = arg;
	atomic_store(&h->a_id, cbcmn_cx_task_id(cx));
	TASK_CHECK(read_byte(h->r.p[0]));
	return 0;
}

/* C: on the other executor, wakes B. */
static int64_t home_c(cbcmn_cx *cx, void *arg)
{
	struct home *h = arg;
	int v = 1;
	TASK_CHECK(cbcmn_chan_send(cx, h->ch, &v) == 0);
	return 0;
}

/* early: wake B as soon as A runs, before the stall can be seen. */
static void woken_for_stalled_home(bool task_waker, bool early)
{
	cbcmn_runtime *rt = early ? NULL : stall_runtime(2, 0);
	if (early) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 2;
		cfg.policy = CBCMN_PIN_NONE;
		cfg.stall_ns = 200000000ull; /* the wake comes long before */
		rt = t_runtime_cfg(&cfg);
	}
	struct home h;
	memset(&h, 0, sizeof(h));
	h.rt = rt;
	h.task_waker = task_waker;
	rescue_start(&h.r);
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &h.ch), 0);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, home_b, &h, NULL), 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&h.b_waiting) && t_now_ns() < end)
		usleep(200);
	assert_true(atomic_load(&h.b_waiting));
	uint32_t home = atomic_load(&h.b_exec);
	assert_int_equal(cbcmn_nursery_spawn_pinned(NULL, n, home, home_a, &h, NULL), 0);
	end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&h.a_id) && t_now_ns() < end)
		usleep(200);
	/* A runs after B switched away: B is blocked, its home is A's.  A
	 * holds its executor from here on: nothing sent there runs. */
	if (!early)
		assert_true(wait_stalled(rt, home, atomic_load(&h.a_id)));
	int v = 1;
	if (task_waker)
		assert_int_equal(cbcmn_nursery_spawn_pinned(NULL, n, 1 - home, home_c, &h, NULL), 0);
	else
		assert_int_equal(cbcmn_chan_send(NULL, h.ch, &v), 0);
	int64_t r = cbcmn_nursery_await_all(NULL, n);
	bool rescued = rescue_stop(&h.r);
	assert_int_equal(atomic_load(&task_bad_line), 0);
	assert_false(rescued); /* B went home to A's executor and waited there */
	assert_int_equal(r, 0);
	assert_int_not_equal(atomic_load(&h.b_ran_on), home);
	assert_int_equal(cbcmn_chan_destroy(h.ch), 0);
	t_destroy(rt);
}

/* The bug: a task woken from another executor went home to its last
 * executor whenever that one was not parked, even when a blocking call
 * held it; the blocked call waited for that very task: a deadlock. */
static void test_regression_task_woken_by_a_task_for_a_stalled_home_runs_elsewhere(void **state)
{
	(void)state;
	woken_for_stalled_home(true, false);
}

/* The same wake from a thread outside the runtime (the remote list). */
static void test_regression_task_woken_by_a_thread_for_a_stalled_home_runs_elsewhere(void **state)
{
	(void)state;
	woken_for_stalled_home(false, false);
}

/* The bug: a thread's wake sent home in the stall_ns before the stall was
 * seen sat in the home's remote list for as long as the stall: forever,
 * when the blocked call waited for that task.  The monitor moves what
 * threads sent a stalled executor. */
static void test_regression_task_woken_by_a_thread_before_the_stall_is_seen_runs_elsewhere(void **state)
{
	(void)state;
	woken_for_stalled_home(false, true);
}

/* The bug: a task's wake sent home (a message in the home's lane) in the
 * stall_ns before the stall was seen waited in that lane, whose only
 * consumer is the stalled executor, for as long as the stall: forever
 * here, where the blocked call waits for that task.  The monitor takes
 * the task out of the message (the home only acknowledges it later). */
static void test_regression_task_woken_by_a_task_before_the_stall_is_seen_runs_elsewhere(void **state)
{
	(void)state;
	woken_for_stalled_home(true, true);
}

/* ---- an executor the monitor starts ---------------------------------------- */

struct started {
	struct rescue r;
	cbcmn_chan *ch;
	_Atomic int b_waiting, blocked_segv, blocked_usr1;
	_Atomic uint64_t a_id;
	_Atomic uint32_t b_ran_on;
};

static int64_t started_b(cbcmn_cx *cx, void *arg)
{
	struct started *s = arg;
	atomic_store(&s->b_waiting, 1);
	int v;
	TASK_CHECK(cbcmn_chan_recv(cx, s->ch, &v) == 0);
	atomic_store(&s->b_ran_on, cbcmn_cx_executor(cx));
	sigset_t m;
	TASK_CHECK(pthread_sigmask(SIG_BLOCK, NULL, &m) == 0);
	atomic_store(&s->blocked_segv, sigismember(&m, SIGSEGV));
	atomic_store(&s->blocked_usr1, sigismember(&m, SIGUSR1));
	TASK_CHECK(write(s->r.p[1], "b", 1) == 1);
	return 0;
}

static int64_t started_a(cbcmn_cx *cx, void *arg)
{
	struct started *s = arg;
	atomic_store(&s->a_id, cbcmn_cx_task_id(cx));
	TASK_CHECK(read_byte(s->r.p[0]));
	return 0;
}

/* The bug: an executor the monitor started (a stall's rescued work, no
 * executor idle, room to grow) inherited the monitor thread's mask, every
 * signal blocked: a stack overflow there (SIGSEGV on a guard page) killed
 * the process instead of failing the task, and the program's signals never
 * reached it.  An executor thread takes the mask of the thread that
 * created the runtime, whoever starts it. */
static void test_regression_executor_started_by_the_monitor_takes_signals(void **state)
{
	(void)state;
	sigset_t none, old;
	sigemptyset(&none);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &none, &old), 0);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.min_workers = 1; /* executor 1 starts only when asked */
	cfg.policy = CBCMN_PIN_NONE;
	cfg.stall_ns = STALL_NS;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
	struct started s;
	memset(&s, 0, sizeof(s));
	rescue_start(&s.r);
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &s.ch), 0);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	/* B blocks on executor 0, the one live; A holds executor 0 in
	 * read(2); a thread wakes B, which goes home to executor 0's remote
	 * list: only the monitor moves it, and with nobody idle its
	 * notification starts executor 1. */
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, started_b, &s, NULL), 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&s.b_waiting) && t_now_ns() < end)
		usleep(200);
	assert_int_equal(cbcmn_nursery_spawn_pinned(NULL, n, 0, started_a, &s, NULL), 0);
	end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&s.a_id) && t_now_ns() < end)
		usleep(200);
	int v = 1;
	assert_int_equal(cbcmn_chan_send(NULL, s.ch, &v), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	bool rescued = rescue_stop(&s.r);
	assert_int_equal(atomic_load(&task_bad_line), 0);
	assert_false(rescued);
	assert_int_equal(atomic_load(&s.b_ran_on), 1);
	assert_int_equal(atomic_load(&s.blocked_segv), 0);
	assert_int_equal(atomic_load(&s.blocked_usr1), 0);
	assert_int_equal(cbcmn_chan_destroy(s.ch), 0);
	t_destroy(rt);
}

/* ---- the report ------------------------------------------------------------ */

struct spin {
	_Atomic int stop;
	_Atomic uint64_t id;
	_Atomic uint32_t exec;
};

/* A loop without a checkpoint: its executor runs nothing else. */
static int64_t spin_task(cbcmn_cx *cx, void *arg)
{
	struct spin *s = arg;
	atomic_store(&s->exec, cbcmn_cx_executor(cx));
	atomic_store(&s->id, cbcmn_cx_task_id(cx));
	while (!atomic_load(&s->stop))
		usleep(100);
	return 0;
}

/* Spawn spin_task on rt and wait (bounded) until it runs; stop it. */
static cbcmn_nursery *spin_start(cbcmn_runtime *rt, struct spin *s)
{
	memset(s, 0, sizeof(*s));
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, spin_task, s, NULL), 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&s->id) && t_now_ns() < end)
		usleep(200);
	return n;
}

static void spin_stop(struct spin *s, cbcmn_nursery *n)
{
	atomic_store(&s->stop, 1);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
}

/* A stall is reported with the task holding the executor (stats, for
 * cbcmn-stat and cbcmn-top), and the report ends with the run. */
static void test_stall_is_reported_with_its_task_until_the_run_ends(void **state)
{
	(void)state;
	cbcmn_runtime *rt = stall_runtime(2, 0);
	struct spin s;
	cbcmn_nursery *n = spin_start(rt, &s);
	uint32_t ex = atomic_load(&s.exec);
	bool seen = wait_stalled(rt, ex, atomic_load(&s.id));
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 2), 0);
	spin_stop(&s, n);
	assert_true(seen);
	assert_int_equal(per[ex].stalls, 1); /* once per stall, not per look */
	assert_int_equal(per[1 - ex].stalled_task, 0);
	assert_true(st.total.stalls >= 1);
	assert_int_equal(st.total.stalled_task, 1); /* the totals count stalled executors */
	/* The run ended: the report goes with it. */
	assert_true(wait_stalled(rt, ex, 0));
	t_destroy(rt);
}

/* ---- what is not a stall ---------------------------------------------------- */

/* The starts of one fork-join round: the longest gap between two of them
 * (the parent's and its children's, one after another on the one
 * executor).  Only the executor's thread writes them. */
static uint64_t fj_last_ns, fj_gap_ns;

static void fj_mark(void)
{
	uint64_t now = t_now_ns();
	if (now - fj_last_ns > fj_gap_ns)
		fj_gap_ns = now - fj_last_ns;
	fj_last_ns = now;
}

static int64_t nap_child(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	fj_mark();
	usleep(1000);
	return 0;
}

static int64_t fork_join_parent(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	fj_last_ns = t_now_ns();
	fj_gap_ns = 0;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 400; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, nap_child, NULL, NULL) == 0);
	/* One executor: every child runs here, on our stack, in our run. */
	int64_t rc = cbcmn_nursery_await_all(cx, n);
	fj_mark();
	return rc;
}

/* The bug: a task awaiting its nursery runs the children on its own
 * stack, all in its one run: 400 children of 1 ms were one run of 0.4 s,
 * reported a stall (and its executor routed around) while it started a
 * child every millisecond.  A stall is a run in which no task starts.
 * (stall_ns 250 ms: a child is far shorter.)  The monitor reports a stall
 * only after more than stall_ns without a start, so a round whose starts
 * were all less than stall_ns / 2 apart must report none; a loaded host
 * that kept the executor's thread off its CPU longer (an ASan run beside
 * a hog, at a load of 35: one report) makes a real stall, and the round
 * is run again. */
static void test_regression_fork_join_subtree_run_inline_is_not_a_stall(void **state)
{
	(void)state;
	const uint64_t stall_ns = 250000000ull;
	uint64_t stalls = 0, gap = 0;
	for (int round = 0; round < 5; round++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cfg.stall_ns = stall_ns;
		cbcmn_runtime *rt = t_runtime_cfg(&cfg);
		int64_t res = -1;
		assert_int_equal(cbcmn_runtime_run(rt, fork_join_parent, NULL, &res), 0);
		assert_int_equal(atomic_load(&task_bad_line), 0);
		assert_int_equal(res, 0);
		cbcmn_stats st;
		assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
		assert_true(st.total.inline_runs >= 1);
		t_destroy(rt);
		stalls = st.total.stalls;
		gap = fj_gap_ns;
		if (stalls == 0 || gap <= stall_ns / 2)
			break;
		print_message("round %d: %llu stall(s), the starts up to %.1f ms apart (the host): again\n",
			      round, (unsigned long long)stalls, gap / 1e6);
	}
	print_message("the starts at most %.1f ms apart\n", gap / 1e6);
	if (stalls)
		fail_msg("%llu stall(s) reported; the starts were at most %.1f ms apart (stall_ns %.0f ms)",
			 (unsigned long long)stalls, gap / 1e6, stall_ns / 1e6);
}

/* ---- the monitor's own cost ------------------------------------------------ */

/* The bug: a quiet runtime's monitor (every executor parked) still woke
 * every 100 ms at the end of its back-off, about ten times a second for
 * nothing.  Now it sleeps until an executor leaves its park, and then
 * watches again: a stall that begins after the quiet is still seen.  Off
 * (CBCMN_STALL_OFF) and in lab mode there is none. */
static void test_regression_quiet_runtime_monitor_never_wakes(void **state)
{
	(void)state;
	cbcmn_runtime *rt = stall_runtime(2, 0);
	assert_non_null(rt->mon);
	/* The start-up's looks: until the executors have parked and the
	 * monitor with them (bounded: a monitor that never rests fails
	 * below). */
	uint64_t end = t_now_ns() + T_STALL_NS, before = cbcmn__monitor_wakeups(rt);
	do {
		usleep(50000);
		uint64_t w = cbcmn__monitor_wakeups(rt);
		if (w == before)
			break;
		before = w;
	} while (t_now_ns() < end);
	usleep(300000);
	uint64_t woke = cbcmn__monitor_wakeups(rt) - before;
	struct spin s;
	cbcmn_nursery *n = spin_start(rt, &s);
	bool seen = wait_stalled(rt, atomic_load(&s.exec), atomic_load(&s.id));
	spin_stop(&s, n);
	t_destroy(rt);
	assert_int_equal(woke, 0);
	assert_true(seen); /* the executor's park ended the monitor's sleep */

	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.stall_ns = CBCMN_STALL_OFF;
	rt = t_runtime_cfg(&cfg);
	assert_null(rt->mon);
	t_destroy(rt);
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.flags = CBCMN_CONFIG_LAB;
	rt = t_runtime_cfg(&cfg);
	assert_null(rt->mon);
	t_destroy(rt);
}

/* A stall_ns of centuries: a run of 200 ms is no stall, and the monitor
 * backs off (doubling from 1 ms: a handful of looks), no arithmetic of
 * its deadlines wrapping into a busy loop. */
static void test_huge_stall_ns_reports_nothing_and_backs_off(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.stall_ns = CBCMN_STALL_OFF - 1;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	assert_non_null(rt->mon);
	struct spin s;
	cbcmn_nursery *n = spin_start(rt, &s);
	uint64_t before = cbcmn__monitor_wakeups(rt);
	usleep(200000);
	uint64_t woke = cbcmn__monitor_wakeups(rt) - before;
	cbcmn_stats st;
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
	spin_stop(&s, n);
	t_destroy(rt);
	assert_int_equal(st.total.stalls, 0);
	assert_true(woke < 20);
}

/* The monitor's thread, found by its name: its blocked signals' mask
 * (/proc SigBlk), or 0 with *found false. */
static uint64_t monitor_sigblk(bool *found)
{
	*found = false;
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return 0;
	uint64_t blk = 0;
	struct dirent *de;
	while (!*found && (de = readdir(d))) {
		char path[300], line[256];
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		bool mine = false;
		while (fgets(line, sizeof(line), f)) {
			if (!strncmp(line, "Name:\tcbcmn-monitor", 19))
				mine = true;
			if (mine && sscanf(line, "SigBlk: %" SCNx64, &blk) == 1)
				*found = true;
		}
		fclose(f);
	}
	closedir(d);
	return blk;
}

/* The bug: the monitor thread inherited its creator's signal mask, so a
 * process-directed signal (SIGINT, SIGTERM, a timer's) could be handled
 * on it, a thread the program never made. */
static void test_regression_monitor_thread_blocks_every_signal(void **state)
{
	(void)state;
	/* Created from a thread that blocks nothing (the suite's own mask
	 * may block some). */
	sigset_t none, old;
	sigemptyset(&none);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &none, &old), 0);
	cbcmn_runtime *rt = stall_runtime(1, 0);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
	/* Past its start (a new thread begins with every signal blocked
	 * until glibc sets its own mask): it has slept once, or sleeps
	 * because every executor parked (its word 1, MON_IDLE). */
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (cbcmn__monitor_wakeups(rt) == 0 && atomic_load(&rt->mon_word) != 1 &&
	       t_now_ns() < end)
		usleep(1000);
	bool found;
	uint64_t blk = monitor_sigblk(&found);
	t_destroy(rt);
	assert_true(found);
	/* Every signal but the two the kernel never blocks, and glibc's
	 * own 32 and 33, which it keeps out of any mask. */
	uint64_t want = ~0ull & ~((1ull << (SIGKILL - 1)) | (1ull << (SIGSTOP - 1)) |
				  (1ull << 31) | (1ull << 32));
	assert_true((blk & want) == want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_regression_child_queued_behind_a_blocked_read_runs_elsewhere),
		T_WATCHED_TEST(test_stall_with_work_waiting_starts_a_temporary_executor),
		T_WATCHED_TEST(test_regression_static_runtime_blocked_in_read_runs_its_child_on_the_spare),
		T_WATCHED_TEST(test_regression_static_runtime_napping_in_usleep_runs_the_runnable_task),
		T_WATCHED_TEST(test_spare_finishes_its_io_off_duty_then_retires),
		T_WATCHED_TEST(test_destroy_while_the_spare_runs),
		T_WATCHED_TEST(test_only_static_watched_runtimes_keep_a_spare),
		T_WATCHED_TEST(test_regression_runtime_of_max_executors_keeps_no_spare),
		T_WATCHED_TEST(test_regression_task_woken_by_a_task_for_a_stalled_home_runs_elsewhere),
		T_WATCHED_TEST(test_regression_task_woken_by_a_thread_for_a_stalled_home_runs_elsewhere),
		T_WATCHED_TEST(test_regression_task_woken_by_a_thread_before_the_stall_is_seen_runs_elsewhere),
		T_WATCHED_TEST(test_regression_task_woken_by_a_task_before_the_stall_is_seen_runs_elsewhere),
		T_WATCHED_TEST(test_regression_executor_started_by_the_monitor_takes_signals),
		T_WATCHED_TEST(test_stall_is_reported_with_its_task_until_the_run_ends),
		T_WATCHED_TEST(test_regression_fork_join_subtree_run_inline_is_not_a_stall),
		T_WATCHED_TEST(test_regression_quiet_runtime_monitor_never_wakes),
		T_WATCHED_TEST(test_huge_stall_ns_reports_nothing_and_backs_off),
		T_WATCHED_TEST(test_regression_monitor_thread_blocks_every_signal),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
