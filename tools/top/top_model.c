/* top_model.c: cbcmn-top's sampling, per-shard rows, warnings and own cost
 * (top_model.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "util/clock.h"
#include "bpf/pidns.h"
#include "top/top_model.h"

/* Widths hold the header and the widest value printed (top_fmt scales
 * rates above 99999 to k/M). */
const struct top_col_desc top_cols[TOP_NCOLS] = {
	[TOP_COL_SHARD] = {"ID", "shard", 3, 9, false, true},
	[TOP_COL_CPU] = {"CPU", "cpu", 3, 8, false, true},
	[TOP_COL_NODE] = {"ND", "node", 2, 3, false, true},
	[TOP_COL_STATE] = {"STATE", "state", 5, 9, false, true},
	[TOP_COL_QUEUE] = {"RUNQ", "queue_depth", 5, 8, false, false},
	[TOP_COL_TASKS] = {"TASK/s", "tasks_per_s", 6, 9, false, false},
	[TOP_COL_STEALS_IN] = {"STL/s", "steals_in_per_s", 5, 7, false, false},
	[TOP_COL_STOLEN_IN] = {"TKN/s", "tasks_stolen_per_s", 5, 1, false, false},
	[TOP_COL_STEALS_OUT] = {"OUT/s", "steals_out_per_s", 5, 6, true, false},
	[TOP_COL_STEAL_OK] = {"OK%", "steal_ok_pct", 4, 6, true, false},
	[TOP_COL_DB_SENT] = {"DBTX/s", "doorbells_sent_per_s", 6, 5, false, false},
	[TOP_COL_DB_RECV] = {"DBRX/s", "doorbells_recv_per_s", 6, 5, false, false},
	[TOP_COL_DB_P99] = {"DBp99", "doorbell_p99_us", 5, 6, true, false},
	[TOP_COL_SQES] = {"SQE/s", "sqes_per_s", 5, 2, false, false},
	[TOP_COL_CQES] = {"CQE/s", "cqes_per_s", 5, 2, false, false},
	[TOP_COL_BUSY] = {"BUSY%", "busy_pct", 5, 7, false, false},
	[TOP_COL_WAIT] = {"WAITms", "wait_ms_per_s", 6, 4, true, false},
	[TOP_COL_MIGR] = {"MIGR", "migrations", 4, 4, true, false},
	[TOP_COL_ONCPU] = {"ONCPU%", "oncpu_pct", 6, 5, true, false},
	[TOP_COL_LOAD] = {"LOAD", "actor_load", 5, 3, false, false},
	[TOP_COL_ACTORS] = {"ACTR", "actors", 5, 3, false, false},
	[TOP_COL_ACT_RUN] = {"ARUN", "actors_runnable", 5, 2, false, false},
	[TOP_COL_MAILBOX] = {"MBOX", "mailbox_depth", 5, 2, false, false},
	[TOP_COL_ACT_MIGR] = {"AMG/s", "actor_migrations_per_s", 5, 1, false, false},
	[TOP_COL_RESTARTS] = {"RST/s", "actor_restarts_per_s", 5, 2, false, false},
	[TOP_COL_MBOX_P99] = {"MBp99", "mailbox_depth_p99", 5, 2, false, false},
	[TOP_COL_BACKPR] = {"BP/s", "actor_backpressure_per_s", 5, 1, false, false},
};

/* Steals of a node or LLC group, cumulative since attach. */
struct grp_steals {
	uint64_t in, out, in_x, out_x;
};

/* One sample of everything read. */
struct snap {
	uint64_t t_ns;
	cbcmn_stats st;
	cbcmn_executor_stats *per;  /* cap */
	struct bpfmon_shard *k;     /* cap (kernel on) */
	struct cbcmn_bpf_pair *out; /* cap: per victim, summed over thieves */
	uint64_t pair_probes;       /* steals + fails of every pair */
	struct grp_steals *g;       /* ngroups: nodes, then LLCs (kernel on, topology known) */
	uint64_t placed, cross_node, cross_llc; /* steals between placed shards, ... */
	uint32_t n;                 /* shards read */
};

struct top_model_priv {
	cbcmn_watch *w;
	struct bpfmon *bpf;
	cbcmn_topo *topo;
	struct snap s[2];       /* cur, prev: indexes flip */
	int cur;
	uint32_t cap;           /* entries allocated per snap */
	unsigned hpos;          /* next history slot */
	unsigned warn_cap;
	int nnodes, nllcs;      /* groups of struct snap g (0: none kept) */
	int stats_fd;           /* holds BPF_STATS_RUN_TIME on */
	struct cbcmn_bpf_pair_key *pair_k; /* CBCMN_BPF_MAX_PAIRS: a read's pairs */
	struct cbcmn_bpf_pair *pair_v;
	uint32_t npairs;        /* of pair_k/pair_v, the last read */
	uint64_t cost_t_ns;
	void (*on_read)(const struct top_model *, uint64_t, const cbcmn_stats *,
			const cbcmn_executor_stats *, uint32_t, void *); /* top_model_opts' */
	void *on_read_arg;
};

/* How far a counter moved; 0 if it went back (a counter that restarted:
 * the interval is lost rather than shown as 2^64). */
static uint64_t delta(uint64_t now, uint64_t before)
{
	return now >= before ? now - before : 0;
}

static double rate(uint64_t now, uint64_t before, double dt)
{
	if (dt <= 0)
		return NAN;
	return delta(now, before) / dt;
}

