/* workload.c: the self-checking workloads of cbcmn-run (workload.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "workloads/fib.h"
#include "net/fserv.h"
#include "util/hist.h"
#include "workloads/workload.h"
#include "workloads/wl_int.h"

/* splitmix64 (wl_int.h) */
#define mix wl_mix

/* CPU work: iters rounds of mix(), about 1.5 ns each here. */
static uint64_t crunch(cbcmn_cx *cx, uint64_t x, uint32_t iters)
{
	for (uint32_t i = 0; i < iters; i++) {
		x = mix(x);
		if (cx && (i & 1023) == 1023)
			CBCMN_CHECKPOINT(cx);
	}
	return x;
}

/* wl_int.h's helpers, under the short names this file uses. */
#define fail wl_fail
#define fail_rc wl_fail_rc
#define more wl_more
#define run_root wl_run_root

int wl_fail(struct wl_env *e, const char *fmt, ...)
{
	int z = 0;
	if (!atomic_compare_exchange_strong(&e->failed, &z, 1))
		return -EPROTO;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->r->error, sizeof(e->r->error), fmt, ap);
	va_end(ap);
	return -EPROTO;
}

int wl_fail_rc(struct wl_env *e, int64_t rc, const char *what)
{
	fail(e, "%s: %s", what, cbcmn_strerror(rc));
	return rc < 0 && rc > INT32_MIN ? (int)rc : -EIO;
}

bool wl_more(const struct wl_env *e, uint64_t rounds)
{
	return rounds == 0 || mono_ns() < e->deadline;
}

/* Its failure is a negative result of fn. */
int wl_run_root(cbcmn_runtime *rt, struct wl_env *e, cbcmn_task_fn fn, void *arg,
		const char *what)
{
	int64_t res = 0;
	int rc = cbcmn_runtime_run(rt, fn, arg, &res);
	if (rc)
		return fail_rc(e, rc, what);
	if (res < 0)
		return atomic_load(&e->failed) ? -EPROTO : fail_rc(e, res, what);
	return 0;
}

/* n tasks fn(args + i * stride) with one placement (CBCMN_PLACE_*): pinned
 * ones go to executor i % workers, CBCMN_PLACE_STEALABLE_ON to executor 0. */
struct spawn_set {
	cbcmn_task_fn fn;
	void *args;
	size_t stride;
	uint32_t n;
	uint32_t placement;
};

/* Spawn the set into a nursery of its own and await it: the first failure. */
static int64_t spawn_all(cbcmn_cx *cx, const struct spawn_set *s)
{
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	uint32_t workers = cbcmn_runtime_workers(rt);
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(rt, cx, &n);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < s->n && rc == 0; i++) {
		cbcmn_spawn_opts so = {.placement = s->placement,
				       .shard = s->placement == CBCMN_PLACE_PINNED ? i % workers : 0};
		rc = cbcmn_nursery_spawn_ex(cx, n, s->fn, (char *)s->args + i * s->stride, &so, NULL);
	}
	int64_t r = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : r;
}

static int64_t spawn_all_task(cbcmn_cx *cx, void *arg)
{
	return spawn_all(cx, arg);
}

/* A root task that spawns the set and awaits it. */
static int run_all(cbcmn_runtime *rt, struct wl_env *e, const struct spawn_set *s)
{
	return run_root(rt, e, spawn_all_task, (void *)s, "the root task");
}

/* ---- fib: fork-join, a task per call --------------------------------------- */

static int wl_fib(cbcmn_runtime *rt, struct wl_env *e)
{
	int n = (int)e->size;
	int64_t want = fib_seq(n);
	/* calls(n) = 2 fib(n + 1) - 1: every call is a task. */
	uint64_t per_round = 2 * (uint64_t)fib_seq(n + 1) - 1, rounds = 0;
	while (more(e, rounds)) {
		struct fib f = {.n = e->o->sabotage ? n + 2 : n}; /* fib(n + 2) > fib(n) */
		int rc = run_root(rt, e, fib_task, &f, "the root task");
		if (rc)
			return rc;
		if (f.out != want)
			return fail(e, "fib(%d) gave %lld, expected %lld", n, (long long)f.out,
				    (long long)want);
		rounds++;
	}
	snprintf(e->r->result, sizeof(e->r->result), "fib(%d)=%lld", n, (long long)want);
	e->r->rounds = rounds;
	e->r->units = rounds * per_round;
	return 0;
}

