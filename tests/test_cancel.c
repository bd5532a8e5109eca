/* test_cancel: cancellation that always ends (SPEC-021 §5.2.2, §8.3.1): a
 * cancelled task ends at its next checkpoint, await_all's result when a
 * failure and cancellations meet, and cancelling from another thread a
 * nursery that its opener is awaiting, freeing or recycling. */
#include "helpers.h"
#include "net/fserv.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <unistd.h>

/* Far beyond any wake-up latency: a task still waiting after this for
 * something another task or thread does has been forgotten. */
#define STALL_NS T_STALL_NS

/* Every test ends here: the tasks' checks held, nothing left alive. */
static void finish(cbcmn_runtime *rt)
{
	ASSERT_TASK_CHECKS();
	cbcmn_stats s;
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
	assert_int_equal(s.tasks_live, 0);
	t_destroy(rt);
}

static void wait_for(_Atomic uint32_t *v, uint32_t want)
{
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (atomic_load(v) < want) {
		if (t_now_ns() > deadline)
			fail_msg("waited for %u, saw %u", want, atomic_load(v));
		usleep(100);
	}
}

/* ---- a cancelled task ends at its next checkpoint ---------------------------- */

struct spin {
	_Atomic uint32_t started;
	_Atomic uint32_t returned; /* spinners that got past their loop: none may */
};

/* Loops on checkpoints only, never looking at cancellation.  It can only
 * end by being ended. */
static int64_t checkpoint_spinner(cbcmn_cx *cx, void *arg)
{
	struct spin *s = arg;
	atomic_fetch_add(&s->started, 1);
	for (uint64_t i = 0; i < (uint64_t)1 << 62; i++)
		CBCMN_CHECKPOINT(cx);
	atomic_fetch_add(&s->returned, 1);
	return 0;
}

#define SPINNERS 3

/* The bug: cbcmn__checkpoint_slow() dropped what its fairness yield said,
 * so await_all waited for the spinners for ever (the watchdog fired). */
static void test_cancelled_checkpoint_loop_ends(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct spin s = {0};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	for (int i = 0; i < SPINNERS; i++)
		assert_int_equal(cbcmn_nursery_spawn(NULL, n, checkpoint_spinner, &s, NULL), 0);
	wait_for(&s.started, SPINNERS);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	assert_int_equal(atomic_load(&s.returned), 0);
	finish(rt);
}

/* The same with a limited ops budget, whose countdown window ends before the
 * fairness interval does, and a spinner that has a nursery of its own open
 * with another spinner in it: both end, the inner nursery awaited first. */
struct nested_spin {
	struct spin s;
	_Atomic int64_t inner_rc;
};

static int64_t spinner_with_nursery(cbcmn_cx *cx, void *arg)
{
	struct nested_spin *x = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, checkpoint_spinner, &x->s, NULL) == 0);
	/* Never awaited by us: the end at the checkpoint awaits it. */
	return checkpoint_spinner(cx, &x->s);
}

static void test_cancelled_limited_spinner_ends_with_its_nursery(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.budget.ops = (uint64_t)1 << 40;
	cfg.child_budget.ops = 100; /* a window of 100 < 1024 */
	cfg.caps.flags = CBCMN_CAPS_EXPLICIT | CBCMN_CAP_SPAWN | CBCMN_CAP_BUDGET;
	cfg.caps.budget_limit = (cbcmn_budget){CBCMN_UNLIMITED, CBCMN_UNLIMITED, CBCMN_UNLIMITED,
					       CBCMN_UNLIMITED, CBCMN_UNLIMITED};
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct nested_spin x = {0};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, spinner_with_nursery, &x, NULL), 0);
	wait_for(&x.s.started, 2);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	assert_int_equal(atomic_load(&x.s.returned), 0);
	finish(rt);
}

