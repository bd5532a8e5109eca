/* budget.c: task budgets (SPEC-021 §5): charging, the checkpoint slow path,
 * exhaustion, recharge, and the nursery giving up on exhausted children.
 *
 * A task's budget is owned by the task: charging is plain arithmetic, and
 * ops are counted down inline by CBCMN_CHECKPOINT() in a window of at most
 * yield_interval.  Budget given to a task by others (what its children did
 * not use, recharges) arrives in its atomic refund counters and is folded
 * in when a cost cannot be paid.  CBCMN_UNLIMITED components never change.
 *
 * Refunds go back to whoever paid (t->payer, the spawner): when a child
 * ends, what it did not use and its stack's charge go to its payer's
 * refund counters, under the payer's budget lock (striped per runtime), and
 * wake the payer if it waits for budget.  A task closes its counters when
 * it ends, under the same lock: what arrives later passes on to its own
 * payer, so nothing is given to a task that has ended.
 *
 * Exhaustion: a task that cannot pay waits on its nursery's list of
 * exhausted children (an interruptible wait, so cancellation ends it too).
 * A recharge or a refund wakes it.  It counts as exhausted for its opener
 * only while no child it paid for is still running (one that is will give
 * back when it ends): when every child the opener still awaits is
 * exhausted, await_all ends them: they unwind to their landing pad and end
 * with CBCMN_EBUDGET.
 */
#include <errno.h>
#include <stdlib.h>

#include "iwait.h"
#include "runtime.h"

#define U CBCMN_UNLIMITED

static inline uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > U - b ? U : a + b;
}

static inline uint64_t *field(struct cbcmn_task *t, int comp)
{
	switch (comp) {
	case CBCMN__B_MEMORY:
		return &t->memory;
	case CBCMN__B_SPAWN:
		return &t->spawn_count;
	case CBCMN__B_CHANNEL:
		return &t->channel_ops;
	case CBCMN__B_SYSCALLS:
		return &t->syscalls;
	default:
		return &t->ops;
	}
}

/* The lock that orders budget given to t against t's end. */
static struct cbcmn__mutex *budget_lock(const struct cbcmn_task *t)
{
	return &t->rt->budget_locks[t->id % CBCMN__BUDGET_LOCKS];
}

/* Add v to t's incoming component c, saturating at CBCMN_UNLIMITED (a
 * recharge to unlimited with a refund pending must not wrap).  release:
 * pairs with the acquire exchange in fold_refunds(). */
static void refund_add(struct cbcmn_task *t, int c, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(&t->refund[c], memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(&t->refund[c], &cur, sat_add(cur, v),
						      memory_order_release, memory_order_relaxed))
		;
}

static uint64_t interval(const struct cbcmn_task *t)
{
	return t->rt->cfg.yield_interval;
}

/* Open a new countdown window from ops and yield_left. */
static void refill_window(struct cbcmn_task *t)
{
	uint64_t w = t->yield_left < t->ops ? t->yield_left : t->ops;
	if (t->ops != U)
		t->ops -= w;
	t->yield_left -= w;
	t->countdown = (int64_t)w;
}

/* An unlimited task (runtime.h: inline on the fork-join spawn). */
static inline void set_unlimited(struct cbcmn_task *t)
{
	cbcmn__budget_set_unlimited(t);
}

static void set_budget(struct cbcmn_task *t, const cbcmn_budget *b)
{
	t->ops = b->ops;
	t->memory = b->memory;
	t->spawn_count = b->spawn_count;
	t->channel_ops = b->channel_ops;
	t->syscalls = b->syscalls;
	t->limited = (b->ops & b->memory & b->spawn_count & b->channel_ops & b->syscalls) != U;
	t->yield_left = interval(t);
	refill_window(t);
}

void cbcmn__budget_init_root(struct cbcmn_task *t)
{
	set_budget(t, &t->rt->cfg.budget);
	t->caps = t->rt->cfg.caps.flags & (CBCMN_CAP_SPAWN | CBCMN_CAP_BUDGET);
	t->cap_limit = t->rt->cfg.caps.budget_limit;
}

static uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

void cbcmn__caps_grant(struct cbcmn_task *spawner, struct cbcmn_task *child, const cbcmn_caps *want)
{
	/* Never wider than the spawner's (SPEC-021 §10.2.4). */
	child->caps = spawner->caps;
	child->cap_limit = spawner->cap_limit;
	if (!want) {
		/* The CapBudget native implies while nothing is finite would
		 * recharge a child given a finite budget at its first
		 * exhaustion, to unlimited: its budget void (an actor with
		 * channel_ops = 301 made millions of sends).  Implied, it is
		 * not inherited where there is something finite to void; one
		 * the program granted is (docs/BUDGETS.md). */
		if (child->limited && child->rt->cap_budget_implicit)
			child->caps &= ~CBCMN_CAP_BUDGET;
		return;
	}
	child->caps &= want->flags;
	cbcmn_budget w;
	cbcmn__budget_defaults(&w, &want->budget_limit);
	child->cap_limit = (cbcmn_budget){
		.ops = min64(child->cap_limit.ops, w.ops),
		.memory = min64(child->cap_limit.memory, w.memory),
		.spawn_count = min64(child->cap_limit.spawn_count, w.spawn_count),
		.channel_ops = min64(child->cap_limit.channel_ops, w.channel_ops),
		.syscalls = min64(child->cap_limit.syscalls, w.syscalls),
	};
}

static uint64_t *cap_field(struct cbcmn_task *t, int comp)
{
	switch (comp) {
	case CBCMN__B_MEMORY:
		return &t->cap_limit.memory;
	case CBCMN__B_SPAWN:
		return &t->cap_limit.spawn_count;
	case CBCMN__B_CHANNEL:
		return &t->cap_limit.channel_ops;
	case CBCMN__B_SYSCALLS:
		return &t->cap_limit.syscalls;
	default:
		return &t->cap_limit.ops;
	}
}

void cbcmn__budget_init_unlimited(struct cbcmn_task *t)
{
	set_unlimited(t);
}

