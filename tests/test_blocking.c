/* test_blocking: the blocking pool: results, a bounded pool that never
 * blocks the executors, lazy threads, cancellation before and during fn,
 * the claim-versus-cancel race, misuse, and threads joined at destroy. */
#include "cbcmn_actor.h"
#include "cbcmn_chan.h"
#include "helpers.h"

#include <errno.h>

/* The stress loop: sanitizer runs afford a third of the release size. */
#define STRESS(n) ((T_ASAN || T_TSAN) ? (n) / 3 : (n))

static cbcmn_runtime *rt_pool_cfg(uint32_t workers, uint32_t threads, uint64_t stall_ns)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cfg.blocking_threads = threads;
	cfg.stall_ns = stall_ns;
	return t_runtime_cfg(&cfg);
}

static cbcmn_runtime *rt_pool(uint32_t workers, uint32_t threads)
{
	return rt_pool_cfg(workers, threads, 0);
}

/* For the tests that count the process's threads: no stall monitor, so
 * no spare executor.  The monitor starts the spare while an executor's
 * thread sleeps in a call with work waiting, which a pool thread's
 * pthread_create() is under TSan (it waits for the thread to start),
 * long enough beside a CPU hog: one thread more than the pool (TSan,
 * beside the hog, 1 run in 10 of test_many_calls_four_executors). */
static cbcmn_runtime *rt_pool_counted(uint32_t workers, uint32_t threads)
{
	return rt_pool_cfg(workers, threads, CBCMN_STALL_OFF);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000l};
	nanosleep(&ts, NULL);
}

/* Wait (yielding) until *v reaches want; false after ~10 s. */
static bool wait_for(cbcmn_cx *cx, _Atomic int *v, int want)
{
	uint64_t end = t_now_ns() + 10000000000ull;
	while (atomic_load(v) < want) {
		if (t_now_ns() > end)
			return false;
		cbcmn_sleep(cx, 100000);
	}
	return true;
}

/* ---- the result passes through ------------------------------------------- */

static int64_t add_fn(void *arg)
{
	int64_t *v = arg;
	return v[0] + v[1];
}

static int64_t neg_fn(void *arg)
{
	(void)arg;
	return -EIO;
}

static int64_t result_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	int64_t v[2] = {40, 2}, r = 0;
	TASK_CHECK(cbcmn_blocking(cx, add_fn, v, &r) == 0);
	TASK_CHECK(r == 42);
	TASK_CHECK(cbcmn_blocking(cx, neg_fn, NULL, &r) == 0);
	TASK_CHECK(r == -EIO); /* fn's failure is its result, not the call's */
	TASK_CHECK(cbcmn_blocking(cx, add_fn, v, NULL) == 0);
	return r;
}

static void test_result_passes_through(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_pool(2, 0);
	t_run(rt, result_main, NULL, -EIO);
	t_destroy(rt);
}

/* ---- many calls, a small pool, executors never blocked ------------------- */

#define MANY 200
#define POOL 4

struct many {
	_Atomic int running, max_running, done;
	/* Anything the executors did: the ticker's rounds, calls made and
	 * returned.  Pool threads never touch it. */
	_Atomic uint64_t activity;
	_Atomic uint64_t progress; /* activity while some fn slept */
	_Atomic int max_threads;
	int base_threads;
};

static int64_t sleepy_fn(void *arg)
{
	struct many *m = arg;
	int now = atomic_fetch_add(&m->running, 1) + 1;
	int seen = atomic_load(&m->max_running);
	while (now > seen && !atomic_compare_exchange_weak(&m->max_running, &seen, now))
		;
	uint64_t a0 = atomic_load(&m->activity);
	sleep_ms(1);
	atomic_fetch_add(&m->progress, atomic_load(&m->activity) - a0);
	int th = t_count_threads();
	seen = atomic_load(&m->max_threads);
	while (th > seen && !atomic_compare_exchange_weak(&m->max_threads, &seen, th))
		;
	atomic_fetch_sub(&m->running, 1);
	return 7;
}

static int64_t many_caller(cbcmn_cx *cx, void *arg)
{
	struct many *m = arg;
	int64_t r = 0;
	atomic_fetch_add(&m->activity, 1);
	TASK_CHECK(cbcmn_blocking(cx, sleepy_fn, m, &r) == 0);
	TASK_CHECK(r == 7);
	atomic_fetch_add(&m->activity, 1);
	atomic_fetch_add(&m->done, 1);
	return 0;
}

