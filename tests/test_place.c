/* test_place: the placement policies (lib/place.c) on every sysfs fixture,
 * against orders written by hand from the rules in docs/TOPOLOGY.md
 * ("Placement policies"), and the cbcmn-affinity tool.
 *
 * The fixtures (tests/fixtures/sysfs/NAME) and how their CPUs are numbered:
 *   vm2     2 CPUs, one node, one LLC, no SMT.
 *   xeon2s  2 sockets x 16 cores x 2 threads: 0-15 socket 0 thread 0,
 *           16-31 socket 1 thread 0, 32-47 siblings of 0-15, 48-63 siblings
 *           of 16-31; node k = socket k, one L3 each, distance 10/21.
 *   epyc8n  8 nodes (4 per socket), 4 LLCs per node, 2 cores per LLC, 2
 *           threads per core: CPU c < 64 is core c (node c/8, LLC c/2), c+64
 *           its sibling; distance 10 / 12 same socket / 32 other socket.
 *   holes   CPUs 0-11 and 16-19, 3 and 9 offline; nodes 0 and 2 (10/20);
 *           2 threads per core (see holes_* below for which).
 *   hybrid  8 P cores with SMT (0-15, siblings 2i and 2i+1), 8 E cores
 *           without (16-23), one L3, one node.
 *
 * Every expected order below is the placement for n = all allowed CPUs;
 * the placement for fewer executors is checked against its first n
 * entries, which is the rule: executors already placed never move when one
 * is added.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cbcmn_topo.h"
#include "helpers.h"

#define FIXTURES "tests/fixtures/sysfs"
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the expected orders, by hand --------------------------------------------- */

static const int vm2_order[] = {0, 1};
static const int vm2_from1[] = {1, 0};
static const int vm2_list[] = {1, 0};

/* Depth-first: node 0's first threads, node 0's siblings, then node 1. */
static const int xeon2s_depth[] = {
	0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,         /* node 0, thread 0 */
	32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, /* node 0, siblings */
	16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, /* node 1, thread 0 */
	48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, /* node 1, siblings */
};
/* Breadth-first: node 0, node 1, node 0, ...; each node's own order is
 * its cores' first threads, then their siblings. */
static const int xeon2s_breadth[] = {
	0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
	8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31,
	32, 48, 33, 49, 34, 50, 35, 51, 36, 52, 37, 53, 38, 54, 39, 55,
	40, 56, 41, 57, 42, 58, 43, 59, 44, 60, 45, 61, 46, 62, 47, 63,
};
/* Depth-first from 33, the sibling of CPU 1: 33 counts as core 1's first
 * thread, so CPU 1 waits with the siblings, which come in the core order
 * of the first threads: core 1, core 0, core 2, ... */
static const int xeon2s_from33[] = {
	33, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
	1, 32, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
	16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
	48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
};
/* Depth-first from 20: node 1 first, core 20's sibling first among the
 * siblings. */
static const int xeon2s_from20[] = {
	20, 16, 17, 18, 19, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
	52, 48, 49, 50, 51, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
	0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
	32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
};
static const int xeon2s_list[] = {63, 0, 1, 2, 40};

/* Depth-first: each node's 8 first threads (its 4 LLCs in order, 2 cores
 * each), then their siblings; nodes 1-3 (12) before 4-7 (32). */
static const int epyc8n_depth[] = {
	0, 1, 2, 3, 4, 5, 6, 7, 64, 65, 66, 67, 68, 69, 70, 71,                /* node 0 */
	8, 9, 10, 11, 12, 13, 14, 15, 72, 73, 74, 75, 76, 77, 78, 79,          /* node 1 */
	16, 17, 18, 19, 20, 21, 22, 23, 80, 81, 82, 83, 84, 85, 86, 87,        /* node 2 */
	24, 25, 26, 27, 28, 29, 30, 31, 88, 89, 90, 91, 92, 93, 94, 95,        /* node 3 */
	32, 33, 34, 35, 36, 37, 38, 39, 96, 97, 98, 99, 100, 101, 102, 103,    /* node 4 */
	40, 41, 42, 43, 44, 45, 46, 47, 104, 105, 106, 107, 108, 109, 110, 111, /* node 5 */
	48, 49, 50, 51, 52, 53, 54, 55, 112, 113, 114, 115, 116, 117, 118, 119, /* node 6 */
	56, 57, 58, 59, 60, 61, 62, 63, 120, 121, 122, 123, 124, 125, 126, 127, /* node 7 */
};
/* Breadth-first: node k's own order is its LLCs round-robin (8k, 8k+2,
 * 8k+4, 8k+6, then 8k+1, 8k+3, ...), siblings after; one round takes one
 * CPU from each node 0..7 (all at distance 12 or 32 from node 0, ties by
 * index). */
