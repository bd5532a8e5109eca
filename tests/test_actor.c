/* test_actor: actors: spawn, references, mailbox order and back-pressure,
 * timeouts, stop, monitors, halt, budget, cancellation. */
#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "actor.h" /* internals: a slot's monitors, its generation */
#include "stack.h" /* cbcmn__stack_test_no_lightweight_guards */
#include "actor_test.h"

/* Receives until every sender's last message came (actor_test.h). */
static int64_t order_actor(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	cbcmn_actor_msg m;
	for (;;) {
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		if (order_take(o, &m))
			return 0;
	}
}

static int order_spawn(cbcmn_cx *cx, cbcmn_nursery *n, struct order *o)
{
	cbcmn_actor_opts ao = {.mailbox_cap = 3, .placement = CBCMN_PLACE_STEALABLE};
	return cbcmn_actor_spawn(cx, n, order_actor, o, &ao, &o->a);
}

static void test_order_per_sender_nothing_lost_or_twice(void **state)
{
	(void)state;
	order_run(order_spawn);
}

/* ---- across executors: two pinned actors play ping-pong ---- */

struct pp {
	cbcmn_actor_ref peer[2];
	_Atomic int ready;
	long rounds;
	uint32_t exec_seen[2];
	_Atomic long bad;
};

static int64_t pp_actor(cbcmn_cx *cx, void *arg)
{
	struct pp *p = arg;
	cbcmn_actor_ref me = cbcmn_actor_self(cx);
	while (atomic_load(&p->ready) < 2)
		cbcmn_yield(cx);
	int side = me == p->peer[0] ? 0 : 1;
	cbcmn_actor_ref other = p->peer[1 - side];
	if (side == 0) {
		cbcmn_actor_msg m = msg(M_DATA, 0, 0);
		if (cbcmn_actor_send(NULL, cx, other, &m))
			return -1;
	}
	for (;;) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		p->exec_seen[side] = cbcmn_cx_executor(cx);
		if (m.type == M_QUIT)
			return 0;
		if (m.from != other)
			atomic_fetch_add(&p->bad, 1);
		uint64_t v = m.body.u64[0];
		if (v % 2 != (uint64_t)(1 - side))
			atomic_fetch_add(&p->bad, 1); /* lost or doubled: parity breaks */
		if ((long)v >= p->rounds) {
			cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
			cbcmn_actor_send(NULL, cx, other, &q);
			return 0;
		}
		cbcmn_actor_msg r = msg(M_DATA, v + 1, 0);
		if ((rc = cbcmn_actor_send(NULL, cx, other, &r)))
			return rc;
	}
}

static int64_t pp_main(cbcmn_cx *cx, void *arg)
{
	struct pp *p = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	for (uint32_t i = 0; i < 2; i++) {
		cbcmn_actor_opts ao = {.mailbox_cap = 1, .placement = CBCMN_PLACE_PINNED, .shard = i};
		TASK_CHECK(cbcmn_actor_spawn(cx, n, pp_actor, p, &ao, &p->peer[i]) == 0);
		atomic_fetch_add(&p->ready, 1);
	}
	return cbcmn_nursery_await_all(cx, n);
}

static void test_ping_pong_across_executors(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct pp p = {.rounds = STRESS(4000)};
	t_run(rt, pp_main, &p, 0);
	assert_int_equal(atomic_load(&p.bad), 0);
	assert_int_equal(p.exec_seen[0], 0);
	assert_int_equal(p.exec_seen[1], 1);
	t_destroy(rt);
}

/* ---- references: a halted actor's is refused, even once its slot is reused ---- */

struct stale {
	cbcmn_actor_ref a, b;
	_Atomic long b_got;
	int rc_stale, rc_forged[4];
};

static int64_t returns_at_once(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t counts_until_quit(cbcmn_cx *cx, void *arg)
{
	struct stale *s = arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type != M_QUIT)
		atomic_fetch_add(&s->b_got, 1);
	return rc;
}

static int64_t stale_main(cbcmn_cx *cx, void *arg)
{
	struct stale *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, returns_at_once, s, NULL, &s->a) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, counts_until_quit, s, NULL, &s->b) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 1, 2);
	s->rc_stale = cbcmn_actor_send(NULL, cx, s->a, &m);
	cbcmn_actor_ref forged[4] = {CBCMN_ACTOR_NONE, s->b & 0xffffffffu, /* generation 0 */
				     s->b + (1ull << 32) /* a future generation */,
				     (7ull << 32) | 0xfffffff0u /* a slot never made */};
	for (int i = 0; i < 4; i++)
		s->rc_forged[i] = cbcmn_actor_try_send(NULL, cx, forged[i], &m);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, s->b, &q) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_stale_ref_rejected_after_slot_reuse(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct stale s = {0};
	t_run(rt, stale_main, &s, 0);
	/* The slot was reused (same index), with a new generation. */
	assert_int_equal(s.a & 0xffffffffu, s.b & 0xffffffffu);
	assert_true(s.a != s.b);
	assert_int_equal(s.rc_stale, -ESRCH);
	for (int i = 0; i < 4; i++)
		assert_int_equal(s.rc_forged[i], -ESRCH);
	assert_int_equal(atomic_load(&s.b_got), 0); /* B never saw A's message */
	t_destroy(rt);
}

/* ---- back-pressure: a send to a full mailbox waits for a receive ---- */

struct bp {
	cbcmn_actor_ref a;
	_Atomic int go, received;
	int received_at_send[4];
	long elapsed_ns;
	int rc_try, rc_timeout, rc_self;
	uint64_t got[4];
};

static int64_t bp_actor(cbcmn_cx *cx, void *arg)
{
	struct bp *b = arg;
	while (!atomic_load(&b->go))
		cbcmn_yield(cx);
	for (int i = 0; i < 4; i++) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		b->got[i] = m.body.u64[0];
		atomic_fetch_add(&b->received, 1);
	}
	return 0;
}

static int64_t bp_main(cbcmn_cx *cx, void *arg)
{
	struct bp *b = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 2};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, bp_actor, b, &ao, &b->a) == 0);
	for (uint64_t i = 0; i < 2; i++) {
		cbcmn_actor_msg m = msg(M_DATA, i, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, b->a, &m) == 0);
		b->received_at_send[i] = atomic_load(&b->received);
	}
	/* Full: try_send refuses, a timed send gives up, and neither is
	 * taken (the actor gets 0, 1, then 2 and 3 below). */
	cbcmn_actor_msg x = msg(M_DATA, 99, 0);
	b->rc_try = cbcmn_actor_try_send(NULL, cx, b->a, &x);
	uint64_t t0 = cbcmn_now(cbcmn_cx_runtime(cx));
	b->rc_timeout = cbcmn_actor_send_timeout(NULL, cx, b->a, &x, 30 * 1000000ull);
	b->elapsed_ns = (long)(cbcmn_now(cbcmn_cx_runtime(cx)) - t0);
	atomic_store(&b->go, 1);
	for (uint64_t i = 2; i < 4; i++) {
		cbcmn_actor_msg m = msg(M_DATA, i, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, b->a, &m) == 0);
		b->received_at_send[i] = atomic_load(&b->received);
	}
	return cbcmn_nursery_await_all(cx, n);
}

static void test_send_blocks_while_mailbox_full(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct bp b = {0};
	t_run(rt, bp_main, &b, 0);
	assert_int_equal(b.received_at_send[0], 0);
	assert_int_equal(b.received_at_send[1], 0);
	/* The third send waited until the actor had taken one. */
	assert_true(b.received_at_send[2] >= 1);
	assert_int_equal(b.rc_try, -EAGAIN);
	assert_int_equal(b.rc_timeout, -ETIMEDOUT);
	assert_true(b.elapsed_ns >= 30 * 1000000l); /* not early */
	for (uint64_t i = 0; i < 4; i++)
		assert_int_equal(b.got[i], i); /* 99 never got in */
	t_destroy(rt);
}

/* ---- receive with a timeout ---- */

struct rt_to {
	long waited_ns;
	int rc_empty, rc_zero, rc_msg;
	uint64_t v;
	_Atomic int timed_out; /* the 20 ms receive has returned */
};

static int64_t to_actor(cbcmn_cx *cx, void *arg)
{
	struct rt_to *r = arg;
	cbcmn_actor_msg m = {0};
	r->rc_zero = cbcmn_actor_receive(cx, &m, 0);
	uint64_t t0 = cbcmn_now(cbcmn_cx_runtime(cx));
	r->rc_empty = cbcmn_actor_receive(cx, &m, 20 * 1000000ull);
	r->waited_ns = (long)(cbcmn_now(cbcmn_cx_runtime(cx)) - t0);
	atomic_store(&r->timed_out, 1);
	/* The message comes well before this timeout: it is received. */
	r->rc_msg = cbcmn_actor_receive(cx, &m, T_STALL_NS);
	r->v = m.body.u64[0];
	return 0;
}

static int64_t to_main(cbcmn_cx *cx, void *arg)
{
	struct rt_to *r = arg;
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, to_actor, r, NULL, &a) == 0);
	/* After the timed-out receive (the actor waits 20 ms first).  Told,
	 * not guessed: a sleep of 40 ms here let the message in before the
	 * 20 ms receive even began when the actor started late (a CPU-capped
	 * cgroup throttles every thread of the process for tens of ms). */
	while (!atomic_load(&r->timed_out))
		cbcmn_sleep(cx, 1000000ull);
	cbcmn_actor_msg m = msg(M_DATA, 7, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, a, &m) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_receive_timeout_fires_and_not_early(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct rt_to r = {0};
	t_run(rt, to_main, &r, 0);
	assert_int_equal(r.rc_zero, -ETIMEDOUT);
	assert_int_equal(r.rc_empty, -ETIMEDOUT);
	assert_true(r.waited_ns >= 20 * 1000000l);
	assert_int_equal(r.rc_msg, 0);
	assert_int_equal(r.v, 7);
	t_destroy(rt);
}

/* ---- stop: the receiver is told, senders are refused, the reason wins ---- */

struct stop {
	cbcmn_actor_ref a, b;
	_Atomic int sender_in, b_stopped;
	int rc_a, rc_b, rc_blocked, rc_after;
};

/* A: waits in receive on an empty mailbox when the stop comes. */
static int64_t stop_a(cbcmn_cx *cx, void *arg)
{
	struct stop *s = arg;
	cbcmn_actor_msg m;
	s->rc_a = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	return 0; /* the stop's reason replaces this */
}

/* B: does not receive until stopped; a message waits in its mailbox. */
static int64_t stop_b(cbcmn_cx *cx, void *arg)
{
	struct stop *s = arg;
	cbcmn_actor_msg m;
	while (!atomic_load(&s->b_stopped))
		cbcmn_yield(cx);
	s->rc_b = cbcmn_actor_receive(cx, &m, 0);
	return 0;
}

static int64_t stop_blocked_sender(cbcmn_cx *cx, void *arg)
{
	struct stop *s = arg;
	cbcmn_actor_msg m = msg(M_DATA, 2, 0);
	atomic_store(&s->sender_in, 1);
	s->rc_blocked = cbcmn_actor_send(NULL, cx, s->b, &m); /* full: waits */
	return 0;
}

static int64_t stop_main(cbcmn_cx *cx, void *arg)
{
	struct stop *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, stop_a, s, &ao, &s->a) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, stop_b, s, &ao, &s->b) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 1, 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, s->b, &m) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, stop_blocked_sender, s, NULL) == 0);
	/* One worker: everything runs until it waits. */
	while (!atomic_load(&s->sender_in))
		cbcmn_yield(cx);
	for (int i = 0; i < 8; i++)
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, s->a, -42) == 0);
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, s->a, -43) == 0); /* the first reason wins */
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, s->b, 0) == 0);
	s->rc_after = cbcmn_actor_try_send(NULL, cx, s->a, &m);
	atomic_store(&s->b_stopped, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_stop_ends_receive_and_fails_senders(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct stop s = {0};
	t_run(rt, stop_main, &s, -42); /* A's stop reason, not its return */
	assert_int_equal(s.rc_a, -ESHUTDOWN);
	assert_int_equal(s.rc_b, -ESHUTDOWN); /* even with a message waiting */
	assert_int_equal(s.rc_blocked, -ESRCH);
	assert_int_equal(s.rc_after, -ESRCH);
	t_destroy(rt);
}

/* ---- monitors: DOWN with the reason, after the watched actor's messages ---- */

/* ---- every path a send puts a message by: from set, _reserved zeroed ---- */

/* The send copies the caller's message once, to where it goes (the
 * waiting receiver's buffer, the ring, a lane message, a blocked sender's
 * record): each must carry the body whole, from written as the sender
 * (CBCMN_ACTOR_NONE for a plain task) and _reserved zeroed, whatever the
 * caller left in them.  Three senders: an actor on the receiver's
 * executor (the lock path), one on the other (the lanes), and the plain
 * main task; a mailbox of two and a receiver that starts late, so that
 * messages wait in the ring, senders wait for room, and later ones are
 * handed to the receiver as it waits. */
enum { MP_SENDERS = 3, MP_EACH = 300 };

struct mp {
	cbcmn_actor_ref rcv, snd[MP_SENDERS];
	_Atomic int spawned;
	uint64_t next[MP_SENDERS];
	long got, bad_reserved, bad_from, bad_body, bad_order;
};

static uint64_t mp_word(uint64_t who, uint64_t i, int k)
{
	return (who << 40) ^ (i * 0x9e3779b97f4a7c15ull) ^ (uint64_t)k;
}

static void mp_send_all(cbcmn_cx *cx, struct mp *p, uint64_t who)
{
	for (uint64_t i = 0; i < MP_EACH; i++) {
		cbcmn_actor_msg m = {.type = M_DATA, ._reserved = 0xdeadbeefu, .from = 12345};
		m.body.u64[0] = who;
		m.body.u64[1] = i;
		for (int k = 2; k < 6; k++)
			m.body.u64[k] = mp_word(who, i, k);
		int rc;
		/* Every third a try_send, again after a yield while full. */
		while (i % 3 == 2 && (rc = cbcmn_actor_try_send(NULL, cx, p->rcv, &m)) == -EAGAIN)
			cbcmn_yield(cx);
		if (i % 3 != 2)
			rc = cbcmn_actor_send(NULL, cx, p->rcv, &m);
		TASK_CHECK(rc == 0);
		if (rc)
			return;
	}
}

static int64_t mp_receiver(cbcmn_cx *cx, void *arg)
{
	struct mp *p = arg;
	cbcmn_sleep(cx, 20 * 1000 * 1000); /* the senders fill the mailbox, then wait */
	for (long n = 0; n < (long)MP_SENDERS * MP_EACH; n++) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		p->got++;
		uint64_t who = m.body.u64[0], i = m.body.u64[1];
		if (m._reserved != 0)
			p->bad_reserved++;
		if (who >= MP_SENDERS) {
			p->bad_body++;
			continue;
		}
		cbcmn_actor_ref want = who == MP_SENDERS - 1 ? CBCMN_ACTOR_NONE : p->snd[who];
		if (m.from != want)
			p->bad_from++;
		if (i != p->next[who]++)
			p->bad_order++;
		for (int k = 2; k < 6; k++)
			if (m.body.u64[k] != mp_word(who, i, k))
				p->bad_body++;
		if (m.type != M_DATA)
			p->bad_body++;
	}
	return 0;
}

