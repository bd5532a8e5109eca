// SPDX-License-Identifier: GPL-2.0
/* cbcmn.bpf.c: the kernel's view of one cbcmn process.  Per shard
 * (executor) counters from libcbcmn's USDT probes, the sched tracepoints and
 * the io_uring tracepoints, kept in ARRAY maps indexed by shard: no ring
 * buffer, nothing per event leaves the kernel.  Each program attaches on its
 * own; the loader (tools/bpf/bpfmon.c) turns off those the kernel lacks. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/usdt.bpf.h>

#include "cbcmn_bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* The process watched (its tgid), set by the loader before load. */
const volatile __u32 targ_tgid = 0;

/* The runtime watched, by its id in the process (the last argument of the
 * probes, cbcmn_stats.runtime_id); 0: every runtime of the process, their
 * shards merged.  Set by the loader before load. */
const volatile __u32 targ_rt = 0;

/* The target's mm (struct mm_struct *), learned at its first SQE: a ring
 * is ours only if it was made by the target (io_ring_ctx.mm_account), so a
 * ring address freed by the target and reused by another process is not
 * counted as ours.  0 until learned. */
__u64 targ_mm = 0;

/* A test aid (CBCMN_BPF_MISS_SWITCHES, docs/OBSERVABILITY.md): when N > 0,
 * sched_switch ignores every Nth switch of each executor thread, as this
 * kernel does with some (account_switch), to prove the figures do not
 * depend on seeing them all.  0: every switch counts. */
const volatile __u32 miss_switch_every = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CBCMN_BPF_NSLOTS);
	__type(key, __u32);
	__type(value, struct cbcmn_bpf_shard);
	__uint(map_flags, BPF_F_MMAPABLE); /* line-aligned values (CBCMN_BPF_LINE) */
} shards SEC(".maps");

/* tid -> shard, filled by cbcmn:exec_start and by the loader for executors
 * that started before it attached; sched_switch keeps its timestamps here. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4 * CBCMN_BPF_MAX_SHARDS);
	__type(key, __u32);
	__type(value, struct cbcmn_bpf_thread);
} threads SEC(".maps");

/* io_uring ring (struct io_ring_ctx *) -> shard, learned at the first SQE an
 * executor thread submits: completions and overflows are posted from other
 * contexts (io-wq, a MSG_RING sender) and are attributed by ring. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4 * CBCMN_BPF_MAX_SHARDS);
	__type(key, __u64);
	__type(value, __u32);
} rings SEC(".maps");

/* A direct-mapped cache in front of `rings`: every CQE asks which shard its
 * ring is, and an ARRAY lookup is inlined by the verifier where a HASH
 * lookup is a call and a jhash.  An entry is one word, the ring's address
 * with the shard in its top 16 bits (where a kernel address on 4-level
 * paging holds only ones), so a reader never sees a ring with another
 * ring's shard.  Rings whose address does not have those ones (5-level
 * paging) are not cached: `rings` answers for them. */
#define RING_CACHE 1024
#define RING_ADDR_BITS 48
#define RING_ADDR_MASK ((1ull << RING_ADDR_BITS) - 1)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RING_CACHE);
	__type(key, __u32);
	__type(value, __u64);
} ring_cache SEC(".maps");

/* Who pinned the maps (struct cbcmn_bpf_owner): the loader's only. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cbcmn_bpf_owner);
} pin_owner SEC(".maps");

/* One word per CPU to launder a tp_btf argument (see ring_scalar()). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ring_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CBCMN_BPF_MAX_PAIRS);
	__type(key, struct cbcmn_bpf_pair_key);
	__type(value, struct cbcmn_bpf_pair);
} steal_pairs SEC(".maps");

/* SQEs by opcode: index shard * CBCMN_BPF_MAX_OPS + opcode. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CBCMN_BPF_NSLOTS * CBCMN_BPF_MAX_OPS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, BPF_F_MMAPABLE); /* line-aligned values (CBCMN_BPF_LINE) */
} sqe_ops SEC(".maps");

/* cbcmn:lock_contended wait, log2 ns: index shard * CBCMN_BPF_HIST_SLOTS + slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CBCMN_BPF_NSLOTS * CBCMN_BPF_HIST_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, BPF_F_MMAPABLE); /* line-aligned values (CBCMN_BPF_LINE) */
} lock_hist SEC(".maps");

/* Per shard scheduling state for doorbell latency (struct cbcmn_bpf_sched). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CBCMN_BPF_NSLOTS);
	__type(key, __u32);
	__type(value, struct cbcmn_bpf_sched);
	__uint(map_flags, BPF_F_MMAPABLE); /* line-aligned values (CBCMN_BPF_LINE) */
} shard_sched SEC(".maps");

/* Run-queue latency, futex waits, doorbell and steal latency: log2 us histograms,
 * index (kind * CBCMN_BPF_NSLOTS + shard) * CBCMN_BPF_HIST_SLOTS + slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CBCMN_BPF_NHISTS * CBCMN_BPF_NSLOTS * CBCMN_BPF_HIST_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, BPF_F_MMAPABLE); /* line-aligned values (CBCMN_BPF_LINE) */
} hists SEC(".maps");

/* Several CPUs may bump one shard (a sender counts on the target's entry),
 * so every add is atomic: exact counts are the point. */
#define ADD(p, field, v) __sync_fetch_and_add(&(p)->field, (v))

static __always_inline bool in_target(void)
{
	return (__u32)(bpf_get_current_pid_tgid() >> 32) == targ_tgid;
}

