/* test_actor_direct: the actor hop's fast path (docs/ACTORS.md, "Cost"):
 * an actor that blocks after waking another on its executor switches
 * straight to it (sched.c, actor_direct()), and an unpinned actor whose
 * home is out of work follows its messages to the sender's executor
 * (actor_mbox.c, lane_route()).  Attacked here: a receiver stopped while
 * the token is handed to it, receive timeouts racing the sends, a pinned
 * receiver that must stay, and tokens passed round rings of pinned and
 * unpinned actors, every hop counted; and cancellers that hold an actor's
 * lasting receive record (iwait.h) past its wait. */
#include "helpers.h"
#include "../lib/runtime.h"
#include "../lib/actor.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>
#include <string.h>

#include "actor_test.h"

/* ---- a token round a ring: every hop once, in turn ---- */

#define RING 64

struct ring {
	cbcmn_actor_ref refs[RING];
	uint64_t visits[RING];
	uint64_t hops;          /* the token's hops in all */
	_Atomic uint64_t done;  /* hops made when it came back to 0 */
	cbcmn_actor_ref stopped; /* stopped by the hop before it, if set */
	uint32_t stop_at;       /* the member stopped as the token heads its way */
	_Atomic int shut;       /* that member's receive ended -ESHUTDOWN */
	bool pinned;
};

static int64_t ring_member(cbcmn_cx *cx, void *arg)
{
	struct ring_place *me = arg;
	struct ring *r = me->r;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0) {
		if (m.type == M_QUIT) {
			if (me->i + 1 < RING)
				(void)cbcmn_actor_send(NULL, cx, r->refs[me->i + 1], &m);
			return 0;
		}
		r->visits[me->i]++;
		uint32_t next = (me->i + 1) % RING;
		if (m.body.u64[0] == 0) {
			atomic_store(&r->done, m.body.u64[1]);
			return 0;
		}
		m.body.u64[0]--;
		m.body.u64[1]++;
		/* The attack: stop the receiver, then hand it the token. */
		if (r->stop_at && next == r->stop_at && m.body.u64[1] > RING)
			TASK_CHECK(cbcmn_actor_stop(NULL, cx, r->refs[next], 7) == 0);
		rc = cbcmn_actor_send(NULL, cx, r->refs[next], &m);
		if (r->stop_at && next == r->stop_at && m.body.u64[1] > RING) {
			/* A stop closes the mailbox: the send misses. */
			TASK_CHECK(rc == -ESRCH);
			atomic_store(&r->done, m.body.u64[1]);
			return 0;
		}
		TASK_CHECK(rc == 0);
	}
	if (rc == -ESHUTDOWN && me->i == r->stop_at)
		atomic_store(&r->shut, 1);
	return rc == -ESHUTDOWN ? 0 : rc;
}

static int64_t ring_root(cbcmn_cx *cx, void *arg)
{
	struct ring *r = arg;
	static struct ring_place at[RING];
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	ring_spawn(cx, n, ring_member, r, at, r->refs, RING,
		   r->pinned ? CBCMN_PLACE_PINNED : CBCMN_PLACE_LOCAL);
	cbcmn_actor_msg m = msg(M_DATA, r->hops, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, r->refs[0], &m) == 0);
	while (!atomic_load(&r->done))
		cbcmn_sleep(cx, 1000000);
	/* The rest end with QUIT from 0 (a stopped one's successors too). */
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	for (uint32_t k = 0; k < RING; k++)
		(void)cbcmn_actor_send(NULL, cx, r->refs[k], &q);
	return cbcmn_nursery_await_all(cx, n);
}

