/* test_actor_wheel: the actor scheduling wheel (lib/actor_wheel.c) as a data
 * structure, on a made-up clock: how far a node goes forward, the order
 * nodes come back in, idle nodes and their preserved quantum, the load. */
#include "helpers.h"

#include "actor_wheel.h"

#define Q 1024u      /* the quantum, in checkpoints */
#define QNS 50000ull /* what a full quantum takes on the made-up clock */

static void test_forward_by_fraction_of_quantum_used(void **state)
{
	(void)state;
	struct cbcmn__wheel w;
	cbcmn__wheel_init(&w, Q, 0);
	assert_int_equal(cbcmn__wheel_forward(&w, Q), CBCMN__WHEEL_FORWARD);
	assert_int_equal(cbcmn__wheel_forward(&w, 2 * Q), CBCMN__WHEEL_FORWARD);
	assert_int_equal(cbcmn__wheel_forward(&w, Q / 2), CBCMN__WHEEL_FORWARD / 2);
	assert_int_equal(cbcmn__wheel_forward(&w, Q / 4), CBCMN__WHEEL_FORWARD / 4);
	assert_int_equal(cbcmn__wheel_forward(&w, Q - 1), CBCMN__WHEEL_FORWARD - 1);
	/* Never the segment being served: at least the next one. */
	assert_int_equal(cbcmn__wheel_forward(&w, 1), 1);
	assert_int_equal(cbcmn__wheel_forward(&w, 0), 1);

	/* Placed where forward says, from the current segment, wrapping. */
	struct cbcmn__wheel_node a = {0}, b = {0};
	cbcmn__wheel_ran(&w, &a, Q);
	cbcmn__wheel_ran(&w, &b, 0); /* new: the next segment */
	assert_int_equal(a.where, CBCMN__WN_RUN);
	assert_int_equal(a.seg, CBCMN__WHEEL_FORWARD);
	assert_int_equal(a.left, Q);
	assert_int_equal(b.seg, 1);
	/* Blocked: due where forward says, counted in positions. */
	assert_int_equal(cbcmn__wheel_parked(&w, Q / 2), CBCMN__WHEEL_FORWARD / 2);
	assert_int_equal(cbcmn__wheel_parked(&w, 3), 1);
	cbcmn__wheel_remove(&w, &a);
	cbcmn__wheel_remove(&w, &b);
	assert_int_equal(w.busy, 0);
	w.cur = CBCMN__WHEEL_SEGS - 2;
	cbcmn__wheel_ran(&w, &a, Q);
	assert_int_equal(a.seg, CBCMN__WHEEL_FORWARD - 2);
}

static void test_pick_serves_segments_in_order_fifo_within(void **state)
{
	(void)state;
	struct cbcmn__wheel w;
	cbcmn__wheel_init(&w, Q, 0);
	struct cbcmn__wheel_node n[4] = {{0}};
	uint32_t q;
	cbcmn__wheel_ran(&w, &n[0], Q);     /* segment 16 */
	cbcmn__wheel_ran(&w, &n[1], Q / 4); /* segment 4 */
	cbcmn__wheel_ran(&w, &n[2], Q);     /* segment 16, after n[0] */
	cbcmn__wheel_ran(&w, &n[3], Q / 2); /* segment 8 */
	assert_ptr_equal(cbcmn__wheel_pick(&w, 0, &q), &n[1]);
	assert_int_equal(q, Q);
	assert_int_equal(w.cur, 4);
	assert_ptr_equal(cbcmn__wheel_pick(&w, 0, &q), &n[3]);
	assert_ptr_equal(cbcmn__wheel_pick(&w, 0, &q), &n[0]);
	assert_ptr_equal(cbcmn__wheel_pick(&w, 0, &q), &n[2]);
	assert_int_equal(w.cur, 16);
	assert_int_equal(w.pos, 16);
	assert_null(cbcmn__wheel_pick(&w, 0, &q));
	assert_int_equal(w.busy, 0);
}

