/* test_bpf: the eBPF programs (bpf/cbcmn.bpf.c, loaded by tools/bpf/bpfmon)
 * see what the runtime counts.  The runtime runs in this process, statically
 * linked with libcbcmn.a, so its probes are in /proc/self/exe.  Needs root
 * (or CAP_BPF + CAP_PERFMON) and a kernel with BTF: otherwise a skip. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <math.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "helpers.h"
#include "bpf/bpfmon.h"
#include "workloads/fib.h"
#include "bpf_roles.h"
#include "bpf_open.h"

static struct bpfmon *mon;
static char why[256];

static int setup(void **state)
{
	(void)state;
	/* BPFMON_FUTEX_TP: the futex tests also run where fentry cannot.
	 * The probes the checks rest on must have attached. */
	static const char *const needed[] = {"cbcmn_steal", "cbcmn_doorbell", "cbcmn_exec_start"};
	mon = t_bpfmon_self(BPFMON_FUTEX_TP, needed, 3, why, sizeof(why));
	return 0; /* without it, each test skips with why */
}

static int teardown(void **state)
{
	(void)state;
	bpfmon_close(mon);
	return 0;
}

/* ---- workloads ------------------------------------------------------------- */

/* Wait until the runtime's counters stop moving (every executor parked):
 * then each probe has fired next to the counter it goes with. */
static void quiesce(cbcmn_runtime *rt, cbcmn_executor_stats *per, uint32_t n)
{
	cbcmn_stats st;
	cbcmn_executor_stats prev[8];
	assert_true(n <= 8);
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, prev, n), 0);
	for (uint64_t until = t_now_ns() + T_STALL_NS; t_now_ns() < until;) {
		usleep(20000);
		assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, n), 0);
		if (!memcmp(prev, per, n * sizeof(*per)))
			return;
		memcpy(prev, per, n * sizeof(*per));
	}
	fail_msg("the runtime never went quiet");
}

/* Many tasks on both executors hammering one channel of capacity 1: both
 * threads keep taking the channel's mutex (docs/LOCKING.md, rank 50). */
struct hammer {
	cbcmn_chan *c;
	long ops;
};

static int64_t hammer_side(cbcmn_cx *cx, void *arg)
{
	struct hammer *h = ((void **)arg)[0];
	int send = (int)(intptr_t)((void **)arg)[1];
	long v = 0;
	for (long i = 0; i < h->ops; i++) {
		int rc = send ? cbcmn_chan_send(cx, h->c, &v) : cbcmn_chan_recv(cx, h->c, &v);
		if (rc)
			return rc;
	}
	return 0;
}

#define HAMMER_TASKS 16

static int64_t hammer_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	static void *args[HAMMER_TASKS][2];
	for (int i = 0; i < HAMMER_TASKS; i++) {
		args[i][0] = arg;
		args[i][1] = (void *)(intptr_t)(i / 2 % 2); /* a sender and a receiver on each */
		if ((rc = cbcmn_nursery_spawn_pinned(cx, n, (uint32_t)(i % 2), hammer_side, args[i], NULL)))
			break;
	}
	int rc2 = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : rc2;
}

static struct bpfmon_shard *read_of(struct bpfmon *m)
{
	struct bpfmon_shard *b = calloc(CBCMN_BPF_NSLOTS, sizeof(*b));
	assert_non_null(b);
	assert_true(bpfmon_read(m, b, CBCMN_BPF_NSLOTS) >= 0);
	return b;
}

static struct bpfmon_shard *read_all(void)
{
	return read_of(mon);
}

static bool attached(const char *name)
{
	const struct bpfmon_prog *p;
	unsigned n = bpfmon_progs(mon, &p);
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(p[i].name, name))
			return p[i].state == BPFMON_ATTACHED;
	return false;
}

/* ---- tests ----------------------------------------------------------------- */

/* No program is rejected by the verifier (CO-RE relocations included):
 * that is our code's fault, where a missing tracepoint or probe, or a
 * kernel that refuses a program type (fentry here: EPERM at load), is the
 * machine's.  A rejected cbcmn:doorbell once made every test here skip
 * as "did not attach". */
static void test_no_program_refused(void **state)
{
	(void)state;
	struct bpfmon *m;
	char err[256];
	int rc = bpfmon_open(&m, getpid(), BPFMON_FUTEX_TP, err, sizeof(err));
	if (rc)
		T_SKIP("%s", err);
	const struct bpfmon_prog *p;
	unsigned n = bpfmon_progs(m, &p), attached = 0;
	char bad[1024] = "";
	static const char *const states[] = {"attached", "missing", "failed", "off"};
	for (unsigned i = 0; i < n; i++) {
		/* What became of each on this kernel (docs/OBSERVABILITY.md,
		 * "Kernel matrix", is made of these lines). */
		printf("program %-28s %-44s %-8s %s\n", p[i].name, p[i].target,
		       p[i].state <= BPFMON_OFF ? states[p[i].state] : "?", p[i].reason);
		attached += p[i].state == BPFMON_ATTACHED;
		if (p[i].state == BPFMON_FAILED && strstr(p[i].reason, "verifier") &&
		    strlen(bad) + strlen(p[i].reason) + 64 < sizeof(bad))
			snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), "%s%s: %s",
				 bad[0] ? "; " : "", p[i].target, p[i].reason);
	}
	bpfmon_close(m);
	if (bad[0])
		fail_msg("rejected: %s", bad);
	assert_true(attached > 0);
}

/* One executor's share of test_oncpu_counted_at_switches: 25 rounds of
 * 4 ms of CPU then a 2 ms sleep (the executor parks: a switch out and,
 * at the timer, in), then its thread's CPU time so far. */
struct burn {
	uint64_t cpu_ns;
	pid_t tid;
};

static int64_t burn_task(cbcmn_cx *cx, void *arg)
{
	struct burn *b = arg;
	for (int i = 0; i < 25; i++) {
		uint64_t until = t_clock_ns(CLOCK_THREAD_CPUTIME_ID) + 4000000;
		while (t_clock_ns(CLOCK_THREAD_CPUTIME_ID) < until)
			;
		int rc = cbcmn_sleep(cx, 2000000);
		if (rc)
			return rc;
	}
	b->cpu_ns = t_clock_ns(CLOCK_THREAD_CPUTIME_ID);
	b->tid = gettid();
	return 0;
}

/* A thread's context switches so far (voluntary + involuntary), -1 if it
 * is gone. */
static long ctxt_switches(pid_t tid)
{
	char path[64], line[128];
	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long n = 0, v;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
		    sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
			n += v;
	fclose(f);
	return n;
}

static int64_t burn_main(cbcmn_cx *cx, void *arg)
{
	struct burn *b = arg;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	for (uint32_t e = 0; e < 2 && !rc; e++)
		rc = cbcmn_nursery_spawn_pinned(cx, n, e, burn_task, &b[e], NULL);
	int rc2 = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : rc2;
}

/* The on-CPU time counted at the switches alone (c.oncpu_ns, without the
 * reader's time since the last one) is the executor thread's CPU time,
 * even when sched_switch misses every third switch of each thread
 * (CBCMN_BPF_MISS_SWITCHES=3: in or out, whatever their order), as this kernel does
 * with some (docs/OBSERVABILITY.md, "On- and off-CPU time"); and on + off
 * never exceed the time the threads lived.  Summing stretches between the
 * switches seen counted each thread's whole life at every switch-out. */
