/* test_nursery: structured concurrency (SPEC-021 §8): await_all's result,
 * fail-fast, explicit and nested cancellation, closed and cancelled
 * nurseries, who may await, with and without inline execution. */
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>


/* Each test runs with inline execution on and off (CBCMN_CONFIG_NO_INLINE),
 * under an alarm that names it: a hang fails the suite, it does not stall. */
struct tcase {
	const char *name;
	uint32_t flags; /* cbcmn_config.flags for the test's runtimes */
};

#define WATCHDOG_S ((T_ASAN || T_TSAN) ? 170u : 55u)
static int watchdog_arm(void **state)
{
	t_watchdog_start(((struct tcase *)*state)->name, WATCHDOG_S);
	return 0;
}

static int watchdog_disarm(void **state)
{
	(void)state;
	t_watchdog_stop();
	return 0;
}

#define NTEST(f, fl)                                                           \
	{                                                                       \
		.name = #f "/" #fl, .test_func = f, .setup_func = watchdog_arm, \
		.teardown_func = watchdog_disarm,                               \
		.initial_state = &(struct tcase){#f "/" #fl, fl},               \
	}
#define INLINE 0u
#define NO_INLINE CBCMN_CONFIG_NO_INLINE

static uint32_t flags_of(void **state)
{
	return ((struct tcase *)*state)->flags;
}

/* Far beyond any wake-up latency: a task still waiting after this for
 * something another task does has been forgotten. */
#define STALL_NS T_STALL_NS

#define mk_rt t_runtime_flags

/* Every test ends here: nothing left alive, and with inline execution off
 * nothing ever ran inline. */
static void finish(cbcmn_runtime *rt, uint32_t flags)
{
	ASSERT_TASK_CHECKS();
	cbcmn_stats s;
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
	assert_int_equal(s.tasks_live, 0);
	if (flags & CBCMN_CONFIG_NO_INLINE)
		assert_int_equal(s.total.inline_runs, 0);
	t_destroy(rt);
}

static void wait_for(_Atomic uint32_t *v, uint32_t want)
{
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (atomic_load(v) < want) {
		if (t_now_ns() > deadline)
			fail_msg("waited for %u tasks to start, %u did", want, atomic_load(v));
		usleep(100);
	}
}

/* Yields until the task is cancelled.  Returns what the yield said
 * (CBCMN_ECANCELED), or -ETIMEDOUT if cancellation never came. */
static int64_t yield_until_cancelled(cbcmn_cx *cx)
{
	uint64_t deadline = t_now_ns() + STALL_NS;
	bool seen = false;
	for (;;) {
		int rc = cbcmn_yield(cx);
		if (rc != 0) {
			TASK_CHECK(rc == CBCMN_ECANCELED);
			TASK_CHECK(cbcmn_cx_cancelled(cx));
			return rc;
		}
		/* A cancel from another thread may land just after the yield
		 * looked; once we have seen it, the next yield must say so. */
		TASK_CHECK(!seen);
		seen = cbcmn_cx_cancelled(cx);
		if (t_now_ns() > deadline)
			return -ETIMEDOUT;
	}
}

static int64_t count_and_return(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	atomic_fetch_add((_Atomic uint32_t *)arg, 1);
	return 0;
}

/* ---- await_all's result -------------------------------------------------- */

#define KIDS 100

struct kids {
	_Atomic uint32_t ran;
	int64_t await_rc;
};

struct kid {
	struct kids *k;
	int64_t i;
};

static int64_t return_index(cbcmn_cx *cx, void *arg)
{
	struct kid *me = arg;
	atomic_fetch_add(&me->k->ran, 1);
	if (me->i % 8 == 0)
		cbcmn_yield(cx);
	/* Positive results are successes too. */
	return me->i;
}

static struct kid kid_args[KIDS];

static void spawn_kids(cbcmn_cx *cx, cbcmn_nursery *n, struct kids *k)
{
	for (int i = 0; i < KIDS; i++) {
		kid_args[i] = (struct kid){k, i};
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, return_index, &kid_args[i], NULL) == 0);
	}
}

static int64_t kids_root(cbcmn_cx *cx, void *arg)
{
	struct kids *k = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	spawn_kids(cx, n, k);
	k->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_await_all_success(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(2, fl);
	struct kids in_task = {0}, in_thread = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, kids_root, &in_task, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(in_task.await_rc, 0);
	assert_int_equal(atomic_load(&in_task.ran), KIDS);

	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	spawn_kids(NULL, n, &in_thread);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	assert_int_equal(atomic_load(&in_thread.ran), KIDS);

	/* A nursery nobody spawned into. */
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	finish(rt, fl);
}

/* ---- fail fast ------------------------------------------------------------ */

struct failfast {
	_Atomic uint32_t sibling_started;
	int64_t sibling_saw; /* what the sibling's yield returned */
	int64_t await_rc;
	_Atomic uint32_t late_spawn_ok;
};

static int64_t sibling(cbcmn_cx *cx, void *arg)
{
	struct failfast *f = arg;
	atomic_store(&f->sibling_started, 1);
	f->sibling_saw = yield_until_cancelled(cx);
	/* A failure of its own, after the first: await_all must not report it. */
	return -7;
}

static int64_t failer(cbcmn_cx *cx, void *arg)
{
	struct failfast *f = arg;
	uint64_t deadline = t_now_ns() + STALL_NS;
	/* Fail only once the sibling runs: it has to be stopped, not skipped. */
	while (!atomic_load(&f->sibling_started) && t_now_ns() < deadline)
		cbcmn_yield(cx);
	return -5;
}

static int64_t failfast_root(cbcmn_cx *cx, void *arg)
{
	struct failfast *f = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, sibling, f, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, failer, f, NULL) == 0);
	f->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_first_failure_cancels_running_sibling(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(2, fl);
	struct failfast f = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, failfast_root, &f, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(f.await_rc, -5);
	assert_int_equal(f.sibling_saw, CBCMN_ECANCELED);
	finish(rt, fl);
}

