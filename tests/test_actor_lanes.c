/* test_actor_lanes: actor sends across executors go over the lanes (seed
 * 003 "Inter-executor communication"): a place reserved in the mailbox,
 * the message in a lane message of the sender's pool, put in the mailbox
 * by the receiver's home executor at its drain, the pointer back as the
 * acknowledgement that returns it to the pool; the send returns at the
 * post.  Order per pair with moving senders and a moving receiver, no
 * room left (the lock path, behind the sender's own messages in lanes),
 * cancellation after the post, a full lane, acknowledgements after the
 * receiver's halt and at destroy, a dead or stopped receiver. */
#include "helpers.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "actor_test.h"
#include "cbcmn_io.h"
#include "../lib/fault.h"
#include "../lib/runtime.h"

/* Executor id's statistics (from a task too: no cmocka assertion). */
static cbcmn_executor_stats exec_stats(cbcmn_runtime *rt, uint32_t id)
{
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	memset(per, 0, sizeof(per));
	TASK_CHECK(cbcmn_stats_snapshot(rt, &st, per, 2) == 0);
	return per[id];
}

/* Executor id's lane messages sent so far (its counter). */
static uint64_t xmsgs_sent(cbcmn_runtime *rt, uint32_t id)
{
	return exec_stats(rt, id).xmsgs_sent;
}

/* Waits (bounded) until *v reaches want. */
static bool wait_for(cbcmn_cx *cx, _Atomic long *v, long want)
{
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(v) < want) {
		if (t_now_ns() > end)
			return false;
		if (cx)
			cbcmn_sleep(cx, 100000);
		else
			usleep(100);
	}
	return true;
}

/* Waits (bounded) until executor id has sent want lane messages in all. */
static bool wait_xmsgs(cbcmn_cx *cx, uint32_t id, uint64_t want)
{
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (xmsgs_sent(rt, id) < want) {
		if (t_now_ns() > end)
			return false;
		cbcmn_sleep(cx, 100000);
	}
	return true;
}

/* A busy executor: spins without a checkpoint until released, so that its
 * mail is not drained meanwhile (the runtimes here have no stall monitor,
 * which would move work off it). */
struct hog {
	_Atomic int running, release;
};

static int64_t hog_task(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct hog *h = arg;
	atomic_store(&h->running, 1);
	while (!atomic_load(&h->release))
		;
	return 0;
}

static cbcmn_runtime *lanes_runtime(void)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.stall_ns = CBCMN_STALL_OFF; /* the hogs above hold an executor on purpose */
	return t_runtime_cfg(&cfg);
}

/* ---- a receiver that counts, checks order per sender, ends at QUIT ---- */

#define MAXS 320

struct rx {
	cbcmn_actor_ref a;
	_Atomic long got, bad, dropped;
	_Atomic int go; /* 0: the receiver waits before its first receive */
	bool naps;      /* it sleeps now and then: woken wherever there is room */
	_Atomic long started; /* its task runs: its lanes are open */
	uint64_t next[MAXS];
	_Atomic uint32_t exec_moves;
};

static int64_t rx_actor(cbcmn_cx *cx, void *arg)
{
	struct rx *r = arg;
	atomic_store(&r->started, 1);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&r->go) && t_now_ns() < end)
		cbcmn_sleep(cx, 100000);
	uint32_t at = cbcmn_cx_executor(cx);
	for (;;) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		if (m.type == M_QUIT)
			return 0;
		uint32_t now = cbcmn_cx_executor(cx);
		if (now != at)
			atomic_fetch_add(&r->exec_moves, 1);
		at = now;
		uint64_t s = m.body.u64[0], seq = m.body.u64[1];
		if (s >= MAXS || seq != r->next[s])
			atomic_fetch_add(&r->bad, 1);
		else
			r->next[s]++;
		atomic_fetch_add(&r->got, 1);
		if (r->naps && r->next[s] % 16 == 0)
			cbcmn_sleep(cx, 50000);
	}
}

static void rx_drop(void *state, const cbcmn_actor_msg *m)
{
	struct rx *r = state;
	if (m->type == M_DATA)
		atomic_fetch_add(&r->dropped, 1);
}

static int rx_spawn(cbcmn_cx *cx, cbcmn_nursery *n, struct rx *r, uint32_t placement,
		    uint32_t shard, uint32_t cap)
{
	cbcmn_actor_opts o = {.mailbox_cap = cap, .placement = placement, .shard = shard,
			      .drop = rx_drop};
	return cbcmn_actor_spawn(cx, n, rx_actor, r, &o, &r->a);
}

static int quit(cbcmn_cx *cx, cbcmn_actor_ref a)
{
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	return cbcmn_actor_send(NULL, cx, a, &q);
}

/* ---- the messages go over the lanes ---- */

struct over {
	struct rx r;
	cbcmn_runtime *rt;
	uint64_t x0, x1;
};

static int64_t over_sender(cbcmn_cx *cx, void *arg)
{
	struct over *o = arg;
	TASK_CHECK(wait_for(cx, &o->r.started, 1)); /* before, sends take the lock */
	o->x0 = xmsgs_sent(o->rt, 0);
	for (uint64_t i = 0; i < 32; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, o->r.a, &m) == 0);
	}
	o->x1 = xmsgs_sent(o->rt, 0);
	atomic_store(&o->r.go, 1);
	return quit(cx, o->r.a);
}

static int64_t over_main(cbcmn_cx *cx, void *arg)
{
	struct over *o = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(rx_spawn(cx, n, &o->r, CBCMN_PLACE_PINNED, 1, 64) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, over_sender, o, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* The receiver does not receive while the 32 messages are sent (no wake
 * is needed): each still made a lane message, its own. */
static void test_cross_executor_sends_go_over_the_lanes(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct over o = {.rt = rt};
	t_run(rt, over_main, &o, 0);
	ASSERT_TASK_CHECKS();
	assert_true(o.x1 - o.x0 >= 32);
	assert_int_equal(atomic_load(&o.r.got), 32);
	assert_int_equal(atomic_load(&o.r.bad), 0);
	t_destroy(rt);
}

/* ---- order per pair: moving senders, a moving receiver ---- */

#define MOVERS 4

struct mv {
	struct rx r;
	long per;
	_Atomic int ids;
	_Atomic long sender_moves;
	_Atomic int senders_done;
};

static int64_t mv_sender(cbcmn_cx *cx, void *arg)
{
	struct mv *v = arg;
	uint64_t id = (uint64_t)atomic_fetch_add(&v->ids, 1);
	uint32_t at = cbcmn_cx_executor(cx);
	for (long i = 0; i < v->per; i++) {
		cbcmn_actor_msg m = msg(M_DATA, id, (uint64_t)i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, v->r.a, &m) == 0);
		if (i % 5 == 0)
			cbcmn_yield(cx); /* stealable on two executors: moves */
		if (i % 64 == 0)
			cbcmn_sleep(cx, 50000); /* woken wherever there is room */
		uint32_t now = cbcmn_cx_executor(cx);
		if (now != at)
			atomic_fetch_add(&v->sender_moves, 1);
		at = now;
	}
	return 0;
}

/* Holds executor 1 (no checkpoint) for 300 us at a time, 300 us apart,
 * until the senders are done: what is runnable there meanwhile (the
 * receiver, woken) may be taken by executor 0, idle once its senders
 * wait for room; so the receiver moves with messages in flight. */
static int64_t mv_shaker(cbcmn_cx *cx, void *arg)
{
	struct mv *v = arg;
	while (!atomic_load(&v->senders_done)) {
		uint64_t end = t_now_ns() + 300000;
		while (t_now_ns() < end)
			;
		cbcmn_sleep(cx, 300000);
	}
	return 0;
}

static int64_t mv_main(cbcmn_cx *cx, void *arg)
{
	struct mv *v = arg;
	cbcmn_nursery *nr, *ns, *nk;
	TASK_CHECK(open_n(cx, &nr) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	TASK_CHECK(open_n(cx, &nk) == 0);
	atomic_store(&v->r.go, 1);
	TASK_CHECK(rx_spawn(cx, nr, &v->r, CBCMN_PLACE_STEALABLE, 0, 4) == 0);
	for (int i = 0; i < MOVERS; i++)
		TASK_CHECK(cbcmn_nursery_spawn_stealable(cx, ns, mv_sender, v, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, nk, 1, mv_shaker, v, NULL) == 0);
	/* Joined: their messages are in the mailbox (a task's end waits for
	 * its sends in lanes), so the QUIT comes after them all. */
	TASK_CHECK(cbcmn_nursery_await_all(cx, ns) == 0);
	atomic_store(&v->senders_done, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nk) == 0);
	TASK_CHECK(quit(cx, v->r.a) == 0);
	return cbcmn_nursery_await_all(cx, nr);
}

/* Senders that move between executors between two sends and a receiver
 * that moves while messages are in flight: each sender's numbers arrive
 * 0, 1, 2... (a lane is FIFO, and a sender changes lanes only once its
 * messages in the last one are put).  Rounds until both kinds of move
 * were seen, so that the check covered them. */
static void test_order_per_pair_with_moving_senders_and_receiver(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	long sender_moves = 0, receiver_moves = 0;
	uint64_t lane_msgs = 0;
	for (int round = 0; round < 40 && (!sender_moves || !receiver_moves); round++) {
		struct mv v = {.per = STRESS(1500), .r.naps = true};
		uint64_t x = xmsgs_sent(rt, 0) + xmsgs_sent(rt, 1);
		t_run(rt, mv_main, &v, 0);
		ASSERT_TASK_CHECKS();
		lane_msgs += xmsgs_sent(rt, 0) + xmsgs_sent(rt, 1) - x;
		assert_int_equal(atomic_load(&v.r.bad), 0);
		assert_int_equal(atomic_load(&v.r.got), MOVERS * v.per);
		for (int s = 0; s < MOVERS; s++)
			assert_int_equal(v.r.next[s], (uint64_t)v.per);
		sender_moves += atomic_load(&v.sender_moves);
		receiver_moves += atomic_load(&v.r.exec_moves);
	}
	assert_true(sender_moves > 0);
	assert_true(receiver_moves > 0);
	assert_true(lane_msgs > 0);
	t_destroy(rt);
}

/* ---- back-pressure met at the drain ---- */

struct bp {
	struct rx r;
	cbcmn_runtime *rt;
	int rc_try, rc_timed, rc_zero;
	_Atomic long probed, blocked_sent;
	uint64_t x0, x1;
};

static int64_t bp_sender(cbcmn_cx *cx, void *arg)
{
	struct bp *b = arg;
	TASK_CHECK(wait_for(cx, &b->r.started, 1));
	b->x0 = xmsgs_sent(b->rt, 0);
	for (uint64_t i = 0; i < 2; i++) { /* fill the 2-slot mailbox */
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, b->r.a, &m) == 0);
	}
	/* No place left to reserve (in lanes or in the ring, whichever):
	 * the lock path says full, nothing is kept. */
	cbcmn_actor_msg lost = msg(M_DATA, 0, 100);
	b->rc_try = cbcmn_actor_try_send(NULL, cx, b->r.a, &lost);
	b->rc_zero = cbcmn_actor_send_timeout(NULL, cx, b->r.a, &lost, 0);
	b->rc_timed = cbcmn_actor_send_timeout(NULL, cx, b->r.a, &lost, 2000000);
	b->x1 = xmsgs_sent(b->rt, 0);
	atomic_store(&b->probed, 1);
	/* A blocking send waits for room, then lands after the first two. */
	cbcmn_actor_msg m = msg(M_DATA, 0, 2);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, b->r.a, &m) == 0);
	atomic_store(&b->blocked_sent, 1);
	return quit(cx, b->r.a);
}

