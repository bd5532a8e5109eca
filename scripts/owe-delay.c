/* owe-delay.c: how long an actor woken by a sender that computes on waits
 * (docs/ACTORS.md, "One chain, one executor").  A sends B a message, then
 * computes for 50 ms with no runtime call; B notes when it runs.  ROUNDS
 * rounds, each after 20 ms asleep (the other executor parks).  Default
 * config, 2 executors.  Prints B's start delays in microseconds, sorted.
 *   gcc -O2 -Ilib/include scripts/owe-delay.c build/lib/libcbcmn.a \
 *       -luring -lnuma -lpthread -o /tmp/owedelay && /tmp/owedelay */
#include <cbcmn.h>
#include <cbcmn_actor.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROUNDS 21
static cbcmn_actor_ref b;
static uint64_t sent, delay[ROUNDS];

static uint64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t actor_b(cbcmn_cx *cx, void *arg)
{
	cbcmn_actor_msg m;
	int i = 0;
	for (; i < ROUNDS && cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0; i++)
		delay[i] = now() - __atomic_load_n(&sent, __ATOMIC_ACQUIRE);
	(void)arg;
	return i < ROUNDS; /* a receive failed: no figures */
}

static int64_t actor_a(cbcmn_cx *cx, void *arg)
{
	cbcmn_actor_msg m = {.type = 1};
	for (int i = 0; i < ROUNDS; i++) {
		cbcmn_sleep(cx, 20000000);
		__atomic_store_n(&sent, now(), __ATOMIC_RELEASE);
		if (cbcmn_actor_send(NULL, cx, b, &m) != 0)
			return 1;
		for (uint64_t t = now(); now() - t < 50000000;) /* no runtime call */
			;
	}
	return arg != NULL;
}

static int64_t root(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	cbcmn_actor_opts ao = {.placement = CBCMN_PLACE_LOCAL};
	cbcmn_actor_ref a;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) != 0 ||
	    cbcmn_actor_spawn(cx, n, actor_b, arg, &ao, &b) != 0 ||
	    cbcmn_actor_spawn(cx, n, actor_a, arg, &ao, &a) != 0)
		return 1;
	return cbcmn_nursery_await_all(cx, n);
}

static int cmp(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b2 = *(const uint64_t *)y;
	return a < b2 ? -1 : a > b2;
}

int main(void)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cbcmn_runtime *rt;
	int64_t res = -1;
	if (cbcmn_runtime_create(&cfg, &rt) != 0 || cbcmn_runtime_run(rt, root, NULL, &res) != 0 ||
	    res != 0)
		return 1;
	cbcmn_runtime_destroy(rt);
	qsort(delay, ROUNDS, sizeof(delay[0]), cmp);
	for (int i = 0; i < ROUNDS; i++)
		printf("%llu%c", (unsigned long long)(delay[i] / 1000), i + 1 < ROUNDS ? ' ' : '\n');
	printf("median %llu us\n", (unsigned long long)(delay[ROUNDS / 2] / 1000));
	return 0;
}
