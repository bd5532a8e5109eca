/* fuzz_cli: the command lines of every tool (tools/cli/opts.c, cli.c).
 *
 * Input: one byte choosing the tool, then its arguments separated by NUL
 * bytes (argv[0] is the tool's name).  Checked besides memory safety: the
 * parser answers 0 or -1; a refusal is one line; an acceptance holds only
 * values in the ranges the tool's usage promises (what the tool then does
 * with them relies on it).
 */
#include <limits.h>

#include "fuzz.h"
#include "cbcmn.h"
#include "cli/opts.h"

#define MAX_ARGS 32

static const char *const names[] = {"cbcmn-affinity", "cbcmn-run",  "cbcmn-bench", "cbcmn-demo",
				    "cbcmn-loadtest", "cbcmn-stat", "cbcmn-top"};

static bool secs_in(double v, double lo, bool lo_open, double hi)
{
	return (lo_open ? v > lo : v >= lo) && v <= hi;
}

static void check(int tool, int argc, char **argv)
{
	char err[256];
	int rc = -2;
	err[0] = 0;
	switch (tool) {
	case 0: {
		struct affinity_opts o = {.first_cpu = -1};
		rc = affinity_opts_parse(argc, argv, &o, err, sizeof(err));
		if (rc == 0 && !o.help) {
			FUZZ_CHECK(o.n >= 0 && o.n <= OPTS_AFFINITY_MAX_N, "-n %lld", o.n);
			FUZZ_CHECK(o.first_cpu >= -1 && o.first_cpu <= 1 << 20, "%lld", o.first_cpu);
		}
		break;
	}
	case 1: {
		struct run_opts o = {.workers = CBCMN_WORKERS_AUTO, .duration_s = 3};
		rc = run_opts_parse(argc, argv, &o, err, sizeof(err));
		if (rc == 0 && !o.help) {
			FUZZ_CHECK(o.workload, "no workload");
			FUZZ_CHECK(o.workers == CBCMN_WORKERS_AUTO ||
					   (o.workers >= 1 && o.workers <= CBCMN_MAX_EXECUTORS),
				   "workers %u", o.workers);
			FUZZ_CHECK(secs_in(o.duration_s, 0, true, 86400), "%g s", o.duration_s);
			FUZZ_CHECK(!o.futex_tp || o.bpf, "futex-tp without bpf");
		}
		break;
	}
	case 2: {
		struct bench_opts o = {.workers = 2, .reps = 7, .conns = 50, .msg_size = 64,
				       .duration_s = 5, .multishot = true};
		rc = bench_opts_parse(argc, argv, &o, err, sizeof(err));
		if (rc == 0 && !o.help) {
			FUZZ_CHECK(o.name, "no benchmark");
			FUZZ_CHECK(o.workers >= 1 && o.workers <= CBCMN_MAX_EXECUTORS, "%u", o.workers);
			FUZZ_CHECK(o.reps >= 1 && o.reps <= 16, "reps %d", o.reps);
			FUZZ_CHECK(o.conns >= 1 && o.conns <= 100000, "conns %u", o.conns);
			FUZZ_CHECK(o.msg_size >= 1 && o.msg_size <= LG_MSG_MAX, "size %u", o.msg_size);
			FUZZ_CHECK(secs_in(o.duration_s, 0, true, 3600), "%g s", o.duration_s);
		}
		break;
	}
	case 3: {
		struct demo_opts o = {.n = 27};
		rc = demo_opts_parse(argc, argv, &o, err, sizeof(err));
		if (rc == 0 && !o.help) {
			FUZZ_CHECK(o.n >= 0 && o.n <= 40, "n %d", o.n);
			FUZZ_CHECK(o.workers <= CBCMN_MAX_EXECUTORS, "workers %u", o.workers);
		}
		break;
	}
	case 4: {
		struct loadtest_opts o = {.vconns = 10000, .vbytes = 256, .iters = 20000, .http = true};
		o.cfg.conns = 50;
		o.cfg.msg_size = 64;
		o.cfg.duration_s = 2;
		o.cfg.cpu = 1;
		o.cfg.threads = 1;
		o.cfg.pipeline = 1;
		rc = loadtest_opts_parse(argc, argv, &o, err, sizeof(err));
		if (rc == 0 && !o.help) {
			FUZZ_CHECK(secs_in(o.cfg.duration_s, 0, true, 3600), "%g s", o.cfg.duration_s);
			FUZZ_CHECK(o.cfg.conns >= 1 && o.cfg.conns <= 100000, "conns");
			FUZZ_CHECK(o.cfg.msg_size >= 1 && o.cfg.msg_size <= LG_MSG_MAX, "size");
			FUZZ_CHECK(o.cfg.pipeline >= 1 && o.cfg.pipeline <= LG_PIPELINE_MAX, "pipeline");
			FUZZ_CHECK(o.cfg.threads >= 1 && o.cfg.threads <= 256, "threads");
			FUZZ_CHECK(o.cfg.cpu >= -1 && o.cfg.cpu <= 1023, "client cpu");
			FUZZ_CHECK(o.server_cpu >= -1 && o.server_cpu <= 1023, "server cpu");
			FUZZ_CHECK(o.vbytes >= 1 && o.vbytes <= 1 << 24, "vbytes");
			FUZZ_CHECK(o.cfg.proto == LG_ECHO || o.cfg.proto == LG_HTTP, "proto");
		}
		break;
	}
	case 5: {
		struct stat_opts o = {.interval = 1, .count = 1};
		rc = stat_opts_parse(argc, argv, &o, err, sizeof(err));
		if (rc == 0 && !o.help) {
			FUZZ_CHECK(o.pid >= 1 && o.pid <= OPTS_PID_MAX, "pid %ld", o.pid);
			FUZZ_CHECK(o.count >= 0, "count %ld", o.count);
			FUZZ_CHECK(secs_in(o.interval, 0, true, 86400), "%g s", o.interval);
		}
		break;
	}
	default: {
		struct top_opts o = {.delay = 1, .wait_s = 10, .color = true};
		rc = top_opts_parse(argc, argv, &o, err, sizeof(err));
		if (rc == 0 && !o.help) {
			FUZZ_CHECK(!o.pid != !o.cmd, "pid %ld and cmd %p", o.pid, (void *)o.cmd);
			FUZZ_CHECK(o.pid >= 0 && o.pid <= OPTS_PID_MAX, "pid %ld", o.pid);
			FUZZ_CHECK(o.iterations >= 0, "iterations %ld", o.iterations);
			FUZZ_CHECK(secs_in(o.delay, 0.05, false, 86400), "delay %g", o.delay);
			FUZZ_CHECK(secs_in(o.wait_s, 0.05, false, 86400), "wait %g", o.wait_s);
			if (o.cmd)
				FUZZ_CHECK(o.cmd[0] != NULL, "empty command");
		}
		break;
	}
	}
	FUZZ_CHECK(rc == 0 || rc == -1, "rc %d", rc);
	if (rc)
		FUZZ_ONE_LINE(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int tool = data[0] % (int)(sizeof(names) / sizeof(names[0]));
	char *text = fuzz_strndup(data + 1, size - 1);
	/* argv exactly as long as needed, NULL-terminated: ASan sees a read
	 * past argv[argc]. */
	char *args[MAX_ARGS + 1];
	int argc = 0;
	args[argc++] = (char *)names[tool];
	for (char *p = text; argc < MAX_ARGS && p < text + (size - 1);) {
		args[argc++] = p;
		p += strlen(p) + 1;
	}
	char **argv = malloc(sizeof(*argv) * (size_t)(argc + 1));
	if (!argv)
		abort();
	memcpy(argv, args, sizeof(*argv) * (size_t)argc);
	argv[argc] = NULL;
	check(tool, argc, argv);
	free(argv);
	free(text);
	return 0;
}
