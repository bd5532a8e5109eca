/* metrics_format.c: runtime statistics as Prometheus text, 0.0.4 or
 * OpenMetrics 1.0 (cbcmn_metrics.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cbcmn.h"
#include "cbcmn_metrics.h"

/* Text going into the caller's buffer, snprintf()-style: len counts the
 * whole text, what does not fit is dropped, buf stays NUL-terminated. */
struct out {
	char *buf;
	size_t cap, len;
	bool om; /* OpenMetrics, else Prometheus 0.0.4 */
};

__attribute__((format(printf, 2, 3))) static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t room = o->len < o->cap ? o->cap - o->len : 0;
	int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0) /* the formats here cannot fail: n < 0 never happens */
		o->len += (size_t)n;
}

enum fam_type { F_COUNTER, F_GAUGE, F_INFO, F_STATESET };

/* A family's # TYPE and # HELP.  OpenMetrics names the family (a counter's
 * samples add _total, an info's _info); 0.0.4 has no family apart from its
 * samples' name, and knows only counter and gauge among these types. */
static void family(struct out *o, const char *name, enum fam_type t, const char *help)
{
	static const char *const om_types[] = {"counter", "gauge", "info", "stateset"};
	static const char *const suffix[] = {"_total", "", "_info", ""};
	if (o->om)
		put(o, "# TYPE cbcmn_%s %s\n# HELP cbcmn_%s %s\n", name, om_types[t], name, help);
	else
		put(o, "# TYPE cbcmn_%s%s %s\n# HELP cbcmn_%s%s %s\n", name, suffix[t],
		    t == F_COUNTER ? "counter" : "gauge", name, suffix[t], help);
}

/* How a per-executor figure is shown: as it is, ns as seconds, a percent
 * as a share. */
enum scale { AS_IS, NS, PCT };

/* The per-executor figures: family name (without cbcmn_ and _total),
 * type, where in cbcmn_executor_stats, its width, scale, help. */
#define U64(f) offsetof(cbcmn_executor_stats, f), 8
#define U32(f) offsetof(cbcmn_executor_stats, f), 4
static const struct exec_metric {
	const char *name;
	enum fam_type type;
	size_t off, width;
	enum scale scale;
	const char *help;
} exec_metrics[] = {
	{"tasks_run", F_COUNTER, U64(tasks_run), AS_IS, "Tasks started on the executor, inline runs included"},
	{"local_hits", F_COUNTER, U64(local_hits), AS_IS, "Picks from the executor's own queues"},
	{"inject_hits", F_COUNTER, U64(inject_hits), AS_IS, "Picks from the runtime's inject queue"},
	{"steal_attempts", F_COUNTER, U64(steal_attempts), AS_IS, "Victims probed for work"},
	{"steals", F_COUNTER, U64(steal_successes), AS_IS, "Probes that took at least one task"},
	{"tasks_stolen", F_COUNTER, U64(tasks_stolen), AS_IS, "Tasks taken from victims"},
	{"inline_runs", F_COUNTER, U64(inline_runs), AS_IS, "Children run on their awaiter's stack"},
	{"parks", F_COUNTER, U64(parks), AS_IS, "Times the executor went to sleep"},
	{"wakes", F_COUNTER, U64(wakes), AS_IS, "Times the executor was woken by a notification"},
	{"spawns", F_COUNTER, U64(spawns), AS_IS, "Tasks spawned from the executor"},
	{"steals_gated", F_COUNTER, U64(steals_gated), AS_IS, "Steals the cost gate refused"},
	{"doorbells_sent", F_COUNTER, U64(doorbells_sent), AS_IS, "Doorbells the executor rang"},
	{"doorbells_received", F_COUNTER, U64(doorbells_recv), AS_IS, "Doorbell completions reaped on its ring"},
	{"doorbells_coalesced", F_COUNTER, U64(doorbells_coalesced), AS_IS, "Wakes that needed no doorbell"},
	{"ring_msgs_submitted", F_COUNTER, U64(ring_msgs_submitted), AS_IS, "MSG_RING SQEs submitted"},
	{"ring_msgs_backpressure", F_COUNTER, U64(ring_msgs_backpressure), AS_IS, "SQ full, CQ overflow or a full lane"},
	{"sqes_submitted", F_COUNTER, U64(sqes_submitted), AS_IS, "Submission queue entries submitted"},
	{"cqes_reaped", F_COUNTER, U64(cqes_reaped), AS_IS, "Completion queue entries reaped"},
	{"ring_enters", F_COUNTER, U64(ring_enters), AS_IS, "io_uring_enter (or epoll_wait) calls"},
	{"xmsgs_sent", F_COUNTER, U64(xmsgs_sent), AS_IS, "Messages to other executors"},
	{"xmsgs_received", F_COUNTER, U64(xmsgs_recv), AS_IS, "Messages from other executors"},
	{"xmsgs_acked", F_COUNTER, U64(xmsgs_acked), AS_IS, "The executor's messages acknowledged"},
	{"handoffs", F_COUNTER, U64(handoffs), AS_IS, "Tasks it woke that went home to another executor"},
	{"io_ops", F_COUNTER, U64(io_ops), AS_IS, "Fiber I/O calls submitted"},
	{"accept_errors", F_COUNTER, U64(accept_errors), AS_IS, "Accepts that failed for a passing cause and were retried"},
	{"queue_depth", F_GAUGE, U64(queue_depth), AS_IS, "Run queue length, sampled"},
	{"task_avg_seconds", F_GAUGE, U64(avg_task_ns), NS, "Mean time per scheduler pick (load statistic)"},
	{"busy_ratio", F_GAUGE, U32(busy_pct), PCT, "Share of recent time spent running tasks"},
	{"stalls", F_COUNTER, U64(stalls), AS_IS, "Runs that held the executor longer than stall_ns"},
	{"actor_load_milli", F_GAUGE, U64(actor_load_milli), AS_IS, "Actor wheel load, 1 / wheel turn rate: 1000 = nominal"},
	{"actor_migrations", F_COUNTER, U64(actor_migrations), AS_IS, "Actors handed over to a less loaded executor"},
	{"actors", F_GAUGE, U64(actors), AS_IS, "Live actors homed on the executor"},
	{"actors_receiving", F_GAUGE, U64(actors_receiving), AS_IS, "Waiting actors blocked in a receive"},
	{"actor_mailbox_messages", F_GAUGE, U64(mailbox_depth), AS_IS, "Messages waiting in its actors' mailboxes"},
	{"actor_restarts", F_COUNTER, U64(actor_restarts), AS_IS, "Restarts by the supervisors that ran on the executor, one per crash"},
	{"actor_backpressure", F_COUNTER, U64(actor_backpressure), AS_IS, "Sends from the executor a full mailbox held or refused"},
	{"actor_mailbox_depth_p99", F_GAUGE, U64(mailbox_depth_p99), AS_IS, "99th percentile of the mailbox depth its receives found since start, as a power of two minus one"},
};
#undef U64
#undef U32
#define NEXEC_METRICS (sizeof(exec_metrics) / sizeof(exec_metrics[0]))

