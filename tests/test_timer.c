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
	TASK_CHECK(slept_ms >= 30); /* never early; how late is the machine's business */
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

/* Many sleepers on two executors: each wakes at or after its deadline, and
 * they sleep at the same time, not one after another.  (Said by counting
 * the sleepers asleep at once, not by a bound on the total time: 200
 * sleeps of 0-19 ms take 1.9 s one after another, and a loaded machine
 * can take that long for them in parallel too.) */
static _Atomic int asleep, most_asleep;

static int64_t counted_sleeper(cbcmn_cx *cx, void *arg)
{
	int now = atomic_fetch_add(&asleep, 1) + 1;
	int seen = atomic_load(&most_asleep);
	while (now > seen && !atomic_compare_exchange_weak(&most_asleep, &seen, now))
		;
	int64_t r = sleeper(cx, arg);
	atomic_fetch_sub(&asleep, 1);
	return r;
}

static int64_t many(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 200; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, counted_sleeper,
					       (void *)(uintptr_t)((uint64_t)(i % 20) * MS), NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_many_sleepers(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	int64_t r = -1;
	atomic_store(&asleep, 0);
	atomic_store(&most_asleep, 0);
	assert_int_equal(cbcmn_runtime_run(rt, many, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	/* Two executors could only have two at once if a sleep held its
	 * executor. */
	printf("  at most %d of 200 sleepers asleep at once\n", atomic_load(&most_asleep));
	assert_true(atomic_load(&most_asleep) > 2);
	t_destroy(rt);
}

/* A cancelled sleeper wakes with CBCMN_ECANCELED.  An hour's sleep: one
 * that cancellation does not end is a hang the watchdog reports, not a
 * time bound that a loaded machine could break. */
static _Atomic int sleepers_in;

static int64_t long_sleeper(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	atomic_fetch_add(&sleepers_in, 1); /* a cancel from here on ends the sleep */
	return cbcmn_sleep(cx, 3600000 * MS) == CBCMN_ECANCELED ? 1 : -1;
}

static int64_t cancel_sleepers(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	cbcmn_task *h[4];
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 4; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, long_sleeper, NULL, &h[i]) == 0);
	/* All started (a child cancelled before it starts never runs, and
	 * would not return 1): waited for, not assumed after a fixed sleep. */
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	while (atomic_load(&sleepers_in) < 4 && t_now_ns() < deadline)
		cbcmn_sleep(cx, MS);
	TASK_CHECK(atomic_load(&sleepers_in) == 4);
	cbcmn_sleep(cx, 20 * MS); /* most of them in their sleep by now */
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
	atomic_store(&sleepers_in, 0);
	assert_int_equal(cbcmn_runtime_run(rt, cancel_sleepers, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
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