static void test_idle_woken_before_its_segment_runs_there_with_what_it_kept(void **state)
{
	(void)state;
	struct cbcmn__wheel w;
	cbcmn__wheel_init(&w, Q, 0);
	struct cbcmn__wheel_node idle = {0}, early = {0}, late = {0};
	uint32_t q;
	uint64_t due = cbcmn__wheel_parked(&w, Q / 2); /* blocked: due at segment 8 */
	cbcmn__wheel_ran(&w, &early, Q / 4);           /* segment 4 */
	cbcmn__wheel_ran(&w, &late, Q);                /* segment 16 */
	cbcmn__wheel_woken(&w, &idle, due, Q / 2);
	assert_int_equal(idle.where, CBCMN__WN_IDLE);
	/* Woken, it still waits for its segment: early's comes first. */
	assert_ptr_equal(cbcmn__wheel_pick(&w, 0, &q), &early);
	assert_ptr_equal(cbcmn__wheel_pick(&w, 0, &q), &idle);
	assert_int_equal(q, Q / 2); /* only what it kept */
	assert_int_equal(w.cur, 8);
	assert_ptr_equal(cbcmn__wheel_pick(&w, 0, &q), &late);
	assert_int_equal(q, Q);
}

static void test_idle_past_its_segment_runs_first(void **state)
{
	(void)state;
	struct cbcmn__wheel w;
	cbcmn__wheel_init(&w, Q, 0);
	struct cbcmn__wheel_node idle = {0}, busy = {0};
	uint32_t q;
	uint64_t due = cbcmn__wheel_parked(&w, Q / 4); /* blocked: due at segment 4 */
	cbcmn__wheel_ran(&w, &busy, Q / 2);            /* segment 8 */
	assert_ptr_equal(cbcmn__wheel_pick(&w, 0, &q), &busy);
	/* The wheel turned past segment 4 (the seed: the node joined the
	 * executor's idle set). */
	cbcmn__wheel_ran(&w, &busy, Q); /* segment 24 */
	cbcmn__wheel_woken(&w, &idle, due, Q - Q / 4);
	assert_int_equal(idle.where, CBCMN__WN_FIRST);
	/* Given priority: before any segment's queue. */
	assert_ptr_equal(cbcmn__wheel_pick(&w, 0, &q), &idle);
	assert_int_equal(q, Q - Q / 4);
	assert_ptr_equal(cbcmn__wheel_pick(&w, 0, &q), &busy);
	assert_null(cbcmn__wheel_pick(&w, 0, &q));
	/* Woken again, its position long past, having kept nothing: first,
	 * with a whole quantum. */
	cbcmn__wheel_woken(&w, &idle, due, 0);
	assert_int_equal(idle.where, CBCMN__WN_FIRST);
	assert_int_equal(idle.left, Q); /* all used: a new quantum */
	cbcmn__wheel_remove(&w, &idle);
	assert_false(cbcmn__wheel_ready(&w));
}

/* nodes nodes, each always using its whole quantum, QNS each, for turns
 * turns: the load the wheel publishes. */
static uint64_t load_of(uint32_t nodes, uint32_t turns, uint64_t *now_out, struct cbcmn__wheel *w)
{
	static struct cbcmn__wheel_node n[64];
	uint64_t now = 0;
	cbcmn__wheel_init(w, Q, now);
	memset(n, 0, sizeof(n));
	for (uint32_t i = 0; i < nodes; i++)
		cbcmn__wheel_ran(w, &n[i], 0); /* new: the next segment */
	while (w->turns < turns) {
		uint32_t q;
		struct cbcmn__wheel_node *x = cbcmn__wheel_pick(w, now, &q);
		assert_non_null(x);
		assert_int_equal(q, Q);
		now += QNS;
		cbcmn__wheel_timed(w, Q, QNS);
		cbcmn__wheel_ran(w, x, Q);
	}
	*now_out = now;
	return w->load_milli;
}

