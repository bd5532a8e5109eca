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
 * (CBCMN_ECANCELED, or its stop's reason).
 *
 * Receive timeouts (cbcmn_actor_set_receive_timeout()).  A deadline is
 * the host's, like everything else about its handler actors: a min-heap
 * of them (host task only, no lock), looked at between batches of calls
 * while one is armed, and the host's wait for its inbox is a timed wait
 * for the earliest (the executor's timer, armed on the executor the host
 * blocks on and disarmed as it wakes, timer.h).  So a deadline moves with
 * its host from executor to executor, and ends with its handler actor
 * (halt, stop, cancellation, the host's end) with nothing left anywhere.
 * A due deadline queues its handler actor, under the slot lock, only if
 * nothing queued it first: the TIMEOUT call and a message are ordered by
 * that lock, and the message that lost is called after it.
 * docs/ACTORS.md has the decisions (hosts, RETRY, receive timeouts).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "actor.h"
#include "iwait.h"
#include "timer.h"

struct host;

/* A receive deadline on its host's heap (below): live while h is armed
 * with seq, else stale. */
struct tmo {
	uint64_t deadline;
	struct cbcmn__hnd *h;
	uint32_t seq;
};

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
	uint8_t held_dropped;         /* its held message went to drop (held_drop()) */
	bool ended;                   /* halted by its host's end (cbcmn__hnd_host_end()) */
	/* Its receive deadline (host only; the heap below). */
	uint32_t tmo_seq;             /* names its live heap entry while armed */
	uint32_t tmo_refs;            /* heap entries naming it, live or stale */
	bool armed;                   /* a deadline is set */
	bool counted;                 /* counted in actors_receiving */
	bool zombie;                  /* halted, kept until its last entry goes */
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
	/* A handler actor's halt runs (its drop, its fini): the host's sends
	 * take the lock path (cbcmn__sends_locked()). */
	bool halting;
	struct cbcmn__hnd *halt_one;          /* the one hnd_halt() halts, from its held drop on */
	bool end_last;                        /* host_end() halts the last not ended */
	struct tmo *tmo;                      /* receive deadlines: a min-heap */
	uint32_t ntmo, tmo_cap;
	uint32_t narmed, nstale;              /* its live and stale entries */
	uint64_t now_hint;                    /* a set's clock read since the last look, or 0 */
};

static struct host *host_of(const struct cbcmn_task *t)
{
	return t && !(t->flags & CBCMN__TF_ABI) && t->fn == cbcmn__hnd_host_main ? t->arg : NULL;
}

static void tmo_clear(struct host *host);

static void host_unref(struct host *host)
{
	/* acq_rel: the last one sees every other's use of the host (and of
	 * the handler actors it frees) before it frees them. */
	if (atomic_fetch_sub_explicit(&host->refs, 1, memory_order_acq_rel) != 1)
		return;
	tmo_clear(host); /* frees the halted ones its stale entries kept */
	struct cbcmn__hnd *lists[2] = {host->all, host->spare};
	for (int i = 0; i < 2; i++)
		while (lists[i]) {
			struct cbcmn__hnd *next = lists[i]->next;
			free(lists[i]);
			lists[i] = next;
		}
	free(host->tmo);
	cbcmn__mutex_destroy(&host->lock);
	free(host);
}

struct cbcmn__actor *cbcmn__hnd_current(const struct cbcmn_task *t)
{
	struct host *h = host_of(t);
	return h ? h->cur : NULL;
}

struct cbcmn__actor *cbcmn__hnd_halting(const struct cbcmn_task *t)
{
	struct host *h = host_of(t);
	return h && h->halt_one ? h->halt_one->a : NULL;
}

bool cbcmn__hnd_calling(const struct cbcmn_task *t)
{
	struct host *h = host_of(t);
	return h && (h->cur || h->halting);
}

bool cbcmn__task_halting(const struct cbcmn_task *t)
{
	struct cbcmn__actor *a = cbcmn__actor_of(t);
	if (a)
		return a->halt_begun;
	struct host *h = host_of(t);
	return h && h->halting;
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

/* ---- receive deadlines (host task only) -------------------------------------
 *
 * A 4-ary min-heap of deadlines, in the array itself: a sift touches
 * neither the handler actors' records nor anything but the array, and
 * an entry ended early (a call came: the usual case) is not taken out but
 * left stale (its seq no longer the actor's, or the actor disarmed), to be
 * dropped when it reaches the top, when nothing is armed any more, or by
 * a compaction once the stale are more than half.  A handler that arms
 * one in every call of a ring of 10 000 paid 160 ns a hop with entries
 * taken out at once (each sift's moves wrote the cold records' places,
 * 43 % of the samples); docs/ACTORS.md has the figures.  An entry keeps
 * its handler actor's record alive (tmo_refs): a halted one whose stale
 * entries remain is a zombie, freed by the last of them.
 *
 * An armed one counts in actors_receiving (waiting for a message with a
 * deadline: the seed's idle/timed-out), settled after each call
 * (tmo_count()), so that a handler that ends and sets one in every call
 * changes nothing there. */
#define TMO_ARITY 4u

static bool tmo_live(const struct tmo *t)
{
	return t->h->armed && t->h->tmo_seq == t->seq;
}

/* An entry naming h is gone. */
static void tmo_unref(struct cbcmn__hnd *h)
{
	if (--h->tmo_refs == 0 && h->zombie)
		free(h);
}

static void tmo_up(struct host *host, uint32_t i, struct tmo t)
{
	while (i && host->tmo[(i - 1) / TMO_ARITY].deadline > t.deadline) {
		host->tmo[i] = host->tmo[(i - 1) / TMO_ARITY];
		i = (i - 1) / TMO_ARITY;
	}
	host->tmo[i] = t;
}

static void tmo_down(struct host *host, uint32_t i, struct tmo t)
{
	for (;;) {
		uint32_t c = TMO_ARITY * i + 1, end = c + TMO_ARITY, m = c;
		if (c >= host->ntmo)
			break;
		if (end > host->ntmo)
			end = host->ntmo;
		for (uint32_t k = c + 1; k < end; k++)
			if (host->tmo[k].deadline < host->tmo[m].deadline)
				m = k;
		if (host->tmo[m].deadline >= t.deadline)
			break;
		host->tmo[i] = host->tmo[m];
		i = m;
	}
	host->tmo[i] = t;
}

static struct tmo tmo_pop(struct host *host)
{
	struct tmo top = host->tmo[0];
	if (--host->ntmo)
		tmo_down(host, 0, host->tmo[host->ntmo]);
	return top;
}

/* Drop every entry (nothing is armed, or the host goes). */
static void tmo_clear(struct host *host)
{
	uint32_t n = host->ntmo;
	host->ntmo = host->nstale = 0;
	for (uint32_t i = 0; i < n; i++)
		tmo_unref(host->tmo[i].h);
}

/* Drop the stale entries once they are more than half: O(entries),
 * paid for by the arms that left them. */
static void tmo_compact(struct host *host)
{
	if (host->ntmo < 64 || host->nstale <= host->ntmo / 2)
		return;
	uint32_t n = 0;
	for (uint32_t i = 0; i < host->ntmo; i++) {
		if (tmo_live(&host->tmo[i]))
			host->tmo[n++] = host->tmo[i];
		else
			tmo_unref(host->tmo[i].h);
	}
	host->ntmo = n;
	host->nstale = 0;
	for (uint32_t i = n / TMO_ARITY + 1; i-- > 0;)
		if (i < n)
			tmo_down(host, i, host->tmo[i]);
}

/* Settle h's count in actors_receiving with whether it is armed. */
static void tmo_count(struct cbcmn__hnd *h)
{
	if (h->armed == h->counted)
		return;
	h->counted = h->armed;
	CBCMN__AGAUGE(h->a->rt, cbcmn__actor_home(h->a), receiving, h->armed ? 1 : -1);
}

/* h has no deadline any more (a call began, it halts, its TIMEOUT is
 * queued); nothing if it had none.  Its entry is left stale. */
static void tmo_disarm(struct host *host, struct cbcmn__hnd *h)
{
	if (!h->armed)
		return;
	h->armed = false;
	host->nstale++;
	if (!--host->narmed)
		tmo_clear(host);
}

/* Arm (or move) h's deadline.  0 or -ENOMEM (nothing changed). */
static int tmo_arm(struct host *host, struct cbcmn__hnd *h, uint64_t deadline)
{
	tmo_compact(host);
	if (host->ntmo == host->tmo_cap) {
		uint32_t cap = host->tmo_cap ? host->tmo_cap * 2 : 16;
		struct tmo *v = realloc(host->tmo, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		host->tmo = v;
		host->tmo_cap = cap;
	}
	if (h->armed)
		host->nstale++; /* the entry it had */
	else
		host->narmed++;
	h->armed = true;
	h->tmo_refs++;
	tmo_up(host, host->ntmo++, (struct tmo){deadline, h, ++h->tmo_seq});
	return 0;
}

/* The earliest live entry's deadline, the stale ones above it dropped;
 * something must be armed. */
static uint64_t tmo_next(struct host *host)
{
	while (!tmo_live(&host->tmo[0])) {
		host->nstale--;
		tmo_unref(tmo_pop(host).h);
	}
	return host->tmo[0].deadline;
}

/* Queue a TIMEOUT call, held as a RETRY's message is, for each handler
 * actor whose deadline has passed, unless something queued it first (a
 * message, a stop: that call comes first and ends the deadline).  The
 * slot lock orders the two: a message put after this is called after
 * the TIMEOUT, never lost.  (test_message_and_deadline_racing_one_first_nothing_lost) */
static void tmo_fire(struct host *host, const struct cbcmn_runtime *rt)
{
	/* A set's clock read since the last look is at most a batch old:
	 * a deadline due by then is due now (never early), and a handler
	 * that sets one in every call pays one clock read, not two. */
	uint64_t now = host->now_hint ? host->now_hint : cbcmn__now(rt);
	host->now_hint = 0;
	while (host->narmed && tmo_next(host) <= now) {
		struct tmo t = tmo_pop(host);
		struct cbcmn__hnd *h = t.h;
		h->armed = false; /* live: not a zombie, still referenced by a */
		host->narmed--;
		tmo_unref(h);
		tmo_count(h);
		cbcmn__flock_lock(&h->a->lock);
		bool mine = !h->queued;
		h->queued = true;
		cbcmn__flock_unlock(&h->a->lock);
		if (!mine)
			continue;
		h->held = true;
		h->msg = (cbcmn_actor_msg){.type = CBCMN_ACTOR_TIMEOUT};
		h->msg.body.timeout.deadline = t.deadline;
		f_push(host, h);
	}
	if (!host->narmed)
		tmo_clear(host);
}

int cbcmn_actor_set_receive_timeout(cbcmn_cx *cx, uint64_t timeout_ns)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	int err;
	struct cbcmn__actor *a = cbcmn__actor_caller(self, &err);
	if (!a)
		return err;
	struct host *host = host_of(self);
	if (!host || host->cur != a)
		return -EPERM; /* a fiber actor: cbcmn_actor_receive() has its timeout */
	if (timeout_ns == CBCMN_ACTOR_FOREVER) {
		tmo_disarm(host, a->hnd);
		return 0;
	}
	uint64_t now = host->now_hint = cbcmn__now(self->rt);
	return tmo_arm(host, a->hnd,
		       timeout_ns > UINT64_MAX - 1 - now ? UINT64_MAX - 1 : now + timeout_ns);
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

/* Wait until the inbox has something, the host is cancelled, or the
 * earliest receive deadline comes.  The timer is the executor's the host
 * blocks on, and lives only as long as this wait: the deadline itself is
 * the host's, and goes wherever the host goes. */
static void wait_inbox(struct host *host, struct cbcmn_task *self)
{
	struct cbcmn__iwait iw;
	struct cbcmn__timer *tm = NULL;
	cbcmn__mutex_lock(&host->lock);
	if (host->in_head) {
		cbcmn__mutex_unlock(&host->lock);
		return;
	}
	cbcmn__iwait_init(&iw, self);
	iw.kind = CBCMN__G_CHAN; /* waiting for messages, for the snapshot */
	if (host->narmed && !(tm = cbcmn__timer_arm(self->exec, tmo_next(host), &iw))) {
		/* Out of memory for the timer: poll for the deadline instead
		 * (the loop looks at it each time round). */
		atomic_store_explicit(&self->state, CBCMN__T_RUNNING, memory_order_relaxed);
		cbcmn__mutex_unlock(&host->lock);
		cbcmn_yield((cbcmn_cx *)self);
		return;
	}
	host->waiter = &iw;
	cbcmn__mutex_unlock(&host->lock);
	uint32_t how = cbcmn__iwait_block(&iw);
	if (tm)
		cbcmn__timer_disarm(tm);
	if (how != CBCMN__IW_WOKEN) {
		/* Cancelled or timed out: a kicker that comes now must not
		 * claim it. */
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
		cbcmn__flock_lock(&h->a->lock);
		bool mine = !h->queued;
		h->queued = true;
		cbcmn__flock_unlock(&h->a->lock);
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

/* h halts: the message it holds for a RETRY, if the program's, to drop,
 * once and counted undelivered (held_dropped, for the DOWN), even if the
 * host ends in there and its end halts h (cbcmn__hnd_host_end()). */
static void held_drop(struct cbcmn__hnd *h)
{
	if (!held_undelivered(h)) {
		h->held = false;
		return;
	}
	h->held = false;
	h->held_dropped = 1;
	if (h->a->drop)
		h->a->drop(h->state, &h->msg);
}

/* Records a host keeps for its next joins: a subtree's worth of a tree of
 * spawns (skynet's ten children a node). */
#define SPARE_MAX 64u

/* Halt handler actor h (held by the host) with reason; free it. */
/* hnd_halt()'s halt of host->halt_one by host task t, under a landing pad
 * of its own: a drop or fini that runs the host's budget out (or
 * overflows) ends that callback, as a fiber actor's does, and this is
 * called again, the halt going on from where it was (actor.c,
 * halt_finish()).  It landed on the host task's pad and ended the whole
 * host, every handler actor on it halted
 * (test_handler_drop_out_of_budget_ends_the_drop_not_the_host).  The halt
 * never waits nor moves (cbcmn__task_halting()): t->exec is e still. */
static int64_t halt_one(struct cbcmn_task *t, int64_t reason)
{
	struct host *host = t->arg;
	struct cbcmn__hnd *h = host->halt_one;
	/* The host's budget goes back at this halt if h is the last: asked
	 * there (cbcmn__hnd_last()), after its drops and fini, which may
	 * join another to the host with its cx (it then runs on, charged). */
	return cbcmn__actor_halt_slot(h->a, reason, h->held_dropped, t->exec, t);
}

bool cbcmn__hnd_last(const struct cbcmn_task *t)
{
	const struct host *host = host_of(t);
	return !host || host->count == 1 || host->end_last;
}

static void hnd_halt(struct host *host, struct cbcmn__hnd *h, int64_t reason,
		     struct cbcmn__exec *e)
{
	struct cbcmn__actor *a = h->a;
	/* Halting from the held message's drop on: a wait there must not
	 * park either (cbcmn__task_halting(); it slept, and e below was
	 * another executor's after the wake:
	 * test_waits_in_drops_of_stopped_and_cancelled_actors_do_not_wait). */
	host->halting = true;
	host->halt_one = h; /* its drops' calls are its (cbcmn__hnd_halting()) */
	/* A message taken for a RETRY is still undelivered: the oldest. */
	held_drop(h);
	bool contained = a->contained; /* fixed at spawn */
	tmo_disarm(host, h); /* no TIMEOUT after the halt */
	tmo_count(h);
	CBCMN__AGAUGE(a->rt, cbcmn__actor_home(a), waiting, -1);
	/* Its DOWNs count it undelivered too (the mailbox's alone before:
	 * test_down_undelivered_counts_the_message_held_for_a_retry). */
	struct cbcmn_task *self = e->current; /* the host task */
	reason = cbcmn__actor_end_guarded(self, reason, halt_one);
	host->halt_one = NULL;
	host->halting = false;
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
	if (h->tmo_refs) {
		h->zombie = true; /* its stale deadlines free it: never a spare */
	} else if (host->nspare < SPARE_MAX) {
		h->next = host->spare;
		host->spare = h;
		host->nspare++;
	} else {
		free(h);
	}
}

/* At the end of a full batch: whether h has more to be called for (a
 * stop or a cancellation halts it), else it is idle (not queued).  Queued
 * must mean that a call or a halt comes: a due deadline takes it so and
 * makes no TIMEOUT (tmo_fire()), and one armed in the batch's last call
 * was lost when the pop after found nothing.
 * (test_deadline_armed_in_the_last_call_of_a_batch_fires) */
static bool hnd_more(struct host *host, struct cbcmn__hnd *h)
{
	struct cbcmn__actor *a = h->a;
	cbcmn__flock_lock(&a->lock);
	bool more = a->count || a->sys_head || a->stopping || host->cancelled;
	h->queued = more;
	cbcmn__flock_unlock(&a->lock);
	return more;
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
		cbcmn__flock_lock(&a->lock);
		if (a->stopping || host->cancelled) {
			cbcmn__flock_unlock(&a->lock);
			/* halt() takes a stop's reason over ours. */
			hnd_halt(host, h, CBCMN_ECANCELED, e);
			return calls;
		}
		if (!h->held && !cbcmn__mb_take(a, &h->msg, &wl, e)) {
			h->queued = false; /* the next message queues it again */
			cbcmn__flock_unlock(&a->lock);
			return calls;
		}
		cbcmn__flock_unlock(&a->lock);
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
		tmo_disarm(host, h); /* any call ends the wait a deadline was for */
		host->cur = a;
		int64_t r = h->fn((cbcmn_cx *)self, h->state, &h->msg);
		host->cur = NULL;
		if (r == CBCMN_ACTOR_RETRY)
			tmo_disarm(host, h); /* the same message comes next */
		tmo_count(h);
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
	if (!h->held && !hnd_more(host, h))
		return calls; /* the batch took the last: idle */
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
		if (host->narmed)
			tmo_fire(host, self->rt);
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
		if (used >= quantum && host->count) { /* the last halted: its budget given back */
			/* Fairness: tasks and actors of this executor run too.
			 * A cancelled yield is seen at the top of the loop. */
			used = 0;
			cbcmn_yield(cx);
		}
	}
	/* The host goes with its task's end (cbcmn__hnd_host_end()). */
	return host->first_error;
}

/* cbcmn__hnd_host_end(), under a landing pad: a drop or fini it calls
 * may end the task again (its stack overflows), and it then starts over,
 * past the handler actors halted already, that one's halt going on. */
static int64_t host_end(struct cbcmn_task *t, int64_t result)
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
		host->halting = true; /* till its end: it halts them all */
		host->cancelled = true; /* no more joins: the task is gone */
		uint64_t left = 0;
		for (struct cbcmn__hnd *h = host->all; h; h = h->next)
			left += !h->ended;
		for (struct cbcmn__hnd *h = host->all; h; h = h->next) {
			if (h->ended)
				continue;
			/* The last gives the host's budget back before its DOWNs,
			 * as hnd_halt()'s last does (no join can come: cancelled):
			 * else a supervisor restarting it on its DOWN raced the
			 * refund at the task's end (a handler child whose call
			 * overflowed: the supervisor ended CBCMN_EBUDGET,
			 * test_restart_finds_an_overflowed_handler_childs_budget_given_back). */
			host->end_last = --left == 0;
			/* Its halt under way (hnd_halt()), and the task ended
			 * in its drop or fini: that halt goes on (actor.c,
			 * halt_x()), its held message and gauge done already. */
			bool begun = h->a->halt_begun;
			held_drop(h);
			tmo_disarm(host, h);
			tmo_count(h);
			bool contained = h->a->contained;
			if (!begun)
				CBCMN__AGAUGE(h->a->rt, cbcmn__actor_home(h->a), waiting, -1);
			int64_t r = cbcmn__actor_halt_slot(h->a, result, h->held_dropped, t->exec,
							   host->end_last ? t : NULL);
			h->ended = true;
			if (!contained && r < 0 &&
			    (host->first_error == 0 || host->first_error == CBCMN_ECANCELED))
				host->first_error = r;
		}
		result = host->first_error;
	}
	return result;
}

int64_t cbcmn__hnd_host_end(struct cbcmn_task *t, int64_t result)
{
	struct host *host = t->arg;
	result = cbcmn__actor_end_guarded(t, result, host_end);
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
	cbcmn__flock_lock(&a->lock);
	a->hnd = h;
	/* Counted waiting (for a call) while it lives: it has no task to be
	 * running or blocked, and would otherwise count as runnable
	 * (live - running - waiting - halting).  Its home never moves. */
	CBCMN__AGAUGE(a->rt, cbcmn__actor_home(a), waiting, 1);
	/* Only a forged reference can have put something there before a
	 * had a handler, which queued nothing: queue it now. */
	bool early = !h->queued && (a->count || a->sys_head);
	h->queued = h->queued || early;
	cbcmn__flock_unlock(&a->lock);
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
		cbcmn__flock_lock(&a->lock);
		a->hnd = NULL;
		CBCMN__AGAUGE(a->rt, cbcmn__actor_home(a), waiting, -1);
		cbcmn__flock_unlock(&a->lock);
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
