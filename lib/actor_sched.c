/* actor_sched.c: actors on the executor's pick: the wheel's hooks.
 *
 * docs/ACTORS.md "Scheduling: the per-executor wheel" has the design and
 * its reasons; lib/actor_wheel.c the wheel itself.  sched.c calls in at
 * four points: its pick (cbcmn__actor_turn(), cbcmn__actor_admit(),
 * cbcmn__actor_after()), a yield (cbcmn__actor_yielded()), a block
 * (cbcmn__actor_parks()), and the start of every actor run
 * (cbcmn__actor_run(), actor.c, which calls run_begin() here).
 *
 * Everything here runs on the executor that owns the wheel: a wheel holds
 * only ready actor tasks that executor took from its own queues (or that
 * yielded on it), never a blocked one, so no other thread ever touches it:
 * wakes, steals, stops and cancellations act on tasks in the ordinary
 * queues, before they reach a wheel, or on blocked tasks, which are on none.
 * The one exception is the stall monitor's rescue of a stalled executor's
 * wheel, while its owner is held in a run (the gate, at the end).
 */
#include <time.h>

#include "actor.h"
#include "arch.h"
#include "clock.h"
#include "fault.h"
#include "probes.h"
#include "rng.h"
#include "statseg.h"

/* Migration (docs/ACTORS.md "Migration"): look at one in MIGRATE_EVERY
 * full-quantum yields and wakes admitted, at random; move when
 * our load is above nominal and more than 3/2 of the other's (5/4 let
 * measurement noise on a loaded machine move actors between two equally
 * loaded executors); at most one move per MIGRATE_GAP_TURNS turns of our
 * wheel, and an actor moved rests MIGRATE_REST nominal turns before it
 * moves again. */
#define MIGRATE_EVERY 8u
#define MIGRATE_MIN_LOAD 1000u
#define MIGRATE_REST 4u
/* Turns of our wheel between two hand-overs: the load is an average over
 * 8 turns, ours and the receiver's show a move only after that many; one
 * move per turn overshot (docs/ACTORS.md "Migration"). */
#define MIGRATE_GAP_TURNS 8u
/* Turns our wheel must have been busy before it hands anything over: a
 * young wheel's load is a few turns' worth, and executors started
 * together need those turns to publish theirs (moves on half-built loads
 * left a balanced start unbalanced).  8 was measured too: faster to shed
 * (about half the time under TSan), but 2 balanced windows in 16 saw a
 * move, against none in 26 with 16. */
#define MIGRATE_WARM_TURNS 16u
/* Wall time an overload must have lasted, at every look, before a move,
 * besides MIGRATE_GAP_TURNS turns: 8 turns of a busy wheel are a few ms
 * (24 actors: about 0.4 ms a turn on this machine), shorter than the
 * scheduling noise of a loaded machine, where the thread loses a CFS
 * slice's worth (ms) at a time; a loss between runs lifts the load (up
 * to 4x for a few turns) and its EWMA needs some 10 turns to settle, so
 * two equally loaded executors each look overloaded against the other
 * for longer than 8 turns, now and then (measured: 2 windows in 24 of a
 * balanced runtime moved an actor, beside load, each move a single
 * executor's spike: 6263 against 1777).  50 ms spans several slices of
 * that noise; a real imbalance lasts (docs/ACTORS.md "Migration"). */
#define MIGRATE_PERSIST_NS 50000000ull

struct cbcmn__awheel {
	struct cbcmn__wheel w;
	bool wheel_next;      /* a plain task was picked last: the wheel's turn */
	bool idle_published;  /* the wheel is empty, and readers were told */
	uint64_t turns_published;
	/* The actor take() just returned, and the clock it read: that run's
	 * start (run_begin() reads the clock only for other runs). */
	struct cbcmn__actor *picked;
	uint64_t picked_ns;
	/* The actor whose park cbcmn__actor_direct() did before its task
	 * was off its stack: cbcmn__actor_parks() leaves the wheel alone. */
	struct cbcmn__actor *parked;
	uint64_t moved_turn;      /* turns + 1 at our last hand-over; 0: none */
	uint64_t busy_turn;       /* turns when the wheel last became non-empty */
	uint64_t over_turn;       /* turns + 1 at the first of the looks since that
				   * found us overloaded; 0: the last look did not */
	uint64_t over_ns;         /* the clock at that first look */
};

