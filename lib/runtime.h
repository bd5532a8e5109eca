/* runtime.h: private to libcbcmn: tasks, executors, nurseries and the runtime root.
 *
 * Ownership (seed 000: no global runtime lock):
 *   - cbcmn_runtime: configuration, immutable after create; the inject queue
 *     (its own lock); the idle set and searching count (atomics).
 *   - cbcmn__exec: owned by its thread.  Only the deque top, the next-task
 *     slot, the park word and the counters are touched by other threads,
 *     each on its own cache line.
 *   - cbcmn_task: owned by whoever runs it; others touch only state, refs
 *     and joiner (atomics).
 *   - cbcmn_nursery: owned by its opener; children touch live, first_error,
 *     cancelled (atomics).
 */
#ifndef CBCMN_RUNTIME_H
#define CBCMN_RUNTIME_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cbcmn.h"
#include "cpuquota.h"
#include "deque.h"
#include "diag.h"
#include "arch.h"
#include "fault.h"
#include "lock.h"
#include "ring.h"
#include "rng.h"
#include "stack.h"
#include "statseg.h"

#define CBCMN__CACHELINE 64

/* ---- waiting ---------------------------------------------------------- */

struct cbcmn__iwait;
struct cbcmn__iwnode;
struct cbcmn__scope;
struct cbcmn__wcell;
struct cbcmn__ep;
struct cbcmn__trace;
struct cbcmn__tseg;

/* Someone waiting for an event: a suspended task, or a thread outside the
 * runtime sleeping on the futex.  Lives on the waiter's own stack; the
 * waker reads it once, before it wakes the waiter, and never again. */
struct cbcmn__waiter {
	struct cbcmn_task *task; /* NULL: a thread */
	_Atomic uint32_t futex;  /* threads: 0 waiting, 1 woken */
};

/* ---- tasks ------------------------------------------------------------ */

enum cbcmn__task_state {
	CBCMN__T_READY = 0,    /* queued, or not yet queued */
	CBCMN__T_RUNNING,      /* on an executor */
	CBCMN__T_PARKING,      /* about to suspend: registered as a waiter */
	CBCMN__T_BLOCKED,      /* suspended, waiting for a wake */
	CBCMN__T_WAKE_PENDING, /* woken while still PARKING: requeue at once */
	CBCMN__T_DONE,         /* completed or cancelled, result set */
};

enum cbcmn__task_flags {
	CBCMN__TF_ABI = 1u << 0,    /* fn is int64_t (*)(void *) (janus ABI) */
	CBCMN__TF_HANDLE = 1u << 1, /* a join handle was handed out */
	CBCMN__TF_PINNED = 1u << 2, /* runs on executor `shard` only, never stolen */
	CBCMN__TF_ABI_NOARG = 1u << 3, /* with TF_ABI: fn is int64_t (*)(void) */
	CBCMN__TF_ABI_I32 = 1u << 4,   /* with TF_ABI: fn is int32_t (*)(void *) */
	/* A task the runtime runs for itself (the metrics server's): no
	 * budget, CapSpawn (a root's) whatever the profile, and its failure
	 * is not its nursery's (no fail-fast: one that could not start, no
	 * stack, must not cancel its siblings; its spawner looks after it). */
	CBCMN__TF_RUNTIME = 1u << 5,
	CBCMN__TF_LAST = CBCMN__TF_RUNTIME,
};
/* cbcmn_task.flags is 16 bits (its line's room: the stack check's bound). */
_Static_assert(CBCMN__TF_LAST < (1u << 16), "every CBCMN__TF_* fits cbcmn_task.flags");

#define CBCMN__JOIN_DONE ((struct cbcmn__waiter *)1)

/* Budget components, indexing cbcmn_task.refund. */
enum { CBCMN__B_OPS, CBCMN__B_MEMORY, CBCMN__B_SPAWN, CBCMN__B_CHANNEL, CBCMN__B_SYSCALLS,
       CBCMN__B_N };

struct cbcmn_task {
	/* Laid out by when it is touched (docs/SCHEDULER.md, "The task
	 * record"): lines 0-2 are what spawning, running and ending a task
	 * read and write, so that a thief running a stolen task pulls three
	 * lines from the spawner's cache, not all six; lines 3-5 are budget
	 * accounting, written at the spawn and read again only by a limited
	 * task's slow paths.  Line 0 first: cbcmn.h's struct cbcmn__cx_hot,
	 * for CBCMN_CHECKPOINT(). */
	int64_t countdown;                /* ops until the budget slow path */
	void *sp;                         /* saved context while suspended */
	struct cbcmn__stack *stack;       /* the stack it owns, if it has one */
	struct cbcmn__exec *exec;         /* executor running it (or last to) */
	struct cbcmn_runtime *rt;
	union {
		cbcmn_task_fn fn;
		int64_t (*abi_fn)(void *);
	};
	void *arg;
	struct cbcmn_nursery *nursery;    /* the nursery it belongs to */
	/* Line 1. */
	union {
		/* Budget (owner-only, budget.c): ops until the next fairness
		 * yield, excluding the countdown window.  Here, not in line 3
		 * with the rest of the budget: an actor's wheel reads it at
		 * every run (actor_sched.c, quantum_left()).  Every spawn
		 * writes it. */
		uint64_t yield_left;
		/* Free, sent home by another executor: the record
		 * FREE_SKIP places further down its batch, fetched ahead
		 * of its reuse (task.c). */
		struct cbcmn_task *free_skip;
	};
	struct cbcmn_nursery *open;       /* innermost nursery it has open */
	struct cbcmn_task *inline_parent; /* runs on this task's stack, if set */
	struct cbcmn_task *next;          /* intrusive: inject, yield list, free list */
	_Atomic(struct cbcmn__waiter *) joiner; /* waiting joiner, or JOIN_DONE */
	void **landing;                   /* overflow landing pad (a jmp buffer) */
	_Atomic uint32_t state;
	_Atomic uint32_t refs;            /* runtime's reference + join handle */
	uint16_t flags;                   /* CBCMN__TF_*, fixed at spawn */
	/* cbcmn__stack_check()'s bound, kept here where every run reads, so
	 * that a runtime call does not touch the stack's descriptor (a line
	 * of its own at the stack's top): the room from stack down to the
	 * bound, in CBCMN__ROOM_UNIT bytes, rounded down (a frame in it is
	 * safe); 0: ask the descriptor (a borrowed or unguarded stack, an
	 * open yellow zone: cbcmn__stack_room_of()). */
	uint16_t stack_room;
	uint32_t home;                    /* executor whose cache it returns to */
	/* Line 2. */
	int64_t result;
	uint64_t id;
	void *abi_slot;                   /* one pointer for the janus adapter */
	struct cbcmn__oblig *obligations; /* obligations it holds (obligation.h); owner only */
	/* Its registry waits' node (iwait.h) while it runs guarded, or NULL:
	 * written as every run begins and ends, so here, not in line 5 (a
	 * thief running a stolen task missed on line 5 for it). */
	struct cbcmn__iwnode *iwn;
	uint32_t shard;                   /* CBCMN__TF_PINNED: its executor */
	_Atomic uint32_t joined;          /* the handle was joined */
	uint32_t caps;                    /* CBCMN_CAP_* it holds */
	bool payer_ref;
	bool limited;                     /* set with a finite component (cbcmn__budget_consistent()) */
	uint8_t wait_kind;                /* CBCMN__G_*: what it blocks on (diag.h) */
	uint8_t mem_off;                  /* where its malloc block begins, below it;
					   * CBCMN__MEM_IN_STACK: in its stack (task.c) */
	/* Its last actor send over the lanes (actor_mbox.c): posted from
	 * executor lane_e1 - 1 (0: none) to lane_h, the lane_seq-th there
	 * (the low 32 bits: the line is full).  Read as every run ends. */
	uint32_t lane_seq;
	uint16_t lane_e1, lane_h;

	/* Line 3.  Budget (owner-only), see budget.c.  ops excludes the
	 * countdown window.  The components are read by a charge only when
	 * limited (line 2) is set: a task not limited has every component
	 * unlimited (cbcmn__budget_consistent()). */
	uint64_t ops;
	struct cbcmn_task *opener;        /* its nursery's opener (NULL: a thread); spawn and budget */
	uint64_t memory, spawn_count, channel_ops, syscalls;
	uint64_t stack_charge;            /* memory its spawner paid for its stack */
	_Atomic uint32_t killed;          /* its nursery gave up on it */
	/* Children it paid for that have not ended (they will refund it), and
	 * how many of them wait for budget themselves (budget.c). */
	_Atomic uint32_t owed;
	/* Line 4.  Budget coming in from others: children's leftovers,
	 * recharges. */
	_Atomic uint64_t refund[CBCMN__B_N];
	_Atomic uint32_t owed_exh;
	/* The same for the children among them drawn some spawn_count: only
	 * these can give spawns back (a :service child is drawn none,
	 * SPEC-021 §8.2), so only these keep a wait for a spawn from
	 * counting as exhausted.  gives_spawns: this task is one of them. */
	_Atomic uint32_t owed_spawns, owed_exh_spawns;
	/* A task holds it as its payer (payer_ref): a refund may pass
	 * through it after it ends, so it holds its own payer then too
	 * (budget.c).  Set before it ends, by itself or a child ending. */
	_Atomic bool payer_held;
	bool gives_spawns;
	/* The component its budget wait is for (under its budget lock). */
	uint8_t budget_comp;
	/* Under its budget lock (cbcmn__budget_lock()): it has ended, and
	 * refunds sent to it go on to its payer. */
	bool budget_closed;
	/* Its wait on its nursery's exhausted list, while listed (under the
	 * nursery's lock). */
	_Atomic(struct cbcmn__iwait *) budget_iw;
	/* Line 5. */
	cbcmn_budget cap_limit;           /* CapBudget: self-recharge left */
	int64_t unwind_result;            /* what the landing pad returns */
	/* Its spawner, which paid its draw and its stack and gets back what is
	 * left when it ends (budget.c).  NULL: nothing to give back (a root,
	 * or nothing limited).  payer_ref (line 2): a reference to it is held
	 * until this record is freed (a late refund to this task, once it has
	 * ended, is passed on to its payer); read only then. */
	struct cbcmn_task *payer;
	uint64_t io_timeout_ns;           /* cbcmn_io_set_timeout(); read by I/O calls */
};
/* The lines above: task.c aligns records to a cache line. */
_Static_assert(offsetof(struct cbcmn_task, yield_left) == 1 * CBCMN__CACHELINE &&
		       offsetof(struct cbcmn_task, result) == 2 * CBCMN__CACHELINE &&
		       offsetof(struct cbcmn_task, ops) == 3 * CBCMN__CACHELINE &&
		       offsetof(struct cbcmn_task, refund) == 4 * CBCMN__CACHELINE &&
		       offsetof(struct cbcmn_task, cap_limit) == 5 * CBCMN__CACHELINE &&
		       offsetof(struct cbcmn_task, iwn) < 3 * CBCMN__CACHELINE &&
		       offsetof(struct cbcmn_task, lane_h) < 3 * CBCMN__CACHELINE,
	       "struct cbcmn_task: hot fields (what every run touches) in lines 0-2, "
	       "budget in 3-5");

