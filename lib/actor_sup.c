/* actor_sup.c: supervisors: a startup graph of child actors, restarted when they halt.
 *
 * A supervisor is an actor (its behaviour is sup_main()) that opens one
 * nursery and spawns its children into it, contained (a child's halt
 * reason goes only to the supervisor's DOWN, never to the nursery: no
 * fail-fast among siblings) and monitored from before they can run
 * (cbcmn__actor_spawn_x()).  docs/ACTORS.md "Supervisors" has the design.
 *
 * The spec is checked and copied into a template (struct tmpl) when the
 * supervisor is started: the startup order (dependencies first, a cycle
 * is -EINVAL), and a template of its own for each nested supervisor.  The
 * top supervisor owns the templates of its whole tree; a nested one only
 * reads its own, which outlives it (its parent waits for its DOWN before
 * it ends).
 *
 * Everything here runs on the supervisor's own task, except
 * cbcmn__sup_exhausted() (a child, from budget.c) and cbcmn_sup_child_ref()
 * (anyone): those touch only atomics of struct sup.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "actor.h"
#include "probes.h"

/* Sent to a supervisor by cbcmn__sup_exhausted(): a child waits
 * exhausted.  In the program's range of types: a supervisor's mailbox is
 * its own, and a program that sends this to one only makes it look. */
#define SUP_POKE (CBCMN_ACTOR_SYS - 1u)

#define DEPTH_MAX 16u                    /* nested supervisors */
#define STOPPED INT64_MIN                /* recover(): the supervisor was stopped */
#define DEFAULT_NS (5ull * 1000000000ull) /* period_ns, shutdown_ns */

/* A checked copy of a spec. */
struct tmpl {
	cbcmn_sup_spec spec;  /* children: kids below */
	cbcmn_budget recharge;
	cbcmn_sup_child *kids;
	struct kid_x {        /* what kids[i].budget and .caps point to */
		cbcmn_budget budget;
		cbcmn_caps caps;
	} *kx;
	uint32_t *deps;       /* every child's deps, one array */
	uint32_t *order;      /* startup order: child indices, dependencies first */
	uint32_t *rank;       /* rank[i]: i's place in order */
	struct tmpl **nested; /* [i]: child i's template when it is a supervisor */
};

struct child {
	_Atomic cbcmn_actor_ref ref; /* the running incarnation; NONE: not running */
	uint64_t mon;                /* the supervisor's monitor on it */
	bool up;                     /* spawned, DOWN not taken yet */
	bool stopping;               /* we stopped it: its halt is not a crash */
	bool crashed;                /* halted on its own, not handled yet */
	bool finished;               /* not to be restarted */
	int64_t reason;              /* of the crash */
};

struct sup {
	const struct tmpl *tm;
	struct tmpl *owned;          /* the top supervisor's: the whole tree's */
	struct sup *parent;          /* the supervisor this one is a child of */
	struct child *ch;
	bool *in;                    /* recover()'s set: here, so that an unwind leaks nothing */
	cbcmn_nursery *n;            /* written before the first child's spawn publishes it */
	cbcmn_actor_ref self;
	_Atomic uint32_t poke;       /* a child waits exhausted (cbcmn__sup_exhausted()) */
	uint64_t *stamps;            /* the last max_restarts restart times, a ring */
	uint32_t stamp_head;
	uint64_t nrestarts;          /* this supervisor's own restarts */
	uint32_t rr[3];              /* round robins: a NUMA node's executors, big, little */
	/* The program's drop for messages left in the supervisor's mailbox,
	 * and the state it gets (NULL, or a nested one's child state). */
	void (*drop)(void *state, const cbcmn_actor_msg *m);
	void *drop_state;
	bool cancelled;              /* we cancelled n: no child can start any more */
	bool joined;                 /* n's await_all is over: n is freed */
	/* Added to by nested supervisors at their halt, in sup_fini()
	 * (relaxed: read by this supervisor only after their DOWN, which
	 * their halt delivers later under a lock). */
	_Atomic uint64_t restarts, undelivered, exhausted;
};

static int64_t sup_main(cbcmn_cx *cx, void *arg);

/* ---- templates --------------------------------------------------------------- */

static void tmpl_free(struct tmpl *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; t->nested && i < t->spec.nchildren; i++)
		tmpl_free(t->nested[i]);
	free(t->nested);
	free(t->kids);
	free(t->kx);
	free(t->deps);
	free(t->order);
	free(t->rank);
	free(t);
}