/* Ten siblings around the failing child, on one executor: whatever order
 * they run in, none may start after the failure. */
#define AROUND 5

struct order {
	_Atomic uint32_t seq;
	_Atomic uint32_t fail_seq; /* seq at the failure, or UINT32_MAX */
	_Atomic uint32_t ran, ran_after_fail;
	int64_t await_rc;
};

static int64_t ordered_sibling(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	(void)cx;
	uint32_t me = atomic_fetch_add(&o->seq, 1);
	atomic_fetch_add(&o->ran, 1);
	if (me > atomic_load(&o->fail_seq))
		atomic_fetch_add(&o->ran_after_fail, 1);
	return 0;
}

static int64_t ordered_failer(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	(void)cx;
	atomic_store(&o->fail_seq, atomic_fetch_add(&o->seq, 1));
	return -5;
}

static int64_t order_root(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	for (int i = 0; i < 2 * AROUND + 1; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, i == AROUND ? ordered_failer : ordered_sibling,
					       o, NULL) == 0);
	o->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_first_failure_cancels_unstarted_siblings(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(1, fl);
	struct order o = {0};
	atomic_init(&o.fail_seq, UINT32_MAX);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, order_root, &o, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(o.await_rc, -5);
	assert_true(atomic_load(&o.fail_seq) != UINT32_MAX);
	assert_int_equal(atomic_load(&o.ran_after_fail), 0);
	/* FIFO or LIFO, the failer sits in the middle: some never ran. */
	assert_true(atomic_load(&o.ran) < 2 * AROUND);
	cbcmn_stats s;
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
	assert_int_equal(s.tasks_completed, 2 * AROUND + 2);
	/* Never-started tasks end without being run: root + failer + ran. */
	assert_int_equal(s.total.tasks_run, 2 + atomic_load(&o.ran));
	finish(rt, fl);
}

/* ---- explicit cancellation ----------------------------------------------- */

struct cancel_early {
	_Atomic uint32_t ran;
	int cancel_rc[2];
	int64_t await_rc;
	int64_t empty_rc;
};

static int64_t cancel_early_root(cbcmn_cx *cx, void *arg)
{
	struct cancel_early *c = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	/* One executor and we do not yield: none of them can start. */
	for (int i = 0; i < KIDS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, count_and_return, &c->ran, NULL) == 0);
	c->cancel_rc[0] = cbcmn_nursery_cancel(n);
	c->cancel_rc[1] = cbcmn_nursery_cancel(n); /* idempotent */
	c->await_rc = cbcmn_nursery_await_all(cx, n);

	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_cancel(n) == 0);
	c->empty_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_cancel_before_start_runs_nothing(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(1, fl);
	struct cancel_early c = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, cancel_early_root, &c, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(c.cancel_rc[0], 0);
	assert_int_equal(c.cancel_rc[1], 0);
	assert_int_equal(atomic_load(&c.ran), 0);
	assert_int_equal(c.await_rc, CBCMN_ECANCELED);
	/* Cancelled with no child at all is still cancelled. */
	assert_int_equal(c.empty_rc, CBCMN_ECANCELED);
	cbcmn_stats s;
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
	assert_int_equal(s.tasks_completed, KIDS + 1);
	assert_int_equal(s.total.tasks_run, 1);
	finish(rt, fl);
}

/* The same from a thread, with the only executor held by a blocker. */
struct blocker {
	_Atomic uint32_t started, release;
};

static int64_t blocker(cbcmn_cx *cx, void *arg)
{
	struct blocker *b = arg;
	(void)cx;
	atomic_store(&b->started, 1);
	uint64_t deadline = t_now_ns() + 2 * STALL_NS;
	/* No yield: nothing else runs on this executor meanwhile. */
	while (!atomic_load(&b->release) && t_now_ns() < deadline)
		;
	return 0;
}

