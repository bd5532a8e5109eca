/* test_budget_defaults: what each profile gives a task when the program
 * configures no budget (SPEC-021 §1.1.1, §8.1-8.2, §10.2, §15.1;
 * docs/BUDGETS.md): the service profile's finite defaults stop a spin, a
 * fork bomb and unbounded allocation by themselves, children cannot spawn
 * unless granted, stacks and channel buffers count as memory, and the
 * native profile (cbcmn_config_init's) enforces a budget once one is set. */
#include <errno.h>

#include "cbcmn_chan.h"
#include "helpers.h"

static cbcmn_runtime *rt_service(uint32_t workers)
{
	return t_runtime_profile(CBCMN_PROFILE_SERVICE, workers);
}

static bool budget_eq(const cbcmn_budget *a, const cbcmn_budget *b)
{
	return a->ops == b->ops && a->memory == b->memory && a->spawn_count == b->spawn_count &&
	       a->channel_ops == b->channel_ops && a->syscalls == b->syscalls;
}

/* ---- what a task gets ---- */

struct seen {
	cbcmn_budget root, root_after_spawn, child;
	cbcmn_caps root_caps;
};

static int64_t report_child(cbcmn_cx *cx, void *arg)
{
	struct seen *s = arg;
	TASK_CHECK(cbcmn_budget_get(cx, &s->child) == 0);
	return 0;
}

static int64_t report_root(cbcmn_cx *cx, void *arg)
{
	struct seen *s = arg;
	TASK_CHECK(cbcmn_budget_get(cx, &s->root) == 0);
	TASK_CHECK(cbcmn_caps_get(cx, &s->root_caps) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, report_child, s, NULL) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &s->root_after_spawn) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* The service profile's numbers, read back: a root gets the root
 * defaults and CapSpawn alone; a child the child defaults, spawn_count
 * 0, out of the root's pool; the root pays the child's stack. */
static void test_service_gives_the_documented_defaults(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(1);
	struct seen s;
	memset(&s, 0, sizeof(s));
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, report_root, &s, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
	const cbcmn_budget root = {CBCMN_SERVICE_ROOT_OPS, CBCMN_SERVICE_ROOT_MEMORY,
				   CBCMN_SERVICE_ROOT_SPAWN, CBCMN_SERVICE_ROOT_CHANNEL_OPS,
				   CBCMN_SERVICE_ROOT_SYSCALLS};
	/* Two runtime calls (get, caps_get) ran no checkpoint: ops intact. */
	assert_true(budget_eq(&s.root, &root));
	assert_int_equal(s.root_caps.flags, CBCMN_CAP_SPAWN); /* no implicit CapBudget */
	assert_int_equal(s.child.spawn_count, 0);            /* §8.2 */
	assert_int_equal(s.child.memory, CBCMN_SERVICE_CHILD_MEMORY);
	assert_int_equal(s.child.channel_ops, CBCMN_SERVICE_CHILD_CHANNEL_OPS);
	assert_int_equal(s.child.syscalls, CBCMN_SERVICE_CHILD_SYSCALLS);
	assert_true(s.child.ops <= CBCMN_SERVICE_CHILD_OPS && s.child.ops + 2 >= CBCMN_SERVICE_CHILD_OPS);
	/* Drawn from the root's pool, and the stack charged to the root. */
	assert_int_equal(s.root.memory - s.root_after_spawn.memory,
			 CBCMN_SERVICE_CHILD_MEMORY + CBCMN_STACK_DEFAULT);
	assert_int_equal(s.root.spawn_count - s.root_after_spawn.spawn_count, 1);
	assert_int_equal(s.root.channel_ops - s.root_after_spawn.channel_ops,
			 CBCMN_SERVICE_CHILD_CHANNEL_OPS);
	assert_true(s.root.ops - s.root_after_spawn.ops >= CBCMN_SERVICE_CHILD_OPS);
}