/* ---- spawn-storm: spawners on every executor, each spawning many leaves ---- */

/* A spawner's share: its leaves' run counters, a byte each, so that a task
 * run twice and another never run cannot cancel out in a sum. */
struct storm {
	_Atomic uint8_t *ran;
	uint32_t leaves;
	bool sabotage; /* all its leaves count as its first (the sum stays right) */
};

static int64_t storm_leaf(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	atomic_fetch_add_explicit((_Atomic uint8_t *)arg, 1, memory_order_relaxed);
	return 0;
}

/* Its leaves on its own executor (thieves spread them further). */
static int64_t storm_spawner(cbcmn_cx *cx, void *arg)
{
	struct storm *s = arg;
	return spawn_all(cx, &(struct spawn_set){storm_leaf, s->ran, s->sabotage ? 0 : sizeof(*s->ran),
						  s->leaves, CBCMN_PLACE_LOCAL});
}

static int wl_spawn_storm(cbcmn_runtime *rt, struct wl_env *e)
{
	uint32_t total = e->size, ns = 4 * cbcmn_runtime_workers(rt);
	if (ns > total)
		ns = total;
	struct storm *s = calloc(ns, sizeof(*s));
	_Atomic uint8_t *ran = calloc(total, sizeof(*ran));
	if (!s || !ran) {
		free(s);
		free((void *)ran);
		return fail_rc(e, -ENOMEM, "allocating");
	}
	uint32_t at = 0;
	for (uint32_t i = 0; i < ns; i++) {
		s[i].ran = ran + at;
		s[i].leaves = total / ns + (i < total % ns);
		at += s[i].leaves;
	}
	s[0].sabotage = e->o->sabotage && s[0].leaves > 1;
	struct spawn_set set = {storm_spawner, s, sizeof(*s), ns, CBCMN_PLACE_STEALABLE};
	uint64_t rounds = 0;
	int rc = 0;
	while (rc == 0 && more(e, rounds)) {
		/* The previous round's nursery was awaited: no leaf touches these. */
		memset((void *)ran, 0, total);
		if ((rc = run_all(rt, e, &set)) != 0)
			break;
		for (uint32_t i = 0; rc == 0 && i < total; i++)
			if (atomic_load_explicit(&ran[i], memory_order_relaxed) != 1)
				rc = fail(e, "task %u of %u ran %u times", i, total,
					  (unsigned)atomic_load(&ran[i]));
		rounds++;
	}
	free(s);
	free((void *)ran);
	if (rc)
		return rc;
	snprintf(e->r->result, sizeof(e->r->result), "%u tasks from %u spawners, each ran once",
		 total, ns);
	e->r->rounds = rounds;
	e->r->units = rounds * total;
	return 0;
}

/* ---- skew: every task born on executor 0, stealing must spread them ------- */

#define SKEW_ITERS 8000u /* ~12 us of work a task: well above the steal gate's 1 us */
#define SKEW_STEAL_WAIT_S 60u /* a hang bound: with an idle CPU a steal takes microseconds */

struct skew {
	uint64_t seed;
	uint32_t n;
	_Atomic uint64_t *out;      /* atomic: under sabotage every task writes out[0] */
	_Atomic uint32_t *runs;
	_Atomic uint64_t elsewhere; /* tasks that started off executor 0 */
	bool sabotage;              /* every task is task 0 */
};

struct skew_arg {
	struct skew *s;
	uint32_t i;
};

static int64_t skew_task(cbcmn_cx *cx, void *arg)
{
	struct skew_arg *a = arg;
	struct skew *s = a->s;
	if (cbcmn_cx_executor(cx) != 0)
		atomic_fetch_add_explicit(&s->elsewhere, 1, memory_order_relaxed);
	atomic_store_explicit(&s->out[a->i], crunch(cx, s->seed ^ a->i, SKEW_ITERS),
			      memory_order_relaxed);
	atomic_fetch_add_explicit(&s->runs[a->i], 1, memory_order_relaxed);
	return 0;
}

/* Pinned to executor 0: spawns every task there, stealable. */
static int64_t skew_producer(cbcmn_cx *cx, void *arg)
{
	struct skew_arg *a = arg;
	return spawn_all(cx, &(struct spawn_set){skew_task, a, a->s->sabotage ? 0 : sizeof(*a),
						  a->s->n, CBCMN_PLACE_STEALABLE_ON});
}

