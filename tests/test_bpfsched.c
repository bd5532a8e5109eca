/* test_bpfsched: the run-queue and migration figures of the eBPF view
 * (bpf/cbcmn.bpf.c, account_sched_counts) equal the kernel's own per
 * thread counts in /proc, and no program of ours runs at a wakeup or a
 * migration of the host's tasks (docs/OBSERVABILITY.md, "Cost on the
 * host").  The runtime runs in this process, as in test_bpf.  Needs root
 * (CAP_BPF, CAP_PERFMON and, for the USDT probes, CAP_SYS_ADMIN) and a
 * kernel with BTF: otherwise a skip. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "helpers.h"
#include "bpf/bpfmon.h"
#include "workloads/fib.h"
#include "bpf_roles.h"

static struct bpfmon *mon;
static char why[256];

static bool attached(const char *name)
{
	const struct bpfmon_prog *p;
	unsigned n = bpfmon_progs(mon, &p);
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(p[i].name, name))
			return p[i].state == BPFMON_ATTACHED;
	return false;
}

static int setup(void **state)
{
	(void)state;
	if (bpfmon_open(&mon, getpid(), 0, why, sizeof(why))) {
		mon = NULL;
		return 0; /* each test skips with why */
	}
	if (!attached("cbcmn_exec_start") ||
	    !(attached("cbcmn_sched_switch") || attached("cbcmn_sched_switch_raw"))) {
		snprintf(why, sizeof(why), "cbcmn:exec_start or sched_switch did not attach");
		bpfmon_close(mon);
		mon = NULL;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	bpfmon_close(mon);
	return 0;
}

/* Thread tid's run-queue wait in ns and the waits (/proc's schedstat:
 * on-CPU ns, run_delay ns, pcount), and its migrations (/proc's sched,
 * se.nr_migrations). */
struct kcounts {
	unsigned long long run_delay, pcount, migrations;
};

static struct kcounts kcounts_of(pid_t tid)
{
	char p[96], line[256];
	struct kcounts k = {0, 0, 0};
	snprintf(p, sizeof(p), "/proc/self/task/%d/schedstat", (int)tid);
	FILE *f = fopen(p, "r");
	assert_non_null(f);
	assert_int_equal(fscanf(f, "%*u %llu %llu", &k.run_delay, &k.pcount), 2);
	fclose(f);
	snprintf(p, sizeof(p), "/proc/self/task/%d/sched", (int)tid);
	assert_non_null(f = fopen(p, "r"));
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "se.nr_migrations : %llu", &k.migrations) == 1;
	fclose(f);
	assert_true(found);
	return k;
}

/* Both executors' kernel counts and shards, once the runtime is quiet
 * (both parked: each one's last switch was a switch-out, which saw every
 * wait before it), the kernel's read before and after ours and the same:
 * a parked executor woken meanwhile (a timer) is read again. */
static void snap(cbcmn_runtime *rt, struct kcounts k[2], struct bpfmon_shard *b)
{
	cbcmn_executor_stats per[2], prev[2];
	quiet_stats(rt, per, prev, 2);
	for (int tries = 0;; tries++) {
		usleep(20000); /* switched out */
		struct kcounts again[2];
		for (int e = 0; e < 2; e++)
			k[e] = kcounts_of(per[e].tid);
		assert_true(bpfmon_read(mon, b, 2) >= 2);
		for (int e = 0; e < 2; e++)
			again[e] = kcounts_of(per[e].tid);
		if (!memcmp(k, again, sizeof(again)))
			return;
		if (tries == 50)
			fail_msg("the executors never stayed parked for a read");
	}
}

static struct bpfmon_shard *shards(void)
{
	struct bpfmon_shard *b = calloc(2, sizeof(*b));
	assert_non_null(b);
	return b;
}

static cbcmn_runtime *two_parking_executors(void)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.spin_ns = CBCMN_SPIN_NONE; /* park at once: every round wakes one */
	return t_runtime_cfg(&cfg);
}

/* Run-queue waits (count, sum, histogram) over a ping-pong: what the
 * kernel counted for each executor thread, exactly (a switch missed by
 * the tracepoint moves a wait to the next switch seen, never loses it). */
