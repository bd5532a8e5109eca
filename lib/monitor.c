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
 *     (min_workers < workers, wake.c).  Without room the spare executor
 *     stands in, if the stalled thread sleeps in the kernel
 *     (spare_steer()); else that work waits for the stall to end, and
 *     stays counted in queue_depth.
 *   - Apart from stalls: an actor woken into a running actor's slot whose
 *     notification is still owed after cfg.owe_ns is notified for
 *     (owe_look()).
 *   - The stall ends when the run does: run_seq moves on, and stall_seq no
 *     longer matches it; the monitor clears both stall_seq and stall_task
 *     at its next look.
 *   - The actors on its wheel (ready, owner-only) go to the inject queue
 *     too: the owner lets go of the wheel for each run, and the monitor
 *     takes them meanwhile (cbcmn__actor_wheel_rescue()).
 * What only the stalled executor can do stays with it: the messages of
 * its lanes (emptied of their tasks and actor messages: it acknowledges
 * them), calls sent to it, its yield list, pinned tasks (and pinned actors and posse members
 * on its wheel), timers and ring, and what senders
 * still hold on their backlogs for it (its lanes were full):
 * docs/SCHEDULER.md, "Stalls".
 *
 * Cost, like Go's sysmon: while tasks run, the monitor sleeps from
 * m->tick_ns (MON_TICK_NS, 1 ms, or stall_ns / 2 if less) doubling while
 * no stall begins or ends, up to stall_ns / 2 (5 ms by default: about 200
 * looks a second on a busy runtime, a stall seen by 1.5 stall_ns), waking
 * earlier when the oldest run it saw becomes a stall, every cfg.owe_ns
 * (1 ms by default) while an actor's owed notification waits to be paid,
 * and every owe_ns to 4 owe_ns while they come and go, each paid by its
 * executor before the next look (owe_look(), the calm back-off); a
 * sleep longer than owe_ns is cut short by the next debt opened, and
 * one longer than 8 owe_ns
 * looks at the debts once more owe_ns into it (mon_sleep_long()).  While every
 * executor is parked it sleeps without a timeout and an executor leaving
 * its park wakes it (cbcmn__monitor_poke()): a quiet process never sees
 * it.  The executors pay one relaxed store per run (diag.run_task) and one
 * load of the monitor's word per park, per thread start and per debt
 * opened.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpuquota.h"
#include "futex.h"
#include "monitor.h"
#include "probes.h"
#include "runtime.h"

#define MON_TICK_NS 1000000ull      /* while a task runs */
/* The shortest tick, whatever cfg.stall_ns says: a tiny stall_ns must not
 * turn the monitor into a spinning thread. */
#define MON_TICK_MIN_NS 100000ull
/* The longest sleep while tasks run, whatever cfg.stall_ns says: the
 * doubling stays far from overflow, and a stall_ns of hours is still
 * seen about when it is due. */
#define MON_SLEEP_MAX_NS 1000000000ull
/* How often, while tasks run, the spinning bound is computed again
 * (cbcmn__spin_max_update(): an affinity changed). */
#define MON_SPIN_MAX_NS 1000000000ull
/* How often, while tasks run, the host's runnable threads are counted
 * (host_load()). */
#define MON_LOAD_NS 10000000ull
/* ... and averaged over this span (cbcmn__host_run_avg()). */
#define MON_LOAD_SPAN_NS 80000000ull
/* A sleep longer than this many cfg.owe_ns, nothing owed, looks at the
 * debts again owe_ns in (mon_sleep_long(), the window). */
#define MON_WINDOW_OWES 8u
/* While debts come and go and each is paid by its executor before our
 * next look, the looks back off from owe_ns to this many owe_ns (owe_look(),
 * the calm back-off): a debt is then paid within 2 such sleeps of its
 * opening, within the window's bound (MON_WINDOW_OWES + 1 owe_ns). */
#define MON_CALM_OWES 4u
/* ... while each look finds at least this many debts opened and closed
 * since the one before on every word that moved (a chain); a word moved
 * by fewer (lone senders; one open may compute on) is looked at again
 * owe_ns later, the back-off back to owe_ns. */
#define MON_CALM_DEBTS 16u

/* rt->mon_word: what the monitor does (a futex word). */
enum { MON_TICKING = 0, MON_IDLE = 1, MON_STOP = 2, MON_LONG = CBCMN__MON_LONG };

