/* cbcmn-run: runs one named, self-checking workload on the runtime and
 * prints its result, throughput, latency and the runtime's statistics, as
 * text or as one JSON object; with --bpf, also what the eBPF programs saw
 * (docs/RUN.md).
 *
 * Exit status: 0 the workload ran and its answer was right; 1 it failed (a
 * wrong answer, a runtime or system error, --bpf unavailable, the output
 * not written); 2 bad input.
 * Every failure is one line on stderr.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cbcmn.h"
#include "bpf/bpfmon.h"
#include "export/chrome_trace.h"
#include "cli/cli.h"
#include "util/clock.h"
#include "util/json.h"
#include "cli/opts.h"
#include "util/rlim.h"
#include "workloads/workload.h"

#define PROG "cbcmn-run"
#define DEFAULT_DURATION_S 3.0
/* A workload not done this long after its duration is taken for hung (a
 * lost wake-up, a task nobody runs): generous, as 1024 executors start
 * slowly under a sanitizer on a busy host. */
#ifndef HANG_GRACE_S
#define HANG_GRACE_S 60
#endif

/* --trace: each executor's ring, drained every TRACE_PERIOD_NS into the
 * file; a run that writes more than TRACE_LIMIT events (some 100 bytes
 * each) keeps the first ones, counted and said, so that a long run cannot
 * fill the disk. */
#define TRACE_EVENTS_DEFAULT 16384u /* 512 KiB per executor */
#define TRACE_PERIOD_NS 5000000ull
#define TRACE_LIMIT 4000000ull /* the default of --trace-limit */
#define TRACE_BATCH 8192u

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " WORKLOAD [OPTIONS]\n"
		   "  Runs WORKLOAD on the runtime, checks its answer, and prints the result,\n"
		   "  throughput, latency and the runtime's statistics (docs/RUN.md).\n"
		   "\n"
		   "  -w, --workers N      executors (default: one per allowed CPU)\n"
		   "  -p, --policy P       placement: depth-first (default), breadth-first,\n"
		   "                       random or cpus:LIST (e.g. cpus:0-3,8)\n"
		   "  -s, --seed S         seed of the runtime and the workload (default 0)\n"
		   "  -d, --duration SEC   how long to run (default %.0f); count-based workloads\n"
		   "                       repeat rounds of --size until it has passed\n"
		   "  -n, --size N         the workload's size (see below)\n"
		   "  -j, --json           one JSON object on stdout\n"
		   "  -b, --bpf            also the eBPF programs' view (root)\n"
		   "      --futex-tp       with --bpf, count futex waits through the syscall\n"
		   "                       tracepoints where fentry is refused (costs more)\n"
		   "  -v, --verbose        libbpf's messages with --bpf\n"
		   "      --trace FILE     write what every executor did as a Chrome JSON trace\n"
		   "                       (chrome://tracing, ui.perfetto.dev; docs/TRACE.md)\n"
		   "      --trace-events N with --trace: events each executor's ring holds\n"
		   "                       between two drains (default %u)\n"
		   "      --trace-limit N  with --trace: events the file holds at most; later\n"
		   "                       ones are counted, not written (default %llu)\n"
		   "  -h, --help\n"
		   "\nworkloads (--size, default):\n",
		DEFAULT_DURATION_S, TRACE_EVENTS_DEFAULT, TRACE_LIMIT);
	for (size_t i = 0; i < wl_nworkloads; i++) {
		const struct wl_desc *w = &wl_workloads[i];
		fprintf(f, "  %-12s %s\n  %-12s (%s, %u)\n", w->name, w->help, "", w->size_help,
			w->size_default);
	}
	fprintf(f, "\nExit status: 0 ok, 1 the workload failed or its output could not be written\n"
		   "(one line says what), 2 bad input.\n"
		   "\nEXAMPLES\n"
		   "  " PROG " fib --workers 2\n"
		   "  " PROG " skew --policy breadth-first --duration 1 --json\n"
		   "  " PROG " echo --size 50 --duration 5\n"
		   "  sudo " PROG " skew --bpf --json | jq .bpf\n"
		   "  " PROG " skew --workers 2 --duration 0.5 --trace skew.json\n");
}

static void bad_input(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void bad_input(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, PROG ": %s (try --help)\n", cli_one_line(line));
	exit(2);
}

/* A policy that cannot place on this machine (a CPU it lacks) is bad input:
 * say which CPU here rather than let the runtime refuse with -EINVAL. */