static const int epyc8n_breadth[] = {
	0, 8, 16, 24, 32, 40, 48, 56,     2, 10, 18, 26, 34, 42, 50, 58,
	4, 12, 20, 28, 36, 44, 52, 60,    6, 14, 22, 30, 38, 46, 54, 62,
	1, 9, 17, 25, 33, 41, 49, 57,     3, 11, 19, 27, 35, 43, 51, 59,
	5, 13, 21, 29, 37, 45, 53, 61,    7, 15, 23, 31, 39, 47, 55, 63,
	64, 72, 80, 88, 96, 104, 112, 120, 66, 74, 82, 90, 98, 106, 114, 122,
	68, 76, 84, 92, 100, 108, 116, 124, 70, 78, 86, 94, 102, 110, 118, 126,
	65, 73, 81, 89, 97, 105, 113, 121, 67, 75, 83, 91, 99, 107, 115, 123,
	69, 77, 85, 93, 101, 109, 117, 125, 71, 79, 87, 95, 103, 111, 119, 127,
};
/* Depth-first from 37 (node 4, LLC 18): its LLC (37, 36), the rest of node
 * 4, node 4's siblings in the same order; then nodes 5-7 (12), then 0-3
 * (32). */
static const int epyc8n_from37[] = {
	37, 36, 32, 33, 34, 35, 38, 39, 101, 100, 96, 97, 98, 99, 102, 103,
	40, 41, 42, 43, 44, 45, 46, 47, 104, 105, 106, 107, 108, 109, 110, 111,
	48, 49, 50, 51, 52, 53, 54, 55, 112, 113, 114, 115, 116, 117, 118, 119,
	56, 57, 58, 59, 60, 61, 62, 63, 120, 121, 122, 123, 124, 125, 126, 127,
	0, 1, 2, 3, 4, 5, 6, 7, 64, 65, 66, 67, 68, 69, 70, 71,
	8, 9, 10, 11, 12, 13, 14, 15, 72, 73, 74, 75, 76, 77, 78, 79,
	16, 17, 18, 19, 20, 21, 22, 23, 80, 81, 82, 83, 84, 85, 86, 87,
	24, 25, 26, 27, 28, 29, 30, 31, 88, 89, 90, 91, 92, 93, 94, 95,
};
static const int epyc8n_list[] = {127, 64, 5, 6, 7, 100};

/* Hybrid: P-core first threads, then the E cores, then P-core siblings. */
static const int hybrid_order[] = {
	0, 2, 4, 6, 8, 10, 12, 14,      /* P cores, thread 0 */
	16, 17, 18, 19, 20, 21, 22, 23, /* E cores */
	1, 3, 5, 7, 9, 11, 13, 15,      /* P-core siblings */
};
/* From an E core: it goes first, then the same tiers as ever. */
static const int hybrid_from17[] = {
	17, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 19, 20, 21, 22, 23, 1, 3, 5, 7, 9, 11, 13, 15,
};
static const int hybrid_list[] = {23, 1, 16};

/* holes, from its files: online 0-2,4-8,10-11,16-19; cores {0,1} {2} {4,5}
 * {6,7} (node 0, one L3) and {8} {10,11} {16,17} {18,19} (node id 2, one
 * L3); 2 and 8 are the only online threads of their cores, so they are
 * first threads. */
static const int holes_depth[] = {
	0, 2, 4, 6, 1, 5, 7,      /* node 0: first threads, then siblings */
	8, 10, 16, 18, 11, 17, 19, /* node 2 */
};
static const int holes_breadth[] = {0, 8, 2, 10, 4, 16, 6, 18, 1, 11, 5, 17, 7, 19};
/* From 17 (node 2, core {16,17}): 17 is its core's first thread, 16 the
 * first sibling. */
static const int holes_from17[] = {17, 8, 10, 18, 16, 11, 19, 0, 2, 4, 6, 1, 5, 7};
/* From 5 (node 0, core {4,5}). */
static const int holes_from5[] = {5, 0, 2, 6, 4, 1, 7, 8, 10, 16, 18, 11, 17, 19};
static const int holes_list[] = {19, 0, 8, 2};

/* xeon2s-cpuset: xeon2s with cbcmn-allowed 8-19,40-47: node 0 has cores
 * 8-15 with both threads, node 1 cores 16-19 without their siblings. */
static const int cpuset_depth[] = {
	8, 9, 10, 11, 12, 13, 14, 15, 40, 41, 42, 43, 44, 45, 46, 47, 16, 17, 18, 19,
};
static const int cpuset_breadth[] = {
	8, 16, 9, 17, 10, 18, 11, 19, 12, 13, 14, 15, 40, 41, 42, 43, 44, 45, 46, 47,
};
/* From 44, the sibling of 12: core 12's other thread leads the siblings. */
static const int cpuset_from44[] = {
	44, 8, 9, 10, 11, 13, 14, 15, 12, 40, 41, 42, 43, 45, 46, 47, 16, 17, 18, 19,
};
static const int cpuset_from18[] = {
	18, 16, 17, 19, 8, 9, 10, 11, 12, 13, 14, 15, 40, 41, 42, 43, 44, 45, 46, 47,
};
static const int cpuset_list[] = {47, 8, 19};

/* armbl: big.LITTLE, little CPUs 0-3 (kind 1), big 4-5 (kind 0), no SMT,
 * one node and LLC.  Depth-first starts at the lowest allowed CPU, as the
 * header says, even though that is a little core; the order then takes
 * the big cores before the other little ones.  Breadth-first has no start
 * CPU: big first. */
static const int armbl_depth[] = {0, 4, 5, 1, 2, 3};
static const int armbl_breadth[] = {4, 5, 0, 1, 2, 3};
static const int armbl_from2[] = {2, 4, 5, 0, 1, 3};
static const int armbl_list[] = {5, 0};

