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
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbcmn_topo.h"
#include "common/json.h"

#define PROG "cbcmn-affinity"
/* More executors than this is a typo, not a plan (CBCMN_MAX_EXECUTORS is
 * far lower); the bound keeps the output arrays small. */
#define MAX_N (1 << 20)

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

static const struct option longopts[] = {
	{"sysfs-root", required_argument, NULL, 'r'},
	{"executors", required_argument, NULL, 'n'},
	{"policy", required_argument, NULL, 'p'},
	{"seed", required_argument, NULL, 's'},
	{"first-cpu", required_argument, NULL, 'f'},
	{"steal-matrix", required_argument, NULL, 'm'},
	{"json", no_argument, NULL, 'j'},
	{"help", no_argument, NULL, 'h'},
	{0},
};

/* One policy's placement, as computed for printing. */
struct placement {
	cbcmn_policy policy;
	int *out;
	bool oversubscribed;
};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static long long number(const char *opt, const char *arg, long long lo, long long hi)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(arg, &end, 0);
	if (!*arg || *end || errno || v < lo || v > hi)
		die("%s wants a number in %lld..%lld, got '%s'", opt, lo, hi, arg);
	return v;
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

/* One thief → victim entry of a measured steal pattern (executor indexes). */
struct pair {
	uint32_t thief, victim;
	uint64_t steals, tasks;
};

struct matrix {
	const char *path;
	struct pair *v;
	size_t n, cap;
	uint32_t executors; /* the highest index + 1 */
	bool has_tasks;     /* some line had the fourth column */
	uint64_t steals, tasks;
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

/* Unsigned decimal fields of a line, at most max of them; -1 on junk. */
static int fields(char *s, uint64_t *out, int max)
{
	int k = 0;

	for (;;) {
		char *end;

		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s || *s == '\n' || *s == '\r' || *s == '#')
			return k;
		if (k == max || *s < '0' || *s > '9')
			return -1;
		errno = 0;
		out[k++] = strtoull(s, &end, 10);
		if (errno || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r' &&
			      *end != '#'))
			return -1;
		s = end;
	}
}

/* Read "THIEF VICTIM STEALS [TASKS]" lines; the same pair twice adds up. */
static void matrix_read(struct matrix *m, const char *path)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	char *line = NULL;
	size_t len = 0;
	unsigned lineno = 0;

	m->path = path;
	if (!f)
		die("%s: %s", path, strerror(errno));
	while (getline(&line, &len, f) != -1) {
		uint64_t x[4];
		int k;

		lineno++;
		k = fields(line, x, 4);
		if (k == 0)
			continue;
		if (k < 3)
			die("%s:%u: expected 'THIEF VICTIM STEALS [TASKS]' (unsigned numbers)", path,
			    lineno);
		if (x[0] >= MAX_N || x[1] >= MAX_N)
			die("%s:%u: executor index above %d", path, lineno, MAX_N - 1);
		if (x[0] == x[1])
			die("%s:%u: executor %" PRIu64 " steals from itself", path, lineno, x[0]);
		if (m->n == m->cap) {
			size_t cap = m->cap ? 2 * m->cap : 64;
			struct pair *v = realloc(m->v, cap * sizeof(*v));

			if (!v)
				die("out of memory");
			m->v = v;
			m->cap = cap;
		}
		m->v[m->n++] = (struct pair){(uint32_t)x[0], (uint32_t)x[1], x[2], k == 4 ? x[3] : 0};
		m->has_tasks |= k == 4;
		m->steals += x[2];
		m->tasks += k == 4 ? x[3] : 0;
		for (int i = 0; i < 2; i++)
			if (x[i] + 1 > m->executors)
				m->executors = (uint32_t)x[i] + 1;
	}
	if (ferror(f))
		die("%s: %s", path, strerror(errno));
	free(line);
	if (f != stdin)
		fclose(f);
}

