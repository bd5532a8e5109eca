/* test_fiber: fibers at scale and stack overflow (guard page -> panic result). */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "helpers.h"

static int64_t nop(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

/* 100 000 fibers created, run and destroyed, in batches so that many are
 * alive (suspended in yield) at once and stacks are recycled. */
static _Atomic long ran;

static int64_t yield_twice(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_yield(cx);
	cbcmn_yield(cx);
	atomic_fetch_add(&ran, 1);
	return 0;
}

static int64_t spawn_batches(cbcmn_cx *cx, void *arg)
{
	long total = (long)(intptr_t)arg;
	for (long done = 0; done < total;) {
		cbcmn_nursery *n;
		assert_int_equal(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n), 0);
		for (int i = 0; i < 10000 && done < total; i++, done++)
			assert_int_equal(cbcmn_nursery_spawn(cx, n, yield_twice, NULL, NULL), 0);
		assert_int_equal(cbcmn_nursery_await_all(cx, n), 0);
	}
	return 0;
}

static void test_100k_fibers(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.flags = CBCMN_CONFIG_NO_INLINE; /* every task on a fiber of its own */
	cbcmn_runtime *rt;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), 0);
	long n = T_SCALE(100000);
	atomic_store(&ran, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, spawn_batches, (void *)(intptr_t)n, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&ran), n);
	cbcmn_stats st;
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
	assert_int_equal(st.tasks_completed, (uint64_t)n + 1);
	assert_int_equal(st.tasks_live, 0);
	t_destroy(rt);
}

/* ---- stack overflow ---- */

static int64_t overflow(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return t_recurse(NULL, 0);
}

static int64_t sibling_done;

static int64_t sibling(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	/* Runs a while; sees the nursery cancelled by the panicking sibling. */
	for (int i = 0; i < 1000; i++)
		if (cbcmn_yield(cx) == CBCMN_ECANCELED)
			break;
	__atomic_store_n(&sibling_done, 1, __ATOMIC_RELEASE);
	return 0;
}

struct ovf {
	int64_t await_rc;
	int inline_child;
};

/* Opens a nursery with an overflowing child and a well-behaved sibling. */
static int64_t parent(cbcmn_cx *cx, void *arg)
{
	struct ovf *o = arg;
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(cx, n, overflow, NULL, NULL), 0);
	assert_int_equal(cbcmn_nursery_spawn(cx, n, sibling, NULL, NULL), 0);
	o->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void overflow_case(uint32_t flags)
{
	cbcmn_runtime *rt = t_runtime_flags(1, flags);

	int saved, fd = t_stderr_capture(&saved);
	struct ovf o = {0};
	int64_t r = -1;
	sibling_done = 0;
	assert_int_equal(cbcmn_runtime_run(rt, parent, &o, &r), 0);
	char msg[4096];
	t_stderr_restore(fd, saved, msg, sizeof(msg));

	/* The nursery saw the panic, the parent task itself was fine. */
	assert_int_equal(o.await_rc, CBCMN_EPANIC);
	assert_int_equal(r, 0);
	assert_int_equal(__atomic_load_n(&sibling_done, __ATOMIC_ACQUIRE), 1);
	/* One line naming the task and the stack size. */
	assert_non_null(strstr(msg, "overflowed its 65536-byte stack"));
	assert_non_null(strstr(msg, "cbcmn: task "));

	/* The process and the runtime go on. */
	int64_t again = -1;
	assert_int_equal(cbcmn_runtime_run(rt, nop, NULL, &again), 0);
	assert_int_equal(again, 0);
	t_destroy(rt);
}

static void test_overflow_is_a_panic(void **state)
{
	(void)state;
	if (T_TSAN)
		T_SKIP("TSan cannot follow a jump out of a signal handler");
	overflow_case(0);
}

/* Same, with the overflowing child on a fiber of its own. */
static void test_overflow_no_inline(void **state)
{
	(void)state;
	if (T_TSAN)
		T_SKIP("TSan cannot follow a jump out of a signal handler");
	overflow_case(CBCMN_CONFIG_NO_INLINE);
}

