/* chan.c: bounded MPMC channels between tasks, with two-phase reservations.
 *
 * One lock per channel (CBCMN__LOCK_CHAN, lock.h's inline flock) guards its
 * ring of messages, its two wait queues and its reservation records.  Waiters are handed what
 * they wait for under that lock, before they run again: a receiver woken by
 * a sender finds the message already in its buffer, a sender woken by a
 * receiver finds its message already in the ring, a reserver finds its slot
 * already counted.  So a woken task never races anyone for the item, and is
 * woken exactly once.  Wake-ups are collected under the lock and issued
 * after it is dropped: the lock stays short, and is never held together
 * with the inject lock or an iwait registry lock (docs/LOCKING.md).
 *
 * Invariants (under the lock), which make the hand-off decisions local:
 *   - count + reserved <= cap;
 *   - a receiver waits only while count == 0: a new message goes to the
 *     first waiting receiver, if any, else to the ring;
 *   - a sender or reserver waits only while count + reserved == cap: every
 *     slot that frees up goes to the first of them at once (slot_freed()).
 * Waiters that cancellation claimed first stay queued until their task (or
 * the next event that meets them) dequeues them; they are skipped.
 *
 * Blocking goes through iwait (iwait.h), so cancelling a nursery interrupts
 * it.  Cost: one uncontended lock/unlock per operation, plus one wake when
 * somebody was waiting; a try-variant that fails on an empty or full ring
 * takes no lock (try_would_wait()).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "iwait.h"
#include "obligation.h"
#include "timer.h"
#include "waitq.h"
#include "runtime.h"

enum wait_kind { W_RECV, W_SEND, W_RESERVE };

/* A blocked operation, on the blocked task's stack (or thread's).  Touched
 * by others only under the channel lock, and only until it is claimed and
 * dequeued; after that only its waker reads iw, once, to wake it. */
struct chan_wait {
	struct cbcmn__qwait qw;        /* first: waitq.h's; result 0 or -EPIPE */
	const void *src;               /* W_SEND: the message */
	void *dst;                     /* W_RECV: where the message goes */
	struct chan_rec *rec;          /* W_RESERVE: the record it will hold */
	uint8_t kind;
};

/* Field by field, not `= {...}`: zeroing the whole record (its iwait is
 * some 150 bytes, which cbcmn__iwait_init() and cbcmn__waitq_push() set
 * anyway) took a `rep stos` that was 6 % of a blocking ping-pong's time.
 * What the other side and the cancelled path read is set here or there. */
static inline void chan_wait_init(struct chan_wait *w, enum wait_kind kind, const void *src,
				  void *dst, struct chan_rec *rec)
{
	w->kind = (uint8_t)kind;
	w->src = src;
	w->dst = dst;
	w->rec = rec;
	w->qw.queued = false;
}

/* A reservation record.  Records belong to their channel (allocated on
 * demand, recycled, freed with it), not to the permit, which only names
 * one: a task that leaks a permit in a frame that has since returned, or
 * that overflowed its stack, leaves the record intact for settling.  A
 * held one is an obligation of its owner (obligation.h): tracked, counted
 * and, if leaked, aborted there like any other. */
struct chan_rec {
	struct cbcmn__oblig ob;             /* owner: NULL for a thread outside */
	struct cbcmn_chan *chan;            /* fixed for the record's life */
	struct chan_rec *free_next;         /* channel free list */
	uint64_t gen;                       /* bumped at each resolution: stale permits */
	bool held;
};