/* ---- nurseries -------------------------------------------------------- */

/* live packs three counts in one word, so that every change sees all of
 * them in one atomic step and nobody needs to look at the nursery after
 * its own step (the opener may free it right then, nursery.c):
 *   bit 0       ARMED: the opener waits in await_all;
 *   bits 1..23  children waiting for budget (budget.c), at most 2^23 - 1;
 *   bits 24..   children not yet ended, from a bias far above their number. */
#define CBCMN__LIVE_ARMED 1
#define CBCMN__LIVE_EXH_ONE 2
#define CBCMN__LIVE_SHIFT 24
#define CBCMN__LIVE_ONE (INT64_C(1) << CBCMN__LIVE_SHIFT)
#define CBCMN__LIVE_BIAS (INT64_C(1) << 37)
#define CBCMN__LIVE_COUNT(v) ((v) >> CBCMN__LIVE_SHIFT)
#define CBCMN__LIVE_EXH(v) (((v) & (CBCMN__LIVE_ONE - 1)) >> 1)
/* Nothing left for the opener to wait for: no child, or only children
 * waiting for budget that nobody will give while it waits. */
#define CBCMN__LIVE_SETTLED(v) (CBCMN__LIVE_COUNT(v) == CBCMN__LIVE_EXH(v))

struct cbcmn_nursery {
	struct cbcmn_runtime *rt;
	struct cbcmn_task *owner;         /* opener, NULL for a thread */
	struct cbcmn_nursery *parent;     /* owner's nursery: the cancel chain */
	struct cbcmn_nursery *prev_open;  /* owner's next-outer open nursery */
	struct cbcmn_nursery *next_free;
	struct cbcmn__waiter await_w;     /* the opener, while ARMED */
	struct cbcmn__mutex lock;         /* CBCMN__LOCK_NURSERY: the list below,
					   * and a holder's cancel vs awaited */
	struct cbcmn__iwait *exhausted;   /* children waiting for budget */
	/* Opener-only: children it spawned, less those that ended inline under
	 * it (nursery.c): a signed count, as a child someone else spawned
	 * may end there. */
	int64_t owner_spawns;
	_Alignas(CBCMN__CACHELINE) _Atomic int64_t live; /* see nursery.c */
	_Atomic int64_t first_error;
	_Atomic uint32_t cancelled;       /* 1: cancelled by request; 2: by failure */
	_Atomic uint32_t closing;         /* await_all has begun: no new spawns */
	/* Rarely written, here where the line has room (the first two are
	 * full: a fourth line would cost every fork-join nursery). */
	_Atomic uint32_t refs;            /* the opener's + cbcmn_nursery_hold()s */
	uint32_t fork_gen;                /* rt->fork_gen: EFORKED without rt */
	uint32_t diag_home;               /* opener-only: where the snapshot counts it open (diag.h) */
	/* Written under lock, once held: await_all is over.  Atomic for
	 * cbcmn_nursery_release()'s look without the lock (relaxed there:
	 * ordered by refs). */
	_Atomic bool awaited;
	/* Its cancel scope (iwait.h): the waits its tasks block in, made
	 * when the first one blocks, published under rt->scope_lock. */
	_Atomic(struct cbcmn__scope *) scope;
};

/* ---- executors -------------------------------------------------------- */

/* The lock of an executor's registry of interruptible waits (iwait.c):
 * the waits themselves are listed by their nurseries' scopes, one cell
 * per executor, each under its executor's lock. */
struct cbcmn__iwait_reg {
	struct cbcmn__mutex lock; /* CBCMN__LOCK_IWAIT */
};

/* An executor's life (seed 003's lookup array: live ones are [0, nlive)). */
enum { CBCMN__EX_STOPPED = 0, CBCMN__EX_STARTING, CBCMN__EX_RUNNING, CBCMN__EX_RETIRING };

/* Park word values (the executor's status bits + its one permit). */
enum { CBCMN__PARK_EMPTY = 0, CBCMN__PARK_SLEEPING = 1, CBCMN__PARK_NOTIFIED = 2 };

/* What the scheduler does right after a task switched back to it. */
enum cbcmn__post {
	CBCMN__POST_NONE = 0,
	CBCMN__POST_SUSPEND, /* task is PARKING: make it BLOCKED or requeue */
	CBCMN__POST_YIELD,   /* put the task on the yield list */
	CBCMN__POST_EXIT,    /* the fiber finished: recycle its stack */
};

/* Counters: written by the owning executor only (a relaxed load + store,
 * no locked instruction), read by anyone. */
/* ---- cross-shard message lanes (xmsg.c) ------------------------------- */

/* A message between executors (seed 003): allocated by the sender, handed
 * to the receiver through the (sender, receiver) lane, and sent back
 * through the reverse lane as the acknowledgement, after which the sender
 * reuses it.  Exactly once: a lane entry is consumed by one receiver. */
enum { CBCMN__XM_WAKE = 1, CBCMN__XM_SPAWN, CBCMN__XM_CALL, CBCMN__XM_VCALL };

/* Room in a message for what a call carries by value (cbcmn__xmsg_get()):
 * an actor message and its address, the message body travelling over the
 * lane in the sender's pool (actor_mbox.c). */
#define CBCMN__XM_DATA 80u

struct cbcmn__xmsg {
	uint32_t kind;
	uint32_t src;                     /* the sender's executor */
	struct cbcmn_task *task;          /* WAKE, SPAWN */
	void (*fn)(struct cbcmn__exec *e, void *arg); /* CALL, on the receiver */
	void *arg;
	struct cbcmn__xmsg *next;         /* free list / backlog */
	uintptr_t backlog_ent;            /* the lane entry, while backlogged */
	_Alignas(8) unsigned char data[CBCMN__XM_DATA]; /* a call's by-value argument */
};

/* One single-producer single-consumer ring of tagged message pointers
 * (bit 0: an acknowledgement).  head is the consumer's, tail the producer's. */
#define CBCMN__LANE_CAP 256u
struct cbcmn__lane {
	_Alignas(CBCMN__CACHELINE) _Atomic uint32_t head;
	_Alignas(CBCMN__CACHELINE) _Atomic uint32_t tail;
	_Alignas(CBCMN__CACHELINE) _Atomic uintptr_t slot[CBCMN__LANE_CAP];
};

#define CBCMN__COUNT(e, field, n)                                                          \
	atomic_store_explicit(&(e)->ss->ctr.field,                                         \
			      atomic_load_explicit(&(e)->ss->ctr.field, memory_order_relaxed) + (n), \
			      memory_order_relaxed)

struct cbcmn__exec {
	/* Shared with thieves. */
	struct cbcmn__deque dq;
	_Alignas(CBCMN__CACHELINE) _Atomic(struct cbcmn_task *) slot; /* next-task slot */
	/* Task records other executors freed, on their way home (LIFO). */
	_Alignas(CBCMN__CACHELINE) _Atomic(struct cbcmn_task *) remote_free;
	_Atomic uint32_t remote_n; /* its length, roughly (task.c) */
	/* Interruptible waits of tasks blocked here (iwait.h). */
	_Alignas(CBCMN__CACHELINE) struct cbcmn__iwait_reg iwaits;
	/* Written by thieves (sched.c, pick_stuck()): the run of this
	 * executor's (diag.run_seq) a thief first saw its gate refuse, and
	 * when.  A heuristic pair: a race costs one early steal at most. */
	_Alignas(CBCMN__CACHELINE) _Atomic uint64_t gate_seq;
	_Atomic uint64_t gate_ns;
	/* Written by the stall monitor (monitor.c): the run (diag.run_seq)
	 * it found holding the executor past cfg.stall_ns; 0 none.  Equal to
	 * the run_seq now: stalled (cbcmn__exec_stalled()). */
	_Atomic uint64_t stall_seq;
	/* 1 while the monitor takes tasks out of its lanes' messages
	 * (cbcmn__stall_rescue()); its mail drain waits for 0. */
	_Atomic uint32_t rescuing;
	/* Shared with wakers. */
	_Alignas(CBCMN__CACHELINE) _Atomic uint32_t park;
	_Atomic int32_t start_err;       /* its last start failed: why (sched.c) */
	_Atomic uint64_t start_failed_ns; /* ... and when */
	_Atomic uint32_t lstate;         /* CBCMN__EX_*: is its thread running */
	_Atomic bool joinable;           /* its thread is to be joined at destroy */
	/* Mail: lanes with entries (bit per source), and their summary. */
	_Alignas(CBCMN__CACHELINE) _Atomic uint32_t mail_any;
	_Atomic uint32_t io_cancel;       /* cells were pushed on cancel_cells (io.c) */
	/* The cells whose I/O waits it is to look at for cancellation
	 * (iwait.c), a stack any canceller pushes on and it pops whole. */
	_Atomic(struct cbcmn__wcell *) cancel_cells;
	_Atomic uint32_t io_live;         /* I/O waits here, published at park (iwait.c) */
	_Atomic(struct cbcmn_task *) remote; /* pinned work from outside threads (LIFO) */
	_Atomic uint64_t mail_bits[CBCMN_MAX_EXECUTORS / 64]; /* lanes with messages */
	_Atomic uint64_t ack_bits[CBCMN_MAX_EXECUTORS / 64];  /* lanes with only acks, maybe */
	/* in[src]: the lane from executor src, made by src on first use. */
	_Atomic(struct cbcmn__lane *) *in;
	/* Its slot in the statistics segment (statseg.h): counters, load
	 * figures any executor reads without a lock (seed 003), state. */
	_Alignas(CBCMN__CACHELINE) struct cbcmn__seg_exec *ss;
	int32_t cpu, node;                /* where it is pinned (-1: not), fixed */
	/* Its CPU's core kind (cbcmn_cpu_info.kind: 0 performance or the only
	 * kind, 1 efficiency); -1: not pinned.  Fixed (actor_sup.c reads it). */
	int32_t kind;
	/* What the snapshot reads: waits, nurseries, obligations (diag.h). */
	struct cbcmn__diag diag;

