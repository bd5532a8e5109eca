/* trace.h: private to libcbcmn: the in-process trace rings (docs/TRACE.md).
 *
 * With cbcmn_config.trace_events set, each executor records what it does
 * (task run slices, parks, steals, doorbells it rings, SQEs submitted and
 * CQEs reaped) as fixed-size records in a ring of its own: single
 * producer (the executor's thread), single consumer (cbcmn_trace_drain(),
 * one caller at a time).  A full ring drops the new record and counts it;
 * nothing waits.  Off (the default), e->trace is NULL and each site costs
 * one load and a predicted-not-taken branch.
 */
#ifndef CBCMN_TRACE_H
#define CBCMN_TRACE_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "runtime.h"

/* At most this many records per executor (32 bytes each: 512 MiB). */
#define CBCMN__TRACE_MAX (1u << 24)

struct cbcmn__trace_rec {
	uint64_t ts, dur, arg;
	uint32_t peer, kind;
};

struct cbcmn__trace {
	/* The executor's: where its next record goes, and what it dropped. */
	_Alignas(CBCMN__CACHELINE) _Atomic uint64_t tail;
	_Atomic uint64_t dropped;
	uint64_t mask;             /* capacity - 1, fixed */
	/* The drain's: the first record not yet taken. */
	_Alignas(CBCMN__CACHELINE) _Atomic uint64_t head;
	size_t size;               /* mapped bytes, fixed */
	_Alignas(CBCMN__CACHELINE) struct cbcmn__trace_rec rec[];
};

static inline uint64_t cbcmn__trace_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* On e's own thread only. */
static inline void cbcmn__trace_put(struct cbcmn__trace *tr, uint32_t kind, uint64_t ts,
				    uint64_t dur, uint64_t arg, uint32_t peer)
{
	/* Relaxed: only this thread writes tail. */
	uint64_t tail = atomic_load_explicit(&tr->tail, memory_order_relaxed);
	/* acquire: pairs with the release store of head in
	 * cbcmn_trace_drain(): the drain has copied the records below head
	 * before this thread writes over them. */
	uint64_t head = atomic_load_explicit(&tr->head, memory_order_acquire);
	if (tail - head > tr->mask) {
		atomic_store_explicit(&tr->dropped,
				      atomic_load_explicit(&tr->dropped, memory_order_relaxed) + 1,
				      memory_order_relaxed);
		return;
	}
	struct cbcmn__trace_rec *r = &tr->rec[tail & tr->mask];
	r->ts = ts;
	r->dur = dur;
	r->arg = arg;
	r->peer = peer;
	r->kind = kind;
	/* release: pairs with the acquire load of tail in cbcmn_trace_drain():
	 * the record is whole before the drain can see it. */
	atomic_store_explicit(&tr->tail, tail + 1, memory_order_release);
}

/* A record at a trace site of executor e (its own thread). */
#define CBCMN__TRACE(e, kind, ts, dur, arg, peer)                                      \
	do {                                                                            \
		if (__builtin_expect((e)->trace != NULL, 0))                            \
			cbcmn__trace_put((e)->trace, (kind), (ts), (dur), (arg), (peer)); \
	} while (0)

/* A ring of n records (a power of two) on node, or NULL. */
struct cbcmn__trace *cbcmn__trace_new(uint32_t n, int node);
void cbcmn__trace_free(struct cbcmn__trace *tr);

#endif
