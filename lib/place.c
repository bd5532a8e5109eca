/* place.c: executor placement policies (seed 003): which CPU each executor
 * is pinned to, computed from a loaded topology (docs/TOPOLOGY.md,
 * "Placement policies").
 *
 * Every policy is an *order* over the allowed CPUs: executor i gets the
 * i-th CPU of that order, and past the end the order repeats.  So the
 * placement for n executors is always a prefix of the placement for n + 1,
 * which is what a runtime that adds executors one at a time needs: the
 * executors already running never have to move.
 *
 * Only the public accessors of cbcmn_topo.h are used here, so the loader's
 * internal layout can change without touching this file.  The orders are
 * computed with a few sorts over the allowed CPUs (O(n log n) per call);
 * nothing here is on a hot path: placement runs when an executor starts.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbcmn.h" /* CBCMN_API */
#include "cbcmn_topo.h"
#include "rng.h"

/* CPU numbers a "cpus:" list may name.  The kernel's NR_CPUS tops out at
 * 8192; the bound keeps "0-2000000000" from allocating gigabytes. */
#define PLACE_MAX_CPU 65536

static void seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ---- policy names ---------------------------------------------------------- */

static const char *const policy_names[] = {
	[CBCMN_POLICY_DEPTH_FIRST] = "depth-first",
	[CBCMN_POLICY_BREADTH_FIRST] = "breadth-first",
	[CBCMN_POLICY_RANDOM] = "random",
	[CBCMN_POLICY_CPUS] = "cpus",
};

CBCMN_API const char *cbcmn_policy_name(cbcmn_policy p)
{
	if ((unsigned)p >= sizeof(policy_names) / sizeof(policy_names[0]))
		return "unknown";
	return policy_names[p];
}

/* One decimal CPU number at *s, advancing *s past it. */
static int parse_cpu(const char **s, int *cpu)
{
	const char *p = *s;
	long v = 0;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p++ - '0');
		if (v >= PLACE_MAX_CPU)
			return -ERANGE;
	}
	*s = p;
	*cpu = (int)v;
	return 0;
}

/* "0-3,8,10-11" into a malloc'd array, in the order written.  A CPU named
 * twice is an error: two executors on one CPU must be asked for with more
 * executors than CPUs, never by accident in a list. */
static int parse_list(const char *list, int **out, size_t *nout, char *err, size_t errlen)
{
	uint64_t seen[PLACE_MAX_CPU / 64] = {0};
	const char *s = list;
	int *v = NULL;
	size_t n = 0, cap = 0;
	int rc;

	if (!*s) {
		seterr(err, errlen, "cpus: the list is empty (want e.g. cpus:0-3,8)");
		return -EINVAL;
	}
	for (;;) {
		const char *item = s;
		int lo, hi;

		rc = parse_cpu(&s, &lo);
		hi = lo;
		if (!rc && *s == '-') {
			s++;
			rc = parse_cpu(&s, &hi);
		}
		if (rc == -ERANGE) {
			seterr(err, errlen, "cpus:%s: CPU numbers stop at %d", list,
			       PLACE_MAX_CPU - 1);
			rc = -EINVAL;
			goto fail;
		}
		if (rc || (*s && *s != ',')) {
			seterr(err, errlen, "cpus:%s: bad item at \"%s\" (want N or N-M, comma-separated)",
			       list, item);
			rc = -EINVAL;
			goto fail;
		}
		if (hi < lo) {
			seterr(err, errlen, "cpus:%s: range %d-%d is backwards", list, lo, hi);
			rc = -EINVAL;
			goto fail;
		}
		for (int c = lo; c <= hi; c++) {
			if (seen[c / 64] & (1ull << (c % 64))) {
				seterr(err, errlen, "cpus:%s: CPU %d is listed twice", list, c);
				rc = -EINVAL;
				goto fail;
			}
			seen[c / 64] |= 1ull << (c % 64);
			if (n == cap) {
				size_t ncap = cap ? cap * 2 : 16;
				int *nv = realloc(v, ncap * sizeof(*v));
				if (!nv) {
					seterr(err, errlen, "cpus: out of memory");
					rc = -ENOMEM;
					goto fail;
				}
				v = nv;
				cap = ncap;
			}
			v[n++] = c;
		}
		if (!*s)
			break;
		s++; /* the comma; "0," leaves an empty item, which parse_cpu refuses */
	}
	*out = v;
	*nout = n;
	return 0;
fail:
	free(v);
	return rc;
}