static void check_placement(const struct wl_opts *o, const char *policy)
{
	cbcmn_topo *t;
	char err[256];
	if (cbcmn_topo_load(NULL, &t, err, sizeof(err)))
		return; /* the runtime runs unpinned then, or says why it cannot */
	err[0] = 0;
	uint32_t n = o->workers;
	if (n == CBCMN_WORKERS_AUTO)
		n = (uint32_t)cbcmn_topo_nallowed(t);
	int *out = calloc(n ? n : 1, sizeof(*out));
	int rc = out ? cbcmn_place(t, (cbcmn_policy)o->policy, n, o->seed, o->cpus, o->ncpus, -1,
				   out, NULL, err, sizeof(err))
		     : 0;
	free(out);
	cbcmn_topo_free(t);
	if (rc)
		bad_input("--policy %s: %s", policy, err[0] ? err : strerror(-rc));
}

/* ---- the hang watchdog ---------------------------------------------------------- */

struct watchdog {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done, json;
	double limit_s;
	const char *name;
};

/* Ends the process with one line (and with --json an object saying so)
 * unless the workload ends first: a hung run is a failure, not a wait. */
static void *watchdog_main(void *arg)
{
	struct watchdog *d = arg;
	struct timespec at;
	clock_gettime(CLOCK_REALTIME, &at); /* pthread_cond_timedwait's default clock */
	at.tv_sec += (time_t)d->limit_s;
	pthread_mutex_lock(&d->mu);
	int rc = 0;
	while (!d->done && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&d->cv, &d->mu, &at);
	bool hung = !d->done;
	pthread_mutex_unlock(&d->mu);
	if (!hung)
		return NULL;
	char why[160];
	snprintf(why, sizeof(why), "did not finish within %.0f s: hung (a lost wake-up?)",
		 d->limit_s);
	fprintf(stderr, PROG ": %s: %s\n", d->name, why);
	if (d->json) {
		struct jw j;
		jw_begin(&j, stdout);
		jw_obj(&j, NULL);
		jw_str(&j, "workload", d->name);
		jw_bool(&j, "ok", false);
		jw_str(&j, "error", why);
		jw_close(&j);
		jw_end(&j);
	}
	fflush(NULL);
	_exit(1); /* the runtime's threads are stuck: no clean way down */
}

/* ---- the runtime's statistics ------------------------------------------------ */

/* The uint64_t counters of cbcmn_executor_stats, by name (the JSON keys). */
#define EXEC_FIELD(f) {#f, offsetof(cbcmn_executor_stats, f)}
static const struct {
	const char *name;
	size_t off;
} exec_fields[] = {
	EXEC_FIELD(tasks_run),	     EXEC_FIELD(local_hits),	       EXEC_FIELD(inject_hits),
	EXEC_FIELD(steal_attempts),  EXEC_FIELD(steal_successes),      EXEC_FIELD(tasks_stolen),
	EXEC_FIELD(inline_runs),     EXEC_FIELD(parks),		       EXEC_FIELD(wakes),
	EXEC_FIELD(spawns),	     EXEC_FIELD(queue_depth),	       EXEC_FIELD(steals_gated),
	EXEC_FIELD(doorbells_sent),  EXEC_FIELD(doorbells_recv),       EXEC_FIELD(doorbells_coalesced),
	EXEC_FIELD(ring_msgs_submitted), EXEC_FIELD(ring_msgs_backpressure), EXEC_FIELD(sqes_submitted),
	EXEC_FIELD(cqes_reaped),     EXEC_FIELD(ring_enters),	       EXEC_FIELD(xmsgs_sent),
	EXEC_FIELD(xmsgs_recv),	     EXEC_FIELD(xmsgs_acked),	       EXEC_FIELD(handoffs),
	EXEC_FIELD(io_ops),	     EXEC_FIELD(stalls),
};

static uint64_t exec_field(const cbcmn_executor_stats *s, size_t k)
{
	return *(const uint64_t *)((const char *)s + exec_fields[k].off);
}

static const char *policy_name(int32_t p)
{
	return p >= 0 ? cbcmn_policy_name((cbcmn_policy)p) : "none";
}

/* ---- what the eBPF programs saw ------------------------------------------------ */

