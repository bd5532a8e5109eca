/* test_janus: the frozen janus_* C ABI, driven as SPEC-021 §2.7.1 does, and
 * its §3.6 error table. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "cbcmn_io.h"
#include "janus_rt.h"

/* Test hook in janus_rt.c: the global runtime with a full native config. */
int janus__rt_init_config(const cbcmn_config *cfg);

static _Atomic int ran;

static int64_t test_task(void *arg)
{
	(void)arg;
	atomic_fetch_add(&ran, 1);
	return 0;
}

static int64_t fail_task(void *arg) { return (int64_t)(intptr_t)arg; }

static int64_t recurse(volatile char *p, int depth)
{
	volatile char pad[512];
	pad[0] = (char)depth;
	pad[511] = p ? p[0] : 0;
	if (depth == -1)
		return 0; /* never: keeps the recursion from looking infinite */
	return recurse(pad, depth + 1) + pad[3];
}

static int64_t overflow_task(void *arg)
{
	(void)arg;
	return recurse(NULL, 0);
}

static int setup(void **state)
{
	(void)state;
	/* Unlimited budgets, stated: these tests are about the ABI, not the
	 * runtime's default budgets (docs/BUDGETS.md). */
	RuntimeConfigEx c = JANUS_RUNTIME_CONFIG_EX_INIT;
	c.worker_count = 1;
	c.deterministic_seed = 42;
	Budget all = {UINT32_MAX, SIZE_MAX, UINT16_MAX, UINT16_MAX, UINT16_MAX};
	c.budget = c.child_budget = c.cap_limit = all;
	c.caps = JANUS_CAP_SPAWN | JANUS_CAP_BUDGET | JANUS_CAPS_EXPLICIT;
	return janus_rt_init_ex(&c) == 0 && janus_rt_get() ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	janus_rt_shutdown();
	return janus_rt_get() == NULL ? 0 : -1;
}

/* Isolated schedulers made on four threads at once, the process's first
 * runtimes (this test runs first, without setup): before, their creates
 * raced on stack.c's lazily set page size, a plain static (TSan: a data
 * race, the suite fails; attack23). */
static pthread_barrier_t first_barrier;

static int64_t first_child(void *arg)
{
	(void)arg;
	return 0;
}

static void *first_maker(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&first_barrier);
	void *s = janus_scheduler_create((SchedulerConfig){.worker_count = 1});
	long r = -100;
	if (s && janus_scheduler_nursery_create(s)) {
		janus_nursery_spawn(first_child, NULL);
		r = janus_nursery_await_all();
	}
	janus_scheduler_shutdown(s);
	return (void *)r;
}

static void test_first_schedulers_made_on_threads_at_once(void **state)
{
	(void)state;
	pthread_t th[4];
	assert_int_equal(pthread_barrier_init(&first_barrier, NULL, 4), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, first_maker, NULL), 0);
	for (int i = 0; i < 4; i++) {
		void *r;
		pthread_join(th[i], &r);
		assert_int_equal((long)r, JANUS_OK);
	}
	pthread_barrier_destroy(&first_barrier);
}

/* SPEC-021 §2.7.1, through the C exports. */
static void test_isolated_style_usage(void **state)
{
	(void)state;
	atomic_store(&ran, 0);
	void *n = janus_nursery_create();
	assert_non_null(n);
	assert_int_equal(janus_nursery_spawn(test_task, NULL), 0);
	assert_int_equal(janus_nursery_spawn(test_task, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(atomic_load(&ran), 2);
}

static void test_child_failure_code(void **state)
{
	(void)state;
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(fail_task, (void *)(intptr_t)-7), 0);
	assert_int_equal(janus_nursery_await_all(), -7);
}

static void test_panic_is_minus_2(void **state)
{
	(void)state;
	if (T_TSAN)
		T_SKIP("TSan cannot follow a jump out of a signal handler");
	/* cmocka swaps its own SIGSEGV handler in around setup(), which
	 * removes the one the runtime installed there: start it here. */
	janus_rt_shutdown();
	janus_rt_init((RuntimeConfig){.worker_count = 1});
	FILE *saved = stderr;
	stderr = fopen("/dev/null", "w"); /* the overflow line is expected */
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(overflow_task, NULL), 0);
	long rc = janus_nursery_await_all();
	fclose(stderr);
	stderr = saved;
	assert_int_equal(rc, JANUS_PANIC);
}