static int64_t bp_main(cbcmn_cx *cx, void *arg)
{
	struct bp *b = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(rx_spawn(cx, n, &b->r, CBCMN_PLACE_PINNED, 1, 2) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, bp_sender, b, NULL) == 0);
	/* The receiver makes room only once the sender has met the full
	 * mailbox, and its blocking send has waited a while. */
	TASK_CHECK(wait_for(cx, &b->probed, 1));
	cbcmn_sleep(cx, 5000000);
	TASK_CHECK(atomic_load(&b->blocked_sent) == 0);
	atomic_store(&b->r.go, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_no_room_to_reserve_is_back_pressure(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct bp b = {.rt = rt};
	uint64_t bp0 = exec_stats(rt, 0).actor_backpressure;
	t_run_pinned(rt, 1, bp_main, &b);
	ASSERT_TASK_CHECKS();
	assert_int_equal(b.rc_try, -EAGAIN);
	assert_int_equal(b.rc_zero, -ETIMEDOUT);
	assert_int_equal(b.rc_timed, -ETIMEDOUT);
	assert_true(b.x1 - b.x0 >= 2); /* the two that had room went over the lane */
	/* 0, 1, 2 in order; the refused message never came. */
	assert_int_equal(atomic_load(&b.r.got), 3);
	assert_int_equal(atomic_load(&b.r.bad), 0);
	assert_true(exec_stats(rt, 0).actor_backpressure - bp0 >= 4);
	t_destroy(rt);
}

/* ---- a send returns at its post; cancellation after it ---- */

struct cs {
	struct rx r;
	struct hog hog;
	cbcmn_nursery *ns;
	_Atomic long done;
	int rc;
	bool hog_sender_side; /* hold the sender's executor (ack) or the receiver's (drain) */
};

static int64_t cs_sender(cbcmn_cx *cx, void *arg)
{
	struct cs *c = arg;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	c->rc = cbcmn_actor_send(NULL, cx, c->r.a, &m);
	atomic_store(&c->done, 1);
	/* Cancelled now, with its message in the lane or its
	 * acknowledgement on the way back: it notices here. */
	while (cbcmn_sleep(cx, 100000) == 0)
		;
	return 0;
}

/* On the executor that is not held. */
static int64_t cs_main(cbcmn_cx *cx, void *arg)
{
	struct cs *c = arg;
	cbcmn_nursery *nr, *nh;
	TASK_CHECK(open_n(cx, &nr) == 0);
	TASK_CHECK(open_n(cx, &nh) == 0);
	TASK_CHECK(open_n(cx, &c->ns) == 0);
	atomic_store(&c->r.go, 1);
	TASK_CHECK(rx_spawn(cx, nr, &c->r, CBCMN_PLACE_PINNED, 1, 8) == 0);
	TASK_CHECK(wait_for(cx, &c->r.started, 1));
	if (c->hog_sender_side) {
		/* The hog holds executor 0 once the sender posted: the
		 * drain (executor 1) puts the message, and its
		 * acknowledgement waits on executor 0. */
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, c->ns, 0, cs_sender, c, NULL) == 0);
		TASK_CHECK(wait_for(cx, &c->done, 1));
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, nh, 0, hog_task, &c->hog, NULL) == 0);
		TASK_CHECK(wait_for(cx, &c->r.got, 1));
	} else {
		/* The hog holds executor 1 (the receiver's home): the
		 * message waits in the lane, undrained, and the send has
		 * returned all the same. */
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, nh, 1, hog_task, &c->hog, NULL) == 0);
		while (!atomic_load(&c->hog.running))
			cbcmn_sleep(cx, 100000);
		uint64_t x0 = xmsgs_sent(cbcmn_cx_runtime(cx), 0);
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, c->ns, 0, cs_sender, c, NULL) == 0);
		TASK_CHECK(wait_for(cx, &c->done, 1));
		TASK_CHECK(xmsgs_sent(cbcmn_cx_runtime(cx), 0) > x0); /* posted */
		TASK_CHECK(atomic_load(&c->r.got) == 0);              /* not put yet */
	}
	TASK_CHECK(cbcmn_nursery_cancel(c->ns) == 0);
	atomic_store(&c->hog.release, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, c->ns) == CBCMN_ECANCELED);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nh) == 0);
	TASK_CHECK(wait_for(cx, &c->r.got, 1));
	TASK_CHECK(quit(cx, c->r.a) == 0);
	return cbcmn_nursery_await_all(cx, nr);
}

/* Posted, then cancelled before the drain: delivered, the send said 0. */
static void test_send_cancelled_after_its_post_is_delivered(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct cs c = {.hog_sender_side = false};
	t_run_pinned(rt, 0, cs_main, &c);
	ASSERT_TASK_CHECKS();
	assert_int_equal(c.rc, 0);
	assert_int_equal(atomic_load(&c.r.got), 1);
	assert_int_equal(atomic_load(&c.r.bad), 0);
	t_destroy(rt);
}

/* Put, then cancelled before the acknowledgement came back: the same. */
static void test_send_cancelled_before_its_ack_is_delivered(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct cs c = {.hog_sender_side = true};
	t_run_pinned(rt, 1, cs_main, &c);
	ASSERT_TASK_CHECKS();
	assert_int_equal(c.rc, 0);
	assert_int_equal(atomic_load(&c.r.got), 1);
	t_destroy(rt);
}

/* Cancelled at any moment: each send's result says whether its message
 * was delivered, never both, never neither. */
struct cr {
	struct rx r;
	_Atomic long ok;
	cbcmn_nursery *ns;
};