static int64_t many_ticker(cbcmn_cx *cx, void *arg)
{
	struct many *m = arg;
	while (atomic_load(&m->done) < MANY) {
		atomic_fetch_add(&m->activity, 1);
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t many_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, many_ticker, arg, NULL) == 0);
	for (int i = 0; i < MANY; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, many_caller, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void many_on(uint32_t workers)
{
	cbcmn_runtime *rt = rt_pool_counted(workers, POOL);
	struct many m = {.base_threads = t_count_threads()};
	t_run(rt, many_main, &m, 0);
	assert_int_equal(atomic_load(&m.done), MANY);
	assert_int_equal(atomic_load(&m.running), 0);
	/* Never more than the pool at once, and the pool was used. */
	assert_true(atomic_load(&m.max_running) <= POOL);
	assert_true(atomic_load(&m.max_running) >= 2);
	assert_true(atomic_load(&m.max_threads) <= m.base_threads + POOL);
	/* Tasks ran while fns slept: the executors were free. */
	assert_true(atomic_load(&m.progress) > 0);
	t_destroy(rt);
}

/* One executor: tasks can only run while a fn sleeps if that executor's
 * thread is not the one sleeping. */
static void test_many_calls_one_executor(void **state)
{
	(void)state;
	many_on(1);
}

static void test_many_calls_four_executors(void **state)
{
	(void)state;
	many_on(4);
}

/* ---- the executor stays free: a handshake on one executor ------------------- */

struct handshake {
	_Atomic int in_fn, flag;
};

/* Returns 1 once the flag is set, 0 if it never came: the task that sets
 * it runs on the executor whose task is waiting for this fn. */
static int64_t await_flag_fn(void *arg)
{
	struct handshake *h = arg;
	atomic_store(&h->in_fn, 1);
	uint64_t end = t_now_ns() + 10000000000ull;
	while (!atomic_load(&h->flag))
		if (t_now_ns() > end)
			return 0;
	return 1;
}

static int64_t handshake_waiter(cbcmn_cx *cx, void *arg)
{
	int64_t r = -1;
	TASK_CHECK(cbcmn_blocking(cx, await_flag_fn, arg, &r) == 0);
	TASK_CHECK(r == 1);
	return 0;
}

static int64_t handshake_setter(cbcmn_cx *cx, void *arg)
{
	struct handshake *h = arg;
	while (!atomic_load(&h->in_fn))
		cbcmn_yield(cx);
	atomic_store(&h->flag, 1);
	return 0;
}

static int64_t handshake_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, handshake_setter, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, handshake_waiter, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_executor_runs_others_meanwhile(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_pool(1, 1);
	struct handshake h = {0};
	t_run(rt, handshake_main, &h, 0);
	t_destroy(rt);
}

/* ---- threads start only when all are busy ---------------------------------- */

static int64_t inc_fn(void *arg)
{
	return (int64_t)(intptr_t)arg + 1;
}

static int64_t seq_main(cbcmn_cx *cx, void *arg)
{
	int *threads_seen = arg;
	int base = t_count_threads();
	for (int i = 0; i < T_SCALE(2000); i++) {
		int64_t r = 0;
		TASK_CHECK(cbcmn_blocking(cx, inc_fn, (void *)(intptr_t)i, &r) == 0);
		TASK_CHECK(r == i + 1);
	}
	*threads_seen = t_count_threads() - base;
	return 0;
}

/* One call at a time: the thread that served the last call counts as
 * free before the caller can call again, so one thread serves them all. */
static void test_sequential_calls_use_one_thread(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_pool_counted(2, 8);
	int seen = -1;
	t_run(rt, seq_main, &seen, 0);
	assert_int_equal(seen, 1);
	t_destroy(rt);
}

/* ---- cancellation before fn started --------------------------------------- */

#define QUEUED 20

struct before {
	cbcmn_nursery *nq;
	_Atomic int gate_started, gate_open, entered, never_ran, cancelled_seen;
};

static int64_t gate_fn(void *arg)
{
	struct before *b = arg;
	atomic_fetch_add(&b->gate_started, 1);
	uint64_t end = t_now_ns() + 20000000000ull;
	while (!atomic_load(&b->gate_open) && t_now_ns() < end)
		sleep_ms(1);
	return 1;
}

static int64_t never_fn(void *arg)
{
	struct before *b = arg;
	atomic_fetch_add(&b->never_ran, 1);
	return 0;
}

static int64_t gate_caller(cbcmn_cx *cx, void *arg)
{
	int64_t r = 0;
	TASK_CHECK(cbcmn_blocking(cx, gate_fn, arg, &r) == 0);
	TASK_CHECK(r == 1);
	return 0;
}

static int64_t queued_caller(cbcmn_cx *cx, void *arg)
{
	struct before *b = arg;
	int64_t r = -12345;
	atomic_fetch_add(&b->entered, 1);
	int rc = cbcmn_blocking(cx, never_fn, b, &r);
	TASK_CHECK(rc == CBCMN_ECANCELED);
	TASK_CHECK(r == -12345); /* never ran: *result left alone */
	atomic_fetch_add(&b->cancelled_seen, 1);
	return 0;
}

static int64_t before_main(cbcmn_cx *cx, void *arg)
{
	struct before *b = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *ng;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &ng) == 0);
	for (int i = 0; i < 2; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, ng, gate_caller, b, NULL) == 0);
	TASK_CHECK(wait_for(cx, &b->gate_started, 2)); /* the pool (2) is full */

	TASK_CHECK(cbcmn_nursery_open(rt, cx, &b->nq) == 0);
	for (int i = 0; i < QUEUED; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, b->nq, queued_caller, b, NULL) == 0);
	TASK_CHECK(wait_for(cx, &b->entered, QUEUED));
	cbcmn_sleep(cx, 20000000); /* let them queue their jobs and park */
	TASK_CHECK(cbcmn_nursery_cancel(b->nq) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, b->nq) == CBCMN_ECANCELED);
	TASK_CHECK(atomic_load(&b->cancelled_seen) == QUEUED);

	/* The pool frees up: a job left in the queue would run now. */
	atomic_store(&b->gate_open, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, ng) == 0);
	return 0;
}

static void test_cancel_before_start(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_pool(2, 2);
	struct before b = {0};
	t_run(rt, before_main, &b, 0);
	t_destroy(rt); /* joins the pool: nothing can run any more */
	assert_int_equal(atomic_load(&b.never_ran), 0);
	assert_int_equal(atomic_load(&b.cancelled_seen), QUEUED);
}

