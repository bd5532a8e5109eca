/* loadgen.c: the loopback load client (lg_run) and the many-connection echo
 * checker (lg_verify_echo_conns); see loadgen.h for the contract. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "util/clock.h"
#include "util/hist.h"
#include "net/httpmsg.h"
#include "net/loadgen.h"

/* Connects in flight at once.  A loopback listener drops SYNs while its
 * accept queue is full and the client then waits a whole 1 s SYN
 * retransmit, so 10 000 connects fired at once are slower than waves of
 * a few hundred that the server can keep up with. */
#define LG_DIAL_INFLIGHT 256
/* How long a refused (or EAGAIN) connect is retried, from its first try:
 * long enough to cover a server that is still starting up. */
#define LG_DIAL_RETRY_NS 1000000000ull
#define LG_DIAL_GAP_NS 10000000ull
/* Nothing connected, sent or received for this long: give up. */
#define LG_STALL_NS 10000000000ull

#define LG_SCRATCH (64 * 1024)	/* one recv() / one pattern chunk */
#define LG_HTTP_IN 16384	/* a response split across reads must fit */
#define LG_EVENTS 512

static const char http_request[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";

/* ---- errors: count them all, describe the first -------------------------- */

struct lg_err {
	int code;		/* the first failure's -errno, 0 if none */
	uint64_t count;
	char msg[128];
};

static int __attribute__((format(printf, 3, 4)))
lg_fail(struct lg_err *e, int code, const char *fmt, ...)
{
	e->count++;
	if (!e->code) {
		va_list ap;
		e->code = code;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}

static void err_to_result(const struct lg_err *e, struct lg_result *res)
{
	res->errors += e->count;
	if (e->code && !res->error[0])
		snprintf(res->error, sizeof(res->error), "%s", e->msg);
}

/* ---- the byte pattern ----------------------------------------------------- */

/* splitmix64's finalizer: every input bit moves about half the output bits,
 * so neighbouring connections and requests get unrelated bytes, and a byte
 * delivered to the wrong connection, twice, or out of order shows up. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t pattern_key(uint32_t conn, uint64_t seq)
{
	return mix64(mix64((uint64_t)conn + 1) ^ seq);
}

/* Bytes [off, off + n) of the stream that key names.  Random access, so a
 * short write or read can resume anywhere without keeping a copy. */
static void pattern_fill(uint8_t *dst, uint64_t key, uint64_t off, size_t n)
{
	while (n) {
		uint64_t w = mix64(key + (off >> 3));
		for (unsigned b = off & 7; b < 8 && n; b++, n--, off++)
			*dst++ = (uint8_t)(w >> (8 * b));
	}
}

/* Checks got[0..n) against bytes [off, off + n) of key's stream, using
 * want (n bytes) as room.  Returns the index of the first wrong byte, or
 * -1 if all are right. */
static ssize_t pattern_check(const uint8_t *got, uint8_t *want, uint64_t key, uint64_t off,
			     size_t n)
{
	pattern_fill(want, key, off, n);
	if (!memcmp(got, want, n))
		return -1;
	size_t i = 0;
	while (got[i] == want[i])
		i++;
	return (ssize_t)i;
}

/* ---- setup helpers -------------------------------------------------------- */

static int resolve(const char *host, uint16_t port, struct sockaddr_in *sa, struct lg_err *e)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons(port);
	if (!host)
		host = "127.0.0.1";
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return lg_fail(e, -EINVAL, "host '%s' is not an IPv4 address", host);
	if (!port)
		return lg_fail(e, -EINVAL, "port 0");
	return 0;
}

/* Makes room for want descriptors if the limits allow, and fails unless at
 * least need fit.  The soft limit goes up to the hard one; the hard one
 * goes up too when it is lower than want and the process may raise it
 * (CAP_SYS_RESOURCE; capped by fs.nr_open).  The soft limit is raised only
 * as far as want, not to an unlimited hard limit, which setrlimit refuses
 * for RLIMIT_NOFILE. */
static int raise_nofile(rlim_t want, rlim_t need, struct lg_err *e)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return lg_fail(e, -errno, "getrlimit(RLIMIT_NOFILE): %s", strerror(errno));
	if (rl.rlim_cur >= want)
		return 0;
	if (rl.rlim_max < want) {
		struct rlimit up = {.rlim_cur = want, .rlim_max = want};
		if (!setrlimit(RLIMIT_NOFILE, &up))
			return 0;
		/* EPERM (not privileged) or EPERM past nr_open: go as far
		 * as the hard limit. */
	}
	rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		return lg_fail(e, -errno, "setrlimit(RLIMIT_NOFILE, %llu): %s",
			       (unsigned long long)rl.rlim_cur, strerror(errno));
	if (rl.rlim_cur < need)
		return lg_fail(e, -EMFILE, "need %llu descriptors, RLIMIT_NOFILE allows %llu",
			       (unsigned long long)need, (unsigned long long)rl.rlim_cur);
	return 0;
}

