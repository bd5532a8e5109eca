/* actor.h: private to libcbcmn: actor slots, the actor table and mailboxes.
 *
 * Shared by actor.c (the table, references, spawn, halt, stop, monitors)
 * and actor_mbox.c (the mailbox: its ring, its waiting senders and its one
 * receiver).  docs/ACTORS.md has the design.
 *
 * Memory safety of references: an actor lives in a slot of its runtime's
 * actor table, and slots are never freed while the runtime lives (they are
 * recycled with a new generation).  So a stale or forged reference always
 * points at valid memory: the holder locks the slot and compares the
 * generation before anything else, and a halted actor's generation has
 * moved on (under the same lock) before its mailbox memory is released.
 */
#ifndef CBCMN_ACTOR_INT_H
#define CBCMN_ACTOR_INT_H

#include "cbcmn_actor.h"
#include "actor_wheel.h"
#include "runtime.h"
#include "waitq.h"

/* Slot states, under the slot lock. */
enum { CBCMN__A_FREE = 0, CBCMN__A_LIVE, CBCMN__A_HALTING };

/* A blocked mailbox operation, on the blocked caller's stack (waitq.h).
 * Touched by others only under the slot lock, and only until it is claimed
 * and dequeued; after that only its waker reads qw.iw, once, to wake it. */
struct cbcmn__mb_wait {
	/* First: the queue's.  What a hop touches, from qw.iw.w to home,
	 * spans two lines, which the node's room aligns (iwait.h, struct
	 * cbcmn__iwkeep; actor_mbox.c checks it). */
	struct cbcmn__qwait qw;
	cbcmn_actor_msg *dst;               /* the receiver: where the message goes */
	/* Set by whoever hands the message over (under the lock), for the
	 * trace (docs/TRACE.md): its number in the mailbox; and for a
	 * sender when it entered the ring, if that thread traces (else 0). */
	uint64_t seq;
	uint32_t home;                      /* the receiver: the executor counting it */
	const cbcmn_actor_msg *src;         /* a sender: its message */
	uint64_t put_ns;
};

/* A monitor: on the watched actor's list until it halts, then (as the DOWN
 * message itself) on the watcher's system queue until received.  Allocated
 * when the monitor is set up, so that a halt never needs memory, nor room
 * in a full mailbox. */
struct cbcmn__monitor {
	struct cbcmn__monitor *next;
	cbcmn_actor_ref watcher, target;
	uint64_t id;
	int64_t reason;
	uint64_t undelivered; /* the target's mailbox at its halt */
	uint64_t seq;  /* deliverable once the watcher has taken this many messages */
	uint32_t type; /* CBCMN_ACTOR_DOWN, or CBCMN_ACTOR_EXIT (a link's, id 0) */
};

/* A link (cbcmn_actor_link()): one record on each side, naming the peer.
 * Also a watcher's note of a monitor it set up (id: the monitor's; 0 for
 * a link), so that its halt takes the monitor off the target.  A link's
 * record carries the EXIT message its holder receives if it traps exits
 * and the peer halts (allocated with the link: a halt needs no memory). */
struct cbcmn__link {
	struct cbcmn__link *next;
	cbcmn_actor_ref peer;
	uint64_t id;
	struct cbcmn__monitor *exit; /* a link's; NULL for a note */
};

/* An actor's slot, 64-byte aligned (actor.c, slot_new_locked()), in
 * parts (docs/ACTORS.md, "The slot's hop lines").  Its first three lines
 * hold every field a hop that hands its message to a waiting receiver
 * reads or writes, in the receiver and in the sender (a ring's actor is
 * both each lap); the fourth, what a message put in the ring adds (a
 * handler actor's hop, a receiver that is busy).  Line 0 is the send's
 * first: what it reads before the lock, and the lock's word, so that the
 * lock's CAS finds its line already coming (in a line of its own, the
 * CAS was a miss of its own: the handler ring paid twice the CPU a hop).
 * A ring of 10 000 actors touches each slot once a lap, cold: each line
 * here is a miss a hop.  The rest (halt, monitors, links, the free lists,
 * the spare ring) is read on other paths only.  The static asserts after
 * the struct keep a later field from pushing a hop field out. */