struct bpf_view {
	uint64_t steals, tasks_stolen, steal_fails, cross_node, cross_llc;
	uint64_t doorbells, doorbells_coalesced, contention_ns, lock_contended;
	uint64_t migrations, involuntary;
	uint64_t (*pairs)[4]; /* thief, victim, steals, tasks */
	size_t npairs;
	/* Not measured (bpfmon_measured: a program it rests on did not
	 * attach): "-" in text, null in JSON, never 0.  Steals covers
	 * tasks_stolen and the cross-node/LLC steals too. */
	bool off_steals, off_fails, off_doorbells, off_coalesced, off_contention, off_lock;
	bool off_migrations, off_involuntary;
};

/* Which figures of the view rest on programs that did not attach; each
 * one's reason on stderr. */
static void bpf_unmeasured(struct bpfmon *m, struct bpf_view *v)
{
	static const struct {
		const char *name;
		size_t field;
		size_t off; /* its bool in struct bpf_view */
	} figs[] = {
#define FIG(name, f, o) {name, offsetof(struct cbcmn_bpf_shard, f), offsetof(struct bpf_view, o)}
		FIG("steals", steals, off_steals), FIG("steal_fails", steal_fails, off_fails),
		FIG("doorbells", doorbells_msg_ring, off_doorbells),
		FIG("doorbells_coalesced", doorbells_coalesced, off_coalesced),
		FIG("contention_ns", lock_wait_ns, off_contention),
		FIG("contention_ns", futex_wait_ns, off_contention),
		FIG("lock_contended", lock_contended, off_lock),
		FIG("migrations", migrations, off_migrations),
		FIG("involuntary", involuntary, off_involuntary),
#undef FIG
	};
	char why[200];
	for (size_t i = 0; i < sizeof(figs) / sizeof(figs[0]); i++) {
		bool *off = (bool *)((char *)v + figs[i].off);
		if (*off || bpfmon_measured(m, figs[i].field, why, sizeof(why)))
			continue;
		*off = true;
		fprintf(stderr, PROG ": --bpf: %s not measured (\"-\", JSON null): %s\n", figs[i].name,
			why);
	}
}

/* A figure as text: "-" when not measured (bpfmon_fig). */
static const char *fig(bool off, uint64_t v, char *buf, size_t len)
{
	return bpfmon_fig(!off, v, buf, len);
}

/* A figure in JSON: null when not measured. */
static void jw_fig(struct jw *j, const char *key, bool off, uint64_t v)
{
	if (off)
		jw_double(j, key, NAN);
	else
		jw_u64(j, key, v);
}

/* The LLC group of CPU cpu, -1 if unknown (unpinned, no topology). */
static int llc_of(const cbcmn_topo *t, int cpu)
{
	const cbcmn_cpu_info *c = t && cpu >= 0 ? cbcmn_topo_find(t, cpu) : NULL;
	return c ? c->llc : -1;
}

/* Sum the shards of the executors, and list the (thief, victim) pairs that
 * stole; a steal is cross-node (cross-LLC) when both executors are pinned
 * and their CPUs' nodes (LLCs) differ.  Returns 0 or a negative errno. */
