/* test_takeover.c: a new thread takes over the ring of an executor whose
 * thread died, once that thread is really gone, whatever /proc says. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "helpers.h"

#define CHILD_SKIP 77

/* The child's end: exit 0, or the test fails saying why (an alarm means
 * `hang` happened).  CHILD_SKIP is returned for the caller to skip. */
static int child_status(pid_t pid, const char *hang)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		fail_msg("the child was killed by signal %d%s%s", WTERMSIG(st),
			 WTERMSIG(st) == SIGALRM ? ": " : "", WTERMSIG(st) == SIGALRM ? hang : "");
	return WEXITSTATUS(st);
}

static int64_t quit_under_a_fake_proc(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	/* What /proc would show if a new thread had taken our tid: the
	 * directory of a thread by that number, forever. */
	char path[64];
	mkdir("/proc/self", 0755);
	mkdir("/proc/self/task", 0755);
	snprintf(path, sizeof(path), "/proc/self/task/%d", (int)gettid());
	mkdir(path, 0755);
	pthread_exit(NULL); /* ends the executor's thread */
	return 0;
}

/* In a child with a mount namespace of its own: its /proc is a tmpfs that
 * claims the dead thread still exists. */
static int takeover_child(void)
{
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		return CHILD_SKIP;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(&cfg, &rt) != 0)
		return 2;
	if (mount("none", "/proc", "tmpfs", 0, NULL) != 0)
		return CHILD_SKIP;
	int64_t r = 0;
	if (cbcmn_runtime_run(rt, quit_under_a_fake_proc, NULL, &r) != 0)
		return 3;
	if (r != CBCMN_EPANIC)
		return 4;
	return cbcmn_runtime_destroy(rt) == 0 ? 0 : 5;
}

/* The bug: the new thread polled /proc/self/task/<tid> until it vanished;
 * a tid reused by a new thread, a /proc of another pid namespace (or a
 * fake one, here) kept it waiting forever, and the dead task's nursery
 * with it. */
static void test_takeover_does_not_trust_proc(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN)
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
	if (geteuid() != 0)
		T_SKIP("a mount namespace of its own needs root");
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(15);
		/* stderr: the runtime reports the dead thread there. */
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 2);
		_exit(takeover_child());
	}
	int rc = child_status(pid, "the takeover waited forever");
	if (rc == CHILD_SKIP)
		T_SKIP("no mount namespace here");
	assert_int_equal(rc, 0);
}

/* ---- a thread cancelled inside a doorbell ------------------------------------ */

static int64_t leaf(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 1;
}

/* On executor 0: ask for our thread's cancellation, then spawn: the spawn
 * wakes the sleeping executor 1 by writing its eventfd (no MSG_RING),
 * the first cancellation point this thread reaches. */
static int64_t cancel_then_spawn(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	pthread_cancel(pthread_self());
	for (int i = 0; i < 4; i++)
		cbcmn_nursery_spawn_stealable(cx, n, leaf, NULL, NULL);
	return cbcmn_nursery_await_all(cx, n);
}

static int cancelled_doorbell_child(void)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.ring_flags = CBCMN_RING_NO_MSG_RING;
	cfg.spin_ns = CBCMN_SPIN_NONE; /* executor 1 sleeps at once */
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(&cfg, &rt) != 0)
		return 2;
	int64_t r = 0;
	/* The thread may end there (CBCMN_EPANIC) or not (the request stays
	 * pending, unanswered by the runtime's own calls): either way every
	 * later run must go through. */
	struct t_pinned_call c = {cancel_then_spawn, NULL, 0};
	if (cbcmn_runtime_run(rt, t_pinned_main, &c, &r) != 0)
		return 3;
	for (int i = 0; i < 5; i++)
		if (cbcmn_runtime_run(rt, leaf, NULL, &r) != 0 || r != 1)
			return 4;
	return 0;
}

/* The bug: a cancellation acted upon inside the eventfd write of a
 * doorbell ended the thread after the wake-up was handed out (permit,
 * idle bit, searching count) but before the doorbell rang: executor 1
 * slept on, the searching count stayed taken, every later notification
 * was skipped, and the next run waited forever. */
