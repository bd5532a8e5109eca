/* clock.c: the executors' fast monotonic clock (clock.h). */
#include <cpuid.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "env.h"

struct cbcmn__clock cbcmn__clock;

/* A pair (a counter reading, clock_gettime(), a counter reading) tells
 * when its time was read only as well as it is narrow: its middle is
 * taken as that moment, so a pair an interrupt split is off by up to half
 * its width (a 20 000-cycle bound put a third of the reads 0.3-0.8 us off
 * CLOCK_MONOTONIC here).  Trusted: at most twice the tightest seen, plus a
 * little; each refused pair widens the bound by a sixteenth, so a call
 * that became slower for good (a VM moved to another host) is trusted
 * again within a few dozen re-anchors; never past PAIR_MAX_CYCLES. */
#define PAIR_MAX_CYCLES 20000
#define PAIR_SLACK_CYCLES 64
#define PAIR_TRIES 3

/* The rate's sane range: a 100 MHz to a 20 GHz counter. */
#define MULT_MIN ((1ull << 32) / 20)
#define MULT_MAX ((1ull << 32) * 10)

/* An error past this is not steered away over a span but stepped over:
 * forward (a clock behind CLOCK_MONOTONIC by a millisecond was stopped,
 * a VM paused), or back (a suspend the counter ran through while
 * CLOCK_MONOTONIC, which leaves suspended time out, stood: only to what
 * the old record can have given, WAIT_SPAN; reanchor()). */
#define STEP_NS 1000000ll

/* Past this, a reader does not run the old record on past its span: it
 * re-anchors first, or waits for the reader that does (clock_slow()).
 * So no time the old record gave is above its time at cyc0 + WAIT_SPAN,
 * the floor of a step back. */
#define WAIT_SPAN (CBCMN__CLOCK_SPAN + CBCMN__CLOCK_SPAN / 8)

/* How far a re-anchor may bend the slope: a sixteenth of the rate. */
#define STEER_SHIFT 4

/* Spins on a writer's odd seq before giving the CPU away: a writer holds
 * it for a few instructions, unless it was preempted there. */
#define SPINS 64

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

/* Are the CPUs' counters in step?  The invariant bit says each ticks at a
 * constant rate, not that they agree: the kernel checks that (at boot, at
 * hotplug, and its clocksource watchdog after) and uses the counter as its
 * own clock only if they do.  A kernel that switched away from it later
 * is not seen (it is read once): docs/ACTORS.md "The wheel's clock". */
static bool counters_in_step(void)
{
	FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
	char buf[32] = "";
	if (!f)
		return false;
	bool ok = fgets(buf, sizeof buf, f) && strcmp(buf, "tsc\n") == 0;
	fclose(f);
	return ok;
}

/* Does CBCMN_CLOCK's value e ask for the monotonic clock? */
static bool env_monotonic(const char *e)
{
	return e && strcmp(e, "monotonic") == 0;
}

int cbcmn__clock_env_check(void)
{
	const char *e = cbcmn__env("CBCMN_CLOCK");
	if (!e || !*e || env_monotonic(e))
		return 0;
	fprintf(stderr, "cbcmn: CBCMN_CLOCK=%.40s: not monotonic\n", e);
	return -EINVAL;
}

static enum cbcmn__clock_mode choose_mode(void)
{
	if (env_monotonic(cbcmn__env("CBCMN_CLOCK")))
		return CBCMN__CLOCK_MONOTONIC;
	if (!cbcmn__cycles_invariant() || !counters_in_step())
		return CBCMN__CLOCK_MONOTONIC;
	return CBCMN__CLOCK_COUNTER;
}

void cbcmn__clock_init(struct cbcmn__clock *k, enum cbcmn__clock_mode mode)
{
	memset(k, 0, sizeof *k);
	atomic_store_explicit(&k->mode, mode, memory_order_relaxed);
}

/* The time at counter c by the record (cyc0, ns0, mult, rate): mult over
 * the first span, rate after it (a steered slope kept past its span
 * would overshoot).  A counter behind cyc0 (one that is not in step) is
 * cyc0: the clock holds rather than wraps. */
static uint64_t at(uint64_t c, uint64_t cyc0, uint64_t ns0, uint64_t mult, uint64_t rate)
{
	if ((int64_t)(c - cyc0) <= 0)
		return ns0;
	uint64_t d = c - cyc0, head = d < CBCMN__CLOCK_SPAN ? d : CBCMN__CLOCK_SPAN;
	unsigned __int128 ns = (unsigned __int128)head * mult + (unsigned __int128)(d - head) * rate;
	return ns0 + (uint64_t)(ns >> 32);
}

