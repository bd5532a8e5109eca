/* test_obligation: general obligations (reserve/commit/abort), their owners,
 * and leaks under each policy. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

static uint64_t outstanding(cbcmn_runtime *rt, uint64_t *leaked)
{
	cbcmn_snapshot s = {.size = sizeof(s), .version = CBCMN_SNAPSHOT_VERSION};
	assert_int_equal(cbcmn_runtime_snapshot(rt, &s, NULL, 0), 0);
	if (leaked)
		*leaked = s.obligations_leaked;
	return s.total.obligations;
}

static cbcmn_runtime *rt_policy(uint32_t policy)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.obligation_leak = policy;
	return t_runtime_cfg(&cfg);
}

/* ---- commit, abort, and the stale handle ------------------------------- */

static int64_t commit_and_abort(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_obligation a, b;
	TASK_CHECK(cbcmn_obligation_reserve(rt, cx, "a", &a) == 0);
	TASK_CHECK(cbcmn_obligation_reserve(rt, cx, "b", &b) == 0);
	TASK_CHECK(cbcmn_obligation_commit(cx, &a) == 0);
	TASK_CHECK(cbcmn_obligation_abort(cx, &b) == 0);
	return 0;
}

static void test_commit_and_abort(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_policy(CBCMN_LEAK_LOG);
	t_run(rt, commit_and_abort, NULL, 0); /* no ELEAKED: both resolved */
	uint64_t leaked;
	assert_int_equal(outstanding(rt, &leaked), 0);
	assert_int_equal(leaked, 0);
	t_destroy(rt);
}

static int64_t twice(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_obligation o, copy, o2;
	TASK_CHECK(cbcmn_obligation_reserve(rt, cx, NULL, &o) == 0);
	copy = o;
	TASK_CHECK(cbcmn_obligation_commit(cx, &o) == 0);
	TASK_CHECK(cbcmn_obligation_commit(cx, &o) == -EINVAL);    /* resolved: handle cleared */
	TASK_CHECK(cbcmn_obligation_commit(cx, &copy) == -EINVAL); /* double commit */
	TASK_CHECK(cbcmn_obligation_abort(cx, &copy) == -EINVAL);
	/* The record is reused by the next reservation: the stale copy still
	 * fails, and does not resolve the new one. */
	TASK_CHECK(cbcmn_obligation_reserve(rt, cx, NULL, &o2) == 0);
	TASK_CHECK(cbcmn_obligation_commit(cx, &copy) == -EINVAL);
	copy = o2;
	TASK_CHECK(cbcmn_obligation_abort(cx, &o2) == 0);
	TASK_CHECK(cbcmn_obligation_commit(cx, &copy) == -EINVAL); /* commit after abort */
	cbcmn_obligation zero = {0};
	TASK_CHECK(cbcmn_obligation_commit(cx, &zero) == -EINVAL);
	TASK_CHECK(cbcmn_obligation_abort(cx, NULL) == -EINVAL);
	TASK_CHECK(cbcmn_obligation_reserve(rt, cx, NULL, NULL) == -EINVAL);
	TASK_CHECK(cbcmn_obligation_reserve(NULL, cx, NULL, &o) == -EINVAL);
	return 0;
}

static void test_double_commit_and_commit_after_abort_are_einval(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_policy(CBCMN_LEAK_LOG);
	t_run(rt, twice, NULL, 0);
	assert_int_equal(outstanding(rt, NULL), 0);
	t_destroy(rt);
}

static void test_bad_leak_policy_is_einval(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.obligation_leak = CBCMN_LEAK_PANIC + 1;
	cbcmn_runtime *rt = NULL;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), -EINVAL);
	assert_null(rt);
}

/* ---- cross-task rules ----------------------------------------------------- */

struct cross {
	cbcmn_obligation o;       /* the parent's */
	cbcmn_obligation thread_o; /* the test thread's */
	int other_commit, other_thread_commit;
};

static int64_t other_task(cbcmn_cx *cx, void *arg)
{
	struct cross *x = arg;
	cbcmn_obligation o = x->o;
	x->other_commit = cbcmn_obligation_commit(cx, &o);
	cbcmn_obligation t = x->thread_o;
	x->other_thread_commit = cbcmn_obligation_commit(cx, &t);
	return 0;
}

