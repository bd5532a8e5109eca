/* trace_seg.h: private to libcbcmn: the trace rings' layout, and how two
 * consumers (the process's own cbcmn_trace_drain() and a watcher such as
 * cbcmn-top --record) take their events, each once (docs/TRACE.md,
 * "Shared rings").
 *
 * With CBCMN_TRACE_EVENTS=N in its environment, a runtime puts its trace
 * rings in one memfd named "cbcmn-trace", sealed at its size like the
 * statistics segment (statseg.h), which a process allowed to ptrace-read
 * it maps read-write through /proc/PID/fd/N.  Without it the rings are
 * private memory, laid out the same way.
 *
 * Layout: a header page, then one ring per executor, each `ring_stride`
 * bytes apart: a line the executor writes (tail, dropped), a line the
 * consumers write (head), then `cap` records.
 *
 * The claim: a consumer loads head and tail, copies the records between,
 * then moves head over them with a compare-and-swap.  Whoever's CAS wins
 * took those events; the loser's copies may be torn (the executor may
 * have reused the slots once the winner moved head) and are thrown away.
 * Nothing waits: no consumer can hold another, or the executor, up.
 *
 * Nothing a consumer reads there is trusted: the other side may be
 * corrupt or hostile.  The geometry (capacity, where each ring is) is each
 * side's private copy; head and tail are checked (tail - head at most the
 * capacity) before any record is read, and a record's index is masked
 * with the private capacity, so no value in the segment can send a read
 * or write outside it.
 */
#ifndef CBCMN_TRACE_SEG_H
#define CBCMN_TRACE_SEG_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "cbcmn.h"

#define CBCMN__TSEG_NAME "cbcmn-trace"
#define CBCMN__TSEG_MAGIC 0x3163617274636263ull /* "cbctrac1" */
/* 2: the actor kinds (CBCMN_TRACE_ACTOR_*), same layout.  A reader takes
 * the versions whose kinds it knows (1 is 2's subset); an older reader
 * refuses a newer segment (-EPROTO) rather than count its new kinds as
 * invalid records. */
/* 3: the recorders' lease (beats, expired, own_holds), a longer header:
 * a reader takes 1 and 2 as before, without the lease. */
#define CBCMN__TSEG_VERSION 3u
#define CBCMN__TSEG_VERSION_MIN 1u
/* The header of versions 1 and 2, before the lease's fields. */
#define CBCMN__TSEG_HDR_V2 64u
/* How long a target's full ring waits for a recorder's drain (beats)
 * before it lets go of every recorder's hold: a recorder killed (-9)
 * while attached would else keep a lazy target recording for ever.  A
 * live one drains every few milliseconds (cbcmn-top: 5 ms). */
#define CBCMN__TSEG_LEASE_NS 1000000000ull
/* The environment variable that puts a runtime's rings in the memfd, and
 * its size in records per executor (as cbcmn_config.trace_events):
 * "N", recording from the runtime's creation, or "N:lazy", recording only
 * while a recorder is attached. */
#define CBCMN__TSEG_ENV "CBCMN_TRACE_EVENTS"
/* At most this many records per executor (32 bytes each: 512 MiB). */
#define CBCMN__TRACE_MAX (1u << 24)

/* Atomic, relaxed both ways: a consumer may copy a slot the executor is
 * rewriting (the claim below then fails and the copy is thrown away),
 * and that read must be no data race (plain or volatile, it was one:
 * TSan said so).  Same layout; on x86-64 the same loads and stores. */
struct cbcmn__trace_rec {
	_Atomic uint64_t ts, dur, arg;
	_Atomic uint32_t peer, kind;
};

struct cbcmn__trace_ring {
	/* The executor's: where its next record goes, and what it dropped. */
	_Alignas(64) _Atomic uint64_t tail;
	_Atomic uint64_t dropped;
	/* The consumers': the first record not yet taken. */
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) struct cbcmn__trace_rec rec[];
};

