/* actor_handler.c: handler actors: actors without a stack, called once per message by a host task.
 *
 * A handler actor is an ordinary actor slot (actor.c: reference, mailbox,
 * monitors, links, halt) with no task: a->hnd names its handler and its
 * host.  A host is a plain task of the actor's nursery that calls the
 * handlers of its actors, on its own stack, for as long as any of them
 * lives; its handler actors are its children as far as the nursery is
 * concerned (await_all waits for the host, and the host for them).
 *
 * Scheduling.  A handler actor is "queued" (h->queued, under the slot
 * lock) from the moment something is there for it (a message, a DOWN or
 * EXIT, a stop, its host's cancellation) until its host finds its mailbox
 * empty.  Whoever queues it (cbcmn__hnd_note(), under the slot lock)
 * hands it to the host once the lock is dropped (cbcmn__hnd_kick()): on
 * the host's own queue when the host itself is the caller (a handler
 * sending to a handler of its host: no lock, no atomic), else in the
 * host's inbox under its lock, waking the host if it waits.  A queued
 * handler actor is therefore in exactly one place: on its way to the
 * host, in the inbox, on the host's list, or being run.
 *
 * Lifetimes.  A handler actor is halted and freed only by its host, and
 * only when the host holds it (popped from its queue), so nothing queued
 * refers to a freed one.  The host task returns once its count of
 * handler actors is 0; the host itself is freed by the last of its
 * references (its task's, dropped at the task's end, and one per kick
 * in flight from another task or thread), so a kicker's touches of the
 * host end before it can go.  A host task that ends without returning
 * halts what it still hosts (cbcmn__hnd_host_end(), from task.c).
 *
 * Cancellation.  The host waits for its inbox as an interruptible wait
 * (iwait.h), so a cancellation of its nursery ends the wait; the host
 * then queues every handler actor it has and halts each as it comes
 * (CBCMN_ECANCELED, or its stop's reason).  docs/ACTORS.md has the
 * decisions (hosts, RETRY, no receive timeouts).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "actor.h"
#include "iwait.h"

struct host;

struct cbcmn__hnd {
	struct cbcmn__actor *a;
	struct host *host;
	cbcmn_actor_handler fn;
	void *state;
	struct cbcmn__hnd *qnext, *qprev; /* the host's run queue (qprev: there only), or inbox */
	struct cbcmn__hnd *prev, *next; /* the host's handler actors (host only) */
	struct cbcmn__hnd *kick_next; /* a wakes list (cbcmn__hnd_note()) */
	bool queued;                  /* slot lock: see the top of the file */
	bool held;                    /* host only: msg is to be called again (RETRY) */
	cbcmn_actor_msg msg;
};

struct host {
	/* Its task's, and one per handler actor noted and not yet handed
	 * over (cbcmn__hnd_note() to the end of cbcmn__hnd_kick()): the
	 * last one frees it.  A host task that ended without returning
	 * (cbcmn__hnd_host_end()) leaves handler actors in all, freed with it. */
	_Atomic uint32_t refs;
	/* A leaf, never taken with another lock held (kicks run after the
	 * slot unlock); the rank of the actor table's, also a leaf. */
	struct cbcmn__mutex lock;
	struct cbcmn__hnd *in_head, *in_tail; /* inbox (lock) */
	struct cbcmn__iwait *waiter;          /* the host, waiting for its inbox (lock) */
	/* The host task's alone. */
	struct cbcmn__hnd *q_head, *q_tail;   /* newest first: made runnable by the host */
	struct cbcmn__hnd *f_head, *f_tail;   /* in order: everything else */
	uint32_t pops;                        /* every OLDEST_EVERY-th pop: the oldest (below) */
	struct cbcmn__hnd *all;               /* every handler actor it hosts */
	uint64_t count;                       /* how many */
	struct cbcmn_nursery *n;
	struct cbcmn__actor *cur;             /* the handler actor being called */
	/* Records of its halted handler actors, for its next joins (a tree of
	 * spawns on one host made and freed one per actor). */
	struct cbcmn__hnd *spare;
	uint32_t nspare;
	int64_t first_error;                  /* its result: a crash of a non-contained one */
	bool cancelled;
};