struct cbcmn__actor {
	/* ---- line 0: what a send reads first, without the lock and under it */
	/* The actor, waiting for a message.  Written under the lock; atomic
	 * (relaxed) only so that a sender may read it without the lock to
	 * prefetch the wait it will claim (actor_mbox.c, sending()). */
	_Atomic(struct cbcmn__mb_wait *) receiver;
	/* Where its task resumes, as of its last block (actor_sched.c,
	 * park()): the task, and its saved stack pointer's line with, in
	 * the low 6 bits, how many lines from there its resume touches
	 * (cbcmn__actor_resume_hint()), for a sender to prefetch
	 * (actor_mbox.c, sending()).  Beside receiver, whose line the
	 * sender reads anyway.  Hints: relaxed, possibly stale (a stale
	 * pointer only costs a useless prefetch, never a read). */
	_Atomic(void *) hint_task, hint_sp;
	/* (gen, index) while LIVE, CBCMN_ACTOR_NONE otherwise: the reference
	 * lookup's check (cbcmn__actor_lock_ref() compares it, so that gen,
	 * below, stays out of the hop's lines). */
	cbcmn_actor_ref ref;
	struct cbcmn_runtime *rt;
	/* Messages taken, ever (those put: actor_mbox.c, put_total()). */
	uint64_t taken_total;
	struct cbcmn__monitor *sys_head; /* DOWN messages for it, in order (sys_tail) */
	/* CBCMN__LOCK_ACTOR: every field but index, the hints and the
	 * wheel's.  Its word ends line 0; its debug-build name and rank
	 * begin line 1. */
	struct cbcmn__flock lock;
	/* ---- line 1: the receive's, the mailbox's state, the prediction */
	/* A handler actor's (actor_handler.c), set at spawn; NULL for an
	 * actor with a task of its own.  Read under the lock while LIVE. */
	struct cbcmn__hnd *hnd;
	/* The prediction (docs/ACTORS.md "Prefetch: the next actor, one hop
	 * early"): the actor its last send went to, and that actor's receive
	 * record then.  Written by its own task's sends, read when it is
	 * picked (the two are ordered as the fields here are), beside task,
	 * which the pick returns (actor_sched.c, take()).  Hints only:
	 * prefetched, never read through. */
	struct cbcmn__actor *pf_to;
	struct cbcmn__mb_wait *pf_wait;
	struct cbcmn_task *task;  /* its task, while wn is on a wheel (actor_sched.c) */
	/* The executor whose gauges count it (statseg.h): written under the
	 * lock, read without it only by the executor about to run it
	 * (cbcmn__actor_run()), the one thread that moves it. */
	_Atomic uint32_t home;
	uint32_t count;           /* messages in the ring (line 3) */
	uint32_t park_exec;       /* actor_sched.c: id + 1 of the wheel it blocked on; 0: none */
	uint32_t park_left;       /* the quantum it kept then */
	/* ---- line 2: the wheel's (actor_sched.c), the state and the flags */
	/* Scheduling, no lock: written only by the executor that runs it or
	 * holds it on its wheel, handed from one to the next with its task
	 * (the queues, the lanes and the wake CAS order them as they order
	 * the task's own fields); park_exec, park_left, task above and
	 * migrated below too. */
	struct cbcmn__wheel_node wn;   /* on that executor's wheel, or NONE */
	uint64_t park_due;             /* that wheel's position it is due at */
	uint64_t run_left;             /* checkpoints of its quantum left as its run began */
	uint64_t run_t0;               /* the clock then */
	/* Set (under the lock) by a stop: its task counts as cancelled from
	 * then on (cbcmn__actor_stopped(), read without the lock by the task
	 * and by cancellation's scans), so that a stop ends any wait. */
	_Atomic uint8_t interrupted;
	uint8_t state;            /* CBCMN__A_*, under the lock */
	bool stopping;            /* cbcmn_actor_stop(): mailbox closed */
	/* Pinned, a posse member or a handler actor: its messages never pull
	 * it to their sender's executor (actor_mbox.c, lane_route()).  Set at
	 * spawn; read by senders without the lock, hence atomic (relaxed: a
	 * stale value only routes one send the other way). */
	_Atomic bool stays;
	bool migrated;            /* actor_sched.c: handed over, enters N forward */
	/* A halt under way (actor.c, halt_begin()): the slot was taken, so
	 * that a task ended inside drop or fini finishes that halt, not a
	 * second; read by every send (cbcmn__sends_locked()). */
	bool halt_begun;
	/* A wake owed to lane senders waiting for room (actor_mbox.c,
	 * room_hand()): places are free, fewer than half.  Set under the
	 * lock; read without it where the receiver's run ends
	 * (cbcmn__mb_room_pay()). */
	_Atomic bool room_owed;
	/* Spawned by a task running on its home executor and not yet
	 * admitted to a wheel: admitted there, it takes the wheel's next
	 * place (actor_sched.c, admit_rest(); docs/ACTORS.md "The next
	 * place").  Written at spawn and by the executor that admits or
	 * runs it, as the fields above. */
	bool fresh;
	/* ---- line 3: the ring's, for a message that waits in it */
	/* The mailbox: a ring of cap messages, with room for ring_room (a
	 * spare ring bigger than asked serves: actor.c, ring_get()); a
	 * mailbox of one message is the slot's own one_msg (below).  A
	 * message handed to a waiting receiver touches none of these. */
	cbcmn_actor_msg *ring;
	uint32_t cap, head, ring_room;
	/* Room for sends over the lanes (actor_mbox.c, "Delivery" in
	 * docs/ACTORS.md), one word so that a sender on another executor
	 * reserves a place without the lock: the generation (bits 32-63),
	 * three state bits (LN_OPEN, LN_COUNTED, LN_READY) and, once
	 * counted, the free places (bits 0-28): cap - count - places
	 * reserved by messages still in a lane.  Changed under the lock,
	 * except by those reservations. */
	_Atomic uint64_t lanes;
	struct cbcmn__waitq sendq;                /* senders waiting for room */
	/* ---- the cold part: never read by a hop that finds its receiver waiting */
	uint32_t index;           /* fixed: the slot's place in the table */
	uint32_t gen;             /* the live actor's generation; bumped at halt */
	bool trap_exit;           /* a linked peer's halt is an EXIT message */
	/* Set at spawn (cbcmn__actor_spawn_x()), read by its halt. */
	bool contained;           /* its halt reason is not its nursery's */
	int64_t stop_reason;
	uint32_t spare_cap;            /* spare's (below): messages it has room for */
	uint32_t posse;                /* cbcmn_actor_opts.posse: 0 none (never migrates else) */
	struct cbcmn_nursery *nursery; /* its task's: alive while it is LIVE */
	struct cbcmn_nursery *joining; /* the nursery its task awaits, or NULL */
	uint32_t batch_n;              /* free_next's (below) */
	uint32_t batch_spare;          /* on a batch's first slot: its spares' messages */
	cbcmn_actor_fn fn;
	void *user;               /* the behaviour's state */
	void (*drop)(void *state, const cbcmn_actor_msg *m);
	void (*fini)(void *state, int64_t reason); /* run at halt, after drop */
	/* A halt under way (actor.c, halt_begin() to halt_finish()): the
	 * messages still for drop, from head (count is 0 then), how many it
	 * had for drop, and what its DOWNs say was undelivered. */
	uint32_t halt_left, halt_dropped, halt_undelivered;
	/* Its own task, parked until its places in lanes are all put
	 * (actor_mbox.c, cbcmn__mb_lanes_settle()); under the lock. */
	struct cbcmn__lane_wait *settle_wait;
	struct cbcmn__monitor *sys_tail;          /* sys_head's last */
	struct cbcmn__monitor *watched_by;        /* monitors on it */
	struct cbcmn__link *links;                /* actors linked with it */
	struct cbcmn__link *watching;             /* its monitors not yet DOWN */
	/* Free (state FREE): the next free slot of its batch, and on a
	 * batch's first slot, the next batch and its own count (batch_n,
	 * above: the table's list, or an executor's cache: actor.c). */
	struct cbcmn__actor *free_next, *batch_next;
	/* The mailbox ring of its last actor (room for spare_cap messages),
	 * kept while the slot is free (its next spawn likely asks no more),
	 * and while an actor with a mailbox of one (one_msg) has it;
	 * freed when its batch would take the table's kept rings past their
	 * bound (actor.c, batch_put()).  Only the thread that holds the free
	 * slot (or its batch) touches it. */
	cbcmn_actor_msg *spare;
	uint64_t moved_ns;             /* actor_sched.c: when it was last handed over (cooldown) */
	/* The ring of a mailbox of one message (a request's answer,
	 * skynet's leaves: most actors of a tree): no malloc at its spawn
	 * nor free at its halt.  Cold to a ring's hop (a mailbox of one
	 * that is handed its message never touches it). */
	cbcmn_actor_msg one_msg;
	/* A stride of an odd number of lines (9), not 512 bytes: a power of
	 * two put every slot's hop lines in three eighths of the cache's sets
	 * (address bits 6-8 always zero), and a cache shared with other work
	 * then slowed the handler rings 1.2x (docs/ACTORS.md, "The 512-byte
	 * stride and the cache's sets"). */
	uint8_t stride_pad[64];
} __attribute__((aligned(64)));

