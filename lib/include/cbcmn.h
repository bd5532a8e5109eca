/* cbcmn.h: the public API of libcbcmn, a capability-budgeted M:N runtime.
 *
 * Tasks are stackful fibers scheduled M:N on executor threads that balance
 * load by work stealing.  Every task belongs to a nursery (structured
 * concurrency): a nursery is opened by a task (or by a thread outside the
 * runtime), children are spawned into it, and cbcmn_nursery_await_all() waits
 * for all of them before the nursery is gone.  A task function receives its
 * context explicitly:
 *
 *     static int64_t child(cbcmn_cx *cx, void *arg) { ...; return 0; }
 *
 *     cbcmn_nursery *n;
 *     cbcmn_nursery_open(rt, cx, &n);
 *     cbcmn_nursery_spawn(cx, n, child, arg, NULL);
 *     int64_t rc = cbcmn_nursery_await_all(cx, n);   // 0 or the first failure
 *
 * Errors.  Every call that can fail returns a negative errno value or one of
 * the CBCMN_E* codes below; cbcmn_strerror() names all of them.  Bad input
 * from the caller is an error, never an abort.
 *
 * Threads and contexts.  Unless a function says otherwise it may be called
 * from any thread, inside or outside a task.  The scheduler keeps no hidden
 * "current task": calls that act on behalf of a task take its cbcmn_cx, and
 * must be made from inside that task; code outside the runtime (an ordinary
 * thread) passes NULL instead and is then blocked as a thread, not a fiber.
 *
 * Stack overflow.  A task that runs out of stack ends with CBCMN_EPANIC and
 * the process goes on, when the overflow happens
 *   - in the program's own code, or a runtime call (each checks the room
 *     left before it locks or waits);
 *   - inside the C library (or the loader, libgcc_s, libstdc++, a sanitizer
 *     runtime), called directly from the program's code: the call gets 16
 *     KiB more to finish in, and the task ends when it returns, its locks
 *     released.
 * The task's own frames are abandoned (what they malloc'ed is lost, as with
 * longjmp).  Executors run with the signal mask of the thread that created
 * the runtime, SIGSEGV excepted (never blocked there, whatever that thread
 * blocks).  The executor gets its signal mask back, and a parent that ran
 * the task inline its FP control state.  Not survivable without risk: a
 * library call that needs more than those 16 KiB, or a callback the C
 * library runs with a lock held (fopencookie functions, dl_iterate_phdr,
 * pthread_once) that goes deeper still; the task still ends, and a line
 * on stderr says a lock may stay held.  Static binaries count libc as the
 * program's code.  A frame larger than the 20 KiB guard region can jump
 * over it: compile deep code with -fstack-clash-protection.  Details:
 * docs/FIBERS.md.
 */