static struct host *host_of(const struct cbcmn_task *t)
{
	return t && !(t->flags & CBCMN__TF_ABI) && t->fn == cbcmn__hnd_host_main ? t->arg : NULL;
}

static void host_unref(struct host *host)
{
	/* acq_rel: the last one sees every other's use of the host (and of
	 * the handler actors it frees) before it frees them. */
	if (atomic_fetch_sub_explicit(&host->refs, 1, memory_order_acq_rel) != 1)
		return;
	struct cbcmn__hnd *lists[2] = {host->all, host->spare};
	for (int i = 0; i < 2; i++)
		while (lists[i]) {
			struct cbcmn__hnd *next = lists[i]->next;
			free(lists[i]);
			lists[i] = next;
		}
	cbcmn__mutex_destroy(&host->lock);
	free(host);
}

struct cbcmn__actor *cbcmn__hnd_current(const struct cbcmn_task *t)
{
	struct host *h = host_of(t);
	return h ? h->cur : NULL;
}

/* The host's run queues (host task only).  A handler actor that a
 * handler of the host made runnable goes to the front of q (it runs
 * next: the newest first, so a tree of spawns is walked depth first and
 * only its current path is alive at once, as fiber actors' newest-first
 * slot does); the others (from the inbox, after a batch or a RETRY, a
 * cancellation) to the back of f, in order.  q alone could keep
 * everything else waiting for ever (two handlers sending to each
 * other), so every OLDEST_EVERY-th pop (as the executors' 61st pick
 * looks at the inject queue) takes the oldest: in turn, the inbox's and
 * f's first, or q's last.
 * (test_ping_pong_on_a_host_starves_neither_older_nor_outside_work) */
#define OLDEST_EVERY 61u

static void q_push_front(struct host *host, struct cbcmn__hnd *h)
{
	h->qprev = NULL;
	h->qnext = host->q_head;
	if (host->q_head)
		host->q_head->qprev = h;
	else
		host->q_tail = h;
	host->q_head = h;
}

static void f_push(struct host *host, struct cbcmn__hnd *h)
{
	h->qnext = NULL;
	if (host->f_tail)
		host->f_tail->qnext = h;
	else
		host->f_head = h;
	host->f_tail = h;
}

static struct cbcmn__hnd *f_pop(struct host *host)
{
	struct cbcmn__hnd *h = host->f_head;
	if (h && !(host->f_head = h->qnext))
		host->f_tail = NULL;
	return h;
}

static struct cbcmn__hnd *q_pop_front(struct host *host)
{
	struct cbcmn__hnd *h = host->q_head;
	if (h) {
		if ((host->q_head = h->qnext))
			host->q_head->qprev = NULL;
		else
			host->q_tail = NULL;
	}
	return h;
}

static struct cbcmn__hnd *q_pop_back(struct host *host)
{
	struct cbcmn__hnd *h = host->q_tail;
	if (h) {
		if ((host->q_tail = h->qprev))
			host->q_tail->qnext = NULL;
		else
			host->q_head = NULL;
	}
	return h;
}

static bool take_inbox(struct host *host);

static struct cbcmn__hnd *q_pop(struct host *host)
{
	struct cbcmn__hnd *h;
	uint32_t n = ++host->pops % (2 * OLDEST_EVERY);
	if (n == OLDEST_EVERY) {
		take_inbox(host);
		if ((h = f_pop(host)))
			return h;
	} else if (n == 0 && (h = q_pop_back(host))) {
		return h;
	}
	return (h = q_pop_front(host)) ? h : f_pop(host);
}