static int64_t mp_sender(cbcmn_cx *cx, void *arg)
{
	struct mp *p = arg;
	while (atomic_load(&p->spawned) == 0)
		cbcmn_yield(cx); /* snd[] written */
	cbcmn_actor_ref me = cbcmn_actor_self(cx);
	mp_send_all(cx, p, me == p->snd[0] ? 0 : 1);
	return 0;
}

static int64_t mp_main(cbcmn_cx *cx, void *arg)
{
	struct mp *p = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ro = {.mailbox_cap = 2, .placement = CBCMN_PLACE_PINNED, .shard = 0};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, mp_receiver, p, &ro, &p->rcv) == 0);
	for (uint32_t s = 0; s < 2; s++) {
		cbcmn_actor_opts so = {.placement = CBCMN_PLACE_PINNED, .shard = s};
		TASK_CHECK(cbcmn_actor_spawn(cx, n, mp_sender, p, &so, &p->snd[s]) == 0);
	}
	atomic_store(&p->spawned, 1);
	mp_send_all(cx, p, MP_SENDERS - 1); /* a plain task's: from NONE */
	return cbcmn_nursery_await_all(cx, n);
}

static void test_send_sets_from_and_zeroes_reserved_on_every_path(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct mp p = {0};
	t_run(rt, mp_main, &p, 0);
	assert_int_equal(p.got, (long)MP_SENDERS * MP_EACH);
	assert_int_equal(p.bad_reserved, 0);
	assert_int_equal(p.bad_from, 0);
	assert_int_equal(p.bad_body, 0);
	assert_int_equal(p.bad_order, 0);
	for (int s = 0; s < MP_SENDERS; s++)
		assert_int_equal(p.next[s], MP_EACH);
	t_destroy(rt);
}

struct mon {
	cbcmn_actor_ref watcher, worker;
	uint64_t mon_id, dead_id;
	cbcmn_actor_msg got[8];
	int ngot;
};

static int64_t mon_worker(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg hello;
	/* The watcher says hello once it monitors us: reply to its from. */
	if (cbcmn_actor_receive(cx, &hello, CBCMN_ACTOR_FOREVER))
		return -1;
	for (uint64_t i = 0; i < 3; i++) {
		cbcmn_actor_msg m = msg(M_DATA, i, 0);
		if (cbcmn_actor_send(NULL, cx, hello.from, &m))
			return -1;
	}
	return -7;
}

static int64_t mon_watcher(cbcmn_cx *cx, void *arg)
{
	struct mon *s = arg;
	TASK_CHECK(cbcmn_actor_monitor(cx, s->worker, &s->mon_id) == 0);
	cbcmn_actor_msg hello = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, s->worker, &hello) == 0);
	int downs = 0;
	while (downs < 2 && s->ngot < 8) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		s->got[s->ngot++] = m;
		if (m.type == CBCMN_ACTOR_DOWN && ++downs == 1)
			/* The worker is dead now: a second monitor's DOWN comes
			 * at once. */
			TASK_CHECK(cbcmn_actor_monitor(cx, s->worker, &s->dead_id) == 0);
	}
	return 0;
}

static int64_t mon_main(cbcmn_cx *cx, void *arg)
{
	struct mon *s = arg;
	cbcmn_nursery *n, *nw;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(open_n(cx, &nw) == 0);
	/* A small mailbox: the worker's three sends wait for room, DOWN
	 * never does. */
	cbcmn_actor_opts ao = {.mailbox_cap = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, nw, mon_worker, s, NULL, &s->worker) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, mon_watcher, s, &ao, &s->watcher) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nw) == -7); /* the worker's reason */
	return cbcmn_nursery_await_all(cx, n);
}

static void test_monitor_down_after_messages_with_reason(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct mon s = {0};
	t_run(rt, mon_main, &s, 0);
	assert_int_equal(s.ngot, 5);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(s.got[i].type, M_DATA);
		assert_int_equal(s.got[i].body.u64[0], (uint64_t)i);
		assert_int_equal(s.got[i].from, s.worker);
	}
	assert_int_equal(s.got[3].type, CBCMN_ACTOR_DOWN);
	assert_int_equal(s.got[3].from, s.worker);
	assert_int_equal(s.got[3].body.down.monitor, s.mon_id);
	assert_int_equal(s.got[3].body.down.reason, -7);
	assert_int_equal(s.got[4].type, CBCMN_ACTOR_DOWN);
	assert_int_equal(s.got[4].body.down.monitor, s.dead_id);
	assert_int_equal(s.got[4].body.down.reason, -ESRCH);
	assert_true(s.dead_id != s.mon_id);
	t_destroy(rt);
}

/* ---- a DOWN after every message, handed over or queued ---- */

/* A watcher monitors DM_K targets, each of which sends it DM_B messages
 * and ends.  The watcher sleeps now and then, so that some messages are
 * handed to its waiting receive and some wait in its ring of 4, and the
 * targets block for room: a DOWN must come after every message of its
 * target, and none after it.  A DOWN is due once the watcher has taken
 * the messages its mailbox had put when the DOWN was queued; that count
 * is derived from the ring (actor_mbox.c, put_total()), which a hand-over
 * bypasses: a hand-over that it missed would let a DOWN overtake. */
enum { DM_K = 24, DM_B = 7, DM_ROUNDS = 20 };

struct dm {
	cbcmn_actor_ref watcher, target[DM_K];
	int got[DM_K], down[DM_K], bad;
};

static int64_t dm_target(cbcmn_cx *cx, void *arg)
{
	struct dm *d = arg;
	cbcmn_actor_msg go; /* after the watcher's monitor; body: our index */
	TASK_CHECK(cbcmn_actor_receive(cx, &go, CBCMN_ACTOR_FOREVER) == 0);
	for (uint64_t i = 0; i < DM_B; i++) {
		cbcmn_actor_msg m = msg(M_DATA, go.body.u64[0], i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, d->watcher, &m) == 0);
	}
	return 0;
}

static int dm_index(const struct dm *d, cbcmn_actor_ref a)
{
	for (int k = 0; k < DM_K; k++)
		if (d->target[k] == a)
			return k;
	return -1;
}

static int64_t dm_watcher(cbcmn_cx *cx, void *arg)
{
	struct dm *d = arg;
	uint64_t id;
	for (int k = 0; k < DM_K; k++) {
		TASK_CHECK(cbcmn_actor_monitor(cx, d->target[k], &id) == 0);
		cbcmn_actor_msg go = msg(M_DATA, (uint64_t)k, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, d->target[k], &go) == 0);
	}
	for (int downs = 0, i = 0; downs < DM_K; i++) {
		if (i % 3 == 0)
			cbcmn_sleep(cx, 20000); /* the ring fills meanwhile */
		cbcmn_actor_msg m;
		TASK_CHECK(cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0);
		int k = m.type == CBCMN_ACTOR_DOWN ? dm_index(d, m.from) : (int)m.body.u64[0];
		if (k < 0 || k >= DM_K || d->down[k]) {
			d->bad++; /* a stranger, or anything after a DOWN */
			continue;
		}
		if (m.type == CBCMN_ACTOR_DOWN) {
			d->bad += d->got[k] != DM_B; /* it overtook its messages */
			d->down[k] = 1;
			downs++;
		} else {
			d->bad += m.body.u64[1] != (uint64_t)d->got[k]; /* out of order */
			d->got[k]++;
		}
	}
	return 0;
}

static int64_t dm_main(cbcmn_cx *cx, void *arg)
{
	struct dm *d = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts to = {.mailbox_cap = 1}, wo = {.mailbox_cap = 4};
	for (int k = 0; k < DM_K; k++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, dm_target, d, &to, &d->target[k]) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, dm_watcher, d, &wo, &d->watcher) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_downs_follow_every_message_handed_over_or_queued(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	for (int r = 0; r < DM_ROUNDS; r++) {
		struct dm d = {0};
		t_run(rt, dm_main, &d, 0);
		assert_int_equal(d.bad, 0);
		for (int k = 0; k < DM_K; k++) {
			assert_int_equal(d.got[k], DM_B);
			assert_int_equal(d.down[k], 1);
		}
	}
	t_destroy(rt);
}

/* ---- demonitor: no DOWN after it, queued ones flushed ---- */

static int64_t quits_on_message(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	return cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0 ? 0 : -1;
}


struct demon {
	cbcmn_actor_ref worker;
	uint64_t m1, m2;
	int rc_demon, rc_flush, rc_again, rc_after, rc_empty;
	cbcmn_actor_msg down;
};

static int64_t demon_watcher(cbcmn_cx *cx, void *arg)
{
	struct demon *d = arg;
	TASK_CHECK(cbcmn_actor_monitor(cx, d->worker, &d->m1) == 0);
	TASK_CHECK(cbcmn_actor_monitor(cx, d->worker, &d->m2) == 0);
	d->rc_demon = cbcmn_actor_demonitor(cx, d->worker, d->m1);
	d->rc_again = cbcmn_actor_demonitor(cx, d->worker, d->m1);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, d->worker, &q) == 0);
	/* m2's DOWN comes, m1's never does. */
	TASK_CHECK(cbcmn_actor_receive(cx, &d->down, CBCMN_ACTOR_FOREVER) == 0);
	cbcmn_actor_msg m;
	d->rc_after = cbcmn_actor_receive(cx, &m, 20 * 1000000ull);
	/* A dead reference's DOWN is queued at once; demonitor flushes it. */
	uint64_t m3;
	TASK_CHECK(cbcmn_actor_monitor(cx, d->worker, &m3) == 0);
	d->rc_flush = cbcmn_actor_demonitor(cx, d->worker, m3);
	d->rc_empty = cbcmn_actor_receive(cx, &m, 0);
	return 0;
}

static int64_t demon_main(cbcmn_cx *cx, void *arg)
{
	struct demon *d = arg;
	cbcmn_nursery *n;
	cbcmn_actor_ref w;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, NULL, &d->worker) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, demon_watcher, d, NULL, &w) == 0);
	TASK_CHECK(cbcmn_actor_demonitor(cx, d->worker, 1) == -EPERM); /* not an actor */
	return cbcmn_nursery_await_all(cx, n);
}

static void test_demonitor_stops_and_flushes_down(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct demon d = {0};
	t_run(rt, demon_main, &d, 0);
	assert_int_equal(d.rc_demon, 0);
	assert_int_equal(d.rc_again, -ENOENT);
	assert_int_equal(d.down.type, CBCMN_ACTOR_DOWN);
	assert_int_equal(d.down.body.down.monitor, d.m2);
	assert_int_equal(d.rc_after, -ETIMEDOUT);
	assert_int_equal(d.rc_flush, 0);
	assert_int_equal(d.rc_empty, -ETIMEDOUT);
	t_destroy(rt);
}

/* ---- halt: undelivered messages go to drop, once each ---- */

struct drop {
	cbcmn_actor_ref a;
	_Atomic int dropped;
	uint64_t sum;
};

static void drop_cb(void *state, const cbcmn_actor_msg *m)
{
	struct drop *d = state;
	atomic_fetch_add(&d->dropped, 1);
	d->sum += m->body.u64[0];
}

static int64_t never_receives(cbcmn_cx *cx, void *arg)
{
	struct drop *d = arg;
	cbcmn_actor_msg m;
	/* Takes one (so the test knows the mailbox is set), leaves the rest. */
	while (cbcmn_actor_receive(cx, &m, 0) != 0)
		cbcmn_yield(cx);
	d->sum += 1000 * m.body.u64[0];
	return 0;
}

static int64_t drop_main(cbcmn_cx *cx, void *arg)
{
	struct drop *d = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 4, .drop = drop_cb};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, never_receives, d, &ao, &d->a) == 0);
	for (uint64_t i = 1; i <= 4; i++) {
		cbcmn_actor_msg m = msg(M_DATA, i, 0);
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, d->a, &m) == 0);
	}
	return cbcmn_nursery_await_all(cx, n);
}

static void test_halt_drops_undelivered_once_each(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct drop d = {0};
	t_run(rt, drop_main, &d, 0);
	/* Message 1 received; 2, 3 and 4 dropped, each once. */
	assert_int_equal(atomic_load(&d.dropped), 3);
	assert_int_equal(d.sum, 1000 + 2 + 3 + 4);
	t_destroy(rt);
}

/* ---- a drop callback that receives gets -ESHUTDOWN, not a wait for ever ---- */

struct reent {
	cbcmn_cx *cx;
	int rc;
};

static void drop_receives(void *state, const cbcmn_actor_msg *m)
{
	struct reent *r = state;
	cbcmn_actor_msg x;
	(void)m;
	r->rc = cbcmn_actor_receive(r->cx, &x, CBCMN_ACTOR_FOREVER);
}

static int64_t leaves_one(cbcmn_cx *cx, void *arg)
{
	struct reent *r = arg;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	r->cx = cx;
	return cbcmn_actor_send(NULL, cx, cbcmn_actor_self(cx), &m); /* left for drop */
}

static int64_t reent_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	cbcmn_actor_opts ao = {.drop = drop_receives};
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, leaves_one, arg, &ao, &a) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_receive_during_halt_is_eshutdown(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct reent r = {.rc = 1};
	t_run(rt, reent_main, &r, 0);
	assert_int_equal(r.rc, -ESHUTDOWN);
	t_destroy(rt);
}

/* ---- an actor sending to its own full mailbox is refused ---- */

