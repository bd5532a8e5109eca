/* test_pin.c: executors pinned by the placement policy on the live machine,
 * and their memory on their node. */
#include <errno.h>
#include <numaif.h>
#include <sched.h>

#include "helpers.h"
#include "runtime.h" /* the executor records, for their pages' node */

static cbcmn_runtime *pin_rt(uint32_t workers, int32_t policy, const int *cpus, size_t ncpus,
			     int *rc)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cfg.policy = policy;
	cfg.cpus = cpus;
	cfg.ncpus = ncpus;
	cbcmn_runtime *rt = NULL;
	*rc = cbcmn_runtime_create(&cfg, &rt);
	return rt;
}

static int allowed_cpus(cpu_set_t *set)
{
	CPU_ZERO(set);
	assert_int_equal(sched_getaffinity(0, sizeof(*set), set), 0);
	return CPU_COUNT(set);
}

/* What a task on executor i sees: its thread's affinity, and the node of a
 * page of its stack. */
struct seen {
	cpu_set_t aff;
	int stack_node;
	uint32_t exec;
};

static int page_node(void *addr)
{
	int node = -1;
	if (get_mempolicy(&node, NULL, 0, addr, MPOL_F_NODE | MPOL_F_ADDR) != 0)
		return -errno;
	return node;
}

static int64_t look(cbcmn_cx *cx, void *arg)
{
	struct seen *s = arg;
	volatile char probe[64];
	probe[0] = 1; /* touched: the page exists */
	s->exec = cbcmn_cx_executor(cx);
	TASK_CHECK(sched_getaffinity(0, sizeof(s->aff), &s->aff) == 0);
	s->stack_node = page_node((void *)probe);
	return 0;
}

static void check_pinned(cbcmn_runtime *rt, uint32_t n, const int *want)
{
	cbcmn_stats st;
	cbcmn_executor_stats per[8];
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 8), 0);
	for (uint32_t i = 0; i < n; i++) {
		struct seen s = {0};
		assert_int_equal(t_run_pinned(rt, i, look, &s), 0);
		ASSERT_TASK_CHECKS();
		assert_int_equal(s.exec, i);
		assert_int_equal(per[i].cpu, want[i]);
		/* sched_getaffinity from the executor's own thread: one CPU. */
		assert_int_equal(CPU_COUNT(&s.aff), 1);
		assert_true(CPU_ISSET(want[i], &s.aff));
		assert_true(per[i].node >= 0);
		assert_int_equal(s.stack_node, per[i].node);
		/* The executor's record is on its node too. */
		assert_int_equal(page_node(rt->exec[i]), per[i].node);
	}
}

static void test_default_pins_depth_first(void **state)
{
	(void)state;
	cpu_set_t set;
	int n = allowed_cpus(&set);
	if (n < 2)
		T_SKIP("the process may use %d CPU: nothing to place", n);
	int rc;
	cbcmn_runtime *rt = pin_rt(2, CBCMN_PIN_AUTO, NULL, 0, &rc);
	assert_int_equal(rc, 0);
	cbcmn_stats st;
	cbcmn_stats_snapshot(rt, &st, NULL, 0);
	assert_int_equal(st.policy, CBCMN_POLICY_DEPTH_FIRST);
	assert_false(st.oversubscribed);
	/* Depth-first from the lowest allowed CPU: the two lowest here (one
	 * node, no SMT on these machines; the fixtures cover the rest). */
	int want[2], k = 0;
	for (int c = 0; c < CPU_SETSIZE && k < 2; c++)
		if (CPU_ISSET(c, &set))
			want[k++] = c;
	check_pinned(rt, 2, want);
	t_destroy(rt);
}

static void test_explicit_cpus(void **state)
{
	(void)state;
	cpu_set_t set;
	if (allowed_cpus(&set) < 2 || !CPU_ISSET(0, &set) || !CPU_ISSET(1, &set))
		T_SKIP("needs CPUs 0 and 1 allowed");
	int cpus[2] = {1, 0};
	int rc;
	cbcmn_runtime *rt = pin_rt(2, CBCMN_POLICY_CPUS, cpus, 2, &rc);
	assert_int_equal(rc, 0);
	check_pinned(rt, 2, cpus);
	t_destroy(rt);
}

static void test_no_pinning(void **state)
{
	(void)state;
	cpu_set_t set;
	int n = allowed_cpus(&set);
	int rc;
	cbcmn_runtime *rt = pin_rt(2, CBCMN_PIN_NONE, NULL, 0, &rc);
	assert_int_equal(rc, 0);
	cbcmn_executor_stats per[2];
	cbcmn_stats st;
	cbcmn_stats_snapshot(rt, &st, per, 2);
	assert_int_equal(st.policy, CBCMN_PIN_NONE);
	for (uint32_t i = 0; i < 2; i++) {
		struct seen s = {0};
		assert_int_equal(t_run_pinned(rt, i, look, &s), 0);
		assert_int_equal(per[i].cpu, -1);
		assert_int_equal(CPU_COUNT(&s.aff), n); /* the whole mask */
	}
	t_destroy(rt);
}

static void test_oversubscribed(void **state)
{
	(void)state;
	cpu_set_t set;
	int n = allowed_cpus(&set);
	if (n > 6)
		T_SKIP("%d CPUs: oversubscribing them takes too many executors here", n);
	int rc;
	cbcmn_runtime *rt = pin_rt((uint32_t)n + 1, CBCMN_POLICY_DEPTH_FIRST, NULL, 0, &rc);
	assert_int_equal(rc, 0);
	cbcmn_stats st;
	cbcmn_executor_stats per[8];
	cbcmn_stats_snapshot(rt, &st, per, 8);
	assert_true(st.oversubscribed);
	assert_int_equal(per[n].cpu, per[0].cpu); /* wraps around */
	t_destroy(rt);
}

static void test_bad_placement(void **state)
{
	(void)state;
	int rc;
	assert_null(pin_rt(2, CBCMN_POLICY_CPUS, NULL, 0, &rc));
	assert_int_equal(rc, -EINVAL);
	int bad[2] = {0, 4000};
	assert_null(pin_rt(2, CBCMN_POLICY_CPUS, bad, 2, &rc));
	assert_int_equal(rc, -EINVAL);
	int dup[2] = {0, 0};
	assert_null(pin_rt(2, CBCMN_POLICY_CPUS, dup, 2, &rc));
	assert_int_equal(rc, -EINVAL);
	assert_null(pin_rt(2, 77, NULL, 0, &rc));
	assert_int_equal(rc, -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_default_pins_depth_first),
		T_WATCHED_TEST(test_explicit_cpus),
		T_WATCHED_TEST(test_no_pinning),
		T_WATCHED_TEST(test_oversubscribed),
		T_WATCHED_TEST(test_bad_placement),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
