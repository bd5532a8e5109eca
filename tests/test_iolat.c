/* test_iolat.c: a fiber's I/O beside CPU-bound neighbours (issue 15,
 * item 4): between the pick that queues an SQE and the run of the task
 * its completion wakes, no neighbour's slice runs when the completion
 * comes at once.  Order, not time: the neighbours count their runs. */
#include "helpers.h"

#define HOGS 4
#define HOG_SLICE_NS 200000ull /* each computes 200 us between yields */
#define WRITES 150             /* well below what the socket holds unread */

struct iolat {
	int sv[2];
	_Atomic uint64_t hog_runs;
	_Atomic bool stop;
	_Atomic uint32_t passed_over, writes;
};

static int64_t hog(cbcmn_cx *cx, void *arg)
{
	struct iolat *l = arg;
	while (!atomic_load(&l->stop)) {
		atomic_fetch_add(&l->hog_runs, 1);
		uint64_t end = t_now_ns() + HOG_SLICE_NS;
		while (t_now_ns() < end && !atomic_load(&l->stop))
			;
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t writer(cbcmn_cx *cx, void *arg)
{
	struct iolat *l = arg;
	for (int i = 0; i < WRITES; i++) {
		cbcmn_yield(cx); /* behind the neighbours: a pick of the yield list */
		uint64_t before = atomic_load(&l->hog_runs);
		TASK_CHECK(cbcmn_write(cx, l->sv[0], "x", 1) == 1);
		if (atomic_load(&l->hog_runs) != before)
			atomic_fetch_add(&l->passed_over, 1);
		atomic_fetch_add(&l->writes, 1);
	}
	atomic_store(&l->stop, true);
	return 0;
}

static int64_t root(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < HOGS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, hog, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, writer, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* The bug: a write's SQE waited for the next pick whenever the executor
 * had no mean pick time yet (its first 256 picks) or its guess from the
 * last wait had faded, and every 61st pick ran the yield list's oldest
 * task before the task its completion had just put in the next-task
 * slot: beside tasks that yield every 2 ms, the write took 2 ms (p99 of
 * cbcmn-bench iolat).  One executor, writes that complete at once (the
 * socket has room): no neighbour runs inside any write. */
static void test_regression_write_beside_cpu_bound_tasks_passes_none_of_them(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.policy = CBCMN_PIN_NONE;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct iolat *l = calloc(1, sizeof(*l));
	assert_non_null(l);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, l->sv), 0);
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, root, l, &res), 0);
	assert_int_equal(atomic_load(&task_bad_line), 0);
	assert_int_equal(res, 0);
	assert_int_equal(atomic_load(&l->writes), WRITES);
	printf("  %u of %u writes passed over by a neighbour's slice\n",
	       atomic_load(&l->passed_over), WRITES);
	assert_int_equal(atomic_load(&l->passed_over), 0);
	close(l->sv[0]);
	close(l->sv[1]);
	free(l);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_regression_write_beside_cpu_bound_tasks_passes_none_of_them),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
