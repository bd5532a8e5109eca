/* actor_mbox.c: actor mailboxes: bounded rings with back-pressure and DOWN messages.
 *
 * A mailbox is a special channel (SPEC-021 §10 ":cluster"): many senders,
 * one receiver (the actor), fixed-size messages, bounded.  Like chan.c (and
 * with its wait queues, waitq.h) it hands over under one lock (the slot's, CBCMN__LOCK_ACTOR) and wakes after
 * the unlock: a receiver woken by a sender finds the message already in its
 * buffer; a sender woken by the receiver finds its message already in the
 * ring.  So nobody races for an item and each message is taken once.
 *
 * Invariants (under the lock):
 *   - count <= cap;
 *   - the receiver waits only while nothing is deliverable (ring empty, no
 *     DOWN due): a new message goes to it directly;
 *   - senders wait only while no place is free (count == cap, counting
 *     places reserved in lanes); every place the receiver frees goes to
 *     the first of them at once (slot_freed()), so a blocked sender is
 *     never overtaken, and a sender's messages stay in order; senders
 *     over the lanes (room_wait()) get them once half are free, or when
 *     the receiver's run ends (room_hand(), cbcmn__mb_room_pay());
 *   - a DOWN message is due once the receiver has taken every message that
 *     was in the mailbox when it was queued (seq <= taken_total): the
 *     watched actor's own messages come first.
 *
 * Blocking goes through iwait (iwait.h): cancellation and timers claim a
 * wait with one CAS, and the loser does nothing.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "actor.h"
#include "futex.h"
#include "iwait.h"
#include "monitor.h"
#include "probes.h"
#include "timer.h"
#include "trace.h"

/* ---- waits (waitq.h) ------------------------------------------------- */

/* The waiting receiver, claimed and detached; or NULL.  Inline always: with
 * the gauge's two branches (CBCMN__AGAUGE) GCC called it, and the cold
 * ring of pinned actors paid 5-10 % more CPU a hop for the call than
 * with it inline (docs/BENCHMARKS.md, "Sixteenth session"). */
static inline __attribute__((always_inline)) struct cbcmn__mb_wait *recv_claim(struct cbcmn__actor *a)
{
	struct cbcmn__mb_wait *w = atomic_load_explicit(&a->receiver, memory_order_relaxed);
	if (!w)
		return NULL;
	atomic_store_explicit(&a->receiver, NULL, memory_order_relaxed);
	w->qw.queued = false;
	if (!cbcmn__iwait_claim(&w->qw.iw))
		return NULL; /* a timer or a cancellation: mb_block() uncounts it */
	CBCMN__AGAUGE(a->rt, w->home, receiving, -1);
	return w;
}

/* The first waiting sender this side could claim, dequeued; or NULL. */
static struct cbcmn__mb_wait *send_claim(struct cbcmn__actor *a)
{
	return (struct cbcmn__mb_wait *)cbcmn__waitq_claim(&a->sendq); /* qw is first */
}

void cbcmn__mb_fail_senders(struct cbcmn__actor *a, struct cbcmn__wakes *wl, int result)
{
	struct cbcmn__mb_wait *w;
	while ((w = send_claim(a)))
		cbcmn__wakes_add(wl, &w->qw, result);
}

/* ---- the lanes word (struct cbcmn__actor's lanes) ------------------------ */

/* The bits below the generation.  READY: its task has started and it is
 * not stopped (lanes may open).  COUNTED: the free places are kept in the
 * word, from the first send that wanted the lanes on (an actor only ever
 * sent to from its own executor pays nothing for them).  OPEN: senders
 * may reserve.  A stop or the end of its task clears READY and OPEN;
 * COUNTED stays until the slot is reused.  Set and cleared under the lock;
 * the free places also change by reservations, without it. */
#define LN_OPEN (1ull << 31)
#define LN_COUNTED (1ull << 30)
#define LN_READY (1ull << 29)
#define LN_ROOM (LN_READY - 1)
_Static_assert(CBCMN_ACTOR_MAILBOX_MAX <= LN_ROOM, "a mailbox's places fit the word");

static uint64_t ln_load(struct cbcmn__actor *a)
{
	/* Relaxed: the word orders nothing but itself; the lock and the
	 * lanes order the rest. */
	return atomic_load_explicit(&a->lanes, memory_order_relaxed);
}

static uint32_t ln_room(uint64_t w)
{
	return (uint32_t)(w & LN_ROOM);
}

/* A place for a message put under the lock: false if none is free (the
 * mailbox is full, counting the messages in lanes). */
static bool room_take(struct cbcmn__actor *a)
{
	uint64_t w = ln_load(a);
	if (!(w & LN_COUNTED))
		return a->count < a->cap;
	do {
		if (!ln_room(w))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&a->lanes, &w, w - 1, memory_order_relaxed,
							memory_order_relaxed));
	return true;
}

/* A place freed (under the lock). */
static void room_give(struct cbcmn__actor *a)
{
	if (ln_load(a) & LN_COUNTED)
		atomic_fetch_add_explicit(&a->lanes, 1, memory_order_relaxed);
}

/* No more reservations: the actor stops or halts (locked). */
static void lanes_close(struct cbcmn__actor *a)
{
	atomic_fetch_and_explicit(&a->lanes, ~(LN_OPEN | LN_READY), memory_order_relaxed);
}

/* ---- the ring (under the lock) ----------------------------------------- */

/* Messages put in a's mailbox, ever: those taken and those in the ring.
 * Derived, not counted, so that the count is not one more field in the
 * slot's hop lines (actor.h); it holds while a is LIVE, the only state in
 * which its mailbox is put to (a halt empties the ring for drop). */
static uint64_t put_total(const struct cbcmn__actor *a)
{
	return a->taken_total + a->count;
}

/* Into the ring, its place already taken (room_take() or a lane's). */
static void ring_put(struct cbcmn__actor *a, const cbcmn_actor_msg *m)
{
	uint32_t i = a->head + a->count;
	if (i >= a->cap)
		i -= a->cap;
	a->ring[i] = *m;
	a->count++;
	CBCMN__AGAUGE(a->rt, cbcmn__actor_home(a), mailbox, 1);
}

static void ring_take(struct cbcmn__actor *a, cbcmn_actor_msg *m)
{
	*m = a->ring[a->head];
	if (++a->head == a->cap)
		a->head = 0;
	a->count--;
	a->taken_total++;
	room_give(a);
	CBCMN__AGAUGE(a->rt, cbcmn__actor_home(a), mailbox, -1);
}

/* An actor send's record in e's ring, on e's thread: every send's is
 * written here, at its put (trace_send()), or later with the time and
 * number taken at the put (a blocked send's, one the monitor landed). */
static void trace_send_rec(struct cbcmn__exec *e, uint64_t ts, cbcmn_actor_ref from,
			   cbcmn_actor_ref to, uint64_t seq)
{
	CBCMN__TRACE(e, CBCMN_TRACE_ACTOR_SEND, ts, from, to, (uint32_t)seq);
}

/* The trace (docs/TRACE.md): a message entered a's mailbox as its number
 * seq (put_total() - 1: the receive that takes it sees the same number),
 * sent from executor e's thread (NULL: a thread outside the runtime,
 * which has no ring).  Under a's lock: the clock is
 * read before the receive can take it, so the receive comes after.  Off,
 * a load and a branch. */
static __attribute__((noinline)) void trace_send_on(struct cbcmn__exec *e,
						   const struct cbcmn__actor *a,
						   cbcmn_actor_ref from)
{
	trace_send_rec(e, cbcmn__trace_now(), from, a->ref, put_total(a) - 1);
}

/* Inline, the record out of line: the look every send makes with the
 * trace off, without a call's frame (about 15 instructions a hop). */
static inline void trace_send(struct cbcmn__exec *e, const struct cbcmn__actor *a,
			      cbcmn_actor_ref from)
{
	if (e && cbcmn__trace_on(e)) /* the clock and the count only then */
		trace_send_on(e, a, from);
}

/* This thread's executor, if it is one of rt's; else NULL. */
static struct cbcmn__exec *exec_here(const struct cbcmn_runtime *rt)
{
	return cbcmn__on_executor(rt) ? cbcmn__tls_exec : NULL;
}

/* A new message: to the waiting receiver (it waits only when nothing is
 * deliverable), else into the ring.  False: full.  reserved: a message
 * from a lane, whose place was reserved as it was sent. */
static inline __attribute__((always_inline)) bool
put_msg_in(struct cbcmn__actor *a, const cbcmn_actor_msg *m, struct cbcmn__wakes *wl,
	   bool reserved)
{
	struct cbcmn__mb_wait *r;
	if (a->count == 0 && (r = recv_claim(a))) {
		*r->dst = *m;
		r->seq = a->taken_total; /* == put_total(): the ring is empty */
		a->taken_total++;
		if (reserved)
			room_give(a); /* never in the ring */
		cbcmn__wakes_add(wl, &r->qw, 0);
		return true;
	}
	if (reserved || room_take(a)) {
		ring_put(a, m);
		if (__builtin_expect(a->hnd != NULL, 0))
			cbcmn__hnd_note(a, wl);
		return true;
	}
	return false;
}

