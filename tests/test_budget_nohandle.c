/* test_budget_nohandle: a task nobody can recharge (spawned without a
 * handle) ends with CBCMN_EBUDGET when its budget runs out, instead of
 * waiting for a recharge that cannot come (docs/BUDGETS.md, "Exhaustion
 * and recharge").  A ring of channel tasks with one exhausted member hung
 * its opener: the siblings waited for the member's sends, so await_all
 * never saw every child exhausted and never gave up on it. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cbcmn_io.h"

#include "helpers.h"

#define MEMBERS 3
#define ROUNDS 100 /* per member: far more than the short member can pay */

struct ring {
	cbcmn_chan *c[MEMBERS]; /* member i receives on c[i], sends on c[i + 1] */
	_Atomic int hops;
};

struct member {
	struct ring *r;
	int i;
};

static int64_t member(cbcmn_cx *cx, void *arg)
{
	struct member *m = arg;
	struct ring *r = m->r;
	long tok = 0;
	for (int k = 0; k < ROUNDS; k++) {
		if (m->i != 0 || k != 0) {
			int rc = cbcmn_chan_recv(cx, r->c[m->i], &tok);
			if (rc)
				return rc;
		}
		atomic_fetch_add(&r->hops, 1);
		int rc = cbcmn_chan_send(cx, r->c[(m->i + 1) % MEMBERS], &tok);
		if (rc)
			return rc;
	}
	return 0;
}

/* Open r's channels and a nursery with its members in it, member 1 given
 * 5 channel operations (2 rounds and a receive); h NULL: no handles. */
static cbcmn_nursery *ring_start(cbcmn_cx *cx, struct ring *r, struct member *m, cbcmn_task **h)
{
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n = NULL;
	for (int i = 0; i < MEMBERS; i++)
		TASK_CHECK(cbcmn_chan_create(rt, 1, sizeof(long), &r->c[i]) == 0);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	cbcmn_budget short_b = {.channel_ops = 5};
	for (int i = 0; i < MEMBERS; i++) {
		m[i] = (struct member){r, i};
		cbcmn_spawn_opts so = {.budget = i == 1 ? &short_b : NULL};
		TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, member, &m[i], &so, h ? &h[i] : NULL) == 0);
	}
	return n;
}

static void ring_free(struct ring *r)
{
	for (int i = 0; i < MEMBERS; i++)
		TASK_CHECK(cbcmn_chan_destroy(r->c[i]) == 0);
}

static int64_t ring_opener(cbcmn_cx *cx, void *arg)
{
	struct member m[MEMBERS];
	cbcmn_nursery *n = ring_start(cx, arg, m, NULL);
	int64_t rc = cbcmn_nursery_await_all(cx, n);
	ring_free(arg);
	return rc;
}

static cbcmn_runtime *runtime(uint32_t workers)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	/* No CapBudget: a task lives within what it is given. */
	cfg.caps.flags = CBCMN_CAP_SPAWN | CBCMN_CAPS_EXPLICIT;
	return t_runtime_cfg(&cfg);
}

/* The hang: before, this waited for ever (the watchdog names it). */
static void test_ring_with_an_exhausted_member_without_handle_ends(void **state)
{
	(void)state;
	t_watchdog_start("test_ring_with_an_exhausted_member_without_handle_ends", T_WATCHDOG_S);
	for (uint32_t workers = 1; workers <= 2; workers++) {
		cbcmn_runtime *rt = runtime(workers);
		struct ring r = {0};
		t_run(rt, ring_opener, &r, CBCMN_EBUDGET);
		/* Member 1 passed the token twice and took it a third time:
		 * 0 1 2 0 1 2 0 1, then no further. */
		assert_int_equal(atomic_load(&r.hops), 8);
		t_destroy(rt);
	}
	t_watchdog_stop();
}

/* With a handle its parent can recharge it, so it is not ended: it waits
 * exhausted (the rule before, kept), and the recharge lets the ring finish. */
