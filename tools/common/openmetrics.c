/* openmetrics.c: runtime statistics as OpenMetrics text (openmetrics.h). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>

#include "common/openmetrics.h"

enum om_type { OM_COUNTER, OM_GAUGE };

/* How a per-executor figure is shown: as it is, ns as seconds, a percent
 * as a share. */
enum om_scale { OM_AS_IS, OM_NS, OM_PCT };

/* The per-executor figures: family name (without cbcmn_ and _total),
 * type, where in cbcmn_executor_stats, its width, scale, help. */
#define U64(f) offsetof(cbcmn_executor_stats, f), 8
#define U32(f) offsetof(cbcmn_executor_stats, f), 4
static const struct om_exec_metric {
	const char *name;
	enum om_type type;
	size_t off, width;
	enum om_scale scale;
	const char *help;
} exec_metrics[] = {
	{"tasks_run", OM_COUNTER, U64(tasks_run), OM_AS_IS, "Tasks started on the executor, inline runs included"},
	{"local_hits", OM_COUNTER, U64(local_hits), OM_AS_IS, "Picks from the executor's own queues"},
	{"inject_hits", OM_COUNTER, U64(inject_hits), OM_AS_IS, "Picks from the runtime's inject queue"},
	{"steal_attempts", OM_COUNTER, U64(steal_attempts), OM_AS_IS, "Victims probed for work"},
	{"steals", OM_COUNTER, U64(steal_successes), OM_AS_IS, "Probes that took at least one task"},
	{"tasks_stolen", OM_COUNTER, U64(tasks_stolen), OM_AS_IS, "Tasks taken from victims"},
	{"inline_runs", OM_COUNTER, U64(inline_runs), OM_AS_IS, "Children run on their awaiter's stack"},
	{"parks", OM_COUNTER, U64(parks), OM_AS_IS, "Times the executor went to sleep"},
	{"wakes", OM_COUNTER, U64(wakes), OM_AS_IS, "Times the executor was woken by a notification"},
	{"spawns", OM_COUNTER, U64(spawns), OM_AS_IS, "Tasks spawned from the executor"},
	{"steals_gated", OM_COUNTER, U64(steals_gated), OM_AS_IS, "Steals the cost gate refused"},
	{"doorbells_sent", OM_COUNTER, U64(doorbells_sent), OM_AS_IS, "Doorbells the executor rang"},
	{"doorbells_received", OM_COUNTER, U64(doorbells_recv), OM_AS_IS, "Doorbell completions reaped on its ring"},
	{"doorbells_coalesced", OM_COUNTER, U64(doorbells_coalesced), OM_AS_IS, "Wakes that needed no doorbell"},
	{"ring_msgs_submitted", OM_COUNTER, U64(ring_msgs_submitted), OM_AS_IS, "MSG_RING SQEs submitted"},
	{"ring_msgs_backpressure", OM_COUNTER, U64(ring_msgs_backpressure), OM_AS_IS, "SQ full, CQ overflow or a full lane"},
	{"sqes_submitted", OM_COUNTER, U64(sqes_submitted), OM_AS_IS, "Submission queue entries submitted"},
	{"cqes_reaped", OM_COUNTER, U64(cqes_reaped), OM_AS_IS, "Completion queue entries reaped"},
	{"ring_enters", OM_COUNTER, U64(ring_enters), OM_AS_IS, "io_uring_enter (or epoll_wait) calls"},
	{"xmsgs_sent", OM_COUNTER, U64(xmsgs_sent), OM_AS_IS, "Messages to other executors"},
	{"xmsgs_received", OM_COUNTER, U64(xmsgs_recv), OM_AS_IS, "Messages from other executors"},
	{"xmsgs_acked", OM_COUNTER, U64(xmsgs_acked), OM_AS_IS, "The executor's messages acknowledged"},
	{"handoffs", OM_COUNTER, U64(handoffs), OM_AS_IS, "Tasks it woke that went home to another executor"},
	{"io_ops", OM_COUNTER, U64(io_ops), OM_AS_IS, "Fiber I/O calls submitted"},
	{"accept_errors", OM_COUNTER, U64(accept_errors), OM_AS_IS, "Accepts that failed for a passing cause and were retried"},
	{"queue_depth", OM_GAUGE, U64(queue_depth), OM_AS_IS, "Run queue length, sampled"},
	{"task_avg_seconds", OM_GAUGE, U64(avg_task_ns), OM_NS, "Mean time per scheduler pick (load statistic)"},
	{"busy_ratio", OM_GAUGE, U32(busy_pct), OM_PCT, "Share of recent time spent running tasks"},
	{"actor_load_milli", OM_GAUGE, U64(actor_load_milli), OM_AS_IS, "Actor wheel load, 1 / wheel turn rate: 1000 = nominal"},
};
#undef U64
#undef U32
#define NEXEC_METRICS (sizeof(exec_metrics) / sizeof(exec_metrics[0]))

static const char *const state_names[] = {"stopped", "running", "searching", "parked"};
#define NSTATES (sizeof(state_names) / sizeof(state_names[0]))

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# TYPE cbcmn_%s %s\n# HELP cbcmn_%s %s\n", name, type, name, help);
}

static uint64_t exec_raw(const struct om_exec_metric *m, const cbcmn_executor_stats *e)
{
	const char *p = (const char *)e + m->off;
	return m->width == 8 ? *(const uint64_t *)p : *(const uint32_t *)p;
}

