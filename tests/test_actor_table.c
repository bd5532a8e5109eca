/* test_actor_table.c: the actor table: slots, their executors' caches,
 * generations, and what a spawn leaves behind when it cannot finish.
 *
 * Slots go from the table to an executor's cache and back a batch at a
 * time (actor.c): these tests look at where slots are (internals) and at
 * what references to recycled slots do (the public calls). */
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "actor.h" /* internals: the table, the executors' caches */
#include "actor_test.h"

static int64_t returns_at_once(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t halts_at_start(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	(void)cx;
	(void)arg;
	(void)m;
	return CBCMN_ACTOR_HALT;
}

static int64_t quits_on_message(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	return cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0 ? 0 : -1;
}

static uint64_t live_actors(cbcmn_runtime *rt, uint32_t nexec)
{
	cbcmn_stats st;
	cbcmn_executor_stats per[4];
	TASK_CHECK(nexec <= 4 && cbcmn_stats_snapshot(rt, &st, per, nexec) == 0);
	uint64_t n = 0;
	for (uint32_t i = 0; i < nexec; i++)
		n += per[i].actors;
	return n;
}

/* Slots in the table's free batches (the caller makes sure nothing else
 * moves slots meanwhile), and the messages' room of the spare rings they
 * keep, checked against each batch's count and the table's. */
static uint32_t table_free(cbcmn_runtime *rt, uint32_t *spare_msgs)
{
	struct cbcmn__actors *t = atomic_load(&rt->actors);
	uint32_t n = 0;
	*spare_msgs = 0;
	cbcmn__mutex_lock(&t->lock);
	for (struct cbcmn__actor *b = t->batches; b; b = b->batch_next) {
		uint32_t in = 0, msgs = 0;
		for (struct cbcmn__actor *a = b; a; a = a->free_next, in++) {
			TASK_CHECK((a->spare != NULL) == (a->spare_cap != 0));
			msgs += a->spare_cap;
			TASK_CHECK(a->state == CBCMN__A_FREE);
		}
		TASK_CHECK(in == b->batch_n);
		TASK_CHECK(msgs == b->batch_spare);
		n += in;
		*spare_msgs += msgs;
	}
	TASK_CHECK(*spare_msgs == atomic_load(&t->spare_msgs));
	cbcmn__mutex_unlock(&t->lock);
	return n;
}

/* ---- a spawn whose spawner's budget ends inside it leaves nothing ----
 *
 * The spawner may spawn once: its second spawn cannot be paid and ends
 * it (an actor nobody can recharge: at once, where it used to wait for
 * the opener's await_all to give up on it).  Or it may spawn twice but
 * gave one spawn to its first child, which gives it back when it ends: its
 * second spawn waits for that, and a cancellation of its nursery ends the
 * wait, and the spawner with it.  The slot used to be taken (and the actor
 * made LIVE) before the charge: it stayed live for good, counted in the
 * stats, its ring never freed. */

struct sb {
	cbcmn_nursery *n;
	bool handler, cancel;
	_Atomic int spawned;
};

/* Cancels the spawner's nursery while its second spawn waits for budget
 * (a waiting sibling keeps await_all from giving up on it first). */
static int64_t sb_canceller(cbcmn_cx *cx, void *arg)
{
	struct sb *s = arg;
	while (atomic_load(&s->spawned) < 1)
		cbcmn_sleep(cx, 1000000);
	cbcmn_sleep(cx, 10000000);
	return cbcmn_nursery_cancel(s->n);
}

static int64_t sb_spawner(cbcmn_cx *cx, void *arg)
{
	struct sb *s = arg;
	cbcmn_actor_opts start = {.start = true};
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_budget one = {.spawn_count = 1};
	cbcmn_actor_opts holds = {.budget = &one};
	for (int i = 0; i < 2; i++) {
		cbcmn_actor_ref r;
		int rc = s->cancel && i == 0
				 ? cbcmn_actor_spawn(cx, n, quits_on_message, NULL, &holds, &r)
			 : s->handler ? cbcmn_actor_spawn_handler(cx, n, halts_at_start, NULL, &start, &r)
				      : cbcmn_actor_spawn(cx, n, returns_at_once, NULL, NULL, &r);
		TASK_CHECK(rc == 0);
		atomic_fetch_add(&s->spawned, 1);
	}
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t sb_main(cbcmn_cx *cx, void *arg)
{
	struct sb *s = arg;
	TASK_CHECK(open_n(cx, &s->n) == 0);
	cbcmn_budget bg = {.ops = CBCMN_UNLIMITED, .memory = CBCMN_UNLIMITED,
			   .spawn_count = s->cancel ? 2 : 1,
			   .channel_ops = CBCMN_UNLIMITED, .syscalls = CBCMN_UNLIMITED};
	cbcmn_caps caps = {.flags = CBCMN_CAP_SPAWN};
	cbcmn_actor_opts o = {.budget = &bg, .caps = &caps};
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn(cx, s->n, sb_spawner, s, &o, &r) == 0);
	if (s->cancel)
		TASK_CHECK(cbcmn_nursery_spawn(cx, s->n, sb_canceller, s, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, s->n) == (s->cancel ? CBCMN_ECANCELED : CBCMN_EBUDGET));
	TASK_CHECK(atomic_load(&s->spawned) == 1);
	TASK_CHECK(live_actors(cbcmn_cx_runtime(cx), 1) == 0);
	return 0;
}

static void test_spawn_ended_by_the_spawners_budget_leaves_no_live_actor(void **state)
{
	(void)state;
	/* Ended at the spawn it cannot pay (fiber, handler), or by a
	 * cancellation of the wait (fiber, handler). */
	for (int kind = 0; kind < 4; kind++) {
		cbcmn_runtime *rt = t_runtime(1);
		struct sb s = {.handler = kind % 2 == 1, .cancel = kind >= 2};
		t_run(rt, sb_main, &s, 0);
		t_destroy(rt);
	}
}

/* ---- a recycled slot: its old references fail, its new one works ---- */

static int64_t recycle_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n;
	cbcmn_actor_ref old, cur;
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, returns_at_once, NULL, NULL, &old) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	/* One executor, its cache last in first out: the same slot. */
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, NULL, &cur) == 0);
	TASK_CHECK(cbcmn__ref_index(cur) == cbcmn__ref_index(old));
	TASK_CHECK(cbcmn__ref_gen(cur) == cbcmn__ref_gen(old) + 1);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, old, &m) == -ESRCH);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, old, &m) == -ESRCH);
	TASK_CHECK(cbcmn_actor_send_timeout(NULL, cx, old, &m, 1000000) == -ESRCH);
	TASK_CHECK(cbcmn_actor_stop(rt, cx, old, -1) == -ESRCH);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, cur, &m) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_references_stale_after_recycle(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_run(rt, recycle_main, NULL, 0);
	t_destroy(rt);
}

