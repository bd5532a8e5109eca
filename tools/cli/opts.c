/* opts.c: each tool's command line into its settings (opts.h). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cbcmn.h"
#include "bpf/bpfmon.h"
#include "cli/cli.h"
#include "cli/opts.h"

/* Every parser starts getopt afresh (optind = 0 makes glibc forget a
 * previous scan, cluster position included) and silent: the one-line
 * messages are ours. */
static void getopt_reset(void)
{
	optind = 0;
	opterr = 0;
}

/* The checked value of an integer option, or -1 with "OPT wants WHAT,
 * got 'ARG'" in err; WHAT NULL says "LO..HI". */
static int want_i64(const char *opt, const char *arg, int64_t lo, int64_t hi, const char *what,
		    int64_t *out, char *err, size_t errlen)
{
	if (cli_i64(arg, lo, hi, out)) {
		if (what)
			return cli_err(err, errlen, "%s wants %s, got '%s'", opt, what, arg);
		return cli_err(err, errlen, "%s wants %lld..%lld, got '%s'", opt, (long long)lo,
			       (long long)hi, arg);
	}
	return 0;
}

static int want_u64(const char *opt, const char *arg, uint64_t lo, uint64_t hi, const char *what,
		    uint64_t *out, char *err, size_t errlen)
{
	if (cli_u64(arg, lo, hi, out)) {
		if (what)
			return cli_err(err, errlen, "%s wants %s, got '%s'", opt, what, arg);
		return cli_err(err, errlen, "%s wants %llu..%llu, got '%s'", opt,
			       (unsigned long long)lo, (unsigned long long)hi, arg);
	}
	return 0;
}

static int want_secs(const char *opt, const char *arg, double lo, bool lo_open, double hi,
		     const char *what, double *out, char *err, size_t errlen)
{
	if (cli_secs(arg, lo, lo_open, hi, out))
		return cli_err(err, errlen, "%s wants %s, got '%s'", opt, what, arg);
	return 0;
}

/* ---- cbcmn-affinity ---------------------------------------------------------- */

