/* test_actor_prefetch: the hop's prefetch hints (docs/ACTORS.md "Prefetch:
 * the next actor, one hop early").  A sender records where it sent
 * (pf_to, pf_wait) and reads the receiver's resume hints (hint_task,
 * hint_sp); the pick prefetches them.  They are hints only: never read
 * through, so a wrong or stale one must change nothing.  Attacked here:
 * a token sent to a random member every hop (the prediction mostly
 * wrong), and rings that halt and are spawned again into the same slots,
 * whose predictions then name halted actors' receive records, on one
 * executor and two (in TSAN_TESTS: the prediction is handed between
 * executors with its task).  What ASan sees: a read through pf_wait (a
 * halted actor's stack, poisoned).  Not a read through hint_task or
 * hint_sp: a receiver rewrites them at every park, so a sender finds a
 * halted actor's only between its successor's first receive and park,
 * and those tasks and stacks sit in the executors' caches, mapped
 * (checked by mutation, s17-rvaring6): so a test puts them in a page
 * with no access, where a read faults, in release too. */
#include "helpers.h"

#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "actor.h" /* internals: the slot's resume hint */
#include "actor_test.h"

#define MEMBERS 32
#define ROUNDS 4

struct game {
	cbcmn_actor_ref refs[MEMBERS];
	uint64_t visits[MEMBERS];
	uint64_t hops;         /* the token's hops a round */
	_Atomic uint64_t done; /* hops made when the token ended */
	bool pinned;
};

struct player {
	struct game *g;
	uint32_t i;
};

/* Passes the token to a member drawn from its body (an LCG: the next
 * member is never the last one's guess for long), M_QUIT ends it. */
static int64_t player(cbcmn_cx *cx, void *arg)
{
	struct player *me = arg;
	struct game *g = me->g;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0) {
		if (m.type == M_QUIT)
			return 0;
		g->visits[me->i]++;
		if (m.body.u64[0] == 0) {
			atomic_store(&g->done, m.body.u64[1]);
			continue;
		}
		m.body.u64[0]--;
		m.body.u64[1]++;
		m.body.u64[2] = m.body.u64[2] * 6364136223846793005ull + 1442695040888963407ull;
		TASK_CHECK(cbcmn_actor_send(NULL, cx, g->refs[(m.body.u64[2] >> 33) % MEMBERS], &m) == 0);
	}
	return rc;
}

static int64_t game_root(cbcmn_cx *cx, void *arg)
{
	struct game *g = arg;
	static struct player pl[MEMBERS];
	cbcmn_actor_opts ao = {.mailbox_cap = 2,
			       .placement = g->pinned ? CBCMN_PLACE_PINNED : CBCMN_PLACE_LOCAL};
	for (int round = 0; round < ROUNDS; round++) {
		cbcmn_nursery *n;
		TASK_CHECK(open_n(cx, &n) == 0);
		memset(g->visits, 0, sizeof(g->visits));
		atomic_store(&g->done, 0);
		for (uint32_t k = 0; k < MEMBERS; k++) {
			pl[k] = (struct player){g, k};
			TASK_CHECK(cbcmn_actor_spawn(cx, n, player, &pl[k], &ao, &g->refs[k]) == 0);
		}
		cbcmn_actor_msg m = msg(M_DATA, g->hops, 0);
		m.body.u64[2] = (uint64_t)round + 1;
		TASK_CHECK(cbcmn_actor_send(NULL, cx, g->refs[round % MEMBERS], &m) == 0);
		uint64_t end = t_now_ns() + T_STALL_NS;
		while (!atomic_load(&g->done) && t_now_ns() < end)
			cbcmn_sleep(cx, 1000000);
		TASK_CHECK(atomic_load(&g->done) == g->hops);
		uint64_t sum = 0;
		for (uint32_t k = 0; k < MEMBERS; k++)
			sum += g->visits[k];
		TASK_CHECK(sum == g->hops + 1); /* every hop once: none lost, none twice */
		cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
		for (uint32_t k = 0; k < MEMBERS; k++)
			TASK_CHECK(cbcmn_actor_send(NULL, cx, g->refs[k], &q) == 0);
		/* All halted: the next round's actors take their slots. */
		TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	}
	return 0;
}

