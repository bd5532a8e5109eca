/* topo.c: the machine's topology, read from sysfs or a directory shaped like it.
 *
 * Sources, all under the root (docs/TOPOLOGY.md has the details):
 *   devices/system/cpu/{online,present,possible}     which CPUs exist and run
 *   devices/system/cpu/cpuN/topology/                package, core_id, SMT siblings
 *   devices/system/cpu/cpuN/cache/indexK/            the last-level cache group
 *   devices/system/cpu/cpuN/cpu_capacity             big.LITTLE without hybrid PMUs
 *   devices/system/node/{online,possible}, nodeM/    NUMA nodes, cpulist, distance
 *   devices/cpu_atom/cpus, devices/cpu_core/cpus     x86 hybrid: E- and P-cores
 *   cbcmn-allowed                                    a fixture's affinity mask
 *
 * The loader trusts nothing it reads: every file is parsed strictly and
 * checked against the others (a CPU's SMT siblings must list the same set,
 * a node may not claim a CPU that does not exist), and the first problem
 * ends the load with -EINVAL or -ENOENT and one line naming the file.  It
 * reads a few files per CPU (about 20 with caches): O(CPUs) opens, once,
 * when a runtime starts or a tool runs; nothing here is on a hot path.
 *
 * Groups (cores, LLCs) are the kernel's own sibling sets, not keys built
 * from ids: core_id is unique only within a package on x86 and only within
 * a cluster on arm64 DT machines, where two CPUs of one package can both
 * say core_id 0.  The sets are what the scheduler itself uses.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cbcmn.h"
#include "topo.h"
#include "env.h"

#define LIVE_ROOT "/sys"
/* sysfs files are a page or a few; a list file this big is not sysfs. */
#define MAX_FILE_BYTES (1u << 20)

/* ---- bitmaps --------------------------------------------------------------- */

static size_t bm_words(int nbits)
{
	return ((size_t)nbits + 63) / 64;
}

static uint64_t *bm_alloc(int nbits)
{
	return calloc(bm_words(nbits) ? bm_words(nbits) : 1, sizeof(uint64_t));
}

static void bm_zero(uint64_t *b, int nbits)
{
	memset(b, 0, bm_words(nbits) * sizeof(uint64_t));
}

static void bm_set(uint64_t *b, int i)
{
	b[i / 64] |= 1ull << (i % 64);
}

static bool bm_test(const uint64_t *b, int i)
{
	return b[i / 64] >> (i % 64) & 1;
}

/* The first set bit >= from, or nbits. */
static int bm_next(const uint64_t *b, int nbits, int from)
{
	if (from >= nbits)
		return nbits;
	size_t w = (size_t)from / 64;
	uint64_t x = b[w] & (~0ull << (from % 64));
	while (!x) {
		if (++w >= bm_words(nbits))
			return nbits;
		x = b[w];
	}
	int i = (int)(w * 64) + __builtin_ctzll(x);
	return i < nbits ? i : nbits;
}

#define bm_for_each(i, b, nbits)                                               \
	for (int i = bm_next(b, nbits, 0); i < (nbits); i = bm_next(b, nbits, i + 1))

static int bm_last(const uint64_t *b, int nbits)
{
	for (size_t w = bm_words(nbits); w-- > 0;)
		if (b[w])
			return (int)(w * 64) + 63 - __builtin_clzll(b[w]);
	return -1;
}

/* ---- CPU lists ------------------------------------------------------------- */

/* Digits only: no sign, no leading space, no 0x (sysfs never writes them). */
static bool parse_uint(const char **pp, long *out)
{
	const char *p = *pp;
	long v = 0;
	if (!isdigit((unsigned char)*p))
		return false;
	while (isdigit((unsigned char)*p)) {
		/* Saturate: the caller's range check refuses it with its number. */
		if (v < INT_MAX)
			v = v * 10 + (*p - '0');
		p++;
	}
	*out = v < INT_MAX ? v : INT_MAX;
	*pp = p;
	return true;
}

static bool only_space(const char *p)
{
	while (isspace((unsigned char)*p))
		p++;
	return !*p;
}

int cbcmn__cpulist_parse(const char *s, uint64_t *bits, int nbits, int *bad)
{
	const char *p = s;
	if (only_space(p))
		return 0;
	for (;;) {
		const char *item = p;
		long a, b;
		if (!parse_uint(&p, &a))
			goto syntax;
		b = a;
		if (*p == '-') {
			p++;
			if (!parse_uint(&p, &b) || b < a)
				goto syntax;
		}
		if (b >= nbits) {
			*bad = (int)(a >= nbits ? a : nbits); /* the first one out */
			return -ERANGE;
		}
		for (long i = a; i <= b; i++)
			bm_set(bits, (int)i);
		if (*p == ',') {
			p++;
			continue;
		}
		if (only_space(p))
			return 0;
		item = p;
syntax:
		*bad = (int)(item - s);
		return -EINVAL;
	}
}

/* ---- the loader's state and its error messages ----------------------------- */