/* Out of line but in send_sys()'s mb_send() (put_msg_in(), a hop's every send):
 * inline in the handlers' sends too, their cold ring took 2 % more CPU. */
static bool put_msg(struct cbcmn__actor *a, const cbcmn_actor_msg *m, struct cbcmn__wakes *wl,
		    bool reserved)
{
	return put_msg_in(a, m, wl, reserved);
}

/* A wake owed to a's lane senders, by a take on e (NULL: the stall
 * monitor's landing, which hands the receiver a message: its run's end
 * pays).  e records a for the stall monitor: a receiver blocked outside
 * the runtime in that run never ends it (cbcmn__mb_room_rescue()). */
static void room_owe(struct cbcmn__actor *a, struct cbcmn__exec *e)
{
	atomic_store_explicit(&a->room_owed, true, memory_order_relaxed);
	if (e)
		atomic_store_explicit(&e->room_debtor, a, memory_order_relaxed);
}

/* A woken lane sender's wait result: the place it waited for is reserved
 * for it (room_hand()), and it posts with it (mb_send()). */
enum { ROOM_HELD = 1 };

/* Room may have freed up: hand it to waiting senders, in order.  e: this
 * thread's executor (the receiver's), whose clock times their sends for
 * the trace, which each sender records when it resumes (mb_send()).
 * pay: the receiver's run has ended (cbcmn__mb_room_pay()): any free
 * place goes, as the lock path's always do. */
static void room_hand(struct cbcmn__actor *a, struct cbcmn__wakes *wl, struct cbcmn__exec *e,
		      bool pay)
{
	struct cbcmn__mb_wait *w;
	while (a->sendq.head) {
		/* Senders over the lanes wait for room to reserve (no message,
		 * room_wait()): woken together once half the mailbox is free,
		 * so that they post in batches while the receiver takes the
		 * other half; one at a time, every place would wait for a
		 * sender's round trip, and the receiver with it.  A receiver
		 * that stops taking short of half would leave them beside
		 * free places (issue 16): the wake is owed then, and the end
		 * of its run pays it.  (The head may be a wait already ended:
		 * then only a delay.) */
		if (!pay && !((struct cbcmn__mb_wait *)a->sendq.head)->src) {
			uint32_t room = ln_room(ln_load(a));
			if (room < (a->cap + 1) / 2) {
				if (room)
					room_owe(a, e);
				break;
			}
		}
		/* The place first: a claimed sender must get it. */
		if (!room_take(a))
			break;
		if (!(w = send_claim(a))) {
			room_give(a);
			break;
		}
		if (!w->src) {
			/* Reserved for it, as it would reserve: left free for
			 * it to reserve, the place went to whoever came first
			 * while its wake crossed executors (a try_send on the
			 * receiver's executor, every time: rvalane, lanes2),
			 * and the lane sender, woken to find none, queued
			 * again: starved. */
			cbcmn__wakes_add(wl, &w->qw, ROOM_HELD);
			continue;
		}
		w->seq = put_total(a);
		w->put_ns = e && cbcmn__trace_on(e) ? cbcmn__trace_now() : 0;
		/* To the receiver if it waits: a pay finds it parked in its
		 * receive with places still reserved in lanes. */
		put_msg(a, w->src, wl, true);
		cbcmn__wakes_add(wl, &w->qw, 0);
	}
}

static void slot_freed(struct cbcmn__actor *a, struct cbcmn__wakes *wl, struct cbcmn__exec *e)
{
	room_hand(a, wl, e, false);
}

/* Pay a's owed wake, if it is still owed (under the lock, where it is
 * set and paid). */
static void room_pay(struct cbcmn__actor *a, struct cbcmn__exec *e)
{
	struct cbcmn__wakes wl = {0};
	cbcmn__flock_lock(&a->lock);
	if (atomic_load_explicit(&a->room_owed, memory_order_relaxed)) {
		atomic_store_explicit(&a->room_owed, false, memory_order_relaxed);
		room_hand(a, &wl, e, true);
	}
	cbcmn__flock_unlock(&a->lock);
	cbcmn__wakes_run(&wl, e);
}

void cbcmn__mb_room_pay(struct cbcmn__actor *a, struct cbcmn__exec *e)
{
	/* Relaxed: set by this thread's own takes in the run that ended, or
	 * before the wake that began it (a landing's hand-over). */
	if (atomic_load_explicit(&a->room_owed, memory_order_relaxed))
		room_pay(a, e);
}

/* Another thread's: x's run may have owed it since, the lock tells.  As
 * early as a landing's hand-over: any free place goes, as on the lock
 * path. */
void cbcmn__mb_room_rescue(struct cbcmn__exec *x)
{
	struct cbcmn__actor *a = atomic_exchange_explicit(&x->room_debtor, NULL,
							  memory_order_relaxed);
	if (a)
		room_pay(a, NULL);
}

/* cbcmn_actor_stop(): senders get -ESRCH, the receiver -ESHUTDOWN. */
bool cbcmn__mb_stop(struct cbcmn__actor *a, struct cbcmn__wakes *wl)
{
	lanes_close(a); /* later sends are -ESRCH, through the lock */
	cbcmn__mb_fail_senders(a, wl, -ESRCH);
	if (a->hnd) { /* no receive to end: its host halts it */
		cbcmn__hnd_note(a, wl);
		return true;
	}
	struct cbcmn__mb_wait *r = recv_claim(a);
	if (r)
		cbcmn__wakes_add(wl, &r->qw, -ESHUTDOWN);
	return r != NULL;
}

/* The message a DOWN or EXIT record stands for (the record is freed after). */
static void sys_msg(cbcmn_actor_msg *m, const struct cbcmn__monitor *mon)
{
	*m = (cbcmn_actor_msg){.type = mon->type, .from = mon->target};
	if (mon->type == CBCMN_ACTOR_EXIT) {
		m->body.exit.reason = mon->reason;
	} else {
		m->body.down.monitor = mon->id;
		m->body.down.reason = mon->reason;
		m->body.down.undelivered = mon->undelivered;
	}
}

static bool down_due(const struct cbcmn__actor *a)
{
	return a->sys_head && a->sys_head->seq <= a->taken_total;
}

void cbcmn__mb_put_down(struct cbcmn__actor *a, struct cbcmn__monitor *mon,
			struct cbcmn__wakes *wl)
{
	mon->seq = put_total(a);
	mon->next = NULL;
	/* Nothing is ahead of it when the receiver waits (an empty ring,
	 * nothing due): it may take it at once. */
	struct cbcmn__mb_wait *r;
	if (!a->sys_head && a->count == 0 && (r = recv_claim(a))) {
		sys_msg(r->dst, mon);
		free(mon);
		cbcmn__wakes_add(wl, &r->qw, 0);
		return;
	}
	if (a->sys_tail)
		a->sys_tail->next = mon;
	else
		a->sys_head = mon;
	a->sys_tail = mon;
	if (a->hnd)
		cbcmn__hnd_note(a, wl);
}

/* ---- blocking ------------------------------------------------------------ */

/* A thread outside the runtime waits for iw until deadline (the runtime's
 * clock, CLOCK_MONOTONIC: never a lab runtime's, send_check()): no timer
 * of an executor, its own futex sleep, and at the deadline it claims its
 * wait itself as timed out.  If the event claimed it first, its wake is
 * on the way: wait for it.  Returns the wait's outcome. */
static uint32_t thread_block(const struct cbcmn_runtime *rt, struct cbcmn__iwait *iw,
			     uint64_t deadline)
{
	/* acquire: pairs with the release store of waiter_wake() (sched.c),
	 * which follows the claim and the hand-over. */
	while (atomic_load_explicit(&iw->w.futex, memory_order_acquire) == 0) {
		uint64_t now = cbcmn__now(rt);
		if (now >= deadline) {
			if (cbcmn__iwait_claim_as(iw, CBCMN__IW_TIMEDOUT))
				return CBCMN__IW_TIMEDOUT;
			cbcmn__waiter_wait(&iw->w); /* claimed by the event: woken soon */
			break;
		}
		uint64_t left = deadline - now;
		struct timespec ts = {.tv_sec = (time_t)(left / 1000000000u),
				      .tv_nsec = (long)(left % 1000000000u)};
		cbcmn__futex_wait(&iw->w.futex, 0, &ts);
	}
	return atomic_load_explicit(&iw->state, memory_order_acquire);
}

/* A wait w of a ended by how, not by its claimer (a cancellation or the
 * timer claimed it): take w back out.  The slot outlives every actor in
 * it, so locking it is safe even if the actor halted meanwhile (which
 * dequeued w already).  Out of line: the blocking paths' frames stay
 * small (mb_park()). */