CBCMN_API int cbcmn_policy_parse(const char *s, cbcmn_policy *p, int **cpus, size_t *ncpus,
				 char *err, size_t errlen)
{
	static const char cpus_prefix[] = "cpus:";

	if (!s || !p || !cpus || !ncpus) {
		seterr(err, errlen, "cbcmn_policy_parse: NULL argument");
		return -EINVAL;
	}
	*cpus = NULL;
	*ncpus = 0;
	for (int i = CBCMN_POLICY_DEPTH_FIRST; i < CBCMN_POLICY_CPUS; i++) {
		if (!strcmp(s, policy_names[i])) {
			*p = (cbcmn_policy)i;
			return 0;
		}
	}
	if (!strncmp(s, cpus_prefix, sizeof(cpus_prefix) - 1)) {
		int rc = parse_list(s + sizeof(cpus_prefix) - 1, cpus, ncpus, err, errlen);
		if (rc)
			return rc;
		*p = CBCMN_POLICY_CPUS;
		return 0;
	}
	seterr(err, errlen,
	       "unknown placement policy \"%s\" (want depth-first, breadth-first, random or cpus:LIST)",
	       s);
	return -EINVAL;
}

/* ---- the orders ------------------------------------------------------------ */

/* An allowed CPU and the keys the policies sort it by. */
struct slot {
	const cbcmn_cpu_info *ci;
	int thread;    /* its rank among the allowed threads of its core */
	int tier;      /* thread, then kind: see tier_of() */
	int node_rank; /* its node's place in distance order from the first node */
	int pos;       /* its rank within a group (breadth-first's steps) */
};

/* The tier a CPU is filled in: a core's first allowed thread before any
 * second one, and within one thread rank performance cores before
 * efficiency cores.  So a hybrid node fills P-core first threads, then E
 * cores, then P-core SMT siblings: an E core is a core of its own, while a
 * sibling shares its execution units with the executor already on that
 * core.  Linux's asym-packing balancer reasons the same way on hybrid x86:
 * a fully idle E core beats a P core whose sibling is busy. */
static int tier_of(int thread, int kind)
{
	return thread * 2 + (kind != 0);
}

static int cmp_int(int a, int b)
{
	return (a > b) - (a < b);
}

/* For thread ranks: by core, the start CPU (arg, may be NULL) first, then
 * smt, then number.  The comparators take their context through qsort_r,
 * not a static: placement may run on several threads at once. */
static int cmp_core(const void *pa, const void *pb, void *arg)
{
	const struct slot *a = pa, *b = pb;
	const cbcmn_cpu_info *sort_start = arg;
	int c;

	if ((c = cmp_int(a->ci->core, b->ci->core)))
		return c;
	if ((c = cmp_int(b->ci == sort_start, a->ci == sort_start)))
		return c;
	if ((c = cmp_int(a->ci->smt, b->ci->smt)))
		return c;
	return cmp_int(a->ci->cpu, b->ci->cpu);
}

/* Depth-first: node rank, tier, the start LLC first then LLC index, the
 * start core first then core index, number.  So each tier walks the cores
 * in the same order, and the siblings come in the order their first
 * threads did.  The start CPU itself is kept out of the sort (arg): it is
 * executor 0 whatever its tier. */
static int cmp_depth(const void *pa, const void *pb, void *arg)
{
	const struct slot *a = pa, *b = pb;
	const cbcmn_cpu_info *start = arg;
	int sort_llc = start->llc;
	int c;

	if ((c = cmp_int(a->node_rank, b->node_rank)))
		return c;
	if ((c = cmp_int(a->tier, b->tier)))
		return c;
	if ((c = cmp_int(a->ci->llc != sort_llc, b->ci->llc != sort_llc)))
		return c;
	if ((c = cmp_int(a->ci->llc, b->ci->llc)))
		return c;
	if ((c = cmp_int(a->ci->core != start->core, b->ci->core != start->core)))
		return c;
	if ((c = cmp_int(a->ci->core, b->ci->core)))
		return c;
	return cmp_int(a->ci->cpu, b->ci->cpu);
}

/* Breadth-first, step 1: group by node, tier and LLC, cores in order. */
static int cmp_llc_group(const void *pa, const void *pb)
{
	const struct slot *a = pa, *b = pb;
	int c;

	if ((c = cmp_int(a->ci->node, b->ci->node)))
		return c;
	if ((c = cmp_int(a->tier, b->tier)))
		return c;
	if ((c = cmp_int(a->ci->llc, b->ci->llc)))
		return c;
	if ((c = cmp_int(a->ci->core, b->ci->core)))
		return c;
	return cmp_int(a->ci->cpu, b->ci->cpu);
}

/* Step 2: within a node and tier, round-robin over its LLCs (pos is the
 * rank within the LLC group from step 1). */