/* Executor e as a child's placement sees it: an unpinned executor counts
 * as NUMA node 0 and as a big core (kind 0: "performance, or the only
 * kind", cbcmn_topo.h). */
static bool serves(const struct cbcmn__exec *e, uint32_t placement, int32_t node)
{
	int32_t kind = e->kind < 0 ? 0 : e->kind;
	switch (placement) {
	case CBCMN_SUP_PLACE_NODE:
		return (e->node < 0 ? 0 : e->node) == node;
	case CBCMN_SUP_PLACE_BIG:
		return kind == 0;
	default: /* CBCMN_SUP_PLACE_LITTLE */
		return kind == 1;
	}
}

/* The shard of the k-th executor serving (placement, node), counting
 * round; -1: none.  The program's executors only: the spare (monitor.c),
 * the last slot, takes no pinned task.  Big and little: -1 also where the
 * executors are all of one kind (one kind of core, an unpinned runtime,
 * executors pinned to one kind only): there is nothing to choose, and a
 * pinned child would lose migration for nothing (docs/ACTORS.md). */
static int place_exec(const struct cbcmn_runtime *rt, uint32_t placement, int32_t node, uint32_t k)
{
	uint32_t m = 0, n = cbcmn__nworkers(rt);
	for (uint32_t i = 0; i < n; i++)
		m += serves(rt->exec[i], placement, node);
	if (m == 0 || (placement != CBCMN_SUP_PLACE_NODE && m == n))
		return -1;
	k %= m;
	for (uint32_t i = 0; i < n; i++)
		if (serves(rt->exec[i], placement, node) && k-- == 0)
			return (int)i;
	return -1;
}

static int child_check(const struct cbcmn_runtime *rt, const cbcmn_sup_child *c, uint32_t i,
		       uint32_t nchildren)
{
	if ((!c->fn && !c->handler) == !c->sup || (c->fn && c->handler) || c->restart > CBCMN_SUP_TEMPORARY ||
	    (c->placement > CBCMN_PLACE_STEALABLE && c->placement != CBCMN_SUP_PLACE_NODE &&
	     c->placement != CBCMN_SUP_PLACE_BIG && c->placement != CBCMN_SUP_PLACE_LITTLE) ||
	    c->mailbox_cap > CBCMN_ACTOR_MAILBOX_MAX ||
	    (c->ndeps && !c->deps) || c->ndeps > nchildren ||
	    ((c->placement == CBCMN_PLACE_PINNED || c->placement == CBCMN_PLACE_STEALABLE_ON) &&
	     c->shard >= cbcmn__nworkers(rt)) ||
	    (c->placement == CBCMN_SUP_PLACE_NODE &&
	     (c->node < 0 || place_exec(rt, CBCMN_SUP_PLACE_NODE, c->node, 0) < 0)))
		return -EINVAL;
	for (uint32_t d = 0; d < c->ndeps; d++)
		if (c->deps[d] >= nchildren || c->deps[d] == i)
			return -EINVAL;
	return 0;
}

/* A min-heap of child indices (the ready children, lowest index first). */
static void heap_push(uint32_t *h, uint32_t *len, uint32_t v)
{
	uint32_t i = (*len)++;
	for (; i > 0 && h[(i - 1) / 2] > v; i = (i - 1) / 2)
		h[i] = h[(i - 1) / 2];
	h[i] = v;
}

static uint32_t heap_pop(uint32_t *h, uint32_t *len)
{
	uint32_t top = h[0], v = h[--*len], i = 0;
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= *len)
			break;
		if (c + 1 < *len && h[c + 1] < h[c])
			c++;
		if (h[c] >= v)
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = v;
	return top;
}

/* Startup order: repeatedly the lowest-indexed child whose dependencies
 * are all placed; none while some are left: a cycle.  Kahn's algorithm:
 * each child counts its dependencies not placed yet, and placing one
 * counts down its dependents' (found through an index of dependents, the
 * edges reversed), so the cost is O(edges + children log children).  The
 * first version rescanned every child for each place: 0.47 s for 1024
 * children of 1024 dependencies each, at every cbcmn_sup_start(). */