static void ring_run(struct ring *r, uint32_t workers)
{
	cbcmn_runtime *rt = t_runtime(workers);
	int64_t res;
	assert_int_equal(cbcmn_runtime_run(rt, ring_root, r, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	t_destroy(rt);
}

/* Every member visited in turn, the same number of times give or take
 * one: no hop lost or made twice, on one executor (pinned) or two. */
static void ring_check(struct ring *r)
{
	assert_int_equal(atomic_load(&r->done), r->hops);
	uint64_t sum = 0;
	for (uint32_t k = 0; k < RING; k++) {
		sum += r->visits[k];
		assert_true(r->visits[k] == r->hops / RING || r->visits[k] == r->hops / RING + 1);
	}
	assert_int_equal(sum, r->hops + 1);
}

static void test_token_round_pinned_ring_every_hop_once(void **state)
{
	(void)state;
	static struct ring r;
	memset(&r, 0, sizeof(r));
	r.pinned = true;
	r.hops = STRESS(200000);
	ring_run(&r, 2);
	ring_check(&r);
}

static void test_token_round_unpinned_ring_every_hop_once(void **state)
{
	(void)state;
	static struct ring r;
	memset(&r, 0, sizeof(r));
	r.hops = STRESS(200000);
	ring_run(&r, 2);
	ring_check(&r);
}

/* A receiver stopped just before the token is sent to it, on the hop
 * that would have switched straight to it: the send misses, its receive
 * ends -ESHUTDOWN, nothing hangs.  Pinned (one executor: the direct
 * switch) and not. */
static void stopped_receiver(bool pinned)
{
	static struct ring r;
	memset(&r, 0, sizeof(r));
	r.pinned = pinned;
	r.hops = 10 * RING;
	r.stop_at = RING / 2;
	ring_run(&r, 2);
	assert_int_equal(atomic_load(&r.shut), 1);
	assert_true(atomic_load(&r.done) > RING);
}

static void test_receiver_stopped_as_the_token_comes_pinned(void **state)
{
	(void)state;
	stopped_receiver(true);
}

static void test_receiver_stopped_as_the_token_comes_unpinned(void **state)
{
	(void)state;
	stopped_receiver(false);
}

/* ---- a receive timeout racing the sends ---- */

#define RACE_MSGS 20000

struct race {
	cbcmn_actor_ref rx;
	_Atomic long got, timeouts, bad;
};

static int64_t race_rx(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	uint64_t next = 0;
	cbcmn_actor_msg m;
	while (next < (uint64_t)STRESS(RACE_MSGS)) {
		/* 0-2 us: the timer fires as the sender hands a message over. */
		int rc = cbcmn_actor_receive(cx, &m, next % 3 * 1000);
		if (rc == -ETIMEDOUT) {
			atomic_fetch_add(&r->timeouts, 1);
			continue;
		}
		TASK_CHECK(rc == 0);
		if (m.body.u64[0] != next)
			atomic_fetch_add(&r->bad, 1); /* lost, twice or out of order */
		next = m.body.u64[0] + 1;
		atomic_fetch_add(&r->got, 1);
	}
	return 0;
}

static int64_t race_tx(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	for (uint64_t i = 0; i < (uint64_t)STRESS(RACE_MSGS); i++) {
		cbcmn_actor_msg m = msg(M_DATA, i, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, r->rx, &m) == 0);
		if (i % 7 == 0)
			cbcmn_yield(cx);
	}
	return 0;
}

static int64_t race_root(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	/* Both on executor 0: the sender's blocks switch straight to the
	 * receiver it woke. */
	cbcmn_actor_opts pin = {.placement = CBCMN_PLACE_PINNED, .shard = 0, .mailbox_cap = 1};
	cbcmn_actor_ref tx;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, race_rx, r, &pin, &r->rx) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, race_tx, r, &pin, &tx) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_receive_timeouts_racing_sends_lose_nothing(void **state)
{
	(void)state;
	static struct race r;
	memset(&r, 0, sizeof(r));
	cbcmn_runtime *rt = t_runtime(2);
	int64_t res;
	assert_int_equal(cbcmn_runtime_run(rt, race_root, &r, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	assert_int_equal(atomic_load(&r.got), STRESS(RACE_MSGS));
	assert_int_equal(atomic_load(&r.bad), 0);
	t_destroy(rt);
}

/* ---- following messages: unpinned come, pinned stay ---- */

struct follow {
	cbcmn_actor_ref r;
	_Atomic int ran_on; /* the executor of its last message, + 1 */
	_Atomic int ready;
};

static int64_t follow_rx(cbcmn_cx *cx, void *arg)
{
	struct follow *f = arg;
	cbcmn_actor_msg m;
	int rc;
	atomic_store(&f->ready, 1);
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type == M_DATA)
		atomic_store(&f->ran_on, (int)cbcmn_cx_executor(cx) + 1);
	return rc;
}

/* A pinned task on executor 0 sends to a receiver that first ran on
 * executor 1, which has nothing else to do: an unpinned receiver comes
 * to executor 0, a pinned one stays on 1; both get every message. */
static int64_t follow_sender(cbcmn_cx *cx, void *arg)
{
	struct follow *f = arg;
	for (int i = 0; i < 200; i++) {
		cbcmn_actor_msg m = msg(M_DATA, (uint64_t)i, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, f->r, &m) == 0);
		cbcmn_sleep(cx, 100000); /* executor 1 out of work meanwhile */
		if (atomic_load(&f->ran_on) == 1)
			break;
	}
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, f->r, &q) == 0);
	return 0;
}