struct cbcmn_chan {
	struct cbcmn__flock lock; /* CBCMN__LOCK_CHAN: everything below */
	struct cbcmn_runtime *rt; /* immutable */
	/* rt->fork_gen: destroy reads nothing of rt, which may be gone (a
	 * channel does not keep its runtime alive; cleaning up in the order
	 * things were made destroys the runtime first). */
	uint32_t fork_gen;
	unsigned char *buf;       /* cap * esize bytes, a ring */
	size_t cap, esize;        /* immutable */
	size_t head, count;       /* oldest message, messages in the ring */
	size_t reserved;          /* slots held by permits */
	/* Blocked operations that may still touch c: queued, or claimed by
	 * a cancellation or a timer and not yet back to take their wait off
	 * the queue (chan_block()).  The event that meets such a claimed
	 * wait dequeues it first, so the queues alone do not tell destroy
	 * that a task is still inside an operation on c. */
	size_t blocked;
	bool closed;              /* also read without the lock: atomic stores */
	size_t count_seen;        /* count at the last unlock (chan_unlock()) */
	struct cbcmn__waitq recvq;  /* receivers */
	struct cbcmn__waitq spaceq; /* senders and reservers, in arrival order */
	struct chan_rec *free_recs;
	uint64_t payer;           /* id of the task charged for buf (0: none) */
	/* rt->serial: payer is a task of that runtime.  A runtime made
	 * after rt is gone may sit at rt's address, with a task of the
	 * same id (ids count from 1 in each runtime). */
	uint64_t payer_rt;
	uint64_t charged;         /* bytes it was charged */
};

/* Every unlock publishes count for try_would_wait(), which reads it without
 * the lock: what it reads is then a count some operation left, never one
 * from inside an operation.  count itself passes through values nobody
 * holding the lock ever sees: a receive that takes the only message of a
 * full ring and refills it from a waiting sender goes through empty, and a
 * try_recv that read that said -EAGAIN with a message always there. */
static inline void chan_unlock(struct cbcmn_chan *c)
{
	__atomic_store_n(&c->count_seen, c->count, __ATOMIC_RELAXED);
	cbcmn__flock_unlock(&c->lock);
}

/* The first waiter of q this side could claim (waitq.h), or NULL.  A
 * waiter claimed here is done with c (it returns what it was handed):
 * c->blocked no longer counts it. */
static struct chan_wait *q_claim(struct cbcmn_chan *c, struct cbcmn__waitq *q)
{
	struct chan_wait *w = (struct chan_wait *)cbcmn__waitq_claim(q);
	if (w)
		c->blocked--;
	return w;
}

/* ---- the thread accounting ------------------------------------------------ */

/* The thread accounting (rt->thread_chan), here and in chan_block() only.
 * A thread outside (cx NULL) blocked on c, or holding a reservation on c:
 * what ends either (the send or close that wakes it, the commit or abort)
 * touches c's runtime, so cbcmn_runtime_destroy() is -EBUSY until it ends.
 * Two things count, each in one pair:
 *   - a thread's blocked operation, from before it queues to after its
 *     wait ends (chan_block());
 *   - a thread's held reservation, from its grant to its release
 *     (rec_grant(), rec_release()).  A waiter's grant is made by whoever
 *     grants it, under the lock, so before the waiter's own count ends:
 *     the count never passes through zero between the two.
 * c->blocked is c's own (destroy's -EBUSY), and counts tasks too.  out:
 * the last touch of rt, which may then go. */
static inline void thread_in(struct cbcmn_runtime *rt)
{
	atomic_fetch_add_explicit(&rt->thread_chan, 1, memory_order_relaxed);
}

static inline void thread_out(struct cbcmn_runtime *rt)
{
	atomic_fetch_sub_explicit(&rt->thread_chan, 1, memory_order_release);
}

static inline bool rec_thread(const struct chan_rec *r)
{
	return !atomic_load_explicit(&r->ob.owner, memory_order_relaxed);
}

/* r holds a slot from now on (a reservation granted, at once or to its
 * waiter). */
static void rec_grant(struct cbcmn_chan *c, struct chan_rec *r)
{
	c->reserved++;
	r->held = true;
	if (rec_thread(r))
		thread_in(c->rt);
}

/* ---- the ring and the slots (under the lock) ----------------------------- */

static void ring_put(struct cbcmn_chan *c, const void *elem)
{
	size_t i = c->head + c->count;
	if (i >= c->cap)
		i -= c->cap;
	memcpy(c->buf + i * c->esize, elem, c->esize);
	c->count++;
}

static void ring_take(struct cbcmn_chan *c, void *elem)
{
	memcpy(elem, c->buf + c->head * c->esize, c->esize);
	if (++c->head == c->cap)
		c->head = 0;
	c->count--;
}

/* A new message: to the first waiting receiver (there can only be one
 * while the ring is empty), else into a free slot.  False: no room. */
