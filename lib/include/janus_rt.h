/* janus_rt.h: the frozen janus C ABI (SPEC-021 §2.6, §3.5, §3.6, §12.1).
 *
 * These exports are what compiled Janus code links against; they are a thin
 * adapter over the native cbcmn API (cbcmn.h) and do not change without a
 * major version bump.  "The current nursery" is a stack per calling context:
 * per thread for code outside the runtime, per task inside it (a task may
 * move between threads, so a thread-local stack would be wrong there).
 *
 * Results of janus_nursery_await_all() (SPEC-021 §3.6, frozen):
 *     0   success            every child returned >= 0
 *    -1   cancelled          the nursery was cancelled, and no child failed
 *                            (a failure wins: docs/ERRORS.md)
 *    -2   panic              a child overflowed its stack
 *    -3   budget exceeded    a child ran out of budget
 *    -4   pending            nothing to await (no current nursery)
 *   other negative           the first failing child's own result
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

/* The scheduler's task type (SPEC-021 §3.4.2). */
typedef int64_t (*TaskFn)(void *arg);

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

/* Create the global runtime (the one global, SPEC-021 §2.2).  A second call
 * while it exists does nothing.  On failure janus_rt_get() stays NULL. */
JANUS_API void janus_rt_init(RuntimeConfig config);
/* Wait for the global runtime's tasks to end, then destroy it. */
JANUS_API void janus_rt_shutdown(void);
/* The global runtime, or NULL. */
JANUS_API Runtime *janus_rt_get(void);

/* Open a nursery on the global runtime (created with defaults if needed)
 * and make it the current one.  NULL on failure. */
JANUS_API void *janus_nursery_create(void);
/* Spawn fn(arg) into the current nursery: 0, or -1 on any failure. */
JANUS_API int janus_nursery_spawn(TaskFn fn, void *arg);
/* Pop the current nursery, wait for its children, free it; see the table. */
JANUS_API long janus_nursery_await_all(void);

/* An isolated runtime, independent of the global one (SPEC-021 §2.2.3).
 * NULL on failure. */
JANUS_API void *janus_scheduler_create(SchedulerConfig config);
/* Wait for its tasks to end, then destroy it. */
JANUS_API void janus_scheduler_shutdown(void *scheduler);
/* Spawn func(arg) (a TaskFn) into the current nursery: 0 or -1. */
JANUS_API int janus_scheduler_spawn(void *func, void *arg);
/* Yield the calling task: 0, or -1 if it has been cancelled.  Outside a
 * task it yields the thread's CPU and returns 0. */
JANUS_API int janus_scheduler_yield(void);

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
