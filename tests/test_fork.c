/* test_fork.c: a forked child cannot use its parent's runtime: every call
 * that would wait for the parent's executors says so (CBCMN_EFORKED)
 * instead of waiting forever, and the child can make a runtime of its own. */
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "helpers.h"
#include "cbcmn_chan.h"

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
	/* Under a sanitizer, let the executors run the task and park first:
	 * its allocator is not fork-safe, and a child forked while an
	 * executor allocated waited in its lock for ever (1 run in a CI beside
	 * a CPU hog; see the last test of this file). */
	if (T_ASAN || T_TSAN)
		usleep(200000);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGALRM, SIG_DFL); /* not the harness's handler: a hang is a signal */
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

/* Fork, run body(arg) in the child with a deadline of secs (SIGALRM's
 * default action: the harness's handler is not the child's business), and
 * return its wait status. */
static int fork_child(int (*body)(void *), void *arg, unsigned secs)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGALRM, SIG_DFL);
		alarm(secs);
		_exit(body(arg));
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

static void assert_child_ok(int st)
{
	if (WIFSIGNALED(st))
		fail_msg("the child was killed by signal %d%s", WTERMSIG(st),
			 WTERMSIG(st) == SIGALRM ? " (it hung)" : "");
	if (WEXITSTATUS(st) != 0)
		fail_msg("the child failed at step %d", WEXITSTATUS(st));
}

/* ---- calls that take the parent's locks ------------------------------------- */

struct inherited {
	cbcmn_runtime *rt;
	cbcmn_nursery *n;
	cbcmn_chan *ch;
};

static int child_cancel_and_channels(void *arg)
{
	struct inherited *in = arg;
	int v = 1;
	cbcmn_chan_permit p = {0};
	cbcmn_chan *mine;
	if (cbcmn_nursery_cancel(in->n) != CBCMN_EFORKED)
		return 10;
	if (cbcmn_chan_try_send(NULL, in->ch, &v) != CBCMN_EFORKED)
		return 11;
	if (cbcmn_chan_try_recv(NULL, in->ch, &v) != CBCMN_EFORKED)
		return 12;
	/* Empty: a receive would wait for a sender only the parent has. */
	if (cbcmn_chan_recv(NULL, in->ch, &v) != CBCMN_EFORKED)
		return 13;
	if (cbcmn_chan_try_reserve(NULL, in->ch, &p) != CBCMN_EFORKED)
		return 14;
	if (cbcmn_chan_close(NULL, in->ch) != CBCMN_EFORKED)
		return 15;
	if (cbcmn_chan_destroy(in->ch) != CBCMN_EFORKED)
		return 16;
	if (cbcmn_chan_create(in->rt, 1, sizeof(int), &mine) != CBCMN_EFORKED)
		return 17;
	return 0;
}

static int64_t wait_for_cancel(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	while (cbcmn_sleep(cx, 1000000) == 0)
		;
	return 0;
}

/* The bug: cbcmn_nursery_cancel() and the channel calls had no fork check.
 * The cancel scans every executor's wait registry under its lock, a
 * channel call takes the channel's lock, and a parent's thread may hold
 * either as it forks: children calling them deadlocked (44 of 300 for the
 * cancel, 4 of 100 for cbcmn_chan_try_recv, with tasks busy on them), and a
 * receive from an empty inherited channel waited forever. */
static void test_forked_child_cancel_and_channel_calls_are_eforked(void **state)
{
	(void)state;
	struct inherited in;
	in.rt = t_runtime(2);
	assert_int_equal(cbcmn_nursery_open(in.rt, NULL, &in.n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, in.n, wait_for_cancel, NULL, NULL), 0);
	assert_int_equal(cbcmn_chan_create(in.rt, 1, sizeof(int), &in.ch), 0);
	assert_child_ok(fork_child(child_cancel_and_channels, &in, 10));
	/* The parent's go on. */
	int v = 7;
	assert_int_equal(cbcmn_chan_try_send(NULL, in.ch, &v), 0);
	assert_int_equal(cbcmn_chan_try_recv(NULL, in.ch, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(cbcmn_chan_destroy(in.ch), 0);
	assert_int_equal(cbcmn_nursery_cancel(in.n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, in.n), CBCMN_ECANCELED);
	t_destroy(in.rt);
}

/* ---- the library's process-wide locks ----------------------------------------- */

static _Atomic bool churning;

static int one_runtime(void)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(&cfg, &rt);
	return rc ? rc : cbcmn_runtime_destroy(rt);
}

static void *churn(void *arg)
{
	(void)arg;
	while (atomic_load(&churning))
		if (one_runtime() != 0)
			break;
	return NULL;
}

static int child_creates(void *arg)
{
	(void)arg;
	return one_runtime() == 0 ? 0 : 20;
}

/* The bug: another thread of the parent was creating a runtime as it
 * forked, holding the guard-page budget's lock (stack.c) or the signal
 * handler's (signal.c); the child inherited it locked and its own
 * cbcmn_runtime_create() waited forever (15 children of 400). */
static void test_forked_child_creates_while_the_parent_was_creating(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN)
		T_SKIP("the sanitizer's allocator is not fork-safe: a child can deadlock in its "
		       "malloc while a parent's thread allocates");
	atomic_store(&churning, true);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, churn, NULL), 0);
	int st = 0;
	for (int i = 0; i < T_SCALE(200); i++) {
		st = fork_child(child_creates, NULL, 10);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			break;
	}
	atomic_store(&churning, false);
	pthread_join(th, NULL);
	assert_child_ok(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_forked_child_gets_eforked_not_a_hang),
		T_WATCHED_TEST(test_forked_child_cancel_and_channel_calls_are_eforked),
		T_WATCHED_TEST(test_forked_child_creates_while_the_parent_was_creating),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
