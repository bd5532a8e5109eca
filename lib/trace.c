/* trace.c: the trace rings' memory, private or in a shared segment, and
 * the claim that lets two consumers drain them (trace.h, trace_seg.h). */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <numaif.h>
#include <sys/mman.h>
#include <unistd.h>

#include "env.h"
#include "statseg.h"
#include "trace.h"

_Static_assert(offsetof(struct cbcmn__tseg_hdr, beats) == CBCMN__TSEG_HDR_V2,
	       "version 3's fields go after version 2's header");

/* Bytes of one ring of cap records, rounded to pages. */
static size_t ring_bytes(uint32_t cap, size_t page)
{
	size_t n = sizeof(struct cbcmn__trace_ring) + (size_t)cap * sizeof(struct cbcmn__trace_rec);
	return (n + page - 1) / page * page;
}

/* Prefer node for [p, p + len): the writer's. */
static void on_node(void *p, size_t len, int node)
{
	if (node < 0 || node >= 1024)
		return;
	unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
	mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
	(void)mbind(p, len, MPOL_PREFERRED, mask, 1024, 0);
}

/* CBCMN_TRACE_EVENTS: records per ring, 0 when unset or 0, *lazy for
 * ":lazy"; -EINVAL when it is not a count up to CBCMN__TRACE_MAX. */
static int64_t env_events(bool *lazy)
{
	const char *v = cbcmn__env(CBCMN__TSEG_ENV);
	*lazy = false;
	if (!v || !*v)
		return 0;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	/* strtoull takes leading blanks and a sign: " 64" and "+64" would
	 * pass while "64 " fails.  A count is digits, and only that. */
	bool digits = end != v && *v >= '0' && *v <= '9'; /* before ":lazy" is passed over */
	if (*end == ':' && strcmp(end, ":lazy") == 0) {
		*lazy = true;
		end += 5;
	}
	if (errno || *end || !digits || n > CBCMN__TRACE_MAX) {
		fprintf(stderr,
			"cbcmn: " CBCMN__TSEG_ENV "=%.40s: not a number of events up to %u, "
			"or one followed by :lazy\n",
			v, CBCMN__TRACE_MAX);
		return -EINVAL;
	}
	return (int64_t)n;
}

int cbcmn__tseg_create(struct cbcmn_runtime *rt, uint32_t nexec)
{
	bool lazy;
	int64_t want = env_events(&lazy);
	if (want <= 0 || nexec == 0)
		return (int)want;
	uint32_t cap = (uint32_t)want;
	if (rt->cfg.trace_events > cap)
		cap = rt->cfg.trace_events;
	if (cap & (cap - 1)) /* up to a power of two, as trace_events */
		cap = 1u << (32 - __builtin_clz(cap));
	size_t page = rt->page;
	size_t off = (sizeof(struct cbcmn__tseg_hdr) + page - 1) / page * page;
	size_t stride = ring_bytes(cap, page);
	struct cbcmn__tseg *ts = calloc(1, sizeof(*ts));
	if (!ts)
		return -ENOMEM;
	ts->size = off + stride * nexec;
	ts->cap = cap;
	ts->nexec = nexec;
	ts->rings_off = off;
	ts->stride = stride;
	/* Sealed at its size before it is mapped, as the statistics segment
	 * (statseg.h): a watcher maps only what nobody can shrink.  Untouched
	 * pages cost nothing until an executor writes them. */
	ts->fd = cbcmn__memfd_sealed(CBCMN__TSEG_NAME, ts->size);
	void *p = MAP_FAILED;
	int err = ts->fd;
	if (ts->fd >= 0) {
		p = cbcmn__mmap(NULL, ts->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
				ts->fd, 0);
		err = p == MAP_FAILED ? -errno : 0;
	}
	if (p == MAP_FAILED) {
		/* No memfd: the rings stay private (nobody else can drain
		 * them), the runtime works as without the variable.  Said,
		 * whatever refused them (the file size limit, the address
		 * space's: ulimit -v, the descriptors'): else a recorder
		 * tells a program started with the variable to start with it. */
		if (err == -EFBIG)
			fprintf(stderr,
				"cbcmn: " CBCMN__TSEG_ENV ": rings of %zu bytes are over the file size "
				"limit (ulimit -f): not shared\n",
				ts->size);
		else
			fprintf(stderr, "cbcmn: " CBCMN__TSEG_ENV ": rings of %zu bytes: %s: not shared\n",
				ts->size, strerror(-err));
		if (ts->fd >= 0)
			close(ts->fd);
		free(ts);
		return 0;
	}
	ts->hdr = p;
	struct cbcmn__tseg_hdr *h = p;
	h->version = CBCMN__TSEG_VERSION;
	h->hdr_size = sizeof(*h);
	h->rec_size = sizeof(struct cbcmn__trace_rec);
	h->nexec = nexec;
	h->cap = cap;
	h->rt_id = rt->seg.rt_id;
	h->rings_off = off;
	h->ring_stride = stride;
	h->pid = rt->seg.pid;
	h->start_ns = rt->seg.start_ns;
	/* The runtime's own holds: from creation unless lazy, and for ever
	 * if the program asked for rings (its own drain wants them all).
	 * Relaxed: published with the magic below. */
	h->own_holds = (lazy ? 0u : 1u) + (rt->cfg.trace_events ? 1u : 0u);
	atomic_store_explicit(&h->holds, h->own_holds, memory_order_relaxed);
	/* The magic last, release: pairs with the watcher's acquire load
	 * (trace_watch.c): it sees the whole header, which never changes. */
	atomic_store_explicit(&h->magic, CBCMN__TSEG_MAGIC, memory_order_release);
	rt->tseg = ts;
	rt->cfg.trace_events = cap;
	return 0;
}

