/* statseg.h: private to libcbcmn: the statistics segment.
 *
 * A runtime keeps its statistics (each executor's counters, load figures
 * and state, and the runtime's own totals) in one shared memory segment, a
 * memfd named "cbcmn-stats" whose descriptor stays open for the runtime's
 * life.  The executors write it as they always wrote their counters; the
 * runtime reads it for cbcmn_stats_snapshot(); and another process with
 * ptrace-read access to this one (cbcmn-top, cbcmn-stat) maps the same
 * pages through /proc/PID/fd/N and reads them with cbcmn_watch_read(), at
 * no cost to the executors.  watch.c reads both ways with one function.
 *
 * Layout: a header page, then one page per executor (its slot, bound to the
 * executor's node).  The header says the version and the sizes: a reader
 * built from other sources refuses a layout it does not know.
 *
 * The reader trusts nothing in the segment: the target may be corrupt or
 * hostile.  The memfd is sealed against shrinking and growing
 * (CBCMN__SEG_SEALS) before anyone can map it, and a reader maps only a
 * sealed tmpfs file, so a page it mapped can never go away under it
 * (SIGBUS); it checks the header's geometry once, at open, on a private
 * copy, and from then on uses only that copy (struct cbcmn__seg), never the
 * header's live fields, to find the slots.
 */
#ifndef CBCMN_STATSEG_H
#define CBCMN_STATSEG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <fcntl.h>
#include <sys/types.h>

#include "cbcmn.h"

#define CBCMN__SEG_NAME "cbcmn-stats"
#define CBCMN__SEG_MAGIC 0x3174617473636263ull /* "cbcstat1" */
/* 2: sealed; the load figures and the state on lines of their own.
 * 3: the actor gauges (struct cbcmn__seg_actors) at the end of a slot;
 * the stall count and stall_task, in what was padding (zero in a
 * segment from before them).
 * 4: the mailbox figures (struct cbcmn__seg_mbox) at the end of a slot,
 * ext_backpressure at the end of the header.
 * 5: the executor's own share of the actor gauges (struct
 * cbcmn__seg_actors_own) at the end of a slot.
 * 6: a shared share's high half counts the moves on it
 * (CBCMN__SEG_AGAUGE_MOVE).
 * 7: a shared share's value takes its low 40 bits, the moves the high 24. */
#define CBCMN__SEG_VERSION 7u
/* What the runtime seals, and what a reader requires before it maps. */
#define CBCMN__SEG_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
/* Apart enough that the adjacent-line prefetcher does not pair a line the
 * owner writes often with one other executors read (two 64-byte lines). */
#define CBCMN__SEG_LINE 128

/* An executor's counters: written by the executor alone (CBCMN__COUNT),
 * read by anyone. */
struct cbcmn__counters {
	_Atomic uint64_t tasks_run, local_hits, inject_hits, steal_attempts, steal_successes,
		tasks_stolen, inline_runs, parks, wakes, spawns, completions;
	/* Rings and shards (ring.c, xmsg.c). */
	_Atomic uint64_t steals_gated, doorbells_sent, doorbells_recv, doorbells_coalesced,
		ring_msgs_submitted, ring_msgs_backpressure, sqes_submitted, cqes_reaped,
		ring_enters, xmsgs_sent, xmsgs_recv, xmsgs_acked, handoffs, io_ops;
	/* Acceptors (stream.c).  (The slot keeps its size: the load figures
	 * below start on the next 128-byte line.) */
	_Atomic uint64_t accept_errors;
	/* Stalls the monitor saw (monitor.c, its only writer). */
	_Atomic uint64_t stalls;
};

/* The actors homed on an executor (actor.c): gauges, each the current value
 * (the sum of its two shares here and in struct cbcmn__seg_actors_own),
 * changed with atomic adds by any thread but the executor's own (a sender,
 * a waker on another executor), so on a line of their own.  An actor's
 * home is the executor it last began to run on (before it first runs:
 * where it was spawned from, or its shard if pinned). */