/* The wheel's clock: the process's fast clock (clock.h), unordered (no
 * lfence: read once a hop, it cost the ring 6-9 % of its CPU), so its
 * stamps are compared through cbcmn__ns_since().  Its runs are hundreds
 * of ns, timed one by one (cbcmn__wheel_timed()): docs/ACTORS.md "The
 * wheel's clock". */
static uint64_t clock_ns(void)
{
	return cbcmn__now_ns_unordered();
}

static struct cbcmn__actor *node_actor(struct cbcmn__wheel_node *n)
{
	return (struct cbcmn__actor *)((char *)n - offsetof(struct cbcmn__actor, wn));
}

/* Checkpoints t may still run before its fairness yield: what is left of
 * its quantum (budget.c: yield_left excludes the countdown window). */
static uint64_t quantum_left(const struct cbcmn_task *t)
{
	return t->yield_left + (t->countdown > 0 ? (uint64_t)t->countdown : 0);
}

/* The load, to the executor's slot of the statistics segment, for readers
 * anywhere (seed 003: "any executor may inspect another executor's load
 * statistics at any time").  Relaxed: statistics; a reader may pair a new
 * load with an old idle stamp for one read. */
static void publish(struct cbcmn__exec *e, struct cbcmn__awheel *aw, bool empty)
{
	struct cbcmn__seg_actors *s = &e->ss->act;
	atomic_store_explicit(&s->load_nominal_ns, (uint64_t)CBCMN__WHEEL_SEGS * aw->w.quantum_ns,
			      memory_order_relaxed);
	atomic_store_explicit(&s->load_milli, aw->w.load_milli, memory_order_relaxed);
	/* Empty: readers decay the load from the start of the turn under way
	 * (watch.c), as the wheel itself will when it is next used. */
	atomic_store_explicit(&s->load_idle_since, empty ? aw->w.turn_start : 0,
			      memory_order_relaxed);
	atomic_store_explicit(&s->load_at, aw->w.turn_start, memory_order_relaxed);
	aw->idle_published = empty;
	aw->turns_published = aw->w.turns;
}

/* e's wheel, made on first use; NULL without memory (the actor is then
 * scheduled as a plain task: nothing fails). */
static struct cbcmn__awheel *wheel_get(struct cbcmn__exec *e)
{
	if (__builtin_expect(e->wheel != NULL, 1))
		return e->wheel;
	struct cbcmn__awheel *aw = cbcmn__malloc(sizeof(*aw));
	if (!aw)
		return NULL;
	uint32_t q = e->rt->cfg.yield_interval;
	cbcmn__wheel_init(&aw->w, q, clock_ns());
	aw->w.next_untimed = e->rt->lab; /* the lab's order: the seed's alone */
	aw->wheel_next = false;
	aw->idle_published = true;
	aw->turns_published = 0;
	aw->picked = NULL;
	aw->parked = NULL;
	aw->moved_turn = 0;
	aw->busy_turn = 0;
	aw->over_turn = 0;
	aw->over_ns = 0;
	e->wheel = aw;
	return aw;
}

/* A node is about to enter aw's wheel (now: the clock, 0 if not read yet):
 * an empty wheel first counts the time it stood empty as idle turns. */
static inline __attribute__((always_inline)) void entering(struct cbcmn__exec *e,
							    struct cbcmn__awheel *aw, uint64_t now)
{
	if (cbcmn__wheel_ready(&aw->w))
		return;
	cbcmn__wheel_idle(&aw->w, now ? now : clock_ns());
	aw->busy_turn = aw->w.turns;
	/* Published as take() publishes: at a turn's change, or the idle
	 * stamp to clear.  Not at every entry into the empty wheel (an
	 * actor's direct switch: every hop of a ring), whose only news then
	 * was the quantum's time, which take() leaves to the turn too. */
	if (aw->idle_published || aw->w.turns != aw->turns_published)
		publish(e, aw, false);
}

