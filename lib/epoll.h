/* epoll.h: private to libcbcmn: the epoll backend (epoll.c; docs/IO.md,
 * "Backends"): each executor's epoll set, its parking and doorbells, and the
 * fiber I/O calls done by readiness.  Only backend.h's dispatch, io.c and
 * timer.c's hook call into it.
 */
#ifndef CBCMN_EPOLL_H
#define CBCMN_EPOLL_H

#include <liburing.h>

#include "runtime.h"

/* At cbcmn_runtime_create(), for each executor: its epoll set and its
 * doorbell eventfd (ring.efd, which cbcmn__efd_ring() writes). */
int cbcmn__ep_init(struct cbcmn__exec *e);
/* The set and what it holds go (the eventfd is ring.c's to close). */
void cbcmn__ep_destroy(struct cbcmn__exec *e);
/* A new thread takes over from one that died: the set and its waits stay
 * as they are (they hold nothing of the old thread's); only wait for it. */
int cbcmn__ep_takeover(struct cbcmn__exec *e);
/* Between tasks: look for readiness without waiting (idle: at once;
 * otherwise once every few tasks). */
void cbcmn__ep_poll(struct cbcmn__exec *e, bool idle);
/* Park: wait for readiness, a doorbell or timeout_ns (0: no limit). */
void cbcmn__ep_wait(struct cbcmn__exec *e, uint64_t timeout_ns);
/* Run the operation sqe describes (prepared by io.c as for a ring) for
 * task t: the system call at once, and on EAGAIN again after readiness.
 * timeout_ns: the task's I/O timeout, 0 for none.  Returns what the call
 * returns (cbcmn_io.h). */
int64_t cbcmn__ep_io(struct cbcmn_task *t, const struct io_uring_sqe *sqe, uint64_t timeout_ns);
/* poll(2) of fd for `events` without waiting (both backends' cbcmn_poll()
 * with a zero timeout): the revents mask, 0 if none, -EBADF (fd not open,
 * or negative), -ENOMEM. */
int64_t cbcmn__ep_poll_now(int fd, uint32_t events);

/* For stream.c, whose multishot requests, polls, timeouts and cancels the
 * backend emulates (epoll_sq.c): an SQE to prepare, never NULL (its
 * pointer is good until the next call); carried out at the executor's
 * next turn, its completions handed to cbcmn__mshot_cqe() as a ring's
 * would be.  The provided-buffer ring its receives take buffers from, as
 * the kernel would (instead of registering it with a ring). */
struct io_uring_sqe *cbcmn__ep_sqe(struct cbcmn__exec *e);
void cbcmn__ep_buf_ring(struct cbcmn__exec *e, struct io_uring_buf_ring *br, uint32_t entries);

#endif
