/* wl_actors.c: cbcmn-run's actor workloads (ring, supervise, skynet), each
 * with a checked answer (workload.h, docs/RUN.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbcmn_actor.h"
#include "util/clock.h"
#include "workloads/wl_int.h"

enum { WA_TOKEN = 1, WA_QUIT, WA_REQ, WA_REPLY, WA_BUILD };

/* ---- ring: a token round a ring of actors ----------------------------------- */

struct wring_member {
	struct wl_ring *r;
	uint64_t i;
};

static int64_t wring_actor(cbcmn_cx *cx, void *arg)
{
	struct wring_member *me = arg;
	struct wl_ring *r = me->r;
	uint64_t skip = r->sabotage && me->i == 1 && r->n > 2 ? 2 : 1;
	cbcmn_actor_ref next = CBCMN_ACTOR_NONE;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0) {
		/* Every reference was written before the token was sent, and
		 * the mailbox orders that send before this receive. */
		if (!next)
			next = r->refs[(me->i + skip) % r->n];
		if (m.type == WA_QUIT) {
			/* from actor 0 to n - 1; a halted neighbour (sabotage) is -ESRCH */
			if (me->i + 1 < r->n)
				cbcmn_actor_send(NULL, cx, r->refs[me->i + 1], &m);
			return 0;
		}
		if (r->visits)
			r->visits[me->i]++;
		if (m.body.u64[0] == 0) {
			r->t_end = mono_ns();
			r->c_end = process_cpu_ns();
			r->last_at = me->i;
			r->count = m.body.u64[1];
			/* QUIT goes round from actor 0 and ends with us (we still
			 * pass it on: the actors after us wait for it too). */
			m.type = WA_QUIT;
			if ((rc = cbcmn_actor_send(NULL, cx, r->refs[0], &m)))
				return rc;
			continue;
		}
		m.body.u64[0]--;
		m.body.u64[1]++;
		if ((rc = cbcmn_actor_send(NULL, cx, next, &m)))
			return rc;
	}
	return rc;
}

/* The ring of handler actors: the same hops; actor 0 is spawned from the
 * root task and spawns the others on its host (WA_BUILD), so that every
 * hop is a call on that host.  A send that finds a full mailbox is
 * retried (CBCMN_ACTOR_RETRY), before anything is counted.  With idle_ns,
 * each call that continues sets a receive timeout (an idle limit, as a
 * server's connection actors would), and a TIMEOUT is no hop. */
static int64_t wring_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *mp);

static int64_t wring_hop(cbcmn_cx *cx, struct wring_member *me, const cbcmn_actor_msg *mp)
{
	struct wl_ring *r = me->r;
	cbcmn_actor_msg m = *mp;
	int rc;
	if (m.type == CBCMN_ACTOR_TIMEOUT)
		return CBCMN_ACTOR_CONTINUE;
	if (m.type == WA_BUILD) {
		cbcmn_nursery *n = (cbcmn_nursery *)(uintptr_t)m.body.u64[0];
		struct wring_member *mem = (struct wring_member *)(uintptr_t)m.body.u64[1];
		cbcmn_actor_opts ao = {.mailbox_cap = 2};
		for (uint64_t k = 1; k < r->n; k++)
			if ((rc = cbcmn_actor_spawn_handler(cx, n, wring_handler, &mem[k], &ao,
							    &r->refs[k])))
				return rc;
		r->t0 = mono_ns();
		r->c0 = process_cpu_ns();
		m = (cbcmn_actor_msg){.type = WA_TOKEN, .body.u64 = {r->hops, 0}};
	}
	uint64_t skip = r->sabotage && me->i == 1 && r->n > 2 ? 2 : 1;
	if (m.type == WA_QUIT) {
		/* from actor 0 to n - 1; a halted neighbour (sabotage) is -ESRCH */
		if (me->i + 1 < r->n &&
		    cbcmn_actor_send(NULL, cx, r->refs[me->i + 1], &m) == -EAGAIN)
			return CBCMN_ACTOR_RETRY;
		return CBCMN_ACTOR_HALT;
	}
	if (m.body.u64[0] == 0) {
		m.type = WA_QUIT;
		if ((rc = cbcmn_actor_send(NULL, cx, r->refs[0], &m)) == -EAGAIN)
			return CBCMN_ACTOR_RETRY;
		if (rc)
			return rc;
		if (r->visits)
			r->visits[me->i]++;
		r->t_end = mono_ns();
		r->c_end = process_cpu_ns();
		r->last_at = me->i;
		r->count = m.body.u64[1];
		return CBCMN_ACTOR_CONTINUE;
	}
	m.body.u64[0]--;
	m.body.u64[1]++;
	if ((rc = cbcmn_actor_send(NULL, cx, r->refs[(me->i + skip) % r->n], &m)) == -EAGAIN)
		return CBCMN_ACTOR_RETRY;
	if (rc)
		return rc;
	if (r->visits)
		r->visits[me->i]++;
	return CBCMN_ACTOR_CONTINUE;
}