void cbcmn__budget_defaults(cbcmn_budget *out, const cbcmn_budget *in)
{
	/* Zero means unlimited (a zero budget would be exhausted at birth). */
	*out = (cbcmn_budget){
		.ops = in->ops ? in->ops : U,
		.memory = in->memory ? in->memory : U,
		.spawn_count = in->spawn_count ? in->spawn_count : U,
		.channel_ops = in->channel_ops ? in->channel_ops : U,
		.syscalls = in->syscalls ? in->syscalls : U,
	};
}

/* Take up to want of a component from the spawner. */
static uint64_t take(uint64_t *have, uint64_t want)
{
	if (*have == U)
		return want;
	uint64_t got = want < *have ? want : *have;
	*have -= got;
	return got;
}

int cbcmn__budget_draw(struct cbcmn_task *spawner, struct cbcmn_task *child, const cbcmn_budget *ask)
{
	/* The common case, and the one on every fork-join spawn: nothing is
	 * limited anywhere, so there is nothing to draw. */
	if (!ask && !spawner->limited && !child->rt->child_budget_limited) {
		set_unlimited(child);
		return 0;
	}
	/* The config's child_budget is resolved (runtime.c): literal, 0 is
	 * none.  A spawn's ask falls back to it component by component. */
	const cbcmn_budget *cfg = &child->rt->cfg.child_budget;
	cbcmn_budget want_buf;
	const cbcmn_budget *want = cfg;
	if (ask) {
		want_buf = (cbcmn_budget){
			.ops = ask->ops ? ask->ops : cfg->ops,
			.memory = ask->memory ? ask->memory : cfg->memory,
			.spawn_count = ask->spawn_count ? ask->spawn_count : cfg->spawn_count,
			.channel_ops = ask->channel_ops ? ask->channel_ops : cfg->channel_ops,
			.syscalls = ask->syscalls ? ask->syscalls : cfg->syscalls,
		};
		want = &want_buf;
	}
	/* Ops in the spawner's countdown window are its too: fold them back
	 * before taking, and open a new window after. */
	bool folded = spawner->ops != U && spawner->countdown > 0;
	if (folded) {
		spawner->ops += (uint64_t)spawner->countdown;
		spawner->yield_left += (uint64_t)spawner->countdown;
		spawner->countdown = 0;
	}
	uint64_t w[CBCMN__B_N] = {want->ops, want->memory, want->spawn_count, want->channel_ops,
				  want->syscalls};
	const uint64_t asked[CBCMN__B_N] = {ask ? ask->ops : 0, ask ? ask->memory : 0,
					    ask ? ask->spawn_count : 0, ask ? ask->channel_ops : 0,
					    ask ? ask->syscalls : 0};
	/* Native, a component the program left unset while the spawner's is
	 * finite: half of what the spawner has (its stack paid already), not
	 * all of it, so that the spawner can go on (docs/BUDGETS.md). */
	for (int c = 0; c < CBCMN__B_N; c++) {
		uint64_t have = *field(spawner, c);
		if ((child->rt->child_share >> c & 1) && !asked[c] && have != U)
			w[c] = have / 2;
	}
	cbcmn_budget b = {
		.ops = take(&spawner->ops, w[CBCMN__B_OPS]),
		.memory = take(&spawner->memory, w[CBCMN__B_MEMORY]),
		.spawn_count = take(&spawner->spawn_count, w[CBCMN__B_SPAWN]),
		.channel_ops = take(&spawner->channel_ops, w[CBCMN__B_CHANNEL]),
		.syscalls = take(&spawner->syscalls, w[CBCMN__B_SYSCALLS]),
	};
	set_budget(child, &b);
	if (folded)
		refill_window(spawner);
	return 0;
}

static void wake_budget_wait(struct cbcmn_task *o, bool if_mismatch, struct cbcmn__exec *e);

/* Hold a reference to t's payer until t's record is freed (task.c). */
static void hold_payer(struct cbcmn_task *t)
{
	/* Relaxed: the payer is alive (running, or the opener of t's
	 * nursery, which t has not left) and holds its own reference; the
	 * release of the last cbcmn__task_unref() orders the rest. */
	atomic_fetch_add_explicit(&t->payer->refs, 1, memory_order_relaxed);
	t->payer_ref = true;
	/* A refund may now pass through the payer once it has ended: it must
	 * then hold its own payer too, or the walk goes on to a record freed
	 * meanwhile.  Relaxed: written by the payer itself (a spawn), or by a
	 * child of its own nursery ending, before the release step of its
	 * live count that the payer's await_all acquires. */
	atomic_store_explicit(&t->payer->payer_held, true, memory_order_relaxed);
}

/* spawner paid child's draw or its stack: child gives back to it when it
 * ends.  A spawner that is not the opener of child's nursery may end
 * first: child holds its record (a refund reaching an ended spawner passes
 * on to the spawner's payer).  The opener outlives child; child takes a
 * reference to it only if something may pass through child after child
 * ends (cbcmn__budget_leftover()): no locked instruction on the fork-join
 * spawn.  Nothing is owed by a child of an unlimited spawner: unlimited
 * flows nowhere. */
void cbcmn__budget_payer(struct cbcmn_task *spawner, struct cbcmn_task *child,
			 struct cbcmn_task *opener)
{
	if (!child->stack_charge && !(child->limited && spawner->limited))
		return;
	/* Relaxed: decremented under spawner's budget lock (give()), read
	 * there or with acquire by spawner itself. */
	atomic_fetch_add_explicit(&spawner->owed, 1, memory_order_relaxed);
	/* Drawn spawns it may give back (an unlimited count is not drawn:
	 * the spawner's is unlimited too, and never waits). */
	child->gives_spawns = child->spawn_count && child->spawn_count != U;
	if (child->gives_spawns)
		atomic_fetch_add_explicit(&spawner->owed_spawns, 1, memory_order_relaxed);
	child->payer = spawner;
	if (spawner != opener)
		hold_payer(child);
}

