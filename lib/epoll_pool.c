/* epoll_pool.c: the epoll backend's calls in the blocking pool (openat,
 * statx, fsync, a regular file's read that the page cache does not hold, a
 * tty's read), made interruptible by cancellation and the I/O timeout as
 * io_uring's io-wq makes them (epoll_int.h; docs/IO.md, "Backends").
 *
 * The pool thread blocks in the system call; to end the wait early the
 * task has it interrupted by a signal (CBCMN__EP_IRQ_SIG, installed
 * without SA_RESTART, so the call fails with EINTR: a FIFO's open, a pipe's
 * or tty's read; a disk read or an fsync in progress is uninterruptible and
 * finishes first).  What the call did is its result: only a call that
 * returned EINTR because we asked did not happen (CBCMN_ECANCELED,
 * -ETIMEDOUT).  The task waits for the call's return in every case (its
 * arguments are on the task's stack), so an openat that won the race
 * returns its descriptor to the caller and nothing is leaked.
 *
 * The signal is unblocked on the pool thread only around our system call
 * (pool threads run with every signal blocked, cbcmn_io.h): user functions
 * in the pool never see it.  A signal that lands after the check for it
 * and before the thread enters the kernel would be lost, so the interrupt
 * is a periodic timer aimed at the thread (SIGEV_THREAD_ID), every
 * IRQ_PERIOD_NS until the call returns; the task deletes it after.  One
 * that fires after the call is left pending on the blocked thread and is
 * delivered, harmlessly, before the next such call enters the kernel.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "blocking.h"
#include "epoll_int.h"

#define IRQ_PERIOD_NS 1000000l /* the interrupt's period until the call returns */

/* Who has the pool thread's id: the job's state word. */
enum {
	PJ_IDLE,        /* not started: an interrupt now means it never runs */
	PJ_IN,          /* the pool thread is in (or about to enter) the call */
	PJ_SIGNALLING,  /* the task is aiming the interrupt at that thread */
	PJ_OUT,         /* returned (or will never run) */
};

struct pool_job {
	int64_t (*fn)(void *arg);
	void *arg;
	int64_t res;
	bool ran;                  /* fn was called: res is its result */
	int tid;                   /* the pool thread, written before PJ_IN */
	int timer;                 /* the interrupt's timer, -1 none */
	int sig;                   /* irq_sig when it was queued (not 0) */
	_Atomic bool irq;          /* the task asked for the interrupt */
	_Atomic uint32_t st;       /* PJ_* */
};

/* The interrupt, or 0: off (the program has a handler of its own for the
 * signal, or blocks it: its own use, with sigwait or a signalfd, which a
 * pool thread unblocking it would steal).  Decided anew at each runtime's
 * create on the creating thread (a forked child that reset its signals
 * gets the handler back); a job reads it once (pool_job.sig). */
static _Atomic int irq_sig;

static void irq_handler(int sig)
{
	(void)sig; /* its only job is the EINTR */
}

static bool irq_ours(const struct sigaction *sa)
{
	return !(sa->sa_flags & SA_SIGINFO) && sa->sa_handler == irq_handler;
}

void cbcmn__ep_pool_init(void)
{
	int sig = CBCMN__EP_IRQ_SIG, on = 0;
	sigset_t mask;
	struct sigaction old;
	if (pthread_sigmask(SIG_BLOCK, NULL, &mask) == 0 && !sigismember(&mask, sig) &&
	    sigaction(sig, NULL, &old) == 0) {
		if (irq_ours(&old)) {
			on = sig;
		} else if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
			/* Two creates at once both install it: the same. */
			struct sigaction sa;
			memset(&sa, 0, sizeof(sa));
			sa.sa_handler = irq_handler;
			sigemptyset(&sa.sa_mask);
			sa.sa_flags = 0; /* no SA_RESTART: the call returns EINTR */
			if (sigaction(sig, &sa, NULL) == 0)
				on = sig;
		}
	}
	/* relaxed: a flag read at a job's start; the handler is installed by
	 * this thread's sigaction before any job of this runtime exists. */
	atomic_store_explicit(&irq_sig, on, memory_order_relaxed);
}

bool cbcmn__ep_pool_interruptible(void)
{
	/* relaxed: as a job's read of it (cbcmn__ep_pool_call). */
	return atomic_load_explicit(&irq_sig, memory_order_relaxed) != 0;
}

