/* metrics.h: private to libcbcmn: the scrape endpoint's hooks
 * (metrics_server.c) for the runtime and the tests. */
#ifndef CBCMN_METRICS_PRIV_H
#define CBCMN_METRICS_PRIV_H

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

/* cbcmn_runtime_destroy(): stop every server still running on rt. */
void cbcmn__metrics_stop_all(struct cbcmn_runtime *rt);

#endif
