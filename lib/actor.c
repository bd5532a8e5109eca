/* actor.c: actors: the table of slots, references, spawn, halt, stop and monitors.
 *
 * An actor is a task of a nursery (a peer of nurseries, not a runtime of
 * its own) whose task argument is its slot.  The slot holds the mailbox
 * (actor_mbox.c) and lives in the runtime's actor table, made on the first
 * spawn: chunks of slots that are only freed with the runtime, so that a
 * reference, (generation, runtime tag, index), can always be checked against the
 * slot it names without touching freed memory (actor.h).
 *
 * Halt runs from cbcmn__task_complete() (task.c's one hook), whatever ended
 * the task: a return, a stop, a cancellation, a panic, a budget given up,
 * its executor's thread dying.  It closes the mailbox (the generation moves
 * on under the slot lock, so every later send misses), fails the waiting
 * senders, drops what is left, delivers DOWN to the monitors, and recycles
 * the slot; all before the nursery learns that the task ended, so an
 * await_all that returns has seen every DOWN delivered.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "actor.h"
#include "arch.h"
#include "iwait.h"
#include "overflow.h"
#include "probes.h"

/* ---- the table ------------------------------------------------------------ */

static struct cbcmn__actors *table_get(struct cbcmn_runtime *rt)
{
	/* acquire: pairs with the release CAS below (the table's init). */
	struct cbcmn__actors *t = atomic_load_explicit(&rt->actors, memory_order_acquire);
	if (t)
		return t;
	if (!(t = cbcmn__calloc(1, sizeof(*t))))
		return NULL;
	cbcmn__mutex_init(&t->lock, "actor table", CBCMN__LOCK_ACTOR_TABLE);
	cbcmn__mutex_init(&t->lw_lock, "lane waits", CBCMN__LOCK_LANE_WAIT);
	/* relaxed: only uniqueness matters; published by the CAS below. */
	static _Atomic uint32_t next_tag;
	t->tag = atomic_fetch_add_explicit(&next_tag, 1, memory_order_relaxed) % CBCMN__REF_TAGS + 1;
	struct cbcmn__actors *old = NULL;
	if (!atomic_compare_exchange_strong_explicit(&rt->actors, &old, t, memory_order_acq_rel,
						     memory_order_acquire)) {
		cbcmn__mutex_destroy(&t->lock);
		cbcmn__mutex_destroy(&t->lw_lock);
		free(t);
		return old;
	}
	return t;
}

static struct cbcmn__actor *slot_at(struct cbcmn__actors *t, uint32_t idx)
{
	/* acquire: pairs with the release of nslots in slot_alloc(): the
	 * chunk pointer and its initialised slots are seen. */
	if (idx >= atomic_load_explicit(&t->nslots, memory_order_acquire))
		return NULL;
	struct cbcmn__actor *c = atomic_load_explicit(&t->chunk[idx >> CBCMN__ACTOR_CHUNK_SHIFT],
						      memory_order_relaxed);
	return &c[idx & (CBCMN__ACTOR_CHUNK - 1)];
}

/* Slots move between the table and an executor's cache a batch at a
 * time: one table lock per SLOT_BATCH spawns or halts on an executor,
 * where each took it (8 % of skynet's samples, contended by the two
 * executors' hosts: docs/BENCHMARKS.md).  An executor holds at most two
 * batches, the one it takes from and gives to and a full one, so a spawn
 * and halt storm at a batch's edge does not go to the table each time.
 * A cached slot is FREE with its generation moved on, like one on the
 * table's list: references to its last actor fail the same way. */
#define SLOT_BATCH 32u


/* The calling thread's executor, if it is one of rt's (it has a cache). */
static struct cbcmn__exec *cache_of(const struct cbcmn_runtime *rt)
{
	struct cbcmn__exec *e = cbcmn__tls_exec;
	return e && e->rt == rt ? e : NULL;
}

/* A slot never used (t locked), or NULL: 4 Mi made, or no memory. */
static struct cbcmn__actor *slot_new_locked(struct cbcmn_runtime *rt, struct cbcmn__actors *t)
{
	uint32_t n = atomic_load_explicit(&t->nslots, memory_order_relaxed);
	uint32_t ci = n >> CBCMN__ACTOR_CHUNK_SHIFT;
	if (ci >= CBCMN__ACTOR_CHUNKS)
		return NULL; /* 4 Mi actors alive: -ENOMEM */
	struct cbcmn__actor *c = atomic_load_explicit(&t->chunk[ci], memory_order_relaxed);
	if (!c) {
		/* One slot more than the chunk's, so that its slots can begin
		 * a line (struct cbcmn__actor: a hop touches its first lines
		 * only if they are lines); calloc gives 16 bytes. */
		char *mem = cbcmn__calloc(CBCMN__ACTOR_CHUNK + 1, sizeof(*c));
		if (!mem)
			return NULL;
		c = (struct cbcmn__actor *)(((uintptr_t)mem + _Alignof(struct cbcmn__actor) - 1) &
					    ~(uintptr_t)(_Alignof(struct cbcmn__actor) - 1));
		t->chunk_mem[ci] = mem;
		for (uint32_t i = 0; i < CBCMN__ACTOR_CHUNK; i++) {
			cbcmn__flock_init(&c[i].lock, "actor", CBCMN__LOCK_ACTOR);
			c[i].index = (ci << CBCMN__ACTOR_CHUNK_SHIFT) | i;
			c[i].gen = 1;
			c[i].rt = rt;
		}
		atomic_store_explicit(&t->chunk[ci], c, memory_order_relaxed);
	}
	/* release: the chunk and its slots before the count that admits
	 * them (slot_at()). */
	atomic_store_explicit(&t->nslots, n + 1, memory_order_release);
	return &c[n & (CBCMN__ACTOR_CHUNK - 1)];
}

/* Give the chain head (n free slots linked by free_next) to the table as
 * one batch, with its spare rings while the table keeps no more than
 * CBCMN__TABLE_SPARE_MAX messages' room in them: an executor that halts
 * more actors than it spawns (skynet's thief, whose stolen children end
 * there) passes its slots to the one that spawns, and freeing their rings
 * on the way made a malloc and a free per actor, the free in another
 * thread's arena.  The bound is read before the lock (the rings must be
 * freed before the batch is anyone's), so racing puts may pass it by a
 * batch each. */
