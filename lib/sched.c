/* sched.c: the executor loop: local queues, inject queue, stealing, fiber switches.
 *
 * An executor looks for work in this order (SPEC-021 §6.3, with Tokio's
 * refinements): every 61st pick the inject queue, the yield list and its own
 * deque's oldest task first, so nothing starves; otherwise the next-task
 * slot (at most 3 runs in a row), its deque's newest task, the yield list,
 * the inject queue; then it searches other executors and, after an
 * exponential back-off, parks (wake.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "actor.h" /* prefetch_resume(): the sender's prefetch */
#include "arch.h"
#include "backend.h"
#include "clock.h"
#include "cpuquota.h"
#include "iwait.h"
#include "monitor.h"
#include "overflow.h"
#include "probes.h"
#include "runtime.h"
#include "trace.h"
#include "timer.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#endif

/* The executor this thread runs, for the two users that get no context:
 * the SIGSEGV handler and the janus C ABI adapter.  The scheduler itself
 * always passes its executor explicitly. */
__thread struct cbcmn__exec *cbcmn__tls_exec;

#define FAIRNESS_INTERVAL 61 /* picks between inject/yield/self-steal checks */
#define SLOT_RUNS_MAX 3      /* next-task slot runs in a row */
#define SLOT_STEAL_NS 3000u  /* a victim's slot waits this long for it (Go: 3 us) */
#define STEAL_VICTIMS_MAX 4  /* victims probed per round */
#define STEAL_BATCH_MAX 32   /* tasks taken per successful steal */
#define SPIN_PAUSE_MIN_NS 250u   /* pause between search turns while spinning */
#define SPIN_PAUSE_MAX_NS 4000u
#define STEAL_COOLDOWN_AFTER 8u  /* failed steal rounds before the cooldown */
#define STEAL_COOLDOWN_EVERY 4u  /* then steal every 4th turn only */
#define RING_BATCH_TURNS 16u     /* picks SQEs may wait while tasks are ready */
#define LOAD_WINDOW_PICKS 256u   /* picks per load sample of a busy executor */
#define LOAD_WINDOW_MIN_NS 1000000u /* shortest window for the busy share */

/* ---- fiber switches ------------------------------------------------------ */

static void fiber_entry(void *xfer);

/* Scheduler -> task t, which runs on t->stack (its own or, inline, borrowed). */
static inline void switch_to_task(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	struct cbcmn__stack *s = t->stack;
	cbcmn__lock_assert_none_held("switch_to_task");
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_start_switch_fiber(&e->asan_fake, s->lo, s->size);
#endif
#ifdef __SANITIZE_THREAD__
	if (!s->san_fiber)
		s->san_fiber = __tsan_create_fiber(0);
	__tsan_switch_to_fiber(s->san_fiber, 0);
#endif
	(void)s;
	/* The scheduler loop never changes its FP control state, so it need
	 * not read it back on every switch (asm/x86_64: STMXCSR is slow). */
	cbcmn__ctx_jump_fp(&e->sched_sp, t->sp, t, e->sched_fpcw);
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_finish_switch_fiber(e->asan_fake, NULL, NULL);
#endif
#ifdef CBCMN_DEBUG
	if (cbcmn__fpcw_read() != e->sched_fpcw) {
		fprintf(stderr, "cbcmn: scheduler FP control state changed across a switch\n");
		abort();
	}
#endif
}

static void run_post(struct cbcmn__exec *e);

/* A task on stack s resumes; me is the task, as its resumer passed it.  A
 * task that switched straight to it (switch_direct()) left its run's end
 * to do here, on me's stack, now that it is off its own. */
static inline void resumed(struct cbcmn_task *me, struct cbcmn__stack *s)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_finish_switch_fiber(s->asan_fake, NULL, NULL);
#endif
	(void)s;
	struct cbcmn__exec *e = me->exec;
	if (__builtin_expect(e->post != CBCMN__POST_NONE, 0))
		run_post(e);
}

/* Task t -> its executor's scheduler.  save is where t's context goes (NULL
 * when the fiber is finished and never resumes).  Returns when t is resumed,
 * possibly on another executor: callers re-read t->exec. */
static inline void switch_to_sched(struct cbcmn__exec *e, struct cbcmn__stack *s, void **save)
{
	/* A finished fiber's context, never resumed, goes here: not into a
	 * local, which ASan's detect_stack_use_after_return keeps in the fake
	 * stack that start_switch_fiber(NULL, ...) has just unmapped. */
	static _Thread_local void *dead;
	cbcmn__lock_assert_none_held("switch_to_sched");
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_start_switch_fiber(save ? &s->asan_fake : NULL, e->sched_stack_lo,
				       e->sched_stack_size);
#endif
#ifdef __SANITIZE_THREAD__
	__tsan_switch_to_fiber(e->san_sched_fiber, 0);
#endif
	resumed(cbcmn__ctx_jump(save ? save : &dead, e->sched_sp, NULL), s);
}

/* ---- queues -------------------------------------------------------------- */

static void inject_push(struct cbcmn_runtime *rt, struct cbcmn_task *t)
{
	t->next = NULL;
	cbcmn__mutex_lock(&rt->inject_lock);
	if (rt->inj_tail)
		rt->inj_tail->next = t;
	else
		rt->inj_head = t;
	rt->inj_tail = t;
	/* Release under the lock is enough for the lock-free emptiness check:
	 * a reader that sees len > 0 takes the lock before touching the list. */
	atomic_fetch_add_explicit(&rt->inj_len, 1, memory_order_release);
	cbcmn__mutex_unlock(&rt->inject_lock);
}

static struct cbcmn_task *inject_pop(struct cbcmn_runtime *rt)
{
	if (atomic_load_explicit(&rt->inj_len, memory_order_acquire) == 0)
		return NULL;
	cbcmn__mutex_lock(&rt->inject_lock);
	struct cbcmn_task *t = rt->inj_head;
	if (t) {
		rt->inj_head = t->next;
		if (!rt->inj_head)
			rt->inj_tail = NULL;
		atomic_fetch_sub_explicit(&rt->inj_len, 1, memory_order_relaxed);
	}
	cbcmn__mutex_unlock(&rt->inject_lock);
	return t;
}

static void yq_push(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	t->next = NULL;
	if (e->yq_tail)
		e->yq_tail->next = t;
	else
		e->yq_head = t;
	e->yq_tail = t;
}

static struct cbcmn_task *yq_pop(struct cbcmn__exec *e)
{
	struct cbcmn_task *t = e->yq_head;
	if (t) {
		e->yq_head = t->next;
		if (!e->yq_head)
			e->yq_tail = NULL;
	}
	return t;
}

/* A woken task waits to run next on e: in its slot, or held for the
 * owed notification (exec.held).  Owner: only it fills either. */
static inline bool slot_busy(const struct cbcmn__exec *e)
{
	return atomic_load_explicit(&e->slot, memory_order_relaxed) ||
	       atomic_load_explicit(&e->held, memory_order_relaxed);
}

/* Other local work e would take turns with: its yield list, pinned
 * queue, deque, slot, or actors on its wheel (they are as much its alone:
 * actor_sched.c asks the same for a yielding actor). */
static bool local_company(struct cbcmn__exec *e)
{
	return e->yq_head || e->pq_head || cbcmn__deque_len(&e->dq) > 0 || slot_busy(e) ||
	       (e->wheel && cbcmn__actor_wheel_busy(e));
}

/* The yield list is the owner's alone (no locks, nothing for a thief to
 * see), so two tasks that yield and compute, once on one executor, would
 * share it for good while another executor sleeps.  A yielder that has
 * company here goes to the inject queue instead while some executor
 * idles, and one is woken for it.  Never a pinned task, nor in lab mode
 * (one executor, its order seeded).  num_idle relaxed: a stale count
 * costs one trip through the inject queue, or one more yield on the list
 * until the next look. */
bool cbcmn__yield_elsewhere(struct cbcmn__exec *e, const struct cbcmn_task *t)
{
	struct cbcmn_runtime *rt = e->rt;
	if ((t->flags & CBCMN__TF_PINNED) || rt->lab ||
	    !atomic_load_explicit(&rt->num_idle, memory_order_relaxed))
		return false;
	return local_company(e);
}

/* A woken task past the slot's cap (find_local()) waits behind our other
 * work.  Not on the yield list: no thief sees it there and the stall
 * monitor leaves it alone, so it waited behind whatever we ran next (a
 * long run, a blocking call) while other executors idled (issue 15;
 * test_liveness).  The inject queue instead, whether or not some
 * executor idles now (one that idles later looks there): we take it once
 * our own work is done, anyone idle before that (notified).  Alone here
 * it runs next anyway: the list, as for a pinned task (only we may run
 * it) and in lab mode (one executor, its order seeded).  Behind yielders
 * the list too, FIFO with them: we look at the inject queue only after
 * the list (or every 61st pick), so a yielder back on the list at each
 * turn ran some 57 times before it (test_liveness); they go elsewhere
 * themselves while an executor idles (cbcmn__yield_elsewhere()). */
static void slot_capped(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	struct cbcmn_runtime *rt = e->rt;
	if (rt->lab || (t->flags & CBCMN__TF_PINNED) || e->yq_head || !local_company(e)) {
		yq_push(e, t);
		return;
	}
	inject_push(rt, t);
	cbcmn__notify_one(rt);
}

/* The record's lines that running a task reads and writes (runtime.h's
 * lines 0-2), fetched for writing ahead of its run: a queued record is
 * cold (a burst's million of them is far larger than the cache) or in
 * its spawner's cache, and its first touch was the largest cost of a
 * stolen or popped task (docs/BENCHMARKS.md, spawn's profile). */
static inline void prefetch_run(const struct cbcmn_task *t)
{
	__builtin_prefetch(t, 1);
	__builtin_prefetch((const char *)t + CBCMN__CACHELINE, 1);
	__builtin_prefetch((const char *)t + 2 * CBCMN__CACHELINE, 1);
}

/* The frames a parked task resumes into, above its saved stack pointer:
 * cold when many tasks take turns (a ring of 10 000 actors spent a third
 * of its samples in the misses as each receiver returned through its
 * frames: docs/BENCHMARKS.md, "Fifteenth session"), so fetched as it is
 * woken to run next here, while its waker goes on to block. */
#define RESUME_LINES 10

static inline void prefetch_resume(const struct cbcmn_task *t)
{
	/* Fetched already: by the send that wakes it, from the running
	 * actor, which found t's actor waiting (actor_mbox.c, sending():
	 * its resume's lines, counted, where these ten are a guess), an
	 * actor ring's every hop (about 30 instructions). */
	const struct cbcmn_task *c = cbcmn__tls_exec ? cbcmn__tls_exec->current : NULL;
	if (c && cbcmn__is_actor_task(c) && cbcmn__is_actor_task(t)) {
		const struct cbcmn__actor *me = c->arg;
		if (me->pf_to == t->arg && me->pf_wait)
			return;
	}
	const char *sp = t->sp;
	for (int i = 0; i < RESUME_LINES; i++)
		__builtin_prefetch(sp + i * CBCMN__CACHELINE, 1);
}

/* Owner: pop our newest task and fetch the one under it, which the next
 * pop takes, while this one runs. */
static inline struct cbcmn_task *deque_pop_ahead(struct cbcmn__exec *e)
{
	struct cbcmn_task *t = cbcmn__deque_pop(&e->dq);
	if (t) {
		struct cbcmn_task *next = cbcmn__deque_peek_hint(&e->dq);
		if (next)
			prefetch_run(next);
	}
	return t;
}

/* Owner: push on the deque; if it cannot grow, the task goes global. */
static void deque_push_or_inject(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	if (__builtin_expect(cbcmn__deque_push(&e->dq, t) != 0, 0))
		inject_push(e->rt, t);
}

/* Is executor o asleep (or on its way to sleep)?  Its idle bit says so. */
static bool exec_idle(const struct cbcmn__exec *o)
{
	return atomic_load_explicit(&o->rt->idle_bits[o->id / 64], memory_order_relaxed) &
	       (1ull << (o->id % 64));
}

/* May a woken task be sent home to owner?  Not to none, nor in lab mode,
 * nor to an executor without a thread; nor to a stalled one (one run
 * holds its thread, monitor.c): the task would wait there for the run to
 * end, forever if the run waits for the task (issue 15, liveness 2). */
static inline bool home_takes(struct cbcmn_runtime *rt, struct cbcmn__exec *owner)
{
	return owner && !rt->lab &&
	       atomic_load_explicit(&owner->lstate, memory_order_relaxed) == CBCMN__EX_RUNNING &&
	       !cbcmn__exec_stalled(owner);
}

/* Is o out of work, looking for some?  Then a task a channel wakes for
 * it runs on the waker's executor instead (cbcmn__wakes_run_here()): the
 * two tasks talk, and two that ping-pong stay together as in Go's runnext
 * (after a steal split them, each hop crossed executors and they stayed
 * apart until an executor parked: 2 % of the hops of `cbcmn-bench chan`).  A
 * home that runs tasks keeps its own (its caches).  An actor follows
 * its messages likewise, unless it stays (pinned, a posse member: docs/
 * ACTORS.md, "The hop's fast path"): a token passed round a ring of actors
 * spread by stealing crossed executors at every other hop.  Only into a
 * free slot: a second wake while the first waits there goes home, where
 * an executor looks for work (four producers waking four consumers would
 * otherwise all end on one executor).  Nor once our slot has had its runs
 * in a row (SLOT_RUNS_MAX, find_local()): the task would go behind our
 * yield list, which no thief sees, and wait there behind whatever we run
 * next, a blocking call included, while its home searched for work
 * (test_regression_woken_task_past_the_slot_cap_goes_home).  Relaxed: a
 * stale state only sends the task the other way, once; a thief only
 * empties our slot. */
static inline bool home_searching(const struct cbcmn__exec *o)
{
	return atomic_load_explicit(&o->ss->state, memory_order_relaxed) == CBCMN_EXEC_SEARCHING;
}

bool cbcmn__exec_out_of_work(const struct cbcmn__exec *o)
{
	return exec_idle(o) || home_searching(o);
}

/* A home that runs other tasks keeps its own only while the waker's
 * executor e has work of its own: with nothing here but the waker, the
 * woken task would wait there behind another task's run (the waker's
 * partner is blocked, so the home runs something else) while e goes
 * looking for work as soon as the waker blocks.  It runs here instead.
 * Without this, a ping-pong pair beside a task that never leaves its
 * executor (a pinned computation) was pulled back there at every
 * attempt to spread it: the balancing (an actor's migration, a capped
 * slot's inject, a steal) moved one side to the idle executor, whose
 * wake sent the other home to the busy one, whose wake then pulled the
 * first back as its new executor searched (home_searching()): the pair
 * stayed beside the hog in half the runs while the other executor
 * idled (issue 15, liveness; test_liveness).  Home, not e, is the
 * attractor only when both have work. */
bool cbcmn__exec_alone(struct cbcmn__exec *e)
{
	return !local_company(e);
}

/* t was woken by e (or by a thread outside, e NULL); make it runnable.
 * A task woken from another shard goes home (seed 001/003): its owner is
 * the executor that ran it last, where its data is, and the one whose ring
 * holds its I/O.  Pinned tasks always go home.  An unpinned task whose
 * owner is parked runs here instead: waking a parked CPU costs tens of us,
 * more than the cache misses saved (docs/SCHEDULER.md); so does one whose
 * owner is stalled (home_takes()). */
/* May t, woken by e for a home that searches, come to e (the rest of
 * home_searching()'s conditions)?  An actor past the slot's cap still
 * comes: slot_capped() puts it on our yield list when we have nothing
 * else, which actor_direct() runs next, or on the inject queue, where an
 * idle executor takes it; sent home, every fourth hop of a token passed
 * round actors crossed executors, and the ring never gathered on one. */
static inline bool pulled(const struct cbcmn__exec *e, const struct cbcmn_task *t)
{
	return cbcmn__is_actor_task(t) ? cbcmn__actor_follows(t) : e->slot_runs < SLOT_RUNS_MAX;
}

/* May the wake of t into e's empty slot owe its notification instead of
 * ringing an idle executor now?  When an actor running on e sends to an
 * actor that follows its messages (a mailbox or channel wake pulled
 * here): the sender typically blocks next, in its receive, and switches
 * straight to t (actor_direct()); a searcher woken for t meanwhile finds
 * nothing, or takes t from the slot and the chain crosses executors (a
 * token passed round 10 000 actors: a doorbell every 30 hops, a
 * crossing every 500: docs/ACTORS.md, "One chain, one executor").  The
 * debt is paid, if t is still in the slot, at e's next switch that is
 * not to t (the loop's next turn), at the sender's next wake or spawn,
 * and at its countdown window (budget.c): a sender that keeps running
 * hands t over within a window of its runtime calls.  One that never
 * calls the runtime (a loop, a raw system call) has its debt paid by the
 * stall monitor, which finds it open, under the same number, at two
 * looks cfg.owe_ns apart (monitor.c, owe_look()): no idle executor
 * watches, and a chain whose sender blocks at each hop clears each
 * debt long before.  Tokio's LIFO slot notifies nobody either.  Without
 * a monitor (cfg.stall_ns CBCMN_STALL_OFF, lab mode) nothing would pay
 * for a sender that waits for t by other means than the runtime's (a
 * spin on a flag t sets): t would never run, so the notification is not
 * owed there (test_actor_notify's unwatched spinner).
 * Asked before t is published (held or in the slot): from there a thief
 * or the monitor may take t, run it to its end and free its record,
 * which a spawn elsewhere then rewrites (TSan caught a read of t after
 * the slot's exchange racing the record's next spawn). */
