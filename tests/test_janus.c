/* test_janus: the frozen janus_* C ABI, driven as SPEC-021 §2.7.1 does, and
 * its §3.6 error table. */
#include <stdatomic.h>

#include "helpers.h"
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
	janus_rt_init((RuntimeConfig){.worker_count = 1, .deterministic_seed = 42});
	return janus_rt_get() ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	janus_rt_shutdown();
	return janus_rt_get() == NULL ? 0 : -1;
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

static void test_pending_without_nursery(void **state)
{
	(void)state;
	assert_int_equal(janus_nursery_await_all(), JANUS_PENDING);
	assert_int_equal(janus_nursery_spawn(test_task, NULL), -1);
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

/* -3: a child that runs out of budget nobody recharges. */
static int64_t endless(void *arg)
{
	(void)arg;
	for (;;)
		janus_scheduler_yield(); /* free: a yield costs nothing */
	return 0;
}

static int64_t endless_checkpoints(void *arg)
{
	(void)arg;
	/* Spawning costs budget: this child spawns until it has none. */
	if (!janus_nursery_create())
		return -100;
	for (;;)
		if (janus_nursery_spawn(test_task, NULL) != 0)
			break;
	return janus_nursery_await_all();
}

static void test_budget_exceeded_is_minus_3(void **state)
{
	(void)state;
	(void)endless;
	/* A global runtime whose tasks get 20 spawns and no CapBudget. */
	janus_rt_shutdown();
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.budget.spawn_count = 20;
	cfg.caps.flags = CBCMN_CAP_SPAWN | CBCMN_CAPS_EXPLICIT;
	assert_int_equal(janus__rt_init_config(&cfg), 0);
	assert_non_null(janus_nursery_create());
	assert_int_equal(janus_nursery_spawn(endless_checkpoints, NULL), 0);
	assert_int_equal(janus_nursery_await_all(), JANUS_BUDGET_EXCEEDED);
}

static int64_t budget_reader(void *arg)
{
	Budget *out = arg;
	*out = janus_budget_get_current();
	/* The default capabilities include an unlimited CapBudget. */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_isolated_style_usage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_child_failure_code, setup, teardown),
		cmocka_unit_test_setup_teardown(test_panic_is_minus_2, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancelled_is_minus_1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pending_without_nursery, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_spawn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nested_per_task_stacks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_yield_outside_a_task, setup, teardown),
		cmocka_unit_test_setup_teardown(test_isolated_scheduler, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_exceeded_is_minus_3, setup, teardown),
		cmocka_unit_test_setup_teardown(test_budget_get_and_recharge, setup, teardown),
		cmocka_unit_test_setup_teardown(test_auto_init, setup, teardown),
	};
	return cmocka_run_group_tests_name("janus", tests, NULL, NULL);
}