/* A spawn paid for and then refused (closed or cancelled meanwhile, an ask
 * the spawner has not got, no memory for the record): nothing taken, the
 * op, the spawn and the stack come back.  The op goes back to the budget
 * (ops), not to the countdown window, whose fairness count keeps it: a
 * loop retrying a refused spawn still yields every yield_interval calls
 * (the yield costs nothing, SPEC-021 §4.2.2).  Below U - 1: a finite
 * budget never becomes unlimited. */
void cbcmn__budget_uncharge_spawn(struct cbcmn_task *t, uint64_t stack_charge)
{
	if (t->ops < U - 1)
		t->ops++;
	if (t->spawn_count != U)
		t->spawn_count++;
	cbcmn__refund_memory(t, stack_charge);
}

/* Give amount to o; once o has ended, to its payer instead, and so on up
 * (a root's payer is nobody: then it is dropped, as a root's budget came
 * from nobody).  Each task of the chain is alive: o is held by the child
 * that gives, every payer by the task it paid for.  ended: the ending
 * child whose payer o is (o is owed one child fewer), or NULL. */
static void give(struct cbcmn_task *o, const uint64_t amount[CBCMN__B_N],
		 const struct cbcmn_task *ended, struct cbcmn__exec *e)
{
	while (o) {
		struct cbcmn__mutex *bl = budget_lock(o);
		cbcmn__mutex_lock(bl);
		bool closed = o->budget_closed;
		if (!closed)
			for (int c = 0; c < CBCMN__B_N; c++)
				if (amount[c])
					refund_add(o, c, amount[c]);
		if (ended) {
			/* Relaxed: read under this lock (wait_exhausted()). */
			if (ended->gives_spawns)
				atomic_fetch_sub_explicit(&o->owed_spawns, 1,
							  memory_order_relaxed);
			/* After the refund: release pairs with the acquire in
			 * cbcmn__budget_leftover(), where o, seeing no child
			 * left, closes without this lock and must see it. */
			atomic_fetch_sub_explicit(&o->owed, 1, memory_order_release);
			ended = NULL;
		}
		if (!closed) {
			/* Waiting for budget: what arrived may be what it needs. */
			wake_budget_wait(o, false, e);
			cbcmn__mutex_unlock(bl);
			return;
		}
		struct cbcmn_task *next = o->payer;
		cbcmn__mutex_unlock(bl);
		o = next;
	}
}

/* t ends: close its incoming budget (what arrives later goes on to its
 * payer), and give what it did not use, with what its stack was charged,
 * back to its payer.  An unlimited task has nothing to give and nobody
 * owes it anything (so no lock on the fork-join path), except in the
 * cluster profile, where a supervisor may recharge it and must find it
 * closed once ended. */
void cbcmn__budget_leftover(struct cbcmn_task *t)
{
	if (!t->limited && t->rt->cfg.profile != CBCMN_PROFILE_CLUSTER)
		return;
	uint64_t in[CBCMN__B_N];
	/* Nobody can give t anything any more when no child it paid for is
	 * left (acquire: pairs with give()'s release, after the child's
	 * refund), nobody holds a handle to recharge it with, and no task
	 * holds it as its payer (nothing passes through it): then no lock,
	 * the common fork-join case. */
	bool held = atomic_load_explicit(&t->payer_held, memory_order_relaxed);
	bool alone = !(t->flags & CBCMN__TF_HANDLE) && !held &&
		     atomic_load_explicit(&t->owed, memory_order_acquire) == 0;
	struct cbcmn__mutex *bl = budget_lock(t);
	if (!alone)
		cbcmn__mutex_lock(bl);
	t->budget_closed = true;
	/* acquire: pairs with refund_add()'s release. */
	for (int c = 0; c < CBCMN__B_N; c++)
		in[c] = atomic_exchange_explicit(&t->refund[c], 0, memory_order_acquire);
	/* Children it paid for still run (in a nursery it did not open), or
	 * a task holds t as its payer (a refund from below may pass through
	 * it): what they give back passes through t to its payer, which must
	 * outlive t's record.  It is alive now (t's opener, t has not left
	 * its nursery, or held since the spawn). */
	if (!alone && t->payer && !t->payer_ref &&
	    (held || atomic_load_explicit(&t->owed, memory_order_relaxed)))
		hold_payer(t);
	if (!alone)
		cbcmn__mutex_unlock(bl);
	if (!t->payer)
		return; /* a root: its budget came from nobody */
	uint64_t left[CBCMN__B_N] = {
		[CBCMN__B_OPS] = t->ops == U ? U : t->ops + (t->countdown > 0 ? (uint64_t)t->countdown : 0),
		[CBCMN__B_MEMORY] = t->memory,
		[CBCMN__B_SPAWN] = t->spawn_count,
		[CBCMN__B_CHANNEL] = t->channel_ops,
		[CBCMN__B_SYSCALLS] = t->syscalls,
	};
	for (int c = 0; c < CBCMN__B_N; c++) {
		/* Unlimited flows nowhere: whoever gave it had unlimited.  A
		 * finite sum that overflows gives all but "unlimited". */
		left[c] = left[c] == U || in[c] == U ? 0 : sat_add(left[c], in[c]);
		if (left[c] == U)
			left[c] = U - 1;
	}
	left[CBCMN__B_MEMORY] = sat_add(left[CBCMN__B_MEMORY], t->stack_charge);
	give(t->payer, left, t, t->exec);
}

/* Fold incoming budget into t's own.  True if anything arrived. */
static bool fold_refunds(struct cbcmn_task *t)
{
	bool any = false;
	for (int c = 0; c < CBCMN__B_N; c++) {
		if (!atomic_load_explicit(&t->refund[c], memory_order_relaxed))
			continue;
		/* acquire: pairs with the release in cbcmn_budget_recharge(). */
		uint64_t v = atomic_exchange_explicit(&t->refund[c], 0, memory_order_acquire);
		uint64_t *f = field(t, c);
		*f = sat_add(*f, v);
		any = true;
	}
	return any;
}

