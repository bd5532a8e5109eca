/* test_trace_actor: actor messages in the trace rings (docs/TRACE.md):
 * one CBCMN_TRACE_ACTOR_SEND per message that entered a mailbox, one
 * CBCMN_TRACE_ACTOR_RECEIVE per message taken, paired by the receiver and
 * the message's number, the receive after the send; nothing for a send
 * that was refused, timed out or met a stop. */
#include "helpers.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cbcmn_actor.h"

#define SENDERS 3
#define PER_SENDER 150
#define MSGS (SENDERS * PER_SENDER)

struct load {
	cbcmn_actor_ref rx, tx[SENDERS];
	_Atomic int ready;
	int received;
	int sent[SENDERS];
};

struct sender {
	struct load *l;
	int i;
};

/* Takes every message, now and then after a yield: its mailbox of one
 * is full most of the time (senders wait and are put in by its receive)
 * and empty some of it (a message handed to it while it waits). */
static int64_t receiver(cbcmn_cx *cx, void *arg)
{
	struct load *l = arg;
	cbcmn_actor_msg m;
	while (l->received < MSGS) {
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		l->received++;
		if (l->received % 7 == 0)
			cbcmn_yield(cx);
	}
	return 0;
}

static int64_t sender(cbcmn_cx *cx, void *arg)
{
	struct sender *s = arg;
	while (atomic_load(&s->l->ready) == 0)
		cbcmn_yield(cx);
	/* The type says who sent it: the receive's type must match the
	 * sender of the send it is paired with. */
	cbcmn_actor_msg m = {.type = 100 + (uint32_t)s->i};
	for (int k = 0; k < PER_SENDER; k++) {
		int rc = cbcmn_actor_send(NULL, cx, s->l->rx, &m);
		if (rc)
			return rc;
		s->l->sent[s->i]++;
	}
	return 0;
}

/* The same receiver as a handler actor (cbcmn_actor_spawn_handler()): its
 * host takes its messages, and records their receives. */
static int64_t receiver_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	(void)cx;
	(void)m;
	struct load *l = arg;
	return ++l->received < MSGS ? CBCMN_ACTOR_CONTINUE : CBCMN_ACTOR_HALT;
}

static int64_t load_root_with(cbcmn_cx *cx, struct load *l, bool handler)
{
	struct sender s[SENDERS];
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_actor_opts one = {.mailbox_cap = 1, .placement = CBCMN_PLACE_STEALABLE};
	if (handler)
		TASK_CHECK(cbcmn_actor_spawn_handler(cx, n, receiver_handler, l, &one, &l->rx) == 0);
	else
		TASK_CHECK(cbcmn_actor_spawn(cx, n, receiver, l, &one, &l->rx) == 0);
	for (int i = 0; i < SENDERS; i++) {
		s[i] = (struct sender){l, i};
		TASK_CHECK(cbcmn_actor_spawn(cx, n, sender, &s[i], &one, &l->tx[i]) == 0);
	}
	atomic_store(&l->ready, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static int64_t load_root(cbcmn_cx *cx, void *arg)
{
	return load_root_with(cx, arg, false);
}

static int64_t load_root_handler(cbcmn_cx *cx, void *arg)
{
	return load_root_with(cx, arg, true);
}

/* Every event of rt (its ring large enough: nothing dropped), drained
 * until it holds sends actor sends (bounded: T_STALL_NS).  The send of a
 * message the stall monitor put in for a stalled executor is written by
 * that executor's drain, which may come after the run's end. */
static cbcmn_trace_event *drain_sends(cbcmn_runtime *rt, int sends, size_t *count)
{
	size_t cap = 1u << 16, n = 0;
	cbcmn_trace_event *ev = malloc(cap * sizeof(*ev));
	assert_non_null(ev);
	uint64_t dropped = 0, end = t_now_ns() + T_STALL_NS;
	for (int seen = 0;;) {
		int got;
		while ((got = cbcmn_trace_drain(rt, ev + n, (uint32_t)(cap - n), &dropped)) > 0) {
			for (int i = 0; i < got; i++)
				seen += ev[n + (size_t)i].kind == CBCMN_TRACE_ACTOR_SEND;
			n += (size_t)got;
		}
		assert_int_equal(got, 0);
		if (seen >= sends || t_now_ns() > end)
			break;
		usleep(1000);
	}
	assert_int_equal(dropped, 0);
	*count = n;
	return ev;
}

static cbcmn_runtime *traced_runtime_stall(uint64_t stall_ns)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.trace_events = 1u << 14;
	cfg.stall_ns = stall_ns;
	cbcmn_runtime *rt;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), 0);
	return rt;
}