/* One sender at a time, numbering on from the last one's delivered
 * messages: the receiver sees one sequence. */
static int64_t cr_sender(cbcmn_cx *cx, void *arg)
{
	struct cr *c = arg;
	for (;;) {
		cbcmn_actor_msg m = msg(M_DATA, 0, (uint64_t)atomic_load(&c->ok));
		int rc = cbcmn_actor_send(NULL, cx, c->r.a, &m);
		if (rc == 0) {
			atomic_fetch_add(&c->ok, 1);
			continue;
		}
		TASK_CHECK(rc == CBCMN_ECANCELED);
		return rc;
	}
}

static int64_t cr_main(cbcmn_cx *cx, void *arg)
{
	struct cr *c = arg;
	cbcmn_nursery *nr;
	TASK_CHECK(open_n(cx, &nr) == 0);
	atomic_store(&c->r.go, 1);
	TASK_CHECK(rx_spawn(cx, nr, &c->r, CBCMN_PLACE_PINNED, 1, 4) == 0);
	for (int round = 0; round < STRESS(40); round++) {
		TASK_CHECK(open_n(cx, &c->ns) == 0);
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, c->ns, 0, cr_sender, c, NULL) == 0);
		cbcmn_sleep(cx, (uint64_t)(round % 7) * 37000);
		cbcmn_nursery_cancel(c->ns);
		cbcmn_nursery_await_all(cx, c->ns);
	}
	TASK_CHECK(quit(cx, c->r.a) == 0);
	return cbcmn_nursery_await_all(cx, nr);
}

static void test_sender_cancelled_at_any_point_delivered_iff_zero(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct cr c = {0};
	t_run_pinned(rt, 0, cr_main, &c);
	ASSERT_TASK_CHECKS();
	/* One sequence (sender 0, numbers counting on across rounds): no
	 * gap, no duplicate, and exactly the sends that returned 0. */
	assert_int_equal(atomic_load(&c.r.bad), 0);
	assert_int_equal(atomic_load(&c.r.got), atomic_load(&c.ok));
	t_destroy(rt);
}

/* ---- a full lane: the rest waits on the sender's backlog, in order ---- */

#define LANE_SENDERS 300 /* more than a lane's 256 entries */

struct fl {
	struct rx r;
	struct hog hog;
	_Atomic int ids;
};

static int64_t fl_sender(cbcmn_cx *cx, void *arg)
{
	struct fl *f = arg;
	uint64_t id = (uint64_t)atomic_fetch_add(&f->ids, 1);
	for (uint64_t i = 0; i < 2; i++) {
		cbcmn_actor_msg m = msg(M_DATA, id, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, f->r.a, &m) == 0);
	}
	return 0;
}

static int64_t fl_main(cbcmn_cx *cx, void *arg)
{
	struct fl *f = arg;
	cbcmn_nursery *nr, *nh, *ns;
	TASK_CHECK(open_n(cx, &nr) == 0);
	TASK_CHECK(open_n(cx, &nh) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	atomic_store(&f->r.go, 1);
	TASK_CHECK(rx_spawn(cx, nr, &f->r, CBCMN_PLACE_PINNED, 1, 2 * LANE_SENDERS) == 0);
	TASK_CHECK(wait_for(cx, &f->r.started, 1));
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, nh, 1, hog_task, &f->hog, NULL) == 0);
	while (!atomic_load(&f->hog.running))
		cbcmn_sleep(cx, 100000);
	uint64_t x0 = xmsgs_sent(cbcmn_cx_runtime(cx), 0);
	for (int i = 0; i < LANE_SENDERS; i++)
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, ns, 0, fl_sender, f, NULL) == 0);
	/* Every sender posted its first message: 300 in a lane of 256. */
	TASK_CHECK(wait_xmsgs(cx, 0, x0 + LANE_SENDERS));
	atomic_store(&f->hog.release, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, ns) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nh) == 0);
	TASK_CHECK(quit(cx, f->r.a) == 0);
	return cbcmn_nursery_await_all(cx, nr);
}

static void test_full_lane_backlogs_in_order(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct fl f = {0};
	uint64_t bp0 = exec_stats(rt, 0).ring_msgs_backpressure;
	t_run_pinned(rt, 0, fl_main, &f);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&f.r.bad), 0);
	assert_int_equal(atomic_load(&f.r.got), 2 * LANE_SENDERS);
	/* The lane overflowed onto executor 0's backlog. */
	assert_true(exec_stats(rt, 0).ring_msgs_backpressure - bp0 > 0);
	t_destroy(rt);
}

/* ---- a dead receiver; one that halts with sends in flight; destroy ---- */

struct dr {
	struct rx r;
	cbcmn_runtime *rt;
	_Atomic long ok;
	int rc_dead;
	uint64_t x0, x1;
	long stop_after;
};

static int64_t dr_sender(cbcmn_cx *cx, void *arg)
{
	struct dr *d = arg;
	for (uint64_t i = 0;; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 1, i);
		int rc = cbcmn_actor_send(NULL, cx, d->r.a, &m);
		if (rc) {
			TASK_CHECK(rc == -ESRCH);
			break;
		}
		atomic_fetch_add(&d->ok, 1);
		if (i == (uint64_t)d->stop_after)
			TASK_CHECK(cbcmn_actor_stop(NULL, cx, d->r.a, 0) == 0);
	}
	/* Dead: a send to it fails, through the lock (its lanes word says
	 * closed), without touching its freed mailbox. */
	d->x0 = xmsgs_sent(d->rt, 0);
	cbcmn_actor_msg m = msg(M_DATA, 1, 0);
	d->rc_dead = cbcmn_actor_send(NULL, cx, d->r.a, &m);
	d->x1 = xmsgs_sent(d->rt, 0);
	return 0;
}

static int64_t dr_main(cbcmn_cx *cx, void *arg)
{
	struct dr *d = arg;
	cbcmn_nursery *nr, *ns;
	TASK_CHECK(open_n(cx, &nr) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	TASK_CHECK(rx_spawn(cx, nr, &d->r, CBCMN_PLACE_PINNED, 1, 16) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, ns, 0, dr_sender, d, NULL) == 0);
	cbcmn_sleep(cx, 1000000);
	atomic_store(&d->r.go, 1); /* receives while the sends go on */
	TASK_CHECK(cbcmn_nursery_await_all(cx, ns) == 0);
	cbcmn_nursery_await_all(cx, nr); /* -ESHUTDOWN: stopped */
	return 0;
}

/* Stopped while sends are in flight: every send that returned 0 was
 * received or dropped at the halt (counted by the drop callback: its
 * task waited for its places reserved in lanes before halting); after
 * it, -ESRCH.  Then the runtime is destroyed at once (ASan: no leak of
 * lane messages, wherever their acknowledgements are). */
static void test_dead_receiver_esrch_and_nothing_lost(void **state)
{
	(void)state;
	for (int round = 0; round < 4; round++) {
		cbcmn_runtime *rt = lanes_runtime();
		struct dr d = {.rt = rt, .stop_after = 20 + round * 7};
		t_run_pinned(rt, 0, dr_main, &d);
		ASSERT_TASK_CHECKS();
		assert_int_equal(d.rc_dead, -ESRCH);
		assert_int_equal(atomic_load(&d.r.bad), 0);
		assert_int_equal(atomic_load(&d.r.got) + atomic_load(&d.r.dropped),
				 atomic_load(&d.ok));
		t_destroy(rt);
	}
}

/* A recycled slot: the old reference's send crosses to the slot's
 * executor and finds the new generation there: -ESRCH, and the new actor
 * gets nothing of it. */
struct rc_ {
	struct rx old, fresh;
	int rc_old, rc_new;
};

static int64_t quick_actor(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t rc_sender(cbcmn_cx *cx, void *arg)
{
	struct rc_ *r = arg;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	r->rc_old = cbcmn_actor_send(NULL, cx, r->old.a, &m);
	r->rc_new = cbcmn_actor_send(NULL, cx, r->fresh.a, &m);
	return quit(cx, r->fresh.a);
}

static int64_t rc_main(cbcmn_cx *cx, void *arg)
{
	struct rc_ *r = arg;
	cbcmn_nursery *n0, *n;
	TASK_CHECK(open_n(cx, &n0) == 0);
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n0, quick_actor, NULL, &o, &r->old.a) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n0) == 0);
	TASK_CHECK(open_n(cx, &n) == 0);
	atomic_store(&r->fresh.go, 1);
	TASK_CHECK(rx_spawn(cx, n, &r->fresh, CBCMN_PLACE_PINNED, 1, 4) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, rc_sender, r, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_recycled_reference_is_esrch_over_the_lane(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct rc_ r = {0};
	t_run_pinned(rt, 1, rc_main, &r);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r.rc_old, -ESRCH);
	assert_int_equal(r.rc_new, 0);
	assert_int_equal(atomic_load(&r.fresh.got), 1);
	assert_int_equal(atomic_load(&r.fresh.bad), 0);
	t_destroy(rt);
}