static int fail(char *err, size_t len, int rc, const char *fmt, ...)
{
	if (err && len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return rc;
}

const char *top_state_name(uint32_t state)
{
	switch (state) {
	case CBCMN_EXEC_RUNNING:
		return "running";
	case CBCMN_EXEC_SEARCHING:
		return "searching";
	case CBCMN_EXEC_PARKED:
		return "parked";
	default:
		return "stopped";
	}
}

const char *top_warn_name(enum top_warn_kind k)
{
	static const char *const names[] = {
		[TOP_WARN_MIGRATED] = "migrated",       [TOP_WARN_STEAL_FAIL] = "steal_fail",
		[TOP_WARN_DB_WASTED] = "doorbell_wasted", [TOP_WARN_CQ_OVERFLOW] = "cq_overflow",
		[TOP_WARN_BACKPRESSURE] = "sq_backpressure", [TOP_WARN_STARVED] = "starved",
		[TOP_WARN_STALLED] = "stalled",
	};
	return names[k];
}

const char *top_policy_name(int32_t policy)
{
	if (policy == CBCMN_PIN_NONE)
		return "none";
	if (policy < 0 || policy > CBCMN_POLICY_CPUS)
		return "?";
	return cbcmn_policy_name((cbcmn_policy)policy);
}

/* ---- own cost -------------------------------------------------------------- */

/* What bpfmon's programs cost, as the kernel times them. */
static void cost_read(struct top_model *m)
{
	struct top_cost *c = &m->cost;
	if (!c->on)
		return;
	struct bpfmon_cost bc;
	int rc = bpfmon_cost(m->priv->bpf, &bc);
	if (rc) {
		c->on = false;
		snprintf(c->why, sizeof(c->why), "reading the programs' run statistics: %s",
			 strerror(-rc));
		return;
	}
	uint64_t runs = bc.runs, ns = bc.run_ns;
	unsigned progs = bc.progs;
	uint64_t t = mono_ns();
	double dt = m->priv->cost_t_ns ? (t - m->priv->cost_t_ns) / 1e9 : 0;
	if (dt > 0) {
		c->runs_per_s = rate(runs, c->runs, dt);
		c->trap_ns_per_s = rate(bc.usdt_runs, c->usdt_runs, dt) * BPFMON_UPROBE_TRAP_NS;
		c->ns_per_s = rate(ns, c->run_ns, dt) + c->trap_ns_per_s;
	}
	m->priv->cost_t_ns = t;
	c->progs = progs;
	c->runs = runs;
	c->run_ns = ns;
	c->usdt_runs = bc.usdt_runs;
}

static void cost_open(struct top_model *m)
{
	struct top_cost *c = &m->cost;
	c->runs_per_s = c->ns_per_s = c->trap_ns_per_s = NAN;
	if (!m->kernel) {
		snprintf(c->why, sizeof(c->why), "kernel figures are off");
		return;
	}
	/* System-wide and reference-counted: every BPF program of the host
	 * is timed while any holder keeps the descriptor (two clock reads a
	 * run); closing it turns the statistics off again. */
	int fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (fd < 0) {
		snprintf(c->why, sizeof(c->why), "bpf_enable_stats: %s", strerror(errno));
		return;
	}
	m->priv->stats_fd = fd;
	c->on = true;
	cost_read(m);
}

/* ---- sampling -------------------------------------------------------------- */

static int snap_alloc(struct snap *s, uint32_t cap, bool kernel)
{
	cbcmn_executor_stats *per = realloc(s->per, cap * sizeof(*per));
	if (!per)
		return -ENOMEM;
	s->per = per;
	if (kernel) {
		struct bpfmon_shard *k = realloc(s->k, cap * sizeof(*k));
		if (!k)
			return -ENOMEM;
		s->k = k;
		struct cbcmn_bpf_pair *o = realloc(s->out, cap * sizeof(*o));
		if (!o)
			return -ENOMEM;
		s->out = o;
	}
	return 0;
}

static int grow(struct top_model *m, uint32_t n)
{
	struct top_model_priv *p = m->priv;
	if (n <= p->cap)
		return 0;
	for (int i = 0; i < 2; i++) {
		int rc = snap_alloc(&p->s[i], n, m->kernel);
		if (rc)
			return rc;
		memset(p->s[i].per + p->cap, 0, (n - p->cap) * sizeof(*p->s[i].per));
	}
	struct top_row *rows = realloc(m->rows, n * sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	for (uint32_t i = p->cap; i < n; i++) {
		memset(&rows[i], 0, sizeof(rows[i]));
		for (int c = 0; c < TOP_NCOLS; c++)
			for (int h = 0; h < TOP_HISTORY; h++)
				rows[i].hist[c][h] = NAN;
	}
	m->rows = rows;
	p->cap = n;
	return 0;
}

/* The node and LLC indexes of a CPU, -1 when unknown (unpinned, or no
 * topology). */
static void place(const struct top_model_priv *p, int cpu, int *node, int *llc)
{
	const cbcmn_cpu_info *ci = p->topo && cpu >= 0 ? cbcmn_topo_find(p->topo, cpu) : NULL;
	*node = ci ? ci->node : -1;
	*llc = ci ? ci->llc : -1;
}

/* A steal pair's count into the groups of its thief (tg) and victim (vg),
 * -1 for unplaced: a steal whose other side is elsewhere, or unplaced, is
 * a cross-group one. */
static void group_add(struct grp_steals *g, int tg, int vg, uint64_t steals)
{
	if (tg >= 0) {
		g[tg].in += steals;
		g[tg].in_x += tg != vg ? steals : 0;
	}
	if (vg >= 0) {
		g[vg].out += steals;
		g[vg].out_x += tg != vg ? steals : 0;
	}
}

/* The pair (thief t, victim v) by placement, into s's group counters. */
static void pair_place(const struct top_model_priv *p, struct snap *s, uint32_t t, uint32_t v,
		       uint64_t steals)
{
	int tn, tl, vn, vl;
	if (!s->g || !steals)
		return;
	place(p, s->per[t].cpu, &tn, &tl);
	place(p, s->per[v].cpu, &vn, &vl);
	group_add(s->g, tn, vn, steals);
	group_add(s->g + p->nnodes, tl, vl, steals);
	if (tn >= 0 && vn >= 0) {
		s->placed += steals;
		s->cross_node += tn != vn ? steals : 0;
		s->cross_llc += tl != vl ? steals : 0;
	}
}

/* Kernel figures into s: shards [0, n) and, per victim, what was stolen
 * from it; steals by placement of thief and victim.  The pairs are read
 * after the shards (a probe counts its shard first), so pair_probes can
 * only run ahead of the shards' sum. */
static int read_kernel(struct top_model *m, struct snap *s, const struct snap *prev)
{
	struct top_model_priv *p = m->priv;
	uint32_t n = s->n < CBCMN_BPF_MAX_SHARDS ? s->n : CBCMN_BPF_MAX_SHARDS;
	int rc = bpfmon_read(p->bpf, s->k, n);
	if (rc < 0)
		return rc;
	for (uint32_t i = n; i < s->n; i++)
		memset(&s->k[i], 0, sizeof(s->k[i]));
	/* On-CPU time up to now never goes back, but a read that found no
	 * base for the time since the last switch (the thread's record or
	 * /proc entry gone) has less: hold the total until the counters
	 * catch up. */
	for (uint32_t i = 0; prev && i < n && i < prev->n; i++) {
		uint64_t was = bpfmon_oncpu_ns(&prev->k[i]);
		if (bpfmon_oncpu_ns(&s->k[i]) < was && s->k[i].c.oncpu_ns <= was)
			s->k[i].oncpu_now_ns = was - s->k[i].c.oncpu_ns;
	}
	memset(s->out, 0, s->n * sizeof(*s->out));
	s->pair_probes = s->placed = s->cross_node = s->cross_llc = 0;
	if (s->g)
		memset(s->g, 0, (size_t)(p->nnodes + p->nllcs) * sizeof(*s->g));
	/* One walk of the pairs recorded, O(pairs), not a lookup for each
	 * of shards^2 (a million at 1024 executors). */
	if (!p->pair_k && (!(p->pair_k = malloc(CBCMN_BPF_MAX_PAIRS * sizeof(*p->pair_k))) ||
			   !(p->pair_v = malloc(CBCMN_BPF_MAX_PAIRS * sizeof(*p->pair_v)))))
		return -ENOMEM;
	int np = bpfmon_steal_pairs(p->bpf, p->pair_k, p->pair_v, CBCMN_BPF_MAX_PAIRS);
	if (np < 0)
		return np;
	p->npairs = (uint32_t)np;
	for (int i = 0; i < np; i++) {
		uint32_t t = p->pair_k[i].thief, v = p->pair_k[i].victim;
		const struct cbcmn_bpf_pair *pr = &p->pair_v[i];
		if (t >= n || v >= n)
			continue;
		s->out[v].steals += pr->steals;
		s->out[v].tasks += pr->tasks;
		s->out[v].fails += pr->fails;
		s->pair_probes += pr->steals + pr->fails;
		pair_place(p, s, t, v, pr->steals);
	}
	return 0;
}

static void warn(struct top_model *m, enum top_warn_kind k, uint32_t shard, const char *fmt, ...)
{
	struct top_model_priv *p = m->priv;
	if (m->nwarn == p->warn_cap) {
		unsigned cap = p->warn_cap ? 2 * p->warn_cap : 16;
		struct top_warning *w = realloc(m->warn, cap * sizeof(*w));
		if (!w)
			return; /* a warning less, not a crash */
		m->warn = w;
		p->warn_cap = cap;
	}
	struct top_warning *w = &m->warn[m->nwarn++];
	w->kind = k;
	w->shard = shard;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->text, sizeof(w->text), fmt, ap);
	va_end(ap);
}

/* d = a - b for every slot of a log2 histogram. */
static void hist_delta(uint64_t *d, const uint64_t *a, const uint64_t *b)
{
	for (int i = 0; i < CBCMN_BPF_HIST_SLOTS; i++)
		d[i] = delta(a[i], b[i]);
}

#define DK(f) delta(k->c.f, kp->c.f) /* kernel counter, this interval */

/* The kernel columns and the counters each rests on (bpfmon_measured). */
static const struct {
	enum top_col col;
	size_t field[2];
} col_fields[] = {
	{TOP_COL_STEALS_OUT, {offsetof(struct cbcmn_bpf_shard, steals), 0}},
	{TOP_COL_STEAL_OK,
	 {offsetof(struct cbcmn_bpf_shard, steals), offsetof(struct cbcmn_bpf_shard, steal_fails)}},
	{TOP_COL_DB_P99, {offsetof(struct cbcmn_bpf_shard, doorbell_lat), 0}},
	{TOP_COL_WAIT,
	 {offsetof(struct cbcmn_bpf_shard, futex_wait_ns), offsetof(struct cbcmn_bpf_shard, lock_wait_ns)}},
	{TOP_COL_MIGR, {offsetof(struct cbcmn_bpf_shard, migrations), 0}},
	{TOP_COL_ONCPU, {offsetof(struct cbcmn_bpf_shard, oncpu_ns), 0}},
};

/* Which kernel columns are not measured, and why (once, at open: what
 * attached does not change). */
static void measured_open(struct top_model *m)
{
	for (size_t i = 0; i < sizeof(col_fields) / sizeof(col_fields[0]); i++)
		for (int f = 0; f < 2; f++) {
			enum top_col c = col_fields[i].col;
			size_t off = col_fields[i].field[f];
			if ((f && !off) || m->unmeasured[c])
				continue;
			if (!bpfmon_measured(m->priv->bpf, off, m->unmeasured_why[c],
					     sizeof(m->unmeasured_why[c]))) {
				m->unmeasured[c] = true;
				m->nunmeasured++;
			}
		}
}

/* Is counter f of struct cbcmn_bpf_shard measured (bpfmon_measured)? */
#define MEASURED(f) bpfmon_measured(m->priv->bpf, offsetof(struct cbcmn_bpf_shard, f), NULL, 0)

/* The kernel's columns of row r (before "not measured" blanks some). */
static void row_kernel_cols(struct top_row *r, const struct bpfmon_shard *k,
			    const struct bpfmon_shard *kp, const struct cbcmn_bpf_pair *out,
			    const struct cbcmn_bpf_pair *outp, double dt, uint64_t *h)
{
	r->v[TOP_COL_STEALS_OUT] = rate(out->steals, outp->steals, dt);
	uint64_t ok = DK(steals), bad = DK(steal_fails);
	r->v[TOP_COL_STEAL_OK] = ok + bad ? 100.0 * ok / (ok + bad) : NAN;
	hist_delta(h, k->hist[CBCMN_BPF_HIST_DOORBELL], kp->hist[CBCMN_BPF_HIST_DOORBELL]);
	r->v[TOP_COL_DB_P99] = bpfmon_hist_count(h) ? (double)bpfmon_hist_pct(h, 99) : NAN;
	r->v[TOP_COL_WAIT] = dt > 0 ? (DK(futex_wait_ns) + DK(lock_wait_ns)) / dt / 1e6 : NAN;
	r->v[TOP_COL_MIGR] = (double)k->c.migrations;
	/* With the stretch it is on a CPU for now (bpfmon_read), so a thread
	 * that never leaves its CPU reads 100, not 0 and then a burst.  Over
	 * the interval between the two reads of the stretch, on the clock
	 * that timed it: a viewer held up between its sample's time and the
	 * read would otherwise put the wait into one interval (cut at 100)
	 * and take it out of the next. */
	double kdt = k->read_ns > kp->read_ns ? (double)(k->read_ns - kp->read_ns) : 0;
	double on = kdt > 0 && !k->partial && !kp->partial
			    ? delta(bpfmon_oncpu_ns(k), bpfmon_oncpu_ns(kp)) / kdt * 100
			    : NAN; /* a partial read: not known, rather than 0 then 100 */
	r->v[TOP_COL_ONCPU] = on > 100 ? 100 : on;
}

/* Row r's warnings from the kernel's figures of the interval dt (> 0): only
 * from figures that are measured, so a program that did not attach raises
 * none (nor hides one behind a 0). */
static void row_kernel_warn(struct top_model *m, struct top_row *r, const struct bpfmon_shard *k,
			    const struct bpfmon_shard *kp, double dt, uint64_t *h)
{
	uint64_t ok = DK(steals), bad = DK(steal_fails);
	double on = r->v[TOP_COL_ONCPU];
	if (MEASURED(migrations) && r->cpu >= 0 && k->c.migrations)
		warn(m, TOP_WARN_MIGRATED, r->shard,
		     "pinned to CPU %d, migrated %llu times by the kernel since attach", r->cpu,
		     (unsigned long long)k->c.migrations);
	if (MEASURED(steals) && MEASURED(steal_fails) && ok + bad >= TOP_STEAL_FAIL_MIN_ATTEMPTS &&
	    100.0 * ok / (ok + bad) < TOP_STEAL_FAIL_PCT)
		warn(m, TOP_WARN_STEAL_FAIL, r->shard, "steals mostly fail: %.1f%% of %llu probes",
		     100.0 * ok / (ok + bad), (unsigned long long)(ok + bad));
	uint64_t recv = DK(doorbells_recv), running = DK(doorbells_running);
	if (MEASURED(doorbells_running) && recv >= TOP_DB_WASTED_MIN &&
	    100.0 * running / recv >= TOP_DB_WASTED_PCT)
		warn(m, TOP_WARN_DB_WASTED, r->shard,
		     "%.0f%% of %llu doorbells found it running (wasted)", 100.0 * running / recv,
		     (unsigned long long)recv);
	if (MEASURED(cqe_overflows) && DK(cqe_overflows))
		warn(m, TOP_WARN_CQ_OVERFLOW, r->shard, "%llu CQEs overflowed the CQ ring",
		     (unsigned long long)DK(cqe_overflows));
	hist_delta(h, k->hist[CBCMN_BPF_HIST_RUNQ], kp->hist[CBCMN_BPF_HIST_RUNQ]);
	uint64_t runq_p99 = bpfmon_hist_count(h) ? bpfmon_hist_pct(h, 99) : 0;
	double invol = DK(involuntary) / dt;
	if (MEASURED(runq_waits) && runq_p99 >= TOP_STARVED_RUNQ_P99_US)
		warn(m, TOP_WARN_STARVED, r->shard, "starved of CPU: run-queue latency p99 %.1f ms",
		     runq_p99 / 1e3);
	else if (r->rt->queue_depth && invol >= TOP_STARVED_INVOL_PER_S && !isnan(on) &&
		 on < TOP_STARVED_ONCPU_PCT)
		warn(m, TOP_WARN_STARVED, r->shard,
		     "starved of CPU: %.0f preemptions/s, on-CPU %.0f%%, %llu tasks queued", invol,
		     on, (unsigned long long)r->rt->queue_depth);
}

/* The kernel's columns of row r and its warnings. */
static void row_kernel(struct top_model *m, struct top_row *r, const struct bpfmon_shard *k,
		       const struct bpfmon_shard *kp, const struct cbcmn_bpf_pair *out,
		       const struct cbcmn_bpf_pair *outp, double dt)
{
	uint64_t h[CBCMN_BPF_HIST_SLOTS];
	row_kernel_cols(r, k, kp, out, outp, dt, h);
	for (int c = 0; c < TOP_NCOLS; c++)
		if (m->unmeasured[c])
			r->v[c] = NAN; /* not measured: never a 0 */
	if (dt > 0)
		row_kernel_warn(m, r, k, kp, dt, h);
}

/* The p99 of the mailbox depths e's receives found since pe (the slot's
 * upper bound); NAN: no receive.  A slot that stepped back (another
 * runtime's segment in the same place) counts nothing. */
static double mbox_p99(const cbcmn_executor_stats *e, const cbcmn_executor_stats *pe)
{
	uint64_t h[CBCMN_MAILBOX_HIST_SLOTS];
	for (int k = 0; k < CBCMN_MAILBOX_HIST_SLOTS; k++)
		h[k] = e->mailbox_depth_hist[k] > pe->mailbox_depth_hist[k]
			       ? e->mailbox_depth_hist[k] - pe->mailbox_depth_hist[k] : 0;
	uint64_t q = cbcmn_stats_hist_quantile(h, CBCMN_MAILBOX_HIST_SLOTS, 99);
	return q ? (double)q : NAN;
}

static void update_rows(struct top_model *m)
{
	struct top_model_priv *p = m->priv;
	struct snap *s = &p->s[p->cur], *ps = &p->s[!p->cur];
	double dt = m->dt;
	m->nwarn = 0;
	m->ext_bp_per_s = rate(s->st.ext_actor_backpressure, ps->st.ext_actor_backpressure, dt);
	m->tasks_per_s = m->steals_per_s = m->stolen_per_s = 0;
	m->db_per_s = m->sqes_per_s = m->cqes_per_s = 0;
	uint64_t att = 0, ok = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		struct top_row *r = &m->rows[i];
		const cbcmn_executor_stats *e = &s->per[i], *pe = &ps->per[i];
		r->shard = i;
		r->cpu = e->cpu;
		r->state = e->state;
		if (e->tid != r->tid_own) { /* the runtime's own id: ours may differ (pidns.h) */
			r->tid_own = e->tid;
			r->tid = pidns_view_tid(m->pid, e->tid);
		}
		place(p, e->cpu, &r->node, &r->llc);
		r->rt = e;
		r->k = m->kernel ? &s->k[i] : NULL;
		memset(&r->out, 0, sizeof(r->out));
		if (m->kernel)
			r->out = s->out[i];
		r->v[TOP_COL_SHARD] = i;
		r->v[TOP_COL_CPU] = e->cpu >= 0 ? e->cpu : NAN;
		r->v[TOP_COL_NODE] = e->node >= 0 ? e->node : NAN;
		r->v[TOP_COL_STATE] = e->state;
		r->v[TOP_COL_QUEUE] = (double)e->queue_depth;
		r->v[TOP_COL_TASKS] = rate(e->tasks_run, pe->tasks_run, dt);
		r->v[TOP_COL_STEALS_IN] = rate(e->steal_successes, pe->steal_successes, dt);
		r->v[TOP_COL_STOLEN_IN] = rate(e->tasks_stolen, pe->tasks_stolen, dt);
		r->v[TOP_COL_DB_SENT] = rate(e->doorbells_sent, pe->doorbells_sent, dt);
		r->v[TOP_COL_DB_RECV] = rate(e->doorbells_recv, pe->doorbells_recv, dt);
		r->v[TOP_COL_SQES] = rate(e->sqes_submitted, pe->sqes_submitted, dt);
		r->v[TOP_COL_CQES] = rate(e->cqes_reaped, pe->cqes_reaped, dt);
		r->v[TOP_COL_BUSY] = e->busy_pct;
		r->v[TOP_COL_LOAD] = e->actor_load_milli / 1000.0;
		r->v[TOP_COL_ACTORS] = (double)e->actors;
		r->v[TOP_COL_ACT_RUN] = (double)e->actors_runnable;
		r->v[TOP_COL_MAILBOX] = (double)e->mailbox_depth;
		r->v[TOP_COL_ACT_MIGR] = rate(e->actor_migrations, pe->actor_migrations, dt);
		r->v[TOP_COL_RESTARTS] = rate(e->actor_restarts, pe->actor_restarts, dt);
		r->v[TOP_COL_BACKPR] = rate(e->actor_backpressure, pe->actor_backpressure, dt);
		r->v[TOP_COL_MBOX_P99] = mbox_p99(e, pe);
		for (int c = 0; c < TOP_NCOLS; c++)
			if (top_cols[c].kernel)
				r->v[c] = NAN;
		if (dt > 0) {
			m->tasks_per_s += r->v[TOP_COL_TASKS];
			m->steals_per_s += r->v[TOP_COL_STEALS_IN];
			m->stolen_per_s += r->v[TOP_COL_STOLEN_IN];
			m->db_per_s += r->v[TOP_COL_DB_SENT];
			m->sqes_per_s += r->v[TOP_COL_SQES];
			m->cqes_per_s += r->v[TOP_COL_CQES];
			att += delta(e->steal_attempts, pe->steal_attempts);
			ok += delta(e->steal_successes, pe->steal_successes);
		}
		if (m->kernel && i < ps->n)
			row_kernel(m, r, &s->k[i], &ps->k[i], &s->out[i], &ps->out[i], dt);
		if (dt > 0 && e->ring_msgs_backpressure > pe->ring_msgs_backpressure)
			warn(m, TOP_WARN_BACKPRESSURE, i, "ring back-pressure: %.0f/s (SQ full, CQ overflow or a full lane)",
			     rate(e->ring_msgs_backpressure, pe->ring_msgs_backpressure, dt));
		/* More executors live than the program's: the spare stands
		 * in for a stalled one (docs/SCHEDULER.md, "Stalls"). */
		if (e->stalled_task)
			warn(m, TOP_WARN_STALLED, i, "stalled by task %llu%s: one run past stall_ns "
			     "(a blocking call or a loop without checkpoints)",
			     (unsigned long long)e->stalled_task,
			     s->st.executors_live > s->st.executors ? " (the spare executor stands in)"
								    : "");
		else if (dt > 0 && e->stalls > pe->stalls)
			warn(m, TOP_WARN_STALLED, i, "%llu stalls ended in the interval",
			     (unsigned long long)(e->stalls - pe->stalls));
		if (dt > 0)
			for (int c = 0; c < TOP_NCOLS; c++)
				r->hist[c][p->hpos] = r->v[c];
	}
	m->steal_ok_pct = att ? 100.0 * ok / att : NAN;
	if (dt > 0)
		p->hpos = (p->hpos + 1) % TOP_HISTORY;
	/* The groups' steals rest on the steal pairs: not measured (NAN,
	 * "-" and null) without the steal programs, never 0. */
	if (s->g && MEASURED(steals)) {
		const struct grp_steals *g = s->g, *pg = ps->g;
		for (int i = 0; i < p->nnodes + p->nllcs; i++) {
			struct top_group *o = i < p->nnodes ? &m->nodes[i] : &m->llcs[i - p->nnodes];
			o->in_per_s = rate(g[i].in, pg[i].in, dt);
			o->out_per_s = rate(g[i].out, pg[i].out, dt);
			o->in_x_per_s = rate(g[i].in_x, pg[i].in_x, dt);
			o->out_x_per_s = rate(g[i].out_x, pg[i].out_x, dt);
		}
		m->placed_steals_per_s = rate(s->placed, ps->placed, dt);
		m->cross_node_per_s = rate(s->cross_node, ps->cross_node, dt);
		m->cross_llc_per_s = rate(s->cross_llc, ps->cross_llc, dt);
	}
	if (m->kernel) {
		/* The pairs count failed probes only with cbcmn:steal_fail
		 * attached (BPFMON_STEAL_FAIL); otherwise c.steal_fails is the
		 * runtime's count and no pair record is missing for them. */
		const struct bpfmon_prog *pr;
		bool fails_in_pairs = false;
		for (unsigned i = 0, np = bpfmon_progs(p->bpf, &pr); i < np; i++)
			fails_in_pairs |= !strcmp(pr[i].name, "cbcmn_steal_fail") &&
					  pr[i].state == BPFMON_ATTACHED;
		uint64_t probes = 0;
		for (uint32_t i = 0; i < s->n; i++)
			probes += s->k[i].c.steals + (fails_in_pairs ? s->k[i].c.steal_fails : 0);
		m->cost.dropped = probes > s->pair_probes ? probes - s->pair_probes : 0;
	}
}