/* With the stall monitor: a lane message it lands for a stalled executor
 * has its send recorded too, by that executor's drain (session 18 ran
 * these without the monitor: 449 sends of 450 in 6 TSan runs of 30
 * beside the hog). */
static cbcmn_runtime *traced_runtime(void)
{
	return traced_runtime_stall(0);
}

/* The index of the send of (to, seq) among ev's sends, or -1. */
static long find(const cbcmn_trace_event *ev, size_t n, uint32_t kind, uint64_t to, uint32_t seq)
{
	for (size_t i = 0; i < n; i++)
		if (ev[i].kind == kind && ev[i].arg == to && ev[i].peer == seq)
			return (long)i;
	return -1;
}

/* How many events of kind ev holds for (to, seq). */
static int count(const cbcmn_trace_event *ev, size_t n, uint32_t kind, uint64_t to, uint32_t seq)
{
	int c = 0;
	for (size_t i = 0; i < n; i++)
		c += ev[i].kind == kind && ev[i].arg == to && ev[i].peer == seq;
	return c;
}

/* Three senders through a mailbox of one: back-pressure, hand-overs to a
 * waiting receiver, executors apart.  Sends = receives = messages, each
 * (receiver, number) once on each side, numbers 0 .. MSGS - 1, the
 * receive at or after its send with the type its sender sent. */
static void check_paired(cbcmn_task_fn root)
{
	cbcmn_runtime *rt = traced_runtime();
	struct load l = {0};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, root, &l, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	assert_int_equal(l.received, MSGS);
	/* Senders waited, and were put in by the receive (slot_freed()). */
	cbcmn_stats st;
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
	assert_true(st.total.actor_backpressure > 0);
	size_t n;
	cbcmn_trace_event *ev = drain_sends(rt, MSGS, &n);
	assert_int_equal(cbcmn_runtime_destroy(rt), 0);
	int sends = 0, recvs = 0, per[SENDERS] = {0};
	bool seen[MSGS] = {false};
	for (size_t i = 0; i < n; i++) {
		const cbcmn_trace_event *e = &ev[i];
		if (e->kind == CBCMN_TRACE_ACTOR_SEND) {
			sends++;
			assert_int_equal(e->arg, l.rx);
			assert_true(e->peer < MSGS);
			assert_false(seen[e->peer]); /* once */
			seen[e->peer] = true;
			int who = -1;
			for (int k = 0; k < SENDERS; k++)
				if (e->dur_ns == l.tx[k])
					who = k;
			if (who < 0)
				fail_msg("send %u from %llx: no sender", e->peer, (unsigned long long)e->dur_ns);
			per[who]++;
			long r = find(ev, n, CBCMN_TRACE_ACTOR_RECEIVE, e->arg, e->peer);
			if (r < 0)
				fail_msg("message %u sent, never received", e->peer);
			assert_int_equal(ev[r].dur_ns, 100 + who); /* the type that sender sent */
			if (ev[r].ts_ns < e->ts_ns)
				fail_msg("message %u received at %llu before its send at %llu", e->peer,
					 (unsigned long long)ev[r].ts_ns, (unsigned long long)e->ts_ns);
		} else if (e->kind == CBCMN_TRACE_ACTOR_RECEIVE) {
			recvs++;
			assert_true(find(ev, n, CBCMN_TRACE_ACTOR_RECEIVE, e->arg, e->peer) == (long)i);
		}
	}
	assert_int_equal(sends, MSGS);
	assert_int_equal(recvs, MSGS);
	for (int k = 0; k < SENDERS; k++)
		assert_int_equal(per[k], PER_SENDER);
	free(ev);
}

static void test_each_message_is_one_send_and_one_receive_paired(void **state)
{
	(void)state;
	check_paired(load_root);
}

/* A handler actor's messages are taken by its host, not by
 * cbcmn_actor_receive(): the host's take records each receive too
 * (it recorded none before: "message 0 sent, never received"). */
static void test_handler_actor_receives_are_paired_with_their_sends(void **state)
{
	(void)state;
	check_paired(load_root_handler);
}

/* ---- sends that put nothing ------------------------------------------- */

struct refuse {
	cbcmn_actor_ref rx;
	_Atomic int stop_rc, blocked_rc, blocked_started;
	int rcs[4];
	int drops;
};

/* Never receives: waits to be stopped, its mailbox of one full. */
static int64_t deaf(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	while (!cbcmn_cx_cancelled(cx))
		cbcmn_sleep(cx, 1000000);
	return 0;
}

static void dropped(void *state, const cbcmn_actor_msg *m)
{
	(void)m;
	((struct refuse *)state)->drops++;
}

