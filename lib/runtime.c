/* runtime.c: the runtime root: configuration, executor start-up and shutdown, stats. */
#include <errno.h>
#include <stdio.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <numaif.h>
#include <sys/mman.h>
#include <unistd.h>

#include "futex.h"
#include "backend.h"
#include "clock.h"
#include "env.h"
#include "cpuquota.h"
#include "iwait.h"
#include "metrics.h"
#include "monitor.h"
#include "obligation.h"
#include "runtime.h"
#include "trace.h"

#define DEQUE_INITIAL 256u

/* ---- fork ------------------------------------------------------------------
 *
 * A child made by fork() has one thread, a copy of the one that forked: the
 * executors, the blocking pool and their rings' owners stay in the parent.
 * A runtime of the parent is unusable there (its queues are served by no
 * thread, its locks may be held by threads that do not exist), so every
 * call that would wait for it returns CBCMN_EFORKED: the child handler of
 * pthread_atfork() bumps a generation each runtime compares with its own.
 * A child may create runtimes of its own.  Forking from inside a task
 * leaves the child on the task's fiber stack: it must only exec or _exit.
 * (A raw clone() bypasses the handler.) */
_Atomic uint32_t cbcmn__fork_gen;

/* The library's process-wide locks are held across a fork, so that a child
 * never inherits one locked by a thread it does not have: its first
 * cbcmn_runtime_create() would wait for it forever.  (A runtime's own
 * locks are the parent's business: the child never takes them, every call
 * on that runtime stops at CBCMN_EFORKED first.)  Taken in the order a
 * create takes them: the janus ABI's (janus_rt_init() creates under it;
 * a nursery open and a scheduler's create and shutdown take it: a child's
 * janus_scheduler_shutdown() hung, rvattack23), the signal handler's,
 * then the guard-page budget's; last the fast clock's writer (clock.c),
 * which takes no lock. */
static void fork_prepare(void)
{
	cbcmn__janus_fork_lock(true);
	cbcmn__signal_fork_lock(true);
	cbcmn__stack_fork_lock(true);
	cbcmn__clock_fork_lock(true);
}

static void fork_parent(void)
{
	cbcmn__clock_fork_lock(false);
	cbcmn__stack_fork_lock(false);
	cbcmn__signal_fork_lock(false);
	cbcmn__janus_fork_lock(false);
}

static void forked_child(void)
{
	fork_parent();
	/* relaxed: the child has one thread. */
	atomic_fetch_add_explicit(&cbcmn__fork_gen, 1, memory_order_relaxed);
	cbcmn__tls_exec = NULL; /* the child is no executor, even if a task forked */
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int atfork_rc;

static void atfork_register(void)
{
	atfork_rc = pthread_atfork(fork_prepare, fork_parent, forked_child);
}
#define DEFAULT_SEED 0x9e3779b97f4a7c15ull

void cbcmn_config_init(cbcmn_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->workers = CBCMN_WORKERS_AUTO;
	cfg->victim = CBCMN_VICTIM_RANDOM;
	cfg->seed = DEFAULT_SEED;
	cfg->stack_size = CBCMN_STACK_DEFAULT;
	cfg->yield_interval = 0; /* the profile's */
	/* Not a SPEC-021 profile: the C API's "unlimited unless you say so"
	 * (cbcmn.h, docs/BUDGETS.md).  Budgets and caps stay 0: the profile's
	 * defaults, resolved in config_resolve(). */
	cfg->profile = CBCMN_PROFILE_NATIVE;
	cfg->policy = CBCMN_PIN_AUTO;
	cfg->stream_buf_size = CBCMN__STREAM_BUF_SIZE;
	cfg->stream_buf_share = CBCMN__STREAM_BUF_SHARE;
	cfg->stream_bufs_max = CBCMN__STREAM_BUFS_MAX;
}

static uint32_t affinity_cpus(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0) {
		int n = CPU_COUNT(&set);
		if (n > 0)
			return (uint32_t)n;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (uint32_t)n : 1;
}

/* May the executors of a runtime configured as c run on every online
 * CPU?  Not under a mask of some (taskset, a cpuset), nor on CPUs the
 * program listed (CBCMN_POLICY_CPUS) that leave some out.  The automatic
 * placement pins each executor to a CPU of the whole mask: that is no
 * confinement (other threads share those CPUs as the host's others). */
static bool runs_on_every_cpu(const cbcmn_config *c)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	if ((long)affinity_cpus() < online)
		return false;
	if (c->policy != CBCMN_POLICY_CPUS)
		return true;
	cpu_set_t listed;
	CPU_ZERO(&listed);
	for (uint32_t i = 0; i < c->ncpus && i < c->workers; i++)
		if (c->cpus[i] >= 0 && c->cpus[i] < CPU_SETSIZE)
			CPU_SET(c->cpus[i], &listed);
	return CPU_COUNT(&listed) >= online;
}