double top_row_past(const struct top_model *m, const struct top_row *r, enum top_col c, unsigned i)
{
	if (i >= TOP_HISTORY)
		return NAN;
	unsigned at = (m->priv->hpos + TOP_HISTORY - 1 - i) % TOP_HISTORY;
	return r->hist[c][at];
}

/* The runtime has ended; st: its last figures. */
static void model_end(struct top_model *m, const cbcmn_stats *st)
{
	struct top_model_priv *p = m->priv;
	m->ended = true;
	m->st = *st;
	/* The figures are frozen from here: the programs, which run for
	 * every task of the host, go now, not when the viewer quits
	 * (bpfmon's own thread has done it already if the process exited). */
	bpfmon_detach(p->bpf);
	m->detached = p->bpf != NULL;
}

static void on_read(struct top_model *m, const cbcmn_stats *st, const cbcmn_executor_stats *per,
		    uint32_t n)
{
	struct top_model_priv *p = m->priv;
	if (p->on_read)
		p->on_read(m, mono_ns(), st, per, n, p->on_read_arg);
}

uint32_t top_model_steal_pairs(const struct top_model *m, const struct cbcmn_bpf_pair_key **k,
			       const struct cbcmn_bpf_pair **v)
{
	const struct top_model_priv *p = m->priv;
	bool on = m->kernel && p->pair_k;
	*k = on ? p->pair_k : NULL;
	*v = on ? p->pair_v : NULL;
	return on ? p->npairs : 0;
}

