/* test_badinput: bad arguments to every public call are errors, never a crash
 * or a hang, and the runtime goes on working after each. */
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>


/* A hang must fail the suite, not stall it: every test runs under an alarm
 * that names it. */
#define BAD_TEST(f) T_WATCHED_TEST(f)

/* Past this a wait is a hang, not a slow machine (helpers.h). */
#define STALL_NS T_STALL_NS

static cbcmn_runtime *mk_rt(uint32_t workers)
{
	return t_runtime(workers);
}

static int64_t answer(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 42;
}

/* The runtime still does its job. */
static void assert_runs(cbcmn_runtime *rt)
{
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, answer, NULL, &r), 0);
	assert_int_equal(r, 42);
}

/* ---- runtime create / destroy / run --------------------------------------- */

static void create_fails(const cbcmn_config *cfg, const char *what)
{
	int before = t_count_threads();
	cbcmn_runtime *rt = NULL;
	int rc = cbcmn_runtime_create(cfg, &rt);
	if (rc != -EINVAL)
		fail_msg("cbcmn_runtime_create with %s: %d (%s), want -EINVAL", what, rc,
			 cbcmn_strerror(rc));
	/* "nothing is left running" */
	assert_int_equal(t_count_threads(), before);
}

static void test_create_rejects_bad_config(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_runtime *rt = NULL;

	cbcmn_config_init(NULL); /* nothing to fill: no crash */
	cbcmn_config_init(&cfg);
	assert_int_equal(cbcmn_runtime_create(&cfg, NULL), -EINVAL);
	assert_int_equal(cbcmn_runtime_create(NULL, NULL), -EINVAL);

	cfg.workers = CBCMN_MAX_EXECUTORS + 1;
	create_fails(&cfg, "workers = CBCMN_MAX_EXECUTORS + 1");
	cfg.workers = UINT32_MAX - 1; /* UINT32_MAX is CBCMN_WORKERS_AUTO */
	create_fails(&cfg, "workers = UINT32_MAX - 1");
	cfg.workers = 0;
	create_fails(&cfg, "workers = 0");

	cbcmn_config_init(&cfg);
	cfg.stack_size = CBCMN_STACK_MIN - 1;
	create_fails(&cfg, "stack_size = CBCMN_STACK_MIN - 1");
	cfg.stack_size = 1;
	create_fails(&cfg, "stack_size = 1");
	cfg.stack_size = (size_t)CBCMN_STACK_MAX + 1;
	create_fails(&cfg, "stack_size = CBCMN_STACK_MAX + 1");
	cfg.stack_size = SIZE_MAX;
	create_fails(&cfg, "stack_size = SIZE_MAX");

	cbcmn_config_init(&cfg);
	cfg.victim = (cbcmn_victim_policy)(CBCMN_VICTIM_LEAST_LOADED + 1);
	create_fails(&cfg, "victim = LEAST_LOADED + 1");
	cfg.victim = (cbcmn_victim_policy)-1;
	create_fails(&cfg, "victim = -1");

	cbcmn_config_init(&cfg);
	cfg.flags = (CBCMN_CONFIG_NO_INLINE | CBCMN_CONFIG_NO_BUDGETS | CBCMN_CONFIG_LAB |
		     CBCMN_CONFIG_RECORD_IN_STACK) << 1;
	create_fails(&cfg, "an unknown flags bit");
	cfg.flags = 0x80000000u | CBCMN_CONFIG_NO_INLINE;
	create_fails(&cfg, "flags with a high bit");

	/* The edges themselves are fine. */
	assert_int_equal(cbcmn_runtime_create(NULL, &rt), 0); /* NULL cfg: defaults */
	assert_true(cbcmn_runtime_workers(rt) >= 1);
	assert_runs(rt);
	t_destroy(rt);

	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.stack_size = CBCMN_STACK_MIN;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), 0);
	assert_runs(rt);
	t_destroy(rt);
	cfg.stack_size = CBCMN_STACK_MIN + 1; /* rounded up to pages */
	cfg.victim = CBCMN_VICTIM_LEAST_LOADED;
	cfg.guard_stacks_max = UINT32_MAX;
	cfg.flags = CBCMN_CONFIG_NO_INLINE;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), 0);
	assert_runs(rt);
	t_destroy(rt);
	cfg.stack_size = CBCMN_STACK_MAX;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), 0);
	t_destroy(rt);
}

