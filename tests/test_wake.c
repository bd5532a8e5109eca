/* test_wake: parked executors are woken for new work, one at a time (no
 * thundering herd), and no wake-up is ever lost (seed 002). */
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>


#define WAKE_TEST(f) T_WATCHED_TEST(f)

#define MS 1000000ull
#define SLOW (T_ASAN || T_TSAN)
/* Far beyond any wake latency here (50-85 us, ms under TSan, more on a
 * loaded machine): an await that takes this long was never woken. */
#define STALL_NS T_STALL_NS

static void spin_us(uint64_t us)
{
	uint64_t end = t_now_ns() + us * 1000;
	while (t_now_ns() < end)
		;
}

static void sleep_us(uint64_t us)
{
	struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

/* splitmix64: per-thread, so no shared state to race on. */
static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

#define mk_rt t_runtime_flags

/* ---- (a) an idle runtime wakes exactly one executor per spawn ----------- */

#define IDLE_WORKERS 4
/* A timed park lasts at most ~1 ms, then an executor sleeps until notified:
 * no counter moving for this long means every executor is in that sleep. */
#define QUIET_NS (50 * MS)

/* Waits until the runtime is idle: nothing queued, nothing live, every
 * executor has parked and no executor's counters moved for QUIET_NS. */
static bool wait_all_parked(cbcmn_runtime *rt, cbcmn_executor_stats *per, uint64_t timeout_ns)
{
	cbcmn_executor_stats last[IDLE_WORKERS];
	uint64_t now = t_now_ns(), deadline = now + timeout_ns, since = now;
	memset(last, 0, sizeof(last));
	while ((now = t_now_ns()) < deadline) {
		cbcmn_stats s;
		assert_int_equal(cbcmn_stats_snapshot(rt, &s, per, IDLE_WORKERS), 0);
		bool settled = s.total.queue_depth == 0 && s.tasks_live == 0 &&
			       memcmp(per, last, sizeof(last)) == 0;
		for (uint32_t i = 0; i < IDLE_WORKERS; i++)
			settled = settled && per[i].parks > 0;
		memcpy(last, per, sizeof(last));
		if (!settled)
			since = now;
		else if (now - since >= QUIET_NS)
			return true;
		sleep_us(1000);
	}
	return false;
}

static int64_t where_am_i(cbcmn_cx *cx, void *arg)
{
	*(uint32_t *)arg = cbcmn_cx_executor(cx);
	return 0;
}

struct one_spawn {
	cbcmn_runtime *rt;
	uint32_t ran_on;
	int open_rc, spawn_rc;
	int64_t await_rc;
};

static void spawn_one(void *arg)
{
	struct one_spawn *o = arg;
	cbcmn_nursery *n;
	o->ran_on = UINT32_MAX;
	o->open_rc = cbcmn_nursery_open(o->rt, NULL, &n);
	if (o->open_rc)
		return;
	o->spawn_rc = cbcmn_nursery_spawn(NULL, n, where_am_i, &o->ran_on, NULL);
	o->await_rc = cbcmn_nursery_await_all(NULL, n);
}

static void test_idle_spawn_wakes_exactly_one(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(IDLE_WORKERS, 0);
	cbcmn_executor_stats before[IDLE_WORKERS], after[IDLE_WORKERS];
	uint64_t timeout = STALL_NS;
	/* On the heap: a spawn nobody wakes for leaves its thread behind. */
	struct one_spawn *o = calloc(1, sizeof(*o));
	assert_non_null(o);
	o->rt = rt;
	for (int round = 0; round < 5; round++) {
		if (!wait_all_parked(rt, before, timeout))
			fail_msg("round %d: the executors never all parked", round);
		if (!run_bounded(spawn_one, o, T_STALL_S))
			fail_msg("round %d: a spawn into an idle runtime never ran: lost wake-up", round);
		assert_int_equal(o->open_rc, 0);
		assert_int_equal(o->spawn_rc, 0);
		assert_int_equal(o->await_rc, 0);
		/* A herd's extra wakes may land after the await: let them. */
		if (!wait_all_parked(rt, after, timeout))
			fail_msg("round %d: the executors never parked again", round);
		uint32_t woken = 0, who = UINT32_MAX;
		uint64_t wakes = 0;
		for (uint32_t i = 0; i < IDLE_WORKERS; i++) {
			uint64_t d = after[i].wakes - before[i].wakes;
			wakes += d;
			if (d) {
				woken++;
				who = i;
			}
		}
		if (wakes != 1 || woken != 1)
			fail_msg("round %d: one spawn into an idle runtime caused %llu wakes on %u "
				 "executors (want exactly 1)",
				 round, (unsigned long long)wakes, woken);
		/* Everyone else slept through it: the woken one ran the task. */
		assert_int_equal(o->ran_on, who);
	}
	free(o);
	t_destroy(rt);
}

/* ---- (b) outside spawns racing executors that park ---------------------- */

#define DRIVERS 2

struct driver {
	cbcmn_runtime *rt;
	pthread_t th;
	uint64_t seed;
	_Atomic int stop;
	_Atomic uint64_t busy_since; /* inside spawn..await since (ns), or 0 */
	_Atomic uint64_t iters;
	_Atomic uint64_t spawned, ran;
	_Atomic int bad_line;
};

static int64_t leaf(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	atomic_fetch_add_explicit(&((struct driver *)arg)->ran, 1, memory_order_relaxed);
	return 0;
}

/* Variants that block inside the runtime too: a yield, a nested await. */
static int64_t leaf_yield(cbcmn_cx *cx, void *arg)
{
	TASK_CHECK(cbcmn_yield(cx) == 0);
	return leaf(cx, arg);
}

static int64_t leaf_nested(cbcmn_cx *cx, void *arg)
{
	struct driver *d = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	atomic_fetch_add_explicit(&d->spawned, 1, memory_order_relaxed);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, leaf, d, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	return leaf(cx, arg);
}

static void *driver_main(void *p)
{
	struct driver *d = p;
	static const cbcmn_task_fn kinds[] = {leaf, leaf, leaf_yield, leaf_nested};
	while (!atomic_load(&d->stop)) {
		atomic_store(&d->busy_since, t_now_ns());
		cbcmn_nursery *n;
		if (cbcmn_nursery_open(d->rt, NULL, &n) != 0) {
			atomic_store(&d->bad_line, __LINE__);
			break;
		}
		uint32_t k = 1 + (uint32_t)(rnd(&d->seed) % 3);
		for (uint32_t i = 0; i < k; i++) {
			atomic_fetch_add_explicit(&d->spawned, 1, memory_order_relaxed);
			if (cbcmn_nursery_spawn(NULL, n, kinds[rnd(&d->seed) % 4], d, NULL) != 0)
				atomic_store(&d->bad_line, __LINE__);
		}
		if (cbcmn_nursery_await_all(NULL, n) != 0)
			atomic_store(&d->bad_line, __LINE__);
		atomic_store(&d->busy_since, 0);
		atomic_fetch_add(&d->iters, 1);
		/* Mostly 0-300 us: executors run out of spinning and park with
		 * a time-out meanwhile.  One time in eight 0.5-2.5 ms: they go
		 * on into the sleep without a time-out, where a lost wake-up is
		 * not healed by the clock, and the spawn races that step. */
		uint64_t r = rnd(&d->seed);
		sleep_us(r % 8 ? r % 301 : 500 + r % 2001);
	}
	return NULL;
}

static void test_no_lost_wakeup_outside_spawns(void **state)
{
	(void)state;
	cbcmn_runtime *rt = mk_rt(3, 0);
	struct driver *d = calloc(DRIVERS, sizeof(*d));
	assert_non_null(d);
	for (int i = 0; i < DRIVERS; i++) {
		d[i].rt = rt;
		d[i].seed = 0x1234 + (uint64_t)i;
		assert_int_equal(pthread_create(&d[i].th, NULL, driver_main, &d[i]), 0);
	}
	/* For a while, and until each driver has done enough rounds to mean
	 * something: a loaded machine does fewer in the same time. */
	uint64_t end = t_now_ns() + (SLOW ? 1500 : 3000) * MS;
	for (bool enough = false; !enough || t_now_ns() < end;) {
		sleep_us(5000);
		enough = true;
		for (int i = 0; i < DRIVERS; i++) {
			uint64_t b = atomic_load(&d[i].busy_since); /* before the clock */
			if (b && t_now_ns() - b > STALL_NS)
				/* The driver stays blocked; the process ends with the suite. */
				fail_msg("lost wake-up: driver %d waited > %u s for its tasks "
					 "(iteration %llu)",
					 i, T_STALL_S, (unsigned long long)atomic_load(&d[i].iters));
			enough = enough && atomic_load(&d[i].iters) > 100;
		}
	}
	for (int i = 0; i < DRIVERS; i++)
		atomic_store(&d[i].stop, 1);
	for (int i = 0; i < DRIVERS; i++) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += T_STALL_S;
		if (pthread_timedjoin_np(d[i].th, NULL, &ts) != 0)
			fail_msg("lost wake-up: driver %d never finished its last await", i);
	}
	ASSERT_TASK_CHECKS();
	cbcmn_stats s;
	assert_int_equal(cbcmn_stats_snapshot(rt, &s, NULL, 0), 0);
	for (int i = 0; i < DRIVERS; i++) {
		assert_int_equal(atomic_load(&d[i].bad_line), 0);
		assert_int_equal(atomic_load(&d[i].ran), atomic_load(&d[i].spawned));
		/* It ran long enough to mean something (the loop saw to it). */
		assert_true(atomic_load(&d[i].iters) > 100);
	}
	assert_int_equal(s.tasks_live, 0);
	/* The race this test is about took place: executors parked and were
	 * woken by spawns. */
	assert_true(s.total.parks > 0);
	assert_true(s.total.wakes > 0);
	free(d);
	t_destroy(rt);
}

