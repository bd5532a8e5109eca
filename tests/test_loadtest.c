/* test_loadtest: the loopback load tools (cbcmn-loadtest, cbcmn-bench echo)
 * where users run them: under the limits a login gets (soft RLIMIT_NOFILE
 * 1024, no CAP_SYS_RESOURCE to raise the hard one), and inside a CPU mask
 * (taskset, a container's cpuset).  The release binaries next to this
 * test (build/bin, or build/../bin from build/asan/tests) run as
 * children. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <limits.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <linux/capability.h>

#include "helpers.h"

static char bin[PATH_MAX], bench[PATH_MAX];

static int find_bin(void **state)
{
	(void)state;
	char self[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 0;
	self[n] = 0;
	*strrchr(self, '/') = 0;
	static const char *const rel[] = {"/../bin/", "/../../bin/"};
	bin[0] = bench[0] = 0;
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]) && !bin[0]; i++) {
		snprintf(bin, sizeof(bin), "%s%scbcmn-loadtest", self, rel[i]);
		snprintf(bench, sizeof(bench), "%s%scbcmn-bench", self, rel[i]);
		if (access(bin, X_OK) != 0)
			bin[0] = bench[0] = 0;
	}
	return 0;
}

/* Regression: cbcmn-loadtest's 10 000-connection check failed for a user
 * ("Connection timed out: 4789 of 10000 connects unfinished after 10 s",
 * "verify-echo ok 0"): when the hard limit cannot hold both ends in one
 * process it puts the server in a child, which kept the soft limit of
 * 1024 and could accept no more.  The child now raises its own.  Here with
 * 3000 connections, a hard limit of 4000 (too low for one process: 2 x
 * 3000 + 1024) and CAP_SYS_RESOURCE out of the bounding set (as root it
 * would raise the hard limit and stay in one process). */
static void test_regression_verify_server_child_raises_its_limit(void **state)
{
	(void)state;
	if (!bin[0])
		T_SKIP("no cbcmn-loadtest next to this test: make build/bin/cbcmn-loadtest");
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max < 4000)
		T_SKIP("the hard RLIMIT_NOFILE (%llu) is below the 4000 this check needs",
		       (unsigned long long)rl.rlim_max);
	int po[2];
	assert_int_equal(pipe2(po, O_CLOEXEC), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(po[1], 1);
		dup2(po[1], 2);
		struct rlimit lim = {.rlim_cur = 1024, .rlim_max = 4000};
		if (setrlimit(RLIMIT_NOFILE, &lim))
			_exit(126);
		/* Root keeps CAP_SYS_RESOURCE across exec unless the bounding
		 * set lacks it; a user has none to drop (EPERM, fine). */
		prctl(PR_CAPBSET_DROP, CAP_SYS_RESOURCE, 0, 0, 0);
		execl(bin, bin, "--duration", "0.1", "--conns", "4", "--no-http", "--iters", "0",
		      "--verify-conns", "3000", "-v", (char *)NULL);
		_exit(127);
	}
	close(po[1]);
	char out[8192];
	size_t n = 0;
	ssize_t k;
	while (n + 1 < sizeof(out) && (k = read(po[0], out + n, sizeof(out) - 1 - n)) > 0)
		n += (size_t)k;
	out[n] = 0;
	close(po[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	printf("%s", out);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) != 0 || !strstr(out, "verify-echo ok 1\n"))
		fail_msg("exit %d", WEXITSTATUS(st));
	/* The case this pins: the server was in a child. */
	assert_non_null(strstr(out, "server in a child process"));
}

/* Every thread of process pid allowed on `want` only ("Cpus_allowed_list"
 * of /proc/pid/task/N/status); if not, the first other list into bad. */
static void threads_within(pid_t pid, const char *want, char *bad, size_t blen)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return; /* gone meanwhile */
	struct dirent *de;
	while ((de = readdir(d)) && !bad[0]) {
		if (de->d_name[0] == '.')
			continue;
		char sp[PATH_MAX], line[256];
		snprintf(sp, sizeof(sp), "%s/%s/status", path, de->d_name);
		FILE *f = fopen(sp, "re");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "Cpus_allowed_list:", 18)) {
				char *v = line + 18 + strspn(line + 18, " \t");
				v[strcspn(v, "\n")] = 0;
				if (strcmp(v, want))
					snprintf(bad, blen, "thread %.20s on CPUs %.60s", de->d_name, v);
			}
		fclose(f);
	}
	closedir(d);
}

/* argv under an affinity mask of `cpu` alone, its threads watched while
 * it runs: none may be pinned elsewhere.  Exit status 0 wanted. */
static void run_in_mask(char *const argv[], int cpu)
{
	int ex[2];
	assert_int_equal(pipe2(ex, O_CLOEXEC), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int nul = open("/dev/null", O_WRONLY);
		dup2(nul, 1);
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		if (sched_setaffinity(0, sizeof(one), &one) == 0)
			execv(argv[0], argv);
		(void)!write(ex[1], "x", 1);
		_exit(127);
	}
	/* Watched only once it runs the tool: before its exec, this copy of
	 * the test is on every CPU. */
	close(ex[1]);
	char x;
	ssize_t got;
	while ((got = read(ex[0], &x, 1)) < 0 && errno == EINTR)
		;
	close(ex[0]);
	assert_int_equal(got, 0);
	char want[16], bad[128] = "";
	snprintf(want, sizeof(want), "%d", cpu);
	int st;
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (!bad[0])
			threads_within(pid, want, bad, sizeof(bad));
		if (t_now_ns() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fail_msg("%s did not end in %u s", argv[0], T_STALL_S);
		}
		usleep(5000);
	}
	printf("%s in CPU %d: exit %d%s%s\n", argv[0], cpu, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
	       bad[0] ? ", " : "", bad);
	if (bad[0])
		fail_msg("%s in a mask of CPU %d: %s", argv[0], cpu, bad);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Regression: the loopback benchmarks pinned their server to CPU 0 and the
 * client to CPU 1 whatever the affinity mask: `taskset -c 1 cbcmn-bench
 * echo` ran its server on CPU 0, and on a one-CPU machine (or cpuset) the
 * pin to CPU 1 fails.  They now take the first and second CPU of the
 * mask.  Here the mask is the last CPU alone, and no thread of theirs may
 * be pinned anywhere else while they run. */
static void test_regression_loopback_benches_stay_in_the_cpu_mask(void **state)
{
	(void)state;
	if (!bin[0])
		T_SKIP("no cbcmn-loadtest next to this test: make build/bin/cbcmn-loadtest");
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	int last = -1;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			last = c;
	if (CPU_COUNT(&set) < 2 || last < 1)
		T_SKIP("one CPU: a mask of one CPU is no narrower than the machine");
	run_in_mask((char *[]){bin, "--duration", "0.5", "--no-http", "--iters", "0",
			       "--verify-conns", "0", NULL},
		    last);
	if (access(bench, X_OK) == 0)
		run_in_mask((char *[]){bench, "echo", "--duration", "0.5", NULL}, last);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_regression_verify_server_child_raises_its_limit),
		T_WATCHED_TEST(test_regression_loopback_benches_stay_in_the_cpu_mask),
	};
	return cmocka_run_group_tests(tests, find_bin, NULL);
}
