/* test_sched_spin: at most about half the CPUs' worth of idle executors
 * spin looking for work, the rest park at once (issue 15), and nothing is
 * lost for it: work that comes while no one spins runs, timers of an
 * oversubscribed runtime fire, none early. */
#include "helpers.h"

#include "../lib/cpuquota.h"
#include "../lib/monitor.h"
#include "../lib/runtime.h"

#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#define SPIN_TEST(f) T_WATCHED_TEST(f)

static cbcmn_runtime *mk_rt(uint32_t workers, uint64_t spin_ns)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cfg.spin_ns = spin_ns;
	return t_runtime_cfg(&cfg);
}

/* Executors in state st now. */
static uint32_t in_state(cbcmn_runtime *rt, cbcmn_exec_state st)
{
	cbcmn_executor_stats per[CBCMN_MAX_EXECUTORS];
	cbcmn_stats s;
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, per, CBCMN_MAX_EXECUTORS), 0);
	uint32_t n = 0;
	for (uint32_t i = 0; i < s.executors; i++)
		n += per[i].state == (uint32_t)st;
	return n;
}

/* Wait (at most bound_ns) until at most max executors are in state st;
 * the last count seen. */
static uint32_t wait_state_at_most(cbcmn_runtime *rt, cbcmn_exec_state st, uint32_t max,
				   uint64_t bound_ns)
{
	uint64_t end = t_now_ns() + bound_ns;
	uint32_t n;
	while ((n = in_state(rt, st)) > max && t_now_ns() < end)
		usleep(1000);
	return n;
}

static void test_spin_max_is_half_the_usable_cpus(void **state)
{
	(void)state;
	assert_int_equal(cbcmn__spin_max(64, 2, 0), 1);   /* this machine, 64 executors */
	assert_int_equal(cbcmn__spin_max(2, 2, 0), 1);
	assert_int_equal(cbcmn__spin_max(1, 8, 0), 1);    /* never none */
	assert_int_equal(cbcmn__spin_max(64, 64, 0), 32);
	assert_int_equal(cbcmn__spin_max(64, 64, 4.0), 2); /* a 4-CPU cgroup limit */
	assert_int_equal(cbcmn__spin_max(64, 64, 0.4), 1);
	assert_int_equal(cbcmn__spin_max(6, 16, 0), 3);   /* no more than the executors */
}

/* Before: every executor that found nothing spun for cfg.spin_ns, here
 * 30 s: 8 threads burning 2 CPUs, 64 of them (issue 15) starving the ones
 * with work.  Now all but spin_max park after one look. */
static void test_regression_idle_executors_beyond_half_the_cpus_park_at_once(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(8, 30ull * 1000000000ull);
	/* Half the CPUs of the mask, at least one: a cgroup limit makes the
	 * runtime's own figure (rt->spin_max) lower, never higher. */
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	uint32_t max = (uint32_t)CPU_COUNT(&set) / 2 ? (uint32_t)CPU_COUNT(&set) / 2 : 1;
	uint32_t n = wait_state_at_most(rt, CBCMN_EXEC_SEARCHING, max, T_STALL_NS / 4);
	if (n > max)
		fail_msg("%u of 8 idle executors still searching (spinning), at most %u may", n, max);
	t_destroy(rt);
}

struct burst {
	_Atomic uint64_t ran;
};

static int64_t leaf(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	atomic_fetch_add(&((struct burst *)arg)->ran, 1);
	return 0;
}

/* k tasks fn(arg) in a nursery of their own, awaited. */
static int64_t spawn_await(cbcmn_cx *cx, int k, cbcmn_task_fn fn, void *arg)
{
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	for (int i = 0; i < k && !rc; i++)
		rc = cbcmn_nursery_spawn(cx, n, fn, arg, NULL);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : r;
}

/* 4 children, each spawning 16 leaves: spawns from inside tasks, on
 * whichever executors the notifications woke. */
static int64_t fan(cbcmn_cx *cx, void *arg)
{
	return spawn_await(cx, 16, leaf, arg);
}

