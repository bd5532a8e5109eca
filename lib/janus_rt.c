/* janus_rt.c: the frozen janus_* C ABI as a thin adapter over cbcmn.h.
 *
 * The only global (GLOBAL_RT) and the only thread-local nursery stack of the
 * project live here, as SPEC-021 §2.2 and §3.3 require; the scheduler never
 * sees either.  Inside a task the nursery stack hangs off the task (its
 * abi_slot) instead, because tasks migrate between threads.
 */
#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
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

/* Held across a fork() (runtime.c's atfork handler, first of the
 * library's process-wide locks: the lowest rank), so that a child never
 * inherits it locked by a thread it does not have. */
void cbcmn__janus_fork_lock(bool lock)
{
	if (lock)
		cbcmn__mutex_lock(&global_lock);
	else
		cbcmn__mutex_unlock(&global_lock);
}

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

/* janus_rt.h states these values; the ABI must not drift from cbcmn.h. */
_Static_assert(sizeof(long) == sizeof(int64_t), "await_all's long carries child codes");
_Static_assert(JANUS_PROFILE_SERVICE == (int)CBCMN_PROFILE_SERVICE &&
		       JANUS_PROFILE_CLUSTER == (int)CBCMN_PROFILE_CLUSTER &&
		       JANUS_PROFILE_SOVEREIGN == (int)CBCMN_PROFILE_SOVEREIGN &&
		       JANUS_PROFILE_CORE == (int)CBCMN_PROFILE_CORE,
	       "janus profiles are cbcmn's");
_Static_assert(JANUS_CAP_SPAWN == CBCMN_CAP_SPAWN && JANUS_CAP_BUDGET == CBCMN_CAP_BUDGET &&
		       JANUS_CAPS_EXPLICIT == CBCMN_CAPS_EXPLICIT,
	       "janus capabilities are cbcmn's");
_Static_assert(JANUS_RUNTIME_CONFIG_EX_SIZE_V1 == offsetof(RuntimeConfigEx, reserved) + 4,
	       "version 1 of RuntimeConfigEx is frozen");
/* The escaped block holds every code the native layer gives a meaning of
 * its own (see abi_carry) below JANUS_CHILD_ESCAPE. */
_Static_assert(CBCMN_EBUDGET >= -4102 && CBCMN_EPANIC >= -4102 && CBCMN_ECANCELED >= -4102,
	       "the reserved block covers the native codes");

/* The frozen RuntimeConfig: defaults for all it cannot say.  The janus ABI
 * is SPEC-021's surface, so its default is the spec's :service profile
 * (§10.2.2: finite default budgets, children spawn only when granted,
 * §8.2), not cbcmn_config_init()'s native one: a program written from the
 * spec alone gets what the spec promises. */
static void config_from_frozen(const RuntimeConfig *c, cbcmn_config *cfg)
{
	cbcmn_config_init(cfg);
	cfg->profile = CBCMN_PROFILE_SERVICE;
	cfg->workers = c->worker_count ? c->worker_count : CBCMN_WORKERS_AUTO;
	if (c->deterministic_seed)
		cfg->seed = c->deterministic_seed;
}

/* A janus Budget in a configuration: 0 keeps the runtime's default, the
 * field's maximum is unlimited (as the ABI reads unlimited back). */
static void budget_in(uint64_t *dst, uint64_t v, uint64_t max)
{
	if (v == max)
		*dst = CBCMN_UNLIMITED;
	else if (v)
		*dst = v;
}

static void budget_from_janus(cbcmn_budget *dst, const Budget *b)
{
	budget_in(&dst->ops, b->ops, UINT32_MAX);
	budget_in(&dst->memory, b->memory, SIZE_MAX);
	budget_in(&dst->spawn_count, b->spawn_count, UINT16_MAX);
	budget_in(&dst->channel_ops, b->channel_ops, UINT16_MAX);
	budget_in(&dst->syscalls, b->syscalls, UINT16_MAX);
}

/* RuntimeConfigEx, versioned by size (janus_rt.h). */
#define CONFIG_EX_MAX 4096u