/* A task already cancelled does not submit anything. */
struct self_cancel {
	cbcmn_nursery *n;
	_Atomic int ran;
};

static int64_t count_fn(void *arg)
{
	atomic_fetch_add((_Atomic int *)arg, 1);
	return 0;
}

static int64_t self_cancel_child(cbcmn_cx *cx, void *arg)
{
	struct self_cancel *s = arg;
	cbcmn_nursery_cancel(s->n);
	TASK_CHECK(cbcmn_cx_cancelled(cx));
	int64_t r = 99;
	TASK_CHECK(cbcmn_blocking(cx, count_fn, &s->ran, &r) == CBCMN_ECANCELED);
	TASK_CHECK(r == 99);
	return 0;
}

static int64_t self_cancel_main(cbcmn_cx *cx, void *arg)
{
	struct self_cancel *s = arg;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &s->n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, s->n, self_cancel_child, s, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, s->n) == CBCMN_ECANCELED);
	return 0;
}

static void test_already_cancelled_submits_nothing(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_pool(1, 1);
	struct self_cancel s = {0};
	t_run(rt, self_cancel_main, &s, 0);
	t_destroy(rt);
	assert_int_equal(atomic_load(&s.ran), 0);
}

/* ---- cancellation while fn runs -------------------------------------------- */

struct during {
	cbcmn_nursery *n;
	_Atomic int started, release, finished, returned;
};

struct during_arg {
	struct during *d;
	int out; /* on the calling task's stack */
};

static int64_t during_fn(void *arg)
{
	struct during_arg *a = arg;
	atomic_store(&a->d->started, 1);
	uint64_t end = t_now_ns() + 20000000000ull;
	while (!atomic_load(&a->d->release) && t_now_ns() < end)
		sleep_ms(1);
	sleep_ms(5);
	a->out = 7; /* the caller's frame must still be there */
	atomic_store(&a->d->finished, 1);
	return 77;
}

static int64_t during_caller(cbcmn_cx *cx, void *arg)
{
	struct during_arg a = {.d = arg};
	int64_t r = 0;
	int rc = cbcmn_blocking(cx, during_fn, &a, &r);
	TASK_CHECK(rc == CBCMN_ECANCELED);
	TASK_CHECK(atomic_load(&a.d->finished) == 1); /* not before fn returned */
	TASK_CHECK(r == 77);
	TASK_CHECK(a.out == 7);
	atomic_store(&a.d->returned, 1);
	return 0;
}

static int64_t during_main(cbcmn_cx *cx, void *arg)
{
	struct during *d = arg;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &d->n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, d->n, during_caller, d, NULL) == 0);
	TASK_CHECK(wait_for(cx, &d->started, 1));
	TASK_CHECK(cbcmn_nursery_cancel(d->n) == 0);
	cbcmn_sleep(cx, 20000000);
	TASK_CHECK(atomic_load(&d->returned) == 0); /* still waiting for fn */
	atomic_store(&d->release, 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, d->n) == CBCMN_ECANCELED);
	TASK_CHECK(atomic_load(&d->returned) == 1);
	return 0;
}

static void test_cancel_while_running(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_pool(2, 1);
	struct during d = {0};
	t_run(rt, during_main, &d, 0);
	t_destroy(rt);
}

/* ---- the race: pool thread claims the job vs the task is cancelled --------- */

struct race_slot {
	_Atomic int ran;      /* fn ran (set by fn, possibly late if broken) */
	_Atomic int outcome;  /* 0 not called, 1 ok, 2 cancelled unrun, 3 cancelled after fn */
	int spin;
};

static void spin_for(int n)
{
	for (volatile int i = 0; i < n; i++)
		;
}

static int64_t race_fn(void *arg)
{
	struct race_slot *s = arg;
	atomic_store(&s->ran, 1);
	spin_for(s->spin);
	return 5;
}

static int64_t race_child(cbcmn_cx *cx, void *arg)
{
	struct race_slot *s = arg;
	int64_t r = -1;
	int rc = cbcmn_blocking(cx, race_fn, s, &r);
	if (rc == 0) {
		TASK_CHECK(r == 5);
		TASK_CHECK(atomic_load(&s->ran) == 1);
		atomic_store(&s->outcome, 1);
	} else {
		TASK_CHECK(rc == CBCMN_ECANCELED);
		TASK_CHECK(r == -1 || r == 5);
		if (r == 5)
			TASK_CHECK(atomic_load(&s->ran) == 1);
		atomic_store(&s->outcome, r == 5 ? 3 : 2);
	}
	return 0;
}

struct race {
	struct race_slot *slots;
	int n;
};

static int64_t race_main(cbcmn_cx *cx, void *arg)
{
	struct race *ra = arg;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < ra->n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		ra->slots[i].spin = (int)(x % 4000);
		cbcmn_nursery *n;
		TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, race_child, &ra->slots[i], NULL) == 0);
		if ((x >> 20) & 1)
			cbcmn_yield(cx); /* let the child start elsewhere, or run it here */
		spin_for((int)((x >> 32) % 6000));
		cbcmn_nursery_cancel(n);
		int64_t r = cbcmn_nursery_await_all(cx, n);
		TASK_CHECK(r == 0 || r == CBCMN_ECANCELED);
	}
	return 0;
}

