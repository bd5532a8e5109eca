/* test_recstack: task records in their own stack's top page
 * (CBCMN_CONFIG_RECORD_IN_STACK): every stack comes back, whoever frees
 * the record and whenever; the guard still catches an overflow. */
#include <errno.h>
#include <pthread.h>

#include "helpers.h"

#include "../lib/runtime.h"

#define RS_FLAGS (CBCMN_CONFIG_NO_INLINE | CBCMN_CONFIG_RECORD_IN_STACK)

/* Stacks neither in the pool nor in the calling executor's cache: the
 * ones fibers or records hold.  Call from a task of a one-executor runtime
 * (the cache is the executor's own). */
static uint64_t stacks_out(cbcmn_cx *cx)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	struct cbcmn__stack_pool *p = &self->rt->stacks;
	cbcmn__mutex_lock(&p->lock);
	uint64_t out = p->stacks_total - p->nfree;
	cbcmn__mutex_unlock(&p->lock);
	/* The executor's end stack (sched.c) is out for good: not counted. */
	return out - self->exec->stacks.n - (self->exec->end_stack != NULL);
}

static _Atomic int release;

static int64_t park_then_return(cbcmn_cx *cx, void *arg)
{
	while (!atomic_load(&release))
		cbcmn_yield(cx);
	return (int64_t)(intptr_t)arg;
}

/* Spawned from a task: the record is in the child's stack, the child runs
 * on it below the record, and each stack comes back once its handle is
 * joined, the fiber long gone. */
static int64_t parked_root(cbcmn_cx *cx, void *arg)
{
	long n = (long)(intptr_t)arg;
	cbcmn_task **h = calloc((size_t)n, sizeof(*h));
	cbcmn_nursery *nu;
	TASK_CHECK(h && cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nu) == 0);
	uint64_t out0 = stacks_out(cx);
	for (long i = 0; i < n; i++) {
		TASK_CHECK(cbcmn_nursery_spawn(cx, nu, park_then_return, (void *)(intptr_t)i,
					       &h[i]) == 0);
		TASK_CHECK(cbcmn__task_in_stack((struct cbcmn_task *)h[i]));
	}
	/* Taken at the spawn, before any child ran. */
	TASK_CHECK(stacks_out(cx) == out0 + (uint64_t)n);
	atomic_store(&release, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nu) == 0);
	/* Ended, but their handles hold the records, so the stacks too. */
	TASK_CHECK(stacks_out(cx) == out0 + (uint64_t)n);
	int64_t sum = 0;
	for (long i = 0; i < n; i++) {
		int64_t r = -1;
		TASK_CHECK(cbcmn_task_join(cx, h[i], &r) == 0);
		sum += r;
	}
	TASK_CHECK(stacks_out(cx) == out0);
	free(h);
	return sum;
}

static void test_parked_children_resume_and_give_their_stacks_back(void **state)
{
	(void)state;
	long n = T_SCALE(2000);
	atomic_store(&release, 0);
	cbcmn_runtime *rt = t_runtime_flags(1, RS_FLAGS);
	t_run(rt, parked_root, (void *)(intptr_t)n, (int64_t)n * (n - 1) / 2);
	t_destroy(rt);
}

/* Cancelled before it started: it never runs on its stack, and its record
 * (the runtime's reference only, no handle) gives the stack back. */
static _Atomic int cancelled_ran;

static int64_t never_runs(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	atomic_fetch_add(&cancelled_ran, 1);
	return 0;
}

static int64_t cancel_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *nu;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nu) == 0);
	uint64_t out0 = stacks_out(cx);
	for (int i = 0; i < 64; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, nu, never_runs, NULL, NULL) == 0);
	TASK_CHECK(stacks_out(cx) == out0 + 64);
	TASK_CHECK(cbcmn_nursery_cancel(nu) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nu) == CBCMN_ECANCELED);
	TASK_CHECK(stacks_out(cx) == out0);
	return 0;
}

static void test_unstarted_cancelled_children_give_their_stacks_back(void **state)
{
	(void)state;
	atomic_store(&cancelled_ran, 0);
	cbcmn_runtime *rt = t_runtime_flags(1, RS_FLAGS);
	t_run(rt, cancel_root, NULL, 0);
	t_destroy(rt);
	assert_int_equal(atomic_load(&cancelled_ran), 0);
}

/* Handles joined by a thread outside the runtime: the last reference goes
 * there, and the stack back to the shared pool (no executor's cache). */
#define THREAD_JOINS 256
static struct {
	cbcmn_task *h[THREAD_JOINS];
	_Atomic int spawned;
} tj;

static int64_t quick(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	return (int64_t)(intptr_t)arg;
}

