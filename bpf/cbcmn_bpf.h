/* cbcmn_bpf.h: the layouts shared by bpf/cbcmn.bpf.c and its loader
 * (tools/bpf/bpfmon.c): only __u32/__u64 types and constants. */
#ifndef CBCMN_BPF_H
#define CBCMN_BPF_H

/* Shards (executors) a map holds: the runtime's CBCMN_MAX_EXECUTORS; one
 * more slot, CBCMN_BPF_OUTSIDE, counts what threads outside the runtime do
 * (a doorbell rung from main()). */
#define CBCMN_BPF_MAX_SHARDS 1024
#define CBCMN_BPF_OUTSIDE CBCMN_BPF_MAX_SHARDS
#define CBCMN_BPF_NSLOTS (CBCMN_BPF_MAX_SHARDS + 1)

/* Per shard values are padded to whole lines of this size (two 64-byte
 * lines: the adjacent-line prefetcher pairs them), and the ARRAY maps are
 * BPF_F_MMAPABLE, whose values start on a page: executors pinned to
 * different CPUs never write the same line.  Per shard arrays of __u64
 * (histograms, SQEs by opcode) are multiples of it too. */
#define CBCMN_BPF_LINE 128

/* log2 histograms: slot i counts values in [2^i, 2^(i+1)) of the unit (ns for
 * lock_hist, us for the "hists" map), slot 0 also 0. */
#define CBCMN_BPF_HIST_SLOTS 32

/* io_uring opcodes counted one by one (IORING_OP_LAST is 63 on 6.18);
 * higher ones land in the last slot. */
#define CBCMN_BPF_MAX_OPS 64

/* Per shard counters: the value of the "shards" ARRAY map, index = shard.
 * Every field is a count of events unless its name ends in _ns. */
struct cbcmn_bpf_shard {
	/* USDT probes of libcbcmn */
	__u64 steals;              /* cbcmn:steal (a probe that took >= 1 task) */
	__u64 tasks_stolen;        /* sum of cbcmn:steal's "taken" */
	__u64 steal_fails;         /* cbcmn:steal_fail */
	__u64 doorbells_msg_ring;  /* cbcmn:doorbell kind 0, by sender */
	__u64 doorbells_eventfd;   /* cbcmn:doorbell kind 1, by sender */
	__u64 doorbells_recv;      /* cbcmn:doorbell, by target */
	__u64 doorbells_coalesced; /* cbcmn:doorbell_coalesced, by waker */
	__u64 xmsgs_sent;          /* cbcmn:xmsg, by sender */
	__u64 xmsgs_recv;          /* cbcmn:xmsg, by receiver */
	__u64 lock_contended;      /* cbcmn:lock_contended on this shard's thread */
	__u64 lock_wait_ns;        /* its summed wait */
	__u64 parks;               /* cbcmn:park */
	/* sched tracepoints (executor threads only) */
	__u64 oncpu_ns;
	__u64 offcpu_ns;
	__u64 switches;            /* times it left the CPU */
	__u64 involuntary;         /* ... while still runnable (preempted) */
	__u64 migrations;          /* se.nr_migrations grew (read at its switches) */
	/* io_uring tracepoints (by the shard's ring or thread) */
	__u64 sqes;                /* io_uring_submit_req */
	__u64 msg_ring_sqes;       /* ... with IORING_OP_MSG_RING */
	__u64 cqes;                /* io_uring_complete on its ring */
	__u64 cqe_errors;          /* ... with res < 0 */
	__u64 cqring_waits;        /* io_uring_cqring_wait */
	__u64 async_work;          /* io_uring_queue_async_work (punted to io-wq) */
	__u64 cqe_overflows;       /* io_uring_cqe_overflow */
	/* run-queue latency: wakeup (or preemption) -> switched in, the
	 * kernel's sched_info (run_delay, pcount) read at its switches */
	__u64 runq_waits;          /* samples in hists[CBCMN_BPF_HIST_RUNQ] */
	__u64 runq_ns;             /* their sum */
	/* futex waits of the executor thread (FUTEX_WAIT family) */
	__u64 futex_waits;         /* samples in hists[CBCMN_BPF_HIST_FUTEX] */
	__u64 futex_wait_ns;       /* their sum */
	/* doorbell latency, by target: doorbell sent -> target switched in */
	__u64 doorbell_lat;        /* samples in hists[CBCMN_BPF_HIST_DOORBELL] */
	__u64 doorbell_lat_ns;     /* their sum */
	__u64 doorbells_running;   /* found the target on a CPU: nothing to wake */
	__u64 doorbells_pending;   /* found an earlier doorbell still waiting for it */
	/* steal latency, by thief: start of its search for work -> the steal */
	__u64 steal_lat;           /* samples in hists[CBCMN_BPF_HIST_STEAL] (= steals) */
	__u64 steal_lat_ns;        /* their sum (cbcmn:steal's 4th argument) */
	/* actors, by the executor the probe names (the runtime's own
	 * counters count the same events on the same executor) */
	__u64 actor_migrations;    /* cbcmn:actor_migrate, by sender */
	__u64 actor_restarts;      /* cbcmn:sup_restart, by the supervisor's executor */
	__u64 actor_backpressure;  /* cbcmn:actor_backpressure, by the sender's (outside: CBCMN_BPF_OUTSIDE) */
	/* identity */
	__u32 tid;                 /* the executor's thread (the kernel's id: task_struct::pid), 0 if unseen */
	__s32 cpu;                 /* its pinned CPU from cbcmn:exec_start, -1 none */
	__u64 line_pad[10];        /* to 384 bytes: 3 * CBCMN_BPF_LINE */
};

