/* io.c: fiber-blocking I/O calls on the executor's ring (cbcmn_io.h).
 *
 * A call prepares one SQE (two with a linked timeout) on the ring of the
 * executor running the task, registers an interruptible wait, and parks the
 * task; the scheduler submits the SQEs of all the tasks it ran in one
 * io_uring_enter.  The request record lives on the task's stack and is
 * listed on its executor (ring.reqs) until its last CQE: the task is in no
 * queue meanwhile, so it cannot migrate, and it does not run again before
 * every CQE of its request has arrived, so the kernel is done with the
 * buffers and descriptors the call was given when it returns.
 *
 * Cancellation (a nursery cancelled while the request is in flight): the
 * canceller hands the executor the cancelled nursery's cell of I/O waits
 * (iwait.h), and the executor, the ring's single issuer, claims those
 * waits and ends their requests (cbcmn__io_cancel_pending()); a task that finds itself cancelled as it
 * begins to wait does the same for its own (io_on_cancel()).  The rule: a
 * request that took effect returns its result, only one that did not
 * happen returns -ECANCELED.
 *   - Its SQE still queued (the executor submits once every 16 picks): it
 *     is never submitted; the SQE becomes a NOP (req_void()).
 *   - Submitted: IORING_OP_ASYNC_CANCEL.  The kernel either cancels it
 *     (-ECANCELED, or -EINTR for an io-wq worker it interrupts), or it has
 *     completed already (-ENOENT) or completes anyway (-EALREADY): its CQE
 *     then carries what it did, a result or an error, and that is what the
 *     call returns.
 *   - Completed and reaped before the cancellation came: the event claimed
 *     the wait, the call returns its result and the task sees the
 *     cancellation at its next call.
 *   - The executor's thread is ending: it ends its requests itself as
 *     above and reaps them (cbcmn__io_settle()); the thread that takes
 *     over reads what is left in the dead ring's CQ, and a request without
 *     a CQE there did not happen (cbcmn__io_orphan_all()).
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "epoll.h"
#include "iwait.h"
#include "runtime.h"
#include "trace.h"

struct cbcmn__ioreq {
	struct cbcmn__iwait iw;
	struct cbcmn__exec *e;            /* whose ring it is on */
	struct cbcmn__ioreq *prev, *next; /* e->ring.reqs */
	int32_t res;                      /* the operation's CQE */
	uint32_t sq_seq;                  /* its SQE: liburing's sqe_tail - 1 then */
	uint8_t pending;                  /* CQEs still to come */
	bool got_res;                     /* the operation's CQE came */
	bool timed_out;                   /* its linked timeout fired */
	bool cancel_sent;                 /* cancelled in the kernel, or voided */
	bool voided;                      /* never submitted: its SQE became a NOP */
	bool nocancel;                    /* close: never undone */
};

/* include/linux/errno.h: kernel-internal, not in the uapi headers. */
#define KERN_ERESTARTSYS 512
#define KERN_ERESTARTNOINTR 513
#define KERN_ERESTARTNOHAND 514
#define KERN_ERESTART_RESTARTBLOCK 516

/* IO_BYTES: sqe->len is a byte count the kernel may cut short. */
enum { IO_NOCANCEL = 0x1, IO_BYTES = 0x2 };

struct io_op {
	struct cbcmn__ioreq req;
	struct cbcmn_task *t;
	struct io_uring_sqe *sqe;
	struct io_uring_sqe own;          /* the epoll backend's: a description only */
	struct __kernel_timespec ts;
	uint64_t timeout_ns;              /* its linked timeout, 0 for none */
	uint32_t flags;
	int64_t err;
};

/* ---- executor side -------------------------------------------------------- */

static void req_unlink(struct cbcmn__exec *e, struct cbcmn__ioreq *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		e->ring.reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	e->ring.inflight--;
}

