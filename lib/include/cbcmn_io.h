/* cbcmn_io.h: fiber-blocking I/O on the executor's io_uring ring.
 *
 * Every executor (shard) drives its own ring.  These calls look like the
 * system calls they replace; they put one SQE on the calling task's
 * executor's ring, park the task, and resume it from the CQE.  The thread
 * is never blocked: other tasks run meanwhile.  A task with I/O in flight
 * stays on its shard (it is in no queue, so nothing can steal it).
 *
 * Common rules (docs/IO.md):
 *   - cx is the calling task; every call must be made by that task
 *     (-EPERM from a thread outside the runtime or with another task's
 *     context, -EINVAL for NULL cx).
 *   - The result is what the system call returns on success, or a negative
 *     errno (-EBADF, -ECONNREFUSED, ...).  Short reads and writes are
 *     returned as they are, as by the system call.
 *   - Each call costs one unit of the task's `syscalls` budget (and one op);
 *     a task out of budget waits like any other charge (docs/BUDGETS.md).
 *   - Cancellation: a task that is cancelled while its request is in flight
 *     has the request cancelled (never submitted if it was still queued,
 *     IORING_OP_ASYNC_CANCEL otherwise) and waits for its last completion,
 *     so buffers and descriptors passed in may be released as soon as the
 *     call returns.  A request that took effect anyway returns its result:
 *     the bytes it moved (a MSG_WAITALL one stopped part-way: the count
 *     moved), the descriptor an accept/openat/socket made, the message a
 *     recvmsg took with its SCM_RIGHTS descriptors, all the caller's, or
 *     the error it ran into (a socket's ECONNRESET is reported once); the
 *     task sees the cancellation at its next call.  Only a request that
 *     did not happen returns CBCMN_ECANCELED (= -ECANCELED).  A task
 *     already cancelled gets CBCMN_ECANCELED without submitting anything.
 *   - Timeouts: cbcmn_io_set_timeout() gives each later call of the task a
 *     linked timeout (IORING_OP_LINK_TIMEOUT); a call that runs out of time
 *     is cancelled and returns -ETIMEDOUT.  cbcmn_close() has none: it is
 *     never undone.
 */
#ifndef CBCMN_IO_H
#define CBCMN_IO_H

/* Its types and CBCMN_API: a program may include this header alone (its
 * man pages say so).  cbcmn.h includes this one at its end; the guards
 * make either order one copy of each. */
#include "cbcmn.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The timeout, in ns, that each later I/O call of the task gets (0: none,
 * the default).  Returns the previous value, or -EINVAL for a NULL cx. */
CBCMN_API int64_t cbcmn_io_set_timeout(cbcmn_cx *cx, uint64_t ns);

/* read(2)/write(2) at the file position (offset -1), readv/writev,
 * pread/pwrite at an explicit offset.  Lengths above 0x7ffff000 are cut to
 * it, as by read(2).  On a file that cannot seek (pipe, socket) pread and
 * pwrite ignore the offset, as io_uring does (pread(2) fails: -ESPIPE). */
CBCMN_API int64_t cbcmn_read(cbcmn_cx *cx, int fd, void *buf, size_t len);
CBCMN_API int64_t cbcmn_write(cbcmn_cx *cx, int fd, const void *buf, size_t len);
CBCMN_API int64_t cbcmn_readv(cbcmn_cx *cx, int fd, const struct iovec *iov, int iovcnt);
CBCMN_API int64_t cbcmn_writev(cbcmn_cx *cx, int fd, const struct iovec *iov, int iovcnt);
CBCMN_API int64_t cbcmn_pread(cbcmn_cx *cx, int fd, void *buf, size_t len, off_t off);
CBCMN_API int64_t cbcmn_pwrite(cbcmn_cx *cx, int fd, const void *buf, size_t len, off_t off);

/* Sockets. */
CBCMN_API int64_t cbcmn_recv(cbcmn_cx *cx, int fd, void *buf, size_t len, int flags);
CBCMN_API int64_t cbcmn_send(cbcmn_cx *cx, int fd, const void *buf, size_t len, int flags);
CBCMN_API int64_t cbcmn_recvmsg(cbcmn_cx *cx, int fd, struct msghdr *msg, int flags);
CBCMN_API int64_t cbcmn_sendmsg(cbcmn_cx *cx, int fd, const struct msghdr *msg, int flags);
/* Returns the new descriptor; flags as accept4(2) (SOCK_CLOEXEC, ...). */
CBCMN_API int64_t cbcmn_accept(cbcmn_cx *cx, int fd, struct sockaddr *addr,
			       socklen_t *addrlen, int flags);