static int64_t follow_root(cbcmn_cx *cx, void *arg)
{
	void **p = arg;
	struct follow *f = p[0];
	bool pinned = p[1] != NULL;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.placement = pinned ? CBCMN_PLACE_PINNED : CBCMN_PLACE_STEALABLE_ON,
			       .shard = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, follow_rx, f, &ao, &f->r) == 0);
	while (!atomic_load(&f->ready))
		cbcmn_sleep(cx, 1000000);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, follow_sender, f, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static int follow_run(bool pinned)
{
	static struct follow f;
	memset(&f, 0, sizeof(f));
	cbcmn_runtime *rt = t_runtime(2);
	int64_t res;
	void *p[2] = {&f, pinned ? &f : NULL};
	assert_int_equal(cbcmn_runtime_run(rt, follow_root, p, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	t_destroy(rt);
	return atomic_load(&f.ran_on) - 1;
}

static void test_unpinned_receiver_follows_its_messages_pinned_stays(void **state)
{
	(void)state;
	assert_int_equal(follow_run(false), 0);
	assert_int_equal(follow_run(true), 1);
}

/* ---- per-sender order across the move ---- */

/* Two senders pinned to executors 0 and 1 stream numbered messages to one
 * unpinned receiver that sometimes computes (its home busy: a sender on
 * the other executor takes the lanes) and mostly waits (its home out of
 * work: the lock path, whose wake pulls it to the sender's executor).  A
 * sender that used the lanes before a move and the lock path after must
 * still deliver in order. */
#define MOVE_SENDERS 2

struct move {
	cbcmn_actor_ref r;
	uint64_t next[MOVE_SENDERS];
	long per_sender;
	_Atomic long got, bad;
	_Atomic int moves; /* the receiver's changes of executor */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void spin_ns(uint64_t ns)
{
	uint64_t t0 = mono_ns();
	while (mono_ns() - t0 < ns)
		;
}

static int64_t move_rx(cbcmn_cx *cx, void *arg)
{
	struct move *mv = arg;
	cbcmn_actor_msg m;
	int rc, last = -1;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type == M_DATA) {
		uint64_t s = m.body.u64[0], seq = m.body.u64[1];
		if (s >= MOVE_SENDERS || seq != mv->next[s])
			atomic_fetch_add(&mv->bad, 1);
		else
			mv->next[s]++;
		int on = (int)cbcmn_cx_executor(cx);
		if (last >= 0 && on != last)
			atomic_fetch_add(&mv->moves, 1);
		last = on;
		if (atomic_fetch_add(&mv->got, 1) % 8 == 0)
			spin_ns(20000); /* its home busy: the lanes */
	}
	return rc;
}

static int64_t move_tx(cbcmn_cx *cx, void *arg)
{
	struct move *mv = arg;
	uint64_t id = cbcmn_cx_executor(cx);
	for (long i = 0; i < mv->per_sender; i++) {
		cbcmn_actor_msg m = msg(M_DATA, id, (uint64_t)i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, mv->r, &m) == 0);
		if (i % 16 == 0)
			spin_ns(5000);
	}
	return 0;
}

static int64_t move_root(cbcmn_cx *cx, void *arg)
{
	struct move *mv = arg;
	cbcmn_nursery *n, *tx;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 4, .placement = CBCMN_PLACE_STEALABLE_ON, .shard = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, move_rx, mv, &ao, &mv->r) == 0);
	TASK_CHECK(open_n(cx, &tx) == 0);
	for (uint32_t k = 0; k < MOVE_SENDERS; k++)
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, tx, k, move_tx, mv, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, tx) == 0);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, mv->r, &q) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_per_sender_order_holds_across_the_follow_move(void **state)
{
	(void)state;
	static struct move mv;
	memset(&mv, 0, sizeof(mv));
	mv.per_sender = STRESS(20000);
	cbcmn_runtime *rt = t_runtime(2);
	int64_t res;
	assert_int_equal(cbcmn_runtime_run(rt, move_root, &mv, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	assert_int_equal(atomic_load(&mv.bad), 0);
	assert_int_equal(atomic_load(&mv.got), MOVE_SENDERS * mv.per_sender);
	t_destroy(rt);
}

/* ---- a ping-pong beside a computing task: the task runs ---- */

/* Two actors pass a ball on one executor (each hop a direct switch) while
 * a plain task computes and yields: issue 16 has actors and tasks share
 * the executor.  A thread outside stops the ping-pong after 10 s if the
 * task has not finished: starved. */
struct pong {
	cbcmn_actor_ref a[2];
	_Atomic int stop, starved;
	_Atomic long hops, rounds;
	bool pinned;
};

static int64_t pong_actor(cbcmn_cx *cx, void *arg)
{
	struct pong *p = arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type == M_DATA) {
		atomic_fetch_add(&p->hops, 1);
		/* body: the receiver's index; stopping, the other one quits */
		cbcmn_actor_msg b = msg(atomic_load(&p->stop) ? M_QUIT : M_DATA, m.body.u64[0] ^ 1, 0);
		(void)cbcmn_actor_send(NULL, cx, p->a[m.body.u64[0] ^ 1], &b);
		if (b.type == M_QUIT)
			return 0;
	}
	return rc;
}

static int64_t pong_cpu(cbcmn_cx *cx, void *arg)
{
	struct pong *p = arg;
	for (int i = 0; i < 50 && !atomic_load(&p->stop); i++) {
		spin_ns(200000);
		atomic_fetch_add(&p->rounds, 1);
		TASK_CHECK(cbcmn_yield(cx) == 0);
	}
	atomic_store(&p->stop, 1);
	return 0;
}

static int64_t pong_root(cbcmn_cx *cx, void *arg)
{
	struct pong *p = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.placement = p->pinned ? CBCMN_PLACE_PINNED : CBCMN_PLACE_LOCAL};
	for (int k = 0; k < 2; k++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, pong_actor, p, &ao, &p->a[k]) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, pong_cpu, p, NULL) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, p->a[0], &m) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void *pong_watch(void *arg)
{
	struct pong *p = arg;
	for (int i = 0; i < 1000 && !atomic_load(&p->stop); i++)
		usleep(10000);
	if (!atomic_exchange(&p->stop, 1))
		atomic_store(&p->starved, 1);
	return NULL;
}

static void pong_run(bool pinned)
{
	static struct pong p;
	memset(&p, 0, sizeof(p));
	p.pinned = pinned;
	pthread_t w;
	assert_int_equal(pthread_create(&w, NULL, pong_watch, &p), 0);
	cbcmn_runtime *rt = t_runtime(1);
	int64_t res;
	assert_int_equal(cbcmn_runtime_run(rt, pong_root, &p, &res), 0);
	pthread_join(w, NULL);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	assert_int_equal(atomic_load(&p.starved), 0);
	assert_int_equal(atomic_load(&p.rounds), 50);
	assert_true(atomic_load(&p.hops) > 2);
	t_destroy(rt);
}

static void test_ping_pong_beside_a_computing_task_lets_it_run_unpinned(void **state)
{
	(void)state;
	pong_run(false);
}

static void test_ping_pong_beside_a_computing_task_lets_it_run_pinned(void **state)
{
	(void)state;
	pong_run(true);
}

/* ---- a hop is one pick ---- */

/* Two actors pass a ball HOPS times on one executor, each hop a direct
 * switch (unpinned: from the slot, past its cap too; pinned: from the
 * pinned queue, past the loop's every-61st look): the executor's picks
 * from its own queues (local_hits) count each once, as the loop counts
 * its picks. */
#define HOPS 20000

struct count {
	cbcmn_actor_ref a[2];
	uint64_t hits;
	uint32_t direct; /* the executor's direct_runs meanwhile */
	bool pinned;
};

static int64_t count_actor(cbcmn_cx *cx, void *arg)
{
	struct count *c = arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type == M_DATA) {
		uint64_t left = m.body.u64[0], to = m.body.u64[1] ^ 1;
		cbcmn_actor_msg b = msg(left ? M_DATA : M_QUIT, left ? left - 1 : 0, to);
		(void)cbcmn_actor_send(NULL, cx, c->a[to], &b);
		if (!left)
			return 0;
	}
	return rc;
}