void cbcmn__tseg_destroy(struct cbcmn_runtime *rt)
{
	struct cbcmn__tseg *ts = rt->tseg;
	if (!ts)
		return;
	munmap(ts->hdr, ts->size);
	close(ts->fd);
	free(ts);
	rt->tseg = NULL;
}

struct cbcmn__trace *cbcmn__trace_new(struct cbcmn_runtime *rt, uint32_t i, int node)
{
	struct cbcmn__trace *tr = calloc(1, sizeof(*tr));
	if (!tr)
		return NULL;
	struct cbcmn__tseg *ts = rt->tseg;
	if (ts && i < ts->nexec) {
		tr->ring = (struct cbcmn__trace_ring *)((char *)ts->hdr + ts->rings_off + ts->stride * i);
		tr->mask = ts->cap - 1;
		tr->on = &ts->hdr->holds;
		tr->seg = ts->hdr;
		on_node(tr->ring, ts->stride, node);
		return tr;
	}
	uint32_t n = rt->cfg.trace_events;
	size_t size = ring_bytes(n, rt->page);
	/* Its own pages, untouched until the executor writes them: a ring
	 * the run never fills costs address space, not memory. */
	void *p = cbcmn__mmap(NULL, size, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		free(tr);
		return NULL;
	}
	on_node(p, size, node);
	tr->ring = p;
	tr->mask = n - 1;
	tr->size = size;
	atomic_init(&tr->on_self, 1);
	tr->on = &tr->on_self;
	return tr;
}

void cbcmn__trace_lease(struct cbcmn__trace *tr, uint64_t ts)
{
	struct cbcmn__tseg_hdr *h = tr->seg;
	if (!h)
		return;
	/* The lease (trace_seg.h), timed with the records' own clock: a
	 * slice's ts is its start, maybe before beats_since_ns, which then
	 * only waits longer.  Relaxed throughout: holds is a hint to the
	 * executors, beats and expired counters; the header's fields are
	 * anybody's to write, and a wrong value only turns recording on or
	 * off. */
	uint64_t beats = atomic_load_explicit(&h->beats, memory_order_relaxed);
	if (beats != tr->beats_seen || !tr->beats_since_ns) {
		tr->beats_seen = beats;
		tr->beats_since_ns = ts;
		return;
	}
	if (ts <= tr->beats_since_ns || ts - tr->beats_since_ns < CBCMN__TSEG_LEASE_NS)
		return;
	tr->beats_since_ns = ts; /* the next look a lease later */
	uint32_t own = h->own_holds, held = atomic_load_explicit(&h->holds, memory_order_relaxed);
	while (held > own && !atomic_compare_exchange_weak_explicit(&h->holds, &held, own,
								    memory_order_relaxed,
								    memory_order_relaxed))
		;
	if (held > own)
		atomic_fetch_add_explicit(&h->expired, 1, memory_order_relaxed);
}

void cbcmn__trace_free(struct cbcmn__trace *tr)
{
	if (!tr)
		return;
	if (tr->size)
		munmap(tr->ring, tr->size);
	free(tr);
}