static int64_t burst_root(cbcmn_cx *cx, void *arg)
{
	return spawn_await(cx, 4, fan, arg);
}

/* Work that comes from outside while every executor is parked (no one
 * spins to find it) wakes one and runs, every round, all of it. */
static void test_work_submitted_while_no_executor_spins_runs(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(8, 0);
	struct burst b = {0};
	int rounds = T_SCALE(20);
	for (int i = 0; i < rounds; i++) {
		/* Let them all park (not asserted: a loaded machine may keep
		 * one from getting there). */
		wait_state_at_most(rt, CBCMN_EXEC_SEARCHING, 0, 200000000ull);
		int64_t r = -1;
		assert_int_equal(cbcmn_runtime_run(rt, burst_root, &b, &r), 0);
		assert_int_equal(r, 0);
	}
	assert_int_equal(atomic_load(&b.ran), (uint64_t)rounds * 4 * 16);
	t_destroy(rt);
}

/* The same bursts back to back on 16 executors whose spins end after
 * 2 us: executors keep parking and being woken, under the cap, while
 * spawns come from tasks on every one of them; every leaf runs. */
static void test_bursts_with_short_spins_lose_nothing(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(16, 2000);
	struct burst b = {0};
	int rounds = T_SCALE(200);
	for (int i = 0; i < rounds; i++) {
		int64_t r = -1;
		assert_int_equal(cbcmn_runtime_run(rt, burst_root, &b, &r), 0);
		assert_int_equal(r, 0);
	}
	assert_int_equal(atomic_load(&b.ran), (uint64_t)rounds * 4 * 16);
	assert_true(atomic_load(&rt->num_spinning) <= rt->spin_max);
	t_destroy(rt);
}

/* ---- timers on 64 executors ------------------------------------------------ */

#define OV_EXECS 64
#define OV_SLEEPERS 8
#define OV_SLEEPS 10
#define OV_SLEEP_NS 2000000ull

struct over {
	_Atomic bool stop;
	_Atomic uint32_t woke, early;
};

static int64_t over_hog(cbcmn_cx *cx, void *arg)
{
	struct over *o = arg;
	while (!atomic_load(&o->stop)) {
		uint64_t end = t_now_ns() + 500000;
		while (t_now_ns() < end)
			;
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t over_sleeper(cbcmn_cx *cx, void *arg)
{
	struct over *o = arg;
	for (int i = 0; i < OV_SLEEPS; i++) {
		uint64_t t0 = t_now_ns();
		int rc = cbcmn_sleep(cx, OV_SLEEP_NS);
		if (rc)
			return rc;
		if (t_now_ns() - t0 < OV_SLEEP_NS)
			atomic_fetch_add(&o->early, 1);
		atomic_fetch_add(&o->woke, 1);
	}
	return 0;
}

static int64_t over_sleepers(cbcmn_cx *cx, void *arg)
{
	int64_t r = spawn_await(cx, OV_SLEEPERS, over_sleeper, arg);
	atomic_store(&((struct over *)arg)->stop, true);
	return r;
}

static int64_t over_root(cbcmn_cx *cx, void *arg)
{
	struct over *o = arg;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	for (int i = 0; i < 4 && !rc; i++)
		rc = cbcmn_nursery_spawn(cx, n, over_hog, o, NULL);
	if (!rc)
		rc = cbcmn_nursery_spawn(cx, n, over_sleepers, o, NULL);
	if (rc)
		atomic_store(&o->stop, true);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : r;
}

/* 64 executors on this machine's CPUs, 4 tasks computing, 8 sleeping in
 * turns: every sleep ends (the watchdog bounds the test), none early. */
static void test_timers_fire_on_an_oversubscribed_runtime(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(OV_EXECS, 0);
	struct over o = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, over_root, &o, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&o.woke), OV_SLEEPERS * OV_SLEEPS);
	assert_int_equal(atomic_load(&o.early), 0);
	assert_true(atomic_load(&rt->num_spinning) <= rt->spin_max);
	t_destroy(rt);
}

