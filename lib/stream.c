/* stream.c: multishot receive streams and acceptors (cbcmn_io.h).
 *
 * One SQE keeps delivering: a multishot recv puts each chunk it receives in
 * a buffer it picks from the executor's provided-buffer ring, a multishot
 * accept posts each new connection, and neither re-arms a poll per event.
 * Both share the core below: the executor's CQE handler queues what
 * arrives (a buffer id and length, or a descriptor) on the object and wakes
 * the task waiting on it, if any; the task takes from the queue.
 *
 * The object belongs to the executor whose ring holds its SQE, and only a
 * task running there may use it (-EXDEV elsewhere): use it from a pinned
 * task.  Closing cancels the SQE and waits for its last CQE (the one without
 * IORING_CQE_F_MORE) before the object is freed, so no CQE ever points to
 * freed memory; descriptors still queued are closed, buffers go back.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "iwait.h"
#include "runtime.h"

#define BUFRING_BGID 0
#define MS_QUEUE_MIN 16u
#define NOBUFS_PAUSE_NS 50000u /* out of buffers: wait this long to re-arm */

enum { MS_STREAM, MS_ACCEPT };

struct ms_item {
	uint32_t val; /* buffer id, or descriptor */
	uint32_t len;
};

struct cbcmn__mshot {
	struct cbcmn__exec *e;
	int fd;
	uint32_t kind;
	bool armed;            /* its SQE may still post CQEs */
	bool done;             /* ended for good: err says why (0: EOF) */
	bool cancel_sent;
	bool nobufs;           /* ended for want of buffers: re-arm after a pause */
	bool busy;             /* a task is inside a call on it (ms_next, ms_close) */
	int32_t err;
	struct ms_item *q;     /* arrived, not yet taken: FIFO ring */
	uint32_t qhead, qlen, qcap;
	struct cbcmn__iwait *waiter; /* a task waiting for an item or the end */
	struct cbcmn__mshot *prev, *next; /* the executor's list (cancellation) */
	int32_t held;          /* stream: buffer id the user holds, -1 none */
	uint32_t accept_flags;
};

struct cbcmn_stream {
	struct cbcmn__mshot ms;
};

struct cbcmn_acceptor {
	struct cbcmn__mshot ms;
};

/* ---- the executor's provided-buffer ring ------------------------------------ */

static int bufring_get(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	if (r->br)
		return 0;
	if (!e->rt->ring_caps.multishot_recv)
		return -EOPNOTSUPP;
	uint32_t n = CBCMN__BUFRING_N, size = CBCMN__BUFRING_SIZE;
	size_t ringsz = (size_t)n * sizeof(struct io_uring_buf);
	void *mem = mmap(NULL, ringsz + (size_t)n * size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return -ENOMEM;
	struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)mem,
				       .ring_entries = n,
				       .bgid = BUFRING_BGID};
	int rc = io_uring_register_buf_ring(&r->u, &reg, 0);
	if (rc < 0) {
		munmap(mem, ringsz + (size_t)n * size);
		return rc == -EINVAL ? -EOPNOTSUPP : rc;
	}
	r->br = mem;
	r->bufs = (char *)mem + ringsz;
	io_uring_buf_ring_init(r->br);
	int mask = io_uring_buf_ring_mask(n);
	for (uint32_t i = 0; i < n; i++)
		io_uring_buf_ring_add(r->br, r->bufs + (size_t)i * size, size, (unsigned short)i,
				      mask, (int)i);
	io_uring_buf_ring_advance(r->br, (int)n);
	return 0;
}

static void buf_return(struct cbcmn__exec *e, uint32_t bid)
{
	struct cbcmn__ring *r = &e->ring;
	io_uring_buf_ring_add(r->br, r->bufs + (size_t)bid * CBCMN__BUFRING_SIZE,
			      CBCMN__BUFRING_SIZE, (unsigned short)bid,
			      io_uring_buf_ring_mask(CBCMN__BUFRING_N), 0);
	io_uring_buf_ring_advance(r->br, 1);
}

#define BUFRING_BYTES \
	((size_t)CBCMN__BUFRING_N * sizeof(struct io_uring_buf) + \
	 (size_t)CBCMN__BUFRING_N * CBCMN__BUFRING_SIZE)

/* No stream is open on e any more: unmap its buffers, and those of rings
 * its dead threads left (cbcmn__bufring_retire()). */
void cbcmn__bufring_fini(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	while (r->dead_br) {
		void *next = *(void **)r->dead_br;
		munmap(r->dead_br, BUFRING_BYTES);
		r->dead_br = next;
	}
	if (!r->br)
		return;
	munmap(r->br, BUFRING_BYTES);
	r->br = NULL;
	r->bufs = NULL;
}

