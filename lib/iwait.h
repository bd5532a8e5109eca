/* iwait.h: private to libcbcmn: blocking waits that cancellation interrupts.
 *
 * A task blocked on a channel (or, later, on I/O) must wake up when its
 * nursery, or one enclosing it, is cancelled.  Each executor keeps a
 * registry of such waits; cancelling a nursery scans the registries and
 * claims every wait whose task is now cancelled.  A wait is claimed exactly
 * once, by its event (the object it waits on) or by cancellation, with one
 * CAS on its state; the loser does nothing.
 *
 * How a blocking operation uses it (the object's own lock is "objlock"):
 *
 *	lock(objlock);
 *	...nothing available...
 *	cbcmn__iwait_init(&iw, self);        // state WAITING, task PARKING
 *	enqueue &iw on the object;
 *	unlock(objlock);
 *	if (cbcmn__iwait_block(&iw) == IW_CANCELLED) {
 *		lock(objlock); dequeue &iw if still queued; unlock(objlock);
 *		return CBCMN_ECANCELED;
 *	}
 *	... the event's side filled in what we waited for ...
 *
 * and the event's side, under objlock, for each queued wait:
 *
 *	if (cbcmn__iwait_claim(iw)) { hand over; dequeue; cbcmn__iwait_wake(iw, e); }
 *	else { dequeue and skip: cancellation owns it }
 *
 * Lock order: the registry lock is never held with an object's lock.
 *
 * Waits for I/O are the executor's own: the request (or the multishot
 * stream) is listed on the executor it was issued on, the task cannot leave
 * it meanwhile, and only that executor's thread ends the wait.  Such a wait
 * is marked local and stays out of the registry: cancellation flags every
 * executor (io_cancel) and each finds its cancelled I/O waits in its own
 * lists (cbcmn__io_cancel_pending()).  That saves the registry lock twice
 * per I/O call, which is most of the runtime's own cost per request on a
 * busy socket.
 */
#ifndef CBCMN_IWAIT_H
#define CBCMN_IWAIT_H

#include "runtime.h"

enum { CBCMN__IW_WAITING = 0, CBCMN__IW_WOKEN, CBCMN__IW_CANCELLED, CBCMN__IW_TIMEDOUT };

struct cbcmn__iwait {
	struct cbcmn__waiter w;
	_Atomic uint32_t state;
	struct cbcmn__iwait *prev, *next; /* registry links */
	struct cbcmn__iwait_reg *reg;     /* where it is registered */
	void *user;                       /* for the object's queue */
	struct cbcmn__iwait *qnext;       /* ... likewise */
	/* Set when the waker must not be woken by cancellation itself (I/O in
	 * flight): cancellation claims the wait and calls this instead (the
	 * canceller under the registry lock, so the wait is still there; or
	 * the task itself, when it finds itself cancelled as it registers);
	 * the event's side then wakes the task, which sees
	 * CBCMN__IW_CANCELLED.  It must take no lock.  A local wait's is
	 * called by the task itself only (its executor claims local waits
	 * with cbcmn__iwait_local_cancel() and calls nothing), on its
	 * executor's thread: it may use that executor's ring (io.c turns the
	 * request's queued SQE into a NOP there). */
	void (*on_cancel)(struct cbcmn__iwait *iw);
	/* An I/O wait: listed by its executor, not in the registry (above).
	 * Set after cbcmn__iwait_init(), with on_cancel. */
	bool local;
	/* Set when a timer (timer.h) claims the wait: called instead of the
	 * wake, on the timer's executor, which must be the wait's (the epoll
	 * backend's I/O waits: it unlinks the wait, then wakes it). */
	void (*on_timeout)(struct cbcmn__iwait *iw);
	/* What the task waits for (CBCMN__G_*, diag.h), for the snapshot;
	 * set after cbcmn__iwait_init().  A local wait counts as I/O. */
	uint8_t kind;
};

void cbcmn__iwait_reg_init(struct cbcmn__iwait_reg *r);
void cbcmn__iwait_reg_fini(struct cbcmn__iwait_reg *r);

/* Prepare a wait for task self (which becomes PARKING).  self may be NULL
 * for a thread outside the runtime (then nothing interrupts the wait). */
void cbcmn__iwait_init(struct cbcmn__iwait *iw, struct cbcmn_task *self);

/* Block until claimed.  Returns CBCMN__IW_WOKEN, CBCMN__IW_CANCELLED or
 * CBCMN__IW_TIMEDOUT (a timer, timer.h). */
uint32_t cbcmn__iwait_block(struct cbcmn__iwait *iw);

/* Event side: claim the wait.  False if cancellation claimed it first. */
static inline bool cbcmn__iwait_claim(struct cbcmn__iwait *iw)
{
	uint32_t s = CBCMN__IW_WAITING;
	/* acq_rel: what the claimer hands over is released to the waiter,
	 * which reads the state with acquire after it wakes. */
	return atomic_compare_exchange_strong_explicit(&iw->state, &s, CBCMN__IW_WOKEN,
						       memory_order_acq_rel, memory_order_acquire);
}

/* Claim with another outcome than WOKEN (a timer: CBCMN__IW_TIMEDOUT). */
static inline bool cbcmn__iwait_claim_as(struct cbcmn__iwait *iw, uint32_t how)
{
	uint32_t s = CBCMN__IW_WAITING;
	return atomic_compare_exchange_strong_explicit(&iw->state, &s, how, memory_order_acq_rel,
						       memory_order_acquire);
}

/* Event side: wake a wait it has claimed.  waker: the calling executor, or
 * NULL outside the runtime. */
static inline void cbcmn__iwait_wake(struct cbcmn__iwait *iw, struct cbcmn__exec *waker)
{
	cbcmn__waiter_wake(&iw->w, waker);
}

/* An on_cancel for waits that must not end before their event (it still
 * claims them: the waiter sees CBCMN__IW_CANCELLED when the event wakes it). */
void cbcmn__iwait_ignore_cancel(struct cbcmn__iwait *iw);

/* Executor side (io.c): claim a local wait whose task is cancelled.  True
 * if the wait is cancelled, now or before. */
bool cbcmn__iwait_local_cancel(struct cbcmn__iwait *iw);

/* Called after a nursery of rt was cancelled: interrupt every registered
 * wait whose task is now cancelled, and have every executor look at its
 * local ones.  O(waits registered). */
void cbcmn__iwait_cancel_scan(struct cbcmn_runtime *rt);

#endif