/* ---- no room: the lock path waits for the sender's messages in lanes ---- */

struct lw {
	struct rx r;
	struct hog hog;
	_Atomic long posted, third;
};

static int64_t lw_sender(cbcmn_cx *cx, void *arg)
{
	struct lw *w = arg;
	for (uint64_t i = 0; i < 2; i++) { /* both places, reserved in lanes */
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, w->r.a, &m) == 0);
	}
	atomic_store(&w->posted, 1);
	/* No place: the lock path, which must not overtake 0 and 1, still
	 * in the lane of the held executor. */
	cbcmn_actor_msg m = msg(M_DATA, 0, 2);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, w->r.a, &m) == 0);
	atomic_store(&w->third, 1);
	return quit(cx, w->r.a);
}

static int64_t lw_main(cbcmn_cx *cx, void *arg)
{
	struct lw *w = arg;
	cbcmn_nursery *nr, *nh, *ns;
	TASK_CHECK(open_n(cx, &nr) == 0);
	TASK_CHECK(open_n(cx, &nh) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	atomic_store(&w->r.go, 1);
	TASK_CHECK(rx_spawn(cx, nr, &w->r, CBCMN_PLACE_PINNED, 1, 2) == 0);
	TASK_CHECK(wait_for(cx, &w->r.started, 1));
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, nh, 1, hog_task, &w->hog, NULL) == 0);
	while (!atomic_load(&w->hog.running))
		cbcmn_sleep(cx, 100000);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, ns, 0, lw_sender, w, NULL) == 0);
	TASK_CHECK(wait_for(cx, &w->posted, 1));
	cbcmn_sleep(cx, 3000000);
	TASK_CHECK(atomic_load(&w->third) == 0); /* waits for its own two */
	TASK_CHECK(atomic_load(&w->r.got) == 0);
	atomic_store(&w->hog.release, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, ns) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nh) == 0);
	return cbcmn_nursery_await_all(cx, nr);
}

static void test_no_room_waits_for_own_messages_in_lanes(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct lw w = {0};
	t_run_pinned(rt, 0, lw_main, &w);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&w.r.got), 3);
	assert_int_equal(atomic_load(&w.r.bad), 0); /* 0, 1, 2 */
	t_destroy(rt);
}

/* ---- a wait for messages in a held executor's lane parks ---- */

/* Picks (starts and resumes) executor 0 may make while its one task waits
 * for its messages in a held lane: the waiter's few yields before it
 * parks, the watcher's sleeps.  A waiter that yields until the lane moves
 * makes one per yield, thousands in the window below. */
#define PK_PICKS 64

struct pk {
	struct rx r;
	struct hog hog;
	_Atomic long ended;
	uint64_t picks;
};

/* Two sends into the held executor's lane, then its end, which waits
 * for them to be put (so that a DOWN would not overtake them). */
static int64_t pk_sender(cbcmn_cx *cx, void *arg)
{
	struct pk *p = arg;
	for (uint64_t i = 0; i < 2; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, p->r.a, &m) == 0);
	}
	atomic_store(&p->ended, 1);
	return 0;
}

/* Into n[0..2]: a receiver on executor held, a hog holding it, then a
 * sender on executor 0 whose end waits for its two messages in held's
 * lane (parked, once its yields are over). */
static void pk_hold(cbcmn_cx *cx, struct pk *p, uint32_t held, cbcmn_nursery *n[3])
{
	for (int i = 0; i < 3; i++)
		TASK_CHECK(open_n(cx, &n[i]) == 0);
	atomic_store(&p->r.go, 1);
	TASK_CHECK(rx_spawn(cx, n[0], &p->r, CBCMN_PLACE_PINNED, held, 8) == 0);
	TASK_CHECK(wait_for(cx, &p->r.started, 1));
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n[1], held, hog_task, &p->hog, NULL) == 0);
	while (!atomic_load(&p->hog.running))
		cbcmn_sleep(cx, 100000);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n[2], 0, pk_sender, p, NULL) == 0);
	TASK_CHECK(wait_for(cx, &p->ended, 1));
}

/* pk_hold()'s end: nothing landed yet; the hog released, all ended. */
static int64_t pk_release(cbcmn_cx *cx, struct pk *p, cbcmn_nursery *n[3])
{
	TASK_CHECK(atomic_load(&p->r.got) == 0);
	atomic_store(&p->hog.release, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n[2]) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n[1]) == 0);
	TASK_CHECK(quit(cx, p->r.a) == 0);
	return cbcmn_nursery_await_all(cx, n[0]);
}

static int64_t pk_main(cbcmn_cx *cx, void *arg)
{
	struct pk *p = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n[3];
	pk_hold(cx, p, 1, n);
	uint64_t h0 = exec_stats(rt, 0).local_hits;
	cbcmn_sleep(cx, 20000000); /* the sender's end waits out the hog */
	p->picks = exec_stats(rt, 0).local_hits - h0;
	return pk_release(cx, p, n);
}

/* Issue 16: a task waiting for its own messages in the lane of an
 * executor held by one run (a blocking call, a loop) yielded in a loop
 * until the run ended, a CPU burnt for its length; it parks, and the
 * landing wakes it. */
static void test_wait_for_own_messages_in_a_held_lane_parks(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct pk p = {0};
	t_run_pinned(rt, 0, pk_main, &p);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&p.r.got), 2);
	assert_int_equal(atomic_load(&p.r.bad), 0);
	assert_true(p.picks < PK_PICKS);
	t_destroy(rt);
}

/* ---- a landing wakes only the parked waits it may end ---- */

/* Landings of other lanes while a task waits parked for its own messages
 * in a held executor's lane: they woke every parked waiter of the
 * runtime to look again (rvarob), a pick of its executor each. */
#define PW_MSGS 10000
#define PW_PICKS 4 /* it runs nothing else: none (before: 91 to 200) */

struct pw {
	struct pk p;      /* the parked wait: lane 0 -> 2, executor 2 held */
	struct rx t;      /* the traffic's receiver, on executor 3 */
	_Atomic long sent; /* the traffic's sender, on executor 1 */
};

static int64_t pw_traffic(cbcmn_cx *cx, void *arg)
{
	struct pw *w = arg;
	for (uint64_t i = 0; i < PW_MSGS; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, w->t.a, &m) == 0);
		atomic_fetch_add(&w->sent, 1);
	}
	return 0;
}

static int64_t pw_main(cbcmn_cx *cx, void *arg)
{
	struct pw *w = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n[3];
	pk_hold(cx, &w->p, 2, n);
	atomic_store(&w->t.go, 1);
	TASK_CHECK(rx_spawn(cx, n[0], &w->t, CBCMN_PLACE_PINNED, 3, 64) == 0);
	TASK_CHECK(wait_for(cx, &w->t.started, 1));
	/* The sender's end is over its yields, parked: executor 0's picks
	 * stand still for 2 ms (a fixed 2 ms sleep counted a yield or more
	 * of a waiter kept off its CPU that long by a loaded host; one that
	 * never parks never stands still, and fails below). */
	uint64_t h0 = exec_stats(rt, 0).local_hits;
	for (uint64_t end = t_now_ns() + T_STALL_NS, h; t_now_ns() < end; h0 = h) {
		cbcmn_sleep(cx, 2000000);
		if ((h = exec_stats(rt, 0).local_hits) == h0)
			break;
	}
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n[2], 1, pw_traffic, w, NULL) == 0);
	TASK_CHECK(wait_for(cx, &w->t.got, PW_MSGS));
	w->p.picks = exec_stats(rt, 0).local_hits - h0;
	TASK_CHECK(quit(cx, w->t.a) == 0);
	return pk_release(cx, &w->p, n);
}

static void test_landings_of_other_lanes_leave_a_parked_wait_alone(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 4;
	cfg.stall_ns = CBCMN_STALL_OFF; /* the hog holds executor 2 on purpose */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct pw w = {0};
	t_run_pinned(rt, 1, pw_main, &w); /* executor 0 runs the wait alone */
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&w.p.r.got), 2);
	assert_int_equal(atomic_load(&w.t.got), PW_MSGS);
	assert_int_equal(atomic_load(&w.p.r.bad) + atomic_load(&w.t.bad), 0);
	print_message("executor 0's picks during %d landings of other lanes: %llu\n", PW_MSGS,
		      (unsigned long long)w.p.picks);
	assert_true(w.p.picks < PW_PICKS);
	t_destroy(rt);
}