struct cbcmn__monitor {
	struct cbcmn_runtime *rt;
	pthread_t thread;
	uint64_t tick_ns, max_ns; /* the shortest and the longest sleep while tasks run */
	_Atomic uint64_t wakeups;
	_Atomic uint64_t owe_paid; /* debts owe_look() found open past owe_ns */
	/* Tests: sleeps of mon_sleep_long()'s begun in MON_LONG, and those
	 * a debt's poke cut short (the word was moved off MON_LONG). */
	_Atomic uint64_t long_sleeps, owe_pokes;
	/* ... and those cut short by our look after their first owe_ns: a
	 * debt opened as we said MON_LONG, whose poke missed us. */
	_Atomic uint64_t owe_late;
	/* ... and sleeps of the calm back-off at its longest (owe_sleep()). */
	_Atomic uint64_t calm_sleeps;
	/* Per executor, the monitor's own: the run it saw last, its tasks
	 * started by then, and since when it saw neither move. */
	uint64_t *seen_seq, *seen_runs, *seen_ns;
	/* Per executor of the program's: the stalled run whose thread was
	 * asleep at the last look (spare_steer()). */
	uint64_t *asleep_seq;
	/* Per executor, likewise, for the rescue of its wheel (the second
	 * half of asleep_seq's allocation). */
	uint64_t *wheel_seq;
	/* Per executor: its owed notification's word at the last look,
	 * since when it has held it, and whether we paid that debt
	 * (owe_look()). */
	struct mon_owe {
		uint64_t since;
		uint32_t word;
		bool paid;
	} *owe;
	/* The calm back-off's sleep while debts come and go (owe_look()):
	 * owe_ns, doubled at each look that found a chain's debts paid, up to
	 * MON_CALM_OWES owe_ns. */
	uint64_t calm_ns;
	uint64_t spin_max_at; /* when cbcmn__spin_max_update() ran last */
	/* The host's load (host_load()): /proc/loadavg, open for the
	 * runtime's life (-1: none), the runnable threads besides us
	 * averaged over the last reads, and the host's CPUs. */
	int loadavg_fd;
	double host_run;
	uint32_t host_cpus;
	uint64_t load_at;
	bool host_full; /* the gate's state */
};

static uint64_t mon_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Is executor i parked (its idle bit set, wake.c)?  seq_cst: in
 * mon_all_parked(), the second half of the pair with the poke. */
static bool mon_parked(struct cbcmn_runtime *rt, uint32_t i)
{
	return atomic_load_explicit(&rt->idle_bits[i / 64], memory_order_seq_cst) &
	       (1ull << (i % 64));
}

