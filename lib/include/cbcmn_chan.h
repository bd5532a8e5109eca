/* cbcmn_chan.h: bounded MPMC channels between tasks, and two-phase reservations.
 *
 * A channel carries fixed-size messages (copied in and out) from any number
 * of senders to any number of receivers, on any executors, in FIFO order.
 * Its capacity is fixed at create time.  A sender that finds it full, or a
 * receiver that finds it empty, is parked (a task: its fiber is suspended
 * and the executor runs other tasks; a thread outside the runtime, which
 * passes a NULL cx: the thread sleeps) until the operation can complete:
 *
 *     cbcmn_chan *c;
 *     cbcmn_chan_create(rt, 64, sizeof(struct msg), &c);
 *     // producer task                      // consumer task
 *     cbcmn_chan_send(cx, c, &m);            while (cbcmn_chan_recv(cx, c, &m) == 0)
 *     ...                                            handle(&m);
 *     cbcmn_chan_close(cx, c);               // -EPIPE: closed and drained
 *
 * Closing.  cbcmn_chan_close() wakes every blocked sender, reserver and
 * receiver with -EPIPE.  Messages already in the channel are still delivered:
 * receivers get them, in order, and -EPIPE only once the channel is closed
 * and empty.  Every later send or reservation fails with -EPIPE.  A message
 * is therefore never lost without its sender being told: a send either
 * returns 0 and the message will be received (or is still in the channel),
 * or returns an error and the message was not taken.
 *
 * Reservations (obligations, two-phase send).  cbcmn_chan_reserve() claims a
 * free slot and hands back a permit; the task then either commits a message
 * into that slot (cbcmn_chan_commit(), which cannot find the channel full) or
 * gives the slot back (cbcmn_chan_abort()).  A reserved slot counts against
 * the capacity.  The permit is an obligation of the task that reserved it:
 * only that task may resolve it, and a task that ends without resolving
 * every permit it holds leaked them.  The runtime then aborts each leaked
 * reservation (so a sender waiting for the slot proceeds), prints one line
 * naming the task on stderr, and the task's result becomes CBCMN_ELEAKED
 * unless it already failed; its nursery's await_all reports that as it does
 * any child failure.  A reservation does not survive close: committing after
 * close returns -EPIPE and the message is not delivered (exactly as for a
 * send that was blocked when the close came).
 *
 * Cancellation.  A task blocked in send, recv or reserve returns
 * CBCMN_ECANCELED as soon as its nursery, or an enclosing one, is cancelled,
 * and leaves no trace in the channel: its message was not taken, nothing was
 * written to its receive buffer, no slot stays reserved.  An operation that
 * had already been completed for it when the cancellation came (a receiver
 * handed it a slot, a sender handed it a message) returns 0: the message
 * is never dropped.  The blocking calls also return CBCMN_ECANCELED at once
 * when called from an already cancelled task; the try-variants, commit and
 * abort keep working there, so a cancelled task can still clean up.
 *
 * Contexts.  cx is the calling task, or NULL from a thread outside the
 * runtime (which then blocks as a thread, uninterruptibly, and must not be
 * one of the runtime's executors: -EDEADLK).  A task's cx used on another
 * thread (a cbcmn_blocking() function's) makes the blocking calls fail with
 * -EPERM, the channel unchanged; the try-variants work there.  Any task or
 * thread may use any channel of the same runtime.
 *
 * Errors.  Negative errno or CBCMN_E*: -EINVAL for NULL or bad arguments,
 * CBCMN_EWRONGRT when cx belongs to another runtime than the channel,
 * CBCMN_EFORKED from every call in a forked child on a channel (or, for
 * create, a runtime) of its parent (cbcmn_runtime_create()).
 */
#ifndef CBCMN_CHAN_H
#define CBCMN_CHAN_H

#include "cbcmn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cbcmn_chan cbcmn_chan;

/* A reservation.  Caller-allocated (on the stack is fine), filled by
 * cbcmn_chan_reserve(), consumed by cbcmn_chan_commit() or
 * cbcmn_chan_abort().  The fields are private.  A permit that is not holding
 * a reservation (zeroed, or already resolved) is rejected with -EINVAL. */
typedef struct cbcmn_chan_permit {
	void *_rec;
	uint64_t _gen;
} cbcmn_chan_permit;

/* Create a channel of rt holding up to capacity messages of elem_size bytes
 * each (both at least 1).  Returns 0 and the channel in *out, -EINVAL, or
 * -ENOMEM.  Any thread.  Called by a task, its buffer (capacity *
 * elem_size bytes) is charged to the task's memory budget, and waits like
 * any cost while that is exhausted; given back if the same task destroys
 * the channel (docs/BUDGETS.md). */
CBCMN_API int cbcmn_chan_create(cbcmn_runtime *rt, size_t capacity, size_t elem_size,
				cbcmn_chan **out);