static bool put_msg(struct cbcmn_chan *c, const void *elem, struct cbcmn__wakes *wl)
{
	if (c->count == 0) {
		struct chan_wait *r = q_claim(c, &c->recvq);
		if (r) {
			memcpy(r->dst, elem, c->esize);
			cbcmn__wakes_add(wl, &r->qw, 0);
			return true;
		}
	}
	if (c->count + c->reserved < c->cap) {
		ring_put(c, elem);
		return true;
	}
	return false;
}

/* Slots may be free: hand them to waiting senders and reservers, in order. */
static void slot_freed(struct cbcmn_chan *c, struct cbcmn__wakes *wl)
{
	while (c->count + c->reserved < c->cap) {
		struct chan_wait *w = q_claim(c, &c->spaceq);
		if (!w)
			return;
		if (w->kind == W_SEND) {
			put_msg(c, w->src, wl); /* there is room: cannot fail */
		} else {
			rec_grant(c, w->rec);
		}
		cbcmn__wakes_add(wl, &w->qw, 0);
	}
}

/* ---- reservation records (under the lock) -------------------------------- */

static struct chan_rec *rec_get(struct cbcmn_chan *c, struct cbcmn_task *owner)
{
	struct chan_rec *r = c->free_recs;
	if (r) {
		c->free_recs = r->free_next;
	} else {
		/* At most cap held plus one per blocked reserver, then they
		 * recycle: malloc under the lock only while the pool grows. */
		if (!(r = cbcmn__calloc(1, sizeof(*r))))
			return NULL;
		r->chan = c;
	}
	atomic_store_explicit(&r->ob.owner, owner, memory_order_relaxed);
	r->held = false;
	return r;
}

static void rec_put(struct cbcmn_chan *c, struct chan_rec *r)
{
	atomic_store_explicit(&r->ob.owner, NULL, memory_order_relaxed);
	r->free_next = c->free_recs;
	c->free_recs = r;
}

/* End a held reservation: the slot is no longer reserved (the caller fills
 * it or frees it).  The owner list is touched here only by its owner: commit
 * and abort check it, and settling runs as the ending task.  e: the calling
 * thread's executor (NULL outside). */
static void rec_release(struct cbcmn_chan *c, struct chan_rec *r, struct cbcmn__exec *e)
{
	bool thread = rec_thread(r);
	cbcmn__oblig_untrack(c->rt, &r->ob, e);
	if (thread)
		thread_out(c->rt);
	r->held = false;
	r->gen++;
	c->reserved--;
	rec_put(c, r);
}

static void rec_leak(struct cbcmn__oblig *ob);

/* Owner side, after the grant: track it and fill the permit. */
static void rec_hold(struct cbcmn_task *self, struct chan_rec *r, cbcmn_chan_permit *p)
{
	r->ob.leak = rec_leak;
	r->ob.what = "reservation on channel";
	r->ob.obj = r->chan;
	cbcmn__oblig_track(r->chan->rt, self, &r->ob, cbcmn__waker_of(self));
	/* Read without the lock: gen only changes when the record is
	 * resolved, which only we (its owner) can do now. */
	p->_rec = r;
	p->_gen = r->gen;
}

/* ---- blocking ------------------------------------------------------------ */

/* Called with c->lock held, which it drops: queue w on q and block until an
 * event or cancellation claims it.  Returns the result the event side set,
 * or CBCMN_ECANCELED after taking back what w left in the channel. */
