/* test_budget_refund: where budget goes back to and whom it wakes
 * (docs/BUDGETS.md, "Where budgets come from", "Exhaustion and recharge"):
 * refunds return to whoever paid, a spawner waiting for budget is woken by
 * its children's refunds, a recharge racing the end of its target loses
 * nothing, amounts saturate, a spawn that waited re-checks its nursery, and
 * the native profile's unset child budget is a share, not everything. */
#include <errno.h>

#include "../lib/runtime.h" /* a task's budget wait, to know it waits */
#include "cbcmn_chan.h"
#include "helpers.h"

#define S CBCMN_STACK_DEFAULT

/* Native (cbcmn_config_init's) runtime, with root and child budgets. */
static cbcmn_runtime *rt_native(uint32_t workers, const cbcmn_budget *root,
				const cbcmn_budget *child)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	if (root)
		cfg.budget = *root;
	if (child)
		cfg.child_budget = *child;
	return t_runtime_cfg(&cfg);
}

/* Until task h waits for budget (or a stall: the caller's check fails). */
static bool wait_until_waiting_for_budget(cbcmn_cx *cx, cbcmn_task *h)
{
	struct cbcmn_task *t = (struct cbcmn_task *)h;
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load_explicit(&t->budget_iw, memory_order_relaxed)) {
		if (t_now_ns() > end)
			return false;
		cbcmn_yield(cx);
	}
	return true;
}

static int64_t quick(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t yield_a_little(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (int i = 0; i < 20; i++)
		cbcmn_yield(cx);
	return 0;
}

/* Yields until *flag is set or its nursery is cancelled. */
static int64_t wait_flag(cbcmn_cx *cx, void *arg)
{
	_Atomic int *flag = arg;
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(flag)) {
		if (cbcmn_yield(cx) != 0)
			return CBCMN_ECANCELED;
		if (t_now_ns() > end)
			return -ETIMEDOUT;
	}
	return 0;
}

static int64_t set_flag(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	atomic_store((_Atomic int *)arg, 1);
	return 0;
}

/* ---- 1. native, only cfg.budget.memory set ---- */

static int64_t two_live_children(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	_Atomic int second = 0;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, wait_flag, &second, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, set_flag, &second, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* The first child used to take all the root had left after its stack
 * ("all the spawner has"): the second spawn waited for its stack's memory
 * and the root was ended with CBCMN_EBUDGET.  An unset child component is
 * a share (half): both live at once. */
static void test_native_memory_budget_alone_lets_a_second_child_live(void **state)
{
	(void)state;
	cbcmn_budget root = {.memory = 8 * S};
	cbcmn_runtime *rt = rt_native(2, &root, NULL);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, two_live_children, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	t_destroy(rt);
}

/* ---- 2. recharge racing its target's end ---- */

/* Children that end at once, each recharged by its parent as it ends (on
 * another executor): what the parent gives either reaches the child before
 * it gives its leftovers back, or stays with the parent.  It used to be
 * added to a child that had already given back: lost, though 0 was
 * returned. */
static int64_t recharge_racer(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_budget before, after;
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	const cbcmn_budget give = {.syscalls = 7};
	for (int i = 0; i < T_SCALE(1000); i++) {
		cbcmn_nursery *n;
		cbcmn_task *t;
		TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
		TASK_CHECK(cbcmn_nursery_spawn_stealable(cx, n, quick, NULL, &t) == 0);
		/* Sweep the recharge across the child's start and end on the
		 * other executor (a wake and a steal: tens of microseconds). */
		uint64_t at = t_now_ns() + (uint64_t)(i * 7919 % 40000);
		while (t_now_ns() < at)
			;
		TASK_CHECK(cbcmn_budget_recharge(cx, t, &give) == 0);
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
		TASK_CHECK(cbcmn_task_join(cx, t, NULL) == 0);
	}
	TASK_CHECK(cbcmn_budget_get(cx, &after) == 0);
	TASK_CHECK(after.syscalls == before.syscalls);
	return after.syscalls == before.syscalls ? 0 : (int64_t)(before.syscalls - after.syscalls);
}

static void test_recharge_racing_the_end_of_its_target_loses_nothing(void **state)
{
	(void)state;
	cbcmn_budget root = {.syscalls = 1000000000};
	cbcmn_budget child = {.syscalls = 10};
	cbcmn_runtime *rt = rt_native(2, &root, &child);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, recharge_racer, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	t_destroy(rt);
}

/* ---- 3. refunds return to whoever paid ---- */

struct worker {
	cbcmn_nursery *n; /* the parent's nursery the worker spawns into */
	int bad_round;
};

static int64_t worker(cbcmn_cx *cx, void *arg)
{
	struct worker *w = arg;
	cbcmn_budget before, now;
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	for (int i = 0; i < 20; i++) {
		cbcmn_task *h;
		TASK_CHECK(cbcmn_nursery_spawn(cx, w->n, quick, NULL, &h) == 0);
		TASK_CHECK(cbcmn_task_join(cx, h, NULL) == 0);
		/* The child gave back before its join returned. */
		TASK_CHECK(cbcmn_budget_get(cx, &now) == 0);
		if (now.memory != before.memory) {
			w->bad_round = i + 1;
			return -1;
		}
	}
	return 0;
}

static int64_t parent_of_worker(cbcmn_cx *cx, void *arg)
{
	struct worker *w = arg;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &w->n) == 0);
	/* Enough for two children's default draws and stacks at once. */
	cbcmn_budget grant = {.memory = 2 * (CBCMN_SERVICE_CHILD_MEMORY + S), .spawn_count = 100};
	cbcmn_spawn_opts o = {.budget = &grant};
	cbcmn_task *h;
	int64_t wr = -1;
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, w->n, worker, w, &o, &h) == 0);
	TASK_CHECK(cbcmn_task_join(cx, h, &wr) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, w->n);
	return r ? r : wr;
}