/* Cluster and sovereign are SPEC-021 profiles too: the same defaults. */
static void test_cluster_and_sovereign_have_the_same_defaults(void **state)
{
	(void)state;
	const cbcmn_budget root = {CBCMN_SERVICE_ROOT_OPS, CBCMN_SERVICE_ROOT_MEMORY,
				   CBCMN_SERVICE_ROOT_SPAWN, CBCMN_SERVICE_ROOT_CHANNEL_OPS,
				   CBCMN_SERVICE_ROOT_SYSCALLS};
	for (int i = 0; i < 2; i++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cfg.profile = i ? CBCMN_PROFILE_SOVEREIGN : CBCMN_PROFILE_CLUSTER;
		if (i) {
			cfg.yield_interval = 256;
			cfg.caps.flags = CBCMN_CAP_SPAWN;
		}
		cbcmn_runtime *rt = t_runtime_cfg(&cfg);
		struct seen s;
		memset(&s, 0, sizeof(s));
		int64_t r = -1;
		assert_int_equal(cbcmn_runtime_run(rt, report_root, &s, &r), 0);
		assert_int_equal(r, 0);
		ASSERT_TASK_CHECKS();
		t_destroy(rt);
		assert_true(budget_eq(&s.root, &root));
		assert_int_equal(s.root_caps.flags, CBCMN_CAP_SPAWN);
		assert_int_equal(s.child.spawn_count, 0);
		assert_int_equal(s.child.memory, CBCMN_SERVICE_CHILD_MEMORY);
	}
}

/* ---- offenders, stopped with nothing configured ---- */

struct outcome {
	int64_t await_rc, join_rc, sibling_rc;
};

static int64_t sibling(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 7;
}

/* Opens a nursery, spawns the offender and a well-behaved sibling, and
 * records what they ended with. */
static int64_t run_offender(cbcmn_cx *cx, struct outcome *o, cbcmn_task_fn fn, void *arg)
{
	cbcmn_nursery *n;
	cbcmn_task *off, *sib;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, fn, arg, &off) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, sibling, NULL, &sib) == 0);
	o->await_rc = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(cbcmn_task_join(cx, off, &o->join_rc) == 0);
	TASK_CHECK(cbcmn_task_join(cx, sib, &o->sibling_rc) == 0);
	return 0;
}

static void run_offender_test(cbcmn_runtime *rt, cbcmn_task_fn parent, struct outcome *o)
{
	memset(o, 0, sizeof(*o));
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, parent, o, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(o->sibling_rc, 7);
}

/* 32 M checkpoints, far beyond a child's default ops: before the service
 * profile had finite defaults this returned 0. */
static _Atomic uint64_t spun;

static int64_t spin(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (uint64_t i = 0; i < (1ull << 25); i++) {
		CBCMN_CHECKPOINT(cx);
		atomic_store_explicit(&spun, i + 1, memory_order_relaxed);
	}
	return 0;
}

static int64_t spin_parent(cbcmn_cx *cx, void *arg)
{
	return run_offender(cx, arg, spin, NULL);
}

static void test_service_stops_a_spin_by_default(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(2);
	struct outcome o;
	atomic_store(&spun, 0);
	run_offender_test(rt, spin_parent, &o);
	assert_int_equal(o.join_rc, CBCMN_EBUDGET);
	assert_int_equal(o.await_rc, CBCMN_EBUDGET);
	assert_true(atomic_load(&spun) <= CBCMN_SERVICE_CHILD_OPS);
	t_destroy(rt);
}

/* A fork bomb in a child: every task tries to spawn two more, 16 deep
 * (65 535 tasks if nothing stops it).  A service child has no spawn
 * budget: its first spawn waits for a grant nobody gives. */
static _Atomic int bombs;

static int64_t bomb(cbcmn_cx *cx, void *arg)
{
	intptr_t depth = (intptr_t)arg;
	atomic_fetch_add(&bombs, 1);
	if (depth == 0)
		return 0;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 2; i++)
		if (cbcmn_nursery_spawn(cx, n, bomb, (void *)(depth - 1), NULL) != 0)
			break;
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t bomb_parent(cbcmn_cx *cx, void *arg)
{
	return run_offender(cx, arg, bomb, (void *)(intptr_t)15);
}