static void test_cancel_race(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_pool(4, 4);
	struct race ra = {.n = STRESS(3000)};
	ra.slots = calloc((size_t)ra.n, sizeof(*ra.slots));
	assert_non_null(ra.slots);
	t_run(rt, race_main, &ra, 0);
	t_destroy(rt); /* every pool thread joined: late runs would show now */
	int by[4] = {0};
	for (int i = 0; i < ra.n; i++) {
		int o = atomic_load(&ra.slots[i].outcome);
		by[o]++;
		if (o == 2 || o == 0)
			assert_int_equal(atomic_load(&ra.slots[i].ran), 0);
		else
			assert_int_equal(atomic_load(&ra.slots[i].ran), 1);
	}
	printf("  race: %d not called, %d ok, %d cancelled before fn, %d during fn\n", by[0],
	       by[1], by[2], by[3]);
	free(ra.slots);
}

/* ---- misuse ------------------------------------------------------------------ */

struct misuse {
	_Atomic(cbcmn_cx *) cx;
	_Atomic int checked;
	_Atomic int pool_rc, spawn_rc;
	cbcmn_nursery *n; /* opened by the task */
};

static int64_t nop_task(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

/* On a pool thread: a plain thread, no executor.  A spawn with the
 * task's context there made the child from, and queued it on, its
 * executor's own cache and deque (TSan: a data race). */
static int64_t misuse_fn(void *arg)
{
	struct misuse *m = arg;
	cbcmn_cx *cx = atomic_load(&m->cx);
	atomic_store(&m->pool_rc, cbcmn_blocking(cx, inc_fn, NULL, NULL));
	atomic_store(&m->spawn_rc, cbcmn_nursery_spawn(cx, m->n, nop_task, NULL, NULL));
	return 0;
}

static int64_t misuse_task(cbcmn_cx *cx, void *arg)
{
	struct misuse *m = arg;
	TASK_CHECK(cbcmn_blocking(cx, NULL, NULL, NULL) == -EINVAL);
	atomic_store(&m->cx, cx);
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &m->n) == 0);
	TASK_CHECK(cbcmn_blocking(cx, misuse_fn, m, NULL) == 0);
	TASK_CHECK(atomic_load(&m->pool_rc) == -EPERM);
	TASK_CHECK(atomic_load(&m->spawn_rc) == -EPERM);
	TASK_CHECK(cbcmn_nursery_await_all(cx, m->n) == 0);
	uint64_t end = t_now_ns() + 20000000000ull;
	while (!atomic_load(&m->checked) && t_now_ns() < end)
		cbcmn_sleep(cx, 100000);
	return 0;
}

static void test_misuse(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_pool(1, 2);
	struct misuse m = {0};
	assert_int_equal(cbcmn_blocking(NULL, inc_fn, NULL, NULL), -EINVAL);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, misuse_task, &m, NULL), 0);
	uint64_t end = t_now_ns() + 20000000000ull;
	while (!atomic_load(&m.cx) && t_now_ns() < end)
		sleep_ms(1);
	assert_non_null(atomic_load(&m.cx));
	/* A task's context on a thread outside the runtime. */
	int64_t r = 3;
	assert_int_equal(cbcmn_blocking(atomic_load(&m.cx), inc_fn, NULL, &r), -EPERM);
	assert_int_equal(r, 3);
	atomic_store(&m.checked, 1);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
}

/* ---- budget -------------------------------------------------------------------- */

static int64_t budget_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_budget b0, b1;
	TASK_CHECK(cbcmn_budget_get(cx, &b0) == 0);
	for (int i = 0; i < 3; i++)
		TASK_CHECK(cbcmn_blocking(cx, inc_fn, NULL, NULL) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &b1) == 0);
	TASK_CHECK(b0.syscalls - b1.syscalls == 3);
	return 0;
}

static void test_each_call_costs_a_syscall(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.budget.syscalls = 100;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	t_run(rt, budget_main, NULL, 0);
	t_destroy(rt);
}

/* ---- a task's context used on a pool thread ----------------------------------- */

/* A blocking function handed its task's cx (against cbcmn_blocking()'s
 * contract) costs the task budget it cannot pay there: the pool thread
 * must not wait for budget, yield or unwind as if it were the task's
 * fiber (before: it waited in the task's nursery, or unwound to the
 * task's landing pad, from the pool thread: a crash).  It only counts,
 * as a checkpoint does there; the task's own next cost waits.  A
 * blocking send is -EPERM there (before: on a full channel it parked the
 * pool thread as the task's fiber); the try-variants work. */
struct misuse_cx {
	cbcmn_cx *cx;
	cbcmn_chan *c;
	int sent[4];
	int full;      /* a blocking send (the channel full too) */
	int64_t after; /* the task's own send after the call */
};

static int64_t send_with_cx_fn(void *arg)
{
	struct misuse_cx *m = arg;
	for (int i = 0; i < 4; i++) {
		int v = i;
		m->sent[i] = cbcmn_chan_try_send(m->cx, m->c, &v);
	}
	m->full = cbcmn_chan_send(m->cx, m->c, &(int){4});
	return 0;
}

static int64_t misuse_cx_child(cbcmn_cx *cx, void *arg)
{
	struct misuse_cx *m = arg;
	m->cx = cx;
	TASK_CHECK(cbcmn_blocking(cx, send_with_cx_fn, m, NULL) == 0);
	int v = 9;
	m->after = cbcmn_chan_send(cx, m->c, &v); /* exhausted: never returns */
	return 0;
}

