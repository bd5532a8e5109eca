/* test_iocancel: cancelled fiber I/O (cbcmn_io.h) that took effect returns
 * its result; only an operation that did not happen returns
 * CBCMN_ECANCELED (docs/IO.md, "nothing received is dropped").
 *
 * Each check holds whatever the timing: a call that returned n moved n
 * bytes (or produced its descriptor, its connection, its file), and a call
 * that returned CBCMN_ECANCELED (or -ETIMEDOUT) left everything where it
 * was.  Cancellation comes at every point: while the request's SQE is
 * still queued in the ring (1), racing its completion from another task on
 * the same or another executor and from a thread outside the runtime (2),
 * as a linked timeout (3), as the executor's thread dying (4), and part-way
 * through a MSG_WAITALL send or recv (5). */
#include "helpers.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>

#define MS 1000000ull
#define NOT_RUN (INT64_C(1) << 40) /* the child never made its call */

static const char DATA[8] = "abcdefgh";

/* CBCMN_RING_* of the runtimes sections 1 and 2 make (ring mode tests). */
static uint32_t ring_flags;

/* Bytes waiting in a pipe or socket. */
static int pending(int fd)
{
	int n = -1;
	return ioctl(fd, FIONREAD, &n) < 0 ? -1 : n;
}

static bool is_open(int fd)
{
	return fd >= 0 && fcntl(fd, F_GETFD) >= 0;
}

