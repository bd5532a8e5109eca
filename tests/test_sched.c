/* test_sched: every spawned task runs exactly once, on all the executors there
 * are, with stealing under each victim policy and cooperative yields; the
 * stats add up afterwards. */
#include "helpers.h"

#include "cbcmn_actor.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>


#define SCHED_TEST(f) T_WATCHED_TEST(f)

/* Release needs well under a second; TSan spends ~0.4 ms per outside
 * spawn.  Past this a join was never woken (hang detection only). */
#define BOUND_S (T_TSAN ? 60u : T_STALL_S)

static void spin_us(uint64_t us)
{
	uint64_t end = t_now_ns() + us * 1000;
	while (t_now_ns() < end)
		;
}

static cbcmn_runtime *mk_rt(uint32_t workers, cbcmn_victim_policy victim, uint64_t seed)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cfg.victim = victim;
	cfg.seed = seed;
	return t_runtime_cfg(&cfg);
}

static cbcmn_stats snap(cbcmn_runtime *rt, cbcmn_executor_stats *per, uint32_t nper)
{
	cbcmn_stats s;
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, per, nper), 0);
	return s;
}

/* After the runtime went quiet: every spawned task ran once and ended, and
 * the per-executor counters sum to the totals.  from_exec of the spawns came
 * from inside tasks, the rest from threads outside the runtime. */
static void assert_counts(cbcmn_runtime *rt, uint64_t spawned, uint64_t from_exec)
{
	cbcmn_executor_stats per[CBCMN_MAX_EXECUTORS];
	cbcmn_stats s = snap(rt, per, CBCMN_MAX_EXECUTORS);
	assert_int_equal(s.executors, cbcmn_runtime_workers(rt));
	assert_int_equal(s.tasks_spawned, spawned);
	assert_int_equal(s.tasks_completed, spawned);
	assert_int_equal(s.total.tasks_run, spawned);
	assert_int_equal(s.tasks_live, 0);
	assert_int_equal(s.total.spawns, from_exec);
	uint64_t run = 0, spawns = 0, parks = 0;
	for (uint32_t i = 0; i < s.executors; i++) {
		run += per[i].tasks_run;
		spawns += per[i].spawns;
		parks += per[i].parks;
	}
	assert_int_equal(run, s.total.tasks_run);
	assert_int_equal(spawns, s.total.spawns);
	assert_int_equal(parks, s.total.parks);
}

/* ---- a million tasks ---------------------------------------------------- */

struct fanout {
	uint64_t n;
	_Atomic uint64_t ran;
	_Atomic uint64_t exec_mask; /* bit i: executor i ran one of them */
	int spawn_rc;
	int64_t await_rc;
};

static int64_t count_task(cbcmn_cx *cx, void *arg)
{
	struct fanout *f = arg;
	uint32_t x = cbcmn_cx_executor(cx);
	atomic_fetch_add_explicit(&f->ran, 1, memory_order_relaxed);
	/* Load first: a fetch_or per task would bounce the line for nothing. */
	if (x < 64 && !(atomic_load_explicit(&f->exec_mask, memory_order_relaxed) & (1ull << x)))
		atomic_fetch_or_explicit(&f->exec_mask, 1ull << x, memory_order_relaxed);
	return 0;
}