/* Unwind t to its landing pad (sched.c), ending it with result. */
static __attribute__((noreturn)) void unwind(struct cbcmn_task *t, int64_t result)
{
	t->unwind_result = result;
	__builtin_longjmp(t->landing, 1);
}

/* Under n->lock: take iw off the exhausted list.  Whoever claims an
 * exhausted wait under the lock (recharge, a refund, the opener ending it)
 * takes it off at once, so the count the opener compares stays exact; a
 * wait that cancellation claimed is taken off by its task when it resumes.
 * A wait is counted (iw->user set) only while its task owes nothing to
 * come (wait_exhausted()). */
static bool exhausted_unlink(struct cbcmn_nursery *n, struct cbcmn__iwait *iw)
{
	for (struct cbcmn__iwait **pp = &n->exhausted; *pp; pp = &(*pp)->qnext) {
		if (*pp == iw) {
			*pp = iw->qnext;
			/* Relaxed: read under n->lock, or as a hint under the
			 * task's budget lock (wake_budget_wait()). */
			atomic_store_explicit(&iw->w.task->budget_iw, NULL, memory_order_relaxed);
			/* One fewer exhausted never settles the opener: no
			 * wake to check.  Relaxed: the opener's arming CAS
			 * compares the whole word. */
			if (iw->user)
				atomic_fetch_sub_explicit(&n->live, CBCMN__LIVE_EXH_ONE,
							  memory_order_relaxed);
			return true;
		}
	}
	return false;
}

/* Under t's budget lock: does t, waiting for component comp, count as
 * exhausted for its opener?  Not while a child it paid for, which could
 * give comp back, still runs (one waiting for budget itself gives nothing
 * until recharged).  Only a child drawn spawns can give spawns back.
 * Relaxed: these change under this lock, or grow at t's own spawns. */
static bool counts_exhausted(struct cbcmn_task *t, int comp)
{
	if (comp == CBCMN__B_SPAWN)
		return atomic_load_explicit(&t->owed_exh_spawns, memory_order_relaxed) >=
		       atomic_load_explicit(&t->owed_spawns, memory_order_relaxed);
	return atomic_load_explicit(&t->owed_exh, memory_order_relaxed) >=
	       atomic_load_explicit(&t->owed, memory_order_relaxed);
}

/* Under o's budget lock, o not ended (so its nursery is alive): wake o if
 * it waits for budget.  if_mismatch: only if it waits counted and should
 * not be, or the other way round (it then waits again as it should). */
static void wake_budget_wait(struct cbcmn_task *o, bool if_mismatch, struct cbcmn__exec *e)
{
	/* A hint: set under this lock, cleared under n->lock (looked at again
	 * there). */
	if (!atomic_load_explicit(&o->budget_iw, memory_order_relaxed))
		return;
	struct cbcmn_nursery *n = o->nursery;
	cbcmn__mutex_lock(&n->lock);
	struct cbcmn__iwait *iw = atomic_load_explicit(&o->budget_iw, memory_order_relaxed);
	bool counted = counts_exhausted(o, o->budget_comp);
	if (iw && (!if_mismatch || counted != (iw->user != NULL)) && cbcmn__iwait_claim(iw)) {
		exhausted_unlink(n, iw);
		cbcmn__iwait_wake(iw, e);
	}
	cbcmn__mutex_unlock(&n->lock);
}

/* t's counted wait began (delta 1) or ended (-1): its payer, if waiting,
 * may now have to count as exhausted, or stop counting. */
static void notify_payer(struct cbcmn_task *t, int delta)
{
	struct cbcmn_task *p = t->payer;
	if (!p)
		return;
	struct cbcmn__mutex *bl = budget_lock(p);
	cbcmn__mutex_lock(bl);
	/* Relaxed: read under this lock. */
	atomic_fetch_add_explicit(&p->owed_exh, (uint32_t)delta, memory_order_relaxed);
	if (t->gives_spawns)
		atomic_fetch_add_explicit(&p->owed_exh_spawns, (uint32_t)delta,
					  memory_order_relaxed);
	if (!p->budget_closed)
		wake_budget_wait(p, true, t->exec);
	cbcmn__mutex_unlock(bl);
}

/* CapBudget: refill component comp from the task's own limit, all that
 * is left of it.  True if anything came. */
static bool self_recharge(struct cbcmn_task *t, int comp)
{
	if (!(t->caps & CBCMN_CAP_BUDGET))
		return false;
	uint64_t *lim = cap_field(t, comp);
	if (*lim == 0)
		return false;
	uint64_t *f = field(t, comp);
	*f = sat_add(*f, *lim);
	if (*lim != U)
		*lim = 0;
	return true;
}

/* Under t's budget lock: is t's opener (a task, or NULL: a thread)
 * blocked joining t?  Only the opener may recharge t (recharge_locked()),
 * and it waits for t to end: t waiting counted would wait for ever
 * (nobody_recharges()).  Another joiner (a sibling, a thread of a task's
 * nursery) is not: the opener may still recharge t, or end it at its
 * await.  The waiter is alive: t has not ended, so its joiner waits.
 * The joiner registers before it takes this lock (cbcmn__budget_joined()),
 * so either t sees it here or the joiner sees t's listed wait there.
 * Acquire: pairs with the joiner's CAS in cbcmn_task_join(). */
static bool join_waits(const struct cbcmn_task *t)
{
	if (!(t->flags & CBCMN__TF_HANDLE))
		return false;
	struct cbcmn__waiter *w = atomic_load_explicit(&t->joiner, memory_order_acquire);
	return w && w != CBCMN__JOIN_DONE && w->task == t->opener;
}

/* Could anything but its own children (uncounted waits) recharge t?
 * cbcmn_budget_recharge() needs a handle to t, and none exists for an
 * actor's task, a handler actors' host (the API names actors by
 * reference) or a plain task spawned without one (handle NULL; every
 * janus ABI spawn): only a supervisor (n its nursery: poked below) tops
 * those up.  Such a task waiting counted would wait for its opener's
 * await_all to give up on it, which never comes while a sibling waits
 * for it (a message, a channel send: a ring hung its opener).  It ends
 * at once instead, as the opener would end it, with CBCMN_EBUDGET: SPEC-021
 * §14.1's "recharge or fail" where no recharge can come; its nursery then
 * cancels the siblings (fail fast).  docs/BUDGETS.md, "Exhaustion and
 * recharge". */