/* The hop's lines (docs/ACTORS.md, "The slot's hop lines"): every field a
 * hop that hands its message over touches ends within the first
 * CBCMN__ACTOR_HOP_LINES lines of the slot; one that puts it in the ring
 * adds line 3 (CBCMN__ACTOR_RING_LINE). */
#define CBCMN__ACTOR_HOP_LINES 3u
#define CBCMN__ACTOR_RING_LINE 3u
#define CBCMN__ACTOR_ENDS_BY(f, bytes)                                                   \
	(offsetof(struct cbcmn__actor, f) + sizeof(((struct cbcmn__actor *)0)->f) <= (bytes))
#define CBCMN__ACTOR_HOP_END(f) CBCMN__ACTOR_ENDS_BY(f, CBCMN__ACTOR_HOP_LINES * 64u)
_Static_assert(CBCMN__ACTOR_ENDS_BY(receiver, 64) && CBCMN__ACTOR_ENDS_BY(hint_task, 64) &&
		       CBCMN__ACTOR_ENDS_BY(hint_sp, 64) && CBCMN__ACTOR_ENDS_BY(ref, 64) &&
		       CBCMN__ACTOR_ENDS_BY(lock.w, 64),
	       "what a send reads before the lock shares the lock word's line");
_Static_assert(CBCMN__ACTOR_HOP_END(rt) && CBCMN__ACTOR_HOP_END(taken_total) &&
		       CBCMN__ACTOR_HOP_END(sys_head) && CBCMN__ACTOR_HOP_END(hnd) &&
		       CBCMN__ACTOR_HOP_END(pf_to) && CBCMN__ACTOR_HOP_END(pf_wait) &&
		       CBCMN__ACTOR_HOP_END(task) && CBCMN__ACTOR_HOP_END(home) &&
		       CBCMN__ACTOR_HOP_END(count) && CBCMN__ACTOR_HOP_END(park_exec) &&
		       CBCMN__ACTOR_HOP_END(park_left),
	       "the send's and the receive's fields are in the slot's hop lines");