/* Waits for room that never comes; the stop ends it. */
static int64_t blocked_sender(cbcmn_cx *cx, void *arg)
{
	struct refuse *f = arg;
	cbcmn_actor_msg m = {.type = 2};
	atomic_store(&f->blocked_started, 1);
	atomic_store(&f->blocked_rc, cbcmn_actor_send(NULL, cx, f->rx, &m));
	return 0;
}

static int64_t refuse_root(cbcmn_cx *cx, void *arg)
{
	struct refuse *f = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_actor_opts one = {.mailbox_cap = 1, .drop = dropped};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, deaf, f, &one, &f->rx) == 0);
	cbcmn_actor_msg m = {.type = 1};
	f->rcs[0] = cbcmn_actor_try_send(NULL, cx, f->rx, &m);           /* in */
	f->rcs[1] = cbcmn_actor_try_send(NULL, cx, f->rx, &m);           /* full */
	f->rcs[2] = cbcmn_actor_send_timeout(NULL, cx, f->rx, &m, 1000000); /* full, 1 ms */
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, blocked_sender, f, NULL) == 0);
	while (!atomic_load(&f->blocked_started))
		cbcmn_sleep(cx, 1000000);
	cbcmn_sleep(cx, 20000000); /* into its wait, most likely */
	atomic_store(&f->stop_rc, cbcmn_actor_stop(NULL, cx, f->rx, 0));
	f->rcs[3] = cbcmn_actor_send(NULL, cx, f->rx, &m);               /* stopped */
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

/* One message in, never taken: one send, no receive.  A try_send to a
 * full mailbox, a send that timed out, one waiting when the actor was
 * stopped and one after: nothing. */
static void test_refused_sends_and_untaken_messages_record_no_receive(void **state)
{
	(void)state;
	cbcmn_runtime *rt = traced_runtime();
	struct refuse f = {0};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, refuse_root, &f, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	assert_int_equal(f.rcs[0], 0);
	assert_int_equal(f.rcs[1], -EAGAIN);
	assert_int_equal(f.rcs[2], -ETIMEDOUT);
	assert_int_equal(atomic_load(&f.stop_rc), 0);
	assert_int_equal(atomic_load(&f.blocked_rc), -ESRCH);
	assert_int_equal(f.rcs[3], -ESRCH);
	assert_int_equal(f.drops, 1);
	size_t n;
	/* The one send: a lane send the stall monitor landed is written at
	 * its executor's next drain, maybe after the run. */
	cbcmn_trace_event *ev = drain_sends(rt, 1, &n);
	assert_int_equal(cbcmn_runtime_destroy(rt), 0);
	int sends = 0, recvs = 0;
	for (size_t i = 0; i < n; i++) {
		if (ev[i].kind == CBCMN_TRACE_ACTOR_SEND) {
			sends++;
			assert_int_equal(ev[i].arg, f.rx);
			assert_int_equal(ev[i].peer, 0);
			assert_int_equal(ev[i].dur_ns, CBCMN_ACTOR_NONE); /* a task, not an actor */
		}
		recvs += ev[i].kind == CBCMN_TRACE_ACTOR_RECEIVE;
	}
	assert_int_equal(sends, 1);
	assert_int_equal(recvs, 0);
	free(ev);
}

/* ---- the stall monitor's landings ---------------------------------------- */

/* A sender on executor 0 posts RS_MSGS messages into executor 1's lane
 * while a pinned task holds executor 1 without a runtime call; the stall
 * monitor puts them in the actor's mailbox (lane_land() on its thread,
 * which has no ring).  Their sends were not recorded, their receives
 * were.  Now executor 1 records each send when its drain comes to the
 * message, with the landing's time and number. */
#define RS_MSGS 3

struct rs {
	cbcmn_runtime *rt;
	cbcmn_actor_ref r;
	_Atomic int started, hog_running, released;
	_Atomic uint32_t started_on; /* the actor's executor, + 1 */
	uint64_t x0, x1; /* executor 0's lane messages before and after the posts */
};

static uint64_t xmsgs_sent0(cbcmn_runtime *rt)
{
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	TASK_CHECK(cbcmn_stats_snapshot(rt, &st, per, 2) == 0);
	return per[0].xmsgs_sent;
}

static int64_t rs_actor(cbcmn_cx *cx, void *arg)
{
	struct rs *r = arg;
	atomic_store(&r->started_on, cbcmn_cx_executor(cx) + 1);
	atomic_store(&r->started, 1);
	cbcmn_actor_msg m;
	for (int i = 0; i < RS_MSGS; i++)
		TASK_CHECK(cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0);
	atomic_store(&r->released, 1);
	return 0;
}

/* Holds executor 1 until the actor has its messages (bounded). */
static int64_t rs_hog(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct rs *r = arg;
	atomic_store(&r->hog_running, 1);
	for (uint64_t end = t_now_ns() + T_STALL_NS; !atomic_load(&r->released) && t_now_ns() < end;)
		;
	return 0;
}