	/* Owner only from here on. */
	_Alignas(CBCMN__CACHELINE) struct cbcmn_runtime *rt;
	uint32_t id;
	struct cbcmn__trace *trace;       /* its trace ring, NULL: off (trace.h) */
	uint32_t tick;
	uint32_t slot_runs;
	bool searching;
	bool wake_here;                   /* channel wakes: pull woken tasks here (waitq.h) */
	/* The owed notification (sched.c, owe_notify()): an actor woken
	 * into our empty slot by the actor running here, whose notification
	 * of an idle executor waits for our next switch (the sender's block
	 * runs it here next).  The debt's number, odd while it is open
	 * (cbcmn__owe_open()); even, the last one's, once we paid or cleared
	 * it.  Written by us only, relaxed; the stall monitor reads it and
	 * pays a debt it finds open, unchanged, at two looks cfg.owe_ns
	 * apart (monitor.c, owe_look()), and cannot close it: should our own
	 * payment come while the actor still waits in our slot, it notifies
	 * again (one more idle executor woken, on a runtime with two idle). */
	_Atomic uint32_t owe;
	/* The actor that debt is for, while it is open: kept here, not in
	 * the slot, as the sender's block typically switches straight to it
	 * (sched.c, held_take()).  Only we store a task here (into NULL);
	 * only we take it with a plain load and store, with the wheel's
	 * gate closed; every other take is an exchange: ours while a run
	 * holds the gate open (the debt paid: into the slot), the stall
	 * monitor's and a thief's with the gate taken (RESCUE: sched.c,
	 * held_grab(); the thief's once our run has gone on for
	 * SLOT_STEAL_NS, as for the slot), forward_runnable()'s.  NULL
	 * beside a non-empty slot, and after every pick of the loop. */
	_Atomic(struct cbcmn_task *) held;
	/* Runs begun by a direct switch, without the loop (sched.c,
	 * switch_direct()), wrapping: how many hops took the fast path
	 * (tests/test_actor_direct.c). */
	uint32_t direct_runs;
	struct cbcmn_task *current;
	void *sched_sp;                   /* the scheduler loop's context */
	uint64_t sched_fpcw;              /* its FP control state, fixed (arch.h) */
	enum cbcmn__post post;
	struct cbcmn_task *post_task;
	struct cbcmn__stack *post_stack;
	struct cbcmn_task *reap;          /* a task whose thread died (sched.c) */
	struct cbcmn_task *yq_head, *yq_tail; /* yielded tasks, FIFO */
	struct cbcmn_task *pq_head, *pq_tail; /* pinned tasks ready here, FIFO */
	struct cbcmn__ring ring;          /* the io_uring backend's (ring.c) */
	struct cbcmn__ep *ep;             /* the epoll backend's, else NULL (epoll.c) */
	struct cbcmn__xmsg *xm_free;      /* messages back from their receivers */
	struct cbcmn__awheel *wheel;      /* actors' wheel, made on first use (actor_sched.c) */
	/* Who may touch that wheel (actor_sched.c, CBCMN__GATE_*): the owner,
	 * nobody (the owner is in a task run), or the stall monitor, which
	 * moves the actors off a stalled executor's wheel.  Here, among the
	 * owner's fields: the owner writes it at every run, the monitor
	 * looks only while the executor is stalled. */
	_Atomic uint32_t wheel_gate;
	void **xm_slabs;                  /* what they were allocated in */
	uint32_t xm_nslabs;
	struct cbcmn__xmsg **backlog;     /* per receiver: entries its full lane refused */
	struct cbcmn__xmsg **backlog_tail;
	uint32_t nbacklog;
	/* Actor sends over the lanes (actor_mbox.c), per other executor x:
	 * lane_posted[x], how many this one's tasks posted on (this, x) (its
	 * thread only); lane_done[x], how many of those x put in mailboxes
	 * (x's drain; read by a sender that must wait for its own). */
	uint64_t *lane_posted;
	_Atomic uint64_t *lane_done;
	/* Tasks parked until lane (x, this) has put their post number
	 * (actor_mbox.c, lane_park()): per x, a list in that order, under
	 * the actor table's lw_lock. */
	struct cbcmn__lane_wait **lw_head, **lw_tail;
	/* The last actor whose take here left a room wake owed (actor_mbox.c,
	 * room_hand()), for the stall monitor to pay if this executor's run
	 * blocks outside the runtime (cbcmn__mb_room_rescue()).  May be
	 * stale: slots outlive their actors, and a pay with nothing owed does
	 * nothing. */
	_Atomic(struct cbcmn__actor *) room_debtor;
	uint32_t steal_fails;             /* failed steal rounds in a row (cooldown) */
	bool gated;                       /* the gate refused work since the last look (sched.c) */
	uint64_t gate_wait_ns;            /* how long to park while only gated work is left */
	uint32_t nmshots;                 /* streams and acceptors open here (stream.c) */
	struct cbcmn__mshot *mshots;      /* ... and their list */
	uint64_t busy_since, busy_tasks;  /* for avg_task_ns */
	uint64_t window_start, idle_ns;   /* for busy_pct */
	struct cbcmn__rng rng;
	uint32_t rr_next;
	/* look()'s draws (actor_sched.c): what is left of half a word of
	 * rng's, 3 bits a look, below a stop bit; below 8, a new word.  In
	 * rr_next's padding: the fields after it keep their places. */
	uint32_t look_bits;
	struct cbcmn__stack_cache stacks;
	/* A stack kept for a task started only to end (its end calls the
	 * program back) when no other is left, or NULL; busy while one ends
	 * on it (sched.c, end_stack_take()). */
	struct cbcmn__stack *end_stack;
	bool end_stack_busy;
	struct cbcmn__timer **timers;     /* min-heap by deadline (timer.c) */
	uint32_t ntimers, timers_cap;
	_Atomic uint32_t timers_dead;     /* disarmed, still in the heap */
	struct cbcmn_task *free_tasks;
	uint32_t nfree_tasks;
	/* Records of another executor's, freed here, on their way home in
	 * one push per batch (task.c). */
	struct cbcmn_task *out_head, *out_tail;
	uint32_t out_n, out_home;
	/* The last records pushed on out_head, for their free_skip links
	 * (task.c). */
	struct cbcmn_task *out_recent[4];
	/* Children of live_n that ended here, not yet taken off its live
	 * count: one step for a run of them (nursery.c). */
	struct cbcmn_nursery *live_n;
	int64_t live_pending;
	struct cbcmn_nursery *free_nurseries;
	uint32_t nfree_nurseries;
	/* Free actor slots, this executor's alone (actor.c): spawns take and
	 * halts give here, the table's lock only once a batch. */
	struct cbcmn__actor *free_slots, *full_slots;
	uint32_t nfree_slots;
	uint64_t id_next, id_end;         /* task ids, taken in blocks */
	pthread_t thread;
	pthread_t dead_thread;            /* a thread that died: its successor joins it */
	bool replacing;                   /* ... or that made way for a new one (sched.c) */
	void *altstack;
	size_t altstack_size;
	void *san_sched_fiber;            /* TSan: the scheduler's own fiber */
	void *asan_fake;                  /* ASan: the scheduler's fake stack */
	void *asan_sys_fake;              /* ASan: the system stack's fake stack */
	const void *sched_stack_lo;       /* ASan: the thread's own stack */
	size_t sched_stack_size;
	/* The system stack: the runtime's part of an actor's block and send
	 * runs there, not on the actor's (sched.c, cbcmn__sys_park()); NULL
	 * top: none (its mapping failed at the thread's start), they run on
	 * the task's.  Per executor: a task that switched re-reads its own
	 * executor's (actor_mbox.c, send_entry()). */
	char *sys_stack;
	size_t sys_stack_size;
	void *sys_top;
};

/* ---- the runtime root ----------------------------------------------- */

#define CBCMN__BUDGET_LOCKS 16

struct cbcmn_runtime {
	cbcmn_config cfg;                 /* immutable after create */
	bool child_budget_limited;        /* cfg.child_budget has a finite part */
	/* cfg.caps' CapBudget was implied (native, nothing finite), not
	 * granted: a child given a finite budget does not inherit it
	 * (cbcmn__caps_grant()). */
	bool cap_budget_implicit;
	/* Native profile: components of cfg.child_budget the program left
	 * unset (1 << CBCMN__B_*), where a child takes a share (budget.c). */
	uint32_t child_share;
	/* CBCMN__LOCK_TASK_BUDGET: a task's incoming budget against its end,
	 * striped by task id (budget.c). */
	struct cbcmn__mutex budget_locks[CBCMN__BUDGET_LOCKS];
	uint32_t fork_gen;                /* cbcmn__fork_gen at create (runtime.c) */
	/* 1, 2, ... in the process, never reused: what a runtime is, where
	 * its address may be a destroyed one's (chan.c's payer). */
	uint64_t serial;
	bool lab;                         /* lab mode: virtual clock, seeded picks */
	/* A stall monitor watches the executors (monitor.c): not in lab mode,
	 * nor with cfg.stall_ns CBCMN_STALL_OFF. */
	bool watched;
	_Atomic uint64_t vclock;          /* lab mode's clock, ns */
	uint32_t nexec;
	struct cbcmn__exec **exec;
	/* Its own lines: the pool's lock is taken by every executor whose
	 * stack cache runs dry or over, and exec[] above is read on every
	 * inline run (a gauge's home) and every wake. */
	_Alignas(CBCMN__CACHELINE) struct cbcmn__stack_pool stacks;
	size_t page;
	/* cbcmn_trace_drain(): one caller at a time, and where it goes on. */
	_Atomic bool trace_draining;
	uint32_t trace_next;
	struct cbcmn__tseg *tseg;         /* the rings' shared segment, NULL: none (trace.h) */

	/* Inject queue: work from outside the executors, FIFO. */
	_Alignas(CBCMN__CACHELINE) struct cbcmn__mutex inject_lock;
	struct cbcmn_task *inj_head, *inj_tail;
	_Atomic uint64_t inj_len;

	/* Idle set and search accounting (seed 002). */
	_Alignas(CBCMN__CACHELINE) _Atomic uint32_t num_searching;
	_Atomic uint32_t num_idle;
	/* Searchers that spin before parking, at most spin_max (about half
	 * the CPUs, at least one: sched.c, search()); the rest park at once.
	 * spin_cpus: the executors' CPUs it was computed from, under the
	 * cgroup's limit; both re-read while the runtime runs
	 * (cbcmn__spin_max_update()).  cg_limit: that limit in CPUs (0:
	 * none), found at create: finding it opens a dozen cgroup and /proc
	 * files, which a running runtime's threads must not do behind the
	 * program's back (a descriptor count taken meanwhile is off by one:
	 * test_io's leak checks saw it).  With the default spin_ns and a
	 * stall monitor, create opens the limit's files once (cgq: the
	 * limit is read from them), the runtime holds them for its life,
	 * and the monitor reads them again on its tick (monitor.c: a pod
	 * resized in place); else create reads the limit once, holding
	 * nothing. */
	_Atomic uint32_t num_spinning;
	_Atomic uint32_t spin_max, spin_cpus;
	_Atomic double cg_limit;
	struct cbcmn__cgq cgq;
	/* The host has more runnable threads than CPUs (the monitor's
	 * reading of /proc/loadavg, monitor.c): no searcher spins long.
	 * Only with the default spin_ns, where the process may use every CPU
	 * (spin_host_gate). */
	_Atomic bool host_busy;
	bool spin_host_gate, spin_quota_gate;
	/* Under a cgroup CPU limit (spin_quota_gate: with the default
	 * spin_ns, whatever the limit at create), no searcher
	 * spins long while more executors than this are awake (sched.c,
	 * spin_room()); 0: no such bound. */
	_Atomic uint32_t spin_awake_max;
	_Atomic uint64_t idle_bits[CBCMN_MAX_EXECUTORS / 64];

