/* test_overflow: the SIGSEGV handler (chaining, the alternate signal stack)
 * and stack overflows: no task on an unguarded stack, runtime calls that
 * check the stack first, a landing that restores the signal mask and the FP
 * control state, overflows inside the C library that leave no lock held. */
#include <errno.h>
#include <link.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

#include "helpers.h"

#include "cbcmn_actor.h"
#include "cbcmn_chan.h"
#include "cbcmn_io.h"

#include "../lib/arch.h"
#include "../lib/runtime.h"

/* TSan cannot follow a jump out of a signal handler. */
#define SKIP_UNDER_TSAN()                                                      \
	do {                                                                    \
		if (T_TSAN) {                                                   \
			T_SKIP("TSan cannot follow a jump out of a signal handler"); \
			return;                                                 \
		}                                                               \
	} while (0)

static int64_t overflow_task(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return t_recurse(NULL, 0);
}

/* ---- SIGSEGV chaining ---------------------------------------------------------- */

/* Runs fn in a child process (so that dying of a fault fails the test
 * instead of the suite); the child must exit 0 within 60 s. */
static void in_child(int (*fn)(void), int want_signal)
{
	pid_t pid = t_fork_coreless();
	if (pid == 0) {
		alarm(60);
		_exit(fn());
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (want_signal) {
		if (!WIFSIGNALED(st) || WTERMSIG(st) != want_signal)
			fail_msg("child: %s %d, want killed by signal %d",
				 WIFSIGNALED(st) ? "signal" : "exit status",
				 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), want_signal);
	} else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fail_msg("child: %s %d, want exit 0", WIFSIGNALED(st) ? "killed by signal" :
			 "exit status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	}
}

/* A JIT's handler: faults on its own page are recovered by siglongjmp. */
static char *jit_page;
static sigjmp_buf jit_env;
static volatile int jit_faults;

static void jit_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if ((char *)si->si_addr >= jit_page && (char *)si->si_addr < jit_page + 4096) {
		jit_faults++;
		siglongjmp(jit_env, 1);
	}
	signal(SIGSEGV, SIG_DFL);
}

static bool jit_fault(void)
{
	if (sigsetjmp(jit_env, 1) == 0) {
		*(volatile char *)jit_page = 1;
		return false;
	}
	return true;
}

static int64_t jit_faults_in_task(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	int ok = 0;
	for (int i = 0; i < 3; i++)
		ok += jit_fault();
	return ok;
}

static int jit_then_overflow(void)
{
	jit_page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (jit_page == MAP_FAILED)
		return 2;
	struct sigaction sa = {.sa_sigaction = jit_handler, .sa_flags = SA_SIGINFO};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
	cbcmn_runtime *rt;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	if (cbcmn_runtime_create(&cfg, &rt) != 0)
		return 3;
	/* Faults that are the JIT's, on this thread and on an executor. */
	for (int i = 0; i < 3; i++)
		if (!jit_fault())
			return 4;
	int64_t r = 0;
	if (cbcmn_runtime_run(rt, jit_faults_in_task, NULL, &r) != 0 || r != 3)
		return 5;
	if (jit_faults != 6)
		return 6;
	/* Overflows are still caught. */
	int saved = dup(STDERR_FILENO), devnull = open("/dev/null", O_WRONLY);
	dup2(devnull, STDERR_FILENO);
	int rc = cbcmn_runtime_run(rt, overflow_task, NULL, &r);
	dup2(saved, STDERR_FILENO);
	if (rc != 0 || r != CBCMN_EPANIC)
		return 7;
	cbcmn_runtime_destroy(rt);
	return 0;
}

/* Regression: after a handler we chained to left by siglongjmp, the
 * thread-local "passing on" counter stayed up, and the next fault that was
 * not ours reset SIGSEGV to the default action: the process died, and no
 * thread caught overflows any more. */
static void test_chaining_survives_a_handler_that_siglongjmps(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	in_child(jit_then_overflow, 0);
}

/* An address nobody handles a fault at. */
static void fault_unhandled(void)
{
	static char *volatile page;
	if (!page)
		page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	*(volatile char *)page = 1;
}

/* A handler that chains back to the one it replaced, i.e. to us, for a
 * fault nobody handles: the process dies of it, without looping. */
static struct sigaction before_us;

static void chains_back(int sig, siginfo_t *si, void *uc)
{
	if (before_us.sa_flags & SA_SIGINFO)
		before_us.sa_sigaction(sig, si, uc);
}

static int unhandled_with_bounce(void)
{
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(NULL, &rt) != 0)
		return 3;
	struct sigaction sa = {.sa_sigaction = chains_back, .sa_flags = SA_SIGINFO | SA_NODEFER};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &before_us);
	/* A second runtime re-installs ours, which now chains to chains_back,
	 * which chains back to ours. */
	cbcmn_runtime *rt2;
	if (cbcmn_runtime_create(NULL, &rt2) != 0)
		return 4;
	fault_unhandled();
	return 5;
}

static void test_a_handler_that_chains_back_dies_of_the_fault(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	in_child(unhandled_with_bounce, SIGSEGV);
}

/* A handler we chain to that faults itself: the process dies of it. */
static void faults_itself(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	fault_unhandled();
}

static int64_t fault_in_task(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	fault_unhandled();
	return 0;
}

static int handler_faults(void)
{
	struct sigaction sa = {.sa_sigaction = faults_itself, .sa_flags = SA_SIGINFO | SA_NODEFER};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, NULL);
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(NULL, &rt) != 0)
		return 3;
	int64_t r;
	cbcmn_runtime_run(rt, fault_in_task, NULL, &r);
	return 5;
}

static void test_a_chained_handler_that_faults_dies_of_it(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	in_child(handler_faults, SIGSEGV);
}

/* ---- the alternate signal stack ------------------------------------------- */

static stack_t task_ss;

static int64_t get_altstack(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	sigaltstack(NULL, &task_ss);
	return 0;
}

/* Regression: a handler that ran out of the alternate stack wrote over
 * whatever was mapped below it. */
static void test_altstack_has_a_guard_page(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, get_altstack, NULL, &r), 0);
	assert_int_equal(task_ss.ss_flags & SS_DISABLE, 0);
	char perms[5];
	uintptr_t end = 0;
	char *lo = task_ss.ss_sp;
	assert_true(t_maps_perms(lo, perms, &end));
	assert_string_equal(perms, "rw-p");
	if (!t_maps_perms(lo - 1, perms, &end))
		fail_msg("nothing mapped below the alternate stack: no guard page");
	assert_string_equal(perms, "---p");
	assert_int_equal(end, (uintptr_t)lo);
	t_destroy(rt);
}

static struct cbcmn__stack *stack_of(cbcmn_cx *cx)
{
	return ((struct cbcmn_task *)cx)->stack;
}

/* Runs fn(arg) as a root task of rt, with what it says on stderr in msg. */
static int64_t run_quiet(cbcmn_runtime *rt, cbcmn_task_fn fn, void *arg, char *msg, size_t len)
{
	int saved, fd = t_stderr_capture(&saved);
	int64_t r = INT64_MIN;
	int rc = cbcmn_runtime_run(rt, fn, arg, &r);
	t_stderr_restore(fd, saved, msg, len);
	assert_int_equal(rc, 0);
	return r;
}

/* A call without a task context made on another stack than the task's (a
 * coroutine of the program's, a handler on the alternate stack) is not
 * the task running out of stack. */
static ucontext_t co_main, co_side;
static cbcmn_nursery *co_nursery;
static int co_rc = 12345;

static void co_cancel(void)
{
	co_rc = cbcmn_nursery_cancel(co_nursery);
	swapcontext(&co_side, &co_main);
}

static int64_t cancel_from_a_coroutine(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &co_nursery))
		return -1;
	size_t size = 64 * 1024;
	char *stack = malloc(size); /* the heap: far below any fiber stack */
	getcontext(&co_side);
	co_side.uc_stack.ss_sp = stack;
	co_side.uc_stack.ss_size = size;
	co_side.uc_link = NULL;
	makecontext(&co_side, co_cancel, 0);
	swapcontext(&co_main, &co_side);
	free(stack);
	return cbcmn_nursery_await_all(cx, co_nursery);
}

