/* diag.h: private to libcbcmn: the gauges behind cbcmn_runtime_snapshot().
 *
 * A gauge counts things that begin on one executor and may end on another
 * (a task blocks here and is woken from there; a nursery is opened by a
 * task that migrates before it closes it).  Seed 000 wants no global lock
 * and the hot paths want no locked instruction, so each executor keeps,
 * per gauge:
 *   up         things begun here: written by this executor's thread only
 *              (a relaxed load and store, no lock prefix);
 *   down       those ended by this executor's thread: likewise;
 *   down_remote those ended by any other thread: a fetch_add, on a line of
 *              its own (only a migration or an outside thread pays it).
 * What is open on executor i is up - down - down_remote, all of i's.
 * Threads outside the runtime use the runtime's own set (rt->diag_ext),
 * all fetch_adds.  The begin records where it counted (an executor index,
 * or CBCMN__DIAG_EXT) so that the end finds the same set.
 *
 * Ordering: an end is made visible with release (store or fetch_add) after
 * the begin it ends happened-before it; a reader loads down and
 * down_remote with acquire, then up: it never sees an end without its
 * begin, so a gauge never reads negative.
 */
#ifndef CBCMN_DIAG_H
#define CBCMN_DIAG_H

#include <stdatomic.h>
#include <stdint.h>

/* What a task waits for (cbcmn_task.wait_kind), then the other gauges. */
enum cbcmn__gauge {
	CBCMN__G_IO = 0,   /* an I/O call, a stream, an acceptor (local iwaits) */
	CBCMN__G_TIMER,    /* cbcmn_sleep */
	CBCMN__G_CHAN,     /* a channel send, receive or reservation */
	CBCMN__G_JOIN,     /* cbcmn_task_join, await_all, or running a child inline */
	CBCMN__G_BLOCKING, /* a blocking-pool call (cbcmn_blocking) */
	CBCMN__G_PARKED,   /* BudgetExhausted: waiting for a recharge */
	CBCMN__G_OTHER,    /* none of those (a wait site that did not say) */
	CBCMN__G_NURSERY,  /* nurseries open */
	CBCMN__G_OBLIG,    /* obligations outstanding (permits and general ones) */
	CBCMN__G_N
};
#define CBCMN__G_WAITS (CBCMN__G_OTHER + 1) /* the wait kinds */

#define CBCMN__DIAG_EXT UINT32_MAX /* counted in rt->diag_ext */

struct cbcmn__diag {
	/* Written by the executor's thread only. */
	_Alignas(64) _Atomic uint64_t up[CBCMN__G_N];
	_Atomic uint64_t down[CBCMN__G_N];
	/* +1 as each run of a task on it begins and ends: odd while a task
	 * runs.  The steal gate tells one long run from many short ones by
	 * it (sched.c, pick_stuck()).  A line of its own with run_task:
	 * thieves read it at every steal attempt, and the gauges above,
	 * which the executor bumps at every nursery and inline run, shared
	 * its line (down[CBCMN__G_NURSERY]), each bump a miss. */
	_Alignas(64) _Atomic uint64_t run_seq;
	/* The id of the task of the current run (an inline child's while it
	 * runs), stored before run_seq turns odd: the stall monitor names it
	 * (monitor.c). */
	_Atomic uint64_t run_task;
	_Atomic uint64_t mshots;  /* streams and acceptors open on it (stream.c) */
	/* Written by anyone. */
	_Alignas(64) _Atomic uint64_t down_remote[CBCMN__G_N];
	/* Waits cancellations looked at (iwait.c; rt->diag_ext's only): a
	 * cancel visits those of the nurseries it cancels, not all. */
	_Atomic uint64_t cancel_visits;
};

struct cbcmn_runtime;
struct cbcmn__exec;

/* Begin one g on the calling thread's executor (e: that executor, or NULL
 * for a thread outside rt).  Returns where it counted, for the end. */
uint32_t cbcmn__gauge_up(struct cbcmn_runtime *rt, struct cbcmn__exec *e, int g);
/* End one g begun where home says, from the calling thread (e as above). */
void cbcmn__gauge_down(struct cbcmn_runtime *rt, struct cbcmn__exec *e, uint32_t home, int g);

/* The owner's single-writer increment. */
static inline void cbcmn__diag_bump(_Atomic uint64_t *c, memory_order mo)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, mo);
}

#endif