	_Alignas(CBCMN__CACHELINE) _Atomic uint32_t shutdown;
	_Atomic uint32_t started;         /* executors that finished start-up */
	_Atomic uint64_t next_id_block;
	_Atomic uint64_t cancels;         /* cancelled nurseries still alive */
	/* CBCMN__LOCK_SCOPE: the tree of cancel scopes (iwait.c), and the
	 * scope for waits no nursery's scope could take (out of memory).
	 * Not on cancels' line: every spawn reads cancels, and the first
	 * wait of each nursery's tasks takes this lock. */
	_Alignas(CBCMN__CACHELINE) struct cbcmn__mutex scope_lock;
	struct cbcmn__scope *scope_fallback;
	/* Registry waits without the lock (iwait.h): cancellations walking
	 * the scopes now. */
	_Atomic uint32_t iw_scanning;
	_Atomic uint32_t thread_nurseries; /* opened by threads (cx NULL), not yet awaited */
	/* Channel operations threads (cx NULL) are blocked in, and channel
	 * reservations they hold (chan.c, thread_in()). */
	_Atomic uint32_t thread_chan;
	/* Live CBCMN__TF_RUNTIME tasks (the metrics servers'), so that
	 * destroy's look (runtime.c, program_busy()) never takes one for a
	 * task of the program's.  Each change, with the spawn or completion
	 * count it goes with, lies between a begin and an end
	 * (cbcmn__runtime_count_begin/end): a look that finds as many begun
	 * after it as ended before it saw every such change whole or not at
	 * all (a sequence count with several writers). */
	_Atomic uint32_t runtime_tasks;
	_Atomic uint64_t runtime_counts_begun, runtime_counts_ended;
	_Atomic uint32_t lost_exec;       /* an executor thread died unreplaced */
	/* Statistics (statseg.h), the runtime's own in seg.hdr: tasks spawned
	 * and ended and doorbells rung by threads outside the executors,
	 * executors started and retired. */
	struct cbcmn__seg seg;
	/* Of seg's ext_doorbells, those rung by a MSG_RING without a ring
	 * (SQPOLL rings, ring.c), not the eventfd (tests): written by every
	 * outside doorbell, on a line of its own, away from ring_caps, which
	 * every doorbell reads. */
	_Alignas(CBCMN__CACHELINE) _Atomic uint64_t ext_msg_doorbells;
	/* Threads whose MSG_RING without a ring was refused for good (a
	 * seccomp filter's EPERM, an old kernel's EINVAL: ring.c,
	 * doorbell_sync()) at a doorbell of this runtime, each ringing the
	 * eventfd from then on.  The latch is the thread's: one refused at
	 * another runtime's doorbell rings this one's eventfd uncounted. */
	_Atomic uint32_t sync_msg_refused;
	/* CBCMN_PLACE_STEALABLE's cursor: a fetch-and-add at each such
	 * spawn, off ring_caps' line as well (ring.c's assert). */
	_Atomic uint32_t place_rr;
	_Alignas(CBCMN__CACHELINE) struct cbcmn__ring_caps ring_caps;
	bool ep_backend;                  /* executors wait with epoll, not io_uring (epoll.c) */
	bool pbuf_whole;                  /* CBCMN_PBUF_INC=0: streams' pools of whole buffers (stream.c) */
	struct cbcmn__ep_closes *ep_closes; /* epoll: cbcmn_close()s seen by every set (epoll.c) */
	int32_t policy;                   /* applied: cbcmn_policy or CBCMN_PIN_NONE */
	bool oversubscribed;
	/* Executors [0, nlive) run; up to nexec may (docs/TOPOLOGY.md). */
	_Alignas(CBCMN__CACHELINE) _Atomic uint32_t nlive;
	_Atomic uint32_t want_live;       /* someone needs executors [0, want_live) */
	uint32_t min_live;
	uint64_t retire_ns;               /* 0: executors never retire */
	bool dynamic;                     /* min_live < nexec */
	_Atomic uint32_t exiting;         /* retired threads in their last steps */
	_Atomic uint32_t resizing;        /* a start or a retirement is under way */
	/* The stall monitor (monitor.c): its thread's state, NULL without
	 * one, and the word it sleeps on (MON_* there). */
	struct cbcmn__monitor *mon;
	_Atomic uint32_t mon_word;
	/* The spare executor (monitor.c): 1 if exec[nexec - 1] is a slot
	 * kept for the monitor to start while executors are blocked outside
	 * the runtime with work waiting (a static runtime has no other room);
	 * spare_duty, set by the monitor while an executor is stalled, says
	 * it may take work (sched.c, spare_off_duty()). */
	uint32_t spare;
	_Atomic bool spare_duty;
	/* The signal mask of the thread that created the runtime: every
	 * executor thread's, whoever starts it (the creator, an executor, a
	 * thread's wake, the monitor or a blocking-pool thread, which block
	 * every signal: a guard-page SIGSEGV would kill the process). */
	sigset_t exec_sigmask;
	struct cbcmn__blocking_pool *blocking;
	/* Diagnostics (snapshot.c): what threads outside the runtime opened,
	 * obligations leaked, the general obligations' records. */
	struct cbcmn__diag diag_ext;
	_Atomic uint64_t oblig_leaked;
	struct cbcmn__mutex oblig_lock;   /* CBCMN__LOCK_OBLIG: the two lists */
	struct cbcmn__gen_oblig *oblig_free, *oblig_all;
	_Atomic(struct cbcmn__actors *) actors; /* actor slots, made on first spawn (actor.c) */
	struct cbcmn_metrics_server *metrics; /* its scrape endpoints (metrics_server.c) */
};

/* ---- internal calls, by file -------------------------------------------- */

/* runtime.c: fork.  True in a child forked since rt was created: rt's
 * threads are the parent's, and calls that would wait for them return
 * CBCMN_EFORKED.  One relaxed load: a process forks itself only from a
 * thread of its own, which sees its own handler's store. */
extern _Atomic uint32_t cbcmn__fork_gen;
/* The same from a copy of rt->fork_gen, for objects that may outlive their
 * runtime (a held nursery, a channel's destroy). */
static inline bool cbcmn__forked_since(uint32_t fork_gen)
{
	return fork_gen != atomic_load_explicit(&cbcmn__fork_gen, memory_order_relaxed);
}
static inline bool cbcmn__forked(const struct cbcmn_runtime *rt)
{
	return cbcmn__forked_since(rt->fork_gen);
}

/* watch.c: the statistics segment */
int cbcmn__seg_create(struct cbcmn_runtime *rt, uint32_t nexec, const int32_t *node);
void cbcmn__seg_publish(struct cbcmn_runtime *rt);
void cbcmn__seg_destroy(struct cbcmn__seg *s);
uint64_t cbcmn__seg_live_tasks(const struct cbcmn__seg *s);

/* Around a runtime task's count change (task.c; runtime_tasks above).
 * begin's release fence keeps it before the changes, for a look whose
 * acquire fence follows its loads of them (runtime.c, program_busy()). */
void cbcmn__runtime_count_begin(struct cbcmn_runtime *rt);

static inline void cbcmn__runtime_count_end(struct cbcmn_runtime *rt)
{
	atomic_fetch_add_explicit(&rt->runtime_counts_ended, 1, memory_order_release);
}

/* sched.c */
extern __thread struct cbcmn__exec *cbcmn__tls_exec;
/* True when the calling thread is one of rt's executors, which must never
 * block as a thread: the misuse checks that turn such a deadlock into
 * -EDEADLK read the thread-local pointer for this, and only for this. */
static inline bool cbcmn__on_executor(const struct cbcmn_runtime *rt)
{
	return cbcmn__tls_exec && cbcmn__tls_exec->rt == rt;
}

/* blocking.c: the runtime whose blocking pool the calling thread serves
 * (NULL on any other thread). */
extern __thread const struct cbcmn_runtime *cbcmn__tls_pool_rt;
/* True on rt's executors and on its blocking pool's threads: a call there
 * that waits for rt's tasks to end waits for the task it serves (a pool
 * thread runs a function its task waits for). */
static inline bool cbcmn__on_runtime_thread(const struct cbcmn_runtime *rt)
{
	return cbcmn__on_executor(rt) || (rt && cbcmn__tls_pool_rt == rt);
}

/* True when t is the task running on the calling thread: a call that parks
 * the caller's fiber must be made by the task whose context it was given
 * (another thread, or another task's context, gets -EPERM). */
static inline bool cbcmn__is_running(const struct cbcmn_task *t)
{
	return cbcmn__on_executor(t->rt) && cbcmn__tls_exec->current == t;
}
/* The waker a wake may use: e if it is the calling thread's executor,
 * else NULL.  Callers name their task's executor as the waker; a thread
 * outside the runtime, or a cbcmn_blocking() function given its task's
 * context, must not touch what is that executor's own (its next-task
 * slot, its deque, its mail, its single-writer gauges): it counts and
 * wakes as a thread outside does.  Decided here, where wakes are queued
 * (sched.c's wake_ready(), cbcmn__wakes_run_here(), cbcmn__gauge_up()),
 * not by each call: one load from %fs and a compare. */
static inline struct cbcmn__exec *cbcmn__waker_here(struct cbcmn__exec *e)
{
	return e == cbcmn__tls_exec ? e : NULL;
}
/* cbcmn__gauge_up() and cbcmn__gauge_down() (diag.h) with their common
 * case inline, e the calling thread's own executor (and for the end, the
 * begin's home): the owner's single-writer bump.  A task's block and its
 * wake count one each, every hop of an actor ring (about 20 instructions
 * of calls and checks a hop out of line). */
static inline void cbcmn__gauge_up_here(struct cbcmn_runtime *rt, struct cbcmn__exec *e, int g)
{
	if (e && e == cbcmn__tls_exec)
		cbcmn__diag_bump(&e->diag.up[g], memory_order_relaxed);
	else
		(void)cbcmn__gauge_up(rt, e, g);
}
static inline void cbcmn__gauge_down_here(struct cbcmn_runtime *rt, struct cbcmn__exec *e,
					  uint32_t home, int g)
{
	if (e && e == cbcmn__tls_exec && home == e->id && e->rt == rt)
		cbcmn__diag_bump(&e->diag.down[g], memory_order_release);
	else
		cbcmn__gauge_down(rt, e, home, g);
}
/* The waker a call by task self names (NULL: a thread outside): its own
 * executor, where a woken task lands in the next-task slot and runs as
 * soon as self blocks or yields; cbcmn__waker_here() decides, where the
 * wake is queued, whether the calling thread may use it. */
