/* task.c: task records, spawning, completion, join and the cancel check. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "actor.h"
#include "probes.h"
#include "runtime.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

#define TASK_CACHE_MAX 1024u /* free task records kept per executor */
#define ID_BLOCK 1024u       /* task ids an executor takes at once */

static uint64_t next_id(struct cbcmn_runtime *rt, struct cbcmn__exec *e)
{
	if (!e)
		return atomic_fetch_add_explicit(&rt->next_id_block, 1, memory_order_relaxed) + 1;
	if (e->id_next == e->id_end) {
		e->id_next = atomic_fetch_add_explicit(&rt->next_id_block, ID_BLOCK,
						       memory_order_relaxed) + 1;
		e->id_end = e->id_next + ID_BLOCK;
	}
	return e->id_next++;
}

/* Task records are recycled by the executor that allocated them: one that
 * another executor frees (a stolen task) goes back on its home's remote
 * list, a lock-free stack that only the home empties, all at once (so no
 * ABA).  Freeing into a foreign malloc arena instead would serialise the
 * executors on glibc's arena locks. */
#define HOME_NONE UINT32_MAX

/* Records start on a cache line (their hot lines are runtime.h's), aligned
 * by hand inside a plain malloc: glibc's aligned_alloc() splits chunks, and
 * fork-join churns through records past the cache (fib(30) spent 8 % of
 * its time in _int_memalign and the consolidation after it).  malloc's
 * 16-byte alignment leaves at most 48 bytes to skip, kept in mem_off. */
#define TASK_ALLOC_SLACK (CBCMN__CACHELINE - 16)

static struct cbcmn_task *task_alloc(void)
{
	char *m = cbcmn__malloc(sizeof(struct cbcmn_task) + TASK_ALLOC_SLACK);
	if (!m)
		return NULL;
	uintptr_t at = ((uintptr_t)m + CBCMN__CACHELINE - 1) & ~(uintptr_t)(CBCMN__CACHELINE - 1);
	if (at - (uintptr_t)m > TASK_ALLOC_SLACK) /* malloc aligns less than 16 */
		at = (uintptr_t)m;
	struct cbcmn_task *t = (struct cbcmn_task *)at;
	t->mem_off = (uint8_t)(at - (uintptr_t)m);
	return t;
}

static void task_release(struct cbcmn_task *t)
{
	free((char *)t - t->mem_off);
}

/* Records in stacks (CBCMN_CONFIG_RECORD_IN_STACK): the record takes the
 * top of its task's own stack, under the descriptor, so that a parked
 * fiber's RSS is its one top page and nothing more (a malloc record was
 * 432 B of it).  The stack is taken at the spawn, not at the first run,
 * and goes back to the pool when the record is freed: the fiber holds a
 * reference to its record from its first run to its exit (sched.c,
 * POST_EXIT), so the stack is never reused under a fiber still on it.
 * mem_off tells such a record apart (a malloc record's is at most 48). */
_Static_assert(sizeof(struct cbcmn_task) <= CBCMN__STACK_RECORD_SPAN &&
		       CBCMN__STACK_RECORD_SPAN % CBCMN__CACHELINE == 0 &&
		       CBCMN__STACK_RECORD_SPAN + sizeof(struct cbcmn__stack) < 4096,
	       "a record fits under the descriptor, on a cache line, in the top page");

static struct cbcmn_task *task_in_stack(struct cbcmn_runtime *rt, struct cbcmn__exec *e)
{
	struct cbcmn__stack *s = cbcmn__stack_get(&rt->stacks, &e->stacks);
	if (!s)
		return NULL; /* a malloc record: the first run tries again */
	struct cbcmn_task *t = (struct cbcmn_task *)((char *)s - CBCMN__STACK_RECORD_SPAN);
#ifdef __SANITIZE_ADDRESS__
	/* A fiber that ran here last may have left its frames' redzones
	 * poisoned where the record goes. */
	__asan_unpoison_memory_region(t, CBCMN__STACK_RECORD_SPAN);
#endif
	s->holds_task = CBCMN__HOLDS_UNSTARTED;
	/* Relaxed: a count run_task() only uses to choose between waiting
	 * for a stack and failing. */
	atomic_fetch_add_explicit(&rt->stacks.held_unstarted, 1, memory_order_relaxed);
	t->mem_off = CBCMN__MEM_IN_STACK;
	return t;
}