static void set_nodelay(int fd)
{
	int one = 1;
	/* Small messages with Nagle on meet the peer's delayed ACK: 40 ms
	 * stalls that would be measured as server latency.  Best effort. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- connecting many sockets ---------------------------------------------- */

struct dialer {
	struct sockaddr_in sa;
	int ep;
	uint32_t n, next, inflight, done;
	int *fds;		/* caller's: connected (or connecting) fd, else -1 */
	uint64_t *first;	/* first attempt of each connection */
	uint64_t *retry_at;
	uint32_t *queue;	/* connections waiting for a retry, FIFO */
	uint32_t qhead, qlen;	/* one constant gap keeps the FIFO in time order */
};

static int dial_failed(struct dialer *d, uint32_t i, int err, uint64_t now, struct lg_err *e)
{
	char addr[INET_ADDRSTRLEN];

	if ((err == ECONNREFUSED || err == EAGAIN) && now - d->first[i] < LG_DIAL_RETRY_NS) {
		d->retry_at[i] = now + LG_DIAL_GAP_NS;
		d->queue[(d->qhead + d->qlen++) % d->n] = i;
		return 0;
	}
	inet_ntop(AF_INET, &d->sa.sin_addr, addr, sizeof(addr));
	return lg_fail(e, -err, "connect to %s:%u: %s", addr, ntohs(d->sa.sin_port),
		       strerror(err));
}

static int dial_one(struct dialer *d, uint32_t i, uint64_t now, struct lg_err *e)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int err = errno;
		struct rlimit rl;
		if (err == EMFILE && !getrlimit(RLIMIT_NOFILE, &rl))
			return lg_fail(e, -err, "socket: %s at %u connections (RLIMIT_NOFILE %llu/%llu)",
				       strerror(err), i, (unsigned long long)rl.rlim_cur,
				       (unsigned long long)rl.rlim_max);
		return lg_fail(e, -err, "socket: %s", strerror(err));
	}
	set_nodelay(fd);
	if (!connect(fd, (const struct sockaddr *)&d->sa, sizeof(d->sa))) {
		d->fds[i] = fd;
		d->done++;
		return 0;
	}
	int err = errno;
	if (err == EINPROGRESS) {
		struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = i};
		if (epoll_ctl(d->ep, EPOLL_CTL_ADD, fd, &ev)) {
			err = errno;
			close(fd);
			return lg_fail(e, -err, "epoll_ctl: %s", strerror(err));
		}
		d->fds[i] = fd;
		d->inflight++;
		return 0;
	}
	close(fd);
	return dial_failed(d, i, err, now, e);
}

/* Connects n sockets to sa, at most LG_DIAL_INFLIGHT at a time.  On
 * success fds[0..n) are connected non-blocking sockets; on failure none is
 * left open. */
static int dial_all(const struct sockaddr_in *sa, uint32_t n, int *fds, struct lg_err *e)
{
	struct dialer d = {.sa = *sa, .n = n, .fds = fds, .ep = -1};
	struct epoll_event evs[LG_EVENTS];
	int rc = 0;

	for (uint32_t i = 0; i < n; i++)
		fds[i] = -1;
	d.first = calloc(n, sizeof(*d.first));
	d.retry_at = calloc(n, sizeof(*d.retry_at));
	d.queue = calloc(n, sizeof(*d.queue));
	if (!d.first || !d.retry_at || !d.queue) {
		rc = lg_fail(e, -ENOMEM, "out of memory for %u connections", n);
		goto out;
	}
	d.ep = epoll_create1(EPOLL_CLOEXEC);
	if (d.ep < 0) {
		rc = lg_fail(e, -errno, "epoll_create1: %s", strerror(errno));
		goto out;
	}

	uint64_t last_progress = mono_ns();
	while (d.done < n) {
		uint64_t now = mono_ns();

		/* Due retries first, then connections not tried yet. */
		while (d.inflight < LG_DIAL_INFLIGHT) {
			uint32_t i;
			if (d.qlen && d.retry_at[d.queue[d.qhead]] <= now) {
				i = d.queue[d.qhead];
				d.qhead = (d.qhead + 1) % n;
				d.qlen--;
			} else if (d.next < n) {
				i = d.next++;
				d.first[i] = now;
			} else {
				break;
			}
			if ((rc = dial_one(&d, i, now, e)))
				goto out;
		}
		if (d.done == n)
			break;

		int timeout = 100;
		if (d.qlen) {
			uint64_t at = d.retry_at[d.queue[d.qhead]];
			timeout = at <= now ? 0 : (int)((at - now + 999999) / 1000000);
		}
		/* Something is in flight or queued for a retry here, or the
		 * loop above would have started more. */
		int nev = epoll_wait(d.ep, evs, LG_EVENTS, timeout);
		if (nev < 0) {
			if (errno == EINTR)
				continue;
			rc = lg_fail(e, -errno, "epoll_wait: %s", strerror(errno));
			goto out;
		}
		now = mono_ns();
		for (int k = 0; k < nev; k++) {
			uint32_t i = (uint32_t)evs[k].data.u64;
			int fd = fds[i], soerr = 0;
			socklen_t sl = sizeof(soerr);

			/* EPOLLOUT (or ERR/HUP) on a connecting socket: the
			 * handshake is over; SO_ERROR tells how it went. */
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl))
				soerr = errno;
			epoll_ctl(d.ep, EPOLL_CTL_DEL, fd, NULL);
			d.inflight--;
			if (!soerr) {
				d.done++;
				last_progress = now;
				continue;
			}
			close(fd);
			fds[i] = -1;
			if ((rc = dial_failed(&d, i, soerr, now, e)))
				goto out;
		}
		if (now - last_progress > LG_STALL_NS) {
			rc = lg_fail(e, -ETIMEDOUT, "%u of %u connects unfinished after %llu s",
				     n - d.done, n, LG_STALL_NS / 1000000000ull);
			goto out;
		}
	}
out:
	if (d.ep >= 0)
		close(d.ep);
	free(d.first);
	free(d.retry_at);
	free(d.queue);
	if (rc) {
		for (uint32_t i = 0; i < n; i++) {
			if (fds[i] >= 0)
				close(fds[i]);
			fds[i] = -1;
		}
	}
	return rc;
}

/* ---- lg_run: the timed load --------------------------------------------- */