static int64_t ring_recharged(cbcmn_cx *cx, void *arg)
{
	struct ring *r = arg;
	struct member m[MEMBERS];
	cbcmn_task *h[MEMBERS];
	cbcmn_nursery *n = ring_start(cx, r, m, h);
	/* Member 1 has made its 5 operations at the 8th hop (a yield loop:
	 * bounded by the watchdog). */
	while (atomic_load(&r->hops) < 8)
		cbcmn_yield(cx);
	cbcmn_budget more = {.channel_ops = CBCMN_UNLIMITED};
	TASK_CHECK(cbcmn_budget_recharge(cx, h[1], &more) == 0);
	int64_t rc = cbcmn_nursery_await_all(cx, n);
	for (int i = 0; i < MEMBERS; i++) {
		int64_t res = -1;
		TASK_CHECK(cbcmn_task_join(cx, h[i], &res) == 0);
		TASK_CHECK(res == 0);
	}
	ring_free(r);
	return rc;
}

static void test_member_with_handle_waits_for_its_recharge(void **state)
{
	(void)state;
	t_watchdog_start("test_member_with_handle_waits_for_its_recharge", T_WATCHDOG_S);
	for (uint32_t workers = 1; workers <= 2; workers++) {
		cbcmn_runtime *rt = runtime(workers);
		struct ring r = {0};
		t_run(rt, ring_recharged, &r, 0);
		assert_int_equal(atomic_load(&r.hops), MEMBERS * ROUNDS);
		t_destroy(rt);
	}
	t_watchdog_stop();
}

/* ---- off its fiber ---- */

/* A cbcmn_blocking() function handed its task's context, sending on a
 * channel with it (its task parked meanwhile, on another thread): the
 * costs it runs out of cannot make that thread wait as if it were the
 * task's fiber, nor end the task from it (a longjmp to the task's landing
 * pad from a blocking-pool thread: a crash).  They count down to zero;
 * the task's next cost on its own fiber is the one that stops it. */
struct off_fiber {
	cbcmn_cx *cx;
	cbcmn_chan *c;
	int sent;
	uint64_t ops; /* the task's ops budget */
};

static int64_t send_off_fiber(void *arg)
{
	struct off_fiber *o = arg;
	long v = 7;
	for (int i = 0; i < 3; i++)
		if (cbcmn_chan_try_send(o->cx, o->c, &v) == 0)
			o->sent++;
	return 0;
}

/* fn(o) on a blocking-pool thread, handed cx (o->cx). */
static void call_off_fiber(cbcmn_cx *cx, struct off_fiber *o, cbcmn_blocking_fn fn)
{
	int64_t r = -1;
	o->cx = cx;
	TASK_CHECK(cbcmn_blocking(cx, fn, o, &r) == 0);
	TASK_CHECK(r == 0);
}

static int64_t blocking_sender(cbcmn_cx *cx, void *arg)
{
	struct off_fiber *o = arg;
	call_off_fiber(cx, o, send_off_fiber);
	long v;
	cbcmn_chan_try_recv(cx, o->c, &v); /* out of channel_ops: ends here */
	return 1;
}

/* fn(o) spawned without a handle, with budget b, beside o's channel of
 * 4 longs; await_all's result. */
static int64_t run_off_fiber(cbcmn_cx *cx, struct off_fiber *o, cbcmn_task_fn fn,
			     const cbcmn_budget *b)
{
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_chan_create(rt, 4, sizeof(long), &o->c) == 0);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	cbcmn_spawn_opts so = {.budget = b};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, fn, o, &so, NULL) == 0);
	int64_t rc = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(cbcmn_chan_destroy(o->c) == 0);
	return rc;
}

static int64_t spawn_blocking_sender(cbcmn_cx *cx, void *arg)
{
	cbcmn_budget b = {.channel_ops = 1};
	return run_off_fiber(cx, arg, blocking_sender, &b);
}

