/* monitor-wakeups.c: the stall monitor's wake-ups per second (docs/SCHEDULER.md,
 * "Stalls").  idle: a runtime with nothing to do; light: 4 tasks of 500 us
 * runs that take no CPU (usleep), yielding between; busy: 4 tasks yielding
 * in a loop; chain: two actors passing a token (each hop's owed
 * notification cleared by the direct switch: the monitor looks every
 * owe_ns while they run, docs/ACTORS.md).  2 executors, default stall_ns.  Counts the voluntary
 * context switches of the thread named cbcmn-monitor over the window.
 *   gcc -O2 -Ilib/include scripts/monitor-wakeups.c build/lib/libcbcmn.a \
 *       -luring -lnuma -lpthread -o /tmp/monwake && /tmp/monwake busy 3 */
#include <cbcmn.h>
#include <cbcmn_actor.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int stop;

static long mon_switches(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	long v = -1;
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		/* Room for the longest name a directory entry may have. */
		char p[sizeof("/proc/self/task//status") + sizeof(de->d_name)], name[64] = "";
		snprintf(p, sizeof p, "/proc/self/task/%s/comm", de->d_name);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;
		if (!fgets(name, sizeof name, f))
			name[0] = 0;
		fclose(f);
		if (strncmp(name, "cbcmn-monitor", 13))
			continue;
		snprintf(p, sizeof p, "/proc/self/task/%s/status", de->d_name);
		if (!(f = fopen(p, "r")))
			continue;
		char line[256];
		while (fgets(line, sizeof line, f))
			if (!strncmp(line, "voluntary_ctxt_switches:", 24))
				v = atol(line + 24);
		fclose(f);
	}
	closedir(d);
	return v;
}

static int64_t yielder(cbcmn_cx *cx, void *arg)
{
	int nap = *(int *)arg;
	while (!atomic_load(&stop)) {
		if (nap)
			usleep(nap); /* a run of nap us that takes no CPU */
		cbcmn_yield(cx);
	}
	return 0;
}

static cbcmn_actor_ref peer[2];

/* Passes the token (main's first send, once both refs are known) to the
 * other until stop; the one that sees stop first passes it on once more,
 * marked, so that both end. */
static int64_t passer(cbcmn_cx *cx, void *arg)
{
	int me = (int)(intptr_t)arg;
	cbcmn_actor_msg m;
	while (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0) {
		if (m.body.u64[0])
			return 0;
		m.body.u64[0] = atomic_load(&stop);
		if (cbcmn_actor_send(NULL, cx, peer[!me], &m) || m.body.u64[0])
			return 0;
	}
	return 1;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "idle") && strcmp(argv[1], "busy") && strcmp(argv[1], "light") &&
	    strcmp(argv[1], "chain")) {
		fprintf(stderr, "monitor-wakeups: unknown mode '%s' (idle, busy, light or chain)\n", argv[1]);
		return 2;
	}
	int chain = argc > 1 && !strcmp(argv[1], "chain");
	int busy = argc > 1 && strcmp(argv[1], "idle") && !chain;
	static int nap;
	nap = argc > 1 && !strcmp(argv[1], "light") ? 500 : 0;
	double secs = argc > 2 ? atof(argv[2]) : 3;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(&cfg, &rt))
		return 1;
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(rt, NULL, &n))
		return 1;
	if (busy)
		for (int i = 0; i < 4; i++)
			cbcmn_nursery_spawn(NULL, n, yielder, &nap, NULL);
	cbcmn_actor_opts ao = {.placement = CBCMN_PLACE_LOCAL};
	for (int i = 0; chain && i < 2; i++)
		if (cbcmn_actor_spawn(NULL, n, passer, (void *)(intptr_t)i, &ao, &peer[i]))
			return 1;
	cbcmn_actor_msg first = {.type = 1};
	if (chain && cbcmn_actor_send(rt, NULL, peer[1], &first))
		return 1;
	usleep(300000);
	long a = mon_switches();
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	usleep((useconds_t)(secs * 1e6));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long b = mon_switches();
	atomic_store(&stop, 1);
	if (cbcmn_nursery_await_all(NULL, n)) {
		fprintf(stderr, "monitor-wakeups: a task or actor failed\n");
		return 1;
	}
	cbcmn_stats st;
	cbcmn_stats_snapshot(rt, &st, NULL, 0);
	double dt = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("%s: monitor wake-ups %.1f/s (%ld in %.2f s), tasks_run %llu, stalls %llu\n",
	       argc > 1 ? argv[1] : "idle", (b - a) / dt, b - a, dt,
	       (unsigned long long)st.total.tasks_run, (unsigned long long)st.total.stalls);
	cbcmn_runtime_destroy(rt);
	return 0;
}
