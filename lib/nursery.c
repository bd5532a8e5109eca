/* nursery.c: structured concurrency scopes (SPEC-021 §8): open, await, cancel.
 *
 * Counting children without a locked instruction per spawn: live starts at
 * a large bias; the opener counts its own spawns in a plain field, other
 * spawners (descendants) add to live, and every child subtracts one when it
 * ends.  live cannot reach zero while the bias is in it.  await_all adds its
 * own count and removes the bias in one step, after which live is exactly
 * the number of children still running: whoever takes it to zero is the
 * last one to touch the nursery and wakes the opener (a child), or frees it
 * (the opener, when no child was left).  So a nursery is freed exactly when
 * nothing can reach it any more, without a lock or a reference count.
 *
 * Except from another thread: a thread that cancels n must know it is not
 * freed (or recycled into another nursery) under it, and it cannot know
 * when await_all returns.  It holds a reference (cbcmn_nursery_hold), and
 * await_all then leaves n to the last release, after marking it awaited
 * under n->lock, which a holder's cancel takes too: a cancel comes before
 * the mark and counts, or after it and is -ESRCH.  Unheld nurseries (all
 * but a few) skip all that: await_all sees refs == 1 and frees n.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "iwait.h"
#include "runtime.h"

#define NURSERY_CACHE_MAX 256u

/* Three lines: the opener's, the counters children write, and no more
 * (every fork-join call opens one). */
_Static_assert(sizeof(struct cbcmn_nursery) <= 3 * CBCMN__CACHELINE, "a nursery grew a line");

static struct cbcmn_nursery *nursery_alloc(struct cbcmn__exec *e)
{
	if (e && e->free_nurseries) {
		struct cbcmn_nursery *n = e->free_nurseries;
		e->free_nurseries = n->next_free;
		e->nfree_nurseries--;
		return n;
	}
	return aligned_alloc(CBCMN__CACHELINE, sizeof(struct cbcmn_nursery));
}

static void nursery_free(struct cbcmn_nursery *n, struct cbcmn__exec *e)
{
	if (e && e->nfree_nurseries < NURSERY_CACHE_MAX) {
		n->next_free = e->free_nurseries;
		e->free_nurseries = n;
		e->nfree_nurseries++;
		return;
	}
	free(n);
}

void cbcmn__nursery_free_cache(struct cbcmn__exec *e)
{
	while (e->free_nurseries) {
		struct cbcmn_nursery *n = e->free_nurseries;
		e->free_nurseries = n->next_free;
		free(n);
	}
	e->nfree_nurseries = 0;
}

int cbcmn__nursery_open(struct cbcmn_runtime *rt, struct cbcmn_task *owner,
			struct cbcmn_nursery **out)
{
	struct cbcmn_nursery *n = nursery_alloc(owner ? owner->exec : NULL);
	if (!n)
		return -ENOMEM;
	/* Field by field, not memset (see cbcmn__task_new). */
	n->rt = rt;
	n->owner = owner;
	n->parent = owner ? owner->nursery : NULL;
	n->prev_open = owner ? owner->open : NULL;
	if (owner)
		owner->open = n;
	n->next_free = NULL;
	n->owner_spawns = 0;
	n->exhausted = NULL;
	atomic_init(&n->first_error, 0);
	atomic_init(&n->cancelled, 0);
	atomic_init(&n->closing, 0);
	atomic_init(&n->live, CBCMN__LIVE_BIAS * CBCMN__LIVE_ONE);
	n->fork_gen = rt->fork_gen;
	atomic_init(&n->awaited, false);
	atomic_init(&n->scope, NULL); /* made when a task of n first blocks (iwait.c) */
	atomic_init(&n->refs, 1);
	cbcmn__mutex_init(&n->lock, "nursery", CBCMN__LOCK_NURSERY);
	n->diag_home = cbcmn__gauge_up(rt, owner ? owner->exec : NULL, CBCMN__G_NURSERY);
	/* A thread's nursery keeps its runtime from being destroyed until it
	 * is awaited: a holder may still cancel it, which touches n->rt.
	 * Relaxed: the opener's own await_all (or its destroy) comes after
	 * this in its program order. */
	if (!owner)
		atomic_fetch_add_explicit(&rt->thread_nurseries, 1, memory_order_relaxed);
	*out = n;
	return 0;
}