static inline struct cbcmn__exec *cbcmn__waker_of(const struct cbcmn_task *self)
{
	return self ? self->exec : NULL;
}
/* cbcmn_runtime_destroy(); open_ok: even while a thread's nursery is open
 * (janus_rt_shutdown(), void, cannot say busy: that nursery is lost). */
int cbcmn__runtime_destroy(cbcmn_runtime *rt, bool open_ok);
void *cbcmn__exec_main(void *arg);
int cbcmn__exec_thread_start(struct cbcmn__exec *e);
void cbcmn__exec_grow(struct cbcmn_runtime *rt);
void cbcmn__exec_want(struct cbcmn_runtime *rt, uint32_t id);
/* The error a spawn pinned to shard fails with at once: the shard's start
 * failed just before (CBCMN_EMEMLOCK, -EAGAIN...) and it is not retried
 * yet.  0 when the spawn may go ahead. */
int cbcmn__shard_unstartable(struct cbcmn_runtime *rt, uint32_t shard);
static inline uint32_t cbcmn__nlive(const struct cbcmn_runtime *rt)
{
	return atomic_load_explicit(&rt->nlive, memory_order_acquire);
}

/* The executors the program asked for: every one but the spare. */
static inline uint32_t cbcmn__nworkers(const struct cbcmn_runtime *rt)
{
	return rt->nexec - rt->spare;
}

static inline bool cbcmn__is_spare(const struct cbcmn__exec *e)
{
	return __builtin_expect(e->rt->spare, 0) && e->id == e->rt->nexec - 1;
}

/* exec.wheel_gate (actor_sched.c). */
enum { CBCMN__GATE_OWNER = 0, CBCMN__GATE_OUT, CBCMN__GATE_RESCUE };
/* Around a task run of an executor with a wheel: the owner lets go of it,
 * then takes it back, waiting out a rescue (actor_sched.c). */
static inline void cbcmn__wheel_gate_open(struct cbcmn__exec *e)
{
	/* release: pairs with the rescuer's acquire: what the owner did to
	 * the wheel is the rescuer's to see. */
	atomic_store_explicit(&e->wheel_gate, CBCMN__GATE_OUT, memory_order_release);
}
/* cbcmn__wheel_gate_close()'s wait for a rescue under way. */
void cbcmn__wheel_gate_wait(struct cbcmn__exec *e);
/* Inline: an actor's direct switch closes it every hop (sched.c,
 * actor_direct()); a rescue's wait out of line. */
static inline void cbcmn__wheel_gate_close(struct cbcmn__exec *e)
{
	uint32_t s = CBCMN__GATE_OUT;
	/* acquire: pairs with the rescuer's release of the gate (what it
	 * took off the wheel is ours to see).  OWNER already: a new thread
	 * taking over, whose predecessor closed it. */
	if (atomic_compare_exchange_weak_explicit(&e->wheel_gate, &s, CBCMN__GATE_OWNER,
						  memory_order_acquire, memory_order_relaxed) ||
	    s == CBCMN__GATE_OWNER)
		return;
	cbcmn__wheel_gate_wait(e);
}
/* The stall monitor: move the movable actors off stalled x's wheel to the
 * other executors; how many. */
uint32_t cbcmn__actor_wheel_rescue(struct cbcmn__exec *x);
/* The spare off duty: its wheel's movable actors to the inject queue; how
 * many (actor_sched.c). */
uint32_t cbcmn__actor_wheel_forward(struct cbcmn__exec *e);

/* Tasks queued on e: its deque, its next-task slot and the actor it
 * holds for its owed notification (a racy count). */
static inline uint64_t cbcmn__exec_queue_depth(const struct cbcmn__exec *e)
{
	return (uint64_t)cbcmn__deque_len((struct cbcmn__deque *)&e->dq) +
	       (atomic_load_explicit(&e->slot, memory_order_relaxed) != NULL) +
	       (atomic_load_explicit(&e->held, memory_order_relaxed) != NULL);
}
void cbcmn__schedule(struct cbcmn_runtime *rt, struct cbcmn_task *t, struct cbcmn__exec *e);
void cbcmn__schedule_new(struct cbcmn_runtime *rt, struct cbcmn_task *t, struct cbcmn__exec *e);
void cbcmn__schedule_on(struct cbcmn_runtime *rt, struct cbcmn_task *t, struct cbcmn__exec *e,
			uint32_t shard);
void cbcmn__suspend(struct cbcmn_task *t);
/* cbcmn__iwait_block() for a task's wait iw, the runtime's part of it
 * (the wait's begin, the pick of what runs next, the suspend) on its
 * executor's system stack (sched.c): an actor's wait for ever, or a
 * plain task's send that waits for ever (mb_park(), actor_mbox.c). */
struct cbcmn__iwait;
uint32_t cbcmn__sys_park(struct cbcmn__iwait *iw);
/* The park's switch saves the parked task's frame in the word at the top
 * of the system stack below sys_top, where the switch's unwind info finds
 * it (asm/: *r14), and the park copies it to the task.  Once the park
 * publishes the task (run_post(): it may run elsewhere, its frame
 * replaced, its stack freed) the word names cbcmn__sys_end_frame, whose
 * return address 0 ends a walk (a profiler's sample, a backtrace) there,
 * not in a stale frame. */
static inline void **cbcmn__sys_save(void *sys_top)
{
	return (void **)sys_top - 2; /* a 16-byte slot: the stack stays aligned */
}
extern const uintptr_t cbcmn__sys_end_frame[8];
/* fn(a, b, c, d, e) for running task t on its executor's system stack
 * (e->sys_top set), back on t's when it returns; fn must not switch
 * (sched.c). */
#ifdef __SANITIZE_ADDRESS__
uint64_t cbcmn__sys_run(struct cbcmn_task *t, cbcmn__sys_fn *fn, uint64_t a, uint64_t b,
			uint64_t c, uint64_t d, uint64_t e);
#else
static inline uint64_t cbcmn__sys_run(struct cbcmn_task *t, cbcmn__sys_fn *fn, uint64_t a,
				      uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
	return cbcmn__sys_call(t->exec->sys_top, fn, a, b, c, d, e);
}
#endif
void cbcmn__wake_task(struct cbcmn_task *t, struct cbcmn__exec *waker);
void cbcmn__waiter_wake(struct cbcmn__waiter *w, struct cbcmn__exec *waker);
/* cbcmn__wake_task() by the holder of t's wait's claim (iwait.h), its only
 * waker: a store, not a compare-and-swap, once t is BLOCKED. */
void cbcmn__wake_claimed(struct cbcmn_task *t, struct cbcmn__exec *waker);
void cbcmn__waiter_wait(struct cbcmn__waiter *w);
struct cbcmn_task *cbcmn__take_local_child(struct cbcmn__exec *e, struct cbcmn_nursery *n);
struct cbcmn_task *cbcmn__take_local_task(struct cbcmn__exec *e, struct cbcmn_task *want);
void cbcmn__run_inline(struct cbcmn__exec *e, struct cbcmn_task *child);
int64_t cbcmn__task_call(struct cbcmn_task *t);
int64_t cbcmn__task_call_guarded(struct cbcmn_task *t);
/* On a function whose frame holds a landing pad (t->landing, a jump
 * buffer): ASan leaves its locals where they are.  With
 * detect_stack_use_after_return it moves them to a fake stack, no
 * address of the task's, and the overflow handler, which walks from the
 * fault up to the pad, read on past the stack's top (overflow.c's
 * unwinder_on_stack(): a fault it did not claim, the process gone). */
#define CBCMN__LANDING_PAD __attribute__((no_sanitize_address))
__attribute__((noreturn)) void cbcmn__fiber_exit(struct cbcmn__exec *e, struct cbcmn__stack *s);
/* Searchers allowed to spin at once for workers executors on cpus CPUs
 * under a cgroup limit (0: none): half the usable CPUs, at least 1. */
uint32_t cbcmn__spin_max(uint32_t workers, uint32_t cpus, double limit);
uint32_t cbcmn__spin_awake_max(uint32_t cpus, double limit);
void cbcmn__spin_max_update(struct cbcmn_runtime *rt);

/* wake.c */
void cbcmn__notify_one(struct cbcmn_runtime *rt);
void cbcmn__notify_one_sc(struct cbcmn_runtime *rt);
void cbcmn__unpark_all(struct cbcmn_runtime *rt);
bool cbcmn__park(struct cbcmn__exec *e, uint64_t timeout_ns);
bool cbcmn__any_work(struct cbcmn_runtime *rt);
/* sched.c: work e could take now: the inject queue, or another
 * executor's queue the steal gate lets through (sets e->gated if it
 * refused some). */
bool cbcmn__stealable_work(struct cbcmn__exec *e);
void cbcmn__searching_begin(struct cbcmn__exec *e);
void cbcmn__searching_end(struct cbcmn__exec *e);
void cbcmn__futex_wake_one(_Atomic uint32_t *word);
void cbcmn__futex_wait_zero(_Atomic uint32_t *word);

/* task.c */
struct cbcmn_task *cbcmn__task_new(struct cbcmn_runtime *rt, struct cbcmn__exec *e);
/* A record in the top of its own stack (CBCMN_CONFIG_RECORD_IN_STACK). */
#define CBCMN__MEM_IN_STACK 0xffu
static inline bool cbcmn__task_in_stack(const struct cbcmn_task *t)
{
	return t->mem_off == CBCMN__MEM_IN_STACK;
}
/* The stack an in-stack record lives in (t->stack is a borrowed one while
 * t runs inline). */
static inline struct cbcmn__stack *cbcmn__task_own_stack(struct cbcmn_task *t)
{
	return (struct cbcmn__stack *)((char *)t + CBCMN__STACK_RECORD_SPAN);
}
void cbcmn__task_unref(struct cbcmn_task *t, struct cbcmn__exec *e);
void cbcmn__task_complete(struct cbcmn_task *t, int64_t result);
/* Does t count as cancelled?  Its nursery chain is, it is a stopped actor,
 * or it is in a halt (cbcmn__task_halting()): every wait of a cancelled
 * task returns at once, never parks. */
bool cbcmn__task_cancelled(const struct cbcmn_task *t);
/* The same, but for the halt: what CBCMN_CHECKPOINT() ends a task for (a
 * checkpoint in a hosted handler actor's drop would end its whole host). */
bool cbcmn__task_interrupted(const struct cbcmn_task *t);
bool cbcmn__nursery_chain_walk(const struct cbcmn_nursery *n);
/* Is n or a nursery enclosing it cancelled?  Inline, the look that finds
 * none: every blocking call of every task makes it. */
