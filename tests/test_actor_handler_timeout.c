/* test_actor_handler_timeout: a handler actor's receive timeout
 * (cbcmn_actor_set_receive_timeout()): the TIMEOUT call comes, never
 * before its deadline, once; a message first ends it; a message and the
 * deadline racing give one of them first and lose nothing; the deadline
 * survives its host moving between executors; a stop, a halt, a
 * supervisor's restart or a cancellation while armed leaves no TIMEOUT
 * and nothing behind; many handler actors with deadlines. */
#include "actor_test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cbcmn_actor.h"

enum { M_CRASH = M_QUIT + 1, M_SPIN };

#define MS 1000000ull

static uint64_t now_of(cbcmn_cx *cx)
{
	return cbcmn_now(cbcmn_cx_runtime(cx));
}

/* A TIMEOUT call as the header promises it: from nobody, at or after its
 * deadline, which is at least timeout after armed_at. */
static bool timeout_ok(cbcmn_cx *cx, const cbcmn_actor_msg *m, uint64_t armed_at,
		       uint64_t timeout)
{
	return m->type == CBCMN_ACTOR_TIMEOUT && m->from == CBCMN_ACTOR_NONE &&
	       m->body.timeout.deadline >= armed_at + timeout &&
	       now_of(cx) >= m->body.timeout.deadline;
}

static int64_t wait_for(cbcmn_cx *cx, _Atomic long *v, long want)
{
	for (int i = 0; i < 20000 && atomic_load(v) < want; i++)
		cbcmn_sleep(cx, 1000000);
	return atomic_load(v) >= want;
}

/* ---- it fires, not early, once; re-armed in its own call it ticks ---- */

#define TICKS 5

struct tick {
	uint64_t armed_at, first_wait;
	_Atomic long timeouts, calls;
	_Atomic int receiving; /* actors_receiving seen while armed */
};

static int64_t tick_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct tick *t = arg;
	if (m->type == CBCMN_ACTOR_START) {
		t->armed_at = now_of(cx);
		TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 20 * MS) == 0);
		atomic_fetch_add(&t->calls, 1); /* armed: counted receiving */
		return CBCMN_ACTOR_CONTINUE;
	}
	atomic_fetch_add(&t->calls, 1);
	uint64_t want = atomic_load(&t->timeouts) ? 5 * MS : 20 * MS;
	TASK_CHECK(timeout_ok(cx, m, t->armed_at, want));
	if (atomic_load(&t->timeouts) == 0)
		t->first_wait = now_of(cx) - t->armed_at;
	if (atomic_fetch_add(&t->timeouts, 1) + 1 < TICKS) {
		t->armed_at = now_of(cx);
		TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 5 * MS) == 0);
	}
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t tick_main(cbcmn_cx *cx, void *arg)
{
	struct tick *t = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.start = true};
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, n, tick_handler, t, &o, &r) == 0);
	/* Armed (the first 20 ms): counted receiving. */
	for (int i = 0; i < 1000 && !atomic_load(&t->calls); i++)
		cbcmn_sleep(cx, 100000);
	cbcmn_stats st;
	TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &st, NULL, 0) == 0);
	if (!atomic_load(&t->timeouts))
		atomic_store(&t->receiving, (int)st.total.actors_receiving);
	TASK_CHECK(wait_for(cx, &t->timeouts, TICKS));
	cbcmn_sleep(cx, 50 * MS); /* ten more periods: nothing more comes */
	TASK_CHECK(atomic_load(&t->timeouts) == TICKS);
	TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &st, NULL, 0) == 0);
	TASK_CHECK(st.total.actors_receiving == 0); /* none armed */
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, r, 0) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_timeout_fires_not_early_and_once(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct tick t = {0};
	t_run(rt, tick_main, &t, 0);
	assert_int_equal(atomic_load(&t.timeouts), TICKS);
	assert_int_equal(atomic_load(&t.calls), TICKS + 1);
	assert_true(t.first_wait >= 20 * MS);
	/* Armed as the snapshot was taken, unless it had fired already. */
	assert_true(atomic_load(&t.receiving) == 1 || atomic_load(&t.timeouts) > 0);
	t_destroy(rt);
}

/* ---- a message first ends it; FOREVER takes it back; 0 is due now;
 * RETRY and HALT end it ---- */

struct cancel {
	int mode;
	_Atomic long timeouts, msgs, retries;
};

enum { C_MESSAGE, C_FOREVER, C_ZERO, C_RETRY, C_HALT };