static inline bool owe_notify(const struct cbcmn__exec *e, const struct cbcmn_task *t)
{
	return e->rt->watched && e->wake_here && e->current && cbcmn__is_actor_task(e->current) &&
	       cbcmn__is_actor_task(t);
}

/* t, woken into e's empty slot, runs next here and its notification is
 * owed (owe_notify()): t is held off the slot (exec.held), where neither
 * this put nor the direct switch's take is a locked exchange (each
 * waited for the stores before it: the hop's message, the receiver's
 * cold record; docs/ACTORS.md, "The held actor").  Nobody else stores
 * there, and held is empty: a store.  Only while the run holds the
 * wheel's gate open, under which the monitor may take it: a run begun
 * without a wheel (an actor run inline by a plain task's await, the
 * wheel made then) puts t in the slot, as before held.  Then the debt,
 * whose payment publishes t: after the store, which the monitor's
 * acquire of the debt's number orders before its look at held. */
static void owe_hold(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	if (__builtin_expect(atomic_load_explicit(&e->wheel_gate, memory_order_relaxed) !=
				     CBCMN__GATE_OWNER,
			     1))
		atomic_store_explicit(&e->held, t, memory_order_release);
	else /* empty, and thieves only take: prev is NULL */
		atomic_store_explicit(&e->slot, t, memory_order_seq_cst);
	/* A new odd number: the monitor tells this debt from the one it
	 * saw open at its last look (odd numbers, wrapping, never 0). */
	uint32_t w = atomic_load_explicit(&e->owe, memory_order_relaxed);
	atomic_store_explicit(&e->owe, (w | 1) + 2, memory_order_release);
	cbcmn__monitor_owe_poke(e->rt); /* it may sleep past owe_ns */
}

void cbcmn__schedule(struct cbcmn_runtime *rt, struct cbcmn_task *t, struct cbcmn__exec *e)
{
	struct cbcmn__exec *owner = t->exec;
	if (t->flags & CBCMN__TF_PINNED) {
		owner = rt->exec[t->shard];
		if (e == owner) {
			prefetch_resume(t);
			cbcmn__pq_push(e, t);
			return;
		}
		if (!e || cbcmn__xmsg_send(e, owner->id, CBCMN__XM_WAKE, t, NULL, NULL) != 0)
			cbcmn__remote_push(owner, t);
		return;
	}
	if (!e) {
		/* From outside the runtime (a pool thread, cancellation, a
		 * channel used by a thread): home, where the task's ring and
		 * its streams are; a task that never ran, or whose executor
		 * has retired (it held no ring state then), goes to any. */
		if (home_takes(rt, owner)) {
			cbcmn__remote_push(owner, t);
			return;
		}
		inject_push(rt, t);
		cbcmn__notify_one(rt);
		return;
	}
	if (owner != e && home_takes(rt, owner) && !exec_idle(owner)) {
		bool pull = e->wake_here && pulled(e, t) && !slot_busy(e);
		if (pull && !home_searching(owner)) {
			if (local_company(e))
				pull = false;
			else {
				/* e alone, home busy (cbcmn__exec_alone()):
				 * the inject queue, not our slot.  The waker
				 * typically blocks next and we take t there;
				 * one that runs on without a runtime call (a
				 * spin, a raw system call) would strand t in
				 * our slot, which a busy home never looks at,
				 * while it looks at the inject queue at its
				 * turns (test_liveness's sender that runs on). */
				inject_push(rt, t);
				cbcmn__notify_one(rt);
				return;
			}
		}
		if (!pull && cbcmn__xmsg_send(e, owner->id, CBCMN__XM_WAKE, t, NULL, NULL) == 0) {
			CBCMN__COUNT(e, handoffs, 1);
			return;
		}
	}
	/* A woken task runs next: it goes in the slot, where its data is
	 * still hot (typically the parent its last child just finished);
	 * the task it displaces goes to the deque.
	 * Only the owner stores into its slot; thieves only take, so prev is
	 * the previous occupant or NULL if it was stolen.  seq_cst: it
	 * releases t to a thief's exchange, acquires prev, and is the
	 * publication a parker's re-check pairs with, so the notification
	 * below needs no fence of its own (on x86 it is one xchg). */
	prefetch_resume(t);
	if (!slot_busy(e) && owe_notify(e, t)) {
		owe_hold(e, t);
		return;
	}
	struct cbcmn_task *prev = atomic_exchange_explicit(&e->slot, t, memory_order_seq_cst);
	CBCMN__PAUSE(CBCMN__P_WAKE_SLOT, t); /* t is a thief's: not read again */
	/* A held one is displaced too (the monitor may have taken it). */
	if (!prev && atomic_load_explicit(&e->held, memory_order_relaxed))
		prev = atomic_exchange_explicit(&e->held, NULL, memory_order_acquire);
	if (prev)
		deque_push_or_inject(e, prev);
	cbcmn__owe_close(e); /* paid by this one (a store only if it was open) */
	cbcmn__notify_one_sc(rt);
}

void cbcmn__notify_owed_actor(struct cbcmn__exec *e)
{
	/* Still there (not run, not stolen): an idle executor may take it.
	 * The fence pairs with cbcmn__park()'s, as cbcmn__notify_one()'s:
	 * the slot's exchange is long past. */
	if (atomic_load_explicit(&e->slot, memory_order_relaxed))
		cbcmn__notify_one(e->rt);
}

/* The actor held for e's debt, into e's slot (e's thread, a run holding
 * the gate open or not: an exchange, as the monitor's may race it). */
static void held_publish(struct cbcmn__exec *e)
{
	if (!atomic_load_explicit(&e->held, memory_order_relaxed))
		return;
	struct cbcmn_task *t = atomic_exchange_explicit(&e->held, NULL, memory_order_acquire);
	if (!t)
		return; /* the monitor took it */
	/* The slot is empty beside a held actor (cbcmn__schedule()). */
	struct cbcmn_task *prev = atomic_exchange_explicit(&e->slot, t, memory_order_seq_cst);
	if (prev)
		deque_push_or_inject(e, prev);
}

void cbcmn__notify_owed_pay(struct cbcmn__exec *e)
{
	cbcmn__owe_close(e);
	held_publish(e);
	cbcmn__notify_owed_actor(e);
}

/* The actor x holds (exec.held), taken from under x's run: only with the
 * gate ours (OUT -> RESCUE), as x's owner takes held with a plain load
 * and store once it has closed the gate (held_take()).  Refused (OWNER):
 * x is between runs, and its next pick takes the held actor or publishes
 * it (cbcmn__exec_main()); or another taker has the gate.  The stall
 * monitor's (cbcmn__held_rescue()) and a thief's (steal_from()). */
static struct cbcmn_task *held_grab(struct cbcmn__exec *x)
{
	uint32_t s = CBCMN__GATE_OUT;
	if (!atomic_load_explicit(&x->held, memory_order_acquire) ||
	    !atomic_compare_exchange_strong_explicit(&x->wheel_gate, &s, CBCMN__GATE_RESCUE,
						     memory_order_acquire, memory_order_relaxed))
		return NULL;
	struct cbcmn_task *t = atomic_exchange_explicit(&x->held, NULL, memory_order_acquire);
	/* release: pairs with cbcmn__wheel_gate_close()'s acquire: the owner
	 * sees held emptied. */
	atomic_store_explicit(&x->wheel_gate, CBCMN__GATE_OUT, memory_order_release);
	return t;
}

bool cbcmn__held_rescue(struct cbcmn__exec *x)
{
	struct cbcmn_task *t = held_grab(x);
	if (!t)
		return false;
	/* Where a thief would have taken it from the slot: any executor,
	 * an idle one notified. */
	inject_push(x->rt, t);
	cbcmn__notify_one(x->rt);
	return true;
}

void cbcmn__notify_owed_rescue(struct cbcmn__exec *x)
{
	/* Alone, x is the one to run it: at its run's end, as before from
	 * its slot (a stall's rescue moves it: monitor.c). */
	if (cbcmn__nworkers(x->rt) > 1)
		(void)cbcmn__held_rescue(x);
	cbcmn__notify_owed_actor(x);
}

void cbcmn__schedule_new(struct cbcmn_runtime *rt, struct cbcmn_task *t, struct cbcmn__exec *e)
{
	if (t->flags & CBCMN__TF_PINNED) {
		struct cbcmn__exec *home = rt->exec[t->shard];
		if (e == home)
			cbcmn__pq_push(e, t);
		else if (!e || cbcmn__xmsg_send(e, home->id, CBCMN__XM_SPAWN, t, NULL, NULL) != 0)
			cbcmn__remote_push(home, t);
		return;
	}
	if (!e) {
		inject_push(rt, t);
		cbcmn__notify_one(rt);
		return;
	}
	/* New tasks go to the deque, where thieves take the oldest.  Wake-ups
	 * are coalesced (seed 001): a push notifies only if no older task is
	 * left beside it.  While one is, whoever takes it is awake (notified
	 * for it, or us), and looks for work again after it.  Counted after
	 * the push, not before: a thief can take the older tasks, find
	 * nothing and sleep between a look before and the push (the spawner
	 * preempted there), and the push announced nothing; its task waited
	 * beside the sleeper for the spawner's whole run (test_liveness).
	 * The signal fence keeps the compiler from moving the look above the
	 * push: what is left is the push's store still in this CPU's store
	 * buffer, drained long before a thief runs a task and parks (and at
	 * any preemption), without the fence per spawn that a store-buffering
	 * pair would cost. */
	CBCMN__PAUSE(CBCMN__P_SPAWN_PUSH, e);
	deque_push_or_inject(e, t);
	atomic_signal_fence(memory_order_seq_cst);
	if (cbcmn__deque_len(&e->dq) <= 1)
		cbcmn__notify_one(rt);
	cbcmn__notify_owed_check(e); /* the spawner runs on */
}

/* Spawn t with executor `shard` preferred (stealable): its deque, through
 * that executor's mail when it is another one. */
void cbcmn__schedule_on(struct cbcmn_runtime *rt, struct cbcmn_task *t, struct cbcmn__exec *e,
			uint32_t shard)
{
	struct cbcmn__exec *target = rt->exec[shard];
	if (e == target) {
		cbcmn__schedule_new(rt, t, e);
		return;
	}
	/* A preference starts no executor: a stopped one's share goes to
	 * whoever runs (relaxed: a stale answer only picks the other way),
	 * and so does a stalled one's (it would sit in its lane). */
	if (e && atomic_load_explicit(&target->lstate, memory_order_relaxed) == CBCMN__EX_RUNNING &&
	    !cbcmn__exec_stalled(target) &&
	    cbcmn__xmsg_send(e, shard, CBCMN__XM_SPAWN, t, NULL, NULL) == 0)
		return;
	/* From outside the runtime: the inject queue, where any executor,
	 * the preferred one included, takes it. */
	cbcmn__schedule_new(rt, t, NULL);
}

/* Take a not-yet-started task of nursery n (or the task want) from the
 * bottom of this executor's deque, to run it inline.  Only the newest task
 * is considered.  New tasks never sit in the slot, which holds woken ones. */
static struct cbcmn_task *take_local(struct cbcmn__exec *e, struct cbcmn_nursery *n,
				     struct cbcmn_task *want)
{
	/* Only while more than half of the caller's stack is left: children
	 * run inline nest on one stack, ~700 bytes of frames a level before
	 * the program's own, and a fork-join or actor chain 90 deep ended
	 * with CBCMN_EPANIC on a 64 KiB stack where CBCMN_CONFIG_NO_INLINE
	 * ran it (test_nursery, test_deep_chain_of_awaits_does_not_overflow).
	 * Below that, the child gets a stack of its own, with the whole size
	 * to nest in again.  The bound is the task record's stack_room (the
	 * line every run reads), half of it; with no stack_room (an open
	 * yellow zone, an unguarded stack) the descriptor's size.  A frame
	 * off the stack (a borrowed one) runs no child inline; a task with
	 * no stack of its own is not bounded here. */
	const struct cbcmn_task *cur = e->current;
	if (cur->stack) {
		const char *f = __builtin_frame_address(0);
		uintptr_t used = (uintptr_t)((const char *)cur->stack - f);
		uintptr_t half = cur->stack_room ? (uintptr_t)cur->stack_room * (CBCMN__ROOM_UNIT / 2)
						 : cur->stack->size / 2;
		if (__builtin_expect(used > half, 0))
			return NULL;
	}
	struct cbcmn_task *t = deque_pop_ahead(e);
	if (!t)
		return NULL;
	/* A limited child may wait for a recharge only its parent can give:
	 * never freeze the parent's stack under it. */
	if (t->sp == NULL && !t->limited && (want ? t == want : t->nursery == n))
		return t;
	deque_push_or_inject(e, t); /* not ours: back where it was */
	return NULL;
}

struct cbcmn_task *cbcmn__take_local_child(struct cbcmn__exec *e, struct cbcmn_nursery *n)
{
	return take_local(e, n, NULL);
}

struct cbcmn_task *cbcmn__take_local_task(struct cbcmn__exec *e, struct cbcmn_task *want)
{
	return take_local(e, NULL, want);
}

/* ---- running tasks ------------------------------------------------------- */

int64_t cbcmn__task_call(struct cbcmn_task *t)
{
	if (t->flags & CBCMN__TF_ABI)
		return cbcmn__abi_call(t); /* janus_rt.c */
	return t->fn((cbcmn_cx *)t, t->arg);
}

/* A nursery cannot outlive the task that opened it: one the task returned
 * without awaiting is cancelled and awaited here, and the task fails with
 * CBCMN_ELEAKED (unless it failed already), with a line naming it. */
static int64_t close_leaked_nurseries(struct cbcmn_task *t, int64_t r)
{
	int count = cbcmn__nursery_close_all(t);
	char line[160];
	int len = snprintf(line, sizeof(line),
			   "cbcmn: task %llu returned with %d nursery(ies) not awaited; "
			   "cancelled and awaited them\n",
			   (unsigned long long)t->id, count);
	/* write(2), not stdio: it may run on a small fiber stack. */
	if (len > 0 && write(STDERR_FILENO, line, (size_t)len) < 0)
		(void)0;
	return r < 0 ? r : CBCMN_ELEAKED;
}

/* Run t's function with a landing pad: when it overflows its stack into the
 * guard page, the SIGSEGV handler (overflow.c) jumps back here, to a frame
 * above the overflow and therefore intact; so does a task whose nursery gave
 * up waiting for its budget (budget.c).  The task then ends with
 * CBCMN_EPANIC or CBCMN_EBUDGET after its open nurseries were cancelled and
 * awaited, and
 * whoever called us (the fiber entry, or a parent running it inline) goes
 * on.  __builtin_setjmp saves three words; it costs a few ns per task. */
CBCMN__LANDING_PAD int64_t cbcmn__task_call_guarded(struct cbcmn_task *t)
{
	void *jb[5];
	struct cbcmn__iwnode iwn; /* its registry waits' (iwait.h), for this run */
	struct cbcmn_task *volatile vt = t;
	/* An inline child runs in its parent's FP control state, which the
	 * parent must get back if the child lands (overflow.c). */
	volatile uint64_t fpcw = t->inline_parent ? cbcmn__fpcw_read() : CBCMN__FPCW_DEFAULT;
	t->landing = jb;
	cbcmn__iwait_node_begin(t, &iwn);
	if (__builtin_expect(__builtin_setjmp(jb) != 0, 0)) {
		/* Landed: a stack overflow (CBCMN_EPANIC) or a budget the
		 * nursery gave up on (CBCMN_EBUDGET), in t->unwind_result. */
		t = vt;
		cbcmn__overflow_landed(t, fpcw);
		cbcmn__mshot_unwound(t); /* what it opened and could not close */
		if (t->obligations)
			cbcmn__obligations_drop(t);
		cbcmn__actor_lanes_landed(t);
		cbcmn__iwait_node_end(t);
		return t->unwind_result;
	}
	int64_t r = cbcmn__task_call(t);
	/* It overflowed inside a library, which jumped back past the return
	 * that was to end it (overflow.c): it ends now. */
	if (__builtin_expect(t->stack->yellow_open, 0)) {
		cbcmn__overflow_landed(t, fpcw);
		r = CBCMN_EPANIC;
	}
	if (__builtin_expect(t->open != NULL, 0))
		r = close_leaked_nurseries(t, r);
	/* Its actor sends still in lanes are put before it is seen to end
	 * (a join, a DOWN or EXIT): order holds through its end too. */
	if (__builtin_expect(t->lane_e1 != 0, 0))
		cbcmn__actor_lanes_flush(t);
	cbcmn__iwait_node_end(t);
	return r;
}

/* A task never started because it was cancelled first. */
static bool cancel_unstarted(struct cbcmn_task *t)
{
	if (!cbcmn__task_cancelled(t))
		return false;
	cbcmn__task_complete(t, CBCMN_ECANCELED);
	return true;
}

/* The scheduler loop ends t, never started, with result r: at once, on
 * the executor thread's stack, unless its end calls the program back
 * (cbcmn__task_end_calls_back()): a drop that overflowed that stack, or
 * ended the thread, took the executor with it (a segfault).  Such a task
 * starts on a stack of its own only to end there (fiber_end_entry()),
 * below its halt's landing pad like any task that ran (*ending set).
 * True if it ended here. */
static bool end_unstarted(struct cbcmn_task *t, int64_t r, bool *ending)
{
	if (cbcmn__task_end_calls_back(t)) {
		t->result = r; /* unused until it ends: its end's result */
		*ending = true;
		return false;
	}
	cbcmn__task_complete(t, r);
	return true;
}

