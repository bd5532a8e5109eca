/* test_shard.c: executors as shards: rings, doorbells, cross-shard lanes,
 * placement (pinned, preferred, round-robin), tasks going home. */
#include <errno.h>
#include <liburing.h>
#include <unistd.h>

#include "helpers.h"
#include "runtime.h" /* lanes and counters, for the exactly-once stress */

static cbcmn_runtime *shard_rt(uint32_t workers, uint32_t ring_flags, uint64_t spin_ns)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cfg.ring_flags = ring_flags;
	cfg.spin_ns = spin_ns;
	return t_runtime_cfg(&cfg);
}

static cbcmn_executor_stats exec_stats(cbcmn_runtime *rt, uint32_t i)
{
	cbcmn_stats s;
	cbcmn_executor_stats per[4];
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, per, 4), 0);
	return per[i];
}

/* Wait (from the test thread) until executor i has parked at least n times. */
static void wait_parked(cbcmn_runtime *rt, uint32_t i, uint64_t n)
{
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (exec_stats(rt, i).parks < n && t_now_ns() < end)
		usleep(1000);
	assert_true(exec_stats(rt, i).parks >= n);
	/* Now in the ring, asleep (its state says so once it is). */
	while (exec_stats(rt, i).state != CBCMN_EXEC_PARKED && t_now_ns() < end)
		usleep(1000);
	assert_int_equal(exec_stats(rt, i).state, CBCMN_EXEC_PARKED);
	usleep(20000); /* and, most likely, inside io_uring_enter */
}

static void test_setup_flags_reported(void **state)
{
	(void)state;
	cbcmn_runtime *rt = shard_rt(2, 0, 0);
	cbcmn_stats s;
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
	if (!(s.ring_setup_flags & IORING_SETUP_DEFER_TASKRUN))
		printf("  note: DEFER_TASKRUN refused; rings use %#x\n", s.ring_setup_flags);
	assert_true(s.ring_setup_flags & IORING_SETUP_SUBMIT_ALL);
	bool msg_ring = s.msg_ring;
	t_destroy(rt);
	if (!msg_ring)
		printf("  note: no IORING_OP_MSG_RING (before 5.18): eventfd doorbells\n");

	rt = shard_rt(1, CBCMN_RING_PLAIN, 0);
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
	assert_false(s.ring_setup_flags & (IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN));
	t_destroy(rt);

	rt = shard_rt(1, CBCMN_RING_NO_MSG_RING, 0);
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
	assert_false(s.msg_ring);
	t_destroy(rt);
}

static void test_bad_config(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_runtime *rt = NULL;
	uint32_t bad_entries[] = {4, 100, 65536};
	for (size_t i = 0; i < 3; i++) {
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cfg.ring_entries = bad_entries[i];
		assert_int_equal(cbcmn_runtime_create(&cfg, &rt), -EINVAL);
	}
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.ring_flags = 0x100;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), -EINVAL);
	cfg.ring_flags = CBCMN_RING_SQPOLL | CBCMN_RING_PLAIN;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), -EINVAL);
	assert_null(rt);
}

/* ---- placement ------------------------------------------------------------ */

struct place {
	_Atomic uint32_t ran_on[64];
	_Atomic uint32_t moved;
	_Atomic uint32_t started;
	_Atomic uint32_t go;
	uint32_t yields;
};

struct place_arg {
	struct place *p;
	uint32_t idx;
	uint32_t shard;
};

static int64_t pinned_body(cbcmn_cx *cx, void *arg)
{
	struct place_arg *a = arg;
	atomic_store(&a->p->ran_on[a->idx], cbcmn_cx_executor(cx));
	for (uint32_t i = 0; i < a->p->yields; i++) {
		cbcmn_yield(cx);
		if (cbcmn_cx_executor(cx) != a->shard)
			atomic_fetch_add(&a->p->moved, 1);
	}
	return 0;
}

/* Pinned tasks never migrate, even when all of them are on one executor
 * and the other has nothing to do. */
static int64_t pinned_main(cbcmn_cx *cx, void *arg)
{
	struct place *p = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -1;
	static struct place_arg a[64];
	for (uint32_t i = 0; i < 64; i++) {
		a[i] = (struct place_arg){p, i, i < 48 ? 0 : 1};
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, a[i].shard, pinned_body, &a[i], NULL) == 0);
	}
	return cbcmn_nursery_await_all(cx, n);
}