/* The ring the buffers were registered with died with its thread: the next
 * stream gets a new buffer ring.  The old memory stays mapped until no
 * stream is open (cbcmn__bufring_fini()), since a task may still read the
 * buffer it holds.  The kernel no longer reads the old ring's entries: the
 * first one links the list. */
void cbcmn__bufring_retire(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	if (!r->br)
		return;
	*(void **)r->br = r->dead_br;
	r->dead_br = r->br;
	r->br = NULL;
	r->bufs = NULL;
}

/* ---- the shared core ----------------------------------------------------------- */

static int ms_push(struct cbcmn__mshot *m, uint32_t val, uint32_t len)
{
	if (m->qlen == m->qcap) {
		uint32_t cap = m->qcap ? m->qcap * 2 : MS_QUEUE_MIN;
		struct ms_item *q = malloc(cap * sizeof(*q));
		if (!q)
			return -ENOMEM;
		for (uint32_t i = 0; i < m->qlen; i++)
			q[i] = m->q[(m->qhead + i) % m->qcap];
		free(m->q);
		m->q = q;
		m->qhead = 0;
		m->qcap = cap;
	}
	m->q[(m->qhead + m->qlen) % m->qcap] = (struct ms_item){val, len};
	m->qlen++;
	return 0;
}

static struct ms_item ms_pop(struct cbcmn__mshot *m)
{
	struct ms_item it = m->q[m->qhead];
	m->qhead = (m->qhead + 1) % m->qcap;
	m->qlen--;
	return it;
}

/* Something happened on m (a CQE, or the end of its ring): wake its
 * waiter, ours to wake if we claim it, or if cancellation claimed it but
 * left the wake to us (on_cancel: closing waits for the last CQE).  A wait
 * that cancellation woke itself is not touched again. */
static void ms_event(struct cbcmn__exec *e, struct cbcmn__mshot *m)
{
	struct cbcmn__iwait *w = m->waiter;
	if (w && (cbcmn__iwait_claim(w) || w->on_cancel)) {
		m->waiter = NULL;
		cbcmn__iwait_wake(w, e);
	}
}

/* Executor side: a CQE of m's SQE. */
void cbcmn__mshot_cqe(struct cbcmn__exec *e, struct cbcmn__mshot *m, int32_t res, uint32_t flags)
{
	if (!(flags & IORING_CQE_F_MORE))
		m->armed = false; /* its last: re-armed on demand, or freed */
	if (res >= 0 && m->kind == MS_STREAM && (flags & IORING_CQE_F_BUFFER)) {
		uint32_t bid = flags >> IORING_CQE_BUFFER_SHIFT;
		if (res == 0 || ms_push(m, bid, (uint32_t)res) != 0) {
			buf_return(e, bid);
			if (res != 0) {
				m->done = true;
				m->err = -ENOMEM;
			}
		}
		if (res == 0)
			m->done = true; /* EOF */
	} else if (res >= 0 && m->kind == MS_ACCEPT) {
		if (ms_push(m, (uint32_t)res, 0) != 0)
			close(res); /* no room to queue it: refuse it, never leak */
	} else if (res == 0) {
		m->done = true; /* EOF without a buffer */
	} else if (res == -ENOBUFS) {
		/* Every buffer is taken (other streams hold them): re-armed when
		 * the task asks again, after a pause. */
		m->nobufs = true;
		CBCMN__COUNT(e, ring_msgs_backpressure, 1);
	} else if (!m->cancel_sent || res != -ECANCELED) {
		m->done = true;
		m->err = res;
	}
	ms_event(e, m);
}

static void ms_arm(struct cbcmn__mshot *m)
{
	struct io_uring_sqe *sqe = cbcmn__ring_sqe(m->e);
	if (m->kind == MS_STREAM) {
		io_uring_prep_recv_multishot(sqe, m->fd, NULL, 0, 0);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = BUFRING_BGID;
	} else {
		io_uring_prep_multishot_accept(sqe, m->fd, NULL, NULL, (int)m->accept_flags);
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)m | CBCMN__UD_MSHOT);
	m->armed = true;
}

/* The calling task, checked: on an executor, the one that owns m (if any). */
static struct cbcmn_task *ms_self(cbcmn_cx *cx, struct cbcmn__mshot *m, int64_t *err)
{
	if (!cx) {
		*err = -EINVAL;
		return NULL;
	}
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	if (!cbcmn__is_running(t)) {
		*err = -EPERM;
		return NULL;
	}
	if (m && m->e != t->exec) {
		*err = -EXDEV;
		return NULL;
	}
	return t;
}

