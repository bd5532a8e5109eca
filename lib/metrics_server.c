/* metrics_server.c: the in-process scrape endpoint (cbcmn_metrics_serve):
 * one task accepts, one task per connection answers GET /metrics with a
 * fresh snapshot, all in a nursery the server owns (docs/METRICS.md). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "lock.h"
#include "metrics.h"
#include "runtime.h"

/* One connection.  It is on its server's list from its accept until the
 * acceptor (or stop) has joined its task: a task may end without having
 * run (cancelled before it started, or no stack for it), and then the
 * descriptor is still to close.  Only the acceptor adds and takes off
 * entries (sweep()), stop the rest once every task has ended. */
struct conn {
	struct cbcmn_metrics_server *ms;
	struct conn *prev, *next;
	cbcmn_task *task; /* its handle, joined by sweep() or stop */
	_Atomic bool ran; /* conn_main began: it closes fd */
	int fd;
	size_t len; /* bytes of buf received */
	char buf[];  /* lim.req_max + 1 (a NUL after the header block) */
};

struct cbcmn_metrics_server {
	cbcmn_runtime *rt;
	struct cbcmn_metrics_server *next; /* rt->metrics, under metrics_lock */
	cbcmn_nursery *n;                  /* the acceptor and the connections */
	cbcmn_task *acceptor;              /* its handle, joined by stop */
	_Atomic bool started;              /* the acceptor has begun */
	int lfd;                           /* closed by the acceptor as it ends, then -1 */
	/* Kept for shed_one(): /dev/null, or a refused connection's number
	 * with the listening socket dup'ed over it (a second descriptor of
	 * that socket: closed with lfd, or the socket would keep listening,
	 * unanswered).  -1: none. */
	int reserve;
	uint16_t port;
	struct cbcmn__metrics_limits lim;
	/* The acceptor's alone (then stop's, once the tasks have ended):
	 * no lock. */
	struct conn *conns;
	uint32_t nconns;
	/* The last answer's size: the next one is about as big.  Relaxed:
	 * a hint only, racing scrapes may overwrite each other's. */
	_Atomic size_t last_len;
};

/* How soon the acceptor looks again at a connection whose task has not
 * begun. */
#define SWEEP_NS (100ull * 1000000)

/* Every runtime's rt->metrics.  A leaf: held for a list push or unlink. */
static struct cbcmn__mutex metrics_lock = CBCMN__MUTEX_INITIALIZER("metrics", CBCMN__LOCK_METRICS);

