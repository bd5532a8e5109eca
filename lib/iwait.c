/* iwait.c: interruptible waits and the cancel scopes that find them; see
 * iwait.h for the protocol. */
#include <errno.h>
#include <stdlib.h>

#include "actor.h" /* cbcmn__task_cancelled_here() */
#include "iwait.h"

void cbcmn__iwait_reg_init(struct cbcmn__iwait_reg *r)
{
	cbcmn__mutex_init(&r->lock, "iwait", CBCMN__LOCK_IWAIT);
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
	iw->cell = NULL;
	iw->user = NULL;
	iw->qnext = NULL;
	iw->on_cancel = NULL;
	iw->local = false;
	iw->noded = false;
	iw->lasting = false;
	iw->local_end = NULL;
	iw->on_timeout = NULL;
	iw->kind = CBCMN__G_OTHER;
	if (self)
		atomic_store_explicit(&self->state, CBCMN__T_PARKING, memory_order_relaxed);
}

void cbcmn__iwait_rearm(struct cbcmn__iwait *iw)
{
	iw->prev = iw->next = NULL;
	iw->reg = NULL;
	iw->cell = NULL;
	iw->user = NULL;
	iw->qnext = NULL;
	/* The task PARKING first, then the wait WAITING with release: a
	 * stale canceller (iwait.h) whose claim reads WAITING (acquire) then
	 * finds its task parking, and its wake is taken; one that found the
	 * task RUNNING dropped the wake (cbcmn__wake_task()) while the task,
	 * its own claim lost, suspended for ever.  A plain store on x86. */
	atomic_store_explicit(&iw->w.task->state, CBCMN__T_PARKING, memory_order_relaxed);
	atomic_store_explicit(&iw->state, CBCMN__IW_WAITING, memory_order_release);
	CBCMN__PAUSE(CBCMN__P_REARM, iw);
}

__thread struct cbcmn__iwkeep *cbcmn__iw_keep_next;

int64_t cbcmn__iwait_call_keeping(struct cbcmn_task *t)
{
	struct cbcmn__iwkeep keep;
	cbcmn__iw_keep_next = &keep;
	int64_t r = cbcmn__task_call_guarded(t);
	/* keep lives until here: no tail call. */
	__asm__ volatile("" : : "r"(&keep) : "memory");
	return r;
}

/* ---- scopes ------------------------------------------------------------ */

static struct cbcmn__scope *scope_new(struct cbcmn_nursery *n, uint32_t ncell)
{
	size_t size = sizeof(struct cbcmn__scope) + (size_t)ncell * sizeof(struct cbcmn__wcell);
	size = (size + CBCMN__CACHELINE - 1) & ~(size_t)(CBCMN__CACHELINE - 1);
	/* Injected (tests): a nursery's waits then go to the fallback. */
	struct cbcmn__scope *s = CBCMN__FAULT(CBCMN__F_MALLOC) ? NULL
							      : aligned_alloc(CBCMN__CACHELINE, size);
	if (!s)
		return NULL;
	s->n = n;
	s->parent = s->child = s->prev = s->next = NULL;
	atomic_init(&s->refs, 1);
	s->ncell = ncell;
	for (uint32_t i = 0; i < ncell; i++) {
		struct cbcmn__wcell *c = &s->cell[i];
		c->reg = c->local = NULL;
		c->nodes = NULL;
		c->qnext = NULL;
		c->scope = s;
		atomic_init(&c->queued, 0);
		atomic_init(&c->used, 0);
	}
	return s;
}

static void scope_unref(struct cbcmn__scope *s)
{
	/* acq_rel: whoever frees sees the others' last touches (an
	 * executor's walk of a pushed cell, the nursery's unlink). */
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
		free(s);
}

/* ---- the two sides' fences (iwait.h, "without the registry lock") ------- */

/* Either side of the two store-then-load pairs: a full fence (a locked
 * instruction, tens of cycles).  Not membarrier(2) on the canceller's
 * side with a compiler barrier on the task's: that interrupts every CPU
 * running one of the process's threads at each cancel, is refused where
 * seccomp filters it (silently, once installed after the runtime was
 * made), and bought nothing measurable (docs/BENCHMARKS.md, fourteenth
 * session).  Out of line: GCC's -Wtsan refuses the fence once it is
 * inlined. */
static __attribute__((noinline)) void iw_fence(void)
{
	atomic_thread_fence(memory_order_seq_cst);
}