static int64_t fanout_root(cbcmn_cx *cx, void *arg)
{
	struct fanout *f = arg;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	for (uint64_t i = 0; i < f->n; i++) {
		rc = cbcmn_nursery_spawn(cx, n, count_task, f, NULL);
		if (rc) {
			f->spawn_rc = rc;
			break;
		}
	}
	f->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_million_spawned_from_task(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct fanout f = {.n = T_SCALE(1000000)};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, fanout_root, &f, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(f.spawn_rc, 0);
	assert_int_equal(f.await_rc, 0);
	assert_int_equal(atomic_load(&f.ran), f.n);
	/* The spawner never yields: the other executor only had stolen work. */
	assert_int_equal(atomic_load(&f.exec_mask), 0x3);
	/* + 1: cbcmn_runtime_run() spawned the root from outside. */
	assert_counts(rt, f.n + 1, f.n);
	cbcmn_stats s = snap(rt, NULL, 0);
	assert_true(s.total.steal_successes > 0);
	t_destroy(rt);
}

#define THREAD_SPAWNS T_SCALE(1000000u)

static void test_million_spawned_from_thread(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct fanout f = {.n = THREAD_SPAWNS};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	for (uint64_t i = 0; i < f.n; i++)
		assert_int_equal(cbcmn_nursery_spawn(NULL, n, count_task, &f, NULL), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	assert_int_equal(atomic_load(&f.ran), f.n);
	assert_int_equal(atomic_load(&f.exec_mask), 0x3);
	/* Spawns from outside belong to no executor. */
	assert_counts(rt, f.n, 0);
	t_destroy(rt);
}

/* ---- join handles -------------------------------------------------------- */

#define JOIN_TASKS 10000

struct joins {
	cbcmn_task *h[JOIN_TASKS];
	uint64_t id_inside[JOIN_TASKS];
	int64_t result[JOIN_TASKS];
	int join_rc[JOIN_TASKS];
	int64_t await_rc;
	bool join_first; /* join every handle before awaiting the nursery */
};

struct join_arg {
	struct joins *j;
	uint32_t i;
};
static struct join_arg join_args[JOIN_TASKS];

static int64_t return_index(cbcmn_cx *cx, void *arg)
{
	struct join_arg *a = arg;
	a->j->id_inside[a->i] = cbcmn_cx_task_id(cx);
	if (a->i % 7 == 0)
		cbcmn_yield(cx); /* some end later than they would */
	return (int64_t)a->i * 3 + 1;
}

static void joins_spawn(cbcmn_cx *cx, cbcmn_nursery *n, struct joins *j)
{
	for (uint32_t i = 0; i < JOIN_TASKS; i++) {
		join_args[i] = (struct join_arg){.j = j, .i = i};
		int rc = cbcmn_nursery_spawn(cx, n, return_index, &join_args[i], &j->h[i]);
		TASK_CHECK(rc == 0);
	}
}

static void joins_finish(cbcmn_cx *cx, cbcmn_nursery *n, struct joins *j)
{
	if (!j->join_first)
		j->await_rc = cbcmn_nursery_await_all(cx, n);
	/* Reverse order: the newest tasks are the likeliest still queued. */
	for (uint32_t k = JOIN_TASKS; k-- > 0;) {
		TASK_CHECK(cbcmn_task_id(j->h[k]) != 0);
		j->join_rc[k] = cbcmn_task_join(cx, j->h[k], &j->result[k]);
	}
	if (j->join_first)
		j->await_rc = cbcmn_nursery_await_all(cx, n);
}

static int64_t joins_root(cbcmn_cx *cx, void *arg)
{
	struct joins *j = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	joins_spawn(cx, n, j);
	joins_finish(cx, n, j);
	return 0;
}

static void assert_joins(struct joins *j)
{
	assert_int_equal(j->await_rc, 0);
	for (uint32_t i = 0; i < JOIN_TASKS; i++) {
		assert_int_equal(j->join_rc[i], 0);
		assert_int_equal(j->result[i], (int64_t)i * 3 + 1);
		assert_true(j->id_inside[i] != 0);
	}
	/* Ids are unique: sort a copy. */
	uint64_t *ids = malloc(sizeof(uint64_t) * JOIN_TASKS);
	assert_non_null(ids);
	memcpy(ids, j->id_inside, sizeof(uint64_t) * JOIN_TASKS);
	for (uint32_t i = 1; i < JOIN_TASKS; i++) /* insertion sort: ids are mostly ascending */
		for (uint32_t k = i; k > 0 && ids[k - 1] > ids[k]; k--) {
			uint64_t x = ids[k];
			ids[k] = ids[k - 1];
			ids[k - 1] = x;
		}
	for (uint32_t i = 1; i < JOIN_TASKS; i++)
		assert_true(ids[i - 1] < ids[i]);
	free(ids);
}

/* Both the task and the thread flavour of spawn + join, on one runtime. */
static void joins_body(void *arg)
{
	struct joins *j = arg; /* j[0]: from a task, j[1]: from this thread */
	cbcmn_runtime *rt = mk_rt(2, CBCMN_VICTIM_RANDOM, 1);
	int64_t r = -1;
	int rc = cbcmn_runtime_run(rt, joins_root, &j[0], &r);
	TASK_CHECK(rc == 0 && r == 0);

	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(rt, NULL, &n) == 0);
	joins_spawn(NULL, n, &j[1]);
	joins_finish(NULL, n, &j[1]);
	TASK_CHECK(cbcmn_runtime_destroy(rt) == 0);
}

static void joins_check(bool join_first)
{
	struct joins *j = calloc(2, sizeof(*j));
	assert_non_null(j);
	j[0].join_first = j[1].join_first = join_first;
	if (!run_bounded(joins_body, j, BOUND_S))
		fail_msg("cbcmn_task_join() never returned (join_first=%d): lost wake-up", join_first);
	ASSERT_TASK_CHECKS();
	for (int k = 0; k < 2; k++) {
		/* The handle's id is the id the task saw. */
		for (uint32_t i = 0; i < JOIN_TASKS; i += 97)
			assert_true(j[k].id_inside[i] != 0);
		assert_joins(&j[k]);
	}
	free(j);
}

static void test_join_after_await_returns_own_result(void **state)
{
	(void)state;
	joins_check(false);
}

/* Joining a task that has not ended yet: the joiner must be woken by the
 * task's end.  Regression: join used to clear TF_HANDLE, the flag by which
 * cbcmn__task_complete() finds a waiting joiner, so it was never woken. */
static void test_join_before_completion_returns_own_result(void **state)
{
	(void)state;
	joins_check(true);
}

/* ---- stealing ------------------------------------------------------------ */

#define SPREAD_TASKS 32

static uint32_t spread_exec[SPREAD_TASKS];
static _Atomic uint32_t spread_seen; /* bit i: a task started on executor i */

static int64_t busy_until_stolen(cbcmn_cx *cx, void *arg)
{
	uint32_t *where = arg;
	*where = cbcmn_cx_executor(cx);
	atomic_fetch_or(&spread_seen, 1u << (*where & 31));
	/* Hold this executor (no yield) until a task has started on the
	 * other one too: only a steal from this one's queue makes that
	 * happen, however long the machine takes to run the thief.  Fixed
	 * spins (2 ms each) lost that race under load: every task done on
	 * executor 0 before executor 1 got a CPU. */
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	while (atomic_load(&spread_seen) != 0x3 && t_now_ns() < deadline)
		;
	TASK_CHECK(cbcmn_cx_executor(cx) == *where); /* no yield: no migration */
	return 0;
}

static int64_t spread_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	for (uint32_t i = 0; i < SPREAD_TASKS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, busy_until_stolen, &spread_exec[i], NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_long_tasks_are_stolen(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	memset(spread_exec, 0xff, sizeof(spread_exec));
	atomic_store(&spread_seen, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, spread_root, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	uint32_t seen = 0;
	for (uint32_t i = 0; i < SPREAD_TASKS; i++) {
		assert_true(spread_exec[i] < 2);
		seen |= 1u << spread_exec[i];
	}
	assert_int_equal(seen, 0x3);
	cbcmn_stats s = snap(rt, NULL, 0);
	assert_true(s.total.steal_successes > 0);
	assert_true(s.total.tasks_stolen >= s.total.steal_successes);
	assert_true(s.total.steal_attempts >= s.total.steal_successes);
	assert_counts(rt, SPREAD_TASKS + 1, SPREAD_TASKS);
	t_destroy(rt);
}

/* ---- victim policies: a fork-join tree ----------------------------------- */

#define FJ_DEPTH 11 /* 2^11 leaves */
#define FJ_LEAF_US 20

struct fj_node {
	uint32_t depth;
	int64_t leaves;
};

static int64_t fj(cbcmn_cx *cx, void *arg)
{
	struct fj_node *me = arg;
	if (me->depth == 0) {
		spin_us(FJ_LEAF_US);
		me->leaves = 1;
		return 0;
	}
	/* On our stack: the children end before await_all returns. */
	struct fj_node kid[2] = {{.depth = me->depth - 1}, {.depth = me->depth - 1}};
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	for (int i = 0; i < 2; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, fj, &kid[i], NULL) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	me->leaves = kid[0].leaves + kid[1].leaves;
	return r;
}

static void fork_join_with(cbcmn_victim_policy victim, uint64_t seed)
{
	cbcmn_runtime *rt = mk_rt(4, victim, seed);
	assert_int_equal(cbcmn_runtime_workers(rt), 4);
	uint64_t nodes = (2u << FJ_DEPTH) - 1, runs = 0;
	cbcmn_stats s;
	/* 40 ms of leaves on 4 executors: the policy has thieves to serve.
	 * On a loaded machine the other executors may get no CPU before one
	 * has run a whole tree: again, until something was stolen. */
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	do {
		struct fj_node root = {.depth = FJ_DEPTH};
		int64_t r = -1;
		assert_int_equal(cbcmn_runtime_run(rt, fj, &root, &r), 0);
		assert_int_equal(r, 0);
		ASSERT_TASK_CHECKS();
		assert_int_equal(root.leaves, 1 << FJ_DEPTH);
		runs++;
		s = snap(rt, NULL, 0);
	} while (s.total.steal_successes == 0 && t_now_ns() < deadline);
	assert_counts(rt, runs * nodes, runs * (nodes - 1));
	assert_true(s.total.steal_attempts > 0);
	assert_true(s.total.steal_successes > 0);
	t_destroy(rt);
}

static void test_victim_random(void **state)
{
	(void)state;
	fork_join_with(CBCMN_VICTIM_RANDOM, 42);
	fork_join_with(CBCMN_VICTIM_RANDOM, 42); /* the same seed again */
	fork_join_with(CBCMN_VICTIM_RANDOM, 0);
}

static void test_victim_round_robin(void **state)
{
	(void)state;
	fork_join_with(CBCMN_VICTIM_ROUND_ROBIN, 42);
	fork_join_with(CBCMN_VICTIM_ROUND_ROBIN, 42);
}

static void test_victim_least_loaded(void **state)
{
	(void)state;
	fork_join_with(CBCMN_VICTIM_LEAST_LOADED, 42);
	fork_join_with(CBCMN_VICTIM_LEAST_LOADED, 42);
}

/* ---- yield ------------------------------------------------------------- */

#define YIELD_ROUNDS 200

struct ylog {
	char log[2 * YIELD_ROUNDS];
	_Atomic uint32_t len; /* one executor: atomics only to keep TSan calm */
	cbcmn_nursery *n;
};

struct yarg {
	struct ylog *y;
	char tag;
};

static int64_t yielder(cbcmn_cx *cx, void *arg)
{
	struct yarg *a = arg;
	for (int i = 0; i < YIELD_ROUNDS; i++) {
		uint32_t at = atomic_fetch_add(&a->y->len, 1);
		if (at < sizeof(a->y->log))
			a->y->log[at] = a->tag;
		TASK_CHECK(cbcmn_yield(cx) == 0);
	}
	return 0;
}

static int64_t yield_root(cbcmn_cx *cx, void *arg)
{
	struct ylog *y = arg;
	struct yarg a = {y, 'a'}, b = {y, 'b'};
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, yielder, &a, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, yielder, &b, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void yield_interleaves(uint32_t flags)
{
	cbcmn_runtime *rt = t_runtime_flags(1, flags);
	struct ylog *y = calloc(1, sizeof(*y));
	assert_non_null(y);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, yield_root, y, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&y->len), 2 * YIELD_ROUNDS);
	uint32_t na = 0, run = 0, longest = 0;
	for (uint32_t i = 0; i < 2 * YIELD_ROUNDS; i++) {
		na += y->log[i] == 'a';
		run = i && y->log[i] == y->log[i - 1] ? run + 1 : 1;
		if (run > longest)
			longest = run;
	}
	assert_int_equal(na, YIELD_ROUNDS);
	/* One executor, two yielders: each yield hands over to the other. */
	if (longest > 2)
		fail_msg("a task ran %u times in a row despite yielding: %.40s...", longest, y->log);
	free(y);
	t_destroy(rt);
}

static void test_yield_interleaves(void **state)
{
	(void)state;
	yield_interleaves(0);
	yield_interleaves(CBCMN_CONFIG_NO_INLINE);
}

/* ---- one worker ---------------------------------------------------------- */

#define ONE_TASKS 1000

struct one {
	_Atomic uint32_t not_zero; /* tasks that saw an executor other than 0 */
	_Atomic uint32_t ran;
	cbcmn_runtime *rt;
	_Atomic uint32_t wrong_rt;
};

static int64_t one_task(cbcmn_cx *cx, void *arg)
{
	struct one *o = arg;
	if (cbcmn_cx_executor(cx) != 0)
		atomic_fetch_add(&o->not_zero, 1);
	if (cbcmn_cx_runtime(cx) != o->rt)
		atomic_fetch_add(&o->wrong_rt, 1);
	if (atomic_fetch_add(&o->ran, 1) % 3 == 0)
		cbcmn_yield(cx);
	if (cbcmn_cx_executor(cx) != 0)
		atomic_fetch_add(&o->not_zero, 1);
	return 0;
}

static int64_t one_root(cbcmn_cx *cx, void *arg)
{
	struct one *o = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	for (int i = 0; i < ONE_TASKS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, one_task, o, NULL) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	one_task(cx, o); /* the root is a task on executor 0 too */
	return r;
}

static void test_one_worker_runs_all_on_executor_0(void **state)
{
	(void)state;
	struct one o = {0};
	cbcmn_runtime *rt = t_runtime(1);
	o.rt = rt;
	assert_int_equal(cbcmn_runtime_workers(rt), 1);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, one_root, &o, &r), 0);
	assert_int_equal(r, 0);

	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	for (int i = 0; i < ONE_TASKS; i++)
		assert_int_equal(cbcmn_nursery_spawn(NULL, n, one_task, &o, NULL), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);

	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&o.ran), 2 * ONE_TASKS + 1);
	assert_int_equal(atomic_load(&o.not_zero), 0);
	assert_int_equal(atomic_load(&o.wrong_rt), 0);
	cbcmn_executor_stats per[4];
	memset(per, 0xab, sizeof(per));
	cbcmn_stats s = snap(rt, per, 4);
	assert_int_equal(s.executors, 1);
	assert_int_equal(per[0].tasks_run, s.total.tasks_run);
	/* Only min(nper, executors) entries are written. */
	assert_int_equal(per[1].tasks_run, 0xababababababababull);
	assert_int_equal(s.total.steal_successes, 0);
	assert_counts(rt, 2 * ONE_TASKS + 1, ONE_TASKS);
	t_destroy(rt);
}

