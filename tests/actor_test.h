/* actor_test.h: what the actor test suites share: messages, and the
 * per-sender order test's senders (four stealable tasks and a thread),
 * receiver check and verdict, for fiber and handler actors alike. */
#ifndef CBCMN_ACTOR_TEST_H
#define CBCMN_ACTOR_TEST_H

#include "helpers.h"

#include <pthread.h>
#include <stdatomic.h>

#include "cbcmn_actor.h"

#define STRESS(n) ((T_ASAN || T_TSAN) ? (n) / 5 : (n))

enum { M_DATA = 1, M_QUIT = 2 };

static inline cbcmn_actor_msg msg(uint32_t type, uint64_t a, uint64_t b)
{
	cbcmn_actor_msg m = {.type = type};
	m.body.u64[0] = a;
	m.body.u64[1] = b;
	return m;
}

static inline int64_t open_n(cbcmn_cx *cx, cbcmn_nursery **n)
{
	return cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, n);
}

/* The calling task sends a the messages (M_DATA, tag, i) for i from 0 to
 * n - 1, each of which must be taken. */
static inline void send_n(cbcmn_cx *cx, cbcmn_actor_ref a, uint64_t tag, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		cbcmn_actor_msg m = msg(M_DATA, tag, i);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, a, &m) == 0);
	}
}

/* Sleeps until *count reaches want, at most T_STALL_NS (the scheduler
 * loop runs what is queued meanwhile), or until the caller is cancelled:
 * its sleep would return at once, as in wait_for_go(). */
static inline void sleep_until(cbcmn_cx *cx, _Atomic long *count, long want)
{
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(count) < want && t_now_ns() < end && !cbcmn_cx_cancelled(cx))
		cbcmn_sleep(cx, 1000000);
}

/* Spins until *flag is set, at most T_STALL_NS: a handler's wait (it
 * must not park) for its sender to have sent all a halt leaves to drop,
 * which a send after the halt would find gone (-ESRCH). */
static inline void spin_until_set(_Atomic int *flag)
{
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(flag) && t_now_ns() < end)
		;
}

/* Sleeps until *go is set, at most T_STALL_NS, or until the victim is
 * stopped or cancelled: a victim's wait for the test to let it end.  A
 * cancelled task's sleep returns at once, so looping on it would spin,
 * never parking, and hold its executor from whatever else is queued
 * there (the stopping test's own task, 20 s: test_actor_drop). */
static inline void wait_for_go(cbcmn_cx *cx, _Atomic int *go)
{
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(go) && t_now_ns() < end && !cbcmn_cx_cancelled(cx))
		cbcmn_sleep(cx, 100000);
}

/* Fills actor v (of nursery n, on one executor) with msgs messages,
 * cancels n before v starts, and sleeps while the scheduler loop ends v
 * (until *drops reaches msgs); then n's await_all. */
static inline int64_t cancel_for_the_loop(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_ref v,
					  uint64_t msgs, _Atomic long *drops)
{
	send_n(cx, v, 0, msgs);
	TASK_CHECK(cbcmn_nursery_cancel(n) == 0);
	sleep_until(cx, drops, (long)msgs);
	return cbcmn_nursery_await_all(cx, n);
}

/* ---- a watcher's DOWNs ---- */

/* What a watcher received until nothing came for 200 ms. */
struct downs {
	long n;               /* DOWNs of its monitor */
	int64_t reason;       /* the last one's */
	uint64_t undelivered; /* the last one's */
	long before, after;   /* other messages, before the first DOWN and after */
	long stray;           /* DOWNs of other monitors, and EXITs */
};

/* The calling actor receives until nothing came for 200 ms (the first
 * wait: up to T_STALL_NS), sorting what comes in *d: monitor id's DOWNs,
 * other messages before and after the first one. */
static inline void downs_collect(cbcmn_cx *cx, uint64_t id, struct downs *d)
{
	*d = (struct downs){0};
	cbcmn_actor_msg m;
	for (uint64_t wait = T_STALL_NS; cbcmn_actor_receive(cx, &m, wait) == 0;
	     wait = 200000000ull) {
		if (m.type == CBCMN_ACTOR_DOWN && m.body.down.monitor == id) {
			d->n++;
			d->reason = m.body.down.reason;
			d->undelivered = m.body.down.undelivered;
		} else if (m.type >= CBCMN_ACTOR_SYS) {
			d->stray++;
		} else if (d->n) {
			d->after++;
		} else {
			d->before++;
		}
	}
}