static int64_t cancel_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct cancel *c = arg;
	if (m->type == CBCMN_ACTOR_TIMEOUT) {
		atomic_fetch_add(&c->timeouts, 1);
		return CBCMN_ACTOR_CONTINUE;
	}
	if (m->type == CBCMN_ACTOR_START) {
		uint64_t tmo = c->mode == C_ZERO ? 0 : 20 * MS;
		TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, tmo) == 0);
		if (c->mode == C_FOREVER)
			TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, CBCMN_ACTOR_FOREVER) == 0);
		return CBCMN_ACTOR_CONTINUE;
	}
	atomic_fetch_add(&c->msgs, 1);
	if (c->mode == C_RETRY && atomic_fetch_add(&c->retries, 1) == 0) {
		TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 1 * MS) == 0);
		return CBCMN_ACTOR_RETRY;
	}
	if (c->mode == C_HALT) {
		TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 1 * MS) == 0);
		return CBCMN_ACTOR_HALT;
	}
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t cancel_main(cbcmn_cx *cx, void *arg)
{
	struct cancel *cs = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.start = true};
	cbcmn_actor_ref r[5];
	for (int i = 0; i < 5; i++)
		TASK_CHECK(cbcmn_actor_spawn_handler(cx, n, cancel_handler, &cs[i], &o, &r[i]) == 0);
	/* One executor: the hosts run only once this task sleeps, so the
	 * messages are there before their START calls. */
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, r[C_MESSAGE], &m) == 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, r[C_RETRY], &m) == 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, r[C_HALT], &m) == 0);
	cbcmn_sleep(cx, 100 * MS); /* five deadlines over */
	for (int i = 0; i < 5; i++)
		if (i != C_HALT)
			TASK_CHECK(cbcmn_actor_stop(NULL, cx, r[i], 0) == 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, r[C_HALT], &m) == -ESRCH);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_message_first_ends_the_deadline(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct cancel c[5] = {{.mode = C_MESSAGE}, {.mode = C_FOREVER}, {.mode = C_ZERO},
			      {.mode = C_RETRY}, {.mode = C_HALT}};
	t_run(rt, cancel_main, c, 0);
	assert_int_equal(atomic_load(&c[C_MESSAGE].timeouts), 0);
	assert_int_equal(atomic_load(&c[C_MESSAGE].msgs), 1);
	assert_int_equal(atomic_load(&c[C_FOREVER].timeouts), 0);
	assert_int_equal(atomic_load(&c[C_ZERO].timeouts), 1);
	assert_int_equal(atomic_load(&c[C_RETRY].timeouts), 0);
	assert_int_equal(atomic_load(&c[C_RETRY].msgs), 2); /* the RETRY's second call */
	assert_int_equal(atomic_load(&c[C_HALT].timeouts), 0);
	t_destroy(rt);
}

/* ---- a message and the deadline racing: one of them first, the
 * message never lost, no TIMEOUT after the message it raced ---- */

#define RACE_TMO (1 * MS)

struct race {
	cbcmn_actor_ref r;
	uint64_t armed_at;
	uint64_t round;     /* the round the handler waits for */
	bool timed;         /* this round's TIMEOUT came */
	_Atomic long acked; /* rounds whose message was handled */
	_Atomic long timeouts;
};

static int64_t race_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct race *s = arg;
	if (m->type == CBCMN_ACTOR_TIMEOUT) {
		/* At most one per round, before that round's message, and
		 * for this round's deadline (not one the message ended). */
		TASK_CHECK(!s->timed);
		TASK_CHECK(timeout_ok(cx, m, s->armed_at, RACE_TMO));
		s->timed = true;
		atomic_fetch_add(&s->timeouts, 1);
		return CBCMN_ACTOR_CONTINUE; /* not re-armed: the message comes */
	}
	if (m->type == M_DATA) {
		TASK_CHECK(m->body.u64[0] == s->round);
		s->round++;
		s->timed = false;
	}
	s->armed_at = now_of(cx);
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, RACE_TMO) == 0);
	if (m->type == M_DATA)
		atomic_fetch_add(&s->acked, 1);
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t race_main(cbcmn_cx *cx, void *arg)
{
	struct race *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.start = true, .placement = CBCMN_PLACE_PINNED, .shard = 1};
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, n, race_handler, s, &o, &s->r) == 0);
	long rounds = STRESS(400);
	uint64_t seed = 88172645463325252ull;
	for (long i = 0; i < rounds; i++) {
		/* Around the deadline: before it, at it, after it. */
		seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
		cbcmn_sleep(cx, RACE_TMO / 2 + seed % RACE_TMO);
		cbcmn_actor_msg m = msg(M_DATA, (uint64_t)i, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, s->r, &m) == 0);
		TASK_CHECK(wait_for(cx, &s->acked, i + 1));
	}
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, s->r, 0) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_message_and_deadline_racing_one_first_nothing_lost(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct race s = {0};
	t_run(rt, race_main, &s, 0);
	assert_int_equal(atomic_load(&s.acked), STRESS(400));
	assert_int_equal((long)s.round, STRESS(400));
	print_message("     %ld of %ld rounds timed out first\n", atomic_load(&s.timeouts),
		      (long)STRESS(400));
	t_destroy(rt);
}

/* ---- the host moves to another executor while a deadline is armed ---- */

struct mig {
	cbcmn_nursery *n;
	cbcmn_actor_ref a, b;
	uint64_t armed_at;
	uint32_t e0;        /* the host's executor when it armed */
	_Atomic int moved;  /* b saw the host on another executor */
	_Atomic int hog_stop;
	_Atomic long ready, timeouts, spins;
};