static int64_t count_root(cbcmn_cx *cx, void *arg)
{
	struct count *cp = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_executor_stats s0, s1;
	cbcmn_stats tot;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.placement = cp->pinned ? CBCMN_PLACE_PINNED : CBCMN_PLACE_LOCAL};
	for (int k = 0; k < 2; k++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, count_actor, cp, &ao, &cp->a[k]) == 0);
	TASK_CHECK(cbcmn_stats_snapshot(rt, &tot, &s0, 1) == 0);
	/* Ours: one executor, and we run on it. */
	struct cbcmn__exec *e = rt->exec[cbcmn_cx_executor(cx)];
	uint32_t d0 = e->direct_runs;
	cbcmn_actor_msg m = msg(M_DATA, HOPS, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, cp->a[0], &m) == 0);
	int64_t rc = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(cbcmn_stats_snapshot(rt, &tot, &s1, 1) == 0);
	cp->hits = s1.local_hits - s0.local_hits;
	cp->direct = e->direct_runs - d0;
	return rc;
}

static void count_run(bool pinned)
{
	static struct count c;
	memset(&c, 0, sizeof(c));
	c.pinned = pinned;
	cbcmn_runtime *rt = t_runtime(1);
	int64_t res;
	assert_int_equal(cbcmn_runtime_run(rt, count_root, &c, &res), 0);
	uint64_t hits = c.hits;
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	/* HOPS + 2 runs of the actors, a few of the root's and the loop's. */
	assert_true(hits >= HOPS && hits <= HOPS + 64);
	/* Nearly every hop switched straight: the loop comes between only
	 * for its load sample (every 256 picks) and its every-61st look. */
	assert_true(c.direct >= HOPS - HOPS / 20);
	t_destroy(rt);
}

static void test_a_direct_hop_is_one_pick_unpinned(void **state)
{
	(void)state;
	count_run(false);
}

static void test_a_direct_hop_is_one_pick_pinned(void **state)
{
	(void)state;
	count_run(true);
}

/* ---- a handler actor pulled by the lock path: its host's kick ---- */

/* Handler actors stay (`stays`, set at spawn), and so their sends' wakes
 * went through cbcmn__wakes_run(); one that follows its messages, as a
 * fiber actor does, has them run by cbcmn__wakes_run_here(), which
 * returned at an empty waiter list before the host's kick (wakes.hkick):
 * the host never ran the message, every executor parked.  White box: the
 * handler clears its own flag. */
static int64_t follow_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct order *o = arg;
	struct cbcmn__actor *me = cbcmn__actor_or_handler((struct cbcmn_task *)cx);
	atomic_store_explicit(&me->stays, false, memory_order_relaxed);
	return order_take(o, m) ? CBCMN_ACTOR_HALT : CBCMN_ACTOR_CONTINUE;
}

static int follow_handler_spawn(cbcmn_cx *cx, cbcmn_nursery *n, struct order *o)
{
	cbcmn_actor_opts ao = {.mailbox_cap = 3, .placement = CBCMN_PLACE_STEALABLE};
	return cbcmn_actor_spawn_handler(cx, n, follow_handler, o, &ao, &o->a);
}

static void test_a_following_handler_actors_host_is_kicked(void **state)
{
	(void)state;
	order_run(follow_handler_spawn);
}

/* ---- wakes racing cancellation (sched.c, cbcmn__wake_claimed()) ---- */

/* A receiver's wake by the sender that claimed its wait is a store, not a
 * CAS, once the receiver is BLOCKED: nobody else may wake it then.  So
 * three claimers race here for each blocked receive: a sender on an
 * executor, a plain thread (its wake from outside the runtime), the
 * nursery's cancellation, and half the receives' timers.  Each message
 * comes once and in order per sender (a second wake would run a receiver
 * twice: lost or repeated messages, a crash, or TSan's report), and every
 * receiver ends once, cancelled. */
#define WR_RX 4
#define WR_ROUNDS 120

struct wrace {
	cbcmn_runtime *rt;
	cbcmn_nursery *n;
	cbcmn_actor_ref rx[WR_RX];
	_Atomic int go, stop;
	_Atomic long started, got, sent, bad, ended;
	bool strict; /* a receiver ended before stop is wrong */
};

struct wr_member {
	struct wrace *w;
	uint32_t i;
};

static int64_t wr_rx(cbcmn_cx *cx, void *arg)
{
	struct wr_member *me = arg;
	struct wrace *w = me->w;
	uint64_t next[2] = {0, 0}; /* per sender (0: the task, 1: the thread) */
	cbcmn_actor_msg m;
	atomic_fetch_add(&w->started, 1);
	for (uint64_t k = 0;; k++) {
		int rc = cbcmn_actor_receive(cx, &m, me->i % 2 ? k % 3 * 1000 : CBCMN_ACTOR_FOREVER);
		if (rc == -ETIMEDOUT)
			continue;
		if (rc) {
			if ((rc != CBCMN_ECANCELED && rc != -ESHUTDOWN) ||
			    (w->strict && !atomic_load(&w->stop)))
				atomic_fetch_add(&w->bad, 1);
			atomic_fetch_add(&w->ended, 1);
			return 0;
		}
		uint64_t from = m.body.u64[0], seq = m.body.u64[1];
		if (from > 1 || seq != next[from])
			atomic_fetch_add(&w->bad, 1); /* lost, twice or out of order */
		else
			next[from]++;
		atomic_fetch_add(&w->got, 1);
	}
}

/* Sends (from, seq) round the receivers until stopped; seq counts the
 * sends that succeeded, per receiver. */
static void wr_send_all(struct wrace *w, cbcmn_cx *cx, uint64_t from)
{
	uint64_t seq[WR_RX] = {0};
	for (uint32_t k = 0; !atomic_load(&w->stop); k++) {
		uint32_t i = k % WR_RX;
		cbcmn_actor_msg m = msg(M_DATA, from, seq[i]);
		int rc = cx ? cbcmn_actor_send_timeout(NULL, cx, w->rx[i], &m, 1000000)
			    : cbcmn_actor_try_send(w->rt, NULL, w->rx[i], &m);
		if (rc == 0) {
			seq[i]++;
			atomic_fetch_add(&w->sent, 1);
		} else if (rc == CBCMN_ECANCELED) {
			return;
		}
	}
}