/* ---- the bound counts the executors' CPUs, and sees them change ---------
 * spin_max came from the creating thread's affinity, once: executors
 * pinned to fewer CPUs than the creator may use (cfg.cpus), or moved
 * later (taskset, a cgroup quota changed), kept the creator's figure (on
 * 64 CPUs, 32 spinners for executors pinned to 4).  On a 2-CPU machine
 * half of 1 or 2 CPUs is one spinner either way: the test checks the CPU
 * count the bound is computed from (rt->spin_cpus).  Before the fix: 2
 * here in both cases (the creator's mask), never read again.  (No stall
 * monitor: the spare, test_regression_spin_bound_leaves_the_spare_out.) */
static int64_t on_exec0(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(cbcmn_cx_executor(cx) == 0);
	return 0;
}

static int64_t on_exec1(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(cbcmn_cx_executor(cx) == 1);
	return 0;
}

static int64_t start_exec1(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, on_exec1, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* The first two CPUs of set in c; the test is skipped with fewer. */
static void first_two_cpus(const cpu_set_t *set, int c[2])
{
	int k = 0;
	for (int i = 0; i < CPU_SETSIZE && k < 2; i++)
		if (CPU_ISSET(i, set))
			c[k++] = i;
	if (k < 2)
		T_SKIP("one CPU in this thread's mask");
}

static struct cbcmn_runtime *pinned_rt(uint32_t workers, uint32_t min, const int *cpus)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cfg.min_workers = min;
	cfg.policy = CBCMN_POLICY_CPUS;
	cfg.cpus = cpus;
	cfg.ncpus = workers;
	cfg.stall_ns = CBCMN_STALL_OFF;
	return (struct cbcmn_runtime *)t_runtime_cfg(&cfg);
}

static void test_regression_spin_bound_counts_the_executors_cpus(void **state)
{
	(void)state;
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	int c[2];
	first_two_cpus(&set, c);
	/* One executor on one CPU: one, whatever the creator's mask says. */
	struct cbcmn_runtime *r = pinned_rt(1, 1, c);
	assert_int_equal(atomic_load(&r->spin_cpus), 1);
	t_destroy((cbcmn_runtime *)r);

	/* Two CPUs planned, under the cgroup's limit; then executor 0 is
	 * moved to the second (as taskset -p would), and executor 1, pinned
	 * there, starts: the count is read again, one CPU. */
	r = pinned_rt(2, 1, c);
	assert_int_equal(atomic_load(&r->spin_cpus),
			 cbcmn__cpus_for_limit(2, cbcmn__cgroup_cpu_limit(NULL)));
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	int32_t tid;
	while (!(tid = atomic_load(&r->exec[0]->ss->tid)) && t_now_ns() < deadline)
		usleep(1000);
	assert_int_not_equal(tid, 0);
	CPU_ZERO(&set);
	CPU_SET(c[1], &set);
	assert_int_equal(sched_setaffinity(tid, sizeof(set), &set), 0);
	t_run((cbcmn_runtime *)r, start_exec1, NULL, 0);
	assert_int_equal(atomic_load(&r->spin_cpus), 1);
	t_destroy((cbcmn_runtime *)r);
}

/* ---- the spare does not count ---------------------------------------------
 * A static runtime watched by the stall monitor (the default) keeps a
 * spare executor, unpinned: before its thread starts it counted the
 * creating thread's whole mask, so executors pinned to 4 CPUs of 64 were
 * allowed 32 spinners again, as before the bound counted the executors'
 * CPUs.  The spare stands in for a stalled executor and adds no CPU of
 * its own to the bound.  Before the fix: 2 here (the mask), not 1. */