/* A connection waits in listening socket ls's queue (within ms). */
static bool conn_queued(int ls, int ms)
{
	struct pollfd p = {.fd = ls, .events = POLLIN};
	return poll(&p, 1, ms) == 1;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void busy(uint64_t n)
{
	for (volatile uint64_t i = 0; i < n; i++)
		;
}

/* A listening TCP socket on loopback, its address in *a. */
static int listener(struct sockaddr_in *a)
{
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(ls >= 0);
	*a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(*a);
	assert_int_equal(bind(ls, (struct sockaddr *)a, sizeof(*a)), 0);
	assert_int_equal(listen(ls, 128), 0);
	assert_int_equal(getsockname(ls, (struct sockaddr *)a, &al), 0);
	return ls;
}

/* Send 8 bytes and descriptor fd over unix socket s (SCM_RIGHTS). */
static bool send_fd(int s, int fd)
{
	char cb[CMSG_SPACE(sizeof(int))];
	memset(cb, 0, sizeof(cb));
	struct iovec iov = {(void *)DATA, sizeof(DATA)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb,
			   .msg_controllen = sizeof(cb)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(s, &m, MSG_NOSIGNAL) == (ssize_t)sizeof(DATA);
}

/* The descriptor a received message carried, or -1. */
static int fd_of(struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int fd;
			memcpy(&fd, CMSG_DATA(c), sizeof(int));
			return fd;
		}
	return -1;
}

/* Receive what send_fd() sent, with plain recvmsg(2): the descriptor or -1. */
static int recv_fd(int s)
{
	char b[sizeof(DATA)], cb[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {b, sizeof(b)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb,
			   .msg_controllen = sizeof(cb)};
	if (recvmsg(s, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) != (ssize_t)sizeof(DATA))
		return -1;
	return fd_of(&m);
}

/* ---- the operations and what each one leaves behind ----------------------- */

enum op {
	OP_RECV,    /* 8 bytes wait in the socket */
	OP_READ,    /* 8 bytes wait in the pipe */
	OP_READV,
	OP_RECVMSG, /* 8 bytes and a descriptor wait in the socket */
	OP_SEND,    /* the socket has room */
	OP_WRITE,   /* the pipe has room */
	OP_WRITEV,
	OP_SENDMSG,
	OP_SEND_FULL, /* the socket is full until the event reads from its peer */
	OP_ACCEPT,  /* a connection waits (after the event in the races) */
	OP_CONNECT, /* to a listening socket */
	OP_OPENAT,  /* O_CREAT | O_EXCL of a new file */
	OP_PWRITE,  /* to an empty file */
	OP_PREAD,   /* from a file with 8 bytes */
	OP_SHUTDOWN, /* SHUT_WR of a socket */
	OP_SOCKET,
	OP_RECV_RESET, /* the peer closes with data unread: recv fails, once */
	OP_N
};

static const char *const op_name[OP_N] = {
	"recv", "read", "readv", "recvmsg", "send", "write", "writev", "sendmsg", "send (full)",
	"accept", "connect", "openat", "pwrite", "pread", "shutdown", "socket", "recv (reset)",
};

struct fx {
	enum op op;
	int a, b;   /* a: the task's end; b: the other end (the test's) */
	int ls, client, passed;
	struct sockaddr_in addr;
	char path[64];
	int prefill;  /* bytes put in the way of OP_SEND_FULL */
	int drained;  /* bytes the event took out of b */
	bool evented; /* fx_event() happened */
	uint64_t timeout_ns; /* a linked timeout on the call (section 3) */
	uint8_t buf[64];
	int got_fd;   /* what the task's recvmsg received */
	int64_t rc;
	bool cancelled_after; /* the task saw it was cancelled when the call returned */
	int64_t next_rc;      /* its next call then */
	_Atomic int entered;
	cbcmn_nursery *n;
	/* The child's executor's sqes_submitted as the call began (section 1). */
	_Atomic uint64_t sub_at_call;
};

/* SQEs executor i has handed to the kernel so far (a live counter). */
static uint64_t sqes_submitted(cbcmn_runtime *rt, uint32_t i)
{
	cbcmn_stats s;
	cbcmn_executor_stats per[2];
	assert_true(i < 2);
	if (cbcmn_stats_snapshot(rt, &s, per, 2) != 0)
		return 0;
	return per[i].sqes_submitted;
}

static void fx_open(struct fx *f, enum op op)
{
	memset(f, 0, sizeof(*f));
	f->op = op;
	f->a = f->b = f->ls = f->client = f->passed = f->got_fd = -1;
	switch (op) {
	case OP_RECV:
	case OP_RECVMSG:
	case OP_SEND:
	case OP_SENDMSG:
	case OP_SEND_FULL:
	case OP_SHUTDOWN: {
		int sv[2];
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		f->a = sv[0];
		f->b = sv[1];
		if (op == OP_SEND_FULL) {
			int small = 4096;
			setsockopt(f->a, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
		}
		break;
	}
	case OP_READ:
	case OP_READV:
	case OP_WRITE:
	case OP_WRITEV: {
		int p[2];
		assert_int_equal(pipe2(p, O_CLOEXEC), 0);
		bool rd = op == OP_READ || op == OP_READV;
		f->a = rd ? p[0] : p[1];
		f->b = rd ? p[1] : p[0];
		break;
	}
	case OP_ACCEPT:
	case OP_CONNECT:
		f->ls = listener(&f->addr);
		break;
	case OP_OPENAT:
	case OP_PWRITE:
	case OP_PREAD:
		snprintf(f->path, sizeof(f->path), "/tmp/cbcmn-iocancel-%d-%d", (int)getpid(), op);
		unlink(f->path);
		break;
	default:
		break;
	}
}

static void fx_close(struct fx *f)
{
	int fds[] = {f->a, f->b, f->ls, f->client, f->passed};
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (f->path[0])
		unlink(f->path);
}

/* A new unix connection whose peer (b) has a byte it has not read: its
 * close resets the connection (ECONNRESET at a).  No cmocka assertion:
 * tasks arm too. */
static bool reset_pair(struct fx *f)
{
	if (f->a >= 0)
		close(f->a);
	if (f->b >= 0)
		close(f->b);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return false;
	f->a = sv[0];
	f->b = sv[1];
	return write(f->a, "x", 1) == 1;
}

/* Before each call: what it works on, in its initial state.  False if it
 * could not be made. */
static bool fx_arm(struct fx *f)
{
	f->rc = NOT_RUN;
	f->got_fd = -1;
	f->cancelled_after = false;
	f->drained = 0;
	f->prefill = 0;
	f->evented = false;
	atomic_store(&f->entered, 0);
	memset(f->buf, 0xAA, sizeof(f->buf));
	switch (f->op) {
	case OP_SEND_FULL:
		/* Fill the socket: the send waits in the kernel. */
		for (;;) {
			ssize_t n = send(f->a, f->buf, sizeof(f->buf), MSG_DONTWAIT | MSG_NOSIGNAL);
			if (n <= 0)
				break;
			f->prefill += (int)n;
		}
		break;
	case OP_ACCEPT:
		f->client = -1;
		break;
	case OP_CONNECT:
		if (f->a >= 0)
			close(f->a);
		f->a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(f->a >= 0);
		break;
	case OP_OPENAT:
		unlink(f->path);
		break;
	case OP_PWRITE:
	case OP_PREAD:
		if (f->a >= 0)
			close(f->a);
		f->a = open(f->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		assert_true(f->a >= 0);
		if (f->op == OP_PREAD)
			assert_int_equal(pwrite(f->a, DATA, sizeof(DATA), 0), (ssize_t)sizeof(DATA));
		break;
	case OP_SHUTDOWN:
		if (f->a >= 0) {
			close(f->a);
			close(f->b);
		}
		{
			int sv[2];
			assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
			f->a = sv[0];
			f->b = sv[1];
		}
		break;
	case OP_RECV_RESET:
		return reset_pair(f);
	default:
		break;
	}
	return true;
}

/* What the call waits for (the peer's side).  Plain system calls: run by a
 * task or a thread. */
static bool fx_event(struct fx *f)
{
	f->evented = true;
	switch (f->op) {
	case OP_RECV:
	case OP_READ:
	case OP_READV:
		return write(f->b, DATA, sizeof(DATA)) == (ssize_t)sizeof(DATA);
	case OP_RECVMSG:
		if (f->passed < 0)
			f->passed = open("/dev/null", O_RDONLY | O_CLOEXEC);
		return send_fd(f->b, f->passed);
	case OP_SEND_FULL: {
		/* Make room: the waiting send goes on. */
		char tmp[8192];
		ssize_t n = recv(f->b, tmp, sizeof(tmp), MSG_DONTWAIT);
		if (n > 0)
			f->drained += (int)n;
		return n > 0;
	}
	case OP_RECV_RESET:
		close(f->b);
		f->b = -1;
		return true;
	case OP_ACCEPT: {
		f->client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		/* Blocking: on loopback the connection is queued when it returns. */
		return f->client >= 0 &&
		       connect(f->client, (struct sockaddr *)&f->addr, sizeof(f->addr)) == 0;
	}
	default:
		return true; /* the call needs nothing to complete */
	}
}

/* The call, made by the task under test. */
static int64_t fx_child(cbcmn_cx *cx, void *arg)
{
	struct fx *f = arg;
	struct iovec iov = {f->buf, sizeof(f->buf)};
	struct iovec oiov = {(void *)DATA, sizeof(DATA)};
	char cb[CMSG_SPACE(sizeof(int))];
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	int64_t rc;
	if (f->timeout_ns)
		cbcmn_io_set_timeout(cx, f->timeout_ns);
	atomic_store(&f->sub_at_call, sqes_submitted(cbcmn_cx_runtime(cx), 0));
	atomic_store(&f->entered, 1);
	switch (f->op) {
	case OP_RECV:
		rc = cbcmn_recv(cx, f->a, f->buf, sizeof(f->buf), 0);
		break;
	case OP_READ:
		rc = cbcmn_read(cx, f->a, f->buf, sizeof(f->buf));
		break;
	case OP_READV:
		rc = cbcmn_readv(cx, f->a, &iov, 1);
		break;
	case OP_RECVMSG:
		m.msg_control = cb;
		m.msg_controllen = sizeof(cb);
		rc = cbcmn_recvmsg(cx, f->a, &m, MSG_CMSG_CLOEXEC);
		if (rc > 0)
			f->got_fd = fd_of(&m);
		break;
	case OP_SEND:
	case OP_SEND_FULL:
		rc = cbcmn_send(cx, f->a, DATA, sizeof(DATA), MSG_NOSIGNAL);
		break;
	case OP_WRITE:
		rc = cbcmn_write(cx, f->a, DATA, sizeof(DATA));
		break;
	case OP_WRITEV:
		rc = cbcmn_writev(cx, f->a, &oiov, 1);
		break;
	case OP_SENDMSG:
		m.msg_iov = &oiov;
		rc = cbcmn_sendmsg(cx, f->a, &m, MSG_NOSIGNAL);
		break;
	case OP_ACCEPT:
		rc = cbcmn_accept(cx, f->ls, NULL, NULL, SOCK_CLOEXEC);
		break;
	case OP_CONNECT:
		rc = cbcmn_connect(cx, f->a, (struct sockaddr *)&f->addr, sizeof(f->addr));
		break;
	case OP_OPENAT:
		rc = cbcmn_openat(cx, AT_FDCWD, f->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		break;
	case OP_PWRITE:
		rc = cbcmn_pwrite(cx, f->a, DATA, sizeof(DATA), 0);
		break;
	case OP_PREAD:
		rc = cbcmn_pread(cx, f->a, f->buf, sizeof(f->buf), 0);
		break;
	case OP_SHUTDOWN:
		rc = cbcmn_shutdown(cx, f->a, SHUT_WR);
		break;
	case OP_SOCKET:
		rc = cbcmn_socket(cx, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		break;
	case OP_RECV_RESET:
		rc = cbcmn_recv(cx, f->a, f->buf, sizeof(f->buf), 0);
		break;
	default:
		rc = -ENOSYS;
	}
	f->cancelled_after = cbcmn_cx_cancelled(cx);
	f->rc = rc;
	/* A cancellation that came once the call had its result is seen at
	 * the next call, which does nothing. */
	if (f->cancelled_after)
		f->next_rc = cbcmn_read(cx, f->a >= 0 ? f->a : 0, f->buf, 0);
	if (f->timeout_ns)
		cbcmn_io_set_timeout(cx, 0);
	return 0;
}

/* After the call: it took effect exactly when it says so.  NULL, or what is
 * wrong.  Cleans up what the call made. */
static const char *fx_check(struct fx *f)
{
	int64_t rc = f->rc;
	/* Whether the call reports that it did not happen. */
	bool none = rc == NOT_RUN || rc == CBCMN_ECANCELED ||
		    (f->timeout_ns && rc == -ETIMEDOUT);
	const char *bad = NULL;
	char tmp[64];
	switch (f->op) {
	case OP_RECV:
	case OP_READ:
	case OP_READV: {
		int want = f->evented ? (int)sizeof(DATA) : 0; /* what the event wrote */
		if (none ? pending(f->a) != want
			 : rc <= 0 || rc > want || pending(f->a) != want - rc ||
				   memcmp(f->buf, DATA, (size_t)rc) != 0)
			bad = none ? "reported cancelled, but its bytes are gone"
				   : "returned bytes that were not consumed in order";
		/* What is left continues where the call stopped. */
		int left = pending(f->a);
		if (!bad && left > 0 &&
		    (read(f->a, tmp, (size_t)left) != left ||
		     memcmp(tmp, DATA + (sizeof(DATA) - (size_t)left), (size_t)left) != 0))
			bad = "the rest of the stream is not what follows";
		break;
	}
	case OP_RECVMSG: {
		int want = f->evented ? (int)sizeof(DATA) : 0;
		if (none) {
			if (pending(f->a) != want)
				bad = "reported cancelled, but its message is gone";
			else if (want) {
				int fd = recv_fd(f->a);
				if (!is_open(fd))
					bad = "the descriptor left in the message is lost";
				if (fd >= 0)
					close(fd);
			}
		} else if (rc != (int64_t)sizeof(DATA) || !is_open(f->got_fd)) {
			bad = "received, but the passed descriptor is not open";
		}
		if (f->got_fd >= 0)
			close(f->got_fd);
		break;
	}
	case OP_SEND:
	case OP_WRITE:
	case OP_WRITEV:
	case OP_SENDMSG: {
		int got = pending(f->b);
		if (got != (none ? 0 : (int)rc))
			bad = none ? "reported cancelled, but the peer got the bytes"
				   : "the peer did not get what the call says it sent";
		if (got > 0 && read(f->b, tmp, (size_t)got) != got)
			bad = "could not drain the peer";
		break;
	}
	case OP_SEND_FULL: {
		/* Everything the peer gets: the prefill and what the call sent. */
		int total = f->drained;
		for (;;) {
			char big[8192];
			ssize_t n = recv(f->b, big, sizeof(big), MSG_DONTWAIT);
			if (n <= 0)
				break;
			total += (int)n;
		}
		if (!none && rc <= 0)
			bad = "failed";
		else if (total != f->prefill + (none ? 0 : (int)rc))
			bad = none ? "reported cancelled, but the peer got the bytes"
				   : "the peer did not get what the call says it sent";
		break;
	}
	case OP_ACCEPT: {
		bool queued = f->client >= 0 && conn_queued(f->ls, none ? 200 : 0);
		if (none ? f->client >= 0 && !queued : !is_open((int)rc) || queued)
			bad = none ? "reported cancelled, but the connection is gone"
				   : "accepted, but the connection is still queued";
		if (queued) {
			int c = accept4(f->ls, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0)
				close(c);
		}
		if (!none && rc >= 0)
			close((int)rc);
		if (f->client >= 0)
			close(f->client);
		f->client = -1;
		break;
	}
	case OP_CONNECT: {
		struct sockaddr_in peer;
		socklen_t pl = sizeof(peer);
		bool connected = getpeername(f->a, (struct sockaddr *)&peer, &pl) == 0;
		if (none ? connected : rc != 0 || !connected)
			bad = none ? "reported cancelled, but the socket is connected"
				   : "returned 0, but the socket is not connected";
		if (conn_queued(f->ls, 0)) {
			int c = accept4(f->ls, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0)
				close(c);
		}
		break;
	}
	case OP_OPENAT: {
		bool exists = access(f->path, F_OK) == 0;
		if (none ? exists : !is_open((int)rc) || !exists)
			bad = none ? "reported cancelled, but the file was created"
				   : "returned a descriptor, but no file is there";
		if (!none && rc >= 0)
			close((int)rc);
		break;
	}
	case OP_PWRITE: {
		struct stat st;
		fstat(f->a, &st);
		if (st.st_size != (none ? 0 : rc))
			bad = none ? "reported cancelled, but the file was written"
				   : "the file does not hold what the call says it wrote";
		break;
	}
	case OP_PREAD:
		if (none ? f->buf[0] != 0xAA
			 : rc != (int64_t)sizeof(DATA) || memcmp(f->buf, DATA, sizeof(DATA)) != 0)
			bad = none ? "reported cancelled, but the buffer was written"
				   : "the buffer does not hold what the call says it read";
		break;
	case OP_SHUTDOWN: {
		ssize_t n = recv(f->b, tmp, sizeof(tmp), MSG_DONTWAIT);
		bool eof = n == 0;
		if (none ? eof : rc != 0 || !eof)
			bad = none ? "reported cancelled, but the peer saw the end"
				   : "returned 0, but the peer did not see the end";
		break;
	}
	case OP_SOCKET:
		if (!none && !is_open((int)rc))
			bad = "returned a descriptor that is not open";
		if (!none && rc >= 0)
			close((int)rc);
		break;
	case OP_RECV_RESET: {
		/* The reset is reported once: by the call, or by the next recv. */
		ssize_t n = recv(f->a, tmp, sizeof(tmp), MSG_DONTWAIT);
		bool reset_left = n < 0 && errno == ECONNRESET;
		if (none ? f->evented && !reset_left : rc != -ECONNRESET || n != 0)
			bad = none ? "reported cancelled, but the reset is gone"
				   : "returned the reset, but the socket still has it";
		break;
	}
	default:
		bad = "?";
	}
	if (!bad && !none && rc < 0 && f->op != OP_RECV_RESET)
		bad = "failed";
	if (!bad && f->cancelled_after && f->next_rc != CBCMN_ECANCELED)
		bad = "the call after the cancellation did not return CBCMN_ECANCELED";
	return bad;
}

static void fx_report(struct fx *f, const char *how, const char *bad)
{
	printf("%s cancelled %s: rc %lld (%s): %s", op_name[f->op], how, (long long)f->rc,
		 f->rc == NOT_RUN ? "not run" : cbcmn_strerror(f->rc), bad);
	printf("\n");
}

/* Who cancels. */
enum { BY_SAME_TASK, BY_THREAD, BY_OTHER_EXEC };
static const char *const by_name[] = {"by a task on its executor", "by a thread outside",
				      "by a task on another executor"};

/* ---- 1. cancelled while its SQE is still queued ---------------------------- *
 *
 * The executor submits the SQEs of the tasks it ran once every 16 picks (or
 * when it has nothing to run): a request cancelled before that must not be
 * submitted at all.  Submitted behind its cancel, it completes at once
 * when what it waits for is there already (data, a connection, room), and
 * the call used to return CBCMN_ECANCELED anyway: the bytes it consumed, or
 * sent, were lost to the caller.  Each call here finds what it needs ready
 * (fx_event() before the call), is parked with its SQE queued, and is
 * cancelled before the executor's next submit:
 *   - by a task on the same executor, which runs next;
 *   - by a thread outside the runtime, while a task holds the executor;
 *   - by a task on another executor, likewise.
 */

struct queued {
	struct fx *f;
	cbcmn_runtime *rt;
	_Atomic int hold;    /* the holder keeps the executor busy meanwhile */
	_Atomic int started, holding;
	uint64_t sub_at_cancel; /* executor 0's sqes_submitted at the cancel */
};

/* Cancel the child's nursery, noting first whether its SQE is still ours:
 * executor 0 may have submitted it already, for a reason of its own (a
 * doorbell's completion, posted late under load, makes it enter the
 * kernel: IORING_SQ_TASKRUN). */
static void queued_cancel(struct queued *q)
{
	q->sub_at_cancel = sqes_submitted(q->rt, 0);
	TASK_CHECK(cbcmn_nursery_cancel(q->f->n) == 0);
}

/* Keeps executor 0 busy without submitting: lets the child park first,
 * then spins (no yield, so nothing is submitted) until released. */
static int64_t holder(cbcmn_cx *cx, void *arg)
{
	struct queued *q = arg;
	atomic_store(&q->started, 1);
	while (!atomic_load(&q->f->entered))
		cbcmn_yield(cx);
	atomic_store(&q->holding, 1);
	uint64_t end = t_now_ns() + 5000 * MS;
	while (atomic_load(&q->hold) && t_now_ns() < end)
		sched_yield();
	return 0;
}

/* Same executor: the canceller is the task that spawned the child. */
static int64_t queued_same_task(cbcmn_cx *cx, void *arg)
{
	struct queued *q = arg;
	struct fx *f = q->f;
	TASK_CHECK(cbcmn_nursery_open(q->rt, cx, &f->n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, f->n, fx_child, f, NULL) == 0);
	/* One executor: the child runs, queues its SQE and parks before we
	 * run again. */
	for (int i = 0; i < 100 && !atomic_load(&f->entered); i++)
		cbcmn_yield(cx);
	TASK_CHECK(atomic_load(&f->entered));
	queued_cancel(q);
	cbcmn_nursery_await_all(cx, f->n);
	return 0;
}

/* Another executor: the child and the holder on executor 0, us on 1. */
static int64_t queued_other_exec(cbcmn_cx *cx, void *arg)
{
	struct queued *q = arg;
	struct fx *f = q->f;
	cbcmn_nursery *hn;
	TASK_CHECK(cbcmn_nursery_open(q->rt, cx, &hn) == 0);
	TASK_CHECK(cbcmn_nursery_open(q->rt, cx, &f->n) == 0);
	/* The holder first: with nothing to run, executor 0 would submit
	 * the child's SQE at once. */
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, hn, 0, holder, q, NULL) == 0);
	while (!atomic_load(&q->started))
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, f->n, 0, fx_child, f, NULL) == 0);
	while (!atomic_load(&q->holding))
		cbcmn_yield(cx);
	queued_cancel(q);
	atomic_store(&q->hold, 0);
	cbcmn_nursery_await_all(cx, f->n);
	cbcmn_nursery_await_all(cx, hn);
	return 0;
}

enum queued_end { QUEUED_OK, QUEUED_BAD, QUEUED_SUBMITTED };

/* A few hundred picks, so that the executor has a mean pick time: without
 * one it defers no SQE (sched.c, ring_may_defer(): no guess, no wait), and
 * the cases below need theirs still queued. */
static int64_t warm_picks(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	for (int i = 0; i < 600; i++)
		cbcmn_yield(cx);
	return 0;
}

static enum queued_end queued_run(enum op op, int by, uint64_t timeout_ns)
{
	struct fx f;
	fx_open(&f, op);
	assert_true(fx_arm(&f));
	f.timeout_ns = timeout_ns;
	assert_true(fx_event(&f));
	/* Batches by picks alone: the SQE must still be queued after the
	 * holder's few short picks, however slow a loaded machine makes
	 * them (the time bound, cfg.io_batch_ns, would send it on). */
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = by == BY_SAME_TASK ? 1 : 2;
	cfg.ring_flags = ring_flags;
	cfg.io_batch_ns = UINT64_MAX / 4;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	for (uint32_t x = 0; x < cfg.workers; x++)
		assert_int_equal(t_run_pinned(rt, x, warm_picks, NULL), 0);
	struct queued q = {.f = &f, .rt = rt, .hold = 1};
	if (by == BY_SAME_TASK) {
		t_run(rt, queued_same_task, &q, 0);
	} else if (by == BY_OTHER_EXEC) {
		assert_int_equal(t_run_pinned(rt, 1, queued_other_exec, &q), 0);
		ASSERT_TASK_CHECKS();
	} else {
		cbcmn_nursery *hn;
		assert_int_equal(cbcmn_nursery_open(rt, NULL, &hn), 0);
		assert_int_equal(cbcmn_nursery_open(rt, NULL, &f.n), 0);
		assert_int_equal(cbcmn_nursery_spawn_pinned(NULL, hn, 0, holder, &q, NULL), 0);
		uint64_t end = t_now_ns() + 5000 * MS;
		while (!atomic_load(&q.started) && t_now_ns() < end)
			sched_yield();
		assert_int_equal(cbcmn_nursery_spawn_pinned(NULL, f.n, 0, fx_child, &f, NULL), 0);
		while (!atomic_load(&q.holding) && t_now_ns() < end)
			sched_yield();
		assert_true(atomic_load(&q.holding));
		queued_cancel(&q);
		atomic_store(&q.hold, 0);
		cbcmn_nursery_await_all(NULL, f.n);
		cbcmn_nursery_await_all(NULL, hn);
		ASSERT_TASK_CHECKS();
	}
	t_destroy(rt);
	const char *bad = fx_check(&f);
	enum queued_end end = QUEUED_OK;
	/* Cancelled before the executor submitted it: it must not happen.
	 * Submitted before the cancel, it did what it says (fx_check()). */
	if (!bad && f.rc != CBCMN_ECANCELED) {
		if (q.sub_at_cancel != atomic_load(&f.sub_at_call))
			end = QUEUED_SUBMITTED;
		else
			bad = "it ran: it was still queued when cancelled";
	}
	if (bad) {
		fx_report(&f, by_name[by], bad);
		end = QUEUED_BAD;
	}
	fx_close(&f);
	return end;
}

/* One case until its SQE was still queued at the cancel (a few tries). */
static bool queued_case(enum op op, int by, uint64_t timeout_ns)
{
	for (int i = 0; i < 20; i++) {
		enum queued_end end = queued_run(op, by, timeout_ns);
		if (end != QUEUED_SUBMITTED)
			return end == QUEUED_OK;
	}
	printf("  op %d, cancelled %s: submitted before the cancel 20 times in a row\n", op,
	       by_name[by]);
	return false;
}

static void queued_all(int by)
{
	int fds0 = t_count_fds();
	int bad = 0;
	for (int op = 0; op < OP_N; op++) {
		if (op == OP_SEND_FULL)
			continue; /* waits whatever happens: section 2 */
		bad += !queued_case((enum op)op, by, 0);
	}
	/* With a linked timeout: its SQE is queued behind the call's. */
	bad += !queued_case(OP_RECV, by, 5000 * MS);
	bad += !queued_case(OP_SEND, by, 5000 * MS);
	assert_int_equal(bad, 0);
	assert_int_equal(t_count_fds(), fds0);
}

static void test_cancel_queued_by_same_executor_has_no_effect(void **state)
{
	(void)state;
	T_SKIP_UNLESS_IO_URING("a call queued in the SQ, not yet submitted");
	queued_all(BY_SAME_TASK);
}

static void test_cancel_queued_from_thread_has_no_effect(void **state)
{
	(void)state;
	T_SKIP_UNLESS_IO_URING("a call queued in the SQ, not yet submitted");
	queued_all(BY_THREAD);
}

static void test_cancel_queued_from_other_executor_has_no_effect(void **state)
{
	(void)state;
	T_SKIP_UNLESS_IO_URING("a call queued in the SQ, not yet submitted");
	queued_all(BY_OTHER_EXEC);
}

/* The same under the other ring set-ups: plain rings (completions run at
 * the thread's next system call, not when it asks for them), SQPOLL (a
 * kernel thread takes the SQEs once submitted: one still queued is ours to
 * turn into a NOP all the same), eventfd doorbells. */
static void test_cancel_queued_in_each_ring_mode(void **state)
{
	(void)state;
	T_SKIP_UNLESS_IO_URING("a call queued in the SQ, not yet submitted");
	static const uint32_t modes[] = {CBCMN_RING_PLAIN, CBCMN_RING_SQPOLL,
					 CBCMN_RING_NO_MSG_RING};
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		ring_flags = modes[i];
		queued_all(BY_SAME_TASK);
		queued_all(BY_THREAD);
	}
	ring_flags = 0;
}

/* ---- 2. cancellation racing the completion ------------------------------- *
 *
 * The call waits for its event (data, a connection, room) or has what it
 * needs already; the event and the cancellation come in either order, at
 * random moments: before the child runs, with its SQE queued, in flight,
 * as the CQE is posted, after it was reaped but before the task resumed.
 * Whatever wins, the call says what happened.  The cancellers: a thread
 * outside the runtime, a task on the child's executor, a task on the
 * other executor. */

struct racer {
	struct fx *f;
	cbcmn_runtime *rt;
	int shard;          /* the child's executor */
	int by;
	uint64_t seed;
	uint64_t end_ns;    /* stop then (a few seconds per test in all) */
	int iters, max_iters;
	int results, cancels, not_run, done_though_cancelled;
	const char *bad;
};

/* Let the child get somewhere: a task yields (its executor may be the
 * child's, which submits after 16 picks) or sleeps (that executor then
 * submits at once, and the kernel may complete the call), a thread
 * spins. */
static void race_pause(cbcmn_cx *cx, uint64_t r)
{
	if (cx && (r & 3) == 1)
		for (uint64_t i = 0; i < (r >> 2) % 20; i++)
			cbcmn_yield(cx);
	else if (cx && (r & 3) == 2)
		cbcmn_sleep(cx, (r >> 2) % 100000);
	else
		busy((r >> 3) % 4000);
}

/* One round: the child's call against the event and the cancellation. */
static void race_once(cbcmn_cx *cx, struct racer *R)
{
	struct fx *f = R->f;
	uint64_t r = rnd(&R->seed);
	if (!fx_arm(f)) {
		R->bad = "could not set the call up";
		return;
	}
	if (cbcmn_nursery_open(R->rt, cx, &f->n) != 0) {
		R->bad = "nursery_open failed";
		return;
	}
	if (cbcmn_nursery_spawn_pinned(cx, f->n, (uint32_t)R->shard, fx_child, f, NULL) != 0) {
		R->bad = "spawn failed";
		cbcmn_nursery_await_all(cx, f->n);
		return;
	}
	if (r & 1) { /* the child has begun its call */
		uint64_t end = t_now_ns() + 2000 * MS;
		while (!atomic_load(&f->entered) && t_now_ns() < end) {
			if (cx)
				cbcmn_yield(cx);
			else
				sched_yield();
		}
	}
	race_pause(cx, r >> 2);
	if (r & 2) {
		fx_event(f);
		race_pause(cx, r >> 20);
		cbcmn_nursery_cancel(f->n);
	} else {
		cbcmn_nursery_cancel(f->n);
		race_pause(cx, r >> 20);
		fx_event(f);
	}
	cbcmn_nursery_await_all(cx, f->n);
	const char *bad = fx_check(f);
	if (bad && !R->bad) {
		R->bad = bad;
		fx_report(f, by_name[R->by], bad);
	}
	if (f->rc == NOT_RUN)
		R->not_run++;
	else if (f->rc == CBCMN_ECANCELED)
		R->cancels++;
	else
		R->results++;
	if (f->rc != NOT_RUN && f->rc != CBCMN_ECANCELED && f->cancelled_after)
		R->done_though_cancelled++;
	R->iters++;
}

static bool race_more(struct racer *R)
{
	return !R->bad && R->iters < R->max_iters && t_now_ns() < R->end_ns;
}

static int64_t race_task(cbcmn_cx *cx, void *arg)
{
	struct racer *R = arg;
	while (race_more(R))
		race_once(cx, R);
	return 0;
}

static const enum op race_ops[] = {OP_RECV,      OP_READ,      OP_RECVMSG,   OP_SEND,
				   OP_WRITE,     OP_SEND_FULL, OP_ACCEPT,    OP_RECV_RESET};
#define NRACE_OPS (sizeof(race_ops) / sizeof(race_ops[0]))

static void race_all(int by)
{
	int fds0 = t_count_fds();
	cbcmn_runtime *rt = t_runtime_with(2, 0, ring_flags);
	/* About a second per canceller in all, under the sanitizers too. */
	uint64_t per_op = 1000 * MS / NRACE_OPS;
	for (size_t i = 0; i < NRACE_OPS; i++) {
		struct fx f;
		fx_open(&f, race_ops[i]);
		struct racer R = {.f = &f, .rt = rt, .by = by, .seed = 0x9e3779b97f4a7c15ull + i,
				  .end_ns = t_now_ns() + per_op, .max_iters = 20000};
		if (by == BY_THREAD) {
			R.shard = (int)(i & 1);
			while (race_more(&R))
				race_once(NULL, &R);
		} else {
			/* The canceller on executor 1, the child on 1 or 0. */
			R.shard = by == BY_SAME_TASK ? 1 : 0;
			assert_int_equal(t_run_pinned(rt, 1, race_task, &R), 0);
		}
		ASSERT_TASK_CHECKS();
		printf("  %-11s %5d rounds: %5d returned their result (%d of them though "
		       "cancelled), %5d cancelled, %4d cancelled before they ran\n",
		       op_name[f.op], R.iters, R.results, R.done_though_cancelled, R.cancels,
		       R.not_run);
		fx_close(&f);
		if (R.bad)
			fail_msg("%s %s: %s", op_name[f.op], by_name[by], R.bad);
	}
	t_destroy(rt);
	assert_int_equal(t_count_fds(), fds0);
}

static void test_cancel_racing_completion_from_thread(void **state)
{
	(void)state;
	race_all(BY_THREAD);
}

static void test_cancel_racing_completion_from_same_executor(void **state)
{
	(void)state;
	race_all(BY_SAME_TASK);
}

static void test_cancel_racing_completion_from_other_executor(void **state)
{
	(void)state;
	race_all(BY_OTHER_EXEC);
}

static void test_cancel_racing_completion_plain_rings(void **state)
{
	(void)state;
	ring_flags = CBCMN_RING_PLAIN;
	race_all(BY_THREAD);
	ring_flags = 0;
}

/* Many calls cancelled at once on a ring of 8 SQEs while their events
 * arrive: the executor's cancellations fill the SQ, and each time it
 * submits them the kernel also completes calls whose events came
 * meanwhile, whose waits the executor then finds and claims for the
 * cancellation with their CQEs already posted.  They return what they
 * did all the same. */
#define MASS 24

struct mass {
	struct fx f[MASS];
	cbcmn_runtime *rt;
	cbcmn_nursery *n;
};

static void mass_round(struct mass *m, enum op op, uint64_t r, int *hits)
{
	for (int i = 0; i < MASS; i++)
		assert_true(fx_arm(&m->f[i]));
	assert_int_equal(cbcmn_nursery_open(m->rt, NULL, &m->n), 0);
	for (int i = 0; i < MASS; i++)
		assert_int_equal(cbcmn_nursery_spawn(NULL, m->n, fx_child, &m->f[i], NULL), 0);
	for (int i = 0; i < MASS; i++)
		while (!atomic_load(&m->f[i].entered))
			sched_yield();
	busy(r % 50000); /* submitted and parked, or not yet */
	int at = (int)((r >> 20) % MASS);
	for (int i = 0; i < MASS; i++) {
		if (i == at)
			assert_int_equal(cbcmn_nursery_cancel(m->n), 0);
		assert_true(fx_event(&m->f[i]));
	}
	cbcmn_nursery_await_all(NULL, m->n);
	for (int i = 0; i < MASS; i++) {
		const char *bad = fx_check(&m->f[i]);
		if (bad) {
			fx_report(&m->f[i], "with many others", bad);
			fail_msg("%s: %s", op_name[op], bad);
		}
		*hits += m->f[i].rc != CBCMN_ECANCELED && m->f[i].rc != NOT_RUN &&
			 m->f[i].cancelled_after;
	}
}

static void test_cancel_many_racing_completions_small_ring(void **state)
{
	(void)state;
	int fds0 = t_count_fds();
	static const enum op ops[] = {OP_RECV, OP_RECV_RESET};
	for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cfg.ring_entries = 8;
		static struct mass m; /* big: not on the test's stack */
		memset(&m, 0, sizeof(m));
		m.rt = t_runtime_cfg(&cfg);
		for (int i = 0; i < MASS; i++)
			fx_open(&m.f[i], ops[k]);
		uint64_t seed = 0xabcdefull + k, end = t_now_ns() + 500 * MS;
		int rounds = 0, hits = 0;
		while (t_now_ns() < end && rounds < 2000) {
			mass_round(&m, ops[k], rnd(&seed), &hits);
			rounds++;
		}
		printf("  %-12s %4d rounds of %d calls: %d returned their result though "
		       "cancelled\n",
		       op_name[ops[k]], rounds, MASS, hits);
		for (int i = 0; i < MASS; i++)
			fx_close(&m.f[i]);
		t_destroy(m.rt);
	}
	assert_int_equal(t_count_fds(), fds0);
}

