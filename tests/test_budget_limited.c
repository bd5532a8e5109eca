/* test_budget_limited: the invariant the charge relies on (runtime.h,
 * cbcmn__budget_consistent()): a task whose limited flag is clear has
 * every budget component unlimited, so cbcmn__charge() tests the flag
 * (the task's line 2) and reads no component (line 3) of such a task
 * (docs/SCHEDULER.md, "The task record's layout").  Each test makes one
 * kind of budget write (a draw, the spawner's take, a recharge, a refund,
 * a self-recharge, memory charged and given back, channel operations, a
 * refused spawn's give-back, the janus ABI's decrement, a blocking call's
 * debts, an actor's default share) and checks the invariant after it; and
 * that a limited task is still charged, component by component (each
 * fails if cbcmn__charge() stopped early for it). */
#include "../lib/runtime.h" /* the task record's limited flag and components */
#include "../lib/fault.h"
#include "cbcmn_actor.h"
#include "cbcmn_chan.h"
#include "helpers.h"
#include "janus_rt.h"

#include <errno.h>

#define U CBCMN_UNLIMITED

static bool consistent(cbcmn_cx *cx)
{
	return cbcmn__budget_consistent((const struct cbcmn_task *)cx);
}

static bool limited(cbcmn_cx *cx)
{
	return ((const struct cbcmn_task *)cx)->limited;
}

/* A runtime whose root is unlimited and whose children, unless they ask,
 * are too. */
static cbcmn_runtime *rt_unlimited(void)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.budget = (cbcmn_budget){U, U, U, U, U};
	cfg.child_budget = (cbcmn_budget){U, U, U, U, U};
	return t_runtime_cfg(&cfg);
}

/* Run fn as the root of such a runtime. */
static void run_unlimited(cbcmn_task_fn fn)
{
	cbcmn_runtime *rt = rt_unlimited();
	t_run(rt, fn, NULL, 0);
	t_destroy(rt);
}

/* n sends and n receives on a channel of its own: 2n channel ops. */
static void chan_ops(cbcmn_cx *cx, int n)
{
	cbcmn_chan *c = NULL;
	TASK_CHECK(cbcmn_chan_create(cbcmn_cx_runtime(cx), 4, sizeof(uint64_t), &c) == 0);
	if (!c)
		return;
	for (uint64_t i = 0; i < (uint64_t)n; i++) {
		uint64_t v = i, got = ~0ull;
		TASK_CHECK(cbcmn_chan_send(cx, c, &v) == 0);
		TASK_CHECK(cbcmn_chan_recv(cx, c, &got) == 0 && got == i);
	}
	TASK_CHECK(cbcmn_chan_destroy(c) == 0);
}

static uint64_t component(const cbcmn_budget *b, int c)
{
	const uint64_t v[CBCMN__B_N] = {b->ops, b->memory, b->spawn_count, b->channel_ops,
					b->syscalls};
	return v[c];
}

/* A child that asked for one component finite, 1000 of it. */
static int64_t one_component(cbcmn_cx *cx, void *arg)
{
	int c = (int)(intptr_t)arg;
	TASK_CHECK(limited(cx));
	TASK_CHECK(consistent(cx));
	chan_ops(cx, 5);
	void *p = cbcmn_alloc(cx, 100);
	TASK_CHECK(p != NULL);
	cbcmn_free(p);
	TASK_CHECK(consistent(cx));
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	/* Still charged: the flag set, the component is read and taken from. */
	if (c == CBCMN__B_CHANNEL)
		TASK_CHECK(b.channel_ops == 1000 - 10);
	else
		TASK_CHECK(b.channel_ops == U);
	if (c == CBCMN__B_MEMORY)
		TASK_CHECK(b.memory <= 1000 - 100);
	else
		TASK_CHECK(b.memory == U);
	TASK_CHECK(component(&b, c) != U);
	return 0;
}

