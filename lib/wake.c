/* wake.c: parking and waking executors without lost or spurious wake-ups (seed 002).
 *
 * State:
 *   e->park         the executor's status + permit: EMPTY, SLEEPING (waiting
 *                   in its ring), NOTIFIED (a permit is waiting).  Unparking
 *                   a SLEEPING executor rings its doorbell (ring.c).
 *   rt->idle_bits   summary bitmap of parked executors; rt->num_idle.
 *   rt->num_searching  executors looking for work right now.
 *
 * A notifier (new work was queued) wakes at most one executor, and none if
 * someone is already searching: the searcher will find the work, and when
 * the last searcher finds some it wakes another if more is left.  So a
 * spawn into an idle runtime wakes exactly one executor (no herd).
 *
 * The lost-wake-up argument is the store-buffering pair:
 *   notifier: queue the work; fence(seq_cst); read num_searching / idle set
 *   parker:   set idle bit (seq_cst RMW); fence(seq_cst); re-check queues
 * Either the notifier sees the idle bit (and wakes the parker), or the
 * parker's re-check sees the work.  Leaving the searching state has the same
 * shape: decrement (seq_cst RMW), fence, re-check.
 */
#include <errno.h>
#include <sched.h>

#include "arch.h"
#include "backend.h"
#include "futex.h"
#include "probes.h"
#include "runtime.h"
#include "trace.h"

/* Parks while only work the steal gate refuses is left (cbcmn__park()):
 * from 50 us, doubling to 1 ms.  The longest is how late a queue stuck
 * behind one long run can be found by an idle executor that slept. */
#define GATE_PARK_MIN_NS 50000u
#define GATE_PARK_MAX_NS 1000000u

void cbcmn__futex_wake_one(_Atomic uint32_t *word) { cbcmn__futex_wake(word, 1); }

void cbcmn__futex_wait_zero(_Atomic uint32_t *word) { cbcmn__futex_wait(word, 0, NULL); }

/* Work some executor can take: the inject queue, deques, slots and held
 * actors. */
bool cbcmn__any_work(struct cbcmn_runtime *rt)
{
	if (atomic_load_explicit(&rt->inj_len, memory_order_relaxed))
		return true;
	for (uint32_t i = 0; i < rt->nexec; i++) {
		struct cbcmn__exec *x = rt->exec[i];
		/* held: the actor an owed notification is for (sched.c,
		 * owe_hold()), as much work as the slot's: missed, a last
		 * searcher stopped and left it to the debt's payment. */
		if (cbcmn__deque_len(&x->dq) > 0 ||
		    atomic_load_explicit(&x->slot, memory_order_relaxed) != NULL ||
		    atomic_load_explicit(&x->held, memory_order_relaxed) != NULL)
			return true;
	}
	return false;
}


static void idle_set(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	atomic_fetch_add_explicit(&rt->num_idle, 1, memory_order_seq_cst);
	CBCMN__PAUSE(CBCMN__P_IDLE_SET, e);
	atomic_fetch_or_explicit(&rt->idle_bits[e->id / 64], 1ull << (e->id % 64),
				 memory_order_seq_cst);
}

/* Clear our own idle bit.  False if a notifier cleared it first: it has
 * claimed us and a permit is on its way. */
static bool idle_try_clear(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	uint64_t bit = 1ull << (e->id % 64);
	uint64_t old = atomic_fetch_and_explicit(&rt->idle_bits[e->id / 64], ~bit,
						 memory_order_seq_cst);
	if (!(old & bit))
		return false;
	atomic_fetch_sub_explicit(&rt->num_idle, 1, memory_order_relaxed);
	return true;
}

/* Claim one parked executor: clear its bit.  NULL if none is parked. */
static struct cbcmn__exec *idle_claim(struct cbcmn_runtime *rt)
{
	uint32_t words = (rt->nexec + 63) / 64;
	for (uint32_t w = 0; w < words; w++) {
		uint64_t bits = atomic_load_explicit(&rt->idle_bits[w], memory_order_relaxed);
		while (bits) {
			uint64_t bit = bits & -bits;
			if (atomic_compare_exchange_weak_explicit(&rt->idle_bits[w], &bits,
								  bits & ~bit,
								  memory_order_seq_cst,
								  memory_order_relaxed)) {
				atomic_fetch_sub_explicit(&rt->num_idle, 1, memory_order_relaxed);
				return rt->exec[w * 64 + (uint32_t)__builtin_ctzll(bit)];
			}
		}
	}
	return NULL;
}

/* Give e its permit; ring its doorbell if it sleeps in its ring.  A
 * permit for an executor that is awake costs nothing more: the doorbell is
 * coalesced away (seed 001).  acq_rel: release publishes the notifier's
 * work; the wakee's acquire load of the word pairs with it. */
static void unpark(struct cbcmn__exec *e)
{
	uint32_t old = atomic_exchange_explicit(&e->park, CBCMN__PARK_NOTIFIED,
						memory_order_acq_rel);
	if (old == CBCMN__PARK_SLEEPING) {
		cbcmn__doorbell(e);
		return;
	}
	struct cbcmn__exec *me = cbcmn__tls_exec;
	if (me && me->rt == e->rt)
		CBCMN__COUNT(me, doorbells_coalesced, 1);
	CBCMN_PROBE3(doorbell_coalesced, me && me->rt == e->rt ? (int)me->id : -1, e->id,
		     e->rt->seg.rt_id);
}