static void task_in_stack_free(struct cbcmn_task *t, struct cbcmn__exec *e)
{
	struct cbcmn__stack *s = cbcmn__task_own_stack(t);
	if (s->holds_task == CBCMN__HOLDS_UNSTARTED) /* never ran on it (inline, cancelled) */
		atomic_fetch_sub_explicit(&t->rt->stacks.held_unstarted, 1, memory_order_relaxed);
	s->holds_task = 0;
	/* e is the calling executor (its cache is owner-only) or NULL: the
	 * shared pool, under its lock. */
	cbcmn__stack_put(&t->rt->stacks, e ? &e->stacks : NULL, s);
}

/* Free lists are chains through next, and reusing a record walked them a
 * miss at a time: a record a thief freed and sent home is in the thief's
 * cache, and the next spawn's prefetch of it (one ahead) came too late
 * (task_new, 17 % of spawn's profile).  So a record in a batch going home
 * also links the one FREE_SKIP below it in the batch (free_skip, a field
 * the record does not use while free), which the spawn that pops it
 * fetches: FREE_SKIP spawns ahead, without walking the chain.  The home
 * takes the batches whole and pops them in order (its own frees go on
 * top), so the link names a record still free.  Records the home frees
 * itself link nothing: they are hot, and pops and pushes interleave there
 * (fork-join), so a link would name a record back in use, whose lines a
 * prefetch for writing would pull from the task running it. */
#define FREE_SKIP 4u
_Static_assert(FREE_SKIP == sizeof(((struct cbcmn__exec *)0)->out_recent) / sizeof(void *),
	       "one recent record per skip");

/* A record about to be reused: its lines, for writing. */
static inline void prefetch_record(const struct cbcmn_task *t)
{
	for (size_t off = 0; off < sizeof(*t); off += CBCMN__CACHELINE)
		__builtin_prefetch((const char *)t + off, 1);
}

struct cbcmn_task *cbcmn__task_new(struct cbcmn_runtime *rt, struct cbcmn__exec *e)
{
	struct cbcmn_task *t = NULL;
	if (e && (rt->cfg.flags & CBCMN_CONFIG_RECORD_IN_STACK))
		t = task_in_stack(rt, e);
	if (e && !t) {
		if (!e->free_tasks && atomic_load_explicit(&e->remote_free, memory_order_relaxed)) {
			/* acquire: pairs with the release CAS in task_free(). */
			e->free_tasks = atomic_exchange_explicit(&e->remote_free, NULL,
								 memory_order_acquire);
			/* Its length (task_free): a hint, exact unless a push
			 * was in flight. */
			uint32_t n = atomic_exchange_explicit(&e->remote_n, 0, memory_order_relaxed);
			e->nfree_tasks = n < TASK_CACHE_MAX ? n : TASK_CACHE_MAX;
		}
		if ((t = e->free_tasks)) {
			e->free_tasks = t->next;
			/* Empty means none cached, whatever the hint said: a
			 * count left high would send every later free to
			 * malloc (it did, after each remote grab). */
			if (!e->free_tasks)
				e->nfree_tasks = 0;
			else if (e->nfree_tasks)
				e->nfree_tasks--;
			/* The next spawn's record, while this spawn goes on: a
			 * record freed by a thief is in the thief's cache, and
			 * reading its next link was a miss on every spawn; and
			 * the one FREE_SKIP spawns ahead (free_link()). */
			if (e->free_tasks)
				__builtin_prefetch(e->free_tasks, 1);
			if (t->free_skip)
				prefetch_record(t->free_skip);
		}
	}
	if (!t && !(t = task_alloc()))
		return NULL;
	/* Field by field, not memset: a 300-byte rep stos costs more than
	 * the stores, on the path every spawn takes.  The budget fields are
	 * set by the caller (budget.c). */
	t->sp = NULL;
	t->stack = NULL;
	t->stack_room = 0;
	t->exec = NULL;
	t->rt = rt;
	t->arg = NULL;
	t->nursery = NULL;
	t->open = NULL;
	t->inline_parent = NULL;
	t->next = NULL;
	t->result = 0;
	t->id = next_id(rt, e);
	t->abi_slot = NULL;
	t->landing = NULL;
	t->iwn = NULL;
	t->flags = 0;
	t->home = e ? e->id : HOME_NONE;
	t->shard = 0;
	t->io_timeout_ns = 0;
	atomic_init(&t->joined, 0);
	for (int c = 0; c < CBCMN__B_N; c++)
		atomic_init(&t->refund[c], 0);
	atomic_init(&t->killed, 0);
	t->payer = NULL;
	t->payer_ref = false;
	atomic_init(&t->payer_held, false);
	t->budget_closed = false;
	atomic_init(&t->owed, 0);
	atomic_init(&t->owed_exh, 0);
	atomic_init(&t->owed_spawns, 0);
	atomic_init(&t->owed_exh_spawns, 0);
	t->gives_spawns = false;
	atomic_init(&t->budget_iw, NULL);
	t->unwind_result = 0;
	t->lane_e1 = 0;
	t->obligations = NULL;
	t->wait_kind = CBCMN__G_OTHER; /* every wait site sets its own (diag.h) */
	return t;
}