struct fixture {
	const char *name;
	int ncpus;              /* online */
	int nallowed;
	const int *depth;       /* n = nallowed, depth-first from the lowest CPU */
	const int *breadth;
	int from;               /* a first_cpu for depth-first ... */
	const int *depth_from;  /* ... and the order it gives */
	int from2;
	const int *depth_from2;
	const char *list;       /* a cpus: policy ... */
	const int *list_cpus;   /* ... and its CPUs */
	size_t nlist;
	int not_allowed;        /* a CPU number cpus: must refuse */
};

static const struct fixture fx_vm2 = {
	.name = "vm2", .ncpus = 2, .nallowed = 2,
	.depth = vm2_order, .breadth = vm2_order,
	.from = 1, .depth_from = vm2_from1,
	.from2 = 0, .depth_from2 = vm2_order,
	.list = "cpus:1,0", .list_cpus = vm2_list, .nlist = ARRAY_SIZE(vm2_list),
	.not_allowed = 2,
};

static const struct fixture fx_xeon2s = {
	.name = "xeon2s", .ncpus = 64, .nallowed = 64,
	.depth = xeon2s_depth, .breadth = xeon2s_breadth,
	.from = 33, .depth_from = xeon2s_from33,
	.from2 = 20, .depth_from2 = xeon2s_from20,
	.list = "cpus:63,0-2,40", .list_cpus = xeon2s_list, .nlist = ARRAY_SIZE(xeon2s_list),
	.not_allowed = 64,
};

static const struct fixture fx_epyc8n = {
	.name = "epyc8n", .ncpus = 128, .nallowed = 128,
	.depth = epyc8n_depth, .breadth = epyc8n_breadth,
	.from = 37, .depth_from = epyc8n_from37,
	.from2 = 0, .depth_from2 = epyc8n_depth,
	.list = "cpus:127,64,5-7,100", .list_cpus = epyc8n_list,
	.nlist = ARRAY_SIZE(epyc8n_list),
	.not_allowed = 128,
};

static const struct fixture fx_holes = {
	.name = "holes", .ncpus = 14, .nallowed = 14,
	.depth = holes_depth, .breadth = holes_breadth,
	.from = 17, .depth_from = holes_from17,
	.from2 = 5, .depth_from2 = holes_from5,
	.list = "cpus:19,0,8,2", .list_cpus = holes_list, .nlist = ARRAY_SIZE(holes_list),
	.not_allowed = 3, /* present but offline */
};

static const struct fixture fx_cpuset = {
	.name = "xeon2s-cpuset", .ncpus = 64, .nallowed = 20,
	.depth = cpuset_depth, .breadth = cpuset_breadth,
	.from = 44, .depth_from = cpuset_from44,
	.from2 = 18, .depth_from2 = cpuset_from18,
	.list = "cpus:47,8,19", .list_cpus = cpuset_list, .nlist = ARRAY_SIZE(cpuset_list),
	.not_allowed = 0, /* online, outside the mask */
};

static const struct fixture fx_armbl = {
	.name = "armbl", .ncpus = 6, .nallowed = 6,
	.depth = armbl_depth, .breadth = armbl_breadth,
	.from = 4, .depth_from = armbl_breadth,
	.from2 = 2, .depth_from2 = armbl_from2,
	.list = "cpus:5,0", .list_cpus = armbl_list, .nlist = ARRAY_SIZE(armbl_list),
	.not_allowed = 6,
};

static const struct fixture fx_hybrid = {
	.name = "hybrid", .ncpus = 24, .nallowed = 24,
	.depth = hybrid_order, .breadth = hybrid_order,
	.from = 17, .depth_from = hybrid_from17,
	.from2 = 0, .depth_from2 = hybrid_order,
	.list = "cpus:23,1,16", .list_cpus = hybrid_list, .nlist = ARRAY_SIZE(hybrid_list),
	.not_allowed = 24,
};

/* ---- helpers ---------------------------------------------------------------------- */

static cbcmn_topo *load_dir(const char *dir)
{
	char err[512] = "";
	cbcmn_topo *t = NULL;
	int rc = cbcmn_topo_load(dir, &t, err, sizeof(err));

	if (rc)
		fail_msg("cbcmn_topo_load(%s): %d: %s", dir, rc, err);
	return t;
}

static cbcmn_topo *load(const char *name)
{
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), FIXTURES "/%s", name);
	return load_dir(dir);
}

/* Place n executors; every entry of out must be want[i % nwant], and the
 * oversubscribed flag must say whether n > nwant. */
static void expect_place(const char *what, const cbcmn_topo *t, cbcmn_policy p, uint32_t n,
			 uint64_t seed, const int *list, size_t nlist, int first, const int *want,
			 uint32_t nwant)
{
	int *out = calloc(n, sizeof(*out));
	bool over = !(n > nwant);
	char err[256] = "";
	int rc;

	assert_non_null(out);
	rc = cbcmn_place(t, p, n, seed, list, nlist, first, out, &over, err, sizeof(err));
	if (rc)
		fail_msg("%s %s n=%u: %d: %s", what, cbcmn_policy_name(p), n, rc, err);
	for (uint32_t i = 0; i < n; i++)
		if (out[i] != want[i % nwant])
			fail_msg("%s %s n=%u first_cpu=%d: executor %u on CPU %d, want %d", what,
				 cbcmn_policy_name(p), n, first, i, out[i], want[i % nwant]);
	if (over != (n > nwant))
		fail_msg("%s %s n=%u: oversubscribed %d, want %d", what, cbcmn_policy_name(p), n,
			 over, n > nwant);
	free(out);
}

