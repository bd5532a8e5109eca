/* epoll_sq.c: the SQEs stream.c queues, carried out by the epoll backend
 * (epoll_int.h; docs/IO.md, "Backends"), so that streams and acceptors run
 * the same code, with the same ordering, share and back-pressure rules, on
 * both backends.
 *
 * What stream.c asks of a ring, and what stands in for it here:
 *   - a multishot recv with buffer select: a watch on the socket; at each
 *     readiness, a buffer taken from the provided-buffer ring as the
 *     kernel takes one (the entry at our head, none once head reaches the
 *     tail stream.c publishes: -ENOBUFS, the end of the request; at
 *     submission too, as the kernel's first try), then
 *     recv(MSG_DONTWAIT) into it: a chunk with IORING_CQE_F_MORE, 0 at
 *     EOF, or the socket's error;
 *   - a multishot accept: accept4() at each readiness, a descriptor per
 *     completion, an error ends it (the listener is made O_NONBLOCK for
 *     good, as for cbcmn_accept, epoll.c);
 *   - a one-shot poll: the events as its result;
 *   - a timeout: -ETIME after its time, on CLOCK_MONOTONIC, real time in
 *     lab mode too (as a ring's);
 *   - a cancel by user_data: the request's last completion, -ECANCELED.
 * SQEs are carried out at the executor's next turn and completions handed
 * to cbcmn__mshot_cqe() after that, in the order they came, never inside
 * the call that queued them: as with a ring, stream.c may queue from its
 * completion handlers.  A request's last completion comes after all its
 * others.  At most MSHOT_BATCH completions per readiness: the set is asked
 * again, so one busy socket does not hold the executor; and a completion
 * that finds no memory to be queued leaves its data in the socket.
 *
 * Order when the SQ fills (cbcmn__ep_sqe() carries the 64 queued SQEs out
 * at once, inside a task or a completion handler) holds as on a ring: a
 * stream's requests share one user_data, and what must never happen is a
 * completion of its next request handed out before its last one's.  That
 * cannot: stream.c queues a request's successor only after it has seen
 * the last completion (armed goes false there); SQEs carried out early
 * produce no data (a recv's chunks come only from readiness, at the next
 * look); a request they end (a cancel, a failure at submission) goes on
 * the done list, handed out after every queued completion of the turn
 * (those of the request among them), or at the next turn if the done list
 * was already being handed out; and their own completions (a cancel's,
 * -ENOMEM) are the next turn's, queued before that turn's readiness
 * pushes any.  (With stream.c as it is, the SQ fills inside handlers only
 * with more than 64 of their cancels in one turn, one per stream with a
 * chunk that turn, which the set's 64 events a look cannot produce.)
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#include "epoll_int.h"

#define SQ_ENTRIES 64u
#define MSHOT_BATCH 8

enum { OP_RECV, OP_ACCEPT, OP_POLL, OP_TIMEOUT };

struct ep_op {
	uint64_t ud;            /* read with w's first fields at each chunk */
	uint8_t kind;
	bool watching;          /* w is linked */
	struct ep_wait w;       /* on its descriptor (not a timeout's) */
	struct ep_op *prev, *next; /* ep->ops or ep->timeouts in flight; then the done list */
	uint64_t deadline;      /* OP_TIMEOUT: CLOCK_MONOTONIC ns */
	uint32_t accept_flags;  /* OP_ACCEPT: accept4()'s */
	int32_t res;            /* its last completion, once done */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Room for one more queued completion.  False without memory. */
static bool cq_reserve(struct cbcmn__ep *ep)
{
	if (ep->cq_len < ep->cq_cap)
		return true;
	uint32_t cap = ep->cq_cap ? ep->cq_cap * 2 : 64;
	struct ep_cqe *q = realloc(ep->cq, cap * sizeof(*q));
	if (!q)
		return false;
	ep->cq = q;
	ep->cq_cap = cap;
	return true;
}