/* ---- 3. a linked timeout racing the completion --------------------------- *
 *
 * The kernel cancels the request when its timeout fires: a call that
 * returns -ETIMEDOUT did nothing, and one that completed as its timeout
 * fired returns its result. */
static void test_timeout_racing_completion(void **state)
{
	(void)state;
	int fds0 = t_count_fds();
	cbcmn_runtime *rt = t_runtime(2);
	static const enum op ops[] = {OP_RECV, OP_READ, OP_RECVMSG, OP_SEND_FULL, OP_ACCEPT};
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		struct fx f;
		fx_open(&f, ops[i]);
		uint64_t seed = 0x1234567ull + i, end = t_now_ns() + 200 * MS;
		int iters = 0, timeouts = 0, results = 0;
		while (t_now_ns() < end && iters < 5000) {
			uint64_t r = rnd(&seed);
			assert_true(fx_arm(&f));
			f.timeout_ns = 20000 + r % 300000; /* 20-320 us */
			assert_int_equal(cbcmn_nursery_open(rt, NULL, &f.n), 0);
			assert_int_equal(cbcmn_nursery_spawn_pinned(NULL, f.n, (uint32_t)(r >> 60) & 1,
								     fx_child, &f, NULL),
					 0);
			uint64_t at = t_now_ns() + (r >> 20) % 400000;
			while (t_now_ns() < at)
				;
			fx_event(&f);
			assert_int_equal(cbcmn_nursery_await_all(NULL, f.n), 0);
			ASSERT_TASK_CHECKS();
			const char *bad = fx_check(&f);
			if (bad) {
				fx_report(&f, "by its timeout", bad);
				fail_msg("%s: %s", op_name[f.op], bad);
			}
			timeouts += f.rc == -ETIMEDOUT;
			results += f.rc >= 0;
			iters++;
		}
		printf("  %-11s %5d rounds: %5d returned their result, %5d timed out\n",
		       op_name[f.op], iters, results, timeouts);
		f.timeout_ns = 0;
		fx_close(&f);
	}
	t_destroy(rt);
	assert_int_equal(t_count_fds(), fds0);
}

