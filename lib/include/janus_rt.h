/* janus_rt.h: the frozen janus C ABI (SPEC-021 §2.6, §3.4-3.6, §11.1, §12.1,
 * §14.1).
 *
 * These exports are what compiled Janus code links against; they are a thin
 * adapter over the native cbcmn API (cbcmn.h).  The ABI is frozen: calls and
 * types are added, never changed, without a major version bump.  "The
 * current nursery" is a stack per calling context: per thread for code
 * outside the runtime, per task inside it (a task may move between threads,
 * so a thread-local stack would be wrong there).
 *
 * Results of janus_nursery_await_all() (SPEC-021 §3.6, frozen; the rules
 * below keep every row unambiguous, docs/ERRORS.md):
 *     0   success            every child returned >= 0
 *    -1   cancelled          the nursery was cancelled, and no child failed
 *                            (a failure wins: docs/ERRORS.md)
 *    -2   panic              a child overflowed its stack
 *    -3   budget exceeded    a child ran out of budget and was ended
 *    -4   pending            never returned: awaitAll waits for every child
 *   other negative           child_failed: the first failing child's own
 *                            code c, except that a c in -1..-4, which would
 *                            read as a row above, is reported as
 *                            JANUS_CHILD_ESCAPE + c (JANUS_CHILD_CODE()
 *                            gives c back)
 *   JANUS_NO_NURSERY         there was no current nursery to await (a
 *                            compile error in Janus, SPEC-021 §14.1
 *                            NurseryNotActive; hostile C only)
 * A child returning the value of a native verdict (CBCMN_ECANCELED -125,
 * CBCMN_EPANIC, CBCMN_EBUDGET) has failed like any other child: it cancels
 * its siblings (fail fast) and comes back as its own code, not -1/-2/-3.
 * A child's c in the reserved block [JANUS_CHILD_ESCAPE - 4102,
 * JANUS_CHILD_ESCAPE] (no 32-bit task can return one) is reported as
 * JANUS_CHILD_UNREPRESENTABLE.
 */
#ifndef JANUS_RT_H
#define JANUS_RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JANUS_API __attribute__((visibility("default")))

enum {
	JANUS_OK = 0,
	JANUS_CANCELLED = -1,
	JANUS_PANIC = -2,
	JANUS_BUDGET_EXCEEDED = -3,
	JANUS_PENDING = -4,
};

/* child_failed codes that would collide with the table (SPEC-021 §3.6):
 * a child's own c in -1..-4 is reported as JANUS_CHILD_ESCAPE + c.  The
 * block [JANUS_CHILD_ESCAPE - 4102, JANUS_CHILD_ESCAPE] is reserved: no
 * child code is reported inside it except the four escaped ones, and
 * JANUS_NO_NURSERY is its top. */
#define JANUS_CHILD_ESCAPE (-(1L << 32))
#define JANUS_NO_NURSERY JANUS_CHILD_ESCAPE
#define JANUS_CHILD_UNREPRESENTABLE (JANUS_CHILD_ESCAPE - 4103)
/* True for an await result that is a child's failure code. */
#define JANUS_IS_CHILD_FAILURE(r) ((r) < JANUS_PENDING && (r) != JANUS_NO_NURSERY)
/* The child's own code of a child_failed result r. */
#define JANUS_CHILD_CODE(r)                                                    \
	((r) >= JANUS_CHILD_ESCAPE + JANUS_PENDING && (r) < JANUS_CHILD_ESCAPE \
		 ? (r) - JANUS_CHILD_ESCAPE                                    \
		 : (r))

/* The scheduler's task types (SPEC-021 §3.4.2), and the 32-bit C form the
 * adapter widens (§3.4.3).  A task's result: >= 0 success, < 0 its failure
 * code (see the table above for how -1..-4 are kept apart). */
typedef int64_t (*TaskFn)(void *arg);
typedef int64_t (*NoArgTaskFn)(void);
typedef int32_t (*TaskFnI32)(void *arg);