int top_model_sample(struct top_model *m)
{
	struct top_model_priv *p = m->priv;
	if (m->ended)
		return -ESRCH;
	int next = m->samples ? !p->cur : p->cur;
	struct snap *s = &p->s[next];
	cbcmn_stats st;
	bool gone;
	/* The executors may grow between the two reads: read until the
	 * arrays hold them all. */
	for (;;) {
		int rc = cbcmn_watch_read(p->w, &st, p->cap ? s->per : NULL, p->cap);
		gone = rc == -ESRCH; /* st and s->per hold the last figures */
		if (gone && m->samples) {
			/* The rows keep the figures of the last sample. */
			model_end(m, &st);
			on_read(m, &st, s->per, st.executors < p->cap ? st.executors : p->cap);
			return rc;
		}
		if (rc && !gone)
			return rc;
		if (st.executors <= p->cap)
			break;
		if ((rc = grow(m, st.executors)))
			return rc;
		s = &p->s[next];
	}
	s->t_ns = mono_ns();
	s->st = st;
	s->n = st.executors;
	m->detached = p->bpf && bpfmon_detached(p->bpf);
	if (m->kernel) {
		int rc = read_kernel(m, s, m->samples ? &p->s[p->cur] : NULL);
		if (rc)
			return rc;
	}
	m->dt = m->samples ? (s->t_ns - p->s[p->cur].t_ns) / 1e9 : 0;
	if (!m->samples) {
		/* Compare the first sample with itself: no rates yet. */
		struct snap *o = &p->s[!next];
		memcpy(o->per, s->per, s->n * sizeof(*s->per));
		if (m->kernel) {
			memcpy(o->k, s->k, s->n * sizeof(*s->k));
			memcpy(o->out, s->out, s->n * sizeof(*s->out));
		}
		if (s->g) {
			memcpy(o->g, s->g, (size_t)(p->nnodes + p->nllcs) * sizeof(*s->g));
			o->placed = s->placed;
			o->cross_node = s->cross_node;
			o->cross_llc = s->cross_llc;
		}
		o->n = s->n;
		o->t_ns = s->t_ns;
		o->st = s->st;
	}
	p->cur = next;
	m->st = st;
	m->nrows = s->n;
	m->samples++;
	update_rows(m);
	cost_read(m);
	on_read(m, &st, s->per, s->n);
	if (gone) { /* ended before the first sample: its rows are its last figures */
		model_end(m, &st);
		return -ESRCH;
	}
	return 0;
}

