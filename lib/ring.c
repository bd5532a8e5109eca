/* ring.c: each executor's io_uring ring: setup, submission, reaping,
 * parking and doorbells (ring.h, docs/IO.md).
 *
 * Setup flags: the best set the kernel accepts, probed once per runtime
 * and then used for every ring, in this order of preference:
 *   SUBMIT_ALL | SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG
 *   SUBMIT_ALL | COOP_TASKRUN | TASKRUN_FLAG
 *   SUBMIT_ALL
 *   (none)
 * DEFER_TASKRUN runs completion work only when the owner asks for events,
 * so a busy executor is never interrupted by its completions; TASKRUN_FLAG
 * makes the kernel say so in the SQ flags, so the loop needs no system call
 * to find out.  With SQPOLL a kernel thread submits, and DEFER_TASKRUN is
 * not allowed: SQPOLL | SUBMIT_ALL | COOP_TASKRUN | TASKRUN_FLAG first.
 *
 * Each executor creates its ring on its own thread, which makes that thread
 * the single issuer; cbcmn_runtime_create() probes the flags first and
 * waits until every ring exists, so no task runs (and no doorbell is rung)
 * before all of them do.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "probes.h"
#include "runtime.h"

#define RING_ENTRIES_DEFAULT 256u

static const uint32_t flag_sets[] = {
	IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
		IORING_SETUP_TASKRUN_FLAG,
	IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
	IORING_SETUP_SUBMIT_ALL,
	0,
};

static const uint32_t sqpoll_sets[] = {
	IORING_SETUP_SQPOLL | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
		IORING_SETUP_TASKRUN_FLAG,
	IORING_SETUP_SQPOLL | IORING_SETUP_SUBMIT_ALL,
	IORING_SETUP_SQPOLL,
};

static int ring_init(struct io_uring *u, uint32_t entries, uint32_t flags, const cbcmn_config *cfg)
{
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	p.flags = flags | IORING_SETUP_CQSIZE;
	p.cq_entries = entries * 2;
	if (flags & IORING_SETUP_SQPOLL)
		p.sq_thread_idle = cfg->sqpoll_idle_ms ? cfg->sqpoll_idle_ms : 100;
	return io_uring_queue_init_params(entries, u, &p);
}

/* What the kernel supports, once per runtime, on the creating thread: the
 * opcodes, and the best setup flags it accepts (tried on small throwaway
 * rings, so that every executor then makes its ring with them at once). */
int cbcmn__ring_probe(struct cbcmn_runtime *rt)
{
	struct io_uring u;
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	int rc = io_uring_queue_init_params(4, &u, &p);
	if (rc < 0)
		return rc; /* -ENOSYS, or -EPERM when io_uring is disabled */
	struct cbcmn__ring_caps *c = &rt->ring_caps;
	c->ext_arg = p.features & IORING_FEAT_EXT_ARG;
	c->nodrop = p.features & IORING_FEAT_NODROP;
	struct io_uring_probe *pr = io_uring_get_probe_ring(&u);
	if (pr) {
		c->msg_ring = io_uring_opcode_supported(pr, IORING_OP_MSG_RING);
		c->socket = io_uring_opcode_supported(pr, IORING_OP_SOCKET);
		/* Multishot accept came with IORING_OP_SOCKET (5.19); multishot
		 * recv with IORING_OP_SEND_ZC (6.0).  No flag to probe them by. */
		c->multishot_accept = c->socket;
		c->multishot_recv = io_uring_opcode_supported(pr, IORING_OP_SEND_ZC);
		io_uring_free_probe(pr);
	}
	io_uring_queue_exit(&u);
	if (!c->ext_arg)
		return -EOPNOTSUPP; /* timed waits need IORING_FEAT_EXT_ARG (5.11) */

	const cbcmn_config *cfg = &rt->cfg;
	const uint32_t *sets = flag_sets;
	size_t nsets = sizeof(flag_sets) / sizeof(flag_sets[0]);
	if (cfg->ring_flags & CBCMN_RING_SQPOLL) {
		sets = sqpoll_sets;
		nsets = sizeof(sqpoll_sets) / sizeof(sqpoll_sets[0]);
	} else if (cfg->ring_flags & CBCMN_RING_PLAIN) {
		sets = flag_sets + 2;
		nsets = 2;
	}
	for (size_t i = 0; i < nsets; i++) {
		rc = ring_init(&u, 8, sets[i], cfg);
		if (rc == 0) {
			io_uring_queue_exit(&u);
			c->setup_flags = sets[i];
			return 0;
		}
		if (rc != -EINVAL)
			return rc; /* out of memory or fds, locked memory: not a flag issue */
	}
	return rc;
}