struct lg_conn {
	int fd;			/* -1 once failed and closed */
	int held_fd;		/* failed, its number kept until the ring is gone, or -1 */
	uint32_t id;		/* keys the echo pattern */
	uint64_t sent_seq;	/* requests issued */
	uint64_t recv_seq;	/* responses completed */
	uint32_t recv_off;	/* echo: bytes of response recv_seq seen so far */
	uint8_t *out;		/* pipeline requests' room: unsent bytes */
	size_t out_off, out_len;
	char *in;		/* http: a response split across reads */
	size_t in_len;
	uint64_t *t_issue;	/* issue time of request seq, at seq % pipeline */
	/* lg_config.ring: */
	bool sending;		/* a send of out[out_off..] is in flight */
	uint32_t owed;		/* requests answered meanwhile, to issue after it */
};

/* The start signal: every thread connects its epoll set first, so the
 * clock starts for all at once and a failed thread start aborts cleanly. */
struct lg_gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state;		/* 0 wait, 1 go, -1 abort */
};

struct lg_worker {
	const struct lg_config *cfg;
	struct lg_gate *gate;
	pthread_t tid;
	struct lg_conn *conns;
	uint32_t nconns, live;
	size_t req_len;		/* bytes per request */
	const char *body;	/* http: the body every response must carry */
	size_t body_len;
	uint8_t *scratch, *want;
	struct lat_hist *hist;
	uint64_t end;		/* CLOCK_MONOTONIC ns when the run stops */
	uint64_t start, stop;	/* when it started, and stopped (answer_all: later) */
	uint32_t answered;	/* connections that have had a response */
	uint64_t requests, bytes;
	struct lg_err err;
	struct io_uring *ring;	/* the io_uring client's, NULL for epoll's */
};

static int __attribute__((format(printf, 4, 5)))
conn_fail(struct lg_worker *w, struct lg_conn *c, int code, const char *fmt, ...)
{
	char msg[112];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	lg_fail(&w->err, code, "conn %u: %s", c->id, msg);
	/* The io_uring client's recv (and send) in flight hold the socket
	 * past close(): the server saw no end until the run's, the ring's
	 * exit.  shutdown() ends it now, and ends those requests (the recv
	 * sees the end, the send EPIPE).  close() also takes the socket out
	 * of the epoll set.  A send or recv queued for c and not submitted
	 * yet names c->fd by number: submitted after the close, it would act
	 * on whatever file took the number meanwhile (a socket the server's
	 * thread accepted), so it goes in before.  If the submit fails (a
	 * CQ overflow's -EBUSY, -EINTR) or leaves some queued, they still
	 * name the number: it stays c's, its socket shut down, until the
	 * ring is gone (lg_run() closes it then). */
	shutdown(c->fd, SHUT_RDWR);
	if (w->ring && (io_uring_submit(w->ring) < 0 || io_uring_sq_ready(w->ring)))
		c->held_fd = c->fd;
	else
		close(c->fd);
	c->fd = -1;
	w->live--;
	return code;
}

static void issue(struct lg_worker *w, struct lg_conn *c, uint64_t now)
{
	size_t len = w->req_len, cap = (size_t)w->cfg->pipeline * len;

	/* Unsent bytes belong to at most pipeline - 1 requests here, so
	 * after compaction there is always room for one more. */
	if (c->out_off == c->out_len) {
		c->out_off = c->out_len = 0;
	} else if (c->out_len + len > cap) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (w->cfg->proto == LG_ECHO)
		pattern_fill(c->out + c->out_len, pattern_key(c->id, c->sent_seq), 0, len);
	else
		memcpy(c->out + c->out_len, http_request, len);
	c->out_len += len;
	c->t_issue[c->sent_seq % w->cfg->pipeline] = now;
	c->sent_seq++;
}

static void complete(struct lg_worker *w, struct lg_conn *c, uint64_t now, size_t bytes)
{
	uint64_t t = c->t_issue[c->recv_seq % w->cfg->pipeline];
	bool first = c->recv_seq++ == 0;

	w->answered += first;
	/* answer_all: a connection's first answer counts even after the
	 * window, so that every connection has at least one. */
	if (now >= w->end && !(first && w->cfg->answer_all))
		return;
	lat_hist_add(w->hist, now - t);
	w->requests++;
	w->bytes += bytes;
	/* The io_uring client's send in flight reads out[], which issue()
	 * may move: the next request waits for its completion. */
	if (c->sending)
		c->owed++;
	else
		issue(w, c, now);
}

static int conn_flush(struct lg_worker *w, struct lg_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN)
				return 0;	/* EPOLLOUT comes when there is room */
			if (errno == EINTR)
				continue;
			return conn_fail(w, c, -errno, "send: %s", strerror(errno));
		}
		c->out_off += (size_t)n;
	}
	return 0;
}

/* recv() that folds the ways a read can fail into one code: > 0 bytes,
 * 0 for EAGAIN, < 0 after conn_fail(). */
static ssize_t conn_recv(struct lg_worker *w, struct lg_conn *c, void *buf, size_t len)
{
	for (;;) {
		ssize_t n = recv(c->fd, buf, len, 0);
		if (n > 0)
			return n;
		if (n == 0)
			return conn_fail(w, c, -ECONNRESET,
					 "server closed the connection after %llu responses",
					 (unsigned long long)c->recv_seq);
		if (errno == EAGAIN)
			return 0;
		if (errno != EINTR)
			return conn_fail(w, c, -errno, "recv: %s", strerror(errno));
	}
}

/* Checks the echo bytes buf[0..n) that came on c, completing (and issuing
 * again) each request they end.  0, or < 0 after conn_fail(). */
static int take_echo(struct lg_worker *w, struct lg_conn *c, const uint8_t *buf, size_t n,
		     uint64_t now)
{
	uint32_t msg = w->cfg->msg_size;

	for (size_t off = 0; off < n;) {
		if (c->recv_seq == c->sent_seq)
			return conn_fail(w, c, -EBADMSG, "%zu bytes more than were sent", n - off);
		size_t take = n - off;
		if (take > msg - c->recv_off)
			take = msg - c->recv_off;
		ssize_t bad = pattern_check(buf + off, w->want, pattern_key(c->id, c->recv_seq),
					    c->recv_off, take);
		if (bad >= 0)
			return conn_fail(w, c, -EBADMSG, "request %llu byte %zu: got 0x%02x, want 0x%02x",
					 (unsigned long long)c->recv_seq, c->recv_off + (size_t)bad,
					 buf[off + bad], w->want[bad]);
		off += take;
		c->recv_off += (uint32_t)take;
		if (c->recv_off == msg) {
			c->recv_off = 0;
			complete(w, c, now, msg);
		}
	}
	return 0;
}

