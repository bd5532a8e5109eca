/* monitor.c: the stall monitor: a thread per runtime that finds executors held by one run.
 *
 * A task that calls a blocking libc function, or loops without a
 * checkpoint, holds its executor's thread: nothing else runs there, and
 * what is queued behind it waits (issue 15, liveness 3).  Go's sysmon
 * takes the P away from a thread blocked in a system call; cbcmn cannot
 * take an executor's private queues from under it, but it can stop
 * routing work to it and let the others take what they may:
 *
 *   - Each tick the monitor reads every live executor's diag.run_seq (odd
 *     while a task runs, one more at each start and end: sched.c) and
 *     its tasks_run count.  The same odd value for longer than
 *     cfg.stall_ns, with no task started meanwhile, is one run holding
 *     the executor: a stall.  (A task awaiting its nursery runs
 *     children on its own stack in one run: a fork-join subtree may
 *     last seconds, and starts a child every few microseconds.  Its
 *     queue moves: it is not a stall.)
 *   - It publishes the stall in the executor (stall_seq = that run), the
 *     statistics segment (stalls, stall_task: the task's id), and the
 *     exec_stall probe.
 *   - Thieves' steal gate passes for a stalled executor (sched.c,
 *     pick_stuck()), and a wake no longer sends a task home to it
 *     (cbcmn__schedule()): the task runs on its waker's executor, or from
 *     a thread, the inject queue.  What was sent to it already goes the
 *     same way: threads' (its remote list) and executors' (the tasks in
 *     its lanes' messages), cbcmn__stall_rescue().
 *   - While its deque or next-task slot holds work and nobody searches,
 *     the monitor notifies an idle executor; with none idle that
 *     notification starts one more executor if the runtime has room
 *     (min_workers < workers, wake.c).  Without room that work waits for
 *     the stall to end, and stays counted in queue_depth.
 *   - The stall ends when the run does: run_seq moves on, and stall_seq no
 *     longer matches it; the monitor clears both stall_seq and stall_task
 *     at its next look.
 * What only the stalled executor can do stays with it: the messages of
 * its lanes (emptied of their tasks: it acknowledges them), calls sent to
 * it, its yield list, pinned tasks, timers and ring, and what senders
 * still hold on their backlogs for it (its lanes were full):
 * docs/SCHEDULER.md, "Stalls".
 *
 * Cost: the monitor ticks every MON_TICK_NS while some task runs, and
 * backs off, doubling up to MON_IDLE_MAX_NS, while none does; an executor
 * that finds work after a search wakes it from such a sleep
 * (cbcmn__monitor_poke()).  An idle process sees it about ten times a
 * second.  The executors pay one relaxed store per run (diag.run_task)
 * and one relaxed load per search that found work.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "futex.h"
#include "monitor.h"
#include "probes.h"
#include "runtime.h"

#define MON_TICK_NS 1000000ull      /* while a task runs */
#define MON_IDLE_MAX_NS 100000000ull /* the longest sleep while none does */
/* The shortest tick, whatever cfg.stall_ns says: a tiny stall_ns must not
 * turn the monitor into a spinning thread. */
#define MON_TICK_MIN_NS 100000ull

/* rt->mon_word: what the monitor does (a futex word). */
enum { MON_TICKING = 0, MON_IDLE = 1, MON_STOP = 2 };

struct cbcmn__monitor {
	struct cbcmn_runtime *rt;
	pthread_t thread;
	uint64_t tick_ns;
	_Atomic uint64_t wakeups;
	/* Per executor, the monitor's own: the run it saw last, its tasks
	 * started by then, and since when it saw neither move. */
	uint64_t *seen_seq, *seen_runs, *seen_ns;
};

static uint64_t mon_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* x's run seq has held it for ns: publish the stall and name its task,
 * unless the run has just ended. */