static uint64_t mono_ns(void)
{
	/* Real time, also in lab mode: the I/O timeouts it feeds are. */
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Give the task's next I/O call what is left of the deadline; false when
 * nothing is. */
static bool arm(cbcmn_cx *cx, uint64_t deadline)
{
	uint64_t now = mono_ns();
	if (now >= deadline)
		return false;
	cbcmn_io_set_timeout(cx, deadline - now);
	return true;
}

/* Send all of len bytes; false if the client is gone or too slow.
 * MSG_NOSIGNAL: a client that closed must not kill the process with
 * SIGPIPE. */
static bool send_all(cbcmn_cx *cx, int fd, const char *p, size_t len, uint64_t deadline)
{
	while (len) {
		if (!arm(cx, deadline))
			return false;
		int64_t n = cbcmn_send(cx, fd, p, len, MSG_NOSIGNAL);
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

static void respond(cbcmn_cx *cx, int fd, const char *status, const char *extra,
		    const char *ctype, const char *body, size_t blen, bool head, uint64_t deadline)
{
	char hdr[256];
	int n = snprintf(hdr, sizeof(hdr),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
			 "Connection: close\r\n\r\n",
			 status, ctype, blen, extra);
	if (send_all(cx, fd, hdr, (size_t)n, deadline) && !head)
		send_all(cx, fd, body, blen, deadline);
}

static void respond_text(cbcmn_cx *cx, int fd, const char *status, const char *extra,
			 const char *body, bool head, uint64_t deadline)
{
	respond(cx, fd, status, extra, "text/plain; charset=utf-8", body, strlen(body), head,
		deadline);
}

/* Whether an Accept header's value asks for OpenMetrics: one of its media
 * ranges is application/openmetrics-text with a q other than 0.  Prometheus
 * sends "application/openmetrics-text;version=1.0.0,...,text/plain;
 * version=0.0.4;q=0.5,...". */
static bool wants_openmetrics(const char *v, size_t len)
{
	static const char om[] = "application/openmetrics-text";
	const char *end = v + len;
	while (v < end) {
		const char *comma = memchr(v, ',', (size_t)(end - v));
		const char *r_end = comma ? comma : end;
		while (v < r_end && (*v == ' ' || *v == '\t'))
			v++;
		size_t tl = 0;
		while (v + tl < r_end && v[tl] != ';' && v[tl] != ' ' && v[tl] != '\t')
			tl++;
		if (tl == sizeof(om) - 1 && !strncasecmp(v, om, tl)) {
			/* q=0 (0, 0.0, 0.00...) is "not acceptable". */
			bool q0 = false;
			for (const char *p = v + tl; p < r_end; p++) {
				if (*p != ';')
					continue;
				const char *q = p + 1;
				while (q < r_end && (*q == ' ' || *q == '\t'))
					q++;
				if (r_end - q >= 2 && (q[0] == 'q' || q[0] == 'Q') && q[1] == '=') {
					q += 2;
					bool zero = q < r_end && *q == '0';
					for (q += zero; zero && q < r_end && *q != ';' && *q != ' '; q++)
						zero = *q == '.' || *q == '0';
					q0 = zero;
				}
			}
			if (!q0)
				return true;
		}
		v = comma ? comma + 1 : end;
	}
	return false;
}

/* The value of header `name` within hdrs..end (lines ending in \n, maybe
 * \r\n): its start and length, trimmed; NULL if absent. */
static const char *header(const char *hdrs, const char *end, const char *name, size_t *vlen)
{
	size_t nl = strlen(name);
	for (const char *l = hdrs, *eol; l < end; l = eol + 1) {
		eol = memchr(l, '\n', (size_t)(end - l));
		if (!eol)
			return NULL;
		if ((size_t)(eol - l) > nl && !strncasecmp(l, name, nl) && l[nl] == ':') {
			const char *v = l + nl + 1, *ve = eol;
			while (v < ve && (*v == ' ' || *v == '\t'))
				v++;
			while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			*vlen = (size_t)(ve - v);
			return v;
		}
	}
	return NULL;
}

/* The scrape: a snapshot of rt, as text of the kind asked for.  The
 * answer's buffer (NULL: out of memory) and its length. */
static char *exposition(struct cbcmn_metrics_server *ms, bool om, size_t *len)
{
	uint32_t nexec = cbcmn_runtime_workers(ms->rt);
	cbcmn_executor_stats *per = cbcmn__calloc(nexec ? nexec : 1, sizeof(*per));
	char *buf = NULL;
	cbcmn_stats st;
	if (!per || cbcmn_stats_snapshot(ms->rt, &st, per, nexec))
		goto out;
	cbcmn_metrics_source src = {&st, per, st.executors < nexec ? st.executors : nexec};
	uint32_t flags = om ? CBCMN_METRICS_OPENMETRICS : 0;
	/* Sized by the last answer; when it has grown, once more at the size
	 * it said (the same snapshot gives the same text). */
	size_t cap = atomic_load_explicit(&ms->last_len, memory_order_relaxed) + 4096;
	for (int tries = 0; tries < 2; tries++) {
		if (!(buf = cbcmn__malloc(cap)))
			goto out;
		int64_t n = cbcmn_metrics_format(&src, 1, flags, buf, cap);
		if (n >= 0 && (size_t)n < cap) {
			*len = (size_t)n;
			atomic_store_explicit(&ms->last_len, (size_t)n, memory_order_relaxed);
			goto out;
		}
		free(buf);
		buf = NULL;
		if (n < 0)
			goto out;
		cap = (size_t)n + 1;
	}
out:
	free(per);
	return buf;
}

size_t cbcmn__metrics_head_end(const char *buf, size_t len, size_t from)
{
	/* The blank line ends it: CRLF CRLF, or bare LFs as clients that cut
	 * corners send. */
	for (size_t i = from; i + 1 < len; i++)
		if (buf[i] == '\n' &&
		    (buf[i + 1] == '\n' || (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')))
			return i + (buf[i + 1] == '\n' ? 2 : 3);
	return 0;
}

/* Read until buf holds a whole header block.  Its length (the blank line
 * included), 0 when the client closed or ran out of time first, -1 when
 * it does not fit. */
static int64_t read_head(cbcmn_cx *cx, struct conn *c, uint64_t deadline)
{
	size_t max = c->ms->lim.req_max, from = 0;
	for (;;) {
		/* The scan resumes where the last one could not decide (its
		 * last two bytes): a client that sends a byte at a time costs
		 * a pass over what came, not one per byte over everything
		 * before. */
		size_t hl = cbcmn__metrics_head_end(c->buf, c->len, from);
		if (hl)
			return (int64_t)hl;
		if (c->len == max)
			return -1;
		from = c->len > 2 ? c->len - 2 : 0;
		if (!arm(cx, deadline))
			return 0;
		int64_t n = cbcmn_recv(cx, c->fd, c->buf + c->len, max - c->len, 0);
		if (n <= 0)
			return 0;
		c->len += (size_t)n;
	}
}

void cbcmn__metrics_parse(char *buf, size_t hl, struct cbcmn__metrics_req *r)
{
	*r = (struct cbcmn__metrics_req){CBCMN__MR_BAD, false, false};
	char *end = buf + hl;
	*end = 0;
	/* The request line: method SP target SP HTTP/1.x, one space each,
	 * nothing else on it (RFC 9112 section 3).  Each step stays before
	 * the line's end: the block ends in a \n, and buf[hl] is a NUL that
	 * stops every scan (so does a NUL sent inside the line). */
	const char *eol = memchr(buf, '\n', hl);
	size_t ml = strspn(buf, "ABCDEFGHIJKLMNOPQRSTUVWXYZ");
	const char *target = buf + ml + 1, *version = NULL;
	size_t tl = 0;
	bool ok = eol && ml && ml < 16 && buf[ml] == ' ';
	if (ok) {
		tl = strcspn(target, " \r\n");
		ok = tl && target[tl] == ' ';
	}
	if (ok) {
		version = target + tl + 1;
		ok = (!strncmp(version, "HTTP/1.1", 8) || !strncmp(version, "HTTP/1.0", 8)) &&
		     version + 8 == eol - (eol[-1] == '\r');
	}
	if (!ok)
		return;
	r->head = ml == 4 && !strncmp(buf, "HEAD", 4);
	if (!r->head && !(ml == 3 && !strncmp(buf, "GET", 3))) {
		r->route = CBCMN__MR_METHOD;
		return;
	}
	size_t plen = strcspn(target, "? ");
	if (plen != strlen("/metrics") || strncmp(target, "/metrics", plen)) {
		r->route = CBCMN__MR_NOT_FOUND;
		return;
	}
	size_t alen = 0;
	const char *accept = header(eol + 1, end, "Accept", &alen);
	r->om = accept && wants_openmetrics(accept, alen);
	r->route = CBCMN__MR_METRICS;
}

/* Answer the connection's one request. */
static void serve_request(cbcmn_cx *cx, struct conn *c, uint64_t deadline)
{
	int64_t hl = read_head(cx, c, deadline);
	if (hl == 0)
		return;
	if (hl < 0) {
		respond_text(cx, c->fd, "431 Request Header Fields Too Large", "",
			     "request too large\n", false, deadline);
		return;
	}
	struct cbcmn__metrics_req r;
	cbcmn__metrics_parse(c->buf, (size_t)hl, &r);
	switch (r.route) {
	case CBCMN__MR_BAD:
		respond_text(cx, c->fd, "400 Bad Request", "", "bad request\n", false, deadline);
		return;
	case CBCMN__MR_METHOD:
		respond_text(cx, c->fd, "405 Method Not Allowed", "Allow: GET, HEAD\r\n",
			     "GET or HEAD only\n", false, deadline);
		return;
	case CBCMN__MR_NOT_FOUND:
		respond_text(cx, c->fd, "404 Not Found", "", "not found: the metrics are at /metrics\n",
			     r.head, deadline);
		return;
	case CBCMN__MR_METRICS:
		break;
	}
	size_t len = 0;
	char *text = exposition(c->ms, r.om, &len);
	if (!text) {
		respond_text(cx, c->fd, "503 Service Unavailable", "", "out of memory\n", r.head,
			     deadline);
		return;
	}
	respond(cx, c->fd, "200 OK", "",
		r.om ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
		     : "text/plain; version=0.0.4; charset=utf-8",
		text, len, r.head, deadline);
	free(text);
}

static int64_t conn_main(cbcmn_cx *cx, void *arg)
{
	struct conn *c = arg;
	/* Relaxed: the acceptor only polls it to know whether to look again
	 * soon; what decides is read after the join, which orders it. */
	atomic_store_explicit(&c->ran, true, memory_order_relaxed);
	uint64_t deadline = mono_ns() + c->ms->lim.timeout_ns;
	serve_request(cx, c, deadline);
	/* FIN first, then read what the client still sends until it closes:
	 * closing with unread bytes would reset the connection, and a reset
	 * may destroy the answer before the client has read it.  Bounded by
	 * the deadline and by a few buffers' worth. */
	if (!cbcmn_cx_cancelled(cx) && arm(cx, deadline) && cbcmn_shutdown(cx, c->fd, SHUT_WR) == 0)
		for (int i = 0; i < 8 && arm(cx, deadline); i++)
			if (cbcmn_recv(cx, c->fd, c->buf, c->ms->lim.req_max, 0) <= 0)
				break;
	cbcmn_io_set_timeout(cx, 0);
	cbcmn_close(cx, c->fd);
	return 0; /* a client that went away is not the server's failure */
}

/* A connection over the limit: a 503 if the socket takes it at once (it
 * is fresh: it does), then closed. */
static void send_busy(int fd)
{
	static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
				   "Connection: close\r\nRetry-After: 1\r\n\r\n";
	(void)!send(fd, busy, sizeof(busy) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static void refuse(cbcmn_cx *cx, int fd)
{
	send_busy(fd);
	cbcmn_close(cx, fd);
}

/* A descriptor kept for the day there is none (libuv's trick). */
static int reserve_open(void)
{
	return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* A reserve lost (another thread took its number in the instant between
 * shed_one()'s close and its accept, or no /dev/null could be opened) is
 * taken again as soon as a descriptor is seen free: after an accept that
 * succeeded, after connections ended.  At the next EMFILE it cannot be had. */
static void reserve_again(struct cbcmn_metrics_server *ms)
{
	if (ms->reserve < 0)
		ms->reserve = reserve_open();
}

/* A connection whose task has ended: joined (at once), its descriptor
 * closed if the task never ran, freed.  cx NULL: stop, after the
 * nursery's end. */
static void conn_retire(cbcmn_cx *cx, struct conn *c)
{
	cbcmn_task_join(cx, c->task, NULL);
	if (!atomic_load_explicit(&c->ran, memory_order_relaxed)) {
		if (cx)
			cbcmn_close(cx, c->fd);
		else
			close(c->fd); /* no task is left to wait on it */
	}
	free(c);
}

/* The acceptor: retire the connections whose tasks have ended, so that
 * their slots count no more.  O(connections): at most max_clients. */
static void sweep(cbcmn_cx *cx, struct cbcmn_metrics_server *ms)
{
	struct conn *done = NULL;
	for (struct conn *c = ms->conns, *next; c; c = next) {
		next = c->next;
		/* acquire: pairs with the exchange in cbcmn__task_complete():
		 * the task has ended, and the join below will not wait. */
		struct cbcmn_task *t = (struct cbcmn_task *)c->task;
		if (atomic_load_explicit(&t->joiner, memory_order_acquire) != CBCMN__JOIN_DONE)
			continue;
		if (c->prev)
			c->prev->next = c->next;
		else
			ms->conns = c->next;
		if (c->next)
			c->next->prev = c->prev;
		ms->nconns--;
		c->next = done;
		done = c;
	}
	for (struct conn *c = done, *next; c; c = next) {
		next = c->next;
		conn_retire(cx, c);
	}
	if (done) /* their descriptors are closed: one may be the reserve's */
		reserve_again(ms);
}

/* Take connection fd on: on the list with its task, or refused. */
static void start_conn(cbcmn_cx *cx, struct cbcmn_metrics_server *ms, int fd)
{
	sweep(cx, ms);
	struct conn *c = NULL;
	if (ms->nconns < ms->lim.max_clients &&
	    (c = cbcmn__malloc(sizeof(*c) + ms->lim.req_max + 1))) {
		*c = (struct conn){.ms = ms, .fd = fd};
		/* The handle is stored before the task can run. */
		if (cbcmn__spawn((struct cbcmn_task *)cx, ms->n, CBCMN__TF_RUNTIME, (void *)conn_main, c,
				 NULL, &c->task)) {
			free(c);
			c = NULL;
		}
	}
	if (!c) {
		/* The server is stopping (its nursery cancelled: an accept
		 * done just before the stop): closed unanswered, as stop
		 * closes every connection; a 503 would tell the client to
		 * come back to a server that is going away. */
		if (cbcmn_cx_cancelled(cx))
			cbcmn_close(cx, fd);
		else
			refuse(cx, fd);
		return;
	}
	c->next = ms->conns;
	if (ms->conns)
		ms->conns->prev = c;
	ms->conns = c;
	ms->nconns++;
}

/* Out of descriptors (the accept said EMFILE or ENFILE; an io_uring
 * accept says so at once, a connection waiting or not): a connection
 * would wait in the backlog, unanswered, and its client with it, until
 * some descriptor of the process closes.  The reserve makes room for one:
 * it is accepted, refused (a 503 saying when to come back) unless the
 * reserve can be taken again, and the reserve taken again.  The reserve
 * is let go only once a connection waits (a poll takes no descriptor),
 * for the accept alone: let go while idle, any open of the program's
 * would take it for good.  False if there is no reserve or the wait
 * failed: the caller backs off, so that a server out of descriptors does
 * not spin; true if one was answered, or none came within SWEEP_NS. */
static bool shed_one(cbcmn_cx *cx, struct cbcmn_metrics_server *ms)
{
	if (ms->reserve < 0 && (ms->reserve = reserve_open()) < 0)
		return false;
	cbcmn_io_set_timeout(cx, 0);
	int64_t ready = cbcmn_poll(cx, ms->lfd, POLLIN, SWEEP_NS);
	if (ready == -ETIMEDOUT)
		return true;
	if (ready < 0)
		return false;
	close(ms->reserve);
	ms->reserve = -1;
	CBCMN__PAUSE(CBCMN__P_RESERVE_GONE, ms->rt);
	cbcmn_io_set_timeout(cx, SWEEP_NS); /* it is there, or gone */
	int64_t fd = cbcmn_accept(cx, ms->lfd, NULL, NULL, SOCK_CLOEXEC);
	/* A reserve taken again says descriptors are free by now: the
	 * connection is served. */
	ms->reserve = reserve_open();
	if (fd < 0)
		return false;
	if (ms->reserve >= 0) {
		start_conn(cx, ms, (int)fd);
	} else {
		/* Refused, its number kept as the reserve (a dup of the
		 * listening socket over it ends the connection): a close,
		 * then an open, would leave it free meanwhile for any thread. */
		send_busy((int)fd);
		if (dup3(ms->lfd, (int)fd, O_CLOEXEC) >= 0) {
			ms->reserve = (int)fd;
		} else {
			cbcmn_close(cx, (int)fd);
			ms->reserve = reserve_open();
		}
	}
	return true;
}

static int64_t acceptor_main(cbcmn_cx *cx, void *arg)
{
	struct cbcmn_metrics_server *ms = arg;
	/* release: pairs with the acquire in cbcmn__metrics_serve_ex(). */
	atomic_store_explicit(&ms->started, true, memory_order_release);
	uint64_t backoff = 0;
	while (!cbcmn_cx_cancelled(cx)) {
		/* A connection whose task has not begun may never begin (no
		 * stack for it): look again soon, so that its client is not
		 * left waiting for the next connection to be answered.  Once
		 * every task has begun, the accept waits as long as it takes. */
		bool pending = false;
		for (struct conn *c = ms->conns; c && !pending; c = c->next)
			pending = !atomic_load_explicit(&c->ran, memory_order_relaxed);
		cbcmn_io_set_timeout(cx, pending ? SWEEP_NS : 0);
		int64_t fd = cbcmn_accept(cx, ms->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0) {
			CBCMN__PAUSE(CBCMN__P_ACCEPTED, cx);
			backoff = 0;
			reserve_again(ms);
			start_conn(cx, ms, (int)fd);
			continue;
		}
		if (fd == -ETIMEDOUT) {
			sweep(cx, ms);
			continue;
		}
		/* Cancelled (stop), or the socket is broken: serving ends.  A
		 * -ECANCELED the task's cancellation does not explain passes
		 * (a request stopped by something else: not a reason to stop
		 * serving for good). */
		if (!cbcmn__accept_transient((int32_t)fd) &&
		    (fd != CBCMN_ECANCELED || cbcmn_cx_cancelled(cx)))
			break;
		sweep(cx, ms);
		if ((fd == -EMFILE || fd == -ENFILE) && shed_one(cx, ms)) {
			backoff = 0;
			continue;
		}
		/* Out of descriptors and no reserve, or out of memory: the
		 * connections wait in the backlog while some end.  1 ms
		 * doubling to 100 ms. */
		backoff = backoff ? (backoff * 2 > 100000000 ? 100000000 : backoff * 2) : 1000000;
		if (cbcmn_sleep(cx, backoff))
			break;
	}
	cbcmn_io_set_timeout(cx, 0);
	/* The descriptor tasks wait on goes with cbcmn_close() (docs/IO.md):
	 * the epoll backend would miss a plain close(2). */
	cbcmn_close(cx, ms->lfd);
	ms->lfd = -1; /* read by stop after await_all, which orders it */
	/* The reserve may be a dup of the listening socket (shed_one()):
	 * left open, the socket would keep taking connections into its
	 * backlog until stop.  No task waits on it: a plain close. */
	if (ms->reserve >= 0)
		close(ms->reserve);
	ms->reserve = -1;
	return 0;
}

/* Wait until the acceptor has begun: a task can end without running (no
 * stack for it), and a server whose acceptor never ran would take
 * connections into its backlog and answer none.  Polled (a setup call,
 * once): the wait is for an executor to get to the task.  0, or the
 * error the task ended with, joined. */
static int acceptor_begun(struct cbcmn_metrics_server *ms)
{
	struct cbcmn_task *t = (struct cbcmn_task *)ms->acceptor;
	long pause_ns = 20000;
	/* acquire: pairs with the release in acceptor_main() / the exchange
	 * in cbcmn__task_complete(). */
	while (!atomic_load_explicit(&ms->started, memory_order_acquire)) {
		if (atomic_load_explicit(&t->joiner, memory_order_acquire) == CBCMN__JOIN_DONE) {
			/* Ended; begun at the last moment, or never. */
			if (atomic_load_explicit(&ms->started, memory_order_acquire))
				break;
			int64_t r = 0;
			cbcmn_task_join(NULL, ms->acceptor, &r);
			return r < 0 ? (int)r : -ENOMEM;
		}
		nanosleep(&(struct timespec){0, pause_ns}, NULL);
		pause_ns = pause_ns < 1000000 ? pause_ns * 2 : pause_ns;
	}
	return 0;
}

static int listen_on(const char *addr, uint16_t port, uint16_t *bound)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, addr, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons(port);
		sl = sizeof(*in4);
	} else if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		sl = sizeof(*in6);
	} else {
		return -EINVAL;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	/* A restarted process binds its port again while the last one's
	 * connections are in TIME_WAIT. */
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) || listen(fd, 128) ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		int err = -errno;
		close(fd);
		return err;
	}
	*bound = ntohs(ss.ss_family == AF_INET ? in4->sin_port : in6->sin6_port);
	return fd;
}

int cbcmn__metrics_serve_ex(cbcmn_runtime *rt, const char *addr, uint16_t port,
			    const struct cbcmn__metrics_limits *lim, cbcmn_metrics_server **out)
{
	if (!rt || !out)
		return -EINVAL;
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED;
	if (rt->nexec == 0)
		return CBCMN_ENOSCHED;
	if (cbcmn__on_runtime_thread(rt))
		return -EDEADLK;
	struct cbcmn_metrics_server *ms = cbcmn__calloc(1, sizeof(*ms));
	if (!ms)
		return -ENOMEM;
	ms->rt = rt;
	ms->reserve = reserve_open(); /* -1: serves without (shed_one()) */
	ms->lim = lim ? *lim
		      : (struct cbcmn__metrics_limits){CBCMN__METRICS_TIMEOUT_NS,
						       CBCMN__METRICS_MAX_CLIENTS, CBCMN__METRICS_REQ_MAX};
	int rc = listen_on(addr ? addr : "127.0.0.1", port, &ms->port);
	if (rc < 0)
		goto fail;
	ms->lfd = rc;
	if ((rc = cbcmn_nursery_open(rt, NULL, &ms->n)))
		goto fail_fd;
	/* The acceptor is spawned by this thread, a root the runtime runs
	 * for itself: no budget of the program's applies to it. */
	if ((rc = cbcmn__spawn(NULL, ms->n, CBCMN__TF_RUNTIME, (void *)acceptor_main, ms, NULL,
			       &ms->acceptor))) {
		cbcmn_nursery_await_all(NULL, ms->n);
		goto fail_fd;
	}
	if ((rc = acceptor_begun(ms))) {
		cbcmn_nursery_await_all(NULL, ms->n);
		goto fail_fd;
	}
	cbcmn__mutex_lock(&metrics_lock);
	ms->next = rt->metrics;
	rt->metrics = ms;
	cbcmn__mutex_unlock(&metrics_lock);
	*out = ms;
	return 0;
fail_fd:
	close(ms->lfd);
fail:
	if (ms->reserve >= 0)
		close(ms->reserve);
	free(ms);
	return rc;
}

int cbcmn_metrics_serve(cbcmn_runtime *rt, const char *addr, uint16_t port,
			cbcmn_metrics_server **out)
{
	return cbcmn__metrics_serve_ex(rt, addr, port, NULL, out);
}

/* The options' ranges (cbcmn_metrics.h): a deadline far past an hour, a
 * request buffer past a MiB or a client table past 65536 is a mistake, and
 * 64 bytes is the least that holds "GET /metrics HTTP/1.1" and a Host. */
#define OPTS_TIMEOUT_MAX (3600ull * 1000000000)
#define OPTS_CLIENTS_MAX 65536u
#define OPTS_REQ_MIN 64u
#define OPTS_REQ_MAX (1u << 20)

int cbcmn_metrics_serve_ex(cbcmn_runtime *rt, const cbcmn_metrics_opts *opts,
			   cbcmn_metrics_server **out)
{
	struct cbcmn__metrics_limits lim = {CBCMN__METRICS_TIMEOUT_NS, CBCMN__METRICS_MAX_CLIENTS,
					     CBCMN__METRICS_REQ_MAX};
	if (!opts)
		return cbcmn__metrics_serve_ex(rt, NULL, 0, &lim, out);
	/* The size is read before any other field: a caller's struct of
	 * another version may be shorter than this one. */
	if (opts->size != sizeof(*opts))
		return -EINVAL;
	if (opts->timeout_ns > OPTS_TIMEOUT_MAX || opts->max_clients > OPTS_CLIENTS_MAX ||
	    (opts->max_request && (opts->max_request < OPTS_REQ_MIN || opts->max_request > OPTS_REQ_MAX)))
		return -EINVAL;
	if (opts->timeout_ns)
		lim.timeout_ns = opts->timeout_ns;
	if (opts->max_clients)
		lim.max_clients = opts->max_clients;
	if (opts->max_request)
		lim.req_max = opts->max_request;
	return cbcmn__metrics_serve_ex(rt, opts->addr, opts->port, &lim, out);
}

int cbcmn_metrics_port(const cbcmn_metrics_server *ms)
{
	return ms ? ms->port : -EINVAL;
}

/* Cancel, wait, and close what never ran; ms is off rt's list. */
static void server_end(struct cbcmn_metrics_server *ms)
{
	cbcmn_nursery_cancel(ms->n);
	cbcmn_nursery_await_all(NULL, ms->n);
	cbcmn_task_join(NULL, ms->acceptor, NULL); /* ended: at once */
	/* Every task has ended: retire the connections the acceptor had
	 * not swept yet (those whose task never ran still hold their
	 * descriptor). */
	for (struct conn *c = ms->conns, *next; c; c = next) {
		next = c->next;
		conn_retire(NULL, c);
	}
	if (ms->lfd >= 0) /* the acceptor never ran */
		close(ms->lfd);
	if (ms->reserve >= 0)
		close(ms->reserve);
	free(ms);
}

int cbcmn_metrics_stop(cbcmn_metrics_server *ms)
{
	if (!ms)
		return -EINVAL;
	/* The server is the parent's: its waits would return at once, and
	 * freeing the child's copy would pass for a stop. */
	if (cbcmn__forked(ms->rt))
		return CBCMN_EFORKED;
	if (cbcmn__on_runtime_thread(ms->rt))
		return -EDEADLK;
	cbcmn__mutex_lock(&metrics_lock);
	struct cbcmn_metrics_server **pp = &ms->rt->metrics;
	while (*pp && *pp != ms)
		pp = &(*pp)->next;
	if (*pp)
		*pp = ms->next;
	cbcmn__mutex_unlock(&metrics_lock);
	server_end(ms);
	return 0;
}

/* One a server on rt's list: serve opens the server's nursery before it
 * lists it, and stop or destroy unlists it before the await. */
uint32_t cbcmn__metrics_nurseries(struct cbcmn_runtime *rt)
{
	uint32_t k = 0;
	cbcmn__mutex_lock(&metrics_lock);
	for (struct cbcmn_metrics_server *ms = rt->metrics; ms; ms = ms->next)
		k++;
	cbcmn__mutex_unlock(&metrics_lock);
	return k;
}

void cbcmn__metrics_stop_all(struct cbcmn_runtime *rt)
{
	cbcmn__mutex_lock(&metrics_lock);
	struct cbcmn_metrics_server *ms = rt->metrics;
	rt->metrics = NULL;
	cbcmn__mutex_unlock(&metrics_lock);
	while (ms) {
		struct cbcmn_metrics_server *next = ms->next;
		server_end(ms);
		ms = next;
	}
}