static void test_a_call_on_another_stack_is_not_an_overflow(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) {
		T_SKIP("sanitizers do not follow swapcontext onto a heap stack");
		return;
	}
	cbcmn_runtime *rt = t_runtime(1);
	char msg[4096];
	int64_t r = run_quiet(rt, cancel_from_a_coroutine, NULL, msg, sizeof(msg));
	assert_int_equal(r, CBCMN_ECANCELED); /* the await saw the cancel, nothing else */
	assert_int_equal(co_rc, 0);
	assert_null(strstr(msg, "overflow"));
	t_destroy(rt);
}

/* ---- beyond the map budget --------------------------------------------------- */

static _Atomic int started, unguarded;

static int64_t hold_stack(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	atomic_fetch_add(&started, 1);
	if (!stack_of(cx)->guarded)
		atomic_fetch_add(&unguarded, 1);
	for (int i = 0; i < 20; i++)
		cbcmn_yield(cx);
	return 0;
}

static int64_t spawn_eight(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -1;
	for (int i = 0; i < 8; i++)
		cbcmn_nursery_spawn(cx, n, hold_stack, NULL, NULL);
	return cbcmn_nursery_await_all(cx, n);
}

/* Regression: past the map budget (here guard_stacks_max = 4, mprotect
 * guards) tasks ran on stacks without a guard page, where an overflow
 * corrupts a neighbour and aborts the process.  Now they fail with
 * -ENOMEM instead; with lightweight guards they all run guarded. */
static void test_no_task_runs_on_an_unguarded_stack(void **state)
{
	(void)state;
	for (int prot = 1; prot >= 0; prot--) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cfg.flags = CBCMN_CONFIG_NO_INLINE;
		cfg.guard_stacks_max = 4;
		cbcmn__stack_test_no_lightweight_guards = prot;
		cbcmn_runtime *rt = t_runtime_cfg(&cfg);
		cbcmn__stack_test_no_lightweight_guards = false;
		bool lightweight = rt->stacks.guard_kind == CBCMN__GUARD_MADV;
		atomic_store(&started, 0);
		atomic_store(&unguarded, 0);
		char msg[4096];
		int64_t r = run_quiet(rt, spawn_eight, NULL, msg, sizeof(msg));
		printf("  %s guards: %d of 8 started, result %lld\n",
		       lightweight ? "lightweight" : "mprotect", atomic_load(&started),
		       (long long)r);
		assert_int_equal(atomic_load(&unguarded), 0);
		if (lightweight) {
			assert_int_equal(r, 0);
			assert_int_equal(atomic_load(&started), 8);
		} else {
			assert_int_equal(r, -ENOMEM);
			assert_true(atomic_load(&started) <= 3); /* the root holds one */
			assert_non_null(strstr(msg, "vm.max_map_count"));
		}
		t_destroy(rt);
		if (prot == 0 && !lightweight)
			T_SKIP("no MADV_GUARD_INSTALL (Linux 6.13+): lightweight guards untested");
	}
}

/* Review of session 17 (s17-halt2): each executor keeps a stack for an
 * unstarted actor's end, taken from the tasks' guards when its thread
 * started: with as many executors as guarded stacks (here one, mprotect
 * guards) they took them all, and the root task failed with -ENOMEM.
 * The kept stacks are beyond guard_stacks_max (stack.c, quota_adjust()). */
static int64_t returns_seven(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	atomic_fetch_add(&started, 1);
	if (!stack_of(cx)->guarded)
		atomic_fetch_add(&unguarded, 1);
	return 7;
}

static void test_kept_end_stacks_leave_the_budget_to_tasks(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.guard_stacks_max = 1;
	cbcmn__stack_test_no_lightweight_guards = true;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	cbcmn__stack_test_no_lightweight_guards = false;
	atomic_store(&started, 0);
	atomic_store(&unguarded, 0);
	char msg[4096];
	assert_int_equal(run_quiet(rt, returns_seven, NULL, msg, sizeof(msg)), 7);
	assert_int_equal(atomic_load(&started), 1);
	assert_int_equal(atomic_load(&unguarded), 0);
	assert_int_equal(rt->stacks.guard_kind, CBCMN__GUARD_PROT);
	t_destroy(rt);
}

/* A child that opened a nursery and then overflowed lands in its own
 * frame, run inline just above where its parent passed a stack check: the
 * landing pad's await of that nursery must not fail the check and land
 * again.  The parent sweeps where it awaits, a few bytes at a time. */
static int landing_offset;

static int64_t opens_then_overflows(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -1; /* too low to open: not this case */
	return t_recurse(NULL, 0);
}

static int64_t awaits_low(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -100;
	cbcmn_nursery_spawn(cx, n, opens_then_overflows, NULL, NULL);
	long drop = ((char *)__builtin_frame_address(0) - stack_of(cx)->check_lo) - landing_offset;
	if (drop > 0) {
		char *volatile down = __builtin_alloca((size_t)drop);
		down[0] = 1;
	}
	return cbcmn_nursery_await_all(cx, n); /* runs the child inline */
}

struct sweep {
	cbcmn_runtime *rt;
	int64_t r;
};

static void sweep_one(void *arg)
{
	struct sweep *s = arg;
	char msg[4096];
	s->r = run_quiet(s->rt, awaits_low, NULL, msg, sizeof(msg));
}

static void test_landing_never_lands_again(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	cbcmn_runtime *rt = t_runtime(1);
	int panics = 0;
	for (landing_offset = 0; landing_offset < 1024; landing_offset += 8) {
		struct sweep s = {rt, 0};
		if (!run_bounded(sweep_one, &s, 20))
			fail_msg("awaiting %d bytes above the check line: the landing pad lands "
				 "again and again", landing_offset);
		panics += s.r == CBCMN_EPANIC;
	}
	printf("  %d of 128 positions had the child open a nursery and overflow\n", panics);
	assert_true(panics > 0);
	t_destroy(rt);
}

/* ---- runtime calls check the stack before they lock ------------------------ */

enum { LC_NURSERY_CANCEL, LC_CHAN_CLOSE, LC_CHAN_COMMIT, LC_CHAN_ABORT, LC_CHAN_DESTROY,
       LC_BUDGET_RECHARGE, LC_NURSERY_OPEN, LC_STREAM_OPEN, LC_N };
static const char *const lc_name[LC_N] = {
	"cbcmn_nursery_cancel", "cbcmn_chan_close",      "cbcmn_chan_commit",
	"cbcmn_chan_abort",     "cbcmn_chan_destroy",    "cbcmn_budget_recharge",
	"cbcmn_nursery_open",   "cbcmn_stream_open",
};

struct lowcall {
	int which;
	cbcmn_chan *ch, *spare;
	cbcmn_nursery *n;
	cbcmn_chan_permit permit;
	int fd;
	int rc;
};

static int do_call(cbcmn_cx *cx, void *arg)
{
	struct lowcall *l = arg;
	int v = 7;
	cbcmn_budget none = {0};
	cbcmn_nursery *n2;
	cbcmn_stream *s;
	switch (l->which) {
	case LC_NURSERY_CANCEL: return cbcmn_nursery_cancel(l->n);
	case LC_CHAN_CLOSE: return cbcmn_chan_close(cx, l->ch);
	case LC_CHAN_COMMIT: return cbcmn_chan_commit(cx, &l->permit, &v);
	case LC_CHAN_ABORT: return cbcmn_chan_abort(cx, &l->permit);
	case LC_CHAN_DESTROY: return cbcmn_chan_destroy(l->spare);
	case LC_BUDGET_RECHARGE: return cbcmn_budget_recharge(cx, NULL, &none);
	case LC_NURSERY_OPEN: return cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n2);
	case LC_STREAM_OPEN: return cbcmn_stream_open(cx, l->fd, &s);
	}
	return -1;
}

/* Down until the next call's frame lies below the check line, then
 * call(cx, arg). */
static int call_low(cbcmn_cx *cx, int (*call)(cbcmn_cx *, void *), void *arg, int depth)
{
	volatile char pad[64];
	pad[0] = (char)depth;
	if ((char *)__builtin_frame_address(0) > stack_of(cx)->check_lo + 32 && depth < 100000)
		return call_low(cx, call, arg, depth + 1) + pad[0];
	return call(cx, arg);
}