_Static_assert(CBCMN__ACTOR_HOP_END(wn) && CBCMN__ACTOR_HOP_END(park_due) &&
		       CBCMN__ACTOR_HOP_END(run_left) && CBCMN__ACTOR_HOP_END(run_t0) &&
		       CBCMN__ACTOR_HOP_END(interrupted) && CBCMN__ACTOR_HOP_END(state) &&
		       CBCMN__ACTOR_HOP_END(stopping) && CBCMN__ACTOR_HOP_END(stays) &&
		       CBCMN__ACTOR_HOP_END(migrated) && CBCMN__ACTOR_HOP_END(halt_begun) &&
		       CBCMN__ACTOR_HOP_END(room_owed),
	       "the wheel's fields and the flags are in the slot's hop lines");
_Static_assert(offsetof(struct cbcmn__actor, ring) >= CBCMN__ACTOR_RING_LINE * 64u &&
		       CBCMN__ACTOR_ENDS_BY(ring, (CBCMN__ACTOR_RING_LINE + 1) * 64u) &&
		       CBCMN__ACTOR_ENDS_BY(cap, (CBCMN__ACTOR_RING_LINE + 1) * 64u) &&
		       CBCMN__ACTOR_ENDS_BY(head, (CBCMN__ACTOR_RING_LINE + 1) * 64u) &&
		       CBCMN__ACTOR_ENDS_BY(lanes, (CBCMN__ACTOR_RING_LINE + 1) * 64u) &&
		       CBCMN__ACTOR_ENDS_BY(sendq.head, (CBCMN__ACTOR_RING_LINE + 1) * 64u),
	       "what a message put in the ring adds is one line, the next");
_Static_assert(_Alignof(struct cbcmn__actor) == 64, "a slot begins a line");
_Static_assert(sizeof(struct cbcmn__actor) % 64 == 0 && (sizeof(struct cbcmn__actor) / 64) % 2 == 1,
	       "a slot is an odd number of lines: its hop lines spread over every set");

/* The resume hint of actor a, parking with its context saved at sp
 * (hint_sp): sp's line, and in the low 6 bits the lines from there to the
 * end of the message buffer its receive waits to be written (the saved
 * registers, the runtime's frames it returns through, the buffer: what
 * its resume touches on its stack besides its receive record, which the
 * sender prefetches from the record itself).  The frames above the
 * buffer, up to the record at the stack's top (about 10 of 16 lines in a
 * ring's actors), are not touched by a receive loop's hop: the
 * prefetch of the whole range paid them for nothing (docs/ACTORS.md,
 * "Prefetch: the next actor, one hop early", the resume's lines).  A buffer that is
 * not within CBCMN__RESUME_LINES_MAX lines above sp's (in the heap, in
 * a frame far up): the frames only. */
#define CBCMN__RESUME_LINES_MAX 16u
#define CBCMN__RESUME_LINES_FRAMES 4u
_Static_assert(CBCMN__RESUME_LINES_MAX <= 16, "sending() prefetches at most 16 lines");
static inline void *cbcmn__actor_resume_hint(const struct cbcmn__actor *a, const void *sp)
{
	const struct cbcmn__mb_wait *w = atomic_load_explicit(&a->receiver, memory_order_relaxed);
	uintptr_t first = (uintptr_t)sp >> 6, n = CBCMN__RESUME_LINES_FRAMES;
	if (w) { /* unsigned: a buffer below sp is past the bound too */
		uintptr_t d = (((uintptr_t)w->dst + sizeof(*w->dst) - 1) >> 6) - first;
		if (d < CBCMN__RESUME_LINES_MAX)
			n = d + 1;
	}
	return (void *)(first << 6 | n);
}