static int chan_block(struct cbcmn_task *self, struct cbcmn_chan *c, struct chan_wait *w,
		      struct cbcmn__waitq *q, uint64_t deadline)
{
	cbcmn__iwait_init(&w->qw.iw, self);
	w->qw.iw.kind = CBCMN__G_CHAN;
	w->qw.result = 0;
	/* A timeout is a timer on our own executor that claims the wait as
	 * TIMEDOUT (timer.h); it touches nothing of the channel. */
	struct cbcmn__timer *tm = NULL;
	if (deadline != UINT64_MAX && !(tm = cbcmn__timer_arm(self->exec, deadline, &w->qw.iw))) {
		atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
		chan_unlock(c);
		return -ENOMEM;
	}
	cbcmn__waitq_push(q, &w->qw);
	c->blocked++;
	struct cbcmn_runtime *rt = c->rt; /* c may be gone once w is claimed */
	if (!self)
		thread_in(rt);
	chan_unlock(c);
	uint32_t how = cbcmn__iwait_block(&w->qw.iw);
	if (tm)
		cbcmn__timer_disarm(tm);
	if (!self)
		thread_out(rt); /* a granted reservation counts on (rec_grant()) */
	if (how == CBCMN__IW_WOKEN)
		return w->qw.result;
	/* The registry lock is dropped by now: the two never nest. */
	cbcmn__flock_lock(&c->lock);
	if (w->qw.queued)
		cbcmn__waitq_del(q, &w->qw);
	if (w->rec)
		rec_put(c, w->rec); /* never granted: claimed by cancellation or time */
	/* The last touch of c but the unlock's futex wake, which names the
	 * lock word's address only (as a pthread mutex's may): destroy may
	 * free c once the unlock's exchange is done. */
	c->blocked--;
	chan_unlock(c);
	return how == CBCMN__IW_TIMEDOUT ? -ETIMEDOUT : CBCMN_ECANCELED;
}

/* Argument checks common to the operations.  block: the call may wait. */
static int op_check(struct cbcmn_task *self, const struct cbcmn_chan *c, const void *ptr,
		    bool block)
{
	if (!c || !ptr)
		return -EINVAL;
	if (cbcmn__forked(c->rt))
		return CBCMN_EFORKED; /* its lock may be held by a parent's thread */
	if (self && self->rt != c->rt)
		return CBCMN_EWRONGRT;
	if (!block)
		return 0;
	if (!self)
		return cbcmn__on_executor(c->rt) ? -EDEADLK : 0;
	/* A task's context used from another thread (a cbcmn_blocking()
	 * function's): waiting would suspend that thread as if it were the
	 * task's fiber (a crash).  Its try-variants work (their costs only
	 * count, budget.c). */
	if (!cbcmn__is_running(self))
		return -EPERM;
	/* A blocking call is where a cancelled task notices (cbcmn.h). */
	return cbcmn__task_cancelled(self) ? CBCMN_ECANCELED : 0;
}

/* ---- operations ------------------------------------------------------------ */

/* Would a try-variant find nothing to do: a receive an empty ring, a send a
 * full one, on an open channel?  Read without the lock, so a task polling
 * from another executor leaves the lock's line shared while it waits: the
 * other side then takes it with one transfer, instead of winning it back
 * from a poll at every hop (with the lock taken at each poll, that was
 * most of `cbcmn-bench chan`'s rtt_ns).  Exact, not a guess: count_seen
 * is a count the lock's last holder left (chan_unlock()).  With the ring
 * empty then, a receive under the lock fails too: it only ever takes from
 * the ring (a waiting sender's message enters it in the operation that
 * frees its slot; with reservations holding every slot a sender may wait
 * beside an empty ring, and the locked receive fails as well).  With it
 * full, no receiver waits (they wait only on an empty ring) and no slot is
 * free.  It is read before closed (acquire keeps the second load after the
 * first), which only ever turns true: an open channel read second was open
 * when count_seen was read, the point the answer holds at.  -EAGAIN hands over no
 * message, so nothing else needs ordering (a plain load on x86). */
static inline bool try_would_wait(const struct cbcmn_chan *c, bool send)
{
	size_t n = __atomic_load_n(&c->count_seen, __ATOMIC_ACQUIRE);
	if (send ? n < c->cap : n != 0)
		return false;
	return !__atomic_load_n(&c->closed, __ATOMIC_RELAXED);
}

static int chan_send(struct cbcmn_task *self, struct cbcmn_chan *c, const void *elem,
		     bool block, uint64_t deadline)
{
	struct cbcmn__wakes wl = {0};
	int rc = 0;
	if (!block && try_would_wait(c, true))
		return -EAGAIN;
	cbcmn__flock_lock(&c->lock);
	if (c->closed) {
		rc = -EPIPE;
	} else if (!put_msg(c, elem, &wl)) {
		if (block) {
			struct chan_wait w;
			chan_wait_init(&w, W_SEND, elem, NULL, NULL);
			return chan_block(self, c, &w, &c->spaceq, deadline);
		}
		rc = -EAGAIN;
	}
	chan_unlock(c);
	cbcmn__wakes_run_here(&wl, cbcmn__waker_of(self));
	return rc;
}

