/* test_profile: what each profile (SPEC-021 §10) allows and what it refuses. */
#include <errno.h>

#include "helpers.h"

static cbcmn_runtime *rt_profile_flags(cbcmn_profile p, uint32_t caps, uint32_t interval,
				       uint32_t flags, int *rc)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.profile = p;
	cfg.caps.flags = caps;
	cfg.yield_interval = interval;
	cfg.flags = flags;
	cbcmn_runtime *rt = NULL;
	*rc = cbcmn_runtime_create(&cfg, &rt);
	return rt;
}

static cbcmn_runtime *rt_profile(cbcmn_profile p, uint32_t caps, uint32_t interval, int *rc)
{
	return rt_profile_flags(p, caps, interval, 0, rc);
}

static int64_t child_ok(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

/* Spawns one child; returns the spawn's result, negated so that a refusal
 * does not fail the caller's own nursery. */
static int64_t try_spawn(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return -rc;
	rc = cbcmn_nursery_spawn(cx, n, child_ok, NULL, NULL);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	return rc ? -rc : r;
}

/* How many checkpoints run before a task is made to yield, observed by a
 * second task that counts them. */
static _Atomic long ticks;
static _Atomic int seen_at;

static int64_t ticker(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (int i = 0; i < 5000; i++) {
		atomic_fetch_add(&ticks, 1);
		CBCMN_CHECKPOINT(cx);
	}
	return 0;
}

static int64_t observer(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	atomic_store(&seen_at, (int)atomic_load(&ticks));
	return 0;
}

static int64_t interval_probe(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, observer, NULL, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, ticker, NULL, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static int observed_interval(cbcmn_profile p, uint32_t caps, uint32_t interval)
{
	int rc;
	/* Both tasks on fibers of their own: the ticker really yields. */
	cbcmn_runtime *rt = rt_profile_flags(p, caps, interval, CBCMN_CONFIG_NO_INLINE, &rc);
	assert_int_equal(rc, 0);
	atomic_store(&ticks, 0);
	atomic_store(&seen_at, -1);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, interval_probe, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
	return atomic_load(&seen_at);
}

static void test_core_has_no_scheduler(void **state)
{
	(void)state;
	int rc;
	cbcmn_runtime *rt = rt_profile(CBCMN_PROFILE_CORE, 0, 0, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(cbcmn_runtime_workers(rt), 0);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), CBCMN_ENOSCHED);
	int64_t r;
	assert_int_equal(cbcmn_runtime_run(rt, child_ok, NULL, &r), CBCMN_ENOSCHED);
	t_destroy(rt);
}

static void test_service_is_implicit(void **state)
{
	(void)state;
	int rc;
	cbcmn_runtime *rt = rt_profile(CBCMN_PROFILE_SERVICE, 0, 0, &rc);
	assert_int_equal(rc, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, try_spawn, NULL, &r), 0);
	assert_int_equal(r, 0); /* implicit CapSpawn */
	t_destroy(rt);
	/* A task is made to yield after 1024 checkpoints. */
	assert_int_equal(observed_interval(CBCMN_PROFILE_SERVICE, 0, 0), 1024);
}

static void test_cluster_yields_every_512(void **state)
{
	(void)state;
	assert_int_equal(observed_interval(CBCMN_PROFILE_CLUSTER, 0, 0), 512);
}

/* A supervisor (the grandparent) recharges a grandchild: cluster only. */
static _Atomic long progress;

static int64_t spinner(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (int i = 0; i < 3000; i++) {
		CBCMN_CHECKPOINT(cx);
		atomic_fetch_add(&progress, 1);
	}
	return 0;
}

struct sup {
	cbcmn_task *grandchild;
	_Atomic int ready;
	int64_t recharge_rc;
};

static int64_t middle(cbcmn_cx *cx, void *arg)
{
	struct sup *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget ask = {.ops = 1000};
	cbcmn_spawn_opts o = {.budget = &ask};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, spinner, NULL, &o, &s->grandchild) == 0);
	atomic_store(&s->ready, 1);
	/* Give the supervisor time to recharge before we wait (a parent
	 * waiting on children that are all exhausted ends them). */
	while (atomic_load(&progress) < 3000)
		cbcmn_yield(cx);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	int64_t gr;
	TASK_CHECK(cbcmn_task_join(cx, s->grandchild, &gr) == 0);
	TASK_CHECK(gr == 0);
	return r;
}

static int64_t supervisor(cbcmn_cx *cx, void *arg)
{
	struct sup *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	/* Granted one spawn: in cluster and service a child has none. */
	cbcmn_budget one = {.spawn_count = 1};
	cbcmn_spawn_opts o = {.budget = &one};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, middle, s, &o, NULL) == 0);
	while (!atomic_load(&s->ready) || atomic_load(&progress) < 999)
		cbcmn_yield(cx);
	cbcmn_budget more = {.ops = 2500};
	s->recharge_rc = cbcmn_budget_recharge(cx, s->grandchild, &more);
	if (s->recharge_rc != 0)
		atomic_store(&progress, 3000); /* let middle give up */
	return cbcmn_nursery_await_all(cx, n);
}