static int64_t cross_main(cbcmn_cx *cx, void *arg)
{
	struct cross *x = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	TASK_CHECK(cbcmn_obligation_reserve(rt, cx, "parent's", &x->o) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, other_task, x, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0); /* the child leaked nothing */
	TASK_CHECK(cbcmn_obligation_commit(cx, &x->o) == 0); /* still ours */
	return 0;
}

static void test_only_the_owner_resolves(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_policy(CBCMN_LEAK_LOG);
	struct cross x = {0};
	assert_int_equal(cbcmn_obligation_reserve(rt, NULL, "thread's", &x.thread_o), 0);
	t_run(rt, cross_main, &x, 0);
	assert_int_equal(x.other_commit, -EPERM);       /* another task's */
	assert_int_equal(x.other_thread_commit, -EPERM); /* a thread's, from a task */
	assert_int_equal(outstanding(rt, NULL), 1); /* the thread's */
	/* Any thread may resolve a thread's: this one. */
	assert_int_equal(cbcmn_obligation_commit(NULL, &x.thread_o), 0);
	assert_int_equal(outstanding(rt, NULL), 0);
	t_destroy(rt);
}

struct held {
	cbcmn_obligation o;
	_Atomic int ready; /* o is filled in: the hand-off to the test thread */
};

static int64_t hold_and_wait(cbcmn_cx *cx, void *arg)
{
	struct held *h = arg;
	TASK_CHECK(cbcmn_obligation_reserve(cbcmn_cx_runtime(cx), cx, NULL, &h->o) == 0);
	atomic_store_explicit(&h->ready, 1, memory_order_release);
	cbcmn_sleep(cx, 3600ull * 1000000000ull); /* until cancelled */
	TASK_CHECK(cbcmn_obligation_abort(cx, &h->o) == 0);
	return 0;
}

static void test_thread_cannot_resolve_a_tasks(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_policy(CBCMN_LEAK_LOG);
	struct held h = {0};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, hold_and_wait, &h, NULL), 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load_explicit(&h.ready, memory_order_acquire)) {
		if (t_now_ns() > end)
			fail_msg("the task never reserved");
		usleep(1000);
	}
	assert_int_equal(outstanding(rt, NULL), 1);
	cbcmn_obligation copy = h.o;
	assert_int_equal(cbcmn_obligation_commit(NULL, &copy), -EPERM);
	assert_int_equal(cbcmn_obligation_abort(NULL, &copy), -EPERM);
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	ASSERT_TASK_CHECKS();
	assert_int_equal(outstanding(rt, NULL), 0);
	t_destroy(rt);
}

/* Two threads resolve one thread-owned obligation at once, each with its
 * own copy or both given one handle object: exactly one wins (TSan: the
 * records' fields are only touched by the winner).  Shared, the loser read
 * the handle twice and could take the winner's NULL for the record (TSan:
 * a race on the handle). */
static int obligation_commit(int i, void *h)
{
	(void)i;
	return cbcmn_obligation_commit(NULL, h);
}

static void test_racing_resolutions_one_wins(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_policy(CBCMN_LEAK_LOG);
	for (int round = 0; round < T_SCALE(400); round++) {
		cbcmn_obligation o;
		assert_int_equal(cbcmn_obligation_reserve(rt, NULL, NULL, &o), 0);
		int rc[2];
		t_race2(&o, sizeof(o), round & 1, obligation_commit, rc);
		assert_int_equal(rc[0] + rc[1], -EINVAL); /* one 0, one -EINVAL */
		assert_true(rc[0] == 0 || rc[1] == 0);
	}
	assert_int_equal(outstanding(rt, NULL), 0);
	t_destroy(rt);
}

/* ---- leaks ------------------------------------------------------------------ */

struct leak {
	uint64_t id;
	int64_t await_rc;
};

static int64_t leaker(cbcmn_cx *cx, void *arg)
{
	struct leak *l = arg;
	cbcmn_obligation o;
	l->id = cbcmn_cx_task_id(cx);
	TASK_CHECK(cbcmn_obligation_reserve(cbcmn_cx_runtime(cx), cx, "lease", &o) == 0);
	return 0; /* and forgets it */
}

static int64_t leak_main(cbcmn_cx *cx, void *arg)
{
	struct leak *l = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, leaker, l, NULL) == 0);
	l->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