static void batch_put(struct cbcmn__actors *t, struct cbcmn__actor *head, uint32_t n)
{
	uint32_t msgs = 0, kept = atomic_load_explicit(&t->spare_msgs, memory_order_relaxed);
	for (struct cbcmn__actor *a = head; a; a = a->free_next)
		msgs += a->spare_cap;
	if (kept > CBCMN__TABLE_SPARE_MAX || msgs > CBCMN__TABLE_SPARE_MAX - kept) {
		for (struct cbcmn__actor *a = head; a; a = a->free_next) {
			free(a->spare);
			a->spare = NULL;
			a->spare_cap = 0;
		}
		msgs = 0;
	}
	head->batch_n = n;
	head->batch_spare = msgs;
	cbcmn__mutex_lock(&t->lock);
	atomic_store_explicit(&t->spare_msgs,
			      atomic_load_explicit(&t->spare_msgs, memory_order_relaxed) + msgs,
			      memory_order_relaxed);
	head->batch_next = t->batches;
	t->batches = head;
	cbcmn__mutex_unlock(&t->lock);
}

/* A batch of free slots from the table into *n: at most want slots (the
 * rest of a bigger batch stays there), fresh ones if it has none.  NULL:
 * none could be made. */
static struct cbcmn__actor *batch_get(struct cbcmn_runtime *rt, struct cbcmn__actors *t,
				     uint32_t want, uint32_t *n)
{
	struct cbcmn__actor *head = NULL, *a;
	*n = 0;
	cbcmn__mutex_lock(&t->lock);
	if ((head = t->batches)) {
		t->batches = head->batch_next;
		*n = head->batch_n;
		uint32_t taken = head->batch_spare; /* its rings leave with it */
		if (*n > want) { /* a thread's one slot: the rest stays a batch */
			struct cbcmn__actor *rest = head->free_next;
			rest->batch_n = *n - 1;
			rest->batch_spare = head->batch_spare - head->spare_cap;
			rest->batch_next = t->batches;
			t->batches = rest;
			head->free_next = NULL;
			*n = 1;
			taken = head->spare_cap;
		}
		atomic_store_explicit(&t->spare_msgs,
				      atomic_load_explicit(&t->spare_msgs, memory_order_relaxed) - taken,
				      memory_order_relaxed);
	} else {
		/* In index order: neighbours spawned together sit together. */
		struct cbcmn__actor **tail = &head;
		while (*n < want && (a = slot_new_locked(rt, t))) {
			*tail = a;
			tail = &a->free_next;
			(*n)++;
		}
		*tail = NULL;
	}
	cbcmn__mutex_unlock(&t->lock);
	return head;
}

static struct cbcmn__actor *slot_alloc(struct cbcmn_runtime *rt, struct cbcmn__actors *t)
{
	struct cbcmn__exec *e = cache_of(rt);
	uint32_t n;
	if (!e)
		return batch_get(rt, t, 1, &n);
	if (!e->free_slots) {
		if (e->full_slots) {
			e->free_slots = e->full_slots;
			e->full_slots = NULL;
			e->nfree_slots = SLOT_BATCH;
		} else if (!(e->free_slots = batch_get(rt, t, SLOT_BATCH, &e->nfree_slots))) {
			return NULL;
		}
	}
	struct cbcmn__actor *a = e->free_slots;
	e->free_slots = a->free_next;
	e->nfree_slots--;
	/* The next spawn's slot, for writing, while this spawn goes on:
	 * spawns come in runs (a parent's children), and a slot freed
	 * thousands of halts ago is cold: reading its free_next and the
	 * spawn's stores to its lines were a miss each (skynet: the pop
	 * alone was half of spawn's samples).  Every line the spawn writes,
	 * up to the one message's (docs/BENCHMARKS.md, "Twenty-fourth
	 * session, skynet's spawns"). */
	if (e->free_slots)
		CBCMN__PREFETCH_RANGE(e->free_slots, &e->free_slots->one_msg, 1);
	return a;
}

/* a, halted (FREE), back to the calling executor's cache, or the table. */
static void slot_free(struct cbcmn__actors *t, struct cbcmn__actor *a)
{
	a->free_next = NULL;
	/* A generation that wrapped to 0 would make old references valid
	 * again: that slot is retired for good. */
	if (a->gen == 0) {
		free(a->spare);
		a->spare = NULL;
		return;
	}
	struct cbcmn__exec *e = cache_of(a->rt);
	if (!e) {
		batch_put(t, a, 1);
		return;
	}
	if (e->nfree_slots >= SLOT_BATCH) {
		if (e->full_slots)
			batch_put(t, e->full_slots, SLOT_BATCH);
		e->full_slots = e->free_slots;
		e->free_slots = NULL;
		e->nfree_slots = 0;
	}
	a->free_next = e->free_slots;
	e->free_slots = a;
	e->nfree_slots++;
}

void cbcmn__actor_free_cache(struct cbcmn__exec *e)
{
	/* acquire: pairs with table_get()'s CAS (NULL: nothing cached). */
	struct cbcmn__actors *t = atomic_load_explicit(&e->rt->actors, memory_order_acquire);
	if (e->free_slots)
		batch_put(t, e->free_slots, e->nfree_slots);
	if (e->full_slots)
		batch_put(t, e->full_slots, SLOT_BATCH);
	e->free_slots = e->full_slots = NULL;
	e->nfree_slots = 0;
}

struct cbcmn__actor *cbcmn__actor_lock_ref(struct cbcmn_runtime *rt, cbcmn_actor_ref ref)
{
	struct cbcmn__actor *a = cbcmn__actor_slot(rt, ref);
	return a ? cbcmn__actor_lock_slot(a, ref) : NULL;
}

/* A link's record naming peer, with the EXIT message it may become. */
static struct cbcmn__link *link_new(cbcmn_actor_ref peer)
{
	struct cbcmn__link *l = cbcmn__malloc(sizeof(*l));
	struct cbcmn__monitor *x = l ? cbcmn__calloc(1, sizeof(*x)) : NULL;
	if (!x) {
		free(l);
		return NULL;
	}
	l->next = NULL;
	l->peer = peer;
	l->id = 0;
	l->exit = x;
	return l;
}

/* A link's record or a monitor's note (exit NULL), or NULL. */
static void link_free(struct cbcmn__link *l)
{
	if (l) {
		free(l->exit);
		free(l);
	}
}

static void free_links(struct cbcmn__link *l)
{
	while (l) {
		struct cbcmn__link *next = l->next;
		link_free(l);
		l = next;
	}
}