static void test_load_is_turn_length_over_nominal(void **state)
{
	(void)state;
	struct cbcmn__wheel w;
	uint64_t now;
	/* N = S/4 forward: each node runs 4 times a turn.  16 nodes fill the
	 * 64 segments' worth of quanta: nominal, 1000; twice that, 2000;
	 * half, 500. */
	uint64_t l16 = load_of(16, 80, &now, &w);
	assert_int_equal(w.quantum_ns, QNS);
	assert_in_range(l16, 980, 1000);
	uint64_t l32 = load_of(32, 80, &now, &w);
	assert_in_range(l32, 1980, 2000);
	uint64_t l8 = load_of(8, 80, &now, &w);
	assert_in_range(l8, 480, 500);

	/* Emptied, the wheel's load decays with the time it stays empty,
	 * with no timer: when the executor next looks. */
	l16 = load_of(16, 80, &now, &w);
	for (uint32_t seg = 0; seg < CBCMN__WHEEL_SEGS; seg++) {
		struct cbcmn__wheel_node *x;
		while ((x = w.seg[seg].run.head))
			cbcmn__wheel_remove(&w, x);
	}
	assert_int_equal(w.busy, 0);
	uint32_t q;
	uint64_t nominal = CBCMN__WHEEL_SEGS * QNS;
	assert_null(cbcmn__wheel_pick(&w, now + nominal / 2, &q));
	assert_int_equal(w.load_milli, l16); /* less than a turn: no change yet */
	assert_null(cbcmn__wheel_pick(&w, now + 4 * nominal, &q));
	assert_true(w.load_milli < l16 * 7 / 8 * 7 / 8);
	assert_null(cbcmn__wheel_pick(&w, now + 100 * nominal, &q));
	assert_true(w.load_milli < 10);
}

/* An actor's direct switch admits its woken node to the empty wheel and
 * picks it at once: cbcmn__wheel_woken_pick() does that without the
 * lists, and must leave the wheel as cbcmn__wheel_woken() and then
 * cbcmn__wheel_pick() leave it (the turn, the position, the load and its
 * samples, the node's quantum), every hop, whether the due position is
 * ahead (its segment) or past (first), across completed turns. */
