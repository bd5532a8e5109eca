/* top_model.h: what cbcmn-top shows, whatever draws it (docs/TOP.md).
 *
 * A model watches one cbcmn process: the runtime's own figures through
 * cbcmn_watch_*, the kernel's through bpfmon (when it loads), and the cost
 * of its own BPF programs.  top_model_sample() takes a sample and turns the
 * difference from the previous one into per-shard rows (one value per
 * column, NAN where a figure is unknown), a history per column, totals and
 * warnings.  The curses screen, the batch text and the JSON lines of
 * cbcmn-top all read the same rows.  One thread uses a model.
 */
#ifndef CBCMN_TOOLS_TOP_MODEL_H
#define CBCMN_TOOLS_TOP_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cbcmn.h"
#include "bpf/bpfmon.h"

/* Samples of history kept per shard and column (sparklines). */
#define TOP_HISTORY 60

/* Warning thresholds (docs/TOP.md, "Warnings").  A condition is judged on
 * the last interval, except migrations (since attach). */
#define TOP_STEAL_FAIL_MIN_ATTEMPTS 100 /* probes in the interval before judging */
#define TOP_STEAL_FAIL_PCT 10.0         /* success below this: steals mostly fail */
#define TOP_DB_WASTED_MIN 20            /* doorbells received in the interval before judging */
#define TOP_DB_WASTED_PCT 50.0          /* share that found the target running: wasted */
#define TOP_STARVED_RUNQ_P99_US 10000   /* run-queue latency p99 (us) that is starvation */
#define TOP_STARVED_INVOL_PER_S 50.0    /* preemptions per second ... */
#define TOP_STARVED_ONCPU_PCT 50.0      /* ... with on-CPU below this, while work is queued */

/* The columns of a shard's row, in screen order. */
enum top_col {
	TOP_COL_SHARD,
	TOP_COL_CPU,
	TOP_COL_NODE,
	TOP_COL_STATE,
	TOP_COL_QUEUE,
	TOP_COL_TASKS,
	TOP_COL_STEALS_IN,
	TOP_COL_STOLEN_IN,
	TOP_COL_STEALS_OUT,
	TOP_COL_STEAL_OK,
	TOP_COL_DB_SENT,
	TOP_COL_DB_RECV,
	TOP_COL_DB_P99,
	TOP_COL_SQES,
	TOP_COL_CQES,
	TOP_COL_BUSY,
	TOP_COL_WAIT,
	TOP_COL_MIGR,
	TOP_COL_ONCPU,
	TOP_COL_LOAD, /* the actor wheel's load, 1.00 = nominal turn rate */
	TOP_COL_ACTORS,     /* actors homed there, now */
	TOP_COL_ACT_RUN,    /* of those, runnable (queued) now */
	TOP_COL_MAILBOX,    /* messages in their mailboxes, now */
	TOP_COL_ACT_MIGR,   /* actors it handed to another executor, /s */
	TOP_COL_RESTARTS,   /* restarts by the supervisors that ran on it, /s */
	TOP_COL_MBOX_P99,   /* mailbox depth its receives found, p99 of the interval */
	TOP_COL_BACKPR,     /* sends from it a full mailbox held or refused, /s */
	TOP_NCOLS,
};

struct top_col_desc {
	const char *head;  /* screen and batch header */
	const char *key;   /* JSON key of the per-shard figure */
	int width;         /* screen width, the header's included */
	int prio;          /* narrow screens drop the lowest first; 9: never dropped */
	bool kernel;       /* from BPF: NAN while kernel figures are off */
	bool ascending;    /* natural sort order (else highest first) */
};

extern const struct top_col_desc top_cols[TOP_NCOLS];

enum top_warn_kind {
	TOP_WARN_MIGRATED,
	TOP_WARN_STEAL_FAIL,
	TOP_WARN_DB_WASTED,
	TOP_WARN_CQ_OVERFLOW,
	TOP_WARN_BACKPRESSURE,
	TOP_WARN_STARVED,
	TOP_WARN_STALLED,
};