#ifndef CBCMN_H
#define CBCMN_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "cbcmn_topo.h" /* topology and placement policies */

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CBCMN_API
#define CBCMN_API __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------
 * Version
 *
 * The one place that holds the version: the Makefile reads these three
 * lines (the soname is libcbcmn.so.CBCMN_VERSION_MAJOR, the file
 * libcbcmn.so.MAJOR.MINOR.PATCH, cbcmn.pc's Version).  The ABI rule, what
 * bumps which number: docs/INSTALL.md.  The macros say which version a
 * program was compiled against; cbcmn_version() and
 * cbcmn_version_number() which library it runs with, e.g. to refuse an
 * older one than the program needs:
 *
 *     if (cbcmn_version_number() < CBCMN_VERSION_NUMBER) ...
 */
#define CBCMN_VERSION_MAJOR 0
#define CBCMN_VERSION_MINOR 2
#define CBCMN_VERSION_PATCH 0

/* MAJOR, MINOR and PATCH in one number that orders as the versions do. */
#define CBCMN_VERSION_NUMBER                                                   \
	((CBCMN_VERSION_MAJOR << 16) | (CBCMN_VERSION_MINOR << 8) | CBCMN_VERSION_PATCH)

/* The running library's version as "MAJOR.MINOR.PATCH" (static storage,
 * never NULL).  Any thread, any time, no runtime needed. */
CBCMN_API const char *cbcmn_version(void);

/* The running library's CBCMN_VERSION_NUMBER.  Any thread, any time. */
CBCMN_API unsigned cbcmn_version_number(void);

/* ------------------------------------------------------------------------
 * Errors
 *
 * Results are negative errno values (-EINVAL, -ENOMEM, -EBUSY, ...) or one of
 * these codes, which all lie below CBCMN_EBASE so they never collide with an
 * errno.  Cancellation uses the errno value: CBCMN_ECANCELED == -ECANCELED.
 */
#define CBCMN_EBASE (-4096)

#define CBCMN_ERRNO_MAP(XX)                                                   \
	XX(PANIC, -4097, "task panicked (stack overflow)")                     \
	XX(CLOSED, -4098, "nursery is closing: no new spawns")                 \
	XX(WRONGRT, -4100, "object belongs to another runtime")                \
	XX(JOINED, -4101, "task handle was already joined")                    \
	XX(BUDGET, -4102, "budget exhausted and not recharged")                \
	XX(SPAWNDENIED, -4103, "spawning needs the CapSpawn capability")        \
	XX(LEAKED, -4104, "task ended with a nursery open or a reservation unresolved") \
	XX(NOSCHED, -4105, "the core profile has no scheduler: nothing can be spawned") \
	XX(MEMLOCK, -4106, "io_uring ring memory exceeds RLIMIT_MEMLOCK: raise it (ulimit -l) " \
			   "or grant CAP_IPC_LOCK")                                  \
	XX(FORKED, -4107, "the runtime belongs to the parent process: a forked child " \
			  "cannot use it")                                             \
	XX(SUPERVISOR, -4108, "supervisor gave up: its children crashed more often than " \
			      "its restart intensity allows")

enum {
#define CBCMN__XX(name, value, msg) CBCMN_E##name = (value),
	CBCMN_ERRNO_MAP(CBCMN__XX)
#undef CBCMN__XX
	CBCMN_ECANCELED = -125, /* == -ECANCELED on Linux */
};

/* A static, human-readable description of any result this library returns
 * (negative errno or CBCMN_E*); "success" for 0 and positive values. */
CBCMN_API const char *cbcmn_strerror(int64_t err);

/* ------------------------------------------------------------------------
 * Runtime
 */
typedef struct cbcmn_runtime cbcmn_runtime;
typedef struct cbcmn_cx cbcmn_cx;
typedef struct cbcmn_nursery cbcmn_nursery;
typedef struct cbcmn_task cbcmn_task;

/* A task.  Its result is the return value: negative is a failure (errno or
 * CBCMN_E* by convention), zero or positive a success. */
typedef int64_t (*cbcmn_task_fn)(cbcmn_cx *cx, void *arg);

/* How a thief chooses its victims (SPEC-021 §7.3). */
typedef enum cbcmn_victim_policy {
	CBCMN_VICTIM_RANDOM = 0,   /* seeded xoshiro256**, the default */
	CBCMN_VICTIM_ROUND_ROBIN,  /* cycle through the executors */
	CBCMN_VICTIM_LEAST_LOADED, /* the longest run queue first */
} cbcmn_victim_policy;

/* A task's budget (SPEC-021 §5): what it may still consume.  A cost a
 * component can no longer pay (a component at zero stops the next call
 * that costs it) makes the task BudgetExhausted: it does not run again until
 * it is recharged (cbcmn_budget_recharge) or its nursery gives up on it
 * (the task then ends with CBCMN_EBUDGET).  CBCMN_UNLIMITED never runs out. */
typedef struct cbcmn_budget {
	uint64_t ops;         /* CBCMN_CHECKPOINT()s and runtime calls */
	uint64_t memory;      /* bytes allocated with cbcmn_alloc() */
	uint64_t spawn_count; /* children spawned */
	uint64_t channel_ops; /* channel sends and receives */
	uint64_t syscalls;    /* I/O calls */
} cbcmn_budget;

#define CBCMN_UNLIMITED UINT64_MAX

/* Capabilities (SPEC-021 §1.1.2): explicit tokens a task holds.  A child
 * holds what its spawner grants, never more. */
#define CBCMN_CAP_SPAWN 0x1u  /* may spawn children */
#define CBCMN_CAP_BUDGET 0x2u /* may recharge itself, up to its limit */

typedef struct cbcmn_caps {
	uint32_t flags;             /* CBCMN_CAP_* */
	cbcmn_budget budget_limit;  /* CapBudget: how much self-recharge */
} cbcmn_caps;

#define CBCMN_MAX_EXECUTORS 1024
#define CBCMN_WORKERS_AUTO UINT32_MAX
#define CBCMN_STACK_MIN (8u * 1024)
#define CBCMN_STACK_DEFAULT (64u * 1024)
#define CBCMN_STACK_MAX (256u * 1024 * 1024)
#define CBCMN_YIELD_INTERVAL_DEFAULT 1024u
#define CBCMN_YIELD_INTERVAL_CLUSTER 512u

/* Profiles (SPEC-021 §10): presets of what is implicit.  docs/BUDGETS.md
 * has the numbers and the reasons.
 *   native     cbcmn_config_init()'s choice, not a SPEC-021 profile: the C
 *              API's "unlimited unless you say so".  Budget components
 *              left 0 are CBCMN_UNLIMITED; roots hold CapSpawn, and an
 *              unlimited CapBudget only while every budget is unlimited
 *              (so a finite budget you set is enforced, never silently
 *              recharged); a yield every 1024 checkpoints.  Ordinary
 *              recursive fork-join needs nothing configured.
 *   service    SPEC-021 §10.2.2: implicit CapSpawn, finite default budgets
 *              (CBCMN_SERVICE_*): a root gets CBCMN_SERVICE_ROOT_*, a child
 *              CBCMN_SERVICE_CHILD_* out of its spawner's pool (§8.2),
 *              with spawn_count 0: a child cannot spawn unless its spawn
 *              grants it some (cbcmn_spawn_opts.budget) or its parent
 *              recharges it.  No implicit CapBudget (an unlimited one
 *              would void every budget).  A yield every 1024 checkpoints.
 *              A spin, a fork bomb or unbounded allocation is stopped
 *              without any configuration;
 *   cluster    as service, and budgets are rechargeable by any ancestor (a
 *              supervisor), not only the parent (§10.2.3); a yield every 512;
 *   sovereign  as service for budgets, but nothing implicit: roots hold
 *              exactly cfg.caps (no flags: no capability at all), and
 *              yield_interval must be given (§10.2.4);
 *   core       no scheduler: the runtime starts no executor, and opening a
 *              nursery or running a task returns CBCMN_ENOSCHED. */
typedef enum cbcmn_profile {
	CBCMN_PROFILE_SERVICE = 0,
	CBCMN_PROFILE_CLUSTER,
	CBCMN_PROFILE_SOVEREIGN,
	CBCMN_PROFILE_CORE,
	CBCMN_PROFILE_NATIVE,
} cbcmn_profile;

/* The default budgets of the SPEC-021 profiles (service, cluster,
 * sovereign), for components left 0 in cbcmn_config.budget and
 * .child_budget.  SPEC-021 names DEFAULT_OPS etc. (§8.2) but gives no
 * numbers; these are cbcmn's (docs/BUDGETS.md says why).  A root's budget
 * is the pool of its whole subtree: 1024 children at the child
 * default, about 960 alive at once once their 64 KiB stacks are counted
 * too (a root spawning more waits for its children's refunds). */
#define CBCMN_SERVICE_CHILD_OPS (1ull << 20)      /* 1024 yield intervals */
#define CBCMN_SERVICE_CHILD_MEMORY (1ull << 20)   /* 1 MiB */
#define CBCMN_SERVICE_CHILD_SPAWN 0ull            /* §8.2: children cannot spawn */
#define CBCMN_SERVICE_CHILD_CHANNEL_OPS 4096ull
#define CBCMN_SERVICE_CHILD_SYSCALLS 4096ull
#define CBCMN_SERVICE_ROOT_OPS (1ull << 30)
#define CBCMN_SERVICE_ROOT_MEMORY (1ull << 30)    /* 1 GiB */
#define CBCMN_SERVICE_ROOT_SPAWN 65535ull         /* the spec's u16 */
#define CBCMN_SERVICE_ROOT_CHANNEL_OPS (1ull << 22)
#define CBCMN_SERVICE_ROOT_SYSCALLS (1ull << 22)

/* Runtime configuration.  Initialise with cbcmn_config_init() and change
 * only the fields you care about; most zero fields mean "the default"
 * (not workers: see there). */
typedef struct cbcmn_config {
	/* Executor threads, 1..CBCMN_MAX_EXECUTORS, or CBCMN_WORKERS_AUTO
	 * (cbcmn_config_init's value): one per CPU in the process's affinity
	 * mask, or fewer under a cgroup CPU limit (docker --cpus, a
	 * Kubernetes CPU limit: cgroup v2 cpu.max or v1 cpu.cfs_quota_us, the
	 * lowest on the process's cgroup path): the limit rounded up, at
	 * least 1.  Read once, at cbcmn_runtime_create().  0 is an error
	 * (-EINVAL). */
	uint32_t workers;
	/* Victim choice for stealing. */
	cbcmn_victim_policy victim;
	/* Seed of the per-executor victim RNGs (executor i uses seed + i). */
	uint64_t seed;
	/* Bytes reserved per fiber stack, rounded up to whole pages; only the
	 * pages a fiber touches cost memory.  0: CBCMN_STACK_DEFAULT.  Must lie
	 * in [CBCMN_STACK_MIN, CBCMN_STACK_MAX]. */
	size_t stack_size;
	/* Every stack has a guard region below it.  On Linux 6.13+ it costs
	 * nothing (MADV_GUARD_INSTALL) and this limit does not apply.  Before,
	 * each guard is made with mprotect and costs two entries of
	 * vm.max_map_count: this caps how many (0: automatic, from the map
	 * budget at start-up), and a task that needs a new stack beyond it
	 * ends with -ENOMEM (one line on stderr says why) rather than run
	 * unguarded.  Each running executor keeps one guarded stack more,
	 * beyond this number, for the end of an actor that never started.  UINT32_MAX: no guards at all, a canary checked at every
	 * switch instead; an overflow then corrupts a neighbouring stack and
	 * aborts the process (docs/FIBERS.md). */
	uint32_t guard_stacks_max;
	/* Let a task waiting for its own nursery run not-yet-started children
	 * of that nursery on its own stack (no context switch).  Default on;
	 * set CBCMN_CONFIG_NO_INLINE in flags to turn it off. */
	uint32_t flags;
	/* Checkpoints between two forced yields (fairness).  0: the
	 * profile's (1024 native and service, 512 cluster; sovereign must
	 * set it). */
	uint32_t yield_interval;
	/* The budget of a task spawned from outside the runtime (a root).  A
	 * zero component means the profile's default: CBCMN_UNLIMITED in
	 * native (cbcmn_config_init's profile), CBCMN_SERVICE_ROOT_* in
	 * service, cluster and sovereign. */
	cbcmn_budget budget;
	/* What a child asks for when it is spawned (unless the spawn says
	 * otherwise, cbcmn_nursery_spawn_ex): it gets that much, or what its
	 * spawner has left if that is less, out of the spawner's budget
	 * (SPEC-021 §8.2), and gives back what it did not use to its
	 * spawner when it ends.  A zero component means the profile's
	 * default: in native, half of what the spawner has in that
	 * component (all of it if unlimited), so that the spawner can go
	 * on; CBCMN_SERVICE_CHILD_* in the others, where spawn_count is
	 * 0: a child cannot spawn (set CBCMN_UNLIMITED to let children take
	 * from their spawner's pool). */
	cbcmn_budget child_budget;
	/* Capabilities of a root task; children inherit them unless a spawn
	 * grants less.  Flags 0 (the default) means the profile's implicit
	 * ones: in native CapSpawn, plus an unlimited CapBudget if and only if
	 * every component of budget and child_budget is unlimited; in service
	 * and cluster CapSpawn only.  An unlimited CapBudget recharges a task
	 * whenever a cost finds it exhausted, i.e. voids its budget: grant it
	 * only on purpose.  CBCMN_CAPS_EXPLICIT takes flags literally;
	 * sovereign always does. */
	cbcmn_caps caps;
	/* What is implicit; see cbcmn_profile. */
	cbcmn_profile profile;

	/* ---- io_uring shards (docs/IO.md) ---------------------------------- */
	/* Submission queue entries of each executor's ring, a power of two in
	 * [8, 32768]; the completion queue gets twice as many.  0: 256. */
	uint32_t ring_entries;
	/* CBCMN_RING_* below. */
	uint32_t ring_flags;
	/* Cap on the kernel's bounded io-wq worker threads per ring (regular
	 * file reads and writes, opens, fsync).  0: 4.  The unbounded ones
	 * (calls on files io_uring cannot make non-blocking, which may wait on
	 * each other: a tty, inotify, a pipe before Linux 6.4) keep the
	 * kernel's limit (RLIMIT_NPROC): a cap there deadlocked 4 pipe
	 * writers against their readers on 6.1 (docs/IO.md). */
	uint32_t iowq_max_workers;
	/* With CBCMN_RING_SQPOLL: ms the kernel's poller spins before it
	 * sleeps.  0: 100. */
	uint32_t sqpoll_idle_ms;
	/* How long an executor that found nothing spins, looking for work,
	 * before it parks in its ring (a wake-up of a parked CPU costs tens of
	 * us here).  0: 50 us, and only its first few us while the host has
	 * more runnable threads than CPUs (the spin takes a CPU others want:
	 * docs/SCHEDULER.md), unless the runtime is confined to some of the
	 * host's CPUs (an affinity, cpus); CBCMN_SPIN_NONE: park at once;
	 * another value is kept whatever the host's load.  At most half
	 * the CPUs the runtime can use (its affinity mask under the cgroup's
	 * CPU limit; at least one) spin at a time: the other executors park
	 * after one look and a few µs (docs/SCHEDULER.md). */
	uint64_t spin_ns;
	/* The stealing gate (docs/SCHEDULER.md): a thief takes from a victim
	 * only when the time it expects to save exceeds steal_cost_ns, plus
	 * steal_margin_ns when the victim is on another NUMA node; a victim
	 * whose current task has already run longer than that passes
	 * whatever its mean pick time.  0 each: 1000 ns and 0 ns. */
	uint64_t steal_cost_ns;
	uint64_t steal_margin_ns;
	/* Threads of the blocking pool (cbcmn_blocking()).  0: 16. */
	uint32_t blocking_threads;

	/* ---- placement (docs/TOPOLOGY.md) ------------------------------------ */
	/* Executor i runs pinned to the CPU a placement policy gives it on the
	 * live topology (and its memory comes from that CPU's node): a
	 * cbcmn_policy, or CBCMN_PIN_AUTO (the default: depth-first, or no
	 * pinning where the topology cannot be read), or CBCMN_PIN_NONE.  A
	 * policy asked for explicitly that cannot be applied fails the
	 * create call. */
	int32_t policy;
	/* For CBCMN_POLICY_CPUS: the CPUs, executor i on cpus[i]. */
	const int *cpus;
	size_t ncpus;
	/* Executors to start with (seed 003's lookup array): executors
	 * [0, min_workers) start with the runtime; more are started, one
	 * at a time in index order, while every live one is busy and work is
	 * waiting, up to `workers`, each on the CPU the policy gives its
	 * index.  0: all `workers` from the start (the default).  Above
	 * `workers`: -EINVAL, unless workers is CBCMN_WORKERS_AUTO, whose
	 * count the caller cannot know (a cgroup limit may lower it): then
	 * all of them from the start. */
	uint32_t min_workers;
	/* An executor above min_workers that is the last live one and has
	 * been idle this long ends its thread (it is started again when
	 * needed).  0: never. */
	uint32_t idle_retire_ms;

	/* ---- multishot receive streams (cbcmn_io.h, docs/IO.md) ------------- */
	/* Bytes of each buffer a stream receives into (the most one
	 * cbcmn_stream_recv() returns), in [64, 1 MiB].  0: 4096. */
	uint32_t stream_buf_size;
	/* Buffers one stream may hold (received and not yet taken, plus the
	 * one its task reads) before it stops receiving until its task has
	 * taken them all; the data waits in the socket meanwhile.  At least 1.
	 * 0: 16. */
	uint32_t stream_buf_share;
	/* Most buffers an executor's pool grows to, in [stream_buf_share,
	 * 32768].  The pool grows with the streams open on the executor (a
	 * share each) and when a stream finds it empty; beyond
	 * stream_bufs_max / stream_buf_share streams they share what there
	 * is.  0: 8192 (32 MiB of 4 KiB buffers). */
	uint32_t stream_bufs_max;

	/* ---- the I/O backend (docs/IO.md, "Backends") -------------------------
	 * How executors wait for I/O and for each other, chosen once per
	 * runtime by cbcmn_runtime_create(): a cbcmn_backend below.
	 * CBCMN_BACKEND_AUTO (the default, 0) uses io_uring, and epoll where
	 * the kernel refuses io_uring (io_uring_setup fails with -EPERM: a
	 * container's seccomp profile, kernel.io_uring_disabled; -EACCES;
	 * -ENOSYS: no io_uring; -EOPNOTSUPP: older than 5.11); any other
	 * failure (-ENOMEM, -EMFILE, CBCMN_EMEMLOCK) stays the create call's.
	 * With CBCMN_BACKEND_AUTO the environment variable CBCMN_BACKEND
	 * (auto, io_uring or epoll) decides instead; an explicit choice here
	 * wins over it.  A CBCMN_BACKEND that is none of those fails the
	 * create call with -EINVAL (and a line on stderr naming it);
	 * CBCMN_BACKEND_IO_URING where io_uring is refused fails it with the
	 * kernel's error.  What was chosen: cbcmn_stats.backend. */
	uint32_t backend;

	/* ---- obligations (cbcmn_obligation_reserve(), channel permits) ------
	 * What a leak does (a task ending with an obligation unresolved; the
	 * runtime aborts the obligation and the task's result becomes
	 * CBCMN_ELEAKED unless it failed already, whatever the policy): a
	 * cbcmn_leak_policy.  0, the default: CBCMN_LEAK_LOG.  Anything else
	 * fails the create call with -EINVAL. */
	uint32_t obligation_leak;

	/* ---- I/O submission between tasks (docs/SCHEDULER.md, "Where work
	 * goes") --------------------------------------------------------------
	 * An I/O request a task queues waits in the executor's submission
	 * queue for a batch: up to 16 tasks' picks, and no longer than this
	 * many ns when the next pick (by the executor's mean pick time) would
	 * keep it waiting past that: beside tasks that each run for
	 * milliseconds, requests are submitted after every pick.  On the
	 * epoll backend the same bound applies to the executor's look at its
	 * epoll set between tasks (readiness that has come).  0: 50 us. */
	uint64_t io_batch_ns;

	/* ---- tracing (cbcmn_trace_drain(), docs/TRACE.md) --------------------
	 * Records each executor's trace ring holds, rounded up to a power of
	 * two, at most 1 << 24 (more: -EINVAL); 32 bytes each, mapped per
	 * executor and touched only as they are written.  0, the default:
	 * tracing off, and every trace site costs one predicted branch. */
	uint32_t trace_events;

	/* ---- stalls (docs/SCHEDULER.md, "Stalls") ---------------------------
	 * An executor whose task has run for longer than this without a
	 * scheduling point (a blocking libc call, a long loop without
	 * checkpoints) is stalled: a monitor thread of the runtime sees it
	 * (looking every 1 ms to stall_ns / 2 while tasks run, never while
	 * every executor is parked), reports it (cbcmn_executor_stats.stalls and
	 * .stalled_task, the exec_stall probe), lets other executors take
	 * its deque and next-task slot, sends tasks woken for it elsewhere,
	 * and starts one more executor if work waits and the runtime has
	 * room (min_workers < workers).  A runtime without room (the
	 * default, min_workers = workers) keeps a spare executor, started
	 * only while a stalled executor's thread sleeps in a blocking call
	 * with work waiting and retired once no executor is stalled: it is
	 * not counted in cbcmn_runtime_workers() nor cbcmn_stats.executors
	 * (executors_live counts it while it runs) and cannot be named by a
	 * placement.  0: 10 ms; CBCMN_STALL_OFF: no monitor and no spare.
	 * Lab mode never runs one (its runs repeat). */
	uint64_t stall_ns;

	/* ---- owed notifications (docs/ACTORS.md, "One chain, one executor")
	 * An actor that wakes another into its executor's empty next-task
	 * slot notifies no idle executor yet: it typically blocks next and
	 * runs the woken one itself.  A sender that computes on instead,
	 * without a runtime call, owes that notification, and the stall
	 * monitor pays it: the woken actor starts on an idle executor owe_ns
	 * to 2 owe_ns after the wake, up to 8 owe_ns while chains of actors
	 * run (the monitor's calm back-off), rarely up to 9 owe_ns
	 * (docs/SCHEDULER.md, "The monitor's sleeps"); a sender that blocks
	 * first runs it itself.  A smaller owe_ns hands over sooner; its cost
	 * is the monitor's looks, every owe_ns to 4 owe_ns while chains of
	 * actors run.
	 * 0: 1 ms; else CBCMN_OWE_MIN_NS to CBCMN_OWE_MAX_NS (-EINVAL
	 * outside).  Without a monitor (stall_ns CBCMN_STALL_OFF, lab mode)
	 * nothing is owed: every such wake notifies at once. */
	uint64_t owe_ns;
} cbcmn_config;

/* cbcmn_config.stall_ns: no stall monitor. */
#define CBCMN_STALL_OFF UINT64_MAX

/* cbcmn_config.owe_ns's bounds: the monitor's shortest tick (a shorter
 * one would keep its thread waking while chains run), and a second. */
#define CBCMN_OWE_MIN_NS 100000ull
#define CBCMN_OWE_MAX_NS 1000000000ull

/* Leak policies (cbcmn_config.obligation_leak).  Every leak is counted
 * (cbcmn_snapshot.obligations_leaked) under each of them. */
typedef enum cbcmn_leak_policy {
	CBCMN_LEAK_LOG = 0,   /* count it and write one line naming the task on stderr */
	CBCMN_LEAK_COUNT = 1, /* count it only */
	CBCMN_LEAK_PANIC = 2, /* write the line, then abort() the process: a leak is a
			       * bug this program wants to die on (tests, debugging) */
} cbcmn_leak_policy;

/* I/O backends (cbcmn_config.backend, cbcmn_stats.backend). */
typedef enum cbcmn_backend {
	CBCMN_BACKEND_AUTO = 0,     /* io_uring, else epoll where io_uring is refused */
	CBCMN_BACKEND_IO_URING = 1, /* a ring per executor (docs/IO.md) */
	CBCMN_BACKEND_EPOLL = 2,    /* an epoll set per executor: readiness, then the call */
} cbcmn_backend;

/* "io_uring", "epoll" (or "auto"), for tools; "?" for anything else. */
static inline const char *cbcmn_backend_name(uint32_t b)
{
	return b == CBCMN_BACKEND_IO_URING ? "io_uring"
	       : b == CBCMN_BACKEND_EPOLL  ? "epoll"
	       : b == CBCMN_BACKEND_AUTO   ? "auto"
					   : "?";
}

#define CBCMN_PIN_AUTO (-1)
#define CBCMN_PIN_NONE (-2)

#define CBCMN_SPIN_NONE UINT64_MAX

/* Ring options (cbcmn_config.ring_flags). */
#define CBCMN_RING_SQPOLL 0x1u      /* a kernel thread polls the SQ */
#define CBCMN_RING_NO_MSG_RING 0x2u /* doorbells through eventfd, not MSG_RING */
#define CBCMN_RING_PLAIN 0x4u       /* no COOP/DEFER_TASKRUN (for comparisons) */

/* In cbcmn_config.caps.flags: take the flags literally, even when 0. */
#define CBCMN_CAPS_EXPLICIT 0x80000000u

#define CBCMN_CONFIG_NO_INLINE 0x1u
/* Budgets off: nothing is charged or drawn, checkpoints only yield every
 * yield_interval, whatever the profile.  For measuring what budgets cost;
 * an explicit choice, never implied by a profile. */
#define CBCMN_CONFIG_NO_BUDGETS 0x2u
/* Lab mode (SPEC-021 §9): one executor (workers must be 1), a virtual clock
 * that jumps to the next timer whenever nothing can run, so sleeps and
 * timeouts take no real time, and scheduling choices drawn from the seed.
 * The same seed gives the same order of execution; the environment variable
 * CBCMN_LAB_SEED (decimal or 0x-hex, all of it; anything else fails
 * cbcmn_runtime_create() with -EINVAL) overrides the seed, and a failing
 * cbcmn_runtime_run() prints the seed to replay it with.  The clock jumps
 * however far the next deadline is: deadlines saturate at UINT64_MAX - 1
 * (a sleep or timeout of UINT64_MAX - 1 ns or more from now; only an
 * actor's CBCMN_ACTOR_FOREVER is none: a sleep's or a channel timeout's
 * UINT64_MAX is a duration), and once a wait for that one moved the clock
 * there it stays, and every later sleep and timeout of the clock (not an
 * I/O timeout, which is real time) is due at once (docs/LAB.md). */
#define CBCMN_CONFIG_LAB 0x4u
/* Each task spawned by a task takes its stack at the spawn and keeps its
 * record (the runtime's bookkeeping, 368 B) in that stack's top page,
 * instead of a separate allocation: a parked fiber costs its one touched
 * page and nothing more (cbcmn-bench parked).  The price: a spawned task
 * holds a stack (its top page of memory, and a map entry where guards
 * need one) from the spawn until its record goes, where a plain record
 * costs 432 B: until it ends and its handle, if any, is joined; an ended
 * task not joined yet keeps the pages its fiber touched; so for many long-lived fibers (connections, actors), not for
 * fork-join bursts.  Tasks spawned from outside the runtime, and any
 * spawn that finds no stack, keep a plain record. */
#define CBCMN_CONFIG_RECORD_IN_STACK 0x8u

/* Fill *cfg with the defaults.  The profile is CBCMN_PROFILE_NATIVE: no
 * budget limits unless you set some.  A program that wants SPEC-021's
 * :service (finite default budgets, children that cannot spawn unless
 * granted) sets cfg.profile = CBCMN_PROFILE_SERVICE. */
CBCMN_API void cbcmn_config_init(cbcmn_config *cfg);

/* Create a runtime and start its executor threads (and its stall monitor's:
 * cbcmn_config.stall_ns).  cfg may be NULL (the
 * defaults).  On success stores the runtime in *out and returns 0; on
 * failure returns -EINVAL (bad configuration, e.g. a sovereign profile
 * without yield_interval), -ENOMEM, or the error of the failing system
 * call, and nothing is left running.  Rings that do not fit in
 * RLIMIT_MEMLOCK are made smaller; CBCMN_EMEMLOCK when even the smallest
 * does not (docs/IO.md).
 *
 * fork(): a child has none of the runtime's threads, so in a child forked
 * after create, running, opening, spawning, awaiting, joining, cancelling
 * and destroy on the parent's runtime, draining its trace, and every
 * channel call on its channels, return CBCMN_EFORKED (nothing waits, no lock of the runtime is
 * taken, nothing is freed: the memory is the child's copy).  The child may
 * create runtimes of its own, even if another thread of the parent was
 * creating one as it forked.  Fork from inside a task only to exec or
 * _exit. */
CBCMN_API int cbcmn_runtime_create(const cbcmn_config *cfg, cbcmn_runtime **out);

/* Stop the executors and free the runtime.  Stops the metrics servers
 * still running on it first (cbcmn_metrics_stop()), once nothing of the
 * program's holds it.  Returns -EBUSY, and leaves the runtime running,
 * its metrics servers too, while any task of the program's is alive, a nursery a thread opened
 * (cx NULL) has not been awaited (it could still be spawned into, awaited
 * or cancelled), or a thread is blocked on one of its channels or holds
 * a reservation on one (what ends either, a send or close, a commit or
 * abort, touches the runtime).  One exception: a spawn (nursery open,
 * channel wait) racing destroy, after its first look, is refused after
 * the servers stopped: that -EBUSY leaves the runtime without them.  Must not be called from one of the runtime's own tasks
 * or from a function one of them runs on its blocking pool (cbcmn_blocking):
 * -EDEADLK. */
CBCMN_API int cbcmn_runtime_destroy(cbcmn_runtime *rt);

/* Run fn(cx, arg) as a task in a fresh nursery and wait for it from the
 * calling thread, which must not be one of rt's executors (-EDEADLK).
 * Stores the task's result in *result (if not NULL).  Returns 0, or a
 * negative error if the task could not be started. */
CBCMN_API int cbcmn_runtime_run(cbcmn_runtime *rt, cbcmn_task_fn fn, void *arg,
				int64_t *result);

/* Number of executor threads. */
CBCMN_API uint32_t cbcmn_runtime_workers(const cbcmn_runtime *rt);

/* ------------------------------------------------------------------------
 * Task context (valid only inside the task it was given to)
 */

/* The runtime the task runs on. */
CBCMN_API cbcmn_runtime *cbcmn_cx_runtime(const cbcmn_cx *cx);
/* The task's id: unique within its runtime, never 0. */
CBCMN_API uint64_t cbcmn_cx_task_id(const cbcmn_cx *cx);
/* Index of the executor running the task right now.  Tasks may migrate
 * between executors at every yield or blocking call.  On a static
 * runtime's spare executor (cbcmn_config.stall_ns) it is
 * cbcmn_runtime_workers(): one past the program's executors, so not an
 * index of an array of that many, nor a shard a placement may name. */
CBCMN_API uint32_t cbcmn_cx_executor(const cbcmn_cx *cx);
/* True once the task's nursery, or any enclosing nursery, was cancelled. */
CBCMN_API bool cbcmn_cx_cancelled(const cbcmn_cx *cx);

/* Let other tasks run; the task is rescheduled behind them.  Costs no
 * budget.  Returns 0, CBCMN_ECANCELED if the task has been cancelled (it
 * should wind down and return), -EINVAL for a NULL cx, or -EPERM (cx is
 * a task's context used on another thread: a cbcmn_blocking()
 * function's; the same for every call that may wait, docs/BLOCKING.md). */
CBCMN_API int cbcmn_yield(cbcmn_cx *cx);

/* Sleep for ns nanoseconds (of the virtual clock in lab mode).  Returns 0,
 * CBCMN_ECANCELED when the task is or gets cancelled (it wakes at once),
 * -EINVAL, -ENOMEM or -EPERM (cx used on another thread: cbcmn_yield()). */
CBCMN_API int cbcmn_sleep(cbcmn_cx *cx, uint64_t ns);

/* The runtime's clock in ns: CLOCK_MONOTONIC, or the virtual clock (from 0)
 * in lab mode, which may be moved as far as UINT64_MAX - 1 and then stays
 * (CBCMN_CONFIG_LAB).  0 for NULL. */
CBCMN_API uint64_t cbcmn_now(const cbcmn_runtime *rt);

/* ------------------------------------------------------------------------
 * Budgets (SPEC-021 §5)
 *
 * Costs: CBCMN_CHECKPOINT() 1 op; spawning 1 op + 1 spawn_count +
 * cfg.stack_size bytes of memory for the child's stack (given back to the
 * spawner when the child ends, with what the child did not use), and the
 * child's budget comes out of the spawner's; cbcmn_alloc(size) 1 op + size bytes of memory;
 * cbcmn_chan_create() by a task capacity * elem_size bytes of memory
 * (given back if that task destroys the channel).  Voluntary yields cost
 * nothing.  What a task gets when nothing is configured depends on the
 * profile (cbcmn_profile, docs/BUDGETS.md).  When a cost cannot be
 * paid the task waits, BudgetExhausted, until its nursery's opener recharges
 * it or a child it paid for ends and gives back (a task spawned without a
 * handle, which nobody can recharge, ends at once with CBCMN_EBUDGET
 * unless such a child still runs: cbcmn_nursery_spawn); if every child a nursery
 * still waits for is exhausted (a waiting task whose own paid children
 * still run is not), the nursery ends them (each with CBCMN_EBUDGET)
 * instead of waiting forever.  A spawn that waited looks at its nursery
 * again: closed or cancelled meanwhile, it fails as it would have before
 * (CBCMN_ECLOSED, CBCMN_ECANCELED) and the spawn's charge comes back.
 */

/* The fast path of the loop yield check: a countdown at the start of the
 * task's context.  Private: use CBCMN_CHECKPOINT(). */
struct cbcmn__cx_hot {
	int64_t countdown;
};
CBCMN_API void cbcmn__checkpoint_slow(cbcmn_cx *cx);

/* Place in loops: costs one op of budget, yields every yield_interval
 * checkpoints, and stops here while the task's ops are exhausted.  A few
 * instructions when nothing is due.  cx must be the running task.
 * Cancellation (SPEC-021 §5.2.2, §8.3.1): a checkpoint in a task whose
 * nursery, or an enclosing one, was cancelled does not return: the task
 * ends with CBCMN_ECANCELED, as one its nursery gave up on ends with
 * CBCMN_EBUDGET.  The countdown is the task's own and cheap, so this
 * happens at the first checkpoint that takes the slow path: within
 * yield_interval checkpoints.  Its frames are abandoned as by longjmp
 * (what they malloc'ed is lost, a lock they hold stays held); the
 * nurseries it has open are cancelled and awaited first.  Code that must
 * wind down in order watches cbcmn_cx_cancelled() or a runtime call's
 * CBCMN_ECANCELED instead, and does not checkpoint while it winds down.
 * On another thread than the task's fiber (a cbcmn_blocking() function
 * handed cx, while the task waits for it) it only counts: it never yields,
 * waits or ends anything there; such a function watches
 * cbcmn_cx_cancelled(cx) to stop early. */
#define CBCMN_CHECKPOINT(cx)                                                   \
	do {                                                                    \
		if (__builtin_expect(--((struct cbcmn__cx_hot *)(cx))->countdown <= 0, 0)) \
			cbcmn__checkpoint_slow(cx);                             \
	} while (0)

/* The calling task's remaining budget.  Returns 0 or -EINVAL. */
CBCMN_API int cbcmn_budget_get(cbcmn_cx *cx, cbcmn_budget *out);

/* The calling task's capabilities (the CapBudget limit as it stands).
 * Returns 0 or -EINVAL. */
CBCMN_API int cbcmn_caps_get(cbcmn_cx *cx, cbcmn_caps *out);

/* Give task t (a child of a nursery cx opened, or in the cluster profile
 * any descendant of cx) more budget, taken from cx's own.  Components of
 * amount may be 0.  If t was waiting exhausted it runs again.  t NULL
 * recharges cx itself from its CapBudget limit (which shrinks by amount).
 * Returns 0, -EINVAL, -EPERM (cx is not t's parent, or holds no
 * CapBudget), or CBCMN_EBUDGET (cx has less than amount to give, or its
 * limit is lower; nothing was moved).  The amount is checked first: more
 * than cx has is refused even if t has already ended (a recharge of an
 * ended task otherwise returns 0 and moves nothing: the check and the
 * move are one step against t's end, so what is moved reaches t before t
 * gives its leftovers back).  Components add up saturating: a recharge
 * to CBCMN_UNLIMITED makes that component unlimited.  A task holding
 * CapBudget also recharges itself automatically when a cost finds it
 * exhausted, as far as its limit allows. */
CBCMN_API int cbcmn_budget_recharge(cbcmn_cx *cx, cbcmn_task *t, const cbcmn_budget *amount);

/* Allocate size bytes (malloc), charged to the task's memory budget.
 * NULL with errno ENOMEM when out of memory, EINVAL for a NULL cx.  While
 * the memory budget is exhausted the task waits, as for any cost. */
CBCMN_API void *cbcmn_alloc(cbcmn_cx *cx, size_t size);
/* Free what cbcmn_alloc returned.  Memory budget is a count of bytes
 * allocated, not live: freeing gives none back. */
CBCMN_API void cbcmn_free(void *p);

/* ------------------------------------------------------------------------
 * Nurseries (SPEC-021 §8)
 */

/* Open a nursery.  cx is the task opening it, or NULL when a thread outside
 * the runtime opens it (that thread then awaits it).  CBCMN_ENOSCHED in the
 * core profile.  A nursery cannot
 * outlive its opener: a task must await every nursery it opened before it
 * returns.  Returns 0, -EINVAL, -ENOMEM, CBCMN_EWRONGRT, or -EPERM (cx is
 * a task's context used on another thread: a cbcmn_blocking()
 * function's). */
CBCMN_API int cbcmn_nursery_open(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_nursery **out);

/* Spawn fn(cx, arg) as a child of n.  cx is the calling task, or NULL from
 * the thread outside the runtime that opened n.  May be called by n's
 * opener or by a task inside n (a descendant).  If handle is not NULL the task can be
 * joined with cbcmn_task_join(), which must then be called exactly once
 * (before or after the nursery is awaited).  Returns 0, -EINVAL, -ENOMEM,
 * CBCMN_ECLOSED (await_all has begun), CBCMN_ECANCELED (n was cancelled;
 * nothing was spawned), CBCMN_ESPAWNDENIED (cx holds no CapSpawn) or
 * -EPERM (cx is a task's context used on another thread: a
 * cbcmn_blocking() function's).
 * The spawn is a cost (see Budgets): a task whose spawn_count is spent
 * (under the service profile a child starts with none, SPEC-021 §8.2)
 * waits, BudgetExhausted, until it is recharged or its nursery ends it.
 * A child spawned without a handle cannot be recharged (outside a
 * supervisor's nursery): when it runs out of a budget component it ends
 * at once with CBCMN_EBUDGET instead of waiting (docs/BUDGETS.md). */
CBCMN_API int cbcmn_nursery_spawn(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_task_fn fn,
				  void *arg, cbcmn_task **handle);

/* Options for cbcmn_nursery_spawn_ex(). */
typedef struct cbcmn_spawn_opts {
	/* What the child asks for (components 0: the config's child_budget;
	 * CBCMN_UNLIMITED: all the spawner has).  NULL: the config's
	 * child_budget.  Under service this is how a child is granted
	 * spawns (spawn_count).  A component asked for that the spawner has
	 * not got after the spawn's costs is refused: the spawn returns
	 * CBCMN_EBUDGET, nothing taken, its op included (never clamped: the
	 * child would take all, and the spawner wait for its end). */
	const cbcmn_budget *budget;
	/* What it is granted: intersected with the spawner's own (flags
	 * and each limit).  NULL: everything the spawner holds. */
	const cbcmn_caps *caps;
	/* Where the child starts (seed 001).  CBCMN_PLACE_LOCAL (0, the
	 * default): the spawner's executor, stealable.  CBCMN_PLACE_PINNED:
	 * executor `shard`, never migrated.  CBCMN_PLACE_STEALABLE_ON:
	 * executor `shard` preferred, may be stolen.  CBCMN_PLACE_STEALABLE:
	 * a preferred executor chosen round-robin, may be stolen. */
	uint32_t placement;
	uint32_t shard;
} cbcmn_spawn_opts;

#define CBCMN_PLACE_LOCAL 0u
#define CBCMN_PLACE_PINNED 1u
#define CBCMN_PLACE_STEALABLE_ON 2u
#define CBCMN_PLACE_STEALABLE 3u

/* Shorthands for cbcmn_nursery_spawn_ex() with a placement (seed 001):
 * pinned to executor shard (never migrates), stealable with executor shard
 * preferred, stealable with a preferred executor chosen round-robin.  A
 * shard >= the number of executors is -EINVAL.
 * With executors started on demand (min_workers), a shard that cannot
 * start (no thread: -EAGAIN; no ring: CBCMN_EMEMLOCK, docs/IO.md) never
 * leaves work waiting for it: a pinned child that was queued to it ends
 * with that error, unstarted; for a second after such a failure a pinned
 * spawn to it returns the error at once, nothing spawned; then the next
 * spawn tries to start it again.  A child that prefers it (stealable) runs
 * elsewhere. */
CBCMN_API int cbcmn_nursery_spawn_pinned(cbcmn_cx *cx, cbcmn_nursery *n, uint32_t shard,
					 cbcmn_task_fn fn, void *arg, cbcmn_task **handle);
CBCMN_API int cbcmn_nursery_spawn_stealable_on(cbcmn_cx *cx, cbcmn_nursery *n, uint32_t shard,
					       cbcmn_task_fn fn, void *arg, cbcmn_task **handle);
CBCMN_API int cbcmn_nursery_spawn_stealable(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_task_fn fn,
					    void *arg, cbcmn_task **handle);

/* cbcmn_nursery_spawn() with options (opts may be NULL). */
CBCMN_API int cbcmn_nursery_spawn_ex(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_task_fn fn, void *arg,
				     const cbcmn_spawn_opts *opts, cbcmn_task **handle);

/* Wait until every child of n has ended, then free n (or leave it to the
 * last cbcmn_nursery_release() if it is held).  Must be called once, by n's
 * opener: cx is the task that opened n, or NULL for the thread that opened
 * it.  Children that have not started yet may run on the caller's stack
 * meanwhile (see CBCMN_CONFIG_NO_INLINE).
 * Returns 0 if every child succeeded (zero or positive results), else, in
 * this order of precedence (SPEC-021 §8.1.3 "propagate first error", §3.6
 * which tells a cancellation from a child's failure):
 *   1. the first failure, in the order children ended: a child's negative
 *      result other than CBCMN_ECANCELED, CBCMN_EPANIC for a child that
 *      overflowed its stack, CBCMN_EBUDGET for one n gave up on.  It wins
 *      over cancellations whenever they came, before it or after it;
 *   2. CBCMN_ECANCELED, when no child failed but n was cancelled or a child
 *      ended with CBCMN_ECANCELED (an enclosing nursery was cancelled, or
 *      the child returned it).
 * The first failure cancels the siblings (fail fast); a child's
 * CBCMN_ECANCELED does not.  If the opener is itself cancelled, n is
 * cancelled too before waiting.  From an actor's drop (a halt never
 * waits: cbcmn_actor_opts.drop) with children still running, n is
 * cancelled and CBCMN_ECANCELED returned without waiting: n stays open,
 * awaited at its opener's end.  Returns -EINVAL for NULL, -EPERM when cx
 * is not n's opener, or is its context used on another thread (a
 * cbcmn_blocking() function's): n is left untouched. */
CBCMN_API int64_t cbcmn_nursery_await_all(cbcmn_cx *cx, cbcmn_nursery *n);

/* Cancel n: children that have not started never run (they end with
 * CBCMN_ECANCELED); running ones observe it at their next yield or blocking
 * call (cbcmn_cx_cancelled() turns true) and end at their next
 * CBCMN_CHECKPOINT().  Nested nurseries opened below n are cancelled with
 * it.  Idempotent.
 * Any thread may call it on a nursery that cannot be freed under the call
 * by anything but the call's own effect: from n's opener before
 * await_all, from a task inside n, from a thread while n cannot end by
 * itself (its children wait to be cancelled), or on a nursery the caller
 * holds (cbcmn_nursery_hold), the only safe way when n may end by itself
 * meanwhile: n is freed when await_all returns, and its memory may become
 * another nursery, which a late cancel through an unheld n would cancel.
 * That the cancel ends n (its children stop, await_all returns) while
 * the call is still returning is safe: the call holds n meanwhile.
 * Returns 0, -EINVAL, -ESRCH (n is held and its await_all is over: nothing
 * to cancel, nothing done), or CBCMN_EFORKED in a forked child
 * (cbcmn_runtime_create()). */
CBCMN_API int cbcmn_nursery_cancel(cbcmn_nursery *n);

/* Hold n: keep it valid for cbcmn_nursery_cancel() until the matching
 * cbcmn_nursery_release(), even after its await_all has returned (cancel
 * then returns -ESRCH) and after its runtime is destroyed.  For handing n
 * to a thread that may cancel it late (a watchdog, a signal thread): take
 * the hold before handing it over, where n is certainly alive (its opener
 * before await_all, or a task inside n); the thread releases it when done.
 * A held nursery is otherwise unchanged: await_all frees it only after
 * the last release (this costs its opener one lock round; an unheld one,
 * nothing).  Returns 0 or -EINVAL. */
CBCMN_API int cbcmn_nursery_hold(cbcmn_nursery *n);

/* Give up one hold (cbcmn_nursery_hold, exactly once per hold): the last
 * one after await_all frees n.  Any thread; NULL is ignored.  A release
 * with no hold left before await_all is over is ignored too (n stays its
 * opener's); one after the last release, like free() twice, is undefined. */
CBCMN_API void cbcmn_nursery_release(cbcmn_nursery *n);

/* ------------------------------------------------------------------------
 * Obligations (seed 000)
 *
 * An obligation is a promise to do one of two things later, commit or
 * abort, that the runtime holds the promiser to: a two-phase protocol whose
 * second phase must not be forgotten (an ack to send, a lease to release, a
 * slot to fill).  Channel permits (cbcmn_chan_reserve()) are obligations of
 * this kind, tracked and counted by the same mechanism.
 *
 *     cbcmn_obligation o;
 *     cbcmn_obligation_reserve(rt, cx, "ack", &o);
 *     ...
 *     ok ? cbcmn_obligation_commit(cx, &o) : cbcmn_obligation_abort(cx, &o);
 *
 * Ownership.  An obligation belongs to the task that reserved it (cx), or,
 * with a NULL cx, to the threads outside the runtime.  Only its owner may
 * resolve it: another task, or a thread for a task's, gets -EPERM (and a
 * task for a thread's); any thread may resolve a thread's.  It cannot be
 * handed to another task.
 *
 * Leaks.  A task that ends with obligations unresolved leaked them: the
 * runtime aborts each, counts it (cbcmn_snapshot.obligations_leaked), applies
 * the runtime's policy (cbcmn_config.obligation_leak: log, count, or abort
 * the process) and the task's result becomes CBCMN_ELEAKED unless it had
 * failed already; its nursery's await_all reports that as it does any child
 * failure.  Leaks are found when the owner task ends, not when its nursery
 * closes: a nursery closes only after every task in it has ended, so by
 * then each leak was already found and reported once, by the task that
 * made it.  A thread's obligations are found leaked when the runtime is
 * destroyed with them still outstanding.  Outstanding obligations show in
 * cbcmn_runtime_snapshot() and keep the runtime from being quiescent.
 *
 * A task the runtime ends from outside (its nursery gave up on its budget,
 * CBCMN_EBUDGET; a stack overflow or its executor's thread dying under it,
 * CBCMN_EPANIC; a cancellation that unwinds it) did not leak: it never got
 * the chance to resolve.  Its obligations are aborted without a leak
 * report, count or policy, and its result says why it ended.  A task that returns by itself, even with an
 * error, leaked whatever it still holds.
 *
 * Commit and abort differ only in what the caller means: the runtime
 * treats both as the obligation's end.
 */
typedef struct cbcmn_obligation {
	void *_rec; /* private */
	uint64_t _gen;
} cbcmn_obligation;

/* Reserve an obligation for cx (the calling task, or NULL from a thread
 * outside the runtime) and fill *o.  what names it in the leak line (a
 * string that outlives the obligation; NULL: "obligation").  Returns 0,
 * -EINVAL, -ENOMEM, CBCMN_EWRONGRT (cx is of another runtime) or
 * CBCMN_EFORKED.  On failure *o is zeroed, so that resolving it on an error
 * path is -EINVAL; a handle this call did not fill is undefined. */
CBCMN_API int cbcmn_obligation_reserve(cbcmn_runtime *rt, cbcmn_cx *cx, const char *what,
				       cbcmn_obligation *o);

/* Resolve *o: commit it, or abort it.  Returns 0; -EINVAL if *o holds no
 * outstanding obligation (zeroed, already committed or aborted, or aborted
 * by the runtime when its owner leaked it); -EPERM if cx is not its owner
 * (see above); CBCMN_EWRONGRT; CBCMN_EFORKED.  Exactly one of two racing
 * resolutions of a thread's obligation (or channel permit,
 * cbcmn_chan_commit()) succeeds, the other is -EINVAL, whether the racers
 * share one handle object or each hold a copy (a resolution clears the
 * handle it was given, atomically). */
CBCMN_API int cbcmn_obligation_commit(cbcmn_cx *cx, cbcmn_obligation *o);
CBCMN_API int cbcmn_obligation_abort(cbcmn_cx *cx, cbcmn_obligation *o);

/* ------------------------------------------------------------------------
 * Task handles
 */

/* Wait for the task and store its result in *result (may be NULL), then
 * release the handle.  cx is the calling task, or NULL from a thread
 * outside the runtime.  Returns 0, -EINVAL, CBCMN_EJOINED when the handle
 * was already joined (detected while the runtime still holds it),
 * -EDEADLK for a NULL cx on one of the runtime's executor threads, -EPERM
 * for a task's cx used on another thread (a cbcmn_blocking() function's),
 * or
 * CBCMN_ECANCELED from an actor's drop (a halt never waits:
 * cbcmn_actor_opts.drop) while the task runs: the handle stays joinable.
 * A join never waits for a recharge it blocks: while t's opener (the task
 * or thread that opened its nursery, the only one that may recharge it)
 * joins it, a t out of budget (BudgetExhausted, and no child it paid for
 * left to refund it) ends with CBCMN_EBUDGET, whether it ran out before
 * the join or after; the join then returns 0 with *result CBCMN_EBUDGET.
 * Not if a supervisor's nursery holds t (the supervisor decides).  Any
 * other joiner leaves t to its opener.  Recharge t before joining it to
 * keep it going (docs/BUDGETS.md, "Exhaustion and recharge"). */
CBCMN_API int cbcmn_task_join(cbcmn_cx *cx, cbcmn_task *t, int64_t *result);

/* The task's id (the same as cbcmn_cx_task_id() inside it); 0 for NULL. */
CBCMN_API uint64_t cbcmn_task_id(const cbcmn_task *t);

/* ------------------------------------------------------------------------
 * Statistics
 *
 * Counters are kept per executor by the executor itself and read without
 * locks: a snapshot taken while tasks run is consistent per counter, not
 * across counters.
 */
/* Slots of cbcmn_executor_stats.mailbox_depth_hist: depths up to
 * CBCMN_ACTOR_MAILBOX_MAX (2^20) each have their own. */
#define CBCMN_MAILBOX_HIST_SLOTS 21

/* The upper bound of the slot of a mailbox depth histogram (hist[nslots])
 * under which share pct/100 of its samples fall (cbcmn_executor_stats,
 * mailbox_depth_p99 with pct 99): 0 for an empty histogram. */
CBCMN_API uint64_t cbcmn_stats_hist_quantile(const uint64_t *hist, uint32_t nslots, uint32_t pct);

typedef struct cbcmn_executor_stats {
	uint64_t tasks_run;       /* tasks started, inline runs included (not resumes) */
	uint64_t local_hits;      /* picks (starts and resumes) from its own slot/deque/yield list */
	uint64_t inject_hits;     /* picks from the global inject queue */
	uint64_t steal_attempts;  /* victims probed */
	uint64_t steal_successes; /* probes that took at least one task */
	uint64_t tasks_stolen;    /* tasks taken from victims */
	uint64_t inline_runs;     /* children run on their awaiter's stack */
	uint64_t parks;           /* times the executor went to sleep */
	uint64_t wakes;           /* times it was woken by a notification */
	uint64_t spawns;          /* tasks spawned from this executor */
	uint64_t queue_depth;     /* run queue length at snapshot time */
	/* Shards and rings (docs/IO.md). */
	uint64_t steals_gated;    /* steals the cost gate refused */
	uint64_t doorbells_sent;  /* doorbells this executor rang (MSG_RING or eventfd) */
	uint64_t doorbells_recv;  /* doorbell completions reaped on its ring */
	uint64_t doorbells_coalesced; /* wakes it asked for that needed no doorbell */
	uint64_t ring_msgs_submitted; /* MSG_RING SQEs it submitted */
	uint64_t ring_msgs_backpressure; /* SQ full, CQ overflow or a full lane */
	uint64_t sqes_submitted;
	uint64_t cqes_reaped;
	uint64_t ring_enters;     /* io_uring_enter calls */
	uint64_t xmsgs_sent;      /* messages to other executors */
	uint64_t xmsgs_recv;      /* messages from other executors */
	uint64_t xmsgs_acked;     /* its messages acknowledged (sent - acked: in flight) */
	uint64_t handoffs;        /* tasks it woke that went home to another executor */
	uint64_t io_ops;          /* fiber I/O calls submitted */
	uint64_t avg_task_ns;     /* mean time per scheduler pick (load statistic) */
	uint32_t busy_pct;        /* share of recent time spent running tasks (load statistic) */
	int32_t cpu;              /* the CPU it is pinned to, -1 if none */
	int32_t node;             /* that CPU's NUMA node id, -1 if not pinned */
	uint32_t state;           /* cbcmn_exec_state, at snapshot time */
	int32_t tid;              /* its thread id, 0 while it has no thread */
	/* Accepts of its acceptors that failed for a cause that passes (out of
	 * descriptors or memory: EMFILE, ENFILE, ENOMEM, ENOBUFS; a connection
	 * aborted): the acceptor backed off and tried again (docs/IO.md). */
	uint64_t accept_errors;
	/* Actors (cbcmn_actor.h) homed on this executor: the one it last began
	 * to run each on (before an actor first runs: the spawner's, or its
	 * shard if pinned).  Gauges, read one by one: a snapshot taken while
	 * actors change state may be off by the changes under way.  Each is
	 * kept modulo 2^40 (docs/ACTORS.md): exact up to 2^39 - 1 per
	 * executor (mailbox_depth past that, half a million full mailboxes
	 * of CBCMN_ACTOR_MAILBOX_MAX on one executor, reads 0 or less than
	 * it is). */
	uint64_t actors;          /* live actors */
	uint64_t actors_runnable; /* of those, ready to run (queued) */
	uint64_t actors_running;  /* ... running now (0 or 1 per executor) */
	uint64_t actors_waiting;  /* ... blocked: on their mailbox, a sleep, a channel, I/O */
	uint64_t actors_receiving; /* ... of the waiting, blocked in cbcmn_actor_receive(), or
				    * a handler actor with a receive deadline armed */
	uint64_t actors_halting;  /* ... halting (their halt runs) */
	uint64_t mailbox_depth;   /* messages waiting in their mailboxes (DOWN excluded; not
				   * those still on their way over the lanes) */
	/* Times one run of a task held the executor longer than
	 * cbcmn_config.stall_ns (docs/SCHEDULER.md, "Stalls"). */
	uint64_t stalls;
	/* The id (cbcmn_cx_task_id) of the task stalling it now, 0 if it is
	 * not stalled.  In the totals: the stalled executors' count. */
	uint64_t stalled_task;
	/* The load of its actor wheel (seed 003: 1 / wheel turn rate), in
	 * thousandths: 1000 = a turn of the wheel takes its nominal time (64
	 * quanta at the measured time of a quantum), so every runnable actor
	 * gets its whole quantum each turn; 2000 = turns take twice that,
	 * each actor gets half what it asks for; below 1000 = slack.  An
	 * average over the last 8 turns; it decays while no actor is ready.
	 * 0 on an executor that never ran an actor.  In cbcmn_stats.total:
	 * the largest. */
	uint64_t actor_load_milli;
	/* Actors it handed over to a less loaded executor (docs/ACTORS.md,
	 * "Migration"). */
	uint64_t actor_migrations;
	/* Restarts (cbcmn_actor.h, supervisors) done by the supervisors that
	 * ran on it: one per crash, however many children it restarts. */
	uint64_t actor_restarts;
	/* Mailbox back-pressure (cbcmn_actor.h): sends from this executor
	 * that waited for room in a full mailbox, or were refused for it
	 * (-EAGAIN, -ETIMEDOUT, -EDEADLK).  Threads outside the runtime count in
	 * cbcmn_stats.ext_actor_backpressure. */
	uint64_t actor_backpressure;
	/* The depth of the mailbox each receive on this executor found
	 * (messages in it, the one taken included; a message handed to a
	 * waiting receiver counts 1; DOWN and EXIT messages not sampled), as
	 * a log2 histogram since the runtime started: slot i counts depths
	 * in [2^i, 2^(i+1)), slot 0 also 0, the last slot everything above.
	 * Readers take differences of two snapshots for an interval. */
	uint64_t mailbox_depth_hist[CBCMN_MAILBOX_HIST_SLOTS];
	/* The 99th percentile of that histogram, as the upper bound of the
	 * slot it falls in (2^(i+1) - 1: "at most"), 0 when there was no
	 * receive.  In cbcmn_stats.total: of the summed histogram. */
	uint64_t mailbox_depth_p99;
} cbcmn_executor_stats;

/* What an executor is doing (cbcmn_executor_stats.state). */
typedef enum cbcmn_exec_state {
	CBCMN_EXEC_STOPPED = 0,   /* no thread: not started yet, or retired */
	CBCMN_EXEC_RUNNING,       /* running tasks */
	CBCMN_EXEC_SEARCHING,     /* out of local work: polling, stealing, spinning */
	CBCMN_EXEC_PARKED,        /* asleep in its ring until a doorbell, a completion or a timer */
} cbcmn_exec_state;

typedef struct cbcmn_stats {
	uint32_t executors;
	uint64_t tasks_spawned;   /* since the runtime started */
	uint64_t tasks_completed;
	uint64_t tasks_live;      /* spawned and not yet ended */
	cbcmn_executor_stats total; /* sum over executors */
	double local_hit_ratio;   /* (local_hits + inline_runs) / the same + inject_hits +
				   * tasks_stolen: the share of work found at home */
	double steal_success_rate; /* steal_successes / steal_attempts */
	uint64_t ext_doorbells;   /* doorbells rung by threads outside the runtime */
	uint32_t ring_setup_flags; /* IORING_SETUP_* the rings were created with */
	bool msg_ring;            /* doorbells are MSG_RING (else eventfd) */
	bool oversubscribed;      /* more executors than allowed CPUs: some share one */
	uint32_t executors_live;  /* executors running now: [0, executors_live) */
	uint64_t executor_starts; /* executors started after the runtime (min_workers) */
	uint64_t executor_retires; /* executors that ended for being idle */
	int32_t policy;           /* the cbcmn_policy applied, or CBCMN_PIN_NONE */
	uint64_t uptime_ns;       /* since the runtime was created */
	int32_t pid;              /* the process the runtime lives in */
	/* The I/O backend the runtime runs on: CBCMN_BACKEND_IO_URING or
	 * CBCMN_BACKEND_EPOLL (cbcmn_config.backend; cbcmn_backend_name()). */
	uint32_t backend;
	/* The runtime's number in its process (1, 2, ...; 0 from a runtime
	 * whose libcbcmn predates it): the last argument of its USDT probes
	 * (docs/PROBES.md), how cbcmn-top and cbcmn-stat keep two runtimes
	 * of one process apart. */
	uint32_t runtime_id;
	/* Mailbox back-pressure of threads outside the runtime
	 * (cbcmn_executor_stats.actor_backpressure); not in total. */
	uint64_t ext_actor_backpressure;
} cbcmn_stats;

/* Take a snapshot.  per may be NULL only with nper 0; otherwise it
 * receives min(nper, executors) entries.  Returns 0, or -EINVAL (NULL rt
 * or out, or NULL per with nper > 0). */
CBCMN_API int cbcmn_stats_snapshot(const cbcmn_runtime *rt, cbcmn_stats *out,
				   cbcmn_executor_stats *per, uint32_t nper);

/* ------------------------------------------------------------------------
 * Diagnostics: what the runtime holds right now (seed 000)
 *
 * cbcmn_runtime_snapshot() fills a caller-provided, versioned struct with
 * the runtime's tasks by state, its open nurseries and its outstanding
 * obligations, per executor and in total.  Any thread may call it, inside
 * or outside the runtime, while the runtime runs; it takes no lock and
 * stops nobody (each figure is a few atomic loads, docs/OBSERVABILITY.md).
 *
 * Exact and approximate.  Every figure is exact while nothing moves (every
 * task blocked, parked or ended, no call in progress), which is when tests
 * and quiescence checks look.  While tasks run, each figure is a value it
 * had during the call, not all at one instant: a task caught between two
 * states may be counted in both or in neither.  A blocked task is counted
 * on the executor it blocked on, from the moment its fiber is off the CPU
 * until its waker makes it runnable; a nursery on the executor where it was
 * opened; an obligation on the executor where it was reserved.
 */
#define CBCMN_SNAPSHOT_VERSION 1
/* Versioning rule (ABI): a later version only appends fields to
 * cbcmn_snapshot and cbcmn_exec_snapshot, bumps CBCMN_SNAPSHOT_VERSION, and
 * its library keeps accepting every earlier version with that version's
 * size, filling that version's layout only (per[] strided by that
 * version's cbcmn_exec_snapshot).  A version or size it does not know is
 * -EINVAL, never a write past the caller's struct. */

/* One executor's share (or the totals, cbcmn_snapshot.total). */
typedef struct cbcmn_exec_snapshot {
	uint32_t state;        /* cbcmn_exec_state; in the totals: executors running */
	uint32_t running;      /* tasks on the CPU: 0 or 1 per executor */
	/* Runnable: per executor, the tasks queued on its deque and next-task
	 * slot (sampled).  In the totals: tasks_live - running - every blocked
	 * and parked one, which includes the inject queue, the yield lists,
	 * the pinned queues and tasks handed between executors. */
	uint64_t runnable;
	uint64_t blocked_io;       /* in an I/O call, a stream or an acceptor */
	uint64_t blocked_timer;    /* in cbcmn_sleep */
	uint64_t blocked_chan;     /* in a channel send, receive or reservation */
	uint64_t blocked_join;     /* in cbcmn_task_join or await_all, or running
				    * a child inline on their stack meanwhile */
	uint64_t blocked_blocking; /* waiting for a cbcmn_blocking() call */
	uint64_t blocked_other;    /* waiting for anything else (0 today) */
	uint64_t parked;           /* BudgetExhausted: waiting for a recharge */
	uint64_t nurseries_open;   /* opened and not yet awaited to the end */
	uint64_t obligations;      /* outstanding: channel permits and general
				    * obligations reserved and not resolved */
} cbcmn_exec_snapshot;

typedef struct cbcmn_snapshot {
	/* Set by the caller: sizeof(cbcmn_snapshot) and
	 * CBCMN_SNAPSHOT_VERSION (anything else: -EINVAL). */
	uint32_t size;
	uint32_t version;
	/* Filled in: */
	uint32_t executors;        /* the runtime's; per[] got min(nper, this) */
	uint32_t executors_live;   /* with a thread now */
	uint64_t tasks_live;       /* spawned and not yet ended (cbcmn_stats) */
	cbcmn_exec_snapshot total; /* the sum; threads outside the runtime's
				    * nurseries and obligations included */
	uint64_t nurseries_cancelled; /* open nurseries that were cancelled */
	uint64_t obligations_leaked;  /* since the runtime started: obligations
				       * whose owner ended without resolving them
				       * (cbcmn_config.obligation_leak) */
	bool quiescent;            /* what cbcmn_runtime_is_quiescent() says */
} cbcmn_snapshot;

/* Fill *out (out->size and out->version set by the caller) and, if per is
 * not NULL, min(nper, executors) entries of per[].  Returns 0, or -EINVAL
 * (NULL rt or out, nper > 0 with per NULL, a size or version this library
 * does not know; *out is left untouched).  Any thread, any time while rt
 * exists. */
CBCMN_API int cbcmn_runtime_snapshot(const cbcmn_runtime *rt, cbcmn_snapshot *out,
				     cbcmn_exec_snapshot *per, uint32_t nper);

/* Is the runtime at rest?  Quiescent means (seed 000's quiescence check
 * reads tasks, regions and obligations): no task live (none runnable,
 * running or blocked, so no I/O of a task in flight and nothing that a
 * timer will wake), no nursery open, no obligation outstanding, no
 * blocking-pool job and no stream or acceptor open.  A runtime whose tasks
 * are all blocked is idle, not quiescent: a timer, I/O or an outside
 * thread may wake them (the snapshot shows that case as runnable +
 * running == 0).  Quiescent is what cbcmn_runtime_destroy() needs, and it
 * stays true until someone outside spawns or reserves again.  No false
 * "true": every count reads ends before beginnings, tasks last, so when it
 * says 1 nothing was open as the call ended, unless a thread outside the
 * runtime began something during the call (a task can begin nothing that
 * outlives it but a stream).  Any thread.  Returns 1, 0, or -EINVAL for
 * NULL. */
CBCMN_API int cbcmn_runtime_is_quiescent(const cbcmn_runtime *rt);

/* ------------------------------------------------------------------------
 * Tracing: what each executor did, event by event (docs/TRACE.md)
 *
 * With cbcmn_config.trace_events, every executor records its events in a
 * ring of its own (lock-free, one writer: the executor); a full ring drops
 * the new event and counts it, and never waits.  cbcmn_trace_drain() takes
 * them out; cbcmn-run --trace writes them as a Chrome JSON trace.
 * CBCMN_TRACE_EVENTS=N in the environment at cbcmn_runtime_create() puts
 * rings of N records (or trace_events, if larger) in a shared memfd
 * ("cbcmn-trace") that cbcmn-top --record drains from another process;
 * each event is then taken by one consumer only.  "N:lazy" records only
 * while such a recorder is attached.  A value that is not a number up to
 * 1 << 24 (optionally with ":lazy") fails the create with -EINVAL (one
 * line on stderr).
 */
typedef enum cbcmn_trace_kind {
	CBCMN_TRACE_TASK = 1,        /* a task ran from ts_ns for dur_ns; arg: its id */
	CBCMN_TRACE_PARK = 2,        /* the executor slept from ts_ns for dur_ns; arg: 1
				      * notified, 0 timed out */
	CBCMN_TRACE_STEAL = 3,       /* it stole arg tasks from executor peer */
	CBCMN_TRACE_DOORBELL = 4,    /* it rang executor peer's doorbell; arg: 0 MSG_RING,
				      * 1 eventfd */
	CBCMN_TRACE_IO_SUBMIT = 5,   /* it submitted arg SQEs to its ring */
	CBCMN_TRACE_IO_COMPLETE = 6, /* it reaped arg CQEs from its ring */
	CBCMN_TRACE_IO = 7,          /* a task's fiber I/O call (cbcmn_io.h), from its
				      * submission at ts_ns for dur_ns until its result, on
				      * the executor it ended on; arg: the io_uring opcode
				      * (IORING_OP_*, also on the epoll backend) */
	CBCMN_TRACE_ACTOR_SEND = 8,  /* a message entered actor arg's mailbox (cbcmn_actor.h),
				      * sent from a task on this executor; dur_ns: the
				      * sender's reference (0: not an actor), not a time;
				      * peer: the message's number in that mailbox (its
				      * low 32 bits), which its receive repeats */
	CBCMN_TRACE_ACTOR_RECEIVE = 9, /* actor arg took its message number peer (as
				      * above) on this executor; dur_ns: the message's
				      * type, not a time */
} cbcmn_trace_kind;

typedef struct cbcmn_trace_event {
	uint64_t ts_ns;    /* CLOCK_MONOTONIC: the start of a slice, else when */
	uint64_t dur_ns;   /* TASK, PARK and IO; ACTOR_*: see there; 0 for the others */
	uint64_t arg;      /* see cbcmn_trace_kind */
	uint32_t executor; /* whose event */
	uint32_t peer;     /* STEAL: the victim; DOORBELL: the target; ACTOR_*: the
			    * message's number; else 0 */
	uint32_t kind;     /* cbcmn_trace_kind */
	uint32_t reserved;
} cbcmn_trace_event;

/* Move up to n recorded events into out[] (oldest first per executor;
 * executors one after the other) and, if dropped is not NULL, store the
 * events every ring has dropped so far (full).  Returns how many (0: none
 * waiting), or -EINVAL (NULL rt, NULL out with n > 0), -EOPNOTSUPP (the
 * runtime was created without trace_events), -EBUSY (another drain of rt
 * is under way: one at a time), CBCMN_EFORKED (in a child forked after
 * create: its rings are copies of the parent's, whose events the
 * parent's drain takes).  Any thread, while rt exists; it takes no
 * lock and stops no executor.  The events of a slice under way (a task
 * running, an executor asleep) come once it has ended. */
CBCMN_API int cbcmn_trace_drain(cbcmn_runtime *rt, cbcmn_trace_event *out, uint32_t n,
				uint64_t *dropped);

/* ------------------------------------------------------------------------
 * Watching a runtime from another process
 *
 * Every runtime keeps its statistics in a shared memory segment (a memfd
 * named "cbcmn-stats", one descriptor for the runtime's life).  A process
 * allowed to ptrace-read the target (the same user, or root) maps it and
 * reads the same figures cbcmn_stats_snapshot() gives, live, at no cost to
 * the target: this is what cbcmn-top and cbcmn-stat show.  docs/OBSERVABILITY.md.
 */
typedef struct cbcmn_watch cbcmn_watch;

/* Watch the index-th runtime alive in process pid (0: the oldest; pid may
 * be getpid()).  The target's segment is not trusted: its geometry is
 * checked once and kept, and a segment that is not sealed against
 * resizing is refused, so a target cannot make the watcher fault.
 * Returns 0 and *out, or -ESRCH (no such process, or it exited meanwhile),
 * -ENOENT (it has no such runtime, or only corrupt segments), -EACCES (not
 * allowed to look at it), -EPROTO (its libcbcmn keeps another layout, or
 * an unsealed segment), -ENOSYS (a kernel without pidfd_open, before
 * 5.3), -EMFILE/-ENFILE (out of descriptors), -EINVAL, -ENOMEM. */
CBCMN_API int cbcmn_watch_open(int32_t pid, uint32_t index, cbcmn_watch **out);

/* Read the runtime's statistics as cbcmn_stats_snapshot() would (per may
 * be NULL only with nper 0, or gets min(nper, executors) entries;
 * queue_depth is sampled by each executor as it goes).  Returns 0, or
 * -ESRCH once the runtime has been destroyed or its process has exited or
 * exec'd (no longer holds the runtime's segment; out then holds the last
 * figures), or -EINVAL (NULL w or out, or NULL per with nper > 0). */
CBCMN_API int cbcmn_watch_read(cbcmn_watch *w, cbcmn_stats *out, cbcmn_executor_stats *per,
			       uint32_t nper);

/* Stop watching.  NULL is fine. */
CBCMN_API void cbcmn_watch_close(cbcmn_watch *w);

#ifdef __cplusplus
}
#endif

#include "cbcmn_chan.h" /* channels and obligations */
#include "cbcmn_io.h"   /* fiber I/O on the executor rings, the blocking pool */
#include "cbcmn_metrics.h" /* statistics as Prometheus text, the scrape endpoint */

#endif /* CBCMN_H */