static __attribute__((noinline)) int mb_unclaimed(struct cbcmn__actor *a, struct cbcmn__mb_wait *w,
						   uint32_t how)
{
	cbcmn__flock_lock(&a->lock);
	if (w->qw.queued) {
		if (atomic_load_explicit(&a->receiver, memory_order_relaxed) == w)
			atomic_store_explicit(&a->receiver, NULL, memory_order_relaxed);
		else
			cbcmn__waitq_del(&a->sendq, &w->qw);
	}
	/* The receiver (only it has dst) was counted until claimed, and this
	 * claim was not the event's (recv_claim()).  On the executor that
	 * counted it: it may have begun to run on another since (its home
	 * moved with it), and the count would drift. */
	if (w->dst)
		CBCMN__AGAUGE(a->rt, w->home, receiving, -1);
	cbcmn__flock_unlock(&a->lock);
	return how == CBCMN__IW_TIMEDOUT ? -ETIMEDOUT : CBCMN_ECANCELED;
}

/* Called with a->lock held, which it drops: a task waits as w until
 * claimed, its timer tm (or NULL) armed.  Inline always: a receive that
 * waits for ever parks in its own frame (recv_block()), one frame fewer
 * for its resume to return through, and for a sender to prefetch
 * (sending(); docs/ACTORS.md, "The resume's lines"). */
static inline __attribute__((always_inline)) int mb_park(struct cbcmn__actor *a,
							 struct cbcmn__mb_wait *w,
							 struct cbcmn__timer *tm)
{
	cbcmn__flock_unlock(&a->lock);
	/* For ever: on the system stack (cbcmn__sys_park()). */
	uint32_t how = tm ? cbcmn__iwait_block(&w->qw.iw) : cbcmn__sys_park(&w->qw.iw);
	if (tm)
		cbcmn__timer_disarm(tm);
	if (how == CBCMN__IW_WOKEN)
		return w->qw.result;
	return mb_unclaimed(a, w, how);
}

/* Called with a->lock held, which it drops: wait as w (already queued by
 * the caller, as a sender or the receiver) until claimed.  Returns the
 * claimer's result, -ETIMEDOUT or CBCMN_ECANCELED (w dequeued again).
 * self NULL: a thread outside the runtime (a sender). */
static int mb_block(struct cbcmn_task *self, struct cbcmn__actor *a, struct cbcmn__mb_wait *w,
		    uint64_t deadline)
{
	struct cbcmn__timer *tm = NULL;
	if (!self) {
		cbcmn__flock_unlock(&a->lock);
		uint32_t how = deadline == UINT64_MAX ? cbcmn__iwait_block(&w->qw.iw)
						      : thread_block(a->rt, &w->qw.iw, deadline);
		if (how == CBCMN__IW_WOKEN)
			return w->qw.result;
		cbcmn__flock_lock(&a->lock);
		if (w->qw.queued)
			cbcmn__waitq_del(&a->sendq, &w->qw);
		cbcmn__flock_unlock(&a->lock);
		return -ETIMEDOUT;
	}
	if (deadline != UINT64_MAX && !(tm = cbcmn__timer_arm(self->exec, deadline, &w->qw.iw))) {
		if (w == atomic_load_explicit(&a->receiver, memory_order_relaxed)) {
			atomic_store_explicit(&a->receiver, NULL, memory_order_relaxed);
			CBCMN__AGAUGE(a->rt, w->home, receiving, -1);
		} else {
			cbcmn__waitq_del(&a->sendq, &w->qw);
		}
		/* Ended unpublished, but a lasting record (the receive's) may be
		 * held by a late canceller (iwait.h), which claims it if we are
		 * cancelled now: claim it first, or take its wake. */
		if (!cbcmn__iwait_claim_as(&w->qw.iw, CBCMN__IW_CANCELLED)) {
			cbcmn__flock_unlock(&a->lock);
			cbcmn__suspend(self);
			return CBCMN_ECANCELED;
		}
		atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
		cbcmn__flock_unlock(&a->lock);
		return -ENOMEM;
	}
	return mb_park(a, w, tm);
}

/* What each wait starts from, a lasting record's every receive too
 * (recv_wait()); the rest holds from wait_init() on. */
static void wait_reset(struct cbcmn__mb_wait *w)
{
	w->qw.result = 0;
	w->seq = 0;
	w->put_ns = 0;
}

static void wait_init(struct cbcmn__mb_wait *w, struct cbcmn_task *self)
{
	cbcmn__iwait_init(&w->qw.iw, self);
	w->qw.iw.kind = CBCMN__G_CHAN; /* a mailbox is a channel, for the snapshot */
	w->qw.queued = false;
	w->src = NULL;
	w->dst = NULL; /* set by the receiver only: how mb_block() tells them apart */
	w->home = 0;
	wait_reset(w);
}

_Static_assert(sizeof(struct cbcmn__mb_wait) <= CBCMN__IWAIT_KEEP &&
		       _Alignof(struct cbcmn__mb_wait) <= 8,
	       "the receive's record fits in the node's room (iwait.h)");
/* What a hop reads and writes of the receiver's record (the claim, the
 * wake, the re-arm's links, the hand-over) in the two lines from the
 * waiter, which struct cbcmn__iwkeep begins at a line (iwait.h): it
 * places the record so that an iwait's waiter falls there, so the
 * record begins with its qwait, and the qwait with its iwait
 * (send_claim()'s cast relies on it too). */
_Static_assert(offsetof(struct cbcmn__mb_wait, qw.iw.w) == offsetof(struct cbcmn__iwait, w) &&
		       offsetof(struct cbcmn__mb_wait, home) + sizeof(uint32_t) -
			       offsetof(struct cbcmn__mb_wait, qw.iw.w) <=
		       2 * CBCMN__CACHELINE &&
		       offsetof(struct cbcmn__iwait, w) + sizeof(struct cbcmn__waiter) <=
			       offsetof(struct cbcmn__iwait, state) &&
		       offsetof(struct cbcmn__qwait, result) > offsetof(struct cbcmn__qwait, iw.w) &&
		       offsetof(struct cbcmn__qwait, queued) > offsetof(struct cbcmn__qwait, iw.w) &&
		       offsetof(struct cbcmn__qwait, next) > offsetof(struct cbcmn__qwait, iw.w) &&
		       offsetof(struct cbcmn__mb_wait, dst) < offsetof(struct cbcmn__mb_wait, home) &&
		       offsetof(struct cbcmn__mb_wait, seq) < offsetof(struct cbcmn__mb_wait, home),
	       "struct cbcmn__mb_wait: a hop's fields in two lines from qw.iw.w");

/* The receiver's wait: the lasting record in its task's node (iwait.h),
 * which its receives share, so that taking it back from the node after
 * each needs no fence (docs/ACTORS.md, "The receive's lasting record");
 * NULL for a task with no node (recv_block_stack()). */
static struct cbcmn__mb_wait *recv_wait(struct cbcmn_task *self)
{
	bool fresh;
	struct cbcmn__mb_wait *w = cbcmn__iwait_keep(self, &fresh);
	if (!w)
		return NULL;
	if (fresh) {
		wait_init(w, self);
		w->qw.iw.lasting = true;
		return w;
	}
	cbcmn__iwait_rearm(&w->qw.iw);
	wait_reset(w);
	return w;
}

/* ---- operations ----------------------------------------------------------- */

/* The actor_receive probe (docs/PROBES.md); a is the caller, alive. */
static void probe_receive(const struct cbcmn__actor *a, const cbcmn_actor_msg *m, int rc)
{
	CBCMN_PROBE4(actor_receive, a->ref, rc == 0 ? m->type : 0, rc, a->rt->seg.rt_id);
}

static uint64_t deadline_in(const struct cbcmn_runtime *rt, uint64_t timeout_ns)
{
	if (timeout_ns == CBCMN_ACTOR_FOREVER)
		return UINT64_MAX;
	uint64_t now = cbcmn__now(rt);
	return timeout_ns > UINT64_MAX - 1 - now ? UINT64_MAX - 1 : now + timeout_ns;
}

/* SEND_HND: a waiting send from a handler, made a try (it never waits),
 * but still -EDEADLK to its own full mailbox: a RETRY could never see
 * room there (test_handler_send_to_its_own_full_mailbox_is_edeadlk). */
enum { SEND_TRY, SEND_WAIT, SEND_HND };

/* Adds to a mailbox figure of executor e (statseg.h), from e's thread,
 * its only writer: a plain load and store, relaxed (a counter). */
#define MCOUNT(e, field)                                                                  \
	atomic_store_explicit(&(e)->ss->mbox.field,                                       \
			      atomic_load_explicit(&(e)->ss->mbox.field, memory_order_relaxed) + 1, \
			      memory_order_relaxed)

/* A send met a full mailbox (waited, or refused with rc): count it where
 * the sender runs (cbcmn_executor_stats.actor_backpressure), or as the
 * runtime's for a thread outside it, and fire the probe that the BPF
 * programs count the same way (docs/PROBES.md). */