static int bpf_collect(struct bpfmon *m, const struct wl_result *r, struct bpf_view *v)
{
	memset(v, 0, sizeof(*v));
	bpf_unmeasured(m, v);
	uint32_t n = r->stats.executors < CBCMN_BPF_MAX_SHARDS ? r->stats.executors
							       : CBCMN_BPF_MAX_SHARDS;
	if (!r->per)
		n = 0;
	/* The executors' shards only: a shard is ~225 map lookups (its
	 * histograms and SQE opcodes), all 257 of them ~60 ms. */
	struct bpfmon_shard *sh = calloc(n ? n : 1, sizeof(*sh));
	v->pairs = calloc((size_t)n * n + 1, sizeof(*v->pairs));
	if (!sh || !v->pairs) {
		free(sh);
		return -ENOMEM;
	}
	int rc = bpfmon_read(m, sh, n);
	if (rc < 0) {
		free(sh);
		return rc;
	}
	/* cbcmn:steal_fail is opt-in (BPFMON_STEAL_FAIL): without it bpfmon
	 * reads failed steals from the runtime's stats segment, which is gone
	 * by now (the runtime was destroyed before this read).  The runtime's
	 * last snapshot counts them all: we attached before it was created. */
	const struct bpfmon_prog *pr;
	bool fail_probe = false;
	for (unsigned i = 0, np = bpfmon_progs(m, &pr); i < np; i++)
		fail_probe |= !strcmp(pr[i].name, "cbcmn_steal_fail") && pr[i].state == BPFMON_ATTACHED;
	for (uint32_t i = 0; i < n; i++) {
		const struct cbcmn_bpf_shard *c = &sh[i].c;
		v->steals += c->steals;
		v->tasks_stolen += c->tasks_stolen;
		v->steal_fails += fail_probe ? c->steal_fails
					     : r->per[i].steal_attempts - r->per[i].steal_successes;
		v->doorbells += c->doorbells_msg_ring + c->doorbells_eventfd;
		v->doorbells_coalesced += c->doorbells_coalesced;
		v->contention_ns += c->lock_wait_ns + c->futex_wait_ns;
		v->lock_contended += c->lock_contended;
		v->migrations += c->migrations;
		v->involuntary += c->involuntary;
	}
	free(sh);
	cbcmn_topo *t = NULL;
	if (cbcmn_topo_load(NULL, &t, NULL, 0))
		t = NULL; /* no LLCs then: cross_llc_steals stays 0 */
	for (uint32_t th = 0; th < n; th++) {
		for (uint32_t vi = 0; vi < n; vi++) {
			struct cbcmn_bpf_pair p;
			if (th == vi || bpfmon_steal_pair(m, th, vi, &p) || !p.steals)
				continue;
			uint64_t *row = v->pairs[v->npairs++];
			row[0] = th, row[1] = vi, row[2] = p.steals, row[3] = p.tasks;
			const cbcmn_executor_stats *a = &r->per[th], *b = &r->per[vi];
			if (a->cpu < 0 || b->cpu < 0)
				continue;
			if (a->node != b->node)
				v->cross_node += p.steals;
			int la = llc_of(t, a->cpu), lb = llc_of(t, b->cpu);
			if (la >= 0 && lb >= 0 && la != lb)
				v->cross_llc += p.steals;
		}
	}
	cbcmn_topo_free(t);
	return 0;
}

/* ---- --trace ------------------------------------------------------------------------- */

/* Sums over the executors that the trace's events count (otherData). */
struct trace_sums {
	uint64_t tasks_run, inline_runs, steals, parks, doorbells, sqes, cqes, io_ops;
};

struct tracer {
	struct ct_writer w;
	const char *name;         /* the workload's */
	cbcmn_runtime *rt;        /* while up */
	pthread_t th;
	bool th_on;
	_Atomic bool stop;
	cbcmn_trace_event *buf;
	uint64_t dropped;
	int drain_err;            /* the first error of a drain, 0 */
	bool drained;             /* the runtime came and went */
	uint32_t executors;
	struct trace_sums before, after; /* around the last drain */
};

static int tracer_drain_once(struct tracer *t)
{
	int n = cbcmn_trace_drain(t->rt, t->buf, TRACE_BATCH, &t->dropped);
	if (n > 0)
		ct_events(&t->w, t->buf, (size_t)n);
	else if (n < 0 && !t->drain_err)
		t->drain_err = n;
	return n;
}

static void *tracer_main(void *arg)
{
	struct tracer *t = arg;
	/* Acquire: pairs with the release store in tracer_hook(down). */
	while (!atomic_load_explicit(&t->stop, memory_order_acquire))
		if (tracer_drain_once(t) < (int)TRACE_BATCH)
			nanosleep(&(struct timespec){.tv_nsec = TRACE_PERIOD_NS}, NULL);
	return NULL;
}

static void trace_sums(cbcmn_runtime *rt, struct trace_sums *s)
{
	cbcmn_stats st;
	memset(s, 0, sizeof(*s));
	if (cbcmn_stats_snapshot(rt, &st, NULL, 0))
		return;
	*s = (struct trace_sums){st.total.tasks_run, st.total.inline_runs, st.total.steal_successes,
				 st.total.parks, st.total.doorbells_sent, st.total.sqes_submitted,
				 st.total.cqes_reaped, st.total.io_ops};
}

/* wl_opts.on_runtime: drain from a thread of ours while the workload runs;
 * at its end, everything left, between two snapshots of the counters that
 * the events count (each executor's events lie between the two). */