static void test_service_stops_a_fork_bomb_by_default(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(2);
	struct outcome o;
	atomic_store(&bombs, 0);
	run_offender_test(rt, bomb_parent, &o);
	assert_int_equal(o.join_rc, CBCMN_EBUDGET);
	assert_int_equal(o.await_rc, CBCMN_EBUDGET);
	assert_int_equal(atomic_load(&bombs), 1); /* the offender only */
	t_destroy(rt);
}

/* A root spawning in a loop: its own pool stops it (memory for the
 * children's budgets and stacks while they live, spawn_count for good). */
static _Atomic int spawned;

static int64_t quick(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t root_bomb(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 70000; i++) {
		if (cbcmn_nursery_spawn(cx, n, quick, NULL, NULL) != 0)
			break;
		atomic_fetch_add(&spawned, 1);
	}
	return cbcmn_nursery_await_all(cx, n);
}

static void test_service_stops_a_root_fork_bomb_by_default(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(1);
	atomic_store(&spawned, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, root_bomb, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, CBCMN_EBUDGET);
	assert_true(atomic_load(&spawned) <= (int)CBCMN_SERVICE_ROOT_SPAWN);
	cbcmn_stats st;
	cbcmn_stats_snapshot(rt, &st, NULL, 0);
	assert_int_equal(st.tasks_live, 0);
	t_destroy(rt);
}

/* Unbounded allocation: 4 GiB counted in 1 MiB pieces (each freed at
 * once: the budget counts bytes allocated, not live). */
static _Atomic int allocated;

static int64_t hog(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (int i = 0; i < 4096; i++) {
		void *p = cbcmn_alloc(cx, 1u << 20);
		TASK_CHECK(p != NULL);
		cbcmn_free(p);
		atomic_fetch_add(&allocated, 1);
	}
	return 0;
}

static int64_t hog_parent(cbcmn_cx *cx, void *arg)
{
	return run_offender(cx, arg, hog, NULL);
}

static void test_service_stops_unbounded_allocation_by_default(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(2);
	struct outcome o;
	atomic_store(&allocated, 0);
	run_offender_test(rt, hog_parent, &o);
	assert_int_equal(o.join_rc, CBCMN_EBUDGET);
	assert_int_equal(o.await_rc, CBCMN_EBUDGET);
	assert_true(atomic_load(&allocated) <= (int)(CBCMN_SERVICE_CHILD_MEMORY >> 20));
	t_destroy(rt);
	/* A root too: 1 GiB of pool, then it is stopped. */
	rt = rt_service(1);
	atomic_store(&allocated, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, hog, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, CBCMN_EBUDGET);
	assert_int_equal(atomic_load(&allocated), (int)(CBCMN_SERVICE_ROOT_MEMORY >> 20));
	t_destroy(rt);
}

/* ---- §8.2: spawning is granted ---- */

/* fib with a task per call.  Under service a child has no spawns, and
 * a default draw would give the first child everything its spawner has
 * (min(pool, DEFAULT), §8.2): every spawn grants the subtree exactly what
 * it needs, and the accounting has to be exact for fib to finish. */
static uint64_t fib_tasks(int k) /* tasks a fib(k) task spawns below it */
{
	return k < 2 ? 0 : 2 + fib_tasks(k - 1) + fib_tasks(k - 2);
}

static cbcmn_budget fib_grant(int k)
{
	uint64_t t = fib_tasks(k);
	return (cbcmn_budget){
		.ops = 4 * (t + 1),                         /* 2 spawns per task, slack */
		.memory = t * CBCMN_STACK_DEFAULT + t + 1, /* the stacks it pays */
		.spawn_count = t,                           /* 0: the default, none */
		.channel_ops = t + 1,
		.syscalls = t + 1,
	};
}