void cbcmn__io_cqe(struct cbcmn__exec *e, struct cbcmn__ioreq *r, int32_t res, uint32_t flags,
		   bool timeout)
{
	(void)flags;
	if (timeout) {
		/* -ETIME: it cancelled the request; -EALREADY: it found the
		 * request running in an io-wq worker and interrupted it. */
		if (res == -ETIME || res == -EALREADY)
			r->timed_out = true;
	} else {
		/* A voided request's NOP says 0: it did not happen. */
		r->res = r->voided ? -ECANCELED : res;
		r->got_res = true;
	}
	if (--r->pending)
		return;
	req_unlink(e, r);
	/* WOKEN, unless cancellation claimed it: either way it wakes now. */
	cbcmn__iwait_claim(&r->iw);
	cbcmn__iwait_wake(&r->iw, e);
}

/* Whether r's SQE is still queued in our SQ, not yet handed to the kernel:
 * liburing's [sqe_head, sqe_tail) (with SQPOLL too: the kernel's thread
 * sees an SQE only once a submit has moved the ring's tail past it).  The
 * index alone could match again after 2^32 SQEs; the slot must also still
 * hold r's own SQE, and no other SQE carries r while r is in flight (a slot
 * handed out since is prepared before anything here can run).  The rings
 * have 64-byte SQEs (no IORING_SETUP_SQE128): the index is the slot. */
static bool req_queued(struct cbcmn__exec *e, const struct cbcmn__ioreq *r)
{
	const struct io_uring_sq *sq = &e->ring.u.sq;
	if (r->sq_seq - sq->sqe_head >= sq->sqe_tail - sq->sqe_head)
		return false;
	return sq->sqes[r->sq_seq & sq->ring_mask].user_data == (uint64_t)(uintptr_t)r;
}

/* r, cancelled with its SQE still queued, is never submitted: the SQE
 * becomes a NOP with the same user_data (its CQE ends r, as -ECANCELED),
 * still linked to r's linked timeout if it has one (the kernel then
 * cancels the timeout: its CQE comes too).  Only the ring's owner thread
 * calls this.  False if r was submitted already. */
static bool req_void(struct cbcmn__exec *e, struct cbcmn__ioreq *r)
{
	if (!req_queued(e, r))
		return false;
	const struct io_uring_sq *sq = &e->ring.u.sq;
	struct io_uring_sqe *sqe = &sq->sqes[r->sq_seq & sq->ring_mask];
	uint8_t link = sqe->flags & IOSQE_IO_LINK;
	io_uring_prep_nop(sqe);
	sqe->flags = link;
	io_uring_sqe_set_data(sqe, r);
	r->voided = true;
	return true;
}

/* End r, which no one ended yet: turn its queued SQE into a NOP, or ask the
 * kernel to cancel it.  True if an SQE of ours waits to be submitted.
 * Taking an SQE may submit the queue (a full SQ): later requests are then
 * found submitted. */
static bool req_end(struct cbcmn__exec *e, struct cbcmn__ioreq *r)
{
	r->cancel_sent = true;
	if (req_void(e, r))
		return false; /* nothing to cancel in the kernel */
	struct io_uring_sqe *sqe = cbcmn__ring_sqe(e);
	io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)r, 0);
	io_uring_sqe_set_data64(sqe, CBCMN__UD_IGNORE);
	/* Its CQE is of no interest: -ENOENT or -EALREADY means the request
	 * completes with what it did, and its own CQE says what that is. */
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	return true;
}

/* A nursery was cancelled, or a task found itself cancelled as it began to
 * wait: end e's cancelled I/O waits, those in the cells the cancellations
 * pushed on e (iwait.h): requests (cancelled in the kernel: io_end()),
 * streams' and acceptors' waits (stream.c), the epoll backend's (epoll.c). */