/* ---- regressions ---------------------------------------------------------- */

#define RECYCLED_FIBERS 70000u

static int64_t recycled_root(cbcmn_cx *cx, void *arg)
{
	struct fanout *f = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	for (uint64_t i = 0; i < f->n; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, count_task, f, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* One executor without inline runs: every task gets a fiber, on the one
 * stack the executor's cache keeps handing back.  A finished fiber never
 * returns from its entry function, so a TSan fiber reused for task after
 * task gains those frames on TSan's shadow call stack each time.
 * Regression: TSan aborted past 65536 frames ("CHECK failed:
 * sanitizer_stackdepot.cpp:83") after ~32K tasks.  Last in the suite: under
 * TSan that abort kills the process. */
static void test_tsan_fiber_reused_without_reset(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_flags(1, CBCMN_CONFIG_NO_INLINE);
	struct fanout f = {.n = RECYCLED_FIBERS};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, recycled_root, &f, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&f.ran), RECYCLED_FIBERS);
	assert_counts(rt, RECYCLED_FIBERS + 1, RECYCLED_FIBERS);
	t_destroy(rt);
}

/* ---- the steal gate and one long run (issue 15, liveness 1) --------------
 * The gate weighs a victim's queue by its mean pick time, which says
 * nothing while the victim runs one long task.  A parent that spawned a
 * child and then computed kept the child queued behind it: the idle
 * executor's gate refused it on a mean of microseconds, and its park
 * looked at the queue, saw work and did not sleep, so it neither stole
 * nor slept (1.2 s instead of 0.6 s, a million refusals).  Now a run that
 * outlasts the cost lets the gate through, and gated work lets the thief
 * sleep meanwhile.  The cost is set far above any mean of tiny tasks, so
 * only the long run can open the gate.  (Before the fix: a hang, the
 * child never started while the parent computed.) */
#define GATE_COST_NS 200000000ull /* 200 ms */
#define GATE_WARM_ROUNDS 16
#define GATE_WARM_TASKS 256

struct gate_run {
	_Atomic int child_started;
	uint64_t parks_before, parks_at_start;
	uint32_t parent_exec, child_exec;
};

static uint64_t parks_now(cbcmn_runtime *rt)
{
	cbcmn_stats s;
	if (cbcmn_stats_snapshot(rt, &s, NULL, 0) != 0)
		return UINT64_MAX;
	return s.total.parks;
}

static int64_t gate_tiny(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

/* The executors learn a mean pick time of tiny tasks. */
static void gate_warm(cbcmn_cx *cx)
{
	cbcmn_nursery *n;
	for (int round = 0; round < GATE_WARM_ROUNDS; round++) {
		TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
		for (int i = 0; i < GATE_WARM_TASKS; i++)
			TASK_CHECK(cbcmn_nursery_spawn(cx, n, gate_tiny, NULL, NULL) == 0);
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	}
}

static int64_t gate_child(cbcmn_cx *cx, void *arg)
{
	struct gate_run *g = arg;
	g->parks_at_start = parks_now(cbcmn_cx_runtime(cx));
	g->child_exec = cbcmn_cx_executor(cx);
	atomic_store(&g->child_started, 1);
	return 0;
}

static int64_t gate_parent(cbcmn_cx *cx, void *arg)
{
	struct gate_run *g = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n;
	gate_warm(cx);
	g->parent_exec = cbcmn_cx_executor(cx);
	g->parks_before = parks_now(rt);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, gate_child, g, NULL) == 0);
	/* Compute, never yielding, until the child has started elsewhere
	 * (the deadline only bounds a hang). */
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&g->child_started) && t_now_ns() < deadline)
		;
	TASK_CHECK(atomic_load(&g->child_started));
	TASK_CHECK(cbcmn_cx_executor(cx) == g->parent_exec);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_regression_queue_behind_one_long_run_is_stolen_and_the_thief_sleeps(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.steal_cost_ns = GATE_COST_NS;
	/* Separate picks for the tiny tasks: the mean needs them. */
	cfg.flags |= CBCMN_CONFIG_NO_INLINE;
	/* The gate's own way: the stall monitor would open it after
	 * stall_ns (10 ms), before a thief slowed down by TSan parked. */
	cfg.stall_ns = CBCMN_STALL_OFF;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct gate_run g = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, gate_parent, &g, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&g.child_started), 1);
	assert_int_not_equal(g.child_exec, g.parent_exec); /* stolen, not run after */
	/* While only the refused child was there, the thief slept. */
	assert_true(g.parks_before != UINT64_MAX && g.parks_at_start != UINT64_MAX);
	assert_true(g.parks_at_start > g.parks_before);
	cbcmn_stats s = snap(rt, NULL, 0);
	assert_true(s.total.steals_gated > 0); /* the gate did refuse it first */
	t_destroy(rt);
}