/* ---- (c) ping-pong through join handles ---------------------------------- */

#define PP_ROUNDS (SLOW ? 300u : 3000u)

struct pingpong {
	_Atomic(cbcmn_task *) box[2];  /* box[s]: the handle player s joins next */
	_Atomic uint32_t start_exec[2]; /* where each player started */
	_Atomic uint32_t cross;         /* joins of a ball that ran elsewhere */
	_Atomic uint32_t blocked;       /* joins begun before the ball ended */
	_Atomic uint32_t rounds_done[2];
};

struct ball {
	int64_t value;
	_Atomic uint32_t joining; /* its joiner is about to join */
	_Atomic uint32_t exec;
	_Atomic uint32_t done;
};

struct player {
	struct pingpong *pp;
	struct ball *balls; /* the ones this player serves, one per round */
	struct ball *peer;  /* the ones it receives */
	int side;
};

static int64_t ball(cbcmn_cx *cx, void *arg)
{
	struct ball *b = arg;
	/* Not done before the joiner has started to join: the join waits
	 * and must be woken by our end. */
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (!atomic_load(&b->joining)) {
		if (t_now_ns() > deadline)
			return -ETIMEDOUT;
		cbcmn_yield(cx);
	}
	atomic_store(&b->exec, cbcmn_cx_executor(cx));
	atomic_store(&b->done, 1);
	return b->value;
}