static inline bool cbcmn__nursery_chain_cancelled(const struct cbcmn_nursery *n)
{
	/* While no nursery of this runtime is cancelled nothing can be: one
	 * load instead of a walk up a deep fork-join tree. */
	if (__builtin_expect(atomic_load_explicit(&n->rt->cancels, memory_order_relaxed) == 0, 1))
		return false;
	return cbcmn__nursery_chain_walk(n);
}
void cbcmn__task_free_cache(struct cbcmn__exec *e);
/* Send e's part-filled batch of freed records home now (e's thread). */
void cbcmn__task_outbox_flush(struct cbcmn__exec *e);
int cbcmn__spawn(struct cbcmn_task *self, struct cbcmn_nursery *n, uint32_t flags, void *fn,
		 void *arg, const cbcmn_spawn_opts *opts, cbcmn_task **handle);
/* A spawn in two halves, for a caller with something to set up once the
 * spawn is paid for and before the task exists (an actor's slot, which a
 * spawner ended while it waits for budget would otherwise leave live).
 * cbcmn__spawn_pay(): the checks and the charge, where self may wait for
 * budget or be ended; 0 and *paid, or the error (nothing charged).  Then
 * either cbcmn__spawn_made() (never waits; on an error the charge is given
 * back) or cbcmn__spawn_unpay(). */
struct cbcmn__spawn_paid {
	uint32_t flags;        /* CBCMN__TF_* the options ask for */
	bool paid;             /* self was charged */
	uint64_t stack_charge; /* the memory charged for the stack */
};
int cbcmn__spawn_pay(struct cbcmn_task *self, struct cbcmn_nursery *n, const cbcmn_spawn_opts *opts,
		     const cbcmn_budget *ask, struct cbcmn__spawn_paid *paid);
int cbcmn__spawn_made(struct cbcmn_task *self, struct cbcmn_nursery *n, void *fn, void *arg,
		      const cbcmn_spawn_opts *opts, const struct cbcmn__spawn_paid *paid);
void cbcmn__spawn_unpay(struct cbcmn_task *self, const struct cbcmn__spawn_paid *paid);

/* obligation.c: t ends holding obligations: abort them, report the leak
 * (cbcmn_config.obligation_leak); returns t's result, CBCMN_ELEAKED if it
 * was a success. */
int64_t cbcmn__obligations_settle(struct cbcmn_task *t, int64_t result);
/* obligation.c: t was unwound to its landing pad: abort what it holds,
 * silently (no leak, the runtime ended it). */
void cbcmn__obligations_drop(struct cbcmn_task *t);

/* nursery.c */
void cbcmn__nursery_child_done(struct cbcmn_nursery *n, int64_t result, struct cbcmn__exec *e,
			       const struct cbcmn_task *inline_parent);
/* Take e's batch of ended children off their nursery's live count.  The
 * scheduler calls it before e runs anything but a fresh child of that
 * nursery, and before it looks for work elsewhere or parks. */
void cbcmn__nursery_live_flush(struct cbcmn__exec *e);
static inline bool cbcmn__nursery_batch_holds(const struct cbcmn__exec *e,
					      const struct cbcmn_task *next)
{
	return next && next->sp == NULL && next->nursery == e->live_n;
}
void cbcmn__nursery_free_cache(struct cbcmn__exec *e);
/* actor.c: e's free actor slots back to the table (its thread leaves). */
void cbcmn__actor_free_cache(struct cbcmn__exec *e);
int cbcmn__nursery_open(struct cbcmn_runtime *rt, struct cbcmn_task *owner,
			struct cbcmn_nursery **out);
int64_t cbcmn__nursery_await(struct cbcmn_task *self, struct cbcmn_nursery *n);
void cbcmn__nursery_cancel(struct cbcmn_nursery *n, uint32_t why);
/* Task t ends early (panic, budget, lost thread, return without await):
 * cancel and await the nurseries it still has open, innermost first.
 * Returns how many there were.  Runs on t's fiber: may block. */
int cbcmn__nursery_close_all(struct cbcmn_task *t);
void cbcmn__nursery_live_add(struct cbcmn_nursery *n, int64_t delta, struct cbcmn__exec *e);

/* budget.c */
void cbcmn__budget_init_root(struct cbcmn_task *t);
int cbcmn__budget_draw(struct cbcmn_task *spawner, struct cbcmn_task *child, const cbcmn_budget *ask);
void cbcmn__caps_grant(struct cbcmn_task *spawner, struct cbcmn_task *child, const cbcmn_caps *want);
void cbcmn__budget_defaults(cbcmn_budget *out, const cbcmn_budget *in);
void cbcmn__budget_init_unlimited(struct cbcmn_task *t);
void cbcmn__budget_leftover(struct cbcmn_task *t);
uint64_t cbcmn__charge_memory(struct cbcmn_task *t, uint64_t amount);
void cbcmn__refund_memory(struct cbcmn_task *t, uint64_t amount);
void cbcmn__charge_slow(struct cbcmn_task *t, int comp, uint64_t amount);
void cbcmn__charge_window(struct cbcmn_task *t);
/* cbcmn__charge() on a thread that is no executor: a cbcmn_blocking()
 * function's, given t's context (budget.c). */
void cbcmn__charge_off(struct cbcmn_task *t, int comp, uint64_t amount);
/* t, back on its fiber, pays n ops spent off it (blocking.c). */
void cbcmn__charge_ops(struct cbcmn_task *t, uint64_t n);
/* For the janus ABI: pay-or-fail and subtract-only (budget.c). */
bool cbcmn__budget_can_pay(struct cbcmn_task *t, int comp, uint64_t amount);
bool cbcmn__budget_ask_fits(struct cbcmn_task *t, const cbcmn_budget *ask);
void cbcmn__budget_take_ops(struct cbcmn_task *t, uint64_t n);
void cbcmn__budget_kill_exhausted(struct cbcmn_nursery *n);
/* A joiner of t has registered (cbcmn_task_join()): if t waits counted as
 * exhausted, end it with CBCMN_EBUDGET, as its nursery's opener would;
 * nobody else can recharge it while its handle's holder waits for it
 * (unless a supervisor holds it).  docs/BUDGETS.md. */
void cbcmn__budget_joined(struct cbcmn_task *t, struct cbcmn__exec *e);
/* The opener self recharges by amount each child of n that waits counted
 * as exhausted (a supervisor, actor_sup.c); one it cannot pay for is ended
 * as by cbcmn__budget_kill_exhausted().  *count: those recharged.  Returns
 * 0, or the first recharge's error. */
int cbcmn__budget_recharge_exhausted(struct cbcmn_task *self, struct cbcmn_nursery *n,
				     const cbcmn_budget *amount, uint64_t *count);
/* Spawn: record that spawner paid child (after the draw), child going
 * into a nursery opened by opener; undo a charge. */
void cbcmn__budget_payer(struct cbcmn_task *spawner, struct cbcmn_task *child,
			 struct cbcmn_task *opener);
void cbcmn__budget_uncharge_spawn(struct cbcmn_task *t, uint64_t stack_charge);

/* Runtime calls made by a task check the stack room left before they
 * change anything: an overflow must never land inside the runtime's own
 * frames (a lock held, a wait half-queued).  With less than a quarter of
 * the stack (under ASan half; at most 8 KiB: stack.c) left,
 * or after an overflow inside the C library,
 * the task ends with CBCMN_EPANIC as if it had hit the guard page
 * (overflow.c).  Every public call that takes a lock or waits checks
 * first. */
__attribute__((noreturn)) void cbcmn__stack_exhausted(struct cbcmn_task *t);

#define CBCMN__ROOM_UNIT 64u
/* t->stack_room for t's stack as it is now: 0 while the yellow zone is
 * open (check_lo above the stack), and always for an unguarded stack
 * (the switch reads its canary, through the descriptor, at each park:
 * sched.c, check_canary()); at most what a uint16_t holds. */
static inline uint16_t cbcmn__stack_room_of(const struct cbcmn__stack *s)
{
	const char *top = (const char *)s;
	if (!s->guarded || s->check_lo >= top)
		return 0;
	size_t units = (size_t)(top - s->check_lo) / CBCMN__ROOM_UNIT;
	return units < UINT16_MAX ? (uint16_t)units : UINT16_MAX;
}

/* Ask the descriptor: t's stack bound went up (the yellow zone opened,
 * a relaxed bound was reset), or t runs on a stack it borrowed. */
static inline void cbcmn__stack_room_clear(struct cbcmn_task *t)
{
	t->stack_room = 0;
}

/* Open the yellow zone of t's stack (cbcmn__stack_yellow_open()), from
 * the SIGSEGV handler on t's thread, and clear the stack_room the raised
 * bound makes wrong (overflow.c).  0 or -errno. */
int cbcmn__task_yellow_open(struct cbcmn_task *t);

/* After a check that asked the descriptor and passed: stack_room again,
 * if its caller's frame is on t's stack (overflow.c). */
void cbcmn__stack_room_refresh(struct cbcmn_task *t);

static inline void cbcmn__stack_check(struct cbcmn_task *t)
{
	if (!t)
		return;
	/* A frame in (stack - room, stack] is on t's stack above its bound
	 * (stack_room can only understate the room; no frame is at the
	 * descriptor itself): the descriptor's line is not touched. */
	const char *f = __builtin_frame_address(0);
	if (__builtin_expect((uintptr_t)((const char *)t->stack - f) <
				     (uintptr_t)t->stack_room * CBCMN__ROOM_UNIT, 1))
		return;
	/* check_lo: lo + the reserve, or the top while the yellow zone is
	 * open (stack.h).  A frame below it on another thread is not on t's
	 * stack at all: a cbcmn_blocking() function handed t's context, whose
	 * stack may lie anywhere.  On t's fiber a frame below the guard is
	 * still t's: one big frame (an array not touched yet) can step over
	 * the guard.  The other tests are made only when the first fails.
	 * Inline here, as the call to cbcmn__stack_exhausted(): the fewer
	 * bytes a frame below the guard writes, the better (overflow.c). */
	if (__builtin_expect(f < t->stack->check_lo, 0) &&
	    (f >= t->stack->guard_lo || cbcmn__is_running(t)))
		cbcmn__stack_exhausted(t);
	cbcmn__stack_room_refresh(t);
}

/* The same for a public call that gets no task context: the task running
 * on this thread, if the call runs on its stack (a signal handler on the
 * alternate stack, or a coroutine of the program's, is not the task). */
static inline void cbcmn__stack_check_current(void)
{
	struct cbcmn__exec *e = cbcmn__tls_exec;
	struct cbcmn_task *t = e ? e->current : NULL;
	const char *f = __builtin_frame_address(0);
	if (t && f >= t->stack->guard_lo && f < (const char *)t->stack)
		cbcmn__stack_check(t);
}

/* An unlimited task: every component unlimited, a full countdown window
 * (what budget.c's set_budget() computes for it, in fewer steps). */
