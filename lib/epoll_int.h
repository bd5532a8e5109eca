/* epoll_int.h: private to the epoll backend's files: epoll.c (the set,
 * parking, fiber I/O) and epoll_sq.c (the SQEs stream.c queues, emulated).
 */
#ifndef CBCMN_EPOLL_INT_H
#define CBCMN_EPOLL_INT_H

#include <signal.h>

#include "epoll.h"
#include "iwait.h"

/* epoll_event.data of the set's own descriptors; a watched one's is its fd. */
#define TAG_EFD UINT64_MAX         /* the doorbell eventfd */
#define TAG_TFD (UINT64_MAX - 1)   /* the park timerfd (no epoll_pwait2) */
/* A busy executor looks for readiness once every this many picks, as the
 * ring loop submits once every 16 (sched.c's RING_BATCH_TURNS). */
#define BATCH_TURNS 16u
#define NEVENTS 64

/* Something watching a descriptor of e's set: a task's wait (ready NULL:
 * claimed and woken) or an emulated request of epoll_sq.c (ready called;
 * it unlinks itself when it is done; it returns true when it stopped
 * before the descriptor said EAGAIN, so that the set must be asked to
 * report it again: an edge-triggered registration would not). */
struct ep_wait {
	/* What a readiness reads first, in one line with an emulated
	 * request's own (struct ep_op puts its ud before): behind the task's
	 * iwait they were a line of their own, a cache miss a chunk on the
	 * echo server's recv (docs/BENCHMARKS.md, "Eighteenth session"). */
	bool (*ready)(struct cbcmn__exec *e, struct ep_wait *w, uint32_t revents);
	struct cbcmn__exec *e;           /* whose set and lists it is on */
	int fd;
	uint32_t events;                 /* EPOLLIN, EPOLLOUT (| EPOLLRDHUP) */
	struct ep_wait *fprev, *fnext;   /* watching fd */
	struct ep_wait *aprev, *anext;   /* all of e's */
	struct cbcmn__iwait iw;          /* a task's */
	/* Lab mode: a task's timeout in real time (the runtime's clock jumps
	 * over waits for the world outside, a ring's linked timeout does
	 * not), on e's list of such waits. */
	uint64_t real_deadline;          /* CLOCK_MONOTONIC ns; 0: none */
	struct ep_wait *tprev, *tnext;
	uint64_t epoch;                  /* the runtime's close count when it began */
	bool closed;                     /* a task's: its descriptor was closed (-EBADF) */
	bool stale;                      /* its registration was made anew for another file */
};

/* The runtime's cbcmn_close()s, for every executor's set (epoll.c): a
 * registration goes silently with its file, so a wait on a descriptor
 * another task closes would never end, and a wake-up from the old file
 * (still open elsewhere) would try the number's next file.  Each close of
 * a descriptor takes a number (seq) and leaves (seq, fd) in a log; each
 * executor reads the log at every look at its set and ends its waits on
 * fd that began before that close.  `watched` counts the waits on
 * descriptors by fd % CLOSE_SLOTS, so that a close nobody waits on rings
 * no other executor's doorbell. */
#define CLOSE_LOG 1024u
#define CLOSE_SLOTS 4096u
struct cbcmn__ep_closes {
	_Alignas(CBCMN__CACHELINE) _Atomic uint64_t seq; /* closes so far */
	/* Close s at [s % CLOSE_LOG]: s's low 32 bits, then fd's (the
	 * entry is s's only if they match: 0 is nobody's, s starts at 1). */
	_Alignas(CBCMN__CACHELINE) _Atomic uint64_t log[CLOSE_LOG];
	_Atomic uint32_t watched[CLOSE_SLOTS];
	/* By fd % CLOSE_SLOTS (epoll.c, fd_ctl()): fd + 1 of the descriptor
	 * a cbcmn_close() is removing from the sets and closing, or 0; and
	 * how many EPOLL_CTL_ADDs or MODs of the slot's numbers are under
	 * way. */
	_Atomic uint32_t closing[CLOSE_SLOTS];
	_Atomic uint32_t arming[CLOSE_SLOTS];
};

struct ep_fd {
	struct ep_wait *head;
	bool added;                      /* registered in the set, as far as we know */
	uint32_t mask;                   /* the events it is armed for (0: disarmed) */
	bool kept;                       /* edge-triggered, kept armed (else one-shot) */
};