static int64_t self_sender(cbcmn_cx *cx, void *arg)
{
	int *rc = arg;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	cbcmn_actor_ref me = cbcmn_actor_self(cx);
	TASK_CHECK(me != CBCMN_ACTOR_NONE);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, me, &m) == 0);
	rc[0] = cbcmn_actor_send(NULL, cx, me, &m);
	TASK_CHECK(cbcmn_actor_receive(cx, &m, 0) == 0);
	TASK_CHECK(m.from == me);
	return 0;
}

static int64_t self_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_actor_ref a;
	cbcmn_actor_opts ao = {.mailbox_cap = 1};
	TASK_CHECK(cbcmn_actor_self(cx) == CBCMN_ACTOR_NONE); /* a plain task */
	cbcmn_actor_msg m;
	TASK_CHECK(cbcmn_actor_receive(cx, &m, 0) == -EPERM);
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, self_sender, arg, &ao, &a) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_send_to_own_full_mailbox_is_edeadlk(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	int rc = 0;
	t_run(rt, self_main, &rc, 0);
	assert_int_equal(rc, -EDEADLK);
	t_destroy(rt);
}

/* ---- budget: sends and receives are channel_ops ---- */

struct bud {
	cbcmn_actor_ref a;
	uint64_t before, after, actor_before, actor_after;
};

static int64_t bud_actor(cbcmn_cx *cx, void *arg)
{
	struct bud *b = arg;
	cbcmn_budget bg;
	TASK_CHECK(cbcmn_budget_get(cx, &bg) == 0);
	b->actor_before = bg.channel_ops;
	for (int i = 0; i < 5; i++) {
		cbcmn_actor_msg m;
		TASK_CHECK(cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0);
	}
	TASK_CHECK(cbcmn_budget_get(cx, &bg) == 0);
	b->actor_after = bg.channel_ops;
	return 0;
}

static int64_t bud_sender(cbcmn_cx *cx, void *arg)
{
	struct bud *b = arg;
	cbcmn_budget bg;
	TASK_CHECK(cbcmn_budget_get(cx, &bg) == 0);
	b->before = bg.channel_ops;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	for (int i = 0; i < 3; i++)
		TASK_CHECK(cbcmn_actor_send(NULL, cx, b->a, &m) == 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, b->a, &m) == 0);
	TASK_CHECK(cbcmn_actor_send_timeout(NULL, cx, b->a, &m, T_STALL_NS) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &bg) == 0);
	b->after = bg.channel_ops;
	return 0;
}

static int64_t bud_main(cbcmn_cx *cx, void *arg)
{
	struct bud *b = arg;
	cbcmn_nursery *n;
	cbcmn_budget ab = {.ops = 1000, .memory = 1000, .spawn_count = 10, .channel_ops = 50,
			   .syscalls = 10};
	cbcmn_budget sb = ab;
	sb.channel_ops = 20;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.budget = &ab};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, bud_actor, b, &ao, &b->a) == 0);
	cbcmn_spawn_opts so = {.budget = &sb};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, bud_sender, b, &so, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_sends_and_receives_charge_channel_ops(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct bud b = {0};
	t_run(rt, bud_main, &b, 0);
	assert_int_equal(b.before, 20);
	assert_int_equal(b.after, 15);
	assert_int_equal(b.actor_before, 50);
	assert_int_equal(b.actor_after, 45);
	t_destroy(rt);
}

/* ---- cancellation: blocked receive and blocked send leave no trace ---- */

struct cx_cancel {
	cbcmn_actor_ref full, idle;
	_Atomic int blocked, go;
	int rc_send;
	_Atomic int full_got;
};

static int64_t idle_actor(cbcmn_cx *cx, void *arg)
{
	struct cx_cancel *c = arg;
	cbcmn_actor_msg m;
	atomic_fetch_add(&c->blocked, 1);
	return cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
}

static int64_t full_actor(cbcmn_cx *cx, void *arg)
{
	struct cx_cancel *c = arg;
	cbcmn_actor_msg m;
	int rc;
	while (!atomic_load(&c->go))
		cbcmn_yield(cx);
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type != M_QUIT)
		atomic_fetch_add(&c->full_got, 1);
	return rc;
}

static int64_t cancel_sender(cbcmn_cx *cx, void *arg)
{
	struct cx_cancel *c = arg;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	atomic_fetch_add(&c->blocked, 1);
	c->rc_send = cbcmn_actor_send(NULL, cx, c->full, &m);
	return 0;
}

static int64_t cancel_main(cbcmn_cx *cx, void *arg)
{
	struct cx_cancel *c = arg;
	cbcmn_nursery *keep, *n;
	TASK_CHECK(open_n(cx, &keep) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 1};
	/* A mailbox that is full while the full actor waits to be told. */
	TASK_CHECK(cbcmn_actor_spawn(cx, keep, full_actor, c, &ao, &c->full) == 0);
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, idle_actor, c, NULL, &c->idle) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	/* Filled before the full actor first runs (one worker). */
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, c->full, &m) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, cancel_sender, c, NULL) == 0);
	while (atomic_load(&c->blocked) < 2)
		cbcmn_yield(cx);
	for (int i = 0; i < 8; i++)
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_nursery_cancel(n) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == CBCMN_ECANCELED);
	/* The idle actor halted: its reference is dead. */
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, c->idle, &m) == -ESRCH);
	atomic_store(&c->go, 1);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, c->full, &q) == 0);
	return cbcmn_nursery_await_all(cx, keep);
}

static void test_cancel_blocked_send_and_receive_leave_no_trace(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct cx_cancel c = {0};
	t_run(rt, cancel_main, &c, 0);
	assert_int_equal(c.rc_send, CBCMN_ECANCELED);
	/* Only the first message: the cancelled send was not taken. */
	assert_int_equal(atomic_load(&c.full_got), 1);
	t_destroy(rt);
}

/* ---- links: an abnormal halt stops the linked actor, a normal one does not ---- */

struct link {
	cbcmn_actor_ref a, b, c;
	_Atomic int linked;
	_Atomic int c_ran; /* C has run (is receiving, or about to) */
	int rc_a, rc_c, rc_link_dead, rc_link_self;
	uint64_t c_got;
};

/* A: links with B, then waits in receive. */
static int64_t link_a(cbcmn_cx *cx, void *arg)
{
	struct link *l = arg;
	TASK_CHECK(cbcmn_actor_link(cx, l->b) == 0);
	TASK_CHECK(cbcmn_actor_link(cx, l->b) == 0); /* twice is once */
	/* C stopped before its first run would never run, and never set
	 * rc_c (an actor stopped before it ran never runs its behaviour). */
	while (!atomic_load(&l->c_ran))
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_actor_link(cx, l->c) == 0);
	l->rc_link_self = cbcmn_actor_link(cx, cbcmn_actor_self(cx));
	atomic_store(&l->linked, 1);
	cbcmn_actor_msg m;
	l->rc_a = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	return 0;
}

/* B: fails once A is linked with it. */
static int64_t link_b(cbcmn_cx *cx, void *arg)
{
	struct link *l = arg;
	while (!atomic_load(&l->linked))
		cbcmn_yield(cx);
	return -9;
}

/* C: linked with A; A halts with -9 and takes C down with it. */
static int64_t link_c(cbcmn_cx *cx, void *arg)
{
	struct link *l = arg;
	cbcmn_actor_msg m;
	atomic_store(&l->c_ran, 1);
	l->rc_c = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	return 0;
}

/* D: linked with a normal quitter, keeps running. */
static int64_t link_d(cbcmn_cx *cx, void *arg)
{
	struct link *l = arg;
	cbcmn_actor_ref q;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, l, NULL, &q) == 0);
	TASK_CHECK(cbcmn_actor_link(cx, q) == 0);
	cbcmn_actor_msg m = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, q, &m) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0); /* q halted normally */
	l->rc_link_dead = cbcmn_actor_link(cx, q);
	/* Not stopped: a receive still works. */
	TASK_CHECK(cbcmn_actor_send(NULL, cx, cbcmn_actor_self(cx), &m) == 0);
	TASK_CHECK(cbcmn_actor_receive(cx, &m, 0) == 0);
	l->c_got = m.type;
	return 0;
}

static int64_t link_main(cbcmn_cx *cx, void *arg)
{
	struct link *l = arg;
	cbcmn_nursery *na, *nb, *nc, *nd;
	TASK_CHECK(open_n(cx, &na) == 0);
	TASK_CHECK(open_n(cx, &nb) == 0);
	TASK_CHECK(open_n(cx, &nc) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nb, link_b, l, NULL, &l->b) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nc, link_c, l, NULL, &l->c) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, na, link_a, l, NULL, &l->a) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nc) == -9);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nb) == -9);
	TASK_CHECK(cbcmn_nursery_await_all(cx, na) == -9);
	TASK_CHECK(open_n(cx, &nd) == 0);
	cbcmn_actor_ref d;
	TASK_CHECK(cbcmn_actor_spawn(cx, nd, link_d, l, NULL, &d) == 0);
	return cbcmn_nursery_await_all(cx, nd);
}

static void test_link_passes_abnormal_halts_only(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct link l = {0};
	t_run(rt, link_main, &l, 0);
	assert_int_equal(l.rc_a, -ESHUTDOWN);
	assert_int_equal(l.rc_c, -ESHUTDOWN);
	assert_int_equal(l.rc_link_self, -EINVAL);
	assert_int_equal(l.rc_link_dead, -ESRCH);
	assert_int_equal(l.c_got, M_QUIT);
	t_destroy(rt);
}

/* ---- a stop landing as the receive begins to wait: still -ESHUTDOWN ---- */

struct stop_race {
	_Atomic int entering; /* the receiver is about to receive */
	_Atomic int bad;      /* receives that ended otherwise */
	_Atomic int last_bad;
};

static int64_t racing_receiver(cbcmn_cx *cx, void *arg)
{
	struct stop_race *r = arg;
	cbcmn_actor_msg m;
	atomic_store(&r->entering, 1);
	int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	if (rc != -ESHUTDOWN) {
		atomic_fetch_add(&r->bad, 1);
		atomic_store(&r->last_bad, rc);
	}
	return 0;
}

/* The stopper spins on one executor until the receiver, pinned to the
 * other, is entering its receive, then stops it: the stop lands anywhere
 * from before the receive's checks to its wait's own look at the flag.
 * The receive's wait saw the stop's interrupted flag first and claimed
 * itself cancelled (CBCMN_ECANCELED) before the stop could hand it
 * -ESHUTDOWN (test_link_passes_abnormal_halts_only failed so, once). */
static int64_t stop_race_main(cbcmn_cx *cx, void *arg)
{
	struct stop_race *r = arg;
	uint32_t me = cbcmn_cx_executor(cx);
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = me ^ 1u};
	for (int i = 0; i < T_SCALE(3000); i++) {
		cbcmn_nursery *n;
		TASK_CHECK(open_n(cx, &n) == 0);
		atomic_store(&r->entering, 0);
		cbcmn_actor_ref a;
		TASK_CHECK(cbcmn_actor_spawn(cx, n, racing_receiver, r, &o, &a) == 0);
		while (!atomic_load(&r->entering))
			;
		/* A little later each time: across the receive's entry. */
		for (volatile int d = 0; d < i % 64; d++)
			;
		TASK_CHECK(cbcmn_actor_stop(NULL, cx, a, 0) == 0);
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	}
	return 0;
}

static void test_stop_as_receive_begins_to_wait_is_eshutdown(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct stop_race r = {0};
	assert_int_equal(t_run_pinned(rt, 0, stop_race_main, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&r.last_bad), 0);
	assert_int_equal(atomic_load(&r.bad), 0);
	t_destroy(rt);
}

/* ---- an actor stopped before its first run: never runs, DOWN says so ---- */

struct unrun {
	_Atomic int ran;
	cbcmn_actor_msg down;
	int rc_down;
};

static int64_t unrun_target(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct unrun *u = arg;
	atomic_store(&u->ran, 1);
	return 0;
}

/* The watcher spawns the target pinned to its own executor, fills its
 * mailbox with 3 messages and stops it, all before it yields: the target
 * is stopped before it could run.  It never runs (as an Erlang process
 * killed before it was scheduled); its DOWN carries the stop's reason and
 * the 3 messages as undelivered.  (The watcher is new: its fairness
 * window, thousands of ops, cannot run out in these few calls.) */
static int64_t unrun_watcher(cbcmn_cx *cx, void *arg)
{
	struct unrun *u = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = cbcmn_cx_executor(cx)};
	cbcmn_actor_ref t;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, unrun_target, u, &o, &t) == 0);
	uint64_t mon;
	TASK_CHECK(cbcmn_actor_monitor(cx, t, &mon) == 0);
	for (int i = 0; i < 3; i++) {
		cbcmn_actor_msg m = msg(M_DATA, 0, 0);
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, t, &m) == 0);
	}
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, t, -7) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == -7);
	u->rc_down = cbcmn_actor_receive(cx, &u->down, CBCMN_ACTOR_FOREVER);
	return 0;
}

static int64_t unrun_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_ref w;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, unrun_watcher, arg, NULL, &w) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_actor_stopped_before_it_ran_never_runs_and_reports_down(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct unrun u = {0};
	t_run(rt, unrun_main, &u, 0);
	assert_int_equal(atomic_load(&u.ran), 0);
	assert_int_equal(u.rc_down, 0);
	assert_int_equal(u.down.type, CBCMN_ACTOR_DOWN);
	assert_int_equal(u.down.body.down.reason, -7);
	assert_int_equal(u.down.body.down.undelivered, 3);
	t_destroy(rt);
}

/* ---- a crash halts the actor too: DOWN says why ---- */

struct crash {
	cbcmn_actor_fn victim;
	cbcmn_actor_ref v;
	cbcmn_actor_msg down;
	int64_t victim_rc;
};

static int64_t overflows(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return t_recurse(NULL, 0);
}

/* channel_ops 2: the third receive exhausts it, nobody recharges. */
static int64_t overspends(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	for (int i = 0; i < 3; i++)
		cbcmn_actor_receive(cx, &m, 0);
	return 0;
}

