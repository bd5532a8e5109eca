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
	int rc = bpfmon_open(&mon, getpid(), 0, why, sizeof(why));
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counts_match_runtime),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