void cbcmn__actors_fini(struct cbcmn_runtime *rt)
{
	struct cbcmn__actors *t = atomic_load_explicit(&rt->actors, memory_order_acquire);
	if (!t)
		return;
	uint32_t n = atomic_load_explicit(&t->nslots, memory_order_relaxed);
	for (uint32_t ci = 0; ci < CBCMN__ACTOR_CHUNKS; ci++) {
		struct cbcmn__actor *c = atomic_load_explicit(&t->chunk[ci], memory_order_relaxed);
		if (!c)
			break;
		for (uint32_t i = 0; i < CBCMN__ACTOR_CHUNK; i++) {
			struct cbcmn__actor *a = &c[i];
			/* Every actor has halted (their nurseries were awaited):
			 * what is left are monitors on slots never reused. */
			if (a->index < n) {
				if (a->ring != &a->one_msg)
					free(a->ring);
				free_links(a->links);
				free_links(a->watching);
				struct cbcmn__monitor *lists[2] = {a->sys_head, a->watched_by};
				for (int l = 0; l < 2; l++)
					while (lists[l]) {
						struct cbcmn__monitor *m = lists[l];
						lists[l] = m->next;
						free(m);
					}
			}
			free(a->spare); /* a cache never drained (its executor never ran) */
		}
		free(t->chunk_mem[ci]);
	}
	cbcmn__mutex_destroy(&t->lock);
	cbcmn__mutex_destroy(&t->lw_lock);
	free(t);
	atomic_store_explicit(&rt->actors, NULL, memory_order_relaxed);
}

/* What a stop does once the slot is unlocked (lock ranks: the scope and
 * registry locks, and a nursery's, come before a slot's): interrupt the
 * stopped actor's wait other than a receive, and cancel the nursery it
 * awaits.  Each nursery held (cbcmn_nursery_hold()) while the actor was
 * seen LIVE under its lock, so that it outlives the actor's end. */
struct stop_post {
	struct cbcmn_nursery *scan, *join;
};

/* Stop the locked actor a with reason (first reason wins). */
static void stop_locked(struct cbcmn__actor *a, int64_t reason, struct cbcmn__wakes *wl,
			struct stop_post *post)
{
	if (a->stopping)
		return;
	a->stopping = true;
	a->stop_reason = reason;
	/* seq_cst: its task sees it at its next check (acquire, in
	 * cbcmn__actor_stopped()), and a wait it registers after our scan's
	 * look is caught by its own check after registering (iwait.c). */
	atomic_store_explicit(&a->interrupted, 1, memory_order_seq_cst);
	/* Waiting in receive: that wait ends here, there is no other.  Else
	 * it may wait elsewhere (or run, and see the flag at its next call):
	 * look through its nursery's waits for its own. */
	if (!cbcmn__mb_stop(a, wl) && a->nursery) {
		cbcmn_nursery_hold(a->nursery);
		post->scan = a->nursery;
	}
	if (a->joining) {
		cbcmn_nursery_hold(a->joining);
		post->join = a->joining;
	}
}

static void stop_finish(struct stop_post *post)
{
	if (post->scan) {
		cbcmn__iwait_cancel_task_scan(post->scan);
		cbcmn_nursery_release(post->scan);
	}
	if (post->join) {
		cbcmn_nursery_cancel(post->join); /* -ESRCH: over already */
		cbcmn_nursery_release(post->join);
	}
	*post = (struct stop_post){0};
}

/* Remove the first record naming peer with id (0: a link, else a
 * monitor's note) from *list; it, or NULL. */
static struct cbcmn__link *rec_take(struct cbcmn__link **list, cbcmn_actor_ref peer, uint64_t id)
{
	for (; *list; list = &(*list)->next) {
		struct cbcmn__link *l = *list;
		if (l->peer == peer && l->id == id) {
			*list = l->next;
			return l;
		}
	}
	return NULL;
}

static struct cbcmn__link *link_take(struct cbcmn__link **list, cbcmn_actor_ref peer)
{
	return rec_take(list, peer, 0);
}

/* Remove monitor id of watcher from the locked target's list; it, or NULL. */
static struct cbcmn__monitor *monitor_take(struct cbcmn__actor *target, cbcmn_actor_ref watcher,
					   uint64_t id)
{
	for (struct cbcmn__monitor **p = &target->watched_by; *p; p = &(*p)->next)
		if ((*p)->id == id && (*p)->watcher == watcher) {
			struct cbcmn__monitor *m = *p;
			*p = m->next;
			return m;
		}
	return NULL;
}

/* ---- halt ----------------------------------------------------------------- */

/* End the actor in a with reason: close the mailbox, fail the senders,
 * drop what is left, tell the monitors, recycle the slot.  e: the calling
 * executor, or NULL.  Returns the halt reason (a stop's wins).
 *
 * Two halves: halt_begin() takes the slot under its lock (the generation
 * moves on: nobody reaches it by reference any more), halt_finish() does
 * the rest from what the slot still holds, taking each thing off it
 * before it deals with it.  The program's callbacks (drop, fini) run in
 * the second half, and a task may end inside one (its thread's end, a
 * stack overflow, its budget: cbcmn__actor_halt()); the halt then goes
 * on from where it was, in the same slot, instead of halting it a second
 * time, which lost the first half's DOWN messages (issue 16).  The
 * message or fini that task was in counts as given to it.
 *
 * held: messages dropped before the halt that its monitors count as
 * undelivered with the mailbox's (a handler actor's RETRY). */
static void halt_begin(struct cbcmn__actor *a, int64_t reason, uint32_t held,
		       struct cbcmn__exec *e)
{
	struct cbcmn__wakes wl = {0};
	cbcmn__flock_lock(&a->lock);
	a->stop_reason = a->stopping ? a->stop_reason : reason; /* the halt reason from here */
	uint32_t home = cbcmn__actor_home(a);
	CBCMN__AGAUGE(a->rt, home, mailbox, -(int64_t)a->count);
	/* Nobody to tell (no monitor, no link, none of its own monitors): no
	 * HALTING spell for a demonitor to wait out, so FREE at once and no
	 * second lock at the end (most actors: skynet's million). */
	bool quiet = !a->links && !a->watching && !a->watched_by;
	CBCMN__AGAUGE(a->rt, home, halting, 1);
	a->state = quiet ? CBCMN__A_FREE : CBCMN__A_HALTING;
	a->halt_begun = true;
	a->gen++; /* every reference to it dies here */
	a->ref = CBCMN_ACTOR_NONE;
	a->stopping = false;
	cbcmn__mb_fail_senders(a, &wl, -ESRCH);
	/* Sent over the lanes and not yet put (only if its task never got to
	 * wait for them: cbcmn__actor_main()): undelivered too. */
	uint32_t in_lanes = cbcmn__mb_lanes_halt(a);
	/* The messages left go to drop from the slot's ring (halt_left of
	 * them from head), out of the mailbox's count: nothing is in the
	 * mailbox any more. */
	a->halt_left = a->halt_dropped = a->count;
	a->halt_undelivered = a->count + in_lanes + held;
	a->count = 0;
	struct cbcmn__monitor *sys = a->sys_head;
	a->sys_head = a->sys_tail = NULL;
	atomic_store_explicit(&a->receiver, NULL, memory_order_relaxed); /* it was the halting task itself: not waiting */
	cbcmn__flock_unlock(&a->lock);
	cbcmn__wakes_run(&wl, e);
	while (sys) { /* DOWNs it will never receive */
		struct cbcmn__monitor *m = sys;
		sys = m->next;
		free(m);
	}
}

