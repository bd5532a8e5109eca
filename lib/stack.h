/* stack.h: private to libcbcmn: the fiber stack pool.
 *
 * Stacks are carved from slabs: one anonymous mapping holds many stacks, so a
 * million stacks do not need a million mappings.  Below every stack lies a
 * guard region that faults when touched:
 *
 *   | red: 4 KiB | yellow: CBCMN__YELLOW_BYTES | lo ... usable ... | descriptor |
 *
 * The yellow zone is opened only by the SIGSEGV handler, for an overflow
 * that happened inside the C library (overflow.c), so that the call can finish
 * and release its locks before the task is ended; the red page is never
 * opened.  The guard is made one of two ways:
 *   - lightweight guards (Linux 6.13+, MADV_GUARD_INSTALL): markers in the
 *     page tables, no mapping of their own, so every stack has one;
 *   - mprotect(PROT_NONE), which splits the slab: two entries of
 *     vm.max_map_count per stack, so only as many as the process's map
 *     budget allows.  Beyond it a stack is refused (the task fails with
 *     -ENOMEM), unless the runtime turned guards off (guard_stacks_max ==
 *     UINT32_MAX): then stacks have no guard and a zero canary at their low
 *     end is checked at every switch away from them.
 * Pages are committed only when touched (MAP_NORESERVE, no transparent huge
 * pages).  A stack's descriptor lives in its own top bytes, which the fiber
 * touches anyway.
 *
 * Stacks are recycled through a per-executor cache (no locks, no munmap);
 * the cache spills to and refills from the shared pool in batches, and
 * stacks in the shared pool give their memory back (MADV_DONTNEED).  The
 * pool hands out its lowest-addressed stacks first, in ascending order, so
 * tasks spawned one after another get neighbouring stacks however
 * scattered the order they were freed in.
 */
#ifndef CBCMN_STACK_H
#define CBCMN_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"

#define CBCMN__CANARY_BYTES 64
/* Room the C library gets to finish a call that overflowed (overflow.c):
 * vfprintf needs 2-5 KiB, the resolver more.  Address space only. */
#define CBCMN__YELLOW_BYTES (16u * 1024)

enum { CBCMN__GUARD_NONE, CBCMN__GUARD_PROT, CBCMN__GUARD_MADV };

/* The red page: never opened.  x86_64 pages are 4 KiB. */
#define CBCMN__RED_BYTES 4096u

/* 16-byte aligned and sized, so the usable top below it is aligned too; 64
 * bytes, one cache line, which a fiber's first frames share. */
struct cbcmn__stack {
	_Alignas(16) char *lo;     /* lowest usable byte (canary here if unguarded) */
	size_t size;               /* usable bytes, from lo up to this descriptor */
	struct cbcmn__stack *next; /* free lists */
	/* cbcmn__stack_check (runtime.h): a runtime call whose frame is below
	 * this ends the task.  lo plus a reserve; the highest address while
	 * the yellow zone is open, so that the next call ends the task. */
	char *check_lo;
	/* Lowest byte of the guard region (lo: none): the red page, then the
	 * yellow zone up to lo. */
	char *guard_lo;
	void *san_fiber;           /* TSan: the fiber running on this stack */
	void *asan_fake;           /* ASan: its fake stack while switched away */
	uint16_t san_uses;         /* TSan: fibers it has run, mod 65536 */
	bool guarded;
	/* CBCMN__GUARD_*: how the yellow zone is guarded; MADV turns to PROT
	 * if the kernel refuses to put the guard back (a locked process). */
	uint8_t guard_kind;
	/* Set and read on the thread running the stack, by the SIGSEGV
	 * handler and the landing pad: volatile is the ordering needed. */
	volatile uint8_t yellow_open;
	/* A task record lives right below this descriptor (task.c, records
	 * in stacks): fibers on this stack start below it, and the stack
	 * goes back to the pool when the record is freed, not when the
	 * fiber ends.  Set and cleared by the record's owner:
	 * CBCMN__HOLDS_UNSTARTED until a fiber first runs on it, then
	 * CBCMN__HOLDS_STARTED. */
	uint8_t holds_task;
	/* In a cache or the shared pool: a put of it again is refused
	 * (stack.c, bad_put()).  Cleared by the get that hands it out. */
	uint8_t pooled;
};

_Static_assert(sizeof(struct cbcmn__stack) == 64, "one cache line");

#define CBCMN__HOLDS_UNSTARTED 1u
#define CBCMN__HOLDS_STARTED 2u

/* Where the yellow zone starts. */
static inline char *cbcmn__stack_yellow_lo(const struct cbcmn__stack *s)
{
	return s->guard_lo + CBCMN__RED_BYTES;
}

/* Bytes a task record takes below a stack's descriptor when the stack
 * holds one (task.c): sizeof(struct cbcmn_task) to a cache line, checked
 * there. */
#define CBCMN__STACK_RECORD_SPAN 384u

/* A stack's usable top: the descriptor sits right above it, or the task
 * record that sits below the descriptor. */
static inline void *cbcmn__stack_top(struct cbcmn__stack *s)
{
	return s->holds_task ? (void *)((char *)s - CBCMN__STACK_RECORD_SPAN) : (void *)s;
}

struct cbcmn__stack_slab;