static int tmpl_order(struct tmpl *t)
{
	uint32_t n = t->spec.nchildren, ne = 0;
	for (uint32_t i = 0; i < n; i++)
		ne += t->kids[i].ndeps;
	uint32_t *left = malloc(n * sizeof(*left));
	uint32_t *pos = calloc(n + 1, sizeof(*pos)); /* dependents of x: dep[pos[x], pos[x+1]) */
	uint32_t *dep = malloc((ne + 1) * sizeof(*dep));
	uint32_t *heap = malloc(n * sizeof(*heap));
	int rc = -ENOMEM;
	if (!left || !pos || !dep || !heap)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		left[i] = t->kids[i].ndeps;
		for (uint32_t d = 0; d < t->kids[i].ndeps; d++)
			pos[t->kids[i].deps[d]]++;
	}
	for (uint32_t x = 1; x < n; x++)
		pos[x] += pos[x - 1]; /* the end of x's dependents */
	pos[n] = ne;
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t d = 0; d < t->kids[i].ndeps; d++)
			dep[--pos[t->kids[i].deps[d]]] = i; /* pos[x] ends at x's start */
	uint32_t len = 0, k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (left[i] == 0)
			heap_push(heap, &len, i);
	while (len) {
		uint32_t pick = heap_pop(heap, &len);
		t->order[k] = pick;
		t->rank[pick] = k++;
		/* A dependency named twice counts twice: as in left. */
		for (uint32_t e = pos[pick]; e < pos[pick + 1]; e++)
			if (--left[dep[e]] == 0)
				heap_push(heap, &len, dep[e]);
	}
	rc = k == n ? 0 : -EINVAL; /* the rest wait on each other: a cycle */
out:
	free(left);
	free(pos);
	free(dep);
	free(heap);
	return rc;
}

/* *total: the tree's children so far, counted before each copy is made,
 * so that a tree too big is refused before it takes the memory. */
static int tmpl_make(const struct cbcmn_runtime *rt, const cbcmn_sup_spec *sp, uint32_t depth,
		     uint32_t *total, struct tmpl **out)
{
	*out = NULL;
	/* A spec that nests itself would nest for ever: a cycle too. */
	if (!sp || depth >= DEPTH_MAX || sp->strategy > CBCMN_SUP_ALL || !sp->children ||
	    sp->nchildren == 0 || sp->nchildren > CBCMN_SUP_MAX_CHILDREN ||
	    sp->nchildren > CBCMN_SUP_MAX_TREE - *total)
		return -EINVAL;
	*total += sp->nchildren;
	/* SPEC-021 [SCHED:3.2.3], §10.2.3: supervisor recharge is :cluster's. */
	if (sp->recharge && rt->cfg.profile != CBCMN_PROFILE_CLUSTER)
		return -EINVAL;
	if (sp->max_restarts > CBCMN_SUP_MAX_RESTARTS && sp->max_restarts != CBCMN_SUP_UNLIMITED)
		return -EINVAL;
	uint32_t n = sp->nchildren, ndeps = 0;
	for (uint32_t i = 0; i < n; i++) {
		int rc = child_check(rt, &sp->children[i], i, n);
		if (rc)
			return rc;
		ndeps += sp->children[i].ndeps;
	}
	struct tmpl *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->spec = *sp;
	t->kids = malloc(n * sizeof(*t->kids));
	t->kx = malloc(n * sizeof(*t->kx));
	t->deps = malloc((ndeps + 1) * sizeof(*t->deps));
	t->order = malloc(n * sizeof(*t->order));
	t->rank = malloc(n * sizeof(*t->rank));
	t->nested = calloc(n, sizeof(*t->nested));
	int rc = -ENOMEM;
	if (!t->kids || !t->kx || !t->deps || !t->order || !t->rank || !t->nested)
		goto fail;
	memcpy(t->kids, sp->children, n * sizeof(*t->kids));
	t->spec.children = t->kids;
	if (sp->recharge) {
		t->recharge = *sp->recharge;
		t->spec.recharge = &t->recharge;
	}
	uint32_t *d = t->deps;
	for (uint32_t i = 0; i < n; i++) {
		cbcmn_sup_child *c = &t->kids[i];
		if (c->ndeps)
			memcpy(d, c->deps, c->ndeps * sizeof(*d));
		c->deps = d;
		d += c->ndeps;
		/* What the caller's pointers named, ours from now on. */
		if (c->budget) {
			t->kx[i].budget = *c->budget;
			c->budget = &t->kx[i].budget;
		}
		if (c->caps) {
			t->kx[i].caps = *c->caps;
			c->caps = &t->kx[i].caps;
		}
	}
	if ((rc = tmpl_order(t)))
		goto fail;
	for (uint32_t i = 0; i < n; i++)
		if (t->kids[i].sup) {
			if ((rc = tmpl_make(rt, t->kids[i].sup, depth + 1, total, &t->nested[i])))
				goto fail;
			t->kids[i].sup = NULL; /* the caller's: nested[i] from now on */
		}
	*out = t;
	return 0;
fail:
	tmpl_free(t);
	return rc;
}

