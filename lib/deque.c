/* deque.c: Chase-Lev work-stealing deque; see deque.h for the contract. */
#include <errno.h>
#include <stdlib.h>

#include "deque.h"
#include "fault.h"

static struct cbcmn__deque_buf *buf_new(int64_t cap)
{
	struct cbcmn__deque_buf *a = cbcmn__malloc(sizeof(*a) + (size_t)cap * sizeof(a->slot[0]));
	if (!a)
		return NULL;
	a->mask = cap - 1;
	a->older = NULL;
	return a;
}

int cbcmn__deque_init(struct cbcmn__deque *d, uint32_t capacity)
{
	int64_t cap = 2;
	while (cap < (int64_t)capacity)
		cap <<= 1;
	struct cbcmn__deque_buf *a = buf_new(cap);
	if (!a)
		return -ENOMEM;
	atomic_init(&d->top, 0);
	atomic_init(&d->bottom, 0);
	atomic_init(&d->buf, a);
	d->top_seen = 0;
	return 0;
}

void cbcmn__deque_destroy(struct cbcmn__deque *d)
{
	struct cbcmn__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
	while (a) {
		struct cbcmn__deque_buf *older = a->older;
		free(a);
		a = older;
	}
	atomic_store_explicit(&d->buf, NULL, memory_order_relaxed);
}

/* Owner: double the array, copying the live range [t, b).  O(n), amortised. */
static struct cbcmn__deque_buf *grow(struct cbcmn__deque *d, struct cbcmn__deque_buf *a,
				     int64_t t, int64_t b)
{
	struct cbcmn__deque_buf *n = buf_new((a->mask + 1) * 2);
	if (!n)
		return NULL;
	for (int64_t i = t; i < b; i++)
		atomic_store_explicit(&n->slot[i & n->mask],
				      atomic_load_explicit(&a->slot[i & a->mask], memory_order_relaxed),
				      memory_order_relaxed);
	n->older = a;
	/* Release: a thief that acquires the new array sees the copied slots. */
	atomic_store_explicit(&d->buf, n, memory_order_release);
	return n;
}

/* push() overwrites slot b - capacity, which a thief may be reading while
 * it races for index b - capacity.  The thief that took it read the slot
 * before its CAS moved top past it; the owner's acquire load of a top past
 * it synchronizes with that CAS (or a later one in its release sequence),
 * so that read happens before the overwrite.  A racer that lost may read
 * either value: its CAS from b - capacity fails, since top only grows, and
 * it drops what it read.  Any top loaded with acquire or seq_cst will do,
 * however old, as long as it is past b - capacity.  So push() looks at
 * top only when the last value seen says the array is full, and a thief's
 * CAS on top no longer pulls top's line to the owner on every push
 * (spawn's profile: 65 % of the steal on that CAS while the spawner
 * pushed). */
int cbcmn__deque_push(struct cbcmn__deque *d, void *x)
{
	int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
	struct cbcmn__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
	if (b - d->top_seen > a->mask) {
		/* Acquire: see above. */
		int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
		d->top_seen = t;
		if (b - t > a->mask) {
			a = grow(d, a, t, b);
			if (!a)
				return -ENOMEM;
		}
	}
	atomic_store_explicit(&a->slot[b & a->mask], x, memory_order_relaxed);
	/* Release: pairs with the acquire load of bottom in steal(); the item
	 * (and everything the owner wrote into it) is visible to the thief. */
	atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
	return 0;
}

void *cbcmn__deque_pop(struct cbcmn__deque *d)
{
	int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
	struct cbcmn__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
	/* seq_cst store then seq_cst load: the store-buffering pair with
	 * steal()'s load of top then load of bottom.  Either the thief sees the
	 * smaller bottom, or we see its incremented top. */
	atomic_store_explicit(&d->bottom, b, memory_order_seq_cst);
	int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
	d->top_seen = t; /* for push(): seq_cst is at least acquire */
	void *x = NULL;
	if (t <= b) {
		x = atomic_load_explicit(&a->slot[b & a->mask], memory_order_relaxed);
		if (t == b) {
			/* The last item: race the thieves for it on top. */
			if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1,
								     memory_order_seq_cst,
								     memory_order_relaxed))
				x = NULL;
			atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
		}
	} else {
		atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
	}
	return x;
}

void *cbcmn__deque_steal(struct cbcmn__deque *d)
{
	/* seq_cst loads: see pop(). */
	int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
	int64_t b = atomic_load_explicit(&d->bottom, memory_order_seq_cst);
	if (t >= b)
		return CBCMN__DEQUE_EMPTY;
	/* Acquire: pairs with the release store in grow(). */
	struct cbcmn__deque_buf *a = atomic_load_explicit(&d->buf, memory_order_acquire);
	void *x = atomic_load_explicit(&a->slot[t & a->mask], memory_order_relaxed);
	/* The CAS claims slot t; it fails if the owner's pop or another thief
	 * claimed it first, and then x must not be used. */
	if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
						     memory_order_relaxed))
		return CBCMN__DEQUE_ABORT;
	return x;
}
