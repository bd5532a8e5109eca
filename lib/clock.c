/* clock.c: the executors' fast monotonic clock (clock.h). */
#include <cpuid.h>
#include <time.h>

#include "clock.h"

__thread struct cbcmn__fclock cbcmn__tls_fclock;

/* A pair's middle is taken as the moment clock_gettime() read its time,
 * so a pair is trusted only as tight as the thread's tightest (an
 * uninterrupted call, about 60 cycles here) doubled, plus a little: a
 * pair an interrupt split is off by up to half its width (a 20 000-cycle
 * bound put a third of the reads 0.3-0.8 us off CLOCK_MONOTONIC here).
 * Each refused pair widens the bound by a sixteenth, so a call that
 * became slower for good (a VM moved to another host) is trusted again
 * within a few dozen re-anchors; never past PAIR_MAX_CYCLES. */
#define PAIR_MAX_CYCLES 20000
#define PAIR_SLACK_CYCLES 64
#define PAIR_TRIES 3

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

/* Whether a pair w cycles wide is tight enough to tell when its time was
 * read; the bound learns the thread's tightest (PAIR_MAX_CYCLES above). */
static bool tight(struct cbcmn__fclock *fc, uint64_t w)
{
	if (w < fc->pair_min || !fc->pair_min)
		fc->pair_min = w ? w : 1;
	if (w <= PAIR_MAX_CYCLES && w <= 2 * fc->pair_min + PAIR_SLACK_CYCLES)
		return true;
	fc->pair_min += fc->pair_min / 16 + 1;
	return false;
}

/* A tight pair's time ns, read at cycle c: the rate over the span since
 * the anchor, and the new anchor. */
static uint64_t anchor(struct cbcmn__fclock *fc, uint64_t c, uint64_t ns)
{
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

/* A counter reading c0, clock_gettime()'s ns, a counter reading c1, in
 * that order: a new anchor if the pair is tight, else the old one kept
 * (the next read tries again). */
uint64_t cbcmn__fclock_pair(struct cbcmn__fclock *fc, uint64_t c0, uint64_t ns, uint64_t c1)
{
	return tight(fc, c1 - c0) ? anchor(fc, c0 + (c1 - c0) / 2, ns) : given(fc, ns);
}

/* A span has passed (or the rate is not known yet): clock_gettime(), and
 * from it the rate over the span and a new anchor.  A few tries: an
 * interrupt or a preemption splits one pair, seldom the next. */
uint64_t cbcmn__fclock_slow(struct cbcmn__fclock *fc)
{
	if (!fc->init)
		cbcmn__fclock_init(fc, cbcmn__cycles_invariant());
	if (!fc->cycles)
		return given(fc, cbcmn__mono_ns());
	uint64_t ns = 0;
	for (int i = 0; i < PAIR_TRIES; i++) {
		uint64_t c0 = cbcmn__cycles();
		ns = cbcmn__mono_ns();
		uint64_t c1 = cbcmn__cycles();
		if (tight(fc, c1 - c0))
			return anchor(fc, c0 + (c1 - c0) / 2, ns);
	}
	return given(fc, ns);
}