static int64_t misuse_cx_main(cbcmn_cx *cx, void *arg)
{
	struct misuse_cx *m = arg;
	TASK_CHECK(cbcmn_chan_create(cbcmn_cx_runtime(cx), 4, sizeof(int), &m->c) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget ask = {.channel_ops = 2};
	cbcmn_caps none = {.flags = 0};
	cbcmn_spawn_opts o = {.budget = &ask, .caps = &none};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, misuse_cx_child, m, &o, NULL) == 0);
	int64_t rc = cbcmn_nursery_await_all(cx, n); /* gives up on the exhausted child */
	TASK_CHECK(cbcmn_chan_destroy(m->c) == 0);
	return rc;
}

static void test_costs_on_a_pool_thread_with_a_tasks_cx_only_count(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_pool(1, 1);
	struct misuse_cx m = {.after = 1};
	int64_t r = 0;
	assert_int_equal(cbcmn_runtime_run(rt, misuse_cx_main, &m, &r), 0);
	ASSERT_TASK_CHECKS();
	printf("    sends on the pool thread: %d %d %d %d, full %d; the task's own: %lld; "
	       "await_all %lld\n", m.sent[0], m.sent[1], m.sent[2], m.sent[3], m.full,
	       (long long)m.after, (long long)r);
	for (int i = 0; i < 4; i++)
		assert_int_equal(m.sent[i], 0);
	assert_int_equal(m.full, -EPERM); /* a blocking call there: refused */
	assert_int_equal(m.after, 1); /* it waited, and was given up on */
	assert_int_equal(r, CBCMN_EBUDGET);
	t_destroy(rt);
}

/* Regression (s16-misc16): ops spent on the pool thread are the task's debt,
 * paid by its own next window, but a CBCMN_CHECKPOINT() there set the
 * countdown back to 0 and wiped it out: a blocking function that
 * checkpointed its loop (as cbcmn.h tells it to) spent a window at most.
 * The debt stays: the task's own checkpoints after it are fewer by as
 * many. */
#define DEBT_OPS 10000
#define DEBT_OFF 2000

static _Atomic int64_t debt_own; /* the child's own checkpoints */