static int64_t mig_b(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct mig *g = arg;
	(void)m;
	/* Blocks the whole host (allowed, documented) until it is stolen
	 * from its busy executor, the deadline armed all the while. */
	uint64_t give_up = now_of(cx) + 10000 * MS; /* a loaded machine steals late */
	while (cbcmn_cx_executor(cx) == g->e0 && now_of(cx) < give_up)
		cbcmn_yield(cx);
	atomic_store(&g->moved, cbcmn_cx_executor(cx) != g->e0);
	atomic_fetch_add(&g->spins, 1);
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t mig_a(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct mig *g = arg;
	if (m->type == CBCMN_ACTOR_START) {
		/* b joins this host. */
		TASK_CHECK(cbcmn_actor_spawn_handler(cx, g->n, mig_b, g, NULL, &g->b) == 0);
		g->e0 = cbcmn_cx_executor(cx);
		g->armed_at = now_of(cx);
		TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 100 * MS) == 0);
		atomic_store(&g->ready, 1); /* b and e0 set */
		return CBCMN_ACTOR_CONTINUE;
	}
	TASK_CHECK(timeout_ok(cx, m, g->armed_at, 100 * MS));
	atomic_fetch_add(&g->timeouts, 1);
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t mig_hog(cbcmn_cx *cx, void *arg)
{
	struct mig *g = arg;
	while (!atomic_load(&g->hog_stop))
		cbcmn_yield(cx);
	return 0;
}

static int64_t mig_main(cbcmn_cx *cx, void *arg)
{
	struct mig *g = arg;
	TASK_CHECK(open_n(cx, &g->n) == 0);
	cbcmn_actor_opts o = {.start = true, .placement = CBCMN_PLACE_STEALABLE_ON, .shard = 0};
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, g->n, mig_a, g, &o, &g->a) == 0);
	TASK_CHECK(wait_for(cx, &g->ready, 1));
	/* Keep the host's executor busy, then have b block the host there
	 * until the other executor takes it. */
	cbcmn_spawn_opts hog = {.placement = CBCMN_PLACE_PINNED, .shard = g->e0};
	TASK_CHECK(cbcmn_nursery_spawn_ex(cx, g->n, mig_hog, g, &hog, NULL) == 0);
	cbcmn_actor_msg m = msg(M_SPIN, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, g->b, &m) == 0);
	TASK_CHECK(wait_for(cx, &g->spins, 1));
	atomic_store(&g->hog_stop, 1);
	TASK_CHECK(wait_for(cx, &g->timeouts, 1));
	cbcmn_sleep(cx, 150 * MS);
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, g->a, 0) == 0);
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, g->b, 0) == 0);
	return cbcmn_nursery_await_all(cx, g->n);
}

static void test_deadline_survives_its_host_moving(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct mig g = {0};
	t_run(rt, mig_main, &g, 0);
	assert_int_equal(atomic_load(&g.moved), 1);
	assert_int_equal(atomic_load(&g.timeouts), 1);
	t_destroy(rt);
}

/* ---- a stop while armed: no TIMEOUT, the DOWN's reason the stop's; a
 * cancellation of many armed ones leaves nothing (ASan) ---- */


struct armed {
	_Atomic long timeouts, started;
};

static int64_t armed_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct armed *s = arg;
	if (m->type == CBCMN_ACTOR_TIMEOUT) {
		atomic_fetch_add(&s->timeouts, 1);
		return CBCMN_ACTOR_CONTINUE;
	}
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, m->type == M_DATA ? 10000 * MS : 20 * MS) ==
		   0);
	atomic_fetch_add(&s->started, 1); /* armed: counted receiving */
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t down_watcher(cbcmn_cx *cx, void *arg)
{
	cbcmn_actor_ref *target = arg;
	uint64_t id;
	TASK_CHECK(cbcmn_actor_monitor(cx, *target, &id) == 0);
	struct downs got;
	downs_only(cx, id, &got, NULL);
	TASK_CHECK(got.n == 1 && got.reason == -77);
	return 0;
}

#define ARMED 64

/* One executor, lab mode (t_runtime_lab()): the clock moves only while
 * everything waits, so the stop comes before the deadline whatever the
 * machine's load. */

static int64_t stop_armed_main(cbcmn_cx *cx, void *arg)
{
	struct armed *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.start = true};
	cbcmn_actor_ref r, w;
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, n, armed_handler, s, &o, &r) == 0);
	TASK_CHECK(wait_for(cx, &s->started, 1));
	TASK_CHECK(cbcmn_actor_spawn(cx, n, down_watcher, &r, NULL, &w) == 0);
	cbcmn_sleep(cx, 2 * MS);
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, r, -77) == 0); /* 20 ms armed */
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == -77);
	cbcmn_sleep(cx, 60 * MS); /* the deadline long past */
	return 0;
}

static void test_stop_while_armed_fires_nothing(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_lab(7);
	struct armed s = {0};
	t_run(rt, stop_armed_main, &s, 0);
	assert_int_equal(atomic_load(&s.timeouts), 0);
	assert_true(cbcmn_now(rt) >= 60 * MS);
	t_destroy(rt);
}

/* Many armed for 10 s, on hosts of both executors, then cancelled (the
 * hosts blocked in timed waits). */
static int64_t cancel_armed_main(cbcmn_cx *cx, void *arg)
{
	struct armed *s = arg;
	cbcmn_nursery *many;
	cbcmn_actor_ref r;
	TASK_CHECK(open_n(cx, &many) == 0);
	cbcmn_actor_opts p[2] = {{.placement = CBCMN_PLACE_PINNED, .shard = 0},
				 {.placement = CBCMN_PLACE_PINNED, .shard = 1}};
	for (int i = 0; i < ARMED; i++) {
		TASK_CHECK(cbcmn_actor_spawn_handler(cx, many, armed_handler, s, &p[i % 2], &r) == 0);
		cbcmn_actor_msg m = msg(M_DATA, 0, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, r, &m) == 0);
	}
	TASK_CHECK(wait_for(cx, &s->started, ARMED));
	cbcmn_stats st;
	TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &st, NULL, 0) == 0);
	TASK_CHECK(st.total.actors_receiving == ARMED);
	TASK_CHECK(cbcmn_nursery_cancel(many) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, many) == CBCMN_ECANCELED);
	TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &st, NULL, 0) == 0);
	TASK_CHECK(st.total.actors_receiving == 0 && st.total.actors == 0);
	return 0;
}