/* A worker spawning into its parent's nursery paid for each child, but the
 * child's leftovers and stack went to the nursery's opener: the worker ran
 * dry after two children. */
static void test_worker_spawning_into_its_parents_nursery_gets_its_refunds(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_profile(CBCMN_PROFILE_SERVICE, 2);
	struct worker w = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, parent_of_worker, &w, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(w.bad_round, 0);
	assert_int_equal(r, 0);
	t_destroy(rt);
}

/* A worker hands long-running children to a thread's nursery and ends
 * before they do: what they give back passes through the ended worker to
 * the worker's own payer (here the root), instead of being lost. */
struct handoff {
	cbcmn_nursery *thread_n;
	_Atomic int release;
};

static int64_t hands_off(cbcmn_cx *cx, void *arg)
{
	struct handoff *h = arg;
	for (int i = 0; i < 2; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, h->thread_n, wait_flag, &h->release, NULL) == 0);
	return 0;
}

static int64_t root_of_handoff(cbcmn_cx *cx, void *arg)
{
	struct handoff *h = arg;
	cbcmn_budget before, now;
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	cbcmn_nursery *m;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &m) == 0);
	cbcmn_budget grant = {.ops = 3 * CBCMN_SERVICE_CHILD_OPS,
			      .memory = 3 * (CBCMN_SERVICE_CHILD_MEMORY + S),
			      .spawn_count = 2};
	cbcmn_spawn_opts o = {.budget = &grant};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, m, hands_off, h, &o, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, m) == 0); /* the worker has ended */
	atomic_store(&h->release, 1);
	/* The children end on their own now: all of it comes back. */
	uint64_t end = t_now_ns() + T_STALL_NS;
	do {
		cbcmn_yield(cx);
		TASK_CHECK(cbcmn_budget_get(cx, &now) == 0);
	} while (now.memory != before.memory && t_now_ns() < end);
	TASK_CHECK(now.memory == before.memory);
	return 0;
}

static void test_refunds_to_an_ended_worker_pass_on_to_its_payer(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_profile(CBCMN_PROFILE_SERVICE, 2);
	struct handoff h = {0};
	cbcmn_task *root;
	cbcmn_nursery *outer;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &outer), 0);
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &h.thread_n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, outer, root_of_handoff, &h, &root), 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_task_join(NULL, root, &r), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, h.thread_n), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, outer), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	t_destroy(rt);
}

/* Two levels of ended payers: a leaf's refund passes through its ended
 * spawner (which held its own payer, having a child left) and then through
 * that payer, which had nothing owed when it ended and so held nobody: the
 * walk went on to the third level's record, a root already freed (ASan:
 * heap-use-after-free in give()).  Every task a refund may pass through
 * holds its own payer until its record goes. */
struct chain {
	cbcmn_nursery *thread_n;
	_Atomic int release;
};