static bool nobody_recharges(const struct cbcmn_task *t, const struct cbcmn_nursery *n)
{
	bool actor = cbcmn__is_actor_task(t) ||
		     (!(t->flags & CBCMN__TF_ABI) && t->fn == cbcmn__hnd_host_main);
	return (actor || !(t->flags & CBCMN__TF_HANDLE) || join_waits(t)) &&
	       !cbcmn__sup_nursery(n);
}

/* t cannot pay: wait until budget arrives (a refund, a recharge), or t is
 * ended (its opener gives up on it, or cancellation).  While a child t paid
 * for still runs, t will get something back when it ends: t waits for that
 * without counting as exhausted, so its opener does not end it meanwhile
 * (SPEC-021 §14.1 "recharge or fail": its own children recharge it).  Once
 * every such child waits for budget too (or none is left), t counts.  For
 * a spawn (comp), only children drawn spawns count: the others have none
 * to give back, and waiting for them would hang a spawner whose children
 * wait for it (counts_exhausted()). */
static void wait_exhausted(struct cbcmn_task *t, int comp)
{
	struct cbcmn_nursery *n = t->nursery;
	if (!t->landing)
		abort(); /* every task runs below a landing pad (sched.c) */
	/* A halt never waits (cbcmn__task_halting()): nobody can recharge it
	 * there, and the halt goes on past the callback it ends. */
	if (cbcmn__task_in_halt(t))
		unwind(t, CBCMN_EBUDGET);
	struct cbcmn__iwait iw;
	struct cbcmn__mutex *bl = budget_lock(t);
	/* Under t's budget lock: a refund comes either before (folded here)
	 * or after, and then finds the wait listed (give()). */
	cbcmn__mutex_lock(bl);
	cbcmn__mutex_lock(&n->lock);
	if (fold_refunds(t)) {
		/* Budget landed meanwhile. */
		cbcmn__mutex_unlock(&n->lock);
		cbcmn__mutex_unlock(bl);
		return;
	}
	cbcmn__iwait_init(&iw, t);
	iw.kind = CBCMN__G_PARKED;
	t->budget_comp = (uint8_t)comp;
	bool counted = counts_exhausted(t, comp);
	/* Cancelled already: its wait would end at once (cbcmn__iwait_block()),
	 * cancelled, not failed by itself.  Ended here, before its wait is
	 * listed: a counted one could be claimed first by the opener giving
	 * up on it (cbcmn__budget_kill_exhausted()), CBCMN_EBUDGET by a race. */
	if (cbcmn__task_cancelled(t) || (counted && nobody_recharges(t, n))) {
		cbcmn__mutex_unlock(&n->lock);
		cbcmn__mutex_unlock(bl);
		unwind(t, cbcmn__task_cancelled(t) ? CBCMN_ECANCELED : CBCMN_EBUDGET);
	}
	iw.user = counted ? &iw : NULL;
	iw.qnext = n->exhausted;
	n->exhausted = &iw;
	atomic_store_explicit(&t->budget_iw, &iw, memory_order_relaxed);
	/* Counted under the lock, with the list; wakes the opener if every
	 * child it waits for is now exhausted. */
	if (counted)
		cbcmn__nursery_live_add(n, CBCMN__LIVE_EXH_ONE, t->exec);
	cbcmn__mutex_unlock(&n->lock);
	cbcmn__mutex_unlock(bl);
	if (counted) {
		notify_payer(t, 1);
		cbcmn__sup_exhausted(n, t->exec); /* a supervisor's child: it decides (actor_sup.c) */
	}

	uint32_t how = cbcmn__iwait_block(&iw);

	cbcmn__mutex_lock(&n->lock);
	exhausted_unlink(n, &iw);
	cbcmn__mutex_unlock(&n->lock);
	if (counted)
		notify_payer(t, -1);
	if (atomic_load_explicit(&t->killed, memory_order_acquire))
		unwind(t, CBCMN_EBUDGET);
	if (how == CBCMN__IW_CANCELLED)
		unwind(t, CBCMN_ECANCELED);
	fold_refunds(t);
}

/* Not on t's fiber: a cbcmn_blocking() function given t's context, while
 * t is parked waiting for it.  Waiting for budget, yielding or unwinding
 * would suspend or longjmp that thread as if it were t's fiber (a crash):
 * there a cost only counts, as a checkpoint does (cbcmn.h). */
static bool off_fiber(const struct cbcmn_task *t)
{
	return __builtin_expect(!cbcmn__is_running(t), 0);
}

void cbcmn__charge_slow(struct cbcmn_task *t, int comp, uint64_t amount)
{
	uint64_t *f = field(t, comp);
	if (off_fiber(t)) {
		/* What it cannot pay is spent to 0, and the rest is t's debt,
		 * which its cbcmn_blocking() call pays back on t's fiber
		 * (waiting, or ending t, there).  On a thread that runs no
		 * call of t's (a cx handed to a plain thread) it is lost. */
		if (!fold_refunds(t))
			(void)self_recharge(t, comp);
		if (*f == U || *f >= amount) {
			if (*f != U)
				*f -= amount;
			return;
		}
		uint64_t *debt = cbcmn__blocking_debt(t, comp);
		if (debt)
			*debt = sat_add(*debt, amount - *f);
		*f = 0;
		return;
	}
	while (*f != U && *f < amount) {
		if (!fold_refunds(t) && !self_recharge(t, comp))
			wait_exhausted(t, comp);
	}
	if (*f != U)
		*f -= amount;
}