/* ---- slots halted on one executor are reused by another's spawns ----
 *
 * Executor 1 spawns and halts more than its cache keeps: the rest goes
 * to the table in batches, where executor 0's spawns find them. */

#define XN 200

struct cross {
	cbcmn_actor_ref first[XN], second[XN];
};

static int64_t cross_spawns(cbcmn_cx *cx, cbcmn_actor_ref *refs, uint32_t shard,
			    cbcmn_actor_fn fn, bool await)
{
	cbcmn_nursery *n;
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = shard};
	TASK_CHECK(open_n(cx, &n) == 0);
	for (int i = 0; i < XN; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, fn, NULL, &o, &refs[i]) == 0);
	if (await)
		return cbcmn_nursery_await_all(cx, n);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	for (int i = 0; i < XN; i++)
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, refs[i], &q) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t cross_on_1(cbcmn_cx *cx, void *arg)
{
	struct cross *c = arg;
	TASK_CHECK(cbcmn_cx_executor(cx) == 1);
	return cross_spawns(cx, c->first, 1, returns_at_once, true);
}

static int64_t cross_on_0(cbcmn_cx *cx, void *arg)
{
	struct cross *c = arg;
	TASK_CHECK(cbcmn_cx_executor(cx) == 0);
	/* Still alive while the old references are tried. */
	cbcmn_nursery *n;
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	TASK_CHECK(open_n(cx, &n) == 0);
	for (int i = 0; i < XN; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, &o, &c->second[i]) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	for (int i = 0; i < XN; i++)
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, c->first[i], &m) == -ESRCH);
	for (int i = 0; i < XN; i++)
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, c->second[i], &m) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_generation_reuse_across_executors(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct cross *c = calloc(1, sizeof(*c));
	assert_non_null(c);
	assert_int_equal(t_run_pinned(rt, 1, cross_on_1, c), 0);
	assert_int_equal(t_run_pinned(rt, 0, cross_on_0, c), 0);
	ASSERT_TASK_CHECKS();
	/* Executor 0 took executor 1's batches: slots named by both rounds,
	 * each with a later generation the second time. */
	int reused = 0;
	for (int i = 0; i < XN; i++)
		for (int j = 0; j < XN; j++)
			if (cbcmn__ref_index(c->second[i]) == cbcmn__ref_index(c->first[j])) {
				assert_true(cbcmn__ref_gen(c->second[i]) > cbcmn__ref_gen(c->first[j]));
				reused++;
			}
	assert_true(reused >= XN / 2);
	free(c);
	t_destroy(rt);
}