/* Is every executor with a thread parked? */
static bool mon_all_parked(struct cbcmn_runtime *rt)
{
	for (uint32_t i = 0; i < rt->nexec; i++) {
		uint32_t ls = atomic_load_explicit(&rt->exec[i]->lstate, memory_order_seq_cst);
		if (ls != CBCMN__EX_STOPPED && (ls != CBCMN__EX_RUNNING || !mon_parked(rt, i)))
			return false;
	}
	return true;
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

/* Read /proc/self/task/TID/NAME into buf; its length, or -1. */
static ssize_t mon_proc_read(int32_t tid, const char *name, char *buf, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%d/%s", (int)tid, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	return n;
}

/* Is thread tid asleep in a blocking call: in the kernel, interruptibly
 * (S: a read, poll, sleep), not running nor kept off the CPU (R), nor in
 * a page fault or another short uninterruptible wait (D), nor on a futex
 * (a lock or condition variable: the runtime's own locks wait there too,
 * for a holder a CPU quota paused, and a task that waits for a thread
 * that way is taken for nothing; its wchan says futex_...)?  Unreadable
 * (no /proc): asleep, so that the spare still stands in. */
static bool mon_thread_asleep(int32_t tid)
{
	if (tid <= 0)
		return false;
	char buf[256];
	if (mon_proc_read(tid, "stat", buf, sizeof(buf)) <= 0)
		return true;
	/* "tid (comm) S ...": comm may hold spaces and parentheses, the
	 * last ')' ends it. */
	const char *p = strrchr(buf, ')');
	if (p && (p[1] != ' ' || p[2] != 'S'))
		return false;
	return mon_proc_read(tid, "wchan", buf, sizeof(buf)) <= 0 ||
	       strncmp(buf, "futex", 5) != 0;
}

/* Is stalled x's thread asleep in a blocking call at two looks of run seq
 * (*mark: the run it was asleep in at the last look)?  Twice: a thread
 * that waited a moment for a lock whose holder the kernel had put off the
 * CPU (a CPU quota's pause) is not taken for a blocked call. */
static bool asleep_twice(uint64_t *mark, const struct cbcmn__exec *x, uint64_t seq)
{
	if (!mon_thread_asleep(atomic_load_explicit(&x->ss->tid, memory_order_relaxed))) {
		*mark = 0;
		return false;
	}
	if (*mark == seq)
		return true;
	*mark = seq;
	return false;
}

/* The spare executor (runtime.h, sched.c): on duty while an executor
 * of the program's is stalled; started while one of them is asleep in a
 * blocking call, work is waiting and nobody is looking for it (no
 * executor searching, none idle: every other one is busy or stalled),
 * as Go's sysmon hands a P to a new M; off duty, it retires once it holds
 * nothing.  A stall that is a loop (or CPU starvation) gets no spare: a
 * thread more would take CPU from the loop, not give it back. */
static void spare_steer(struct cbcmn__monitor *m, bool wanted)
{
	struct cbcmn_runtime *rt = m->rt;
	struct cbcmn__exec *s = rt->exec[rt->nexec - 1];
	/* Work for it: behind a stall, or sent to any executor (the inject
	 * queue, where the stalls' rescued tasks went too). */
	wanted = wanted || atomic_load_explicit(&rt->inj_len, memory_order_relaxed) != 0;
	bool stalled = false, idle = cbcmn__nlive(rt) < rt->nexec;
	int32_t blocked = -1; /* a stalled executor asleep in a blocking call */
	for (uint32_t i = 0; i < cbcmn__nworkers(rt); i++) {
		struct cbcmn__exec *x = rt->exec[i];
		uint64_t seq = atomic_load_explicit(&x->stall_seq, memory_order_relaxed);
		if (!cbcmn__exec_stalled(x))
			continue;
		stalled = true;
		/* Asked only while it matters: a read of /proc. */
		if (!wanted || !idle || blocked >= 0)
			continue;
		if (asleep_twice(&m->asleep_seq[i], x, seq))
			blocked = (int32_t)i;
	}
	bool was = atomic_load_explicit(&rt->spare_duty, memory_order_relaxed);
	if (was != stalled) {
		/* Relaxed: the spare only reads it to choose what to take;
		 * the start below is the thread creation's order. */
		atomic_store_explicit(&rt->spare_duty, stalled, memory_order_relaxed);
		/* Off duty: it may be parked, on duty with nothing to do. */
		if (!stalled && atomic_load_explicit(&s->lstate, memory_order_relaxed) ==
					CBCMN__EX_RUNNING)
			cbcmn__kick(s);
	}
	if (blocked >= 0 && atomic_load_explicit(&rt->num_searching, memory_order_relaxed) == 0 &&
	    atomic_load_explicit(&rt->num_idle, memory_order_relaxed) == 0) {
		CBCMN_PROBE3(exec_spare, s->id, blocked, rt->seg.rt_id);
		cbcmn__exec_grow(rt);
	}
}

/* What a look found. */
struct mon_seen {
	bool changed; /* a stall began or ended: look again soon */
	bool quiet;   /* every live executor is parked: nothing to watch */
	bool owing;   /* owed notifications come and go, or one waits: look in m->calm_ns */
	bool waits;   /* a debt waits (open at two looks, or a lone one): look in owe_ns */
	bool few;     /* a word moved by fewer debts than a chain's: no back-off */
	uint64_t due; /* when the oldest run seen so far becomes a stall (0: none) */
};

/* Executor i's owed notification (sched.c, owe_notify()): an actor its
 * running actor woke into its slot, whose idle executor's notification
 * waits for the sender's next switch.  A sender that computes on without
 * a runtime call never makes one: the debt is paid here, once by us, when
 * we find it open under the same number at two looks cfg.owe_ns apart: the
 * actor, which the executor holds off its slot while the debt is open, goes
 * to the inject queue (the gate taken, as for the wheel's rescue), where
 * an idle executor notified for it takes it.
 * We cannot close the word (its executor's alone): the executor's own
 * payment, should it come while the actor still waits in its slot,
 * notifies once more (runtime.h, owe).
 * A chain whose senders block clears each debt at its hop (the direct
 * switch), long before, and its debts' numbers move between two looks:
 * none is paid, no idle executor is woken (test_actor_notify).  While the
 * numbers move we look every m->calm_ns (r->owing): owe_ns, doubled while
 * each look finds a chain's debts (MON_CALM_DEBTS or more on every word
 * that moved) closed by their executors, up to MON_CALM_OWES owe_ns (the calm back-off: a chain of 6 million hops
 * a second cost the monitor a wake every owe_ns, 7-10 ns of its CPU a
 * hop).  A debt opened after a look is seen at the next, calm_ns later at
 * most, and paid at the one after (it is then calm_ns >= owe_ns old):
 * within 2 MON_CALM_OWES owe_ns of its opening, inside the window's bound
 * (mon_sleep_long()).  One seen open at two looks (r->waits: its executor
 * is slow to pay, or we are early) brings the looks back to owe_ns, and
 * so does a word moved by fewer than MON_CALM_DEBTS debts since our last
 * look (r->few: lone debts, not a chain's; one open is r->waits too).  So
 * the looks back off only while a chain runs, and a lone sender's debt
 * is paid owe_ns after the look that finds it, within 2 owe_ns of its
 * opening (unless it opened during a chain's backed-off sleep: then
 * within calm_ns + owe_ns, 5 owe_ns), mostly ahead of a woken
 * executor's take of the held actor
 * (test_a_sender_that_computes_on_has_its_debt_paid_once).  The looks
 * used to back off at any that found a word moved, one closed debt
 * enough: a trickle of lone debts, one a look, backed them off, and the
 * next lone debt waited up to 5 owe_ns
 * (test_a_trickle_of_lone_debts_does_not_back_the_looks_off).  One
 * load a look; the executors write nothing for us but the word they keep
 * anyway. */
static void owe_look(struct cbcmn__monitor *m, uint32_t i, uint64_t now, struct mon_seen *r)
{
	struct cbcmn__exec *x = m->rt->exec[i];
	struct mon_owe *o = &m->owe[i];
	/* acquire: pairs with owe_hold()'s release: the actor held for
	 * this debt is there for the rescue's exchange. */
	uint32_t w = atomic_load_explicit(&x->owe, memory_order_acquire);
	if (w != o->word) {
		/* Each debt moves the word by 2 (opened odd, closed even). */
		if (w - o->word < 2 * MON_CALM_DEBTS) {
			if (w & 1)
				r->waits = true;
			r->few = true;
		}
		*o = (struct mon_owe){.since = now, .word = w, .paid = false};
		r->owing = true;
		return;
	}
	if (!(w & 1) || o->paid)
		return;
	r->waits = true;
	if (now - o->since < m->rt->cfg.owe_ns)
		return;
	o->paid = true;
	atomic_fetch_add_explicit(&m->owe_paid, 1, memory_order_relaxed);
	cbcmn__notify_owed_rescue(x);
}

/* The sleep that owe_look()'s findings r allow (at most sleep): owe_ns
 * while a debt waits or lone debts move, m->calm_ns while a chain's move
 * (then doubled, the calm back-off), sleep when nothing is owed (calm_ns back to owe_ns:
 * the first debt after a quiet spell is paid within 2 owe_ns). */
static uint64_t owe_sleep(struct cbcmn__monitor *m, const struct mon_seen *r, uint64_t sleep)
{
	uint64_t owe_ns = m->rt->cfg.owe_ns;
	uint64_t want = sleep;
	if (r->waits || !r->owing) {
		if (r->waits)
			want = owe_ns;
		m->calm_ns = owe_ns;
	} else if (r->few) {
		want = m->calm_ns = owe_ns;
	} else {
		want = m->calm_ns;
		if (m->calm_ns < MON_CALM_OWES * owe_ns)
			m->calm_ns *= 2;
		else
			atomic_fetch_add_explicit(&m->calm_sleeps, 1, memory_order_relaxed);
	}
	return want < sleep ? want : sleep;
}

/* One look at every executor. */
static struct mon_seen mon_look(struct cbcmn__monitor *m, uint64_t now)
{
	struct cbcmn_runtime *rt = m->rt;
	struct mon_seen r = {
		.changed = false, .quiet = true, .owing = false, .waits = false, .few = false, .due = 0};
	bool wanted = false;
	for (uint32_t i = 0; i < rt->nexec; i++) {
		struct cbcmn__exec *x = rt->exec[i];
		/* A stopped executor's run_seq may stay odd (its thread died
		 * in a run): not a stall, nobody runs there. */
		uint32_t ls = atomic_load_explicit(&x->lstate, memory_order_relaxed);
		bool live = ls == CBCMN__EX_RUNNING;
		if (live)
			owe_look(m, i, now, &r);
		if (ls != CBCMN__EX_STOPPED && (!live || !mon_parked(rt, i)))
			r.quiet = false;
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
				r.changed = true;
			}
			m->seen_seq[i] = seq;
			m->seen_runs[i] = runs;
			m->seen_ns[i] = now;
			if (seq & 1)
				goto candidate; /* a run, new to us */
			continue;
		}
		if (atomic_load_explicit(&x->stall_seq, memory_order_relaxed) != seq) {
			if (now - m->seen_ns[i] <= rt->cfg.stall_ns)
				goto candidate;
			stall_report(m, x, seq, now - m->seen_ns[i]);
			r.changed = true;
		}
		/* Tasks sent to it before the stall was seen, or as it was
		 * being published: elsewhere.  (A pinned one in its remote
		 * list comes back at every look: it stays.) */
		if (atomic_load_explicit(&x->stall_seq, memory_order_relaxed) == seq &&
		    (atomic_load_explicit(&x->remote, memory_order_relaxed) ||
		     cbcmn__has_mail(x)))
			cbcmn__stall_rescue(x, seq);
		/* Its wheel's actors (it has had a wheel: its load was
		 * published): only it could run them (actor_sched.c), and
		 * if its thread is asleep in a blocking call, that may be
		 * for one of them.  Not for a loop, nor CPU starvation (its
		 * thread kept off the CPU by a quota): that run ends by
		 * itself, and moving every actor for it unbalanced a
		 * balanced runtime (test_balanced_runtime_migrates_nothing).
		 * What is left on it (pinned, posse) stays. */
		if (atomic_load_explicit(&x->stall_seq, memory_order_relaxed) == seq &&
		    atomic_load_explicit(&x->ss->act.load_at, memory_order_relaxed) &&
		    asleep_twice(&m->wheel_seq[i], x, seq)) {
			/* The run may be a receiver's that owes waiting lane
			 * senders their wake, which only its end pays: it
			 * may be waiting for one of them (actor_mbox.c). */
			cbcmn__mb_room_rescue(x);
			if (cbcmn__actor_wheel_rescue(x) | cbcmn__held_rescue(x))
				wanted = true;
		}
		wanted |= cbcmn__exec_queue_depth(x) != 0;
		continue;
	candidate:;
		/* This run is a stall once it has lasted stall_ns from when
		 * we first saw it (it may be older: seen late, reported late,
		 * by the sleep since the look before at most).  The ';' above:
		 * a label before a declaration is C23 (clang's fuzz build). */
		uint64_t due = rt->cfg.stall_ns < UINT64_MAX - m->seen_ns[i] - 1
				       ? m->seen_ns[i] + rt->cfg.stall_ns + 1
				       : UINT64_MAX; /* a stall_ns of centuries */
		if (r.due == 0 || due < r.due)
			r.due = due;
	}
	/* Work queued behind a stall, and nobody looking for work: wake an
	 * idle executor, whose steal gate passes for the stalled one; with
	 * none idle, the notification starts one more executor if the
	 * runtime has room (wake.c).  Again at every look while it waits: a
	 * thief takes half a queue at a time. */
	if (wanted) {
		r.changed = true;
		if (atomic_load_explicit(&rt->num_searching, memory_order_relaxed) == 0)
			cbcmn__notify_one(rt);
	}
	if (rt->spare)
		spare_steer(m, wanted);
	return r;
}

