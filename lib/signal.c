/* signal.c: the SIGSEGV handler: installing it, telling a fiber stack
 * overflow (overflow.c) from any other fault, and passing those on to the
 * handler installed before ours; the executors' alternate signal stacks.
 *
 * Every executor thread has an alternate signal stack (with a guard page of
 * its own), so the handler runs even when the fault was "no stack left".
 * Any fault that is not an overflow goes to the previous handler, or to the
 * default action.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "overflow.h"
#include "runtime.h"

static struct sigaction old_segv;

/* ---- passing other faults on ------------------------------------------------ */

/* Die of sig: its default action, set straight in the kernel (a
 * sanitizer's signal() interceptor may keep its own handler in place, and
 * the fault would come back for ever).  The faulting instruction runs
 * again and the process dies as it should. */
static void default_action(int sig)
{
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		uint64_t mask;
	} dfl = {SIG_DFL, 0, NULL, 0};
	syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(dfl.mask));
}

/* The fault this thread is passing on to the previous handler: its
 * signal frame (ucontext), the frame of ours doing it, and the faulting pc.
 * A handler that leaves by siglongjmp (a JIT's, a wasm runtime's) never
 * comes back to clear them, so chain() only trusts a record it can check. */
static __thread const void *passing_uc;
static __thread const char *passing_frame;
static __thread uintptr_t passing_pc;

static uintptr_t uc_reg(const void *uc, int reg)
{
	return (uintptr_t)((const ucontext_t *)uc)->uc_mcontext.gregs[reg];
}

__attribute__((noinline)) static void chain(int sig, siginfo_t *si, void *uc)
{
	const char *here = __builtin_frame_address(0);
	/* A record is left by an activation of ours up this stack only if we
	 * run below its frame.  One left by a jump is at or below the frame
	 * of any fresh delivery: the path from the signal frame to here is
	 * always the same length. */
	bool below = passing_uc && here < passing_frame;
	/* The previous handler gave this very fault back to us: it chains to
	 * the handler it replaced, which is ours.  Nobody handles it. */
	bool bounced = below && uc == passing_uc;
	/* Or it faulted itself while handling the fault we passed on: this
	 * fault interrupted code on the alternate stack (sigaltstack's range:
	 * the kernel's uc_stack never says SS_ONSTACK since Linux 4.7), and
	 * our activation is still there, its signal frame intact.  (A record
	 * left by a jump was overwritten by the next signal delivered at the
	 * top of the alternate stack, where every fresh one goes.) */
	stack_t ss;
	bool nested = sigaltstack(NULL, &ss) == 0 && !(ss.ss_flags & SS_DISABLE) &&
		      uc_reg(uc, REG_RSP) - (uintptr_t)ss.ss_sp < ss.ss_size;
	bool faulted = below && nested && uc_reg(passing_uc, REG_RIP) == passing_pc;
	if (bounced || faulted) {
		default_action(sig); /* die of it, as with no handler at all */
		return;
	}
	const void *prev_uc = passing_uc;
	const char *prev_frame = passing_frame;
	uintptr_t prev_pc = passing_pc;
	passing_uc = uc;
	passing_frame = here;
	passing_pc = uc_reg(uc, REG_RIP);
	if (old_segv.sa_flags & SA_SIGINFO) {
		old_segv.sa_sigaction(sig, si, uc);
	} else if (old_segv.sa_handler != SIG_DFL && old_segv.sa_handler != SIG_IGN) {
		old_segv.sa_handler(sig);
	} else {
		default_action(sig);
	}
	passing_uc = prev_uc;
	passing_frame = prev_frame;
	passing_pc = prev_pc;
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	cbcmn__overflow_walk_fault(); /* a fault while walking: back to the walk */
	struct cbcmn__exec *e = cbcmn__tls_exec;
	struct cbcmn_task *t = e ? e->current : NULL;
	if (t && t->stack && t->stack->guarded && cbcmn__stack_in_guard(t->stack, si->si_addr))
		cbcmn__overflow(t, si->si_addr, uc); /* returns only to retry the access */
	else {
		if (e)
			cbcmn__overflow_sys(e, si->si_addr); /* a line, then the fault's course */
		chain(sig, si, uc);
	}
	errno = saved_errno;
}

/* Ranked (docs/LOCKING.md): a runtime create takes it, maybe under the
 * janus ABI's lock; the fork handler takes the stack budget's after it. */
static struct cbcmn__mutex install_lock = CBCMN__MUTEX_INITIALIZER("signal", CBCMN__LOCK_SIGNAL);

void cbcmn__signal_fork_lock(bool lock)
{
	if (lock)
		cbcmn__mutex_lock(&install_lock);
	else
		cbcmn__mutex_unlock(&install_lock);
}

/* Install our handler unless it is the current one.  Called at every
 * runtime start, because a program (or a test framework) may have installed
 * its own handler since; faults that are not ours go to that one. */
int cbcmn__signal_init(void)
{
	int rc = 0;
	cbcmn__stack_check_current(); /* a task creating a runtime */
	cbcmn__mutex_lock(&install_lock);
	cbcmn__overflow_init();
	struct sigaction cur;
	if (sigaction(SIGSEGV, NULL, &cur) != 0) {
		rc = -errno;
	} else if (!((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv)) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_segv;
		/* SA_NODEFER: a fault in a library call we let finish, or in
		 * a handler we chain to, must reach us again. */
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		old_segv = cur;
		if (sigaction(SIGSEGV, &sa, NULL) != 0)
			rc = -errno;
	}
	cbcmn__mutex_unlock(&install_lock);
	return rc;
}

/* ---- the alternate signal stack -------------------------------------------- */

/* Room for the kernel's signal frame (large with AVX-512/AMX state, see
 * sysconf(_SC_MINSIGSTKSZ)) plus our handler and the unwinder's walk. */
static size_t altstack_size(void)
{
	long min = sysconf(_SC_MINSIGSTKSZ);
	long sz = sysconf(_SC_SIGSTKSZ);
	if (min < 2048)
		min = 2048;
	if (sz < 4 * min)
		sz = 4 * min;
	if (sz < 65536)
		sz = 65536;
	return (size_t)sz;
}

int cbcmn__altstack_setup(struct cbcmn__exec *e)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t sz = (altstack_size() + pg - 1) / pg * pg;
	cbcmn__overflow_thread_start();
	/* A guard page below, so that a handler that runs out of it faults
	 * instead of writing over whatever is mapped there. */
	char *p = cbcmn__mmap(NULL, pg + sz, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	stack_t ss = {.ss_sp = p + pg, .ss_size = sz, .ss_flags = 0};
	if (mprotect(p, pg, PROT_NONE) != 0 || sigaltstack(&ss, NULL) != 0) {
		int err = -errno;
		munmap(p, pg + sz);
		return err;
	}
	e->altstack = p;
	e->altstack_size = pg + sz;
	return 0;
}

void cbcmn__altstack_teardown(struct cbcmn__exec *e)
{
	cbcmn__overflow_thread_end();
	passing_uc = NULL; /* it may point into the stack going away */
	if (!e->altstack)
		return;
	stack_t ss = {.ss_flags = SS_DISABLE};
	sigaltstack(&ss, NULL);
	cbcmn__unmap_stack_memory(e->altstack, e->altstack_size);
	e->altstack = NULL;
}