/* The doorbell eventfd, made with the runtime (threads outside ring it). */
int cbcmn__ring_efd(struct cbcmn__exec *e)
{
	/* Blocking: io_uring polls it; a non-blocking one would make the armed
	 * read complete at once with -EAGAIN. */
	e->ring.efd = eventfd(0, EFD_CLOEXEC);
	return e->ring.efd < 0 ? -errno : 0;
}

static void efd_arm(struct cbcmn__exec *e)
{
	struct io_uring_sqe *sqe = cbcmn__ring_sqe(e);
	io_uring_prep_read(sqe, e->ring.efd, &e->ring.efd_val, sizeof(e->ring.efd_val), 0);
	io_uring_sqe_set_data64(sqe, CBCMN__UD_EVENTFD);
	e->ring.efd_armed = true;
}

/* Make the executor's ring, on its own thread, which becomes its single
 * issuer, with the flags the probe chose. */
int cbcmn__ring_create(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	struct cbcmn__ring *r = &e->ring;
	uint32_t entries = rt->cfg.ring_entries ? rt->cfg.ring_entries : RING_ENTRIES_DEFAULT;
	int rc = ring_init(&r->u, entries, rt->ring_caps.setup_flags, &rt->cfg);
	if (rc)
		return rc;
	r->up = true;
	r->fd = r->u.ring_fd;
	r->enabled = true;
	r->tid = gettid();
	/* io-wq is per thread: the cap applies to this executor's workers
	 * (bounded: file I/O; unbounded: sockets and the like).  Old kernels
	 * lack it: then the kernel's default stays. */
	uint32_t n = rt->cfg.iowq_max_workers ? rt->cfg.iowq_max_workers : 4;
	unsigned int vals[2] = {n, n};
	(void)io_uring_register_iowq_max_workers(&r->u, vals);
	/* Enter through a registered ring fd: a cheaper fd lookup per enter. */
	(void)io_uring_register_ring_fd(&r->u);
	efd_arm(e);
	io_uring_submit(&r->u);
	return 0;
}

/* The ring goes with its thread (a retiring executor); the eventfd stays,
 * for the thread that may start on the executor later. */
void cbcmn__ring_close(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	if (r->up)
		io_uring_queue_exit(&r->u);
	cbcmn__bufring_fini(e);
	r->up = r->enabled = r->efd_armed = false;
	r->inflight = r->defer = 0;
	r->reqs = NULL;
	r->fd = -1; /* a restarted executor gets a new ring and number */
}

void cbcmn__ring_destroy(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	cbcmn__ring_close(e);
	if (r->efd >= 0)
		close(r->efd);
	r->efd = -1;
}

/* The SQ is full: submit it, and with SQPOLL wait for the kernel's poller
 * to take entries (a submit there only wakes it). */
static void sq_full(struct cbcmn__exec *e)
{
	CBCMN__COUNT(e, ring_msgs_backpressure, 1);
	cbcmn__ring_submit(e, false, 0);
	if (e->ring.u.flags & IORING_SETUP_SQPOLL)
		io_uring_sqring_wait(&e->ring.u);
}

/* An SQE, never NULL: a full SQ is submitted first (back-pressure). */
struct io_uring_sqe *cbcmn__ring_sqe(struct cbcmn__exec *e)
{
	struct io_uring_sqe *sqe;
	while (!(sqe = io_uring_get_sqe(&e->ring.u)))
		sq_full(e);
	return sqe;
}

/* Room for n SQEs in a row (a linked pair must not be split by a submit). */
bool cbcmn__ring_sq_room(struct cbcmn__exec *e, unsigned n)
{
	while (io_uring_sq_space_left(&e->ring.u) < n)
		sq_full(e);
	return true;
}

