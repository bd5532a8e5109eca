/* test_watch.c: watching a runtime from another process (cbcmn_watch_*):
 * the statistics segment gives the same figures as cbcmn_stats_snapshot(),
 * live, and says when the runtime or its process is gone. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "common/fib.h"

static void fib_run(cbcmn_runtime *rt, int n)
{
	struct fib f = {.n = n};
	t_run(rt, fib_task, &f, 0);
}

/* Executor threads are named cbcmn-exec-N: tid must be one of ours. */
static void assert_exec_thread(pid_t pid, int32_t tid, uint32_t id)
{
	char path[64], comm[32] = "", want[32];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)pid, (int)tid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(comm, sizeof(comm), f));
	fclose(f);
	comm[strcspn(comm, "\n")] = '\0';
	snprintf(want, sizeof(want), "cbcmn-exec-%u", id);
	assert_string_equal(comm, want);
}

/* In the process itself: the watch and the snapshot agree exactly once
 * the runtime is quiet, and the executors are seen parked. */
static void test_self_matches_snapshot(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	fib_run(rt, 20);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &w), 0);
	cbcmn_stats a, b;
	cbcmn_executor_stats pa[2], pb[2];
	/* Quiet: both executors asleep in their rings. */
	uint64_t deadline = t_now_ns() + 5000000000ull;
	for (;;) {
		assert_int_equal(cbcmn_watch_read(w, &b, pb, 2), 0);
		if (pb[0].state == CBCMN_EXEC_PARKED && pb[1].state == CBCMN_EXEC_PARKED)
			break;
		assert_true(t_now_ns() < deadline);
		usleep(1000);
	}
	assert_int_equal(cbcmn_stats_snapshot(rt, &a, pa, 2), 0);
	assert_int_equal(b.executors, 2);
	assert_int_equal(b.executors_live, a.executors_live);
	assert_int_equal(b.pid, getpid());
	assert_true(b.uptime_ns > 0);
	assert_int_equal(b.tasks_spawned, a.tasks_spawned);
	assert_int_equal(b.tasks_completed, a.tasks_completed);
	assert_int_equal(b.tasks_live, 0);
	assert_true(b.tasks_spawned >= 10946); /* fib(20) tasks at least */
	assert_int_equal(b.total.tasks_run, a.total.tasks_run);
	assert_int_equal(b.total.steal_successes, a.total.steal_successes);
	assert_int_equal(b.total.doorbells_sent, a.total.doorbells_sent);
	assert_int_equal(b.policy, a.policy);
	assert_int_equal(b.ring_setup_flags, a.ring_setup_flags);
	for (uint32_t i = 0; i < 2; i++) {
		assert_int_equal(pb[i].tasks_run, pa[i].tasks_run);
		assert_int_equal(pb[i].cpu, pa[i].cpu);
		assert_int_equal(pb[i].node, pa[i].node);
		assert_int_equal(pb[i].tid, pa[i].tid);
		assert_true(pb[i].tid > 0);
		assert_exec_thread(getpid(), pb[i].tid, i);
	}
	/* The runtime ends: the watch says so, with the last figures. */
	t_destroy(rt);
	assert_int_equal(cbcmn_watch_read(w, &b, pb, 2), -ESRCH);
	assert_int_equal(b.tasks_completed, a.tasks_completed);
	assert_int_equal(pb[0].state, CBCMN_EXEC_STOPPED);
	cbcmn_watch_close(w);
}

/* A child that runs fib in a loop until told to stop, then destroys its
 * runtime, reports, and waits to be killed. */
struct child {
	pid_t pid;
	int to[2], from[2]; /* parent -> child, child -> parent */
};

static void child_main(struct child *c)
{
	close(c->to[1]);
	close(c->from[0]);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(&cfg, &rt) != 0)
		_exit(2);
	char ch = 'r';
	if (write(c->from[1], &ch, 1) != 1)
		_exit(3);
	/* Run until the parent writes. */
	for (;;) {
		struct fib f = {.n = 16};
		if (cbcmn_runtime_run(rt, fib_task, &f, NULL) != 0)
			_exit(4);
		struct pollfd p = {.fd = c->to[0], .events = POLLIN};
		if (poll(&p, 1, 0) == 1)
			break;
	}
	if (read(c->to[0], &ch, 1) != 1 || cbcmn_runtime_destroy(rt) != 0)
		_exit(5);
	ch = 'd';
	if (write(c->from[1], &ch, 1) != 1)
		_exit(6);
	pause();
	_exit(0);
}

static void child_start(struct child *c)
{
	assert_int_equal(pipe(c->to), 0);
	assert_int_equal(pipe(c->from), 0);
	c->pid = fork();
	assert_true(c->pid >= 0);
	if (c->pid == 0)
		child_main(c);
	close(c->to[0]);
	close(c->from[1]);
	char ch;
	assert_int_equal(read(c->from[0], &ch, 1), 1);
	assert_int_equal(ch, 'r');
}

static void child_reap(struct child *c)
{
	kill(c->pid, SIGKILL);
	waitpid(c->pid, NULL, 0);
	close(c->to[1]);
	close(c->from[0]);
}

/* Another process: its figures move while it works; its runtime's end and
 * its exit both read as -ESRCH. */