static void backpressure(struct cbcmn_runtime *rt, cbcmn_actor_ref to, int rc, bool waited)
{
	struct cbcmn__exec *e = cbcmn__on_executor(rt) ? cbcmn__tls_exec : NULL;
	if (e)
		MCOUNT(e, backpressure);
	else /* any thread: relaxed, a counter */
		atomic_fetch_add_explicit(&rt->seg.hdr->ext_backpressure, 1, memory_order_relaxed);
	CBCMN_PROBE5(actor_backpressure, to, e ? (int)e->id : -1, rc, waited, rt->seg.rt_id);
}

/* A receive on this thread's executor took a message from a mailbox of
 * depth d (cbcmn_executor_stats.mailbox_depth_hist). */
static void depth_sample(uint32_t d)
{
	uint32_t k = d > 1 ? 31u - (uint32_t)__builtin_clz(d) : 0;
	if (k >= CBCMN_MAILBOX_HIST_SLOTS)
		k = CBCMN_MAILBOX_HIST_SLOTS - 1;
	MCOUNT(cbcmn__tls_exec, depth_hist[k]);
}

/* ---- sends across executors: over the lanes ------------------------------ */

/* A send over the lanes: the message, by value in the lane message from
 * the sending executor's pool (cbcmn__xmsg_get()), which the
 * acknowledgement returns there.  src, h: the lane (src, h). */
struct lane_msg {
	cbcmn_actor_ref to;
	uint32_t src, h;
	union {
		cbcmn_actor_msg m; /* sent */
		/* Put in by the stall monitor: its send's trace record, for
		 * h to write when it drains the message (lane_traced()). */
		struct {
			uint64_t put_ns, seq;
			cbcmn_actor_ref from;
		} landed;
	};
};
_Static_assert(sizeof(struct lane_msg) <= CBCMN__XM_DATA, "a lane message's data holds it");

void cbcmn__mb_lanes_init(struct cbcmn__actor *a)
{
	atomic_store_explicit(&a->lanes, (uint64_t)a->gen << 32, memory_order_relaxed);
	atomic_store_explicit(&a->room_owed, false, memory_order_relaxed);
	a->settle_wait = NULL;
}

void cbcmn__mb_lanes_open(struct cbcmn__actor *a)
{
	cbcmn__flock_lock(&a->lock);
	if (a->state == CBCMN__A_LIVE && !a->stopping) /* a stop closed them for good */
		atomic_fetch_or_explicit(&a->lanes, LN_READY, memory_order_relaxed);
	cbcmn__flock_unlock(&a->lock);
}

/* The first send that wants the lanes: count the free places in the word
 * from now on, and let senders reserve.  Locked; a ready (so live, not
 * stopped) actor of generation gen. */
static void lanes_count(struct cbcmn__actor *a)
{
	uint64_t w = ln_load(a);
	/* Opened by another sender while this one waited for the lock:
	 * reservations are under way, which a store would undo. */
	if (w & LN_OPEN)
		return;
	if (!(w & LN_COUNTED))
		w = (w & ~LN_ROOM) | LN_COUNTED | (a->cap - a->count);
	/* Nothing else changes the word meanwhile: reservations need OPEN. */
	atomic_store_explicit(&a->lanes, w | LN_OPEN, memory_order_relaxed);
}

/* Places reserved by messages still in a lane (locked). */
static uint32_t in_lanes(struct cbcmn__actor *a)
{
	uint64_t w = ln_load(a);
	return w & LN_COUNTED ? a->cap - a->count - ln_room(w) : 0;
}

/* ---- waiting for messages in lanes to land -------------------------------- */

/* A task waits for messages in lanes to be put (its own sends, before it
 * sends another way or ends: lane_order(); an actor's, before its halt:
 * cbcmn__mb_lanes_settle()).  Usually one drain of their executor away,
 * and a few yields see them land; but that executor may be held by one
 * long run (a blocking call, a loop: a stall), and yielding until it
 * ends burnt a CPU for its whole length (issue 16).  So after LANE_SPINS
 * yields the task parks where the landing that ends its wait looks
 * (its executor's drain, the stall monitor's rescue of the messages,
 * whoever drains a stopped executor: lane_land()), and only that one
 * wakes it: a wait for its own post number seq on lane (src, h), on that
 * lane's list, in seq order (lane_park()); an actor's settle, in its slot
 * (settle_wait).  A landing reads one counter when nobody is parked. */
enum { LANE_SPINS = 8 };

struct cbcmn__lane_wait {
	struct cbcmn__iwait iw;
	struct cbcmn__lane_wait *next, *prev;
	uint32_t src, h, seq; /* a lane wait's */
	bool listed;          /* on its lane's list: as->lw_lock */
};

/* Lane (src, h) has put its post number seq. */
static bool lane_reached(struct cbcmn_runtime *rt, uint32_t src, uint32_t h, uint32_t seq)
{
	_Atomic uint64_t *done = &rt->exec[h]->lane_done[src];
	/* 32-bit sequence arithmetic: far fewer than 2^31 sends in flight.
	 * acquire: the put before a moved sender's look (lane_order()). */
	return (int32_t)(seq - (uint32_t)atomic_load_explicit(done, memory_order_acquire)) <= 0;
}

/* Takes w off its lane's list (locked). */
static void lane_del(struct cbcmn_runtime *rt, struct cbcmn__lane_wait *w)
{
	struct cbcmn__exec *x = rt->exec[w->h];
	*(w->prev ? &w->prev->next : &x->lw_head[w->src]) = w->next;
	*(w->next ? &w->next->prev : &x->lw_tail[w->src]) = w->prev;
	w->listed = false;
}

/* Onto its lane's list, in seq order: from the tail, where a new post
 * number usually goes (locked). */
static void lane_add(struct cbcmn_runtime *rt, struct cbcmn__lane_wait *w)
{
	struct cbcmn__exec *x = rt->exec[w->h];
	struct cbcmn__lane_wait *p = x->lw_tail[w->src];
	while (p && (int32_t)(w->seq - p->seq) < 0)
		p = p->prev;
	w->prev = p;
	w->next = p ? p->next : x->lw_head[w->src];
	*(p ? &p->next : &x->lw_head[w->src]) = w;
	*(w->next ? &w->next->prev : &x->lw_tail[w->src]) = w;
	w->listed = true;
}

static void lane_wait_init(struct cbcmn__lane_wait *w, struct cbcmn_task *self)
{
	cbcmn__iwait_init(&w->iw, self);
	/* Cancellation does not end the wait: the messages land whatever
	 * happens to the waiter, which must see them land. */
	w->iw.on_cancel = cbcmn__iwait_ignore_cancel;
}

/* Park self until lane (src, h) has put its post number seq.  Out of
 * line: GCC's -Wtsan refuses the fence once it is inlined. */
static __attribute__((noinline)) void lane_park(struct cbcmn_task *self, uint32_t src,
						 uint32_t h, uint32_t seq)
{
	struct cbcmn_runtime *rt = self->rt;
	struct cbcmn__actors *as = atomic_load_explicit(&rt->actors, memory_order_acquire);
	struct cbcmn__lane_wait w = {.src = src, .h = h, .seq = seq};
	lane_wait_init(&w, self);
	cbcmn__mutex_lock(&as->lw_lock);
	lane_add(rt, &w);
	/* seq_cst, and the fence: our count before our look, against a
	 * landing's count of its message before its look at ours
	 * (lane_wake()).  One of the two sees the other. */
	atomic_fetch_add_explicit(&as->lw_n, 1, memory_order_seq_cst);
	cbcmn__mutex_unlock(&as->lw_lock);
	atomic_thread_fence(memory_order_seq_cst);
	if (lane_reached(rt, src, h, seq)) {
		cbcmn__mutex_lock(&as->lw_lock);
		bool mine = w.listed; /* else a landing took it: its wake comes */
		if (mine) {
			lane_del(rt, &w);
			atomic_fetch_sub_explicit(&as->lw_n, 1, memory_order_relaxed);
		}
		cbcmn__mutex_unlock(&as->lw_lock);
		if (mine) {
			atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
			return; /* landed meanwhile, and nobody will wake us */
		}
	}
	cbcmn__iwait_block(&w.iw);
}

static void lane_wake_one(struct cbcmn__lane_wait *w, struct cbcmn__exec *e)
{
	/* Claimed for a cancellation, which left it to us. */
	(void)cbcmn__iwait_claim(&w->iw);
	cbcmn__iwait_wake(&w->iw, e);
}

/* A message of lane (src, h) landed (counted in lane_done): wake the
 * tasks parked for a post number it has reached, the head of the lane's
 * list, and no other.  e: the calling executor, or NULL (the stall
 * monitor's thread).  lane_done is read after our count: of two
 * landings of one lane (h's drain, the monitor's rescue), the later
 * sees both. */
