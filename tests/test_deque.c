/* test_deque: Chase-Lev deque semantics, single-threaded and under thieves. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "helpers.h"

#include "arch.h"
#include "deque.h"

/* Items are never 0 or 1: those are CBCMN__DEQUE_EMPTY and _ABORT. */
#define ITEM(i) ((void *)(uintptr_t)((i) + 2))
#define INDEX(x) ((uintptr_t)(x) - 2)

static int64_t capacity(struct cbcmn__deque *d)
{
	return atomic_load_explicit(&d->buf, memory_order_relaxed)->mask + 1;
}

/* ---- single-threaded semantics ------------------------------------------ */

static void test_empty(void **state)
{
	(void)state;
	struct cbcmn__deque d;
	assert_int_equal(cbcmn__deque_init(&d, 8), 0);
	assert_null(cbcmn__deque_pop(&d));
	assert_ptr_equal(cbcmn__deque_steal(&d), CBCMN__DEQUE_EMPTY);
	assert_int_equal(cbcmn__deque_len(&d), 0);

	/* A pop on an empty deque must leave it usable, not off by one. */
	assert_null(cbcmn__deque_pop(&d));
	assert_null(cbcmn__deque_pop(&d));
	assert_int_equal(cbcmn__deque_len(&d), 0);
	assert_int_equal(cbcmn__deque_push(&d, ITEM(7)), 0);
	assert_int_equal(cbcmn__deque_len(&d), 1);
	assert_ptr_equal(cbcmn__deque_pop(&d), ITEM(7));
	assert_null(cbcmn__deque_pop(&d));
	assert_ptr_equal(cbcmn__deque_steal(&d), CBCMN__DEQUE_EMPTY);

	assert_int_equal(cbcmn__deque_push(&d, ITEM(8)), 0);
	assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(8));
	assert_ptr_equal(cbcmn__deque_steal(&d), CBCMN__DEQUE_EMPTY);
	assert_null(cbcmn__deque_pop(&d));
	assert_int_equal(cbcmn__deque_len(&d), 0);
	cbcmn__deque_destroy(&d);
}

static void test_capacity_rounding(void **state)
{
	(void)state;
	static const struct { uint32_t ask; int64_t got; } c[] = {
		{0, 2}, {1, 2}, {2, 2}, {3, 4}, {5, 8}, {64, 64}, {65, 128},
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		struct cbcmn__deque d;
		assert_int_equal(cbcmn__deque_init(&d, c[i].ask), 0);
		assert_int_equal(capacity(&d), c[i].got);
		cbcmn__deque_destroy(&d);
	}
}

static void test_pop_lifo(void **state)
{
	(void)state;
	struct cbcmn__deque d;
	assert_int_equal(cbcmn__deque_init(&d, 16), 0);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(cbcmn__deque_push(&d, ITEM(i)), 0);
		assert_int_equal(cbcmn__deque_len(&d), i + 1);
	}
	assert_int_equal(capacity(&d), 16);
	for (int i = 15; i >= 0; i--) {
		assert_ptr_equal(cbcmn__deque_pop(&d), ITEM(i));
		assert_int_equal(cbcmn__deque_len(&d), i);
	}
	assert_null(cbcmn__deque_pop(&d));
	cbcmn__deque_destroy(&d);
}

static void test_steal_fifo(void **state)
{
	(void)state;
	struct cbcmn__deque d;
	assert_int_equal(cbcmn__deque_init(&d, 16), 0);
	for (int i = 0; i < 16; i++)
		assert_int_equal(cbcmn__deque_push(&d, ITEM(i)), 0);
	for (int i = 0; i < 16; i++) {
		assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(i));
		assert_int_equal(cbcmn__deque_len(&d), 15 - i);
	}
	assert_ptr_equal(cbcmn__deque_steal(&d), CBCMN__DEQUE_EMPTY);
	assert_null(cbcmn__deque_pop(&d));
	cbcmn__deque_destroy(&d);
}

/* Both ends at once: steals take the oldest, pops the newest, and they meet
 * in the middle without either taking an item twice. */
