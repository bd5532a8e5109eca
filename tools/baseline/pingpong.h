/* pingpong.h: the baselines of the doorbell benchmark: how long one thread
 * takes to wake another and hear back, through the two kernel mechanisms a
 * runtime could ring an idle executor with.
 *
 * Each call runs a ping-pong between two threads of its own, pinned to
 * CPUs 0 and 1 (not pinned if the process may not use both): A sends, B
 * waits and answers, A waits for the answer.  After a warm-up of
 * iters / 10 round trips, five batches of iters / 5 round trips are
 * timed with CLOCK_MONOTONIC; *ns_per_rtt is the median batch's time per
 * round trip.
 *
 * spin = false: each side blocks in the kernel while it waits ("parked",
 * so every message is a sleep and a wake-up).  spin = true: each side
 * busy-polls instead, never sleeping (one CPU per side is burnt).
 *
 * All return 0, or a negative errno without aborting: -EINVAL for iters
 * 0 or a NULL ns_per_rtt, -ENOSYS when the kernel lacks IORING_OP_MSG_RING
 * (or io_uring), -EINVAL from io_uring_setup() for flags it does not know,
 * other -errno from the system calls.  Any thread may call them.
 */
#ifndef CBCMN_TOOLS_PINGPONG_H
#define CBCMN_TOOLS_PINGPONG_H

#include <stdbool.h>
#include <stdint.h>

/* Each side owns an io_uring ring, created on its own thread; a message is
 * an IORING_OP_MSG_RING SQE aimed at the other ring's fd, which posts a
 * CQE there.  The ring flags are the first of these that the kernel takes:
 *   SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG    (6.1+)
 *   COOP_TASKRUN | TASKRUN_FLAG                     (5.19+)
 *   0
 * With DEFER_TASKRUN the kernel delivers a message to the receiving ring
 * as task work that only the receiver's own io_uring_enter(GETEVENTS)
 * runs, so a spinning receiver watches IORING_SQ_TASKRUN and enters the
 * kernel when it is set.  If used_flags is not NULL it gets the flags of
 * the rings used. */
int pp_msgring_rtt(uint32_t iters, bool spin, double *ns_per_rtt);
int pp_msgring_rtt_ex(uint32_t iters, bool spin, double *ns_per_rtt, unsigned *used_flags);

/* The same with exactly these io_uring_setup() flags (no fallback), to
 * compare ring setups.  A spinning receiver on a DEFER_TASKRUN ring
 * without TASKRUN_FLAG enters the kernel on every poll. */
int pp_msgring_rtt_flags(uint32_t iters, bool spin, unsigned setup_flags, double *ns_per_rtt);

/* Each side owns an eventfd; a message is write(1) to the other's.
 * Parked: blocking read(); spinning: non-blocking read() in a loop (a
 * system call per poll: an eventfd has no user-visible state to watch). */
int pp_eventfd_rtt(uint32_t iters, bool spin, double *ns_per_rtt);

#endif
