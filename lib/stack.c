/* stack.c: fiber stack slabs, their guard regions, recycling. */
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
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

/* Linux 6.13 (mm/madvise.c): guard markers in the page tables, which fault
 * like PROT_NONE without a mapping of their own.  glibc 2.36 lacks the
 * names. */
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE 103
#endif

bool cbcmn__stack_test_no_lightweight_guards;
size_t cbcmn__stack_test_fail_map_over;

/* base and len first: test_stack.c mirrors them.  The pool finds its
 * slabs in by_addr only. */
struct cbcmn__stack_slab {
	void *base;
	size_t len;
	uint32_t n;      /* stacks in it */
	uint32_t nfree;  /* of them in the shared pool */
	uint64_t bits[]; /* bit i: stack i is in the shared pool */
};

#define SLAB_FIRST 16u
#define SLAB_MAX 1024u
/* Map entries left to the rest of the process: libraries, malloc arenas,
 * thread stacks, io_uring rings.  A quarter of the limit, at least 4096. */
#define MAP_RESERVE_MIN 4096u
/* mprotect guards a pool asks the process's budget for at least at once:
 * each ask reads /proc/self/maps (under the pool's lock), and this keeps
 * that to one read per 512 stacks while a pool holds little it does not
 * use (the rest goes back when it is destroyed). */
#define PROMISE_MIN 512u
/* Stacks the shared pool hands to or takes from a cache at once. */
#define BATCH 32u

/* vm.max_map_count is per process, so every pool (one per runtime) draws on
 * one budget: the one process-wide counter of the library, because the
 * limit it models is process-wide.  count_maps() sees the guard pages made
 * so far; this counts those promised to pools and not made yet. */
static _Atomic uint64_t guards_promised;
/* Makes "read the budget, promise part of it" one step across pool inits. */
static struct cbcmn__mutex budget_lock =
	CBCMN__MUTEX_INITIALIZER("stack_budget", CBCMN__LOCK_STACK_BUDGET); /* under "stacks" */

void cbcmn__stack_fork_lock(bool lock)
{
	if (lock)
		cbcmn__mutex_lock(&budget_lock);
	else
		cbcmn__mutex_unlock(&budget_lock);
}

/* Relaxed atomic: runtimes created on two threads at once both store it
 * (the same value; a plain static was a data race, TSan: attack23). */
