/* workload.h: the named, self-checking workloads of cbcmn-run (docs/RUN.md).
 *
 * Each workload runs on a runtime built from struct wl_opts (executors,
 * placement policy, seed), checks its own answer, and reports throughput,
 * latency where it has a unit of work, and the runtime's statistics taken
 * when it is done.  A wrong answer is an error, never a number.
 *
 * Count-based workloads (fib, spawn-storm, skew) repeat rounds of their size
 * until duration_s has passed (at least one round; skew on several
 * executors also until a task was stolen, at most a minute more: on a
 * loaded machine a thief may get no CPU for the whole duration); time-based
 * ones (pipeline, echo, http, timers, mixed) run for duration_s.
 *
 * wl_run() blocks the calling thread, which must not be an executor of
 * another cbcmn runtime.  One call at a time per process is the intended
 * use (the workloads keep no global state, but they share the CPUs).
 */
#ifndef CBCMN_TOOLS_WORKLOAD_H
#define CBCMN_TOOLS_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cbcmn.h"
#include "net/loadgen.h"

struct wl_opts {
	uint32_t workers;   /* executors, 1..CBCMN_MAX_EXECUTORS, or CBCMN_WORKERS_AUTO */
	int32_t policy;     /* a cbcmn_policy, or CBCMN_PIN_AUTO (the runtime's default) */
	const int *cpus;    /* for CBCMN_POLICY_CPUS: executor i on cpus[i] */
	size_t ncpus;
	uint64_t seed;      /* the runtime's (victims, random policy) and the workload's own choices */
	double duration_s;  /* > 0 */
	uint32_t size;      /* the workload's size (wl_desc.size_help); 0: its default */
	/* Tests only: each workload (but echo and http, whose server and client
	 * are not ours to break) makes one deliberate mistake of the kind its
	 * check exists for (a task run twice and another never, a lost message,
	 * an early wake, a wrong byte), so that the check is seen to fail. */
	bool sabotage;
	/* Records per executor of the runtime's trace rings
	 * (cbcmn_config.trace_events); 0: no tracing. */
	uint32_t trace_events;
	/* Called, if set, with the workload's runtime: up once it exists,
	 * then down once the workload is done and its statistics are taken,
	 * before the runtime is destroyed (cbcmn-run --trace drains it
	 * meanwhile). */
	void (*on_runtime)(cbcmn_runtime *rt, bool up, void *arg);
	void *on_runtime_arg;
};

struct wl_result {
	bool ok;               /* ran and passed its self-check */
	char result[160];      /* the answer, e.g. "fib(27)=196418" */
	char error[256];       /* !ok: what was wrong, one line */
	double duration_s;     /* measured */
	double throughput;     /* units per second */
	const char *unit;      /* "tasks/s", "req/s", "msgs/s", ... */
	uint64_t units;        /* units of work done */
	uint64_t rounds;       /* count-based: rounds run; else 1 */
	double p50_us, p99_us; /* latency of the unit of work; 0 where it has none */
	cbcmn_stats stats;     /* at the end, before the runtime was destroyed */
	cbcmn_executor_stats *per; /* stats.executors entries (wl_result_free) */
};

struct wl_env;

struct wl_desc {
	const char *name;
	const char *help;      /* one line for --help */
	const char *size_help; /* what --size means for it */
	uint32_t size_default, size_min, size_max;
	const char *unit;
	bool own_runtime;      /* it builds its runtime itself (the servers) */
	/* rt: the runtime to run on; NULL when own_runtime. */
	int (*run)(cbcmn_runtime *rt, struct wl_env *e);
};

/* The workloads, in the order --help lists them. */
extern const struct wl_desc wl_workloads[];
extern const size_t wl_nworkloads;

/* The workload called name, or NULL. */
const struct wl_desc *wl_find(const char *name);

/* Run w with o and fill *r (zeroed first).  Returns 0 when it ran and its
 * answer was right; -EPROTO when the answer was wrong; another negative
 * errno (or CBCMN_E*) when it could not run (the runtime would not start, a
 * socket failed, -EINVAL for a size outside [size_min, size_max]).  On
 * failure r->error says what, in one line.  r->per is allocated whenever
 * r->stats is filled; free it with wl_result_free() in every case. */
int wl_run(const struct wl_desc *w, const struct wl_opts *o, struct wl_result *r);

void wl_result_free(struct wl_result *r);

/* lg_run() against a loopback server; every failure of the client (an
 * error, a wrong byte, a dropped connection) is one, described in err.
 * Returns 0 or a negative errno (-EPROTO when lg_run() itself returned 0
 * but counted errors). */
int wl_load(const struct lg_config *lc, struct lg_result *res, char *err, size_t errlen);

#endif