/* ---- a thief that retires beside gated work (issue 15, review) ----------
 * An executor above min_workers retired after idle_retire_ms of searching
 * even while a queue the gate had refused it stood elsewhere: but the
 * gate's answer turns with time (one long run opens it), and nobody was
 * left to look; the owner's later pushes to its non-empty deque notify
 * nobody.  Here the cost (100 ms) outlasts the idle allowance (10 ms): the
 * executor started for the child is refused, and must still be there when
 * the parent's run has lasted long enough to open the gate.  (Before the
 * fix: it had retired, and the child waited for the whole run, a
 * T_STALL_NS hang.) */
#define RETIRE_COST_NS 100000000ull /* 100 ms: no mean of tiny tasks passes it */

/* On executor 0 (pinned: executor 1, the one that may retire, must be
 * free to): once executor 1 has retired, spawn the child and compute. */
static int64_t retire_parent(cbcmn_cx *cx, void *arg)
{
	struct gate_run *g = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	cbcmn_stats s;
	do
		TASK_CHECK(cbcmn_stats_snapshot(rt, &s, NULL, 0) == 0);
	while (s.executors_live > 1 && t_now_ns() < deadline && cbcmn_yield(cx) == 0);
	TASK_CHECK(s.executors_live == 1);
	g->parent_exec = cbcmn_cx_executor(cx);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, gate_child, g, NULL) == 0);
	deadline = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&g->child_started) && t_now_ns() < deadline)
		;
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t retire_root(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	gate_warm(cx);
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, retire_parent, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_regression_thief_does_not_retire_beside_gated_work(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.min_workers = 1;
	/* 1 ms: it retires and restarts often.  (Its CI failure under TSan,
	 * CHECK tid < kMaxTid in ThreadDetach, was a retirement racing
	 * destroy's join: test_grow's
	 * test_regression_executor_retiring_at_destroy_is_not_joined.) */
	cfg.idle_retire_ms = 1;
	cfg.steal_cost_ns = RETIRE_COST_NS;
	cfg.flags |= CBCMN_CONFIG_NO_INLINE; /* the await must not run the child */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct gate_run g = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, retire_root, &g, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&g.child_started), 1);
	/* Taken by the thief while the parent ran, not after it. */
	assert_int_not_equal(g.child_exec, g.parent_exec);
	t_destroy(rt);
}