CBCMN_API int64_t cbcmn_connect(cbcmn_cx *cx, int fd, const struct sockaddr *addr,
				socklen_t addrlen);
CBCMN_API int64_t cbcmn_shutdown(cbcmn_cx *cx, int fd, int how);
/* Returns the new descriptor. */
CBCMN_API int64_t cbcmn_socket(cbcmn_cx *cx, int domain, int type, int protocol);

/* Files.  cbcmn_close() closes fd even when it is cancelled: a close that
 * was submitted is never undone (nor timed out: the task's I/O timeout
 * does not apply to it). */
CBCMN_API int64_t cbcmn_close(cbcmn_cx *cx, int fd);
CBCMN_API int64_t cbcmn_openat(cbcmn_cx *cx, int dirfd, const char *path, int flags,
			       mode_t mode);
struct statx; /* <sys/stat.h> declares it only under _GNU_SOURCE */
CBCMN_API int64_t cbcmn_statx(cbcmn_cx *cx, int dirfd, const char *path, int flags,
			      unsigned int mask, struct statx *out);
/* fsync(2), or fdatasync(2) with CBCMN_FSYNC_DATASYNC. */
#define CBCMN_FSYNC_DATASYNC 0x1u
CBCMN_API int64_t cbcmn_fsync(cbcmn_cx *cx, int fd, unsigned int flags);

/* Wait until fd is ready for `events` (poll(2)'s POLLIN, POLLOUT, POLLPRI,
 * POLLRDHUP, POLLRDNORM, POLLRDBAND, POLLWRNORM, POLLWRBAND; POLLERR and
 * POLLHUP are always reported), blocking only the calling task: for a
 * descriptor that another library reads and writes itself, non-blocking
 * (OpenSSL, libcurl's multi interface, c-ares, a database client; the
 * pattern: docs/IO.md, "Foreign descriptors").  An IORING_OP_POLL_ADD on
 * the task's ring; on the epoll backend, a wait in the executor's set.
 *
 * Returns the revents mask (> 0: the events of `events` that are ready, and
 * POLLERR / POLLHUP if so), or:
 *   -ETIMEDOUT      timeout_ns ran out first (0: fd was not ready when
 *                   looked at; a zero timeout never waits);
 *   CBCMN_ECANCELED the task was cancelled (its nursery) before fd was ready,
 *                   or before the call (then fd is not looked at); a poll
 *                   that found readiness first returns its mask, and the
 *                   task sees the cancellation at its next call (a wait
 *                   ended by the cancellation or the timeout looks once
 *                   more, as poll(2) with a zero timeout: ready then,
 *                   the mask);
 *   -EBADF          fd is negative or not open; on the epoll backend also a
 *                   cbcmn_close() of fd by any task while this waits;
 *   -EINVAL         NULL cx, a bit in events other than the above, or a
 *                   file that cannot be waited on for those events (a
 *                   regular file asked only for POLLPRI);
 *   -EPERM, -ENOMEM as the other calls.
 * timeout_ns: < 0 no limit of its own, 0 look without waiting, > 0 at most
 * that many ns (in real time, also in lab mode, as the linked timeouts of
 * the other calls); the task's cbcmn_io_set_timeout() applies as well, the
 * shorter one winning.  Readiness is a state, not an event: the caller makes
 * its own non-blocking call afterwards, which may still say EAGAIN (another
 * reader took the data); poll again then.  A descriptor closed with
 * close(2) while polled is not seen on io_uring (the request holds the file;
 * a shutdown(2) of a socket wakes it with POLLHUP): give such waits a
 * timeout.  Costs one unit of the syscalls budget. */
CBCMN_API int64_t cbcmn_poll(cbcmn_cx *cx, int fd, uint32_t events, int64_t timeout_ns);