struct cbcmn__seg_actors {
	_Atomic int64_t live;      /* live actors homed here */
	_Atomic int64_t running;   /* 0 or 1: the executor runs an actor now */
	_Atomic int64_t waiting;   /* blocked: on the mailbox, a sleep, a channel, I/O... */
	_Atomic int64_t receiving; /* of those, blocked in cbcmn_actor_receive() */
	_Atomic int64_t halting;   /* in their halt */
	_Atomic int64_t mailbox;   /* messages in their mailboxes */
	/* The executor's wheel load (actor_sched.c; seed 003 "Load
	 * statistics"), written by the executor only: 1000 = the wheel turns
	 * at its nominal rate.  While the wheel is empty, idle_since is the
	 * start of the turn under way and readers decay the load by 7/8 per
	 * nominal turn since (0: not empty).  Within the line the gauges
	 * already take: the slot's layout does not change, and a segment of
	 * a library without a wheel reads 0. */
	_Atomic uint64_t load_milli, load_idle_since, load_nominal_ns;
	/* Actors this executor handed to another one (actor_sched.c, stage 4
	 * of docs/ACTORS.md), written by the executor only. */
	_Atomic uint64_t migrations;
	/* When load_milli was last published while the wheel is busy (the
	 * start of its turn under way): an executor whose thread does not
	 * run publishes nothing, and migration must not trust what it said
	 * last (actor_sched.c).  In the line's padding, as above. */
	_Atomic uint64_t load_at;
	/* Restarts done by the supervisors running on this executor
	 * (actor_sup.c), written by the executor only; zero in a segment from
	 * before it (the slot's padding). */
	_Atomic uint64_t restarts;
};

/* The executor's own share of the actor gauges above (version 5), written
 * by its own thread only (CBCMN__AGAUGE: a load and a store), so that the
 * hop between two actors on one executor (a park, a receive's wait, its
 * claim, a wake) takes no locked add: four of them a hop drained the
 * store buffer each, the receiver's cold lines in it (docs/ACTORS.md,
 * "The hop's fast path").  A share alone may be negative (one thread
 * counts in what another counts out); the sum is the gauge. */
struct cbcmn__seg_actors_own {
	_Atomic int64_t live, waiting, receiving, halting, mailbox;
};

/* A shared share (version 7): its value in the low 40 bits, the moves on
 * it in the high 24, both changed by one atomic add of MOVE + n, so a
 * reader's two reads of it that agree saw no move between them, not even
 * one out and back in (watch.c, agauge()): a sequence count at no cost
 * to the writers.  MOVE is 2 << 40, not 1 << 40: the low part's carry or
 * borrow then moves the count by 1 to 3, never 0 (n -1 on a low part of
 * 0 adds 2^40 - 1: no carry into the count).  The gauge is the two
 * shares summed modulo 2^40 (cbcmn__seg_agauge()): right while it fits
 * in 39 bits (5.5e11), however far each share ran (a mailbox's shared
 * share counts every remote send, the own one every receive).  The count
 * comes round after 2^23 moves: two reads that far apart (a reader
 * preempted for some 100 ms beside a flood of remote sends) could agree
 * falsely, and sum an own share from between them.  Version 6 gave the
 * value 32 bits: a gauge past 2^31 - 1 on one executor read 0 (seventeenth
 * session). */
#define CBCMN__SEG_AGAUGE_BITS 40
#define CBCMN__SEG_AGAUGE_MOVE ((int64_t)2 << CBCMN__SEG_AGAUGE_BITS)

static inline int64_t cbcmn__seg_agauge(int64_t shared, int64_t own)
{
	/* The sum's low 40 bits, sign-extended (unsigned: no overflow,
	 * whatever a forged segment holds). */
	uint64_t v = ((uint64_t)shared + (uint64_t)own) << (64 - CBCMN__SEG_AGAUGE_BITS);
	return (int64_t)v >> (64 - CBCMN__SEG_AGAUGE_BITS);
}