static int64_t spawn_each_component(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(!limited(cx) && consistent(cx));
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int c = 0; c < CBCMN__B_N; c++) {
		uint64_t v[CBCMN__B_N] = {U, U, U, U, U};
		v[c] = 1000;
		cbcmn_budget ask = {v[0], v[1], v[2], v[3], v[4]};
		cbcmn_spawn_opts o = {.budget = &ask};
		TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, one_component, (void *)(intptr_t)c, &o,
						  NULL) == 0);
		/* The spawner's take from unlimited leaves it unlimited. */
		TASK_CHECK(!limited(cx) && consistent(cx));
	}
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(!limited(cx) && consistent(cx));
	return 0;
}

/* Set set_budget()'s flag from every component: a child limited in one
 * component only is limited, and charged in that one. */
static void test_a_task_limited_in_one_component_is_limited_and_charged(void **state)
{
	(void)state;
	run_unlimited(spawn_each_component);
}

struct gate {
	_Atomic int go;
};

/* Waits for the gate, then checks what its recharges left. */
static int64_t recharged(cbcmn_cx *cx, void *arg)
{
	struct gate *g = arg;
	bool was_limited = limited(cx);
	while (!atomic_load(&g->go))
		cbcmn_yield(cx);
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0); /* folds the refunds in */
	TASK_CHECK(consistent(cx));
	chan_ops(cx, 3);
	TASK_CHECK(consistent(cx));
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	/* Unlimited, recharged with finite amounts: still unlimited.  Limited
	 * and recharged to unlimited: unlimited, flag kept (a charge then
	 * reads the component and takes nothing). */
	TASK_CHECK(b.channel_ops == U && b.memory == U);
	TASK_CHECK(limited(cx) == was_limited);
	return 0;
}

static int64_t recharge_both(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct gate g0 = {0}, g1 = {0};
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_task *plain = NULL, *lim = NULL;
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, recharged, &g0, &plain) == 0);
	cbcmn_budget ask = {U, 5000, U, 50, U};
	cbcmn_spawn_opts o = {.budget = &ask};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, recharged, &g1, &o, &lim) == 0);
	const cbcmn_budget some = {.ops = 7, .memory = 100, .spawn_count = 2, .channel_ops = 9,
				   .syscalls = 3};
	const cbcmn_budget all = {.memory = U, .channel_ops = U};
	if (plain)
		TASK_CHECK(cbcmn_budget_recharge(cx, plain, &some) == 0);
	if (lim)
		TASK_CHECK(cbcmn_budget_recharge(cx, lim, &all) == 0);
	TASK_CHECK(!limited(cx) && consistent(cx));
	atomic_store(&g0.go, 1);
	atomic_store(&g1.go, 1);
	int64_t r = -1;
	if (plain)
		TASK_CHECK(cbcmn_task_join(cx, plain, &r) == 0 && r == 0);
	if (lim)
		TASK_CHECK(cbcmn_task_join(cx, lim, &r) == 0 && r == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	/* The limited child's leftovers came back to an unlimited payer. */
	TASK_CHECK(!limited(cx) && consistent(cx));
	return 0;
}

/* Recharges (refunds folded with saturation) never make an unlimited
 * component finite; a limited task recharged to unlimited stays
 * consistent. */
static void test_recharges_and_refunds_keep_the_invariant(void **state)
{
	(void)state;
	run_unlimited(recharge_both);
}

/* Runs out of channel ops and recharges itself from its CapBudget. */
static int64_t self_recharging(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(limited(cx) && consistent(cx));
	chan_ops(cx, 20); /* 40 ops from 10: the limit pays the rest */
	TASK_CHECK(limited(cx) && consistent(cx));
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	TASK_CHECK(b.channel_ops != U && b.channel_ops <= 1000 + 10 - 40);
	return 0;
}