static int skew_check(struct wl_env *e, struct skew *s)
{
	for (uint32_t i = 0; i < s->n; i++) {
		uint32_t k = atomic_load(&s->runs[i]);
		if (k != 1)
			return fail(e, "task %u ran %u times", i, k);
		/* Recompute one in 16: enough to catch a wrong or torn result. */
		if (i % 16 == 0 && atomic_load_explicit(&s->out[i], memory_order_relaxed) !=
					   crunch(NULL, s->seed ^ i, SKEW_ITERS))
			return fail(e, "task %u computed a wrong value", i);
	}
	return 0;
}

static int wl_skew(cbcmn_runtime *rt, struct wl_env *e)
{
	struct skew s = {.seed = mix(e->o->seed), .n = e->size, .sabotage = e->o->sabotage};
	s.out = calloc(s.n, sizeof(*s.out));
	s.runs = calloc(s.n, sizeof(*s.runs));
	struct skew_arg *a = calloc(s.n, sizeof(*a));
	int rc = 0;
	uint64_t rounds = 0;
	if (!s.out || !s.runs || !a)
		rc = fail_rc(e, -ENOMEM, "allocating");
	for (uint32_t i = 0; rc == 0 && i < s.n; i++)
		a[i] = (struct skew_arg){&s, i};
	/* Stealing needs a thief: on a loaded machine executor 1's thread
	 * may get no CPU for the whole duration.  Then more rounds, until a
	 * task ran elsewhere, for at most SKEW_STEAL_WAIT_S: past that it is
	 * stealing that is broken, not the machine that is slow. */
	bool thieves = cbcmn_runtime_workers(rt) > 1;
	uint64_t steal_deadline = e->deadline + SKEW_STEAL_WAIT_S * 1000000000ull;
	while (rc == 0 && (more(e, rounds) || (thieves && !atomic_load(&s.elsewhere) &&
						mono_ns() < steal_deadline))) {
		for (uint32_t i = 0; i < s.n; i++)
			atomic_store(&s.runs[i], 0);
		if ((rc = run_all(rt, e, &(struct spawn_set){skew_producer, a, 0, 1, CBCMN_PLACE_PINNED})) == 0)
			rc = skew_check(e, &s);
		rounds++;
	}
	uint64_t elsewhere = atomic_load(&s.elsewhere), total = rounds * s.n;
	free(s.out);
	free(s.runs);
	free(a);
	if (rc)
		return rc;
	if (thieves && elsewhere == 0)
		return fail(e, "all %llu tasks ran on executor 0: nothing was stolen in %u s past the duration",
			    (unsigned long long)total, SKEW_STEAL_WAIT_S);
	snprintf(e->r->result, sizeof(e->r->result),
		 "%u tasks born on executor 0, %.0f%% ran elsewhere", s.n,
		 100.0 * (double)elsewhere / (double)total);
	e->r->rounds = rounds;
	e->r->units = total;
	return 0;
}

/* ---- pipeline: stages pinned on different executors, joined by channels --- */

#define PIPE_CAP 64

struct pmsg {
	uint64_t seq, t0, v;
};

struct pipeline {
	struct wl_env *e;
	cbcmn_runtime *rt;
	uint32_t stages;
	cbcmn_chan **ch; /* ch[k] joins stage k to k + 1 */
	uint64_t sent, got;
	struct lat_hist *lat;
};

struct pipe_arg {
	struct pipeline *p;
	uint32_t k;
};

/* What middle stage k does to a value. */
static uint64_t pipe_step(uint64_t v, uint32_t k)
{
	return v * 0x9e3779b97f4a7c15ull + k;
}

/* Sends until the deadline, at least two messages: a sabotaged run skips
 * message 1, which only a second message shows as out of order (one
 * message, then the deadline, on a loaded machine was caught as a count
 * instead, and test_sabotage_caught asks for the order).  Two sent, not
 * two numbered: the skip numbers the first one's successor 2. */
static int64_t pipe_source(cbcmn_cx *cx, struct pipeline *p)
{
	int rc = 0;
	uint64_t seq = 0, n = 0, t;
	do {
		struct pmsg m = {seq, t = cbcmn_now(p->rt), seq};
		if ((rc = cbcmn_chan_send(cx, p->ch[0], &m)) == 0) {
			seq += 1 + (seq == 0 && p->e->o->sabotage); /* message 1 "lost" */
			n++;
		}
	} while (rc == 0 && (t < p->e->deadline || n < 2));
	p->sent = seq;
	cbcmn_chan_close(cx, p->ch[0]);
	return rc;
}