static int64_t wr_tx(cbcmn_cx *cx, void *arg)
{
	wr_send_all(arg, cx, 0);
	return 0;
}

static void *wr_thread(void *arg)
{
	struct wrace *w = arg;
	while (!atomic_load(&w->go))
		;
	wr_send_all(w, NULL, 1);
	return NULL;
}

/* The receivers in their receives, the task sender on executor 1. */
static void wr_start(cbcmn_cx *cx, struct wrace *w)
{
	static struct wr_member mem[WR_RX];
	TASK_CHECK(open_n(cx, &w->n) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 2};
	for (uint32_t i = 0; i < WR_RX; i++) {
		mem[i] = (struct wr_member){w, i};
		TASK_CHECK(cbcmn_actor_spawn(cx, w->n, wr_rx, &mem[i], &ao, &w->rx[i]) == 0);
	}
	/* Each in its receive first: one cancelled before it ran would end
	 * unstarted, no receive to race. */
	uint64_t until = t_now_ns() + T_STALL_NS;
	while (atomic_load(&w->started) < WR_RX && t_now_ns() < until)
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, w->n, 1, wr_tx, w, NULL) == 0);
}

static int64_t wr_root(cbcmn_cx *cx, void *arg)
{
	struct wrace *w = arg;
	wr_start(cx, w);
	atomic_store(&w->go, 1);
	/* 0-200 us of sends, then the cancellation among them. */
	uint64_t end = t_now_ns() + (uint64_t)(t_now_ns() % 200) * 1000;
	while (t_now_ns() < end)
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_nursery_cancel(w->n) == 0);
	(void)cbcmn_nursery_await_all(cx, w->n);
	return 0;
}

static void test_wakes_racing_cancellation_run_each_receiver_once(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	static struct wrace w;
	long got = 0, sent = 0;
	for (int r = 0; r < STRESS(WR_ROUNDS); r++) {
		memset(&w, 0, sizeof(w));
		w.rt = rt;
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, wr_thread, &w), 0);
		int64_t res;
		int rc = cbcmn_runtime_run(rt, wr_root, &w, &res);
		atomic_store(&w.go, 1); /* in case the root failed early */
		atomic_store(&w.stop, 1);
		pthread_join(th, NULL);
		assert_int_equal(rc, 0);
		ASSERT_TASK_CHECKS();
		assert_int_equal(atomic_load(&w.bad), 0);
		assert_int_equal(atomic_load(&w.ended), WR_RX);
		assert_true(atomic_load(&w.got) <= atomic_load(&w.sent));
		got += atomic_load(&w.got);
		sent += atomic_load(&w.sent);
	}
	assert_true(got > 0); /* the race was run: messages came */
	t_destroy(rt);
}

/* ---- the receive's lasting record: stale cancellers (iwait.h) ---- */

/* An actor's receives all wait in one record, in its task's node, taken
 * back from the node after each without a fence: a canceller may read it
 * a receive late (docs/ACTORS.md, "The receive's lasting record").
 * Survivors receive round after round (from a task on the other
 * executor and from a thread; half of them with timers), unpinned (the
 * thief and the follow move them), beside victims of the same nursery
 * stopped one after another: each stop scans the nursery's scope, every
 * survivor's node with it.  A survivor must see no cancellation and lose
 * or repeat no message; each victim must end cancelled (a late canceller
 * claims a later receive of its own task only, which is cancelled). */

#define LR_MS 20

/* Survivors are a strict wrace's receivers (its senders too); victims
 * besides. */
struct lrace {
	struct wrace w;
	_Atomic long victims, victims_started, victims_ended;
};

static int64_t lr_victim(cbcmn_cx *cx, void *arg)
{
	struct lrace *l = arg;
	cbcmn_actor_msg m;
	atomic_fetch_add(&l->victims_started, 1);
	for (uint64_t k = 0;; k++) {
		int rc = cbcmn_actor_receive(cx, &m, k % 2 ? 1000 : CBCMN_ACTOR_FOREVER);
		if (rc == 0 || rc == -ETIMEDOUT)
			continue;
		if (rc != CBCMN_ECANCELED && rc != -ESHUTDOWN)
			atomic_fetch_add(&l->w.bad, 1);
		atomic_fetch_add(&l->victims_ended, 1);
		return 0;
	}
}

/* Spawns a victim, sends it a little, and stops it, until stopped. */
static int64_t lr_stopper(cbcmn_cx *cx, void *arg)
{
	struct lrace *l = arg;
	cbcmn_actor_opts ao = {.mailbox_cap = 2};
	while (!atomic_load(&l->w.stop)) {
		cbcmn_actor_ref v;
		long before = atomic_load(&l->victims_started);
		int src = cbcmn_actor_spawn(cx, l->w.n, lr_victim, l, &ao, &v);
		/* Refused only into the nursery the root cancels after its stop:
		 * the look above may come just before the two. */
		if (src != 0) {
			TASK_CHECK(atomic_load(&l->w.stop));
			break;
		}
		atomic_fetch_add(&l->victims, 1);
		uint64_t until = t_now_ns() + T_STALL_NS;
		while (atomic_load(&l->victims_started) == before && t_now_ns() < until)
			cbcmn_yield(cx);
		for (uint64_t k = t_now_ns() % 4; k > 0; k--) {
			cbcmn_actor_msg m = msg(M_DATA, 0, k);
			(void)cbcmn_actor_try_send(NULL, cx, v, &m);
			cbcmn_yield(cx);
		}
		int rc = cbcmn_actor_stop(NULL, cx, v, 7);
		/* -ESRCH: the end's cancellation halted it first. */
		TASK_CHECK(rc == 0 || (rc == -ESRCH && atomic_load(&l->w.stop)));
	}
	return 0;
}