static int64_t crash_watcher(cbcmn_cx *cx, void *arg)
{
	struct crash *c = arg;
	uint64_t id;
	TASK_CHECK(cbcmn_actor_monitor(cx, c->v, &id) == 0);
	cbcmn_actor_msg hello = msg(M_DATA, 0, 0);
	/* Tells the victim it is watched (it waits for a message first). */
	cbcmn_actor_try_send(NULL, cx, c->v, &hello);
	int rc = cbcmn_actor_receive(cx, &c->down, CBCMN_ACTOR_FOREVER);
	TASK_CHECK(c->down.body.down.monitor == id);
	return rc;
}

static int64_t wait_then(cbcmn_cx *cx, void *arg)
{
	struct crash *c = arg;
	cbcmn_actor_msg m;
	if (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER))
		return -1;
	return c->victim(cx, arg);
}

static int64_t crash_main(cbcmn_cx *cx, void *arg)
{
	struct crash *c = arg;
	cbcmn_nursery *nv, *nw;
	cbcmn_actor_ref w;
	TASK_CHECK(open_n(cx, &nw) == 0);
	TASK_CHECK(open_n(cx, &nv) == 0);
	cbcmn_budget b = {.channel_ops = 2};
	cbcmn_caps none = {0}; /* no CapBudget: it cannot recharge itself */
	cbcmn_actor_opts ao = {.budget = c->victim == overspends ? &b : NULL, .caps = &none};
	TASK_CHECK(cbcmn_actor_spawn(cx, nv, wait_then, c, &ao, &c->v) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nw, crash_watcher, c, NULL, &w) == 0);
	c->victim_rc = cbcmn_nursery_await_all(cx, nv);
	return cbcmn_nursery_await_all(cx, nw);
}

static void crash_case(cbcmn_actor_fn victim, int64_t want)
{
	cbcmn_runtime *rt = t_runtime(2);
	struct crash c = {.victim = victim};
	t_run(rt, crash_main, &c, 0);
	assert_int_equal(c.victim_rc, want);
	assert_int_equal(c.down.type, CBCMN_ACTOR_DOWN);
	assert_int_equal(c.down.from, c.v);
	assert_int_equal(c.down.body.down.reason, want);
	t_destroy(rt);
}

static void test_stack_overflow_halts_with_epanic(void **state)
{
	(void)state;
	if (T_TSAN) {
		T_SKIP("TSan cannot follow a jump out of a signal handler");
		return;
	}
	crash_case(overflows, CBCMN_EPANIC);
}

static void test_budget_given_up_halts_with_ebudget(void **state)
{
	(void)state;
	crash_case(overspends, CBCMN_EBUDGET);
}

/* ---- a thread blocked on a full mailbox learns that the actor halted ---- */

struct thr {
	cbcmn_runtime *rt;
	cbcmn_actor_ref a;
	_Atomic int sending, done;
	int rc;
};

static void *thr_sender(void *arg)
{
	struct thr *t = arg;
	cbcmn_actor_msg m = msg(M_DATA, 1, 0);
	atomic_store(&t->sending, 1);
	t->rc = cbcmn_actor_send(t->rt, NULL, t->a, &m); /* full: sleeps */
	atomic_store(&t->done, 1);
	return NULL;
}

static int64_t thr_actor(cbcmn_cx *cx, void *arg)
{
	struct thr *t = arg;
	/* Halts, never receiving, once the thread is (very likely) asleep;
	 * if not, its send finds the reference dead: -ESRCH either way. */
	while (!atomic_load(&t->sending))
		cbcmn_yield(cx);
	cbcmn_sleep(cx, 20 * 1000000ull);
	return 0;
}

static int64_t thr_main(cbcmn_cx *cx, void *arg)
{
	struct thr *t = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, thr_actor, t, &ao, &t->a) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, t->a, &m) == 0);
	pthread_t th;
	TASK_CHECK(pthread_create(&th, NULL, thr_sender, t) == 0);
	pthread_detach(th);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_thread_blocked_on_halted_actor_gets_esrch(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct thr t = {.rt = rt};
	t_run(rt, thr_main, &t, 0);
	uint64_t t0 = t_now_ns();
	while (!atomic_load(&t.done) && t_now_ns() - t0 < T_STALL_NS)
		usleep(1000);
	assert_true(atomic_load(&t.done));
	assert_int_equal(t.rc, -ESRCH);
	t_destroy(rt);
}

/* ---- a spawn that fails leaves nothing behind ---- */

static int64_t spawn_fail_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	cbcmn_actor_ref a = 1;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_cancel(n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, returns_at_once, NULL, NULL, &a) == CBCMN_ECANCELED);
	TASK_CHECK(a == CBCMN_ACTOR_NONE);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == CBCMN_ECANCELED);
	return 0;
}

static void test_failed_spawn_leaves_nothing(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_run(rt, spawn_fail_main, NULL, 0);
	t_destroy(rt); /* ASan: the slot's ring was freed */
}

/* ---- fairness: a message flood does not starve plain tasks, nor the reverse ---- */

struct flood {
	cbcmn_actor_ref a;
	_Atomic int plain_done, actor_got_enough, stop, flooders_done;
	_Atomic long received, sent;
};

static int64_t flood_actor(cbcmn_cx *cx, void *arg)
{
	struct flood *f = arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type != M_QUIT)
		if (atomic_fetch_add(&f->received, 1) + 1 == 2000)
			atomic_store(&f->actor_got_enough, 1);
	return rc;
}

/* Sends until told to stop: the actor's mailbox never stays empty. */
static int64_t flooder(cbcmn_cx *cx, void *arg)
{
	struct flood *f = arg;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	while (!atomic_load(&f->stop)) {
		if (cbcmn_actor_send(NULL, cx, f->a, &m))
			return -1;
		atomic_fetch_add(&f->sent, 1);
	}
	atomic_fetch_add(&f->flooders_done, 1);
	return 0;
}

/* A plain task that needs the CPU a few hundred times. */
static int64_t plain_worker(cbcmn_cx *cx, void *arg)
{
	struct flood *f = arg;
	for (int i = 0; i < 300; i++)
		cbcmn_yield(cx);
	atomic_store(&f->plain_done, 1);
	return 0;
}

/* Plain tasks that keep the executor busy until the actor got its share. */
static int64_t busy_until_actor(cbcmn_cx *cx, void *arg)
{
	struct flood *f = arg;
	while (!atomic_load(&f->actor_got_enough))
		cbcmn_yield(cx);
	return 0;
}

static int64_t flood_main(cbcmn_cx *cx, void *arg)
{
	struct flood *f = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 8};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, flood_actor, f, &ao, &f->a) == 0);
	for (int i = 0; i < 2; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, flooder, f, NULL) == 0);
	for (int i = 0; i < 4; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, busy_until_actor, f, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, plain_worker, f, NULL) == 0);
	/* Both must finish while the flood goes on: a starved side hangs
	 * here (the watchdog names the test). */
	while (!atomic_load(&f->plain_done) || !atomic_load(&f->actor_got_enough))
		cbcmn_yield(cx);
	atomic_store(&f->stop, 1);
	while (atomic_load(&f->flooders_done) < 2)
		cbcmn_yield(cx);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, f->a, &q) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_flood_and_plain_tasks_share_the_executor(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct flood f = {0};
	t_run(rt, flood_main, &f, 0);
	/* Everything sent was received (the QUITs aside), nothing lost. */
	assert_int_equal(atomic_load(&f.received), atomic_load(&f.sent));
	assert_true(atomic_load(&f.received) >= 2000);
	t_destroy(rt);
}

/* ---- churn: sends racing halts and slot reuse, received or dropped once each ---- */

#define CHURN_REFS 16

struct churn {
	_Atomic uint64_t refs[CHURN_REFS];
	_Atomic long ok_sends, received, dropped, bad, spawned;
	_Atomic int stop, spawner_done;
	long n;
};

static void churn_drop(void *state, const cbcmn_actor_msg *m)
{
	struct churn *c = state;
	(void)m;
	atomic_fetch_add(&c->dropped, 1);
}

/* Takes up to three messages (or 1 ms of nothing), then halts, maybe with
 * more in its mailbox. */
static int64_t churn_actor(cbcmn_cx *cx, void *arg)
{
	struct churn *c = arg;
	for (int i = 0; i < 3; i++) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, 1000000);
		if (rc == -ETIMEDOUT)
			break;
		if (rc)
			return rc;
		atomic_fetch_add(&c->received, 1);
	}
	return 0;
}

static int64_t churn_spawner(cbcmn_cx *cx, void *arg)
{
	struct churn *c = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 2, .placement = CBCMN_PLACE_STEALABLE,
			       .drop = churn_drop};
	for (long i = 0; i < c->n; i++) {
		cbcmn_actor_ref a;
		if (cbcmn_actor_spawn(cx, n, churn_actor, c, &ao, &a) != 0) {
			atomic_fetch_add(&c->bad, 1);
			break;
		}
		atomic_store(&c->refs[i % CHURN_REFS], a);
		atomic_fetch_add(&c->spawned, 1);
		if (i % 4 == 3)
			cbcmn_sleep(cx, 200000);
	}
	atomic_store(&c->spawner_done, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t churn_sender(cbcmn_cx *cx, void *arg)
{
	struct churn *c = arg;
	uint64_t x = cbcmn_cx_task_id(cx) * 0x9e3779b97f4a7c15ull;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	while (!atomic_load(&c->stop)) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		cbcmn_actor_ref a = atomic_load(&c->refs[x % CHURN_REFS]);
		int rc = a ? cbcmn_actor_try_send(NULL, cx, a, &m) : -ESRCH;
		if (rc == 0)
			atomic_fetch_add(&c->ok_sends, 1);
		else if (rc != -ESRCH && rc != -EAGAIN)
			atomic_fetch_add(&c->bad, 1);
		if ((x & 7) == 0)
			cbcmn_yield(cx);
	}
	return 0;
}

static int64_t churn_main(cbcmn_cx *cx, void *arg)
{
	struct churn *c = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, churn_spawner, c, NULL) == 0);
	for (int i = 0; i < 2; i++)
		TASK_CHECK(cbcmn_nursery_spawn_stealable(cx, n, churn_sender, c, NULL) == 0);
	while (!atomic_load(&c->spawner_done))
		cbcmn_sleep(cx, 1000000);
	atomic_store(&c->stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_sends_racing_halts_are_received_or_dropped_once(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct churn c = {.n = STRESS(400)};
	t_run(rt, churn_main, &c, 0);
	assert_int_equal(atomic_load(&c.bad), 0);
	assert_int_equal(atomic_load(&c.spawned), c.n);
	assert_true(atomic_load(&c.ok_sends) > 0);
	assert_int_equal(atomic_load(&c.received) + atomic_load(&c.dropped),
			 atomic_load(&c.ok_sends));
	t_destroy(rt);
}

/* ---- a reference of another runtime is refused, never delivered ---- */

/* Counts what it receives until it is stopped. */
static int64_t counts_until_stopped(cbcmn_cx *cx, void *arg)
{
	_Atomic int *got = arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0)
		atomic_fetch_add(got, 1);
	return rc == -ESHUTDOWN ? 0 : rc;
}

static void test_ref_of_another_runtime_is_refused(void **state)
{
	(void)state;
	cbcmn_runtime *rt[2] = {t_runtime(1), t_runtime(1)};
	cbcmn_nursery *n[2];
	cbcmn_actor_ref a[2];
	_Atomic int got[2] = {0, 0};
	/* The first actor of each runtime: the same slot, the same
	 * generation; only the runtime tells them apart. */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(cbcmn_nursery_open(rt[i], NULL, &n[i]), 0);
		assert_int_equal(cbcmn_actor_spawn(NULL, n[i], counts_until_stopped, &got[i], NULL,
						   &a[i]),
				 0);
	}
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	assert_int_equal(cbcmn_actor_try_send(rt[1], NULL, a[0], &m), -ESRCH);
	assert_int_equal(cbcmn_actor_send(rt[1], NULL, a[0], &m), -ESRCH);
	assert_int_equal(cbcmn_actor_stop(rt[1], NULL, a[0], -1), -ESRCH);
	assert_int_equal(cbcmn_actor_try_send(rt[0], NULL, a[0], &m), 0);
	/* Received before the stop (which would close the mailbox on it). */
	uint64_t t0 = t_now_ns();
	while (atomic_load(&got[0]) == 0 && t_now_ns() - t0 < T_STALL_NS)
		usleep(1000);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(cbcmn_actor_stop(rt[i], NULL, a[i], 0), 0);
		assert_int_equal(cbcmn_nursery_await_all(NULL, n[i]), 0);
	}
	assert_int_equal(atomic_load(&got[0]), 1);
	assert_int_equal(atomic_load(&got[1]), 0);
	t_destroy(rt[0]);
	t_destroy(rt[1]);
}

/* ---- demonitor names its target: another monitor's DOWN stays ---- */

struct demon2 {
	cbcmn_actor_ref x, y;
	uint64_t mx;
	_Atomic int x_gone;
	int rc_wrong, rc_recv;
	cbcmn_actor_msg down;
};

static int64_t demon2_watcher(cbcmn_cx *cx, void *arg)
{
	struct demon2 *d = arg;
	TASK_CHECK(cbcmn_actor_monitor(cx, d->x, &d->mx) == 0);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, d->x, &q) == 0);
	while (!atomic_load(&d->x_gone)) /* x's DOWN is queued by now */
		cbcmn_yield(cx);
	/* mx is a monitor on x, not on y: nothing to undo there. */
	d->rc_wrong = cbcmn_actor_demonitor(cx, d->y, d->mx);
	d->rc_recv = cbcmn_actor_receive(cx, &d->down, 0);
	return 0;
}

static int64_t demon2_main(cbcmn_cx *cx, void *arg)
{
	struct demon2 *d = arg;
	cbcmn_nursery *nx, *n;
	cbcmn_actor_ref w;
	TASK_CHECK(open_n(cx, &nx) == 0);
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nx, quits_on_message, NULL, NULL, &d->x) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, NULL, &d->y) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, demon2_watcher, d, NULL, &w) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nx) == 0); /* x's DOWN delivered */
	atomic_store(&d->x_gone, 1);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, d->y, &q) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_demonitor_of_another_target_keeps_the_down(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct demon2 d = {0};
	t_run(rt, demon2_main, &d, 0);
	assert_int_equal(d.rc_wrong, -ENOENT);
	assert_int_equal(d.rc_recv, 0);
	assert_int_equal(d.down.type, CBCMN_ACTOR_DOWN);
	assert_int_equal(d.down.from, d.x);
	assert_int_equal(d.down.body.down.monitor, d.mx);
	t_destroy(rt);
}