static void test_both_ends(void **state)
{
	(void)state;
	struct cbcmn__deque d;
	assert_int_equal(cbcmn__deque_init(&d, 8), 0);
	for (int i = 0; i < 7; i++)
		assert_int_equal(cbcmn__deque_push(&d, ITEM(i)), 0);
	assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(0));
	assert_ptr_equal(cbcmn__deque_pop(&d), ITEM(6));
	assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(1));
	assert_ptr_equal(cbcmn__deque_pop(&d), ITEM(5));
	assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(2));
	assert_ptr_equal(cbcmn__deque_pop(&d), ITEM(4));
	assert_int_equal(cbcmn__deque_len(&d), 1);
	assert_ptr_equal(cbcmn__deque_pop(&d), ITEM(3));
	assert_null(cbcmn__deque_pop(&d));
	assert_ptr_equal(cbcmn__deque_steal(&d), CBCMN__DEQUE_EMPTY);
	assert_int_equal(cbcmn__deque_len(&d), 0);

	/* The indices keep growing after the meeting; the ring wraps. */
	for (int round = 0; round < 100; round++) {
		assert_int_equal(cbcmn__deque_push(&d, ITEM(round)), 0);
		assert_int_equal(cbcmn__deque_push(&d, ITEM(round + 1000)), 0);
		assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(round));
		assert_ptr_equal(cbcmn__deque_pop(&d), ITEM(round + 1000));
	}
	assert_int_equal(capacity(&d), 8);
	cbcmn__deque_destroy(&d);
}

/* push() looks at top only when the top it saw last says the array is
 * full (deque.c): room that thieves made since must be found then, not
 * taken for a full array (a needless grow), and the slots they emptied
 * are reused in order. */
static void test_push_finds_room_thieves_made(void **state)
{
	(void)state;
	struct cbcmn__deque d;
	assert_int_equal(cbcmn__deque_init(&d, 2), 0);
	int next = 0, oldest = 0;
	for (int round = 0; round < 100; round++) {
		/* Fill by pushes only, empty by steals only: the owner never
		 * pops, so only push() can learn that top moved. */
		for (int i = 0; i < 2; i++)
			assert_int_equal(cbcmn__deque_push(&d, ITEM(next++)), 0);
		assert_int_equal(capacity(&d), 2);
		for (int i = 0; i < 2; i++)
			assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(oldest++));
	}
	/* Half emptied by a thief: one push fits, the next must grow and
	 * keep both ends right. */
	for (int i = 0; i < 2; i++)
		assert_int_equal(cbcmn__deque_push(&d, ITEM(next++)), 0);
	assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(oldest++));
	assert_int_equal(cbcmn__deque_push(&d, ITEM(next++)), 0);
	assert_int_equal(capacity(&d), 2);
	assert_int_equal(cbcmn__deque_push(&d, ITEM(next++)), 0);
	assert_int_equal(capacity(&d), 4);
	assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(oldest++));
	for (int newest = next - 1; newest >= oldest; newest--)
		assert_ptr_equal(cbcmn__deque_pop(&d), ITEM(newest));
	assert_null(cbcmn__deque_pop(&d));
	cbcmn__deque_destroy(&d);
}

static void test_growth_keeps_order(void **state)
{
	(void)state;
	enum { N = 10000 };
	struct cbcmn__deque d;
	assert_int_equal(cbcmn__deque_init(&d, 2), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(cbcmn__deque_push(&d, ITEM(i)), 0);
	assert_int_equal(cbcmn__deque_len(&d), N);
	assert_true(capacity(&d) >= N);
	/* Oldest half by stealing, in push order; the rest by popping, newest
	 * first: every item survived every copy, in place. */
	for (int i = 0; i < N / 2; i++)
		assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(i));
	for (int i = N - 1; i >= N / 2; i--)
		assert_ptr_equal(cbcmn__deque_pop(&d), ITEM(i));
	assert_null(cbcmn__deque_pop(&d));
	assert_ptr_equal(cbcmn__deque_steal(&d), CBCMN__DEQUE_EMPTY);
	cbcmn__deque_destroy(&d);
}