void cbcmn__run_inline(struct cbcmn__exec *e, struct cbcmn_task *child)
{
	struct cbcmn_task *parent = e->current;
	child->exec = e;
	/* Before the cancel check: a child ending either way ends inline
	 * (its nursery counts it so, cbcmn__nursery_child_done()). */
	child->inline_parent = parent;
	child->stack = parent->stack; /* borrowed: parent's fiber owns it */
	cbcmn__stack_room_clear(child);
	/* Ended here, never started, as it would end after a run: the task
	 * this thread runs, on parent's stack.  An actor's halt calls its
	 * drop and fini, and one that overflows that stack or ends the
	 * thread ends them, the halt goes on, and parent after it (actor.c,
	 * the reaper) instead of parent ending in the child's halt. */
	e->current = child;
	if (cancel_unstarted(child)) {
		e->current = parent;
		return;
	}
	child->sp = (void *)1; /* started: never taken inline again */
	atomic_store_explicit(&child->state, CBCMN__T_RUNNING, memory_order_relaxed);
	/* The stall monitor names the child while it runs (monitor.c). */
	atomic_store_explicit(&e->diag.run_task, child->id, memory_order_relaxed);
	CBCMN__COUNT(e, tasks_run, 1);
	CBCMN__COUNT(e, inline_runs, 1);
	/* The parent waits for the child meanwhile (snapshot.c). */
	uint32_t home = cbcmn__gauge_up(e->rt, e, CBCMN__G_JOIN);
	bool actor = cbcmn__is_actor_task(child);
	if (__builtin_expect(actor, 0))
		cbcmn__actor_run(e, child);
	int64_t r = cbcmn__task_call_guarded(child);
	/* The child may have suspended and moved to another executor. */
	e = child->exec;
	if (__builtin_expect(actor, 0)) {
		if (cbcmn__is_actor_task(parent))
			cbcmn__actor_run(e, parent); /* it runs again, here */
		else
			cbcmn__actor_ran(e);
	}
	cbcmn__gauge_down(e->rt, e, home, CBCMN__G_JOIN);
	cbcmn__task_complete(child, r);
	e->current = parent;
	atomic_store_explicit(&e->diag.run_task, parent->id, memory_order_relaxed);
	parent->exec = e;
}

/* A fiber's first step on its stack: the task it was made for. */
static inline struct cbcmn_task *fiber_begin(void *xfer)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_finish_switch_fiber(NULL, NULL, NULL);
#endif
	return xfer;
}

/* Task t ends with result r on its own stack, and its fiber with it. */
static __attribute__((noreturn)) void fiber_end(struct cbcmn_task *t, int64_t r)
{
	struct cbcmn__exec *e = t->exec;
	struct cbcmn__stack *s = t->stack;
	cbcmn__task_complete(t, r); /* t may be gone after this */
	cbcmn__fiber_exit(e, s);
}

/* Every fiber starts here, on a fresh stack, with the task to run. */
static void fiber_entry(void *xfer)
{
	struct cbcmn_task *t = fiber_begin(xfer);
	/* An actor's receives wait in a record kept across them (iwait.h). */
	fiber_end(t, cbcmn__is_actor_task(t) ? cbcmn__iwait_call_keeping(t)
					     : cbcmn__task_call_guarded(t));
}

/* A task started only to end (end_unstarted()), its result in t->result:
 * the end's callbacks run on this stack, whose overflow lands on the pad
 * the end sets up, and a thread's end there has the reaper finish it. */
static void fiber_end_entry(void *xfer)
{
	struct cbcmn_task *t = fiber_begin(xfer);
	fiber_end(t, t->result);
}

void cbcmn__fiber_exit(struct cbcmn__exec *e, struct cbcmn__stack *s)
{
	e->current = NULL;
	e->post = CBCMN__POST_EXIT;
	e->post_stack = s;
	switch_to_sched(e, s, NULL);
	__builtin_unreachable();
}

static void check_canary(struct cbcmn_task *t, struct cbcmn__stack *s)
{
	/* A stack_room: the stack is guarded (cbcmn__stack_room_of()), no
	 * canary to read, nor the descriptor's line to ask. */
	if (t && __builtin_expect(t->stack_room != 0, 1))
		return;
	if (__builtin_expect(cbcmn__stack_canary_ok(s), 1))
		return;
	/* Without a guard page the overflow has already written over the
	 * neighbouring stack: there is nothing safe left to run. */
	fprintf(stderr,
		"cbcmn: task %llu overflowed its %zu-byte unguarded stack (canary "
		"overwritten; memory is corrupt, aborting).  Raise stack_size or "
		"lower the number of live fibers; see docs/FIBERS.md\n",
		t ? (unsigned long long)t->id : 0ull, s->size);
	abort();
}

static bool pinned_astray(struct cbcmn__exec *e, struct cbcmn_task *t, bool *ending);

/* diag.run_seq: the next odd value as a run begins, the next even one as
 * it ends (a thread that died in a run left it odd: the next run still
 * begins on a new odd value).  Owner-only writes, read by the snapshot and
 * thieves; relaxed: they only compare it. */
static inline void run_seq_begin(struct cbcmn__exec *e, const struct cbcmn_task *t)
{
	/* The stall monitor names the task of a run it finds too long:
	 * release on run_seq orders the id before it (monitor.c,
	 * stall_report(), reads them the other way round); a plain store
	 * on x86. */
	atomic_store_explicit(&e->diag.run_task, t->id, memory_order_relaxed);
	uint64_t s = atomic_load_explicit(&e->diag.run_seq, memory_order_relaxed);
	atomic_store_explicit(&e->diag.run_seq, (s | 1) + ((s & 1) << 1), memory_order_release);
}

static inline void run_seq_end(struct cbcmn__exec *e)
{
	uint64_t s = atomic_load_explicit(&e->diag.run_seq, memory_order_relaxed);
	atomic_store_explicit(&e->diag.run_seq, s + (s & 1), memory_order_relaxed);
}

/* The executor's end stack, for a task started only to end when no
 * stack is left (a full map budget, no memory): its end runs the
 * program's drop and fini, which on the executor thread's own stack had
 * no landing pad (an overflow there was a segfault, a thread's end a
 * hang).  One is enough: a halt never waits, so that end is over (the
 * stack back, POST_EXIT) before the executor starts anything else, its
 * reaper's included.  NULL if there is none or it is busy. */
static struct cbcmn__stack *end_stack_take(struct cbcmn__exec *e)
{
	if (!e->end_stack || e->end_stack_busy)
		return NULL;
	e->end_stack_busy = true;
	return e->end_stack;
}

/* Kept for the executor's life, its successor threads' included; made
 * when its first thread starts, while stacks are to be had. */
static void end_stack_reserve(struct cbcmn__exec *e)
{
	if (!e->end_stack)
		e->end_stack = cbcmn__stack_get_kept(&e->rt->stacks, &e->stacks);
}

static void end_stack_release(struct cbcmn__exec *e)
{
	if (e->end_stack)
		cbcmn__stack_put_kept(&e->rt->stacks, &e->stacks, e->end_stack);
	e->end_stack = NULL;
}

/* Scheduler side: run (start or resume) t, then do what it asked for. */
static void run_task(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	bool ending = false; /* started only to end (end_unstarted()) */
	if (__builtin_expect((t->flags & CBCMN__TF_PINNED) && t->shard != e->id, 0) &&
	    pinned_astray(e, t, &ending))
		return;
	if (t->sp == NULL) {
		t->exec = e;
		if (!ending && cbcmn__task_cancelled(t) && end_unstarted(t, CBCMN_ECANCELED, &ending))
			return;
		struct cbcmn__stack *s;
		if (cbcmn__task_in_stack(t)) {
			/* Its record's stack; the fiber's reference to the
			 * record keeps it until POST_EXIT (task.c). */
			s = cbcmn__task_own_stack(t);
			atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
			s->holds_task = CBCMN__HOLDS_STARTED;
			atomic_fetch_sub_explicit(&e->rt->stacks.held_unstarted, 1,
						  memory_order_relaxed);
		} else {
			s = cbcmn__stack_get(&e->rt->stacks, &e->stacks);
		}
		if (!s && atomic_load_explicit(&e->rt->stacks.held_unstarted, memory_order_relaxed) &&
		    cbcmn__deque_len(&e->dq) > 0) {
			/* Records in stacks: the free stacks may all be held by
			 * spawned tasks not started yet, each giving its stack
			 * back (or using it) once it runs: a burst's earlier
			 * children, below this one on our deque (LIFO).  Wait
			 * behind our queued work, on the yield list, rather than
			 * fail where a runtime without the flag would have run
			 * this task in turn.  Only while the deque has work: each
			 * wait lets one of those run, so the waits end (no spin
			 * on work another executor holds; that fails as before). */
			t->exec = e;
			yq_push(e, t);
			return;
		}
		if (!s && ending)
			s = end_stack_take(e);
		if (!s) {
			/* No memory for a stack: the task fails, nothing else
			 * does.  One started only to end ends here, with its
			 * own result (a cancellation stays one), if the
			 * executor's end stack is gone too (never made). */
			cbcmn__task_complete(t, ending ? t->result : -ENOMEM);
			return;
		}
		t->stack = s;
		t->stack_room = cbcmn__stack_room_of(s);
#ifdef __SANITIZE_ADDRESS__
		/* The last fiber on this stack never returned from its frames:
		 * their redzones are still poisoned in ASan's shadow. */
		__asan_unpoison_memory_region(s->lo, s->size);
#endif
#ifdef __SANITIZE_THREAD__
		/* Likewise TSan's shadow call stack: every fiber that ran here
		 * left its few frames on it.  A fresh TSan fiber now and then
		 * (creating one costs a mapping), before the pile overflows
		 * TSan's stack depot (65 536 frames). */
		if (s->san_fiber && ++s->san_uses % 1024 == 0) {
			__tsan_destroy_fiber(s->san_fiber);
			s->san_fiber = NULL;
		}
#endif
		t->sp = cbcmn__ctx_make(cbcmn__stack_top(s), ending ? fiber_end_entry : fiber_entry);
		if (!ending)
			CBCMN__COUNT(e, tasks_run, 1);
	}
	t->exec = e;
	atomic_store_explicit(&t->state, CBCMN__T_RUNNING, memory_order_relaxed);
	e->current = t;
	e->post = CBCMN__POST_NONE;
	run_seq_begin(e, t);
	bool actor = cbcmn__is_actor_task(t); /* t may be gone after the switch */
	if (__builtin_expect(actor, 0))
		cbcmn__actor_run(e, t);
	/* The slice's start and the task's id, read now: t may be gone by
	 * the time it comes back. */
	uint64_t trace_t0 = 0, trace_id = 0;
	if (cbcmn__trace_on(e)) {
		trace_id = t->id;
		trace_t0 = cbcmn__trace_now();
	}
	/* The wheel is free while the task runs: a stall's rescue may take
	 * its actors (actor_sched.c).  Closed on what is true after the run:
	 * a run begun without a wheel that made one and switched straight to
	 * an actor (actor_direct() opens the gate for it) left it open while
	 * the loop picked from the wheel, had a run ever made one (none does:
	 * the wheel is made by the loop's pick and by run_post() after an
	 * actor's run, and an actor's direct switch needs the wheel first).
	 * Closing a closed gate is one failed compare-and-swap. */
	if (__builtin_expect(e->wheel != NULL, 0))
		cbcmn__wheel_gate_open(e);
	switch_to_task(e, t);
	if (__builtin_expect(e->wheel != NULL, 0))
		cbcmn__wheel_gate_close(e);
	CBCMN__TRACE(e, CBCMN_TRACE_TASK, trace_t0, cbcmn__trace_now() - trace_t0, trace_id, 0);
	run_seq_end(e);
	if (__builtin_expect(actor, 0))
		cbcmn__actor_ran(e);
	e->current = NULL;

	run_post(e);
}

/* Lab mode: time passes only when no task can run now (search() jumps the
 * clock to the next deadline).  A task that yields in a loop while every
 * other waits for a deadline (a child ignoring its stop, its supervisor
 * waiting shutdown_ns; a poll of a flag a sleeper sets) kept it still for
 * ever.  When the yielder just off its stack is all that can run, the
 * clock jumps to the next deadline, as if its spin had lasted that long
 * (docs/LAB.md).  Two yielders, or work that can run (queued, woken,
 * mail, a completion to reap), keep it still.  Work outside the clock (a
 * task's I/O in flight, a cbcmn_blocking() call, a stream's multishot, a
 * metrics server's accept) does not, as in search(): what it waits for
 * may come from a task that sleeps on the clock (a read whose writer
 * sleeps spun for ever; an accept of a server never ends). */
static void ring_poll(struct cbcmn__exec *e, bool idle);

/* Work that can run now, besides the yielder (lab_yield_alone()). */
static bool lab_work_now(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	/* cbcmn__ring_busy(): a completion to reap (its task can run) or a
	 * request to submit, not a request in flight. */
	return e->yq_head || e->pq_head || atomic_load_explicit(&e->slot, memory_order_relaxed) ||
	       cbcmn__deque_len(&e->dq) || atomic_load_explicit(&rt->inj_len, memory_order_acquire) ||
	       cbcmn__actor_wheel_ready(e) || cbcmn__has_mail(e) || e->nbacklog || cbcmn__ring_busy(e);
}

static void lab_yield_alone(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	if (!e->ntimers || lab_work_now(e))
		return;
	/* The epoll backend knows a ready wait only by looking at its set
	 * (a read whose byte a task has just written can run now): look, as
	 * search() does before its jump. */
	if (e->ep) {
		ring_poll(e, true);
		if (lab_work_now(e))
			return;
	}
	uint64_t next = cbcmn__timers_next(e);
	if (next != UINT64_MAX && next > cbcmn__now(rt))
		/* release: pairs with the acquire in cbcmn__now(). */
		atomic_store_explicit(&rt->vclock, next, memory_order_release);
}

/* The end of a run, once the task is off its stack: what it asked for
 * as it left (e->post). */
static void run_post(struct cbcmn__exec *e)
{
	struct cbcmn_task *p = e->post_task;
	switch (e->post) {
	case CBCMN__POST_SUSPEND: {
		check_canary(p, p->stack);
		/* The task is off its stack now: let the waker have it.  If a
		 * wake came in while it was PARKING, requeue it ourselves.
		 * acq_rel pairs with cbcmn__wake_task()'s CAS. */
		uint32_t s = CBCMN__T_PARKING;
		/* Counted blocked before the CAS publishes it to the waker,
		 * whose uncount (below) the CAS orders after ours (diag.h). */
		cbcmn__gauge_up_here(e->rt, e, p->wait_kind);
		bool actor_p = cbcmn__is_actor_task(p);
		struct cbcmn__actor *a = NULL;
		if (__builtin_expect(actor_p, 0)) {
			cbcmn__actor_parks(e, p);
			a = p->arg; /* p may be gone once published */
		}
		if (!atomic_compare_exchange_strong_explicit(&p->state, &s, CBCMN__T_BLOCKED,
							     memory_order_acq_rel,
							     memory_order_acquire)) {
			cbcmn__gauge_down(e->rt, e, e->id, p->wait_kind);
			if (__builtin_expect(actor_p, 0))
				cbcmn__actor_waits(e, -1);
			atomic_store_explicit(&p->state, CBCMN__T_READY, memory_order_relaxed);
			cbcmn__schedule(e->rt, p, e);
		}
		/* After the CAS: a pay may hand a message to p, waiting in
		 * its receive, and its wake must find it parked (or pending). */
		if (__builtin_expect(actor_p, 0))
			cbcmn__mb_room_pay(a, e);
		break;
	}
	case CBCMN__POST_YIELD:
		check_canary(p, p->stack);
		atomic_store_explicit(&p->state, CBCMN__T_READY, memory_order_relaxed);
		if (__builtin_expect(e->rt->lab, 0))
			lab_yield_alone(e); /* before p is queued again */
		if (__builtin_expect(cbcmn__is_actor_task(p), 0)) {
			cbcmn__mb_room_pay(p->arg, e); /* p is not queued yet: ours */
			if (cbcmn__actor_yielded(e, p))
				break; /* an actor: its executor's wheel took it */
		}
		if (cbcmn__yield_elsewhere(e, p)) {
			/* FIFO like the yield list, and any executor takes it. */
			inject_push(e->rt, p);
			cbcmn__notify_one(e->rt);
		} else {
			yq_push(e, p);
		}
		break;
	case CBCMN__POST_EXIT:
		check_canary(NULL, e->post_stack);
		if (e->post_stack->holds_task) /* the record frees the stack */
			cbcmn__task_unref((struct cbcmn_task *)cbcmn__stack_top(e->post_stack), e);
		else if (e->post_stack == e->end_stack)
			e->end_stack_busy = false; /* kept (end_stack_take()) */
		else
			cbcmn__stack_put(&e->rt->stacks, &e->stacks, e->post_stack);
		break;
	case CBCMN__POST_NONE:
		break;
	}
	e->post = CBCMN__POST_NONE;
}

/* Task t, which blocks, -> task n, taken from e's slot (slot_direct()):
 * n's run begins here and t's ends in n (resumed()), without the trip
 * through the scheduler's loop, as the loop would have run n next. */
static inline void direct_begin(struct cbcmn__exec *e, struct cbcmn_task *n)
{
	cbcmn__lock_assert_none_held("switch_direct");
	run_seq_end(e);
	n->exec = e;
	atomic_store_explicit(&n->state, CBCMN__T_RUNNING, memory_order_relaxed);
	e->current = n;
	e->direct_runs++;
	run_seq_begin(e, n);
	if (__builtin_expect(cbcmn__is_actor_task(n), 0))
		cbcmn__actor_run(e, n); /* actor_direct(): t was one too */
}

