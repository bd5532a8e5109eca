/* test_topo: the topology loader on sysfs-shaped fixtures, on broken and fuzzed
 * input, and on the live machine against lscpu, numactl and the affinity mask. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "helpers.h"
#include "topo.h" /* the internal arrays place.c reads: checked here too */

static char fixtures[PATH_MAX]; /* .../tests/fixtures/sysfs */

/* The fixtures sit in the source tree; the binary in build[/SAN]/tests. */
static int find_fixtures(void **state)
{
	(void)state;
	char exe[PATH_MAX], cand[PATH_MAX + 64];
	/* The environment must not point the live tests at a fixture. */
	unsetenv("CBCMN_SYSFS_ROOT");
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		char *d = dirname(exe);
		for (int up = 0; up < 5; up++) {
			snprintf(cand, sizeof(cand), "%s/tests/fixtures/sysfs/vm2/devices", d);
			if (access(cand, F_OK) == 0) {
				snprintf(fixtures, sizeof(fixtures), "%s/tests/fixtures/sysfs", d);
				return 0;
			}
			d = dirname(d);
		}
	}
	if (access("tests/fixtures/sysfs/vm2/devices", F_OK) == 0 &&
	    realpath("tests/fixtures/sysfs", fixtures))
		return 0;
	fprintf(stderr, "test_topo: cannot find tests/fixtures/sysfs near %s or in the cwd\n", exe);
	return -1;
}

static void fixture_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", fixtures, name);
}

static cbcmn_topo *load_fixture(const char *name)
{
	char root[PATH_MAX + 64], err[512];
	cbcmn_topo *t = NULL;
	fixture_path(root, sizeof(root), name);
	int rc = cbcmn_topo_load(root, &t, err, sizeof(err));
	if (rc)
		fail_msg("loading %s: %s (%s)", name, err, strerror(-rc));
	return t;
}

/* ---- checks shared by every topology ---------------------------------------- */

/* What must hold of any topology, whatever machine it describes. */
static void check_invariants(const cbcmn_topo *t)
{
	int ncpus = cbcmn_topo_ncpus(t), nn = cbcmn_topo_nnodes(t);
	int nallowed = 0;
	assert_true(ncpus > 0);
	assert_true(nn > 0);
	int *core_seen = calloc((size_t)t->ncores, sizeof(int));
	int *llc_seen = calloc((size_t)t->nllcs, sizeof(int));
	int *node_seen = calloc((size_t)nn, sizeof(int));
	assert_non_null(core_seen);
	assert_non_null(llc_seen);
	assert_non_null(node_seen);
	for (int i = 0; i < ncpus; i++) {
		const cbcmn_cpu_info *c = cbcmn_topo_cpu(t, i);
		assert_non_null(c);
		if (i)
			assert_true(c->cpu > cbcmn_topo_cpu(t, i - 1)->cpu);
		assert_ptr_equal(cbcmn_topo_find(t, c->cpu), c);
		assert_in_range(c->core, 0, t->ncores - 1);
		assert_in_range(c->llc, 0, t->nllcs - 1);
		assert_in_range(c->node, 0, nn - 1);
		assert_in_range(c->kind, 0, 1);
		assert_in_range(c->smt, 0, t->core_ncpus[c->core] - 1);
		assert_true(cbcmn__topo_package_index(t, c->package) >= 0);
		/* Indexes are given in order of first CPU: a new one is the next. */
		if (!core_seen[c->core]++)
			assert_true(c->core == 0 || core_seen[c->core - 1]);
		if (!llc_seen[c->llc]++)
			assert_true(c->llc == 0 || llc_seen[c->llc - 1]);
		node_seen[c->node]++;
		nallowed += c->allowed;
		/* SMT siblings: same package, node, LLC and kind; smt 0 first. */
		const cbcmn_cpu_info *first = NULL;
		for (int k = 0; k < ncpus && !first; k++)
			if (cbcmn_topo_cpu(t, k)->core == c->core)
				first = cbcmn_topo_cpu(t, k);
		assert_int_equal(first->smt, 0);
		assert_int_equal(first->package, c->package);
		assert_int_equal(first->node, c->node);
		assert_int_equal(first->llc, c->llc);
		assert_int_equal(first->kind, c->kind);
	}
	for (int k = 0; k < t->ncores; k++)
		assert_int_equal(core_seen[k], t->core_ncpus[k]);
	for (int k = 0; k < t->nllcs; k++)
		assert_int_equal(llc_seen[k], t->llc_ncpus[k]);
	for (int a = 0; a < nn; a++) {
		assert_int_equal(node_seen[a], t->node_ncpus[a]);
		if (a)
			assert_true(cbcmn_topo_node_id(t, a) > cbcmn_topo_node_id(t, a - 1));
		assert_int_equal(cbcmn_topo_distance(t, a, a), 10);
		for (int b = 0; b < nn; b++)
			assert_in_range(cbcmn_topo_distance(t, a, b), 10, 255);
	}
	int pk = 0;
	for (int p = 0; p < t->npackages; p++)
		pk += t->package_ncpus[p];
	assert_int_equal(pk, ncpus);
	assert_int_equal(nallowed, cbcmn_topo_nallowed(t));
	free(core_seen);
	free(llc_seen);
	free(node_seen);

	/* Out of range is an answer, not a crash. */
	assert_null(cbcmn_topo_cpu(t, -1));
	assert_null(cbcmn_topo_cpu(t, ncpus));
	assert_null(cbcmn_topo_find(t, -1));
	assert_null(cbcmn_topo_find(t, 1 << 20));
	assert_int_equal(cbcmn_topo_node_id(t, nn), -EINVAL);
	assert_int_equal(cbcmn_topo_distance(t, 0, nn), -EINVAL);
	assert_int_equal(cbcmn_topo_distance(t, -1, 0), -EINVAL);
}