static int64_t leaf_spawner(cbcmn_cx *cx, void *arg)
{
	struct chain *c = arg;
	TASK_CHECK(cbcmn_nursery_spawn(cx, c->thread_n, wait_flag, &c->release, NULL) == 0);
	return 0;
}

static int64_t spawn_granted(cbcmn_cx *cx, cbcmn_task_fn fn, void *arg, uint64_t children)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget grant = {.ops = (children + 1) * CBCMN_SERVICE_CHILD_OPS,
			      .memory = (children + 1) * (CBCMN_SERVICE_CHILD_MEMORY + S),
			      .spawn_count = children};
	cbcmn_spawn_opts o = {.budget = &grant};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, fn, arg, &o, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t middle_payer(cbcmn_cx *cx, void *arg)
{
	return spawn_granted(cx, leaf_spawner, arg, 1);
}

static int64_t top_payer(cbcmn_cx *cx, void *arg)
{
	return spawn_granted(cx, middle_payer, arg, 2);
}

static void test_refund_through_two_ended_payers_after_the_root_is_freed(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_profile(CBCMN_PROFILE_SERVICE, 2);
	struct chain c = {0};
	cbcmn_nursery *outer;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &outer), 0);
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &c.thread_n), 0);
	/* The root is a thread's spawn: its record is free()d as it ends. */
	assert_int_equal(cbcmn_nursery_spawn(NULL, outer, top_payer, &c, NULL), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, outer), 0);
	atomic_store(&c.release, 1); /* the leaf ends: its refund walks up */
	assert_int_equal(cbcmn_nursery_await_all(NULL, c.thread_n), 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
}

/* Cluster: a supervisor recharges a grandchild again and again while it
 * ends and its parent awaits (and lets go of) its nursery.  Every recharge
 * either reaches it, and comes back through its parent when it ends, or is
 * refused (it has ended: -EPERM for a supervisor); the supervisor's
 * syscalls come back whole, and nothing touches the let-go nursery (TSan,
 * ASan). */
struct supervised {
	_Atomic(cbcmn_task *) grandchild;
	_Atomic int moved, refused;
};

static int64_t middle(cbcmn_cx *cx, void *arg)
{
	struct supervised *sv = arg;
	cbcmn_nursery *b;
	cbcmn_task *g;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &b) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_stealable(cx, b, yield_a_little, NULL, &g) == 0);
	atomic_store(&sv->grandchild, g); /* the supervisor joins it */
	return cbcmn_nursery_await_all(cx, b);
}

static int64_t supervisor(cbcmn_cx *cx, void *arg)
{
	struct supervised *sv = arg;
	cbcmn_budget before, after;
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	const cbcmn_budget one = {.syscalls = 1};
	cbcmn_budget grant = {.spawn_count = 1};
	cbcmn_spawn_opts o = {.budget = &grant};
	for (int round = 0; round < T_SCALE(200); round++) {
		cbcmn_nursery *a;
		cbcmn_task *g;
		atomic_store(&sv->grandchild, NULL);
		TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &a) == 0);
		o.placement = CBCMN_PLACE_STEALABLE;
		TASK_CHECK(cbcmn_nursery_spawn_ex(cx, a, middle, sv, &o, NULL) == 0);
		while (!(g = atomic_load(&sv->grandchild)))
			cbcmn_yield(cx);
		for (;;) {
			int rc = cbcmn_budget_recharge(cx, g, &one);
			if (rc == -EPERM) {
				atomic_fetch_add(&sv->refused, 1);
				break;
			}
			TASK_CHECK(rc == 0);
			atomic_fetch_add(&sv->moved, 1);
			cbcmn_yield(cx); /* it may be queued behind us */
		}
		TASK_CHECK(cbcmn_nursery_await_all(cx, a) == 0);
		TASK_CHECK(cbcmn_task_join(cx, g, NULL) == 0);
	}
	TASK_CHECK(cbcmn_budget_get(cx, &after) == 0);
	TASK_CHECK(after.syscalls == before.syscalls);
	return 0;
}

static void test_cluster_supervisor_recharging_a_grandchild_as_it_ends(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_profile(CBCMN_PROFILE_CLUSTER, 2);
	struct supervised sv = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, supervisor, &sv, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_true(atomic_load(&sv.moved) > 0);
	assert_int_equal(atomic_load(&sv.refused), T_SCALE(200));
	t_destroy(rt);
}

/* ---- 4. amounts saturate ---- */