/* A probe's runtime id: is it the runtime watched? */
static __always_inline bool rt_ok(__u32 rt)
{
	return !targ_rt || rt == targ_rt;
}

/* An executor id from a probe argument (-1 from outside the runtime). */
static __always_inline __u32 slot_of(long id)
{
	return id >= 0 && id < CBCMN_BPF_MAX_SHARDS ? (__u32)id : CBCMN_BPF_OUTSIDE;
}

static __always_inline struct cbcmn_bpf_shard *shard(__u32 i)
{
	return bpf_map_lookup_elem(&shards, &i);
}

/* task_struct::state became __state in 5.14. */
struct task_struct___o {
	volatile long int state;
} __attribute__((preserve_access_index));

static __always_inline long task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___o *)t, state);
}

#define TASK_DEAD_STATE 0x80 /* TASK_DEAD: the task's last switch-out */

/* The kernel's run-queue and migration counts of task t (struct
 * cbcmn_bpf_thread, last_*).  sched_info exists with CONFIG_SCHED_INFO
 * (SCHEDSTATS or TASK_DELAY_ACCT: every distribution kernel), and is kept
 * whatever the schedstats sysctl says since 5.14; without it the run
 * queue is not measured (bpfmon.c says so) and run_delay stays 0 here. */
struct sched_counts {
	__u64 run_delay, pcount, migrations;
};

static __always_inline struct sched_counts sched_counts_of(struct task_struct *t)
{
	struct sched_counts c = {0, 0, BPF_CORE_READ(t, se.nr_migrations)};
	if (bpf_core_field_exists(t->sched_info)) {
		c.run_delay = BPF_CORE_READ(t, sched_info.run_delay);
		c.pcount = BPF_CORE_READ(t, sched_info.pcount);
	}
	return c;
}

static __always_inline void sched_counts_base(struct cbcmn_bpf_thread *th, struct task_struct *t)
{
	struct sched_counts c = sched_counts_of(t);
	th->last_run_delay = c.run_delay;
	th->last_pcount = c.pcount;
	th->last_migrations = c.migrations;
	th->sched_base = 1;
}

/* The shard the current thread runs, or NULL for a thread that is not an
 * executor of the target. */
static __always_inline struct cbcmn_bpf_shard *current_shard(void)
{
	if (!in_target())
		return NULL;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cbcmn_bpf_thread *th = bpf_map_lookup_elem(&threads, &tid);
	return th ? shard(th->shard) : NULL;
}

static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 s = 0;
#pragma unroll
	for (int i = 5; i >= 0; i--) {
		__u32 b = 1u << i;
		if (v >> b) {
			v >>= b;
			s += b;
		}
	}
	return s < CBCMN_BPF_HIST_SLOTS ? s : CBCMN_BPF_HIST_SLOTS - 1;
}

/* n samples of us each into histogram kind of shard slot. */
static __always_inline void hist_add_n(__u32 kind, __u32 slot, __u64 us, __u64 n)
{
	if (slot >= CBCMN_BPF_NSLOTS)
		return;
	__u32 i = (kind * CBCMN_BPF_NSLOTS + slot) * CBCMN_BPF_HIST_SLOTS + log2_slot(us);
	__u64 *c = bpf_map_lookup_elem(&hists, &i);
	if (c)
		__sync_fetch_and_add(c, n);
}

static __always_inline void hist_add(__u32 kind, __u32 slot, __u64 us)
{
	hist_add_n(kind, slot, us, 1);
}

static __always_inline struct cbcmn_bpf_sched *shard_sched_of(__u32 i)
{
	return bpf_map_lookup_elem(&shard_sched, &i);
}

/* ---- rings: io_ring_ctx -> shard ------------------------------------------------ */

static __always_inline bool ring_cacheable(__u64 ring)
{
	return (ring >> RING_ADDR_BITS) == 0xffff;
}

static __always_inline __u64 *ring_cache_slot(__u64 ring)
{
	/* io_ring_ctx comes from kmalloc: the low bits say little. */
	__u32 k = (__u32)((ring >> 6) ^ (ring >> 16)) & (RING_CACHE - 1);
	return bpf_map_lookup_elem(&ring_cache, &k);
}

/* The ring's address as a number: a tp_btf argument is a typed pointer on
 * which the verifier refuses shifts and masks; stored in a map value and
 * loaded back it is a plain scalar (root may store pointers in maps). */
static __always_inline __u64 ring_scalar(__u64 ring)
{
	__u32 z = 0;
	__u64 *v = bpf_map_lookup_elem(&ring_scratch, &z);
	if (!v)
		return 0; /* never (a per-CPU slot 0 exists); not the pointer */
	*v = ring;
	return *(volatile __u64 *)v;
}

/* Was ring made by the target?  Its io_ring_ctx keeps the mm of the task
 * that created it (mm_account, 5.10+).  Asked only of rings found in our
 * maps (one probe read per CQE of ours): a stale entry for an address the
 * kernel has since given to another process's ring is not ours.  Where the
 * field or our mm is unknown it cannot tell, and trusts the entry. */
static __always_inline bool ring_ours(__u64 ring)
{
	struct io_ring_ctx *ctx = (struct io_ring_ctx *)ring;
	if (!bpf_core_field_exists(ctx->mm_account))
		return true;
	__u64 mm = (__u64)BPF_CORE_READ(ctx, mm_account), want = targ_mm;
	return !mm || !want || mm == want;
}

