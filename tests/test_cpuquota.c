/* test_cpuquota: the default number of executors under a cgroup CPU limit
 * (lib/cpuquota.c): recorded /proc and cgroup files of the shapes
 * containers give (v2 with a cgroup namespace, Kubernetes' nested v2
 * limits, v1 Docker without a namespace, hybrid hosts, escaped mount
 * points, broken files), then the live machine: a child process in a
 * cgroup limited to one CPU gets one executor by default. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <limits.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "helpers.h"
#include "cpuquota.h"
#include "runtime.h"

static char tree[PATH_MAX]; /* this test's fixture root */

/* Opens of /proc/self/cgroup while counting: each walk of the cgroup
 * tree reads it first (cpuquota.c, own_cgroup()), once per hierarchy it
 * tries. */
static _Atomic bool counting;
static _Atomic int cgroup_reads;

FILE *fopen(const char *path, const char *mode)
{
	static FILE *(*real)(const char *, const char *);
	if (!real)
		real = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
	size_t n = strlen(path), k = strlen("/proc/self/cgroup");
	if (atomic_load(&counting) && n >= k && !strcmp(path + n - k, "/proc/self/cgroup"))
		atomic_fetch_add(&cgroup_reads, 1);
	return real(path, mode);
}

/* The cgroup files' opens that f's call makes. */
#define CGROUP_READS(call)                            \
	({                                            \
		atomic_store(&cgroup_reads, 0);       \
		atomic_store(&counting, true);        \
		call;                                 \
		atomic_store(&counting, false);       \
		atomic_load(&cgroup_reads);           \
	})

/* Writes text to tree/rel, making its directories. */
static void put(const char *rel, const char *text)
{
	char path[PATH_MAX * 2];
	snprintf(path, sizeof(path), "%s/%s", tree, rel);
	for (char *p = path + strlen(tree) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
		*p = '/';
	}
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
}

static int fresh_tree(void **state)
{
	(void)state;
	snprintf(tree, sizeof(tree), "/tmp/cbcmn-cpuquota-XXXXXX");
	return mkdtemp(tree) ? 0 : -1;
}

static int drop_tree(void **state)
{
	(void)state;
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tree);
	return system(cmd) == 0 ? 0 : -1;
}

#define V2_MOUNT "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"

/* A container with its own cgroup namespace: its cgroup is "/", the mount
 * shows it as the root, and its cpu.max is docker --cpus 1.5. */