/* ---- a supervisor's state ------------------------------------------------- */

static struct sup *sup_new(const struct tmpl *tm, struct sup *parent)
{
	struct sup *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->tm = tm;
	s->parent = parent;
	s->ch = calloc(tm->spec.nchildren, sizeof(*s->ch));
	s->in = calloc(tm->spec.nchildren, sizeof(*s->in));
	uint32_t nstamps = tm->spec.max_restarts == CBCMN_SUP_UNLIMITED ? 0 : tm->spec.max_restarts;
	s->stamps = calloc(nstamps + 1, sizeof(*s->stamps));
	if (!s->ch || !s->in || !s->stamps) {
		free(s->ch);
		free(s->in);
		free(s->stamps);
		free(s);
		return NULL;
	}
	return s;
}

/* The actor's fini (actor.c): at its halt, whether or not it ran.  The
 * report's reason is the halt's, which the nursery and the monitors see:
 * a stop's reason wins over what sup_main() returned, also
 * when the stop came before it ran or while it gave up. */
static void sup_fini(void *arg, int64_t reason)
{
	struct sup *s = arg;
	cbcmn_sup_report rep = {
		.reason = reason,
		.restarts = atomic_load_explicit(&s->restarts, memory_order_relaxed),
		.undelivered = atomic_load_explicit(&s->undelivered, memory_order_relaxed),
		.exhausted = atomic_load_explicit(&s->exhausted, memory_order_relaxed),
	};
	if (s->tm->spec.report)
		*s->tm->spec.report = rep;
	/* Into the parent's here, not on sup_main()'s way out: a supervisor
	 * ended by an unwind (its budget given up, a stack overflow) never
	 * takes it, and its subtree's counts were lost.  The parent is alive:
	 * it waits for our DOWN, which comes after this. */
	if (s->parent) {
		struct sup *p = s->parent;
		atomic_fetch_add_explicit(&p->restarts, rep.restarts, memory_order_relaxed);
		atomic_fetch_add_explicit(&p->undelivered, rep.undelivered, memory_order_relaxed);
		atomic_fetch_add_explicit(&p->exhausted, rep.exhausted, memory_order_relaxed);
	}
	free(s->ch);
	free(s->in);
	free(s->stamps);
	tmpl_free(s->owned);
	free(s);
}

/* The supervisor's drop (actor.c, at its halt, before sup_fini()): the
 * program's, with the program's state, for the program's messages only.
 * Its actor state is s, which the program never saw. */
static void sup_drop(void *arg, const cbcmn_actor_msg *m)
{
	struct sup *s = arg;
	if (s->drop && m->type != SUP_POKE)
		s->drop(s->drop_state, m);
}

/* ---- children ------------------------------------------------------------------ */

static int start_child(cbcmn_cx *cx, struct sup *s, uint32_t i)
{
	const cbcmn_sup_child *c = &s->tm->kids[i];
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	cbcmn_actor_opts o = {
		.mailbox_cap = c->mailbox_cap,
		.placement = c->placement,
		.shard = c->shard,
		.budget = c->budget,
		.caps = c->caps,
		.drop = c->drop,
		.start = c->start, /* a handler's START, at every start; else ignored */
	};
	if (c->placement >= CBCMN_SUP_PLACE_NODE) {
		/* Pinned to the next executor of its kind or node in turn; no
		 * choice to make (big, little): the default placement. */
		int x = place_exec(self->rt, c->placement, c->node,
				   s->rr[c->placement - CBCMN_SUP_PLACE_NODE]++);
		o.placement = x < 0 ? CBCMN_PLACE_LOCAL : CBCMN_PLACE_PINNED;
		o.shard = x < 0 ? 0 : (uint32_t)x;
	}
	cbcmn_actor_fn fn = c->fn;
	void *state = c->state;
	struct cbcmn__spawn_x x = {.contained = true, .mon = &s->ch[i].mon,
				   .handler = c->handler};
	if (!fn && !c->handler) {
		struct sup *ns = sup_new(s->tm->nested[i], s);
		if (!(state = ns))
			return -ENOMEM;
		ns->drop = c->drop;
		ns->drop_state = c->state;
		o.drop = sup_drop;
		fn = sup_main;
		x.fini = sup_fini;
	}
	cbcmn_actor_ref ref;
	int rc = cbcmn__actor_spawn_x(cx, s->n, fn, state, &o, &x, &ref);
	if (rc)
		return rc; /* a nested supervisor's state went with its fini */
	struct child *ch = &s->ch[i];
	ch->up = true;
	ch->stopping = ch->crashed = false;
	/* relaxed: cbcmn_sup_child_ref() reads it under the supervisor's
	 * slot lock, for a reference that is checked when used anyway. */
	atomic_store_explicit(&ch->ref, ref, memory_order_relaxed);
	return 0;
}

