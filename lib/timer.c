/* timer.c: per-executor timer heaps, sleeping, and the clock (real or lab). */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "arch.h"
#include "fault.h"
#include "timer.h"

enum { T_ARMED, T_FIRING, T_DONE, T_DEAD };

struct cbcmn__timer {
	uint64_t deadline;
	struct cbcmn__iwait *iw;
	struct cbcmn__exec *owner;   /* whose heap it is on */
	_Atomic uint32_t state;
	_Atomic uint32_t refs; /* the heap's and the waiter's */
};

uint64_t cbcmn__now(const struct cbcmn_runtime *rt)
{
	if (rt->lab)
		return atomic_load_explicit(&rt->vclock, memory_order_acquire);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cbcmn_now(const cbcmn_runtime *rt)
{
	return rt ? cbcmn__now(rt) : 0;
}

static void unref(struct cbcmn__timer *t)
{
	/* acq_rel: the last one sees the other's use before freeing. */
	if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) == 1)
		free(t);
}

/* ---- the heap (owner only) ------------------------------------------------- */

static void swap(struct cbcmn__timer **h, uint32_t a, uint32_t b)
{
	struct cbcmn__timer *x = h[a];
	h[a] = h[b];
	h[b] = x;
}

static void sift_up(struct cbcmn__timer **h, uint32_t i)
{
	while (i > 0 && h[(i - 1) / 2]->deadline > h[i]->deadline) {
		swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void sift_down(struct cbcmn__timer **h, uint32_t n, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < n && h[l]->deadline < h[m]->deadline)
			m = l;
		if (r < n && h[r]->deadline < h[m]->deadline)
			m = r;
		if (m == i)
			return;
		swap(h, i, m);
		i = m;
	}
}

static void pop_top(struct cbcmn__exec *e)
{
	e->timers[0] = e->timers[--e->ntimers];
	sift_down(e->timers, e->ntimers, 0);
}

/* A wait that ended early leaves its timer DEAD in the heap until the
 * deadline: drop them once they are half the heap, so a loop of long
 * timeouts that succeed does not grow without bound.  O(n), amortised. */
static void compact(struct cbcmn__exec *e)
{
	if (e->ntimers < 64 ||
	    atomic_load_explicit(&e->timers_dead, memory_order_relaxed) < e->ntimers / 2)
		return;
	uint32_t n = 0, dropped = 0;
	for (uint32_t i = 0; i < e->ntimers; i++) {
		struct cbcmn__timer *t = e->timers[i];
		/* acquire: pairs with disarm()'s CAS; the waiter is done with it. */
		if (atomic_load_explicit(&t->state, memory_order_acquire) == T_DEAD) {
			unref(t);
			dropped++;
		} else {
			e->timers[n++] = t;
		}
	}
	e->ntimers = n;
	for (uint32_t i = n / 2; i-- > 0;)
		sift_down(e->timers, n, i);
	atomic_fetch_sub_explicit(&e->timers_dead, dropped, memory_order_relaxed);
}

struct cbcmn__timer *cbcmn__timer_arm(struct cbcmn__exec *e, uint64_t deadline,
				      struct cbcmn__iwait *iw)
{
	compact(e);
	if (e->ntimers == e->timers_cap) {
		uint32_t cap = e->timers_cap ? e->timers_cap * 2 : 64;
		struct cbcmn__timer **h = realloc(e->timers, cap * sizeof(*h));
		if (!h)
			return NULL;
		e->timers = h;
		e->timers_cap = cap;
	}
	struct cbcmn__timer *t = cbcmn__malloc(sizeof(*t));
	if (!t)
		return NULL;
	t->deadline = deadline;
	t->iw = iw;
	t->owner = e;
	atomic_init(&t->state, T_ARMED);
	atomic_init(&t->refs, 2);
	e->timers[e->ntimers] = t;
	sift_up(e->timers, e->ntimers++);
	return t;
}

