/* test_sysstack: the system stack's two switches (asm/x86_64,
 * cbcmn__sys_switch and cbcmn__sys_call): a function run on another stack,
 * the context it names continued, the caller's frames found again by an
 * unwinder from the system stack (docs/ACTORS.md, "The system stack"). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "helpers.h"
#include "unwind_test.h"

#include "cbcmn_actor.h"

#include "arch.h"
#include "runtime.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif

#define STACK_BYTES (64u * 1024)

struct stk {
	char *map, *lo, *top;
	size_t len;
};

static void stk_new(struct stk *s)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	s->len = STACK_BYTES + pg;
	s->map = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
		      -1, 0);
	assert_true(s->map != MAP_FAILED);
	assert_int_equal(mprotect(s->map, pg, PROT_NONE), 0);
	s->lo = s->map + pg;
	s->top = s->map + s->len;
}

static void stk_free(struct stk *s)
{
	munmap(s->map, s->len);
}

/* ASan: told of every change of stack, as the runtime tells it. */
static void san_to(void **fake, const void *lo, size_t size)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_start_switch_fiber(fake, lo, size);
#else
	(void)fake, (void)lo, (void)size;
#endif
}

static void san_in(void *fake)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
	(void)fake;
#endif
}

/* ASan: our thread's own stack, for the switches back. */
static const void *main_lo;
static size_t main_size;

static struct {
	struct stk sys, fib;
	void *main_sp, *fib_sp;
	void *fib_fake; /* ASan: the fiber's fake stack while away */
	char *seen; /* a local's address, in the function run */
	void *fib_got[2];
	int fib_steps;
} g;

/* ---- (a) cbcmn__sys_call: there and back ---------------------------------- */

/* Each argument arrives in its place, the fifth (a stack argument of the
 * call) too. */
static uint64_t call_fn(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
	san_in(NULL);
	char here;
	g.seen = &here;
	__asm__ __volatile__("" : : "r"(&here) : "memory");
	san_to(NULL, main_lo, main_size);
	return a + 2 * b + 3 * c + 4 * d + 5 * e;
}

static void test_sys_call_runs_on_the_system_stack(void **state)
{
	(void)state;
	memset(&g, 0, sizeof(g));
	stk_new(&g.sys);
	volatile uint64_t mine = 0x5eedf00d; /* our frame, untouched */
	void *fake = NULL;
	san_to(&fake, g.sys.lo, STACK_BYTES);
	uint64_t r = cbcmn__sys_call(g.sys.top, call_fn, 1, 1000, 100000, 10000000, 1000000000);
	san_in(fake);
	assert_int_equal(r, 1 + 2 * 1000 + 3 * 100000 + 4 * 10000000 + 5 * 1000000000ull);
	assert_true(g.seen >= g.sys.lo && g.seen < g.sys.top);
	assert_int_equal(mine, 0x5eedf00d);
	stk_free(&g.sys);
}

/* ---- (b) cbcmn__sys_switch back to its own caller ------------------------- */

static void **self_save;

static struct cbcmn__sys_to self_fn(void *arg)
{
	san_in(NULL);
	char here;
	g.seen = &here;
	__asm__ __volatile__("" : : "r"(&here) : "memory");
	san_to(NULL, main_lo, main_size);
	return (struct cbcmn__sys_to){*self_save, arg};
}

static void test_sys_switch_to_itself_returns_the_xfer(void **state)
{
	(void)state;
	memset(&g, 0, sizeof(g));
	stk_new(&g.sys);
	void *sp = NULL;
	self_save = &sp;
	volatile uint64_t mine = 0xfeedbeef;
	for (uintptr_t i = 1; i <= 3; i++) {
		void *fake = NULL;
		san_to(&fake, g.sys.lo, STACK_BYTES);
		void *r = cbcmn__sys_switch(&sp, g.sys.top, self_fn, (void *)(0x40 * i));
		san_in(fake);
		assert_ptr_equal(r, (void *)(0x40 * i));
		assert_true(g.seen >= g.sys.lo && g.seen < g.sys.top);
		/* The saved frame was ours, below our locals. */
		assert_true((char *)sp < (char *)&mine);
	}
	assert_int_equal(mine, 0xfeedbeef);
	stk_free(&g.sys);
}

/* ---- (c) into another context, and back by the other switches -------------
 *
 * main -> (system stack) -> a fresh fiber, which returns to main with
 * cbcmn__ctx_jump_ret; main -> (system stack) -> the fiber again, which
 * returns with cbcmn__ctx_jump.  Each end continues the frame the other
 * switch saved: the frames are one layout. */

static struct cbcmn__sys_to to_fib(void *arg)
{
	san_in(NULL);
	san_to(NULL, g.fib.lo, STACK_BYTES);
	return (struct cbcmn__sys_to){g.fib_sp, arg};
}