/* Push the chain head..tail of n records onto home's remote-free list.
 * remote_n counts the list for its home's cache (a hint: off by the pushes
 * in flight at a grab).  The list is not bounded: a bound that sent the
 * records to free() on the thief (glibc's cross-arena free) cost spawn
 * 10 % and the next burst its page faults (docs/BENCHMARKS.md). */
static void remote_push(struct cbcmn__exec *home, struct cbcmn_task *head_in,
			struct cbcmn_task *tail, uint32_t n)
{
	atomic_fetch_add_explicit(&home->remote_n, n, memory_order_relaxed);
	struct cbcmn_task *head = atomic_load_explicit(&home->remote_free, memory_order_relaxed);
	do
		tail->next = head;
	while (!atomic_compare_exchange_weak_explicit(&home->remote_free, &head, head_in,
						      memory_order_release, memory_order_relaxed));
}

/* Send e's batch of records home (one CAS on the home's line for up to
 * OUTBOX_MAX records, where each stolen task's record took one). */
static void outbox_flush(struct cbcmn__exec *e)
{
	if (!e->out_n)
		return;
	remote_push(e->rt->exec[e->out_home], e->out_head, e->out_tail, e->out_n);
	e->out_head = e->out_tail = NULL;
	e->out_n = 0;
}

#define OUTBOX_MAX 32u

void cbcmn__task_outbox_flush(struct cbcmn__exec *e)
{
	outbox_flush(e);
}

static void task_send_home(struct cbcmn_task *t, struct cbcmn__exec *e)
{
	if (!e) { /* a thread outside the runtime: no batch of its own */
		t->next = NULL;
		t->free_skip = NULL;
		remote_push(t->rt->exec[t->home], t, t, 1);
		return;
	}
	if (e->out_n && e->out_home != t->home)
		outbox_flush(e);
	if (!e->out_n) {
		e->out_home = t->home;
		e->out_tail = t;
		memset(e->out_recent, 0, sizeof(e->out_recent));
	}
	t->next = e->out_head;
	e->out_head = t;
	uint32_t i = e->out_n % FREE_SKIP;
	t->free_skip = e->out_recent[i];
	e->out_recent[i] = t;
	if (++e->out_n == OUTBOX_MAX)
		outbox_flush(e);
}

static void task_free(struct cbcmn_task *t, struct cbcmn__exec *e)
{
	if (cbcmn__task_in_stack(t)) {
		task_in_stack_free(t, e);
	} else if (t->home == HOME_NONE) {
		task_release(t);
	} else if (e && t->home == e->id) {
		if (e->nfree_tasks < TASK_CACHE_MAX) {
			t->next = e->free_tasks;
			e->free_tasks = t;
			e->nfree_tasks++;
			t->free_skip = NULL;
		} else {
			task_release(t);
		}
	} else {
		task_send_home(t, e);
	}
}

