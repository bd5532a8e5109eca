/* clock.h: private to libcbcmn: the executors' fast monotonic clock.
 *
 * The actor wheel reads the clock at every hop (docs/ACTORS.md, "The hop's
 * fast path"), and clock_gettime(CLOCK_MONOTONIC) costs about 40 ns here,
 * a sixth of a hop.  This clock reads the time-stamp counter and turns its
 * cycles into CLOCK_MONOTONIC nanoseconds through one record the whole
 * process shares, as the vDSO does: (cyc0, ns0, mult, rate), published
 * under a sequence counter, re-anchored every CBCMN__CLOCK_SPAN cycles by
 * whichever reader finds the span over.  The time is one function of the
 * counter, continuous and increasing across re-anchors (each new record
 * starts where the old one was), so stamps from any threads are ordered
 * as the events that took them: a stamp handed to another thread is never
 * ahead of that thread's next read.  A re-anchor steers the slope so that
 * the clock meets CLOCK_MONOTONIC by the next span (it follows NTP's
 * slewing) instead of stepping back to it; past a millisecond it steps,
 * forward, or back after a suspend to no less than any time given
 * (clock.c, step_back()).
 *
 * Without an invariant counter, when the kernel does not use the counter
 * as its own clock source (it checks the CPUs' counters agree: ours are
 * then in step), before the first span has measured the rate, or with
 * CBCMN_CLOCK=monotonic in the environment, it is clock_gettime().  Why
 * not CLOCK_MONOTONIC_COARSE: docs/ACTORS.md "The wheel's clock". */
#ifndef CBCMN_CLOCK_H
#define CBCMN_CLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "arch.h"

/* Cycles between re-anchors: about 5 ms at 3 GHz. */
#define CBCMN__CLOCK_SPAN (1ull << 24)

enum cbcmn__clock_mode {
	CBCMN__CLOCK_UNSET = 0,  /* decided at the first slow read */
	CBCMN__CLOCK_COUNTER,    /* the counter, once its rate is measured */
	CBCMN__CLOCK_MONOTONIC,  /* clock_gettime() only */
};

struct cbcmn__clock {
	/* Even: the record is whole; odd: its writer is rewriting it.
	 * Readers load it before and after the record (a seqlock). */
	_Atomic uint64_t seq;
	/* The time at counter c >= cyc0: ns0 + (c - cyc0) * mult >> 32 over
	 * the first span, then on at `rate` (the measured ns per cycle << 32;
	 * mult is rate steered towards CLOCK_MONOTONIC).  mult 0: no rate yet
	 * (or never): clock_gettime().  Atomics, so that TSan sees the
	 * seqlock's reads as the races they are meant to be. */
	_Atomic uint64_t cyc0, ns0, mult, rate;
	_Atomic int mode;
	/* The writer's own, under `busy` (clock.c). */
	_Atomic int busy;
	uint64_t pair_c, pair_ns; /* the last trusted pair: the next rate's start */
	uint64_t pair_min;        /* the bound on a trusted pair's width */
};

/* The process's clock, read by cbcmn__now_ns(). */
extern struct cbcmn__clock cbcmn__clock;

uint64_t cbcmn__mono_ns(void); /* clock_gettime(CLOCK_MONOTONIC), in ns */
/* CBCMN_CLOCK at cbcmn_runtime_create(): unset, empty or "monotonic"; else
 * -EINVAL, said on stderr (as CBCMN_BACKEND's is).  The clock itself reads
 * it later, once per process, where it cannot fail: a typo would go
 * unnoticed, and the counter clock it meant to turn off would run on. */
int cbcmn__clock_env_check(void);
/* A private clock (tests): mode UNSET decides as the process's clock does. */
void cbcmn__clock_init(struct cbcmn__clock *k, enum cbcmn__clock_mode mode);
uint64_t cbcmn__clock_slow(struct cbcmn__clock *k);
/* Hold (lock) or let go of the process's clock's writer across a fork
 * (runtime.c's atfork handlers). */