/* n = 1, 2, half and all allowed CPUs, and all + 3 (wraps, flagged). */
static void expect_order(const struct fixture *f, const cbcmn_topo *t, cbcmn_policy p,
			 const int *list, size_t nlist, int first, const int *want, uint32_t nwant)
{
	const uint32_t ns[] = {1, 2, nwant / 2 ? nwant / 2 : 1, nwant, nwant + 3};

	for (size_t i = 0; i < ARRAY_SIZE(ns); i++)
		expect_place(f->name, t, p, ns[i], 0, list, nlist, first, want, nwant);
}

/* ---- per fixture: load, depth-first, breadth-first, random, cpus: ------------- */

static void test_loads(void **state)
{
	const struct fixture *f = *state;
	cbcmn_topo *t = load(f->name);

	assert_int_equal(cbcmn_topo_ncpus(t), f->ncpus);
	assert_int_equal(cbcmn_topo_nallowed(t), f->nallowed);
	cbcmn_topo_free(t);
}

static void test_depth_first(void **state)
{
	const struct fixture *f = *state;
	cbcmn_topo *t = load(f->name);

	expect_order(f, t, CBCMN_POLICY_DEPTH_FIRST, NULL, 0, -1, f->depth, (uint32_t)f->nallowed);
	/* first_cpu honoured: executor 0 there, its node and LLC first */
	expect_order(f, t, CBCMN_POLICY_DEPTH_FIRST, NULL, 0, f->from, f->depth_from,
		     (uint32_t)f->nallowed);
	expect_order(f, t, CBCMN_POLICY_DEPTH_FIRST, NULL, 0, f->from2, f->depth_from2,
		     (uint32_t)f->nallowed);
	cbcmn_topo_free(t);
}

static void test_breadth_first(void **state)
{
	const struct fixture *f = *state;
	cbcmn_topo *t = load(f->name);

	expect_order(f, t, CBCMN_POLICY_BREADTH_FIRST, NULL, 0, -1, f->breadth,
		     (uint32_t)f->nallowed);
	/* first_cpu is depth-first's alone: breadth-first ignores it */
	expect_order(f, t, CBCMN_POLICY_BREADTH_FIRST, NULL, 0, f->from, f->breadth,
		     (uint32_t)f->nallowed);
	cbcmn_topo_free(t);
}

static void place_random(const cbcmn_topo *t, uint32_t n, uint64_t seed, int *out, bool *over)
{
	char err[256] = "";
	int rc = cbcmn_place(t, CBCMN_POLICY_RANDOM, n, seed, NULL, 0, -1, out, over, err,
			     sizeof(err));
	if (rc)
		fail_msg("random n=%u seed=%llu: %d: %s", n, (unsigned long long)seed, rc, err);
}

static void test_random(void **state)
{
	const struct fixture *f = *state;
	cbcmn_topo *t = load(f->name);
	uint32_t na = (uint32_t)f->nallowed;
	int *a = calloc(na + 3, sizeof(int)), *b = calloc(na + 3, sizeof(int));
	bool over;

	assert_non_null(a);
	assert_non_null(b);
	place_random(t, na, 42, a, &over);
	assert_false(over);
	/* every CPU once, all of them allowed */
	for (uint32_t i = 0; i < na; i++) {
		const cbcmn_cpu_info *ci = cbcmn_topo_find(t, a[i]);

		if (!ci || !ci->allowed)
			fail_msg("%s random: executor %u on CPU %d, not an allowed CPU", f->name, i,
				 a[i]);
		for (uint32_t j = 0; j < i; j++)
			if (a[j] == a[i])
				fail_msg("%s random: CPU %d used twice", f->name, a[i]);
	}
	/* the same seed, the same placement; fewer executors, a prefix of it */
	const uint32_t ns[] = {1, 2, na / 2 ? na / 2 : 1, na};
	for (size_t k = 0; k < ARRAY_SIZE(ns); k++)
		expect_place(f->name, t, CBCMN_POLICY_RANDOM, ns[k], 42, NULL, 0, -1, a, na);
	/* more executors than CPUs: the same order again, flagged */
	place_random(t, na + 3, 42, b, &over);
	assert_true(over);
	for (uint32_t i = 0; i < na + 3; i++)
		assert_int_equal(b[i], a[i % na]);
	/* another seed, another placement (with 2 CPUs there are only 2
	 * orders, so look for one among a few seeds) */
	bool differs = false;
	for (uint64_t s = 1; s <= 8 && !differs; s++) {
		place_random(t, na, s, b, &over);
		differs = memcmp(a, b, na * sizeof(int)) != 0;
	}
	if (!differs)
		fail_msg("%s random: seeds 1..8 all give the placement of seed 42", f->name);
	free(a);
	free(b);
	cbcmn_topo_free(t);
}