/* The caller is host itself (its thread's current task), which hands
 * its kicks over without the inbox and keeps itself alive meanwhile.
 * The same answer in cbcmn__hnd_note() and the cbcmn__hnd_kick() after
 * it: one thread, and its current task does not change in between. */
static bool host_is_caller(const struct host *host)
{
	struct cbcmn__exec *me = cbcmn__tls_exec;
	return me && host_of(me->current) == host;
}

void cbcmn__hnd_note(struct cbcmn__actor *a, struct cbcmn__wakes *wl)
{
	struct cbcmn__hnd *h = a->hnd;
	if (h->queued)
		return; /* on its way already: it will find this too */
	h->queued = true;
	/* A kick from another task or thread holds the host until it has
	 * let go (relaxed: the kick's own unref, acq_rel, orders what
	 * matters). */
	if (!host_is_caller(h->host))
		atomic_fetch_add_explicit(&h->host->refs, 1, memory_order_relaxed);
	h->kick_next = wl->hkick;
	wl->hkick = h;
}

/* Hand h to its host from another task or thread: its inbox, and a wake
 * if it waits for it. */
static void kick_remote(struct host *host, struct cbcmn__hnd *h, struct cbcmn__exec *e)
{
	struct cbcmn__iwait *w = NULL;
	cbcmn__mutex_lock(&host->lock);
	h->qnext = NULL;
	if (host->in_tail)
		host->in_tail->qnext = h;
	else
		host->in_head = h;
	host->in_tail = h;
	if (host->waiter && cbcmn__iwait_claim(host->waiter)) {
		w = host->waiter;
		host->waiter = NULL;
	}
	cbcmn__mutex_unlock(&host->lock);
	/* The host cannot go on (nor end) before this wake: w, on its
	 * stack, is still there. */
	if (w)
		cbcmn__iwait_wake(w, e);
	host_unref(host); /* cbcmn__hnd_note()'s */
}

void cbcmn__hnd_kick(struct cbcmn__hnd *h, struct cbcmn__exec *e)
{
	while (h) {
		/* Read before the hand-over: from then on h may be run,
		 * halted and freed. */
		struct cbcmn__hnd *next = h->kick_next;
		struct host *host = h->host;
		if (host_is_caller(host))
			q_push_front(host, h); /* nobody else touches its queue */
		else
			kick_remote(host, h, e);
		h = next;
	}
}

/* Move the inbox to the back of f; false if it was empty. */
static bool take_inbox(struct host *host)
{
	cbcmn__mutex_lock(&host->lock);
	struct cbcmn__hnd *head = host->in_head, *tail = host->in_tail;
	host->in_head = host->in_tail = NULL;
	cbcmn__mutex_unlock(&host->lock);
	if (!head)
		return false;
	if (host->f_tail)
		host->f_tail->qnext = head;
	else
		host->f_head = head;
	host->f_tail = tail;
	return true;
}

/* Wait until the inbox has something or the host is cancelled. */
static void wait_inbox(struct host *host, struct cbcmn_task *self)
{
	struct cbcmn__iwait iw;
	cbcmn__mutex_lock(&host->lock);
	if (host->in_head) {
		cbcmn__mutex_unlock(&host->lock);
		return;
	}
	cbcmn__iwait_init(&iw, self);
	iw.kind = CBCMN__G_CHAN; /* waiting for messages, for the snapshot */
	host->waiter = &iw;
	cbcmn__mutex_unlock(&host->lock);
	if (cbcmn__iwait_block(&iw) != CBCMN__IW_WOKEN) {
		/* Cancelled: a kicker that comes now must not claim it. */
		cbcmn__mutex_lock(&host->lock);
		if (host->waiter == &iw)
			host->waiter = NULL;
		cbcmn__mutex_unlock(&host->lock);
	}
}

/* Cancelled: queue every handler actor not queued yet; each is halted
 * when the host gets to it (those queued already are on their way). */