static int conn_read_echo(struct lg_worker *w, struct lg_conn *c)
{
	for (;;) {
		ssize_t n = conn_recv(w, c, w->scratch, LG_SCRATCH);
		if (n <= 0)
			return (int)n;
		int rc = take_echo(w, c, w->scratch, (size_t)n, mono_ns());
		if (rc < 0)
			return rc;
	}
}

/* Takes the complete responses at the front of buf[0..len); returns how
 * many bytes they used, or < 0 after conn_fail(). */
static ssize_t take_responses(struct lg_worker *w, struct lg_conn *c, const char *buf, size_t len,
			      uint64_t now)
{
	size_t off = 0;

	for (;;) {
		struct http_response r;
		ssize_t n = http_response_parse(buf + off, len - off, &r);
		if (n < 0)
			return conn_fail(w, c, -EPROTO, "response %llu: %s",
					 (unsigned long long)c->recv_seq, r.error);
		if (n == 0)
			return (ssize_t)off;
		if (c->recv_seq == c->sent_seq)
			return conn_fail(w, c, -EPROTO, "a response to no request");
		if (r.status != 200)
			return conn_fail(w, c, -EPROTO, "status %d", r.status);
		if (!r.keep_alive)
			return conn_fail(w, c, -EPROTO, "server closes the keep-alive connection");
		if (r.body_len != w->body_len || memcmp(buf + off + r.head_len, w->body, w->body_len))
			return conn_fail(w, c, -EPROTO, "response %llu: unexpected body (%zu bytes)",
					 (unsigned long long)c->recv_seq, r.body_len);
		off += (size_t)n;
		complete(w, c, now, (size_t)n);
	}
}

static int conn_read_http(struct lg_worker *w, struct lg_conn *c)
{
	for (;;) {
		/* Whole responses are parsed straight from the scratch
		 * buffer; only a split one is kept, so idle connections cost
		 * no input buffer. */
		char *buf = c->in_len ? c->in : (char *)w->scratch;
		size_t room = c->in_len ? LG_HTTP_IN - c->in_len : LG_SCRATCH;
		if (!room)
			return conn_fail(w, c, -EPROTO, "response longer than %d bytes", LG_HTTP_IN);
		ssize_t n = conn_recv(w, c, buf + c->in_len, room);
		if (n <= 0)
			return (int)n;
		size_t len = c->in_len + (size_t)n;
		ssize_t used = take_responses(w, c, buf, len, mono_ns());
		if (used < 0)
			return (int)used;
		size_t left = len - (size_t)used;
		if (left > LG_HTTP_IN)
			return conn_fail(w, c, -EPROTO, "response longer than %d bytes", LG_HTTP_IN);
		if (left && !c->in && !(c->in = malloc(LG_HTTP_IN)))
			return conn_fail(w, c, -ENOMEM, "out of memory");
		if (left)
			memmove(c->in, buf + used, left);
		c->in_len = left;
	}
}

static int pin_self(int cpu)
{
	cpu_set_t set;

	if (cpu < 0 || cpu >= CPU_SETSIZE)
		return -EINVAL;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return -pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* Is w's run over at now?  At the end of the window; with answer_all, once
 * every connection has had a response as well (failing LG_STALL_NS after
 * the window).  *wait_ns: how long the loop may wait for events. */
static bool run_over(struct lg_worker *w, uint64_t now, uint64_t *wait_ns)
{
	if (now < w->end) {
		*wait_ns = w->end - now;
		return false;
	}
	if (!w->cfg->answer_all || w->answered >= w->nconns)
		return true;
	if (now - w->end > LG_STALL_NS) {
		lg_fail(&w->err, -ETIMEDOUT, "%u of %u connections had no response in %.1f s",
			w->nconns - w->answered, w->nconns, (double)(now - w->start) / 1e9);
		return true;
	}
	/* Past the window, wake often to see whether all have answered. */
	*wait_ns = 10000000;
	return false;
}

/* ---- the io_uring client (lg_config.ring) -------------------------------- */

#define LG_RING_BUF 4096	/* a provided buffer */
#define LG_RING_BUFS 256u	/* buffers: a turn's chunks (each goes back at once) */
#define LG_RING_BGID 0
#define LG_UD_SEND 1u		/* a send's user_data: the connection | 1 */

struct lg_ring {
	struct io_uring u;
	struct io_uring_buf_ring *br;
	uint8_t *bufs;		/* LG_RING_BUFS x LG_RING_BUF */
};

static void ring_buf_put(struct lg_ring *r, unsigned bid)
{
	io_uring_buf_ring_add(r->br, r->bufs + (size_t)bid * LG_RING_BUF, LG_RING_BUF,
			      (unsigned short)bid, io_uring_buf_ring_mask(LG_RING_BUFS), 0);
	io_uring_buf_ring_advance(r->br, 1);
}

/* One ring per client thread, made on that thread (a single issuer):
 * DEFER_TASKRUN where the kernel has it (6.1+), so completions are run in
 * the enter that waits for them, else COOP_TASKRUN (5.19+), else plain;
 * and a ring of provided buffers for the connections' multishot recvs
 * (6.0: -EINVAL or -ENOENT before, failing the run). */
static int ring_open(struct lg_worker *w, struct lg_ring *r)
{
	/* A send per connection at most, in one turn, and its recv's
	 * re-arm: a full SQ is submitted early (ring_sqe()). */
	unsigned entries = 2 * w->nconns < 4096 ? 2 * w->nconns : 4096;
	static const unsigned tries[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
		IORING_SETUP_COOP_TASKRUN,
		0,
	};
	int rc = -ENOSYS;
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		rc = io_uring_queue_init(entries, &r->u, tries[i]);
		if (rc != -EINVAL)
			break;
	}
	if (rc)
		return lg_fail(&w->err, rc, "io_uring_queue_init: %s", strerror(-rc));
	/* Page-aligned, as the kernel wants the ring (a page here). */
	r->br = NULL;
	r->bufs = malloc((size_t)LG_RING_BUFS * LG_RING_BUF);
	rc = r->bufs ? posix_memalign((void **)&r->br, 4096, LG_RING_BUFS * sizeof(struct io_uring_buf))
		     : ENOMEM;
	if (rc == 0) {
		io_uring_buf_ring_init(r->br);
		struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)r->br,
					       .ring_entries = LG_RING_BUFS,
					       .bgid = LG_RING_BGID};
		rc = -io_uring_register_buf_ring(&r->u, &reg, 0);
	}
	if (rc) {
		io_uring_queue_exit(&r->u);
		free(r->br);
		free(r->bufs);
		return lg_fail(&w->err, -rc, "io_uring buffer ring: %s", strerror(rc));
	}
	for (unsigned bid = 0; bid < LG_RING_BUFS; bid++)
		ring_buf_put(r, bid);
	return 0;
}