static void test_oncpu_counted_at_switches(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	if (!attached("cbcmn_sched_switch") && !attached("cbcmn_sched_switch_raw"))
		T_SKIP("no sched_switch program attached");
	setenv("CBCMN_BPF_MISS_SWITCHES", "3", 1);
	struct bpfmon *m;
	char err[256];
	int rc = bpfmon_open(&m, getpid(), BPFMON_NO_FUTEX | BPFMON_NO_IO_URING, err, sizeof(err));
	unsetenv("CBCMN_BPF_MISS_SWITCHES");
	if (rc)
		fail_msg("bpfmon_open: %s", err);
	uint64_t t0 = t_now_ns();
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.spin_ns = CBCMN_SPIN_NONE; /* park at once: every sleep switches */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct burn b[2] = {{0}, {0}};
	int64_t r;
	assert_int_equal(cbcmn_runtime_run(rt, burn_main, b, &r), 0);
	assert_int_equal(r, 0);
	assert_true(t_wait_parked(rt));
	usleep(20000); /* and switched out */
	struct bpfmon_shard *k = calloc(CBCMN_BPF_NSLOTS, sizeof(*k));
	assert_non_null(k);
	assert_true(bpfmon_read(m, k, CBCMN_BPF_NSLOTS) >= 2);
	uint64_t lived = t_now_ns() - t0;
	long ctxt[2] = {ctxt_switches(b[0].tid), ctxt_switches(b[1].tid)};
	t_destroy(rt);
	bpfmon_close(m);
	for (int e = 0; e < 2; e++) {
		const struct cbcmn_bpf_shard *c = &k[e].c;
		printf("executor %d: thread CPU %.1f ms, on %.1f ms off %.1f ms at its switches (%llu out, %llu in of %ld)\n",
		       e, b[e].cpu_ns / 1e6, c->oncpu_ns / 1e6, c->offcpu_ns / 1e6,
		       (unsigned long long)c->switches, (unsigned long long)c->runq_waits, ctxt[e]);
		/* Its thread ran a little before exec_start and after its last
		 * counted switch (up to one round): 10 % and 10 ms either way. */
		double want = (double)b[e].cpu_ns, got = (double)c->oncpu_ns;
		if (!(fabs(got - want) <= want * 0.1 + 10e6))
			fail_msg("executor %d: %.1f ms on a CPU at its switches, its thread ran %.1f ms", e,
				 got / 1e6, want / 1e6);
		assert_true(b[e].cpu_ns >= 90000000); /* 25 x 4 ms */
		assert_true(c->offcpu_ns > 0);
		assert_true(c->oncpu_ns + c->offcpu_ns <= lived);
		/* And switches were missed: a context switch (/proc counts
		 * them once) is one out and one in, and every third of those
		 * was ignored, outs as often as ins (runq_waits is the
		 * kernel's own count, whatever was missed). */
		assert_true(ctxt[e] >= 25); /* a sleep parks */
		if ((double)c->switches > 0.85 * (double)ctxt[e] + 3)
			fail_msg("executor %d: %llu switches out counted of %ld: none missed", e,
				 (unsigned long long)c->switches, ctxt[e]);
	}
	free(k);
}

/* BPF's steal and doorbell counts equal the runtime's own, per executor,
 * exactly; the pinned executors never migrate. */
static void test_counts_match_runtime(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.spin_ns = CBCMN_SPIN_NONE; /* park at once: doorbells ring */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);

	struct fib f = {.n = T_ASAN || T_TSAN ? 20 : 25};
	int64_t r;
	cbcmn_stats st0;
	cbcmn_executor_stats pe[2];
	/* Until something was stolen: on a busy host one executor can run a
	 * small fork-join alone, many times over. */
	for (uint64_t until = t_now_ns() + T_STALL_NS; t_now_ns() < until;) {
		assert_int_equal(cbcmn_runtime_run(rt, fib_task, &f, &r), 0);
		assert_int_equal(r, 0);
		assert_int_equal(f.out, fib_seq(f.n));
		assert_int_equal(cbcmn_stats_snapshot(rt, &st0, pe, 2), 0);
		if (pe[0].steal_successes + pe[1].steal_successes)
			break;
	}

	struct pp p = {.rounds = T_SCALE(2000)};
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(long), &p.ab), 0);
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(long), &p.ba), 0);
	assert_int_equal(cbcmn_runtime_run(rt, pp_main, &p, &r), 0);
	assert_int_equal(r, 0);

	cbcmn_executor_stats per[2];
	cbcmn_stats st;
	quiesce(rt, per, 2);
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
	struct bpfmon_shard *b = calloc(CBCMN_BPF_NSLOTS, sizeof(*b));
	assert_non_null(b);
	int seen = bpfmon_read(mon, b, CBCMN_BPF_NSLOTS);
	assert_true(seen >= 2);

	for (int i = 0; i < 2; i++) {
		const struct cbcmn_bpf_shard *c = &b[i].c;
		printf("executor %d: steals %llu/%llu tasks %llu/%llu doorbells %llu+%llu/%llu "
		       "coalesced %llu/%llu xmsgs %llu/%llu migrations %llu invol %llu "
		       "on %.1f ms off %.1f ms sqes %llu (msg_ring %llu) cqes %llu waits %llu\n",
		       i, (unsigned long long)c->steals, (unsigned long long)per[i].steal_successes,
		       (unsigned long long)c->tasks_stolen, (unsigned long long)per[i].tasks_stolen,
		       (unsigned long long)c->doorbells_msg_ring, (unsigned long long)c->doorbells_eventfd,
		       (unsigned long long)per[i].doorbells_sent,
		       (unsigned long long)c->doorbells_coalesced,
		       (unsigned long long)per[i].doorbells_coalesced,
		       (unsigned long long)c->xmsgs_sent, (unsigned long long)per[i].xmsgs_sent,
		       (unsigned long long)c->migrations, (unsigned long long)c->involuntary,
		       c->oncpu_ns / 1e6, c->offcpu_ns / 1e6, (unsigned long long)c->sqes,
		       (unsigned long long)c->msg_ring_sqes, (unsigned long long)c->cqes,
		       (unsigned long long)c->cqring_waits);
		assert_int_equal(c->steals, per[i].steal_successes);
		assert_int_equal(c->tasks_stolen, per[i].tasks_stolen);
		assert_int_equal(c->doorbells_msg_ring + c->doorbells_eventfd, per[i].doorbells_sent);
		assert_int_equal(c->doorbells_coalesced, per[i].doorbells_coalesced);
		assert_int_equal(c->xmsgs_sent, per[i].xmsgs_sent);
		/* The kernel's view of the same doorbells: MSG_RING SQEs at
		 * io_uring_submit_req, attributed through the tid -> shard map. */
		assert_int_equal(c->msg_ring_sqes, per[i].ring_msgs_submitted);
		if (per[i].cpu >= 0)
			assert_int_equal(c->migrations, 0);
		/* Doorbell latency, by target: one sample per switch-in that
		 * followed a doorbell to a parked target, so at most the
		 * doorbells rung at it; the histogram holds the samples. */
		const uint64_t *dh = b[i].hist[CBCMN_BPF_HIST_DOORBELL];
		const uint64_t *rq = b[i].hist[CBCMN_BPF_HIST_RUNQ];
		printf("executor %d: doorbell latency %llu samples (p50 <%llu us, p99 <%llu us), "
		       "%llu found it running, %llu pending, of %llu rung; run queue %llu waits "
		       "(p50 <%llu us, p99 <%llu us); futex %llu waits %.3f ms\n",
		       i, (unsigned long long)c->doorbell_lat, (unsigned long long)bpfmon_hist_pct(dh, 50),
		       (unsigned long long)bpfmon_hist_pct(dh, 99), (unsigned long long)c->doorbells_running,
		       (unsigned long long)c->doorbells_pending, (unsigned long long)c->doorbells_recv,
		       (unsigned long long)c->runq_waits, (unsigned long long)bpfmon_hist_pct(rq, 50),
		       (unsigned long long)bpfmon_hist_pct(rq, 99), (unsigned long long)c->futex_waits,
		       c->futex_wait_ns / 1e6);
		assert_int_equal(bpfmon_hist_count(dh), c->doorbell_lat);
		/* Steal latency, by thief: one sample per steal, from the
		 * steal probe's search-time argument. */
		const uint64_t *sh = b[i].hist[CBCMN_BPF_HIST_STEAL];
		printf("executor %d: steal latency %llu samples, mean %.1f us (p50 <%llu us, p99 <%llu us)\n",
		       i, (unsigned long long)c->steal_lat,
		       c->steal_lat ? c->steal_lat_ns / 1e3 / c->steal_lat : 0.0,
		       (unsigned long long)bpfmon_hist_pct(sh, 50), (unsigned long long)bpfmon_hist_pct(sh, 99));
		assert_int_equal(c->steal_lat, c->steals);
		assert_int_equal(bpfmon_hist_count(sh), c->steal_lat);
		if (c->steals)
			assert_true(c->steal_lat_ns > 0);
		assert_true(c->doorbell_lat + c->doorbells_running + c->doorbells_pending <= c->doorbells_recv);
		if (attached("cbcmn_sched_switch") || attached("cbcmn_sched_switch_raw")) {
			/* The ping-pong parks each side on every round. */
			assert_true(c->doorbell_lat >= 1);
			/* A busy executor is woken (by doorbells) and waits
			 * in the run queue each time, if only briefly. */
			assert_true(c->runq_waits >= 1);
			assert_int_equal(bpfmon_hist_count(rq), c->runq_waits);
		}
	}
	/* The workloads did what they are for. */
	assert_true(per[0].steal_successes + per[1].steal_successes > 0);
	assert_true(per[0].doorbells_sent + per[1].doorbells_sent > 0);
	assert_int_equal(b[CBCMN_BPF_OUTSIDE].c.doorbells_msg_ring + b[CBCMN_BPF_OUTSIDE].c.doorbells_eventfd,
			 st.ext_doorbells);

	free(b);
	cbcmn_chan_destroy(p.ab);
	cbcmn_chan_destroy(p.ba);
	cbcmn_runtime_destroy(rt);
}