static int64_t pipe_sink(cbcmn_cx *cx, struct pipeline *p)
{
	struct pmsg m;
	int rc;
	while ((rc = cbcmn_chan_recv(cx, p->ch[p->stages - 2], &m)) == 0) {
		uint64_t want = m.seq;
		for (uint32_t k = 1; k + 1 < p->stages; k++)
			want = pipe_step(want, k);
		if (m.seq != p->got)
			return fail(p->e, "message %llu arrived where %llu was due",
				    (unsigned long long)m.seq, (unsigned long long)p->got);
		if (m.v != want)
			return fail(p->e, "message %llu carries a wrong value",
				    (unsigned long long)m.seq);
		lat_hist_add(p->lat, cbcmn_now(p->rt) - m.t0);
		p->got++;
	}
	return rc == -EPIPE ? 0 : rc;
}

static int64_t pipe_stage(cbcmn_cx *cx, void *arg)
{
	struct pipe_arg *a = arg;
	struct pipeline *p = a->p;
	if (a->k == 0)
		return pipe_source(cx, p);
	if (a->k == p->stages - 1)
		return pipe_sink(cx, p);
	struct pmsg m;
	int rc;
	while ((rc = cbcmn_chan_recv(cx, p->ch[a->k - 1], &m)) == 0) {
		m.v = pipe_step(m.v, a->k);
		if ((rc = cbcmn_chan_send(cx, p->ch[a->k], &m)) != 0)
			break;
	}
	cbcmn_chan_close(cx, p->ch[a->k]);
	return rc == -EPIPE ? 0 : rc;
}

static int wl_pipeline(cbcmn_runtime *rt, struct wl_env *e)
{
	struct pipeline p = {.e = e, .rt = rt, .stages = e->size};
	p.ch = calloc(p.stages - 1, sizeof(*p.ch));
	p.lat = calloc(1, sizeof(*p.lat));
	struct pipe_arg *a = calloc(p.stages, sizeof(*a));
	int rc = p.ch && p.lat && a ? 0 : fail_rc(e, -ENOMEM, "allocating");
	for (uint32_t k = 0; rc == 0 && k + 1 < p.stages; k++)
		if ((rc = cbcmn_chan_create(rt, PIPE_CAP, sizeof(struct pmsg), &p.ch[k])) != 0)
			fail_rc(e, rc, "chan_create");
	for (uint32_t k = 0; rc == 0 && k < p.stages; k++)
		a[k] = (struct pipe_arg){&p, k};
	if (rc == 0)
		/* Stage k pinned on executor k % workers. */
		rc = run_all(rt, e, &(struct spawn_set){pipe_stage, a, sizeof(*a), p.stages,
							CBCMN_PLACE_PINNED});
	if (rc == 0 && p.got != p.sent)
		rc = fail(e, "%llu messages sent, %llu arrived", (unsigned long long)p.sent,
			  (unsigned long long)p.got);
	if (rc == 0) {
		snprintf(e->r->result, sizeof(e->r->result),
			 "%llu messages through %u stages, in order, every value checked",
			 (unsigned long long)p.got, p.stages);
		e->r->units = p.got;
		e->r->p50_us = (double)lat_hist_quantile(p.lat, 0.50) / 1e3;
		e->r->p99_us = (double)lat_hist_quantile(p.lat, 0.99) / 1e3;
	}
	for (uint32_t k = 0; p.ch && k + 1 < p.stages; k++)
		if (p.ch[k])
			cbcmn_chan_destroy(p.ch[k]);
	free(p.ch);
	free(p.lat);
	free(a);
	return rc;
}

/* ---- timers: sleeps and channel timeouts, never early, every one fires ---- */

/* How late they are is reported (p50, p99, max), never checked: on a loaded
 * machine any bound fails now and then (p99 116-140 ms was seen with a CPU
 * hog beside 2 and 64 executors), and latency limits are a benchmark's
 * business.  A timer that never fires hangs its task and so the run: the
 * caller's watchdog (a test's, the experiment script's --timeout) ends it. */
#define TIMER_MIN_NS 200000ull      /* each wait asks for 0.2 .. 10.2 ms */
#define TIMER_SPAN_NS 10000000ull