/* ------------------------------------------------------------------------
 * Multishot: one SQE that keeps delivering (docs/IO.md).
 *
 * A stream receives from a connected socket into buffers of its executor's
 * pool of provided buffers (made on first use, growing with the streams
 * open: cbcmn_config.stream_buf_size, stream_buf_share, stream_bufs_max);
 * each stream holds at most its share of the pool and then stops receiving
 * until its task has taken what it holds, so a task that does not read
 * leaves the other streams their buffers (docs/IO.md); an acceptor accepts
 * connection after connection.  Neither re-arms a poll per event.  Each
 * belongs to the executor of the task that opened it and
 * may only be used by tasks running there (-EXDEV elsewhere): open and use
 * it from a pinned task (cbcmn_nursery_spawn_pinned()).  One task at a time
 * may be inside a call on it: while a task is in cbcmn_stream_recv(),
 * cbcmn_stream_send() or
 * cbcmn_acceptor_next() (waiting for data, for buffers, for budget, or
 * backing off), another call on the object, its close included, returns
 * -EBUSY and changes nothing.  Ownership (docs/IO.md, "Who closes a
 * stream"): a stream or acceptor is its opener's until another task makes a
 * call on it, then the program's; one its opener still owns is closed when
 * the opener is unwound (cancelled at a checkpoint or in a budget wait, a
 * stack overflow), and cbcmn_runtime_destroy() frees whatever is still
 * open.  The socket stays the caller's to close.  -EOPNOTSUPP where the
 * kernel lacks multishot recv and buffer rings (6.0) or multishot accept
 * (5.19).
 */
typedef struct cbcmn_stream cbcmn_stream;
typedef struct cbcmn_acceptor cbcmn_acceptor;

/* Start receiving from socket fd (which stays the caller's to close, after
 * cbcmn_stream_close()).  Returns 0, -EINVAL, -EPERM, -ENOMEM, -EOPNOTSUPP,
 * or CBCMN_EMEMLOCK (the executor's buffer ring, made by its first stream,
 * does not fit in RLIMIT_MEMLOCK even at its smallest: docs/IO.md). */
CBCMN_API int cbcmn_stream_open(cbcmn_cx *cx, int fd, cbcmn_stream **out);
/* The next chunk received (at most stream_buf_size bytes): *data points
 * into a buffer that stays valid until the next call on the stream or its
 * close.  Returns the chunk's length, 0 at end of stream, or a negative
 * errno (a recv(2) error, -ENOMEM, -EXDEV, -EBUSY, CBCMN_ECANCELED).  When
 * the pool is empty and at its limit, waits (without polling) for a buffer
 * to come back; buffers go to the streams waiting for one in the order they
 * began to wait.  Costs one unit of the syscalls budget.  A task already
 * cancelled (or in an actor's halt) receives nothing: CBCMN_ECANCELED at no
 * cost, the chunk the last call returned still held and valid (a task not
 * cancelled may send it), and what came since left for the next call. */
CBCMN_API int64_t cbcmn_stream_recv(cbcmn_cx *cx, cbcmn_stream *s, const void **data);
/* Send len bytes at data, which lie in the chunk the last
 * cbcmn_stream_recv() on s returned, to s's socket, without waiting for
 * them to go: the chunk stays the stream's (valid, not reused) until the
 * kernel has taken all of them, a short send is continued, and the next
 * call on s (cbcmn_stream_recv() or cbcmn_stream_send()) returns a send's
 * failure (once, as a negative errno).  One send at a time per stream: a
 * send waits for the one before, so bytes go out in order.  len 0 only
 * waits for the send before and returns its failure, or 0: what
 * cbcmn_stream_close() does not do (it cancels a send in flight, whose
 * untaken bytes are dropped).  flags as send(2) (MSG_NOSIGNAL...).  The
 * echo path of a server: one SQE and no wake-up per send (docs/IO.md,
 * "Sends on a stream").  Costs one unit of the syscalls budget.  On the epoll
 * backend the bytes are sent before it returns (a unit per send(2) made;
 * one ended after part of them went, cancelled included, returns 0 and
 * leaves its failure to the next call, as on the ring, and one whose task
 * is unwound meanwhile leaves -ECANCELED there), and a sender
 * moved to another executor meanwhile (unpinned, woken elsewhere after a
 * wait) gets the send's result, not -EXDEV: they went.
 * A task already cancelled sends nothing (either backend, a flush too):
 * CBCMN_ECANCELED at no cost, the chunk still held; so does one in an
 * actor's halt (a drop or fini callback), as every I/O call there.
 * Returns 0, -EINVAL (data not in the chunk held), -EXDEV, -EBUSY,
 * CBCMN_ECANCELED or, on the epoll backend with cbcmn_io_set_timeout(),
 * -ETIMEDOUT (nothing of it went; the chunk stays held, for a task not
 * cancelled to send), or a send's error. */
CBCMN_API int64_t cbcmn_stream_send(cbcmn_cx *cx, cbcmn_stream *s, const void *data, size_t len,
				    int flags);
