/* cbcmn-affinity: cbcmn's view of the machine (NUMA nodes and their
 * distances, LLC groups, cores, threads, the allowed CPUs, hybrid core
 * kinds) and the CPUs each placement policy picks for N executors, as a
 * table or as one JSON document.  Like lstopo / numactl -H, for cbcmn.
 * With --steal-matrix, the PREDICTED steal traffic instead: a steal pattern
 * measured elsewhere (thief, victim, steals) mapped through each policy's
 * placement on this topology, counted by how far each steal reaches
 * (docs/EXPERIMENTS.md).
 *
 * Errors are one line on stderr and exit status 1.
 */
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbcmn_topo.h"
#include "cli/cli.h"
#include "util/json.h"
#include "cli/opts.h"
#include "cli/stealmx.h"

#define PROG "cbcmn-affinity"

static const char usage_text[] =
	"usage: " PROG " [OPTIONS]\n"
	"  Prints the topology cbcmn sees (NUMA nodes with their distance matrix,\n"
	"  LLC groups, cores and their threads, the allowed CPUs, hybrid core\n"
	"  kinds) and the CPUs the placement policies pick for N executors\n"
	"  (docs/TOPOLOGY.md).\n"
	"\n"
	"      --sysfs-root DIR    read the topology from a sysfs-shaped directory\n"
	"                          (default: $CBCMN_SYSFS_ROOT, else the live /sys)\n"
	"  -n, --executors N       executors to place (default: every allowed CPU;\n"
	"                          with --policy cpus:LIST, the list's length)\n"
	"  -p, --policy P          only this policy: depth-first, breadth-first,\n"
	"                          random or cpus:LIST (default: the first three)\n"
	"  -s, --seed S            seed of the random policy (default 0)\n"
	"  -f, --first-cpu CPU     where depth-first starts (default: lowest allowed)\n"
	"  -m, --steal-matrix FILE predict steal traffic instead: FILE holds lines\n"
	"                          'THIEF VICTIM STEALS [TASKS]' (executor indexes,\n"
	"                          '#' comments; '-' is stdin), as measured by\n"
	"                          cbcmn-run --bpf; each policy's placement of the\n"
	"                          -n executors (default: the highest index + 1)\n"
	"                          maps them to CPUs, and the steals are counted as\n"
	"                          same CPU, same core, cross-LLC, cross-node and\n"
	"                          cross-package, with their mean node distance\n"
	"  -j, --json              one JSON document instead of the tables\n"
	"  -h, --help\n"
	"\n"
	"More executors than allowed CPUs is allowed: the placement wraps around\n"
	"and a warning on stderr says that executors share CPUs.\n"
	"\n"
	"EXAMPLES\n"
	"  " PROG "                                   this machine, every policy\n"
	"  " PROG " -n 8 --policy breadth-first       8 executors, spread\n"
	"  " PROG " --sysfs-root tests/fixtures/sysfs/epyc8n --json | python3 -m json.tool\n"
	"  " PROG " --policy cpus:0-3,8               check a hand-written list\n"
	"  " PROG " --sysfs-root tests/fixtures/sysfs/xeon2s -n 4 --steal-matrix steals.txt\n"
	"                                    cross-node steals each policy would cause\n";

/* One policy's placement, as computed for printing. */
struct placement {
	cbcmn_policy policy;
	int *out;
	bool oversubscribed;
};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	char line[PATH_MAX + 512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, PROG ": %s\n", cli_one_line(line));
	exit(1);
}

/* cbcmn_place() refused policy: its message, prefixed with the policy's
 * name unless it begins with it already (those about a cpus: list do). */
static void die_placing(cbcmn_policy policy, const char *err) __attribute__((noreturn));

static void die_placing(cbcmn_policy policy, const char *err)
{
	const char *name = cbcmn_policy_name(policy);
	size_t len = strlen(name);
	if (strncmp(err, name, len) == 0 && err[len] == ':')
		die("%s", err);
	die("%s: %s", name, err);
}

/* ---- output helpers ---------------------------------------------------------- */

/* "0-15,32-47" from CPU numbers in increasing order. */
static void print_cpulist(FILE *f, const int *v, int n)
{
	if (n == 0) {
		fputs("none", f);
		return;
	}
	for (int i = 0; i < n;) {
		int j = i;

		while (j + 1 < n && v[j + 1] == v[j] + 1)
			j++;
		fprintf(f, "%s%d", i ? "," : "", v[i]);
		if (j > i)
			fprintf(f, "-%d", v[j]);
		i = j + 1;
	}
}