/* A runtime the janus ABI creates from a RuntimeConfig (janus_rt_init(),
 * the global runtime janus_nursery_create() makes when there is none,
 * janus_scheduler_create()) has SPEC-021's :service profile (§10.2.2), as
 * RuntimeConfigEx's default does: tasks get the finite default budgets
 * (docs/BUDGETS.md), a child starts with spawn_count 0 and spawns only
 * when granted (§8.2: janus_nursery_spawn() returns -1 at once), and no
 * task holds CapBudget (janus_budget_recharge() returns -1).  Another
 * profile or other budgets: RuntimeConfigEx. */
typedef struct RuntimeConfig {
	uint32_t worker_count;       /* 0: one per CPU in the affinity mask */
	uint64_t deterministic_seed; /* victim-choice seed; 0: the default */
} RuntimeConfig;

typedef RuntimeConfig SchedulerConfig;

typedef struct Runtime Runtime;

/* SPEC-021 §5.1.1.  cbcmn counts in 64 bits: values read through this ABI
 * saturate at each field's maximum, which is also how "unlimited" reads. */
typedef struct Budget {
	uint32_t ops;
	size_t memory;
	uint16_t spawn_count;
	uint16_t channel_ops;
	uint16_t syscalls;
} Budget;

/* SPEC-021 §10 profiles (the values of cbcmn_profile). */
enum {
	JANUS_PROFILE_SERVICE = 0,   /* implicit capabilities, default budgets */
	JANUS_PROFILE_CLUSTER = 1,   /* supervisors (any ancestor) recharge */
	JANUS_PROFILE_SOVEREIGN = 2, /* nothing implicit: caps as given */
	JANUS_PROFILE_CORE = 3,      /* no scheduler: no nursery opens */
};

/* Capabilities (SPEC-021 §1.1.2; the values of CBCMN_CAP_*). */
#define JANUS_CAP_SPAWN 0x1u
#define JANUS_CAP_BUDGET 0x2u
/* Take caps literally, even 0 (else 0 means the profile's). */
#define JANUS_CAPS_EXPLICIT 0x80000000u

/* The runtime configuration that RuntimeConfig (frozen, passed by value)
 * cannot carry: profile, budgets and capabilities.  Versioned by size: set
 * size = sizeof(RuntimeConfigEx) and leave what you do not choose zero
 * (JANUS_RUNTIME_CONFIG_EX_INIT).  A size below JANUS_RUNTIME_CONFIG_EX_SIZE_V1
 * is refused (-EINVAL); fields past size take their defaults; bytes past
 * the fields this library knows must be zero (-E2BIG otherwise, as a newer
 * caller asking for something this library cannot do), and size may not
 * exceed 4096 (-E2BIG).  New fields go at the end.
 *
 * Budget fields: 0 is the runtime's default for that component
 * (docs/BUDGETS.md), the field's maximum (UINT32_MAX, SIZE_MAX,
 * UINT16_MAX) is unlimited, anything else that many. */
typedef struct RuntimeConfigEx {
	uint32_t size;               /* sizeof(RuntimeConfigEx) of the caller */
	uint32_t worker_count;       /* 0: one per CPU in the affinity mask */
	uint64_t deterministic_seed; /* victim-choice seed; 0: the default */
	uint32_t profile;            /* JANUS_PROFILE_*; 0: service */
	uint32_t caps;               /* JANUS_CAP_* of a root task (and
				      * JANUS_CAPS_EXPLICIT); 0: the profile's */
	Budget cap_limit;            /* CapBudget: how much self-recharge */
	Budget budget;               /* a root task's budget */
	Budget child_budget;         /* what a child asks of its spawner */
	uint32_t yield_interval;     /* checkpoints between fairness yields;
				      * 0: the profile's (sovereign: needed) */
	uint32_t reserved;           /* must be 0 */
} RuntimeConfigEx;

typedef RuntimeConfigEx SchedulerConfigEx;

