/* janus_rt.c: the frozen janus_* C ABI as a thin adapter over cbcmn.h.
 *
 * The only global (GLOBAL_RT) and the only thread-local nursery stack of the
 * project live here, as SPEC-021 §2.2 and §3.3 require; the scheduler never
 * sees either.  Inside a task the nursery stack hangs off the task (its
 * abi_slot) instead, because tasks migrate between threads.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "janus_rt.h"
#include "lock.h"
#include "runtime.h"

/* SPEC-021 §3.2: the adapter holds the nursery and nothing else but the
 * link that makes the per-context stack. */
typedef struct RtNursery {
	cbcmn_nursery *nursery;
	struct RtNursery *below;
} RtNursery;

static _Atomic(struct cbcmn_runtime *) GLOBAL_RT;
static struct cbcmn__mutex global_lock = {
	.m = PTHREAD_MUTEX_INITIALIZER, .name = "janus_rt", .rank = CBCMN__LOCK_RUNTIME_JANUS};
static __thread RtNursery *thread_top;

/* The task calling us, if the caller runs on one of rt's executors. */
static struct cbcmn_task *current_task(void)
{
	struct cbcmn__exec *e = cbcmn__tls_exec;
	return e ? e->current : NULL;
}

static RtNursery **top_slot(struct cbcmn_task *self)
{
	return self ? (RtNursery **)&self->abi_slot : &thread_top;
}

/* A task ended with janus nurseries on its stack (it was ended by a panic
 * or its budget, or returned without awaiting): the native nurseries are
 * already awaited (sched.c); free their wrappers. */
void cbcmn__abi_slot_release(struct cbcmn_task *t)
{
	RtNursery *rn = t->abi_slot;
	while (rn) {
		RtNursery *below = rn->below;
		free(rn);
		rn = below;
	}
	t->abi_slot = NULL;
}

static struct cbcmn_runtime *rt_create(const RuntimeConfig *c)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = c->worker_count ? c->worker_count : CBCMN_WORKERS_AUTO;
	if (c->deterministic_seed)
		cfg.seed = c->deterministic_seed;
	cbcmn_runtime *rt;
	return cbcmn_runtime_create(&cfg, &rt) == 0 ? rt : NULL;
}

/* void-returning shutdowns cannot say "busy": wait for the tasks. */
static void rt_destroy_wait(struct cbcmn_runtime *rt)
{
	struct timespec ms = {.tv_nsec = 1000000};
	while (cbcmn__runtime_destroy(rt, true) == -EBUSY)
		nanosleep(&ms, NULL);
}

/* janus_rt_init() with a full native configuration (embedders, tests).
 * Returns 0, -EEXIST when the global runtime exists, or the create error. */
int janus__rt_init_config(const cbcmn_config *cfg)
{
	int rc = -EEXIST;
	cbcmn__mutex_lock(&global_lock);
	if (!atomic_load_explicit(&GLOBAL_RT, memory_order_relaxed)) {
		cbcmn_runtime *rt;
		rc = cbcmn_runtime_create(cfg, &rt);
		if (rc == 0)
			atomic_store_explicit(&GLOBAL_RT, rt, memory_order_release);
	}
	cbcmn__mutex_unlock(&global_lock);
	return rc;
}

void janus_rt_init(RuntimeConfig config)
{
	cbcmn__mutex_lock(&global_lock);
	if (!atomic_load_explicit(&GLOBAL_RT, memory_order_relaxed))
		atomic_store_explicit(&GLOBAL_RT, rt_create(&config), memory_order_release);
	cbcmn__mutex_unlock(&global_lock);
}

void janus_rt_shutdown(void)
{
	cbcmn__mutex_lock(&global_lock);
	struct cbcmn_runtime *rt = atomic_exchange_explicit(&GLOBAL_RT, NULL, memory_order_acq_rel);
	cbcmn__mutex_unlock(&global_lock);
	if (rt)
		rt_destroy_wait(rt);
}

