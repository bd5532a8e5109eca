/* test_actor_sched: actors on the executor's wheel (lib/actor_sched.c):
 * actors and plain tasks share an executor both ways, the wheel's load in
 * the statistics, and an actor that only checkpoints is ended like any
 * task.  Order and progress only, never speed. */
#include "helpers.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cbcmn_actor.h"
#include "../lib/fault.h" /* cbcmn__pause_set() */

#define HOGS 8
#define PLAIN_ITERS 200

enum { M_PING = 1, M_QUIT = 2 };

static int64_t open_n(cbcmn_cx *cx, cbcmn_nursery **n)
{
	return cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, n);
}

/* The wheel load of executor 0, as the snapshot reports it. */
static uint64_t load0(cbcmn_runtime *rt)
{
	cbcmn_stats st;
	cbcmn_executor_stats per[1];
	if (cbcmn_stats_snapshot(rt, &st, per, 1) != 0)
		return 0;
	return per[0].actor_load_milli;
}

/* ---- busy actors do not starve a nursery task ---- */

struct share {
	cbcmn_runtime *rt;
	_Atomic int stop, hogs_running, hogs_ended;
	_Atomic long hog_iters[HOGS];
	_Atomic int hog_ids;
	_Atomic long plain_iters, worker_iters;
	_Atomic int pair_done;
	cbcmn_actor_ref ponger;
};

/* Never receives, never blocks: only checkpoints (each fairness yield puts
 * it N segments forward on the wheel). */
static int64_t hog(cbcmn_cx *cx, void *arg)
{
	struct share *s = arg;
	int id = atomic_fetch_add(&s->hog_ids, 1);
	atomic_fetch_add(&s->hogs_running, 1);
	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		CBCMN_CHECKPOINT(cx);
		atomic_fetch_add_explicit(&s->hog_iters[id], 1, memory_order_relaxed);
	}
	atomic_fetch_add(&s->hogs_ended, 1);
	return 0;
}

static int64_t plain_counter(cbcmn_cx *cx, void *arg)
{
	struct share *s = arg;
	for (int i = 0; i < PLAIN_ITERS; i++) {
		TASK_CHECK(cbcmn_yield(cx) == 0);
		atomic_fetch_add(&s->plain_iters, 1);
	}
	return 0;
}

/* Open a nursery and spawn HOGS actors fn(arg) in it (their references to
 * refs, if given); NULL if any step failed. */
static cbcmn_nursery *spawn_hogs(cbcmn_cx *cx, cbcmn_actor_fn fn, void *arg,
				 cbcmn_actor_ref *refs)
{
	cbcmn_nursery *n;
	cbcmn_actor_ref r;
	if (open_n(cx, &n) != 0)
		return NULL;
	for (int i = 0; i < HOGS; i++)
		if (cbcmn_actor_spawn(cx, n, fn, arg, NULL, refs ? &refs[i] : &r) != 0)
			return NULL;
	return n;
}

static int64_t hogs_main(cbcmn_cx *cx, void *arg)
{
	struct share *s = arg;
	cbcmn_nursery *n = spawn_hogs(cx, hog, s, NULL);
	if (!n)
		return -1; /* spawn_hogs() failed */
	while (atomic_load(&s->hogs_running) < HOGS)
		cbcmn_yield(cx);
	/* Every hog is on the wheel now: a plain task must still get its
	 * turns (a starved one hangs here: the watchdog names the test). */
	cbcmn_task *h;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, plain_counter, s, &h) == 0);
	TASK_CHECK(cbcmn_task_join(cx, h, NULL) == 0);
	/* It completed every iteration while all the hogs still ran. */
	TASK_CHECK(atomic_load(&s->plain_iters) == PLAIN_ITERS);
	TASK_CHECK(atomic_load(&s->hogs_ended) == 0);
	/* The wheel turned: its load is published (a turn takes 64 segments:
	 * the hogs keep it turning until it shows). */
	while (load0(s->rt) == 0)
		cbcmn_yield(cx);
	atomic_store(&s->stop, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	/* Each hog ran more than one quantum: they took turns too. */
	for (int i = 0; i < HOGS; i++)
		TASK_CHECK(atomic_load(&s->hog_iters[i]) > 1024);
	return 0;
}

static void test_busy_actors_do_not_starve_a_nursery_task(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct share s = {.rt = rt};
	t_run(rt, hogs_main, &s, 0);
	assert_int_equal(atomic_load(&s.hogs_ended), HOGS);
	t_destroy(rt);
}

/* ---- busy nursery tasks do not starve actors ---- */

static int64_t ponger(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type == M_PING) {
		cbcmn_actor_msg back = {.type = M_PING, .body.u64 = {m.body.u64[0]}};
		if ((rc = cbcmn_actor_send(NULL, cx, m.from, &back)) != 0)
			return rc;
	}
	return rc;
}

#define ROUNDS 300

/* ROUNDS round trips with the ponger, each reply checked. */
static int64_t pinger(cbcmn_cx *cx, void *arg)
{
	struct share *s = arg;
	for (uint64_t i = 0; i < ROUNDS; i++) {
		cbcmn_actor_msg m = {.type = M_PING, .body.u64 = {i}};
		int rc = cbcmn_actor_send(NULL, cx, s->ponger, &m);
		if (rc)
			return rc;
		if ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) != 0)
			return rc;
		if (m.body.u64[0] != i)
			return -EPROTO;
	}
	cbcmn_actor_msg q = {.type = M_QUIT};
	atomic_store(&s->pair_done, 1);
	return cbcmn_actor_send(NULL, cx, s->ponger, &q);
}

/* Keeps the executor busy until the actors are done. */
static int64_t plain_busy(cbcmn_cx *cx, void *arg)
{
	struct share *s = arg;
	while (!atomic_load(&s->pair_done)) {
		CBCMN_CHECKPOINT(cx);
		atomic_fetch_add_explicit(&s->worker_iters, 1, memory_order_relaxed);
	}
	return 0;
}

static int64_t pair_main(cbcmn_cx *cx, void *arg)
{
	struct share *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	for (int i = 0; i < HOGS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, plain_busy, s, NULL) == 0);
	while (atomic_load(&s->worker_iters) < 4096) /* the workers are under way */
		cbcmn_yield(cx);
	cbcmn_actor_ref p;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, ponger, s, NULL, &s->ponger) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, pinger, s, NULL, &p) == 0);
	/* The workers stop only when the pair is done: starved actors hang
	 * here (the watchdog names the test). */
	return cbcmn_nursery_await_all(cx, n);
}

static void test_busy_nursery_tasks_do_not_starve_actors(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct share s = {.rt = rt};
	t_run(rt, pair_main, &s, 0);
	assert_int_equal(atomic_load(&s.pair_done), 1);
	t_destroy(rt);
}

/* ---- the load decays once the wheel is empty ---- */