struct top_warning {
	enum top_warn_kind kind;
	uint32_t shard;
	char text[112]; /* one line, without the shard */
};

/* One shard as last sampled. */
struct top_row {
	uint32_t shard;
	int cpu, node, llc;      /* node/llc: the topology's indexes, -1 unknown */
	uint32_t state;          /* cbcmn_exec_state */
	int32_t tid;             /* its thread, as /proc here numbers it */
	int32_t tid_own;         /* the same as the runtime sees it (its pid namespace) */
	double v[TOP_NCOLS];     /* the columns; NAN: unknown */
	const cbcmn_executor_stats *rt; /* cumulative, since the runtime started */
	const struct bpfmon_shard *k;   /* cumulative since attach; NULL: kernel figures off */
	struct cbcmn_bpf_pair out;      /* stolen from it (as victim), since attach */
	double hist[TOP_NCOLS][TOP_HISTORY]; /* ring of the last samples, oldest first from hpos */
};

/* The model's own cost: its BPF programs' runs and CPU time, from the
 * kernel's run statistics (BPF_STATS_RUN_TIME). */
struct top_cost {
	bool on;
	char why[160];          /* !on: why not */
	unsigned progs;         /* programs loaded */
	uint64_t runs, run_ns;  /* cumulative since load */
	uint64_t usdt_runs;     /* the USDT programs' runs among them */
	/* ns_per_s: the programs' run time plus, for each USDT run, the
	 * uprobe trap that the run time does not count (an estimate,
	 * BPFMON_UPROBE_TRAP_NS each), which is trap_ns_per_s of it */
	double runs_per_s, ns_per_s, trap_ns_per_s;
	/* Steal probes whose (thief, victim) record did not fit the
	 * steal_pairs hash: the only event count the programs can lose
	 * (docs/TOP.md); estimated from the shard counters. */
	uint64_t dropped;
};

/* Steals of one NUMA node or LLC group (the shards whose CPU is in it),
 * per second over the last interval (kernel figures: steal_pairs). */
struct top_group {
	double in_per_s;   /* steals its shards made, as thieves */
	double out_per_s;  /* steals from its shards, as victims */
	double in_x_per_s; /* of in: from shards outside the group */
	double out_x_per_s; /* of out: by shards outside the group */
};

struct top_model;

struct top_model_opts {
	bool no_bpf;            /* kernel figures off */
	unsigned bpf_flags;     /* BPFMON_* for bpfmon_open */
	const char *sysfs_root; /* topology (NULL: the live machine) */
	uint32_t runtime;       /* which live runtime of the process, oldest 0 */
	/* A watch of that runtime already open (cbcmn-top's started command,
	 * watched as soon as its runtime appeared, so that a command ending
	 * at any point after that still has its last figures), which the
	 * model takes over, failing or not; NULL: the model opens one. */
	cbcmn_watch *watch;
	/* Called after each read of the runtime's figures by
	 * top_model_sample(), the model updated, the last one too when the
	 * runtime ended: st and per (n executors) as read, cumulative; for
	 * that last read its final figures, newer than the rows (which keep
	 * the last sample's).  NULL: none.  cbcmn-top --record. */
	void (*on_read)(const struct top_model *m, uint64_t t_ns, const cbcmn_stats *st,
			const cbcmn_executor_stats *per, uint32_t n, void *arg);
	void *on_read_arg;
};