/* ---- 4. the executor's thread dies under the request --------------------- *
 *
 * A task ends executor 1's thread (pthread_exit) while the child waits on
 * executor 1's ring.  The dying thread ends its requests and reaps them;
 * what it could not is ended by the thread's exit, whose CQEs the new
 * thread reads in the dead ring: a call that completed returns what it
 * did; one never submitted, or cancelled, returns -ECANCELED with nothing
 * done. */

struct death {
	struct fx *f;
	cbcmn_runtime *rt;
	uint64_t seed;
	int rounds, done, results, cancels;
	const char *bad;
};

struct killer_arg {
	struct fx *f;
	uint64_t r;
};

static int64_t killer(cbcmn_cx *cx, void *arg)
{
	struct killer_arg *k = arg;
	(void)cx;
	fx_event(k->f);
	busy(k->r % 200000); /* the completion may be queued in the ring by now */
	pthread_exit(NULL);
	return 0;
}

static int64_t death_main(cbcmn_cx *cx, void *arg)
{
	struct death *d = arg;
	struct fx *f = d->f;
	for (int i = 0; i < d->rounds && !d->bad; i++) {
		uint64_t r = rnd(&d->seed);
		struct killer_arg k = {f, r >> 8};
		cbcmn_nursery *kn;
		TASK_CHECK(fx_arm(f));
		TASK_CHECK(cbcmn_nursery_open(d->rt, cx, &f->n) == 0);
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, f->n, 1, fx_child, f, NULL) == 0);
		while (!atomic_load(&f->entered))
			cbcmn_yield(cx);
		if (r & 1)
			cbcmn_sleep(cx, 2 * MS); /* submitted, executor 1 parked */
		TASK_CHECK(cbcmn_nursery_open(d->rt, cx, &kn) == 0);
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, kn, 1, killer, &k, NULL) == 0);
		TASK_CHECK(cbcmn_nursery_await_all(cx, kn) == CBCMN_EPANIC);
		/* Nothing more happens: a call still waiting gets the event's
		 * bytes, or ends with the old ring. */
		cbcmn_nursery_await_all(cx, f->n);
		const char *bad = fx_check(f);
		if (bad) {
			d->bad = bad;
			fx_report(f, "by its thread's death", bad);
		}
		d->results += f->rc >= 0;
		d->cancels += f->rc == CBCMN_ECANCELED;
		d->done++;
	}
	return 0;
}