static int config_from_ex(const RuntimeConfigEx *caller, cbcmn_config *cfg)
{
	if (!caller || caller->size < JANUS_RUNTIME_CONFIG_EX_SIZE_V1)
		return -EINVAL;
	uint32_t size = caller->size;
	if (size > CONFIG_EX_MAX)
		return -E2BIG;
	/* A newer caller's fields this library does not know must be unset:
	 * otherwise it asks for something that would be silently ignored. */
	const unsigned char *bytes = (const unsigned char *)caller;
	for (uint32_t i = sizeof(RuntimeConfigEx); i < size; i++)
		if (bytes[i])
			return -E2BIG;
	/* An older caller's struct ends at size: the rest is zero, the
	 * defaults (never read past what the caller has). */
	RuntimeConfigEx copy;
	memset(&copy, 0, sizeof(copy));
	memcpy(&copy, caller, size < sizeof(copy) ? size : sizeof(copy));
	const RuntimeConfigEx *in = &copy;
	if (in->reserved || in->profile > JANUS_PROFILE_CORE)
		return -EINVAL;
	RuntimeConfig frozen = {in->worker_count, in->deterministic_seed};
	config_from_frozen(&frozen, cfg);
	cfg->profile = (cbcmn_profile)in->profile;
	cfg->caps.flags = in->caps; /* bad bits: the create's -EINVAL */
	budget_from_janus(&cfg->caps.budget_limit, &in->cap_limit);
	budget_from_janus(&cfg->budget, &in->budget);
	budget_from_janus(&cfg->child_budget, &in->child_budget);
	cfg->yield_interval = in->yield_interval;
	return 0;
}

/* The calling thread's last scheduler create error (janus_rt.h). */
static __thread int create_error;

/* A failed janus_scheduler_create(_ex): NULL, errno and the detail.  A
 * CBCMN_E* code is no errno: CBCMN_EMEMLOCK (the rings do not fit in
 * RLIMIT_MEMLOCK) reads as ENOMEM, which is what io_uring_setup itself
 * says for it; the code itself stays readable through
 * janus_scheduler_create_error(). */
static void *create_failed(int rc)
{
	create_error = rc;
	errno = rc > CBCMN_EBASE ? -rc : rc == CBCMN_EMEMLOCK ? ENOMEM : EINVAL;
	return NULL;
}

static int rt_create_rc(const RuntimeConfig *c, struct cbcmn_runtime **out)
{
	cbcmn_config cfg;
	config_from_frozen(c, &cfg);
	*out = NULL;
	return cbcmn_runtime_create(&cfg, out);
}

/* Await and pop the calling thread's open nurseries on rt (NULL: all). */
static void thread_nurseries_await(struct cbcmn_runtime *rt)
{
	for (RtNursery **pp = &thread_top; *pp;) {
		RtNursery *rn = *pp;
		if (rt && rn->nursery->rt != rt) {
			pp = &rn->below;
			continue;
		}
		*pp = rn->below;
		cbcmn_nursery_await_all(NULL, rn->nursery);
		free(rn);
	}
}

/* A thread that ends with nurseries open has left their scope: await them
 * (janus_rt.h), as a task's end does its own (sched.c), rather than leave
 * its children unwaited and the nurseries to leak.  The key's value only
 * makes the destructor run; thread_top is still readable in it. */
static pthread_key_t thread_end_key;
static pthread_once_t thread_end_once = PTHREAD_ONCE_INIT;

static void thread_end(void *unused)
{
	(void)unused;
	thread_nurseries_await(NULL);
}

static void thread_end_key_create(void)
{
	if (pthread_key_create(&thread_end_key, thread_end) != 0)
		thread_end_key = (pthread_key_t)-1; /* none: as before, they leak */
}

static void thread_end_arm(void)
{
	pthread_once(&thread_end_once, thread_end_key_create);
	if (thread_end_key != (pthread_key_t)-1 && !pthread_getspecific(thread_end_key))
		pthread_setspecific(thread_end_key, &thread_top);
}

/* void-returning shutdowns cannot say "busy": wait for the tasks.  The
 * calling thread's own nurseries on rt are awaited and popped first, so a
 * later await of its does not touch a freed nursery; another thread's are
 * out of reach, so wait until that thread awaits them (or ends, which
 * awaits them: thread_end): destroying past one freed it under the
 * thread's next spawn or await. */