void cbcmn__io_cancel_pending(struct cbcmn__exec *e)
{
	/* acquire: pairs with the exchange in cbcmn__io_cancel_flag(), after
	 * the push of the cells to look at. */
	if (!atomic_exchange_explicit(&e->io_cancel, 0, memory_order_acquire))
		return;
	if (cbcmn__iwait_cells_run(e) && !e->ep)
		cbcmn__ring_submit(e, false, 0);
}

/* A request's end by cancellation (its iwait's local_end), claimed: cancel
 * it in the kernel, once. */
static bool io_end(struct cbcmn__exec *e, struct cbcmn__iwait *iw)
{
	struct cbcmn__ioreq *r = (struct cbcmn__ioreq *)((char *)iw - offsetof(struct cbcmn__ioreq, iw));
	if (r->cancel_sent)
		return false;
	return req_end(e, r);
}

/* How long a dying thread waits for its requests (cbcmn__io_settle()):
 * the kernel's own exit would wait for the io-wq workers as long. */
#define SETTLE_NS (5000ull * 1000000ull)

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* e's thread is ending (a task called pthread_exit: sched.c, from its
 * thread-specific key's destructor, on that thread, still the ring's
 * issuer): end every request on the ring and reap their completions here,
 * so that each call returns what it did.  Left to the thread's exit, a
 * completion the kernel hands to the ring's thread to post (a default
 * ring's DEFER_TASKRUN: an openat or a file write done by an io-wq worker)
 * stays unposted, nobody else may ask for it (io_uring_enter from another
 * thread: -EEXIST), and the takeover, finding no CQE, said -ECANCELED for
 * a file that was created (its descriptor leaked) or written.  Queued SQEs
 * become NOPs; a close runs to its end.  Then everything in the CQ is
 * reaped, streams' and acceptors' CQEs too (a connection accepted as the
 * thread was ending is handed out, not leaked: the takeover drops
 * multishot CQEs).  The woken tasks wait in e's queues for the thread
 * that takes over.  Whatever is still in flight after SETTLE_NS is the
 * takeover's (cbcmn__io_orphan_all()). */
void cbcmn__io_settle(struct cbcmn__exec *e)
{
	if (!e->ring.up)
		return;
	for (struct cbcmn__ioreq *r = e->ring.reqs; r; r = r->next) {
		if (r->nocancel)
			continue;
		/* Claimed as cancelled (unless it was already), so that
		 * one stopped returns CBCMN_ECANCELED, not -EINTR. */
		cbcmn__iwait_claim_as(&r->iw, CBCMN__IW_CANCELLED);
		if (!r->cancel_sent)
			req_end(e, r);
	}
	uint64_t end = mono_ns() + SETTLE_NS;
	for (;;) {
		/* Posts what the kernel holds for this thread (DEFER_TASKRUN's
		 * work) and waits for a CQE while requests are in flight. */
		cbcmn__ring_submit(e, e->ring.reqs != NULL, 10 * 1000000ull);
		/* Bounded: a multishot that keeps posting stops when it runs
		 * out of buffers or connections. */
		for (int i = 0; i < 64 && cbcmn__ring_reap(e); i++)
			;
		if (!e->ring.reqs || mono_ns() >= end)
			break;
	}
}

/* The executor's thread died with requests in flight; its exit ended them
 * in the kernel (the caller waited for that: cbcmn__ring_takeover()), and
 * their CQEs are in the dead ring's CQ, still mapped as old: a request that
 * completed before or during the exit returns what it did (a recv's bytes
 * were consumed).  Those without a CQE there did not happen (an SQE the
 * dead thread never submitted) or ended in the kernel's overflow list,
 * which only the dead thread could flush: -ECANCELED. */