static void cq_push(struct cbcmn__ep *ep, uint64_t ud, int32_t res, uint32_t flags)
{
	if (cq_reserve(ep))
		ep->cq[ep->cq_len++] = (struct ep_cqe){ud, res, flags};
}

/* op ends with res: off its descriptor and the in-flight list, onto the
 * done list (ep->done: kept apart from the queued completions, so that
 * ending a request needs no memory, and handed out after them, so that a
 * request's last completion comes last). */
static void op_finish(struct cbcmn__ep *ep, struct ep_op *op, int32_t res)
{
	if (op->watching) {
		cbcmn__ep_unwatch(ep, &op->w);
		op->watching = false;
	}
	if (op->prev)
		op->prev->next = op->next;
	else if (op->kind == OP_TIMEOUT)
		ep->timeouts = op->next;
	else
		ep->ops = op->next;
	if (op->next)
		op->next->prev = op->prev;
	op->res = res;
	op->next = NULL;
	if (ep->done_tail)
		ep->done_tail->next = op;
	else
		ep->done = op;
	ep->done_tail = op;
}

static struct ep_op *of(struct ep_wait *w)
{
	return (struct ep_op *)((char *)w - offsetof(struct ep_op, w));
}

/* The buffer the kernel would pick next, or NULL (the ring is empty). */
static struct io_uring_buf *buf_peek(struct cbcmn__ep *ep)
{
	if (!ep->br)
		return NULL;
	/* acquire: pairs with io_uring_buf_ring_advance()'s release of the
	 * tail, after the entries (stream.c, the same thread here). */
	uint16_t tail = io_uring_smp_load_acquire(&ep->br->tail);
	if (ep->br_head == tail)
		return NULL;
	return &ep->br->bufs[ep->br_head & ep->br_mask];
}

/* At most MSHOT_BATCH chunks a readiness; true if it stopped there (or
 * found no room for a completion) with the socket maybe still readable. */
static bool recv_ready(struct cbcmn__exec *e, struct ep_wait *w, uint32_t revents)
{
	(void)revents;
	struct cbcmn__ep *ep = e->ep;
	struct ep_op *op = of(w);
	for (int i = 0; i < MSHOT_BATCH && cq_reserve(ep); i++) {
		struct io_uring_buf *b = buf_peek(ep);
		if (!b) {
			op_finish(ep, op, -ENOBUFS);
			return false;
		}
		ssize_t n = recv(w->fd, (void *)(uintptr_t)b->addr, b->len, MSG_DONTWAIT);
		if (n > 0) {
			ep->br_head++;
			cq_push(ep, op->ud, (int32_t)n,
				IORING_CQE_F_BUFFER | IORING_CQE_F_MORE |
					((uint32_t)b->bid << IORING_CQE_BUFFER_SHIFT));
			continue;
		}
		if (n == 0) {
			op_finish(ep, op, 0); /* EOF: no buffer taken */
			return false;
		}
		/* EINTR: nothing read, nothing known: ask again. */
		if (errno == EINTR)
			return true;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			op_finish(ep, op, -errno);
		return false;
	}
	return true;
}

static bool accept_ready(struct cbcmn__exec *e, struct ep_wait *w, uint32_t revents)
{
	(void)revents;
	struct cbcmn__ep *ep = e->ep;
	struct ep_op *op = of(w);
	for (int i = 0; i < MSHOT_BATCH && cq_reserve(ep); i++) {
		int fd = accept4(w->fd, NULL, NULL, (int)op->accept_flags);
		if (fd >= 0) {
			cq_push(ep, op->ud, fd, IORING_CQE_F_MORE);
			continue;
		}
		if (errno == EINTR)
			return true;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			op_finish(ep, op, -errno);
		return false;
	}
	return true;
}

static bool poll_ready(struct cbcmn__exec *e, struct ep_wait *w, uint32_t revents)
{
	op_finish(e->ep, of(w), (int32_t)(revents & (POLLIN | POLLOUT | POLLPRI | POLLERR | POLLHUP |
						     POLLRDHUP)));
	return false;
}