static int64_t cancel_self(void *arg)
{
	/* The adapter's nursery handle starts with the native nursery. */
	cbcmn_nursery *n = *(cbcmn_nursery **)arg;
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	return 0;
}

static void test_cancelled_is_minus_1(void **state)
{
	(void)state;
	void *rn = janus_nursery_create();
	assert_non_null(rn);
	assert_int_equal(janus_nursery_spawn(cancel_self, rn), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_CANCELLED);
}

/* §3.6: -4 is pending only.  Before: await with no nursery returned -4. */
static void test_await_without_nursery_is_not_pending(void **state)
{
	(void)state;
	assert_int_equal(janus_nursery_await_all(), JANUS_NO_NURSERY);
	assert_false(JANUS_IS_CHILD_FAILURE(JANUS_NO_NURSERY));
	assert_int_equal(janus_nursery_spawn(test_task, NULL), -1); /* §14.1 */
	assert_int_equal(janus_nursery_spawn_noarg(NULL), -1);
	/* Await twice: the second finds none. */
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(janus_nursery_await_all(), JANUS_NO_NURSERY);
}

static void *spawn_from_plain_thread(void *arg)
{
	long *out = arg;
	out[0] = janus_nursery_spawn(test_task, NULL); /* none open here */
	out[1] = janus_nursery_await_all();
	out[2] = janus_nursery_create() != NULL;
	out[3] = janus_nursery_spawn(test_task, NULL);
	out[4] = janus_nursery_await_all();
	return NULL;
}

/* The current nursery is the thread's own: another thread's is not. */
static void test_plain_thread_has_its_own_nursery_stack(void **state)
{
	(void)state;
	atomic_store(&ran, 0);
	assert_non_null(janus_nursery_create());
	long out[5];
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, spawn_from_plain_thread, out), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(out[0], -1);
	assert_int_equal(out[1], JANUS_NO_NURSERY);
	assert_int_equal(out[2], 1);
	assert_int_equal(out[3], 0);
	assert_int_equal(out[4], JANUS_OK);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK); /* still ours */
	assert_int_equal(atomic_load(&ran), 1);
}

/* §3.6: a child's own -1..-4 must not read as cancelled, panic, budget or
 * pending, nor a child's own copy of a native code as the runtime's.
 * Before: a child returning -1 made await_all return -1 (cancelled), -3
 * read as budget exceeded, CBCMN_ECANCELED as cancelled. */
static long await_one(TaskFn fn, int64_t code)
{
	if (!janus_nursery_create())
		return 1;
	if (janus_nursery_spawn(fn, (void *)(intptr_t)code) != 0) {
		janus_nursery_await_all();
		return 2;
	}
	return janus_nursery_await_all();
}

