/* wl_int.h: what the workloads of tools/workloads/ share besides
 * workload.h: the environment a workload runs in and its failure and
 * root-task helpers (workload.c), for workloads kept in files of their own
 * (wl_actors.c). */
#ifndef CBCMN_TOOLS_WL_INT_H
#define CBCMN_TOOLS_WL_INT_H

#include <stdarg.h>
#include <stdatomic.h>

#include "cbcmn_actor.h"
#include "workloads/workload.h"

/* What a workload gets besides its runtime. */
struct wl_env {
	const struct wl_opts *o;
	const cbcmn_config *cfg; /* built from o: for workloads with their own runtime */
	struct wl_result *r;
	uint32_t size;
	uint64_t t0, deadline;   /* CLOCK_MONOTONIC ns */
	_Atomic int failed;      /* a task claimed r->error */
};

/* splitmix64: the workloads' deterministic values. */
static inline uint64_t wl_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Record the first failure (from any task or thread) in e->r->error and
 * return -EPROTO. */
int wl_fail(struct wl_env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A call that failed: what, and the library's words for rc; returns rc
 * (or -EIO when it is not an int). */
int wl_fail_rc(struct wl_env *e, int64_t rc, const char *what);

/* Count-based workloads: another round?  Always a first one. */
bool wl_more(const struct wl_env *e, uint64_t rounds);

/* Run fn(arg) as a root task; its failure is reported as what, unless a
 * task already said more precisely what went wrong. */
int wl_run_root(cbcmn_runtime *rt, struct wl_env *e, cbcmn_task_fn fn, void *arg,
		const char *what);

/* A node of an actor skynet (wl_actors.c; cbcmn-bench actors times it):
 * it spawns its 10 children as actors of a nursery of its own, adds up
 * the (sum, leaves) each sends, awaits them and sends its totals to its
 * parent; a leaf sends (index, 1).  wl_sky_root(cx, &root) runs the tree
 * below root (size leaves, parent CBCMN_ACTOR_NONE: it writes *sum and
 * *leaves) and returns 0 or the first error. */
struct wl_sky {
	uint64_t index, size;     /* first leaf below, leaves below (a power of 10) */
	cbcmn_actor_ref parent;   /* NONE: the root */
	uint64_t *sum, *leaves;   /* the root's answer */
	bool sabotage;            /* leaf 1 reports 0: a lost value */
	bool handler;             /* handler actors (one host) instead of fiber actors */
};
int64_t wl_sky_root(cbcmn_cx *cx, void *root);

/* A token ring of n actors (wl_actors.c; cbcmn-bench actors times it):
 * the token starts at actor 0 with hops left, hop k ends at actor k % n;
 * the actor that takes the last hop notes where, the hops it counted and
 * when (wall and process CPU time), then sends QUIT round the ring.
 * wl_ring_root(cx, &ring) spawns the ring in a nursery of its own, sends
 * the token and returns 0 or the first error. */
struct wl_ring {
	cbcmn_actor_ref *refs;   /* n references, written by the root */
	uint64_t *visits;        /* NULL, or n counters: each actor counts its own */
	uint64_t n, hops;
	bool one_exec;           /* every actor pinned on executor 0 */
	bool sabotage;           /* actor 1 skips its neighbour: a lost visit */
	bool handler;            /* handler actors: actor 0 spawns the rest on its host */
	uint64_t idle_ns;        /* handler actors: a receive timeout set in every call (0: none) */
	uint64_t t0, c0;         /* wall and CPU time as the token is sent */
	uint64_t t_end, c_end;   /* ... as the last hop is taken */
	uint64_t last_at, count; /* where the token ended and the hops it counted */
};
int64_t wl_ring_root(cbcmn_cx *cx, void *ring);

/* The actor workloads (wl_actors.c). */
int wl_ring(cbcmn_runtime *rt, struct wl_env *e);
int wl_supervise(cbcmn_runtime *rt, struct wl_env *e);
int wl_skynet(cbcmn_runtime *rt, struct wl_env *e);

#endif