static struct ep_op *find(struct ep_op *list, uint64_t ud)
{
	while (list && list->ud != ud)
		list = list->next;
	return list;
}

void cbcmn__ep_sq_fail(struct cbcmn__exec *e, struct ep_wait *w, int err)
{
	op_finish(e->ep, of(w), err);
}

/* Carry out one SQE. */
static void submit_one(struct cbcmn__exec *e, const struct io_uring_sqe *sqe)
{
	struct cbcmn__ep *ep = e->ep;
	uint64_t ud = sqe->user_data;
	if (sqe->opcode == IORING_OP_ASYNC_CANCEL) {
		/* O(requests in flight): a cancel comes when a stream reaches
		 * its share or closes, or an acceptor's queue is full. */
		struct ep_op *op = find(ep->timeouts, sqe->addr);
		if (!op)
			op = find(ep->ops, sqe->addr);
		if (op)
			op_finish(ep, op, -ECANCELED);
		if (!op || !(sqe->flags & IOSQE_CQE_SKIP_SUCCESS))
			cq_push(ep, ud, op ? 0 : -ENOENT, 0);
		return;
	}
	if (sqe->opcode == IORING_OP_NOP) {
		cq_push(ep, ud, 0, 0);
		return;
	}
	struct ep_op *op = calloc(1, sizeof(*op));
	if (!op) {
		cq_push(ep, ud, -ENOMEM, 0);
		return;
	}
	op->ud = ud;
	op->w.fd = sqe->fd;
	struct ep_op **list = sqe->opcode == IORING_OP_TIMEOUT ? &ep->timeouts : &ep->ops;
	op->next = *list;
	if (op->next)
		op->next->prev = op;
	*list = op;
	int rc = 0;
	switch (sqe->opcode) {
	case IORING_OP_RECV: /* multishot, buffer select: stream.c's only recv */
		op->kind = OP_RECV;
		op->w.events = EPOLLIN | EPOLLRDHUP;
		op->w.ready = recv_ready;
		/* The kernel picks a buffer at once, before it looks at the
		 * socket: an empty pool ends the request with -ENOBUFS
		 * whatever the socket holds (stream.c then peeks). */
		if (!buf_peek(ep))
			rc = -ENOBUFS;
		break;
	case IORING_OP_ACCEPT: /* multishot: stream.c's only accept */
		op->kind = OP_ACCEPT;
		op->w.events = EPOLLIN;
		op->w.ready = accept_ready;
		op->accept_flags = sqe->accept_flags;
		rc = cbcmn__ep_nonblock(sqe->fd);
		break;
	case IORING_OP_POLL_ADD:
		op->kind = OP_POLL;
		op->w.events = sqe->poll32_events & (POLLIN | POLLOUT | POLLPRI | POLLRDHUP);
		op->w.ready = poll_ready;
		break;
	case IORING_OP_TIMEOUT: {
		const struct __kernel_timespec *ts = (const void *)(uintptr_t)sqe->addr;
		op->kind = OP_TIMEOUT;
		op->deadline = mono_ns() + (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
		return;
	}
	default:
		rc = -EINVAL;
		break;
	}
	if (rc == 0)
		rc = cbcmn__ep_watch(e, &op->w);
	if (rc)
		op_finish(ep, op, rc);
	else
		op->watching = true;
}

struct io_uring_sqe *cbcmn__ep_sqe(struct cbcmn__exec *e)
{
	struct cbcmn__ep *ep = e->ep; /* ep->sq: made with it (cbcmn__ep_sq_init()) */
	if (ep->sq_len == SQ_ENTRIES) {
		/* Full: carry them out now (their completions still wait for
		 * the next turn), as a full ring's SQ is submitted. */
		for (uint32_t i = 0; i < ep->sq_len; i++)
			submit_one(e, &ep->sq[i]);
		ep->sq_len = 0;
	}
	struct io_uring_sqe *sqe = &ep->sq[ep->sq_len++];
	memset(sqe, 0, sizeof(*sqe));
	return sqe;
}

void cbcmn__ep_buf_ring(struct cbcmn__exec *e, struct io_uring_buf_ring *br, uint32_t entries)
{
	e->ep->br = br;
	e->ep->br_mask = entries - 1;
	e->ep->br_head = 0;
}

int cbcmn__ep_sq_init(struct cbcmn__ep *ep)
{
	ep->sq = calloc(SQ_ENTRIES, sizeof(*ep->sq));
	return ep->sq ? 0 : -ENOMEM;
}

bool cbcmn__ep_sq_busy(const struct cbcmn__ep *ep)
{
	return ep->sq_len || ep->cq_len || ep->done;
}

uint64_t cbcmn__ep_sq_next(const struct cbcmn__ep *ep)
{
	uint64_t first = UINT64_MAX;
	for (const struct ep_op *op = ep->timeouts; op; op = op->next)
		if (op->deadline < first)
			first = op->deadline;
	if (first == UINT64_MAX)
		return first;
	uint64_t now = mono_ns();
	return first > now ? first - now : 0;
}

static void hand_out(struct cbcmn__exec *e, uint64_t ud, int32_t res, uint32_t flags)
{
	/* Only stream.c's requests come here; cancels' own (CBCMN__UD_IGNORE)
	 * are nobody's. */
	if ((ud & CBCMN__UD_MASK) == CBCMN__UD_MSHOT)
		cbcmn__mshot_cqe(e, (struct cbcmn__mshot *)(uintptr_t)(ud & ~(uint64_t)CBCMN__UD_MASK),
				 res, flags);
}

void cbcmn__ep_sq_run(struct cbcmn__exec *e)
{
	struct cbcmn__ep *ep = e->ep;
	if (!cbcmn__ep_sq_busy(ep) && !ep->timeouts)
		return; /* the usual case: nothing queued, nothing timed */
	/* Handlers may queue SQEs: those wait for the next turn. */
	uint32_t n = ep->sq_len;
	ep->sq_len = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct io_uring_sqe sqe = ep->sq[i];
		submit_one(e, &sqe);
	}
	uint64_t now = 0;
	struct ep_op *next;
	for (struct ep_op *op = ep->timeouts; op; op = next) {
		next = op->next;
		if (op->deadline <= (now ? now : (now = mono_ns())))
			op_finish(ep, op, -ETIME);
	}
	/* The queued completions, then the done requests' last ones.  Taken
	 * off first: handlers may end more requests (their last completions
	 * come at the next turn, after these). */
	struct ep_cqe *cq = ep->cq;
	uint32_t ncq = ep->cq_len, cap = ep->cq_cap;
	if (ncq) {
		ep->cq = NULL;
		ep->cq_len = ep->cq_cap = 0;
		for (uint32_t i = 0; i < ncq; i++)
			hand_out(e, cq[i].ud, cq[i].res, cq[i].flags);
		if (ep->cq) {
			/* A handler filled the SQ, which was carried out at
			 * once (cbcmn__ep_sqe()) and queued completions: they
			 * are the next turn's. */
			free(cq);
		} else {
			ep->cq = cq; /* keep the memory */
			ep->cq_cap = cap;
		}
	}
	struct ep_op *op = ep->done;
	ep->done = ep->done_tail = NULL;
	for (; op; op = next) {
		next = op->next;
		hand_out(e, op->ud, op->res, 0);
		free(op);
	}
}

void cbcmn__ep_sq_fini(struct cbcmn__ep *ep)
{
	struct ep_op *next;
	for (struct ep_op *op = ep->ops; op; op = next) {
		next = op->next;
		free(op);
	}
	for (struct ep_op *op = ep->timeouts; op; op = next) {
		next = op->next;
		free(op);
	}
	for (struct ep_op *op = ep->done; op; op = next) {
		next = op->next;
		free(op);
	}
	free(ep->sq);
	free(ep->cq);
}