void cbcmn__task_free_cache(struct cbcmn__exec *e)
{
	/* Its batch for another executor: back to malloc (that one may have
	 * drained its caches already). */
	while (e->out_head) {
		struct cbcmn_task *x = e->out_head;
		e->out_head = x->next;
		task_release(x);
	}
	e->out_tail = NULL;
	e->out_n = 0;
	struct cbcmn_task *lists[2] = {
		e->free_tasks, atomic_exchange_explicit(&e->remote_free, NULL, memory_order_acquire)};
	for (int i = 0; i < 2; i++) {
		while (lists[i]) {
			struct cbcmn_task *t = lists[i];
			lists[i] = t->next;
			task_release(t);
		}
	}
	e->free_tasks = NULL;
	e->nfree_tasks = 0;
	atomic_store_explicit(&e->remote_n, 0, memory_order_relaxed);
}

void cbcmn__task_unref(struct cbcmn_task *t, struct cbcmn__exec *e)
{
	/* The sole owner needs no locked instruction: nobody else can take a
	 * reference.  acquire pairs with the other owner's release below.
	 * A record holds its payer until it goes (a late refund to it passes
	 * on to the payer, budget.c): then the payer's reference goes too, a
	 * loop rather than a recursion down a long chain of payers. */
	while (t && (atomic_load_explicit(&t->refs, memory_order_acquire) == 1 ||
		     atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) == 1)) {
		/* Taken in cbcmn__budget_payer() or as t ended (budget.c). */
		struct cbcmn_task *payer = t->payer_ref ? t->payer : NULL;
		task_free(t, e);
		t = payer;
	}
}

bool cbcmn__nursery_chain_walk(const struct cbcmn_nursery *n)
{
	/* The chain of enclosing nurseries stays alive while anything inside
	 * it does (each is awaited before its opener ends).  A late
	 * observation only delays the stop to the next check; acquire pairs
	 * with the release CAS in cbcmn__nursery_cancel(): a task that ends
	 * for what it saw ends after the canceller's hold (nursery.c). */
	for (; n; n = n->parent)
		if (atomic_load_explicit(&n->cancelled, memory_order_acquire))
			return true;
	return false;
}

bool cbcmn__task_interrupted(const struct cbcmn_task *t)
{
	/* A stopped actor counts as cancelled: its private flag (actor.c). */
	return cbcmn__nursery_chain_cancelled(t->nursery) ||
	       (__builtin_expect(cbcmn__is_actor_task(t), 0) && cbcmn__actor_stopped(t));
}

bool cbcmn__task_cancelled(const struct cbcmn_task *t)
{
	/* A task in a halt too: every wait checks for a cancellation before
	 * it parks, and returns at once for one (issue 16).  Read by a
	 * cancellation's scan only for a task with a wait listed, which a
	 * task in a halt lists only to claim it at once, under the lock the
	 * scan takes (iwait.c).  A fiber actor's, the same, inline. */
	if (cbcmn__is_actor_task(t))
		return cbcmn__actor_cancelled(t, t->arg);
	return cbcmn__task_interrupted(t) || cbcmn__task_in_halt(t);
}