/* The wheel's next actor task, or NULL when it is empty.  now: the
 * clock, 0 if not read yet. */
static struct cbcmn_task *take(struct cbcmn__exec *e, struct cbcmn__awheel *aw, uint64_t now)
{
	uint32_t q;
	if (!now)
		now = clock_ns();
	struct cbcmn__wheel_node *n = cbcmn__wheel_pick(&aw->w, now, &q);
	if (!n) {
		if (!aw->idle_published)
			publish(e, aw, true);
		return NULL;
	}
	if (aw->w.turns != aw->turns_published)
		publish(e, aw, false);
	aw->wheel_next = false;
	aw->picked = node_actor(n);
	aw->picked_ns = now;
	cbcmn__actor_predict(aw->picked);
	return aw->picked->task;
}

struct cbcmn_task *cbcmn__actor_turn(struct cbcmn__exec *e)
{
	struct cbcmn__awheel *aw = e->wheel;
	if (!aw->wheel_next || !cbcmn__wheel_ready(&aw->w))
		return NULL;
	return take(e, aw, 0);
}

bool cbcmn__actor_wheel_ready(const struct cbcmn__exec *e)
{
	return e->wheel && cbcmn__wheel_ready(&e->wheel->w);
}

/* Look at migration this time?  One time in MIGRATE_EVERY, at random:
 * every 8th yield by count aliased with the wheel's round robin, which
 * yields its actors in a fixed cycle, so that the same few were always
 * the ones looked at (with 32 actors, 4 of them: found when those were
 * all posse members and nothing ever moved). */
_Static_assert(MIGRATE_EVERY == 8u, "look() draws 3 bits a look");
static inline __attribute__((always_inline)) bool look(struct cbcmn__exec *e)
{
	/* Never in the lab (nothing moves there), whose runs repeat only
	 * if its random draws do. */
	if (e->rt->lab)
		return false;
	/* One in 8: three fresh bits of a draw all zero, 10 looks a draw
	 * (its high 31 bits, a stop bit above those left): each look as
	 * likely and as independent as a draw of its own, which cost every
	 * wake admitted about 20 instructions (docs/BENCHMARKS.md,
	 * "Twenty-third session, the hop's instructions"). */
	uint32_t b = e->look_bits;
	if (b < 8)
		b = (uint32_t)(cbcmn__rng_next(&e->rng) >> 33) | (uint32_t)1 << 31;
	e->look_bits = b >> 3;
	return (b & 7) == 0;
}

/* Should actor task t, ready on e, go to a less loaded executor (seed 003
 * "Actor migration")?  That executor, or NULL.  Pinned actors and posse
 * members never move; the lab's runs must repeat.  Our own load first,
 * the actor's fields after it: a->posse and a->moved_ns lie on lines of
 * the actor's slot (two: 0x10c, 0x198) that a hop does not touch
 * otherwise, and admit() asks here for one woken actor in
 * MIGRATE_EVERY; read before the load (which a token passed round a ring
 * of 10 000 actors keeps near 0), a->posse's line was a cold miss every 8th hop of a ring with a second executor, the
 * hop's largest cost the one-executor ring did not pay (it stops at
 * nlive; pinned actors at the task's flags, on its hot line): docs/
 * BENCHMARKS.md, "Twenty-third session, the second executor's cost". */