/* ---- a retiring executor gives its cache back to the table ---- */

static int64_t churn_on_1(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_ref refs[XN];
	TASK_CHECK(cbcmn_cx_executor(cx) == 1);
	return cross_spawns(cx, refs, 1, returns_at_once, true);
}

static void test_retiring_executor_drains_its_cache(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.min_workers = 1;
	cfg.idle_retire_ms = 20;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	cbcmn_stats st;
	assert_int_equal(t_run_pinned(rt, 1, churn_on_1, NULL), 0);
	ASSERT_TASK_CHECKS();
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	do {
		usleep(1000);
		assert_int_equal(cbcmn_stats_snapshot(rt, &st, NULL, 0), 0);
	} while (st.executor_retires < 1 && t_now_ns() < deadline);
	assert_true(st.executor_retires >= 1);
	/* Every slot made is free, on the table (executor 0 spawned none):
	 * none kept in the retired executor's cache, and the rings the
	 * table keeps counted and within its bound.  (Its cache fields are
	 * its thread's: the table's lock is what orders the drain before
	 * this look.) */
	struct cbcmn__actors *t = atomic_load(&rt->actors);
	uint32_t spare;
	assert_int_equal(table_free(rt, &spare), atomic_load(&t->nslots));
	ASSERT_TASK_CHECKS();
	assert_true(spare <= CBCMN__TABLE_SPARE_MAX);
	/* And they serve the next spawns: none made anew. */
	uint32_t made = atomic_load(&t->nslots);
	assert_int_equal(t_run_pinned(rt, 1, churn_on_1, NULL), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&t->nslots), made);
	t_destroy(rt);
}

/* ---- a host's records of halted handler actors serve its next joins ----
 *
 * A handler spawns rounds of children on its own host and sends each a
 * message; each answers its own number and halts (half of them after a
 * RETRY).  Every round's sum must be that round's: a record reused with
 * anything of its last actor's breaks it (still marked queued, its next
 * actor's messages never reach the host; its state, a wrong sum). */

#define JR_ROUNDS 8
#define JR_KIDS 20

struct jr_kid {
	cbcmn_actor_ref parent;
	uint64_t value;
	bool retried;
};

struct jr {
	cbcmn_nursery *n;
	struct jr_kid kids[JR_KIDS];
	int round, got;
	uint64_t sum;
	_Atomic int rounds_ok, bad;
};

static int64_t jr_kid(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct jr_kid *k = arg;
	(void)m;
	if (k->value % 2 && !k->retried) {
		k->retried = true;
		return CBCMN_ACTOR_RETRY;
	}
	cbcmn_actor_msg a = msg(M_DATA, k->value, 0);
	return cbcmn_actor_send(NULL, cx, k->parent, &a) ? -1 : CBCMN_ACTOR_HALT;
}