struct ld {
	const char *root;
	char *err;
	size_t errlen;
	char path[PATH_MAX];
	char *buf; /* the last file read, NUL-terminated */
	size_t cap;
	struct cbcmn_topo *t;
	uint64_t *online;  /* [nbits] */
	uint64_t *exist;   /* [nbits]: present, else possible, else online */
	uint64_t *tmp;     /* [nbits] scratch */
	int *pkg;          /* [ncpus] physical_package_id */
	int *core_id;      /* [ncpus] */
	int *llc_index;    /* [ncpus] the cache indexK chosen, -1: none */
};

/* Ends the load: one line, "ROOT/REL: what", into the caller's buffer. */
static int __attribute__((format(printf, 4, 5)))
fail(struct ld *ld, int rc, const char *rel, const char *fmt, ...)
{
	if (!ld->err || !ld->errlen)
		return rc;
	int n = snprintf(ld->err, ld->errlen, "%s/%s: ", ld->root, rel);
	if (n >= 0 && (size_t)n < ld->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(ld->err + n, ld->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* strerror() may format into a static buffer; these strings are constant. */
static const char *errstr(int e)
{
	const char *s = strerrordesc_np(e);
	return s ? s : "unknown error";
}

/* A short, printable quote of what a file held, for error messages. */
static const char *quote(const char *s, char *out, size_t len)
{
	size_t i = 0;
	for (; s[i] && i + 4 < len && s[i] != '\n'; i++)
		out[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
	if (s[i] && s[i] != '\n')
		out[i++] = '.', out[i++] = '.', out[i++] = '.';
	out[i] = 0;
	return out;
}

/* Reads ROOT/rel into ld->buf.  A missing file is -ENOENT: reported unless
 * optional (the caller then falls back). */
static int read_text(struct ld *ld, const char *rel, bool optional)
{
	int n = snprintf(ld->path, sizeof(ld->path), "%s/%s", ld->root, rel);
	if (n < 0 || (size_t)n >= sizeof(ld->path))
		return fail(ld, -ENAMETOOLONG, rel, "path too long");
	/* O_NONBLOCK: a FIFO in a tree that is not sysfs must not hang the
	 * open; it is refused below like any file that is not regular (a
	 * device could also block, or never end). */
	int fd = open(ld->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT && optional)
			return -ENOENT;
		return fail(ld, -e, rel, "%s", errstr(e));
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return fail(ld, -EINVAL, rel, "not a regular file");
	}
	size_t len = 0;
	int rc = 0;
	for (;;) {
		if (len + 1 >= ld->cap) {
			size_t cap = ld->cap ? ld->cap * 2 : 4096;
			char *b = cap <= MAX_FILE_BYTES ? realloc(ld->buf, cap) : NULL;
			if (!b) {
				rc = cap <= MAX_FILE_BYTES ? fail(ld, -ENOMEM, rel, "out of memory")
							   : fail(ld, -EINVAL, rel, "larger than %u bytes",
								  MAX_FILE_BYTES);
				break;
			}
			ld->buf = b;
			ld->cap = cap;
		}
		ssize_t r = read(fd, ld->buf + len, ld->cap - len - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			rc = fail(ld, -e, rel, "%s", errstr(e));
			break;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	if (rc == 0)
		ld->buf[len] = 0;
	return rc;
}

/* One integer, as sysfs writes it: optional '-', digits, a newline. */
static int read_int(struct ld *ld, const char *rel, bool optional, int *out)
{
	int rc = read_text(ld, rel, optional);
	if (rc)
		return rc;
	const char *p = ld->buf;
	bool neg = *p == '-';
	long v;
	char q[40];
	p += neg;
	if (!parse_uint(&p, &v) || !only_space(p) || v == INT_MAX)
		return fail(ld, -EINVAL, rel, "'%s' is not a number", quote(ld->buf, q, sizeof(q)));
	*out = neg ? -(int)v : (int)v;
	return 0;
}

/* A CPU (what = "CPU") or node (what = "node") list into bits, every number
 * < nbits.  With must_exist, each CPU must also be in ld->exist. */
static int read_list(struct ld *ld, const char *rel, bool optional, uint64_t *bits, int nbits,
		     const char *what, bool must_exist)
{
	int rc = read_text(ld, rel, optional);
	if (rc)
		return rc;
	bm_zero(bits, nbits);
	int bad;
	char q[40];
	rc = cbcmn__cpulist_parse(ld->buf, bits, nbits, &bad);
	if (rc == -ERANGE)
		return fail(ld, -EINVAL, rel, "%s %d does not exist", what, bad);
	if (rc) {
		const char *item = ld->buf + bad;
		size_t n = strcspn(item, ", \t\n");
		int a, b, used = -1;
		char c[40], qc[40];
		snprintf(c, sizeof(c), "%.*s", (int)(n < 32 ? n : 32), item);
		if (sscanf(c, "%d-%d%n", &a, &b, &used) == 2 && used == (int)strlen(c) && b < a)
			return fail(ld, -EINVAL, rel, "'%s': range %d-%d goes down", quote(ld->buf, q, sizeof(q)),
				    a, b);
		return fail(ld, -EINVAL, rel, "'%s' is not a %s list (at '%s')", quote(ld->buf, q, sizeof(q)),
			    what, quote(c, qc, sizeof(qc)));
	}
	if (must_exist)
		bm_for_each(i, bits, nbits)
			if (!bm_test(ld->exist, i))
				return fail(ld, -EINVAL, rel, "%s %d does not exist", what, i);
	return 0;
}

/* "devices/system/cpu/cpu<N>/<rest>" */
static const char *cpu_rel(char *buf, size_t len, int cpu, const char *rest)
{
	snprintf(buf, len, "devices/system/cpu/cpu%d/%s", cpu, rest);
	return buf;
}

/* ---- which CPUs ------------------------------------------------------------ */

static int load_cpus(struct ld *ld)
{
	struct cbcmn_topo *t = ld->t;
	uint64_t *big = bm_alloc(CBCMN__TOPO_MAX_CPUS), *ex = bm_alloc(CBCMN__TOPO_MAX_CPUS);
	const char *ex_rel = NULL;
	int rc = -ENOMEM;
	if (!big || !ex)
		goto out;
	rc = read_list(ld, "devices/system/cpu/online", false, big, CBCMN__TOPO_MAX_CPUS, "CPU",
		       false);
	if (rc)
		goto out;
	/* present says which CPUs are there (possible adds empty hot-plug
	 * slots); either bounds what the other lists may name. */
	static const char *const exist_files[] = {"devices/system/cpu/present",
						  "devices/system/cpu/possible"};
	for (size_t k = 0; k < 2 && !ex_rel; k++) {
		rc = read_list(ld, exist_files[k], true, ex, CBCMN__TOPO_MAX_CPUS, "CPU", false);
		if (rc == 0)
			ex_rel = exist_files[k];
		else if (rc != -ENOENT)
			goto out;
	}
	if (!ex_rel)
		memcpy(ex, big, bm_words(CBCMN__TOPO_MAX_CPUS) * sizeof(uint64_t));
	bm_for_each(c, big, CBCMN__TOPO_MAX_CPUS)
		if (!bm_test(ex, c)) {
			rc = fail(ld, -EINVAL, "devices/system/cpu/online", "CPU %d is online but not in %s",
				  c, ex_rel);
			goto out;
		}

	int nbits = bm_last(ex, CBCMN__TOPO_MAX_CPUS) + 1;
	t->ncpus = 0;
	bm_for_each(c, big, CBCMN__TOPO_MAX_CPUS)
		t->ncpus++;
	if (t->ncpus == 0) {
		rc = fail(ld, -EINVAL, "devices/system/cpu/online", "no CPU is online");
		goto out;
	}
	rc = -ENOMEM;
	t->nbits = nbits;
	ld->online = bm_alloc(nbits);
	ld->exist = bm_alloc(nbits);
	ld->tmp = bm_alloc(nbits);
	t->index_of = malloc(sizeof(int) * (size_t)nbits);
	t->cpus = calloc((size_t)t->ncpus, sizeof(*t->cpus));
	ld->pkg = calloc((size_t)t->ncpus, sizeof(int));
	ld->core_id = calloc((size_t)t->ncpus, sizeof(int));
	ld->llc_index = calloc((size_t)t->ncpus, sizeof(int));
	if (!ld->online || !ld->exist || !ld->tmp || !t->index_of || !t->cpus || !ld->pkg ||
	    !ld->core_id || !ld->llc_index)
		goto out;
	memcpy(ld->online, big, bm_words(nbits) * sizeof(uint64_t));
	memcpy(ld->exist, ex, bm_words(nbits) * sizeof(uint64_t));
	int i = 0;
	for (int c = 0; c < nbits; c++) {
		t->index_of[c] = bm_test(ld->online, c) ? i : -1;
		if (bm_test(ld->online, c))
			t->cpus[i++].cpu = c;
	}
	rc = 0;
out:
	free(big);
	free(ex);
	return rc;
}

/* ---- grouping CPUs by the sibling sets sysfs gives ------------------------- */

/* Cores and LLC groups both come from per-CPU lists that must agree: every
 * member of a set lists exactly that set.  Sets are taken in order of their
 * first CPU, which gives the machine-wide index.  Each CPU belongs to at
 * most one set, so the member pool holds at most ncpus entries. */
struct groups {
	int n;
	int *claim;  /* [ncpus]: the group whose set contains the CPU, -1: none yet */
	int *start;  /* [ncpus + 1]: group g's members are pool[start[g]..start[g + 1]) */
	int *pool;   /* [ncpus] CPU indexes */
};

static int groups_init(struct groups *g, int ncpus)
{
	g->n = 0;
	g->claim = malloc(sizeof(int) * (size_t)ncpus);
	g->start = calloc((size_t)ncpus + 1, sizeof(int));
	g->pool = malloc(sizeof(int) * (size_t)ncpus);
	if (!g->claim || !g->start || !g->pool)
		return -ENOMEM;
	for (int i = 0; i < ncpus; i++)
		g->claim[i] = -1;
	return 0;
}

static void groups_fini(struct groups *g)
{
	free(g->claim);
	free(g->start);
	free(g->pool);
}

/* CPU index i says its set is set (a CPU bitmap, offline CPUs ignored: the
 * kernel drops them from sibling masks, a fixture may not).  Returns its
 * group, and in *pos its rank in the set. */
static int groups_add(struct ld *ld, struct groups *g, int i, const uint64_t *set,
		      const char *rel, int *pos)
{
	struct cbcmn_topo *t = ld->t;
	int n = 0, first = -1, rank = -1;
	char q[40];
	bm_for_each(c, set, t->nbits) {
		if (!bm_test(ld->online, c))
			continue;
		int k = t->index_of[c];
		if (first < 0)
			first = k;
		if (k == i)
			rank = n;
		n++;
	}
	if (rank < 0)
		return fail(ld, -EINVAL, rel, "'%s' does not list cpu%d itself",
			    quote(ld->buf, q, sizeof(q)), t->cpus[i].cpu);

	int grp = g->claim[i];
	if (grp < 0) {
		/* A new set: its first CPU is the one that starts it, and none of
		 * its members may already be in another set. */
		if (first != i)
			return fail(ld, -EINVAL, rel, "'%s' disagrees with cpu%d's list, which leaves cpu%d out",
				    quote(ld->buf, q, sizeof(q)), t->cpus[first].cpu, t->cpus[i].cpu);
		grp = g->n++;
		int *m = g->pool + g->start[grp];
		bm_for_each(c, set, t->nbits) {
			if (!bm_test(ld->online, c))
				continue;
			int k = t->index_of[c];
			if (g->claim[k] >= 0)
				return fail(ld, -EINVAL, rel, "'%s' overlaps the set of cpu%d",
					    quote(ld->buf, q, sizeof(q)),
					    t->cpus[g->pool[g->start[g->claim[k]]]].cpu);
			g->claim[k] = grp;
			*m++ = k;
		}
		g->start[grp + 1] = g->start[grp] + n;
	} else {
		/* A later member: it must list exactly the set its first CPU did. */
		int *m = g->pool + g->start[grp];
		bool same = n == g->start[grp + 1] - g->start[grp];
		int j = 0;
		bm_for_each(c, set, t->nbits) {
			if (!same)
				break;
			if (bm_test(ld->online, c))
				same = m[j++] == t->index_of[c];
		}
		if (!same)
			return fail(ld, -EINVAL, rel, "'%s' disagrees with cpu%d's list",
				    quote(ld->buf, q, sizeof(q)), t->cpus[m[0]].cpu);
	}
	*pos = rank;
	return grp;
}

/* ---- packages and cores ---------------------------------------------------- */

static int load_cores(struct ld *ld)
{
	struct cbcmn_topo *t = ld->t;
	struct groups g;
	char rel[96];
	int rc = groups_init(&g, t->ncpus);
	for (int i = 0; i < t->ncpus && rc == 0; i++) {
		int cpu = t->cpus[i].cpu;
		rc = read_int(ld, cpu_rel(rel, sizeof(rel), cpu, "topology/physical_package_id"), false,
			      &ld->pkg[i]);
		if (rc)
			break;
		rc = read_int(ld, cpu_rel(rel, sizeof(rel), cpu, "topology/core_id"), false, &ld->core_id[i]);
		if (rc)
			break;
		/* core_cpus_list (5.7+) replaces thread_siblings_list, which
		 * older kernels have alone; they hold the same set. */
		rc = read_list(ld, cpu_rel(rel, sizeof(rel), cpu, "topology/core_cpus_list"), true, ld->tmp,
			       t->nbits, "CPU", true);
		if (rc == -ENOENT)
			rc = read_list(ld, cpu_rel(rel, sizeof(rel), cpu, "topology/thread_siblings_list"),
				       false, ld->tmp, t->nbits, "CPU", true);
		if (rc)
			break;
		int smt, core = groups_add(ld, &g, i, ld->tmp, rel, &smt);
		if (core < 0) {
			rc = core;
			break;
		}
		/* SMT siblings share a package and a core_id; a set that says
		 * otherwise is a corrupt file, not a topology. */
		int lead = g.pool[g.start[core]];
		if (ld->pkg[i] != ld->pkg[lead] || ld->core_id[i] != ld->core_id[lead])
			rc = fail(ld, -EINVAL, rel,
				  "cpu%d (package %d, core_id %d) listed as an SMT sibling of cpu%d (package %d, core_id %d)",
				  cpu, ld->pkg[i], ld->core_id[i], t->cpus[lead].cpu, ld->pkg[lead],
				  ld->core_id[lead]);
		t->cpus[i].package = ld->pkg[i];
		t->cpus[i].core = core;
		t->cpus[i].smt = smt;
	}
	if (rc == 0) {
		t->ncores = g.n;
		t->core_ncpus = calloc((size_t)g.n, sizeof(int));
		if (!t->core_ncpus)
			rc = -ENOMEM;
		for (int k = 0; k < g.n && rc == 0; k++)
			t->core_ncpus[k] = g.start[k + 1] - g.start[k];
	}
	groups_fini(&g);
	if (rc)
		return rc;

	/* Packages: the distinct ids, sorted (ids may have holes, or be -1 on
	 * some arm64 firmware). */
	int *ids = malloc(sizeof(int) * (size_t)t->ncpus);
	if (!ids)
		return -ENOMEM;
	memcpy(ids, ld->pkg, sizeof(int) * (size_t)t->ncpus);
	for (int a = 1; a < t->ncpus; a++) /* insertion sort: mostly sorted already */
		for (int b = a; b > 0 && ids[b - 1] > ids[b]; b--) {
			int x = ids[b];
			ids[b] = ids[b - 1];
			ids[b - 1] = x;
		}
	int n = 0;
	for (int a = 0; a < t->ncpus; a++)
		if (a == 0 || ids[a] != ids[a - 1])
			ids[n++] = ids[a];
	t->npackages = n;
	t->package_ids = ids;
	t->package_ncpus = calloc((size_t)n, sizeof(int));
	if (!t->package_ncpus)
		return -ENOMEM;
	for (int i = 0; i < t->ncpus; i++)
		t->package_ncpus[cbcmn__topo_package_index(t, t->cpus[i].package)]++;
	return 0;
}

/* ---- last-level caches ----------------------------------------------------- */

/* The CPU's highest-level data or unified cache: its indexK number, or -1
 * when the CPU has no cache information (arm64 without cacheinfo, VMs). */
static int pick_llc(struct ld *ld, int cpu, int *out)
{
	char rel[96], sub[64];
	int n = snprintf(ld->path, sizeof(ld->path), "%s/%s", ld->root,
			 cpu_rel(rel, sizeof(rel), cpu, "cache"));
	if (n < 0 || (size_t)n >= sizeof(ld->path))
		return fail(ld, -ENAMETOOLONG, rel, "path too long");
	DIR *d = opendir(ld->path);
	*out = -1;
	if (!d) {
		int e = errno;
		if (e == ENOENT)
			return 0;
		return fail(ld, -e, rel, "%s", errstr(e));
	}
	int best_level = INT_MIN, rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		const char *p = de->d_name;
		long k;
		if (strncmp(p, "index", 5))
			continue;
		p += 5;
		if (!parse_uint(&p, &k) || *p || k >= INT_MAX)
			continue;
		int level;
		snprintf(sub, sizeof(sub), "cache/index%ld/level", k);
		rc = read_int(ld, cpu_rel(rel, sizeof(rel), cpu, sub), false, &level);
		if (rc)
			break;
		snprintf(sub, sizeof(sub), "cache/index%ld/type", k);
		rc = read_text(ld, cpu_rel(rel, sizeof(rel), cpu, sub), false);
		if (rc)
			break;
		ld->buf[strcspn(ld->buf, "\n")] = 0;
		if (strcmp(ld->buf, "Data") && strcmp(ld->buf, "Unified"))
			continue; /* Instruction (or unknown): code, not data, is shared there */
		/* Ties (two data caches at one level) go to the lowest index:
		 * readdir's order is the file system's, not ours. */
		if (level > best_level || (level == best_level && k < *out)) {
			best_level = level;
			*out = (int)k;
		}
	}
	closedir(d);
	return rc;
}

static int load_llcs(struct ld *ld)
{
	struct cbcmn_topo *t = ld->t;
	char rel[96], sub[64];
	int rc = 0;
	for (int i = 0; i < t->ncpus && rc == 0; i++)
		rc = pick_llc(ld, t->cpus[i].cpu, &ld->llc_index[i]);
	if (rc)
		return rc;

	struct groups g;
	rc = groups_init(&g, t->ncpus);
	for (int i = 0; i < t->ncpus && rc == 0; i++) {
		int cpu = t->cpus[i].cpu, pos, llc;
		if (ld->llc_index[i] >= 0) {
			snprintf(sub, sizeof(sub), "cache/index%d/shared_cpu_list", ld->llc_index[i]);
			rc = read_list(ld, cpu_rel(rel, sizeof(rel), cpu, sub), false, ld->tmp, t->nbits,
				       "CPU", true);
			if (rc)
				break;
		} else {
			/* No cache information: the package stands for the LLC, shared
			 * by the package's CPUs that have none either. */
			bm_zero(ld->tmp, t->nbits);
			for (int k = 0; k < t->ncpus; k++)
				if (ld->llc_index[k] < 0 && ld->pkg[k] == ld->pkg[i])
					bm_set(ld->tmp, t->cpus[k].cpu);
			cpu_rel(rel, sizeof(rel), cpu, "cache");
			if (ld->buf)
				ld->buf[0] = 0; /* nothing read to quote */
		}
		llc = groups_add(ld, &g, i, ld->tmp, rel, &pos);
		if (llc < 0)
			rc = llc;
		else
			t->cpus[i].llc = llc;
	}
	if (rc == 0) {
		t->nllcs = g.n;
		t->llc_ncpus = calloc((size_t)g.n, sizeof(int));
		if (!t->llc_ncpus)
			rc = -ENOMEM;
		for (int k = 0; k < g.n && rc == 0; k++)
			t->llc_ncpus[k] = g.start[k + 1] - g.start[k];
	}
	groups_fini(&g);
	return rc;
}

/* ---- NUMA nodes ------------------------------------------------------------ */

static int alloc_nodes(struct cbcmn_topo *t, int n)
{
	t->nnodes = n;
	t->node_ids = calloc((size_t)n, sizeof(int));
	t->node_ncpus = calloc((size_t)n, sizeof(int));
	t->node_nallowed = calloc((size_t)n, sizeof(int));
	t->distance = calloc((size_t)n * (size_t)n, sizeof(int));
	return t->node_ids && t->node_ncpus && t->node_nallowed && t->distance ? 0 : -ENOMEM;
}

/* One row of the SLIT: nnodes numbers, 10 to itself, 10..255 to the others
 * (10 happens between nodes: numa=fake splits one node in several). */
static int parse_distance(struct ld *ld, const char *rel, int a)
{
	struct cbcmn_topo *t = ld->t;
	const char *p = ld->buf;
	int n = 0;
	char q[40];
	for (;;) {
		while (isspace((unsigned char)*p))
			p++;
		if (!*p)
			break;
		long v;
		const char *tok = p;
		if (!parse_uint(&p, &v) || (*p && !isspace((unsigned char)*p))) {
			char w[40], qw[40];
			size_t len = strcspn(tok, " \t\n");
			snprintf(w, sizeof(w), "%.*s", (int)(len < 32 ? len : 32), tok);
			return fail(ld, -EINVAL, rel, "'%s': '%s' is not a number",
				    quote(ld->buf, q, sizeof(q)), quote(w, qw, sizeof(qw)));
		}
		if (n < t->nnodes) {
			int b = n;
			if ((a == b && v != 10) || v < 10 || v > 255)
				return fail(ld, -EINVAL, rel, "distance to node%d is %ld, expected %s",
					    t->node_ids[b], v, a == b ? "10" : "10..255");
			t->distance[a * t->nnodes + b] = (int)v;
		}
		n++;
	}
	if (n != t->nnodes)
		return fail(ld, -EINVAL, rel, "%d value%s, expected %d", n, n == 1 ? "" : "s", t->nnodes);
	return 0;
}

static int load_nodes(struct ld *ld)
{
	struct cbcmn_topo *t = ld->t;
	char rel[96];
	struct stat st;
	snprintf(ld->path, sizeof(ld->path), "%s/devices/system/node", ld->root);
	if (stat(ld->path, &st) != 0 && errno == ENOENT) {
		/* A kernel without CONFIG_NUMA: one node 0 holding everything. */
		if (alloc_nodes(t, 1))
			return -ENOMEM;
		t->node_ids[0] = 0;
		t->distance[0] = 10;
		t->node_ncpus[0] = t->ncpus;
		return 0;
	}

	/* online: the nodes the distance files have a column for. */
	uint64_t *ids = bm_alloc(CBCMN__TOPO_MAX_NODES);
	if (!ids)
		return -ENOMEM;
	int rc = read_list(ld, "devices/system/node/online", true, ids, CBCMN__TOPO_MAX_NODES, "node",
			   false);
	if (rc == -ENOENT)
		rc = read_list(ld, "devices/system/node/possible", true, ids, CBCMN__TOPO_MAX_NODES,
			       "node", false);
	if (rc == -ENOENT)
		rc = fail(ld, -ENOENT, "devices/system/node/online", "%s (nor node/possible)",
			  errstr(ENOENT));
	int n = 0;
	if (rc == 0) {
		bm_for_each(m, ids, CBCMN__TOPO_MAX_NODES)
			n++;
		if (n == 0)
			rc = fail(ld, -EINVAL, "devices/system/node/online", "no node is online");
	}
	if (rc == 0)
		rc = alloc_nodes(t, n);
	if (rc) {
		free(ids);
		return rc;
	}
	n = 0;
	bm_for_each(m, ids, CBCMN__TOPO_MAX_NODES)
		t->node_ids[n++] = m;
	free(ids);

	for (int i = 0; i < t->ncpus; i++)
		t->cpus[i].node = -1;
	for (int a = 0; a < t->nnodes; a++) {
		int id = t->node_ids[a];
		snprintf(rel, sizeof(rel), "devices/system/node/node%d/cpulist", id);
		rc = read_list(ld, rel, false, ld->tmp, t->nbits, "CPU", true);
		if (rc)
			return rc;
		bm_for_each(c, ld->tmp, t->nbits) {
			int i = t->index_of[c];
			if (i < 0)
				continue; /* offline: not in the topology */
			if (t->cpus[i].node >= 0)
				return fail(ld, -EINVAL, rel, "CPU %d is also in node%d", c,
					    t->node_ids[t->cpus[i].node]);
			t->cpus[i].node = a;
			t->node_ncpus[a]++;
		}
		snprintf(rel, sizeof(rel), "devices/system/node/node%d/distance", id);
		rc = read_text(ld, rel, false);
		if (rc == 0)
			rc = parse_distance(ld, rel, a);
		if (rc)
			return rc;
	}
	for (int i = 0; i < t->ncpus; i++)
		if (t->cpus[i].node < 0)
			return fail(ld, -EINVAL, "devices/system/node", "CPU %d is online but no node%s/cpulist lists it",
				    t->cpus[i].cpu, t->nnodes > 1 ? "*" : "");
	return 0;
}

/* ---- performance and efficiency cores -------------------------------------- */

static int load_kinds(struct ld *ld)
{
	struct cbcmn_topo *t = ld->t;
	uint64_t *core = bm_alloc(t->nbits);
	int *cap = NULL;
	if (!core)
		return -ENOMEM;
	/* x86 hybrid parts register one PMU per core type; their cpus files
	 * are the kernel's own split (the same one perf and lscpu use). */
	int rc_atom = read_list(ld, "devices/cpu_atom/cpus", true, ld->tmp, t->nbits, "CPU", true);
	int rc_core = read_list(ld, "devices/cpu_core/cpus", true, core, t->nbits, "CPU", true);
	int rc = 0;
	if ((rc_atom && rc_atom != -ENOENT) || (rc_core && rc_core != -ENOENT)) {
		rc = rc_atom && rc_atom != -ENOENT ? rc_atom : rc_core;
		goto out;
	}
	if (rc_atom == 0) {
		bm_for_each(c, ld->tmp, t->nbits) {
			if (rc_core == 0 && bm_test(core, c)) {
				rc = fail(ld, -EINVAL, "devices/cpu_atom/cpus", "CPU %d is in cpu_core/cpus too", c);
				goto out;
			}
			if (t->index_of[c] >= 0)
				t->cpus[t->index_of[c]].kind = 1;
		}
		goto out;
	}
	if (rc_core == 0)
		goto out; /* a hybrid PMU with no E-core online: all performance */

	/* Elsewhere (arm64 big.LITTLE), cpu_capacity, scaled so the biggest
	 * CPU is 1024.  "Efficiency" means at most half the biggest: x86
	 * turbo-favoured cores differ by a few percent and are not E-cores;
	 * little cores are well under half a big one. */
	char rel[96];
	int max = 0;
	cap = malloc(sizeof(int) * (size_t)t->ncpus);
	if (!cap) {
		rc = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < t->ncpus; i++) {
		rc = read_int(ld, cpu_rel(rel, sizeof(rel), t->cpus[i].cpu, "cpu_capacity"), true, &cap[i]);
		if (rc == -ENOENT) {
			rc = 0; /* capacities only count when every CPU has one */
			goto out;
		}
		if (rc)
			goto out;
		if (cap[i] <= 0) {
			rc = fail(ld, -EINVAL, rel, "capacity %d, expected > 0", cap[i]);
			goto out;
		}
		if (cap[i] > max)
			max = cap[i];
	}
	for (int i = 0; i < t->ncpus; i++)
		t->cpus[i].kind = 2 * (long)cap[i] <= max;
out:
	free(cap);
	free(core);
	return rc;
}

/* ---- allowed CPUs ---------------------------------------------------------- */

/* The process's affinity mask, which the kernel has already clipped to the
 * cpuset and to active CPUs.  The mask size the kernel wants is not known
 * up front (nr_cpu_ids): grow until it stops saying EINVAL. */
static int live_affinity(struct ld *ld)
{
	struct cbcmn_topo *t = ld->t;
	for (int n = 1024; n <= CBCMN__TOPO_MAX_CPUS; n *= 2) {
		cpu_set_t *set = CPU_ALLOC(n);
		size_t sz = CPU_ALLOC_SIZE(n);
		if (!set)
			return -ENOMEM;
		if (sched_getaffinity(0, sz, set) == 0) {
			for (int i = 0; i < t->ncpus; i++)
				t->cpus[i].allowed = t->cpus[i].cpu < n && CPU_ISSET_S(t->cpus[i].cpu, sz, set);
			CPU_FREE(set);
			return 0;
		}
		int e = errno;
		CPU_FREE(set);
		if (e != EINVAL) {
			if (ld->err && ld->errlen)
				snprintf(ld->err, ld->errlen, "sched_getaffinity: %s", errstr(e));
			return -e;
		}
	}
	if (ld->err && ld->errlen)
		snprintf(ld->err, ld->errlen, "sched_getaffinity: no mask size up to %d CPUs works",
			 CBCMN__TOPO_MAX_CPUS);
	return -EINVAL;
}

static int load_allowed(struct ld *ld)
{
	struct cbcmn_topo *t = ld->t;
	int rc;
	if (t->live) {
		rc = live_affinity(ld);
	} else {
		/* A fixture's stand-in for the mask.  Like the kernel's, it may
		 * name offline CPUs (they are not allowed), not missing ones. */
		rc = read_list(ld, "cbcmn-allowed", true, ld->tmp, t->nbits, "CPU", true);
		for (int i = 0; i < t->ncpus; i++)
			t->cpus[i].allowed = rc == -ENOENT || (rc == 0 && bm_test(ld->tmp, t->cpus[i].cpu));
		if (rc == -ENOENT)
			rc = 0;
	}
	if (rc)
		return rc;
	for (int i = 0; i < t->ncpus; i++)
		if (t->cpus[i].allowed) {
			t->nallowed++;
			t->node_nallowed[t->cpus[i].node]++;
		}
	return 0;
}

/* ---- load ------------------------------------------------------------------ */

static int load_once(struct ld *ld)
{
	int rc = load_cpus(ld);
	if (rc == 0)
		rc = load_cores(ld);
	if (rc == 0)
		rc = load_llcs(ld);
	if (rc == 0)
		rc = load_nodes(ld);
	if (rc == 0)
		rc = load_kinds(ld);
	if (rc == 0)
		rc = load_allowed(ld);
	if (rc == -ENOMEM && ld->err && ld->errlen)
		snprintf(ld->err, ld->errlen, "%s: out of memory reading the topology", ld->root);
	return rc;
}

static void ld_reset(struct ld *ld)
{
	free(ld->online);
	free(ld->exist);
	free(ld->tmp);
	free(ld->pkg);
	free(ld->core_id);
	free(ld->llc_index);
	ld->online = ld->exist = ld->tmp = NULL;
	ld->pkg = ld->core_id = ld->llc_index = NULL;
}

/* The online list as text, to tell a CPU hot-plugged mid-load from a real
 * error; NULL if unreadable. */
static char *online_text(struct ld *ld)
{
	char *s = NULL;
	char *e = ld->err;
	ld->err = NULL; /* a failure here must not overwrite the real error */
	if (read_text(ld, "devices/system/cpu/online", false) == 0)
		s = strdup(ld->buf);
	ld->err = e;
	return s;
}

CBCMN_API int cbcmn_topo_load(const char *sysfs_root, cbcmn_topo **out, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = 0;
	if (!out) {
		if (err && errlen)
			snprintf(err, errlen, "cbcmn_topo_load: out is NULL");
		return -EINVAL;
	}
	*out = NULL;
	const char *root = sysfs_root;
	if (!root) {
		root = cbcmn__env("CBCMN_SYSFS_ROOT");
		if (!root || !*root)
			root = LIVE_ROOT;
	}
	if (!*root) {
		if (err && errlen)
			snprintf(err, errlen, "cbcmn_topo_load: empty sysfs root");
		return -EINVAL;
	}

	struct cbcmn_topo *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	/* "/sys/" and "/sys" are the same root: keep messages free of "//". */
	size_t len = strlen(root);
	while (len > 1 && root[len - 1] == '/')
		len--;
	t->root = strndup(root, len);
	if (!t->root) {
		free(t);
		return -ENOMEM;
	}
	/* The live machine, however it was named ("/sys/", a symlink to it):
	 * its allowed CPUs are the affinity mask, not a file. */
	char *real = realpath(t->root, NULL);
	t->live = real && !strcmp(real, LIVE_ROOT);
	free(real);

	struct ld ld = {.root = t->root, .err = err, .errlen = errlen, .t = t};
	int rc;
	for (int attempt = 0;; attempt++) {
		char *before = t->live ? online_text(&ld) : NULL;
		rc = load_once(&ld);
		ld_reset(&ld);
		if (rc == 0 || !t->live || attempt == 2) {
			free(before);
			break;
		}
		/* A CPU that goes offline mid-load takes its topology directory
		 * with it; if the online set changed, the error is stale. */
		char *after = online_text(&ld);
		bool changed = !before || !after || strcmp(before, after);
		free(before);
		free(after);
		if (!changed)
			break;
		char *keep = t->root;
		t->root = NULL;
		cbcmn_topo_free(t);
		t = calloc(1, sizeof(*t));
		if (!t) {
			free(keep);
			return -ENOMEM;
		}
		t->root = keep;
		t->live = true;
		ld.t = t;
		ld.root = t->root;
	}
	free(ld.buf);
	if (rc) {
		cbcmn_topo_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

CBCMN_API void cbcmn_topo_free(cbcmn_topo *t)
{
	if (!t)
		return;
	free(t->root);
	free(t->cpus);
	free(t->index_of);
	free(t->core_ncpus);
	free(t->llc_ncpus);
	free(t->package_ids);
	free(t->package_ncpus);
	free(t->node_ids);
	free(t->node_ncpus);
	free(t->node_nallowed);
	free(t->distance);
	free(t);
}

int cbcmn__topo_package_index(const struct cbcmn_topo *t, int package_id)
{
	int lo = 0, hi = t->npackages;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (t->package_ids[mid] < package_id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < t->npackages && t->package_ids[lo] == package_id ? lo : -1;
}

/* ---- accessors: NULL or an index out of range is a caller's bug, answered
 * with 0 / NULL / -EINVAL rather than a crash. ---------------------------- */

CBCMN_API int cbcmn_topo_ncpus(const cbcmn_topo *t)
{
	return t ? t->ncpus : 0;
}

CBCMN_API const cbcmn_cpu_info *cbcmn_topo_cpu(const cbcmn_topo *t, int i)
{
	return t && i >= 0 && i < t->ncpus ? &t->cpus[i] : NULL;
}

CBCMN_API const cbcmn_cpu_info *cbcmn_topo_find(const cbcmn_topo *t, int cpu)
{
	if (!t || cpu < 0 || cpu >= t->nbits || t->index_of[cpu] < 0)
		return NULL;
	return &t->cpus[t->index_of[cpu]];
}

CBCMN_API int cbcmn_topo_nallowed(const cbcmn_topo *t)
{
	return t ? t->nallowed : 0;
}

CBCMN_API int cbcmn_topo_nnodes(const cbcmn_topo *t)
{
	return t ? t->nnodes : 0;
}

CBCMN_API int cbcmn_topo_ncores(const cbcmn_topo *t)
{
	return t ? t->ncores : 0;
}

CBCMN_API int cbcmn_topo_nllcs(const cbcmn_topo *t)
{
	return t ? t->nllcs : 0;
}

CBCMN_API int cbcmn_topo_npackages(const cbcmn_topo *t)
{
	return t ? t->npackages : 0;
}

CBCMN_API int cbcmn_topo_node_id(const cbcmn_topo *t, int i)
{
	return t && i >= 0 && i < t->nnodes ? t->node_ids[i] : -EINVAL;
}

CBCMN_API int cbcmn_topo_distance(const cbcmn_topo *t, int a, int b)
{
	if (!t || a < 0 || b < 0 || a >= t->nnodes || b >= t->nnodes)
		return -EINVAL;
	return t->distance[a * t->nnodes + b];
}