static __always_inline struct cbcmn_bpf_shard *ring_shard(__u64 ring)
{
	ring = ring_scalar(ring);
	struct cbcmn_bpf_shard *s = NULL;
	__u64 *c = ring_cacheable(ring) ? ring_cache_slot(ring) : NULL;
	__u64 v = c ? *c : 0;
	if (v && (v & RING_ADDR_MASK) == (ring & RING_ADDR_MASK)) {
		s = shard((__u32)(v >> RING_ADDR_BITS));
	} else {
		__u32 *i = bpf_map_lookup_elem(&rings, &ring);
		s = i ? shard(*i) : NULL;
	}
	return s && ring_ours(ring) ? s : NULL;
}

/* Ring ring is shard si's: into `rings` and the cache (once: an executor
 * submits to its own ring only, and every SQE would otherwise rewrite it). */
static __always_inline void ring_learn(__u64 ring, __u32 si)
{
	__u64 *c = ring_cacheable(ring) ? ring_cache_slot(ring) : NULL;
	__u64 v = (ring & RING_ADDR_MASK) | ((__u64)si << RING_ADDR_BITS);
	if (c && *c == v)
		return;
	bpf_map_update_elem(&rings, &ring, &si, BPF_ANY);
	if (c)
		*c = v;
	/* The shard remembers its ring, so that ring_forget() can drop it. */
	struct cbcmn_bpf_sched *ss = bpf_map_lookup_elem(&shard_sched, &si);
	if (ss)
		ss->ring = ring;
	if (!targ_mm) {
		struct task_struct *me = (struct task_struct *)bpf_get_current_task();
		targ_mm = (__u64)BPF_CORE_READ(me, mm);
	}
}

/* Shard si's thread leaves its loop or exits: its ring is about to be
 * closed, and its address may then be another ring's (another process's
 * too).  Drop it from `rings` and the cache.  A CQE posted to it after this
 * (a cancellation at teardown) is not counted. */
static __always_inline void ring_forget(__u32 si)
{
	struct cbcmn_bpf_sched *ss = bpf_map_lookup_elem(&shard_sched, &si);
	if (!ss || !ss->ring)
		return;
	__u64 ring = ss->ring;
	ss->ring = 0;
	bpf_map_delete_elem(&rings, &ring);
	__u64 *c = ring_cacheable(ring) ? ring_cache_slot(ring) : NULL;
	if (c && (*c & RING_ADDR_MASK) == (ring & RING_ADDR_MASK))
		*c = 0;
}

/* ---- USDT probes of libcbcmn (docs/PROBES.md) ---------------------------- */

SEC("usdt")
int BPF_USDT(cbcmn_steal, __u32 thief, __u32 victim, __u32 taken, __u64 search_ns, __u32 rt)
{
	struct cbcmn_bpf_shard *s;
	if (!in_target() || !rt_ok(rt) || !(s = shard(slot_of(thief))))
		return 0;
	ADD(s, steals, 1);
	ADD(s, tasks_stolen, taken);
	/* Steal latency: the runtime measures it (from the moment the thief
	 * found nothing local), one sample per successful steal. */
	ADD(s, steal_lat, 1);
	ADD(s, steal_lat_ns, search_ns);
	hist_add(CBCMN_BPF_HIST_STEAL, slot_of(thief), search_ns / 1000);
	struct cbcmn_bpf_pair_key k = {.thief = thief, .victim = victim};
	struct cbcmn_bpf_pair *p = bpf_map_lookup_elem(&steal_pairs, &k);
	if (!p) {
		struct cbcmn_bpf_pair zero = {};
		bpf_map_update_elem(&steal_pairs, &k, &zero, BPF_NOEXIST);
		if (!(p = bpf_map_lookup_elem(&steal_pairs, &k)))
			return 0;
	}
	ADD(p, steals, 1);
	ADD(p, tasks, taken);
	return 0;
}

SEC("usdt")
int BPF_USDT(cbcmn_steal_fail, __u32 thief, __u32 victim, __u32 rt)
{
	struct cbcmn_bpf_shard *s;
	if (!in_target() || !rt_ok(rt) || !(s = shard(slot_of(thief))))
		return 0;
	ADD(s, steal_fails, 1);
	struct cbcmn_bpf_pair_key k = {.thief = thief, .victim = victim};
	struct cbcmn_bpf_pair *p = bpf_map_lookup_elem(&steal_pairs, &k);
	if (!p) {
		struct cbcmn_bpf_pair zero = {};
		bpf_map_update_elem(&steal_pairs, &k, &zero, BPF_NOEXIST);
		if (!(p = bpf_map_lookup_elem(&steal_pairs, &k)))
			return 0;
	}
	ADD(p, fails, 1);
	return 0;
}