struct seen_memory {
	_Atomic int go;
	uint64_t memory;
};

static int64_t report_later(cbcmn_cx *cx, void *arg)
{
	struct seen_memory *s = arg;
	/* Only yields until told: nothing folds the refunds meanwhile. */
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&s->go) && t_now_ns() < end)
		cbcmn_yield(cx);
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	s->memory = b.memory;
	return 0;
}

static int64_t recharge_to_unlimited(cbcmn_cx *cx, void *arg)
{
	struct seen_memory *s = arg;
	cbcmn_nursery *n;
	cbcmn_task *t;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, report_later, s, &t) == 0);
	const cbcmn_budget ten = {.memory = 10}, all = {.memory = CBCMN_UNLIMITED};
	TASK_CHECK(cbcmn_budget_recharge(cx, t, &ten) == 0);
	TASK_CHECK(cbcmn_budget_recharge(cx, t, &all) == 0);
	atomic_store(&s->go, 1);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(cbcmn_task_join(cx, t, NULL) == 0);
	return r;
}

/* 10 pending, then CBCMN_UNLIMITED: the pending refund wrapped to 9. */
static void test_recharge_to_unlimited_with_a_refund_pending_saturates(void **state)
{
	(void)state;
	cbcmn_budget child = {.memory = 1000};
	cbcmn_runtime *rt = rt_native(1, NULL, &child);
	struct seen_memory s = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, recharge_to_unlimited, &s, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_true(s.memory == CBCMN_UNLIMITED);
	t_destroy(rt);
}

/* ---- 5. a spawner waiting for budget is woken by its children's refunds ---- */

static _Atomic int spawned;

static int64_t spawn_many(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_budget before, after;
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 40; i++) {
		if (cbcmn_nursery_spawn(cx, n, yield_a_little, NULL, NULL) != 0)
			break;
		atomic_fetch_add(&spawned, 1);
	}
	int64_t r = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(cbcmn_budget_get(cx, &after) == 0);
	TASK_CHECK(after.memory == before.memory);
	return r;
}

/* Memory for four live children; forty spawned.  The fifth spawn waited
 * for memory its children would give back, counted as exhausted, and the
 * root was ended with CBCMN_EBUDGET (a :service root kept ~960). */
static void test_spawner_waiting_for_memory_is_woken_by_its_childrens_refunds(void **state)
{
	(void)state;
	cbcmn_budget root = {.memory = 4 * (S + 1)}, child = {.memory = 1};
	cbcmn_runtime *rt = rt_native(2, &root, &child);
	atomic_store(&spawned, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, spawn_many, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&spawned), 40);
	t_destroy(rt);
}

static int64_t spin(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (;;)
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static int64_t spawn_spinners(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 3; i++)
		if (cbcmn_nursery_spawn(cx, n, spin, NULL, NULL) != 0)
			break;
	return cbcmn_nursery_await_all(cx, n);
}

/* Waiting for refunds from children that all wait for budget themselves
 * (spinners out of ops) would wait for ever: the spawner then counts as
 * exhausted, and its opener ends it, and them, with CBCMN_EBUDGET. */
static void test_spawner_whose_children_are_all_exhausted_is_ended_not_hung(void **state)
{
	(void)state;
	cbcmn_budget root = {.memory = 2 * (S + 1)}, child = {.ops = 100, .memory = 1};
	cbcmn_runtime *rt = rt_native(2, &root, &child);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, spawn_spinners, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, CBCMN_EBUDGET);
	t_destroy(rt);
}

/* A :service producer with two spawns spawns a third consumer before it
 * feeds them.  Its children were drawn no spawn_count (SPEC-021 §8.2): no
 * refund of theirs can pay that spawn, so it counts as exhausted at once
 * and its opener ends it (and them) with CBCMN_EBUDGET.  It used not to
 * count while they ran (they would give back, but no spawns), and they wait
 * for what it would send: a hang. */
static int64_t consume(cbcmn_cx *cx, void *arg)
{
	int v;
	return cbcmn_chan_recv(cx, arg, &v) == 0 ? 0 : CBCMN_ECANCELED;
}