static void json_ints(FILE *f, const int *v, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%d", i ? ", " : "", v[i]);
	fputc(']', f);
}

/* CPU numbers (in increasing order) of the CPUs for which keep() holds. */
static int select_cpus(const cbcmn_topo *t, int *v, bool (*keep)(const cbcmn_cpu_info *, int),
		       int arg)
{
	int n = 0;

	for (int i = 0; i < cbcmn_topo_ncpus(t); i++) {
		const cbcmn_cpu_info *ci = cbcmn_topo_cpu(t, i);

		if (keep(ci, arg))
			v[n++] = ci->cpu;
	}
	return n;
}

static bool in_node(const cbcmn_cpu_info *ci, int node) { return ci->node == node; }
static bool in_llc(const cbcmn_cpu_info *ci, int llc) { return ci->llc == llc; }
static bool in_core(const cbcmn_cpu_info *ci, int core) { return ci->core == core; }
static bool is_allowed(const cbcmn_cpu_info *ci, int unused)
{
	(void)unused;
	return ci->allowed;
}
static bool of_kind(const cbcmn_cpu_info *ci, int kind) { return ci->kind == kind; }

/* The first CPU for which keep() holds, for a group's node or kind. */
static const cbcmn_cpu_info *first_of(const cbcmn_topo *t,
				      bool (*keep)(const cbcmn_cpu_info *, int), int arg)
{
	for (int i = 0; i < cbcmn_topo_ncpus(t); i++) {
		const cbcmn_cpu_info *ci = cbcmn_topo_cpu(t, i);

		if (keep(ci, arg))
			return ci;
	}
	return NULL;
}

static const char *kind_name(int kind)
{
	return kind == 0 ? "performance" : kind == 1 ? "efficiency" : "other";
}

static bool is_hybrid(const cbcmn_topo *t)
{
	return first_of(t, of_kind, 1) != NULL;
}

static void policy_label(char *h, size_t len, cbcmn_policy p, uint64_t seed)
{
	if (p == CBCMN_POLICY_RANDOM)
		snprintf(h, len, "random/%" PRIu64, seed);
	else
		snprintf(h, len, "%s", cbcmn_policy_name(p));
}

/* A row per executor, a column per policy: each cell the executor's CPU
 * and its node (as the kernel numbers it), and with llc its LLC group. */
static void print_placement(const cbcmn_topo *t, struct placement *pl, int npl, uint32_t n,
			    uint64_t seed, bool llc)
{
	int width = llc ? 16 : 14;
	char h[32];

	printf("  %5s", llc ? "shard" : "exec");
	for (int p = 0; p < npl; p++) {
		policy_label(h, sizeof(h), pl[p].policy, seed);
		printf("  %*s", width, h);
	}
	printf("\n");
	for (uint32_t i = 0; i < n; i++) {
		printf("  %5u", i);
		for (int p = 0; p < npl; p++) {
			const cbcmn_cpu_info *ci = cbcmn_topo_find(t, pl[p].out[i]);
			int node = ci ? cbcmn_topo_node_id(t, ci->node) : -1;
			char cell[48];

			if (llc)
				snprintf(cell, sizeof(cell), "%d n%d/l%d", pl[p].out[i], node,
					 ci ? ci->llc : -1);
			else
				snprintf(cell, sizeof(cell), "%d [%d]", pl[p].out[i], node);
			printf("  %*s", width, cell);
		}
		printf("\n");
	}
}

/* ---- the table ---------------------------------------------------------------- */