/* Submit what is queued and collect completions into the CQ: one
 * io_uring_enter.  wait_one: also wait for a CQE, at most timeout_ns
 * (0: no limit).  The CQEs are left for cbcmn__ring_reap(). */
void cbcmn__ring_submit(struct cbcmn__exec *e, bool wait_one, uint64_t timeout_ns)
{
	struct io_uring *u = &e->ring.u;
	unsigned n = cbcmn__sq_unflushed(u);
	int rc;
	if (wait_one) {
		struct io_uring_cqe *cqe;
		struct __kernel_timespec ts = {.tv_sec = (long long)(timeout_ns / 1000000000u),
					       .tv_nsec = (long long)(timeout_ns % 1000000000u)};
		rc = io_uring_submit_and_wait_timeout(u, &cqe, 1, timeout_ns ? &ts : NULL, NULL);
	} else {
		rc = io_uring_submit_and_get_events(u);
	}
	CBCMN__COUNT(e, ring_enters, 1);
	if (n)
		CBCMN__COUNT(e, sqes_submitted, n);
	e->ring.defer = 0;
	if (rc == -EBUSY || rc == -EAGAIN) {
		/* The CQ overflowed (kept by the kernel: IORING_FEAT_NODROP):
		 * the caller drains it before submitting more. */
		CBCMN__COUNT(e, ring_msgs_backpressure, 1);
	}
}

static void dispatch(struct cbcmn__exec *e, uint64_t ud, int32_t res, uint32_t flags)
{
	switch (ud & CBCMN__UD_MASK) {
	case CBCMN__UD_REQ:
		cbcmn__io_cqe(e, (struct cbcmn__ioreq *)(uintptr_t)ud, res, flags, false);
		break;
	case CBCMN__UD_LTIMEOUT:
		cbcmn__io_cqe(e, (struct cbcmn__ioreq *)(uintptr_t)(ud & ~(uint64_t)CBCMN__UD_MASK),
			      res, flags, true);
		break;
	case CBCMN__UD_MSHOT:
		cbcmn__mshot_cqe(e, (struct cbcmn__mshot *)(uintptr_t)(ud & ~(uint64_t)CBCMN__UD_MASK),
				 res, flags);
		break;
	case CBCMN__UD_DOORBELL:
		CBCMN__COUNT(e, doorbells_recv, 1);
		break;
	case CBCMN__UD_EVENTFD:
		e->ring.efd_armed = false;
		if (res > 0)
			CBCMN__COUNT(e, doorbells_recv, 1);
		if (res != -ECANCELED && e->ring.enabled)
			efd_arm(e);
		break;
	case CBCMN__UD_DBSEND: {
		/* MSG_RING failed (the target's CQ is full, say): ring its
		 * eventfd instead, never lose a wake-up. */
		uint32_t id = (uint32_t)(ud >> 3);
		if (res < 0 && id < e->rt->nexec) {
			uint64_t one = 1;
			if (write(e->rt->exec[id]->ring.efd, &one, sizeof(one)) < 0)
				(void)0;
		}
		break;
	}
	default:
		break; /* cancel requests, liburing's own timeouts */
	}
}

/* Hand every CQE to its owner; returns how many.  The CQEs are copied out
 * and the CQ advanced before they are handled, so a handler may submit. */
unsigned cbcmn__ring_reap(struct cbcmn__exec *e)
{
	struct io_uring *u = &e->ring.u;
	unsigned total = 0;
	if (IO_URING_READ_ONCE(*u->sq.kflags) & IORING_SQ_CQ_OVERFLOW) {
		CBCMN__COUNT(e, ring_msgs_backpressure, 1);
		io_uring_get_events(u); /* flush the kernel's overflow list */
	}
	for (;;) {
		struct io_uring_cqe *cqes[32];
		unsigned n = io_uring_peek_batch_cqe(u, cqes, 32);
		if (n == 0)
			break;
		struct {
			uint64_t ud;
			int32_t res;
			uint32_t flags;
		} got[32];
		for (unsigned i = 0; i < n; i++) {
			got[i].ud = cqes[i]->user_data;
			got[i].res = cqes[i]->res;
			got[i].flags = cqes[i]->flags;
		}
		io_uring_cq_advance(u, n);
		for (unsigned i = 0; i < n; i++)
			dispatch(e, got[i].ud, got[i].res, got[i].flags);
		total += n;
	}
	if (total)
		CBCMN__COUNT(e, cqes_reaped, total);
	return total;
}