static int64_t checkpoint_off_fiber_fn(void *arg)
{
	cbcmn_cx *cx = arg;
	for (int i = 0; i < DEBT_OFF; i++)
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static int64_t debt_child(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(cbcmn_blocking(cx, checkpoint_off_fiber_fn, cx, NULL) == 0);
	for (;;) { /* until its ops run out and its opener gives up on it */
		CBCMN_CHECKPOINT(cx);
		atomic_fetch_add(&debt_own, 1);
	}
	return 0;
}

static int64_t debt_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget ask = {.ops = DEBT_OPS, .memory = CBCMN_UNLIMITED,
			    .spawn_count = CBCMN_UNLIMITED, .channel_ops = CBCMN_UNLIMITED,
			    .syscalls = CBCMN_UNLIMITED};
	cbcmn_caps none = {.flags = 0};
	cbcmn_spawn_opts o = {.budget = &ask, .caps = &none};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, debt_child, NULL, &o, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_checkpoints_on_a_pool_thread_stay_the_tasks_debt(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.blocking_threads = 1;
	cfg.yield_interval = 100; /* windows much shorter than the debt */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	atomic_store(&debt_own, 0);
	int64_t r = 0;
	assert_int_equal(cbcmn_runtime_run(rt, debt_main, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	int64_t own = atomic_load(&debt_own);
	printf("    %d ops, %d checkpoints on the pool thread, %lld of its own\n", DEBT_OPS,
	       DEBT_OFF, (long long)own);
	assert_int_equal(r, CBCMN_EBUDGET);
	/* Every checkpoint costs an op, wherever it runs (and the call one). */
	assert_true(own + DEBT_OFF + 1 <= DEBT_OPS);
	t_destroy(rt);
}

/* ---- thread life: idle threads end, destroy joins the rest ------------------ */

struct burst {
	_Atomic int in;
	int want;
};

/* Hold until want calls are inside at once: forces want threads. */
static int64_t burst_fn(void *arg)
{
	struct burst *b = arg;
	atomic_fetch_add(&b->in, 1);
	uint64_t end = t_now_ns() + 20000000000ull;
	while (atomic_load(&b->in) < b->want && t_now_ns() < end)
		sleep_ms(1);
	return 0;
}

static int64_t burst_caller(cbcmn_cx *cx, void *arg)
{
	TASK_CHECK(cbcmn_blocking(cx, burst_fn, arg, NULL) == 0);
	return 0;
}

static int64_t burst_main(cbcmn_cx *cx, void *arg)
{
	struct burst *b = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < b->want; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, burst_caller, b, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_destroy_joins_pool_threads(void **state)
{
	(void)state;
	int base = t_count_threads();
	cbcmn_runtime *rt = rt_pool_counted(2, 8);
	struct burst b = {.want = 8};
	t_run(rt, burst_main, &b, 0);
	/* Executors and pool threads (no stall monitor here). */
	assert_int_equal(t_count_threads(), base + 2 + 8);
	t_destroy(rt);
	assert_int_equal(t_count_threads(), base);
}

/* The same with the stall monitor on (the default): its thread, and the
 * spare executor it may have started, are joined too.  Only a lower
 * bound while it runs: the spare comes and goes as the machine's load
 * has it (rt_pool_counted()). */
static void test_destroy_joins_the_stall_monitor(void **state)
{
	(void)state;
	int base = t_count_threads();
	cbcmn_runtime *rt = rt_pool(2, 8);
	struct burst b = {.want = 8};
	t_run(rt, burst_main, &b, 0);
	/* Executors, pool threads, the monitor (docs/SCHEDULER.md). */
	assert_true(t_count_threads() >= base + 2 + 8 + 1);
	t_destroy(rt);
	assert_int_equal(t_count_threads(), base);
}

static void test_idle_threads_end(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_pool_counted(1, 4);
	int base = t_count_threads();
	struct burst b = {.want = 4};
	t_run(rt, burst_main, &b, 0);
	assert_int_equal(t_count_threads(), base + 4);
	/* A few seconds without work (IDLE_NS, blocking.c): all four end. */
	uint64_t end = t_now_ns() + 15000000000ull;
	while (t_count_threads() > base && t_now_ns() < end)
		sleep_ms(100);
	assert_int_equal(t_count_threads(), base);
	/* The pool starts again on demand (and joins the ended threads). */
	b = (struct burst){.want = 2};
	t_run(rt, burst_main, &b, 0);
	assert_int_equal(t_count_threads(), base + 2);
	t_destroy(rt);
}

/* ---- blocking calls with the task's cx off its fiber ---- */

/* Every call that may wait, given the task's context on a pool thread (a
 * cbcmn_blocking() function's), would suspend that thread as if it were
 * the task's fiber: it is refused with -EPERM, at once, and the try-calls
 * work.  Before, only channels, spawn, I/O and cbcmn_blocking() refused:
 * a yield or a sleep switched the pool thread onto the scheduler (a
 * crash), a join or an await waited on it. */
enum off_call {
	OFF_YIELD,
	OFF_SLEEP,
	OFF_JOIN,
	OFF_AWAIT,
	OFF_ACTOR_SEND,
	OFF_ACTOR_SEND_TIMEOUT,
	OFF_ACTOR_RECEIVE,
	OFF_ACTOR_SPAWN,
	OFF_ACTOR_MONITOR,
	OFF_ACTOR_DEMONITOR,
	OFF_ACTOR_LINK,
	OFF_NURSERY_OPEN,
	OFF_ACTOR_TRY_SEND, /* the try-calls: work */
	OFF_CHAN_TRY_RESERVE,
	OFF_N
};

struct off_cx {
	cbcmn_cx *cx;
	enum off_call call;
	cbcmn_task *child;    /* OFF_JOIN's */
	cbcmn_nursery *n;     /* OFF_AWAIT's, OFF_ACTOR_SPAWN's */
	cbcmn_actor_ref peer; /* the actor calls' */
	cbcmn_chan *c;        /* OFF_CHAN_TRY_RESERVE's */
	cbcmn_chan_permit permit;
	int64_t rc;
};

/* Alive (the peer of the actor calls, the child joined) until the
 * nursery is cancelled at the end: a peer that had halted made the
 * try_send -ESRCH on a slow host. */
static int64_t off_nothing(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	(void)cbcmn_sleep(cx, T_STALL_NS);
	return 0;
}

static int64_t off_call_fn(void *arg)
{
	struct off_cx *o = arg;
	cbcmn_actor_msg m = {.type = 1};
	uint64_t mon = 0;
	int64_t r = 0;
	switch (o->call) {
	case OFF_YIELD: return cbcmn_yield(o->cx);
	case OFF_SLEEP: return cbcmn_sleep(o->cx, 1000);
	case OFF_JOIN: return cbcmn_task_join(o->cx, o->child, &r);
	case OFF_AWAIT: return cbcmn_nursery_await_all(o->cx, o->n);
	case OFF_ACTOR_SEND: return cbcmn_actor_send(NULL, o->cx, o->peer, &m);
	case OFF_ACTOR_SEND_TIMEOUT: return cbcmn_actor_send_timeout(NULL, o->cx, o->peer, &m, 1000);
	case OFF_ACTOR_RECEIVE: return cbcmn_actor_receive(o->cx, &m, 1000);
	case OFF_ACTOR_SPAWN: {
		cbcmn_actor_ref a;
		return cbcmn_actor_spawn(o->cx, o->n, off_nothing, NULL, NULL, &a);
	}
	case OFF_ACTOR_MONITOR: return cbcmn_actor_monitor(o->cx, o->peer, &mon);
	case OFF_ACTOR_DEMONITOR: return cbcmn_actor_demonitor(o->cx, o->peer, 1);
	case OFF_ACTOR_LINK: return cbcmn_actor_link(o->cx, o->peer);
	case OFF_NURSERY_OPEN: {
		cbcmn_nursery *n;
		return cbcmn_nursery_open(cbcmn_cx_runtime(o->cx), o->cx, &n);
	}
	case OFF_ACTOR_TRY_SEND: return cbcmn_actor_try_send(NULL, o->cx, o->peer, &m);
	case OFF_CHAN_TRY_RESERVE: return cbcmn_chan_try_reserve(o->cx, o->c, &o->permit);
	case OFF_N: break;
	}
	return -EINVAL;
}

/* An actor (so that the actor calls have a caller) that makes o->call
 * off its fiber, then winds down on it. */
static int64_t off_caller(cbcmn_cx *cx, void *arg)
{
	struct off_cx *o = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &o->n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, o->n, off_nothing, NULL, &o->child) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, o->n, off_nothing, NULL, &ao, &o->peer) == 0);
	cbcmn_actor_msg m = {.type = 1};
	if (o->call == OFF_ACTOR_SEND || o->call == OFF_ACTOR_SEND_TIMEOUT)
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, o->peer, &m) == 0); /* now full */
	o->cx = cx;
	TASK_CHECK(cbcmn_chan_create(rt, 1, sizeof(long), &o->c) == 0);
	TASK_CHECK(cbcmn_blocking(cx, off_call_fn, o, &o->rc) == 0);
	if (o->call == OFF_CHAN_TRY_RESERVE && o->rc == 0) /* its owner, on its fiber */
		TASK_CHECK(cbcmn_chan_abort(cx, &o->permit) == 0);
	TASK_CHECK(cbcmn_chan_destroy(o->c) == 0);
	cbcmn_nursery_cancel(o->n);
	int64_t r;
	TASK_CHECK(cbcmn_task_join(cx, o->child, &r) == 0);
	cbcmn_nursery_await_all(cx, o->n);
	return 0;
}