static int64_t thread_join_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *nu;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nu) == 0);
	for (int i = 0; i < THREAD_JOINS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, nu, quick, (void *)(intptr_t)i, &tj.h[i]) == 0);
	atomic_store_explicit(&tj.spawned, 1, memory_order_release);
	return cbcmn_nursery_await_all(cx, nu);
}

static int64_t count_out(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	return (int64_t)stacks_out(cx);
}

static void *run_root(void *rt)
{
	int64_t r = -1;
	int rc = cbcmn_runtime_run(rt, thread_join_root, NULL, &r);
	return (void *)(intptr_t)(rc ? rc : r);
}

static void test_thread_joins_give_the_stacks_to_the_pool(void **state)
{
	(void)state;
	atomic_store(&tj.spawned, 0);
	cbcmn_runtime *rt = t_runtime_flags(1, RS_FLAGS);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, run_root, rt), 0);
	while (!atomic_load_explicit(&tj.spawned, memory_order_acquire))
		usleep(1000);
	int64_t sum = 0;
	for (int i = 0; i < THREAD_JOINS; i++) {
		int64_t r = -1;
		assert_int_equal(cbcmn_task_join(NULL, tj.h[i], &r), 0);
		sum += r;
	}
	void *rr;
	assert_int_equal(pthread_join(th, &rr), 0);
	assert_int_equal((intptr_t)rr, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(sum, THREAD_JOINS * (THREAD_JOINS - 1) / 2);
	/* Every stack is back: only the checking task's own is out. */
	t_run(rt, count_out, NULL, 1);
	t_destroy(rt);
}

/* An overflow of a task whose record sits at the top of its stack: the
 * guard below the stack still catches it, the task ends with CBCMN_EPANIC,
 * its record (far above the fault) intact, and the stack comes back. */
static int64_t overflow_task(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return t_recurse(NULL, 0);
}

/* Spawns the task fn(arg) (in its own stack's record), waits for it and
 * returns its result, once its stack is back. */
static int64_t one_child_root(cbcmn_cx *cx, void *fn)
{
	cbcmn_nursery *nu;
	cbcmn_task *h;
	int64_t r = 0;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nu) == 0);
	uint64_t out0 = stacks_out(cx);
	TASK_CHECK(cbcmn_nursery_spawn(cx, nu, (cbcmn_task_fn)fn, NULL, &h) == 0);
	TASK_CHECK(cbcmn__task_in_stack((struct cbcmn_task *)h));
	cbcmn_nursery_await_all(cx, nu);
	TASK_CHECK(cbcmn_task_join(cx, h, &r) == 0);
	TASK_CHECK(stacks_out(cx) == out0);
	return r;
}

static void test_overflow_below_a_record_in_its_stack_is_a_panic(void **state)
{
	(void)state;
	if (T_TSAN) {
		T_SKIP("TSan cannot follow a jump out of a signal handler");
		return;
	}
	cbcmn_runtime *rt = t_runtime_flags(1, RS_FLAGS);
	t_run(rt, one_child_root, (void *)overflow_task, CBCMN_EPANIC);
	t_destroy(rt);
}

/* With inline runs on too: a child run inline borrows its parent's stack
 * and never touches its own, which its record still holds and frees. */
static int64_t fib_task(cbcmn_cx *cx, void *arg)
{
	long n = (long)(intptr_t)arg;
	if (n < 2)
		return n;
	cbcmn_nursery *nu;
	cbcmn_task *a, *b;
	int64_t ra = 0, rb = 0;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nu))
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, nu, fib_task, (void *)(intptr_t)(n - 1), &a) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, nu, fib_task, (void *)(intptr_t)(n - 2), &b) == 0);
	TASK_CHECK(cbcmn_task_join(cx, b, &rb) == 0);
	TASK_CHECK(cbcmn_task_join(cx, a, &ra) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, nu) == 0);
	return ra + rb;
}

static int64_t fib_root(cbcmn_cx *cx, void *arg)
{
	uint64_t out0 = stacks_out(cx);
	int64_t r = fib_task(cx, arg);
	TASK_CHECK(stacks_out(cx) == out0);
	return r;
}

static void test_inline_children_free_the_stacks_their_records_hold(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_flags(1, CBCMN_CONFIG_RECORD_IN_STACK);
	t_run(rt, fib_root, (void *)(intptr_t)12, 144);
	t_destroy(rt);
	rt = t_runtime_flags(2, CBCMN_CONFIG_RECORD_IN_STACK);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, fib_task, (void *)(intptr_t)14, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 377);
	t_destroy(rt);
}

/* No stack to take at the spawn (the map fails): the spawn still
 * succeeds with a plain record; the child then fails for want of a stack
 * at its start, as it would have without the flag. */
#define STARVED 64