static void test_pinned_never_migrates(void **state)
{
	(void)state;
	cbcmn_runtime *rt = shard_rt(2, 0, 0);
	struct place p = {.yields = T_SCALE(2000)};
	int64_t r;
	assert_int_equal(cbcmn_runtime_run(rt, pinned_main, &p, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	for (uint32_t i = 0; i < 64; i++)
		assert_int_equal(atomic_load(&p.ran_on[i]), i < 48 ? 0 : 1);
	assert_int_equal(atomic_load(&p.moved), 0);
	t_destroy(rt);
}

static void test_placement_bad_input(void **state)
{
	(void)state;
	cbcmn_runtime *rt = shard_rt(2, 0, 0);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn_pinned(NULL, n, 2, pinned_body, NULL, NULL), -EINVAL);
	assert_int_equal(cbcmn_nursery_spawn_stealable_on(NULL, n, 7, pinned_body, NULL, NULL),
			 -EINVAL);
	cbcmn_spawn_opts o = {.placement = 9};
	assert_int_equal(cbcmn_nursery_spawn_ex(NULL, n, pinned_body, NULL, &o, NULL), -EINVAL);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	t_destroy(rt);
}

/* Pinned spawns from a thread outside the runtime reach their executor. */
static void test_pinned_from_outside(void **state)
{
	(void)state;
	cbcmn_runtime *rt = shard_rt(2, 0, 0);
	struct place p = {.yields = 10};
	static struct place_arg a[16];
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	for (uint32_t i = 0; i < 16; i++) {
		a[i] = (struct place_arg){&p, i, i % 2};
		assert_int_equal(cbcmn_nursery_spawn_pinned(NULL, n, i % 2, pinned_body, &a[i], NULL),
				 0);
	}
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	for (uint32_t i = 0; i < 16; i++)
		assert_int_equal(atomic_load(&p.ran_on[i]), i % 2);
	assert_int_equal(atomic_load(&p.moved), 0);
	t_destroy(rt);
}

static int64_t record_start(cbcmn_cx *cx, void *arg)
{
	struct place_arg *a = arg;
	atomic_store(&a->p->ran_on[a->idx], cbcmn_cx_executor(cx) + 1);
	atomic_fetch_add(&a->p->started, 1);
	return 0;
}

/* The spawner holds executor 0 until every child started, so a child can
 * only start where it was sent (or be stolen by executor 1 from 0: never,
 * as none is queued on 0). */
static int64_t stealable_main(cbcmn_cx *cx, void *arg)
{
	struct place *p = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -1;
	static struct place_arg a[32];
	for (uint32_t i = 0; i < 32; i++) {
		a[i] = (struct place_arg){p, i, 1};
		int rc = i < 16 ? cbcmn_nursery_spawn_stealable_on(cx, n, 1, record_start, &a[i], NULL)
				: cbcmn_nursery_spawn_stealable(cx, n, record_start, &a[i], NULL);
		TASK_CHECK(rc == 0);
	}
	/* The first 16 must all start on executor 1 while we hold 0. */
	uint64_t t0 = t_now_ns();
	while (atomic_load(&p->started) < 16 + 8 && t_now_ns() - t0 < T_STALL_NS)
		;
	return cbcmn_nursery_await_all(cx, n);
}

static void test_stealable_on_and_round_robin(void **state)
{
	(void)state;
	cbcmn_runtime *rt = shard_rt(2, 0, 0);
	struct place p = {0};
	assert_int_equal(t_run_pinned(rt, 0, stealable_main, &p), 0);
	ASSERT_TASK_CHECKS();
	for (uint32_t i = 0; i < 16; i++)
		assert_int_equal(atomic_load(&p.ran_on[i]), 2); /* executor 1 */
	/* Round-robin: half of the other 16 were sent to executor 1. */
	uint32_t on1 = 0;
	for (uint32_t i = 16; i < 32; i++)
		on1 += atomic_load(&p.ran_on[i]) == 2;
	assert_true(on1 >= 8);
	t_destroy(rt);
}

/* ---- doorbells ------------------------------------------------------------ */

struct bell {
	cbcmn_runtime *rt;
	_Atomic uint32_t ran_on;
	_Atomic uint32_t count;
};

static int64_t bell_child(cbcmn_cx *cx, void *arg)
{
	struct bell *b = arg;
	atomic_store(&b->ran_on, cbcmn_cx_executor(cx) + 1);
	atomic_fetch_add(&b->count, 1);
	return 0;
}

/* On executor 0, with executor 1 asleep in its ring: one pinned spawn to 1
 * must ring its doorbell, and a burst of them only once more at most. */
static int64_t bell_main(cbcmn_cx *cx, void *arg)
{
	struct bell *b = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(b->rt, cx, &n))
		return -1;
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, bell_child, b, NULL) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(atomic_load(&b->ran_on) == 2);
	return r;
}