struct blocker {
	_Atomic uint32_t started, release;
};

static int64_t blocker(cbcmn_cx *cx, void *arg)
{
	struct blocker *b = arg;
	atomic_store(&b->started, 1);
	uint64_t deadline = t_now_ns() + 2 * STALL_NS;
	while (!atomic_load(&b->release) && t_now_ns() < deadline)
		cbcmn_yield(cx);
	return 0;
}

static void wait_started(_Atomic uint32_t *v)
{
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (!atomic_load(v)) {
		if (t_now_ns() > deadline)
			fail_msg("the task never started");
		usleep(100);
	}
}

static void test_destroy_null_and_busy(void **state)
{
	(void)state;
	assert_int_equal(cbcmn_runtime_destroy(NULL), -EINVAL);

	cbcmn_runtime *rt = mk_rt(2);
	struct blocker b = {0};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, blocker, &b, NULL), 0);
	wait_started(&b.started);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	/* Still running, still taking work. */
	assert_runs(rt);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	atomic_store(&b.release, 1);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	t_destroy(rt);
}

static void test_run_rejects_null(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(1);
	int64_t r = 7;
	assert_int_equal(cbcmn_runtime_run(NULL, answer, NULL, &r), -EINVAL);
	assert_int_equal(cbcmn_runtime_run(rt, NULL, NULL, &r), -EINVAL);
	assert_int_equal(r, 7);
	assert_int_equal(cbcmn_runtime_run(rt, answer, NULL, NULL), 0); /* result is optional */
	assert_int_equal(cbcmn_runtime_workers(NULL), 0);
	cbcmn_stats s;
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
	assert_int_equal(s.tasks_spawned, 1);
	t_destroy(rt);
}

/* ---- nurseries ------------------------------------------------------------- */

struct in_task {
	cbcmn_runtime *other; /* a second runtime */
	cbcmn_nursery *other_n;
	cbcmn_task *other_h;
	int open_null_rt, open_null_out, spawn_null_n, spawn_null_fn, await_null;
	int open_wrong_rt, spawn_wrong_rt, join_wrong_rt;
	int64_t await_foreign;
	_Atomic uint32_t ran;
};

static int64_t count(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	atomic_fetch_add((_Atomic uint32_t *)arg, 1);
	return 3;
}

