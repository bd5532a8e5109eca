/* cbcmn-demo: a small fork-join workload (fib with a task per call) that
 * prints its answer, its time and the runtime's stats. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cbcmn.h"
#include "workloads/fib.h"
#include "cli/cli.h"
#include "cli/opts.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: cbcmn-demo [-n N] [-w WORKERS]\n"
		   "  Runs fib(N) (default 27) with one task per call on WORKERS executors\n"
		   "  (default: one per CPU) and prints the runtime's statistics.\n"
		   "EXAMPLES\n"
		   "  cbcmn-demo            fib(27) on every CPU\n"
		   "  cbcmn-demo -n 30 -w 2\n");
}

int main(int argc, char **argv)
{
	struct demo_opts o = {.n = 27};
	char err[256];
	cli_sigpipe_default();
	if (demo_opts_parse(argc, argv, &o, err, sizeof(err))) {
		fprintf(stderr, "cbcmn-demo: %s (try -h)\n", err);
		return 2;
	}
	if (o.help) {
		usage(stdout);
		return cli_stdout_flushed("cbcmn-demo") ? 0 : 1;
	}
	int n = o.n;
	uint32_t workers = o.workers;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers ? (uint32_t)workers : CBCMN_WORKERS_AUTO;
	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(&cfg, &rt);
	if (rc) {
		fprintf(stderr, "cbcmn-demo: cannot start the runtime: %s\n", cbcmn_strerror(rc));
		return 1;
	}
	struct fib f = {.n = n};
	struct timespec a, b;
	int64_t res;
	clock_gettime(CLOCK_MONOTONIC, &a);
	rc = cbcmn_runtime_run(rt, fib_task, &f, &res);
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (rc || res) {
		fprintf(stderr, "cbcmn-demo: fib failed: %s\n", cbcmn_strerror(rc ? rc : res));
		cbcmn_runtime_destroy(rt);
		return 1;
	}
	int64_t want = fib_seq(n);
	double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
	printf("fib(%d) = %lld (%s), %.1f ms on %u executors\n", n, (long long)f.out,
	       f.out == want ? "correct" : "WRONG", ms, cbcmn_runtime_workers(rt));

	cbcmn_stats st;
	cbcmn_executor_stats per[CBCMN_MAX_EXECUTORS];
	cbcmn_stats_snapshot(rt, &st, per, CBCMN_MAX_EXECUTORS);
	printf("tasks spawned %llu, completed %llu, local hit ratio %.3f, steal success rate %.3f\n",
	       (unsigned long long)st.tasks_spawned, (unsigned long long)st.tasks_completed,
	       st.local_hit_ratio, st.steal_success_rate);
	printf("rings: setup flags %#x%s, doorbells %s; placement %s%s\n", st.ring_setup_flags,
	       st.ring_setup_flags & (1u << 13) ? " (DEFER_TASKRUN)" : "",
	       st.msg_ring ? "MSG_RING" : "eventfd",
	       st.policy >= 0 ? cbcmn_policy_name((cbcmn_policy)st.policy) : "none (unpinned)",
	       st.oversubscribed ? ", oversubscribed" : "");
	printf("%4s %4s %4s %10s %10s %8s %8s %8s %8s %8s %6s %6s %6s %6s\n", "exec", "cpu",
	       "node", "run", "inline", "local", "inject", "steals", "stolen", "tries", "parks",
	       "wakes", "bells", "coal");
	for (uint32_t i = 0; i < st.executors; i++)
		printf("%4u %4d %4d %10llu %10llu %8llu %8llu %8llu %8llu %8llu %6llu %6llu %6llu "
		       "%6llu\n",
		       i, per[i].cpu, per[i].node, (unsigned long long)per[i].tasks_run,
		       (unsigned long long)per[i].inline_runs, (unsigned long long)per[i].local_hits,
		       (unsigned long long)per[i].inject_hits,
		       (unsigned long long)per[i].steal_successes,
		       (unsigned long long)per[i].tasks_stolen,
		       (unsigned long long)per[i].steal_attempts, (unsigned long long)per[i].parks,
		       (unsigned long long)per[i].wakes, (unsigned long long)per[i].doorbells_sent,
		       (unsigned long long)per[i].doorbells_coalesced);
	rc = cbcmn_runtime_destroy(rt);
	if (rc) {
		fprintf(stderr, "cbcmn-demo: destroy: %s\n", cbcmn_strerror(rc));
		return 1;
	}
	return f.out == want && cli_stdout_flushed("cbcmn-demo") ? 0 : 1;
}