static void check_counts(const cbcmn_topo *t, int ncpus, int nallowed, int ncores, int nnodes,
			 int nllcs, int npackages)
{
	check_invariants(t);
	assert_int_equal(cbcmn_topo_ncpus(t), ncpus);
	assert_int_equal(cbcmn_topo_nallowed(t), nallowed);
	assert_int_equal(cbcmn_topo_ncores(t), ncores);
	assert_int_equal(cbcmn_topo_nnodes(t), nnodes);
	assert_int_equal(cbcmn_topo_nllcs(t), nllcs);
	assert_int_equal(cbcmn_topo_npackages(t), npackages);
}

struct want {
	int cpu, package, core, smt, node, llc, kind;
	bool allowed;
};

static void check_cpu(const cbcmn_topo *t, struct want w)
{
	const cbcmn_cpu_info *c = cbcmn_topo_find(t, w.cpu);
	if (!c)
		fail_msg("cpu%d: not in the topology", w.cpu);
	if (c->package != w.package || c->core != w.core || c->smt != w.smt || c->node != w.node ||
	    c->llc != w.llc || c->kind != w.kind || c->allowed != w.allowed)
		fail_msg("cpu%d: package %d core %d smt %d node %d llc %d kind %d allowed %d, "
			 "expected %d %d %d %d %d %d %d",
			 w.cpu, c->package, c->core, c->smt, c->node, c->llc, c->kind, c->allowed,
			 w.package, w.core, w.smt, w.node, w.llc, w.kind, w.allowed);
}

static void check_distances(const cbcmn_topo *t, int n, const int *want)
{
	for (int a = 0; a < n; a++)
		for (int b = 0; b < n; b++)
			if (cbcmn_topo_distance(t, a, b) != want[a * n + b])
				fail_msg("distance(%d, %d) = %d, expected %d", a, b,
					 cbcmn_topo_distance(t, a, b), want[a * n + b]);
}

/* ---- the fixtures ------------------------------------------------------------ */

static void test_vm2(void **state)
{
	(void)state;
	cbcmn_topo *t = load_fixture("vm2");
	check_counts(t, 2, 2, 2, 1, 1, 1);
	check_cpu(t, (struct want){0, 0, 0, 0, 0, 0, 0, true});
	check_cpu(t, (struct want){1, 0, 1, 0, 0, 0, 0, true});
	assert_int_equal(cbcmn_topo_node_id(t, 0), 0);
	check_distances(t, 1, (int[]){10});
	assert_false(t->live);
	cbcmn_topo_free(t);
}

static void test_xeon2s(void **state)
{
	(void)state;
	cbcmn_topo *t = load_fixture("xeon2s");
	check_counts(t, 64, 64, 32, 2, 2, 2);
	/* Intel numbering: thread 0 of every core first, socket by socket. */
	for (int c = 0; c < 64; c++) {
		int core = c % 32, s = core / 16;
		check_cpu(t, (struct want){c, s, core, c / 32, s, s, 0, true});
	}
	check_cpu(t, (struct want){15, 0, 15, 0, 0, 0, 0, true});
	check_cpu(t, (struct want){16, 1, 16, 0, 1, 1, 0, true});
	check_cpu(t, (struct want){32, 0, 0, 1, 0, 0, 0, true});
	check_cpu(t, (struct want){63, 1, 31, 1, 1, 1, 0, true});
	assert_int_equal(cbcmn_topo_node_id(t, 1), 1);
	check_distances(t, 2, (int[]){10, 21, 21, 10});
	assert_int_equal(t->core_ncpus[5], 2);
	assert_int_equal(t->llc_ncpus[1], 32);
	assert_int_equal(t->node_ncpus[0], 32);
	cbcmn_topo_free(t);
}

static void test_xeon2s_cpuset(void **state)
{
	(void)state;
	cbcmn_topo *t = load_fixture("xeon2s-cpuset"); /* cbcmn-allowed: 8-19,40-47 */
	check_counts(t, 64, 20, 32, 2, 2, 2);
	for (int c = 0; c < 64; c++)
		assert_int_equal(cbcmn_topo_find(t, c)->allowed, (c >= 8 && c <= 19) || (c >= 40 && c <= 47));
	check_cpu(t, (struct want){8, 0, 8, 0, 0, 0, 0, true});
	check_cpu(t, (struct want){40, 0, 8, 1, 0, 0, 0, true});
	check_cpu(t, (struct want){48, 1, 16, 1, 1, 1, 0, false});
	assert_int_equal(t->node_nallowed[0], 16);
	assert_int_equal(t->node_nallowed[1], 4);
	cbcmn_topo_free(t);
}

static void test_epyc8n(void **state)
{
	(void)state;
	cbcmn_topo *t = load_fixture("epyc8n");
	check_counts(t, 128, 128, 64, 8, 32, 2);
	/* AMD numbering: CPU c < 64 thread 0 of core c, 64 + c its sibling;
	 * 8 cores a node, 2 a CCX, 32 a socket. */
	for (int c = 0; c < 128; c++) {
		int core = c % 64;
		check_cpu(t, (struct want){c, core / 32, core, c / 64, core / 8, core / 2, 0, true});
	}
	check_cpu(t, (struct want){9, 0, 9, 0, 1, 4, 0, true});
	check_cpu(t, (struct want){127, 1, 63, 1, 7, 31, 0, true});
	int d[64];
	for (int a = 0; a < 8; a++) {
		assert_int_equal(cbcmn_topo_node_id(t, a), a);
		assert_int_equal(t->node_ncpus[a], 16);
		for (int b = 0; b < 8; b++)
			d[a * 8 + b] = a == b ? 10 : a / 4 == b / 4 ? 12 : 32;
	}
	check_distances(t, 8, d);
	assert_int_equal(cbcmn_topo_distance(t, 0, 3), 12);
	assert_int_equal(cbcmn_topo_distance(t, 3, 4), 32);
	assert_int_equal(t->llc_ncpus[31], 4);
	cbcmn_topo_free(t);
}