static void test_cancel_from_thread_before_start(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(1, fl);
	struct blocker b = {0};
	_Atomic uint32_t ran = 0;
	cbcmn_nursery *hold, *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &hold), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, hold, blocker, &b, NULL), 0);
	wait_for(&b.started, 1);
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	for (int i = 0; i < KIDS; i++)
		assert_int_equal(cbcmn_nursery_spawn(NULL, n, count_and_return, &ran, NULL), 0);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	atomic_store(&b.release, 1);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	assert_int_equal(cbcmn_nursery_await_all(NULL, hold), 0);
	assert_int_equal(atomic_load(&ran), 0);
	finish(rt, fl);
}

/* A running child sees the cancel at its very next yield (one executor: a
 * sibling cancels between two of its yields). */
struct next_yield {
	cbcmn_nursery *n;
	_Atomic uint32_t a_started, cancel_done;
	_Atomic uint32_t missed; /* yields that said 0 after the cancel */
	bool cancelled_before;
	int64_t saw;
	int cancel_rc;
	int64_t await_rc;
};

static int64_t yielder(cbcmn_cx *cx, void *arg)
{
	struct next_yield *y = arg;
	y->cancelled_before = cbcmn_cx_cancelled(cx);
	atomic_store(&y->a_started, 1);
	uint64_t deadline = t_now_ns() + STALL_NS;
	y->saw = -ETIMEDOUT;
	while (t_now_ns() < deadline) {
		bool was_cancelled = atomic_load(&y->cancel_done);
		int rc = cbcmn_yield(cx);
		if (rc != 0) {
			y->saw = rc;
			TASK_CHECK(cbcmn_cx_cancelled(cx));
			break;
		}
		if (was_cancelled)
			atomic_fetch_add(&y->missed, 1);
	}
	return 0; /* winds down quietly: await_all still reports the cancel */
}

static int64_t canceller(cbcmn_cx *cx, void *arg)
{
	struct next_yield *y = arg;
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (!atomic_load(&y->a_started) && t_now_ns() < deadline)
		cbcmn_yield(cx);
	y->cancel_rc = cbcmn_nursery_cancel(y->n);
	atomic_store(&y->cancel_done, 1);
	return 0;
}

static int64_t next_yield_root(cbcmn_cx *cx, void *arg)
{
	struct next_yield *y = arg;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &y->n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, y->n, yielder, y, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, y->n, canceller, y, NULL) == 0);
	y->await_rc = cbcmn_nursery_await_all(cx, y->n);
	return 0;
}

static void test_cancel_seen_at_next_yield(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(1, fl);
	struct next_yield y = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, next_yield_root, &y, &r), 0);
	assert_int_equal(r, 0);
	assert_false(y.cancelled_before);
	assert_int_equal(y.cancel_rc, 0);
	assert_int_equal(y.saw, CBCMN_ECANCELED);
	assert_int_equal(atomic_load(&y.missed), 0);
	/* Every child returned 0, but the nursery was cancelled. */
	assert_int_equal(y.await_rc, CBCMN_ECANCELED);
	finish(rt, fl);
}

/* Running children on two executors, cancelled by the opening thread. */
#define LOOPERS 4

struct loopers {
	_Atomic uint32_t started;
	_Atomic uint32_t saw_cancel;
};

static int64_t looper(cbcmn_cx *cx, void *arg)
{
	struct loopers *l = arg;
	atomic_fetch_add(&l->started, 1);
	int64_t rc = yield_until_cancelled(cx);
	if (rc == CBCMN_ECANCELED)
		atomic_fetch_add(&l->saw_cancel, 1);
	return rc;
}

static void test_cancel_running_from_thread(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(2, fl);
	struct loopers l = {0};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	for (int i = 0; i < LOOPERS; i++)
		assert_int_equal(cbcmn_nursery_spawn(NULL, n, looper, &l, NULL), 0);
	wait_for(&l.started, LOOPERS);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	assert_int_equal(atomic_load(&l.saw_cancel), LOOPERS);
	finish(rt, fl);
}

/* ---- nested nurseries ------------------------------------------------------ */

/* thread: N0 <- L1 (opens N1) <- 2 x L2 (open N2) <- 2 x L3 each. */
struct nest {
	_Atomic uint32_t l3_started;
	_Atomic uint32_t l3_cancelled_before; /* saw cancelled before the cancel */
	_Atomic uint32_t l3_saw_cancel;
	_Atomic uint32_t l3_spawn_cancelled;  /* spawns refused with ECANCELED */
	_Atomic uint32_t l2_done_cancelled;   /* L2: await said ECANCELED, cx cancelled */
	_Atomic uint32_t l1_done_cancelled;
	_Atomic uint32_t ran_late;            /* children that should never have run */
};

static int64_t l3(cbcmn_cx *cx, void *arg)
{
	struct nest *x = arg;
	if (cbcmn_cx_cancelled(cx))
		atomic_fetch_add(&x->l3_cancelled_before, 1);
	atomic_fetch_add(&x->l3_started, 1);
	int64_t rc = yield_until_cancelled(cx);
	if (rc != CBCMN_ECANCELED)
		return rc;
	atomic_fetch_add(&x->l3_saw_cancel, 1);
	/* A nursery opened now, below the cancelled one, takes no children. */
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	if (cbcmn_nursery_spawn(cx, n, count_and_return, &x->ran_late, NULL) == CBCMN_ECANCELED)
		atomic_fetch_add(&x->l3_spawn_cancelled, 1);
	cbcmn_nursery_await_all(cx, n);
	return rc;
}