int cbcmn_nursery_open(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_nursery **out)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!rt || !out)
		return -EINVAL;
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED;
	if (rt->nexec == 0)
		return CBCMN_ENOSCHED; /* the core profile */
	if (self && self->rt != rt)
		return CBCMN_EWRONGRT;
	if (!self && cbcmn__on_executor(rt))
		return -EDEADLK;
	/* Its opener's context on another thread (a cbcmn_blocking()
	 * function's): nothing could be spawned into it there, nor awaited,
	 * and it would be listed and counted as if that thread were the
	 * task's executor. */
	if (self && !cbcmn__is_running(self))
		return -EPERM;
	cbcmn__stack_check(self);
	return cbcmn__nursery_open(rt, self, out);
}

void cbcmn__nursery_cancel(struct cbcmn_nursery *n, uint32_t why)
{
	uint32_t zero = 0;
	/* Count first, so a checker that sees the flag also passes the
	 * runtime-wide fast path.  Relaxed: cancellation is observed at the
	 * next check, a late observation only delays the stop. */
	atomic_fetch_add_explicit(&n->rt->cancels, 1, memory_order_relaxed);
	/* release: pairs with the acquire in cbcmn__nursery_chain_cancelled():
	 * a task that ends because it saw the flag ends after what we did
	 * before (cbcmn_nursery_cancel's hold). */
	if (atomic_compare_exchange_strong_explicit(&n->cancelled, &zero, why, memory_order_release,
						    memory_order_relaxed))
		cbcmn__iwait_cancel_scan(n); /* interrupt its subtree's blocked waits */
	else /* already cancelled: counted once */
		atomic_fetch_sub_explicit(&n->rt->cancels, 1, memory_order_relaxed);
}

int cbcmn_nursery_hold(cbcmn_nursery *n)
{
	if (!n)
		return -EINVAL;
	/* Relaxed: the caller knows n is alive (its opener before await_all,
	 * or a task of n), and how n then reaches another thread orders this
	 * before that thread's use; await_all reads refs on the opener's
	 * side of the same order (its own program order, or a child's end). */
	atomic_fetch_add_explicit(&n->refs, 1, memory_order_relaxed);
	return 0;
}

/* The last reference is gone: n goes back to e's cache (NULL: free). */
static void nursery_put(struct cbcmn_nursery *n, struct cbcmn__exec *e)
{
	cbcmn__mutex_destroy(&n->lock);
	nursery_free(n, e);
}

void cbcmn_nursery_release(cbcmn_nursery *n)
{
	if (!n)
		return;
	/* acquire: a refs of 1 that await_all's decrement (or a release after
	 * it) left shows its mark too (written before, in its order). */
	uint32_t r = atomic_load_explicit(&n->refs, memory_order_acquire);
	do {
		/* One reference left and await_all not over: it is the
		 * opener's, not a hold's.  A release more than the holds
		 * would free n under its opener: keep n (docs: ignored). */
		if (r == 1 && !atomic_load_explicit(&n->awaited, memory_order_relaxed))
			return;
		/* acq_rel: release orders our cancel before the free of
		 * whoever is last; acquire makes the last one see the others'
		 * before it frees. */
	} while (!atomic_compare_exchange_weak_explicit(&n->refs, &r, r - 1, memory_order_acq_rel,
							memory_order_acquire));
	if (r == 1)
		nursery_put(n, NULL); /* any thread: not an executor's cache */
}