void cbcmn__charge_off(struct cbcmn_task *t, int comp, uint64_t amount)
{
	/* The job this thread runs for t keeps the whole cost, its op
	 * included, for t to pay on its fiber (blocking.c's pay_debt()). */
	uint64_t *ops = cbcmn__blocking_debt(t, CBCMN__B_OPS);
	if (ops) {
		*ops = sat_add(*ops, 1);
		if (comp != CBCMN__B_OPS)
			*cbcmn__blocking_debt(t, comp) = sat_add(*cbcmn__blocking_debt(t, comp), amount);
		return;
	}
	/* A cx handed to a plain thread (misuse: t may be running): only
	 * count, the ops as a debt t's next window pays. */
	t->countdown--;
	if (comp != CBCMN__B_OPS)
		cbcmn__charge_slow(t, comp, amount);
}

void cbcmn__charge_ops(struct cbcmn_task *t, uint64_t n)
{
	/* Below 0: pay_window() pays it as a window's debt. */
	t->countdown -= n > INT64_MAX ? INT64_MAX : (int64_t)n;
	if (t->countdown <= 0)
		cbcmn__charge_window(t);
}

/* Memory the runtime allocates for t (a child's stack, a channel's
 * buffer): no op, only bytes.  Returns what was charged (0 when t's memory
 * is unlimited: nothing to give back later). */
uint64_t cbcmn__charge_memory(struct cbcmn_task *t, uint64_t amount)
{
	if (t->memory == U)
		return 0;
	if (t->memory >= amount)
		t->memory -= amount;
	else
		cbcmn__charge_slow(t, CBCMN__B_MEMORY, amount);
	/* Recharged to unlimited while it waited: nothing was taken. */
	return t->memory == U ? 0 : amount;
}

/* Give amount back to t, the running task that paid it. */
void cbcmn__refund_memory(struct cbcmn_task *t, uint64_t amount)
{
	if (t && amount)
		t->memory = sat_add(t->memory, amount);
}

/* Fairness: a full interval has run.  The yield costs nothing.  At every
 * window first: a sender that runs on leaves the actor it woke into the
 * slot to an idle executor (sched.c, owe_notify()). */
static void fairness_yield(struct cbcmn_task *t)
{
	cbcmn__notify_owed_check(cbcmn__tls_exec);
	if (t->yield_left == 0) {
		t->yield_left = interval(t);
		cbcmn_yield((cbcmn_cx *)t);
	}
}

/* The countdown ran out.  At 0 the window's last op paid the call that
 * got here; below 0 the call's op is still to pay (its window was empty):
 * pay it, waiting exhausted if need be.  Then open a new window if there
 * are ops for one; if not, stay at 0, and the next costed call comes back
 * here to pay for itself.  Waiting for the next op already would stop a
 * task at the call that spent its last one: n ops paid n - 1 calls. */
static void pay_window(struct cbcmn_task *t)
{
	uint64_t debt = t->countdown < 0 ? (uint64_t)-t->countdown : 0;
	t->countdown = 0;
	while (t->ops != U && t->ops < debt) {
		if (!fold_refunds(t) && !self_recharge(t, CBCMN__B_OPS))
			wait_exhausted(t, CBCMN__B_OPS);
	}
	if (t->ops != U)
		t->ops -= debt;
	t->yield_left -= debt < t->yield_left ? debt : t->yield_left;
	if (t->ops)
		refill_window(t);
}

/* A runtime call's charge ran the countdown out.  The call reports a
 * cancellation itself (its result): only CBCMN_CHECKPOINT() ends a task
 * for one. */
void cbcmn__charge_window(struct cbcmn_task *t)
{
	/* Off the fiber the countdown goes on below 0: the ops are t's debt,
	 * paid by its own next window (pay_window()). */
	if (off_fiber(t))
		return;
	fairness_yield(t);
	pay_window(t);
}

/* CBCMN_CHECKPOINT()'s slow path.  A cancelled task ends here (SPEC-021
 * §5.2.2 "Running -> Cancelled", §8.3.1): a loop of checkpoints has no
 * result to report it with, and a task that never looks would keep its
 * nursery's await_all waiting for ever.  It unwinds to its landing pad as an
 * exhausted task its nursery gave up on does, after the fairness yield
 * (where a cancellation from another thread is seen) and before paying: a
 * cancelled task is not stopped as BudgetExhausted. */
void cbcmn__checkpoint_slow(cbcmn_cx *cx)
{
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	/* Off t's fiber nothing is due: the countdown goes on below 0, a debt
	 * t's own next window pays, as a charge's there (setting it back to
	 * 0 wiped that debt out); t sees a cancellation then. */
	if (off_fiber(t))
		return;
	fairness_yield(t);
	if (cbcmn__task_interrupted(t))
		unwind(t, CBCMN_ECANCELED);
	pay_window(t);
}

/* What t has left now, its pending refunds folded in; ops count the
 * countdown window's rest. */
static cbcmn_budget budget_now(struct cbcmn_task *t)
{
	fold_refunds(t);
	return (cbcmn_budget){
		.ops = t->ops == U ? U : t->ops + (t->countdown > 0 ? (uint64_t)t->countdown : 0),
		.memory = t->memory,
		.spawn_count = t->spawn_count,
		.channel_ops = t->channel_ops,
		.syscalls = t->syscalls,
	};
}

int cbcmn_budget_get(cbcmn_cx *cx, cbcmn_budget *out)
{
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	if (!t || !out)
		return -EINVAL;
	*out = budget_now(t);
	return 0;
}

/* Cluster profile (SPEC-021 §10.2.3): an ancestor of t supervises it and
 * may recharge it.  The chain of openers is alive while t is. */
static bool supervises(const struct cbcmn_task *self, const struct cbcmn_task *t)
{
	if (t->rt->cfg.profile != CBCMN_PROFILE_CLUSTER)
		return false;
	for (const struct cbcmn_nursery *n = t->nursery; n; n = n->owner ? n->owner->nursery : NULL)
		if (n->owner == self)
			return true;
	return false;
}

