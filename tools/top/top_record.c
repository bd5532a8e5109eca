/* top_record.c: cbcmn-top --record, the target's own events (its shared
 * trace rings) or, without them, the samples, as a Chrome JSON trace
 * (top_record.h). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "export/chrome_trace.h"
#include "top/top_record.h"
#include "util/clock.h"
#include "util/json.h"
#include "trace_seg.h" /* lib's private layout of the shared rings */

/* Events the file holds at most (as cbcmn-run --trace's default): a
 * sample writes some 8 per executor, so a second's samples of 16
 * executors for 8 hours; past it they are counted (otherData). */
#define REC_LIMIT 4000000ull

/* The counters the events count, per executor, in this order. */
#define REC_FIELDS(X)                                                                        \
	X(tasks_run) X(steal_successes) X(tasks_stolen) X(parks) X(wakes) X(doorbells_sent)     \
	X(doorbells_recv) X(sqes_submitted) X(cqes_reaped) X(io_ops)

struct rec_counts {
#define REC_MEMBER(f) uint64_t f;
	REC_FIELDS(REC_MEMBER)
#undef REC_MEMBER
};

/* A steal pair's kernel count at the last sample (cumulative). */
struct rec_pair {
	uint32_t thief, victim;
	uint64_t steals, tasks;
};

struct top_rec {
	struct ct_writer w;
	const char *path;
	bool started, failed; /* failed: out of memory, the trace goes on without detail */
	uint64_t t_prev, samples;
	uint32_t n, cap;            /* executors seen; entries of first/prev */
	struct rec_counts *first;   /* at the first sample (0: an executor born later) */
	struct rec_counts *prev;    /* at the last */
	struct rec_pair *pairs;     /* the last sample's, sorted by (thief, victim) */
	uint32_t npairs, pair_cap;
	bool kernel_seen;           /* a sample had kernel figures */
	/* Single events: the target's trace rings (trace_seg.h), drained by
	 * a thread of ours while the viewer samples. */
	bool attach_tried;
	const char *events_off;     /* why there are none (NULL: there are) */
	int events_rc;              /* what opening the rings said */
	struct cbcmn__tsw *tsw;
	struct cbcmn__tsw_stat tst; /* the drain thread's, read after it is joined */
	uint64_t dropped_at_attach;
	uint64_t taken;             /* events taken from the rings (the invalid ones too) */
	uint64_t heads_at_attach;   /* the rings' heads then, summed */
	uint64_t by_others;         /* events another consumer took meanwhile */
	uint32_t ring_nexec, ring_cap;
	cbcmn_trace_event *buf;
	pthread_t thread;
	bool thread_on;
	_Atomic bool stop;
	pthread_mutex_t mu;         /* the writer, between that thread and the model's */
};

/* Events taken per drain, and how often the thread drains: 5 ms, as
 * cbcmn-run --trace (docs/TRACE.md: a ring of 65536 would fill only at
 * 13 million events a second). */
#define REC_BATCH 8192u
#define REC_DRAIN_NS 5000000l

int top_rec_open(struct top_rec **out, const char *path, char *err, size_t errlen)
{
	*out = NULL;
	struct top_rec *r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	/* Time 0 is set again at the first sample. */
	int rc = ct_open(&r->w, path, 0, REC_LIMIT, err, errlen);
	if (rc) {
		free(r);
		return rc;
	}
	r->path = path;
	pthread_mutex_init(&r->mu, NULL);
	*out = r;
	return 0;
}

/* Drain every ring once, until each is empty or REC_BATCH events came;
 * true when they all were.  The drain thread's (or, once it is joined,
 * the closer's). */
static bool drain_once(struct top_rec *r)
{
	uint64_t invalid = r->tst.invalid;
	uint32_t n = cbcmn__tsw_drain(r->tsw, r->buf, REC_BATCH, &r->tst);
	pthread_mutex_lock(&r->mu);
	ct_events(&r->w, r->buf, n);
	pthread_mutex_unlock(&r->mu);
	r->taken += n + (r->tst.invalid - invalid);
	return n < REC_BATCH;
}