static int64_t hogs_then_idle(cbcmn_cx *cx, void *arg)
{
	struct share *s = arg;
	cbcmn_nursery *n = spawn_hogs(cx, hog, s, NULL);
	if (!n)
		return -1; /* spawn_hogs() failed */
	while (load0(s->rt) == 0)
		cbcmn_yield(cx);
	atomic_store(&s->stop, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static void test_wheel_load_published_then_decays_when_empty(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct share s = {.rt = rt};
	t_run(rt, hogs_then_idle, &s, 0);
	uint64_t busy = load0(rt);
	/* No actor left: readers decay it, 7/8 a nominal turn (a turn is
	 * 64 quanta: well under a second even under a sanitizer). */
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (load0(rt) * 4 > busy && t_now_ns() < end)
		usleep(10000);
	assert_true(load0(rt) * 4 <= busy);
	t_destroy(rt);
}

/* ---- an actor that only checkpoints is cancelled like any task ---- */

struct downs {
	_Atomic int cancelled, other, ready;
	cbcmn_actor_ref hogs[HOGS];
	struct share s;
};

/* Monitors every hog, then counts their DOWN reasons. */
static int64_t down_counter(cbcmn_cx *cx, void *arg)
{
	struct downs *d = arg;
	uint64_t id;
	for (int i = 0; i < HOGS; i++)
		if (cbcmn_actor_monitor(cx, d->hogs[i], &id) != 0)
			return -1;
	atomic_store(&d->ready, 1);
	for (int got = 0; got < HOGS; got++) {
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		if (m.type == CBCMN_ACTOR_DOWN && m.body.down.reason == CBCMN_ECANCELED)
			atomic_fetch_add(&d->cancelled, 1);
		else
			atomic_fetch_add(&d->other, 1);
	}
	return 0;
}

static int64_t cancel_main(cbcmn_cx *cx, void *arg)
{
	struct downs *d = arg;
	cbcmn_nursery *outer, *inner;
	TASK_CHECK(open_n(cx, &outer) == 0);
	if (!(inner = spawn_hogs(cx, hog, &d->s, d->hogs)))
		return -1;
	cbcmn_actor_ref w;
	TASK_CHECK(cbcmn_actor_spawn(cx, outer, down_counter, d, NULL, &w) == 0);
	while (atomic_load(&d->s.hogs_running) < HOGS || !atomic_load(&d->ready))
		cbcmn_yield(cx);
	/* The hogs sit on the wheel, up to N segments forward: each is
	 * ended at its next checkpoint all the same. */
	TASK_CHECK(cbcmn_nursery_cancel(inner) == 0);
	int64_t rc = cbcmn_nursery_await_all(cx, inner);
	TASK_CHECK(rc == CBCMN_ECANCELED || rc == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, outer) == 0);
	return 0;
}

static void test_checkpointing_actors_on_the_wheel_are_cancelled(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct downs d = {.s.rt = rt};
	t_run(rt, cancel_main, &d, 0);
	assert_int_equal(atomic_load(&d.cancelled), HOGS);
	assert_int_equal(atomic_load(&d.other), 0);
	assert_int_equal(atomic_load(&d.s.hogs_ended), 0); /* none left its loop */
	t_destroy(rt);
}


/* ---- spawned actors stay stealable until an executor picks them ---- */

struct steal {
	_Atomic int started, bad;
	_Atomic int stop;
};

/* The first to start spins, without a checkpoint, until another actor
 * starts: only another executor can start one meanwhile, by stealing it
 * from the spawner's queue. */
static int64_t spin_until_stolen(cbcmn_cx *cx, void *arg)
{
	struct steal *st = arg;
	if (atomic_fetch_add(&st->started, 1) == 0) {
		uint64_t end = t_now_ns() + T_STALL_NS;
		while (atomic_load(&st->started) < 2)
			if (t_now_ns() > end) {
				atomic_store(&st->bad, 1); /* none was left to steal */
				break;
			}
	}
	while (!atomic_load(&st->stop))
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static int64_t steal_main(cbcmn_cx *cx, void *arg)
{
	struct steal *st = arg;
	cbcmn_nursery *n = spawn_hogs(cx, spin_until_stolen, st, NULL);
	if (!n)
		return -1; /* spawn_hogs() failed */
	while (atomic_load(&st->started) < 2 && !atomic_load(&st->bad))
		cbcmn_yield(cx);
	atomic_store(&st->stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_spawned_actors_stay_stealable_until_picked(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct steal st = {0};
	t_run(rt, steal_main, &st, 0);
	assert_int_equal(atomic_load(&st.bad), 0);
	t_destroy(rt);
}

/* ---- migration: an overloaded executor sheds actors to an idle one ---- */

#define SHED_HOGS 32 /* 4 runs a turn each: twice the nominal turn */

struct shed {
	_Atomic int started, stop, spinning, on1;
};

static int64_t shed_hog(cbcmn_cx *cx, void *arg)
{
	struct shed *sh = arg;
	atomic_fetch_add(&sh->started, 1);
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		CBCMN_CHECKPOINT(cx);
		if (cbcmn_cx_executor(cx) == 1)
			atomic_store_explicit(&sh->on1, 1, memory_order_relaxed);
	}
	return 0;
}

/* Holds executor 1 (no checkpoint: it steals nothing meanwhile) until
 * every hog has started on executor 0's wheel. */
static int64_t hold_exec1(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct shed *sh = arg;
	atomic_store(&sh->spinning, 1);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(&sh->started) < SHED_HOGS && t_now_ns() < end)
		;
	return 0;
}

static int64_t shed_boss(cbcmn_cx *cx, void *arg)
{
	struct shed *sh = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, hold_exec1, sh, NULL) == 0);
	while (!atomic_load(&sh->spinning))
		cbcmn_yield(cx);
	cbcmn_actor_ref r;
	for (int i = 0; i < SHED_HOGS; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, shed_hog, sh, NULL, &r) == 0);
	/* Executor 1 is free again, with no actor: only a migration puts a
	 * hog there (a hang here: none came; the watchdog names the test). */
	while (!atomic_load(&sh->on1))
		cbcmn_yield(cx);
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &st, per, 2) == 0);
	TASK_CHECK(per[0].actor_migrations > 0);
	atomic_store(&sh->stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_overloaded_executor_sheds_actors_to_an_idle_one(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct shed sh = {0};
	assert_int_equal(t_run_pinned(rt, 0, shed_boss, &sh), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&sh.started), SHED_HOGS);
	t_destroy(rt);
}

/* ---- migration: posse members stay, woken actors move, a balanced
 * runtime moves nothing, messages survive a moving receiver ---- */

/* Migrations executor id counted so far (the sender's count). */
static uint64_t migrations(cbcmn_runtime *rt, uint32_t id)
{
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	if (cbcmn_stats_snapshot(rt, &st, per, 2) != 0)
		return 0;
	return per[id].actor_migrations;
}

struct posse {
	struct shed sh;
	_Atomic int member_on1;
	int member_moved; /* a member had run on executor 1 by the third move */
};

/* A shed_hog that says when it, a posse member, ran on executor 1. */
static int64_t posse_hog(cbcmn_cx *cx, void *arg)
{
	struct posse *p = arg;
	atomic_fetch_add(&p->sh.started, 1);
	while (!atomic_load_explicit(&p->sh.stop, memory_order_relaxed)) {
		CBCMN_CHECKPOINT(cx);
		if (cbcmn_cx_executor(cx) == 1)
			atomic_store_explicit(&p->member_on1, 1, memory_order_relaxed);
	}
	return 0;
}

/* The seed's third case: an actor woken on an overloaded executor (its
 * home, where its one sender runs) moves to the idle one at a wake,
 * although it never uses a whole quantum (the first case never applies). */

struct wake3 {
	_Atomic int stop, started, hold;
	cbcmn_actor_ref r;
	uint64_t moved;
};

static int64_t wake3_hog(cbcmn_cx *cx, void *arg)
{
	struct wake3 *w = arg;
	atomic_fetch_add(&w->started, 1);
	while (!atomic_load_explicit(&w->stop, memory_order_relaxed))
		CBCMN_CHECKPOINT(cx);
	return 0;
}

/* Keeps executor 1 busy with a plain task (its wheel stays empty: load
 * 0), so that it steals nothing from executor 0: the receiver's wakes
 * all land there, and only a migration moves it. */
static int64_t wake3_hold1(cbcmn_cx *cx, void *arg)
{
	struct wake3 *w = arg;
	atomic_store(&w->hold, 1);
	while (!atomic_load_explicit(&w->stop, memory_order_relaxed))
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static int64_t wake3_receiver(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type == M_PING)
		;
	return rc;
}

static int64_t wake3_boss(cbcmn_cx *cx, void *arg)
{
	struct wake3 *w = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *nh, *nr;
	TASK_CHECK(open_n(cx, &nh) == 0);
	TASK_CHECK(open_n(cx, &nr) == 0);
	cbcmn_actor_opts pin0 = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	cbcmn_actor_ref h;
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, nh, 1, wake3_hold1, w, NULL) == 0);
	while (!atomic_load(&w->hold))
		cbcmn_sleep(cx, 1000000);
	for (int i = 0; i < SHED_HOGS; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, nh, wake3_hog, w, &pin0, &h) == 0);
	/* Overloaded before the receiver exists. */
	while (load0(rt) <= 1500)
		cbcmn_sleep(cx, 1000000);
	TASK_CHECK(cbcmn_actor_spawn(cx, nr, wake3_receiver, w, NULL, &w->r) == 0);
	/* Pinned hogs never move: every migration counted is the
	 * receiver's.  Fewer receives than a quantum (1024 checkpoints and
	 * calls): it never yields for fairness, so the first case cannot
	 * move it, only the third, at a wake. */
	for (uint64_t i = 0; i < 900 && migrations(rt, 0) + migrations(rt, 1) == 0; i++) {
		cbcmn_actor_msg m = {.type = M_PING, .body.u64 = {i}};
		TASK_CHECK(cbcmn_actor_send(NULL, cx, w->r, &m) == 0);
		cbcmn_sleep(cx, 1000000); /* the wheel warms up meanwhile (16 turns) */
	}
	w->moved = migrations(rt, 0) + migrations(rt, 1);
	cbcmn_actor_msg q = {.type = M_QUIT};
	TASK_CHECK(cbcmn_actor_send(NULL, cx, w->r, &q) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nr) == 0);
	atomic_store(&w->stop, 1);
	return cbcmn_nursery_await_all(cx, nh);
}

static void test_woken_actor_leaves_an_overloaded_executor(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct wake3 w = {0};
	assert_int_equal(t_run_pinned(rt, 0, wake3_boss, &w), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&w.started), SHED_HOGS);
	assert_true(w.moved > 0);
	t_destroy(rt);
}

/* Posse members stay while the others migrate, and stops landing while
 * actors migrate (some are in a lane, between two executors' wheels, when
 * theirs comes) end each at its next checkpoint (a stopped actor's
 * checkpoint unwinds it, as a cancelled task's), wherever it is; nothing
 * hangs or leaks.  One test for both: each needs an overloaded executor
 * shedding, the slowest part under TSan. */