static int64_t nursery_misuse(cbcmn_cx *cx, void *arg)
{
	struct in_task *x = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n = NULL;
	x->open_null_rt = cbcmn_nursery_open(NULL, cx, &n);
	x->open_null_out = cbcmn_nursery_open(rt, cx, NULL);
	x->spawn_null_n = cbcmn_nursery_spawn(cx, NULL, count, &x->ran, NULL);
	x->await_null = (int)cbcmn_nursery_await_all(cx, NULL);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	x->spawn_null_fn = cbcmn_nursery_spawn(cx, n, NULL, &x->ran, NULL);
	/* Objects of another runtime. */
	cbcmn_nursery *m = NULL;
	x->open_wrong_rt = cbcmn_nursery_open(x->other, cx, &m);
	x->spawn_wrong_rt = cbcmn_nursery_spawn(cx, x->other_n, count, &x->ran, NULL);
	int64_t r = -1;
	x->join_wrong_rt = cbcmn_task_join(cx, x->other_h, &r);
	x->await_foreign = cbcmn_nursery_await_all(cx, x->other_n);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, count, &x->ran, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_nursery_calls_reject_null(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(2);
	cbcmn_nursery *n = NULL;
	_Atomic uint32_t ran = 0;
	cbcmn_stats before, after;
	assert_int_equal(cbcmn_stats_snapshot(rt, &before, NULL, 0), 0);

	assert_int_equal(cbcmn_nursery_open(NULL, NULL, &n), -EINVAL);
	assert_int_equal(cbcmn_nursery_open(rt, NULL, NULL), -EINVAL);
	cbcmn_task *h = NULL;
	assert_int_equal(cbcmn_nursery_spawn(NULL, NULL, count, &ran, &h), -EINVAL);
	assert_int_equal(cbcmn_nursery_await_all(NULL, NULL), -EINVAL);
	assert_int_equal(cbcmn_nursery_cancel(NULL), -EINVAL);
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, NULL, &ran, &h), -EINVAL);
	assert_int_equal(cbcmn_stats_snapshot(rt, &after, NULL, 0), 0);
	assert_int_equal(after.tasks_spawned, before.tasks_spawned); /* nothing spawned */
	/* The nursery is unharmed by the refused spawn. */
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, count, &ran, NULL), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	assert_int_equal(atomic_load(&ran), 1);

	/* The same from inside a task, plus another runtime's objects. */
	struct in_task x = {.other = mk_rt(1)};
	assert_int_equal(cbcmn_nursery_open(x.other, NULL, &x.other_n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, x.other_n, count, &x.ran, &x.other_h), 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, nursery_misuse, &x, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(x.open_null_rt, -EINVAL);
	assert_int_equal(x.open_null_out, -EINVAL);
	assert_int_equal(x.spawn_null_n, -EINVAL);
	assert_int_equal(x.spawn_null_fn, -EINVAL);
	assert_int_equal(x.await_null, -EINVAL);
	assert_int_equal(x.open_wrong_rt, CBCMN_EWRONGRT);
	assert_int_equal(x.spawn_wrong_rt, CBCMN_EWRONGRT);
	assert_int_equal(x.join_wrong_rt, CBCMN_EWRONGRT);
	assert_int_equal(x.await_foreign, -EPERM);
	/* The other runtime's handle was not consumed by the refused join. */
	assert_int_equal(cbcmn_task_join(NULL, x.other_h, &r), 0);
	assert_int_equal(r, 3);
	assert_int_equal(cbcmn_nursery_await_all(NULL, x.other_n), 0);
	assert_int_equal(atomic_load(&x.ran), 2);
	t_destroy(x.other);
	t_destroy(rt);
}

/* ---- budgets and capabilities ------------------------------------------------ */

struct budget_misuse {
	cbcmn_task *h; /* a child of the root's nursery */
	int get_null_out, caps_null_out, recharge_null_amount, recharge_not_parent;
	int spawn_ex_null_n, spawn_ex_null_fn, spawn_ex_no_opts;
};

static int64_t not_the_parent(cbcmn_cx *cx, void *arg)
{
	struct budget_misuse *b = arg;
	cbcmn_budget one = {.ops = 1};
	/* A sibling, not the opener of h's nursery: may not give it budget. */
	b->recharge_not_parent = cbcmn_budget_recharge(cx, b->h, &one);
	return 0;
}

static int64_t budget_root(cbcmn_cx *cx, void *arg)
{
	struct budget_misuse *b = arg;
	b->get_null_out = cbcmn_budget_get(cx, NULL);
	b->caps_null_out = cbcmn_caps_get(cx, NULL);
	b->recharge_null_amount = cbcmn_budget_recharge(cx, NULL, NULL);
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	b->spawn_ex_null_n = cbcmn_nursery_spawn_ex(cx, NULL, answer, NULL, NULL, NULL);
	b->spawn_ex_null_fn = cbcmn_nursery_spawn_ex(cx, n, NULL, NULL, NULL, NULL);
	b->spawn_ex_no_opts = cbcmn_nursery_spawn_ex(cx, n, answer, NULL, NULL, &b->h);
	if (b->spawn_ex_no_opts == 0)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, not_the_parent, b, NULL) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	if (b->spawn_ex_no_opts == 0) {
		int64_t v = -1;
		TASK_CHECK(cbcmn_task_join(cx, b->h, &v) == 0 && v == 42);
	}
	return r;
}

