/* waitq.h: private to libcbcmn: FIFO queues of blocked operations and their wake lists.
 *
 * What channels (chan.c) and actor mailboxes (actor_mbox.c) share: an
 * operation that cannot complete queues a cbcmn__qwait (first member of its
 * own wait record, on the blocked caller's stack) on its object, under the
 * object's lock; whoever makes it possible claims it (iwait.h: one CAS, so
 * it is claimed once, by the event, a cancellation or a timer), hands over
 * under the lock, and adds it to a wake list that is run after the unlock.
 * The lock stays short and is never held with an iwait registry lock or the
 * inject lock (docs/LOCKING.md).
 */
#ifndef CBCMN_WAITQ_H
#define CBCMN_WAITQ_H

#include "iwait.h"

struct cbcmn__qwait {
	struct cbcmn__iwait iw;
	struct cbcmn__qwait *prev, *next; /* the object's queue, then the wake list */
	int result;                       /* set by the claimer */
	bool queued;
};

struct cbcmn__waitq {
	struct cbcmn__qwait *head, *tail;
};

/* Claimed waits, woken once the object's lock is dropped. */
struct cbcmn__hnd;
struct cbcmn__wakes {
	struct cbcmn__qwait *head, *tail;
	struct cbcmn__hnd *hkick; /* handler actors to run (actor_handler.c) */
};
/* actor_handler.c: hand each noted handler actor to its host. */
void cbcmn__hnd_kick(struct cbcmn__hnd *h, struct cbcmn__exec *e);

static inline void cbcmn__waitq_push(struct cbcmn__waitq *q, struct cbcmn__qwait *w)
{
	w->next = NULL;
	w->prev = q->tail;
	if (q->tail)
		q->tail->next = w;
	else
		q->head = w;
	q->tail = w;
	w->queued = true;
}

static inline void cbcmn__waitq_del(struct cbcmn__waitq *q, struct cbcmn__qwait *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		q->head = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		q->tail = w->prev;
	w->queued = false;
}

/* The first waiter of q this side could claim, dequeued; or NULL.  Waiters
 * a cancellation or a timer claimed first are dequeued and skipped: their
 * tasks find themselves dequeued when they resume. */
static inline struct cbcmn__qwait *cbcmn__waitq_claim(struct cbcmn__waitq *q)
{
	struct cbcmn__qwait *w;
	while ((w = q->head)) {
		cbcmn__waitq_del(q, w);
		if (cbcmn__iwait_claim(&w->iw))
			return w;
	}
	return NULL;
}

static inline void cbcmn__wakes_add(struct cbcmn__wakes *wl, struct cbcmn__qwait *w, int result)
{
	w->result = result;
	w->next = NULL;
	if (wl->tail)
		wl->tail->next = w;
	else
		wl->head = w;
	wl->tail = w;
}

/* After the unlock.  The hand-over (message, result) was written after the
 * claim, so it is the wake that publishes it: waiter_wake()'s release (the
 * task state CAS and the run-queue push, or the futex word) pairs with the
 * acquire by which the waiter resumes.  e: the calling task's executor, or
 * NULL; used only if it is this thread's (cbcmn__waker_here(), where each
 * wake is queued). */
static inline void cbcmn__wakes_run(struct cbcmn__wakes *wl, struct cbcmn__exec *e)
{
	struct cbcmn__qwait *w = wl->head;
	while (w) {
		struct cbcmn__qwait *next = w->next; /* w is gone once woken */
		cbcmn__iwait_wake(&w->iw, e);
		w = next;
	}
	if (__builtin_expect(wl->hkick != NULL, 0))
		cbcmn__hnd_kick(wl->hkick, e);
}

/* cbcmn__wakes_run() for a channel's wakes from a task on e: a woken task
 * whose home searches for work runs here instead (sched.c,
 * home_searching()).  e is owner-only state: the flag covers exactly
 * these wakes. */
static inline void cbcmn__wakes_run_here(struct cbcmn__wakes *wl, struct cbcmn__exec *e)
{
	/* A second send (or a channel op) by the task that woke an actor
	 * into our slot: it runs on, the actor is an idle executor's to
	 * take (sched.c, owe_notify()).  Before this wake, which may owe
	 * again.  Both flags are their own thread's: a task's cx used off
	 * its fiber (a cbcmn_blocking() function) names an executor that is
	 * not this thread's. */
	e = cbcmn__waker_here(e);
	cbcmn__notify_owed_check(e);
	/* A handler actor's host is kicked, not a waiter (hkick): returning
	 * at an empty list lost its wake when a handler actor followed its
	 * messages (actor_mbox.c; test_actor_direct's host_is_kicked). */
	if (!wl->head && !wl->hkick)
		return;
	if (!e) {
		cbcmn__wakes_run(wl, NULL);
		return;
	}
	e->wake_here = true;
	cbcmn__wakes_run(wl, e);
	e->wake_here = false;
}

#endif