static void print_table(const cbcmn_topo *t, const char *root, struct placement *pl, int npl,
			uint32_t n, uint64_t seed, int *v)
{
	int nn = cbcmn_topo_nnodes(t), nl = cbcmn_topo_nllcs(t), nc = cbcmn_topo_ncores(t);
	bool hybrid = is_hybrid(t);
	int k;

	printf("topology of %s\n  CPUs online %d, allowed %d; cores %d; packages %d; "
	       "NUMA nodes %d; LLC groups %d%s\n",
	       root, cbcmn_topo_ncpus(t), cbcmn_topo_nallowed(t), nc, cbcmn_topo_npackages(t), nn,
	       nl, hybrid ? " (hybrid)" : "");
	k = select_cpus(t, v, is_allowed, 0);
	printf("  allowed CPUs: ");
	print_cpulist(stdout, v, k);
	printf("\n");
	if (hybrid) {
		k = select_cpus(t, v, of_kind, 0);
		printf("  performance CPUs: ");
		print_cpulist(stdout, v, k);
		k = select_cpus(t, v, of_kind, 1);
		printf("; efficiency CPUs: ");
		print_cpulist(stdout, v, k);
		printf("\n");
	}

	printf("\nnode distances (kernel node ids):\n  node");
	for (int b = 0; b < nn; b++)
		printf(" %4d", cbcmn_topo_node_id(t, b));
	printf("\n");
	for (int a = 0; a < nn; a++) {
		printf("  %4d", cbcmn_topo_node_id(t, a));
		for (int b = 0; b < nn; b++)
			printf(" %4d", cbcmn_topo_distance(t, a, b));
		printf("\n");
	}

	printf("\nnodes and LLC groups:\n");
	for (int a = 0; a < nn; a++) {
		k = select_cpus(t, v, in_node, a);
		printf("  node %d: CPUs ", cbcmn_topo_node_id(t, a));
		print_cpulist(stdout, v, k);
		printf("\n");
		for (int l = 0; l < nl; l++) {
			const cbcmn_cpu_info *ci = first_of(t, in_llc, l);

			if (!ci || ci->node != a)
				continue;
			k = select_cpus(t, v, in_llc, l);
			printf("    llc %d: CPUs ", l);
			print_cpulist(stdout, v, k);
			printf("\n");
		}
	}

	printf("\ncores and their threads:\n");
	printf("  %5s %4s %4s %4s %5s  %s\n", "core", "pkg", "node", "llc", "kind", "threads");
	for (int c = 0; c < nc; c++) {
		const cbcmn_cpu_info *ci = first_of(t, in_core, c);

		if (!ci)
			continue;
		k = select_cpus(t, v, in_core, c);
		printf("  %5d %4d %4d %4d %5s  ", c, ci->package, cbcmn_topo_node_id(t, ci->node),
		       ci->llc, ci->kind ? "E" : "P");
		for (int i = 0; i < k; i++) {
			const cbcmn_cpu_info *th = cbcmn_topo_find(t, v[i]);

			printf("%s%d%s", i ? " " : "", v[i], th && th->allowed ? "" : "(not allowed)");
		}
		printf("\n");
	}

	printf("\nplacement of %u executors (node id in brackets):\n", n);
	print_placement(t, pl, npl, n, seed, false);
}

/* ---- JSON ------------------------------------------------------------------------ */