static void test_budget_calls_reject_null(void **state)
{
	(void)state;
	cbcmn_budget bud;
	cbcmn_caps caps;
	cbcmn_budget one = {.ops = 1};
	/* Outside any task: there is no budget to read or charge. */
	assert_int_equal(cbcmn_budget_get(NULL, &bud), -EINVAL);
	assert_int_equal(cbcmn_caps_get(NULL, &caps), -EINVAL);
	assert_int_equal(cbcmn_budget_recharge(NULL, NULL, &one), -EINVAL);
	errno = 0;
	assert_null(cbcmn_alloc(NULL, 16));
	assert_int_equal(errno, EINVAL);
	cbcmn_free(NULL);
	assert_int_equal(cbcmn_nursery_spawn_ex(NULL, NULL, answer, NULL, NULL, NULL), -EINVAL);

	cbcmn_runtime *rt = mk_rt(2);
	struct budget_misuse b = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, budget_root, &b, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(b.get_null_out, -EINVAL);
	assert_int_equal(b.caps_null_out, -EINVAL);
	assert_int_equal(b.recharge_null_amount, -EINVAL);
	assert_int_equal(b.spawn_ex_null_n, -EINVAL);
	assert_int_equal(b.spawn_ex_null_fn, -EINVAL);
	assert_int_equal(b.spawn_ex_no_opts, 0); /* opts may be NULL */
	assert_int_equal(b.recharge_not_parent, -EPERM);
	t_destroy(rt);
}

/* ---- join -------------------------------------------------------------------- */

static void test_join_rejects_null(void **state)
{
	(void)state;
	int64_t r = 5;
	assert_int_equal(cbcmn_task_join(NULL, NULL, &r), -EINVAL);
	assert_int_equal(cbcmn_task_join(NULL, NULL, NULL), -EINVAL);
	assert_int_equal(r, 5);
	assert_int_equal(cbcmn_task_id(NULL), 0);
}

/* Two joins of one handle: the second, made while the first still waits
 * (the runtime holds the task), is CBCMN_EJOINED.  One executor, so "the
 * first join has begun" is a plain flag. */
struct twice {
	cbcmn_task *t;
	_Atomic uint32_t first_joining, go;
	int first_rc, second_rc;
	int64_t first_result, second_result;
};

static int64_t slow_seven(cbcmn_cx *cx, void *arg)
{
	struct twice *w = arg;
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (!atomic_load(&w->go) && t_now_ns() < deadline)
		cbcmn_yield(cx);
	return 7;
}

static int64_t first_joiner(cbcmn_cx *cx, void *arg)
{
	struct twice *w = arg;
	atomic_store(&w->first_joining, 1);
	/* No switch between the flag and the join's claim on the handle. */
	w->first_rc = cbcmn_task_join(cx, w->t, &w->first_result);
	return 0;
}

static int64_t second_joiner(cbcmn_cx *cx, void *arg)
{
	struct twice *w = arg;
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (!atomic_load(&w->first_joining) && t_now_ns() < deadline)
		cbcmn_yield(cx);
	w->second_result = -1;
	w->second_rc = cbcmn_task_join(cx, w->t, &w->second_result);
	atomic_store(&w->go, 1);
	return 0;
}

static int64_t twice_root(cbcmn_cx *cx, void *arg)
{
	struct twice *w = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, slow_seven, w, &w->t) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, second_joiner, w, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, first_joiner, w, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void twice_body(void *arg)
{
	cbcmn_runtime *rt = mk_rt(1);
	int64_t r = -1;
	TASK_CHECK(cbcmn_runtime_run(rt, twice_root, arg, &r) == 0 && r == 0);
	TASK_CHECK(cbcmn_runtime_destroy(rt) == 0);
}