static int chan_recv(struct cbcmn_task *self, struct cbcmn_chan *c, void *elem, bool block,
		     uint64_t deadline)
{
	struct cbcmn__wakes wl = {0};
	int rc = 0;
	if (!block && try_would_wait(c, false))
		return -EAGAIN;
	cbcmn__flock_lock(&c->lock);
	if (c->count) {
		ring_take(c, elem);
		slot_freed(c, &wl);
	} else if (c->closed) {
		rc = -EPIPE;
	} else if (block) {
		struct chan_wait w;
		chan_wait_init(&w, W_RECV, NULL, elem, NULL);
		return chan_block(self, c, &w, &c->recvq, deadline);
	} else {
		rc = -EAGAIN;
	}
	chan_unlock(c);
	cbcmn__wakes_run_here(&wl, cbcmn__waker_of(self));
	return rc;
}

static int chan_reserve(struct cbcmn_task *self, struct cbcmn_chan *c, cbcmn_chan_permit *p,
			bool block)
{
	struct chan_rec *r;
	int rc = 0;
	cbcmn__flock_lock(&c->lock);
	if (c->closed) {
		rc = -EPIPE;
	} else if (!(r = rec_get(c, self))) {
		rc = -ENOMEM;
	} else if (c->count + c->reserved < c->cap) {
		rec_grant(c, r);
	} else if (block) {
		struct chan_wait w;
		chan_wait_init(&w, W_RESERVE, NULL, NULL, r);
		rc = chan_block(self, c, &w, &c->spaceq, UINT64_MAX);
		if (rc == 0)
			rec_hold(self, r, p);
		/* -EPIPE: close put r back; CBCMN_ECANCELED: we did. */
		return rc;
	} else {
		rec_put(c, r);
		rc = -EAGAIN;
	}
	chan_unlock(c);
	if (rc == 0)
		rec_hold(self, r, p);
	return rc;
}

/* The record *p holds, or NULL: one relaxed load.  Two threads may
 * resolve one shared permit at once: each sees the record or NULL (a
 * second read could see the winner's NULL after a first saw the record). */
static struct chan_rec *permit_rec(const cbcmn_chan_permit *p)
{
	return p ? __atomic_load_n(&p->_rec, __ATOMIC_RELAXED) : NULL;
}

/* Commit (elem) or abort (NULL) the reservation p names, whose record
 * permit_rec() read as r. */
static int chan_resolve(struct cbcmn_task *self, cbcmn_chan_permit *p, struct chan_rec *r,
			const void *elem)
{
	struct cbcmn_chan *c = r->chan; /* fixed while the channel lives */
	struct cbcmn__wakes wl = {0};
	int rc = 0;
	if (cbcmn__forked(c->rt))
		return CBCMN_EFORKED;
	cbcmn__flock_lock(&c->lock);
	if (!r->held || r->gen != p->_gen) {
		chan_unlock(c);
		return -EINVAL;
	}
	if (atomic_load_explicit(&r->ob.owner, memory_order_relaxed) != self) {
		chan_unlock(c);
		return -EPERM;
	}
	rec_release(c, r, cbcmn__waker_of(self));
	if (elem) {
		if (c->closed)
			rc = -EPIPE;
		else
			put_msg(c, elem, &wl); /* the slot we just released */
	}
	slot_freed(c, &wl);
	chan_unlock(c);
	__atomic_store_n(&p->_rec, NULL, __ATOMIC_RELAXED); /* permit_rec() */
	cbcmn__wakes_run_here(&wl, cbcmn__waker_of(self));
	return rc;
}

/* obligation.c, when the owner ends holding r: abort the reservation so
 * nobody waits for its slot forever (the leak is reported there). */
static void rec_leak(struct cbcmn__oblig *ob)
{
	struct chan_rec *r = (struct chan_rec *)ob;
	struct cbcmn_chan *c = r->chan;
	struct cbcmn__exec *e = atomic_load_explicit(&ob->owner, memory_order_relaxed)->exec;
	struct cbcmn__wakes wl = {0};
	cbcmn__flock_lock(&c->lock);
	rec_release(c, r, e);
	slot_freed(c, &wl);
	chan_unlock(c);
	cbcmn__wakes_run(&wl, e);
}