static void switch_direct(struct cbcmn__exec *e, struct cbcmn_task *t, struct cbcmn_task *n)
{
	struct cbcmn__stack *s = t->stack, *ns = n->stack;
	direct_begin(e, n);
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_start_switch_fiber(&s->asan_fake, ns->lo, ns->size);
#endif
#ifdef __SANITIZE_THREAD__
	__tsan_switch_to_fiber(ns->san_fiber, 0);
#endif
	(void)ns;
	/* n suspended here too, typically (it blocked straight into another
	 * task as t does now): the RET's prediction is right. */
	resumed(cbcmn__ctx_jump_ret(&t->sp, n->sp, n), s);
}

/* The task woken into e's slot, taken to run straight after t, which
 * blocks (Go's runnext, without the scheduler's loop between: a blocking
 * ping-pong on one executor is two such switches a round trip).  Only
 * where the loop would pick it next with nothing of its own to do first
 * (timers, completions, mail, a load sample, actors, tracing, the slot's
 * cap), and a plain task that ran before; else NULL. */
/* Nothing for e's loop to do before its next pick (timers, completions,
 * mail, a load sample, tracing), and its pick is the plain one. */
static bool loop_idle(struct cbcmn__exec *e)
{
	return e->busy_tasks + 1 < LOAD_WINDOW_PICKS && !e->ntimers && !cbcmn__is_spare(e) &&
	       !e->rt->lab && !cbcmn__has_mail(e) && !e->nbacklog && !cbcmn__ring_busy(e) &&
	       !cbcmn__trace_on(e);
}

/* The started task in e's slot, to run next without the loop, if it is
 * an actor task or not as actor says; else NULL.  Counted as find_local()
 * and cbcmn__exec_main() count a pick. */
static struct cbcmn_task *slot_take(struct cbcmn__exec *e, bool actor)
{
	/* acquire: pairs with the exchange in cbcmn__schedule(). */
	struct cbcmn_task *n = atomic_exchange_explicit(&e->slot, NULL, memory_order_acquire);
	if (!n)
		return NULL; /* a thief took it */
	if (__builtin_expect(!n->sp || cbcmn__is_actor_task(n) != actor ||
				     ((n->flags & CBCMN__TF_PINNED) && n->shard != e->id),
			     0)) {
		/* Back for the loop: only we store into our slot (seq_cst as
		 * in cbcmn__schedule(); we run, no notification needed). */
		atomic_store_explicit(&e->slot, n, memory_order_seq_cst);
		return NULL;
	}
	e->slot_runs++;
	e->tick++;
	e->busy_tasks++;
	CBCMN__COUNT(e, local_hits, 1);
	return n;
}

/* The actor held for e's debt (exec.held), to run next without the
 * loop.  The gate is ours (closed after the monitor's last RESCUE, whose
 * exchange we see): nobody else takes from held meanwhile, and only we
 * store into it: a plain load and store, no locked exchange.  Counted as
 * slot_take() counts it. */
static struct cbcmn_task *held_take(struct cbcmn__exec *e)
{
	struct cbcmn_task *n = atomic_load_explicit(&e->held, memory_order_relaxed);
	if (!n)
		return NULL; /* the monitor took it before we closed the gate */
	atomic_store_explicit(&e->held, NULL, memory_order_relaxed);
	e->slot_runs++;
	e->tick++;
	e->busy_tasks++;
	CBCMN__COUNT(e, local_hits, 1);
	return n;
}

static struct cbcmn_task *slot_direct(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	if (!atomic_load_explicit(&e->slot, memory_order_relaxed) || e->slot_runs >= SLOT_RUNS_MAX ||
	    e->wheel || cbcmn__is_actor_task(t) || !loop_idle(e))
		return NULL;
	return slot_take(e, false);
}

/* Counted as find_local() counts a pick from a queue. */
static struct cbcmn_task *queued(struct cbcmn__exec *e, struct cbcmn_task *n)
{
	e->slot_runs = 0;
	e->tick++;
	e->busy_tasks++;
	CBCMN__COUNT(e, local_hits, 1);
	return n;
}

/* find_local()'s every-61st look elsewhere is due and would find a task
 * (the inject queue, the yield list, our deque's oldest): the loop's pick
 * then.  A look that finds nothing leaves tick as it was (find_local()):
 * an overdue tick alone turned the direct switch off for good, 57 of a
 * pinned ping-pong's 20 000 hops switched straight. */
static bool fair_look_finds(struct cbcmn__exec *e)
{
	return e->tick >= FAIRNESS_INTERVAL - 1 &&
	       (atomic_load_explicit(&e->rt->inj_len, memory_order_relaxed) || e->yq_head ||
		cbcmn__deque_len(&e->dq) != 0);
}

/* The started actor task find_local() would take next without the slot:
 * the head of e's pinned queue (where a pinned one is woken).  Else NULL.
 * Counted as find_local() counts it. */
static struct cbcmn_task *queued_actor(struct cbcmn__exec *e)
{
	struct cbcmn_task *n = e->pq_head;
	if (!n || fair_look_finds(e) || !n->sp || !cbcmn__is_actor_task(n))
		return NULL;
	if (!(e->pq_head = n->next))
		e->pq_tail = NULL;
	return queued(e, n);
}


/* actor_direct()'s pick, under the wheel's gate: the wheel's look, the
 * held actor's take (held_take()) and the wheel's steps (t parks, n
 * enters: cbcmn__actor_direct()). */
static struct cbcmn_task *actor_direct_take(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	if (cbcmn__actor_wheel_busy(e))
		return NULL;
	bool held = atomic_load_explicit(&e->held, memory_order_relaxed);
	bool slot = atomic_load_explicit(&e->slot, memory_order_relaxed);
	bool capped = (held || slot) && e->slot_runs >= SLOT_RUNS_MAX;
	/* Capped, with nothing else here: the loop would put it on the yield
	 * list (slot_capped()) and pop it straight back, a pick from a
	 * queue.  The take counts the pick (once: counted again, a fifth of
	 * a ring's hops showed twice in local_hits and the load window): its
	 * runs in a row restart. */
	if (capped && (e->pq_head || e->yq_head || cbcmn__deque_len(&e->dq) != 0 ||
		       fair_look_finds(e)))
		return NULL;
	struct cbcmn_task *n = held ? held_take(e) : slot ? slot_take(e, true) : queued_actor(e);
	if (!n)
		return NULL;
	if (capped)
		e->slot_runs = 0;
	if (!cbcmn__actor_direct(e, t, n))
		return NULL;
	/* The slot's actor runs next here, or the slot was empty (a thief
	 * took it, and ran it): nobody is owed a notification for it. */
	cbcmn__owe_close(e);
	return n;
}

/* Actor task t blocks: the actor task the loop would run next, switched
 * to straight as slot_direct() does for plain tasks (a token passed round
 * actors on one executor is one such switch a hop).  That is one woken
 * into e's slot (a message handed to it by t, typically), or, the slot
 * empty, queued_actor(), with nothing on e's wheel: the loop's pick then
 * admits it to the wheel and takes it straight back, which
 * cbcmn__actor_direct() does with one clock read.  Else NULL. */
static struct cbcmn_task *actor_direct(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	/* Nothing to switch to (an empty slot, none held, no queued actor):
	 * the loop, without the gate's compare-and-swap. */
	if (!e->wheel || !loop_idle(e) || (!slot_busy(e) && !e->pq_head))
		return NULL;
	/* The wheel is ours only with its gate closed: t's run opened it,
	 * and a stall's rescue may be taking the wheel's actors meanwhile
	 * (the monitor's thread; a read of it here raced the rescue's
	 * writes), or the held actor (the monitor's payment).  Closed from
	 * the look to the pick, one compare-and-swap.  Open for t's run
	 * unless the wheel was made during it (run_task()): as it was if t
	 * goes on. */
	bool open = atomic_load_explicit(&e->wheel_gate, memory_order_relaxed) != CBCMN__GATE_OWNER;
	cbcmn__wheel_gate_close(e);
	struct cbcmn_task *n = actor_direct_take(e, t);
	if (n || open)
		cbcmn__wheel_gate_open(e); /* free again, for n's run or t's */
	return n;
}

/* t, about to suspend on e (cbcmn__suspend(), park_sys()): its suspension
 * posted, and what runs next picked (NULL: the scheduler's loop). */
static inline struct cbcmn_task *suspend_pick(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	e->post = CBCMN__POST_SUSPEND;
	e->post_task = t;
	/* No branch hint: the park on the system stack is an actor's hop, a
	 * plain suspend mostly a plain task's. */
	return cbcmn__is_actor_task(t) ? actor_direct(e, t) : slot_direct(e, t);
}

/* Task side: suspend t, which the caller has set PARKING and registered as
 * a waiter.  Returns once it was woken and resumed. */
void cbcmn__suspend(struct cbcmn_task *t)
{
	struct cbcmn__exec *e = t->exec;
	struct cbcmn_task *n = suspend_pick(e, t);
	if (n)
		switch_direct(e, t, n);
	else
		switch_to_sched(e, t->stack, &t->sp);
}

/* ---- the system stack ---------------------------------------------------
 *
 * An actor that blocks runs the runtime's part of its block (the wait's
 * publication, the pick of what runs next, the wheel's steps, its own
 * park) on its executor's system stack, as Go runs its scheduler on g0
 * (mcall), and its sends likewise (cbcmn__sys_call(), actor_mbox.c): an
 * actor's stack then holds its own frames, the receive's and the saved
 * registers, the lines a cold hop misses there, while the system stack,
 * used every hop, stays in cache (docs/ACTORS.md, "The system stack"). */

#define SYS_STACK_SIZE (64u << 10)

static void sys_stack_setup(struct cbcmn__exec *e)
{
	if (e->sys_stack)
		return; /* a replaced thread's: the executor's */
	size_t pg = e->rt->page; /* the guard cbcmn__overflow_sys() looks for */
	size_t len = pg + SYS_STACK_SIZE;
	char *p = cbcmn__mmap(NULL, len, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (p == MAP_FAILED)
		return; /* no memory: blocks run on the tasks' stacks */
	if (cbcmn__mprotect(p, pg, PROT_NONE) != 0) { /* a guard page below */
		munmap(p, len);
		return;
	}
	e->sys_stack = p;
	e->sys_stack_size = len;
	e->sys_top = p + len;
}

#ifdef __SANITIZE_ADDRESS__
/* The system stack's low end, above its guard page (ASan is told of the
 * switches to it). */
static inline void *sys_stack_lo(const struct cbcmn__exec *e)
{
	return e->sys_stack + e->sys_stack_size - SYS_STACK_SIZE;
}
#endif

static void sys_stack_teardown(struct cbcmn__exec *e)
{
	if (!e->sys_stack)
		return;
	munmap(e->sys_stack, e->sys_stack_size);
	e->sys_stack = NULL;
	e->sys_top = NULL;
}

/* TSan: the park stays on the task's stack: park_sys() is entered on one
 * TSan fiber and returns on the next task's, whose shadow call stacks
 * would not balance.  Its sends take the system stack (no fiber change). */
#ifdef __SANITIZE_THREAD__
#define SYS_PARK 0
#else
#define SYS_PARK 1
#endif

/* The frame a walk from the system stack ends at once its parked task is
 * published (cbcmn__sys_save()): all zero, the return address too. */
const uintptr_t cbcmn__sys_end_frame[8];

/* On t's executor's system stack, t suspended (its context saved): its
 * wait iw begun (false: it ended at once, t continues),
 * then what cbcmn__suspend() does, its run's end (run_post()) done here,
 * now that t is off its stack, not by the task resumed. */
/* ASan follows the stack the thread runs on (its reports, its fake
 * frames): told of each change as for a switch between fibers, the
 * system stack one whose fake stack (detect_stack_use_after_return) is
 * kept in e->asan_sys_fake from one park to the next, empty in between
 * (every frame on it has returned).  Not NULL, "none kept": that made
 * ASan map a fresh fake stack at every park and unmap it at every leave
 * (~100 us a park: a ring's 50 ms timed receives expired, the ring died).
 * The executor's last one is not unmapped: ASan destroys only the current
 * fake stack, on a switch away for good. */
static inline void sys_enter(struct cbcmn__exec *e)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_finish_switch_fiber(e->asan_sys_fake, NULL, NULL);
#endif
	(void)e;
}

static inline void sys_leave(struct cbcmn__exec *e, const void *lo, size_t size)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_start_switch_fiber(&e->asan_sys_fake, lo, size);
#endif
	(void)e;
	(void)lo;
	(void)size;
}

static struct cbcmn__sys_to park_sys(void *arg)
{
	struct cbcmn__iwait *iw = arg;
	struct cbcmn_task *t = iw->w.task;
	struct cbcmn__exec *e = t->exec;
	void **save = cbcmn__sys_save(e->sys_top);
	sys_enter(e);
	t->sp = *save;
	if (!cbcmn__iwait_begin(iw)) {
		sys_leave(e, t->stack->lo, t->stack->size);
		return (struct cbcmn__sys_to){t->sp, NULL};
	}
	struct cbcmn_task *n = suspend_pick(e, t);
	*save = (void *)cbcmn__sys_end_frame; /* t is published below, or by the loop */
	if (!n) {
		cbcmn__lock_assert_none_held("switch_to_sched");
		sys_leave(e, e->sched_stack_lo, e->sched_stack_size);
		return (struct cbcmn__sys_to){e->sched_sp, NULL}; /* its loop posts */
	}
	direct_begin(e, n);
	run_post(e);
	CBCMN__PAUSE(CBCMN__P_PARK_POSTED, e);
	sys_leave(e, n->stack->lo, n->stack->size);
	return (struct cbcmn__sys_to){n->sp, n};
}

/* The wait's halves (iwait.c) around the switch: no layer between the
 * receive's park and the switch, nor an indirect call to the begin
 * through a record (those cost the warm hop about 30 instructions:
 * docs/BENCHMARKS.md, "Twenty-first session, the warm hop"). */
uint32_t cbcmn__sys_park(struct cbcmn__iwait *iw)
{
	struct cbcmn_task *t = iw->w.task;
	struct cbcmn__exec *e = t->exec;
	if (!SYS_PARK || __builtin_expect(e->sys_top == NULL, 0))
		return cbcmn__iwait_block(iw);
	struct cbcmn__stack *s = t->stack;
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_start_switch_fiber(&s->asan_fake, sys_stack_lo(e), SYS_STACK_SIZE);
#endif
	struct cbcmn_task *me = cbcmn__sys_switch(cbcmn__sys_save(e->sys_top),
						  cbcmn__sys_save(e->sys_top), park_sys, iw);
	if (__builtin_expect(!me, 0)) {
#ifdef __SANITIZE_ADDRESS__
		__sanitizer_finish_switch_fiber(s->asan_fake, NULL, NULL);
#endif
		return CBCMN__IW_CANCELLED; /* the begin ended it: not suspended */
	}
	resumed(me, s);
	return cbcmn__iwait_end(iw);
}

#ifdef __SANITIZE_ADDRESS__
/* Under ASan only, the arguments in a struct: the switch's enter and
 * leave around fn, on the system stack, need two more. */
struct sys_run {
	cbcmn__sys_fn *fn;
	uint64_t a, b, c, d, x;
	struct cbcmn__stack *s;
	struct cbcmn__exec *e;
};

static uint64_t run_sys(uint64_t arg, uint64_t u1, uint64_t u2, uint64_t u3, uint64_t u4)
{
	(void)u1, (void)u2, (void)u3, (void)u4;
	struct sys_run *r = (struct sys_run *)arg;
	sys_enter(r->e);
	uint64_t rv = r->fn(r->a, r->b, r->c, r->d, r->x);
	sys_leave(r->e, r->s->lo, r->s->size);
	return rv;
}

uint64_t cbcmn__sys_run(struct cbcmn_task *t, cbcmn__sys_fn *fn, uint64_t a, uint64_t b,
			uint64_t c, uint64_t d, uint64_t x)
{
	struct cbcmn__exec *e = t->exec;
	struct sys_run r = {fn, a, b, c, d, x, t->stack, e};
	void *fake;
	__sanitizer_start_switch_fiber(&fake, sys_stack_lo(e), SYS_STACK_SIZE);
	uint64_t rv = cbcmn__sys_call(e->sys_top, run_sys, (uint64_t)(uintptr_t)&r, 0, 0, 0, 0);
	__sanitizer_finish_switch_fiber(fake, NULL, NULL);
	return rv;
}
#endif

/* t, just made READY by waker (e, or NULL outside the runtime), to its
 * queue: counted out of the blocked and, for an actor, out of waiting. */
static void wake_ready(struct cbcmn_task *t, struct cbcmn__exec *waker)
{
	struct cbcmn_runtime *rt = t->rt;
	/* Every wake of a task comes here: the one check that its waker is
	 * this thread's executor (a call with a task's cx off its fiber
	 * names the task's executor: runtime.h). */
	waker = cbcmn__waker_here(waker);
	CBCMN_PROBE3(wake, waker ? (int)waker->id : -1, t->exec ? (int)t->exec->id : -1,
		     rt->seg.rt_id);
	/* It blocked on t->exec, which counted it (run_task); stable until
	 * we schedule it. */
	cbcmn__gauge_down_here(rt, waker, t->exec->id, t->wait_kind);
	if (__builtin_expect(cbcmn__is_actor_task(t), 0))
		cbcmn__actor_waits(t->exec, -1);
	cbcmn__schedule(rt, t, waker);
}