static int64_t jr_spawn_round(cbcmn_cx *cx, struct jr *j)
{
	cbcmn_actor_ref self = cbcmn_actor_self(cx), r;
	cbcmn_actor_msg go = msg(M_DATA, 0, 0);
	j->got = 0;
	j->sum = 0;
	for (int i = 0; i < JR_KIDS; i++) {
		j->kids[i] = (struct jr_kid){self, (uint64_t)j->round * 1000 + (uint64_t)i, false};
		if (cbcmn_actor_spawn_handler(cx, j->n, jr_kid, &j->kids[i], NULL, &r) ||
		    cbcmn_actor_try_send(NULL, cx, r, &go))
			return -1;
	}
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t jr_parent(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct jr *j = arg;
	if (m->type == CBCMN_ACTOR_START)
		return jr_spawn_round(cx, j);
	j->sum += m->body.u64[0];
	if (++j->got < JR_KIDS)
		return CBCMN_ACTOR_CONTINUE;
	uint64_t want = (uint64_t)j->round * 1000 * JR_KIDS + JR_KIDS * (JR_KIDS - 1) / 2;
	atomic_fetch_add(j->sum == want ? &j->rounds_ok : &j->bad, 1);
	return ++j->round < JR_ROUNDS ? jr_spawn_round(cx, j) : CBCMN_ACTOR_HALT;
}

static int64_t jr_main(cbcmn_cx *cx, void *arg)
{
	struct jr *j = arg;
	TASK_CHECK(open_n(cx, &j->n) == 0);
	cbcmn_actor_opts start = {.start = true, .mailbox_cap = JR_KIDS};
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn_handler(cx, j->n, jr_parent, j, &start, &r) == 0);
	return cbcmn_nursery_await_all(cx, j->n);
}

static void test_host_reuses_halted_handler_records(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct jr *j = calloc(1, sizeof(*j));
	assert_non_null(j);
	t_run(rt, jr_main, j, 0);
	assert_int_equal(atomic_load(&j->rounds_ok), JR_ROUNDS);
	assert_int_equal(atomic_load(&j->bad), 0);
	free(j);
	t_destroy(rt);
}

/* ---- storms: spawns and halts from four executors and plain threads at
 * once; each round's references are stale after it, and slots are
 * recycled rather than made anew ---- */

#define STORM_EXECS 4
#define STORM_THREADS 3
#define STORM_TASKS 4

struct storm {
	cbcmn_runtime *rt;
	int rounds, per_round;
	_Atomic long spawned, stale_ok, bad;
};

/* One round: per_round actors spawned (fiber and handler alternately,
 * stealable or not), half told to quit, the rest returning at once. */
static void storm_round(struct storm *s, cbcmn_cx *cx, cbcmn_actor_ref *refs)
{
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(s->rt, cx, &n)) {
		atomic_fetch_add(&s->bad, 1);
		return;
	}
	cbcmn_actor_opts start = {.start = true};
	for (int i = 0; i < s->per_round; i++) {
		int rc;
		/* Mailboxes of 1, 16, 300 (past what a free slot keeps) and
		 * the default, so that spare rings of every kind meet every
		 * capacity. */
		static const uint32_t caps[4] = {1, 16, CBCMN__SPARE_CAP_MAX + 44, 0};
		cbcmn_actor_opts o = {.placement = i % 4 == 0 ? CBCMN_PLACE_STEALABLE
							      : CBCMN_PLACE_LOCAL,
				      .mailbox_cap = caps[(i / 4) % 4]};
		if (i % 3 == 2)
			rc = cbcmn_actor_spawn_handler(cx, n, halts_at_start, NULL, &start, &refs[i]);
		else
			rc = cbcmn_actor_spawn(cx, n, i % 2 ? quits_on_message : returns_at_once, NULL,
					       &o, &refs[i]);
		if (rc)
			atomic_fetch_add(&s->bad, 1);
		else
			atomic_fetch_add(&s->spawned, 1);
	}
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	for (int i = 1; i < s->per_round; i += 2)
		if (i % 3 != 2)
			(void)cbcmn_actor_send(s->rt, cx, refs[i], &q); /* -ESRCH: gone already */
	if (cbcmn_nursery_await_all(cx, n))
		atomic_fetch_add(&s->bad, 1);
	/* All halted: every reference of the round is stale, whoever has
	 * its slot now. */
	for (int i = 0; i < s->per_round; i++) {
		int rc = cbcmn_actor_try_send(s->rt, cx, refs[i], &q);
		atomic_fetch_add(rc == -ESRCH ? &s->stale_ok : &s->bad, 1);
	}
}

static void storm_rounds(struct storm *s, cbcmn_cx *cx)
{
	cbcmn_actor_ref *refs = calloc((size_t)s->per_round, sizeof(*refs));
	if (!refs) {
		atomic_fetch_add(&s->bad, 1);
		return;
	}
	for (int r = 0; r < s->rounds; r++)
		storm_round(s, cx, refs);
	free(refs);
}

static int64_t storm_task(cbcmn_cx *cx, void *arg)
{
	storm_rounds(arg, cx);
	return 0;
}

static void *storm_thread(void *arg)
{
	storm_rounds(arg, NULL);
	return NULL;
}