int affinity_opts_parse(int argc, char **argv, struct affinity_opts *o, char *err, size_t errlen)
{
	static const struct option longopts[] = {
		{"sysfs-root", required_argument, NULL, 'r'},
		{"executors", required_argument, NULL, 'n'},
		{"policy", required_argument, NULL, 'p'},
		{"seed", required_argument, NULL, 's'},
		{"first-cpu", required_argument, NULL, 'f'},
		{"steal-matrix", required_argument, NULL, 'm'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	uint64_t u;
	int c;

	getopt_reset();
	while ((c = getopt_long(argc, argv, ":n:p:s:f:m:jh", longopts, NULL)) != -1) {
		switch (c) {
		case 'r':
			o->root = optarg;
			break;
		case 'n':
			if (want_u64("-n", optarg, 1, OPTS_AFFINITY_MAX_N, NULL, &u, err, errlen))
				return -1;
			o->n = (long long)u;
			break;
		case 'p':
			o->policy = optarg;
			break;
		case 's':
			if (want_u64("--seed", optarg, 0, UINT64_MAX, "an unsigned 64-bit number",
				     &o->seed, err, errlen))
				return -1;
			break;
		case 'f':
			if (want_u64("--first-cpu", optarg, 0, 1 << 20, NULL, &u, err, errlen))
				return -1;
			o->first_cpu = (long long)u;
			break;
		case 'm':
			o->matrix = optarg;
			break;
		case 'j':
			o->json = true;
			break;
		case 'h':
			o->help = true;
			return 0;
		default:
			return cli_getopt_error(c, argc, argv, longopts, err, errlen);
		}
	}
	if (optind < argc)
		return cli_err(err, errlen, "unexpected argument '%s'", argv[optind]);
	return 0;
}

/* ---- cbcmn-run ----------------------------------------------------------------- */

int run_opts_parse(int argc, char **argv, struct run_opts *o, char *err, size_t errlen)
{
	static const struct option longopts[] = {
		{"workers", required_argument, NULL, 'w'},
		{"policy", required_argument, NULL, 'p'},
		{"seed", required_argument, NULL, 's'},
		{"duration", required_argument, NULL, 'd'},
		{"size", required_argument, NULL, 'n'},
		{"json", no_argument, NULL, 'j'},
		{"bpf", no_argument, NULL, 'b'},
		{"futex-tp", no_argument, NULL, 'F'},
		{"verbose", no_argument, NULL, 'v'},
		{"trace", required_argument, NULL, 'T'},
		{"trace-events", required_argument, NULL, 'E'},
		{"trace-limit", required_argument, NULL, 'L'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	uint64_t u;
	int c;

	getopt_reset();
	while ((c = getopt_long(argc, argv, ":w:p:s:d:n:jbvh", longopts, NULL)) != -1) {
		switch (c) {
		case 'T':
			if (!*optarg)
				return cli_err(err, errlen, "--trace wants a file name");
			o->trace = optarg;
			break;
		case 'E':
			if (want_u64("--trace-events", optarg, 1, 1u << 24, NULL, &u, err, errlen))
				return -1;
			o->trace_events = (uint32_t)u;
			break;
		case 'L':
			if (want_u64("--trace-limit", optarg, 1, UINT64_MAX, NULL, &o->trace_limit, err,
				     errlen))
				return -1;
			break;
		case 'w':
			if (want_u64("--workers", optarg, 1, CBCMN_MAX_EXECUTORS, NULL, &u, err, errlen))
				return -1;
			o->workers = (uint32_t)u;
			break;
		case 'p':
			o->policy = optarg;
			break;
		case 's':
			if (want_u64("--seed", optarg, 0, UINT64_MAX, "a number in 0..2^64-1", &o->seed,
				     err, errlen))
				return -1;
			break;
		case 'd':
			if (want_secs("--duration", optarg, 0, true, 86400, "seconds in (0, 86400]",
				      &o->duration_s, err, errlen))
				return -1;
			break;
		case 'n':
			if (want_u64("--size", optarg, 1, UINT32_MAX, NULL, &u, err, errlen))
				return -1;
			o->size = (uint32_t)u;
			break;
		case 'j':
			o->json = true;
			break;
		case 'b':
			o->bpf = true;
			break;
		case 'v':
			o->verbose = true;
			break;
		case 'F':
			o->futex_tp = true;
			break;
		case 'h':
			o->help = true;
			return 0;
		default:
			return cli_getopt_error(c, argc, argv, longopts, err, errlen);
		}
	}
	if (o->futex_tp && !o->bpf)
		return cli_err(err, errlen, "--futex-tp goes with --bpf");
	if ((o->trace_events || o->trace_limit) && !o->trace)
		return cli_err(err, errlen, "%s goes with --trace",
			       o->trace_events ? "--trace-events" : "--trace-limit");
	if (optind >= argc)
		return cli_err(err, errlen, "which workload?");
	if (optind + 1 < argc)
		return cli_err(err, errlen, "unexpected argument '%s'", argv[optind + 1]);
	o->workload = argv[optind];
	return 0;
}

/* ---- cbcmn-bench ---------------------------------------------------------------- */

int bench_opts_parse(int argc, char **argv, struct bench_opts *o, char *err, size_t errlen)
{
	static const struct option longopts[] = {
		{"workers", required_argument, NULL, 'w'},
		{"reps", required_argument, NULL, 'r'},
		{"conns", required_argument, NULL, 'c'},
		{"duration", required_argument, NULL, 'd'},
		{"msg-size", required_argument, NULL, 'm'},
		{"verbose", no_argument, NULL, 'v'},
		{"no-multishot", no_argument, NULL, 'M'},
		{"server-spin-ns", required_argument, NULL, 'S'},
		{"bpf-no", required_argument, NULL, 'B'},
		{"hops", required_argument, NULL, 'H'},
		{"actors", required_argument, NULL, 'A'},
		{"ring", required_argument, NULL, 'G'},
		{"client", required_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	uint64_t u;
	int c;

	getopt_reset();
	while ((c = getopt_long(argc, argv, ":w:r:c:d:m:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'w':
			if (want_u64("--workers", optarg, 1, CBCMN_MAX_EXECUTORS, NULL, &u, err, errlen))
				return -1;
			o->workers = (uint32_t)u;
			break;
		case 'r':
			if (want_u64("--reps", optarg, 1, 16, NULL, &u, err, errlen))
				return -1;
			o->reps = (int)u;
			o->reps_set = true;
			break;
		case 'c':
			if (want_u64("--conns", optarg, 1, 100000, NULL, &u, err, errlen))
				return -1;
			o->conns = (uint32_t)u;
			break;
		case 'd':
			if (want_secs("--duration", optarg, 0, true, 3600, "seconds in (0, 3600]",
				      &o->duration_s, err, errlen))
				return -1;
			o->duration_set = true;
			break;
		case 'm':
			if (want_u64("--msg-size", optarg, 1, LG_MSG_MAX, NULL, &u, err, errlen))
				return -1;
			o->msg_size = (uint32_t)u;
			break;
		case 'v':
			o->verbose = true;
			break;
		case 'M':
			o->multishot = false;
			break;
		case 'C':
			if (strcmp(optarg, "epoll") && strcmp(optarg, "ring"))
				return cli_err(err, errlen, "--client wants epoll or ring, got '%s'",
					       optarg);
			o->client_ring = !strcmp(optarg, "ring");
			break;
		case 'S':
			if (!strcmp(optarg, "none")) {
				o->server_spin_ns = CBCMN_SPIN_NONE;
				break;
			}
			/* CBCMN_SPIN_NONE itself only as "none". */
			if (want_u64("--server-spin-ns", optarg, 1, CBCMN_SPIN_NONE - 1,
				     "ns > 0 or 'none'", &o->server_spin_ns, err, errlen))
				return -1;
			break;
		case 'B':
			if (!strcmp(optarg, "sched"))
				o->bpf_flags |= BPFMON_NO_SCHED;
			else if (!strcmp(optarg, "io_uring"))
				o->bpf_flags |= BPFMON_NO_IO_URING;
			else if (!strcmp(optarg, "futex"))
				o->bpf_flags |= BPFMON_NO_FUTEX;
			else if (!strcmp(optarg, "futex-tp"))
				/* not a group to leave off: opt into the fallback */
				o->bpf_flags |= BPFMON_FUTEX_TP;
			else
				return cli_err(err, errlen,
					       "--bpf-no wants sched, io_uring or futex (or futex-tp to add "
					       "the syscall tracepoints), got '%s'",
					       optarg);
			break;
		case 'H':
			if (want_u64("--hops", optarg, 1, 1ull << 40, NULL, &o->hops, err, errlen))
				return -1;
			break;
		case 'A':
			/* skynet's leaves are the tree's: a power of 10 (bench_actors checks) */
			if (want_u64("--actors", optarg, 10, 100000000, NULL, &o->actors, err, errlen))
				return -1;
			break;
		case 'G':
			/* the ring alone, any size: skynet keeps its leaves */
			if (want_u64("--ring", optarg, 2, 100000000, NULL, &o->ring, err, errlen))
				return -1;
			break;
		case 'h':
			o->help = true;
			return 0;
		default:
			return cli_getopt_error(c, argc, argv, longopts, err, errlen);
		}
	}
	if (optind >= argc)
		return cli_err(err, errlen, "which benchmark? (a name or all)");
	if (optind + 1 < argc)
		return cli_err(err, errlen, "unexpected argument '%s'", argv[optind + 1]);
	o->name = argv[optind];
	/* The io_uring client speaks echo only (loadgen.h): refused here,
	 * not by the http bench after "all" has run every one before it. */
	if (o->client_ring && strcmp(o->name, "echo") && strcmp(o->name, "bpf-overhead"))
		return cli_err(err, errlen, "--client ring goes with echo or bpf-overhead, not '%s'",
			       o->name);
	return 0;
}

/* ---- cbcmn-demo ------------------------------------------------------------------ */

int demo_opts_parse(int argc, char **argv, struct demo_opts *o, char *err, size_t errlen)
{
	static const struct option longopts[] = {{0}};
	uint64_t u;
	int c;

	getopt_reset();
	while ((c = getopt_long(argc, argv, ":n:w:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (want_u64("-n", optarg, 0, 40, NULL, &u, err, errlen))
				return -1;
			o->n = (int)u;
			break;
		case 'w':
			if (want_u64("-w", optarg, 1, CBCMN_MAX_EXECUTORS, NULL, &u, err, errlen))
				return -1;
			o->workers = (uint32_t)u;
			break;
		case 'h':
			o->help = true;
			return 0;
		default:
			return cli_getopt_error(c, argc, argv, longopts, err, errlen);
		}
	}
	if (optind < argc)
		return cli_err(err, errlen, "unexpected argument '%s'", argv[optind]);
	return 0;
}

/* ---- cbcmn-loadtest ------------------------------------------------------------- */

int loadtest_opts_parse(int argc, char **argv, struct loadtest_opts *o, char *err, size_t errlen)
{
	static const struct option longopts[] = {
		{"duration", required_argument, NULL, 'd'},
		{"conns", required_argument, NULL, 'c'},
		{"size", required_argument, NULL, 's'},
		{"pipeline", required_argument, NULL, 'p'},
		{"threads", required_argument, NULL, 't'},
		{"server-cpu", required_argument, NULL, 'S'},
		{"client-cpu", required_argument, NULL, 'C'},
		{"verify-conns", required_argument, NULL, 'n'},
		{"verify-bytes", required_argument, NULL, 'b'},
		{"iters", required_argument, NULL, 'i'},
		{"no-http", no_argument, NULL, 'H'},
		{"port", required_argument, NULL, 'P'},
		{"proto", required_argument, NULL, 'R'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	/* The counts' names and bounds, by option letter. */
	static const struct {
		char opt;
		uint32_t lo, hi;
	} counts[] = {
		{'c', 1, 100000}, {'s', 1, LG_MSG_MAX}, {'p', 1, LG_PIPELINE_MAX}, {'t', 1, 256},
		{'n', 0, 200000}, {'b', 1, 1 << 24},     {'i', 0, 100000000},     {'P', 1, 65535},
	};
	char name[3] = "-?";
	uint64_t u = 0;
	int64_t i = 0;
	int c;

	getopt_reset();
	while ((c = getopt_long(argc, argv, ":d:c:s:p:t:S:C:n:b:i:P:vh", longopts, NULL)) != -1) {
		name[1] = (char)c;
		for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
			if (counts[k].opt != c)
				continue;
			if (want_u64(name, optarg, counts[k].lo, counts[k].hi, NULL, &u, err, errlen))
				return -1;
			break;
		}
		switch (c) {
		case 'd':
			if (want_secs("-d", optarg, 0, true, 3600, "seconds in (0, 3600]",
				      &o->cfg.duration_s, err, errlen))
				return -1;
			break;
		case 'c':
			o->cfg.conns = (uint32_t)u;
			break;
		case 's':
			o->cfg.msg_size = (uint32_t)u;
			break;
		case 'p':
			o->cfg.pipeline = (uint32_t)u;
			break;
		case 't':
			o->cfg.threads = (uint32_t)u;
			break;
		case 'S':
		case 'C':
			if (want_i64(name, optarg, -1, 1023, NULL, &i, err, errlen))
				return -1;
			*(c == 'S' ? &o->server_cpu : &o->cfg.cpu) = (int)i;
			break;
		case 'n':
			o->vconns = (uint32_t)u;
			break;
		case 'b':
			o->vbytes = (uint32_t)u;
			break;
		case 'i':
			o->iters = (uint32_t)u;
			break;
		case 'H':
			o->http = false;
			break;
		case 'P':
			o->port = (uint16_t)u;
			break;
		case 'R':
			if (strcmp(optarg, "echo") && strcmp(optarg, "http"))
				return cli_err(err, errlen, "--proto wants echo or http, got '%s'", optarg);
			o->cfg.proto = optarg[0] == 'h' ? LG_HTTP : LG_ECHO;
			break;
		case 'v':
			o->verbose = true;
			break;
		case 'h':
			o->help = true;
			return 0;
		default:
			return cli_getopt_error(c, argc, argv, longopts, err, errlen);
		}
	}
	if (optind < argc)
		return cli_err(err, errlen, "unexpected argument '%s'", argv[optind]);
	return 0;
}

/* ---- cbcmn-stat ------------------------------------------------------------------ */

int stat_opts_parse(int argc, char **argv, struct stat_opts *o, char *err, size_t errlen)
{
	static const struct option longopts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"interval", required_argument, NULL, 'i'},
		{"count", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},
		{"verbose", no_argument, NULL, 'v'},
		{"futex-tp", no_argument, NULL, 'F'},
		{"runtime", required_argument, NULL, 'r'},
		{"prometheus", no_argument, NULL, 'P'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	uint64_t u;
	int c;

	getopt_reset();
	while ((c = getopt_long(argc, argv, ":p:i:c:r:jvh", longopts, NULL)) != -1) {
		switch (c) {
		case 'P':
			o->prometheus = true;
			break;
		case 'r':
			if (want_u64("-r", optarg, 0, 65535, "a runtime index >= 0", &u, err, errlen))
				return -1;
			o->runtime = (long)u;
			break;
		case 'p':
			if (want_u64("-p", optarg, 1, OPTS_PID_MAX, "a process id", &u, err, errlen))
				return -1;
			o->pid = (long)u;
			break;
		case 'i':
			if (want_secs("-i", optarg, 0, true, 86400, "seconds in (0, 86400]", &o->interval,
				      err, errlen))
				return -1;
			break;
		case 'c':
			if (want_u64("-c", optarg, 0, LONG_MAX, "a count >= 0", &u, err, errlen))
				return -1;
			o->count = (long)u;
			break;
		case 'j':
			o->json = true;
			break;
		case 'v':
			o->verbose = true;
			break;
		case 'F':
			o->futex_tp = true;
			break;
		case 'h':
			o->help = true;
			return 0;
		default:
			return cli_getopt_error(c, argc, argv, longopts, err, errlen);
		}
	}
	if (!o->pid)
		return cli_err(err, errlen, "-p PID is required");
	if (o->prometheus && (o->json || o->futex_tp))
		return cli_err(err, errlen, "--prometheus and %s exclude each other",
			       o->json ? "--json" : "--futex-tp");
	if (optind != argc)
		return cli_err(err, errlen, "unexpected argument '%s'", argv[optind]);
	return 0;
}

/* ---- cbcmn-top ------------------------------------------------------------------- */

int top_opts_parse(int argc, char **argv, struct top_opts *o, char *err, size_t errlen)
{
	enum { O_NO_COLOR = 256, O_NO_BPF, O_BPF_NO, O_FUTEX_TP, O_RECORD };
	static const struct option longopts[] = {
		{"pid", required_argument, NULL, 'p'},  {"delay", required_argument, NULL, 'd'},
		{"batch", no_argument, NULL, 'b'},      {"iterations", required_argument, NULL, 'n'},
		{"json", no_argument, NULL, 'j'},       {"no-color", no_argument, NULL, O_NO_COLOR},
		{"no-bpf", no_argument, NULL, O_NO_BPF}, {"bpf-no", required_argument, NULL, O_BPF_NO},
		{"futex-tp", no_argument, NULL, O_FUTEX_TP}, {"wait", required_argument, NULL, 'w'},
		{"output", required_argument, NULL, 'o'}, {"verbose", no_argument, NULL, 'v'},
		{"runtime", required_argument, NULL, 'r'}, {"record", required_argument, NULL, O_RECORD},
		{"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0}};
	bool n_given = false;
	uint64_t u;
	int c;

	getopt_reset();
	/* "+": options end at the first non-option, the command's own. */
	while ((c = getopt_long(argc, argv, "+:p:d:bn:jw:o:r:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'r':
			if (want_u64("-r", optarg, 0, 65535, "a runtime index >= 0", &u, err, errlen))
				return -1;
			o->runtime = (long)u;
			break;
		case 'p':
			if (want_u64("-p", optarg, 1, OPTS_PID_MAX, "a process id", &u, err, errlen))
				return -1;
			o->pid = (long)u;
			break;
		case 'd':
			if (want_secs("-d", optarg, 0.05, false, 86400, "seconds in [0.05, 86400]",
				      &o->delay, err, errlen))
				return -1;
			break;
		case 'b':
			o->batch = true;
			break;
		case 'n':
			if (want_u64("-n", optarg, 0, LONG_MAX, "a count >= 0", &u, err, errlen))
				return -1;
			o->iterations = (long)u;
			n_given = true;
			break;
		case 'j':
			o->json = o->batch = true;
			break;
		case 'w':
			if (want_secs("-w", optarg, 0.05, false, 86400, "seconds in [0.05, 86400]",
				      &o->wait_s, err, errlen))
				return -1;
			break;
		case 'o':
			o->output = optarg;
			break;
		case 'v':
			o->bpf_flags |= BPFMON_VERBOSE;
			break;
		case O_NO_COLOR:
			o->color = false;
			break;
		case O_NO_BPF:
			o->no_bpf = true;
			break;
		case O_BPF_NO:
			if (!strcmp(optarg, "sched"))
				o->bpf_flags |= BPFMON_NO_SCHED;
			else if (!strcmp(optarg, "io_uring"))
				o->bpf_flags |= BPFMON_NO_IO_URING;
			else if (!strcmp(optarg, "futex"))
				o->bpf_flags |= BPFMON_NO_FUTEX;
			else
				return cli_err(err, errlen, "--bpf-no wants sched, io_uring or futex, got '%s'",
					       optarg);
			break;
		case O_FUTEX_TP:
			o->bpf_flags |= BPFMON_FUTEX_TP;
			break;
		case O_RECORD:
			if (!*optarg)
				return cli_err(err, errlen, "--record wants a file name");
			o->record = optarg;
			break;
		case 'h':
			o->help = true;
			return 0;
		default:
			return cli_getopt_error(c, argc, argv, longopts, err, errlen);
		}
	}
	o->cmd = optind < argc ? &argv[optind] : NULL;
	if (!o->pid == !o->cmd)
		return cli_err(err, errlen, "%s",
			       o->pid ? "-p PID and a COMMAND exclude each other"
				      : "-p PID or -- COMMAND is required");
	if (n_given && !o->batch)
		return cli_err(err, errlen, "-n counts batch snapshots: add -b or --json");
	if (o->output && !o->cmd)
		return cli_err(err, errlen, "-o is for the output of a COMMAND");
	return 0;
}