static void ring_close(struct lg_ring *r)
{
	/* The exit cancels what is still in flight before the buffers and
	 * out[] are freed. */
	io_uring_queue_exit(&r->u);
	free(r->br);
	free(r->bufs);
}

/* An SQE for c, submitting what is queued first if the SQ is full; NULL
 * after failing c if that submit fails.  Not a loop: a submit refused for
 * a CQ overflow's backlog (-EBUSY) is refused again until the turn's
 * completions are reaped, and would be retried for good. */
static struct io_uring_sqe *ring_sqe(struct lg_worker *w, struct io_uring *u,
				     struct lg_conn *c)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(u);
	if (sqe)
		return sqe;
	int rc = io_uring_submit(u);
	if ((sqe = io_uring_get_sqe(u)) == NULL)
		conn_fail(w, c, rc < 0 ? rc : -EAGAIN, "io_uring_submit: %s",
			  strerror(rc < 0 ? -rc : EAGAIN));
	return sqe;
}

/* c's chunks from now on, each in a provided buffer, until the recv ends
 * (no IORING_CQE_F_MORE: then armed again). */
static void ring_recv(struct lg_worker *w, struct io_uring *u, struct lg_conn *c)
{
	struct io_uring_sqe *sqe = ring_sqe(w, u, c);
	if (!sqe)
		return;
	io_uring_prep_recv_multishot(sqe, c->fd, NULL, 0, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = LG_RING_BGID;
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c);
}

/* Issue the requests answered while c's send was in flight, and send c's
 * unsent bytes (unless a send is in flight: its completion comes here). */
static void ring_flush(struct lg_worker *w, struct io_uring *u, struct lg_conn *c)
{
	if (c->sending || c->fd < 0)
		return;
	if (c->owed) {
		uint64_t now = mono_ns();
		for (; c->owed; c->owed--)
			issue(w, c, now);
	}
	if (c->out_off == c->out_len)
		return;
	struct io_uring_sqe *sqe = ring_sqe(w, u, c);
	if (!sqe)
		return;
	io_uring_prep_send(sqe, c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | LG_UD_SEND);
	c->sending = true;
}

static void ring_cqe(struct lg_worker *w, struct lg_ring *r, const struct io_uring_cqe *cqe)
{
	struct lg_conn *c = (struct lg_conn *)(uintptr_t)(cqe->user_data & ~(uint64_t)LG_UD_SEND);
	int32_t res = cqe->res;
	if (cqe->user_data & LG_UD_SEND) {
		c->sending = false;
		if (c->fd < 0)
			return; /* failed meanwhile */
		if (res < 0)
			conn_fail(w, c, res, "send: %s", strerror(-res));
		else
			c->out_off += (size_t)res;
		ring_flush(w, &r->u, c);
		return;
	}
	if (cqe->flags & IORING_CQE_F_BUFFER) {
		unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
		if (res > 0 && c->fd >= 0)
			take_echo(w, c, r->bufs + (size_t)bid * LG_RING_BUF, (size_t)res, mono_ns());
		ring_buf_put(r, bid);
	}
	if (c->fd < 0)
		return;
	if (res == 0)
		conn_fail(w, c, -ECONNRESET, "server closed the connection after %llu responses",
			  (unsigned long long)c->recv_seq);
	else if (res < 0 && res != -ENOBUFS && res != -EINTR && res != -EAGAIN)
		conn_fail(w, c, res, "recv: %s", strerror(-res));
	else if (!(cqe->flags & IORING_CQE_F_MORE))
		ring_recv(w, &r->u, c); /* ended (out of buffers: they are back by the submit) */
	ring_flush(w, &r->u, c);
}

/* The timed loop: each turn submits what the last completions asked for
 * and waits for the next ones in one io_uring_enter. */
static void ring_loop(struct lg_worker *w, struct lg_ring *r)
{
	for (uint32_t i = 0; i < w->nconns; i++) {
		ring_recv(w, &r->u, &w->conns[i]);
		ring_flush(w, &r->u, &w->conns[i]);
	}
	uint64_t left;
	while (w->live && !run_over(w, mono_ns(), &left)) {
		struct __kernel_timespec ts = {.tv_sec = (long long)(left / 1000000000u),
					       .tv_nsec = (long long)(left % 1000000000u)};
		struct io_uring_cqe *cqe;
		int rc = io_uring_submit_and_wait_timeout(&r->u, &cqe, 1, &ts, NULL);
		if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
			lg_fail(&w->err, rc, "io_uring_enter: %s", strerror(-rc));
			break;
		}
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&r->u, head, cqe) {
			ring_cqe(w, r, cqe);
			seen++;
		}
		io_uring_cq_advance(&r->u, seen);
	}
}