/* ---- public calls ------------------------------------------------------- */

/* The task of rt running on this thread's fiber, if budgets apply to it:
 * NULL on a thread outside the runtime (which has no budget). */
static struct cbcmn_task *running_task(struct cbcmn_runtime *rt)
{
	if (!cbcmn__on_executor(rt) || (rt->cfg.flags & CBCMN_CONFIG_NO_BUDGETS))
		return NULL;
	return cbcmn__tls_exec->current;
}

int cbcmn_chan_create(cbcmn_runtime *rt, size_t capacity, size_t elem_size, cbcmn_chan **out)
{
	size_t bytes;
	if (!rt || !out || capacity == 0 || elem_size == 0 ||
	    __builtin_mul_overflow(capacity, elem_size, &bytes) || bytes > PTRDIFF_MAX)
		return -EINVAL;
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED;
	/* The buffer is the creating task's memory (docs/BUDGETS.md, "What
	 * memory counts"), paid before anything is allocated: a task that
	 * waits for budget, or is ended there, leaves nothing behind. */
	struct cbcmn_task *self = running_task(rt);
	uint64_t charged = self ? cbcmn__charge_memory(self, bytes) : 0;
	struct cbcmn_chan *c = cbcmn__calloc(1, sizeof(*c));
	if (!c || !(c->buf = cbcmn__malloc(bytes))) {
		free(c);
		cbcmn__refund_memory(self, charged);
		return -ENOMEM;
	}
	c->payer = charged ? self->id : 0;
	c->payer_rt = rt->serial;
	c->charged = charged;
	cbcmn__flock_init(&c->lock, "chan", CBCMN__LOCK_CHAN);
	c->rt = rt;
	c->fork_gen = rt->fork_gen;
	c->cap = capacity;
	c->esize = elem_size;
	*out = c;
	return 0;
}

int cbcmn_chan_destroy(cbcmn_chan *c)
{
	if (!c)
		return -EINVAL;
	if (cbcmn__forked_since(c->fork_gen))
		return CBCMN_EFORKED;
	cbcmn__stack_check_current();
	cbcmn__flock_lock(&c->lock);
	bool busy = c->blocked || c->reserved;
	chan_unlock(c);
	if (busy)
		return -EBUSY;
	while (c->free_recs) {
		struct chan_rec *r = c->free_recs;
		c->free_recs = r->free_next;
		free(r);
	}
	/* Given back to its payer if the payer destroys it; destroyed by
	 * anyone else, it stays spent (the payer may be gone).  A task of
	 * c's runtime only: running_task() dereferences rt only when this
	 * thread is one of its executors, so never once rt is gone; a
	 * runtime at rt's old address is not rt (its serial differs). */
	struct cbcmn_task *self = running_task(c->rt);
	if (self && self->rt->serial == c->payer_rt && c->payer == self->id)
		cbcmn__refund_memory(self, c->charged);
	free(c->buf);
	free(c);
	return 0;
}

/* Each send, receive or reservation costs one op and one channel_op
 * (docs/BUDGETS.md), paid before any channel state changes: a task that has
 * to wait for budget, or is ended there, leaves no trace in the channel.
 * Tasks only: a thread outside the runtime has no budget. */
static inline void charge_op(struct cbcmn_task *self)
{
	if (self)
		cbcmn__charge(self, CBCMN__B_CHANNEL, 1);
}

int cbcmn_chan_send(cbcmn_cx *cx, cbcmn_chan *c, const void *elem)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	int rc = op_check(self, c, elem, true);
	if (rc)
		return rc;
	charge_op(self);
	return chan_send(self, c, elem, true, UINT64_MAX);
}

int cbcmn_chan_try_send(cbcmn_cx *cx, cbcmn_chan *c, const void *elem)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	int rc = op_check(self, c, elem, false);
	if (rc)
		return rc;
	charge_op(self);
	return chan_send(self, c, elem, false, UINT64_MAX);
}

int cbcmn_chan_recv(cbcmn_cx *cx, cbcmn_chan *c, void *elem)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	int rc = op_check(self, c, elem, true);
	if (rc)
		return rc;
	charge_op(self);
	return chan_recv(self, c, elem, true, UINT64_MAX);
}

