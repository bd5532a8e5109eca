/* cbcmn_metrics.h: the runtime's statistics for Prometheus.
 *
 * cbcmn_metrics_format() writes statistics snapshots (cbcmn_stats_snapshot)
 * as Prometheus text; cbcmn_metrics_serve() answers scrapes of them over
 * HTTP from a task of the runtime itself (docs/METRICS.md).  cbcmn-stat
 * --prometheus writes the same text for another process.
 *
 * The families: one per figure of cbcmn_stats and cbcmn_executor_stats,
 * counters cbcmn_<name>_total, gauges cbcmn_<name>, labelled
 * runtime="<cbcmn_stats.runtime_id>" and, per executor, executor="<i>";
 * times in seconds, shares in [0, 1].  docs/OBSERVABILITY.md lists them.
 */
#ifndef CBCMN_METRICS_H
#define CBCMN_METRICS_H

/* Its types and CBCMN_API: a program may include this header alone (its
 * man pages say so).  cbcmn.h includes this one at its end; the guards
 * make either order one copy of each. */
#include "cbcmn.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One runtime's figures for cbcmn_metrics_format(): per[] holds nper
 * (<= stats->executors) entries, the first nper executors. */
typedef struct cbcmn_metrics_source {
	const cbcmn_stats *stats;
	const cbcmn_executor_stats *per;
	uint32_t nper;
} cbcmn_metrics_source;

/* The text format (flags of cbcmn_metrics_format()).  0: Prometheus's text
 * exposition 0.0.4 (Content-Type "text/plain; version=0.0.4"): # TYPE
 * names a counter with its _total, the info and state-set families are
 * gauges.  CBCMN_METRICS_OPENMETRICS: OpenMetrics 1.0 text
 * ("application/openmetrics-text; version=1.0.0"): # TYPE names the family
 * (no _total), info and stateset types, "# EOF" last. */
#define CBCMN_METRICS_OPENMETRICS 0x1u

/* Write the exposition of src[0..n) into buf as snprintf() does: at most
 * cap bytes, the last of them a NUL (nothing when cap is 0), and return the
 * length of the whole text (without the NUL).  A result >= cap means the
 * text was cut: call again with a buffer of result + 1 bytes (the same
 * sources give the same text).  The families of several runtimes are
 * written together, each family's samples in src's order, as the formats
 * require.  Returns -EINVAL for NULL src with n > 0, a source with NULL
 * stats (or NULL per with nper > 0, or nper > stats->executors), NULL buf
 * with cap > 0, or an unknown flag.  Any thread; no allocation. */
CBCMN_API int64_t cbcmn_metrics_format(const cbcmn_metrics_source *src, size_t n, uint32_t flags,
				       char *buf, size_t cap);

/* ------------------------------------------------------------------------
 * The in-process endpoint: a task of the runtime answers scrapes.
 *
 * cbcmn_metrics_serve() listens on addr:port (TCP, IPv4 or IPv6 literal;
 * NULL: "127.0.0.1", loopback only: listening on every interface must be
 * asked for, "0.0.0.0" or "::"; port 0: a free port, read back with
 * cbcmn_metrics_port()) and answers, from tasks of rt in a nursery the
 * server owns (no thread of its own):
 *   GET /metrics (or HEAD; a query string is ignored)
 *           200, a fresh cbcmn_stats_snapshot() of rt as Prometheus text
 *           0.0.4, or OpenMetrics when the request's Accept names
 *           application/openmetrics-text;
 *   another path 404; another method 405; a request line or header block
 *   past 8 KiB 431; a request it cannot parse 400.
 * One request per connection ("Connection: close").  A client has 10 s to
 * send its request and take the answer, in all (not per call: a slow
 * trickle is cut too); at most 64 are served at once, and a connection
 * beyond that is answered 503 at once and closed.  So a client that
 * connects and sends nothing holds one slot for 10 s and nothing else; the
 * memory a client costs is bounded (a task, its 8 KiB request buffer, the
 * answer being sent).  The scrape's own work (the snapshot and the text)
 * counts in the statistics it reports, as a scraper's load does anywhere.
 *
 * Call from a thread outside the runtime, as with cbcmn_runtime_run(): from
 * one of its tasks or its blocking pool it returns -EDEADLK and does
 * nothing, since it waits (without yielding) for an executor to begin the
 * server's first task, which may need the caller's own executor.  A program
 * that decides inside a task to serve starts the server from its main
 * thread before cbcmn_runtime_run(), or from a thread of its own.  It
 * returns once the server's first task has begun.  A task
 * of the server that cannot start (no memory for its stack) costs its
 * connection only, never the server.  On success stores
 * the server in *out and returns 0; else nothing is left open and it
 * returns -EINVAL (NULL rt or out, addr not an IP address), -EDEADLK,
 * CBCMN_ENOSCHED (the core profile), CBCMN_EFORKED, -ENOMEM, or the error
 * of socket(2), bind(2) or listen(2) (-EADDRINUSE, -EACCES, ...).
 * A runtime may have several servers (several ports). */