/* A watcher's end: only monitor id's DOWNs may come (in *got), then n
 * (if any) is awaited. */
static inline int64_t downs_only(cbcmn_cx *cx, uint64_t id, struct downs *got, cbcmn_nursery *n)
{
	downs_collect(cx, id, got);
	TASK_CHECK(got->before + got->after + got->stray == 0);
	if (n)
		cbcmn_nursery_await_all(cx, n);
	return 0;
}

/* A halt's drop that sends on: each message left goes to the watcher
 * `to`, sent with cx (the halting actor's own, or its host's); and what
 * the watcher then received. */
struct fwd {
	cbcmn_cx *cx;
	cbcmn_actor_ref to;
	_Atomic int ready, spinning, go;
	long sent;
	struct downs got;
};

static inline void fwd_drop(void *state, const cbcmn_actor_msg *m)
{
	struct fwd *d = state;
	if (cbcmn_actor_try_send(NULL, d->cx, d->to, m) == 0)
		d->sent++;
}

/* The watcher's start: it is the drop's receiver, *n open, and the
 * options of an actor with fwd_drop pinned to executor 1. */
static inline cbcmn_actor_opts fwd_begin(cbcmn_cx *cx, struct fwd *d, cbcmn_nursery **n)
{
	d->to = cbcmn_actor_self(cx);
	TASK_CHECK(open_n(cx, n) == 0);
	return (cbcmn_actor_opts){.drop = fwd_drop, .placement = CBCMN_PLACE_PINNED, .shard = 1};
}

/* Runs watcher (an actor: it may monitor) with arg, pinned to executor
 * 0, and awaits it: the main task of a test whose watcher sits on 0. */
static inline int64_t watcher_on_0(cbcmn_cx *cx, cbcmn_actor_fn watcher, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	cbcmn_actor_ref w;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, watcher, arg, &o, &w) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* ---- order per sender, nothing lost, nothing twice ---- */

#define NSEND 4

struct order {
	cbcmn_actor_ref a;
	long per_sender;
	uint64_t next[NSEND + 1]; /* the next sequence number expected from each */
	_Atomic long got, bad_order;
	_Atomic int sender_ids;
	/* Spawns the receiver into n, its reference in o->a. */
	int (*spawn)(cbcmn_cx *cx, cbcmn_nursery *n, struct order *o);
};

/* The receiver's check of one message: each sender's numbers must arrive
 * as 0, 1, 2...: a loss, a duplicate or a swap breaks it.  True once
 * every sender's last message came. */
static inline bool order_take(struct order *o, const cbcmn_actor_msg *m)
{
	uint64_t s = m->body.u64[0], seq = m->body.u64[1];
	if (m->type != M_DATA || s > NSEND || seq != o->next[s])
		atomic_fetch_add(&o->bad_order, 1);
	else
		o->next[s]++;
	return atomic_fetch_add(&o->got, 1) + 1 == (NSEND + 1) * o->per_sender;
}

static inline int64_t order_sender(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	uint64_t id = (uint64_t)atomic_fetch_add(&o->sender_ids, 1);
	for (long i = 0; i < o->per_sender; i++) {
		cbcmn_actor_msg m = msg(M_DATA, id, (uint64_t)i);
		int rc = cbcmn_actor_send(NULL, cx, o->a, &m);
		TASK_CHECK(rc == 0);
		if (rc)
			return rc;
		if (i % 7 == 0)
			cbcmn_yield(cx); /* move around: stealable, two executors */
	}
	return 0;
}

static inline void *order_thread(void *arg)
{
	void **p = arg;
	struct order *o = p[0];
	cbcmn_runtime *rt = p[1];
	for (long i = 0; i < o->per_sender; i++) {
		cbcmn_actor_msg m = msg(M_DATA, NSEND, (uint64_t)i);
		int rc = cbcmn_actor_send(rt, NULL, o->a, &m);
		TASK_CHECK(rc == 0);
		if (rc)
			break;
	}
	return NULL;
}

