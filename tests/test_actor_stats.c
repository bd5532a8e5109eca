/* test_actor_stats: the per-executor actor statistics the tools show
 * (cbcmn-top's actor columns): supervisor restarts counted per executor,
 * mailbox back-pressure where the sender runs, the mailbox depth histogram
 * of the receives, and the gauges' two shares adding up. */
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "cbcmn_actor.h"
#include "../lib/runtime.h"

#define CRASHES 5

struct tree {
	_Atomic int starts;
	_Atomic cbcmn_actor_ref sup;
	cbcmn_sup_report rep;
	int64_t await_rc;
};

/* Crashes at once CRASHES times; the next incarnation stops the tree. */
static int64_t crasher(cbcmn_cx *cx, void *arg)
{
	struct tree *t = arg;
	if (atomic_fetch_add(&t->starts, 1) < CRASHES)
		return -1;
	cbcmn_actor_ref sup;
	while (!(sup = atomic_load(&t->sup)))
		cbcmn_yield(cx);
	cbcmn_actor_stop(NULL, cx, sup, 0);
	return 0;
}

static int64_t root(cbcmn_cx *cx, void *arg)
{
	struct tree *t = arg;
	cbcmn_sup_child c = {.fn = crasher, .state = t, .restart = CBCMN_SUP_TRANSIENT, .node = -1};
	cbcmn_sup_spec spec = {.strategy = CBCMN_SUP_ONE, .max_restarts = CRASHES + 1,
			       .children = &c, .nchildren = 1, .report = &t->rep};
	cbcmn_nursery *n;
	cbcmn_actor_ref sup;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_sup_start(cx, n, &spec, NULL, &sup) == 0);
	atomic_store(&t->sup, sup);
	t->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

/* Each restart is counted once, on the executor its supervisor ran on:
 * the executors' counts add up to the supervisor's report. */
static void test_restarts_are_counted_per_executor(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cbcmn_runtime *rt;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), 0);
	struct tree t = {0};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, root, &t, &res), 0);
	assert_int_equal(res, 0);
	assert_int_equal(t.await_rc, 0);
	assert_int_equal(t.rep.restarts, CRASHES);
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 2), 0);
	assert_int_equal(per[0].actor_restarts + per[1].actor_restarts, CRASHES);
	assert_int_equal(st.total.actor_restarts, CRASHES);
	assert_int_equal(cbcmn_runtime_destroy(rt), 0);
}

/* ---- mailbox depth and back-pressure -------------------------------- */

#define DEPTH 100

struct box {
	_Atomic int go;
	_Atomic int sending; /* blocked_sender() is at its send */
	cbcmn_runtime *rt;
	cbcmn_actor_ref ref;
	int got;
	int rcs[6];
};

/* Receives nothing until told, then what its mailbox holds. */
static int64_t held(cbcmn_cx *cx, void *arg)
{
	struct box *b = arg;
	while (!atomic_load(&b->go))
		cbcmn_yield(cx);
	cbcmn_actor_msg m;
	while (cbcmn_actor_receive(cx, &m, 0) == 0)
		b->got += m.type == 1;
	return 0;
}

/* A held actor with a mailbox of cap in a new nursery *n. */
static void spawn_held(cbcmn_cx *cx, struct box *b, uint32_t cap, cbcmn_nursery **n)
{
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, n) == 0);
	cbcmn_actor_opts o = {.mailbox_cap = cap};
	TASK_CHECK(cbcmn_actor_spawn(cx, *n, held, b, &o, &b->ref) == 0);
}

/* DEPTH messages before the actor receives: its receives find depths
 * DEPTH, DEPTH - 1, ... 1. */