static struct cbcmn__exec *move_to(struct cbcmn__exec *e, struct cbcmn__awheel *aw,
				   const struct cbcmn__actor *a, const struct cbcmn_task *t,
				   uint64_t now)
{
	struct cbcmn_runtime *rt = e->rt;
	uint32_t nlive = cbcmn__nlive(rt);
	if (nlive < 2 || rt->lab || (t->flags & CBCMN__TF_PINNED))
		return NULL;
	uint64_t self = aw->w.load_milli, nominal = (uint64_t)CBCMN__WHEEL_SEGS * aw->w.quantum_ns;
	if (self <= MIGRATE_MIN_LOAD) {
		aw->over_turn = 0; /* not overloaded: a later move starts over */
		return NULL;
	}
	if (a->posse)
		return NULL;
	if (aw->w.turns < aw->busy_turn + MIGRATE_WARM_TURNS ||
	    (aw->moved_turn && aw->w.turns + 1 < aw->moved_turn + MIGRATE_GAP_TURNS) ||
	    (a->moved_ns && cbcmn__ns_since(now, a->moved_ns) < MIGRATE_REST * nominal))
		return NULL;
	/* One executor at random (the lookup array, seed 003). */
	uint32_t id = cbcmn__rng_below(&e->rng, nlive - 1);
	struct cbcmn__exec *o = rt->exec[id >= e->id ? id + 1 : id];
	/* The spare stands in for a stalled executor a while: no home. */
	if (atomic_load_explicit(&o->lstate, memory_order_relaxed) != CBCMN__EX_RUNNING ||
	    cbcmn__is_spare(o))
		return NULL;
	const struct cbcmn__seg_actors *oa = &o->ss->act;
	uint64_t other = cbcmn__seg_actor_load(oa, now);
	/* Busy, but its last turn ended longer ago than four of its turns
	 * (at its own load) take: its thread is not running (descheduled, its
	 * cgroup throttled), its figure is stale, and its actors get no CPU
	 * either: sending more there would not help.  Measured: without this,
	 * a balanced start went 39/9 while one executor stood still. */
	uint64_t at = atomic_load_explicit(&oa->load_at, memory_order_relaxed);
	uint64_t onom = atomic_load_explicit(&oa->load_nominal_ns, memory_order_relaxed);
	if (at && onom && !atomic_load_explicit(&oa->load_idle_since, memory_order_relaxed) &&
	    cbcmn__ns_since(now, at) > 4 * onom * (other > 1000 ? other : 1000) / 1000)
		return NULL;
	if (self * 2 <= other * 3) {
		aw->over_turn = 0;
		return NULL; /* within a half: no move (hysteresis) */
	}
	/* Overloaded against o: a move only if we were at our first such
	 * look at least MIGRATE_GAP_TURNS turns and MIGRATE_PERSIST_NS ago
	 * and at every look since (a lasting load, not a few odd turns:
	 * measured, the residue of noise that still moved one actor in some
	 * 1.5 s runs of a balanced runtime). */
	if (!aw->over_turn) {
		aw->over_turn = aw->w.turns + 1;
		aw->over_ns = now;
		return NULL;
	}
	if (aw->w.turns + 1 < aw->over_turn + MIGRATE_GAP_TURNS ||
	    cbcmn__ns_since(now, aw->over_ns) < MIGRATE_PERSIST_NS)
		return NULL;
	return o;
}

/* Hand actor task t over to o through the lanes (case: 1 or 3, for the
 * probe).  True: it is on its way there; false: the lane is full. */
static bool hand_over(struct cbcmn__exec *e, struct cbcmn__awheel *aw, struct cbcmn__actor *a,
		      struct cbcmn_task *t, struct cbcmn__exec *o, uint64_t now, uint32_t why)
{
	/* Its owner from now on, so that the wake there does not send it
	 * back home (cbcmn__schedule()); a ready task in flight is read by
	 * no one else, and the lane orders these writes before its taker.
	 * Case 1 enters o's wheel N segments forward (seed); a woken one
	 * as any arrival, in the next segment. */
	a->migrated = why == 1;
	a->moved_ns = now;
	a->park_exec = 0;
	t->exec = o;
	if (cbcmn__xmsg_send(e, o->id, CBCMN__XM_WAKE, t, NULL, NULL) != 0) {
		t->exec = e; /* the lane is full: it stays */
		a->migrated = false;
		return false;
	}
	aw->moved_turn = aw->w.turns + 1;
	/* The 8 turns start over, the wall time does not: a lasting
	 * overload sheds one actor per MIGRATE_GAP_TURNS, as before the
	 * 50 ms (32 actors to an idle executor: 16 moves). */
	aw->over_turn = aw->w.turns + 1;
	atomic_fetch_add_explicit(&e->ss->act.migrations, 1, memory_order_relaxed);
	CBCMN_PROBE5(actor_migrate, a->ref, e->id, o->id, why, e->rt->seg.rt_id);
	return true;
}