static int64_t producer(cbcmn_cx *cx, void *arg)
{
	cbcmn_chan *c = arg; /* the opener's: the producer may be ended */
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 3; i++)
		if (cbcmn_nursery_spawn(cx, n, consume, c, NULL) != 0)
			break;
	for (int i = 0; i < 3; i++)
		cbcmn_chan_send(cx, c, &i);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t open_for_producer(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_chan *c;
	TASK_CHECK(cbcmn_chan_create(cbcmn_cx_runtime(cx), 4, sizeof(int), &c) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	/* Memory and ops for three consumers; spawns for two. */
	cbcmn_budget two = {.ops = 4 * CBCMN_SERVICE_CHILD_OPS,
			    .memory = 4 * (CBCMN_SERVICE_CHILD_MEMORY + S),
			    .spawn_count = 2};
	cbcmn_spawn_opts o = {.budget = &two};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, producer, c, &o, NULL) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(cbcmn_chan_destroy(c) == 0);
	return r;
}

static void test_spawner_out_of_spawns_whose_children_wait_for_it_is_ended_not_hung(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_profile(CBCMN_PROFILE_SERVICE, 2);
	cbcmn_nursery *n;
	cbcmn_task *h;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, open_for_producer, NULL, &h), 0);
	/* Bounded: a hang is cancelled (it ends then) and reported. */
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(&((struct cbcmn_task *)h)->state) != CBCMN__T_DONE && t_now_ns() < end)
		usleep(1000);
	bool hung = atomic_load(&((struct cbcmn_task *)h)->state) != CBCMN__T_DONE;
	if (hung)
		cbcmn_nursery_cancel(n);
	int64_t r = 0;
	assert_int_equal(cbcmn_task_join(NULL, h, &r), 0);
	cbcmn_nursery_await_all(NULL, n);
	ASSERT_TASK_CHECKS();
	assert_false(hung);
	assert_int_equal(r, CBCMN_EBUDGET);
	t_destroy(rt);
}

/* Cancelled while it waits for its children's refunds: it ends at once
 * (CBCMN_ECANCELED), and so do the children. */
static _Atomic int never;

static int64_t spawn_holders(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 3; i++)
		if (cbcmn_nursery_spawn(cx, n, wait_flag, &never, NULL) != 0)
			break;
	return cbcmn_nursery_await_all(cx, n);
}

static void test_cancel_while_waiting_for_refunds_ends_the_spawner(void **state)
{
	(void)state;
	cbcmn_budget root = {.memory = 2 * (S + 1)}, child = {.memory = 1};
	cbcmn_runtime *rt = rt_native(2, &root, &child);
	cbcmn_nursery *n;
	cbcmn_task *h;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, spawn_holders, NULL, &h), 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&((struct cbcmn_task *)h)->budget_iw) && t_now_ns() < end)
		usleep(1000);
	assert_non_null(atomic_load(&((struct cbcmn_task *)h)->budget_iw));
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	int64_t r = 0;
	assert_int_equal(cbcmn_task_join(NULL, h, &r), 0);
	assert_int_equal(r, CBCMN_ECANCELED);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), CBCMN_ECANCELED);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
}

/* ---- 6. a spawn that waited re-checks its nursery ---- */

struct late {
	cbcmn_nursery *target; /* held: valid after its await_all */
	bool cancel; /* cancel the target instead of awaiting it */
	int spawn_rc;
	cbcmn_budget before, after;
};

static int64_t late_spawner(cbcmn_cx *cx, void *arg)
{
	struct late *l = arg;
	/* Has 1 byte: waits for its child's stack until recharged. */
	TASK_CHECK(cbcmn_budget_get(cx, &l->before) == 0);
	l->spawn_rc = cbcmn_nursery_spawn(cx, l->target, quick, NULL, NULL);
	TASK_CHECK(cbcmn_budget_get(cx, &l->after) == 0);
	return 0;
}

static int64_t await_while_a_spawn_waits(cbcmn_cx *cx, void *arg)
{
	struct late *l = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *a;
	cbcmn_task *s;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &a) == 0);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &l->target) == 0);
	TASK_CHECK(cbcmn_nursery_hold(l->target) == 0);
	cbcmn_budget one = {.memory = 1, .ops = 1000, .spawn_count = 10};
	cbcmn_spawn_opts o = {.budget = &one};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, a, late_spawner, l, &o, &s) == 0);
	TASK_CHECK(wait_until_waiting_for_budget(cx, s));
	/* The target's await_all begins (and ends: it is empty), or it is
	 * cancelled, while the spawn into it waits; then the spawner gets
	 * what it waited for. */
	if (l->cancel)
		TASK_CHECK(cbcmn_nursery_cancel(l->target) == 0);
	else
		TASK_CHECK(cbcmn_nursery_await_all(cx, l->target) == 0);
	cbcmn_budget stack = {.memory = S};
	TASK_CHECK(cbcmn_budget_recharge(cx, s, &stack) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, a) == 0);
	TASK_CHECK(cbcmn_task_join(cx, s, NULL) == 0);
	if (l->cancel)
		TASK_CHECK(cbcmn_nursery_await_all(cx, l->target) == CBCMN_ECANCELED);
	cbcmn_nursery_release(l->target);
	return 0;
}

