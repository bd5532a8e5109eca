/* test_sysstack: the system stack's two switches (asm/x86_64,
 * cbcmn__sys_switch and cbcmn__sys_call): a function run on another stack,
 * the context it names continued, the caller's frames found again by an
 * unwinder from the system stack (docs/ACTORS.md, "The system stack"). */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actor_test.h"
#include "unwind_test.h"


#include "arch.h"
#include "fault.h"
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
		/* The saved frame was ours, below our frame (not below mine:
		 * with ASan's fake stacks it lives off the stack). */
		assert_true((char *)sp < (char *)__builtin_frame_address(0));
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

static struct tok_ring rg;

static int64_t ring_rounds(cbcmn_cx *cx, void *arg)
{
	long rounds = (long)(intptr_t)arg;
	unsigned seed = 1;
	for (long r = 0; r < rounds; r++) {
		cbcmn_nursery *n;
		TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
		tok_ring_spawn(cx, n, &rg, RING_K, 1);
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

/* ---- (d') a walk after the park published its task --------------------
 *
 * Once the park has published the parked task (run_post()), another
 * executor may run it: its saved frame is replaced, its stack may be
 * freed.  A walk from the system stack then (a profiler's sample in the
 * park's last instructions) must end at the switch, not go on through
 * the task's saved frame.  The walk is taken at that point (a pause
 * point, fault builds), in two actors passing a token on one executor,
 * each park a direct switch to the other; before, it went on into the
 * parked actor's frames. */

static struct {
	_Atomic long walks, past;
	cbcmn_actor_ref a, b;
	long limit;
} pw;

static void posted_walk(enum cbcmn__pause_point p, void *exec)
{
	(void)exec;
	if (p != CBCMN__P_PARK_POSTED)
		return;
	struct t_trace tr = {.n = 0};
	_Unwind_Backtrace(t_trace_frame, &tr);
	/* The switch's return address, then nothing (0 at most). */
	int at = -1;
	for (int i = 0; i < tr.n; i++)
		if (tr.ip[i] > (uintptr_t)cbcmn__sys_switch &&
		    tr.ip[i] < (uintptr_t)cbcmn__sys_switch + 0x80)
			at = i;
	atomic_fetch_add(&pw.walks, 1);
	if (at < 0 || (at + 1 < tr.n && tr.ip[at + 1] != 0))
		atomic_fetch_add(&pw.past, 1);
}

static int64_t token_actor(cbcmn_cx *cx, void *arg)
{
	cbcmn_actor_ref *to = arg;
	cbcmn_actor_msg m;
	while (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0) {
		if ((long)m.body.u64[0] >= pw.limit)
			return 0;
		m.body.u64[0]++;
		if (cbcmn_actor_send(NULL, cx, *to, &m) != 0)
			return 0;
	}
	return 0;
}

static int64_t token_pair(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, token_actor, &pw.b, NULL, &pw.a) == 0);
	TASK_CHECK(cbcmn_actor_spawn(cx, n, token_actor, &pw.a, NULL, &pw.b) == 0);
	cbcmn_actor_msg m = {.type = 1};
	TASK_CHECK(cbcmn_actor_send(NULL, cx, pw.a, &m) == 0);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(&pw.walks) < 100 && t_now_ns() < end)
		cbcmn_sleep(cx, 1000000);
	pw.limit = 0; /* the token's next holder ends; the other is cancelled */
	cbcmn_nursery_cancel(n);
	cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_a_walk_after_the_park_published_ends_at_the_switch(void **state)
{
	(void)state;
	if (!cbcmn__pause_set(NULL))
		T_SKIP("built without CBCMN_FAULTS: runs in the ASan and TSan builds");
	if (T_TSAN)
		T_SKIP("under TSan the park stays on the task's stack (sched.c)");
	memset(&pw, 0, sizeof(pw));
	pw.limit = LONG_MAX;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn__pause_set(posted_walk);
	t_run(rt, token_pair, NULL, 0);
	cbcmn__pause_set(NULL);
	t_destroy(rt);
	assert_true(atomic_load(&pw.walks) >= 100);
	assert_int_equal(atomic_load(&pw.past), 0);
}

/* ---- (g) the system stack's guard page ------------------------------------
 *
 * A runtime call that runs out of the system stack hits its guard page:
 * nothing there can end cleanly (the runtime's own code, no landing pad),
 * so the process dies of the SIGSEGV, but with a line that names the
 * system stack, as a task's overflow names its stack (overflow.c).  In a
 * child: a task runs a deep recursion on its executor's system stack. */

static uint64_t sys_deep(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
	(void)a, (void)b, (void)c, (void)d, (void)e;
	return (uint64_t)t_recurse(NULL, 0);
}