/* Actor task t just used its whole quantum on e (the seed's first case):
 * hand it to a random other executor if ours is overloaded against it.
 * True: it is on its way there. */
static bool migrate(struct cbcmn__exec *e, struct cbcmn__awheel *aw, struct cbcmn__actor *a,
		    struct cbcmn_task *t, uint64_t now)
{
	if (!look(e))
		return false;
	struct cbcmn__exec *o = move_to(e, aw, a, t, now);
	return o && hand_over(e, aw, a, t, o, now, 1);
}

/* admit()'s look at migration for t's actor a, woken after a wait (the
 * seed's third case: an idle actor that just became runnable, cold
 * anyway): it may go where the load is lower instead, looked at as a
 * yield is (look()).  True: handed over, on its way there.  *now: the
 * clock, read here if 0 and needed. */
static __attribute__((noinline)) bool admit_move(struct cbcmn__exec *e, struct cbcmn__awheel *aw,
						 struct cbcmn__actor *a, struct cbcmn_task *t,
						 uint64_t *now)
{
	if (!*now)
		*now = clock_ns();
	struct cbcmn__exec *o = move_to(e, aw, a, t, *now);
	return o && hand_over(e, aw, a, t, o, *now, 3);
}

static inline __attribute__((always_inline)) bool admit_moved(struct cbcmn__exec *e,
							      struct cbcmn__awheel *aw,
							      struct cbcmn__actor *a,
							      struct cbcmn_task *t, uint64_t *now)
{
	return a->park_exec && !a->migrated && look(e) && admit_move(e, aw, a, t, now);
}

/* admit()'s entry into aw's wheel, after the look. */
static void admit_rest(struct cbcmn__exec *e, struct cbcmn__awheel *aw, struct cbcmn__actor *a,
		       struct cbcmn_task *t, uint64_t now)
{
	entering(e, aw, now);
	a->task = t;
	if (a->migrated)
		cbcmn__wheel_ran(&aw->w, &a->wn, aw->w.quantum); /* seed: N forward */
	else if (a->park_exec == e->id + 1)
		cbcmn__wheel_woken(&aw->w, &a->wn, a->park_due, a->park_left);
	else if (a->fresh && cbcmn__actor_home(a) == e->id)
		cbcmn__wheel_next(&aw->w, &a->wn); /* spawned here: the next place */
	else
		cbcmn__wheel_ran(&aw->w, &a->wn, 0); /* new, or from elsewhere: next segment */
	a->park_exec = 0;
	a->migrated = false;
	a->fresh = false;
}

/* cbcmn__actor_admit() on aw; now: the clock, 0 if not read yet. */
static void admit(struct cbcmn__exec *e, struct cbcmn__awheel *aw, struct cbcmn_task *t,
		  uint64_t now)
{
	struct cbcmn__actor *a = t->arg;
	if (admit_moved(e, aw, a, t, &now))
		return; /* taken care of: on its way there */
	admit_rest(e, aw, a, t, now);
}

bool cbcmn__actor_admit(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	struct cbcmn__awheel *aw = wheel_get(e);
	if (!aw)
		return false;
	admit(e, aw, t, 0);
	return true;
}

struct cbcmn_task *cbcmn__actor_after(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	struct cbcmn__awheel *aw = e->wheel;
	if (t) {
		aw->wheel_next = true;
		return t;
	}
	return take(e, aw, 0);
}

static inline void run_begin(struct cbcmn__exec *e, struct cbcmn__actor *a,
			     const struct cbcmn_task *t)
{
	struct cbcmn__awheel *aw = e->wheel;
	a->run_left = quantum_left(t);
	if (aw && aw->picked == a) {
		a->run_t0 = aw->picked_ns; /* just read by the pick */
		aw->picked = NULL;
	} else {
		a->run_t0 = clock_ns();
	}
}

