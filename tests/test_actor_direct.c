/* test_actor_direct: the actor hop's fast path (docs/ACTORS.md, "Cost"):
 * an actor that blocks after waking another on its executor switches
 * straight to it (sched.c, actor_direct()), and an unpinned actor whose
 * home is out of work follows its messages to the sender's executor
 * (actor_mbox.c, lane_route()).  Attacked here: a receiver stopped while
 * the token is handed to it, receive timeouts racing the sends, a pinned
 * receiver that must stay, and tokens passed round rings of pinned and
 * unpinned actors, every hop counted. */
#include "helpers.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "actor_test.h"

/* ---- a token round a ring: every hop once, in turn ---- */

#define RING 64

struct ring {
	cbcmn_actor_ref refs[RING];
	uint64_t visits[RING];
	uint64_t hops;          /* the token's hops in all */
	_Atomic uint64_t done;  /* hops made when it came back to 0 */
	cbcmn_actor_ref stopped; /* stopped by the hop before it, if set */
	uint32_t stop_at;       /* the member stopped as the token heads its way */
	_Atomic int shut;       /* that member's receive ended -ESHUTDOWN */
	bool pinned;
};

struct member {
	struct ring *r;
	uint32_t i;
};

static int64_t ring_member(cbcmn_cx *cx, void *arg)
{
	struct member *me = arg;
	struct ring *r = me->r;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0) {
		if (m.type == M_QUIT) {
			if (me->i + 1 < RING)
				(void)cbcmn_actor_send(NULL, cx, r->refs[me->i + 1], &m);
			return 0;
		}
		r->visits[me->i]++;
		uint32_t next = (me->i + 1) % RING;
		if (m.body.u64[0] == 0) {
			atomic_store(&r->done, m.body.u64[1]);
			return 0;
		}
		m.body.u64[0]--;
		m.body.u64[1]++;
		/* The attack: stop the receiver, then hand it the token. */
		if (r->stop_at && next == r->stop_at && m.body.u64[1] > RING)
			TASK_CHECK(cbcmn_actor_stop(NULL, cx, r->refs[next], 7) == 0);
		rc = cbcmn_actor_send(NULL, cx, r->refs[next], &m);
		if (r->stop_at && next == r->stop_at && m.body.u64[1] > RING) {
			/* A stop closes the mailbox: the send misses. */
			TASK_CHECK(rc == -ESRCH);
			atomic_store(&r->done, m.body.u64[1]);
			return 0;
		}
		TASK_CHECK(rc == 0);
	}
	if (rc == -ESHUTDOWN && me->i == r->stop_at)
		atomic_store(&r->shut, 1);
	return rc == -ESHUTDOWN ? 0 : rc;
}

static int64_t ring_root(cbcmn_cx *cx, void *arg)
{
	struct ring *r = arg;
	static struct member mem[RING];
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.mailbox_cap = 2,
			       .placement = r->pinned ? CBCMN_PLACE_PINNED : CBCMN_PLACE_LOCAL};
	for (uint32_t k = 0; k < RING; k++) {
		mem[k] = (struct member){r, k};
		TASK_CHECK(cbcmn_actor_spawn(cx, n, ring_member, &mem[k], &ao, &r->refs[k]) == 0);
	}
	cbcmn_actor_msg m = msg(M_DATA, r->hops, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, r->refs[0], &m) == 0);
	while (!atomic_load(&r->done))
		cbcmn_sleep(cx, 1000000);
	/* The rest end with QUIT from 0 (a stopped one's successors too). */
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	for (uint32_t k = 0; k < RING; k++)
		(void)cbcmn_actor_send(NULL, cx, r->refs[k], &q);
	return cbcmn_nursery_await_all(cx, n);
}