/* The defaults of SPEC-021's profiles (cbcmn.h, docs/BUDGETS.md). */
static const cbcmn_budget service_root = {
	CBCMN_SERVICE_ROOT_OPS, CBCMN_SERVICE_ROOT_MEMORY, CBCMN_SERVICE_ROOT_SPAWN,
	CBCMN_SERVICE_ROOT_CHANNEL_OPS, CBCMN_SERVICE_ROOT_SYSCALLS};
static const cbcmn_budget service_child = {
	CBCMN_SERVICE_CHILD_OPS, CBCMN_SERVICE_CHILD_MEMORY, CBCMN_SERVICE_CHILD_SPAWN,
	CBCMN_SERVICE_CHILD_CHANNEL_OPS, CBCMN_SERVICE_CHILD_SYSCALLS};

/* Components left 0 take def's (NULL: CBCMN_UNLIMITED).  After this a
 * component is literal: 0 is none at all (a service child's spawn_count). */
static void budget_resolve(cbcmn_budget *b, const cbcmn_budget *def)
{
	const cbcmn_budget u = {CBCMN_UNLIMITED, CBCMN_UNLIMITED, CBCMN_UNLIMITED,
				CBCMN_UNLIMITED, CBCMN_UNLIMITED};
	if (!def)
		def = &u;
	*b = (cbcmn_budget){
		.ops = b->ops ? b->ops : def->ops,
		.memory = b->memory ? b->memory : def->memory,
		.spawn_count = b->spawn_count ? b->spawn_count : def->spawn_count,
		.channel_ops = b->channel_ops ? b->channel_ops : def->channel_ops,
		.syscalls = b->syscalls ? b->syscalls : def->syscalls,
	};
}

static bool budget_unlimited(const cbcmn_budget *b)
{
	return (b->ops & b->memory & b->spawn_count & b->channel_ops & b->syscalls) ==
	       CBCMN_UNLIMITED;
}