/* Stop receiving, give the buffers back and free s; waits until the kernel
 * has let go of it (an unpinned task moved to another executor meanwhile:
 * returns 0, and s's executor finishes, docs/IO.md).  Returns 0, -EINVAL,
 * -EXDEV or -EBUSY (a task is inside cbcmn_stream_recv() on it: s stays
 * open), or the error of a send not reported yet: s is closed all the
 * same.  -ECANCELED then means a send in flight that the close cancelled
 * before the kernel took all its bytes (the rest were not sent).  From an
 * actor's halt (a drop callback) it does not wait: s's executor frees it
 * when the kernel lets go, and a send it cuts short is not reported. */
CBCMN_API int cbcmn_stream_close(cbcmn_cx *cx, cbcmn_stream *s);

/* Accept connections on listening socket fd; flags as accept4(2). */
CBCMN_API int cbcmn_acceptor_open(cbcmn_cx *cx, int fd, int flags, cbcmn_acceptor **out);
/* The next connection's descriptor, or a negative errno (the accept error
 * that ended the acceptor, -EXDEV, -EBUSY, CBCMN_ECANCELED).  An accept
 * that fails for a cause that passes (EMFILE, ENFILE, ENOMEM, ENOBUFS: out
 * of descriptors or memory; ECONNABORTED, EPROTO and the network errors
 * accept(2) lists: a connection gone before it was taken) does not end the
 * acceptor: the call keeps waiting while it backs off (1 ms, doubling to
 * 100 ms; the connections wait in the listen backlog) and accepts again.
 * Each such failure counts in cbcmn_executor_stats.accept_errors and fires
 * the accept_error probe.  An acceptor holds at most 64 connections not
 * yet taken (more by one pass of the kernel's): then it stops accepting
 * until they are taken, and the listen backlog holds the rest.  Costs one
 * unit of the syscalls budget; a task already cancelled gets
 * CBCMN_ECANCELED at no cost, the connections queued left for the next
 * call. */
CBCMN_API int64_t cbcmn_acceptor_next(cbcmn_cx *cx, cbcmn_acceptor *a);
/* Stop accepting and free a; connections accepted but not taken are
 * closed.  From an actor's halt (a drop callback) it does not wait, as
 * cbcmn_stream_close().  Returns 0, -EINVAL, -EXDEV or -EBUSY. */
CBCMN_API int cbcmn_acceptor_close(cbcmn_cx *cx, cbcmn_acceptor *a);

/* ------------------------------------------------------------------------
 * The blocking pool: for calls io_uring cannot make (getaddrinfo, a
 * library that blocks), so that a task never blocks its executor's thread.
 */
typedef int64_t (*cbcmn_blocking_fn)(void *arg);

/* Run fn(arg) on a thread of the runtime's blocking pool and park the
 * task until it returns; store its return value in *result (may be NULL).
 * Other tasks keep running on the executor meanwhile.  No allocation.
 *
 * The pool (docs/BLOCKING.md): at most cbcmn_config.blocking_threads
 * threads, started only when every existing one is busy, ended after a
 * few seconds without work, joined by cbcmn_runtime_destroy(); more calls
 * wait their turn, first come first served.  fn runs on a plain thread
 * with all signals blocked, not on an executor: from there it may call
 * cbcmn only as a thread outside the runtime does (cx NULL), and must not
 * destroy the runtime.  (Handed its task's cx anyway, the costs of its
 * calls only count there: it never waits for budget, yields or unwinds
 * on the task's behalf; what the budget could not pay is spent to 0, and
 * the task's own next cost waits.)
 *
 * Costs one unit of the task's `syscalls` budget (and one op).  Returns 0;
 * -EINVAL (NULL cx or fn), -EPERM (not called from a task: cx used on a
 * thread that is not one of its runtime's executors), -EAGAIN (no pool
 * thread could be started and none exists), or CBCMN_ECANCELED: the task
 * was cancelled before the call or before fn started (fn never runs,
 * *result is left alone) or while fn ran (fn is not interrupted: the call
 * returns once fn has returned, so arg may be freed afterwards, and
 * *result is set).  A cancellation that comes once fn's result has been
 * handed over is noticed at the task's next blocking call; this one
 * returns 0. */
CBCMN_API int cbcmn_blocking(cbcmn_cx *cx, cbcmn_blocking_fn fn, void *arg, int64_t *result);

#ifdef __cplusplus
}
#endif

#endif /* CBCMN_IO_H */