static void test_join_twice_is_ejoined(void **state)
{
	(void)state;
	struct twice *w = calloc(1, sizeof(*w));
	assert_non_null(w);
	if (!run_bounded(twice_body, w, (T_ASAN || T_TSAN) ? 30 : 10))
		fail_msg("the first joiner was never woken");
	ASSERT_TASK_CHECKS();
	assert_int_equal(w->second_rc, CBCMN_EJOINED);
	assert_int_equal(w->second_result, -1); /* untouched */
	assert_int_equal(w->first_rc, 0);
	assert_int_equal(w->first_result, 7);
	free(w);
}

/* ---- stats, yield and the cx accessors ------------------------------------------ */

static void test_stats_rejects_null(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(2);
	cbcmn_stats s;
	cbcmn_executor_stats per[8];
	assert_int_equal(cbcmn_stats_snapshot(NULL, &s, NULL, 0), -EINVAL);
	assert_int_equal(cbcmn_stats_snapshot(rt, NULL, NULL, 0), -EINVAL);
	assert_int_equal(cbcmn_stats_snapshot(rt, NULL, per, 8), -EINVAL);
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 3), -EINVAL); /* nper without per */
	memset(per, 0x5a, sizeof(per));
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, per, 0), 0);
	assert_int_equal(per[0].tasks_run, 0x5a5a5a5a5a5a5a5aull);
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, per, 8), 0);
	assert_int_equal(s.executors, 2);
	assert_int_equal(per[2].tasks_run, 0x5a5a5a5a5a5a5a5aull); /* min(nper, executors) */
	t_destroy(rt);
}

static void test_yield_and_cx_accessors_reject_null(void **state)
{
	(void)state;
	assert_int_equal(cbcmn_yield(NULL), -EINVAL);
	assert_null(cbcmn_cx_runtime(NULL));
	assert_int_equal(cbcmn_cx_task_id(NULL), 0); /* ids are never 0 */
	assert_true(cbcmn_cx_executor(NULL) >= CBCMN_MAX_EXECUTORS);
	assert_false(cbcmn_cx_cancelled(NULL));
}

/* ---- cbcmn_strerror ------------------------------------------------------------ */

static void assert_message(int64_t err)
{
	const char *m = cbcmn_strerror(err);
	if (!m || !*m)
		fail_msg("cbcmn_strerror(%lld) is %s", (long long)err, m ? "empty" : "NULL");
}

