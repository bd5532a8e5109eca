/* monitor.h: private to libcbcmn: the stall monitor (monitor.c), sched.c's and runtime.c's view. */
#ifndef CBCMN_MONITOR_H
#define CBCMN_MONITOR_H

#include <stdatomic.h>
#include <stdbool.h>

#include "runtime.h"

/* Start rt's monitor thread (none in lab mode or with cfg.stall_ns
 * CBCMN_STALL_OFF): 0 or a negative errno.  Stop joins it; it is a no-op
 * without one.  Both from the thread creating or destroying rt. */
int cbcmn__monitor_start(struct cbcmn_runtime *rt);
/* Will rt have a monitor thread (what cbcmn__monitor_start() asks)? */
static inline bool cbcmn__monitor_wanted(const struct cbcmn_runtime *rt)
{
	return rt->watched && rt->nexec;
}
void cbcmn__monitor_stop(struct cbcmn_runtime *rt);

/* An executor left its park (sched.c, after cbcmn__park()): wake the
 * monitor if it sleeps because every executor was parked (MON_IDLE,
 * monitor.c).  seq_cst: the second half of the store-buffering pair with
 * the monitor (its MON_IDLE store, then its look at the idle bits; our
 * clearing of our idle bit in cbcmn__park(), then this look at its
 * word); a plain load on x86, after a park that costs a system call. */
void cbcmn__monitor_poke_slow(struct cbcmn_runtime *rt);
static inline void cbcmn__monitor_poke(struct cbcmn_runtime *rt)
{
	if (__builtin_expect(atomic_load_explicit(&rt->mon_word, memory_order_seq_cst) == 1, 0))
		cbcmn__monitor_poke_slow(rt);
}

/* An executor opened a debt (sched.c, owe_notify()): wake the monitor if
 * it sleeps longer than cfg.owe_ns (MON_LONG, monitor.c: nothing was
 * owed at its last look, it backs off up to stall_ns / 2), so that the
 * first debt after a quiet spell is looked at now and paid after owe_ns,
 * not after the monitor's back-off.  While debts come and go the monitor
 * looks every owe_ns and does not say MON_LONG: a chain's hops pay one
 * relaxed load of a word written only when the monitor backs off, and a
 * wake (a system call) at most once for each sleep longer than owe_ns.
 * Relaxed, no fence between our debt's store and this load: both may
 * pass the monitor's MON_LONG store and its look at the debts; the
 * monitor looks again owe_ns into its long sleep for such a debt
 * (monitor.c, mon_sleep_long(): the window). */
#define CBCMN__MON_LONG 3u
void cbcmn__monitor_owe_poke_slow(struct cbcmn_runtime *rt);
static inline void cbcmn__monitor_owe_poke(struct cbcmn_runtime *rt)
{
	if (__builtin_expect(atomic_load_explicit(&rt->mon_word, memory_order_relaxed) ==
				     CBCMN__MON_LONG,
			     0))
		cbcmn__monitor_owe_poke_slow(rt);
}

/* Is x stalled: has the monitor found its current run past cfg.stall_ns?
 * Relaxed: a stale answer either sends one woken task home (as before
 * the monitor) or runs it elsewhere (as for a parked home): both safe. */
static inline bool cbcmn__exec_stalled(const struct cbcmn__exec *x)
{
	uint64_t s = atomic_load_explicit(&x->stall_seq, memory_order_relaxed);
	return s && s == atomic_load_explicit(&x->diag.run_seq, memory_order_relaxed);
}

/* The runnable threads /proc/loadavg's text s counts (its fourth field,
 * "R/T"), or -1 if s is not such a text.  (monitor.c; tests.) */
int cbcmn__loadavg_runnable(const char *s);

/* The host's runnable threads averaged over the last 80 ms, from the
 * average avg before and a reading of run taken dt_ns after the one
 * before it.  Weighed by time, not by reading: the monitor reads only
 * while tasks run, and after a quiet spell one reading stands for the
 * whole span, where the readings of a busy moment long past would keep
 * the default spin off over the next bursts of work.  (monitor.c; tests.) */
double cbcmn__host_run_avg(double avg, double run, uint64_t dt_ns);

/* The spin gate's next state (monitor.c, host_load()): from busy, whether
 * run threads want more CPUs than there are: set above enter, cleared at
 * leave or below (leave <= enter: no flapping on a count that hovers).
 * (monitor.c; tests.) */
bool cbcmn__spin_gate_next(bool busy, double run, double enter, double leave);

/* The threads that want the host's CPUs, from /proc/loadavg's runnable
 * count: less the monitor reading it and the runtime's spinners (the
 * load the gate takes away, not load that should close it: counted, a
 * spinning pair on a quiet 2-CPU host read 2 and one more thread closed
 * the gate).  Never below zero: the two are read a moment apart.
 * (monitor.c; tests.) */
double cbcmn__host_others(int runnable, uint32_t spinning);

/* Wake-ups of rt's monitor so far (tests: a quiet runtime's monitor
 * sleeps).  0 without a monitor. */
uint64_t cbcmn__monitor_wakeups(const struct cbcmn_runtime *rt);
/* Owed notifications rt's monitor found open past cfg.owe_ns and paid
 * (tests).  0 without a monitor. */
uint64_t cbcmn__monitor_owe_paid(const struct cbcmn_runtime *rt);
/* Sleeps of the back-off's (longer than cfg.owe_ns, nothing owed) begun
 * in MON_LONG, and those of them a debt's poke cut short (tests: a debt
 * opened during one is paid through the poke).  0 without a monitor. */
uint64_t cbcmn__monitor_long_sleeps(const struct cbcmn_runtime *rt);
uint64_t cbcmn__monitor_owe_pokes(const struct cbcmn_runtime *rt);
/* Long sleeps cut short after their first owe_ns by a debt that opened
 * as the monitor said MON_LONG and did not poke it (the window,
 * mon_sleep_long()).  0 without a monitor. */
uint64_t cbcmn__monitor_owe_late(const struct cbcmn_runtime *rt);
/* Sleeps of the calm back-off at its longest (MON_CALM_OWES owe_ns, while
 * debts come and go and each is paid before the monitor's next look:
 * monitor.c, owe_look()).  0 without a monitor. */
uint64_t cbcmn__monitor_calm_sleeps(const struct cbcmn_runtime *rt);

#endif