static int64_t stopmig_boss(cbcmn_cx *cx, void *arg)
{
	struct posse *p = arg;
	struct shed *sh = &p->sh;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n, *nh;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(open_n(cx, &nh) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, nh, 1, hold_exec1, sh, NULL) == 0);
	while (!atomic_load(&sh->spinning))
		cbcmn_yield(cx);
	/* Three in four of them a posse: SHED_HOGS in all, as hold_exec1
	 * counts. */
	cbcmn_actor_ref r[SHED_HOGS];
	cbcmn_actor_opts member = {.posse = 7};
	for (int i = 0; i < SHED_HOGS; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, i % 4 ? posse_hog : shed_hog, i % 4 ? (void *)p : sh,
					     i % 4 ? &member : NULL, &r[i]) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nh) == 0); /* executor 1 is free */
	/* Three moves, each as likely to pick a member (3/4) if members
	 * could move (all three would miss them 1 time in 64). */
	while (migrations(rt, 0) < 3)
		cbcmn_sleep(cx, 1000000);
	p->member_moved = atomic_load(&p->member_on1);
	/* Migrations are under way: stop them all, a little apart (reason
	 * 0: a failure would cancel the siblings, fail-fast, before their
	 * own stop; they never return on their own, sh->stop stays 0). */
	for (int i = 0; i < SHED_HOGS; i++) {
		TASK_CHECK(cbcmn_actor_stop(NULL, cx, r[i], 0) == 0);
		cbcmn_sleep(cx, 200000);
	}
	return cbcmn_nursery_await_all(cx, n);
}

static void test_posse_members_stay_and_stops_end_migrating_actors(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct posse p = {0};
	assert_int_equal(t_run_pinned(rt, 0, stopmig_boss, &p), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&p.sh.started), SHED_HOGS);
	assert_int_equal(p.member_moved, 0);
	t_destroy(rt);
}

/* Alternating load: G hogs pinned to each executor compute while their
 * side is the loaded one and sleep otherwise.  A receiver that only
 * blocks (it never uses a whole quantum) follows the load to the idle
 * side at its wakes, while two pinned tasks (one per executor) and a
 * plain thread send to it through a small mailbox: every message arrives
 * once, in each sender's order. */

#define MIG_G 24     /* per side: about 1.5 nominal turns of load */
#define MIG_PHASES 3
#define MIG_SENDERS 3 /* two tasks and a thread */
/* A phase ends once the receiver ran on the idle side, or after this. */
#define MIG_PHASE_NS ((T_ASAN || T_TSAN) ? 600000000ull : 400000000ull)

struct mig {
	_Atomic int phase, stop_hogs, stop_sending, hogs_started;
	_Atomic int r_exec, r_moves;
	cbcmn_actor_ref r;
	cbcmn_runtime *rt;
	uint64_t next[MIG_SENDERS];
	_Atomic uint64_t sent[MIG_SENDERS];
	long bad, quits;
	pthread_t th;
};

struct mig_hog {
	struct mig *m;
	int side;
};

static int64_t mig_hog(cbcmn_cx *cx, void *arg)
{
	struct mig_hog *h = arg;
	struct mig *m = h->m;
	atomic_fetch_add(&m->hogs_started, 1);
	while (!atomic_load_explicit(&m->stop_hogs, memory_order_relaxed)) {
		if (atomic_load_explicit(&m->phase, memory_order_relaxed) % 2 == h->side)
			CBCMN_CHECKPOINT(cx);
		else
			cbcmn_sleep(cx, 2000000);
	}
	return 0;
}

static int64_t mig_receiver(cbcmn_cx *cx, void *arg)
{
	struct mig *m = arg;
	cbcmn_actor_msg msg;
	int last = -1;
	while (m->quits < MIG_SENDERS) {
		int rc = cbcmn_actor_receive(cx, &msg, CBCMN_ACTOR_FOREVER);
		if (rc)
			return rc;
		int e = (int)cbcmn_cx_executor(cx);
		if (e != last) {
			if (last >= 0)
				atomic_fetch_add(&m->r_moves, 1);
			atomic_store(&m->r_exec, e);
			last = e;
		}
		uint64_t s = msg.body.u64[0], seq = msg.body.u64[1];
		if (s >= MIG_SENDERS) {
			m->bad++;
		} else if (msg.type == M_QUIT) {
			m->quits++;
			if (seq != m->next[s]) /* the count it sent before QUIT */
				m->bad++;
		} else if (seq != m->next[s]++) {
			m->bad++;
		}
	}
	return 0;
}

/* Sends 0, 1, 2... as sender s until told to stop, then QUIT with the
 * count; yields now and then, so that the receiver's side keeps moving. */
static int mig_send_all(cbcmn_runtime *rt, cbcmn_cx *cx, struct mig *m, uint64_t s)
{
	uint64_t i = 0;
	while (!atomic_load(&m->stop_sending)) {
		cbcmn_actor_msg msg = {.type = M_PING, .body.u64 = {s, i}};
		int rc = cbcmn_actor_send(rt, cx, m->r, &msg);
		if (rc)
			return rc;
		i++;
		if (i % 16 == 0) {
			if (cx)
				cbcmn_sleep(cx, 200000);
			else
				usleep(200);
		}
	}
	atomic_store(&m->sent[s], i);
	cbcmn_actor_msg q = {.type = M_QUIT, .body.u64 = {s, i}};
	return cbcmn_actor_send(rt, cx, m->r, &q);
}

static int64_t mig_sender(cbcmn_cx *cx, void *arg)
{
	struct mig *m = arg;
	return mig_send_all(NULL, cx, m, cbcmn_cx_executor(cx));
}

static void *mig_thread(void *arg)
{
	struct mig *m = arg;
	TASK_CHECK(mig_send_all(m->rt, NULL, m, 2) == 0);
	return NULL;
}

static int64_t mig_boss(cbcmn_cx *cx, void *arg)
{
	struct mig *m = arg;
	cbcmn_nursery *nh, *nr;
	TASK_CHECK(open_n(cx, &nh) == 0);
	TASK_CHECK(open_n(cx, &nr) == 0);
	static struct mig_hog hogs[2 * MIG_G];
	cbcmn_actor_ref ref;
	for (int i = 0; i < 2 * MIG_G; i++) {
		hogs[i] = (struct mig_hog){.m = m, .side = i % 2};
		cbcmn_actor_opts pin = {.placement = CBCMN_PLACE_PINNED, .shard = (uint32_t)(i % 2)};
		TASK_CHECK(cbcmn_actor_spawn(cx, nh, mig_hog, &hogs[i], &pin, &ref) == 0);
	}
	cbcmn_actor_opts ro = {.mailbox_cap = 4, .placement = CBCMN_PLACE_STEALABLE_ON};
	TASK_CHECK(cbcmn_actor_spawn(cx, nr, mig_receiver, m, &ro, &m->r) == 0);
	TASK_CHECK(pthread_create(&m->th, NULL, mig_thread, m) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, nr, 0, mig_sender, m, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, nr, 1, mig_sender, m, NULL) == 0);
	/* Each phase loads the other side: the receiver follows the load. */
	for (int p = 0; p < MIG_PHASES; p++) {
		atomic_store(&m->phase, p);
		int idle_side = 1 - p % 2;
		uint64_t end = t_now_ns() + MIG_PHASE_NS;
		while (atomic_load(&m->r_exec) != idle_side && t_now_ns() < end)
			cbcmn_sleep(cx, 1000000);
	}
	atomic_store(&m->stop_sending, 1);
	/* The thread is joined by the test, not here: a join would hold
	 * this executor while the thread may wait for the receiver. */
	int64_t r = cbcmn_nursery_await_all(cx, nr);
	atomic_store(&m->stop_hogs, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nh) == 0);
	return r;
}

static void test_messages_to_a_migrating_receiver_arrive_once_in_order(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct mig m = {.rt = rt, .r_exec = -1};
	assert_int_equal(t_run_pinned(rt, 0, mig_boss, &m), 0);
	pthread_join(m.th, NULL);
	ASSERT_TASK_CHECKS();
	assert_int_equal(m.bad, 0);
	assert_int_equal(m.quits, MIG_SENDERS);
	for (int s = 0; s < MIG_SENDERS; s++)
		assert_int_equal(m.next[s], atomic_load(&m.sent[s]));
	/* It moved (by migration at its wakes, or woken where its home was
	 * idle): the messages above crossed those moves. */
	assert_true(atomic_load(&m.r_moves) >= 1);
	t_destroy(rt);
}

/* A balanced runtime: the same number of always-runnable actors on each
 * executor, above the nominal load; once settled, nothing goes back and
 * forth over BAL_WINDOW_MS.  The load is wall time a turn, so an
 * executor whose thread gets less CPU than the other's (beside a CPU hog,
 * which the scheduler shares unevenly for tens of ms at a time) is
 * overloaded, and shedding to the other is right: seen in CI, one move in
 * a window (twice).  What the hysteresis and damping forbid is the
 * thrash: moves both ways in one window, or more than a few (the rules
 * they replaced moved 2-10 to 1159 times in a window: docs/ACTORS.md
 * "Migration"; without the 3/2 and the 50 ms, 55-82, both ways).
 * Without load, the window moves nothing (printed, for the record). */

#define BAL_PER_SIDE 24
#define BAL_SETTLE_MS 300
#define BAL_WINDOW_MS 1500
/* Moves one way a window may make: a lasting CPU imbalance sheds an
 * actor per MIGRATE_GAP_TURNS once it has lasted 50 ms, and a sixth of
 * a side is far more than the one seen beside the hog. */
#define BAL_MOVES_MAX (BAL_PER_SIDE / 6)

struct bal {
	_Atomic int stop, started, release;
	cbcmn_nursery *n;
};

static int64_t bal_hog(cbcmn_cx *cx, void *arg);

/* Spawns executor 1's half there (its own deque: no lane to overflow
 * into the inject queue), and keeps executor 1 busy until all have
 * started, so that it steals none of executor 0's (an idle one steals). */