static inline int64_t order_main(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(o->spawn(cx, n, o) == 0);
	/* A plain thread sends too: sender NSEND. */
	void *targ[2] = {o, cbcmn_cx_runtime(cx)};
	pthread_t th;
	TASK_CHECK(pthread_create(&th, NULL, order_thread, targ) == 0);
	for (int i = 0; i < NSEND; i++)
		TASK_CHECK(cbcmn_nursery_spawn_stealable(cx, n, order_sender, o, NULL) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	pthread_join(th, NULL); /* done by now: the actor had all its messages */
	return r;
}

/* Run the order test on 2 executors with the receiver spawn gives. */
static inline void order_run(int (*spawn)(cbcmn_cx *, cbcmn_nursery *, struct order *))
{
	cbcmn_runtime *rt = t_runtime(2);
	struct order o = {.per_sender = STRESS(3000), .spawn = spawn};
	t_run(rt, order_main, &o, 0);
	assert_int_equal(atomic_load(&o.bad_order), 0);
	assert_int_equal(atomic_load(&o.got), (NSEND + 1) * o.per_sender);
	for (int s = 0; s <= NSEND; s++)
		assert_int_equal(o.next[s], (uint64_t)o.per_sender);
	t_destroy(rt);
}

/* ---- a sender and its receiver on two quiet executors ----
 *
 * A quiet runtime's config: two executors that park at once
 * (CBCMN_SPIN_NONE) and a stall monitor that sees no stall within a test
 * (a minute), or none: neither a spinner nor the monitor stands in for
 * the rule a test checks. */
static inline void quiet_config(cbcmn_config *cfg, bool watched)
{
	cbcmn_config_init(cfg);
	cfg->workers = 2;
	cfg->spin_ns = CBCMN_SPIN_NONE;
	cfg->stall_ns = watched ? 60000000000ull : CBCMN_STALL_OFF;
}

/* The executors in state now (cbcmn_exec_state) but the caller's. */
static inline uint32_t others_in(cbcmn_cx *cx, uint32_t state)
{
	enum { MAX = 8 };
	cbcmn_stats s;
	cbcmn_executor_stats per[MAX];
	TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &s, per, MAX) == 0);
	uint32_t me = cbcmn_cx_executor(cx), n = 0;
	for (uint32_t i = 0; i < s.executors && i < MAX; i++)
		n += i != me && per[i].state == state;
	return n;
}

/* Spins until no executor but the caller's is searching or running: the
 * others parked (or stopped), with nothing to take.  No runtime call
 * meanwhile (a sleep's wake would notify them again), at most
 * T_STALL_NS, a hang guard: a loaded host may keep an executor's thread
 * off the CPU before it parks far longer than any fixed sleep.  Out of
 * time, a task check fails: a searching executor could take the receiver
 * whatever the rule under test does (the test would pass for nothing). */
static inline void others_parked(cbcmn_cx *cx)
{
	uint64_t end = t_now_ns() + T_STALL_NS;
	bool busy;
	while ((busy = others_in(cx, CBCMN_EXEC_RUNNING) || others_in(cx, CBCMN_EXEC_SEARCHING)) &&
	       t_now_ns() < end)
		;
	TASK_CHECK(!busy);
}

/* Two actors, A the sender and B the receiver, spawned on one executor:
 * B first, waiting in its receive (its home parks) before A starts; A
 * with a_opts if set.  First in the structs of the tests that use it
 * (their address is its). */
struct pair {
	cbcmn_actor_fn a_fn, b_fn;
	cbcmn_actor_ref a, b;
	const cbcmn_actor_opts *a_opts;
	_Atomic int a_running;  /* A sent, and runs on (set by A's own code) */
	_Atomic int b_ran;      /* B took its message */
	_Atomic int b_beside_a; /* ... while A was running: on the other executor */
};

/* A's send to B, A running on after it: once the other executor parked
 * again with nothing to take (A's spawn notified it; searching, it could
 * take B whatever the rule under test does), and 5 ms on. */
