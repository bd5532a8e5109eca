/* owe-relay.c: where a relayed message's send-to-start time goes beside a
 * CPU hog (docs/ACTORS.md, "One chain, one executor").  Two actors on one
 * executor pass a message HOPS times, each computing RUN_NS with no
 * runtime call after its send, then receiving.  Per hop: the send, the
 * end of the sender's computation and the receiver's start, and the
 * sender thread's run-queue wait over its computation
 * (/proc/thread-self/schedstat).  A receiver starts after the sender's
 * computation unless the stall monitor pays the debt (cfg.owe_ns):
 * counted.  Mode "quiet": spin_ns none, stall_ns a minute, owe_ns 200 ms
 * (test_actor_notify's relay); "owe1": the same with owe_ns 1 ms.
 *   gcc -O2 -Ilib/include scripts/owe-relay.c build/lib/libcbcmn.a \
 *       -luring -lnuma -lpthread -o /tmp/owerelay
 *   scripts/hog.sh -- /tmp/owerelay owe1 */
#include <cbcmn.h>
#include <cbcmn_actor.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOPS 300
#define RUN_NS 2000000ull
#define SLOW_NS 10000000ull
#define PREEMPTED_NS 5000000ull

static struct hop {
	uint64_t sent, cend, start, rd_send, rd_cend;
} h[HOPS + 1];
static _Atomic int nhop, ended;
static cbcmn_actor_ref b;

static uint64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* This thread's time waiting for a CPU, ns (0 if unreadable). */
static uint64_t run_delay(void)
{
	unsigned long long run = 0, wait = 0;
	FILE *f = fopen("/proc/thread-self/schedstat", "r");
	if (f) {
		if (fscanf(f, "%llu %llu", &run, &wait) != 2)
			wait = 0;
		fclose(f);
	}
	return wait;
}

static int64_t relay(cbcmn_cx *cx, cbcmn_actor_ref to)
{
	cbcmn_actor_msg m = {.type = 1};
	for (;; to = 0) {
		if (!to) {
			if (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) != 0)
				return 1;
			to = m.from;
			int k = (int)m.body.u64[0];
			if (k > 0 && k <= HOPS)
				h[k].start = now();
		}
		int k = atomic_fetch_add(&nhop, 1) + 1;
		if (atomic_load(&ended) || k > HOPS)
			break;
		m.body.u64[0] = (uint64_t)k;
		h[k].rd_send = run_delay();
		h[k].sent = now();
		if (cbcmn_actor_send(NULL, cx, to, &m) != 0)
			return 1;
		for (uint64_t t = now(); now() - t < RUN_NS;) /* no runtime call */
			;
		h[k].cend = now();
		h[k].rd_cend = run_delay();
	}
	if (!atomic_exchange(&ended, 1)) { /* the other one ends too */
		m.body.u64[0] = 0;
		if (cbcmn_actor_send(NULL, cx, to, &m) != 0)
			return 1;
	}
	return 0;
}

static int64_t actor_a(cbcmn_cx *cx, void *arg)
{
	cbcmn_sleep(cx, 20000000); /* the other executor parks */
	return relay(cx, *(cbcmn_actor_ref *)arg);
}

static int64_t actor_b(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	return relay(cx, 0);
}

static int64_t root(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	cbcmn_actor_opts ao = {.mailbox_cap = 2, .placement = CBCMN_PLACE_LOCAL};
	cbcmn_actor_ref a;
	(void)arg;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0 ||
	    cbcmn_actor_spawn(cx, n, actor_b, NULL, &ao, &b) != 0)
		return 1;
	cbcmn_sleep(cx, 20000000);
	if (cbcmn_actor_spawn(cx, n, actor_a, &b, &ao, &a) != 0)
		return 1;
	return cbcmn_nursery_await_all(cx, n);
}

int main(int argc, char **argv)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	const char *mode = argc > 1 ? argv[1] : "owe1";
	if (strcmp(mode, "quiet") != 0 && strcmp(mode, "owe1") != 0) {
		fprintf(stderr, "usage: owe-relay [quiet|owe1]\n");
		return 2;
	}
	cfg.spin_ns = CBCMN_SPIN_NONE;
	cfg.stall_ns = 60000000000ull;
	cfg.owe_ns = strcmp(mode, "quiet") == 0 ? 200000000ull : 0;
	cbcmn_runtime *rt;
	int64_t res = -1;
	if (cbcmn_runtime_create(&cfg, &rt) != 0 || cbcmn_runtime_run(rt, root, NULL, &res) != 0 ||
	    res != 0)
		return 1;
	cbcmn_stats s;
	cbcmn_stats_snapshot(rt, &s, NULL, 0);
	cbcmn_runtime_destroy(rt);
	int slow = 0, preempted = 0, before = 0;
	uint64_t in_wait = 0, in_gap = 0;
	for (int k = 1; k <= HOPS; k++) {
		if (!h[k].start || !h[k].cend)
			continue;
		uint64_t gap = h[k].start - h[k].sent, wait = h[k].rd_cend - h[k].rd_send;
		if (gap >= SLOW_NS) {
			slow++;
			in_gap += gap;
			in_wait += wait < gap ? wait : gap;
		}
		if (wait >= PREEMPTED_NS) {
			preempted++;
			before += h[k].start < h[k].cend;
		}
	}
	printf("%s: %d of %d hops took >= %llu ms from send to start; the sender's run-queue "
	       "wait was %.0f%% of their time\n",
	       mode, slow, HOPS, SLOW_NS / 1000000, in_gap ? 100.0 * (double)in_wait / (double)in_gap : 0.0);
	printf("%d hops' senders waited >= %llu ms for a CPU; their receiver started before the "
	       "sender's computation ended in %d; executor wakes %llu\n",
	       preempted, PREEMPTED_NS / 1000000, before, (unsigned long long)s.total.wakes);
	return 0;
}
