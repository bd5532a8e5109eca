/* test_liveness.c: work is never stranded beside an idle executor (issue
 * 15, "never strand work"): a wake-up handed back by a notifier that found
 * nobody to claim, a woken task past the next-task slot's cap.
 *
 * White-box where a race window is a few instructions wide: the pause
 * points of lib/fault.h hold one thread there (sanitizer builds only; a
 * release build skips those tests, saying why). */
#include "helpers.h"

#include "../lib/runtime.h"

#include <stdatomic.h>

/* Until cond() or T_STALL_NS; cond()'s last answer. */
static bool wait_for(bool (*cond)(void *), void *arg)
{
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	bool ok;
	while (!(ok = cond(arg)) && t_now_ns() < deadline)
		usleep(100);
	return ok;
}

/* ---- a notifier that finds no bit to claim (wake.c) ----------------------
 * Notifier A takes num_searching 0 -> 1 to wake a parked executor, but
 * executor P is between its idle count and its bit: no bit to claim.
 * Meanwhile P sets its bit, re-checks every queue (empty) and sleeps;
 * then B queues work and, seeing A's count, leaves the wake-up to "the
 * searcher".  A handed the count back without looking again: B's work
 * waited beside the sleeping P for as long as the other executor ran
 * (here a task that computes until that work has run, or T_STALL_NS).
 * The pause points hold P before its bit and A after its failed claim. */
struct unclaimed {
	cbcmn_runtime *rt;
	_Atomic int hog_started, late_ran, ran_in_time;
	_Atomic uint32_t hog_exec;
	_Atomic int p_held, a_held; /* the pause points reached */
	_Atomic int b_go;           /* B: queue the work now */
	uint32_t p;                 /* the executor that parks */
};

static struct unclaimed *uc; /* for the pause hook */

static int64_t uc_hog(cbcmn_cx *cx, void *arg)
{
	struct unclaimed *u = arg;
	atomic_store(&u->hog_exec, cbcmn_cx_executor(cx));
	atomic_store(&u->hog_started, 1);
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&u->late_ran) && t_now_ns() < deadline)
		;
	atomic_store(&u->ran_in_time, atomic_load(&u->late_ran));
	return 0;
}

static int64_t uc_late(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	atomic_store(&((struct unclaimed *)arg)->late_ran, 1);
	return 0;
}

static void *uc_hog_thread(void *arg)
{
	struct unclaimed *u = arg;
	int64_t r;
	cbcmn_runtime_run(u->rt, uc_hog, u, &r);
	return NULL;
}

/* B: queues its work from outside the runtime (the inject queue). */
static void *uc_b_thread(void *arg)
{
	struct unclaimed *u = arg;
	while (!atomic_load(&u->b_go))
		usleep(100);
	int64_t r;
	cbcmn_runtime_run(u->rt, uc_late, u, &r);
	return NULL;
}

static bool p_sleeping(void *arg)
{
	struct unclaimed *u = arg;
	return atomic_load(&u->rt->exec[u->p]->park) == CBCMN__PARK_SLEEPING;
}

static bool p_held(void *arg) { return atomic_load(&((struct unclaimed *)arg)->p_held); }
static bool a_held(void *arg) { return atomic_load(&((struct unclaimed *)arg)->a_held); }
static bool hog_started(void *arg) { return atomic_load(&((struct unclaimed *)arg)->hog_started); }

static bool b_queued(void *arg)
{
	return atomic_load(&((struct unclaimed *)arg)->rt->inj_len) > 0;
}

static void uc_pause(enum cbcmn__pause_point pt, void *exec)
{
	struct unclaimed *u = uc;
	if (pt == CBCMN__P_IDLE_SET && exec == u->rt->exec[u->p] &&
	    !atomic_exchange(&u->p_held, 1)) {
		/* P, counted idle, its bit not set: until A has failed. */
		wait_for(a_held, u);
	} else if (pt == CBCMN__P_NOTIFY_UNCLAIMED && !atomic_exchange(&u->a_held, 1)) {
		/* A, holding the count: P parks, then B queues and sees the
		 * count (its notify returns before its queue_len is read
		 * again: a few ms are plenty for a call that does not block). */
		wait_for(p_sleeping, u);
		atomic_store(&u->b_go, 1);
		wait_for(b_queued, u);
		usleep(20000);
	}
}

static void test_regression_unclaimed_notify_strands_no_work(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.stall_ns = CBCMN_STALL_OFF; /* the monitor would mask it */
	cfg.spin_ns = CBCMN_SPIN_NONE;
	cfg.flags |= CBCMN_CONFIG_NO_INLINE;
	struct unclaimed u = {.rt = t_runtime_cfg(&cfg)};
	if (!cbcmn__pause_set(NULL)) {
		t_destroy(u.rt);
		T_SKIP("pause points need a CBCMN_FAULTS build (make SAN=asan or tsan)");
	}
	uc = &u;
	pthread_t hog, b;
	assert_int_equal(pthread_create(&hog, NULL, uc_hog_thread, &u), 0);
	assert_true(wait_for(hog_started, &u));
	u.p = 1 - atomic_load(&u.hog_exec);
	assert_true(wait_for(p_sleeping, &u));
	assert_int_equal(pthread_create(&b, NULL, uc_b_thread, &u), 0);
	cbcmn__pause_set(uc_pause);
	/* P wakes, finds nothing, parks again: held before its bit. */
	cbcmn__kick(u.rt->exec[u.p]);
	assert_true(wait_for(p_held, &u));
	/* A: nothing queued of its own (its work was taken meanwhile). */
	cbcmn__notify_one(u.rt);
	cbcmn__pause_set(NULL);
	assert_int_equal(atomic_load(&u.a_held), 1);
	pthread_join(b, NULL);
	pthread_join(hog, NULL);
	/* B's work ran while the other executor was still busy: P took it. */
	assert_int_equal(atomic_load(&u.ran_in_time), 1);
	t_destroy(u.rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_regression_unclaimed_notify_strands_no_work),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