static inline void pair_a_sends(cbcmn_cx *cx, struct pair *p)
{
	others_parked(cx);
	for (uint64_t t = t_now_ns(); t_now_ns() - t < 5000000;)
		;
	atomic_store(&p->a_running, 1);
	cbcmn_actor_msg m = msg(M_DATA, 1, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, p->b, &m) == 0);
}

/* B's receive of A's message, noting whether A was running then. */
static inline void pair_b_receives(cbcmn_cx *cx, struct pair *p)
{
	cbcmn_actor_msg m;
	TASK_CHECK(cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0);
	if (atomic_load(&p->a_running))
		atomic_store(&p->b_beside_a, 1);
	atomic_store(&p->b_ran, 1);
}

static inline int64_t pair_root(cbcmn_cx *cx, void *arg)
{
	struct pair *p = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 2, .placement = CBCMN_PLACE_LOCAL};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, p->b_fn, p, &ao, &p->b) == 0);
	cbcmn_stats s = {0};
	for (uint64_t end = t_now_ns() + T_STALL_NS; !s.total.actors_receiving && t_now_ns() < end;) {
		cbcmn_sleep(cx, 1000000);
		TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &s, NULL, 0) == 0);
	}
	TASK_CHECK(s.total.actors_receiving != 0); /* else A could find B not yet waiting */
	TASK_CHECK(cbcmn_actor_spawn(cx, n, p->a_fn, p, p->a_opts ? p->a_opts : &ao, &p->a) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* ---- a ring of actors passing a token ---- */

/* One actor of a ring: its test's ring and its place in it. */
struct ring_place {
	void *r;
	uint32_t i;
};

/* Spawns into n the len actors of ring r, fn(&at[k]) each, with a
 * mailbox of cap and placement where (CBCMN_PLACE_*); refs[k]: theirs. */
static inline void ring_spawn_cap(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_fn fn, void *r,
				  struct ring_place *at, cbcmn_actor_ref *refs, uint32_t len,
				  uint32_t where, uint32_t cap)
{
	cbcmn_actor_opts ao = {.mailbox_cap = cap, .placement = where};
	for (uint32_t k = 0; k < len; k++) {
		at[k] = (struct ring_place){r, k};
		TASK_CHECK(cbcmn_actor_spawn(cx, n, fn, &at[k], &ao, &refs[k]) == 0);
	}
}

/* The same with a mailbox of 2. */
static inline void ring_spawn(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_fn fn, void *r,
			      struct ring_place *at, cbcmn_actor_ref *refs, uint32_t len,
			      uint32_t where)
{
	ring_spawn_cap(cx, n, fn, r, at, refs, len, where, 2);
}

/* ---- a ring of actors passing tokens until cancelled ---- */

#define TOK_RING_MAX 64

struct tok_ring {
	cbcmn_actor_ref refs[TOK_RING_MAX];
	struct ring_place at[TOK_RING_MAX];
	uint32_t len;
	_Atomic long hops, bad;
};

/* A member of a token ring: passes each message it takes (type 1, else
 * counted bad) to the next, until its receive or send is cancelled (or
 * the send finds its neighbour ended first: -ESRCH); any other end is
 * counted bad. */
static inline int64_t tok_ring_actor(cbcmn_cx *cx, void *arg)
{
	struct ring_place *at = arg;
	struct tok_ring *r = at->r;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0) {
		if (m.type != 1)
			atomic_fetch_add(&r->bad, 1);
		atomic_fetch_add(&r->hops, 1);
		if ((rc = cbcmn_actor_send(NULL, cx, r->refs[(at->i + 1) % r->len], &m)) != 0)
			break;
	}
	if (rc != CBCMN_ECANCELED && rc != -ESRCH)
		atomic_fetch_add(&r->bad, 1);
	return 0;
}

/* Spawns into n the len members of token ring r (mailboxes of cap, the
 * default placement). */
static inline void tok_ring_spawn(cbcmn_cx *cx, cbcmn_nursery *n, struct tok_ring *r, uint32_t len,
				  uint32_t cap)
{
	TASK_CHECK(len <= TOK_RING_MAX);
	r->len = len;
	ring_spawn_cap(cx, n, tok_ring_actor, r, r->at, r->refs, len, CBCMN_PLACE_LOCAL, cap);
}

#endif
