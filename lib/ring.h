/* ring.h: private to libcbcmn: each executor's io_uring ring, doorbells and
 * the cross-shard message lanes (docs/IO.md, docs/SCHEDULER.md).
 *
 * One executor = one shard = one thread + one ring + its queues (seed 001).
 * The executor loop follows the time-slice procedure of seed 003: reap the
 * CQEs and make their fibers ready, run ready fibers, submit the SQEs they
 * queued in one io_uring_enter; with nothing to run it parks *in the ring*,
 * so that an I/O completion and a doorbell both wake it.
 *
 * user_data of every SQE is a tagged pointer or code (low 3 bits):
 */
#ifndef CBCMN_RING_H
#define CBCMN_RING_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>

enum {
	CBCMN__UD_REQ = 0,      /* struct cbcmn__ioreq *: the operation */
	CBCMN__UD_LTIMEOUT = 1, /* struct cbcmn__ioreq *: its linked timeout */
	CBCMN__UD_DOORBELL = 2, /* a doorbell arriving (MSG_RING), source id << 3 */
	CBCMN__UD_EVENTFD = 3,  /* the armed eventfd read completed */
	CBCMN__UD_DBSEND = 4,   /* a doorbell we sent failed: target id << 3 */
	CBCMN__UD_IGNORE = 5,   /* cancel requests and the like */
	CBCMN__UD_MSHOT = 6,    /* struct cbcmn__mshot *: a stream or acceptor (stream.c) */
	CBCMN__UD_MASK = 7,
};

/* What the kernel supports, probed once per runtime. */
struct cbcmn__ring_caps {
	uint32_t setup_flags; /* IORING_SETUP_* the rings were created with */
	bool msg_ring;        /* IORING_OP_MSG_RING */
	bool sync_msg_ring;   /* IORING_REGISTER_SEND_MSG_RING (6.13), asked of SQPOLL rings */
	bool socket;          /* IORING_OP_SOCKET */
	bool ext_arg;         /* IORING_FEAT_EXT_ARG: waits take a timeout */
	bool multishot_accept; /* 5.19 (with IORING_OP_SOCKET) */
	bool multishot_recv;  /* 6.0 (with IORING_OP_SEND_ZC), and buffer rings */
	bool nodrop;          /* IORING_FEAT_NODROP */
	bool fixed_files;     /* streams may use fixed files: multishot recv, no SQPOLL; and
			       * cbcmn__fixed_drop_is_prompt() (stream.c) */
	uint32_t plan_entries; /* each ring's SQEs, sized for RLIMIT_MEMLOCK (ring.c) */
};

/* An executor's ring, owner-only but for fd and efd, which other threads
 * read to ring its doorbell: efd is fixed; fd is set by the first ring
 * and kept by the next ones (ring.c), published to doorbell senders by the release of
 * its park word when it goes to sleep (wake.c).  fd is atomic (relaxed):
 * a sender that read the park word long before may read it while a new
 * thread takes over or the ring closes (ring.c), and any number it reads
 * then is the executor's (its old ring, its eventfd put under the number
 * while it has no ring, its new ring) or -1: a published number is never
 * closed before destroy (ring_fd_drop()). */
struct cbcmn__ring {
	struct io_uring u;
	_Atomic int fd;       /* for other threads' MSG_RING */
	int efd;              /* eventfd doorbell, always armed on the ring */
	bool up;              /* io_uring_queue_init succeeded */
	bool enabled;         /* enabled on the owner thread */
	bool registered;      /* its fd is registered in the owner thread's table */
	bool efd_armed;
	uint64_t efd_val;     /* buffer of the armed eventfd read */
	uint32_t entries;     /* SQ size it got: the configured one, or less
			       * where locked memory is short (ring.c) */
	uint32_t inflight;    /* I/O requests still waiting for a CQE */
	bool resubmit;        /* a submit failed with SQEs in the kernel's SQ */
	bool dropped;         /* the kernel dropped CQEs: replace the thread (sched.c) */
	uint32_t overflow_seen; /* the CQ ring's count of dropped CQEs, last read */
	uint32_t defer;       /* loop turns SQEs have waited */
	uint64_t defer_since; /* ... since when (sched.c, ring_may_defer()) */
	uint64_t pick_ns;     /* the mean pick the last deferred SQEs waited through */
	struct cbcmn__ioreq *reqs; /* in flight, for cancellation (io.c) */
	struct cbcmn__bufpool *pool; /* provided buffers for streams (stream.c) */
	struct cbcmn__bufpool *dead_pools; /* those of dead threads' rings, kept (stream.c) */
	/* The streams' fixed-file table, registered when the first stream
	 * opens (stream.c): free slots, a stack. */
	uint32_t *fslots;
	uint32_t fslots_free, fslots_cap;
	bool fslots_tried;    /* registered, or failed to: not asked again */
};

/* A task's I/O request: lives on the task's stack until its last CQE. */
struct cbcmn__ioreq;
struct cbcmn__mshot;
struct cbcmn__bufpool;

/* Each executor's pool of provided buffers for streams, made when its first
 * stream opens (cbcmn_config.stream_buf_*, stream_bufs_max; docs/IO.md):
 * the defaults, and the most buffers one buffer ring can hold. */
#define CBCMN__STREAM_BUF_SIZE 4096u
#define CBCMN__STREAM_BUF_SIZE_MIN 64u
#define CBCMN__STREAM_BUF_SIZE_MAX (1u << 20)
#define CBCMN__STREAM_BUF_SHARE 16u
#define CBCMN__STREAM_BUFS_MAX 8192u
#define CBCMN__STREAM_BUFS_LIMIT 32768u

/* What e's pool holds, for tests (stream.c): incremental or whole
 * buffers, buffers provided, out of the ring (the kernel done with them,
 * not given back), chunks of incremental buffers not given back.  All 0
 * before e's first stream.  On e. */
struct cbcmn__pool_state {
	bool inc;
	uint32_t bufs, out, chunks;
};
void cbcmn__bufpool_state(const struct cbcmn__exec *e, struct cbcmn__pool_state *st);

/* CBCMN_PBUF_INC, read once as rt is made (stream.c): 0, or -EINVAL for
 * a value it does not know, saying so on stderr. */
int cbcmn__pbuf_env(struct cbcmn_runtime *rt);

/* SQEs queued but not yet handed to the kernel.  (io_uring_sq_ready() counts
 * those the kernel has not consumed yet: with SQPOLL that includes SQEs
 * already handed over, which must not be submitted again.) */
static inline unsigned cbcmn__sq_unflushed(const struct io_uring *u)
{
	return u->sq.sqe_tail - u->sq.sqe_head;
}

#endif