void cbcmn__wake_task(struct cbcmn_task *t, struct cbcmn__exec *waker)
{
	uint32_t s = atomic_load_explicit(&t->state, memory_order_acquire);
	for (;;) {
		if (s == CBCMN__T_PARKING) {
			/* Still on its way out: its executor requeues it. */
			if (atomic_compare_exchange_weak_explicit(&t->state, &s,
								  CBCMN__T_WAKE_PENDING,
								  memory_order_acq_rel,
								  memory_order_acquire))
				return;
		} else if (s == CBCMN__T_BLOCKED) {
			if (atomic_compare_exchange_weak_explicit(&t->state, &s, CBCMN__T_READY,
								  memory_order_acq_rel,
								  memory_order_acquire)) {
				wake_ready(t, waker);
				return;
			}
		} else {
			return; /* not waiting: a late wake has nothing to do */
		}
	}
}

/* The compare-and-swaps above settle two races: a waker against the
 * executor's run_post() while t is PARKING, and wakers against each other.
 * A claimed wait has one waker (iwait.h: one claim succeeds, and its
 * claimer alone wakes the task; the task resumes only from that wake), so
 * once t is BLOCKED, which run_post() alone made it, nobody else writes its
 * state before we queue it: a store makes it READY.  A locked instruction
 * less per wake (a fiber actor's hop: docs/ACTORS.md, "The hop's fast
 * path"); the release the waiter's resume pairs with is the queue's, as
 * after the CAS. */
void cbcmn__wake_claimed(struct cbcmn_task *t, struct cbcmn__exec *waker)
{
	/* acquire: pairs with run_post()'s CAS (t is off its stack). */
	if (atomic_load_explicit(&t->state, memory_order_acquire) != CBCMN__T_BLOCKED) {
		cbcmn__wake_task(t, waker); /* PARKING: run_post() may still race us */
		return;
	}
	atomic_store_explicit(&t->state, CBCMN__T_READY, memory_order_relaxed);
	wake_ready(t, waker);
}

void cbcmn__waiter_wake(struct cbcmn__waiter *w, struct cbcmn__exec *waker)
{
	struct cbcmn_task *t = w->task; /* read before the waiter can go away */
	if (t) {
		cbcmn__wake_task(t, waker);
	} else {
		/* Release: pairs with the acquire load in cbcmn__waiter_wait(). */
		atomic_store_explicit(&w->futex, 1, memory_order_release);
		cbcmn__futex_wake_one(&w->futex);
	}
}

void cbcmn__waiter_wait(struct cbcmn__waiter *w)
{
	if (w->task) {
		cbcmn__suspend(w->task);
		return;
	}
	while (atomic_load_explicit(&w->futex, memory_order_acquire) == 0)
		cbcmn__futex_wait_zero(&w->futex);
}

int cbcmn_yield(cbcmn_cx *cx)
{
	if (!cx)
		return -EINVAL;
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	/* A task's context used from another thread (a cbcmn_blocking()
	 * function's): the switch would suspend that thread as if it were
	 * the task's fiber (a crash). */
	if (__builtin_expect(!cbcmn__is_running(t), 0))
		return -EPERM;
	cbcmn__stack_check(t);
	/* Not from a halt (a budget's fairness yield neither): the yield list
	 * is stealable (cbcmn__yield_elsewhere()), and a halt must end on the
	 * executor it began on (cbcmn__task_halting()). */
	if (cbcmn__task_in_halt(t))
		return CBCMN_ECANCELED;
	struct cbcmn__exec *e = t->exec;
	e->post = CBCMN__POST_YIELD;
	e->post_task = t;
	switch_to_sched(e, t->stack, &t->sp);
	return cbcmn__task_cancelled(t) ? CBCMN_ECANCELED : 0;
}

/* ---- finding work -------------------------------------------------------- */

/* Lab mode (SPEC-021 §9): when there is a real choice, the seed makes it:
 * the newest spawn, the oldest one, or the longest-yielded task.  Only a
 * real choice draws from the RNG, so idle spins (whose number depends on
 * timing) leave the sequence alone. */
static struct cbcmn_task *lab_pick(struct cbcmn__exec *e)
{
	if (!e->yq_head && cbcmn__deque_len(&e->dq) < 2)
		return NULL; /* no choice: the usual order */
	switch (cbcmn__rng_below(&e->rng, 3)) {
	case 0:
		return yq_pop(e); /* NULL: the usual order */
	case 1: {
		void *t = cbcmn__deque_steal(&e->dq);
		return t == CBCMN__DEQUE_EMPTY || t == CBCMN__DEQUE_ABORT ? NULL : t;
	}
	default:
		return NULL;
	}
}

static struct cbcmn_task *find_local(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	struct cbcmn_task *t;

	/* Every 61st pick looks at the inject queue, the yield list and our
	 * oldest task first.  Counted in picks, not calls: an idle executor
	 * calls this in a loop.  Not before a task woken into the slot, while
	 * the slot has not had its runs in a row: one I/O completion in 61
	 * waited for a task of the yield list, 2 ms beside tasks that yield
	 * every 2 ms (issue 15 item 4).  The look comes at most
	 * SLOT_RUNS_MAX picks later. */
	if (__builtin_expect(e->tick >= FAIRNESS_INTERVAL - 1, 0) &&
	    (e->slot_runs >= SLOT_RUNS_MAX || !slot_busy(e))) {
		if ((t = inject_pop(rt))) {
			CBCMN__COUNT(e, inject_hits, 1);
			e->tick = 0;
			return t;
		}
		if ((t = yq_pop(e)))
			goto fair;
		/* The oldest task of our own deque, which LIFO pops would reach last. */
		t = cbcmn__deque_steal(&e->dq);
		if (t != CBCMN__DEQUE_EMPTY && t != CBCMN__DEQUE_ABORT)
			goto fair;
	}
	if (slot_busy(e)) {
		/* acquire: pairs with the exchange in cbcmn__schedule() (the
		 * held actor: with the monitor's, whose gate may be open). */
		t = atomic_load_explicit(&e->held, memory_order_relaxed)
			    ? atomic_exchange_explicit(&e->held, NULL, memory_order_acquire)
			    : atomic_exchange_explicit(&e->slot, NULL, memory_order_acquire);
		if (t) {
			if (e->slot_runs < SLOT_RUNS_MAX) {
				e->slot_runs++;
				goto local_slot;
			}
			/* Capped: behind the work that has been waiting. */
			slot_capped(e, t);
		}
	}
	if (e->pq_head) {
		t = e->pq_head;
		if (!(e->pq_head = t->next))
			e->pq_tail = NULL;
		goto local;
	}
	if (__builtin_expect(rt->lab, 0) && (t = lab_pick(e)))
		goto local;
	if ((t = deque_pop_ahead(e)))
		goto local;
	if ((t = yq_pop(e)))
		goto local;
	if ((t = inject_pop(rt))) {
		CBCMN__COUNT(e, inject_hits, 1);
		e->slot_runs = 0;
		e->tick++;
		return t;
	}
	return NULL;
fair:
	e->tick = 0;
	e->slot_runs = 0;
	CBCMN__COUNT(e, local_hits, 1);
	return t;
local:
	e->slot_runs = 0;
local_slot:
	e->tick++;
	CBCMN__COUNT(e, local_hits, 1);
	return t;
}

/* find_local(), with actors (docs/ACTORS.md "Scheduling"): an actor task
 * found in a queue goes to this executor's wheel, which takes turns with
 * the other sources, one pick each while both have work.  One task out of
 * the queues per pick: the actors still queued stay stealable. */
static struct cbcmn_task *pick(struct cbcmn__exec *e)
{
	struct cbcmn_task *t;
	if (__builtin_expect(e->wheel != NULL, 0) && (t = cbcmn__actor_turn(e)))
		return t;
	if ((t = find_local(e)) && __builtin_expect(cbcmn__is_actor_task(t), 0) &&
	    cbcmn__actor_admit(e, t))
		t = NULL; /* on the wheel: the wheel's next runs */
	return __builtin_expect(e->wheel != NULL, 0) ? cbcmn__actor_after(e, t) : t;
}

static uint32_t pick_victim(struct cbcmn__exec *e, uint32_t attempt)
{
	struct cbcmn_runtime *rt = e->rt;
	uint32_t n = cbcmn__nlive(rt), v;
	switch (rt->cfg.victim) {
	case CBCMN_VICTIM_ROUND_ROBIN:
		v = e->rr_next++ % (n - 1);
		break;
	case CBCMN_VICTIM_LEAST_LOADED:
		if (attempt == 0) {
			/* The longest queue; ties to the lowest index. O(n). */
			int64_t best = -1;
			uint32_t bi = 0;
			for (uint32_t i = 0; i < n; i++) {
				if (i == e->id)
					continue;
				int64_t len = cbcmn__deque_len(&rt->exec[i]->dq) +
					      (atomic_load_explicit(&rt->exec[i]->slot,
								    memory_order_relaxed) != NULL);
				if (len > best) {
					best = len;
					bi = i;
				}
			}
			return bi;
		}
		/* later attempts pick at random */
		__attribute__((fallthrough));
	case CBCMN_VICTIM_RANDOM:
	default:
		v = cbcmn__rng_below(&e->rng, n - 1);
		break;
	}
	return v >= e->id ? v + 1 : v; /* skip ourselves */
}

/* The executors' fast clock (clock.h: the counter, turned into
 * CLOCK_MONOTONIC's nanoseconds): the loop reads it once a pick while
 * SQEs wait for their batch (ring_may_defer()) and a few times a search,
 * and clock_gettime() cost an echo server 42 ns a request of its 242 in
 * user space (docs/IO.md, "What an echo request costs"). */
static inline uint64_t now_ns(void)
{
	return cbcmn__now_ns();
}

/* Has v begun no run for longer than limit ns?  v's mean pick time says
 * nothing while it runs one long task (issue 15: a parent computing for
 * 0.6 s kept its child queued behind it, the idle thief refused by a mean
 * of a few microseconds), nor while it is held between two runs (a
 * cancelled actor's drop callbacks, an io_uring call the kernel performs
 * at submit, its thread preempted: the queue waits as long).  v's run
 * sequence does: the first thief to see a value of it notes when
 * (gate_seq/gate_ns); a later look at the same value knows v has begun no
 * pick since, and its queue waited as long.  Odd or even alike: v asked
 * about has work queued, so it is not idle, and a value seen between two
 * runs lasts microseconds unless v is held.  Costs v nothing: thieves
 * write the pair, and only on a refusal.  release/acquire on gate_seq: a
 * thief that reads a value reads a time noted for it (or by a racing thief
 * for an earlier one, noted a moment earlier: an early steal at worst). */
static bool pick_stuck(struct cbcmn__exec *v, uint64_t limit)
{
	uint64_t seq = atomic_load_explicit(&v->diag.run_seq, memory_order_relaxed);
	/* The stall monitor found this run too long already (monitor.c):
	 * its queue has waited for cfg.stall_ns, whoever looked before. */
	if (atomic_load_explicit(&v->stall_seq, memory_order_relaxed) == seq)
		return true;
	uint64_t now = now_ns();
	if (atomic_load_explicit(&v->gate_seq, memory_order_acquire) != seq) {
		atomic_store_explicit(&v->gate_ns, now, memory_order_relaxed);
		atomic_store_explicit(&v->gate_seq, seq, memory_order_release);
		return false;
	}
	uint64_t seen = atomic_load_explicit(&v->gate_ns, memory_order_relaxed);
	return now > seen && now - seen > limit;
}

/* The stealing gate (seed 001): take from v only if the time we expect to
 * save beats what the move costs: the half of v's queue we would take,
 * each task v's mean pick time, runs here instead of waiting behind the
 * rest, against cfg.steal_cost_ns + cfg.steal_margin_ns.  A victim with no
 * estimate yet passes, and so does one that has begun no run for longer
 * than the cost, its queue waiting as long (pick_stuck()).  A refusal is
 * remembered in e->gated: search() then parks for a while instead of
 * looking again at once (docs/SCHEDULER.md).  count: a steal attempt's
 * refusal counts in steals_gated; park's look does not. */
static bool steal_gate(struct cbcmn__exec *e, struct cbcmn__exec *v, int64_t len, bool count)
{
	const cbcmn_config *c = &e->rt->cfg;
	uint64_t avg = atomic_load_explicit(&v->ss->avg_task_ns, memory_order_relaxed);
	if (avg == 0)
		return true;
	uint64_t saved = (uint64_t)(len + 1) / 2 * avg;
	/* The locality margin applies to victims on another NUMA node: their
	 * tasks' data comes across the interconnect. */
	uint64_t margin = e->node != v->node ? c->steal_margin_ns : 0;
	if (saved > c->steal_cost_ns + margin || pick_stuck(v, c->steal_cost_ns + margin))
		return true;
	e->gated = true;
	if (count)
		CBCMN__COUNT(e, steals_gated, 1);
	return false;
}

bool cbcmn__stealable_work(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	if (atomic_load_explicit(&rt->inj_len, memory_order_relaxed))
		return true;
	for (uint32_t i = 0; i < rt->nexec; i++) {
		struct cbcmn__exec *v = rt->exec[i];
		if (v == e)
			continue;
		int64_t len = cbcmn__deque_len(&v->dq);
		bool slot = slot_busy(v);
		if (len + slot > 0 && steal_gate(e, v, len + slot, false)) {
			/* A slot alone waits its delay, as in steal_from():
			 * meanwhile park as for gated work, a while only. */
			if (len > 0 || pick_stuck(v, SLOT_STEAL_NS))
				return true;
			e->gated = true;
		}
	}
	return false;
}

/* Take up to half of v's queue.  Chase-Lev's owner pops the last items
 * without a CAS, so a thief cannot claim several items with one CAS on top
 * (docs/SCHEDULER.md): the batch is a run of single steals, stopped at the
 * first miss.  The first task is returned, the rest go on our deque. */
static struct cbcmn_task *steal_from(struct cbcmn__exec *e, struct cbcmn__exec *v,
				     uint32_t *taken)
{
	struct cbcmn_task *first = NULL;
	int64_t len = cbcmn__deque_len(&v->dq);
	bool slot = slot_busy(v);
	*taken = 0;
	if (len + slot == 0 || !steal_gate(e, v, len + slot, true))
		return NULL;
	int64_t want = (len + 1) / 2;
	if (want > STEAL_BATCH_MAX)
		want = STEAL_BATCH_MAX;
	uint32_t n = 0;
	for (int64_t i = 0; i < want; i++) {
		void *x = cbcmn__deque_steal(&v->dq);
		if (x == CBCMN__DEQUE_ABORT) {
			cbcmn__cpu_relax();
			continue; /* lost a race; the batch goes on while items remain */
		}
		if (x == CBCMN__DEQUE_EMPTY)
			break;
		/* Each to be run here soon: its lines on their way meanwhile. */
		prefetch_run(x);
		if (!first)
			first = x;
		else
			deque_push_or_inject(e, x);
		n++;
	}
	/* The slot holds a task its owner's running task just woke, which
	 * runs as soon as that one blocks (a channel's other side): taken
	 * only once v has begun no run for SLOT_STEAL_NS, as Go's runnext,
	 * whatever the gate said of v's mean.  Taken earlier, it split a
	 * ping-pong pair over two executors. */
	if (!first && atomic_load_explicit(&v->slot, memory_order_relaxed) &&
	    pick_stuck(v, SLOT_STEAL_NS)) {
		/* acquire: pairs with the owner's exchange in cbcmn__schedule(). */
		first = atomic_exchange_explicit(&v->slot, NULL, memory_order_acquire);
		n = first != NULL;
	}
	/* The actor v holds for its debt (exec.held) likewise: its sender
	 * runs on past SLOT_STEAL_NS (held or in the slot, it was taken
	 * then; held and left to the debt's payment, it waited owe_ns). */
	if (!first && atomic_load_explicit(&v->held, memory_order_relaxed) &&
	    pick_stuck(v, SLOT_STEAL_NS)) {
		first = held_grab(v);
		n = first != NULL;
	}
	*taken = n;
	return first;
}

/* search_start: when the executor began looking for work (the steal
 * probe's latency). */
static struct cbcmn_task *steal_round(struct cbcmn__exec *e, uint64_t search_start)
{
	struct cbcmn_runtime *rt = e->rt;
	uint32_t live = cbcmn__nlive(rt);
	if (live < 2 || e->id >= live)
		return NULL;
	uint32_t tries = live - 1 < STEAL_VICTIMS_MAX ? live - 1 : STEAL_VICTIMS_MAX;
	for (uint32_t i = 0; i < tries; i++) {
		uint32_t vi = pick_victim(e, i);
		uint32_t taken;
		CBCMN__COUNT(e, steal_attempts, 1);
		struct cbcmn_task *t = steal_from(e, rt->exec[vi], &taken);
		if (t) {
			CBCMN__COUNT(e, steal_successes, 1);
			CBCMN__COUNT(e, tasks_stolen, taken);
			CBCMN__TRACE(e, CBCMN_TRACE_STEAL, cbcmn__trace_now(), 0, taken, vi);
			CBCMN_PROBE5(steal, e->id, vi, taken, now_ns() - search_start, rt->seg.rt_id);
			return t;
		}
		CBCMN_PROBE3(steal_fail, e->id, vi, rt->seg.rt_id);
	}
	return NULL;
}

/* Spin for ns between search turns, watching e's own queues and the inject
 * queue meanwhile: a completion, a doorbell or mail ends the spin at once.
 * (A pause is about 50 ns here and reading the clock about 45: a blind
 * spin of 16 pauses would answer a request up to a microsecond late, and
 * a 4 us turn up to 4 us late, burning the CPU the while.) */
static void spin_for(struct cbcmn__exec *e, uint64_t ns)
{
	struct cbcmn_runtime *rt = e->rt;
	uint64_t end = now_ns() + ns;
	do {
		for (int i = 0; i < 8; i++) {
			if (cbcmn__own_work(e) || atomic_load_explicit(&rt->inj_len, memory_order_relaxed))
				return;
			cbcmn__cpu_relax();
		}
	} while (now_ns() < end);
}

