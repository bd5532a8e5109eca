/* blocking.c: the blocking pool: threads for the calls that would block an executor.
 *
 * Per runtime: a FIFO of jobs and up to cfg.blocking_threads threads,
 * started on demand and ended after IDLE_NS without work (docs/BLOCKING.md).
 * A job is the calling task's own stack frame (struct job): a call
 * allocates nothing.  The task parks on an interruptible wait (iwait.h)
 * whose event is "fn returned"; the pool thread that ran fn claims the wait
 * and wakes it from outside the runtime (waker NULL: the inject queue).
 *
 * A job's state word decides who owns what when cancellation (or the
 * call's deadline) meets it:
 *
 *   QUEUED --(a pool thread pops it, under the lock)--> RUNNING --> DONE
 *   QUEUED --(cancelled, job_end())--> DROPPED      (fn never runs)
 *   RUNNING --(cancelled, job_end())--> CANCELLED --(fn returned)--> DONE
 *
 *   - The task is woken once, when fn has returned or will never run: not
 *     while fn runs.  fn may use the task's cx (a CBCMN_CHECKPOINT(), a
 *     macro, writes its countdown), and a woken task's executor reads it
 *     (an actor's run and park, actor_sched.c): woken by cancellation
 *     while fn ran, they raced (TSan,
 *     test_cancelled_while_fn_runs_stays_parked).
 *   - Cancelled while QUEUED: job_end() marks it DROPPED and wakes the
 *     task, which unlinks it under the lock unless a pool thread, which
 *     skips a DROPPED job, did.  One CAS decides between the pop and the
 *     drop.
 *   - Cancelled while RUNNING: job_end() asks fn to stop (the caller's
 *     interrupt) and marks it CANCELLED; the pool thread, whose claim of
 *     the wait then fails, wakes the task once fn returned.  Whoever of
 *     the two comes second (the exchange to DONE, job_end()'s CAS) wakes.
 *   - Not cancelled: the pool thread wins the iwait claim and the job's
 *     state no longer matters.
 * The pool thread touches the job for the last time in the step that
 * lets the task go (the wake, or the exchange when job_end() wakes).
 *
 * Lock: CBCMN__LOCK_BLOCKING, a leaf: the wakes it causes are issued after
 * it is dropped.  Idle threads sleep on a condition variable each, under
 * that lock, and are handed work LIFO so that surplus threads time out.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "blocking.h"
#include "iwait.h"
#include "runtime.h"
#include "timer.h"

/* How long a pool thread waits for work before it ends. */
#define IDLE_NS (3 * 1000000000ll)

enum { J_QUEUED, J_RUNNING, J_CANCELLED, J_DROPPED, J_DONE };

/* One call, on the calling task's stack. */
struct job {
	struct cbcmn__iwait iw;        /* the task's wait for fn's return */
	cbcmn_blocking_fn fn;
	void *arg;
	void (*interrupt)(void *arg);  /* asks a cancelled fn to return, or NULL */
	int64_t result;                /* written by the pool thread before its release */
	struct cbcmn_task *task;       /* whose call it is */
	/* What fn's costs with the task's cx came to, by component, for
	 * the task to pay on its fiber (cbcmn__charge_off()); like result. */
	uint64_t debt[CBCMN__B_N];
	struct job *prev, *next;       /* the queue, under the pool lock */
	_Atomic uint32_t state;        /* J_* */
};

/* A pool thread. */
struct worker {
	struct cbcmn__blocking_pool *pool;
	pthread_t thread;
	pthread_cond_t cv;             /* with pool->lock: idle wait */
	struct worker *next;           /* idle stack, then the exited list */
	bool woken;                    /* popped from the idle stack by a submitter */
};