static void test_woken_pick_on_the_empty_wheel_is_woken_then_pick(void **state)
{
	(void)state;
	struct cbcmn__wheel a, b;
	struct cbcmn__wheel_node na = {0}, nb = {0};
	cbcmn__wheel_init(&a, Q, 1000);
	cbcmn__wheel_init(&b, Q, 1000);
	uint64_t now = 1000, x = 88172645463325252ull;
	uint32_t ahead = 0, past = 0, turned = 0;
	for (int i = 0; i < 20000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint32_t used = (uint32_t)(x % (2 * Q)); /* over the quantum at times */
		uint64_t ns = 1 + (x >> 20) % (4 * QNS);
		cbcmn__wheel_timed(&a, used, ns);
		cbcmn__wheel_timed(&b, used, ns);
		uint64_t due = cbcmn__wheel_parked(&a, used);
		assert_int_equal(due, cbcmn__wheel_parked(&b, used));
		if ((x >> 40) % 7 == 0) /* woken late: its position passed */
			due = a.pos > 3 ? a.pos - (x >> 44) % 4 : 0;
		uint32_t left = used < Q ? Q - used : 0;
		now += ns + (x >> 50) % (QNS * 70); /* now and then a whole turn idle */
		cbcmn__wheel_idle(&a, now);
		cbcmn__wheel_idle(&b, now);
		uint64_t turns = a.turns;
		bool in_seg = due > a.pos && due - a.pos < CBCMN__WHEEL_SEGS;
		ahead += in_seg;
		past += !in_seg;
		uint32_t qa = 0, qb = 0;
		assert_ptr_equal(cbcmn__wheel_woken_pick(&a, &na, due, left, now, &qa), &na);
		cbcmn__wheel_woken(&b, &nb, due, left);
		assert_ptr_equal(cbcmn__wheel_pick(&b, now, &qb), &nb);
		turned += a.turns != turns;
		assert_int_equal(qa, qb);
		assert_int_equal(a.cur, b.cur);
		assert_int_equal(a.pos, b.pos);
		assert_int_equal(a.busy, 0);
		assert_int_equal(b.busy, 0);
		assert_null(a.first.head);
		assert_null(b.first.head);
		assert_int_equal(a.turn_start, b.turn_start);
		assert_int_equal(a.quantum_ns, b.quantum_ns);
		assert_int_equal(a.load_milli, b.load_milli);
		assert_int_equal(a.turns, b.turns);
		assert_int_equal(a.turn_used, b.turn_used);
		assert_int_equal(a.turn_run_ns, b.turn_run_ns);
		assert_int_equal(a.prev_sample[0], b.prev_sample[0]);
		assert_int_equal(a.prev_sample[1], b.prev_sample[1]);
		assert_int_equal(a.nsample, b.nsample);
		assert_int_equal(na.where, nb.where);
		assert_int_equal(na.where, CBCMN__WN_NONE);
		assert_int_equal(na.left, nb.left);
		assert_null(na.prev);
		assert_null(na.next);
		if (in_seg)
			assert_int_equal(na.seg, nb.seg);
	}
	/* Both cases and the turns' ends were taken. */
	assert_true(ahead > 1000 && past > 1000 && turned > 100);

	/* A wheel that holds a node: the two calls, in order (the held node
	 * first, then the woken one's turn). */
	struct cbcmn__wheel_node other = {0};
	cbcmn__wheel_ran(&a, &other, 0);
	uint32_t q;
	assert_ptr_equal(cbcmn__wheel_woken_pick(&a, &na, a.pos + 2, Q / 2, now, &q), &other);
	assert_int_equal(na.where, CBCMN__WN_IDLE);
	assert_ptr_equal(cbcmn__wheel_pick(&a, now, &q), &na);
	assert_int_equal(q, Q / 2);

	/* One that holds a node in its first list only (woken late, no
	 * segment busy): the two calls too, the held node first. */
	assert_false(cbcmn__wheel_ready(&a));
	cbcmn__wheel_woken(&a, &other, a.pos, Q);
	assert_int_equal(other.where, CBCMN__WN_FIRST);
	assert_int_equal(a.busy, 0);
	assert_ptr_equal(cbcmn__wheel_woken_pick(&a, &na, a.pos + 2, Q / 2, now, &q), &other);
	assert_int_equal(na.where, CBCMN__WN_IDLE);
	assert_ptr_equal(cbcmn__wheel_pick(&a, now, &q), &na);
	assert_int_equal(q, Q / 2);
	assert_false(cbcmn__wheel_ready(&a));
	/* More than a quantum kept: a new quantum, as cbcmn__wheel_woken(). */
	assert_ptr_equal(cbcmn__wheel_woken_pick(&a, &na, a.pos + 1, Q + 5, now, &q), &na);
	assert_int_equal(q, Q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forward_by_fraction_of_quantum_used),
		cmocka_unit_test(test_pick_serves_segments_in_order_fifo_within),
		cmocka_unit_test(test_idle_woken_before_its_segment_runs_there_with_what_it_kept),
		cmocka_unit_test(test_idle_past_its_segment_runs_first),
		cmocka_unit_test(test_load_is_turn_length_over_nominal),
		cmocka_unit_test(test_woken_pick_on_the_empty_wheel_is_woken_then_pick),
	};
	return cmocka_run_group_tests_name("actor_wheel", tests, NULL, NULL);
}
