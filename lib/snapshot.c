/* snapshot.c: cbcmn_runtime_snapshot() and cbcmn_runtime_is_quiescent(), and
 * the gauges they read (diag.h).
 *
 * Seed 000 lists snapshot and is_quiescent as the cold operations that read
 * every arena.  cbcmn has no arena to lock and walk: each executor counts
 * what begins and ends on it (diag.h) and the reader sums, taking no lock.
 * Cost: O(executors) atomic loads per call.
 */
#include <errno.h>
#include <string.h>

#include "runtime.h"

uint32_t cbcmn__gauge_up(struct cbcmn_runtime *rt, struct cbcmn__exec *e, int g)
{
	/* Its single-writer share only on its own thread: e is the
	 * caller's task's executor, checked, not trusted (runtime.h,
	 * cbcmn__waker_here()). */
	if (cbcmn__waker_here(e)) {
		/* Relaxed: the end this begin pairs with is ordered after it
		 * by whatever hands the thing over (the task state CAS, the
		 * nursery's await, the owner's own program order). */
		cbcmn__diag_bump(&e->diag.up[g], memory_order_relaxed);
		return e->id;
	}
	atomic_fetch_add_explicit(&rt->diag_ext.up[g], 1, memory_order_relaxed);
	return CBCMN__DIAG_EXT;
}

void cbcmn__gauge_down(struct cbcmn_runtime *rt, struct cbcmn__exec *e, uint32_t home, int g)
{
	/* Release: pairs with the reader's acquire load of the end (below),
	 * so a reader that sees the end also sees the begin before it. */
	if (home == CBCMN__DIAG_EXT) {
		atomic_fetch_add_explicit(&rt->diag_ext.down_remote[g], 1, memory_order_release);
		return;
	}
	/* The single-writer store only on the home's own thread: a caller's
	 * e is its executor by convention (a waker), checked, not trusted.
	 * e is rt->exec[home] exactly when it is rt's and home is its id
	 * (a waker may be another runtime's executor): the common case (an
	 * inline child, a nursery closed where it opened) loads nothing from
	 * rt->exec[]. */
	if (cbcmn__waker_here(e) && home == e->id && e->rt == rt) {
		cbcmn__diag_bump(&e->diag.down[g], memory_order_release);
		return;
	}
	struct cbcmn__exec *h = rt->exec[home];
	atomic_fetch_add_explicit(&h->diag.down_remote[g], 1, memory_order_release);
}

/* What is open of gauge g in d.  Ends are read (acquire) between two reads
 * of the begins: if the begins did not move, begins - ends is the value at
 * the moment the ends were read (every end seen has its begin before it,
 * and none began meanwhile).  A reader preempted between its loads while
 * nurseries kept opening read begins from much later than its ends (211
 * nurseries "open" of at most 4).  After a few tries with begins moving,
 * the last read, an overestimate by what began during it. */
static uint64_t gauge_read(const struct cbcmn__diag *d, int g)
{
	uint64_t up = atomic_load_explicit(&d->up[g], memory_order_relaxed), down;
	for (int tries = 0;; tries++) {
		down = atomic_load_explicit(&d->down[g], memory_order_acquire) +
		       atomic_load_explicit(&d->down_remote[g], memory_order_acquire);
		uint64_t again = atomic_load_explicit(&d->up[g], memory_order_relaxed);
		if (again == up || tries == 8) {
			up = again;
			break;
		}
		up = again;
	}
	return up > down ? up - down : 0;
}

static void exec_fill(const struct cbcmn__diag *d, cbcmn_exec_snapshot *x)
{
	x->blocked_io = gauge_read(d, CBCMN__G_IO);
	x->blocked_timer = gauge_read(d, CBCMN__G_TIMER);
	x->blocked_chan = gauge_read(d, CBCMN__G_CHAN);
	x->blocked_join = gauge_read(d, CBCMN__G_JOIN);
	x->blocked_blocking = gauge_read(d, CBCMN__G_BLOCKING);
	x->blocked_other = gauge_read(d, CBCMN__G_OTHER);
	x->parked = gauge_read(d, CBCMN__G_PARKED);
	x->nurseries_open = gauge_read(d, CBCMN__G_NURSERY);
	x->obligations = gauge_read(d, CBCMN__G_OBLIG);
	x->running = atomic_load_explicit(&d->run_seq, memory_order_relaxed) & 1;
}

