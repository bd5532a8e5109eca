/* metrics.h: private to libcbcmn: the scrape endpoint's hooks
 * (metrics_server.c) for the runtime and the tests. */
#ifndef CBCMN_METRICS_PRIV_H
#define CBCMN_METRICS_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cbcmn.h"

struct cbcmn_runtime;

/* What bounds a client (cbcmn_metrics_serve() documents the defaults). */
struct cbcmn__metrics_limits {
	uint64_t timeout_ns;  /* a connection's whole life: request and answer */
	uint32_t max_clients; /* connections served at once; more get 503 */
	uint32_t req_max;     /* bytes of request line and headers; more get 431 */
};

#define CBCMN__METRICS_TIMEOUT_NS (10ull * 1000000000)
#define CBCMN__METRICS_MAX_CLIENTS 64u
#define CBCMN__METRICS_REQ_MAX 8192u

/* cbcmn_metrics_serve() with other limits (lim NULL: the defaults): the
 * tests shorten the timeout rather than wait 10 s. */
int cbcmn__metrics_serve_ex(cbcmn_runtime *rt, const char *addr, uint16_t port,
			    const struct cbcmn__metrics_limits *lim, cbcmn_metrics_server **out);

/* The scrape endpoint's request parsing, apart from its sockets (the
 * fuzz target tests/fuzz/fuzz_metrics.c drives it).  The length of the
 * header block at the start of buf[0, len) (the blank line included), or
 * 0 while it is not whole; from: where to resume, the previous call's len
 * less 2 (its last two bytes could not decide). */
size_t cbcmn__metrics_head_end(const char *buf, size_t len, size_t from);

enum cbcmn__metrics_route {
	CBCMN__MR_BAD,       /* 400: not a request line */
	CBCMN__MR_METHOD,    /* 405: neither GET nor HEAD */
	CBCMN__MR_NOT_FOUND, /* 404: another path */
	CBCMN__MR_METRICS,   /* 200: the scrape */
};

struct cbcmn__metrics_req {
	enum cbcmn__metrics_route route;
	bool head; /* HEAD: the headers only */
	bool om;   /* Accept asks for OpenMetrics */
};

/* What the request whose header block is buf[0, hl) asks for (hl from
 * cbcmn__metrics_head_end()).  buf[hl] must be writable: a NUL goes there. */
void cbcmn__metrics_parse(char *buf, size_t hl, struct cbcmn__metrics_req *r);

/* cbcmn_runtime_destroy(): stop every server still running on rt. */
void cbcmn__metrics_stop_all(struct cbcmn_runtime *rt);
/* How many of rt's open thread nurseries (rt->thread_nurseries) are the
 * metrics module's own, not the program's: a lower bound while a serve
 * or stop runs (cbcmn_runtime_destroy(): -EBUSY then). */
uint32_t cbcmn__metrics_nurseries(struct cbcmn_runtime *rt);

#endif