static int64_t wring_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *mp)
{
	struct wring_member *me = arg;
	struct wl_ring *r = me->r;
	int64_t rc = wring_hop(cx, me, mp);
	if (rc == CBCMN_ACTOR_CONTINUE && r->idle_ns)
		rc = cbcmn_actor_set_receive_timeout(cx, r->idle_ns);
	return rc;
}

int64_t wl_ring_root(cbcmn_cx *cx, void *arg)
{
	struct wl_ring *r = arg;
	struct wring_member *mem = calloc(r->n, sizeof(*mem));
	if (!mem)
		return -ENOMEM;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc) {
		free(mem);
		return rc;
	}
	cbcmn_actor_opts ao = {.mailbox_cap = 2,
			       .placement = r->one_exec ? CBCMN_PLACE_PINNED : CBCMN_PLACE_LOCAL};
	for (uint64_t k = 0; k < r->n; k++)
		mem[k] = (struct wring_member){r, k};
	for (uint64_t k = 0; k < (r->handler ? 1 : r->n) && !rc; k++)
		rc = r->handler ? cbcmn_actor_spawn_handler(cx, n, wring_handler, &mem[k], &ao,
							   &r->refs[k])
				: cbcmn_actor_spawn(cx, n, wring_actor, &mem[k], &ao, &r->refs[k]);
	cbcmn_actor_msg m = {.type = WA_TOKEN, .body.u64 = {r->hops, 0}};
	if (r->handler) /* actor 0 builds the ring and starts the clock */
		m = (cbcmn_actor_msg){.type = WA_BUILD,
				      .body.u64 = {(uintptr_t)n, (uintptr_t)mem}};
	r->t0 = mono_ns();
	r->c0 = process_cpu_ns();
	if (!rc)
		rc = cbcmn_actor_send(NULL, cx, r->refs[0], &m);
	if (rc)
		cbcmn_nursery_cancel(n);
	int64_t a = cbcmn_nursery_await_all(cx, n);
	free(mem);
	return rc ? rc : a;
}

int wl_ring(cbcmn_runtime *rt, struct wl_env *e)
{
	uint32_t n = e->size;
	struct wl_ring r = {.n = n, .hops = 10 * (uint64_t)n + 3, .sabotage = e->o->sabotage};
	r.refs = calloc(n, sizeof(*r.refs));
	r.visits = calloc(n, sizeof(*r.visits));
	int rc = 0;
	uint64_t rounds = 0;
	if (!r.refs || !r.visits)
		rc = wl_fail_rc(e, -ENOMEM, "ring");
	while (!rc && wl_more(e, rounds)) {
		memset(r.visits, 0, n * sizeof(*r.visits));
		r.count = r.last_at = UINT64_MAX;
		if ((rc = wl_run_root(rt, e, wl_ring_root, &r, "ring")))
			break;
		/* hop k (k = 0 .. hops) is at actor k % n: each is visited
		 * hops / n times, and the first hops % n + 1 once more. */
		for (uint32_t i = 0; i < n && !rc; i++) {
			uint64_t want = (r.hops + 1) / n + (i < (r.hops + 1) % n);
			if (r.visits[i] != want)
				rc = wl_fail(e, "ring of %u: actor %u visited %llu times, expected %llu", n,
					     i, (unsigned long long)r.visits[i],
					     (unsigned long long)want);
		}
		if (!rc && (r.count != r.hops || r.last_at != r.hops % n))
			rc = wl_fail(e, "ring of %u: the token made %llu hops, ended at actor %llu; "
					"expected %llu hops, actor %llu",
				     n, (unsigned long long)r.count, (unsigned long long)r.last_at,
				     (unsigned long long)r.hops, (unsigned long long)(r.hops % n));
		rounds++;
	}
	free(r.refs);
	free(r.visits);
	if (rc)
		return rc;
	snprintf(e->r->result, sizeof(e->r->result), "ring of %u: %llu hops a round, each actor in turn",
		 n, (unsigned long long)r.hops);
	e->r->rounds = rounds;
	e->r->units = rounds * r.hops;
	return 0;
}