struct cbcmn__stack_pool {
	struct cbcmn__mutex lock;       /* CBCMN__LOCK_STACKS */
	uint32_t nfree;                 /* stacks in the shared pool, memory released */
	/* The slabs by address, and where the lowest free stack may be: no
	 * slab below by_addr[lowest] has one (stack.c, lowest first).  Bit i
	 * of has_free: by_addr[i] has stacks in the pool. */
	struct cbcmn__stack_slab **by_addr;
	uint64_t *has_free;
	uint32_t nslabs, slabs_cap, lowest;
	size_t size;                    /* usable bytes per stack */
	size_t region;                  /* bytes per stack in a slab, guard included */
	uint32_t next_slab_stacks;      /* slabs grow geometrically */
	uint64_t guard_left;            /* mprotect guards we may still make */
	uint64_t guard_quota;           /* more guard_max lets it ask for */
	uint32_t guard_max;             /* as given to cbcmn__stack_pool_init */
	size_t guard_bytes;             /* red page + yellow zone, 0: unguarded */
	uint8_t guard_kind;             /* how new slabs are guarded, CBCMN__GUARD_* */
	bool said_refused;              /* the one line about the map budget */
	uint64_t stacks_total, stacks_guarded; /* for stats and tests */
	/* Stacks held by task records whose fiber has not started
	 * (CBCMN__HOLDS_UNSTARTED): each comes back, or is the one its task
	 * needs, once that task runs (sched.c, run_task()). */
	_Atomic uint64_t held_unstarted;
};

/* Per-executor cache, owned by one thread. */
struct cbcmn__stack_cache {
	struct cbcmn__stack *free;
	uint32_t n;
};

#define CBCMN__STACK_CACHE_MAX 64

/* size: usable bytes (page multiple).  guard_max: see cbcmn_config: it
 * limits mprotect guards only; UINT32_MAX turns every guard off.
 * Returns 0, -EINVAL or -errno. */
/* Unmap memory that fibers or signal handlers ran on.  ASan keeps the
 * poison of the frames they left (a parked fiber's locals, a frame that
 * never returned) in its shadow after munmap, and a later mapping at the
 * same address (a ring's SQEs, say) would read as a stack buffer: the
 * shadow is cleared first. */
void cbcmn__unmap_stack_memory(void *p, size_t len);

int cbcmn__stack_pool_init(struct cbcmn__stack_pool *p, size_t size, uint32_t guard_max);
/* Unmaps every slab: every stack must be back in a cache or the pool. */
void cbcmn__stack_pool_fini(struct cbcmn__stack_pool *p);

/* NULL when no stack can be made: out of memory (a slab is halved down to
 * one stack before giving up) or, with mprotect guards, out of map budget. */
struct cbcmn__stack *cbcmn__stack_get(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c);
void cbcmn__stack_put(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c,
		      struct cbcmn__stack *s);
/* A stack kept out of the program's reach for long (an executor's end
 * stack, sched.c): beyond guard_max, which counts the tasks' stacks.
 * Put back with cbcmn__stack_put_kept(). */
struct cbcmn__stack *cbcmn__stack_get_kept(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c);
void cbcmn__stack_put_kept(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c,
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

/* True if addr lies in the guard region below s (a stack overflow). */
static inline bool cbcmn__stack_in_guard(const struct cbcmn__stack *s, const void *addr)
{
	return (const char *)addr < s->lo && (const char *)addr >= s->guard_lo;
}

/* True if addr lies in the red page, below the yellow zone. */
static inline bool cbcmn__stack_in_red(const struct cbcmn__stack *s, const void *addr)
{
	return (const char *)addr < cbcmn__stack_yellow_lo(s) && (const char *)addr >= s->guard_lo;
}

/* Open s's yellow zone for the code that overflowed into it, and make the
 * next runtime call end the task.  Async-signal-safe; 0 or -errno (the
 * commit charge under vm.overcommit_memory=2, a kernel that refuses). */
int cbcmn__stack_yellow_open(struct cbcmn__stack *s);
/* Guard it again, once nothing runs below lo, and set check_lo back (the
 * bound also when the zone is closed: a relaxed one's reset). */
void cbcmn__stack_yellow_close(struct cbcmn__stack *s);
/* The landing pad's own runtime calls get half the reserve more (overflow.c);
 * _reset sets the usual line back. */
void cbcmn__stack_check_relax(struct cbcmn__stack *s);
void cbcmn__stack_check_reset(struct cbcmn__stack *s);

/* Tests: is s in the shared pool (not handed out, not in a cache)? */
bool cbcmn__stack_pool_holds(struct cbcmn__stack_pool *p, const struct cbcmn__stack *s);

/* Map budget left for guarded stacks, from vm.max_map_count and the
 * mappings the process already has.  Exposed for tests and docs. */
uint64_t cbcmn__stack_guard_budget(void);
/* Hold (lock) or release the guard budget's lock across a fork (runtime.c's
 * atfork handlers). */
void cbcmn__stack_fork_lock(bool lock);

/* Tests only.  no_lightweight_guards: behave as on a kernel without
 * MADV_GUARD_INSTALL (read at pool init).  fail_map_over: a slab mapping
 * of more bytes fails with ENOMEM, as under a tight commit limit. */
extern bool cbcmn__stack_test_no_lightweight_guards;
extern size_t cbcmn__stack_test_fail_map_over;

#endif
