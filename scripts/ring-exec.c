/* ring-exec.c: what the second executor does during the fiber actor ring
 * (docs/BENCHMARKS.md, "Twenty-third session, the second executor's
 * cost").  N fiber actors in a ring, mailboxes of 2, a token passed HOPS
 * hops, as the bench's ring (tools/workloads/wl_actors.c), in one runtime
 * of WORKERS executors, one round per letter of MODES:
 *   d  default placement (the bench's ring_ns_per_hop)
 *   p  pinned on executor 0 (its ring_one_exec_ns_per_hop)
 *   q  pinned on executor 1
 *   z  default placement, the ring's driver pinned on executor 1 while a
 *      task pinned on executor 0 blocks its thread in nanosleep() until the
 *      ring ends (an executor that neither parks nor runs anything)
 * Per round: wall and process CPU ns a hop, each thread's CPU ns a hop
 * (schedstat), each executor's counter deltas (cbcmn_stats_snapshot()),
 * the monitor's wakes and owed notifications paid, and which executor
 * ran the ring.  Built by `make scripts`:
 *   build/scripts/ring-exec 10000 1000000 2 dpq */
#include <cbcmn.h>
#include <cbcmn_actor.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The library's own counters (lib/monitor.h), for tests and tools. */
struct cbcmn_runtime;
uint64_t cbcmn__monitor_wakeups(const struct cbcmn_runtime *rt);
uint64_t cbcmn__monitor_owe_paid(const struct cbcmn_runtime *rt);

#define TOKEN 1
#define STOP 2
#define MAX_THREADS 16
#define MAX_EXEC 4

static uint64_t n_actors, hops;
static char mode;
static cbcmn_actor_ref *refs;
static uint64_t t0, t1, c0, c1, count;
static _Atomic int ring_done; /* the sleeper's end (mode z) */

static uint64_t clock_of(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t ring_actor(cbcmn_cx *cx, void *arg)
{
	uint64_t i = (uintptr_t)arg;
	cbcmn_actor_ref next = 0;
	cbcmn_actor_msg m;
	while (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0) {
		/* Written before the token was sent, which this receive
		 * follows (an actor may start before its neighbour's spawn). */
		if (!next)
			next = refs[(i + 1) % n_actors];
		if (m.type == STOP) {
			if (i + 1 < n_actors && cbcmn_actor_send(NULL, cx, next, &m))
				return 1;
			return 0;
		}
		if (m.body.u64[0] == 0) {
			t1 = clock_of(CLOCK_MONOTONIC);
			c1 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
			count = m.body.u64[1];
			ring_done = 1;
			m.type = STOP;
			if (cbcmn_actor_send(NULL, cx, refs[0], &m))
				return 1;
			continue;
		}
		m.body.u64[0]--;
		m.body.u64[1]++;
		if (cbcmn_actor_send(NULL, cx, next, &m))
			return 1;
	}
	return 1;
}

static int64_t ring_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	cbcmn_actor_opts ao = {.mailbox_cap = 2};
	if (mode == 'p' || mode == 'q') {
		ao.placement = CBCMN_PLACE_PINNED;
		ao.shard = mode == 'q';
	}
	for (uint64_t k = 0; k < n_actors && !rc; k++)
		rc = cbcmn_actor_spawn(cx, n, ring_actor, (void *)(uintptr_t)k, &ao, &refs[k]);
	cbcmn_actor_msg m = {.type = TOKEN, .body.u64 = {hops, 0}};
	t0 = clock_of(CLOCK_MONOTONIC);
	c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
	if (!rc)
		rc = cbcmn_actor_send(NULL, cx, refs[0], &m);
	if (rc)
		cbcmn_nursery_cancel(n);
	int64_t a = cbcmn_nursery_await_all(cx, n);
	/* A ring that failed ends the sleeper too (mode z): it never sees
	 * the token's last hop, and nanosleep() is no checkpoint. */
	ring_done = 1;
	return rc ? rc : a;
}

/* Holds executor 0's thread in the kernel until the ring ends. */
static int64_t sleeper(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	struct timespec ts = {0, 1000000};
	while (!ring_done)
		nanosleep(&ts, NULL);
	return 0;
}

static int64_t z_root(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	rc = cbcmn_nursery_spawn_pinned(cx, n, 0, sleeper, NULL, NULL);
	if (!rc)
		rc = cbcmn_nursery_spawn_pinned(cx, n, 1, ring_root, arg, NULL);
	if (rc) {
		ring_done = 1;
		cbcmn_nursery_cancel(n);
	}
	int64_t a = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : a;
}