static void tracer_hook(cbcmn_runtime *rt, bool up, void *arg)
{
	struct tracer *t = arg;
	if (up) {
		t->rt = rt;
		t->executors = cbcmn_runtime_workers(rt);
		char process[96];
		snprintf(process, sizeof(process), PROG " %s", t->name);
		ct_names(&t->w, process, t->executors);
		atomic_store_explicit(&t->stop, false, memory_order_relaxed);
		t->th_on = pthread_create(&t->th, NULL, tracer_main, t) == 0;
		return;
	}
	if (t->th_on) {
		/* release: pairs with the acquire load in tracer_main. */
		atomic_store_explicit(&t->stop, true, memory_order_release);
		pthread_join(t->th, NULL);
		t->th_on = false;
	}
	trace_sums(rt, &t->before);
	while (tracer_drain_once(t) > 0)
		;
	trace_sums(rt, &t->after);
	t->drained = true;
	t->rt = NULL;
}

static void sums_json(char *buf, size_t len, const char *key, const struct trace_sums *s)
{
	snprintf(buf, len,
		 "\"%s\":{\"tasks_run\":%llu,\"inline_runs\":%llu,\"steal_successes\":%llu,"
		 "\"parks\":%llu,\"doorbells_sent\":%llu,\"sqes_submitted\":%llu,\"cqes_reaped\":%llu,"
		 "\"io_ops\":%llu}",
		 key, (unsigned long long)s->tasks_run, (unsigned long long)s->inline_runs,
		 (unsigned long long)s->steals, (unsigned long long)s->parks,
		 (unsigned long long)s->doorbells, (unsigned long long)s->sqes,
		 (unsigned long long)s->cqes, (unsigned long long)s->io_ops);
}

/* Close the file with what it covers; returns 0, or 1 after one line. */
static int tracer_finish(struct tracer *t, const char *path)
{
	char other[1024], b[320], a[320];
	sums_json(b, sizeof(b), "counters_before_last_drain", &t->before);
	sums_json(a, sizeof(a), "counters_after_last_drain", &t->after);
	snprintf(other, sizeof(other),
		 "\"workload\":\"%s\",\"executors\":%u,\"complete\":%s,\"dropped\":%llu,"
		 "\"not_written\":%llu,%s,%s",
		 t->name, t->executors, t->drained && !t->drain_err ? "true" : "false",
		 (unsigned long long)t->dropped, (unsigned long long)t->w.over, b, a);
	int rc = 0;
	if (ct_close(&t->w, other)) {
		fprintf(stderr, PROG ": --trace: writing %s failed\n", path);
		rc = 1;
	} else if (t->drain_err) {
		fprintf(stderr, PROG ": --trace: draining the trace: %s\n", cbcmn_strerror(t->drain_err));
		rc = 1;
	} else if (t->dropped || t->w.over) {
		fprintf(stderr, PROG ": --trace: %llu events lost (%llu dropped by full rings: raise "
				"--trace-events; %llu past --trace-limit %llu)\n",
			(unsigned long long)(t->dropped + t->w.over), (unsigned long long)t->dropped,
			(unsigned long long)t->w.over, (unsigned long long)t->w.limit);
	}
	free(t->buf);
	return rc;
}

/* ---- output ---------------------------------------------------------------------- */

struct run {
	const struct wl_desc *w;
	const char *policy; /* as given, or NULL */
	uint64_t seed;
	const struct wl_result *r;
	const struct bpf_view *bpf; /* NULL without --bpf */
};

/* print_json(), print_text(): false when the output could not be written
 * (main() says so; the run then fails: a full disk must not pass for a
 * result; a closed pipe ends us by SIGPIPE: cli_stdout_gone()). */