static const char *const state_names[] = {"stopped", "running", "searching", "parked"};
#define NSTATES (sizeof(state_names) / sizeof(state_names[0]))

/* The actors homed on an executor by what they are doing: the states
 * partition the live ones but for those caught between two (the gauges
 * are read one by one), so a sum over state is about cbcmn_actors. */
static const struct actor_state {
	const char *name;
	size_t off;
} actor_states[] = {
	{"runnable", offsetof(cbcmn_executor_stats, actors_runnable)},
	{"running", offsetof(cbcmn_executor_stats, actors_running)},
	{"waiting", offsetof(cbcmn_executor_stats, actors_waiting)},
	{"halting", offsetof(cbcmn_executor_stats, actors_halting)},
};
#define NACTOR_STATES (sizeof(actor_states) / sizeof(actor_states[0]))

static uint64_t exec_raw(const struct exec_metric *m, const cbcmn_executor_stats *e)
{
	const char *p = (const char *)e + m->off;
	return m->width == 8 ? *(const uint64_t *)p : *(const uint32_t *)p;
}

/* A runtime-wide figure: one sample per runtime. */
static void rt_metric(struct out *o, const cbcmn_metrics_source *src, size_t n, const char *name,
		      enum fam_type type, const char *help, size_t off, bool is_u32)
{
	family(o, name, type, help);
	for (size_t r = 0; r < n; r++) {
		const char *p = (const char *)src[r].stats + off;
		uint64_t v = is_u32 ? *(const uint32_t *)p : *(const uint64_t *)p;
		put(o, "cbcmn_%s%s{runtime=\"%u\"} %llu\n", name, type == F_COUNTER ? "_total" : "",
		    src[r].stats->runtime_id, (unsigned long long)v);
	}
}

static bool sources_ok(const cbcmn_metrics_source *src, size_t n)
{
	if (n && !src)
		return false;
	for (size_t r = 0; r < n; r++)
		if (!src[r].stats || (src[r].nper && !src[r].per) ||
		    src[r].nper > src[r].stats->executors)
			return false;
	return true;
}

