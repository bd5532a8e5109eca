/* lock.c: ranked mutexes and the debug lock-order checker. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lock.h"
#include "probes.h"

#ifdef CBCMN_DEBUG
/* Locks held by this thread, in acquisition order.  Thread-local because a
 * lock belongs to the thread holding it (and never to a fiber). */
#define HELD_MAX 16
static __thread struct cbcmn__mutex *held[HELD_MAX];
static __thread int nheld;

static void order_violation(const struct cbcmn__mutex *want, const struct cbcmn__mutex *have)
{
	fprintf(stderr,
		"cbcmn: lock order violation: acquiring \"%s\" (rank %d) while holding "
		"\"%s\" (rank %d); see docs/LOCKING.md\n",
		want->name, want->rank, have->name, have->rank);
	abort();
}
#endif

void cbcmn__mutex_init(struct cbcmn__mutex *mu, const char *name, int rank)
{
	/* The static initializer: the same as pthread_mutex_init(.., NULL)
	 * without the call, which matters for per-nursery locks. */
	mu->m = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	mu->name = name;
	mu->rank = rank;
}

void cbcmn__mutex_destroy(struct cbcmn__mutex *mu)
{
	pthread_mutex_destroy(&mu->m);
}

void cbcmn__mutex_lock(struct cbcmn__mutex *mu)
{
#ifdef CBCMN_DEBUG
	for (int i = 0; i < nheld; i++)
		if (held[i]->rank >= mu->rank)
			order_violation(mu, held[i]);
#endif
	if (pthread_mutex_trylock(&mu->m) != 0) {
		/* Contended: time the wait only on this slow path. */
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		pthread_mutex_lock(&mu->m);
		clock_gettime(CLOCK_MONOTONIC, &b);
		CBCMN_PROBE2(lock_contended, mu->name,
			     (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull +
				     (uint64_t)(b.tv_nsec - a.tv_nsec));
	}
#ifdef CBCMN_DEBUG
	if (nheld < HELD_MAX)
		held[nheld] = mu;
	nheld++;
#endif
}

void cbcmn__mutex_unlock(struct cbcmn__mutex *mu)
{
#ifdef CBCMN_DEBUG
	/* Locks may be released in any order. */
	for (int i = nheld - 1; i >= 0; i--) {
		if (i < HELD_MAX && held[i] == mu) {
			for (int j = i; j + 1 < nheld && j + 1 < HELD_MAX; j++)
				held[j] = held[j + 1];
			break;
		}
	}
	nheld--;
#endif
	pthread_mutex_unlock(&mu->m);
}

void cbcmn__lock_assert_none_held(const char *where)
{
#ifdef CBCMN_DEBUG
	if (nheld > 0) {
		fprintf(stderr, "cbcmn: lock \"%s\" held across a fiber switch in %s\n",
			held[0]->name, where);
		abort();
	}
#else
	(void)where;
#endif
}