static int64_t l2(cbcmn_cx *cx, void *arg)
{
	struct nest *x = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	for (int i = 0; i < 2; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, l3, x, NULL) == 0);
	int64_t rc = cbcmn_nursery_await_all(cx, n);
	if (rc == CBCMN_ECANCELED && cbcmn_cx_cancelled(cx))
		atomic_fetch_add(&x->l2_done_cancelled, 1);
	return rc;
}

static int64_t l1(cbcmn_cx *cx, void *arg)
{
	struct nest *x = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	for (int i = 0; i < 2; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, l2, x, NULL) == 0);
	int64_t rc = cbcmn_nursery_await_all(cx, n);
	if (rc == CBCMN_ECANCELED && cbcmn_cx_cancelled(cx))
		atomic_fetch_add(&x->l1_done_cancelled, 1);
	return rc;
}

static void test_nested_cancel_reaches_grandchildren(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(2, fl);
	struct nest x = {0};
	cbcmn_nursery *n0;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n0), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n0, l1, &x, NULL), 0);
	wait_for(&x.l3_started, 4);
	assert_int_equal(cbcmn_nursery_cancel(n0), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n0), CBCMN_ECANCELED);
	assert_int_equal(atomic_load(&x.l3_cancelled_before), 0);
	assert_int_equal(atomic_load(&x.l3_saw_cancel), 4);
	assert_int_equal(atomic_load(&x.l3_spawn_cancelled), 4);
	assert_int_equal(atomic_load(&x.ran_late), 0);
	assert_int_equal(atomic_load(&x.l2_done_cancelled), 2);
	assert_int_equal(atomic_load(&x.l1_done_cancelled), 1);
	finish(rt, fl);
}

/* cbcmn.h: "If the opener is itself cancelled, n is cancelled too before
 * waiting", so await_all reports CBCMN_ECANCELED even when the children it
 * had all succeeded.  Regression: only the chain of enclosing nurseries was
 * cancelled, never n itself, and await_all returned 0. */
struct late {
	_Atomic uint32_t ready;
	int64_t child_rc;
	int join_rc;
	int64_t saw;
	int64_t await_rc;
};

static int64_t succeed(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t cancelled_opener(cbcmn_cx *cx, void *arg)
{
	struct late *l = arg;
	cbcmn_nursery *n;
	cbcmn_task *h;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, succeed, NULL, &h) == 0);
	l->join_rc = cbcmn_task_join(cx, h, &l->child_rc);
	atomic_store(&l->ready, 1);
	l->saw = yield_until_cancelled(cx);
	l->await_rc = cbcmn_nursery_await_all(cx, n);
	return l->await_rc;
}

static void test_await_in_cancelled_opener_returns_ecanceled(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(2, fl);
	struct late l = {0};
	cbcmn_nursery *n0;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n0), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n0, cancelled_opener, &l, NULL), 0);
	wait_for(&l.ready, 1);
	assert_int_equal(cbcmn_nursery_cancel(n0), 0);
	int64_t r0 = cbcmn_nursery_await_all(NULL, n0);
	assert_int_equal(l.join_rc, 0);
	assert_int_equal(l.child_rc, 0);
	assert_int_equal(l.saw, CBCMN_ECANCELED);
	assert_int_equal(l.await_rc, CBCMN_ECANCELED);
	assert_int_equal(r0, CBCMN_ECANCELED);
	finish(rt, fl);
}

/* ---- closed and cancelled nurseries ---------------------------------------- */

struct closed {
	cbcmn_nursery *n;
	int spawn_rc;
	_Atomic uint32_t ran;
	_Atomic uint32_t started;
	uint32_t spawned_before; /* spawns that got in before await_all */
	int64_t await_rc;
};

/* A child spawning into its own nursery while its opener awaits it. */
static int64_t spawn_into_parent(cbcmn_cx *cx, void *arg)
{
	struct closed *c = arg;
	c->spawn_rc = cbcmn_nursery_spawn(cx, c->n, count_and_return, &c->ran, NULL);
	return 0;
}

static int64_t closed_root(cbcmn_cx *cx, void *arg)
{
	struct closed *c = arg;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &c->n) != 0)
		return -1;
	/* One executor: the child starts only once we wait (inline or not). */
	TASK_CHECK(cbcmn_nursery_spawn(cx, c->n, spawn_into_parent, c, NULL) == 0);
	c->await_rc = cbcmn_nursery_await_all(cx, c->n);
	return 0;
}

static void test_spawn_after_await_began_is_closed(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(1, fl);
	struct closed c = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, closed_root, &c, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(c.spawn_rc, CBCMN_ECLOSED);
	assert_int_equal(c.await_rc, 0);
	assert_int_equal(atomic_load(&c.ran), 0);
	finish(rt, fl);
}

/* The same against a thread that opened the nursery: the child keeps
 * spawning (siblings are welcome) until the thread's await closes it. */
