/* iwait.c: registries of interruptible waits; see iwait.h for the protocol. */
#include "iwait.h"

void cbcmn__iwait_reg_init(struct cbcmn__iwait_reg *r)
{
	cbcmn__mutex_init(&r->lock, "iwait", CBCMN__LOCK_IWAIT);
	r->head = NULL;
}

void cbcmn__iwait_reg_fini(struct cbcmn__iwait_reg *r)
{
	cbcmn__mutex_destroy(&r->lock);
}

void cbcmn__iwait_init(struct cbcmn__iwait *iw, struct cbcmn_task *self)
{
	iw->w.task = self;
	atomic_init(&iw->w.futex, 0);
	atomic_init(&iw->state, CBCMN__IW_WAITING);
	iw->prev = iw->next = NULL;
	iw->reg = NULL;
	iw->user = NULL;
	iw->qnext = NULL;
	iw->on_cancel = NULL;
	iw->local = false;
	iw->on_timeout = NULL;
	iw->kind = CBCMN__G_OTHER;
	if (self)
		atomic_store_explicit(&self->state, CBCMN__T_PARKING, memory_order_relaxed);
}

static void reg_add(struct cbcmn__iwait_reg *r, struct cbcmn__iwait *iw)
{
	cbcmn__mutex_lock(&r->lock);
	iw->reg = r;
	iw->prev = NULL;
	iw->next = r->head;
	if (r->head)
		r->head->prev = iw;
	r->head = iw;
	cbcmn__mutex_unlock(&r->lock);
}

static void reg_del(struct cbcmn__iwait *iw)
{
	struct cbcmn__iwait_reg *r = iw->reg;
	cbcmn__mutex_lock(&r->lock);
	if (iw->prev)
		iw->prev->next = iw->next;
	else
		r->head = iw->next;
	if (iw->next)
		iw->next->prev = iw->prev;
	cbcmn__mutex_unlock(&r->lock);
	iw->reg = NULL;
}

uint32_t cbcmn__iwait_block(struct cbcmn__iwait *iw)
{
	struct cbcmn_task *self = iw->w.task;
	if (!self) {
		cbcmn__waiter_wait(&iw->w);
		return atomic_load_explicit(&iw->state, memory_order_acquire);
	}
	self->wait_kind = iw->local ? CBCMN__G_IO : iw->kind;
	if (!iw->local)
		reg_add(&self->exec->iwaits, iw);
	/* A cancellation whose scan ran before we were registered set its
	 * flag before the scan took the registry lock we have since taken
	 * (a local wait: before it flagged our executor, which looks at its
	 * own waits only after running us): we see it here and claim the
	 * wait ourselves. */
	if (cbcmn__task_cancelled(self)) {
		uint32_t s = CBCMN__IW_WAITING;
		if (atomic_compare_exchange_strong_explicit(&iw->state, &s, CBCMN__IW_CANCELLED,
							    memory_order_acq_rel,
							    memory_order_acquire)) {
			if (iw->on_cancel) {
				/* Undo what is in flight; the event wakes us. */
				iw->on_cancel(iw);
				goto suspend;
			}
			atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
			if (iw->reg)
				reg_del(iw);
			return CBCMN__IW_CANCELLED;
		}
		/* The event won: its wake is on the way, suspend for it. */
	}
suspend:
	cbcmn__suspend(self);
	if (iw->reg)
		reg_del(iw);
	return atomic_load_explicit(&iw->state, memory_order_acquire);
}

void cbcmn__iwait_ignore_cancel(struct cbcmn__iwait *iw)
{
	(void)iw;
}

/* Executor side: a local wait whose task is cancelled is claimed for the
 * cancellation. */
bool cbcmn__iwait_local_cancel(struct cbcmn__iwait *iw)
{
	uint32_t s = atomic_load_explicit(&iw->state, memory_order_acquire);
	if (s == CBCMN__IW_WAITING && cbcmn__task_cancelled(iw->w.task) &&
	    atomic_compare_exchange_strong_explicit(&iw->state, &s, CBCMN__IW_CANCELLED,
						    memory_order_acq_rel, memory_order_acquire))
		return true;
	return s == CBCMN__IW_CANCELLED; /* a failed CAS left the state in s */
}

void cbcmn__iwait_cancel_scan(struct cbcmn_runtime *rt)
{
	for (uint32_t i = 0; i < rt->nexec; i++) {
		struct cbcmn__iwait_reg *r = &rt->exec[i]->iwaits;
		cbcmn__mutex_lock(&r->lock);
		for (struct cbcmn__iwait *iw = r->head; iw; iw = iw->next) {
			if (!cbcmn__task_cancelled(iw->w.task))
				continue;
			uint32_t s = CBCMN__IW_WAITING;
			if (!atomic_compare_exchange_strong_explicit(&iw->state, &s,
								     CBCMN__IW_CANCELLED,
								     memory_order_acq_rel,
								     memory_order_acquire))
				continue;
			/* The task stays registered until it runs and removes
			 * itself, so iw stays valid meanwhile. */
			if (iw->on_cancel)
				iw->on_cancel(iw);
			else
				/* Through the inject queue: cancellation is
				 * rare and has no executor of its own. */
				cbcmn__waiter_wake(&iw->w, NULL);
		}
		cbcmn__mutex_unlock(&r->lock);
	}
	/* Local waits: each executor looks at its own. */
	for (uint32_t i = 0; i < rt->nexec; i++)
		cbcmn__io_cancel_flag(rt->exec[i]);
}

/* Have e look for cancelled I/O waits among its own, and kick it only if
 * it may be asleep with some: an executor that is running looks between
 * tasks (we are one of those tasks when e is ours), and one asleep with
 * no I/O waits has nothing to look for.  An exchange, not a store: the
 * executor's acquire exchange that consumes the flag then synchronises
 * with every setter, so it sees each cancellation behind it. */
void cbcmn__io_cancel_flag(struct cbcmn__exec *e)
{
	if (atomic_exchange_explicit(&e->io_cancel, 1, memory_order_seq_cst))
		return; /* not consumed yet: e looks before it sleeps again */
	if (e == cbcmn__tls_exec)
		return;
	/* Pairs with the fence in cbcmn__park() after e publishes io_live:
	 * either e sees our flag there and stays awake, or we see its I/O
	 * waits here and wake it. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&e->io_live, memory_order_relaxed))
		cbcmn__kick(e);
}