/* Under busy: whether a pair w cycles wide is tight enough to trust. */
static bool tight(struct cbcmn__clock *k, uint64_t w)
{
	if (w < k->pair_min || !k->pair_min)
		k->pair_min = w ? w : 1;
	if (w <= PAIR_MAX_CYCLES && w <= 2 * k->pair_min + PAIR_SLACK_CYCLES)
		return true;
	k->pair_min += k->pair_min / 16 + 1;
	return false;
}

/* Under busy: a trusted pair, its middle in *c and its time in *ns; or,
 * none trusted and any, the narrowest of the tries.  any: the readers
 * hold past WAIT_SPAN until a record is made, and a clock_gettime()
 * slower than PAIR_MAX_CYCLES for good (a clock source that traps: the
 * TSC marked unstable, hpet in a VM) would hold them for ever (review:
 * the clock stood still, and every timer with it); such a pair is off by
 * microseconds, where a step is a millisecond. */
static bool take_pair(struct cbcmn__clock *k, uint64_t *c, uint64_t *ns, bool any)
{
	uint64_t best = UINT64_MAX;
	for (int i = 0; i < PAIR_TRIES; i++) {
		uint64_t c0 = cbcmn__clock_cycles();
		uint64_t t = cbcmn__mono_ns();
		uint64_t w = cbcmn__clock_cycles() - c0;
		bool ok = tight(k, w);
		if (ok || (any && w < best)) {
			best = w;
			*c = c0 + w / 2;
			*ns = t;
			if (ok)
				return true;
		}
	}
	return best != UINT64_MAX;
}

/* Under busy: the rate from the last trusted pair to (c, ns), which
 * becomes the next one's start: > 0; 0 for the first pair; a rate no
 * counter has (outside 0.1-20 GHz, time standing): UINT64_MAX. */
static uint64_t measure(struct cbcmn__clock *k, uint64_t c, uint64_t ns)
{
	uint64_t pc = k->pair_c, pns = k->pair_ns, m = 0;
	k->pair_c = c;
	k->pair_ns = ns;
	if (!pc)
		return 0;
	if ((int64_t)(c - pc) <= 0 || ns <= pns)
		return UINT64_MAX;
	unsigned __int128 r = ((unsigned __int128)(ns - pns) << 32) / (c - pc);
	m = r >= MULT_MIN && r <= MULT_MAX ? (uint64_t)r : UINT64_MAX;
	return m;
}

/* Under busy: publish a record anchored at a counter read after seq
 * turned odd.  Every reader that kept the old record read its counter
 * before that store was seen (its second look at seq found it even), so
 * before the anchor: the old record's time there, which the new one
 * starts from, is past all of theirs.  step: ns added to it; a step back
 * (< 0) stops at floor, past every time the old record gave. */
static void publish(struct cbcmn__clock *k, uint64_t mult, uint64_t rate, int64_t step,
		    uint64_t floor)
{
	uint64_t s = atomic_load_explicit(&k->seq, memory_order_relaxed);
	uint64_t cyc0 = atomic_load_explicit(&k->cyc0, memory_order_relaxed);
	uint64_t ns0 = atomic_load_explicit(&k->ns0, memory_order_relaxed);
	uint64_t omult = atomic_load_explicit(&k->mult, memory_order_relaxed);
	uint64_t orate = atomic_load_explicit(&k->rate, memory_order_relaxed);
	atomic_store_explicit(&k->seq, s + 1, memory_order_relaxed);
	/* A full fence (mfence): the odd seq is visible to every reader
	 * before the anchor is read (pairs with the readers' second look). */
	atomic_thread_fence(memory_order_seq_cst);
	uint64_t c = cbcmn__clock_cycles(), ns;
	if (omult) {
		ns = at(c, cyc0, ns0, omult, orate);
		uint64_t back = step < 0 ? (uint64_t)-step : 0;
		if (step >= 0)
			ns += (uint64_t)step;
		else if (ns > floor)
			ns = ns - floor > back ? ns - back : floor;
	} else {
		/* No rate before: the clock was clock_gettime(), read by
		 * every reader that kept the old record before this point;
		 * anchored at the pair's middle, behind it. */
		ns = cbcmn__mono_ns();
		c += (cbcmn__clock_cycles() - c) / 2;
	}
	atomic_store_explicit(&k->cyc0, c, memory_order_relaxed);
	atomic_store_explicit(&k->ns0, ns, memory_order_relaxed);
	atomic_store_explicit(&k->mult, mult, memory_order_relaxed);
	atomic_store_explicit(&k->rate, rate, memory_order_relaxed);
	/* Release: pairs with the readers' acquire load of seq. */
	atomic_store_explicit(&k->seq, s + 2, memory_order_release);
}

