/* lock.c: ranked mutexes and the debug lock-order checker. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "futex.h"
#include "arch.h"
#include "lock.h"
#include "probes.h"

#ifdef CBCMN_DEBUG
/* Locks held by this thread, in acquisition order.  Thread-local because a
 * lock belongs to the thread holding it (and never to a fiber). */
#define HELD_MAX 16
static __thread struct held {
	const void *lock;
	const char *name;
	int rank;
} held[HELD_MAX];
static __thread int nheld;

static void order_violation(const char *name, int rank, const struct held *have)
{
	fprintf(stderr,
		"cbcmn: lock order violation: acquiring \"%s\" (rank %d) while holding "
		"\"%s\" (rank %d); see docs/LOCKING.md\n",
		name, rank, have->name, have->rank);
	abort();
}

void cbcmn__lock_held_add(const void *lock, const char *name, int rank)
{
	for (int i = 0; i < nheld && i < HELD_MAX; i++)
		if (held[i].rank >= rank)
			order_violation(name, rank, &held[i]);
	if (nheld < HELD_MAX)
		held[nheld] = (struct held){lock, name, rank};
	nheld++;
}

void cbcmn__lock_held_del(const void *lock)
{
	/* Locks may be released in any order. */
	for (int i = nheld - 1; i >= 0; i--) {
		if (i < HELD_MAX && held[i].lock == lock) {
			for (int j = i; j + 1 < nheld && j + 1 < HELD_MAX; j++)
				held[j] = held[j + 1];
			break;
		}
	}
	nheld--;
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

/* The time a contended acquisition waited, for the probe. */
static uint64_t ns_since(const struct timespec *a)
{
	struct timespec b;
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (uint64_t)(b.tv_sec - a->tv_sec) * 1000000000ull + (uint64_t)(b.tv_nsec - a->tv_nsec);
}

void cbcmn__mutex_lock(struct cbcmn__mutex *mu)
{
#ifdef CBCMN_DEBUG
	cbcmn__lock_held_add(mu, mu->name, mu->rank);
#endif
	if (pthread_mutex_trylock(&mu->m) != 0) {
		/* Contended: time the wait only on this slow path. */
		struct timespec a;
		clock_gettime(CLOCK_MONOTONIC, &a);
		pthread_mutex_lock(&mu->m);
		CBCMN_PROBE2(lock_contended, mu->name, ns_since(&a));
	}
}

void cbcmn__mutex_unlock(struct cbcmn__mutex *mu)
{
#ifdef CBCMN_DEBUG
	cbcmn__lock_held_del(mu);
#endif
	pthread_mutex_unlock(&mu->m);
}

void cbcmn__flock_init(struct cbcmn__flock *l, const char *name, int rank)
{
	atomic_init(&l->w, 0);
	l->name = name;
	l->rank = rank;
}

/* Looks at a held flock before sleeping on it.  Its sections are a few
 * dozen instructions, and a sleeper costs its holder a futex wake and
 * itself a wake-up: without the spin a blocking round trip between two
 * executors took 13 us against 2.5 with glibc's lock (same run). */
#define FLOCK_SPIN 200

void cbcmn__flock_wait(struct cbcmn__flock *l)
{
	struct timespec a;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < FLOCK_SPIN; i++) {
		uint32_t z = 0;
		if (atomic_load_explicit(&l->w, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_weak_explicit(&l->w, &z, 1, memory_order_acquire,
							  memory_order_relaxed))
			goto held;
		cbcmn__cpu_relax();
	}
	/* 2 from here on: whoever gives it back must wake a sleeper (a
	 * spinner that took it 0 -> 1 meanwhile leaves the woken one to set
	 * 2 again).  acquire: pairs with the release exchange in
	 * cbcmn__flock_unlock(). */
	while (atomic_exchange_explicit(&l->w, 2, memory_order_acquire) != 0)
		cbcmn__futex_wait(&l->w, 2, NULL);
held:
	CBCMN_PROBE2(lock_contended, l->name, ns_since(&a));
}

void cbcmn__flock_wake(struct cbcmn__flock *l)
{
	cbcmn__futex_wake(&l->w, 1);
}

void cbcmn__lock_assert_none_held(const char *where)
{
#ifdef CBCMN_DEBUG
	if (nheld > 0) {
		fprintf(stderr, "cbcmn: lock \"%s\" held across a fiber switch in %s\n",
			held[0].name, where);
		abort();
	}
#else
	(void)where;
#endif
}
