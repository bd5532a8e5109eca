/* signal.c: catching fiber stack overflows on the guard page.
 *
 * Every executor thread has an alternate signal stack, so the SIGSEGV
 * handler runs even when the fault was "no stack left".  When the faulting
 * address is in the guard page of the stack the current task runs on, the
 * handler prints one line naming the task and its stack size, and switches
 * straight to the executor's scheduler: the fiber's frames are gone, and the
 * scheduler restarts the fiber's stack with a clean-up routine that ends the
 * task (and any tasks running inline on the same stack) with CBCMN_EPANIC
 * after cancelling and awaiting the nurseries they had open.  Any other
 * fault goes to the handler that was installed before ours, or to the
 * default action.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arch.h"
#include "probes.h"
#include "runtime.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif

static struct sigaction old_segv;
static pthread_once_t segv_once = PTHREAD_ONCE_INIT;
static int segv_err;
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

static void chain(int sig, siginfo_t *si, void *uc)
{
	if (old_segv.sa_flags & SA_SIGINFO) {
		old_segv.sa_sigaction(sig, si, uc);
	} else if (old_segv.sa_handler != SIG_DFL && old_segv.sa_handler != SIG_IGN) {
		old_segv.sa_handler(sig);
	} else {
		/* Default action: reinstall it and return; the faulting
		 * instruction runs again and the process dies as it should. */
		signal(sig, SIG_DFL);
	}
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	struct cbcmn__exec *e = cbcmn__tls_exec;
	struct cbcmn_task *t = e ? e->current : NULL;
	if (t && t->stack && cbcmn__stack_in_guard(t->stack, si->si_addr, page)) {
		say_overflow(t->id, t->stack->size);
		CBCMN_PROBE2(task_panic, t->id, t->stack->size);
		e->post = CBCMN__POST_PANIC;
		e->post_task = t;
		/* Leave the handler for good: the scheduler's stack is intact.
		 * SA_NODEFER left SIGSEGV unblocked, and the kernel sees we are
		 * off the alternate stack once rsp is. */
#ifdef __SANITIZE_ADDRESS__
		__sanitizer_start_switch_fiber(NULL, e->sched_stack_lo, e->sched_stack_size);
#endif
		void *dead;
		cbcmn__ctx_jump(&dead, e->sched_sp, NULL);
	}
	chain(sig, si, uc);
}

static void install(void)
{
	page = (size_t)sysconf(_SC_PAGESIZE);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, &old_segv) != 0)
		segv_err = -errno;
}

int cbcmn__signal_init(void)
{
	pthread_once(&segv_once, install);
	return segv_err;
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
	void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
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

/* Runs on the overflowed stack, restarted from its top: end every task of
 * the inline chain, innermost first. */
static void panic_entry(void *xfer)
{
	struct cbcmn_task *t = xfer;
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
	struct cbcmn__stack *s = t->stack;
	for (;;) {
		struct cbcmn_task *parent = t->inline_parent;
		struct cbcmn__exec *e = t->exec;
		e->current = t;
		/* Its nurseries cannot outlive it: cancel and wait for them. */
		while (t->open) {
			struct cbcmn_nursery *n = t->open;
			cbcmn__nursery_cancel(n, 1);
			cbcmn__nursery_await(t, n);
		}
		e = t->exec;
		cbcmn__task_complete(t, CBCMN_EPANIC);
		if (!parent)
			cbcmn__fiber_exit(e, s);
		parent->exec = e;
		t = parent;
	}
}

void cbcmn__panic_prepare(struct cbcmn_task *t)
{
	/* t->stack is the chain's root stack: restart it at its top. */
	t->sp = cbcmn__ctx_make(cbcmn__stack_top(t->stack), panic_entry);
}