static void supervise(cbcmn_profile p, int64_t *recharge_rc, int64_t *result)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.profile = p;
	cfg.yield_interval = 100;
	cfg.caps.flags = CBCMN_CAP_SPAWN | CBCMN_CAPS_EXPLICIT; /* no self-recharge */
	cbcmn_runtime *rt;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), 0);
	struct sup s = {0};
	atomic_store(&progress, 0);
	assert_int_equal(cbcmn_runtime_run(rt, supervisor, &s, result), 0);
	*recharge_rc = s.recharge_rc;
	t_destroy(rt);
}

static void test_cluster_supervisor_recharges(void **state)
{
	(void)state;
	int64_t rc, r;
	supervise(CBCMN_PROFILE_CLUSTER, &rc, &r);
	ASSERT_TASK_CHECKS();
	assert_int_equal(rc, 0);
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&progress), 3000);
	/* In service only the parent may: the grandparent is refused. */
	supervise(CBCMN_PROFILE_SERVICE, &rc, &r);
	assert_int_equal(rc, -EPERM);
	assert_int_equal(r, CBCMN_EBUDGET); /* nobody recharged the grandchild */
	atomic_store(&task_bad_line, 0);    /* its join check saw the failure: expected */
}

/* Under cluster too, the opener's join ends an exhausted child, though a
 * supervising ancestor could still recharge it: the join is the opener's
 * word on that child, as its await_all's give-up is (docs/BUDGETS.md,
 * "A task its opener is joining").  An ancestor that would keep it going
 * recharges it before the opener waits. */
static int64_t joining_middle(cbcmn_cx *cx, void *arg)
{
	struct sup *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget ask = {.ops = 1000};
	cbcmn_spawn_opts o = {.budget = &ask};
	cbcmn_task *h;
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, spinner, NULL, &o, &h) == 0);
	int64_t gr = 0;
	TASK_CHECK(cbcmn_task_join(cx, h, &gr) == 0);
	s->recharge_rc = gr;
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t joining_supervisor(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget one = {.spawn_count = 1};
	cbcmn_spawn_opts o = {.budget = &one};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, joining_middle, arg, &o, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_cluster_opener_join_ends_an_exhausted_child(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.profile = CBCMN_PROFILE_CLUSTER;
	cfg.caps.flags = CBCMN_CAP_SPAWN | CBCMN_CAPS_EXPLICIT;
	cbcmn_runtime *rt;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), 0);
	struct sup s = {0};
	int64_t r = -1;
	atomic_store(&progress, 0);
	assert_int_equal(cbcmn_runtime_run(rt, joining_supervisor, &s, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(s.recharge_rc, CBCMN_EBUDGET); /* the join's *result */
	assert_int_equal(r, CBCMN_EBUDGET); /* its failure, through both await_alls */
	assert_true(atomic_load(&progress) < 3000);
	t_destroy(rt);
}

static void test_sovereign_is_explicit(void **state)
{
	(void)state;
	int rc;
	/* yield_interval is user-defined: none given is an error. */
	assert_null(rt_profile(CBCMN_PROFILE_SOVEREIGN, 0, 0, &rc));
	assert_int_equal(rc, -EINVAL);
	/* No capability given: spawning is denied. */
	cbcmn_runtime *rt = rt_profile(CBCMN_PROFILE_SOVEREIGN, 0, 256, &rc);
	assert_int_equal(rc, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, try_spawn, NULL, &r), 0);
	assert_int_equal(r, -CBCMN_ESPAWNDENIED);
	t_destroy(rt);
	/* CapSpawn granted: allowed; and the interval is the one given. */
	rt = rt_profile(CBCMN_PROFILE_SOVEREIGN, CBCMN_CAP_SPAWN, 256, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(cbcmn_runtime_run(rt, try_spawn, NULL, &r), 0);
	assert_int_equal(r, 0);
	t_destroy(rt);
	assert_int_equal(observed_interval(CBCMN_PROFILE_SOVEREIGN, CBCMN_CAP_SPAWN, 300), 300);
}

static void test_bad_profile(void **state)
{
	(void)state;
	int rc;
	assert_null(rt_profile((cbcmn_profile)42, 0, 0, &rc));
	assert_int_equal(rc, -EINVAL);
	assert_string_equal(cbcmn_strerror(CBCMN_ENOSCHED),
			    "the core profile has no scheduler: nothing can be spawned");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_core_has_no_scheduler),
		T_WATCHED_TEST(test_service_is_implicit),
		T_WATCHED_TEST(test_cluster_yields_every_512),
		T_WATCHED_TEST(test_cluster_supervisor_recharges),
		T_WATCHED_TEST(test_cluster_opener_join_ends_an_exhausted_child),
		T_WATCHED_TEST(test_sovereign_is_explicit),
		T_WATCHED_TEST(test_bad_profile),
	};
	return cmocka_run_group_tests_name("profile", tests, NULL, NULL);
}