static void print_json(const cbcmn_topo *t, const char *root, struct placement *pl, int npl,
		       uint32_t n, uint64_t seed, int *v)
{
	int nn = cbcmn_topo_nnodes(t), nl = cbcmn_topo_nllcs(t), nc = cbcmn_topo_ncores(t);
	int k;
	bool first;

	printf("{\n  \"sysfs_root\": ");
	jw_quote(stdout, root);
	printf(",\n  \"ncpus\": %d,\n  \"nallowed\": %d,\n  \"ncores\": %d,\n"
	       "  \"npackages\": %d,\n  \"hybrid\": %s,\n  \"allowed\": ",
	       cbcmn_topo_ncpus(t), cbcmn_topo_nallowed(t), nc, cbcmn_topo_npackages(t),
	       is_hybrid(t) ? "true" : "false");
	k = select_cpus(t, v, is_allowed, 0);
	json_ints(stdout, v, k);

	printf(",\n  \"nodes\": [");
	for (int a = 0; a < nn; a++) {
		printf("%s\n    {\"index\": %d, \"id\": %d, \"cpus\": ", a ? "," : "", a,
		       cbcmn_topo_node_id(t, a));
		k = select_cpus(t, v, in_node, a);
		json_ints(stdout, v, k);
		printf(", \"distances\": [");
		for (int b = 0; b < nn; b++)
			printf("%s%d", b ? ", " : "", cbcmn_topo_distance(t, a, b));
		printf("]}");
	}
	printf("\n  ],\n  \"llcs\": [");
	first = true;
	for (int l = 0; l < nl; l++) {
		const cbcmn_cpu_info *ci = first_of(t, in_llc, l);

		if (!ci)
			continue;
		printf("%s\n    {\"index\": %d, \"node\": %d, \"cpus\": ", first ? "" : ",", l,
		       ci->node);
		k = select_cpus(t, v, in_llc, l);
		json_ints(stdout, v, k);
		printf("}");
		first = false;
	}
	printf("\n  ],\n  \"cores\": [");
	first = true;
	for (int c = 0; c < nc; c++) {
		const cbcmn_cpu_info *ci = first_of(t, in_core, c);

		if (!ci)
			continue;
		printf("%s\n    {\"index\": %d, \"package\": %d, \"node\": %d, \"llc\": %d, "
		       "\"kind\": \"%s\", \"cpus\": ",
		       first ? "" : ",", c, ci->package, ci->node, ci->llc, kind_name(ci->kind));
		k = select_cpus(t, v, in_core, c);
		json_ints(stdout, v, k);
		printf("}");
		first = false;
	}
	printf("\n  ],\n  \"cpus\": [");
	for (int i = 0; i < cbcmn_topo_ncpus(t); i++) {
		const cbcmn_cpu_info *ci = cbcmn_topo_cpu(t, i);

		printf("%s\n    {\"cpu\": %d, \"package\": %d, \"core\": %d, \"smt\": %d, "
		       "\"node\": %d, \"llc\": %d, \"kind\": \"%s\", \"allowed\": %s}",
		       i ? "," : "", ci->cpu, ci->package, ci->core, ci->smt, ci->node, ci->llc,
		       kind_name(ci->kind), ci->allowed ? "true" : "false");
	}
	printf("\n  ],\n  \"executors\": %u,\n  \"seed\": %llu,\n  \"placements\": [", n,
	       (unsigned long long)seed);
	for (int p = 0; p < npl; p++) {
		printf("%s\n    {\"policy\": \"%s\", \"oversubscribed\": %s, \"cpus\": ",
		       p ? "," : "", cbcmn_policy_name(pl[p].policy),
		       pl[p].oversubscribed ? "true" : "false");
		json_ints(stdout, pl[p].out, (int)n);
		printf("}");
	}
	printf("\n  ]\n}\n");
}

/* ---- predicted steal traffic (--steal-matrix) ------------------------------------ */

/* A measured steal pattern and the file it came from. */
struct matrix {
	const char *path;
	struct stealmx mx;
};

/* How far the steals of a pattern reach under one placement.  A steal is
 * counted in every class it belongs to: a cross-node steal is usually
 * cross-LLC too, but not where an LLC spans nodes (Intel SNC). */
struct traffic {
	uint64_t same_cpu;   /* thief and victim share a CPU (oversubscribed) */
	uint64_t same_core;  /* SMT siblings of one core (not the same CPU) */
	uint64_t cross_llc, cross_node, cross_package;
	uint64_t cross_llc_tasks, cross_node_tasks;
	uint64_t distance_sum; /* SLIT distance × steals, for the mean */
};

static void matrix_read(struct matrix *m, const char *path)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	char err[PATH_MAX + 128];

	m->path = path;
	if (!f)
		die("%s: %s", path, strerror(errno));
	if (stealmx_read(f, path, &m->mx, err, sizeof(err)))
		die("%s", err);
	if (f != stdin)
		fclose(f);
}