static void test_cpus_list(void **state)
{
	const struct fixture *f = *state;
	cbcmn_topo *t = load(f->name);
	cbcmn_policy p;
	int *list, out[4];
	size_t nlist;
	char err[256] = "";
	bool over;

	assert_int_equal(cbcmn_policy_parse(f->list, &p, &list, &nlist, err, sizeof(err)), 0);
	assert_int_equal(p, CBCMN_POLICY_CPUS);
	assert_int_equal(nlist, f->nlist);
	assert_memory_equal(list, f->list_cpus, nlist * sizeof(int));
	/* exactly the list, in its order; past its end it wraps, flagged */
	const uint32_t ns[] = {1, 2, (uint32_t)nlist, (uint32_t)nlist + 3};
	for (size_t k = 0; k < ARRAY_SIZE(ns); k++)
		expect_place(f->name, t, p, ns[k], 0, list, nlist, -1, f->list_cpus,
			     (uint32_t)nlist);
	free(list);

	/* a CPU that is not there (or not online) is refused, by number */
	int bad[] = {f->list_cpus[0], f->not_allowed};
	err[0] = 0;
	assert_int_equal(cbcmn_place(t, p, 2, 0, bad, 2, -1, out, &over, err, sizeof(err)),
			 -EINVAL);
	char num[24];
	snprintf(num, sizeof(num), "CPU %d ", f->not_allowed);
	if (!strstr(err, num))
		fail_msg("%s: error for CPU %d does not name it: \"%s\"", f->name, f->not_allowed, err);
	cbcmn_topo_free(t);
}

/* ---- restricted allowed sets ------------------------------------------------------ */

/* A temporary root for a fixture with a cbcmn-allowed file of our own:
 * its devices/ is a symlink to the fixture's.  Free it with rm_copy(). */
static char *copy_with_allowed(const char *name, const char *allowed)
{
	char tmpl[] = "/tmp/cbcmn-place-XXXXXX", src[PATH_MAX], real[PATH_MAX];
	char path[sizeof(tmpl) + 32];
	char *dir = mkdtemp(tmpl);
	FILE *f;

	assert_non_null(dir);
	snprintf(src, sizeof(src), FIXTURES "/%s/devices", name);
	assert_non_null(realpath(src, real));
	snprintf(path, sizeof(path), "%s/devices", dir);
	assert_int_equal(symlink(real, path), 0);
	snprintf(path, sizeof(path), "%s/cbcmn-allowed", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "%s\n", allowed);
	assert_int_equal(fclose(f), 0);
	return strdup(dir);
}

static void rm_copy(char *dir)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/devices", dir);
	assert_int_equal(unlink(path), 0);
	snprintf(path, sizeof(path), "%s/cbcmn-allowed", dir);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
	free(dir);
}

static void test_restricted_allowed(void **state)
{
	(void)state;
	static const struct fixture f = {.name = "xeon2s restricted"};
	char *dir = copy_with_allowed("xeon2s", "8-23,40-47");
	cbcmn_topo *t = load_dir(dir);

	assert_int_equal(cbcmn_topo_nallowed(t), 24);
	/* depth-first from 8 (node 0): 8-15, their siblings 40-47, node 1 */
	static const int depth[] = {
		8, 9, 10, 11, 12, 13, 14, 15, 40, 41, 42, 43, 44, 45, 46, 47,
		16, 17, 18, 19, 20, 21, 22, 23,
	};
	/* breadth-first: node 0 (8-15, 40-47) and node 1 (16-23) in turn */
	static const int breadth[] = {
		8, 16, 9, 17, 10, 18, 11, 19, 12, 20, 13, 21, 14, 22, 15, 23,
		40, 41, 42, 43, 44, 45, 46, 47,
	};
	expect_order(&f, t, CBCMN_POLICY_DEPTH_FIRST, NULL, 0, -1, depth, ARRAY_SIZE(depth));
	expect_order(&f, t, CBCMN_POLICY_BREADTH_FIRST, NULL, 0, -1, breadth,
		     ARRAY_SIZE(breadth));

	/* random stays inside the set */
	int out[24 + 3];
	bool over;
	place_random(t, 27, 7, out, &over);
	assert_true(over);
	for (int i = 0; i < 27; i++)
		if (!((out[i] >= 8 && out[i] <= 23) || (out[i] >= 40 && out[i] <= 47)))
			fail_msg("random placed executor %d on CPU %d, outside 8-23,40-47", i,
				 out[i]);

	/* outside the set: refused as a first CPU and in a list */
	int one = 0;
	char err[256] = "";
	assert_int_equal(cbcmn_place(t, CBCMN_POLICY_DEPTH_FIRST, 1, 0, NULL, 0, 0, out, &over,
				     err, sizeof(err)),
			 -EINVAL);
	err[0] = 0;
	assert_int_equal(cbcmn_place(t, CBCMN_POLICY_CPUS, 1, 0, &one, 1, -1, out, &over, err,
				     sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "CPU 0"));
	cbcmn_topo_free(t);
	rm_copy(dir);
}

/* A core whose first thread is not allowed: its sibling is the one thread
 * the core has to give, so it counts as a first thread. */
