/* trace_watch.c: another process's trace rings, mapped from its
 * "cbcmn-trace" memfd and drained from here (trace_seg.h): what
 * cbcmn-top --record reads.  The target may be hostile or dying: the
 * geometry is checked once on a private copy and used from then on, every
 * head and tail is checked before a record is read, and a ring found
 * corrupt is left alone. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fault.h"
#include "statseg.h"
#include "trace_seg.h"

struct cbcmn__tsw {
	void *map;
	size_t size;
	uint32_t nexec, cap;
	uint64_t rings_off, stride;
	uint64_t start_ns;
	uint32_t next;          /* the ring the next drain starts at */
	bool armed;             /* our hold on the header's holds */
	bool lease;             /* version 3: we beat, and the target may expire our hold */
	uint32_t own_holds;     /* the runtime's part of holds, never ours to take */
	uint32_t expired;       /* the header's expired when our hold was last taken */
	bool *corrupt;          /* per ring: left alone */
};

/* The header (a private copy) describes nexec rings that fit size bytes,
 * of our layout, made by pid for runtime rt_id.  Every field may be
 * garbage: the sums are done in 64 bits, nexec and cap bounded first. */
static int tseg_check(const struct cbcmn__tseg_hdr *h, uint64_t size, pid_t pid, uint32_t rt_id)
{
	if (atomic_load_explicit(&h->magic, memory_order_relaxed) != CBCMN__TSEG_MAGIC)
		return -ENOENT;
	if (h->version < CBCMN__TSEG_VERSION_MIN || h->version > CBCMN__TSEG_VERSION ||
	    h->hdr_size != (h->version >= 3 ? sizeof(*h) : CBCMN__TSEG_HDR_V2) ||
	    h->rec_size != sizeof(struct cbcmn__trace_rec))
		return -EPROTO;
	uint64_t ring = sizeof(struct cbcmn__trace_ring) + (uint64_t)h->cap * sizeof(struct cbcmn__trace_rec);
	if (h->nexec == 0 || h->nexec > CBCMN_MAX_EXECUTORS || h->cap == 0 ||
	    h->cap > CBCMN__TRACE_MAX || (h->cap & (h->cap - 1)) || h->ring_stride < ring ||
	    h->ring_stride > (1ull << 40) || h->ring_stride % 64 || h->rings_off < h->hdr_size ||
	    h->rings_off % 64 || h->rings_off > (1ull << 40) ||
	    h->rings_off + h->ring_stride * h->nexec > size)
		return -EBADMSG;
	if (h->pid != pid || h->rt_id != rt_id)
		return -ENOENT; /* another runtime's, or a parent's inherited */
	return 0;
}

/* Take our hold on the target's recording: relaxed, a hint to its
 * executors (trace.h).  expired first: a lease that ends between the
 * two is seen at our next beat, and the hold taken again. */