/* ---- parked waits of one lane, parked out of their post order ---- */

/* Senders on executor 0 post one message each into the lane of a held
 * executor, in order, then end in the reverse order (each waits for its
 * post: parked, the later posts first on the lane's list): the landings
 * wake each once its own message is put, none left behind. */
#define PO_SENDERS 24

struct po {
	struct rx r;
	struct hog hog;
	_Atomic long posted, ended;
};

static int64_t po_sender(cbcmn_cx *cx, void *arg)
{
	struct po *p = arg;
	long k = atomic_fetch_add(&p->posted, 1); /* one at a time: pinned on executor 0 */
	cbcmn_actor_msg m = msg(M_DATA, 0, (uint64_t)k);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, p->r.a, &m) == 0);
	cbcmn_sleep(cx, (uint64_t)(PO_SENDERS - k) * 300000); /* the last to post ends first */
	atomic_fetch_add(&p->ended, 1);
	return 0;
}

static int64_t po_main(cbcmn_cx *cx, void *arg)
{
	struct po *p = arg;
	cbcmn_nursery *nr, *nh, *ns;
	TASK_CHECK(open_n(cx, &nr) == 0);
	TASK_CHECK(open_n(cx, &nh) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	atomic_store(&p->r.go, 1);
	TASK_CHECK(rx_spawn(cx, nr, &p->r, CBCMN_PLACE_PINNED, 1, PO_SENDERS) == 0);
	TASK_CHECK(wait_for(cx, &p->r.started, 1));
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, nh, 1, hog_task, &p->hog, NULL) == 0);
	while (!atomic_load(&p->hog.running))
		cbcmn_sleep(cx, 100000);
	for (int i = 0; i < PO_SENDERS; i++)
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, ns, 0, po_sender, p, NULL) == 0);
	TASK_CHECK(wait_for(cx, &p->ended, PO_SENDERS));
	cbcmn_sleep(cx, 5000000); /* their ends' yields are over: parked */
	TASK_CHECK(atomic_load(&p->r.got) == 0);
	atomic_store(&p->hog.release, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, ns) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nh) == 0);
	TASK_CHECK(quit(cx, p->r.a) == 0);
	return cbcmn_nursery_await_all(cx, nr);
}

static void test_parked_waits_of_one_lane_out_of_order_all_end(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct po p = {0};
	t_run_pinned(rt, 0, po_main, &p);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&p.r.got), PO_SENDERS);
	assert_int_equal(atomic_load(&p.r.bad), 0);
	t_destroy(rt);
}

/* ---- an actor's end waits parked for its places reserved in lanes ---- */

/* More messages than a lane holds: the rest wait on the sender's
 * executor's backlog, flushed only when that executor's run ends. */
#define SP_MSGS 300 /* more than a lane's 256 entries */
#define SP_LOOKS 1000 /* looks at executor 1's state, 20 us apart */

struct sp {
	struct rx r;
	_Atomic int posted, ending;
	long running; /* looks that found executor 1 running, its actor's end waiting */
};

/* Holds executor 1 (no checkpoint: nothing lands meanwhile) until every
 * message is posted, then ends without receiving: its end waits for the
 * places reserved by the messages still in the lane and the backlog. */
static int64_t sp_actor(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct sp *s = arg;
	atomic_store(&s->r.started, 1);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&s->posted) && t_now_ns() < end)
		;
	atomic_store(&s->ending, 1);
	return 0;
}

/* Busy for ns, without a checkpoint. */
static void sp_spin(uint64_t ns)
{
	uint64_t end = t_now_ns() + ns;
	while (t_now_ns() < end)
		;
}

/* Posts every message, then holds executor 0 (its backlog unflushed)
 * while the actor's end yields its turns out and parks: executor 1 then
 * runs nothing, its state says so.  Its end flushes the backlog, whose
 * landings wake the actor's end. */
static int64_t sp_sender(cbcmn_cx *cx, void *arg)
{
	struct sp *s = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	uint64_t x0 = xmsgs_sent(rt, 0);
	for (uint64_t i = 0; i < SP_MSGS; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, s->r.a, &m) == 0);
	}
	TASK_CHECK(xmsgs_sent(rt, 0) - x0 >= SP_MSGS); /* over the lanes */
	atomic_store(&s->posted, 1);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&s->ending) && t_now_ns() < end)
		;
	/* Its LANE_SPINS yields over (bounded: a settle that only yields
	 * keeps executor 1 running throughout, and the looks say so). */
	end = t_now_ns() + T_STALL_NS;
	while (exec_stats(rt, 1).state == CBCMN_EXEC_RUNNING && t_now_ns() < end)
		sp_spin(100000);
	for (int i = 0; i < SP_LOOKS; i++) {
		s->running += exec_stats(rt, 1).state == CBCMN_EXEC_RUNNING;
		sp_spin(20000);
	}
	return 0;
}

static int64_t sp_main(cbcmn_cx *cx, void *arg)
{
	struct sp *s = arg;
	cbcmn_nursery *nr, *ns;
	TASK_CHECK(open_n(cx, &nr) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	cbcmn_actor_opts o = {.mailbox_cap = 2 * SP_MSGS, .placement = CBCMN_PLACE_PINNED,
			      .shard = 1, .drop = rx_drop};
	TASK_CHECK(cbcmn_actor_spawn(cx, nr, sp_actor, s, &o, &s->r.a) == 0);
	TASK_CHECK(wait_for(cx, &s->r.started, 1));
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, ns, 0, sp_sender, s, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, ns) == 0);
	return cbcmn_nursery_await_all(cx, nr);
}

/* The settle in the actor's slot (cbcmn__mb_lanes_settle()): an actor
 * whose task ends with places reserved by messages that its own
 * executor's drains cannot land (on the sender's backlog, its executor
 * held) parks after its yields, rather than yield for as long as the
 * hold lasts (its executor, with nothing else to run, then sleeps); the
 * last landing wakes it, and its halt drops every message (none lost,
 * none left in a lane). */
static void test_end_of_actor_with_places_in_a_held_backlog_parks(void **state)
{
	(void)state;
	cbcmn_runtime *rt = lanes_runtime();
	struct sp s = {0};
	t_run_pinned(rt, 0, sp_main, &s);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&s.r.dropped), SP_MSGS);
	print_message("executor 1 running at %ld of %d looks while its actor's end waited\n",
		      s.running, SP_LOOKS);
	assert_true(s.running < SP_LOOKS / 10);
	t_destroy(rt);
}

/* ---- acknowledgements after the receiver's halt, and at destroy ---- */

#define AH_MSGS 40

struct ah {
	struct rx r;
	_Atomic long halted;
};

/* Posts, then holds its executor (no checkpoint) until the receiver has
 * halted: the acknowledgements wait in executor 0's lanes meanwhile. */
static int64_t ah_sender(cbcmn_cx *cx, void *arg)
{
	struct ah *h = arg;
	for (uint64_t i = 0; i < AH_MSGS; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, h->r.a, &m) == 0);
	}
	TASK_CHECK(quit(cx, h->r.a) == 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&h->halted) && t_now_ns() < end)
		;
	return 0;
}

static int64_t ah_main(cbcmn_cx *cx, void *arg)
{
	struct ah *h = arg;
	cbcmn_nursery *nr, *ns;
	TASK_CHECK(open_n(cx, &nr) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	atomic_store(&h->r.go, 1);
	TASK_CHECK(rx_spawn(cx, nr, &h->r, CBCMN_PLACE_PINNED, 1, AH_MSGS + 1) == 0);
	TASK_CHECK(wait_for(cx, &h->r.started, 1));
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, ns, 0, ah_sender, h, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nr) == 0);
	atomic_store(&h->halted, 1);
	return cbcmn_nursery_await_all(cx, ns);
}

/* The receiver takes everything and halts while the lane messages'
 * acknowledgements are still on their way back (their bodies in executor
 * 0's pool): nothing of the halted actor is touched by them.  Then the
 * runtime is destroyed at once, whatever acknowledgements are left in the
 * lanes (ASan: the pool goes with its executor, nothing leaks). */
static void test_acks_after_halt_and_destroy_with_lane_messages_out(void **state)
{
	(void)state;
	for (int round = 0; round < 4; round++) {
		cbcmn_runtime *rt = lanes_runtime();
		struct ah h = {0};
		t_run_pinned(rt, 1, ah_main, &h);
		ASSERT_TASK_CHECKS();
		assert_int_equal(atomic_load(&h.r.got), AH_MSGS);
		assert_int_equal(atomic_load(&h.r.bad), 0);
		t_destroy(rt);
	}
}