static void test_holes(void **state)
{
	(void)state;
	cbcmn_topo *t = load_fixture("holes");
	/* 0-11,16-19 present, 3 and 9 offline: 14 CPUs; nodes 0 and 2. */
	check_counts(t, 14, 14, 8, 2, 2, 2);
	static const int order[] = {0, 1, 2, 4, 5, 6, 7, 8, 10, 11, 16, 17, 18, 19};
	for (int i = 0; i < 14; i++)
		assert_int_equal(cbcmn_topo_cpu(t, i)->cpu, order[i]);
	for (int c = 3; c < 20; c += 6) /* 3, 9: offline; 15: absent */
		assert_null(cbcmn_topo_find(t, c));
	assert_null(cbcmn_topo_find(t, 12));
	assert_null(cbcmn_topo_find(t, 20));
	check_cpu(t, (struct want){0, 0, 0, 0, 0, 0, 0, true});
	check_cpu(t, (struct want){1, 0, 0, 1, 0, 0, 0, true});
	check_cpu(t, (struct want){2, 0, 1, 0, 0, 0, 0, true}); /* its sibling 3 is offline */
	check_cpu(t, (struct want){4, 0, 2, 0, 0, 0, 0, true});
	check_cpu(t, (struct want){7, 0, 3, 1, 0, 0, 0, true});
	check_cpu(t, (struct want){8, 1, 4, 0, 1, 1, 0, true}); /* so is 9 */
	check_cpu(t, (struct want){11, 1, 5, 1, 1, 1, 0, true});
	check_cpu(t, (struct want){16, 1, 6, 0, 1, 1, 0, true});
	check_cpu(t, (struct want){19, 1, 7, 1, 1, 1, 0, true});
	assert_int_equal(t->core_ncpus[1], 1);
	assert_int_equal(t->core_ncpus[4], 1);
	assert_int_equal(t->core_ncpus[6], 2);
	/* Node index 1 is the kernel's node 2. */
	assert_int_equal(cbcmn_topo_node_id(t, 0), 0);
	assert_int_equal(cbcmn_topo_node_id(t, 1), 2);
	check_distances(t, 2, (int[]){10, 20, 20, 10});
	assert_int_equal(t->nbits, 20);
	cbcmn_topo_free(t);
}

static void test_hybrid(void **state)
{
	(void)state;
	cbcmn_topo *t = load_fixture("hybrid");
	check_counts(t, 24, 24, 16, 1, 1, 1);
	for (int c = 0; c < 16; c++)
		check_cpu(t, (struct want){c, 0, c / 2, c % 2, 0, 0, 0, true});
	for (int c = 16; c < 24; c++)
		check_cpu(t, (struct want){c, 0, c - 8, 0, 0, 0, 1, true});
	check_distances(t, 1, (int[]){10});
	cbcmn_topo_free(t);
}

/* arm64 DT: core_id repeats per cluster (0-3, 0-1) in one package; no
 * cache dirs (LLC = package), no node dir (one node 0), kind from
 * cpu_capacity. */
static void test_armbl(void **state)
{
	(void)state;
	cbcmn_topo *t = load_fixture("armbl");
	check_counts(t, 6, 6, 6, 1, 1, 1);
	for (int c = 0; c < 6; c++)
		check_cpu(t, (struct want){c, 0, c, 0, 0, 0, c < 4, true});
	assert_int_equal(cbcmn_topo_node_id(t, 0), 0);
	check_distances(t, 1, (int[]){10});
	cbcmn_topo_free(t);
}

/* ---- where the topology comes from -------------------------------------------- */

static void test_env_root(void **state)
{
	(void)state;
	char root[PATH_MAX + 64], err[512];
	cbcmn_topo *t = NULL;
	fixture_path(root, sizeof(root), "xeon2s");
	assert_int_equal(setenv("CBCMN_SYSFS_ROOT", root, 1), 0);
	assert_int_equal(cbcmn_topo_load(NULL, &t, err, sizeof(err)), 0);
	assert_int_equal(cbcmn_topo_ncpus(t), 64);
	assert_int_equal(cbcmn_topo_nnodes(t), 2);
	assert_false(t->live);
	cbcmn_topo_free(t);

	/* An explicit root wins over the environment. */
	fixture_path(root, sizeof(root), "holes/"); /* a trailing slash is harmless */
	assert_int_equal(cbcmn_topo_load(root, &t, err, sizeof(err)), 0);
	assert_int_equal(cbcmn_topo_ncpus(t), 14);
	assert_null(strstr(t->root, "//"));
	cbcmn_topo_free(t);

	/* Empty means unset: the live machine. */
	assert_int_equal(setenv("CBCMN_SYSFS_ROOT", "", 1), 0);
	assert_int_equal(cbcmn_topo_load(NULL, &t, err, sizeof(err)), 0);
	assert_true(t->live);
	assert_string_equal(t->root, "/sys");
	cbcmn_topo_free(t);
	unsetenv("CBCMN_SYSFS_ROOT");
}

/* A temporary root whose devices/ is a fixture's: cbcmn-allowed can be
 * written there without touching the fixture. */
struct tmproot {
	char dir[64];
	char allowed[128];
};