static void test_costs_off_its_fiber_only_count(void **state)
{
	(void)state;
	t_watchdog_start("test_costs_off_its_fiber_only_count", T_WATCHDOG_S);
	cbcmn_runtime *rt = runtime(2);
	struct off_fiber o = {0};
	t_run(rt, spawn_blocking_sender, &o, CBCMN_EBUDGET);
	assert_int_equal(o.sent, 3); /* counted, not stopped, off its fiber */
	t_destroy(rt);
	t_watchdog_stop();
}

/* What it could not pay off its fiber is its debt, not spent to zero: its
 * cbcmn_blocking() call pays it as it returns to its fiber, where nobody
 * recharges it: it ends there.  Before, its channel_ops were clamped to 0
 * and the two sends past its budget were free (s16 candidate issue). */
static int64_t blocking_sender_goes_on(cbcmn_cx *cx, void *arg)
{
	struct off_fiber *o = arg;
	call_off_fiber(cx, o, send_off_fiber);
	o->sent += 100; /* not reached: it owes 2 channel_ops */
	return 1;
}

static int64_t spawn_blocking_sender_goes_on(cbcmn_cx *cx, void *arg)
{
	cbcmn_budget b = {.channel_ops = 1};
	return run_off_fiber(cx, arg, blocking_sender_goes_on, &b);
}

static void test_costs_off_its_fiber_are_its_debt(void **state)
{
	(void)state;
	t_watchdog_start("test_costs_off_its_fiber_are_its_debt", T_WATCHDOG_S);
	cbcmn_runtime *rt = runtime(2);
	struct off_fiber o = {0};
	t_run(rt, spawn_blocking_sender_goes_on, &o, CBCMN_EBUDGET);
	assert_int_equal(o.sent, 3);
	t_destroy(rt);
	t_watchdog_stop();
}

/* A long run of costs off its fiber: more than a countdown window
 * (yield_interval ops) of channel operations.  The window's end used to
 * yield, and pay for the next window (waiting, or ending the task),
 * on the pool thread as if it were the task's fiber: a crash. */
#define OFF_FIBER_OPS (4 * (int)CBCMN_YIELD_INTERVAL_DEFAULT)

static int64_t churn_off_fiber(void *arg)
{
	struct off_fiber *o = arg;
	long v = 7;
	for (int i = 0; i < OFF_FIBER_OPS; i++) {
		if (cbcmn_chan_try_send(o->cx, o->c, &v) == 0)
			o->sent++;
		cbcmn_chan_try_recv(o->cx, o->c, &v);
	}
	/* Off its fiber too: it must not write the debt off. */
	CBCMN_CHECKPOINT(o->cx);
	return 0;
}

static int64_t blocking_churner(cbcmn_cx *cx, void *arg)
{
	call_off_fiber(cx, arg, churn_off_fiber);
	for (int i = 0; i < 4; i++)
		CBCMN_CHECKPOINT(cx); /* its own fiber: ends here if out of ops */
	return 1;
}

static int64_t spawn_churner(cbcmn_cx *cx, void *arg)
{
	struct off_fiber *o = arg;
	cbcmn_budget b = {.ops = o->ops};
	return run_off_fiber(cx, o, blocking_churner, &b);
}

static void test_a_window_of_costs_off_its_fiber_only_counts(void **state)
{
	(void)state;
	t_watchdog_start("test_a_window_of_costs_off_its_fiber_only_counts", T_WATCHDOG_S);
	cbcmn_runtime *rt = runtime(2);
	/* Unlimited ops: the window's end is a fairness yield. */
	struct off_fiber o = {.ops = CBCMN_UNLIMITED};
	t_run(rt, spawn_churner, &o, 0);
	assert_int_equal(o.sent, OFF_FIBER_OPS);
	/* Fewer ops than it spends off its fiber (more than a window): the
	 * debt, not written off there, ends it on its own fiber (nobody
	 * recharges it). */
	o = (struct off_fiber){.ops = OFF_FIBER_OPS / 2};
	t_run(rt, spawn_churner, &o, CBCMN_EBUDGET);
	assert_int_equal(o.sent, OFF_FIBER_OPS);
	t_destroy(rt);
	t_watchdog_stop();
}