struct timers {
	struct wl_env *e;
	cbcmn_runtime *rt;
	cbcmn_chan *never; /* nothing is ever sent on it */
	uint32_t ntasks;
	struct timer_task *t;
};

struct timer_task {
	struct timers *c;
	uint32_t id;
	uint64_t fired;
	struct lat_hist late;
};

static int64_t timer_task(cbcmn_cx *cx, void *arg)
{
	struct timer_task *t = arg;
	struct timers *c = t->c;
	uint64_t rng = mix(c->e->o->seed ^ ((uint64_t)t->id << 32));
	do { /* at least one wait: a task that never ran shows in the check */
		rng = mix(rng);
		uint64_t want = TIMER_MIN_NS + rng % TIMER_SPAN_NS, t0 = cbcmn_now(c->rt);
		bool chan = t->fired & 1; /* alternate: a sleep, then a timeout */
		uint64_t dummy;
		int rc = chan ? cbcmn_chan_recv_timeout(cx, c->never, &dummy, want)
			      : cbcmn_sleep(cx, c->e->o->sabotage ? want / 2 : want);
		uint64_t took = cbcmn_now(c->rt) - t0;
		if (rc != (chan ? -ETIMEDOUT : 0))
			return fail(c->e, "%s returned %s", chan ? "recv_timeout" : "sleep",
				    cbcmn_strerror(rc));
		if (took < want)
			return fail(c->e, "a %s of %llu ns ended after %llu ns: early",
				    chan ? "timeout" : "sleep", (unsigned long long)want,
				    (unsigned long long)took);
		lat_hist_add(&t->late, took - want);
		t->fired++;
	} while (cbcmn_now(c->rt) < c->e->deadline);
	return 0;
}

static int wl_timers(cbcmn_runtime *rt, struct wl_env *e)
{
	struct timers c = {.e = e, .rt = rt, .ntasks = e->size};
	c.t = calloc(c.ntasks, sizeof(*c.t));
	struct lat_hist *all = calloc(1, sizeof(*all));
	int rc = c.t && all ? 0 : fail_rc(e, -ENOMEM, "allocating");
	if (rc == 0 && (rc = cbcmn_chan_create(rt, 1, sizeof(uint64_t), &c.never)) != 0)
		fail_rc(e, rc, "chan_create");
	for (uint32_t i = 0; rc == 0 && i < c.ntasks; i++) {
		c.t[i].c = &c;
		c.t[i].id = i;
	}
	if (rc == 0)
		rc = run_all(rt, e, &(struct spawn_set){timer_task, c.t, sizeof(*c.t), c.ntasks,
							CBCMN_PLACE_STEALABLE});
	for (uint32_t i = 0; rc == 0 && i < c.ntasks; i++) {
		if (!c.t[i].fired)
			rc = fail(e, "task %u never waited", i);
		lat_hist_merge(all, &c.t[i].late);
	}
	if (rc == 0) {
		uint64_t p99 = lat_hist_quantile(all, 0.99);
		snprintf(e->r->result, sizeof(e->r->result),
			 "%llu waits on %u tasks, none early, max %.2f ms late",
			 (unsigned long long)all->count, c.ntasks, (double)all->max / 1e6);
		e->r->units = all->count;
		e->r->p50_us = (double)lat_hist_quantile(all, 0.50) / 1e3;
		e->r->p99_us = (double)p99 / 1e3;
	}
	if (c.never)
		cbcmn_chan_destroy(c.never);
	free(c.t);
	free(all);
	return rc;
}

/* ---- mixed: blocks computed, sent through sockets, checked on arrival ----- */

#define MX_WORDS 512 /* 4 KiB blocks */
#define MX_ITERS 16  /* mix() rounds per word: ~12 us of compute a block */

struct mixed {
	struct wl_env *e;
	uint32_t npairs;
	struct mx_pair *p;
};

struct mx_pair {
	struct mixed *m;
	uint32_t id;
	int fd[2];     /* writer's end, reader's end */
	uint64_t sent; /* written by the writer before its shutdown */
	uint64_t got;
};

/* A task's share of a pair. */
struct mx_role {
	struct mx_pair *p;
	bool writer;
};