/* Fail fast reaches a spinner too: a sibling's failure is the result. */
static int64_t fail_eio_after_start(cbcmn_cx *cx, void *arg)
{
	struct spin *s = arg;
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (atomic_load(&s->started) < 1 && t_now_ns() < deadline)
		cbcmn_yield(cx);
	return -EIO;
}

static void test_failing_sibling_ends_checkpoint_spinner(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct spin s = {0};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, checkpoint_spinner, &s, NULL), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, fail_eio_after_start, &s, NULL), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), -EIO);
	assert_int_equal(atomic_load(&s.returned), 0);
	finish(rt);
}

/* ---- precedence: a real failure wins over cancellations ---------------------- */

/* Lab mode, one executor (t_runtime_lab()): whatever order the seed picks
 * among runnable tasks, the flags below fix the order in which the
 * children end. */

#define SEEDS 8

struct order {
	_Atomic uint32_t canceled_done; /* the ECANCELED child has returned */
	_Atomic uint32_t failed_done;   /* the -EIO child has returned */
	_Atomic uint32_t saw_cancel;    /* the ECANCELED child was cancelled */
	_Atomic uint32_t sleeping;      /* the ECANCELED child has begun */
	int64_t await_rc;               /* the opener's (the lab reports a failing root) */
};

/* Ends with CBCMN_ECANCELED of its own (an I/O call cancelled by its
 * timeout, say) before the sibling fails. */
static int64_t ecanceled_first(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	atomic_store(&((struct order *)arg)->canceled_done, 1);
	return CBCMN_ECANCELED;
}

static int64_t eio_second(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	while (!atomic_load(&o->canceled_done))
		cbcmn_yield(cx);
	atomic_store(&o->failed_done, 1);
	return -EIO;
}

/* The bug: the earlier ECANCELED took first_error and await_all returned
 * CBCMN_ECANCELED, hiding the failure. */
static int64_t order_canceled_then_eio(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, eio_second, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, ecanceled_first, arg, NULL) == 0);
	((struct order *)arg)->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_eio_after_sibling_ecanceled_is_the_result(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= SEEDS; seed++) {
		cbcmn_runtime *rt = t_runtime_lab(seed);
		struct order o = {0};
		int64_t r = 0;
		assert_int_equal(cbcmn_runtime_run(rt, order_canceled_then_eio, &o, &r), 0);
		assert_int_equal(r, 0);
		assert_int_equal(o.await_rc, -EIO);
		finish(rt);
	}
}

/* The other order: the failure first, the sibling cancelled by it (fail
 * fast) ends after it with CBCMN_ECANCELED. */
static int64_t eio_first(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	/* After the sibling began: else it ends unstarted, never seeing the
	 * cancellation (the same result, a weaker test). */
	while (!atomic_load(&o->sleeping))
		cbcmn_yield(cx);
	atomic_store(&o->failed_done, 1);
	return -EIO;
}

static int64_t ecanceled_second(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	atomic_store(&o->sleeping, 1);
	/* A second of virtual time: ends only by being cancelled. */
	int rc = cbcmn_sleep(cx, 1000000000ull);
	TASK_CHECK(atomic_load(&o->failed_done));
	if (rc == CBCMN_ECANCELED)
		atomic_store(&o->saw_cancel, 1);
	return rc;
}

static int64_t order_eio_then_canceled(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, ecanceled_second, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, eio_first, arg, NULL) == 0);
	((struct order *)arg)->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_eio_before_sibling_ecanceled_is_the_result(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= SEEDS; seed++) {
		cbcmn_runtime *rt = t_runtime_lab(seed);
		struct order o = {0};
		int64_t r = 0;
		assert_int_equal(cbcmn_runtime_run(rt, order_eio_then_canceled, &o, &r), 0);
		assert_int_equal(r, 0);
		assert_int_equal(o.await_rc, -EIO);
		assert_int_equal(atomic_load(&o.saw_cancel), 1);
		finish(rt);
	}
}

/* The nursery cancelled by its opener: one child ends cancelled, then the
 * other fails as it winds down.  The failure is the result. */