/* ---- a sender's end comes after its messages in lanes ---- */

#define EO_MSGS 5

struct eo {
	bool crash; /* the peer overflows its stack after its sends */
	cbcmn_actor_ref p;
	uint32_t types[EO_MSGS + 1];
	int n;
};

/* On executor 0: waits for GO, sends its messages to GO's sender over
 * the lanes (executor 1 is held), ends. */
static int64_t eo_peer(cbcmn_cx *cx, void *arg)
{
	struct eo *o = arg;
	cbcmn_actor_msg go;
	TASK_CHECK(cbcmn_actor_receive(cx, &go, CBCMN_ACTOR_FOREVER) == 0);
	for (uint64_t i = 0; i < EO_MSGS; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, go.from, &m) == 0);
	}
	return o->crash ? t_recurse(NULL, 0) : 0;
}

/* On executor 1: monitors the peer, holds its own executor (no
 * checkpoint) while the peer sends and ends, then takes everything. */
static int64_t eo_watcher(cbcmn_cx *cx, void *arg)
{
	struct eo *o = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts po = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, eo_peer, o, &po, &o->p) == 0);
	uint64_t mon;
	TASK_CHECK(cbcmn_actor_monitor(cx, o->p, &mon) == 0);
	cbcmn_actor_msg go = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, o->p, &go) == 0);
	uint64_t end = t_now_ns() + 20000000;
	while (t_now_ns() < end)
		;
	while (o->n < EO_MSGS + 1) {
		cbcmn_actor_msg m;
		if (cbcmn_actor_receive(cx, &m, T_STALL_NS))
			break;
		o->types[o->n++] = m.type;
	}
	int64_t r = cbcmn_nursery_await_all(cx, n);
	return o->crash && r == CBCMN_EPANIC ? 0 : r;
}

static int64_t eo_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = 1};
	cbcmn_actor_ref w;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, eo_watcher, arg, &o, &w) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* The peer's DOWN comes after its messages, though they were still in a
 * lane when its task returned: a task's end waits for its sends in lanes
 * to be put (else the DOWN, put at the halt, would overtake them). */
static void end_of_sender_case(bool crash)
{
	cbcmn_runtime *rt = lanes_runtime();
	struct eo o = {.crash = crash};
	t_run_pinned(rt, 0, eo_main, &o);
	ASSERT_TASK_CHECKS();
	assert_int_equal(o.n, EO_MSGS + 1);
	for (int i = 0; i < EO_MSGS; i++)
		assert_int_equal(o.types[i], M_DATA);
	assert_int_equal(o.types[EO_MSGS], CBCMN_ACTOR_DOWN);
	t_destroy(rt);
}

static void test_end_of_sender_after_its_messages_in_lanes(void **state)
{
	(void)state;
	end_of_sender_case(false);
}

/* The same for a peer whose task lands (a stack overflow) after its
 * sends: the landing jumps past the end that waits for them. */
static void test_landed_sender_after_its_messages_in_lanes(void **state)
{
	(void)state;
	if (T_TSAN) {
		T_SKIP("TSan cannot follow a jump out of a signal handler");
		return;
	}
	end_of_sender_case(true);
}

/* ---- a receiver ended by the runtime with messages in lanes ---- */

#define LR_MSGS 8

struct lr {
	struct rx r;
	cbcmn_runtime *rt;
	_Atomic int sent;
	bool exits; /* its thread's end rather than a stack overflow */
	int64_t rc;
};

/* Holds its executor (no checkpoint: the lane messages stay in the lane)
 * until the sender has posted, then overflows its stack or ends its
 * executor's thread. */
static int64_t lr_actor(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct lr *l = arg;
	atomic_store(&l->r.started, 1);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&l->sent) && t_now_ns() < end)
		;
	if (l->exits)
		pthread_exit(NULL);
	return t_recurse(NULL, 0);
}

static int64_t lr_sender(cbcmn_cx *cx, void *arg)
{
	struct lr *l = arg;
	TASK_CHECK(wait_for(cx, &l->r.started, 1));
	uint64_t x0 = xmsgs_sent(l->rt, 0);
	for (uint64_t i = 0; i < LR_MSGS; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, l->r.a, &m) == 0);
	}
	TASK_CHECK(xmsgs_sent(l->rt, 0) - x0 >= LR_MSGS); /* over the lanes */
	atomic_store(&l->sent, 1);
	return 0;
}

static int64_t lr_main(cbcmn_cx *cx, void *arg)
{
	struct lr *l = arg;
	cbcmn_nursery *nr, *ns;
	TASK_CHECK(open_n(cx, &nr) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	cbcmn_actor_opts o = {.mailbox_cap = 64, .placement = CBCMN_PLACE_PINNED, .shard = 1,
			      .drop = rx_drop};
	TASK_CHECK(cbcmn_actor_spawn(cx, nr, lr_actor, l, &o, &l->r.a) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, ns, 0, lr_sender, l, NULL) == 0);
	l->rc = cbcmn_nursery_await_all(cx, nr);
	return cbcmn_nursery_await_all(cx, ns);
}

/* Its task lands (a stack overflow) before its executor drained the
 * lanes: the messages sent to it (each send returned 0) are dropped, as
 * messages in its mailbox are, each through its drop callback. */
static void landed_case(bool exits)
{
	cbcmn_runtime *rt = lanes_runtime();
	struct lr l = {.rt = rt, .exits = exits};
	t_run(rt, lr_main, &l, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(l.rc, CBCMN_EPANIC);
	assert_int_equal(atomic_load(&l.r.dropped), LR_MSGS);
	t_destroy(rt);
}

static void test_receiver_landed_drops_its_messages_in_lanes(void **state)
{
	(void)state;
	if (T_TSAN) {
		T_SKIP("TSan cannot follow a jump out of a signal handler");
		return;
	}
	landed_case(false);
}

/* The same when its executor's thread ends under it (the reaper). */
static void test_receiver_reaped_drops_its_messages_in_lanes(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) {
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
		return;
	}
	landed_case(true);
}

/* ---- a receiver's executor stalls with a message for it in a lane ---- */

struct st {
	cbcmn_actor_ref r;
	_Atomic long started, hog_running;
	_Atomic int released, hog_timed_out;
	_Atomic long on; /* the executor the actor first ran on */
	uint64_t x0, x1; /* executor 0's posts on lane (0, 1) before and after the send */
};

/* Actor sends posted by executor from's tasks on lane (from, to): the
 * lanes' own count, not xmsgs_sent, which the lock path's wake of the
 * receiver on its home bumps too (an XM_WAKE message). */
static uint64_t lane_posts(cbcmn_runtime *rt, uint32_t from, uint32_t to)
{
	return rt->exec[from]->lane_posted[to]; /* from's thread only: ours */
}

/* Frees the stalled executor once it receives. */
static int64_t st_actor(cbcmn_cx *cx, void *arg)
{
	struct st *s = arg;
	atomic_store(&s->on, (long)cbcmn_cx_executor(cx));
	atomic_store(&s->started, 1);
	cbcmn_actor_msg m;
	int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	atomic_store(&s->released, 1);
	return rc;
}

/* Holds executor 1 as a blocking call would, until the actor frees it. */
static int64_t st_hog(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct st *s = arg;
	atomic_store(&s->hog_running, 1);
	uint64_t end = t_now_ns() + T_STALL_NS; /* reached only if it is lost */
	while (!atomic_load(&s->released))
		if (t_now_ns() > end) {
			atomic_store(&s->hog_timed_out, 1);
			break;
		}
	return 0;
}

/* Keeps executor 0 company (a task pinned there that yields) until the
 * actor frees executor 1: a sender alone on its executor brings a
 * waiting receiver whose home runs another task to itself (the lock
 * path: lane_route(), sched.c's cbcmn__exec_alone()), and its message
 * would go over no lane. */
static int64_t st_company(cbcmn_cx *cx, void *arg)
{
	struct st *s = arg;
	while (!atomic_load(&s->released))
		TASK_CHECK(cbcmn_yield(cx) == 0);
	return 0;
}