static int64_t fib_granted(cbcmn_cx *cx, void *arg)
{
	int k = (int)(intptr_t)arg;
	if (k < 2)
		return k;
	cbcmn_nursery *n;
	cbcmn_task *a, *b;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget ga = fib_grant(k - 1), gb = fib_grant(k - 2);
	cbcmn_spawn_opts oa = {.budget = &ga}, ob = {.budget = &gb};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, fib_granted, (void *)(intptr_t)(k - 1), &oa, &a) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, fib_granted, (void *)(intptr_t)(k - 2), &ob, &b) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, n), ra = -1, rb = -1;
	TASK_CHECK(cbcmn_task_join(cx, a, &ra) == 0);
	TASK_CHECK(cbcmn_task_join(cx, b, &rb) == 0);
	return r ? r : ra + rb;
}

static int64_t fib_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	cbcmn_task *t;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget g = fib_grant(9);
	cbcmn_spawn_opts o = {.budget = &g};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, fib_granted, (void *)(intptr_t)9, &o, &t) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, n), rt = -1;
	TASK_CHECK(cbcmn_task_join(cx, t, &rt) == 0);
	return r ? r : rt;
}

/* Recursive fork-join under service works when each spawn grants what its
 * subtree needs (without a grant a child's first spawn stops it: the fork
 * bomb test). */
static void test_service_children_spawn_only_when_granted(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(2);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, fib_root, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 34);
	t_destroy(rt);
}

/* Nested nurseries, each child granted all its parent has: the memory
 * each level pays for the next one's stack ends the chain with
 * CBCMN_EBUDGET, never a hang, and every level's charge comes back. */
static _Atomic int deepest;

static int64_t nest(cbcmn_cx *cx, void *arg)
{
	intptr_t depth = (intptr_t)arg;
	atomic_store(&deepest, (int)depth); /* one task at a time: a chain */
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget all = {CBCMN_UNLIMITED, CBCMN_UNLIMITED, CBCMN_UNLIMITED, CBCMN_UNLIMITED,
			    CBCMN_UNLIMITED};
	cbcmn_spawn_opts o = {.budget = &all};
	int rc = cbcmn_nursery_spawn_ex(cx, n, nest, (void *)(depth + 1), &o, NULL);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : r;
}

static int64_t nest_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_budget before, after;
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	int64_t r = nest(cx, (void *)(intptr_t)0);
	TASK_CHECK(cbcmn_budget_get(cx, &after) == 0);
	TASK_CHECK(after.memory == before.memory);
	return r;
}

static void test_service_nesting_ends_at_the_memory_budget(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.profile = CBCMN_PROFILE_SERVICE;
	cfg.budget.memory = 32 * CBCMN_STACK_DEFAULT + 100; /* 32 stacks deep */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	atomic_store(&deepest, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, nest_root, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, CBCMN_EBUDGET);
	assert_int_equal(atomic_load(&deepest), 32);
	t_destroy(rt);
}

/* ---- what memory counts ---- */

struct mem {
	uint64_t before, with_chan, after_destroy, after_child;
	int create_rc;
};