static bool print_json(const struct run *u)
{
	const struct wl_result *r = u->r;
	const cbcmn_stats *s = &r->stats;
	struct jw j;
	jw_begin(&j, stdout);
	jw_obj(&j, NULL);
	jw_str(&j, "workload", u->w->name);
	jw_bool(&j, "ok", r->ok);
	if (!r->ok)
		jw_str(&j, "error", r->error);
	jw_u64(&j, "executors", s->executors);
	jw_str(&j, "policy", u->policy ? u->policy : policy_name(s->policy));
	jw_u64(&j, "seed", u->seed);
	jw_double(&j, "duration_s", r->duration_s);
	jw_double(&j, "throughput", r->throughput);
	jw_str(&j, "throughput_unit", r->unit);
	jw_u64(&j, "units", r->units);
	jw_u64(&j, "rounds", r->rounds);
	jw_double(&j, "p50_us", r->p50_us);
	jw_double(&j, "p99_us", r->p99_us);
	jw_str(&j, "result", r->result);

	jw_obj(&j, "stats");
	jw_u64(&j, "executors", s->executors);
	jw_u64(&j, "tasks_spawned", s->tasks_spawned);
	jw_u64(&j, "tasks_completed", s->tasks_completed);
	jw_u64(&j, "tasks_live", s->tasks_live);
	for (size_t k = 0; k < sizeof(exec_fields) / sizeof(exec_fields[0]); k++)
		jw_u64(&j, exec_fields[k].name, exec_field(&s->total, k));
	jw_double(&j, "local_hit_ratio", s->local_hit_ratio);
	jw_double(&j, "steal_success_rate", s->steal_success_rate);
	jw_u64(&j, "ext_doorbells", s->ext_doorbells);
	jw_u64(&j, "ring_setup_flags", s->ring_setup_flags);
	jw_bool(&j, "msg_ring", s->msg_ring);
	jw_bool(&j, "oversubscribed", s->oversubscribed);
	jw_u64(&j, "executor_starts", s->executor_starts);
	jw_u64(&j, "executor_retires", s->executor_retires);
	jw_str(&j, "policy", policy_name(s->policy));
	jw_str(&j, "backend", cbcmn_backend_name(s->backend));
	jw_close(&j);

	jw_arr(&j, "per_executor");
	for (uint32_t i = 0; r->per && i < s->executors; i++) {
		const cbcmn_executor_stats *e = &r->per[i];
		jw_obj(&j, NULL);
		jw_u64(&j, "executor", i);
		jw_i64(&j, "cpu", e->cpu);
		jw_i64(&j, "node", e->node);
		for (size_t k = 0; k < sizeof(exec_fields) / sizeof(exec_fields[0]); k++)
			jw_u64(&j, exec_fields[k].name, exec_field(e, k));
		jw_u64(&j, "avg_task_ns", e->avg_task_ns);
		jw_u64(&j, "busy_pct", e->busy_pct);
		jw_close(&j);
	}
	jw_close(&j);

	if (u->bpf) {
		const struct bpf_view *b = u->bpf;
		jw_obj(&j, "bpf");
		jw_fig(&j, "steals", b->off_steals, b->steals);
		jw_fig(&j, "tasks_stolen", b->off_steals, b->tasks_stolen);
		jw_fig(&j, "steal_fails", b->off_fails, b->steal_fails);
		jw_fig(&j, "cross_node_steals", b->off_steals, b->cross_node);
		jw_fig(&j, "cross_llc_steals", b->off_steals, b->cross_llc);
		jw_fig(&j, "doorbells", b->off_doorbells, b->doorbells);
		jw_fig(&j, "doorbells_coalesced", b->off_coalesced, b->doorbells_coalesced);
		jw_fig(&j, "contention_ns", b->off_contention, b->contention_ns);
		jw_fig(&j, "lock_contended", b->off_lock, b->lock_contended);
		jw_fig(&j, "migrations", b->off_migrations, b->migrations);
		jw_fig(&j, "involuntary", b->off_involuntary, b->involuntary);
		jw_arr(&j, "steal_pairs");
		for (size_t i = 0; i < b->npairs; i++) {
			jw_arr(&j, NULL);
			for (int k = 0; k < 4; k++)
				jw_u64(&j, NULL, b->pairs[i][k]);
			jw_close(&j);
		}
		jw_close(&j);
		jw_close(&j);
	}
	jw_close(&j);
	return jw_end(&j) == 0;
}