static int64_t st_main(cbcmn_cx *cx, void *arg)
{
	struct st *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_STEALABLE_ON, .shard = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, st_actor, s, &o, &s->r) == 0);
	/* Executor 0 kept busy (a blocking wait) until the actor started:
	 * idle, it could take the stealable actor first, whose home would
	 * then be ours, and the send would take the lock (the rescue
	 * landings' lesson, 9b59455). */
	TASK_CHECK(wait_for(NULL, &s->started, 1));
	cbcmn_sleep(cx, 5000000); /* waiting in its receive */
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, st_hog, s, NULL) == 0);
	TASK_CHECK(wait_for(cx, &s->hog_running, 1));
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, st_company, s, NULL) == 0);
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	s->x0 = lane_posts(rt, 0, 1);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, s->r, &m) == 0);
	s->x1 = lane_posts(rt, 0, 1);
	return cbcmn_nursery_await_all(cx, n);
}

/* Issue 15's liveness 2 for actor sends: the stall monitor moves the
 * receiver woken by a message sent just before its executor stalled, so
 * it runs and ends the stall; the message must not wait out the stall in
 * the stalled executor's lane.  A round whose send did not go over the
 * lane (the actor began on executor 0, or the monitor called executor 1
 * stalled before the send, which then took the lock) proves nothing:
 * the rounds go on, the stall time doubling, until one has, and one
 * must (it used to pass without one).  Counted as the lane's posts:
 * counted as executor 0's xmsgs_sent, the lock path's wake of the actor
 * on executor 1 (an XM_WAKE) counted too, and the test passed with the
 * lanes turned off (lane_route() always -1). */
static void test_message_in_a_stalled_executors_lane_is_rescued(void **state)
{
	(void)state;
	int over_lane = 0, elsewhere = 0, round;
	uint64_t stall_ns = 2000000ull;
	for (round = 0; !over_lane && round < 10; round++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 2;
		cfg.stall_ns = stall_ns;
		cbcmn_runtime *rt = t_runtime_cfg(&cfg);
		struct st s = {0};
		t_run_pinned(rt, 0, st_main, &s);
		ASSERT_TASK_CHECKS();
		assert_int_equal(atomic_load(&s.released), 1);
		assert_int_equal(atomic_load(&s.hog_timed_out), 0);
		over_lane = s.x1 - s.x0 == 1;
		elsewhere += atomic_load(&s.on) != 1;
		if (!over_lane && stall_ns < 500000000ull)
			stall_ns *= 2;
		t_destroy(rt);
	}
	if (!over_lane)
		print_message("no round sent over the lane in %d: the stall time reached %llu ms; "
			      "the actor began off executor 1 in %d rounds\n",
			      round, (unsigned long long)(stall_ns / 1000000), elsewhere);
	assert_true(over_lane);
}

/* ---- rescue landings and a parked wait for them ---- */

/* lane_done counts landings, and a wait for post number k ends once k
 * are counted: right only if a lane's messages land one at a time, in
 * their post order, whoever lands them.  The stall monitor's rescue
 * lands a stalled executor's lane messages (lanes_take()) while that
 * executor is kept out, from the lane's head, in order; its drain later
 * skips them.  A sender's end waits parked for its messages in a stalled
 * executor's lane; the rescue's landings end that wait, and a message
 * sent after it (through the lock: its executor is stalled) comes after
 * them in the mailbox. */
#define RL_MSGS 3

struct rl {
	struct st s; /* the actor (s.r), and st_hog's: it holds executor 1 */
	cbcmn_runtime *rt;
	_Atomic long got, bad;
	_Atomic long on; /* the executor the actor first ran on */
	uint64_t x0, x1; /* executor 0's lane messages before and after the posts */
};

/* Takes the RL_MSGS messages and the one after them in order, then frees
 * the stalled executor. */
static int64_t rl_actor(cbcmn_cx *cx, void *arg)
{
	struct rl *r = arg;
	atomic_store(&r->on, (long)cbcmn_cx_executor(cx));
	atomic_store(&r->s.started, 1);
	for (uint64_t i = 0; i <= RL_MSGS; i++) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			break;
		if (m.body.u64[1] != i)
			atomic_fetch_add(&r->bad, 1);
		atomic_fetch_add(&r->got, 1);
	}
	atomic_store(&r->s.released, 1);
	return 0;
}

/* Posts into the held executor's lane (before the monitor calls it
 * stalled), then ends: its end waits for them, parked. */
static int64_t rl_sender(cbcmn_cx *cx, void *arg)
{
	struct rl *r = arg;
	r->x0 = xmsgs_sent(r->rt, 0);
	for (uint64_t i = 0; i < RL_MSGS; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, r->s.r, &m) == 0);
	}
	r->x1 = xmsgs_sent(r->rt, 0);
	return 0;
}

static int64_t rl_main(cbcmn_cx *cx, void *arg)
{
	struct rl *r = arg;
	cbcmn_nursery *n, *ns;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_STEALABLE_ON, .shard = 1, .mailbox_cap = 8};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, rl_actor, r, &o, &r->s.r) == 0);
	/* Executor 0 kept busy (a blocking wait, no sleep of ours) until
	 * the actor started: idle, it could take the stealable actor first,
	 * whose home would then be ours, and every post would take the
	 * lock (a round that proves nothing, however long the stall time:
	 * ten such in one ASan run, quiet). */
	TASK_CHECK(wait_for(NULL, &r->s.started, 1));
	cbcmn_sleep(cx, 5000000); /* waiting in its receive */
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, st_hog, &r->s, NULL) == 0);
	TASK_CHECK(wait_for(cx, &r->s.hog_running, 1));
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, st_company, &r->s, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, ns, 0, rl_sender, r, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, ns) == 0); /* its end: after the landings */
	cbcmn_actor_msg m = msg(M_DATA, 0, RL_MSGS);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, r->s.r, &m) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_rescue_landings_end_a_parked_wait_after_its_messages(void **state)
{
	(void)state;
	int over_lanes = 0, elsewhere = 0;
	uint64_t stall_ns = 30000000ull;
	/* Four rounds, and more while none has posted over the lane: a
	 * loaded machine (a sanitizer beside a CPU hog) can keep the
	 * sender off its CPU past the stall time in every round. */
	for (int round = 0; round < 4 || (!over_lanes && round < 10); round++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 2;
		/* Long enough for the posts to go over the lane before the
		 * monitor calls executor 1 stalled (after, they take the
		 * lock: a round that proves nothing, counted out below, and
		 * the next round waits twice as long). */
		cfg.stall_ns = stall_ns;
		cbcmn_runtime *rt = t_runtime_cfg(&cfg);
		struct rl r = {.rt = rt};
		t_run_pinned(rt, 0, rl_main, &r);
		ASSERT_TASK_CHECKS();
		assert_int_equal(atomic_load(&r.got), RL_MSGS + 1);
		assert_int_equal(atomic_load(&r.bad), 0);
		assert_int_equal(atomic_load(&r.s.hog_timed_out), 0);
		bool lane = r.x1 - r.x0 >= RL_MSGS;
		over_lanes += lane;
		elsewhere += atomic_load(&r.on) != 1;
		if (!lane && stall_ns < 500000000ull)
			stall_ns *= 2;
		t_destroy(rt);
	}
	if (!over_lanes)
		print_message("no round posted over the lane: the stall time reached %llu ms; "
			      "the actor began off executor 1 in %d rounds\n",
			      (unsigned long long)(stall_ns / 1000000), elsewhere);
	assert_true(over_lanes > 0);
}

/* ---- no memory for a lane message ---- */

#define NM_MSGS 100 /* more than a slab of lane messages (xmsg.c) */

struct nm {
	struct rx r;
	_Atomic int sent, stuck;
};

/* Receives once the sender is through, then everything in order. */
static int64_t nm_actor(cbcmn_cx *cx, void *arg)
{
	struct nm *n = arg;
	atomic_store(&n->r.started, 1);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&n->sent) && t_now_ns() < end)
		cbcmn_yield(cx); /* a sleep's timer would find no memory */
	for (long i = 0; i < NM_MSGS; i++) {
		cbcmn_actor_msg m;
		TASK_CHECK(cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0);
		TASK_CHECK(m.body.u64[1] == (uint64_t)i);
		atomic_fetch_add(&n->r.got, 1);
	}
	return 0;
}

/* Every allocation fails while it sends without a yield, its
 * acknowledgements not drained meanwhile: past its pool's messages, the
 * sends take the lock, which needs none, and there is room. */
static int64_t nm_sender(cbcmn_cx *cx, void *arg)
{
	struct nm *n = arg;
	TASK_CHECK(wait_for(cx, &n->r.started, 1));
	/* The first with memory: the lanes open, the pool has a slab. */
	uint64_t x0 = xmsgs_sent(cbcmn_cx_runtime(cx), 0);
	cbcmn_actor_msg first = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, n->r.a, &first) == 0);
	TASK_CHECK(xmsgs_sent(cbcmn_cx_runtime(cx), 0) > x0);
	struct cbcmn__fault_plan fail = {.nth = 1, .every = 1, .err = -ENOMEM};
	TASK_CHECK(cbcmn__fault_arm(CBCMN__F_MALLOC, &fail));
	for (uint64_t i = 1; i < NM_MSGS; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 0, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, n->r.a, &m) == 0);
	}
	cbcmn__fault_disarm_all();
	atomic_store(&n->sent, 1);
	return 0;
}