static void fib_entry(void *xfer)
{
	san_in(NULL);
	g.fib_got[g.fib_steps++] = xfer;
	san_to(&g.fib_fake, main_lo, main_size);
	xfer = cbcmn__ctx_jump_ret(&g.fib_sp, g.main_sp, (void *)0x9);
	san_in(g.fib_fake);
	g.fib_got[g.fib_steps++] = xfer;
	san_to(NULL, main_lo, main_size);
	cbcmn__ctx_jump(&g.fib_sp, g.main_sp, (void *)0xb);
	fail_msg("a finished fiber was resumed");
}

static void test_sys_switch_continues_another_context(void **state)
{
	(void)state;
	memset(&g, 0, sizeof(g));
	stk_new(&g.sys);
	stk_new(&g.fib);
	g.fib_sp = cbcmn__ctx_make(g.fib.top, fib_entry);
	void *fake = NULL;
	san_to(&fake, g.sys.lo, STACK_BYTES);
	void *r = cbcmn__sys_switch(&g.main_sp, g.sys.top, to_fib, (void *)0x7);
	san_in(fake);
	assert_ptr_equal(r, (void *)0x9);
	assert_int_equal(g.fib_steps, 1);
	assert_ptr_equal(g.fib_got[0], (void *)0x7);
	san_to(&fake, g.sys.lo, STACK_BYTES);
	r = cbcmn__sys_switch(&g.main_sp, g.sys.top, to_fib, (void *)0xa);
	san_in(fake);
	assert_ptr_equal(r, (void *)0xb);
	assert_int_equal(g.fib_steps, 2);
	assert_ptr_equal(g.fib_got[1], (void *)0xa);
	stk_free(&g.fib);
	stk_free(&g.sys);
}

/* ---- (d) a backtrace from the system stack --------------------------------
 *
 * What a profiler, a debugger or a panic's report sees while the runtime
 * runs a block there: the caller's frames, through the unwind info that
 * finds them by the saved stack pointer. */

static struct t_trace uw;

static struct cbcmn__sys_to unwind_fn(void *arg)
{
	san_in(NULL);
	_Unwind_Backtrace(t_trace_frame, &uw);
	san_to(NULL, main_lo, main_size);
	return (struct cbcmn__sys_to){*self_save, arg};
}

/* Where it is called from: its caller's return address is a frame the
 * backtrace must reach, past the switch. */
static __attribute__((noinline)) uintptr_t sys_caller(void)
{
	void *sp = NULL;
	self_save = &sp;
	void *fake = NULL;
	san_to(&fake, g.sys.lo, STACK_BYTES);
	cbcmn__sys_switch(&sp, g.sys.top, unwind_fn, NULL);
	san_in(fake);
	__asm__ __volatile__("" ::: "memory"); /* not a tail call */
	return (uintptr_t)__builtin_return_address(0);
}

static void test_unwind_from_the_system_stack_reaches_the_caller(void **state)
{
	(void)state;
	memset(&g, 0, sizeof(g));
	memset(&uw, 0, sizeof(uw));
	stk_new(&g.sys);
	uintptr_t back = sys_caller();
	stk_free(&g.sys);
	bool found = false;
	for (int i = 0; i < uw.n; i++) {
		printf("  #%d %#lx\n", i, (unsigned long)uw.ip[i]);
		found |= uw.ip[i] == back;
	}
	if (!found)
		fail_msg("the backtrace from the system stack stopped before the caller's "
			 "caller (%#lx): the switch's unwind info lost the way back",
			 (unsigned long)back);
}

/* ---- (e) cancellation landing at the park -------------------------------
 *
 * A fiber actor's wait for ever publishes itself and takes its own look at
 * its cancellation on the system stack, and continues itself when that
 * look ends it (cbcmn__sys_switch() returning NULL): a ring of actors on
 * two executors whose senders also wait on full mailboxes (capacity 1,
 * three tokens), cancelled after a random while, round after round.
 * Every actor ends with its receive or send cancelled; none hangs, none
 * sees a message it was not sent. */

#define RING_K 8

static struct {
	cbcmn_actor_ref refs[RING_K];
	_Atomic long hops, bad;
} rg;

static int64_t ring_actor(cbcmn_cx *cx, void *arg)
{
	long i = (long)(intptr_t)arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0) {
		if (m.type != 1)
			atomic_fetch_add(&rg.bad, 1);
		atomic_fetch_add(&rg.hops, 1);
		if ((rc = cbcmn_actor_send(NULL, cx, rg.refs[(i + 1) % RING_K], &m)) != 0)
			break;
	}
	/* Cancelled in a receive or a send; -ESRCH: a send to a neighbour
	 * that ended first. */
	if (rc != CBCMN_ECANCELED && rc != -ESRCH)
		atomic_fetch_add(&rg.bad, 1);
	return 0;
}