/* Grow while the live range wraps around the end of the array: the copy
 * must follow the indices, not the slot positions. */
static void test_growth_wrapped(void **state)
{
	(void)state;
	struct cbcmn__deque d;
	assert_int_equal(cbcmn__deque_init(&d, 4), 0);
	int next = 0, oldest = 0;
	for (int round = 0; round < 12; round++) {
		int64_t cap = capacity(&d);
		/* Move top to an odd place in the ring, then overfill by one. */
		for (int i = 0; i < 3; i++)
			assert_int_equal(cbcmn__deque_push(&d, ITEM(next++)), 0);
		for (int i = 0; i < 3; i++)
			assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(oldest++));
		assert_int_equal(cbcmn__deque_len(&d), 0);
		for (int64_t i = 0; i <= cap; i++)
			assert_int_equal(cbcmn__deque_push(&d, ITEM(next++)), 0);
		assert_int_equal(capacity(&d), 2 * cap);
		assert_int_equal(cbcmn__deque_len(&d), cap + 1);
		/* Older half by steal, newer half by pop: both ends of the
		 * copied range must hold the right items. */
		for (int64_t i = 0; i < (cap + 1) / 2; i++)
			assert_ptr_equal(cbcmn__deque_steal(&d), ITEM(oldest++));
		for (int newest = next - 1; newest >= oldest; newest--)
			assert_ptr_equal(cbcmn__deque_pop(&d), ITEM(newest));
		assert_int_equal(cbcmn__deque_len(&d), 0);
		oldest = next;
	}
	assert_int_equal(oldest, next);
	assert_ptr_equal(cbcmn__deque_steal(&d), CBCMN__DEQUE_EMPTY);
	cbcmn__deque_destroy(&d);
}

/* ---- stress: one owner, three thieves ------------------------------------ */

#define THIEVES 3

enum stress_mode {
	MIXED,  /* push all, pop about a third, thieves drain the rest */
	DRAIN,  /* push 1-2, pop to empty: the last-item race, over and over */
	GROWTH, /* capacity 2, bursts that grow the array under the thieves */
	WRAP,   /* capacity 4, at most 4 queued, only thieves take: slots reused */
};

/* WRAP's owner stops pushing after this long, whatever n says. */
#define WRAP_NS (2ull * 1000000000ull)

struct stress {
	struct cbcmn__deque d;
	enum stress_mode mode;
	uint32_t n;
	_Atomic uint32_t *seen;   /* per item: times taken, must end at 1 */
	_Atomic uint32_t bad;     /* values that were never pushed */
	_Atomic uint64_t stolen, aborts, empties;
	_Atomic bool stop;
	_Atomic uint32_t thieves_ready;
	uint64_t popped, pop_lost; /* owner only */
};

static void take(struct stress *st, void *x)
{
	uintptr_t i = INDEX(x);
	if (x == CBCMN__DEQUE_EMPTY || x == CBCMN__DEQUE_ABORT || i >= st->n) {
		atomic_fetch_add_explicit(&st->bad, 1, memory_order_relaxed);
		return;
	}
	atomic_fetch_add_explicit(&st->seen[i], 1, memory_order_relaxed);
}