/* Under busy: ahead of CLOCK_MONOTONIC by more than STEP_NS at the pair
 * (c, ns), past WAIT_SPAN: a suspend the counter ran through (s2idle on
 * a nonstop TSC), which CLOCK_MONOTONIC leaves out.  Slowed by a
 * sixteenth, a lead of an hour took 16 hours to shrink, and every stamp
 * a reader compares with its own CLOCK_MONOTONIC (the wheel's load_at,
 * load_idle_since) was that far off.  Stepped back, to no less than the
 * old record's time at cyc0 + WAIT_SPAN: no reader was given more
 * (clock_slow()), so the time still never goes back.  The old rate is
 * kept: the span just measured holds the suspend.
 *
 * No tighter floor: CLOCK_MONOTONIC at the pair plus the record's lead
 * bounds only the times given before the suspend, and a shorter suspend
 * earlier in the span (the counter still short of the span's end) let a
 * fast read, which leaves no trace, give its length on top (review:
 * 1.55 ms back, test_regression_two_suspends_in_a_span_never_go_back).
 * The writer cannot tell one suspend from two with a read between, so
 * suspends with short spells awake between them leave the clock up to
 * WAIT_SPAN ahead each; an idle spell longer than that lead, or the
 * steering, takes it back. */
static bool step_back(struct cbcmn__clock *k, uint64_t c, uint64_t ns)
{
	uint64_t cyc0 = atomic_load_explicit(&k->cyc0, memory_order_relaxed);
	uint64_t ns0 = atomic_load_explicit(&k->ns0, memory_order_relaxed);
	uint64_t mult = atomic_load_explicit(&k->mult, memory_order_relaxed);
	uint64_t rate = atomic_load_explicit(&k->rate, memory_order_relaxed);
	if (!mult || (int64_t)(c - cyc0) < (int64_t)WAIT_SPAN)
		return false;
	int64_t err = (int64_t)(ns - at(c, cyc0, ns0, mult, rate)); /* < 0: ahead */
	if (err >= -STEP_NS)
		return false;
	publish(k, rate, rate, err, at(cyc0 + WAIT_SPAN, cyc0, ns0, mult, rate));
	return true;
}

/* Under busy: re-anchor; whether a record was published.  The slope for
 * the next span is the rate measured over the last one, bent so that the
 * clock meets CLOCK_MONOTONIC at the span's end (by at most a sixteenth:
 * an error from a long stall is steered away over a few spans; past
 * STEP_NS forward it is stepped, and back after a suspend: step_back()). */
static bool reanchor(struct cbcmn__clock *k)
{
	uint64_t c = cbcmn__clock_cycles(), ns;
	/* Before the first span is over (or a span after a refused rate),
	 * no pair: every read comes here meanwhile. */
	if (k->pair_c && c - k->pair_c < CBCMN__CLOCK_SPAN)
		return false;
	/* Past WAIT_SPAN the readers hold: any pair rather than none. */
	bool late = atomic_load_explicit(&k->mult, memory_order_relaxed) &&
		    (int64_t)(c - atomic_load_explicit(&k->cyc0, memory_order_relaxed)) >=
			    (int64_t)WAIT_SPAN;
	if (!take_pair(k, &c, &ns, late))
		return false; /* interrupted thrice: the next slow read tries again */
	uint64_t rate = measure(k, c, ns);
	uint64_t omult = atomic_load_explicit(&k->mult, memory_order_relaxed);
	if (!rate)
		return false; /* the first pair: the next span measures the rate */
	if (step_back(k, c, ns))
		return true;
	if (rate == UINT64_MAX) {
		/* Not a clock's rate (a counter that stops, or races): with no
		 * rate yet every time given was clock_gettime()'s, so it stays
		 * that for good.  With one, the old record runs on: the clock
		 * must not go back to clock_gettime()'s time. */
		if (!omult)
			atomic_store_explicit(&k->mode, CBCMN__CLOCK_MONOTONIC, memory_order_relaxed);
		return false;
	}
	if (!omult) {
		publish(k, rate, rate, 0, 0);
		return true;
	}
	uint64_t now = at(c, atomic_load_explicit(&k->cyc0, memory_order_relaxed),
			  atomic_load_explicit(&k->ns0, memory_order_relaxed), omult,
			  atomic_load_explicit(&k->rate, memory_order_relaxed));
	int64_t err = (int64_t)(ns - now); /* > 0: the clock is behind */
	if (err > STEP_NS) {
		publish(k, rate, rate, err, 0);
		return true;
	}
	int64_t bend = (int64_t)((__int128)err * ((__int128)1 << 32) / (int64_t)CBCMN__CLOCK_SPAN);
	int64_t lim = (int64_t)(rate >> STEER_SHIFT);
	bend = bend > lim ? lim : bend < -lim ? -lim : bend;
	publish(k, (uint64_t)((int64_t)rate + bend), rate, 0, 0);
	return true;
}