static void test_restricted_first_threads(void **state)
{
	(void)state;
	static const struct fixture f = {.name = "xeon2s 1-3,32-35"};
	char *dir = copy_with_allowed("xeon2s", "1-3,32-35");
	cbcmn_topo *t = load_dir(dir);

	/* cores 0 {32}, 1 {1,33}, 2 {2,34}, 3 {3,35}; from 1 */
	static const int depth[] = {1, 32, 2, 3, 33, 34, 35};
	static const int breadth[] = {32, 1, 2, 3, 33, 34, 35};
	expect_order(&f, t, CBCMN_POLICY_DEPTH_FIRST, NULL, 0, -1, depth, ARRAY_SIZE(depth));
	expect_order(&f, t, CBCMN_POLICY_BREADTH_FIRST, NULL, 0, -1, breadth,
		     ARRAY_SIZE(breadth));
	cbcmn_topo_free(t);
	rm_copy(dir);
}

/* A mask that names only offline CPUs loads (nallowed 0), and every
 * policy refuses it with -ENODEV; so does the tool. */
static void test_no_allowed_cpu(void **state)
{
	(void)state;
	char *dir = copy_with_allowed("holes", "3,9");
	cbcmn_topo *t = load_dir(dir);
	int out[2], one = 0;
	bool over;

	assert_int_equal(cbcmn_topo_nallowed(t), 0);
	for (int p = CBCMN_POLICY_DEPTH_FIRST; p <= CBCMN_POLICY_CPUS; p++) {
		char err[256] = "";
		int rc = cbcmn_place(t, (cbcmn_policy)p, 2, 0, &one, 1, -1, out, &over, err,
				     sizeof(err));
		if (rc != -ENODEV || !err[0])
			fail_msg("%s with no allowed CPU: %d \"%s\", want -ENODEV",
				 cbcmn_policy_name((cbcmn_policy)p), rc, err);
	}
	cbcmn_topo_free(t);
	rm_copy(dir);
}

/* ---- bad input ------------------------------------------------------------------------ */

static void parse_fails(const char *s, const char *needle)
{
	cbcmn_policy p = CBCMN_POLICY_RANDOM;
	int *list = (int *)&p; /* must be overwritten with NULL */
	size_t n = 99;
	char err[256] = "";
	int rc = cbcmn_policy_parse(s, &p, &list, &n, err, sizeof(err));

	if (rc != -EINVAL)
		fail_msg("cbcmn_policy_parse(\"%s\"): %d, want -EINVAL", s, rc);
	assert_null(list);
	if (!err[0] || !strstr(err, needle))
		fail_msg("cbcmn_policy_parse(\"%s\"): error \"%s\" does not say \"%s\"", s, err,
			 needle);
}

static void test_parse(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		cbcmn_policy p;
	} good[] = {
		{"depth-first", CBCMN_POLICY_DEPTH_FIRST},
		{"breadth-first", CBCMN_POLICY_BREADTH_FIRST},
		{"random", CBCMN_POLICY_RANDOM},
	};
	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		cbcmn_policy p;
		int *list = (int *)&p;
		size_t n = 99;

		assert_int_equal(cbcmn_policy_parse(good[i].s, &p, &list, &n, NULL, 0), 0);
		assert_int_equal(p, good[i].p);
		assert_null(list);
		assert_int_equal(n, 0);
		assert_string_equal(cbcmn_policy_name(p), good[i].s);
	}
	assert_string_equal(cbcmn_policy_name(CBCMN_POLICY_CPUS), "cpus");
	assert_non_null(cbcmn_policy_name((cbcmn_policy)77));

	cbcmn_policy p;
	int *list;
	size_t n;
	assert_int_equal(cbcmn_policy_parse("cpus:7", &p, &list, &n, NULL, 0), 0);
	assert_int_equal(n, 1);
	assert_int_equal(list[0], 7);
	free(list);

	parse_fails("depth_first", "depth_first");
	parse_fails("", "unknown placement policy");
	parse_fails("Random", "Random");
	parse_fails("cpus:", "empty");
	parse_fails("cpus:1-0", "1-0");
	parse_fails("cpus:0,0", "CPU 0 is listed twice");
	parse_fails("cpus:0-3,2", "CPU 2 is listed twice");
	parse_fails("cpus:0,", "bad item");
	parse_fails("cpus:,1", "bad item");
	parse_fails("cpus:a", "bad item");
	parse_fails("cpus:-1", "bad item");
	parse_fails("cpus:1-", "bad item");
	parse_fails("cpus:1 ", "bad item");
	parse_fails("cpus:0-99999999999", "stop at");
	/* no crash and an error without an err buffer, or without a string */
	assert_int_equal(cbcmn_policy_parse("bogus", &p, &list, &n, NULL, 0), -EINVAL);
	assert_int_equal(cbcmn_policy_parse(NULL, &p, &list, &n, NULL, 0), -EINVAL);
}

static void place_fails(const cbcmn_topo *t, cbcmn_policy p, uint32_t n, const int *list,
			size_t nlist, int first, const char *needle)
{
	int out[8] = {0};
	bool over = true;
	char err[256] = "";
	int rc = cbcmn_place(t, p, n, 0, list, nlist, first, out, &over, err, sizeof(err));

	if (rc != -EINVAL)
		fail_msg("cbcmn_place(%s, n=%u): %d, want -EINVAL", cbcmn_policy_name(p), n, rc);
	if (!err[0] || !strstr(err, needle))
		fail_msg("cbcmn_place(%s, n=%u): error \"%s\" does not say \"%s\"",
			 cbcmn_policy_name(p), n, err, needle);
}

