/* timer.h: private to libcbcmn: per-executor timers (a binary min-heap).
 *
 * A timer wakes an interruptible wait (iwait.h) at a deadline unless the
 * wait was claimed first.  The heap belongs to the executor the timer was
 * armed on and only that executor touches it; the waiter may resume on
 * another one, so a timer is a small heap object with two references (the
 * heap's and the waiter's) and a state both sides move with a CAS:
 *
 *   ARMED --fire--> FIRING --> DONE        the executor claimed the wait
 *   ARMED --disarm--> DEAD                 the waiter's wait ended first
 *
 * A waiter that finds FIRING waits (briefly) for DONE before its wait, on
 * its stack, may go away.
 *
 * Time is CLOCK_MONOTONIC in ns, or the runtime's virtual clock in lab mode
 * (cbcmn__now).
 */
#ifndef CBCMN_TIMER_H
#define CBCMN_TIMER_H

#include "iwait.h"
#include "runtime.h"

struct cbcmn__timer;

/* Arm a timer on e (the caller's executor) that claims iw as TIMEDOUT at
 * deadline.  NULL when out of memory. */
struct cbcmn__timer *cbcmn__timer_arm(struct cbcmn__exec *e, uint64_t deadline,
				      struct cbcmn__iwait *iw);
/* The waiter's wait has ended (whoever claimed it): drop the timer. */
void cbcmn__timer_disarm(struct cbcmn__timer *t);

/* Executor side: fire every timer due at now.  Returns how many woke. */
uint32_t cbcmn__timers_fire(struct cbcmn__exec *e, uint64_t now);
/* The earliest live deadline on e, or UINT64_MAX (drops dead timers). */
uint64_t cbcmn__timers_next(struct cbcmn__exec *e);
/* Free what is left (executor exit). */
void cbcmn__timers_fini(struct cbcmn__exec *e);

#endif