static int64_t lr_root(cbcmn_cx *cx, void *arg)
{
	struct lrace *l = arg;
	struct wrace *w = &l->w;
	wr_start(cx, w);
	TASK_CHECK(cbcmn_nursery_spawn(cx, w->n, lr_stopper, l, NULL) == 0);
	atomic_store(&w->go, 1);
	uint64_t end = t_now_ns() + LR_MS * 1000000ull;
	while (t_now_ns() < end)
		cbcmn_yield(cx);
	atomic_store(&w->stop, 1);
	TASK_CHECK(cbcmn_nursery_cancel(w->n) == 0);
	(void)cbcmn_nursery_await_all(cx, w->n);
	return 0;
}

static void test_late_cancellers_claim_only_a_cancelled_receivers_record(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	static struct lrace l;
	long got = 0, victims = 0;
	for (int r = 0; r < STRESS(10); r++) {
		memset(&l, 0, sizeof(l));
		l.w.rt = rt;
		l.w.strict = true;
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, wr_thread, &l.w), 0);
		int64_t res;
		int rc = cbcmn_runtime_run(rt, lr_root, &l, &res);
		atomic_store(&l.w.go, 1);
		atomic_store(&l.w.stop, 1);
		pthread_join(th, NULL);
		assert_int_equal(rc, 0);
		ASSERT_TASK_CHECKS();
		assert_int_equal(atomic_load(&l.w.bad), 0);
		assert_int_equal(atomic_load(&l.w.ended), WR_RX);
		assert_int_equal(atomic_load(&l.victims_ended), atomic_load(&l.victims_started));
		assert_true(atomic_load(&l.w.got) <= atomic_load(&l.w.sent));
		got += atomic_load(&l.w.got);
		victims += atomic_load(&l.victims);
	}
	assert_true(got > 0);     /* the survivors received */
	assert_true(victims > 0); /* and stops scanned beside them */
	t_destroy(rt);
}

/* ---- a stale canceller's claim as the record is re-armed (iwait.h) ----
 * A canceller (a stop's scan of the nursery, for another actor) holds the
 * receiver's lasting record, read in its node's cur, while the receive
 * ends with a message and the next re-arms it; the nursery is cancelled
 * meanwhile.  The canceller's claim then takes the re-armed wait and
 * wakes its task: it must find the task parking, or the wake is lost and
 * the receive, seeing its claim taken, suspends for ever (the record was
 * WAITING before its task was PARKING).  The pause points hold the
 * canceller before its claim and the receiver just after its state
 * became WAITING; one executor makes the rest happen in order. */
struct stale {
	cbcmn_runtime *rt;
	cbcmn_nursery *n;
	cbcmn_actor_ref rx, sleeper;
	_Atomic int sleeping, held, release, stop_done, cancel_go, rearms, cancelled;
	_Atomic long ended;
	bool timed; /* receive with a timer, whose arming fails after the claim */
};
static struct stale st;

static bool st_wait(_Atomic int *flag)
{
	uint64_t until = t_now_ns() + T_STALL_NS;
	while (!atomic_load(flag) && t_now_ns() < until)
		usleep(100);
	return atomic_load(flag);
}

static void st_pause(enum cbcmn__pause_point pt, void *p)
{
	const struct cbcmn__iwait *iw = p;
	if (pt == CBCMN__P_SCAN_WAIT && iw->lasting && !atomic_exchange(&st.held, 1))
		(void)st_wait(&st.release); /* holding the receiver's record */
	else if (pt == CBCMN__P_REARM && atomic_load(&st.held) &&
		 atomic_fetch_add(&st.rearms, 1) == 0) {
		atomic_store(&st.cancel_go, 1); /* past the receive's own check */
		const struct cbcmn_nursery *n = (const struct cbcmn_nursery *)st.n;
		uint64_t until = t_now_ns() + T_STALL_NS;
		while (!atomic_load(&n->cancelled) && t_now_ns() < until)
			usleep(100);
		atomic_store(&st.release, 1);
		(void)st_wait(&st.stop_done); /* its claim made, its wake sent */
		if (st.timed) /* the receive's timer, next */
			cbcmn__fault_arm(CBCMN__F_MALLOC,
					 &(struct cbcmn__fault_plan){.nth = 1, .err = -ENOMEM});
	}
}

static int64_t st_rx(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	int rc;
	uint64_t timeout = st.timed ? 60ull * 1000000000ull : CBCMN_ACTOR_FOREVER;
	while ((rc = cbcmn_actor_receive(cx, &m, timeout)) == 0)
		;
	atomic_store(&st.cancelled, rc == CBCMN_ECANCELED);
	atomic_fetch_add(&st.ended, 1);
	return 0;
}

static int64_t st_sleeper(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	atomic_store(&st.sleeping, 1); /* nothing else runs before it sleeps */
	(void)cbcmn_sleep(cx, 60ull * 1000000000ull); /* until stopped */
	atomic_fetch_add(&st.ended, 1);
	return 0;
}

static void *st_stopper(void *arg)
{
	(void)arg; /* the stop's scan reads the receiver's node */
	(void)cbcmn_actor_stop(st.rt, NULL, st.sleeper, 7);
	atomic_store(&st.stop_done, 1);
	return NULL;
}

static void *st_canceller(void *arg)
{
	(void)arg;
	if (st_wait(&st.cancel_go))
		(void)cbcmn_nursery_cancel(st.n);
	return NULL;
}