static void test_v2_namespace_limit(void **state)
{
	(void)state;
	put("proc/self/cgroup", "0::/\n");
	put("proc/self/mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" V2_MOUNT);
	put("sys/fs/cgroup/cpu.max", "150000 100000\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 1.5);
}

/* Kubernetes: every level of the path may limit, and the lowest wins,
 * wherever it is (here the pod's, between two looser ones). */
static void test_v2_lowest_level_wins(void **state)
{
	(void)state;
	put("proc/self/cgroup", "0::/kubepods/pod1/c1\n");
	put("proc/self/mountinfo", V2_MOUNT);
	put("sys/fs/cgroup/cpu.max", "max 100000\n");
	put("sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
	put("sys/fs/cgroup/kubepods/pod1/cpu.max", "50000 100000\n");
	put("sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "200000 100000\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0.5);
	put("sys/fs/cgroup/kubepods/pod1/cpu.max", "max 100000\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 2.0);
	put("sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0); /* "max" all the way */
}

/* A pod resized in place: the limit files held open (cbcmn__cgq_open(),
 * the monitor's) say the new limit at the next read, with no open, on
 * both hierarchies; a level whose limit appears later counts too. */
static void test_held_files_read_a_resize(void **state)
{
	(void)state;
	put("proc/self/cgroup", "0::/kubepods/pod1/c1\n");
	put("proc/self/mountinfo", V2_MOUNT);
	put("sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
	put("sys/fs/cgroup/kubepods/pod1/cpu.max", "max 100000\n");
	put("sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "100000 100000\n");
	struct cbcmn__cgq q;
	cbcmn__cgq_open(&q, tree);
	assert_true(cbcmn__cgq_read(&q) == 1.0);
	put("sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "250000 100000\n"); /* resized up */
	assert_true(cbcmn__cgq_read(&q) == 2.5);
	put("sys/fs/cgroup/kubepods/pod1/cpu.max", "50000 100000\n"); /* the pod's, later */
	assert_true(cbcmn__cgq_read(&q) == 0.5);
	put("sys/fs/cgroup/kubepods/pod1/cpu.max", "max 100000\n");
	put("sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n");
	assert_true(cbcmn__cgq_read(&q) == 0); /* no limit left */
	cbcmn__cgq_close(&q);
	assert_int_equal(q.n, 0);

	put("proc/self/cgroup", "4:cpu,cpuacct:/a\n");
	put("proc/self/mountinfo", "35 24 0:30 / /cg/cpu rw - cgroup cgroup rw,cpu,cpuacct\n");
	put("cg/cpu/a/cpu.cfs_quota_us", "-1\n");
	put("cg/cpu/a/cpu.cfs_period_us", "100000\n");
	cbcmn__cgq_open(&q, tree);
	assert_true(cbcmn__cgq_read(&q) == 0);
	put("cg/cpu/a/cpu.cfs_quota_us", "150000\n");
	assert_true(cbcmn__cgq_read(&q) == 1.5);
	cbcmn__cgq_close(&q);
}

/* A limit far up a deep path counts, however deep: the held files were
 * capped at 16 levels from the process's cgroup up, and the limit of a
 * level above those (here the top one of 20, nested runtimes of systemd
 * units in containers) was lost, where the walk before them read every
 * level (review of session 18). */
static void test_regression_a_limit_above_16_levels_counts(void **state)
{
	(void)state;
	char cg[PATH_MAX] = "", file[PATH_MAX * 2];
	for (int i = 1; i <= 20; i++) {
		size_t n = strlen(cg);
		snprintf(cg + n, sizeof(cg) - n, "/l%d", i);
		snprintf(file, sizeof(file), "sys/fs/cgroup%s/cpu.max", cg);
		put(file, i == 1 ? "50000 100000\n" : "max 100000\n");
	}
	snprintf(file, sizeof(file), "0::%s\n", cg);
	put("proc/self/cgroup", file);
	put("proc/self/mountinfo", V2_MOUNT);
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0.5);
	struct cbcmn__cgq q;
	cbcmn__cgq_open(&q, tree);
	put("sys/fs/cgroup/l1/cpu.max", "150000 100000\n"); /* resized */
	assert_true(cbcmn__cgq_read(&q) == 1.5);
	cbcmn__cgq_close(&q);
}

/* v1: a resize may change the period with the quota (docker update
 * --cpu-period 50000 --cpu-quota 100000 is 2 CPUs): the period held open
 * too, read with the quota.  It was read once at open, and the held
 * files said 1 CPU (review of session 18). */
static void test_regression_v1_period_changed_by_a_resize_counts(void **state)
{
	(void)state;
	put("proc/self/cgroup", "4:cpu,cpuacct:/a\n");
	put("proc/self/mountinfo", "35 24 0:30 / /cg/cpu rw - cgroup cgroup rw,cpu,cpuacct\n");
	put("cg/cpu/a/cpu.cfs_quota_us", "100000\n");
	put("cg/cpu/a/cpu.cfs_period_us", "100000\n");
	struct cbcmn__cgq q;
	cbcmn__cgq_open(&q, tree);
	assert_true(cbcmn__cgq_read(&q) == 1.0);
	put("cg/cpu/a/cpu.cfs_period_us", "50000\n");
	assert_true(cbcmn__cgq_read(&q) == 2.0);
	put("cg/cpu/a/cpu.cfs_period_us", "garbage\n"); /* unreadable: no limit there */
	assert_true(cbcmn__cgq_read(&q) == 0);
	cbcmn__cgq_close(&q);
}

/* Short of descriptors (RLIMIT_NOFILE), the held files were the levels
 * that could be opened: the limit on the one that could not was lost,
 * and the monitor's first read overwrote the limit found at create with
 * none.  Now nothing is held then (n 0: the create's figure stays), and
 * the create's one-off read opens a level at a time again, as before the
 * files were held.
 * (review of session 18) */
static void test_regression_held_files_short_of_descriptors_hold_none(void **state)
{
	(void)state;
	put("proc/self/cgroup", "0::/a/b\n");
	put("proc/self/mountinfo", V2_MOUNT);
	put("sys/fs/cgroup/a/cpu.max", "50000 100000\n");
	put("sys/fs/cgroup/a/b/cpu.max", "max 100000\n");
	put("sys/fs/cgroup/cpu.max", "max 100000\n");
	struct rlimit was;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
	int next = open("/dev/null", O_RDONLY | O_CLOEXEC); /* the lowest free */
	assert_true(next >= 0);
	close(next);
	struct rlimit tight = {.rlim_cur = (rlim_t)next + 1, .rlim_max = was.rlim_max};
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &tight), 0); /* one level's file */
	struct cbcmn__cgq q;
	cbcmn__cgq_open(&q, tree);
	/* A file at a time, all of them: what create reads (it holds the
	 * files only once the runtime has its descriptors: cbcmn__cgq_hold()). */
	double once = cbcmn__cgroup_cpu_limit(tree);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
	assert_int_equal(q.n, 0); /* 1 before: a/b's alone, read as no limit */
	assert_true(q.short_of);
	assert_true(once == 0.5); /* 0 before: the same held walk */
	cbcmn__cgq_close(&q);
	cbcmn__cgq_open(&q, tree);
	assert_true(cbcmn__cgq_read(&q) == 0.5);
	cbcmn__cgq_close(&q);
}

/* Docker on a v1 host without a cgroup namespace: the process's path is
 * /docker/ID and the bind mount shows that cgroup as its root; the cpu
 * controller shares its hierarchy with cpuacct; the mount point's comma
 * and an escaped space are part of its name. */
static void test_v1_docker_bind_mount(void **state)
{
	(void)state;
	put("proc/self/cgroup", "5:cpuset:/docker/abc\n4:cpu,cpuacct:/docker/abc\n"
				"1:name=systemd:/docker/abc\n0::/system.slice/x\n");
	put("proc/self/mountinfo",
	    "40 31 0:34 /docker/abc /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
	    "41 31 0:35 /docker/abc /sys/fs/cgroup/cpu\\040x,cpuacct rw - cgroup cgroup "
	    "rw,cpu,cpuacct\n");
	put("sys/fs/cgroup/cpuset/cpu.cfs_quota_us", "10000\n"); /* not the cpu hierarchy */
	put("sys/fs/cgroup/cpu x,cpuacct/cpu.cfs_quota_us", "250000\n");
	put("sys/fs/cgroup/cpu x,cpuacct/cpu.cfs_period_us", "100000\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 2.5);
	put("sys/fs/cgroup/cpu x,cpuacct/cpu.cfs_quota_us", "-1\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0);
}

/* v1 with the hierarchy's root mounted: the process's own directory and
 * each ancestor up to the mount point are read, and nothing above it. */
static void test_v1_nested_path(void **state)
{
	(void)state;
	put("proc/self/cgroup", "3:cpu:/a/b\n");
	put("proc/self/mountinfo", "32 31 0:29 / /cg/cpu rw - cgroup cgroup rw,cpu\n");
	put("cg/cpu/a/b/cpu.cfs_quota_us", "-1\n");
	put("cg/cpu/a/cpu.cfs_quota_us", "30000\n");
	put("cg/cpu/a/cpu.cfs_period_us", "100000\n");
	put("cg/cpu.cfs_quota_us", "10000\n"); /* above the mount: never read */
	put("cg/cpu.cfs_period_us", "100000\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0.3);
}

/* A hybrid host: the v1 cpu controller is the one that limits, so v2's
 * files (which cannot have cpu.max then, but a fixture can) are not read. */
static void test_hybrid_prefers_v1_cpu(void **state)
{
	(void)state;
	put("proc/self/cgroup", "2:cpu,cpuacct:/\n0::/user.slice\n");
	put("proc/self/mountinfo", "33 31 0:30 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
				   "34 31 0:31 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
	put("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
	put("sys/fs/cgroup/unified/user.slice/cpu.max", "100000 100000\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0);
	/* No v1 cpu hierarchy: v2's limit counts. */
	put("proc/self/cgroup", "0::/user.slice\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 1.0);
}

/* A cgroup outside what the mount shows (a mount of another container's
 * cgroup, a ".." in the file): the mount's own directory, never above. */
static void test_path_outside_the_mount(void **state)
{
	(void)state;
	put("proc/self/mountinfo", "30 23 0:26 /mine /cg rw - cgroup2 cgroup2 rw\n");
	put("cg/cpu.max", "70000 100000\n");
	put("cg/other/cpu.max", "10000 100000\n");
	put("cpu.max", "10000 100000\n");
	put("proc/self/cgroup", "0::/theirs/other\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0.7);
	put("proc/self/cgroup", "0::/mine/../../x\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0.7);
	put("proc/self/cgroup", "0::/mines\n"); /* a prefix, not a parent */
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0.7);
}

/* The bug: the first mount of the hierarchy was taken, whatever cgroup it
 * shows.  A container that also sees another mount of it (the host's
 * cgroupfs bind-mounted for a monitoring agent, listed first) read that
 * mount's limit, not its own: here none, where its own is half a CPU.
 * The mount that shows the process's cgroup is the one to read. */
static void test_regression_mount_showing_our_cgroup_wins_over_the_first(void **state)
{
	(void)state;
	/* v2, a cgroup namespace: the host's view of the tree is above ours. */
	put("proc/self/cgroup", "0::/\n");
	put("proc/self/mountinfo", "41 30 0:26 /.. /host/cgroup ro - cgroup2 cgroup2 rw\n"
				   "42 30 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
	put("host/cgroup/cpu.max", "max 100000\n");
	put("sys/fs/cgroup/cpu.max", "50000 100000\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0.5);
	/* v1: another container's cgroup mounted first, then ours; the
	 * longest root that holds our path is the closest view of it. */
	put("proc/self/cgroup", "4:cpu,cpuacct:/docker/abc\n");
	put("proc/self/mountinfo",
	    "40 31 0:35 /docker/other /other rw - cgroup cgroup rw,cpu,cpuacct\n"
	    "41 31 0:35 /docker /mid rw - cgroup cgroup rw,cpu,cpuacct\n"
	    "42 31 0:35 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n");
	put("other/cpu.cfs_quota_us", "10000\n");
	put("other/cpu.cfs_period_us", "100000\n");
	put("mid/cpu.cfs_quota_us", "-1\n");
	put("mid/abc/cpu.cfs_quota_us", "-1\n");
	put("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "150000\n");
	put("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 1.5);
}

/* Missing, empty and broken files are no limit, never a crash nor a
 * made-up figure. */
static void test_broken_files_are_no_limit(void **state)
{
	(void)state;
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0); /* nothing at all */
	put("proc/self/cgroup", "garbage without colons\n0:\n::\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0);
	put("proc/self/cgroup", "0::/\n");
	put("proc/self/mountinfo", "short line\n30 23 0:26 / /cg rw cgroup2 no dash\n");
	assert_true(cbcmn__cgroup_cpu_limit(tree) == 0);
	put("proc/self/mountinfo", "30 23 0:26 / /cg rw - cgroup2 cgroup2 rw\n");
	const char *bad[] = {"", "x 100000\n", "100000\n", "100000 0\n", "-5 100000\n",
			     "0 100000\n", "max\n"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		put("cg/cpu.max", bad[i]);
		assert_true(cbcmn__cgroup_cpu_limit(tree) == 0);
	}
}

/* The limit rounded up, at least one, never more than the CPUs. */
static void test_cpus_for_limit(void **state)
{
	(void)state;
	assert_int_equal(cbcmn__cpus_for_limit(2, 0), 2);
	assert_int_equal(cbcmn__cpus_for_limit(64, 0.5), 1);
	assert_int_equal(cbcmn__cpus_for_limit(64, 0.001), 1);
	assert_int_equal(cbcmn__cpus_for_limit(64, 1.0), 1);
	assert_int_equal(cbcmn__cpus_for_limit(64, 1.5), 2);
	assert_int_equal(cbcmn__cpus_for_limit(64, 2.5), 3);
	assert_int_equal(cbcmn__cpus_for_limit(2, 4.0), 2);
	assert_int_equal(cbcmn__cpus_for_limit(1, 1e9), 1);
}

/* ---- the live machine ---------------------------------------------------- */

/* Where this machine lets root make a cgroup with a CPU limit: a v1 cpu
 * hierarchy, or v2 with the cpu controller enabled for children.  Writes
 * the limit file for one CPU; returns false (why says it) if neither. */
static bool make_limited_cgroup(char *dir, size_t len, char *why, size_t wlen)
{
	if (geteuid() != 0) {
		snprintf(why, wlen, "not root: cannot make a cgroup");
		return false;
	}
	const char *v1 = "/sys/fs/cgroup/cpu";
	char f[PATH_MAX + 64];
	snprintf(f, sizeof(f), "%s/cpu.cfs_quota_us", v1);
	bool is_v1 = access(f, W_OK) == 0;
	snprintf(f, sizeof(f), "/sys/fs/cgroup/cgroup.subtree_control");
	FILE *sc = is_v1 ? NULL : fopen(f, "r");
	char ctl[256] = "";
	if (sc) {
		if (!fgets(ctl, sizeof(ctl), sc))
			ctl[0] = '\0';
		fclose(sc);
	}
	if (!is_v1 && !strstr(ctl, "cpu")) {
		snprintf(why, wlen, "no writable v1 cpu hierarchy nor v2 cpu controller here");
		return false;
	}
	snprintf(dir, len, "%s/cbcmn-test-%d", is_v1 ? v1 : "/sys/fs/cgroup", (int)getpid());
	if (mkdir(dir, 0755) && errno != EEXIST) {
		snprintf(why, wlen, "mkdir %s: %s", dir, strerror(errno));
		return false;
	}
	snprintf(f, sizeof(f), "%s/%s", dir, is_v1 ? "cpu.cfs_quota_us" : "cpu.max");
	FILE *q = fopen(f, "w");
	bool ok = q && fputs(is_v1 ? "100000" : "100000 100000", q) >= 0;
	if (q && fclose(q))
		ok = false;
	if (!ok) {
		snprintf(why, wlen, "cannot write %s", f);
		rmdir(dir);
	}
	return ok;
}

/* Our CPU mask in set; a skip when it has one CPU, where a limit of one
 * changes nothing to see. */
static void skip_on_one_cpu(cpu_set_t *set)
{
	assert_int_equal(sched_getaffinity(0, sizeof(*set), set), 0);
	if (CPU_COUNT(set) < 2)
		T_SKIP("one CPU in the mask: a one-CPU limit changes nothing to see");
}

/* A child in a new cgroup limited to one CPU (its path in dir): 0 in the
 * child, its pid in the parent; a skip where no such cgroup can be made.
 * Only the child moves: the other tests keep their CPUs. */
static pid_t fork_limited(char *dir, size_t len)
{
	char why[PATH_MAX + 128];
	if (!make_limited_cgroup(dir, len, why, sizeof(why)))
		T_SKIP("%s", why);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char procs[PATH_MAX + 32];
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
		FILE *p = fopen(procs, "w");
		if (!p || fprintf(p, "%d\n", (int)getpid()) < 0 || fclose(p))
			_exit(10);
	}
	return pid;
}

/* The exit status of fork_limited()'s child, once it has exited and its
 * cgroup (empty then) is gone. */
static int reap_limited(pid_t pid, const char *dir)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(rmdir(dir), 0);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* Runs child in a fork_limited() child on a fresh config (dir: the child's
 * cgroup) and returns what it returned, the child's exit status. */
static int in_limited_child(int (*child)(cbcmn_config *cfg, const char *dir))
{
	char dir[PATH_MAX];
	pid_t pid = fork_limited(dir, sizeof(dir));
	if (pid == 0) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		_exit(child(&cfg, dir));
	}
	return reap_limited(pid, dir);
}

/* In a limited child: the result of fn(arg) run on rt, which it
 * destroys; 15 if it cannot run. */
static int run_then_destroy(cbcmn_runtime *rt, cbcmn_task_fn fn, void *arg)
{
	int64_t res = -1;
	int rc = cbcmn_runtime_run(rt, fn, arg, &res) ? 15 : (int)res;
	cbcmn_runtime_destroy(rt);
	return rc;
}

static int default_workers_child(cbcmn_config *cfg, const char *dir)
{
	(void)dir;
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(cfg, &rt))
		return 11;
	uint32_t auto_n = cbcmn_runtime_workers(rt);
	cbcmn_runtime_destroy(rt);
	cfg->workers = 2;
	if (cbcmn_runtime_create(cfg, &rt))
		return 12;
	uint32_t two = cbcmn_runtime_workers(rt);
	cbcmn_runtime_destroy(rt);
	return auto_n == 1 && two == 2 ? 0 : 20 + (int)auto_n;
}

/* A process in a cgroup limited to one CPU gets one executor by default,
 * and an explicit count still wins; outside it, one per CPU. */
static void test_live_limit_sets_default_workers(void **state)
{
	(void)state;
	cpu_set_t set;
	skip_on_one_cpu(&set);
	assert_int_equal(in_limited_child(default_workers_child), 0);
	cbcmn_runtime *rt = t_runtime(CBCMN_WORKERS_AUTO);
	assert_int_equal(cbcmn_runtime_workers(rt), cbcmn__cpus_for_limit(
							    (uint32_t)CPU_COUNT(&set),
							    cbcmn__cgroup_cpu_limit(NULL)));
	t_destroy(rt);
}

static int clamp_child(cbcmn_config *cfg, const char *dir)
{
	(void)dir;
	cfg->min_workers = 2;
	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(cfg, &rt);
	if (rc)
		return rc == -EINVAL ? 11 : 12;
	uint32_t n = cbcmn_runtime_workers(rt);
	cbcmn_runtime_destroy(rt);
	/* An explicit count still refuses a min_workers above it. */
	cfg->workers = 1;
	if (cbcmn_runtime_create(cfg, &rt) != -EINVAL)
		return 13;
	return n == 1 ? 0 : 20 + (int)n;
}

/* The bug: the executors a limit leaves are fewer than the host's CPUs, and
 * a min_workers that fit the host (2, with CBCMN_WORKERS_AUTO) was then
 * above them: cbcmn_runtime_create() failed with -EINVAL in a container
 * where the same program ran on the host.  With AUTO, min_workers is at
 * most what AUTO gives. */
static void test_regression_auto_workers_under_a_limit_clamp_min_workers(void **state)
{
	(void)state;
	cpu_set_t set;
	skip_on_one_cpu(&set);
	assert_int_equal(in_limited_child(clamp_child), 0); /* 11: -EINVAL from create */
}

/* On executor 1's own thread: a spin of 30 s, the gates kept (the
 * runtime was made with the default spin_ns).  An atomic store, as the
 * searchers load it (sched.c, search_turns()): a plain one raced their
 * reads (TSan). */
static int64_t quota_long_spin(cbcmn_cx *cx, void *arg)
{
	__atomic_store_n(&((struct cbcmn_task *)cx)->rt->cfg.spin_ns, 30ull * 1000000000ull,
			 __ATOMIC_RELAXED);
	atomic_store((_Atomic bool *)arg, true);
	return 0;
}

/* Executors of rt (two) in state st now, or -1.  On a fiber's stack
 * (64 KiB): CBCMN_MAX_EXECUTORS entries were 520 KiB, written far below
 * it (review: the child ended with 255, 4 runs of 40). */
static int quota_in_state(cbcmn_runtime *rt, cbcmn_exec_state st)
{
	cbcmn_executor_stats per[2];
	cbcmn_stats s;
	if (cbcmn_stats_snapshot(rt, &s, per, 2))
		return -1;
	int n = 0;
	for (uint32_t i = 0; i < s.executors && i < 2; i++)
		n += per[i].state == (uint32_t)st;
	return n;
}

/* On executor 0: wakes executor 1 with a task that makes its spin 30 s,
 * then stays busy (yielding, never a stall, never searching: no join)
 * until executor 1 has stopped searching, at most 2 s; 0 if it did. */
static int64_t quota_busy_until_parked(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct cbcmn_runtime *rt = ((struct cbcmn_task *)cx)->rt;
	_Atomic bool set = false;
	cbcmn_nursery *n;
	cbcmn_task *t;
	if (cbcmn_nursery_open((cbcmn_runtime *)rt, cx, &n))
		return 40;
	int64_t r = 30;
	if (cbcmn_nursery_spawn_pinned(cx, n, 1, quota_long_spin, &set, &t))
		r = 41;
	uint64_t end = t_now_ns() + 2000000000ull;
	while (r == 30 && !atomic_load(&set) && t_now_ns() < end)
		cbcmn_yield(cx);
	/* Its task done, executor 1 searches: it spins, or it parks. */
	usleep(1000);
	while (r == 30 && t_now_ns() < end) {
		if (quota_in_state((cbcmn_runtime *)rt, CBCMN_EXEC_SEARCHING) == 0)
			r = 0;
		else
			cbcmn_yield(cx);
	}
	cbcmn_nursery_await_all(cx, n);
	return r;
}

/* Confined to one CPU: the host's gate off, only the quota's left. */
static int quota_gate_child(cbcmn_config *cfg, const char *dir)
{
	(void)dir;
	cpu_set_t one;
	if (sched_getaffinity(0, sizeof(one), &one))
		return 11;
	int cpu = 0;
	while (!CPU_ISSET(cpu, &one))
		cpu++;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	if (sched_setaffinity(0, sizeof(one), &one))
		return 11;
	cfg->workers = cfg->min_workers = 2;
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(cfg, &rt))
		return 12;
	struct cbcmn_runtime *r = (struct cbcmn_runtime *)rt;
	if (r->spin_host_gate || r->spin_awake_max != 1) {
		cbcmn_runtime_destroy(rt);
		return 13;
	}
	return run_then_destroy(rt, t_pinned_main,
				&(struct t_pinned_call){quota_busy_until_parked, NULL, 0});
}

/* In a cgroup limited to one CPU, a runtime of two executors whose one
 * runs work stops the other's default spin: a spinner there burns the
 * quota the busy one needs, and the kernel stops the whole process once
 * a period's quota is spent (sched.c, spin_room()).  The child is
 * confined to one CPU, so the host's gate is off (monitor.c): only the
 * quota can stop the spin.  Before, nothing did: the idle executor spun on
 * (here 30 s) whatever the limit. */
static void test_regression_spin_gate_counts_the_quota(void **state)
{
	(void)state;
	assert_int_equal(in_limited_child(quota_gate_child), 0); /* 30: still searching */
}

/* Writes text to dir/file; false if it cannot. */
static bool cg_write(const char *dir, const char *file, const char *text)
{
	char f[PATH_MAX + 64];
	snprintf(f, sizeof(f), "%s/%s", dir, file);
	FILE *q = fopen(f, "w");
	bool ok = q && fputs(text, q) >= 0;
	if (q && fclose(q))
		ok = false;
	return ok;
}

struct resize {
	const char *dir;
	int rc;
};

/* rt's quota gate once it says want: at most 5 s of the monitor's
 * once-a-second reads, the task yielding meanwhile so that it ticks. */
static bool gate_becomes(cbcmn_cx *cx, uint32_t want)
{
	struct cbcmn_runtime *rt = ((struct cbcmn_task *)cx)->rt;
	uint64_t end = t_now_ns() + 5000000000ull;
	while (atomic_load(&rt->spin_awake_max) != want && t_now_ns() < end) {
		usleep(2000);
		cbcmn_yield(cx);
	}
	return atomic_load(&rt->spin_awake_max) == want;
}

/* In the child: the limit of one CPU at create, two after a resize, none
 * after the next; 0 if the gate followed each. */
static int64_t resize_main(cbcmn_cx *cx, void *arg)
{
	struct resize *r = arg;
	bool v1 = strstr(r->dir, "/cpu/") != NULL;
	if (!gate_becomes(cx, 1))
		return 31;
	if (!cg_write(r->dir, v1 ? "cpu.cfs_quota_us" : "cpu.max", v1 ? "200000" : "200000 100000"))
		return 32;
	if (!gate_becomes(cx, 2))
		return 33;
	if (!cg_write(r->dir, v1 ? "cpu.cfs_quota_us" : "cpu.max", v1 ? "-1" : "max 100000"))
		return 34;
	return gate_becomes(cx, 0) ? 0 : 35;
}

static int resize_child(cbcmn_config *cfg, const char *dir)
{
	cfg->workers = cfg->min_workers = 2;
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(cfg, &rt))
		return 12;
	return run_then_destroy(rt, resize_main, &(struct resize){.dir = dir});
}

/* A pod resized in place: the spin gate of a runtime made under a limit
 * of one CPU follows the limit as it is raised to two, then lifted.  It
 * kept its gate of one (the limit was read once, at create). */
static void test_regression_spin_gate_follows_a_resize(void **state)
{
	(void)state;
	cpu_set_t set;
	skip_on_one_cpu(&set);
	assert_int_equal(in_limited_child(resize_child), 0); /* 33: the gate stayed at one */
}

/* A runtime's create with the default spin and the stall monitor walks
 * the cgroup tree once: it opens the limit's files, reads the limit from
 * them and hands them to the monitor (runtime.c).  It walked twice (a
 * one-off read, then the monitor's open), and CBCMN_WORKERS_AUTO once
 * more, resolving the config: its walk is now the one.  A config refused
 * after that walk keeps none of its files. */
static void test_regression_create_walks_the_cgroup_tree_once(void **state)
{
	(void)state;
	int one = CGROUP_READS(cbcmn__cgroup_cpu_limit(NULL));
	assert_true(one > 0);
	static const uint32_t workers[] = {2, CBCMN_WORKERS_AUTO};
	for (size_t k = 0; k < 4; k++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = workers[k % 2];
		cfg.spin_ns = k < 2 ? 0 : 1000; /* a chosen spin holds nothing */
		cbcmn_runtime *rt = NULL;
		int rc = 0;
		int walks = CGROUP_READS(rc = cbcmn_runtime_create(&cfg, &rt));
		assert_int_equal(rc, 0);
		struct cbcmn_runtime *r = (struct cbcmn_runtime *)rt;
		if (k < 2) {
			assert_true(r->spin_quota_gate && r->watched);
			/* The limit read at create is what the held files say. */
			assert_true(atomic_load(&r->cg_limit) == cbcmn__cgq_read(&r->cgq) ||
				    r->cgq.short_of);
		} else {
			assert_int_equal(r->cgq.n, 0);
		}
		assert_int_equal(cbcmn_runtime_destroy(rt), 0);
		if (walks != one)
			fail_msg("config %zu: %d cgroup walks, want 1", k, walks / one);
	}
	int before = t_count_fds();
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.victim = (cbcmn_victim_policy)99; /* refused after AUTO's walk */
	cbcmn_runtime *rt = NULL;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), -EINVAL);
	assert_int_equal(t_count_fds(), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_regression_create_walks_the_cgroup_tree_once),
		cmocka_unit_test_setup_teardown(test_v2_namespace_limit, fresh_tree, drop_tree),
		cmocka_unit_test_setup_teardown(test_v2_lowest_level_wins, fresh_tree, drop_tree),
		cmocka_unit_test_setup_teardown(test_v1_docker_bind_mount, fresh_tree, drop_tree),
		cmocka_unit_test_setup_teardown(test_v1_nested_path, fresh_tree, drop_tree),
		cmocka_unit_test_setup_teardown(test_hybrid_prefers_v1_cpu, fresh_tree, drop_tree),
		cmocka_unit_test_setup_teardown(test_path_outside_the_mount, fresh_tree, drop_tree),
		cmocka_unit_test_setup_teardown(test_regression_mount_showing_our_cgroup_wins_over_the_first,
						fresh_tree, drop_tree),
		cmocka_unit_test_setup_teardown(test_broken_files_are_no_limit, fresh_tree,
						drop_tree),
		cmocka_unit_test_setup_teardown(test_held_files_read_a_resize, fresh_tree, drop_tree),
		cmocka_unit_test_setup_teardown(test_regression_a_limit_above_16_levels_counts,
						fresh_tree, drop_tree),
		cmocka_unit_test_setup_teardown(test_regression_v1_period_changed_by_a_resize_counts,
						fresh_tree, drop_tree),
		cmocka_unit_test_setup_teardown(test_regression_held_files_short_of_descriptors_hold_none,
						fresh_tree, drop_tree),
		cmocka_unit_test(test_cpus_for_limit),
		cmocka_unit_test(test_live_limit_sets_default_workers),
		cmocka_unit_test(test_regression_auto_workers_under_a_limit_clamp_min_workers),
		cmocka_unit_test(test_regression_spin_gate_counts_the_quota),
		cmocka_unit_test(test_regression_spin_gate_follows_a_resize),
	};
	return cmocka_run_group_tests_name("cpuquota", tests, NULL, NULL);
}