static inline void cbcmn__budget_set_unlimited(struct cbcmn_task *t)
{
	t->ops = t->memory = t->spawn_count = t->channel_ops = t->syscalls = CBCMN_UNLIMITED;
	t->limited = false;
	t->yield_left = 0;
	t->countdown = (int64_t)t->rt->cfg.yield_interval;
}

/* The invariant cbcmn__charge() relies on: a task not limited has every
 * component unlimited.  Only set_budget() (budget.c) makes a component
 * finite, and it sets limited; every other write subtracts from a finite
 * component or adds with saturation (unlimited stays unlimited).  limited
 * may stay set once every component is unlimited again (a recharge to
 * unlimited): the charge then reads the components, as before.
 * test_budget_limited checks it after every kind of budget write. */
static inline bool cbcmn__budget_consistent(const struct cbcmn_task *t)
{
	return t->limited ||
	       (t->ops & t->memory & t->spawn_count & t->channel_ops & t->syscalls) == CBCMN_UNLIMITED;
}

/* cbcmn__charge() for task t running on its executor (cbcmn__tls_exec
 * set: cbcmn__is_running()) whose stack its caller has just checked, in
 * this frame or one below it (cbcmn__stack_check()): the charge without
 * those two looks again (the actor's send and receive, every hop). */
static inline void cbcmn__charge_here(struct cbcmn_task *t, int comp, uint64_t amount)
{
	if (__builtin_expect(--t->countdown <= 0, 0))
		cbcmn__charge_window(t);
	/* Not limited: every component unlimited (cbcmn__budget_consistent()),
	 * so nothing to take, and the budget's line (3) stays where it is. */
	if (__builtin_expect(!t->limited, 1))
		return;
	uint64_t *f = comp == CBCMN__B_SPAWN     ? &t->spawn_count
		      : comp == CBCMN__B_MEMORY  ? &t->memory
		      : comp == CBCMN__B_CHANNEL ? &t->channel_ops
		      : comp == CBCMN__B_SYSCALLS ? &t->syscalls
						  : NULL;
	if (!f)
		return;
	if (__builtin_expect(*f == CBCMN_UNLIMITED, 1))
		return;
	if (__builtin_expect(*f >= amount, 1))
		*f -= amount;
	else
		cbcmn__charge_slow(t, comp, amount);
}

/* Charge t one op and amount of component comp (CBCMN__B_*).  The fast
 * path is inline: a countdown and a compare; the rest is budget.c's. */
static inline void cbcmn__charge(struct cbcmn_task *t, int comp, uint64_t amount)
{
	/* Not on an executor: a cbcmn_blocking() function's cost with t's
	 * context, made while t parks, which its executor may still be
	 * finishing (an actor's park reads its countdown): touch nothing
	 * of t's there. */
	if (__builtin_expect(!cbcmn__tls_exec, 0)) {
		cbcmn__charge_off(t, comp, amount);
		return;
	}
	cbcmn__stack_check(t);
	cbcmn__charge_here(t, comp, amount);
}

/* ring.c */
int cbcmn__ring_probe(struct cbcmn_runtime *rt);
/* Does the kernel let a fixed file the table drops go at once?  Asked
 * once a process, at the first stream (stream.c). */
bool cbcmn__fixed_drop_is_prompt(void);
extern _Atomic int cbcmn__fixed_prompt; /* its answer: 0 not asked, 1 yes, 2 no */
int cbcmn__ring_efd(struct cbcmn__exec *e);
int cbcmn__ring_create(struct cbcmn__exec *e);
int cbcmn__ring_error(int rc);
void cbcmn__ring_destroy(struct cbcmn__exec *e);
void cbcmn__ring_close(struct cbcmn__exec *e);
void cbcmn__ring_leave(struct cbcmn__exec *e);
int cbcmn__ring_takeover(struct cbcmn__exec *e);
struct io_uring_sqe *cbcmn__ring_sqe(struct cbcmn__exec *e);
bool cbcmn__ring_sq_room(struct cbcmn__exec *e, unsigned n);
void cbcmn__ring_submit(struct cbcmn__exec *e, bool wait_one, uint64_t timeout_ns);
unsigned cbcmn__ring_reap(struct cbcmn__exec *e);
/* Doorbells go as MSG_RING SQEs, from SQPOLL executors as MSG_RINGs
 * without a ring, else as eventfd writes: ring.c. */
bool cbcmn__doorbell_msg_ring(const struct cbcmn_runtime *rt);
bool cbcmn__doorbells_are_msg_rings(const struct cbcmn_runtime *rt);
void cbcmn__doorbell(struct cbcmn__exec *target);
void cbcmn__efd_ring(struct cbcmn__exec *x);

/* The loop's check between tasks: anything to submit or reap?  Cheap when
 * the ring is quiet: two loads. */
bool cbcmn__ep_busy(const struct cbcmn__exec *e); /* epoll.c */
static inline bool cbcmn__ring_busy(const struct cbcmn__exec *e)
{
	if (e->ep)
		return cbcmn__ep_busy(e); /* no ring: the epoll backend's own check */
	const struct io_uring *u = &e->ring.u;
	return cbcmn__sq_unflushed(u) || e->ring.resubmit || e->ring.dropped || io_uring_cq_ready(u) ||
	       (IO_URING_READ_ONCE(*u->sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW));
}

/* SQEs of an SQPOLL ring that its kernel poller thread has not taken yet
 * (the executor's own thread only): a searching executor's spin cannot
 * bring their completions nearer, and where the poller shares its CPU
 * delays them (docs/IO.md, "SQPOLL on a busy host"). */
static inline bool cbcmn__ring_sq_unpolled(const struct cbcmn__exec *e)
{
	return !e->ep && (e->ring.u.flags & IORING_SETUP_SQPOLL) && io_uring_sq_ready(&e->ring.u) != 0;
}

/* xmsg.c */
int cbcmn__xmsg_init(struct cbcmn__exec *e, uint32_t nexec);
void cbcmn__xmsg_fini(struct cbcmn__exec *e);
int cbcmn__xmsg_send(struct cbcmn__exec *e, uint32_t dst, uint32_t kind, struct cbcmn_task *t,
		     void (*fn)(struct cbcmn__exec *, void *), void *arg);
/* A call carrying its argument by value: take a message from e's pool
 * (NULL: no memory), write up to CBCMN__XM_DATA bytes in m->data, then
 * post it (fn(dst, m->data) runs on dst's thread, or, if dst stalls with
 * it in a lane, on the stall monitor's, still in the lane's order: fn
 * must not take dst for the calling thread's executor; the
 * acknowledgement returns m to e's pool) or give it back unposted.  e's
 * thread only. */
struct cbcmn__xmsg *cbcmn__xmsg_get(struct cbcmn__exec *e);
void cbcmn__xmsg_call_post(struct cbcmn__exec *e, uint32_t dst, struct cbcmn__xmsg *m,
			   void (*fn)(struct cbcmn__exec *, void *));
void cbcmn__xmsg_unget(struct cbcmn__exec *e, struct cbcmn__xmsg *m);
/* From the fn of a call_post()ed message that the stall monitor runs for
 * a stalled executor (lanes_take()): leave it fn, to run with data on its
 * drain, as a call (what only its thread may do: its trace ring).  On a
 * drain by its own executor, or by whoever drains a stopped one, the
 * message is consumed: fn is not run. */
void cbcmn__xmsg_then(void *data, void (*fn)(struct cbcmn__exec *, void *));
void cbcmn__remote_push(struct cbcmn__exec *dst, struct cbcmn_task *t);
/* actor_mbox.c: task t (running, at its end) waits until its actor sends
 * still in lanes are in their mailboxes (t->lane_e1 != 0). */
void cbcmn__actor_lanes_flush(struct cbcmn_task *t);
/* The same for a task that landed (a stack overflow, a budget given up,
 * its thread's end under it: sched.c), and, if it is an actor's, the sends to it that hold places in
 * its mailbox: put before its halt, so that the halt drops them. */
void cbcmn__actor_lanes_landed(struct cbcmn_task *t);
void cbcmn__stall_rescue(struct cbcmn__exec *x, uint64_t seq);
bool cbcmn__mail_drain(struct cbcmn__exec *e);
void cbcmn__backlog_flush(struct cbcmn__exec *e);
void cbcmn__pq_push(struct cbcmn__exec *e, struct cbcmn_task *t);
static inline bool cbcmn__has_mail(const struct cbcmn__exec *e)
{
	return atomic_load_explicit(&e->mail_any, memory_order_relaxed) ||
	       atomic_load_explicit(&e->io_cancel, memory_order_relaxed);
}

/* Work only e can do: its mail, pinned tasks, backlog, ring. */
static inline bool cbcmn__own_work(const struct cbcmn__exec *e)
{
	return cbcmn__has_mail(e) || e->pq_head || e->nbacklog || cbcmn__ring_busy(e);
}

/* wake.c */
void cbcmn__kick(struct cbcmn__exec *e);

/* io.c */
void cbcmn__io_cqe(struct cbcmn__exec *e, struct cbcmn__ioreq *r, int32_t res, uint32_t flags,
		   bool timeout);
void cbcmn__io_cancel_pending(struct cbcmn__exec *e);
void cbcmn__io_cancel_flag(struct cbcmn__exec *e);
void cbcmn__io_settle(struct cbcmn__exec *e);
void cbcmn__io_orphan_all(struct cbcmn__exec *e, const struct io_uring_cqe *cqes, unsigned n);

/* stream.c */
void cbcmn__mshot_cqe(struct cbcmn__exec *e, struct cbcmn__mshot *m, int32_t res, uint32_t flags);
void cbcmn__bufring_fini(struct cbcmn__exec *e);
/* Do rt's streams put their sockets in fixed-file tables?  (The first
 * call may probe the kernel: cbcmn__fixed_drop_is_prompt().) */
bool cbcmn__fixed_files(const struct cbcmn_runtime *rt);
void cbcmn__bufring_retire(struct cbcmn__exec *e);
void cbcmn__mshot_orphan_all(struct cbcmn__exec *e, const struct io_uring_cqe *cqes, unsigned n);
/* stream.c: an accept(2) error (negative) that passes (out of descriptors
 * or memory, a connection gone first): accept again, after a pause. */
bool cbcmn__accept_transient(int32_t res);
/* stream.c: t was unwound: close the streams and acceptors it still owns. */
void cbcmn__mshot_unwound(struct cbcmn_task *t);
/* stream.c: destroy: free what is still open on e (its ring is gone). */
void cbcmn__mshot_fini(struct cbcmn__exec *e);

/* timer.c */
struct cbcmn__timer;
uint64_t cbcmn__now(const struct cbcmn_runtime *rt);
int cbcmn__wait_until(struct cbcmn_task *self, struct cbcmn__iwait *iw, uint64_t deadline,
		      uint32_t *how);

