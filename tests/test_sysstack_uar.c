/* test_sysstack_uar: fiber actors parking on the system stack under
 * ASan's fake stacks (detect_stack_use_after_return, turned on in main()
 * whatever ASAN_OPTIONS says; make test's ASan phase runs every suite
 * with them since the twenty-second session).  ASan is told
 * of every change of stack (lib/sched.c): a fiber's end switches away
 * with no fake stack kept, which unmaps it, so its last context must not
 * be saved into a local (switch_to_sched()'s `dead`: a crash at the first
 * actor's end); a task's landing pad, whose jump buffer must stay on
 * the task's stack (CBCMN__LANDING_PAD, lib/runtime.h; lib/overflow.c).
 * Without ASan: a plain ring of fiber actors on two executors, cancelled,
 * cancelled tasks' landings and overflows. */
#include <stdint.h>
#include <time.h>

#include "actor_test.h"

#ifdef __SANITIZE_ADDRESS__
/* ASan's switch of detect_stack_use_after_return, read at every
 * instrumented function's entry: set in main(), fake stacks for every
 * frame after (__asan_default_options would need -rdynamic). */
extern int __asan_option_detect_stack_use_after_return;
#endif

#define K 64

static struct tok_ring uar;
static long uar_want;

/* A token per third actor round a ring of K with mailboxes of 2, until
 * want hops or T_STALL_S seconds; then every actor cancelled, each
 * fiber's end a switch with no fake stack kept. */
static int64_t uar_ring(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	tok_ring_spawn(cx, n, &uar, K, 2);
	cbcmn_actor_msg m = {.type = 1};
	for (long k = 0; k < K; k += 3)
		cbcmn_actor_try_send(NULL, cx, uar.refs[k], &m);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(&uar.hops) < uar_want && t_now_ns() < end)
		cbcmn_sleep(cx, 5000000);
	cbcmn_nursery_cancel(n);
	cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_a_ring_parks_on_the_system_stack_with_fake_stacks(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	atomic_store(&uar.hops, 0);
	atomic_store(&uar.bad, 0);
	uar_want = T_SCALE(200000);
	t_run(rt, uar_ring, NULL, 0);
	t_destroy(rt);
	assert_int_equal(atomic_load(&uar.bad), 0);
	assert_true(atomic_load(&uar.hops) >= uar_want);
}

/* ---- a landing under fake stacks ------------------------------------------ */

#define SPINNERS 32

static _Atomic int spinning;

static int64_t uar_spinner(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	atomic_fetch_add(&spinning, 1);
	for (;;)
		CBCMN_CHECKPOINT(cx); /* ends only by a landing */
	return 0;
}

/* Cancelled tasks land at their pads (task_call_guarded(), sched.c),
 * whose jump buffers are on fake stacks: the landing cleared ASan's
 * shadow from the guard up to that buffer's address, no address of the
 * task's stack (an ASan CHECK failed, "beg.chunk < end.chunk", for a fake
 * stack mapped below the task's: tasks spawned together, their stacks
 * mapped before the fake stacks their first runs map). */
static void test_landings_under_fake_stacks_end_the_tasks(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_nursery *n;
	atomic_store(&spinning, 0);
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	for (int i = 0; i < SPINNERS; i++)
		assert_int_equal(cbcmn_nursery_spawn(NULL, n, uar_spinner, NULL, NULL), 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(&spinning) < SPINNERS && t_now_ns() < end)
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	assert_int_equal(atomic_load(&spinning), SPINNERS);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	t_destroy(rt);
}

/* ---- an overflow under fake stacks ---------------------------------------- */

static int64_t uar_overflow(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return t_recurse(NULL, 0);
}

/* Tasks overflow their stacks: the handler walks the words from the fault
 * up to the task's landing pad (overflow.c, unwinder_on_stack()), whose
 * jump buffer was on a fake stack, mapped above the task's stack as often
 * as not: the walk read on past the stack's top, a fault the handler did
 * not claim, and the process was gone (exit status 255, in about two
 * runs of three of test_actor's overflow in an inline halt's drop).  A
 * few rounds, each with fresh stacks and fake stacks. */
static void test_overflows_under_fake_stacks_end_with_epanic(void **state)
{
	(void)state;
	if (T_TSAN) {
		T_SKIP("TSan cannot follow a jump out of a signal handler");
		return;
	}
	for (int round = 0; round < 4; round++) {
		cbcmn_runtime *rt = t_runtime(1);
		cbcmn_nursery *n;
		assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
		/* The first overflow cancels the nursery, maybe before the
		 * last spawn: that one is refused. */
		assert_int_equal(cbcmn_nursery_spawn(NULL, n, uar_overflow, NULL, NULL), 0);
		for (int i = 1; i < 4; i++) {
			int rc = cbcmn_nursery_spawn(NULL, n, uar_overflow, NULL, NULL);
			if (rc == CBCMN_ECANCELED)
				break;
			assert_int_equal(rc, 0);
		}
		assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_EPANIC);
		t_destroy(rt);
	}
}

int main(void)
{
#ifdef __SANITIZE_ADDRESS__
	__asan_option_detect_stack_use_after_return = 1;
#endif
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_ring_parks_on_the_system_stack_with_fake_stacks),
		cmocka_unit_test(test_landings_under_fake_stacks_end_the_tasks),
		cmocka_unit_test(test_overflows_under_fake_stacks_end_with_epanic),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