static void epoll_loop(struct lg_worker *w, int ep)
{
	const struct lg_config *cfg = w->cfg;
	struct epoll_event evs[LG_EVENTS];

	for (uint32_t i = 0; i < w->nconns; i++)
		conn_flush(w, &w->conns[i]);
	uint64_t left;
	while (w->live && !run_over(w, mono_ns(), &left)) {
		int nev = epoll_wait(ep, evs, LG_EVENTS, (int)((left + 999999) / 1000000));
		if (nev < 0) {
			if (errno == EINTR)
				continue;
			lg_fail(&w->err, -errno, "epoll_wait: %s", strerror(errno));
			break;
		}
		for (int k = 0; k < nev; k++) {
			struct lg_conn *c = evs[k].data.ptr;
			if (c->fd < 0)
				continue;
			if (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
				int rc = cfg->proto == LG_ECHO ? conn_read_echo(w, c)
							       : conn_read_http(w, c);
				if (rc < 0)
					continue;
			}
			conn_flush(w, c);
		}
	}
}

static void *worker_main(void *arg)
{
	struct lg_worker *w = arg;
	const struct lg_config *cfg = w->cfg;
	struct lg_ring r;
	int ep = -1, rc;
	bool go, ring = false;

	if (cfg->cpu >= 0 && (rc = pin_self(cfg->cpu)))
		lg_fail(&w->err, rc, "cannot pin a client thread to CPU %d: %s", cfg->cpu,
			strerror(-rc));
	if (cfg->ring) {
		ring = !w->err.code && ring_open(w, &r) == 0;
		w->ring = ring ? &r.u : NULL;
	} else if (!w->err.code && (ep = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		lg_fail(&w->err, -errno, "epoll_create1: %s", strerror(errno));
	}
	for (uint32_t i = 0; ep >= 0 && !w->err.code && i < w->nconns; i++) {
		struct epoll_event ev = {
			.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			.data.ptr = &w->conns[i],
		};
		if (epoll_ctl(ep, EPOLL_CTL_ADD, w->conns[i].fd, &ev))
			lg_fail(&w->err, -errno, "epoll_ctl: %s", strerror(errno));
	}

	pthread_mutex_lock(&w->gate->mu);
	while (!w->gate->state)
		pthread_cond_wait(&w->gate->cv, &w->gate->mu);
	go = w->gate->state > 0;
	pthread_mutex_unlock(&w->gate->mu);
	if (!go || w->err.code)
		goto out;

	uint64_t start = mono_ns();
	w->start = start;
	w->end = start + (uint64_t)(cfg->duration_s * 1e9);
	for (uint32_t i = 0; i < w->nconns; i++)
		for (uint32_t p = 0; p < cfg->pipeline; p++)
			issue(w, &w->conns[i], start);
	if (ring)
		ring_loop(w, &r);
	else
		epoll_loop(w, ep);
	w->stop = mono_ns();
out:
	if (ring) {
		w->ring = NULL;
		ring_close(&r);
	}
	if (ep >= 0)
		close(ep);
	return NULL;
}

void lg_config_init(struct lg_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->host = "127.0.0.1";
	cfg->conns = 1;
	cfg->msg_size = 64;
	cfg->duration_s = 1.0;
	cfg->cpu = -1;
	cfg->threads = 1;
	cfg->proto = LG_ECHO;
	cfg->pipeline = 1;
}

static int check_config(const struct lg_config *cfg, struct lg_err *e)
{
	if (!cfg->conns)
		return lg_fail(e, -EINVAL, "conns must be at least 1");
	if (cfg->proto != LG_ECHO && cfg->proto != LG_HTTP)
		return lg_fail(e, -EINVAL, "unknown protocol %d", (int)cfg->proto);
	if (cfg->proto == LG_ECHO && (!cfg->msg_size || cfg->msg_size > LG_MSG_MAX))
		return lg_fail(e, -EINVAL, "msg_size must be 1..%u", LG_MSG_MAX);
	if (cfg->pipeline > LG_PIPELINE_MAX)
		return lg_fail(e, -EINVAL, "pipeline must be 1..%u", LG_PIPELINE_MAX);
	if (!(cfg->duration_s > 0 && cfg->duration_s < 1e6))
		return lg_fail(e, -EINVAL, "duration_s must be > 0 (and < 1e6)");
	if (cfg->ring && cfg->proto != LG_ECHO)
		return lg_fail(e, -EINVAL, "the io_uring client speaks echo only");
	if (cfg->cpu < -1 || cfg->cpu >= CPU_SETSIZE)
		return lg_fail(e, -EINVAL, "cpu %d out of range", cfg->cpu);
	return 0;
}

int lg_run(const struct lg_config *ucfg, struct lg_result *res)
{
	struct lg_gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
	struct lg_worker *w = NULL;
	struct lg_err e = {0};
	struct lg_config cfg = {0};
	struct sockaddr_in sa;
	int *fds = NULL, rc;
	uint32_t started = 0, nw = 0;

	if (!res)
		return -EINVAL;
	memset(res, 0, sizeof(*res));
	if (!ucfg) {
		rc = lg_fail(&e, -EINVAL, "no config");
		goto done;
	}
	cfg = *ucfg;
	/* 0 means the default for these two. */
	if (!cfg.threads)
		cfg.threads = 1;
	if (!cfg.pipeline)
		cfg.pipeline = 1;
	if ((rc = check_config(&cfg, &e)) || (rc = resolve(cfg.host, cfg.port, &sa, &e)))
		goto done;
	nw = cfg.threads < cfg.conns ? cfg.threads : cfg.conns;

	/* Room for both ends, in case the server runs in this process. */
	rc = raise_nofile((rlim_t)cfg.conns * 2 + 1024, (rlim_t)cfg.conns + 16 + nw, &e);
	if (rc)
		goto done;
	fds = malloc(cfg.conns * sizeof(*fds));
	w = calloc(nw, sizeof(*w));
	if (!fds || !w) {
		rc = lg_fail(&e, -ENOMEM, "out of memory");
		goto done;
	}
	for (uint32_t i = 0; i < cfg.conns; i++)
		fds[i] = -1;
	if ((rc = dial_all(&sa, cfg.conns, fds, &e)))
		goto done;

	size_t body_len;
	const char *hello = http_hello_response(&body_len);
	struct http_response hr;
	/* The body to expect is the one the shared contract sends. */
	http_response_parse(hello, body_len, &hr);
	size_t req_len = cfg.proto == LG_ECHO ? cfg.msg_size : sizeof(http_request) - 1;

	for (uint32_t t = 0, first = 0; t < nw; t++) {
		struct lg_worker *wk = &w[t];
		uint32_t n = cfg.conns / nw + (t < cfg.conns % nw);

		wk->cfg = &cfg;
		wk->gate = &gate;
		wk->nconns = wk->live = n;
		wk->req_len = req_len;
		wk->body = hello + hr.head_len;
		wk->body_len = hr.body_len;
		wk->conns = calloc(n, sizeof(*wk->conns));
		/* Before anything can fail: cleanup closes fds >= 0. */
		for (uint32_t i = 0; wk->conns && i < n; i++)
			wk->conns[i].fd = wk->conns[i].held_fd = -1;
		wk->scratch = malloc(LG_SCRATCH);
		wk->want = malloc(LG_SCRATCH);
		wk->hist = calloc(1, sizeof(*wk->hist));
		if (!wk->conns || !wk->scratch || !wk->want || !wk->hist) {
			rc = lg_fail(&e, -ENOMEM, "out of memory");
			goto done;
		}
		for (uint32_t i = 0; i < n; i++) {
			struct lg_conn *c = &wk->conns[i];
			c->id = first + i;
			/* The worker owns the descriptor from here on. */
			c->fd = fds[first + i];
			fds[first + i] = -1;
			c->out = malloc((size_t)cfg.pipeline * req_len);
			c->t_issue = calloc(cfg.pipeline, sizeof(*c->t_issue));
			if (!c->out || !c->t_issue) {
				rc = lg_fail(&e, -ENOMEM, "out of memory");
				goto done;
			}
		}
		first += n;
	}

	for (; started < nw; started++) {
		if ((rc = -pthread_create(&w[started].tid, NULL, worker_main, &w[started]))) {
			lg_fail(&e, rc, "pthread_create: %s", strerror(-rc));
			break;
		}
	}
	pthread_mutex_lock(&gate.mu);
	gate.state = rc ? -1 : 1;
	pthread_cond_broadcast(&gate.cv);
	pthread_mutex_unlock(&gate.mu);
	for (uint32_t t = 0; t < started; t++)
		pthread_join(w[t].tid, NULL);
	if (rc)
		goto done;

	struct lat_hist *all = w[0].hist;
	for (uint32_t t = 0; t < nw; t++) {
		if (t)
			lat_hist_merge(all, w[t].hist);
		res->requests += w[t].requests;
		res->bytes += w[t].bytes;
		err_to_result(&w[t].err, res);
		if (!rc)
			rc = w[t].err.code;
	}
	res->seconds = cfg.duration_s;
	for (uint32_t t = 0; cfg.answer_all && t < nw; t++)
		if ((double)(w[t].stop - w[t].start) / 1e9 > res->seconds)
			res->seconds = (double)(w[t].stop - w[t].start) / 1e9;
	res->req_per_s = (double)res->requests / res->seconds;
	res->p50_us = (double)lat_hist_quantile(all, 0.50) / 1e3;
	res->p99_us = (double)lat_hist_quantile(all, 0.99) / 1e3;
	res->max_us = (double)all->max / 1e3;
done:
	for (uint32_t t = 0; w && t < nw; t++) {
		for (uint32_t i = 0; w[t].conns && i < w[t].nconns; i++) {
			struct lg_conn *c = &w[t].conns[i];
			if (c->fd >= 0)
				close(c->fd);
			if (c->held_fd >= 0)
				close(c->held_fd);
			free(c->out);
			free(c->in);
			free(c->t_issue);
		}
		free(w[t].conns);
		free(w[t].scratch);
		free(w[t].want);
		free(w[t].hist);
	}
	free(w);
	for (uint32_t i = 0; fds && i < cfg.conns; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	free(fds);
	err_to_result(&e, res);
	return rc;
}

/* ---- lg_verify_echo_conns ------------------------------------------------- */

/* The pattern stream of connection i: request "number" ~0 keeps it apart
 * from any lg_run stream. */
#define VERIFY_SEQ (~0ull)

struct vconn {
	int fd;
	uint32_t id;
	size_t sent, recvd;
};

/* Moves what can move on v without blocking: send the rest of its bytes,
 * check whatever came back.  Returns bytes moved, or < 0 on failure (v
 * closed). */
static ssize_t verify_io(struct vconn *v, size_t total, uint8_t *buf, uint8_t *want,
			 struct lg_err *e)
{
	size_t moved = 0;
	uint64_t key = pattern_key(v->id, VERIFY_SEQ);
	int err;

	while (v->sent < total) {
		size_t n = total - v->sent < LG_SCRATCH ? total - v->sent : LG_SCRATCH;
		pattern_fill(buf, key, v->sent, n);
		ssize_t w = send(v->fd, buf, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EAGAIN)
				break;
			if (errno == EINTR)
				continue;
			err = errno;
			lg_fail(e, -err, "conn %u: send: %s", v->id, strerror(err));
			goto fail;
		}
		v->sent += (size_t)w;
		moved += (size_t)w;
	}
	for (;;) {
		/* Finished connections are read too: a byte too many is an
		 * error like a wrong one. */
		ssize_t r = recv(v->fd, buf, LG_SCRATCH, 0);
		if (r < 0) {
			if (errno == EAGAIN)
				break;
			if (errno == EINTR)
				continue;
			err = errno;
			lg_fail(e, -err, "conn %u: recv: %s", v->id, strerror(err));
			goto fail;
		}
		if (r == 0) {
			lg_fail(e, -ECONNRESET, "conn %u: closed by the server after %zu of %zu bytes",
				v->id, v->recvd, total);
			goto fail;
		}
		if (v->recvd + (size_t)r > v->sent) {
			lg_fail(e, -EBADMSG, "conn %u: %zu bytes back, only %zu sent", v->id,
				v->recvd + (size_t)r, v->sent);
			goto fail;
		}
		ssize_t bad = pattern_check(buf, want, key, v->recvd, (size_t)r);
		if (bad >= 0) {
			lg_fail(e, -EBADMSG, "conn %u byte %zu: got 0x%02x, want 0x%02x", v->id,
				v->recvd + (size_t)bad, buf[bad], want[bad]);
			goto fail;
		}
		v->recvd += (size_t)r;
		moved += (size_t)r;
	}
	return (ssize_t)moved;
fail:
	close(v->fd);
	v->fd = -1;
	return -1;
}

int lg_verify_echo_conns(const char *host, uint16_t port, uint32_t nconns, size_t bytes_per_conn,
			 struct lg_result *res)
{
	struct epoll_event *evs = NULL;
	struct lg_err e = {0};
	struct sockaddr_in sa;
	struct vconn *vc = NULL;
	uint8_t *buf = NULL, *want = NULL;
	int *fds = NULL, ep = -1, rc;
	uint32_t done = 0, failed = 0;
	uint64_t t0 = mono_ns();

	if (!res)
		return -EINVAL;
	memset(res, 0, sizeof(*res));
	if (!nconns || !bytes_per_conn) {
		rc = lg_fail(&e, -EINVAL, "nconns and bytes_per_conn must be at least 1");
		goto out;
	}
	if ((rc = resolve(host, port, &sa, &e)))
		goto out;
	if ((rc = raise_nofile((rlim_t)nconns * 2 + 1024, (rlim_t)nconns + 16, &e)))
		goto out;
	fds = malloc(nconns * sizeof(*fds));
	vc = calloc(nconns, sizeof(*vc));
	evs = calloc(LG_EVENTS, sizeof(*evs));
	buf = malloc(LG_SCRATCH);
	want = malloc(LG_SCRATCH);
	if (!fds || !vc || !evs || !buf || !want) {
		rc = lg_fail(&e, -ENOMEM, "out of memory for %u connections", nconns);
		goto out;
	}
	for (uint32_t i = 0; i < nconns; i++)
		vc[i].fd = -1;
	if ((rc = dial_all(&sa, nconns, fds, &e)))
		goto out;
	for (uint32_t i = 0; i < nconns; i++) {
		vc[i].fd = fds[i];
		vc[i].id = i;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		rc = lg_fail(&e, -errno, "epoll_create1: %s", strerror(errno));
		goto out;
	}
	for (uint32_t i = 0; i < nconns; i++) {
		struct epoll_event ev = {
			.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			.data.u64 = i,
		};
		if (epoll_ctl(ep, EPOLL_CTL_ADD, vc[i].fd, &ev)) {
			rc = lg_fail(&e, -errno, "epoll_ctl: %s", strerror(errno));
			goto out;
		}
	}

	/* Every connection is open now; adding each to the edge-triggered
	 * set reported it writable, which starts its sending. */
	uint64_t last_progress = mono_ns();
	while (done + failed < nconns) {
		int nev = epoll_wait(ep, evs, LG_EVENTS, 1000);
		if (nev < 0) {
			if (errno == EINTR)
				continue;
			rc = lg_fail(&e, -errno, "epoll_wait: %s", strerror(errno));
			goto out;
		}
		uint64_t now = mono_ns();
		for (int k = 0; k < nev; k++) {
			struct vconn *v = &vc[evs[k].data.u64];
			if (v->fd < 0)
				continue;
			bool was_done = v->recvd == bytes_per_conn;
			ssize_t moved = verify_io(v, bytes_per_conn, buf, want, &e);
			if (moved < 0) {
				if (was_done) {
					done--;
					res->bytes -= bytes_per_conn;
				}
				failed++;
				continue;
			}
			if (moved)
				last_progress = now;
			if (!was_done && v->recvd == bytes_per_conn) {
				done++;
				res->bytes += bytes_per_conn;
			}
		}
		if (now - last_progress > LG_STALL_NS) {
			rc = lg_fail(&e, -ETIMEDOUT, "%u of %u connections unfinished, no progress for %llu s",
				     nconns - done - failed, nconns, LG_STALL_NS / 1000000000ull);
			goto out;
		}
	}
	res->requests = done;
	rc = e.code;
out:
	res->seconds = (double)(mono_ns() - t0) / 1e9;
	if (res->seconds > 0)
		res->req_per_s = (double)res->requests / res->seconds;
	if (ep >= 0)
		close(ep);
	for (uint32_t i = 0; vc && i < nconns; i++)
		if (vc[i].fd >= 0)
			close(vc[i].fd);
	free(vc);
	free(fds);
	free(evs);
	free(buf);
	free(want);
	err_to_result(&e, res);
	return rc;
}