static int64_t off_opener(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, off_caller, arg, NULL, &a) == 0);
	cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_blocking_calls_off_its_fiber_are_refused(void **state)
{
	(void)state;
	t_watchdog_start("test_blocking_calls_off_its_fiber_are_refused", T_WATCHDOG_S);
	cbcmn_runtime *rt = t_runtime(2);
	for (int c = 0; c < OFF_N; c++) {
		struct off_cx o = {.call = c, .rc = 12345};
		t_run(rt, off_opener, &o, 0);
		if (c >= OFF_ACTOR_TRY_SEND)
			assert_int_equal(o.rc, 0);
		else if (o.rc != -EPERM)
			fail_msg("call %d off its fiber returned %lld, not -EPERM", c, (long long)o.rc);
	}
	t_destroy(rt);
	t_watchdog_stop();
}

/* An actor's cbcmn_blocking() function that checkpoints with its cx (as
 * cbcmn.h tells it to): the pool thread took the job at once and wrote the
 * countdown (the macro's decrement) while the executor, finishing the
 * actor's park, read it (actor_sched.c quantum_left()): a data race
 * (TSan).  The job now starts once the task has left its fiber. */
static int64_t ck_fn(void *arg)
{
	cbcmn_cx *cx = arg;
	for (int i = 0; i < 3000; i++)
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static int64_t ck_actor(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (int i = 0; i < 200; i++)
		TASK_CHECK(cbcmn_blocking(cx, ck_fn, cx, NULL) == 0);
	return 0;
}

static int64_t ck_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 4; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, ck_actor, arg, NULL, &a) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_checkpoints_of_an_actor_s_blocking_function(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	t_run(rt, ck_main, NULL, 0);
	t_destroy(rt);
}


/* An actor's function that checkpoints with its cx until told to stop,
 * cancelled while it runs: the cancellation woke the actor at once, whose
 * executor read its countdown (its run's quantum, then its park's) while
 * the pool thread's checkpoints wrote it (TSan).  The task now stays parked
 * until fn returned, and still returns CBCMN_ECANCELED, with fn's result. */
struct cw {
	cbcmn_cx *cx; /* the actor's, for its function's checkpoints */
	atomic_int started, stop;
	int rc;
	int64_t result;
};

static int64_t cw_fn(void *arg)
{
	struct cw *w = arg;
	atomic_store(&w->started, 1);
	while (!atomic_load(&w->stop))
		CBCMN_CHECKPOINT(w->cx);
	return 7;
}

static int64_t cw_actor(cbcmn_cx *cx, void *arg)
{
	struct cw *w = arg;
	w->cx = cx;
	w->rc = cbcmn_blocking(cx, cw_fn, w, &w->result);
	return 0;
}

static int64_t cw_main(cbcmn_cx *cx, void *arg)
{
	struct cw *w = arg;
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, cw_actor, w, NULL, &a) == 0);
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&w->started) && t_now_ns() < deadline)
		(void)cbcmn_sleep(cx, 100000);
	TASK_CHECK(atomic_load(&w->started));
	cbcmn_nursery_cancel(n);
	/* Long enough for the woken actor to run and park again (before). */
	(void)cbcmn_sleep(cx, 20000000);
	atomic_store(&w->stop, 1);
	cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_cancelled_while_fn_runs_stays_parked(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct cw w = {.rc = 12345};
	t_run(rt, cw_main, &w, 0);
	assert_int_equal(w.rc, CBCMN_ECANCELED);
	assert_int_equal(w.result, 7);
	t_destroy(rt);
}


/* With its task's cx, a cbcmn_blocking() function stops actors blocked
 * in a receive and recharges an exhausted child: both wakes named the
 * task's executor as the waker and pushed onto that executor's own run
 * queue from the pool thread, which its thread pops meanwhile (TSan: a
 * race in the deque).  They now wake as a thread outside does. */
#define SR_PEERS 64
#define SR_ROUNDS 4

struct sr {
	cbcmn_cx *cx;
	cbcmn_actor_ref peer[SR_PEERS];
	cbcmn_task *child;
	int stop_rc[SR_PEERS], recharge_rc;
};

static int64_t sr_fn(void *arg)
{
	struct sr *s = arg;
	for (int i = 0; i < SR_PEERS; i++)
		s->stop_rc[i] = cbcmn_actor_stop(NULL, s->cx, s->peer[i], 0);
	cbcmn_budget more = {.ops = 1000};
	if (s->child)
		s->recharge_rc = cbcmn_budget_recharge(s->cx, s->child, &more);
	return 0;
}

