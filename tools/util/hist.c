/* hist.c: the log-linear latency histogram (hist.h). */
#include <math.h>

#include "util/hist.h"

static unsigned hist_index(uint64_t v)
{
	if (v < HIST_SUB)
		return (unsigned)v;
	unsigned shift = 63u - (unsigned)__builtin_clzll(v) - HIST_SUB_BITS;
	/* v >> shift is in [HIST_SUB, 2 * HIST_SUB). */
	return (shift + 1) * HIST_SUB + (unsigned)(v >> shift) - HIST_SUB;
}

/* The middle of bucket i. */
static uint64_t hist_value(unsigned i)
{
	if (i < HIST_SUB)
		return i;
	unsigned shift = i / HIST_SUB - 1;
	uint64_t lo = (uint64_t)(HIST_SUB + i % HIST_SUB) << shift;
	return lo + ((1ull << shift) >> 1);
}

void lat_hist_add(struct lat_hist *h, uint64_t v)
{
	h->b[hist_index(v)]++;
	h->count++;
	if (v > h->max)
		h->max = v;
}

void lat_hist_merge(struct lat_hist *into, const struct lat_hist *h)
{
	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		into->b[i] += h->b[i];
	into->count += h->count;
	if (h->max > into->max)
		into->max = h->max;
}

uint64_t lat_hist_quantile(const struct lat_hist *h, double p)
{
	if (!h->count)
		return 0;
	uint64_t rank = (uint64_t)ceil(p * (double)h->count), seen = 0;
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			uint64_t v = hist_value(i);
			return v < h->max ? v : h->max;
		}
	}
	return h->max;
}