static void *thief(void *arg)
{
	struct stress *st = arg;
	uint64_t stolen = 0, aborts = 0, empties = 0;
	atomic_fetch_add_explicit(&st->thieves_ready, 1, memory_order_relaxed);
	while (!atomic_load_explicit(&st->stop, memory_order_acquire)) {
		void *x = cbcmn__deque_steal(&st->d);
		if (x == CBCMN__DEQUE_EMPTY) {
			/* Two CPUs, four threads: give the owner a turn now and
			 * then, but mostly spin so steals overlap its pops. */
			if ((++empties & 255) == 0)
				sched_yield();
			continue;
		}
		if (x == CBCMN__DEQUE_ABORT) {
			aborts++;
			continue;
		}
		take(st, x);
		stolen++;
		/* Slower thieves than the owner, or the array never fills:
		 * steals still overlap every grow, but growth is certain. */
		if (st->mode == GROWTH)
			for (int k = 0; k < 32; k++)
				cbcmn__cpu_relax();
	}
	atomic_fetch_add_explicit(&st->stolen, stolen, memory_order_relaxed);
	atomic_fetch_add_explicit(&st->aborts, aborts, memory_order_relaxed);
	atomic_fetch_add_explicit(&st->empties, empties, memory_order_relaxed);
	return NULL;
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static void owner_pop(struct stress *st, bool expect_item)
{
	void *x = cbcmn__deque_pop(&st->d);
	if (x) {
		take(st, x);
		st->popped++;
	} else if (expect_item) {
		st->pop_lost++; /* a thief won the race for the last item */
	}
}

static void owner_push(struct stress *st, uint32_t i)
{
	/* Only -ENOMEM can fail a push; count it as a lost item. */
	if (cbcmn__deque_push(&st->d, ITEM(i)) != 0)
		atomic_fetch_add_explicit(&st->bad, 1, memory_order_relaxed);
}

/* Returns how many items it pushed: n, or fewer if WRAP ran out of time. */
static uint32_t owner(struct stress *st)
{
	uint64_t rng = 0x9e3779b97f4a7c15ull ^ st->mode;
	uint32_t i = 0;
	switch (st->mode) {
	case MIXED:
		for (; i < st->n; i++) {
			owner_push(st, i);
			if (xorshift(&rng) % 3 == 0)
				owner_pop(st, false);
		}
		break;
	case DRAIN:
		while (i < st->n) {
			uint32_t k = 1 + (uint32_t)(xorshift(&rng) & 1);
			for (uint32_t j = 0; j < k && i < st->n; j++)
				owner_push(st, i++);
			/* Pop until empty: the last pop races the thieves' CAS. */
			while (cbcmn__deque_len(&st->d) > 0)
				owner_pop(st, true);
			owner_pop(st, false);
		}
		break;
	case WRAP:
		/* Push only while the array has room: by the owner's look at
		 * top, which can only be older than push()'s own, so push()
		 * must find that room too and never grow.  Every push then
		 * overwrites a slot that thieves are racing to read.  Each
		 * push waits for a steal: on a loaded host 100 000 took 36 s,
		 * so the phase ends at WRAP_NS too. */
		for (uint64_t full = 0, k = 0, end = t_now_ns() + WRAP_NS; i < st->n; k++) {
			if ((k & 1023) == 1023 && t_now_ns() > end)
				break;
			if (cbcmn__deque_len(&st->d) < 4)
				owner_push(st, i++);
			else if ((++full & 63) == 0)
				sched_yield(); /* the thieves need the CPU */
			else
				cbcmn__cpu_relax();
		}
		break;
	case GROWTH:
		while (i < st->n) {
			uint32_t burst = 1 + (uint32_t)(xorshift(&rng) % 4096);
			for (uint32_t j = 0; j < burst && i < st->n; j++)
				owner_push(st, i++);
			for (uint32_t j = 0; j < burst / 2; j++)
				owner_pop(st, false);
		}
		break;
	}
	return i;
}

static void run_stress(enum stress_mode mode, uint32_t n, uint32_t cap0)
{
	/* Static: the deque's 64-byte alignment, and no big stack frame. */
	static struct stress st;
	memset(&st, 0, sizeof(st));
	st.mode = mode;
	st.n = n;
	st.seen = calloc(n, sizeof(st.seen[0]));
	assert_non_null(st.seen);
	assert_int_equal(cbcmn__deque_init(&st.d, cap0), 0);
	atomic_init(&st.stop, false);

	pthread_t th[THIEVES];
	for (int k = 0; k < THIEVES; k++)
		assert_int_equal(pthread_create(&th[k], NULL, thief, &st), 0);
	/* Thieves must be running before the owner starts, or a short phase
	 * could finish without a single concurrent steal. */
	while (atomic_load_explicit(&st.thieves_ready, memory_order_relaxed) < THIEVES)
		sched_yield();

	uint64_t t0 = t_now_ns();
	n = owner(&st); /* WRAP may stop early */
	/* Whatever the owner left is the thieves' to take.  A steal that
	 * never succeeds would hang here: fail after a deadline instead. */
	uint64_t deadline = t0 + 60ull * 1000000000ull;
	while (cbcmn__deque_len(&st.d) > 0 && t_now_ns() < deadline)
		sched_yield();
	int64_t left = cbcmn__deque_len(&st.d);
	atomic_store_explicit(&st.stop, true, memory_order_release);
	for (int k = 0; k < THIEVES; k++)
		assert_int_equal(pthread_join(th[k], NULL), 0);
	uint64_t ns = t_now_ns() - t0;

	uint64_t stolen = atomic_load(&st.stolen);
	printf("  %-6s n=%u cap0=%u: popped %llu, stolen %llu, steal aborts %llu, "
	       "pops lost to a thief %llu, final capacity %lld, %.1f ms\n",
	       mode == MIXED ? "mixed" : mode == DRAIN ? "drain" : mode == WRAP ? "wrap" : "growth",
	       n, cap0,
	       (unsigned long long)st.popped, (unsigned long long)stolen,
	       (unsigned long long)atomic_load(&st.aborts),
	       (unsigned long long)st.pop_lost, (long long)capacity(&st.d), ns / 1e6);

	assert_int_equal(left, 0);
	assert_int_equal(atomic_load(&st.bad), 0);
	/* Exactly once: no item lost, none taken twice. */
	uint32_t missing = 0, dup = 0, first_wrong = UINT32_MAX;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t c = atomic_load_explicit(&st.seen[i], memory_order_relaxed);
		missing += c == 0;
		dup += c > 1;
		if (c != 1 && first_wrong == UINT32_MAX)
			first_wrong = i;
	}
	if (missing || dup)
		fail_msg("%u items lost, %u taken more than once (first: item %u)", missing,
			 dup, first_wrong);
	assert_int_equal(st.popped + stolen, n);
	/* The owner leaves items behind in MIXED and GROWTH: thieves took them. */
	if (mode != DRAIN)
		assert_true(stolen > 0);
	if (mode == GROWTH)
		assert_true(capacity(&st.d) >= 1024);
	if (mode == WRAP) {
		assert_int_equal(capacity(&st.d), cap0);
		assert_true(n >= 16 * cap0); /* the slots went round */
	}
	/* Nothing left for either end. */
	assert_null(cbcmn__deque_pop(&st.d));
	assert_ptr_equal(cbcmn__deque_steal(&st.d), CBCMN__DEQUE_EMPTY);

	cbcmn__deque_destroy(&st.d);
	free((void *)st.seen);
}

static void test_stress_mixed(void **state)
{
	(void)state;
	run_stress(MIXED, T_SCALE(1000000), 64);
}

static void test_stress_last_item_race(void **state)
{
	(void)state;
	run_stress(DRAIN, T_SCALE(4000000), 8);
}

static void test_stress_growth(void **state)
{
	(void)state;
	run_stress(GROWTH, T_SCALE(1000000), 2);
}

static void test_stress_wrap(void **state)
{
	(void)state;
	run_stress(WRAP, T_SCALE(100000), 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_capacity_rounding),
		cmocka_unit_test(test_pop_lifo),
		cmocka_unit_test(test_steal_fifo),
		cmocka_unit_test(test_both_ends),
		cmocka_unit_test(test_push_finds_room_thieves_made),
		cmocka_unit_test(test_growth_keeps_order),
		cmocka_unit_test(test_growth_wrapped),
		cmocka_unit_test(test_stress_mixed),
		cmocka_unit_test(test_stress_last_item_race),
		cmocka_unit_test(test_stress_growth),
		cmocka_unit_test(test_stress_wrap),
	};
	return cmocka_run_group_tests_name("deque", tests, NULL, NULL);
}