static void test_child_codes_never_read_as_the_table(void **state)
{
	(void)state;
	for (int64_t c = -1; c >= -4; c--) {
		long r = await_one(fail_task, c);
		assert_int_equal(r, JANUS_CHILD_ESCAPE + c);
		assert_true(JANUS_IS_CHILD_FAILURE(r));
		assert_int_equal(JANUS_CHILD_CODE(r), c);
	}
	/* The native layer's codes, returned by a child, are the child's. */
	const int64_t native[] = {CBCMN_ECANCELED, CBCMN_EPANIC, CBCMN_EBUDGET, -7, -4096};
	for (size_t i = 0; i < sizeof(native) / sizeof(native[0]); i++) {
		long r = await_one(fail_task, native[i]);
		assert_int_equal(r, native[i]);
		assert_true(JANUS_IS_CHILD_FAILURE(r));
		assert_int_equal(JANUS_CHILD_CODE(r), native[i]);
	}
	/* The reserved block is not a child's to use. */
	const int64_t reserved[] = {JANUS_CHILD_ESCAPE, JANUS_CHILD_ESCAPE - 1,
				    JANUS_CHILD_ESCAPE - 125, JANUS_CHILD_ESCAPE - 4102};
	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
		assert_int_equal(await_one(fail_task, reserved[i]), JANUS_CHILD_UNREPRESENTABLE);
	assert_int_equal(await_one(fail_task, JANUS_CHILD_ESCAPE - 4103), JANUS_CHILD_UNREPRESENTABLE);
	assert_int_equal(await_one(fail_task, INT64_MIN), INT64_MIN);
	assert_int_equal(await_one(fail_task, 5), JANUS_OK);
}

/* A child's own ECANCELED is a failure: it cancels its siblings (fail fast)
 * and wins, where a cancellation would not. */
static int64_t wait_cancelled(void *arg)
{
	(void)arg;
	uint64_t until = t_clock_ns(CLOCK_MONOTONIC) + T_STALL_NS;
	while (janus_scheduler_yield() == 0)
		if (t_clock_ns(CLOCK_MONOTONIC) > until)
			return -60; /* never cancelled */
	return 0;
}

static void test_child_ecanceled_is_a_failure_that_fails_fast(void **state)
{
	(void)state;
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(wait_cancelled, NULL), 0);
	assert_int_equal(janus_nursery_spawn(fail_task, (void *)(intptr_t)CBCMN_ECANCELED), 0);
	assert_int_equal(janus_nursery_await_all(), CBCMN_ECANCELED);
}

/* §3.4: the other task forms. */
static int64_t noarg_ok(void)
{
	atomic_fetch_add(&ran, 1);
	return 3;
}

static int64_t noarg_fail(void) { return -9; }

static int32_t i32_task(void *arg) { return (int32_t)(intptr_t)arg; }

static void test_noarg_and_i32_task_forms(void **state)
{
	(void)state;
	atomic_store(&ran, 0);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn_noarg(noarg_ok), 0);
	assert_int_equal(janus_nursery_spawn_noarg(noarg_ok), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(atomic_load(&ran), 2);

	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn_noarg(noarg_fail), 0);
	assert_int_equal(janus_nursery_await_all(), -9);

	/* Widened with its sign: INT32_MIN is a failure, not 2^31. */
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn_i32(i32_task, (void *)(intptr_t)INT32_MIN), 0);
	assert_int_equal(janus_nursery_await_all(), INT32_MIN);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn_i32(i32_task, (void *)(intptr_t)-1), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_CHILD_ESCAPE - 1);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn_i32(i32_task, (void *)(intptr_t)INT32_MAX), 0);
	assert_int_equal(janus_nursery_spawn_i32(NULL, NULL), -1);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
}

static void test_bad_spawn(void **state)
{
	(void)state;
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(NULL, NULL), -1);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
}

/* Nurseries opened inside tasks form a stack per task, not per thread:
 * tasks yield between create and await and may resume elsewhere. */
static int64_t nested(void *arg)
{
	int depth = (int)(intptr_t)arg;
	if (!janus_nursery_create())
		return -100;
	for (int i = 0; i < 3; i++) {
		int rc = depth > 0 ? janus_scheduler_spawn((void *)nested, (void *)(intptr_t)(depth - 1))
				   : janus_nursery_spawn(test_task, NULL);
		if (rc != 0)
			return -101;
		if (janus_scheduler_yield() != 0)
			return -102;
	}
	return janus_nursery_await_all();
}