/* A DOWN for the supervisor: which child, and was it a crash. */
static void on_down(struct sup *s, const cbcmn_actor_msg *m)
{
	for (uint32_t i = 0; i < s->tm->spec.nchildren; i++) {
		struct child *ch = &s->ch[i];
		if (!ch->up || ch->mon != m->body.down.monitor)
			continue;
		ch->up = false;
		atomic_store_explicit(&ch->ref, CBCMN_ACTOR_NONE, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->undelivered, m->body.down.undelivered,
					  memory_order_relaxed);
		if (m->body.down.reason == CBCMN_EBUDGET)
			atomic_fetch_add_explicit(&s->exhausted, 1, memory_order_relaxed);
		if (!ch->stopping) {
			ch->crashed = true;
			ch->reason = m->body.down.reason;
		}
		return;
	}
	/* Not a child's: a spawn that failed after its monitor was set. */
}

/* Children waiting exhausted: recharged (spec.recharge, :cluster) or ended
 * (CBCMN_EBUDGET, a crash) as their nursery's opener would. */
static void settle_exhausted(cbcmn_cx *cx, struct sup *s)
{
	/* acq_rel: pairs with cbcmn__sup_exhausted()'s exchange; the child
	 * listed itself under n->lock before, which we take next. */
	if (!atomic_exchange_explicit(&s->poke, 0, memory_order_acq_rel))
		return;
	const cbcmn_budget *give = s->tm->spec.recharge;
	if (!give) {
		cbcmn__budget_kill_exhausted(s->n);
		return;
	}
	/* Those it cannot pay for are ended: their DOWN counts them. */
	uint64_t n = 0;
	cbcmn__budget_recharge_exhausted((struct cbcmn_task *)cx, s->n, give, &n);
	atomic_fetch_add_explicit(&s->exhausted, n, memory_order_relaxed);
}

/* The stopped supervisor me has seen its stop (its receive said -ESHUTDOWN)
 * and ends its children on its own terms: from now on its sleeps sleep.
 * A stop cuts every wait of the stopped actor short (actor.c's interrupted
 * flag), so the polls below were yields: a stopped tree spun its executors
 * for up to shutdown_ns, and starved what its children waited for (a sleeper
 * on the same executors never woke: test_shutdown_reports_undelivered_messages
 * hung).  Its mailbox stays closed (stopping stays set: a receive is still
 * -ESHUTDOWN, a send -ESRCH) and a cancellation of its nursery still cuts
 * its waits short.  Under the slot's lock: a later stop finds stopping set
 * and sets the flag no more. */
static void stop_seen(struct cbcmn__actor *me)
{
	cbcmn__flock_lock(&me->lock);
	/* relaxed: only our own task reads it from here on (a stopper that
	 * set it did so under this lock, before). */
	atomic_store_explicit(&me->interrupted, 0, memory_order_relaxed);
	cbcmn__flock_unlock(&me->lock);
}

/* Our own task is cancelled (its nursery, not a stop): each of our waits
 * returns at once, so the polls below spun (a sleep of no time never left
 * the executor: a task pinned beside us starved until the children ended).
 * Wait for them all in n's await_all instead, which a cancellation does not
 * cut short, after cancelling n (it is already, being nested in ours: this
 * makes it so whatever cancelled us).  Each child's DOWN is delivered
 * before its nursery hears of its end (actor.c), so all are queued when it
 * returns.  n is freed then: joined says so. */
static void join_children(cbcmn_cx *cx, struct sup *s)
{
	cbcmn_nursery_cancel(s->n);
	s->cancelled = true;
	cbcmn_nursery_await_all(cx, s->n);
	s->joined = true;
	struct cbcmn__actor *me = cbcmn__actor_of((struct cbcmn_task *)cx);
	cbcmn_actor_msg m;
	while (cbcmn__mb_take_down(me, &m))
		on_down(s, &m);
}