static int64_t fill_root(cbcmn_cx *cx, void *arg)
{
	struct box *b = arg;
	cbcmn_nursery *n;
	spawn_held(cx, b, 128, &n);
	cbcmn_actor_msg m = {.type = 1};
	for (int i = 0; i < DEPTH; i++)
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, b->ref, &m) == 0);
	/* Sent from another executor than the actor's, they went over the
	 * lanes: all in the mailbox before its first receive, which would
	 * find none still in a lane (timeout 0) and stop (seen once under
	 * TSan: got 0).  No deadline on speed: the watchdog ends a hang. */
	cbcmn_executor_stats per[2];
	uint64_t t0 = t_now_ns();
	do {
		cbcmn_stats st;
		TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &st, per, 2) == 0);
		if (per[0].mailbox_depth + per[1].mailbox_depth == DEPTH)
			break;
		cbcmn_yield(cx);
	} while (t_now_ns() - t0 < T_STALL_NS);
	atomic_store(&b->go, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static void sum_hist(const cbcmn_executor_stats *per, uint32_t n, uint64_t *h)
{
	for (uint32_t k = 0; k < CBCMN_MAILBOX_HIST_SLOTS; k++) {
		h[k] = 0;
		for (uint32_t i = 0; i < n; i++)
			h[k] += per[i].mailbox_depth_hist[k];
	}
}

/* A mailbox filled to DEPTH before its actor receives: each receive is one
 * sample of the depth it found, in its log2 slot, none lost, none other. */
static void test_mailbox_depth_hist_counts_a_known_depth(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct box b = {0};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, fill_root, &b, &res), 0);
	assert_int_equal(res, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(b.got, DEPTH);
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 2), 0);
	uint64_t h[CBCMN_MAILBOX_HIST_SLOTS];
	sum_hist(per, 2, h);
	/* depths 1 | 2-3 | 4-7 | 8-15 | 16-31 | 32-63 | 64-100 */
	static const uint64_t want[] = {1, 2, 4, 8, 16, 32, DEPTH - 63};
	for (uint32_t k = 0; k < CBCMN_MAILBOX_HIST_SLOTS; k++) {
		assert_int_equal(h[k], k < 7 ? want[k] : 0);
		assert_int_equal(st.total.mailbox_depth_hist[k], h[k]);
	}
	/* The 99th of 100 samples is in [64, 128). */
	assert_int_equal(st.total.mailbox_depth_p99, 127);
	assert_int_equal(st.total.actor_backpressure, 0);
	t_destroy(rt);
}

static void *outside_sender(void *arg)
{
	struct box *b = arg;
	cbcmn_actor_msg m = {.type = 1};
	b->rcs[4] = cbcmn_actor_try_send(b->rt, NULL, b->ref, &m);
	b->rcs[5] = cbcmn_actor_send_timeout(b->rt, NULL, b->ref, &m, 1000000); /* its own sleep */
	return NULL;
}

static int64_t full_root(cbcmn_cx *cx, void *arg)
{
	struct box *b = arg;
	cbcmn_nursery *n;
	spawn_held(cx, b, 1, &n);
	cbcmn_actor_msg m = {.type = 1};
	b->rcs[0] = cbcmn_actor_try_send(NULL, cx, b->ref, &m);        /* room: not counted */
	b->rcs[1] = cbcmn_actor_try_send(NULL, cx, b->ref, &m);        /* -EAGAIN */
	b->rcs[2] = cbcmn_actor_send_timeout(NULL, cx, b->ref, &m, 0); /* -ETIMEDOUT, no wait */
	b->rcs[3] = cbcmn_actor_send_timeout(NULL, cx, b->ref, &m, 1000000); /* waits, -ETIMEDOUT */
	pthread_t th;
	TASK_CHECK(pthread_create(&th, NULL, outside_sender, b) == 0);
	TASK_CHECK(pthread_join(th, NULL) == 0);
	atomic_store(&b->go, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

/* Every send a full mailbox refused or held is counted once: on the
 * executor of a task, in the runtime's outside count for a thread. */
static void test_backpressure_is_counted_where_the_sender_runs(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct box b = {.rt = rt};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, full_root, &b, &res), 0);
	assert_int_equal(res, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(b.rcs[0], 0);
	assert_int_equal(b.rcs[1], -EAGAIN);
	assert_int_equal(b.rcs[2], -ETIMEDOUT);
	assert_int_equal(b.rcs[3], -ETIMEDOUT);
	assert_int_equal(b.rcs[4], -EAGAIN);
	assert_int_equal(b.rcs[5], -ETIMEDOUT);
	assert_int_equal(b.got, 1);
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 2), 0);
	assert_int_equal(per[0].actor_backpressure + per[1].actor_backpressure, 3);
	assert_int_equal(st.total.actor_backpressure, 3);
	assert_int_equal(st.ext_actor_backpressure, 2);
	t_destroy(rt);
}