struct cbcmn__blocking_pool {
	const struct cbcmn_runtime *rt;   /* the runtime it serves */
	struct cbcmn__mutex lock;      /* CBCMN__LOCK_BLOCKING: all but nbusy */
	struct job *head, *tail;       /* jobs not yet started, FIFO */
	uint32_t nqueued;
	struct worker *idle;           /* waiting for work, most recent first */
	uint32_t nidle;
	struct worker *exited;         /* ended, not yet joined */
	uint32_t nthreads, max;        /* started and not ended; the cap */
	/* Threads running fn.  Incremented under the lock when a job is
	 * popped, decremented without it when fn returns: a reader under
	 * the lock may see it too high (never too low), which at worst starts
	 * a thread early, never strands a job. */
	_Atomic uint32_t nbusy;
	bool stopping;                 /* fini: end when the queue is empty */
	pthread_cond_t fini_cv;        /* with lock: the last thread ended */
};

/* ---- the queue and the idle stack (under the lock) ----------------------- */

static void q_push(struct cbcmn__blocking_pool *p, struct job *j)
{
	j->next = NULL;
	j->prev = p->tail;
	if (p->tail)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	p->nqueued++;
}

static void q_del(struct cbcmn__blocking_pool *p, struct job *j)
{
	if (j->prev)
		j->prev->next = j->next;
	else
		p->head = j->next;
	if (j->next)
		j->next->prev = j->prev;
	else
		p->tail = j->prev;
	p->nqueued--;
}

/* Remove w from the idle stack: it timed out.  O(idle threads), at most
 * the pool size, once per thread that ends. */
static void idle_del(struct cbcmn__blocking_pool *p, struct worker *w)
{
	for (struct worker **pp = &p->idle; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			p->nidle--;
			return;
		}
	}
}

static struct worker *idle_pop(struct cbcmn__blocking_pool *p)
{
	struct worker *w = p->idle;
	if (w) {
		p->idle = w->next;
		p->nidle--;
		w->woken = true;
	}
	return w;
}

/* ---- pool threads ---------------------------------------------------------- */

/* The job this pool thread runs (NULL between jobs): its debts. */
static __thread struct job *tls_job;

uint64_t *cbcmn__blocking_debt(const struct cbcmn_task *t, int comp)
{
	struct job *j = tls_job;
	return j && j->task == t ? &j->debt[comp] : NULL;
}

static void run_job(struct cbcmn__blocking_pool *p, struct job *j)
{
	/* Not before the task has left its fiber: its executor, finishing
	 * the park, still reads its fields (an actor's countdown,
	 * actor_sched.c), which fn may write through its cx (a
	 * CBCMN_CHECKPOINT(), a macro: TSan,
	 * test_checkpoints_of_an_actor_s_blocking_function).  A switch
	 * away: far less than this thread's own wake-up.  Nothing but fn's
	 * end wakes the task once the job is RUNNING (job_end()), so it
	 * reaches BLOCKED, never WAKE_PENDING, and stays there while fn
	 * runs.  acquire: pairs with run_post()'s CAS to BLOCKED (sched.c). */
	while (atomic_load_explicit(&j->task->state, memory_order_acquire) == CBCMN__T_PARKING)
		sched_yield();
	tls_job = j;
	j->result = j->fn(j->arg);
	tls_job = NULL;
	/* Before the wake: the task's next call (which the wake lets happen)
	 * then sees this thread as free and does not start another. */
	atomic_fetch_sub_explicit(&p->nbusy, 1, memory_order_relaxed);
	/* acq_rel (iwait.h): releases result to the task, which reads the
	 * wait's state with acquire once it runs again. */
	if (cbcmn__iwait_claim(&j->iw)) {
		cbcmn__iwait_wake(&j->iw, NULL); /* j is gone after this */
		return;
	}
	/* Cancellation (or the deadline) claimed the wait: job_end() has
	 * marked the job CANCELLED, or is about to.  acq_rel: release hands
	 * result and the debt to the task; acquire pairs with job_end()'s
	 * CAS (its interrupt's writes). */
	uint32_t old = atomic_exchange_explicit(&j->state, J_DONE, memory_order_acq_rel);
	if (old == J_CANCELLED)
		cbcmn__waiter_wake(&j->iw.w, NULL); /* j is gone after this */
	/* old == J_RUNNING: job_end()'s CAS fails on DONE and it wakes the
	 * task; j may be gone already. */
}