/* Cancellation of a task about to wait on m, called by the task itself:
 * flag the owner, which ends the wait (cbcmn__mshot_cancel_pending()). */
static void ms_on_cancel(struct cbcmn__iwait *iw)
{
	struct cbcmn__mshot *m = iw->user;
	cbcmn__io_cancel_flag(m->e);
}

/* The executor's thread died (cbcmn__ring_takeover()): the multishot
 * requests went with its ring.  Each stream and acceptor ends as its
 * requests did: a waiter wakes, and the next call returns -ECANCELED (an
 * acceptor first hands out the connections it had accepted).  A stream's
 * queued buffers were the old buffer ring's (cbcmn__bufring_retire()):
 * dropped; the one its task holds stays readable. */
void cbcmn__mshot_orphan_all(struct cbcmn__exec *e)
{
	for (struct cbcmn__mshot *m = e->mshots; m; m = m->next) {
		if (m->kind == MS_STREAM) {
			m->qhead = m->qlen = 0;
			m->held = -1;
		}
		m->armed = m->cancel_sent = m->nobufs = false;
		if (!m->done) {
			m->done = true;
			m->err = -ECANCELED;
		}
		ms_event(e, m);
	}
}

/* Executor side, with the I/O cancellations: wake the cancelled waiters.
 * A stream being closed waits for its last CQE whatever happens. */
void cbcmn__mshot_cancel_pending(struct cbcmn__exec *e)
{
	for (struct cbcmn__mshot *m = e->mshots; m; m = m->next) {
		struct cbcmn__iwait *w = m->waiter;
		if (w && w->on_cancel == ms_on_cancel && cbcmn__iwait_local_cancel(w)) {
			m->waiter = NULL;
			cbcmn__iwait_wake(w, e);
		}
	}
}

/* ms_next() inside: m is busy. */
static int64_t ms_next_busy(struct cbcmn_task *t, struct cbcmn__mshot *m, struct ms_item *it)
{
	if (!(t->rt->cfg.flags & CBCMN_CONFIG_NO_BUDGETS))
		cbcmn__charge(t, CBCMN__B_SYSCALLS, 1);
	for (;;) {
		/* A wait for budget or a pause may have moved the task. */
		if (t->exec != m->e)
			return -EXDEV;
		if (m->qlen) {
			*it = ms_pop(m);
			return 1;
		}
		if (m->done)
			return 0;
		if (cbcmn__task_cancelled(t))
			return CBCMN_ECANCELED;
		if (m->nobufs) {
			m->nobufs = false;
			cbcmn_sleep((cbcmn_cx *)t, NOBUFS_PAUSE_NS);
			continue;
		}
		if (!m->armed)
			ms_arm(m);
		struct cbcmn__iwait iw;
		cbcmn__iwait_init(&iw, t);
		/* Only the owning executor ends the wait (a CQE, or the cancel
		 * flag it is kicked with): m->waiter is its alone. */
		iw.on_cancel = ms_on_cancel;
		iw.local = true;
		iw.user = m;
		m->waiter = &iw;
		if (cbcmn__iwait_block(&iw) == CBCMN__IW_CANCELLED)
			return CBCMN_ECANCELED;
	}
}

/* Wait for the next item, arming as needed.  1 with *it, 0 at the end (then
 * m->err), or CBCMN_ECANCELED / -EXDEV / -EBUSY.  m is busy for the whole
 * call, not only while a CQE is awaited: the task may also wait for budget
 * or for buffers with no waiter on m, and m must not be closed under it. */
static int64_t ms_next(struct cbcmn_task *t, struct cbcmn__mshot *m, struct ms_item *it)
{
	if (m->busy)
		return -EBUSY; /* one task at a time */
	m->busy = true;
	int64_t rc = ms_next_busy(t, m, it);
	m->busy = false;
	return rc;
}

/* Cancel m's SQE and wait for its last CQE; then nothing refers to m. */
static void ms_quiesce(struct cbcmn_task *t, struct cbcmn__mshot *m)
{
	while (m->armed) {
		if (!m->cancel_sent) {
			struct io_uring_sqe *sqe = cbcmn__ring_sqe(m->e);
			io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)m | CBCMN__UD_MSHOT, 0);
			io_uring_sqe_set_data64(sqe, CBCMN__UD_IGNORE);
			sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
			m->cancel_sent = true;
		}
		struct cbcmn__iwait iw;
		cbcmn__iwait_init(&iw, t);
		iw.on_cancel = cbcmn__iwait_ignore_cancel; /* must see the last CQE */
		iw.local = true;
		m->waiter = &iw;
		cbcmn__iwait_block(&iw);
		m->waiter = NULL;
	}
}

