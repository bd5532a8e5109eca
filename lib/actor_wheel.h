/* actor_wheel.h: private to libcbcmn: an executor's scheduling wheel for actors.
 *
 * Seed 003 "Scheduling actors" and "Load statistics"; docs/ACTORS.md
 * "Scheduling: the per-executor wheel" has the decisions.  The wheel is
 * owner-only data of one executor: no lock, no atomics, except the load it
 * publishes.  It orders nodes (struct cbcmn__wheel_node, embedded in an
 * actor's slot); it does not run anything: the executor's pick asks it for
 * the next node and tells it how a node's run ended.
 *
 *   - S = 64 segments; the executor serves one at a time (cur) and turns to
 *     the next one that holds anything (a 64-bit mask: one ctz, no spin).
 *     pos counts the segments turned through since init (cur = pos % S).
 *   - A node that used its whole quantum goes N = S/4 segments forward, into
 *     that segment's runnable queue (cbcmn__wheel_ran()).
 *   - One that blocked after using a fraction f of it is due max(1, N * f)
 *     segments forward (cbcmn__wheel_parked() says which position) and
 *     keeps the rest of its quantum.  A blocked node is NOT on the wheel
 *     (docs/ACTORS.md: only the owner touches the wheel, and a blocked
 *     actor is woken by anyone, anywhere): when it is woken, the owner
 *     files it (cbcmn__wheel_woken()): due position still ahead, into that
 *     segment's idle set, where it runs first when the segment comes, with
 *     its preserved quantum only; due position passed (the seed: it joined
 *     the executor's idle set), into the first list, which runs before any
 *     segment ("given priority and run at the first opportunity").
 *   - Load: each completed turn's length against the nominal turn (S
 *     quanta of the measured quantum time), 1000 = nominal, smoothed over 8
 *     turns; an empty wheel decays it with nominal-length idle turns.
 */
#ifndef CBCMN_ACTOR_WHEEL_H
#define CBCMN_ACTOR_WHEEL_H

#include <stdbool.h>
#include <stdint.h>

#define CBCMN__WHEEL_SEGS 64u
#define CBCMN__WHEEL_FORWARD (CBCMN__WHEEL_SEGS / 4u) /* N */

/* Where a node is. */
enum {
	CBCMN__WN_NONE = 0, /* running, blocked, queued elsewhere, or not on a wheel */
	CBCMN__WN_RUN,      /* a segment's runnable queue */
	CBCMN__WN_IDLE,     /* a segment's idle set: woken, runs when the segment comes */
	CBCMN__WN_FIRST,    /* runs before any segment */
	CBCMN__WN_NEXT,     /* the next place: runs at the next pick (cbcmn__wheel_next()) */
};

/* Consecutive picks from the next place before one pick in the wheel's
 * own order (docs/ACTORS.md "The next place"): with the time bound (one
 * quantum's time for the series, as Go's runnext inherits the time
 * slice), what keeps a chain of spawns from starving the wheel. */
#define CBCMN__WHEEL_NEXT_RUNS 16u

struct cbcmn__wheel_node {
	struct cbcmn__wheel_node *prev, *next;
	uint32_t where;  /* CBCMN__WN_* */
	uint32_t seg;    /* its segment (RUN, IDLE) */
	uint32_t left;   /* the quantum it runs with next (checkpoints) */
};

struct cbcmn__wheel_list {
	struct cbcmn__wheel_node *head, *tail;
};

struct cbcmn__wheel_seg {
	struct cbcmn__wheel_list run, idle;
};

struct cbcmn__wheel {
	uint32_t cur;      /* the segment being served: pos % S */
	uint64_t pos;      /* segments turned through since init */
	uint64_t busy;     /* bit s: segment s holds a node */
	uint32_t quantum;  /* checkpoints of a full quantum (the yield interval) */
	struct cbcmn__wheel_seg seg[CBCMN__WHEEL_SEGS];
	struct cbcmn__wheel_list first; /* runs before any segment, FIFO */
	/* The next place (Go's runnext): an actor spawned here by the run
	 * under way, picked ahead of first and the segments while the
	 * series of such picks is within its bound: next_runs picks since
	 * next_t0 (the clock at the series' first). */
	struct cbcmn__wheel_node *next;
	uint32_t next_runs;
	uint64_t next_t0;
	/* The series' bound in picks only, not in time: a lab runtime's
	 * (its order is the seed's, never the real clock's: docs/LAB.md). */
	bool next_untimed;
	/* Load (all ns of the caller's clock). */
	uint64_t turn_start;  /* when the current turn began */
	uint64_t quantum_ns;  /* EWMA of the time a full quantum takes */
	uint64_t load_milli;  /* EWMA over 8 turns; 1000 = nominal */
	uint64_t turns;       /* turns completed (idle ones included) */
	/* The current turn's runs: checkpoints used and their time, whose
	 * ratio is the turn's own quantum time (its nominal, see load_sample()). */
	uint64_t turn_used, turn_run_ns;
	uint64_t prev_sample[2]; /* the two turns before: a median of three */
	uint32_t nsample;        /* of those, how many are this busy spell's (0..2) */
};