int64_t cbcmn_metrics_format(const cbcmn_metrics_source *src, size_t n, uint32_t flags, char *buf,
			     size_t cap)
{
	if (!sources_ok(src, n) || (cap && !buf) || (flags & ~CBCMN_METRICS_OPENMETRICS))
		return -EINVAL;
	struct out o = {buf, cap, 0, flags & CBCMN_METRICS_OPENMETRICS};
	if (cap)
		buf[0] = 0;
#define RT(name, type, field, help)                                                         \
	rt_metric(&o, src, n, name, type, help, offsetof(cbcmn_stats, field),                \
		  sizeof(((cbcmn_stats *)0)->field) == 4)
	RT("executors", F_GAUGE, executors, "Executors of the runtime");
	RT("executors_live", F_GAUGE, executors_live, "Executors with a thread now");
	RT("tasks_spawned", F_COUNTER, tasks_spawned, "Tasks spawned since the runtime started");
	RT("tasks_completed", F_COUNTER, tasks_completed, "Tasks ended since the runtime started");
	RT("tasks_live", F_GAUGE, tasks_live, "Tasks spawned and not yet ended");
	RT("external_doorbells", F_COUNTER, ext_doorbells, "Doorbells rung by threads outside the runtime");
	RT("executor_starts", F_COUNTER, executor_starts, "Executors started after the runtime");
	RT("executor_retires", F_COUNTER, executor_retires, "Executors that ended for being idle");
	RT("external_actor_backpressure", F_COUNTER, ext_actor_backpressure, "Sends from threads outside the runtime a full mailbox held or refused");
#undef RT
	family(&o, "uptime_seconds", F_GAUGE, "Time since the runtime was created");
	for (size_t r = 0; r < n; r++)
		put(&o, "cbcmn_uptime_seconds{runtime=\"%u\"} %.9f\n", src[r].stats->runtime_id,
		    (double)src[r].stats->uptime_ns / 1e9);
	/* Info: what the runtime is, as labels of a sample worth 1. */
	family(&o, "runtime", F_INFO, "The runtime's process, I/O backend and placement policy");
	for (size_t r = 0; r < n; r++) {
		const cbcmn_stats *s = src[r].stats;
		put(&o, "cbcmn_runtime_info{runtime=\"%u\",pid=\"%d\",backend=\"%s\",policy=\"%s\","
			"msg_ring=\"%d\",oversubscribed=\"%d\"} 1\n",
		    s->runtime_id, (int)s->pid, cbcmn_backend_name(s->backend),
		    s->policy >= 0 ? cbcmn_policy_name((cbcmn_policy)s->policy) : "none",
		    (int)s->msg_ring, (int)s->oversubscribed);
	}

	for (size_t k = 0; k < NEXEC_METRICS; k++) {
		const struct exec_metric *m = &exec_metrics[k];
		family(&o, m->name, m->type, m->help);
		for (size_t r = 0; r < n; r++)
			for (uint32_t i = 0; i < src[r].nper; i++) {
				put(&o, "cbcmn_%s%s{runtime=\"%u\",executor=\"%u\"} ", m->name,
				    m->type == F_COUNTER ? "_total" : "", src[r].stats->runtime_id, i);
				/* Integers as integers: a double would round
				 * counters past 2^53. */
				uint64_t v = exec_raw(m, &src[r].per[i]);
				if (m->scale == AS_IS)
					put(&o, "%llu\n", (unsigned long long)v);
				else
					put(&o, "%.9g\n", (double)v / (m->scale == NS ? 1e9 : 100.0));
			}
	}
	/* A state set: one sample per state, 1 for the one the executor is in. */
	family(&o, "executor_state", F_STATESET, "What the executor is doing");
	for (size_t r = 0; r < n; r++)
		for (uint32_t i = 0; i < src[r].nper; i++)
			for (uint32_t st = 0; st < NSTATES; st++)
				put(&o, "cbcmn_executor_state{runtime=\"%u\",executor=\"%u\","
					"cbcmn_executor_state=\"%s\"} %d\n",
				    src[r].stats->runtime_id, i, state_names[st], src[r].per[i].state == st);
	family(&o, "actors_by_state", F_GAUGE, "Actors homed on the executor, by what they do");
	for (size_t r = 0; r < n; r++)
		for (uint32_t i = 0; i < src[r].nper; i++)
			for (size_t k = 0; k < NACTOR_STATES; k++)
				put(&o, "cbcmn_actors_by_state{runtime=\"%u\",executor=\"%u\",state=\"%s\"} "
					"%llu\n",
				    src[r].stats->runtime_id, i, actor_states[k].name,
				    (unsigned long long)*(const uint64_t *)((const char *)&src[r].per[i] +
									    actor_states[k].off));
	/* The thread id as a label, as an info family carries what names a
	 * thing: it joins the figures to ps -L, perf and /proc/PID/task. */
	family(&o, "executor", F_INFO, "Where the executor is pinned (-1: not) and its thread (0: none)");
	for (size_t r = 0; r < n; r++)
		for (uint32_t i = 0; i < src[r].nper; i++)
			put(&o, "cbcmn_executor_info{runtime=\"%u\",executor=\"%u\",cpu=\"%d\","
				"node=\"%d\",tid=\"%d\"} 1\n",
			    src[r].stats->runtime_id, i, (int)src[r].per[i].cpu, (int)src[r].per[i].node,
			    (int)src[r].per[i].tid);
	if (o.om)
		put(&o, "# EOF\n");
	return (int64_t)o.len;
}
