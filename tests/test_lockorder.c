/* test_lockorder: the debug lock-order checker fires, naming both locks. */
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "lock.h"
#include "actor.h"
#include "../lib/stack.h"

/* The process-wide locks of signal.c and stack.c, through the only calls
 * that take them alone (the fork handlers'). */
void cbcmn__signal_fork_lock(bool lock);

/* Run fn in a child with stderr captured; return its wait status. */
static int in_child(void (*fn)(void), char *out, size_t len)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(stdout);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], STDERR_FILENO);
		close(p[0]);
		fn();
		_exit(0);
	}
	close(p[1]);
	t_read_all(p[0], out, len);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

static struct cbcmn__mutex inject, stacks;

static void right_order(void)
{
	cbcmn__mutex_lock(&inject);
	cbcmn__mutex_lock(&stacks);
	cbcmn__mutex_unlock(&stacks);
	cbcmn__mutex_unlock(&inject);
}

static __attribute__((unused)) void wrong_order(void)
{
	cbcmn__mutex_lock(&stacks);
	cbcmn__mutex_lock(&inject); /* rank 40 while holding rank 60 */
	cbcmn__mutex_unlock(&inject);
	cbcmn__mutex_unlock(&stacks);
}

static __attribute__((unused)) void same_lock_twice(void)
{
	cbcmn__mutex_lock(&inject);
	cbcmn__mutex_lock(&inject);
}

/* The stack pool's lock is taken before the guard budget's: the reverse
 * must abort. */
static __attribute__((unused)) void stacks_under_stack_budget(void)
{
	cbcmn__stack_fork_lock(true);
	cbcmn__mutex_lock(&stacks);
}

/* The signal install lock ranks below the stack pool's. */
static __attribute__((unused)) void signal_under_stacks(void)
{
	cbcmn__mutex_lock(&stacks);
	cbcmn__signal_fork_lock(true);
}

/* The fork handler's own order (signal, then the budget) is the rank's. */
static void fork_handler_order(void)
{
	cbcmn__signal_fork_lock(true);
	cbcmn__stack_fork_lock(true);
	cbcmn__stack_fork_lock(false);
	cbcmn__signal_fork_lock(false);
}

static int setup(void **state)
{
	(void)state;
	cbcmn__mutex_init(&inject, "inject", CBCMN__LOCK_INJECT);
	cbcmn__mutex_init(&stacks, "stacks", CBCMN__LOCK_STACKS);
	return 0;
}

static void test_documented_order_is_accepted(void **state)
{
	(void)state;
	char msg[512];
	int st = in_child(right_order, msg, sizeof(msg));
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_string_equal(msg, "");
}

static void test_checker_fires_naming_both_locks(void **state)
{
	(void)state;
#ifndef CBCMN_DEBUG
	T_SKIP("the lock-order checker is built into debug builds only; make test runs "
	       "this suite again under ASan and TSan, which are debug builds");
#else
	char msg[512];
	int st = in_child(wrong_order, msg, sizeof(msg));
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGABRT);
	assert_non_null(strstr(msg, "lock order violation"));
	assert_non_null(strstr(msg, "\"inject\""));
	assert_non_null(strstr(msg, "\"stacks\""));
#endif
}

/* Taking a lock you hold is a self-deadlock: the checker catches it too. */
static void test_checker_fires_on_recursion(void **state)
{
	(void)state;
#ifndef CBCMN_DEBUG
	T_SKIP("the lock-order checker is built into debug builds only");
#else
	char msg[512];
	int st = in_child(same_lock_twice, msg, sizeof(msg));
	assert_true(WIFSIGNALED(st));
	assert_non_null(strstr(msg, "\"inject\""));
#endif
}

static void test_fork_handler_order_is_accepted(void **state)
{
	(void)state;
	char msg[512];
	int st = in_child(fork_handler_order, msg, sizeof(msg));
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_string_equal(msg, "");
}

/* fn, in a child, aborts with a lock order violation naming a (and b). */
static __attribute__((unused)) void expect_violation(void (*fn)(void), const char *a,
						     const char *b)
{
	char msg[512];
	int st = in_child(fn, msg, sizeof(msg));
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGABRT);
	assert_non_null(strstr(msg, "lock order violation"));
	assert_non_null(strstr(msg, a));
	if (b)
		assert_non_null(strstr(msg, b));
}