void cbcmn__wheel_init(struct cbcmn__wheel *w, uint32_t quantum, uint64_t now);
/* Take every node movable() accepts off the wheel: a list linked by next
 * (the order is not kept).  O(nodes).  For the stall monitor's rescue,
 * while it holds the wheel (actor_sched.c). */
struct cbcmn__wheel_node *cbcmn__wheel_take_if(struct cbcmn__wheel *w,
					       bool (*movable)(struct cbcmn__wheel_node *));

/* Segments forward for a node that used `used` checkpoints of its quantum:
 * N if it used it all, else max(1, N * used / quantum). */
static inline uint32_t cbcmn__wheel_forward(const struct cbcmn__wheel *w, uint32_t used)
{
	if (used >= w->quantum)
		return CBCMN__WHEEL_FORWARD;
	/* At least one: the current segment is being served, a node put
	 * there would wait a whole turn.  The quotient is 0 exactly when
	 * N x used < quantum: a run that blocks after a few checkpoints (a
	 * hop of a ring: its receive's and its send's) needs no division. */
	uint64_t p = (uint64_t)CBCMN__WHEEL_FORWARD * used;
	if (p < w->quantum)
		return 1;
	return (uint32_t)(p / w->quantum);
}

/* A run took ns of the clock for used checkpoints: the quantum time's
 * average (the load's nominal turn) learns from it. */
void cbcmn__wheel_timed(struct cbcmn__wheel *w, uint32_t used, uint64_t ns);

/* n is runnable after using `used` checkpoints of its quantum (a yield:
 * the quantum; a new node: 0): into the runnable queue of the segment
 * cbcmn__wheel_forward(used) forward, with a whole quantum next. */
void cbcmn__wheel_ran(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n, uint32_t used);
/* n, new, spawned here by the run under way: into the next place, with a
 * full quantum; its previous occupant, if any, enters the next segment as
 * any new node (cbcmn__wheel_ran(), used 0). */
void cbcmn__wheel_next(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n);

/* A node blocked after using `used` checkpoints: the position it is due
 * at, pos + cbcmn__wheel_forward(used) (for cbcmn__wheel_woken()). */
static inline uint64_t cbcmn__wheel_parked(const struct cbcmn__wheel *w, uint32_t used)
{
	return w->pos + cbcmn__wheel_forward(w, used);
}

/* A node that blocked on this wheel, due at position due, was woken with
 * `left` checkpoints of its quantum kept: into the idle set of its
 * segment if that is still ahead, else first. */
void cbcmn__wheel_woken(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n, uint64_t due,
			uint32_t left);

/* cbcmn__wheel_woken(w, n, due, left), then cbcmn__wheel_pick(w, now,
 * quantum), which takes n, on a wheel that held nothing: the same steps
 * (the turn to n's segment, the load's sample if a turn completes), not
 * through the lists (an actor's direct switch, every hop of a ring).  On
 * a wheel that holds a node, the two calls. */
struct cbcmn__wheel_node *cbcmn__wheel_woken_pick(struct cbcmn__wheel *w,
						  struct cbcmn__wheel_node *n, uint64_t due,
						  uint32_t left, uint64_t now, uint32_t *quantum);

/* Does the wheel hold a node? */
static inline bool cbcmn__wheel_ready(const struct cbcmn__wheel *w)
{
	return w->busy || w->first.head || w->next;
}

/* The wheel is empty at now: count the time since its turn began as idle
 * turns (each decays the load), as cbcmn__wheel_pick() does when it finds
 * nothing.  Call it before a node enters an empty wheel, so that a long
 * idle spell is not measured as one long turn. */
void cbcmn__wheel_idle_turns(struct cbcmn__wheel *w, uint64_t now, uint64_t nominal);
/* Inline the look (an actor's direct switch enters the empty wheel every
 * hop, mostly within a turn): the turns out of line. */
static inline void cbcmn__wheel_idle(struct cbcmn__wheel *w, uint64_t now)
{
	uint64_t nominal = (uint64_t)CBCMN__WHEEL_SEGS * w->quantum_ns; /* a nominal turn */
	if (!nominal || now < w->turn_start || now - w->turn_start < nominal)
		return;
	cbcmn__wheel_idle_turns(w, now, nominal);
}

/* The next node to run and its quantum (*quantum), or NULL when the wheel
 * holds nothing runnable; now: the clock, for the load. */
struct cbcmn__wheel_node *cbcmn__wheel_pick(struct cbcmn__wheel *w, uint64_t now,
					    uint32_t *quantum);

/* Take n off the wheel wherever it is (it halts, or migrates). */
void cbcmn__wheel_remove(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n);

#endif