static void test_cancel_inside_a_doorbell_loses_no_wake_up(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN)
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGALRM, SIG_DFL);
		alarm(15);
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 2); /* the runtime reports the dead thread there */
		_exit(cancelled_doorbell_child());
	}
	assert_int_equal(child_status(pid, "a run waited forever"), 0);
}

/* ---- a cancellation left pending ---------------------------------------------- */

static int64_t cancel_own_thread(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	/* Acted upon at this thread's next cancellation point: none here. */
	pthread_cancel(pthread_self());
	return 7;
}

static int pending_cancel_child(void)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.min_workers = 1; /* executor 1 starts on demand, retires when idle */
	cfg.idle_retire_ms = 5;
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(&cfg, &rt) != 0)
		return 2;
	struct t_pinned_call c = {cancel_own_thread, NULL, 1};
	for (int i = 0; i < 3; i++) {
		int64_t r = 0;
		if (cbcmn_runtime_run(rt, t_pinned_main, &c, &r) != 0 || r != 7)
			return 3;
		usleep(100 * 1000); /* executor 1 retires meanwhile */
	}
	return cbcmn_runtime_destroy(rt) == 0 ? 0 : 4;
}

/* The bug: a task's pthread_cancel() of its own executor thread, never
 * reaching a cancellation point in the task, was acted upon when the idle
 * executor retired, in the close() of its ring: the thread ended half-way
 * with the executor RETIRING for good, and the next task pinned to it
 * (and destroy) waited forever. */
static void test_cancel_left_pending_does_not_wedge_a_retiring_executor(void **state)
{
	(void)state;
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGALRM, SIG_DFL);
		alarm(15);
		_exit(pending_cancel_child());
	}
	assert_int_equal(child_status(pid, "a run or destroy waited forever"), 0);
}

/* ---- a thread's last destructors, after its executor was handed on ------- */

static pthread_key_t late_key;
static int late_calls, late_open_rc = 1;

/* A destructor of the dying executor thread that runs after the runtime's
 * own (exec_thread_died()): its second call comes in the next round, when
 * a successor thread already drives the executor.  This thread is then
 * outside the runtime: it may open a nursery as any other thread does. */
static void late_destructor(void *arg)
{
	cbcmn_runtime *rt = arg;
	if (late_calls++ == 0) {
		pthread_setspecific(late_key, rt); /* once more, next round */
		return;
	}
	cbcmn_nursery *n;
	late_open_rc = cbcmn_nursery_open(rt, NULL, &n);
	if (late_open_rc == 0)
		cbcmn_nursery_await_all(NULL, n);
}

static int64_t exit_with_late_destructor(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	pthread_setspecific(late_key, cbcmn_cx_runtime(cx));
	pthread_exit(NULL);
	return 0;
}

static int late_destructor_child(void)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(&cfg, &rt) != 0)
		return 2;
	if (pthread_key_create(&late_key, late_destructor) != 0)
		return 3;
	int64_t r = 0;
	if (cbcmn_runtime_run(rt, exit_with_late_destructor, NULL, &r) != 0 || r != CBCMN_EPANIC)
		return 4;
	if (late_calls != 2)
		return 5;
	if (late_open_rc != 0) {
		fprintf(stdout, "nursery_open in the late destructor: %d\n", late_open_rc);
		return 6;
	}
	return cbcmn_runtime_destroy(rt) == 0 ? 0 : 7;
}

/* The bug: the dying thread kept its executor's identity (cbcmn__tls_exec)
 * after the successor had started, so a later destructor's call into the
 * runtime took it for the executor: a nursery open was refused -EDEADLK
 * (as on an executor without cx), and a wake-up from it rang doorbells
 * through the executor's ring and wrote its trace ring, beside the
 * successor that owns both now. */
static void test_dying_thread_is_no_executor_after_the_handover(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN)
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGALRM, SIG_DFL);
		alarm(15);
		int fd = open("/dev/null", O_WRONLY); /* the runtime reports the death */
		dup2(fd, 2);
		_exit(late_destructor_child());
	}
	assert_int_equal(child_status(pid, "a run or destroy waited forever"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_takeover_does_not_trust_proc),
		T_WATCHED_TEST(test_cancel_inside_a_doorbell_loses_no_wake_up),
		T_WATCHED_TEST(test_cancel_left_pending_does_not_wedge_a_retiring_executor),
		T_WATCHED_TEST(test_dying_thread_is_no_executor_after_the_handover),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