static int64_t bal_hold1(cbcmn_cx *cx, void *arg)
{
	struct bal *b = arg;
	cbcmn_actor_ref r;
	for (int i = 0; i < BAL_PER_SIDE; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, b->n, bal_hog, b, NULL, &r) == 0);
	while (!atomic_load_explicit(&b->release, memory_order_relaxed))
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static int64_t bal_hog(cbcmn_cx *cx, void *arg)
{
	struct bal *b = arg;
	atomic_fetch_add(&b->started, 1);
	while (!atomic_load_explicit(&b->stop, memory_order_relaxed))
		CBCMN_CHECKPOINT(cx);
	return 0;
}

struct bal_out {
	uint64_t settle_moves, window_moves[2]; /* by the executor that shed */
	int64_t homed[2];
};

static int64_t bal_boss(cbcmn_cx *cx, void *arg)
{
	void **p = arg;
	struct bal *b = p[0];
	struct bal_out *o = p[1];
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_ref r;
	b->n = n;
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, bal_hold1, b, NULL) == 0);
	/* Half here, half from executor 1 (bal_hold1): neither executor is
	 * idle meanwhile (this task keeps executor 0 until they are spawned,
	 * then their wheel does), so none is stolen. */
	for (int i = 0; i < BAL_PER_SIDE; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, bal_hog, b, NULL, &r) == 0);
	while (atomic_load(&b->started) < 2 * BAL_PER_SIDE)
		cbcmn_sleep(cx, 1000000);
	atomic_store(&b->release, 1);
	cbcmn_sleep(cx, BAL_SETTLE_MS * 1000000ull);
	uint64_t m0[2] = {migrations(rt, 0), migrations(rt, 1)};
	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	TASK_CHECK(cbcmn_stats_snapshot(rt, &st, per, 2) == 0);
	o->homed[0] = (int64_t)per[0].actors;
	o->homed[1] = (int64_t)per[1].actors;
	cbcmn_sleep(cx, BAL_WINDOW_MS * 1000000ull);
	o->settle_moves = m0[0] + m0[1];
	for (int e = 0; e < 2; e++)
		o->window_moves[e] = migrations(rt, (uint32_t)e) - m0[e];
	atomic_store(&b->stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_balanced_runtime_migrates_nothing(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct bal b = {0};
	struct bal_out o = {0};
	void *arg[2] = {&b, &o};
	assert_int_equal(t_run_pinned(rt, 0, bal_boss, arg), 0);
	ASSERT_TASK_CHECKS();
	printf("balanced: homed %lld/%lld after settling (%llu moves), %llu+%llu moves in %d ms\n",
	       (long long)o.homed[0], (long long)o.homed[1], (unsigned long long)o.settle_moves,
	       (unsigned long long)o.window_moves[0], (unsigned long long)o.window_moves[1],
	       BAL_WINDOW_MS);
	/* One way only, and a few: no back and forth. */
	assert_true(o.window_moves[0] == 0 || o.window_moves[1] == 0);
	assert_true(o.window_moves[0] + o.window_moves[1] <= BAL_MOVES_MAX);
	t_destroy(rt);
}

/* ---- an overloaded executor sheds to a busy but less loaded one ---- */

/* The load rule itself (case 1): the shedding tests above move actors to
 * an idle executor, which the spreading to idle executors (or a wake
 * there) does as well.  Here executor 1 is never idle: 8 pinned hogs keep
 * its wheel busy below nominal, while 40 on executor 0 hold it at about
 * 2.5 nominal turns: some of those must move, after the overload has
 * lasted (50 ms, docs/ACTORS.md "Migration"). */

#define BUSY_LIGHT 8
#define BUSY_HEAVY 40

struct busy2 {
	struct wake3 w; /* stop, started: the pinned ones are wake3_hog */
	_Atomic int on1;
};

static int64_t busy2_hog(cbcmn_cx *cx, void *arg)
{
	struct busy2 *b = arg;
	atomic_fetch_add(&b->w.started, 1);
	while (!atomic_load_explicit(&b->w.stop, memory_order_relaxed)) {
		CBCMN_CHECKPOINT(cx);
		if (cbcmn_cx_executor(cx) == 1)
			atomic_store_explicit(&b->on1, 1, memory_order_relaxed);
	}
	return 0;
}

static int64_t busy2_boss(cbcmn_cx *cx, void *arg)
{
	struct busy2 *b = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_ref r;
	cbcmn_actor_opts pin1 = {.placement = CBCMN_PLACE_PINNED, .shard = 1};
	for (int i = 0; i < BUSY_LIGHT; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, wake3_hog, &b->w, &pin1, &r) == 0);
	while (atomic_load(&b->w.started) < BUSY_LIGHT)
		cbcmn_sleep(cx, 1000000);
	/* Spawned here, on executor 0, while executor 1's wheel is busy
	 * (an executor steals only when idle): only migration moves them. */
	for (int i = 0; i < BUSY_HEAVY; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, busy2_hog, b, NULL, &r) == 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&b->on1) && t_now_ns() < end)
		cbcmn_sleep(cx, 1000000);
	TASK_CHECK(atomic_load(&b->on1));
	TASK_CHECK(migrations(rt, 0) > 0);
	atomic_store(&b->w.stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_overloaded_executor_sheds_actors_to_a_busy_less_loaded_one(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct busy2 b = {0};
	assert_int_equal(t_run_pinned(rt, 0, busy2_boss, &b), 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
}

/* ---- the load rule leaves posse members where they are ---- */

/* The posse rule of case 1 itself (move_to()): as above, executor 1 is
 * never idle (8 pinned hogs; no spreading to an idle executor, which
 * leaves members alone on its own path), executor 0 holds 40 hogs, 36 of
 * them posse members, and sheds.  Until POSSE_MOVES actors have left it
 * (members among them if they could move: 9 in 10 of the candidates at
 * each move, all POSSE_MOVES miss them 1 time in 10^4), then all stop
 * through a flag, each noting where it ran last.  A member never runs
 * anywhere but where it first ran; the 4 others moved (the moves
 * happened: not a vacuous pass). */

#define POSSE_HEAVY 40
#define POSSE_MOVES 4 /* the non-members: POSSE_HEAVY / 10 */

struct pmember {
	struct busy2 *b;
	bool member;
	_Atomic uint32_t home;  /* 1 + its executor at its first run; 0: none yet */
	_Atomic int strayed;    /* ran on an executor other than home */
};

static int64_t pmember_hog(cbcmn_cx *cx, void *arg)
{
	struct pmember *m = arg;
	atomic_store(&m->home, cbcmn_cx_executor(cx) + 1);
	atomic_fetch_add(&m->b->w.started, 1);
	for (;;) {
		/* After the loop's last checkpoint too: a member moved before
		 * the stop runs there once more, and says so. */
		if (cbcmn_cx_executor(cx) + 1 != atomic_load_explicit(&m->home, memory_order_relaxed))
			atomic_store_explicit(&m->strayed, 1, memory_order_relaxed);
		if (atomic_load_explicit(&m->b->w.stop, memory_order_relaxed))
			return 0;
		CBCMN_CHECKPOINT(cx);
	}
}

struct posse2 {
	struct busy2 b;
	struct pmember m[POSSE_HEAVY];
};

static int64_t posse2_boss(cbcmn_cx *cx, void *arg)
{
	struct posse2 *p = arg;
	struct busy2 *b = &p->b;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_ref r;
	cbcmn_actor_opts pin1 = {.placement = CBCMN_PLACE_PINNED, .shard = 1};
	for (int i = 0; i < BUSY_LIGHT; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, wake3_hog, &b->w, &pin1, &r) == 0);
	while (atomic_load(&b->w.started) < BUSY_LIGHT)
		cbcmn_sleep(cx, 1000000);
	cbcmn_actor_opts member = {.posse = 7};
	for (int i = 0; i < POSSE_HEAVY; i++) {
		p->m[i].b = b;
		p->m[i].member = i % 10 != 0;
		TASK_CHECK(cbcmn_actor_spawn(cx, n, pmember_hog, &p->m[i],
					     p->m[i].member ? &member : NULL, &r) == 0);
	}
	/* Only the 4 non-members may leave (a hang: the watchdog). */
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (migrations(rt, 0) < POSSE_MOVES && t_now_ns() < end)
		cbcmn_sleep(cx, 1000000);
	TASK_CHECK(migrations(rt, 0) >= POSSE_MOVES);
	atomic_store(&b->w.stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_posse_members_stay_on_an_overloaded_executor(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct posse2 *p = calloc(1, sizeof(*p));
	assert_non_null(p);
	assert_int_equal(t_run_pinned(rt, 0, posse2_boss, p), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&p->b.w.started), BUSY_LIGHT + POSSE_HEAVY);
	int strayed = 0, moved = 0;
	for (int i = 0; i < POSSE_HEAVY; i++) {
		if (p->m[i].member)
			strayed += atomic_load(&p->m[i].strayed);
		else
			moved += atomic_load(&p->m[i].strayed);
	}
	printf("posse: %d members strayed, %d of %d others moved\n", strayed, moved, POSSE_MOVES);
	assert_int_equal(strayed, 0);
	free(p);
	t_destroy(rt);
}

/* ---- two computing actors on one executor spread to an idle one ---- */

struct spread {
	_Atomic int started, held, apart;
	_Atomic uint32_t on[2];
	uint64_t deadline;
};

struct spreader {
	struct spread *sp;
	int i;
};

/* Computes in 50 us slices, each ended by a yield that puts it back on its
 * executor's wheel (short runs: the wheel's load stays far below what
 * migrates, however the machine throttles us), noting where it runs, until
 * the two have been seen on two executors once executor 1 is free. */
static int64_t spreading_actor(cbcmn_cx *cx, void *arg)
{
	struct spreader *me = arg;
	struct spread *sp = me->sp;
	atomic_fetch_add(&sp->started, 1);
	while (!atomic_load(&sp->apart) && t_now_ns() < sp->deadline) {
		uint64_t until = t_now_ns() + 50000;
		while (t_now_ns() < until)
			;
		uint32_t mine = cbcmn_cx_executor(cx) + 1;
		atomic_store(&sp->on[me->i], mine);
		uint32_t other = atomic_load(&sp->on[!me->i]);
		if (other && other != mine && atomic_load(&sp->held) == 2)
			atomic_store(&sp->apart, 1);
		cbcmn_yield(cx);
	}
	return 0;
}

/* Holds executor 1's thread (a plain sleep: it steals nothing meanwhile,
 * and burns no CPU, whose throttling in a loaded cgroup would make the
 * wheel's load look high enough to migrate) until both actors run on
 * executor 0's wheel. */
static int64_t spread_hold_exec1(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct spread *sp = arg;
	atomic_store(&sp->held, 1);
	while ((atomic_load(&sp->on[0]) != 1 || atomic_load(&sp->on[1]) != 1) &&
	       t_now_ns() < sp->deadline)
		usleep(1000);
	atomic_store(&sp->held, 2); /* from now on, executor 1 idles */
	return 0;
}

static int64_t spreading_boss(cbcmn_cx *cx, void *arg)
{
	struct spread *sp = arg;
	struct spreader w[2] = {{sp, 0}, {sp, 1}};
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, spread_hold_exec1, sp, NULL) == 0);
	while (!atomic_load(&sp->held))
		cbcmn_yield(cx);
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, spreading_actor, &w[0], NULL, &r) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, spreading_actor, &w[1], NULL, &r) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* The bug: an executor's wheel is its own (nothing steals from it), and
 * migration waits for a load above nominal (a turn of 16 quanta): two
 * actors computing on one executor shared it for good while the other
 * slept, as plain yielders did before their yields went to the inject
 * queue (test_sched's
 * test_regression_yielders_on_one_executor_spread_to_an_idle_one).  Never
 * apart in 20 s before the fix. */