/* ---- a queue stuck between two runs (review of issue 15) ----------------
 * The gate let a queue through only while its owner was inside one long
 * run (run_seq odd): "between runs, its queue moves".  It does not when
 * the executor is held between two runs: a never-started actor cancelled
 * in its nursery halts on the scheduler's stack (cancel_unstarted()) and
 * its drop callback runs there; an io_uring read that the kernel performs
 * at submit (/dev/zero: 100 ms on this loaded machine); the thread
 * preempted between two picks.  Here the drop callback computes (it may:
 * it must only not block) until the child has started: the child, queued
 * on the same executor and refused by the mean, must be taken by the idle
 * executor once it has waited longer than the cost.  (Before the fix: it
 * waited for the whole callback, T_STALL_NS, and ran on the parent's
 * executor after it.) */
#define STUCK_COST_NS 50000000ull /* 50 ms: far above a mean of tiny tasks */

struct stuck_run {
	_Atomic int child_started, drop_started, drop_done;
	int drop_started_at_child, drop_done_at_child;
	uint32_t parent_exec, child_exec;
	pid_t drop_tid, child_tid;
};

static void stuck_drop(void *state, const cbcmn_actor_msg *m)
{
	struct stuck_run *g = state;
	(void)m;
	g->drop_tid = (pid_t)syscall(SYS_gettid);
	atomic_store(&g->drop_started, 1);
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&g->child_started) && t_now_ns() < deadline)
		;
	atomic_store(&g->drop_done, 1);
}