static int64_t eio_while_winding_down(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	TASK_CHECK(cbcmn_sleep(cx, 1000000000ull) == CBCMN_ECANCELED);
	while (!atomic_load(&o->canceled_done))
		cbcmn_yield(cx);
	return -EIO;
}

static int64_t sleep_until_cancelled(cbcmn_cx *cx, void *arg)
{
	struct order *o = arg;
	int rc = cbcmn_sleep(cx, 1000000000ull);
	atomic_store(&o->canceled_done, 1);
	return rc;
}

static int64_t cancel_then_eio(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, eio_while_winding_down, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, sleep_until_cancelled, arg, NULL) == 0);
	/* Let both start and sleep, then cancel. */
	TASK_CHECK(cbcmn_sleep(cx, 1000000ull) == 0);
	TASK_CHECK(cbcmn_nursery_cancel(n) == 0);
	((struct order *)arg)->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_eio_after_cancel_wins_over_ecanceled(void **state)
{
	(void)state;
	for (uint64_t seed = 1; seed <= SEEDS; seed++) {
		cbcmn_runtime *rt = t_runtime_lab(seed);
		struct order o = {0};
		int64_t r = 0;
		assert_int_equal(cbcmn_runtime_run(rt, cancel_then_eio, &o, &r), 0);
		assert_int_equal(r, 0);
		assert_int_equal(o.await_rc, -EIO);
		finish(rt);
	}
}

/* ---- cancelling from another thread: the handle ----------------------------- */

/* Handed from the opener to the canceller thread and back. */
struct handoff {
	_Atomic(cbcmn_nursery *) slot; /* a held nursery for the canceller */
	_Atomic uint32_t done;         /* cancels the canceller has made */
	_Atomic uint32_t stop;
	_Atomic int cancel_rc;         /* of the latest cancel */
	uint32_t before, after;        /* cancels that returned 0, -ESRCH */
	uint32_t child_yields;         /* how long the race's child runs */
	bool unheld;                   /* cancel without a hold of its own */
	uint32_t spin_max;             /* the canceller waits up to this long */
	uint64_t rng;
};

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Takes each nursery handed over, waits a random while, cancels and
 * releases it. */
static void *canceller(void *arg)
{
	struct handoff *h = arg;
	while (!atomic_load(&h->stop)) {
		/* acquire: pairs with the opener's release store: n's fields,
		 * and the hold, are ours to see. */
		cbcmn_nursery *n = atomic_exchange_explicit(&h->slot, NULL, memory_order_acquire);
		if (!n) {
			sched_yield();
			continue;
		}
		for (uint32_t i = (uint32_t)(xorshift(&h->rng) % (h->spin_max + 1)); i; i--)
			atomic_signal_fence(memory_order_seq_cst);
		atomic_store(&h->cancel_rc, cbcmn_nursery_cancel(n));
		if (!h->unheld)
			cbcmn_nursery_release(n);
		atomic_fetch_add(&h->done, 1);
	}
	return NULL;
}

static int64_t yield_a_little(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (int i = 0; i < 3; i++)
		cbcmn_yield(cx);
	return 0;
}

/* Wait, as a task, until the canceller has made its cancel number want. */
static bool task_wait_done(cbcmn_cx *cx, struct handoff *h, uint32_t want)
{
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (atomic_load(&h->done) < want) {
		if (t_now_ns() > deadline)
			return false;
		cbcmn_yield(cx);
	}
	return true;
}

/* Each race runs a few hundred rounds, or one second (two under
 * sanitizers) of them: the canceller thread may get a CPU slowly. */
#define RACE_ROUNDS ((T_ASAN || T_TSAN) ? 300u : 400u)
#define RACE_NS ((T_ASAN || T_TSAN) ? 2000000000ull : 1000000000ull)
#define STALE_ROUNDS 50