/* Its monitors get their DOWN, off the slot one at a time. */
static void halt_downs(struct cbcmn__actor *a, int64_t reason, struct cbcmn__exec *e)
{
	struct cbcmn__monitor *m;
	while ((m = a->watched_by)) {
		a->watched_by = m->next;
		m->reason = reason;
		m->undelivered = a->halt_undelivered;
		struct cbcmn__actor *w = cbcmn__actor_lock_ref(a->rt, m->watcher);
		if (!w) {
			free(m); /* the watcher is gone too */
			continue;
		}
		struct cbcmn__wakes dl = {0};
		link_free(rec_take(&w->watching, m->target, m->id)); /* that monitor is over */
		cbcmn__mb_put_down(w, m, &dl);
		cbcmn__flock_unlock(&w->lock);
		cbcmn__wakes_run(&dl, e);
	}
}

/* Links: take our record off each peer (so long-lived actors do not
 * collect dead links) and pass an abnormal reason on. */
static void halt_links(struct cbcmn__actor *a, cbcmn_actor_ref old, int64_t reason,
		       struct cbcmn__exec *e)
{
	struct cbcmn__link *l;
	while ((l = a->links)) {
		a->links = l->next;
		struct cbcmn__actor *p = cbcmn__actor_lock_ref(a->rt, l->peer);
		if (p) {
			struct cbcmn__wakes pl = {0};
			struct stop_post post = {0};
			/* Only a peer that still holds its side: one that
			 * unlinked (its side first) is not stopped. */
			struct cbcmn__link *theirs = link_take(&p->links, old);
			if (theirs && p->trap_exit) {
				/* Trapped: the record's EXIT instead of a stop,
				 * after our messages to it (as a DOWN). */
				struct cbcmn__monitor *x = theirs->exit;
				theirs->exit = NULL;
				x->type = CBCMN_ACTOR_EXIT;
				x->watcher = l->peer;
				x->target = old;
				x->id = 0;
				x->reason = reason;
				cbcmn__mb_put_down(p, x, &pl);
			} else if (theirs && reason != 0) {
				stop_locked(p, reason, &pl, &post);
			}
			cbcmn__flock_unlock(&p->lock);
			link_free(theirs);
			cbcmn__wakes_run(&pl, e);
			stop_finish(&post);
		}
		link_free(l);
	}
	/* Our own monitors: off their targets, or a long-lived target would
	 * collect the monitors of every watcher that ever halted.  A target
	 * halting meanwhile finds us dead and frees the record itself. */
	while ((l = a->watching)) {
		a->watching = l->next;
		struct cbcmn__actor *p = cbcmn__actor_lock_ref(a->rt, l->peer);
		if (p) {
			free(monitor_take(p, old, l->id));
			cbcmn__flock_unlock(&p->lock);
		}
		link_free(l);
	}
}

/* The second half (above): out of the lock, nobody else can reach what
 * the slot holds any more but the halting task itself, whose calls see
 * a slot that is not LIVE. */
static int64_t halt_finish(struct cbcmn__actor *a, struct cbcmn__exec *e, struct cbcmn_task *own)
{
	int64_t reason = a->stop_reason;
	uint32_t home = cbcmn__actor_home(a);
	struct cbcmn__actors *t = atomic_load_explicit(&a->rt->actors, memory_order_relaxed);
	cbcmn_actor_ref old = cbcmn__ref_make(a->gen - 1, t->tag, a->index);
	while (a->halt_left) {
		cbcmn_actor_msg m = a->ring[a->head];
		a->head = a->head + 1 == a->cap ? 0 : a->head + 1;
		a->halt_left--; /* given to drop, even if its task ends in there */
		if (a->drop)
			a->drop(a->user, &m);
	}
	/* Kept for the slot's next actor while it stays in this executor's
	 * cache (slot_free()); the halt alone holds the slot until then.
	 * Only a small one: a cache holds 64 slots, and rings of the largest
	 * capacity (64 MiB, charged to nobody) would stay there for good
	 * (test_big_mailbox_rings_are_not_kept).  The slot's one_msg is
	 * the slot's: a spare the slot had stays. */
	if (a->ring && a->ring != &a->one_msg) {
		if (a->ring_room <= CBCMN__SPARE_CAP_MAX) {
			a->spare = a->ring;
			a->spare_cap = a->ring_room;
		} else {
			free(a->ring);
		}
	}
	a->ring = NULL;
	a->head = a->cap = a->ring_room = 0;
	void (*fini)(void *, int64_t) = a->fini;
	a->fini = NULL;
	if (fini)
		fini(a->user, reason);
	/* What its own task leaves of its budget goes back to its payer
	 * before anyone hears of the halt (cbcmn__task_complete() would, after
	 * our DOWNs): a supervisor restarting it on its DOWN, a watcher
	 * spawning again, asks the same budget, and the ask is refused when
	 * the spawner has not got it back (docs/BUDGETS.md; a supervisor
	 * ended CBCMN_EBUDGET at a restart, 1 run in 2 on two executors:
	 * test_restart_finds_the_crashed_childs_budget_given_back).  Nothing
	 * of the task's is charged after fini; once only (a reaped task comes
	 * back here: closed already).  A host's only at its last handler
	 * actor's halt, asked now: a drop or fini above may have joined
	 * another to it, which runs on and is charged to it (before, the
	 * payer got that budget back and the joined actor spent it too:
	 * test_handler_joined_from_the_last_one_s_drop_is_charged_to_the_host). */
	if (own && !own->budget_closed && cbcmn__hnd_last(own))
		cbcmn__budget_leftover(own);
	halt_downs(a, reason, e);
	halt_links(a, old, reason, e);
	CBCMN_PROBE4(actor_halt, old, reason, a->halt_dropped, a->rt->seg.rt_id);
	a->halt_begun = false;
	if (a->state != CBCMN__A_FREE) {
		cbcmn__flock_lock(&a->lock);
		a->state = CBCMN__A_FREE;
		cbcmn__flock_unlock(&a->lock);
	}
	/* Live and halting until here, quiet or not: the statistics count a
	 * halt while it runs, its drop and fini included (cbcmn.h;
	 * test_quiet_halt_counts_halting_while_it_runs).  The gauges are
	 * atomic: no lock for them. */
	CBCMN__AGAUGE(a->rt, home, halting, -1);
	CBCMN__AGAUGE(a->rt, home, live, -1);
	slot_free(t, a);
	return reason;
}