static void add(cbcmn_exec_snapshot *t, const cbcmn_exec_snapshot *x)
{
	t->running += x->running;
	t->blocked_io += x->blocked_io;
	t->blocked_timer += x->blocked_timer;
	t->blocked_chan += x->blocked_chan;
	t->blocked_join += x->blocked_join;
	t->blocked_blocking += x->blocked_blocking;
	t->blocked_other += x->blocked_other;
	t->parked += x->parked;
	t->nurseries_open += x->nurseries_open;
	t->obligations += x->obligations;
}

static uint64_t waiting(const cbcmn_exec_snapshot *x)
{
	return x->blocked_io + x->blocked_timer + x->blocked_chan + x->blocked_join +
	       x->blocked_blocking + x->blocked_other + x->parked;
}

/* Streams and acceptors open: kernel work in flight that no task may be
 * waiting for (a stream outlives the task that opened it). */
static uint64_t mshots_open(const struct cbcmn_runtime *rt)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < rt->nexec; i++)
		n += atomic_load_explicit(&rt->exec[i]->diag.mshots, memory_order_relaxed);
	return n;
}

static void fill(const struct cbcmn_runtime *rt, cbcmn_snapshot *out, cbcmn_exec_snapshot *per,
		 uint32_t nper)
{
	cbcmn_exec_snapshot *tot = &out->total;
	memset(tot, 0, sizeof(*tot));
	/* The gauges before tasks_live: a task counted blocked was live
	 * before (it ended after), so runnable below does not underflow
	 * for that reason; it may for a task caught mid-move (clamped). */
	for (uint32_t i = 0; i < rt->nexec; i++) {
		const struct cbcmn__exec *e = rt->exec[i];
		cbcmn_exec_snapshot x = {0};
		exec_fill(&e->diag, &x);
		x.state = atomic_load_explicit(&e->ss->state, memory_order_relaxed);
		x.runnable = cbcmn__exec_queue_depth(e);
		add(tot, &x);
		tot->state += x.state != CBCMN_EXEC_STOPPED;
		if (per && i < nper && i < cbcmn__nworkers(rt))
			per[i] = x; /* the spare: in the totals only */
	}
	cbcmn_exec_snapshot ext = {0};
	exec_fill(&rt->diag_ext, &ext);
	add(tot, &ext);
	out->executors = cbcmn__nworkers(rt); /* the spare's work is in the totals */
	out->executors_live = cbcmn__nlive(rt);
	out->tasks_live = cbcmn__seg_live_tasks(&rt->seg);
	uint64_t accounted = tot->running + waiting(tot);
	tot->runnable = out->tasks_live > accounted ? out->tasks_live - accounted : 0;
	out->nurseries_cancelled = atomic_load_explicit(&rt->cancels, memory_order_relaxed);
	out->obligations_leaked = atomic_load_explicit(&rt->oblig_leaked, memory_order_relaxed);
}

/* Ends before beginnings everywhere (gauge_read, and tasks: completions
 * before spawns in cbcmn__seg_live_tasks), so a zero means there was an
 * instant, during the call, when nothing was open. */
static bool quiescent(const struct cbcmn_runtime *rt, const cbcmn_snapshot *s)
{
	return s->tasks_live == 0 && s->total.nurseries_open == 0 && s->total.obligations == 0 &&
	       mshots_open(rt) == 0;
}

int cbcmn_runtime_snapshot(const cbcmn_runtime *rt, cbcmn_snapshot *out, cbcmn_exec_snapshot *per,
			   uint32_t nper)
{
	if (!rt || !out || (nper && !per))
		return -EINVAL;
	/* Versioned: a caller built against another layout gets -EINVAL,
	 * never a write past its struct. */
	if (out->size != sizeof(*out) || out->version != CBCMN_SNAPSHOT_VERSION)
		return -EINVAL;
	fill(rt, out, per, nper);
	out->quiescent = quiescent(rt, out);
	return 0;
}

int cbcmn_runtime_is_quiescent(const cbcmn_runtime *rt)
{
	if (!rt)
		return -EINVAL;
	cbcmn_snapshot s = {.size = sizeof(s), .version = CBCMN_SNAPSHOT_VERSION};
	fill(rt, &s, NULL, 0);
	return quiescent(rt, &s);
}