static void test_regression_spin_bound_leaves_the_spare_out(void **state)
{
	(void)state;
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	int c = -1;
	for (int i = 0; i < CPU_SETSIZE && c < 0; i++)
		if (CPU_ISSET(i, &set))
			c = i;
	if (CPU_COUNT(&set) < 2)
		T_SKIP("one CPU in this thread's mask");
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = cfg.min_workers = 1;
	cfg.policy = CBCMN_POLICY_CPUS;
	cfg.cpus = &c;
	cfg.ncpus = 1;
	struct cbcmn_runtime *r = (struct cbcmn_runtime *)t_runtime_cfg(&cfg);
	assert_true(r->spare);
	assert_int_equal(atomic_load(&r->spin_cpus), 1);
	/* And on the monitor's tick (once a second), the spare's thread
	 * started or not. */
	t_run((cbcmn_runtime *)r, on_exec0, NULL, 0);
	usleep(1200000);
	t_run((cbcmn_runtime *)r, on_exec0, NULL, 0);
	assert_int_equal(atomic_load(&r->spin_cpus), 1);
	t_destroy((cbcmn_runtime *)r);
}

/* ---- the default spin steps aside on a busy host ------------------------------- */

static void test_loadavg_runnable_is_parsed(void **state)
{
	(void)state;
	assert_int_equal(cbcmn__loadavg_runnable("0.52 0.58 0.59 3/741 12345\n"), 3);
	assert_int_equal(cbcmn__loadavg_runnable("12.00 9.10 6.20 17/230 99"), 17);
	assert_int_equal(cbcmn__loadavg_runnable("0.52 0.58 0.59 x/741 1"), -1);
	assert_int_equal(cbcmn__loadavg_runnable("0.52 0.58 0.59 3"), -1);
	assert_int_equal(cbcmn__loadavg_runnable("0.52 0.58"), -1);
	assert_int_equal(cbcmn__loadavg_runnable(""), -1);
}

/* The host's average is over time, not over readings: the monitor reads
 * only while tasks run, so a runtime woken once a second by a request
 * read once a burst, and the eight readings of a busy moment long past
 * (the old average, an eighth a reading) kept the spin off for the next
 * dozen bursts on a host long quiet.  A reading after a quiet second
 * stands alone; readings 10 ms apart still weigh an eighth each. */
static void test_regression_host_load_forgets_a_busy_moment(void **state)
{
	(void)state;
	double avg = 0;
	for (int i = 0; i < 16; i++)
		avg = cbcmn__host_run_avg(avg, 9, 10000000ull);
	assert_true(avg > 7.5); /* 9 less 9 (7/8)^16 */
	avg = cbcmn__host_run_avg(avg, 1, 1000000000ull);
	assert_true(avg > 0.99 && avg < 1.01);
	avg = cbcmn__host_run_avg(0, 8, 10000000ull);
	assert_true(avg > 0.99 && avg < 1.01);
}

/* The gate closes above enter and opens again only at leave or below:
 * a count hovering between the two does not flap. */
static void test_spin_gate_has_hysteresis(void **state)
{
	(void)state;
	assert_false(cbcmn__spin_gate_next(false, 2.5, 2.5, 2.0));
	assert_true(cbcmn__spin_gate_next(false, 2.6, 2.5, 2.0));
	assert_true(cbcmn__spin_gate_next(true, 2.1, 2.5, 2.0));
	assert_false(cbcmn__spin_gate_next(true, 2.0, 2.5, 2.0));
	assert_false(cbcmn__spin_gate_next(false, 2.3, 2.5, 2.0));
}

/* The bug: the host's count included the runtime's own spinners, the
 * load the gate takes away.  On 2 CPUs, a reading of 4 runnable (the
 * monitor, one spinner of ours, one busy executor, one other thread)
 * counted 3 and closed the gate, though without the spinner the host
 * had a CPU free for it; the closed gate then read 2 and opened it
 * again.  Now the spinner is left out: 2, open. */
static void test_regression_gate_leaves_our_spinners_out(void **state)
{
	(void)state;
	double others = cbcmn__host_others(4, 1);
	assert_true(others > 1.99 && others < 2.01);
	assert_false(cbcmn__spin_gate_next(false, others, 2.5, 2.0));
	assert_true(cbcmn__host_others(1, 3) == 0); /* read a moment apart */
	assert_true(cbcmn__host_others(6, 0) > 4.99);
}

