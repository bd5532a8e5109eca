/* fserv.c: echo and HTTP servers on cbcmn's fiber I/O (fserv.h).
 *
 * One acceptor task, one task per connection, all pinned to the executor
 * the connection was accepted on: its socket's completions arrive on that
 * ring, so the connection never crosses shards.  With several executors the
 * acceptor spreads connections over them round-robin.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "net/fserv.h"
#include "net/httpmsg.h"

#define FS_BUF 16384
/* Not a clock: clock_gettime() fails on it, so an executor whose thread
 * clock was never taken adds 0 to fs_stats.cpu_us. */
#define FS_NO_CLOCK ((clockid_t)-1)

struct fs_server {
	struct fs_config cfg;
	cbcmn_runtime *rt;
	pthread_t thread;
	int lfd;
	uint16_t port;
	cbcmn_nursery *top;          /* cancelled by fs_stop(); held (server_main) */
	_Atomic int ready;           /* 1: serving; <0: failed to start */
	uint32_t nexec;              /* the runtime's executors */
	clockid_t *clocks;           /* [nexec], each written by its executor's setup */
	uint64_t *cpu0;              /* [nexec] */
	_Atomic uint64_t requests, conns, errors;
	int64_t result;
};

struct conn {
	struct fs_server *s;
	int fd;
};

void fs_config_init(struct fs_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->proto = FS_ECHO;
	cfg->cpu = -1;
	cfg->workers = 1;
}