static int64_t spawn_until_closed(cbcmn_cx *cx, void *arg)
{
	struct closed *c = arg;
	atomic_store(&c->started, 1);
	uint64_t deadline = t_now_ns() + STALL_NS;
	while ((c->spawn_rc = cbcmn_nursery_spawn(cx, c->n, count_and_return, &c->ran, NULL)) == 0) {
		c->spawned_before++;
		if (t_now_ns() > deadline)
			break;
		cbcmn_yield(cx);
	}
	return 0;
}

static void test_spawn_after_thread_await_is_closed(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(2, fl);
	struct closed c = {0};
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &c.n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, c.n, spawn_until_closed, &c, NULL), 0);
	wait_for(&c.started, 1);
	assert_int_equal(cbcmn_nursery_await_all(NULL, c.n), 0);
	assert_int_equal(c.spawn_rc, CBCMN_ECLOSED);
	/* Whatever got in before the close ran; nothing after it. */
	assert_int_equal(atomic_load(&c.ran), c.spawned_before);
	finish(rt, fl);
}

struct into_cancelled {
	_Atomic uint32_t ran;
	int spawn_rc;
	int64_t await_rc;
};

static int64_t into_cancelled_root(cbcmn_cx *cx, void *arg)
{
	struct into_cancelled *x = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_cancel(n) == 0);
	x->spawn_rc = cbcmn_nursery_spawn(cx, n, count_and_return, &x->ran, NULL);
	x->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_spawn_into_cancelled_nursery(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(2, fl);
	_Atomic uint32_t ran = 0;
	cbcmn_stats before, after;

	/* From a thread. */
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	assert_int_equal(cbcmn_stats_snapshot(rt, &before, NULL, 0), 0);
	cbcmn_task *h = NULL;
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, count_and_return, &ran, &h), CBCMN_ECANCELED);
	assert_int_equal(cbcmn_stats_snapshot(rt, &after, NULL, 0), 0);
	assert_int_equal(after.tasks_spawned, before.tasks_spawned); /* nothing spawned */
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);

	/* From a task. */
	struct into_cancelled x = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, into_cancelled_root, &x, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(x.spawn_rc, CBCMN_ECANCELED);
	assert_int_equal(x.await_rc, CBCMN_ECANCELED);
	assert_int_equal(atomic_load(&x.ran) + atomic_load(&ran), 0);
	finish(rt, fl);
}

/* ---- who may await ---------------------------------------------------------- */

struct perm {
	cbcmn_nursery *foreign; /* opened by the test thread */
	cbcmn_nursery *mine;    /* opened by the root task */
	_Atomic uint32_t published, thread_tried;
	int64_t task_on_thread_nursery;
	int64_t child_on_parent_nursery;
	int64_t await_rc;
	_Atomic uint32_t ran;
};

static int64_t await_parent(cbcmn_cx *cx, void *arg)
{
	struct perm *p = arg;
	p->child_on_parent_nursery = cbcmn_nursery_await_all(cx, p->mine);
	return 0;
}

static int64_t perm_root(cbcmn_cx *cx, void *arg)
{
	struct perm *p = arg;
	p->task_on_thread_nursery = cbcmn_nursery_await_all(cx, p->foreign);
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &p->mine) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, p->mine, await_parent, p, NULL) == 0);
	atomic_store(&p->published, 1);
	/* Let the thread try to await our nursery before we do; no deadline,
	 * the nursery must stay alive for it (the watchdog bounds this). */
	while (!atomic_load(&p->thread_tried))
		cbcmn_yield(cx);
	/* Still open after three refused awaits: spawning works. */
	TASK_CHECK(cbcmn_nursery_spawn(cx, p->mine, count_and_return, &p->ran, NULL) == 0);
	p->await_rc = cbcmn_nursery_await_all(cx, p->mine);
	return 0;
}

struct perm_run {
	cbcmn_runtime *rt;
	struct perm *p;
	int run_rc;
	int64_t result;
};

static void *perm_main(void *arg)
{
	struct perm_run *x = arg;
	x->run_rc = cbcmn_runtime_run(x->rt, perm_root, x->p, &x->result);
	return NULL;
}

static void test_await_by_non_opener_is_eperm(void **state)
{
	uint32_t fl = flags_of(state);
	cbcmn_runtime *rt = mk_rt(2, fl);
	struct perm p = {0};
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &p.foreign), 0);
	struct perm_run x = {.rt = rt, .p = &p};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, perm_main, &x), 0);
	wait_for(&p.published, 1);
	int64_t thread_on_task_nursery = cbcmn_nursery_await_all(NULL, p.mine);
	atomic_store(&p.thread_tried, 1);
	assert_int_equal(pthread_join(th, NULL), 0);

	assert_int_equal(x.run_rc, 0);
	assert_int_equal(x.result, 0);
	assert_int_equal(p.task_on_thread_nursery, -EPERM);
	assert_int_equal(thread_on_task_nursery, -EPERM);
	assert_int_equal(p.child_on_parent_nursery, -EPERM);
	assert_int_equal(p.await_rc, 0);
	assert_int_equal(atomic_load(&p.ran), 1);
	/* The thread's nursery was left alone by the task: still open. */
	assert_int_equal(cbcmn_nursery_spawn(NULL, p.foreign, count_and_return, &p.ran, NULL), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, p.foreign), 0);
	assert_int_equal(atomic_load(&p.ran), 2);
	finish(rt, fl);
}