static void doorbell_wakes(uint32_t ring_flags)
{
	cbcmn_runtime *rt = shard_rt(2, ring_flags, CBCMN_SPIN_NONE);
	struct bell b = {.rt = rt};
	/* Let executor 1 go to sleep in its ring. */
	wait_parked(rt, 1, 1);
	cbcmn_executor_stats before1 = exec_stats(rt, 1);
	assert_int_equal(t_run_pinned(rt, 0, bell_main, &b), 0);
	ASSERT_TASK_CHECKS();
	cbcmn_executor_stats after0 = exec_stats(rt, 0), after1 = exec_stats(rt, 1);
	assert_true(after0.doorbells_sent >= 1);
	assert_true(after1.doorbells_recv > before1.doorbells_recv);
	assert_true(after1.wakes > before1.wakes);
	cbcmn_stats s;
	cbcmn_stats_snapshot(rt, &s, NULL, 0);
	if (ring_flags & CBCMN_RING_NO_MSG_RING)
		assert_int_equal(s.total.ring_msgs_submitted, 0);
	else
		assert_true(s.total.ring_msgs_submitted >= 1);
	t_destroy(rt);
}

static void test_doorbell_msg_ring(void **state)
{
	(void)state;
	cbcmn_runtime *rt = shard_rt(1, 0, 0);
	cbcmn_stats s;
	cbcmn_stats_snapshot(rt, &s, NULL, 0);
	t_destroy(rt);
	if (!s.msg_ring)
		T_SKIP("this kernel has no IORING_OP_MSG_RING (5.18): doorbells are eventfd writes");
	doorbell_wakes(0);
}

static void test_doorbell_eventfd(void **state)
{
	(void)state;
	doorbell_wakes(CBCMN_RING_NO_MSG_RING);
}