int cbcmn__scope_rt_init(struct cbcmn_runtime *rt, uint32_t nexec)
{
	atomic_init(&rt->iw_scanning, 0);
	cbcmn__mutex_init(&rt->scope_lock, "scope", CBCMN__LOCK_SCOPE);
	rt->scope_fallback = scope_new(NULL, nexec);
	return rt->scope_fallback ? 0 : -ENOMEM;
}

/* No thread runs: the cells pushed on e, never popped, let their scopes go. */
void cbcmn__scope_exec_fini(struct cbcmn__exec *e)
{
	struct cbcmn__wcell *c = atomic_exchange_explicit(&e->cancel_cells, NULL, memory_order_acquire);
	while (c) {
		struct cbcmn__wcell *next = c->qnext;
		scope_unref(c->scope);
		c = next;
	}
}

void cbcmn__scope_rt_fini(struct cbcmn_runtime *rt)
{
	if (rt->scope_fallback)
		scope_unref(rt->scope_fallback);
	rt->scope_fallback = NULL;
	cbcmn__mutex_destroy(&rt->scope_lock);
}

/* The outermost of n and its enclosing nurseries still without a scope
 * (its parent has one, or it has no parent), or NULL if n has one.  The
 * chain is alive while n is (nursery.c): each is awaited after everything
 * inside it, and keeps its scope until then. */
static struct cbcmn_nursery *scope_bare(struct cbcmn_nursery *n)
{
	if (atomic_load_explicit(&n->scope, memory_order_acquire))
		return NULL;
	struct cbcmn_nursery *x = n;
	while (x->parent && !atomic_load_explicit(&x->parent->scope, memory_order_acquire))
		x = x->parent;
	return x;
}

/* n's scope, made (with its ancestors') if it has none; the fallback if
 * no memory.  Iterative: a deep nesting must not recurse on the task's
 * small stack; each round makes the scope of the outermost ancestor still
 * without one (O(depth^2) once per nursery).  Each scope is allocated
 * before rt->scope_lock is taken, never under it: a malloc on a task's
 * small stack may overflow, and the overflow ends the task as the malloc
 * returns (overflow.c), which must not leave the lock held (s19-rvcold1).
 * Under the lock it is linked, or freed if another task linked one for
 * that nursery meanwhile. */
static __attribute__((noinline)) struct cbcmn__scope *scope_make(struct cbcmn_runtime *rt,
								   struct cbcmn_nursery *n)
{
	struct cbcmn_nursery *x;
	while ((x = scope_bare(n))) {
		CBCMN__PAUSE(CBCMN__P_SCOPE_NEW, rt);
		struct cbcmn__scope *s = scope_new(x, rt->scope_fallback->ncell);
		if (!s)
			return rt->scope_fallback;
		cbcmn__mutex_lock(&rt->scope_lock);
		bool lost = atomic_load_explicit(&x->scope, memory_order_relaxed) != NULL;
		if (!lost) {
			/* x's parent's scope, seen by scope_bare(), is linked
			 * until the parent ends, after x. */
			struct cbcmn__scope *p =
				x->parent ? atomic_load_explicit(&x->parent->scope, memory_order_relaxed)
					  : NULL;
			s->parent = p;
			if (p) {
				s->next = p->child;
				if (p->child)
					p->child->prev = s;
				p->child = s;
			}
			/* release: pairs with the acquire in scope_of(): a
			 * task that finds the scope there finds it linked in
			 * the tree. */
			atomic_store_explicit(&x->scope, s, memory_order_release);
		}
		cbcmn__mutex_unlock(&rt->scope_lock);
		if (lost)
			free(s); /* never linked nor seen */
	}
	return atomic_load_explicit(&n->scope, memory_order_acquire);
}

/* The scope task t's waits go to. */
/* Inline: every wait's begin asks it (out of line, its frame cost the
 * warm hop 24 instructions); its first wait's scope_make() stays out. */
static inline __attribute__((always_inline)) struct cbcmn__scope *scope_of(struct cbcmn_task *t)
{
	struct cbcmn_nursery *n = t->nursery;
	struct cbcmn_runtime *rt = t->rt;
	if (!n)
		return rt->scope_fallback;
	struct cbcmn__scope *s = atomic_load_explicit(&n->scope, memory_order_acquire);
	if (__builtin_expect(s != NULL, 1))
		return s;
	/* The first wait of a task of n: once per nursery that blocks. */
	return scope_make(rt, n);
}