/* A chain of inline runs on one stack: every task on it ends with a panic. */
static int64_t deep_parent(cbcmn_cx *cx, void *arg)
{
	int level = (int)(intptr_t)arg;
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n), 0);
	if (level == 0)
		assert_int_equal(cbcmn_nursery_spawn(cx, n, overflow, NULL, NULL), 0);
	else
		assert_int_equal(cbcmn_nursery_spawn(cx, n, deep_parent,
						     (void *)(intptr_t)(level - 1), NULL), 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_overflow_inline_chain(void **state)
{
	(void)state;
	if (T_TSAN)
		T_SKIP("TSan cannot follow a jump out of a signal handler");
	cbcmn_runtime *rt = t_runtime(1);
	int saved, fd = t_stderr_capture(&saved);
	int64_t r = 0;
	assert_int_equal(cbcmn_runtime_run(rt, deep_parent, (void *)(intptr_t)3, &r), 0);
	char msg[4096];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_int_equal(r, CBCMN_EPANIC);
	cbcmn_stats st;
	cbcmn_stats_snapshot(rt, &st, NULL, 0);
	assert_true(st.total.inline_runs >= 3); /* the chain really ran inline */
	assert_int_equal(st.tasks_live, 0);
	t_destroy(rt);
}

/* ---- 1 000 000 parked fibers ---- */

struct chain {
	cbcmn_task **handles;
	long n;
	_Atomic long parked;
	_Atomic int release;
};


static struct chain *the_chain;

/* Task i parks in a join on task i+1; the last one yields until released. */
static int64_t parked(cbcmn_cx *cx, void *arg)
{
	long i = (long)(intptr_t)arg;
	struct chain *c = the_chain;
	atomic_fetch_add(&c->parked, 1);
	if (i + 1 < c->n) {
		/* Wait until the root has published the next handle. */
		while (__atomic_load_n(&c->handles[i + 1], __ATOMIC_ACQUIRE) == NULL)
			cbcmn_yield(cx);
		int64_t r;
		assert_int_equal(cbcmn_task_join(cx, c->handles[i + 1], &r), 0);
		return r + 1;
	}
	while (!atomic_load(&c->release))
		cbcmn_yield(cx);
	return 0;
}

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

static int64_t spawn_chain(cbcmn_cx *cx, void *arg)
{
	struct chain *c = arg;
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n), 0);
	for (long i = 0; i < c->n; i++) {
		cbcmn_task *h;
		assert_int_equal(cbcmn_nursery_spawn(cx, n, parked, (void *)(intptr_t)i, &h), 0);
		__atomic_store_n(&c->handles[i], h, __ATOMIC_RELEASE);
	}
	int64_t rc = cbcmn_nursery_await_all(cx, n);
	int64_t r;
	assert_int_equal(cbcmn_task_join(cx, c->handles[0], &r), 0);
	return rc ? rc : r;
}

static void *run_chain(void *arg)
{
	cbcmn_runtime *rt = arg;
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, spawn_chain, the_chain, &r), 0);
	the_chain->n = r; /* the chain's length, as counted by the joins */
	return NULL;
}

/* Does this kernel make lightweight guards (MADV_GUARD_INSTALL, 6.13+),
 * which cost no entry of vm.max_map_count?  Asked as the library asks. */
static bool lightweight_guards(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	void *m = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return false;
	bool yes = madvise(m, (size_t)pg, 102 /* MADV_GUARD_INSTALL */) == 0;
	munmap(m, 2 * (size_t)pg);
	return yes;
}

static long read_long_file(const char *path, long dflt)
{
	FILE *f = fopen(path, "re");
	long v = dflt;
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = dflt;
		fclose(f);
	}
	return v;
}

static void test_million_parked(void **state)
{
	(void)state;
	long n = (T_ASAN || T_TSAN) ? 50000 : 1000000;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.flags = CBCMN_CONFIG_NO_INLINE;
	/* Before 6.13 a guard is an mprotect, two entries of vm.max_map_count
	 * (65 530 by default) a stack: a million guarded stacks cannot exist
	 * (the runtime refuses a stack past its budget, ~24 500 here, and its
	 * task ends with -ENOMEM: test_stack).  What is measured here is the
	 * cost of a parked fiber, so there they run unguarded, as a program
	 * that needs a million would (guard_stacks_max = UINT32_MAX), unless
	 * the map limit was raised for them (the budget is half of three
	 * quarters of it, docs/FIBERS.md). */
	long maps = read_long_file("/proc/sys/vm/max_map_count", 65530);
	if (!lightweight_guards() && maps / 8 * 3 < n + 4096) {
		printf("[ INFO     ] no lightweight guards (MADV_GUARD_INSTALL, Linux 6.13+) "
		       "and vm.max_map_count %ld allows fewer than %ld guarded stacks: "
		       "they run unguarded (canaries)\n", maps, n);
		cfg.guard_stacks_max = UINT32_MAX;
	}
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct chain *c = calloc(1, sizeof(*c));
	c->n = n;
	c->handles = calloc((size_t)n, sizeof(*c->handles));
	the_chain = c;
	long before = rss_kib();

	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, run_chain, rt), 0);
	uint64_t deadline = t_now_ns() + t_slow() * 120ull * 1000000000ull;
	while (atomic_load(&c->parked) < n && t_now_ns() < deadline)
		usleep(10000);
	assert_int_equal(atomic_load(&c->parked), n);
	long after = rss_kib();
	double per = (double)(after - before) * 1024.0 / (double)n;
	printf("[ INFO     ] %ld parked fibers: %.0f bytes RSS per fiber\n", n, per);
	if (!T_ASAN && !T_TSAN)
		assert_true(per < 8192.0); /* the 4.5 KiB target is a benchmark */
	atomic_store(&c->release, 1);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(c->n, n - 1); /* every join saw the next task's result */
	free(c->handles);
	free(c);
	t_destroy(rt);
}