/* ---- open / close ------------------------------------------------------------- */

/* The group counters: one per node and LLC of the topology, in each
 * snapshot, and their rates in the model (NAN until two samples). */
static int groups_open(struct top_model *m)
{
	struct top_model_priv *p = m->priv;
	p->nnodes = cbcmn_topo_nnodes(p->topo);
	p->nllcs = cbcmn_topo_nllcs(p->topo);
	size_t ng = (size_t)(p->nnodes + p->nllcs);
	m->nodes = malloc(ng * sizeof(*m->nodes));
	if (!m->nodes)
		return -ENOMEM;
	for (size_t i = 0; i < ng; i++)
		m->nodes[i] = (struct top_group){NAN, NAN, NAN, NAN};
	m->llcs = m->nodes + p->nnodes;
	for (int i = 0; i < 2; i++)
		if (!(p->s[i].g = calloc(ng ? ng : 1, sizeof(*p->s[i].g))))
			return -ENOMEM;
	return 0;
}

static void read_comm(pid_t pid, char *buf, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	FILE *f = fopen(path, "r");
	buf[0] = 0;
	if (f) {
		if (fgets(buf, (int)len, f))
			buf[strcspn(buf, "\n")] = 0;
		fclose(f);
	}
	if (!buf[0])
		snprintf(buf, len, "?");
}