/* Reads of a descriptor that is not open: each is one SQE and one CQE
 * whose res is -EBADF. */
#define BAD_READS 20
static int64_t bad_reads_task(cbcmn_cx *cx, void *arg)
{
	char buf[8];
	for (int i = 0; i < BAD_READS; i++) {
		int64_t rc = cbcmn_read(cx, -1, buf, sizeof(buf));
		if (rc != -EBADF)
			return rc < 0 ? rc : -EPROTO;
	}
	return 0;
}

/* The io_uring tracepoints changed shape across kernels: io_uring_submit_sqe
 * before 6.5 (_submit_req since), io_uring_complete's res an argument of
 * its own up to 6.12 (a struct io_uring_cqe * since 6.13).  Whatever this
 * kernel's, one form of each program loads, and it counts: SQEs, CQEs
 * and CQE errors of a ring the runtime's executor drives.  On 6.1 nothing
 * was counted (no _submit_req: no ring learned); on 6.1-6.12 the tp_btf
 * program read res through user_data and never counted an error. */
/* Monitor m has one form of each io_uring program attached (a classic
 * tracepoint for each if tp_only), and it counts BAD_READS SQEs, CQEs and
 * CQE errors of a runtime's ring.  Skips where no form attached. */
static void io_counts_check(struct bpfmon *m, bool tp_only)
{
	const char *runs[] = {"cbcmn_io_submit", "cbcmn_io_complete", "cbcmn_io_cqring_wait",
			      "cbcmn_io_async_work", "cbcmn_io_cqe_overflow"};
	const struct bpfmon_prog *p;
	unsigned n = bpfmon_progs(m, &p);
	for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
		unsigned on = 0;
		for (unsigned i = 0; i < n; i++)
			if (!strncmp(p[i].name, runs[r], strlen(runs[r])) && p[i].state == BPFMON_ATTACHED) {
				printf("%s: %s (%s)\n", runs[r], p[i].name, p[i].target);
				if (tp_only)
					assert_non_null(strstr(p[i].target, "tracepoint "));
				on++;
			}
		/* Two forms of one counter would count twice. */
		assert_true(on <= 1);
		if (r < 2 && !on)
			T_SKIP("no form of %s attached on this kernel", runs[r]);
	}
	struct bpfmon_shard *b0 = read_of(m);
	cbcmn_runtime *rt = t_runtime(1);
	int64_t r;
	assert_int_equal(cbcmn_runtime_run(rt, bad_reads_task, NULL, &r), 0);
	assert_int_equal(r, 0);
	cbcmn_executor_stats per[1];
	quiesce(rt, per, 1);
	struct bpfmon_shard *b1 = read_of(m);
	t_destroy(rt);
	const struct cbcmn_bpf_shard *a = &b0[0].c, *z = &b1[0].c;
	printf("executor 0: sqes +%llu cqes +%llu cqe_errors +%llu\n", (unsigned long long)(z->sqes - a->sqes),
	       (unsigned long long)(z->cqes - a->cqes), (unsigned long long)(z->cqe_errors - a->cqe_errors));
	uint64_t sqes = z->sqes - a->sqes, cqes = z->cqes - a->cqes, errs = z->cqe_errors - a->cqe_errors;
	free(b0);
	free(b1);
	assert_true(sqes >= BAD_READS);
	assert_true(cqes >= BAD_READS);
	assert_true(errs >= BAD_READS);
	/* No more errors than completions. */
	assert_true(errs <= cqes);
}

static void test_cqe_errors_counted_whatever_the_tracepoint_form(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	io_counts_check(mon, false);
}

/* The classic tracepoints, where tp_btf is refused (every tp_btf form
 * rejected by CBCMN_BPF_REJECT), count the same: their records are read by
 * field name, relocated against this kernel's trace_event_raw_* types. */
static void test_io_uring_tracepoint_fallbacks_count_too(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	setenv("CBCMN_BPF_REJECT",
	       "cbcmn_io_submit_btf,cbcmn_io_submit_sqe_btf,cbcmn_io_complete_btf,cbcmn_io_complete_btf_res,"
	       "cbcmn_io_cqring_wait_btf,cbcmn_io_async_work_btf,cbcmn_io_cqe_overflow_btf", 1);
	struct bpfmon *tm;
	char err[256];
	int rc = bpfmon_open(&tm, getpid(), BPFMON_NO_FUTEX, err, sizeof(err));
	unsetenv("CBCMN_BPF_REJECT");
	assert_int_equal(rc, 0);
	io_counts_check(tm, true);
	bpfmon_close(tm);
}

/* A workload that forces contention shows it: the channel's mutex is
 * contended (cbcmn:lock_contended) or an executor waits in futex(2). */