/* Run leak_main under policy; stderr's text into msg. */
static void leak_run(uint32_t policy, struct leak *l, char *msg, size_t len)
{
	cbcmn_runtime *rt = rt_policy(policy);
	int saved, fd = t_stderr_capture(&saved);
	int64_t r = -1;
	int rrc = cbcmn_runtime_run(rt, leak_main, l, &r);
	t_stderr_restore(fd, saved, msg, len);
	assert_int_equal(rrc, 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	uint64_t leaked;
	assert_int_equal(outstanding(rt, &leaked), 0); /* aborted by the runtime */
	assert_int_equal(leaked, 1);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 1);
	t_destroy(rt);
}

static void test_leak_is_logged_and_counted(void **state)
{
	(void)state;
	struct leak l = {0};
	char msg[4096];
	leak_run(CBCMN_LEAK_LOG, &l, msg, sizeof(msg));
	assert_int_equal(l.await_rc, CBCMN_ELEAKED);
	char want[96];
	snprintf(want, sizeof(want), "cbcmn: task %llu ended holding an unresolved lease",
		 (unsigned long long)l.id);
	if (!strstr(msg, want))
		fail_msg("stderr lacks \"%s\": got \"%s\"", want, msg);
}

static void test_leak_is_counted_silently(void **state)
{
	(void)state;
	struct leak l = {0};
	char msg[4096];
	leak_run(CBCMN_LEAK_COUNT, &l, msg, sizeof(msg));
	assert_int_equal(l.await_rc, CBCMN_ELEAKED);
	assert_null(strstr(msg, "obligation leak"));
}

/* The panic policy aborts the process: in a forked child. */
static void test_leak_panics_when_asked(void **state)
{
	(void)state;
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(stdout);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], STDERR_FILENO);
		close(p[0]);
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cfg.obligation_leak = CBCMN_LEAK_PANIC;
		cbcmn_runtime *rt;
		if (cbcmn_runtime_create(&cfg, &rt) != 0)
			_exit(3);
		struct leak l = {0};
		int64_t r;
		cbcmn_runtime_run(rt, leak_main, &l, &r);
		_exit(0); /* not reached: the leak aborts */
	}
	close(p[1]);
	char msg[4096];
	t_read_all(p[0], msg, sizeof(msg));
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGABRT);
	assert_non_null(strstr(msg, "obligation leak"));
	assert_non_null(strstr(msg, "CBCMN_LEAK_PANIC"));
}

/* A thread's obligation has no task to end with: still outstanding when
 * the runtime is destroyed, it is a leak there. */
static void test_thread_leak_found_at_destroy(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_policy(CBCMN_LEAK_LOG);
	cbcmn_obligation o;
	assert_int_equal(cbcmn_obligation_reserve(rt, NULL, "session", &o), 0);
	int saved, fd = t_stderr_capture(&saved);
	int rc = cbcmn_runtime_destroy(rt);
	char msg[4096];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_int_equal(rc, 0);
	assert_non_null(strstr(msg, "a thread (at runtime destroy) ended holding an unresolved session"));
}

/* Channel permits go through the same mechanism: counted outstanding while
 * held, counted leaked, silent under the count policy. */
static int64_t permit_leaker(cbcmn_cx *cx, void *arg)
{
	cbcmn_chan_permit p;
	TASK_CHECK(cbcmn_chan_reserve(cx, arg, &p) == 0);
	return 0;
}

