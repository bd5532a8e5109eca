/* loadgen.h: a loopback load client for the echo and HTTP/1.1 keep-alive
 * benchmarks, and a many-connection echo checker for the tests.
 *
 * The client is plain edge-triggered epoll on non-blocking sockets, one
 * epoll set per client thread, so that it costs the same whichever server
 * it drives.  Every byte that comes back is checked: an echo server must
 * return exactly the per-connection, per-request pattern it was sent, an
 * HTTP server exactly http_hello_response()'s status and body (httpmsg.h).
 * A wrong byte, a malformed response or a connection the server drops is
 * counted in lg_result.errors, the first one described in lg_result.error,
 * and makes the call fail; it is never skipped.
 *
 * Both calls block the calling thread until they are done and may be
 * called from any thread, several at once (they share no state).
 */
#ifndef CBCMN_TOOLS_LOADGEN_H
#define CBCMN_TOOLS_LOADGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum lg_proto {
	LG_ECHO,	/* send msg_size bytes, expect the same bytes back */
	LG_HTTP,	/* "GET / HTTP/1.1", expect http_hello_response() */
};

struct lg_config {
	const char *host;	/* IPv4 address; NULL means 127.0.0.1 */
	uint16_t port;
	uint32_t conns;		/* connections, all open for the whole run */
	uint32_t msg_size;	/* echo: bytes per request (1..LG_MSG_MAX) */
	double duration_s;	/* measured time, after every connect is done */
	int cpu;		/* pin every client thread to this CPU; -1: none */
	uint32_t threads;	/* client threads (connections split evenly) */
	enum lg_proto proto;
	uint32_t pipeline;	/* requests in flight per connection (1..LG_PIPELINE_MAX) */
	/* Run past duration_s until every connection has had a response (10 s
	 * more at most, then -ETIMEDOUT): what a correctness check wants on a
	 * loaded machine, where a server may accept nothing in a short window.
	 * A benchmark leaves it false: a fixed window. */
	bool answer_all;
	/* Drive the connections through one io_uring per client thread
	 * instead of epoll: a multishot recv per connection into a ring of
	 * provided buffers, and the sends a turn's completions ask for
	 * submitted in the one io_uring_enter that waits for the next
	 * completions.  A cheaper client, for a server whose cost is to be
	 * seen apart from the client's (docs/BENCHMARKS.md, "Eighteenth
	 * session").  Echo only: -EINVAL with LG_HTTP.  Needs io_uring with
	 * buffer rings and multishot recv (Linux 6.0): the error
	 * io_uring_setup or the buffer ring's registration gave (-ENOSYS,
	 * -EPERM under a seccomp filter, -EINVAL), or the recv's, fails the
	 * run.  A connection whose send or recv finds the SQ full (more
	 * than 2048 connections a thread) and its submit refused (-EBUSY,
	 * -EAGAIN) fails with that error. */
	bool ring;
};

#define LG_MSG_MAX (1u << 20)
#define LG_PIPELINE_MAX 1024u

struct lg_result {
	uint64_t requests;	/* responses completed and checked within the time */
	uint64_t bytes;		/* response bytes those carried */
	double seconds;		/* the measured time */
	double req_per_s;
	double p50_us, p99_us, max_us;	/* request latency, issue to last byte */
	uint64_t errors;	/* connections that failed (see error) */
	char error[128];	/* the first failure, "" if none */
};

/* Defaults: 127.0.0.1, 1 connection, 64-byte echo, 1 s, no pinning,
 * 1 thread, pipeline 1.  Start from these: a zeroed config pins to CPU 0. */
void lg_config_init(struct lg_config *cfg);

/* Connects cfg->conns connections (refused or EAGAIN connects are retried
 * for about a second, so the call may race a server's start), then keeps
 * cfg->pipeline requests in flight on each for cfg->duration_s, then closes
 * them.  Latencies go to a log-linear histogram (about 3% resolution), so
 * memory does not grow with the run.  Raises RLIMIT_NOFILE if cfg->conns
 * needs it.
 *
 * Returns 0, or a negative errno with res->error saying what failed:
 * -EINVAL for a bad config, -ECONNREFUSED/-ETIMEDOUT/... when connecting
 * fails, -EBADMSG for a wrong echo byte, -EPROTO for a malformed or
 * unexpected HTTP response, -ECONNRESET/-EPIPE when the server drops a
 * connection.  *res is filled in either case (zeroed on -EINVAL). */
int lg_run(const struct lg_config *cfg, struct lg_result *res);

/* Opens nconns echo connections to host:port (NULL host: 127.0.0.1), all
 * of them at once, then pushes bytes_per_conn bytes through each (a
 * pattern distinct per connection) and checks every byte that comes back.
 * The connections stay open until every one is done.  Raises the
 * RLIMIT_NOFILE soft limit to the hard limit, and the hard limit too when
 * that is too low and the process may (root): room is made for both ends,
 * since tests often run the server in the same process.
 *
 * res->requests counts connections that passed, res->bytes the bytes
 * checked, res->seconds the whole time (connects included).  Returns 0, or
 * a negative errno as for lg_run() (-EMFILE if the descriptor limit cannot
 * be raised far enough, -ETIMEDOUT if nothing moves for 10 s). */
int lg_verify_echo_conns(const char *host, uint16_t port, uint32_t nconns,
			 size_t bytes_per_conn, struct lg_result *res);

#endif