/* Sleep on the monitor's word while it holds expect: for ns, or with ns
 * 0 until woken.  False if told to stop. */
static bool mon_sleep(struct cbcmn__monitor *m, uint32_t expect, uint64_t ns)
{
	struct cbcmn_runtime *rt = m->rt;
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
			      .tv_nsec = (long)(ns % 1000000000ull)};
	cbcmn__futex_wait(&rt->mon_word, expect, ns ? &ts : NULL);
	atomic_fetch_add_explicit(&m->wakeups, 1, memory_order_relaxed);
	return atomic_load_explicit(&rt->mon_word, memory_order_relaxed) != MON_STOP;
}

/* Sleep in state (MON_LONG) for all of ns, unless a waker moves the word
 * off it: a futex wait may return early with the word unchanged (a
 * waker's late wake, meant for a sleep before, after it moved the word
 * and we put it back; a spurious wake), and the window's look
 * (mon_sleep_long()) must come owe_ns into the sleep, not before: an
 * early look could miss the debt whose store the window waits for.
 * False if told to stop. */
static bool mon_sleep_full(struct cbcmn__monitor *m, uint32_t state, uint64_t ns)
{
	uint64_t t0 = mon_now(), slept = 0;
	do {
		if (!mon_sleep(m, state, ns - slept))
			return false;
		slept = mon_now() - t0;
	} while (slept < ns &&
		 atomic_load_explicit(&m->rt->mon_word, memory_order_relaxed) == state);
	return true;
}