static int64_t permit_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_chan *c = arg;
	cbcmn_chan_permit p;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	TASK_CHECK(cbcmn_chan_reserve(cx, c, &p) == 0);
	cbcmn_snapshot s = {.size = sizeof(s), .version = CBCMN_SNAPSHOT_VERSION};
	TASK_CHECK(cbcmn_runtime_snapshot(rt, &s, NULL, 0) == 0);
	TASK_CHECK(s.total.obligations == 1);
	TASK_CHECK(cbcmn_chan_abort(cx, &p) == 0);
	TASK_CHECK(cbcmn_runtime_snapshot(rt, &s, NULL, 0) == 0);
	TASK_CHECK(s.total.obligations == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, permit_leaker, c, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_channel_permits_count_as_obligations(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_policy(CBCMN_LEAK_COUNT);
	cbcmn_chan *c;
	assert_int_equal(cbcmn_chan_create(rt, 2, sizeof(int), &c), 0);
	int saved, fd = t_stderr_capture(&saved);
	int64_t r = 0;
	int rrc = cbcmn_runtime_run(rt, permit_main, c, &r);
	char msg[4096];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_int_equal(rrc, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, CBCMN_ELEAKED);
	assert_null(strstr(msg, "obligation leak"));
	uint64_t leaked;
	assert_int_equal(outstanding(rt, &leaked), 0);
	assert_int_equal(leaked, 1);
	/* A thread's permit counts too. */
	cbcmn_chan_permit p;
	assert_int_equal(cbcmn_chan_try_reserve(NULL, c, &p), 0);
	assert_int_equal(outstanding(rt, NULL), 1);
	assert_int_equal(cbcmn_runtime_is_quiescent(rt), 0);
	assert_int_equal(cbcmn_chan_abort(NULL, &p), 0);
	assert_int_equal(outstanding(rt, NULL), 0);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	t_destroy(rt);
}


/* ---- review (s8-rv-seed0) -------------------------------------------------- */

/* A task the runtime ends from outside (its budget given up on, and with
 * the cancellation branch a cancel at a checkpoint) never got to resolve
 * what it held: the runtime aborts its obligations, and that is no leak of
 * the task's (seed 000: task_completed aborts the orphans).  It was
 * counted as a leak, logged, and under CBCMN_LEAK_PANIC killed the process
 * for a budget running out. */
struct held_spin {
	cbcmn_chan *c;
	_Atomic int reserved; /* set once both are held */
};

static int64_t reserve_then_spin(cbcmn_cx *cx, void *arg)
{
	struct held_spin *h = arg;
	cbcmn_obligation o;
	cbcmn_chan_permit p;
	TASK_CHECK(cbcmn_obligation_reserve(cbcmn_cx_runtime(cx), cx, "spun", &o) == 0);
	TASK_CHECK(cbcmn_chan_try_reserve(cx, h->c, &p) == 0);
	atomic_store(&h->reserved, 1);
	for (;;)
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static void test_budget_unwound_task_obligation_is_aborted_not_leaked(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.budget.ops = 5000;
	cfg.caps.flags = CBCMN_CAPS_EXPLICIT | CBCMN_CAP_SPAWN; /* no CapBudget */
	cfg.obligation_leak = CBCMN_LEAK_LOG; /* a line would show a leak */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct held_spin h = {0};
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &h.c), 0);
	cbcmn_chan *c = h.c;
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, reserve_then_spin, &h, NULL), 0);
	int saved, fd = t_stderr_capture(&saved);
	int64_t r = cbcmn_nursery_await_all(NULL, n);
	char msg[4096];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_int_equal(r, CBCMN_EBUDGET);
	ASSERT_TASK_CHECKS();
	assert_null(strstr(msg, "obligation leak"));
	uint64_t leaked;
	assert_int_equal(outstanding(rt, &leaked), 0);
	assert_int_equal(leaked, 0);
	/* The permit's slot is free again. */
	cbcmn_chan_permit p;
	assert_int_equal(cbcmn_chan_try_reserve(NULL, c, &p), 0);
	assert_int_equal(cbcmn_chan_abort(NULL, &p), 0);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	t_destroy(rt);
}

/* The same for a task cancelled at a checkpoint (SPEC-021 §5.2.2): it is
 * unwound to the same landing pad, so what it held is aborted, not leaked,
 * and its result is CBCMN_ECANCELED. */
static void test_cancelled_task_obligation_is_aborted_not_leaked(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.flags = CBCMN_CONFIG_NO_INLINE;
	cfg.obligation_leak = CBCMN_LEAK_COUNT;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct held_spin h = {0};
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &h.c), 0);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, reserve_then_spin, &h, NULL), 0);
	for (uint64_t until = t_now_ns() + T_STALL_NS; !atomic_load(&h.reserved);) {
		assert_true(t_now_ns() < until); /* a hang bound: the task never reserved */
		sched_yield();
	}
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	ASSERT_TASK_CHECKS();
	uint64_t leaked;
	assert_int_equal(outstanding(rt, &leaked), 0);
	assert_int_equal(leaked, 0);
	cbcmn_chan_permit p;
	assert_int_equal(cbcmn_chan_try_reserve(NULL, h.c, &p), 0);
	assert_int_equal(cbcmn_chan_abort(NULL, &p), 0);
	assert_int_equal(cbcmn_chan_destroy(h.c), 0);
	t_destroy(rt);
}

