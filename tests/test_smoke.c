/* test_smoke: the runtime starts, runs one task, and stops. */
#include "helpers.h"

static int64_t answer(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	assert_non_null(cbcmn_cx_runtime(cx));
	assert_true(cbcmn_cx_task_id(cx) != 0);
	return 42;
}

static void test_run_one_task(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	int64_t r = 0;
	assert_int_equal(cbcmn_runtime_run(rt, answer, NULL, &r), 0);
	assert_int_equal(r, 42);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_run_one_task),
	};
	return cmocka_run_group_tests_name("smoke", tests, NULL, NULL);
}