static int64_t sr_peer(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	while (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0)
		;
	return 0;
}

static int64_t sr_spin(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (int i = 0; i < 500; i++)
		CBCMN_CHECKPOINT(cx);
	return 0;
}

/* One round: peers parked in their receive (and, the first time, the
 * child waiting for ops) when sr_fn runs. */
static int64_t sr_round(cbcmn_cx *cx, struct sr *s, bool child)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < SR_PEERS; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, sr_peer, NULL, NULL, &s->peer[i]) == 0);
	cbcmn_budget b = {.ops = 100};
	cbcmn_spawn_opts o = {.budget = &b};
	if (child)
		TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, sr_spin, NULL, &o, &s->child) == 0);
	(void)cbcmn_sleep(cx, 20000000);
	TASK_CHECK(cbcmn_blocking(cx, sr_fn, s, NULL) == 0);
	for (int i = 0; i < SR_PEERS; i++)
		TASK_CHECK(s->stop_rc[i] == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	int64_t r = 0;
	if (child)
		TASK_CHECK(cbcmn_task_join(cx, s->child, &r) == 0);
	s->child = NULL;
	return r;
}

static int64_t sr_main(cbcmn_cx *cx, void *arg)
{
	struct sr *s = arg;
	s->cx = cx;
	int64_t r = 0;
	for (int k = 0; k < SR_ROUNDS && r == 0; k++)
		r = sr_round(cx, s, k == 0);
	return r;
}

static void test_stop_and_recharge_off_its_fiber(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct sr s = {0};
	t_run(rt, sr_main, &s, 0);
	assert_int_equal(s.recharge_rc, 0);
	t_destroy(rt);
}

/* An obligation taken by a cbcmn_blocking() function with its task's cx
 * names the task's executor, whose share of the obligations gauge only
 * its own thread writes (a load and a store, lost beside the executor's
 * own).  The choice is made where the gauge is counted
 * (cbcmn__waker_here(), not at the call): it counts in the outside share,
 * as a thread outside the runtime's does. */
struct og {
	cbcmn_cx *cx;
	int rc;
	uint64_t total, mine;
};

static int64_t og_fn(void *arg)
{
	struct og *o = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(o->cx);
	cbcmn_obligation ob;
	o->rc = cbcmn_obligation_reserve(rt, o->cx, "og", &ob);
	if (o->rc)
		return 0;
	cbcmn_snapshot s = {.size = sizeof(s), .version = CBCMN_SNAPSHOT_VERSION};
	cbcmn_exec_snapshot per[1] = {{0}};
	o->rc = cbcmn_runtime_snapshot(rt, &s, per, 1);
	o->total = s.total.obligations;
	o->mine = per[0].obligations;
	int rc = cbcmn_obligation_commit(o->cx, &ob);
	if (!o->rc)
		o->rc = rc;
	return 0;
}

static int64_t og_main(cbcmn_cx *cx, void *arg)
{
	struct og *o = arg;
	o->cx = cx;
	TASK_CHECK(cbcmn_blocking(cx, og_fn, o, NULL) == 0);
	return 0;
}

static void test_an_obligation_off_its_fiber_counts_outside(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct og o = {0};
	t_run(rt, og_main, &o, 0);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.total, 1);
	assert_int_equal(o.mine, 0); /* the executor's own share: untouched */
	cbcmn_snapshot s = {.size = sizeof(s), .version = CBCMN_SNAPSHOT_VERSION};
	assert_int_equal(cbcmn_runtime_snapshot(rt, &s, NULL, 0), 0);
	assert_int_equal(s.total.obligations, 0);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_result_passes_through),
		T_WATCHED_TEST(test_many_calls_one_executor),
		T_WATCHED_TEST(test_many_calls_four_executors),
		T_WATCHED_TEST(test_executor_runs_others_meanwhile),
		T_WATCHED_TEST(test_sequential_calls_use_one_thread),
		T_WATCHED_TEST(test_cancel_before_start),
		T_WATCHED_TEST(test_already_cancelled_submits_nothing),
		T_WATCHED_TEST(test_cancel_while_running),
		T_WATCHED_TEST(test_cancel_race),
		T_WATCHED_TEST(test_misuse),
		T_WATCHED_TEST(test_each_call_costs_a_syscall),
		T_WATCHED_TEST(test_costs_on_a_pool_thread_with_a_tasks_cx_only_count),
		T_WATCHED_TEST(test_checkpoints_on_a_pool_thread_stay_the_tasks_debt),
		T_WATCHED_TEST(test_blocking_calls_off_its_fiber_are_refused),
		T_WATCHED_TEST(test_checkpoints_of_an_actor_s_blocking_function),
		T_WATCHED_TEST(test_cancelled_while_fn_runs_stays_parked),
		T_WATCHED_TEST(test_stop_and_recharge_off_its_fiber),
		T_WATCHED_TEST(test_an_obligation_off_its_fiber_counts_outside),
		T_WATCHED_TEST(test_destroy_joins_pool_threads),
		T_WATCHED_TEST(test_destroy_joins_the_stall_monitor),
		T_WATCHED_TEST(test_idle_threads_end),
	};
	return cmocka_run_group_tests_name("blocking", tests, NULL, NULL);
}
