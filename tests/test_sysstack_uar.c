/* test_sysstack_uar: fiber actors parking on the system stack under
 * ASan's fake stacks (detect_stack_use_after_return, turned on in main()
 * for this binary only; the other suites run with it off).  ASan is told
 * of every change of stack (lib/sched.c): a fiber's end switches away
 * with no fake stack kept, which unmaps it, so its last context must not
 * be saved into a local (switch_to_sched()'s `dead`: a crash at the first
 * actor's end).  Without ASan: a plain ring of fiber actors on two
 * executors, cancelled. */
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

int main(void)
{
#ifdef __SANITIZE_ADDRESS__
	__asan_option_detect_stack_use_after_return = 1;
#endif
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_ring_parks_on_the_system_stack_with_fake_stacks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