void cbcmn__io_orphan_all(struct cbcmn__exec *e, const struct io_uring_cqe *cqes, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		const struct io_uring_cqe *c = &cqes[i];
		uint64_t ud = c->user_data, tag = ud & CBCMN__UD_MASK;
		/* Only our requests: multishot CQEs are stream.c's. */
		if (tag == CBCMN__UD_REQ || tag == CBCMN__UD_LTIMEOUT)
			cbcmn__io_cqe(e, (struct cbcmn__ioreq *)(uintptr_t)(ud & ~(uint64_t)CBCMN__UD_MASK),
				      c->res, c->flags, tag == CBCMN__UD_LTIMEOUT);
	}
	struct cbcmn__ioreq *r;
	while ((r = e->ring.reqs)) {
		req_unlink(e, r);
		if (!r->got_res)
			r->res = -ECANCELED;
		r->pending = 0;
		cbcmn__iwait_claim(&r->iw);
		cbcmn__iwait_wake(&r->iw, e);
	}
}

/* ---- task side ------------------------------------------------------------ */

/* Called by the task itself, cancelled as it began to wait (iwait.c), on
 * its executor's thread with its SQE still queued: it is never submitted.
 * Otherwise (not reached: nothing submits between the SQE and the wait)
 * the executor cancels it in the kernel. */
static void io_on_cancel(struct cbcmn__iwait *iw)
{
	struct cbcmn__ioreq *r = (struct cbcmn__ioreq *)((char *)iw - offsetof(struct cbcmn__ioreq, iw));
	if (r->nocancel)
		return;
	if (req_void(r->e, r)) {
		r->cancel_sent = true;
		return;
	}
	cbcmn__iwait_local_kick(iw);
}

/* The checks every call makes, and its charge: 0 or the error to return. */
static int64_t io_check(struct cbcmn_task *t, uint32_t flags)
{
	if (!cbcmn__is_running(t))
		return -EPERM;
	if (!(flags & IO_NOCANCEL) && cbcmn__task_cancelled(t))
		return CBCMN_ECANCELED;
	/* May wait for budget, and resume on another executor. */
	if (!(t->rt->cfg.flags & CBCMN_CONFIG_NO_BUDGETS))
		cbcmn__charge(t, CBCMN__B_SYSCALLS, 1);
	else
		cbcmn__stack_check(t);
	return 0;
}

/* Whether the call gets a linked timeout: those of the task's calls that
 * may be undone.  A close may not: a file with a flush method (overlayfs,
 * NFS, FUSE) is closed by an io-wq worker, and a timeout that fired before
 * the worker took it cancelled it, leaving the descriptor open. */
static inline bool io_timed(const struct io_op *op)
{
	return op->timeout_ns && !(op->flags & IO_NOCANCEL);
}

/* Check the caller, charge the call, and get an SQE on the task's ring
 * (room for the linked timeout too).  The call's timeout is the task's
 * (cbcmn_io_set_timeout()), or limit_ns if that is shorter (0: no limit of
 * the call's own).  NULL with op->err set on failure. */
static struct io_uring_sqe *io_start_timed(cbcmn_cx *cx, struct io_op *op, uint32_t flags,
					   uint64_t limit_ns)
{
	op->flags = flags;
	if (!cx) {
		op->err = -EINVAL;
		return NULL;
	}
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	if ((op->err = io_check(t, flags)) != 0)
		return NULL;
	/* Injected (tests): refused before anything is queued.  A close is
	 * never refused. */
	if (!(flags & IO_NOCANCEL) && (op->err = CBCMN__FAULT(CBCMN__F_IO)) != 0)
		return NULL;
	struct cbcmn__exec *e = t->exec;
	op->t = t;
	op->req.e = e;
	op->timeout_ns = t->io_timeout_ns;
	if (limit_ns && (!op->timeout_ns || limit_ns < op->timeout_ns))
		op->timeout_ns = limit_ns;
	if (e->ep) {
		/* No ring: the SQE describes the call to the epoll backend
		 * (io_finish()). */
		memset(&op->own, 0, sizeof(op->own));
		return op->sqe = &op->own;
	}
	if (!cbcmn__ring_sq_room(e, io_timed(op) ? 2 : 1)) {
		op->err = -EBUSY; /* not reached: a submit always frees the SQ */
		return NULL;
	}
	op->sqe = io_uring_get_sqe(&e->ring.u);
	op->req.sq_seq = e->ring.u.sq.sqe_tail - 1; /* the SQE just taken */
	return op->sqe;
}