/* The closed check came before the charge, where the spawner may wait: it
 * then spawned into a nursery whose await_all had begun (and returned).
 * Refused, the spawn takes nothing: its op, its spawn and its stack come
 * back (the op used to stay spent), and the recharge is the spawner's. */
static void late_run(bool cancel, int want)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.caps.flags = CBCMN_CAP_SPAWN | CBCMN_CAPS_EXPLICIT; /* no self-recharge */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct late l = {.cancel = cancel};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, await_while_a_spawn_waits, &l, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(l.spawn_rc, want);
	assert_true(l.after.ops == l.before.ops);
	assert_true(l.after.spawn_count == l.before.spawn_count);
	assert_true(l.after.memory == l.before.memory + S);
	t_destroy(rt);
}

static void test_spawn_that_waited_for_budget_into_an_awaited_nursery_is_closed(void **state)
{
	(void)state;
	late_run(false, CBCMN_ECLOSED);
}

/* The same for a nursery cancelled while the spawn waited. */
static void test_spawn_that_waited_for_budget_into_a_cancelled_nursery_takes_nothing(void **state)
{
	(void)state;
	late_run(true, CBCMN_ECANCELED);
}

/* ---- a spawn asking more than its spawner has ---- */

/* Asks a child budget of more memory than the root has left: refused with
 * CBCMN_EBUDGET, nothing taken (the op, the spawn and the stack come back;
 * the op used to stay spent).  A child asking what is there is spawned, lives on, and
 * the root's next spawns are paid from what it kept.  Clamped, as it used
 * to be, the first child took all the root had, and the next spawn
 * waited for its refund, which only its end (the flag) brings. */
struct over_ask {
	_Atomic int flag;
	int rc_over, rc_fit, rc_next;
	cbcmn_budget before, after;
};

static int64_t over_ask_root(cbcmn_cx *cx, void *arg)
{
	struct over_ask *o = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &o->before) == 0);
	cbcmn_budget over = {.memory = 1000 * S}, fit = {.memory = 4 * S};
	cbcmn_spawn_opts so = {.budget = &over};
	o->rc_over = cbcmn_nursery_spawn_ex(cx, n, wait_flag, &o->flag, &so, NULL);
	if (o->rc_over == 0)
		atomic_store(&o->flag, 1); /* clamped: its end alone gives back */
	TASK_CHECK(cbcmn_budget_get(cx, &o->after) == 0);
	so.budget = &fit;
	o->rc_fit = cbcmn_nursery_spawn_ex(cx, n, wait_flag, &o->flag, &so, NULL);
	o->rc_next = 0;
	for (int i = 0; i < 4 && !o->rc_next; i++)
		o->rc_next = cbcmn_nursery_spawn(cx, n, quick, NULL, NULL);
	atomic_store(&o->flag, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_spawn_asking_more_than_its_spawner_has_is_refused(void **state)
{
	(void)state;
	cbcmn_budget root = {.memory = 64 * S, .ops = 1000000};
	cbcmn_runtime *rt = rt_native(2, &root, NULL);
	struct over_ask o = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, over_ask_root, &o, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(o.rc_over, CBCMN_EBUDGET);
	assert_true(o.after.memory == o.before.memory); /* nothing taken */
	assert_true(o.after.spawn_count == o.before.spawn_count);
	assert_true(o.after.ops == o.before.ops);
	assert_int_equal(o.rc_fit, 0);
	assert_int_equal(o.rc_next, 0);
	t_destroy(rt);
}

/* The op of a refused spawn goes back to the budget, not to the fairness
 * window: a loop retrying the spawn still yields every yield_interval
 * calls.  Given back to the window, the loop never yielded, and on one
 * executor the sibling it waits for never ran. */
struct retry {
	_Atomic int flag;
	int refused, rounds;
};

static int64_t retry_root(cbcmn_cx *cx, void *arg)
{
	struct retry *o = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, set_flag, &o->flag, NULL) == 0);
	cbcmn_budget over = {.memory = 1000 * S};
	cbcmn_spawn_opts so = {.budget = &over};
	/* 64 rounds of the interval: one is enough to yield. */
	while (!atomic_load(&o->flag) && o->rounds < 64 * 64) {
		o->refused += cbcmn_nursery_spawn_ex(cx, n, quick, NULL, &so, NULL) == CBCMN_EBUDGET;
		o->rounds++;
	}
	return cbcmn_nursery_await_all(cx, n);
}