static void hold(struct cbcmn__tsw *w)
{
	struct cbcmn__tseg_hdr *h = w->map;
	if (w->lease) {
		w->expired = atomic_load_explicit(&h->expired, memory_order_relaxed);
		atomic_fetch_add_explicit(&h->beats, 1, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&h->holds, 1, memory_order_relaxed);
}

/* A drain: we are alive (beats), and if the target let our hold go
 * meanwhile (we were stopped past the lease), we take it again, and say
 * so in *st: what a lazy target did meanwhile was not counted. */
static void beat(struct cbcmn__tsw *w, struct cbcmn__tsw_stat *st)
{
	struct cbcmn__tseg_hdr *h = w->map;
	if (!w->armed || !w->lease)
		return;
	if (atomic_load_explicit(&h->expired, memory_order_relaxed) != w->expired) {
		st->lapses++;
		hold(w);
	} else
		atomic_fetch_add_explicit(&h->beats, 1, memory_order_relaxed);
}

/* Map descriptor nr of pid if it holds rt_id's rings. */
static int tsw_map(pid_t pid, pid_t own, int nr, uint32_t rt_id, struct cbcmn__tsw *w)
{
	struct stat st;
	struct cbcmn__tseg_hdr h;
	/* Read-write: taking events moves the rings' heads. */
	int fd = cbcmn__memfd_open(pid, nr, CBCMN__TSEG_NAME, O_RDWR, &st, &h, sizeof(h));
	if (fd < 0)
		return fd;
	int rc = tseg_check(&h, (uint64_t)st.st_size, own, rt_id);
	if (rc) {
		close(fd);
		return rc;
	}
	size_t len = (size_t)(h.rings_off + h.ring_stride * h.nexec);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	rc = p == MAP_FAILED ? -errno : 0;
	close(fd); /* the mapping keeps the pages; the seals keep its size */
	if (rc)
		return rc;
	/* acquire: pairs with the release store of the magic in
	 * cbcmn__tseg_create() (the geometry we use is our copy anyway). */
	if (atomic_load_explicit(&((struct cbcmn__tseg_hdr *)p)->magic, memory_order_acquire) !=
	    CBCMN__TSEG_MAGIC) {
		munmap(p, len);
		return -ENOENT;
	}
	*w = (struct cbcmn__tsw){.map = p, .size = len, .nexec = h.nexec, .cap = h.cap,
				 .rings_off = h.rings_off, .stride = h.ring_stride,
				 .start_ns = h.start_ns, .lease = h.version >= 3,
				 .own_holds = h.version >= 3 ? h.own_holds : 0};
	return 0;
}

int cbcmn__tsw_open(pid_t pid, uint32_t rt_id, struct cbcmn__tsw **out)
{
	*out = NULL;
	int *fds = NULL;
	uint32_t n = 0;
	int rc = cbcmn__memfd_fds(pid, CBCMN__TSEG_NAME, &fds, &n);
	if (rc)
		return rc == -EPERM ? -EACCES : rc;
	pid_t own = cbcmn__own_pid(pid);
	struct cbcmn__tsw w = {0};
	rc = -ENOENT;
	for (uint32_t i = 0; i < n; i++) {
		int r = tsw_map(pid, own, fds[i], rt_id, &w);
		if (r == 0) {
			rc = 0;
			break;
		}
		if (r != -ENOENT && rc == -ENOENT)
			rc = r; /* why none matched: the first reason not "not ours" */
	}
	free(fds);
	if (rc)
		return rc;
	struct cbcmn__tsw *p = calloc(1, sizeof(*p));
	bool *bad = calloc(w.nexec, sizeof(*bad));
	if (!p || !bad) {
		free(p);
		free(bad);
		munmap(w.map, w.size);
		return -ENOMEM;
	}
	*p = w;
	p->corrupt = bad;
	/* Our hold: the executors record from now on (a lazy target), and
	 * until cbcmn__tsw_disarm or the lease ends it. */
	p->armed = true;
	hold(p);
	*out = p;
	return 0;
}

uint32_t cbcmn__tsw_nexec(const struct cbcmn__tsw *w)
{
	return w->nexec;
}

uint32_t cbcmn__tsw_cap(const struct cbcmn__tsw *w)
{
	return w->cap;
}

uint64_t cbcmn__tsw_start_ns(const struct cbcmn__tsw *w)
{
	return w->start_ns;
}

static bool valid(const cbcmn_trace_event *e, uint32_t nexec)
{
	switch (e->kind) {
	case CBCMN_TRACE_STEAL:
	case CBCMN_TRACE_DOORBELL:
		return e->peer < nexec; /* an arrow or a target must name a track */
	case CBCMN_TRACE_TASK:
	case CBCMN_TRACE_PARK:
	case CBCMN_TRACE_IO_SUBMIT:
	case CBCMN_TRACE_IO_COMPLETE:
	case CBCMN_TRACE_IO:
	case CBCMN_TRACE_ACTOR_SEND:
	case CBCMN_TRACE_ACTOR_RECEIVE:
		return true;
	default:
		return false;
	}
}

uint32_t cbcmn__tsw_drain(struct cbcmn__tsw *w, cbcmn_trace_event *out, uint32_t n,
			  struct cbcmn__tsw_stat *st)
{
	uint32_t got = 0;
	uint64_t drop = 0;
	beat(w, st);
	for (uint32_t k = 0; k < w->nexec; k++) {
		struct cbcmn__trace_ring *r =
			(struct cbcmn__trace_ring *)((char *)w->map + w->rings_off + w->stride * k);
		drop += atomic_load_explicit(&r->dropped, memory_order_relaxed);
	}
	st->dropped = drop;
	for (uint32_t k = 0; k < w->nexec && got < n; k++) {
		uint32_t i = (w->next + k) % w->nexec;
		if (w->corrupt[i])
			continue;
		struct cbcmn__trace_ring *r =
			(struct cbcmn__trace_ring *)((char *)w->map + w->rings_off + w->stride * i);
		uint64_t head, tail;
		int t = cbcmn__trace_take(r, w->cap - 1, i, out + got, n - got, &head, &tail);
		if (t < 0) {
			w->corrupt[i] = true;
			if (!st->corrupt++) {
				st->first_corrupt = i;
				st->bad_head = head;
				st->bad_tail = tail;
			}
			continue;
		}
		/* Keep what a viewer can draw; the rest is counted. */
		uint32_t kept = got;
		for (uint32_t j = got; j < got + (uint32_t)t; j++) {
			if (valid(&out[j], w->nexec))
				out[kept++] = out[j];
			else
				st->invalid++;
		}
		got = kept;
		if (got == n)
			w->next = i; /* this one may have more */
	}
	return got;
}

uint64_t cbcmn__tsw_heads(const struct cbcmn__tsw *w)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < w->nexec; i++) {
		const struct cbcmn__trace_ring *r =
			(const struct cbcmn__trace_ring *)((const char *)w->map + w->rings_off + w->stride * i);
		if (!w->corrupt[i])
			sum += atomic_load_explicit(&r->head, memory_order_relaxed); /* a figure */
	}
	return sum;
}

void cbcmn__tsw_disarm(struct cbcmn__tsw *w)
{
	if (!w->armed)
		return;
	w->armed = false;
	struct cbcmn__tseg_hdr *h = w->map;
	/* A hold the lease ended is not ours to let go: holds may be another
	 * recorder's now.  Never below the runtime's own part either. */
	if (w->lease && atomic_load_explicit(&h->expired, memory_order_relaxed) != w->expired)
		return;
	CBCMN__PAUSE(CBCMN__P_TSW_DISARM, NULL);
	uint32_t held = atomic_load_explicit(&h->holds, memory_order_relaxed);
	while (held > w->own_holds &&
	       !atomic_compare_exchange_weak_explicit(&h->holds, &held, held - 1, memory_order_relaxed,
						      memory_order_relaxed))
		;
	/* The lease may have ended between the test above and the exchange,
	 * and another recorder taken its hold again since: then the 1 we took
	 * was its.  We cannot tell which came first, so we give 1 back: a
	 * hold too many is ended by the next lease once nobody beats, a hold
	 * too few stops a live recorder's recording for good. */
	if (held > w->own_holds && w->lease &&
	    atomic_load_explicit(&h->expired, memory_order_relaxed) != w->expired)
		atomic_fetch_add_explicit(&h->holds, 1, memory_order_relaxed);
}

void cbcmn__tsw_close(struct cbcmn__tsw *w)
{
	if (!w)
		return;
	cbcmn__tsw_disarm(w);
	munmap(w->map, w->size);
	free(w->corrupt);
	free(w);
}