int top_model_open(struct top_model **out, pid_t pid, const struct top_model_opts *o, char *err,
		   size_t errlen)
{
	struct top_model *m = calloc(1, sizeof(*m));
	struct top_model_priv *p = calloc(1, sizeof(*p));
	int rc;
	*out = NULL;
	if (!m || !p) {
		free(m);
		free(p);
		cbcmn_watch_close(o ? o->watch : NULL); /* ours, failing or not */
		return fail(err, errlen, -ENOMEM, "out of memory");
	}
	m->priv = p;
	p->w = o ? o->watch : NULL; /* closed with the model, failing or not */
	if (o) {
		p->on_read = o->on_read;
		p->on_read_arg = o->on_read_arg;
	}
	p->stats_fd = -1;
	m->pid = pid;
	if (pid <= 0) {
		rc = fail(err, errlen, -ESRCH, "bad process id %d", (int)pid);
		goto fail;
	}
	m->runtime_index = o ? o->runtime : 0;
	rc = p->w ? 0 : cbcmn_watch_open(pid, m->runtime_index, &p->w);
	if (rc == -ENOENT && m->runtime_index)
		rc = fail(err, errlen, rc, "process %d has no live cbcmn runtime %u (-r counts from 0)",
			  (int)pid, m->runtime_index);
	else if (rc == -ENOENT)
		rc = fail(err, errlen, rc, "process %d has no cbcmn runtime", (int)pid);
	else if (rc == -ESRCH)
		rc = fail(err, errlen, rc, "no such process: %d", (int)pid);
	else if (rc == -EACCES)
		rc = fail(err, errlen, rc,
			  "process %d: not allowed to watch it (its user, or root, may)", (int)pid);
	else if (rc == -EPROTO) /* "Protocol error" told nobody what to do */
		rc = fail(err, errlen, rc,
			  "process %d: its runtime's statistics are of another layout (another "
			  "libcbcmn version): watch it with the cbcmn-top of its libcbcmn",
			  (int)pid);
	else if (rc)
		rc = fail(err, errlen, rc, "watching process %d: %s", (int)pid, cbcmn_strerror(rc));
	if (rc)
		goto fail;
	read_comm(pid, m->comm, sizeof(m->comm));
	/* Which runtime this is: the kernel figures count its probes only,
	 * by its id; and how many the process has (the header says when
	 * there is more than one). */
	cbcmn_stats st0;
	int r0 = cbcmn_watch_read(p->w, &st0, NULL, 0);
	if (!r0 || r0 == -ESRCH) /* -ESRCH: ended already, st0 its last figures */
		m->runtime_id = st0.runtime_id;
	for (cbcmn_watch *w2; !cbcmn_watch_open(pid, m->runtimes, &w2); m->runtimes++)
		cbcmn_watch_close(w2);
	char terr[256];
	if (cbcmn_topo_load(o ? o->sysfs_root : NULL, &p->topo, terr, sizeof(terr)))
		p->topo = NULL; /* nodes and LLCs unknown: shown as such */

	if (o && o->no_bpf) {
		snprintf(m->kernel_why, sizeof(m->kernel_why), "turned off (--no-bpf)");
	} else {
		rc = r0 == -ESRCH ? -ESRCH
				  : bpfmon_open_runtime(&p->bpf, pid, m->runtime_id,
							o ? o->bpf_flags : 0, m->kernel_why,
							sizeof(m->kernel_why));
		if (rc == -ESRCH) {
			/* It ended before or while the programs attached: its
			 * runtime's last figures are still ours (the watch holds
			 * them), as for a target that ends later; only without
			 * kernel ones. */
			p->bpf = NULL;
			snprintf(m->kernel_why, sizeof(m->kernel_why),
				 "the target ended while the programs were attaching");
		} else if (rc) {
			p->bpf = NULL;
		} else {
			m->kernel = true;
			const struct bpfmon_prog *pr;
			m->progs_total = bpfmon_progs(p->bpf, &pr);
			for (unsigned i = 0; i < m->progs_total; i++)
				m->progs_attached += pr[i].state == BPFMON_ATTACHED;
			measured_open(m);
		}
	}
	cost_open(m);
	m->placed_steals_per_s = m->cross_node_per_s = m->cross_llc_per_s = NAN;
	if (m->kernel && p->topo && (rc = groups_open(m))) {
		rc = fail(err, errlen, rc, "out of memory");
		goto fail;
	}
	if ((rc = grow(m, 1)) || ((rc = top_model_sample(m)) && rc != -ESRCH)) {
		rc = fail(err, errlen, rc, "reading process %d: %s", (int)pid, cbcmn_strerror(rc));
		goto fail;
	}
	*out = m;
	return 0;
fail:
	top_model_close(m);
	return rc;
}