/* The bug: the opener's await_all put n back in its executor's nursery
 * cache, the next nursery it opened got the same memory, and the late
 * cancel meant for n cancelled that one: its await_all returned
 * CBCMN_ECANCELED though nobody cancelled it (and under ASan, with the
 * cache full, a heap-use-after-free). */
static int64_t stale_rounds(cbcmn_cx *cx, void *arg)
{
	struct handoff *h = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	uint64_t end = t_now_ns() + RACE_NS;
	for (uint32_t round = 0; round < STALE_ROUNDS && t_now_ns() < end; round++) {
		cbcmn_nursery *n, *m;
		if (cbcmn_nursery_open(rt, cx, &n) != 0)
			return -1;
		TASK_CHECK(cbcmn_nursery_hold(n) == 0);
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, yield_a_little, NULL, NULL) == 0);
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
		/* n is over; the canceller gets it only now, and cancels it
		 * while the next nursery is open. */
		if (cbcmn_nursery_open(rt, cx, &m) != 0)
			return -1;
		atomic_store_explicit(&h->slot, n, memory_order_release);
		if (!task_wait_done(cx, h, round + 1))
			return -ETIMEDOUT;
		TASK_CHECK(atomic_load(&h->cancel_rc) == -ESRCH);
		TASK_CHECK(!cbcmn_cx_cancelled(cx));
		TASK_CHECK(cbcmn_nursery_spawn(cx, m, yield_a_little, NULL, NULL) == 0);
		int64_t r = cbcmn_nursery_await_all(cx, m);
		TASK_CHECK(r == 0);
		if (r != 0)
			return r;
	}
	return 0;
}

static void run_with_canceller(cbcmn_runtime *rt, struct handoff *h, cbcmn_task_fn fn)
{
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, canceller, h), 0);
	int64_t r = -1;
	int rc = cbcmn_runtime_run(rt, fn, h, &r);
	atomic_store(&h->stop, 1);
	pthread_join(th, NULL);
	assert_int_equal(rc, 0);
	assert_int_equal(r, 0);
}

static void test_late_cancel_does_not_cancel_recycled_nursery(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct handoff h = {.rng = 0x9e3779b97f4a7c15ull};
	run_with_canceller(rt, &h, stale_rounds);
	finish(rt);
}

/* The canceller cancels at a random moment of the opener's await_all.
 * Whatever the interleaving: a cancel that returned 0 came before the
 * nursery was over and await_all says CBCMN_ECANCELED; one that returned
 * -ESRCH came after, and await_all said 0 (its child always succeeds).
 * The child runs longer after a cancel that came late, shorter after one
 * that came early, so the cancels keep falling near the end of await_all
 * however slowly the canceller thread gets a CPU. */

static int64_t yield_for_a_while(cbcmn_cx *cx, void *arg)
{
	for (uint32_t i = *(const uint32_t *)arg; i; i--)
		cbcmn_yield(cx);
	return 0;
}

static int64_t race_rounds(cbcmn_cx *cx, void *arg)
{
	struct handoff *h = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	uint64_t end = t_now_ns() + RACE_NS;
	for (uint32_t round = 0; round < RACE_ROUNDS && t_now_ns() < end; round++) {
		cbcmn_nursery *n;
		if (cbcmn_nursery_open(rt, cx, &n) != 0)
			return -1;
		TASK_CHECK(cbcmn_nursery_hold(n) == 0);
		uint32_t yields = h->child_yields;
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, yield_for_a_while, &yields, NULL) == 0);
		atomic_store_explicit(&h->slot, n, memory_order_release);
		int64_t r = cbcmn_nursery_await_all(cx, n);
		if (!task_wait_done(cx, h, round + 1))
			return -ETIMEDOUT;
		int crc = atomic_load(&h->cancel_rc);
		TASK_CHECK(crc == 0 || crc == -ESRCH);
		TASK_CHECK(r == (crc == 0 ? CBCMN_ECANCELED : 0));
		if (crc == 0) {
			h->before++;
			h->child_yields /= 2;
		} else {
			h->after++;
			if (h->child_yields < 100000)
				h->child_yields = 2 * h->child_yields + 1;
		}
		/* Our own nursery's cancellation never reaches us. */
		TASK_CHECK(!cbcmn_cx_cancelled(cx));
	}
	return 0;
}

