/* test_actor_sched: actors on the executor's wheel (lib/actor_sched.c):
 * actors and plain tasks share an executor both ways, the wheel's load in
 * the statistics, and an actor that only checkpoints is ended like any
 * task.  Order and progress only, never speed. */
#include "helpers.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "cbcmn_actor.h"

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

int main(void)
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
		T(test_regression_computing_actors_on_one_executor_spread_to_an_idle_one),
	};
	return cmocka_run_group_tests_name("actor_sched", tests, NULL, NULL);
}