/* Prefetch the lines of [p, end), at most 16, for writing (rw 1) or
 * reading (0): docs/ACTORS.md "Prefetch: the next actor, one hop early".
 * The first four unrolled: every use on a hop spans three or four (the
 * loop cost about 9 instructions a line, 8 of the hop's lines: docs/
 * BENCHMARKS.md, "Twenty-third session, the hop's instructions"). */
#define CBCMN__PREFETCH_RANGE(p, end, rw)                                               \
	do {                                                                            \
		uintptr_t pf_ = (uintptr_t)(p) & ~(uintptr_t)63;                        \
		uintptr_t pe_ = (uintptr_t)(end);                                       \
		if (pf_ >= pe_)                                                         \
			break;                                                          \
		__builtin_prefetch((const void *)pf_, rw);                              \
		if (pf_ + 64 >= pe_)                                                    \
			break;                                                          \
		__builtin_prefetch((const void *)(pf_ + 64), rw);                       \
		if (pf_ + 128 >= pe_)                                                   \
			break;                                                          \
		__builtin_prefetch((const void *)(pf_ + 128), rw);                      \
		if (pf_ + 192 >= pe_)                                                   \
			break;                                                          \
		__builtin_prefetch((const void *)(pf_ + 192), rw);                      \
		pf_ += 192; /* lines 4 to 15 */                                         \
		for (int pk_ = 4; (pf_ += 64) < pe_ && pk_ < 16; pk_++)                 \
			__builtin_prefetch((const void *)pf_, rw);                      \
	} while (0)

/* Actor x was picked to run: the hop lines of the actor it will likely
 * send to (its last send's) and of the receive record that actor waited
 * in then, to arrive during x's run, where its send would wait for them
 * (and then read, there, the hints that prefetch the rest: actor_mbox.c,
 * sending()).  Only the hop's lines: the slot's cold part, fetched too,
 * would be 5 lines more a hop for the cache to hold.  A wrong guess
 * costs the prefetches. */
static inline void cbcmn__actor_predict(const struct cbcmn__actor *x)
{
	const struct cbcmn__actor *y = x->pf_to;
	if (!y)
		return;
	CBCMN__PREFETCH_RANGE(y, (const char *)y + CBCMN__ACTOR_HOP_LINES * 64u, 1);
	const struct cbcmn__mb_wait *w = x->pf_wait;
	if (w)
		CBCMN__PREFETCH_RANGE(w, w + 1, 1);
}

/* The largest mailbox ring a free slot keeps for its next actor (16 KiB
 * of messages): an executor's cache then holds at most 1 MiB of rings. */
#define CBCMN__SPARE_CAP_MAX 256u
/* The largest spare a slot keeps while its actor has a mailbox of one
 * message (one_msg): skynet's inner nodes (10) and leaves (1) alternate
 * in the same slots, and a live actor holds at most 1 KiB it does not use. */
#define CBCMN__SPARE_ONE_MAX 16u
/* The most messages' room the table's free batches keep in spare rings
 * (1 MiB, an executor's cache's worth): past it, a batch's rings are
 * freed as it goes there (actor.c, batch_put()). */
#define CBCMN__TABLE_SPARE_MAX 16384u

#define CBCMN__ACTOR_CHUNK_SHIFT 10u
#define CBCMN__ACTOR_CHUNK (1u << CBCMN__ACTOR_CHUNK_SHIFT)
#define CBCMN__ACTOR_CHUNKS 4096u /* 4 Mi actors alive at once */

/* A reference: (generation << 32) | (runtime tag << 22) | slot index.  The
 * tag (1..1023, one per runtime, cbcmn__actors.tag) keeps a reference of
 * one runtime from naming the actor in the same slot and generation of
 * another (the first actors of any two runtimes would otherwise share
 * their references); two live runtimes share a tag only if 1023 others
 * were made between them. */
#define CBCMN__REF_INDEX_BITS 22u
#define CBCMN__REF_TAGS 1023u
_Static_assert(CBCMN__ACTOR_CHUNKS * CBCMN__ACTOR_CHUNK == 1u << CBCMN__REF_INDEX_BITS,
	       "a reference's index field holds every slot");