static int64_t lowcall_task(cbcmn_cx *cx, void *arg)
{
	struct lowcall *l = arg;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &l->n))
		return -100;
	if (l->which == LC_CHAN_COMMIT || l->which == LC_CHAN_ABORT)
		if (cbcmn_chan_reserve(cx, l->ch, &l->permit))
			return -101;
	l->rc = call_low(cx, do_call, l, 0);
	cbcmn_nursery_await_all(cx, l->n);
	return 0;
}

/* Regression: these calls took runtime locks without checking the stack
 * first, so an overflow could land inside the runtime with a lock held.
 * Now, with less than the reserve left, the task ends before the call
 * changes anything. */
static void test_locking_calls_check_the_stack_first(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	cbcmn_runtime *rt = t_runtime(1);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	for (int which = 0; which < LC_N; which++) {
		struct lowcall l = {.which = which, .fd = sv[0], .rc = 12345};
		assert_int_equal(cbcmn_chan_create(rt, 4, sizeof(int), &l.ch), 0);
		assert_int_equal(cbcmn_chan_create(rt, 4, sizeof(int), &l.spare), 0);
		char msg[4096];
		int64_t r = run_quiet(rt, lowcall_task, &l, msg, sizeof(msg));
		if (r != CBCMN_EPANIC)
			fail_msg("%s with too little stack left: the task returned %lld (the call "
				 "%d), want CBCMN_EPANIC",
				 lc_name[which], (long long)r, l.rc);
		assert_int_equal(l.rc, 12345); /* the call never returned */
		assert_non_null(strstr(msg, "is about to overflow its 65536-byte stack"));
		/* Nothing left locked or half done: the channels go. */
		assert_int_equal(cbcmn_chan_destroy(l.spare), 0);
		assert_int_equal(cbcmn_chan_destroy(l.ch), 0);
	}
	close(sv[0]);
	close(sv[1]);
	t_destroy(rt);
}

/* An actor's send and receive, with less than the reserve left: the task
 * ends before either takes its actor's lock.  The receive checked only
 * through its budget charge (s19-rvcold1); it checks as send does now
 * (a guard: the charge's check ended it too). */
struct actlow {
	bool send;
	cbcmn_actor_ref peer;
	int rc;
};

static int act_call(cbcmn_cx *cx, void *arg)
{
	struct actlow *l = arg;
	cbcmn_actor_msg m = {.type = 1};
	if (l->send)
		return cbcmn_actor_send(NULL, cx, l->peer, &m);
	return cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
}

static int64_t act_low_main(cbcmn_cx *cx, void *arg)
{
	struct actlow *l = arg;
	l->rc = call_low(cx, act_call, l, 0);
	return 0;
}

static int64_t idle_actor(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	(void)cbcmn_actor_receive(cx, &m, 1000000000); /* the sender ends first */
	return 0;
}

static int64_t actlow_task(cbcmn_cx *cx, void *arg)
{
	struct actlow *l = arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -100;
	if (l->send && cbcmn_actor_spawn(cx, n, idle_actor, NULL, NULL, &l->peer))
		return -101;
	cbcmn_actor_ref a;
	if (cbcmn_actor_spawn(cx, n, act_low_main, l, NULL, &a))
		return -102;
	return cbcmn_nursery_await_all(cx, n);
}

static void test_actor_send_and_receive_check_the_stack_first(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	cbcmn_runtime *rt = t_runtime(1);
	for (int send = 0; send < 2; send++) {
		struct actlow l = {.send = send, .rc = 12345};
		char msg[4096];
		int64_t r = run_quiet(rt, actlow_task, &l, msg, sizeof(msg));
		if (r != CBCMN_EPANIC)
			fail_msg("an actor's %s with too little stack left: %lld (the call %d), "
				 "want CBCMN_EPANIC",
				 send ? "send" : "receive", (long long)r, l.rc);
		assert_int_equal(l.rc, 12345); /* the call never returned */
		assert_non_null(strstr(msg, "is about to overflow its 65536-byte stack"));
	}
	t_destroy(rt);
}

/* The other side of the line: a runtime call that passes its check has
 * the reserve below its frame (stack.c's reserve_of(): 2 KiB of an 8 KiB
 * stack) for its whole path, parks and wakes included.  Each call here is
 * made by an actor on the smallest stack, with 0 to 2 KiB of room above
 * the line in 64-byte steps: the call's check ends the task ("is about to
 * overflow") or the call returns what it returns; it never overflows into
 * the guard.  A path that outgrew the reserve (frames grown by inlining,
 * as in the release library's LTO build, which the sanitizer builds do
 * not cover) would.  Every call returns from the highest room. */
enum { RC_YIELD, RC_SLEEP, RC_SPAWN, RC_AWAIT, RC_CHAN_RECV, RC_CHAN_SEND, RC_READ, RC_WRITE,
       RC_ACTOR_SPAWN, RC_ACTOR_SEND, RC_ACTOR_RECEIVE, RC_BUDGET, RC_N };
static const char *const rc_name[RC_N] = {
	"cbcmn_yield", "cbcmn_sleep", "cbcmn_nursery_spawn", "cbcmn_nursery_await_all",
	"cbcmn_chan_recv (parks)", "cbcmn_chan_send", "cbcmn_read (parks)", "cbcmn_write",
	"cbcmn_actor_spawn", "cbcmn_actor_send", "cbcmn_actor_receive (times out)",
	"cbcmn_budget_get",
};

struct roomcall {
	int which;
	cbcmn_nursery *n;
	cbcmn_chan *ch;
	int sv[2];
	int rc, depth;
	size_t room; /* above the line, at the call */
	bool called;
};

static int64_t rc_child(cbcmn_cx *cx, void *arg)
{
	struct roomcall *l = arg;
	cbcmn_sleep(cx, 2000000); /* the call parks first */
	int v = 5;
	if (l->which == RC_CHAN_RECV)
		return cbcmn_chan_send(cx, l->ch, &v);
	if (l->which == RC_READ)
		return cbcmn_write(cx, l->sv[1], "r", 1) == 1 ? 0 : -1;
	return 0;
}

static int64_t rc_actor_idle(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_msg m;
	(void)cbcmn_actor_receive(cx, &m, 50000000);
	return 0;
}

static int room_call(cbcmn_cx *cx, void *arg)
{
	struct roomcall *l = arg;
	int v = 7;
	char c;
	cbcmn_budget b;
	cbcmn_actor_ref a;
	cbcmn_actor_msg m = {.type = 1};
	l->called = true;
	switch (l->which) {
	case RC_YIELD: return cbcmn_yield(cx);
	case RC_SLEEP: return cbcmn_sleep(cx, 1000);
	case RC_SPAWN: return cbcmn_nursery_spawn(cx, l->n, rc_child, l, NULL);
	case RC_AWAIT: return (int)cbcmn_nursery_await_all(cx, l->n);
	case RC_CHAN_RECV: return cbcmn_chan_recv(cx, l->ch, &v) == 0 && v == 5 ? 0 : -1;
	case RC_CHAN_SEND: return cbcmn_chan_send(cx, l->ch, &v);
	case RC_READ: return cbcmn_read(cx, l->sv[0], &c, 1) == 1 && c == 'r' ? 0 : -1;
	case RC_WRITE: return cbcmn_write(cx, l->sv[1], "w", 1) == 1 ? 0 : -1;
	case RC_ACTOR_SPAWN: return cbcmn_actor_spawn(cx, l->n, rc_actor_idle, NULL, NULL, &a);
	case RC_ACTOR_SEND: return cbcmn_actor_send(NULL, cx, cbcmn_actor_self(cx), &m);
	case RC_ACTOR_RECEIVE: return cbcmn_actor_receive(cx, &m, 1000000) == -ETIMEDOUT ? 0 : -1;
	case RC_BUDGET: return cbcmn_budget_get(cx, &b);
	}
	return -1;
}

/* Down until this frame is l->room above the line, then the call. */
static int room_low(cbcmn_cx *cx, struct roomcall *l, int depth)
{
	volatile char pad[32];
	pad[0] = (char)depth;
	if ((char *)__builtin_frame_address(0) > stack_of(cx)->check_lo + l->room + 64 &&
	    depth < 100000)
		return room_low(cx, l, depth + 1) + pad[0] - (char)depth;
	l->depth = depth;
	return room_call(cx, l);
}

