/* hist.h: a log-linear latency histogram (like HdrHistogram) for the
 * tools: constant memory whatever the run's length, about 3% resolution.
 * Used by the load client (loadgen.c) and cbcmn-run's workloads.  Not
 * thread-safe: one histogram per thread, merged at the end. */
#ifndef CBCMN_TOOLS_HIST_H
#define CBCMN_TOOLS_HIST_H

#include <stdint.h>

/* Values below 2^HIST_SUB_BITS have a bucket each; above, every power of
 * two is cut into 2^HIST_SUB_BITS equal buckets, so a bucket is at most
 * 1/32 (~3%) of its value wide.  1920 buckets cover every uint64_t
 * nanosecond value in 15 KiB. */
#define HIST_SUB_BITS 5
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS ((64 - HIST_SUB_BITS + 1) * HIST_SUB)

struct lat_hist {
	uint64_t count, max;
	uint64_t b[HIST_BUCKETS];
};

void lat_hist_add(struct lat_hist *h, uint64_t v);
void lat_hist_merge(struct lat_hist *into, const struct lat_hist *h);
/* The p-quantile (0 < p <= 1) within a bucket's width, never above the
 * largest value seen; 0 when empty. */
uint64_t lat_hist_quantile(const struct lat_hist *h, double p);

#endif