static const char *ring_name(uint32_t mode)
{
	return mode == CBCMN_RING_PLAIN ? "plain" : mode == CBCMN_RING_SQPOLL ? "SQPOLL" : "default";
}

/* Each op under each ring mode, 12 deaths each. */
static void death_all(const enum op *ops, size_t nops, const uint32_t *modes, size_t nmodes)
{
	int fds0 = t_count_fds();
	/* Each death prints a line on stderr: keep them out of the output. */
	int saved = -1, cap = getenv("T_NOCAP") ? -1 : t_stderr_capture(&saved);
	char text[16384];
	const char *bad = NULL;
	int which = 0;
	for (size_t i = 0; i < nmodes * nops && !bad; i++) {
		struct fx f;
		fx_open(&f, ops[i % nops]);
		cbcmn_runtime *rt = t_runtime_with(2, 0, modes[i / nops]);
		struct death d = {.f = &f, .rt = rt, .seed = 0xfeedull + i,
				  .rounds = 12};
		int64_t rc = t_run_pinned(rt, 0, death_main, &d);
		t_destroy(rt);
		printf("  %-11s %-7s rings, %3d deaths: %3d returned their result, %3d cancelled\n",
		       op_name[f.op], ring_name(modes[i / nops]), d.done, d.results, d.cancels);
		fx_close(&f);
		if (rc != 0 || d.bad) {
			bad = d.bad ? d.bad : "the test task failed";
			which = (int)f.op;
		}
	}
	if (cap >= 0)
		t_stderr_restore(cap, saved, text, sizeof(text));
	ASSERT_TASK_CHECKS();
	if (bad)
		fail_msg("%s: %s", op_name[which], bad);
	assert_int_equal(t_count_fds(), fds0);
}