void cbcmn__task_complete(struct cbcmn_task *t, int64_t result)
{
	struct cbcmn__exec *e = t->exec;
	struct cbcmn_nursery *n = t->nursery;
	/* Reservations it never resolved: abort them, report the leak. */
	if (__builtin_expect(t->obligations != NULL, 0))
		result = cbcmn__obligations_settle(t, result);
	/* An actor halts before its nursery hears of it (actor.c). */
	if (__builtin_expect(cbcmn__is_actor_task(t), 0))
		result = cbcmn__actor_halt(t, result);
	else if (__builtin_expect(!(t->flags & CBCMN__TF_ABI) && t->fn == cbcmn__hnd_host_main, 0))
		result = cbcmn__hnd_host_end(t, result);
	t->result = result;
	if (__builtin_expect(t->abi_slot != NULL, 0))
		cbcmn__abi_slot_release(t);
	if (!t->budget_closed) /* an actor's halt gave it back (actor.c) */
		cbcmn__budget_leftover(t);
	atomic_store_explicit(&t->state, CBCMN__T_DONE, memory_order_relaxed);
	bool own = t->flags & CBCMN__TF_RUNTIME;
	if (own)
		cbcmn__runtime_count_begin(t->rt);
	if (e)
		CBCMN__COUNT(e, completions, 1);
	else
		atomic_fetch_add_explicit(&t->rt->seg.hdr->ext_completions, 1, memory_order_relaxed);
	if (own) {
		atomic_fetch_sub_explicit(&t->rt->runtime_tasks, 1, memory_order_relaxed);
		cbcmn__runtime_count_end(t->rt);
	}
	if (t->flags & CBCMN__TF_HANDLE) {
		/* acq_rel: release publishes result to the joiner, who acquires
		 * JOIN_DONE; acquire sees a waiter it registered. */
		struct cbcmn__waiter *w = atomic_exchange_explicit(&t->joiner, CBCMN__JOIN_DONE,
								   memory_order_acq_rel);
		if (w)
			cbcmn__waiter_wake(w, e);
	}
	/* Last: after this the nursery, and its opener, may be gone. */
	cbcmn__nursery_child_done(n, (t->flags & CBCMN__TF_RUNTIME) ? 0 : result, e,
				  t->inline_parent);
	cbcmn__task_unref(t, e);
}

/* Spawn's two halves, inline in cbcmn__spawn() (fork-join's path) and
 * apart for actor spawns (cbcmn__spawn_pay()). */
static inline __attribute__((always_inline)) int
spawn_pay(struct cbcmn_task *self, struct cbcmn_nursery *n, const cbcmn_spawn_opts *opts,
	  const cbcmn_budget *ask, struct cbcmn__spawn_paid *paid)
{
	struct cbcmn_runtime *rt = n->rt;
	uint32_t flags = 0;
	*paid = (struct cbcmn__spawn_paid){0};
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED;
	if (self && self->rt != rt)
		return CBCMN_EWRONGRT;
	/* A task's context used from another thread (a cbcmn_blocking()
	 * function's): the child would be made from, and queued on, the
	 * task's executor's own cache and deque, which only that executor's
	 * thread may touch. */
	if (self && !cbcmn__is_running(self))
		return -EPERM;
	uint32_t place = opts ? opts->placement : CBCMN_PLACE_LOCAL;
	uint32_t shard = opts ? opts->shard : 0;
	if (place > CBCMN_PLACE_STEALABLE ||
	    ((place == CBCMN_PLACE_PINNED || place == CBCMN_PLACE_STEALABLE_ON) && shard >= cbcmn__nworkers(rt)) ||
	    (place == CBCMN_PLACE_STEALABLE && rt->nexec == 0))
		return -EINVAL;
	if (place == CBCMN_PLACE_PINNED) {
		flags |= CBCMN__TF_PINNED;
		int err = cbcmn__shard_unstartable(rt, shard);
		if (err)
			return err;
	}
	cbcmn__stack_check(self);
	if (atomic_load_explicit(&n->closing, memory_order_relaxed))
		return CBCMN_ECLOSED;
	/* Spawning into a cancelled scope would start work nobody wants. */
	if (cbcmn__nursery_chain_cancelled(n))
		return CBCMN_ECANCELED;
	/* Nor from a halt's drop: the child's await would park the halt
	 * (cbcmn__task_halting()), and a child nobody awaits outlives it. */
	if (self && cbcmn__task_in_halt(self))
		return CBCMN_ECANCELED;

	bool budgets = !(rt->cfg.flags & CBCMN_CONFIG_NO_BUDGETS);
	if (self && !(self->caps & CBCMN_CAP_SPAWN))
		return CBCMN_ESPAWNDENIED;
	/* Pay first: the spawner may wait here for budget (or be ended).
	 * The child's stack is the spawner's memory until the child ends
	 * (docs/BUDGETS.md, "What memory counts"). */
	uint64_t stack_charge = 0;
	if (self && budgets) {
		cbcmn__charge(self, CBCMN__B_SPAWN, 1); /* the spawn: an op and a spawn */
		/* limited first: an unlimited spawner's memory is unlimited
		 * (cbcmn__budget_consistent()), and the flag is on the line the
		 * charge just read, the memory on the next. */
		if (self->limited && self->memory != CBCMN_UNLIMITED)
			stack_charge = cbcmn__charge_memory(self, rt->cfg.stack_size);
		/* Paying may have waited for budget, and meanwhile n's await_all
		 * may have begun (a spawner outside n) or n been cancelled:
		 * look again, and give the charge back if so. */
		int late = atomic_load_explicit(&n->closing, memory_order_relaxed) ? CBCMN_ECLOSED
			   : cbcmn__nursery_chain_cancelled(n)                     ? CBCMN_ECANCELED
										   : 0;
		if (late) {
			cbcmn__budget_uncharge_spawn(self, stack_charge);
			return late;
		}
		/* A budget the program asked for the child that the spawner
		 * has not got (after the spawn's costs): refused, the spawn
		 * and the stack given back.  Clamped, as it used to be, the
		 * child took all the spawner had, and the spawner's next
		 * spawn waited for a refund only the child's end brings
		 * (docs/BUDGETS.md, "Where budgets come from"). */
		if (ask && self->limited && !cbcmn__budget_ask_fits(self, ask)) {
			cbcmn__budget_uncharge_spawn(self, stack_charge);
			return CBCMN_EBUDGET;
		}
	}
	paid->flags = flags;
	paid->paid = self && budgets;
	paid->stack_charge = stack_charge;
	return 0;
}