/* ---- inline execution -------------------------------------------------------- */

#define FJ_DEPTH 8

/* How a fork-join node waits for its two children. */
enum fj_mode {
	FJ_AWAIT, /* await_all only */
	FJ_JOIN,  /* join both handles, then await_all (nothing left to wait for) */
	FJ_MIXED, /* joins at odd depths, await_all at even ones */
};

struct fj {
	uint32_t depth;
	enum fj_mode mode;
	int64_t leaves;
};

static int64_t fj(cbcmn_cx *cx, void *arg)
{
	struct fj *me = arg;
	if (me->depth == 0) {
		me->leaves = 1;
		return 0;
	}
	struct fj kid[2] = {{.depth = me->depth - 1, .mode = me->mode},
			    {.depth = me->depth - 1, .mode = me->mode}};
	cbcmn_task *h[2];
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	bool join = me->mode == FJ_JOIN || (me->mode == FJ_MIXED && (me->depth & 1));
	for (int i = 0; i < 2; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, fj, &kid[i], join ? &h[i] : NULL) == 0);
	if (join)
		for (int i = 1; i >= 0; i--) {
			int64_t r = -1;
			TASK_CHECK(cbcmn_task_join(cx, h[i], &r) == 0 && r == 0);
		}
	int64_t r = cbcmn_nursery_await_all(cx, n);
	me->leaves = kid[0].leaves + kid[1].leaves;
	return r;
}

static cbcmn_stats fork_join(uint32_t workers, uint32_t flags, enum fj_mode mode)
{
	cbcmn_runtime *rt = mk_rt(workers, flags);
	struct fj root = {.depth = FJ_DEPTH, .mode = mode};
	int64_t r = -1;
	cbcmn_stats s;
	assert_int_equal(cbcmn_runtime_run(rt, fj, &root, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(root.leaves, 1 << FJ_DEPTH);
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
	assert_int_equal(s.tasks_completed, (2u << FJ_DEPTH) - 1);
	finish(rt, flags); /* inline_runs == 0 without inline execution */
	return s;
}

static void test_fork_join_inline_runs(void **state)
{
	uint32_t fl = flags_of(state);
	static const enum fj_mode modes[] = {FJ_AWAIT, FJ_JOIN, FJ_MIXED};
	for (uint32_t w = 1; w <= 2; w++)
		for (int m = 0; m < 3; m++) {
			cbcmn_stats s = fork_join(w, fl, modes[m]);
			/* One executor: a waiting parent always finds its
			 * not-yet-started children on top of its own queue,
			 * whether it waits in await_all or in a join. */
			if (w == 1 && !(fl & CBCMN_CONFIG_NO_INLINE) && s.total.inline_runs == 0)
				fail_msg("fork-join (mode %d) on one executor ran nothing inline", m);
		}
}

/* A chain: each link spawns the next into a nursery of its own (or with a
 * handle it joins) and awaits it; depth links, on 64 KiB stacks.  Run
 * inline, every link nested on the first one's stack, ~700 bytes a level:
 * the 93rd or so ended with CBCMN_EPANIC (stack overflow) where
 * CBCMN_CONFIG_NO_INLINE ran the whole chain.  An optimisation must not
 * change the result: a child is run inline only while half the stack is
 * left (sched.c, take_local()). */
struct chain {
	uint32_t depth;
	bool join;
	_Atomic uint32_t *links;
};

static int64_t chain_link(cbcmn_cx *cx, void *arg)
{
	struct chain *me = arg;
	atomic_fetch_add(me->links, 1);
	if (me->depth == 0)
		return 0;
	struct chain kid = {.depth = me->depth - 1, .join = !me->join, .links = me->links};
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	cbcmn_task *h = NULL;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, chain_link, &kid, me->join ? &h : NULL) == 0);
	int64_t r = 0;
	if (h)
		TASK_CHECK(cbcmn_task_join(cx, h, &r) == 0);
	int64_t a = cbcmn_nursery_await_all(cx, n);
	return r ? r : a;
}

static void test_deep_chain_of_awaits_does_not_overflow(void **state)
{
	uint32_t fl = flags_of(state);
	for (uint32_t w = 1; w <= 2; w++) {
		cbcmn_runtime *rt = mk_rt(w, fl);
		_Atomic uint32_t links = 0;
		struct chain root = {.depth = 400, .links = &links};
		int64_t r = -1;
		assert_int_equal(cbcmn_runtime_run(rt, chain_link, &root, &r), 0);
		if (r != 0)
			fail_msg("the chain ended %lld (%s) after %u of 401 links on %u executor(s)",
				 (long long)r, cbcmn_strerror(r), atomic_load(&links), w);
		assert_int_equal(atomic_load(&links), 401);
		cbcmn_stats s;
		assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
		/* One executor: inline still runs most of them (not turned
		 * off by the bound). */
		if (w == 1 && !(fl & CBCMN_CONFIG_NO_INLINE) && s.total.inline_runs < 200)
			fail_msg("only %llu of 400 links ran inline on one executor",
				 (unsigned long long)s.total.inline_runs);
		finish(rt, fl);
	}
}