/* Waits (yielding) for the other player's next ball, then joins it. */
static bool receive(cbcmn_cx *cx, struct pingpong *pp, int side, int64_t want, struct ball *peer)
{
	uint64_t deadline = t_now_ns() + STALL_NS;
	cbcmn_task *h;
	while (!(h = atomic_exchange(&pp->box[side], NULL))) {
		if (t_now_ns() > deadline)
			return false;
		cbcmn_yield(cx);
	}
	uint32_t here = cbcmn_cx_executor(cx);
	if (!atomic_load(&peer->done))
		atomic_fetch_add(&pp->blocked, 1);
	atomic_store(&peer->joining, 1);
	int64_t r = -1;
	TASK_CHECK(cbcmn_task_join(cx, h, &r) == 0);
	TASK_CHECK(r == want);
	if (atomic_load(&peer->exec) != here)
		atomic_fetch_add(&pp->cross, 1);
	return r == want;
}

static bool serve(cbcmn_cx *cx, cbcmn_nursery *n, struct pingpong *pp, int side, struct ball *b)
{
	cbcmn_task *h;
	if (cbcmn_nursery_spawn(cx, n, ball, b, &h) != 0)
		return false;
	atomic_store(&pp->box[!side], h);
	return true;
}

static int64_t player(cbcmn_cx *cx, void *arg)
{
	struct player *me = arg;
	struct pingpong *pp = me->pp;
	struct ball *peer = me->peer;
	int s = me->side;

	/* Spin without yielding until both players run: then they must be on
	 * different executors. */
	atomic_store(&pp->start_exec[s], cbcmn_cx_executor(cx));
	uint64_t deadline = t_now_ns() + STALL_NS;
	while (atomic_load(&pp->start_exec[!s]) == UINT32_MAX)
		if (t_now_ns() > deadline)
			return -ETIMEDOUT;

	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	int64_t rc = 0;
	for (uint32_t r = 0; r < PP_ROUNDS && rc == 0; r++) {
		me->balls[r] = (struct ball){.value = 2 * r + (uint32_t)s};
		if (s == 0) {
			if (!serve(cx, n, pp, s, &me->balls[r]) ||
			    !receive(cx, pp, s, 2 * r + 1, &peer[r]))
				rc = -EPROTO;
		} else {
			if (!receive(cx, pp, s, 2 * r, &peer[r]) ||
			    !serve(cx, n, pp, s, &me->balls[r]))
				rc = -EPROTO;
		}
		if (rc == 0)
			atomic_store(&pp->rounds_done[s], r + 1);
	}
	int64_t ar = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : ar;
}