/* Claims lost in a row before a consumer leaves a ring to the next call:
 * the other consumer is taking its events, none are lost by waiting. */
#define TAKE_TRIES 4

int cbcmn__trace_take(struct cbcmn__trace_ring *r, uint64_t mask, uint32_t exec,
		      cbcmn_trace_event *out, uint32_t n, uint64_t *head_out, uint64_t *tail_out)
{
	for (int tries = 0; tries < TAKE_TRIES; tries++) {
		/* acquire: pairs with the release CAS below of the consumer
		 * that moved head here, so the tail read next is at least the
		 * one it read (no tail below head). */
		uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
		/* acquire: pairs with the release store of tail in
		 * cbcmn__trace_put(): the records below it are whole. */
		uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
		*head_out = head;
		*tail_out = tail;
		if (tail - head > mask + 1) {
			/* Another consumer may have taken the ring and the
			 * executor refilled it between our two loads: head is
			 * stale, not the ring corrupt.  Head only grows, and
			 * the executor never writes past head + capacity, so
			 * with head unchanged since (this load after the
			 * acquire of tail) the pair is impossible. */
			if (atomic_load_explicit(&r->head, memory_order_relaxed) != head)
				continue;
			return -EBADMSG; /* nothing a writer and a claim can make */
		}
		uint64_t k = tail - head < n ? tail - head : n;
		for (uint64_t j = 0; j < k; j++) {
			/* Relaxed, field by field: the slot may be rewritten
			 * under the copy if another consumer claimed it
			 * meanwhile, and then the CAS below fails (the acquire
			 * of tail above orders the fields of a claim that wins). */
			const struct cbcmn__trace_rec *x = &r->rec[(head + j) & mask];
			out[j] = (cbcmn_trace_event){
				.ts_ns = atomic_load_explicit(&x->ts, memory_order_relaxed),
				.dur_ns = atomic_load_explicit(&x->dur, memory_order_relaxed),
				.arg = atomic_load_explicit(&x->arg, memory_order_relaxed),
				.executor = exec,
				.peer = atomic_load_explicit(&x->peer, memory_order_relaxed),
				.kind = atomic_load_explicit(&x->kind, memory_order_relaxed)};
		}
		/* release: pairs with the acquire load of head in
		 * cbcmn__trace_put(): the copies above are done before the
		 * executor may write over those records.  Success means no
		 * other consumer took any of them (head only grows). */
		if (atomic_compare_exchange_strong_explicit(&r->head, &head, head + k,
							    memory_order_release, memory_order_relaxed))
			return (int)k;
	}
	return 0;
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
	/* One drain of the process at a time: a second one at once is
	 * refused, not queued (acquire: pairs with the release below, so
	 * this drain sees trace_next as the last one left it). */
	if (atomic_exchange_explicit(&rt->trace_draining, true, memory_order_acquire))
		return -EBUSY;
	if (n > INT32_MAX)
		n = INT32_MAX; /* the count is returned as an int */
	uint32_t got = 0;
	uint64_t drop = 0;
	uint32_t nexec = rt->nexec;
	for (uint32_t i = 0; i < nexec; i++)
		drop += atomic_load_explicit(&rt->exec[i]->trace->ring->dropped, memory_order_relaxed);
	/* Round robin from where the last call stopped, so that a small out[]
	 * does not starve the higher executors. */
	for (uint32_t k = 0; k < nexec; k++) {
		uint32_t i = (rt->trace_next + k) % nexec;
		struct cbcmn__trace *tr = rt->exec[i]->trace;
		uint64_t head, tail;
		int t = cbcmn__trace_take(tr->ring, tr->mask, i, out + got, n - got, &head, &tail);
		if (t < 0) {
			/* Only a watcher with write access (who could as well
			 * write our memory) can do that: the ring goes on from
			 * its tail, what was in it lost. */
			atomic_compare_exchange_strong_explicit(&tr->ring->head, &head, tail,
								memory_order_release,
								memory_order_relaxed);
			continue;
		}
		got += (uint32_t)t;
		if (got == n) {
			rt->trace_next = head + (uint64_t)t == tail ? i + 1 : i;
			break;
		}
	}
	if (dropped)
		*dropped = drop;
	/* release: pairs with the acquire exchange above (the next drain). */
	atomic_store_explicit(&rt->trace_draining, false, memory_order_release);
	return (int)got;
}