static void game_run(bool pinned)
{
	static struct game g;
	memset(&g, 0, sizeof(g));
	g.pinned = pinned;
	g.hops = STRESS(50000);
	cbcmn_runtime *rt = t_runtime(2);
	int64_t res;
	assert_int_equal(cbcmn_runtime_run(rt, game_root, &g, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	t_destroy(rt);
}

static void test_random_destinations_in_recycled_slots_pinned(void **state)
{
	(void)state;
	game_run(true);
}

static void test_random_destinations_in_recycled_slots_unpinned(void **state)
{
	(void)state;
	game_run(false);
}

/* The resume hint (actor.h, cbcmn__actor_resume_hint()): an actor parked
 * in a receive leaves its saved pointer's line and, in the low 6 bits,
 * the count of lines from there to its buffer's end, which is all a
 * sender prefetches of its stack.  A buffer off the stack (the heap) or
 * far above the receive gives the frames' count.  The hint is checked
 * from the buffer's side (the saved pointer is the parked task's, not
 * this thread's to read). */
enum { BUF_STACK, BUF_HEAP, BUF_FAR };
struct hinted {
	int where;
	bool unmapped; /* the send finds hints into a page with no access */
	_Atomic(cbcmn_actor_msg *) buf;
};

/* The frames below stay on the actor's stack under ASan: with its fake
 * stacks (detect_stack_use_after_return=1, clang's default, as in
 * test_sysstack_uar) a local buffer lives in a fake frame off the stack,
 * which the hint rightly counts as the frames only, and pad would not
 * put the receive 2 KiB below the buffer. */
#define ON_THE_STACK __attribute__((noinline, no_sanitize_address))

/* The receive 2 KiB of frame below its buffer (the caller's); pad read
 * after it, so that the call is not a tail call in the caller's frame. */
static ON_THE_STACK int receive_far(cbcmn_cx *cx, cbcmn_actor_msg *buf)
{
	volatile char pad[2048];
	pad[0] = 0;
	pad[sizeof(pad) - 1] = 0;
	int rc = cbcmn_actor_receive(cx, buf, CBCMN_ACTOR_FOREVER);
	return rc + pad[0] + pad[sizeof(pad) - 1];
}

static ON_THE_STACK int64_t hinted_actor(cbcmn_cx *cx, void *arg)
{
	struct hinted *h = arg;
	cbcmn_actor_msg m, *buf = h->where == BUF_HEAP ? malloc(sizeof(*buf)) : &m;
	TASK_CHECK(buf != NULL);
	atomic_store(&h->buf, buf);
	int rc = h->where == BUF_FAR ? receive_far(cx, buf)
				     : cbcmn_actor_receive(cx, buf, CBCMN_ACTOR_FOREVER);
	TASK_CHECK(rc == 0 && buf->type == M_QUIT);
	if (h->where == BUF_HEAP)
		free(buf);
	return rc;
}

static int64_t hint_root(cbcmn_cx *cx, void *arg)
{
	struct hinted *h = arg;
	cbcmn_nursery *n;
	cbcmn_actor_ref ref;
	cbcmn_actor_opts ao = {.placement = CBCMN_PLACE_PINNED};
	TASK_CHECK(open_n(cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, hinted_actor, h, &ao, &ref) == 0);
	struct cbcmn__actor *a = cbcmn__actor_slot(cbcmn_cx_runtime(cx), ref);
	TASK_CHECK(a != NULL);
	uintptr_t hint = 0;
	for (uint64_t end = t_now_ns() + T_STALL_NS; !hint && t_now_ns() < end;) {
		cbcmn_sleep(cx, 1000000);
		hint = (uintptr_t)atomic_load_explicit(&a->hint_sp, memory_order_relaxed);
	}
	uintptr_t buf = (uintptr_t)atomic_load(&h->buf), lines = hint & 63, s0 = hint & ~(uintptr_t)63;
	TASK_CHECK(hint != 0 && buf != 0);
	if (h->where != BUF_STACK) {
		TASK_CHECK(lines == CBCMN__RESUME_LINES_FRAMES);
	} else {
		/* From below the buffer (the receive's frames and the saved
		 * registers) to the buffer's last line, no further. */
		TASK_CHECK(s0 < buf && buf - s0 < CBCMN__RESUME_LINES_MAX * 64);
		TASK_CHECK(lines == ((buf + sizeof(cbcmn_actor_msg) - 1) >> 6) - (s0 >> 6) + 1);
	}
	void *page = MAP_FAILED;
	if (h->unmapped) {
		/* Hints the parked receiver left no access to, the most lines
		 * the count says (a task and a stack unmapped since): the
		 * send only prefetches them, a read through them faults. */
		page = mmap(NULL, 2 * 64 * 64, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		TASK_CHECK(page != MAP_FAILED);
		atomic_store_explicit(&a->hint_task, page, memory_order_relaxed);
		atomic_store_explicit(&a->hint_sp, (char *)page + CBCMN__RESUME_LINES_MAX,
				      memory_order_relaxed);
	}
	cbcmn_actor_msg q = msg(M_QUIT, 0, 0);
	TASK_CHECK(cbcmn_actor_send(NULL, cx, ref, &q) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	if (page != MAP_FAILED)
		munmap(page, 2 * 64 * 64);
	return 0;
}

static void hint_run(int where, bool unmapped)
{
	static struct hinted h;
	h.where = where;
	h.unmapped = unmapped;
	atomic_store(&h.buf, NULL);
	cbcmn_runtime *rt = t_runtime(1);
	int64_t res;
	assert_int_equal(cbcmn_runtime_run(rt, hint_root, &h, &res), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(res, 0);
	t_destroy(rt);
}

static void test_a_parked_receivers_hint_counts_its_lines_to_its_buffer(void **state)
{
	(void)state;
	hint_run(BUF_STACK, false);
}

static void test_a_buffer_off_the_stack_hints_the_frames_only(void **state)
{
	(void)state;
	hint_run(BUF_HEAP, false);
}

/* 2 KiB of frames between the receive and its buffer: past the bound,
 * the frames only (a count of 33 lines would not fit the prefetch's). */
static void test_a_buffer_far_above_the_receive_hints_the_frames_only(void **state)
{
	(void)state;
	hint_run(BUF_FAR, false);
}

/* A sender reads a parked receiver's hints without its lock, stale
 * maybe: the receiver's task and stack since ended and unmapped (a slot
 * recycled, its successor between its first receive and its park).  The
 * send prefetches through them, never loads: no fault, the message
 * delivered. */
static void test_a_send_prefetches_hints_into_an_unmapped_page_harmlessly(void **state)
{
	(void)state;
	hint_run(BUF_STACK, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_destinations_in_recycled_slots_pinned),
		cmocka_unit_test(test_random_destinations_in_recycled_slots_unpinned),
		cmocka_unit_test(test_a_parked_receivers_hint_counts_its_lines_to_its_buffer),
		cmocka_unit_test(test_a_buffer_off_the_stack_hints_the_frames_only),
		cmocka_unit_test(test_a_buffer_far_above_the_receive_hints_the_frames_only),
		cmocka_unit_test(test_a_send_prefetches_hints_into_an_unmapped_page_harmlessly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