static void test_regression_computing_actors_on_one_executor_spread_to_an_idle_one(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.flags |= CBCMN_CONFIG_NO_INLINE;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct spread sp = {.deadline = t_now_ns() + T_STALL_NS};
	assert_int_equal(t_run_pinned(rt, 0, spreading_boss, &sp), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&sp.started), 2);
	assert_int_equal(atomic_load(&sp.held), 2);
	assert_int_equal(atomic_load(&sp.apart), 1);
	t_destroy(rt);
}

/* ---- posse members stay while an executor idles ---- */

/* The posse rule of the spreading to an idle executor (case 4,
 * cbcmn__actor_yielded()): PIDLE_ACTORS actors compute in 50 us slices
 * ended by a yield on executor 0 (short runs: far below what case 1
 * moves) while executor 1 idles; PIDLE_OTHERS of them are no members,
 * and each ends once it has run elsewhere (executor 1 idles again).
 * Until all of those did, or a member ran anywhere but where it first
 * ran.  Without the rule each spreading would take a member 5 times in
 * 6: all three miss them about 1 time in 700. */

#define PIDLE_ACTORS 18
#define PIDLE_OTHERS 3 /* index % 6 == 0 */

struct pidle {
	_Atomic int started, held, stop, others_out, strayed;
	uint64_t deadline;
};

struct pidler {
	struct pidle *pi;
	bool member;
};

static int64_t pidle_actor(cbcmn_cx *cx, void *arg)
{
	struct pidler *me = arg;
	struct pidle *pi = me->pi;
	uint32_t home = cbcmn_cx_executor(cx);
	atomic_fetch_add(&pi->started, 1);
	while (!atomic_load(&pi->stop) && t_now_ns() < pi->deadline) {
		uint64_t until = t_now_ns() + 50000;
		while (t_now_ns() < until)
			;
		if (cbcmn_cx_executor(cx) != home) {
			if (me->member) {
				atomic_store(&pi->strayed, 1);
				atomic_store(&pi->stop, 1);
			} else {
				atomic_fetch_add(&pi->others_out, 1);
				return 0;
			}
		}
		TASK_CHECK(cbcmn_yield(cx) == 0);
	}
	return 0;
}

/* Holds executor 1's thread (asleep: it steals nothing) until every
 * actor runs on executor 0's wheel. */
static int64_t pidle_hold_exec1(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct pidle *pi = arg;
	atomic_store(&pi->held, 1);
	while (atomic_load(&pi->started) < PIDLE_ACTORS && t_now_ns() < pi->deadline)
		usleep(1000);
	atomic_store(&pi->held, 2); /* from now on, executor 1 idles */
	return 0;
}

