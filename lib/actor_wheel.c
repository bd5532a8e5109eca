/* actor_wheel.c: an executor's scheduling wheel for actors (actor_wheel.h).
 *
 * Owner-only: every call comes from the executor that owns the wheel, so
 * nothing here locks.  The rules are the seed's (003, "Scheduling actors")
 * as docs/ACTORS.md decides them; actor_sched.c feeds the executor's pick
 * from here.
 */
#include <string.h>

#include "actor_wheel.h"
#include "clock.h"

#define SEGS CBCMN__WHEEL_SEGS

/* ---- lists ---------------------------------------------------------------- */

static void l_push(struct cbcmn__wheel_list *l, struct cbcmn__wheel_node *n)
{
	n->next = NULL;
	n->prev = l->tail;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

static void l_del(struct cbcmn__wheel_list *l, struct cbcmn__wheel_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

static struct cbcmn__wheel_node *l_pop(struct cbcmn__wheel_list *l)
{
	struct cbcmn__wheel_node *n = l->head;
	if (n)
		l_del(l, n);
	return n;
}

/* Segment s holds nothing any more: off the mask. */
static void seg_settle(struct cbcmn__wheel *w, uint32_t s)
{
	if (!w->seg[s].run.head && !w->seg[s].idle.head)
		w->busy &= ~(1ull << s);
}

/* ---- load ----------------------------------------------------------------- */

static uint64_t nominal_turn(const struct cbcmn__wheel *w)
{
	return (uint64_t)SEGS * w->quantum_ns;
}

/* One more turn of length turn_ns in the 8-turn average (1000 = nominal).
 * Until a quantum has been timed there is no nominal: nothing changes.
 * The nominal turn is S quanta at the pace of this turn's own runs
 * (turn_run_ns / turn_used per checkpoint), not at the long-run average:
 * time the executor's thread lost (descheduled, or its cgroup throttled)
 * stretches the runs and the turn alike and cancels out, where an
 * average over runs and one over turns, each spiking at its own moment,
 * made two equally loaded executors look up to several times apart
 * (docs/ACTORS.md "Migration": 1159 moves in 1.5 s of a balanced
 * runtime, before).  So load = turn length x checkpoints used /
 * (S x quantum x run time): what the actors asked for, stretched by what
 * else the turn held (plain tasks, the loop, I/O). */
static void load_sample(struct cbcmn__wheel *w, uint64_t turn_ns)
{
	uint64_t nominal = nominal_turn(w), used = w->turn_used, run_ns = w->turn_run_ns;
	w->turns++;
	w->turn_used = w->turn_run_ns = 0;
	if (!nominal)
		return;
	unsigned __int128 sample;
	if (used && run_ns)
		sample = (unsigned __int128)turn_ns * used * 1000 /
			 ((unsigned __int128)SEGS * w->quantum * run_ns);
	else
		sample = (unsigned __int128)turn_ns * 1000 / nominal;
	if (sample > UINT64_MAX / 8)
		sample = UINT64_MAX / 8;
	/* The median of this turn and the two before: a turn that the
	 * thread's lost time hit outside the runs (up), or inside one (down),
	 * is one odd sample, not a load; a load that lasts shows one turn
	 * later.  From nothing (a new wheel, or one decayed to 0), the
	 * average starts at the sample rather than climbing from 0 for 8
	 * turns, when a young wheel looked idle to everyone's migration. */
	uint64_t s = (uint64_t)sample, a = w->prev_sample[0], b = w->prev_sample[1];
	w->prev_sample[1] = a;
	w->prev_sample[0] = s;
	uint64_t med = s < a ? (a < b ? a : (s < b ? b : s)) : (s < b ? s : (a < b ? b : a));
	if (w->nsample < 2) {
		med = s; /* no history in this busy spell yet */
		w->nsample++;
	}
	w->load_milli = w->load_milli ? w->load_milli - w->load_milli / 8 + med / 8 : med;
}

/* The wheel is empty: the time since the last turn ended counts as idle
 * turns of nominal length, each a sample of 0 (seed: load falls as the
 * executor idles, with no timer to say so). */
void cbcmn__wheel_idle_turns(struct cbcmn__wheel *w, uint64_t now, uint64_t nominal)
{
	uint64_t k = (now - w->turn_start) / nominal;
	w->turn_start += k * nominal;
	w->turn_used = w->turn_run_ns = 0; /* a turn's runs, not an idle spell's */
	w->nsample = 0;                     /* nor its samples */
	w->turns += k;
	if (k >= 512)
		w->load_milli = 0; /* (7/8)^512 of anything is nothing */
	else
		while (k-- && w->load_milli)
			w->load_milli = w->load_milli * 7 / 8; /* < 2^61 * 7: fits */
}

/* ---- the wheel ------------------------------------------------------------ */

void cbcmn__wheel_init(struct cbcmn__wheel *w, uint32_t quantum, uint64_t now)
{
	memset(w, 0, sizeof(*w));
	w->quantum = quantum ? quantum : 1;
	w->turn_start = now;
}

void cbcmn__wheel_timed(struct cbcmn__wheel *w, uint32_t used, uint64_t ns)
{
	if (!used)
		return;
	w->turn_used += used;
	w->turn_run_ns += ns;
	/* What a whole quantum takes, from this run's pace:
	 * floor(ns x quantum / used), one division while the product fits
	 * (a run under 4.2 s: every hop), else two that do not overflow. */
	uint64_t est = ns <= UINT32_MAX ? ns * w->quantum / used
					: ns / used * w->quantum + ns % used * w->quantum / used;
	w->quantum_ns = w->quantum_ns ? w->quantum_ns - w->quantum_ns / 8 + est / 8 : est;
}

/* Into segment s's list l (its runnable queue or its idle set). */
static void seg_put(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n, uint32_t s,
		    uint32_t where)
{
	n->seg = s;
	n->where = where;
	l_push(where == CBCMN__WN_RUN ? &w->seg[s].run : &w->seg[s].idle, n);
	w->busy |= 1ull << s;
}

void cbcmn__wheel_ran(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n, uint32_t used)
{
	n->left = w->quantum;
	seg_put(w, n, (w->cur + cbcmn__wheel_forward(w, used)) % SEGS, CBCMN__WN_RUN);
}

void cbcmn__wheel_next(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n)
{
	struct cbcmn__wheel_node *old = w->next;
	n->left = w->quantum;
	n->prev = n->next = NULL;
	n->where = CBCMN__WN_NEXT;
	w->next = n;
	if (old)
		cbcmn__wheel_ran(w, old, 0); /* admitted the normal way */
}

void cbcmn__wheel_woken(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n, uint64_t due,
			uint32_t left)
{
	n->left = left && left <= w->quantum ? left : w->quantum; /* all used: a new one */
	/* Ahead by at most N < S segments (cbcmn__wheel_parked()): due % S is
	 * a segment not yet turned to in this turn or the next. */
	if (due > w->pos && due - w->pos < SEGS) {
		seg_put(w, n, (uint32_t)(due % SEGS), CBCMN__WN_IDLE);
	} else {
		n->where = CBCMN__WN_FIRST;
		l_push(&w->first, n);
	}
}

void cbcmn__wheel_remove(struct cbcmn__wheel *w, struct cbcmn__wheel_node *n)
{
	switch (n->where) {
	case CBCMN__WN_RUN:
		l_del(&w->seg[n->seg].run, n);
		seg_settle(w, n->seg);
		break;
	case CBCMN__WN_IDLE:
		l_del(&w->seg[n->seg].idle, n);
		seg_settle(w, n->seg);
		break;
	case CBCMN__WN_FIRST:
		l_del(&w->first, n);
		break;
	case CBCMN__WN_NEXT:
		w->next = NULL;
		break;
	}
	n->where = CBCMN__WN_NONE;
}

static void take_from(struct cbcmn__wheel_list *l, bool (*movable)(struct cbcmn__wheel_node *),
		      struct cbcmn__wheel_node **out)
{
	for (struct cbcmn__wheel_node *n = l->head, *next; n; n = next) {
		next = n->next;
		if (!movable(n))
			continue;
		l_del(l, n);
		n->where = CBCMN__WN_NONE;
		n->next = *out;
		*out = n;
	}
}

struct cbcmn__wheel_node *cbcmn__wheel_take_if(struct cbcmn__wheel *w,
					       bool (*movable)(struct cbcmn__wheel_node *))
{
	struct cbcmn__wheel_node *out = NULL, *x = w->next;
	if (x && movable(x)) {
		w->next = NULL;
		x->where = CBCMN__WN_NONE;
		x->next = out;
		out = x;
	}
	take_from(&w->first, movable, &out);
	for (uint32_t s = 0; s < SEGS; s++) {
		if (!(w->busy >> s & 1))
			continue;
		take_from(&w->seg[s].run, movable, &out);
		take_from(&w->seg[s].idle, movable, &out);
		seg_settle(w, s);
	}
	return out;
}

/* Turn to segment s: its idle nodes (all woken: a blocked node is not on
 * the wheel) are due, first of all. */
static void turn_to(struct cbcmn__wheel *w, uint32_t s)
{
	struct cbcmn__wheel_node *n;
	w->cur = s;
	while ((n = l_pop(&w->seg[s].idle))) {
		n->where = CBCMN__WN_FIRST;
		l_push(&w->first, n);
	}
	seg_settle(w, s);
}
/* The next place's occupant, picked (its series one pick longer). */
static struct cbcmn__wheel_node *take_next(struct cbcmn__wheel *w, uint64_t now,
					   uint32_t *quantum)
{
	struct cbcmn__wheel_node *n = w->next;
	if (!w->next_runs++)
		w->next_t0 = now;
	w->next = NULL;
	n->where = CBCMN__WN_NONE;
	*quantum = n->left;
	return n;
}

/* May the next place's occupant be picked now, ahead of the wheel's
 * order?  Not once its series has had CBCMN__WHEEL_NEXT_RUNS picks, or a
 * quantum's time (once the wheel has timed one; never in the lab, whose
 * order must not follow the real clock): the series shares one
 * quantum, as a goroutine run from Go's runnext inherits its time slice
 * (docs/ACTORS.md "The next place"). */
static bool next_due(const struct cbcmn__wheel *w, uint64_t now)
{
	return w->next_runs < CBCMN__WHEEL_NEXT_RUNS &&
	       (!w->next_runs || w->next_untimed || !w->quantum_ns ||
		cbcmn__ns_since(now, w->next_t0) < w->quantum_ns);
}

struct cbcmn__wheel_node *cbcmn__wheel_pick(struct cbcmn__wheel *w, uint64_t now,
					    uint32_t *quantum)
{
	if (__builtin_expect(w->next != NULL, 0) && next_due(w, now))
		return take_next(w, now, quantum);
	for (;;) {
		struct cbcmn__wheel_node *n = l_pop(&w->first);
		if (!n && (n = l_pop(&w->seg[w->cur].run)))
			seg_settle(w, w->cur);
		if (n) {
			n->where = CBCMN__WN_NONE;
			*quantum = n->left;
			w->next_runs = 0; /* the wheel's order honoured: a new series */
			return n;
		}
		if (!w->busy) {
			if (w->next) { /* nothing else to serve: a new series */
				w->next_runs = 0;
				return take_next(w, now, quantum);
			}
			cbcmn__wheel_idle(w, now);
			return NULL;
		}
		/* The next segment that holds anything, strictly after cur
		 * (cur itself, a whole turn on, last): rotate the mask so that
		 * bit 0 is cur + 1. */
		uint32_t r = (w->cur + 1) % SEGS;
		uint64_t m = r ? w->busy >> r | w->busy << (SEGS - r) : w->busy;
		uint32_t d = (uint32_t)__builtin_ctzll(m) + 1;
		if (w->cur + d >= SEGS) {
			/* Past the last segment: a turn is complete. */
			load_sample(w, cbcmn__ns_since(now, w->turn_start));
			w->turn_start = now;
		}
		w->pos += d;
		turn_to(w, (w->cur + d) % SEGS);
	}
}

struct cbcmn__wheel_node *cbcmn__wheel_woken_pick(struct cbcmn__wheel *w,
						  struct cbcmn__wheel_node *n, uint64_t due,
						  uint32_t left, uint64_t now, uint32_t *quantum)
{
	if (__builtin_expect(w->busy || w->first.head || w->next, 0)) {
		cbcmn__wheel_woken(w, n, due, left);
		return cbcmn__wheel_pick(w, now, quantum);
	}
	n->left = left && left <= w->quantum ? left : w->quantum;
	if (due > w->pos && due - w->pos < SEGS) {
		/* Into segment s's idle set, the only busy one: the pick turns
		 * d segments on, to s (cur itself would be a whole turn), its
		 * idle node first, and takes it; s is empty again. */
		uint32_t s = (uint32_t)(due % SEGS);
		uint32_t d = (s + SEGS - (w->cur + 1) % SEGS) % SEGS + 1;
		if (w->cur + d >= SEGS) {
			load_sample(w, cbcmn__ns_since(now, w->turn_start));
			w->turn_start = now;
		}
		w->pos += d;
		w->cur = s;
		n->seg = s;
	}
	/* Else first, the pick's at once. */
	w->next_runs = 0; /* the wheel's order: a new series */
	n->where = CBCMN__WN_NONE;
	n->prev = n->next = NULL;
	*quantum = n->left;
	return n;
}