static void test_contention_shows(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct bpfmon_shard *before = read_all(), *after = NULL;
	uint64_t cont = 0, lock_ns = 0, fwaits = 0, fns = 0, lock_hist = 0;
	struct hammer h = {.ops = T_SCALE(20000)};
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(long), &h.c), 0);
	/* Until it shows: on a busy host the two executors may seldom run at
	 * the same time. */
	for (uint64_t until = t_now_ns() + T_STALL_NS; t_now_ns() < until && !cont && !fwaits;) {
		int64_t r;
		assert_int_equal(cbcmn_runtime_run(rt, hammer_main, &h, &r), 0);
		assert_int_equal(r, 0);
		free(after);
		after = read_all();
		cont = lock_ns = fwaits = fns = lock_hist = 0;
		for (int i = 0; i < 2; i++) {
			cont += after[i].c.lock_contended - before[i].c.lock_contended;
			lock_ns += after[i].c.lock_wait_ns - before[i].c.lock_wait_ns;
			fwaits += after[i].c.futex_waits - before[i].c.futex_waits;
			fns += after[i].c.futex_wait_ns - before[i].c.futex_wait_ns;
			lock_hist += bpfmon_hist_count(after[i].lock_hist) - bpfmon_hist_count(before[i].lock_hist);
		}
	}
	printf("contention: lock_contended %llu (%.3f ms, histogram %llu), futex waits %llu (%.3f ms)\n",
	       (unsigned long long)cont, lock_ns / 1e6, (unsigned long long)lock_hist,
	       (unsigned long long)fwaits, fns / 1e6);
	assert_true(cont + fwaits > 0);
	/* The runtime's own probe is exposed with its histogram. */
	assert_int_equal(lock_hist, cont);
	free(before);
	free(after);
	cbcmn_chan_destroy(h.c);
	cbcmn_runtime_destroy(rt);
}

/* Without contention (one executor, fork-join), the executor thread never
 * waits in futex(2). */
static void test_no_contention_no_futex(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	if (!(attached("cbcmn_futex_wait_entry") && attached("cbcmn_futex_wait_exit")) &&
	    !(attached("cbcmn_futex_enter") && attached("cbcmn_futex_exit")))
		T_SKIP("neither fentry/fexit futex_wait nor the syscalls:sys_{enter,exit}_futex tracepoints attached");
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct bpfmon_shard *before = read_all();
	struct fib f = {.n = T_ASAN || T_TSAN ? 18 : 22};
	int64_t r;
	assert_int_equal(cbcmn_runtime_run(rt, fib_task, &f, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(f.out, fib_seq(f.n));
	struct bpfmon_shard *after = read_all();
	printf("fork-join on 1 executor: futex waits %llu (%.3f ms), lock_contended %llu\n",
	       (unsigned long long)(after[0].c.futex_waits - before[0].c.futex_waits),
	       (after[0].c.futex_wait_ns - before[0].c.futex_wait_ns) / 1e6,
	       (unsigned long long)(after[0].c.lock_contended - before[0].c.lock_contended));
	assert_true(after[0].c.tid != 0);
	assert_int_equal(after[0].c.futex_waits, before[0].c.futex_waits);
	assert_int_equal(after[0].c.futex_wait_ns, before[0].c.futex_wait_ns);
	free(before);
	free(after);
	cbcmn_runtime_destroy(rt);
}

/* ---- executors that started before the attach ------------------------------ */

/* A monitor opened after the runtime started finds its executors by thread
 * name and reports their thread and pinned CPU, as exec_start would have. */
static void test_attach_after_start_reports_tid_cpu(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	cbcmn_runtime *rt = t_runtime(2);
	cbcmn_executor_stats per[2];
	cbcmn_stats st;
	/* Both executor threads exist (tid != 0) before we look. */
	for (uint64_t until = t_now_ns() + T_STALL_NS; t_now_ns() < until;) {
		assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 2), 0);
		if (per[0].tid && per[1].tid)
			break;
		usleep(2000);
	}
	struct bpfmon *late;
	char err[256];
	assert_int_equal(bpfmon_open(&late, getpid(), BPFMON_NO_IO_URING | BPFMON_NO_FUTEX, err, sizeof(err)), 0);
	struct bpfmon_shard *b = calloc(CBCMN_BPF_NSLOTS, sizeof(*b));
	assert_non_null(b);
	assert_true(bpfmon_read(late, b, CBCMN_BPF_NSLOTS) >= 2);
	for (int i = 0; i < 2; i++) {
		printf("executor %d: tid %u cpu %d (runtime: tid %d cpu %d)\n", i, b[i].c.tid, b[i].c.cpu,
		       per[i].tid, per[i].cpu);
		assert_int_equal(b[i].c.tid, per[i].tid);
		assert_int_equal(b[i].c.cpu, per[i].cpu);
	}
	free(b);
	bpfmon_close(late);
	t_destroy(rt);
}

/* ---- pinning; stale doorbell state across runtimes -------------------------- */

static const char *const pinned_maps[] = {"shards", "threads", "rings", "steal_pairs", "sqe_ops",
					  "lock_hist", "shard_sched", "hists"};

/* BPFMON_PIN: the maps appear under /sys/fs/bpf/cbcmn/<pid>/, bpftool reads
 * them, and bpfmon_close() removes them.  Through the pinned shard_sched,
 * plant the doorbell state a runtime that ended could leave behind (a
 * doorbell whose target never switched in): a new runtime's executors
 * must not turn it into a latency sample (cbcmn:exec_start resets it). */
static void test_pin_and_stale_doorbell_state(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	struct bpfmon *pm;
	char err[256], dir[64], path[PATH_MAX];
	assert_int_equal(bpfmon_open(&pm, getpid(), BPFMON_PIN | BPFMON_NO_FUTEX, err, sizeof(err)), 0);
	snprintf(dir, sizeof(dir), "/sys/fs/bpf/cbcmn/%d", (int)getpid());
	assert_string_equal(bpfmon_pin_dir(pm), dir);
	for (size_t i = 0; i < sizeof(pinned_maps) / sizeof(pinned_maps[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, pinned_maps[i]);
		if (access(path, F_OK))
			fail_msg("%s is not pinned: %s", path, strerror(errno));
	}

	/* bpftool, as a user would: the shards map, with its BTF field names. */
	snprintf(path, sizeof(path), "bpftool map dump pinned %s/shards 2>&1", dir);
	FILE *p = popen(path, "r");
	assert_non_null(p);
	char line[512];
	bool named = false;
	size_t lines = 0;
	while (fgets(line, sizeof(line), p)) {
		named |= strstr(line, "\"doorbells_recv\"") != NULL;
		lines++;
	}
	int st = pclose(p);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 127) {
		bpfmon_close(pm);
		T_SKIP("bpftool is not installed: cannot check the pinned maps with it");
	}
	printf("bpftool map dump pinned %s/shards: %zu lines, status %d\n", dir, lines, WEXITSTATUS(st));
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_true(named);

	bool sched = attached("cbcmn_sched_switch") || attached("cbcmn_sched_switch_raw");
	snprintf(path, sizeof(path), "%s/shard_sched", dir);
	int fd = bpf_obj_get(path);
	assert_true(fd >= 0);
	for (__u32 i = 0; i < 2; i++) {
		struct cbcmn_bpf_sched old = {.db_t0 = 1}; /* a doorbell sent at boot, never seen in */
		assert_int_equal(bpf_map_update_elem(fd, &i, &old, BPF_ANY), 0);
	}
	close(fd);
	uint64_t born = t_now_ns();
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.spin_ns = CBCMN_SPIN_NONE;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	pingpong(rt, T_SCALE(200));
	t_destroy(rt);
	/* A real sample is shorter than the runtime lived; the planted state
	 * would give one as long as the machine has been up.  (Not "under a
	 * second": a loaded machine can take that long to switch a thread in.) */
	uint64_t lived_us = (t_now_ns() - born) / 1000;
	int first_impossible = 0; /* slot k holds [2^k, 2^(k+1)) us */
	while (first_impossible < CBCMN_BPF_HIST_SLOTS - 1 && (1ull << first_impossible) <= lived_us)
		first_impossible++;
	struct bpfmon_shard *b = calloc(CBCMN_BPF_NSLOTS, sizeof(*b));
	assert_non_null(b);
	assert_true(bpfmon_read(pm, b, CBCMN_BPF_NSLOTS) >= 2);
	for (int i = 0; i < 2; i++) {
		const uint64_t *h = b[i].hist[CBCMN_BPF_HIST_DOORBELL];
		uint64_t too_long = 0;
		for (int k = first_impossible; k < CBCMN_BPF_HIST_SLOTS; k++)
			too_long += h[k];
		printf("executor %d: %llu doorbell latency samples, %llu of them longer than the runtime "
		       "lived (%.1f ms), %.1f ms in all\n",
		       i, (unsigned long long)b[i].c.doorbell_lat, (unsigned long long)too_long,
		       lived_us / 1e3, b[i].c.doorbell_lat_ns / 1e6);
		assert_int_equal(too_long, 0);
		if (sched)
			assert_true(b[i].c.doorbell_lat >= 1);
	}
	free(b);
	bpfmon_close(pm);
	if (access(dir, F_OK) == 0)
		fail_msg("%s is still there after bpfmon_close()", dir);
}