/* Make e look at its mail (xmsg.c) or its cancelled I/O, without claiming
 * it from the idle set: if it was parked it clears its own bit. */
void cbcmn__kick(struct cbcmn__exec *e)
{
	unpark(e);
}

void cbcmn__notify_one(struct cbcmn_runtime *rt)
{
	/* Pairs with the fence in cbcmn__park() and cbcmn__searching_end(). */
	atomic_thread_fence(memory_order_seq_cst);
	cbcmn__notify_one_sc(rt);
}

/* A notifier that took the searching count found no bit to claim: an
 * executor is between its idle count and its bit (parking: it re-checks
 * every queue after the bit), or between clearing its bit and its count
 * (waking: it searches).  But other notifiers saw our count meanwhile and
 * left their wake-up to "the searcher": us.  So the count goes back as a
 * searcher stops (Tokio's and Go's rule, cbcmn__searching_end()): the
 * last one re-checks every queue.  True if work is left, to try again.
 * Handed back blind, such work was stranded beside a parker whose
 * re-check came before it, for as long as the other executors ran
 * (test_liveness).  Out of line: rare, and off the notifier's fast path. */
static __attribute__((cold, noinline)) bool notify_unclaimed(struct cbcmn_runtime *rt)
{
	CBCMN__PAUSE(CBCMN__P_NOTIFY_UNCLAIMED, NULL);
	if (atomic_fetch_sub_explicit(&rt->num_searching, 1, memory_order_seq_cst) != 1)
		return false; /* a searcher came: its own stop re-checks */
	/* Pairs with the fence in cbcmn__notify_one() and cbcmn__park(), as
	 * in cbcmn__searching_end(). */
	atomic_thread_fence(memory_order_seq_cst);
	return cbcmn__any_work(rt);
}

/* One try at waking a searcher.  True if it must be tried again: it
 * found no parked executor to claim, and work is left. */
static bool notify_try(struct cbcmn_runtime *rt)
{
	/* seq_cst loads: after the caller's seq_cst publication (a fence, or
	 * the seq_cst exchange that filled a slot) they take part in the
	 * store-buffering pair with the parker; on x86 they are plain loads. */
	if (atomic_load_explicit(&rt->num_searching, memory_order_seq_cst) != 0)
		return false;
	if (atomic_load_explicit(&rt->num_idle, memory_order_seq_cst) == 0) {
		/* Every live executor is busy and work waits: one more (seed
		 * 003's lookup array grows while there is parallel work). */
		if (rt->dynamic && cbcmn__nlive(rt) < cbcmn__nworkers(rt))
			cbcmn__exec_grow(rt); /* never the spare: the monitor's */
		return false;
	}
	/* Become "the one waking a searcher": a second notifier racing us sees
	 * num_searching != 0 and stays out. */
	uint32_t zero = 0;
	if (!atomic_compare_exchange_strong_explicit(&rt->num_searching, &zero, 1,
						     memory_order_seq_cst, memory_order_relaxed))
		return false;
	struct cbcmn__exec *e = idle_claim(rt);
	if (e) {
		/* The searching count we took is e's now: it wakes as a
		 * searcher (it sees its bit cleared, cbcmn__park()). */
		unpark(e);
		return false;
	}
	return notify_unclaimed(rt);
}

/* A notifier's tries before it gives the CPU away between tries. */
#define NOTIFY_SPIN_TRIES 16

void cbcmn__notify_one_sc(struct cbcmn_runtime *rt)
{
	/* A try fails again only while an executor is still between its two
	 * steps: a few instructions, unless it was preempted there, and then
	 * it needs the CPU. */
	for (unsigned tries = 0; notify_try(rt); tries++) {
		if (tries < NOTIFY_SPIN_TRIES)
			cbcmn__cpu_relax();
		else
			sched_yield();
	}
}

void cbcmn__unpark_all(struct cbcmn_runtime *rt)
{
	for (uint32_t i = 0; i < rt->nexec; i++)
		unpark(rt->exec[i]);
}

void cbcmn__searching_begin(struct cbcmn__exec *e)
{
	if (e->searching)
		return;
	e->searching = true;
	atomic_fetch_add_explicit(&e->rt->num_searching, 1, memory_order_seq_cst);
}

void cbcmn__searching_end(struct cbcmn__exec *e)
{
	if (!e->searching)
		return;
	e->searching = false;
	struct cbcmn_runtime *rt = e->rt;
	if (atomic_fetch_sub_explicit(&rt->num_searching, 1, memory_order_seq_cst) != 1)
		return;
	/* We were the last searcher: notifiers skipped waking anyone while we
	 * searched.  If work is left, hand it to another executor. */
	atomic_thread_fence(memory_order_seq_cst);
	if (cbcmn__any_work(rt))
		cbcmn__notify_one(rt);
}

