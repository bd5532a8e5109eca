/* test_janus_budget: budgets through the janus ABI (SPEC-021 §3.5, §4.1,
 * §11.1, §14.1): Budget_Check / Budget_Decrement as C exports, a spawn that
 * fails instead of waiting, and the versioned RuntimeConfigEx that chooses
 * profile, budgets and capabilities. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "janus_rt.h"

/* Every budget component unlimited (the field maxima), so a test states
 * exactly the limit it is about. */
static RuntimeConfigEx unlimited_config(uint32_t workers)
{
	RuntimeConfigEx c = JANUS_RUNTIME_CONFIG_EX_INIT;
	c.worker_count = workers;
	c.deterministic_seed = 42;
	Budget all = {UINT32_MAX, SIZE_MAX, UINT16_MAX, UINT16_MAX, UINT16_MAX};
	c.budget = all;
	c.child_budget = all;
	return c;
}

static void start(const RuntimeConfigEx *c)
{
	janus_rt_shutdown();
	assert_int_equal(janus_rt_init_ex(c), 0);
	assert_non_null(janus_rt_get());
}

/* ---- Budget_Check / Budget_Decrement (§11.1) --------------------------- */

static int64_t charge_forever(void *arg)
{
	(void)arg;
	for (;;) {
		janus_budget_decrement(3); /* a "function call" or three */
		janus_budget_check();      /* the loop's back-edge */
	}
	return 0;
}

/* A janus task has no other way to be charged: before, its loop ran until
 * the process died; now its ops run out, nobody recharges it, it is ended
 * and the nursery reports budget exceeded. */
static void test_janus_loop_on_budget_check_is_stopped_by_its_budget(void **state)
{
	(void)state;
	RuntimeConfigEx c = unlimited_config(1);
	c.budget.ops = 100000;
	c.caps = JANUS_CAP_SPAWN | JANUS_CAPS_EXPLICIT; /* no CapBudget */
	start(&c);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(charge_forever, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_BUDGET_EXCEEDED);
	janus_rt_shutdown();
}

/* Two loops on one executor: each must see the other run in between.  A
 * turn is an optional decrement (cost ops) and a check. */
static unsigned loop_turns, loop_cost;
static _Atomic int last_runner;
static _Atomic unsigned switches[2];

static int64_t loop_task(void *arg)
{
	int me = (int)(intptr_t)arg;
	for (unsigned i = 0; i < loop_turns; i++) {
		if (atomic_exchange(&last_runner, me) != me)
			atomic_fetch_add(&switches[me], 1);
		if (loop_cost)
			janus_budget_decrement(loop_cost);
		janus_budget_check();
	}
	return 0;
}

/* The two loops are spawned by a task, onto its executor's own queue: a
 * root spawned from a thread waits in the inject queue, which a yielding
 * task only gives way to every 61st pick (docs/SCHEDULER.md). */
static int64_t spawn_pair(void *arg)
{
	(void)arg;
	if (!janus_nursery_create())
		return -100;
	if (janus_nursery_spawn(loop_task, (void *)0) != 0 ||
	    janus_nursery_spawn(loop_task, (void *)1) != 0)
		return -101;
	return janus_nursery_await_all();
}