/* Begun already: its task ended inside drop or fini, and this is that
 * task's end again (or its handler host's): go on with it. */
static int64_t halt_x(struct cbcmn__actor *a, int64_t reason, uint32_t held,
		      struct cbcmn__exec *e, struct cbcmn_task *own)
{
	if (!a->halt_begun)
		halt_begin(a, reason, held, e);
	return halt_finish(a, e, own);
}

static int64_t halt(struct cbcmn__actor *a, int64_t reason, struct cbcmn__exec *e)
{
	return halt_x(a, reason, 0, e, NULL);
}

int64_t cbcmn__actor_main(cbcmn_cx *cx, void *arg)
{
	struct cbcmn__actor *a = arg;
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	/* Sends from other executors may reserve room from now on; whatever
	 * they reserved is in the mailbox before the halt looks at it. */
	cbcmn__mb_lanes_open(a);
	/* fn and user were written before the spawn published the task. */
	int64_t r = a->fn(cx, a->user);
	cbcmn__mb_lanes_settle(self, a);
	return r;
}

int64_t cbcmn__actor_halt_slot(struct cbcmn__actor *a, int64_t reason, uint32_t held,
			       struct cbcmn__exec *e, struct cbcmn_task *own)
{
	return halt_x(a, reason, held, e, own);
}

/* The end of task t's actor (or of its handler host: its handler actors'
 * halts) runs on the stack of the task this thread runs (t's own after
 * its function returned, or its inline parent's; the task whose await ran
 * t inline if t never started), below no landing pad of that stack's for
 * it: one here, so that a stack overflow or a budget's unwind inside a
 * drop or fini ends that callback and the end goes on, end(t, result)
 * called again (it must carry on from where it was: halt_finish()), and
 * that task after it.  Else the landing went to the returned function's
 * pad, a frame that was no more, or ended the task that ran t inline
 * instead, t's halt left half done.  A task ended under its thread (the
 * reaper, sched.c) comes back here with the halt begun: it goes on
 * likewise.  Not on a task's stack (the scheduler's), no pad. */
CBCMN__LANDING_PAD int64_t
cbcmn__actor_end_guarded(struct cbcmn_task *t, int64_t result,
			 int64_t (*end)(struct cbcmn_task *t, int64_t result))
{
	void *jb[5];
	struct cbcmn_task *on = cbcmn__tls_exec ? cbcmn__tls_exec->current : NULL;
	struct cbcmn_task *volatile von = on;
	volatile uint64_t fpcw = cbcmn__fpcw_read();
	void **was = on ? on->landing : NULL; /* as it was: what comes after sees no change */
	void **was_pad = cbcmn__halt_pad;
	if (on) {
		on->landing = jb;
		cbcmn__halt_pad = jb;
		if (__builtin_setjmp(jb) != 0) {
			on = von;
			cbcmn__overflow_landed_frame(on, fpcw);
		}
	}
	int64_t reason = end(t, result);
	if (on) {
		on->landing = was;
		cbcmn__halt_pad = was_pad;
	}
	return reason;
}

static int64_t halt_task(struct cbcmn_task *t, int64_t result)
{
	return halt_x(t->arg, result, 0, t->exec, t);
}

int64_t cbcmn__actor_halt(struct cbcmn_task *t, int64_t result)
{
	struct cbcmn__actor *a = t->arg;
	bool contained = a->contained; /* set before the spawn published t */
	int64_t reason = cbcmn__actor_end_guarded(t, result, halt_task);
	return contained ? 0 : reason;
}

/* Move a's gauges (it and its mailbox) to executor to; a locked. */
static void home_move(struct cbcmn__actor *a, uint32_t to)
{
	uint32_t from = cbcmn__actor_home(a);
	CBCMN__AGAUGE(a->rt, from, live, -1);
	CBCMN__AGAUGE(a->rt, from, mailbox, -(int64_t)a->count);
	CBCMN__AGAUGE(a->rt, to, live, 1);
	CBCMN__AGAUGE(a->rt, to, mailbox, (int64_t)a->count);
	atomic_store_explicit(&a->home, to, memory_order_relaxed);
}

void cbcmn__actor_home_here(struct cbcmn__actor *a, struct cbcmn__exec *e)
{
	cbcmn__flock_lock(&a->lock);
	home_move(a, e->id);
	cbcmn__flock_unlock(&a->lock);
}

/* ---- public calls ------------------------------------------------------- */

int cbcmn_actor_spawn(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_fn fn, void *state,
		      const cbcmn_actor_opts *opts, cbcmn_actor_ref *out)
{
	return cbcmn__actor_spawn_x(cx, n, fn, state, opts, NULL, out);
}

static int spawn(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_fn fn, void *state,
		 const cbcmn_actor_opts *opts, const struct cbcmn__spawn_x *x, cbcmn_actor_ref *out,
		 bool *halted);

int cbcmn__actor_spawn_x(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_fn fn, void *state,
			 const cbcmn_actor_opts *opts, const struct cbcmn__spawn_x *x,
			 cbcmn_actor_ref *out)
{
	bool halted = false;
	int rc = spawn(cx, n, fn, state, opts, x, out, &halted);
	/* Refused before there was an actor to halt: its fini all the same. */
	if (rc && !halted && x && x->fini)
		x->fini(state, rc);
	return rc;
}

/* The budget an actor spawn asks for: asked, component by component, and
 * where the program asked for nothing (0, or no budget), the config's
 * child_budget (the profile's default) but at most half of what the
 * spawner has.  A spawner's whole budget was the default's limit, as for a
 * task: an actor is long-lived, and one that gave its first child all its
 * ops (:service, :cluster: a child default of 2^20, a spawner that had no
 * more) then waited for budget, silently, at its next receive or spawn
 * (docs/ACTORS.md "Budgets").  NULL: nothing to change (a thread's spawn,
 * an unlimited spawner, or nothing left unasked). */
static uint64_t share_of(uint64_t asked, uint64_t dflt, uint64_t have)
{
	if (asked || dflt == 0)
		return asked; /* asked; or a default of none, which 0 gives */
	uint64_t half = have == CBCMN_UNLIMITED ? CBCMN_UNLIMITED : have / 2;
	uint64_t v = dflt < half ? dflt : half;
	return v ? v : 1; /* 0 would be the default: all of a spawner with 1 */
}