static inline uint32_t cbcmn__ref_index(cbcmn_actor_ref r)
{
	return (uint32_t)r & ((1u << CBCMN__REF_INDEX_BITS) - 1);
}
static inline uint32_t cbcmn__ref_tag(cbcmn_actor_ref r)
{
	return (uint32_t)r >> CBCMN__REF_INDEX_BITS;
}
static inline uint32_t cbcmn__ref_gen(cbcmn_actor_ref r)
{
	return (uint32_t)(r >> 32);
}
static inline cbcmn_actor_ref cbcmn__ref_make(uint32_t gen, uint32_t tag, uint32_t index)
{
	return (cbcmn_actor_ref)gen << 32 | (cbcmn_actor_ref)tag << CBCMN__REF_INDEX_BITS | index;
}

struct cbcmn__actors {
	struct cbcmn__mutex lock; /* CBCMN__LOCK_ACTOR_TABLE: free batches, growth */
	uint32_t tag;             /* fixed: this runtime's tag in its references */
	struct cbcmn__actor *batches; /* free slots, a batch at a time (batch_next) */
	/* Messages' room of the spare rings those batches keep (actor.c,
	 * batch_put()); written under lock, read without it to decide. */
	_Atomic uint32_t spare_msgs;
	_Atomic uint32_t nslots;  /* slots made; released after their chunk */
	_Atomic uint64_t next_monitor;
	_Atomic(struct cbcmn__actor *) chunk[CBCMN__ACTOR_CHUNKS];
	void *chunk_mem[CBCMN__ACTOR_CHUNKS]; /* each chunk's allocation (chunk[] is aligned) */
	/* Tasks parked until their posts land (actor_mbox.c, lane_park()):
	 * the per-lane lists (struct cbcmn__exec's lw_head) under lw_lock,
	 * and how many, which every landing reads (after the read-mostly
	 * chunk array). */
	struct cbcmn__mutex lw_lock; /* CBCMN__LOCK_LANE_WAIT */
	_Atomic uint32_t lw_n;
};

/* Add n to gauge field of executor id's actor gauges: to its own share on
 * its own thread, else to the shared one (cbcmn__agauge_add()). */
#define CBCMN__AGAUGE(rt, id, field, n)                                                  \
	do {                                                                              \
		struct cbcmn__exec *ag_e_ = (rt)->exec[id];                               \
		cbcmn__agauge_add(ag_e_, &ag_e_->ss->act.field, &ag_e_->ss->act_own.field, (n)); \
	} while (0)
static inline uint32_t cbcmn__actor_home(const struct cbcmn__actor *a)
{
	return atomic_load_explicit(&a->home, memory_order_relaxed);
}

/* actor.c */
/* The calling task's actor, or NULL for a plain task (or NULL). */
static inline struct cbcmn__actor *cbcmn__actor_of(const struct cbcmn_task *t)
{
	return t && cbcmn__is_actor_task(t) ? t->arg : NULL;
}
/* The handler actor the host task t is running now, or NULL (t is not a
 * host, or between handlers). */
struct cbcmn__actor *cbcmn__hnd_current(const struct cbcmn_task *t);
/* The calling actor, or the handler actor the calling host task runs. */
static inline struct cbcmn__actor *cbcmn__actor_or_handler(const struct cbcmn_task *t)
{
	struct cbcmn__actor *a = cbcmn__actor_of(t);
	return a || !t ? a : cbcmn__hnd_current(t);
}
/* The handler actor host task t is halting now (its drop or fini runs),
 * or NULL. */
struct cbcmn__actor *cbcmn__hnd_halting(const struct cbcmn_task *t);
/* Is host task t calling a handler, or halting a handler actor (its drop
 * and fini)?  False if t is not a host. */
bool cbcmn__hnd_calling(const struct cbcmn_task *t);
/* Do task t's actor sends take the lock path, never the lanes?  A
 * handler's (it must not yield), and those of a halt's drop and fini:
 * the halt's DOWN and EXIT messages take the lock path, and a message of
 * the drop's in a lane would land after them (issue 16: a watcher must
 * see the actor's last messages before its DOWN). */
static inline bool cbcmn__sends_locked(const struct cbcmn_task *t)
{
	struct cbcmn__actor *a = cbcmn__actor_of(t);
	return a ? a->halt_begun : cbcmn__hnd_calling(t);
}

/* cbcmn__task_cancelled() for t, the task of fiber actor a: a stopped
 * (cbcmn__actor_stopped()), in its halt (cbcmn__task_halting()), or its
 * nursery chain cancelled.  Inline: the receive and every wait's begin
 * ask it each hop, and the calls out of line, three deep, cost about 30
 * instructions each (docs/BENCHMARKS.md, "Twenty-first session, the warm
 * hop"). */
static inline bool cbcmn__actor_cancelled(const struct cbcmn_task *t, const struct cbcmn__actor *a)
{
	/* acquire: pairs with the seq_cst store in stop_locked(). */
	return atomic_load_explicit(&a->interrupted, memory_order_acquire) || a->halt_begun ||
	       cbcmn__nursery_chain_cancelled(t->nursery);
}