/* Has a debt opened, or closed, on a live executor since our last look
 * (owe_look())? */
static bool owe_moved(const struct cbcmn__monitor *m)
{
	const struct cbcmn_runtime *rt = m->rt;
	for (uint32_t i = 0; i < rt->nexec; i++) {
		const struct cbcmn__exec *x = rt->exec[i];
		if (atomic_load_explicit(&x->lstate, memory_order_relaxed) == CBCMN__EX_RUNNING &&
		    atomic_load_explicit(&x->owe, memory_order_relaxed) != m->owe[i].word)
			return true;
	}
	return false;
}

/* Say state (MON_IDLE or MON_LONG) in the monitor's word: the first half
 * of a store-buffering pair with the executors, whose second half is a
 * look at what they publish (mon_all_parked(), owe_moved()).  seq_cst,
 * a locked instruction once a sleep.  False on MON_STOP: nobody else
 * leaves MON_TICKING. */
static bool mon_enter(struct cbcmn_runtime *rt, uint32_t state)
{
	uint32_t w = MON_TICKING;
	return atomic_compare_exchange_strong_explicit(&rt->mon_word, &w, state,
						       memory_order_seq_cst, memory_order_relaxed);
}

/* Leave state for MON_TICKING, unless a waker (mon_wake_from()) did it
 * first.  What we found there: state (we left it), MON_TICKING (a waker
 * moved it: we were poked) or MON_STOP. */
static uint32_t mon_leave(struct cbcmn_runtime *rt, uint32_t state)
{
	uint32_t w = state;
	atomic_compare_exchange_strong_explicit(&rt->mon_word, &w, MON_TICKING,
						memory_order_relaxed, memory_order_relaxed);
	return w;
}