static const cbcmn_budget *default_share(struct cbcmn_task *self, const cbcmn_budget *ask,
					 cbcmn_budget *buf)
{
	cbcmn_budget have;
	if (!self || !self->limited || cbcmn_budget_get((cbcmn_cx *)self, &have))
		return ask;
	const cbcmn_budget none = {0}, *a = ask ? ask : &none, *c = &self->rt->cfg.child_budget;
	*buf = (cbcmn_budget){
		.ops = share_of(a->ops, c->ops, have.ops),
		.memory = share_of(a->memory, c->memory, have.memory),
		.spawn_count = share_of(a->spawn_count, c->spawn_count, have.spawn_count),
		.channel_ops = share_of(a->channel_ops, c->channel_ops, have.channel_ops),
		.syscalls = share_of(a->syscalls, c->syscalls, have.syscalls),
	};
	return buf;
}

/* A mailbox ring of cap messages for slot a: the slot's one_msg for one,
 * else its spare (its last actor's, kept while the slot was free) if that
 * has room for cap, else a new one.
 * A bigger spare serves as it is (at most CBCMN__SPARE_CAP_MAX messages):
 * skynet's leaves (1 message) and inner nodes (10) follow one another in
 * the same slots, and a spare kept only for its own size made a free and
 * a malloc at every change. */
static cbcmn_actor_msg *ring_get(struct cbcmn__actor *a, uint32_t cap)
{
	if (cap == 1) { /* the slot's own; a small spare stays for the next */
		/* Only a small one: the spare is nobody's count while the
		 * actor lives, and live one-message actors took up whatever
		 * the caches and the table kept, wave after wave: 16 KiB of
		 * dead ring each for a 64-byte mailbox
		 * (test_one_message_actors_keep_only_small_spares). */
		if (a->spare_cap > CBCMN__SPARE_ONE_MAX) {
			free(a->spare);
			a->spare = NULL;
			a->spare_cap = 0;
		}
		a->ring_room = 1;
		return &a->one_msg;
	}
	cbcmn_actor_msg *r = a->spare;
	uint32_t room = a->spare_cap;
	a->spare = NULL;
	a->spare_cap = 0;
	if (r && room < cap) {
		free(r);
		r = NULL;
	}
	if (!r) {
		r = cbcmn__malloc((size_t)cap * sizeof(*r));
		room = cap;
	}
	a->ring_room = r ? room : 0;
	return r;
}

static int monitor_x(struct cbcmn_task *self, cbcmn_actor_ref target, uint64_t *mon, bool check);

/* halted: set once the new actor's halt ran (then its fini did too). */
static int spawn(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_fn fn, void *state,
		 const cbcmn_actor_opts *opts, const struct cbcmn__spawn_x *x, cbcmn_actor_ref *out,
		 bool *halted)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (out)
		*out = CBCMN_ACTOR_NONE;
	cbcmn_actor_handler handler = x ? x->handler : NULL;
	if ((!fn && !handler) || !out || !n)
		return -EINVAL;
	uint32_t cap = opts && opts->mailbox_cap ? opts->mailbox_cap : CBCMN_ACTOR_MAILBOX_DEFAULT;
	if (cap > CBCMN_ACTOR_MAILBOX_MAX)
		return -EINVAL;
	struct cbcmn_runtime *rt = n->rt;
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED;
	if (self && self->rt != rt)
		return CBCMN_EWRONGRT;
	cbcmn__stack_check(self);
	/* A handler actor joins its spawner's host, or gets a host task of
	 * its own, whose budget is the one asked (the default share is for
	 * an actor's own task). */
	bool join = handler && cbcmn__hnd_joins(self, n, opts);
	cbcmn_budget share;
	const cbcmn_budget *ask = opts ? opts->budget : NULL;
	cbcmn_spawn_opts so = {
		.budget = handler ? ask : default_share(self, ask, &share),
		.caps = opts ? opts->caps : NULL,
		.placement = opts ? opts->placement : CBCMN_PLACE_LOCAL,
		.shard = opts ? opts->shard : 0,
	};
	/* Paid before there is an actor: the spawner may wait for budget
	 * there, or be ended, and an actor made before would stay live for
	 * good, its slot and ring with it
	 * (test_spawn_ended_by_the_spawners_budget_leaves_no_live_actor).  A
	 * join pays at its end, once its host's end would halt it. */
	struct cbcmn__spawn_paid paid = {0};
	int rc = join ? 0 : cbcmn__spawn_pay(self, n, &so, ask, &paid);
	if (rc)
		return rc;
	struct cbcmn__actors *t = table_get(rt);
	struct cbcmn__actor *a = t ? slot_alloc(rt, t) : NULL;
	cbcmn_actor_msg *ring = a ? ring_get(a, cap) : NULL;
	if (!ring) {
		if (a)
			slot_free(t, a);
		cbcmn__spawn_unpay(self, &paid);
		return -ENOMEM;
	}
	/* Counted from now on, where it will most likely first run. */
	uint32_t home = opts && opts->placement == CBCMN_PLACE_PINNED && opts->shard < cbcmn__nworkers(rt)
				? opts->shard
			: self ? self->exec->id
			       : 0;
	cbcmn__flock_lock(&a->lock);
	atomic_store_explicit(&a->home, home, memory_order_relaxed);
	CBCMN__AGAUGE(rt, home, live, 1);
	a->ring = ring;
	a->cap = cap;
	a->head = a->count = 0;
	a->taken_total = 0;
	a->fn = fn;
	a->user = state;
	a->drop = opts ? opts->drop : NULL;
	a->contained = x && x->contained;
	a->fini = x ? x->fini : NULL;
	a->stopping = false;
	a->stop_reason = 0;
	a->trap_exit = opts && opts->trap_exit;
	atomic_store_explicit(&a->interrupted, 0, memory_order_relaxed); /* published by the lock */
	a->nursery = n;
	a->joining = NULL;
	a->posse = opts ? opts->posse : 0;
	atomic_store_explicit(&a->stays,
			      handler || a->posse || (opts && opts->placement == CBCMN_PLACE_PINNED),
			      memory_order_relaxed);
	a->wn.where = CBCMN__WN_NONE;
	a->park_exec = 0; /* a new actor enters a wheel as new */
	a->migrated = false;
	/* Spawned by a task on its executor for that executor (local, or
	 * pinned there): the wheel's next place when that executor admits it. */
	a->fresh = self && self->exec && home == self->exec->id;
	a->moved_ns = 0;
	a->hnd = NULL; /* a handler's: set by cbcmn__hnd_start() */
	a->ref = cbcmn__ref_make(a->gen, t->tag, a->index);
	cbcmn__mb_lanes_init(a);
	a->state = CBCMN__A_LIVE;
	cbcmn_actor_ref ref = a->ref;
	cbcmn__flock_unlock(&a->lock);
	/* The monitor before the task exists: a halt reason is never missed.
	 * Unchecked: the stack was checked above, and an end here (deeper)
	 * would leave the actor live. */
	rc = x && x->mon ? monitor_x(self, ref, x->mon, false) : 0;
	if (rc)
		cbcmn__spawn_unpay(self, &paid);
	else
		/* Each gives the charge back on its error. */
		rc = handler ? cbcmn__hnd_start(cx, n, a, handler, opts, join ? NULL : &so, &paid)
			     : cbcmn__spawn_made(self, n, cbcmn__actor_main, a, &so, &paid);
	if (rc) {
		/* Nothing ran: only a forged reference could have reached it. */
		*halted = true;
		halt(a, rc, cbcmn__waker_of(self));
		return rc;
	}
	CBCMN_PROBE4(actor_spawn, ref, self ? (int)self->exec->id : -1, cap, rt->seg.rt_id);
	*out = ref;
	return 0;
}