/* The same when the executor's thread dies under the task (SPEC-021 §14
 * WorkerPanic): the reaper ends it with CBCMN_EPANIC, and what it held was
 * reported as its leak. */
static int64_t reserve_then_quit(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_obligation o;
	TASK_CHECK(cbcmn_obligation_reserve(cbcmn_cx_runtime(cx), cx, "quit", &o) == 0);
	pthread_exit(NULL); /* ends the executor's thread, not just the task */
	return 0;
}

static void test_task_of_dead_executor_obligation_is_aborted_not_leaked(void **state)
{
	(void)state;
	cbcmn_config cfg;
	t_config_for_thread_death(&cfg);
	cfg.obligation_leak = CBCMN_LEAK_COUNT;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, reserve_then_quit, NULL, NULL), 0);
	int saved, fd = t_stderr_capture(&saved);
	int64_t r = cbcmn_nursery_await_all(NULL, n);
	char msg[4096];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_int_equal(r, CBCMN_EPANIC);
	ASSERT_TASK_CHECKS();
	uint64_t leaked;
	assert_int_equal(outstanding(rt, &leaked), 0);
	assert_int_equal(leaked, 0);
	t_destroy(rt);
}

/* The usual error path: reserve fails, the cleanup aborts the handle it
 * never filled.  A failed reserve left *o as it was (stack garbage), and
 * abort dereferenced it: SIGSEGV instead of -EINVAL. */
static void test_abort_after_failed_reserve_is_einval(void **state)
{
	(void)state;
	cbcmn_obligation o;
	memset(&o, 0xa5, sizeof(o)); /* what an uninitialised local holds */
	assert_int_equal(cbcmn_obligation_reserve(NULL, NULL, "x", &o), -EINVAL);
	assert_int_equal(cbcmn_obligation_abort(NULL, &o), -EINVAL);
	assert_int_equal(cbcmn_obligation_commit(NULL, &o), -EINVAL);
}

/* The same for a channel permit: try_reserve on a full channel is -EAGAIN,
 * an ordinary outcome, and the cleanup that aborts the permit followed its
 * garbage pointer (SIGSEGV). */
static void test_abort_after_failed_try_reserve_is_einval(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_policy(CBCMN_LEAK_COUNT);
	cbcmn_chan *c;
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &c), 0);
	cbcmn_chan_permit held, p;
	assert_int_equal(cbcmn_chan_try_reserve(NULL, c, &held), 0);
	memset(&p, 0xa5, sizeof(p)); /* what an uninitialised local holds */
	assert_int_equal(cbcmn_chan_try_reserve(NULL, c, &p), -EAGAIN);
	assert_int_equal(cbcmn_chan_abort(NULL, &p), -EINVAL);
	int v = 1;
	assert_int_equal(cbcmn_chan_commit(NULL, &p, &v), -EINVAL);
	assert_int_equal(cbcmn_chan_abort(NULL, &held), 0);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_commit_and_abort),
		T_WATCHED_TEST(test_double_commit_and_commit_after_abort_are_einval),
		T_WATCHED_TEST(test_bad_leak_policy_is_einval),
		T_WATCHED_TEST(test_only_the_owner_resolves),
		T_WATCHED_TEST(test_thread_cannot_resolve_a_tasks),
		T_WATCHED_TEST(test_racing_resolutions_one_wins),
		T_WATCHED_TEST(test_leak_is_logged_and_counted),
		T_WATCHED_TEST(test_leak_is_counted_silently),
		T_WATCHED_TEST(test_leak_panics_when_asked),
		T_WATCHED_TEST(test_thread_leak_found_at_destroy),
		T_WATCHED_TEST(test_channel_permits_count_as_obligations),
		T_WATCHED_TEST(test_budget_unwound_task_obligation_is_aborted_not_leaked),
		T_WATCHED_TEST(test_task_of_dead_executor_obligation_is_aborted_not_leaked),
		T_WATCHED_TEST(test_cancelled_task_obligation_is_aborted_not_leaked),
		T_WATCHED_TEST(test_abort_after_failed_reserve_is_einval),
		T_WATCHED_TEST(test_abort_after_failed_try_reserve_is_einval),
	};
	return cmocka_run_group_tests_name("obligation", tests, NULL, NULL);
}
