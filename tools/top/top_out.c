/* top_out.c: cbcmn-top's header lines, batch text and JSON (top_out.h). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util/json.h"
#include "top/top_out.h"

static void fmt_uptime(uint64_t ns, char *buf, size_t len)
{
	uint64_t s = ns / 1000000000ull;
	if (s < 3600)
		snprintf(buf, len, "%llu:%02llu", (unsigned long long)(s / 60),
			 (unsigned long long)(s % 60));
	else
		snprintf(buf, len, "%lluh%02llu:%02llu", (unsigned long long)(s / 3600),
			 (unsigned long long)(s / 60 % 60), (unsigned long long)(s % 60));
}

/* A rate for the header: "-" before there is one. */
static void fmt_rate(double v, char *buf, size_t len)
{
	char t[16];
	top_fmt(TOP_COL_TASKS, v, t, sizeof(t), 1);
	snprintf(buf, len, "%s", t);
}

void top_header_line(const struct top_model *m, int line, char *buf, size_t len)
{
	char a[16], b[32], c[16], d[16], e[16], ok[16] = "-";
	switch (line) {
	case 0:
		fmt_uptime(m->st.uptime_ns, a, sizeof(a));
		/* The runtime watched, when the process has more than one:
		 * "runtime 2/3" is the third oldest of three (-r 2). */
		if (m->runtimes > 1)
			snprintf(b, sizeof(b), "  runtime %u/%u", m->runtime_index, m->runtimes);
		else
			b[0] = 0;
		snprintf(buf, len, "%s[%d]%s  executors %u/%u  policy %s  backend: %s  up %s%s", m->comm,
			 (int)m->pid, b, m->st.executors_live, m->st.executors,
			 top_policy_name(m->st.policy), cbcmn_backend_name(m->st.backend), a,
			 m->ended ? "  [runtime ended]" : "");
		break;
	case 1:
		fmt_rate(m->tasks_per_s, a, sizeof(a));
		fmt_rate(m->steals_per_s, b, sizeof(b));
		fmt_rate(m->db_per_s, c, sizeof(c));
		fmt_rate(m->sqes_per_s, d, sizeof(d));
		fmt_rate(m->cqes_per_s, e, sizeof(e));
		if (!isnan(m->steal_ok_pct))
			snprintf(ok, sizeof(ok), "%.0f", m->steal_ok_pct);
		snprintf(buf, len,
			 "tasks %s/s  steals %s/s (%s%% ok)  doorbells %s/s  SQE %s/s  CQE %s/s  live %llu  done %llu",
			 a, b, ok, c, d, e, (unsigned long long)m->st.tasks_live,
			 (unsigned long long)m->st.tasks_completed);
		break;
	case 2:
		if (m->kernel) {
			/* Columns whose programs did not attach: named here,
			 * "-" in the table (why: batch text and JSON). */
			char nm[128] = "";
			size_t at = 0;
			for (int k = 0; k < TOP_NCOLS && at < sizeof(nm); k++)
				if (m->unmeasured[k])
					at += (size_t)snprintf(nm + at, sizeof(nm) - at, " %s", top_cols[k].head);
			snprintf(buf, len, "kernel figures: on, %u of %u BPF programs %s%s%s",
				 m->progs_attached, m->progs_total,
				 m->detached ? "detached (the target ended)" : "attached",
				 nm[0] ? "  not measured:" : "", nm);
		}
		else
			snprintf(buf, len, "kernel figures off: %s", m->kernel_why);
		break;
	default:
		if (!m->cost.on)
			snprintf(buf, len, "own cost: n/a (%s)", m->cost.why);
		else if (isnan(m->cost.runs_per_s))
			snprintf(buf, len, "own cost: %u BPF programs, measuring", m->cost.progs);
		else
			snprintf(buf, len,
				 "own cost: %u BPF programs, %.0f runs/s, %.2f ms CPU/s (%.2f of it uprobe traps, est.), %llu dropped",
				 m->cost.progs, m->cost.runs_per_s, m->cost.ns_per_s / 1e6,
				 m->cost.trap_ns_per_s / 1e6, (unsigned long long)m->cost.dropped);
		break;
	}
}

/* Batch text spells the state out. */
static int text_width(int c)
{
	return c == TOP_COL_STATE ? 9 : top_cols[c].width;
}