/* ---- a watcher that halts takes its monitors off their target ---- */

#define WATCHERS 40

struct watchers {
	cbcmn_actor_ref target;
	_Atomic int watching;
	uint64_t left;
};

/* Monitors the target (twice: a demonitored one must not linger
 * either), then halts. */
static int64_t watches_then_halts(cbcmn_cx *cx, void *arg)
{
	struct watchers *w = arg;
	uint64_t id, id2;
	TASK_CHECK(cbcmn_actor_monitor(cx, w->target, &id) == 0);
	TASK_CHECK(cbcmn_actor_monitor(cx, w->target, &id2) == 0);
	TASK_CHECK(cbcmn_actor_demonitor(cx, w->target, id2) == 0);
	atomic_fetch_add(&w->watching, 1);
	return 0;
}

/* Monitors on the live actor ref (internals: the slot's list). */
static uint64_t monitors_on(cbcmn_runtime *rt, cbcmn_actor_ref ref)
{
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(rt, ref);
	uint64_t n = 0;
	if (!a)
		return UINT64_MAX;
	for (struct cbcmn__monitor *m = a->watched_by; m; m = m->next)
		n++;
	cbcmn__flock_unlock(&a->lock);
	return n;
}

static int64_t watchers_main(cbcmn_cx *cx, void *arg)
{
	struct watchers *w = arg;
	cbcmn_nursery *nt, *n;
	TASK_CHECK(open_n(cx, &nt) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nt, quits_on_message, NULL, NULL, &w->target) == 0);
	TASK_CHECK(open_n(cx, &n) == 0);
	for (int i = 0; i < WATCHERS; i++) {
		cbcmn_actor_ref r;
		TASK_CHECK(cbcmn_actor_spawn(cx, n, watches_then_halts, w, NULL, &r) == 0);
	}
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(atomic_load(&w->watching) == WATCHERS);
	w->left = monitors_on(cbcmn_cx_runtime(cx), w->target);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, w->target, &q) == 0);
	return cbcmn_nursery_await_all(cx, nt);
}

static void test_halted_watchers_leave_no_monitor_on_the_target(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct watchers w = {0};
	t_run(rt, watchers_main, &w, 0);
	assert_int_equal(w.left, 0);
	t_destroy(rt);
}

/* ---- a generation that wraps retires its slot ---- */

static int64_t wrap_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_actor_ref *refs = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, returns_at_once, NULL, NULL, &refs[0]) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	/* Its slot is free: age it to the last generation (internals). */
	struct cbcmn__actors *t = atomic_load(&rt->actors);
	struct cbcmn__actor *slot = &atomic_load(&t->chunk[0])[0];
	cbcmn__flock_lock(&slot->lock);
	slot->gen = UINT32_MAX;
	cbcmn__flock_unlock(&slot->lock);
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, returns_at_once, NULL, NULL, &refs[1]) == 0);
	TASK_CHECK(refs[1] >> 32 == UINT32_MAX);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(slot->gen == 0);
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, NULL, &refs[2]) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	/* The wrapped slot's references, old and "new" (generation 0). */
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, refs[0], &m) == -ESRCH);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, refs[1], &m) == -ESRCH);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, refs[1] & 0xffffffffull, &m) == -ESRCH);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, refs[2], &m) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_wrapped_generation_retires_the_slot(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_actor_ref refs[3] = {0};
	t_run(rt, wrap_main, refs, 0);
	/* The third actor got another slot: the wrapped one is never reused. */
	assert_true((uint32_t)refs[2] != (uint32_t)refs[1]);
	assert_int_equal((uint32_t)refs[0], (uint32_t)refs[1]);
	t_destroy(rt);
}

/* ---- the stats count actors by state, and mailbox depth, per executor ---- */

struct stats {
	cbcmn_actor_ref recv[3], yielder, sleeper;
	_Atomic int stop_yielding;
	cbcmn_executor_stats at[2], after[2];
	int matched;
};

static int64_t yields_until_told(cbcmn_cx *cx, void *arg)
{
	struct stats *s = arg;
	while (!atomic_load(&s->stop_yielding))
		cbcmn_yield(cx);
	return 0;
}

static int64_t sleeps_long(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	int rc = cbcmn_sleep(cx, 3600ull * 1000000000ull);
	return rc == CBCMN_ECANCELED ? 0 : -1;
}

/* The workload's figures: executor 1 homes three receivers and a
 * yielder, executor 0 a sleeper with 5 messages it never takes. */
static bool stats_match(const cbcmn_executor_stats *e)
{
	return e[1].actors == 4 && e[1].actors_receiving == 3 && e[1].actors_waiting == 3 &&
	       e[1].actors_runnable + e[1].actors_running == 1 && e[1].actors_halting == 0 &&
	       e[1].mailbox_depth == 0 && e[0].actors == 1 && e[0].actors_waiting == 1 &&
	       e[0].actors_receiving == 0 && e[0].actors_runnable == 0 &&
	       e[0].actors_running == 0 && e[0].mailbox_depth == 5;
}

static void stats_read(cbcmn_runtime *rt, cbcmn_executor_stats *e)
{
	cbcmn_stats st;
	TASK_CHECK(cbcmn_stats_snapshot(rt, &st, e, 2) == 0);
}

static int64_t stats_main(cbcmn_cx *cx, void *arg)
{
	struct stats *s = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n, *ns;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(open_n(cx, &ns) == 0);
	cbcmn_actor_opts on1 = {.placement = CBCMN_PLACE_PINNED, .shard = 1};
	cbcmn_actor_opts on0 = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	for (int i = 0; i < 3; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, &on1, &s->recv[i]) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, yields_until_told, s, &on1, &s->yielder) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, ns, sleeps_long, NULL, &on0, &s->sleeper) == 0);
	for (uint64_t i = 0; i < 5; i++) {
		cbcmn_actor_msg m = msg(M_DATA, i, 0);
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, s->sleeper, &m) == 0);
	}
	/* Until every actor has reached its state (no deadline on speed:
	 * the watchdog ends a hang). */
	uint64_t t0 = t_now_ns();
	do {
		cbcmn_sleep(cx, 1000000);
		stats_read(rt, s->at);
	} while (!(s->matched = stats_match(s->at)) && t_now_ns() - t0 < T_STALL_NS);
	atomic_store(&s->stop_yielding, 1);
	for (int i = 0; i < 3; i++) {
		cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, s->recv[i], &q) == 0);
	}
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(cbcmn_nursery_cancel(ns) == 0);
	cbcmn_nursery_await_all(cx, ns);
	/* Every actor halted: nothing left anywhere, once the last one's
	 * executor is back from its fiber (running drops after the exit,
	 * which woke us). */
	t0 = t_now_ns();
	do {
		cbcmn_sleep(cx, 1000000);
		stats_read(rt, s->after);
	} while ((s->after[0].actors_running || s->after[1].actors_running) &&
		 t_now_ns() - t0 < T_STALL_NS);
	return 0;
}

static void test_stats_count_actors_by_state_per_executor(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct stats s = {0};
	t_run(rt, stats_main, &s, 0);
	for (int i = 0; i < 2; i++)
		print_message("executor %d: actors %llu runnable %llu running %llu waiting %llu "
			      "receiving %llu halting %llu mailbox %llu\n",
			      i, (unsigned long long)s.at[i].actors,
			      (unsigned long long)s.at[i].actors_runnable,
			      (unsigned long long)s.at[i].actors_running,
			      (unsigned long long)s.at[i].actors_waiting,
			      (unsigned long long)s.at[i].actors_receiving,
			      (unsigned long long)s.at[i].actors_halting,
			      (unsigned long long)s.at[i].mailbox_depth);
	assert_true(s.matched);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(s.after[i].actors, 0);
		assert_int_equal(s.after[i].actors_waiting, 0);
		assert_int_equal(s.after[i].actors_receiving, 0);
		assert_int_equal(s.after[i].actors_halting, 0);
		assert_int_equal(s.after[i].actors_running, 0);
		assert_int_equal(s.after[i].mailbox_depth, 0);
	}
	t_destroy(rt);
}

/* ---- a send that times out is not counted as a receive ---- */

struct sendto {
	cbcmn_actor_ref full, recv;
	_Atomic int stop;
	int rc[3];
	cbcmn_executor_stats at[2];
	bool matched;
};

static int64_t naps_until_told(cbcmn_cx *cx, void *arg)
{
	struct sendto *s = arg;
	while (!atomic_load(&s->stop))
		cbcmn_sleep(cx, 1000000);
	return 0;
}

static int64_t sendto_main(cbcmn_cx *cx, void *arg)
{
	struct sendto *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts full = {.mailbox_cap = 1, .placement = CBCMN_PLACE_PINNED, .shard = 0};
	cbcmn_actor_opts on0 = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, naps_until_told, s, &full, &s->full) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, s->full, &m) == 0);
	/* Each waits for room on the full mailbox, then gives up. */
	for (int i = 0; i < 3; i++)
		s->rc[i] = cbcmn_actor_send_timeout(NULL, cx, s->full, &m, 1000000);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, &on0, &s->recv) == 0);
	uint64_t t0 = t_now_ns();
	do {
		cbcmn_sleep(cx, 1000000);
		cbcmn_stats st;
		TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &st, s->at, 2) == 0);
		s->matched = s->at[0].actors_receiving == 1;
	} while (!s->matched && t_now_ns() - t0 < T_STALL_NS / 4);
	atomic_store(&s->stop, 1);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, s->recv, &q) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_timed_out_sends_leave_the_receiving_count_alone(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct sendto s = {0};
	t_run(rt, sendto_main, &s, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(s.rc[i], -ETIMEDOUT);
	print_message("executor 0: receiving %llu\n",
		      (unsigned long long)s.at[0].actors_receiving);
	assert_true(s.matched); /* the one receiver, once */
	t_destroy(rt);
}

/* ---- a drop callback cannot tie a halting actor's slot to anyone ---- */

struct dropcb {
	cbcmn_cx *cx; /* the halting actor's, kept for its drop callback */
	cbcmn_actor_ref peer, victim, heir;
	int rc_link, rc_monitor;
	uint64_t heir_links, heir_notes;
};

/* Links and monitors from the halting actor: the records would go on a
 * slot whose lists the halt has already taken. */
static void drop_links(void *state, const cbcmn_actor_msg *m)
{
	struct dropcb *d = state;
	uint64_t id;
	(void)m;
	d->rc_link = cbcmn_actor_link(d->cx, d->peer);
	d->rc_monitor = cbcmn_actor_monitor(d->cx, d->peer, &id);
}

static int64_t keeps_cx_and_returns(cbcmn_cx *cx, void *arg)
{
	struct dropcb *d = arg;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	d->cx = cx;
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, cbcmn_actor_self(cx), &m) == 0);
	return 0; /* the message is dropped: drop_links runs */
}

static int64_t dropcb_main(cbcmn_cx *cx, void *arg)
{
	struct dropcb *d = arg;
	cbcmn_nursery *np, *n;
	TASK_CHECK(open_n(cx, &np) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, np, quits_on_message, NULL, NULL, &d->peer) == 0);
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.drop = drop_links};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, keeps_cx_and_returns, d, &ao, &d->victim) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	/* The next actor gets the victim's slot (the free list's head). */
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, NULL, &d->heir) == 0);
	struct cbcmn__actor *h = cbcmn__actor_lock_ref(cbcmn_cx_runtime(cx), d->heir);
	TASK_CHECK(h != NULL);
	if (h) {
		for (struct cbcmn__link *l = h->links; l; l = l->next)
			d->heir_links++;
		for (struct cbcmn__link *l = h->watching; l; l = l->next)
			d->heir_notes++;
		cbcmn__flock_unlock(&h->lock);
	}
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, d->heir, &q) == 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, d->peer, &q) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return cbcmn_nursery_await_all(cx, np);
}

static void test_link_from_a_drop_callback_is_refused_not_inherited(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct dropcb d = {0};
	t_run(rt, dropcb_main, &d, 0);
	assert_int_equal(cbcmn__ref_index(d.heir), cbcmn__ref_index(d.victim));
	assert_int_equal(d.heir_links, 0);
	assert_int_equal(d.heir_notes, 0);
	assert_int_equal(d.rc_link, -ESHUTDOWN);
	assert_int_equal(d.rc_monitor, -ESHUTDOWN);
	t_destroy(rt);
}

/* ---- a task ended inside its halt's drop callback ---- */

#define DE_MSGS 3

struct dend {
	bool die;                 /* the thread exits in drop; else a stack overflow */
	bool loop;                /* cancelled before it started: not awaited at once */
	int64_t stop;             /* that cancellation is a stop with this reason */
	_Atomic int go;
	_Atomic long drops;
	struct downs got;
	int64_t awaited;          /* the awaiting task's await_all, once it went on */
	long went_on;
};

/* The first drop ends the task: a stack overflow, or its thread's end. */
static void dend_drop(void *state, const cbcmn_actor_msg *m)
{
	struct dend *d = state;
	(void)m;
	if (atomic_fetch_add(&d->drops, 1) != 0)
		return;
	if (d->die)
		pthread_exit(NULL);
	(void)t_recurse(NULL, 0);
}

static int64_t dend_victim(cbcmn_cx *cx, void *arg)
{
	struct dend *d = arg;
	wait_for_go(cx, &d->go);
	return 7; /* its messages left: to drop */
}

/* Spawns the victim (with opts o) into n and fills its mailbox. */
static cbcmn_actor_ref dend_spawn(cbcmn_cx *cx, cbcmn_nursery *n, struct dend *d,
				  const cbcmn_actor_opts *o)
{
	cbcmn_actor_ref v = CBCMN_ACTOR_NONE;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, dend_victim, d, o, &v) == 0);
	send_n(cx, v, 0, DE_MSGS);
	return v;
}

/* Monitors the victim, fills its mailbox, lets it end; counts the DOWNs
 * until none came for a while. */
static int64_t dend_watcher(cbcmn_cx *cx, void *arg)
{
	struct dend *d = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.drop = dend_drop, .placement = CBCMN_PLACE_PINNED, .shard = 1};
	cbcmn_actor_ref v = dend_spawn(cx, n, d, &o);
	uint64_t id;
	TASK_CHECK(cbcmn_actor_monitor(cx, v, &id) == 0);
	atomic_store(&d->go, 1);
	return downs_only(cx, id, &d->got, n);
}