void cbcmn__spawn_unpay(struct cbcmn_task *self, const struct cbcmn__spawn_paid *paid)
{
	if (paid->paid)
		cbcmn__budget_uncharge_spawn(self, paid->stack_charge);
}

static inline __attribute__((always_inline)) int
spawn_made(struct cbcmn_task *self, struct cbcmn_nursery *n, uint32_t flags, void *fn, void *arg,
	   const cbcmn_spawn_opts *opts, const struct cbcmn__spawn_paid *paid, cbcmn_task **handle)
{
	struct cbcmn_runtime *rt = n->rt;
	const cbcmn_budget *ask = opts ? opts->budget : NULL;
	const cbcmn_caps *caps = opts ? opts->caps : NULL;
	uint32_t place = opts ? opts->placement : CBCMN_PLACE_LOCAL;
	uint32_t shard = opts ? opts->shard : 0;
	bool budgets = !(rt->cfg.flags & CBCMN_CONFIG_NO_BUDGETS);
	uint64_t stack_charge = paid->stack_charge;
	flags |= paid->flags;
	struct cbcmn__exec *e = cbcmn__waker_of(self);
	struct cbcmn_task *t = cbcmn__task_new(rt, e);
	if (!t) {
		cbcmn__spawn_unpay(self, paid);
		return -ENOMEM;
	}
	t->stack_charge = stack_charge;
	if (self && budgets && !(flags & CBCMN__TF_RUNTIME) && !ask && !caps && !self->limited &&
	    !rt->child_budget_limited && !stack_charge) {
		/* The fork-join spawn, inline: nothing is limited anywhere, so
		 * t is unlimited (cbcmn__budget_draw()'s first case), owes
		 * nobody (cbcmn__budget_payer()'s early return) and holds its
		 * spawner's capabilities (cbcmn__caps_grant() without a want). */
		cbcmn__budget_set_unlimited(t);
		t->caps = self->caps;
		t->cap_limit = self->cap_limit;
	} else {
		if (!budgets || (flags & CBCMN__TF_RUNTIME))
			cbcmn__budget_init_unlimited(t);
		else if (self)
			cbcmn__budget_draw(self, t, ask);
		else
			cbcmn__budget_init_root(t);
		/* What t did not use, and its stack, go back to self when t ends. */
		if (self && budgets)
			cbcmn__budget_payer(self, t, n->owner);
		if (self)
			cbcmn__caps_grant(self, t, caps);
		else if (flags & CBCMN__TF_RUNTIME)
			t->caps = CBCMN_CAP_SPAWN;
		else if (!budgets)
			t->caps = rt->cfg.caps.flags & (CBCMN_CAP_SPAWN | CBCMN_CAP_BUDGET);
	}
	if (flags & CBCMN__TF_ABI)
		t->abi_fn = (int64_t (*)(void *))fn;
	else
		t->fn = (cbcmn_task_fn)fn;
	t->arg = arg;
	t->nursery = n;
	t->opener = n->owner;
	t->flags = flags | (handle ? CBCMN__TF_HANDLE : 0);
	atomic_init(&t->refs, handle ? 2 : 1);
	atomic_init(&t->state, CBCMN__T_READY);
	atomic_init(&t->joiner, NULL);
	/* The opener counts in a plain field (nursery.c); anyone else in
	 * live.  Relaxed: the child can only decrement after it was
	 * published through a queue (release/acquire). */
	if (self == n->owner)
		n->owner_spawns++;
	else
		atomic_fetch_add_explicit(&n->live, CBCMN__LIVE_ONE, memory_order_relaxed);
	if (flags & CBCMN__TF_RUNTIME) {
		cbcmn__runtime_count_begin(rt);
		atomic_fetch_add_explicit(&rt->runtime_tasks, 1, memory_order_relaxed);
	}
	if (e)
		CBCMN__COUNT(e, spawns, 1);
	else
		atomic_fetch_add_explicit(&rt->seg.hdr->ext_spawns, 1, memory_order_relaxed);
	if (flags & CBCMN__TF_RUNTIME)
		cbcmn__runtime_count_end(rt);
	CBCMN_PROBE4(spawn, t->id, self ? self->id : 0, e ? (int)e->id : -1, rt->seg.rt_id);
	if (handle)
		*handle = t;
	switch (place) {
	case CBCMN_PLACE_PINNED:
		t->shard = shard;
		cbcmn__schedule_new(rt, t, e);
		break;
	case CBCMN_PLACE_STEALABLE:
		shard = atomic_fetch_add_explicit(&rt->place_rr, 1, memory_order_relaxed) %
			(cbcmn__nlive(rt) < cbcmn__nworkers(rt) ? cbcmn__nlive(rt)
								: cbcmn__nworkers(rt));
		__attribute__((fallthrough));
	case CBCMN_PLACE_STEALABLE_ON:
		cbcmn__schedule_on(rt, t, e, shard);
		break;
	default:
		cbcmn__schedule_new(rt, t, e);
		break;
	}
	return 0;
}