static bool print_text(const struct run *u)
{
	const struct wl_result *r = u->r;
	const cbcmn_stats *s = &r->stats;
	const cbcmn_executor_stats *t = &s->total;
	printf("%s: ok: %s\n", u->w->name, r->result);
	printf("throughput: %.1f %s (%llu in %.3f s", r->throughput, r->unit,
	       (unsigned long long)r->units, r->duration_s);
	if (r->rounds > 1)
		printf(", %llu rounds", (unsigned long long)r->rounds);
	printf(")\n");
	if (r->p50_us || r->p99_us)
		printf("latency: p50 %.1f us, p99 %.1f us\n", r->p50_us, r->p99_us);
	else
		printf("latency: - (no unit of work to time)\n");
	printf("runtime: %u executors, policy %s%s, seed %llu\n", s->executors,
	       u->policy ? u->policy : policy_name(s->policy), s->oversubscribed ? " (oversubscribed)" : "",
	       (unsigned long long)u->seed);
	printf("tasks: spawned %llu, completed %llu; local hit ratio %.3f; steals %llu of %llu "
	       "probes (%.3f), %llu tasks stolen\n",
	       (unsigned long long)s->tasks_spawned, (unsigned long long)s->tasks_completed,
	       s->local_hit_ratio, (unsigned long long)t->steal_successes,
	       (unsigned long long)t->steal_attempts, s->steal_success_rate,
	       (unsigned long long)t->tasks_stolen);
	printf("shards: doorbells sent %llu, received %llu, coalesced %llu; xmsgs %llu; parks %llu; "
	       "SQEs %llu, CQEs %llu\n",
	       (unsigned long long)t->doorbells_sent, (unsigned long long)t->doorbells_recv,
	       (unsigned long long)t->doorbells_coalesced, (unsigned long long)t->xmsgs_sent,
	       (unsigned long long)t->parks, (unsigned long long)t->sqes_submitted,
	       (unsigned long long)t->cqes_reaped);
	printf("%4s %4s %4s %10s %8s %8s %8s %8s %6s %5s\n", "exec", "cpu", "node", "run", "steals",
	       "stolen", "bells", "parks", "xmsgs", "busy%");
	for (uint32_t i = 0; r->per && i < s->executors; i++) {
		const cbcmn_executor_stats *e = &r->per[i];
		printf("%4u %4d %4d %10llu %8llu %8llu %8llu %8llu %6llu %5u\n", i, e->cpu, e->node,
		       (unsigned long long)e->tasks_run, (unsigned long long)e->steal_successes,
		       (unsigned long long)e->tasks_stolen, (unsigned long long)e->doorbells_sent,
		       (unsigned long long)e->parks, (unsigned long long)e->xmsgs_sent, e->busy_pct);
	}
	if (u->bpf) {
		const struct bpf_view *b = u->bpf;
		char f[10][24], ms[32] = "-";
		if (!b->off_contention)
			snprintf(ms, sizeof(ms), "%.3f", (double)b->contention_ns / 1e6);
		printf("bpf: steals %s (%s tasks, %s failed probes; cross-node %s, cross-LLC %s), "
		       "doorbells %s (coalesced %s), contention %s ms (%s lock waits), "
		       "migrations %s, involuntary switches %s\n",
		       fig(b->off_steals, b->steals, f[0], 24), fig(b->off_steals, b->tasks_stolen, f[1], 24),
		       fig(b->off_fails, b->steal_fails, f[2], 24), fig(b->off_steals, b->cross_node, f[3], 24),
		       fig(b->off_steals, b->cross_llc, f[4], 24),
		       fig(b->off_doorbells, b->doorbells, f[5], 24),
		       fig(b->off_coalesced, b->doorbells_coalesced, f[6], 24), ms,
		       fig(b->off_lock, b->lock_contended, f[7], 24),
		       fig(b->off_migrations, b->migrations, f[8], 24),
		       fig(b->off_involuntary, b->involuntary, f[9], 24));
		for (size_t i = 0; i < b->npairs; i++)
			printf("bpf: executor %llu stole %llu times (%llu tasks) from executor %llu\n",
			       (unsigned long long)b->pairs[i][0], (unsigned long long)b->pairs[i][2],
			       (unsigned long long)b->pairs[i][3], (unsigned long long)b->pairs[i][1]);
	}
	return !fflush(stdout) && !ferror(stdout);
}