int cbcmn_nursery_cancel(cbcmn_nursery *n)
{
	if (!n)
		return -EINVAL;
	/* The cancel scan takes the executors' wait-registry locks, and
	 * n->lock, which a parent's thread may have held as it forked.  From
	 * n's own copy: a held nursery may outlive its runtime. */
	if (cbcmn__forked_since(n->fork_gen))
		return CBCMN_EFORKED;
	cbcmn__stack_check_current();
	/* The cancel itself may end n: its children stop, and await_all
	 * returns and frees n while we still unlock it or scan its runtime.
	 * So we hold n for the call: taken while n is alive (the caller's
	 * guarantee, or its own hold), and seen by await_all, which looks at
	 * refs only after every child ended, each after seeing our flag
	 * (release CAS, acquire chain walk) or being woken by our scan. */
	cbcmn_nursery_hold(n);
	/* await_all marks a held n awaited under this lock: while we hold
	 * it, an n not yet marked, and so its runtime, stays alive. */
	int rc = -ESRCH;
	cbcmn__mutex_lock(&n->lock);
	if (!atomic_load_explicit(&n->awaited, memory_order_relaxed)) {
		cbcmn__nursery_cancel(n, 1);
		rc = 0;
	}
	cbcmn__mutex_unlock(&n->lock);
	cbcmn_nursery_release(n);
	return rc;
}

/* A child's failure is n's result unless an earlier one is already (SPEC-021
 * §8.1.3 "propagate first error"), and CBCMN_ECANCELED is not a failure but
 * the absence of a result (§3.6 tells .cancelled from .child_failed): a
 * real error replaces it, however late, and one stored ECANCELED is all a
 * cancellation leaves.  Only a real error cancels the siblings (fail fast,
 * once: the first). */
static void record_result(struct cbcmn_nursery *n, int64_t result)
{
	int64_t cur = atomic_load_explicit(&n->first_error, memory_order_relaxed);
	while (cur == 0 || (cur == CBCMN_ECANCELED && result != CBCMN_ECANCELED)) {
		/* Relaxed: the opener reads first_error after acquiring live,
		 * which our step in cbcmn__nursery_live_add() releases. */
		if (atomic_compare_exchange_weak_explicit(&n->first_error, &cur, result,
							  memory_order_relaxed,
							  memory_order_relaxed)) {
			if (result != CBCMN_ECANCELED)
				cbcmn__nursery_cancel(n, 2); /* fail fast: stop the siblings */
			return;
		}
	}
}

/* A child of n ended on executor e (NULL: a thread), inline under
 * inline_parent if that is set.  Three ways to count it:
 * - inline under n's opener: the opener's own count.  The opener is frozen
 *   under the child (on this thread, wherever the child moved), and reads
 *   owner_spawns only after its inline runs (cbcmn__nursery_await()): no
 *   locked step on the path every fork-join child takes.
 * - on a fiber of its own, from e's loop: into e's batch for n.  The
 *   scheduler flushes it before e runs anything but a fresh child of n
 *   (cbcmn__nursery_batch_holds()) and before e looks elsewhere or parks,
 *   so the batch is late only while a child of n runs here, which keeps n
 *   from ending (and from being settled: a running child waits for no
 *   budget).  A thief running a stolen burst takes one step on the
 *   opener's line per run of children, not per child.
 * - anything else (a thread, an inline child of someone else, which may
 *   then compute for long): a step of its own, now. */
void cbcmn__nursery_child_done(struct cbcmn_nursery *n, int64_t result, struct cbcmn__exec *e,
			       const struct cbcmn_task *inline_parent)
{
	if (result < 0)
		record_result(n, result);
	if (inline_parent && inline_parent == n->owner) {
		n->owner_spawns--;
		return;
	}
	if (e && !inline_parent) {
		if (e->live_n != n) {
			cbcmn__nursery_live_flush(e);
			e->live_n = n;
		}
		e->live_pending++;
		return;
	}
	/* Our last touch of n: it may be freed as soon as this returns. */
	cbcmn__nursery_live_add(n, -CBCMN__LIVE_ONE, e);
}

void cbcmn__nursery_live_flush(struct cbcmn__exec *e)
{
	struct cbcmn_nursery *n = e->live_n;
	if (!n)
		return;
	int64_t k = e->live_pending;
	e->live_n = NULL;
	e->live_pending = 0;
	/* Our last touch of n: it may be freed as soon as this returns. */
	cbcmn__nursery_live_add(n, -k * CBCMN__LIVE_ONE, e);
}

