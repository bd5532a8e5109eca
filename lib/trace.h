/* trace.h: private to libcbcmn: the in-process trace rings (docs/TRACE.md).
 *
 * With cbcmn_config.trace_events set, each executor records what it does
 * (task run slices, parks, steals, doorbells it rings, SQEs submitted and
 * CQEs reaped, actor messages sent and received) as fixed-size records in a ring of its own: single
 * producer (the executor's thread), single consumer (cbcmn_trace_drain(),
 * one caller at a time, or a watcher in another process: trace_seg.h).
 * A full ring drops the new record and counts it;
 * nothing waits.  Off (the default), e->trace is NULL and each site costs
 * one load and a predicted-not-taken branch.
 */
#ifndef CBCMN_TRACE_H
#define CBCMN_TRACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "runtime.h"
#include "trace_seg.h"

/* An executor's ring as it sees it: the ring (in private memory, or in
 * the shared segment) and its capacity, a private copy that no consumer
 * can change. */
struct cbcmn__trace {
	struct cbcmn__trace_ring *ring;
	uint64_t mask;             /* capacity - 1, fixed */
	size_t size;               /* mapped bytes (0: in the runtime's segment) */
	/* Record while not 0: the segment's holds, or on_self (1) for a
	 * private ring, which only cbcmn_config.trace_events makes. */
	const _Atomic uint32_t *on;
	_Atomic uint32_t on_self;
	/* The shared segment's header (NULL: a private ring), and when this
	 * executor, its ring full, last saw the recorders' beats move
	 * (trace_seg.h, the lease): its thread's only. */
	struct cbcmn__tseg_hdr *seg;
	uint64_t beats_seen, beats_since_ns;
};

/* The shared segment of a runtime's rings (trace_seg.h), NULL: private. */
struct cbcmn__tseg {
	struct cbcmn__tseg_hdr *hdr;
	size_t size;
	int fd;
	uint32_t cap, nexec;
	/* The rings' place: our copy, never the header's, which a watcher
	 * may rewrite before an executor's ring is set up. */
	size_t rings_off, stride;
};

static inline uint64_t cbcmn__trace_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Records dropped, the ring full, between two looks at the recorders'
 * lease: a full ring's drop stays its two stores and a test. */
#define CBCMN__TRACE_LEASE_EVERY 256u

/* At ts, tr's ring full for a while: with nobody draining, the end of a
 * dead recorder's hold (trace_seg.h, the lease).  Out of line and cold:
 * once per CBCMN__TRACE_LEASE_EVERY drops.  On the executor's thread. */
__attribute__((cold)) void cbcmn__trace_lease(struct cbcmn__trace *tr, uint64_t ts);

/* On e's own thread only. */
static inline void cbcmn__trace_put(struct cbcmn__trace *tr, uint32_t kind, uint64_t ts,
				    uint64_t dur, uint64_t arg, uint32_t peer)
{
	struct cbcmn__trace_ring *q = tr->ring;
	/* Relaxed: only this thread writes tail. */
	uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
	/* acquire: pairs with the release CAS of head in cbcmn__trace_take():
	 * the consumer has copied the records below head before this thread
	 * writes over them.  A head a hostile consumer wrote (anything) can
	 * only make this drop: the slot's index is masked with our mask. */
	uint64_t head = atomic_load_explicit(&q->head, memory_order_acquire);
	if (tail - head > tr->mask) {
		uint64_t drops = atomic_load_explicit(&q->dropped, memory_order_relaxed) + 1;
		atomic_store_explicit(&q->dropped, drops, memory_order_relaxed);
		if (__builtin_expect(drops % CBCMN__TRACE_LEASE_EVERY == 0, 0))
			cbcmn__trace_lease(tr, ts);
		return;
	}
	struct cbcmn__trace_rec *r = &q->rec[tail & tr->mask];
	/* Relaxed: ordered by the release store of tail below (trace_seg.h). */
	atomic_store_explicit(&r->ts, ts, memory_order_relaxed);
	atomic_store_explicit(&r->dur, dur, memory_order_relaxed);
	atomic_store_explicit(&r->arg, arg, memory_order_relaxed);
	atomic_store_explicit(&r->peer, peer, memory_order_relaxed);
	atomic_store_explicit(&r->kind, kind, memory_order_relaxed);
	/* release: pairs with the acquire load of tail in cbcmn__trace_take():
	 * the record is whole before a consumer can see it. */
	atomic_store_explicit(&q->tail, tail + 1, memory_order_release);
}

/* Does executor e record now?  Off (no rings) one load and a branch, as
 * ever; with rings nobody holds on (CBCMN_TRACE_EVENTS=N:lazy, no
 * recorder attached) one load more: no clock is read.  Relaxed: a hint,
 * a recorder coming or going may miss or get one event more. */
static inline bool cbcmn__trace_on(const struct cbcmn__exec *e)
{
	const struct cbcmn__trace *tr = e->trace;
	return __builtin_expect(tr != NULL, 0) &&
	       atomic_load_explicit(tr->on, memory_order_relaxed) != 0;
}

/* A record at a trace site of executor e (its own thread).  A slice
 * whose start was not read (recording came on during it) has ts 0: not
 * recorded. */
#define CBCMN__TRACE(e, kind, ts, dur, arg, peer)                                      \
	do {                                                                            \
		if (cbcmn__trace_on(e)) {                                               \
			uint64_t trace_ts_ = (ts);                                      \
			if (trace_ts_)                                                  \
				cbcmn__trace_put((e)->trace, (kind), trace_ts_, (dur),  \
						 (arg), (peer));                        \
		}                                                                       \
	} while (0)

/* With CBCMN_TRACE_EVENTS in the environment: the shared segment of nexec
 * rings (rt->tseg), and rt->cfg.trace_events at least its size.  Returns
 * 0 (also when the variable is unset or 0), -EINVAL (not a number of
 * events up to CBCMN__TRACE_MAX: one line on stderr), -ENOMEM. */
int cbcmn__tseg_create(struct cbcmn_runtime *rt, uint32_t nexec);
void cbcmn__tseg_destroy(struct cbcmn_runtime *rt);
/* Executor i's ring of rt->cfg.trace_events records: in the segment if
 * there is one, else private on node.  NULL: out of memory. */
struct cbcmn__trace *cbcmn__trace_new(struct cbcmn_runtime *rt, uint32_t i, int node);
void cbcmn__trace_free(struct cbcmn__trace *tr);

#endif
