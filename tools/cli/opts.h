/* opts.h: the command lines of the cbcmn tools, each parsed into its
 * settings by a function that neither prints nor exits, so that the tools,
 * tests/test_cli.c and the fuzz target tests/fuzz/fuzz_cli.c run the same
 * code.
 *
 * Every parser takes argc and argv as main() got them (argv may be
 * permuted, as getopt_long does) and settings the caller filled with its
 * defaults.  It returns 0, with .help set if --help was asked for (the
 * rest then means nothing), or -1 with err holding one line, without the
 * program's name, that says what was wrong.  Values are read strictly
 * (cli.h).  What needs more than the command line (a workload or benchmark
 * name, a placement policy, the topology) is the tool's to check.
 *
 * The parsers use getopt's globals (reset at each call): one thread at a
 * time.
 */
#ifndef CBCMN_TOOLS_OPTS_H
#define CBCMN_TOOLS_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/loadgen.h"

/* Values some tools share, for the checks of the tests and fuzz target. */
/* Executors cbcmn-affinity -n places: more is a typo, not a plan
 * (CBCMN_MAX_EXECUTORS is far lower); the bound keeps its arrays small. */
#define OPTS_AFFINITY_MAX_N (1 << 20)
#define OPTS_PID_MAX 0x7fffffff       /* pid_t's range; the kernel's is smaller */

struct affinity_opts {
	const char *root, *policy, *matrix; /* NULL: not given */
	long long n;                        /* 0: not given */
	long long first_cpu;                /* -1: not given */
	uint64_t seed;
	bool json, help;
};
int affinity_opts_parse(int argc, char **argv, struct affinity_opts *o, char *err, size_t errlen);

struct run_opts {
	uint32_t workers;     /* CBCMN_WORKERS_AUTO: not given */
	const char *policy;   /* NULL: not given */
	uint64_t seed;
	double duration_s;
	uint32_t size;        /* 0: not given */
	bool json, bpf, verbose, futex_tp, help;
	const char *workload; /* the one operand */
	const char *trace;    /* --trace FILE; NULL: not given */
	uint32_t trace_events; /* --trace-events N; 0: not given */
	uint64_t trace_limit;  /* --trace-limit N; 0: not given */
};
int run_opts_parse(int argc, char **argv, struct run_opts *o, char *err, size_t errlen);

struct bench_opts {
	uint32_t workers, conns, msg_size;
	int reps;
	bool reps_set;
	double duration_s;
	bool duration_set, verbose, multishot;
	bool client_ring; /* --client ring: the io_uring load client (loadgen.h) */
	uint64_t server_spin_ns; /* CBCMN_SPIN_NONE for "none" */
	unsigned bpf_flags;      /* BPFMON_* */
	uint64_t hops, actors;   /* actors: --hops, --actors; 0: not given */
	uint64_t ring;           /* actors: --ring (the ring's size alone); 0: not given */
	bool help;
	const char *name;        /* the one operand: a benchmark or "all" */
};
int bench_opts_parse(int argc, char **argv, struct bench_opts *o, char *err, size_t errlen);

struct demo_opts {
	int n;
	uint32_t workers; /* 0: not given */
	bool help;
};
int demo_opts_parse(int argc, char **argv, struct demo_opts *o, char *err, size_t errlen);

struct loadtest_opts {
	struct lg_config cfg; /* duration, conns, size, pipeline, threads, client CPU, proto */
	int server_cpu;       /* -1: not pinned */
	uint32_t vconns, vbytes, iters;
	bool http, verbose, help;
	uint16_t port;        /* 0: the built-in servers */
};
int loadtest_opts_parse(int argc, char **argv, struct loadtest_opts *o, char *err, size_t errlen);

struct stat_opts {
	long pid;       /* required */
	double interval;
	long count;     /* 0: until stopped */
	bool json, verbose, futex_tp, help;
	long runtime;   /* -r: the index-th live runtime of the process, oldest 0 */
	bool prometheus; /* OpenMetrics text of the statistics segment, no eBPF */
};
int stat_opts_parse(int argc, char **argv, struct stat_opts *o, char *err, size_t errlen);

struct top_opts {
	long pid;            /* 0: not given */
	double delay, wait_s;
	long iterations;     /* 0: until stopped */
	bool batch, json, color, no_bpf, help;
	unsigned bpf_flags;  /* BPFMON_* */
	const char *output;  /* NULL: not given */
	char **cmd;          /* the COMMAND after the options, NULL-terminated; NULL: none */
	long runtime;        /* -r: the index-th live runtime of the process, oldest 0 */
	const char *record;  /* --record FILE: the samples as a trace; NULL: not given */
};
int top_opts_parse(int argc, char **argv, struct top_opts *o, char *err, size_t errlen);

#endif