/* Join the threads that ended on idle time-out.  Not under the lock: each
 * has pushed itself and is about to return, so a join waits microseconds. */
static void reap(struct worker *w)
{
	while (w) {
		struct worker *next = w->next;
		pthread_join(w->thread, NULL);
		pthread_cond_destroy(&w->cv);
		free(w);
		w = next;
	}
}

__thread const struct cbcmn_runtime *cbcmn__tls_pool_rt;

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct cbcmn__blocking_pool *p = w->pool;
	/* cbcmn__tls_exec stays NULL here: a pool thread is no executor, so
	 * whatever fn calls into cbcmn behaves as from an outside thread,
	 * but for the calls that would wait for the runtime's tasks to end
	 * (cbcmn__on_runtime_thread()). */
	cbcmn__tls_pool_rt = p->rt;

	cbcmn__mutex_lock(&p->lock);
	/* The threads that ended before us: joining them is the price of
	 * starting a thread, so they never pile up beyond the pool size. */
	struct worker *dead = p->exited;
	p->exited = NULL;
	cbcmn__mutex_unlock(&p->lock);
	reap(dead);

	cbcmn__mutex_lock(&p->lock);
	for (;;) {
		struct job *j = p->head;
		if (j) {
			q_del(p, j);
			/* Against job_end()'s drop.  acquire: nothing to see;
			 * the lock orders the unlink with the task's. */
			uint32_t s = J_QUEUED;
			if (!atomic_compare_exchange_strong_explicit(&j->state, &s, J_RUNNING,
								     memory_order_acquire,
								     memory_order_relaxed))
				continue; /* DROPPED: its task, woken, sees it unlinked */
			atomic_fetch_add_explicit(&p->nbusy, 1, memory_order_relaxed);
			cbcmn__mutex_unlock(&p->lock);
			run_job(p, j);
			cbcmn__mutex_lock(&p->lock);
			continue;
		}
		if (p->stopping)
			break;
		/* Idle. */
		w->woken = false;
		w->next = p->idle;
		p->idle = w;
		p->nidle++;
		struct timespec dl;
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_sec += IDLE_NS / 1000000000ll;
		dl.tv_nsec += IDLE_NS % 1000000000ll;
		if (dl.tv_nsec >= 1000000000l) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000l;
		}
		int rc = 0;
		/* On the mutex inside the ranked lock: the debug checker keeps
		 * it as held meanwhile, which is harmless on a thread that
		 * holds nothing else and never switches fibers. */
		while (!w->woken && rc != ETIMEDOUT)
			rc = pthread_cond_timedwait(&w->cv, &p->lock.m, &dl);
		if (!w->woken) {
			idle_del(p, w);
			if (!p->head)
				break; /* timed out: end */
		}
	}
	p->nthreads--;
	w->next = p->exited;
	p->exited = w;
	if (p->stopping && p->nthreads == 0)
		pthread_cond_signal(&p->fini_cv);
	cbcmn__mutex_unlock(&p->lock);
	return NULL;
}

/* Under the lock.  Returns 0 or the pthread_create error. */
static int worker_start(struct cbcmn__blocking_pool *p)
{
	struct worker *w = cbcmn__calloc(1, sizeof(*w));
	if (!w)
		return ENOMEM;
	w->pool = p;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	/* All signals blocked from the first instruction: a process-directed
	 * signal never lands in the middle of someone's fn. */
	pthread_attr_t a;
	sigset_t all;
	sigfillset(&all);
	pthread_attr_init(&a);
	pthread_attr_setsigmask_np(&a, &all);
	/* Costs a stack mmap (tens of us) under the lock, only while the pool
	 * grows. */
	int rc = pthread_create(&w->thread, &a, worker_main, w);
	pthread_attr_destroy(&a);
	if (rc) {
		pthread_cond_destroy(&w->cv);
		free(w);
		return rc;
	}
	p->nthreads++;
	return 0;
}