static void test_nested_per_task_stacks(void **state)
{
	(void)state;
	atomic_store(&ran, 0);
	assert_non_null(janus_nursery_create());
	for (int i = 0; i < 4; i++)
		assert_int_equal(janus_nursery_spawn(nested, (void *)(intptr_t)2), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(atomic_load(&ran), 4 * 27);
}

static void test_yield_outside_a_task(void **state)
{
	(void)state;
	assert_int_equal(janus_scheduler_yield(), 0);
}

static void test_isolated_scheduler(void **state)
{
	(void)state;
	void *s = janus_scheduler_create((SchedulerConfig){.worker_count = 2, .deterministic_seed = 7});
	assert_non_null(s);
	assert_true(s != (void *)janus_rt_get()); /* not the global one */
	assert_int_equal(cbcmn_runtime_workers(s), 2);
	janus_scheduler_shutdown(s);
	janus_scheduler_shutdown(NULL); /* harmless */
}

/* A scheduler handle is a plain pointer: a second shutdown, a nursery on
 * a scheduler shut down, and a pointer that never was one are refused
 * (nothing done, NULL), never used (they read freed memory, and a zeroed
 * block crashed in the shutdown, before: attack23). */
static int64_t seven(void *arg)
{
	(void)arg;
	return 7;
}

static void test_stale_and_bogus_scheduler_handles_are_refused(void **state)
{
	(void)state;
	static _Alignas(64) unsigned char junk[16384]; /* zeroed: no scheduler */
	assert_null(janus_scheduler_nursery_create(junk));
	janus_scheduler_shutdown(junk);
	void *s = janus_scheduler_create((SchedulerConfig){.worker_count = 2});
	assert_non_null(s);
	assert_non_null(janus_scheduler_nursery_create(s));
	assert_int_equal(janus_nursery_spawn(seven, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	janus_scheduler_shutdown(s);
	janus_scheduler_shutdown(s); /* again: nothing */
	assert_null(janus_scheduler_nursery_create(s));
	assert_int_equal(janus_nursery_spawn(seven, NULL), -1); /* no nursery */
	/* A live one is still found among others. */
	void *a = janus_scheduler_create((SchedulerConfig){.worker_count = 1});
	void *b = janus_scheduler_create((SchedulerConfig){.worker_count = 1});
	assert_non_null(a);
	assert_non_null(b);
	janus_scheduler_shutdown(a);
	assert_null(janus_scheduler_nursery_create(a));
	assert_non_null(janus_scheduler_nursery_create(b));
	assert_int_equal(janus_nursery_spawn(seven, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	janus_scheduler_shutdown(b);
	janus_scheduler_shutdown(a);
	janus_scheduler_shutdown(b);
}

/* A fork() while another thread holds the janus lock (opening a nursery on
 * an isolated scheduler, making or shutting one down) must not leave the
 * child with it held: a child's janus_scheduler_shutdown() of the parent's
 * handle (or its first janus_scheduler_create()) waited for ever.  The
 * atfork handler takes it with the library's other process-wide locks
 * (rvattack23). */
static _Atomic int fork_stop;

static void *fork_opener(void *arg)
{
	void *s = arg;
	while (!atomic_load(&fork_stop))
		if (janus_scheduler_nursery_create(s))
			janus_nursery_await_all();
	return NULL;
}

static void test_fork_while_the_janus_lock_is_held(void **state)
{
	(void)state;
	void *s = janus_scheduler_create((SchedulerConfig){.worker_count = 1});
	assert_non_null(s);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, fork_opener, s), 0);
	int hung = 0, forks = 0;
	for (; forks < 100 && !hung; forks++) {
		pid_t pid = fork();
		if (pid == 0) {
			alarm(10); /* a hang is a failure, not a stuck suite */
			janus_scheduler_shutdown(s); /* the parent's: nothing to do */
			_exit(0);
		}
		assert_true(pid > 0);
		int st;
		assert_int_equal(waitpid(pid, &st, 0), pid);
		hung = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	atomic_store(&fork_stop, 1);
	pthread_join(th, NULL);
	janus_scheduler_shutdown(s);
	printf("    %d forks, the last child %s\n", forks, hung ? "hung" : "exited");
	assert_false(hung);
}

/* -3: a child that runs out of budget nobody recharges. */
static int64_t endless_checks(void *arg)
{
	(void)arg;
	for (;;)
		janus_budget_check(); /* an op each */
	return 0;
}

static void test_budget_exceeded_is_minus_3(void **state)
{
	(void)state;
	/* A global runtime whose tasks get 5000 ops and no CapBudget. */
	janus_rt_shutdown();
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.budget.ops = 5000;
	cfg.caps.flags = CBCMN_CAP_SPAWN | CBCMN_CAPS_EXPLICIT;
	assert_int_equal(janus__rt_init_config(&cfg), 0);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(endless_checks, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_BUDGET_EXCEEDED);
}

static int64_t budget_reader(void *arg)
{
	Budget *out = arg;
	*out = janus_budget_get_current();
	/* setup()'s capabilities: an unlimited CapBudget. */
	Budget more = {.ops = 10};
	return janus_budget_recharge(more);
}

static void test_budget_get_and_recharge(void **state)
{
	(void)state;
	Budget outside = janus_budget_get_current();
	assert_int_equal(outside.ops, 0); /* not a task */
	assert_int_equal(janus_budget_recharge((Budget){.ops = 1}), -1);
	Budget b = {0};
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(budget_reader, &b), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(b.ops, UINT32_MAX); /* unlimited reads as the maximum */
	assert_int_equal(b.spawn_count, UINT16_MAX);
}

static void test_auto_init(void **state)
{
	(void)state;
	janus_rt_shutdown();
	assert_null(janus_rt_get());
	assert_non_null(janus_nursery_create()); /* creates the global runtime */
	assert_non_null(janus_rt_get());
	assert_int_equal(janus_nursery_spawn(test_task, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
}

/* janus_rt_shutdown() from one of the global runtime's own tasks.  Before:
 * it cleared the global, the destroy said -EDEADLK and was dropped, so the
 * runtime leaked, still running, while janus_rt_get() said NULL (-50 here)
 * and the next janus_nursery_create() from a thread made a second one. */
static int64_t shutdown_from_inside(void *arg)
{
	Runtime *rt = janus_rt_get();
	janus_rt_shutdown();
	*(Runtime **)arg = janus_rt_get();
	return rt && janus_rt_get() == rt ? 0 : -50;
}

/* janus_rt_shutdown() from a function the global runtime's task runs on
 * its blocking pool.  Before: the pool thread was taken for an outside
 * thread; the shutdown took the runtime out of the global and waited for
 * its tasks, the one it served among them: for ever (the watchdog). */
static int64_t shutdown_on_the_pool(void *arg)
{
	(void)arg;
	janus_rt_shutdown();
	/* The native destroy says why it cannot: not "busy" for ever. */
	int rc = cbcmn_runtime_destroy((cbcmn_runtime *)janus_rt_get());
	return rc == -EDEADLK ? 0 : -52;
}

static int64_t shutdown_through_the_pool(cbcmn_cx *cx, void *arg)
{
	int64_t r = -1;
	int rc = cbcmn_blocking(cx, shutdown_on_the_pool, NULL, &r);
	*(Runtime **)arg = janus_rt_get();
	return rc == 0 && r == 0 ? 0 : -51;
}

static void test_shutdown_from_the_global_runtimes_pool_is_refused(void **state)
{
	(void)state;
	t_watchdog_start("test_shutdown_from_the_global_runtimes_pool_is_refused", T_WATCHDOG_S);
	Runtime *rt = janus_rt_get();
	Runtime *seen = NULL;
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run((cbcmn_runtime *)rt, shutdown_through_the_pool, &seen, &r), 0);
	assert_int_equal(r, 0);
	assert_ptr_equal(seen, rt);
	assert_ptr_equal(janus_rt_get(), rt);
	t_watchdog_stop();
}

static void test_shutdown_from_a_global_task_is_refused(void **state)
{
	(void)state;
	Runtime *rt = janus_rt_get();
	Runtime *seen = NULL;
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(shutdown_from_inside, &seen), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_ptr_equal(seen, rt);
	assert_ptr_equal(janus_rt_get(), rt);
	/* Still the one global runtime, and it works. */
	atomic_store(&ran, 0);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(test_task, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(atomic_load(&ran), 1);
	assert_ptr_equal(janus_rt_get(), rt);
}

/* The same for an isolated runtime and janus_scheduler_shutdown(): its own
 * task cannot wait for itself, so nothing happens and it goes on. */
static int64_t scheduler_shutdown_from_inside(void *arg)
{
	janus_scheduler_shutdown(arg);
	if (!janus_nursery_create())
		return -50;
	if (janus_nursery_spawn(test_task, NULL) != 0) {
		janus_nursery_await_all();
		return -51;
	}
	return janus_nursery_await_all();
}

static void test_scheduler_shutdown_from_its_own_task_is_refused(void **state)
{
	(void)state;
	RuntimeConfigEx c = JANUS_RUNTIME_CONFIG_EX_INIT;
	c.worker_count = 1;
	c.child_budget.spawn_count = 1; /* the task's one spawn, granted */
	void *s = janus_scheduler_create_ex(&c);
	assert_non_null(s);
	atomic_store(&ran, 0);
	assert_non_null(janus_scheduler_nursery_create(s));
	assert_int_equal(janus_nursery_spawn(scheduler_shutdown_from_inside, s), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_OK);
	assert_int_equal(atomic_load(&ran), 1);
	janus_scheduler_shutdown(s);
}

/* ---- a program written from SPEC-021 alone ------------------------------
 * Only janus_rt.h and libc below, default configuration (janus_rt_init,
 * so SPEC-021 §10.2.2 :service), and what the spec's text says. */

static _Atomic int spec_ran;

static int64_t spec_work(void *arg)
{
	(void)arg;
	atomic_fetch_add(&spec_ran, 1);
	return 0;
}

static int64_t spec_fail(void *arg) { return (int64_t)(intptr_t)arg; }

/* Ends when its nursery is cancelled (§8.3.1 steps 1-3: the cancelled
 * child acknowledges at its next yield point, §4.2), else gives up. */
static int64_t spec_until_cancelled(void *arg)
{
	(void)arg;
	for (long i = 0; i < 10000000L; i++)
		if (janus_scheduler_yield() != 0)
			return 0;
	return -60; /* never cancelled */
}

/* Loops on the compiler's yield check (§4.1, §11.1 Budget_Check): the
 * default budget (§8.2 DEFAULT_OPS) must stop it (§5.2, §15.1.1). */
static int64_t spec_spin(void *arg)
{
	(void)arg;
	for (long i = 0; i < 1L << 26; i++)
		janus_budget_check();
	return -61; /* never stopped */
}

/* A child (§8.2 spawn_count 0) that tries to spawn: §14.1
 * SpawnBudgetExhausted, "recharge or fail", without blocking (§3.5). */
static int64_t spec_spawner(void *arg)
{
	(void)arg;
	if (!janus_nursery_create())
		return -70;
	int rc = janus_nursery_spawn(spec_work, NULL);
	long r = janus_nursery_await_all();
	return rc == -1 && r == 0 ? 0 : -71;
}

/* A task's own nursery: what await_all (§3.5 Await, §3.6) returns when fn
 * is its one child; 0 when that is want, else the result moved below the
 * table so that it reads as itself. */
static int64_t spec_expect(TaskFn fn, void *arg, long want)
{
	if (!janus_nursery_create())
		return -80;
	if (janus_nursery_spawn(fn, arg) != 0) {
		janus_nursery_await_all();
		return -81;
	}
	long r = janus_nursery_await_all();
	return r == want ? 0 : r - 1000;
}

static int64_t spec_budget_row(void *arg)
{
	(void)arg;
	return spec_expect(spec_spin, NULL, -3); /* §3.6 .budget_exceeded */
}

static int64_t spec_spawn_row(void *arg)
{
	(void)arg;
	return spec_expect(spec_spawner, NULL, 0);
}

static void test_spec021_program_with_defaults(void **state)
{
	(void)state;
	janus_rt_shutdown();
	janus_rt_init((RuntimeConfig){0}); /* §2.6, §12.1 */
	assert_non_null(janus_rt_get());

	/* §2.7.1, §3.5: create, spawn, await; §3.6 .success is 0. */
	atomic_store(&spec_ran, 0);
	assert_non_null(janus_nursery_create());
	for (int i = 0; i < 8; i++)
		assert_int_equal(janus_nursery_spawn(spec_work, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), 0);
	assert_int_equal(atomic_load(&spec_ran), 8);

	/* §3.6 .child_failed: the child's own negative code. */
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(spec_fail, (void *)(intptr_t)-17), 0);
	assert_int_equal(janus_nursery_await_all(), -17);

	/* §8.3.1: a failing child cancels the nursery; its sibling ends at
	 * its yield point; the child's failure is what await reports. */
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(spec_until_cancelled, NULL), 0);
	assert_int_equal(janus_nursery_spawn(spec_fail, (void *)(intptr_t)-17), 0);
	assert_int_equal(janus_nursery_await_all(), -17);

	/* §5.2, §3.6 -3 and §8.2, §14.1 -1, each in a task's own nursery. */
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(spec_budget_row, NULL), 0);
	assert_int_equal(janus_nursery_spawn(spec_spawn_row, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), 0);

	/* §14.1 NurseryNotActive: no current nursery, the spawn fails. */
	assert_int_equal(janus_nursery_spawn(spec_work, NULL), -1);
	/* A budget read outside a task is all zero (nothing to charge). */
	assert_int_equal(janus_budget_get_current().ops, 0);
	janus_rt_shutdown();
	assert_null(janus_rt_get());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_schedulers_made_on_threads_at_once), /* first */
		cmocka_unit_test_setup_teardown(test_isolated_style_usage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_child_failure_code, setup, teardown),
		cmocka_unit_test_setup_teardown(test_panic_is_minus_2, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancelled_is_minus_1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_await_without_nursery_is_not_pending, setup, teardown),
		cmocka_unit_test_setup_teardown(test_plain_thread_has_its_own_nursery_stack, setup, teardown),
		cmocka_unit_test_setup_teardown(test_child_codes_never_read_as_the_table, setup, teardown),
		cmocka_unit_test_setup_teardown(test_child_ecanceled_is_a_failure_that_fails_fast, setup, teardown),
		cmocka_unit_test_setup_teardown(test_noarg_and_i32_task_forms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_spawn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nested_per_task_stacks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_yield_outside_a_task, setup, teardown),
		cmocka_unit_test_setup_teardown(test_isolated_scheduler, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_and_bogus_scheduler_handles_are_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fork_while_the_janus_lock_is_held, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_exceeded_is_minus_3, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_get_and_recharge, setup, teardown),
		cmocka_unit_test_setup_teardown(test_auto_init, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shutdown_from_a_global_task_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shutdown_from_the_global_runtimes_pool_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scheduler_shutdown_from_its_own_task_is_refused, setup, teardown),
		cmocka_unit_test(test_spec021_program_with_defaults),
	};
	return cmocka_run_group_tests_name("janus", tests, NULL, NULL);
}