static void *drain_thread(void *arg)
{
	struct top_rec *r = arg;
	/* acquire: pairs with the release store in top_rec_close(). */
	while (!atomic_load_explicit(&r->stop, memory_order_acquire)) {
		if (drain_once(r)) {
			struct timespec ts = {0, REC_DRAIN_NS};
			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

void top_rec_attach(struct top_rec *r, pid_t pid, uint32_t rt_id)
{
	if (!r || r->attach_tried)
		return;
	r->attach_tried = true;
	int rc = cbcmn__tsw_open(pid, rt_id, &r->tsw);
	r->events_rc = rc;
	if (rc) {
		r->events_off = rc == -ENOENT ? "the target has no shared trace rings (start it with "
						"CBCMN_TRACE_EVENTS=N in its environment)"
			      : rc == -EACCES ? "not allowed to open its trace rings"
			      : rc == -EPROTO ? "its trace rings are of another layout (another libcbcmn)"
			      : rc == -EBADMSG ? "its trace rings' header is corrupt"
					       : "its trace rings could not be mapped";
		return;
	}
	r->ring_nexec = cbcmn__tsw_nexec(r->tsw);
	r->ring_cap = cbcmn__tsw_cap(r->tsw);
	if (!(r->buf = malloc(REC_BATCH * sizeof(*r->buf)))) {
		r->events_off = "out of memory";
		r->events_rc = -ENOMEM;
		cbcmn__tsw_close(r->tsw);
		r->tsw = NULL;
		return;
	}
	/* What the rings dropped before we came (a -p target that ran with
	 * nobody draining): said apart from what is lost while recording. */
	(void)cbcmn__tsw_drain(r->tsw, r->buf, 0, &r->tst);
	r->dropped_at_attach = r->tst.dropped;
	r->heads_at_attach = cbcmn__tsw_heads(r->tsw);
	/* The events are the target's, on its tracks (tid executor + 1). */
	r->w.pid = (int)pid;
	/* Time 0 the runtime's creation, as cbcmn-run --trace: a started
	 * command's first events came before we attached.  The target says
	 * when that was; a time to come is not believed. */
	uint64_t now = mono_ns(), born = cbcmn__tsw_start_ns(r->tsw);
	r->w.t0_ns = born <= now ? born : now;
	if (pthread_create(&r->thread, NULL, drain_thread, r) == 0)
		r->thread_on = true;
	/* else the closer drains once: what the rings hold then */
}

static struct rec_counts counts(const cbcmn_executor_stats *s)
{
	struct rec_counts c;
#define REC_COPY(f) c.f = s->f;
	REC_FIELDS(REC_COPY)
#undef REC_COPY
	return c;
}

/* How far a counter moved; 0 if it went back (as the model's rates). */
static uint64_t grew(uint64_t now, uint64_t before)
{
	return now >= before ? now - before : 0;
}

/* Room for n executors in first/prev; the new ones start at 0. */
static bool grow(struct top_rec *r, uint32_t n)
{
	if (n <= r->cap)
		return true;
	struct rec_counts *f = realloc(r->first, n * sizeof(*f));
	if (f)
		r->first = f;
	struct rec_counts *p = f ? realloc(r->prev, n * sizeof(*p)) : NULL;
	if (!p)
		return false;
	r->prev = p;
	memset(&r->first[r->cap], 0, (n - r->cap) * sizeof(*f));
	memset(&r->prev[r->cap], 0, (n - r->cap) * sizeof(*p));
	r->cap = n;
	return true;
}

static int pair_cmp(const void *a, const void *b)
{
	const struct rec_pair *x = a, *y = b;
	if (x->thief != y->thief)
		return x->thief < y->thief ? -1 : 1;
	return x->victim < y->victim ? -1 : x->victim > y->victim;
}

/* The kernel's steal pairs since the last sample: an arrow victim ->
 * thief for each pair that stole, at ts; then keep them for the next. */
static void steal_arrows(struct top_rec *r, const struct top_model *m, uint64_t ts)
{
	const struct cbcmn_bpf_pair_key *k;
	const struct cbcmn_bpf_pair *v;
	uint32_t np = top_model_steal_pairs(m, &k, &v);
	if (!k)
		return;
	r->kernel_seen = true;
	if (np > r->pair_cap) {
		struct rec_pair *p = realloc(r->pairs, np * sizeof(*p));
		if (!p) {
			r->failed = true;
			return;
		}
		r->pairs = p;
		r->pair_cap = np;
	}
	struct rec_pair *old = r->npairs ? malloc(r->npairs * sizeof(*old)) : NULL;
	if (r->npairs && !old) {
		r->failed = true;
		return;
	}
	uint32_t nold = r->npairs;
	if (old)
		memcpy(old, r->pairs, nold * sizeof(*old));
	for (uint32_t i = 0; i < np; i++)
		r->pairs[i] = (struct rec_pair){k[i].thief, k[i].victim, v[i].steals, v[i].tasks};
	r->npairs = np;
	if (np) /* none yet: no array either (qsort's base must not be NULL) */
		qsort(r->pairs, np, sizeof(*r->pairs), pair_cmp);
	/* The first sample only sets the base: its counts are since attach. */
	for (uint32_t i = 0; r->samples && i < np; i++) {
		const struct rec_pair *p = &r->pairs[i];
		const struct rec_pair *o = old ? bsearch(p, old, nold, sizeof(*old), pair_cmp) : NULL;
		uint64_t steals = grew(p->steals, o ? o->steals : 0);
		/* An executor the segment has not shown yet has no track. */
		if (!steals || p->thief == p->victim || p->thief >= r->n || p->victim >= r->n)
			continue;
		char a[160];
		snprintf(a, sizeof(a), "\"thief\":%u,\"victim\":%u,\"steals\":%llu,\"tasks\":%llu",
			 p->thief, p->victim, (unsigned long long)steals,
			 (unsigned long long)grew(p->tasks, o ? o->tasks : 0));
		ct_steal(&r->w, p->thief, p->victim, ts, a);
	}
	free(old);
}

/* Executor i's rates and gauges over [t0, t1] as a counter track. */
static void rates(struct top_rec *r, uint32_t i, const cbcmn_executor_stats *s, uint64_t t0,
		  uint64_t t1)
{
	double dt = (double)(t1 - t0) / 1e9;
	char name[32], a[160];
	snprintf(name, sizeof(name), "executor %u", i);
	snprintf(a, sizeof(a), "\"tasks_per_s\":%.1f,\"queue_depth\":%llu,\"busy_pct\":%u",
		 dt > 0 ? (double)grew(s->tasks_run, r->prev[i].tasks_run) / dt : 0.0,
		 (unsigned long long)s->queue_depth, s->busy_pct);
	ct_counter(&r->w, name, t1, a);
}

/* Executor i's interval [t0, t1]: its slice, instants, counters. */
static void interval(struct top_rec *r, uint32_t i, const cbcmn_executor_stats *s, uint64_t t0,
		     uint64_t t1)
{
	const struct rec_counts *p = &r->prev[i];
	struct rec_counts d;
#define REC_DELTA(f) d.f = grew(s->f, p->f);
	REC_FIELDS(REC_DELTA)
#undef REC_DELTA
	/* Instants at the middle of the interval: when in it they happened
	 * is not known. */
	uint64_t mid = t0 + (t1 - t0) / 2;
	char a[512];
	snprintf(a, sizeof(a),
		 "\"state\":\"%s\",\"queue_depth\":%llu,\"busy_pct\":%u,\"tasks\":%llu,"
		 "\"steals\":%llu,\"tasks_stolen\":%llu,\"parks\":%llu,\"wakes\":%llu,"
		 "\"doorbells_sent\":%llu,\"doorbells_recv\":%llu,\"sqes\":%llu,\"cqes\":%llu,"
		 "\"io_calls\":%llu,\"actors\":%llu,\"mailbox_depth\":%llu",
		 top_state_name(s->state), (unsigned long long)s->queue_depth, s->busy_pct,
		 (unsigned long long)d.tasks_run, (unsigned long long)d.steal_successes,
		 (unsigned long long)d.tasks_stolen, (unsigned long long)d.parks,
		 (unsigned long long)d.wakes, (unsigned long long)d.doorbells_sent,
		 (unsigned long long)d.doorbells_recv, (unsigned long long)d.sqes_submitted,
		 (unsigned long long)d.cqes_reaped, (unsigned long long)d.io_ops,
		 (unsigned long long)s->actors, (unsigned long long)s->mailbox_depth);
	ct_slice(&r->w, i, "interval", "sample", t0, t1 - t0, a);
	if (d.steal_successes) {
		snprintf(a, sizeof(a), "\"steals\":%llu,\"tasks\":%llu",
			 (unsigned long long)d.steal_successes, (unsigned long long)d.tasks_stolen);
		ct_instant(&r->w, i, "steals", "steal", mid, a);
	}
	if (d.parks || d.wakes) {
		snprintf(a, sizeof(a), "\"parks\":%llu,\"wakes\":%llu", (unsigned long long)d.parks,
			 (unsigned long long)d.wakes);
		ct_instant(&r->w, i, "parks", "park", mid, a);
	}
	if (d.doorbells_sent || d.doorbells_recv) {
		snprintf(a, sizeof(a), "\"sent\":%llu,\"recv\":%llu",
			 (unsigned long long)d.doorbells_sent, (unsigned long long)d.doorbells_recv);
		ct_instant(&r->w, i, "doorbells", "doorbell", mid, a);
	}
	if (d.sqes_submitted) {
		snprintf(a, sizeof(a), "\"sqes\":%llu", (unsigned long long)d.sqes_submitted);
		ct_instant(&r->w, i, "io_submit", "io", mid, a);
	}
	if (d.cqes_reaped) {
		snprintf(a, sizeof(a), "\"cqes\":%llu", (unsigned long long)d.cqes_reaped);
		ct_instant(&r->w, i, "io_complete", "io", mid, a);
	}
	rates(r, i, s, t0, t1);
}

void top_rec_read(const struct top_model *m, uint64_t t_ns, const cbcmn_stats *st,
		  const cbcmn_executor_stats *per, uint32_t n, void *arg)
{
	struct top_rec *r = arg;
	top_rec_attach(r, m->pid, st->runtime_id); /* -p: now; a started command: done already */
	if (!grow(r, n)) {
		/* Without room for the counters the intervals cannot be told:
		 * the trace ends here, and otherData says so. */
		r->failed = true;
		return;
	}
	pthread_mutex_lock(&r->mu);
	if (!r->started) {
		r->started = true;
		if (!r->tsw)
			r->w.t0_ns = t_ns; /* events: set at attach, before the first */
		r->w.pid = (int)m->pid; /* the tracks are the target's executors */
		/* A spare executor's ring (not in per[]) has a track too. */
		ct_names(&r->w, m->comm[0] ? m->comm : "cbcmn", n > r->ring_nexec ? n : r->ring_nexec);
		for (uint32_t i = 0; i < n; i++)
			r->first[i] = r->prev[i] = counts(&per[i]);
		r->n = n;
		if (!r->tsw)
			steal_arrows(r, m, t_ns); /* the base */
	} else if (r->tsw && !r->failed) {
		/* The events are the target's own: the samples add the rates
		 * only, on counter tracks of their own. */
		for (; r->n < n; r->n++)
			if (r->n >= r->ring_nexec)
				ct_track(&r->w, r->n);
		for (uint32_t i = 0; i < n; i++) {
			rates(r, i, &per[i], r->t_prev, t_ns);
			r->prev[i] = counts(&per[i]);
		}
	} else if (!r->failed) {
		/* Executors born since: their tracks, from their counters'
		 * start (0). */
		for (; r->n < n; r->n++)
			ct_track(&r->w, r->n);
		for (uint32_t i = 0; i < n; i++) {
			interval(r, i, &per[i], r->t_prev, t_ns);
			r->prev[i] = counts(&per[i]);
		}
		/* The final read (the runtime ended) has no kernel figures of
		 * its own: the model's pairs are the last sample's again. */
		if (!m->ended)
			steal_arrows(r, m, r->t_prev + (t_ns - r->t_prev) / 2);
	}
	r->t_prev = t_ns;
	r->samples++;
	pthread_mutex_unlock(&r->mu);
}

static void counts_json(struct jw *j, const char *key, const struct rec_counts *c)
{
	jw_obj(j, key);
#define REC_OUT(f) jw_u64(j, #f, c->f);
	REC_FIELDS(REC_OUT)
#undef REC_OUT
}

/* otherData's counters: their sums over the executors as key's members,
 * then "per_executor": each executor's, by index. */
static void counters_json(struct jw *j, const char *key, const struct rec_counts *c, uint32_t n)
{
	struct rec_counts sum = {0};
	for (uint32_t i = 0; i < n; i++) {
#define REC_SUM(f) sum.f += c[i].f;
		REC_FIELDS(REC_SUM)
#undef REC_SUM
	}
	counts_json(j, key, &sum);
	jw_arr(j, "per_executor");
	for (uint32_t i = 0; i < n; i++) {
		counts_json(j, NULL, &c[i]);
		jw_close(j);
	}
	jw_close(j);
	jw_close(j);
}

/* How long the last drain may take: a live target (a hostile one)
 * may write on as fast as we drain. */
#define REC_LAST_DRAIN_NS 2000000000ull

/* Stop the drain thread and take what is left: all of it once the
 * target has ended. */
static void drain_end(struct top_rec *r)
{
	if (!r->tsw)
		return;
	if (r->thread_on) {
		/* release: pairs with the acquire load in drain_thread(). */
		atomic_store_explicit(&r->stop, true, memory_order_release);
		pthread_join(r->thread, NULL);
		r->thread_on = false;
	}
	/* Nothing more is wanted: a lazy target stops recording now. */
	cbcmn__tsw_disarm(r->tsw);
	uint64_t rounds = (uint64_t)r->ring_nexec * r->ring_cap / REC_BATCH + 2;
	uint64_t end = mono_ns() + REC_LAST_DRAIN_NS;
	while (rounds-- && !drain_once(r) && mono_ns() < end)
		;
	/* Head moves we did not make: another consumer's (the target's own
	 * drain, another recorder), whose events are not in this file.  The
	 * rings found corrupt are out of both sums. */
	uint64_t heads = cbcmn__tsw_heads(r->tsw), at = r->heads_at_attach;
	if (!r->tst.corrupt && heads > at + r->taken)
		r->by_others = heads - at - r->taken;
}

/* otherData's "events": where they came from and what was lost. */
static void events_json(struct jw *j, const struct top_rec *r)
{
	if (!r->tsw) {
		jw_str(j, "source_events", "none");
		jw_str(j, "events_off", r->events_off ? r->events_off : "the target was never read");
		return;
	}
	const struct cbcmn__tsw_stat *t = &r->tst;
	jw_str(j, "source_events", "the target's trace rings");
	jw_u64(j, "ring_events", r->ring_cap);
	jw_u64(j, "events", r->taken);
	jw_u64(j, "dropped", t->dropped >= r->dropped_at_attach ? t->dropped - r->dropped_at_attach
								 : t->dropped);
	jw_u64(j, "dropped_before_attach", r->dropped_at_attach);
	jw_u64(j, "invalid", t->invalid);
	jw_u64(j, "taken_by_others", r->by_others);
	jw_u64(j, "corrupt_rings", t->corrupt);
	jw_u64(j, "hold_lapses", t->lapses);
}

/* One line on what the trace lacks, in err: corrupt rings (true: an
 * error), events lost (a note). */
static bool events_lost(const struct top_rec *r, char *err, size_t errlen)
{
	const struct cbcmn__tsw_stat *t = &r->tst;
	if (!r->tsw) {
		/* A target without rings is no news (the samples are
		 * recorded); rings we cannot read are. */
		if (r->events_rc && r->events_rc != -ENOENT)
			snprintf(err, errlen, "%s: no single events: %s; the samples' counts instead",
				 r->path, r->events_off);
		return r->events_rc == -EBADMSG;
	}
	if (t->corrupt) {
		snprintf(err, errlen,
			 "%s: the target's trace ring of executor %u is corrupt (head %llu, tail %llu, "
			 "%u records)%s: its events from then on are left out",
			 r->path, t->first_corrupt, (unsigned long long)t->bad_head,
			 (unsigned long long)t->bad_tail, r->ring_cap,
			 t->corrupt > 1 ? ", and others" : "");
		return true;
	}
	uint64_t lost = t->dropped - (t->dropped >= r->dropped_at_attach ? r->dropped_at_attach : 0);
	if (!lost && !t->invalid && !r->by_others && !t->lapses)
		return false;
	char a[96] = "", b[48] = "", c[80] = "", d[160] = "";
	if (lost)
		snprintf(a, sizeof(a), ", %llu dropped by the target's full rings (%u records each)",
			 (unsigned long long)lost, r->ring_cap);
	if (t->invalid)
		snprintf(b, sizeof(b), ", %llu invalid", (unsigned long long)t->invalid);
	if (r->by_others)
		snprintf(c, sizeof(c), ", %llu taken by another consumer (the target's own drain?)",
			 (unsigned long long)r->by_others);
	/* Not a number of events: a lazy target counted none meanwhile. */
	if (t->lapses)
		snprintf(d, sizeof(d),
			 "; recording stopped %u time%s (we drained too seldom, the target's lease "
			 "ended our hold): its events meanwhile are in no count",
			 t->lapses, t->lapses > 1 ? "s" : "");
	snprintf(err, errlen, "%s: %llu events not in the trace%s%s%s%s", r->path,
		 (unsigned long long)(lost + t->invalid + r->by_others), a, b, c, d);
	return false;
}

int top_rec_close(struct top_rec *r, const struct top_model *m, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = 0;
	if (!r)
		return 0;
	drain_end(r);
	char *od = NULL;
	size_t odlen = 0;
	FILE *f = open_memstream(&od, &odlen);
	if (f) {
		struct jw j;
		jw_begin(&j, f);
		jw_obj(&j, NULL);
		jw_str(&j, "tool", "cbcmn-top --record");
		jw_str(&j, "source", r->tsw ? "the target's trace rings and statistics segment"
					    : r->kernel_seen ? "statistics segment and eBPF steal pairs"
							     : "statistics segment");
		events_json(&j, r);
		jw_i64(&j, "target_pid", m ? (int64_t)m->pid : 0);
		jw_u64(&j, "executors", r->n);
		jw_u64(&j, "samples", r->samples);
		/* ended: the last sample holds the runtime's final figures. */
		jw_bool(&j, "ended", m && m->ended);
		jw_bool(&j, "complete", !r->failed && !r->w.over &&
					     (!r->tsw || (!r->tst.corrupt && !r->tst.invalid &&
							  !r->by_others && !r->tst.lapses &&
							  r->tst.dropped == r->dropped_at_attach)));
		jw_u64(&j, "not_written", r->w.over);
		if (r->started) {
			counters_json(&j, "counters_first", r->first, r->n);
			counters_json(&j, "counters_last", r->prev, r->n);
		}
		jw_close(&j);
		/* Not jw_end: its newline is not wanted inside the object. */
		bool bad = ferror(f);
		if (fclose(f) || bad)
			odlen = 0;
	}
	/* Members without the braces: od is "{...}". */
	char *members = NULL;
	if (od && odlen >= 2 && od[0] == '{' && od[odlen - 1] == '}') {
		od[odlen - 1] = 0;
		members = od + 1;
	}
	int rc = ct_close(&r->w, members);
	bool lost = !members;
	bool corrupt = events_lost(r, err, errlen);
	if (rc)
		snprintf(err, errlen, "%s: writing the trace failed (a full disk, or the file size limit?)", r->path);
	else if (lost)
		snprintf(err, errlen, "%s: out of memory for the trace's summary", r->path);
	free(od);
	cbcmn__tsw_close(r->tsw);
	free(r->buf);
	pthread_mutex_destroy(&r->mu);
	free(r->first);
	free(r->prev);
	free(r->pairs);
	free(r);
	return rc ? rc : lost ? -ENOMEM : corrupt ? -EBADMSG : 0;
}