static void test_cancel_of_many_armed_leaks_nothing(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct armed s = {0};
	t_run(rt, cancel_armed_main, &s, 0);
	assert_int_equal(atomic_load(&s.timeouts), 0);
	t_destroy(rt); /* the timers of the cancelled hosts' waits: gone (ASan) */
}

/* ---- handler actors of one host halting with deadlines left on its
 * heap (ended early, so stale) while another's is armed: their records
 * go when those entries do (ASan), no TIMEOUT reaches anyone ---- */

struct shared {
	cbcmn_nursery *n;
	cbcmn_actor_ref a, kids[8];
	_Atomic long ready, timeouts, halted;
};

static int64_t shared_kid(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct shared *s = arg;
	if (m->type == CBCMN_ACTOR_TIMEOUT) {
		atomic_fetch_add(&s->timeouts, 1);
		return CBCMN_ACTOR_CONTINUE;
	}
	if (m->type == CBCMN_ACTOR_START)
		return CBCMN_ACTOR_CONTINUE;
	/* Each deadline set here is ended by the call's own result: no
	 * TIMEOUT can come, whatever the machine's load. */
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 5 * MS) == 0);
	if (m->type == M_QUIT) {
		atomic_fetch_add(&s->halted, 1);
		return CBCMN_ACTOR_HALT;
	}
	return CBCMN_ACTOR_RETRY; /* again and again: stale entries pile up */
}

static int64_t shared_root(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct shared *s = arg;
	if (m->type == CBCMN_ACTOR_START) {
		cbcmn_actor_opts o = {.start = true};
		for (int i = 0; i < 8; i++)
			TASK_CHECK(cbcmn_actor_spawn_handler(cx, s->n, shared_kid, s, &o,
							     &s->kids[i]) == 0);
		TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 10000 * MS) == 0);
		atomic_store(&s->ready, 1);
		return CBCMN_ACTOR_CONTINUE;
	}
	atomic_fetch_add(&s->timeouts, 1);
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t shared_main(cbcmn_cx *cx, void *arg)
{
	struct shared *s = arg;
	TASK_CHECK(open_n(cx, &s->n) == 0);
	cbcmn_actor_opts o = {.start = true};
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, s->n, shared_root, s, &o, &s->a) == 0);
	TASK_CHECK(wait_for(cx, &s->ready, 1));
	/* Half quit (a call that sets a deadline, then halts); half retry
	 * a message, setting one in every call (thousands of stale entries:
	 * compactions), until stopped.  Each leaves stale entries behind. */
	for (int i = 0; i < 8; i++) {
		cbcmn_actor_msg q = msg(M_QUIT, 0, 0), d = msg(M_DATA, 0, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, s->kids[i], i % 2 ? &q : &d) == 0);
	}
	cbcmn_sleep(cx, 2 * MS);
	for (int i = 0; i < 8; i += 2)
		TASK_CHECK(cbcmn_actor_stop(NULL, cx, s->kids[i], 0) == 0);
	for (int i = 0; i < 8; i++) {
		cbcmn_actor_msg d = msg(M_DATA, 0, 0);
		while (cbcmn_actor_try_send(NULL, cx, s->kids[i], &d) != -ESRCH)
			cbcmn_sleep(cx, 100000);
	}
	cbcmn_sleep(cx, 30 * MS); /* their 5 ms deadlines long past */
	cbcmn_stats st;
	TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &st, NULL, 0) == 0);
	TASK_CHECK(st.total.actors_receiving == 1); /* the root's 10 s */
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, s->a, 0) == 0);
	return cbcmn_nursery_await_all(cx, s->n);
}

static void test_halted_with_stale_deadlines_on_a_shared_host(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct shared s = {0};
	t_run(rt, shared_main, &s, 0);
	assert_int_equal(atomic_load(&s.timeouts), 0);
	assert_int_equal(atomic_load(&s.halted), 4);
	t_destroy(rt);
}

/* ---- a host ended under a handler (a checkpoint of its cancelled
 * nursery) with deadlines armed, and a halted record kept by a stale
 * one: all of it goes, the gauges come back to 0 (ASan) ---- */

enum { M_GO = M_SPIN + 1 };

struct ended {
	cbcmn_nursery *n;
	cbcmn_actor_ref root, kids[4];
	_Atomic long armed, quit, spinning, timeouts;
};

