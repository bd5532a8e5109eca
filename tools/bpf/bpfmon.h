/* bpfmon.h: the loader of bpf/cbcmn.bpf.c, and the C API that reads what it
 * measures, per shard (executor) of one cbcmn process.  Used by cbcmn-stat,
 * cbcmn-top and tests/test_bpf.c.  docs/OBSERVABILITY.md describes every
 * metric.
 *
 * Use: bpfmon_open() (open, configure, load, attach: one call), then
 * bpfmon_read() as often as wanted, then bpfmon_close().  Each program is
 * attached on its own: one the kernel or the target lacks is reported by
 * bpfmon_progs() and the others keep working.
 *
 * Errors are negative errno, with a one-line reason written to err (which
 * the caller prints as is): -ESRCH no such process (or it exited while the
 * programs were being attached), -EPERM missing privilege (naming the
 * capability this process lacks, or the kernel's lockdown), -ENOENT no BTF,
 * or a process that is not a cbcmn program (no cbcmn probes in its
 * executable or a file it maps: nothing is loaded), -EACCES its executable
 * cannot be read, -EBUSY (BPFMON_PIN) the process's maps are pinned by
 * another loader that is running (of two pinning at once, the one that
 * takes the pins' lock second: docs/OBSERVABILITY.md, "Pinning"), other
 * -errno from libbpf.  A monitor is
 * used by one thread at a time (bpfmon keeps one thread of its own, which
 * only detaches the programs when the target exits).
 *
 * Namespaces: the programs know threads by the kernel's ids; pids and
 * thread ids in and out of this API are as this process's /proc numbers
 * them, in a container too (docs/OBSERVABILITY.md, "Namespaces").
 */
#ifndef CBCMN_TOOLS_BPFMON_H
#define CBCMN_TOOLS_BPFMON_H

#include <linux/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cbcmn_bpf.h"

struct bpfmon;

enum {
	BPFMON_VERBOSE = 1 << 0, /* libbpf's messages (and the verifier's) to stderr */
	BPFMON_PIN = 1 << 1,     /* pin the maps under /sys/fs/bpf/cbcmn/<pid>/ (pins a
				  * killed loader left are removed first) */
	BPFMON_NO_SCHED = 1 << 2, /* leave the sched tracepoints off */
	BPFMON_NO_IO_URING = 1 << 3, /* leave the io_uring tracepoints off */
	BPFMON_NO_FUTEX = 1 << 4, /* leave the futex programs off (fentry/fexit futex_wait, or the syscalls:sys_{enter,exit}_futex fallback) */
	/* Where fentry/fexit on futex_wait cannot load, count futex waits with
	 * the syscalls:sys_{enter,exit}_futex tracepoints instead.  Opt-in:
	 * enabling any syscall tracepoint sends every syscall of every task
	 * down the tracing slow path (~5 % of an echo round trip). */
	BPFMON_FUTEX_TP = 1 << 5,
	/* Attach cbcmn:steal_fail.  Off by default: the hottest probe (one
	 * per victim probed in vain, each a uprobe trap of ~0.7 us), and the
	 * runtime counts the same itself (steal_attempts - steal_successes):
	 * without the flag c.steal_fails comes from its stats segment, since
	 * attach, and struct cbcmn_bpf_pair's fails stay 0. */
	BPFMON_STEAL_FAIL = 1 << 6,
};

/* Where a program stands after bpfmon_open(). */
enum bpfmon_state {
	BPFMON_ATTACHED = 0,
	BPFMON_MISSING,  /* the kernel has no such tracepoint, or the target no such probe */
	BPFMON_FAILED,   /* it exists but attaching failed: err says why */
	BPFMON_OFF,      /* turned off by a flag, or an alternative was used instead */
};

struct bpfmon_prog {
	const char *name;   /* program name in cbcmn.bpf.c */
	const char *target; /* "usdt cbcmn:steal", "tp_btf sched_switch", "tracepoint io_uring:io_uring_complete" */
	enum bpfmon_state state;
	int err;            /* negative errno for MISSING and FAILED */
	unsigned links;     /* USDT: binaries attached to (exe and/or libcbcmn.so) */
	const char *reason; /* MISSING, FAILED: one line saying why ("rejected by the
			     * verifier: ...", "refused at load: ...", "attach: ...",
			     * "not in the target"); OFF: why, where it is not a
			     * flag's doing (cbcmn:steal_fail); "" otherwise */
};