/* ---- supervise: crashing workers, a supervisor, clients that retry --------- */

#define SV_CLIENTS 4u
#define SV_REQUESTS 64u /* per client and round */

struct sv {
	struct wl_env *e;
	cbcmn_actor_ref sup;
	uint32_t workers;
	uint64_t round;
	_Atomic uint64_t crashes, dups, retries;
};

struct sv_client {
	struct sv *s;
	uint32_t id;
	uint64_t answered[SV_REQUESTS]; /* the answer taken for each request, 0: none */
};

static uint64_t sv_answer(uint64_t req)
{
	return wl_mix(req) | 1; /* never 0: 0 marks "no answer" */
}

/* A worker answers requests; one attempt in 8 (by its id and attempt) it
 * crashes instead, before answering: the request dies with it. */
static int64_t sv_worker(cbcmn_cx *cx, void *arg)
{
	struct sv *s = arg;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0) {
		if (m.type != WA_REQ)
			continue;
		uint64_t req = m.body.u64[0], attempt = m.body.u64[1];
		if (wl_mix(s->e->o->seed ^ (req * 31 + attempt) ^ s->round) % 8 == 0) {
			atomic_fetch_add_explicit(&s->crashes, 1, memory_order_relaxed);
			return -1;
		}
		cbcmn_actor_msg a = {.type = WA_REPLY, .body.u64 = {req, sv_answer(req)}};
		/* The client may have halted (a failure elsewhere): not ours to report. */
		cbcmn_actor_send(NULL, cx, m.from, &a);
	}
	return rc == -ESHUTDOWN ? 0 : rc;
}

/* Sends each of its requests to a worker (by the request), watching that
 * incarnation: a DOWN before the answer means it died with the request,
 * which is sent again (next attempt) to the worker's next incarnation.
 * Answers are taken once per request id: a second one (of a request sent
 * twice) is dropped. */