/* Actor task t begins a run on e: its home moves here if it was
 * elsewhere (only the executor that runs it moves it: no lock unless it
 * moved), then its quantum left and the clock (run_begin()).  Here, not
 * in actor.c: one call a run, not two. */
void cbcmn__actor_run(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	struct cbcmn__actor *a = t->arg;
	if (__builtin_expect(cbcmn__actor_home(a) != e->id, 0))
		cbcmn__actor_home_here(a, e);
	atomic_store_explicit(&e->ss->act.running, 1, memory_order_relaxed);
	a->fresh = false; /* ran unadmitted (no wheel): new no longer */
	run_begin(e, a, t);
}

/* What a's run that ends now used of its quantum, and how long it took
 * (the wheel learns the quantum's time from it). */
static uint32_t run_end(struct cbcmn__awheel *aw, struct cbcmn__actor *a,
			const struct cbcmn_task *t, uint64_t now)
{
	uint64_t left = quantum_left(t), used;
	/* The fairness yield (budget.c) has just opened the next quantum
	 * (yield_left back at the interval, the countdown spent): it ran
	 * all it had. */
	if (t->yield_left >= aw->w.quantum && t->countdown <= 0)
		used = a->run_left;
	else
		used = left < a->run_left ? a->run_left - left : 0;
	if (used > aw->w.quantum)
		used = aw->w.quantum;
	cbcmn__wheel_timed(&aw->w, (uint32_t)used, cbcmn__ns_since(now, a->run_t0));
	return (uint32_t)used;
}

bool cbcmn__actor_yielded(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	struct cbcmn__awheel *aw = wheel_get(e);
	if (!aw)
		return false;
	struct cbcmn__actor *a = t->arg;
	uint64_t now = clock_ns();
	run_end(aw, a, t, now);
	if (migrate(e, aw, a, t, now))
		return true;
	/* Company here (another actor on the wheel, plain tasks) while an
	 * executor idles: the inject queue, as a plain yielder with company
	 * (sched.c), where an idle executor takes it.  Migration waits for a
	 * load above nominal, and two actors computing on one executor would
	 * share it for good while another slept.  N forward where it lands:
	 * it used its turn.  Counted as a migration: it leaves for an idle
	 * executor (unless ours takes the inject queue first).  Posse
	 * members stay, as from migration. */
	if (!a->posse && cbcmn__yield_elsewhere(e, t)) {
		a->park_exec = 0;
		a->migrated = true;
		atomic_fetch_add_explicit(&e->ss->act.migrations, 1, memory_order_relaxed);
		/* Case 4, to no executor yet (-1): every count has its probe. */
		CBCMN_PROBE5(actor_migrate, a->ref, e->id, -1, 4, e->rt->seg.rt_id);
		return false;
	}
	entering(e, aw, now);
	a->task = t;
	a->park_exec = 0;
	/* Runnable (seed 003): it used its whole quantum, N forward.  An
	 * explicit cbcmn_yield() gives up the rest of its turn likewise. */
	cbcmn__wheel_ran(&aw->w, &a->wn, aw->w.quantum);
	return true;
}

bool cbcmn__actor_wheel_busy(const struct cbcmn__exec *e)
{
	return cbcmn__wheel_ready(&e->wheel->w);
}

/* Actor a's task t blocks on e after a run that ends now. */
static void park(struct cbcmn__exec *e, struct cbcmn__awheel *aw, struct cbcmn__actor *a,
		 const struct cbcmn_task *t, uint64_t now)
{
	uint32_t used = run_end(aw, a, t, now);
	/* Idle (seed 003): due N x (fraction used) forward, keeping the rest. */
	a->park_due = cbcmn__wheel_parked(&aw->w, used);
	a->park_left = aw->w.quantum - used;
	a->park_exec = e->id + 1;
	/* Where it resumes, for its next sender to prefetch (actor_mbox.c,
	 * sending()): its saved stack pointer is its last block's until the
	 * switch (cbcmn__actor_direct() parks it before; the system stack's
	 * park has saved it), the same frame when it blocks where it blocked
	 * before (a receive loop). */
	atomic_store_explicit(&a->hint_task, (void *)t, memory_order_relaxed);
	atomic_store_explicit(&a->hint_sp, cbcmn__actor_resume_hint(a, t->sp),
			      memory_order_relaxed);
}

