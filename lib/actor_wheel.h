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
 *   - A node that used its whole quantum goes N = S/4 segments forward, into
 *     that segment's runnable queue; one that blocked (receiving) after
 *     using a fraction f of it goes max(1, N * f) forward, into that
 *     segment's idle set, keeping the rest of its quantum.
 *   - Turning to a segment: its idle nodes woken meanwhile run first, with
 *     their preserved quantum only; those still idle join the executor's
 *     idle set; then its runnable queue runs, FIFO, a full quantum each.
 *   - A node of the executor's idle set that is woken runs first of all
 *     (the seed: "given priority and run at the first opportunity").
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
	CBCMN__WN_NONE = 0, /* running, or not an actor of this wheel */
	CBCMN__WN_RUN,      /* a segment's runnable queue */
	CBCMN__WN_IDLE,     /* a segment's idle set (woken: due when it comes) */
	CBCMN__WN_IDLESET,  /* the executor's idle set */
	CBCMN__WN_FIRST,    /* woken from the idle set, or due: runs before any segment */
};

struct cbcmn__wheel_node {
	struct cbcmn__wheel_node *prev, *next;
	uint32_t where;  /* CBCMN__WN_* */
	uint32_t seg;    /* its segment (RUN, IDLE) */
	uint32_t left;   /* the quantum it runs with next (checkpoints) */
	bool woken;      /* IDLE: it became runnable before its segment came */
};

struct cbcmn__wheel_list {
	struct cbcmn__wheel_node *head, *tail;
};

struct cbcmn__wheel_seg {
	struct cbcmn__wheel_list run, idle;
};

struct cbcmn__wheel {
	uint32_t cur;      /* the segment being served */
	uint64_t busy;     /* bit s: segment s holds a node */
	uint32_t quantum;  /* checkpoints of a full quantum (the yield interval) */
	struct cbcmn__wheel_seg seg[CBCMN__WHEEL_SEGS];
	struct cbcmn__wheel_list first; /* runs before any segment, FIFO */
	struct cbcmn__wheel_list idle;  /* the executor's idle set */
	/* Load (all ns of the caller's clock). */
	uint64_t turn_start;  /* when the current turn began */
	uint64_t quantum_ns;  /* EWMA of the time a full quantum takes */
	uint64_t load_milli;  /* EWMA over 8 turns; 1000 = nominal */
	uint64_t turns;       /* turns completed (idle ones included) */
};

void cbcmn__wheel_init(struct cbcmn__wheel *w, uint32_t quantum, uint64_t now);

/* Segments forward for a node that used `used` checkpoints of its quantum:
 * N if it used it all, else max(1, N * used / quantum). */
uint32_t cbcmn__wheel_forward(const struct cbcmn__wheel *w, uint32_t used);

/* A node's run ended after `used` checkpoints and ns of the clock.  Still
 * runnable (it yielded at its countdown): into the runnable queue N
 * forward.  Idle (blocked on its mailbox): into the idle set of the
 * segment max(1, N * f) forward, keeping quantum - used. */
void cbcmn__wheel_ran(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n, bool runnable,
		      uint32_t used, uint64_t ns);

/* An idle node became runnable (a message came).  False if it was not
 * idle on this wheel (nothing done). */
bool cbcmn__wheel_wake(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n);

/* The next node to run and its quantum (*quantum), or NULL when the wheel
 * holds nothing runnable; now: the clock, for the load. */
struct cbcmn__wheel_node *cbcmn__wheel_pick(struct cbcmn__wheel *w, uint64_t now,
					    uint32_t *quantum);

/* Take n off the wheel wherever it is (it halts, or migrates). */
void cbcmn__wheel_remove(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n);

#endif