/* A blocking channel call with its task's context, off its fiber: it
 * would wait as if that thread were the task's fiber (a crash); it is
 * refused instead, as cbcmn_blocking() itself is there. */
static int64_t send_blocking_off_fiber(void *arg)
{
	struct off_fiber *o = arg;
	long v = 7;
	o->sent = cbcmn_chan_send(o->cx, o->c, &v); /* c is full */
	return 0;
}

static int64_t full_then_blocking_send(cbcmn_cx *cx, void *arg)
{
	struct off_fiber *o = arg;
	long v = 0;
	TASK_CHECK(cbcmn_chan_create(cbcmn_cx_runtime(cx), 1, sizeof(long), &o->c) == 0);
	TASK_CHECK(cbcmn_chan_try_send(cx, o->c, &v) == 0);
	call_off_fiber(cx, o, send_blocking_off_fiber);
	TASK_CHECK(cbcmn_chan_try_recv(cx, o->c, &v) == 0);
	TASK_CHECK(cbcmn_chan_destroy(o->c) == 0);
	return 0;
}

static void test_blocking_channel_call_off_its_fiber_is_refused(void **state)
{
	(void)state;
	t_watchdog_start("test_blocking_channel_call_off_its_fiber_is_refused", T_WATCHDOG_S);
	cbcmn_runtime *rt = runtime(2);
	struct off_fiber o = {0};
	t_run(rt, full_then_blocking_send, &o, 0);
	assert_int_equal(o.sent, -EPERM);
	t_destroy(rt);
	t_watchdog_stop();
}

/* ---- cancelled, then out of budget ---- */

/* A cancelled task that runs out of budget in its clean-up (a
 * non-blocking send, which does not look at cancellation) ends with
 * CBCMN_ECANCELED, handle or not, as its wait for budget would end at
 * once: its cancellation is not turned into a failure of its own, and
 * the cancelled nursery's await_all says CBCMN_ECANCELED. */
#define CLEANUP_ROUNDS 200

struct cleanup {
	cbcmn_chan *c;
	cbcmn_nursery *n;
	_Atomic int waiting;
	int64_t result; /* the child's, through its handle */
};

static int64_t send_after_cancel(cbcmn_cx *cx, void *arg)
{
	struct cleanup *cl = arg;
	long v = 0;
	atomic_store(&cl->waiting, 1);
	int rc = cbcmn_chan_recv(cx, cl->c, &v); /* its 1st channel op */
	if (rc != CBCMN_ECANCELED)
		return 1;
	for (int i = 0; i < 4; i++) /* the 2nd is its last, the 3rd cannot pay */
		cbcmn_chan_try_send(cx, cl->c, &v);
	return 2;
}

static int64_t cancel_in_cleanup(cbcmn_cx *cx, void *arg)
{
	struct cleanup *cl = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	bool handle = cl->result != 0;
	cbcmn_task *h = NULL;
	TASK_CHECK(cbcmn_chan_create(rt, 1, sizeof(long), &cl->c) == 0);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &cl->n) == 0);
	cbcmn_budget b = {.channel_ops = 2};
	cbcmn_spawn_opts so = {.budget = &b};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, cl->n, send_after_cancel, cl, &so,
					  handle ? &h : NULL) == 0);
	while (!atomic_load(&cl->waiting))
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_nursery_cancel(cl->n) == 0);
	int64_t rc = cbcmn_nursery_await_all(cx, cl->n);
	if (h)
		TASK_CHECK(cbcmn_task_join(cx, h, &cl->result) == 0);
	TASK_CHECK(cbcmn_chan_destroy(cl->c) == 0);
	return rc;
}