/* ---- child processes ---------------------------------------------------------- */

/* out = rel in this build (next to tests/): cbcmn-stat, libcbcmn.so. */
static void built(char out[PATH_MAX], const char *rel, int mode)
{
	snprintf(out, PATH_MAX, "%s/../%s", dirname(strdupa(self)), rel);
	if (access(out, mode))
		fail_msg("%s is not built (make %s)", out, out);
}

/* Start this binary again as a child playing role (see main()). */
static pid_t spawn_self(const char *role, const char *arg1, int in, int out)
{
	char a_in[16], a_out[16];
	snprintf(a_in, sizeof(a_in), "%d", in);
	snprintf(a_out, sizeof(a_out), "%d", out);
	return spawn_role(role, arg1, a_in, a_out);
}

/* Tell a child spawned with pipes to end ("q" on down), check that it
 * exited 0, and close our ends of its pipes. */
static void end_child(pid_t child, int down, int up)
{
	assert_int_equal(write(down, "q", 1), 1);
	int status;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(down);
	close(up);
}

/* Role --fails IN OUT MODE: a runtime busy with fork-join (failed steals
 * by the thousand); 'r' on out once it runs.  MODE "first": on a byte on
 * in, exec this binary again in MODE "second" without ending the runtime
 * (its stats segment stays mapped wherever it was read).  "second": on a
 * byte, the runtime quiet, its per-executor stats on out; then a byte, and
 * exit. */
static int child_fails(int in, int out, const char *mode)
{
	cbcmn_runtime *rt = NULL;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	if (cbcmn_runtime_create(&cfg, &rt) || write(out, "r", 1) != 1)
		return 1;
	if (fib_until_byte(rt, in, 16, 2000))
		return 2;
	char c, a_in[16], a_out[16];
	if (read(in, &c, 1) != 1)
		return 3;
	if (!strcmp(mode, "first")) {
		snprintf(a_in, sizeof(a_in), "%d", in);
		snprintf(a_out, sizeof(a_out), "%d", out);
		execl(self, self, "--fails", a_in, a_out, "second", (char *)NULL);
		return 4;
	}
	cbcmn_executor_stats per[2], prev[2];
	quiet_stats(rt, per, prev, 2);
	if (write(out, per, sizeof(per)) != (ssize_t)sizeof(per) || read(in, &c, 1) != 1)
		return 5;
	return cbcmn_runtime_destroy(rt) ? 6 : 0;
}

static uint64_t steal_fails_now(struct bpfmon *m)
{
	static struct bpfmon_shard b[CBCMN_BPF_NSLOTS];
	assert_true(bpfmon_read(m, b, CBCMN_BPF_NSLOTS) >= 0);
	uint64_t sum = 0;
	for (int i = 0; i < CBCMN_BPF_MAX_SHARDS; i++)
		sum += b[i].c.steal_fails;
	return sum;
}

/* The target execs (a server restarting itself, say) while watched, the
 * runtime of its first image never destroyed: its segment, still mapped
 * here and still marked alive, is no longer the process's.  Failed steals
 * (from the runtime's counters, cbcmn:steal_fail being off) go on with
 * the new image's runtime, rather than stopping at the old one's last. */
static void test_steal_fails_follow_the_runtime_across_exec(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	int down[2], up[2];
	assert_int_equal(pipe(down), 0);
	assert_int_equal(pipe(up), 0);
	char a_in[16], a_out[16];
	snprintf(a_in, sizeof(a_in), "%d", down[0]);
	snprintf(a_out, sizeof(a_out), "%d", up[1]);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		close(down[1]);
		close(up[0]);
		execl(self, self, "--fails", a_in, a_out, "first", (char *)NULL);
		_exit(127);
	}
	close(down[0]);
	close(up[1]);
	char c;
	assert_int_equal(read(up[0], &c, 1), 1);
	struct bpfmon *fm;
	char err[256];
	assert_int_equal(bpfmon_open(&fm, child, BPFMON_NO_FUTEX, err, sizeof(err)), 0);
	usleep(100000);
	uint64_t before = steal_fails_now(fm); /* the first image's runtime followed */
	assert_int_equal(write(down[1], "x", 1), 1); /* exec */
	assert_int_equal(read(up[0], &c, 1), 1);     /* the second image's runtime runs */
	uint64_t at_exec = steal_fails_now(fm);
	usleep(300000);
	assert_int_equal(write(down[1], "q", 1), 1);
	cbcmn_executor_stats per[2];
	assert_int_equal(read(up[0], per, sizeof(per)), (ssize_t)sizeof(per));
	uint64_t after = steal_fails_now(fm);
	uint64_t second = per[0].steal_attempts - per[0].steal_successes + per[1].steal_attempts -
			  per[1].steal_successes;
	printf("steal_fails: %llu before the exec, %llu after it, %llu at the end; the second image's "
	       "runtime counted %llu\n", (unsigned long long)before, (unsigned long long)at_exec,
	       (unsigned long long)after, (unsigned long long)second);
	if (!second)
		T_SKIP("the second runtime failed no steal: nothing to follow");
	assert_true(after >= at_exec);
	assert_true(after - at_exec > 0);
	assert_true(after - at_exec <= second);
	assert_true(after >= second);
	bpfmon_close(fm);
	end_child(child, down[1], up[0]);
}

/* A target for cbcmn-stat: this binary's --run role, which ends on a byte
 * written to stop[1] (ours alone; stop[0] is closed on return). */
static pid_t stat_target_start(int stop[2])
{
	assert_int_equal(pipe2(stop, O_CLOEXEC), 0);
	assert_int_equal(fcntl(stop[0], F_SETFD, 0), 0); /* the target's */
	char in_fd[16];
	snprintf(in_fd, sizeof(in_fd), "%d", stop[0]);
	pid_t target = spawn_self("--run", in_fd, stop[0], -1);
	close(stop[0]);
	return target;
}

/* cbcmn-stat -p target -i secs -c count [extra], its stdout and stderr
 * out and err (descriptors of ours, closed on exec: the child has only
 * its copies). */
