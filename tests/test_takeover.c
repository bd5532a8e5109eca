/* test_takeover.c: a new thread takes over the ring of an executor whose
 * thread died, once that thread is really gone, whatever /proc says. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "helpers.h"

#define CHILD_SKIP 77

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
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == CHILD_SKIP)
		T_SKIP("no mount namespace here");
	if (WIFSIGNALED(st))
		fail_msg("the child was killed by signal %d%s", WTERMSIG(st),
			 WTERMSIG(st) == SIGALRM ? ": the takeover waited forever" : "");
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_takeover_does_not_trust_proc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