#define JANUS_RUNTIME_CONFIG_EX_SIZE_V1 104u
/* Every field spelled out: C++ -Wextra warns about designated ones left out. */
#define JANUS_RUNTIME_CONFIG_EX_INIT                                           \
	{(uint32_t)sizeof(RuntimeConfigEx), 0, 0, 0, 0, {0, 0, 0, 0, 0},       \
	 {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}, 0, 0}

/* Create the global runtime (the one global, SPEC-021 §2.2).  A second call
 * while it exists does nothing.  On failure janus_rt_get() stays NULL. */
JANUS_API void janus_rt_init(RuntimeConfig config);
/* Wait for the global runtime's tasks to end, then destroy it.  The
 * calling thread's nurseries on it that are still open are awaited and
 * popped first; another thread's are waited for until that thread awaits
 * them or ends, so a thread that never does keeps the shutdown waiting,
 * as a task that never ends does (a cbcmn_blocking() function leaving one
 * open on the runtime's own pool thread: for ever).  Called by one of the
 * global runtime's own tasks, or by a function one of them runs on its
 * blocking pool (cbcmn_blocking), it does nothing: a task cannot wait for
 * its own end (the runtime stays global, for a thread to shut down). */
JANUS_API void janus_rt_shutdown(void);
/* The global runtime, or NULL. */
JANUS_API Runtime *janus_rt_get(void);
/* janus_rt_init() with a profile, budgets and capabilities.  Returns 0,
 * -EEXIST while the global runtime exists (nothing changes), -EINVAL (NULL,
 * size too small, a bad field), -E2BIG (see RuntimeConfigEx), or the
 * runtime's create error. */
JANUS_API int janus_rt_init_ex(const RuntimeConfigEx *config);

/* Open a nursery and make it the current one: inside a task on the task's
 * own runtime (global or isolated), outside on the global runtime (created
 * with defaults if needed).  NULL on failure (the core profile: always).
 * A thread that ends (pthread_exit, its start function's return) with
 * nurseries open awaits them as it ends, their results unread, and that
 * is no error (the main thread's exit() does not await them).  A task
 * that returns with some open has leaked them: they are cancelled, then
 * awaited, a line naming the task goes to stderr, and the task fails
 * with CBCMN_ELEAKED (-4104, what its nursery's await_all reports, or an
 * actor's DOWN) unless it had failed already (its own code wins).  A
 * task ended by the runtime (a panic, its budget, a cancellation at a
 * check) has its open nurseries cancelled and awaited without that. */
JANUS_API void *janus_nursery_create(void);
/* Spawn fn(arg) into the current nursery: 0, or -1 on any failure: no
 * current nursery (SPEC-021 §14.1 NurseryNotActive), NULL fn, the nursery
 * awaited or cancelled, no CapSpawn, or (§14.1 SpawnBudgetExhausted,
 * "recharge or fail") a spawner that cannot pay the spawn's op and
 * spawn_count now.  Never waits (§3.5 "no blocking"): budget owed to the
 * spawner (its children's leftovers, recharges) and its own CapBudget are
 * used first, as janus_budget_recharge would; otherwise -1 at once, and the
 * spawner may recharge and try again.  The op may end the countdown to a
 * fairness yield (§4.1.1), which costs nothing and returns. */
JANUS_API int janus_nursery_spawn(TaskFn fn, void *arg);
/* The same for the other task forms (SPEC-021 §3.4): fn() with no
 * argument; fn(arg) returning int32_t, widened to int64_t. */
JANUS_API int janus_nursery_spawn_noarg(NoArgTaskFn fn);
JANUS_API int janus_nursery_spawn_i32(TaskFnI32 fn, void *arg);
/* Pop the current nursery, wait for its children, free it; see the table.
 * With no current nursery: JANUS_NO_NURSERY (never -4: that is pending). */
JANUS_API long janus_nursery_await_all(void);

/* An isolated runtime, independent of the global one (SPEC-021 §2.2.3).
 * NULL on failure. */
