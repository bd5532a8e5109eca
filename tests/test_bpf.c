/* test_bpf: the eBPF programs (bpf/cbcmn.bpf.c, loaded by tools/common/bpfmon)
 * see what the runtime counts.  The runtime runs in this process, statically
 * linked with libcbcmn.a, so its probes are in /proc/self/exe.  Needs root
 * (or CAP_BPF + CAP_PERFMON) and a kernel with BTF: otherwise a skip. */
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "common/bpfmon.h"
#include "common/fib.h"

static struct bpfmon *mon;
static char why[256];

static int setup(void **state)
{
	(void)state;
	/* BPFMON_FUTEX_TP: the futex tests also run where fentry cannot. */
	int rc = bpfmon_open(&mon, getpid(), BPFMON_FUTEX_TP, why, sizeof(why));
	if (rc) {
		mon = NULL;
		return 0; /* each test skips with why */
	}
	/* The probes the checks rest on must have attached. */
	const struct bpfmon_prog *p;
	unsigned n = bpfmon_progs(mon, &p);
	for (unsigned i = 0; i < n; i++) {
		bool needed = !strcmp(p[i].name, "cbcmn_steal") || !strcmp(p[i].name, "cbcmn_doorbell") ||
			      !strcmp(p[i].name, "cbcmn_exec_start");
		if (needed && p[i].state != BPFMON_ATTACHED) {
			snprintf(why, sizeof(why), "%s did not attach (%s)", p[i].target,
				 strerror(-p[i].err));
			bpfmon_close(mon);
			mon = NULL;
			return 0;
		}
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	bpfmon_close(mon);
	return 0;
}

/* ---- workloads ------------------------------------------------------------- */

struct pp {
	cbcmn_chan *ab, *ba;
	long rounds;
};

static int64_t pp_side(cbcmn_cx *cx, void *arg)
{
	struct pp *p = ((void **)arg)[0];
	int side = (int)(intptr_t)((void **)arg)[1];
	cbcmn_chan *out = side ? p->ba : p->ab, *in = side ? p->ab : p->ba;
	long v = 0;
	int rc;
	for (long i = 0; i < p->rounds; i++) {
		if (side == 0 && (rc = cbcmn_chan_send(cx, out, &v)) != 0)
			return rc;
		if ((rc = cbcmn_chan_recv(cx, in, &v)) != 0)
			return rc;
		if (side == 1 && (rc = cbcmn_chan_send(cx, out, &v)) != 0)
			return rc;
	}
	return 0;
}

static int64_t pp_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	void *a0[2] = {arg, (void *)0}, *a1[2] = {arg, (void *)1};
	cbcmn_nursery_spawn_pinned(cx, n, 1, pp_side, a1, NULL);
	cbcmn_nursery_spawn_pinned(cx, n, 0, pp_side, a0, NULL);
	return cbcmn_nursery_await_all(cx, n);
}

/* Wait until the runtime's counters stop moving (every executor parked):
 * then each probe has fired next to the counter it goes with. */
static void quiesce(cbcmn_runtime *rt, cbcmn_executor_stats *per, uint32_t n)
{
	cbcmn_stats st;
	cbcmn_executor_stats prev[8];
	assert_true(n <= 8);
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, prev, n), 0);
	for (int i = 0; i < 200; i++) {
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

static struct bpfmon_shard *read_all(void)
{
	struct bpfmon_shard *b = calloc(CBCMN_BPF_NSLOTS, sizeof(*b));
	assert_non_null(b);
	assert_true(bpfmon_read(mon, b, CBCMN_BPF_NSLOTS) >= 0);
	return b;
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
	assert_int_equal(cbcmn_runtime_run(rt, fib_task, &f, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(f.out, fib_seq(f.n));

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
			if (attached("cbcmn_sched_wakeup") || attached("cbcmn_sched_wakeup_raw")) {
				assert_true(c->runq_waits >= 1);
				assert_int_equal(bpfmon_hist_count(rq), c->runq_waits);
			}
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
	for (int round = 0; round < 5 && !cont && !fwaits; round++) {
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts_match_runtime),
		cmocka_unit_test(test_contention_shows),
		cmocka_unit_test(test_no_contention_no_futex),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