static void test_cancel_races_await_all(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct handoff h = {.rng = 0x2545f4914f6cdd1dull, .spin_max = 2000};
	run_with_canceller(rt, &h, race_rounds);
	/* Which side of the end the cancels fell on: both, usually; the
	 * checks above hold either way. */
	printf("[          ] cancels before the end %u, after %u\n", h.before, h.after);
	finish(rt);
}

/* Without a hold, from a thread, on a nursery whose children wait to be
 * cancelled: the cancel ends the nursery, and await_all returns on another
 * executor while the call is still returning.  The bug: the opener freed n
 * (into its executor's cache) while the canceller still unlocked n->lock:
 * TSan saw pthread_mutex_destroy race the canceller's unlock (test_chan's
 * test_cancel_blocked_many_workers found it). */
#define UNHELD_ROUNDS ((T_ASAN || T_TSAN) ? 50u : 200u)

static int64_t sleep_long(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	return cbcmn_sleep(cx, STALL_NS) == CBCMN_ECANCELED ? 0 : -ETIMEDOUT;
}

static int64_t unheld_rounds(cbcmn_cx *cx, void *arg)
{
	struct handoff *h = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	uint64_t end = t_now_ns() + RACE_NS;
	for (uint32_t round = 0; round < UNHELD_ROUNDS && t_now_ns() < end; round++) {
		cbcmn_nursery *n;
		if (cbcmn_nursery_open(rt, cx, &n) != 0)
			return -1;
		for (int i = 0; i < 2; i++)
			TASK_CHECK(cbcmn_nursery_spawn(cx, n, sleep_long, NULL, NULL) == 0);
		atomic_store_explicit(&h->slot, n, memory_order_release);
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == CBCMN_ECANCELED);
		if (!task_wait_done(cx, h, round + 1))
			return -ETIMEDOUT;
		TASK_CHECK(atomic_load(&h->cancel_rc) == 0);
	}
	return 0;
}

static void test_unheld_cancel_that_ends_the_nursery_is_safe(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct handoff h = {.rng = 0x3c6ef372fe94f82bull, .spin_max = 2000, .unheld = true};
	run_with_canceller(rt, &h, unheld_rounds);
	finish(rt);
}

/* Spinners run inline, on the stack of their opener (a task, one executor),
 * cancelled by the canceller thread: the running one unwinds to its own
 * landing pad, the opener goes on, and the others never start. */
static int64_t inline_spinners(cbcmn_cx *cx, void *arg)
{
	struct handoff *h = arg;
	struct spin s = {0};
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	for (int i = 0; i < SPINNERS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, checkpoint_spinner, &s, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_hold(n) == 0);
	atomic_store_explicit(&h->slot, n, memory_order_release);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == CBCMN_ECANCELED);
	if (!task_wait_done(cx, h, 1))
		return -ETIMEDOUT;
	TASK_CHECK(atomic_load(&h->cancel_rc) == 0);
	TASK_CHECK(atomic_load(&s.started) >= 1);
	TASK_CHECK(atomic_load(&s.returned) == 0);
	return 0;
}

static void test_cancelled_inline_spinner_ends(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct handoff h = {.rng = 0xbb67ae8584caa73bull, .spin_max = 2000};
	run_with_canceller(rt, &h, inline_spinners);
	cbcmn_stats st;
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
	assert_true(st.total.inline_runs >= 1);
	finish(rt);
}

/* A thread opener, its nursery held by the canceller past the end of the
 * runtime: cancel then finds it over (-ESRCH) without touching the
 * runtime, and the release frees it. */