static void lane_wake(struct cbcmn_runtime *rt, struct cbcmn__exec *e, uint32_t src, uint32_t h)
{
	struct cbcmn__actors *as = atomic_load_explicit(&rt->actors, memory_order_acquire);
	if (!atomic_load_explicit(&as->lw_n, memory_order_seq_cst))
		return;
	struct cbcmn__exec *x = rt->exec[h];
	struct cbcmn__lane_wait *go = NULL, *w;
	uint32_t n = 0;
	cbcmn__mutex_lock(&as->lw_lock);
	while ((w = x->lw_head[src]) && lane_reached(rt, src, h, w->seq)) {
		lane_del(rt, w);
		w->next = go;
		go = w;
		n++;
	}
	if (n)
		atomic_fetch_sub_explicit(&as->lw_n, n, memory_order_relaxed);
	cbcmn__mutex_unlock(&as->lw_lock);
	while (go) {
		w = go;
		go = w->next; /* before it can go */
		lane_wake_one(w, e);
	}
}

/* Wait until lane (src, h) has put post number seq, which only its
 * landings do. */
static void lane_wait(struct cbcmn_task *self, uint32_t src, uint32_t h, uint32_t seq)
{
	for (int i = 0; !lane_reached(self->rt, src, h, seq); i++) {
		if (i < LANE_SPINS)
			cbcmn_yield((cbcmn_cx *)self);
		else
			lane_park(self, src, h, seq);
	}
}

/* The actor's own task waits until no place of a's is reserved by a
 * message in a lane: yields, then parks in a's slot, where the landing
 * that puts the last one looks, under the lock (lane_land()). */
void cbcmn__mb_lanes_settle(struct cbcmn_task *self, struct cbcmn__actor *a)
{
	for (int i = 0;; i++) {
		cbcmn__flock_lock(&a->lock);
		lanes_close(a);
		if (!in_lanes(a))
			break;
		if (i < LANE_SPINS) {
			/* One drain of their executor away, which its doorbell
			 * has rung; a yield lets this executor drain too, it
			 * may be that one. */
			cbcmn__flock_unlock(&a->lock);
			cbcmn_yield((cbcmn_cx *)self);
			continue;
		}
		struct cbcmn__lane_wait w;
		lane_wait_init(&w, self);
		a->settle_wait = &w;
		cbcmn__flock_unlock(&a->lock);
		cbcmn__iwait_block(&w.iw);
	}
	cbcmn__flock_unlock(&a->lock);
}

uint32_t cbcmn__mb_lanes_halt(struct cbcmn__actor *a)
{
	lanes_close(a);
	return a->cap ? in_lanes(a) : 0;
}

/* Reserve a place in a's mailbox for a message over the lanes, without
 * the lock: 1 if reserved; 0 if the lock path must decide (full, stopped,
 * halted, recycled, a handler actor, or a task that has not started:
 * their lanes are not ready, or the generation is not gen's).  Ready but
 * not open yet: opened here, under the lock, once. */
static int room_reserve(struct cbcmn__actor *a, uint32_t gen)
{
	uint64_t w = ln_load(a);
	for (;;) {
		if ((uint32_t)(w >> 32) != gen || !(w & (LN_OPEN | LN_READY)))
			return 0;
		if (!(w & LN_OPEN)) {
			cbcmn__flock_lock(&a->lock);
			w = ln_load(a);
			bool ready = (uint32_t)(w >> 32) == gen && (w & LN_READY);
			if (ready)
				lanes_count(a);
			cbcmn__flock_unlock(&a->lock);
			if (!ready)
				return 0;
			w = ln_load(a);
			continue;
		}
		if (!ln_room(w))
			return 0;
		if (atomic_compare_exchange_weak_explicit(&a->lanes, &w, w - 1, memory_order_relaxed,
							  memory_order_relaxed))
			return 1;
	}
}

/* On executor h's drain (or whoever drains a stopped h's lanes, or the
 * stall monitor for a stalled h: xmsg.c's lanes_take()): put the message in the place it reserved.  The actor cannot have halted
 * meanwhile unless its task ended without waiting for it (a crash), in
 * which case its halt counted it undelivered (cbcmn__mb_lanes_halt()). */
/* Put m in the place reserved for it in to's mailbox (by a send over the
 * lanes, or for a lane sender by room_hand()), and wake the actor's
 * settle if that was the last.  Gone (a crash ended its task without the
 * settle): its halt counted the place undelivered (false).  e: this
 * thread's executor, or NULL (the stall monitor's thread). */
static bool put_reserved(struct cbcmn_runtime *rt, cbcmn_actor_ref to, const cbcmn_actor_msg *m,
			 struct cbcmn__exec *e, struct lane_msg *late)
{
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(rt, to);
	if (!a)
		return false;
	struct cbcmn__wakes wl = {0};
	put_msg(a, m, &wl, true);
	/* late: the stall monitor's landing, traced (lane_land()); m is
	 * late's, copied by now, its place reused for the record. */
	if (late)
		late->landed = (__typeof__(late->landed)){cbcmn__trace_now(), put_total(a) - 1, m->from};
	else
		trace_send(e, a, m->from);
	slot_freed(a, &wl, e); /* a hand-over to the receiver freed its place */
	struct cbcmn__lane_wait *settled = NULL;
	if (a->settle_wait && !in_lanes(a)) {
		settled = a->settle_wait;
		a->settle_wait = NULL;
	}
	cbcmn__flock_unlock(&a->lock);
	cbcmn__wakes_run(&wl, e);
	if (settled)
		lane_wake_one(settled, e);
	return true;
}

/* The send of a message the stall monitor put in for stalled h, timed
 * and numbered then (put_reserved()), written by h's drain: h's ring is
 * its thread's, and h records the sends it lands itself. */
static void lane_traced(struct cbcmn__exec *h, void *arg)
{
	const struct lane_msg *lm = arg;
	struct cbcmn__exec *e = cbcmn__waker_here(h); /* a stopped h's: another thread */
	if (e)
		trace_send_rec(e, lm->landed.put_ns, lm->landed.from, lm->to, lm->landed.seq);
}

static void lane_land(struct cbcmn__exec *h, void *arg)
{
	struct lane_msg *lm = arg;
	struct cbcmn_runtime *rt = h->rt;
	/* The stall monitor may run it for a stalled h (cbcmn__xmsg_get()):
	 * then no executor's owner-only state (trace ring, run queue); the
	 * send's record waits for h's drain (lane_traced()). */
	struct cbcmn__exec *e = cbcmn__waker_here(h);
	struct lane_msg *late = !e && cbcmn__trace_on(h) ? lm : NULL;
	if (put_reserved(rt, lm->to, &lm->m, e, late) && late)
		cbcmn__xmsg_then(lm, lane_traced);
	/* release: the put before a moved sender's look (lane_order());
	 * seq_cst: before our look at the parked waiters (lane_park()). */
	atomic_fetch_add_explicit(&rt->exec[lm->h]->lane_done[lm->src], 1, memory_order_seq_cst);
	lane_wake(rt, e, lm->src, lm->h);
}

/* Per-pair order for a task whose next send does not go on the lane its
 * last one did (it moved, the receiver moved, or the lock path): wait
 * until that one, and so all before it, is in its mailbox.  Only ever a
 * drain of that executor away; its doorbell was rung by the post.  True
 * if it yielded meanwhile (it may have moved). */
_Static_assert(CBCMN_MAX_EXECUTORS < UINT16_MAX, "lane_e1, lane_h: an executor id + 1 in 16 bits");

/* Whether self's last send over a lane may still be in it, for a send on
 * lane h (-1: the lock path). */
static inline bool lane_pending(struct cbcmn_task *self, int h)
{
	if (!self || !self->lane_e1)
		return false;
	uint32_t src = self->lane_e1 - 1;
	return h < 0 || src != self->exec->id || self->lane_h != (uint32_t)h; /* else in order */
}

/* lane_order()'s answers. */
enum { LANE_IN_ORDER, LANE_WAITED, LANE_WOULD_WAIT };

/* Self's next send goes on lane h (-1: the lock path) and its last one
 * over a lane may still be there (lane_order()): wait until it has
 * landed.  LANE_WAITED if it yielded meanwhile (it may have moved);
 * nowait (on the system stack, where it must not): LANE_WOULD_WAIT
 * instead, nothing changed. */
static int lane_order_wait(struct cbcmn_task *self, bool nowait)
{
	uint32_t src = self->lane_e1 - 1;
	int rc = LANE_IN_ORDER;
	if (!lane_reached(self->rt, src, self->lane_h, self->lane_seq)) {
		if (nowait)
			return LANE_WOULD_WAIT;
		lane_wait(self, src, self->lane_h, self->lane_seq);
		rc = LANE_WAITED;
	}
	self->lane_e1 = 0;
	return rc;
}

/* Inline, the look: a send's path makes it once or twice, mostly to find
 * nothing pending (the out-of-line call was 22 instructions a hop). */
static inline int lane_order(struct cbcmn_task *self, int h, bool nowait)
{
	return lane_pending(self, h) ? lane_order_wait(self, nowait) : LANE_IN_ORDER;
}