static void rt_destroy_wait(struct cbcmn_runtime *rt)
{
	thread_nurseries_await(rt);
	struct timespec ms = {.tv_nsec = 1000000};
	while (cbcmn__runtime_destroy(rt, false) == -EBUSY)
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

int janus_rt_init_ex(const RuntimeConfigEx *config)
{
	cbcmn_config cfg;
	int rc = config_from_ex(config, &cfg);
	return rc ? rc : janus__rt_init_config(&cfg);
}

void janus_rt_init(RuntimeConfig config)
{
	cbcmn__mutex_lock(&global_lock);
	if (!atomic_load_explicit(&GLOBAL_RT, memory_order_relaxed)) {
		struct cbcmn_runtime *rt;
		if (rt_create_rc(&config, &rt) == 0)
			atomic_store_explicit(&GLOBAL_RT, rt, memory_order_release);
	}
	cbcmn__mutex_unlock(&global_lock);
}

/* Take rt (NULL: the global one) out of GLOBAL_RT if it is the global one:
 * then it is the caller's to destroy.  One of the global runtime's own
 * tasks cannot wait for its tasks to end (itself among them): the runtime
 * stays as it is (janus_rt.h), rather than be forgotten still running. */
static struct cbcmn_runtime *global_take(struct cbcmn_runtime *rt)
{
	struct cbcmn_task *self = current_task();
	cbcmn__mutex_lock(&global_lock);
	/* Relaxed: every store to GLOBAL_RT is made under global_lock. */
	struct cbcmn_runtime *g = atomic_load_explicit(&GLOBAL_RT, memory_order_relaxed);
	bool take = g && (!rt || rt == g) && !(self && self->rt == g) && !cbcmn__on_runtime_thread(g);
	if (take)
		atomic_store_explicit(&GLOBAL_RT, NULL, memory_order_relaxed);
	cbcmn__mutex_unlock(&global_lock);
	return take ? g : NULL;
}

void janus_rt_shutdown(void)
{
	struct cbcmn_runtime *rt = global_take(NULL);
	if (rt)
		rt_destroy_wait(rt);
}

Runtime *janus_rt_get(void)
{
	return (Runtime *)atomic_load_explicit(&GLOBAL_RT, memory_order_acquire);
}

/* Open a nursery on rt for self (NULL: the calling thread) and push it. */
static void *nursery_push(struct cbcmn_runtime *rt, struct cbcmn_task *self)
{
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
	if (!self)
		thread_end_arm();
	return rn;
}

void *janus_nursery_create(void)
{
	struct cbcmn_task *self = current_task();
	/* A task's nursery is on its own runtime, the global one or an
	 * isolated one (janus_scheduler_create): a runtime never waits for
	 * another's tasks. */
	if (self)
		return nursery_push(self->rt, self);
	/* The global runtime is found (or made) and the nursery opened on it
	 * under global_lock, which a shutdown takes it under (global_take):
	 * the shutdown then sees the nursery open and waits for it, or came
	 * first and this opens on a new runtime.  Read and opened apart, a
	 * shutdown in between left a NULL to return, or freed the runtime
	 * before the open used it. */
	cbcmn__mutex_lock(&global_lock);
	struct cbcmn_runtime *rt = atomic_load_explicit(&GLOBAL_RT, memory_order_relaxed);
	if (!rt && rt_create_rc(&(RuntimeConfig){0}, &rt) == 0)
		atomic_store_explicit(&GLOBAL_RT, rt, memory_order_release);
	void *rn = rt ? nursery_push(rt, NULL) : NULL;
	cbcmn__mutex_unlock(&global_lock);
	return rn;
}

/* The isolated runtimes janus_scheduler_create(_ex) made and no shutdown
 * has taken yet, under global_lock: a handle is a plain pointer, so a
 * second shutdown, a nursery on a runtime shut down, or a pointer that
 * was never a scheduler is found out here (nothing done, NULL) instead of
 * used freed. */
typedef struct SchedEntry {
	struct cbcmn_runtime *rt;
	struct SchedEntry *next;
} SchedEntry;
static SchedEntry *scheds;

/* Under global_lock: rt's entry's link, or NULL. */
static SchedEntry **sched_find(const void *rt)
{
	for (SchedEntry **pp = &scheds; *pp; pp = &(*pp)->next)
		if ((*pp)->rt == rt)
			return pp;
	return NULL;
}

/* A new isolated runtime, listed; destroyed (-ENOMEM) if no entry fits. */
static int sched_add(struct cbcmn_runtime *rt)
{
	SchedEntry *se = malloc(sizeof(*se));
	if (!se) {
		cbcmn_runtime_destroy(rt);
		return -ENOMEM;
	}
	se->rt = rt;
	cbcmn__mutex_lock(&global_lock);
	se->next = scheds;
	scheds = se;
	cbcmn__mutex_unlock(&global_lock);
	return 0;
}

void *janus_scheduler_nursery_create(void *scheduler)
{
	/* A task uses janus_nursery_create(): its own runtime, its own stack. */
	if (!scheduler || current_task())
		return NULL;
	/* Opened under global_lock, which a shutdown takes the runtime out
	 * under: the shutdown then waits for this nursery, or came first and
	 * the handle is refused. */
	cbcmn__mutex_lock(&global_lock);
	bool live = scheduler == (void *)atomic_load_explicit(&GLOBAL_RT, memory_order_relaxed) ||
		    sched_find(scheduler);
	void *rn = live ? nursery_push(scheduler, NULL) : NULL;
	cbcmn__mutex_unlock(&global_lock);
	return rn;
}

/* Spawn into the current nursery; form is CBCMN__TF_ABI and the bits
 * that say how to call fn (cbcmn__abi_call). */
static int spawn_form(uint32_t form, void *fn, void *arg)
{
	struct cbcmn_task *self = current_task();
	RtNursery *rn = *top_slot(self);
	if (!rn || !fn)
		return -1;
	/* SPEC-021 §3.5 "no blocking", §14.1 "recharge or fail": the native
	 * spawn waits, BudgetExhausted, for a cost it cannot pay; janus
	 * fails instead.  Only the running task itself touches its budget.
	 * Every cost the spawn charges is checked: the op and the spawn, and
	 * the child's stack, which is the spawner's memory (BUDGETS.md). */
	if (self && !(self->rt->cfg.flags & CBCMN_CONFIG_NO_BUDGETS) &&
	    (!cbcmn__budget_can_pay(self, CBCMN__B_SPAWN, 1) ||
	     !cbcmn__budget_can_pay(self, CBCMN__B_MEMORY, self->rt->cfg.stack_size)))
		return -1;
	return cbcmn__spawn(self, rn->nursery, form, fn, arg, NULL, NULL) == 0 ? 0 : -1;
}

int janus_nursery_spawn(TaskFn fn, void *arg)
{
	return spawn_form(CBCMN__TF_ABI, (void *)fn, arg);
}

int janus_nursery_spawn_noarg(NoArgTaskFn fn)
{
	return spawn_form(CBCMN__TF_ABI | CBCMN__TF_ABI_NOARG, (void *)fn, NULL);
}

int janus_nursery_spawn_i32(TaskFnI32 fn, void *arg)
{
	return spawn_form(CBCMN__TF_ABI | CBCMN__TF_ABI_I32, (void *)fn, arg);
}

/* The codes the native layer reads a meaning into (a cancelled, panicked
 * or exhausted child) and those the janus table does (-1..-4). */
static bool reserved_code(int64_t c)
{
	return (c >= JANUS_PENDING && c < 0) || c == CBCMN_ECANCELED || c == CBCMN_EPANIC ||
	       c == CBCMN_EBUDGET;
}

/* How a janus child's own result travels through the native nursery: a
 * code the runtime or the table reads a meaning into is moved into the
 * reserved block, so that nursery.c treats it as the plain failure it is
 * (fail fast, first error wins) and janus_result() cannot mistake it. */
static int64_t abi_carry(int64_t c)
{
	if (reserved_code(c))
		return JANUS_CHILD_ESCAPE + c;
	if (c >= JANUS_CHILD_ESCAPE - 4102 && c <= JANUS_CHILD_ESCAPE)
		return JANUS_CHILD_UNREPRESENTABLE; /* would read as escaped */
	return c;
}

/* sched.c runs a CBCMN__TF_ABI task through here.  Each form is called
 * through its own type, the one it was spawned as. */
int64_t cbcmn__abi_call(struct cbcmn_task *t)
{
	int64_t r;
	if (t->flags & CBCMN__TF_ABI_NOARG)
		r = ((NoArgTaskFn)(void *)t->abi_fn)();
	else if (t->flags & CBCMN__TF_ABI_I32)
		r = ((TaskFnI32)(void *)t->abi_fn)(t->arg); /* widened, §3.4.3 */
	else
		r = t->abi_fn(t->arg);
	return abi_carry(r);
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
		/* child_failed: the child's own code.  A native code a child
		 * returned is told apart from the table, so it comes back as
		 * itself; one in -1..-4 stays escaped (janus_rt.h). */
		if (r < JANUS_CHILD_ESCAPE + JANUS_PENDING && reserved_code(r - JANUS_CHILD_ESCAPE))
			return (long)(r - JANUS_CHILD_ESCAPE);
		return (long)r;
	}
}