JANUS_API void *janus_scheduler_create(SchedulerConfig config);
/* The same with a profile, budgets and capabilities (RuntimeConfigEx).
 * NULL on failure.  Both set errno on failure: what janus_rt_init_ex would
 * return, negated, when that is an errno; for a CBCMN_E* code, which is
 * none, ENOMEM for CBCMN_EMEMLOCK (the io_uring rings do not fit in
 * RLIMIT_MEMLOCK: raise it or grant CAP_IPC_LOCK; io_uring_setup's own
 * errno for it) and EINVAL for any other. */
JANUS_API void *janus_scheduler_create_ex(const SchedulerConfigEx *config);
/* The calling thread's last failed janus_scheduler_create(_ex) error as
 * janus_rt_init_ex would return it: a negative errno or a CBCMN_E* code
 * (CBCMN_EMEMLOCK -4106); 0 while none has failed on this thread. */
JANUS_API int janus_scheduler_create_error(void);
/* Open a nursery on scheduler, from a thread outside it, and make it the
 * thread's current nursery: janus_nursery_spawn() and
 * janus_nursery_await_all() then work on it as on the global runtime's.
 * Inside a task, janus_nursery_create() opens on the task's own runtime.
 * NULL on failure (NULL scheduler, one already shut down or never made by
 * janus_scheduler_create(_ex) nor janus_rt_get(), one of its tasks
 * calling: use janus_nursery_create(), the core profile). */
JANUS_API void *janus_scheduler_nursery_create(void *scheduler);
/* Wait for its tasks to end, then destroy it; the calling thread's open
 * nurseries on it as janus_rt_shutdown().  The global runtime
 * (janus_rt_get()) is shut down as by janus_rt_shutdown(); one of the
 * scheduler's own tasks (or its blocking pool) calling does nothing, as
 * there, and so does a scheduler already shut down (a second shutdown) or
 * a pointer that is none.  A handle is its scheduler's address: once it
 * is shut down a later create may return the same address, and the old
 * handle then names the new scheduler (drop a handle at its shutdown). */
JANUS_API void janus_scheduler_shutdown(void *scheduler);
/* Spawn func(arg) (a TaskFn) into the current nursery: 0 or -1. */
JANUS_API int janus_scheduler_spawn(void *func, void *arg);
/* Yield the calling task: 0, or -1 if it has been cancelled.  Outside a
 * task it yields the thread's CPU and returns 0. */
JANUS_API int janus_scheduler_yield(void);

/* SPEC-021 §11.1 Budget_Check and Budget_Decrement, for a compiler to emit
 * (the C form of §4.1.2's yield check; CBCMN_CHECKPOINT() is the native
 * one).  Outside a task (a plain thread, a blocking-pool thread) both do
 * nothing.
 *
 * janus_budget_decrement(cost): take cost ops from the calling task's
 * budget, down to zero.  Never yields, waits or ends the task: it only
 * subtracts, so it may be emitted anywhere.
 *
 * janus_budget_check(): the yield point.  Costs one op (§3.3.1 "loop
 * iteration"); when yield_interval ops have been spent since the last
 * fairness yield the task yields (free, §4.2.2); when its ops are exhausted
 * and its own CapBudget cannot refill them, it is ended there at once
 * (nobody holds a handle to recharge a task of this ABI) and the
 * nursery's await reports -3; only while a child it paid for still runs
 * (and may give some back) does it wait, BudgetExhausted (§5.2.2).  A task
 * whose nursery (or an enclosing one) is cancelled ends here: -1.  Such an
 * end unwinds the task's frames as longjmp does (docs/ERRORS.md).
 *
 * A loop must reach janus_budget_check() to be stopped or to be fair: a
 * loop with only decrements runs until it returns. */
JANUS_API void janus_budget_check(void);
JANUS_API void janus_budget_decrement(uint32_t cost);

/* The calling task's remaining budget (all zero outside a task). */
JANUS_API Budget janus_budget_get_current(void);
/* Recharge the calling task by amount from its CapBudget limit
 * (SPEC-021 §3.2.3): 0, or -1 outside a task, without CapBudget, or beyond
 * its limit (then nothing changes). */
JANUS_API int janus_budget_recharge(Budget amount);

#ifdef __cplusplus
}
#endif

#endif /* JANUS_RT_H */