/* Ends a send spinning on no memory: disarms the faults, says it did. */
static void *nm_watchdog(void *arg)
{
	struct nm *n = arg;
	uint64_t end = t_now_ns() + 3000000000ull;
	while (!atomic_load(&n->sent) && t_now_ns() < end)
		usleep(1000);
	if (!atomic_load(&n->sent)) {
		atomic_store(&n->stuck, 1);
		cbcmn__fault_disarm_all();
	}
	return NULL;
}

static int64_t nm_main(cbcmn_cx *cx, void *arg)
{
	struct nm *n = arg;
	cbcmn_nursery *nr, *ns;
	TASK_CHECK(open_n(cx, &nr) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	cbcmn_actor_opts o = {.mailbox_cap = 2 * NM_MSGS, .placement = CBCMN_PLACE_PINNED,
			      .shard = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, nr, nm_actor, n, &o, &n->r.a) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, ns, 0, nm_sender, n, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, ns) == 0);
	return cbcmn_nursery_await_all(cx, nr);
}

/* A blocking send that finds room but no memory for its lane message
 * goes to the lock path; it spun between the two for as long as memory
 * was short (for ever: its executor's acknowledgements, which would
 * refill the pool, are drained only by that executor). */
static void test_no_memory_for_a_lane_message_takes_the_lock(void **state)
{
	(void)state;
	struct cbcmn__fault_plan probe = {0};
	if (!cbcmn__fault_arm(CBCMN__F_MALLOC, &probe))
		T_SKIP("no fault injection in this build (make SAN=asan)");
	cbcmn__fault_disarm_all();
	cbcmn_runtime *rt = lanes_runtime();
	struct nm n = {0};
	pthread_t wd;
	assert_int_equal(pthread_create(&wd, NULL, nm_watchdog, &n), 0);
	t_run(rt, nm_main, &n, 0);
	pthread_join(wd, NULL);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&n.stuck), 0);
	assert_int_equal(atomic_load(&n.r.got), NM_MSGS);
	t_destroy(rt);
}

/* ---- a task's cx handed to its cbcmn_blocking() function ---------------- */

#define HANDED_N 3000

struct handed {
	cbcmn_actor_ref r, s;
	_Atomic uint64_t got, from_s, sent;
	_Atomic int started, go;
	cbcmn_cx *cx;
};
static struct handed hd;

static int64_t handed_receiver(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type != M_QUIT) {
		atomic_fetch_add(&hd.got, 1);
		if (m.from == hd.s)
			atomic_fetch_add(&hd.from_s, 1);
	}
	return rc;
}

/* On a pool thread with the actor's cx: its try_sends from there, a send
 * that would wait is -EPERM. */
static int64_t handed_thread(void *arg)
{
	cbcmn_cx *cx = arg;
	atomic_store(&hd.started, 1);
	/* Until the actor's executor has parked it (its park reads the
	 * countdown this thread's charges write; the other actor's run
	 * after it orders the two for TSan). */
	while (!atomic_load(&hd.go))
		sched_yield();
	cbcmn_actor_msg m = msg(M_DATA, 1, 0);
	if (cbcmn_actor_send(NULL, cx, hd.r, &m) != -EPERM)
		return -1;
	/* HANDED_N tries, and more until one is in: on a loaded host the
	 * neighbour can keep the mailbox full through all HANDED_N (the
	 * receiver's executor off its CPU), and the test needs one from the
	 * actor.  The bound is a hang bound only. */
	int mine = 0;
	for (long i = 0; i < HANDED_N || (mine == 0 && i < HANDED_N * 100000L); i++) {
		int rc = cbcmn_actor_try_send(NULL, cx, hd.r, &m);
		if (rc == 0) {
			atomic_fetch_add(&hd.sent, 1);
			mine++;
		} else if (rc == -EAGAIN) {
			sched_yield(); /* the receiver's thread may want this CPU */
		} else {
			return rc;
		}
	}
	return 0;
}

static int64_t handed_actor(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	int64_t res = -1;
	TASK_CHECK(cbcmn_blocking(cx, handed_thread, cx, &res) == 0);
	return res;
}

/* Beside it on its executor: sends of its own over the same lanes. */
static int64_t handed_neighbour(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	while (!atomic_load(&hd.started))
		cbcmn_yield(cx);
	atomic_store(&hd.go, 1);
	for (int i = 0; i < HANDED_N; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 2, (uint64_t)i);
		if (cbcmn_actor_try_send(NULL, cx, hd.r, &m) == 0)
			atomic_fetch_add(&hd.sent, 1);
		if (i % 64 == 0)
			cbcmn_yield(cx);
	}
	return 0;
}

static int64_t handed_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *rn, *sn;
	TASK_CHECK(open_n(cx, &rn) == 0);
	TASK_CHECK(open_n(cx, &sn) == 0);
	cbcmn_actor_opts ro = {.placement = CBCMN_PLACE_PINNED, .shard = 1, .mailbox_cap = 64};
	cbcmn_actor_opts so = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	cbcmn_actor_ref nb;
	TASK_CHECK(cbcmn_actor_spawn(cx, rn, handed_receiver, NULL, &ro, &hd.r) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, sn, handed_actor, NULL, &so, &hd.s) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, sn, handed_neighbour, NULL, &so, &nb) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, sn) == 0);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, hd.r, &q) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, rn) == 0);
	return 0;
}

/* A cbcmn_blocking() function handed its actor's cx sends from a pool
 * thread: it must not use that actor's executor's lanes (their counters
 * and message cache are the owner thread's: they raced with the
 * executor's own sends, and the run hung or crashed), but send as a
 * thread outside does, from its actor still; a send that would wait is
 * -EPERM there. */
static void test_a_blocking_functions_sends_with_its_actors_cx_leave_the_lanes_alone(void **state)
{
	(void)state;
	memset(&hd, 0, sizeof(hd));
	cbcmn_runtime *rt = t_runtime(2);
	int64_t res;
	assert_int_equal(cbcmn_runtime_run(rt, handed_root, NULL, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	assert_int_equal(atomic_load(&hd.got), atomic_load(&hd.sent)); /* none lost, none twice */
	assert_true(atomic_load(&hd.from_s) > 0); /* from the actor, not from a thread */
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cross_executor_sends_go_over_the_lanes),
		cmocka_unit_test(test_order_per_pair_with_moving_senders_and_receiver),
		cmocka_unit_test(test_no_room_to_reserve_is_back_pressure),
		cmocka_unit_test(test_send_cancelled_after_its_post_is_delivered),
		cmocka_unit_test(test_send_cancelled_before_its_ack_is_delivered),
		cmocka_unit_test(test_sender_cancelled_at_any_point_delivered_iff_zero),
		cmocka_unit_test(test_full_lane_backlogs_in_order),
		cmocka_unit_test(test_dead_receiver_esrch_and_nothing_lost),
		cmocka_unit_test(test_recycled_reference_is_esrch_over_the_lane),
		cmocka_unit_test(test_no_room_waits_for_own_messages_in_lanes),
		cmocka_unit_test(test_wait_for_own_messages_in_a_held_lane_parks),
		cmocka_unit_test(test_acks_after_halt_and_destroy_with_lane_messages_out),
		cmocka_unit_test(test_end_of_sender_after_its_messages_in_lanes),
		cmocka_unit_test(test_landed_sender_after_its_messages_in_lanes),
		cmocka_unit_test(test_receiver_landed_drops_its_messages_in_lanes),
		cmocka_unit_test(test_receiver_reaped_drops_its_messages_in_lanes),
		cmocka_unit_test(test_message_in_a_stalled_executors_lane_is_rescued),
		cmocka_unit_test(test_rescue_landings_end_a_parked_wait_after_its_messages),
		cmocka_unit_test(test_no_memory_for_a_lane_message_takes_the_lock),
		cmocka_unit_test(test_landings_of_other_lanes_leave_a_parked_wait_alone),
		cmocka_unit_test(test_parked_waits_of_one_lane_out_of_order_all_end),
		cmocka_unit_test(test_end_of_actor_with_places_in_a_held_backlog_parks),
		cmocka_unit_test(test_a_blocking_functions_sends_with_its_actors_cx_leave_the_lanes_alone),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