/* cbcmn__task_cancelled(), inline for a fiber actor's task (a send's
 * check: its sender is mostly one). */
static inline bool cbcmn__task_cancelled_here(const struct cbcmn_task *t)
{
	return cbcmn__is_actor_task(t) ? cbcmn__actor_cancelled(t, t->arg)
				       : cbcmn__task_cancelled(t);
}

/* The calling actor (or handler actor): self must be one, and running;
 * else NULL and *err is -EPERM, or CBCMN_EFORKED in a forked child. */
static inline struct cbcmn__actor *cbcmn__actor_caller(struct cbcmn_task *self, int *err)
{
	/* Running first: another thread's task (a cx handed to a plain
	 * thread) is not looked into, its host's current handler least of
	 * all, which its host writes meanwhile.
	 * (test_a_plain_thread_with_a_handler_s_cx_gets_eperm, TSan) */
	struct cbcmn__actor *a =
		self && cbcmn__is_running(self) ? cbcmn__actor_or_handler(self) : NULL;
	*err = !a ? -EPERM : cbcmn__forked(self->rt) ? CBCMN_EFORKED : 0;
	return *err ? NULL : a;
}
/* The slot a names, locked, if a is alive; else NULL (-ESRCH). */
struct cbcmn__actor *cbcmn__actor_lock_ref(struct cbcmn_runtime *rt, cbcmn_actor_ref a);
/* The slot a names, alive or not (unlocked), or NULL: a slot outlives its
 * actors, so its atomic fields may be read through a stale reference.
 * Inline: a send looks it up every hop (lane_route()). */
static inline struct cbcmn__actor *cbcmn__actor_slot(struct cbcmn_runtime *rt, cbcmn_actor_ref a)
{
	struct cbcmn__actors *t = atomic_load_explicit(&rt->actors, memory_order_acquire);
	if (!t || cbcmn__ref_gen(a) == 0 || cbcmn__ref_tag(a) != t->tag)
		return NULL;
	uint32_t idx = cbcmn__ref_index(a);
	/* acquire: pairs with the release of nslots in slot_alloc(): the
	 * chunk pointer and its initialised slots are seen. */
	if (idx >= atomic_load_explicit(&t->nslots, memory_order_acquire))
		return NULL;
	struct cbcmn__actor *c = atomic_load_explicit(&t->chunk[idx >> CBCMN__ACTOR_CHUNK_SHIFT],
						      memory_order_relaxed);
	return &c[idx & (CBCMN__ACTOR_CHUNK - 1)];
}
/* cbcmn__actor_lock_ref() for slot s, the one ref names (from
 * cbcmn__actor_slot(rt, ref), at any time before: slots outlive their
 * actors): s locked if ref is its live actor's, else NULL.  A send that
 * looked the slot up already (lane_route()) does not look again. */
static inline struct cbcmn__actor *cbcmn__actor_lock_slot(struct cbcmn__actor *s,
							  cbcmn_actor_ref ref)
{
	cbcmn__flock_lock(&s->lock);
	/* ref is the live actor's, whose generation, tag and index it
	 * holds, and NONE from its halt on (halt_begin(), with gen's bump):
	 * the generation check from a hop's line, gen's own being cold. */
	if (s->state == CBCMN__A_LIVE && s->ref == ref)
		return s;
	cbcmn__flock_unlock(&s->lock);
	return NULL;
}

/* A spawn with what supervisors need (actor_sup.c).  contained: the halt
 * reason reaches the monitors only (the nursery sees 0, so a crash cancels
 * no sibling); mon: the calling actor monitors the new one from before it
 * can run (its id stored there), so no halt reason is missed; fini(state,
 * reason) runs at its halt after the drop callbacks, with the halt reason
 * (a stop's wins over what the behaviour returned), also when it never
 * ran (and when the spawn fails: then before this returns, with the
 * spawn's error). */
struct cbcmn__spawn_x {
	bool contained;
	uint64_t *mon;
	void (*fini)(void *state, int64_t reason);
	cbcmn_actor_handler handler; /* a handler actor (fn unused), or NULL */
};
int cbcmn__actor_spawn_x(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_fn fn, void *state,
			 const cbcmn_actor_opts *opts, const struct cbcmn__spawn_x *x,
			 cbcmn_actor_ref *out);

/* actor_mbox.c, for actor_sup.c: a DOWN waiting in the calling actor a's system queue, whether due or not
 * and even once a is stopped: taken into *m (true), or none (false). */
bool cbcmn__mb_take_down(struct cbcmn__actor *a, cbcmn_actor_msg *m);
/* The runtime's own try_send: *m as it is (no sender, no budget), the
 * receiver woken by executor e (NULL: from outside).  0, -EAGAIN, -ESRCH. */
