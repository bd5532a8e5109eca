/* clock.h: private to libcbcmn: the executors' fast monotonic clock.
 *
 * The actor wheel reads the clock at every hop (docs/ACTORS.md, "The hop's
 * fast path"), and clock_gettime(CLOCK_MONOTONIC) costs about 40 ns here,
 * a sixth of a hop.  This clock reads the time-stamp counter (about 12 ns)
 * and turns its cycles into CLOCK_MONOTONIC nanoseconds with a rate each
 * thread measures itself: every CBCMN__FCLOCK_SPAN cycles it reads
 * clock_gettime again, next to two counter reads, and takes the rate over
 * the span just ended and the new reading as its anchor.  So it never
 * strays from CLOCK_MONOTONIC by more than the rate's error over one span
 * (tens of ns), follows NTP's slewing, and needs no calibration loop.
 * Per thread (initial-exec TLS): no sharing, no atomics.  Without an
 * invariant counter (or before a thread's first span) it is
 * clock_gettime().  Why not CLOCK_MONOTONIC_COARSE: docs/ACTORS.md. */
#ifndef CBCMN_CLOCK_H
#define CBCMN_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "arch.h"

/* Cycles between anchors: about 5 ms at 3 GHz. */
#define CBCMN__FCLOCK_SPAN (1ull << 24)

struct cbcmn__fclock {
	uint64_t cyc0, ns0; /* the anchor: a counter reading and its time */
	uint64_t mult;      /* ns per cycle << 32; 0: clock_gettime() only */
	uint64_t last;      /* the last time given: never goes back */
	uint64_t pair_min;  /* the bound on a trusted pair's width (clock.c) */
	bool init, cycles;  /* set up; the counter is usable */
};

extern __thread struct cbcmn__fclock cbcmn__tls_fclock;

uint64_t cbcmn__mono_ns(void); /* clock_gettime(CLOCK_MONOTONIC), in ns */
void cbcmn__fclock_init(struct cbcmn__fclock *fc, bool cycles);
uint64_t cbcmn__fclock_slow(struct cbcmn__fclock *fc);
uint64_t cbcmn__fclock_pair(struct cbcmn__fclock *fc, uint64_t c0, uint64_t ns, uint64_t c1);

/* CLOCK_MONOTONIC's time in ns, from fc (one thread's). */
static inline uint64_t cbcmn__fclock_read(struct cbcmn__fclock *fc)
{
	if (__builtin_expect(fc->mult != 0, 1)) {
		uint64_t d = cbcmn__cycles() - fc->cyc0;
		/* d < SPAN: also false if another CPU's counter is behind. */
		if (__builtin_expect(d < CBCMN__FCLOCK_SPAN, 1)) {
			uint64_t ns = fc->ns0 + (d * fc->mult >> 32);
			if (__builtin_expect(ns > fc->last, 1))
				fc->last = ns;
			return fc->last;
		}
	}
	return cbcmn__fclock_slow(fc);
}

/* The calling thread's fast clock. */
static inline uint64_t cbcmn__now_ns(void)
{
	return cbcmn__fclock_read(&cbcmn__tls_fclock);
}

/* The time from stamp then to now, where then may be another thread's:
 * the threads' clocks disagree by up to microseconds (each has its own
 * anchor and rate; measured: a stamp handed to another thread was ahead
 * of that thread's clock in a quarter of the hand-overs, by up to 3.6 us),
 * so a stamp a moment old may be ahead of now: 0, not 2^64 - a few ns.
 * Also for a wheel whose executor's thread was replaced (sched.c): the
 * new thread's clock is not the old one's. */
static inline uint64_t cbcmn__ns_since(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

#endif