static void mx_fill(cbcmn_cx *cx, uint64_t *w, uint64_t seed, uint32_t id, uint64_t k)
{
	uint64_t x = mix(seed ^ ((uint64_t)id << 40) ^ k);
	for (int i = 0; i < MX_WORDS; i++)
		w[i] = x = crunch(NULL, x, MX_ITERS);
	CBCMN_CHECKPOINT(cx);
}

static int64_t mx_writer(cbcmn_cx *cx, void *arg)
{
	struct mx_pair *p = arg;
	uint64_t buf[MX_WORDS];
	int64_t rc = 0;
	for (uint64_t k = 0; rc == 0 && (k == 0 || mono_ns() < p->m->e->deadline); k++) {
		mx_fill(cx, buf, p->m->e->o->seed, p->id, k);
		if (k == 0 && p->m->e->o->sabotage)
			buf[MX_WORDS / 2] ^= 1;
		for (size_t off = 0; rc == 0 && off < sizeof(buf);) {
			int64_t n = cbcmn_write(cx, p->fd[0], (char *)buf + off, sizeof(buf) - off);
			if (n < 0)
				rc = n;
			else
				off += (size_t)n;
		}
		if (rc == 0)
			p->sent++;
	}
	int64_t src = cbcmn_shutdown(cx, p->fd[0], SHUT_WR);
	return rc ? rc : src;
}

static int64_t mx_reader(cbcmn_cx *cx, void *arg)
{
	struct mx_pair *p = arg;
	uint64_t buf[MX_WORDS], want[MX_WORDS];
	for (;;) {
		size_t off = 0;
		while (off < sizeof(buf)) {
			int64_t n = cbcmn_read(cx, p->fd[1], (char *)buf + off, sizeof(buf) - off);
			if (n < 0)
				return n;
			if (n == 0)
				break;
			off += (size_t)n;
		}
		if (off == 0)
			return 0; /* EOF between blocks */
		if (off < sizeof(buf))
			return fail(p->m->e, "pair %u: block %llu cut short at %zu bytes", p->id,
				    (unsigned long long)p->got, off);
		mx_fill(cx, want, p->m->e->o->seed, p->id, p->got);
		if (memcmp(buf, want, sizeof(buf)))
			return fail(p->m->e, "pair %u: block %llu has wrong bytes", p->id,
				    (unsigned long long)p->got);
		p->got++;
	}
}

static int64_t mx_task(cbcmn_cx *cx, void *arg)
{
	struct mx_role *r = arg;
	return r->writer ? mx_writer(cx, r->p) : mx_reader(cx, r->p);
}

static int wl_mixed(cbcmn_runtime *rt, struct wl_env *e)
{
	struct mixed m = {.e = e, .npairs = e->size};
	m.p = calloc(m.npairs, sizeof(*m.p));
	struct mx_role *roles = calloc(2 * (size_t)m.npairs, sizeof(*roles));
	int rc = m.p && roles ? 0 : fail_rc(e, -ENOMEM, "allocating");
	uint32_t open = 0;
	for (; rc == 0 && open < m.npairs; open++) {
		m.p[open] = (struct mx_pair){.m = &m, .id = open, .fd = {-1, -1}};
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, m.p[open].fd) != 0)
			rc = fail_rc(e, -errno, "socketpair");
		roles[2 * open] = (struct mx_role){&m.p[open], false};
		roles[2 * open + 1] = (struct mx_role){&m.p[open], true};
	}
	if (rc == 0)
		rc = run_all(rt, e, &(struct spawn_set){mx_task, roles, sizeof(*roles), 2 * m.npairs,
							CBCMN_PLACE_STEALABLE});
	uint64_t blocks = 0;
	for (uint32_t i = 0; rc == 0 && i < m.npairs; i++) {
		if (m.p[i].got != m.p[i].sent || !m.p[i].got)
			rc = fail(e, "pair %u: %llu blocks sent, %llu arrived", i,
				  (unsigned long long)m.p[i].sent, (unsigned long long)m.p[i].got);
		blocks += m.p[i].got;
	}
	if (rc == 0) {
		snprintf(e->r->result, sizeof(e->r->result),
			 "%llu blocks of %zu bytes computed, sent over %u socket pairs and checked",
			 (unsigned long long)blocks, MX_WORDS * sizeof(uint64_t), m.npairs);
		e->r->units = blocks;
	}
	for (uint32_t i = 0; i < open; i++) {
		if (m.p[i].fd[0] >= 0) {
			close(m.p[i].fd[0]);
			close(m.p[i].fd[1]);
		}
	}
	free(m.p);
	free(roles);
	return rc;
}