struct cbcmn__tseg_hdr {
	/* Stored last, release, once the header is whole; a reader loads it
	 * acquire before anything else. */
	_Atomic uint64_t magic;        /* CBCMN__TSEG_MAGIC */
	uint32_t version;              /* CBCMN__TSEG_VERSION */
	uint32_t hdr_size;             /* sizeof(struct cbcmn__tseg_hdr) */
	uint32_t rec_size;             /* sizeof(struct cbcmn__trace_rec) */
	uint32_t nexec;                /* rings */
	uint32_t cap;                  /* records per ring, a power of two */
	uint32_t rt_id;                /* the runtime's id (statseg.h): which segment is ours */
	uint64_t rings_off;            /* where ring 0 begins */
	uint64_t ring_stride;          /* bytes from one ring to the next */
	int32_t pid;                   /* the process that made it (its own pid namespace) */
	/* Who wants events now: the runtime itself (1 unless the variable
	 * says ":lazy"; 1 more with cbcmn_config.trace_events), plus one per
	 * recorder attached (cbcmn__tsw_open .. cbcmn__tsw_disarm).  0: the
	 * executors record nothing, each site a load and a branch.  Anyone
	 * may write it: it can only turn recording on or off, never make
	 * anything unsafe.  A recorder that died leaves its hold, until the
	 * lease below ends it. */
	_Atomic uint32_t holds;
	uint64_t start_ns;             /* CLOCK_MONOTONIC at creation */
	/* ---- version 3: the recorders' lease ----
	 * Each recorder adds 1 to beats at every drain.  An executor whose
	 * ring is full (nobody took its events) and which has seen beats
	 * stand still for CBCMN__TSEG_LEASE_NS takes holds back to
	 * own_holds (every recorder's hold: none drained) and adds 1 to
	 * expired; a recorder alive after all (stopped, ^Z) sees expired
	 * move at its next drain and takes its hold again.  No clock is
	 * shared: the target times the lease on its own. */
	_Atomic uint64_t beats;
	_Atomic uint32_t expired;
	uint32_t own_holds;            /* the runtime's own part of holds, fixed */
};

/* Move up to n events of ring r (capacity mask + 1, executor exec) into
 * out[], each taken by this caller only (the claim above).  Returns how
 * many, or -EBADMSG when head and tail are impossible (tail - head above
 * the capacity: a corrupt segment), with *head_out, *tail_out what was
 * read.  Any thread, any process. */
int cbcmn__trace_take(struct cbcmn__trace_ring *r, uint64_t mask, uint32_t exec,
		      cbcmn_trace_event *out, uint32_t n, uint64_t *head_out, uint64_t *tail_out);

/* ---- a watcher's view (trace_watch.c) ---------------------------------- */

struct cbcmn__tsw;

/* Map the trace rings of runtime rt_id of process pid (as /proc numbers
 * it), read-write, and hold them on (the header's holds).  Returns 0, -ENOENT (it has none: not started with
 * CBCMN_TRACE_EVENTS), -EACCES (not allowed), -EPROTO (a layout this
 * reader does not know), -ENOMEM. */
int cbcmn__tsw_open(pid_t pid, uint32_t rt_id, struct cbcmn__tsw **out);
uint32_t cbcmn__tsw_nexec(const struct cbcmn__tsw *w);
uint32_t cbcmn__tsw_cap(const struct cbcmn__tsw *w);
/* When the runtime was made, CLOCK_MONOTONIC, as the target says. */
uint64_t cbcmn__tsw_start_ns(const struct cbcmn__tsw *w);

/* What a watcher's drain found wrong, and lost. */
struct cbcmn__tsw_stat {
	uint64_t dropped;        /* the rings' own count of events dropped, full */
	uint32_t corrupt;        /* rings found corrupt (left alone from then on) */
	uint32_t first_corrupt;  /* the first of them, and what it said */
	uint64_t bad_head, bad_tail;
	uint64_t invalid;        /* records of no known kind, or naming no executor */
	/* Times our hold was found ended by the lease (we drained less often
	 * than CBCMN__TSEG_LEASE_NS, stopped): until the drain that took it
	 * again, a lazy target recorded nothing, so its events then are in
	 * no count at all, dropped included. */
	uint32_t lapses;
};

/* Move up to n events into out[], ring after ring from where the last
 * call stopped; *st updated.  Returns how many.  One thread at a time per
 * watcher. */
uint32_t cbcmn__tsw_drain(struct cbcmn__tsw *w, cbcmn_trace_event *out, uint32_t n,
			  struct cbcmn__tsw_stat *st);
/* Let go of the hold cbcmn__tsw_open took (the target stops recording
 * unless someone else holds it); once, also from cbcmn__tsw_close. */
void cbcmn__tsw_disarm(struct cbcmn__tsw *w);

/* The sum of the heads of the rings not found corrupt: how far the
 * consumers, this one and any other, have taken them. */
uint64_t cbcmn__tsw_heads(const struct cbcmn__tsw *w);
void cbcmn__tsw_close(struct cbcmn__tsw *w);

#endif