static int64_t starved_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_task *h[STARVED];
	cbcmn_nursery *nu;
	int in_stack = 0, plain = 0, nomem = 0;
	atomic_store(&release, 0);
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nu) == 0);
	uint64_t out0 = stacks_out(cx);
	cbcmn__stack_test_fail_map_over = 1; /* no new slab */
	for (long i = 0; i < STARVED; i++) {
		TASK_CHECK(cbcmn_nursery_spawn(cx, nu, park_then_return, (void *)(intptr_t)i,
					       &h[i]) == 0);
		if (cbcmn__task_in_stack((struct cbcmn_task *)h[i]))
			in_stack++;
		else
			plain++;
	}
	atomic_store(&release, 1);
	cbcmn_nursery_await_all(cx, nu);
	cbcmn__stack_test_fail_map_over = 0;
	/* The first -ENOMEM cancels the siblings not yet started (fail
	 * fast): those end CBCMN_ECANCELED, whichever record they have. */
	for (long i = 0; i < STARVED; i++) {
		int64_t r = 0;
		bool own = cbcmn__task_in_stack((struct cbcmn_task *)h[i]);
		TASK_CHECK(cbcmn_task_join(cx, h[i], &r) == 0);
		TASK_CHECK(r == CBCMN_ECANCELED || r == (own ? i : -ENOMEM));
		nomem += r == -ENOMEM;
	}
	TASK_CHECK(in_stack > 0 && plain > 0);
	TASK_CHECK(nomem >= 1);
	TASK_CHECK(stacks_out(cx) == out0);
	return 0;
}

static void test_spawn_without_a_stack_to_take_keeps_a_plain_record(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_flags(1, RS_FLAGS);
	t_run(rt, starved_root, NULL, 0);
	t_destroy(rt);
}

/* A burst of short children, without handles, past the stacks the pool
 * can still hand out: the first ones take the free stacks for their
 * records at the spawn, the later ones get plain records; those run
 * first (LIFO) and found no stack to run on, every one held by an
 * unstarted sibling that would give it back as soon as it ran.  Without
 * the flag each child borrows a stack in turn and all of them succeed:
 * the flag must not turn the burst into -ENOMEM failures (it did, and the
 * first one cancelled the nursery). */
#define BURST 256

static _Atomic long burst_ran;

static int64_t short_child(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	atomic_fetch_add(&burst_ran, 1);
	return 0;
}

static int64_t burst_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *nu;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nu) == 0);
	uint64_t out0 = stacks_out(cx);
	atomic_store(&burst_ran, 0);
	cbcmn__stack_test_fail_map_over = 1; /* no new slab */
	for (long i = 0; i < BURST; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, nu, short_child, NULL, NULL) == 0);
	/* Some records took stacks, and the pool ran dry. */
	TASK_CHECK(stacks_out(cx) > out0);
	int rc = cbcmn_nursery_await_all(cx, nu);
	cbcmn__stack_test_fail_map_over = 0;
	TASK_CHECK(rc == 0);
	TASK_CHECK(atomic_load(&burst_ran) == BURST);
	TASK_CHECK(stacks_out(cx) == out0);
	return 0;
}

static void test_burst_past_the_free_stacks_is_not_enomem(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_flags(1, RS_FLAGS);
	t_run(rt, burst_root, NULL, 0);
	t_destroy(rt);
}

/* The executor's thread ends under an in-stack task (pthread_exit): the
 * reaper restarts that stack below the record, ends the task with
 * CBCMN_EPANIC, and the record then frees the stack. */
static int64_t quitter(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	pthread_exit(NULL);
	return 0;
}

static void test_thread_death_under_a_record_in_its_stack_is_a_panic(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) { /* as test_worker's */
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
		return;
	}
	int saved, fd = t_stderr_capture(&saved);
	cbcmn_runtime *rt = t_runtime_flags(1, RS_FLAGS);
	int64_t r = 0;
	int rc = cbcmn_runtime_run(rt, one_child_root, (void *)quitter, &r);
	char buf[512];
	t_stderr_restore(fd, saved, buf, sizeof(buf));
	assert_int_equal(rc, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, CBCMN_EPANIC);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_parked_children_resume_and_give_their_stacks_back),
		T_WATCHED_TEST(test_unstarted_cancelled_children_give_their_stacks_back),
		T_WATCHED_TEST(test_thread_joins_give_the_stacks_to_the_pool),
		T_WATCHED_TEST(test_overflow_below_a_record_in_its_stack_is_a_panic),
		T_WATCHED_TEST(test_inline_children_free_the_stacks_their_records_hold),
		T_WATCHED_TEST(test_spawn_without_a_stack_to_take_keeps_a_plain_record),
		T_WATCHED_TEST(test_thread_death_under_a_record_in_its_stack_is_a_panic),
		T_WATCHED_TEST(test_burst_past_the_free_stacks_is_not_enomem),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
