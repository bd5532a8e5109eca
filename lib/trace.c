/* trace.c: the trace rings' memory and their drain (trace.h). */
#include <errno.h>
#include <stdint.h>
#include <numaif.h>
#include <sys/mman.h>

#include "trace.h"

struct cbcmn__trace *cbcmn__trace_new(uint32_t n, int node)
{
	size_t size = sizeof(struct cbcmn__trace) + (size_t)n * sizeof(struct cbcmn__trace_rec);
	/* Its own pages, untouched until the executor writes them: a ring
	 * the run never fills costs address space, not memory. */
	struct cbcmn__trace *tr = cbcmn__mmap(NULL, size, PROT_READ | PROT_WRITE,
					      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (tr == MAP_FAILED)
		return NULL;
	if (node >= 0 && node < 1024) {
		unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
		mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
		(void)mbind(tr, size, MPOL_PREFERRED, mask, 1024, 0); /* the writer's node */
	}
	tr->mask = n - 1;
	tr->size = size;
	return tr;
}

void cbcmn__trace_free(struct cbcmn__trace *tr)
{
	if (tr)
		munmap(tr, tr->size);
}

int cbcmn_trace_drain(cbcmn_runtime *rt, cbcmn_trace_event *out, uint32_t n, uint64_t *dropped)
{
	if (!rt || (!out && n))
		return -EINVAL;
	if (!rt->cfg.trace_events)
		return -EOPNOTSUPP;
	/* A forked child's rings are copies of the parent's, whose drain
	 * takes the same events: taken here they would be reported twice
	 * (and a drain under way in another thread as the parent forked
	 * would leave the child -EBUSY for ever). */
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED;
	/* One consumer per ring: a second drain at once is refused, not
	 * queued (acquire: pairs with the release below, so this drain sees
	 * the heads the last one stored). */
	if (atomic_exchange_explicit(&rt->trace_draining, true, memory_order_acquire))
		return -EBUSY;
	if (n > INT32_MAX)
		n = INT32_MAX; /* the count is returned as an int */
	uint32_t got = 0;
	uint64_t drop = 0;
	uint32_t nexec = rt->nexec;
	for (uint32_t i = 0; i < nexec; i++)
		drop += atomic_load_explicit(&rt->exec[i]->trace->dropped, memory_order_relaxed);
	/* Round robin from where the last call stopped, so that a small out[]
	 * does not starve the higher executors. */
	for (uint32_t k = 0; k < nexec; k++) {
		uint32_t i = (rt->trace_next + k) % nexec;
		struct cbcmn__trace *tr = rt->exec[i]->trace;
		/* Relaxed: only the drain writes head, and drains are serialized. */
		uint64_t head = atomic_load_explicit(&tr->head, memory_order_relaxed);
		/* acquire: pairs with the release store of tail in
		 * cbcmn__trace_put(): the records below it are whole. */
		uint64_t tail = atomic_load_explicit(&tr->tail, memory_order_acquire);
		for (; head != tail && got < n; head++, got++) {
			const struct cbcmn__trace_rec *r = &tr->rec[head & tr->mask];
			out[got] = (cbcmn_trace_event){.ts_ns = r->ts, .dur_ns = r->dur, .arg = r->arg,
						       .executor = i, .peer = r->peer, .kind = r->kind};
		}
		/* release: pairs with the acquire load of head in
		 * cbcmn__trace_put(): the copies above are done before the
		 * executor may write over those records. */
		atomic_store_explicit(&tr->head, head, memory_order_release);
		if (got == n) {
			rt->trace_next = head == tail ? i + 1 : i;
			break;
		}
	}
	if (dropped)
		*dropped = drop;
	/* release: pairs with the acquire exchange above (the next drain). */
	atomic_store_explicit(&rt->trace_draining, false, memory_order_release);
	return (int)got;
}