static void test_refused_spawns_in_a_loop_still_yield(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.yield_interval = 64;
	cfg.budget = (cbcmn_budget){.memory = 64 * S, .ops = 1000000};
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct retry o = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, retry_root, &o, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_true(atomic_load(&o.flag));
	assert_true(o.rounds > 0 && o.rounds < 64 * 64);
	assert_int_equal(o.refused, o.rounds);
	t_destroy(rt);
}

/* Asking exactly what is left after the spawn's stack is no trap: the
 * program asked for it.  Asking CBCMN_UNLIMITED is "all the spawner has"
 * as before; one more byte than there is is refused. */
struct exact_ask {
	_Atomic int flag;
	int rc_more, rc_exact;
	uint64_t left;
};

static int64_t exact_ask_root(cbcmn_cx *cx, void *arg)
{
	struct exact_ask *o = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget have;
	TASK_CHECK(cbcmn_budget_get(cx, &have) == 0);
	cbcmn_budget more = {.memory = have.memory - S + 1}, exact = {.memory = have.memory - S};
	cbcmn_spawn_opts so = {.budget = &more};
	o->rc_more = cbcmn_nursery_spawn_ex(cx, n, quick, NULL, &so, NULL);
	so.budget = &exact;
	o->rc_exact = cbcmn_nursery_spawn_ex(cx, n, wait_flag, &o->flag, &so, NULL);
	TASK_CHECK(cbcmn_budget_get(cx, &have) == 0);
	o->left = have.memory; /* the child lives: nothing came back yet */
	atomic_store(&o->flag, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_spawn_asking_exactly_what_is_left_gets_it(void **state)
{
	(void)state;
	cbcmn_budget root = {.memory = 8 * S};
	cbcmn_runtime *rt = rt_native(2, &root, NULL);
	struct exact_ask o = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, exact_ask_root, &o, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(o.rc_more, CBCMN_EBUDGET);
	assert_int_equal(o.rc_exact, 0);
	assert_true(o.left == 0);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_native_memory_budget_alone_lets_a_second_child_live),
		T_WATCHED_TEST(test_recharge_racing_the_end_of_its_target_loses_nothing),
		T_WATCHED_TEST(test_worker_spawning_into_its_parents_nursery_gets_its_refunds),
		T_WATCHED_TEST(test_refunds_to_an_ended_worker_pass_on_to_its_payer),
		T_WATCHED_TEST(test_refund_through_two_ended_payers_after_the_root_is_freed),
		T_WATCHED_TEST(test_cluster_supervisor_recharging_a_grandchild_as_it_ends),
		T_WATCHED_TEST(test_recharge_to_unlimited_with_a_refund_pending_saturates),
		T_WATCHED_TEST(test_spawner_waiting_for_memory_is_woken_by_its_childrens_refunds),
		T_WATCHED_TEST(test_spawner_whose_children_are_all_exhausted_is_ended_not_hung),
		T_WATCHED_TEST(test_spawner_out_of_spawns_whose_children_wait_for_it_is_ended_not_hung),
		T_WATCHED_TEST(test_cancel_while_waiting_for_refunds_ends_the_spawner),
		T_WATCHED_TEST(test_spawn_that_waited_for_budget_into_an_awaited_nursery_is_closed),
		T_WATCHED_TEST(test_spawn_that_waited_for_budget_into_a_cancelled_nursery_takes_nothing),
		T_WATCHED_TEST(test_spawn_asking_more_than_its_spawner_has_is_refused),
		T_WATCHED_TEST(test_spawn_asking_exactly_what_is_left_gets_it),
		T_WATCHED_TEST(test_refused_spawns_in_a_loop_still_yield),
	};
	return cmocka_run_group_tests_name("budget_refund", tests, NULL, NULL);
}