/* One shard's figures: the counters of struct cbcmn_bpf_shard, SQEs by
 * opcode, the log2 histogram of lock waits (slot i: [2^i, 2^(i+1)) ns),
 * and the log2 histograms in us of hist[CBCMN_BPF_HIST_RUNQ] (run-queue
 * latency), hist[CBCMN_BPF_HIST_FUTEX] (futex waits),
 * hist[CBCMN_BPF_HIST_DOORBELL] (doorbell latency, by target) and
 * hist[CBCMN_BPF_HIST_STEAL] (steal latency, by thief). */
struct bpfmon_shard {
	struct cbcmn_bpf_shard c;
	/* c.oncpu_ns and c.offcpu_ns grow at the thread's switches: since
	 * its last one it has been on a CPU oncpu_now_ns more (from its
	 * se.sum_exec_runtime now, in /proc, which for a thread on a CPU is
	 * as of the last tick) and off it offcpu_now_ns.  Both are 0 when
	 * the sched programs are not attached or the thread is gone.  The
	 * sums with them are its time on and off a CPU since attach up to
	 * read_ns.  They are short after a partial read, and stop at the
	 * thread's last switch once its record is gone (it left its loop or
	 * died), so either may step back by the time since that switch; off
	 * may also step back by a tick (the sum in /proc lags by that much
	 * while the thread runs). */
	uint64_t oncpu_now_ns;
	uint64_t offcpu_now_ns;
	uint64_t read_ns; /* CLOCK_MONOTONIC when the two were taken */
	bool partial;     /* the time since the last switch could not be read
			   * (the thread switching all the time, or exiting):
			   * the two are 0 and the sums with them short */
	uint64_t sqe_ops[CBCMN_BPF_MAX_OPS];
	uint64_t lock_hist[CBCMN_BPF_HIST_SLOTS];
	uint64_t hist[CBCMN_BPF_NHISTS][CBCMN_BPF_HIST_SLOTS];
};

/* A shard's thread's time on / off a CPU since attach up to the read:
 * what was counted at its switches plus what came since the last. */
static inline uint64_t bpfmon_oncpu_ns(const struct bpfmon_shard *k)
{
	return k->c.oncpu_ns + k->oncpu_now_ns;
}

static inline uint64_t bpfmon_offcpu_ns(const struct bpfmon_shard *k)
{
	return k->c.offcpu_ns + k->offcpu_now_ns;
}

/* Samples in a log2 histogram of CBCMN_BPF_HIST_SLOTS slots. */
uint64_t bpfmon_hist_count(const uint64_t *hist);

/* The pct-th percentile (0 < pct <= 100) of a log2 histogram, as the upper
 * bound of the slot it falls in (2^(i+1) - 1, in the histogram's unit; 1
 * for slot 0): a bound within a factor of 2.  0 when it is empty. */
uint64_t bpfmon_hist_pct(const uint64_t *hist, double pct);

/* Watch process pid (its thread group).  Mounts tracefs (and bpffs for
 * BPFMON_PIN) when they are not mounted.  Executors that started before
 * the call are found by their thread names ("cbcmn-exec-N"); later ones by
 * the cbcmn:exec_start probe.  Counting starts at attach.  Returns 0 and
 * *out, or a negative errno and a reason in err (errlen bytes, may be 0). */
int bpfmon_open(struct bpfmon **out, pid_t pid, unsigned flags, char *err, size_t errlen);

/* bpfmon_open() for one runtime of the process: runtime is its id
 * (cbcmn_stats.runtime_id, the last argument of the probes).  Only its
 * executors are counted, on their shards; the other runtimes' probes are
 * left out (their threads are not its executors, so the kernel's
 * tracepoints leave them out too).  0: every runtime of the process, their
 * shards merged, which is what bpfmon_open() does.  Same errors. */
int bpfmon_open_runtime(struct bpfmon **out, pid_t pid, uint32_t runtime, unsigned flags,
			char *err, size_t errlen);

/* The programs and what became of each; returns their number. */
unsigned bpfmon_progs(const struct bpfmon *m, const struct bpfmon_prog **progs);

/* Is a counter of struct cbcmn_bpf_shard (field: its offsetof) measured,
 * i.e. did every program it rests on attach?  One that is not is "not
 * measured" (docs/OBSERVABILITY.md): tools show "-" or null, never 0.
 * When it is not, why (whylen bytes, may be 0) gets one line naming the
 * first program missing and its reason ("fentry futex_wait: refused at
 * load: Operation not permitted").  A histogram is measured when its
 * counter is (runq_waits, futex_waits, doorbell_lat, steal_lat,
 * lock_contended).  tid and cpu always are. */
bool bpfmon_measured(const struct bpfmon *m, size_t field, char *why, size_t whylen);

/* A figure as the tools print it: "-" when it is not measured (never 0),
 * else v in decimal, in buf (len bytes, 24 hold any).  Returns the text.
 * The one place the tools turn "not measured" into text; in JSON it is
 * null (jw_double(NAN)). */