static void tmproot_make(struct tmproot *r, const char *fixture)
{
	char target[PATH_MAX + 64], link[128];
	snprintf(r->dir, sizeof(r->dir), "/tmp/cbcmn-topo-XXXXXX");
	assert_non_null(mkdtemp(r->dir));
	snprintf(target, sizeof(target), "%s/%s/devices", fixtures, fixture);
	snprintf(link, sizeof(link), "%s/devices", r->dir);
	assert_int_equal(symlink(target, link), 0);
	snprintf(r->allowed, sizeof(r->allowed), "%s/cbcmn-allowed", r->dir);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void tmproot_remove(struct tmproot *r)
{
	char link[128];
	snprintf(link, sizeof(link), "%s/devices", r->dir);
	unlink(r->allowed);
	unlink(link);
	rmdir(r->dir);
}

static void test_allowed_file(void **state)
{
	(void)state;
	struct tmproot r;
	char err[512];
	cbcmn_topo *t;
	tmproot_make(&r, "holes");

	assert_int_equal(cbcmn_topo_load(r.dir, &t, err, sizeof(err)), 0);
	assert_int_equal(cbcmn_topo_nallowed(t), 14); /* no file: every online CPU */
	cbcmn_topo_free(t);

	write_file(r.allowed, "0-2,16\n");
	assert_int_equal(cbcmn_topo_load(r.dir, &t, err, sizeof(err)), 0);
	check_counts(t, 14, 4, 8, 2, 2, 2);
	check_cpu(t, (struct want){16, 1, 6, 0, 1, 1, 0, true});
	check_cpu(t, (struct want){17, 1, 6, 1, 1, 1, 0, false});
	assert_int_equal(t->node_nallowed[0], 3);
	assert_int_equal(t->node_nallowed[1], 1);
	cbcmn_topo_free(t);

	/* Offline CPUs are dropped from a mask, as the kernel does. */
	write_file(r.allowed, "3,9,10\n");
	assert_int_equal(cbcmn_topo_load(r.dir, &t, err, sizeof(err)), 0);
	assert_int_equal(cbcmn_topo_nallowed(t), 1);
	cbcmn_topo_free(t);

	/* An empty mask loads; placement is what refuses it. */
	write_file(r.allowed, "\n");
	assert_int_equal(cbcmn_topo_load(r.dir, &t, err, sizeof(err)), 0);
	assert_int_equal(cbcmn_topo_nallowed(t), 0);
	cbcmn_topo_free(t);

	/* A CPU that does not exist (a hole), or garbage, is an error. */
	write_file(r.allowed, "0-2,13\n");
	t = (cbcmn_topo *)&r;
	assert_int_equal(cbcmn_topo_load(r.dir, &t, err, sizeof(err)), -EINVAL);
	assert_null(t);
	assert_non_null(strstr(err, "cbcmn-allowed: CPU 13 does not exist"));
	write_file(r.allowed, "all\n");
	assert_int_equal(cbcmn_topo_load(r.dir, &t, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "cbcmn-allowed: 'all' is not a CPU list"));
	tmproot_remove(&r);
}

/* ---- broken input ------------------------------------------------------------- */

static void test_broken_fixtures(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		int rc;
		const char *msg; /* after "<root>/" */
	} cases[] = {
		{"bad-distance", -EINVAL, "devices/system/node/node2/distance: 1 value, expected 2"},
		{"bad-cpulist", -EINVAL, "devices/system/cpu/online: '0-2,4-8,11-10,16-19': range 11-10 goes down"},
		{"bad-nodecpu", -EINVAL, "devices/system/node/node0/cpulist: CPU 13 does not exist"},
		{"bad-number", -EINVAL, "devices/system/cpu/cpu5/topology/physical_package_id: 'zero' is not a number"},
		{"bad-siblings", -EINVAL, "devices/system/cpu/cpu5/topology/thread_siblings_list: '5' disagrees with cpu4's list"},
		{"missing-file", -ENOENT, "devices/system/cpu/cpu6/topology/physical_package_id: No such file or directory"},
		{"no-such-fixture", -ENOENT, "devices/system/cpu/online: No such file or directory"},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		char root[PATH_MAX + 64], err[512], want[PATH_MAX + 256];
		cbcmn_topo *t = (cbcmn_topo *)err;
		fixture_path(root, sizeof(root), cases[k].name);
		int rc = cbcmn_topo_load(root, &t, err, sizeof(err));
		snprintf(want, sizeof(want), "%s/%s", root, cases[k].msg);
		if (rc != cases[k].rc || strcmp(err, want))
			fail_msg("%s: rc %d (%s), expected %d\n  got:      %s\n  expected: %s", cases[k].name,
				 rc, strerror(-rc), cases[k].rc, err, want);
		assert_null(t);
		/* No buffer, or a tiny one, is fine too. */
		assert_int_equal(cbcmn_topo_load(root, &t, NULL, 0), cases[k].rc);
		char tiny[8];
		assert_int_equal(cbcmn_topo_load(root, &t, tiny, sizeof(tiny)), cases[k].rc);
		assert_int_equal(strlen(tiny), sizeof(tiny) - 1);
	}
}

static void test_bad_arguments(void **state)
{
	(void)state;
	char err[128];
	cbcmn_topo *t;
	assert_int_equal(cbcmn_topo_load(NULL, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "NULL"));
	assert_int_equal(cbcmn_topo_load("", &t, err, sizeof(err)), -EINVAL);
	assert_null(t);
	cbcmn_topo_free(NULL);
	assert_int_equal(cbcmn_topo_ncpus(NULL), 0);
	assert_null(cbcmn_topo_cpu(NULL, 0));
	assert_null(cbcmn_topo_find(NULL, 0));
	assert_int_equal(cbcmn_topo_distance(NULL, 0, 0), -EINVAL);
	assert_int_equal(cbcmn_topo_node_id(NULL, 0), -EINVAL);
}