cbcmn_actor_ref cbcmn_actor_self(const cbcmn_cx *cx)
{
	struct cbcmn__actor *a = cbcmn__actor_or_handler((const struct cbcmn_task *)cx);
	/* ref changes only at halt, which the actor's own task (or host) runs. */
	return a ? a->ref : CBCMN_ACTOR_NONE;
}

int cbcmn_actor_stop(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref ref, int64_t reason)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (!rt && !self)
		return -EINVAL;
	if (!rt)
		rt = self->rt;
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED;
	if (self && self->rt != rt)
		return CBCMN_EWRONGRT;
	cbcmn__stack_check(self);
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(rt, ref);
	if (!a)
		return -ESRCH;
	struct cbcmn__wakes wl = {0};
	struct stop_post post = {0};
	stop_locked(a, reason, &wl, &post);
	cbcmn__flock_unlock(&a->lock);
	/* From a cbcmn_blocking() function's thread with our cx the wakes
	 * go through the inject queue (cbcmn__waker_here(): our executor's
	 * queue is its own thread's, test_stop_and_recharge_off_its_fiber). */
	cbcmn__wakes_run(&wl, cbcmn__waker_of(self));
	stop_finish(&post);
	return 0;
}

bool cbcmn__actor_follows(const struct cbcmn_task *t)
{
	const struct cbcmn__actor *a = t->arg;
	return !atomic_load_explicit(&a->stays, memory_order_relaxed);
}

bool cbcmn__actor_stopped(const struct cbcmn_task *t)
{
	const struct cbcmn__actor *a = t->arg;
	/* acquire: pairs with the seq_cst store in stop_locked(). */
	return atomic_load_explicit(&a->interrupted, memory_order_acquire) != 0;
}

void cbcmn__actor_joining(struct cbcmn_task *self, struct cbcmn_nursery *n)
{
	struct cbcmn__actor *a = self->arg;
	cbcmn__flock_lock(&a->lock);
	a->joining = n;
	/* Stopped before a stopper could see n: cancel it ourselves (we
	 * opened it: it is alive). */
	bool stop = n && a->stopping;
	cbcmn__flock_unlock(&a->lock);
	if (stop)
		cbcmn__nursery_cancel(n, 1);
}

int cbcmn_actor_trap_exit(cbcmn_cx *cx, bool on)
{
	int err;
	struct cbcmn__actor *me = cbcmn__actor_caller((struct cbcmn_task *)cx, &err);
	if (!me)
		return err;
	cbcmn__flock_lock(&me->lock);
	int prev = me->trap_exit;
	me->trap_exit = on;
	cbcmn__flock_unlock(&me->lock);
	return prev;
}

/* The calling actor, for a call that would add a monitor or a link.  A
 * handler's halt (its drop or fini) runs on its host, which is no actor:
 * -EPERM there, where the header promises a halting caller -ESHUTDOWN
 * (review of session 17). */
static struct cbcmn__actor *binder(struct cbcmn_task *self, int *err)
{
	struct cbcmn__actor *me = cbcmn__actor_caller(self, err);
	if (!me && *err == -EPERM && self && cbcmn__is_running(self) && cbcmn__hnd_calling(self))
		*err = -ESHUTDOWN;
	return me;
}

int cbcmn_actor_monitor(cbcmn_cx *cx, cbcmn_actor_ref target, uint64_t *mon)
{
	return monitor_x((struct cbcmn_task *)cx, target, mon, true);
}

/* check: the stack's room (a spawn's own monitor checked it already). */
static int monitor_x(struct cbcmn_task *self, cbcmn_actor_ref target, uint64_t *mon, bool check)
{
	if (!mon)
		return -EINVAL;
	int err;
	struct cbcmn__actor *me = binder(self, &err);
	if (!me)
		return err;
	if (check)
		cbcmn__stack_check(self);
	struct cbcmn__monitor *m = cbcmn__calloc(1, sizeof(*m));
	struct cbcmn__link *note = cbcmn__calloc(1, sizeof(*note)); /* exit NULL: a note */
	if (!m || !note) {
		free(m);
		free(note);
		return -ENOMEM;
	}
	struct cbcmn__actors *t = atomic_load_explicit(&self->rt->actors, memory_order_relaxed);
	m->type = CBCMN_ACTOR_DOWN;
	m->watcher = me->ref;
	m->target = target;
	m->id = atomic_fetch_add_explicit(&t->next_monitor, 1, memory_order_relaxed) + 1;
	*mon = m->id;
	note->peer = target;
	note->id = m->id;
	/* Our note first: once the monitor is on the target, its halt may
	 * take the note back at any time (with the DOWN, under our lock). */
	cbcmn__flock_lock(&me->lock);
	if (me->state != CBCMN__A_LIVE) {
		/* Halting (a drop callback): the halt took our lists already,
		 * a note now would stay on the slot for its next actor. */
		cbcmn__flock_unlock(&me->lock);
		free(m);
		free(note);
		return -ESHUTDOWN;
	}
	note->next = me->watching;
	me->watching = note;
	cbcmn__flock_unlock(&me->lock);
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(self->rt, target);
	if (a) {
		m->next = a->watched_by;
		a->watched_by = m;
		cbcmn__flock_unlock(&a->lock);
		return 0;
	}
	/* Dead already (or never was): the DOWN comes at once.  Nobody waits
	 * on our mailbox but us, so there is nothing to wake. */
	m->reason = -ESRCH;
	struct cbcmn__wakes wl = {0};
	cbcmn__flock_lock(&me->lock);
	link_free(rec_take(&me->watching, target, m->id));
	cbcmn__mb_put_down(me, m, &wl);
	cbcmn__flock_unlock(&me->lock);
	return 0;
}