/* ---- runtime create / destroy ---------------------------------------------- */

int cbcmn__blocking_init(struct cbcmn_runtime *rt)
{
	struct cbcmn__blocking_pool *p = cbcmn__calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	cbcmn__mutex_init(&p->lock, "blocking", CBCMN__LOCK_BLOCKING);
	pthread_cond_init(&p->fini_cv, NULL);
	p->max = rt->cfg.blocking_threads; /* 0 resolved to the default (runtime.c) */
	p->rt = rt;
	rt->blocking = p;
	return 0;
}

void cbcmn__blocking_fini(struct cbcmn_runtime *rt)
{
	struct cbcmn__blocking_pool *p = rt->blocking;
	if (!p)
		return;
	cbcmn__mutex_lock(&p->lock);
	p->stopping = true;
	struct worker *w;
	while ((w = idle_pop(p)))
		pthread_cond_signal(&w->cv);
	/* No task is alive (destroy checked), so no job is queued or
	 * running: every thread ends as soon as it sees stopping. */
	while (p->nthreads)
		pthread_cond_wait(&p->fini_cv, &p->lock.m);
	struct worker *dead = p->exited;
	p->exited = NULL;
	cbcmn__mutex_unlock(&p->lock);
	reap(dead);
	pthread_cond_destroy(&p->fini_cv);
	cbcmn__mutex_destroy(&p->lock);
	free(p);
	rt->blocking = NULL;
}

/* ---- the call ---------------------------------------------------------------- */

/* Queue j and see that a thread will take it.  Under the lock.  Returns 0,
 * or -EAGAIN when no thread exists and none could be started. */
static int submit(struct cbcmn__blocking_pool *p, struct job *j)
{
	q_push(p, j);
	/* Threads that will look at the queue before they sleep: starting,
	 * between two jobs, or woken and not yet running. */
	uint32_t busy = atomic_load_explicit(&p->nbusy, memory_order_relaxed);
	/* busy <= nthreads - nidle even when stale (see nbusy). */
	uint32_t coming = p->nthreads - p->nidle - busy;
	if (p->nqueued <= coming)
		return 0;
	struct worker *w = idle_pop(p);
	if (w) {
		pthread_cond_signal(&w->cv);
		return 0;
	}
	if (p->nthreads < p->max)
		worker_start(p); /* on failure, a busy thread takes it later */
	if (p->nthreads == 0) {
		q_del(p, j);
		return -EAGAIN;
	}
	return 0; /* a busy thread takes it when its turn comes */
}

/* Back on t's fiber: pay what fn's costs with t's cx left owing, as the
 * costs themselves would have on it (waiting for a recharge, or ending t
 * there).  fn's calls were not stopped: past t's budget they went
 * through all the same: t, owing more than it has, waits or ends here. */
static void pay_debt(struct cbcmn_task *t, const struct job *j)
{
	for (int c = CBCMN__B_OPS + 1; c < CBCMN__B_N; c++)
		if (__builtin_expect(j->debt[c] != 0, 0))
			cbcmn__charge_slow(t, c, j->debt[c]);
	if (__builtin_expect(j->debt[CBCMN__B_OPS] != 0, 0))
		cbcmn__charge_ops(t, j->debt[CBCMN__B_OPS]);
}

int cbcmn_blocking(cbcmn_cx *cx, cbcmn_blocking_fn fn, void *arg, int64_t *result)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!self || !fn)
		return -EINVAL;
	/* A task's context used from another thread: that thread would be
	 * suspended as if it were the task's fiber. */
	if (!cbcmn__is_running(self))
		return -EPERM;
	/* A blocking call is where a cancelled task notices (cbcmn.h). */
	if (cbcmn__task_cancelled(self))
		return CBCMN_ECANCELED;
	/* One op and one syscall, paid before anything is queued: a task that
	 * waits for budget, or is ended there, leaves no job behind.  Checks
	 * the stack room first (cbcmn__stack_check). */
	cbcmn__charge(self, CBCMN__B_SYSCALLS, 1);
	return cbcmn__blocking_call(self, fn, arg, result, UINT64_MAX, NULL);
}

