/* stack.h: private to libcbcmn: the fiber stack pool.
 *
 * Stacks are carved from slabs: one anonymous mapping holds many stacks, so a
 * million stacks do not need a million mappings.  While the process's map
 * budget allows (vm.max_map_count, 65 530 on a stock kernel), each stack
 * gets a PROT_NONE guard page below it, which costs two map entries; beyond
 * that budget a stack has no guard page and a zero canary at its low end is
 * checked instead, at every switch away from it.  Pages are committed only
 * when touched (MAP_NORESERVE, no transparent huge pages).  A stack's
 * descriptor lives in its own top bytes, which the fiber touches anyway.
 *
 * Stacks are recycled through a per-executor cache (no locks, no munmap);
 * the cache spills to and refills from the shared pool in batches, and
 * stacks in the shared pool give their memory back (MADV_DONTNEED).
 */
#ifndef CBCMN_STACK_H
#define CBCMN_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"

#define CBCMN__CANARY_BYTES 64

/* 16-byte aligned and sized, so the usable top below it is aligned too. */
struct cbcmn__stack {
	_Alignas(16) char *lo;     /* lowest usable byte (canary here if unguarded) */
	size_t size;               /* usable bytes, from lo up to this descriptor */
	struct cbcmn__stack *next; /* free lists */
	bool guarded;
	void *san_fiber;           /* TSan: the fiber running on this stack */
	uint32_t san_uses;         /* TSan: fibers it has run since created */
	void *asan_fake;           /* ASan: its fake stack while switched away */
};

/* A stack's usable top: the descriptor sits right above it. */
static inline void *cbcmn__stack_top(struct cbcmn__stack *s) { return (void *)s; }

struct cbcmn__stack_slab;

struct cbcmn__stack_pool {
	struct cbcmn__mutex lock;       /* CBCMN__LOCK_STACKS */
	struct cbcmn__stack *free;      /* shared free stacks, memory released */
	uint32_t nfree;
	struct cbcmn__stack_slab *slabs;
	size_t size;                    /* usable bytes per stack */
	size_t region;                  /* bytes per stack in a slab, guard included */
	uint32_t next_slab_stacks;      /* slabs grow geometrically */
	uint64_t guard_left;            /* guarded stacks we may still create */
	uint64_t stacks_total, stacks_guarded; /* for stats and tests */
};

/* Per-executor cache, owned by one thread. */
struct cbcmn__stack_cache {
	struct cbcmn__stack *free;
	uint32_t n;
};

#define CBCMN__STACK_CACHE_MAX 64

/* size: usable bytes (page multiple).  guard_max: see cbcmn_config.
 * Returns 0, -EINVAL or -errno. */
int cbcmn__stack_pool_init(struct cbcmn__stack_pool *p, size_t size, uint32_t guard_max);
/* Unmaps every slab: every stack must be back in a cache or the pool. */
void cbcmn__stack_pool_fini(struct cbcmn__stack_pool *p);

struct cbcmn__stack *cbcmn__stack_get(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c);
void cbcmn__stack_put(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c,
		      struct cbcmn__stack *s);
/* Give a cache's stacks back to the pool (executor exit). */
void cbcmn__stack_cache_drain(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c);

/* Unguarded stacks: false if the canary was overwritten.  A read of a page
 * the fiber never touched maps the shared zero page, so it costs no RSS. */
static inline bool cbcmn__stack_canary_ok(const struct cbcmn__stack *s)
{
	if (s->guarded)
		return true;
	const uint64_t *w = (const uint64_t *)s->lo;
	uint64_t acc = 0;
	for (size_t i = 0; i < CBCMN__CANARY_BYTES / sizeof(uint64_t); i++)
		acc |= w[i];
	return acc == 0;
}

/* True if addr lies in the guard page below s (a stack overflow). */
static inline bool cbcmn__stack_in_guard(const struct cbcmn__stack *s, const void *addr,
					 size_t page)
{
	return s->guarded && (const char *)addr < s->lo && (const char *)addr >= s->lo - page;
}

/* Map budget left for guarded stacks, from vm.max_map_count and the
 * mappings the process already has.  Exposed for tests and docs. */
uint64_t cbcmn__stack_guard_budget(void);
/* Hold (lock) or release the guard budget's lock across a fork (runtime.c's
 * atfork handlers). */
void cbcmn__stack_fork_lock(bool lock);

#endif