int top_print_text(FILE *f, const struct top_model *m)
{
	char line[512], cell[32];
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	strftime(cell, sizeof(cell), "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(f, "cbcmn-top %s\n", cell);
	for (int i = 0; i < TOP_HEADER_LINES; i++) {
		top_header_line(m, i, line, sizeof(line));
		fprintf(f, "%s\n", line);
	}
	for (int c = 0; c < TOP_NCOLS; c++)
		fprintf(f, "%s%*s", c ? " " : "", text_width(c), top_cols[c].head);
	fputc('\n', f);
	for (uint32_t i = 0; i < m->nrows; i++) {
		for (int c = 0; c < TOP_NCOLS; c++) {
			top_fmt(c, m->rows[i].v[c], cell, sizeof(cell), text_width(c));
			fprintf(f, "%s%s", c ? " " : "", cell);
		}
		fputc('\n', f);
	}
	fprintf(f, "warnings: %u\n", m->nwarn);
	for (unsigned i = 0; i < m->nwarn; i++)
		fprintf(f, "  shard %u: %s\n", m->warn[i].shard, m->warn[i].text);
	for (int c = 0; c < TOP_NCOLS; c++)
		if (m->unmeasured[c])
			fprintf(f, "  not measured: %s: %s\n", top_cols[c].head, m->unmeasured_why[c]);
	fputc('\n', f);
	return fflush(f) || ferror(f) ? -EIO : 0;
}

/* jw_double writes a non-finite value as null: the writer's null. */
static void jw_null(struct jw *j, const char *key)
{
	jw_double(j, key, NAN);
}

/* A kernel counter: null when its programs did not attach, never 0. */
#define JK(key, field, v)                                                                  \
	do {                                                                               \
		if (top_model_measured(m, offsetof(struct cbcmn_bpf_shard, field)))        \
			jw_u64(j, key, v);                                                 \
		else                                                                       \
			jw_null(j, key);                                                   \
	} while (0)

static void json_kernel(struct jw *j, const struct top_model *m, const struct top_row *r)
{
	const struct cbcmn_bpf_shard *c = &r->k->c;
	jw_obj(j, "bpf");
	for (int k = 0; k < TOP_NCOLS; k++)
		if (top_cols[k].kernel)
			jw_double(j, top_cols[k].key, r->v[k]);
	JK("steals", steals, c->steals);
	JK("tasks_stolen", tasks_stolen, c->tasks_stolen);
	JK("steal_fails", steal_fails, c->steal_fails);
	JK("steals_out", steals, r->out.steals);
	JK("tasks_out", tasks_stolen, r->out.tasks);
	JK("doorbells_recv", doorbells_recv, c->doorbells_recv);
	JK("doorbells_running", doorbells_running, c->doorbells_running);
	JK("doorbell_lat", doorbell_lat, c->doorbell_lat);
	JK("futex_wait_ns", futex_wait_ns, c->futex_wait_ns);
	JK("lock_wait_ns", lock_wait_ns, c->lock_wait_ns);
	JK("oncpu_ns", oncpu_ns, bpfmon_oncpu_ns(r->k));
	JK("offcpu_ns", offcpu_ns, bpfmon_offcpu_ns(r->k));
	jw_u64(j, "read_ns", r->k->read_ns); /* CLOCK_MONOTONIC of the two above */
	jw_bool(j, "partial", r->k->partial); /* the two above are short */
	JK("involuntary", involuntary, c->involuntary);
	JK("cqe_overflows", cqe_overflows, c->cqe_overflows);
	JK("sqes", sqes, c->sqes);
	JK("cqes", cqes, c->cqes);
	JK("runq_p99_us", runq_waits, bpfmon_hist_pct(r->k->hist[CBCMN_BPF_HIST_RUNQ], 99));
	JK("steal_p99_us", steal_lat, bpfmon_hist_pct(r->k->hist[CBCMN_BPF_HIST_STEAL], 99));
	JK("actor_migrations", actor_migrations, c->actor_migrations);
	JK("actor_restarts", actor_restarts, c->actor_restarts);
	JK("actor_backpressure", actor_backpressure, c->actor_backpressure);
	jw_close(j);
}
#undef JK

static void json_shard(struct jw *j, const struct top_model *m, const struct top_row *r)
{
	const cbcmn_executor_stats *e = r->rt;
	jw_obj(j, NULL);
	jw_u64(j, "shard", r->shard);
	jw_i64(j, "cpu", r->cpu);
	jw_i64(j, "node", e->node);
	jw_i64(j, "llc", r->llc);
	jw_i64(j, "tid", r->tid);
	jw_str(j, "state", top_state_name(r->state));
	for (int k = 0; k < TOP_NCOLS; k++)
		if (!top_cols[k].kernel && k != TOP_COL_SHARD && k != TOP_COL_CPU &&
		    k != TOP_COL_NODE && k != TOP_COL_STATE)
			jw_double(j, top_cols[k].key, r->v[k]);
	jw_u64(j, "tasks_run", e->tasks_run);
	jw_u64(j, "steal_attempts", e->steal_attempts);
	jw_u64(j, "steal_successes", e->steal_successes);
	jw_u64(j, "tasks_stolen", e->tasks_stolen);
	jw_u64(j, "doorbells_sent", e->doorbells_sent);
	jw_u64(j, "doorbells_recv", e->doorbells_recv);
	jw_u64(j, "sqes_submitted", e->sqes_submitted);
	jw_u64(j, "cqes_reaped", e->cqes_reaped);
	jw_u64(j, "ring_msgs_backpressure", e->ring_msgs_backpressure);
	jw_u64(j, "actor_migrations", e->actor_migrations);
	jw_u64(j, "actor_restarts", e->actor_restarts);
	jw_u64(j, "actor_backpressure", e->actor_backpressure);
	if (r->k)
		json_kernel(j, m, r);
	else
		jw_null(j, "bpf");
	jw_close(j);
}

int top_print_json(FILE *f, const struct top_model *m)
{
	struct jw j;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	jw_begin(&j, f);
	jw_obj(&j, NULL);
	jw_double(&j, "time", ts.tv_sec + ts.tv_nsec / 1e9);
	jw_i64(&j, "pid", m->pid);
	jw_str(&j, "comm", m->comm);
	jw_u64(&j, "runtime", m->runtime_index);
	jw_u64(&j, "runtime_id", m->runtime_id);
	jw_u64(&j, "runtimes", m->runtimes);
	jw_bool(&j, "ended", m->ended);
	jw_u64(&j, "uptime_ns", m->st.uptime_ns);
	jw_double(&j, "interval_s", m->dt);
	jw_u64(&j, "executors", m->st.executors);
	jw_u64(&j, "executors_live", m->st.executors_live);
	jw_str(&j, "policy", top_policy_name(m->st.policy));
	jw_u64(&j, "tasks_spawned", m->st.tasks_spawned);
	jw_u64(&j, "tasks_completed", m->st.tasks_completed);
	jw_u64(&j, "tasks_live", m->st.tasks_live);
	jw_double(&j, "tasks_per_s", m->tasks_per_s);
	jw_double(&j, "steals_per_s", m->steals_per_s);
	jw_double(&j, "tasks_stolen_per_s", m->stolen_per_s);
	jw_double(&j, "steal_ok_pct", m->steal_ok_pct);
	jw_double(&j, "doorbells_per_s", m->db_per_s);
	jw_double(&j, "sqes_per_s", m->sqes_per_s);
	jw_double(&j, "cqes_per_s", m->cqes_per_s);
	if (m->kernel) {
		jw_obj(&j, "bpf");
		jw_u64(&j, "programs_attached", m->progs_attached);
		jw_u64(&j, "programs", m->progs_total);
		jw_bool(&j, "detached", m->detached);
		jw_arr(&j, "not_measured");
		for (int c = 0; c < TOP_NCOLS; c++)
			if (m->unmeasured[c]) {
				jw_obj(&j, NULL);
				jw_str(&j, "column", top_cols[c].head);
				jw_str(&j, "key", top_cols[c].key);
				jw_str(&j, "why", m->unmeasured_why[c]);
				jw_close(&j);
			}
		jw_close(&j);
		jw_close(&j);
	} else {
		jw_null(&j, "bpf");
		jw_str(&j, "bpf_off", m->kernel_why);
	}
	if (m->cost.on) {
		jw_obj(&j, "cost");
		jw_u64(&j, "bpf_programs", m->cost.progs);
		jw_double(&j, "bpf_runs_per_s", m->cost.runs_per_s);
		jw_double(&j, "bpf_ns_per_s", m->cost.ns_per_s);
		jw_double(&j, "uprobe_trap_ns_per_s", m->cost.trap_ns_per_s);
		jw_u64(&j, "bpf_runs", m->cost.runs);
		jw_u64(&j, "bpf_run_ns", m->cost.run_ns);
		jw_u64(&j, "dropped", m->cost.dropped);
		jw_close(&j);
	} else {
		jw_null(&j, "cost");
		jw_str(&j, "cost_off", m->cost.why);
	}
	jw_double(&j, "placed_steals_per_s", m->placed_steals_per_s);
	jw_double(&j, "cross_llc_steals_per_s", m->cross_llc_per_s);
	jw_double(&j, "cross_node_steals_per_s", m->cross_node_per_s);
	jw_arr(&j, "shards");
	for (uint32_t i = 0; i < m->nrows; i++)
		json_shard(&j, m, &m->rows[i]);
	jw_close(&j);
	jw_arr(&j, "warnings");
	for (unsigned i = 0; i < m->nwarn; i++) {
		jw_obj(&j, NULL);
		jw_str(&j, "kind", top_warn_name(m->warn[i].kind));
		jw_u64(&j, "shard", m->warn[i].shard);
		jw_str(&j, "text", m->warn[i].text);
		jw_close(&j);
	}
	jw_close(&j);
	return jw_end(&j);
}
