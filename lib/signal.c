/* signal.c: catching fiber stack overflows on the guard page.
 *
 * Every executor thread has an alternate signal stack, so the SIGSEGV
 * handler runs even when the fault was "no stack left".  When the faulting
 * address is in the guard page of the stack the current task runs on, the
 * handler prints one line naming the task and its stack size and jumps to
 * the task's landing pad (cbcmn__task_call_guarded, sched.c), a frame above
 * the overflow: the task ends with CBCMN_EPANIC, and a parent that ran it
 * inline on the same stack goes on unharmed.  Any other fault goes to the
 * handler that was installed before ours, or to the default action.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "arch.h"
#include "probes.h"
#include "runtime.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

static struct sigaction old_segv;

/* The executor thread's own signal mask, given back at the landing pad. */
static __thread sigset_t base_mask;
static __thread bool have_base_mask;

/* Async-signal-safe decimal formatting. */
static char *fmt_u64(char *p, uint64_t v)
{
	char tmp[24];
	int n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = tmp[--n];
	return p;
}

static void say_overflow(uint64_t id, size_t size)
{
	char buf[192], *p = buf;
	static const char a[] = "cbcmn: task ";
	static const char b[] = " overflowed its ";
	static const char c[] = "-byte stack (guard page hit); it ends with CBCMN_EPANIC\n";
	memcpy(p, a, sizeof(a) - 1), p += sizeof(a) - 1;
	p = fmt_u64(p, id);
	memcpy(p, b, sizeof(b) - 1), p += sizeof(b) - 1;
	p = fmt_u64(p, size);
	memcpy(p, c, sizeof(c) - 1), p += sizeof(c) - 1;
	ssize_t rc = write(STDERR_FILENO, buf, (size_t)(p - buf));
	(void)rc;
}

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
	struct cbcmn__exec *e = cbcmn__tls_exec;
	struct cbcmn_task *t = e ? e->current : NULL;
	if (t && t->stack && cbcmn__stack_in_guard(t->stack, si->si_addr)) {
		/* The size the user configured, which is what they can change. */
		say_overflow(t->id, t->rt->cfg.stack_size);
		CBCMN_PROBE2(task_panic, t->id, t->rt->cfg.stack_size);
		/* Leave the handler for good, to the task's landing pad, which
		 * is above the overflow.  SA_NODEFER left SIGSEGV unblocked,
		 * and the kernel sees we are off the alternate stack once rsp
		 * is. */
		t->unwind_result = CBCMN_EPANIC;
		__builtin_longjmp(t->landing, 1);
	}
	chain(sig, si, uc);
}

static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;

/* Install our handler unless it is the current one.  Called at every
 * runtime start, because a program (or a test framework) may have installed
 * its own handler since; faults that are not ours go to that one. */
int cbcmn__signal_init(void)
{
	int rc = 0;
	cbcmn__stack_check_current(); /* a task creating a runtime */
	pthread_mutex_lock(&install_lock);
	struct sigaction cur;
	if (sigaction(SIGSEGV, NULL, &cur) != 0) {
		rc = -errno;
	} else if (!((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv)) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_segv;
		sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		old_segv = cur;
		if (sigaction(SIGSEGV, &sa, NULL) != 0)
			rc = -errno;
	}
	pthread_mutex_unlock(&install_lock);
	return rc;
}

/* Room for the kernel's signal frame (large with AVX-512/AMX state, see
 * sysconf(_SC_MINSIGSTKSZ)) plus our handler, which only formats a line. */
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
	pthread_sigmask(SIG_BLOCK, NULL, &base_mask);
	have_base_mask = true;
	/* A guard page below, so that a handler that runs out of it faults
	 * instead of writing over whatever is mapped there. */
	char *p = mmap(NULL, pg + sz, PROT_READ | PROT_WRITE,
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
	have_base_mask = false;
	passing_uc = NULL; /* it may point into the stack going away */
	if (!e->altstack)
		return;
	stack_t ss = {.ss_flags = SS_DISABLE};
	sigaltstack(&ss, NULL);
	munmap(e->altstack, e->altstack_size);
	e->altstack = NULL;
}

void cbcmn__overflow_landed(struct cbcmn_task *t, void *landing_frame, uint64_t fpcw)
{
#ifdef __SANITIZE_ADDRESS__
	/* The abandoned frames below the landing pad keep their poisoned
	 * redzones in ASan's shadow; clear them for the frames to come. */
	char *lo = t->stack->guard_lo;
	__asan_unpoison_memory_region(lo, (size_t)((char *)landing_frame - lo));
#else
	(void)landing_frame;
#endif
	/* Nothing runs below the landing pad any more. */
	cbcmn__stack_yellow_close(t->stack);
	/* We left the SIGSEGV handler (or a handler of the program's that
	 * overflowed) by a jump, not by sigreturn: its mask is still on. */
	if (have_base_mask)
		pthread_sigmask(SIG_SETMASK, &base_mask, NULL);
	cbcmn__fpcw_write(fpcw);
}