static int64_t chan_user(cbcmn_cx *cx, void *arg)
{
	struct mem *m = arg;
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	m->before = b.memory;
	cbcmn_chan *c;
	m->create_rc = cbcmn_chan_create(cbcmn_cx_runtime(cx), 100, 8, &c);
	TASK_CHECK(m->create_rc == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	m->with_chan = b.memory;
	TASK_CHECK(cbcmn_chan_destroy(c) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	m->after_destroy = b.memory;
	/* A child cancelled before it ran gives its stack back too. */
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, quick, NULL, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_cancel(n) == 0);
	cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	m->after_child = b.memory;
	return 0;
}

static void test_channel_buffer_and_stacks_count_as_memory(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(1);
	struct mem m = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, chan_user, &m, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(m.before - m.with_chan, 800); /* 100 messages of 8 bytes */
	assert_int_equal(m.after_destroy, m.before);   /* given back */
	assert_int_equal(m.after_child, m.before);     /* the stack's charge too */
	t_destroy(rt);
}

/* Destroyed by another task, a channel's charge stays spent: the
 * destroyer is not the payer and gets nothing; a thread's channel is
 * nobody's. */
struct handoff {
	cbcmn_chan *c;
	uint64_t child_before, child_after;
};

static int64_t destroyer(cbcmn_cx *cx, void *arg)
{
	struct handoff *h = arg;
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	h->child_before = b.memory;
	TASK_CHECK(cbcmn_chan_destroy(h->c) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	h->child_after = b.memory;
	return 0;
}

static int64_t hand_over(cbcmn_cx *cx, void *arg)
{
	struct handoff *h = arg;
	cbcmn_budget before, after;
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	TASK_CHECK(cbcmn_chan_create(cbcmn_cx_runtime(cx), 64, 16, &h->c) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, destroyer, h, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &after) == 0);
	TASK_CHECK(before.memory - after.memory == 64 * 16);
	return 0;
}

static void test_channel_destroyed_by_another_stays_spent(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(2);
	struct handoff h = {0};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, hand_over, &h, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(h.child_after, h.child_before);
	/* A thread's channel: charged to nobody, destroyed by a thread. */
	cbcmn_chan *c;
	assert_int_equal(cbcmn_chan_create(rt, 8, 8, &c), 0);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	t_destroy(rt);
}

/* A channel outliving its runtime, destroyed by a task of a new runtime
 * made at the old one's address, with the payer's id (ids count from 1 in
 * each runtime): destroy compared only the runtime's address and the id,
 * and refunded the stranger (rvattack19).  The address comes back when
 * the allocator reuses it: bounded tries, skipped if it never does. */
struct stranger {
	cbcmn_chan *c;
	uint64_t id, before, after;
};

static int64_t strange_make(cbcmn_cx *cx, void *arg)
{
	struct stranger *s = arg;
	TASK_CHECK(cbcmn_chan_create(cbcmn_cx_runtime(cx), 64, 16, &s->c) == 0);
	s->id = cbcmn_cx_task_id(cx);
	return 0;
}

static int64_t strange_destroy(cbcmn_cx *cx, void *arg)
{
	struct stranger *s = arg;
	cbcmn_budget b;
	TASK_CHECK(cbcmn_cx_task_id(cx) == s->id); /* the payer's id, another runtime */
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	s->before = b.memory;
	TASK_CHECK(cbcmn_chan_destroy(s->c) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	s->after = b.memory;
	return 0;
}

static void test_channel_destroyed_in_a_runtime_at_its_runtimes_address_stays_spent(void **state)
{
	(void)state;
	struct stranger s = {0};
	int64_t r = -1;
	cbcmn_runtime *rt = rt_service(1);
	assert_int_equal(cbcmn_runtime_run(rt, strange_make, &s, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	void *old = rt;
	t_destroy(rt); /* the channel lives on */
	for (int i = 0; i < 64; i++) {
		rt = rt_service(1);
		if ((void *)rt == old)
			break;
		t_destroy(rt);
		rt = NULL;
	}
	if (!rt) {
		assert_int_equal(cbcmn_chan_destroy(s.c), 0);
		T_SKIP("no runtime came back at the old address in 64 tries");
		return;
	}
	assert_int_equal(cbcmn_runtime_run(rt, strange_destroy, &s, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(s.after, s.before); /* nothing given to a stranger */
	t_destroy(rt);
}

/* A channel bigger than the creator's memory budget stops the creator. */
static int64_t big_chan(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_chan *c;
	int rc = cbcmn_chan_create(cbcmn_cx_runtime(cx), 1u << 20, 8, &c); /* 8 MiB */
	if (rc == 0)
		cbcmn_chan_destroy(c);
	return 0;
}

static int64_t big_chan_parent(cbcmn_cx *cx, void *arg)
{
	return run_offender(cx, arg, big_chan, NULL);
}

static void test_channel_beyond_the_memory_budget_is_stopped(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(2);
	struct outcome o;
	run_offender_test(rt, big_chan_parent, &o);
	assert_int_equal(o.join_rc, CBCMN_EBUDGET);
	t_destroy(rt);
}

/* ---- the native profile ---- */

/* cbcmn_config_init's profile is native: nothing limited, recursive
 * fork-join needs no grant; a finite budget set there is enforced (the
 * implicit CapBudget is not granted to void it). */
static int64_t native_fork(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	TASK_CHECK(b.ops == CBCMN_UNLIMITED && b.spawn_count == CBCMN_UNLIMITED);
	atomic_store(&bombs, 0);
	return bomb(cx, (void *)(intptr_t)6);
}

static void test_native_is_the_default_and_enforces_what_is_set(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	assert_int_equal(cfg.profile, CBCMN_PROFILE_NATIVE);
	cfg.workers = 2;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, native_fork, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&bombs), 127); /* grandchildren spawn freely */
	t_destroy(rt);
	/* The case: ops = 1000 and 32 M checkpoints used to succeed. */
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.child_budget.ops = 1000;
	rt = t_runtime_cfg(&cfg);
	struct outcome o;
	atomic_store(&spun, 0);
	run_offender_test(rt, spin_parent, &o);
	assert_int_equal(o.join_rc, CBCMN_EBUDGET);
	assert_true(atomic_load(&spun) <= 1000);
	t_destroy(rt);
}

/* ---- hostile numbers ---- */

/* Asking for more than exists is refused (CBCMN_EBUDGET), nothing taken
 * but the spawn's op; asking for everything (CBCMN_UNLIMITED) saturates
 * instead of wrapping: the child gets what the spawner has, the spawner
 * keeps nothing of it, and all of it comes back.  (The more than exists
 * used to be clamped to everything, as CBCMN_UNLIMITED is.) */
static int64_t greedy(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_budget before, during, after;
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget huge = {UINT64_MAX - 1, UINT64_MAX - 1, UINT64_MAX - 1, UINT64_MAX - 1,
			     UINT64_MAX - 1};
	cbcmn_spawn_opts o = {.budget = &huge};
	cbcmn_task *t;
	struct seen sink;
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, report_child, &sink, &o, &t) == CBCMN_EBUDGET);
	TASK_CHECK(cbcmn_budget_get(cx, &during) == 0);
	TASK_CHECK(during.memory == before.memory && during.channel_ops == before.channel_ops &&
		   during.syscalls == before.syscalls && during.spawn_count == before.spawn_count);
	const cbcmn_budget all = {CBCMN_UNLIMITED, CBCMN_UNLIMITED, CBCMN_UNLIMITED,
				  CBCMN_UNLIMITED, CBCMN_UNLIMITED};
	o.budget = &all;
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, report_child, &sink, &o, &t) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &during) == 0);
	TASK_CHECK(during.memory == 0 && during.channel_ops == 0 && during.syscalls == 0);
	TASK_CHECK(during.spawn_count == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(cbcmn_task_join(cx, t, NULL) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &after) == 0);
	TASK_CHECK(after.memory == before.memory && after.channel_ops == before.channel_ops &&
		   after.syscalls == before.syscalls);
	TASK_CHECK(after.spawn_count == before.spawn_count - 1);
	TASK_CHECK(after.ops < before.ops && after.ops + 16 > before.ops);
	return 0;
}