/* Waits for room in the held actor's full mailbox until cancelled. */
static int64_t blocked_sender(cbcmn_cx *cx, void *arg)
{
	struct box *b = arg;
	cbcmn_actor_msg m = {.type = 1};
	atomic_store(&b->sending, 1);
	b->rcs[1] = cbcmn_actor_send(NULL, cx, b->ref, &m);
	return 0;
}

static int64_t cancel_root(cbcmn_cx *cx, void *arg)
{
	struct box *b = arg;
	cbcmn_nursery *n, *senders;
	spawn_held(cx, b, 1, &n);
	cbcmn_actor_msg m = {.type = 1};
	b->rcs[0] = cbcmn_actor_try_send(NULL, cx, b->ref, &m);
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &senders) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, senders, blocked_sender, b, NULL) == 0);
	/* One executor: once the sender is at its send, it has run on to
	 * its wait before we run again.  A fixed 2 ms was not enough beside
	 * the hog (TSan): our timer's wake ran us first, the sender was
	 * cancelled before it started (its rc never set). */
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&b->sending) && t_now_ns() < end)
		TASK_CHECK(cbcmn_sleep(cx, 1000000) == 0);
	cbcmn_nursery_cancel(senders);
	cbcmn_nursery_await_all(cx, senders);
	atomic_store(&b->go, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

/* A send cancelled while it waited for room is counted once, as it ends. */
static void test_cancelled_waiting_sender_is_counted_once(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct box b = {.rt = rt};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, cancel_root, &b, &res), 0);
	assert_int_equal(res, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(b.rcs[0], 0);
	assert_int_equal(b.rcs[1], CBCMN_ECANCELED);
	cbcmn_stats st;
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
	assert_int_equal(st.total.actor_backpressure, 1);
	assert_int_equal(b.got, 1);
	t_destroy(rt);
}

/* Sends itself messages until its mailbox of one is full. */
static int64_t self_sender(cbcmn_cx *cx, void *arg)
{
	struct box *b = arg;
	cbcmn_actor_msg m = {.type = 1};
	cbcmn_actor_ref me = cbcmn_actor_self(cx);
	b->rcs[0] = cbcmn_actor_try_send(NULL, cx, me, &m);              /* room */
	b->rcs[1] = cbcmn_actor_send(NULL, cx, me, &m);                  /* -EDEADLK */
	b->rcs[2] = cbcmn_actor_send_timeout(NULL, cx, me, &m, 0);       /* -EDEADLK */
	b->rcs[3] = cbcmn_actor_try_send(NULL, cx, me, &m);              /* -EAGAIN */
	return 0;
}

static int64_t self_root(cbcmn_cx *cx, void *arg)
{
	struct box *b = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_actor_opts o = {.mailbox_cap = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, self_sender, b, &o, &b->ref) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

/* An actor's send to its own full mailbox is refused for the full mailbox
 * (-EDEADLK: only it could make room) as a try_send is (-EAGAIN): each
 * is back-pressure.  Only the try_send was counted, so a zero-timeout
 * send to itself (-EDEADLK: that check comes first) was not, while the
 * same send to another actor (-ETIMEDOUT) was. */
static void test_send_to_own_full_mailbox_is_backpressure(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct box b = {.rt = rt};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, self_root, &b, &res), 0);
	assert_int_equal(res, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(b.rcs[0], 0);
	assert_int_equal(b.rcs[1], -EDEADLK);
	assert_int_equal(b.rcs[2], -EDEADLK);
	assert_int_equal(b.rcs[3], -EAGAIN);
	cbcmn_stats st;
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
	assert_int_equal(st.total.actor_backpressure, 3);
	t_destroy(rt);
}