/* Under a cgroup CPU limit, the awake executors at which one may still
 * spin: the limit rounded up (as the default executor count), no more
 * than the executors' CPUs, at least one; none without a limit (sched.c,
 * spin_room()). */
static void test_spin_awake_max_is_the_limits_cpus(void **state)
{
	(void)state;
	assert_int_equal(cbcmn__spin_awake_max(64, 0), 0);
	assert_int_equal(cbcmn__spin_awake_max(64, 1.0), 1);
	assert_int_equal(cbcmn__spin_awake_max(64, 1.8), 2);
	assert_int_equal(cbcmn__spin_awake_max(64, 4.0), 4);
	assert_int_equal(cbcmn__spin_awake_max(64, 0.5), 1);
	assert_int_equal(cbcmn__spin_awake_max(2, 8.0), 2);
}

struct busy {
	_Atomic bool stop;
};

static void *busy_loop(void *arg)
{
	struct busy *b = arg;
	while (!atomic_load_explicit(&b->stop, memory_order_relaxed))
		;
	return NULL;
}

/* On the one executor's own thread (no race with its searches): a spin
 * of 30 s, the gate kept (the runtime was made with the default). */
static int64_t long_spin(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	((struct cbcmn_task *)cx)->rt->cfg.spin_ns = 30ull * 1000000000ull;
	return 0;
}

/* May this process run on every online CPU?  Else (taskset, a cpuset)
 * the gate is off (runtime.c, runs_on_every_cpu()). */
static bool mask_is_the_hosts(void)
{
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	return CPU_COUNT(&set) >= sysconf(_SC_NPROCESSORS_ONLN);
}

/* With more runnable threads than CPUs on the host, the default spin
 * stops (monitor.c, host_load()): an idle executor that would spin 30 s
 * parks as soon as the monitor has counted the hogs.  Before, it spun
 * whatever the host's load, taking a CPU the other threads wanted. */
static void test_default_spin_stops_on_a_busy_host(void **state)
{
	(void)state;
	if (!mask_is_the_hosts())
		T_SKIP("confined to some CPUs: no spin gate");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int nhogs = (int)(cpus > 0 ? cpus : 1) + 3;
	if (nhogs > 64)
		nhogs = 64;
	cbcmn_runtime *rt = mk_rt(1, 0);
	struct cbcmn_runtime *r = (struct cbcmn_runtime *)rt;
	assert_int_equal(t_run_pinned(rt, 0, long_spin, NULL), 0);
	struct busy b = {.stop = false};
	pthread_t hog[64];
	for (int i = 0; i < nhogs; i++)
		assert_int_equal(pthread_create(&hog[i], NULL, busy_loop, &b), 0);
	uint64_t end = t_now_ns() + T_STALL_NS / 2;
	while (!atomic_load(&r->host_busy) && t_now_ns() < end)
		usleep(10000);
	bool busy = atomic_load(&r->host_busy);
	uint32_t searching = wait_state_at_most(rt, CBCMN_EXEC_SEARCHING, 0, T_STALL_NS / 4);
	atomic_store(&b.stop, true);
	for (int i = 0; i < nhogs; i++)
		pthread_join(hog[i], NULL);
	t_destroy(rt);
	assert_true(busy); /* the monitor counted the hogs */
	assert_int_equal(searching, 0);
}

struct pinned_busy {
	struct busy *b;
	int cpu;
};