static void host_cancel(struct host *host)
{
	host->cancelled = true;
	for (struct cbcmn__hnd *h = host->all; h; h = h->next) {
		cbcmn__mutex_lock(&h->a->lock);
		bool mine = !h->queued;
		h->queued = true;
		cbcmn__mutex_unlock(&h->a->lock);
		if (mine)
			f_push(host, h);
	}
}

/* h holds a message of the program's for a RETRY: undelivered if h
 * halts, for drop and the DOWN's count.  A START, DOWN or EXIT is the
 * runtime's, as a fiber actor's pending DOWNs are (freed silently): a
 * drop that frees a body's pointer must never see one.
 * (test_down_held_for_a_retry_is_not_given_to_drop) */
static uint32_t held_undelivered(const struct cbcmn__hnd *h)
{
	return h->held && h->msg.type < CBCMN_ACTOR_SYS;
}

/* Records a host keeps for its next joins: a subtree's worth of a tree of
 * spawns (skynet's ten children a node). */
#define SPARE_MAX 64u

/* Halt handler actor h (held by the host) with reason; free it. */
static void hnd_halt(struct host *host, struct cbcmn__hnd *h, int64_t reason,
		     struct cbcmn__exec *e)
{
	struct cbcmn__actor *a = h->a;
	/* A message taken for a RETRY is still undelivered: the oldest. */
	uint32_t held = held_undelivered(h);
	if (held && a->drop)
		a->drop(h->state, &h->msg);
	bool contained = a->contained; /* fixed at spawn */
	CBCMN__AGAUGE(a->rt, cbcmn__actor_home(a), waiting, -1);
	/* Its DOWNs count it undelivered too (the mailbox's alone before:
	 * test_down_undelivered_counts_the_message_held_for_a_retry). */
	reason = cbcmn__actor_halt_slot(a, reason, held, e);
	/* As a task's end would tell its nursery (nursery.c): the first
	 * failure is the host's result, and a real one cancels the siblings
	 * at once (fail fast). */
	if (!contained && reason < 0) {
		if (host->first_error == 0 ||
		    (host->first_error == CBCMN_ECANCELED && reason != CBCMN_ECANCELED))
			host->first_error = reason;
		if (reason != CBCMN_ECANCELED)
			cbcmn__nursery_cancel(host->n, 2);
	}
	if (h->prev)
		h->prev->next = h->next;
	else
		host->all = h->next;
	if (h->next)
		h->next->prev = h->prev;
	host->count--;
	if (host->nspare < SPARE_MAX) {
		h->next = host->spare;
		host->spare = h;
		host->nspare++;
	} else {
		free(h);
	}
}

/* Call h's handler for what it has, at most batch messages.  Returns the
 * calls made; h is queued again at the back if it has more (or a
 * RETRY), else left idle, or halted. */
static uint32_t run_one(struct host *host, struct cbcmn__hnd *h, struct cbcmn_task *self,
			uint32_t batch)
{
	struct cbcmn__actor *a = h->a;
	struct cbcmn__exec *e = self->exec;
	uint32_t calls = 0;
	while (calls < batch) {
		struct cbcmn__wakes wl = {0};
		cbcmn__mutex_lock(&a->lock);
		if (a->stopping || host->cancelled) {
			cbcmn__mutex_unlock(&a->lock);
			/* halt() takes a stop's reason over ours. */
			hnd_halt(host, h, CBCMN_ECANCELED, e);
			return calls;
		}
		if (!h->held && !cbcmn__mb_take(a, &h->msg, &wl, e)) {
			h->queued = false; /* the next message queues it again */
			cbcmn__mutex_unlock(&a->lock);
			return calls;
		}
		cbcmn__mutex_unlock(&a->lock);
		/* Held until the call: the charge may end the host (budget,
		 * cancellation while it waits for one, a stack overflow), and
		 * cbcmn__hnd_host_end() drops what is held, so a message taken
		 * is called or dropped, never lost.
		 * (test_message_taken_when_the_host_budget_ends_is_dropped_not_lost) */
		h->held = true;
		cbcmn__wakes_run(&wl, e); /* senders given the room */
		cbcmn__charge(self, CBCMN__B_CHANNEL, 1);
		h->held = false;
		calls++;
		host->cur = a;
		int64_t r = h->fn((cbcmn_cx *)self, h->state, &h->msg);
		host->cur = NULL;
		/* A blocking call in the handler may have moved the host. */
		e = self->exec;
		if (r == CBCMN_ACTOR_CONTINUE)
			continue;
		if (r == CBCMN_ACTOR_RETRY) {
			h->held = true;
			break; /* the others first */
		}
		hnd_halt(host, h, r == CBCMN_ACTOR_HALT ? 0 : r < 0 ? r : -EINVAL, e);
		return calls;
	}
	f_push(host, h); /* still queued: more, or the RETRY */
	return calls;
}