/* Mailbox figures an executor keeps (actor_mbox.c), written by the
 * executor's own thread only (CBCMN__MCOUNT): a sender's back-pressure
 * where the sender runs, a receive's depth where the receiver runs.  On
 * lines of their own: written at every receive. */
struct cbcmn__seg_mbox {
	/* Sends that waited for room in a full mailbox, or were refused for
	 * it (-EAGAIN, or -ETIMEDOUT without waiting). */
	_Atomic uint64_t backpressure;
	/* log2 histogram of the depth a receive found: slot i counts depths
	 * in [2^i, 2^(i+1)), slot 0 also 0 (cbcmn_executor_stats). */
	_Atomic uint64_t depth_hist[CBCMN_MAILBOX_HIST_SLOTS];
};

/* An executor's wheel load as a reader sees it at now (CLOCK_MONOTONIC
 * ns): as published, decayed by 7/8 per nominal turn the wheel has stood
 * empty (what the wheel itself does when it is next used: an executor
 * parked with no actor never publishes again).  Relaxed: statistics. */
static inline uint64_t cbcmn__seg_actor_load(const struct cbcmn__seg_actors *a, uint64_t now)
{
	uint64_t v = atomic_load_explicit(&a->load_milli, memory_order_relaxed);
	uint64_t since = atomic_load_explicit(&a->load_idle_since, memory_order_relaxed);
	uint64_t nominal = atomic_load_explicit(&a->load_nominal_ns, memory_order_relaxed);
	if (!since || !nominal)
		return v;
	uint64_t k = now > since ? (now - since) / nominal : 0;
	if (k >= 512)
		return 0; /* (7/8)^512 of anything is nothing */
	while (k-- && v)
		v = v * 7 / 8;
	return v;
}

/* One executor's slot: four groups, each on lines of its own, since they
 * are written at different rates and read by different threads. */
struct cbcmn__seg_exec {
	/* Written by the executor at every count; read by snapshots. */
	struct cbcmn__counters ctr;
	/* Load statistics thieves read at every steal attempt (steal_gate,
	 * seed 003): written once per load window only, never beside a
	 * counter or the state, or each count would take the line from them. */
	_Alignas(CBCMN__SEG_LINE) _Atomic uint64_t avg_task_ns; /* EWMA of a scheduler pick */
	_Atomic uint64_t queue_depth;  /* run queue length, sampled with the load */
	_Atomic uint32_t busy_pct;     /* share of recent time running tasks */
	/* Written at every search and park; read by snapshots. */
	_Alignas(CBCMN__SEG_LINE) _Atomic uint32_t state; /* cbcmn_exec_state */
	_Atomic int32_t tid;           /* its thread, 0 while none */
	int32_t cpu, node;             /* where it is pinned (-1: not), fixed */
	/* The task stalling it now, 0 if none (monitor.c, its only writer;
	 * zero in a segment from before it, in what was padding). */
	_Atomic uint64_t stall_task;
	/* Actors (version 3). */
	_Alignas(CBCMN__SEG_LINE) struct cbcmn__seg_actors act;
	/* Mailboxes (version 4). */
	_Alignas(CBCMN__SEG_LINE) struct cbcmn__seg_mbox mbox;
	/* The actor gauges' own share (version 5). */
	_Alignas(CBCMN__SEG_LINE) struct cbcmn__seg_actors_own act_own;
};