void cbcmn__actor_parks(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	cbcmn__actor_waits(e, 1);
	struct cbcmn__awheel *aw = wheel_get(e);
	struct cbcmn__actor *a = t->arg;
	if (!aw) {
		a->park_exec = 0;
		return;
	}
	if (aw->parked == a) {
		aw->parked = NULL; /* parked already: cbcmn__actor_direct() */
		return;
	}
	park(e, aw, a, t, clock_ns());
}

/* What the loop would do between t's block and n's run, its wheel part:
 * t parks, n enters the (empty) wheel and is its pick, with one clock
 * read for the three, where the loop read it for each (the clock was 9 %
 * of the fiber ring's samples: docs/BENCHMARKS.md).  t's park is done
 * here, while t is still on its stack: only its own fields, which its
 * waker reads once run_post() has published it blocked.  The gate is ours
 * meanwhile, as in the loop (a stall's rescue waits): the caller closed
 * it (sched.c, actor_direct(), which took n under it) and opens it. */
bool cbcmn__actor_direct(struct cbcmn__exec *e, struct cbcmn_task *t, struct cbcmn_task *n)
{
	struct cbcmn__awheel *aw = e->wheel;
	struct cbcmn__actor *a = t->arg;
	uint64_t now = clock_ns();
	park(e, aw, a, t, now);
	aw->parked = a;
	struct cbcmn__actor *b = n->arg;
	/* Woken after a wait here, not migrated, the wheel empty: admit()
	 * and take() in one, the wheel's steps without its lists
	 * (cbcmn__wheel_woken_pick()), the rest as they do it.  Without
	 * admit()'s migration look (admit_moved()): its move needs our load
	 * above nominal (MIGRATE_MIN_LOAD), and a wheel empty at the switch
	 * has counted the time it stood empty as idle turns (entering()):
	 * in 2.1 million such switches (test_actor_sched, test_actor_direct,
	 * cbcmn-bench actors) and 6 million more of a ping-pong beside a
	 * plain hog, the load read above nominal at none, and no test failed
	 * without the look (rvdiet23).  An overload that lasts goes through
	 * the loop's admit(), which looks: the slot's runs are capped
	 * (SLOT_RUNS_MAX) beside other work, and every LOAD_WINDOW_PICKS
	 * picks take the loop (sched.c, loop_idle()). */
	if (b->park_exec == e->id + 1 && !b->migrated && !cbcmn__wheel_ready(&aw->w)) {
		entering(e, aw, now);
		b->task = n;
		uint32_t q;
		cbcmn__wheel_woken_pick(&aw->w, &b->wn, b->park_due, b->park_left, now, &q);
		b->park_exec = 0;
		if (aw->w.turns != aw->turns_published)
			publish(e, aw, false);
		aw->wheel_next = false;
		aw->picked = b;
		aw->picked_ns = now;
		cbcmn__actor_predict(b);
		return true;
	}
	admit(e, aw, n, now);
	/* n alone on the wheel, unless a migration handed it over. */
	return cbcmn__wheel_ready(&aw->w) && take(e, aw, now) == n;
}

/* ---- a stalled executor's wheel (monitor.c) ------------------------------------ */

/* The wheel is owner-only, and a stall holds its owner in one run: the
 * actors on it waited for the run to end, for ever if the run waited for
 * one of them (a task blocked in read() on a pipe an actor there was to
 * write: docs/ACTORS.md "Stalls").  So the owner lets go of its wheel for
 * the length of each run (wheel_gate: OWNER -> OUT before the switch to the
 * task, back after it), and the stall monitor may take it meanwhile (OUT ->
 * RESCUE -> OUT) to move the actors elsewhere.  Cost: a store and a
 * compare-and-swap per run, on executors with a wheel only. */