static int64_t burst_main(cbcmn_cx *cx, void *arg)
{
	struct bell *b = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(b->rt, cx, &n))
		return -1;
	for (int i = 0; i < 200; i++)
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, bell_child, b, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* 200 messages to a sleeping executor in a burst: coalesced into a few
 * doorbells (the lane's transition to non-empty rings, the rest do not). */
static void test_doorbells_coalesce(void **state)
{
	(void)state;
	cbcmn_runtime *rt = shard_rt(2, 0, CBCMN_SPIN_NONE);
	struct bell b = {.rt = rt};
	wait_parked(rt, 1, 1);
	cbcmn_executor_stats b0 = exec_stats(rt, 0);
	assert_int_equal(t_run_pinned(rt, 0, burst_main, &b), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(atomic_load(&b.count), 200);
	cbcmn_executor_stats a0 = exec_stats(rt, 0);
	uint64_t sent = a0.doorbells_sent - b0.doorbells_sent;
	uint64_t coalesced = a0.doorbells_coalesced - b0.doorbells_coalesced;
	printf("  200 spawns to a parked executor: %llu doorbells, %llu coalesced\n",
	       (unsigned long long)sent, (unsigned long long)coalesced);
	assert_true(sent >= 1);
	assert_true(sent <= 20);
	assert_true(coalesced >= 100);
	t_destroy(rt);
}

/* ---- lanes: exactly once ---------------------------------------------------- */

#define LANE_SENDERS 4
struct lanes {
	uint32_t per; /* messages per (sender, receiver) */
	_Atomic uint32_t *seen;  /* [src][dst][seq] delivery counts */
	_Atomic uint32_t bad_exec;
	cbcmn_runtime *rt;
};

struct lane_msg {
	struct lanes *l;
	uint32_t src, dst, seq;
};

static void lane_deliver(struct cbcmn__exec *e, void *arg)
{
	struct lane_msg *m = arg;
	if (e->id != m->dst)
		atomic_fetch_add(&m->l->bad_exec, 1);
	atomic_fetch_add(&m->l->seen[((size_t)m->src * LANE_SENDERS + m->dst) * m->l->per + m->seq], 1);
}

struct lane_sender {
	struct lanes *l;
	struct lane_msg *msgs;
	uint32_t me;
};

static int64_t lane_send_task(cbcmn_cx *cx, void *arg)
{
	struct lane_sender *s = arg;
	struct cbcmn__exec *e = ((struct cbcmn_task *)cx)->exec;
	TASK_CHECK(e->id == s->me);
	uint32_t nexec = cbcmn_runtime_workers(s->l->rt);
	size_t k = 0;
	for (uint32_t seq = 0; seq < s->l->per; seq++)
		for (uint32_t dst = 0; dst < nexec; dst++) {
			if (dst == s->me)
				continue;
			struct lane_msg *m = &s->msgs[k++];
			*m = (struct lane_msg){s->l, s->me, dst, seq};
			TASK_CHECK(cbcmn__xmsg_send(e, dst, CBCMN__XM_CALL, NULL, lane_deliver, m) == 0);
			if (seq % 512 == 0)
				cbcmn_yield(cx); /* let our own lanes drain too */
		}
	return 0;
}

static int64_t lanes_main(cbcmn_cx *cx, void *arg)
{
	struct lane_sender *s = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(s[0].l->rt, cx, &n))
		return -1;
	for (uint32_t i = 0; i < cbcmn_runtime_workers(s[0].l->rt); i++)
		cbcmn_nursery_spawn_pinned(cx, n, i, lane_send_task, &s[i], NULL);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t noop_task(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static void test_lanes_exactly_once(void **state)
{
	(void)state;
	cbcmn_runtime *rt = shard_rt(LANE_SENDERS, 0, 0);
	struct lanes l = {.per = T_SCALE(20000), .rt = rt};
	size_t nseen = (size_t)LANE_SENDERS * LANE_SENDERS * l.per;
	l.seen = calloc(nseen, sizeof(*l.seen));
	struct lane_sender s[LANE_SENDERS];
	for (uint32_t i = 0; i < LANE_SENDERS; i++) {
		s[i] = (struct lane_sender){&l, calloc((size_t)l.per * LANE_SENDERS, sizeof(struct lane_msg)), i};
		assert_non_null(s[i].msgs);
	}
	int64_t r;
	assert_int_equal(cbcmn_runtime_run(rt, lanes_main, s, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	/* Every message comes back to its sender, acknowledged.  Acks wake
	 * nobody (they only return memory): a pinned no-op on every executor
	 * makes each one drain its mail. */
	cbcmn_stats st;
	for (int k = 0; k < 2000; k++) {
		cbcmn_stats_snapshot(rt, &st, NULL, 0);
		if (st.total.xmsgs_acked == st.total.xmsgs_sent)
			break;
		for (uint32_t i = 0; i < LANE_SENDERS; i++)
			t_run_pinned(rt, i, noop_task, NULL);
		usleep(1000);
	}
	assert_int_equal(st.total.xmsgs_acked, st.total.xmsgs_sent);
	assert_true(st.total.xmsgs_recv >= (uint64_t)LANE_SENDERS * (LANE_SENDERS - 1) * l.per);
	printf("  %u messages, %llu back-pressured\n", LANE_SENDERS * (LANE_SENDERS - 1) * l.per,
	       (unsigned long long)st.total.ring_msgs_backpressure);
	/* Every message of every pair arrived exactly once, on its receiver. */
	for (uint32_t src = 0; src < LANE_SENDERS; src++)
		for (uint32_t dst = 0; dst < LANE_SENDERS; dst++)
			for (uint32_t q = 0; q < l.per; q++)
				if (src != dst &&
				    atomic_load(&l.seen[((size_t)src * LANE_SENDERS + dst) * l.per + q]) != 1)
					fail_msg("message %u->%u #%u delivered %u times", src, dst, q,
						 atomic_load(&l.seen[((size_t)src * LANE_SENDERS + dst) * l.per + q]));
	assert_int_equal(atomic_load(&l.bad_exec), 0);
	t_destroy(rt);
	for (uint32_t i = 0; i < LANE_SENDERS; i++)
		free(s[i].msgs);
	free(l.seen);
}

/* ---- a woken task goes home --------------------------------------------------- */

struct home {
	cbcmn_chan *c;
	_Atomic uint32_t stop;
	_Atomic uint32_t woke_on;
	_Atomic uint32_t ready;
	_Atomic uint32_t busy;
	_Atomic uint32_t company; /* executor 0 has other work too */
};

static int64_t home_busy(cbcmn_cx *cx, void *arg)
{
	struct home *h = arg;
	atomic_store(&h->busy, 1);
	while (!atomic_load(&h->stop))
		cbcmn_yield(cx); /* keeps executor 1 awake */
	return 0;
}

/* Executor 0's other work: a sender alone on its executor brings the
 * task it wakes there, whatever its home runs (sched.c,
 * cbcmn__exec_alone(); test_liveness's pair beside a hog).  Home is
 * where a task goes while both executors have work. */
static int64_t home_company(cbcmn_cx *cx, void *arg)
{
	struct home *h = arg;
	atomic_store(&h->company, 1);
	while (!atomic_load(&h->stop))
		cbcmn_yield(cx);
	return 0;
}

static int64_t home_waiter(cbcmn_cx *cx, void *arg)
{
	struct home *h = arg;
	long v;
	atomic_store(&h->ready, 1);
	int rc = cbcmn_chan_recv(cx, h->c, &v);
	atomic_store(&h->woke_on, cbcmn_cx_executor(cx) + 1);
	return rc;
}

static int64_t home_sender(cbcmn_cx *cx, void *arg)
{
	struct home *h = arg;
	long v = 1;
	while (!atomic_load(&h->ready) || !atomic_load(&h->busy) || !atomic_load(&h->company))
		cbcmn_yield(cx);
	for (int i = 0; i < 1000; i++)
		cbcmn_yield(cx); /* let the waiter block */
	int rc = cbcmn_chan_send(cx, h->c, &v);
	while (!atomic_load(&h->woke_on))
		cbcmn_yield(cx);
	atomic_store(&h->stop, 1);
	return rc;
}

static int64_t home_main(cbcmn_cx *cx, void *arg)
{
	struct home *h = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -1;
	/* Hold executor 0 until the waiter runs: then it can only have
	 * started on executor 1, its owner from then on. */
	cbcmn_nursery_spawn_stealable_on(cx, n, 1, home_waiter, h, NULL);
	while (!atomic_load(&h->ready))
		;
	cbcmn_nursery_spawn_pinned(cx, n, 1, home_busy, h, NULL);
	cbcmn_nursery_spawn_pinned(cx, n, 0, home_company, h, NULL);
	cbcmn_nursery_spawn_pinned(cx, n, 0, home_sender, h, NULL);
	return cbcmn_nursery_await_all(cx, n);
}

/* A task on executor 1, woken by a send from executor 0 (both running
 * other tasks), resumes on 1. */
static void test_woken_task_goes_home(void **state)
{
	(void)state;
	cbcmn_runtime *rt = shard_rt(2, 0, 0);
	struct home h = {0};
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(long), &h.c), 0);
	assert_int_equal(t_run_pinned(rt, 0, home_main, &h), 0);
	assert_int_equal(atomic_load(&h.woke_on), 2);
	cbcmn_stats s;
	cbcmn_stats_snapshot(rt, &s, NULL, 0);
	assert_true(s.total.handoffs >= 1);
	cbcmn_chan_destroy(h.c);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_setup_flags_reported),
		T_WATCHED_TEST(test_bad_config),
		T_WATCHED_TEST(test_pinned_never_migrates),
		T_WATCHED_TEST(test_placement_bad_input),
		T_WATCHED_TEST(test_pinned_from_outside),
		T_WATCHED_TEST(test_stealable_on_and_round_robin),
		T_WATCHED_TEST(test_doorbell_msg_ring),
		T_WATCHED_TEST(test_doorbell_eventfd),
		T_WATCHED_TEST(test_doorbells_coalesce),
		T_WATCHED_TEST(test_lanes_exactly_once),
		T_WATCHED_TEST(test_woken_task_goes_home),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