SEC("usdt")
int BPF_USDT(cbcmn_doorbell, int sender, __u32 target, int kind, __u32 rt)
{
	struct cbcmn_bpf_shard *s;
	if (!in_target() || !rt_ok(rt))
		return 0;
	if ((s = shard(slot_of(sender)))) {
		if (kind == 0)
			ADD(s, doorbells_msg_ring, 1);
		else
			ADD(s, doorbells_eventfd, 1);
	}
	if (!(s = shard(slot_of(target))))
		return 0;
	ADD(s, doorbells_recv, 1);

	/* Doorbell latency.  The probe fires after the MSG_RING SQE was
	 * submitted, when the target may already be running because of it:
	 * the doorbell's start is the sender's MSG_RING submission
	 * (io_uring_submit_req), else (eventfd, or the io_uring programs off)
	 * now. */
	__u64 now = bpf_ktime_get_ns(), t0 = now;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cbcmn_bpf_thread *me = bpf_map_lookup_elem(&threads, &tid);
	if (kind == 0 && me && me->db_submit_ts && me->db_submit_ts <= now)
		t0 = me->db_submit_ts;
	struct cbcmn_bpf_sched *ts = shard_sched_of(slot_of(target));
	if (!ts)
		return 0;
	/* On a CPU by the switches seen, checked against its task, since
	 * the kernel does not trace every switch (account_switch): by the
	 * switches on, it is unless it sleeps (a switch-out missed); by them
	 * off, it is if on a CPU and runnable (a switch-in missed).  Not
	 * on_cpu alone: the kernel sets it after the sched_switch tracepoint
	 * at a switch-in and clears it after it at a switch-out, so around a
	 * switch it says the opposite (left: a preempted thread just
	 * switched out reads running for that instant). */
	__u32 running = ts->oncpu;
	struct task_struct *task = (struct task_struct *)ts->task;
	if (task && BPF_CORE_READ(task, pid) == (int)s->tid) {
		bool runnable = task_state(task) == 0, on = BPF_CORE_READ(task, on_cpu);
		running = running ? on || runnable : on && runnable;
	}
	if (running) {
		if (ts->on_ts >= t0) {
			/* It was switched in after the doorbell started: the
			 * wake already happened, measure it now. */
			ADD(s, doorbell_lat, 1);
			ADD(s, doorbell_lat_ns, ts->on_ts - t0);
			hist_add(CBCMN_BPF_HIST_DOORBELL, slot_of(target), (ts->on_ts - t0) / 1000);
		} else {
			ADD(s, doorbells_running, 1);
		}
	} else if (ts->db_t0) {
		ADD(s, doorbells_pending, 1);
	} else {
		ts->db_t0 = t0;
	}
	return 0;
}

SEC("usdt")
int BPF_USDT(cbcmn_doorbell_coalesced, int waker, __u32 target, __u32 rt)
{
	struct cbcmn_bpf_shard *s;
	if (in_target() && rt_ok(rt) && (s = shard(slot_of(waker))))
		ADD(s, doorbells_coalesced, 1);
	return 0;
}

SEC("usdt")
int BPF_USDT(cbcmn_xmsg, __u32 sender, __u32 receiver, __u32 kind, __u32 rt)
{
	struct cbcmn_bpf_shard *s;
	if (!in_target() || !rt_ok(rt))
		return 0;
	if ((s = shard(slot_of(sender))))
		ADD(s, xmsgs_sent, 1);
	if ((s = shard(slot_of(receiver))))
		ADD(s, xmsgs_recv, 1);
	return 0;
}

/* One more event of a probe that names its executor (-1: outside) and
 * runtime, in counter field of that executor's shard. */
#define COUNT_AT(executor, rt, field)                                          \
	do {                                                                   \
		struct cbcmn_bpf_shard *s_;                                    \
		if (in_target() && rt_ok(rt) && (s_ = shard(slot_of(executor)))) \
			ADD(s_, field, 1);                                     \
	} while (0)

SEC("usdt")
int BPF_USDT(cbcmn_park, __u32 executor, __u32 rt)
{
	COUNT_AT(executor, rt, parks);
	return 0;
}

/* The actors' counts: each probe fires where the runtime counts, with the
 * executor it counts on (docs/PROBES.md). */
SEC("usdt")
int BPF_USDT(cbcmn_actor_migrate, __u64 ref, __u32 from, __u32 to, __u32 why, __u32 rt)
{
	COUNT_AT(from, rt, actor_migrations);
	return 0;
}

SEC("usdt")
int BPF_USDT(cbcmn_sup_restart, __u64 sup, __u32 child, __s64 reason, __u32 executor, __u32 rt)
{
	COUNT_AT(executor, rt, actor_restarts);
	return 0;
}

SEC("usdt")
int BPF_USDT(cbcmn_actor_backpressure, __u64 to, int executor, int result, int waited, __u32 rt)
{
	COUNT_AT(executor, rt, actor_backpressure);
	return 0;
}

SEC("usdt")
int BPF_USDT(cbcmn_lock_contended, const char *name, __u64 wait_ns)
{
	/* The lock's name is not copied: which lock waits is for tracing;
	 * here the wait is charged to the shard whose thread waited. */
	struct cbcmn_bpf_shard *s = current_shard();
	__u32 slot = CBCMN_BPF_OUTSIDE;
	if (!in_target())
		return 0;
	if (s) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		struct cbcmn_bpf_thread *th = bpf_map_lookup_elem(&threads, &tid);
		if (th)
			slot = th->shard;
	} else {
		s = shard(CBCMN_BPF_OUTSIDE);
	}
	if (!s)
		return 0;
	ADD(s, lock_contended, 1);
	ADD(s, lock_wait_ns, wait_ns);
	__u32 i = slot * CBCMN_BPF_HIST_SLOTS + log2_slot(wait_ns);
	__u64 *c = bpf_map_lookup_elem(&lock_hist, &i);
	if (c)
		__sync_fetch_and_add(c, 1);
	return 0;
}

/* An executor's thread begins its loop: from now on the kernel tracepoints
 * can attribute this thread's events to its shard. */