void cbcmn__timer_disarm(struct cbcmn__timer *t)
{
	uint32_t s = T_ARMED;
	/* Counted before the CAS so the owner's count never goes below the
	 * DEAD timers it can see. */
	atomic_fetch_add_explicit(&t->owner->timers_dead, 1, memory_order_relaxed);
	/* acquire on failure: pairs with the release store of DONE. */
	if (!atomic_compare_exchange_strong_explicit(&t->state, &s, T_DEAD, memory_order_acq_rel,
						     memory_order_acquire)) {
		atomic_fetch_sub_explicit(&t->owner->timers_dead, 1, memory_order_relaxed);
		/* Firing right now: it still holds our wait; let it finish. */
		while (atomic_load_explicit(&t->state, memory_order_acquire) != T_DONE)
			cbcmn__cpu_relax();
	}
	unref(t);
}

uint64_t cbcmn__timers_next(struct cbcmn__exec *e)
{
	/* Dead timers on top are no deadline: drop them (nor may the lab
	 * clock jump to one). */
	while (e->ntimers &&
	       atomic_load_explicit(&e->timers[0]->state, memory_order_acquire) == T_DEAD) {
		struct cbcmn__timer *t = e->timers[0];
		pop_top(e);
		atomic_fetch_sub_explicit(&e->timers_dead, 1, memory_order_relaxed);
		unref(t);
	}
	return e->ntimers ? e->timers[0]->deadline : UINT64_MAX;
}

uint32_t cbcmn__timers_fire(struct cbcmn__exec *e, uint64_t now)
{
	uint32_t woke = 0;
	while (e->ntimers && e->timers[0]->deadline <= now) {
		struct cbcmn__timer *t = e->timers[0];
		pop_top(e);
		uint32_t s = T_ARMED;
		if (atomic_compare_exchange_strong_explicit(&t->state, &s, T_FIRING,
							    memory_order_acq_rel,
							    memory_order_relaxed)) {
			if (cbcmn__iwait_claim_as(t->iw, CBCMN__IW_TIMEDOUT)) {
				if (t->iw->on_timeout)
					t->iw->on_timeout(t->iw);
				else
					cbcmn__iwait_wake(t->iw, e);
				woke++;
			}
			/* release: the waiter may let its wait go after this. */
			atomic_store_explicit(&t->state, T_DONE, memory_order_release);
		} else {
			atomic_fetch_sub_explicit(&e->timers_dead, 1, memory_order_relaxed);
		}
		unref(t);
	}
	return woke;
}

void cbcmn__timers_fini(struct cbcmn__exec *e)
{
	/* Only disarmed timers can be left: every waiter is gone. */
	for (uint32_t i = 0; i < e->ntimers; i++)
		unref(e->timers[i]);
	free(e->timers);
	e->timers = NULL;
	e->ntimers = e->timers_cap = 0;
}

/* ---- sleeping ----------------------------------------------------------- */

int cbcmn__wait_until(struct cbcmn_task *self, struct cbcmn__iwait *iw, uint64_t deadline,
		      uint32_t *how)
{
	struct cbcmn__timer *t = NULL;
	if (deadline != UINT64_MAX) {
		t = cbcmn__timer_arm(self->exec, deadline, iw);
		if (!t)
			return -ENOMEM;
	}
	*how = cbcmn__iwait_block(iw);
	if (t)
		cbcmn__timer_disarm(t);
	return 0;
}

int cbcmn_sleep(cbcmn_cx *cx, uint64_t ns)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!self)
		return -EINVAL;
	if (!cbcmn__is_running(self))
		return -EPERM; /* another thread with its cx: cbcmn_yield() */
	cbcmn__stack_check(self);
	if (cbcmn__task_cancelled(self))
		return CBCMN_ECANCELED;
	uint64_t now = cbcmn__now(self->rt);
	uint64_t deadline = ns > UINT64_MAX - 1 - now ? UINT64_MAX - 1 : now + ns;
	struct cbcmn__iwait iw;
	cbcmn__iwait_init(&iw, self);
	iw.kind = CBCMN__G_TIMER;
	uint32_t how;
	int rc = cbcmn__wait_until(self, &iw, deadline, &how);
	if (rc) {
		atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
		return rc;
	}
	return how == CBCMN__IW_CANCELLED ? CBCMN_ECANCELED : 0;
}