static void test_held_nursery_outlives_its_runtime(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_hold(n), 0);
	assert_int_equal(cbcmn_nursery_hold(n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, yield_a_little, NULL, NULL), 0);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	cbcmn_nursery_release(n);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	finish(rt);
	assert_int_equal(cbcmn_nursery_cancel(n), -ESRCH);
	cbcmn_nursery_release(n);
	assert_int_equal(cbcmn_nursery_hold(NULL), -EINVAL);
	cbcmn_nursery_release(NULL);
}

/* The bug: cbcmn_runtime_destroy() freed the runtime while a thread's
 * nursery was still open (no task alive in it), so the holder's cancel
 * that came next wrote into the freed runtime (ASan: heap-use-after-free
 * in cbcmn__nursery_cancel).  Destroy now says -EBUSY until the nursery
 * is awaited; then the cancel is -ESRCH. */
static void test_destroy_with_thread_nursery_open_is_ebusy(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_hold(n), 0);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	finish(rt);
	assert_int_equal(cbcmn_nursery_cancel(n), -ESRCH);
	cbcmn_nursery_release(n);
}

/* The bug: a release more than the holds, before await_all, took the
 * opener's reference and freed the nursery under it (ASan:
 * heap-use-after-free in cbcmn_nursery_await_all).  It is ignored now. */
static void test_extra_release_before_await_keeps_the_nursery(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_hold(n), 0);
	cbcmn_nursery_release(n);
	cbcmn_nursery_release(n); /* one too many */
	cbcmn_nursery_release(n);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, yield_a_little, NULL, NULL), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	finish(rt);
}

/* ---- a checkpoint off the task's fiber ----------------------------------------- */

struct off_fiber {
	cbcmn_cx *cx;              /* the task's, handed to its blocking function */
	_Atomic uint32_t started;  /* the blocking function runs */
	_Atomic uint32_t cancelled; /* the test cancelled the nursery */
	_Atomic uint32_t saw;      /* the function saw cbcmn_cx_cancelled() */
	int64_t call_rc, result;
};

/* On a pool thread: checkpoints through the task's context, past many
 * countdown windows, the task's nursery cancelled meanwhile. */
static int64_t checkpoints_on_pool_thread(void *arg)
{
	struct off_fiber *o = arg;
	atomic_store(&o->started, 1);
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (!atomic_load(&o->cancelled) && t_now_ns() < deadline)
		usleep(100);
	for (int i = 0; i < 1 << 20; i++)
		CBCMN_CHECKPOINT(o->cx);
	atomic_store(&o->saw, cbcmn_cx_cancelled(o->cx));
	return 7;
}

static int64_t calls_blocking(cbcmn_cx *cx, void *arg)
{
	struct off_fiber *o = arg;
	o->cx = cx;
	o->call_rc = cbcmn_blocking(cx, checkpoints_on_pool_thread, o, &o->result);
	/* Its own checkpoint ends it. */
	for (;;)
		CBCMN_CHECKPOINT(cx);
	return 0;
}

/* The bug: the checkpoints' slow path ran on the pool thread as if it were
 * the task's fiber: its fairness yield's stack check found the pool
 * thread's stack out of the task's and ended the task by a longjmp from
 * that thread onto the parked fiber's stack (a crash, or await_all saying
 * CBCMN_EPANIC and the runtime hanging), and a cancelled task's would have
 * unwound there.  Now they only count: the blocking call returns
 * CBCMN_ECANCELED with fn's result, and the task ends at its own next
 * checkpoint. */
static void test_checkpoint_in_blocking_fn_is_only_counted(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct off_fiber o = {0};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, calls_blocking, &o, NULL), 0);
	wait_for(&o.started, 1);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	atomic_store(&o.cancelled, 1);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	assert_int_equal(o.call_rc, CBCMN_ECANCELED);
	assert_int_equal(o.result, 7);
	assert_int_equal(atomic_load(&o.saw), 1);
	finish(rt);
}

/* ---- tools/net/fserv.c: fs_stop() cancels the server from outside ------ */