Runtime *janus_rt_get(void)
{
	return (Runtime *)atomic_load_explicit(&GLOBAL_RT, memory_order_acquire);
}

void *janus_nursery_create(void)
{
	struct cbcmn_runtime *rt = atomic_load_explicit(&GLOBAL_RT, memory_order_acquire);
	if (!rt) {
		janus_rt_init((RuntimeConfig){0});
		rt = atomic_load_explicit(&GLOBAL_RT, memory_order_acquire);
		if (!rt)
			return NULL;
	}
	struct cbcmn_task *self = current_task();
	if (self && self->rt != rt)
		return NULL; /* a task of an isolated runtime: no global nursery */
	RtNursery *rn = malloc(sizeof(*rn));
	if (!rn)
		return NULL;
	if (cbcmn_nursery_open(rt, (cbcmn_cx *)self, &rn->nursery) != 0) {
		free(rn);
		return NULL;
	}
	RtNursery **top = top_slot(self);
	rn->below = *top;
	*top = rn;
	return rn;
}

int janus_nursery_spawn(TaskFn fn, void *arg)
{
	struct cbcmn_task *self = current_task();
	RtNursery *rn = *top_slot(self);
	if (!rn || !fn)
		return -1;
	return cbcmn__spawn(self, rn->nursery, CBCMN__TF_ABI, (void *)fn, arg, NULL, NULL) == 0 ? 0 : -1;
}

/* SPEC-021 §3.6, frozen. */
static long janus_result(int64_t r)
{
	if (r >= 0)
		return JANUS_OK;
	switch (r) {
	case CBCMN_ECANCELED:
		return JANUS_CANCELLED;
	case CBCMN_EPANIC:
		return JANUS_PANIC;
	case CBCMN_EBUDGET:
		return JANUS_BUDGET_EXCEEDED;
	default:
		return (long)r; /* child_failed: the child's own code */
	}
}

long janus_nursery_await_all(void)
{
	struct cbcmn_task *self = current_task();
	RtNursery **top = top_slot(self);
	RtNursery *rn = *top;
	if (!rn)
		return JANUS_PENDING;
	*top = rn->below;
	int64_t r = cbcmn_nursery_await_all((cbcmn_cx *)self, rn->nursery);
	free(rn);
	return janus_result(r);
}

void *janus_scheduler_create(SchedulerConfig config)
{
	return rt_create(&config);
}

void janus_scheduler_shutdown(void *scheduler)
{
	if (scheduler)
		rt_destroy_wait(scheduler);
}

int janus_scheduler_spawn(void *func, void *arg)
{
	return janus_nursery_spawn((TaskFn)func, arg);
}

int janus_scheduler_yield(void)
{
	struct cbcmn_task *self = current_task();
	if (!self) {
		sched_yield();
		return 0;
	}
	return cbcmn_yield((cbcmn_cx *)self) == 0 ? 0 : -1;
}

static uint64_t sat(uint64_t v, uint64_t max)
{
	return v > max ? max : v;
}

Budget janus_budget_get_current(void)
{
	Budget out = {0};
	cbcmn_budget b;
	struct cbcmn_task *self = current_task();
	if (!self || cbcmn_budget_get((cbcmn_cx *)self, &b) != 0)
		return out;
	out.ops = (uint32_t)sat(b.ops, UINT32_MAX);
	out.memory = (size_t)sat(b.memory, SIZE_MAX);
	out.spawn_count = (uint16_t)sat(b.spawn_count, UINT16_MAX);
	out.channel_ops = (uint16_t)sat(b.channel_ops, UINT16_MAX);
	out.syscalls = (uint16_t)sat(b.syscalls, UINT16_MAX);
	return out;
}

int janus_budget_recharge(Budget amount)
{
	struct cbcmn_task *self = current_task();
	if (!self)
		return -1;
	cbcmn_budget b = {amount.ops, amount.memory, amount.spawn_count, amount.channel_ops,
			  amount.syscalls};
	return cbcmn_budget_recharge((cbcmn_cx *)self, NULL, &b) == 0 ? 0 : -1;
}