/* ---- echo and http: fserv's server, loadgen's client, over loopback ------ */

int wl_load(const struct lg_config *lc, struct lg_result *res, char *err, size_t errlen)
{
	int rc = lg_run(lc, res);
	if (rc == 0 && res->errors)
		rc = -EPROTO;
	if (rc)
		snprintf(err, errlen, "load client: %s",
			 res->error[0] ? res->error : cbcmn_strerror(rc));
	return rc;
}

static void snapshot(cbcmn_runtime *rt, struct wl_result *r);

static void hook(const struct wl_opts *o, cbcmn_runtime *rt, bool up)
{
	if (o->on_runtime)
		o->on_runtime(rt, up, o->on_runtime_arg);
}

static int wl_loopback(struct wl_env *e, enum fs_proto proto)
{
	struct fs_config fc;
	fs_config_init(&fc);
	fc.proto = proto;
	fc.workers = e->cfg->workers;
	fc.multishot = true;
	fc.rt_cfg = e->cfg;
	struct fs_server *fs = NULL;
	int rc = fs_start(&fs, &fc);
	if (rc)
		return fail_rc(e, rc, "server");
	hook(e->o, fs_runtime(fs), true);
	struct lg_config lc;
	lg_config_init(&lc);
	lc.port = fs_port(fs);
	lc.conns = e->size;
	lc.duration_s = e->o->duration_s;
	lc.proto = proto == FS_HTTP ? LG_HTTP : LG_ECHO;
	lc.answer_all = true; /* a check: every connection answered, however slow the host */
	struct lg_result res;
	char why[200];
	rc = wl_load(&lc, &res, why, sizeof(why));
	/* The clients are gone: the counters only move by the stop now. */
	snapshot(fs_runtime(fs), e->r);
	hook(e->o, fs_runtime(fs), false);
	struct fs_stats st;
	int src = fs_stop(fs, &st);
	if (rc)
		return fail(e, "%s", why);
	if (src)
		return fail_rc(e, src, "server");
	if (st.errors)
		return fail(e, "the server saw %llu connections fail",
			    (unsigned long long)st.errors);
	/* A connection the server never accepted would only stall in the
	 * client (the kernel completes the handshake), not fail it. */
	if (st.conns != lc.conns)
		return fail(e, "the server accepted %llu of %u connections",
			    (unsigned long long)st.conns, lc.conns);
	if (st.requests < res.requests)
		return fail(e, "the client counted %llu responses, the server answered %llu",
			    (unsigned long long)res.requests, (unsigned long long)st.requests);
	if (res.requests == 0)
		return fail(e, "no request completed in %.2f s", res.seconds);
	snprintf(e->r->result, sizeof(e->r->result),
		 "%llu requests on %u connections, every response checked",
		 (unsigned long long)res.requests, lc.conns);
	e->r->units = res.requests;
	e->r->duration_s = res.seconds;
	e->r->throughput = res.req_per_s;
	e->r->p50_us = res.p50_us;
	e->r->p99_us = res.p99_us;
	return 0;
}

static int wl_echo(cbcmn_runtime *rt, struct wl_env *e)
{
	(void)rt;
	return wl_loopback(e, FS_ECHO);
}

static int wl_http(cbcmn_runtime *rt, struct wl_env *e)
{
	(void)rt;
	return wl_loopback(e, FS_HTTP);
}

/* ---- the table and the driver ----------------------------------------------- */