int cbcmn__spawn(struct cbcmn_task *self, struct cbcmn_nursery *n, uint32_t flags, void *fn,
		 void *arg, const cbcmn_spawn_opts *opts, cbcmn_task **handle)
{
	struct cbcmn__spawn_paid paid;
	int rc = spawn_pay(self, n, opts, opts ? opts->budget : NULL, &paid);
	return rc ? rc : spawn_made(self, n, flags, fn, arg, opts, &paid, handle);
}

int cbcmn__spawn_pay(struct cbcmn_task *self, struct cbcmn_nursery *n, const cbcmn_spawn_opts *opts,
		     const cbcmn_budget *ask, struct cbcmn__spawn_paid *paid)
{
	return spawn_pay(self, n, opts, ask, paid);
}

int cbcmn__spawn_made(struct cbcmn_task *self, struct cbcmn_nursery *n, void *fn, void *arg,
		      const cbcmn_spawn_opts *opts, const struct cbcmn__spawn_paid *paid)
{
	return spawn_made(self, n, 0, fn, arg, opts, paid, NULL);
}

int cbcmn_nursery_spawn(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_task_fn fn, void *arg,
			cbcmn_task **handle)
{
	if (!n || !fn)
		return -EINVAL;
	return cbcmn__spawn((struct cbcmn_task *)cx, n, 0, (void *)fn, arg, NULL, handle);
}

int cbcmn_nursery_spawn_ex(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_task_fn fn, void *arg,
			   const cbcmn_spawn_opts *opts, cbcmn_task **handle)
{
	if (!n || !fn)
		return -EINVAL;
	return cbcmn__spawn((struct cbcmn_task *)cx, n, 0, (void *)fn, arg, opts, handle);
}