/* May the SQEs queued wait for one more pick?  A batch waits at most
 * RING_BATCH_TURNS picks, and by time at most cfg.io_batch_ns counting
 * the next pick at the executor's mean pick time: beside tasks that run
 * for milliseconds each, 16 picks held a write for 30 ms (issue 15); now
 * it goes after the pick that queued it.  The clock is read only while
 * SQEs wait, once a pick (as it is while timers are armed). */
static bool ring_may_defer(struct cbcmn__exec *e)
{
	if (++e->ring.defer >= RING_BATCH_TURNS)
		return false;
	if (e->rt->lab)
		return true; /* by picks only: the lab's runs repeat */
	uint64_t now = now_ns();
	if (e->ring.defer == 1)
		e->ring.defer_since = now; /* the pick that queued them just ended */
	else
		e->ring.pick_ns = (now - e->ring.defer_since) / (e->ring.defer - 1);
	/* The next pick, as long as the mean (a window of 256 picks) or the
	 * picks these SQEs have just waited through, whichever is longer.
	 * No mean yet (the first half second of 2 ms picks): no guess, no
	 * wait.  (Before, the guess from the last wait faded by half at each
	 * submission until a batch waited again, behind whatever pick came:
	 * one write in six waited for a 2 ms task, issue 15 item 4.) */
	uint64_t next = atomic_load_explicit(&e->ss->avg_task_ns, memory_order_relaxed);
	if (next == 0)
		return false;
	if (next < e->ring.pick_ns)
		next = e->ring.pick_ns;
	if (now - e->ring.defer_since + next < e->rt->cfg.io_batch_ns)
		return true;
	/* Submitted without waiting: nothing is measured; the guess fades,
	 * so that short picks get their batches back. */
	if (e->ring.defer == 1)
		e->ring.pick_ns /= 2;
	return false;
}

/* Nothing on e to run next, nor about to be (its slot, pinned queue,
 * deque and yield list empty, no completion to reap, no mail; no actors,
 * no lab): the pick will come up empty and search() submit whatever SQEs
 * wait.  Wrong either way only costs an enter sooner or a look at the
 * clock (ring_may_defer()). */
static inline bool nothing_queued(struct cbcmn__exec *e)
{
	return !slot_busy(e) && !e->pq_head && !e->yq_head && cbcmn__deque_len(&e->dq) <= 0 &&
	       !io_uring_cq_ready(&e->ring.u) && !cbcmn__has_mail(e) && !e->wheel && !e->rt->lab;
}

/* Between tasks: submit the SQEs the tasks queued once enough have waited
 * (or at once when idle, or with nothing else to run: without asking the
 * clock, once a request for an echo server that answers and goes looking,
 * issue 15), and turn completions into ready tasks.  Then take what other
 * executors sent.  One io_uring_enter for a whole batch. */
static void ring_poll(struct cbcmn__exec *e, bool idle)
{
	if (e->ep) {
		cbcmn__ep_poll(e, idle); /* no ring: the epoll set */
		return;
	}
	struct io_uring *u = &e->ring.u;
	unsigned sq = cbcmn__sq_unflushed(u);
	bool kernel = IO_URING_READ_ONCE(*u->sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW);
	if ((sq && (idle || nothing_queued(e) || !ring_may_defer(e))) || kernel || e->ring.resubmit)
		cbcmn__ring_submit(e, false, 0);
	if (io_uring_cq_ready(u))
		cbcmn__ring_reap(e);
}

static void mail_poll(struct cbcmn__exec *e)
{
	if (cbcmn__has_mail(e))
		cbcmn__mail_drain(e);
	if (e->nbacklog)
		cbcmn__backlog_flush(e);
}

/* What the executor does, for watchers (cbcmn_executor_stats.state). */
static inline void exec_state(struct cbcmn__exec *e, cbcmn_exec_state st)
{
	atomic_store_explicit(&e->ss->state, (uint32_t)st, memory_order_relaxed);
}

/* Watchers read the live executors from the segment's copy of nlive. */
static inline void nlive_published(struct cbcmn_runtime *rt)
{
	atomic_store_explicit(&rt->seg.hdr->nlive, cbcmn__nlive(rt), memory_order_relaxed);
}

/* Load statistics (seed 003): the mean time of a scheduler pick over the
 * last window of busy time, kept as an EWMA any thief can read. */
static void load_update(struct cbcmn__exec *e, uint64_t now)
{
	if (e->busy_tasks && now > e->busy_since) {
		uint64_t sample = (now - e->busy_since) / e->busy_tasks;
		uint64_t old = atomic_load_explicit(&e->ss->avg_task_ns, memory_order_relaxed);
		atomic_store_explicit(&e->ss->avg_task_ns, old ? (7 * old + sample) / 8 : sample,
				      memory_order_relaxed);
	}
	e->busy_since = now;
	e->busy_tasks = 0;
	atomic_store_explicit(&e->ss->queue_depth, cbcmn__exec_queue_depth(e), memory_order_relaxed);
	/* Busy share: wall time minus time spent searching and parked, over
	 * windows of at least 1 ms. */
	if (!e->window_start) {
		e->window_start = now;
		return;
	}
	uint64_t window = now - e->window_start;
	if (window < LOAD_WINDOW_MIN_NS)
		return;
	uint64_t idle = e->idle_ns < window ? e->idle_ns : window;
	uint32_t pct = (uint32_t)((window - idle) * 100 / window);
	uint32_t oldp = atomic_load_explicit(&e->ss->busy_pct, memory_order_relaxed);
	atomic_store_explicit(&e->ss->busy_pct, (3 * oldp + pct) / 4, memory_order_relaxed);
	e->window_start = now;
	e->idle_ns = 0;
}

/* search()'s answer when the executor retires instead, or must replace
 * its thread (the kernel dropped CQEs: exec_replace()). */
#define RETIRE ((struct cbcmn_task *)1)
#define REPLACE ((struct cbcmn_task *)2)

/* Start executor nlive, the next in the lookup array (seed 003), unless one
 * is being started or retired already (that one then looks at want_live).
 * Its CPU is the policy's for its index, chosen at create. */
/* One resize at a time: a start (until the new executor is published in
 * nlive) or a retirement (its check and nlive step) holds the token, so the
 * array [0, nlive) never gets a hole and nlive is never written by two. */
static bool resize_begin(struct cbcmn_runtime *rt)
{
	uint32_t z = 0;
	/* seq_cst: a sender's want (cbcmn__exec_want()) before its try here,
	 * against the holder's release of the token before its look at the
	 * wants (forward_stopped_all()). */
	return atomic_compare_exchange_strong_explicit(&rt->resizing, &z, 1, memory_order_seq_cst,
						       memory_order_seq_cst);
}

static void resize_end(struct cbcmn_runtime *rt)
{
	atomic_store_explicit(&rt->resizing, 0, memory_order_seq_cst);
}

/* ---- executors that cannot start -------------------------------------------
 *
 * An executor started on demand may fail to start: no thread, or no ring
 * (RLIMIT_MEMLOCK, CBCMN_EMEMLOCK).  Its work must not wait for it: the
 * thread that failed (or a later grow, while starts are held back for
 * START_RETRY_NS after a failure) moves every task queued to a stopped
 * executor to the inject queue, where the running ones take it; a pinned
 * task that never ran ends there with its shard's start error
 * (pinned_astray()), and a pinned spawn to a shard held back fails at once
 * (cbcmn__shard_unstartable()).  Only the holder of the resize token acts
 * for stopped executors: no start can begin while it holds it, so nobody
 * else consumes their queues. */
#define START_RETRY_NS 1000000000ull

static bool start_held_back(struct cbcmn__exec *e)
{
	/* acquire: pairs with the failing thread's release of start_err. */
	return atomic_load_explicit(&e->start_err, memory_order_acquire) != 0 &&
	       now_ns() - atomic_load_explicit(&e->start_failed_ns, memory_order_relaxed) <
		       START_RETRY_NS;
}

int cbcmn__shard_unstartable(struct cbcmn_runtime *rt, uint32_t shard)
{
	struct cbcmn__exec *e = rt->exec[shard];
	if (!rt->dynamic ||
	    atomic_load_explicit(&e->lstate, memory_order_relaxed) == CBCMN__EX_RUNNING ||
	    !start_held_back(e))
		return 0;
	return atomic_load_explicit(&e->start_err, memory_order_relaxed);
}

/* Move j's slot, deque and yield list to the inject queue, as their
 * consumer (j's thread, or the resize token's holder for a stopped j).
 * True if a task moved. */
static bool forward_runnable(struct cbcmn__exec *j)
{
	struct cbcmn_runtime *rt = j->rt;
	bool moved = false;
	struct cbcmn_task *t;
	/* acquire: pairs with the exchange in cbcmn__schedule().  The held
	 * actor: an exchange too, as the monitor's may race it (j's thread
	 * may have died in a run, its gate open). */
	if ((t = atomic_exchange_explicit(&j->slot, NULL, memory_order_acquire))) {
		inject_push(rt, t);
		moved = true;
	}
	if ((t = atomic_exchange_explicit(&j->held, NULL, memory_order_acquire))) {
		inject_push(rt, t);
		moved = true;
	}
	while ((t = cbcmn__deque_pop(&j->dq))) {
		inject_push(rt, t);
		moved = true;
	}
	while ((t = yq_pop(j))) {
		inject_push(rt, t);
		moved = true;
	}
	return moved;
}

/* Move what was queued to stopped executor j to the inject queue: its
 * mail (as its consumer: acknowledging it), pinned queue, slot, deque.
 * Resize token held.  True if a task moved. */
static bool forward_stopped(struct cbcmn__exec *j)
{
	struct cbcmn_runtime *rt = j->rt;
	/* No ring: no I/O of its own to cancel (it had none when it stopped). */
	atomic_store_explicit(&j->io_cancel, 0, memory_order_relaxed);
	cbcmn__mail_drain(j);
	if (j->nbacklog)
		cbcmn__backlog_flush(j); /* acknowledgements to full lanes */
	bool moved = false;
	struct cbcmn_task *t;
	while ((t = j->pq_head)) {
		j->pq_head = t->next;
		inject_push(rt, t);
		moved = true;
	}
	j->pq_tail = NULL;
	return forward_runnable(j) || moved;
}

/* Resize token held, executor nlive not startable: answer every want by
 * forwarding the work of the stopped executors, then give the token back.
 * True if a want came in meanwhile (its sender found the token taken and
 * left it to us), for the caller to look again. */
static bool forward_stopped_all(struct cbcmn_runtime *rt)
{
	uint32_t n = cbcmn__nlive(rt);
	/* Before the queues are read: work queued after this raises the want
	 * again (seq_cst, against the sender's queue-then-want). */
	atomic_store_explicit(&rt->want_live, n, memory_order_seq_cst);
	bool moved = false;
	for (uint32_t j = n; j < rt->nexec; j++)
		if (atomic_load_explicit(&rt->exec[j]->lstate, memory_order_acquire) ==
		    CBCMN__EX_STOPPED)
			moved |= forward_stopped(rt->exec[j]);
	resize_end(rt);
	if (moved)
		cbcmn__notify_one(rt);
	return atomic_load_explicit(&rt->want_live, memory_order_seq_cst) > cbcmn__nlive(rt);
}

/* A pinned task on an executor not its own: its shard could not start and
 * forwarded it (forward_stopped()).  Home if the shard runs by now; ended
 * with the shard's start error if it never ran (here, or, its end calling
 * the program back, on a stack of its own: end_unstarted(), *ending);
 * one that ran before (woken after its shard retired) runs here rather
 * than not at all, losing its pinning for this turn.  True if it is
 * dealt with. */
static bool pinned_astray(struct cbcmn__exec *e, struct cbcmn_task *t, bool *ending)
{
	struct cbcmn_runtime *rt = e->rt;
	struct cbcmn__exec *home = rt->exec[t->shard];
	if (atomic_load_explicit(&home->lstate, memory_order_acquire) == CBCMN__EX_RUNNING) {
		if (t->sp)
			cbcmn__schedule(rt, t, e);
		else
			cbcmn__schedule_new(rt, t, e);
		return true;
	}
	if (t->sp)
		return false;
	t->exec = e;
	int err = atomic_load_explicit(&home->start_err, memory_order_acquire);
	return end_unstarted(t, err ? err : -EAGAIN, ending);
}

void cbcmn__exec_grow(struct cbcmn_runtime *rt)
{
	while (resize_begin(rt)) {
		uint32_t n = cbcmn__nlive(rt);
		if (n >= rt->nexec || atomic_load_explicit(&rt->shutdown, memory_order_seq_cst)) {
			resize_end(rt);
			return;
		}
		struct cbcmn__exec *e = rt->exec[n];
		if (start_held_back(e)) {
			if (forward_stopped_all(rt))
				continue;
			return;
		}
		uint32_t s = CBCMN__EX_STOPPED;
		if (!atomic_compare_exchange_strong_explicit(&e->lstate, &s, CBCMN__EX_STARTING,
							     memory_order_seq_cst,
							     memory_order_acquire)) {
			resize_end(rt);
			if (s != CBCMN__EX_RETIRING)
				return;
			/* Its old thread is still on its way out (nlive and
			 * the token are given back before it is STOPPED):
			 * without a want, a start asked for now was lost, and
			 * the work that asked waited for a busy executor.  The
			 * leaving thread looks at want_live after its STOPPED
			 * store (exec_retired()); seq_cst, the store-buffering
			 * pair: if our look below still reads RETIRING, its
			 * STOPPED store comes after our want, and it sees it. */
			uint32_t w = atomic_load_explicit(&rt->want_live, memory_order_relaxed);
			while (w < n + 1 && !atomic_compare_exchange_weak_explicit(
						    &rt->want_live, &w, n + 1, memory_order_seq_cst,
						    memory_order_relaxed))
				;
			if (atomic_load_explicit(&e->lstate, memory_order_seq_cst) ==
			    CBCMN__EX_RETIRING)
				return;
			continue; /* STOPPED meanwhile: start it ourselves */
		}
		/* Destroy may have passed this executor already: back out.
		 * seq_cst against stop_executors()' shutdown store and state
		 * loads. */
		if (atomic_load_explicit(&rt->shutdown, memory_order_seq_cst)) {
			atomic_store_explicit(&e->lstate, CBCMN__EX_STOPPED, memory_order_seq_cst);
			resize_end(rt);
			return;
		}
		atomic_store_explicit(&e->park, CBCMN__PARK_EMPTY, memory_order_relaxed);
		atomic_store_explicit(&e->joinable, true, memory_order_release);
		int rc = cbcmn__exec_thread_start(e);
		if (rc != 0) {
			/* No thread: as for a ring that cannot be made. */
			atomic_store_explicit(&e->joinable, false, memory_order_relaxed);
			atomic_store_explicit(&e->start_failed_ns, now_ns(), memory_order_relaxed);
			atomic_store_explicit(&e->start_err, -rc, memory_order_release);
			atomic_store_explicit(&e->lstate, CBCMN__EX_STOPPED, memory_order_release);
			if (forward_stopped_all(rt))
				continue;
		}
		/* Started: the new thread ends the resize once it is in nlive. */
		return;
	}
}

/* Executor id must run (work was sent to it): raise want_live and grow. */
void cbcmn__exec_want(struct cbcmn_runtime *rt, uint32_t id)
{
	uint32_t w = atomic_load_explicit(&rt->want_live, memory_order_relaxed);
	while (w < id + 1 &&
	       !atomic_compare_exchange_weak_explicit(&rt->want_live, &w, id + 1,
						      memory_order_seq_cst, memory_order_relaxed))
		;
	cbcmn__exec_grow(rt);
}

/* Nothing to keep e: no task, wait, timer, stream, message or mail. */
static bool exec_empty(struct cbcmn__exec *e)
{
	return !e->pq_head && !e->yq_head && !e->ntimers && !e->ring.inflight && !e->nmshots &&
	       !e->nbacklog && !cbcmn__has_mail(e) &&
	       !atomic_load_explicit(&e->remote, memory_order_acquire) &&
	       cbcmn__deque_len(&e->dq) == 0 && !cbcmn__actor_wheel_ready(e) &&
	       !atomic_load_explicit(&e->slot, memory_order_acquire) &&
	       !atomic_load_explicit(&e->held, memory_order_acquire) &&
	       atomic_load_explicit(&e->ss->ctr.xmsgs_sent, memory_order_relaxed) ==
		       atomic_load_explicit(&e->ss->ctr.xmsgs_acked, memory_order_relaxed);
}

/* The last live executor, above min_workers, idle for retire_ns: leave the
 * lookup array.  A sender that posts to it meanwhile either is seen here
 * (mail, then it stays) or sees it retiring and asks for it again
 * (cbcmn__exec_want(), store-buffering pair with the lstate CAS). */
static bool retire_locked(struct cbcmn__exec *e);

static bool try_retire(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	if (e->id < rt->min_live || cbcmn__nlive(rt) != e->id + 1 || !exec_empty(e) ||
	    !resize_begin(rt))
		return false;
	bool ok = retire_locked(e);
	resize_end(rt);
	return ok;
}