/* The wait's end by cancellation or by the deadline (iwait.h's
 * on_cancel and on_timeout: the canceller under the registry lock, the
 * timer's executor, or the task itself as it registers), once the wait is
 * claimed: wake the task only when fn will not run, or has returned. */
static void job_end(struct cbcmn__iwait *iw)
{
	struct job *j = (struct job *)iw;
	uint32_t s = atomic_load_explicit(&j->state, memory_order_acquire);
	bool asked = !j->interrupt;
	for (;;) {
		/* fn under way (popped even after our first look): asked to
		 * stop before the CAS, while j is surely alive (after it, the
		 * pool thread may wake the task, whose frame j is, as soon as
		 * fn returns). */
		if (s == J_RUNNING && !asked) {
			j->interrupt(j->arg);
			asked = true;
		}
		uint32_t to = s == J_QUEUED ? J_DROPPED : s == J_RUNNING ? J_CANCELLED : s;
		if (to == s)
			break; /* DONE: fn returned, the pool thread left the wake to us */
		/* acq_rel: release publishes the interrupt's writes to the
		 * pool thread; acquire pairs with its exchange (result). */
		if (atomic_compare_exchange_weak_explicit(&j->state, &s, to, memory_order_acq_rel,
							  memory_order_acquire)) {
			if (to == J_CANCELLED)
				return; /* the pool thread wakes the task */
			break;
		}
	}
	cbcmn__waiter_wake(&iw->w, NULL);
}

int cbcmn__blocking_call(struct cbcmn_task *self, cbcmn_blocking_fn fn, void *arg,
			 int64_t *result, uint64_t deadline, void (*interrupt)(void *arg))
{
	struct cbcmn__blocking_pool *p = self->rt->blocking;
	struct job j = {.fn = fn, .arg = arg, .interrupt = interrupt, .task = self};
	atomic_init(&j.state, J_QUEUED);
	cbcmn__iwait_init(&j.iw, self); /* PARKING: no fiber switch until we block */
	j.iw.kind = CBCMN__G_BLOCKING;
	j.iw.on_cancel = job_end;
	j.iw.on_timeout = job_end;
	/* Armed before the job is queued: it fires on our executor, which is
	 * busy running us until we block. */
	struct cbcmn__timer *tm = NULL;
	if (deadline != UINT64_MAX && !(tm = cbcmn__timer_arm(self->exec, deadline, &j.iw))) {
		atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
		return -ENOMEM;
	}
	cbcmn__mutex_lock(&p->lock);
	int rc = submit(p, &j);
	cbcmn__mutex_unlock(&p->lock);
	if (rc) {
		if (tm)
			cbcmn__timer_disarm(tm);
		atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
		return rc;
	}

	uint32_t how = cbcmn__iwait_block(&j.iw);
	if (tm)
		cbcmn__timer_disarm(tm);
	rc = how == CBCMN__IW_WOKEN ? 0 : how == CBCMN__IW_TIMEDOUT ? -ETIMEDOUT : CBCMN_ECANCELED;
	/* acquire: pairs with the exchange to DONE (or iwait_block's with
	 * the claim): result and the debt. */
	if (rc && atomic_load_explicit(&j.state, memory_order_acquire) == J_DROPPED) {
		/* fn never ran: still queued, unless a pool thread skipped it
		 * (popped, it was the head: no prev, and head no more). */
		cbcmn__mutex_lock(&p->lock);
		if (j.prev || p->head == &j)
			q_del(p, &j);
		cbcmn__mutex_unlock(&p->lock);
		return rc;
	}
	if (result)
		*result = j.result;
	pay_debt(self, &j);
	return rc;
}