static pid_t stat_start(pid_t target, int out, int err, const char *secs, const char *count,
			const char *extra)
{
	char stat_bin[PATH_MAX], p[16];
	built(stat_bin, "bin/cbcmn-stat", X_OK);
	snprintf(p, sizeof(p), "%d", (int)target);
	pid_t st = fork();
	assert_true(st >= 0);
	if (st == 0) {
		if (dup2(out, 1) < 0 || dup2(err, 2) < 0)
			_exit(127);
		execl(stat_bin, stat_bin, "-p", p, "-i", secs, "-c", count, extra, (char *)NULL);
		_exit(127);
	}
	return st;
}

/* cbcmn-stat -p PID -i 2 --json against a process that exits after its
 * second report: the reports up to its exit, the last one cut short at the
 * exit and marked "exited":true, then exit status 2.  (The process is told
 * when to end, rather than given a lifetime: on a loaded machine attaching
 * the programs can take most of a fixed one.) */
static void test_stat_target_exits(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	int stop[2];
	pid_t target = stat_target_start(stop);
	int out[2];
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	pid_t st = stat_start(target, out[1], 2, "2", "10", "--json");
	close(out[1]);
	FILE *f = fdopen(out[0], "r");
	assert_non_null(f);
	static char line[1 << 16];
	int reports = 0, exited_at = -1;
	double last_s = 0;
	while (fgets(line, sizeof(line), f)) {
		reports++;
		if (strstr(line, "\"exited\":true"))
			exited_at = reports;
		const char *iv = strstr(line, "\"interval_s\":");
		if (iv)
			last_s = atof(iv + 13);
		if (reports == 2) { /* just after a report: the exit comes mid-interval */
			assert_int_equal(write(stop[1], "q", 1), 1);
			close(stop[1]);
			stop[1] = -1;
		}
	}
	fclose(f);
	if (stop[1] >= 0)
		close(stop[1]);
	int status, tstatus;
	assert_int_equal(waitpid(st, &status, 0), st);
	assert_int_equal(waitpid(target, &tstatus, 0), target);
	printf("cbcmn-stat: %d reports, \"exited\" on report %d (%.3f s), exit status %d; target status %d\n",
	       reports, exited_at, last_s, WEXITSTATUS(status), WEXITSTATUS(tstatus));
	assert_true(WIFEXITED(tstatus) && WEXITSTATUS(tstatus) == 0);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 2);
	assert_true(reports >= 3 && reports < 10);
	assert_int_equal(exited_at, reports); /* the last one, and only it */
	assert_true(last_s < 2.0); /* cut short, not a whole interval */
}

/* A report nobody can read (stdout a full disk) fails the run: cbcmn-stat
 * printed into /dev/full, said nothing and exited 0. */
static void test_stat_unwritable_output_fails(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	if (access("/dev/full", W_OK))
		T_SKIP("needs /dev/full");
	int stop[2];
	pid_t target = stat_target_start(stop);
	int err[2], full = open("/dev/full", O_WRONLY | O_CLOEXEC);
	assert_true(full >= 0);
	assert_int_equal(pipe2(err, O_CLOEXEC), 0);
	pid_t st = stat_start(target, full, err[1], "0.2", "3", NULL);
	close(full);
	close(err[1]);
	static char text[1 << 14];
	size_t n = 0;
	ssize_t k;
	while (n < sizeof(text) - 1 && (k = read(err[0], text + n, sizeof(text) - 1 - n)) > 0)
		n += (size_t)k;
	text[n] = 0;
	close(err[0]);
	int status, tstatus;
	assert_int_equal(waitpid(st, &status, 0), st);
	assert_int_equal(write(stop[1], "q", 1), 1);
	close(stop[1]);
	assert_int_equal(waitpid(target, &tstatus, 0), target);
	printf("cbcmn-stat > /dev/full: status %d, stderr:\n%s", WEXITSTATUS(status), text);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	assert_non_null(strstr(text, "cbcmn-stat: writing the output failed\n"));
}

/* Role --so LIB IN OUT: a process using libcbcmn.so (dlopen: this binary's
 * own static copy stays unused).  It creates a runtime, says 'r', waits for
 * a byte, runs a parked ping-pong between executors 0 and 1, waits for the
 * runtime to go quiet, writes its per-executor stats, waits for a byte,
 * cleans up and exits. */
struct so_api {
	__typeof__(cbcmn_config_init) *config_init;
	__typeof__(cbcmn_runtime_create) *create;
	__typeof__(cbcmn_runtime_run) *run;
	__typeof__(cbcmn_runtime_destroy) *destroy;
	__typeof__(cbcmn_stats_snapshot) *snapshot;
	__typeof__(cbcmn_chan_create) *chan_create;
	__typeof__(cbcmn_chan_destroy) *chan_destroy;
	__typeof__(cbcmn_chan_send) *send;
	__typeof__(cbcmn_chan_recv) *recv;
	__typeof__(cbcmn_cx_runtime) *cx_runtime;
	__typeof__(cbcmn_nursery_open) *nursery_open;
	__typeof__(cbcmn_nursery_spawn_pinned) *spawn_pinned;
	__typeof__(cbcmn_nursery_await_all) *await_all;
};
static struct so_api so;

static int64_t so_side(cbcmn_cx *cx, void *arg)
{
	struct pp *p = ((void **)arg)[0];
	int side = (int)(intptr_t)((void **)arg)[1];
	cbcmn_chan *o = side ? p->ba : p->ab, *in = side ? p->ab : p->ba;
	long v = 0;
	for (long i = 0; i < p->rounds; i++) {
		if ((side == 0 && so.send(cx, o, &v)) || so.recv(cx, in, &v) ||
		    (side == 1 && so.send(cx, o, &v)))
			return -1;
	}
	return 0;
}

static int64_t so_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	if (so.nursery_open(so.cx_runtime(cx), cx, &n))
		return -1;
	void *a0[2] = {arg, (void *)0}, *a1[2] = {arg, (void *)1};
	so.spawn_pinned(cx, n, 1, so_side, a1, NULL);
	so.spawn_pinned(cx, n, 0, so_side, a0, NULL);
	return so.await_all(cx, n);
}

static int child_so(const char *lib, int in, int out)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return 1;
#define SYM(f, name) (so.f = (__typeof__(so.f))dlsym(h, name))
	if (!SYM(config_init, "cbcmn_config_init") || !SYM(create, "cbcmn_runtime_create") ||
	    !SYM(run, "cbcmn_runtime_run") || !SYM(destroy, "cbcmn_runtime_destroy") ||
	    !SYM(snapshot, "cbcmn_stats_snapshot") || !SYM(chan_create, "cbcmn_chan_create") ||
	    !SYM(chan_destroy, "cbcmn_chan_destroy") ||
	    !SYM(send, "cbcmn_chan_send") || !SYM(recv, "cbcmn_chan_recv") ||
	    !SYM(cx_runtime, "cbcmn_cx_runtime") || !SYM(nursery_open, "cbcmn_nursery_open") ||
	    !SYM(spawn_pinned, "cbcmn_nursery_spawn_pinned") || !SYM(await_all, "cbcmn_nursery_await_all"))
		return 2;