static bool retire_locked(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	if (cbcmn__nlive(rt) != e->id + 1)
		return false;
	/* A want that named us is met: we ran.  (A sender sees us RUNNING
	 * until the CAS below and raises no want meanwhile; a want for a
	 * higher executor needs us and stays.) */
	uint32_t w = e->id + 1;
	atomic_compare_exchange_strong_explicit(&rt->want_live, &w, e->id, memory_order_seq_cst,
						memory_order_relaxed);
	if (w > e->id + 1)
		return false;
	uint32_t s = CBCMN__EX_RUNNING;
	if (!atomic_compare_exchange_strong_explicit(&e->lstate, &s, CBCMN__EX_RETIRING,
						     memory_order_seq_cst, memory_order_relaxed))
		return false;
	/* Destroy joins every executor it reads RUNNING (stop_executors()):
	 * one that retired after that look detached a thread being joined.
	 * seq_cst, the store-buffering pair with its shutdown store and
	 * state loads: either it sees RETIRING and waits, or we see the
	 * shutdown and stay to be joined. */
	if (atomic_load_explicit(&rt->shutdown, memory_order_seq_cst)) {
		atomic_store_explicit(&e->lstate, CBCMN__EX_RUNNING, memory_order_seq_cst);
		return false;
	}
	uint32_t n = e->id + 1;
	if (!atomic_compare_exchange_strong_explicit(&rt->nlive, &n, e->id, memory_order_seq_cst,
						     memory_order_relaxed)) {
		atomic_store_explicit(&e->lstate, CBCMN__EX_RUNNING, memory_order_release);
		return false;
	}
	nlive_published(rt);
	/* The seq_cst CASes above order our state change before this last
	 * look (on x86 they are full barriers); the mail summary and want
	 * are read seq_cst to complete the store-buffering pair. */
	if (atomic_load_explicit(&e->mail_any, memory_order_seq_cst) || !exec_empty(e) ||
	    atomic_load_explicit(&rt->want_live, memory_order_seq_cst) > e->id) {
		atomic_store_explicit(&rt->nlive, e->id + 1, memory_order_seq_cst);
		nlive_published(rt);
		atomic_store_explicit(&e->lstate, CBCMN__EX_RUNNING, memory_order_release);
		return false;
	}
	return true;
}

/* The thread's last steps as a retired executor: its ring goes (a new
 * thread makes a new one), its thread is not joined.  After STOPPED nothing
 * here touches e: a new thread may already be starting on it. */
static void exec_retired(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	uint32_t id = e->id;
	cbcmn__be_close(e);
	atomic_fetch_add_explicit(&rt->seg.hdr->exec_retires, 1, memory_order_relaxed);
	atomic_store_explicit(&e->joinable, false, memory_order_relaxed);
	pthread_detach(pthread_self());
	/* Destroy waits for this count too: rt stays until our last step. */
	atomic_fetch_add_explicit(&rt->exiting, 1, memory_order_relaxed);
	atomic_store_explicit(&e->lstate, CBCMN__EX_STOPPED, memory_order_seq_cst);
	/* Asked for again while retiring: start it anew. */
	if (atomic_load_explicit(&rt->want_live, memory_order_seq_cst) > id)
		cbcmn__exec_grow(rt);
	atomic_fetch_sub_explicit(&rt->exiting, 1, memory_order_release);
}

/* ---- the spare (monitor.c) ------------------------------------------------
 *
 * A static runtime's spare executor takes work only while the monitor
 * says an executor is stalled (rt->spare_duty): then it searches, steals
 * and runs like any other.  Off duty it takes nothing: what it holds that
 * may run elsewhere goes to the inject queue, it finishes what only it can
 * (its ring's I/O, its timers, acknowledgements of its messages: their
 * tasks wake here and are handed on at once), and it retires as soon as
 * nothing is left.  So no more than the configured number of executors
 * run tasks for longer than a stall. */
#define SPARE_OFF_WAIT_NS 1000000ull

static inline bool spare_off_duty(const struct cbcmn__exec *e)
{
	return cbcmn__is_spare(e) &&
	       !atomic_load_explicit(&e->rt->spare_duty, memory_order_relaxed);
}

/* One turn of the spare off duty.  True when it has retired. */
static bool spare_off_turn(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	exec_state(e, CBCMN_EXEC_SEARCHING);
	if (cbcmn__ring_busy(e) || e->ep)
		ring_poll(e, true);
	mail_poll(e);
	if (forward_runnable(e))
		cbcmn__notify_one(rt);
	/* Its wheel's actors may run elsewhere too (each notifies). */
	if (e->wheel)
		cbcmn__actor_wheel_forward(e);
	struct cbcmn_task *t;
	/* Only it may run a pinned task of its own (none: pins name the
	 * program's executors) or a posse member on its wheel: they run
	 * here. */
	if ((e->pq_head || cbcmn__actor_wheel_ready(e)) && (t = pick(e))) {
		run_task(e, t);
		return false;
	}
	if (try_retire(e))
		return true;
	uint64_t wait = SPARE_OFF_WAIT_NS;
	if (e->ntimers) {
		uint64_t next = cbcmn__timers_next(e), now = cbcmn__now(rt);
		if (next <= now)
			return false; /* the loop fires them */
		if (next - now < wait)
			wait = next - now;
	}
	/* Not parked: no notifier claims it.  A kick (mail) costs it up to
	 * the wait; acknowledgements wake nobody. */
	cbcmn__be_wait(e, wait);
	return false;
}

/* How many searchers may spin at once: half the CPUs the executors can
 * use (exec_cpus(), under the cgroup's limit, no more than its
 * executors), at least one, as Go (spinning Ms at most half the busy Ps)
 * and Tokio (searchers at most half the workers) do.  The others park as
 * soon as one look finds nothing: 64 executors on 2 CPUs spinning 50 us
 * after every wake-up took the CPU from the ones with work, timers
 * included (issue 15). */
uint32_t cbcmn__spin_max(uint32_t workers, uint32_t cpus, double limit)
{
	uint32_t n = cbcmn__cpus_for_limit(cpus, limit);
	if (n > workers)
		n = workers;
	return n / 2 ? n / 2 : 1;
}

/* The CPUs the executors may run on: each one's thread's affinity (a
 * pinned one's CPU, unless taskset moved it since); before its thread
 * starts, its CPU if pinned, else ours (which a thread started from here
 * inherits; the monitor's is the creator's).  Not the creating thread's
 * mask alone: executors pinned to 4 CPUs of 64 let 32 spin on those 4.
 * Not the spare's: unpinned, it would count the creator's whole mask
 * again, and it only stands in for a stalled executor (monitor.c). */
static uint32_t exec_cpus(struct cbcmn_runtime *rt)
{
	cpu_set_t all, set;
	CPU_ZERO(&all);
	bool ours = false;
	for (uint32_t i = 0; i < rt->nexec; i++) {
		struct cbcmn__exec *x = rt->exec[i];
		if (cbcmn__is_spare(x))
			continue;
		int32_t tid = atomic_load_explicit(&x->ss->tid, memory_order_relaxed);
		if (tid > 0 && sched_getaffinity(tid, sizeof(set), &set) == 0)
			CPU_OR(&all, &all, &set);
		else if (x->cpu >= 0 && x->cpu < CPU_SETSIZE)
			CPU_SET(x->cpu, &all);
		else
			ours = true;
	}
	if (ours && sched_getaffinity(0, sizeof(set), &set) == 0)
		CPU_OR(&all, &all, &set);
	int n = CPU_COUNT(&all);
	if (n > 0)
		return (uint32_t)n;
	/* No mask read (more CPUs than a cpu_set_t holds): all online. */
	long on = sysconf(_SC_NPROCESSORS_ONLN);
	return on > 0 ? (uint32_t)on : 1;
}

/* Compute rt->spin_max again: at create, when an executor starts, and on
 * the monitor's tick once a second (monitor.c), so that an affinity
 * changed later is seen, and a cgroup limit the monitor read again
 * (rt->cg_limit).  Costs a sched_getaffinity per executor, no file.
 * relaxed: two updaters racing store answers a moment apart, either good. */
void cbcmn__spin_max_update(struct cbcmn_runtime *rt)
{
	double limit = atomic_load_explicit(&rt->cg_limit, memory_order_relaxed);
	uint32_t mask = exec_cpus(rt), cpus = cbcmn__cpus_for_limit(mask, limit);
	atomic_store_explicit(&rt->spin_cpus, cpus, memory_order_relaxed);
	atomic_store_explicit(&rt->spin_max, cbcmn__spin_max(rt->nexec, cpus, 0),
			      memory_order_relaxed);
	if (rt->spin_quota_gate)
		atomic_store_explicit(&rt->spin_awake_max, cbcmn__spin_awake_max(mask, limit),
				      memory_order_relaxed);
}

uint32_t cbcmn__spin_awake_max(uint32_t cpus, double limit)
{
	/* The effective CPUs: the limit rounded up as for the default
	 * executor count (cpuquota.c: 1.5 CPUs pay for two executors part
	 * of the time), no more than the executors' CPUs, at least one. */
	return limit > 0 ? cbcmn__cpus_for_limit(cpus, limit) : 0;
}

/* Is there room in the cgroup's CPU limit for a spinner?  A spinner
 * burns the quota the busy executors need, and the kernel stops the
 * whole process once a period's quota is spent: so no searcher spins
 * long while the awake executors (busy, searching, itself among them)
 * exceed the effective CPUs (rt->spin_awake_max: the limit rounded up,
 * under the executors' mask; a limit of 1: one busy executor and a
 * spinner would take 2).  Asked at each turn,
 * not only at the claim: a spinner whose neighbour wakes with work steps
 * aside.  Counts the runtime's executors only (the program's threads
 * and the blocking pool are not seen).  relaxed: a hint, as host_busy. */
static bool spin_room(struct cbcmn_runtime *rt)
{
	uint32_t max = atomic_load_explicit(&rt->spin_awake_max, memory_order_relaxed);
	if (!max)
		return true;
	int64_t awake = (int64_t)cbcmn__nlive(rt) -
			(int64_t)atomic_load_explicit(&rt->num_idle, memory_order_relaxed);
	return awake <= (int64_t)max;
}

/* Take one of the rt->spin_max spinning places.  relaxed: the count only
 * bounds how many burn a CPU; no work is published through it, and a
 * searcher that does not spin parks through cbcmn__park()'s re-check. */
static bool spin_claim(struct cbcmn_runtime *rt)
{
	uint32_t n = atomic_load_explicit(&rt->num_spinning, memory_order_relaxed);
	do {
		if (n >= atomic_load_explicit(&rt->spin_max, memory_order_relaxed))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&rt->num_spinning, &n, n + 1,
							memory_order_relaxed, memory_order_relaxed));
	return true;
}

static void spin_release(struct cbcmn_runtime *rt, bool *spinning)
{
	if (*spinning)
		atomic_fetch_sub_explicit(&rt->num_spinning, 1, memory_order_relaxed);
	*spinning = false;
}

static struct cbcmn_task *search_turns(struct cbcmn__exec *e, bool *spinning);

/* Nothing local: look at the ring, the mail, other executors' queues and
 * the inject queue; spin like that for cfg.spin_ns (a parked CPU takes
 * tens of us to wake here) if a spinning place is free (spin_claim()),
 * backing off between steal rounds once they keep failing (the cooldown),
 * then park in the ring until a doorbell, a completion or the next timer.
 * Returns NULL only at shutdown. */
static struct cbcmn_task *search(struct cbcmn__exec *e)
{
	bool spinning = false;
	struct cbcmn_task *t = search_turns(e, &spinning);
	spin_release(e->rt, &spinning);
	return t;
}

static struct cbcmn_task *search_turns(struct cbcmn__exec *e, bool *spinning)
{
	struct cbcmn_runtime *rt = e->rt;
	/* Relaxed atomic: no API changes it, but a test does, from a task
	 * while the executors search (test_cpuquota makes a default-gated
	 * spin 30 s long). */
	uint64_t spin_ns = __atomic_load_n(&rt->cfg.spin_ns, __ATOMIC_RELAXED);
	uint64_t start = now_ns(), pause = SPIN_PAUSE_MIN_NS;
	const uint64_t start0 = start;
	load_update(e, start);
	/* Out of local work: the records we freed for another executor go
	 * home now, not when a batch fills, which an idle executor never
	 * does (its home mallocs meanwhile; test_taskcache). */
	if (e->out_n)
		cbcmn__task_outbox_flush(e);
	cbcmn__searching_begin(e);
	exec_state(e, CBCMN_EXEC_SEARCHING);
	for (uint32_t turn = 0;; turn++) {
		struct cbcmn_task *t = NULL;
		/* REPLACE for the spare gone off duty: the loop looks again
		 * (spare_off_turn()); the ring is dropped only if it says so. */
		if (__builtin_expect(e->ring.dropped, 0) || spare_off_duty(e)) {
			cbcmn__searching_end(e);
			e->idle_ns += now_ns() - start0;
			return REPLACE;
		}
		/* (An epoll set has nothing to say without a system call:
		 * looked at every turn while idle.) */
		if (cbcmn__ring_busy(e) || e->ep)
			ring_poll(e, true);
		mail_poll(e);
		t = find_local(e); /* completions, mail, a wake into our slot */
		if (!t && (e->steal_fails < STEAL_COOLDOWN_AFTER || turn % STEAL_COOLDOWN_EVERY == 0)) {
			t = steal_round(e, start0);
			e->steal_fails = t ? 0 : e->steal_fails + 1;
		}
		if (!t && (t = inject_pop(rt))) {
			CBCMN__COUNT(e, inject_hits, 1);
			e->tick++; /* a pick like any other (find_local) */
		}
		if (t) {
			cbcmn__searching_end(e);
			e->gate_wait_ns = 0;
			exec_state(e, CBCMN_EXEC_RUNNING);
			e->busy_since = now_ns();
			e->idle_ns += e->busy_since - start0;
			return t;
		}
		if (atomic_load_explicit(&rt->shutdown, memory_order_acquire)) {
			cbcmn__searching_end(e);
			return NULL;
		}
		/* Timers: sleep no longer than the next deadline.  In lab mode
		 * nothing can run, so time jumps to it. */
		uint64_t wait = 0; /* 0: until notified */
		uint64_t next = e->ntimers ? cbcmn__timers_next(e) : UINT64_MAX;
		if (next != UINT64_MAX) {
			uint64_t now = cbcmn__now(rt);
			if (rt->lab && next > now) {
				/* release: pairs with the acquire in cbcmn__now(). */
				atomic_store_explicit(&rt->vclock, next, memory_order_release);
				now = next;
			}
			if (next <= now) {
				cbcmn__timers_fire(e, now);
				continue;
			}
			wait = next - now;
		}
		uint64_t now = now_ns();
		/* Without a spinning place, a few short turns still (the
		 * pauses double from 250 ns: about 4 us): a spinner that has
		 * just found work gives its place back only after it leaves
		 * search(), and the executor whose task it woke, searching
		 * meanwhile, would park at once and pay a doorbell (tens of
		 * us) on the next hand-over of a ping-pong.  On a busy host
		 * (rt->host_busy) only those turns: the spin the gate saves is
		 * the long one that ends in a park anyway, while without the
		 * turns every hand-over waits for a parked thread to get a CPU
		 * behind the host's others (cbcmn-bench steal, docs/BENCHMARKS.md).
		 * Only those turns too while an SQPOLL ring's poller has yet to
		 * take our SQEs: their completions wait for that thread, and
		 * the spin kept it off a CPU it shares with us (paired rounds
		 * on a loaded host: docs/BENCHMARKS.md, twenty-third session). */
		if (spin_ns != CBCMN_SPIN_NONE && now - start < spin_ns &&
		    (wait == 0 || pause < wait) &&
		    (atomic_load_explicit(&rt->host_busy, memory_order_relaxed) || cbcmn__ring_sq_unpolled(e)
			     ? pause < SPIN_PAUSE_MAX_NS
			     : (spin_room(rt) && (*spinning || (*spinning = spin_claim(rt)))) ||
				       pause < SPIN_PAUSE_MAX_NS)) {
			spin_for(e, pause);
			if (pause < SPIN_PAUSE_MAX_NS)
				pause *= 2;
			continue;
		}
		/* Parking: the place goes to the next searcher. */
		spin_release(rt, spinning);
		/* An executor that may retire sleeps no longer than its idle
		 * allowance, then checks; not while work is queued anywhere,
		 * the gate's refused work included: the gate's answer turns
		 * with time (one long run opens it), and its owner's next
		 * pushes to a non-empty deque notify nobody, so a thief that
		 * left would leave that queue to wait out the run. */
		bool may_retire = rt->retire_ns && e->id >= rt->min_live &&
				  e->id + 1 == cbcmn__nlive(rt);
		if (may_retire && (wait == 0 || wait > rt->retire_ns))
			wait = rt->retire_ns;
		exec_state(e, CBCMN_EXEC_PARKED);
		bool notified = cbcmn__park(e, wait);
		/* Awake, our idle bit clear: a monitor asleep because every
		 * executor was parked watches again (monitor.c). */
		cbcmn__monitor_poke(rt);
		exec_state(e, CBCMN_EXEC_SEARCHING);
		if (notified) {
			/* Notified: spin again before the next park. */
			start = now_ns();
			pause = SPIN_PAUSE_MIN_NS;
			e->steal_fails = 0;
		} else if (may_retire && now_ns() - start >= rt->retire_ns &&
			   !cbcmn__any_work(rt) && try_retire(e)) {
			cbcmn__searching_end(e);
			e->idle_ns += now_ns() - start0;
			return RETIRE;
		}
	}
}

static int exec_thread_setup(struct cbcmn__exec *e)
{
	cbcmn__tls_exec = e;
	/* "cbcmn-exec-N": what top, perf and the tools show. */
	char name[16];
	snprintf(name, sizeof(name), "cbcmn-exec-%u", e->id);
	pthread_setname_np(pthread_self(), name);
	e->sched_fpcw = cbcmn__fpcw_read();
	sys_stack_setup(e);
#ifdef __SANITIZE_THREAD__
	e->san_sched_fiber = __tsan_get_current_fiber();
#endif
	pthread_attr_t a;
	if (pthread_getattr_np(pthread_self(), &a) == 0) {
		void *lo;
		size_t sz;
		pthread_attr_getstack(&a, &lo, &sz);
		e->sched_stack_lo = lo;
		e->sched_stack_size = sz;
		pthread_attr_destroy(&a);
	}
	return cbcmn__altstack_setup(e);
}

