/* epoll_echo.c: the single-threaded edge-triggered epoll baseline servers
 * (echo and HTTP keep-alive) of epoll_echo.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "baseline/epoll_echo.h"
#include "net/httpmsg.h"

#define EE_BACKLOG 4096
#define EE_BUF (64 * 1024)	/* one recv() */
#define EE_EVENTS 256

struct ee_conn {
	int fd;
	struct ee_conn *prev, *next;
	/* Bytes accepted for sending that the socket had no room for.  The
	 * server reads nothing more from a connection while this is not
	 * empty, so it never holds more than one read's worth (echo) or one
	 * read's responses (HTTP): a client that does not read its answers
	 * is slowed down by TCP, not buffered without end. */
	char *out;
	size_t out_off, out_len, out_cap;
	char *in;		/* HTTP: a request head split across reads */
	size_t in_len;
};

struct ee_server {
	int lfd, efd, ep;	/* &lfd and &efd tag their epoll events */
	bool http;
	/* accept4() ran out of descriptors.  The edge-triggered listener
	 * will not report the connections already queued again, so accepting
	 * resumes whenever a close frees a descriptor. */
	bool accept_blocked;
	uint16_t port;
	pthread_t thread;
	char *buf;		/* EE_BUF bytes for recv() */
	const char *resp;	/* HTTP: the answer to every request */
	size_t resp_len;
	struct ee_conn conns;	/* list head: every open connection */
	struct ee_stats st;	/* written by the server thread only; read
				 * after pthread_join(), which orders it */
	int err;
};

static void conn_close(struct ee_server *srv, struct ee_conn *c, bool error);
static void accept_all(struct ee_server *srv);

static int conn_flush(struct ee_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN)
				return 0;	/* EPOLLOUT comes when there is room */
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c->out_off += (size_t)n;
	}
	c->out_off = c->out_len = 0;
	return 0;
}

static bool conn_pending(const struct ee_conn *c)
{
	return c->out_off < c->out_len;
}

static int out_append(struct ee_conn *c, const char *p, size_t n)
{
	if (c->out_off && c->out_len + n > c->out_cap) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (c->out_len + n > c->out_cap) {
		size_t cap = c->out_cap ? c->out_cap * 2 : 4096;
		while (cap < c->out_len + n)
			cap *= 2;
		char *o = realloc(c->out, cap);
		if (!o)
			return -ENOMEM;
		c->out = o;
		c->out_cap = cap;
	}
	memcpy(c->out + c->out_len, p, n);
	c->out_len += n;
	return 0;
}

/* Echo: write back what was read, keep what did not fit. */
static int echo_feed(struct ee_server *srv, struct ee_conn *c, size_t n)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w = send(c->fd, srv->buf + done, n - done, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EAGAIN)
				break;
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)w;
	}
	return done < n ? out_append(c, srv->buf + done, n - done) : 0;
}

/* HTTP: answer every complete request head in the bytes read (n new ones,
 * after c->in_len kept from before), keep a split one for later. */
static int http_feed(struct ee_server *srv, struct ee_conn *c, size_t n)
{
	const char *data = c->in_len ? c->in : srv->buf;
	size_t len = c->in_len + n, off = 0;
	int rc;

	for (;;) {
		ssize_t r = http_request_end(data + off, len - off);
		if (r < 0)
			return -EPROTO;
		if (r == 0)
			break;
		off += (size_t)r;
		srv->st.requests++;
		/* Pipelined requests get their answers in one send(). */
		if ((rc = out_append(c, srv->resp, srv->resp_len)))
			return rc;
	}
	size_t left = len - off;
	/* http_request_end() refuses heads of HTTP_HEAD_MAX or more, so an
	 * incomplete one always fits. */
	if (left && !c->in && !(c->in = malloc(HTTP_HEAD_MAX)))
		return -ENOMEM;
	if (left)
		memmove(c->in, data + off, left);
	c->in_len = left;
	return conn_flush(c);
}

/* Runs a connection until it would block: drain what waits to be sent,
 * then read, answer, repeat.  Edge-triggered, so it must not stop early
 * without an EAGAIN that guarantees a later event. */