/* Every executor parked: sleep until one leaves its park.  A
 * store-buffering pair with cbcmn__monitor_poke() after cbcmn__park(): we
 * say MON_IDLE, then look at the idle bits again; an executor clears its
 * bit, then looks at our word.  Either we see it awake, or it sees
 * MON_IDLE and wakes us.  *parked: whether we slept (else one woke
 * between the two looks).  False on MON_STOP. */
static bool mon_sleep_idle(struct cbcmn__monitor *m, bool *parked)
{
	struct cbcmn_runtime *rt = m->rt;
	if (!mon_enter(rt, MON_IDLE))
		return false;
	*parked = mon_all_parked(rt);
	if (*parked)
		mon_sleep(m, MON_IDLE, 0);
	return mon_leave(rt, MON_IDLE) != MON_STOP;
}

/* Sleep *ns, longer than cfg.owe_ns, nothing owed at our last look (the
 * back-off).  Said MON_LONG, so that the next debt opened wakes us
 * (monitor.h, cbcmn__monitor_owe_poke()) and is paid owe_ns after it
 * opened, not after up to stall_ns / 2.  A debt's opener that found
 * MON_LONG put MON_TICKING back; so do we, once awake.
 *
 * The window: the opener stores its debt, then loads our word; we store
 * MON_LONG, then load the debts' words (owe_moved()).  Our side is
 * ordered (a seq_cst exchange, then loads); the opener's is not: its
 * store may still sit in its store buffer as its load reads MON_TICKING,
 * and then our look misses the debt too.  A fence between the opener's
 * store and load would close it at every debt opened: one a hop of a
 * chain of actors (on x86 an mfence, tens of cycles of a hop of 150 ns).
 * We pay instead, in long sleeps only: owe_ns into one longer than
 * MON_WINDOW_OWES owe_ns we look at the debts' words again.  By then
 * (100 us at least) the opener's store, made before its load, has left
 * its store buffer (the hardware drains one in nanoseconds; C11 says
 * "within a reasonable amount of time"): a debt opened in the window is
 * found there and paid within 2 owe_ns, as any other.  The cost: a wake
 * more a sleep of that length, our own timeout.  A shorter sleep is
 * waited out (within MON_WINDOW_OWES + 1 owe_ns, then): a look in each
 * would add a wake to every one of the back-off's, which with the
 * default stall_ns and owe_ns (5 ms, 1 ms) nearly doubled the monitor's
 * wakes on a busy runtime (docs/SCHEDULER.md, "The monitor's sleeps").
 * A debt opened between our last look and our MON_LONG store is found
 * by the first look below.  *ns is what we asked for, owe_ns if we cut
 * the sleep there.  False on MON_STOP. */
static bool mon_sleep_long(struct cbcmn__monitor *m, uint64_t *ns)
{
	struct cbcmn_runtime *rt = m->rt;
	uint64_t owe_ns = rt->cfg.owe_ns;
	if (!mon_enter(rt, MON_LONG))
		return false;
	bool moved = owe_moved(m);
	if (!moved)
		atomic_fetch_add_explicit(&m->long_sleeps, 1, memory_order_relaxed);
	uint64_t first = moved || *ns > MON_WINDOW_OWES * owe_ns ? owe_ns : *ns;
	mon_sleep_full(m, MON_LONG, first);
	if (first < *ns && !moved &&
	    atomic_load_explicit(&rt->mon_word, memory_order_relaxed) == MON_LONG) {
		/* Nobody woke us: the window's look. */
		moved = owe_moved(m);
		if (moved)
			atomic_fetch_add_explicit(&m->owe_late, 1, memory_order_relaxed);
		else
			mon_sleep_full(m, MON_LONG, *ns - owe_ns);
	}
	if (moved)
		*ns = owe_ns;
	uint32_t w = mon_leave(rt, MON_LONG);
	if (w == MON_TICKING) /* a debt's opener moved it: poked */
		atomic_fetch_add_explicit(&m->owe_pokes, 1, memory_order_relaxed);
	return w != MON_STOP;
}

/* Wake the monitor if it sleeps in state (MON_IDLE or MON_LONG): once,
 * by whoever moves its word back to MON_TICKING; never out of MON_STOP. */
static void mon_wake_from(struct cbcmn_runtime *rt, uint32_t state)
{
	uint32_t w = state;
	if (atomic_compare_exchange_strong_explicit(&rt->mon_word, &w, MON_TICKING,
						    memory_order_relaxed, memory_order_relaxed))
		cbcmn__futex_wake(&rt->mon_word, 1);
}

void cbcmn__monitor_owe_poke_slow(struct cbcmn_runtime *rt)
{
	mon_wake_from(rt, MON_LONG);
}