SEC("usdt")
int BPF_USDT(cbcmn_exec_start, __u32 executor, int ns_tid, int cpu, __u32 rt)
{
	(void)ns_tid; /* see key below */
	struct cbcmn_bpf_shard *s;
	/* Not slot_of(): an executor beyond the maps must not take the
	 * outside slot's identity (nor delete the thread it names). */
	if (!in_target() || !rt_ok(rt) || executor >= CBCMN_BPF_MAX_SHARDS ||
	    !(s = shard(executor)))
		return 0;
	/* It fires on the executor's own thread: its time so far is before
	 * our watch. */
	struct task_struct *me = (struct task_struct *)bpf_get_current_task();
	struct cbcmn_bpf_thread th = {
		.shard = slot_of(executor),
		.last_ts = bpf_ktime_get_ns(),
		.last_sum = BPF_CORE_READ(me, se.sum_exec_runtime),
	};
	sched_counts_base(&th, me);
	/* The kernel's id of this thread, not the probe's tid argument: that
	 * one is the runtime's gettid(), in its own pid namespace, while the
	 * sched programs know threads by task_struct::pid, the kernel's
	 * (init namespace) id.  Inside a container the two differ. */
	__u32 key = (__u32)bpf_get_current_pid_tgid(), old = s->tid;
	/* A replacement: the thread it replaces (dying, or gone without a
	 * switch we saw) no longer speaks for the shard. */
	if (old && old != key)
		bpf_map_delete_elem(&threads, &old);
	bpf_map_update_elem(&threads, &key, &th, BPF_ANY);
	s->tid = key;
	s->cpu = cpu;
	/* A new thread on this shard (a new runtime in the same process, or a
	 * restarted executor): doorbell state left by the previous one (a
	 * doorbell whose target exited before a switch-in we could see) would
	 * make this thread's first switch-in a bogus latency sample.  The
	 * thread is on a CPU now: it fires this probe. */
	struct cbcmn_bpf_sched *ss = shard_sched_of(slot_of(executor));
	if (ss) {
		ss->db_t0 = 0;
		ss->on_ts = th.last_ts;
		ss->oncpu = 1;
		ss->task = (__u64)me;
	}
	return 0;
}

/* It leaves its loop: the thread id may be reused by another thread. */
SEC("usdt")
int BPF_USDT(cbcmn_exec_stop, __u32 executor, int retired, __u32 rt)
{
	if (!in_target() || !rt_ok(rt))
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	bpf_map_delete_elem(&threads, &tid);
	/* Its ring is closed after this: forget it before its address can
	 * be another ring's.  Only if the shard is still this thread's (with
	 * runtimes merged, another runtime's executor of the same id may
	 * have taken it). */
	struct cbcmn_bpf_shard *s = shard(slot_of(executor));
	if (s && (s->tid == tid || !s->tid)) /* !tid: found by the loader after attach */
		ring_forget(slot_of(executor));
	struct cbcmn_bpf_sched *ss = shard_sched_of(slot_of(executor));
	if (ss) {
		ss->task = 0; /* the task_struct may be freed and reused */
		ss->oncpu = 0;
	}
	return 0;
}

/* ---- sched tracepoints ----------------------------------------------------- */


/* A switch of thread th (task t) at now, in or out: the time since its
 * previous switch seen splits into on a CPU (what the kernel added to
 * t's se.sum_exec_runtime meanwhile) and off it (the rest).  Exact
 * whatever switches were not seen: this kernel does not trace every
 * switch (here those away from some threads of the VM's agent are
 * missing), and a sum of stretches between the switches seen would
 * count a missed one's time on the wrong side.  Inside two seq bumps: a
 * reader that sees the sums moved also sees seq moved (bpfmon.c
 * read_shard).  That rests on x86, the one target built (asm/x86_64,
 * __TARGET_ARCH_x86): the atomic adds are lock-prefixed, full barriers,
 * and loads are not reordered; a weakly ordered port needs fetching
 * atomics here and a fence between the reader's lookups. */
static __always_inline void account_switch(struct cbcmn_bpf_thread *th, struct cbcmn_bpf_shard *s,
					   struct task_struct *t, __u64 now)
{
	__u64 sum = BPF_CORE_READ(t, se.sum_exec_runtime);
	__u64 from = th->last_ts;
	__sync_fetch_and_add(&th->seq, 1);
	if (from && from <= now && th->last_sum <= sum) {
		__u64 on = sum - th->last_sum, span = now - from;
		ADD(s, oncpu_ns, on);
		if (span > on)
			ADD(s, offcpu_ns, span - on);
	}
	th->last_ts = now;
	th->last_sum = sum;
	__sync_fetch_and_add(&th->seq, 1);
}

/* At a switch of th (task t) seen: what the kernel's counts grew by since
 * the previous one seen goes to its shard.  Run-queue waits: each time
 * the thread got a CPU after a wakeup or a preemption, the kernel adds
 * the wait to run_delay and one to pcount (sched_info_arrive, called
 * after this tracepoint at a switch-in: a switch-out finds the wait that
 * just ended).  The sums are exact whatever switches were missed; the
 * histogram gets the mean of the waits between two switches seen, one
 * sample each (one wait between a switch-in and its switch-out, unless
 * some were missed).  Migrations: se.nr_migrations, counted when the CPU
 * changes (set_task_cpu), seen at the next switch in or out. */
static __always_inline void account_sched_counts(struct cbcmn_bpf_thread *th,
						 struct cbcmn_bpf_shard *s, struct task_struct *t)
{
	struct sched_counts c = sched_counts_of(t);
	if (th->sched_base) {
		__u64 n = c.pcount - th->last_pcount, d = c.run_delay - th->last_run_delay;
		if (c.pcount > th->last_pcount && c.run_delay >= th->last_run_delay) {
			ADD(s, runq_waits, n);
			ADD(s, runq_ns, d);
			hist_add_n(CBCMN_BPF_HIST_RUNQ, th->shard, d / n / 1000, n);
		}
		if (c.migrations > th->last_migrations)
			ADD(s, migrations, c.migrations - th->last_migrations);
	}
	th->last_run_delay = c.run_delay;
	th->last_pcount = c.pcount;
	th->last_migrations = c.migrations;
	th->sched_base = 1;
}