/* ---- counting ended children (nursery.c, cbcmn__nursery_child_done()) ------ */

/* A child ending inline under the opener counts on the opener's side, and
 * one ending on a fiber into its executor's batch: a child someone else
 * spawned into the nursery may end either way.  One executor: the opener
 * joins the first child (inline), which leaves a child of its own in n on
 * top of the queue, and the opener's await runs that one inline too. */
struct relay {
	cbcmn_nursery *n;
	int64_t second; /* what the relayed child returns */
	_Atomic uint32_t ran;
};

static int64_t relayed(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct relay *r = arg;
	atomic_fetch_add(&r->ran, 1);
	return r->second;
}

static int64_t relayer(cbcmn_cx *cx, void *arg)
{
	struct relay *r = arg;
	atomic_fetch_add(&r->ran, 1);
	/* Into the opener's nursery, not one of its own. */
	return cbcmn_nursery_spawn(cx, r->n, relayed, r, NULL);
}

static int64_t relay_opener(cbcmn_cx *cx, void *arg)
{
	struct relay *r = arg;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &r->n) == 0);
	cbcmn_task *h;
	int64_t rr = -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, r->n, relayer, r, &h) == 0);
	/* The relayer spawns before the await closes n. */
	TASK_CHECK(cbcmn_task_join(cx, h, &rr) == 0 && rr == 0);
	return cbcmn_nursery_await_all(cx, r->n);
}

static void test_child_spawned_by_a_child_counts_wherever_it_ends(void **state)
{
	uint32_t fl = flags_of(state);
	static const int64_t second[] = {0, -EIO};
	for (uint32_t w = 1; w <= 2; w++)
		for (int i = 0; i < 2; i++) {
			cbcmn_runtime *rt = mk_rt(w, fl);
			struct relay r = {.second = second[i]};
			t_run(rt, relay_opener, &r, second[i]);
			assert_int_equal(atomic_load(&r.ran), 2);
			cbcmn_stats st;
			assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
			if (w == 1 && !(fl & CBCMN_CONFIG_NO_INLINE))
				assert_int_equal(st.total.inline_runs, 2);
			finish(rt, fl);
		}
}

/* A batch of ended children must not wait behind other work: executor 1
 * ends a child of n, then runs a task of another nursery that spins until
 * n's opener is past its await.  Counted late, the opener would never
 * wake, and the spinner would give up (-ETIMEDOUT). */
struct behind {
	_Atomic uint32_t past; /* the opener got past await_all(n) */
};

static int64_t behind_child(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t spin_until_past(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct behind *b = arg;
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (!atomic_load(&b->past))
		if (t_now_ns() > deadline)
			return -ETIMEDOUT;
	return 0;
}

/* Await n, tell the spinner, then await the spinner's nursery m. */
static int64_t await_then_past(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_nursery *m, struct behind *b)
{
	int64_t r = cbcmn_nursery_await_all(cx, n);
	atomic_store(&b->past, 1);
	int64_t rm = cbcmn_nursery_await_all(cx, m);
	return r ? r : rm;
}

/* Three rounds of opener pinned to executor 0, on two executors. */
static void run_behind(uint32_t fl, cbcmn_task_fn opener)
{
	for (int i = 0; i < 3; i++) {
		cbcmn_runtime *rt = mk_rt(2, fl);
		struct behind b = {0};
		assert_int_equal(t_run_pinned(rt, 0, opener, &b), 0);
		ASSERT_TASK_CHECKS();
		finish(rt, fl);
	}
}

static int64_t behind_opener(cbcmn_cx *cx, void *arg)
{
	struct behind *b = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n, *m;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &m) == 0);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	/* In this order on executor 1's pinned queue. */
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, behind_child, NULL, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, m, 1, spin_until_past, b, NULL) == 0);
	return await_then_past(cx, n, m, b);
}

static void test_ended_children_counted_before_other_work(void **state)
{
	run_behind(flags_of(state), behind_opener);
}

/* A child joined inline by a task that is not its nursery's opener counts
 * at once: the joiner then spins until the opener is past its await. */
struct joiner_arg {
	cbcmn_nursery *n;
	struct behind *b;
	_Atomic uint32_t spawned;
};

static int64_t join_then_spin(cbcmn_cx *cx, void *arg)
{
	struct joiner_arg *j = arg;
	cbcmn_task *h;
	int64_t r = -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, j->n, behind_child, NULL, &h) == 0);
	atomic_store(&j->spawned, 1);
	TASK_CHECK(cbcmn_task_join(cx, h, &r) == 0 && r == 0);
	return spin_until_past(cx, j->b);
}