/* A completion of an emulated SQE, waiting to be handed out. */
struct ep_cqe {
	uint64_t ud;
	int32_t res;
	uint32_t flags;
};

struct ep_op;

struct cbcmn__ep {
	int epfd;
	int tfd;                         /* -1 until a park needs it */
	bool no_pwait2;                  /* the kernel lacks epoll_pwait2 (before 5.11) */
	struct ep_fd *fds;               /* by descriptor number */
	uint32_t nfds;
	struct ep_wait *all;
	struct ep_wait *timed;           /* waits with a real_deadline (lab mode) */
	uint32_t turns;                  /* loop turns since the last look */
	uint64_t look_ns;                /* ... and when it was (cfg.io_batch_ns) */
	uint64_t close_seen;             /* the runtime's closes this set has applied */
	struct cbcmn__ep_closes *closes; /* the runtime's (made with executor 0's set) */
	/* epoll_sq.c: SQEs queued, completions to hand out, requests in
	 * flight, the buffer ring of stream.c's pool. */
	struct io_uring_sqe *sq;
	uint32_t sq_len, sq_cap;
	struct ep_cqe *cq;
	uint32_t cq_len, cq_cap;
	struct ep_op *ops;               /* in flight on a descriptor */
	struct ep_op *timeouts;          /* in flight on the clock (few: looked at every turn) */
	struct ep_op *done, *done_tail;  /* ended, last completion not handed out: FIFO */
	struct io_uring_buf_ring *br;
	uint32_t br_mask;
	uint16_t br_head;                /* the next entry to take, as the kernel's head */
};

/* epoll.c: start watching w->fd for w->events (linked to e's lists, the
 * registration set with a MOD, whose look at the file reports what is
 * there already: kept armed, edge-triggered, while an emulated request
 * watches, else one-shot); 0, -ENOMEM, -EPERM (a file epoll cannot watch),
 * -EBADF.  Stop watching (unlinked; a task's registration is left armed:
 * a late event finds nobody; the last emulated request's goes back to
 * one-shot for the tasks' waits left, or is removed). */
int cbcmn__ep_watch(struct cbcmn__exec *e, struct ep_wait *w);
void cbcmn__ep_unwatch(struct cbcmn__ep *ep, struct ep_wait *w);

/* epoll.c: make a listening socket O_NONBLOCK for good (docs/IO.md). */
int cbcmn__ep_nonblock(int fd);

/* epoll_pool.c: a call in the blocking pool that the task's cancellation
 * and deadline (cbcmn__now ns, UINT64_MAX none; not in lab mode) interrupt:
 * fn(arg) on a pool thread, retried on an EINTR nobody asked for.  Returns
 * its result (*ran), or CBCMN_ECANCELED / -ETIMEDOUT if it did not happen
 * (never started, or interrupted with EINTR), or the pool's error (-EAGAIN).
 * The interrupt is this signal, without SA_RESTART: init, at each
 * runtime's create on the creating thread, installs it if its action is
 * the default and that thread does not block it, else turns it off. */
#define CBCMN__EP_IRQ_SIG (SIGRTMAX - 3)
void cbcmn__ep_pool_init(void);
int64_t cbcmn__ep_pool_call(struct cbcmn_task *t, int64_t (*fn)(void *arg), void *arg,
			    uint64_t deadline, bool *ran);
/* The interrupt is on: a deadline ends a call blocked in the pool. */
bool cbcmn__ep_pool_interruptible(void);

/* epoll_sq.c */
int cbcmn__ep_sq_init(struct cbcmn__ep *ep);
bool cbcmn__ep_sq_busy(const struct cbcmn__ep *ep);
/* End the emulated request watching with w with err (its registration
 * could not be re-armed): its last completion, handed out in order. */
void cbcmn__ep_sq_fail(struct cbcmn__exec *e, struct ep_wait *w, int err);
/* Submit the queued SQEs, fire due timeouts, hand out the completions. */
void cbcmn__ep_sq_run(struct cbcmn__exec *e);
/* ns until the earliest emulated timeout, UINT64_MAX for none. */
uint64_t cbcmn__ep_sq_next(const struct cbcmn__ep *ep);
void cbcmn__ep_sq_fini(struct cbcmn__ep *ep);

#endif