struct cbcmn__seg_hdr {
	/* Stored last, release, once the header is whole (cbcmn__seg_publish);
	 * a reader loads it acquire before it reads any other field. */
	_Atomic uint64_t magic;        /* CBCMN__SEG_MAGIC */
	uint32_t version;              /* CBCMN__SEG_VERSION */
	uint32_t hdr_size;             /* sizeof(struct cbcmn__seg_hdr) */
	uint32_t exec_size;            /* sizeof(struct cbcmn__seg_exec) */
	uint32_t slots_off;            /* where slot 0 begins */
	uint32_t stride;               /* bytes from one slot to the next */
	uint32_t nexec;                /* slots */
	int32_t pid;                   /* the process that made it */
	/* This process's number for the runtime (1, 2, ...): the last
	 * argument of the USDT probes, so a BPF tool can tell two runtimes
	 * of one process apart (docs/PROBES.md).  It fills what was the hole
	 * before start_ns (the layout does not change: watch.c asserts it),
	 * zero in a segment of a library from before it: "unknown". */
	uint32_t rt_id;
	uint64_t start_ns;             /* CLOCK_MONOTONIC at runtime creation */
	uint32_t ring_setup_flags;     /* IORING_SETUP_* of the rings */
	int32_t policy;                /* cbcmn_policy applied, or CBCMN_PIN_NONE */
	uint8_t msg_ring;              /* doorbells are MSG_RING */
	uint8_t oversubscribed;
	/* cbcmn_backend of the runtime; 0 (a runtime from before backends,
	 * whose pad this was) means io_uring. */
	uint8_t backend;
	/* 1: the last slot is the spare executor's (monitor.c), not counted
	 * in cbcmn_stats.executors; 0 in a segment from before it (its pad). */
	uint8_t spare;
	_Atomic uint32_t alive;        /* 1 from creation until destroy begins */
	_Atomic uint32_t nlive;        /* executors [0, nlive) run (a copy of rt->nlive) */
	/* Work and doorbells of threads outside the executors. */
	_Atomic uint64_t ext_spawns, ext_completions, ext_doorbells;
	_Atomic uint64_t exec_starts, exec_retires;
	/* Mailbox back-pressure of threads outside the executors (version
	 * 4): added to by any such thread, atomically. */
	_Atomic uint64_t ext_backpressure;
};

/* A mapped segment: ours (writable) or another process's (read only).
 * The geometry is this process's own copy, checked against the mapping's
 * size when it was made: the header's fields may change under a reader. */
struct cbcmn__seg {
	struct cbcmn__seg_hdr *hdr;
	size_t size;                   /* mapped */
	int fd;                        /* -1: anonymous (memfd refused) */
	uint32_t nexec, stride, slots_off;
	int32_t pid;
	uint64_t start_ns;
	uint32_t rt_id;                /* the header's, copied at creation / map */
};

/* A memfd named name of size bytes, sealed (CBCMN__SEG_SEALS), to map
 * shared; or -errno: -EFBIG when size is over the file size limit
 * (RLIMIT_FSIZE), checked first, since ftruncate past it raises SIGXFSZ,
 * whose default action kills the process. */
int cbcmn__memfd_sealed(const char *name, size_t size);

/* For watchers of another process's segments (watch.c, trace_watch.c). */
struct stat;
/* Process pid (as /proc here numbers it) in its own pid namespace. */
pid_t cbcmn__own_pid(pid_t pid);
/* The descriptors of pid that are memfds named name, in *fds (malloc'd,
 * *n of them).  0, -ESRCH, -EACCES or -errno. */
int cbcmn__memfd_fds(pid_t pid, const char *name, int **fds, uint32_t *n);
/* Open pid's descriptor nr (open(2) flags) if it is a memfd named name,
 * sealed (against shrinking and growing), of at least hlen bytes, with
 * *st its fstat and its first hlen bytes read into hdr (a private copy to
 * check).  Checked before it is opened for I/O (as a path), so whatever
 * pid puts at nr meanwhile is never opened.  Returns the descriptor,
 * -EACCES, -ENOENT (not such a file, or not one yet: unsealed with its
 * first hlen bytes zero), -EPROTO (unsealed). */
int cbcmn__memfd_open(pid_t pid, int nr, const char *name, int flags, struct stat *st, void *hdr,
		      size_t hlen);

static inline struct cbcmn__seg_exec *cbcmn__seg_slot(const struct cbcmn__seg *s, uint32_t i)
{
	return (struct cbcmn__seg_exec *)((char *)s->hdr + s->slots_off + (size_t)s->stride * i);
}

#endif