/* janus_rt.c */
void cbcmn__abi_slot_release(struct cbcmn_task *t);
/* janus_rt.c: its lock held across a fork (runtime.c's atfork handler). */
void cbcmn__janus_fork_lock(bool lock);
/* Run a CBCMN__TF_ABI task: its result as the native layer must see it. */
int64_t cbcmn__abi_call(struct cbcmn_task *t);

/* actor.c: an actor's task ended with result: halt the actor (its mailbox,
 * monitors, slot); returns its halt reason, the task's result from then on.
 * fini: at runtime free, every actor halted. */
int64_t cbcmn__actor_main(cbcmn_cx *cx, void *arg);
int64_t cbcmn__actor_halt(struct cbcmn_task *t, int64_t result);
void cbcmn__actors_fini(struct cbcmn_runtime *rt);
/* actor_sup.c: a child of nursery n began to wait counted as exhausted
 * (budget.c), on executor e: if n is a supervisor's, tell it. */
void cbcmn__sup_exhausted(struct cbcmn_nursery *n, struct cbcmn__exec *e);
/* Is n a supervisor's nursery (whose exhausted children it decides on)? */
bool cbcmn__sup_nursery(const struct cbcmn_nursery *n);
/* Actor task t was stopped: it counts as cancelled (cbcmn__task_cancelled()).
 * joining: actor task self awaits nursery n (NULL: no more), which a stop
 * cancels (nursery.c). */
bool cbcmn__actor_stopped(const struct cbcmn_task *t);
void cbcmn__actor_joining(struct cbcmn_task *self, struct cbcmn_nursery *n);
static inline bool cbcmn__is_actor_task(const struct cbcmn_task *t)
{
	return !(t->flags & CBCMN__TF_ABI) && t->fn == cbcmn__actor_main;
}
/* actor_handler.c: a host of handler actors is a task running this; its
 * end, however it came (task.c), halts what it still hosts and frees it. */
int64_t cbcmn__hnd_host_main(cbcmn_cx *cx, void *arg);
int64_t cbcmn__hnd_host_end(struct cbcmn_task *t, int64_t result);
/* Does t's end call the program back (an actor's drop and fini, or those
 * of the handler actors a host holds)?  Then it ends on a stack of its
 * own, under a landing pad, never on an executor thread's (sched.c). */
static inline bool cbcmn__task_end_calls_back(const struct cbcmn_task *t)
{
	return !(t->flags & CBCMN__TF_ABI) &&
	       (t->fn == cbcmn__actor_main || t->fn == cbcmn__hnd_host_main);
}
/* Is task t, the caller's own (or one not running), in an actor's halt,
 * its drop and fini (its own, or of a handler actor its host halts)?
 * Then it must not park: the code its end runs under holds the executor
 * it began on, and a wake would resume it on another (issue 16;
 * docs/ACTORS.md, "A halt never waits"). */
bool cbcmn__task_halting(const struct cbcmn_task *t);
static inline bool cbcmn__task_in_halt(const struct cbcmn_task *t)
{
	return __builtin_expect(cbcmn__task_end_calls_back(t), 0) && cbcmn__task_halting(t);
}
/* The actor gauges (statseg.h), from sched.c: actor task t begins to run
 * on e (its home becomes e); e stops running it; an actor task blocks on
 * or is woken from executor e (n = 1, -1).  Relaxed: statistics, nothing
 * is published through them. */
void cbcmn__actor_run(struct cbcmn__exec *e, struct cbcmn_task *t);
static inline void cbcmn__actor_ran(struct cbcmn__exec *e)
{
	atomic_store_explicit(&e->ss->act.running, 0, memory_order_relaxed);
}
/* Add n to an actor gauge of executor e (statseg.h): its own share, a load
 * and a store, when e's own thread counts (its only writer), else the
 * shared one with an atomic add, its move count (the high half) with it
 * in the same add (CBCMN__SEG_AGAUGE_MOVE).  Relaxed either way.  (Atomic
 * adds on a signed type wrap, C11 7.17.7.5.) */
static inline void cbcmn__agauge_add(const struct cbcmn__exec *e, _Atomic int64_t *shared,
				     _Atomic int64_t *own, int64_t n)
{
	if (e == cbcmn__tls_exec)
		atomic_store_explicit(own, atomic_load_explicit(own, memory_order_relaxed) + n,
				      memory_order_relaxed);
	else
		atomic_fetch_add_explicit(shared, CBCMN__SEG_AGAUGE_MOVE + n, memory_order_relaxed);
}
static inline void cbcmn__actor_waits(struct cbcmn__exec *e, int64_t n)
{
	cbcmn__agauge_add(e, &e->ss->act.waiting, &e->ss->act_own.waiting, n);
}
/* actor_sched.c: the actor wheel in sched.c's pick (docs/ACTORS.md
 * "Scheduling").  turn: e->wheel set; the wheel's next actor if it is the
 * wheel's turn (a plain task was picked last), else NULL.  admit: actor
 * task t, found in e's queues, goes on e's wheel (false: no memory for a
 * wheel, run it as it is).  after: t (a plain task, or NULL: nothing
 * else) is picked; NULL: the wheel's next actor, if any.  yielded: actor
 * task t yielded: on the wheel, N forward (false: no wheel, or it goes
 * elsewhere, cbcmn__yield_elsewhere(); the yield list or the inject
 * queue).  parks: actor task t is blocking (gauge, and where it is due).
 * All on e's own thread. */
struct cbcmn_task *cbcmn__actor_turn(struct cbcmn__exec *e);
bool cbcmn__actor_admit(struct cbcmn__exec *e, struct cbcmn_task *t);
bool cbcmn__actor_wheel_ready(const struct cbcmn__exec *e); /* actors on e's wheel */
struct cbcmn_task *cbcmn__actor_after(struct cbcmn__exec *e, struct cbcmn_task *t);
bool cbcmn__actor_yielded(struct cbcmn__exec *e, struct cbcmn_task *t);
void cbcmn__actor_parks(struct cbcmn__exec *e, struct cbcmn_task *t);
/* actor_mbox.c: a run of actor a's task on e has ended (run_post(): it
 * is published parked, or requeued): pay the room wake its takes owe to
 * waiting lane senders (docs/ACTORS.md, "Delivery"); one relaxed load
 * when none is owed.  a: t->arg, read before the park was published
 * (the slot outlives its actors: a later one's pay is only early). */
struct cbcmn__actor;
void cbcmn__mb_room_pay(struct cbcmn__actor *a, struct cbcmn__exec *e);
/* The stall monitor (monitor.c): x's thread is asleep in a blocking call
 * in one run, which may be the receiver's that owes the wake (it waits,
 * say, for what a waiting sender does next): pay it now. */
void cbcmn__mb_room_rescue(struct cbcmn__exec *x);
/* actor_sched.c: actor task t blocks and actor task n, ready on e with
 * e's wheel empty, runs next without the loop (sched.c, actor_direct()):
 * the wheel's part of both (t parks, n enters and is picked), the caller
 * holding the wheel's gate.  False: n went elsewhere (a migration), t
 * goes to the loop. */
bool cbcmn__actor_direct(struct cbcmn__exec *e, struct cbcmn_task *t, struct cbcmn_task *n);
/* actor.c: actor task t may be pulled to the executor of a task that
 * wakes it (not pinned, no posse, no handler actor). */
bool cbcmn__actor_follows(const struct cbcmn_task *t);
/* sched.c: executor o is out of work (parked, or searching for some). */
bool cbcmn__exec_out_of_work(const struct cbcmn__exec *o);
/* sched.c: e, on its own thread, has nothing to run but its current task:
 * a task that one wakes comes here although its home runs others. */
bool cbcmn__exec_alone(struct cbcmn__exec *e);
/* Pay e's owed notification (sched.c, owe_notify()), on e's thread: the
 * actor it was owed for, still held (exec.held), goes into e's slot, and
 * an idle executor is notified if one waits there.  The notification
 * alone: cbcmn__notify_owed_actor(). */
void cbcmn__notify_owed_pay(struct cbcmn__exec *e);
void cbcmn__notify_owed_actor(struct cbcmn__exec *e);
/* The stall monitor's payment of x's debt: the actor x holds for it
 * (exec.held), with another executor to run it, goes elsewhere
 * (cbcmn__held_rescue()); then as cbcmn__notify_owed_actor(). */
void cbcmn__notify_owed_rescue(struct cbcmn__exec *x);
/* The actor x holds (exec.held), if the gate lets the monitor take it
 * while x's run holds it open: to the inject queue, an idle executor
 * notified.  True if it moved. */
bool cbcmn__held_rescue(struct cbcmn__exec *x);
static inline bool cbcmn__owe_open(const struct cbcmn__exec *e)
{
	return atomic_load_explicit(&e->owe, memory_order_relaxed) & 1;
}
/* e's debt, if open, is closed: paid, or the actor it was for runs. */
static inline void cbcmn__owe_close(struct cbcmn__exec *e)
{
	uint32_t w = atomic_load_explicit(&e->owe, memory_order_relaxed);
	if (w & 1)
		atomic_store_explicit(&e->owe, w & ~1u, memory_order_relaxed);
}
static inline void cbcmn__notify_owed_check(struct cbcmn__exec *e)
{
	if (__builtin_expect(e && cbcmn__owe_open(e), 0))
		cbcmn__notify_owed_pay(e);
}
/* actor_sched.c: e's wheel holds a ready actor (e->wheel set; the caller
 * holds its gate: a stall's rescue writes the wheel while it is out). */
bool cbcmn__actor_wheel_busy(const struct cbcmn__exec *e);
/* sched.c: yielding task t, with company on e (its queues, its wheel)
 * while an executor idles, goes to the inject queue, not back to e's yield
 * list or wheel, which nothing else takes from.  Never a pinned task, nor
 * in lab mode. */
bool cbcmn__yield_elsewhere(struct cbcmn__exec *e, const struct cbcmn_task *t);

/* blocking.c: the blocking pool (docs/BLOCKING.md).  fini joins its
 * threads; call it once no task is alive, before the executors stop. */
int cbcmn__blocking_init(struct cbcmn_runtime *rt);
void cbcmn__blocking_fini(struct cbcmn_runtime *rt);
/* Where a cost of comp that t could not pay off its fiber is kept as t's
 * debt: the job this pool thread runs for t (its cbcmn_blocking() call
 * pays it as it returns to t's fiber), or NULL on any other thread. */
uint64_t *cbcmn__blocking_debt(const struct cbcmn_task *t, int comp);

/* signal.c */
int cbcmn__signal_init(void);
/* Hold (lock) or release the handler's install lock across a fork
 * (runtime.c's atfork handlers). */
void cbcmn__signal_fork_lock(bool lock);
int cbcmn__altstack_setup(struct cbcmn__exec *e);
void cbcmn__altstack_teardown(struct cbcmn__exec *e);

#endif