static int64_t joiner_opener(cbcmn_cx *cx, void *arg)
{
	struct behind *b = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n, *m;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &m) == 0);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	struct joiner_arg j = {n, b, 0};
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, m, 1, join_then_spin, &j, NULL) == 0);
	/* Not before the joiner's child is in n: until then n has none. */
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (!atomic_load(&j.spawned) && t_now_ns() < deadline)
		cbcmn_yield(cx);
	return await_then_past(cx, n, m, b);
}

static void test_inline_join_by_another_counted_at_once(void **state)
{
	run_behind(flags_of(state), joiner_opener);
}

/* Children that end every way at once, most of them on the executor that
 * stole them (their ends batched there): a panic (stack overflow), a
 * failure (fail-fast cancels the rest, queued ones end unstarted), and a
 * yield into the cancellation.  The await must come back with the first
 * failure, and nothing be left alive. */
#define MIXED_KIDS 300

static int64_t mixed_kid(cbcmn_cx *cx, void *arg)
{
	uintptr_t i = (uintptr_t)arg;
	if (i == MIXED_KIDS / 2)
		return -EIO;
	if (i % 7 == 3 && !T_ASAN && !T_TSAN)
		return t_recurse(NULL, 0); /* lands: CBCMN_EPANIC */
	if (i % 5 == 1)
		return cbcmn_yield(cx) == CBCMN_ECANCELED ? CBCMN_ECANCELED : 0;
	return 0;
}

static int64_t mixed_opener(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (uintptr_t i = 0; i < MIXED_KIDS; i++)
		if (cbcmn_nursery_spawn(cx, n, mixed_kid, (void *)i, NULL) != 0)
			break; /* cancelled meanwhile: the rest is refused */
	int64_t r = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(r == -EIO || r == CBCMN_EPANIC);
	return 0;
}

static void test_batched_ends_of_every_kind(void **state)
{
	uint32_t fl = flags_of(state);
	for (int round = 0; round < 5; round++) {
		cbcmn_runtime *rt = mk_rt(2, fl);
		t_run(rt, mixed_opener, NULL, 0);
		finish(rt, fl);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		NTEST(test_await_all_success, INLINE),
		NTEST(test_await_all_success, NO_INLINE),
		NTEST(test_first_failure_cancels_running_sibling, INLINE),
		NTEST(test_first_failure_cancels_running_sibling, NO_INLINE),
		NTEST(test_first_failure_cancels_unstarted_siblings, INLINE),
		NTEST(test_first_failure_cancels_unstarted_siblings, NO_INLINE),
		NTEST(test_cancel_before_start_runs_nothing, INLINE),
		NTEST(test_cancel_before_start_runs_nothing, NO_INLINE),
		NTEST(test_cancel_from_thread_before_start, INLINE),
		NTEST(test_cancel_from_thread_before_start, NO_INLINE),
		NTEST(test_cancel_seen_at_next_yield, INLINE),
		NTEST(test_cancel_seen_at_next_yield, NO_INLINE),
		NTEST(test_cancel_running_from_thread, INLINE),
		NTEST(test_cancel_running_from_thread, NO_INLINE),
		NTEST(test_nested_cancel_reaches_grandchildren, INLINE),
		NTEST(test_nested_cancel_reaches_grandchildren, NO_INLINE),
		NTEST(test_await_in_cancelled_opener_returns_ecanceled, INLINE),
		NTEST(test_await_in_cancelled_opener_returns_ecanceled, NO_INLINE),
		NTEST(test_spawn_after_await_began_is_closed, INLINE),
		NTEST(test_spawn_after_await_began_is_closed, NO_INLINE),
		NTEST(test_spawn_after_thread_await_is_closed, INLINE),
		NTEST(test_spawn_after_thread_await_is_closed, NO_INLINE),
		NTEST(test_spawn_into_cancelled_nursery, INLINE),
		NTEST(test_spawn_into_cancelled_nursery, NO_INLINE),
		NTEST(test_await_by_non_opener_is_eperm, INLINE),
		NTEST(test_await_by_non_opener_is_eperm, NO_INLINE),
		NTEST(test_fork_join_inline_runs, INLINE),
		NTEST(test_fork_join_inline_runs, NO_INLINE),
		NTEST(test_deep_chain_of_awaits_does_not_overflow, INLINE),
		NTEST(test_deep_chain_of_awaits_does_not_overflow, NO_INLINE),
		NTEST(test_child_spawned_by_a_child_counts_wherever_it_ends, INLINE),
		NTEST(test_child_spawned_by_a_child_counts_wherever_it_ends, NO_INLINE),
		NTEST(test_ended_children_counted_before_other_work, INLINE),
		NTEST(test_ended_children_counted_before_other_work, NO_INLINE),
		NTEST(test_inline_join_by_another_counted_at_once, INLINE),
		NTEST(test_inline_join_by_another_counted_at_once, NO_INLINE),
		NTEST(test_batched_ends_of_every_kind, INLINE),
		NTEST(test_batched_ends_of_every_kind, NO_INLINE),
	};
	return cmocka_run_group_tests_name("nursery", tests, NULL, NULL);
}