/* ---- an executor thread that dies (SPEC-021 §14 WorkerPanic) --------------
 *
 * A task can end its executor's thread (pthread_exit, or a cancellation
 * point reached under pthread_cancel).  glibc unwinds the fiber's frames, up
 * to its end, and ends the thread; a thread-specific key's destructor sees
 * it go.  The runtime reports it and keeps going: a new thread takes over
 * the same executor (its queues survive), and first restarts the lost
 * task's stack with a reaper that ends the task — and any task running
 * inline on the same stack — with CBCMN_EPANIC, after cancelling and
 * awaiting the nurseries they had open, so nobody waits for them forever. */
static pthread_key_t exec_key;
static pthread_once_t exec_key_once = PTHREAD_ONCE_INIT;

static void reap_entry(void *xfer)
{
	struct cbcmn_task *t = fiber_begin(xfer);
	struct cbcmn__stack *s = t->stack;
	for (;;) {
		struct cbcmn_task *parent = t->inline_parent;
		struct cbcmn__exec *e = t->exec;
		e->current = t;
		cbcmn__nursery_close_all(t);
		cbcmn__actor_lanes_landed(t);
		e = t->exec;
		if (t->obligations)
			cbcmn__obligations_drop(t); /* the runtime ended it: no leak */
		cbcmn__task_complete(t, CBCMN_EPANIC);
		if (!parent) {
			/* A landing that closed the nurseries here relaxed the
			 * bound (overflow.c) and never returned to set it back
			 * (nor a thread that ended with the yellow zone open
			 * closed it): the stack goes to the pool, and the next
			 * task on it got half the reserve (test_overflow).
			 * Nothing runs below lo: the reaper's frames are at the
			 * top. */
			cbcmn__stack_yellow_close(s);
			cbcmn__fiber_exit(e, s);
		}
		parent->exec = e;
		e->current = parent;
		t = parent;
	}
}

static void exec_thread_died(void *arg)
{
	struct cbcmn__exec *e = arg;
	struct cbcmn_task *t = e->current;
	char line[192];
	int len = snprintf(line, sizeof(line),
			   "cbcmn: executor %u's thread ended under task %llu (pthread_exit or "
			   "cancellation); the task ends with CBCMN_EPANIC and a new thread takes "
			   "over\n",
			   e->id, t ? (unsigned long long)t->id : 0ull);
	if (len > 0 && write(STDERR_FILENO, line, (size_t)len) < 0)
		(void)0;
	e->reap = t;
	/* Its run (and its inline parents') never returns through the frames
	 * that hold their nodes: out of their cells now, while those frames
	 * are intact, before the reaper runs over them (iwait.h). */
	for (struct cbcmn_task *x = t; x; x = x->inline_parent)
		if (x->iwn)
			cbcmn__iwait_node_end(x);
	e->current = NULL;
	cbcmn__io_settle(e); /* its requests end here, while it can reap them */
	/* No executor's thread any more, before the successor starts: a
	 * destructor that runs after this one and calls the runtime is a
	 * thread outside it, never a second user of e's ring, trace ring or
	 * current task beside the successor (as exec_replace() does). */
	cbcmn__tls_exec = NULL;
	/* For watchers: this thread is gone; the new one publishes itself
	 * (cbcmn__exec_main), and if none can start, none runs. */
	exec_state(e, CBCMN_EXEC_STOPPED);
	atomic_store_explicit(&e->ss->tid, 0, memory_order_relaxed);
	cbcmn__altstack_teardown(e);
	/* Joined by the new thread before it makes its ring (ring.c). */
	e->dead_thread = pthread_self();
	int rc = cbcmn__exec_thread_start(e);
	if (rc != 0) {
		/* Its successor would have joined it: nobody does now, nor may
		 * destroy (stop_executors() joins a joinable executor it reads
		 * RUNNING, which this one stays), as for a retired thread. */
		atomic_store_explicit(&e->joinable, false, memory_order_relaxed);
		pthread_detach(pthread_self());
		/* Its deque and slot can still be stolen from; its yield list
		 * and timers, and the lost task, are stranded (docs/ERRORS.md). */
		fprintf(stderr, "cbcmn: executor %u cannot be replaced (%s)\n", e->id,
			strerror(rc));
		atomic_store_explicit(&e->rt->lost_exec, 1, memory_order_relaxed);
	}
}

/* The kernel dropped CQEs (ring.c): hand the executor to a new thread and
 * end this one, between tasks, leaving e as it is.  The exit cancels every
 * request this thread made and waits for them; the successor joins it,
 * takes over with a new ring and ends the waits still listed
 * (cbcmn__ring_takeover()).  The executor is STARTING meanwhile, which
 * destroy waits out.  True if this thread is to end now; false if no
 * successor could start (or destroy has begun): it goes on with its ring
 * as it is, and a wait whose CQE was lost stays stranded. */
static void exec_thread_published(struct cbcmn__exec *e);

static bool exec_replace(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	/* No pending cancellation may end the thread half-way (as in exec_main()'s
	 * way out): STARTING for good would hold destroy forever. */
	int cancel_state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	/* Children that ended here are counted now, by this thread: a
	 * successor that cannot take over (no ring) never runs the loop that
	 * would, and their nurseries would wait forever. */
	cbcmn__nursery_live_flush(e);
	/* What the CQ still holds keeps its result.  (A drop counted meanwhile
	 * is answered by this same replacement.) */
	cbcmn__ring_reap(e);
	e->ring.dropped = false;
	/* A lost CQE may have been a doorbell of ours that failed, whose
	 * fallback (the target's eventfd) was never rung: ring them all; a
	 * wake-up with nothing new costs its executor one look. */
	for (uint32_t i = 0; i < rt->nexec; i++)
		if (rt->exec[i] != e)
			cbcmn__efd_ring(rt->exec[i]);
	/* seq_cst, both: the store-buffering pair with destroy's shutdown
	 * store and its look at our state (stop_executors()): either it waits
	 * for the successor, or we see the shutdown and stay (no task is
	 * left then to wait for a lost CQE). */
	uint32_t s = CBCMN__EX_RUNNING;
	if (!atomic_compare_exchange_strong_explicit(&e->lstate, &s, CBCMN__EX_STARTING,
						     memory_order_seq_cst, memory_order_relaxed)) {
		pthread_setcancelstate(cancel_state, NULL);
		return false;
	}
	if (atomic_load_explicit(&rt->shutdown, memory_order_seq_cst)) {
		atomic_store_explicit(&e->lstate, CBCMN__EX_RUNNING, memory_order_release);
		pthread_setcancelstate(cancel_state, NULL);
		return false;
	}
	char line[160];
	int len = snprintf(line, sizeof(line),
			   "cbcmn: executor %u: the kernel dropped completions; its I/O in flight "
			   "ends as cancelled and a new thread takes over with a new ring\n",
			   e->id);
	if (len > 0 && write(STDERR_FILENO, line, (size_t)len) < 0)
		(void)0;
	pthread_setspecific(exec_key, NULL); /* not a death */
	exec_state(e, CBCMN_EXEC_STOPPED);
	atomic_store_explicit(&e->ss->tid, 0, memory_order_relaxed);
	cbcmn__altstack_teardown(e); /* the successor makes its own in e */
	e->dead_thread = pthread_self();
	e->replacing = true;
	int rc = cbcmn__exec_thread_start(e);
	if (rc == 0) {
		cbcmn__tls_exec = NULL;
		return true;
	}
	e->replacing = false;
	fprintf(stderr, "cbcmn: executor %u cannot be replaced (%s): a wait whose completion "
			"was dropped stays stranded\n",
		e->id, strerror(rc));
	if (cbcmn__altstack_setup(e) != 0)
		fprintf(stderr, "cbcmn: executor %u: no alternate signal stack any more\n", e->id);
	pthread_setspecific(exec_key, e);
	exec_thread_published(e);
	atomic_store_explicit(&e->lstate, CBCMN__EX_RUNNING, memory_order_release);
	pthread_setcancelstate(cancel_state, NULL);
	return false;
}

/* Start e's thread, pinned from its first instruction to e's CPU (if any),
 * so that what it allocates and touches is on its node, with the runtime
 * creator's signal mask (rt->exec_sigmask).  0 or an errno. */
int cbcmn__exec_thread_start(struct cbcmn__exec *e)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	if (e->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(e->cpu, &set);
		pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	}
	pthread_attr_setsigmask_np(&attr, &e->rt->exec_sigmask);
	int rc = pthread_create(&e->thread, &attr, cbcmn__exec_main, e);
	pthread_attr_destroy(&attr);
	return rc;
}

/* For watchers: e runs on this thread.  Before the start is announced (the
 * started count, nlive), so that a runtime that says it runs an executor
 * never shows it STOPPED. */
static void exec_thread_published(struct cbcmn__exec *e)
{
	atomic_store_explicit(&e->ss->tid, (int32_t)gettid(), memory_order_relaxed);
	exec_state(e, CBCMN_EXEC_RUNNING);
}

static void exec_key_make(void)
{
	pthread_key_create(&exec_key, exec_thread_died);
}

void *cbcmn__exec_main(void *arg)
{
	struct cbcmn__exec *e = arg;
	struct cbcmn_runtime *rt = e->rt;
	int rc = exec_thread_setup(e);
	if (rc != 0)
		fprintf(stderr, "cbcmn: executor %u: no alternate signal stack (%s); stack "
				"overflows will not be caught\n",
			e->id, strerror(-rc));
	pthread_once(&exec_key_once, exec_key_make);
	pthread_setspecific(exec_key, e); /* cleared on a normal exit */
	if (e->reap || e->replacing) {
		/* Taking over from a thread that died, or made way for us
		 * (exec_replace()): a ring of our own, then end its task.  One
		 * that died in a run left the wheel's gate open: ours again
		 * (actor_sched.c). */
		if (e->wheel)
			cbcmn__wheel_gate_close(e);
		rc = cbcmn__be_takeover(e);
		bool replacing = e->replacing;
		e->replacing = false;
		if (rc == 0)
			exec_thread_published(e);
		/* release: our thread and ring, to destroy, which waits while
		 * the executor is STARTING (a replacement only). */
		if (replacing)
			atomic_store_explicit(&e->lstate, CBCMN__EX_RUNNING, memory_order_release);
		if (rc != 0) {
			fprintf(stderr, "cbcmn: executor %u: no new ring for the new thread (%s)\n",
				e->id, cbcmn_strerror(rc));
			atomic_store_explicit(&rt->lost_exec, 1, memory_order_relaxed);
			cbcmn__tls_exec = NULL;
			pthread_setspecific(exec_key, NULL);
			return NULL;
		}
		struct cbcmn_task *t = e->reap;
		e->reap = NULL;
		if (t) {
			t->sp = cbcmn__ctx_make(cbcmn__stack_top(t->stack), reap_entry);
			run_task(e, t);
		}
	} else {
		rc = cbcmn__be_start(e);
		/* Executors below min_workers start once, with the runtime,
		 * and never retire; the others start on demand. */
		bool initial = e->id < rt->min_live;
		if (rc == 0) {
			end_stack_reserve(e);
			exec_thread_published(e);
			atomic_store_explicit(&e->lstate, CBCMN__EX_RUNNING, memory_order_release);
		}
		if (initial) {
			if (rc != 0)
				atomic_store_explicit(&e->start_err, rc, memory_order_relaxed);
			atomic_fetch_add_explicit(&rt->started, 1, memory_order_release);
			cbcmn__futex_wake_one(&rt->started);
		} else if (rc == 0) {
			atomic_store_explicit(&e->start_err, 0, memory_order_relaxed);
			/* Emplaced at nlive, which was our index (seed 003);
			 * the resize token (cbcmn__exec_grow) keeps it so. */
			atomic_store_explicit(&rt->nlive, e->id + 1, memory_order_seq_cst);
			nlive_published(rt);
			atomic_fetch_add_explicit(&rt->seg.hdr->exec_starts, 1, memory_order_relaxed);
			resize_end(rt);
			cbcmn__spin_max_update(rt); /* our CPUs may be new */
			if (atomic_load_explicit(&rt->want_live, memory_order_seq_cst) > e->id + 1)
				cbcmn__exec_grow(rt);
		}
		if (rc != 0) {
			cbcmn__tls_exec = NULL;
			pthread_setspecific(exec_key, NULL);
			cbcmn__altstack_teardown(e);
			sys_stack_teardown(e);
			if (!initial) {
				/* Its work goes to the running executors, pinned
				 * tasks end with rc (forward_stopped_all()). */
				atomic_store_explicit(&e->joinable, false, memory_order_relaxed);
				pthread_detach(pthread_self());
				/* Destroy waits for this count: rt stays until our
				 * last touch of it. */
				atomic_fetch_add_explicit(&rt->exiting, 1, memory_order_relaxed);
				atomic_store_explicit(&e->start_failed_ns, now_ns(), memory_order_relaxed);
				atomic_store_explicit(&e->start_err, rc, memory_order_release);
				atomic_store_explicit(&e->lstate, CBCMN__EX_STOPPED, memory_order_release);
				if (forward_stopped_all(rt))
					cbcmn__exec_grow(rt);
				atomic_fetch_sub_explicit(&rt->exiting, 1, memory_order_release);
			} else {
				/* Joined by the create call's clean-up. */
				atomic_store_explicit(&e->lstate, CBCMN__EX_STOPPED, memory_order_release);
			}
			return NULL;
		}
	}

	e->busy_since = now_ns();
	/* A new executor runs tasks before it ever parks: a monitor asleep
	 * because every executor was parked watches again (monitor.c; our
	 * starter's seq_cst change of lstate comes before this look). */
	cbcmn__monitor_poke(e->rt);
	CBCMN_PROBE4(exec_start, e->id, (int)gettid(), e->cpu, e->rt->seg.rt_id);
	for (;;) {
		if (__builtin_expect(e->ring.dropped, 0) && exec_replace(e))
			return NULL; /* joined by the successor */
		if (e->ntimers)
			cbcmn__timers_fire(e, cbcmn__now(rt));
		if (cbcmn__ring_busy(e))
			ring_poll(e, false);
		if (cbcmn__has_mail(e) || e->nbacklog)
			mail_poll(e);
		if (__builtin_expect(e->rt->spare, 0) && spare_off_duty(e)) {
			cbcmn__nursery_live_flush(e);
			if (atomic_load_explicit(&e->rt->shutdown, memory_order_acquire) ||
			    spare_off_turn(e))
				break;
			continue;
		}
		struct cbcmn_task *t = pick(e);
		/* The last run did not switch straight to the actor it woke
		 * into our slot (owe_notify()): paid unless that is our pick
		 * (the slot empty now), as it is when nothing came first. */
		cbcmn__notify_owed_check(e);
		/* Children that ended here wait to be counted off their
		 * nursery only while another of them is what runs next. */
		if (__builtin_expect(e->live_n != NULL, 0) && !cbcmn__nursery_batch_holds(e, t))
			cbcmn__nursery_live_flush(e);
		if (!t) {
			t = search(e);
			/* An actor found there goes to the wheel first (pick()). */
			if (t && t != REPLACE && t != RETIRE &&
			    __builtin_expect(cbcmn__is_actor_task(t), 0) && cbcmn__actor_admit(e, t))
				continue;
		}
		if (t == REPLACE)
			continue;
		if (!t || t == RETIRE)
			break;
		if (++e->busy_tasks >= LOAD_WINDOW_PICKS)
			load_update(e, now_ns());
		run_task(e, t);
	}

	/* From here the thread only leaves.  A cancellation a task asked for
	 * (pthread_cancel of its own thread) and never reached is still
	 * pending: acted upon at the close() of a retiring executor's ring it
	 * ended the thread half-way, the executor RETIRING for good. */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_setspecific(exec_key, NULL);
	cbcmn__nursery_live_flush(e); /* none left by a break from the loop */
	cbcmn__ring_leave(e); /* on this thread, whose table it is in */
	cbcmn__timers_fini(e);
	end_stack_release(e);
	cbcmn__stack_cache_drain(&rt->stacks, &e->stacks);
	cbcmn__task_free_cache(e);
	cbcmn__nursery_free_cache(e);
	cbcmn__actor_free_cache(e);
	cbcmn__altstack_teardown(e);
	sys_stack_teardown(e);
	cbcmn__tls_exec = NULL;
	bool retired = atomic_load_explicit(&e->lstate, memory_order_relaxed) == CBCMN__EX_RETIRING;
	exec_state(e, CBCMN_EXEC_STOPPED);
	atomic_store_explicit(&e->ss->tid, 0, memory_order_relaxed);
	CBCMN_PROBE3(exec_stop, e->id, retired, e->rt->seg.rt_id);
	if (retired)
		exec_retired(e);
	return NULL;
}

/* ---- task context accessors -------------------------------------------- */

cbcmn_runtime *cbcmn_cx_runtime(const cbcmn_cx *cx)
{
	return cx ? ((const struct cbcmn_task *)cx)->rt : NULL;
}

uint64_t cbcmn_cx_task_id(const cbcmn_cx *cx)
{
	return cx ? ((const struct cbcmn_task *)cx)->id : 0;
}

uint32_t cbcmn_cx_executor(const cbcmn_cx *cx)
{
	return cx ? ((const struct cbcmn_task *)cx)->exec->id : UINT32_MAX;
}

bool cbcmn_cx_cancelled(const cbcmn_cx *cx)
{
	return cx ? cbcmn__task_cancelled((const struct cbcmn_task *)cx) : false;
}