static inline struct io_uring_sqe *io_start(cbcmn_cx *cx, struct io_op *op, uint32_t flags)
{
	return io_start_timed(cx, op, flags, 0);
}

/* The call's span, once it has its result, into the trace ring of the
 * executor the task is back on (its thread is this one). */
static void io_traced(struct cbcmn_task *t, uint64_t t0, uint32_t opcode)
{
	if (__builtin_expect(t0 != 0, 0))
		CBCMN__TRACE(t->exec, CBCMN_TRACE_IO, t0, cbcmn__trace_now() - t0, opcode, 0);
}

/* Queue the prepared SQE, park until its last CQE, and make the result. */
static int64_t io_finish(struct io_op *op)
{
	struct cbcmn__ioreq *r = &op->req;
	struct cbcmn_task *t = op->t;
	struct cbcmn__exec *e = r->e;
	/* Read now: the SQE is the ring's again once submitted. */
	uint64_t trace_t0 = 0;
	uint32_t trace_op = 0;
	if (cbcmn__trace_on(e)) {
		trace_t0 = cbcmn__trace_now();
		trace_op = op->sqe->opcode;
	}
	if (e->ep) {
		CBCMN__COUNT(e, io_ops, 1);
		int64_t res = cbcmn__ep_io(t, op->sqe, io_timed(op) ? op->timeout_ns : 0);
		io_traced(t, trace_t0, trace_op);
		return res;
	}
	r->res = 0;
	r->pending = 1;
	r->got_res = false;
	r->timed_out = false;
	r->cancel_sent = false;
	r->voided = false;
	r->nocancel = op->flags & IO_NOCANCEL;
	io_uring_sqe_set_data(op->sqe, r);
	if (io_timed(op)) {
		op->sqe->flags |= IOSQE_IO_LINK;
		op->ts.tv_sec = (long long)(op->timeout_ns / 1000000000u);
		op->ts.tv_nsec = (long long)(op->timeout_ns % 1000000000u);
		struct io_uring_sqe *lt = io_uring_get_sqe(&e->ring.u); /* room reserved */
		io_uring_prep_link_timeout(lt, &op->ts, 0);
		io_uring_sqe_set_data64(lt, (uint64_t)(uintptr_t)r | CBCMN__UD_LTIMEOUT);
		r->pending = 2;
	}
	r->prev = NULL;
	r->next = e->ring.reqs;
	if (r->next)
		r->next->prev = r;
	e->ring.reqs = r;
	e->ring.inflight++;
	CBCMN__COUNT(e, io_ops, 1);

	cbcmn__iwait_init(&r->iw, t);
	r->iw.on_cancel = io_on_cancel;
	r->iw.local = true;
	/* A close is never undone: it ends with its CQE, listed nowhere. */
	r->iw.local_end = r->nocancel ? NULL : io_end;
	uint32_t how = cbcmn__iwait_block(&r->iw);
	io_traced(t, trace_t0, trace_op);
	int64_t res = r->res;
	/* The kernel's own restart codes, which io_uring passes on for some
	 * operations (an openat of a FIFO interrupted in its io-wq worker:
	 * -ERESTARTSYS): the operation was interrupted before it happened,
	 * as -EINTR says.  Never the caller's to see. */
	if (res == -KERN_ERESTARTSYS || res == -KERN_ERESTARTNOINTR ||
	    res == -KERN_ERESTARTNOHAND || res == -KERN_ERESTART_RESTARTBLOCK)
		res = -EINTR;
	/* Stopped by us or its timeout: cancelled before it ran (-ECANCELED;
	 * also a voided or orphaned request), or interrupted in an io-wq
	 * worker (-EINTR).  Anything else is what the operation did, whatever
	 * cancelled it: bytes moved, a descriptor made, a connection taken
	 * are the caller's, and so is an error it consumed (a socket's
	 * ECONNRESET is reported once); the task sees its cancellation at its
	 * next call. */
	bool stopped = res == -ECANCELED || res == -EINTR;
	if (stopped && how == CBCMN__IW_CANCELLED && !r->nocancel)
		return CBCMN_ECANCELED;
	if (stopped && r->timed_out)
		return -ETIMEDOUT;
	return res;
}