int cbcmn__mb_try_put(struct cbcmn_runtime *rt, cbcmn_actor_ref to, const cbcmn_actor_msg *m,
		      struct cbcmn__exec *e);

/* actor_handler.c, for actor.c: whether t is no handler host, or one
 * with a single handler actor left (the one halting). */
bool cbcmn__hnd_last(const struct cbcmn_task *t);
/* actor.c, for actor_handler.c: end handler actor a (no task) with
 * reason, as a task's end would; held: messages its host dropped already
 * (a RETRY's), counted undelivered in its DOWNs.  own: its host task,
 * whose budget goes back to its payer before the DOWNs, as an actor
 * task's does, if a is then the host's last (cbcmn__hnd_last()); else NULL.
 * Returns the halt reason (a stop's wins). */
int64_t cbcmn__actor_halt_slot(struct cbcmn__actor *a, int64_t reason, uint32_t held,
			       struct cbcmn__exec *e, struct cbcmn_task *own);
/* actor.c, for actor_handler.c: end(t, result) for task t's end under a
 * landing pad of its own; a landing inside (a drop or fini overflowed)
 * calls end again, which goes on from where it was. */
int64_t cbcmn__actor_end_guarded(struct cbcmn_task *t, int64_t result,
				 int64_t (*end)(struct cbcmn_task *t, int64_t result));
/* actor_mbox.c, for actor_handler.c: take a's next deliverable message
 * (a due DOWN/EXIT first) into *m under its lock, handing freed room to
 * waiting senders (wl); e: the host's executor, whose trace ring records
 * the receive (as cbcmn_actor_receive()'s does).  False: none. */
bool cbcmn__mb_take(struct cbcmn__actor *a, cbcmn_actor_msg *m, struct cbcmn__wakes *wl,
		    struct cbcmn__exec *e);

/* actor_handler.c */
/* A handler actor spawned by self into n with opts joins self's host:
 * self is a host task of n and opts ask nothing a host of its own would
 * give (a placement, a budget, capabilities). */
bool cbcmn__hnd_joins(const struct cbcmn_task *self, const cbcmn_nursery *n,
		      const cbcmn_actor_opts *opts);
/* Start handler actor a (locked by nobody, LIVE, not yet published) with
 * handler h: on the calling handler's host (so NULL: it joins), else on
 * a new host task spawned into n with so, paid for already (paid: its
 * charge is given back on an error).  0 or the spawn's error. */
int cbcmn__hnd_start(cbcmn_cx *cx, cbcmn_nursery *n, struct cbcmn__actor *a, cbcmn_actor_handler h,
		     const cbcmn_actor_opts *opts, const cbcmn_spawn_opts *so,
		     const struct cbcmn__spawn_paid *paid);
/* a (locked, a handler actor) has something for its handler: have its
 * host run it once the lock is dropped (cbcmn__wakes_run()). */
void cbcmn__hnd_note(struct cbcmn__actor *a, struct cbcmn__wakes *wl);

/* actor.c: a, about to run on e, another executor than its home: its
 * home and gauges move there (cbcmn__actor_run(), actor_sched.c). */
void cbcmn__actor_home_here(struct cbcmn__actor *a, struct cbcmn__exec *e);

/* actor_mbox.c: sends over the lanes.  Set a's lanes word at spawn (its
 * generation and ring set; locked); open it as its task starts (not
 * locked); close it and wait, as its task ends, for the messages that
 * reserved places to be put (not locked; self: its task, which may yield);
 * at the halt (locked), close it and return how many are still in lanes
 * (counted undelivered; their puts will find the actor gone). */
void cbcmn__mb_lanes_init(struct cbcmn__actor *a);
void cbcmn__mb_lanes_open(struct cbcmn__actor *a);
void cbcmn__mb_lanes_settle(struct cbcmn_task *self, struct cbcmn__actor *a);
uint32_t cbcmn__mb_lanes_halt(struct cbcmn__actor *a);

/* actor_mbox.c (all under the slot lock unless said) */
/* Claim every waiting sender with result (they return it, message not
 * taken). */
void cbcmn__mb_fail_senders(struct cbcmn__actor *a, struct cbcmn__wakes *wl, int result);
/* Stop: fail the waiting senders (-ESRCH) and the receiver (-ESHUTDOWN).
 * True if the actor was waiting in a receive (that wait is over). */
bool cbcmn__mb_stop(struct cbcmn__actor *a, struct cbcmn__wakes *wl);
/* A DOWN for a (the watcher): to its waiting receiver, else queued. */
void cbcmn__mb_put_down(struct cbcmn__actor *a, struct cbcmn__monitor *mon,
			struct cbcmn__wakes *wl);

#endif