static void test_cancelled_task_out_of_budget_is_cancelled(void **state)
{
	(void)state;
	t_watchdog_start("test_cancelled_task_out_of_budget_is_cancelled", T_WATCHDOG_S);
	/* Rounds: with a handle, its wait counted as exhausted raced with
	 * its own look at the cancellation (the opener could claim it
	 * first, and end it with CBCMN_EBUDGET). */
	for (uint32_t workers = 1; workers <= 2; workers++) {
		cbcmn_runtime *rt = runtime(workers);
		for (int round = 0; round < CLEANUP_ROUNDS; round++) {
			struct cleanup cl = {0};
			t_run(rt, cancel_in_cleanup, &cl, CBCMN_ECANCELED);
			cl = (struct cleanup){.result = -1}; /* with a handle */
			t_run(rt, cancel_in_cleanup, &cl, CBCMN_ECANCELED);
			assert_int_equal(cl.result, CBCMN_ECANCELED);
		}
		t_destroy(rt);
	}
	t_watchdog_stop();
}

/* ---- joined by its handle's holder ---- */

/* A child spawned with a handle, out of ops while the handle's holder is
 * blocked joining it: the holder is the one that would recharge it, so
 * it is ended with CBCMN_EBUDGET (the join returns 0 with that result),
 * whether it ran out before the join began or after.  Both hung. */
#define JOIN_OPS 50

struct joined {
	uint32_t late;     /* the child runs out after the join began */
	bool thread;       /* joined by a thread outside the runtime */
	cbcmn_task *h;
	int64_t result;    /* the join's */
	int rc;            /* the join's */
	_Atomic int spent; /* the child's ops are gone (all but its last) */
	_Atomic int joined;
};

/* Open a nursery (*n) with fn(arg) in it, given ops operations; *h: its
 * handle, or NULL. */
static void open_with_ops(cbcmn_cx *cx, cbcmn_nursery **n, cbcmn_task_fn fn, void *arg,
			  uint64_t ops, cbcmn_task **h)
{
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, n) == 0);
	cbcmn_budget b = {.ops = ops};
	cbcmn_spawn_opts so = {.budget = &b};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, *n, fn, arg, &so, h) == 0);
}

static int64_t run_out(cbcmn_cx *cx, void *arg)
{
	struct joined *j = arg;
	/* Late: after the join is registered (bounded by the watchdog). */
	while (j->late && !atomic_load(&j->joined))
		cbcmn_yield(cx);
	for (int i = 0; i < JOIN_OPS - 1; i++)
		CBCMN_CHECKPOINT(cx);
	atomic_store(&j->spent, 1);
	for (int i = 0; i < JOIN_OPS; i++)
		CBCMN_CHECKPOINT(cx); /* far more than it has left */
	return 1;
}

static void *join_thread(void *arg)
{
	struct joined *j = arg;
	atomic_store(&j->joined, 1); /* about to: the child yields meanwhile */
	j->rc = cbcmn_task_join(NULL, j->h, &j->result);
	return NULL;
}