/* Wait until child i's DOWN is taken, or, past deadline, cancel every
 * child (s->cancelled).  Receives while it can (the supervisor is neither
 * stopped nor cancelled), else polls its DOWN queue between yields, then
 * between short sleeps. */
static void wait_down(cbcmn_cx *cx, struct sup *s, uint32_t i, uint64_t deadline)
{
	struct cbcmn_runtime *rt = ((struct cbcmn_task *)cx)->rt;
	struct cbcmn__actor *me = cbcmn__actor_of((struct cbcmn_task *)cx);
	bool can_receive = true;
	uint32_t polls = 0;
	while (s->ch[i].up && !s->joined) {
		settle_exhausted(cx, s);
		uint64_t now = cbcmn_now(rt);
		if (!s->cancelled && now >= deadline) {
			/* It ignores its stop: nothing ends one child alone. */
			cbcmn_nursery_cancel(s->n);
			s->cancelled = true;
		}
		cbcmn_actor_msg m;
		if (can_receive) {
			uint64_t left = s->cancelled ? CBCMN_ACTOR_FOREVER : deadline - now;
			int rc = cbcmn_actor_receive(cx, &m, left);
			if (rc == 0 && m.type == CBCMN_ACTOR_DOWN)
				on_down(s, &m);
			else if (rc == -ESHUTDOWN || rc == CBCMN_ECANCELED || rc == -EPERM)
				can_receive = false;
			if (rc == -ESHUTDOWN)
				stop_seen(me);
		} else if (cbcmn__mb_take_down(me, &m)) {
			on_down(s, &m);
		} else if (cbcmn_cx_cancelled(cx)) {
			join_children(cx, s);
		} else if (++polls < 64) {
			cbcmn_yield(cx);
		} else {
			/* A child slow to end: look less often than every turn
			 * of the executor (a real sleep: stop_seen()). */
			cbcmn_sleep(cx, 100000);
		}
	}
}

/* Stop child i (not a crash) and wait for it. */
static void stop_child(cbcmn_cx *cx, struct sup *s, uint32_t i)
{
	struct child *ch = &s->ch[i];
	if (!ch->up)
		return;
	ch->stopping = true;
	/* -ESRCH: it halted already; its DOWN is on its way. */
	cbcmn_actor_stop(NULL, cx, atomic_load_explicit(&ch->ref, memory_order_relaxed), 0);
	uint64_t t = s->tm->spec.shutdown_ns ? s->tm->spec.shutdown_ns : DEFAULT_NS;
	uint64_t now = cbcmn_now(((struct cbcmn_task *)cx)->rt);
	/* Saturated: a huge shutdown_ns is "wait for it", not a deadline
	 * wrapped into the past (an instant cancel of every child). */
	wait_down(cx, s, i, t > UINT64_MAX - now ? UINT64_MAX : now + t);
}

/* Every child, dependents before their dependencies. */
static void stop_all(cbcmn_cx *cx, struct sup *s)
{
	for (uint32_t k = s->tm->spec.nchildren; k-- > 0;)
		stop_child(cx, s, s->tm->order[k]);
}

/* One more restart now: within the intensity?  The ring holds the times
 * of the last max_restarts restarts: the oldest must be a period ago. */
static bool intensity_ok(struct sup *s, uint64_t now)
{
	const cbcmn_sup_spec *sp = &s->tm->spec;
	if (sp->max_restarts == CBCMN_SUP_UNLIMITED)
		return true;
	if (sp->max_restarts == 0)
		return false;
	uint64_t period = sp->period_ns ? sp->period_ns : DEFAULT_NS;
	uint64_t *oldest = &s->stamps[s->stamp_head];
	if (s->nrestarts >= sp->max_restarts && now - *oldest < period)
		return false;
	*oldest = now;
	s->stamp_head = (s->stamp_head + 1) % sp->max_restarts;
	s->nrestarts++;
	return true;
}