static int64_t room_actor(cbcmn_cx *cx, void *arg)
{
	struct roomcall *l = arg;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &l->n))
		return -100;
	if (l->which == RC_CHAN_RECV || l->which == RC_READ || l->which == RC_AWAIT)
		if (cbcmn_nursery_spawn(cx, l->n, rc_child, l, NULL))
			return -101;
	l->rc = room_low(cx, l, 0);
	return l->which == RC_AWAIT ? 0 : cbcmn_nursery_await_all(cx, l->n); /* awaited once */
}

static int64_t room_task(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) ||
	    cbcmn_actor_spawn(cx, n, room_actor, arg, NULL, &a))
		return -102;
	return cbcmn_nursery_await_all(cx, n);
}

static void test_calls_above_the_line_finish_in_the_reserve(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.stack_size = CBCMN_STACK_MIN;
	cfg.flags = CBCMN_CONFIG_NO_INLINE; /* the await's child on its own stack */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	for (int which = 0; which < RC_N; which++) {
		int ended = 0, returned = 0;
		for (size_t room = 0; room <= 2048; room += 64) {
			struct roomcall l = {.which = which, .rc = 12345, .room = room};
			assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, l.sv), 0);
			assert_int_equal(cbcmn_chan_create(rt, 4, sizeof(int), &l.ch), 0);
			char msg[4096];
			int64_t r = run_quiet(rt, room_task, &l, msg, sizeof(msg));
			if (strstr(msg, " overflowed its "))
				fail_msg("%s with %zu bytes above the line of an %u-byte stack "
					 "overflowed in the runtime: %s",
					 rc_name[which], room, CBCMN_STACK_MIN, msg);
			if (r == 0 && l.rc == 0) {
				returned++;
			} else if (r == CBCMN_EPANIC && l.rc == 12345 &&
				   strstr(msg, "is about to overflow its 8192-byte stack")) {
				ended++; /* its check ended it: the call never returned */
			} else {
				fail_msg("%s with %zu bytes above the line: the task %lld, the call "
					 "%d; %s",
					 rc_name[which], room, (long long)r, l.rc, msg);
			}
			assert_true(l.depth > 0);
			assert_int_equal(cbcmn_chan_destroy(l.ch), 0);
			close(l.sv[0]);
			close(l.sv[1]);
			if (room == 2048 && r != 0)
				fail_msg("%s with 2 KiB above the line was refused", rc_name[which]);
		}
		print_message("%-32s returned %2d, ended by its check %2d\n", rc_name[which],
			      returned, ended);
	}
	t_destroy(rt);
}

/* Regression (s16-misc16): the check ignored a frame below the guard region,
 * taking it for another thread's (a cbcmn_blocking() function handed the
 * task's cx).  A task's own frame gets there in one step too: a big array
 * the function does not touch yet (char buf[64 KiB] for a read, with no
 * stack-clash probes: gcc's default here).  Such a runtime call ran on the
 * memory below the guard, the next stack's, as if nothing were wrong.  On
 * the task's fiber it ends the task, as before. */
static int64_t past_guard_rc = 12345;
/* The bytes below the big frame, in the next stack: marked before the
 * call.  The line an ending task says wrote there too: 616 bytes (session
 * 17); said at the landing pad now, the call and the jump take 152. */
#define PAST_GUARD_MARKED 4096
#define PAST_GUARD_MAY_WRITE 256
static char *past_guard_mark;

__attribute__((noinline)) static int64_t yield_far_below(cbcmn_cx *cx, size_t drop)
{
	char *big = __builtin_alloca(drop); /* nothing in it is touched */
	__asm__ __volatile__("" : : "r"(big) : "memory");
	past_guard_rc = cbcmn_yield(cx); /* must not return */
	return 0;
}

static int64_t past_guard_task(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct cbcmn__stack *s = stack_of(cx);
	char *target = s->guard_lo - 16 * 1024; /* the next stack's, not its top */
	char perms[5];
	uintptr_t end;
	if (!t_maps_perms(target, perms, &end) || strcmp(perms, "rw-p") != 0)
		return 77; /* no stack below ours here */
	size_t drop = (size_t)((char *)__builtin_frame_address(0) - target);
	/* The frames below the call's own are the runtime's: marked, to
	 * see how far down it wrote (past_guard_written()). */
	past_guard_mark = target - PAST_GUARD_MARKED;
	memset(past_guard_mark, 0xa5, PAST_GUARD_MARKED);
	return yield_far_below(cx, drop);
}

/* How many bytes below the call's frame (target) the runtime wrote. */
static size_t past_guard_written(void)
{
	size_t i = 0;
	while (i < PAST_GUARD_MARKED && (unsigned char)past_guard_mark[i] == 0xa5)
		i++;
	return PAST_GUARD_MARKED - i;
}

static int past_guard_child(void)
{
	cbcmn_runtime *rt = t_runtime(1);
	int64_t r = 0;
	int saved, fd = t_stderr_capture(&saved);
	char msg[4096];
	int rc = cbcmn_runtime_run(rt, past_guard_task, NULL, &r);
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	if (rc != 0)
		return 2;
	if (r == 77)
		return 77;
	if (r != CBCMN_EPANIC || past_guard_rc != 12345 || !strstr(msg, "about to overflow"))
		return 3;
	if (past_guard_written() > PAST_GUARD_MAY_WRITE)
		return 4;
	return 0;
}

static void test_a_frame_past_the_guard_still_ends_the_task(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	if (T_ASAN) {
		T_SKIP("ASan's alloca redzones would be written into the next stack's shadow");
		return;
	}
	pid_t pid = t_fork_coreless();
	if (pid == 0) {
		alarm(60);
		_exit(past_guard_child());
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
		T_SKIP("no stack mapped below the task's");
		return;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("child: %s %d (3: the call ran below the guard; 4: it said so there)",
			 WIFSIGNALED(st) ? "killed by signal" : "exit status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/* ---- a thread that ends while a landing closes the task's nurseries ---- */

/* The landing relaxes the stack's check bound while it cancels and awaits
 * the nurseries the task left open, and sets it back after.  An actor
 * child that never started is halted there, inline on the task's stack,
 * and its drop may end the thread: the reaper then ended the task and the
 * stack went back to the pool with the relaxed bound, half the reserve a
 * runtime call keeps for the next task on it (rvlines21). */
static struct cbcmn__stack *relaxed_stack;

static void exit_in_drop(void *state, const cbcmn_actor_msg *m)
{
	(void)state;
	(void)m;
	pthread_exit(NULL);
}

static int64_t never_runs(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t overflow_with_an_actor_open(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	relaxed_stack = ((struct cbcmn_task *)cx)->stack;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_actor_opts o = {.drop = exit_in_drop};
	cbcmn_actor_ref a;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, never_runs, NULL, &o, &a) == 0);
	cbcmn_actor_msg m = {.type = 1};
	TASK_CHECK(cbcmn_actor_try_send(cbcmn_cx_runtime(cx), cx, a, &m) == 0);
	return t_recurse(NULL, 0); /* lands; the nursery is closed there */
}

static void test_a_thread_ending_in_a_landing_resets_the_stack_bound(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) { /* as test_recstack's thread death */
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
		return;
	}
	int saved, fd = t_stderr_capture(&saved);
	cbcmn_runtime *rt = t_runtime(1);
	int64_t r = 0;
	int rc = cbcmn_runtime_run(rt, overflow_with_an_actor_open, NULL, &r);
	char msg[1024];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_int_equal(rc, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, CBCMN_EPANIC);
	assert_non_null(strstr(msg, "thread ended under task"));
	/* Back in the pool, with a fresh stack's bound. */
	struct cbcmn__stack *s = relaxed_stack;
	size_t reserve = s->size / 4 < 8192 ? s->size / 4 : 8192;
	assert_ptr_equal(s->check_lo, s->lo + reserve);
	t_destroy(rt);
}

/* ---- the landing pad restores the signal mask and the FP state ----------- */

static void on_signal_overflow(int sig)
{
	(void)sig;
	t_recurse(NULL, 0);
}

static sigset_t mask_before, mask_after;

/* arg: the signal to overflow in.  SIGILL comes from a frame of our own;
 * SIGUSR1, from raise(), leaves a C library frame under the handler, which
 * cannot finish: the task ends anyway. */
static int64_t signal_overflow(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	pthread_sigmask(SIG_BLOCK, NULL, &mask_before);
	if ((intptr_t)arg == SIGILL)
		__asm__ __volatile__("ud2");
	else
		raise((int)(intptr_t)arg);
	return -1;
}

static int64_t read_mask(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	pthread_sigmask(SIG_BLOCK, NULL, &mask_after);
	return 0;
}

static void mask_case(int sig)
{
	struct sigaction sa = {.sa_handler = on_signal_overflow}, old;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR2);
	assert_int_equal(sigaction(sig, &sa, &old), 0);
	cbcmn_runtime *rt = t_runtime(1);
	char msg[4096];
	int64_t r = run_quiet(rt, signal_overflow, (void *)(intptr_t)sig, msg, sizeof(msg));
	printf("  %s: %s", strsignal(sig), msg);
	assert_int_equal(r, CBCMN_EPANIC);
	assert_int_equal(cbcmn_runtime_run(rt, read_mask, NULL, &r), 0);
	if (sigismember(&mask_after, sig) || sigismember(&mask_after, SIGUSR2))
		fail_msg("the executor still blocks %s%s after the landing",
			 sigismember(&mask_after, sig) ? strsignal(sig) : "",
			 sigismember(&mask_after, SIGUSR2) ? " SIGUSR2" : "");
	for (int s = 1; s < NSIG; s++)
		if (sigismember(&mask_before, s) != sigismember(&mask_after, s))
			fail_msg("signal %d: blocked %d before, %d after", s,
				 sigismember(&mask_before, s), sigismember(&mask_after, s));
	t_destroy(rt);
	sigaction(sig, &old, NULL);
}