static int64_t ended_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct ended *e = arg;
	if (m->type == CBCMN_ACTOR_TIMEOUT) {
		atomic_fetch_add(&e->timeouts, 1);
		return CBCMN_ACTOR_CONTINUE;
	}
	if (m->type == CBCMN_ACTOR_START && cbcmn_actor_self(cx) == e->root) {
		cbcmn_actor_opts o = {.start = true};
		for (int i = 0; i < 4; i++)
			TASK_CHECK(cbcmn_actor_spawn_handler(cx, e->n, ended_handler, e, &o,
							     &e->kids[i]) == 0);
	}
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 10000 * MS) == 0);
	if (m->type == CBCMN_ACTOR_START) {
		atomic_fetch_add(&e->armed, 1);
	} else if (m->type == M_QUIT) {
		atomic_fetch_add(&e->quit, 1);
		return CBCMN_ACTOR_HALT; /* a stale entry keeps its record */
	} else if (m->type == M_GO) {
		atomic_store(&e->spinning, 1);
		for (;;) /* until the cancellation ends the host here */
			CBCMN_CHECKPOINT(cx);
	}
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t ended_main(cbcmn_cx *cx, void *arg)
{
	struct ended *e = arg;
	TASK_CHECK(open_n(cx, &e->n) == 0);
	cbcmn_actor_opts o = {.start = true};
	/* The root's START needs its reference: with one executor it runs
	 * only once this task sleeps, after the store. */
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, e->n, ended_handler, e, &o, &r) == 0);
	e->root = r;
	TASK_CHECK(wait_for(cx, &e->armed, 5));
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0), go = msg(M_GO, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, e->kids[0], &q) == 0);
	TASK_CHECK(wait_for(cx, &e->quit, 1));
	TASK_CHECK(cbcmn_actor_send(NULL, cx, e->root, &go) == 0);
	TASK_CHECK(wait_for(cx, &e->spinning, 1));
	TASK_CHECK(cbcmn_nursery_cancel(e->n) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, e->n) == CBCMN_ECANCELED);
	cbcmn_stats st;
	TASK_CHECK(cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &st, NULL, 0) == 0);
	TASK_CHECK(st.total.actors == 0 && st.total.actors_receiving == 0 &&
		   st.total.actors_waiting == 0);
	return 0;
}

static void test_host_ended_with_deadlines_armed_leaves_nothing(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1); /* the root's START after e->root is set */
	struct ended e = {0};
	t_run(rt, ended_main, &e, 0);
	assert_int_equal(atomic_load(&e.timeouts), 0);
	t_destroy(rt);
}

/* ---- a supervisor restarting a child while its deadline is armed ---- */

#define RESTARTS 20

struct supt {
	uint64_t armed_at;
	_Atomic long starts, timeouts;
};

/* Child 0: ticks every 2 ms; each TIMEOUT is its own incarnation's. */
static int64_t sup_ticker(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct supt *s = arg;
	if (m->type == CBCMN_ACTOR_TIMEOUT) {
		TASK_CHECK(timeout_ok(cx, m, s->armed_at, 2 * MS));
		atomic_fetch_add(&s->timeouts, 1);
	}
	s->armed_at = now_of(cx);
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 2 * MS) == 0);
	return CBCMN_ACTOR_CONTINUE;
}

/* Child 1: crashes when told to, which restarts both (CBCMN_SUP_ALL). */
static int64_t sup_crasher(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	(void)cx;
	(void)arg;
	return m->type == M_CRASH ? -EIO : CBCMN_ACTOR_CONTINUE;
}

static int64_t supt_main(cbcmn_cx *cx, void *arg)
{
	struct supt *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_sup_child ch[2] = {{.handler = sup_ticker, .state = s},
				 {.handler = sup_crasher}};
	cbcmn_sup_spec spec = {.strategy = CBCMN_SUP_ALL, .max_restarts = CBCMN_SUP_UNLIMITED,
			       .children = ch, .nchildren = 2};
	cbcmn_actor_ref sup, prev = CBCMN_ACTOR_NONE, child;
	TASK_CHECK(cbcmn_sup_start(cx, n, &spec, NULL, &sup) == 0);
	for (int i = 0; i < RESTARTS; i++) {
		/* The ticker is started by a message (no opts.start for a
		 * supervised child): poke the current one, then crash. */
		cbcmn_actor_ref t;
		while (cbcmn_sup_child_ref(NULL, cx, sup, 0, &t) != 0 ||
		       cbcmn_sup_child_ref(NULL, cx, sup, 1, &child) != 0 || child == prev)
			cbcmn_sleep(cx, 100000);
		prev = child;
		cbcmn_actor_msg go = msg(M_DATA, 0, 0), crash = msg(M_CRASH, 0, 0);
		if (cbcmn_actor_send(NULL, cx, t, &go) == 0)
			atomic_fetch_add(&s->starts, 1);
		cbcmn_sleep(cx, (uint64_t)(i % 4) * MS); /* armed, or a few ticks in */
		TASK_CHECK(cbcmn_actor_send(NULL, cx, child, &crash) == 0);
	}
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, sup, 0) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_supervisor_restart_while_armed(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct supt s = {0};
	t_run(rt, supt_main, &s, 0);
	assert_true(atomic_load(&s.starts) > 0);
	t_destroy(rt);
}

/* ---- many handler actors with deadlines, and messages ending some ---- */

#define MANY_TICKS 4

struct many {
	cbcmn_nursery *n;
	long count;
	cbcmn_actor_ref *refs;
	uint64_t *armed_at, *tmo;
	int *ticks;
	_Atomic long built, timeouts, msgs;
};

struct many_one {
	struct many *m;
	long i;
};

static uint64_t many_tmo(long i, int k)
{
	return (uint64_t)((i * 7 + k * 13) % 4) * MS; /* 0..3 ms, 0 included */
}