static void ring_run(struct ring *r, uint32_t workers)
{
	cbcmn_runtime *rt = t_runtime(workers);
	int64_t res;
	assert_int_equal(cbcmn_runtime_run(rt, ring_root, r, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	t_destroy(rt);
}

/* Every member visited in turn, the same number of times give or take
 * one: no hop lost or made twice, on one executor (pinned) or two. */
static void ring_check(struct ring *r)
{
	assert_int_equal(atomic_load(&r->done), r->hops);
	uint64_t sum = 0;
	for (uint32_t k = 0; k < RING; k++) {
		sum += r->visits[k];
		assert_true(r->visits[k] == r->hops / RING || r->visits[k] == r->hops / RING + 1);
	}
	assert_int_equal(sum, r->hops + 1);
}

static void test_token_round_pinned_ring_every_hop_once(void **state)
{
	(void)state;
	static struct ring r;
	memset(&r, 0, sizeof(r));
	r.pinned = true;
	r.hops = STRESS(200000);
	ring_run(&r, 2);
	ring_check(&r);
}

static void test_token_round_unpinned_ring_every_hop_once(void **state)
{
	(void)state;
	static struct ring r;
	memset(&r, 0, sizeof(r));
	r.hops = STRESS(200000);
	ring_run(&r, 2);
	ring_check(&r);
}

/* A receiver stopped just before the token is sent to it, on the hop
 * that would have switched straight to it: the send misses, its receive
 * ends -ESHUTDOWN, nothing hangs.  Pinned (one executor: the direct
 * switch) and not. */
static void stopped_receiver(bool pinned)
{
	static struct ring r;
	memset(&r, 0, sizeof(r));
	r.pinned = pinned;
	r.hops = 10 * RING;
	r.stop_at = RING / 2;
	ring_run(&r, 2);
	assert_int_equal(atomic_load(&r.shut), 1);
	assert_true(atomic_load(&r.done) > RING);
}

static void test_receiver_stopped_as_the_token_comes_pinned(void **state)
{
	(void)state;
	stopped_receiver(true);
}

static void test_receiver_stopped_as_the_token_comes_unpinned(void **state)
{
	(void)state;
	stopped_receiver(false);
}

/* ---- a receive timeout racing the sends ---- */

#define RACE_MSGS 20000

struct race {
	cbcmn_actor_ref rx;
	_Atomic long got, timeouts, bad;
};

static int64_t race_rx(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	uint64_t next = 0;
	cbcmn_actor_msg m;
	while (next < (uint64_t)STRESS(RACE_MSGS)) {
		/* 0-2 us: the timer fires as the sender hands a message over. */
		int rc = cbcmn_actor_receive(cx, &m, next % 3 * 1000);
		if (rc == -ETIMEDOUT) {
			atomic_fetch_add(&r->timeouts, 1);
			continue;
		}
		TASK_CHECK(rc == 0);
		if (m.body.u64[0] != next)
			atomic_fetch_add(&r->bad, 1); /* lost, twice or out of order */
		next = m.body.u64[0] + 1;
		atomic_fetch_add(&r->got, 1);
	}
	return 0;
}

static int64_t race_tx(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	for (uint64_t i = 0; i < (uint64_t)STRESS(RACE_MSGS); i++) {
		cbcmn_actor_msg m = msg(M_DATA, i, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, r->rx, &m) == 0);
		if (i % 7 == 0)
			cbcmn_yield(cx);
	}
	return 0;
}

static int64_t race_root(cbcmn_cx *cx, void *arg)
{
	struct race *r = arg;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	/* Both on executor 0: the sender's blocks switch straight to the
	 * receiver it woke. */
	cbcmn_actor_opts pin = {.placement = CBCMN_PLACE_PINNED, .shard = 0, .mailbox_cap = 1};
	cbcmn_actor_ref tx;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, race_rx, r, &pin, &r->rx) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, race_tx, r, &pin, &tx) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_receive_timeouts_racing_sends_lose_nothing(void **state)
{
	(void)state;
	static struct race r;
	memset(&r, 0, sizeof(r));
	cbcmn_runtime *rt = t_runtime(2);
	int64_t res;
	assert_int_equal(cbcmn_runtime_run(rt, race_root, &r, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	assert_int_equal(atomic_load(&r.got), STRESS(RACE_MSGS));
	assert_int_equal(atomic_load(&r.bad), 0);
	t_destroy(rt);
}

/* ---- following messages: unpinned come, pinned stay ---- */

struct follow {
	cbcmn_actor_ref r;
	_Atomic int ran_on; /* the executor of its last message, + 1 */
	_Atomic int ready;
};

static int64_t follow_rx(cbcmn_cx *cx, void *arg)
{
	struct follow *f = arg;
	cbcmn_actor_msg m;
	int rc;
	atomic_store(&f->ready, 1);
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0 && m.type == M_DATA)
		atomic_store(&f->ran_on, (int)cbcmn_cx_executor(cx) + 1);
	return rc;
}

/* A pinned task on executor 0 sends to a receiver that first ran on
 * executor 1, which has nothing else to do: an unpinned receiver comes
 * to executor 0, a pinned one stays on 1; both get every message. */
static int64_t follow_sender(cbcmn_cx *cx, void *arg)
{
	struct follow *f = arg;
	for (int i = 0; i < 200; i++) {
		cbcmn_actor_msg m = msg(M_DATA, (uint64_t)i, 0);
		TASK_CHECK(cbcmn_actor_send(NULL, cx, f->r, &m) == 0);
		cbcmn_sleep(cx, 100000); /* executor 1 out of work meanwhile */
		if (atomic_load(&f->ran_on) == 1)
			break;
	}
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, f->r, &q) == 0);
	return 0;
}

static int64_t follow_root(cbcmn_cx *cx, void *arg)
{
	void **p = arg;
	struct follow *f = p[0];
	bool pinned = p[1] != NULL;
	cbcmn_nursery *n;
	TASK_CHECK(open_n(cx, &n) == 0);
	cbcmn_actor_opts ao = {.placement = pinned ? CBCMN_PLACE_PINNED : CBCMN_PLACE_STEALABLE_ON,
			       .shard = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, follow_rx, f, &ao, &f->r) == 0);
	while (!atomic_load(&f->ready))
		cbcmn_sleep(cx, 1000000);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, follow_sender, f, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static int follow_run(bool pinned)
{
	static struct follow f;
	memset(&f, 0, sizeof(f));
	cbcmn_runtime *rt = t_runtime(2);
	int64_t res;
	void *p[2] = {&f, pinned ? &f : NULL};
	assert_int_equal(cbcmn_runtime_run(rt, follow_root, p, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	t_destroy(rt);
	return atomic_load(&f.ran_on) - 1;
}

static void test_unpinned_receiver_follows_its_messages_pinned_stays(void **state)
{
	(void)state;
	assert_int_equal(follow_run(false), 0);
	assert_int_equal(follow_run(true), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_token_round_pinned_ring_every_hop_once),
		cmocka_unit_test(test_token_round_unpinned_ring_every_hop_once),
		cmocka_unit_test(test_receiver_stopped_as_the_token_comes_pinned),
		cmocka_unit_test(test_receiver_stopped_as_the_token_comes_unpinned),
		cmocka_unit_test(test_receive_timeouts_racing_sends_lose_nothing),
		cmocka_unit_test(test_unpinned_receiver_follows_its_messages_pinned_stays),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