static int64_t stuck_actor(cbcmn_cx *cx, void *state)
{
	(void)cx;
	(void)state;
	return 0; /* the second never runs: cancelled before it starts */
}

static int64_t stuck_child(cbcmn_cx *cx, void *arg)
{
	struct stuck_run *g = arg;
	g->child_exec = cbcmn_cx_executor(cx);
	g->child_tid = (pid_t)syscall(SYS_gettid);
	g->drop_started_at_child = atomic_load(&g->drop_started);
	g->drop_done_at_child = atomic_load(&g->drop_done);
	atomic_store(&g->child_started, 1);
	return 0;
}

static int64_t stuck_parent(cbcmn_cx *cx, void *arg)
{
	struct stuck_run *g = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *kept, *doomed;
	gate_warm(cx);
	/* The actor table made now, not between the child's spawn and the
	 * await (a long run there would open the gate the old way). */
	cbcmn_actor_ref a;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &doomed) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, doomed, stuck_actor, g, NULL, &a) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, doomed) == 0);
	g->parent_exec = cbcmn_cx_executor(cx);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &kept) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, kept, stuck_child, g, NULL) == 0);
	/* Pushed after the child: the executor pops it first. */
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &doomed) == 0);
	cbcmn_actor_opts o = {.mailbox_cap = 1, .drop = stuck_drop};
	TASK_CHECK(cbcmn_actor_spawn(cx, doomed, stuck_actor, g, &o, &a) == 0);
	cbcmn_actor_msg m = {.type = 1};
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, a, &m) == 0);
	TASK_CHECK(cbcmn_nursery_cancel(doomed) == 0);
	cbcmn_nursery_await_all(cx, doomed); /* CBCMN_ECANCELED */
	return cbcmn_nursery_await_all(cx, kept);
}