static int64_t pidle_boss(cbcmn_cx *cx, void *arg)
{
	struct pidle *pi = arg;
	struct pidler w[PIDLE_ACTORS];
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, pidle_hold_exec1, pi, NULL) == 0);
	while (!atomic_load(&pi->held))
		cbcmn_yield(cx);
	cbcmn_actor_ref r;
	cbcmn_actor_opts member = {.posse = 7};
	for (int i = 0; i < PIDLE_ACTORS; i++) {
		w[i] = (struct pidler){pi, i % 6 != 0};
		TASK_CHECK(cbcmn_actor_spawn(cx, n, pidle_actor, &w[i], w[i].member ? &member : NULL,
					     &r) == 0);
	}
	while (atomic_load(&pi->others_out) < PIDLE_OTHERS && !atomic_load(&pi->stop) &&
	       t_now_ns() < pi->deadline)
		cbcmn_sleep(cx, 1000000);
	atomic_store(&pi->stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_posse_members_stay_while_an_executor_idles(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.flags |= CBCMN_CONFIG_NO_INLINE;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct pidle pi = {.deadline = t_now_ns() + T_STALL_NS};
	assert_int_equal(t_run_pinned(rt, 0, pidle_boss, &pi), 0);
	ASSERT_TASK_CHECKS();
	printf("posse, idle executor: %d of %d others out, member strayed %d\n",
	       atomic_load(&pi.others_out), PIDLE_OTHERS, atomic_load(&pi.strayed));
	assert_int_equal(atomic_load(&pi.started), PIDLE_ACTORS);
	assert_int_equal(atomic_load(&pi.held), 2);
	assert_int_equal(atomic_load(&pi.strayed), 0);
	assert_int_equal(atomic_load(&pi.others_out), PIDLE_OTHERS);
	t_destroy(rt);
}

/* ---- destroy with actors on a wheel: refused, then everything freed ---- */

static void test_destroy_with_actors_on_a_wheel_is_ebusy_then_frees(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct share s = {.rt = rt};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	cbcmn_actor_ref r;
	for (int i = 0; i < HOGS; i++)
		assert_int_equal(cbcmn_actor_spawn(NULL, n, hog, &s, NULL, &r), 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(&s.hogs_running) < HOGS && t_now_ns() < end)
		usleep(1000);
	assert_int_equal(atomic_load(&s.hogs_running), HOGS);
	/* The hogs are on the executors' wheels: nothing is freed under them. */
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	atomic_store(&s.stop, 1);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	assert_int_equal(atomic_load(&s.hogs_ended), HOGS);
	t_destroy(rt); /* the wheels go with their executors (ASan: no leak) */
}

/* ---- a stalled executor's wheel ------------------------------------------------ */

/* An actor on executor 1's wheel, and the task beside it blocked in a
 * blocking libc call until that actor writes to a pipe: the wheel was the
 * owner's alone, so the actor waited for the call to end, and the call for
 * the actor (a deadlock, here a 3 s poll that timed out).  The stall
 * monitor now moves it off the wheel; executor 0 (busy: it steals nothing)
 * or the spare runs it. */
struct strand {
	int fd[2];
	_Atomic int runs1, go, release, got, ran_on;
	cbcmn_nursery *n;
};

static int64_t strand_actor(cbcmn_cx *cx, void *arg)
{
	struct strand *s = arg;
	for (;;) {
		if (cbcmn_cx_executor(cx) == 1)
			atomic_fetch_add(&s->runs1, 1);
		if (atomic_load(&s->go)) {
			atomic_store(&s->ran_on, cbcmn_cx_executor(cx));
			char c = 'x';
			return write(s->fd[1], &c, 1) == 1 ? 0 : -EIO;
		}
		cbcmn_yield(cx);
	}
}

static int64_t strand_hog(cbcmn_cx *cx, void *arg)
{
	struct strand *s = arg;
	while (!atomic_load_explicit(&s->release, memory_order_relaxed))
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static int64_t strand_blocker(cbcmn_cx *cx, void *arg)
{
	struct strand *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, strand_actor, s, NULL, &r) == 0);
	/* Until it has run here twice: it is on this executor's wheel. */
	for (int i = 0; i < 200000 && atomic_load(&s->runs1) < 2; i++)
		cbcmn_yield(cx);
	TASK_CHECK(atomic_load(&s->runs1) >= 2);
	atomic_store(&s->go, 1);
	/* Blocking, outside the runtime: a stall. */
	struct pollfd p = {.fd = s->fd[0], .events = POLLIN};
	if (poll(&p, 1, 3000) == 1) {
		char c;
		atomic_store(&s->got, read(s->fd[0], &c, 1) == 1);
	}
	atomic_store(&s->release, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t strand_main(cbcmn_cx *cx, void *arg)
{
	struct strand *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, strand_hog, s, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, strand_blocker, s, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_actor_on_a_stalled_executors_wheel_runs_elsewhere(void **state)
{
	(void)state;
	struct strand s = {0};
	assert_int_equal(pipe(s.fd), 0);
	atomic_store(&s.ran_on, -1);
	cbcmn_runtime *rt = t_runtime(2); /* static: stall monitor and spare */
	assert_int_equal(t_run_pinned(rt, 0, strand_main, &s), 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
	close(s.fd[0]);
	close(s.fd[1]);
	assert_true(atomic_load(&s.got));
	assert_int_not_equal(atomic_load(&s.ran_on), 1);
}

/* An actor that blocks while the stall monitor holds its executor's
 * wheel: its block looks at the wheel (sched.c, actor_direct(): is
 * anything ready there before it switches straight to the next actor?),
 * and that look is the owner's only under the wheel's gate, which a
 * run leaves open for the rescue.  It looked with the gate open: TSan
 * caught the look racing the rescue's take (CI, test_run's ring).  Here
 * the actor S, pinned on executor 1 with two yielders on its wheel,
 * stalls (asleep in libc) until the monitor, held at the
 * pause point just after its take (CBCMN__P_WHEEL_RESCUE), says so; then
 * it wakes P (an actor pinned there, queued so: something to switch to)
 * and blocks (a sleep) while the monitor still holds the wheel, a while.
 * The hold is seen through relaxed flags only (no happens-before for
 * TSan): a look at the wheel without the gate races the take.  Release
 * builds have no pause points and skip. */
struct held_wheel {
	_Atomic int runs1, stop, p_waits, p_got;
	_Atomic int armed, held, blocking, slept;
};

static struct held_wheel hw;

#define HELD_WHEEL_NS 2000000000ull /* hang guards: the steps come in ms */

static void held_wheel_pause(enum cbcmn__pause_point p, void *x)
{
	(void)x;
	if (p != CBCMN__P_WHEEL_RESCUE || !atomic_load_explicit(&hw.armed, memory_order_relaxed))
		return;
	atomic_store_explicit(&hw.armed, 0, memory_order_relaxed); /* the first rescue only */
	atomic_store_explicit(&hw.held, 1, memory_order_relaxed);
	for (uint64_t t0 = t_now_ns(); !atomic_load_explicit(&hw.blocking, memory_order_relaxed) &&
				       t_now_ns() - t0 < HELD_WHEEL_NS;)
		usleep(100);
	usleep(20000); /* S's block, under way meanwhile */
}

static int64_t held_wheel_yielder(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	while (!atomic_load(&hw.stop)) {
		if (cbcmn_cx_executor(cx) == 1)
			atomic_fetch_add(&hw.runs1, 1);
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t held_wheel_p(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	atomic_store(&hw.p_waits, 1);
	TASK_CHECK(cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0);
	atomic_store(&hw.p_got, 1);
	return 0;
}

static int64_t held_wheel_s(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_ref r, p;
	for (int k = 0; k < 2; k++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, held_wheel_yielder, NULL, NULL, &r) == 0);
	cbcmn_actor_opts po = {.placement = CBCMN_PLACE_PINNED, .shard = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, held_wheel_p, NULL, &po, &p) == 0);
	/* Until they have run here a few times (the yielders on this
	 * executor's wheel, P in its receive). */
	for (int i = 0; i < 200000 && (atomic_load(&hw.runs1) < 8 || !atomic_load(&hw.p_waits));
	     i++)
		cbcmn_yield(cx);
	TASK_CHECK(atomic_load(&hw.runs1) >= 8 && atomic_load(&hw.p_waits));
	atomic_store_explicit(&hw.armed, 1, memory_order_relaxed);
	/* A stall: asleep outside the runtime (a spin would be a loop, whose
	 * run ends by itself: no rescue, monitor.c). */
	for (uint64_t t0 = t_now_ns(); !atomic_load_explicit(&hw.held, memory_order_relaxed) &&
				       t_now_ns() - t0 < T_STALL_NS;)
		usleep(1000);
	atomic_store_explicit(&hw.blocking, 1, memory_order_relaxed);
	cbcmn_actor_msg m = {.type = 1};
	TASK_CHECK(cbcmn_actor_send(NULL, cx, p, &m) == 0);
	cbcmn_sleep(cx, 1000000);
	atomic_store(&hw.slept, 1);
	atomic_store(&hw.stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t held_wheel_hog(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&hw.stop, memory_order_relaxed))
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static int64_t held_wheel_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, held_wheel_hog, NULL, NULL) == 0);
	cbcmn_actor_opts ao = {.placement = CBCMN_PLACE_PINNED, .shard = 1};
	cbcmn_actor_ref s;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, held_wheel_s, NULL, &ao, &s) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_actor_blocking_while_the_monitor_holds_its_wheel(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2); /* static: stall monitor and spare */
	if (!cbcmn__pause_set(NULL)) {
		t_destroy(rt);
		skip(); /* no pause points in this build */
	}
	memset(&hw, 0, sizeof(hw));
	cbcmn__pause_set(held_wheel_pause);
	int64_t rc = t_run_pinned(rt, 0, held_wheel_main, NULL);
	cbcmn__pause_set(NULL);
	assert_int_equal(rc, 0);
	ASSERT_TASK_CHECKS();
	assert_true(atomic_load(&hw.held)); /* the rescue was held */
	assert_true(atomic_load(&hw.slept));
	assert_true(atomic_load(&hw.p_got));
	t_destroy(rt);
}

/* Executor 1 stalls in a blocking call with two computing actors on its
 * wheel, and executor 0 in a loop (it takes nothing): the monitor moves
 * the actors to the inject queue and the spare executor takes them.  Once
 * the stall is over the spare is off duty, and "off duty it takes
 * nothing: what it holds that may run elsewhere goes to the inject queue
 * ... so no more than `workers` executors run tasks for longer than a
 * stall and its end" (docs/SCHEDULER.md).  Its wheel's actors stayed on
 * it: the last one, without company to yield to an idle executor, ran on
 * the spare (a third executor of a 2-worker runtime) for as long as it
 * computed. */
#define OFF_HOGS 2

struct offd {
	_Atomic int on1[OFF_HOGS], on_spare[OFF_HOGS], end_stall, stop, spare_late;
	_Atomic int windows, void_windows; /* looks made: without a stall, and with */
	uint64_t deadline;
};

static int64_t offd_hog(cbcmn_cx *cx, void *arg)
{
	struct offd *o = ((struct offd **)arg)[0];
	int i = (int)(intptr_t)((void **)arg)[1];
	while (!atomic_load(&o->stop) && t_now_ns() < o->deadline) {
		uint32_t x = cbcmn_cx_executor(cx);
		if (x == 1)
			atomic_store(&o->on1[i], 1);
		if (x == 2)
			atomic_store(&o->on_spare[i], 1);
		uint64_t until = t_now_ns() + 20000;
		while (t_now_ns() < until)
			;
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t offd_loop0(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct offd *o = arg;
	while (!atomic_load(&o->end_stall) && t_now_ns() < o->deadline)
		;
	return 0;
}

static int64_t offd_blocker(cbcmn_cx *cx, void *arg)
{
	struct offd *o = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	void *args[OFF_HOGS][2];
	cbcmn_actor_ref r;
	for (int i = 0; i < OFF_HOGS; i++) {
		args[i][0] = o;
		args[i][1] = (void *)(intptr_t)i;
		TASK_CHECK(cbcmn_actor_spawn(cx, n, offd_hog, args[i], NULL, &r) == 0);
	}
	bool all = false;
	while (!all && t_now_ns() < o->deadline) {
		cbcmn_yield(cx);
		all = true;
		for (int i = 0; i < OFF_HOGS; i++)
			all = all && atomic_load(&o->on1[i]);
	}
	/* Blocking, outside the runtime, until both run on the spare. */
	for (all = false; !all && t_now_ns() < o->deadline;) {
		usleep(2000);
		all = true;
		for (int i = 0; i < OFF_HOGS; i++)
			all = all && atomic_load(&o->on_spare[i]);
	}
	TASK_CHECK(all);
	atomic_store(&o->end_stall, 1);
	/* The stall is over: the spare goes off duty.  Then, a while later,
	 * does it still run one?  Asked in a window no stall touched: on a
	 * loaded host an executor whose thread is not run for stall_ns (200
	 * ms here, 10 by default) is stalled (CPU starvation), and the spare,
	 * not yet retired, is on duty again and may rightly take a hog (the
	 * flake of session 24, TSan at load 30).  Such a window says nothing: another, until
	 * the deadline.  A window starts 100 ms after the look that saw no
	 * stall, for the monitor to take the spare off duty after one that
	 * had just ended. */
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_sleep(cx, 300 * 1000000ull);
	while (t_now_ns() < o->deadline) {
		cbcmn_stats a, b;
		TASK_CHECK(cbcmn_stats_snapshot(rt, &a, NULL, 0) == 0);
		cbcmn_sleep(cx, 100 * 1000000ull);
		for (int i = 0; i < OFF_HOGS; i++)
			atomic_store(&o->on_spare[i], 0);
		cbcmn_sleep(cx, 100 * 1000000ull);
		int late = 0;
		for (int i = 0; i < OFF_HOGS; i++)
			late |= atomic_load(&o->on_spare[i]);
		TASK_CHECK(cbcmn_stats_snapshot(rt, &b, NULL, 0) == 0);
		if (!a.total.stalled_task && !b.total.stalled_task && a.total.stalls == b.total.stalls) {
			atomic_store(&o->spare_late, late);
			atomic_store(&o->windows, 1);
			break;
		}
		atomic_fetch_add(&o->void_windows, 1);
	}
	atomic_store(&o->stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t offd_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, offd_loop0, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, offd_blocker, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_off_duty_spare_keeps_no_rescued_actor(void **state)
{
	(void)state;
	struct offd o = {.deadline = t_now_ns() + T_STALL_NS};
	/* Static: stall monitor and spare.  Stalls from 200 ms, not 10: at
	 * load 15 under TSan the host left an executor's thread unrun for
	 * 10 ms about every 100 ms (3 stalls in 3 looks of 200 ms), each
	 * one putting the spare on duty again; 200 ms such are rare, and
	 * the looks below skip those. */
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.stall_ns = 200 * 1000000ull;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	assert_int_equal(t_run_pinned(rt, 0, offd_main, &o), 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
	assert_true(atomic_load(&o.end_stall));
	if (atomic_load(&o.void_windows))
		print_message("%d look(s) with a stall (the host's load) made again\n",
			      atomic_load(&o.void_windows));
	if (!atomic_load(&o.windows))
		T_SKIP("every look had a stall in it (the host's load): nothing to conclude");
	assert_false(atomic_load(&o.spare_late));
}

/* ---- the next place: a spawned actor runs at the next pick, bounded ---- */

#define NX_OLD 8        /* older runnable actors on the wheel */
#define NX_ROUNDS 40    /* the spawner's spawns */
#define NX_LOG 4096
#define NX_CHAIN 2000   /* links of a spawn chain */
/* Chain links in a row that the other runnable may see pass without
 * running.  An actor: the wheel's bound is 16 picks from the next place
 * (CBCMN__WHEEL_NEXT_RUNS), then one in its order (measured: 15).  A
 * nursery task: the queues' fairness look (every 61st pick, sched.c),
 * shared here with the test's main task, both yielding (measured: 119,
 * main's figure before the next place too).  The rest is slack. */
#define NX_GAP_MAX 64
#define NX_GAP_MAX_TASK 256

struct nx {
	cbcmn_nursery *n, *rn;
	cbcmn_actor_ref root, other;
	_Atomic int stop, started, log_n, spawned_ok;
	char log[NX_LOG];
	_Atomic long other_runs;
	long seen, gap, max_gap;
	_Atomic int links;
};

static void nx_log(struct nx *x, char c)
{
	int i = atomic_fetch_add(&x->log_n, 1);
	if (i < NX_LOG)
		x->log[i] = c;
}

static int64_t nx_old(cbcmn_cx *cx, void *arg)
{
	struct nx *x = arg;
	atomic_fetch_add(&x->started, 1);
	while (!atomic_load(&x->stop)) {
		nx_log(x, 'H');
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t nx_child(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	nx_log(arg, 'C');
	return 0;
}

/* Spawns a child, then yields (N forward, as the older actors do), each
 * round: the child must run before any older actor runs again. */
static int64_t nx_spawner(cbcmn_cx *cx, void *arg)
{
	struct nx *x = arg;
	cbcmn_nursery *n;
	if (open_n(cx, &n) != 0)
		return -1;
	while (atomic_load(&x->started) < NX_OLD)
		cbcmn_yield(cx);
	for (int r = 0; r < NX_ROUNDS; r++) {
		cbcmn_actor_ref c;
		nx_log(x, 'S');
		if (cbcmn_actor_spawn(cx, n, nx_child, x, NULL, &c) == 0)
			atomic_fetch_add(&x->spawned_ok, 1);
		cbcmn_yield(cx);
	}
	atomic_store(&x->stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t nx_order_main(cbcmn_cx *cx, void *arg)
{
	struct nx *x = arg;
	cbcmn_actor_ref r;
	TASK_CHECK(open_n(cx, &x->n) == 0);
	for (int i = 0; i < NX_OLD; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, x->n, nx_old, x, NULL, &r) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, x->n, nx_spawner, x, NULL, &r) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, x->n) == 0);
	return 0;
}

static void test_spawned_actor_runs_before_the_wheels_older_actors(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct nx *x = calloc(1, sizeof(*x));
	assert_non_null(x);
	t_run(rt, nx_order_main, x, 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
	assert_int_equal(atomic_load(&x->spawned_ok), NX_ROUNDS);
	int n = atomic_load(&x->log_n), s = 0, c = 0;
	assert_true(n <= NX_LOG);
	/* Each spawn's child is what runs next: no 'H' between S and C. */
	for (int i = 0; i < n; i++) {
		if (x->log[i] != 'S')
			continue;
		s++;
		assert_true(i + 1 < n);
		assert_int_equal(x->log[i + 1], 'C');
		c++;
	}
	assert_int_equal(s, NX_ROUNDS);
	assert_int_equal(c, NX_ROUNDS);
	free(x);
}

/* One link: notes whether the other ran since the link before, spawns
 * the next link (into the root's nursery), ends; the last tells the
 * root. */
static int64_t nx_link(cbcmn_cx *cx, void *arg)
{
	struct nx *x = arg;
	long o = atomic_load(&x->other_runs);
	if (o == x->seen) {
		if (++x->gap > x->max_gap)
			x->max_gap = x->gap;
	} else {
		x->seen = o;
		x->gap = 0;
	}
	if (atomic_fetch_add(&x->links, 1) + 1 >= NX_CHAIN) {
		atomic_store(&x->stop, 1);
		cbcmn_actor_msg m = {.type = M_QUIT};
		return cbcmn_actor_send(NULL, cx, x->root, &m);
	}
	cbcmn_actor_ref c;
	TASK_CHECK(cbcmn_actor_spawn(cx, x->rn, nx_link, x, NULL, &c) == 0);
	return 0;
}

/* The chain's root: its nursery stays open for the links while it waits
 * for the last (blocked: no runnable here but the chain and the other). */
static int64_t nx_root(cbcmn_cx *cx, void *arg)
{
	struct nx *x = arg;
	cbcmn_actor_ref c;
	cbcmn_actor_msg m;
	TASK_CHECK(open_n(cx, &x->rn) == 0);
	while (atomic_load(&x->other_runs) < 4)
		cbcmn_yield(cx);
	x->seen = atomic_load(&x->other_runs);
	TASK_CHECK(cbcmn_actor_spawn(cx, x->rn, nx_link, x, NULL, &c) == 0);
	TASK_CHECK(cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0);
	return cbcmn_nursery_await_all(cx, x->rn);
}

/* The other runnable: yields each time round until the chain ends. */
static int64_t nx_other(cbcmn_cx *cx, void *arg)
{
	struct nx *x = arg;
	while (!atomic_load(&x->stop)) {
		atomic_fetch_add(&x->other_runs, 1);
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t nx_other_task(cbcmn_cx *cx, void *arg)
{
	return nx_other(cx, arg);
}

static int64_t nx_chain_main(cbcmn_cx *cx, void *arg)
{
	struct nx *x = arg;
	TASK_CHECK(open_n(cx, &x->n) == 0);
	if (x->spawned_ok) /* here: the other is a nursery task */
		TASK_CHECK(cbcmn_nursery_spawn(cx, x->n, nx_other_task, x, NULL) == 0);
	else
		TASK_CHECK(cbcmn_actor_spawn(cx, x->n, nx_other, x, NULL, &x->other) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, x->n, nx_root, x, NULL, &x->root) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, x->n) == 0);
	return 0;
}

static void nx_chain(bool task)
{
	cbcmn_runtime *rt = t_runtime(1);
	struct nx *x = calloc(1, sizeof(*x));
	assert_non_null(x);
	x->spawned_ok = task;
	t_run(rt, nx_chain_main, x, 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
	assert_int_equal(atomic_load(&x->links), NX_CHAIN);
	/* The other ran at least once every NX_GAP_MAX links. */
	assert_true(x->max_gap <= (task ? NX_GAP_MAX_TASK : NX_GAP_MAX));
	free(x);
}

static void test_spawn_chain_does_not_starve_another_actor(void **state)
{
	(void)state;
	nx_chain(false);
}

static void test_spawn_chain_does_not_starve_a_nursery_task(void **state)
{
	(void)state;
	nx_chain(true);
}

/* ---- the next place's occupant on a stalled executor ---- */

/* docs/ACTORS.md "The next place": the stall rescue moves an occupant
 * as any actor on the wheel.  A chain of links (each spawns the next and
 * ends) on executor 0 beside X, pinned there: after 16 links the wheel's
 * order picks X, which blocks its thread 300 ms (a stall) while the next
 * link sits in the next place.  The rescue must move it: links run
 * during X's stall (on executor 1). */
#define NXS_SLEEP_US 300000

static struct {
	cbcmn_nursery *rn;
	cbcmn_actor_ref root;
	_Atomic int links, sleeping, slept, during, stop;
} nxs;

static int64_t nxs_x(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	while (!atomic_load(&nxs.stop)) {
		if (atomic_load(&nxs.links) >= 4 && !atomic_load(&nxs.slept)) {
			atomic_store(&nxs.sleeping, 1);
			usleep(NXS_SLEEP_US); /* the thread, not the fiber: a stall */
			atomic_store(&nxs.sleeping, 0);
			atomic_store(&nxs.slept, 1);
		}
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t nxs_link(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	atomic_fetch_add(&nxs.links, 1);
	if (atomic_load(&nxs.sleeping))
		atomic_fetch_add(&nxs.during, 1);
	if (atomic_load(&nxs.slept) || atomic_load(&nxs.during) >= 100 ||
	    atomic_load(&nxs.links) > 200000) {
		atomic_store(&nxs.stop, 1);
		cbcmn_actor_msg m = {.type = M_QUIT};
		return cbcmn_actor_send(NULL, cx, nxs.root, &m);
	}
	cbcmn_actor_ref c;
	TASK_CHECK(cbcmn_actor_spawn(cx, nxs.rn, nxs_link, NULL, NULL, &c) == 0);
	return 0;
}

static int64_t nxs_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_ref c;
	cbcmn_actor_msg m;
	cbcmn_actor_opts pin0 = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	TASK_CHECK(open_n(cx, &nxs.rn) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nxs.rn, nxs_x, NULL, &pin0, &c) == 0);
	cbcmn_yield(cx);
	TASK_CHECK(cbcmn_actor_spawn(cx, nxs.rn, nxs_link, NULL, NULL, &c) == 0);
	TASK_CHECK(cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0);
	return cbcmn_nursery_await_all(cx, nxs.rn);
}

static int64_t nxs_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	cbcmn_actor_opts pin0 = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, nxs_root, NULL, &pin0, &nxs.root) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static void test_next_place_occupant_moved_off_a_stalled_executor(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.policy = CBCMN_PIN_NONE;
	cfg.stall_ns = 2000000ull;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	t_run(rt, nxs_main, NULL, 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
	assert_int_equal(atomic_load(&nxs.slept), 1);
	if (getenv("NXS_SHOW"))
		fprintf(stderr, "links %d during %d\n", atomic_load(&nxs.links), atomic_load(&nxs.during));
	assert_true(atomic_load(&nxs.during) > 0);
}

/* ---- a spawn chain's nursery cancelled while a link sits in the next place ---- */

/* A chain on one executor beside a yielding actor: its nursery is
 * cancelled mid-chain (the link that sees the mark cancels it, its child
 * already spawned: that child takes the next place, cancelled before it
 * runs).  The await returns (the cancelled occupant's halt is counted),
 * every link that started ended, and nothing leaks (ASan). */
static struct {
	cbcmn_nursery *rn;
	_Atomic int links, ended, stop;
} nxc;

static int64_t nxc_other(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	while (!atomic_load(&nxc.stop) && cbcmn_yield(cx) == 0)
		;
	return 0;
}

static int64_t nxc_link(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	int l = atomic_fetch_add(&nxc.links, 1);
	cbcmn_actor_ref c;
	TASK_CHECK(cbcmn_actor_spawn(cx, nxc.rn, nxc_link, NULL, NULL, &c) == 0);
	if (l == 100)
		cbcmn_nursery_cancel(nxc.rn); /* its child is spawned: in the next place */
	atomic_fetch_add(&nxc.ended, 1);
	return 0;
}

static int64_t nxc_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_ref r;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, nxc_other, NULL, NULL, &r) == 0);
	TASK_CHECK(open_n(cx, &nxc.rn) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, nxc.rn, nxc_link, NULL, NULL, &r) == 0);
	while (atomic_load(&nxc.ended) <= 100) /* open for the links (an await closes it) */
		cbcmn_yield(cx);
	(void)cbcmn_nursery_await_all(cx, nxc.rn); /* cancelled: its error */
	atomic_store(&nxc.stop, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static void test_next_place_chain_cancelled_mid_chain(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_run(rt, nxc_main, NULL, 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
	assert_true(atomic_load(&nxc.links) >= 101);
	assert_int_equal(atomic_load(&nxc.links), atomic_load(&nxc.ended));
}

/* ---- a spawner that spawns 1000, stopping every third at once ---- */

#define NX_MANY 1000

struct nx_many {
	_Atomic int ran, stopped_ran;
	int spawned, stop_rc, stops, late;
	int64_t await_rc;
};

static int64_t nx_many_child(cbcmn_cx *cx, void *arg)
{
	struct nx_many *m = arg;
	/* A stopped one may still start: its first call sees the stop. */
	if (cbcmn_cx_cancelled(cx))
		atomic_fetch_add(&m->stopped_ran, 1);
	else
		atomic_fetch_add(&m->ran, 1);
	return 0;
}

static int64_t nx_many_spawner(cbcmn_cx *cx, void *arg)
{
	struct nx_many *m = arg;
	cbcmn_nursery *n;
	if (open_n(cx, &n) != 0)
		return -1;
	for (int i = 0; i < NX_MANY; i++) {
		cbcmn_actor_ref c;
		if (cbcmn_actor_spawn(cx, n, nx_many_child, m, NULL, &c) != 0)
			break;
		m->spawned++;
		/* Stopped while in the queue or the next place, not yet run;
		 * with two executors the other may have taken it and run it
		 * to its end already (-ESRCH, once in a TSan run). */
		if (i % 3 == 0) {
			int rc = cbcmn_actor_stop(NULL, cx, c, 0);
			if (rc == 0)
				m->stops++;
			else if (rc == -ESRCH)
				m->late++;
			else
				m->stop_rc++;
		}
	}
	m->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static int64_t nx_many_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	cbcmn_actor_ref r;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, nx_many_spawner, arg, NULL, &r) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static void test_spawner_of_many_with_stops_loses_none(void **state)
{
	(void)state;
	for (uint32_t w = 1; w <= 2; w++) {
		cbcmn_runtime *rt = t_runtime(w);
		struct nx_many m = {0};
		t_run(rt, nx_many_main, &m, 0);
		ASSERT_TASK_CHECKS();
		t_destroy(rt);
		assert_int_equal(m.spawned, NX_MANY);
		assert_int_equal(m.stop_rc, 0);
		assert_int_equal(m.stops + m.late, (NX_MANY + 2) / 3);
		/* Every one not stopped ran; no child ran twice or was lost.
		 * One executor: a child whose stop was taken (0) had not begun
		 * (its body does not park), so it sees the stop if it runs.
		 * Two: a child the other executor took may have ended before
		 * its stop (late), or have looked before the stop came. */
		int ran = atomic_load(&m.ran), stopped_ran = atomic_load(&m.stopped_ran);
		if (w == 1) {
			assert_int_equal(ran, NX_MANY - m.stops);
		} else {
			assert_in_range(ran, NX_MANY - m.stops, NX_MANY);
		}
		assert_true(stopped_ran <= m.stops);
		assert_true(ran + stopped_ran <= NX_MANY);
	}
}

int main(int argc, char **argv)
{
#define T(f) T_WATCHED_TEST(f)
	const struct CMUnitTest tests[] = {
		T(test_busy_actors_do_not_starve_a_nursery_task),
		T(test_busy_nursery_tasks_do_not_starve_actors),
		T(test_wheel_load_published_then_decays_when_empty),
		T(test_checkpointing_actors_on_the_wheel_are_cancelled),
		T(test_spawned_actors_stay_stealable_until_picked),
		T(test_overloaded_executor_sheds_actors_to_an_idle_one),
		T(test_destroy_with_actors_on_a_wheel_is_ebusy_then_frees),
		T(test_woken_actor_leaves_an_overloaded_executor),
		T(test_messages_to_a_migrating_receiver_arrive_once_in_order),
		T(test_balanced_runtime_migrates_nothing),
		T(test_overloaded_executor_sheds_actors_to_a_busy_less_loaded_one),
		T(test_posse_members_stay_and_stops_end_migrating_actors),
		T(test_posse_members_stay_on_an_overloaded_executor),
		T(test_regression_computing_actors_on_one_executor_spread_to_an_idle_one),
		T(test_posse_members_stay_while_an_executor_idles),
		T(test_actor_on_a_stalled_executors_wheel_runs_elsewhere),
		T(test_off_duty_spare_keeps_no_rescued_actor),
		T(test_actor_blocking_while_the_monitor_holds_its_wheel),
		T(test_spawned_actor_runs_before_the_wheels_older_actors),
		T(test_spawn_chain_does_not_starve_another_actor),
		T(test_spawn_chain_does_not_starve_a_nursery_task),
		T(test_spawner_of_many_with_stops_loses_none),
		T(test_next_place_occupant_moved_off_a_stalled_executor),
		T(test_next_place_chain_cancelled_mid_chain),
	};
	if (argc > 1)
		cmocka_set_test_filter(argv[1]); /* one test by name */
	return cmocka_run_group_tests_name("actor_sched", tests, NULL, NULL);
}