static void test_strerror_covers_everything(void **state)
{
	(void)state;
	const char *unknown = cbcmn_strerror(-4000000);
	assert_message(-4000000);
#define XX(name, value, msg)                                                   \
	assert_true(CBCMN_E##name < CBCMN_EBASE);                               \
	assert_int_equal(CBCMN_E##name, value);                                 \
	assert_message(CBCMN_E##name);                                          \
	assert_string_equal(cbcmn_strerror(CBCMN_E##name), msg);                \
	assert_string_not_equal(cbcmn_strerror(CBCMN_E##name), unknown);
	CBCMN_ERRNO_MAP(XX)
#undef XX
	/* Distinct codes, distinct messages. */
	static const int64_t codes[] = {
#define XX(name, value, msg) CBCMN_E##name,
		CBCMN_ERRNO_MAP(XX)
#undef XX
	};
	size_t nc = sizeof(codes) / sizeof(codes[0]);
	for (size_t i = 0; i < nc; i++)
		for (size_t k = i + 1; k < nc; k++) {
			assert_true(codes[i] != codes[k]);
			assert_string_not_equal(cbcmn_strerror(codes[i]), cbcmn_strerror(codes[k]));
		}

	assert_int_equal(CBCMN_ECANCELED, -ECANCELED);
	assert_message(CBCMN_ECANCELED);
	assert_string_not_equal(cbcmn_strerror(CBCMN_ECANCELED), unknown);
	static const int64_t errnos[] = {-EINVAL, -ENOMEM, -EBUSY, -EPERM, -EDEADLK, -ETIMEDOUT};
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++) {
		assert_message(errnos[i]);
		assert_string_not_equal(cbcmn_strerror(errnos[i]), unknown);
	}
	assert_message(0);
	assert_message(1);
	assert_message(INT64_MAX);
	/* Garbage: still a string, never NULL. */
	static const int64_t garbage[] = {CBCMN_EBASE, CBCMN_EBASE + 1, -4102, -5000,
					  -100000,     INT32_MIN,       INT64_MIN};
	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++)
		assert_message(garbage[i]);
}

/* ---- blocking as a thread on an executor is a deadlock ------------------------- */

struct on_exec {
	cbcmn_nursery *thread_n; /* opened by the test thread */
	int open_rc, destroy_rc, run_rc;
	int64_t await_rc;
	cbcmn_nursery *n;
};

static int64_t block_as_thread(cbcmn_cx *cx, void *arg)
{
	struct on_exec *x = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	x->open_rc = cbcmn_nursery_open(rt, NULL, &x->n);
	x->destroy_rc = cbcmn_runtime_destroy(rt);
	x->run_rc = cbcmn_runtime_run(rt, answer, NULL, NULL);
	/* The thread's nursery, awaited as that thread: only from a thread. */
	x->await_rc = cbcmn_nursery_await_all(NULL, x->thread_n);
	return 0;
}

static void test_thread_calls_on_executor_edeadlk(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(1);
	struct on_exec x = {0};
	_Atomic uint32_t ran = 0;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &x.thread_n), 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, block_as_thread, &x, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(x.open_rc, -EDEADLK);
	assert_int_equal(x.destroy_rc, -EDEADLK);
	assert_int_equal(x.run_rc, -EDEADLK);
	assert_int_equal(x.await_rc, -EDEADLK);
	/* The thread's nursery was left alone: still open, still awaitable. */
	assert_int_equal(cbcmn_nursery_spawn(NULL, x.thread_n, count, &ran, NULL), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, x.thread_n), 0);
	assert_int_equal(atomic_load(&ran), 1);
	assert_runs(rt);
	t_destroy(rt);
}

/* cbcmn_task_join(NULL, ...) from a task sleeps on a futex as if the
 * executor were an ordinary thread; on one executor, with the joined task
 * queued behind it, nothing ever wakes it.  Like every other call that
 * would block a thread, it must say -EDEADLK instead (and leave the handle
 * joinable).  The joined task has ended here, so today's code returns at
 * once instead of hanging. */
struct join_null {
	int null_rc, cx_rc;
	int64_t null_result, cx_result;
};

static int64_t join_as_thread(cbcmn_cx *cx, void *arg)
{
	struct join_null *j = arg;
	cbcmn_nursery *n;
	cbcmn_task *t;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, answer, NULL, &t) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	j->null_result = -1;
	j->null_rc = cbcmn_task_join(NULL, t, &j->null_result);
	if (j->null_rc != 0) /* the handle is still ours */
		j->cx_rc = cbcmn_task_join(cx, t, &j->cx_result);
	return 0;
}

static void test_join_null_cx_inside_task_edeadlk(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(1);
	struct join_null j = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, join_as_thread, &j, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(j.null_rc, -EDEADLK);
	assert_int_equal(j.null_result, -1);
	assert_int_equal(j.cx_rc, 0);
	assert_int_equal(j.cx_result, 42);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		BAD_TEST(test_create_rejects_bad_config),
		BAD_TEST(test_destroy_null_and_busy),
		BAD_TEST(test_run_rejects_null),
		BAD_TEST(test_nursery_calls_reject_null),
		BAD_TEST(test_budget_calls_reject_null),
		BAD_TEST(test_join_rejects_null),
		BAD_TEST(test_join_twice_is_ejoined),
		BAD_TEST(test_stats_rejects_null),
		BAD_TEST(test_yield_and_cx_accessors_reject_null),
		BAD_TEST(test_strerror_covers_everything),
		BAD_TEST(test_thread_calls_on_executor_edeadlk),
		BAD_TEST(test_join_null_cx_inside_task_edeadlk),
	};
	return cmocka_run_group_tests_name("badinput", tests, NULL, NULL);
}