static void test_other_process(void **state)
{
	(void)state;
	struct child c;
	child_start(&c);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(c.pid, 0, &w), 0);
	cbcmn_stats s1, s2;
	cbcmn_executor_stats per[2];
	assert_int_equal(cbcmn_watch_read(w, &s1, per, 2), 0);
	usleep(100000);
	assert_int_equal(cbcmn_watch_read(w, &s2, per, 2), 0);
	assert_int_equal(s2.pid, c.pid);
	assert_int_equal(s2.executors, 2);
	assert_true(s2.tasks_completed > s1.tasks_completed);
	assert_true(s2.total.tasks_run > s1.total.tasks_run);
	assert_true(s2.uptime_ns > s1.uptime_ns);
	for (uint32_t i = 0; i < 2; i++) {
		assert_true(per[i].tid > 0);
		assert_exec_thread(c.pid, per[i].tid, i);
		assert_true(per[i].state != CBCMN_EXEC_STOPPED);
	}
	/* Only one runtime there. */
	cbcmn_watch *w2;
	assert_int_equal(cbcmn_watch_open(c.pid, 1, &w2), -ENOENT);

	char ch = 's';
	assert_int_equal(write(c.to[1], &ch, 1), 1);
	assert_int_equal(read(c.from[0], &ch, 1), 1);
	assert_int_equal(ch, 'd');
	assert_int_equal(cbcmn_watch_read(w, &s2, NULL, 0), -ESRCH);
	assert_true(s2.tasks_completed >= s1.tasks_completed);
	/* Gone for good, and no runtime left to open. */
	assert_int_equal(cbcmn_watch_open(c.pid, 0, &w2), -ENOENT);
	cbcmn_watch_close(w);
	child_reap(&c);
}

static void test_process_exit(void **state)
{
	(void)state;
	struct child c;
	child_start(&c);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(c.pid, 0, &w), 0);
	cbcmn_stats s;
	assert_int_equal(cbcmn_watch_read(w, &s, NULL, 0), 0);
	kill(c.pid, SIGKILL);
	waitpid(c.pid, NULL, 0);
	assert_int_equal(cbcmn_watch_read(w, &s, NULL, 0), -ESRCH);
	assert_int_equal(s.pid, c.pid);
	cbcmn_watch_close(w);
	close(c.to[1]);
	close(c.from[0]);
}

/* Two runtimes in one process: index 0 is the older. */
static void test_two_runtimes(void **state)
{
	(void)state;
	cbcmn_runtime *a = t_runtime(1), *b = t_runtime(2);
	cbcmn_watch *wa, *wb, *wc;
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &wa), 0);
	assert_int_equal(cbcmn_watch_open(getpid(), 1, &wb), 0);
	assert_int_equal(cbcmn_watch_open(getpid(), 2, &wc), -ENOENT);
	cbcmn_stats sa, sb;
	assert_int_equal(cbcmn_watch_read(wa, &sa, NULL, 0), 0);
	assert_int_equal(cbcmn_watch_read(wb, &sb, NULL, 0), 0);
	assert_int_equal(sa.executors, 1);
	assert_int_equal(sb.executors, 2);
	t_destroy(a);
	assert_int_equal(cbcmn_watch_read(wa, &sa, NULL, 0), -ESRCH);
	assert_int_equal(cbcmn_watch_read(wb, &sb, NULL, 0), 0);
	/* The older one gone, the younger is now index 0. */
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &wc), 0);
	assert_int_equal(cbcmn_watch_read(wc, &sa, NULL, 0), 0);
	assert_int_equal(sa.executors, 2);
	cbcmn_watch_close(wc);
	cbcmn_watch_close(wa);
	cbcmn_watch_close(wb);
	t_destroy(b);
}

/* Bad input, a process without a runtime, a segment inherited through
 * fork (it is the parent's, not the child's), and no descriptor left over
 * by a runtime or a watch. */
static void test_errors(void **state)
{
	(void)state;
	cbcmn_watch *w = NULL;
	cbcmn_stats s;
	assert_int_equal(cbcmn_watch_open(getpid(), 0, NULL), -EINVAL);
	assert_int_equal(cbcmn_watch_open(0, 0, &w), -EINVAL);
	assert_int_equal(cbcmn_watch_open(-5, 0, &w), -EINVAL);
	assert_int_equal(cbcmn_watch_read(NULL, &s, NULL, 0), -EINVAL);
	cbcmn_watch_close(NULL);
	/* pid_max is at most 2^22. */
	assert_int_equal(cbcmn_watch_open(1 << 23, 0, &w), -ESRCH);
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &w), -ENOENT);
	assert_null(w);

	int fds = t_count_fds();
	cbcmn_runtime *rt = t_runtime(1);
	pid_t kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		pause();
		_exit(0);
	}
	assert_int_equal(cbcmn_watch_open(kid, 0, &w), -ENOENT);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &w), 0);
	assert_int_equal(cbcmn_watch_read(w, &s, NULL, 0), 0);
	cbcmn_watch_close(w);
	t_destroy(rt);
	assert_int_equal(t_count_fds(), fds);
}

/* Looking at another user's process takes ptrace-read access. */
static void test_not_permitted(void **state)
{
	(void)state;
	if (geteuid() != 0)
		T_SKIP("needs root to drop to another user (running as uid %d)", (int)geteuid());
	cbcmn_runtime *rt = t_runtime(1);
	pid_t kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
			_exit(2);
		cbcmn_watch *w;
		_exit(cbcmn_watch_open(getppid(), 0, &w) == -EACCES ? 0 : 1);
	}
	int st;
	assert_int_equal(waitpid(kid, &st, 0), kid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_self_matches_snapshot),
		T_WATCHED_TEST(test_other_process),
		T_WATCHED_TEST(test_process_exit),
		T_WATCHED_TEST(test_two_runtimes),
		T_WATCHED_TEST(test_errors),
		T_WATCHED_TEST(test_not_permitted),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