int main(int argc, char **argv)
{
	struct run_opts a = {.workers = CBCMN_WORKERS_AUTO, .duration_s = DEFAULT_DURATION_S};
	char perr[256];
	/* Ignored: a --trace file that is a pipe whose reader left is the
	 * trace's failure, said; stdout's reader that left ends us as a
	 * filter (cli_stdout_gone()). */
	cli_sigpipe_ignore();
	if (run_opts_parse(argc, argv, &a, perr, sizeof(perr)))
		bad_input("%s", perr);
	if (a.help) {
		usage(stdout);
		if (fflush(stdout))
			cli_stdout_gone(errno);
		return cli_stdout_flushed(PROG) ? 0 : 1;
	}
	struct wl_opts o = {.workers = a.workers,
			    .policy = CBCMN_PIN_AUTO,
			    .seed = a.seed,
			    .duration_s = a.duration_s,
			    .size = a.size};
	const char *policy = a.policy;
	bool json = a.json, bpf = a.bpf, verbose = a.verbose, futex_tp = a.futex_tp;
	const struct wl_desc *w = wl_find(a.workload);
	if (!w)
		bad_input("no workload named '%s'", a.workload);
	if (o.size && (o.size < w->size_min || o.size > w->size_max))
		bad_input("%s: --size wants %u..%u (%s), got %u", w->name, w->size_min, w->size_max,
			  w->size_help, o.size);

	int *cpus = NULL;
	if (policy) {
		cbcmn_policy p;
		char err[256];
		if (cbcmn_policy_parse(policy, &p, &cpus, &o.ncpus, err, sizeof(err)))
			bad_input("--policy: %s", err);
		o.policy = (int32_t)p;
		o.cpus = cpus;
		if (cpus && o.workers == CBCMN_WORKERS_AUTO)
			o.workers = (uint32_t)o.ncpus;
		check_placement(&o, policy);
	}

	/* The file first: a name that cannot be written is bad input, said
	 * before anything runs. */
	struct tracer tr = {.name = w->name};
	if (a.trace) {
		char err[PATH_MAX + 128];
		tr.buf = calloc(TRACE_BATCH, sizeof(*tr.buf));
		if (!tr.buf || ct_open(&tr.w, a.trace, mono_ns(),
						 a.trace_limit ? a.trace_limit : TRACE_LIMIT, err, sizeof(err))) {
			fprintf(stderr, PROG ": --trace %s\n", tr.buf ? err : "out of memory");
			free(tr.buf);
			free(cpus);
			return 2;
		}
		o.trace_events = a.trace_events ? a.trace_events : TRACE_EVENTS_DEFAULT;
		o.on_runtime = tracer_hook;
		o.on_runtime_arg = &tr;
	}

	/* Before the runtime exists: its executors are then found by the
	 * cbcmn:exec_start probe, and every event of the run is counted. */
	struct bpfmon *mon = NULL;
	if (bpf) {
		char err[256] = "";
		unsigned flags = (verbose ? BPFMON_VERBOSE : 0) | (futex_tp ? BPFMON_FUTEX_TP : 0);
		int rc = bpfmon_open(&mon, getpid(), flags, err, sizeof(err));
		if (rc) {
			fprintf(stderr, PROG ": --bpf: %s\n", err[0] ? err : strerror(-rc));
			if (a.trace) { /* a valid, empty trace */
				ct_close(&tr.w, "\"complete\":false");
				free(tr.buf);
			}
			free(cpus);
			return 1;
		}
	}

	/* 1024 executors, or echo's 10000 connections, need more than the
	 * soft 1024 descriptors a login gets: take what the hard limit allows,
	 * as a server would (rlim.h). */
	rlim_nofile_up(RLIM_INFINITY);

	struct watchdog dog = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, json,
			       o.duration_s + HANG_GRACE_S, w->name};
	pthread_t dog_th;
	bool dog_on = pthread_create(&dog_th, NULL, watchdog_main, &dog) == 0;
	struct wl_result r;
	int rc = wl_run(w, &o, &r);
	if (dog_on) {
		pthread_mutex_lock(&dog.mu);
		dog.done = true;
		pthread_cond_signal(&dog.cv);
		pthread_mutex_unlock(&dog.mu);
		pthread_join(dog_th, NULL);
	}
	int trc = a.trace ? tracer_finish(&tr, a.trace) : 0;
	struct bpf_view view = {0};
	int brc = 0;
	if (mon) {
		if ((brc = bpf_collect(mon, &r, &view)) != 0)
			fprintf(stderr, PROG ": --bpf: reading the maps: %s\n", strerror(-brc));
		bpfmon_close(mon);
	}
	struct run u = {w, policy, o.seed, &r, mon && !brc ? &view : NULL};
	bool written = json ? print_json(&u) : rc || print_text(&u);
	if (!written)
		cli_stdout_gone(errno); /* its reader left: quietly, status 141 */
	/* One line says what went wrong: the workload's failure (its JSON
	 * lost on a full disk too adds no second line), else the output's,
	 * unless --bpf's or --trace's said already. */
	if (rc)
		fprintf(stderr, PROG ": %s: %s\n", w->name, r.error);
	else if (!written && !brc && !trc)
		fprintf(stderr, PROG ": writing the output failed\n");
	free(view.pairs);
	wl_result_free(&r);
	free(cpus);
	return rc || brc || trc || !written ? 1 : 0;
}