bool top_model_measured(const struct top_model *m, size_t field)
{
	return m->kernel && bpfmon_measured(m->priv->bpf, field, NULL, 0);
}

void top_model_close(struct top_model *m)
{
	if (!m)
		return;
	struct top_model_priv *p = m->priv;
	bpfmon_close(p->bpf);
	if (p->stats_fd >= 0)
		close(p->stats_fd);
	cbcmn_watch_close(p->w);
	cbcmn_topo_free(p->topo);
	for (int i = 0; i < 2; i++) {
		free(p->s[i].per);
		free(p->s[i].k);
		free(p->s[i].out);
		free(p->s[i].g);
	}
	free(p->pair_k);
	free(p->pair_v);
	free(m->nodes);
	free(m->rows);
	free(m->warn);
	free(p);
	free(m);
}

/* ---- formatting and filters ----------------------------------------------- */

void top_fmt(enum top_col c, double v, char *buf, size_t len, int width)
{
	if (c == TOP_COL_STATE) {
		static const char *const abbrev[] = {"stop", "run", "srch", "park"};
		unsigned s = (unsigned)v;
		snprintf(buf, len, "%*s", width, width >= 9 ? top_state_name(s) : abbrev[s < 4 ? s : 0]);
		return;
	}
	if (isnan(v)) {
		snprintf(buf, len, "%*s", width, "-");
		return;
	}
	switch (c) {
	case TOP_COL_STEAL_OK:
	case TOP_COL_ONCPU:
	case TOP_COL_WAIT:
		if (v < 10 && v > 0)
			snprintf(buf, len, "%*.1f", width, v);
		else
			snprintf(buf, len, "%*.0f", width, v);
		return;
	case TOP_COL_LOAD: /* 1.00 = the wheel turns at its nominal rate */
		snprintf(buf, len, "%*.2f", width, v);
		return;
	case TOP_COL_DB_P99: /* us; from 10 ms on in ms, from 10 s on in s */
		if (v >= 1e7)
			snprintf(buf, len, "%*.0fs", width - 1, v / 1e6);
		else if (v >= 1e4)
			snprintf(buf, len, "%*.0fms", width - 2, v / 1e3);
		else
			snprintf(buf, len, "%*.0f", width, v);
		return;
	default:
		break;
	}
	if (v >= 1e9)
		snprintf(buf, len, "%*.0fG", width - 1, v / 1e9);
	else if (v >= 1e6 && (v >= 1e7 || width < 7))
		snprintf(buf, len, "%*.*fM", width - 1, v < 1e7 ? 1 : 0, v / 1e6);
	else if (v >= 1e5 || (v >= 1e4 && width < 6))
		snprintf(buf, len, "%*.0fk", width - 1, v / 1e3);
	else
		snprintf(buf, len, "%*.0f", width, v);
}