/* Add delta to live.  If that leaves the waiting (ARMED) opener nothing to
 * wait for, disarm it in the same step and wake it: the opener cannot go
 * on, let alone free n, before that wake, so touching n->await_w is safe;
 * otherwise n is not touched after the step. */
void cbcmn__nursery_live_add(struct cbcmn_nursery *n, int64_t delta, struct cbcmn__exec *e)
{
	int64_t old = atomic_load_explicit(&n->live, memory_order_relaxed), new;
	do {
		new = old + delta;
		if ((new & CBCMN__LIVE_ARMED) && CBCMN__LIVE_SETTLED(new))
			new &= ~(int64_t)CBCMN__LIVE_ARMED;
		/* acq_rel: release hands our writes (first_error, the task's
		 * effects) to the opener, which acquires live; acquire orders
		 * our read of await_w after the opener's arming. */
	} while (!atomic_compare_exchange_weak_explicit(&n->live, &old, new, memory_order_acq_rel,
							memory_order_relaxed));
	if ((old & CBCMN__LIVE_ARMED) && !(new & CBCMN__LIVE_ARMED))
		cbcmn__waiter_wake(&n->await_w, e);
}

/* n's children not ended yet, as its owner sees them: live counts them
 * from the bias, less the owner's own spawns (cbcmn__nursery_await()). */
static bool children_left(const struct cbcmn_nursery *n)
{
	int64_t v = atomic_load_explicit(&n->live, memory_order_acquire) +
		    (n->owner_spawns - CBCMN__LIVE_BIAS) * CBCMN__LIVE_ONE;
	return CBCMN__LIVE_COUNT(v) != 0;
}