static int64_t spawn_self_recharging(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget ask = {U, U, U, 10, U};
	cbcmn_caps caps = {.flags = CBCMN_CAP_SPAWN | CBCMN_CAP_BUDGET,
			   .budget_limit = {U, U, U, 1000, U}};
	cbcmn_spawn_opts o = {.budget = &ask, .caps = &caps};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, self_recharging, NULL, &o, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(consistent(cx));
	return 0;
}

static void test_a_self_recharge_keeps_the_invariant(void **state)
{
	(void)state;
	run_unlimited(spawn_self_recharging);
}

static int64_t nop(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

/* A spawn refused after it was paid (its record's allocation fails): the
 * spawn and the stack come back (cbcmn__budget_uncharge_spawn()), an
 * unlimited component staying unlimited, a finite one what it was. */
static int64_t spawn_refused(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_budget before, after;
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	struct cbcmn__fault_plan once = {.nth = 1, .err = -ENOMEM};
	cbcmn__fault_arm(CBCMN__F_MALLOC, &once);
	int rc = cbcmn_nursery_spawn(cx, n, nop, NULL, NULL);
	uint64_t fails = cbcmn__fault_fails(CBCMN__F_MALLOC);
	cbcmn__fault_disarm_all();
	TASK_CHECK(rc == -ENOMEM && fails == 1);
	TASK_CHECK(consistent(cx));
	TASK_CHECK(cbcmn_budget_get(cx, &after) == 0);
	TASK_CHECK(after.spawn_count == before.spawn_count && after.memory == before.memory);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static int64_t spawn_refused_both(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(!limited(cx));
	spawn_refused(cx, NULL);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget ask = {U, 1u << 30, 100, U, U};
	cbcmn_spawn_opts o = {.budget = &ask};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, spawn_refused, NULL, &o, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static void test_a_refused_spawn_gives_back_and_keeps_the_invariant(void **state)
{
	(void)state;
	struct cbcmn__fault_plan once = {.nth = 1, .err = -ENOMEM};
	if (!cbcmn__fault_arm(CBCMN__F_MALLOC, &once))
		T_SKIP("built without CBCMN_FAULTS: runs in the ASan and TSan builds");
	cbcmn__fault_disarm_all();
	run_unlimited(spawn_refused_both);
}

/* ---- the janus ABI's decrement (cbcmn__budget_take_ops()) ---- */

/* Limited in ops and channel ops: the decrement takes ops, the flag and
 * the invariant stay, and a channel op after it is still charged. */
static int64_t janus_limited(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_budget before, after;
	TASK_CHECK(limited(cx) && consistent(cx));
	TASK_CHECK(cbcmn_budget_get(cx, &before) == 0);
	janus_budget_decrement(1000000);
	TASK_CHECK(limited(cx) && consistent(cx));
	TASK_CHECK(cbcmn_budget_get(cx, &after) == 0);
	TASK_CHECK(after.ops != U && after.ops < before.ops);
	chan_ops(cx, 5);
	TASK_CHECK(cbcmn_budget_get(cx, &after) == 0);
	TASK_CHECK(after.channel_ops == 1000 - 10);
	return 0;
}

static int64_t janus_decrements(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	janus_budget_decrement(1000000); /* unlimited: stays so */
	TASK_CHECK(!limited(cx) && consistent(cx));
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0 && b.ops == U);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget ask = {1000000000, U, U, 1000, U};
	cbcmn_spawn_opts o = {.budget = &ask};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, janus_limited, NULL, &o, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(!limited(cx) && consistent(cx));
	return 0;
}

static void test_the_janus_decrement_keeps_the_invariant(void **state)
{
	(void)state;
	run_unlimited(janus_decrements);
}

/* ---- a blocking call's debts (blocking.c, pay_debt()) ---- */

/* On the pool's thread with the task's context: three charges of 100
 * bytes, owed until the task pays them on its fiber. */
static int64_t blocking_costs(void *arg)
{
	cbcmn_cx *cx = arg;
	for (int i = 0; i < 3; i++)
		cbcmn_free(cbcmn_alloc(cx, 100));
	return 7;
}

/* Limited in memory and syscalls: the call's syscall and the debts it
 * left are taken; the flag and the invariant stay. */
static int64_t blocking_limited(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(limited(cx) && consistent(cx));
	int64_t r = 0;
	TASK_CHECK(cbcmn_blocking(cx, blocking_costs, cx, &r) == 0 && r == 7);
	TASK_CHECK(limited(cx) && consistent(cx));
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	TASK_CHECK(b.syscalls == 1000 - 1);
	TASK_CHECK(b.memory == 100000 - 300);
	TASK_CHECK(b.channel_ops == U && b.spawn_count == U);
	return 0;
}

static int64_t blocking_debts(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	int64_t r = 0;
	TASK_CHECK(cbcmn_blocking(cx, blocking_costs, cx, &r) == 0 && r == 7);
	TASK_CHECK(!limited(cx) && consistent(cx)); /* unlimited debts: none */
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget ask = {U, 100000, U, U, 1000};
	cbcmn_spawn_opts o = {.budget = &ask};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, blocking_limited, NULL, &o, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(!limited(cx) && consistent(cx));
	return 0;
}

static void test_a_blocking_calls_debts_keep_the_invariant(void **state)
{
	(void)state;
	run_unlimited(blocking_debts);
}

/* ---- an actor's default share (actor.c, default_share()) ---- */

/* An actor spawned with no budget: the config's child default (100) in
 * channel ops, at most half a limited spawner's (100: 50); limited and
 * charged. */
static int64_t share_actor(cbcmn_cx *cx, void *arg)
{
	uint64_t want = (uint64_t)(uintptr_t)arg;
	TASK_CHECK(limited(cx) == (want != U) && consistent(cx));
	chan_ops(cx, 5);
	TASK_CHECK(consistent(cx));
	cbcmn_budget b;
	TASK_CHECK(cbcmn_budget_get(cx, &b) == 0);
	TASK_CHECK(b.channel_ops == (want == U ? U : want - 10));
	return 0;
}

static void spawn_share_actor(cbcmn_cx *cx, uint64_t want)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_actor_ref ref;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, share_actor, (void *)(uintptr_t)want, NULL, &ref) ==
		   0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
}

