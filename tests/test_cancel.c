/* test_cancel: cancellation that always ends (SPEC-021 §5.2.2, §8.3.1): a
 * cancelled task ends at its next checkpoint. */
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_cancelled_checkpoint_loop_ends),
		T_WATCHED_TEST(test_cancelled_limited_spinner_ends_with_its_nursery),
		T_WATCHED_TEST(test_failing_sibling_ends_checkpoint_spinner),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