static void test_hist_quantile_bounds(void **state)
{
	(void)state;
	uint64_t h[CBCMN_MAILBOX_HIST_SLOTS] = {0};
	assert_int_equal(cbcmn_stats_hist_quantile(NULL, 4, 99), 0);
	assert_int_equal(cbcmn_stats_hist_quantile(h, 0, 99), 0);
	assert_int_equal(cbcmn_stats_hist_quantile(h, CBCMN_MAILBOX_HIST_SLOTS, 99), 0);
	h[0] = 1;
	assert_int_equal(cbcmn_stats_hist_quantile(h, CBCMN_MAILBOX_HIST_SLOTS, 99), 1);
	assert_int_equal(cbcmn_stats_hist_quantile(h, CBCMN_MAILBOX_HIST_SLOTS, 0), 1);
	/* 99 samples at depth 1, one at 2^20: p99 is 1, p100 the top slot. */
	h[0] = 99;
	h[20] = 1;
	assert_int_equal(cbcmn_stats_hist_quantile(h, CBCMN_MAILBOX_HIST_SLOTS, 99), 1);
	assert_int_equal(cbcmn_stats_hist_quantile(h, CBCMN_MAILBOX_HIST_SLOTS, 1000),
			 (2ull << 20) - 1);
	/* Totals near 2^64 do not overflow the rank. */
	h[0] = UINT64_MAX / 4;
	h[3] = UINT64_MAX / 4;
	h[20] = 0;
	assert_int_equal(cbcmn_stats_hist_quantile(h, CBCMN_MAILBOX_HIST_SLOTS, 50), 1);
	assert_int_equal(cbcmn_stats_hist_quantile(h, CBCMN_MAILBOX_HIST_SLOTS, 51), 15);
}

/* A histogram read from another process's segment may hold anything
 * (statseg.h: the reader trusts nothing): sums that pass 2^64 must not wrap
 * into a small total that moves the percentile up the slots. */
static void test_hist_quantile_of_a_corrupt_histogram_does_not_wrap(void **state)
{
	(void)state;
	uint64_t h[CBCMN_MAILBOX_HIST_SLOTS] = {0};
	h[0] = 1;
	h[1] = UINT64_MAX;
	h[5] = 5;
	assert_int_equal(cbcmn_stats_hist_quantile(h, CBCMN_MAILBOX_HIST_SLOTS, 99), 3);
}

/* ---- the gauges' two shares (statseg.h): counted in by one thread, out by
 * another ---- */

#define G_RECV 3
#define G_MSGS 3000 /* per sender and receiver */
#define G_QUIT 2

struct gshare {
	cbcmn_runtime *rt;
	cbcmn_actor_ref recv[G_RECV];
	_Atomic int taken;
	cbcmn_executor_stats at[2], after[2];
	bool settled;
	pthread_t th;
};

/* Takes messages until told to quit. */
static int64_t takes_messages(cbcmn_cx *cx, void *arg)
{
	struct gshare *g = arg;
	for (;;) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		if (m.type == G_QUIT)
			return 0;
		atomic_fetch_add(&g->taken, 1);
	}
}

static void g_send_all(struct gshare *g, cbcmn_runtime *rt, cbcmn_cx *cx)
{
	for (uint64_t i = 0; i < G_MSGS; i++)
		for (int r = 0; r < G_RECV; r++) {
			cbcmn_actor_msg m = {.type = 1, .body.u64 = {i}};
			TASK_CHECK(cbcmn_actor_send(rt, cx, g->recv[r], &m) == 0);
		}
}

static void *g_thread(void *arg)
{
	struct gshare *g = arg;
	g_send_all(g, g->rt, NULL);
	return NULL;
}

static int64_t g_task(cbcmn_cx *cx, void *arg)
{
	g_send_all(arg, NULL, cx);
	return 0;
}

static bool g_match(const cbcmn_executor_stats *e)
{
	return e[1].actors == G_RECV && e[1].actors_receiving == G_RECV &&
	       e[1].actors_waiting == G_RECV && e[1].mailbox_depth == 0 &&
	       e[1].actors_running == 0 && e[0].actors_receiving == 0 && e[0].mailbox_depth == 0;
}