void cbcmn__clock_fork_lock(bool lock);

/* The counter, read after every earlier load: a stamp another thread
 * handed us was loaded before our own count is read. */
static inline uint64_t cbcmn__clock_cycles(void)
{
	return cbcmn__cycles_ordered();
}

/* k's seq, loaded after counter c was read: the load's address depends
 * on c (plus a zero the compiler cannot see is one), so the CPU cannot
 * issue it before the counter read completes.  A second lfence would do
 * the same, and stall every later instruction meanwhile. */
static inline uint64_t cbcmn__clock_seq_after(struct cbcmn__clock *k, uint64_t c)
{
	uint64_t z = c;
	__asm__("" : "+r"(z));
	return atomic_load_explicit((_Atomic uint64_t *)((char *)&k->seq + (z ^ c)),
				    memory_order_relaxed);
}

/* CLOCK_MONOTONIC's time in ns, from k; any thread.  ordered: the
 * counter is read after every earlier load, so a stamp read after another
 * thread's was acquired is never below it; else the counter may be read
 * up to an out-of-order window (tens of ns) early, and the lfence saved
 * (cbcmn__now_ns_unordered()). */
static inline uint64_t cbcmn__clock_read_as(struct cbcmn__clock *k, bool ordered)
{
	/* Acquire: pairs with the writer's release store of an even seq, so
	 * the record read below is the one that seq published. */
	uint64_t s = atomic_load_explicit(&k->seq, memory_order_acquire);
	/* Acquire: each orders the second look at seq after it (a fence
	 * would too; TSan has none; on x86 these are plain loads). */
	uint64_t cyc0 = atomic_load_explicit(&k->cyc0, memory_order_acquire);
	uint64_t ns0 = atomic_load_explicit(&k->ns0, memory_order_acquire);
	uint64_t mult = atomic_load_explicit(&k->mult, memory_order_acquire);
	uint64_t c = ordered ? cbcmn__clock_cycles() : cbcmn__cycles(), d = c - cyc0;
	/* Unchanged: the record is whole, and the counter was read before
	 * any re-anchor's first store, so before its new anchor (clock.c).
	 * d >= SPAN: the span is over, or a counter behind cyc0. */
	if (__builtin_expect(cbcmn__clock_seq_after(k, c) == s && !(s & 1) && mult &&
				     d < CBCMN__CLOCK_SPAN,
			     1))
		return ns0 + (d * mult >> 32);
	return cbcmn__clock_slow(k);
}

static inline uint64_t cbcmn__clock_read(struct cbcmn__clock *k)
{
	return cbcmn__clock_read_as(k, true);
}

/* The process's fast clock, any thread: ordered. */
static inline uint64_t cbcmn__now_ns(void)
{
	return cbcmn__clock_read_as(&cbcmn__clock, true);
}

/* The same clock without the lfence, for a thread's own durations read
 * once a hop (the actor wheel: the fence cost its ring 6-9 % of CPU per hop,
 * docs/BENCHMARKS.md): its stamps are compared across threads, or with
 * an earlier one of its own, through cbcmn__ns_since() (below), off by
 * at most the out-of-order window rather than by two calibrations. */
static inline uint64_t cbcmn__now_ns_unordered(void)
{
	return cbcmn__clock_read_as(&cbcmn__clock, false);
}

/* The time from stamp then to now, 0 if then is later.  Ordered reads
 * (cbcmn__now_ns()) are ordered as the events that took them, but the
 * actor wheel needs it still: its reads are unordered (the counter may be
 * read a few dozen cycles early, even before an earlier read's), and a
 * `now` read once for a step of its loop and passed along meets stamps
 * taken after it: an executor's load_at loaded (relaxed) after our read,
 * an actor's hand-over time stamped by the executor that handed it over
 * after it, our own overload mark taken with a fresher `now`. */
static inline uint64_t cbcmn__ns_since(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

#endif