static int cmp_node_group(const void *pa, const void *pb)
{
	const struct slot *a = pa, *b = pb;
	int c;

	if ((c = cmp_int(a->ci->node, b->ci->node)))
		return c;
	if ((c = cmp_int(a->tier, b->tier)))
		return c;
	if ((c = cmp_int(a->pos, b->pos)))
		return c;
	if ((c = cmp_int(a->ci->llc, b->ci->llc)))
		return c;
	return cmp_int(a->ci->cpu, b->ci->cpu);
}

/* Step 3: round-robin over the nodes in distance order (pos is now the
 * rank within the node from step 2). */
static int cmp_breadth(const void *pa, const void *pb)
{
	const struct slot *a = pa, *b = pb;
	int c;

	if ((c = cmp_int(a->pos, b->pos)))
		return c;
	if ((c = cmp_int(a->node_rank, b->node_rank)))
		return c;
	return cmp_int(a->ci->cpu, b->ci->cpu);
}

/* pos = rank within runs of equal same(): s[] is sorted so runs are adjacent. */
static void rank_runs(struct slot *s, int n, bool (*same)(const struct slot *, const struct slot *))
{
	for (int i = 0; i < n; i++)
		s[i].pos = (i && same(&s[i - 1], &s[i])) ? s[i - 1].pos + 1 : 0;
}

static bool same_llc_group(const struct slot *a, const struct slot *b)
{
	return a->ci->node == b->ci->node && a->tier == b->tier && a->ci->llc == b->ci->llc;
}

static bool same_node(const struct slot *a, const struct slot *b)
{
	return a->ci->node == b->ci->node;
}

/* Thread ranks within each core, start (may be NULL) counted first. */
static void rank_threads(struct slot *s, int n, const cbcmn_cpu_info *start)
{
	qsort_r(s, (size_t)n, sizeof(*s), cmp_core, (void *)start);
	for (int i = 0; i < n; i++) {
		s[i].thread = (i && s[i - 1].ci->core == s[i].ci->core) ? s[i - 1].thread + 1 : 0;
		s[i].tier = tier_of(s[i].thread, s[i].ci->kind);
	}
}

/* node_rank: the nodes in SLIT distance order from node `from`, ties to
 * the lower index; `from` itself first even if a SLIT says otherwise. */
static int rank_nodes(const cbcmn_topo *t, struct slot *s, int n, int from)
{
	int nn = cbcmn_topo_nnodes(t);
	int *rank = calloc((size_t)nn, sizeof(*rank));

	if (!rank)
		return -ENOMEM;
	for (int a = 0; a < nn; a++) {
		int da = a == from ? INT_MIN : cbcmn_topo_distance(t, from, a);

		for (int b = 0; b < nn; b++) {
			int db = b == from ? INT_MIN : cbcmn_topo_distance(t, from, b);

			rank[a] += db < da || (db == da && b < a);
		}
	}
	for (int i = 0; i < n; i++)
		s[i].node_rank = rank[s[i].ci->node];
	free(rank);
	return 0;
}

static int order_depth(const cbcmn_topo *t, struct slot *s, int n, const cbcmn_cpu_info *start)
{
	int rc;

	rank_threads(s, n, start);
	rc = rank_nodes(t, s, n, start->node);
	if (rc)
		return rc;
	/* the start CPU to the front, the rest sorted behind it */
	for (int i = 0; i < n; i++) {
		if (s[i].ci == start) {
			struct slot tmp = s[i];
			memmove(&s[1], &s[0], (size_t)i * sizeof(*s));
			s[0] = tmp;
			break;
		}
	}
	qsort_r(s + 1, (size_t)n - 1, sizeof(*s), cmp_depth, (void *)start);
	return 0;
}

static int order_breadth(const cbcmn_topo *t, struct slot *s, int n)
{
	int rc;

	/* the first node is that of the lowest allowed CPU: s[] comes in
	 * increasing CPU number */
	rc = rank_nodes(t, s, n, s[0].ci->node);
	if (rc)
		return rc;
	rank_threads(s, n, NULL);
	qsort(s, (size_t)n, sizeof(*s), cmp_llc_group);
	rank_runs(s, n, same_llc_group);
	qsort(s, (size_t)n, sizeof(*s), cmp_node_group);
	rank_runs(s, n, same_node);
	qsort(s, (size_t)n, sizeof(*s), cmp_breadth);
	return 0;
}

/* A Fisher-Yates shuffle of the allowed CPUs (which s[] holds in increasing
 * CPU number), so every CPU is used once before any is used twice. */
static void order_random(struct slot *s, int n, uint64_t seed)
{
	struct cbcmn__rng r;

	cbcmn__rng_seed(&r, seed);
	for (int i = n - 1; i > 0; i--) {
		int j = (int)cbcmn__rng_below(&r, (uint32_t)i + 1);
		struct slot tmp = s[i];
		s[i] = s[j];
		s[j] = tmp;
	}
}