const char *bpfmon_fig(bool measured, uint64_t v, char *buf, size_t len);

/* Why a uprobe (each USDT probe is one) was refused with err (-EACCES,
 * -EPERM), as text to append to the error: " (uprobes need CAP_SYS_ADMIN
 * on this kernel: ...)" only where this kernel asks for it (the fix for
 * CVE-2025-38466) and this process lacks it, a "perhaps" where the
 * kernel's version does not tell, "" where CAP_SYS_ADMIN is not the
 * cause.  bpfmon_uprobe_denied_why is the same for a process with or
 * without CAP_SYS_ADMIN (sys_admin) on a kernel of uname's release and
 * version. */
const char *bpfmon_uprobe_caps_why(int err);
const char *bpfmon_uprobe_denied_why(int err, bool sys_admin, const char *release,
				     const char *version);

/* Are all n counters of fields measured (bpfmon_measured)?  When not, why
 * (as bpfmon_measured) for the first one that is not. */
bool bpfmon_measured_all(const struct bpfmon *m, const size_t *fields, size_t n, char *why,
			 size_t whylen);

/* Detach every program now; the maps stay readable and bpfmon_read()
 * works on.  bpfmon does it by itself as soon as the target process exits
 * (a thread of its own waits on the process's pidfd), so that the
 * programs, which run for every task of the host, do not outlive it.
 * Idempotent; bpfmon_close() still frees. */
void bpfmon_detach(struct bpfmon *m);

/* Have the programs been detached (the target exited, or bpfmon_detach)? */
bool bpfmon_detached(const struct bpfmon *m);

/* Read the counters of shards [0, n) into out[0..n) (n at most
 * CBCMN_BPF_NSLOTS; index CBCMN_BPF_OUTSIDE is threads outside the
 * runtime), with each executor's time on and off a CPU since its last
 * switch (oncpu_now_ns, offcpu_now_ns, as of read_ns on CLOCK_MONOTONIC,
 * the clock of bpf_ktime_get_ns).  Returns the number of shards seen so
 * far (the highest shard with any activity + 1, at most n), or a
 * negative errno. */
int bpfmon_read(struct bpfmon *m, struct bpfmon_shard *out, uint32_t n);

/* Steals from victim by thief so far (steals, tasks moved, failed probes);
 * all zero if none.  Returns 0 or a negative errno. */
int bpfmon_steal_pair(struct bpfmon *m, uint32_t thief, uint32_t victim,
		      struct cbcmn_bpf_pair *out);

/* Every (thief, victim) pair with a record so far, at most max (the map
 * holds CBCMN_BPF_MAX_PAIRS): keys into k, figures into v.  One walk of
 * the map, O(pairs): for many shards, rather than bpfmon_steal_pair() for
 * each of shards^2.  Returns how many, or a negative errno. */
int bpfmon_steal_pairs(struct bpfmon *m, struct cbcmn_bpf_pair_key *k, struct cbcmn_bpf_pair *v,
		       uint32_t max);

/* What the loaded programs cost so far, as the kernel times them: run
 * counts and run time are kept only while someone holds run statistics on
 * (bpf_enable_stats(BPF_STATS_RUN_TIME), system-wide); zeros otherwise. */
struct bpfmon_cost {
	unsigned progs;       /* programs loaded */
	uint64_t runs;        /* their runs, summed */
	uint64_t run_ns;      /* their run time, summed */
	uint64_t usdt_runs;   /* the runs of the USDT programs among them: each
			       * also cost the traced thread a uprobe trap,
			       * which run_ns does not count */
};

/* What one USDT hit costs the traced thread before the program runs (the
 * breakpoint trap, the uprobe lookup, the return): an estimate for the
 * viewers' own-cost line, from cbcmn-bench bpf-overhead's uprobe_trap_ns
 * (0.7 us on a quiet host here, 1.6 us under the stress loop). */
#define BPFMON_UPROBE_TRAP_NS 700

/* Returns 0 and *out, or a negative errno. */
int bpfmon_cost(const struct bpfmon *m, struct bpfmon_cost *out);

/* The same for the programs whose name (in cbcmn.bpf.c) begins with
 * prefix, e.g. "cbcmn_sched_switch". */
int bpfmon_cost_of(const struct bpfmon *m, const char *prefix, struct bpfmon_cost *out);

/* Where the maps are pinned ("" when not pinned). */
const char *bpfmon_pin_dir(const struct bpfmon *m);

/* Detach everything, unpin, free.  NULL is fine. */
void bpfmon_close(struct bpfmon *m);

#endif /* CBCMN_TOOLS_BPFMON_H */