static int64_t sv_client(cbcmn_cx *cx, void *arg)
{
	struct sv_client *c = arg;
	struct sv *s = c->s;
	for (uint32_t k = 0; k < SV_REQUESTS; k++) {
		uint64_t req = (uint64_t)c->id * SV_REQUESTS + k;
		uint32_t w = (uint32_t)(wl_mix(req ^ s->round) % s->workers);
		for (uint64_t attempt = 0; !c->answered[k]; attempt++) {
			cbcmn_actor_ref ref;
			uint64_t mon;
			int rc;
			while ((rc = cbcmn_sup_child_ref(NULL, cx, s->sup, w, &ref)) == -EAGAIN)
				cbcmn_yield(cx); /* restarting */
			if (rc || (rc = cbcmn_actor_monitor(cx, ref, &mon)))
				return wl_fail_rc(s->e, rc, "supervise: a client");
			cbcmn_actor_msg m = {.type = WA_REQ, .body.u64 = {req, attempt}};
			rc = cbcmn_actor_send(NULL, cx, ref, &m);
			/* One request in 16 goes twice, as a client that gave up
			 * waiting too early would resend it: both may be answered,
			 * and the second answer must be dropped. */
			if (!rc && attempt == 0 && wl_mix(req ^ ~s->round) % 16 == 0)
				rc = cbcmn_actor_send(NULL, cx, ref, &m);
			if (rc && rc != -ESRCH)
				return wl_fail_rc(s->e, rc, "supervise: a request");
			/* -ESRCH: it died before taking it; its DOWN comes. */
			bool down = false;
			while (!c->answered[k] && !down) {
				if ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)))
					return wl_fail_rc(s->e, rc, "supervise: a client's receive");
				if (m.type == CBCMN_ACTOR_DOWN) {
					down = m.body.down.monitor == mon;
					continue; /* an earlier incarnation's: already retried */
				}
				uint64_t id = m.body.u64[0];
				uint32_t slot = (uint32_t)(id - (uint64_t)c->id * SV_REQUESTS);
				if (m.type != WA_REPLY || slot >= SV_REQUESTS || m.body.u64[1] != sv_answer(id))
					return wl_fail(s->e, "supervise: request %llu got a wrong answer",
						       (unsigned long long)id);
				if (c->answered[slot]) {
					atomic_fetch_add_explicit(&s->dups, 1, memory_order_relaxed);
					continue;
				}
				c->answered[slot] = m.body.u64[1];
			}
			if (!down) {
				cbcmn_actor_demonitor(cx, ref, mon);
			} else if (s->e->o->sabotage) {
				break; /* the mistake: a request lost with its worker is not retried */
			} else if (m.body.down.reason == -ESRCH) {
				/* dead when we looked: the supervisor has not seen
				 * its DOWN yet, nor replaced it */
				cbcmn_yield(cx);
			} else {
				atomic_fetch_add_explicit(&s->retries, 1, memory_order_relaxed);
			}
		}
	}
	return 0;
}

struct sv_round {
	struct sv *s;
	struct sv_client *clients;
	cbcmn_sup_report rep;
};

static int64_t sv_root(cbcmn_cx *cx, void *arg)
{
	struct sv_round *sr = arg;
	struct sv *s = sr->s;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_sup_child *kids = calloc(s->workers, sizeof(*kids));
	if (!kids)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->workers; i++)
		kids[i] = (cbcmn_sup_child){.fn = sv_worker, .state = s, .restart = CBCMN_SUP_PERMANENT,
					    .node = -1};
	cbcmn_sup_spec spec = {.strategy = CBCMN_SUP_ONE, .max_restarts = CBCMN_SUP_UNLIMITED,
			       .children = kids, .nchildren = s->workers, .report = &sr->rep};
	cbcmn_nursery *sn, *cn;
	int rc = cbcmn_nursery_open(rt, cx, &sn);
	if (rc) {
		free(kids);
		return rc;
	}
	rc = cbcmn_sup_start(cx, sn, &spec, NULL, &s->sup); /* copies the spec */
	free(kids);
	if (rc) {
		cbcmn_nursery_await_all(cx, sn);
		return rc;
	}
	if (!(rc = cbcmn_nursery_open(rt, cx, &cn))) {
		cbcmn_actor_ref ref;
		for (uint32_t i = 0; i < SV_CLIENTS && !rc; i++)
			rc = cbcmn_actor_spawn(cx, cn, sv_client, &sr->clients[i], NULL, &ref);
		if (rc)
			cbcmn_nursery_cancel(cn);
		int64_t a = cbcmn_nursery_await_all(cx, cn);
		rc = rc ? rc : (int)a;
	}
	cbcmn_actor_stop(NULL, cx, s->sup, 0);
	int64_t a = cbcmn_nursery_await_all(cx, sn);
	return rc ? rc : a;
}