int cbcmn__loadavg_runnable(const char *s)
{
	/* "0.52 0.58 0.59 3/741 12345": three averages, then R/T. */
	for (int field = 0; field < 3; field++) {
		while (*s == ' ')
			s++;
		if (!*s)
			return -1;
		while (*s && *s != ' ')
			s++;
	}
	while (*s == ' ')
		s++;
	char *end;
	long r = strtol(s, &end, 10);
	return end != s && *end == '/' && r >= 0 && r < (1L << 30) ? (int)r : -1;
}

double cbcmn__host_run_avg(double avg, double run, uint64_t dt_ns)
{
	double w = dt_ns >= MON_LOAD_SPAN_NS ? 1.0 : (double)dt_ns / MON_LOAD_SPAN_NS;
	return avg + (run - avg) * w;
}

bool cbcmn__spin_gate_next(bool busy, double run, double enter, double leave)
{
	return busy ? run > leave : run > enter;
}

double cbcmn__host_others(int runnable, uint32_t spinning)
{
	double r = (double)runnable - 1.0 - (double)spinning;
	return r > 0 ? r : 0;
}

/* Does the host have more runnable threads
 * than CPUs?  Then an idle executor's spin takes a CPU that other threads
 * want (a server's clients on a loaded host: the fifteenth session
 * measured 1.5 % of the echo server's CPU and 6 % of its requests),
 * while a park costs less there (the CPU does not halt, though the woken
 * thread waits for a CPU behind the others: the short turns stay,
 * sched.c).  So no searcher spins long while the count (the kernel's
 * instant figure, less the monitor reading it and our spinners, averaged
 * over the last 80 ms: cbcmn__host_run_avg()) exceeds the host's CPUs by
 * half a thread, until it is back to the CPUs or below.  Our busy
 * executors count, as the host sees them; our spinners do not: they are
 * what the gate would stop (an echo server and its client on 2 CPUs read
 * about 2 with or without the server's spinner).  Where /proc/loadavg
 * cannot be read, the gate stays open.  A pread a 10 ms, no descriptor
 * opened while running.  (A cgroup's CPU limit is spin_claim()'s, sched.c:
 * our own count, exact, where the host's says nothing of the quota.) */