/* Regression: a handler of the program's (blocking SIGUSR2 too) that
 * overflowed the fiber stack left its mask on the executor thread: its
 * signal and SIGUSR2 stayed blocked there for good. */
static void test_landing_restores_the_signal_mask(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	mask_case(SIGILL);
	mask_case(SIGUSR1);
}

/* A program that blocks every signal in its main thread (to take them
 * with sigwait(2) in one thread of its own) and then makes its runtime:
 * the executors took that mask, SIGSEGV blocked, and the kernel kills a
 * thread that faults with SIGSEGV blocked (resetting the handler first):
 * a task's stack overflow killed the process instead of ending the task
 * with CBCMN_EPANIC.  An executor never blocks SIGSEGV. */
static int overflow_with_every_signal_blocked(void)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.min_workers = 1; /* executor 1 is started by the runtime, later */
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(&cfg, &rt))
		return 10;
	for (uint32_t shard = 0; shard < 2; shard++) {
		if (t_run_pinned(rt, shard, overflow_task, NULL) != CBCMN_EPANIC)
			return 11 + (int)shard;
	}
	/* The program's own mask is left as it set it. */
	sigset_t now;
	pthread_sigmask(SIG_BLOCK, NULL, &now);
	if (!sigismember(&now, SIGSEGV))
		return 13;
	return cbcmn_runtime_destroy(rt) ? 14 : 0;
}

static void test_regression_overflow_with_every_signal_blocked_by_the_creator_is_a_panic(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	in_child(overflow_with_every_signal_blocked, 0);
}

#define MXCSR_RC_DOWN 0x2000u
#define MXCSR_RC_UP 0x4000u
#define CW_DOUBLE 0x027fu /* x87: 53-bit precision, all masked */
#define CW_SINGLE 0x007fu

/* MXCSR | x87 CW << 32, as arch.h reads and loads it. */
#define FPCW(mxcsr, cw) ((uint64_t)(mxcsr) | (uint64_t)(cw) << 32)
#define FPCW_CONTROL FPCW(0xffc0u, 0xffffu) /* without MXCSR's sticky flags */

/* how 0: overflow into the guard; how 1: change the FP mode first; how 2:
 * change it, then run out of stack in runtime calls (no signal). */
static int64_t fp_child(cbcmn_cx *cx, void *arg)
{
	int how = (int)(intptr_t)arg;
	if (how >= 1)
		cbcmn__fpcw_write(FPCW(0x1f80u | MXCSR_RC_DOWN, CW_SINGLE));
	if (how == 2) {
		for (;;) {
			volatile char pad[300];
			pad[0] = 1;
			(void)pad[0];
			cbcmn_yield(cx); /* checks the stack each time */
			/* Deeper, without a real recursion: alloca-like. */
			char *volatile sink_ = __builtin_alloca(1024);
			sink_[0] = 0;
		}
	}
	return t_recurse(NULL, 0);
}

struct fp_seen {
	uint64_t fpcw;
	int64_t child;
};

static int64_t fp_parent(cbcmn_cx *cx, void *arg)
{
	struct fp_seen *seen = arg;
	int how = (int)seen->child;
	cbcmn__fpcw_write(FPCW(0x1f80u | MXCSR_RC_UP, CW_DOUBLE));
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -1;
	cbcmn_nursery_spawn(cx, n, fp_child, (void *)(intptr_t)how, NULL);
	seen->child = cbcmn_nursery_await_all(cx, n); /* runs it inline */
	seen->fpcw = cbcmn__fpcw_read() & FPCW_CONTROL;
	cbcmn__fpcw_write(CBCMN__FPCW_DEFAULT);
	return 0;
}

/* Regression: a child run inline on its parent's stack (no switch) that
 * overflowed came back to the parent with the FP control state the kernel
 * gives a signal handler (round to nearest, extended precision), or with
 * the mode the child had set: the parent's rounding mode was lost. */
static void test_landing_restores_the_parents_fp_mode(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	cbcmn_runtime *rt = t_runtime(1);
	for (int how = 0; how < 3; how++) {
		struct fp_seen seen = {.child = how};
		char msg[4096];
		int64_t r = run_quiet(rt, fp_parent, &seen, msg, sizeof(msg));
		assert_int_equal(r, 0);
		assert_int_equal(seen.child, CBCMN_EPANIC);
		if (seen.fpcw != FPCW(0x1f80u | MXCSR_RC_UP, CW_DOUBLE))
			fail_msg("case %d: parent sees MXCSR %#x CW %#x after the child landed, "
				 "set %#x %#x",
				 how, (unsigned)seen.fpcw, (unsigned)(seen.fpcw >> 32),
				 0x1f80u | MXCSR_RC_UP, CW_DOUBLE);
	}
	cbcmn_stats st;
	cbcmn_stats_snapshot(rt, &st, NULL, 0);
	assert_true(st.total.inline_runs >= 3); /* the children really ran inline */
	t_destroy(rt);
}