/* Ring target's doorbell: a MSG_RING CQE on its ring from the calling
 * executor's ring, or a write to its eventfd from any other thread (or
 * when MSG_RING is missing or turned off). */
void cbcmn__doorbell(struct cbcmn__exec *target)
{
	struct cbcmn_runtime *rt = target->rt;
	struct cbcmn__exec *me = cbcmn__tls_exec;
	if (me && me->rt == rt && me->ring.enabled && rt->ring_caps.msg_ring &&
	    !(rt->cfg.ring_flags & CBCMN_RING_NO_MSG_RING)) {
		struct io_uring_sqe *sqe = cbcmn__ring_sqe(me);
		io_uring_prep_msg_ring(sqe, target->ring.fd, 0,
				       CBCMN__UD_DOORBELL | ((uint64_t)me->id << 3), 0);
		io_uring_sqe_set_data64(sqe, CBCMN__UD_DBSEND | ((uint64_t)target->id << 3));
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		unsigned n = cbcmn__sq_unflushed(&me->ring.u);
		io_uring_submit(&me->ring.u);
		CBCMN__COUNT(me, ring_enters, 1);
		CBCMN__COUNT(me, sqes_submitted, n);
		CBCMN__COUNT(me, ring_msgs_submitted, 1);
		CBCMN__COUNT(me, doorbells_sent, 1);
		CBCMN_PROBE3(doorbell, (int)me->id, target->id, 0);
		return;
	}
	uint64_t one = 1;
	if (write(target->ring.efd, &one, sizeof(one)) < 0)
		(void)0; /* cannot fail: the counter never nears its maximum */
	if (me && me->rt == rt)
		CBCMN__COUNT(me, doorbells_sent, 1);
	else
		atomic_fetch_add_explicit(&rt->seg.hdr->ext_doorbells, 1, memory_order_relaxed);
	CBCMN_PROBE3(doorbell, me && me->rt == rt ? (int)me->id : -1, target->id, 1);
}

/* The executor's thread died and a new one takes over (sched.c).  The old
 * ring's single issuer is gone, so the new thread needs its own ring, under
 * the same fd number, which other executors use for MSG_RING.  First wait
 * for the old thread to be gone: its exit cancels its requests and waits
 * for them, after which no buffer of ours is in the kernel's hands; their
 * waits end with what the old CQ says (io.c), its streams and acceptors as
 * cancelled. */
int cbcmn__ring_takeover(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%d", (int)r->tid);
	/* Unbounded: until the old thread is gone the kernel may still write
	 * into the buffers of the requests it had in flight. */
	for (int i = 0; access(path, F_OK) == 0; i++) {
		if (i == 10000)
			fprintf(stderr, "cbcmn: executor %u: still waiting for its dead thread %d to "
					"exit\n",
				e->id, (int)r->tid);
		usleep(500);
	}
	struct io_uring old = r->u;
	int oldfd = r->fd;
	r->up = r->enabled = r->efd_armed = false;
	cbcmn__bufring_retire(e); /* registered with the old ring */
	int rc = cbcmn__ring_create(e);
	if (rc)
		return rc;
	/* The new ring under the old number: dup3 swaps atomically, so no
	 * other file can take the number in between. */
	int newfd = r->u.ring_fd;
	if (dup3(newfd, oldfd, O_CLOEXEC) < 0) {
		rc = -errno;
		io_uring_queue_exit(&r->u);
		return rc;
	}
	close(newfd);
	/* Enters go through the registered ring fd, which names the file,
	 * not the number: only the number others use changes. */
	r->u.ring_fd = r->fd = oldfd;
	cbcmn__io_orphan_all(e, &old); /* reads the old CQ: before the unmap */
	munmap(old.sq.sqes, old.sq.ring_entries * sizeof(struct io_uring_sqe));
	if (old.cq.ring_ptr && old.cq.ring_ptr != old.sq.ring_ptr)
		munmap(old.cq.ring_ptr, old.cq.ring_sz);
	munmap(old.sq.ring_ptr, old.sq.ring_sz);
	cbcmn__mshot_orphan_all(e);
	r->inflight = 0;
	return 0;
}