/* Per executor thread state for sched_switch, and the thread -> shard
 * attribution the kernel tracepoints use: the "threads" HASH, key = tid. */
struct cbcmn_bpf_thread {
	__u32 shard;
	__u32 seq;                 /* odd while sched_switch moves last_ts/last_sum
				    * and its shard's on/off-CPU sums: a reader
				    * that saw the same even value before and
				    * after reading the sums saw no switch half
				    * done */
	__u64 last_ts;             /* its last switch (in or out) seen, ns; before
				    * the first, when the loader or
				    * cbcmn:exec_start found it */
	__u64 last_sum;            /* its se.sum_exec_runtime then (the loader's
				    * from /proc; above any real sum: unknown) */
	/* The kernel's own counts for the thread at its last switch seen
	 * (sched_switch adds what they grew by since to its shard: nothing
	 * needs to run at a wakeup or a migration of any task of the host):
	 * task_struct::sched_info.run_delay (ns waited on a run queue) and
	 * .pcount (times it got a CPU), se.nr_migrations.  Valid once
	 * sched_base is 1: the loader's entries get theirs at the first
	 * switch seen. */
	__u64 last_run_delay;
	__u64 last_pcount;
	__u64 last_migrations;
	__u64 futex_ts;            /* entered a FUTEX_WAIT-family futex(2), not yet out */
	__u64 db_submit_ts;        /* its last MSG_RING SQE submitted (a doorbell's start) */
	__u32 switches_seen;       /* for CBCMN_BPF_MISS_SWITCHES only */
	__u32 sched_base;          /* 1: the last_* counts above are set */
};

/* Per shard scheduling state for doorbell latency: the "shard_sched" ARRAY,
 * index = shard. */
struct cbcmn_bpf_sched {
	__u64 on_ts;               /* last switch-in of the shard's thread */
	__u64 db_t0;               /* oldest doorbell not yet followed by a switch-in, 0 none */
	__u32 oncpu;               /* the thread is on a CPU now, by the switches seen */
	__u32 pad;
	__u64 task;                /* its task_struct, whose on_cpu is the truth
				    * (account_switch: not every switch is
				    * seen); 0: not known yet */
	__u64 ring;                /* its io_uring ring (struct io_ring_ctx *),
				    * learned at its first SQE: forgotten, with
				    * its `rings` and ring_cache entries, when
				    * the thread leaves its loop or exits */
	__u64 line_pad[11];        /* to CBCMN_BPF_LINE */
};

/* The "hists" ARRAY: log2 histograms, index
 * (kind * CBCMN_BPF_NSLOTS + shard) * CBCMN_BPF_HIST_SLOTS + slot. */
enum {
	CBCMN_BPF_HIST_RUNQ = 0,     /* run-queue latency, us */
	CBCMN_BPF_HIST_FUTEX = 1,    /* futex wait, us */
	CBCMN_BPF_HIST_DOORBELL = 2, /* doorbell latency, us */
	CBCMN_BPF_HIST_STEAL = 3,    /* steal latency, us, by thief */
	CBCMN_BPF_NHISTS = 4,
};

/* Key of the "steal_pairs" HASH (CBCMN_BPF_MAX_PAIRS entries): value struct
 * cbcmn_bpf_pair. */
#define CBCMN_BPF_MAX_PAIRS 4096
struct cbcmn_bpf_pair_key {
	__u32 thief;
	__u32 victim;
};

struct cbcmn_bpf_pair {
	__u64 steals;
	__u64 tasks;
	__u64 fails;
};

/* The "pin_owner" ARRAY (one entry), written by the loader before it pins:
 * who pinned the maps under /sys/fs/bpf/cbcmn/<pid>/, so that the next
 * loader can tell pins left by a tool that was killed (its process gone)
 * from a live tool's. */
struct cbcmn_bpf_owner {
	__u32 tool_pid;            /* the loader's process */
	__u32 target_pid;
	__u64 tool_start;          /* its start time (/proc/PID/stat field 22):
				    * a reused pid is not the owner */
};

#endif /* CBCMN_BPF_H */