static int64_t dend_main(cbcmn_cx *cx, void *arg)
{
	return watcher_on_0(cx, dend_watcher, arg);
}

/* Issue 16: the halt runs drop after the task's function returned, below
 * no landing pad, and a task ended there (a stack overflow landed in a
 * frame that was gone; its thread's end had the reaper halt the slot a
 * second time, the first halt's DOWN and drops lost).  The halt goes on:
 * one DOWN, its reason the first, every message given to drop once. */
static void dend_case(bool die)
{
	cbcmn_runtime *rt = t_runtime(2);
	struct dend d = {.die = die};
	t_run(rt, dend_main, &d, 0);
	assert_int_equal(atomic_load(&d.drops), DE_MSGS);
	assert_int_equal(d.got.n, 1);
	assert_int_equal(d.got.reason, 7);
	assert_int_equal(d.got.undelivered, DE_MSGS);
	t_destroy(rt);
}

static void test_stack_overflow_in_drop_finishes_the_halt_once(void **state)
{
	(void)state;
	if (T_TSAN) {
		T_SKIP("TSan cannot follow a jump out of a signal handler");
		return;
	}
	dend_case(false);
}

static void test_thread_exit_in_drop_finishes_the_halt_once(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) {
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
		return;
	}
	dend_case(true);
}

/* An actor cancelled (or stopped) before it started, on one executor:
 * run by its nursery's await on the awaiting task's stack (inline), or,
 * d->loop, by the scheduler loop while the awaiting task sleeps.  Its drop
 * overflows the stack it halts on, or ends the thread. */
static int64_t dunst_main(cbcmn_cx *cx, void *arg)
{
	struct dend *d = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.drop = dend_drop};
	cbcmn_actor_ref v = dend_spawn(cx, n, d, &o);
	if (d->stop)
		TASK_CHECK(cbcmn_actor_stop(NULL, cx, v, d->stop) == 0);
	else
		TASK_CHECK(cbcmn_nursery_cancel(n) == 0);
	if (d->loop)
		sleep_until(cx, &d->drops, DE_MSGS);
	d->awaited = cbcmn_nursery_await_all(cx, n);
	d->went_on++;
	return 0;
}

/* want: the awaiting task's result (it ends too when its frames went
 * with the thread, inline). */
static void dunst_case(struct dend d, int64_t want)
{
	cbcmn_runtime *rt = t_runtime(1);
	t_run(rt, dunst_main, &d, want);
	assert_int_equal(atomic_load(&d.drops), DE_MSGS);
	assert_int_equal(d.went_on, want ? 0 : 1);
	if (!want)
		assert_int_equal(d.awaited, d.stop ? d.stop : CBCMN_ECANCELED);
	t_destroy(rt);
}

/* Review of issue 16's fix: the halt's landing pad was the halting
 * task's only if that task ran; an actor that never started halts on the
 * stack of the task whose await ran it inline, and an overflow in its
 * drop landed on that task's pad: the awaiting task ended instead, and
 * the halt never finished (the nursery waited for the actor for ever).
 * The drop ends, the halt goes on, the awaiting task goes on.  Its
 * thread's end there likewise hung: the reaper ended the awaiting task
 * alone; it ends the actor's halt first, then that task. */
static void test_stack_overflow_in_drop_of_an_actor_halted_inline(void **state)
{
	(void)state;
	if (T_TSAN) {
		T_SKIP("TSan cannot follow a jump out of a signal handler");
		return;
	}
	dunst_case((struct dend){0}, 0);
}

static void test_thread_exit_in_drop_of_an_actor_halted_inline(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) {
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
		return;
	}
	/* The awaiting task's frames went with the thread: it ends too. */
	dunst_case((struct dend){.die = true}, CBCMN_EPANIC);
}

/* Issue 16 (rvarob): an actor cancelled before it started and ended by
 * the scheduler loop ran its drop on the executor thread's stack, below
 * no landing pad: an overflow there was a segfault of the process, a
 * thread's end a hang.  It starts on a stack of its own to end there:
 * the drop ends, the halt goes on, the executor and the awaiting task
 * with it; a stop's reason stays the halt's. */
static void test_stack_overflow_in_drop_of_an_actor_ended_by_the_loop(void **state)
{
	(void)state;
	if (T_TSAN) {
		T_SKIP("TSan cannot follow a jump out of a signal handler");
		return;
	}
	dunst_case((struct dend){.loop = true}, 0);
	dunst_case((struct dend){.loop = true, .stop = -9}, 0);
}

static void test_thread_exit_in_drop_of_an_actor_ended_by_the_loop(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) {
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
		return;
	}
	dunst_case((struct dend){.loop = true, .die = true}, 0);
}

/* ---- no stack left for an unstarted actor's end ---- */

struct nostk {
	_Atomic long held, drops;
	int64_t awaited;
	bool overflow; /* the first drop overflows the stack it runs on */
	bool die;      /* the first drop ends its thread */
};

static int64_t nostk_hold(cbcmn_cx *cx, void *arg)
{
	struct nostk *d = arg;
	atomic_fetch_add(&d->held, 1);
	cbcmn_sleep(cx, 60ull * 1000000000ull); /* till cancelled */
	return 0;
}

static int64_t nostk_victim(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0; /* never runs: cancelled first */
}

static void nostk_drop(void *state, const cbcmn_actor_msg *m)
{
	struct nostk *d = state;
	(void)m;
	if (atomic_fetch_add(&d->drops, 1) == 0 && d->die)
		pthread_exit(NULL);
	if (atomic_load(&d->drops) == 1 && d->overflow)
		(void)t_recurse(NULL, 0);
}

/* Holds every stack there is (one holder a nursery: the one that finds
 * none fails its own only), then has the loop end a cancelled actor. */
static int64_t nostk_main(cbcmn_cx *cx, void *arg)
{
	struct nostk *d = arg;
	cbcmn_nursery *hold[8], *n;
	int k = 0;
	for (; k < 8; k++) {
		TASK_CHECK(open_n(cx, &hold[k]) == 0);
		TASK_CHECK(cbcmn_nursery_spawn(cx, hold[k], nostk_hold, d, NULL) == 0);
		cbcmn_yield(cx);
		cbcmn_yield(cx);
		if (atomic_load(&d->held) <= k)
			break; /* it found no stack */
	}
	TASK_CHECK(k < 8);
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.drop = nostk_drop};
	cbcmn_actor_ref v = CBCMN_ACTOR_NONE;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, nostk_victim, d, &o, &v) == 0);
	d->awaited = cancel_for_the_loop(cx, n, v, DE_MSGS, &d->drops);
	for (int i = 0; i <= k; i++) {
		cbcmn_nursery_cancel(hold[i]);
		cbcmn_nursery_await_all(cx, hold[i]);
	}
	return 0;
}

/* Review of 66bda2f: an actor cancelled before it started, ended by the
 * scheduler loop, now takes a stack to end on; with none left (here 4
 * guarded stacks at most, all held) it ended with -ENOMEM, where it had
 * needed no stack and ended cancelled.  It ends cancelled, on the
 * executor's end stack (session 17), its messages dropped. */
static void nostk_case(bool overflow, bool die)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.flags = CBCMN_CONFIG_NO_INLINE;
	cfg.guard_stacks_max = 4;
	cbcmn__stack_test_no_lightweight_guards = true; /* mprotect guards: counted */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	cbcmn__stack_test_no_lightweight_guards = false;
	struct nostk d = {.overflow = overflow, .die = die};
	t_run(rt, nostk_main, &d, 0);
	assert_int_equal(atomic_load(&d.drops), DE_MSGS);
	assert_int_equal(d.awaited, CBCMN_ECANCELED);
	t_destroy(rt);
}

static void test_cancelled_actor_with_no_stack_left_ends_cancelled(void **state)
{
	(void)state;
	nostk_case(false, false);
}

/* Session 17: with no stack left it ended on the executor thread's own
 * stack, below no landing pad, and an overflow in its drop there killed
 * the process (SIGSEGV).  The executor keeps a stack for such an end
 * (end_stack_take(), sched.c): the drop lands, the halt goes on. */
static void test_stack_overflow_in_drop_of_an_actor_with_no_stack_left(void **state)
{
	(void)state;
	if (T_TSAN) {
		T_SKIP("TSan cannot follow a jump out of a signal handler");
		return;
	}
	nostk_case(true, false);
}

/* Review of session 17: the executor's end stack under a thread's end in
 * the drop: the reaper finishes the halt on it and gives it back (busy
 * for good, or put in the pool while kept, would show on the next end or
 * at destroy), and the executor's next thread keeps it. */
static void test_thread_exit_in_drop_of_an_actor_with_no_stack_left(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) {
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
		return;
	}
	nostk_case(false, true);
	nostk_case(false, true);
}

/* ---- what a halt's drop sends comes before its DOWN ---- */

#define DS_MSGS 8

static int64_t dsend_victim(cbcmn_cx *cx, void *arg)
{
	struct fwd *d = arg;
	d->cx = cx;
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&d->go) && t_now_ns() < end)
		cbcmn_sleep(cx, 100000);
	return 0;
}

static int64_t dsend_watcher(cbcmn_cx *cx, void *arg)
{
	struct fwd *d = arg;
	cbcmn_nursery *n;
	cbcmn_actor_opts o = fwd_begin(cx, d, &n);
	cbcmn_actor_ref v = CBCMN_ACTOR_NONE;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, dsend_victim, d, &o, &v) == 0);
	uint64_t id;
	TASK_CHECK(cbcmn_actor_monitor(cx, v, &id) == 0);
	send_n(cx, v, 0, DS_MSGS);
	atomic_store(&d->go, 1);
	downs_collect(cx, id, &d->got);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t dsend_main(cbcmn_cx *cx, void *arg)
{
	return watcher_on_0(cx, dsend_watcher, arg);
}

/* Issue 16 (rvarob): a halt's drop that sends (with its actor's cx) to
 * an actor on another executor went over the lanes, and the halt's DOWN,
 * put through the lock at once, came first: every message, all 8 runs
 * of 8.  Per sender-receiver order holds through the halt: they all come
 * before the DOWN. */
static void test_drop_s_sends_come_before_the_down(void **state)
{
	(void)state;
	for (int round = 0; round < 3; round++) {
		cbcmn_runtime *rt = t_runtime(2);
		struct fwd d = {0};
		t_run(rt, dsend_main, &d, 0);
		assert_int_equal(d.sent, DS_MSGS);
		assert_int_equal(d.got.n, 1);
		assert_int_equal(d.got.undelivered, DS_MSGS);
		assert_int_equal(d.got.before, DS_MSGS);
		assert_int_equal(d.got.after, 0);
		t_destroy(rt);
	}
}

/* ---- a halt's drop never waits for room ---- */

#define BK_ACTORS 4

struct bk;
struct bkv { /* one victim's: its state, and its drop's */
	struct bk *d;
	cbcmn_cx *cx;
};

struct bk {
	struct bkv v[BK_ACTORS];
	_Atomic int started, go;
	cbcmn_actor_ref to;
	_Atomic long sent, full, bad;
	long got;
};

/* Forwards each message left to the watcher, whose one-slot mailbox is
 * full most of the time, with a blocking send (the halting actor's cx). */
static void bk_drop(void *state, const cbcmn_actor_msg *m)
{
	struct bkv *v = state;
	int rc = cbcmn_actor_send(NULL, v->cx, v->d->to, m);
	atomic_fetch_add(rc == 0 ? &v->d->sent : rc == -EAGAIN ? &v->d->full : &v->d->bad, 1);
}

static int64_t bk_victim(cbcmn_cx *cx, void *arg)
{
	struct bkv *v = arg;
	v->cx = cx;
	atomic_fetch_add(&v->d->started, 1);
	wait_for_go(cx, &v->d->go);
	return 0;
}

static int64_t bk_watcher(cbcmn_cx *cx, void *arg)
{
	struct bk *d = arg;
	d->to = cbcmn_actor_self(cx);
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.drop = bk_drop, .placement = CBCMN_PLACE_STEALABLE};
	for (int k = 0; k < BK_ACTORS; k++) {
		d->v[k].d = d;
		cbcmn_actor_ref v = CBCMN_ACTOR_NONE;
		TASK_CHECK(cbcmn_actor_spawn(cx, n, bk_victim, &d->v[k], &o, &v) == 0);
		send_n(cx, v, 0, DS_MSGS);
	}
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(&d->started) < BK_ACTORS && t_now_ns() < end)
		cbcmn_sleep(cx, 100000);
	atomic_store(&d->go, 1);
	cbcmn_actor_msg m;
	while (cbcmn_actor_receive(cx, &m, 300000000ull) == 0) {
		d->got++;
		cbcmn_sleep(cx, 1000000); /* slow: the senders find it full */
	}
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t bk_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = 0, .mailbox_cap = 1};
	cbcmn_actor_ref w;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, bk_watcher, arg, &o, &w) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* Review of 47e903f (the halt's sends through the lock): a drop's
 * blocking send to a full mailbox parked the halting task inside its end;
 * the receiver's wake resumed it on another executor, whose thread then
 * went on with the first executor's end of the task: a segfault or a
 * hang, most runs (the lanes' wait for room did the same before).  A
 * drop must not block (cbcmn_actor_opts.drop): its waiting sends are
 * tries, as a handler's are: sent, or -EAGAIN. */
static void test_blocking_send_in_a_drop_does_not_wait(void **state)
{
	(void)state;
	for (int round = 0; round < 3; round++) {
		cbcmn_runtime *rt = t_runtime(2);
		struct bk d = {0};
		t_run(rt, bk_main, &d, 0);
		assert_int_equal(atomic_load(&d.bad), 0);
		assert_int_equal(atomic_load(&d.sent) + atomic_load(&d.full), BK_ACTORS * DS_MSGS);
		assert_int_equal(d.got, atomic_load(&d.sent));
		t_destroy(rt);
	}
}

/* ---- unlink: the peer's abnormal halt stops nobody any more ---- */

struct unl {
	cbcmn_actor_ref a, b;
	_Atomic int unlinked;
	int rc_unlink, rc_again, rc_never, rc_after;
	uint64_t a_links;
};

static int64_t unl_a(cbcmn_cx *cx, void *arg)
{
	struct unl *u = arg;
	TASK_CHECK(cbcmn_actor_link(cx, u->b) == 0);
	u->rc_unlink = cbcmn_actor_unlink(cx, u->b);
	u->rc_again = cbcmn_actor_unlink(cx, u->b);
	atomic_store(&u->unlinked, 1);
	cbcmn_actor_msg m;
	/* B halts with -9 meanwhile; we are not stopped: this times out. */
	u->rc_after = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	struct cbcmn__actor *me = cbcmn__actor_lock_ref(cbcmn_cx_runtime(cx), cbcmn_actor_self(cx));
	for (struct cbcmn__link *l = me ? me->links : NULL; l; l = l->next)
		u->a_links++;
	if (me)
		cbcmn__flock_unlock(&me->lock);
	return 0;
}

static int64_t unl_b(cbcmn_cx *cx, void *arg)
{
	struct unl *u = arg;
	while (!atomic_load(&u->unlinked))
		cbcmn_yield(cx);
	return -9;
}

static int64_t unl_main(cbcmn_cx *cx, void *arg)
{
	struct unl *u = arg;
	cbcmn_nursery *na, *nb;
	TASK_CHECK(open_n(cx, &na) == 0);
	TASK_CHECK(open_n(cx, &nb) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nb, unl_b, u, NULL, &u->b) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, na, unl_a, u, NULL, &u->a) == 0);
	u->rc_never = cbcmn_actor_unlink(cx, u->a); /* not an actor */
	TASK_CHECK(cbcmn_nursery_await_all(cx, nb) == -9);
	/* B is gone and A still receives: it was not stopped. */
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, u->a, &q) == 0);
	return cbcmn_nursery_await_all(cx, na);
}