static int64_t join_run_out(cbcmn_cx *cx, void *arg)
{
	struct joined *j = arg;
	cbcmn_nursery *n;
	open_with_ops(cx, &n, run_out, j, JOIN_OPS, &j->h);
	/* Early: the child has waited (or is about to wait) when we join. */
	while (!j->late && !atomic_load(&j->spent))
		cbcmn_yield(cx);
	for (int i = 0; i < 10 && !j->late; i++)
		cbcmn_yield(cx);
	if (j->thread) {
		pthread_t th;
		TASK_CHECK(pthread_create(&th, NULL, join_thread, j) == 0);
		/* The executor must stay free for the child: no pthread_join
		 * until the join has returned (the await below waits). */
		int64_t rc = cbcmn_nursery_await_all(cx, n);
		TASK_CHECK(pthread_join(th, NULL) == 0);
		return rc;
	}
	atomic_store(&j->joined, 1);
	j->rc = cbcmn_task_join(cx, j->h, &j->result);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_join_of_an_exhausted_child_ends_it(void **state)
{
	(void)state;
	t_watchdog_start("test_join_of_an_exhausted_child_ends_it", T_WATCHDOG_S);
	for (uint32_t workers = 1; workers <= 2; workers++) {
		cbcmn_runtime *rt = runtime(workers);
		for (uint32_t late = 0; late <= 1; late++) {
			for (int thread = 0; thread <= 1; thread++) {
				struct joined j = {.late = late, .thread = thread, .result = -1};
				t_run(rt, join_run_out, &j, CBCMN_EBUDGET);
				assert_int_equal(j.rc, 0);
				assert_int_equal(j.result, CBCMN_EBUDGET);
			}
		}
		t_destroy(rt);
	}
	t_watchdog_stop();
}

/* Out of ops while a child it paid for still runs: that child gives back
 * what it did not use as it ends, so the joined parent waits for it (not
 * counted as exhausted) and is not ended: it goes on with the refund. */
#define PAID_YIELDS 2000

static int64_t paid_child(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (int i = 0; i < PAID_YIELDS; i++)
		cbcmn_yield(cx); /* free: its 40 ops go back to its parent */
	return 0;
}

static int64_t refunded(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	open_with_ops(cx, &n, paid_child, NULL, 40, NULL);
	/* 100 ops, 41 of them spent on the spawn: 70 more need the refund. */
	for (int i = 0; i < 70; i++)
		CBCMN_CHECKPOINT(cx);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 7;
}

static int64_t join_refunded(cbcmn_cx *cx, void *arg)
{
	int64_t *result = arg;
	cbcmn_nursery *n;
	cbcmn_task *h;
	open_with_ops(cx, &n, refunded, NULL, 100, &h);
	TASK_CHECK(cbcmn_task_join(cx, h, result) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_joined_child_refunded_by_its_own_child_goes_on(void **state)
{
	(void)state;
	t_watchdog_start("test_joined_child_refunded_by_its_own_child_goes_on", T_WATCHDOG_S);
	for (uint32_t workers = 1; workers <= 2; workers++) {
		cbcmn_runtime *rt = runtime(workers);
		int64_t result = -1;
		t_run(rt, join_refunded, &result, 0);
		assert_int_equal(result, 7);
		t_destroy(rt);
	}
	t_watchdog_stop();
}

/* The opener joins its exhausted child while a sibling cancels the
 * nursery: the join's give-up and the cancellation claim the child's wait,
 * exactly one wins.  It ends short of its checkpoints, CBCMN_EBUDGET or
 * CBCMN_ECANCELED; never hangs. */
#define RACE_ROUNDS 300
#define RACE_OPS 20

struct race {
	cbcmn_task *h;
	cbcmn_nursery *n;
	int64_t result;
	atomic_int done; /* the child's checkpoints (the opener watches them) */
	uint32_t spin;
};

static int64_t race_child(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	for (r->done = 0; r->done < 2 * RACE_OPS; r->done++)
		CBCMN_CHECKPOINT(cx);
	return 7;
}

static int64_t race_cancel(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	for (uint32_t i = 0; i < r->spin; i++)
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_nursery_cancel(r->n) == 0);
	return 0;
}

static int64_t race_join(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	open_with_ops(cx, &r->n, race_child, r, RACE_OPS, &r->h);
	(void)cbcmn_nursery_spawn(cx, r->n, race_cancel, r, NULL);
	for (uint32_t i = 0; i < r->spin / 2; i++)
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_task_join(cx, r->h, &r->result) == 0);
	(void)cbcmn_nursery_await_all(cx, r->n);
	return 0;
}

static void test_cancel_racing_the_joins_give_up(void **state)
{
	(void)state;
	t_watchdog_start("test_cancel_racing_the_joins_give_up", T_WATCHDOG_S);
	int won[2] = {0, 0};
	for (uint32_t workers = 1; workers <= 2; workers++) {
		cbcmn_runtime *rt = runtime(workers);
		for (int round = 0; round < T_SCALE(RACE_ROUNDS); round++) {
			struct race r = {.result = -1, .spin = (uint32_t)round % 16};
			t_run(rt, race_join, &r, 0);
			assert_true(r.done < 2 * RACE_OPS);
			if (r.result == CBCMN_EBUDGET)
				won[0]++;
			else if (r.result == CBCMN_ECANCELED)
				won[1]++;
			else
				fail_msg("result %lld", (long long)r.result);
		}
		t_destroy(rt);
	}
	print_message("ended %d, cancelled %d\n", won[0], won[1]);
	t_watchdog_stop();
}

/* A nursery a thread opened: nobody can recharge its child (a thread has
 * no budget), so a thread's join ends it once exhausted, before any
 * await. */
static void test_thread_opener_join_ends_it(void **state)
{
	(void)state;
	t_watchdog_start("test_thread_opener_join_ends_it", T_WATCHDOG_S);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.caps.flags = CBCMN_CAP_SPAWN | CBCMN_CAPS_EXPLICIT;
	cfg.budget.ops = RACE_OPS; /* a thread's spawn: a root's budget */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct race r = {.result = -1};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, race_child, &r, &r.h), 0);
	assert_int_equal(cbcmn_task_join(NULL, r.h, &r.result), 0);
	assert_int_equal(r.result, CBCMN_EBUDGET);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_EBUDGET);
	t_destroy(rt);
	t_watchdog_stop();
}