static void stall_report(struct cbcmn__monitor *m, struct cbcmn__exec *x, uint64_t seq,
			 uint64_t ns)
{
	struct cbcmn_runtime *rt = m->rt;
	/* acquire on run_seq (the first read, in mon_look()) pairs with
	 * run_seq_begin()'s release: the id read after it is this run's (or
	 * an inline child's in it) or a later run's.  The second read
	 * catches a run that ended meanwhile, not every one: a run ending
	 * just as it is reported, after stall_ns, may be reported under the
	 * next task's id.  A report, never a decision: stall_seq below
	 * names the run itself. */
	uint64_t id = atomic_load_explicit(&x->diag.run_task, memory_order_relaxed);
	if (atomic_load_explicit(&x->diag.run_seq, memory_order_relaxed) != seq)
		return; /* it ended meanwhile */
	/* Relaxed: thieves and wakers only compare it with run_seq
	 * (cbcmn__exec_stalled()), and a stale answer is safe either way. */
	atomic_store_explicit(&x->stall_seq, seq, memory_order_relaxed);
	atomic_store_explicit(&x->ss->stall_task, id, memory_order_relaxed);
	CBCMN__COUNT(x, stalls, 1); /* the monitor is its only writer */
	CBCMN_PROBE4(exec_stall, x->id, id, ns, rt->seg.rt_id);
}

/* One look at every executor.  True if some task runs, or ran since the
 * last look (the monitor keeps ticking: a busy executor caught between
 * two runs is busy). */
static bool mon_look(struct cbcmn__monitor *m, uint64_t now)
{
	struct cbcmn_runtime *rt = m->rt;
	bool running = false, wanted = false;
	for (uint32_t i = 0; i < rt->nexec; i++) {
		struct cbcmn__exec *x = rt->exec[i];
		/* A stopped executor's run_seq may stay odd (its thread died
		 * in a run): not a stall, nobody runs there. */
		bool live = atomic_load_explicit(&x->lstate, memory_order_relaxed) ==
			    CBCMN__EX_RUNNING;
		uint64_t seq = live ? atomic_load_explicit(&x->diag.run_seq, memory_order_acquire)
				    : 0;
		uint64_t runs = atomic_load_explicit(&x->ss->ctr.tasks_run, memory_order_relaxed);
		if (!(seq & 1) || seq != m->seen_seq[i] || runs != m->seen_runs[i]) {
			/* A stall ended.  stall_seq back to 0 too: wakers
			 * read run_seq (a line the executor writes at every
			 * run) only while it is set (cbcmn__exec_stalled()). */
			if (atomic_load_explicit(&x->stall_seq, memory_order_relaxed)) {
				atomic_store_explicit(&x->stall_seq, 0, memory_order_relaxed);
				atomic_store_explicit(&x->ss->stall_task, 0, memory_order_relaxed);
			}
			running |= (seq & 1) || seq != m->seen_seq[i];
			m->seen_seq[i] = seq;
			m->seen_runs[i] = runs;
			m->seen_ns[i] = now;
			continue;
		}
		running = true;
		if (atomic_load_explicit(&x->stall_seq, memory_order_relaxed) != seq) {
			if (now - m->seen_ns[i] <= rt->cfg.stall_ns)
				continue;
			stall_report(m, x, seq, now - m->seen_ns[i]);
		}
		/* Tasks threads sent it before the stall was seen, or that
		 * a thread sent as it was being published: elsewhere.  (A
		 * pinned one comes back at every tick: it stays.) */
		if (atomic_load_explicit(&x->stall_seq, memory_order_relaxed) == seq &&
		    (atomic_load_explicit(&x->remote, memory_order_relaxed) ||
		     cbcmn__has_mail(x)))
			cbcmn__stall_rescue(x, seq);
		wanted |= cbcmn__exec_queue_depth(x) != 0;
	}
	/* Work queued behind a stall, and nobody looking for work: wake an
	 * idle executor, whose steal gate passes for the stalled one; with
	 * none idle, the notification starts one more executor if the
	 * runtime has room (wake.c).  Again at every tick while it waits: a
	 * thief takes half a queue at a time. */
	if (wanted && atomic_load_explicit(&rt->num_searching, memory_order_relaxed) == 0)
		cbcmn__notify_one(rt);
	return running;
}

