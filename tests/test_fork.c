/* test_fork.c: a forked child cannot use its parent's runtime: every call
 * that would wait for the parent's executors says so (CBCMN_EFORKED)
 * instead of waiting forever, and the child can make a runtime of its own. */
#include <sys/wait.h>

#include "helpers.h"

static int64_t answer(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 42;
}

/* In the child: 0 if all went as it should, else the step that did not. */
static int child(cbcmn_runtime *rt, cbcmn_nursery *pre, cbcmn_task *pre_task)
{
	int64_t r = 0;
	if (cbcmn_runtime_run(rt, answer, NULL, &r) != CBCMN_EFORKED)
		return 10;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(rt, NULL, &n) != CBCMN_EFORKED)
		return 11;
	if (cbcmn_nursery_spawn(NULL, pre, answer, NULL, NULL) != CBCMN_EFORKED)
		return 12;
	if (cbcmn_task_join(NULL, pre_task, &r) != CBCMN_EFORKED)
		return 13;
	if (cbcmn_nursery_await_all(NULL, pre) != CBCMN_EFORKED)
		return 14;
	if (cbcmn_runtime_destroy(rt) != CBCMN_EFORKED)
		return 15;
	/* A runtime of its own works. */
	cbcmn_runtime *mine;
	if (cbcmn_runtime_create(NULL, &mine) != 0)
		return 16;
	if (cbcmn_runtime_run(mine, answer, NULL, &r) != 0 || r != 42)
		return 17;
	return cbcmn_runtime_destroy(mine) == 0 ? 0 : 18;
}

/* The bug: in a forked child the parent's runtime has no executor thread,
 * and cbcmn_runtime_run() on it waited forever for its task. */
static void test_forked_child_gets_eforked_not_a_hang(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	/* Objects made before the fork, which the child also inherits. */
	cbcmn_nursery *pre;
	cbcmn_task *pre_task;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &pre), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, pre, answer, NULL, &pre_task), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(10);
		_exit(child(rt, pre, pre_task));
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		fail_msg("the child was killed by signal %d%s", WTERMSIG(st),
			 WTERMSIG(st) == SIGALRM ? " (it hung)" : "");
	assert_int_equal(WEXITSTATUS(st), 0);
	/* The parent's runtime goes on. */
	int64_t r = 0;
	assert_int_equal(cbcmn_nursery_await_all(NULL, pre), 0);
	assert_int_equal(cbcmn_task_join(NULL, pre_task, &r), 0);
	assert_int_equal(r, 42);
	t_run(rt, answer, NULL, 42);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_forked_child_gets_eforked_not_a_hang),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