void cbcmn__actor_lanes_flush(struct cbcmn_task *t)
{
	lane_order(t, -1, false);
}

void cbcmn__actor_lanes_landed(struct cbcmn_task *t)
{
	/* What cbcmn__actor_main() and the end of a task that returned do:
	 * a landing jumped past both. */
	if (cbcmn__is_actor_task(t) && !((struct cbcmn__actor *)t->arg)->halt_begun)
		cbcmn__mb_lanes_settle(t, t->arg); /* begun: ended in its halt's drop or fini */
	if (t->lane_e1)
		lane_order(t, -1, false);
}

/* A send from me (NULL: not an actor) to a, before its first locked
 * instruction (the slot lock's), which would wait for what it prefetches:
 * the wait the send will likely claim, for writing (a hop's costliest miss
 * in a ring of 10 000 actors was the claim's CAS on the receiver's cold
 * wait record, on its stack, found only once the lock was held), the
 * receiver's task and the frame it resumes in (its hints: park() in
 * actor_sched.c), which the wake and the switch to it touch.  And the
 * prediction for me's next pick (cbcmn__actor_predict()): a, and that
 * wait.  All hints read without the lock: the wait may be gone by then,
 * the task run elsewhere; a prefetch of either does nothing wrong. */
static inline void sending(struct cbcmn__actor *me, struct cbcmn__actor *a)
{
	struct cbcmn__mb_wait *w = atomic_load_explicit(&a->receiver, memory_order_relaxed);
	if (me) {
		me->pf_to = a;
		me->pf_wait = w;
	}
	/* No receive waiting: a is running, or has messages queued, or is
	 * about to block: its task and stack are its executor's, in use,
	 * and a prefetch for writing would pull them away from it. */
	if (!w)
		return;
	const char *t = atomic_load_explicit(&a->hint_task, memory_order_relaxed);
	uintptr_t h = (uintptr_t)atomic_load_explicit(&a->hint_sp, memory_order_relaxed);
	if (t) /* lines 0-2: what running a task touches (runtime.h) */
		CBCMN__PREFETCH_RANGE(t, t + 192, 1);
	/* Its resume's lines on its stack (cbcmn__actor_resume_hint()),
	 * counted: the saved registers, the frames between, the buffer. */
	const char *s0 = (const char *)(h & ~(uintptr_t)63);
	if (s0) /* at most CBCMN__RESUME_LINES_MAX lines, 16 */
		CBCMN__PREFETCH_RANGE(s0, s0 + (h & 63) * 64, 1);
	/* The record's hop fields, from the waiter to its end, and the
	 * node's line after it, in an actor's node (iwait.h, struct
	 * cbcmn__iwkeep): what the claim and the withdrawal write. */
	CBCMN__PREFETCH_RANGE(&w->qw.iw.w, (const char *)(w + 1) + 8, 1);
}

/* Does a send from e to a (which may follow its messages) take the lock
 * path, whose wake brings a here?  When a's home is out of work, or a
 * waits and e has nothing else to run (a pair beside a hog at its home:
 * sched.c, cbcmn__exec_alone()).  Out of line: inlined, its registers
 * cost every send lane_route()'s three saves and restores (cachegrind,
 * a pinned ring: 6 instructions a hop). */
static __attribute__((noinline)) bool lane_pulls(struct cbcmn__exec *e, struct cbcmn__actor *a,
						 struct cbcmn__exec *home)
{
	return cbcmn__exec_out_of_work(home) ||
	       (atomic_load_explicit(&a->receiver, memory_order_relaxed) && cbcmn__exec_alone(e));
}

/* The receiver's home if a send from task self may go over the lanes:
 * another executor than self's, not stalled (the message would wait out
 * the stall).  Else -1.  *ap: to's slot once looked up (the lock path's
 * then: cbcmn__actor_lock_slot()), else as it was.  A handler's sends take the lock path:
 * it runs on its host's stack and must not yield in lane_order(); so do
 * a halt's drop and fini, ahead of the DOWNs (cbcmn__sends_locked()). */
static int lane_route(struct cbcmn_task *self, struct cbcmn_runtime *rt, cbcmn_actor_ref to,
		      int mode, struct cbcmn__actor **ap)
{
	if (!self || mode == SEND_HND || cbcmn__sends_locked(self))
		return -1;
	struct cbcmn__actor *a = cbcmn__actor_slot(rt, to), *me = cbcmn__actor_or_handler(self);
	if (!a)
		return -1;
	*ap = a;
	if (a == me)
		return -1; /* to itself: its own full mailbox is -EDEADLK */
	sending(me, a);
	uint32_t h = cbcmn__actor_home(a);
	if (h == self->exec->id || cbcmn__exec_stalled(rt->exec[h]))
		return -1;
	/* Its home is out of work: the lock path, whose wake brings it here
	 * (cbcmn__wakes_run_here()) unless it stays, as a channel's brings a
	 * task: a token passed round actors spread by stealing crossed
	 * executors at every other hop, each a doorbell to an executor that
	 * had just gone looking for work (docs/ACTORS.md, "The hop's fast
	 * path"). */
	if (!atomic_load_explicit(&a->stays, memory_order_relaxed) &&
	    lane_pulls(self->exec, a, rt->exec[h]))
		return -1;
	return (int)h;
}

/* Send m over lane (self's executor, h) with a place reserved in a's
 * mailbox (held: one already, handed by room_hand()): 0, sent (it will be
 * put there, or counted undelivered by a halt, as a message in the ring
 * would be), 1: no place, or -ENOMEM: no lane message; the lock path
 * decides. */
static int lane_send(struct cbcmn_task *self, struct cbcmn__actor *a, uint32_t h,
		     cbcmn_actor_ref to, const cbcmn_actor_msg *m, bool held)
{
	struct cbcmn__exec *e = self->exec;
	struct cbcmn__xmsg *x = cbcmn__xmsg_get(e);
	if (!x)
		return -ENOMEM; /* no memory for the lane message: the lock needs none */
	if (!held && !room_reserve(a, cbcmn__ref_gen(to))) {
		cbcmn__xmsg_unget(e, x);
		return 1;
	}
	struct lane_msg *lm = (struct lane_msg *)x->data;
	lm->to = to;
	lm->src = e->id;
	lm->h = h;
	lm->m = *m;
	self->lane_e1 = (uint16_t)(e->id + 1);
	self->lane_h = (uint16_t)h;
	self->lane_seq = (uint32_t)++e->lane_posted[h];
	cbcmn__xmsg_call_post(e, h, x, lane_land);
	return 0;
}

/* A send over the lanes found no place to reserve: wait for one as a
 * sender waiting for room does, but without a message (slot_freed() wakes
 * it when a place frees), rather than put through the lock, which would
 * have to wait for our own messages still in lanes first.  0: a place is
 * free now (try the lanes again), 2: woken with one reserved for us
 * (ROOM_HELD: post with it, or put it through the lock); 1: the lock path
 * decides (dead, stopped, lanes not open); else the wait's end (-ESRCH,
 * -ETIMEDOUT, CBCMN_ECANCELED, -ENOMEM). */
static int room_wait(struct cbcmn_task *self, struct cbcmn_runtime *rt, cbcmn_actor_ref to,
		     uint64_t deadline)
{
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(rt, to);
	if (!a)
		return 1;
	uint64_t w = ln_load(a);
	int rc = a->stopping || !(w & LN_OPEN) ? 1 : ln_room(w) ? 0 : -1;
	if (rc >= 0) {
		cbcmn__flock_unlock(&a->lock);
		return rc;
	}
	struct cbcmn__mb_wait wt;
	wait_init(&wt, self); /* src NULL: a wait for room only */
	cbcmn__waitq_push(&a->sendq, &wt.qw);
	rc = mb_block(self, a, &wt, deadline);
	return rc == ROOM_HELD ? 2 : rc;
}

/* mb_send()'s flags: the budget charged already; on the system stack
 * (send_sys()), where it must not wait: SEND_AGAIN instead, nothing done
 * that a send again from the task's stack would do twice. */
enum { MB_CHARGED = 1, MB_NOWAIT = 2 };
#define SEND_AGAIN 1

/* Inline: in send_sys() with its flags known (on the system stack, no
 * waits, charged, on its fiber), which leaves out what they rule out
 * (about 50 instructions a hop, the call's frame and the checks); the
 * other sends call it out of line (mb_send_here()). */