static int spawn_placed(cbcmn_cx *cx, cbcmn_nursery *n, uint32_t place, uint32_t shard,
			cbcmn_task_fn fn, void *arg, cbcmn_task **handle)
{
	cbcmn_spawn_opts o = {.placement = place, .shard = shard};
	return cbcmn_nursery_spawn_ex(cx, n, fn, arg, &o, handle);
}

int cbcmn_nursery_spawn_pinned(cbcmn_cx *cx, cbcmn_nursery *n, uint32_t shard, cbcmn_task_fn fn,
			       void *arg, cbcmn_task **handle)
{
	return spawn_placed(cx, n, CBCMN_PLACE_PINNED, shard, fn, arg, handle);
}

int cbcmn_nursery_spawn_stealable_on(cbcmn_cx *cx, cbcmn_nursery *n, uint32_t shard,
				     cbcmn_task_fn fn, void *arg, cbcmn_task **handle)
{
	return spawn_placed(cx, n, CBCMN_PLACE_STEALABLE_ON, shard, fn, arg, handle);
}

int cbcmn_nursery_spawn_stealable(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_task_fn fn, void *arg,
				  cbcmn_task **handle)
{
	return spawn_placed(cx, n, CBCMN_PLACE_STEALABLE, 0, fn, arg, handle);
}

int cbcmn_task_join(cbcmn_cx *cx, cbcmn_task *t, int64_t *result)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!t)
		return -EINVAL;
	if (self == t)
		return -EDEADLK; /* it would wait for itself */
	if (cbcmn__forked(t->rt))
		return CBCMN_EFORKED;
	cbcmn__stack_check(self);
	if (self && self->rt != t->rt)
		return CBCMN_EWRONGRT;
	/* A thread join from an executor thread would block it: refuse. */
	if (!self && cbcmn__on_executor(t->rt))
		return -EDEADLK;
	/* A task's join from another thread (a cbcmn_blocking() function's)
	 * would park that thread as if it were the task's fiber. */
	if (self && !cbcmn__is_running(self))
		return -EPERM;
	/* A halt never waits (cbcmn__task_halting()), nor runs t inline,
	 * where t could park it: only an ended t is joined from there, and
	 * the handle stays joinable otherwise.  acquire: as below. */
	if (self && cbcmn__task_in_halt(self) &&
	    atomic_load_explicit(&t->joiner, memory_order_acquire) != CBCMN__JOIN_DONE)
		return CBCMN_ECANCELED;
	if (!(t->flags & CBCMN__TF_HANDLE) ||
	    atomic_exchange_explicit(&t->joined, 1, memory_order_relaxed))
		return CBCMN_EJOINED;

	/* Not started and on top of our own queue: run it here, no switch. */
	if (self && !(t->rt->cfg.flags & CBCMN_CONFIG_NO_INLINE) &&
	    atomic_load_explicit(&t->joiner, memory_order_relaxed) == NULL) {
		struct cbcmn_task *c = cbcmn__take_local_task(self->exec, t);
		if (c)
			cbcmn__run_inline(self->exec, c);
	}

	/* acquire: pairs with the exchange in cbcmn__task_complete(). */
	if (atomic_load_explicit(&t->joiner, memory_order_acquire) != CBCMN__JOIN_DONE) {
		struct cbcmn__waiter w = {.task = self};
		if (self) {
			self->wait_kind = CBCMN__G_JOIN;
			atomic_store_explicit(&self->state, CBCMN__T_PARKING, memory_order_relaxed);
		}
		struct cbcmn__waiter *expect = NULL;
		if (atomic_compare_exchange_strong_explicit(&t->joiner, &expect, &w,
							    memory_order_acq_rel,
							    memory_order_acquire)) {
			/* t exhausted: we are the one that would recharge it. */
			cbcmn__budget_joined(t, cbcmn__waker_of(self));
			cbcmn__waiter_wait(&w);
		} else if (self) {
			/* Completed meanwhile (expect == JOIN_DONE). */
			atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
		}
	}
	if (result)
		*result = t->result;
	cbcmn__task_unref(t, cbcmn__waker_of(self));
	return 0;
}

uint64_t cbcmn_task_id(const cbcmn_task *t)
{
	return t ? t->id : 0;
}