static void test_cpulist_parse(void **state)
{
	(void)state;
	uint64_t b[2];
	int bad = -1;
	memset(b, 0, sizeof(b));
	assert_int_equal(cbcmn__cpulist_parse("0-3,8,10-11\n", b, 128, &bad), 0);
	assert_true(b[0] == 0xd0f);
	memset(b, 0, sizeof(b));
	assert_int_equal(cbcmn__cpulist_parse("\n", b, 128, &bad), 0);
	assert_int_equal(cbcmn__cpulist_parse("", b, 128, &bad), 0);
	assert_true(b[0] == 0 && b[1] == 0);
	assert_int_equal(cbcmn__cpulist_parse("127", b, 128, &bad), 0);
	assert_true(b[1] == 1ull << 63);
	static const struct {
		const char *s;
		int rc, bad;
	} e[] = {
		{"3-1", -EINVAL, 0},    {"0,3-1", -EINVAL, 2},  {"1,", -EINVAL, 2},
		{",", -EINVAL, 0},      {"0,,1", -EINVAL, 2},   {"-1", -EINVAL, 0},
		{"0-", -EINVAL, 0},     {"a", -EINVAL, 0},      {" 1", -EINVAL, 0},
		{"1 2", -EINVAL, 1},    {"0x1", -EINVAL, 1},    {"0-15:2/4", -EINVAL, 4},
		{"128", -ERANGE, 128},  {"0-128", -ERANGE, 128}, {"99999999999", -ERANGE, INT_MAX},
	};
	for (size_t k = 0; k < sizeof(e) / sizeof(e[0]); k++) {
		memset(b, 0, sizeof(b));
		bad = -1;
		int rc = cbcmn__cpulist_parse(e[k].s, b, 128, &bad);
		if (rc != e[k].rc || bad != e[k].bad)
			fail_msg("'%s': rc %d bad %d, expected %d %d", e[k].s, rc, bad, e[k].rc, e[k].bad);
	}
}

/* A small two-node machine written file by file, then each file broken in
 * turn: every outcome must be a topology or an error naming a file under
 * the root, never a crash (ASan and UBSan watch the same run). */
static const struct {
	const char *rel, *text;
} mini[] = {
	{"devices/system/cpu/online", "0-3\n"},
	{"devices/system/cpu/possible", "0-7\n"},
	{"devices/system/cpu/present", "0-3\n"},
	{"devices/system/cpu/cpu0/topology/physical_package_id", "0\n"},
	{"devices/system/cpu/cpu0/topology/core_id", "0\n"},
	{"devices/system/cpu/cpu0/topology/core_cpus_list", "0-1\n"},
	{"devices/system/cpu/cpu0/cache/index0/level", "1\n"},
	{"devices/system/cpu/cpu0/cache/index0/type", "Data\n"},
	{"devices/system/cpu/cpu0/cache/index0/shared_cpu_list", "0-1\n"},
	{"devices/system/cpu/cpu0/cache/index3/level", "3\n"},
	{"devices/system/cpu/cpu0/cache/index3/type", "Unified\n"},
	{"devices/system/cpu/cpu0/cache/index3/shared_cpu_list", "0-1\n"},
	{"devices/system/cpu/cpu0/cpu_capacity", "300\n"}, /* the PMUs win: cpu2-3 are the E-cores */
	{"devices/system/cpu/cpu1/topology/physical_package_id", "0\n"},
	{"devices/system/cpu/cpu1/topology/core_id", "0\n"},
	{"devices/system/cpu/cpu1/topology/core_cpus_list", "0-1\n"},
	{"devices/system/cpu/cpu1/cache/index3/level", "3\n"},
	{"devices/system/cpu/cpu1/cache/index3/type", "Unified\n"},
	{"devices/system/cpu/cpu1/cache/index3/shared_cpu_list", "0-1\n"},
	{"devices/system/cpu/cpu1/cpu_capacity", "300\n"},
	{"devices/system/cpu/cpu2/topology/physical_package_id", "1\n"},
	{"devices/system/cpu/cpu2/topology/core_id", "0\n"},
	{"devices/system/cpu/cpu2/topology/thread_siblings_list", "2\n"},
	{"devices/system/cpu/cpu2/cpu_capacity", "1024\n"},
	{"devices/system/cpu/cpu3/topology/physical_package_id", "1\n"},
	{"devices/system/cpu/cpu3/topology/core_id", "1\n"},
	{"devices/system/cpu/cpu3/topology/thread_siblings_list", "3\n"},
	{"devices/system/cpu/cpu3/cpu_capacity", "1024\n"},
	{"devices/system/node/online", "0,3\n"},
	{"devices/system/node/node0/cpulist", "0-1\n"},
	{"devices/system/node/node0/distance", "10 20\n"},
	{"devices/system/node/node3/cpulist", "2-3\n"},
	{"devices/system/node/node3/distance", "20 10\n"},
	{"devices/cpu_atom/cpus", "2-3\n"},
	{"devices/cpu_core/cpus", "0-1\n"},
	{"cbcmn-allowed", "1-3\n"},
};

static void mkdirs_for(const char *path)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s", path);
	for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = 0;
		mkdir(p, 0755);
		*s = '/';
	}
}

static void mini_write(const char *dir)
{
	char path[PATH_MAX];
	for (size_t k = 0; k < sizeof(mini) / sizeof(mini[0]); k++) {
		snprintf(path, sizeof(path), "%s/%s", dir, mini[k].rel);
		mkdirs_for(path);
		write_file(path, mini[k].text);
	}
}