/* A runtime-wide figure: one sample per runtime. */
static void rt_metric(FILE *f, const struct om_runtime *rts, size_t n, const char *name,
		      enum om_type type, const char *help, size_t off, int is_u32)
{
	family(f, name, type == OM_COUNTER ? "counter" : "gauge", help);
	for (size_t r = 0; r < n; r++) {
		const char *p = (const char *)rts[r].s + off;
		uint64_t v = is_u32 ? *(const uint32_t *)p : *(const uint64_t *)p;
		fprintf(f, "cbcmn_%s%s{runtime=\"%u\"} %llu\n", name, type == OM_COUNTER ? "_total" : "",
			rts[r].s->runtime_id, (unsigned long long)v);
	}
}

int om_write(FILE *f, const struct om_runtime *rts, size_t n)
{
#define RT(name, type, field, help)                                                         \
	rt_metric(f, rts, n, name, type, help, offsetof(cbcmn_stats, field),                 \
		  sizeof(((cbcmn_stats *)0)->field) == 4)
	RT("executors", OM_GAUGE, executors, "Executors of the runtime");
	RT("executors_live", OM_GAUGE, executors_live, "Executors with a thread now");
	RT("tasks_spawned", OM_COUNTER, tasks_spawned, "Tasks spawned since the runtime started");
	RT("tasks_completed", OM_COUNTER, tasks_completed, "Tasks ended since the runtime started");
	RT("tasks_live", OM_GAUGE, tasks_live, "Tasks spawned and not yet ended");
	RT("external_doorbells", OM_COUNTER, ext_doorbells, "Doorbells rung by threads outside the runtime");
	RT("executor_starts", OM_COUNTER, executor_starts, "Executors started after the runtime");
	RT("executor_retires", OM_COUNTER, executor_retires, "Executors that ended for being idle");
#undef RT
	family(f, "uptime_seconds", "gauge", "Time since the runtime was created");
	for (size_t r = 0; r < n; r++)
		fprintf(f, "cbcmn_uptime_seconds{runtime=\"%u\"} %.9f\n", rts[r].s->runtime_id,
			(double)rts[r].s->uptime_ns / 1e9);
	/* Info: what the runtime is, as labels of a sample worth 1. */
	fprintf(f, "# TYPE cbcmn_runtime info\n# HELP cbcmn_runtime The runtime's process, "
		   "I/O backend and placement policy\n");
	for (size_t r = 0; r < n; r++) {
		const cbcmn_stats *s = rts[r].s;
		fprintf(f, "cbcmn_runtime_info{runtime=\"%u\",pid=\"%d\",backend=\"%s\",policy=\"%s\","
			   "msg_ring=\"%d\",oversubscribed=\"%d\"} 1\n",
			s->runtime_id, (int)s->pid, cbcmn_backend_name(s->backend),
			s->policy >= 0 ? cbcmn_policy_name((cbcmn_policy)s->policy) : "none",
			(int)s->msg_ring, (int)s->oversubscribed);
	}

	for (size_t k = 0; k < NEXEC_METRICS; k++) {
		const struct om_exec_metric *m = &exec_metrics[k];
		family(f, m->name, m->type == OM_COUNTER ? "counter" : "gauge", m->help);
		for (size_t r = 0; r < n; r++)
			for (uint32_t i = 0; i < rts[r].nper; i++) {
				fprintf(f, "cbcmn_%s%s{runtime=\"%u\",executor=\"%u\"} ", m->name,
					m->type == OM_COUNTER ? "_total" : "", rts[r].s->runtime_id, i);
				/* Integers as integers: a double would round
				 * counters past 2^53. */
				uint64_t v = exec_raw(m, &rts[r].per[i]);
				if (m->scale == OM_AS_IS)
					fprintf(f, "%llu\n", (unsigned long long)v);
				else
					fprintf(f, "%.9g\n", (double)v / (m->scale == OM_NS ? 1e9 : 100.0));
			}
	}
	/* A state set: one sample per state, 1 for the one the executor is in. */
	fprintf(f, "# TYPE cbcmn_executor_state stateset\n# HELP cbcmn_executor_state What the "
		   "executor is doing\n");
	for (size_t r = 0; r < n; r++)
		for (uint32_t i = 0; i < rts[r].nper; i++)
			for (uint32_t st = 0; st < NSTATES; st++)
				fprintf(f, "cbcmn_executor_state{runtime=\"%u\",executor=\"%u\","
					   "cbcmn_executor_state=\"%s\"} %d\n",
					rts[r].s->runtime_id, i, state_names[st], rts[r].per[i].state == st);
	fprintf(f, "# TYPE cbcmn_executor info\n# HELP cbcmn_executor Where the executor is "
		   "pinned (-1: not)\n");
	for (size_t r = 0; r < n; r++)
		for (uint32_t i = 0; i < rts[r].nper; i++)
			fprintf(f, "cbcmn_executor_info{runtime=\"%u\",executor=\"%u\",cpu=\"%d\","
				   "node=\"%d\"} 1\n",
				rts[r].s->runtime_id, i, (int)rts[r].per[i].cpu, (int)rts[r].per[i].node);
	fprintf(f, "# EOF\n");
	return fflush(f) || ferror(f) ? -EIO : 0;
}
