/* deque.h: private to libcbcmn: Chase-Lev work-stealing deque (growable).
 *
 * One owner pushes and pops at the bottom (LIFO); any thread steals from the
 * top (FIFO).  Follows Lê, Pop, Cohen, Zappa Nardelli, "Correct and
 * Efficient Work-Stealing for Weak Memory Models" (PPoPP 2013), written with
 * seq_cst accesses where that paper uses seq_cst fences so that TSan, which
 * does not model fences, sees the same happens-before edges.  On x86 the code
 * is the same: one locked instruction in pop and steal.
 *
 * Indices only grow, so a slot index never repeats (no ABA).  Old arrays are
 * kept until the deque is destroyed because a thief may still read them;
 * they add up to less than the live array.
 */
#ifndef CBCMN_DEQUE_H
#define CBCMN_DEQUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct cbcmn__deque_buf {
	int64_t mask;                   /* capacity - 1, capacity a power of two */
	struct cbcmn__deque_buf *older; /* retired arrays, freed at destroy */
	_Atomic(void *) slot[];
};

struct cbcmn__deque {
	/* top is written by thieves, bottom by the owner: separate cache lines. */
	_Alignas(64) _Atomic int64_t top;
	_Alignas(64) _Atomic int64_t bottom;
	_Atomic(struct cbcmn__deque_buf *) buf;
	/* Owner only (whoever works the bottom: a stopped executor's stand-in
	 * too, sched.c's forward_runnable(), handed over as bottom is): top
	 * as the owner last loaded it (acquire or seq_cst).  top only grows,
	 * so this is a lower bound, and push() needs no look at the thieves'
	 * line while the array has room by it (deque.c). */
	int64_t top_seen;
	char pad_[64 - 2 * sizeof(_Atomic int64_t) - sizeof(void *)];
};

/* Result of a steal: the item, or one of these two markers. */
#define CBCMN__DEQUE_EMPTY ((void *)0)
#define CBCMN__DEQUE_ABORT ((void *)1) /* lost a race: the deque may not be empty */

/* Capacity rounded up to a power of two (>= 2).  Returns 0 or -ENOMEM. */
int cbcmn__deque_init(struct cbcmn__deque *d, uint32_t capacity);
void cbcmn__deque_destroy(struct cbcmn__deque *d);

/* Owner only.  Grows when full; -ENOMEM if that fails (x not pushed). */
int cbcmn__deque_push(struct cbcmn__deque *d, void *x);
/* Owner only.  NULL when empty. */
void *cbcmn__deque_pop(struct cbcmn__deque *d);
/* Any thread.  The oldest item, CBCMN__DEQUE_EMPTY or CBCMN__DEQUE_ABORT. */
void *cbcmn__deque_steal(struct cbcmn__deque *d);

/* Owner only: the item the next pop would return, as a hint for a
 * prefetch and nothing else: a thief may have taken it, or it may be a
 * stale slot (then what it points at may be gone; a prefetch of it does
 * no harm). */
static inline void *cbcmn__deque_peek_hint(struct cbcmn__deque *d)
{
	int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
	struct cbcmn__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
	return atomic_load_explicit(&a->slot[b & a->mask], memory_order_relaxed);
}

/* Any thread: approximate number of items (exact when nobody races). */
static inline int64_t cbcmn__deque_len(struct cbcmn__deque *d)
{
	int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
	int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
	return b > t ? b - t : 0;
}

#endif