int64_t cbcmn__nursery_await(struct cbcmn_task *self, struct cbcmn_nursery *n)
{
	struct cbcmn_runtime *rt = n->rt;
	cbcmn__stack_check(self);
	atomic_store_explicit(&n->closing, 1, memory_order_relaxed);
	/* A stop of an actor cancels the nursery it awaits (actor.c). */
	bool actor = self && __builtin_expect(cbcmn__is_actor_task(self), 0);
	if (actor)
		cbcmn__actor_joining(self, n);
	/* A cancelled opener cancels what it waits for (its children already
	 * see it through the chain; this makes the result say so too). */
	if (self && cbcmn__task_cancelled(self))
		cbcmn__nursery_cancel(n, 1);

	/* Children still on top of our own queue run here, on our stack. */
	if (self && !(rt->cfg.flags & CBCMN_CONFIG_NO_INLINE)) {
		struct cbcmn_task *c;
		while ((c = cbcmn__take_local_child(self->exec, n)))
			cbcmn__run_inline(self->exec, c);
	}

	/* Add our own count, drop the bias: live is now exact. */
	int64_t adjust = (n->owner_spawns - CBCMN__LIVE_BIAS) * CBCMN__LIVE_ONE;
	int64_t v = atomic_fetch_add_explicit(&n->live, adjust, memory_order_acq_rel) + adjust;
	while (CBCMN__LIVE_COUNT(v)) {
		if (CBCMN__LIVE_SETTLED(v)) {
			/* Everyone left waits for budget nobody will give: end
			 * them (CBCMN_EBUDGET) rather than wait forever. */
			cbcmn__budget_kill_exhausted(n);
		}
		/* Arm, then sleep until the last child or an exhausted one
		 * disarms and wakes us. */
		n->await_w.task = self;
		atomic_store_explicit(&n->await_w.futex, 0, memory_order_relaxed);
		if (self) {
			self->wait_kind = CBCMN__G_JOIN;
			atomic_store_explicit(&self->state, CBCMN__T_PARKING, memory_order_relaxed);
		}
		/* The CAS compares the whole word: a child that ended or
		 * became exhausted since we looked makes it fail, and we look
		 * again.  acq_rel: pairs with cbcmn__nursery_live_add(). */
		if (atomic_compare_exchange_strong_explicit(&n->live, &v, v | CBCMN__LIVE_ARMED,
							    memory_order_acq_rel,
							    memory_order_acquire)) {
			cbcmn__waiter_wait(&n->await_w);
		} else if (self) {
			atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
		}
		/* acquire: pairs with the children's steps. */
		v = atomic_load_explicit(&n->live, memory_order_acquire) & ~(int64_t)CBCMN__LIVE_ARMED;
	}
	/* Before the look at refs below: a stopper's hold is seen there. */
	if (actor)
		cbcmn__actor_joining(self, NULL);
	/* Every task of n has ended: nothing blocks in its scope any more. */
	cbcmn__scope_drop(n);

	/* A holder may cancel n until it is marked awaited: mark it, under
	 * the lock its cancel takes, before looking at n->cancelled.  acquire:
	 * pairs with the release in cbcmn_nursery_release(), so a holder gone
	 * already left its cancel behind it. */
	bool held = atomic_load_explicit(&n->refs, memory_order_acquire) != 1;
	if (held) {
		cbcmn__mutex_lock(&n->lock);
		atomic_store_explicit(&n->awaited, true, memory_order_relaxed);
		cbcmn__mutex_unlock(&n->lock);
	}
	int64_t r = atomic_load_explicit(&n->first_error, memory_order_relaxed);
	if (r == 0 && atomic_load_explicit(&n->cancelled, memory_order_relaxed))
		r = CBCMN_ECANCELED;
	if (self) {
		struct cbcmn_nursery **pp = &self->open;
		while (*pp && *pp != n)
			pp = &(*pp)->prev_open;
		if (*pp)
			*pp = n->prev_open;
	}
	/* rt->cancels counts cancelled nurseries still alive: everything
	 * that could find n in its chain has ended, so n leaves the count. */
	if (atomic_load_explicit(&n->cancelled, memory_order_relaxed))
		atomic_fetch_sub_explicit(&rt->cancels, 1, memory_order_relaxed);
	cbcmn__gauge_down(rt, cbcmn__waker_of(self), n->diag_home, CBCMN__G_NURSERY);
	/* Our last touch of rt.  release: pairs with the acquire in
	 * cbcmn_runtime_destroy(), which may free rt once it sees 0. */
	if (!self)
		atomic_fetch_sub_explicit(&rt->thread_nurseries, 1, memory_order_release);
	/* acq_rel: as in cbcmn_nursery_release(). */
	if (!held || atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1)
		nursery_put(n, cbcmn__waker_of(self));
	return r;
}

int64_t cbcmn_nursery_await_all(cbcmn_cx *cx, cbcmn_nursery *n)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!n)
		return -EINVAL;
	if (cbcmn__forked(n->rt))
		return CBCMN_EFORKED;
	if (n->owner != self)
		return -EPERM;
	if (!self && cbcmn__on_executor(n->rt))
		return -EDEADLK;
	/* Its opener's context on another thread (a cbcmn_blocking()
	 * function's): the wait would park that thread as its fiber. */
	if (self && !cbcmn__is_running(self))
		return -EPERM;
	if (atomic_load_explicit(&n->closing, memory_order_relaxed))
		return -EINVAL; /* already being awaited */
	/* A halt never waits (cbcmn__task_halting()): a nursery opened
	 * before it (a handler's, on its host) with a child still running
	 * is cancelled, and stays open for its owner's end to await. */
	if (self && cbcmn__task_in_halt(self) && children_left(n)) {
		cbcmn__nursery_cancel(n, 1);
		return CBCMN_ECANCELED;
	}
	return cbcmn__nursery_await(self, n);
}

int cbcmn__nursery_close_all(struct cbcmn_task *t)
{
	int count = 0;
	while (t->open) {
		struct cbcmn_nursery *n = t->open;
		cbcmn__nursery_cancel(n, 1);
		cbcmn__nursery_await(t, n);
		count++;
	}
	return count;
}