int64_t cbcmn_io_set_timeout(cbcmn_cx *cx, uint64_t ns)
{
	if (!cx)
		return -EINVAL;
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	uint64_t old = t->io_timeout_ns;
	t->io_timeout_ns = ns;
	return old > INT64_MAX ? INT64_MAX : (int64_t)old;
}

/* What one read(2) moves at most (MAX_RW_COUNT): longer lengths are cut to
 * it, as the kernel does, instead of wrapping in the SQE's 32-bit field. */
#define IO_LEN_MAX 0x7ffff000u
static inline unsigned io_len(size_t len)
{
	return len > IO_LEN_MAX ? IO_LEN_MAX : (unsigned)len;
}

/* Injected (tests): ask for half the bytes, a short read or write as the
 * kernel may give any caller. */
static inline void io_fault_short(struct io_op *op)
{
	if ((op->flags & IO_BYTES) && op->sqe->len > 1 && CBCMN__FAULT(CBCMN__F_IO_SHORT))
		op->sqe->len /= 2;
}

#define IO_CALL(cx, flags, prep)                          \
	do {                                              \
		struct io_op op;                          \
		struct io_uring_sqe *sqe = io_start(cx, &op, flags); \
		if (!sqe)                                 \
			return op.err;                    \
		prep;                                     \
		io_fault_short(&op);                      \
		return io_finish(&op);                    \
	} while (0)

/* A read of 0 bytes, made here: on 6.1 io_uring waits for data to read
 * nothing from an empty pipe (measured in the kernel matrix: no CQE;
 * 6.12 completes it at once, as read(2) does).  read(2) of 0 bytes never
 * blocks (pipe_read and sock_read_iter return 0 before they would) and
 * still reports a bad descriptor. */
static int64_t io_read_nothing(cbcmn_cx *cx, int fd, void *buf)
{
	int64_t rc = cx ? io_check((struct cbcmn_task *)cx, IO_BYTES) : -EINVAL;
	if (rc)
		return rc;
	return read(fd, buf, 0) < 0 ? -errno : 0;
}

int64_t cbcmn_read(cbcmn_cx *cx, int fd, void *buf, size_t len)
{
	if (!len)
		return io_read_nothing(cx, fd, buf);
	IO_CALL(cx, IO_BYTES, io_uring_prep_read(sqe, fd, buf, io_len(len), (uint64_t)-1));
}

int64_t cbcmn_write(cbcmn_cx *cx, int fd, const void *buf, size_t len)
{
	IO_CALL(cx, IO_BYTES, io_uring_prep_write(sqe, fd, buf, io_len(len), (uint64_t)-1));
}

int64_t cbcmn_readv(cbcmn_cx *cx, int fd, const struct iovec *iov, int iovcnt)
{
	if (iovcnt < 0)
		return -EINVAL;
	IO_CALL(cx, 0, io_uring_prep_readv(sqe, fd, iov, (unsigned)iovcnt, (uint64_t)-1));
}

int64_t cbcmn_writev(cbcmn_cx *cx, int fd, const struct iovec *iov, int iovcnt)
{
	if (iovcnt < 0)
		return -EINVAL;
	IO_CALL(cx, 0, io_uring_prep_writev(sqe, fd, iov, (unsigned)iovcnt, (uint64_t)-1));
}

