/* obligation.c: obligations (seed 000): tracking, leaks and the general API.
 *
 * Both kinds of obligation, channel permits and general ones, are tracked
 * here (obligation.h): on their owner task's list, which only that task
 * touches, and in the outstanding gauge the snapshot reads.  A task that
 * ends with obligations left leaked them: each is aborted through its kind,
 * counted (rt->oblig_leaked), and the runtime's policy applies.
 *
 * General obligations are records the runtime owns (a pool per runtime,
 * recycled, freed with the runtime), never the caller's handle: a stale
 * handle (resolved twice, or after its owner leaked it) still points at a
 * valid record whose generation no longer matches, and gets -EINVAL.  The
 * generation is even while the record is free and odd while held; the one
 * CAS that makes it even again is the resolution, so two resolvers of the
 * same handle (two threads sharing a thread-owned obligation) cannot both
 * win.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "obligation.h"

void cbcmn__oblig_track(struct cbcmn_runtime *rt, struct cbcmn_task *owner,
			struct cbcmn__oblig *ob, struct cbcmn__exec *e)
{
	atomic_store_explicit(&ob->owner, owner, memory_order_relaxed);
	if (owner) {
		ob->tprev = NULL;
		ob->tnext = owner->obligations;
		if (ob->tnext)
			ob->tnext->tprev = ob;
		owner->obligations = ob;
	}
	ob->home = cbcmn__gauge_up(rt, e, CBCMN__G_OBLIG);
}

void cbcmn__oblig_untrack(struct cbcmn_runtime *rt, struct cbcmn__oblig *ob,
			  struct cbcmn__exec *e)
{
	struct cbcmn_task *t = atomic_load_explicit(&ob->owner, memory_order_relaxed);
	if (t) {
		if (ob->tprev)
			ob->tprev->tnext = ob->tnext;
		else
			t->obligations = ob->tnext;
		if (ob->tnext)
			ob->tnext->tprev = ob->tprev;
	}
	cbcmn__gauge_down(rt, e, ob->home, CBCMN__G_OBLIG);
}

/* A leak, once aborted: count it and do what the runtime's policy says.
 * snprintf + write, not fprintf: we may be on the ending task's stack, a
 * minimal 8 KiB one, and glibc before 2.37 formats for unbuffered stderr
 * through a BUFSIZ (8 KiB) buffer on the stack. */
static void leaked(struct cbcmn_runtime *rt, uint64_t task_id, const char *what, const void *obj)
{
	atomic_fetch_add_explicit(&rt->oblig_leaked, 1, memory_order_relaxed);
	uint32_t policy = rt->cfg.obligation_leak;
	if (policy == CBCMN_LEAK_COUNT)
		return;
	char msg[256], who[40];
	if (task_id)
		snprintf(who, sizeof(who), "task %llu", (unsigned long long)task_id);
	else
		snprintf(who, sizeof(who), "a thread (at runtime destroy)");
	int len = snprintf(msg, sizeof(msg),
			   "cbcmn: %s ended holding an unresolved %s %p (obligation leak); "
			   "%s.  Commit or abort every obligation, see docs/ERRORS.md\n",
			   who, what, obj,
			   policy == CBCMN_LEAK_PANIC ? "aborting the process (CBCMN_LEAK_PANIC)"
						      : "aborted it");
	if (len > (int)sizeof(msg) - 1)
		len = (int)sizeof(msg) - 1;
	/* A failed write leaves nowhere to report to; the abort stands. */
	ssize_t wr = len > 0 ? write(STDERR_FILENO, msg, (size_t)len) : 0;
	(void)wr;
	if (policy == CBCMN_LEAK_PANIC)
		abort(); /* asked for by the program: cbcmn_config.obligation_leak */
}

/* task.c, when t ends holding obligations: abort each, report the leak. */
int64_t cbcmn__obligations_settle(struct cbcmn_task *t, int64_t result)
{
	struct cbcmn__oblig *ob;
	while ((ob = t->obligations)) {
		const char *what = ob->what;
		const void *obj = ob->obj;
		ob->leak(ob); /* takes it off the list; ob may be reused after */
		leaked(t->rt, t->id, what, obj);
		if (result >= 0)
			result = CBCMN_ELEAKED;
	}
	return result;
}

/* sched.c, at the landing pad: the runtime ended t from outside (its budget
 * given up on, a stack overflow, a cancellation unwound at a checkpoint).
 * t never got the chance to resolve what it held, so that is no leak of
 * its: abort each silently (seed 000: task_completed aborts the orphans)
 * and let its result say why it ended.  A task that returns by itself,
 * even with an error, had the chance: settle() above reports it. */
void cbcmn__obligations_drop(struct cbcmn_task *t)
{
	struct cbcmn__oblig *ob;
	while ((ob = t->obligations))
		ob->leak(ob); /* takes it off the list */
}

/* ---- general obligations -------------------------------------------------- */

struct cbcmn__gen_oblig {
	struct cbcmn__oblig ob;
	struct cbcmn_runtime *rt;   /* fixed */
	_Atomic uint64_t gen;       /* odd: held */
	struct cbcmn__gen_oblig *free_next;  /* rt's free list, under its lock */
	struct cbcmn__gen_oblig *all_next;   /* every record of rt, for destroy */
};

