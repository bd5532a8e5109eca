/* stack.c: fiber stack slabs, guard pages within the map budget, recycling. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fault.h"
#include "stack.h"

#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#endif

struct cbcmn__stack_slab {
	void *base;
	size_t len;
	struct cbcmn__stack_slab *next;
};

#define SLAB_FIRST 16u
#define SLAB_MAX 1024u
/* Map entries left to the rest of the process: libraries, malloc arenas,
 * thread stacks, io_uring rings.  A quarter of the limit, at least 4096. */
#define MAP_RESERVE_MIN 4096u
/* Stacks the shared pool hands to or takes from a cache at once. */
#define BATCH 32u

/* vm.max_map_count is per process, so every pool (one per runtime) draws on
 * one budget: the one process-wide counter of the library, because the
 * limit it models is process-wide.  count_maps() sees the guard pages made
 * so far; this counts those promised to pools and not made yet. */
static _Atomic uint64_t guards_promised;
/* Makes "read the budget, promise part of it" one step across pool inits. */
static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;

void cbcmn__stack_fork_lock(bool lock)
{
	if (lock)
		pthread_mutex_lock(&budget_lock);
	else
		pthread_mutex_unlock(&budget_lock);
}

static size_t page_size(void)
{
	static size_t pg;
	if (!pg)
		pg = (size_t)sysconf(_SC_PAGESIZE);
	return pg;
}

static long read_long(const char *path, long dflt)
{
	FILE *f = fopen(path, "r");
	long v = dflt;
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = dflt;
		fclose(f);
	}
	return v;
}