/* The children that restart with crashed child c (the strategy). */
static void restart_set(const struct tmpl *t, uint32_t c, bool *in)
{
	uint32_t n = t->spec.nchildren;
	memset(in, 0, n * sizeof(*in));
	in[c] = true;
	switch (t->spec.strategy) {
	case CBCMN_SUP_ALL:
		memset(in, 1, n * sizeof(*in));
		break;
	case CBCMN_SUP_DOWNSTREAM:
		/* Later in startup order: in if one of its dependencies is. */
		for (uint32_t k = t->rank[c] + 1; k < n; k++) {
			const cbcmn_sup_child *ch = &t->kids[t->order[k]];
			for (uint32_t d = 0; d < ch->ndeps; d++)
				if (in[ch->deps[d]])
					in[t->order[k]] = true;
		}
		break;
	case CBCMN_SUP_UPSTREAM:
		/* Earlier in startup order: the dependencies of those in. */
		for (uint32_t k = t->rank[c] + 1; k-- > 0;) {
			uint32_t j = t->order[k];
			if (in[j])
				for (uint32_t d = 0; d < t->kids[j].ndeps; d++)
					in[t->kids[j].deps[d]] = true;
		}
		break;
	default:
		break;
	}
}

static bool wants_restart(uint32_t type, int64_t reason)
{
	return type == CBCMN_SUP_PERMANENT || (type == CBCMN_SUP_TRANSIENT && reason != 0);
}

/* The supervisor's own stop reason, if it was stopped. */
static int64_t own_stop_reason(cbcmn_cx *cx, int64_t otherwise)
{
	struct cbcmn__actor *a = cbcmn__actor_of((struct cbcmn_task *)cx);
	cbcmn__flock_lock(&a->lock);
	int64_t r = a->stopping ? a->stop_reason : otherwise;
	cbcmn__flock_unlock(&a->lock);
	return r;
}

/* Handle every crashed child: 0, the supervisor's halt reason, or
 * STOPPED (it was stopped meanwhile). */
static int64_t recover(cbcmn_cx *cx, struct sup *s, bool *in)
{
	const struct tmpl *t = s->tm;
	uint32_t n = t->spec.nchildren;
	for (;;) {
		uint32_t c = n;
		for (uint32_t k = 0; k < n && c == n; k++)
			if (s->ch[t->order[k]].crashed)
				c = t->order[k];
		if (c == n)
			return 0;
		struct child *cc = &s->ch[c];
		cc->crashed = false;
		int64_t why = cc->reason;
		if (!wants_restart(t->kids[c].restart, why)) {
			cc->finished = true;
			continue;
		}
		if (s->joined)
			return CBCMN_ECANCELED; /* we were: nothing restarts */
		if (s->cancelled || !intensity_ok(s, cbcmn_now(((struct cbcmn_task *)cx)->rt)))
			return CBCMN_ESUPERVISOR; /* escalate */
		atomic_fetch_add_explicit(&s->restarts, 1, memory_order_relaxed);
		/* the stats (cbcmn_executor_stats.actor_restarts): a supervisor
		 * is an actor, so on an executor; relaxed, a counter */
		atomic_fetch_add_explicit(&cbcmn__tls_exec->ss->act.restarts, 1, memory_order_relaxed);
		CBCMN_PROBE5(sup_restart, s->self, c, why, cbcmn__tls_exec->id,
			     ((struct cbcmn_task *)cx)->rt->seg.rt_id);
		restart_set(t, c, in);
		for (uint32_t k = n; k-- > 0;)
			if (in[t->order[k]])
				stop_child(cx, s, t->order[k]);
		/* Our own cancellation (join_children()): a cancelled actor's
		 * reason, not an escalation its supervisor would restart. */
		if (s->joined)
			return CBCMN_ECANCELED;
		if (s->cancelled)
			return CBCMN_ESUPERVISOR; /* one ignored its stop */
		/* Stopped while it waited for them: nothing to start again. */
		if (own_stop_reason(cx, STOPPED) != STOPPED)
			return STOPPED;
		for (uint32_t k = 0; k < n; k++) {
			uint32_t j = t->order[k];
			if (!in[j])
				continue;
			/* Restarted with it, whatever their own halt was. */
			s->ch[j].crashed = false;
			if (j != c && t->kids[j].restart == CBCMN_SUP_TEMPORARY) {
				s->ch[j].finished = true;
				continue;
			}
			s->ch[j].finished = false;
			int rc = start_child(cx, s, j);
			if (rc)
				return rc;
			CBCMN_PROBE5(actor_restart, s->self, j, j == c ? why : 0,
				     atomic_load_explicit(&s->ch[j].ref, memory_order_relaxed),
				     ((struct cbcmn_task *)cx)->rt->seg.rt_id);
		}
	}
}