static void test_mini_machine(void **state)
{
	(void)state;
	char dir[] = "/tmp/cbcmn-topo-XXXXXX", err[512];
	cbcmn_topo *t;
	assert_non_null(mkdtemp(dir));
	mini_write(dir);
	int rc = cbcmn_topo_load(dir, &t, err, sizeof(err));
	if (rc)
		fail_msg("%s", err);
	/* Both sibling files, both PMUs, package-less LLC for cpu2-3. */
	check_counts(t, 4, 3, 3, 2, 2, 2);
	check_cpu(t, (struct want){0, 0, 0, 0, 0, 0, 0, false});
	check_cpu(t, (struct want){1, 0, 0, 1, 0, 0, 0, true});
	check_cpu(t, (struct want){2, 1, 1, 0, 1, 1, 1, true});
	check_cpu(t, (struct want){3, 1, 2, 0, 1, 1, 1, true});
	assert_int_equal(cbcmn_topo_node_id(t, 1), 3);
	cbcmn_topo_free(t);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

static void test_fuzz_files(void **state)
{
	(void)state;
	static const char *const junk[] = {
		"",          "\n",        "abc\n",     "3-1\n",   "-1\n",        "0-\n",
		",\n",       "1,\n",      "0,,1\n",    "7\n",     "2-3\n",       "0-3\n",
		"10\n",      "10 20 30\n", "20\n",     "5\n",     "0\n",         "99999999999999999999\n",
		"0-65536\n", "0-4294967296\n", "\xff\xfe\n", " 0\n", "10 abc\n",   "Instruction\n",
		"0-1\n2\n",  "1024\n",   "9 10\n",    "256 10\n",
	};
	char dir[] = "/tmp/cbcmn-topo-XXXXXX", path[PATH_MAX], err[512];
	assert_non_null(mkdtemp(dir));
	mini_write(dir);
	int loads = 0, errors = 0;
	for (size_t f = 0; f < sizeof(mini) / sizeof(mini[0]); f++) {
		snprintf(path, sizeof(path), "%s/%s", dir, mini[f].rel);
		for (size_t j = 0; j <= sizeof(junk) / sizeof(junk[0]); j++) {
			/* The last round deletes the file instead. */
			if (j < sizeof(junk) / sizeof(junk[0]))
				write_file(path, junk[j]);
			else
				assert_int_equal(unlink(path), 0);
			cbcmn_topo *t = (cbcmn_topo *)path;
			err[0] = 0;
			int rc = cbcmn_topo_load(dir, &t, err, sizeof(err));
			loads++;
			if (rc == 0) {
				check_invariants(t);
				cbcmn_topo_free(t);
			} else {
				errors++;
				if ((rc != -EINVAL && rc != -ENOENT) || strncmp(err, dir, strlen(dir)) || t)
					fail_msg("%s <- '%s': rc %d, err '%s'", mini[f].rel,
						 j < sizeof(junk) / sizeof(junk[0]) ? junk[j] : "(deleted)", rc, err);
			}
		}
		write_file(path, mini[f].text);
	}
	/* Most of it must have been refused, and a few named cases exactly. */
	assert_true(errors > loads / 2);
	static const struct {
		const char *rel, *text, *msg;
	} named[] = {
		{"devices/system/node/node0/distance", "10 abc\n", "node0/distance: '10 abc': 'abc' is not a number"},
		{"devices/system/node/node0/distance", "10\n", "node0/distance: 1 value, expected 2"},
		{"devices/system/node/node3/distance", "20 10 30\n", "node3/distance: 3 values, expected 2"},
		{"devices/system/node/node3/distance", "20 11\n", "node3/distance: distance to node3 is 11, expected 10"},
		{"devices/system/node/node3/cpulist", "3-1\n", "node3/cpulist: '3-1': range 3-1 goes down"},
		{"devices/system/node/node3/cpulist", "2-5\n", "node3/cpulist: CPU 4 does not exist"},
		{"devices/system/node/node3/cpulist", "1-3\n", "node3/cpulist: CPU 1 is also in node0"},
		{"devices/system/node/node3/cpulist", "3\n", "node: CPU 2 is online but no node*/cpulist lists it"},
		{"devices/system/cpu/cpu1/topology/core_cpus_list", "1\n", "cpu1/topology/core_cpus_list: '1' disagrees with cpu0's list"},
		{"devices/system/cpu/cpu0/topology/core_cpus_list", "1\n", "cpu0/topology/core_cpus_list: '1' does not list cpu0 itself"},
		{"devices/system/cpu/cpu1/topology/core_id", "1\n", "listed as an SMT sibling of cpu0"},
		{"devices/system/cpu/online", "0-4\n", "cpu/online: CPU 4 is online but not in devices/system/cpu/present"},
		{"devices/cpu_atom/cpus", "1-3\n", "cpu_atom/cpus: CPU 1 is in cpu_core/cpus too"},
	};
	for (size_t k = 0; k < sizeof(named) / sizeof(named[0]); k++) {
		snprintf(path, sizeof(path), "%s/%s", dir, named[k].rel);
		write_file(path, named[k].text);
		cbcmn_topo *t;
		int rc = cbcmn_topo_load(dir, &t, err, sizeof(err));
		if (rc != -EINVAL || !strstr(err, named[k].msg))
			fail_msg("%s <- '%s': rc %d, err '%s', expected '%s'", named[k].rel, named[k].text,
				 rc, err, named[k].msg);
		for (size_t f = 0; f < sizeof(mini) / sizeof(mini[0]); f++)
			if (!strcmp(mini[f].rel, named[k].rel))
				write_file(path, mini[f].text);
	}
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* ---- found by fuzzing (tests/fuzz/fuzz_topo.c) ----------------------------------- */

/* Writes the mini machine with rel's content replaced, loads it: rc and err. */
static int load_mini_with(const char *rel, const char *text, char *err, size_t errlen)
{
	char dir[] = "/tmp/cbcmn-topo-XXXXXX", path[PATH_MAX], cmd[64];
	cbcmn_topo *t = NULL;
	assert_non_null(mkdtemp(dir));
	mini_write(dir);
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	write_file(path, text);
	int rc = cbcmn_topo_load(dir, &t, err, errlen);
	if (rc == 0)
		cbcmn_topo_free(t);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
	return rc;
}

/* node/online "0-65535" was accepted as 65536 nodes: a distance matrix of
 * 65536 x 65536 ints (16 GiB) was allocated before the first node's files
 * were read, and a * nnodes overflowed an int past node 32767.  Node ids
 * stop at the kernel's MAX_NUMNODES. */
static void test_node_ids_past_max_numnodes_are_refused(void **state)
{
	(void)state;
	char err[512];
	int rc = load_mini_with("devices/system/node/online", "0-65535\n", err, sizeof(err));
	if (rc != -EINVAL || !strstr(err, "node/online: node 1024 does not exist"))
		fail_msg("rc %d, err '%s'", rc, err);
	rc = load_mini_with("devices/system/node/online", "0,1023\n", err, sizeof(err));
	if (rc != -ENOENT || !strstr(err, "node1023/cpulist"))
		fail_msg("node 1023: rc %d, err '%s'", rc, err); /* a valid id, its files missing */
}

struct fifo_load {
	const char *dir;
	int rc;
	char err[512];
};

static void fifo_load_main(void *arg)
{
	struct fifo_load *f = arg;
	cbcmn_topo *t = NULL;
	f->rc = cbcmn_topo_load(f->dir, &t, f->err, sizeof(f->err));
	if (f->rc == 0)
		cbcmn_topo_free(t);
}

/* A FIFO where a sysfs file should be (a tree given with --sysfs-root or
 * CBCMN_SYSFS_ROOT is anyone's) blocked the loader in open() for ever;
 * a character device could do the same.  Only regular files are read. */
static void test_fifo_in_tree_is_refused_not_waited_on(void **state)
{
	(void)state;
	char dir[] = "/tmp/cbcmn-topo-XXXXXX", path[PATH_MAX], cmd[64];
	assert_non_null(mkdtemp(dir));
	mini_write(dir);
	snprintf(path, sizeof(path), "%s/devices/system/cpu/cpu1/topology/core_id", dir);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkfifo(path, 0644), 0);
	struct fifo_load *f = calloc(1, sizeof(*f)); /* the thread may outlive a failure */
	assert_non_null(f);
	f->dir = dir;
	bool done = run_bounded(fifo_load_main, f, 10);
	if (!done) {
		/* Unblock it (a writer opening completes the reader's open). */
		int fd = open(path, O_WRONLY | O_NONBLOCK);
		fail_msg("cbcmn_topo_load still blocked on %s after 10 s (fd %d)", path, fd);
	}
	if (f->rc != -EINVAL || !strstr(f->err, "cpu1/topology/core_id: not a regular file"))
		fail_msg("rc %d, err '%s'", f->rc, f->err);
	free(f);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* ---- the live machine ----------------------------------------------------------- */

static cbcmn_topo *load_live(void)
{
	char err[512];
	cbcmn_topo *t = NULL;
	int rc = cbcmn_topo_load(NULL, &t, err, sizeof(err));
	if (rc)
		fail_msg("live topology: %s", err);
	assert_true(t->live);
	return t;
}

static bool have_cmd(const char *name)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", name);
	return system(cmd) == 0;
}

static void test_live_affinity(void **state)
{
	(void)state;
	cbcmn_topo *t = load_live();
	check_invariants(t);
	cpu_set_t set;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	int n = 0;
	for (int i = 0; i < cbcmn_topo_ncpus(t); i++) {
		const cbcmn_cpu_info *c = cbcmn_topo_cpu(t, i);
		assert_int_equal(c->allowed, c->cpu < CPU_SETSIZE && CPU_ISSET(c->cpu, &set));
		n += c->allowed;
	}
	assert_int_equal(n, cbcmn_topo_nallowed(t));
	assert_int_equal(n, CPU_COUNT(&set)); /* the mask holds only online CPUs */
	assert_int_equal(cbcmn_topo_ncpus(t), (int)sysconf(_SC_NPROCESSORS_ONLN));
	cbcmn_topo_free(t);

	/* "/sys/" is the live machine too, not a fixture without cbcmn-allowed. */
	char err[256];
	assert_int_equal(cbcmn_topo_load("/sys/", &t, err, sizeof(err)), 0);
	assert_true(t->live);
	cbcmn_topo_free(t);

	/* A narrower mask shows: pin to the last allowed CPU, load, restore. */
	if (CPU_COUNT(&set) < 2) {
		T_SKIP("one CPU allowed: cannot narrow the affinity mask");
		return;
	}
	int last = -1;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			last = c;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(last, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	int rc = cbcmn_topo_load(NULL, &t, err, sizeof(err));
	assert_int_equal(sched_setaffinity(0, sizeof(set), &set), 0);
	assert_int_equal(rc, 0);
	assert_int_equal(cbcmn_topo_nallowed(t), 1);
	assert_true(cbcmn_topo_find(t, last)->allowed);
	cbcmn_topo_free(t);
}

/* Maps ids one side uses to ids the other uses, both ways: the two sides
 * must partition the CPUs the same way, whatever they number the parts. */
struct bijection {
	int *fwd, *back;
	int n;
};

static void bij_init(struct bijection *b, int n)
{
	b->n = n;
	b->fwd = malloc(sizeof(int) * (size_t)n);
	b->back = malloc(sizeof(int) * (size_t)n);
	assert_non_null(b->fwd);
	assert_non_null(b->back);
	for (int i = 0; i < n; i++)
		b->fwd[i] = b->back[i] = -1;
}

static bool bij_add(struct bijection *b, int mine, int theirs)
{
	if (mine < 0 || theirs < 0 || mine >= b->n || theirs >= b->n)
		return false;
	if (b->fwd[mine] < 0 && b->back[theirs] < 0) {
		b->fwd[mine] = theirs;
		b->back[theirs] = mine;
	}
	return b->fwd[mine] == theirs && b->back[theirs] == mine;
}

static void bij_fini(struct bijection *b)
{
	free(b->fwd);
	free(b->back);
}

static void test_live_lscpu(void **state)
{
	(void)state;
	if (!have_cmd("lscpu")) {
		T_SKIP("lscpu is not installed");
		return;
	}
	FILE *p = popen("lscpu -p=CPU,CORE,SOCKET,NODE,CACHE 2>/dev/null", "r");
	assert_non_null(p);
	cbcmn_topo *t = load_live();
	int big = t->nbits * 2 + 16, rows = 0;
	struct bijection core, sock, llc;
	bij_init(&core, big);
	bij_init(&sock, big);
	bij_init(&llc, big);
	char line[512];
	while (fgets(line, sizeof(line), p)) {
		if (line[0] == '#')
			continue;
		/* CPU,Core,Socket,Node,,L1d,L1i,L2,L3: empty Node without NUMA,
		 * the last cache column is the LLC (empty if there is none). */
		char *f[16] = {0}, *s = line;
		int nf = 0;
		line[strcspn(line, "\n")] = 0;
		while (nf < 16 && (f[nf++] = strsep(&s, ",")))
			;
		nf--;
		assert_true(nf >= 4);
		int cpu = atoi(f[0]);
		const cbcmn_cpu_info *c = cbcmn_topo_find(t, cpu);
		if (!c)
			fail_msg("lscpu lists cpu%d, the topology does not", cpu);
		if (!bij_add(&core, c->core, atoi(f[1])))
			fail_msg("cpu%d: core %d, lscpu's core %s disagrees", cpu, c->core, f[1]);
		int pk = cbcmn__topo_package_index(t, c->package);
		if (!bij_add(&sock, pk, atoi(f[2])))
			fail_msg("cpu%d: package %d, lscpu's socket %s disagrees", cpu, c->package, f[2]);
		if (*f[3] && atoi(f[3]) != cbcmn_topo_node_id(t, c->node))
			fail_msg("cpu%d: node %d, lscpu says %s", cpu, cbcmn_topo_node_id(t, c->node), f[3]);
		if (nf > 5 && *f[nf - 1] && !bij_add(&llc, c->llc, atoi(f[nf - 1])))
			fail_msg("cpu%d: llc %d, lscpu's last cache %s disagrees", cpu, c->llc, f[nf - 1]);
		rows++;
	}
	int st = pclose(p);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(rows, cbcmn_topo_ncpus(t));
	bij_fini(&core);
	bij_fini(&sock);
	bij_fini(&llc);
	cbcmn_topo_free(t);
}

static void test_live_numactl(void **state)
{
	(void)state;
	if (!have_cmd("numactl")) {
		T_SKIP("numactl is not installed");
		return;
	}
	FILE *p = popen("numactl -H 2>&1", "r");
	assert_non_null(p);
	cbcmn_topo *t = load_live();
	char line[4096];
	int nodes = -1, cpus_seen = 0, rows = 0, cols[1024], ncols = 0;
	bool in_dist = false;
	while (fgets(line, sizeof(line), p)) {
		int id, off = -1;
		if (strstr(line, "No NUMA available")) {
			pclose(p);
			cbcmn_topo_free(t);
			T_SKIP("numactl: no NUMA support in this kernel");
			return;
		}
		if (sscanf(line, "available: %d nodes", &nodes) == 1)
			continue;
		if (sscanf(line, "node %d cpus:%n", &id, &off) == 1 && off > 0) {
			/* Every CPU numactl puts in node id is in node id here. */
			int cpu, used;
			for (char *s = line + off; sscanf(s, "%d%n", &cpu, &used) == 1; s += used) {
				const cbcmn_cpu_info *c = cbcmn_topo_find(t, cpu);
				if (!c || cbcmn_topo_node_id(t, c->node) != id)
					fail_msg("numactl: cpu%d in node %d; topology: %d", cpu, id,
						 c ? cbcmn_topo_node_id(t, c->node) : -1);
				cpus_seen++;
			}
			continue;
		}
		if (!strncmp(line, "node distances:", 15)) {
			in_dist = true;
			continue;
		}
		if (in_dist && !strncmp(line + strspn(line, " "), "node", 4)) {
			/* header: "node   0   1": the ids of the columns */
			int used;
			for (char *s = line + strspn(line, " ") + 4;
			     ncols < 1024 && sscanf(s, "%d%n", &cols[ncols], &used) == 1; s += used)
				ncols++;
			continue;
		}
		if (in_dist && sscanf(line, " %d:%n", &id, &off) == 1 && off > 0) {
			int d, used, a = -1;
			for (int k = 0; k < t->nnodes; k++)
				if (t->node_ids[k] == id)
					a = k;
			assert_true(a >= 0);
			int col = 0;
			for (char *s = line + off; sscanf(s, "%d%n", &d, &used) == 1; s += used, col++) {
				assert_true(col < ncols);
				int b = -1;
				for (int k = 0; k < t->nnodes; k++)
					if (t->node_ids[k] == cols[col])
						b = k;
				assert_true(b >= 0);
				if (cbcmn_topo_distance(t, a, b) != d)
					fail_msg("distance node %d -> %d: %d, numactl says %d", id, cols[col],
						 cbcmn_topo_distance(t, a, b), d);
			}
			assert_int_equal(col, t->nnodes);
			rows++;
		}
	}
	pclose(p);
	assert_int_equal(nodes, cbcmn_topo_nnodes(t));
	assert_int_equal(rows, cbcmn_topo_nnodes(t));
	assert_int_equal(ncols, cbcmn_topo_nnodes(t));
	assert_int_equal(cpus_seen, cbcmn_topo_ncpus(t));
	cbcmn_topo_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_vm2),
		T_WATCHED_TEST(test_xeon2s),
		T_WATCHED_TEST(test_xeon2s_cpuset),
		T_WATCHED_TEST(test_epyc8n),
		T_WATCHED_TEST(test_holes),
		T_WATCHED_TEST(test_hybrid),
		T_WATCHED_TEST(test_armbl),
		T_WATCHED_TEST(test_env_root),
		T_WATCHED_TEST(test_allowed_file),
		T_WATCHED_TEST(test_broken_fixtures),
		T_WATCHED_TEST(test_bad_arguments),
		T_WATCHED_TEST(test_cpulist_parse),
		T_WATCHED_TEST(test_mini_machine),
		T_WATCHED_TEST(test_fuzz_files),
		T_WATCHED_TEST(test_node_ids_past_max_numnodes_are_refused),
		T_WATCHED_TEST(test_fifo_in_tree_is_refused_not_waited_on),
		T_WATCHED_TEST(test_live_affinity),
		T_WATCHED_TEST(test_live_lscpu),
		T_WATCHED_TEST(test_live_numactl),
	};
	return cmocka_run_group_tests(tests, find_fixtures, NULL);
}