struct top_model {
	pid_t pid;
	char comm[64];           /* the process's name */
	cbcmn_stats st;          /* last sample */
	uint32_t nrows;
	struct top_row *rows;    /* nrows, by shard id */
	double dt;               /* seconds between the last two samples, 0 at first */
	uint64_t samples;        /* taken so far, the one at open included */
	/* Totals over shards, of the last interval. */
	double tasks_per_s, steals_per_s, stolen_per_s, db_per_s, sqes_per_s, cqes_per_s;
	double steal_ok_pct;     /* runtime's view, the interval: NAN without attempts */
	bool kernel;             /* kernel figures on */
	char kernel_why[256];    /* off: why (bpfmon's reason) */
	unsigned progs_attached, progs_total;
	/* Kernel columns whose programs did not attach: "-" and null, never
	 * 0 (docs/TOP.md, "Not measured"); unmeasured_why[c] says why. */
	bool unmeasured[TOP_NCOLS];
	char unmeasured_why[TOP_NCOLS][200];
	unsigned nunmeasured;
	bool detached;           /* the target ended: the programs were detached */
	uint32_t runtime_index, runtimes; /* which live runtime (oldest 0), of how many at open */
	uint32_t runtime_id;     /* its id in the process (the probes' last argument) */
	struct top_cost cost;
	/* Steals by where thief and victim are, the last interval; kernel
	 * figures and a topology only (else NULL / NAN).  A steal with either
	 * shard unplaced (unpinned) counts in neither cross_ rate. */
	struct top_group *nodes;   /* top_model_nnodes() of them, by node index */
	struct top_group *llcs;    /* top_model_nllcs() of them, by LLC index */
	double placed_steals_per_s; /* between two placed shards */
	double cross_node_per_s, cross_llc_per_s; /* ... on different nodes / LLCs */
	struct top_warning *warn;
	unsigned nwarn;
	bool ended;              /* the runtime or its process is gone: figures frozen */
	struct top_model_priv *priv;
};

/* Attach to a runtime of process pid (o->runtime-th live one, the oldest
 * by default; the kernel figures count that one's only).  Returns 0, or
 * -ESRCH (no such process), -ENOENT (no cbcmn runtime in it), -EACCES,
 * -EPROTO, -ENOMEM with one line in err.  Kernel figures that cannot be
 * had are not an error: m->kernel is false and m->kernel_why says why. */
int top_model_open(struct top_model **out, pid_t pid, const struct top_model_opts *o, char *err,
		   size_t errlen);

/* Take a sample and update the rows, totals, histories and warnings.
 * Returns 0, or -ESRCH once the runtime has ended or its process exited
 * (m->ended; the rows keep the last figures), or another negative errno. */
int top_model_sample(struct top_model *m);

/* Is a counter of struct cbcmn_bpf_shard (its offsetof) measured: kernel
 * figures on and every program it rests on attached (bpfmon_measured)? */
bool top_model_measured(const struct top_model *m, size_t field);

/* The (thief, victim) steal pairs of the last sample's kernel read,
 * cumulative since attach: *k and *v hold the returned count of them (0,
 * and NULLs, while kernel figures are off).  Valid until the next sample. */
uint32_t top_model_steal_pairs(const struct top_model *m, const struct cbcmn_bpf_pair_key **k,
			       const struct cbcmn_bpf_pair **v);

/* Detach the BPF programs, stop watching, free.  NULL is fine. */
void top_model_close(struct top_model *m);

/* The i-th most recent value of a row's column (0: the last); NAN when
 * there is none. */
double top_row_past(const struct top_model *m, const struct top_row *r, enum top_col c,
		    unsigned i);

/* A column's value as text, right-aligned in width ("-" when unknown). */
void top_fmt(enum top_col c, double v, char *buf, size_t len, int width);

/* "running", "searching", "parked", "stopped". */
const char *top_state_name(uint32_t state);

/* Name of a warning kind, for JSON: "migrated", "steal_fail", ... */
const char *top_warn_name(enum top_warn_kind k);

/* The policy's name ("depth-first", "none"). */
const char *top_policy_name(int32_t policy);

/* Does row r match a filter text (a substring of its "shard=N cpu=C
 * node=D STATE")? An empty filter matches everything. */
bool top_row_matches(const struct top_row *r, const char *filter);

/* Topology: LLC groups and nodes of this machine (-1 when unknown). */
int top_model_nnodes(const struct top_model *m);
int top_model_node_id(const struct top_model *m, int node);
int top_model_nllcs(const struct top_model *m);
/* The CPUs of an LLC group, as a list like "0-3,8". */
void top_model_llc_cpus(const struct top_model *m, int llc, char *buf, size_t len);
/* The node index an LLC group belongs to. */
int top_model_llc_node(const struct top_model *m, int llc);

#endif