static void conn_serve(struct ee_server *srv, struct ee_conn *c)
{
	int rc = conn_flush(c);

	while (!rc && !conn_pending(c)) {
		char *dst = srv->buf;
		size_t room = EE_BUF;
		if (c->in_len) {
			dst = c->in + c->in_len;
			room = HTTP_HEAD_MAX - c->in_len;
		}
		ssize_t n = recv(c->fd, dst, room, 0);
		if (n < 0) {
			if (errno == EAGAIN)
				return;
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (n == 0) {
			/* EOF: whatever was read has been answered. */
			conn_close(srv, c, false);
			return;
		}
		if (srv->http) {
			rc = http_feed(srv, c, (size_t)n);
		} else {
			srv->st.requests++;
			rc = echo_feed(srv, c, (size_t)n);
		}
	}
	/* A client that closes with answers unread resets the connection:
	 * that is how load clients stop, not a server error. */
	if (rc)
		conn_close(srv, c, rc != -ECONNRESET && rc != -EPIPE);
}

static void conn_close(struct ee_server *srv, struct ee_conn *c, bool error)
{
	/* The last close of the socket also drops it from the epoll set. */
	close(c->fd);
	c->prev->next = c->next;
	c->next->prev = c->prev;
	free(c->out);
	free(c->in);
	free(c);
	if (error)
		srv->st.errors++;
	if (srv->accept_blocked)
		accept_all(srv);
}

static void accept_all(struct ee_server *srv)
{
	for (;;) {
		int fd = accept4(srv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			switch (errno) {
			case EAGAIN:
				srv->accept_blocked = false;
				return;
			case EMFILE:
			case ENFILE:
			case ENOBUFS:
			case ENOMEM:
				if (!srv->accept_blocked)
					srv->st.errors++;
				srv->accept_blocked = true;
				return;
			default:
				/* EINTR, ECONNABORTED and the network errors
				 * accept(2) passes on belong to one connection:
				 * go on with the next. */
				continue;
			}
		}

		int one = 1;
		/* Replies go out as they are made; Nagle would hold small
		 * ones back for the client's delayed ACK. */
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		struct ee_conn *c = calloc(1, sizeof(*c));
		struct epoll_event ev = {
			.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			.data.ptr = c,
		};
		if (!c || epoll_ctl(srv->ep, EPOLL_CTL_ADD, fd, &ev)) {
			free(c);
			close(fd);
			srv->st.errors++;
			continue;
		}
		c->fd = fd;
		c->next = srv->conns.next;
		c->prev = &srv->conns;
		c->next->prev = c;
		srv->conns.next = c;
		srv->st.conns++;
	}
}

static void *ee_main(void *arg)
{
	struct ee_server *srv = arg;
	struct epoll_event evs[EE_EVENTS];
	struct timespec t0, t1;
	bool stop = false;

	pthread_setname_np(pthread_self(), "epoll-server"); /* for top and perf */
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	while (!stop) {
		int n = epoll_wait(srv->ep, evs, EE_EVENTS, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			srv->err = -errno;
			break;
		}
		for (int k = 0; k < n; k++) {
			void *p = evs[k].data.ptr;
			if (p == &srv->efd)
				stop = true;
			else if (p == &srv->lfd)
				accept_all(srv);
			else
				conn_serve(srv, p);
		}
	}
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
	srv->st.cpu_us = (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000ll +
				    (t1.tv_nsec - t0.tv_nsec)) / 1000;
	return NULL;
}

/* Closes and frees everything; the server thread is not running. */
static void ee_free(struct ee_server *srv)
{
	while (srv->conns.next != &srv->conns) {
		struct ee_conn *c = srv->conns.next;
		srv->conns.next = c->next;
		close(c->fd);
		free(c->out);
		free(c->in);
		free(c);
	}
	if (srv->ep >= 0)
		close(srv->ep);
	if (srv->efd >= 0)
		close(srv->efd);
	if (srv->lfd >= 0)
		close(srv->lfd);
	free(srv->buf);
	free(srv);
}

static int ee__start(struct ee_server **out, uint16_t port, int cpu, bool http)
{
	struct sockaddr_in sa = {
		.sin_family = AF_INET,
		.sin_port = htons(port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	};
	socklen_t sl = sizeof(sa);
	struct ee_server *srv;
	pthread_attr_t attr;
	int one = 1, rc;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (cpu < -1 || cpu >= CPU_SETSIZE)
		return -EINVAL;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->lfd = srv->efd = srv->ep = -1;
	srv->conns.next = srv->conns.prev = &srv->conns;
	srv->http = http;
	srv->resp = http_hello_response(&srv->resp_len);
	if (!(srv->buf = malloc(EE_BUF))) {
		rc = -ENOMEM;
		goto fail;
	}

	srv->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (srv->lfd < 0 ||
	    setsockopt(srv->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(srv->lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(srv->lfd, EE_BACKLOG) ||
	    getsockname(srv->lfd, (struct sockaddr *)&sa, &sl)) {
		rc = -errno;
		goto fail;
	}
	srv->port = ntohs(sa.sin_port);

	srv->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	srv->ep = epoll_create1(EPOLL_CLOEXEC);
	if (srv->efd < 0 || srv->ep < 0) {
		rc = -errno;
		goto fail;
	}
	struct epoll_event lev = {.events = EPOLLIN | EPOLLET, .data.ptr = &srv->lfd};
	struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &srv->efd};
	if (epoll_ctl(srv->ep, EPOLL_CTL_ADD, srv->lfd, &lev) ||
	    epoll_ctl(srv->ep, EPOLL_CTL_ADD, srv->efd, &sev)) {
		rc = -errno;
		goto fail;
	}

	if ((rc = -pthread_attr_init(&attr)))
		goto fail;
	if (cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		/* The thread starts on its CPU; a CPU the machine lacks
		 * fails pthread_create() with EINVAL. */
		rc = -pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	}
	if (!rc)
		rc = -pthread_create(&srv->thread, &attr, ee_main, srv);
	pthread_attr_destroy(&attr);
	if (rc)
		goto fail;
	*out = srv;
	return 0;
fail:
	ee_free(srv);
	return rc;
}

int ee_start(struct ee_server **out, uint16_t port, int cpu)
{
	return ee__start(out, port, cpu, false);
}

int ee_start_http(struct ee_server **out, uint16_t port, int cpu)
{
	return ee__start(out, port, cpu, true);
}

uint16_t ee_port(const struct ee_server *srv)
{
	return srv ? srv->port : 0;
}

int ee_stop(struct ee_server *srv, struct ee_stats *out)
{
	uint64_t one = 1;
	int rc;

	if (!srv)
		return -EINVAL;
	/* Cannot fail: the counter is far from overflowing. */
	(void)!write(srv->efd, &one, sizeof(one));
	pthread_join(srv->thread, NULL);
	if (out)
		*out = srv->st;
	rc = srv->err;
	ee_free(srv);
	return rc;
}