static int64_t ring_rounds(cbcmn_cx *cx, void *arg)
{
	long rounds = (long)(intptr_t)arg;
	unsigned seed = 1;
	for (long r = 0; r < rounds; r++) {
		cbcmn_nursery *n;
		TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
		cbcmn_actor_opts ao = {.mailbox_cap = 1};
		for (long k = 0; k < RING_K; k++)
			TASK_CHECK(cbcmn_actor_spawn(cx, n, ring_actor, (void *)(intptr_t)k, &ao,
						     &rg.refs[k]) == 0);
		cbcmn_actor_msg m = {.type = 1};
		cbcmn_actor_try_send(NULL, cx, rg.refs[0], &m);
		cbcmn_actor_try_send(NULL, cx, rg.refs[1], &m);
		cbcmn_actor_try_send(NULL, cx, rg.refs[RING_K / 2], &m);
		unsigned d = (unsigned)rand_r(&seed) % 64;
		for (unsigned j = 0; j < d; j++)
			cbcmn_yield(cx);
		if (d & 1)
			cbcmn_sleep(cx, d * 200u);
		cbcmn_nursery_cancel(n);
		cbcmn_nursery_await_all(cx, n);
	}
	return 0;
}

static void test_cancellation_at_the_park_ends_every_actor(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	atomic_store(&rg.hops, 0);
	atomic_store(&rg.bad, 0);
	t_run(rt, ring_rounds, (void *)(intptr_t)T_SCALE(1000), 0);
	t_destroy(rt);
	assert_int_equal(atomic_load(&rg.bad), 0);
	assert_true(atomic_load(&rg.hops) > 0);
}

/* ---- (f) an executor without a system stack ------------------------------
 *
 * Its mapping can fail at its thread's start (no memory): then blocks and
 * sends run on the tasks' stacks there.  A send's budget charge may yield
 * (the fairness yield) and resume on another executor: the send must look
 * at the system stack of the executor it continues on, not the one it
 * began on (a NULL top there: a jump to address 0).  Executor 1 is made
 * one without (its top cleared before any task runs, as a failed mapping
 * leaves it), and a ring of actors that yield every few sends hops over
 * both executors. */

#define MIX_K 16

static struct {
	cbcmn_actor_ref refs[MIX_K];
	_Atomic long hops;
	long limit;
} mx;

static int64_t mix_actor(cbcmn_cx *cx, void *arg)
{
	long i = (long)(intptr_t)arg;
	cbcmn_actor_msg m;
	while (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0) {
		if (atomic_fetch_add(&mx.hops, 1) >= mx.limit)
			return 0;
		if (cbcmn_actor_send(NULL, cx, mx.refs[(i + 1) % MIX_K], &m) != 0)
			return 0;
	}
	return 0;
}

static int64_t mix_ring(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (long k = 0; k < MIX_K; k++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, mix_actor, (void *)(intptr_t)k, NULL,
					     &mx.refs[k]) == 0);
	cbcmn_actor_msg m = {.type = 1};
	for (long k = 0; k < MIX_K; k += 2)
		TASK_CHECK(cbcmn_actor_send(NULL, cx, mx.refs[k], &m) == 0);
	while (atomic_load(&mx.hops) < mx.limit)
		cbcmn_sleep(cx, 1000000);
	cbcmn_nursery_cancel(n);
	cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_a_send_resumed_where_there_is_no_system_stack(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.yield_interval = 3; /* a fairness yield every few sends */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct cbcmn__exec *e1 = rt->exec[1];
	e1->sys_top = NULL; /* as a failed mapping leaves it (sys_stack_setup()) */
	atomic_store(&mx.hops, 0);
	mx.limit = T_SCALE(200000);
	t_run(rt, mix_ring, NULL, 0);
	t_destroy(rt);
	assert_true(atomic_load(&mx.hops) >= mx.limit);
}

int main(void)
{
#ifdef __SANITIZE_ADDRESS__
	/* Our own thread's stack, for the switches back. */
	pthread_attr_t a;
	void *lo;
	size_t sz;
	if (pthread_getattr_np(pthread_self(), &a) == 0) {
		pthread_attr_getstack(&a, &lo, &sz);
		main_lo = lo;
		main_size = sz;
		pthread_attr_destroy(&a);
	}
#endif
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sys_call_runs_on_the_system_stack),
		cmocka_unit_test(test_sys_switch_to_itself_returns_the_xfer),
		cmocka_unit_test(test_sys_switch_continues_another_context),
		cmocka_unit_test(test_unwind_from_the_system_stack_reaches_the_caller),
		cmocka_unit_test(test_cancellation_at_the_park_ends_every_actor),
		cmocka_unit_test(test_a_send_resumed_where_there_is_no_system_stack),
	};
	return cmocka_run_group_tests_name("sysstack", tests, NULL, NULL);
}