static long count_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return 1024; /* unknown: assume a busy process */
	long n = 0;
	int c;
	while ((c = getc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

uint64_t cbcmn__stack_guard_budget(void)
{
	long max = read_long("/proc/sys/vm/max_map_count", 65530);
	long reserve = max / 4 > (long)MAP_RESERVE_MIN ? max / 4 : (long)MAP_RESERVE_MIN;
	long left = max - count_maps() - reserve;
	/* A guarded stack splits its slab: PROT_NONE page + RW stack. */
	uint64_t pairs = left > 0 ? (uint64_t)left / 2 : 0;
	uint64_t promised = atomic_load_explicit(&guards_promised, memory_order_relaxed);
	return pairs > promised ? pairs - promised : 0;
}

int cbcmn__stack_pool_init(struct cbcmn__stack_pool *p, size_t size, uint32_t guard_max)
{
	size_t pg = page_size();
	if (size % pg || size < 2 * pg)
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	p->size = size - sizeof(struct cbcmn__stack);
	p->region = size; /* + a page when guarded, see slab_new() */
	p->next_slab_stacks = SLAB_FIRST;
	if (guard_max == UINT32_MAX) {
		p->guard_left = 0;
	} else {
		pthread_mutex_lock(&budget_lock);
		uint64_t budget = cbcmn__stack_guard_budget();
		p->guard_left = guard_max && guard_max < budget ? guard_max : budget;
		atomic_fetch_add_explicit(&guards_promised, p->guard_left, memory_order_relaxed);
		pthread_mutex_unlock(&budget_lock);
	}
	cbcmn__mutex_init(&p->lock, "stacks", CBCMN__LOCK_STACKS);
	return 0;
}

void cbcmn__stack_pool_fini(struct cbcmn__stack_pool *p)
{
	struct cbcmn__stack_slab *sl = p->slabs;
#ifdef __SANITIZE_THREAD__
	for (struct cbcmn__stack *s = p->free; s; s = s->next)
		if (s->san_fiber)
			__tsan_destroy_fiber(s->san_fiber);
#endif
	while (sl) {
		struct cbcmn__stack_slab *next = sl->next;
		munmap(sl->base, sl->len);
		free(sl);
		sl = next;
	}
	p->slabs = NULL;
	p->free = NULL;
	p->nfree = 0;
	/* Guards never made go back to the other pools. */
	atomic_fetch_sub_explicit(&guards_promised, p->guard_left, memory_order_relaxed);
	p->guard_left = 0;
	cbcmn__mutex_destroy(&p->lock);
}

/* Under the pool lock: map a slab of stacks and put them on the free list. */
static int slab_new(struct cbcmn__stack_pool *p)
{
	size_t pg = page_size();
	uint32_t n = p->next_slab_stacks;
	bool guarded = p->guard_left >= n;
	if (!guarded && p->guard_left > 0) {
		/* Spend the rest of the guard budget on a smaller guarded slab. */
		n = (uint32_t)p->guard_left;
		guarded = true;
	}
	size_t region = p->region + (guarded ? pg : 0);
	size_t len = region * n;
	struct cbcmn__stack_slab *sl = cbcmn__malloc(sizeof(*sl));
	if (!sl)
		return -ENOMEM;
	void *base = cbcmn__mmap(NULL, len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (base == MAP_FAILED) {
		free(sl);
		return -errno;
	}
	/* A huge page would turn one touched stack page into 2 MiB of RSS. */
	madvise(base, len, MADV_NOHUGEPAGE);
	for (uint32_t i = 0; i < n; i++) {
		char *r = (char *)base + (size_t)i * region;
		if (guarded && cbcmn__mprotect(r, pg, PROT_NONE) != 0) {
			/* Out of map entries after all: the rest go unguarded. */
			guarded = false;
			atomic_fetch_sub_explicit(&guards_promised, p->guard_left,
						  memory_order_relaxed);
			p->guard_left = 0;
		}
		char *lo = r + (guarded ? pg : 0);
		struct cbcmn__stack *s = (struct cbcmn__stack *)(lo + p->size);
		s->lo = lo;
		s->size = p->size;
		s->guarded = guarded;
		s->san_fiber = NULL;
		s->san_uses = 0;
		s->asan_fake = NULL;
		s->next = p->free;
		p->free = s;
		p->nfree++;
		p->stacks_total++;
		p->stacks_guarded += guarded;
		/* After the mprotect: until now count_maps() did not see it. */
		if (guarded) {
			p->guard_left--;
			atomic_fetch_sub_explicit(&guards_promised, 1, memory_order_relaxed);
		}
	}
	sl->base = base;
	sl->len = len;
	sl->next = p->slabs;
	p->slabs = sl;
	if (p->next_slab_stacks < SLAB_MAX)
		p->next_slab_stacks *= 2;
	return 0;
}

struct cbcmn__stack *cbcmn__stack_get(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c)
{
	struct cbcmn__stack *s = c->free;
	if (__builtin_expect(s != NULL, 1)) {
		c->free = s->next;
		c->n--;
		return s;
	}
	cbcmn__mutex_lock(&p->lock);
	if (!p->free && slab_new(p) != 0) {
		cbcmn__mutex_unlock(&p->lock);
		return NULL;
	}
	/* Take one to return and up to BATCH-1 more for the cache. */
	s = p->free;
	p->free = s->next;
	p->nfree--;
	for (uint32_t i = 1; i < BATCH && p->free; i++) {
		struct cbcmn__stack *x = p->free;
		p->free = x->next;
		p->nfree--;
		x->next = c->free;
		c->free = x;
		c->n++;
	}
	cbcmn__mutex_unlock(&p->lock);
	return s;
}

/* Release a stack's memory except its top page (descriptor and the next
 * fiber's first frames).  Also re-zeroes the canary. */
static void release_pages(struct cbcmn__stack *s)
{
	size_t pg = page_size();
	char *top_page = (char *)((uintptr_t)s & ~(uintptr_t)(pg - 1));
	if (top_page > s->lo)
		madvise(s->lo, (size_t)(top_page - s->lo), MADV_DONTNEED);
}

void cbcmn__stack_put(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c,
		      struct cbcmn__stack *s)
{
	if (__builtin_expect(c != NULL && c->n < CBCMN__STACK_CACHE_MAX, 1)) {
		s->next = c->free;
		c->free = s;
		c->n++;
		return;
	}
	/* Spill: this stack and half the cache go to the shared pool, with
	 * their memory given back: a burst of fibers must not pin its peak RSS
	 * forever.  The madvise calls happen outside the lock. */
	struct cbcmn__stack *head = s, *tail = s;
	uint32_t n = 1;
	s->next = NULL;
	while (c && c->n > CBCMN__STACK_CACHE_MAX / 2) {
		struct cbcmn__stack *x = c->free;
		c->free = x->next;
		c->n--;
		x->next = head;
		head = x;
		n++;
	}
	for (struct cbcmn__stack *x = head; x; x = x->next) {
		release_pages(x);
		tail = x;
	}
	cbcmn__mutex_lock(&p->lock);
	tail->next = p->free;
	p->free = head;
	p->nfree += n;
	cbcmn__mutex_unlock(&p->lock);
}

void cbcmn__stack_cache_drain(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c)
{
	/* Like a spill: stacks in the shared pool have given their memory back. */
	while (c->free) {
		struct cbcmn__stack *s = c->free;
		c->free = s->next;
		c->n--;
		release_pages(s);
		cbcmn__mutex_lock(&p->lock);
		s->next = p->free;
		p->free = s;
		p->nfree++;
		cbcmn__mutex_unlock(&p->lock);
	}
}
