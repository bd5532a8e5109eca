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
 *   - senders wait only while count == cap; every slot the receiver frees
 *     goes to the first of them at once (slot_freed()), so a blocked sender
 *     is never overtaken, and a sender's messages stay in order;
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

#include "actor.h"
#include "futex.h"
#include "monitor.h"
#include "probes.h"
#include "timer.h"
#include "trace.h"

/* ---- waits (waitq.h) ------------------------------------------------- */

/* The waiting receiver, claimed and detached; or NULL. */
static struct cbcmn__mb_wait *recv_claim(struct cbcmn__actor *a)
{
	struct cbcmn__mb_wait *w = a->receiver;
	if (!w)
		return NULL;
	a->receiver = NULL;
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

/* ---- the ring (under the lock) ----------------------------------------- */

static void ring_put(struct cbcmn__actor *a, const cbcmn_actor_msg *m)
{
	uint32_t i = a->head + a->count;
	if (i >= a->cap)
		i -= a->cap;
	a->ring[i] = *m;
	a->count++;
	a->put_total++;
	CBCMN__AGAUGE(a->rt, cbcmn__actor_home(a), mailbox, 1);
}

static void ring_take(struct cbcmn__actor *a, cbcmn_actor_msg *m)
{
	*m = a->ring[a->head];
	if (++a->head == a->cap)
		a->head = 0;
	a->count--;
	a->taken_total++;
	CBCMN__AGAUGE(a->rt, cbcmn__actor_home(a), mailbox, -1);
}

/* The trace (docs/TRACE.md): a message entered a's mailbox as its number
 * seq (count == put_total - taken_total, so the receive that takes it
 * sees the same number), sent from executor e's thread (NULL: a thread
 * outside the runtime, which has no ring).  Under a's lock: the clock is
 * read before the receive can take it, so the receive comes after.  Off,
 * a load and a branch. */
static void trace_send(struct cbcmn__exec *e, const struct cbcmn__actor *a, cbcmn_actor_ref from)
{
	if (e)
		CBCMN__TRACE(e, CBCMN_TRACE_ACTOR_SEND, cbcmn__trace_now(), from, a->ref,
			     (uint32_t)(a->put_total - 1));
}

/* This thread's executor, if it is one of rt's; else NULL. */
static struct cbcmn__exec *exec_here(const struct cbcmn_runtime *rt)
{
	return cbcmn__on_executor(rt) ? cbcmn__tls_exec : NULL;
}

/* A new message: to the waiting receiver (it waits only when nothing is
 * deliverable), else into the ring.  False: full. */
static bool put_msg(struct cbcmn__actor *a, const cbcmn_actor_msg *m, struct cbcmn__wakes *wl)
{
	struct cbcmn__mb_wait *r;
	if (a->count == 0 && (r = recv_claim(a))) {
		*r->dst = *m;
		r->seq = a->taken_total; /* == put_total: the ring is empty */
		a->put_total++;
		a->taken_total++;
		cbcmn__wakes_add(wl, &r->qw, 0);
		return true;
	}
	if (a->count < a->cap) {
		ring_put(a, m);
		if (__builtin_expect(a->hnd != NULL, 0))
			cbcmn__hnd_note(a, wl);
		return true;
	}
	return false;
}

/* Room may have freed up: hand it to waiting senders, in order.  e: this
 * thread's executor (the receiver's), whose clock times their sends for
 * the trace, which each sender records when it resumes (mb_send()). */
static void slot_freed(struct cbcmn__actor *a, struct cbcmn__wakes *wl, struct cbcmn__exec *e)
{
	struct cbcmn__mb_wait *w;
	while (a->count < a->cap && (w = send_claim(a))) {
		w->seq = a->put_total;
		w->put_ns = cbcmn__trace_on(e) ? cbcmn__trace_now() : 0;
		ring_put(a, w->src);
		cbcmn__wakes_add(wl, &w->qw, 0);
	}
}

/* cbcmn_actor_stop(): senders get -ESRCH, the receiver -ESHUTDOWN. */
bool cbcmn__mb_stop(struct cbcmn__actor *a, struct cbcmn__wakes *wl)
{
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
	mon->seq = a->put_total;
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

static struct cbcmn__exec *waker_of(struct cbcmn_task *self)
{
	/* Our own executor: the woken task lands in its next-task slot.
	 * Outside the runtime: the inject queue. */
	return self ? self->exec : NULL;
}

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

/* Called with a->lock held, which it drops: wait as w (already queued by
 * the caller, as a sender or the receiver) until claimed.  Returns the
 * claimer's result, -ETIMEDOUT or CBCMN_ECANCELED (w dequeued again).
 * self NULL: a thread outside the runtime (a sender). */
static int mb_block(struct cbcmn_task *self, struct cbcmn__actor *a, struct cbcmn__mb_wait *w,
		    uint64_t deadline)
{
	struct cbcmn__timer *tm = NULL;
	if (!self) {
		cbcmn__mutex_unlock(&a->lock);
		uint32_t how = deadline == UINT64_MAX ? cbcmn__iwait_block(&w->qw.iw)
						      : thread_block(a->rt, &w->qw.iw, deadline);
		if (how == CBCMN__IW_WOKEN)
			return w->qw.result;
		cbcmn__mutex_lock(&a->lock);
		if (w->qw.queued)
			cbcmn__waitq_del(&a->sendq, &w->qw);
		cbcmn__mutex_unlock(&a->lock);
		return -ETIMEDOUT;
	}
	if (deadline != UINT64_MAX && !(tm = cbcmn__timer_arm(self->exec, deadline, &w->qw.iw))) {
		if (w == a->receiver) {
			a->receiver = NULL;
			CBCMN__AGAUGE(a->rt, w->home, receiving, -1);
		} else {
			cbcmn__waitq_del(&a->sendq, &w->qw);
		}
		atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
		cbcmn__mutex_unlock(&a->lock);
		return -ENOMEM;
	}
	cbcmn__mutex_unlock(&a->lock);
	uint32_t how = cbcmn__iwait_block(&w->qw.iw);
	if (tm)
		cbcmn__timer_disarm(tm);
	if (how == CBCMN__IW_WOKEN)
		return w->qw.result;
	/* Claimed by cancellation or the timer: take w back out.  The slot
	 * outlives every actor in it, so locking it is safe even if the
	 * actor halted meanwhile (which dequeued w already). */
	cbcmn__mutex_lock(&a->lock);
	if (w->qw.queued) {
		if (a->receiver == w)
			a->receiver = NULL;
		else
			cbcmn__waitq_del(&a->sendq, &w->qw);
	}
	/* The receiver (only it has dst) was counted until claimed, and this
	 * claim was not the event's (recv_claim()).  On the executor that
	 * counted it: it may have begun to run on another since (its home
	 * moved with it), and the count would drift. */
	if (w->dst)
		CBCMN__AGAUGE(a->rt, w->home, receiving, -1);
	cbcmn__mutex_unlock(&a->lock);
	return how == CBCMN__IW_TIMEDOUT ? -ETIMEDOUT : CBCMN_ECANCELED;
}

static void wait_init(struct cbcmn__mb_wait *w, struct cbcmn_task *self)
{
	cbcmn__iwait_init(&w->qw.iw, self);
	w->qw.iw.kind = CBCMN__G_CHAN; /* a mailbox is a channel, for the snapshot */
	w->qw.result = 0;
	w->qw.queued = false;
	w->src = NULL;
	w->dst = NULL; /* set by the receiver only: how mb_block() tells them apart */
	w->home = 0;
	w->seq = 0;
	w->put_ns = 0;
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

/* A send handed to the receiver's home executor: the lane message (its
 * pointer comes back as the acknowledgement), on the sender's stack. */
struct lane_send {
	struct cbcmn__xmsg x;
	struct cbcmn_runtime *rt;
	cbcmn_actor_ref to;
	const cbcmn_actor_msg *m;
	bool blocking; /* a send (not a try_send): cancellation ends it */
	int rc;        /* set there, read here after the acknowledgement woke us */
};

/* On the home executor e's thread, at its mail drain: put the message as a
 * try_send would (the slot lock is e's own cache line when the receiver
 * runs there), unless a blocking sender was cancelled meanwhile (a blocking
 * call is where cancellation is noticed; a try_send never notices it).
 * Whatever the outcome, the message is then in the mailbox or not, for
 * good: a cancellation after this point leaves it delivered. */
static void lane_put(struct cbcmn__exec *e, void *arg)
{
	struct lane_send *ls = arg;
	ls->rc = ls->blocking && cbcmn__task_cancelled(ls->x.task)
			 ? CBCMN_ECANCELED
			 : cbcmn__mb_try_put(ls->rt, ls->to, ls->m, e);
}

/* The executor a send from task self should go through: the receiver's
 * home if it is another executor than self's, which is not stalled (the
 * sender would wait out the stall), else -1 (the lock path).  A handler
 * never parks, so its sends take the lock path. */
static int lane_route(struct cbcmn_task *self, struct cbcmn_runtime *rt, cbcmn_actor_ref to,
		      int mode)
{
	if (!self || mode == SEND_HND)
		return -1;
	int h = cbcmn__actor_home_hint(rt, to);
	if (h < 0 || (uint32_t)h == self->exec->id || cbcmn__exec_stalled(rt->exec[h]) ||
	    cbcmn__hnd_current(self))
		return -1;
	return h;
}

/* Send m to `to` through executor h's lanes, and wait for the outcome
 * (the acknowledgement): 0, -ESRCH, -EAGAIN (full: nothing of ours is in
 * flight any more, so the caller may wait for room through the lock in
 * order), CBCMN_ECANCELED (cancelled before the home executor put it). */
static int lane_send(struct cbcmn_task *self, struct cbcmn_runtime *rt, uint32_t h,
		     cbcmn_actor_ref to, const cbcmn_actor_msg *m, bool blocking)
{
	struct lane_send ls = {.rt = rt, .to = to, .m = m, .blocking = blocking};
	cbcmn__xmsg_call_wait(self->exec, h, self, &ls.x, lane_put, &ls);
	return ls.rc;
}

static int mb_send(struct cbcmn_task *self, struct cbcmn_runtime *rt, cbcmn_actor_ref to,
		   const cbcmn_actor_msg *m, int mode, uint64_t timeout_ns)
{
	struct cbcmn__actor *me = cbcmn__actor_or_handler(self);
	cbcmn_actor_msg copy = *m;
	copy._reserved = 0;
	copy.from = me ? me->ref : CBCMN_ACTOR_NONE;
	/* Paid before the mailbox is touched: a task that waits for budget,
	 * or is ended there, leaves no trace (docs/BUDGETS.md). */
	if (self)
		cbcmn__charge(self, CBCMN__B_CHANNEL, 1);
	/* Before the lock: the timer is armed under it. */
	uint64_t deadline = mode == SEND_WAIT ? deadline_in(rt, timeout_ns) : UINT64_MAX;
	int h = lane_route(self, rt, to, mode);
	if (h >= 0) {
		int rc = lane_send(self, rt, (uint32_t)h, to, &copy, mode == SEND_WAIT);
		if (rc != -EAGAIN || mode != SEND_WAIT) {
			if (rc == -EAGAIN)
				backpressure(rt, to, rc, false);
			CBCMN_PROBE5(actor_send, to, copy.from, rc, 0, rt->seg.rt_id);
			return rc;
		}
		/* Full at the drain: wait for room as any sender does. */
	}
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(rt, to);
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
	} else if (put_msg(a, &copy, &wl)) {
		trace_send(e, a, copy.from);
	} else {
		full = true;
		if (a == me && mode != SEND_TRY) {
			rc = -EDEADLK; /* only we could make room */
		} else if (mode != SEND_WAIT) {
			rc = -EAGAIN;
		} else if (timeout_ns == 0) {
			rc = -ETIMEDOUT;
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
				CBCMN__TRACE(self->exec, CBCMN_TRACE_ACTOR_SEND, w.put_ns, copy.from,
					     to, (uint32_t)w.seq);
			goto out;
		}
	}
	cbcmn__mutex_unlock(&a->lock);
	cbcmn__wakes_run(&wl, waker_of(self));
out:
	/* Every send a full mailbox held or refused: -EAGAIN, -ETIMEDOUT
	 * without a wait (a zero timeout), -EDEADLK (our own), or a wait. */
	if (full)
		backpressure(rt, to, rc, waited);
	/* After the unlock: a halt may have moved a on; to names it still. */
	CBCMN_PROBE5(actor_send, to, copy.from, rc, waited, rt->seg.rt_id);
	return rc;
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
	return cbcmn__task_cancelled(self) ? CBCMN_ECANCELED : 0;
}

static int send_entry(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref to,
		      const cbcmn_actor_msg *m, int mode, uint64_t timeout_ns)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	/* A handler never waits: its sends are try_sends (docs/ACTORS.md,
	 * "Handler actors"). */
	if (self && mode == SEND_WAIT && __builtin_expect(cbcmn__hnd_current(self) != NULL, 0))
		mode = SEND_HND;
	int rc = send_check(&rt, self, to, m, mode == SEND_WAIT,
			    timeout_ns != CBCMN_ACTOR_FOREVER);
	if (rc)
		return rc;
	return mb_send(self, rt, to, m, mode, timeout_ns);
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
	cbcmn__mutex_lock(&a->lock);
	bool stopped = a->stopping; /* only our own halt clears it */
	cbcmn__mutex_unlock(&a->lock);
	return stopped ? -ESHUTDOWN : rc;
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
	cbcmn__charge(self, CBCMN__B_CHANNEL, 1);
	uint64_t deadline = deadline_in(self->rt, timeout_ns);
	struct cbcmn__wakes wl = {0};
	struct cbcmn__monitor *down = NULL;
	int rc = 0;
	cbcmn__mutex_lock(&a->lock);
	if (a->stopping || a->state != CBCMN__A_LIVE) {
		/* Stopped, or halting (a drop callback that receives: nothing
		 * will ever come).  Before a cancellation: the more specific. */
		rc = -ESHUTDOWN;
	} else if (cbcmn__task_cancelled(self)) {
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
		struct cbcmn__mb_wait w;
		wait_init(&w, self);
		w.dst = m;
		w.qw.queued = true;
		a->receiver = &w;
		w.home = cbcmn__actor_home(a);
		CBCMN__AGAUGE(a->rt, w.home, receiving, 1);
		rc = mb_block(self, a, &w, deadline);
		if (rc == CBCMN_ECANCELED)
			rc = stopped_or(a, rc);
		else if (rc == 0 && m->type < CBCMN_ACTOR_SYS) {
			depth_sample(1); /* handed to us: it was alone */
			/* After the wake, on the executor we resumed on: after
			 * the send, which was timed under the lock. */
			CBCMN__TRACE(self->exec, CBCMN_TRACE_ACTOR_RECEIVE, cbcmn__trace_now(),
				     m->type, a->ref, (uint32_t)w.seq);
		}
		probe_receive(a, m, rc);
		return rc;
	}
	cbcmn__mutex_unlock(&a->lock);
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
	int rc = a->stopping ? -ESRCH : put_msg(a, m, &wl) ? 0 : -EAGAIN;
	if (rc == 0)
		trace_send(exec_here(rt), a, m->from);
	cbcmn__mutex_unlock(&a->lock);
	cbcmn__wakes_run(&wl, e);
	return rc;
}

bool cbcmn__mb_take_down(struct cbcmn__actor *a, cbcmn_actor_msg *m)
{
	cbcmn__mutex_lock(&a->lock);
	struct cbcmn__monitor *down = a->sys_head;
	if (down && !(a->sys_head = down->next))
		a->sys_tail = NULL;
	cbcmn__mutex_unlock(&a->lock);
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