static void *mon_main(void *arg)
{
	struct cbcmn__monitor *m = arg;
	struct cbcmn_runtime *rt = m->rt;
	uint64_t sleep = m->tick_ns;
	for (;;) {
		/* A long sleep says so (MON_IDLE), for executors to end it. */
		uint32_t expect = MON_TICKING;
		if (sleep > m->tick_ns) {
			if (!atomic_compare_exchange_strong_explicit(&rt->mon_word, &expect,
								     MON_IDLE, memory_order_relaxed,
								     memory_order_relaxed))
				break; /* MON_STOP: nobody else leaves MON_TICKING */
			expect = MON_IDLE;
		} else if (atomic_load_explicit(&rt->mon_word, memory_order_relaxed) == MON_STOP) {
			break;
		}
		struct timespec ts = {.tv_sec = (time_t)(sleep / 1000000000ull),
				      .tv_nsec = (long)(sleep % 1000000000ull)};
		cbcmn__futex_wait(&rt->mon_word, expect, &ts);
		atomic_fetch_add_explicit(&m->wakeups, 1, memory_order_relaxed);
		/* Back to ticking, unless told to stop.  Poked (it is
		 * MON_TICKING already): an executor found work, whose run may
		 * not have begun yet: tick from now on, or a stall beginning
		 * right after this look would wait for the next long sleep. */
		uint32_t w = MON_IDLE;
		bool poked = false;
		if (expect == MON_IDLE &&
		    !atomic_compare_exchange_strong_explicit(&rt->mon_word, &w, MON_TICKING,
							     memory_order_relaxed, memory_order_relaxed))
			poked = w == MON_TICKING;
		if (atomic_load_explicit(&rt->mon_word, memory_order_relaxed) == MON_STOP)
			break;
		if (mon_look(m, mon_now()) || poked)
			sleep = m->tick_ns;
		else if ((sleep *= 2) > MON_IDLE_MAX_NS)
			sleep = MON_IDLE_MAX_NS;
	}
	return NULL;
}

void cbcmn__monitor_poke_slow(struct cbcmn_runtime *rt)
{
	uint32_t w = MON_IDLE;
	if (atomic_compare_exchange_strong_explicit(&rt->mon_word, &w, MON_TICKING,
						    memory_order_relaxed, memory_order_relaxed))
		cbcmn__futex_wake(&rt->mon_word, 1);
}

int cbcmn__monitor_start(struct cbcmn_runtime *rt)
{
	if (rt->lab || rt->cfg.stall_ns == CBCMN_STALL_OFF || rt->nexec == 0)
		return 0;
	struct cbcmn__monitor *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->rt = rt;
	/* A tick at most half the stall time: a stall is seen by 1.5 times
	 * cfg.stall_ns at the latest while tasks run. */
	m->tick_ns = rt->cfg.stall_ns / 2 < MON_TICK_NS ? rt->cfg.stall_ns / 2 : MON_TICK_NS;
	if (m->tick_ns < MON_TICK_MIN_NS)
		m->tick_ns = MON_TICK_MIN_NS;
	m->seen_seq = calloc(rt->nexec, sizeof(*m->seen_seq));
	m->seen_runs = calloc(rt->nexec, sizeof(*m->seen_runs));
	m->seen_ns = calloc(rt->nexec, sizeof(*m->seen_ns));
	atomic_store_explicit(&rt->mon_word, MON_TICKING, memory_order_relaxed);
	/* All signals blocked from its first instruction: a process-directed
	 * signal goes to one of the program's threads, never to ours. */
	pthread_attr_t a;
	sigset_t all;
	sigfillset(&all);
	pthread_attr_init(&a);
	pthread_attr_setsigmask_np(&a, &all);
	int rc = m->seen_seq && m->seen_runs && m->seen_ns
			 ? pthread_create(&m->thread, &a, mon_main, m)
			 : ENOMEM;
	pthread_attr_destroy(&a);
	if (rc != 0) {
		free(m->seen_seq);
		free(m->seen_runs);
		free(m->seen_ns);
		free(m);
		return -rc;
	}
	/* Named before create returns: what top, perf and the tools show. */
	pthread_setname_np(m->thread, "cbcmn-monitor");
	rt->mon = m;
	return 0;
}

void cbcmn__monitor_stop(struct cbcmn_runtime *rt)
{
	struct cbcmn__monitor *m = rt->mon;
	if (!m)
		return;
	atomic_store_explicit(&rt->mon_word, MON_STOP, memory_order_relaxed);
	cbcmn__futex_wake(&rt->mon_word, 1);
	pthread_join(m->thread, NULL);
	rt->mon = NULL;
	free(m->seen_seq);
	free(m->seen_runs);
	free(m->seen_ns);
	free(m);
}

uint64_t cbcmn__monitor_wakeups(const struct cbcmn_runtime *rt)
{
	return rt->mon ? atomic_load_explicit(&rt->mon->wakeups, memory_order_relaxed) : 0;
}