static void predict(const cbcmn_topo *t, const struct matrix *m, const int *out, struct traffic *tr)
{
	*tr = (struct traffic){0};
	for (size_t i = 0; i < m->n; i++) {
		const struct pair *p = &m->v[i];
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
	       root, m->path, m->steals);
	if (m->has_tasks)
		printf(", %" PRIu64 " tasks", m->tasks);
	printf(" in %zu thief-victim pairs) with %u executors placed by each policy\n", m->n, n);

	printf("\nplacement (shard: CPU node/LLC, node as the kernel numbers it):\n");
	print_placement(t, pl, npl, n, seed, true);

	printf("\npredicted steals (%% of %" PRIu64 "):\n  %-16s %15s %15s %15s %15s %15s %9s\n",
	       m->steals, "policy", "same-cpu", "smt-sibling", "cross-llc", "cross-node",
	       "cross-package", "mean-dist");
	for (int p = 0; p < npl; p++) {
		struct traffic tr;
		char c[5][32];

		predict(t, m, pl[p].out, &tr);
		const uint64_t cls[5] = {tr.same_cpu, tr.same_core, tr.cross_llc, tr.cross_node,
					 tr.cross_package};
		for (int k = 0; k < 5; k++)
			snprintf(c[k], sizeof(c[k]), "%" PRIu64 " %5.1f%%", cls[k],
				 pct(cls[k], m->steals));
		policy_label(h, sizeof(h), pl[p].policy, seed);
		printf("  %-16s %15s %15s %15s %15s %15s", h, c[0], c[1], c[2], c[3], c[4]);
		if (m->steals)
			printf(" %9.2f\n", (double)tr.distance_sum / (double)m->steals);
		else
			printf(" %9s\n", "-");
	}
	if (m->has_tasks) {
		printf("\npredicted tasks moved (%% of %" PRIu64 "):\n  %-16s %15s %15s\n", m->tasks,
		       "policy", "cross-llc", "cross-node");
		for (int p = 0; p < npl; p++) {
			struct traffic tr;
			char a[32], b[32];

			predict(t, m, pl[p].out, &tr);
			snprintf(a, sizeof(a), "%" PRIu64 " %5.1f%%", tr.cross_llc_tasks,
				 pct(tr.cross_llc_tasks, m->tasks));
			snprintf(b, sizeof(b), "%" PRIu64 " %5.1f%%", tr.cross_node_tasks,
				 pct(tr.cross_node_tasks, m->tasks));
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
	       n, seed, m->n, m->steals);
	if (m->has_tasks)
		printf("%" PRIu64, m->tasks);
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
		if (m->steals)
			printf("%.3f", (double)tr.distance_sum / (double)m->steals);
		else
			printf("null");
		if (m->has_tasks)
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
	const char *root = NULL, *policy = NULL, *matrix_path = NULL;
	struct matrix m = {0};
	long long n = 0, first_cpu = -1;
	uint64_t seed = 0;
	bool json = false;
	int c;

	opterr = 0; /* our own one-line messages */
	while ((c = getopt_long(argc, argv, ":n:p:s:f:m:jh", longopts, NULL)) != -1) {
		switch (c) {
		case 'r':
			root = optarg;
			break;
		case 'n':
			n = number("-n", optarg, 1, MAX_N);
			break;
		case 'p':
			policy = optarg;
			break;
		case 's': {
			char *end;

			errno = 0;
			seed = strtoull(optarg, &end, 0);
			if (!*optarg || *end || errno || optarg[0] == '-')
				die("--seed wants an unsigned 64-bit number, got '%s'", optarg);
			break;
		}
		case 'f':
			first_cpu = number("--first-cpu", optarg, 0, 1 << 20);
			break;
		case 'm':
			matrix_path = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case ':':
			die("%s needs an argument (try --help)", argv[optind - 1]);
		default:
			if (optopt)
				die("unknown option '-%c' (try --help)", optopt);
			die("unknown option '%s' (try --help)", argv[optind - 1]);
		}
	}
	if (optind < argc)
		die("unexpected argument '%s' (try --help)", argv[optind]);

	/* the policy first: a typo there should not wait for sysfs */
	struct placement pl[3];
	int npl = 0, *list = NULL;
	size_t nlist = 0;
	char err[256];

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
		if (n && m.executors > n)
			die("%s: executor %u, but -n is %lld", matrix_path, m.executors - 1, n);
		if (!n && !m.executors)
			die("%s: no steals, so no executor count: give -n", matrix_path);
		if (!n)
			n = m.executors;
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
			die("%s: %s", cbcmn_policy_name(pl[p].policy), err);
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
	free(m.v);
	cbcmn_topo_free(t);
	if (fflush(stdout) || ferror(stdout))
		die("writing the output failed");
	return 0;
}