/* Both used to be raw pthread mutexes the checker never saw. */
static void test_checker_covers_stack_budget_lock(void **state)
{
	(void)state;
#ifndef CBCMN_DEBUG
	T_SKIP("the lock-order checker is built into debug builds only");
#else
	expect_violation(stacks_under_stack_budget, "\"stack_budget\"", NULL);
#endif
}

static void test_checker_covers_signal_lock(void **state)
{
	(void)state;
#ifndef CBCMN_DEBUG
	T_SKIP("the lock-order checker is built into debug builds only");
#else
	expect_violation(signal_under_stacks, "\"signal\"", NULL);
#endif
}

/* ---- the channel's lock (struct cbcmn__flock) ----------------------------- */

static struct cbcmn__flock chanlock;

static __attribute__((unused)) void inject_under_chan(void)
{
	cbcmn__flock_lock(&chanlock);
	cbcmn__mutex_lock(&inject); /* rank 40 while holding rank 50 */
}

/* The inline lock keeps the checker: out of order against a mutex, it
 * aborts naming both. */
static void test_checker_covers_the_channel_lock(void **state)
{
	(void)state;
#ifndef CBCMN_DEBUG
	T_SKIP("the lock-order checker is built into debug builds only");
#else
	cbcmn__flock_init(&chanlock, "chan", CBCMN__LOCK_CHAN);
	expect_violation(inject_under_chan, "\"inject\"", "\"chan\"");
#endif
}

/* ---- an actor's slot lock (a struct cbcmn__flock since session 15) ------ */

static int64_t waits_for_a_message(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	cbcmn_actor_receive(cx, &m, UINT64_MAX);
	return 0;
}

static int64_t inject_under_slot_task(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0 ||
	    cbcmn_actor_spawn(cx, n, waits_for_a_message, NULL, NULL, &a) != 0)
		_exit(3);
	if (!cbcmn__actor_lock_ref(cbcmn_cx_runtime(cx), a))
		_exit(4);
	cbcmn__mutex_lock(&inject); /* rank 40 while holding the slot's 52 */
	_exit(5);
}

static __attribute__((unused)) void inject_under_slot(void)
{
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_runtime_run(rt, inject_under_slot_task, NULL, NULL);
	_exit(6);
}

/* A real slot's lock, as actor.c sets it up, keeps its name and rank in
 * the checker. */
static void test_checker_covers_the_actor_slot_lock(void **state)
{
	(void)state;
#ifndef CBCMN_DEBUG
	T_SKIP("the lock-order checker is built into debug builds only");
#else
	expect_violation(inject_under_slot, "\"inject\"", "\"actor\"");
#endif
}

#define FL_THREADS 4
#define FL_ROUNDS 200000

static long fl_count;

static void *fl_worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < FL_ROUNDS; i++) {
		cbcmn__flock_lock(&chanlock);
		fl_count++; /* plain: only the lock keeps the increments apart */
		cbcmn__flock_unlock(&chanlock);
	}
	return NULL;
}

/* Threads fighting for it (its sleep and wake path, on two CPUs) lose no
 * increment, and it is free again after. */
static void test_channel_lock_excludes_under_contention(void **state)
{
	(void)state;
	cbcmn__flock_init(&chanlock, "chan", CBCMN__LOCK_CHAN);
	fl_count = 0;
	pthread_t th[FL_THREADS];
	for (int i = 0; i < FL_THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, fl_worker, NULL), 0);
	for (int i = 0; i < FL_THREADS; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(fl_count, (long)FL_THREADS * FL_ROUNDS);
	assert_int_equal(atomic_load(&chanlock.w), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_documented_order_is_accepted, setup),
		cmocka_unit_test_setup(test_checker_fires_naming_both_locks, setup),
		cmocka_unit_test_setup(test_checker_fires_on_recursion, setup),
		cmocka_unit_test_setup(test_fork_handler_order_is_accepted, setup),
		cmocka_unit_test_setup(test_checker_covers_stack_budget_lock, setup),
		cmocka_unit_test_setup(test_checker_covers_signal_lock, setup),
		cmocka_unit_test_setup(test_checker_covers_the_channel_lock, setup),
		cmocka_unit_test_setup(test_channel_lock_excludes_under_contention, setup),
		cmocka_unit_test_setup(test_checker_covers_the_actor_slot_lock, setup),
	};
	return cmocka_run_group_tests_name("lockorder", tests, NULL, NULL);
}
