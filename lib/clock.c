/* clock.c: the executors' fast monotonic clock (clock.h). */
#include <cpuid.h>
#include <time.h>

#include "clock.h"

__thread struct cbcmn__fclock cbcmn__tls_fclock;

/* A counter reading and clock_gettime() more than this apart were split
 * by an interrupt or a preemption: not a pair to measure the rate by. */
#define PAIR_MAX_CYCLES 20000

/* The rate's sane range: a 100 MHz to a 20 GHz counter. */
#define MULT_MIN ((1ull << 32) / 20)
#define MULT_MAX ((1ull << 32) * 10)

bool cbcmn__cycles_invariant(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(0x80000007, &a, &b, &c, &d))
		return false;
	return d & (1u << 8);
}

uint64_t cbcmn__mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void cbcmn__fclock_init(struct cbcmn__fclock *fc, bool cycles)
{
	*fc = (struct cbcmn__fclock){.init = true, .cycles = cycles};
}

static uint64_t given(struct cbcmn__fclock *fc, uint64_t ns)
{
	if (ns > fc->last)
		fc->last = ns;
	return fc->last;
}

/* A counter reading c0, clock_gettime()'s ns, a counter reading c1, in
 * that order: the rate over the span since the anchor, and the new anchor,
 * if the pair is tight enough to tell when ns was read. */
uint64_t cbcmn__fclock_pair(struct cbcmn__fclock *fc, uint64_t c0, uint64_t ns, uint64_t c1)
{
	if (c1 - c0 > PAIR_MAX_CYCLES)
		return given(fc, ns); /* keep the anchor: try again next read */
	uint64_t c = c0 + (c1 - c0) / 2;
	if (fc->ns0 && c > fc->cyc0 && ns > fc->ns0) {
		uint64_t dc = c - fc->cyc0;
		if (dc < CBCMN__FCLOCK_SPAN && !fc->mult)
			return given(fc, ns); /* too short to measure the rate by */
		unsigned __int128 m = ((unsigned __int128)(ns - fc->ns0) << 32) / dc;
		if (m < MULT_MIN || m > MULT_MAX) {
			fc->cycles = false; /* not a clock: clock_gettime() from now on */
			fc->mult = 0;
			return given(fc, ns);
		}
		fc->mult = (uint64_t)m;
	}
	fc->cyc0 = c;
	fc->ns0 = ns;
	return given(fc, ns);
}

/* A span has passed (or the rate is not known yet): clock_gettime(), and
 * from it the rate over the span and a new anchor. */
uint64_t cbcmn__fclock_slow(struct cbcmn__fclock *fc)
{
	if (!fc->init)
		cbcmn__fclock_init(fc, cbcmn__cycles_invariant());
	if (!fc->cycles)
		return given(fc, cbcmn__mono_ns());
	uint64_t c0 = cbcmn__cycles();
	uint64_t ns = cbcmn__mono_ns();
	return cbcmn__fclock_pair(fc, c0, ns, cbcmn__cycles());
}