static void test_place_rejects_bad_input(void **state)
{
	(void)state;
	cbcmn_topo *t = load("xeon2s");
	int out[4];

	for (int p = CBCMN_POLICY_DEPTH_FIRST; p <= CBCMN_POLICY_CPUS; p++)
		place_fails(t, (cbcmn_policy)p, 0, (int[]){0}, 1, -1, "0 executors");
	place_fails(t, CBCMN_POLICY_CPUS, 1, NULL, 0, -1, "empty");
	place_fails(t, CBCMN_POLICY_CPUS, 1, (int[]){5, 64}, 2, -1, "CPU 64");
	place_fails(t, CBCMN_POLICY_CPUS, 1, (int[]){5, -3}, 2, -1, "CPU -3");
	place_fails(t, CBCMN_POLICY_CPUS, 2, (int[]){5, 6, 5}, 3, -1, "CPU 5 is listed twice");
	place_fails(t, CBCMN_POLICY_DEPTH_FIRST, 1, NULL, 0, 64, "first_cpu 64");
	place_fails(t, CBCMN_POLICY_DEPTH_FIRST, 1, NULL, 0, -2, "first_cpu -2");
	place_fails(t, (cbcmn_policy)9, 1, NULL, 0, -1, "policy");
	assert_int_equal(cbcmn_place(NULL, CBCMN_POLICY_RANDOM, 1, 0, NULL, 0, -1, out, NULL,
				     NULL, 0),
			 -EINVAL);
	assert_int_equal(cbcmn_place(t, CBCMN_POLICY_RANDOM, 1, 0, NULL, 0, -1, NULL, NULL,
				     NULL, 0),
			 -EINVAL);
	/* no err buffer, no flag: still an answer */
	assert_int_equal(cbcmn_place(t, CBCMN_POLICY_BREADTH_FIRST, 4, 0, NULL, 0, -1, out, NULL,
				     NULL, 0),
			 0);
	assert_int_equal(out[1], 16);
	cbcmn_topo_free(t);
}

/* Random is uniform enough that, over many seeds, every CPU is some
 * placement's executor 0 (the seeds are fixed: this cannot flake). */
static void test_random_covers_every_cpu(void **state)
{
	(void)state;
	cbcmn_topo *t = load("epyc8n");
	int hits[128] = {0}, cpu;
	bool over;

	for (uint64_t s = 0; s < 4096; s++) {
		place_random(t, 1, s, &cpu, &over);
		assert_in_range(cpu, 0, 127);
		hits[cpu]++;
	}
	/* 32 expected for each: a CPU below 8 or above 64 means a skew */
	for (int c = 0; c < 128; c++)
		if (hits[c] < 8 || hits[c] > 64)
			fail_msg("random: CPU %d is executor 0 for %d of 4096 seeds", c, hits[c]);
	cbcmn_topo_free(t);
}

/* ---- the tool ------------------------------------------------------------------------------ */

/* room for the exe path and the suffix: no truncation to worry about */
static char tool[PATH_MAX + 64];
#define CMD_MAX (4 * PATH_MAX)

/* build[/SAN]/bin/cbcmn-affinity next to this suite's build, else the
 * release build's, which is what `make` builds. */
static bool find_tool(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n > 0) {
		exe[n] = 0;
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			snprintf(tool, sizeof(tool), "%s/../bin/cbcmn-affinity", exe);
			if (access(tool, X_OK) == 0)
				return true;
		}
	}
	snprintf(tool, sizeof(tool), "build/bin/cbcmn-affinity");
	return access(tool, X_OK) == 0;
}

/* Run cmd through the shell; its exit status, and the stderr of all of
 * it (every command of a pipeline) in err. */