/* Free c and any messages still in it.  Returns 0, -EINVAL, or -EBUSY (c is
 * left untouched) while a task or thread is blocked on c (a task whose wait
 * was cancelled or timed out included, until its call returns) or a
 * reservation on c is outstanding.  Nobody may use c, or a permit of c, afterwards.
 * May come after cbcmn_runtime_destroy() of c's runtime (a channel does not
 * keep it), the one call on c that may (that destroy is -EBUSY while a
 * thread is blocked on c or holds a reservation on c). */
CBCMN_API int cbcmn_chan_destroy(cbcmn_chan *c);

/* Copy elem_size bytes from elem into c, waiting while c is full.  A
 * receiver already waiting gets the message directly.  Returns 0, -EPIPE
 * (c is closed, or was closed while we waited: the message was not taken),
 * CBCMN_ECANCELED (the calling task is cancelled; the message was not taken),
 * -EINVAL, CBCMN_EWRONGRT, -EDEADLK or -EPERM (Contexts, above). */
CBCMN_API int cbcmn_chan_send(cbcmn_cx *cx, cbcmn_chan *c, const void *elem);

/* Take the oldest message of c into elem (elem_size bytes), waiting while c
 * is empty.  Returns 0, -EPIPE (c is closed and empty: nothing more will
 * come), CBCMN_ECANCELED (elem untouched), -EINVAL, CBCMN_EWRONGRT,
 * -EDEADLK or -EPERM. */
CBCMN_API int cbcmn_chan_recv(cbcmn_cx *cx, cbcmn_chan *c, void *elem);

/* cbcmn_chan_send() / cbcmn_chan_recv() that give up after timeout_ns (of
 * the runtime's clock, virtual in lab mode): -ETIMEDOUT, and nothing was
 * sent or received.  Tasks only (cx NULL: -EINVAL). */
CBCMN_API int cbcmn_chan_send_timeout(cbcmn_cx *cx, cbcmn_chan *c, const void *elem,
				      uint64_t timeout_ns);
CBCMN_API int cbcmn_chan_recv_timeout(cbcmn_cx *cx, cbcmn_chan *c, void *elem,
				      uint64_t timeout_ns);

/* Like cbcmn_chan_send() and cbcmn_chan_recv(), but never wait: -EAGAIN
 * when c is full (send) or empty and open (recv).  They also work in a
 * cancelled task and on an executor thread with a NULL cx. */
CBCMN_API int cbcmn_chan_try_send(cbcmn_cx *cx, cbcmn_chan *c, const void *elem);
CBCMN_API int cbcmn_chan_try_recv(cbcmn_cx *cx, cbcmn_chan *c, void *elem);

/* Close c: every waiting sender, reserver and receiver returns -EPIPE, so
 * do later sends and reservations; receivers drain what c holds first.
 * Idempotent.  Returns 0 or -EINVAL (CBCMN_EWRONGRT for a foreign cx). */
CBCMN_API int cbcmn_chan_close(cbcmn_cx *cx, cbcmn_chan *c);

/* Reserve one slot of c, waiting while c is full, and fill *p.  The calling
 * task (or thread) must later resolve *p exactly once with
 * cbcmn_chan_commit() or cbcmn_chan_abort().  Returns 0, -EPIPE (closed),
 * CBCMN_ECANCELED (nothing reserved), -ENOMEM, -EINVAL, CBCMN_EWRONGRT,
 * -EDEADLK or -EPERM.  cbcmn_chan_try_reserve() never waits: -EAGAIN when full.  On
 * failure *p is zeroed, so that resolving it on an error path is -EINVAL. */
CBCMN_API int cbcmn_chan_reserve(cbcmn_cx *cx, cbcmn_chan *c, cbcmn_chan_permit *p);
CBCMN_API int cbcmn_chan_try_reserve(cbcmn_cx *cx, cbcmn_chan *c, cbcmn_chan_permit *p);

/* Put elem into the slot *p reserved (never waits) and resolve *p.  Returns
 * 0; -EPIPE if c was closed since the reservation (the message was not
 * delivered, *p is resolved all the same); -EINVAL if *p holds no
 * reservation (zeroed, already resolved, or aborted when its task leaked
 * it); -EPERM if cx is not the task (or NULL for the thread) that reserved
 * it. */
CBCMN_API int cbcmn_chan_commit(cbcmn_cx *cx, cbcmn_chan_permit *p, const void *elem);

/* Give the slot *p reserved back and resolve *p.  Returns 0, -EINVAL or
 * -EPERM as cbcmn_chan_commit().
 *
 * Exactly one of two racing resolutions (commit or abort) of a thread's
 * permit succeeds, the other is -EINVAL, whether the racers share one
 * permit object or each hold a copy, as for obligations
 * (cbcmn_obligation_commit()). */
CBCMN_API int cbcmn_chan_abort(cbcmn_cx *cx, cbcmn_chan_permit *p);

#ifdef __cplusplus
}
#endif

#endif /* CBCMN_CHAN_H */