/* The value of digit c in base (10 or 16), or -1. */
static int digit_value(char c, unsigned base)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (base == 16 && c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (base == 16 && c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* CBCMN_LAB_SEED (docs/LAB.md): all of it one number, decimal or 0x-hex,
 * that fits in 64 bits; else -EINVAL, said on stderr (as CBCMN_BACKEND's
 * is): a replay line mistyped must not replay another order, silently. */
static int lab_seed_parse(const char *s, uint64_t *out)
{
	unsigned base = 10;
	uint64_t v = 0;
	const char *p = s;
	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
		base = 16;
		p += 2;
	}
	bool ok = *p != 0;
	for (; ok && *p; p++) {
		int d = digit_value(*p, base);
		ok = d >= 0 && v <= (UINT64_MAX - (uint64_t)d) / base;
		v = v * base + (uint64_t)(d > 0 ? d : 0);
	}
	if (!ok) {
		fprintf(stderr, "cbcmn: CBCMN_LAB_SEED=%.40s: not a decimal or 0x-hex 64-bit number\n",
			s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* Validate and fill in defaults.  Bad values are errors, not clamped.
 * CBCMN_WORKERS_AUTO reads the cgroup limit: *limit (-1: not read), and
 * where its files are, left in cgq for the runtime's monitor (create's one
 * walk of the tree: create forgets them if no monitor wants them). */
static int config_check(const cbcmn_config *in, cbcmn_config *out, size_t page,
			struct cbcmn__cgq *cgq, double *limit)
{
	cbcmn_config_init(out);
	if (in)
		*out = *in;
	bool auto_workers = out->workers == CBCMN_WORKERS_AUTO;
	if (out->profile == CBCMN_PROFILE_CORE) {
		out->workers = 0; /* no scheduler: nothing to check */
	} else if (out->workers == CBCMN_WORKERS_AUTO) {
		/* One per CPU of the mask, fewer under a cgroup CPU limit
		 * (cpuquota.c: a container's). */
		if (!(out->flags & CBCMN_CONFIG_LAB))
			*limit = cbcmn__cgq_start(cgq, true);
		out->workers = (out->flags & CBCMN_CONFIG_LAB)
				       ? 1
				       : cbcmn__cpus_for_limit(affinity_cpus(), *limit);
		if (out->workers > CBCMN_MAX_EXECUTORS)
			out->workers = CBCMN_MAX_EXECUTORS;
	} else if (out->workers == 0 || out->workers > CBCMN_MAX_EXECUTORS) {
		return -EINVAL; /* at least one, at most CBCMN_MAX_EXECUTORS */
	}
	if ((unsigned)out->victim > CBCMN_VICTIM_LEAST_LOADED)
		return -EINVAL;
	if (out->flags & ~(CBCMN_CONFIG_NO_INLINE | CBCMN_CONFIG_NO_BUDGETS | CBCMN_CONFIG_LAB |
			   CBCMN_CONFIG_RECORD_IN_STACK))
		return -EINVAL;
	if (cbcmn__clock_env_check())
		return -EINVAL;
	if (out->flags & CBCMN_CONFIG_LAB) {
		if (out->workers != 1)
			return -EINVAL; /* one executor: the order is the seed's alone */
		const char *env = cbcmn__env("CBCMN_LAB_SEED");
		if (env && *env && lab_seed_parse(env, &out->seed))
			return -EINVAL;
	}
	if (out->stack_size == 0)
		out->stack_size = CBCMN_STACK_DEFAULT;
	if (out->blocking_threads == 0)
		out->blocking_threads = 16; /* cbcmn.h */
	bool implicit_caps = true;
	switch (out->profile) {
	case CBCMN_PROFILE_NATIVE:
	case CBCMN_PROFILE_SERVICE:
		if (out->yield_interval == 0)
			out->yield_interval = CBCMN_YIELD_INTERVAL_DEFAULT;
		break;
	case CBCMN_PROFILE_CLUSTER:
		if (out->yield_interval == 0)
			out->yield_interval = CBCMN_YIELD_INTERVAL_CLUSTER;
		break;
	case CBCMN_PROFILE_SOVEREIGN:
		if (out->yield_interval == 0)
			return -EINVAL; /* user-defined (SPEC-021 §4.3) */
		implicit_caps = false;
		break;
	case CBCMN_PROFILE_CORE:
		if (out->yield_interval == 0)
			out->yield_interval = CBCMN_YIELD_INTERVAL_DEFAULT;
		break;
	default:
		return -EINVAL;
	}
	if (out->caps.flags & ~(CBCMN_CAP_SPAWN | CBCMN_CAP_BUDGET | CBCMN_CAPS_EXPLICIT))
		return -EINVAL;
	bool native = out->profile == CBCMN_PROFILE_NATIVE;
	budget_resolve(&out->budget, native ? NULL : &service_root);
	budget_resolve(&out->child_budget, native ? NULL : &service_child);
	if (implicit_caps && !(out->caps.flags & CBCMN_CAPS_EXPLICIT) && out->caps.flags == 0) {
		/* An unlimited CapBudget recharges a task whenever a cost finds
		 * it exhausted: implicit only where there is nothing to void
		 * (native without any finite budget).  SPEC-021's profiles get
		 * CapSpawn alone (§10.2.2: default budgets, enforced). */
		out->caps.flags = CBCMN_CAP_SPAWN;
		if (native && budget_unlimited(&out->budget) && budget_unlimited(&out->child_budget))
			out->caps.flags |= CBCMN_CAP_BUDGET;
	}
	cbcmn__budget_defaults(&out->caps.budget_limit, &out->caps.budget_limit);
	if (out->stack_size < CBCMN_STACK_MIN || out->stack_size > CBCMN_STACK_MAX)
		return -EINVAL;
	out->stack_size = (out->stack_size + page - 1) & ~(page - 1);
	/* Rings (docs/IO.md). */
	if (out->ring_entries == 0)
		out->ring_entries = 256;
	if (out->ring_entries < 8 || out->ring_entries > 32768 ||
	    (out->ring_entries & (out->ring_entries - 1)))
		return -EINVAL;
	if (out->ring_flags & ~(CBCMN_RING_SQPOLL | CBCMN_RING_NO_MSG_RING | CBCMN_RING_PLAIN))
		return -EINVAL;
	if ((out->ring_flags & CBCMN_RING_SQPOLL) && (out->ring_flags & CBCMN_RING_PLAIN))
		return -EINVAL;
	if (out->backend > CBCMN_BACKEND_EPOLL)
		return -EINVAL;
	if (out->obligation_leak > CBCMN_LEAK_PANIC)
		return -EINVAL;
	if (out->trace_events > CBCMN__TRACE_MAX)
		return -EINVAL;
	if (out->trace_events & (out->trace_events - 1)) /* up to a power of two */
		out->trace_events = 1u << (32 - __builtin_clz(out->trace_events));
	if (out->iowq_max_workers == 0)
		out->iowq_max_workers = 4;
	if (out->sqpoll_idle_ms == 0)
		out->sqpoll_idle_ms = 100;
	if (out->spin_ns == 0)
		out->spin_ns = 50000;
	if (out->steal_cost_ns == 0)
		out->steal_cost_ns = 1000;
	if (out->io_batch_ns == 0)
		out->io_batch_ns = 50000;
	if (out->stall_ns == 0)
		out->stall_ns = 10000000; /* cbcmn.h */
	if (out->owe_ns == 0)
		out->owe_ns = 1000000; /* cbcmn.h */
	if (out->owe_ns < CBCMN_OWE_MIN_NS || out->owe_ns > CBCMN_OWE_MAX_NS)
		return -EINVAL;
	if (out->policy < CBCMN_PIN_NONE || out->policy > CBCMN_POLICY_CPUS)
		return -EINVAL;
	if (out->policy == CBCMN_POLICY_CPUS && (!out->cpus || out->ncpus == 0))
		return -EINVAL;
	/* With AUTO the caller cannot know the count (a cgroup limit may make
	 * it fewer than the host's CPUs): a min_workers above it is all of
	 * them, as on a host with that many CPUs. */
	if (out->min_workers == 0 || (out->flags & CBCMN_CONFIG_LAB) ||
	    (auto_workers && out->min_workers > out->workers))
		out->min_workers = out->workers;
	if (out->min_workers > out->workers)
		return -EINVAL;
	/* Stream buffers (docs/IO.md). */
	if (out->stream_buf_size == 0)
		out->stream_buf_size = CBCMN__STREAM_BUF_SIZE;
	if (out->stream_buf_share == 0)
		out->stream_buf_share = CBCMN__STREAM_BUF_SHARE;
	if (out->stream_bufs_max == 0)
		out->stream_bufs_max = CBCMN__STREAM_BUFS_MAX;
	if (out->stream_buf_size < CBCMN__STREAM_BUF_SIZE_MIN ||
	    out->stream_buf_size > CBCMN__STREAM_BUF_SIZE_MAX ||
	    out->stream_bufs_max > CBCMN__STREAM_BUFS_LIMIT ||
	    out->stream_buf_share > out->stream_bufs_max)
		return -EINVAL;
	return 0;
}

static int config_resolve(const cbcmn_config *in, cbcmn_config *out, size_t page,
			  struct cbcmn__cgq *cgq, double *limit)
{
	*cgq = (struct cbcmn__cgq){.lv = NULL};
	*limit = -1;
	int rc = config_check(in, out, page, cgq, limit);
	if (rc)
		cbcmn__cgq_close(cgq);
	return rc;
}

/* Choose every executor's CPU (docs/TOPOLOGY.md) on the live topology.  With
 * CBCMN_PIN_AUTO a machine whose topology cannot be read runs unpinned; a
 * policy asked for explicitly must work. */
static int place_executors(struct cbcmn_runtime *rt, int32_t *cpu, int32_t *node, int32_t *kind)
{
	const cbcmn_config *c = &rt->cfg;
	for (uint32_t i = 0; i < c->workers; i++)
		cpu[i] = node[i] = kind[i] = -1;
	rt->policy = CBCMN_PIN_NONE;
	if (c->policy == CBCMN_PIN_NONE || c->workers == 0)
		return 0;
	cbcmn_topo *t;
	char err[160];
	int rc = cbcmn_topo_load("/sys", &t, err, sizeof(err));
	if (rc)
		return c->policy == CBCMN_PIN_AUTO ? 0 : rc;
	cbcmn_policy p = c->policy == CBCMN_PIN_AUTO ? CBCMN_POLICY_DEPTH_FIRST
						     : (cbcmn_policy)c->policy;
	int *out = cbcmn__malloc(c->workers * sizeof(*out));
	bool over = false;
	rc = out ? cbcmn_place(t, p, c->workers, c->seed, c->cpus, c->ncpus, -1, out, &over, err,
			       sizeof(err))
		 : -ENOMEM;
	if (rc == 0) {
		for (uint32_t i = 0; i < c->workers; i++) {
			const cbcmn_cpu_info *ci = cbcmn_topo_find(t, out[i]);
			cpu[i] = out[i];
			node[i] = ci ? cbcmn_topo_node_id(t, ci->node) : -1;
			kind[i] = ci ? ci->kind : -1;
		}
		rt->policy = (int32_t)p;
		rt->oversubscribed = over;
	}
	free(out);
	cbcmn_topo_free(t);
	return rc == 0 || c->policy != CBCMN_PIN_AUTO ? rc : 0;
}

/* An executor's record, on its node: its pages are bound there before they
 * are first touched (the thread's own allocations, stacks included, land on
 * that node anyway once it runs pinned: first touch). */
static struct cbcmn__exec *exec_alloc(size_t page, int node)
{
	/* Pages of its own (mmap, not the malloc heap, whose pages may be
	 * touched already: mbind places pages at their first touch). */
	size_t size = (sizeof(struct cbcmn__exec) + page - 1) & ~(page - 1);
	struct cbcmn__exec *e = cbcmn__mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				     -1, 0);
	if (e == MAP_FAILED)
		return NULL;
	if (node >= 0 && node < 1024) {
		unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
		mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
		/* Preferred, not bound: memory elsewhere beats no memory. */
		(void)mbind(e, size, MPOL_PREFERRED, mask, 1024, 0);
	}
	memset(e, 0, sizeof(*e));
	/* No descriptor yet: zero is the caller's stdin, which a failed
	 * create's clean-up must never close. */
	e->ring.efd = -1;
	atomic_init(&e->ring.fd, -1);
	e->ring.u.ring_fd = e->ring.u.enter_ring_fd = -1;
	return e;
}

static void exec_free(struct cbcmn__exec *e)
{
	if (!e)
		return;
	cbcmn__scope_exec_fini(e);
	cbcmn__iwait_reg_fini(&e->iwaits);
	cbcmn__deque_destroy(&e->dq);
	cbcmn__be_destroy(e);
	cbcmn__xmsg_fini(e);
	cbcmn__trace_free(e->trace);
	free(e->wheel); /* actor_sched.c: a flat struct, empty by now */
	if (e->sys_stack) /* a thread that ended without its last teardown (sched.c) */
		munmap(e->sys_stack, e->sys_stack_size);
	munmap(e, (sizeof(*e) + e->rt->page - 1) & ~(e->rt->page - 1));
}

static void runtime_free(struct cbcmn_runtime *rt)
{
	/* Every executor is joined now.  One that ended a task after another
	 * had already drained its caches on the way out (task_complete wakes
	 * the opener before it drops its last reference) pushed the record on
	 * that one's remote-free list: free those stragglers here. */
	for (uint32_t i = 0; i < rt->nexec; i++)
		if (rt->exec && rt->exec[i])
			cbcmn__task_free_cache(rt->exec[i]);
	for (uint32_t i = 0; i < rt->nexec; i++)
		exec_free(rt->exec[i]);
	free(rt->exec);
	cbcmn__tseg_destroy(rt); /* after the executors' rings in it */
	cbcmn__scope_rt_fini(rt);
	cbcmn__blocking_fini(rt); /* no-op after destroy's own call */
	cbcmn__stack_pool_fini(&rt->stacks);
	cbcmn__mutex_destroy(&rt->inject_lock);
	for (int i = 0; i < CBCMN__BUDGET_LOCKS; i++)
		cbcmn__mutex_destroy(&rt->budget_locks[i]);
	cbcmn__oblig_fini(rt);
	cbcmn__actors_fini(rt);
	cbcmn__seg_destroy(&rt->seg);
	cbcmn__cgq_close(&rt->cgq); /* after the monitor, which reads it */
	free(rt);
}

/* Stop and join the first n executors (start-up failure or destroy). */
static void stop_executors(struct cbcmn_runtime *rt, uint32_t n)
{
	atomic_store_explicit(&rt->shutdown, 1, memory_order_seq_cst);
	cbcmn__unpark_all(rt);
	for (uint32_t i = 0; i < n; i++) {
		struct cbcmn__exec *e = rt->exec[i];
		/* One being started, replaced (sched.c: exec_replace()) or
		 * retired settles first (it sees the shutdown flag and ends).
		 * seq_cst: against the shutdown store above, the pair of the
		 * starter's or replacer's state change and shutdown load. */
		uint32_t s;
		while ((s = atomic_load_explicit(&e->lstate, memory_order_seq_cst)) ==
			       CBCMN__EX_STARTING ||
		       s == CBCMN__EX_RETIRING) {
			cbcmn__unpark_all(rt);
			usleep(100);
		}
		if (atomic_load_explicit(&e->joinable, memory_order_acquire))
			pthread_join(e->thread, NULL);
	}
	/* Retired threads are detached: wait for their last touch of rt. */
	while (atomic_load_explicit(&rt->exiting, memory_order_acquire))
		usleep(100);
}

int cbcmn_runtime_create(const cbcmn_config *cfg, cbcmn_runtime **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	cbcmn_config c;
	struct cbcmn__cgq cgq;
	double limit;
	int rc = config_resolve(cfg, &c, page, &cgq, &limit);
	if (rc)
		return rc;
	/* Before the first lock the handlers cover is taken. */
	pthread_once(&atfork_once, atfork_register);
	rc = atfork_rc ? -atfork_rc : cbcmn__signal_init();
	struct cbcmn_runtime *rt = rc ? NULL
				      : aligned_alloc(CBCMN__CACHELINE,
						      (sizeof(*rt) + CBCMN__CACHELINE - 1) &
							      ~(size_t)(CBCMN__CACHELINE - 1));
	if (!rt) {
		cbcmn__cgq_close(&cgq);
		return rc ? rc : -ENOMEM;
	}
	memset(rt, 0, sizeof(*rt));
	rt->cgq = cgq; /* closed by runtime_free() from here on */
	rt->seg.fd = -1;
	rt->fork_gen = atomic_load_explicit(&cbcmn__fork_gen, memory_order_relaxed);
	static _Atomic uint64_t serials;
	rt->serial = atomic_fetch_add_explicit(&serials, 1, memory_order_relaxed) + 1;
	pthread_sigmask(SIG_BLOCK, NULL, &rt->exec_sigmask);
	/* Never SIGSEGV, which a task's stack overflow raises (overflow.c):
	 * the kernel kills a thread that faults with it blocked, and a
	 * program that blocks every signal to sigwait() for them would die
	 * of the first overflow instead of seeing CBCMN_EPANIC. */
	sigdelset(&rt->exec_sigmask, SIGSEGV);
	rt->cfg = c;
	rt->page = page;
	rt->lab = (c.flags & CBCMN_CONFIG_LAB) != 0;
	rt->child_budget_limited = (c.child_budget.ops & c.child_budget.memory &
				    c.child_budget.spawn_count & c.child_budget.channel_ops &
				    c.child_budget.syscalls) != CBCMN_UNLIMITED;
	rt->cap_budget_implicit = (c.caps.flags & CBCMN_CAP_BUDGET) && !(cfg && cfg->caps.flags);
	if (c.profile == CBCMN_PROFILE_NATIVE) {
		/* What the program left unset, before resolving made it
		 * CBCMN_UNLIMITED (docs/BUDGETS.md, "Where budgets come from"). */
		const cbcmn_budget none = {0}, *u = cfg ? &cfg->child_budget : &none;
		rt->child_share = (!u->ops << CBCMN__B_OPS) | (!u->memory << CBCMN__B_MEMORY) |
				  (!u->spawn_count << CBCMN__B_SPAWN) |
				  (!u->channel_ops << CBCMN__B_CHANNEL) |
				  (!u->syscalls << CBCMN__B_SYSCALLS);
	}
	for (int i = 0; i < CBCMN__BUDGET_LOCKS; i++)
		cbcmn__mutex_init(&rt->budget_locks[i], "task_budget", CBCMN__LOCK_TASK_BUDGET);
	cbcmn__mutex_init(&rt->inject_lock, "inject", CBCMN__LOCK_INJECT);
	cbcmn__mutex_init(&rt->oblig_lock, "oblig", CBCMN__LOCK_OBLIG);
	/* A static runtime watched by the monitor keeps one executor slot
	 * more, not started: the spare (monitor.c).  A lab runtime has no
	 * monitor (its runs repeat), a dynamic one has room of its own, one
	 * of CBCMN_MAX_EXECUTORS no room for a slot more (idle and mail
	 * bitmaps, a watcher's check of the segment). */
	rt->watched = !rt->lab && c.stall_ns != CBCMN_STALL_OFF;
	rt->spare = c.workers && rt->watched &&
		    c.min_workers == c.workers &&
		    c.workers < CBCMN_MAX_EXECUTORS; /* the bitmaps' and watchers' limit */
	const uint32_t nx = c.workers + rt->spare;
	rc = cbcmn__scope_rt_init(rt, nx);
	if (!rc)
		rc = cbcmn__stack_pool_init(&rt->stacks, c.stack_size, c.guard_stacks_max);
	if (rc) {
		cbcmn__scope_rt_fini(rt);
		cbcmn__mutex_destroy(&rt->inject_lock);
		cbcmn__cgq_close(&rt->cgq);
		free(rt);
		return rc;
	}
	rt->exec = cbcmn__calloc(nx ? nx : 1, sizeof(*rt->exec));
	if (!rt->exec || cbcmn__blocking_init(rt) != 0) {
		runtime_free(rt);
		return -ENOMEM;
	}
	if (c.workers && ((rc = cbcmn__pbuf_env(rt)) != 0 || (rc = cbcmn__backend_choose(rt)) != 0)) {
		runtime_free(rt);
		return rc; /* io_uring asked for and refused, a bad CBCMN_BACKEND or CBCMN_PBUF_INC, ... */
	}
	int32_t *cpu = cbcmn__calloc(nx ? nx : 1, sizeof(*cpu));
	int32_t *node = cbcmn__calloc(nx ? nx : 1, sizeof(*node));
	int32_t *kind = cbcmn__calloc(nx ? nx : 1, sizeof(*kind));
	if (!cpu || !node || !kind || (rc = place_executors(rt, cpu, node, kind)) != 0) {
		free(cpu);
		free(node);
		free(kind);
		runtime_free(rt);
		return rc ? rc : -ENOMEM;
	}
	if (rt->spare)
		cpu[c.workers] = node[c.workers] = kind[c.workers] = -1; /* unpinned: it stands in for any */
	if ((rc = cbcmn__seg_create(rt, nx, node)) != 0 || (rc = cbcmn__tseg_create(rt, nx)) != 0) {
		free(cpu);
		free(node);
		free(kind);
		runtime_free(rt);
		return rc;
	}
	for (uint32_t i = 0; i < nx; i++) {
		struct cbcmn__exec *e = exec_alloc(page, node[i]);
		if (!e) {
			free(cpu);
			free(node);
			free(kind);
			runtime_free(rt);
			return -ENOMEM;
		}
		e->rt = rt;
		e->id = i;
		e->cpu = cpu[i];
		e->node = node[i];
		e->kind = kind[i];
		e->ss = cbcmn__seg_slot(&rt->seg, i);
		e->ss->cpu = cpu[i];
		e->ss->node = node[i];
		cbcmn__iwait_reg_init(&e->iwaits);
		rt->exec[i] = e;
		rt->nexec = i + 1;
		if (cbcmn__deque_init(&e->dq, DEQUE_INITIAL) != 0) {
			free(cpu);
			free(node);
			free(kind);
			runtime_free(rt);
			return -ENOMEM;
		}
		cbcmn__rng_seed(&e->rng, c.seed + i);
		e->rr_next = i;
		if ((rc = cbcmn__xmsg_init(e, nx)) != 0 ||
		    (rc = cbcmn__be_init(e)) != 0) {
			free(cpu);
			free(node);
			free(kind);
			runtime_free(rt);
			return rc;
		}
		if (rt->cfg.trace_events && !(e->trace = cbcmn__trace_new(rt, i, node[i]))) {
			free(cpu);
			free(node);
			free(kind);
			runtime_free(rt);
			return -ENOMEM;
		}
	}
	free(cpu);
	free(node);
	free(kind);
	rt->min_live = c.min_workers;
	/* The default spin leaves a cgroup's quota to the busy executors
	 * (sched.c, spin_room()), a limit set later too (a pod resized in
	 * place: the monitor reads the files found here again, held from
	 * the end of create, closed by runtime_free()); a spin_ns the
	 * program chose is its own.  One walk
	 * of the cgroup tree: here, or config_resolve()'s for
	 * CBCMN_WORKERS_AUTO, whose files are kept only for a monitor. */
	bool default_spin = !cfg || cfg->spin_ns == 0;
	bool hold = default_spin && cbcmn__monitor_wanted(rt);
	rt->spin_quota_gate = default_spin;
	if (limit < 0)
		limit = cbcmn__cgq_start(&rt->cgq, hold);
	else if (!hold)
		cbcmn__cgq_close(&rt->cgq);
	atomic_init(&rt->cg_limit, limit);
	cbcmn__spin_max_update(rt); /* again at each start, and by the monitor */
	/* The default spin steps aside on a busy host (monitor.c,
	 * host_load()); a spin_ns the program chose is kept as given.  Only
	 * where the process may run on every CPU: the host's runnable count
	 * says whether the host's CPUs are wanted, not those of a program
	 * confined to some of them (taskset, a cpuset), whose spin the load
	 * of CPUs it cannot use would stop (a server on CPUs set apart from a
	 * busy host's other work, by an affinity or by cfg.cpus:
	 * test_regression_spin_gate_ignores_other_cpus). */
	rt->spin_host_gate = default_spin && runs_on_every_cpu(&c);
	/* The spare starts and retires like an executor above min_workers,
	 * but only the monitor starts it (wake.c, monitor.c). */
	rt->dynamic = c.min_workers < nx;
	rt->retire_ns = (uint64_t)c.idle_retire_ms * 1000000u;
	atomic_init(&rt->nlive, c.min_workers);
	atomic_init(&rt->want_live, c.min_workers);
	cbcmn__seg_publish(rt);
	for (uint32_t i = 0; i < rt->min_live; i++) {
		struct cbcmn__exec *e = rt->exec[i];
		atomic_store_explicit(&e->lstate, CBCMN__EX_STARTING, memory_order_relaxed);
		atomic_store_explicit(&e->joinable, true, memory_order_relaxed);
		rc = cbcmn__exec_thread_start(e);
		if (rc != 0) {
			atomic_store_explicit(&e->joinable, false, memory_order_relaxed);
			atomic_store_explicit(&e->lstate, CBCMN__EX_STOPPED, memory_order_relaxed);
			stop_executors(rt, i);
			runtime_free(rt);
			return -rc;
		}
	}
	/* Each executor creates its ring on its own thread: wait for all, so
	 * that a failure there is this call's failure. */
	uint32_t started;
	while ((started = atomic_load_explicit(&rt->started, memory_order_acquire)) < rt->min_live)
		cbcmn__futex_wait(&rt->started, started, NULL);
	for (uint32_t i = 0; i < rt->min_live; i++) {
		int err = atomic_load_explicit(&rt->exec[i]->start_err, memory_order_relaxed);
		if (err) {
			stop_executors(rt, rt->nexec);
			runtime_free(rt);
			return err;
		}
	}
	/* The files the walk found, opened once every descriptor create
	 * needs is made (the rings, their eventfds, the stats segment): held
	 * at the walk, they took the last descriptors under a low
	 * RLIMIT_NOFILE, and create failed with -EMFILE at a limit one above
	 * one at which it passed (the files failing to open there; attack21).
	 * Short of descriptors now, none is held (cpuquota.c): create's
	 * answer grows with the limit. */
	cbcmn__cgq_hold(&rt->cgq);
	if ((rc = cbcmn__monitor_start(rt)) != 0) {
		stop_executors(rt, rt->nexec);
		runtime_free(rt);
		return rc;
	}
	*out = rt;
	return 0;
}

/* Out of line, the fences: GCC's -Wtsan refuses one once it is inlined
 * (a runtime task's spawn or end only, and destroy). */
__attribute__((noinline)) void cbcmn__runtime_count_begin(struct cbcmn_runtime *rt)
{
	atomic_fetch_add_explicit(&rt->runtime_counts_begun, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static __attribute__((noinline)) void look_fence(void)
{
	atomic_thread_fence(memory_order_acquire);
}

/* Tasks of the program's are live: all live tasks but the runtime's own
 * (the metrics servers').  A look is kept only if no runtime task's
 * count changed while it was made (runtime.h, runtime_tasks): then the
 * seg's live tasks count exactly runtime_tasks of the runtime's own, and
 * the rest is the program's (overstated only while the program spawns,
 * which destroy's second look catches).  A change under way is waited
 * out: a look across one took a scrape's task, started and ended inside
 * it, for the program's (-EBUSY), or one half counted for none of them
 * (destroy went on, stopped the servers, and said -EBUSY after all).
 * Busy if the changes never leave room (about a second). */
static bool program_busy(struct cbcmn_runtime *rt)
{
	for (int tries = 0; tries < 1000; tries++) {
		uint64_t ended = atomic_load_explicit(&rt->runtime_counts_ended,
						      memory_order_acquire);
		uint32_t own = atomic_load_explicit(&rt->runtime_tasks, memory_order_relaxed);
		uint64_t live = cbcmn__seg_live_tasks(&rt->seg);
		look_fence();
		if (atomic_load_explicit(&rt->runtime_counts_begun, memory_order_relaxed) == ended)
			return live > own;
		if (tries < 16)
			sched_yield();
		else
			usleep(1000);
	}
	return true;
}

/* The program still holds rt: destroy's look, the same before and after
 * it stops the scrape endpoints (servers_open: before; their tasks and
 * nurseries, running, are the runtime's own, not the program's). */
static bool program_holds(struct cbcmn_runtime *rt, bool open_ok, bool servers_open)
{
	/* A task of the program's. */
	if (servers_open ? program_busy(rt) : cbcmn__seg_live_tasks(&rt->seg) != 0)
		return true;
	/* A nursery a thread opened and has not awaited: it can still be
	 * spawned into, awaited or cancelled (by a holder, cbcmn_nursery_hold),
	 * each touching rt.  acquire: pairs with cbcmn__nursery_await().
	 * The scrape endpoints' own are not the program's: only a serve or
	 * stop racing this one may pass for it (-EBUSY). */
	uint32_t own = servers_open ? cbcmn__metrics_nurseries(rt) : 0;
	if (!open_ok && atomic_load_explicit(&rt->thread_nurseries, memory_order_acquire) > own)
		return true;
	/* A thread blocked on one of its channels, or holding a reservation
	 * on one: what ends either (a send or close that wakes it; the commit
	 * or abort) touches rt, and until it ends the channel cannot be
	 * destroyed.  acquire: pairs with chan.c's thread_out(). */
	return atomic_load_explicit(&rt->thread_chan, memory_order_acquire) != 0;
}

int cbcmn__runtime_destroy(cbcmn_runtime *rt, bool open_ok)
{
	if (!rt)
		return -EINVAL;
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED; /* its threads are the parent's */
	/* On its own pool thread the task the function serves is alive
	 * until the function returns: never quiet, a deadlock, not busy. */
	if (cbcmn__on_runtime_thread(rt))
		return -EDEADLK;
	/* Busy: the scrape endpoints stay, and so does everything else (the
	 * runtime lives on). */
	if (program_holds(rt, open_ok, true))
		return -EBUSY;
	/* Committed but for a racing spawn: the scrape endpoints' tasks
	 * would keep it busy for ever, so they end now (cbcmn_metrics_stop),
	 * and then nothing of the program's may be left. */
	cbcmn__metrics_stop_all(rt);
	if (program_holds(rt, open_ok, false))
		return -EBUSY;
	/* Before the executors stop: it may start one (monitor.c). */
	cbcmn__monitor_stop(rt);
	/* Before the executors stop: a pool thread may still be finishing
	 * the wake of the task it served last. */
	cbcmn__blocking_fini(rt);
	stop_executors(rt, rt->nexec);
	runtime_free(rt);
	return 0;
}

int cbcmn_runtime_destroy(cbcmn_runtime *rt)
{
	return cbcmn__runtime_destroy(rt, false);
}

uint32_t cbcmn_runtime_workers(const cbcmn_runtime *rt)
{
	return rt ? cbcmn__nworkers(rt) : 0;
}

int cbcmn_runtime_run(cbcmn_runtime *rt, cbcmn_task_fn fn, void *arg, int64_t *result)
{
	if (!rt || !fn)
		return -EINVAL;
	if (cbcmn__forked(rt))
		return CBCMN_EFORKED;
	if (rt->nexec == 0)
		return CBCMN_ENOSCHED;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(rt, NULL, &n);
	if (rc)
		return rc;
	cbcmn_task *t;
	rc = cbcmn_nursery_spawn(NULL, n, fn, arg, &t);
	if (rc) {
		cbcmn_nursery_await_all(NULL, n);
		return rc;
	}
	cbcmn_nursery_await_all(NULL, n);
	int64_t r;
	rc = cbcmn_task_join(NULL, t, &r);
	if (result)
		*result = r;
	if (rc == 0 && r < 0 && rt->lab)
		fprintf(stderr, "cbcmn lab: the task failed (%s): seed=%#llx; replay with "
				"CBCMN_LAB_SEED=%#llx\n",
			cbcmn_strerror(r), (unsigned long long)rt->cfg.seed,
			(unsigned long long)rt->cfg.seed);
	return rc;
}