static int run(const char *cmd, char *err, size_t errlen)
{
	char full[CMD_MAX + 64], path[] = "/tmp/cbcmn-place-err-XXXXXX";
	int fd = mkstemp(path);
	int st;

	assert_true(fd >= 0);
	snprintf(full, sizeof(full), "(%s) 2>%s", cmd, path);
	st = system(full);
	ssize_t n = pread(fd, err, errlen - 1, 0);
	err[n > 0 ? n : 0] = 0;
	close(fd);
	unlink(path);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static int lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static void test_tool(void **state)
{
	(void)state;
	char cmd[CMD_MAX], err[1024];

	if (!find_tool())
		T_SKIP("build/bin/cbcmn-affinity is not built (run make first)");
	if (system("python3 -c 'import json' >/dev/null 2>&1") != 0)
		T_SKIP("no python3 to check the JSON with");

	/* valid JSON, and what it says matches the library */
	snprintf(cmd, sizeof(cmd),
		 "%s --sysfs-root " FIXTURES "/epyc8n --json | python3 -c '"
		 "import json, sys\n"
		 "d = json.load(sys.stdin)\n"
		 "p = {x[\"policy\"]: x[\"cpus\"] for x in d[\"placements\"]}\n"
		 "assert p[\"depth-first\"][:9] == [0, 1, 2, 3, 4, 5, 6, 7, 64], p\n"
		 "assert p[\"breadth-first\"][:9] == [0, 8, 16, 24, 32, 40, 48, 56, 2], p\n"
		 "assert sorted(p[\"random\"]) == list(range(128))\n"
		 "assert len(d[\"nodes\"]) == 8 and d[\"nodes\"][0][\"distances\"][4] == 32\n"
		 "assert len(d[\"llcs\"]) == 32 and len(d[\"cpus\"]) == 128\n"
		 "'",
		 tool);
	if (run(cmd, err, sizeof(err)) != 0)
		fail_msg("%s: %s", cmd, err);
	/* every fixture, table and JSON */
	static const char *const all[] = {"vm2",   "xeon2s", "xeon2s-cpuset", "epyc8n",
					  "holes", "hybrid", "armbl"};
	for (size_t i = 0; i < ARRAY_SIZE(all); i++) {
		snprintf(cmd, sizeof(cmd),
			 "%s --sysfs-root " FIXTURES "/%s --json | python3 -m json.tool >/dev/null "
			 "&& %s --sysfs-root " FIXTURES "/%s >/dev/null",
			 tool, all[i], tool, all[i]);
		if (run(cmd, err, sizeof(err)) != 0)
			fail_msg("%s: %s", cmd, err);
		assert_string_equal(err, "");
	}

	/* a bad policy: exit 1, one line on stderr naming it */
	snprintf(cmd, sizeof(cmd), "%s --sysfs-root " FIXTURES "/vm2 --policy sideways >/dev/null",
		 tool);
	assert_int_equal(run(cmd, err, sizeof(err)), 1);
	assert_int_equal(lines(err), 1);
	assert_non_null(strstr(err, "sideways"));

	/* a list with a CPU the machine lacks */
	snprintf(cmd, sizeof(cmd), "%s --sysfs-root " FIXTURES "/vm2 --policy cpus:0,5 >/dev/null",
		 tool);
	assert_int_equal(run(cmd, err, sizeof(err)), 1);
	assert_int_equal(lines(err), 1);
	assert_non_null(strstr(err, "CPU 5"));

	/* a root that is not a sysfs tree */
	snprintf(cmd, sizeof(cmd), "%s --sysfs-root /nonexistent-cbcmn-root >/dev/null", tool);
	assert_int_equal(run(cmd, err, sizeof(err)), 1);
	assert_int_equal(lines(err), 1);
	assert_non_null(strstr(err, "/nonexistent-cbcmn-root"));

	/* a mask with no CPU in it */
	char *dir = copy_with_allowed("holes", "3,9");
	snprintf(cmd, sizeof(cmd), "%s --sysfs-root %s >/dev/null", tool, dir);
	int rc = run(cmd, err, sizeof(err));
	rm_copy(dir);
	assert_int_equal(rc, 1);
	assert_int_equal(lines(err), 1);
	assert_non_null(strstr(err, "no allowed CPU"));

	/* bad option values */
	snprintf(cmd, sizeof(cmd), "%s -n zero >/dev/null", tool);
	assert_int_equal(run(cmd, err, sizeof(err)), 1);
	assert_int_equal(lines(err), 1);

	/* more executors than CPUs: works, warns once */
	snprintf(cmd, sizeof(cmd),
		 "%s --sysfs-root " FIXTURES "/vm2 -n 5 --policy breadth-first --json"
		 " | python3 -c 'import json, sys; d = json.load(sys.stdin); "
		 "assert d[\"placements\"][0][\"cpus\"] == [0, 1, 0, 1, 0]; "
		 "assert d[\"placements\"][0][\"oversubscribed\"]'",
		 tool);
	assert_int_equal(run(cmd, err, sizeof(err)), 0);
	assert_int_equal(lines(err), 1);
	assert_non_null(strstr(err, "share CPUs"));

	/* --help is not an error */
	snprintf(cmd, sizeof(cmd), "%s --help | grep -q EXAMPLES", tool);
	assert_int_equal(run(cmd, err, sizeof(err)), 0);
}

/* One test per fixture and policy, named after both. */
#define FX_TESTS(fx, name)                                                            \
	{name " loads", test_loads, NULL, NULL, (void *)&fx},                              \
	{name " depth-first", test_depth_first, NULL, NULL, (void *)&fx},                  \
	{name " breadth-first", test_breadth_first, NULL, NULL, (void *)&fx},              \
	{name " random", test_random, NULL, NULL, (void *)&fx},                            \
	{name " cpus:LIST", test_cpus_list, NULL, NULL, (void *)&fx}

int main(void)
{
	const struct CMUnitTest tests[] = {
		FX_TESTS(fx_vm2, "vm2"),
		FX_TESTS(fx_xeon2s, "xeon2s"),
		FX_TESTS(fx_cpuset, "xeon2s-cpuset"),
		FX_TESTS(fx_epyc8n, "epyc8n"),
		FX_TESTS(fx_holes, "holes"),
		FX_TESTS(fx_hybrid, "hybrid"),
		FX_TESTS(fx_armbl, "armbl"),
		cmocka_unit_test(test_restricted_allowed),
		cmocka_unit_test(test_restricted_first_threads),
		cmocka_unit_test(test_no_allowed_cpu),
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_place_rejects_bad_input),
		cmocka_unit_test(test_random_covers_every_cpu),
		cmocka_unit_test(test_tool),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