long janus_nursery_await_all(void)
{
	struct cbcmn_task *self = current_task();
	RtNursery **top = top_slot(self);
	RtNursery *rn = *top;
	if (!rn)
		return JANUS_NO_NURSERY; /* -4 is pending only (§3.6) */
	*top = rn->below;
	int64_t r = cbcmn_nursery_await_all((cbcmn_cx *)self, rn->nursery);
	free(rn);
	return janus_result(r);
}

void *janus_scheduler_create(SchedulerConfig config)
{
	struct cbcmn_runtime *rt;
	int rc = rt_create_rc(&config, &rt);
	if (rc == 0)
		rc = sched_add(rt);
	return rc ? create_failed(rc) : rt;
}

void *janus_scheduler_create_ex(const SchedulerConfigEx *config)
{
	cbcmn_config cfg;
	cbcmn_runtime *rt = NULL;
	int rc = config_from_ex(config, &cfg);
	if (rc == 0)
		rc = cbcmn_runtime_create(&cfg, &rt);
	if (rc == 0)
		rc = sched_add(rt);
	return rc ? create_failed(rc) : rt;
}

int janus_scheduler_create_error(void)
{
	return create_error;
}

void janus_scheduler_shutdown(void *scheduler)
{
	/* The global runtime (janus_rt_get()) is shut down as janus_rt_shutdown
	 * does: destroyed behind GLOBAL_RT, the next janus call would use it
	 * freed. */
	if (scheduler && scheduler == (void *)atomic_load_explicit(&GLOBAL_RT, memory_order_acquire)) {
		scheduler = global_take(scheduler);
		if (scheduler)
			rt_destroy_wait(scheduler);
		return;
	}
	/* An isolated one is taken off the list first: a second shutdown, or
	 * a pointer that is no scheduler, finds nothing and does nothing.
	 * One of its own tasks (or its pool) leaves it listed. */
	if (!scheduler)
		return;
	cbcmn__mutex_lock(&global_lock);
	SchedEntry **pp = sched_find(scheduler), *se = NULL;
	if (pp && !cbcmn__on_runtime_thread(scheduler)) {
		se = *pp;
		*pp = se->next;
	}
	cbcmn__mutex_unlock(&global_lock);
	if (se) {
		free(se);
		rt_destroy_wait(scheduler);
	}
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

/* SPEC-021 §11.1: the running task's own budget, on its own fiber
 * (current_task() is NULL on a thread that is no executor, e.g. the
 * blocking pool's). */
void janus_budget_check(void)
{
	struct cbcmn_task *self = current_task();
	if (self)
		CBCMN_CHECKPOINT((cbcmn_cx *)self);
}

void janus_budget_decrement(uint32_t cost)
{
	struct cbcmn_task *self = current_task();
	if (self && cost)
		cbcmn__budget_take_ops(self, cost);
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