static void host_load(struct cbcmn__monitor *m, uint64_t dt_ns)
{
	struct cbcmn_runtime *rt = m->rt;
	char buf[128];
	ssize_t n = pread(m->loadavg_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return;
	buf[n] = 0;
	int r = cbcmn__loadavg_runnable(buf);
	if (r < 1)
		return;
	uint32_t spinning = atomic_load_explicit(&rt->num_spinning, memory_order_relaxed);
	m->host_run = cbcmn__host_run_avg(m->host_run, cbcmn__host_others(r, spinning), dt_ns);
	m->host_full = cbcmn__spin_gate_next(m->host_full, m->host_run, m->host_cpus + 0.5,
					     m->host_cpus);
	/* relaxed: a hint for the searchers' spin, which a stale value
	 * only makes one search longer or shorter. */
	atomic_store_explicit(&rt->host_busy, m->host_full, memory_order_relaxed);
}

static void *mon_main(void *arg)
{
	struct cbcmn__monitor *m = arg;
	struct cbcmn_runtime *rt = m->rt;
	uint64_t backoff = m->tick_ns;
	for (;;) {
		uint64_t now = mon_now();
		struct mon_seen r = mon_look(m, now);
		if (now - m->spin_max_at >= MON_SPIN_MAX_NS) {
			/* The cgroup's CPU limit files, opened by create
			 * (runtime.c; none without the default spin_ns): a
			 * pod resized in place gets its new gate. */
			if (rt->cgq.n) /* relaxed: a hint, as the affinity's */
				atomic_store_explicit(&rt->cg_limit, cbcmn__cgq_read(&rt->cgq),
						      memory_order_relaxed);
			cbcmn__spin_max_update(rt);
			m->spin_max_at = now;
		}
		if (m->loadavg_fd >= 0 && now - m->load_at >= MON_LOAD_NS) {
			host_load(m, now - m->load_at);
			m->load_at = now;
		}
		if (r.quiet) {
			bool parked;
			if (!mon_sleep_idle(m, &parked))
				break;
			backoff = m->tick_ns; /* work came: its runs are new */
			if (parked)
				continue;
			/* One woke between the two looks: a short sleep, never
			 * a loop of looks while executors come and go. */
		}
		/* Go's sysmon: while nothing changes, sleep twice as long each
		 * time, up to m->max_ns (stall_ns / 2: a run that begins just
		 * after a look is seen at the next and reported stall_ns
		 * later, by 1.5 stall_ns); but wake when the oldest run seen
		 * would become a stall. */
		if (r.changed)
			backoff = m->tick_ns;
		else if ((backoff *= 2) > m->max_ns)
			backoff = m->max_ns;
		uint64_t sleep = backoff;
		if (r.due > now && r.due - now < sleep)
			sleep = r.due > now + m->tick_ns / 4 ? r.due - now : m->tick_ns / 4;
		sleep = owe_sleep(m, &r, sleep);
		/* Never MON_LONG while debts move or wait: each hop of a
		 * chain would poke us (test_actor_notify). */
		bool owed = r.owing || r.waits;
		if (!(!owed && sleep > rt->cfg.owe_ns ? mon_sleep_long(m, &sleep)
						      : mon_sleep(m, MON_TICKING, sleep)))
			break;
		/* Woken far later than asked: the process was frozen (its
		 * cgroup's CPU quota spent) or we were kept off the CPU.  The
		 * runs we watch were stopped as long: that time is no run's. */
		uint64_t late = mon_now() - now;
		late = late > sleep ? late - sleep : 0;
		if (late > m->tick_ns)
			for (uint32_t i = 0; i < rt->nexec; i++) {
				m->seen_ns[i] += late;
				m->owe[i].since += late; /* nor any debt's age */
			}
	}
	return NULL;
}

void cbcmn__monitor_poke_slow(struct cbcmn_runtime *rt)
{
	mon_wake_from(rt, MON_IDLE);
}

int cbcmn__monitor_start(struct cbcmn_runtime *rt)
{
	if (!cbcmn__monitor_wanted(rt))
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
	m->max_ns = rt->cfg.stall_ns / 2 > m->tick_ns ? rt->cfg.stall_ns / 2 : m->tick_ns;
	if (m->max_ns > MON_SLEEP_MAX_NS)
		m->max_ns = MON_SLEEP_MAX_NS;
	m->seen_seq = calloc(rt->nexec, sizeof(*m->seen_seq));
	m->seen_runs = calloc(rt->nexec, sizeof(*m->seen_runs));
	m->seen_ns = calloc(rt->nexec, sizeof(*m->seen_ns));
	m->asleep_seq = calloc(2 * (size_t)rt->nexec, sizeof(*m->asleep_seq));
	m->wheel_seq = m->asleep_seq ? m->asleep_seq + rt->nexec : NULL;
	m->owe = calloc(rt->nexec, sizeof(*m->owe));
	m->calm_ns = rt->cfg.owe_ns;
	/* Opened here, by the creating thread: the monitor opens nothing
	 * while the program may count its descriptors. */
	m->loadavg_fd = rt->spin_host_gate ? open("/proc/loadavg", O_RDONLY | O_CLOEXEC) : -1;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	m->host_cpus = cpus > 0 ? (uint32_t)cpus : 1;
	atomic_store_explicit(&rt->mon_word, MON_TICKING, memory_order_relaxed);
	/* All signals blocked from its first instruction: a process-directed
	 * signal goes to one of the program's threads, never to ours. */
	pthread_attr_t a;
	sigset_t all;
	sigfillset(&all);
	pthread_attr_init(&a);
	pthread_attr_setsigmask_np(&a, &all);
	int rc = m->seen_seq && m->seen_runs && m->seen_ns && m->asleep_seq && m->owe
			 ? pthread_create(&m->thread, &a, mon_main, m)
			 : ENOMEM;
	pthread_attr_destroy(&a);
	if (rc != 0) {
		if (m->loadavg_fd >= 0)
			close(m->loadavg_fd);
		free(m->seen_seq);
		free(m->seen_runs);
		free(m->seen_ns);
		free(m->asleep_seq);
		free(m->owe);
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
	if (m->loadavg_fd >= 0)
		close(m->loadavg_fd);
	atomic_store_explicit(&rt->host_busy, false, memory_order_relaxed);
	free(m->seen_seq);
	free(m->seen_runs);
	free(m->seen_ns);
	free(m->asleep_seq);
	free(m->owe);
	free(m);
}

uint64_t cbcmn__monitor_wakeups(const struct cbcmn_runtime *rt)
{
	return rt->mon ? atomic_load_explicit(&rt->mon->wakeups, memory_order_relaxed) : 0;
}

uint64_t cbcmn__monitor_owe_paid(const struct cbcmn_runtime *rt)
{
	return rt->mon ? atomic_load_explicit(&rt->mon->owe_paid, memory_order_relaxed) : 0;
}

uint64_t cbcmn__monitor_long_sleeps(const struct cbcmn_runtime *rt)
{
	return rt->mon ? atomic_load_explicit(&rt->mon->long_sleeps, memory_order_relaxed) : 0;
}

uint64_t cbcmn__monitor_owe_pokes(const struct cbcmn_runtime *rt)
{
	return rt->mon ? atomic_load_explicit(&rt->mon->owe_pokes, memory_order_relaxed) : 0;
}

uint64_t cbcmn__monitor_owe_late(const struct cbcmn_runtime *rt)
{
	return rt->mon ? atomic_load_explicit(&rt->mon->owe_late, memory_order_relaxed) : 0;
}

uint64_t cbcmn__monitor_calm_sleeps(const struct cbcmn_runtime *rt)
{
	return rt->mon ? atomic_load_explicit(&rt->mon->calm_sleeps, memory_order_relaxed) : 0;
}