static void *busy_pinned(void *arg)
{
	const struct pinned_busy *p = arg;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(p->cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		return NULL;
	return busy_loop(p->b);
}

/* Does a runtime with the default spin and one executor on CPU c[0]
 * (under a mask of that CPU, or placed there by cfg.cpus) stop spinning
 * while three hogs pinned to CPU c[1] keep the host busy?  Its executor
 * was made to spin 30 s; the answer is read after ample time for the
 * monitor's average (80 ms) to pass CPUs + 0.5. */
static bool gated_by_other_cpus(const int c[2], bool by_mask)
{
	cpu_set_t set, one;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	CPU_ZERO(&one);
	CPU_SET(c[0], &one);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = cfg.min_workers = 1;
	if (by_mask) {
		assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	} else {
		cfg.policy = CBCMN_POLICY_CPUS;
		cfg.cpus = c;
		cfg.ncpus = 1;
	}
	cbcmn_runtime *rt = t_runtime_cfg(&cfg); /* its threads inherit the mask */
	assert_int_equal(sched_setaffinity(0, sizeof(set), &set), 0);
	struct cbcmn_runtime *r = (struct cbcmn_runtime *)rt;
	assert_int_equal(t_run_pinned(rt, 0, long_spin, NULL), 0);
	struct busy b = {.stop = false};
	struct pinned_busy pb = {&b, c[1]};
	pthread_t hog[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&hog[i], NULL, busy_pinned, &pb), 0);
	uint64_t end = t_now_ns() + 500000000ull;
	while (!atomic_load(&r->host_busy) && t_now_ns() < end)
		usleep(10000);
	bool busy = atomic_load(&r->host_busy);
	uint32_t searching = in_state(rt, CBCMN_EXEC_SEARCHING);
	atomic_store(&b.stop, true);
	for (int i = 0; i < 3; i++)
		pthread_join(hog[i], NULL);
	t_destroy(rt);
	return busy || searching != 1;
}

/* The host's count says whether the host's CPUs are wanted, not those of
 * a runtime confined to some of them (a server on CPUs set apart from a
 * busy host's other work): nothing else can take its executor's CPU, so
 * its default spin goes on, whether an affinity (taskset, a cpuset) or
 * cfg.cpus put it there.  Before the fix the monitor counted the hogs on
 * the other CPU against the host's CPUs and stopped the spin. */
static void test_regression_spin_gate_ignores_other_cpus(void **state)
{
	(void)state;
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	int c[2];
	first_two_cpus(&set, c);
	assert_false(gated_by_other_cpus(c, true));
	assert_false(gated_by_other_cpus(c, false));
}

/* A spin_ns the program chose is kept whatever the host's load: the gate
 * is never set (the monitor does not read the load). */
static void test_chosen_spin_ignores_the_host(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(1, 50000);
	assert_false(((struct cbcmn_runtime *)rt)->spin_host_gate);
	t_destroy(rt);
	rt = mk_rt(1, 0);
	assert_int_equal(((struct cbcmn_runtime *)rt)->spin_host_gate, mask_is_the_hosts());
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spin_max_is_half_the_usable_cpus),
		SPIN_TEST(test_regression_idle_executors_beyond_half_the_cpus_park_at_once),
		SPIN_TEST(test_work_submitted_while_no_executor_spins_runs),
		SPIN_TEST(test_bursts_with_short_spins_lose_nothing),
		SPIN_TEST(test_timers_fire_on_an_oversubscribed_runtime),
		SPIN_TEST(test_regression_spin_bound_counts_the_executors_cpus),
		SPIN_TEST(test_regression_spin_bound_leaves_the_spare_out),
		cmocka_unit_test(test_loadavg_runnable_is_parsed),
		cmocka_unit_test(test_regression_host_load_forgets_a_busy_moment),
		cmocka_unit_test(test_spin_gate_has_hysteresis),
		cmocka_unit_test(test_regression_gate_leaves_our_spinners_out),
		cmocka_unit_test(test_spin_awake_max_is_the_limits_cpus),
		SPIN_TEST(test_default_spin_stops_on_a_busy_host),
		cmocka_unit_test(test_chosen_spin_ignores_the_host),
		SPIN_TEST(test_regression_spin_gate_ignores_other_cpus),
	};
	return cmocka_run_group_tests_name("sched_spin", tests, NULL, NULL);
}