static void test_unlinked_peer_halting_stops_nobody(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct unl u = {0};
	t_run(rt, unl_main, &u, 0);
	assert_int_equal(u.rc_unlink, 0);
	assert_int_equal(u.rc_again, 0);
	assert_int_equal(u.rc_never, -EPERM);
	assert_int_equal(u.rc_after, 0); /* the quit message, not -ESHUTDOWN */
	assert_int_equal(u.a_links, 0);
	t_destroy(rt);
}

/* ---- a thread's timed send: gives up in time, or gets the room ---- */

struct thrto {
	_Atomic int take;
	uint64_t got[2];
	int ngot;
};

/* Takes two messages once told to, none before. */
static int64_t takes_two_when_told(cbcmn_cx *cx, void *arg)
{
	struct thrto *t = arg;
	while (!atomic_load(&t->take))
		cbcmn_sleep(cx, 1000000);
	cbcmn_actor_msg m;
	while (t->ngot < 2 && cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0)
		t->got[t->ngot++] = m.body.u64[0];
	return 0;
}

static void test_thread_timed_send_gives_up_or_gets_room(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct thrto t = {0};
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	cbcmn_actor_opts ao = {.mailbox_cap = 1};
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_actor_spawn(NULL, n, takes_two_when_told, &t, &ao, &a), 0);
	cbcmn_actor_msg m0 = msg(M_DATA, 0, 0), m1 = msg(M_DATA, 1, 0), m2 = msg(M_DATA, 2, 0);
	assert_int_equal(cbcmn_actor_try_send(rt, NULL, a, &m0), 0); /* full now */
	uint64_t t0 = t_now_ns();
	assert_int_equal(cbcmn_actor_send_timeout(rt, NULL, a, &m1, 20 * 1000000ull), -ETIMEDOUT);
	assert_true(t_now_ns() - t0 >= 20 * 1000000ull); /* not early */
	atomic_store(&t.take, 1);
	/* Room comes once the actor takes m0: well within this timeout. */
	assert_int_equal(cbcmn_actor_send_timeout(rt, NULL, a, &m2, T_STALL_NS), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	assert_int_equal(t.ngot, 2);
	assert_int_equal(t.got[0], 0);
	assert_int_equal(t.got[1], 2); /* m1 was not taken */
	t_destroy(rt);
}

/* ---- trap_exit: a linked actor's halt as an EXIT message ---- */

struct trap {
	cbcmn_actor_ref t, a, b, y;
	cbcmn_actor_msg got[4];
	int ngot, rc_prev, rc_prev2, rc_y;
};

enum { M_GO = 3 };

/* Waits for GO, sends one message to GO's sender, halts with reason arg. */
static int64_t trap_peer(cbcmn_cx *cx, void *arg)
{
	cbcmn_actor_msg m;
	if (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER))
		return -1;
	cbcmn_actor_msg d = msg(M_DATA, 1, 0);
	if (cbcmn_actor_send(NULL, cx, m.from, &d))
		return -1;
	return (int64_t)(intptr_t)arg;
}

static int64_t trap_y(cbcmn_cx *cx, void *arg)
{
	struct trap *s = arg;
	cbcmn_actor_msg m;
	s->rc_y = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	return 0;
}

static int64_t trap_t(cbcmn_cx *cx, void *arg)
{
	struct trap *s = arg;
	TASK_CHECK(cbcmn_actor_link(cx, s->a) == 0);
	TASK_CHECK(cbcmn_actor_link(cx, s->b) == 0);
	TASK_CHECK(cbcmn_actor_link(cx, s->y) == 0);
	cbcmn_actor_msg go = msg(M_GO, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, s->a, &go) == 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, s->b, &go) == 0);
	int exits = 0;
	while (exits < 2 && s->ngot < 4) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc; /* stopped: the bug */
		s->got[s->ngot++] = m;
		exits += m.type == CBCMN_ACTOR_EXIT;
	}
	s->rc_prev = cbcmn_actor_trap_exit(cx, false);
	s->rc_prev2 = cbcmn_actor_trap_exit(cx, false);
	return -4; /* y is linked and does not trap: stopped with -4 */
}

static int64_t trap_main(cbcmn_cx *cx, void *arg)
{
	struct trap *s = arg;
	cbcmn_nursery *na, *nb, *ny, *nt;
	TASK_CHECK(open_n(cx, &na) == 0);
	TASK_CHECK(open_n(cx, &nb) == 0);
	TASK_CHECK(open_n(cx, &ny) == 0);
	TASK_CHECK(open_n(cx, &nt) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, na, trap_peer, (void *)(intptr_t)-5, NULL, &s->a) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nb, trap_peer, (void *)(intptr_t)0, NULL, &s->b) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, ny, trap_y, s, NULL, &s->y) == 0);
	cbcmn_actor_opts ao = {.trap_exit = true};
	TASK_CHECK(cbcmn_actor_spawn(cx, nt, trap_t, s, &ao, &s->t) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, na) == -5);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nb) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nt) == -4);
	TASK_CHECK(cbcmn_nursery_await_all(cx, ny) == -4); /* its stop's reason */
	TASK_CHECK(cbcmn_actor_trap_exit(cx, true) == -EPERM); /* not an actor */
	return 0;
}

static void test_trap_exit_turns_linked_halts_into_exit_messages(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct trap s = {0};
	t_run(rt, trap_main, &s, 0);
	/* Two data messages and two EXITs, each peer's data before its EXIT. */
	assert_int_equal(s.ngot, 4);
	int data_a = -1, exit_a = -1, data_b = -1, exit_b = -1;
	for (int i = 0; i < 4; i++) {
		cbcmn_actor_msg *m = &s.got[i];
		int *slot = m->from == s.a ? (m->type == M_DATA ? &data_a : &exit_a)
			    : m->from == s.b ? (m->type == M_DATA ? &data_b : &exit_b)
					     : NULL;
		assert_non_null(slot);
		*slot = i;
		if (m->type == CBCMN_ACTOR_EXIT)
			assert_int_equal(m->body.exit.reason, m->from == s.a ? -5 : 0);
		else
			assert_int_equal(m->type, M_DATA);
	}
	assert_true(data_a >= 0 && exit_a > data_a);
	assert_true(data_b >= 0 && exit_b > data_b);
	assert_int_equal(s.rc_prev, 1);
	assert_int_equal(s.rc_prev2, 0);
	assert_int_equal(s.rc_y, -ESHUTDOWN);
	t_destroy(rt);
}

/* A cycle of links, one member trapping: an abnormal halt goes round
 * once, the trapper gets one EXIT per linked peer, nobody hangs, and no
 * record is left (ASan). */

struct cyc {
	cbcmn_actor_ref a, b, c;
	_Atomic int go, linked;
	cbcmn_actor_msg exits[2];
	int nexits, rc_b;
};

/* The references are all written (spawn returned three times). */
static void cyc_wait_go(cbcmn_cx *cx, struct cyc *s)
{
	while (!atomic_load(&s->go))
		cbcmn_sleep(cx, 1000000);
}

static int64_t cyc_a(cbcmn_cx *cx, void *arg)
{
	struct cyc *s = arg;
	cyc_wait_go(cx, s);
	TASK_CHECK(cbcmn_actor_link(cx, s->b) == 0);
	atomic_fetch_add(&s->linked, 1);
	while (atomic_load(&s->linked) < 3)
		cbcmn_sleep(cx, 1000000);
	return -1;
}

static int64_t cyc_b(cbcmn_cx *cx, void *arg)
{
	struct cyc *s = arg;
	cyc_wait_go(cx, s);
	TASK_CHECK(cbcmn_actor_link(cx, s->c) == 0);
	atomic_fetch_add(&s->linked, 1);
	cbcmn_actor_msg m;
	s->rc_b = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	return 0;
}

static int64_t cyc_c(cbcmn_cx *cx, void *arg)
{
	struct cyc *s = arg;
	cyc_wait_go(cx, s);
	TASK_CHECK(cbcmn_actor_link(cx, s->a) == 0);
	atomic_fetch_add(&s->linked, 1);
	while (s->nexits < 2) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		TASK_CHECK(m.type == CBCMN_ACTOR_EXIT);
		s->exits[s->nexits++] = m;
	}
	return 0;
}

static int64_t cyc_main(cbcmn_cx *cx, void *arg)
{
	struct cyc *s = arg;
	cbcmn_nursery *na, *nb, *nc; /* one each: -1 would fail a shared one fast */
	TASK_CHECK(open_n(cx, &na) == 0);
	TASK_CHECK(open_n(cx, &nb) == 0);
	TASK_CHECK(open_n(cx, &nc) == 0);
	cbcmn_actor_opts trap = {.trap_exit = true};
	TASK_CHECK(cbcmn_actor_spawn(cx, nc, cyc_c, s, &trap, &s->c) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nb, cyc_b, s, NULL, &s->b) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, na, cyc_a, s, NULL, &s->a) == 0);
	atomic_store(&s->go, 1); /* the actors read the references from now on */
	TASK_CHECK(cbcmn_nursery_await_all(cx, nc) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nb) == -1);
	return cbcmn_nursery_await_all(cx, na);
}

static void test_link_cycle_with_a_trapper_ends_once(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct cyc s = {0};
	t_run(rt, cyc_main, &s, -1);
	assert_int_equal(s.rc_b, -ESHUTDOWN);
	assert_int_equal(s.nexits, 2);
	bool from_a = false, from_b = false;
	for (int i = 0; i < 2; i++) {
		assert_int_equal(s.exits[i].body.exit.reason, -1);
		from_a |= s.exits[i].from == s.a;
		from_b |= s.exits[i].from == s.b;
	}
	assert_true(from_a && from_b);
	t_destroy(rt);
}

/* ---- a stop ends any wait of the actor, not only a receive ---- */

enum { W_SLEEP, W_CHAN, W_READ, W_JOIN, W_SEND, W_NKIND };

struct stopw {
	int kind;
	_Atomic int blocking;
	int64_t rc, rc_next, rc_recv;
	cbcmn_chan *ch;
	int fd;             /* W_READ: a pipe's read end nobody writes to */
	cbcmn_actor_ref full; /* W_SEND: an actor whose mailbox is full */
};

#define STOPW_NS (3 * 1000000000ull) /* a wait the stop must cut short */

static int64_t sleeps_stopw(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	return cbcmn_sleep(cx, STOPW_NS);
}

static int64_t stopw_actor(cbcmn_cx *cx, void *arg)
{
	struct stopw *s = arg;
	int v;
	char c;
	cbcmn_nursery *n;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	atomic_store(&s->blocking, 1);
	switch (s->kind) {
	case W_SLEEP:
		s->rc = cbcmn_sleep(cx, STOPW_NS);
		break;
	case W_CHAN:
		s->rc = cbcmn_chan_recv_timeout(cx, s->ch, &v, STOPW_NS);
		break;
	case W_READ:
		cbcmn_io_set_timeout(cx, STOPW_NS);
		s->rc = cbcmn_read(cx, s->fd, &c, 1);
		break;
	case W_JOIN:
		TASK_CHECK(open_n(cx, &n) == 0);
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, sleeps_stopw, NULL, NULL) == 0);
		s->rc = cbcmn_nursery_await_all(cx, n);
		break;
	case W_SEND:
		s->rc = cbcmn_actor_send_timeout(NULL, cx, s->full, &m, STOPW_NS);
		break;
	}
	/* Stopped: every later blocking call is cancelled at once, a receive
	 * says it was stopped. */
	s->rc_next = cbcmn_sleep(cx, STOPW_NS);
	s->rc_recv = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	return 0;
}

/* Never receives: its one-slot mailbox stays full until told to go. */
static int64_t holds_full(cbcmn_cx *cx, void *arg)
{
	_Atomic int *go = arg;
	while (!atomic_load(go))
		cbcmn_sleep(cx, 1000000);
	return 0;
}

struct stopw_all {
	struct stopw w[W_NKIND];
	_Atomic int release;
};

static int64_t stopw_main(cbcmn_cx *cx, void *arg)
{
	struct stopw_all *all = arg;
	cbcmn_nursery *nf;
	TASK_CHECK(open_n(cx, &nf) == 0);
	cbcmn_actor_opts one = {.mailbox_cap = 1};
	cbcmn_actor_ref full;
	TASK_CHECK(cbcmn_actor_spawn(cx, nf, holds_full, &all->release, &one, &full) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, full, &m) == 0);
	for (int k = 0; k < W_NKIND; k++) {
		struct stopw *s = &all->w[k];
		s->kind = k;
		s->full = full;
		cbcmn_nursery *n;
		cbcmn_actor_ref a;
		TASK_CHECK(open_n(cx, &n) == 0);
		TASK_CHECK(cbcmn_actor_spawn(cx, n, stopw_actor, s, NULL, &a) == 0);
		while (!atomic_load(&s->blocking))
			cbcmn_sleep(cx, 1000000);
		cbcmn_sleep(cx, 20000000); /* most likely blocked by now */
		TASK_CHECK(cbcmn_actor_stop(NULL, cx, a, -77) == 0);
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == -77);
	}
	atomic_store(&all->release, 1);
	return cbcmn_nursery_await_all(cx, nf);
}