/* The messages one handler actor gets in a row before the next one's
 * turn: enough to amortise the pop, few enough to keep the others'
 * latency a few calls. */
#define BATCH 16u

int64_t cbcmn__hnd_host_main(cbcmn_cx *cx, void *arg)
{
	struct host *host = arg;
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	uint64_t quantum = self->rt->cfg.yield_interval ? self->rt->cfg.yield_interval : 1024;
	uint64_t used = 0;
	while (host->count) {
		if (!host->cancelled && cbcmn__task_cancelled(self))
			host_cancel(host);
		struct cbcmn__hnd *h = q_pop(host);
		if (!h) {
			if (take_inbox(host))
				continue;
			if (host->cancelled)
				cbcmn_yield(cx); /* a kick on its way: let it land */
			else
				wait_inbox(host, self);
			continue;
		}
		used += run_one(host, h, self, BATCH);
		if (used >= quantum) {
			/* Fairness: tasks and actors of this executor run too.
			 * A cancelled yield is seen at the top of the loop. */
			used = 0;
			cbcmn_yield(cx);
		}
	}
	/* The host goes with its task's end (cbcmn__hnd_host_end()). */
	return host->first_error;
}

int64_t cbcmn__hnd_host_end(struct cbcmn_task *t, int64_t result)
{
	struct host *host = t->arg;
	/* Ended without returning (a checkpoint or a budget ended the task,
	 * a stack overflow in a handler, its thread died): its handler
	 * actors halt with that reason, as an actor task's would.  Those
	 * being kicked stay in all until the last kick has let go. */
	if (host->count) {
		if (result >= 0)
			result = CBCMN_EPANIC;
		host->cur = NULL;
		host->cancelled = true; /* no more joins: the task is gone */
		for (struct cbcmn__hnd *h = host->all; h; h = h->next) {
			uint32_t held = held_undelivered(h);
			if (held && h->a->drop)
				h->a->drop(h->state, &h->msg);
			h->held = false;
			bool contained = h->a->contained;
			CBCMN__AGAUGE(h->a->rt, cbcmn__actor_home(h->a), waiting, -1);
			int64_t r = cbcmn__actor_halt_slot(h->a, result, held, t->exec);
			if (!contained && r < 0 &&
			    (host->first_error == 0 || host->first_error == CBCMN_ECANCELED))
				host->first_error = r;
		}
		result = host->first_error;
	}
	host_unref(host);
	return result;
}

bool cbcmn__hnd_joins(const struct cbcmn_task *self, const cbcmn_nursery *n,
		      const cbcmn_actor_opts *opts)
{
	const struct host *host = host_of(self);
	return host && host->n == n &&
	       (!opts || (opts->placement == CBCMN_PLACE_LOCAL && !opts->budget && !opts->caps));
}