/* CBCMN_BPF_MISS_SWITCHES: is this switch of th one to ignore?  A
 * thread's switches are serialized: a plain count. */
static __always_inline bool missed(struct cbcmn_bpf_thread *th)
{
	if (!miss_switch_every)
		return false;
	return ++th->switches_seen % miss_switch_every == 0;
}

/* Is task t one of the target's threads?  These programs run at every
 * context switch, wakeup and migration of the whole host, nearly always
 * for a task that is not ours: the answer comes first, before any helper
 * call, clock read or map lookup, so that the host pays only the
 * tracepoint's dispatch and this compare (docs/OBSERVABILITY.md, "Cost
 * on the host").  btf (a constant: each twin is compiled on its own):
 * tp_btf arguments are typed pointers the verifier lets us load from
 * directly, one instruction with a CO-RE offset; a raw_tp argument is a
 * plain number, read with bpf_probe_read_kernel.  task_struct::tgid is
 * the kernel's (init pid namespace) id, as targ_tgid is (bpfmon.c). */
static __always_inline int tgid_of(struct task_struct *t, bool btf)
{
	if (btf)
		return t->tgid;
	return BPF_CORE_READ(t, tgid);
}

static __always_inline bool task_is_target(struct task_struct *t, bool btf)
{
	return tgid_of(t, btf) == (int)targ_tgid;
}

/* The one program every context switch of the host runs (no program on
 * sched_wakeup or sched_migrate_task: account_sched_counts() reads what
 * they would tell from the kernel's own counts, at our threads' switches
 * only).  For a switch between two tasks not ours: two loads of tgid, one
 * of targ_tgid (read once: it is volatile), two compares. */
static __always_inline void on_switch(struct task_struct *prev, struct task_struct *next, bool btf)
{
	int want = (int)targ_tgid;
	if (tgid_of(prev, btf) != want && tgid_of(next, btf) != want)
		return;
	/* Ours: loaded again, which keeps the test above two compares. */
	bool prev_ours = tgid_of(prev, btf) == want, next_ours = tgid_of(next, btf) == want;
	__u64 now = bpf_ktime_get_ns();
	__u32 tid;
	struct cbcmn_bpf_thread *th;
	struct cbcmn_bpf_shard *s;

	if (prev_ours) {
		tid = BPF_CORE_READ(prev, pid);
		if ((th = bpf_map_lookup_elem(&threads, &tid)) && (s = shard(th->shard))) {
			long state = task_state(prev);
			bool dead = state & TASK_DEAD_STATE;
			if (!missed(th)) {
				account_switch(th, s, prev, now);
				account_sched_counts(th, s, prev);
				ADD(s, switches, 1);
				if (state == 0) /* TASK_RUNNING: preempted */
					ADD(s, involuntary, 1);
				/* The shard's state is its current thread's: not an
				 * old one's still winding down beside its replacement. */
				struct cbcmn_bpf_sched *ss = shard_sched_of(th->shard);
				if (ss && (!s->tid || s->tid == tid)) {
					ss->oncpu = 0;
					ss->task = dead ? 0 : (__u64)prev;
				}
			}
			/* Its last switch: an executor thread that died without
			 * cbcmn:exec_stop (a crash the runtime survived) must not
			 * leave its id to charge a later thread to the shard. */
			if (dead)
				bpf_map_delete_elem(&threads, &tid);
		}
	}
	if (next_ours) {
		tid = BPF_CORE_READ(next, pid);
		if ((th = bpf_map_lookup_elem(&threads, &tid)) && (s = shard(th->shard)) && !missed(th)) {
			account_switch(th, s, next, now);
			account_sched_counts(th, s, next);
			struct cbcmn_bpf_sched *ss = shard_sched_of(th->shard);
			if (ss && (!s->tid || s->tid == tid)) {
				ss->on_ts = now;
				ss->oncpu = 1;
				ss->task = (__u64)next;
				__u64 t0 = ss->db_t0;
				if (t0 && t0 <= now) {
					ADD(s, doorbell_lat, 1);
					ADD(s, doorbell_lat_ns, now - t0);
					hist_add(CBCMN_BPF_HIST_DOORBELL, th->shard, (now - t0) / 1000);
				}
				ss->db_t0 = 0;
			}
		}
	}
}

/* Each sched program twice: as tp_btf, and as raw_tp where the kernel has
 * no BTF for the tracepoint (bpfmon loads one of the two): fn(args...,
 * btf), btf true in the tp_btf twin (task_is_target). */