static void rs_wait(cbcmn_cx *cx, _Atomic int *flag)
{
	for (uint64_t end = t_now_ns() + T_STALL_NS; !atomic_load(flag) && t_now_ns() < end;)
		cbcmn_sleep(cx, 100000);
}

/* Queued on executor 0 while the sends are made, run after them (no
 * yields to fill the trace ring): a sender alone on its executor brings
 * a waiting receiver whose home runs another task to itself (the lock
 * path: sched.c, cbcmn__exec_alone()), and nothing would be posted over
 * the lane. */
static int64_t rs_company(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t rs_main(cbcmn_cx *cx, void *arg)
{
	struct rs *r = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(r->rt, cx, &n) == 0);
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_STEALABLE_ON, .shard = 1, .mailbox_cap = 8};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, rs_actor, r, &o, &r->r) == 0);
	/* A spin, not a sleep: executor 0, idle, would steal the actor
	 * before executor 1 runs it (its home would be ours: no lane; every
	 * round that posted nothing under TSan beside the hog).  A thief
	 * that is not us (the spare) makes the round void (lane below). */
	for (uint64_t end = t_now_ns() + T_STALL_NS; !atomic_load(&r->started) && t_now_ns() < end;)
		;
	cbcmn_sleep(cx, 5000000); /* waiting in its receive */
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, rs_hog, r, NULL) == 0);
	rs_wait(cx, &r->hog_running);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, rs_company, r, NULL) == 0);
	r->x0 = xmsgs_sent0(r->rt); /* no yield from here to the sends */
	cbcmn_actor_msg m = {.type = 7};
	for (int i = 0; i < RS_MSGS; i++)
		TASK_CHECK(cbcmn_actor_send(NULL, cx, r->r, &m) == 0);
	r->x1 = xmsgs_sent0(r->rt);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_sends_the_stall_monitor_lands_are_recorded(void **state)
{
	(void)state;
	bool lane = false;
	uint64_t stall_ns = 30000000ull;
	/* Until a round has posted over the lane to the actor on executor
	 * 1 (before the monitor calls executor 1 stalled; after, the sends
	 * take the lock, and each round waits twice as long): a loaded
	 * machine may keep the sender off its CPU past the stall time. */
	for (int round = 0; !lane && round < 10; round++) {
		cbcmn_runtime *rt = traced_runtime_stall(stall_ns);
		struct rs r = {.rt = rt};
		t_run_pinned(rt, 0, rs_main, &r);
		ASSERT_TASK_CHECKS();
		assert_int_equal(atomic_load(&r.released), 1);
		lane = atomic_load(&r.started_on) == 2 && r.x1 - r.x0 >= RS_MSGS;
		size_t n;
		cbcmn_trace_event *ev = drain_sends(rt, RS_MSGS, &n);
		assert_int_equal(cbcmn_runtime_destroy(rt), 0);
		for (uint32_t k = 0; k < RS_MSGS; k++) {
			long s = find(ev, n, CBCMN_TRACE_ACTOR_SEND, r.r, k);
			long v = find(ev, n, CBCMN_TRACE_ACTOR_RECEIVE, r.r, k);
			if (s < 0 || v < 0)
				fail_msg("message %u: send %ld, receive %ld (over the lane: %d)", k, s, v,
					 lane);
			/* Once each: the monitor's landing leaves one call,
			 * which the drain runs once. */
			assert_int_equal(count(ev, n, CBCMN_TRACE_ACTOR_SEND, r.r, k), 1);
			assert_int_equal(count(ev, n, CBCMN_TRACE_ACTOR_RECEIVE, r.r, k), 1);
			assert_int_equal(ev[s].dur_ns, CBCMN_ACTOR_NONE); /* from a task */
			assert_int_equal(ev[v].dur_ns, 7);
			assert_true(ev[v].ts_ns >= ev[s].ts_ns);
			if (lane) /* put in by the monitor for executor 1: its record */
				assert_int_equal(ev[s].executor, 1);
		}
		free(ev);
		if (!lane && stall_ns < 500000000ull)
			stall_ns *= 2;
	}
	if (!lane)
		print_message("no round posted over the lane: the stall time reached %llu ms\n",
			      (unsigned long long)(stall_ns / 1000000));
	assert_true(lane);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_message_is_one_send_and_one_receive_paired),
		cmocka_unit_test(test_handler_actor_receives_are_paired_with_their_sends),
		cmocka_unit_test(test_refused_sends_and_untaken_messages_record_no_receive),
		cmocka_unit_test(test_sends_the_stall_monitor_lands_are_recorded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