#undef SYM
	cbcmn_config cfg;
	so.config_init(&cfg);
	cfg.workers = 2;
	cfg.spin_ns = CBCMN_SPIN_NONE;
	cbcmn_runtime *rt;
	if (so.create(&cfg, &rt))
		return 3;
	struct pp p = {.rounds = 500};
	if (so.chan_create(rt, 1, sizeof(long), &p.ab) || so.chan_create(rt, 1, sizeof(long), &p.ba))
		return 4;
	char c = 'r';
	cbcmn_stats st;
	cbcmn_executor_stats per[2], prev[2];
	/* Both executor threads up before we say ready. */
	for (uint64_t until = t_now_ns() + T_STALL_NS;
	     t_now_ns() < until && (so.snapshot(rt, &st, per, 2) || !per[0].tid || !per[1].tid);)
		usleep(2000);
	if (write(out, &c, 1) != 1 || read(in, &c, 1) != 1)
		return 5;
	int64_t r;
	if (so.run(rt, so_main, &p, &r) || r)
		return 6;
	so.snapshot(rt, &st, prev, 2);
	for (uint64_t until = t_now_ns() + T_STALL_NS; t_now_ns() < until;) {
		usleep(20000);
		so.snapshot(rt, &st, per, 2);
		if (!memcmp(prev, per, sizeof(per)))
			break;
		memcpy(prev, per, sizeof(per));
	}
	if (write(out, per, sizeof(per)) != (ssize_t)sizeof(per) || read(in, &c, 1) != 1)
		return 7;
	so.chan_destroy(p.ab);
	so.chan_destroy(p.ba);
	int rc = so.destroy(rt);
	dlclose(h);
	return rc ? 8 : 0;
}

/* Copy file from to to (a new inode: what a rebuild or a package upgrade
 * leaves, by writing a temporary and renaming it over the old name). */
static void copy_file(const char *from, const char *to)
{
	char tmp[PATH_MAX + 8], buf[1 << 16];
	snprintf(tmp, sizeof(tmp), "%s.new", to);
	int in = open(from, O_RDONLY | O_CLOEXEC), out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	assert_true(in >= 0 && out >= 0);
	for (ssize_t n; (n = read(in, buf, sizeof(buf))) > 0;)
		assert_int_equal(write(out, buf, (size_t)n), n);
	close(in);
	close(out);
	assert_int_equal(rename(tmp, to), 0);
}

/* A process that uses libcbcmn.so: its USDT probes are attached in the .so
 * (and in the executable, which has a static copy here), and BPF's counts
 * equal the runtime's; its executors, started before the attach, are found
 * by name.  replaced: the process maps a copy that is replaced on disk
 * before the attach (maps says "(deleted)"): the probes go in the file it
 * maps, not in the new one nor nowhere. */
static void shared_library(bool replaced)
{
	if (!mon)
		T_SKIP("%s", why);
	char lib[PATH_MAX], dir[] = "/tmp/cbcmn-so.XXXXXX", copy[PATH_MAX];
	built(lib, "lib/libcbcmn.so", R_OK);
	if (replaced) {
		assert_non_null(mkdtemp(dir));
		snprintf(copy, sizeof(copy), "%s/libcbcmn.so", dir);
		copy_file(lib, copy);
	}
	int down[2], up[2];
	assert_int_equal(pipe(down), 0);
	assert_int_equal(pipe(up), 0);
	pid_t child = spawn_self("--so", replaced ? copy : lib, down[0], up[1]);
	close(down[0]);
	close(up[1]);
	char c;
	assert_int_equal(read(up[0], &c, 1), 1);
	if (replaced)
		copy_file(lib, copy);
	struct bpfmon *sm;
	char err[256];
	assert_int_equal(bpfmon_open(&sm, child, BPFMON_NO_FUTEX, err, sizeof(err)), 0);
	const struct bpfmon_prog *pr;
	unsigned np = bpfmon_progs(sm, &pr);
	for (unsigned i = 0; i < np; i++)
		if (!strcmp(pr[i].name, "cbcmn_doorbell") || !strcmp(pr[i].name, "cbcmn_xmsg")) {
			printf("%s: %u binaries\n", pr[i].target, pr[i].links);
			assert_int_equal(pr[i].state, BPFMON_ATTACHED);
			assert_int_equal(pr[i].links, 2); /* the executable and libcbcmn.so */
		}
	assert_int_equal(write(down[1], "g", 1), 1);
	cbcmn_executor_stats per[2];
	assert_int_equal(read(up[0], per, sizeof(per)), (ssize_t)sizeof(per));
	struct bpfmon_shard *b = calloc(CBCMN_BPF_NSLOTS, sizeof(*b));
	assert_non_null(b);
	assert_true(bpfmon_read(sm, b, CBCMN_BPF_NSLOTS) >= 2);
	for (int i = 0; i < 2; i++) {
		const struct cbcmn_bpf_shard *s = &b[i].c;
		printf("libcbcmn.so executor %d: tid %u/%d doorbells %llu/%llu xmsgs %llu/%llu steals %llu/%llu\n",
		       i, s->tid, per[i].tid, (unsigned long long)(s->doorbells_msg_ring + s->doorbells_eventfd),
		       (unsigned long long)per[i].doorbells_sent, (unsigned long long)s->xmsgs_sent,
		       (unsigned long long)per[i].xmsgs_sent, (unsigned long long)s->steals,
		       (unsigned long long)per[i].steal_successes);
		assert_int_equal(s->tid, per[i].tid);
		assert_int_equal(s->doorbells_msg_ring + s->doorbells_eventfd, per[i].doorbells_sent);
		assert_int_equal(s->xmsgs_sent, per[i].xmsgs_sent);
		assert_int_equal(s->steals, per[i].steal_successes);
	}
	assert_true(per[0].doorbells_sent + per[1].doorbells_sent > 0);
	free(b);
	bpfmon_close(sm);
	end_child(child, down[1], up[0]);
	if (replaced) {
		unlink(copy);
		rmdir(dir);
	}
}

static void test_attach_shared_library(void **state)
{
	(void)state;
	shared_library(false);
}

static void test_shared_library_replaced_on_disk_after_start(void **state)
{
	(void)state;
	shared_library(true);
}

/* This binary's program interpreter (PT_INTERP: the dynamic loader), into
 * out; false when it has none. */
static int interp_of(struct dl_phdr_info *info, size_t size, void *out)
{
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_INTERP) {
			snprintf(out, PATH_MAX, "%s", (const char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr));
			return 1;
		}
	return 1; /* the first object is the program: look no further */
}

/* A cbcmn program started through the dynamic loader (ld.so PROGRAM, as
 * wrappers and some packagings do): /proc/PID/exe is the loader, and the
 * probes are in a mapped file that is not named libcbcmn (the program
 * itself).  It is a cbcmn program: bpfmon attaches its USDT probes there
 * and counts, rather than refusing it (or finding the probes "not in the
 * target"). */