#define UNPAREN(...) __VA_ARGS__
#define SCHED_TWINS(tp, name, fn, args, ...)                                     \
	SEC("tp_btf/" #tp)                                                       \
	int BPF_PROG(name, __VA_ARGS__)                                          \
	{                                                                        \
		fn(UNPAREN args, true);                                          \
		return 0;                                                        \
	}                                                                        \
	SEC("raw_tp/" #tp)                                                       \
	int BPF_PROG(name##_raw, __VA_ARGS__)                                    \
	{                                                                        \
		fn(UNPAREN args, false);                                         \
		return 0;                                                        \
	}

SCHED_TWINS(sched_switch, cbcmn_sched_switch, on_switch, (prev, next), bool preempt,
	    struct task_struct *prev, struct task_struct *next)

/* A thread of the target exits (a kill, a crash the runtime survived, the
 * process's end: no cbcmn:exec_stop): an executor's record and its ring go
 * with it, so that neither the thread id nor the ring's address, once
 * reused, is counted as ours.  Rare: once per exiting task of the host. */
static __always_inline void on_task_exit(struct task_struct *p, bool btf)
{
	if (!task_is_target(p, btf))
		return;
	__u32 tid = BPF_CORE_READ(p, pid);
	struct cbcmn_bpf_thread *th = bpf_map_lookup_elem(&threads, &tid);
	if (!th)
		return;
	__u32 si = th->shard;
	struct cbcmn_bpf_shard *s = shard(si);
	if (s && (s->tid == tid || !s->tid))
		ring_forget(si);
	bpf_map_delete_elem(&threads, &tid);
}

SCHED_TWINS(sched_process_exit, cbcmn_sched_exit, on_task_exit, (p), struct task_struct *p)

/* ---- io_uring tracepoints -------------------------------------------------- */

/* The io_uring programs come in two forms: tp_btf (BTF-typed raw
 * tracepoint: the kernel calls the program with the tracepoint's C
 * arguments, no perf record is formatted, the cheap path) and, where the
 * kernel lacks btf_trace_io_uring_*, the classic tracepoint (the kernel first
 * formats the event's record, ~5 % of an echo round trip with all five on).
 * bpfmon loads one of the two per tracepoint. */

static __always_inline void on_submit(__u64 ring, __u32 op)
{
	if (!in_target())
		return;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cbcmn_bpf_thread *th = bpf_map_lookup_elem(&threads, &tid);
	if (!th)
		return;
	__u32 si = th->shard;
	struct cbcmn_bpf_shard *s = shard(si);
	if (!s)
		return;
	/* An executor submits only to its own ring (single issuer). */
	ring_learn(ring, si);
	ADD(s, sqes, 1);
	if (op == IORING_OP_MSG_RING) {
		ADD(s, msg_ring_sqes, 1);
		th->db_submit_ts = bpf_ktime_get_ns();
	}
	__u32 i = si * CBCMN_BPF_MAX_OPS + (op < CBCMN_BPF_MAX_OPS ? op : CBCMN_BPF_MAX_OPS - 1);
	__u64 *c = bpf_map_lookup_elem(&sqe_ops, &i);
	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline void on_complete(__u64 ring, int res)
{
	struct cbcmn_bpf_shard *s = ring_shard(ring);
	if (!s)
		return;
	ADD(s, cqes, 1);
	if (res < 0)
		ADD(s, cqe_errors, 1);
}

static __always_inline void on_cqring_wait(__u64 ring)
{
	struct cbcmn_bpf_shard *s = ring_shard(ring);
	if (s)
		ADD(s, cqring_waits, 1);
}

static __always_inline void on_async_work(__u64 ring)
{
	struct cbcmn_bpf_shard *s = ring_shard(ring);
	if (s)
		ADD(s, async_work, 1);
}

static __always_inline void on_cqe_overflow(__u64 ring)
{
	struct cbcmn_bpf_shard *s = ring_shard(ring);
	if (s)
		ADD(s, cqe_overflows, 1);
}

SEC("tp_btf/io_uring_submit_req")
int BPF_PROG(cbcmn_io_submit_btf, struct io_kiocb *req)
{
	if (!in_target())
		return 0;
	on_submit((__u64)BPF_CORE_READ(req, ctx), BPF_CORE_READ(req, opcode));
	return 0;
}

SEC("tracepoint/io_uring/io_uring_submit_req")
int cbcmn_io_submit(struct trace_event_raw_io_uring_submit_req *ctx)
{
	if (!in_target())
		return 0;
	on_submit((__u64)BPF_CORE_READ(ctx, ctx), BPF_CORE_READ(ctx, opcode));
	return 0;
}

/* Before 6.5 the tracepoint was io_uring_submit_sqe: (req, force_nonblock)
 * from 5.19, (ctx, req, opcode, ...) on 5.15.  This build's vmlinux.h
 * (6.5+) has neither its BTF nor its record: the record's two fields here,
 * relocated by name against the running kernel (both forms have them).
 * bpfmon loads the tp_btf twin only where argument 0 is a struct io_kiocb *. */
struct trace_event_raw_io_uring_submit_sqe___old {
	void *ctx;
	__u8 opcode;
} __attribute__((preserve_access_index));

SEC("tp_btf/io_uring_submit_sqe")
int BPF_PROG(cbcmn_io_submit_sqe_btf, struct io_kiocb *req, bool force_nonblock)
{
	if (!in_target())
		return 0;
	on_submit((__u64)BPF_CORE_READ(req, ctx), BPF_CORE_READ(req, opcode));
	return 0;
}

SEC("tracepoint/io_uring/io_uring_submit_sqe")
int cbcmn_io_submit_sqe(struct trace_event_raw_io_uring_submit_sqe___old *ctx)
{
	if (!in_target())
		return 0;
	on_submit((__u64)BPF_CORE_READ(ctx, ctx), BPF_CORE_READ(ctx, opcode));
	return 0;
}

/* io_uring_complete's arguments are (ctx, req, cqe) from 6.13 and (ctx,
 * req, user_data, res, cflags, extra1, extra2) from 5.18 to 6.12: the
 * first form read on a kernel of the second takes user_data for the
 * struct io_uring_cqe * and res from wherever that points (no error ever
 * counted) though it verifies: the verifier does not check a tp_btf
 * program's argument types against the tracepoint's.  bpfmon picks the
 * one whose arguments match the kernel's btf_trace_io_uring_complete, and
 * the classic tracepoint (its record has res by name in all forms)
 * elsewhere (5.15: ctx, user_data, res, cflags). */
SEC("tp_btf/io_uring_complete")
int BPF_PROG(cbcmn_io_complete_btf, struct io_ring_ctx *ring, void *req, struct io_uring_cqe *cqe)
{
	on_complete((__u64)ring, BPF_CORE_READ(cqe, res));
	return 0;
}

SEC("tp_btf/io_uring_complete")
int BPF_PROG(cbcmn_io_complete_btf_res, void *ring, void *req, __u64 user_data, int res)
{
	on_complete((__u64)ring, res);
	return 0;
}

SEC("tracepoint/io_uring/io_uring_complete")
int cbcmn_io_complete(struct trace_event_raw_io_uring_complete *ctx)
{
	on_complete((__u64)BPF_CORE_READ(ctx, ctx), BPF_CORE_READ(ctx, res));
	return 0;
}

SEC("tp_btf/io_uring_cqring_wait")
int BPF_PROG(cbcmn_io_cqring_wait_btf, void *ring, int min_events)
{
	on_cqring_wait((__u64)ring);
	return 0;
}

SEC("tracepoint/io_uring/io_uring_cqring_wait")
int cbcmn_io_cqring_wait(struct trace_event_raw_io_uring_cqring_wait *ctx)
{
	on_cqring_wait((__u64)BPF_CORE_READ(ctx, ctx));
	return 0;
}

/* (req, rw) from 5.19; (ctx, rw, req, work, flags) on 5.15, where bpfmon
 * loads the classic tracepoint instead (its record has ctx in both). */
SEC("tp_btf/io_uring_queue_async_work")
int BPF_PROG(cbcmn_io_async_work_btf, struct io_kiocb *req, int rw)
{
	on_async_work((__u64)BPF_CORE_READ(req, ctx));
	return 0;
}

SEC("tracepoint/io_uring/io_uring_queue_async_work")
int cbcmn_io_async_work(struct trace_event_raw_io_uring_queue_async_work *ctx)
{
	on_async_work((__u64)BPF_CORE_READ(ctx, ctx));
	return 0;
}

SEC("tp_btf/io_uring_cqe_overflow")
int BPF_PROG(cbcmn_io_cqe_overflow_btf, void *ring)
{
	on_cqe_overflow((__u64)ring);
	return 0;
}

SEC("tracepoint/io_uring/io_uring_cqe_overflow")
int cbcmn_io_cqe_overflow(struct trace_event_raw_io_uring_cqe_overflow *ctx)
{
	on_cqe_overflow((__u64)BPF_CORE_READ(ctx, ctx));
	return 0;
}

/* ---- futex waits of executor threads ---------------------------------------- */

/* FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAIT_REQUEUE_PI,
 * FUTEX_LOCK_PI2: the ops that block (op & FUTEX_CMD_MASK). */
static __always_inline bool futex_blocks(long op)
{
	long cmd = op & 127;
	return cmd == 0 || cmd == 6 || cmd == 9 || cmd == 11 || cmd == 13;
}

static __always_inline void futex_wait_begin(void)
{
	if (!in_target())
		return;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cbcmn_bpf_thread *th = bpf_map_lookup_elem(&threads, &tid);
	if (th)
		th->futex_ts = bpf_ktime_get_ns();
}

static __always_inline void futex_wait_end(void)
{
	if (!in_target())
		return;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cbcmn_bpf_thread *th = bpf_map_lookup_elem(&threads, &tid);
	struct cbcmn_bpf_shard *s;
	if (!th || !th->futex_ts || !(s = shard(th->shard)))
		return;
	__u64 d = bpf_ktime_get_ns() - th->futex_ts;
	th->futex_ts = 0;
	ADD(s, futex_waits, 1);
	ADD(s, futex_wait_ns, d);
	hist_add(CBCMN_BPF_HIST_FUTEX, th->shard, d / 1000);
}

/* fentry/fexit on the kernel's futex_wait(), which FUTEX_WAIT,
 * FUTEX_WAIT_BITSET and futex_wait(2) end in: a trampoline on one function,
 * so the other syscalls keep their fast path (enabling any syscalls:
 * tracepoint sends every syscall of every task through the tracing slow
 * path, ~5 % of an echo round trip).  The PI ops (FUTEX_LOCK_PI*,
 * FUTEX_WAIT_REQUEUE_PI) do not go through futex_wait and are not counted
 * here; libcbcmn's executors do not use PI futexes. */
SEC("fentry/futex_wait")
int BPF_PROG(cbcmn_futex_wait_entry)
{
	futex_wait_begin();
	return 0;
}

SEC("fexit/futex_wait")
int BPF_PROG(cbcmn_futex_wait_exit)
{
	futex_wait_end();
	return 0;
}

/* The fallback where fentry does not load (no BTF for futex_wait, no
 * trampolines): the syscall tracepoints, filtered on the blocking ops. */
SEC("tracepoint/syscalls/sys_enter_futex")
int cbcmn_futex_enter(struct trace_event_raw_sys_enter *ctx)
{
	if (!in_target())
		return 0;
	if (futex_blocks(BPF_CORE_READ(ctx, args[1])))
		futex_wait_begin();
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_futex")
int cbcmn_futex_exit(struct trace_event_raw_sys_exit *ctx)
{
	futex_wait_end();
	return 0;
}
