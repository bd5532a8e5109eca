/* test_timer: sleeping, timeouts on channels, and cancelling a sleeper
 * (real clock). */
#include <errno.h>

#include "helpers.h"

#define MS 1000000ull

static _Atomic int others_ran;

static int64_t busy_other(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	atomic_fetch_add(&others_ran, 1);
	return 0;
}

static int64_t sleeper(cbcmn_cx *cx, void *arg)
{
	uint64_t ns = (uint64_t)(uintptr_t)arg;
	uint64_t t0 = t_now_ns();
	int rc = cbcmn_sleep(cx, ns);
	uint64_t dt = t_now_ns() - t0;
	TASK_CHECK(rc == 0);
	TASK_CHECK(dt >= ns);
	return (int64_t)(dt / MS);
}

static int64_t sleep_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	cbcmn_task *s;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, sleeper, (void *)(uintptr_t)(30 * MS), &s) == 0);
	/* While it sleeps, the only executor runs others. */
	for (int i = 0; i < 10; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, busy_other, NULL, NULL) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	int64_t slept_ms;
	TASK_CHECK(cbcmn_task_join(cx, s, &slept_ms) == 0);
	TASK_CHECK(slept_ms >= 30 && slept_ms < 2000);
	return r;
}

static void test_sleep_parks_only_the_task(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	atomic_store(&others_ran, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, sleep_main, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&others_ran), 10);
	t_destroy(rt);
}

/* Many sleepers on two executors: each wakes at or after its deadline. */
static int64_t many(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 200; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, sleeper,
					       (void *)(uintptr_t)((uint64_t)(i % 20) * MS), NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_many_sleepers(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	int64_t r = -1;
	uint64_t t0 = t_now_ns();
	assert_int_equal(cbcmn_runtime_run(rt, many, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	assert_true(t_now_ns() - t0 < 2000 * MS); /* in parallel, not one after another */
	t_destroy(rt);
}

/* A cancelled sleeper wakes at once with CBCMN_ECANCELED. */
static int64_t long_sleeper(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	return cbcmn_sleep(cx, 10000 * MS) == CBCMN_ECANCELED ? 1 : -1;
}

static int64_t cancel_sleepers(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	cbcmn_task *h[4];
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 4; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, long_sleeper, NULL, &h[i]) == 0);
	cbcmn_sleep(cx, 20 * MS); /* they are all asleep now */
	cbcmn_nursery_cancel(n);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(r == CBCMN_ECANCELED);
	for (int i = 0; i < 4; i++) {
		int64_t v;
		TASK_CHECK(cbcmn_task_join(cx, h[i], &v) == 0);
		TASK_CHECK(v == 1);
	}
	return 0;
}

static void test_cancel_wakes_sleepers(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	int64_t r = -1;
	uint64_t t0 = t_now_ns();
	assert_int_equal(cbcmn_runtime_run(rt, cancel_sleepers, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	assert_true(t_now_ns() - t0 < 2000 * MS); /* not the 10 s they asked for */
	t_destroy(rt);
}

/* Channel operations that give up. */
static int64_t timeouts(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_chan *c;
	TASK_CHECK(cbcmn_chan_create(cbcmn_cx_runtime(cx), 1, sizeof(long), &c) == 0);
	long v = 7, got = 0;
	uint64_t t0 = t_now_ns();
	TASK_CHECK(cbcmn_chan_recv_timeout(cx, c, &got, 20 * MS) == -ETIMEDOUT);
	TASK_CHECK(t_now_ns() - t0 >= 20 * MS);
	TASK_CHECK(cbcmn_chan_send_timeout(cx, c, &v, 20 * MS) == 0); /* room: at once */
	t0 = t_now_ns();
	TASK_CHECK(cbcmn_chan_send_timeout(cx, c, &v, 20 * MS) == -ETIMEDOUT); /* full */
	TASK_CHECK(t_now_ns() - t0 >= 20 * MS);
	TASK_CHECK(cbcmn_chan_recv_timeout(cx, c, &got, 20 * MS) == 0 && got == 7);
	/* Nothing of the timed-out operations is left behind. */
	TASK_CHECK(cbcmn_chan_try_recv(cx, c, &got) == -EAGAIN);
	TASK_CHECK(cbcmn_chan_recv_timeout(NULL, c, &got, 1) == -EINVAL);
	TASK_CHECK(cbcmn_chan_destroy(c) == 0);
	return 0;
}

static void test_channel_timeouts(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, timeouts, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
}

static void test_bad_input(void **state)
{
	(void)state;
	assert_int_equal(cbcmn_sleep(NULL, 1), -EINVAL);
	assert_int_equal(cbcmn_now(NULL), 0);
	cbcmn_runtime *rt = t_runtime(1);
	uint64_t a = cbcmn_now(rt), b = cbcmn_now(rt);
	assert_true(a > 0 && b >= a);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_sleep_parks_only_the_task),
		T_WATCHED_TEST(test_many_sleepers),
		T_WATCHED_TEST(test_cancel_wakes_sleepers),
		T_WATCHED_TEST(test_channel_timeouts),
		T_WATCHED_TEST(test_bad_input),
	};
	return cmocka_run_group_tests_name("timer", tests, NULL, NULL);
}