void cbcmn__scope_drop(struct cbcmn_nursery *n)
{
	/* Relaxed: the scope was published by a task of n, which ended
	 * before await_all saw the count that let it get here (acquire). */
	struct cbcmn__scope *s = atomic_load_explicit(&n->scope, memory_order_relaxed);
	if (!s)
		return;
	struct cbcmn_runtime *rt = n->rt;
	cbcmn__mutex_lock(&rt->scope_lock);
	/* Its children went first: their nurseries were opened by n's tasks,
	 * and each was awaited before its opener ended. */
	if (s->prev)
		s->prev->next = s->next;
	else if (s->parent)
		s->parent->child = s->next;
	if (s->next)
		s->next->prev = s->prev;
	atomic_store_explicit(&n->scope, NULL, memory_order_relaxed);
	cbcmn__mutex_unlock(&rt->scope_lock);
	scope_unref(s);
}

/* First use of one of c's lists, on c's executor's thread.  seq_cst fence:
 * pairs with the one in cbcmn__iwait_cancel_scan(): either the canceller
 * sees c used, or our check of the task's cancellation after this sees
 * the canceller's flag. */
/* Out of line: GCC's -Wtsan refuses the fence once it is inlined. */
static __attribute__((noinline)) void cell_first_use(struct cbcmn__wcell *c, uint32_t what)
{
	atomic_store_explicit(&c->used, atomic_load_explicit(&c->used, memory_order_relaxed) | what,
			      memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
}

static inline void cell_use(struct cbcmn__wcell *c, uint32_t what)
{
	if (__builtin_expect(!(atomic_load_explicit(&c->used, memory_order_relaxed) & what), 0))
		cell_first_use(c, what);
}

/* Push c on its executor's cancel_cells (once until popped), holding its
 * scope.  True if c's executor is to be flagged. */
static void cell_push(struct cbcmn_runtime *rt, struct cbcmn__wcell *c, uint32_t exec)
{
	/* acq_rel: the executor's exchange that pops c reads our 1 (or a
	 * later pusher's), and sees the cancellation we made before. */
	if (atomic_exchange_explicit(&c->queued, 1, memory_order_acq_rel))
		return;
	atomic_fetch_add_explicit(&c->scope->refs, 1, memory_order_relaxed);
	struct cbcmn__exec *e = rt->exec[exec];
	struct cbcmn__wcell *h = atomic_load_explicit(&e->cancel_cells, memory_order_relaxed);
	do
		c->qnext = h;
	/* release: pairs with the acquire exchange that pops the stack. */
	while (!atomic_compare_exchange_weak_explicit(&e->cancel_cells, &h, c, memory_order_release,
						      memory_order_relaxed));
}

/* ---- registering ------------------------------------------------------- */

/* A cell's lists (its registry's under the lock, its local one on its
 * executor's thread): push iw first, and take it out. */
static void list_push(struct cbcmn__iwait **head, struct cbcmn__wcell *c, struct cbcmn__iwait *iw)
{
	iw->cell = c;
	iw->prev = NULL;
	iw->next = *head;
	if (*head)
		(*head)->prev = iw;
	*head = iw;
}

static void list_del(struct cbcmn__iwait **head, struct cbcmn__iwait *iw)
{
	if (iw->prev)
		iw->prev->next = iw->next;
	else
		*head = iw->next;
	if (iw->next)
		iw->next->prev = iw->prev;
	iw->prev = iw->next = NULL;
	iw->cell = NULL;
}

static void reg_add(struct cbcmn__exec *e, struct cbcmn__wcell *c, struct cbcmn__iwait *iw)
{
	struct cbcmn__iwait_reg *r = &e->iwaits;
	cell_use(c, CBCMN__CELL_REG);
	cbcmn__mutex_lock(&r->lock);
	iw->reg = r;
	list_push(&c->reg, c, iw);
	cbcmn__mutex_unlock(&r->lock);
}

static void reg_del(struct cbcmn__iwait *iw)
{
	struct cbcmn__iwait_reg *r = iw->reg;
	cbcmn__mutex_lock(&r->lock);
	list_del(&iw->cell->reg, iw);
	cbcmn__mutex_unlock(&r->lock);
	iw->reg = NULL;
}

/* The node leaves its cell: the task blocks elsewhere now, or ends. */
static void node_unlink(struct cbcmn__iwnode *nd)
{
	struct cbcmn__iwait_reg *r = nd->reg;
	cbcmn__mutex_lock(&r->lock);
	if (nd->prev)
		nd->prev->next = nd->next;
	else
		nd->cell->nodes = nd->next;
	if (nd->next)
		nd->next->prev = nd->prev;
	nd->cell = NULL;
	cbcmn__mutex_unlock(&r->lock);
	nd->reg = NULL;
}

static void node_link(struct cbcmn__exec *e, struct cbcmn__wcell *c, struct cbcmn__iwnode *nd)
{
	struct cbcmn__iwait_reg *r = &e->iwaits;
	cell_use(c, CBCMN__CELL_REG);
	cbcmn__mutex_lock(&r->lock);
	nd->prev = NULL;
	nd->next = c->nodes;
	if (c->nodes)
		c->nodes->prev = nd;
	c->nodes = nd;
	nd->cell = c;
	cbcmn__mutex_unlock(&r->lock);
	nd->reg = r;
}

/* Publish iw in its task's node, listed in cell c first if it is not.
 * Inline always: each block's (cbcmn__iwait_block(), cbcmn__iwait_begin()). */
static inline __attribute__((always_inline)) void
node_publish(struct cbcmn_task *self, struct cbcmn__wcell *c, struct cbcmn__iwait *iw)
{
	struct cbcmn__iwnode *nd = self->iwn;
	if (__builtin_expect(nd->cell != c, 0)) {
		if (nd->cell)
			node_unlink(nd);
		node_link(self->exec, c, nd);
	}
	iw->noded = true;
	/* release: a canceller that reads iw here reads it set up. */
	atomic_store_explicit(&nd->cur, iw, memory_order_release);
	iw_fence(); /* then the caller reads the cancellation */
}

/* Take the wait back from the node: once this returns, no canceller
 * touches it; or, a lasting one, none that it harms (iwait.h). */
static void node_withdraw(struct cbcmn_task *self, const struct cbcmn__iwait *iw)
{
	struct cbcmn__iwnode *nd = self->iwn;
	atomic_store_explicit(&nd->cur, NULL, memory_order_relaxed);
	if (iw->lasting)
		return;
	iw_fence();
	if (__builtin_expect(atomic_load_explicit(&self->rt->iw_scanning, memory_order_acquire) != 0,
			     0)) {
		/* A canceller may hold our wait: it does so under this lock. */
		cbcmn__mutex_lock(&nd->reg->lock);
		cbcmn__mutex_unlock(&nd->reg->lock);
	}
}

void cbcmn__iwait_node_end(struct cbcmn_task *t)
{
	if (t->iwn->cell)
		node_unlink(t->iwn);
	t->iwn = NULL;
}

/* Out of the registry (or the node) once the task runs again.  Inline
 * always, as node_publish(). */
static inline __attribute__((always_inline)) void reg_leave(struct cbcmn_task *self,
								 struct cbcmn__iwait *iw)
{
	if (iw->noded)
		node_withdraw(self, iw);
	else if (iw->reg)
		reg_del(iw);
}

static void local_add(struct cbcmn__wcell *c, struct cbcmn__iwait *iw)
{
	cell_use(c, CBCMN__CELL_LOCAL);
	list_push(&c->local, c, iw);
}

void cbcmn__iwait_local_unlink(struct cbcmn__iwait *iw)
{
	list_del(&iw->cell->local, iw);
}

/* A task's wait iw begins: registered, its own look at its cancellation
 * taken.  False: it ended so, not to suspend (the state says how). */
static inline __attribute__((always_inline)) bool block_begin(struct cbcmn_task *self,
							      struct cbcmn__iwait *iw)
{
	struct cbcmn__exec *e = self->exec;
	self->wait_kind = iw->local ? CBCMN__G_IO : iw->kind;
	if (!iw->local) {
		struct cbcmn__wcell *c = &scope_of(self)->cell[e->id];
		if (__builtin_expect(self->iwn != NULL, 1))
			node_publish(self, c, iw);
		else
			reg_add(e, c, iw);
	} else if (iw->local_end)
		local_add(&scope_of(self)->cell[e->id], iw);
	/* A cancellation whose scan ran before we were registered set its
	 * flag before the scan took the scope or registry lock we have since
	 * taken, or before its fence that pairs with our cell_use() (a local
	 * wait: before it pushed our cell, which our executor looks at only
	 * after running us): we see it here and claim the wait ourselves. */
	if (cbcmn__task_cancelled_here(self)) { /* a fiber actor's inline */
		uint32_t s = CBCMN__IW_WAITING;
		if (atomic_compare_exchange_strong_explicit(&iw->state, &s, CBCMN__IW_CANCELLED,
							    memory_order_acq_rel,
							    memory_order_acquire)) {
			if (iw->on_cancel) {
				/* Undo what is in flight; the event wakes us. */
				iw->on_cancel(iw);
				return true;
			}
			atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
			if (!iw->local)
				reg_leave(self, iw);
			else if (iw->cell)
				cbcmn__iwait_local_unlink(iw); /* still on e's thread */
			return false;
		}
		/* The event won: its wake is on the way, suspend for it. */
	}
	return true;
}

uint32_t cbcmn__iwait_block(struct cbcmn__iwait *iw)
{
	struct cbcmn_task *self = iw->w.task;
	if (!self) {
		cbcmn__waiter_wait(&iw->w);
		return atomic_load_explicit(&iw->state, memory_order_acquire);
	}
	if (!block_begin(self, iw))
		return CBCMN__IW_CANCELLED;
	cbcmn__suspend(self);
	reg_leave(self, iw);
	return atomic_load_explicit(&iw->state, memory_order_acquire);
}

bool cbcmn__iwait_begin(struct cbcmn__iwait *iw)
{
	return block_begin(iw->w.task, iw);
}

uint32_t cbcmn__iwait_end(struct cbcmn__iwait *iw)
{
	reg_leave(iw->w.task, iw);
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

void cbcmn__iwait_local_kick(struct cbcmn__iwait *iw)
{
	struct cbcmn__wcell *c = iw->cell;
	if (!c)
		return; /* listed nowhere: nothing cancellation ends */
	struct cbcmn__exec *e = iw->w.task->exec;
	cell_push(e->rt, c, e->id);
	cbcmn__io_cancel_flag(e);
}

bool cbcmn__iwait_cells_run(struct cbcmn__exec *e)
{
	/* acquire: pairs with the release CAS in cell_push(). */
	struct cbcmn__wcell *c = atomic_exchange_explicit(&e->cancel_cells, NULL, memory_order_acquire);
	bool sent = false;
	uint64_t visits = 0;
	while (c) {
		struct cbcmn__wcell *next = c->qnext;
		/* acq_rel: pairs with cell_push()'s exchange, before we look
		 * at the waits: a cancellation that found c still pushed is
		 * seen by this walk. */
		atomic_exchange_explicit(&c->queued, 0, memory_order_acq_rel);
		struct cbcmn__iwait *iw, *inext;
		for (iw = c->local; iw; iw = inext) {
			/* Saved first: ending iw may wake it, which unlinks it. */
			inext = iw->next;
			visits++;
			if (cbcmn__iwait_local_cancel(iw))
				sent |= iw->local_end(e, iw);
		}
		scope_unref(c->scope);
		c = next;
	}
	if (visits)
		atomic_fetch_add_explicit(&e->rt->diag_ext.cancel_visits, visits, memory_order_relaxed);
	return sent;
}

/* ---- cancelling -------------------------------------------------------- */

static bool scope_cancelled(const struct cbcmn__scope *s)
{
	return atomic_load_explicit(&s->n->cancelled, memory_order_relaxed) != 0;
}

/* The next scope after s in a preorder walk of top's subtree, leaving out
 * the subtrees of cancelled nurseries: their own cancellation walks them. */
static struct cbcmn__scope *scope_next(struct cbcmn__scope *s, struct cbcmn__scope *top)
{
	for (struct cbcmn__scope *c = s->child; c; c = c->next)
		if (!scope_cancelled(c))
			return c;
	for (; s != top; s = s->parent)
		for (struct cbcmn__scope *x = s->next; x; x = x->next)
			if (!scope_cancelled(x))
				return x;
	return NULL;
}

/* A registry wait, under its registry lock: interrupt it if its task is
 * cancelled and nothing claimed it first. */
static void reg_cancel(struct cbcmn__iwait *iw)
{
	if (!cbcmn__task_cancelled(iw->w.task))
		return; /* the fallback's: another nursery's */
	uint32_t st = CBCMN__IW_WAITING;
	if (!atomic_compare_exchange_strong_explicit(&iw->state, &st, CBCMN__IW_CANCELLED,
						     memory_order_acq_rel, memory_order_acquire))
		return;
	/* The task leaves the registry (or its node) only as it runs again,
	 * through this lock if we may hold its wait, so iw stays valid
	 * meanwhile. */
	if (iw->on_cancel)
		iw->on_cancel(iw);
	else
		/* Through the inject queue: cancellation has no executor of
		 * its own. */
		cbcmn__waiter_wake(&iw->w, NULL);
}

/* Interrupt s's registry waits whose task is cancelled, push its cells
 * with local waits, and mark their executors in flag. */
static uint64_t scope_cancel(struct cbcmn_runtime *rt, struct cbcmn__scope *s, uint64_t *flag)
{
	uint64_t visits = 0;
	for (uint32_t i = 0; i < s->ncell; i++) {
		struct cbcmn__wcell *c = &s->cell[i];
		uint32_t used = atomic_load_explicit(&c->used, memory_order_relaxed);
		if (used & CBCMN__CELL_REG) {
			struct cbcmn__iwait_reg *r = &rt->exec[i]->iwaits;
			cbcmn__mutex_lock(&r->lock);
			for (struct cbcmn__iwait *iw = c->reg; iw; iw = iw->next) {
				visits++;
				reg_cancel(iw);
			}
			for (struct cbcmn__iwnode *nd = c->nodes; nd; nd = nd->next) {
				/* acquire: pairs with node_publish()'s release. */
				struct cbcmn__iwait *iw =
					atomic_load_explicit(&nd->cur, memory_order_acquire);
				if (iw) { /* else its task runs, or blocks in no registry wait */
					visits++;
					CBCMN__PAUSE(CBCMN__P_SCAN_WAIT, iw);
					reg_cancel(iw);
				}
			}
			cbcmn__mutex_unlock(&r->lock);
		}
		if (used & CBCMN__CELL_LOCAL) {
			cell_push(rt, c, i);
			flag[i / 64] |= UINT64_C(1) << (i % 64);
		}
	}
	return visits;
}

static void cancel_scan(struct cbcmn_nursery *n, bool subtree);

void cbcmn__iwait_cancel_scan(struct cbcmn_nursery *n)
{
	cancel_scan(n, true);
}

void cbcmn__iwait_cancel_task_scan(struct cbcmn_nursery *n)
{
	cancel_scan(n, false);
}

static void cancel_scan(struct cbcmn_nursery *n, bool subtree)
{
	struct cbcmn_runtime *rt = n->rt;
	uint64_t flag[CBCMN_MAX_EXECUTORS / 64] = {0}, visits = 0;
	/* Counted before any node is read: a task taking its wait back
	 * after this passes through the registry lock (node_withdraw()). */
	atomic_fetch_add_explicit(&rt->iw_scanning, 1, memory_order_relaxed);
	/* Pairs with the fence in cell_use(), and with the fences of
	 * node_publish() and node_withdraw(): our flag (the CAS before) and
	 * our count are seen by the other side, or we see its first use of
	 * a cell, its published wait, or its wait taken back. */
	iw_fence();
	cbcmn__mutex_lock(&rt->scope_lock);
	/* Under the lock: n's scope and its subtree stay linked meanwhile
	 * (cbcmn__scope_drop() takes it), and a scope made after we let go
	 * is made by a task that then sees our flag. */
	struct cbcmn__scope *top = atomic_load_explicit(&n->scope, memory_order_relaxed);
	for (struct cbcmn__scope *s = top; s; s = subtree ? scope_next(s, top) : NULL)
		visits += scope_cancel(rt, s, flag);
	visits += scope_cancel(rt, rt->scope_fallback, flag);
	cbcmn__mutex_unlock(&rt->scope_lock);
	/* release: a task that reads the count back at zero (acquire) comes
	 * after our last touch of its wait. */
	atomic_fetch_sub_explicit(&rt->iw_scanning, 1, memory_order_release);
	/* Local waits: each executor holding some looks at those. */
	for (uint32_t i = 0; i < rt->nexec; i++)
		if (flag[i / 64] & (UINT64_C(1) << (i % 64)))
			cbcmn__io_cancel_flag(rt->exec[i]);
	if (visits)
		atomic_fetch_add_explicit(&rt->diag_ext.cancel_visits, visits, memory_order_relaxed);
}

/* Have e look at the cells pushed on it, and kick it only if it may be
 * asleep with I/O waits: an executor that is running looks between tasks
 * (we are one of those tasks when e is ours), and one asleep with no I/O
 * waits has nothing to look for.  An exchange, not a store: the
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