static int recharge_self(struct cbcmn_task *self, const cbcmn_budget *amount)
{
	if (!(self->caps & CBCMN_CAP_BUDGET))
		return -EPERM;
	const uint64_t give[CBCMN__B_N] = {amount->ops, amount->memory, amount->spawn_count,
					   amount->channel_ops, amount->syscalls};
	for (int c = 0; c < CBCMN__B_N; c++)
		if (give[c] && *cap_field(self, c) != U && *cap_field(self, c) < give[c])
			return CBCMN_EBUDGET;
	for (int c = 0; c < CBCMN__B_N; c++) {
		if (!give[c])
			continue;
		uint64_t *lim = cap_field(self, c);
		if (*lim != U)
			*lim -= give[c];
		/* Through the refund counter, like any incoming budget. */
		refund_add(self, c, give[c]);
	}
	fold_refunds(self);
	if (self->ops && self->countdown <= 0)
		refill_window(self);
	return 0;
}

int cbcmn_caps_get(cbcmn_cx *cx, cbcmn_caps *out)
{
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	if (!t || !out)
		return -EINVAL;
	out->flags = t->caps;
	out->budget_limit = t->cap_limit;
	return 0;
}

/* Move amount from self to t, all or nothing.  Under t's budget lock:
 * t cannot end meanwhile, so its nursery (whose lock a wake takes) and the
 * chain of openers above it (supervises()) stay alive, and what is moved
 * reaches t before it ends and gives its leftovers back, or nothing moves.
 * t's record is alive: the caller holds its handle. */
static int recharge_locked(struct cbcmn_task *self, struct cbcmn_task *t, const uint64_t give[])
{
	/* Ended: its nursery may be gone.  A limited task (and any task in
	 * the cluster profile) is closed under this lock as it ends; an
	 * unlimited one needs nothing and never waits for budget, so its
	 * state is enough.  Only the parent may still ask, for the answer
	 * below. */
	bool done = t->budget_closed ||
		    atomic_load_explicit(&t->state, memory_order_acquire) == CBCMN__T_DONE;
	if (t->opener != self && (done || !supervises(self, t)))
		return -EPERM;
	/* All or nothing: check first, and before asking whether t has
	 * ended, so that the answer to "more than you have" does not depend
	 * on how fast t ran. */
	const cbcmn_budget have = budget_now(self);
	const uint64_t has[CBCMN__B_N] = {have.ops, have.memory, have.spawn_count,
					  have.channel_ops, have.syscalls};
	for (int c = 0; c < CBCMN__B_N; c++)
		if (give[c] && has[c] != U && has[c] < give[c])
			return CBCMN_EBUDGET;
	if (done)
		return 0; /* nothing to give it any more */
	for (int c = 0; c < CBCMN__B_N; c++) {
		if (!give[c])
			continue;
		if (c == CBCMN__B_OPS) {
			/* Ops may sit in the countdown window: take from ops
			 * first, then shrink the window. */
			uint64_t g = give[c];
			if (self->ops != U) {
				uint64_t a = g < self->ops ? g : self->ops;
				self->ops -= a;
				self->countdown -= (int64_t)(g - a);
			}
		} else {
			uint64_t *f = field(self, c);
			if (*f != U)
				*f -= give[c];
		}
		refund_add(t, c, give[c]);
	}
	/* Wake it if it waits for budget (an unlimited task never does). */
	if (t->limited)
		/* Off self's fiber (a cbcmn_blocking() function's): the
		 * inject queue (cbcmn__waker_here()). */
		wake_budget_wait(t, false, self->exec);
	return 0;
}

int cbcmn_budget_recharge(cbcmn_cx *cx, cbcmn_task *t, const cbcmn_budget *amount)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!self || !amount)
		return -EINVAL;
	cbcmn__stack_check(self);
	if (!t)
		return recharge_self(self, amount);
	if (t->rt != self->rt)
		return CBCMN_EWRONGRT;
	const uint64_t give[CBCMN__B_N] = {amount->ops, amount->memory, amount->spawn_count,
					   amount->channel_ops, amount->syscalls};
	struct cbcmn__mutex *bl = budget_lock(t);
	cbcmn__mutex_lock(bl);
	int rc = recharge_locked(self, t, give);
	cbcmn__mutex_unlock(bl);
	return rc;
}

int cbcmn__budget_recharge_exhausted(struct cbcmn_task *self, struct cbcmn_nursery *n,
				     const cbcmn_budget *amount, uint64_t *count)
{
	const uint64_t give[CBCMN__B_N] = {amount->ops, amount->memory, amount->spawn_count,
					   amount->channel_ops, amount->syscalls};
	*count = 0;
	/* Claimed under n->lock: each stays blocked, so alive, until we wake
	 * it.  The budget locks come after, as the lock order (a task's
	 * budget lock before n->lock, wait_exhausted()) wants. */
	struct cbcmn__iwait *mine = NULL;
	cbcmn__mutex_lock(&n->lock);
	for (struct cbcmn__iwait *iw = n->exhausted, *next; iw; iw = next) {
		next = iw->qnext;
		if (iw->user && cbcmn__iwait_claim(iw)) {
			exhausted_unlink(n, iw);
			iw->qnext = mine; /* ours alone once claimed */
			mine = iw;
		}
	}
	cbcmn__mutex_unlock(&n->lock);
	int rc = 0;
	while (mine) {
		struct cbcmn__iwait *iw = mine;
		mine = iw->qnext;
		struct cbcmn_task *t = iw->w.task;
		struct cbcmn__mutex *bl = budget_lock(t);
		cbcmn__mutex_lock(bl);
		/* Its budget_iw is clear (unlinked): no second wake there.
		 * Nothing of what it waits for (budget_comp, set under this
		 * lock): a top-up would only wake it to wait again, a spin. */
		int r = give[t->budget_comp] ? recharge_locked(self, t, give) : CBCMN_EBUDGET;
		cbcmn__mutex_unlock(bl);
		if (r) {
			/* We could not pay: ended, as the opener would.
			 * Relaxed: the wake below publishes it (release). */
			atomic_store_explicit(&t->killed, 1, memory_order_relaxed);
			rc = r;
		} else {
			(*count)++;
		}
		cbcmn__iwait_wake(iw, self->exec);
	}
	return rc;
}