/* Whoever finds the span over re-anchors; the others go on with the
 * record they have (its time runs on at `rate`, up to WAIT_SPAN).  1: a
 * record published; 0: tried, none; -1: another reader holds the pen.
 * hold: the reader will hold at the time WAIT_SPAN past the record of
 * seq s if none is made: 1 if the record is no longer s's (reread). */
static int try_reanchor(struct cbcmn__clock *k, bool hold, uint64_t s)
{
	/* Acquire: pairs with the release below, so the last writer's
	 * pair_* and pair_min are ours. */
	if (atomic_exchange_explicit(&k->busy, 1, memory_order_acquire))
		return -1;
	/* (Relaxed: seq changes only under the pen.) */
	int r = hold && atomic_load_explicit(&k->seq, memory_order_relaxed) != s ? 1 : reanchor(k);
	atomic_store_explicit(&k->busy, 0, memory_order_release);
	return r;
}

/* Held across a fork (runtime.c), so that the child never inherits a
 * record its writer was rewriting: with that writer left in the parent,
 * a seq left odd would make every read of the child spin for ever, and a
 * busy left taken keep its clock from re-anchoring again.  A writer holds
 * busy for a pair of clock reads and a record: waited for as it is. */
void cbcmn__clock_fork_lock(bool lock)
{
	struct cbcmn__clock *k = &cbcmn__clock;
	if (!lock) {
		/* Release: pairs with the next writer's acquire exchange. */
		atomic_store_explicit(&k->busy, 0, memory_order_release);
		return;
	}
	/* Acquire: pairs with the writer's release of busy, so its record,
	 * seq even, is the one the child copies. */
	for (int spins = 0; atomic_exchange_explicit(&k->busy, 1, memory_order_acquire); spins++) {
		if (spins < SPINS)
			cbcmn__cpu_relax();
		else
			sched_yield(); /* the writer was preempted */
	}
}

static enum cbcmn__clock_mode mode_of(struct cbcmn__clock *k)
{
	int m = atomic_load_explicit(&k->mode, memory_order_relaxed);
	if (m == CBCMN__CLOCK_UNSET) {
		/* Any thread may decide: they all decide the same. */
		m = choose_mode();
		atomic_store_explicit(&k->mode, m, memory_order_relaxed);
	}
	return (enum cbcmn__clock_mode)m;
}

/* The fast read's other cases: a writer at work, no rate yet, the span
 * over, no counter. */
uint64_t cbcmn__clock_slow(struct cbcmn__clock *k)
{
	if (mode_of(k) == CBCMN__CLOCK_MONOTONIC)
		return cbcmn__mono_ns();
	for (int spins = 0;; spins++) {
		/* As cbcmn__clock_read(). */
		uint64_t s = atomic_load_explicit(&k->seq, memory_order_acquire);
		uint64_t cyc0 = atomic_load_explicit(&k->cyc0, memory_order_acquire);
		uint64_t ns0 = atomic_load_explicit(&k->ns0, memory_order_acquire);
		uint64_t mult = atomic_load_explicit(&k->mult, memory_order_acquire);
		uint64_t rate = atomic_load_explicit(&k->rate, memory_order_acquire);
		uint64_t c = cbcmn__clock_cycles();
		/* No rate yet: the time is clock_gettime(), read inside the
		 * seqlock too (publish() starts after it). */
		uint64_t ns = mult ? at(c, cyc0, ns0, mult, rate) : cbcmn__mono_ns();
		/* The time given is clock_gettime()'s (no rate yet): a
		 * counter read after it (its lfence waits for the call) puts
		 * the second look at seq after it too. */
		if (!mult)
			c = cbcmn__cycles_ordered();
		bool whole = !(s & 1) && cbcmn__clock_seq_after(k, c) == s;
		if (whole && mult && (int64_t)(c - cyc0) >= (int64_t)WAIT_SPAN) {
			/* Long past the span (an idle spell, a suspend): the
			 * old record's time here may be far ahead of
			 * CLOCK_MONOTONIC, so not given: a new record first
			 * (reread), or, none made, the old one's time at
			 * WAIT_SPAN (held: never ahead, never back). */
			int r = try_reanchor(k, true, s);
			if (r > 0)
				continue;
			if (r == 0)
				return at(cyc0 + WAIT_SPAN, cyc0, ns0, mult, rate);
		} else if (whole) {
			if (!mult || c - cyc0 >= CBCMN__CLOCK_SPAN)
				try_reanchor(k, false, s);
			return ns;
		}
		if (spins < SPINS)
			cbcmn__cpu_relax();
		else
			sched_yield(); /* the writer was preempted mid-record */
	}
}