void cbcmn__wheel_gate_wait(struct cbcmn__exec *e)
{
	for (;;) {
		uint32_t s = CBCMN__GATE_OUT;
		/* acquire: pairs with the rescuer's release of the gate (what
		 * it took off the wheel is ours to see).  OWNER already: a new
		 * thread taking over, whose predecessor closed it. */
		if (atomic_compare_exchange_weak_explicit(&e->wheel_gate, &s, CBCMN__GATE_OWNER,
							  memory_order_acquire, memory_order_relaxed) ||
		    s == CBCMN__GATE_OWNER)
			return;
		/* RESCUE: one walk of the wheel, no lock, no call out. */
		cbcmn__cpu_relax();
	}
}

/* Pinned actors and posse members stay, as from migration (and as a
 * stalled executor's pinned tasks do: docs/SCHEDULER.md "Stalls"). */
static bool rescuable(struct cbcmn__wheel_node *n)
{
	const struct cbcmn__actor *a = node_actor(n);
	return !(a->task->flags & CBCMN__TF_PINNED) && !a->posse;
}

/* Schedule the actors of list l (taken off a wheel by
 * cbcmn__wheel_take_if()) elsewhere; how many.  inject: to the inject
 * queue, whatever their home (the spare's own, which would send them
 * back to it); else as a wake from outside the runtime, which sends a
 * stalled executor's to the inject queue too (cbcmn__schedule()). */
static uint32_t release(struct cbcmn_runtime *rt, struct cbcmn__wheel_node *l, bool inject)
{
	uint32_t moved = 0;
	while (l) {
		struct cbcmn__wheel_node *next = l->next; /* before it is anyone's */
		struct cbcmn__actor *a = node_actor(l);
		struct cbcmn_task *t = a->task;
		/* It enters the wheel of whoever picks it as a new actor. */
		a->park_exec = 0;
		a->migrated = false;
		/* From no executor, unpinned: the inject queue (sched.c). */
		if (t->sp && !inject)
			cbcmn__schedule(rt, t, NULL);
		else
			cbcmn__schedule_new(rt, t, NULL);
		moved++;
		l = next;
	}
	return moved;
}

uint32_t cbcmn__actor_wheel_rescue(struct cbcmn__exec *x)
{
	uint32_t s = CBCMN__GATE_OUT;
	/* acquire: pairs with cbcmn__wheel_gate_open()'s release. */
	if (!atomic_compare_exchange_strong_explicit(&x->wheel_gate, &s, CBCMN__GATE_RESCUE,
						     memory_order_acquire, memory_order_relaxed))
		return 0; /* the owner holds it: the run has just ended */
	struct cbcmn__awheel *aw = x->wheel;
	struct cbcmn__wheel_node *l = aw ? cbcmn__wheel_take_if(&aw->w, rescuable) : NULL;
	CBCMN__PAUSE(CBCMN__P_WHEEL_RESCUE, x);
	/* release: pairs with cbcmn__wheel_gate_close()'s acquire.  The
	 * nodes taken are no longer on the wheel: the owner never looks at
	 * them again. */
	atomic_store_explicit(&x->wheel_gate, CBCMN__GATE_OUT, memory_order_release);
	return release(x->rt, l, false);
}

/* The spare off duty (sched.c, spare_off_turn()): "what it holds that may
 * run elsewhere goes to the inject queue" (docs/SCHEDULER.md), its wheel's
 * actors too.  They came to it from a stalled executor's wheel (the
 * rescue above) or from the inject queue while it was on duty; kept, the
 * last one of them (no company to yield to an idle executor with) ran on
 * it for as long as it computed: an executor more than `workers` for
 * good.  Pinned actors and posse members stay, as from migration.  The
 * owner's own wheel: no gate.  How many moved. */
uint32_t cbcmn__actor_wheel_forward(struct cbcmn__exec *e)
{
	struct cbcmn__awheel *aw = e->wheel;
	return aw ? release(e->rt, cbcmn__wheel_take_if(&aw->w, rescuable), true) : 0;
}