static int64_t gshare_root(cbcmn_cx *cx, void *arg)
{
	struct gshare *g = arg;
	cbcmn_nursery *n, *s;
	TASK_CHECK(cbcmn_nursery_open(g->rt, cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_open(g->rt, cx, &s) == 0);
	/* Mailboxes of one: the senders wait, and both sides hand over. */
	cbcmn_actor_opts on1 = {.mailbox_cap = 1, .placement = CBCMN_PLACE_PINNED, .shard = 1};
	cbcmn_actor_opts on0 = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	for (int r = 0; r < G_RECV; r++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, takes_messages, g, &on1, &g->recv[r]) == 0);
	TASK_CHECK(pthread_create(&g->th, NULL, g_thread, g) == 0);
	cbcmn_actor_ref sender;
	TASK_CHECK(cbcmn_actor_spawn(cx, s, g_task, g, &on0, &sender) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, s) == 0);
	/* Every message taken (the thread's too: it is joined after the run,
	 * not here, where this task's executor may be the receivers' and
	 * would wait for a thread that waits for them), every receiver back
	 * in its receive: no deadline on speed, the watchdog ends a hang. */
	uint64_t t0 = t_now_ns();
	do {
		cbcmn_sleep(cx, 1000000);
		TASK_CHECK(cbcmn_stats_snapshot(g->rt, &(cbcmn_stats){0}, g->at, 2) == 0);
		g->settled = atomic_load(&g->taken) == 2 * G_RECV * G_MSGS && g_match(g->at);
	} while (!g->settled && t_now_ns() - t0 < T_STALL_NS);
	for (int r = 0; r < G_RECV; r++) {
		cbcmn_actor_msg q = {.type = G_QUIT};
		TASK_CHECK(cbcmn_actor_send(NULL, cx, g->recv[r], &q) == 0);
	}
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	t0 = t_now_ns();
	do {
		cbcmn_sleep(cx, 1000000);
		TASK_CHECK(cbcmn_stats_snapshot(g->rt, &(cbcmn_stats){0}, g->after, 2) == 0);
	} while (g->after[1].actors && t_now_ns() - t0 < T_STALL_NS);
	return 0;
}

/* Receivers on executor 1 count themselves into its own share as they wait
 * (and back out when they take a queued message); a plain thread and a task
 * on executor 0 claim their waits and wake them, counting them out of its
 * shared share, thousands of times: the gauges are the sum, exact once
 * everything is still, and nothing is lost between the two writers. */
static void test_gauges_counted_in_and_out_by_other_threads_add_up(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct gshare g = {.rt = rt};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, gshare_root, &g, &res), 0);
	assert_int_equal(pthread_join(g.th, NULL), 0);
	assert_int_equal(res, 0);
	ASSERT_TASK_CHECKS();
	print_message("executor 1: actors %llu waiting %llu receiving %llu mailbox %llu\n",
		      (unsigned long long)g.at[1].actors,
		      (unsigned long long)g.at[1].actors_waiting,
		      (unsigned long long)g.at[1].actors_receiving,
		      (unsigned long long)g.at[1].mailbox_depth);
	assert_int_equal(atomic_load(&g.taken), 2 * G_RECV * G_MSGS);
	assert_true(g.settled);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(g.after[i].actors, 0);
		assert_int_equal(g.after[i].actors_waiting, 0);
		assert_int_equal(g.after[i].actors_receiving, 0);
		assert_int_equal(g.after[i].mailbox_depth, 0);
	}
	t_destroy(rt);
}

/* ---- a gauge is one instant: read while its two shares move ---- */

#define I_READ_NS 2000000000ull /* the readers' time (stress, bounded) */
#define I_READERS 4
#define I_QUIT 2

struct instant {
	cbcmn_runtime *rt;
	cbcmn_actor_ref ref;
	_Atomic int ready, stop;
	int64_t res;
	uint64_t most[I_READERS][3]; /* receiving, waiting, actors: the most seen */
	uint64_t reads[I_READERS];
};

static int64_t i_receiver(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type != I_QUIT)
		;
	return rc;
}