static int64_t serve(cbcmn_cx *cx, struct sup *s, bool *in)
{
	for (;;) {
		settle_exhausted(cx, s);
		cbcmn_actor_msg m;
		int rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER);
		if (rc == -ESHUTDOWN)
			return own_stop_reason(cx, 0);
		if (rc)
			return rc; /* cancelled */
		if (m.type != CBCMN_ACTOR_DOWN)
			continue; /* a poke (looked at above), or not for us */
		on_down(s, &m);
		int64_t r = recover(cx, s, in);
		if (r == STOPPED)
			return own_stop_reason(cx, 0);
		if (r)
			return r;
	}
}

static int64_t sup_main(cbcmn_cx *cx, void *arg)
{
	struct sup *s = arg;
	const struct tmpl *t = s->tm;
	s->self = cbcmn_actor_self(cx);
	int64_t result = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &s->n);
	if (result)
		return result;
	for (uint32_t k = 0; k < t->spec.nchildren && !result; k++)
		result = start_child(cx, s, t->order[k]);
	if (!result)
		result = serve(cx, s, s->in);
	stop_all(cx, s);
	/* Every child has halted; what the await says is only our own
	 * cancellation, already in result. */
	if (!s->joined)
		cbcmn_nursery_await_all(cx, s->n);
	return result;
}

/* ---- hooks and public calls ------------------------------------------------------ */

/* n's supervisor, or NULL.  fn and user were set before the supervisor's
 * task was published, and it cannot end while n has a child (it awaits n
 * first): called by one. */
static struct sup *sup_of(const struct cbcmn_nursery *n)
{
	struct cbcmn__actor *a = cbcmn__actor_of(n->owner);
	if (!a || a->fn != sup_main)
		return NULL;
	struct sup *s = a->user;
	return s->n == n ? s : NULL;
}

bool cbcmn__sup_nursery(const struct cbcmn_nursery *n)
{
	return sup_of(n) != NULL;
}

void cbcmn__sup_exhausted(struct cbcmn_nursery *n, struct cbcmn__exec *e)
{
	struct sup *s = sup_of(n);
	if (!s)
		return;
	/* acq_rel: pairs with settle_exhausted()'s exchange. */
	if (atomic_exchange_explicit(&s->poke, 1, memory_order_acq_rel))
		return; /* it will look already */
	cbcmn_actor_msg m = {.type = SUP_POKE};
	/* The runtime's own put: the child has no budget to pay for a send.  A full
	 * mailbox is one the supervisor is busy with: it looks after each
	 * message. */
	cbcmn__mb_try_put(n->rt, s->self, &m, e);
}

int cbcmn_sup_start(cbcmn_cx *cx, cbcmn_nursery *n, const cbcmn_sup_spec *spec,
		    const cbcmn_actor_opts *opts, cbcmn_actor_ref *out)
{
	if (out)
		*out = CBCMN_ACTOR_NONE;
	if (!n || !spec || !out)
		return -EINVAL;
	struct tmpl *t;
	uint32_t total = 0;
	int rc = tmpl_make(n->rt, spec, 0, &total, &t);
	if (rc)
		return rc;
	struct sup *s = sup_new(t, NULL);
	if (!s) {
		tmpl_free(t);
		return -ENOMEM;
	}
	s->owned = t;
	cbcmn_actor_opts o = opts ? *opts : (cbcmn_actor_opts){0};
	s->drop = o.drop;
	o.drop = sup_drop;
	struct cbcmn__spawn_x x = {.fini = sup_fini};
	return cbcmn__actor_spawn_x(cx, n, sup_main, s, &o, &x, out);
}

int cbcmn_sup_child_ref(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref sup, uint32_t index,
			cbcmn_actor_ref *out)
{
	struct cbcmn_task *self = (struct cbcmn_task *)cx;
	if (out)
		*out = CBCMN_ACTOR_NONE;
	if (!out || (!rt && !self))
		return -EINVAL;
	if (!rt)
		rt = self->rt;
	if (self && self->rt != rt)
		return CBCMN_EWRONGRT;
	struct cbcmn__actor *a = cbcmn__actor_lock_ref(rt, sup);
	if (!a)
		return -ESRCH;
	int rc = -ESRCH;
	/* Under the slot lock, LIVE: its fini (which frees s) runs only after
	 * its halt made it HALTING under this lock. */
	if (a->fn == sup_main) {
		struct sup *s = a->user;
		rc = -EINVAL;
		if (index < s->tm->spec.nchildren) {
			*out = atomic_load_explicit(&s->ch[index].ref, memory_order_relaxed);
			rc = *out == CBCMN_ACTOR_NONE ? -EAGAIN : 0;
		}
	}
	cbcmn__flock_unlock(&a->lock);
	return rc;
}