static int64_t storm_main(cbcmn_cx *cx, void *arg)
{
	struct storm *s = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	for (uint32_t i = 0; i < STORM_TASKS; i++) {
		cbcmn_spawn_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = i % STORM_EXECS};
		TASK_CHECK(cbcmn_nursery_spawn_ex(cx, n, storm_task, s, &o, NULL) == 0);
	}
	return cbcmn_nursery_await_all(cx, n);
}

static void *storm_runner(void *arg)
{
	struct storm *s = arg;
	int64_t r = -1;
	if (cbcmn_runtime_run(s->rt, storm_main, s, &r) || r)
		atomic_fetch_add(&s->bad, 1);
	return NULL;
}

static void test_spawn_halt_storm_from_executors_and_threads(void **state)
{
	(void)state;
	struct storm s = {.rt = t_runtime(STORM_EXECS), .rounds = STRESS(40), .per_round = 60};
	pthread_t th[STORM_THREADS + 1];
	assert_int_equal(pthread_create(&th[0], NULL, storm_runner, &s), 0);
	for (int i = 1; i <= STORM_THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, storm_thread, &s), 0);
	for (int i = 0; i <= STORM_THREADS; i++)
		pthread_join(th[i], NULL);
	ASSERT_TASK_CHECKS();
	long total = (long)(STORM_TASKS + STORM_THREADS) * s.rounds * s.per_round;
	assert_int_equal(atomic_load(&s.bad), 0);
	assert_int_equal(atomic_load(&s.spawned), total);
	assert_int_equal(atomic_load(&s.stale_ok), total);
	assert_int_equal(live_actors(s.rt, STORM_EXECS), 0);
	/* Recycled: at most every round alive at once, and the caches' and
	 * half-used batches' slack, were ever made. */
	struct cbcmn__actors *t = atomic_load(&s.rt->actors);
	uint32_t bound = (STORM_TASKS + STORM_THREADS) * (uint32_t)s.per_round +
			 STORM_EXECS * 2 * 32 + 64;
	assert_true(atomic_load(&t->nslots) <= bound);
	/* The rings the table keeps: counted, and past its bound by at most
	 * a batch of the largest kept for each thread that may race there. */
	uint32_t spare;
	(void)table_free(s.rt, &spare);
	ASSERT_TASK_CHECKS();
	assert_true(spare <= CBCMN__TABLE_SPARE_MAX + (STORM_EXECS + STORM_THREADS) * 32 *
							     CBCMN__SPARE_CAP_MAX);
	t_destroy(s.rt);
}

/* ---- a big mailbox ring is not kept for the slot's next actor ----
 *
 * A halted actor's ring stays with its slot in the executor's cache for
 * the next spawn there: a ring of the largest capacity is 64 MiB, charged
 * to nobody, and an executor that never retires kept 64 of them (4 GiB)
 * for good once that many such actors had lived at once. */

#define BR_N 8

static int64_t big_rings_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n;
	cbcmn_actor_ref r[BR_N + 1];
	cbcmn_actor_opts big = {.mailbox_cap = CBCMN_ACTOR_MAILBOX_MAX};
	TASK_CHECK(open_n(cx, &n) == 0);
	for (int i = 0; i < BR_N; i++) /* alive at once: a ring each */
		TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, &big, &r[i]) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, NULL, &r[BR_N]) == 0);
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	for (int i = 0; i <= BR_N; i++)
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, r[i], &q) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	/* One executor: the halts ran on this thread, whose cache holds
	 * every slot now; the default ring is kept, no big one. */
	struct cbcmn__actors *t = atomic_load(&rt->actors);
	struct cbcmn__actor *c = atomic_load(&t->chunk[0]);
	uint32_t kept = 0, big_kept = 0;
	for (uint32_t i = 0; i < atomic_load(&t->nslots); i++) {
		kept += c[i].spare != NULL;
		big_kept += c[i].spare && c[i].spare_cap == CBCMN_ACTOR_MAILBOX_MAX;
	}
	TASK_CHECK(kept >= 1);
	TASK_CHECK(big_kept == 0);
	return 0;
}

static void test_big_mailbox_rings_are_not_kept(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_run(rt, big_rings_main, NULL, 0);
	t_destroy(rt);
}