struct threads {
	int n;
	int tid[MAX_THREADS];
	uint64_t ns[MAX_THREADS];
};

static void threads_read(struct threads *t)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	t->n = 0;
	while (d && (de = readdir(d)) && t->n < MAX_THREADS) {
		if (de->d_name[0] == '.')
			continue;
		char path[300];
		unsigned long long ns = 0;
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", de->d_name);
		FILE *f = fopen(path, "r");
		if (f) {
			if (fscanf(f, "%llu", &ns) != 1)
				ns = 0;
			fclose(f);
		}
		t->tid[t->n] = atoi(de->d_name);
		t->ns[t->n++] = ns;
	}
	if (d)
		closedir(d);
}

static uint64_t thread_ns(const struct threads *t, int tid)
{
	for (int i = 0; i < t->n; i++)
		if (t->tid[i] == tid)
			return t->ns[i];
	return 0;
}

static int parse_count(const char *s, uint64_t *v)
{
	char *end;
	*v = strtoull(s, &end, 10);
	return s[0] >= '0' && s[0] <= '9' && *end == '\0' && *v > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	uint64_t workers;
	if (argc != 5 || parse_count(argv[1], &n_actors) || parse_count(argv[2], &hops) ||
	    parse_count(argv[3], &workers) || workers > MAX_EXEC || n_actors > (1u << 24) ||
	    strspn(argv[4], "dpqz") != strlen(argv[4]) ||
	    (workers < 2 && strpbrk(argv[4], "qz"))) {
		fprintf(stderr, "usage: ring-exec N HOPS WORKERS(1-4) MODES(d p q z; q, z: 2+ workers)\n");
		return 2;
	}
	refs = calloc(n_actors, sizeof(*refs));
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = (uint32_t)workers;
	cbcmn_runtime *rt;
	if (!refs || cbcmn_runtime_create(&cfg, &rt)) {
		fprintf(stderr, "ring-exec: no runtime\n");
		return 1;
	}
	for (const char *mo = argv[4]; *mo; mo++) {
		mode = *mo;
		ring_done = 0;
		cbcmn_stats s;
		cbcmn_executor_stats p0[MAX_EXEC], p1[MAX_EXEC];
		struct threads th0, th1;
		cbcmn_stats_snapshot(rt, &s, p0, MAX_EXEC);
		threads_read(&th0);
		uint64_t mw0 = cbcmn__monitor_wakeups(rt), op0 = cbcmn__monitor_owe_paid(rt);
		int64_t r = -1;
		int rc = cbcmn_runtime_run(rt, mode == 'z' ? z_root : ring_root, NULL, &r);
		if (rc || r || count != hops) {
			fprintf(stderr, "ring-exec: round %c: run %d, root %lld, %llu hops\n", mode, rc,
				(long long)r, (unsigned long long)count);
			return 1;
		}
		cbcmn_stats_snapshot(rt, &s, p1, MAX_EXEC);
		threads_read(&th1);
		double h = (double)hops;
		uint32_t busy = 0;
		for (uint32_t x = 1; x < workers; x++)
			if (p1[x].local_hits - p0[x].local_hits > p1[busy].local_hits - p0[busy].local_hits)
				busy = x;
		printf("%c ring_on %u wall %.1f cpu %.1f mon_wakes_per_mhop %.0f owe_paid %llu threads",
		       mode, busy, (double)(t1 - t0) / h, (double)(c1 - c0) / h,
		       (double)(cbcmn__monitor_wakeups(rt) - mw0) * 1e6 / h,
		       (unsigned long long)(cbcmn__monitor_owe_paid(rt) - op0));
		for (int i = 0; i < th0.n; i++)
			printf(" %d:%.1f", th0.tid[i], (double)(thread_ns(&th1, th0.tid[i]) - th0.ns[i]) / h);
		for (uint32_t x = 0; x < workers; x++) {
#define D(f) (unsigned long long)(p1[x].f - p0[x].f)
			printf(" | e%u tid %d runs %llu picks %llu steal_probes %llu steals %llu "
			       "stolen %llu parks %llu wakes %llu doorbells %llu coalesced %llu "
			       "xmsgs %llu",
			       x, p1[x].tid, D(tasks_run), D(local_hits), D(steal_attempts),
			       D(steal_successes), D(tasks_stolen), D(parks), D(wakes),
			       D(doorbells_sent), D(doorbells_coalesced), D(xmsgs_sent));
#undef D
		}
		printf("\n");
		fflush(stdout);
	}
	cbcmn_runtime_destroy(rt);
	free(refs);
	return 0;
}