bool top_row_matches(const struct top_row *r, const char *filter)
{
	if (!filter || !*filter)
		return true;
	char key[96];
	snprintf(key, sizeof(key), "shard=%u cpu=%d node=%d %s", r->shard, r->cpu,
		 (int)(isnan(r->v[TOP_COL_NODE]) ? -1 : r->v[TOP_COL_NODE]), top_state_name(r->state));
	/* A bare number matches a field's value, not the key's labels. */
	if (strspn(filter, "0123456789") == strlen(filter)) {
		char num[16];
		snprintf(num, sizeof(num), "%u", r->shard);
		if (strstr(num, filter))
			return true;
		snprintf(num, sizeof(num), "%d", r->cpu);
		if (r->cpu >= 0 && strstr(num, filter))
			return true;
		snprintf(num, sizeof(num), "%d", (int)r->v[TOP_COL_NODE]);
		return !isnan(r->v[TOP_COL_NODE]) && strstr(num, filter);
	}
	return strstr(key, filter) != NULL;
}

/* ---- topology ------------------------------------------------------------------ */

int top_model_nnodes(const struct top_model *m)
{
	return m->priv->topo ? cbcmn_topo_nnodes(m->priv->topo) : -1;
}

int top_model_node_id(const struct top_model *m, int node)
{
	return m->priv->topo ? cbcmn_topo_node_id(m->priv->topo, node) : -1;
}

int top_model_nllcs(const struct top_model *m)
{
	return m->priv->topo ? cbcmn_topo_nllcs(m->priv->topo) : -1;
}

int top_model_llc_node(const struct top_model *m, int llc)
{
	const cbcmn_topo *t = m->priv->topo;
	for (int i = 0; t && i < cbcmn_topo_ncpus(t); i++)
		if (cbcmn_topo_cpu(t, i)->llc == llc)
			return cbcmn_topo_cpu(t, i)->node;
	return -1;
}

void top_model_llc_cpus(const struct top_model *m, int llc, char *buf, size_t len)
{
	const cbcmn_topo *t = m->priv->topo;
	size_t at = 0;
	int start = -1, last = -2;
	buf[0] = 0;
	for (int i = 0; t && i <= cbcmn_topo_ncpus(t); i++) {
		int cpu = i < cbcmn_topo_ncpus(t) && cbcmn_topo_cpu(t, i)->llc == llc
				  ? cbcmn_topo_cpu(t, i)->cpu
				  : -1;
		if (cpu >= 0 && cpu == last + 1) {
			last = cpu;
			continue;
		}
		if (start >= 0 && at < len)
			at += (size_t)snprintf(buf + at, len - at, start == last ? "%s%d" : "%s%d-%d",
					       at ? "," : "", start, last);
		start = last = cpu;
	}
}
