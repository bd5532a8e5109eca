/* lock.h: private to libcbcmn: the runtime's few mutexes, ranked.
 *
 * cbcmn has no global runtime lock (seed 000): executor state belongs to its
 * executor, configuration is immutable after start, counters are atomics.
 * The locks that remain guard cold, shared structures.  When two must be held
 * together they are taken in increasing rank (docs/LOCKING.md has the table).
 * Debug builds (CBCMN_DEBUG) keep the held locks per thread and abort, naming
 * both locks, when a lock is taken out of order or held across a fiber
 * switch.  Every acquisition that has to wait fires the lock_contended probe.
 */
#ifndef CBCMN_LOCK_H
#define CBCMN_LOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* The canonical order: a lock may only be taken while holding locks of a
 * lower rank.  Gaps leave room for the layers still to come. */
enum cbcmn__lock_rank {
	CBCMN__LOCK_RUNTIME_JANUS = 10, /* janus_rt: the global runtime pointer */
	CBCMN__LOCK_SIGNAL = 15,        /* installing the SIGSEGV handler (process-wide) */
	CBCMN__LOCK_TASK_BUDGET = 18,   /* a task's incoming budget vs its end (striped) */
	CBCMN__LOCK_NURSERY = 20,       /* a nursery's list of exhausted children */
	CBCMN__LOCK_SCOPE = 25,         /* a runtime's tree of cancel scopes (iwait.c) */
	CBCMN__LOCK_IWAIT = 30,         /* an executor's interruptible-wait registry */
	CBCMN__LOCK_INJECT = 40,        /* runtime inject queue */
	CBCMN__LOCK_CHAN = 50,          /* a channel: ring, wait queues, reservations */
	CBCMN__LOCK_ACTOR = 52,         /* an actor's slot: mailbox, monitors (actor.h) */
	CBCMN__LOCK_BLOCKING = 55,      /* a runtime's blocking pool: jobs, idle threads */
	CBCMN__LOCK_STACKS = 60,        /* shared stack pool and slab list */
	CBCMN__LOCK_STACK_BUDGET = 65,  /* the process's guard-page budget, a leaf */
	CBCMN__LOCK_OBLIG = 70,         /* a runtime's pool of obligation records, a leaf */
	CBCMN__LOCK_ACTOR_TABLE = 72,   /* a runtime's actor slots: free list, growth, a leaf */
	CBCMN__LOCK_LANE_WAIT = 73,     /* tasks parked for messages in lanes (actor_mbox.c), a leaf */
	CBCMN__LOCK_METRICS = 74,       /* the runtimes' lists of metrics servers, a leaf */
};

struct cbcmn__mutex {
	pthread_mutex_t m;
	const char *name;
	int rank;
};

/* For the library's few process-wide locks, which exist before any call. */
#define CBCMN__MUTEX_INITIALIZER(lname, lrank)                                  \
	{ .m = PTHREAD_MUTEX_INITIALIZER, .name = (lname), .rank = (lrank) }

void cbcmn__mutex_init(struct cbcmn__mutex *mu, const char *name, int rank);
void cbcmn__mutex_destroy(struct cbcmn__mutex *mu);
void cbcmn__mutex_lock(struct cbcmn__mutex *mu);
void cbcmn__mutex_unlock(struct cbcmn__mutex *mu);

/* A lock for the hottest short sections (a channel's), with the same rank
 * checks and the same probe when it has to wait, but taken with one inline
 * CAS and given back with one exchange, the futex only under contention
 * (Drepper, "Futexes are tricky", mutex 2): glibc's two calls per section
 * were 12-15 % of a blocking channel round trip.  Nothing waits on it with
 * a condition variable. */
struct cbcmn__flock {
	_Atomic uint32_t w;        /* 0 free, 1 held, 2 held with sleepers */
	const char *name;
	int rank;
};

void cbcmn__flock_init(struct cbcmn__flock *l, const char *name, int rank);
void cbcmn__flock_wait(struct cbcmn__flock *l); /* contended: sleep until ours */
void cbcmn__flock_wake(struct cbcmn__flock *l); /* given back with sleepers */
#ifdef CBCMN_DEBUG
/* The debug builds' record of the locks this thread holds (lock.c). */
void cbcmn__lock_held_add(const void *lock, const char *name, int rank);
void cbcmn__lock_held_del(const void *lock);
#endif

static inline void cbcmn__flock_lock(struct cbcmn__flock *l)
{
#ifdef CBCMN_DEBUG
	cbcmn__lock_held_add(l, l->name, l->rank);
#endif
	uint32_t z = 0;
	if (__builtin_expect(!atomic_compare_exchange_strong_explicit(&l->w, &z, 1, memory_order_acquire,
								      memory_order_relaxed),
			     0))
		cbcmn__flock_wait(l);
}

static inline void cbcmn__flock_unlock(struct cbcmn__flock *l)
{
#ifdef CBCMN_DEBUG
	cbcmn__lock_held_del(l);
#endif
	if (__builtin_expect(atomic_exchange_explicit(&l->w, 0, memory_order_release) == 2, 0))
		cbcmn__flock_wake(l);
}

/* Debug builds: abort if the calling thread holds any cbcmn lock (called
 * before every fiber switch: a lock must never travel with a fiber). */
void cbcmn__lock_assert_none_held(const char *where);

#endif