/* ---- a spare ring bigger than asked serves, with the capacity asked ----
 *
 * A halted actor's ring stays with its slot for the slot's next spawn on
 * that executor (a LIFO cache: the next spawn there takes that slot), and
 * serves any capacity it has room for: a mailbox of 4 in a ring of 10
 * still holds 4 messages.  A mailbox of one is the slot's own message
 * (the spare stays for later); one of 16 gets a new ring that holds 16.
 * Each mailbox is filled to its capacity and one more refused (ASan sees
 * a ring too small). */

/* Spawn an actor with a mailbox of cap into a slot at want_index (if
 * not UINT32_MAX) with ring want_ring (if not NULL), fill it, let it
 * go; its slot's index, and its ring and spare as spawned. */
static uint32_t sr_fill(cbcmn_cx *cx, uint32_t cap, uint32_t want_index,
			const cbcmn_actor_msg *want_ring, cbcmn_actor_msg **ring,
			cbcmn_actor_msg **spare)
{
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.mailbox_cap = cap};
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, quits_on_message, NULL, &o, &r) == 0);
	struct cbcmn__actors *t = atomic_load(&rt->actors); /* made by the first spawn */
	struct cbcmn__actor *a = &atomic_load(&t->chunk[0])[cbcmn__ref_index(r)];
	TASK_CHECK(want_index == UINT32_MAX || cbcmn__ref_index(r) == want_index);
	TASK_CHECK(!want_ring || a->ring == want_ring);
	*ring = a->ring;
	*spare = a->spare;
	/* It has not run (one executor, this task goes on): its mailbox
	 * takes cap messages and no more, whatever its ring's room. */
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	for (uint32_t i = 0; i < cap; i++)
		TASK_CHECK(cbcmn_actor_try_send(NULL, cx, r, &m) == 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, r, &m) == -EAGAIN);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return cbcmn__ref_index(r);
}

static int64_t spare_room_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_actor_msg *ten, *ring, *spare;
	uint32_t idx = sr_fill(cx, 10, UINT32_MAX, NULL, &ten, &spare);
	TASK_CHECK(sr_fill(cx, 4, idx, ten, &ring, &spare) == idx); /* the same ring */
	struct cbcmn__actor *a = &atomic_load(&atomic_load(&rt->actors)->chunk[0])[idx];
	TASK_CHECK(sr_fill(cx, 1, idx, &a->one_msg, &ring, &spare) == idx);
	TASK_CHECK(spare == ten); /* kept while the one-message actor lived */
	TASK_CHECK(sr_fill(cx, 16, idx, NULL, &ring, &spare) == idx);
	TASK_CHECK(ring != NULL && ring != &a->one_msg);
	return 0;
}

static void test_a_bigger_spare_ring_serves_a_smaller_mailbox(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_run(rt, spare_room_main, NULL, 0);
	t_destroy(rt);
}

/* ---- a one-message actor keeps only a small spare ----
 *
 * A slot's spare stays while its actor has a mailbox of one (skynet's
 * leaves and inner nodes alternate in the same slots), and nobody counts
 * it meanwhile: live one-message actors took up every ring the cache and
 * the table kept, wave after wave of halts, 16 KiB each for a mailbox of
 * 64 bytes, without bound.  Only a ring of at most CBCMN__SPARE_ONE_MAX
 * messages stays now. */