static void test_runq_waits_are_the_kernels(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	cbcmn_runtime *rt = two_parking_executors();
	pingpong(rt, 50); /* the executors started: exec_start gave each its base */
	struct kcounts k0[2], k1[2];
	struct bpfmon_shard *b0 = shards(), *b1 = shards();
	snap(rt, k0, b0);
	pingpong(rt, T_SCALE(2000));
	snap(rt, k1, b1);
	for (int e = 0; e < 2; e++) {
		unsigned long long kn = k1[e].pcount - k0[e].pcount, kd = k1[e].run_delay - k0[e].run_delay;
		unsigned long long bn = b1[e].c.runq_waits - b0[e].c.runq_waits,
				   bd = b1[e].c.runq_ns - b0[e].c.runq_ns;
		unsigned long long hn = bpfmon_hist_count(b1[e].hist[CBCMN_BPF_HIST_RUNQ]) -
					bpfmon_hist_count(b0[e].hist[CBCMN_BPF_HIST_RUNQ]);
		printf("executor %d: run queue %llu waits %.3f ms (kernel: %llu, %.3f ms), histogram %llu\n", e,
		       bn, bd / 1e6, kn, kd / 1e6, hn);
		assert_true(kn >= 1); /* woken by the other side each round */
		assert_int_equal(bn, kn);
		assert_int_equal(bd, kd);
		assert_int_equal(hn, bn);
	}
	free(b0);
	free(b1);
	t_destroy(rt);
}

/* The CPU to move thread tid to: one of ours it is not on now. */
static int other_cpu(pid_t tid)
{
	char p[64], buf[1024];
	snprintf(p, sizeof(p), "/proc/self/task/%d/stat", (int)tid);
	FILE *f = fopen(p, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	const char *at = strrchr(buf, ')');
	int cpu = -1;
	for (int field = 3; at && field <= 39; field++) {
		at = strchr(at + 1, ' ');
		if (at && field == 39)
			cpu = atoi(at + 1);
	}
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (c != cpu && CPU_ISSET(c, &set))
			return c;
	return -1;
}

/* Migrations: each executor thread moved to another CPU (its affinity
 * set from here) and back, a ping-pong after each move; what the kernel
 * counted (se.nr_migrations) is what the view says, exactly. */
static void test_migrations_are_the_kernels(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	cpu_set_t mine;
	assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
	if (CPU_COUNT(&mine) < 2)
		T_SKIP("one CPU: nowhere to migrate to");
	cbcmn_runtime *rt = two_parking_executors();
	pingpong(rt, 50);
	cbcmn_executor_stats per[2];
	cbcmn_stats st;
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 2), 0);
	cpu_set_t was[2];
	for (int e = 0; e < 2; e++)
		assert_int_equal(sched_getaffinity(per[e].tid, sizeof(was[e]), &was[e]), 0);
	struct kcounts k0[2], k1[2];
	struct bpfmon_shard *b0 = shards(), *b1 = shards();
	snap(rt, k0, b0);
	for (int round = 0; round < 2; round++) {
		for (int e = 0; e < 2; e++) {
			cpu_set_t to;
			CPU_ZERO(&to);
			int c = other_cpu(per[e].tid);
			assert_true(c >= 0);
			CPU_SET(c, &to);
			assert_int_equal(sched_setaffinity(per[e].tid, sizeof(to), &to), 0);
		}
		pingpong(rt, 50);
	}
	for (int e = 0; e < 2; e++)
		assert_int_equal(sched_setaffinity(per[e].tid, sizeof(was[e]), &was[e]), 0);
	pingpong(rt, 50);
	snap(rt, k1, b1);
	for (int e = 0; e < 2; e++) {
		unsigned long long km = k1[e].migrations - k0[e].migrations,
				   bm = b1[e].c.migrations - b0[e].c.migrations;
		printf("executor %d: %llu migrations (kernel: %llu)\n", e, bm, km);
		assert_true(km >= 2); /* moved twice at least */
		assert_int_equal(bm, km);
	}
	free(b0);
	free(b1);
	t_destroy(rt);
}

/* Every context switch, wakeup and migration of every task of the host
 * paid for a program of ours on sched_wakeup, sched_wakeup_new and
 * sched_migrate_task (run-queue waits timed from the wakeup, migrations
 * counted one by one) though nearly none is ours.  Now sched_switch
 * (and sched_process_exit, once a task) is all the scheduler runs. */
static void test_no_program_on_wakeup_or_migration(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	const struct bpfmon_prog *p;
	unsigned n = bpfmon_progs(mon, &p);
	for (unsigned i = 0; i < n; i++) {
		bool hot = strstr(p[i].target, "sched_wakeup") || strstr(p[i].target, "sched_migrate_task");
		if (hot)
			fail_msg("%s: %s is on the host's scheduling path", p[i].name, p[i].target);
	}
}

int main(void)
{
	if (find_self())
		return 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_program_on_wakeup_or_migration),
		cmocka_unit_test(test_runq_waits_are_the_kernels),
		cmocka_unit_test(test_migrations_are_the_kernels),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
