/* cold-ring.c: the fiber actor ring whose hop docs/BENCHMARKS.md counts
 * line by line ("Nineteenth session, the cold hop's lines" and the
 * twentieth session's sections).  N fiber actors in a ring, mailboxes of
 * 2, a token passed HOPS hops, each actor sending to the next as
 * wl_actors.c's ring does.  Mode "pinned" (the default): every actor on
 * executor 0 of a one-executor runtime, the counts' setting; "default":
 * default placement on two executors, the bench's.  Prints the process
 * CPU ns a hop and exits non-zero unless the token stopped at actor
 * HOPS % N with HOPS hops counted.  Not built by make: scripts/cold-ring.sh
 * builds it and runs it under cachegrind.  By hand:
 *   gcc -O2 -Ilib/include scripts/cold-ring.c build/lib/libcbcmn.a \
 *       -luring -lnuma -lpthread -o /tmp/cold-ring
 *   /tmp/cold-ring 10000 250000 pinned */
#include <cbcmn.h>
#include <cbcmn_actor.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOKEN 1
#define STOP 2

static uint64_t n_actors, hops;
static int pinned = 1;
static cbcmn_actor_ref *refs;
static uint64_t cpu_start, cpu_end, end_at, end_count;

static uint64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A lost message would leave the ring waiting forever: stop here. */
static void send_or_die(cbcmn_cx *cx, cbcmn_actor_ref to, const cbcmn_actor_msg *m)
{
	int rc = cbcmn_actor_send(NULL, cx, to, m);
	if (rc != 0) {
		fprintf(stderr, "cold-ring: send failed: %d\n", rc);
		exit(1);
	}
}

/* body.u64[0]: hops left; [1]: hops made.  The token's last holder sends
 * STOP to actor 0, which passes it along the ring to actor N - 1. */
static int64_t ring_actor(cbcmn_cx *cx, void *arg)
{
	uint64_t i = (uintptr_t)arg;
	cbcmn_actor_ref next = 0;
#ifdef COLD_RING_MSG_ALIGN
	/* cold-ring.sh --align: the message in one line of the frame. */
	_Alignas(COLD_RING_MSG_ALIGN) cbcmn_actor_msg m;
#else
	cbcmn_actor_msg m;
#endif
	while (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0) {
		if (!next)
			next = refs[(i + 1) % n_actors];
		if (m.type == STOP) {
			if (i + 1 < n_actors)
				send_or_die(cx, next, &m);
			return 0;
		}
		if (m.body.u64[0] == 0) {
			cpu_end = cpu_ns();
			end_at = i;
			end_count = m.body.u64[1];
			m.type = STOP;
			send_or_die(cx, refs[0], &m);
			continue;
		}
		m.body.u64[0]--;
		m.body.u64[1]++;
		send_or_die(cx, next, &m);
	}
	return 1;
}

static int64_t ring_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc != 0)
		return rc;
	cbcmn_actor_opts ao = {.mailbox_cap = 2};
	if (pinned) {
		ao.placement = CBCMN_PLACE_PINNED;
		ao.shard = 0;
	}
	for (uint64_t k = 0; k < n_actors && rc == 0; k++)
		rc = cbcmn_actor_spawn(cx, n, ring_actor, (void *)(uintptr_t)k, &ao, &refs[k]);
	if (rc == 0) {
		cbcmn_actor_msg m = {.type = TOKEN, .body.u64 = {hops, 0}};
		cpu_start = cpu_ns();
		send_or_die(cx, refs[0], &m);
	} else {
		fprintf(stderr, "cold-ring: spawn failed: %d\n", rc);
		exit(1);
	}
	return cbcmn_nursery_await_all(cx, n);
}

static int parse_count(const char *s, uint64_t *v)
{
	char *end;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return s[0] >= '0' && s[0] <= '9' && *end == '\0' && errno == 0 && *v > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4 || parse_count(argv[1], &n_actors) || parse_count(argv[2], &hops) ||
	    n_actors > (1u << 24) ||
	    (argc == 4 && strcmp(argv[3], "pinned") && strcmp(argv[3], "default"))) {
		fprintf(stderr, "usage: cold-ring N HOPS [pinned|default] (N 1..16777216, HOPS >= 1)\n");
		return 2;
	}
	pinned = argc < 4 || strcmp(argv[3], "pinned") == 0;
	refs = calloc(n_actors, sizeof(*refs));
	if (!refs) {
		fprintf(stderr, "cold-ring: out of memory\n");
		return 1;
	}
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = pinned ? 1 : 2;
	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(&cfg, &rt);
	if (rc != 0) {
		fprintf(stderr, "cold-ring: runtime_create: %d\n", rc);
		return 1;
	}
	int64_t r = -1;
	rc = cbcmn_runtime_run(rt, ring_root, NULL, &r);
	cbcmn_runtime_destroy(rt);
	free(refs);
	if (rc != 0 || r != 0 || end_count != hops || end_at != hops % n_actors) {
		fprintf(stderr, "cold-ring: run %d, root %lld, token ended at %llu after %llu hops (expected %llu, %llu)\n",
			rc, (long long)r, (unsigned long long)end_at, (unsigned long long)end_count,
			(unsigned long long)(hops % n_actors), (unsigned long long)hops);
		return 1;
	}
	printf("%s N %llu hops %llu cpu_ns_per_hop %.1f\n", pinned ? "pinned" : "default",
	       (unsigned long long)n_actors, (unsigned long long)hops, (double)(cpu_end - cpu_start) / (double)hops);
	return 0;
}