static int64_t one_spare_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_actor_msg *ring, *spare;
	uint32_t idx = sr_fill(cx, CBCMN__SPARE_CAP_MAX, UINT32_MAX, NULL, &ring, &spare);
	struct cbcmn__actor *a = &atomic_load(&atomic_load(&rt->actors)->chunk[0])[idx];
	TASK_CHECK(a->spare == ring); /* kept for the slot's next actor */
	TASK_CHECK(sr_fill(cx, 1, idx, &a->one_msg, &ring, &spare) == idx);
	TASK_CHECK(spare == NULL); /* too big to stay with a one-message actor */
	cbcmn_actor_msg *small;
	TASK_CHECK(sr_fill(cx, CBCMN__SPARE_ONE_MAX, idx, NULL, &small, &spare) == idx);
	TASK_CHECK(sr_fill(cx, 1, idx, &a->one_msg, &ring, &spare) == idx);
	TASK_CHECK(spare == small); /* a small one stays */
	/* Waves of halts then live one-message actors hold no more spare
	 * room than the small ones could. */
	cbcmn_nursery *live, *n;
	TASK_CHECK(open_n(cx, &live) == 0);
	for (int w = 0; w < 4; w++) {
		TASK_CHECK(open_n(cx, &n) == 0);
		cbcmn_actor_opts big = {.mailbox_cap = CBCMN__SPARE_CAP_MAX}, one = {.mailbox_cap = 1};
		cbcmn_actor_ref r;
		for (int i = 0; i < 200; i++)
			TASK_CHECK(cbcmn_actor_spawn(cx, n, returns_at_once, NULL, &big, &r) == 0);
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
		for (int i = 0; i < 200; i++)
			TASK_CHECK(cbcmn_actor_spawn(cx, live, quits_on_message, NULL, &one, &r) == 0);
	}
	struct cbcmn__actors *t = atomic_load(&rt->actors);
	for (uint32_t i = 0; i < atomic_load(&t->nslots); i++) {
		struct cbcmn__actor *s = &atomic_load(&t->chunk[0])[i];
		TASK_CHECK(s->state != CBCMN__A_LIVE || s->ring != &s->one_msg ||
			   s->spare_cap <= CBCMN__SPARE_ONE_MAX);
	}
	TASK_CHECK(cbcmn_nursery_cancel(live) == 0);
	(void)cbcmn_nursery_await_all(cx, live);
	return 0;
}

static void test_one_message_actors_keep_only_small_spares(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_run(rt, one_spare_main, NULL, 0);
	t_destroy(rt);
}

/* ---- a reused ring's mailbox, sent to over the lanes ----
 *
 * The receiver lives on executor 1 and is spawned there, so that each
 * takes the slot (and the spare ring) its predecessor left in that
 * executor's cache: a ring of 10 then serves a mailbox of 4 or 2, one of
 * 16 a mailbox of 10, and one-message mailboxes come between.  The
 * sender, on executor 0, sends over the lanes, whose reservations count
 * the free places from the mailbox's capacity, not the ring's room: the
 * mailbox takes exactly its capacity, a waiting send gets in once the
 * receiver has taken half of it, and at the halt every message left is
 * dropped once and counted undelivered in the DOWN. */

struct lr {
	cbcmn_nursery *n;
	uint32_t cap;
	_Atomic int go, drops, got;
	_Atomic cbcmn_actor_ref r;
};

static void lr_drop(void *st, const cbcmn_actor_msg *m)
{
	(void)m;
	atomic_fetch_add(&((struct lr *)st)->drops, 1);
}

static bool lr_wait(cbcmn_cx *cx, _Atomic int *v, int want)
{
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(v) < want && t_now_ns() < end)
		cbcmn_sleep(cx, 100000);
	return atomic_load(v) >= want;
}

/* Takes half its mailbox once told to, then halts once told to. */
static int64_t lr_actor(cbcmn_cx *cx, void *arg)
{
	struct lr *c = arg;
	TASK_CHECK(lr_wait(cx, &c->go, 1));
	cbcmn_actor_msg m;
	for (uint32_t i = 0; i < (c->cap + 1) / 2; i++)
		if (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0)
			atomic_fetch_add(&c->got, 1);
	TASK_CHECK(lr_wait(cx, &c->go, 2));
	return 0;
}

static int64_t lr_spawner(cbcmn_cx *cx, void *arg)
{
	struct lr *c = arg;
	cbcmn_actor_opts o = {.mailbox_cap = c->cap, .placement = CBCMN_PLACE_PINNED,
			      .shard = 1, .drop = lr_drop};
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn(cx, c->n, lr_actor, c, &o, &r) == 0);
	atomic_store(&c->r, r);
	return 0;
}