static int64_t many_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct many_one *o = arg;
	struct many *s = o->m;
	long i = o->i;
	if (m->type == CBCMN_ACTOR_START && i == 0) {
		/* The root starts the others on its host. */
		cbcmn_actor_opts so = {.start = true};
		for (long j = 1; j < s->count; j++)
			TASK_CHECK(cbcmn_actor_spawn_handler(cx, s->n, many_handler, &o[j], &so,
							     &s->refs[j]) == 0);
		atomic_store(&s->built, 1);
	}
	if (m->type == CBCMN_ACTOR_TIMEOUT) {
		TASK_CHECK(timeout_ok(cx, m, s->armed_at[i], s->tmo[i]));
		atomic_fetch_add(&s->timeouts, 1);
		s->ticks[i]++;
	} else if (m->type == M_DATA) {
		atomic_fetch_add(&s->msgs, 1);
	}
	if (s->ticks[i] < MANY_TICKS) {
		s->armed_at[i] = now_of(cx);
		s->tmo[i] = many_tmo(i, s->ticks[i]);
		TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, s->tmo[i]) == 0);
	}
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t many_main(cbcmn_cx *cx, void *arg)
{
	struct many *s = arg;
	long per = s[0].count;
	TASK_CHECK(open_n(cx, &s[0].n) == 0);
	s[1].n = s[0].n;
	struct many_one *ones[2];
	for (int h = 0; h < 2; h++) {
		ones[h] = calloc((size_t)per, sizeof(*ones[h]));
		for (long j = 0; j < per; j++)
			ones[h][j] = (struct many_one){.m = &s[h], .i = j};
		cbcmn_actor_opts o = {.start = true, .placement = CBCMN_PLACE_PINNED,
				      .shard = (uint32_t)h};
		TASK_CHECK(cbcmn_actor_spawn_handler(cx, s[h].n, many_handler, ones[h], &o,
						     &s[h].refs[0]) == 0);
	}
	long sent = 0;
	for (int h = 0; h < 2; h++)
		TASK_CHECK(wait_for(cx, &s[h].built, 1));
	/* Messages at random while the deadlines run: each ends one. */
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (int k = 0; k < 200; k++) {
		seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
		struct many *t = &s[seed & 1];
		cbcmn_actor_msg m = msg(M_DATA, 0, 0);
		if (cbcmn_actor_try_send(NULL, cx, t->refs[(seed >> 8) % (uint64_t)per], &m) == 0)
			sent++;
		if (k % 20 == 0)
			cbcmn_sleep(cx, 500000);
	}
	for (int h = 0; h < 2; h++)
		TASK_CHECK(wait_for(cx, &s[h].timeouts, per * MANY_TICKS));
	/* A message that came after its actor's last deadline was due is
	 * called after that TIMEOUT: wait for those too. */
	for (int i = 0; i < 20000 && atomic_load(&s[0].msgs) + atomic_load(&s[1].msgs) < sent; i++)
		cbcmn_sleep(cx, MS);
	cbcmn_sleep(cx, 20 * MS); /* nothing more is armed: nothing more comes */
	for (int h = 0; h < 2; h++) {
		TASK_CHECK(atomic_load(&s[h].timeouts) == per * MANY_TICKS);
		for (long j = 0; j < per; j++)
			TASK_CHECK(s[h].ticks[j] == MANY_TICKS);
	}
	TASK_CHECK(atomic_load(&s[0].msgs) + atomic_load(&s[1].msgs) == sent);
	TASK_CHECK(cbcmn_nursery_cancel(s[0].n) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, s[0].n) == CBCMN_ECANCELED);
	free(ones[0]);
	free(ones[1]);
	return 0;
}

static void test_many_handler_actors_with_deadlines(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	long per = STRESS(2000) / 2;
	struct many s[2];
	for (int h = 0; h < 2; h++) {
		s[h] = (struct many){.count = per};
		s[h].refs = calloc((size_t)per, sizeof(*s[h].refs));
		s[h].armed_at = calloc((size_t)per, sizeof(uint64_t));
		s[h].tmo = calloc((size_t)per, sizeof(uint64_t));
		s[h].ticks = calloc((size_t)per, sizeof(int));
	}
	t_run(rt, many_main, s, 0);
	for (int h = 0; h < 2; h++) {
		free(s[h].refs);
		free(s[h].armed_at);
		free(s[h].tmo);
		free(s[h].ticks);
	}
	t_destroy(rt);
}

/* ---- lab mode: the deadline is on the virtual clock, and one a
 * message ended does not move the idle clock ---- */

#define HOUR (3600 * 1000000000ull)

struct labt {
	_Atomic long timeouts, msgs;
	uint64_t fired_at;
};