static int64_t nop(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

/* fn overflows: it ends with CBCMN_EPANIC saying want, and the runtime
 * goes on. */
static void overflow_lands(cbcmn_task_fn fn, const char *want)
{
	cbcmn_runtime *rt = t_runtime(1);
	char msg[4096];
	int64_t r = run_quiet(rt, fn, NULL, msg, sizeof(msg));
	printf("  %s", msg);
	assert_int_equal(r, CBCMN_EPANIC);
	assert_non_null(strstr(msg, want));
	assert_int_equal(run_quiet(rt, nop, NULL, msg, sizeof(msg)), 0);
	t_destroy(rt);
}

/* A runtime whose stacks are guarded the mprotect way when prot is set
 * (as before Linux 6.13), else the default way. */
static cbcmn_runtime *runtime_guarded(bool prot, uint32_t flags)
{
	cbcmn__stack_test_no_lightweight_guards = prot;
	cbcmn_runtime *rt = t_runtime_flags(1, flags);
	cbcmn__stack_test_no_lightweight_guards = false;
	return rt;
}

/* ---- an overflow inside the C library -------------------------------------- */

static FILE *sink;

/* Each level prints: the frames fprintf needs reach far below this small
 * frame, so it is vfprintf that touches the guard first, holding sink's
 * lock. */
static int64_t print_down(int64_t depth)
{
	volatile char pad[16];
	pad[0] = (char)depth;
	fprintf(sink, "%ld %.3f\n", (long)depth, (double)depth * 1.5);
	if (depth >= t_depth_limit)
		return 0;
	return print_down(depth + 1) + pad[0];
}

static int64_t printer(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return print_down(0);
}

static void print_after(void *arg)
{
	(void)arg;
	fprintf(sink, "after\n");
	fflush(sink);
}

static void vfprintf_case(bool prot)
{
	cbcmn_runtime *rt = runtime_guarded(prot, 0);
	sink = fopen("/dev/null", "w");
	assert_non_null(sink);
	char msg[4096];
	int64_t r = run_quiet(rt, printer, NULL, msg, sizeof(msg));
	printf("  %s: %s", prot ? "mprotect guards" : "default guards", msg);
	assert_int_equal(r, CBCMN_EPANIC);
	assert_non_null(strstr(msg, "overflowed its 65536-byte stack inside "));
	assert_non_null(strstr(msg, "the call finishes in the stack's reserve"));
	/* sink's lock was released: another thread can print. */
	if (!run_bounded(print_after, NULL, 10))
		fail_msg("fprintf from another thread hangs: the overflow left sink locked");
	/* And the executor goes on, its stack guarded again. */
	assert_int_equal(run_quiet(rt, printer, NULL, msg, sizeof(msg)), CBCMN_EPANIC);
	assert_non_null(strstr(msg, "the call finishes in the stack's reserve"));
	assert_true(run_bounded(print_after, NULL, 10));
	fclose(sink);
	t_destroy(rt);
}

/* Regression: an overflow inside vfprintf jumped to the landing pad with
 * the FILE's lock held, and the next fprintf from another thread hung. */
static void test_overflow_inside_vfprintf_leaves_no_lock_held(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	vfprintf_case(false);
	vfprintf_case(true);
}

/* A library call that never returns to where the handler expects (a
 * callback that longjmps out of qsort): the task ends at its next runtime
 * call, or when it returns. */
static jmp_buf cmp_escape;
static struct cbcmn__stack *cmp_stack;
static int cmp_calls;

/* Recurse until a few KiB below the stack's lo: into the yellow zone, which
 * the handler opens because qsort is on the way up. */
static int64_t dive(int64_t depth)
{
	volatile char pad[256];
	pad[0] = (char)depth;
	if ((char *)__builtin_frame_address(0) < cmp_stack->lo - 4096 || depth >= t_depth_limit)
		return pad[0];
	return dive(depth + 1) + pad[0];
}

static int cmp_escaping(const void *a, const void *b)
{
	cmp_calls++;
	dive(0);
	longjmp(cmp_escape, 1);
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static int cmp_diving(const void *a, const void *b)
{
	cmp_calls++;
	dive(0);
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static int64_t sorter(cbcmn_cx *cx, void *arg)
{
	int how = (int)(intptr_t)arg;
	int v[2] = {2, 1};
	cmp_stack = stack_of(cx);
	if (how == 0) {
		qsort(v, 2, sizeof(int), cmp_diving);
		return -1; /* never: qsort's return ends the task */
	}
	if (setjmp(cmp_escape) == 0)
		qsort(v, 2, sizeof(int), cmp_escaping);
	TASK_CHECK(cmp_stack->yellow_open);
	if (how == 1)
		cbcmn_yield(cx); /* ends here */
	return -2; /* how 2: ends on its way out */
}

static void test_overflow_under_a_library_call_ends_when_it_returns(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	cbcmn_runtime *rt = t_runtime(1);
	for (int how = 0; how < 3; how++) {
		char msg[4096];
		cmp_calls = 0;
		int64_t r = run_quiet(rt, sorter, (void *)(intptr_t)how, msg, sizeof(msg));
		ASSERT_TASK_CHECKS();
		assert_int_equal(r, CBCMN_EPANIC);
		assert_true(cmp_calls >= 1); /* ASan's qsort calls it twice */
		assert_non_null(strstr(msg, "stack inside lib")); /* libc, or ASan's qsort */
		assert_null(strstr(msg, "about to overflow")); /* said once */
		assert_false(cmp_stack->yellow_open);
	}
	t_destroy(rt);
}

/* The yellow zone is spent and the library's frames are still there: the
 * task ends anyway, and says that a lock may stay held. */
static int cmp_forever(const void *a, const void *b)
{
	cmp_calls++;
	t_recurse(NULL, 0);
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static int64_t sorter_forever(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	int v[2] = {2, 1};
	qsort(v, 2, sizeof(int), cmp_forever);
	return -1;
}

static void test_overflow_past_the_reserve_under_a_library_call(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	overflow_lands(sorter_forever, "with no room left for the call to finish; it ends with "
				       "CBCMN_EPANIC, and a lock that library held may stay held");
}

/* A frame whose saved frame pointer was overwritten: the unwinder reads
 * its caller at a wild address and faults, inside our handler, which used
 * to kill the process. */
__attribute__((noinline, optimize("no-omit-frame-pointer"))) static int64_t smash_then_overflow(void)
{
	volatile char pad[64];
	pad[0] = 1;
	__asm__ __volatile__("movq $0x1000, (%%rbp)" : : : "memory"); /* the caller's rbp */
	return t_recurse(NULL, 0) + pad[0];
}

__attribute__((noinline, optimize("no-omit-frame-pointer"))) static int64_t fp_caller(void)
{
	volatile char pad[64];
	pad[0] = 1;
	return smash_then_overflow() + pad[0];
}

static int64_t smashed_task(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return fp_caller();
}

static void test_overflow_over_a_smashed_frame_still_lands(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	overflow_lands(smashed_task, "over frames the unwinder could not read");
}

/* Regression: an unwind that starts while a library call finishes in the
 * reserve (a C++ throw that overflowed in __cxa_throw or in the loader's
 * lazy binding of it) reads the return address the handler replaced and
 * found a frame with no caller: the throw found no catch and
 * std::terminate aborted the whole process.  Here a forced unwind under
 * qsort (a libc frame above it, so the address is replaced) overflows in
 * the lazy binding of _Unwind_ForcedUnwind or in the unwinder: it must be
 * caught where the call would return, and the task end there. */
static jmp_buf unw_env;
static uintptr_t unw_target;
static volatile int unw_truncated;

static _Unwind_Reason_Code unw_stop(int version, _Unwind_Action actions, _Unwind_Exception_Class cls,
				    struct _Unwind_Exception *exc, struct _Unwind_Context *ctx,
				    void *arg)
{
	(void)version;
	(void)cls;
	(void)exc;
	(void)arg;
	if (actions & _UA_END_OF_STACK)
		unw_truncated = 1; /* it never reached sorter's frame */
	if ((actions & _UA_END_OF_STACK) || _Unwind_GetCFA(ctx) > unw_target)
		longjmp(unw_env, 1);
	return _URC_NO_REASON;
}

/* Recurse to 1 KiB above lo, then unwind: the unwinder's frames overflow. */
static int64_t unwind_low(int64_t depth)
{
	volatile char pad[256];
	pad[0] = (char)depth;
	if ((char *)__builtin_frame_address(0) < cmp_stack->lo + 1024 || depth >= t_depth_limit) {
		static struct _Unwind_Exception exc;
		exc.exception_class = 0x6362636d6e000000ull;
		exc.exception_cleanup = NULL;
		_Unwind_ForcedUnwind(&exc, unw_stop, NULL);
		return -1;
	}
	return unwind_low(depth + 1) + pad[0];
}

static int cmp_unwinding(const void *a, const void *b)
{
	cmp_calls++;
	unwind_low(0);
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static int64_t unwinding_sorter(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	volatile char marker = 0;
	int v[2] = {2, 1};
	cmp_stack = stack_of(cx);
	unw_target = (uintptr_t)&marker;
	if (setjmp(unw_env) == 0)
		qsort(v, 2, sizeof(int), cmp_unwinding);
	return -3 + marker; /* the unwind reached here: it never overflowed */
}

static void test_an_unwind_through_the_replaced_return_ends_the_task(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	cbcmn_runtime *rt = t_runtime(1);
	char msg[4096];
	unw_truncated = 0;
	cmp_calls = 0;
	int64_t r = run_quiet(rt, unwinding_sorter, NULL, msg, sizeof(msg));
	printf("  %s", msg);
	if (unw_truncated)
		fail_msg("the unwinder met the replaced return address and stopped short");
	assert_int_equal(r, CBCMN_EPANIC);
	assert_non_null(strstr(msg, "the call finishes in the stack's reserve"));
	assert_false(cmp_stack->yellow_open);
	assert_int_equal(run_quiet(rt, nop, NULL, msg, sizeof(msg)), 0);
	t_destroy(rt);
}

/* Regression: with frames registered (__register_frame_info: a JIT's),
 * libgcc's FDE lookup holds its object_mutex; an overflow under it (the
 * first lookup after a registration sorts the object, calling malloc) sent
 * the handler's walk into the same lookup: the executor waited for its own
 * lock for ever.  Each margin is a run whose first lookup starts that many
 * bytes above lo: some overflow under the lock. */
extern void __register_frame_info(const void *begin, void *ob);
extern void *__deregister_frame_info(const void *begin);

static const void *own_eh_frame;
static long unw_margin;

static int find_eh_frame(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		if (info->dlpi_phdr[i].p_type != PT_GNU_EH_FRAME)
			continue;
		const unsigned char *hdr =
			(const unsigned char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
		int32_t off; /* eh_frame_ptr: DW_EH_PE_pcrel | DW_EH_PE_sdata4 */
		if (hdr[1] != 0x1b)
			return 1;
		memcpy(&off, hdr + 4, sizeof(off));
		own_eh_frame = hdr + 4 + off;
		return 1;
	}
	return 1; /* the program is first */
}

static _Unwind_Reason_Code count_frame(struct _Unwind_Context *ctx, void *arg)
{
	(void)ctx;
	++*(int *)arg;
	return _URC_NO_REASON;
}

static int64_t lookup_low(int64_t depth)
{
	volatile char pad[64];
	pad[0] = (char)depth;
	if ((char *)__builtin_frame_address(0) < cmp_stack->lo + unw_margin ||
	    depth >= t_depth_limit) {
		int n = 0;
		_Unwind_Backtrace(count_frame, &n);
		return n;
	}
	return lookup_low(depth + 1) + pad[0];
}

static int64_t lookup_task(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cmp_stack = stack_of(cx);
	return lookup_low(0);
}

static int overflow_under_the_unwinders_lock(void)
{
	alarm(30); /* a hang is the failure */
	dl_iterate_phdr(find_eh_frame, NULL);
	if (!own_eh_frame)
		return 2;
	cbcmn_runtime *rt = t_runtime(1);
	int saved, fd = t_stderr_capture(&saved);
	int bad = 0;
	for (unw_margin = 100; unw_margin < 3000 && !bad; unw_margin += 40) {
		static char ob[256]; /* libgcc's struct object, opaque */
		memset(ob, 0, sizeof(ob));
		__register_frame_info(own_eh_frame, ob);
		int64_t r = 0;
		if (cbcmn_runtime_run(rt, lookup_task, NULL, &r) != 0 || (r < 0 && r != CBCMN_EPANIC))
			bad = 1;
		__deregister_frame_info(own_eh_frame);
	}
	char msg[8192];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	t_destroy(rt);
	return bad ? 3 : 0;
}

static void test_overflow_under_the_unwinders_lock_does_not_hang(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	in_child(overflow_under_the_unwinders_lock, 0);
}

/* Regression: a frame without unwind info ends the walk early, and a
 * library call above it (here vfprintf, holding the FILE's lock, running
 * a fopencookie write function) went unseen: the task ended saying
 * nothing of the lock it left held. */
void noinfo_call(void (*fn)(void));
__asm__("	.text\n"
	"	.globl	noinfo_call\n"
	"	.type	noinfo_call,@function\n"
	"noinfo_call:\n" /* no CFI: the unwinder cannot get past this frame */
	"	subq	$8, %rsp\n"
	"	call	*%rdi\n"
	"	addq	$8, %rsp\n"
	"	ret\n"
	"	.size	noinfo_call,.-noinfo_call\n");

static void recurse_void(void)
{
	t_recurse(NULL, 0);
}

/* Dives once: the FILE stays behind (its lock held by the task that
 * ended), and exit's flush must not dive on the main stack. */
static bool cookie_dived;

static ssize_t cookie_write(void *cookie, const char *buf, size_t len)
{
	(void)cookie;
	(void)buf;
	if (!cookie_dived) {
		cookie_dived = true;
		noinfo_call(recurse_void);
	}
	return (ssize_t)len;
}

static int64_t cookie_writer(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	FILE *f = fopencookie(NULL, "w", (cookie_io_functions_t){.write = cookie_write});
	TASK_CHECK(f != NULL);
	setvbuf(f, NULL, _IONBF, 0);
	fprintf(f, "x");
	return -1;
}

static void test_overflow_above_unreadable_frames_says_a_lock_may_stay_held(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	if (T_FAKE_STACKS) {
		/* Its premise is the recursion's frames on the task's stack
		 * above noinfo_call's; with fake stacks t_recurse's pads live
		 * in libasan's fake frames, and the guard is hit in libasan's
		 * fake-frame allocator, whose frames the walk reads. */
		T_SKIP("ASan's fake stacks: the overflow lands in libasan's fake-frame "
		       "allocator, not above the frame the unwinder cannot read");
		return;
	}
	overflow_lands(cookie_writer, "over frames the unwinder could not read; it ends with "
				      "CBCMN_EPANIC, and a lock a library held there may stay held");
}

/* Regression: a process that locks its memory after the runtime started
 * (mlockall: a latency-bound server, after its set-up) cannot put the
 * lightweight guard back on a stack's yellow zone (MADV_GUARD_INSTALL
 * refuses a VM_LOCKED mapping).  The zone stayed open for good, and every
 * later task on that stack that returned normally ended with
 * CBCMN_EPANIC. */
static int64_t stack_is_closed(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	return stack_of(cx)->yellow_open ? 1 : 0;
}

static void test_yellow_zone_closes_in_a_locked_process(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	if (T_ASAN) {
		T_SKIP("mlockall would commit ASan's shadow");
		return;
	}
	cbcmn_runtime *rt = t_runtime(1);
	sink = fopen("/dev/null", "w");
	assert_non_null(sink);
	char msg[4096];
	assert_int_equal(run_quiet(rt, nop, NULL, msg, sizeof(msg)), 0); /* a stack made */
	if (mlockall(MCL_CURRENT) != 0) {
		T_SKIP("mlockall: cannot lock memory here (RLIMIT_MEMLOCK)");
		fclose(sink);
		t_destroy(rt);
		return;
	}
	int64_t r = run_quiet(rt, printer, NULL, msg, sizeof(msg));
	int64_t after = run_quiet(rt, nop, NULL, msg, sizeof(msg));
	int64_t open = run_quiet(rt, stack_is_closed, NULL, msg, sizeof(msg));
	/* Guarded the other way now: the next overflow is caught the same. */
	int64_t again = run_quiet(rt, printer, NULL, msg, sizeof(msg));
	bool deferred = strstr(msg, "the call finishes in the stack's reserve") != NULL;
	int64_t after_again = run_quiet(rt, nop, NULL, msg, sizeof(msg));
	munlockall();
	fclose(sink);
	t_destroy(rt);
	assert_int_equal(r, CBCMN_EPANIC);
	assert_int_equal(after, 0);
	assert_int_equal(open, 0);
	assert_int_equal(again, CBCMN_EPANIC);
	assert_true(deferred);
	assert_int_equal(after_again, 0);
}

/* ---- a receive with little stack left ----------------------------------------- */

/* An actor that takes the stack down to about *room bytes above lo (or as
 * far as it goes), then waits for ever in a receive: its first wait in its
 * nursery. */
static __attribute__((noinline)) int64_t receive_low(cbcmn_cx *cx, size_t n)
{
	volatile char *p = __builtin_alloca(n);
	for (size_t i = n; i >= 512; i -= 512)
		p[i - 1] = 1; /* top down: the guard is hit first */
	p[0] = 1;
	cbcmn_actor_msg m;
	return cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
}

static int64_t receives_low(cbcmn_cx *cx, void *arg)
{
	size_t room = *(size_t *)arg;
	char *here = __builtin_frame_address(0);
	size_t above = (size_t)(here - stack_of(cx)->lo);
	return receive_low(cx, above > room + 256 ? above - room - 256 : 16);
}

static int64_t receive_sweep(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	static size_t rooms[512];
	int64_t panics = 0;
	for (int i = 0; i < 512; i++) {
		rooms[i] = (size_t)i * 16;
		cbcmn_nursery *n;
		cbcmn_actor_ref a;
		if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) ||
		    cbcmn_actor_spawn(cx, n, receives_low, &rooms[i], NULL, &a))
			return -1000;
		cbcmn_sleep(cx, 200000);
		cbcmn_actor_msg m = {.type = 1};
		cbcmn_actor_send_timeout(NULL, cx, a, &m, 100000000); /* wakes it if it waits */
		int64_t r = cbcmn_nursery_await_all(cx, n);
		if (r != 0 && r != CBCMN_EPANIC)
			return -2000 - i;
		panics += r == CBCMN_EPANIC;
	}
	cbcmn_stats ss;
	cbcmn_executor_stats per[1];
	if (cbcmn_stats_snapshot(cbcmn_cx_runtime(cx), &ss, per, 1) || per[0].actors_receiving)
		return -3000;
	return panics;
}

/* Regression (s19-rvcold1): under ASan a forever receive on an 8 KiB stack,
 * with the quarter's 2 KiB left, overflowed in the sanitizer's malloc of
 * its nursery's scope, called with the scope lock held (iwait.c); taken for
 * a library call's overflow, it ended the task as that malloc returned
 * into the runtime, the lock held: "acquiring scope while holding scope",
 * then a wild jump.  Every room left ends the receive woken or the task
 * with CBCMN_EPANIC, nothing left counted. */
static void test_a_receive_low_on_stack_never_lands_in_the_runtime(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.stack_size = CBCMN_STACK_MIN;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	char msg[256];
	int64_t r = run_quiet(rt, receive_sweep, NULL, msg, sizeof(msg));
	print_message("%lld of 512 rooms ended in CBCMN_EPANIC\n", (long long)r);
	assert_true(r > 0 && r < 512); /* some woken, some ended: the sweep spans the line */
	t_destroy(rt);
}

/* Regression (the stack check's bound kept in the task record,
 * stack_room): after an overflow in a library opened the yellow zone,
 * the task's next runtime call ends it, even though its earlier calls
 * had passed the check from the record alone. */
static atomic_bool yellow_call_returned;

static int64_t yellow_then_yield(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	TASK_CHECK(cbcmn_yield(cx) == 0);
	TASK_CHECK(cbcmn__task_yellow_open(t) == 0);
	cbcmn_yield(cx);
	/* Not here: the return would end it too (sched.c), too late. */
	atomic_store(&yellow_call_returned, true);
	return 7;
}

static void test_a_runtime_call_after_the_yellow_zone_opened_ends_the_task(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	cbcmn_runtime *rt = t_runtime(1);
	int64_t r = 0;
	assert_int_equal(cbcmn_runtime_run(rt, yellow_then_yield, NULL, &r), 0);
	assert_int_equal(r, CBCMN_EPANIC);
	assert_false(atomic_load(&yellow_call_returned));
	t_destroy(rt);
}

/* The stack check's bound kept in the task record (stack_room): a runtime
 * call at every level of a recursion refreshes it on the way down, and
 * the first call below the bound still ends the task; on two executors
 * (a yield may move it), as a root and as an inline child (then its
 * parent on the same stack), with records in stacks or not. */
static atomic_int dive_calls_below_bound;
static atomic_bool dive_ran_inline;

static int64_t dive_each(cbcmn_cx *cx, int depth)
{
	volatile char pad[96];
	pad[0] = (char)depth;
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	if (cbcmn_yield(cx) != 0)
		return -1;
	/* Returned from a call below the bound: the check let it through. */
	if ((char *)__builtin_frame_address(0) < t->stack->check_lo)
		atomic_fetch_add(&dive_calls_below_bound, 1);
	return dive_each(cx, depth + 1) + pad[0];
}

static int64_t dive_each_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	if (((struct cbcmn_task *)cx)->inline_parent)
		atomic_store(&dive_ran_inline, true);
	return dive_each(cx, 0);
}

static int64_t dive_each_parent(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -100;
	cbcmn_task *h;
	if (cbcmn_nursery_spawn(cx, n, dive_each_root, NULL, &h))
		return -101;
	int64_t r = 0;
	if (cbcmn_task_join(cx, h, &r))
		return -102;
	cbcmn_nursery_await_all(cx, n);
	/* The parent goes on, deeper itself, after its inline child ended. */
	int64_t me = dive_each(cx, 0);
	return r == CBCMN_EPANIC ? me : -103;
}

static void test_a_call_at_every_level_ends_the_task_at_the_bound(void **state)
{
	(void)state;
	SKIP_UNDER_TSAN();
	for (int flags = 0; flags < 2; flags++) {
		for (int inl = 0; inl < 2; inl++) {
			cbcmn_config cfg;
			cbcmn_config_init(&cfg);
			cfg.workers = 2;
			cfg.flags = flags ? CBCMN_CONFIG_RECORD_IN_STACK : 0;
			cbcmn_runtime *rt = t_runtime_cfg(&cfg);
			char msg[4096];
			atomic_store(&dive_calls_below_bound, 0);
			atomic_store(&dive_ran_inline, false);
			int64_t r = run_quiet(rt, inl ? dive_each_parent : dive_each_root, NULL, msg,
					     sizeof(msg));
			assert_int_equal(r, CBCMN_EPANIC);
			assert_int_equal(atomic_load(&dive_calls_below_bound), 0);
			assert_non_null(strstr(msg, "is about to overflow"));
			assert_int_equal(atomic_load(&dive_ran_inline), inl);
			t_destroy(rt);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_a_thread_ending_in_a_landing_resets_the_stack_bound),
		T_WATCHED_TEST(test_chaining_survives_a_handler_that_siglongjmps),
		T_WATCHED_TEST(test_a_handler_that_chains_back_dies_of_the_fault),
		T_WATCHED_TEST(test_a_chained_handler_that_faults_dies_of_it),
		T_WATCHED_TEST(test_altstack_has_a_guard_page),
		T_WATCHED_TEST(test_no_task_runs_on_an_unguarded_stack),
		T_WATCHED_TEST(test_kept_end_stacks_leave_the_budget_to_tasks),
		T_WATCHED_TEST(test_locking_calls_check_the_stack_first),
		T_WATCHED_TEST(test_actor_send_and_receive_check_the_stack_first),
		T_WATCHED_TEST(test_calls_above_the_line_finish_in_the_reserve),
		T_WATCHED_TEST(test_a_frame_past_the_guard_still_ends_the_task),
		T_WATCHED_TEST(test_a_call_on_another_stack_is_not_an_overflow),
		T_WATCHED_TEST(test_landing_restores_the_signal_mask),
		T_WATCHED_TEST(test_regression_overflow_with_every_signal_blocked_by_the_creator_is_a_panic),
		T_WATCHED_TEST(test_landing_restores_the_parents_fp_mode),
		T_WATCHED_TEST(test_landing_never_lands_again),
		T_WATCHED_TEST(test_overflow_inside_vfprintf_leaves_no_lock_held),
		T_WATCHED_TEST(test_overflow_under_a_library_call_ends_when_it_returns),
		T_WATCHED_TEST(test_overflow_past_the_reserve_under_a_library_call),
		T_WATCHED_TEST(test_overflow_over_a_smashed_frame_still_lands),
		T_WATCHED_TEST(test_an_unwind_through_the_replaced_return_ends_the_task),
		T_WATCHED_TEST(test_overflow_under_the_unwinders_lock_does_not_hang),
		T_WATCHED_TEST(test_overflow_above_unreadable_frames_says_a_lock_may_stay_held),
		T_WATCHED_TEST(test_yellow_zone_closes_in_a_locked_process),
		T_WATCHED_TEST(test_a_receive_low_on_stack_never_lands_in_the_runtime),
		T_WATCHED_TEST(test_a_runtime_call_after_the_yellow_zone_opened_ends_the_task),
		T_WATCHED_TEST(test_a_call_at_every_level_ends_the_task_at_the_bound),
	};
	return cmocka_run_group_tests_name("overflow", tests, NULL, NULL);
}