static uint64_t clock_us(clockid_t c)
{
	struct timespec ts;
	if (clock_gettime(c, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Send all of buf: short sends are continued. */
static int64_t send_all(cbcmn_cx *cx, int fd, const char *buf, size_t len)
{
	size_t off = 0;
	while (off < len) {
		int64_t n = cbcmn_send(cx, fd, buf + off, len - off, MSG_NOSIGNAL);
		if (n < 0)
			return n;
		off += (size_t)n;
	}
	return 0;
}

static bool quiet_error(int64_t rc)
{
	return rc == 0 || rc == -ECONNRESET || rc == -EPIPE || rc == CBCMN_ECANCELED;
}

/* Echo through a multishot stream: no copy in, no poll re-armed per read. */
static int64_t echo_stream(cbcmn_cx *cx, struct conn *c, cbcmn_stream *st)
{
	int64_t rc = 0;
	while (rc == 0) {
		const void *data;
		int64_t n = cbcmn_stream_recv(cx, st, &data);
		if (n <= 0) {
			rc = n;
			break;
		}
		atomic_fetch_add_explicit(&c->s->requests, 1, memory_order_relaxed);
		/* Sent from the stream's own buffer, without waiting. */
		rc = cbcmn_stream_send(cx, st, data, (size_t)n, MSG_NOSIGNAL);
	}
	cbcmn_stream_close(cx, st);
	return rc;
}

static int64_t echo_conn(cbcmn_cx *cx, void *arg)
{
	struct conn *c = arg;
	struct fs_server *s = c->s;
	cbcmn_stream *st;
	if (s->cfg.multishot && cbcmn_stream_open(cx, c->fd, &st) == 0) {
		int64_t rc = echo_stream(cx, c, st);
		if (!quiet_error(rc))
			atomic_fetch_add_explicit(&s->errors, 1, memory_order_relaxed);
		cbcmn_close(cx, c->fd);
		free(c);
		return 0;
	}
	char *buf = malloc(FS_BUF);
	int64_t rc = buf ? 0 : -ENOMEM;
	while (rc == 0) {
		int64_t n = cbcmn_recv(cx, c->fd, buf, FS_BUF, 0);
		if (n <= 0) {
			rc = n;
			break;
		}
		atomic_fetch_add_explicit(&s->requests, 1, memory_order_relaxed);
		rc = send_all(cx, c->fd, buf, (size_t)n);
	}
	if (!quiet_error(rc))
		atomic_fetch_add_explicit(&s->errors, 1, memory_order_relaxed);
	cbcmn_close(cx, c->fd);
	free(buf);
	free(c);
	return 0;
}

/* Reads for a parser that wants bytes in its own buffer: through a stream
 * when there is one (the part of a chunk that does not fit waits for the
 * next call), else with cbcmn_recv(). */
struct reader {
	cbcmn_stream *st;
	const char *pend;
	size_t npend;
};

static int64_t reader_read(cbcmn_cx *cx, struct conn *c, struct reader *r, char *buf, size_t cap)
{
	if (!r->st)
		return cbcmn_recv(cx, c->fd, buf, cap, 0);
	if (!r->npend) {
		const void *d;
		int64_t n = cbcmn_stream_recv(cx, r->st, &d);
		if (n <= 0)
			return n;
		r->pend = d;
		r->npend = (size_t)n;
	}
	size_t n = r->npend < cap ? r->npend : cap;
	memcpy(buf, r->pend, n);
	r->pend += n;
	r->npend -= n;
	return (int64_t)n;
}

static int64_t http_conn(cbcmn_cx *cx, void *arg)
{
	struct conn *c = arg;
	struct fs_server *s = c->s;
	size_t rlen;
	const char *resp = http_hello_response(&rlen);
	char *buf = malloc(HTTP_HEAD_MAX);
	char *out = malloc(FS_BUF);
	size_t have = 0;
	int64_t rc = buf && out ? 0 : -ENOMEM;
	struct reader rd = {0};
	if (s->cfg.multishot && cbcmn_stream_open(cx, c->fd, &rd.st) != 0)
		rd.st = NULL;
	while (rc == 0) {
		if (have == HTTP_HEAD_MAX) {
			rc = -EPROTO; /* a request head larger than the buffer */
			break;
		}
		int64_t n = reader_read(cx, c, &rd, buf + have, HTTP_HEAD_MAX - have);
		if (n <= 0) {
			rc = n;
			break;
		}
		have += (size_t)n;
		/* Answer every complete request in the buffer in one send
		 * (pipelined requests are answered in order). */
		size_t olen = 0, used = 0;
		ssize_t end;
		while ((end = http_request_end(buf + used, have - used)) > 0) {
			used += (size_t)end;
			if (olen + rlen > FS_BUF) {
				if ((rc = send_all(cx, c->fd, out, olen)) != 0)
					break;
				olen = 0;
			}
			memcpy(out + olen, resp, rlen);
			olen += rlen;
			atomic_fetch_add_explicit(&s->requests, 1, memory_order_relaxed);
		}
		if (end < 0) {
			rc = -EPROTO; /* malformed or too large: drop the connection */
			break;
		}
		if (rc == 0 && olen)
			rc = send_all(cx, c->fd, out, olen);
		memmove(buf, buf + used, have - used);
		have -= used;
	}
	if (!quiet_error(rc))
		atomic_fetch_add_explicit(&s->errors, 1, memory_order_relaxed);
	if (rd.st)
		cbcmn_stream_close(cx, rd.st);
	cbcmn_close(cx, c->fd);
	free(buf);
	free(out);
	free(c);
	return 0;
}

static int64_t acceptor(cbcmn_cx *cx, void *arg)
{
	struct fs_server *s = arg;
	cbcmn_nursery *conns;
	int64_t rc = cbcmn_nursery_open(s->rt, cx, &conns);
	if (rc)
		return rc;
	cbcmn_task_fn fn = s->cfg.proto == FS_HTTP ? http_conn : echo_conn;
	uint32_t next = 0, workers = cbcmn_runtime_workers(s->rt);
	cbcmn_acceptor *acc = NULL;
	if (s->cfg.multishot && cbcmn_acceptor_open(cx, s->lfd, SOCK_CLOEXEC, &acc) != 0)
		acc = NULL; /* the kernel has no multishot accept: one at a time */
	for (;;) {
		int64_t fd = acc ? cbcmn_acceptor_next(cx, acc)
				 : cbcmn_accept(cx, s->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (fd == -EMFILE || fd == -ENFILE || fd == -ENOBUFS || fd == -ENOMEM) {
				atomic_fetch_add_explicit(&s->errors, 1, memory_order_relaxed);
				cbcmn_yield(cx); /* out of descriptors: let connections end */
				continue;
			}
			rc = fd == CBCMN_ECANCELED ? 0 : fd;
			break;
		}
		int one = 1;
		setsockopt((int)fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		atomic_fetch_add_explicit(&s->conns, 1, memory_order_relaxed);
		struct conn *c = malloc(sizeof(*c));
		if (!c) {
			close((int)fd);
			continue;
		}
		c->s = s;
		c->fd = (int)fd;
		int src = cbcmn_nursery_spawn_pinned(cx, conns, next++ % workers, fn, c, NULL);
		if (src != 0) {
			close((int)fd);
			free(c);
			if (src == CBCMN_ECANCELED)
				break;
		}
	}
	if (acc)
		cbcmn_acceptor_close(cx, acc);
	cbcmn_nursery_cancel(conns);
	int64_t r2 = cbcmn_nursery_await_all(cx, conns);
	return rc ? rc : (r2 == CBCMN_ECANCELED ? 0 : r2);
}

/* Pinned to each executor in turn: pin its thread, note its CPU clock. */
static int64_t exec_setup(cbcmn_cx *cx, void *arg)
{
	struct fs_server *s = arg;
	uint32_t id = cbcmn_cx_executor(cx);
	if (s->cfg.cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(s->cfg.cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set) != 0)
			return -errno;
	}
	if (id < s->nexec && pthread_getcpuclockid(pthread_self(), &s->clocks[id]) == 0)
		s->cpu0[id] = clock_us(s->clocks[id]);
	return 0;
}

static int64_t server_main(cbcmn_cx *cx, void *arg)
{
	struct fs_server *s = arg;
	int64_t rc = cbcmn_nursery_open(s->rt, cx, &s->top);
	if (rc) {
		atomic_store(&s->ready, -1);
		return rc;
	}
	/* fs_stop() (or fs_start()'s failure path) cancels top from another
	 * thread, maybe after the await_all below is over (the acceptor
	 * failed, the setup failed): held, top stays valid for that cancel,
	 * which then does nothing.  Taken before ready is set; released by
	 * whoever cancels. */
	cbcmn_nursery_hold(s->top);
	cbcmn_nursery *setup;
	if ((rc = cbcmn_nursery_open(s->rt, cx, &setup)) == 0) {
		for (uint32_t i = 0; i < cbcmn_runtime_workers(s->rt); i++)
			cbcmn_nursery_spawn_pinned(cx, setup, i, exec_setup, s, NULL);
		rc = cbcmn_nursery_await_all(cx, setup);
	}
	if (rc == 0)
		rc = cbcmn_nursery_spawn_pinned(cx, s->top, 0, acceptor, s, NULL);
	atomic_store(&s->ready, rc == 0 ? 1 : -1);
	int64_t r2 = cbcmn_nursery_await_all(cx, s->top);
	return rc ? rc : (r2 == CBCMN_ECANCELED ? 0 : r2);
}

static void *server_thread(void *arg)
{
	struct fs_server *s = arg;
	int64_t r = 0;
	int rc = cbcmn_runtime_run(s->rt, server_main, s, &r);
	s->result = rc ? rc : r;
	if (atomic_load(&s->ready) == 0)
		atomic_store(&s->ready, -1);
	return NULL;
}

static int listen_on(uint16_t port, uint16_t *bound)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4096) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	*bound = ntohs(a.sin_port);
	return fd;
}

static void fs_free(struct fs_server *s)
{
	free(s->clocks);
	free(s->cpu0);
	free(s);
}

int fs_start(struct fs_server **out, const struct fs_config *cfg)
{
	struct fs_server *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	if (s->cfg.workers == 0)
		s->cfg.workers = 1;
	int fd = listen_on(cfg->port, &s->port);
	if (fd < 0) {
		free(s);
		return fd;
	}
	s->lfd = fd;
	cbcmn_config rc_cfg;
	if (cfg->rt_cfg)
		rc_cfg = *cfg->rt_cfg;
	else
		cbcmn_config_init(&rc_cfg);
	/* CBCMN_WORKERS_AUTO and 1..CBCMN_MAX_EXECUTORS as the runtime takes
	 * them: it says -EINVAL for the rest. */
	rc_cfg.workers = s->cfg.workers;
	rc_cfg.ring_flags = s->cfg.ring_flags;
	rc_cfg.spin_ns = s->cfg.spin_ns;
	int rc = cbcmn_runtime_create(&rc_cfg, &s->rt);
	if (rc) {
		close(fd);
		free(s);
		return rc;
	}
	s->nexec = cbcmn_runtime_workers(s->rt);
	s->clocks = malloc(s->nexec * sizeof(*s->clocks));
	s->cpu0 = calloc(s->nexec, sizeof(*s->cpu0));
	rc = s->clocks && s->cpu0 ? 0 : ENOMEM;
	for (uint32_t i = 0; !rc && i < s->nexec; i++)
		s->clocks[i] = FS_NO_CLOCK;
	if (rc || (rc = pthread_create(&s->thread, NULL, server_thread, s)) != 0) {
		cbcmn_runtime_destroy(s->rt);
		close(fd);
		fs_free(s);
		return -rc;
	}
	while (atomic_load(&s->ready) == 0)
		usleep(100);
	if (atomic_load(&s->ready) < 0) {
		if (s->top)
			cbcmn_nursery_cancel(s->top);
		cbcmn_nursery_release(s->top);
		pthread_join(s->thread, NULL);
		rc = s->result ? (int)s->result : -EIO;
		cbcmn_runtime_destroy(s->rt);
		close(fd);
		fs_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

uint16_t fs_port(const struct fs_server *s)
{
	return s->port;
}

cbcmn_runtime *fs_runtime(const struct fs_server *s)
{
	return s->rt;
}

int fs_stop(struct fs_server *s, struct fs_stats *out)
{
	uint64_t cpu = 0;
	for (uint32_t i = 0; i < s->nexec; i++)
		cpu += clock_us(s->clocks[i]) - s->cpu0[i];
	cbcmn_nursery_cancel(s->top); /* -ESRCH: it ended by itself */
	cbcmn_nursery_release(s->top);
	pthread_join(s->thread, NULL);
	if (out) {
		memset(out, 0, sizeof(*out));
		out->cpu_us = cpu;
		out->requests = atomic_load(&s->requests);
		out->conns = atomic_load(&s->conns);
		out->errors = atomic_load(&s->errors);
		cbcmn_stats_snapshot(s->rt, &out->rt, NULL, 0);
	}
	int rc = (int)s->result;
	int drc = cbcmn_runtime_destroy(s->rt);
	close(s->lfd);
	fs_free(s);
	return rc ? rc : drc;
}
