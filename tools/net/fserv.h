/* fserv.h: loopback servers built on cbcmn's fiber I/O, a task per
 * connection: an echo server and an HTTP/1.1 keep-alive "hello" server.
 * Used by cbcmn-bench (echo, http), cbcmn-run and the tests. */
#ifndef CBCMN_TOOLS_FSERV_H
#define CBCMN_TOOLS_FSERV_H

#include <stdbool.h>
#include <stdint.h>

#include "cbcmn.h"

enum fs_proto { FS_ECHO, FS_HTTP };

struct fs_config {
	enum fs_proto proto;
	uint16_t port;       /* 0: an ephemeral port (fs_port() tells) */
	int cpu;             /* pin the executor threads to this CPU; -1: none */
	/* Executors of the server's runtime, 1..CBCMN_MAX_EXECUTORS, or
	 * CBCMN_WORKERS_AUTO: the runtime's count (one per CPU of the
	 * affinity mask, at most CBCMN_MAX_EXECUTORS); 0: 1. */
	uint32_t workers;
	uint32_t ring_flags; /* cbcmn_config.ring_flags */
	uint64_t spin_ns;    /* cbcmn_config.spin_ns (0: the runtime's default) */
	bool multishot;      /* multishot accept, and echo reads through streams
			      * (kernel permitting; else one operation per call) */
	/* The server runtime's configuration (placement policy, seed...), or
	 * NULL for cbcmn_config_init()'s.  Either way workers, ring_flags
	 * and spin_ns above override its fields of the same name. */
	const cbcmn_config *rt_cfg;
};

struct fs_stats {
	uint64_t cpu_us;   /* CPU time of the executor threads while serving */
	uint64_t requests; /* echo: reads that returned data; HTTP: responses */
	uint64_t conns;    /* connections accepted */
	uint64_t errors;   /* connections that ended on an error other than EOF/reset */
	cbcmn_stats rt;    /* the runtime's own statistics at the end */
};

struct fs_server;

void fs_config_init(struct fs_config *cfg);

/* Start a server on 127.0.0.1 in a runtime of its own.  Returns 0 once it
 * listens, or -errno (cbcmn's codes from runtime creation). */
int fs_start(struct fs_server **out, const struct fs_config *cfg);

uint16_t fs_port(const struct fs_server *s);

/* The server's runtime, for cbcmn_stats_snapshot() while it serves; it is
 * destroyed by fs_stop(). */
cbcmn_runtime *fs_runtime(const struct fs_server *s);

/* Stop it (cancel every connection task), fill *out (may be NULL) and free
 * everything.  Returns 0 or the server's first error. */
int fs_stop(struct fs_server *s, struct fs_stats *out);

#endif