static void test_executor_death_keeps_completed_results(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN)
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
	static const enum op ops[] = {OP_RECV, OP_READ, OP_RECVMSG, OP_SEND_FULL, OP_ACCEPT};
	/* Default rings run completions only when their thread asks for
	 * them (DEFER_TASKRUN); plain ones at the thread's next system call,
	 * so a completion's CQE is often in the dead ring. */
	static const uint32_t modes[] = {0, CBCMN_RING_PLAIN};
	death_all(ops, sizeof(ops) / sizeof(ops[0]), modes, sizeof(modes) / sizeof(modes[0]));
}

/* An openat or a pwrite runs in an io-wq worker.  On a default ring
 * (DEFER_TASKRUN) its completion is work that only the ring's thread can
 * run: one that completed while the thread was ending was not in the dead
 * ring's CQ, and nobody else can make the kernel post it (io_uring_enter
 * from another thread: -EEXIST).  The call returned -ECANCELED although
 * the file was created (its descriptor leaked) or written. */
static void test_executor_death_keeps_results_of_io_workers(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN)
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
	static const enum op ops[] = {OP_OPENAT, OP_PWRITE};
	static const uint32_t modes[] = {0, CBCMN_RING_PLAIN, CBCMN_RING_SQPOLL};
	death_all(ops, sizeof(ops) / sizeof(ops[0]), modes, sizeof(modes) / sizeof(modes[0]));
}

/* An acceptor waits on executor 1 when a client connects and executor 1's
 * thread dies.  On a plain ring the accept runs at the dying thread's next
 * system call and its CQE lands in the ring; the takeover skipped
 * multishot CQEs and ended the acceptor: the connection was taken from the
 * listener, never handed out, and its descriptor leaked.  It must be handed
 * out (or stay queued in the listener). */

struct accdeath {
	cbcmn_runtime *rt;
	int ls, client;
	struct sockaddr_in addr;
	int64_t got[4];
	int ngot;
	bool unsupported;
	_Atomic int waiting;
};

static int64_t accdeath_acceptor(cbcmn_cx *cx, void *arg)
{
	struct accdeath *a = arg;
	cbcmn_acceptor *ac;
	int rc = cbcmn_acceptor_open(cx, a->ls, SOCK_CLOEXEC, &ac);
	if (rc == -EOPNOTSUPP)
		a->unsupported = true;
	atomic_store(&a->waiting, 1);
	if (rc)
		return 0;
	for (int64_t fd = 0; fd >= 0 && a->ngot < 4;)
		a->got[a->ngot++] = fd = cbcmn_acceptor_next(cx, ac);
	cbcmn_acceptor_close(cx, ac);
	return 0;
}

static int64_t accdeath_killer(cbcmn_cx *cx, void *arg)
{
	struct accdeath *a = arg;
	(void)cx;
	a->client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (a->client >= 0)
		(void)!connect(a->client, (struct sockaddr *)&a->addr, sizeof(a->addr));
	struct timespec ms10 = {0, 10 * 1000000l};
	nanosleep(&ms10, NULL); /* a system call: a plain ring runs the accept */
	pthread_exit(NULL);
	return 0;
}

static int64_t accdeath_main(cbcmn_cx *cx, void *arg)
{
	struct accdeath *a = arg;
	cbcmn_nursery *n, *kn;
	TASK_CHECK(cbcmn_nursery_open(a->rt, cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, accdeath_acceptor, a, NULL) == 0);
	while (!atomic_load(&a->waiting))
		cbcmn_yield(cx);
	cbcmn_sleep(cx, 10 * MS); /* armed, executor 1 parked */
	if (!a->unsupported) {
		TASK_CHECK(cbcmn_nursery_open(a->rt, cx, &kn) == 0);
		TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, kn, 1, accdeath_killer, a, NULL) == 0);
		TASK_CHECK(cbcmn_nursery_await_all(cx, kn) == CBCMN_EPANIC);
	}
	cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void test_executor_death_hands_out_accepted_connections(void **state)
{
	(void)state;
	if (t_backend() == CBCMN_BACKEND_EPOLL) {
		T_SKIP("epoll backend: streams and acceptors outlive their executor's thread "
		       "(nothing of theirs is in the kernel), they do not end -ECANCELED");
		return;
	}
	if (T_ASAN || T_TSAN)
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
	int saved = -1, cap = getenv("T_NOCAP") ? -1 : t_stderr_capture(&saved);
	char text[4096];
	static const uint32_t modes[] = {0, CBCMN_RING_PLAIN};
	const char *bad = NULL;
	bool unsupported = false;
	for (int round = 0; round < 6 && !bad && !unsupported; round++) {
		int fds0 = t_count_fds();
		struct accdeath a = {.client = -1};
		a.ls = listener(&a.addr);
		a.rt = t_runtime_with(2, 0, modes[round & 1]);
		assert_int_equal(t_run_pinned(a.rt, 0, accdeath_main, &a), 0);
		t_destroy(a.rt);
		unsupported = a.unsupported;
		int handed = 0;
		for (int i = 0; i < a.ngot; i++)
			if (a.got[i] >= 0) {
				handed++;
				close((int)a.got[i]);
			}
		bool queued = conn_queued(a.ls, 0);
		if (queued) {
			int c = accept4(a.ls, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0)
				close(c);
		}
		if (a.client >= 0)
			close(a.client);
		close(a.ls);
		int leaked = t_count_fds() - fds0;
		if (!unsupported && (handed + queued != 1 || leaked != 0)) {
			printf("  %s rings: %d handed out, %d still queued, %d descriptors leaked\n",
			       ring_name(modes[round & 1]), handed, queued, leaked);
			bad = "the accepted connection was lost";
		}
	}
	if (cap >= 0)
		t_stderr_restore(cap, saved, text, sizeof(text));
	ASSERT_TASK_CHECKS();
	if (unsupported)
		T_SKIP("no multishot accept (5.19)");
	if (bad)
		fail_msg("%s", bad);
}

/* ---- 5. MSG_WAITALL cancelled part-way --------------------------------- *
 *
 * io_uring keeps a MSG_WAITALL send or recv going until it is whole; one
 * cancelled part-way reports what it moved (the kernel counts it), and that
 * is what the call returns: the bytes received are in the buffer, the bytes
 * sent are with the peer. */

#define WA_LEN (1u << 20)
#define WA_PART 100000

struct waitall {
	int sv[2];
	bool send;
	uint8_t *buf;
	int64_t rc;
	_Atomic int entered;
};

static int64_t waitall_child(cbcmn_cx *cx, void *arg)
{
	struct waitall *w = arg;
	atomic_store(&w->entered, 1);
	if (w->send)
		w->rc = cbcmn_send(cx, w->sv[0], w->buf, WA_LEN, MSG_WAITALL | MSG_NOSIGNAL);
	else
		w->rc = cbcmn_recv(cx, w->sv[0], w->buf, WA_LEN, MSG_WAITALL);
	return 0;
}