int cbcmn__hnd_start(cbcmn_cx *cx, cbcmn_nursery *n, struct cbcmn__actor *a, cbcmn_actor_handler fn,
		     const cbcmn_actor_opts *opts, const cbcmn_spawn_opts *so,
		     const struct cbcmn__spawn_paid *paid)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	bool join = !so;
	struct host *host = join ? host_of(self) : NULL;
	struct cbcmn__hnd *h = join ? host->spare : NULL;
	if (h) { /* the host task's own list: no lock */
		host->spare = h->next;
		host->nspare--;
		memset(h, 0, sizeof(*h));
	} else if (!(h = cbcmn__calloc(1, sizeof(*h)))) {
		cbcmn__spawn_unpay(self, paid);
		return -ENOMEM;
	}
	h->a = a;
	h->fn = fn;
	h->state = a->user;
	if (join) {
		if (host->cancelled || cbcmn__nursery_chain_cancelled(n)) {
			free(h);
			return CBCMN_ECANCELED;
		}
	} else {
		if (!(host = cbcmn__calloc(1, sizeof(*host)))) {
			free(h);
			cbcmn__spawn_unpay(self, paid);
			return -ENOMEM;
		}
		cbcmn__mutex_init(&host->lock, "actor host", CBCMN__LOCK_ACTOR_TABLE);
		atomic_init(&host->refs, 1); /* its task's */
		host->n = n;
	}
	h->host = host;
	/* opts.start: the START call is held as a RETRY's message is, and
	 * the actor queued (on a new host, before its task exists; on ours,
	 * by us), so it comes before anything sent to it. */
	bool start = opts && opts->start;
	if (start) {
		h->held = true;
		h->msg = (cbcmn_actor_msg){.type = CBCMN_ACTOR_START};
		h->queued = true; /* nobody can reach a yet: no lock needed */
		q_push_front(host, h);
	}
	if (host->all)
		host->all->prev = h;
	h->next = host->all;
	host->all = h;
	host->count++;
	cbcmn__mutex_lock(&a->lock);
	a->hnd = h;
	/* Counted waiting (for a call) while it lives: it has no task to be
	 * running or blocked, and would otherwise count as runnable
	 * (live - running - waiting - halting).  Its home never moves. */
	CBCMN__AGAUGE(a->rt, cbcmn__actor_home(a), waiting, 1);
	/* Only a forged reference can have put something there before a
	 * had a handler, which queued nothing: queue it now. */
	bool early = !h->queued && (a->count || a->sys_head);
	h->queued = h->queued || early;
	cbcmn__mutex_unlock(&a->lock);
	if (early)
		f_push(host, h); /* ours, or a new host's before its task exists */
	if (join) {
		/* Paid last, once a is its host's: the charge may wait for
		 * budget and end the host there, whose end halts a with the
		 * rest (charged before, a stayed alive for ever and h leaked:
		 * test_join_spawn_ended_by_the_host_budget_leaves_no_live_actor). */
		cbcmn__charge(self, CBCMN__B_SPAWN, 1);
		return 0;
	}
	/* Paid already (cbcmn__spawn_pay(), before a's slot): never waits. */
	int rc = cbcmn__spawn_made(self, n, cbcmn__hnd_host_main, host, so, paid);
	if (rc) {
		/* Never ran: the caller halts a, which must not look for h. */
		cbcmn__mutex_lock(&a->lock);
		a->hnd = NULL;
		CBCMN__AGAUGE(a->rt, cbcmn__actor_home(a), waiting, -1);
		cbcmn__mutex_unlock(&a->lock);
		cbcmn__mutex_destroy(&host->lock);
		free(host);
		free(h);
		return rc;
	}
	return 0;
}

int cbcmn_actor_spawn_handler(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_handler h, void *state,
			      const cbcmn_actor_opts *opts, cbcmn_actor_ref *out)
{
	if (out)
		*out = CBCMN_ACTOR_NONE;
	if (!h)
		return -EINVAL;
	struct cbcmn__spawn_x x = {.handler = h};
	return cbcmn__actor_spawn_x(cx, n, NULL, state, opts, &x, out);
}