static int64_t lab_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct labt *l = arg;
	if (m->type == CBCMN_ACTOR_TIMEOUT) {
		TASK_CHECK(timeout_ok(cx, m, 0, HOUR));
		l->fired_at = now_of(cx);
		atomic_fetch_add(&l->timeouts, 1);
		return CBCMN_ACTOR_CONTINUE;
	}
	if (m->type == M_DATA)
		atomic_fetch_add(&l->msgs, 1);
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, HOUR) == 0);
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t lab_main(cbcmn_cx *cx, void *arg)
{
	struct labt *l = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.start = true};
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, n, lab_handler, l, &o, &r) == 0);
	cbcmn_sleep(cx, 2 * HOUR); /* the idle clock goes to the TIMEOUT's hour first */
	TASK_CHECK(atomic_load(&l->timeouts) == 1);
	/* Two messages in before the host runs (one executor): the first
	 * arms an hour, the second's call ends it. */
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, r, &m) == 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, r, &m) == 0);
	while (atomic_load(&l->msgs) < 2)
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 0) == -EPERM); /* a task */
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, r, 0) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_lab_deadline_is_virtual(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_lab(7);
	struct labt l = {0};
	t_run(rt, lab_main, &l, 0);
	assert_int_equal(atomic_load(&l.timeouts), 1);
	assert_true(l.fired_at >= HOUR && l.fired_at < 2 * HOUR);
	usleep(20000); /* idle: a dead deadline must not move the clock */
	assert_true(cbcmn_now(rt) < 3 * HOUR);
	t_destroy(rt);
}

/* ---- armed in the last call of a batch (the host's batch of calls in a
 * row: whatever its size, one of the rounds ends on it), the mailbox
 * empty after: the TIMEOUT comes, once a round (it was lost: the actor
 * stayed queued for a batch that found nothing, and a due deadline of a
 * queued actor makes no TIMEOUT) ---- */

#define ROUNDS 40

struct rounds {
	_Atomic long calls, timeouts;
};

static int64_t rounds_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct rounds *r = arg;
	if (m->type == CBCMN_ACTOR_TIMEOUT) {
		atomic_fetch_add(&r->timeouts, 1);
		return CBCMN_ACTOR_CONTINUE;
	}
	atomic_fetch_add(&r->calls, 1);
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 0) == 0);
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t rounds_main(cbcmn_cx *cx, void *arg)
{
	struct rounds *r = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_ref a;
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, n, rounds_handler, r, NULL, &a) == 0);
	for (long k = 1; k <= ROUNDS; k++) {
		/* All k in before the host runs (one executor): one run. */
		for (long i = 0; i < k; i++) {
			cbcmn_actor_msg m = msg(M_DATA, 0, 0);
			TASK_CHECK(cbcmn_actor_send(NULL, cx, a, &m) == 0);
		}
		if (!wait_for(cx, &r->timeouts, k))
			break; /* lost: the counts below say so */
		TASK_CHECK(atomic_load(&r->timeouts) == k);
	}
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, a, 0) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_deadline_armed_in_the_last_call_of_a_batch_fires(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct rounds r = {0};
	t_run(rt, rounds_main, &r, 0);
	assert_int_equal(atomic_load(&r.calls), ROUNDS * (ROUNDS + 1) / 2);
	assert_int_equal(atomic_load(&r.timeouts), ROUNDS);
	t_destroy(rt);
}

/* ---- a halted handler actor's record kept by a stale deadline below a
 * live one (lab clock): a handler actor spawned on the host after it
 * must not get its record while that entry names it (a record reused
 * from the host's spares, zeroed, would count its arms from 0 again and
 * take the stale entry for its own: a TIMEOUT 20 s after it, for a 1 h
 * deadline, and a reference count off by one) ---- */

#define SEC 1000000000ull

enum { M_SPAWN = M_GO + 1 };

struct reuse {
	cbcmn_nursery *n;
	cbcmn_actor_ref first;
	_Atomic long halted, spawned, first_timeouts, late_timeouts;
	uint64_t late_armed_at;
};

static int64_t reuse_late(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct reuse *u = arg;
	if (m->type == CBCMN_ACTOR_START) {
		u->late_armed_at = now_of(cx);
		TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, HOUR) == 0);
		atomic_fetch_add(&u->spawned, 1);
	} else if (m->type == CBCMN_ACTOR_TIMEOUT) {
		TASK_CHECK(timeout_ok(cx, m, u->late_armed_at, HOUR));
		atomic_fetch_add(&u->late_timeouts, 1);
	}
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t reuse_halted(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct reuse *u = arg;
	TASK_CHECK(m->type == CBCMN_ACTOR_START);
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 20 * SEC) == 0);
	atomic_fetch_add(&u->halted, 1);
	return CBCMN_ACTOR_HALT; /* the 20 s entry goes stale, below the 10 s */
}

static int64_t reuse_first(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct reuse *u = arg;
	cbcmn_actor_opts o = {.start = true};
	cbcmn_actor_ref r;
	if (m->type == CBCMN_ACTOR_TIMEOUT) {
		atomic_fetch_add(&u->first_timeouts, 1);
		return CBCMN_ACTOR_CONTINUE; /* no more: the stale entry comes up */
	}
	if (m->type == CBCMN_ACTOR_START) { /* on its host: joins */
		/* One armed for the hour: the first's calls never end the
		 * host's last deadline, which would drop every entry. */
		TASK_CHECK(cbcmn_actor_spawn_handler(cx, u->n, reuse_late, u, &o, &r) == 0);
		TASK_CHECK(cbcmn_actor_spawn_handler(cx, u->n, reuse_halted, u, &o, &r) == 0);
	}
	else if (m->type == M_SPAWN)
		TASK_CHECK(cbcmn_actor_spawn_handler(cx, u->n, reuse_late, u, &o, &r) == 0);
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 10 * SEC) == 0);
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t reuse_main(cbcmn_cx *cx, void *arg)
{
	struct reuse *u = arg;
	TASK_CHECK(open_n(cx, &u->n) == 0);
	cbcmn_actor_opts o = {.start = true};
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, u->n, reuse_first, u, &o, &u->first) == 0);
	TASK_CHECK(wait_for(cx, &u->halted, 1));
	cbcmn_actor_msg m = msg(M_SPAWN, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, u->first, &m) == 0);
	TASK_CHECK(wait_for(cx, &u->spawned, 2));
	cbcmn_sleep(cx, 30 * SEC); /* the 10 s TIMEOUT, then the stale 20 s comes up */
	TASK_CHECK(atomic_load(&u->first_timeouts) == 1);
	TASK_CHECK(cbcmn_nursery_cancel(u->n) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, u->n) == CBCMN_ECANCELED);
	return 0;
}