/* ---- a runtime call with too little stack left ---- */

static int64_t deep_yields(cbcmn_cx *cx, void *arg)
{
	long depth = (long)(intptr_t)arg;
	volatile char pad[256];
	pad[0] = (char)depth;
	cbcmn_yield(cx); /* a runtime call at every level */
	if (depth >= t_depth_limit)
		return 0; /* never: keeps the compiler from calling it infinite */
	return deep_yields(cx, (void *)(intptr_t)(depth + 1)) + pad[0];
}

static int64_t await_deep(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(cx, n, deep_yields, NULL, NULL), 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* The overflow is caught at the runtime call before the guard page: the
 * runtime never faults inside its own frames (holding a lock, say). */
static void test_overflow_caught_before_runtime_frames(void **state)
{
	(void)state;
	if (T_TSAN)
		T_SKIP("TSan cannot follow the landing-pad jump");
	cbcmn_runtime *rt = t_runtime(1);
	int saved, fd = t_stderr_capture(&saved);
	int64_t r = 0;
	assert_int_equal(cbcmn_runtime_run(rt, await_deep, NULL, &r), 0);
	char msg[4096];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_int_equal(r, CBCMN_EPANIC);
	assert_non_null(strstr(msg, "is about to overflow its 65536-byte stack"));
	int64_t again = -1;
	assert_int_equal(cbcmn_runtime_run(rt, nop, NULL, &again), 0);
	assert_int_equal(again, 0);
	t_destroy(rt);
}

/* ---- a signal handler on a fiber's stack ---- */

static volatile uintptr_t handler_sp;
static volatile int handled;

/* Frame addresses, not a local's: with ASan's fake stacks a local whose
 * address is taken lives in libasan's fake frames, off the stack (the
 * distance came out negative). */
static void on_usr1(int sig)
{
	(void)sig;
	handler_sp = (uintptr_t)__builtin_frame_address(0);
	/* What a handler typically does: format text, which wants stack. */
	char buf[256];
	snprintf(buf, sizeof(buf), "%d %f", sig, 1.5);
	handled = buf[0] != 0;
}

static int64_t raise_on_fiber(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	*(uintptr_t *)arg = (uintptr_t)__builtin_frame_address(0);
	raise(SIGUSR1);
	return handled ? 0 : -1;
}

/* The kernel's signal frame (xsave area: large with AVX-512) lands on the
 * fiber stack when the handler has no SA_ONSTACK.  Measure it and check
 * that the default stack leaves room for it and a handler. */
static void test_signal_frame_fits(void **state)
{
	(void)state;
	struct sigaction sa = {.sa_handler = on_usr1}, old;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
	cbcmn_runtime *rt = t_runtime(1);
	uintptr_t task_sp = 0;
	int64_t r = -1;
	handled = 0;
	assert_int_equal(cbcmn_runtime_run(rt, raise_on_fiber, &task_sp, &r), 0);
	assert_int_equal(r, 0);
	long frame = (long)(task_sp - handler_sp);
	printf("[ INFO     ] signal frame + handler on a fiber stack: %ld bytes "
	       "(sysconf(_SC_MINSIGSTKSZ) = %ld, default stack %u)\n",
	       frame, sysconf(_SC_MINSIGSTKSZ), CBCMN_STACK_DEFAULT);
	assert_true(frame > 0);
	assert_true(frame >= sysconf(_SC_MINSIGSTKSZ) / 2);  /* it really was on this stack */
	assert_true(frame < (long)CBCMN_STACK_DEFAULT / 4);  /* and leaves most of it */
	t_destroy(rt);
	sigaction(SIGUSR1, &old, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_100k_fibers),
		cmocka_unit_test(test_overflow_is_a_panic),
		cmocka_unit_test(test_overflow_no_inline),
		cmocka_unit_test(test_overflow_inline_chain),
		cmocka_unit_test(test_overflow_caught_before_runtime_frames),
		cmocka_unit_test(test_signal_frame_fits),
		cmocka_unit_test(test_million_parked),
	};
	return cmocka_run_group_tests_name("fiber", tests, NULL, NULL);
}