/* The loader's indexes are trusted only after a look: a bad one would index
 * past the distance matrix. */
static int check_topo(const cbcmn_topo *t, char *err, size_t errlen)
{
	int nn = cbcmn_topo_nnodes(t);

	for (int i = 0; i < cbcmn_topo_ncpus(t); i++) {
		const cbcmn_cpu_info *ci = cbcmn_topo_cpu(t, i);

		if (!ci || ci->node < 0 || ci->node >= nn) {
			seterr(err, errlen, "topology: CPU %d has node index %d, but there are %d nodes",
			       ci ? ci->cpu : i, ci ? ci->node : -1, nn);
			return -EINVAL;
		}
	}
	return 0;
}

CBCMN_API int cbcmn_place(const cbcmn_topo *t, cbcmn_policy p, uint32_t n, uint64_t seed,
			  const int *cpus, size_t ncpus, int first_cpu, int *out,
			  bool *oversubscribed, char *err, size_t errlen)
{
	const cbcmn_cpu_info *start = NULL;
	struct slot *s = NULL;
	int na = 0, rc;

	if (oversubscribed)
		*oversubscribed = false;
	if (!t || !out) {
		seterr(err, errlen, "cbcmn_place: NULL argument");
		return -EINVAL;
	}
	if (n == 0) {
		seterr(err, errlen, "cannot place 0 executors");
		return -EINVAL;
	}
	if ((unsigned)p > CBCMN_POLICY_CPUS) {
		seterr(err, errlen, "unknown placement policy %d", (int)p);
		return -EINVAL;
	}
	rc = check_topo(t, err, errlen);
	if (rc)
		return rc;

	int nall = cbcmn_topo_ncpus(t);
	s = calloc(nall > 0 ? (size_t)nall : 1, sizeof(*s));
	if (!s) {
		seterr(err, errlen, "cbcmn_place: out of memory");
		return -ENOMEM;
	}
	for (int i = 0; i < nall; i++) {
		const cbcmn_cpu_info *ci = cbcmn_topo_cpu(t, i);

		if (ci->allowed)
			s[na++].ci = ci;
	}
	if (na == 0) {
		seterr(err, errlen, "no allowed CPU to place executors on");
		rc = -ENODEV;
		goto out;
	}

	switch (p) {
	case CBCMN_POLICY_CPUS:
		if (!cpus || ncpus == 0) {
			seterr(err, errlen, "cpus: the list is empty");
			rc = -EINVAL;
			goto out;
		}
		for (size_t i = 0; i < ncpus; i++) {
			const cbcmn_cpu_info *ci = cbcmn_topo_find(t, cpus[i]);

			if (!ci) {
				seterr(err, errlen, "cpus: CPU %d is not an online CPU", cpus[i]);
				rc = -EINVAL;
				goto out;
			}
			if (!ci->allowed) {
				seterr(err, errlen, "cpus: CPU %d is not in the allowed set", cpus[i]);
				rc = -EINVAL;
				goto out;
			}
			/* O(ncpus^2), but a list is at most the machine's CPUs */
			for (size_t j = 0; j < i; j++) {
				if (cpus[j] == cpus[i]) {
					seterr(err, errlen, "cpus: CPU %d is listed twice", cpus[i]);
					rc = -EINVAL;
					goto out;
				}
			}
		}
		for (uint32_t i = 0; i < n; i++)
			out[i] = cpus[i % ncpus];
		if (oversubscribed)
			*oversubscribed = n > ncpus;
		rc = 0;
		goto out;
	case CBCMN_POLICY_DEPTH_FIRST:
		if (first_cpu < -1) {
			seterr(err, errlen, "first_cpu %d: want a CPU number or -1", first_cpu);
			rc = -EINVAL;
			goto out;
		}
		start = first_cpu == -1 ? s[0].ci : cbcmn_topo_find(t, first_cpu);
		if (!start || !start->allowed) {
			seterr(err, errlen, "first_cpu %d is not an allowed online CPU", first_cpu);
			rc = -EINVAL;
			goto out;
		}
		rc = order_depth(t, s, na, start);
		break;
	case CBCMN_POLICY_BREADTH_FIRST:
		rc = order_breadth(t, s, na);
		break;
	case CBCMN_POLICY_RANDOM:
		order_random(s, na, seed);
		rc = 0;
		break;
	}
	if (rc) {
		seterr(err, errlen, "cbcmn_place: out of memory");
		goto out;
	}
	/* past the allowed CPUs the order repeats: every CPU carries n / na
	 * or n / na + 1 executors */
	for (uint32_t i = 0; i < n; i++)
		out[i] = s[i % (uint32_t)na].ci->cpu;
	if (oversubscribed)
		*oversubscribed = n > (uint32_t)na;
out:
	free(s);
	return rc;
}