static void waitall_run(bool send)
{
	struct waitall w = {.send = send, .rc = NOT_RUN};
	w.buf = calloc(1, WA_LEN);
	uint8_t *peer = malloc(WA_LEN);
	assert_non_null(w.buf);
	assert_non_null(peer);
	for (size_t i = 0; i < WA_LEN; i++)
		(send ? w.buf : peer)[i] = (uint8_t)(i * 7 + (i >> 12));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w.sv), 0);
	int small = 4096;
	setsockopt(w.sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, waitall_child, &w, NULL), 0);
	while (!atomic_load(&w.entered))
		sched_yield();
	struct timespec ms20 = {0, 20 * 1000000l};
	nanosleep(&ms20, NULL); /* in the kernel, waiting for the rest */
	size_t moved = 0; /* the peer's side: sent to the call, or taken from it */
	if (send) {
		for (int i = 0; i < 3; i++) {
			ssize_t k = recv(w.sv[1], peer + moved, 30000, MSG_DONTWAIT);
			if (k > 0)
				moved += (size_t)k;
			nanosleep(&ms20, NULL);
		}
	} else {
		assert_int_equal(write(w.sv[1], peer, WA_PART), WA_PART);
		moved = WA_PART;
		nanosleep(&ms20, NULL);
	}
	assert_int_equal(cbcmn_nursery_cancel(n), 0);
	cbcmn_nursery_await_all(NULL, n);
	if (send) {
		for (;;) {
			ssize_t k = recv(w.sv[1], peer + moved, WA_LEN - moved, MSG_DONTWAIT);
			if (k <= 0)
				break;
			moved += (size_t)k;
		}
	}
	printf("  MSG_WAITALL %s cancelled part-way: returned %lld, %zu bytes moved\n",
	       send ? "send" : "recv", (long long)w.rc, moved);
	if (w.rc == CBCMN_ECANCELED) {
		/* A kernel that does not count what moved: nothing may have. */
		assert_int_equal(send ? moved : (size_t)pending(w.sv[0]), send ? 0 : WA_PART);
	} else {
		assert_true(w.rc > 0);
		assert_int_equal((size_t)w.rc, moved);
		assert_int_equal(pending(w.sv[0]), 0);
		assert_memory_equal(w.buf, peer, (size_t)w.rc);
	}
	t_destroy(rt);
	close(w.sv[0]);
	close(w.sv[1]);
	free(w.buf);
	free(peer);
}

static void test_cancel_waitall_part_way_returns_what_moved(void **state)
{
	(void)state;
	waitall_run(false);
	waitall_run(true);
}

/* ---- 6. interrupted in an io-wq worker ---------------------------------- *
 *
 * An openat with O_CREAT runs in an io-wq worker; on a FIFO without a
 * writer it waits there.  Cancelled, the worker is interrupted, and
 * io_uring passes the open's -ERESTARTSYS on as it is: the call returned
 * -512, a kernel-internal code (cbcmn_strerror: "unknown error"), instead
 * of CBCMN_ECANCELED.  Nothing was opened.  (A linked timeout does not stop
 * such a call: the kernel does not arm it for a request it queues to io-wq
 * from the start, docs/IO.md "Limits".) */

struct fifo_call {
	const char *path;
	int64_t rc;
	uint64_t timeout_ns;   /* the child's I/O timeout, 0: none */
	_Atomic int entered;
};

static int64_t fifo_child(cbcmn_cx *cx, void *arg)
{
	struct fifo_call *c = arg;
	atomic_store(&c->entered, 1);
	cbcmn_io_set_timeout(cx, c->timeout_ns);
	c->rc = cbcmn_openat(cx, AT_FDCWD, c->path, O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
	cbcmn_io_set_timeout(cx, 0);
	return 0;
}

/* If the call was not interrupted, a writer after RESCUE_NS ends it (the
 * open then returns a descriptor, and the test fails saying so, instead of
 * hanging).  A hang bound, not a speed limit: half the suite's stall limit,
 * so a loaded machine or an emulated guest does not trip it.  O_NONBLOCK:
 * with no reader waiting it fails with ENXIO. */
#define RESCUE_NS (T_STALL_NS / 2)

struct rescue {
	const char *path;
	_Atomic int stop;
	pthread_t th;
};

static void *rescue_main(void *arg)
{
	struct rescue *r = arg;
	uint64_t end = t_now_ns() + RESCUE_NS;
	while (!atomic_load(&r->stop) && t_now_ns() < end) {
		struct timespec ms5 = {0, 5 * 1000000l};
		nanosleep(&ms5, NULL);
	}
	if (atomic_load(&r->stop))
		return NULL;
	int fd = open(r->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0) {
		struct timespec ms50 = {0, 50 * 1000000l};
		nanosleep(&ms50, NULL); /* the reader's open has returned */
		close(fd);
	}
	return NULL;
}

/* One FIFO openat without a writer, in a child of a nursery: cancelled
 * after 50 ms (timeout_ns 0), or ended by its I/O timeout.  Its result. */
static int64_t fifo_open_run(uint64_t timeout_ns)
{
	int fds0 = t_count_fds();
	char path[64];
	snprintf(path, sizeof(path), "/tmp/cbcmn-iocancel-fifo-%d", (int)getpid());
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	struct rescue r = {.path = path};
	assert_int_equal(pthread_create(&r.th, NULL, rescue_main, &r), 0);
	cbcmn_runtime *rt = t_runtime(1);
	struct fifo_call c = {.path = path, .rc = NOT_RUN, .timeout_ns = timeout_ns};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, fifo_child, &c, NULL), 0);
	uint64_t end = t_now_ns() + 5000 * MS;
	while (!atomic_load(&c.entered) && t_now_ns() < end)
		sched_yield();
	if (!timeout_ns) {
		/* In the worker (or the pool), waiting for a writer. */
		struct timespec ms50 = {0, 50 * 1000000l};
		nanosleep(&ms50, NULL);
		assert_int_equal(cbcmn_nursery_cancel(n), 0);
	}
	cbcmn_nursery_await_all(NULL, n);
	atomic_store(&r.stop, 1);
	pthread_join(r.th, NULL);
	t_destroy(rt);
	unlink(path);
	printf("  %s openat of a FIFO: %lld (%s)\n", timeout_ns ? "timed out" : "cancelled",
	       (long long)c.rc, cbcmn_strerror(c.rc));
	if (c.rc >= 0 && c.rc != NOT_RUN)
		close((int)c.rc);
	assert_int_equal(t_count_fds(), fds0);
	return c.rc;
}

static void test_cancel_blocked_in_io_worker_is_ecanceled(void **state)
{
	(void)state;
	assert_int_equal(fifo_open_run(0), CBCMN_ECANCELED);
}

/* On epoll the openat runs in the blocking pool: cancelled or timed out,
 * its thread was not interrupted and the task waited for a writer (here
 * the rescue's, after RESCUE_NS: the call returned a descriptor).  Now a signal
 * interrupts the pool thread's call. */
static void test_epoll_blocking_pool_call_ends_at_its_timeout(void **state)
{
	(void)state;
	if (t_backend() != CBCMN_BACKEND_EPOLL) {
		T_SKIP("io_uring: a linked timeout does not stop a call queued to io-wq from "
		       "the start (docs/IO.md, Limits)");
		return;
	}
	uint64_t t0 = t_now_ns();
	assert_int_equal(fifo_open_run(50 * MS), -ETIMEDOUT);
	assert_true(t_now_ns() - t0 < RESCUE_NS);
}

/* The pool's interrupt is SIGRTMAX-3 (docs/IO.md, Backends).  A program
 * that resets it to its default action once a runtime has run (a forked
 * child resetting its signals, as daemons do) and then cancels such a call:
 * the interrupt must not be the default action (which ends the process).
 * It was: the handler was installed once per process, the timer aimed the
 * signal at the pool thread whatever its disposition had become. */
static void test_epoll_pool_interrupt_after_sigdfl_reset_kills_nobody(void **state)
{
	(void)state;
	if (t_backend() != CBCMN_BACKEND_EPOLL) {
		T_SKIP("io_uring: no pool signal");
		return;
	}
	t_destroy(t_runtime(1)); /* the handler is installed in this process */
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGRTMAX - 3, SIG_DFL);
		char path[64];
		snprintf(path, sizeof(path), "/tmp/cbcmn-iocancel-dfl-%d", (int)getpid());
		unlink(path);
		if (mkfifo(path, 0600) != 0)
			_exit(3);
		struct rescue r = {.path = path};
		pthread_create(&r.th, NULL, rescue_main, &r);
		cbcmn_runtime *rt = t_runtime(1);
		struct fifo_call c = {.path = path, .rc = NOT_RUN};
		cbcmn_nursery *n;
		if (cbcmn_nursery_open(rt, NULL, &n) || cbcmn_nursery_spawn(NULL, n, fifo_child, &c, NULL))
			_exit(3);
		while (!atomic_load(&c.entered))
			sched_yield();
		struct timespec ms50 = {0, 50 * 1000000l};
		nanosleep(&ms50, NULL);
		cbcmn_nursery_cancel(n);
		cbcmn_nursery_await_all(NULL, n);
		atomic_store(&r.stop, 1);
		pthread_join(r.th, NULL);
		t_destroy(rt);
		unlink(path);
		printf("  child: cancelled openat of a FIFO: %lld (%s)\n", (long long)c.rc,
		       cbcmn_strerror(c.rc));
		fflush(stdout);
		_exit(c.rc == CBCMN_ECANCELED ? 0 : 1);
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		printf("  child ended by signal %d (SIGRTMAX-3 is %d)\n", WTERMSIG(st), SIGRTMAX - 3);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* Is a thread of ours asleep in a FIFO's open, waiting for the other end
 * (its wchan)?  False where the kernel does not say. */