static void test_service_greedy_ask_saturates(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(1);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, greedy, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	t_destroy(rt);
}

/* ---- where refunds go ---- */

/* A task spawning into a nursery a thread opened (the thread hands its
 * nursery to a root, which spawns the handlers into it): every child
 * drew its budget and its stack from that task, and once the children
 * have ended all of it is back.  It used to vanish (the opener is a
 * thread, nobody to give it to): 1 MiB + a stack per child, so after
 * about 960 children the task waited for budget forever. */
struct thread_nursery {
	cbcmn_nursery *n;
	uint64_t before, after;
	struct seen sink;
};

static int64_t into_thread_nursery(cbcmn_cx *cx, void *arg)
{
	struct thread_nursery *tn = arg;
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	tn->before = b.memory;
	for (int i = 0; i < 50; i++) {
		cbcmn_task *h;
		TASK_CHECK(cbcmn_nursery_spawn(cx, tn->n, report_child, &tn->sink, &h) == 0);
		TASK_CHECK(cbcmn_task_join(cx, h, NULL) == 0);
	}
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	tn->after = b.memory;
	return 0;
}

static void test_spawns_into_a_thread_nursery_give_back_to_the_spawner(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(2);
	struct thread_nursery tn = {0};
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &tn.n), 0);
	cbcmn_task *h;
	assert_int_equal(cbcmn_nursery_spawn(NULL, tn.n, into_thread_nursery, &tn, &h), 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_task_join(NULL, h, &r), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, tn.n), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(tn.before, CBCMN_SERVICE_ROOT_MEMORY);
	assert_int_equal(tn.after, tn.before);
	t_destroy(rt);
}