int cbcmn_chan_try_recv(cbcmn_cx *cx, cbcmn_chan *c, void *elem)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	int rc = op_check(self, c, elem, false);
	if (rc)
		return rc;
	charge_op(self);
	return chan_recv(self, c, elem, false, UINT64_MAX);
}

/* Deadline timeout_ns from now on the runtime's clock (virtual in lab). */
static uint64_t deadline_in(const struct cbcmn_task *self, uint64_t timeout_ns)
{
	uint64_t now = cbcmn__now(self->rt);
	return timeout_ns > UINT64_MAX - 1 - now ? UINT64_MAX - 1 : now + timeout_ns;
}

int cbcmn_chan_send_timeout(cbcmn_cx *cx, cbcmn_chan *c, const void *elem, uint64_t timeout_ns)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!self)
		return -EINVAL; /* a timer needs an executor: tasks only */
	int rc = op_check(self, c, elem, true);
	if (rc)
		return rc;
	charge_op(self);
	return chan_send(self, c, elem, true, deadline_in(self, timeout_ns));
}

int cbcmn_chan_recv_timeout(cbcmn_cx *cx, cbcmn_chan *c, void *elem, uint64_t timeout_ns)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!self)
		return -EINVAL;
	int rc = op_check(self, c, elem, true);
	if (rc)
		return rc;
	charge_op(self);
	return chan_recv(self, c, elem, true, deadline_in(self, timeout_ns));
}

/* A failed reservation leaves *p zeroed: the error path that aborts it
 * gets -EINVAL, not a stale pointer followed (-EAGAIN is routine). */
static void permit_clear(cbcmn_chan_permit *p)
{
	if (p)
		*p = (cbcmn_chan_permit){0};
}

int cbcmn_chan_reserve(cbcmn_cx *cx, cbcmn_chan *c, cbcmn_chan_permit *p)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	permit_clear(p);
	int rc = op_check(self, c, p, true);
	if (rc)
		return rc;
	charge_op(self);
	return chan_reserve(self, c, p, true);
}

int cbcmn_chan_try_reserve(cbcmn_cx *cx, cbcmn_chan *c, cbcmn_chan_permit *p)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	permit_clear(p);
	int rc = op_check(self, c, p, false);
	if (rc)
		return rc;
	charge_op(self);
	return chan_reserve(self, c, p, false);
}

int cbcmn_chan_commit(cbcmn_cx *cx, cbcmn_chan_permit *p, const void *elem)
{
	struct chan_rec *r = permit_rec(p);
	if (!r || !elem)
		return -EINVAL;
	cbcmn__stack_check((struct cbcmn_task *)cx);
	return chan_resolve((struct cbcmn_task *)cx, p, r, elem);
}

int cbcmn_chan_abort(cbcmn_cx *cx, cbcmn_chan_permit *p)
{
	struct chan_rec *r = permit_rec(p);
	if (!r)
		return -EINVAL;
	cbcmn__stack_check((struct cbcmn_task *)cx);
	return chan_resolve((struct cbcmn_task *)cx, p, r, NULL);
}

int cbcmn_chan_close(cbcmn_cx *cx, cbcmn_chan *c)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	struct cbcmn__wakes wl = {0};
	struct chan_wait *w;
	if (!c)
		return -EINVAL;
	if (cbcmn__forked(c->rt))
		return CBCMN_EFORKED;
	if (self && self->rt != c->rt)
		return CBCMN_EWRONGRT;
	cbcmn__stack_check(self);
	cbcmn__flock_lock(&c->lock);
	if (!c->closed) {
		__atomic_store_n(&c->closed, true, __ATOMIC_RELAXED);
		while ((w = q_claim(c, &c->spaceq))) {
			if (w->rec) {
				rec_put(c, w->rec);
				w->rec = NULL;
			}
			cbcmn__wakes_add(&wl, &w->qw, -EPIPE);
		}
		/* Receivers only wait on an empty ring, and no message can
		 * come any more: reservations die with the close. */
		while ((w = q_claim(c, &c->recvq)))
			cbcmn__wakes_add(&wl, &w->qw, -EPIPE);
	}
	chan_unlock(c);
	cbcmn__wakes_run_here(&wl, cbcmn__waker_of(self));
	return 0;
}