static bool fifo_open_waiting(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	bool yes = false;
	while (d && !yes && (de = readdir(d))) {
		char p[300], w[64] = "";
		snprintf(p, sizeof(p), "/proc/self/task/%s/wchan", de->d_name);
		int fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, w, sizeof(w) - 1);
		close(fd);
		yes = n > 0 && strncmp(w, "wait_for_partner", 16) == 0;
	}
	if (d)
		closedir(d);
	return yes;
}

/* A program that blocks SIGRTMAX-3 everywhere to take it with sigwait
 * (its own use of a signal it never set a handler for): a pool thread
 * unblocked it around its call, so the program's process-directed signal
 * landed there, in the pool's empty handler, and was lost. */
static void test_epoll_pool_keeps_off_a_signal_the_program_blocks(void **state)
{
	(void)state;
	if (t_backend() != CBCMN_BACKEND_EPOLL) {
		T_SKIP("io_uring: no pool signal");
		return;
	}
	int sig = SIGRTMAX - 3;
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, sig);
	assert_int_equal(pthread_sigmask(SIG_BLOCK, &set, &old), 0);
	char path[64];
	snprintf(path, sizeof(path), "/tmp/cbcmn-iocancel-blk-%d", (int)getpid());
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	cbcmn_runtime *rt = t_runtime(1); /* its threads inherit the mask */
	struct fifo_call c = {.path = path, .rc = NOT_RUN};
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, fifo_child, &c, NULL), 0);
	uint64_t end = t_now_ns() + 5000 * MS;
	while (!atomic_load(&c.entered) && t_now_ns() < end)
		sched_yield();
	/* In the pool, waiting for a writer: seen in its wchan (a fixed
	 * 50 ms was too short beside a hog, then the writer's open below
	 * found no reader, ENXIO, and the reader's open waited for ever). */
	struct timespec ms1 = {0, 1000000l};
	bool waiting = false;
	for (end = t_now_ns() + 5000 * MS; !(waiting = fifo_open_waiting()) && t_now_ns() < end;)
		nanosleep(&ms1, NULL);
	assert_int_equal(kill(getpid(), sig), 0);
	struct timespec s1 = {1, 0};
	int got = sigtimedwait(&set, NULL, &s1);
	/* The writer ends the reader's open (ENXIO while the reader is not
	 * in it yet: where wchan said nothing). */
	int wfd;
	for (end = t_now_ns() + T_STALL_NS;
	     (wfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0 && errno == ENXIO &&
	     t_now_ns() < end;)
		nanosleep(&ms1, NULL);
	cbcmn_nursery_await_all(NULL, n);
	if (wfd >= 0)
		close(wfd);
	if (c.rc >= 0 && c.rc != NOT_RUN)
		close((int)c.rc);
	t_destroy(rt);
	unlink(path);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	printf("  sigtimedwait: %d (the signal %d)%s\n", got, sig,
	       waiting ? "" : "; the pool's open was not seen waiting");
	assert_int_equal(got, sig);
	assert_true(wfd >= 0);
}

/* ---- 7. a close is never undone ---------------------------------------- *
 *
 * A close of a file whose filesystem has a flush method (overlayfs, NFS,
 * FUSE, CIFS) is run by an io-wq worker.  With an I/O timeout the close
 * had a linked timeout, which cancelled it when it fired before the worker
 * took it: the call returned -ETIMEDOUT and the descriptor stayed open
 * (every time with a 1 ns timeout).  The test mounts an overlayfs in a
 * mount namespace of its own, in a child process. */

#define CLOSE_ROUNDS 200
#define CHILD_SKIP 77

static int64_t close_child(cbcmn_cx *cx, void *arg)
{
	const char *path = arg;
	int64_t undone = 0;
	for (int i = 0; i < CLOSE_ROUNDS; i++) {
		int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return -errno;
		cbcmn_io_set_timeout(cx, 1); /* fires as soon as it is armed */
		int64_t rc = cbcmn_close(cx, fd);
		cbcmn_io_set_timeout(cx, 0);
		if (fcntl(fd, F_GETFD) >= 0) {
			if (!undone)
				printf("  close returned %lld (%s), its descriptor is still open\n",
				       (long long)rc, cbcmn_strerror(rc));
			undone++;
			close(fd);
		}
	}
	return undone;
}

/* A mount namespace of our own (a user namespace too if we are not root):
 * the overlay goes when the child ends. */
static bool own_mount_ns(void)
{
	if (unshare(CLONE_NEWNS) != 0) {
		uid_t uid = getuid();
		gid_t gid = getgid();
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
			return false;
		char map[64];
		int fd = open("/proc/self/setgroups", O_WRONLY);
		if (fd >= 0) {
			(void)!write(fd, "deny", 4);
			close(fd);
		}
		int n = snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
		fd = open("/proc/self/uid_map", O_WRONLY);
		if (fd < 0 || write(fd, map, (size_t)n) != n)
			return false;
		close(fd);
		n = snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
		fd = open("/proc/self/gid_map", O_WRONLY);
		if (fd < 0 || write(fd, map, (size_t)n) != n)
			return false;
		close(fd);
	}
	return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
}

static void close_undone_child(const char *dir)
{
	char opts[512], merged[160], file[192];
	snprintf(opts, sizeof(opts), "lowerdir=%s/lower,upperdir=%s/upper,workdir=%s/work", dir,
		 dir, dir);
	snprintf(merged, sizeof(merged), "%s/merged", dir);
	snprintf(file, sizeof(file), "%s/f", merged);
	if (!own_mount_ns() || mount("overlay", merged, "overlay", 0, opts) != 0) {
		printf("  no overlayfs here (%s)\n", strerror(errno));
		_exit(CHILD_SKIP);
	}
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cbcmn_runtime *rt;
	int64_t res = -1;
	if (cbcmn_runtime_create(&cfg, &rt) != 0)
		_exit(2);
	int rc = cbcmn_runtime_run(rt, close_child, file, &res);
	cbcmn_runtime_destroy(rt);
	printf("  %d closes with a 1 ns timeout: %lld left their descriptor open\n", CLOSE_ROUNDS,
	       (long long)res);
	fflush(stdout);
	_exit(rc != 0 || res < 0 ? 2 : res > 0);
}

static void test_close_with_timeout_is_never_undone(void **state)
{
	(void)state;
	char dir[] = "/tmp/cbcmn-iocancel-ovl-XXXXXX";
	assert_non_null(mkdtemp(dir));
	static const char *const sub[] = {"lower", "upper", "work", "merged"};
	char p[128];
	for (size_t i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, sub[i]);
		assert_int_equal(mkdir(p, 0700), 0);
	}
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		close_undone_child(dir);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	/* The overlay went with the child's namespace: only our files. */
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	(void)!system(cmd);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == CHILD_SKIP)
		T_SKIP("cannot mount an overlayfs (a filesystem with a flush method)");
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc > 1)
		cmocka_set_test_filter(argv[1]); /* one test by name */
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_cancel_queued_by_same_executor_has_no_effect),
		T_WATCHED_TEST(test_cancel_queued_from_thread_has_no_effect),
		T_WATCHED_TEST(test_cancel_queued_from_other_executor_has_no_effect),
		T_WATCHED_TEST(test_cancel_queued_in_each_ring_mode),
		T_WATCHED_TEST(test_cancel_racing_completion_from_thread),
		T_WATCHED_TEST(test_cancel_racing_completion_from_same_executor),
		T_WATCHED_TEST(test_cancel_racing_completion_from_other_executor),
		T_WATCHED_TEST(test_cancel_racing_completion_plain_rings),
		T_WATCHED_TEST(test_cancel_many_racing_completions_small_ring),
		T_WATCHED_TEST(test_timeout_racing_completion),
		T_WATCHED_TEST(test_executor_death_keeps_completed_results),
		T_WATCHED_TEST(test_executor_death_keeps_results_of_io_workers),
		T_WATCHED_TEST(test_executor_death_hands_out_accepted_connections),
		T_WATCHED_TEST(test_cancel_waitall_part_way_returns_what_moved),
		T_WATCHED_TEST(test_cancel_blocked_in_io_worker_is_ecanceled),
		T_WATCHED_TEST(test_epoll_blocking_pool_call_ends_at_its_timeout),
		T_WATCHED_TEST(test_epoll_pool_interrupt_after_sigdfl_reset_kills_nobody),
		T_WATCHED_TEST(test_epoll_pool_keeps_off_a_signal_the_program_blocks),
		T_WATCHED_TEST(test_close_with_timeout_is_never_undone),
	};
	return cmocka_run_group_tests_name("iocancel", tests, NULL, NULL);
}