/* Only the opener (t's nursery's) can recharge t: a sibling joining t is
 * not the one that would, so its join must not end t meanwhile.  The
 * opener recharges once the child is out and the sibling has joined. */
struct sibling {
	struct race r;
	atomic_int joining;
};

static int64_t sibling_joiner(cbcmn_cx *cx, void *arg)
{
	struct sibling *s = arg;
	atomic_store(&s->joining, 1);
	TASK_CHECK(cbcmn_task_join(cx, s->r.h, &s->r.result) == 0);
	return 0;
}

static int64_t recharge_after_sibling_join(cbcmn_cx *cx, void *arg)
{
	struct sibling *s = arg;
	cbcmn_nursery *n;
	open_with_ops(cx, &n, race_child, &s->r, RACE_OPS, &s->r.h);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, sibling_joiner, s, NULL) == 0);
	while (!atomic_load(&s->joining) || s->r.done < RACE_OPS - 1)
		cbcmn_yield(cx);
	for (int i = 0; i < 50; i++)
		cbcmn_yield(cx); /* the join registered, the child waits */
	cbcmn_budget more = {.ops = 4 * RACE_OPS};
	TASK_CHECK(cbcmn_budget_recharge(cx, s->r.h, &more) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_sibling_join_leaves_the_recharge_to_the_opener(void **state)
{
	(void)state;
	t_watchdog_start("test_sibling_join_leaves_the_recharge_to_the_opener", T_WATCHDOG_S);
	for (uint32_t workers = 1; workers <= 2; workers++) {
		cbcmn_runtime *rt = runtime(workers);
		struct sibling s = {.r = {.result = -1}};
		t_run(rt, recharge_after_sibling_join, &s, 0);
		assert_int_equal(s.r.result, 7);
		assert_int_equal(s.r.done, 2 * RACE_OPS);
		t_destroy(rt);
	}
	t_watchdog_stop();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ring_with_an_exhausted_member_without_handle_ends),
		cmocka_unit_test(test_member_with_handle_waits_for_its_recharge),
		cmocka_unit_test(test_costs_off_its_fiber_only_count),
		cmocka_unit_test(test_costs_off_its_fiber_are_its_debt),
		cmocka_unit_test(test_a_window_of_costs_off_its_fiber_only_counts),
		cmocka_unit_test(test_blocking_channel_call_off_its_fiber_is_refused),
		cmocka_unit_test(test_cancelled_task_out_of_budget_is_cancelled),
		cmocka_unit_test(test_join_of_an_exhausted_child_ends_it),
		cmocka_unit_test(test_joined_child_refunded_by_its_own_child_goes_on),
		cmocka_unit_test(test_cancel_racing_the_joins_give_up),
		cmocka_unit_test(test_thread_opener_join_ends_it),
		cmocka_unit_test(test_sibling_join_leaves_the_recharge_to_the_opener),
	};
	return cmocka_run_group_tests_name("budget_nohandle", tests, NULL, NULL);
}