static inline __attribute__((always_inline)) int
mb_send(struct cbcmn_task *self, struct cbcmn_runtime *rt, cbcmn_actor_ref to,
	const cbcmn_actor_msg *m, int mode, uint64_t timeout_ns, bool off, int flags)
{
	bool nowait = flags & MB_NOWAIT;
	/* Off its fiber, a host's current handler is its host's to read. */
	struct cbcmn__actor *me = off ? cbcmn__actor_of(self) : cbcmn__actor_or_handler(self);
	cbcmn_actor_msg copy = *m;
	copy._reserved = 0;
	copy.from = me ? me->ref : CBCMN_ACTOR_NONE;
	/* Paid before the mailbox is touched: a task that waits for budget,
	 * or is ended there, leaves no trace (docs/BUDGETS.md). */
	if (self && !(flags & MB_CHARGED))
		cbcmn__charge(self, CBCMN__B_CHANNEL, 1);
	/* Off its fiber (a cbcmn_blocking() function's try_send with the
	 * task's cx; send_entry() refused the waits): from me, but sent as a
	 * thread outside the runtime sends.  The lanes, the trace ring and
	 * the next-task slot are the task's executor's, which only that
	 * executor's thread may touch. */
	if (__builtin_expect(off, 0))
		self = NULL;
	/* Before the lock: the timer is armed under it. */
	uint64_t deadline = mode == SEND_WAIT ? deadline_in(rt, timeout_ns) : UINT64_MAX;
	bool lane_waited = false;
	bool held = false; /* a place reserved for us (room_wait()) */
	struct cbcmn__actor *la = NULL; /* to's slot, once lane_route() looked */
	for (;;) {
		int h = lane_route(self, rt, to, mode, &la);
		if (h < 0)
			break;
		int order = lane_order(self, h, nowait);
		if (order == LANE_WOULD_WAIT)
			goto would_wait;
		if (order == LANE_WAITED && (h = lane_route(self, rt, to, mode, &la)) < 0)
			break; /* it may run elsewhere now */
		int sent = lane_send(self, la, (uint32_t)h, to, &copy, held);
		if (sent == 0) {
			if (lane_waited)
				backpressure(rt, to, 0, true);
			CBCMN_PROBE5(actor_send, to, copy.from, 0, lane_waited, rt->seg.rt_id);
			return 0;
		}
		/* No memory: waiting for room would not get it (room_wait()
		 * returns at once if there is room: a spin). */
		if (sent < 0 || mode != SEND_WAIT || timeout_ns == 0)
			break; /* the lock path's answer: -EAGAIN, -ETIMEDOUT... */
		/* No place: wait for one, then over the lanes again. */
		if (nowait)
			goto would_wait;
		int rc = room_wait(self, rt, to, deadline);
		if (rc == 1)
			break;
		lane_waited |= rc == 2;
		held = rc == 2;
		if (rc < 0) {
			backpressure(rt, to, rc, true);
			CBCMN_PROBE5(actor_send, to, copy.from, rc, 1, rt->seg.rt_id);
			return rc;
		}
	}
	/* The lock path then, behind our lane's. */
	if (lane_order(self, -1, nowait) == LANE_WOULD_WAIT)
		goto would_wait;
	if (held) {
		/* Not over the lanes after all (the receiver moved here, its
		 * executor stalled, no memory): put it in its place
		 * ourselves, as its landing would have. */
		put_reserved(rt, to, &copy, self->exec, NULL);
		backpressure(rt, to, 0, true);
		CBCMN_PROBE5(actor_send, to, copy.from, 0, 1, rt->seg.rt_id);
		return 0;
	}
	struct cbcmn__actor *a = la ? cbcmn__actor_lock_slot(la, to) : cbcmn__actor_lock_ref(rt, to);
	if (!a) {
		CBCMN_PROBE5(actor_send, to, copy.from, -ESRCH, 0, rt->seg.rt_id);
		return -ESRCH;
	}
	struct cbcmn__wakes wl = {0};
	int rc = 0;
	bool waited = false, full = false;
	/* A task runs on its executor; else a thread, maybe an executor's. */
	struct cbcmn__exec *e = self ? self->exec : exec_here(rt);
	if (a->stopping) {
		rc = -ESRCH; /* its mailbox is closed */
	} else if (nowait ? put_msg_in(a, &copy, &wl, false) /* send_sys(): a hop's */
			  : put_msg(a, &copy, &wl, false)) {
		trace_send(e, a, copy.from);
	} else {
		full = true;
		if (a == me && mode != SEND_TRY) {
			rc = -EDEADLK; /* only we could make room */
		} else if (mode != SEND_WAIT) {
			rc = -EAGAIN;
		} else if (timeout_ns == 0) {
			rc = -ETIMEDOUT;
		} else if (nowait) {
			cbcmn__flock_unlock(&a->lock);
			goto would_wait;
		} else {
			struct cbcmn__mb_wait w;
			wait_init(&w, self);
			w.src = &copy;
			cbcmn__waitq_push(&a->sendq, &w.qw);
			rc = mb_block(self, a, &w, deadline);
			waited = true;
			/* In the ring (slot_freed()), timed then by the receiver's
			 * clock if it traced: recorded here, on the executor
			 * this task resumed on (its ring is only its thread's). */
			if (rc == 0 && self && w.put_ns)
				trace_send_rec(self->exec, w.put_ns, copy.from, to, w.seq);
			goto out;
		}
	}
	/* One that may follow its messages comes here if its home searches
	 * (lane_route()); the rest wake as they did. */
	bool follows = !atomic_load_explicit(&a->stays, memory_order_relaxed);
	cbcmn__flock_unlock(&a->lock);
	if (follows)
		cbcmn__wakes_run_here(&wl, cbcmn__waker_of(self));
	else
		cbcmn__wakes_run(&wl, cbcmn__waker_of(self));
out:
	/* Every send a full mailbox held or refused: -EAGAIN, -ETIMEDOUT
	 * without a wait (a zero timeout), -EDEADLK (our own), or a wait. */
	if (full)
		backpressure(rt, to, rc, waited);
	/* After the unlock: a halt may have moved a on; to names it still. */
	CBCMN_PROBE5(actor_send, to, copy.from, rc, waited, rt->seg.rt_id);
	return rc;
would_wait:
	/* On the system stack (MB_NOWAIT), where it must not wait, the send
	 * would: for its last message to land (lane_order()), for a place
	 * (room_wait()) or in a full mailbox (mb_block()).  Nothing is done
	 * yet that the send again from the task's stack would do twice. */
	return SEND_AGAIN;
}

/* Checks common to the sends: the runtime (rt, or cx's when rt is NULL),
 * the message, the caller.  block: the call may wait. */
static int send_check(struct cbcmn_runtime **rtp, struct cbcmn_task *self, cbcmn_actor_ref to,
		      const cbcmn_actor_msg *m, bool block, bool timed)
{
	struct cbcmn_runtime *rt = *rtp;
	if (!m || m->type >= CBCMN_ACTOR_SYS || (!rt && !self))
		return -EINVAL;
	if (!rt)
		*rtp = rt = self->rt;
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED;
	if (self && self->rt != rt)
		return CBCMN_EWRONGRT;
	if (to == CBCMN_ACTOR_NONE)
		return -ESRCH;
	cbcmn__stack_check(self);
	if (!block)
		return 0;
	if (!self) {
		if (timed && rt->lab)
			return -EINVAL; /* a thread cannot wait on the virtual clock */
		return cbcmn__on_executor(rt) ? -EDEADLK : 0;
	}
	/* A blocking call is where a cancelled task notices (cbcmn.h). */
	return cbcmn__task_cancelled_here(self) ? CBCMN_ECANCELED : 0;
}

static __attribute__((noinline)) int mb_send_here(struct cbcmn_task *self,
						 struct cbcmn_runtime *rt, cbcmn_actor_ref to,
						 const cbcmn_actor_msg *m, int mode,
						 uint64_t timeout_ns, bool off, int flags)
{
	return mb_send(self, rt, to, m, mode, timeout_ns, off, flags);
}

/* A task's send on its executor's system stack (sched.c): the frames of
 * the send's path (mb_send(), its copy of the message, lane_route(), the
 * wake) stay off the task's stack, whose lines a cold hop misses.  Its
 * arguments come in registers (cbcmn__sys_call()); self's runtime is the
 * send's (send_check()). */
static uint64_t send_sys(uint64_t self, uint64_t to, uint64_t m, uint64_t mode,
			 uint64_t timeout_ns)
{
	struct cbcmn_task *t = (struct cbcmn_task *)(uintptr_t)self;
	return (uint64_t)(int64_t)mb_send(t, t->rt, to, (const cbcmn_actor_msg *)(uintptr_t)m,
					  (int)mode, timeout_ns, false, MB_CHARGED | MB_NOWAIT);
}