int64_t cbcmn_pread(cbcmn_cx *cx, int fd, void *buf, size_t len, off_t off)
{
	if (off < 0)
		return -EINVAL;
	if (!len)
		return io_read_nothing(cx, fd, buf);
	IO_CALL(cx, IO_BYTES, io_uring_prep_read(sqe, fd, buf, io_len(len), (uint64_t)off));
}

int64_t cbcmn_pwrite(cbcmn_cx *cx, int fd, const void *buf, size_t len, off_t off)
{
	if (off < 0)
		return -EINVAL;
	IO_CALL(cx, IO_BYTES, io_uring_prep_write(sqe, fd, buf, io_len(len), (uint64_t)off));
}

int64_t cbcmn_recv(cbcmn_cx *cx, int fd, void *buf, size_t len, int flags)
{
	IO_CALL(cx, IO_BYTES, io_uring_prep_recv(sqe, fd, buf, io_len(len), flags));
}

/* Sends go through the ring like every other call.  Trying the socket
 * first with a send(2) of its own saves the SQE, the CQE and a fiber
 * switch, but costs a system call per send; through the ring, the sends
 * of a time slice ride on the io_uring_enter that also runs the slice's
 * receive completions (docs/IO.md: echo server CPU per request -5 %). */
int64_t cbcmn_send(cbcmn_cx *cx, int fd, const void *buf, size_t len, int flags)
{
	IO_CALL(cx, IO_BYTES, io_uring_prep_send(sqe, fd, buf, io_len(len), flags));
}

int64_t cbcmn_recvmsg(cbcmn_cx *cx, int fd, struct msghdr *msg, int flags)
{
	IO_CALL(cx, 0, io_uring_prep_recvmsg(sqe, fd, msg, (unsigned)flags));
}

int64_t cbcmn_sendmsg(cbcmn_cx *cx, int fd, const struct msghdr *msg, int flags)
{
	IO_CALL(cx, 0, io_uring_prep_sendmsg(sqe, fd, msg, (unsigned)flags));
}

int64_t cbcmn_accept(cbcmn_cx *cx, int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
	IO_CALL(cx, 0, io_uring_prep_accept(sqe, fd, addr, addrlen, flags));
}

int64_t cbcmn_connect(cbcmn_cx *cx, int fd, const struct sockaddr *addr, socklen_t addrlen)
{
	IO_CALL(cx, 0, io_uring_prep_connect(sqe, fd, addr, addrlen));
}

int64_t cbcmn_shutdown(cbcmn_cx *cx, int fd, int how)
{
	IO_CALL(cx, 0, io_uring_prep_shutdown(sqe, fd, how));
}

int64_t cbcmn_socket(cbcmn_cx *cx, int domain, int type, int protocol)
{
	if (cx && !((struct cbcmn_task *)cx)->rt->ring_caps.socket) {
		/* Before 5.19: a socket(2) never blocks, make it here. */
		int64_t rc = io_check((struct cbcmn_task *)cx, 0);
		if (rc)
			return rc;
		int fd = socket(domain, type, protocol);
		return fd < 0 ? -errno : fd;
	}
	IO_CALL(cx, 0, io_uring_prep_socket(sqe, domain, type, protocol, 0));
}

int64_t cbcmn_close(cbcmn_cx *cx, int fd)
{
	/* A halt's drop never waits, and a close is never undone: close(2)
	 * here, which does not wait for a reader (issue 16).  Not on epoll:
	 * its close does not wait, and it ends the waits on fd, which a
	 * close(2) behind its back left waiting (docs/IO.md, "Backends";
	 * test_close_in_a_drop_ends_the_waits_on_it_on_epoll). */
	if (cx && cbcmn__task_in_halt((struct cbcmn_task *)cx) &&
	    !((struct cbcmn_task *)cx)->exec->ep) {
		int64_t rc = io_check((struct cbcmn_task *)cx, IO_NOCANCEL);
		return rc ? rc : close(fd) < 0 ? -errno : 0;
	}
	IO_CALL(cx, IO_NOCANCEL, io_uring_prep_close(sqe, fd));
}

