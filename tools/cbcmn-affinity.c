/* cbcmn-affinity: cbcmn's view of the machine (NUMA nodes and their
 * distances, LLC groups, cores, threads, the allowed CPUs, hybrid core
 * kinds) and the CPUs each placement policy picks for N executors, as a
 * table or as one JSON document.  Like lstopo / numactl -H, for cbcmn.
 *
 * Errors are one line on stderr and exit status 1.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbcmn_topo.h"

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
	"  " PROG " --policy cpus:0-3,8               check a hand-written list\n";

static const struct option longopts[] = {
	{"sysfs-root", required_argument, NULL, 'r'},
	{"executors", required_argument, NULL, 'n'},
	{"policy", required_argument, NULL, 'p'},
	{"seed", required_argument, NULL, 's'},
	{"first-cpu", required_argument, NULL, 'f'},
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

/* A JSON string: the only free text we print is a path. */
static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
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

	printf("\nplacement of %u executors (node id in brackets):\n  %5s", n, "exec");
	for (int p = 0; p < npl; p++) {
		char h[32];

		if (pl[p].policy == CBCMN_POLICY_RANDOM)
			snprintf(h, sizeof(h), "random/%llu", (unsigned long long)seed);
		else
			snprintf(h, sizeof(h), "%s", cbcmn_policy_name(pl[p].policy));
		printf("  %14s", h);
	}
	printf("\n");
	for (uint32_t i = 0; i < n; i++) {
		printf("  %5u", i);
		for (int p = 0; p < npl; p++) {
			const cbcmn_cpu_info *ci = cbcmn_topo_find(t, pl[p].out[i]);
			char cell[32];

			snprintf(cell, sizeof(cell), "%d [%d]", pl[p].out[i],
				 ci ? cbcmn_topo_node_id(t, ci->node) : -1);
			printf("  %14s", cell);
		}
		printf("\n");
	}
}

/* ---- JSON ------------------------------------------------------------------------ */

static void print_json(const cbcmn_topo *t, const char *root, struct placement *pl, int npl,
		       uint32_t n, uint64_t seed, int *v)
{
	int nn = cbcmn_topo_nnodes(t), nl = cbcmn_topo_nllcs(t), nc = cbcmn_topo_ncores(t);
	int k;
	bool first;

	printf("{\n  \"sysfs_root\": ");
	json_str(stdout, root);
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

int main(int argc, char **argv)
{
	const char *root = NULL, *policy = NULL;
	long long n = 0, first_cpu = -1;
	uint64_t seed = 0;
	bool json = false;
	int c;

	opterr = 0; /* our own one-line messages */
	while ((c = getopt_long(argc, argv, ":n:p:s:f:jh", longopts, NULL)) != -1) {
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

	if (json)
		print_json(t, root, pl, npl, (uint32_t)n, seed, v);
	else
		print_table(t, root, pl, npl, (uint32_t)n, seed, v);

	for (int p = 0; p < npl; p++)
		free(pl[p].out);
	free(v);
	free(list);
	cbcmn_topo_free(t);
	if (fflush(stdout) || ferror(stdout))
		die("writing the output failed");
	return 0;
}