static int64_t overflow_sys(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	struct cbcmn__exec *e = cbcmn__tls_exec;
	if (!e->sys_top)
		return 77; /* no system stack mapped (no memory) */
	return (int64_t)cbcmn__sys_run(e->current, sys_deep, 0, 0, 0, 0, 0);
}

static void test_an_overflow_of_the_system_stack_names_it(void **state)
{
	(void)state;
	int saved, fd = t_stderr_capture(&saved);
	pid_t pid = t_fork_coreless();
	if (pid == 0) {
		alarm(60);
		signal(SIGSEGV, SIG_DFL); /* not cmocka's, which would go on */
		cbcmn_runtime *rt = NULL;
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		if (cbcmn_runtime_create(&cfg, &rt) != 0)
			_exit(2);
		int64_t rv = 0;
		cbcmn_runtime_run(rt, overflow_sys, NULL, &rv);
		_exit(rv == 77 ? 77 : 3); /* 3: it returned */
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	char msg[1024];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
		T_SKIP("no system stack mapped");
		return;
	}
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
		fail_msg("child: %s %d, want killed by SIGSEGV", WIFSIGNALED(st) ? "signal" : "exit",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	if (!strstr(msg, "cbcmn: executor 0 overflowed its 65536-byte system stack (guard page hit)"))
		fail_msg("stderr: \"%s\"", msg);
}

/* ---- (h) the system stack's guard refused -----------------------------------
 *
 * Its mprotect is a fault site (CBCMN__F_MPROTECT): an executor whose
 * guard is refused starts without a system stack (blocks and sends on the
 * tasks' stacks, as with no memory for it), its mapping given back, and
 * the actors there run as elsewhere. */

/* munmap() interposed: while refused_run() counts (and only then), the
 * unmaps of a system stack's length (its guard page and 64 KiB), counted;
 * every call passed on to the next definition (the sanitizer's
 * interceptor in its builds, then the C library's).  Outside the test it
 * is a plain pass-through. */
static _Atomic bool unmaps_counted;
static _Atomic long sys_unmaps;

int munmap(void *addr, size_t len)
{
	static int (*next)(void *, size_t);
	if (!next)
		next = (int (*)(void *, size_t))dlsym(RTLD_NEXT, "munmap");
	if (atomic_load(&unmaps_counted) && len == (size_t)sysconf(_SC_PAGESIZE) + STACK_BYTES)
		atomic_fetch_add(&sys_unmaps, 1);
	return next(addr, len);
}

static void refused_run(bool armed)
{
	struct cbcmn__fault_plan p = {.nth = 1, .every = 1, .err = -ENOMEM};
	atomic_store(&sys_unmaps, 0);
	atomic_store(&unmaps_counted, true);
	if (armed)
		cbcmn__fault_arm(CBCMN__F_MPROTECT, &p);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.guard_stacks_max = UINT32_MAX; /* no task stack guards: their mprotects */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	atomic_store(&mx.hops, 0);
	mx.limit = T_SCALE(20000);
	t_run(rt, mix_ring, NULL, 0);
	uint64_t hits = cbcmn__fault_hits(CBCMN__F_MPROTECT);
	uint64_t fails = cbcmn__fault_fails(CBCMN__F_MPROTECT);
	long unmaps = atomic_load(&sys_unmaps); /* before the executors' ends */
	atomic_store(&unmaps_counted, false);
	cbcmn__fault_disarm_all();
	if (armed) { /* every executor that started (one at least) has none */
		for (uint32_t i = 0; i < 2; i++) {
			assert_null(rt->exec[i]->sys_stack);
			assert_null(rt->exec[i]->sys_top);
		}
		assert_true(fails >= 1);
		assert_int_equal(fails, hits);
	}
	t_destroy(rt);
	assert_true(atomic_load(&mx.hops) >= mx.limit);
	/* Each refused one unmapped at once, before any executor ended (whose
	 * signal stack may have the same length); none else unmapped then. */
	assert_int_equal(unmaps, armed ? (long)fails : 0);
}

static void test_a_refused_system_stack_guard_leaves_none(void **state)
{
	(void)state;
	struct cbcmn__fault_plan probe = {0};
	if (!cbcmn__fault_arm(CBCMN__F_MPROTECT, &probe))
		T_SKIP("built without CBCMN_FAULTS: runs in the ASan and TSan builds");
	cbcmn__fault_disarm_all();
	refused_run(false);
	refused_run(true);
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
		cmocka_unit_test(test_a_walk_after_the_park_published_ends_at_the_switch),
		cmocka_unit_test(test_cancellation_at_the_park_ends_every_actor),
		cmocka_unit_test(test_a_send_resumed_where_there_is_no_system_stack),
		cmocka_unit_test(test_an_overflow_of_the_system_stack_names_it),
		cmocka_unit_test(test_a_refused_system_stack_guard_leaves_none),
	};
	return cmocka_run_group_tests_name("sysstack", tests, NULL, NULL);
}