int wl_supervise(cbcmn_runtime *rt, struct wl_env *e)
{
	struct sv s = {.e = e, .workers = e->size};
	struct sv_client cl[SV_CLIENTS];
	uint64_t rounds = 0, restarts = 0;
	while (wl_more(e, rounds)) {
		memset(cl, 0, sizeof(cl));
		for (uint32_t i = 0; i < SV_CLIENTS; i++)
			cl[i] = (struct sv_client){.s = &s, .id = i};
		s.round = rounds;
		uint64_t crashes0 = atomic_load(&s.crashes);
		struct sv_round sr = {.s = &s, .clients = cl};
		int rc = wl_run_root(rt, e, sv_root, &sr, "supervise");
		if (rc)
			return rc;
		for (uint32_t i = 0; i < SV_CLIENTS; i++)
			for (uint32_t k = 0; k < SV_REQUESTS; k++)
				if (!cl[i].answered[k])
					return wl_fail(e, "supervise: request %u of client %u never answered "
							  "(%llu crashes this round)",
						       k, i,
						       (unsigned long long)(atomic_load(&s.crashes) - crashes0));
		/* Every crash is one restart (and the stop's none). */
		uint64_t crashes = atomic_load(&s.crashes) - crashes0;
		if (sr.rep.restarts != crashes)
			return wl_fail(e, "supervise: %llu restarts for %llu crashes",
				       (unsigned long long)sr.rep.restarts, (unsigned long long)crashes);
		restarts += crashes;
		rounds++;
	}
	snprintf(e->r->result, sizeof(e->r->result),
		 "%u workers: %llu requests each answered once, %llu restarts, %llu resent, %llu "
		 "second answers dropped",
		 s.workers, (unsigned long long)(rounds * SV_CLIENTS * SV_REQUESTS),
		 (unsigned long long)restarts, (unsigned long long)atomic_load(&s.retries),
		 (unsigned long long)atomic_load(&s.dups));
	e->r->rounds = rounds;
	e->r->units = rounds * SV_CLIENTS * SV_REQUESTS;
	return 0;
}

/* ---- skynet: a 10-ary tree of actors adds up its leaves ------------------- */

/* A node of the tree of handler actors (below). */
struct wsky_h {
	struct wl_sky s;
	cbcmn_nursery *n;
	uint64_t sum, leaves;
	uint32_t got;
	struct wsky_h *kids;
};
static int64_t wsky_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m);

/* A node of the tree (struct wl_sky, wl_int.h).  With handler, only the
 * root is one: its ten children are handler actors, each on a host of
 * its own (stealable: the executors share them out, as stealing spreads
 * fiber actors), each with its subtree on that host. */
static int64_t wsky_actor(cbcmn_cx *cx, void *arg)
{
	struct wl_sky *me = arg;
	uint64_t sum = me->sabotage && me->index == 1 ? 0 : me->index, leaves = 1;
	if (me->size > 1) {
		struct wl_sky kids[10];
		struct wsky_h hkids[10];
		uint64_t step = me->size / 10;
		cbcmn_nursery *n;
		int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
		if (rc)
			return rc;
		cbcmn_actor_ref self = cbcmn_actor_self(cx), ref;
		int spawned = 0;
		for (int i = 0; i < 10 && !rc; i++) {
			kids[i] = (struct wl_sky){me->index + (uint64_t)i * step, step, self, NULL, NULL,
						me->sabotage, me->handler};
			cbcmn_actor_opts ao = {.mailbox_cap = step > 1 ? 10 : 1};
			if (me->handler) {
				hkids[i] = (struct wsky_h){.s = kids[i], .n = n};
				ao.placement = CBCMN_PLACE_STEALABLE;
				ao.start = true;
				rc = cbcmn_actor_spawn_handler(cx, n, wsky_handler, &hkids[i], &ao, &ref);
			} else {
				rc = cbcmn_actor_spawn(cx, n, wsky_actor, &kids[i], &ao, &ref);
			}
			if (!rc)
				spawned++;
		}
		sum = leaves = 0;
		cbcmn_actor_msg m;
		for (int i = 0; i < spawned && !rc; i++)
			if (!(rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER))) {
				sum += m.body.u64[0];
				leaves += m.body.u64[1];
			}
		if (rc)
			cbcmn_nursery_cancel(n);
		int64_t a = cbcmn_nursery_await_all(cx, n);
		/* A tree that failed half-way: the first level's (deeper
		 * levels free theirs as they report, or are lost with it). */
		for (int i = 0; me->handler && i < spawned; i++)
			free(hkids[i].kids);
		if (rc || a)
			return rc ? rc : a;
	}
	if (!me->parent) {
		*me->sum = sum;
		*me->leaves = leaves;
		return 0;
	}
	cbcmn_actor_msg m = {.type = WA_TOKEN, .body.u64 = {sum, leaves}};
	return cbcmn_actor_send(NULL, cx, me->parent, &m);
}

