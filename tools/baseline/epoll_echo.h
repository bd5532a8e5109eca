/* epoll_echo.h: the baseline servers cbcmn's own servers are measured
 * against: one thread, one epoll set, edge-triggered, non-blocking
 * sockets, the way a careful hand-written C server does it.
 *
 * Two flavours share the loop: echo (every byte read is written back, in
 * order, none dropped) and HTTP (each complete request head, httpmsg.h, is
 * answered with http_hello_response() on a keep-alive connection).  Both
 * listen on 127.0.0.1 with SO_REUSEADDR and a 4096 backlog (the kernel caps
 * it at net.core.somaxconn).
 */
#ifndef CBCMN_TOOLS_EPOLL_ECHO_H
#define CBCMN_TOOLS_EPOLL_ECHO_H

#include <stdint.h>

struct ee_server;

struct ee_stats {
	uint64_t cpu_us;	/* CPU time the server thread used (user + system),
				 * CLOCK_THREAD_CPUTIME_ID read on that thread */
	uint64_t requests;	/* echo: reads that returned data;
				 * HTTP: responses queued */
	uint64_t conns;		/* connections accepted */
	uint64_t errors;	/* connections closed on an error (not the peer's
				 * EOF or reset; malformed HTTP included), and
				 * accepts that failed for lack of descriptors */
};

/* Starts an echo server thread on 127.0.0.1:port (0: an ephemeral port,
 * see ee_port()), pinned to cpu (-1: not pinned).  The socket is listening
 * when this returns, so clients may connect at once.
 * Returns 0 with *out set, or a negative errno (-EADDRINUSE, -EINVAL for a
 * cpu the machine does not have, ...). */
int ee_start(struct ee_server **out, uint16_t port, int cpu);

/* The same with the HTTP keep-alive flavour.  A malformed request closes
 * its connection. */
int ee_start_http(struct ee_server **out, uint16_t port, int cpu);

/* The port the server listens on. */
uint16_t ee_port(const struct ee_server *srv);

/* Stops the server (an eventfd in its epoll set wakes it), waits for its
 * thread, closes every connection and frees srv.  *out (if not NULL) gets
 * the counters.  Returns 0, -EINVAL for a NULL srv, or the negative errno
 * that stopped the server thread early (its epoll_wait failed). */
int ee_stop(struct ee_server *srv, struct ee_stats *out);

#endif