static int64_t st_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(open_n(cx, &st.n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, st.n, st_rx, NULL, NULL, &st.rx) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, st.n, st_sleeper, NULL, NULL, &st.sleeper) == 0);
	/* Both run and block (one executor): the receiver in its receive. */
	struct cbcmn__actor *rx = cbcmn__actor_slot(st.rt, st.rx);
	uint64_t until = t_now_ns() + T_STALL_NS;
	while ((!atomic_load(&st.sleeping) || !atomic_load(&rx->receiver)) && t_now_ns() < until)
		cbcmn_yield(cx);
	TASK_CHECK(atomic_load(&st.sleeping) && atomic_load(&rx->receiver));
	pthread_t s, c;
	TASK_CHECK(pthread_create(&s, NULL, st_stopper, NULL) == 0);
	TASK_CHECK(pthread_create(&c, NULL, st_canceller, NULL) == 0);
	until = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&st.held) && t_now_ns() < until)
		cbcmn_yield(cx);
	TASK_CHECK(atomic_load(&st.held));
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, st.rx, &m) == 0); /* the receive ends */
	until = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&st.rearms) && t_now_ns() < until)
		cbcmn_yield(cx); /* the receiver runs, and re-arms */
	TASK_CHECK(atomic_load(&st.rearms));
	atomic_store(&st.cancel_go, 1); /* whatever happened: let go */
	atomic_store(&st.release, 1);
	(void)cbcmn_nursery_await_all(cx, st.n);
	pthread_join(s, NULL);
	pthread_join(c, NULL);
	return 0;
}

static void stale_run(bool timed)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.stall_ns = CBCMN_STALL_OFF;
	cfg.flags |= CBCMN_CONFIG_NO_INLINE;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	if (!cbcmn__pause_set(NULL)) {
		t_destroy(rt);
		skip(); /* no pause points in this build */
	}
	memset(&st, 0, sizeof(st));
	st.rt = rt;
	st.timed = timed;
	cbcmn__pause_set(st_pause);
	int64_t res;
	int rc = cbcmn_runtime_run(rt, st_root, NULL, &res);
	cbcmn__pause_set(NULL);
	uint64_t fails = cbcmn__fault_fails(CBCMN__F_MALLOC);
	cbcmn__fault_disarm_all();
	assert_int_equal(rc, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&st.rearms) > 0, 1); /* the window was held */
	if (timed)
		assert_int_equal(fails, 1); /* the timer could not be armed */
	assert_int_equal(atomic_load(&st.ended), 2);
	assert_true(atomic_load(&st.cancelled)); /* not -ENOMEM: the claim was first */
	t_destroy(rt);
}

static void test_a_stale_cancellers_claim_of_a_rearmed_receive_wakes_it(void **state)
{
	(void)state;
	stale_run(false);
}

/* The same, the receive's timer failing to arm (-ENOMEM) after the claim:
 * the receive takes the claim's wake and ends cancelled (mb_block()). */
static void test_a_stale_cancellers_claim_beats_a_receives_failed_timer(void **state)
{
	(void)state;
	stale_run(true);
}

/* ---- a receive that waits for ever, ended by cancellation --------------- */

/* Receivers on executor 1, half waiting for ever (their wait parked in the
 * receive's own frame, mb_park()), half with a timeout of an hour
 * (mb_block()): cancelled, each receive returns CBCMN_ECANCELED and takes
 * its wait back out of its slot, uncounted, while the actor lives on; a
 * message sent to it then goes into its mailbox (taken, try_send 0), not
 * into the receive's buffer it has left (docs/ACTORS.md, "The resume's lines"). */
enum { FC_N = 8 };

struct forever_cancel {
	cbcmn_actor_ref a[FC_N];
	_Atomic long waiting, ended, wrong;
	_Atomic int go;
	cbcmn_executor_stats mid[2];
};

struct fc_actor {
	struct forever_cancel *f;
	int i;
};

static int64_t fc_receiver(cbcmn_cx *cx, void *arg)
{
	struct fc_actor *me = arg;
	struct forever_cancel *f = me->f;
	cbcmn_actor_msg m = msg(0, 7, 7);
	atomic_fetch_add(&f->waiting, 1);
	int rc = cbcmn_actor_receive(cx, &m, me->i % 2 ? 3600ull * 1000000000ull
						   : CBCMN_ACTOR_FOREVER);
	/* Untouched by anyone after the cancellation: nothing was sent yet. */
	if (rc != CBCMN_ECANCELED || m.type != 0 || m.body.u64[0] != 7)
		atomic_fetch_add(&f->wrong, 1);
	atomic_fetch_add(&f->ended, 1);
	/* Cancelled: a sleep returns at once, so spin on yields until the
	 * test has sent to us and read the stats. */
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&f->go) && t_now_ns() < end)
		cbcmn_yield(cx);
	/* The message sent after the cancellation went to the mailbox,
	 * not into this buffer, which the receive has left. */
	if (m.type != 0 || m.body.u64[0] != 7)
		atomic_fetch_add(&f->wrong, 1);
	return 0;
}

static int64_t forever_cancel_main(cbcmn_cx *cx, void *arg)
{
	struct forever_cancel *f = arg;
	cbcmn_nursery *n;
	struct fc_actor mem[FC_N];
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts on1 = {.placement = CBCMN_PLACE_PINNED, .shard = 1};
	for (int i = 0; i < FC_N; i++) {
		mem[i] = (struct fc_actor){f, i};
		TASK_CHECK(cbcmn_actor_spawn(cx, n, fc_receiver, &mem[i], &on1, &f->a[i]) == 0);
	}
	sleep_until(cx, &f->waiting, FC_N);
	/* Until all of them are parked in their receive. */
	uint64_t end = t_now_ns() + T_STALL_NS;
	cbcmn_stats ss;
	do {
		cbcmn_sleep(cx, 1000000);
		TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &ss, f->mid, 2) == 0);
	} while (f->mid[1].actors_receiving < FC_N && t_now_ns() < end);
	/* The loop's bound is a hang guard: cancelled before they parked,
	 * the receives would end at their entry, and test nothing. */
	TASK_CHECK(f->mid[1].actors_receiving >= FC_N);
	TASK_CHECK(cbcmn_nursery_cancel(n) == 0);
	sleep_until(cx, &f->ended, FC_N);
	for (int i = 0; i < FC_N; i++) {
		cbcmn_actor_msg m = msg(M_DATA, (uint64_t)i, 0);
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, f->a[i], &m) == 0);
	}
	TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &ss, f->mid, 2) == 0);
	atomic_store(&f->go, 1);
	cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_a_forever_receive_cancelled_leaves_its_slot(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct forever_cancel f = {0};
	t_run(rt, forever_cancel_main, &f, 0);
	print_message("ended %ld wrong %ld receiving %llu\n", atomic_load(&f.ended),
		      atomic_load(&f.wrong), (unsigned long long)f.mid[1].actors_receiving);
	assert_int_equal(atomic_load(&f.ended), FC_N);
	assert_int_equal(atomic_load(&f.wrong), 0);
	assert_int_equal(f.mid[1].actors_receiving, 0);
	t_destroy(rt);
}

