/* test_actor_stats: the per-executor actor statistics the tools show
 * (cbcmn-top's actor columns): supervisor restarts counted per executor. */
#include "helpers.h"

#include <stdatomic.h>

#include "cbcmn_actor.h"

#define CRASHES 5

struct tree {
	_Atomic int starts;
	_Atomic cbcmn_actor_ref sup;
	cbcmn_sup_report rep;
	int64_t await_rc;
};

/* Crashes at once CRASHES times; the next incarnation stops the tree. */
static int64_t crasher(cbcmn_cx *cx, void *arg)
{
	struct tree *t = arg;
	if (atomic_fetch_add(&t->starts, 1) < CRASHES)
		return -1;
	cbcmn_actor_ref sup;
	while (!(sup = atomic_load(&t->sup)))
		cbcmn_yield(cx);
	cbcmn_actor_stop(NULL, cx, sup, 0);
	return 0;
}

static int64_t root(cbcmn_cx *cx, void *arg)
{
	struct tree *t = arg;
	cbcmn_sup_child c = {.fn = crasher, .state = t, .restart = CBCMN_SUP_TRANSIENT, .node = -1};
	cbcmn_sup_spec spec = {.strategy = CBCMN_SUP_ONE, .max_restarts = CRASHES + 1,
			       .children = &c, .nchildren = 1, .report = &t->rep};
	cbcmn_nursery *n;
	cbcmn_actor_ref sup;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_sup_start(cx, n, &spec, NULL, &sup) == 0);
	atomic_store(&t->sup, sup);
	t->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

/* Each restart is counted once, on the executor its supervisor ran on:
 * the executors' counts add up to the supervisor's report. */
static void test_restarts_are_counted_per_executor(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cbcmn_runtime *rt;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), 0);
	struct tree t = {0};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, root, &t, &res), 0);
	assert_int_equal(res, 0);
	assert_int_equal(t.await_rc, 0);
	assert_int_equal(t.rep.restarts, CRASHES);
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 2), 0);
	assert_int_equal(per[0].actor_restarts + per[1].actor_restarts, CRASHES);
	assert_int_equal(st.total.actor_restarts, CRASHES);
	assert_int_equal(cbcmn_runtime_destroy(rt), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_restarts_are_counted_per_executor),
	};
	return cmocka_run_group_tests_name("actor_stats", tests, NULL, NULL);
}