/* One round: 1 if the mailbox was served by a bigger ring. */
static int lr_round(cbcmn_cx *cx, uint32_t cap)
{
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	struct lr c = {.cap = cap, .r = CBCMN_ACTOR_NONE};
	TASK_CHECK(open_n(cx, &c.n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, c.n, 1, lr_spawner, &c, NULL) == 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(&c.r) == CBCMN_ACTOR_NONE && t_now_ns() < end)
		cbcmn_sleep(cx, 100000);
	cbcmn_actor_ref r = atomic_load(&c.r);
	TASK_CHECK(r != CBCMN_ACTOR_NONE);
	struct cbcmn__actor *a = cbcmn__actor_slot(rt, r);
	/* It waits for go: its mailbox stays as spawned. */
	int bigger = a->ring != &a->one_msg && a->ring_room > cap;
	uint64_t mon;
	TASK_CHECK(cbcmn_actor_monitor(cx, r, &mon) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	uint32_t ok = 0;
	while (ok <= cap && cbcmn_actor_try_send(NULL, cx, r, &m) == 0)
		ok++;
	TASK_CHECK(ok == cap);
	TASK_CHECK(cbcmn_actor_send_timeout(NULL, cx, r, &m, 1000000) == -ETIMEDOUT);
	atomic_store(&c.go, 1);
	TASK_CHECK(cbcmn_actor_send_timeout(NULL, cx, r, &m, T_STALL_NS) == 0);
	while (cbcmn_actor_try_send(NULL, cx, r, &m) == 0)
		ok++;
	TASK_CHECK(ok + 1 == cap + (cap + 1) / 2); /* full again, not more */
	atomic_store(&c.go, 2);
	TASK_CHECK(cbcmn_nursery_await_all(cx, c.n) == 0);
	TASK_CHECK(cbcmn_actor_receive(cx, &m, T_STALL_NS) == 0);
	TASK_CHECK(m.type == CBCMN_ACTOR_DOWN && m.body.down.undelivered == cap);
	TASK_CHECK(atomic_load(&c.got) == (int)(cap + 1) / 2);
	TASK_CHECK(atomic_load(&c.drops) == (int)cap);
	return bigger;
}

static int64_t lr_driver(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	static const uint32_t caps[] = {10, 4, 1, 10, 2, 1, 16, 10, 1, 4};
	int bigger = 0;
	for (int i = 0; i < STRESS(200); i++)
		bigger += lr_round(cx, caps[i % 10]);
	TASK_CHECK(bigger > 0); /* the case this is about was met */
	return 0;
}

static int64_t lr_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts o = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
	cbcmn_actor_ref r;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, lr_driver, arg, &o, &r) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_reused_rings_over_the_lanes_hold_their_capacity(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.stall_ns = CBCMN_STALL_OFF; /* a hog beside it must not reroute the sends */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	t_run(rt, lr_main, NULL, 0);
	t_destroy(rt);
}

/* ---- an actor nobody watches counts live and halting while its halt runs ----
 *
 * Its halt is one lock section (FREE at once), but the statistics say
 * what cbcmn.h says: halting while the halt runs, its drop included.  It
 * left both gauges as the halt began: a slow drop showed no actor at all. */

static _Atomic int qh_in_drop, qh_looked;

static void qh_drop(void *st, const cbcmn_actor_msg *m)
{
	(void)st;
	(void)m;
	atomic_store(&qh_in_drop, 1);
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&qh_looked) && t_now_ns() < deadline)
		usleep(1000);
}

static int64_t qh_body(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	cbcmn_actor_ref r;
	cbcmn_actor_opts o = {.drop = qh_drop};
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, returns_at_once, NULL, &o, &r) == 0);
	cbcmn_actor_msg m = msg(M_DATA, 0, 0);
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, r, &m) == 0); /* dropped at its halt */
	return cbcmn_nursery_await_all(cx, n);
}

static void test_quiet_halt_counts_halting_while_it_runs(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, qh_body, NULL, NULL), 0);
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&qh_in_drop) && t_now_ns() < deadline)
		usleep(1000);
	assert_true(atomic_load(&qh_in_drop));
	cbcmn_stats st;
	cbcmn_executor_stats per;
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, &per, 1), 0);
	atomic_store(&qh_looked, 1);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(per.actors, 1);
	assert_int_equal(per.actors_halting, 1);
	assert_int_equal(live_actors(rt, 1), 0);
	t_destroy(rt);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test(f)
		T(test_spawn_ended_by_the_spawners_budget_leaves_no_live_actor),
		T(test_references_stale_after_recycle),
		T(test_generation_reuse_across_executors),
		T(test_retiring_executor_drains_its_cache),
		T(test_host_reuses_halted_handler_records),
		T(test_spawn_halt_storm_from_executors_and_threads),
		T(test_big_mailbox_rings_are_not_kept),
		T(test_a_bigger_spare_ring_serves_a_smaller_mailbox),
		T(test_reused_rings_over_the_lanes_hold_their_capacity),
		T(test_one_message_actors_keep_only_small_spares),
		T(test_quiet_halt_counts_halting_while_it_runs),
	};
#undef T
	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests_name("actor_table", tests, NULL, NULL);
}