/* The same receive in an actor run inline on its nursery's awaiter, which
 * keeps no record for it: its wait is in recv_block_stack()'s frame.
 * Cancelled, it must take that wait back out of its slot, or a later send
 * claims the dead frame's wait (zeroed here: WAITING, no buffer) and writes
 * through it.  The lasting record's test above cannot tell: a stale
 * pointer to it only meets its own cancelled state. */
struct fc_inline {
	cbcmn_runtime *rt;
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	_Atomic int spawned, ended, go;
	int rc, send_rc;
	uint64_t inline_runs, receiving;
	uint64_t receiving_at_cancel; /* the receive was parked when cancelled */
};

static __attribute__((noinline)) void clobber_below(void)
{
	char z[4096];
	memset(z, 0, sizeof(z)); /* where the receive's frames were */
	__asm__ volatile("" : : "r"(z) : "memory");
}

static int64_t fci_actor(cbcmn_cx *cx, void *arg)
{
	struct fc_inline *f = arg;
	cbcmn_actor_msg m = msg(0, 7, 7);
	f->rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
	clobber_below();
	atomic_store(&f->ended, 1);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&f->go) && t_now_ns() < end)
		cbcmn_yield(cx);
	return 0;
}

static int64_t fci_main(cbcmn_cx *cx, void *arg)
{
	struct fc_inline *f = arg;
	TASK_CHECK(open_n(cx, &f->n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, f->n, fci_actor, f, NULL, &f->a) == 0);
	atomic_store(&f->spawned, 1);
	cbcmn_nursery_await_all(cx, f->n); /* runs it here, on this stack */
	return 0;
}

static void *fci_thread(void *arg)
{
	struct fc_inline *f = arg;
	cbcmn_stats ss;
	cbcmn_executor_stats per[1];
	uint64_t end = t_now_ns() + T_STALL_NS;
	do {
		usleep(1000);
		cbcmn_stats_snapshot(f->rt, &ss, per, 1);
	} while ((!atomic_load(&f->spawned) || per[0].actors_receiving < 1) && t_now_ns() < end);
	f->inline_runs = per[0].inline_runs;
	f->receiving_at_cancel = per[0].actors_receiving;
	cbcmn_nursery_cancel(f->n);
	while (!atomic_load(&f->ended) && t_now_ns() < end)
		usleep(1000);
	cbcmn_actor_msg m = msg(M_DATA, 1, 0);
	f->send_rc = cbcmn_actor_try_send(f->rt, NULL, f->a, &m);
	cbcmn_stats_snapshot(f->rt, &ss, per, 1);
	f->receiving = per[0].actors_receiving;
	atomic_store(&f->go, 1);
	return NULL;
}

static void test_an_inline_forever_receive_cancelled_leaves_its_slot(void **state)
{
	(void)state;
	struct fc_inline f = {.rt = t_runtime(1), .rc = 12345};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, fci_thread, &f), 0);
	t_run(f.rt, fci_main, &f, 0);
	pthread_join(th, NULL);
	assert_true(f.inline_runs >= 1); /* it ran inline: no record of its own */
	assert_true(f.receiving_at_cancel >= 1); /* cancelled in its receive, not before */
	assert_int_equal(f.rc, CBCMN_ECANCELED);
	assert_int_equal(f.send_rc, 0); /* into the mailbox */
	assert_int_equal(f.receiving, 0);
	t_destroy(f.rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_token_round_pinned_ring_every_hop_once),
		cmocka_unit_test(test_token_round_unpinned_ring_every_hop_once),
		cmocka_unit_test(test_receiver_stopped_as_the_token_comes_pinned),
		cmocka_unit_test(test_receiver_stopped_as_the_token_comes_unpinned),
		cmocka_unit_test(test_receive_timeouts_racing_sends_lose_nothing),
		cmocka_unit_test(test_unpinned_receiver_follows_its_messages_pinned_stays),
		cmocka_unit_test(test_per_sender_order_holds_across_the_follow_move),
		cmocka_unit_test(test_ping_pong_beside_a_computing_task_lets_it_run_unpinned),
		cmocka_unit_test(test_ping_pong_beside_a_computing_task_lets_it_run_pinned),
		cmocka_unit_test(test_a_direct_hop_is_one_pick_unpinned),
		cmocka_unit_test(test_a_direct_hop_is_one_pick_pinned),
		cmocka_unit_test(test_wakes_racing_cancellation_run_each_receiver_once),
		cmocka_unit_test(test_late_cancellers_claim_only_a_cancelled_receivers_record),
		T_WATCHED_TEST(test_a_following_handler_actors_host_is_kicked),
		T_WATCHED_TEST(test_a_stale_cancellers_claim_of_a_rearmed_receive_wakes_it),
		T_WATCHED_TEST(test_a_stale_cancellers_claim_beats_a_receives_failed_timer),
		T_WATCHED_TEST(test_a_forever_receive_cancelled_leaves_its_slot),
		T_WATCHED_TEST(test_an_inline_forever_receive_cancelled_leaves_its_slot),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