typedef struct cbcmn_metrics_server cbcmn_metrics_server;
CBCMN_API int cbcmn_metrics_serve(cbcmn_runtime *rt, const char *addr, uint16_t port,
				  cbcmn_metrics_server **out);

/* The endpoint's options (cbcmn_metrics_serve_ex()).  Zero the struct, set
 * size to sizeof(cbcmn_metrics_opts), then the fields wanted: a field left
 * 0 takes its default, the one cbcmn_metrics_serve() uses.
 *
 * The limits bound what one client and all of them cost: at most
 * max_clients connections at once, each with max_request bytes of request
 * buffer and timeout_ns in all for its request and its answer; so the
 * server's memory is at most max_clients x (a task, max_request, one
 * answer).  A limit out of its range is -EINVAL, never clamped. */
typedef struct cbcmn_metrics_opts {
	/* sizeof(cbcmn_metrics_opts) of the header compiled against: the
	 * layout's version.  A later version only appends fields; this
	 * library knows this one size (another is -EINVAL, never a read past
	 * the caller's struct). */
	size_t size;
	const char *addr;      /* IPv4/IPv6 literal; NULL: "127.0.0.1" */
	uint64_t timeout_ns;   /* a connection's whole life; 0: 10 s; at most 3600 s */
	uint32_t max_clients;  /* served at once, more get 503; 0: 64; at most 65536 */
	uint32_t max_request;  /* bytes of request line and headers, more get 431;
				* 0: 8192; 64 to 1 MiB */
	uint16_t port;         /* 0: a free port (cbcmn_metrics_port()) */
} cbcmn_metrics_opts;

/* cbcmn_metrics_serve() with options: opts NULL is every default on a free
 * port of 127.0.0.1.  Returns as cbcmn_metrics_serve() does, and -EINVAL
 * also for a size this library does not know or a limit out of range. */
CBCMN_API int cbcmn_metrics_serve_ex(cbcmn_runtime *rt, const cbcmn_metrics_opts *opts,
				     cbcmn_metrics_server **out);

/* The port the server listens on (the one chosen for port 0), or -EINVAL
 * for NULL.  Any thread, while the server is not stopped. */
CBCMN_API int cbcmn_metrics_port(const cbcmn_metrics_server *ms);

/* Stop the server: cancel its tasks (a scrape under way is cut, its client
 * sees the connection close), wait for them, close its descriptors and
 * free ms.  From a thread outside the runtime (-EDEADLK from one of its
 * tasks: the server's tasks may need that executor to end).  Returns 0,
 * -EINVAL (NULL), -EDEADLK or CBCMN_EFORKED (in a child forked after the
 * runtime was created: the server is the parent's), ms untouched.  cbcmn_runtime_destroy()
 * stops the servers still running on the runtime first (even when it then
 * returns -EBUSY for other tasks), after which their handles are gone:
 * stop each before destroy, or never.  Not concurrently with another stop
 * of ms or with destroy of its runtime. */
CBCMN_API int cbcmn_metrics_stop(cbcmn_metrics_server *ms);

#ifdef __cplusplus
}
#endif

#endif /* CBCMN_METRICS_H */