/* A node of the tree of handler actors: at its start call
 * (CBCMN_ACTOR_START) it spawns its ten children on its own host (their
 * states in kids), then adds up their answers as they come. */

static int64_t wsky_report(cbcmn_cx *cx, struct wsky_h *me)
{
	free(me->kids);
	me->kids = NULL;
	if (!me->s.parent) {
		*me->s.sum = me->sum;
		*me->s.leaves = me->leaves;
		return CBCMN_ACTOR_HALT;
	}
	/* The parent's mailbox has room for its ten children's answers. */
	cbcmn_actor_msg m = {.type = WA_TOKEN, .body.u64 = {me->sum, me->leaves}};
	int rc = cbcmn_actor_send(NULL, cx, me->s.parent, &m);
	return rc ? rc : CBCMN_ACTOR_HALT;
}

static int64_t wsky_handler(cbcmn_cx *cx, void *arg, const cbcmn_actor_msg *m)
{
	struct wsky_h *me = arg; /* its kids freed by its parent if it never reported */
	if (m->type == WA_TOKEN) {
		me->sum += m->body.u64[0];
		me->leaves += m->body.u64[1];
		return ++me->got == 10 ? wsky_report(cx, me) : CBCMN_ACTOR_CONTINUE;
	}
	if (me->s.size == 1) {
		me->sum = me->s.sabotage && me->s.index == 1 ? 0 : me->s.index;
		me->leaves = 1;
		return wsky_report(cx, me);
	}
	if (!(me->kids = calloc(10, sizeof(*me->kids))))
		return -ENOMEM;
	uint64_t step = me->s.size / 10;
	cbcmn_actor_ref self = cbcmn_actor_self(cx), ref;
	cbcmn_actor_opts ao = {.mailbox_cap = step > 1 ? 10 : 1, .start = true};
	for (int i = 0; i < 10; i++) {
		me->kids[i] = (struct wsky_h){
			.s = {me->s.index + (uint64_t)i * step, step, self, NULL, NULL, me->s.sabotage,
			      true},
			.n = me->n};
		int rc = cbcmn_actor_spawn_handler(cx, me->n, wsky_handler, &me->kids[i], &ao, &ref);
		if (rc)
			return rc; /* kids: the halt's fini-less end leaks nothing else */
	}
	return CBCMN_ACTOR_CONTINUE;
}

int64_t wl_sky_root(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	cbcmn_actor_ref ref;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	cbcmn_actor_opts ao = {.mailbox_cap = 10};
	rc = cbcmn_actor_spawn(cx, n, wsky_actor, arg, &ao, &ref);
	int64_t a = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : a;
}

int wl_skynet(cbcmn_runtime *rt, struct wl_env *e)
{
	uint64_t n = 1;
	for (uint32_t k = 0; k < e->size; k++)
		n *= 10; /* --size N: 10^N leaves */
	/* leaves + the nodes above them: n + n/10 + ... + 1 */
	uint64_t actors = 0, rounds = 0;
	for (uint64_t k = n; k; k /= 10)
		actors += k;
	uint64_t want = n * (n - 1) / 2;
	while (wl_more(e, rounds)) {
		uint64_t sum = 0, leaves = 0;
		struct wl_sky root = {0, n, CBCMN_ACTOR_NONE, &sum, &leaves, e->o->sabotage, false};
		int rc = wl_run_root(rt, e, wl_sky_root, &root, "skynet");
		if (rc)
			return rc;
		if (sum != want || leaves != n)
			return wl_fail(e, "skynet of %llu leaves: sum %llu from %llu leaves, expected %llu",
				       (unsigned long long)n, (unsigned long long)sum,
				       (unsigned long long)leaves, (unsigned long long)want);
		rounds++;
	}
	snprintf(e->r->result, sizeof(e->r->result), "skynet(%llu)=%llu", (unsigned long long)n,
		 (unsigned long long)want);
	e->r->rounds = rounds;
	e->r->units = rounds * actors;
	return 0;
}