static void test_stop_interrupts_sleep_chan_io_join_and_send(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct stopw_all all = {0};
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &all.w[W_CHAN].ch), 0);
	all.w[W_READ].fd = p[0];
	t_run(rt, stopw_main, &all, 0);
	for (int k = 0; k < W_NKIND; k++) {
		/* Before: the sleep slept, the others timed out after 3 s. */
		assert_int_equal(all.w[k].rc, CBCMN_ECANCELED);
		assert_int_equal(all.w[k].rc_next, CBCMN_ECANCELED);
		assert_int_equal(all.w[k].rc_recv, -ESHUTDOWN);
	}
	assert_int_equal(cbcmn_chan_destroy(all.w[W_CHAN].ch), 0);
	close(p[0]);
	close(p[1]);
	t_destroy(rt);
}

/* ---- a cancellation two nurseries up -------------------------------------
 *
 * A fiber actor's cancellation check is inline (actor.h's
 * cbcmn__actor_cancelled(): its stop, its halt, its nursery chain): an
 * actor in a nursery whose enclosing one is cancelled sees it in its
 * blocked receive's wait, at its next receive's check and at a send's,
 * which would otherwise wait for ever in a full mailbox. */
struct upc {
	_Atomic int blocked;
	int rc_recv, rc_next, rc_send;
	cbcmn_actor_ref full;
};

static int64_t upc_actor(cbcmn_cx *cx, void *arg)
{
	struct upc *u = arg;
	cbcmn_actor_msg m;
	atomic_store(&u->blocked, 1);
	u->rc_recv = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	u->rc_next = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	m = msg(M_DATA, 0, 0);
	u->rc_send = cbcmn_actor_send(NULL, cx, u->full, &m);
	return 0;
}

static int64_t upc_middle(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, upc_actor, arg, NULL, &a) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t upc_main(cbcmn_cx *cx, void *arg)
{
	struct upc *u = arg;
	_Atomic int release = 0;
	cbcmn_nursery *nf, *up;
	cbcmn_actor_opts one = {.mailbox_cap = 1};
	TASK_CHECK(open_n(cx, &nf) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nf, holds_full, &release, &one, &u->full) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, u->full, &m) == 0);
	TASK_CHECK(open_n(cx, &up) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, up, upc_middle, u, NULL) == 0);
	while (!atomic_load(&u->blocked))
		cbcmn_sleep(cx, 1000000);
	cbcmn_sleep(cx, 20000000); /* most likely blocked by now */
	TASK_CHECK(cbcmn_nursery_cancel(up) == 0);
	int64_t rc = cbcmn_nursery_await_all(cx, up);
	atomic_store(&release, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nf) == 0);
	return rc;
}

static void test_a_cancellation_two_nurseries_up_ends_an_actors_waits(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct upc u = {.rc_recv = 1, .rc_next = 1, .rc_send = 1};
	t_run(rt, upc_main, &u, CBCMN_ECANCELED);
	assert_int_equal(u.rc_recv, CBCMN_ECANCELED);
	assert_int_equal(u.rc_next, CBCMN_ECANCELED);
	assert_int_equal(u.rc_send, CBCMN_ECANCELED);
	t_destroy(rt);
}

/* A read that completed is never reported cancelled: every byte a thread
 * writes is read by the actor (counted) or still in the pipe afterwards,
 * whenever the stop lands. */

struct stopio {
	int fd;
	long got;
	_Atomic int reading;
};

static int64_t reads_bytes(cbcmn_cx *cx, void *arg)
{
	struct stopio *s = arg;
	char c;
	atomic_store(&s->reading, 1);
	for (;;) {
		int64_t r = cbcmn_read(cx, s->fd, &c, 1);
		if (r != 1) {
			TASK_CHECK(r == CBCMN_ECANCELED);
			return 0;
		}
		s->got++;
	}
}

static void *writes_bytes(void *arg)
{
	int *p = arg;
	for (int i = 0; i < p[1]; i++) {
		if (write(p[0], "x", 1) != 1)
			break;
		if (i % 8 == 0)
			usleep(100);
	}
	return NULL;
}

static void test_stop_during_reads_loses_no_byte(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	int rounds = STRESS(20);
	for (int r = 0; r < rounds; r++) {
		int p[2];
		assert_int_equal(pipe(p), 0);
		struct stopio s = {.fd = p[0]};
		cbcmn_nursery *n;
		cbcmn_actor_ref a;
		assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
		assert_int_equal(cbcmn_actor_spawn(NULL, n, reads_bytes, &s, NULL, &a), 0);
		int warg[2] = {p[1], 400};
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, writes_bytes, warg), 0);
		while (!atomic_load(&s.reading))
			usleep(100);
		usleep((useconds_t)(r * 250)); /* a different moment each round */
		assert_int_equal(cbcmn_actor_stop(rt, NULL, a, 0), 0);
		assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
		pthread_join(th, NULL);
		int fl = fcntl(p[0], F_GETFL);
		assert_int_equal(fcntl(p[0], F_SETFL, fl | O_NONBLOCK), 0);
		long left = 0;
		char buf[512];
		ssize_t k;
		while ((k = read(p[0], buf, sizeof(buf))) > 0)
			left += k;
		assert_int_equal(s.got + left, 400);
		close(p[0]);
		close(p[1]);
	}
	t_destroy(rt);
}

/* Stops at random moments of an actor that keeps changing what it waits
 * on (a sleep, a channel, its own mailbox, a full peer mailbox, a join, a
 * link): it always ends, with the stop's reason, and nothing leaks (ASan). */

struct stopany {
	cbcmn_chan *ch;
	cbcmn_actor_ref full;
	_Atomic int running;
	_Atomic long calls;
};

static int64_t any_child(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	return cbcmn_sleep(cx, 200000);
}

static int64_t stopany_actor(cbcmn_cx *cx, void *arg)
{
	struct stopany *s = arg;
	atomic_store(&s->running, 1);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	int v = 0;
	cbcmn_nursery *n;
	for (uint64_t i = 0;; i++) {
		atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
		switch (i % 6) {
		case 0:
			cbcmn_sleep(cx, 100000);
			break;
		case 1:
			cbcmn_chan_recv_timeout(cx, s->ch, &v, 100000);
			break;
		case 2:
			if (cbcmn_actor_receive(cx, &m, 100000) == -ESHUTDOWN)
				return 0; /* stopped: the stop's reason is ours */
			break;
		case 3:
			cbcmn_actor_send_timeout(NULL, cx, s->full, &m, 100000);
			break;
		case 4:
			if (open_n(cx, &n) == 0) {
				cbcmn_nursery_spawn(cx, n, any_child, NULL, NULL);
				cbcmn_nursery_await_all(cx, n);
			}
			break;
		case 5:
			cbcmn_actor_link(cx, s->full);
			cbcmn_actor_unlink(cx, s->full);
			CBCMN_CHECKPOINT(cx);
			break;
		}
	}
}

static int64_t stopany_main(cbcmn_cx *cx, void *arg)
{
	struct stopany *s = arg;
	cbcmn_nursery *nf;
	TASK_CHECK(open_n(cx, &nf) == 0);
	_Atomic int release = 0;
	/* Trapping: a stop that lands between the link and the unlink sends
	 * it an EXIT (never received, freed at its halt), not a stop. */
	cbcmn_actor_opts one = {.mailbox_cap = 1, .trap_exit = true};
	TASK_CHECK(cbcmn_actor_spawn(cx, nf, holds_full, &release, &one, &s->full) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, s->full, &m) == 0);
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (int r = 0; r < STRESS(60); r++) {
		cbcmn_nursery *n;
		cbcmn_actor_ref a;
		atomic_store(&s->running, 0);
		TASK_CHECK(open_n(cx, &n) == 0);
		TASK_CHECK(cbcmn_actor_spawn(cx, n, stopany_actor, s, NULL, &a) == 0);
		while (!atomic_load(&s->running))
			cbcmn_yield(cx);
		seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
		cbcmn_sleep(cx, seed % 1500000); /* 0 to 1.5 ms in */
		TASK_CHECK(cbcmn_actor_stop(NULL, cx, a, -61) == 0);
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == -61);
	}
	atomic_store(&release, 1);
	return cbcmn_nursery_await_all(cx, nf);
}

static void test_stop_at_any_point_always_ends_the_actor(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct stopany s = {0};
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &s.ch), 0);
	t_run(rt, stopany_main, &s, 0);
	assert_true(atomic_load(&s.calls) > 0);
	assert_int_equal(cbcmn_chan_destroy(s.ch), 0);
	t_destroy(rt);
}

/* ---- bad input ---- */

static int64_t bad_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_ref a = 5;
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	cbcmn_actor_msg sys = msg(CBCMN_ACTOR_DOWN, 0, 0);
	uint64_t id;
	cbcmn_actor_opts big = {.mailbox_cap = CBCMN_ACTOR_MAILBOX_MAX + 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, NULL, NULL, NULL, NULL, &a) == -EINVAL);
	TASK_CHECK(a == CBCMN_ACTOR_NONE);
	TASK_CHECK(cbcmn_actor_spawn(cx, NULL, returns_at_once, NULL, NULL, NULL) == -EINVAL);
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, returns_at_once, NULL, &big, &a) == -EINVAL);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, 12345, NULL) == -EINVAL);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, 12345, &sys) == -EINVAL);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, ~0ull, &m) == -ESRCH);
	TASK_CHECK(cbcmn_actor_send(NULL, NULL, 1, &m) == -EINVAL);
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, ~0ull, 0) == -ESRCH);
	TASK_CHECK(cbcmn_actor_monitor(cx, 1, &id) == -EPERM); /* not an actor */
	TASK_CHECK(cbcmn_actor_receive(cx, NULL, 0) == -EINVAL);
	TASK_CHECK(cbcmn_actor_self(NULL) == CBCMN_ACTOR_NONE);
	/* A thread-style blocking send from an executor thread would
	 * deadlock the executor. */
	TASK_CHECK(cbcmn_actor_send(cbcmn_cx_runtime(cx), NULL, ~0ull, &m) == -EDEADLK);
	return 0;
}

static void test_bad_input(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_run(rt, bad_main, NULL, 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	/* A thread's timed send to nobody. */
	assert_int_equal(cbcmn_actor_send_timeout(rt, NULL, 1ull << 32, &m, 1000), -ESRCH);
	assert_int_equal(cbcmn_actor_send(rt, NULL, 1ull << 32, &m), -ESRCH);
	t_destroy(rt);
}

int main(int argc, char **argv)
{
#define T(f) T_WATCHED_TEST(f)
	const struct CMUnitTest tests[] = {
		T(test_order_per_sender_nothing_lost_or_twice),
		T(test_ping_pong_across_executors),
		T(test_stale_ref_rejected_after_slot_reuse),
		T(test_send_blocks_while_mailbox_full),
		T(test_receive_timeout_fires_and_not_early),
		T(test_stop_ends_receive_and_fails_senders),
		T(test_send_sets_from_and_zeroes_reserved_on_every_path),
		T(test_monitor_down_after_messages_with_reason),
		T(test_downs_follow_every_message_handed_over_or_queued),
		T(test_demonitor_stops_and_flushes_down),
		T(test_halt_drops_undelivered_once_each),
		T(test_receive_during_halt_is_eshutdown),
		T(test_send_to_own_full_mailbox_is_edeadlk),
		T(test_sends_and_receives_charge_channel_ops),
		T(test_cancel_blocked_send_and_receive_leave_no_trace),
		T(test_link_passes_abnormal_halts_only),
		T(test_stop_as_receive_begins_to_wait_is_eshutdown),
		T(test_actor_stopped_before_it_ran_never_runs_and_reports_down),
		T(test_stack_overflow_halts_with_epanic),
		T(test_budget_given_up_halts_with_ebudget),
		T(test_thread_blocked_on_halted_actor_gets_esrch),
		T(test_failed_spawn_leaves_nothing),
		T(test_flood_and_plain_tasks_share_the_executor),
		T(test_sends_racing_halts_are_received_or_dropped_once),
		T(test_ref_of_another_runtime_is_refused),
		T(test_demonitor_of_another_target_keeps_the_down),
		T(test_halted_watchers_leave_no_monitor_on_the_target),
		T(test_wrapped_generation_retires_the_slot),
		T(test_stats_count_actors_by_state_per_executor),
		T(test_timed_out_sends_leave_the_receiving_count_alone),
		T(test_link_from_a_drop_callback_is_refused_not_inherited),
		T(test_stack_overflow_in_drop_finishes_the_halt_once),
		T(test_thread_exit_in_drop_finishes_the_halt_once),
		T(test_stack_overflow_in_drop_of_an_actor_halted_inline),
		T(test_thread_exit_in_drop_of_an_actor_halted_inline),
		T(test_stack_overflow_in_drop_of_an_actor_ended_by_the_loop),
		T(test_thread_exit_in_drop_of_an_actor_ended_by_the_loop),
		T(test_cancelled_actor_with_no_stack_left_ends_cancelled),
		T(test_stack_overflow_in_drop_of_an_actor_with_no_stack_left),
		T(test_thread_exit_in_drop_of_an_actor_with_no_stack_left),
		T(test_drop_s_sends_come_before_the_down),
		T(test_blocking_send_in_a_drop_does_not_wait),
		T(test_unlinked_peer_halting_stops_nobody),
		T(test_thread_timed_send_gives_up_or_gets_room),
		T(test_trap_exit_turns_linked_halts_into_exit_messages),
		T(test_link_cycle_with_a_trapper_ends_once),
		T(test_stop_interrupts_sleep_chan_io_join_and_send),
		T(test_a_cancellation_two_nurseries_up_ends_an_actors_waits),
		T(test_stop_during_reads_loses_no_byte),
		T(test_stop_at_any_point_always_ends_the_actor),
		T(test_bad_input),
	};
#undef T
	if (argc > 1)
		cmocka_set_test_filter(argv[1]); /* one test by name */
	return cmocka_run_group_tests_name("actor", tests, NULL, NULL);
}