static void test_program_started_through_the_dynamic_loader(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	char ld[PATH_MAX] = "";
	dl_iterate_phdr(interp_of, ld);
	if (!ld[0] || access(ld, X_OK))
		T_SKIP("this binary has no program interpreter to start it with");
	int stop[2];
	assert_int_equal(pipe(stop), 0);
	char in_fd[16];
	snprintf(in_fd, sizeof(in_fd), "%d", stop[0]);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		close(stop[1]);
		execl(ld, ld, self, "--run", in_fd, in_fd, "-1", (char *)NULL);
		_exit(127);
	}
	close(stop[0]);
	/* Its executors up: threads named cbcmn-exec-N. */
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/task", (int)child);
	for (uint64_t until = t_now_ns() + T_STALL_NS; t_now_ns() < until;) {
		int execs = 0;
		DIR *d = opendir(p);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			char c[96], comm[32] = "";
			snprintf(c, sizeof(c), "%s/%.24s/comm", p, de->d_name);
			FILE *f = fopen(c, "r");
			if (f) {
				execs += fgets(comm, sizeof(comm), f) && !strncmp(comm, "cbcmn-exec-", 11);
				fclose(f);
			}
		}
		if (d)
			closedir(d);
		if (execs >= 2)
			break;
		usleep(10000);
	}
	struct bpfmon *lm = NULL;
	char err[256] = "";
	int rc = bpfmon_open(&lm, child, BPFMON_NO_FUTEX, err, sizeof(err));
	printf("bpfmon_open of %s %s: %d %s\n", ld, self, rc, err);
	assert_int_equal(rc, 0);
	const struct bpfmon_prog *pr;
	unsigned np = bpfmon_progs(lm, &pr);
	for (unsigned i = 0; i < np; i++)
		if (!strcmp(pr[i].name, "cbcmn_park")) {
			printf("%s: state %d, %u binaries %s\n", pr[i].target, pr[i].state, pr[i].links, pr[i].reason);
			assert_int_equal(pr[i].state, BPFMON_ATTACHED);
			assert_true(pr[i].links >= 1);
		}
	/* It parks between its runs (every 10 ms): parks counted. */
	struct bpfmon_shard *b = calloc(CBCMN_BPF_NSLOTS, sizeof(*b));
	assert_non_null(b);
	uint64_t parks = 0;
	for (uint64_t until = t_now_ns() + T_STALL_NS; !parks && t_now_ns() < until;) {
		usleep(20000);
		assert_true(bpfmon_read(lm, b, CBCMN_BPF_NSLOTS) >= 0);
		for (int i = 0; i < CBCMN_BPF_MAX_SHARDS; i++)
			parks += b[i].c.parks;
	}
	printf("parks %llu\n", (unsigned long long)parks);
	assert_true(parks > 0);
	free(b);
	bpfmon_close(lm);
	assert_int_equal(write(stop[1], "q", 1), 1);
	close(stop[1]);
	int status;
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ---- privilege; a program the verifier rejects -------------------------------- */

/* Without privilege: -EPERM and one line naming what is missing. */
static void test_non_root_message(void **state)
{
	(void)state;
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char err[256] = "";
		struct bpfmon *m = NULL;
		int rc = 100;
		if (!setresgid(65534, 65534, 65534) && !setresuid(65534, 65534, 65534))
			rc = bpfmon_open(&m, getppid(), 0, err, sizeof(err));
		dprintf(fds[1], "%d %s", rc, err);
		_exit(0);
	}
	close(fds[1]);
	char buf[300] = "";
	ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(n > 0);
	int rc = atoi(buf);
	if (rc == 100)
		T_SKIP("cannot drop to uid 65534 here (not root?)");
	printf("as uid 65534: %s\n", buf);
	assert_int_equal(rc, -EPERM);
	assert_non_null(strstr(buf, "CAP_BPF"));
	assert_non_null(strstr(buf, "CAP_PERFMON"));
	assert_null(strchr(buf, '\n'));
}

/* A program the verifier rejects costs that program only: with
 * CBCMN_BPF_REJECT (the debugging aid that loads the named programs as
 * socket filters, whose verifier refuses their helpers), cbcmn_park is
 * FAILED with the verifier's reason and the rest attach; a rejected tp_btf
 * program leaves its raw_tp fallback to do the work. */
static int64_t sleep_5ms_task(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	return cbcmn_sleep(cx, 5 * 1000 * 1000);
}

static void test_verifier_reject_costs_one_program(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	setenv("CBCMN_BPF_REJECT", "cbcmn_park,cbcmn_sched_switch", 1);
	struct bpfmon *rm;
	char err[256];
	int rc = bpfmon_open(&rm, getpid(), BPFMON_NO_IO_URING | BPFMON_NO_FUTEX, err, sizeof(err));
	unsetenv("CBCMN_BPF_REJECT");
	assert_int_equal(rc, 0);
	const struct bpfmon_prog *p;
	unsigned n = bpfmon_progs(rm, &p);
	for (unsigned i = 0; i < n; i++) {
		if (p[i].state == BPFMON_FAILED || !strcmp(p[i].name, "cbcmn_sched_switch_raw"))
			printf("%s (%s): state %d: %s\n", p[i].name, p[i].target, p[i].state, p[i].reason);
		if (!strcmp(p[i].name, "cbcmn_park")) {
			assert_int_equal(p[i].state, BPFMON_FAILED);
			assert_true(p[i].err < 0);
			assert_non_null(strstr(p[i].reason, "rejected by the verifier: "));
			assert_null(strchr(p[i].reason, '\n'));
		} else if (!strcmp(p[i].name, "cbcmn_sched_switch")) {
			if (p[i].state != BPFMON_OFF) /* OFF: no tp_btf here, nothing to reject */
				assert_int_equal(p[i].state, BPFMON_FAILED);
		} else if (!strcmp(p[i].name, "cbcmn_sched_switch_raw") || !strcmp(p[i].name, "cbcmn_steal") ||
			   !strcmp(p[i].name, "cbcmn_exec_start")) {
			assert_int_equal(p[i].state, BPFMON_ATTACHED);
		}
	}
	/* What did attach still counts: a runtime's executors show up.  The
	 * sleep makes its executor wait in the kernel, a switch the raw
	 * tracepoint counts for sure: fib(15) alone can end inside one time
	 * slice on both executors (under a CPU hog it once did: no switch in
	 * slot 0). */
	cbcmn_runtime *rt = t_runtime(2);
	struct fib f = {.n = 15};
	int64_t r;
	assert_int_equal(cbcmn_runtime_run(rt, fib_task, &f, &r), 0);
	assert_int_equal(cbcmn_runtime_run(rt, sleep_5ms_task, NULL, &r), 0);
	t_destroy(rt);
	static struct bpfmon_shard b[CBCMN_BPF_NSLOTS]; /* no leak if an assert fails */
	int ns = bpfmon_read(rm, b, CBCMN_BPF_NSLOTS);
	assert_true(ns >= 1);
	uint64_t switches = 0;
	for (int i = 0; i < ns; i++) {
		switches += b[i].c.switches;
		assert_int_equal(b[i].c.parks, 0); /* its program was rejected */
	}
	assert_true(switches > 0);
	bpfmon_close(rm);
}

int main(int argc, char **argv)
{
	/* The child roles this binary plays for the tests above. */
	if (argc == 5 && !strcmp(argv[1], "--run")) /* --run IN: fork-join until a byte on IN */
		return child_run(atoi(argv[2]), 18, 10000);
	if (argc == 5 && !strcmp(argv[1], "--so"))
		return child_so(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (find_self())
		return 1;
	if (argc == 5 && !strcmp(argv[1], "--fails"))
		return child_fails(atoi(argv[2]), atoi(argv[3]), argv[4]);
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_no_program_refused),
		cmocka_unit_test(test_counts_match_runtime),
		cmocka_unit_test(test_cqe_errors_counted_whatever_the_tracepoint_form),
		cmocka_unit_test(test_io_uring_tracepoint_fallbacks_count_too),
		cmocka_unit_test(test_oncpu_counted_at_switches),
		cmocka_unit_test(test_contention_shows),
		cmocka_unit_test(test_no_contention_no_futex),
		cmocka_unit_test(test_attach_after_start_reports_tid_cpu),
		cmocka_unit_test(test_pin_and_stale_doorbell_state),
		cmocka_unit_test(test_stat_target_exits),
		cmocka_unit_test(test_stat_unwritable_output_fails),
		cmocka_unit_test(test_steal_fails_follow_the_runtime_across_exec),
		cmocka_unit_test(test_attach_shared_library),
		cmocka_unit_test(test_shared_library_replaced_on_disk_after_start),
		cmocka_unit_test(test_program_started_through_the_dynamic_loader),
		cmocka_unit_test(test_non_root_message),
		cmocka_unit_test(test_verifier_reject_costs_one_program),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