int cbcmn_actor_link(cbcmn_cx *cx, cbcmn_actor_ref target)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	int err;
	struct cbcmn__actor *me = binder(self, &err);
	if (!me)
		return err;
	/* In a drop our reference is NONE already: a link to NONE is a link
	 * from a halting actor, not to ourselves (its own halt wrote
	 * halt_begun, on this thread). */
	if (me->halt_begun)
		return -ESHUTDOWN;
	if (target == me->ref)
		return -EINVAL;
	cbcmn__stack_check(self);
	struct cbcmn__link *mine = link_new(target);
	struct cbcmn__link *theirs = link_new(me->ref);
	if (!mine || !theirs) {
		link_free(mine);
		link_free(theirs);
		return -ENOMEM;
	}
	/* Our side first, one lock at a time.  Once their side is there,
	 * their halt takes ours off (and stops us, as if it came right after
	 * the link); if they are dead by then, we take it off ourselves.
	 * (Their side first would leave ours naming a dead peer when they
	 * halt between the two.) */
	cbcmn__flock_lock(&me->lock);
	if (me->state != CBCMN__A_LIVE) {
		/* Halting (a drop callback): the halt took our links already;
		 * one now would be the slot's next actor's. */
		cbcmn__flock_unlock(&me->lock);
		link_free(mine);
		link_free(theirs);
		return -ESHUTDOWN;
	}
	struct cbcmn__link *dup = link_take(&me->links, target);
	mine->next = me->links;
	me->links = mine;
	cbcmn__flock_unlock(&me->lock);
	link_free(dup); /* linked already: one record each side is enough */
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(self->rt, target);
	if (!a) {
		cbcmn__flock_lock(&me->lock);
		struct cbcmn__link *back = link_take(&me->links, target);
		cbcmn__flock_unlock(&me->lock);
		link_free(back);
		link_free(theirs);
		return -ESRCH;
	}
	struct cbcmn__link *old = link_take(&a->links, me->ref);
	theirs->next = a->links;
	a->links = theirs;
	cbcmn__flock_unlock(&a->lock);
	link_free(old);
	return 0;
}

int cbcmn_actor_unlink(cbcmn_cx *cx, cbcmn_actor_ref target)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	int err;
	struct cbcmn__actor *me = cbcmn__actor_caller(self, &err);
	if (!me)
		return err;
	cbcmn__stack_check(self);
	/* Our side first: from then on a halt of theirs finds nothing of
	 * theirs on us, and stops us no more (halt()). */
	cbcmn__flock_lock(&me->lock);
	struct cbcmn__link *mine = link_take(&me->links, target);
	cbcmn__flock_unlock(&me->lock);
	link_free(mine);
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(self->rt, target);
	if (a) {
		struct cbcmn__link *theirs = link_take(&a->links, me->ref);
		cbcmn__flock_unlock(&a->lock);
		link_free(theirs);
	}
	return 0;
}

/* True while the actor ref named is halting (its DOWNs still on the way). */
static bool halting(struct cbcmn_runtime *rt, cbcmn_actor_ref ref)
{
	struct cbcmn__actors *t = atomic_load_explicit(&rt->actors, memory_order_acquire);
	struct cbcmn__actor *a = t && cbcmn__ref_tag(ref) == t->tag ? slot_at(t, cbcmn__ref_index(ref))
								      : NULL;
	if (!a)
		return false;
	cbcmn__flock_lock(&a->lock);
	/* The halt bumped the generation as it began; FREE once it ends. */
	bool h = a->state == CBCMN__A_HALTING && a->gen == cbcmn__ref_gen(ref) + 1;
	cbcmn__flock_unlock(&a->lock);
	return h;
}

/* A demonitor from me's own halt (a drop or fini).  Our reference is
 * dead: the target's halt frees our DOWN instead of queueing it
 * (halt_downs()), and our queue is gone (halt_begin()), so no DOWN can
 * come, and there is nothing to wait for: the wait below could not park
 * here anyway (its yield returns at once) and spun for ever on a target
 * halting beside us, ourselves included.  Our note says whether the
 * monitor was ours.  A live target's record names our old reference (the
 * look-up by me->ref found nothing there: -ENOENT): off it too, or it
 * stayed there until the target's own halt (halt_links() finds no note
 * for it any more). */
static int demonitor_in_halt(struct cbcmn_runtime *rt, struct cbcmn__actor *me,
			     cbcmn_actor_ref target, uint64_t id)
{
	cbcmn__flock_lock(&me->lock);
	struct cbcmn__link *note = rec_take(&me->watching, target, id);
	cbcmn__flock_unlock(&me->lock);
	if (!note)
		return -ENOENT;
	link_free(note);
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(rt, target);
	if (a) {
		struct cbcmn__actors *t = atomic_load_explicit(&rt->actors, memory_order_relaxed);
		cbcmn_actor_ref old = cbcmn__ref_make(me->gen - 1, t->tag, me->index);
		free(monitor_take(a, old, id));
		cbcmn__flock_unlock(&a->lock);
	}
	return 0;
}

int cbcmn_actor_demonitor(cbcmn_cx *cx, cbcmn_actor_ref target, uint64_t id)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	int err;
	struct cbcmn__actor *me = cbcmn__actor_caller(self, &err);
	/* A handler's drop or fini runs on its host, which is no actor: the
	 * halting handler actor's monitors, as a fiber actor's drop finds
	 * its own (-EPERM before). */
	if (!me && err == -EPERM && self && cbcmn__is_running(self))
		me = cbcmn__hnd_halting(self);
	if (!me)
		return err;
	cbcmn__stack_check(self);
	if (me->halt_begun)
		return demonitor_in_halt(self->rt, me, target, id);
	struct cbcmn__monitor *found = NULL;
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(self->rt, target);
	if (a) {
		found = monitor_take(a, me->ref, id);
		cbcmn__flock_unlock(&a->lock);
		if (found) {
			cbcmn__flock_lock(&me->lock);
			link_free(rec_take(&me->watching, target, id));
			cbcmn__flock_unlock(&me->lock);
		}
	} else {
		/* A halt took the list and delivers the DOWNs one lock at a
		 * time: wait for it to end, then look in our own queue. */
		while (halting(self->rt, target))
			cbcmn_yield(cx);
	}
	if (!found) {
		cbcmn__flock_lock(&me->lock);
		struct cbcmn__monitor *prev = NULL;
		for (struct cbcmn__monitor *m = me->sys_head; m; prev = m, m = m->next)
			if (m->type == CBCMN_ACTOR_DOWN && m->id == id && m->target == target) {
				found = m;
				if (prev)
					prev->next = m->next;
				else
					me->sys_head = m->next;
				if (me->sys_tail == m)
					me->sys_tail = prev;
				break;
			}
		cbcmn__flock_unlock(&me->lock);
	}
	free(found);
	return found ? 0 : -ENOENT;
}