static int ms_open(cbcmn_cx *cx, int fd, uint32_t kind, size_t size, struct cbcmn__mshot **out)
{
	int64_t err;
	if (!out || fd < 0)
		return -EINVAL;
	struct cbcmn_task *t = ms_self(cx, NULL, &err);
	if (!t)
		return (int)err;
	struct cbcmn__exec *e = t->exec;
	if (kind == MS_STREAM) {
		int rc = bufring_get(e);
		if (rc)
			return rc;
	} else if (!t->rt->ring_caps.multishot_accept) {
		return -EOPNOTSUPP;
	}
	struct cbcmn__mshot *m = calloc(1, size);
	if (!m)
		return -ENOMEM;
	m->e = e;
	m->fd = fd;
	m->kind = kind;
	m->held = -1;
	e->nmshots++; /* keeps the executor from retiring */
	m->next = e->mshots;
	if (m->next)
		m->next->prev = m;
	e->mshots = m;
	*out = m;
	return 0;
}

static int ms_close(cbcmn_cx *cx, struct cbcmn__mshot *m)
{
	int64_t err;
	if (!m)
		return -EINVAL;
	struct cbcmn_task *t = ms_self(cx, m, &err);
	if (!t)
		return (int)err;
	if (m->busy)
		return -EBUSY;
	m->busy = true; /* for good: no call may start on it while it closes */
	ms_quiesce(t, m);
	if (m->held >= 0)
		buf_return(m->e, (uint32_t)m->held);
	while (m->qlen) {
		struct ms_item it = ms_pop(m);
		if (m->kind == MS_STREAM)
			buf_return(m->e, it.val);
		else
			close((int)it.val);
	}
	m->e->nmshots--;
	if (m->prev)
		m->prev->next = m->next;
	else
		m->e->mshots = m->next;
	if (m->next)
		m->next->prev = m->prev;
	free(m->q);
	free(m);
	return 0;
}

/* ---- receive streams ----------------------------------------------------------- */

int cbcmn_stream_open(cbcmn_cx *cx, int fd, cbcmn_stream **out)
{
	return ms_open(cx, fd, MS_STREAM, sizeof(cbcmn_stream), (struct cbcmn__mshot **)out);
}

int64_t cbcmn_stream_recv(cbcmn_cx *cx, cbcmn_stream *s, const void **data)
{
	int64_t err;
	if (!s || !data)
		return -EINVAL;
	struct cbcmn__mshot *m = &s->ms;
	struct cbcmn_task *t = ms_self(cx, m, &err);
	if (!t)
		return err;
	if (m->busy)
		return -EBUSY; /* before the buffer another task's call handed out */
	if (m->held >= 0) {
		buf_return(m->e, (uint32_t)m->held);
		m->held = -1;
	}
	struct ms_item it;
	int64_t rc = ms_next(t, m, &it);
	if (rc == 0)
		return m->err;
	if (rc < 0)
		return rc;
	m->held = (int32_t)it.val;
	*data = m->e->ring.bufs + (size_t)it.val * CBCMN__BUFRING_SIZE;
	return it.len;
}

int cbcmn_stream_close(cbcmn_cx *cx, cbcmn_stream *s)
{
	return ms_close(cx, s ? &s->ms : NULL);
}

/* ---- acceptors ------------------------------------------------------------------ */

int cbcmn_acceptor_open(cbcmn_cx *cx, int fd, int flags, cbcmn_acceptor **out)
{
	int rc = ms_open(cx, fd, MS_ACCEPT, sizeof(cbcmn_acceptor), (struct cbcmn__mshot **)out);
	if (rc == 0)
		(*out)->ms.accept_flags = (uint32_t)flags;
	return rc;
}

int64_t cbcmn_acceptor_next(cbcmn_cx *cx, cbcmn_acceptor *a)
{
	int64_t err;
	if (!a)
		return -EINVAL;
	struct cbcmn_task *t = ms_self(cx, &a->ms, &err);
	if (!t)
		return err;
	struct ms_item it;
	int64_t rc = ms_next(t, &a->ms, &it);
	if (rc == 0)
		return a->ms.err ? a->ms.err : -EINVAL;
	return rc < 0 ? rc : (int64_t)it.val;
}

int cbcmn_acceptor_close(cbcmn_cx *cx, cbcmn_acceptor *a)
{
	return ms_close(cx, a ? &a->ms : NULL);
}