/* Under n->lock, iw claimed: its task ends with CBCMN_EBUDGET as it
 * wakes (wait_exhausted()). */
static void end_exhausted(struct cbcmn_nursery *n, struct cbcmn__iwait *iw, struct cbcmn__exec *e)
{
	exhausted_unlink(n, iw);
	/* Relaxed: the wake below publishes it (release). */
	atomic_store_explicit(&iw->w.task->killed, 1, memory_order_relaxed);
	cbcmn__iwait_wake(iw, e);
}

void cbcmn__budget_joined(struct cbcmn_task *t, struct cbcmn__exec *e)
{
	/* Unlimited: it never waits for budget, and no lock on a plain join.
	 * Not its opener: the opener may still recharge it. */
	if (!t->limited || !join_waits(t))
		return;
	struct cbcmn__mutex *bl = budget_lock(t);
	cbcmn__mutex_lock(bl);
	/* Listed (set under this lock): t is blocked in wait_exhausted(), so
	 * its nursery is alive.  Not listed: t runs, or has ended, and sees
	 * the joiner at its next wait (join_waits()). */
	if (atomic_load_explicit(&t->budget_iw, memory_order_relaxed)) {
		struct cbcmn_nursery *n = t->nursery;
		cbcmn__mutex_lock(&n->lock);
		struct cbcmn__iwait *iw = atomic_load_explicit(&t->budget_iw, memory_order_relaxed);
		/* Counted only: an uncounted wait is owed a refund by its own
		 * children (it counts, and comes here again through
		 * wait_exhausted(), once they cannot give).  The claim decides
		 * against a recharge or a cancellation: one of them wins. */
		if (iw && iw->user && !cbcmn__sup_nursery(n) && cbcmn__iwait_claim(iw))
			end_exhausted(n, iw, e);
		cbcmn__mutex_unlock(&n->lock);
	}
	cbcmn__mutex_unlock(bl);
}

void cbcmn__budget_kill_exhausted(struct cbcmn_nursery *n)
{
	cbcmn__mutex_lock(&n->lock);
	struct cbcmn__iwait *iw = n->exhausted;
	while (iw) {
		struct cbcmn__iwait *next = iw->qnext;
		/* Only a wait we claim is ours to end: one a recharge or a
		 * cancellation claimed first goes its own way. */
		/* An uncounted wait is owed a refund: not the opener's to end
		 * (and the opener cannot be settled while one is listed). */
		if (iw->user && cbcmn__iwait_claim(iw))
			end_exhausted(n, iw, NULL);
		iw = next;
	}
	cbcmn__mutex_unlock(&n->lock);
}

void *cbcmn_alloc(cbcmn_cx *cx, size_t size)
{
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	if (!t) {
		errno = EINVAL;
		return NULL;
	}
	cbcmn__charge(t, CBCMN__B_MEMORY, size);
	return malloc(size);
}

void cbcmn_free(void *p)
{
	free(p);
}

/* Has t, a spawner, what ask asks for, component by component, after the
 * spawn's own costs (its op, its spawn, the child's stack)?  Folds in what
 * it is owed, and recharges from its CapBudget, first; never waits (a
 * request larger than anything still to come back would wait for ever).
 * 0 and CBCMN_UNLIMITED ask for no amount: the config's default, and "all
 * the spawner has" (docs/BUDGETS.md, "Where budgets come from"). */
bool cbcmn__budget_ask_fits(struct cbcmn_task *t, const cbcmn_budget *ask)
{
	const uint64_t a[CBCMN__B_N] = {ask->ops, ask->memory, ask->spawn_count, ask->channel_ops,
					ask->syscalls};
	fold_refunds(t);
	for (int c = 0; c < CBCMN__B_N; c++) {
		if (a[c] == 0 || a[c] == U)
			continue;
		uint64_t *f = field(t, c);
		/* Ops in the countdown window are the spawner's too (the draw
		 * folds them back). */
		uint64_t window = c == CBCMN__B_OPS && *f != U && t->countdown > 0
					  ? (uint64_t)t->countdown
					  : 0;
		if (*f != U && sat_add(*f, window) < a[c])
			self_recharge(t, c);
		if (*f != U && sat_add(*f, window) < a[c])
			return false;
	}
	return true;
}

/* ---- for the janus ABI (janus_rt.c), which must not wait ------------------ */

/* Could t pay one op and amount of comp now, without waiting?  Folds in what
 * it is owed and recharges from its CapBudget first, as a waiting charge
 * would (SPEC-021 §14.1 "recharge or fail"); never waits or yields. */
bool cbcmn__budget_can_pay(struct cbcmn_task *t, int comp, uint64_t amount)
{
	fold_refunds(t);
	/* A charge's op comes from the countdown, or from ops (pay_window()). */
	if (t->countdown <= 0 && t->ops == 0)
		self_recharge(t, CBCMN__B_OPS);
	uint64_t *f = field(t, comp);
	if (comp != CBCMN__B_OPS && *f != U && *f < amount)
		self_recharge(t, comp);
	return (t->countdown > 0 || t->ops > 0) && (comp == CBCMN__B_OPS || *f == U || *f >= amount);
}

/* Take n ops from t, down to zero, without waiting or yielding (SPEC-021
 * §11.1 Budget_Decrement): the countdown window first, then ops and the
 * fairness interval.  The next checkpoint then yields or waits as due. */
void cbcmn__budget_take_ops(struct cbcmn_task *t, uint64_t n)
{
	if (t->countdown > 0 && (uint64_t)t->countdown > n) {
		t->countdown -= (int64_t)n;
		return;
	}
	n -= t->countdown > 0 ? (uint64_t)t->countdown : 0;
	t->countdown = 0;
	if (t->ops != U)
		t->ops -= n < t->ops ? n : t->ops;
	t->yield_left -= n < t->yield_left ? n : t->yield_left;
}