/* Wait in the ring for our permit (a doorbell) or any other completion;
 * timeout_ns 0 means no limit.  True if we got the permit.  A completion,
 * a timeout or a signal returns false: the caller looks for work again. */
static bool wait_permit(struct cbcmn__exec *e, uint64_t timeout_ns)
{
	uint32_t w = CBCMN__PARK_EMPTY;
	/* acq_rel: also releases our ring's fd (new after a restart) to the
	 * waker whose exchange reads SLEEPING and rings it. */
	if (!atomic_compare_exchange_strong_explicit(&e->park, &w, CBCMN__PARK_SLEEPING,
						     memory_order_acq_rel, memory_order_acquire)) {
		/* NOTIFIED already: consume it.  An exchange, not a store: a
		 * second permit given since the CAS must be read (acquire,
		 * pairing with its giver's exchange, so we see its work),
		 * not silently overwritten. */
		atomic_exchange_explicit(&e->park, CBCMN__PARK_EMPTY, memory_order_acquire);
		return true;
	}
	cbcmn__be_wait(e, timeout_ns);
	w = CBCMN__PARK_SLEEPING;
	/* acquire: pairs with unpark()'s exchange. */
	if (atomic_compare_exchange_strong_explicit(&e->park, &w, CBCMN__PARK_EMPTY,
						    memory_order_acquire, memory_order_acquire))
		return false;
	/* NOTIFIED: its doorbell is reaped, or will be.  Consumed with an
	 * exchange, as above. */
	atomic_exchange_explicit(&e->park, CBCMN__PARK_EMPTY, memory_order_acquire);
	return true;
}

/* Executor e has found nothing: sleep until notified, or for timeout_ns
 * (0: no timeout).  Returns true if woken by a notification.  Either way e
 * comes back searching. */
bool cbcmn__park(struct cbcmn__exec *e, uint64_t timeout_ns)
{
	struct cbcmn_runtime *rt = e->rt;

	/* Stop searching first; we re-check everything below anyway. */
	if (e->searching) {
		e->searching = false;
		atomic_fetch_sub_explicit(&rt->num_searching, 1, memory_order_seq_cst);
	}
	/* Whether a cancellation must kick us awake (cbcmn__io_cancel_flag();
	 * the fence below pairs with its fence). */
	atomic_store_explicit(&e->io_live, e->ring.inflight || e->nmshots, memory_order_relaxed);
	idle_set(e);
	/* Pairs with the fence in cbcmn__notify_one(): see the file comment. */
	atomic_thread_fence(memory_order_seq_cst);
	bool notified;
	/* Work the steal gate refuses is not ours to wait for: its owner is
	 * running and gets to it (issue 15: looking again at once kept the
	 * thief spinning, neither stealing nor asleep).  But the gate's
	 * answer changes with time (a run that goes on too long lets it
	 * through, sched.c): sleep a while only, longer each time. */
	e->gated = false;
	if (cbcmn__stealable_work(e) || cbcmn__own_work(e) ||
	    atomic_load_explicit(&rt->shutdown, memory_order_acquire)) {
		if (idle_try_clear(e)) {
			cbcmn__searching_begin(e);
			return false;
		}
		/* A notifier claimed us between the two steps: take its permit
		 * (it is at most a few instructions away; completions that
		 * come first are reaped meanwhile). */
		while (!(notified = wait_permit(e, 0)))
			;
	} else {
		if (e->gated) {
			uint64_t g = e->gate_wait_ns ? e->gate_wait_ns : GATE_PARK_MIN_NS;
			if (timeout_ns == 0 || timeout_ns > g)
				timeout_ns = g;
			e->gate_wait_ns = g < GATE_PARK_MAX_NS / 2 ? 2 * g : GATE_PARK_MAX_NS;
		}
		CBCMN__COUNT(e, parks, 1);
		CBCMN_PROBE2(park, e->id, e->rt->seg.rt_id);
		uint64_t trace_t0 = cbcmn__trace_on(e) ? cbcmn__trace_now() : 0;
		notified = wait_permit(e, timeout_ns);
		if (!notified && !idle_try_clear(e)) {
			/* Woken otherwise, but claimed meanwhile: the permit,
			 * and the searching count it carries, are coming. */
			while (!(notified = wait_permit(e, 0)))
				;
		}
		CBCMN_PROBE3(unpark, e->id, notified, e->rt->seg.rt_id);
		CBCMN__TRACE(e, CBCMN_TRACE_PARK, trace_t0, cbcmn__trace_now() - trace_t0, notified, 0);
	}
	if (notified) {
		e->gate_wait_ns = 0;
		CBCMN__COUNT(e, wakes, 1);
		/* Claimed or not: a notifier that claimed us cleared our idle
		 * bit and counted us in num_searching; a kick or shutdown's
		 * permit comes without a claim, and we clear the bit and count
		 * ourselves.  The bit says which, whatever order the permits
		 * came in (a hint word set after the claim could be missed). */
		if (idle_try_clear(e))
			cbcmn__searching_begin(e);
		else
			e->searching = true;
	} else {
		cbcmn__searching_begin(e);
	}
	return notified;
}