/* A thread spawning into a task's nursery makes a root: its budget is the
 * config's, not the opener's, so when it ends nothing of it goes to the
 * opener.  It used to: each such child handed the opener a whole root
 * budget (1 GiB, 65535 spawns ...), so any task whose nursery a thread
 * spawned into could outgrow its own budget without bound. */
struct outside {
	cbcmn_nursery *n;
	_Atomic int spawned; /* 1: ok, -1: failed */
	struct seen sink;
};

static void *outside_spawner(void *arg)
{
	struct outside *o = arg;
	int rc = cbcmn_nursery_spawn(NULL, o->n, report_child, &o->sink, NULL);
	atomic_store(&o->spawned, rc == 0 ? 1 : -1);
	return NULL;
}

static int64_t let_a_thread_spawn(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct outside o = {0};
	cbcmn_budget before, after;
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &o.n) == 0);
	pthread_t th;
	TASK_CHECK(pthread_create(&th, NULL, outside_spawner, &o) == 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(&o.spawned) == 0 && t_now_ns() < end)
		cbcmn_yield(cx);
	pthread_join(th, NULL);
	TASK_CHECK(atomic_load(&o.spawned) == 1);
	TASK_CHECK(cbcmn_nursery_await_all(cx, o.n) == 0);
	TASK_CHECK(cbcmn_budget_get(cx, &after) == 0);
	TASK_CHECK(after.memory == before.memory);
	TASK_CHECK(after.spawn_count == before.spawn_count);
	TASK_CHECK(after.channel_ops == before.channel_ops);
	TASK_CHECK(after.syscalls == before.syscalls);
	TASK_CHECK(after.ops <= before.ops);
	return 0;
}

static void test_thread_spawn_into_a_task_nursery_does_not_inflate_the_opener(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_service(2);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, let_a_thread_spawn, NULL, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_service_gives_the_documented_defaults),
		T_WATCHED_TEST(test_cluster_and_sovereign_have_the_same_defaults),
		T_WATCHED_TEST(test_service_stops_a_spin_by_default),
		T_WATCHED_TEST(test_service_stops_a_fork_bomb_by_default),
		T_WATCHED_TEST(test_service_stops_a_root_fork_bomb_by_default),
		T_WATCHED_TEST(test_service_stops_unbounded_allocation_by_default),
		T_WATCHED_TEST(test_service_children_spawn_only_when_granted),
		T_WATCHED_TEST(test_service_nesting_ends_at_the_memory_budget),
		T_WATCHED_TEST(test_channel_buffer_and_stacks_count_as_memory),
		T_WATCHED_TEST(test_channel_destroyed_by_another_stays_spent),
		T_WATCHED_TEST(test_channel_destroyed_in_a_runtime_at_its_runtimes_address_stays_spent),
		T_WATCHED_TEST(test_channel_beyond_the_memory_budget_is_stopped),
		T_WATCHED_TEST(test_native_is_the_default_and_enforces_what_is_set),
		T_WATCHED_TEST(test_service_greedy_ask_saturates),
		T_WATCHED_TEST(test_spawns_into_a_thread_nursery_give_back_to_the_spawner),
		T_WATCHED_TEST(test_thread_spawn_into_a_task_nursery_does_not_inflate_the_opener),
	};
	return cmocka_run_group_tests_name("budget_defaults", tests, NULL, NULL);
}