const struct wl_desc wl_workloads[] = {
	{"fib", "fork-join fib(N) with a task per call, answer checked", "N (fib's argument)", 25, 1,
	 32, "tasks/s", false, wl_fib},
	{"spawn-storm", "spawners on every executor spawning trivial tasks, each counted once",
	 "tasks per round", 100000, 1, 10000000, "tasks/s", false, wl_spawn_storm},
	{"skew", "every task born on executor 0: stealing must spread them (checked)",
	 "tasks per round", 2000, 1, 1000000, "tasks/s", false, wl_skew},
	{"pipeline", "stages pinned on different executors, joined by channels, order and values checked",
	 "stages", 4, 2, 64, "msgs/s", false, wl_pipeline},
	{"echo", "loopback echo server (fiber I/O) and client, every byte checked", "connections", 16, 1,
	 10000, "req/s", true, wl_echo},
	{"http", "loopback HTTP/1.1 keep-alive server and client, every response checked",
	 "connections", 16, 1, 10000, "req/s", true, wl_http},
	{"timers", "tasks sleeping and timing out on channels: none early, every one fires",
	 "tasks", 100, 1, 4096, "waits/s", false, wl_timers},
	{"mixed", "compute 4 KiB blocks, send them through socket pairs, check them on arrival",
	 "socket pairs", 4, 1, 1024, "blocks/s", false, wl_mixed},
	{"ring", "a token passed round a ring of actors: every hop counted, each actor visited in turn",
	 "actors", 1000, 2, 100000, "hops/s", false, wl_ring},
	{"supervise", "workers crash at random and a supervisor restarts them: every request answered once",
	 "workers", 4, 1, 256, "req/s", false, wl_supervise},
	{"skynet", "a 10-ary tree of actors adds up its leaves' indices, the sum checked",
	 "N: 10^N leaves", 4, 1, 6, "actors/s", false, wl_skynet},
};
const size_t wl_nworkloads = sizeof(wl_workloads) / sizeof(wl_workloads[0]);

const struct wl_desc *wl_find(const char *name)
{
	for (size_t i = 0; i < wl_nworkloads; i++)
		if (!strcmp(name, wl_workloads[i].name))
			return &wl_workloads[i];
	return NULL;
}

static void snapshot(cbcmn_runtime *rt, struct wl_result *r)
{
	uint32_t n = cbcmn_runtime_workers(rt);
	free(r->per);
	r->per = calloc(n, sizeof(*r->per));
	cbcmn_stats_snapshot(rt, &r->stats, r->per, r->per ? n : 0);
}

int wl_run(const struct wl_desc *w, const struct wl_opts *o, struct wl_result *r)
{
	memset(r, 0, sizeof(*r));
	r->unit = w->unit;
	r->rounds = 1;
	struct wl_env e = {.o = o, .r = r, .size = o->size ? o->size : w->size_default};
	if (e.size < w->size_min || e.size > w->size_max) {
		snprintf(r->error, sizeof(r->error), "--size wants %u..%u (%s), got %u",
			 w->size_min, w->size_max, w->size_help, e.size);
		return -EINVAL;
	}
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = o->workers;
	cfg.policy = o->policy;
	cfg.cpus = o->cpus;
	cfg.ncpus = o->ncpus;
	cfg.seed = o->seed;
	cfg.trace_events = o->trace_events;
	e.cfg = &cfg;

	int rc;
	if (w->own_runtime) {
		e.t0 = mono_ns();
		e.deadline = e.t0 + (uint64_t)(o->duration_s * 1e9);
		rc = w->run(NULL, &e);
	} else {
		cbcmn_runtime *rt;
		if ((rc = cbcmn_runtime_create(&cfg, &rt)) != 0) {
			snprintf(r->error, sizeof(r->error), "cannot start the runtime: %s",
				 cbcmn_strerror(rc));
			return rc;
		}
		hook(o, rt, true);
		e.t0 = mono_ns();
		e.deadline = e.t0 + (uint64_t)(o->duration_s * 1e9);
		rc = w->run(rt, &e);
		if (!r->duration_s)
			r->duration_s = (double)(mono_ns() - e.t0) / 1e9;
		snapshot(rt, r);
		hook(o, rt, false);
		/* Every nursery was awaited, yet the live-task count can drop a
		 * moment after a nursery saw its last child end (-EBUSY here,
		 * seen with skew): wait for it, boundedly (lib/janus_rt.c waits
		 * the same way), and call it a failure only if it stays. */
		int drc;
		for (int tries = 0; (drc = cbcmn_runtime_destroy(rt)) == -EBUSY && tries < 1000; tries++)
			nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
		if (rc == 0 && drc)
			rc = fail_rc(&e, drc, drc == -EBUSY ? "runtime_destroy: tasks alive 1 s after "
							      "every nursery was awaited"
							    : "runtime_destroy");
	}
	if (rc && !r->error[0])
		fail_rc(&e, rc, "failed");
	if (!r->throughput && r->duration_s > 0)
		r->throughput = (double)r->units / r->duration_s;
	r->ok = rc == 0;
	return rc;
}

void wl_result_free(struct wl_result *r)
{
	free(r->per);
	r->per = NULL;
}