static void test_record_kept_by_a_stale_deadline_is_not_reused(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_lab(7);
	struct reuse u = {0};
	t_run(rt, reuse_main, &u, 0);
	assert_int_equal(atomic_load(&u.halted), 1);
	assert_int_equal(atomic_load(&u.spawned), 2);
	assert_int_equal(atomic_load(&u.late_timeouts), 0);
	t_destroy(rt);
}

/* ---- who may call it ---- */

struct who {
	_Atomic int fiber_rc, task_rc, null_rc;
};

static int64_t who_fiber(cbcmn_cx *cx, void *arg)
{
	struct who *w = arg;
	atomic_store(&w->fiber_rc, cbcmn_actor_set_receive_timeout(cx, MS));
	return 0;
}

static int64_t who_main(cbcmn_cx *cx, void *arg)
{
	struct who *w = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	atomic_store(&w->task_rc, cbcmn_actor_set_receive_timeout(cx, MS));
	atomic_store(&w->null_rc, cbcmn_actor_set_receive_timeout(NULL, MS));
	cbcmn_actor_ref f;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, who_fiber, w, NULL, &f) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_only_a_handler_may_set_a_receive_timeout(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct who w = {1, 1, 1};
	t_run(rt, who_main, &w, 0);
	assert_int_equal(atomic_load(&w.task_rc), -EPERM);
	assert_int_equal(atomic_load(&w.null_rc), -EPERM);
	assert_int_equal(atomic_load(&w.fiber_rc), -EPERM);
	t_destroy(rt);
}

/* A plain thread with a handler's cx (handed to it): -EPERM, and the
 * host's current handler, which the host writes in every call, is not
 * read from that thread (a data race under TSan). */

struct handed {
	_Atomic(cbcmn_cx *) cx;
	_Atomic int done, calls, not_eperm;
};

static int64_t handed_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct handed *h = arg;
	(void)m;
	atomic_store(&h->cx, cx);
	atomic_fetch_add(&h->calls, 1);
	TASK_CHECK(cbcmn_actor_set_receive_timeout(cx, 1000) == 0); /* ticks */
	return CBCMN_ACTOR_CONTINUE;
}

static void *handed_thread(void *arg)
{
	struct handed *h = arg;
	while (!atomic_load(&h->done)) {
		cbcmn_cx *cx = atomic_load(&h->cx);
		if (cx && cbcmn_actor_set_receive_timeout(cx, 1000) != -EPERM)
			atomic_fetch_add(&h->not_eperm, 1);
	}
	return NULL;
}

static int64_t handed_main(cbcmn_cx *cx, void *arg)
{
	struct handed *h = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.start = true};
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, n, handed_handler, h, &o, &r) == 0);
	pthread_t t;
	TASK_CHECK(pthread_create(&t, NULL, handed_thread, h) == 0);
	cbcmn_sleep(cx, 100 * MS);
	atomic_store(&h->done, 1);
	TASK_CHECK(pthread_join(t, NULL) == 0);
	TASK_CHECK(cbcmn_actor_stop(NULL, cx, r, 0) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_a_plain_thread_with_a_handler_s_cx_gets_eperm(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct handed h = {0};
	t_run(rt, handed_main, &h, 0);
	assert_true(atomic_load(&h.calls) > 1);
	assert_int_equal(atomic_load(&h.not_eperm), 0);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_timeout_fires_not_early_and_once),
		cmocka_unit_test(test_message_first_ends_the_deadline),
		cmocka_unit_test(test_message_and_deadline_racing_one_first_nothing_lost),
		cmocka_unit_test(test_deadline_survives_its_host_moving),
		cmocka_unit_test(test_stop_while_armed_fires_nothing),
		cmocka_unit_test(test_cancel_of_many_armed_leaks_nothing),
		cmocka_unit_test(test_halted_with_stale_deadlines_on_a_shared_host),
		cmocka_unit_test(test_host_ended_with_deadlines_armed_leaves_nothing),
		cmocka_unit_test(test_supervisor_restart_while_armed),
		cmocka_unit_test(test_many_handler_actors_with_deadlines),
		cmocka_unit_test(test_lab_deadline_is_virtual),
		cmocka_unit_test(test_deadline_armed_in_the_last_call_of_a_batch_fires),
		cmocka_unit_test(test_record_kept_by_a_stale_deadline_is_not_reused),
		cmocka_unit_test(test_only_a_handler_may_set_a_receive_timeout),
		cmocka_unit_test(test_a_plain_thread_with_a_handler_s_cx_gets_eperm),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