static int64_t limited_spawner(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(limited(cx) && consistent(cx));
	spawn_share_actor(cx, 50);
	TASK_CHECK(limited(cx) && consistent(cx));
	return 0;
}

static int64_t share_spawners(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(!limited(cx) && consistent(cx));
	/* Unlimited: no share taken, the child default applies (limited). */
	spawn_share_actor(cx, 100);
	TASK_CHECK(!limited(cx) && consistent(cx));
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_budget ask = {U, U, U, 100, U};
	cbcmn_spawn_opts o = {.budget = &ask};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, limited_spawner, NULL, &o, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return 0;
}

static void test_an_actors_default_share_keeps_the_invariant(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.budget = (cbcmn_budget){U, U, U, U, U};
	cfg.child_budget = (cbcmn_budget){U, U, U, 100, U};
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	t_run(rt, share_spawners, NULL, 0);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_a_task_limited_in_one_component_is_limited_and_charged),
		T_WATCHED_TEST(test_recharges_and_refunds_keep_the_invariant),
		T_WATCHED_TEST(test_a_self_recharge_keeps_the_invariant),
		T_WATCHED_TEST(test_a_refused_spawn_gives_back_and_keeps_the_invariant),
		T_WATCHED_TEST(test_the_janus_decrement_keeps_the_invariant),
		T_WATCHED_TEST(test_a_blocking_calls_debts_keep_the_invariant),
		T_WATCHED_TEST(test_an_actors_default_share_keeps_the_invariant),
	};
	return cmocka_run_group_tests_name("budget_limited", tests, NULL, NULL);
}