static void test_regression_queue_behind_an_executor_held_between_runs_is_stolen(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.steal_cost_ns = STUCK_COST_NS;
	cfg.flags |= CBCMN_CONFIG_NO_INLINE; /* the awaits must not run them */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct stuck_run g = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, stuck_parent, &g, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&g.child_started), 1);
	/* Run by the other executor while the callback held its own.  Which
	 * of the two queued tasks a thief takes is the scheduler's choice
	 * (the child from the deque, or the actor from the next-task slot
	 * once it has waited there 3 us, seen under TSan): either way the
	 * child starts before the callback ends, on another thread than the
	 * callback's unless it ran there before the callback began (a thief
	 * that took the child, then the actor: 1 run in 30 under TSan). */
	printf("parent on executor %u, child on %u; callback on thread %d, child on %d\n",
	       g.parent_exec, g.child_exec, (int)g.drop_tid, (int)g.child_tid);
	assert_int_equal(g.drop_done_at_child, 0);
	assert_true(g.drop_tid != 0);
	assert_true(g.child_tid != g.drop_tid || !g.drop_started_at_child);
	t_destroy(rt);
}

/* ---- yielders spread to an idle executor ----------------------------------- */

/* Regression: the yield list is the owner's alone, so two tasks that
 * compute and yield, once on one executor, shared it for good while the
 * other executor slept (3 runs of 3; found by review).  Now a yielder with
 * company goes where an idle executor takes it: the two are soon seen on
 * different executors at once.  Before the fix: never, until the
 * deadline. */