int64_t cbcmn_openat(cbcmn_cx *cx, int dirfd, const char *path, int flags, mode_t mode)
{
	if (!path)
		return -EFAULT;
	IO_CALL(cx, 0, io_uring_prep_openat(sqe, dirfd, path, flags, mode));
}

int64_t cbcmn_statx(cbcmn_cx *cx, int dirfd, const char *path, int flags, unsigned int mask,
		    struct statx *out)
{
	if (!path || !out)
		return -EFAULT;
	IO_CALL(cx, 0, io_uring_prep_statx(sqe, dirfd, path, flags, mask, out));
}

int64_t cbcmn_fsync(cbcmn_cx *cx, int fd, unsigned int flags)
{
	if (flags & ~CBCMN_FSYNC_DATASYNC)
		return -EINVAL;
	IO_CALL(cx, 0,
		io_uring_prep_fsync(sqe, fd, flags & CBCMN_FSYNC_DATASYNC ? IORING_FSYNC_DATASYNC : 0));
}

/* What cbcmn_poll() may wait for: poll(2)'s events.  Anything else
 * (EPOLLET, EPOLLONESHOT, EPOLLEXCLUSIVE...) a ring's POLL_ADD would take
 * as a mode of its own, and epoll as a flag: refused on both. */
#define POLL_EVENTS                                                                    \
	(POLLIN | POLLPRI | POLLOUT | POLLERR | POLLHUP | POLLRDNORM | POLLRDBAND |    \
	 POLLWRNORM | POLLWRBAND | POLLRDHUP)

/* One-shot IORING_OP_POLL_ADD (a multishot poll would post into a CQ that
 * no one reads between two calls, and a library that polls again after its
 * own EAGAIN wants the state now, not a past event), with its linked
 * timeout; the epoll backend waits in its set (epoll.c's do_poll()).  A
 * zero timeout waits for nothing: poll(2) here, on both backends. */
int64_t cbcmn_poll(cbcmn_cx *cx, int fd, uint32_t events, int64_t timeout_ns)
{
	if (!cx || (events & ~(uint32_t)POLL_EVENTS))
		return -EINVAL;
	/* The kernel would say so too, but poll(2) skips a negative fd: the
	 * same answer on both backends, at once. */
	if (fd < 0)
		return -EBADF;
	if (timeout_ns == 0) {
		int64_t rc = io_check((struct cbcmn_task *)cx, 0);
		if (rc)
			return rc;
		rc = cbcmn__ep_poll_now(fd, events);
		return rc ? rc : -ETIMEDOUT;
	}
	struct io_op op;
	struct io_uring_sqe *sqe = io_start_timed(cx, &op, 0, timeout_ns > 0 ? (uint64_t)timeout_ns : 0);
	if (!sqe)
		return op.err;
	io_uring_prep_poll_add(sqe, fd, events);
	int64_t rc = io_finish(&op);
	/* Ended by its cancellation or its timeout: readiness may have come
	 * first and not been seen yet (an event the epoll backend's executor
	 * had not read from its set; a POLL_ADD's wake-up still queued for
	 * the ring's owner when the cancel went in).  One more look, as
	 * poll(2) with a zero timeout: ready now, the mask (nothing was
	 * consumed either way; the task sees its cancellation at its next
	 * call). */
	if (rc == CBCMN_ECANCELED || rc == -ETIMEDOUT) {
		int64_t now = cbcmn__ep_poll_now(fd, events);
		if (now > 0)
			return now;
	}
	return rc;
}
