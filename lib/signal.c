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
#include <unistd.h>

#include "probes.h"
#include "runtime.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

static struct sigaction old_segv;
static size_t page;

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

/* A fault that is not ours is passed on once per thread: a handler that
 * chains back to us (installed before a second runtime re-installed ours)
 * would otherwise bounce until the alternate stack overflows. */
static __thread int passing_on;

static void chain(int sig, siginfo_t *si, void *uc)
{
	if (passing_on++) {
		signal(sig, SIG_DFL); /* the faulting instruction re-runs and dies */
		return;
	}
	if (old_segv.sa_flags & SA_SIGINFO) {
		old_segv.sa_sigaction(sig, si, uc);
	} else if (old_segv.sa_handler != SIG_DFL && old_segv.sa_handler != SIG_IGN) {
		old_segv.sa_handler(sig);
	} else {
		/* Default action: reinstall it and return; the faulting
		 * instruction runs again and the process dies as it should. */
		signal(sig, SIG_DFL);
	}
	passing_on--;
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	struct cbcmn__exec *e = cbcmn__tls_exec;
	struct cbcmn_task *t = e ? e->current : NULL;
	if (t && t->stack && cbcmn__stack_in_guard(t->stack, si->si_addr, page)) {
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

void cbcmn__signal_fork_lock(bool lock)
{
	if (lock)
		pthread_mutex_lock(&install_lock);
	else
		pthread_mutex_unlock(&install_lock);
}

/* Install our handler unless it is the current one.  Called at every
 * runtime start, because a program (or a test framework) may have installed
 * its own handler since; faults that are not ours go to that one. */
int cbcmn__signal_init(void)
{
	int rc = 0;
	pthread_mutex_lock(&install_lock);
	page = (size_t)sysconf(_SC_PAGESIZE);
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
	size_t sz = altstack_size();
	void *p = cbcmn__mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
		       -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	stack_t ss = {.ss_sp = p, .ss_size = sz, .ss_flags = 0};
	if (sigaltstack(&ss, NULL) != 0) {
		int err = -errno;
		munmap(p, sz);
		return err;
	}
	e->altstack = p;
	e->altstack_size = sz;
	return 0;
}

void cbcmn__altstack_teardown(struct cbcmn__exec *e)
{
	if (!e->altstack)
		return;
	stack_t ss = {.ss_flags = SS_DISABLE};
	sigaltstack(&ss, NULL);
	munmap(e->altstack, e->altstack_size);
	e->altstack = NULL;
}

void cbcmn__panic_unpoison(struct cbcmn_task *t, void *landing_frame)
{
#ifdef __SANITIZE_ADDRESS__
	/* The abandoned frames below the landing pad keep their poisoned
	 * redzones in ASan's shadow; clear them for the frames to come. */
	char *lo = t->stack->lo;
	__asan_unpoison_memory_region(lo, (size_t)((char *)landing_frame - lo));
#else
	(void)t;
	(void)landing_frame;
#endif
}