static int64_t pingpong_root(cbcmn_cx *cx, void *arg)
{
	struct player *pl = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	for (int s = 0; s < 2; s++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, player, &pl[s], NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

struct pp_run {
	uint32_t flags;
	struct pingpong pp;
	struct player pl[2];
	int64_t result;
	int run_rc;
};

static void pingpong_body(void *arg)
{
	struct pp_run *x = arg;
	cbcmn_runtime *rt = mk_rt(2, x->flags);
	x->run_rc = cbcmn_runtime_run(rt, pingpong_root, x->pl, &x->result);
	TASK_CHECK(cbcmn_runtime_destroy(rt) == 0);
}

static void pingpong(uint32_t flags)
{
	struct pp_run *x = calloc(1, sizeof(*x));
	assert_non_null(x);
	x->flags = flags;
	for (int s = 0; s < 2; s++) {
		atomic_init(&x->pp.start_exec[s], UINT32_MAX);
		x->pl[s] = (struct player){.pp = &x->pp, .side = s,
					   .balls = calloc(PP_ROUNDS, sizeof(struct ball))};
		assert_non_null(x->pl[s].balls);
	}
	x->pl[0].peer = x->pl[1].balls;
	x->pl[1].peer = x->pl[0].balls;
	if (!run_bounded(pingpong_body, x, T_STALL_S))
		fail_msg("ping-pong stuck after %u/%u rounds: a joiner was never woken",
			 atomic_load(&x->pp.rounds_done[0]), PP_ROUNDS);
	ASSERT_TASK_CHECKS();
	assert_int_equal(x->run_rc, 0);
	assert_int_equal(x->result, 0);
	assert_int_equal(atomic_load(&x->pp.rounds_done[0]), PP_ROUNDS);
	assert_int_equal(atomic_load(&x->pp.rounds_done[1]), PP_ROUNDS);
	assert_true(x->pp.start_exec[0] != x->pp.start_exec[1]);
	/* Every join began while its ball still ran (the ball waits for it),
	 * so each was a wait that only the ball's end could finish. */
	assert_int_equal(atomic_load(&x->pp.blocked), 2 * PP_ROUNDS);
	/* Timing decides how often a ball ends on the other executor: shown,
	 * not asserted. */
	print_message("      ping-pong (flags %u): %u rounds, %u balls ended on the other executor\n",
		      flags, PP_ROUNDS, atomic_load(&x->pp.cross));
	free(x->pl[0].balls);
	free(x->pl[1].balls);
	free(x);
}

static void test_pingpong_join_across_executors(void **state)
{
	(void)state;
	pingpong(0);
	pingpong(CBCMN_CONFIG_NO_INLINE);
}

/* ---- (d) bursts of spawns from inside tasks while others park ----------- */

#define BURSTERS 2

struct bursts {
	_Atomic int stop;
	_Atomic uint64_t spawned, ran;
	_Atomic uint64_t helped; /* leaves run away from their burster's executor */
	_Atomic uint64_t progress[BURSTERS];
	_Atomic uint64_t progress_ns[BURSTERS];
};

struct burster {
	struct bursts *b;
	int idx;
	uint64_t seed;
};

struct leaf_arg {
	struct bursts *b;
	uint32_t from;
};

static int64_t burst_leaf(cbcmn_cx *cx, void *arg)
{
	struct leaf_arg *a = arg;
	spin_us(20);
	if (cbcmn_cx_executor(cx) != a->from)
		atomic_fetch_add_explicit(&a->b->helped, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&a->b->ran, 1, memory_order_relaxed);
	return 0;
}

static int64_t burster(cbcmn_cx *cx, void *arg)
{
	struct burster *me = arg;
	struct bursts *b = me->b;
	struct leaf_arg la[32];
	while (!atomic_load(&b->stop)) {
		/* Hold our executor without yielding for 0-2 ms: the others run
		 * dry and go through their back-off into parking meanwhile. */
		spin_us(rnd(&me->seed) % 2001);
		cbcmn_nursery *n;
		if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
			return -1;
		uint32_t k = 1 + (uint32_t)(rnd(&me->seed) % 32);
		for (uint32_t i = 0; i < k; i++) {
			la[i] = (struct leaf_arg){.b = b, .from = cbcmn_cx_executor(cx)};
			atomic_fetch_add_explicit(&b->spawned, 1, memory_order_relaxed);
			TASK_CHECK(cbcmn_nursery_spawn(cx, n, burst_leaf, &la[i], NULL) == 0);
		}
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
		atomic_fetch_add(&b->progress[me->idx], 1);
		atomic_store(&b->progress_ns[me->idx], t_now_ns());
	}
	return 0;
}

static int64_t bursts_root(cbcmn_cx *cx, void *arg)
{
	struct burster *bs = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0)
		return -1;
	for (int i = 0; i < BURSTERS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, burster, &bs[i], NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

struct bursts_run {
	cbcmn_runtime *rt;
	struct burster bs[BURSTERS];
	int64_t result;
	int run_rc;
	_Atomic int finished;
};

static void *bursts_main(void *p)
{
	struct bursts_run *x = p;
	x->run_rc = cbcmn_runtime_run(x->rt, bursts_root, x->bs, &x->result);
	atomic_store(&x->finished, 1);
	return NULL;
}

static void test_spawn_bursts_while_parking(void **state)
{
	(void)state;
	/* On the heap: if the test fails the tasks go on using them. */
	struct bursts *bp = calloc(1, sizeof(*bp));
	struct bursts_run *xp = calloc(1, sizeof(*xp));
	assert_true(bp && xp);
	struct bursts_run *x = xp;
	struct bursts *b = bp;
	x->rt = mk_rt(4, 0);
	for (int i = 0; i < BURSTERS; i++) {
		x->bs[i] = (struct burster){.b = b, .idx = i, .seed = 77 + (uint64_t)i};
		atomic_store(&b->progress_ns[i], t_now_ns());
	}
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, bursts_main, x), 0);
	/* For a while, and until each burster has done enough bursts to
	 * mean something: a loaded machine does fewer in the same time. */
	uint64_t end = t_now_ns() + (SLOW ? 1500 : 3000) * MS;
	for (bool enough = false; (!enough || t_now_ns() < end) && !atomic_load(&x->finished);) {
		sleep_us(5000);
		enough = true;
		for (int i = 0; i < BURSTERS; i++) {
			/* The stamp first, then the clock: the other way round a
			 * fresh stamp could be later than "now". */
			uint64_t last = atomic_load(&b->progress_ns[i]);
			if (t_now_ns() - last > STALL_NS)
				fail_msg("burster %d made no progress for %u s (after %llu bursts)", i,
					 T_STALL_S, (unsigned long long)atomic_load(&b->progress[i]));
			enough = enough && atomic_load(&b->progress[i]) > 20;
		}
	}
	atomic_store(&b->stop, 1);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += T_STALL_S;
	if (pthread_timedjoin_np(th, NULL, &ts) != 0)
		fail_msg("the bursters never finished");
	ASSERT_TASK_CHECKS();
	assert_int_equal(x->run_rc, 0);
	assert_int_equal(x->result, 0);
	assert_int_equal(atomic_load(&b->ran), atomic_load(&b->spawned));
	for (int i = 0; i < BURSTERS; i++)
		assert_true(atomic_load(&b->progress[i]) > 20);
	cbcmn_stats s;
	assert_int_equal(cbcmn_stats_snapshot(x->rt, &s, NULL, 0), 0);
	assert_int_equal(s.tasks_live, 0);
	/* Parked executors were woken by spawns from inside, and helped. */
	assert_true(s.total.parks > 0);
	assert_true(s.total.wakes > 0);
	assert_true(atomic_load(&b->helped) > 0);
	t_destroy(x->rt);
	free(xp);
	free(bp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		WAKE_TEST(test_idle_spawn_wakes_exactly_one),
		WAKE_TEST(test_no_lost_wakeup_outside_spawns),
		WAKE_TEST(test_spawn_bursts_while_parking),
		WAKE_TEST(test_pingpong_join_across_executors),
	};
	return cmocka_run_group_tests_name("wake", tests, NULL, NULL);
}