static size_t page_size(void)
{
	static _Atomic size_t pg;
	size_t v = atomic_load_explicit(&pg, memory_order_relaxed);
	if (!v) {
		v = (size_t)sysconf(_SC_PAGESIZE);
		atomic_store_explicit(&pg, v, memory_order_relaxed);
	}
	return v;
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

/* Does this kernel make lightweight guards?  Probed once per process: a
 * race only probes twice, and the answer is one int. */
static bool lightweight_guards(void)
{
	static int known; /* 0: not probed, 1: yes, -1: no */
	if (cbcmn__stack_test_no_lightweight_guards)
		return false;
	int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
	if (!k) {
		size_t pg = page_size();
		void *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		k = -1;
		if (m != MAP_FAILED) {
			if (madvise(m, pg, MADV_GUARD_INSTALL) == 0)
				k = 1;
			munmap(m, 2 * pg);
		}
		__atomic_store_n(&known, k, __ATOMIC_RELAXED);
	}
	return k > 0;
}

/* Top p's promise of mprotect guards up to n (the next slab's stacks) from
 * what the process's budget has left, within what guard_max still allows
 * the pool.  A pool takes guards as its slabs need them: taking the whole
 * budget at init left a second runtime in the process none, and every task
 * of it that needed a new stack ended with -ENOMEM (kernels before 6.13:
 * Debian 12's 6.1 and 6.12, seen in the kernel matrix). */
static void promise_guards(struct cbcmn__stack_pool *p, uint64_t n)
{
	cbcmn__mutex_lock(&budget_lock);
	if (p->guard_left < n) {
		uint64_t want = n - p->guard_left, budget = cbcmn__stack_guard_budget();
		if (want < PROMISE_MIN)
			want = PROMISE_MIN;
		if (want > p->guard_quota)
			want = p->guard_quota;
		if (want > budget)
			want = budget;
		p->guard_left += want;
		p->guard_quota -= want;
		atomic_fetch_add_explicit(&guards_promised, want, memory_order_relaxed);
	}
	cbcmn__mutex_unlock(&budget_lock);
}

/* Give back what p was promised and did not make. */
static void unpromise_guards(struct cbcmn__stack_pool *p)
{
	atomic_fetch_sub_explicit(&guards_promised, p->guard_left, memory_order_relaxed);
	p->guard_quota += p->guard_left; /* not made: still the pool's to ask for */
	p->guard_left = 0;
}

int cbcmn__stack_pool_init(struct cbcmn__stack_pool *p, size_t size, uint32_t guard_max)
{
	size_t pg = page_size();
	if (size % pg || size < 2 * pg)
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	p->size = size - sizeof(struct cbcmn__stack);
	p->next_slab_stacks = SLAB_FIRST;
	p->guard_max = guard_max;
	if (guard_max == UINT32_MAX) {
		p->guard_kind = CBCMN__GUARD_NONE; /* asked for: canaries only */
	} else {
		p->guard_bytes = CBCMN__RED_BYTES + CBCMN__YELLOW_BYTES; /* page multiples */
		p->guard_kind = lightweight_guards() ? CBCMN__GUARD_MADV : CBCMN__GUARD_PROT;
		/* 0: as many as the budget gives, as it is asked. */
		p->guard_quota = guard_max ? guard_max : UINT64_MAX;
		if (p->guard_kind == CBCMN__GUARD_PROT)
			promise_guards(p, p->next_slab_stacks);
	}
	p->region = size + p->guard_bytes;
	cbcmn__mutex_init(&p->lock, "stacks", CBCMN__LOCK_STACKS);
	return 0;
}

void cbcmn__unmap_stack_memory(void *p, size_t len)
{
#ifdef __SANITIZE_ADDRESS__
	ASAN_UNPOISON_MEMORY_REGION(p, len);
#endif
	munmap(p, len);
}

/* ---- the shared pool: free stacks by address --------------------------
 *
 * The pool hands out its lowest free stack first.  A free list in the order
 * stacks came back (LIFO) scattered them: tasks spawned one after another
 * got stacks further apart round after round, 1 MiB to 43 MiB between ring
 * neighbours in six rounds of `cbcmn-bench actors` (issue 16), and the hop
 * slowed down with it.  Lowest first refills a cache with neighbours,
 * whatever order they were freed in.  A bit per stack in its slab, the slabs
 * sorted by address: a put finds its slab by binary search, a get scans up
 * from the lowest slab that has one.  A bit per slab too (has_free): a get
 * jumps over the slabs whose stacks are all out, 64 at a time: walking
 * them one by one cost a take 5 us under the lock with 10 000 slabs, 55 us
 * with 50 000, each time a stack came back below them (docs/BENCHMARKS.md). */

static uint64_t bit_of(uint32_t i)
{
	return (uint64_t)1 << (i % 64);
}

static bool bit_test(const struct cbcmn__stack_slab *sl, uint32_t i)
{
	return sl->bits[i / 64] >> (i % 64) & 1;
}

static size_t words_of(uint32_t n)
{
	return ((size_t)n + 63) / 64;
}

static struct cbcmn__stack *stack_at(const struct cbcmn__stack_pool *p,
				     const struct cbcmn__stack_slab *sl, uint32_t i)
{
	char *lo = (char *)sl->base + (size_t)i * p->region + p->guard_bytes;
	return (struct cbcmn__stack *)(lo + p->size);
}

/* Index in by_addr of the first slab whose base is above addr. */
static uint32_t slab_after(const struct cbcmn__stack_pool *p, const void *addr)
{
	uint32_t lo = 0, hi = p->nslabs;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if ((const char *)p->by_addr[mid]->base <= (const char *)addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Under the pool lock: room in by_addr and has_free for one slab more.
 * Through cbcmn__malloc(), so that a test can fail it (there is no faulting
 * realloc): the old arrays stay whole if a new one is refused. */
static int by_addr_reserve(struct cbcmn__stack_pool *p)
{
	if (p->nslabs < p->slabs_cap)
		return 0;
	uint32_t cap = p->slabs_cap ? 2 * p->slabs_cap : 16;
	struct cbcmn__stack_slab **v = cbcmn__malloc(cap * sizeof(*v));
	uint64_t *f = cbcmn__calloc(words_of(cap), sizeof(*f));
	if (!v || !f) {
		free(v);
		free(f);
		return -ENOMEM;
	}
	if (p->nslabs) {
		memcpy(v, p->by_addr, p->nslabs * sizeof(*v));
		memcpy(f, p->has_free, words_of(p->nslabs) * sizeof(*f));
	}
	free(p->by_addr);
	free(p->has_free);
	p->by_addr = v;
	p->has_free = f;
	p->slabs_cap = cap;
	return 0;
}

/* The first slab at or above from with a stack in the pool, else nslabs. */
static uint32_t next_with_free(const struct cbcmn__stack_pool *p, uint32_t from)
{
	size_t w = from / 64, nw = words_of(p->nslabs);
	if (w >= nw)
		return p->nslabs;
	uint64_t m = p->has_free[w] & ~(bit_of(from) - 1);
	while (!m) {
		if (++w == nw)
			return p->nslabs;
		m = p->has_free[w];
	}
	return (uint32_t)(w * 64 + (size_t)__builtin_ctzll(m));
}

/* Under the pool lock, after by_addr_reserve(): sl, all its stacks free.
 * slab_new() runs on an empty pool only: every has_free bit is clear, so
 * none has to move up with its slab, and sl holds the only free stacks. */
static void by_addr_insert(struct cbcmn__stack_pool *p, struct cbcmn__stack_slab *sl)
{
	uint32_t at = slab_after(p, sl->base);
	memmove(&p->by_addr[at + 1], &p->by_addr[at], (p->nslabs - at) * sizeof(*p->by_addr));
	p->by_addr[at] = sl;
	p->nslabs++;
	p->has_free[at / 64] |= bit_of(at);
	p->lowest = at;
}

/* The slab s is a stack of, its place in by_addr (*at) and in the slab
 * (*i); NULL if s is no stack of p's. */
static struct cbcmn__stack_slab *slab_of(const struct cbcmn__stack_pool *p, const void *s,
					 uint32_t *at, uint32_t *i)
{
	uint32_t after = slab_after(p, s);
	if (after == 0)
		return NULL; /* below every slab */
	*at = after - 1;
	struct cbcmn__stack_slab *sl = p->by_addr[*at];
	size_t off = (size_t)((const char *)s - (const char *)sl->base);
	*i = (uint32_t)(off / p->region);
	return off < sl->len && (const void *)stack_at(p, sl, *i) == s ? sl : NULL;
}

/* A put of a stack the pool holds already (put back twice) or never made
 * would count a stack the pool does not have, and the get that trusts the
 * count would find none; a stack put back twice into a cache would be
 * handed out twice.  Debug builds stop there; the others drop it. */
static void bad_put(const struct cbcmn__stack *s)
{
	fprintf(stderr, "cbcmn: stack %p put back twice, or not the pool's\n", (const void *)s);
#ifdef CBCMN_DEBUG
	abort();
#endif
}

/* Under the pool lock: s, one of p's stacks (pool_own()), goes back to the
 * pool.  A put back twice, one after the other, was refused by its pooled
 * byte (stack_put()); two threads putting s back at once can both read
 * that byte clear (an unlocked read, then a set) and both spill it here.
 * The bit, tested under the lock, refuses the second: counted free twice,
 * s would be handed out twice. */
static void pool_free(struct cbcmn__stack_pool *p, struct cbcmn__stack *s)
{
	uint32_t at, i;
	struct cbcmn__stack_slab *sl = slab_of(p, s, &at, &i);
	if (bit_test(sl, i)) {
		bad_put(s);
		return;
	}
	sl->bits[i / 64] |= bit_of(i);
	sl->nfree++;
	p->nfree++;
	p->has_free[at / 64] |= bit_of(at);
	if (at < p->lowest)
		p->lowest = at;
}

/* Under the pool lock: up to want stacks off the pool, lowest first, chained
 * through next in ascending order.  The pool has at least one. */
static struct cbcmn__stack *pool_take(struct cbcmn__stack_pool *p, uint32_t want)
{
	struct cbcmn__stack *head = NULL, **link = &head;
	uint32_t at = p->lowest;
	for (; want && (at = next_with_free(p, at)) < p->nslabs; at++) {
		struct cbcmn__stack_slab *sl = p->by_addr[at];
		for (uint32_t w = 0; want && sl->nfree && w < words_of(sl->n); w++) {
			while (want && sl->bits[w]) {
				uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(sl->bits[w]);
				sl->bits[w] &= sl->bits[w] - 1;
				sl->nfree--;
				p->nfree--;
				want--;
				*link = stack_at(p, sl, i);
				link = &(*link)->next;
			}
		}
		if (sl->nfree)
			break;
		p->has_free[at / 64] &= ~bit_of(at);
	}
	*link = NULL;
	p->lowest = at;
	return head;
}

bool cbcmn__stack_pool_holds(struct cbcmn__stack_pool *p, const struct cbcmn__stack *s)
{
	uint32_t at, i;
	cbcmn__mutex_lock(&p->lock);
	const struct cbcmn__stack_slab *sl = slab_of(p, s, &at, &i);
	bool in = sl && bit_test(sl, i);
	cbcmn__mutex_unlock(&p->lock);
	return in;
}

void cbcmn__stack_pool_fini(struct cbcmn__stack_pool *p)
{
	for (uint32_t at = 0; at < p->nslabs; at++) {
		struct cbcmn__stack_slab *sl = p->by_addr[at];
#ifdef __SANITIZE_THREAD__
		for (uint32_t i = 0; i < sl->n; i++) {
			struct cbcmn__stack *s = stack_at(p, sl, i);
			if (bit_test(sl, i) && s->san_fiber)
				__tsan_destroy_fiber(s->san_fiber);
		}
#endif
		cbcmn__unmap_stack_memory(sl->base, sl->len);
		free(sl);
	}
	free(p->by_addr);
	free(p->has_free);
	p->by_addr = NULL;
	p->has_free = NULL;
	p->nslabs = p->slabs_cap = p->lowest = 0;
	p->nfree = 0;
	/* Guards never made go back to the other pools. */
	unpromise_guards(p);
	cbcmn__mutex_destroy(&p->lock);
}

/* Room a runtime call wants below its frame (cbcmn__stack_check): a quarter
 * of the stack, at most 8 KiB.  Under ASan half, at most 8 KiB (the same
 * from 32 KiB up): its frames are larger, and a wait's first in a scope
 * allocates the scope with the scope lock held (iwait.c's scope_new()),
 * where the sanitizer's malloc records its caller's stack in over 3 KiB of
 * its own frames; an overflow there is a library call's, which returns
 * into the runtime's frames to end the task, the lock held (test_overflow's
 * test_a_receive_low_on_stack_never_lands_in_the_runtime). */
static size_t reserve_of(const struct cbcmn__stack *s)
{
#ifdef __SANITIZE_ADDRESS__
	size_t part = s->size / 2;
#else
	size_t part = s->size / 4;
#endif
	return part < 8192 ? part : 8192;
}

static char *check_lo_of(const struct cbcmn__stack *s)
{
	return s->lo + reserve_of(s);
}

void cbcmn__stack_check_relax(struct cbcmn__stack *s)
{
	s->check_lo = s->lo + reserve_of(s) / 2;
}

void cbcmn__stack_check_reset(struct cbcmn__stack *s)
{
	s->check_lo = check_lo_of(s);
}

/* A slab mapping of len bytes, or MAP_FAILED with *err set. */
static void *map_slab(size_t len, int *err)
{
	if (cbcmn__stack_test_fail_map_over && len > cbcmn__stack_test_fail_map_over) {
		*err = ENOMEM;
		return MAP_FAILED;
	}
	void *base = cbcmn__mmap(NULL, len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (base == MAP_FAILED)
		*err = errno;
	return base;
}

/* Guard the region r (guard_bytes long) below a stack the pool's way.  A
 * kernel that refuses lightweight guards here (an mlock'ed process: they
 * need a VMA that is not VM_LOCKED) turns the pool to mprotect guards. */
static bool guard_region(struct cbcmn__stack_pool *p, char *r)
{
	if (p->guard_kind == CBCMN__GUARD_MADV) {
		if (!CBCMN__FAULT(CBCMN__F_MPROTECT) &&
		    madvise(r, p->guard_bytes, MADV_GUARD_INSTALL) == 0)
			return true;
		p->guard_kind = CBCMN__GUARD_PROT;
	}
	if (p->guard_left == 0)
		promise_guards(p, p->next_slab_stacks); /* the slab's rest at most */
	if (p->guard_left == 0 || cbcmn__mprotect(r, p->guard_bytes, PROT_NONE) != 0)
		return false;
	/* After the mprotect: until now count_maps() did not see it. */
	p->guard_left--;
	atomic_fetch_sub_explicit(&guards_promised, 1, memory_order_relaxed);
	return true;
}

/* The map budget is spent: no guarded stack can be made.  Running one
 * unguarded would let an overflow write over a neighbour's frames, so the
 * task that needed it fails instead; say why once. */
static int refuse(struct cbcmn__stack_pool *p)
{
	if (!p->said_refused) {
		p->said_refused = true;
		char line[320];
		int len = snprintf(line, sizeof(line),
				   "cbcmn: no guarded stack left: %llu stacks have guard pages, all "
				   "that vm.max_map_count allows; a task that needs a new stack "
				   "fails with -ENOMEM.  Raise vm.max_map_count, or set "
				   "guard_stacks_max = UINT32_MAX to run unguarded "
				   "(docs/FIBERS.md)\n",
				   (unsigned long long)p->stacks_guarded);
		if (len > 0 && write(STDERR_FILENO, line, (size_t)len) < 0)
			(void)0;
	}
	return -ENOMEM;
}

/* Under the pool lock: map a slab of stacks and put them on the free list. */
static int slab_new(struct cbcmn__stack_pool *p)
{
	uint32_t n = p->next_slab_stacks;
	if (p->guard_kind == CBCMN__GUARD_PROT) {
		promise_guards(p, n);
		if (p->guard_left == 0)
			return refuse(p);
		if (p->guard_left < n)
			n = (uint32_t)p->guard_left; /* a smaller slab, all guarded */
	}
	struct cbcmn__stack_slab *sl = cbcmn__malloc(sizeof(*sl) + words_of(n) * sizeof(uint64_t));
	if (!sl || by_addr_reserve(p) != 0) {
		free(sl);
		return -ENOMEM;
	}
	memset(sl->bits, 0, words_of(n) * sizeof(uint64_t));
	/* One big mapping can fail where smaller ones fit: the commit limit
	 * under vm.overcommit_memory=2 (which ignores MAP_NORESERVE), an
	 * RLIMIT_AS, a fragmented address space.  Halve down to one stack. */
	int err = ENOMEM;
	void *base = MAP_FAILED;
	for (; n >= 1; n /= 2)
		if ((base = map_slab(p->region * n, &err)) != MAP_FAILED)
			break;
	if (base == MAP_FAILED) {
		free(sl);
		return -err;
	}
	size_t len = p->region * n;
	/* A huge page would turn one touched stack page into 2 MiB of RSS. */
	madvise(base, len, MADV_NOHUGEPAGE);
	uint32_t made = 0;
	for (; made < n; made++) {
		char *r = (char *)base + (size_t)made * p->region;
		bool guarded = p->guard_kind != CBCMN__GUARD_NONE;
		if (guarded && !guard_region(p, r))
			break; /* out of map entries after all */
		char *lo = r + p->guard_bytes;
		struct cbcmn__stack *s = (struct cbcmn__stack *)(lo + p->size);
		s->lo = lo;
		s->size = p->size;
		s->check_lo = check_lo_of(s);
		s->guard_lo = guarded ? r : lo;
		s->guarded = guarded;
		s->guard_kind = guarded ? p->guard_kind : CBCMN__GUARD_NONE;
		s->yellow_open = 0;
		s->holds_task = 0;
		s->san_fiber = NULL;
		s->san_uses = 0;
		s->asan_fake = NULL;
		s->pooled = 1;
		sl->bits[made / 64] |= bit_of(made);
		p->stacks_total++;
		p->stacks_guarded += guarded;
	}
	if (made < n) {
		/* The rest would go unguarded: give it back.  Cutting the
		 * slab's tail adds no map entry. */
		unpromise_guards(p);
		munmap((char *)base + (size_t)made * p->region, (size_t)(n - made) * p->region);
		len = (size_t)made * p->region;
		if (made == 0) {
			free(sl);
			return refuse(p);
		}
	}
	sl->base = base;
	sl->len = len;
	sl->n = sl->nfree = made;
	p->nfree += made;
	by_addr_insert(p, sl);
	/* Grow from what fitted: after a halving, the next slab tries the
	 * size that failed once more, then grows again. */
	p->next_slab_stacks = n < SLAB_MAX / 2 ? 2 * n : SLAB_MAX;
	return 0;
}

int cbcmn__stack_yellow_open(struct cbcmn__stack *s)
{
	char *y = cbcmn__stack_yellow_lo(s);
	size_t len = (size_t)(s->lo - y);
	int rc = s->guard_kind == CBCMN__GUARD_MADV ? madvise(y, len, MADV_GUARD_REMOVE)
						    : mprotect(y, len, PROT_READ | PROT_WRITE);
	if (rc != 0)
		return -errno;
	s->yellow_open = 1;
	s->check_lo = (char *)UINTPTR_MAX;
	return 0;
}

void cbcmn__stack_yellow_close(struct cbcmn__stack *s)
{
	s->check_lo = check_lo_of(s);
	if (!s->yellow_open)
		return;
	char *y = cbcmn__stack_yellow_lo(s);
	size_t len = (size_t)(s->lo - y);
	int rc = -1;
	if (s->guard_kind == CBCMN__GUARD_MADV) {
		rc = madvise(y, len, MADV_GUARD_INSTALL); /* frees the pages */
		/* Refused once the process locked its memory (mlockall after
		 * the stack was made: VM_LOCKED).  A zone left open would end
		 * every later task on this stack (sched.c), so it is guarded
		 * the other way from now on: two map entries more, once. */
		if (rc != 0)
			s->guard_kind = CBCMN__GUARD_PROT;
	}
	if (rc != 0) {
		madvise(y, len, MADV_DONTNEED);
		/* Merges back into the guard's mapping: no new map entry. */
		rc = mprotect(y, len, PROT_NONE);
	}
	/* On failure the red page still guards; the zone stays open. */
	if (rc == 0)
		s->yellow_open = 0;
}

/* A stack from c, else from the pool with up to batch-1 more for c. */
static struct cbcmn__stack *stack_get(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c,
				      uint32_t batch)
{
	struct cbcmn__stack *s = c->free;
	if (__builtin_expect(s != NULL, 1)) {
		c->free = s->next;
		c->n--;
		s->pooled = 0;
		return s;
	}
	cbcmn__mutex_lock(&p->lock);
	if (!p->nfree && slab_new(p) != 0) {
		cbcmn__mutex_unlock(&p->lock);
		return NULL;
	}
	/* One to return and up to batch-1 more for the cache, which hands
	 * them out in the same ascending order. */
	s = pool_take(p, batch);
	cbcmn__mutex_unlock(&p->lock);
	c->free = s->next;
	for (struct cbcmn__stack *x = c->free; x; x = x->next)
		c->n++;
	s->pooled = 0;
	return s;
}

/* The pool may make one mprotect guard more (or one fewer) than the
 * program's guard_max: a stack kept for the runtime is not the tasks'.
 * Taken from their number, an executor's end stack left none to a
 * runtime with as many executors as guards (review of session 17: its
 * root task failed with -ENOMEM). */
static void quota_adjust(struct cbcmn__stack_pool *p, bool more)
{
	/* Whatever the guards' kind: lightweight ones may turn to mprotect
	 * between the get and the put (guard_region()). */
	cbcmn__mutex_lock(&p->lock); /* as slab_new(), which spends it */
	if (p->guard_quota != UINT64_MAX) {
		if (more)
			p->guard_quota++;
		else if (p->guard_quota)
			p->guard_quota--; /* else one made for it stays: one more */
	}
	cbcmn__mutex_unlock(&p->lock);
}

/* One stack, none more for the cache (batch 1): an executor that runs
 * no task would hold them out of the others' reach. */
struct cbcmn__stack *cbcmn__stack_get_kept(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c)
{
	quota_adjust(p, true);
	struct cbcmn__stack *s = stack_get(p, c, 1);
	if (!s)
		quota_adjust(p, false);
	return s;
}

static bool stack_put(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c,
		      struct cbcmn__stack *s);

/* A refused put (put back twice, not the pool's) gives back no guard: the
 * quota fell one below guard_max at each. */
void cbcmn__stack_put_kept(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c,
			   struct cbcmn__stack *s)
{
	if (stack_put(p, c, s))
		quota_adjust(p, false);
}

struct cbcmn__stack *cbcmn__stack_get(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c)
{
	return stack_get(p, c, BATCH);
}

static bool pool_put(struct cbcmn__stack_pool *p, struct cbcmn__stack *head,
		     const struct cbcmn__stack *s);

/* The landing pad closed s's yellow zone; a fiber ended otherwise (its
 * thread died) may not have.  Before s is handed out again: in a cache at
 * the put, in a spill once pool_own() found s is the pool's (the zone is
 * below lo, and a foreign pointer's would be memory of the program's). */
static void yellow_shut(struct cbcmn__stack *s)
{
	if (__builtin_expect(s->yellow_open, 0))
		cbcmn__stack_yellow_close(s);
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

/* False if s was refused: put back before, or (at a spill) not p's. */
static bool stack_put(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c,
		      struct cbcmn__stack *s)
{
	/* Put back before (a put, put; or a put, a get into a cache that
	 * still holds it, a put).  A put after a get that handed it out
	 * looks like its holder's: the pool keeps no owner. */
	if (__builtin_expect(s->pooled, 0)) {
		bad_put(s);
		return false;
	}
	s->pooled = 1;
	if (__builtin_expect(c != NULL && c->n < CBCMN__STACK_CACHE_MAX, 1)) {
		yellow_shut(s);
		s->next = c->free;
		c->free = s;
		c->n++;
		return true;
	}
	/* Spill: this stack and half the cache go to the shared pool, with
	 * their memory given back: a burst of fibers must not pin its peak RSS
	 * forever.  The madvise calls happen outside the lock. */
	struct cbcmn__stack *head = s;
	s->next = NULL;
	while (c && c->n > CBCMN__STACK_CACHE_MAX / 2) {
		struct cbcmn__stack *x = c->free;
		c->free = x->next;
		c->n--;
		x->next = head;
		head = x;
	}
	return pool_put(p, head, s);
}

void cbcmn__stack_put(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c,
		      struct cbcmn__stack *s)
{
	stack_put(p, c, s);
}

/* Under the pool lock: head's chain without the stacks that are not p's.
 * A cache takes a put on trust (no lock, no lookup): a foreign pointer is
 * caught here, before release_pages() would give back whatever memory
 * below it its lo names. */
static struct cbcmn__stack *pool_own(struct cbcmn__stack_pool *p, struct cbcmn__stack *head,
				     const struct cbcmn__stack *s, bool *s_own)
{
	struct cbcmn__stack **link = &head;
	uint32_t at, i;
	while (*link) {
		struct cbcmn__stack *x = *link;
		if (slab_of(p, x, &at, &i)) {
			link = &x->next;
			continue;
		}
		*link = x->next;
		*s_own = *s_own && x != s;
		bad_put(x);
	}
	return head;
}

/* Give a chain of stacks to the pool: checked to be its own, then their
 * yellow zones closed and memory released outside the lock, then counted
 * free. */
static bool pool_put(struct cbcmn__stack_pool *p, struct cbcmn__stack *head,
		     const struct cbcmn__stack *s)
{
	bool s_own = true;
	cbcmn__mutex_lock(&p->lock);
	head = pool_own(p, head, s, &s_own);
	cbcmn__mutex_unlock(&p->lock);
	for (struct cbcmn__stack *x = head; x; x = x->next) {
		yellow_shut(x);
		release_pages(x);
	}
	cbcmn__mutex_lock(&p->lock);
	while (head) {
		struct cbcmn__stack *x = head;
		head = x->next;
		pool_free(p, x);
	}
	cbcmn__mutex_unlock(&p->lock);
	return s_own;
}

void cbcmn__stack_cache_drain(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c)
{
	/* Like a spill: stacks in the shared pool have given their memory back. */
	struct cbcmn__stack *head = c->free;
	c->free = NULL;
	c->n = 0;
	pool_put(p, head, NULL);
}