static struct cbcmn__gen_oblig *rec_get(struct cbcmn_runtime *rt)
{
	cbcmn__mutex_lock(&rt->oblig_lock);
	struct cbcmn__gen_oblig *r = rt->oblig_free;
	if (r) {
		rt->oblig_free = r->free_next;
	} else if ((r = cbcmn__calloc(1, sizeof(*r)))) {
		r->rt = rt;
		r->all_next = rt->oblig_all;
		rt->oblig_all = r;
	}
	cbcmn__mutex_unlock(&rt->oblig_lock);
	return r;
}

static void rec_put(struct cbcmn__gen_oblig *r)
{
	struct cbcmn_runtime *rt = r->rt;
	cbcmn__mutex_lock(&rt->oblig_lock);
	r->free_next = rt->oblig_free;
	rt->oblig_free = r;
	cbcmn__mutex_unlock(&rt->oblig_lock);
}

static void gen_leak(struct cbcmn__oblig *ob)
{
	struct cbcmn__gen_oblig *r = (struct cbcmn__gen_oblig *)ob;
	/* Only the ending owner resolves it now: no CAS needed, but the
	 * store must make every later check of a stale handle fail. */
	atomic_fetch_add_explicit(&r->gen, 1, memory_order_release);
	struct cbcmn_task *t = atomic_load_explicit(&ob->owner, memory_order_relaxed);
	cbcmn__oblig_untrack(r->rt, ob, t ? t->exec : NULL);
	rec_put(r);
}

int cbcmn_obligation_reserve(cbcmn_runtime *rt, cbcmn_cx *cx, const char *what,
			     cbcmn_obligation *o)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!o)
		return -EINVAL;
	/* Zeroed first: a caller whose reserve failed aborts its handle on
	 * the way out and must get -EINVAL, not a stale pointer followed. */
	*o = (cbcmn_obligation){0};
	if (!rt)
		return -EINVAL;
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED;
	if (self && self->rt != rt)
		return CBCMN_EWRONGRT;
	cbcmn__stack_check(self);
	struct cbcmn__gen_oblig *r = rec_get(rt);
	if (!r)
		return -ENOMEM;
	r->ob.leak = gen_leak;
	r->ob.what = what ? what : "obligation";
	r->ob.obj = r;
	cbcmn__oblig_track(rt, self, &r->ob, cbcmn__waker_of(self));
	/* Release: a resolver that loads this generation (acquire) sees the
	 * record filled in. */
	uint64_t g = atomic_fetch_add_explicit(&r->gen, 1, memory_order_release) + 1;
	o->_rec = r;
	o->_gen = g;
	return 0;
}

static int resolve(cbcmn_cx *cx, cbcmn_obligation *o)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	/* One relaxed load: two threads may resolve one shared handle at
	 * once, each sees the record or the winner's NULL (a second read
	 * could see NULL after a first saw the record). */
	struct cbcmn__gen_oblig *r = o ? __atomic_load_n(&o->_rec, __ATOMIC_RELAXED) : NULL;
	if (!r || !(o->_gen & 1))
		return -EINVAL;
	if (cbcmn__forked(r->rt))
		return CBCMN_EFORKED;
	if (self && self->rt != r->rt)
		return CBCMN_EWRONGRT;
	cbcmn__stack_check(self);
	uint64_t g = o->_gen;
	/* acquire: pairs with the reservation's release increment. */
	if (atomic_load_explicit(&r->gen, memory_order_acquire) != g)
		return -EINVAL; /* resolved already, or aborted as a leak */
	if (atomic_load_explicit(&r->ob.owner, memory_order_relaxed) != self)
		return -EPERM; /* the owner resolves it (a stale owner read is
				* of a record resolved since: the CAS fails) */
	if (!atomic_compare_exchange_strong_explicit(&r->gen, &g, g + 1, memory_order_acq_rel,
						     memory_order_relaxed))
		return -EINVAL; /* another thread resolved it first */
	cbcmn__oblig_untrack(r->rt, &r->ob, cbcmn__waker_of(self));
	rec_put(r);
	__atomic_store_n(&o->_rec, NULL, __ATOMIC_RELAXED);
	return 0;
}

int cbcmn_obligation_commit(cbcmn_cx *cx, cbcmn_obligation *o)
{
	return resolve(cx, o);
}

int cbcmn_obligation_abort(cbcmn_cx *cx, cbcmn_obligation *o)
{
	return resolve(cx, o);
}

void cbcmn__oblig_fini(struct cbcmn_runtime *rt)
{
	/* Every task has ended, so what is still held belongs to threads
	 * that never resolved it: a leak like any other. */
	for (struct cbcmn__gen_oblig *r = rt->oblig_all, *next; r; r = next) {
		next = r->all_next;
		if (atomic_load_explicit(&r->gen, memory_order_acquire) & 1)
			leaked(rt, 0, r->ob.what, r);
		free(r);
	}
	rt->oblig_all = rt->oblig_free = NULL;
	cbcmn__mutex_destroy(&rt->oblig_lock);
}