static int send_entry(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref to,
		      const cbcmn_actor_msg *m, int mode, uint64_t timeout_ns)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	/* A task's context used from another thread (a cbcmn_blocking()
	 * function's): waiting would park that thread as the task's fiber.
	 * Its try_send works (mb_send()). */
	bool off = self && __builtin_expect(!cbcmn__is_running(self), 0);
	if (off && mode == SEND_WAIT)
		return -EPERM;
	/* A handler never waits: its sends are try_sends (docs/ACTORS.md,
	 * "Handler actors").  Nor does a halt's drop or fini: a wait there
	 * parked the halting task inside its end, whose callers hold the
	 * executor it ran on, and a wake elsewhere resumed it on another
	 * thread (a crash: test_blocking_send_in_a_drop_does_not_wait). */
	if (self && mode == SEND_WAIT && __builtin_expect(cbcmn__sends_locked(self), 0))
		mode = SEND_HND;
	int rc = send_check(&rt, self, to, m, mode == SEND_WAIT,
			    timeout_ns != CBCMN_ACTOR_FOREVER);
	if (rc)
		return rc;
	/* A fiber actor's send: the system stack's.  Not a handler host's
	 * or a plain task's, whose stacks a hop does not leave cold: there
	 * the switch would only cost.  A plain task's send that waits for
	 * ever still parks on the system stack (mb_park(): no timer). */
	if (self && !off && cbcmn__is_actor_task(self)) {
		/* Paid here: a wait for budget, or the fairness yield, is a
		 * switch, after which self may run on another executor, one
		 * whose system stack may be missing (sys_stack_setup()): its
		 * own looked at after.  Running (not off), its stack
		 * checked in send_check(). */
		cbcmn__charge_here(self, CBCMN__B_CHANNEL, 1);
		if (__builtin_expect(self->exec->sys_top != NULL, 1)) {
			rc = (int)(int64_t)cbcmn__sys_run(self, send_sys, (uint64_t)(uintptr_t)self,
							  to, (uint64_t)(uintptr_t)m,
							  (uint64_t)mode, timeout_ns);
			if (rc != SEND_AGAIN)
				return rc;
		}
		/* It would wait: from here, where it may. */
		return mb_send_here(self, rt, to, m, mode, timeout_ns, false, MB_CHARGED);
	}
	return mb_send_here(self, rt, to, m, mode, timeout_ns, off, 0);
}

int cbcmn_actor_send(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref a, const cbcmn_actor_msg *m)
{
	return send_entry(rt, cx, a, m, SEND_WAIT, CBCMN_ACTOR_FOREVER);
}

int cbcmn_actor_try_send(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref a,
			 const cbcmn_actor_msg *m)
{
	return send_entry(rt, cx, a, m, SEND_TRY, 0);
}

int cbcmn_actor_send_timeout(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref a,
			     const cbcmn_actor_msg *m, uint64_t timeout_ns)
{
	return send_entry(rt, cx, a, m, SEND_WAIT, timeout_ns);
}

/* A receive's wait ended cancelled: -ESHUTDOWN if it was our stop, as for
 * one that finds us stopped on entry (the more specific), else rc.  A stop
 * sets our interrupted flag before it claims the receiver's wait for its
 * -ESHUTDOWN (actor.c's stop_locked(), under our lock), so our wait's own
 * look at the flag (iwait.c) can claim it first, as cancelled
 * (test_stop_as_receive_begins_to_wait_is_eshutdown). */
static int stopped_or(struct cbcmn__actor *a, int rc)
{
	cbcmn__flock_lock(&a->lock);
	bool stopped = a->stopping; /* only our own halt clears it */
	cbcmn__flock_unlock(&a->lock);
	return stopped ? -ESHUTDOWN : rc;
}

/* Called with a->lock held, which it drops: receive into m as w, queued
 * here as a's receiver, until a sender hands it a message. */
static inline __attribute__((always_inline)) int
recv_block(struct cbcmn_task *self, struct cbcmn__actor *a, struct cbcmn__mb_wait *w,
	   cbcmn_actor_msg *m, uint64_t deadline)
{
	w->dst = m;
	w->qw.queued = true;
	atomic_store_explicit(&a->receiver, w, memory_order_relaxed);
	w->home = cbcmn__actor_home(a);
	CBCMN__AGAUGE(a->rt, w->home, receiving, 1);
	int rc = deadline == UINT64_MAX ? mb_park(a, w, NULL) : mb_block(self, a, w, deadline);
	if (rc == CBCMN_ECANCELED)
		rc = stopped_or(a, rc);
	else if (rc == 0 && m->type < CBCMN_ACTOR_SYS) {
		depth_sample(1); /* handed to us: it was alone */
		/* After the wake, on the executor we resumed on: after
		 * the send, which was timed under the lock. */
		CBCMN__TRACE(self->exec, CBCMN_TRACE_ACTOR_RECEIVE, cbcmn__trace_now(),
			     m->type, a->ref, (uint32_t)w->seq);
	}
	return rc;
}

/* The same, on the stack: a task with no node (ending, past its guarded
 * call).  Out of line: the hot path's frame stays small, so that the
 * sender's prefetch reaches the node above it (sending()). */
static __attribute__((noinline)) int recv_block_stack(struct cbcmn_task *self,
						      struct cbcmn__actor *a, cbcmn_actor_msg *m,
						      uint64_t deadline)
{
	struct cbcmn__mb_wait ws;
	wait_init(&ws, self);
	return recv_block(self, a, &ws, m, deadline);
}

int cbcmn_actor_receive(cbcmn_cx *cx, cbcmn_actor_msg *m, uint64_t timeout_ns)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!m)
		return -EINVAL;
	int err;
	struct cbcmn__actor *a = cbcmn__actor_caller(self, &err);
	if (!a)
		return err;
	if (a->hnd)
		return -EPERM; /* a handler gets its messages as calls */
	/* The room left, before the lock, as a send checks it
	 * (send_check()): not left to the charge below, whose check is the
	 * budget's and may move. */
	cbcmn__stack_check(self);
	cbcmn__charge_here(self, CBCMN__B_CHANNEL, 1); /* running: cbcmn__actor_caller() */
	uint64_t deadline = deadline_in(self->rt, timeout_ns);
	struct cbcmn__wakes wl = {0};
	struct cbcmn__monitor *down = NULL;
	int rc = 0;
	cbcmn__flock_lock(&a->lock);
	if (a->stopping || a->state != CBCMN__A_LIVE) {
		/* Stopped, or halting (a drop callback that receives: nothing
		 * will ever come).  Before a cancellation: the more specific. */
		rc = -ESHUTDOWN;
	} else if (cbcmn__actor_cancelled(self, a)) {
		rc = CBCMN_ECANCELED; /* a blocking call is where it notices */
	} else if (down_due(a)) {
		down = a->sys_head;
		if (!(a->sys_head = down->next))
			a->sys_tail = NULL;
	} else if (a->count) {
		depth_sample(a->count);
		uint64_t seq = a->taken_total;
		ring_take(a, m);
		CBCMN__TRACE(self->exec, CBCMN_TRACE_ACTOR_RECEIVE, cbcmn__trace_now(), m->type,
			     a->ref, (uint32_t)seq);
		slot_freed(a, &wl, self->exec);
	} else if (timeout_ns == 0) {
		rc = -ETIMEDOUT;
	} else {
		struct cbcmn__mb_wait *w = recv_wait(self);
		rc = w ? recv_block(self, a, w, m, deadline) : recv_block_stack(self, a, m, deadline);
		probe_receive(a, m, rc);
		return rc;
	}
	cbcmn__flock_unlock(&a->lock);
	cbcmn__wakes_run(&wl, self->exec);
	if (down) {
		sys_msg(m, down);
		free(down);
	}
	probe_receive(a, m, rc);
	return rc;
}

int cbcmn__mb_try_put(struct cbcmn_runtime *rt, cbcmn_actor_ref to, const cbcmn_actor_msg *m,
		      struct cbcmn__exec *e)
{
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(rt, to);
	if (!a)
		return -ESRCH;
	struct cbcmn__wakes wl = {0};
	int rc = a->stopping ? -ESRCH : put_msg(a, m, &wl, false) ? 0 : -EAGAIN;
	if (rc == 0)
		trace_send(exec_here(rt), a, m->from);
	cbcmn__flock_unlock(&a->lock);
	cbcmn__wakes_run(&wl, e);
	return rc;
}

bool cbcmn__mb_take_down(struct cbcmn__actor *a, cbcmn_actor_msg *m)
{
	cbcmn__flock_lock(&a->lock);
	struct cbcmn__monitor *down = a->sys_head;
	if (down && !(a->sys_head = down->next))
		a->sys_tail = NULL;
	cbcmn__flock_unlock(&a->lock);
	if (!down)
		return false;
	sys_msg(m, down);
	free(down);
	return true;
}

bool cbcmn__mb_take(struct cbcmn__actor *a, cbcmn_actor_msg *m, struct cbcmn__wakes *wl,
		    struct cbcmn__exec *e)
{
	if (down_due(a)) {
		struct cbcmn__monitor *down = a->sys_head;
		if (!(a->sys_head = down->next))
			a->sys_tail = NULL;
		sys_msg(m, down);
		free(down);
		return true;
	}
	if (!a->count)
		return false;
	/* As cbcmn_actor_receive() takes one: the depth sample, the trace. */
	depth_sample(a->count);
	uint64_t seq = a->taken_total;
	ring_take(a, m);
	CBCMN__TRACE(e, CBCMN_TRACE_ACTOR_RECEIVE, cbcmn__trace_now(), m->type, a->ref, (uint32_t)seq);
	slot_freed(a, wl, e);
	return true;
}