static int64_t instant_root(cbcmn_cx *cx, void *arg)
{
	struct instant *g = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(g->rt, cx, &n) == 0);
	cbcmn_actor_opts on1 = {.mailbox_cap = 1, .placement = CBCMN_PLACE_PINNED, .shard = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, i_receiver, g, &on1, &g->ref) == 0);
	atomic_store(&g->ready, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static void *i_run(void *arg)
{
	struct instant *g = arg;
	if (cbcmn_runtime_run(g->rt, instant_root, g, &g->res) != 0)
		g->res = -1;
	atomic_store(&g->ready, 1); /* a failed run: nobody waits for it */
	return NULL;
}

/* A plain thread: its claims of the receiver's wait and its wakes count out
 * on executor 1's shared share what the receiver counted in on its own. */
static void *i_sender(void *arg)
{
	struct instant *g = arg;
	cbcmn_actor_msg m = {.type = 1};
	while (!atomic_load(&g->stop))
		if (cbcmn_actor_send(g->rt, NULL, g->ref, &m) != 0)
			return NULL;
	m.type = I_QUIT;
	cbcmn_actor_send(g->rt, NULL, g->ref, &m);
	return NULL;
}

struct i_reader {
	struct instant *g;
	int k;
};

static void *i_read(void *arg)
{
	struct i_reader *r = arg;
	uint64_t *most = r->g->most[r->k], t0 = t_now_ns();
	while (t_now_ns() - t0 < I_READ_NS) {
		cbcmn_stats st;
		cbcmn_executor_stats per[2];
		if (cbcmn_stats_snapshot(r->g->rt, &st, per, 2) != 0)
			continue;
		r->g->reads[r->k]++;
		uint64_t v[3] = {per[1].actors_receiving, per[1].actors_waiting, per[1].actors};
		for (int i = 0; i < 3; i++)
			if (v[i] > most[i])
				most[i] = v[i];
	}
	return NULL;
}

/* One actor on executor 1 counts itself in on its own share each receive;
 * a plain thread counts it out on the shared one each send.  Readers,
 * preempted between the two shares, summed a share from before a hop with
 * one from after it: 2 receiving or waiting of 1 actor.  Each read is one
 * instant: never more than 1. */
static void test_gauge_read_while_its_shares_move_is_one_instant(void **state)
{
	(void)state;
	struct instant g = {.rt = t_runtime(2)};
	pthread_t run, snd, rd[I_READERS];
	struct i_reader r[I_READERS];
	assert_int_equal(pthread_create(&run, NULL, i_run, &g), 0);
	while (!atomic_load(&g.ready))
		sched_yield();
	assert_int_equal(pthread_create(&snd, NULL, i_sender, &g), 0);
	for (int k = 0; k < I_READERS; k++) {
		r[k] = (struct i_reader){&g, k};
		assert_int_equal(pthread_create(&rd[k], NULL, i_read, &r[k]), 0);
	}
	for (int k = 0; k < I_READERS; k++)
		assert_int_equal(pthread_join(rd[k], NULL), 0);
	atomic_store(&g.stop, 1);
	assert_int_equal(pthread_join(snd, NULL), 0);
	assert_int_equal(pthread_join(run, NULL), 0);
	assert_int_equal(g.res, 0);
	ASSERT_TASK_CHECKS();
	for (int k = 0; k < I_READERS; k++) {
		print_message("reader %d: %llu reads, the most receiving %llu waiting %llu actors %llu\n",
			      k, (unsigned long long)g.reads[k], (unsigned long long)g.most[k][0],
			      (unsigned long long)g.most[k][1], (unsigned long long)g.most[k][2]);
		assert_true(g.reads[k] > 0);
		for (int i = 0; i < 3; i++)
			assert_true(g.most[k][i] <= 1);
	}
	t_destroy(g.rt);
}

/* The bug: a reader reads a gauge's own share between two reads of its
 * shared one that agree (watch.c, agauge()), but agreeing reads could
 * still hide a move out and back in between them (a sender's -1 and
 * another's +1: the reader then summed an own share from after a hop
 * with a shared one from before it).  Now a move on the shared share
 * also moves its count: the word after -1 and +1 is not the word before,
 * and the gauge is the same.  On a plain thread: the shared share, as a
 * sender or a waker on another executor counts. */
static void test_regression_shared_share_counts_a_move_out_and_back(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct cbcmn__exec *e = ((struct cbcmn_runtime *)rt)->exec[0];
	_Atomic int64_t shared = 0, own = 0;
	for (int64_t start = -2; start <= 2; start++) {
		cbcmn__agauge_add(e, &shared, &own, start);
		int64_t before = atomic_load(&shared);
		cbcmn__agauge_add(e, &shared, &own, -1);
		cbcmn__agauge_add(e, &shared, &own, 1);
		int64_t after = atomic_load(&shared);
		assert_true(after != before);
		assert_int_equal(cbcmn__seg_agauge(after, own), cbcmn__seg_agauge(before, own));
		cbcmn__agauge_add(e, &shared, &own, -start);
		assert_int_equal(cbcmn__seg_agauge(atomic_load(&shared), own), 0);
	}
	assert_int_equal(atomic_load(&own), 0); /* a plain thread: the shared share */
	t_destroy(rt);
	/* Each share far past 32 bits (2^32 - 2 remote sends, as many
	 * receives less 4): the gauge is their sum all the same. */
	uint64_t sends = 4294967294ull;
	assert_int_equal(cbcmn__seg_agauge((int64_t)(sends * (uint64_t)(CBCMN__SEG_AGAUGE_MOVE + 1)),
					   -(int64_t)4294967290LL),
			 4);
	assert_int_equal(cbcmn__seg_agauge(CBCMN__SEG_AGAUGE_MOVE + 3, -1), 2);
}

/* The bug: a gauge past 2^31 - 1 on one executor read 0 (the shares were
 * summed modulo 2^32 and read as signed).  Now modulo 2^40: a gauge of
 * 2^31 + 5, from either share or both, reads 2^31 + 5; a sum a moment
 * below 0 (a count out before its count in) still reads below 0, which
 * the reader shows as 0 (watch.c). */
static void test_regression_a_gauge_past_2_31_reads_its_value(void **state)
{
	(void)state;
	const int64_t big = ((int64_t)1 << 31) + 5;
	/* Two remote adds (2^31, then 5) on the shared share. */
	const int64_t shared = 2 * CBCMN__SEG_AGAUGE_MOVE + big;
	assert_int_equal(cbcmn__seg_agauge(shared, 0), big);
	assert_int_equal(cbcmn__seg_agauge(0, big), big);
	/* 10 counted in remotely, 5 of them out on the executor itself. */
	assert_int_equal(cbcmn__seg_agauge(shared + 10 * (CBCMN__SEG_AGAUGE_MOVE + 1), -5), big + 5);
	assert_int_equal(cbcmn__seg_agauge(CBCMN__SEG_AGAUGE_MOVE - 1, 0), -1);
	assert_int_equal(cbcmn__seg_agauge(((int64_t)1 << 39) - 1, 0), ((int64_t)1 << 39) - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_restarts_are_counted_per_executor),
		T_WATCHED_TEST(test_regression_a_gauge_past_2_31_reads_its_value),
		T_WATCHED_TEST(test_mailbox_depth_hist_counts_a_known_depth),
		T_WATCHED_TEST(test_backpressure_is_counted_where_the_sender_runs),
		T_WATCHED_TEST(test_cancelled_waiting_sender_is_counted_once),
		T_WATCHED_TEST(test_send_to_own_full_mailbox_is_backpressure),
		T_WATCHED_TEST(test_gauges_counted_in_and_out_by_other_threads_add_up),
		T_WATCHED_TEST(test_gauge_read_while_its_shares_move_is_one_instant),
		T_WATCHED_TEST(test_regression_shared_share_counts_a_move_out_and_back),
		cmocka_unit_test(test_hist_quantile_bounds),
		cmocka_unit_test(test_hist_quantile_of_a_corrupt_histogram_does_not_wrap),
	};
	return cmocka_run_group_tests_name("actor_stats", tests, NULL, NULL);
}