static void predict(const cbcmn_topo *t, const struct matrix *m, const int *out, struct traffic *tr)
{
	*tr = (struct traffic){0};
	for (size_t i = 0; i < m->mx.n; i++) {
		const struct stealmx_pair *p = &m->mx.v[i];
		const cbcmn_cpu_info *a = cbcmn_topo_find(t, out[p->thief]);
		const cbcmn_cpu_info *b = cbcmn_topo_find(t, out[p->victim]);

		if (!a || !b) /* cbcmn_place() gives only CPUs of the topology */
			die("internal error: placed CPU %d or %d not in the topology",
			    out[p->thief], out[p->victim]);
		if (a->cpu == b->cpu)
			tr->same_cpu += p->steals;
		else if (a->core == b->core)
			tr->same_core += p->steals;
		if (a->llc != b->llc) {
			tr->cross_llc += p->steals;
			tr->cross_llc_tasks += p->tasks;
		}
		if (a->node != b->node) {
			tr->cross_node += p->steals;
			tr->cross_node_tasks += p->tasks;
		}
		tr->cross_package += a->package != b->package ? p->steals : 0;
		tr->distance_sum += p->steals * (uint64_t)cbcmn_topo_distance(t, a->node, b->node);
	}
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void print_prediction(const cbcmn_topo *t, const char *root, const struct matrix *m,
			     struct placement *pl, int npl, uint32_t n, uint64_t seed)
{
	char h[32];

	printf("PREDICTION (not measured): steal traffic on %s\n"
	       "  the steal pattern of %s (%" PRIu64 " steals",
	       root, m->path, m->mx.steals);
	if (m->mx.has_tasks)
		printf(", %" PRIu64 " tasks", m->mx.tasks);
	printf(" in %zu thief-victim pairs) with %u executors placed by each policy\n", m->mx.n, n);

	printf("\nplacement (shard: CPU node/LLC, node as the kernel numbers it):\n");
	print_placement(t, pl, npl, n, seed, true);

	printf("\npredicted steals (%% of %" PRIu64 "):\n  %-16s %15s %15s %15s %15s %15s %9s\n",
	       m->mx.steals, "policy", "same-cpu", "smt-sibling", "cross-llc", "cross-node",
	       "cross-package", "mean-dist");
	for (int p = 0; p < npl; p++) {
		struct traffic tr;
		char c[5][32];

		predict(t, m, pl[p].out, &tr);
		const uint64_t cls[5] = {tr.same_cpu, tr.same_core, tr.cross_llc, tr.cross_node,
					 tr.cross_package};
		for (int k = 0; k < 5; k++)
			snprintf(c[k], sizeof(c[k]), "%" PRIu64 " %5.1f%%", cls[k],
				 pct(cls[k], m->mx.steals));
		policy_label(h, sizeof(h), pl[p].policy, seed);
		printf("  %-16s %15s %15s %15s %15s %15s", h, c[0], c[1], c[2], c[3], c[4]);
		if (m->mx.steals)
			printf(" %9.2f\n", (double)tr.distance_sum / (double)m->mx.steals);
		else
			printf(" %9s\n", "-");
	}
	if (m->mx.has_tasks) {
		printf("\npredicted tasks moved (%% of %" PRIu64 "):\n  %-16s %15s %15s\n", m->mx.tasks,
		       "policy", "cross-llc", "cross-node");
		for (int p = 0; p < npl; p++) {
			struct traffic tr;
			char a[32], b[32];

			predict(t, m, pl[p].out, &tr);
			snprintf(a, sizeof(a), "%" PRIu64 " %5.1f%%", tr.cross_llc_tasks,
				 pct(tr.cross_llc_tasks, m->mx.tasks));
			snprintf(b, sizeof(b), "%" PRIu64 " %5.1f%%", tr.cross_node_tasks,
				 pct(tr.cross_node_tasks, m->mx.tasks));
			policy_label(h, sizeof(h), pl[p].policy, seed);
			printf("  %-16s %15s %15s\n", h, a, b);
		}
	}
}

static void print_prediction_json(const cbcmn_topo *t, const char *root, const struct matrix *m,
				  struct placement *pl, int npl, uint32_t n, uint64_t seed)
{
	printf("{\n  \"prediction\": true,\n  \"sysfs_root\": ");
	jw_quote(stdout, root);
	printf(",\n  \"steal_matrix\": ");
	jw_quote(stdout, m->path);
	printf(",\n  \"executors\": %u,\n  \"seed\": %" PRIu64 ",\n  \"pairs\": %zu,\n"
	       "  \"steals\": %" PRIu64 ",\n  \"tasks\": ",
	       n, seed, m->mx.n, m->mx.steals);
	if (m->mx.has_tasks)
		printf("%" PRIu64, m->mx.tasks);
	else
		printf("null");
	printf(",\n  \"policies\": [");
	for (int p = 0; p < npl; p++) {
		struct traffic tr;

		predict(t, m, pl[p].out, &tr);
		printf("%s\n    {\"policy\": \"%s\", \"oversubscribed\": %s,\n     \"placement\": [",
		       p ? "," : "", cbcmn_policy_name(pl[p].policy),
		       pl[p].oversubscribed ? "true" : "false");
		for (uint32_t i = 0; i < n; i++) {
			const cbcmn_cpu_info *ci = cbcmn_topo_find(t, pl[p].out[i]);

			printf("%s{\"shard\": %u, \"cpu\": %d, \"node\": %d, \"node_id\": %d, "
			       "\"llc\": %d, \"core\": %d, \"package\": %d}",
			       i ? ", " : "", i, ci->cpu, ci->node, cbcmn_topo_node_id(t, ci->node),
			       ci->llc, ci->core, ci->package);
		}
		printf("],\n     \"same_cpu\": %" PRIu64 ", \"same_core\": %" PRIu64
		       ", \"cross_llc\": %" PRIu64 ", \"cross_node\": %" PRIu64
		       ", \"cross_package\": %" PRIu64 ", \"mean_distance\": ",
		       tr.same_cpu, tr.same_core, tr.cross_llc, tr.cross_node, tr.cross_package);
		if (m->mx.steals)
			printf("%.3f", (double)tr.distance_sum / (double)m->mx.steals);
		else
			printf("null");
		if (m->mx.has_tasks)
			printf(", \"cross_llc_tasks\": %" PRIu64 ", \"cross_node_tasks\": %" PRIu64,
			       tr.cross_llc_tasks, tr.cross_node_tasks);
		else
			printf(", \"cross_llc_tasks\": null, \"cross_node_tasks\": null");
		printf("}");
	}
	printf("\n  ]\n}\n");
}

int main(int argc, char **argv)
{
	struct affinity_opts o = {.first_cpu = -1};
	struct matrix m = {0};
	char err[256];
	cli_sigpipe_default();

	if (affinity_opts_parse(argc, argv, &o, err, sizeof(err)))
		die("%s (try --help)", err);
	if (o.help) {
		fputs(usage_text, stdout);
		return cli_stdout_flushed(PROG) ? 0 : 1;
	}
	const char *root = o.root, *policy = o.policy, *matrix_path = o.matrix;
	long long n = o.n, first_cpu = o.first_cpu;
	uint64_t seed = o.seed;
	bool json = o.json;

	/* the policy first: a typo there should not wait for sysfs */
	struct placement pl[3];
	int npl = 0, *list = NULL;
	size_t nlist = 0;

	if (policy) {
		if (cbcmn_policy_parse(policy, &pl[0].policy, &list, &nlist, err, sizeof(err)))
			die("%s", err);
		npl = 1;
	} else {
		pl[npl++].policy = CBCMN_POLICY_DEPTH_FIRST;
		pl[npl++].policy = CBCMN_POLICY_BREADTH_FIRST;
		pl[npl++].policy = CBCMN_POLICY_RANDOM;
	}

	if (matrix_path) {
		matrix_read(&m, matrix_path);
		if (n && m.mx.executors > n)
			die("%s: executor %u, but -n is %lld", matrix_path, m.mx.executors - 1, n);
		if (!n && !m.mx.executors)
			die("%s: no steals, so no executor count: give -n", matrix_path);
		if (!n)
			n = m.mx.executors;
	}

	cbcmn_topo *t;
	if (cbcmn_topo_load(root, &t, err, sizeof(err)))
		die("%s", err);
	if (!root)
		root = getenv("CBCMN_SYSFS_ROOT") ? getenv("CBCMN_SYSFS_ROOT") : "/sys";

	if (!n)
		n = list ? (long long)nlist : cbcmn_topo_nallowed(t);
	if (!n)
		die("no allowed CPU in %s", root);
	int *v = malloc(sizeof(*v) * (size_t)(cbcmn_topo_ncpus(t) + 1));
	if (!v)
		die("out of memory");
	for (int p = 0; p < npl; p++) {
		pl[p].out = malloc(sizeof(int) * (size_t)n);
		if (!pl[p].out)
			die("out of memory");
		if (cbcmn_place(t, pl[p].policy, (uint32_t)n, seed, list, nlist, (int)first_cpu,
				pl[p].out, &pl[p].oversubscribed, err, sizeof(err)))
			die_placing(pl[p].policy, err);
	}
	if (npl && pl[0].oversubscribed)
		fprintf(stderr, PROG ": warning: %lld executors on %d %s: executors share CPUs\n",
			n, list ? (int)nlist : cbcmn_topo_nallowed(t),
			list ? "listed CPUs" : "allowed CPUs");

	if (matrix_path && json)
		print_prediction_json(t, root, &m, pl, npl, (uint32_t)n, seed);
	else if (matrix_path)
		print_prediction(t, root, &m, pl, npl, (uint32_t)n, seed);
	else if (json)
		print_json(t, root, pl, npl, (uint32_t)n, seed, v);
	else
		print_table(t, root, pl, npl, (uint32_t)n, seed, v);

	for (int p = 0; p < npl; p++)
		free(pl[p].out);
	free(v);
	free(list);
	stealmx_free(&m.mx);
	cbcmn_topo_free(t);
	return cli_stdout_flushed(PROG) ? 0 : 1;
}