/* On the pool thread. */
static int64_t job_run(void *arg)
{
	struct pool_job *j = arg;
	j->tid = (int)syscall(SYS_gettid);
	uint32_t s = PJ_IDLE;
	/* release: tid to the task's CAS to PJ_SIGNALLING (acquire).  Fails
	 * only on PJ_OUT: interrupted before it started, it never runs. */
	if (!atomic_compare_exchange_strong_explicit(&j->st, &s, PJ_IN, memory_order_acq_rel,
						     memory_order_acquire))
		return 0;
	sigset_t set;
	sigemptyset(&set);
	if (j->sig) {
		sigaddset(&set, j->sig);
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	}
	int64_t rc;
	do {
		rc = j->fn(j->arg);
		/* seq_cst: the task stores irq before it aims the signal; an
		 * EINTR it did not cause (a pending one from an earlier
		 * call's timer) is retried. */
	} while (rc == -EINTR && !atomic_load(&j->irq));
	if (j->sig)
		pthread_sigmask(SIG_BLOCK, &set, NULL);
	j->res = rc;
	j->ran = true;
	/* Not while the task aims at this thread (the id must stay ours
	 * until it has): wait for PJ_SIGNALLING to end, microseconds. */
	for (;;) {
		s = PJ_IN;
		/* release: res and ran to the task (its acquire after the pool's
		 * hand-over orders them anyway). */
		if (atomic_compare_exchange_weak_explicit(&j->st, &s, PJ_OUT, memory_order_acq_rel,
							  memory_order_acquire))
			break;
		if (s == PJ_SIGNALLING)
			sched_yield();
	}
	return rc;
}

/* On the task, cancelled or timed out while the job is in the pool. */
static void job_interrupt(void *arg)
{
	struct pool_job *j = arg;
	atomic_store(&j->irq, true); /* seq_cst: job_run's load after EINTR */
	uint32_t s = PJ_IDLE;
	if (atomic_compare_exchange_strong(&j->st, &s, PJ_OUT))
		return; /* not started: it never runs */
	/* acquire: pairs with job_run's release of PJ_IN (tid). */
	if (s != PJ_IN || !atomic_compare_exchange_strong_explicit(&j->st, &s, PJ_SIGNALLING,
								    memory_order_acquire,
								    memory_order_relaxed))
		return; /* returned already */
	/* The program may have reset the signal to its default action since
	 * (ending the process): then not interrupted, as with its own handler. */
	struct sigaction cur;
	if (sigaction(j->sig, NULL, &cur) != 0 ||
	    (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL)) {
		atomic_store_explicit(&j->st, PJ_IN, memory_order_release);
		return;
	}
	struct sigevent sev;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = j->sig;
	sev._sigev_un._tid = j->tid;
	int id = -1;
	/* The kernel's timer id is an int: the raw call, not glibc's timer_t. */
	if (syscall(SYS_timer_create, CLOCK_MONOTONIC, &sev, &id) == 0) {
		struct itimerspec its = {.it_value = {0, 1}, .it_interval = {0, IRQ_PERIOD_NS}};
		if (syscall(SYS_timer_settime, id, 0, &its, NULL) == 0) {
			j->timer = id;
		} else {
			syscall(SYS_timer_delete, id);
			id = -1;
		}
	}
	/* No timer (RLIMIT_SIGPENDING): one signal, and hope; at the limit
	 * the kernel refuses it too (a real-time signal from tgkill is
	 * counted), and the call is not interrupted (docs/IO.md). */
	if (id < 0)
		syscall(SYS_tgkill, getpid(), j->tid, j->sig);
	/* release: the thread may go on (and, once the call returned, away). */
	atomic_store_explicit(&j->st, PJ_IN, memory_order_release);
}

int64_t cbcmn__ep_pool_call(struct cbcmn_task *t, int64_t (*fn)(void *arg), void *arg,
			    uint64_t deadline, bool *ran)
{
	*ran = false;
	/* What cbcmn_blocking() does first: a cancelled task stops here, and
	 * the call is charged one syscall. */
	if (cbcmn__task_cancelled(t))
		return CBCMN_ECANCELED;
	cbcmn__charge(t, CBCMN__B_SYSCALLS, 1);
	struct pool_job j = {.fn = fn, .arg = arg, .timer = -1,
			     .sig = atomic_load_explicit(&irq_sig, memory_order_relaxed)};
	atomic_init(&j.irq, false);
	atomic_init(&j.st, PJ_IDLE);
	/* In lab mode the deadline is in real time and the runtime's timers
	 * are not: only cancellation interrupts there. */
	int rc = cbcmn__blocking_call(t, job_run, &j, NULL, t->rt->lab ? UINT64_MAX : deadline,
				      j.sig ? job_interrupt : NULL);
	if (j.timer >= 0)
		syscall(SYS_timer_delete, j.timer);
	/* j.ran and j.res: written by the pool thread before the hand-over
	 * that cbcmn__blocking_call()'s return acquires. */
	if (!j.ran)
		return rc;
	if (rc && j.res == -EINTR && atomic_load_explicit(&j.irq, memory_order_relaxed))
		return rc; /* interrupted: it did not happen */
	*ran = true;
	return j.res;
}