/* Each loop must have seen the other run at least min_switches times. */
static void run_pair(unsigned turns, unsigned cost, unsigned min_switches)
{
	RuntimeConfigEx c = unlimited_config(1);
	start(&c);
	loop_turns = turns;
	loop_cost = cost;
	atomic_store(&last_runner, -1);
	atomic_store(&switches[0], 0);
	atomic_store(&switches[1], 0);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(spawn_pair, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_true(atomic_load(&switches[0]) >= min_switches);
	assert_true(atomic_load(&switches[1]) >= min_switches);
	janus_rt_shutdown();
}

static void test_two_janus_loops_on_one_executor_interleave(void **state)
{
	(void)state;
	/* A fairness yield every 1024 checks: 16 turns each.  Without it the
	 * first would run to its end: one switch each. */
	run_pair(16 * 1024, 0, 4);
}

/* Decrements count toward the fairness interval too: a loop that charges
 * a whole interval per turn yields at every check. */
static void test_decrement_brings_the_fairness_yield_forward(void **state)
{
	(void)state;
	run_pair(64, 1024, 16);
}

/* Decrement only subtracts: the ops it takes are gone, and it returns. */
static int64_t decrement_reader(void *arg)
{
	Budget *b = arg;
	b[0] = janus_budget_get_current();
	janus_budget_decrement(5000);
	b[1] = janus_budget_get_current();
	janus_budget_decrement(UINT32_MAX); /* more than it has: down to 0 */
	b[2] = janus_budget_get_current();
	return 0;
}

static void test_decrement_subtracts_down_to_zero_without_waiting(void **state)
{
	(void)state;
	RuntimeConfigEx c = unlimited_config(1);
	c.budget.ops = 100000;
	c.caps = JANUS_CAP_SPAWN | JANUS_CAPS_EXPLICIT;
	start(&c);
	Budget b[3];
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(decrement_reader, b), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_true(b[0].ops <= 100000 && b[0].ops > 90000);
	assert_int_equal(b[1].ops, b[0].ops - 5000);
	assert_int_equal(b[2].ops, 0);
	janus_rt_shutdown();
}

/* A cancelled janus task ends at its next check (§5.2.2, §8.3.1). */
static int64_t cancel_then_loop(void *arg)
{
	cbcmn_nursery *n = *(cbcmn_nursery **)arg; /* the adapter's first field */
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	for (;;)
		janus_budget_check();
	return 0;
}

static void test_cancelled_janus_loop_ends_at_its_check(void **state)
{
	(void)state;
	RuntimeConfigEx c = unlimited_config(1);
	start(&c);
	void *rn = janus_nursery_create();
	assert_non_null(rn);
	assert_int_equal(janus_nursery_spawn(cancel_then_loop, rn), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_CANCELLED);
	janus_rt_shutdown();
}

/* On a blocking-pool thread (the task parked, waiting for it) neither may
 * touch the task's budget nor yield: that thread is no task. */
static int64_t pool_checks(void *arg)
{
	(void)arg;
	for (int i = 0; i < 5000; i++) {
		janus_budget_decrement(1000);
		janus_budget_check();
	}
	return 7;
}

static int64_t native_blocking_root(cbcmn_cx *cx, void *arg)
{
	cbcmn_budget before, after;
	int64_t r = 0;
	cbcmn_budget_get(cx, &before);
	if (cbcmn_blocking(cx, pool_checks, arg, &r) != 0 || r != 7)
		return -1;
	cbcmn_budget_get(cx, &after);
	/* The call itself may cost an op or so; the pool's 5 M did not count. */
	return before.ops - after.ops <= 2 ? 0 : -2;
}

static void test_check_and_decrement_outside_a_task_do_nothing(void **state)
{
	(void)state;
	janus_budget_check();
	janus_budget_decrement(UINT32_MAX);
	assert_int_equal(janus_budget_get_current().ops, 0);

	RuntimeConfigEx c = unlimited_config(1);
	c.budget.ops = 100000;
	c.caps = JANUS_CAP_SPAWN | JANUS_CAPS_EXPLICIT;
	void *s = janus_scheduler_create_ex(&c);
	assert_non_null(s);
	int64_t r = -99;
	assert_int_equal(cbcmn_runtime_run(s, native_blocking_root, NULL, &r), 0);
	assert_int_equal(r, 0);
	janus_scheduler_shutdown(s);
}

/* ---- spawn never waits (§3.5, §14.1) ----------------------------------- */

static int64_t nothing_task(void *arg)
{
	(void)arg;
	return 0;
}

static _Atomic int release_children;
static _Atomic int spawn_failures;

static int64_t wait_for_release(void *arg)
{
	(void)arg;
	uint64_t until = t_clock_ns(CLOCK_MONOTONIC) + T_STALL_NS;
	while (!atomic_load(&release_children))
		if (janus_scheduler_yield() != 0 || t_clock_ns(CLOCK_MONOTONIC) > until)
			return -50; /* the spawner never came back */
	return 0;
}

static int64_t spawn_until_refused(void *arg)
{
	int *spawned = arg;
	if (!janus_nursery_create())
		return -100;
	while (*spawned < 100 && janus_nursery_spawn(wait_for_release, NULL) == 0)
		++*spawned;
	if (*spawned < 100)
		atomic_fetch_add(&spawn_failures, 1);
	/* Back from the refused spawn at once, with the children still
	 * waiting: nothing of theirs could have paid for it. */
	atomic_store(&release_children, 1);
	return janus_nursery_await_all();
}

/* Run spawn_until_refused on c's runtime: how many it spawned before the
 * one refused spawn, after which it went on and its nursery succeeded. */
static int spawned_until_refused(const RuntimeConfigEx *c)
{
	start(c);
	atomic_store(&release_children, 0);
	atomic_store(&spawn_failures, 0);
	int spawned = 0;
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(spawn_until_refused, &spawned), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(atomic_load(&spawn_failures), 1);
	janus_rt_shutdown();
	return spawned;
}

/* Before: the spawn past the budget waited, BudgetExhausted, while its
 * children waited for it; they timed out (-50) and the spawner was ended
 * (-3) instead of hearing -1. */
static void test_spawn_with_spawn_budget_exhausted_fails_at_once(void **state)
{
	(void)state;
	RuntimeConfigEx c = unlimited_config(1);
	c.budget.spawn_count = 3;
	c.caps = JANUS_CAP_SPAWN | JANUS_CAPS_EXPLICIT; /* no CapBudget */
	int spawned = spawned_until_refused(&c);
	/* Each child asks for all its spawner has: at most 3, at least 1. */
	assert_true(spawned >= 1 && spawned <= 3);
}

/* The spawn's op is a cost too: a spawner whose ops are gone fails at once
 * (before: it waited, BudgetExhausted, and was ended: -3). */
static int64_t spawn_without_ops(void *arg)
{
	(void)arg;
	if (!janus_nursery_create())
		return -100;
	janus_budget_decrement(UINT32_MAX);
	int rc = janus_nursery_spawn(nothing_task, NULL);
	long r = janus_nursery_await_all();
	return rc == -1 && r == JANUS_OK ? 0 : -101;
}

static void test_spawn_with_ops_exhausted_fails_at_once(void **state)
{
	(void)state;
	RuntimeConfigEx c = unlimited_config(1);
	c.budget.ops = 100000;
	c.caps = JANUS_CAP_SPAWN | JANUS_CAPS_EXPLICIT;
	start(&c);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(spawn_without_ops, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	janus_rt_shutdown();
}

/* The child's stack is memory the spawner pays (docs/BUDGETS.md): a
 * spawner without a stack's worth fails at once too.  Before, the check
 * looked at the op and the spawn only; the spawn then waited for memory
 * and the thread's await ended the spawner (-3, not the spawn's -1). */
static int64_t spawn_without_stack_memory(void *arg)
{
	(void)arg;
	if (!janus_nursery_create())
		return -100;
	int rc = janus_nursery_spawn(nothing_task, NULL);
	long r = janus_nursery_await_all();
	return rc == -1 && r == JANUS_OK ? 0 : -101;
}

static void test_spawn_without_memory_for_the_stack_fails_at_once(void **state)
{
	(void)state;
	RuntimeConfigEx c = unlimited_config(1);
	c.budget.memory = 4096; /* less than any stack */
	c.caps = JANUS_CAP_SPAWN | JANUS_CAPS_EXPLICIT;
	start(&c);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(spawn_without_stack_memory, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	janus_rt_shutdown();
}

/* With CapBudget the spawner recharges itself instead ("recharge or
 * fail"), as far as its limit goes. */
static void test_spawn_recharges_from_capbudget_before_failing(void **state)
{
	(void)state;
	RuntimeConfigEx c = unlimited_config(1);
	c.budget.spawn_count = 1;
	c.child_budget.spawn_count = 1; /* a child takes one of the spawner's */
	c.caps = JANUS_CAP_SPAWN | JANUS_CAP_BUDGET | JANUS_CAPS_EXPLICIT;
	c.cap_limit = (Budget){.ops = UINT32_MAX, .spawn_count = 9};
	/* 1 + 9 spawn_count, about 2 per spawn (the spawn, the child's
	 * share): without the recharge, one spawn. */
	int spawned = spawned_until_refused(&c);
	assert_true(spawned > 1 && spawned <= 10);
}

/* ---- RuntimeConfigEx --------------------------------------------------- */

static int64_t read_budget(void *arg)
{
	*(Budget *)arg = janus_budget_get_current();
	return 0;
}

static int64_t try_spawn(void *arg)
{
	(void)arg;
	if (!janus_nursery_create())
		return -100;
	int rc = janus_nursery_spawn(read_budget, &(Budget){0});
	long r = janus_nursery_await_all();
	return rc == 0 ? r : -200;
}

static void test_config_ex_sets_budget_and_profile(void **state)
{
	(void)state;
	RuntimeConfigEx c = JANUS_RUNTIME_CONFIG_EX_INIT;
	c.worker_count = 1;
	c.budget = (Budget){.ops = 12345, .memory = 1 << 20, .spawn_count = 7, .channel_ops = 8,
			    .syscalls = 9};
	start(&c);
	Budget b = {0};
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(read_budget, &b), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_true(b.ops <= 12345 && b.ops > 12000);
	assert_int_equal(b.memory, 1 << 20);
	assert_int_equal(b.spawn_count, 7);
	assert_int_equal(b.channel_ops, 8);
	assert_int_equal(b.syscalls, 9);
	/* The global runtime exists: a second init changes nothing. */
	assert_int_equal(janus_rt_init_ex(&c), -EEXIST);
	janus_rt_shutdown();

	/* Sovereign: nothing implicit, so a root without CapSpawn cannot
	 * spawn; yield_interval is the user's to give. */
	c = unlimited_config(1);
	c.profile = JANUS_PROFILE_SOVEREIGN;
	assert_int_equal(janus_rt_init_ex(&c), -EINVAL);
	c.yield_interval = 100;
	start(&c);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(try_spawn, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), -200);
	janus_rt_shutdown();

	/* Core: no scheduler, no nursery. */
	c = unlimited_config(1);
	c.profile = JANUS_PROFILE_CORE;
	start(&c);
	assert_null(janus_nursery_create());
	janus_rt_shutdown();
}

static void test_config_ex_refuses_bad_input(void **state)
{
	(void)state;
	janus_rt_shutdown();
	assert_int_equal(janus_rt_init_ex(NULL), -EINVAL);
	RuntimeConfigEx c = JANUS_RUNTIME_CONFIG_EX_INIT;
	c.size = 0;
	assert_int_equal(janus_rt_init_ex(&c), -EINVAL);
	c.size = JANUS_RUNTIME_CONFIG_EX_SIZE_V1 - 1;
	assert_int_equal(janus_rt_init_ex(&c), -EINVAL);
	c.size = 1u << 20; /* never read that far */
	assert_int_equal(janus_rt_init_ex(&c), -E2BIG);
	c = (RuntimeConfigEx)JANUS_RUNTIME_CONFIG_EX_INIT;
	c.reserved = 1;
	assert_int_equal(janus_rt_init_ex(&c), -EINVAL);
	c.reserved = 0;
	c.profile = 9;
	assert_int_equal(janus_rt_init_ex(&c), -EINVAL);
	c.profile = 0;
	c.caps = 0x40; /* no such capability */
	assert_int_equal(janus_rt_init_ex(&c), -EINVAL);
	assert_null(janus_rt_get());
	assert_null(janus_scheduler_create_ex(NULL));
	assert_int_equal(errno, EINVAL);

	/* A newer caller's larger struct: its unknown tail must be zero. */
	struct {
		RuntimeConfigEx c;
		uint64_t newer[4];
	} big;
	memset(&big, 0, sizeof(big));
	big.c.size = sizeof(big);
	big.c.worker_count = 1;
	big.newer[2] = 1;
	assert_null(janus_scheduler_create_ex(&big.c));
	assert_int_equal(errno, E2BIG);
	big.newer[2] = 0;
	void *s = janus_scheduler_create_ex(&big.c);
	assert_non_null(s);
	assert_int_equal(cbcmn_runtime_workers(s), 1);
	janus_scheduler_shutdown(s);
}

/* ---- isolated runtimes and janus nurseries ----------------------------- */

static _Atomic int ran;

static int64_t count_task(void *arg)
{
	(void)arg;
	atomic_fetch_add(&ran, 1);
	return 0;
}

static int64_t nested_count(void *arg)
{
	(void)arg;
	if (!janus_nursery_create())
		return -100; /* before: a task of an isolated runtime had none */
	for (int i = 0; i < 3; i++)
		if (janus_nursery_spawn(count_task, NULL) != 0)
			return -101;
	return janus_nursery_await_all();
}

static int64_t native_root(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	return nested_count(arg);
}

/* A runtime from the frozen janus_scheduler_create, entered natively: its
 * tasks open janus nurseries on it. */
static void test_isolated_runtime_task_opens_janus_nursery(void **state)
{
	(void)state;
	janus_rt_shutdown(); /* no global runtime: nothing to fall back to */
	atomic_store(&ran, 0);
	void *s = janus_scheduler_create((SchedulerConfig){.worker_count = 1});
	assert_non_null(s);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(s, native_root, NULL, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&ran), 3);
	assert_null(janus_rt_get()); /* it did not make the global one */
	janus_scheduler_shutdown(s);
}

/* From a thread: janus_scheduler_nursery_create. */
static void test_scheduler_nursery_from_a_thread(void **state)
{
	(void)state;
	janus_rt_shutdown();
	atomic_store(&ran, 0);
	RuntimeConfigEx c = unlimited_config(2);
	void *s = janus_scheduler_create_ex(&c);
	assert_non_null(s);
	assert_null(janus_scheduler_nursery_create(NULL));
	assert_non_null(janus_scheduler_nursery_create(s));
	assert_int_equal(janus_nursery_spawn(nested_count, NULL), 0);
	assert_int_equal(janus_nursery_spawn(count_task, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(atomic_load(&ran), 4);
	assert_int_equal(janus_nursery_await_all(), JANUS_NO_NURSERY); /* twice */
	assert_null(janus_rt_get());
	janus_scheduler_shutdown(s);
}

/* Shut down with the thread's nursery still open: before, the runtime
 * freed it and the thread's next await read freed memory (ASan:
 * heap-use-after-free). */
static void test_shutdown_awaits_the_threads_open_nurseries(void **state)
{
	(void)state;
	janus_rt_shutdown();
	atomic_store(&ran, 0);
	RuntimeConfigEx c = unlimited_config(1);
	void *s = janus_scheduler_create_ex(&c);
	assert_non_null(s);
	start(&c);
	assert_non_null(janus_nursery_create());            /* global, below */
	assert_non_null(janus_scheduler_nursery_create(s)); /* s's */
	assert_non_null(janus_scheduler_nursery_create(s)); /* s's, on top */
	assert_int_equal(janus_nursery_spawn(count_task, NULL), 0);
	janus_scheduler_shutdown(s);
	assert_int_equal(atomic_load(&ran), 1);
	/* The global one is still the current nursery, and works. */
	assert_int_equal(janus_nursery_spawn(count_task, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(atomic_load(&ran), 2);
	assert_int_equal(janus_nursery_await_all(), JANUS_NO_NURSERY);
	assert_non_null(janus_nursery_create());
	janus_rt_shutdown(); /* and the global runtime's likewise */
	assert_int_equal(janus_nursery_await_all(), JANUS_NO_NURSERY);
}

static int64_t scheduler_nursery_in_task(void *arg)
{
	return janus_scheduler_nursery_create(arg) ? -1 : 0;
}

static void test_scheduler_nursery_refused_inside_a_task(void **state)
{
	(void)state;
	RuntimeConfigEx c = unlimited_config(1);
	start(&c);
	void *s = janus_scheduler_create_ex(&c);
	assert_non_null(s);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(scheduler_nursery_in_task, s), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	janus_scheduler_shutdown(s);
	janus_rt_shutdown();
}

static int64_t shut_down_own_runtime(void *arg)
{
	(void)arg;
	janus_rt_shutdown();
	janus_scheduler_shutdown(janus_rt_get());
	return 0;
}

/* A task cannot wait for its own runtime's tasks to end.  Before, its
 * janus_rt_shutdown() took the runtime out of GLOBAL_RT and could not
 * destroy it (EDEADLK): janus_rt_get() said NULL, the next
 * janus_nursery_create() made a second global runtime, and the first one's
 * executors ran on, forgotten, until the process ended. */
static void test_rt_shutdown_from_its_own_task_keeps_the_runtime(void **state)
{
	(void)state;
	atomic_store(&ran, 0);
	RuntimeConfigEx c = unlimited_config(1);
	start(&c);
	Runtime *rt = janus_rt_get();
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(shut_down_own_runtime, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_ptr_equal(janus_rt_get(), rt);
	/* Still the one janus uses, and it works. */
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(count_task, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(atomic_load(&ran), 1);
	assert_ptr_equal(janus_rt_get(), rt);
	janus_rt_shutdown();
	assert_null(janus_rt_get());
}

/* janus_rt_get()'s runtime handed to janus_scheduler_shutdown: before, it
 * was destroyed with GLOBAL_RT still naming it, and the next janus call
 * used it freed (ASan: heap-use-after-free; release: janus_rt_get()
 * returned the dangling pointer). */
static void test_scheduler_shutdown_of_the_global_runtime_is_rt_shutdown(void **state)
{
	(void)state;
	atomic_store(&ran, 0);
	RuntimeConfigEx c = unlimited_config(1);
	start(&c);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(count_task, NULL), 0);
	janus_scheduler_shutdown(janus_rt_get());
	assert_int_equal(atomic_load(&ran), 1);
	assert_null(janus_rt_get());
	assert_int_equal(janus_nursery_await_all(), JANUS_NO_NURSERY);
	/* A fresh global runtime, on demand as always. */
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(count_task, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(atomic_load(&ran), 2);
	janus_rt_shutdown();
}

static int64_t late_count(void *arg)
{
	(void)arg;
	struct timespec ms = {.tv_nsec = 20 * 1000000};
	nanosleep(&ms, NULL); /* still running when its opener thread ends */
	atomic_fetch_add(&ran, 1);
	return 0;
}

/* A thread: cmocka's asserts belong to the main one, so it says "bad". */
static void *open_and_leave(void *scheduler)
{
	if (scheduler && !janus_scheduler_nursery_create(scheduler))
		return "bad";
	if (!janus_nursery_create() || janus_nursery_spawn(late_count, NULL) != 0)
		return "bad";
	return NULL; /* no await: the thread's end is the scopes' end */
}

/* A thread that ends with nurseries open awaits them as it ends.  Before,
 * its children ran on unwaited past its end (ran was still 0 after the
 * join) and the wrappers and native nurseries leaked (ASan: 208 bytes). */
static void test_thread_that_ends_with_nurseries_open_awaits_them(void **state)
{
	(void)state;
	atomic_store(&ran, 0);
	RuntimeConfigEx c = unlimited_config(1);
	start(&c);
	void *s = janus_scheduler_create_ex(&c);
	assert_non_null(s);
	pthread_t th;
	void *bad;
	assert_int_equal(pthread_create(&th, NULL, open_and_leave, s), 0);
	assert_int_equal(pthread_join(th, &bad), 0);
	assert_null(bad);
	assert_int_equal(atomic_load(&ran), 1); /* the global runtime's child */
	assert_int_equal(pthread_create(&th, NULL, open_and_leave, NULL), 0);
	assert_int_equal(pthread_join(th, &bad), 0);
	assert_null(bad);
	assert_int_equal(atomic_load(&ran), 2);
	/* And the main thread's own stack was never touched. */
	assert_int_equal(janus_nursery_await_all(), JANUS_NO_NURSERY);
	janus_scheduler_shutdown(s);
	janus_rt_shutdown();
}

/* A task, unlike a thread, that returns with a nursery open has leaked
 * it: the nursery is cancelled (its child here only ends so) and awaited,
 * and the task fails with CBCMN_ELEAKED unless it had failed already. */
static int64_t yield_until_cancelled(void *arg)
{
	(void)arg;
	while (janus_scheduler_yield() == 0)
		;
	return 0;
}

static int64_t return_with_nursery_open(void *arg)
{
	if (!janus_nursery_create() || janus_nursery_spawn(yield_until_cancelled, NULL) != 0)
		return -77;
	return (int64_t)(intptr_t)arg; /* no await */
}

static void test_task_that_returns_with_a_nursery_open_fails_eleaked(void **state)
{
	(void)state;
	RuntimeConfigEx c = unlimited_config(2);
	start(&c);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(return_with_nursery_open, (void *)0), 0);
	assert_int_equal(janus_nursery_await_all(), CBCMN_ELEAKED);
	/* A failure of its own wins over the leak. */
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(return_with_nursery_open, (void *)(intptr_t)-7), 0);
	assert_int_equal(janus_nursery_await_all(), -7);
	janus_rt_shutdown();
}

static _Atomic int other_state; /* 1: its nursery is open; 2: awaited */

static void *await_late(void *unused)
{
	(void)unused;
	if (!janus_nursery_create() || janus_nursery_spawn(count_task, NULL) != 0)
		return "bad";
	while (atomic_load(&ran) == 0)
		sched_yield(); /* the child is done: only the open nursery is left */
	atomic_store(&other_state, 1);
	struct timespec ms = {.tv_nsec = 200 * 1000000};
	nanosleep(&ms, NULL); /* the main thread shuts down meanwhile */
	long r = janus_nursery_await_all();
	atomic_store(&other_state, 2);
	return r == JANUS_OK ? NULL : "bad";
}

/* Another thread's nursery, open while the runtime shuts down: the
 * shutdown waits until that thread awaits it.  Before, it destroyed the
 * runtime as soon as the child had ended, and the other thread's await
 * then used the freed nursery and runtime (ASan: heap-use-after-free;
 * release: janus_rt_shutdown() returned with the await still to come). */
static void test_shutdown_waits_for_another_threads_open_nursery(void **state)
{
	(void)state;
	atomic_store(&ran, 0);
	atomic_store(&other_state, 0);
	RuntimeConfigEx c = unlimited_config(1);
	start(&c);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, await_late, NULL), 0);
	while (atomic_load(&other_state) == 0)
		sched_yield();
	janus_rt_shutdown();
	assert_int_equal(atomic_load(&other_state), 2);
	void *bad;
	assert_int_equal(pthread_join(th, &bad), 0);
	assert_null(bad);
	assert_null(janus_rt_get());
}

static _Atomic int racing_stop;

static void *nurseries_in_a_loop(void *unused)
{
	(void)unused;
	while (!atomic_load(&racing_stop)) {
		if (!janus_nursery_create())
			return "janus_nursery_create() failed";
		if (janus_nursery_spawn(count_task, NULL) != 0)
			return "janus_nursery_spawn() failed";
		if (janus_nursery_await_all() != JANUS_OK)
			return "janus_nursery_await_all() failed";
	}
	return NULL;
}

/* janus_nursery_create() on a thread while another shuts the global
 * runtime down, again and again.  Before, the create read GLOBAL_RT, the
 * shutdown took and destroyed that runtime (no task, no nursery yet), and
 * the create opened a nursery on the freed runtime: its child never ran
 * and the await hung (seen in one run in four of 300 rounds under ASan);
 * more often, a shutdown between the create's init and its read of
 * GLOBAL_RT left it nothing to open on: janus_nursery_create() said NULL. */
static void test_nursery_create_racing_shutdown_never_uses_a_freed_runtime(void **state)
{
	(void)state;
	janus_rt_shutdown();
	atomic_store(&racing_stop, 0);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, nurseries_in_a_loop, NULL), 0);
	RuntimeConfigEx c = unlimited_config(1);
	for (int i = 0; i < 100; i++) {
		int rc = janus_rt_init_ex(&c); /* or the thread made one */
		assert_true(rc == 0 || rc == -EEXIST);
		janus_rt_shutdown();
	}
	atomic_store(&racing_stop, 1);
	void *bad;
	assert_int_equal(pthread_join(th, &bad), 0);
	if (bad)
		fail_msg("%s", (char *)bad);
	janus_rt_shutdown();
}

/* ---- the janus ABI's runtimes are SPEC-021's :service (§10.2.2) ------- */

/* A child (spawned by a task, not by a thread: a thread's spawn is a root)
 * tries to spawn.  §8.2 gives it spawn_count 0, so the spawn fails at once
 * (§3.5 "no blocking", §14.1 SpawnBudgetExhausted: "recharge or fail"), and
 * without CapBudget it cannot recharge itself (§3.2.3). */
static int64_t child_tries_to_spawn(void *arg)
{
	(void)arg;
	if (!janus_nursery_create())
		return -100;
	int rc = janus_nursery_spawn(nothing_task, NULL);
	long r = janus_nursery_await_all();
	if (rc != -1)
		return -101; /* before: 0, the native profile's unlimited pool */
	if (r != JANUS_OK)
		return -102;
	if (janus_budget_get_current().spawn_count != 0)
		return -103;
	if (janus_budget_recharge((Budget){.spawn_count = 1}) != -1)
		return -104; /* before: 0, an implicit unlimited CapBudget */
	return 0;
}

/* A child that loops on Budget_Check (§11.1) for four times the child's
 * default ops: the default budget must end it first (§5.2, §15.1). */
static int64_t spin_past_the_default_ops(void *arg)
{
	(void)arg;
	for (uint64_t i = 0; i < 4 * CBCMN_SERVICE_CHILD_OPS; i++)
		janus_budget_check();
	return -60; /* never stopped: before, unlimited ops */
}

/* A root task (spawned by the thread) runs arg as its child: 0 when the
 * child's await result is the one expected, else that result, moved out
 * of -1..-4 so that it reads as what it was. */
struct in_child {
	TaskFn fn;
	long want;
};

static int64_t run_in_a_child(void *arg)
{
	const struct in_child *c = arg;
	if (!janus_nursery_create())
		return -200;
	if (janus_nursery_spawn(c->fn, NULL) != 0) {
		janus_nursery_await_all();
		return -201;
	}
	long r = janus_nursery_await_all();
	return r == c->want ? 0 : r >= JANUS_PENDING ? r - 300 : r;
}

/* Both checks on the thread's current nursery, which is on the runtime
 * under test. */
static void check_service_defaults(void)
{
	static const struct in_child spawner = {child_tries_to_spawn, JANUS_OK};
	static const struct in_child spinner = {spin_past_the_default_ops, JANUS_BUDGET_EXCEEDED};
	assert_int_equal(janus_nursery_spawn(run_in_a_child, (void *)&spawner), 0);
	assert_int_equal(janus_nursery_spawn(run_in_a_child, (void *)&spinner), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
}

/* Before: janus_rt_init's runtime had cbcmn_config_init's native profile:
 * the child's spawn succeeded (-101), its recharge too, and the spinner
 * ran 4 Mi checks and returned -60. */
static void test_default_janus_rt_init_is_the_service_profile(void **state)
{
	(void)state;
	janus_rt_shutdown();
	janus_rt_init((RuntimeConfig){.worker_count = 1});
	assert_non_null(janus_nursery_create());
	check_service_defaults();
	janus_rt_shutdown();
}

/* The global runtime janus_nursery_create makes when there is none. */
static void test_implicit_global_runtime_is_the_service_profile(void **state)
{
	(void)state;
	janus_rt_shutdown();
	assert_non_null(janus_nursery_create());
	assert_non_null(janus_rt_get());
	check_service_defaults();
	janus_rt_shutdown();
}

static void test_default_scheduler_create_is_the_service_profile(void **state)
{
	(void)state;
	void *s = janus_scheduler_create((SchedulerConfig){.worker_count = 1});
	assert_non_null(s);
	assert_non_null(janus_scheduler_nursery_create(s));
	check_service_defaults();
	janus_scheduler_shutdown(s);
}

/* RuntimeConfigEx left at its initializer: profile 0, the same. */
static void test_default_config_ex_is_the_service_profile(void **state)
{
	(void)state;
	RuntimeConfigEx c = JANUS_RUNTIME_CONFIG_EX_INIT;
	c.worker_count = 1;
	void *s = janus_scheduler_create_ex(&c);
	assert_non_null(s);
	assert_non_null(janus_scheduler_nursery_create(s));
	check_service_defaults();
	janus_scheduler_shutdown(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_janus_loop_on_budget_check_is_stopped_by_its_budget),
		T_WATCHED_TEST(test_two_janus_loops_on_one_executor_interleave),
		T_WATCHED_TEST(test_decrement_brings_the_fairness_yield_forward),
		T_WATCHED_TEST(test_decrement_subtracts_down_to_zero_without_waiting),
		T_WATCHED_TEST(test_cancelled_janus_loop_ends_at_its_check),
		T_WATCHED_TEST(test_check_and_decrement_outside_a_task_do_nothing),
		T_WATCHED_TEST(test_spawn_with_spawn_budget_exhausted_fails_at_once),
		T_WATCHED_TEST(test_spawn_with_ops_exhausted_fails_at_once),
		T_WATCHED_TEST(test_spawn_without_memory_for_the_stack_fails_at_once),
		T_WATCHED_TEST(test_spawn_recharges_from_capbudget_before_failing),
		T_WATCHED_TEST(test_config_ex_sets_budget_and_profile),
		T_WATCHED_TEST(test_config_ex_refuses_bad_input),
		T_WATCHED_TEST(test_isolated_runtime_task_opens_janus_nursery),
		T_WATCHED_TEST(test_scheduler_nursery_from_a_thread),
		T_WATCHED_TEST(test_scheduler_nursery_refused_inside_a_task),
		T_WATCHED_TEST(test_shutdown_awaits_the_threads_open_nurseries),
		T_WATCHED_TEST(test_rt_shutdown_from_its_own_task_keeps_the_runtime),
		T_WATCHED_TEST(test_scheduler_shutdown_of_the_global_runtime_is_rt_shutdown),
		T_WATCHED_TEST(test_thread_that_ends_with_nurseries_open_awaits_them),
		T_WATCHED_TEST(test_task_that_returns_with_a_nursery_open_fails_eleaked),
		T_WATCHED_TEST(test_shutdown_waits_for_another_threads_open_nursery),
		T_WATCHED_TEST(test_nursery_create_racing_shutdown_never_uses_a_freed_runtime),
		T_WATCHED_TEST(test_default_janus_rt_init_is_the_service_profile),
		T_WATCHED_TEST(test_implicit_global_runtime_is_the_service_profile),
		T_WATCHED_TEST(test_default_scheduler_create_is_the_service_profile),
		T_WATCHED_TEST(test_default_config_ex_is_the_service_profile),
	};
	return cmocka_run_group_tests_name("janus_budget", tests, NULL, NULL);
}