/* The listening socket of the server on port: ours to shut down. */
static int listener_on(uint16_t port)
{
	for (int fd = 3; fd < 1024; fd++) {
		struct sockaddr_in a;
		socklen_t al = sizeof(a);
		int acc = 0;
		socklen_t ol = sizeof(acc);
		if (getsockname(fd, (struct sockaddr *)&a, &al) == 0 && a.sin_family == AF_INET &&
		    ntohs(a.sin_port) == port &&
		    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &ol) == 0 && acc)
			return fd;
	}
	return -1;
}

/* The bug: fs_stop() cancelled the server's top nursery from its thread
 * without holding it, so when the acceptor had failed by itself (here its
 * socket is shut down under it) the nursery was already awaited and back
 * in its executor's cache: the cancel locked a destroyed mutex and counted
 * a cancel the runtime never took back (TSan: use of a destroyed mutex,
 * data race with the free).  The server holds it now; the cancel does
 * nothing and fs_stop() reports the acceptor's error. */
static void test_fs_stop_after_acceptor_failed_is_safe(void **state)
{
	(void)state;
	struct fs_config cfg;
	fs_config_init(&cfg);
	cfg.multishot = false;
	struct fs_server *s;
	assert_int_equal(fs_start(&s, &cfg), 0);
	int fd = listener_on(fs_port(s));
	assert_true(fd >= 0);
	assert_int_equal(shutdown(fd, SHUT_RDWR), 0);
	/* Until the server has ended by itself: no task left. */
	uint64_t deadline = t_now_ns() + STALL_NS;
	for (;;) {
		cbcmn_stats st;
		assert_int_equal(cbcmn_stats_snapshot(fs_runtime(s), &st, NULL, 0), 0);
		if (st.tasks_live == 0)
			break;
		if (t_now_ns() > deadline)
			fail_msg("the server did not end with its socket shut down");
		usleep(1000);
	}
	usleep(10000); /* its thread past await_all, and the nursery cached */
	assert_int_equal(fs_stop(s, NULL), -EINVAL);
}

/* The same through fs_start()'s failure path: an executor's setup fails (no
 * such CPU), the server awaits its empty top nursery at once, and
 * fs_start() cancelled it afterwards. */
static void test_fs_start_failure_cancel_is_safe(void **state)
{
	(void)state;
	struct fs_config cfg;
	fs_config_init(&cfg);
	cfg.cpu = 4 * CPU_SETSIZE; /* sched_setaffinity: -EINVAL */
	struct fs_server *s;
	assert_int_equal(fs_start(&s, &cfg), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_cancelled_checkpoint_loop_ends),
		T_WATCHED_TEST(test_cancelled_limited_spinner_ends_with_its_nursery),
		T_WATCHED_TEST(test_failing_sibling_ends_checkpoint_spinner),
		T_WATCHED_TEST(test_eio_after_sibling_ecanceled_is_the_result),
		T_WATCHED_TEST(test_eio_before_sibling_ecanceled_is_the_result),
		T_WATCHED_TEST(test_eio_after_cancel_wins_over_ecanceled),
		T_WATCHED_TEST(test_late_cancel_does_not_cancel_recycled_nursery),
		T_WATCHED_TEST(test_cancel_races_await_all),
		T_WATCHED_TEST(test_unheld_cancel_that_ends_the_nursery_is_safe),
		T_WATCHED_TEST(test_cancelled_inline_spinner_ends),
		T_WATCHED_TEST(test_held_nursery_outlives_its_runtime),
		T_WATCHED_TEST(test_destroy_with_thread_nursery_open_is_ebusy),
		T_WATCHED_TEST(test_checkpoint_in_blocking_fn_is_only_counted),
		T_WATCHED_TEST(test_extra_release_before_await_keeps_the_nursery),
		T_WATCHED_TEST(test_fs_stop_after_acceptor_failed_is_safe),
		T_WATCHED_TEST(test_fs_start_failure_cancel_is_safe),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