struct yielders {
	_Atomic uint32_t on[2]; /* executor each last computed on, + 1 */
	_Atomic int started, apart;
	uint64_t deadline;
};

struct yielder {
	struct yielders *y;
	int i;
};

static int64_t spreading_yielder(cbcmn_cx *cx, void *arg)
{
	struct yielder *me = arg;
	struct yielders *y = me->y;
	atomic_fetch_add(&y->started, 1);
	/* Both start before either computes: short runs, which the steal
	 * gate keeps where they are, put both on the parent's executor. */
	while (atomic_load(&y->started) < 2 && t_now_ns() < y->deadline)
		cbcmn_yield(cx);
	while (!atomic_load(&y->apart) && t_now_ns() < y->deadline) {
		uint64_t until = t_now_ns() + 50000; /* 50 us of computing */
		while (t_now_ns() < until)
			;
		uint32_t mine = cbcmn_cx_executor(cx) + 1;
		atomic_store(&y->on[me->i], mine);
		uint32_t other = atomic_load(&y->on[!me->i]);
		if (other && other != mine)
			atomic_store(&y->apart, 1);
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t spreading_root(cbcmn_cx *cx, void *arg)
{
	struct yielders *y = arg;
	struct yielder w[2] = {{y, 0}, {y, 1}};
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, spreading_yielder, &w[0], NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, spreading_yielder, &w[1], NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_regression_yielders_on_one_executor_spread_to_an_idle_one(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.flags |= CBCMN_CONFIG_NO_INLINE;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct yielders y = {.deadline = t_now_ns() + T_STALL_NS};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, spreading_root, &y, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&y.started), 2);
	assert_int_equal(atomic_load(&y.apart), 1);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		SCHED_TEST(test_million_spawned_from_task),
		SCHED_TEST(test_million_spawned_from_thread),
		SCHED_TEST(test_join_after_await_returns_own_result),
		SCHED_TEST(test_join_before_completion_returns_own_result),
		SCHED_TEST(test_long_tasks_are_stolen),
		SCHED_TEST(test_victim_random),
		SCHED_TEST(test_victim_round_robin),
		SCHED_TEST(test_victim_least_loaded),
		SCHED_TEST(test_yield_interleaves),
		SCHED_TEST(test_one_worker_runs_all_on_executor_0),
		SCHED_TEST(test_regression_queue_behind_one_long_run_is_stolen_and_the_thief_sleeps),
		SCHED_TEST(test_regression_thief_does_not_retire_beside_gated_work),
		SCHED_TEST(test_regression_queue_behind_an_executor_held_between_runs_is_stolen),
		SCHED_TEST(test_regression_yielders_on_one_executor_spread_to_an_idle_one),
		SCHED_TEST(test_tsan_fiber_reused_without_reset),
	};
	return cmocka_run_group_tests_name("sched", tests, NULL, NULL);
}
