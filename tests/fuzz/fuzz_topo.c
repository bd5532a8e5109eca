/* fuzz_topo: the topology reader (lib/topo.c) on sysfs-shaped trees, and
 * the placement policies (lib/place.c) on whatever it accepts.
 *
 * Input: a tree, as records separated by NUL bytes.  A record is
 *     PATH '\n' CONTENT     a file (CONTENT may be empty)
 *     PATH                  an empty file, or a directory if PATH ends in '/'
 * PATH is relative to the root ("devices/system/cpu/online"); empty, "."
 * and ".." components make the record void, as do paths that would pass
 * through a file.  A later record for the same file replaces it.
 * tests/fuzz/mkcorpus.py writes the fixtures under tests/fixtures/sysfs in
 * this form.
 *
 * The tree is written under a temporary directory, loaded with
 * cbcmn_topo_load(), and removed.  Checked besides memory safety: a
 * refusal is one line naming the root and leaves *out NULL; an accepted
 * topology holds the invariants place.c and the runtime rely on
 * (lib/topo.h); each policy places executors only on allowed CPUs.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"
#include "cbcmn_topo.h"
#include "topo.h"

#define MAX_PATH 512
#define MAX_DEPTH 16

static char base[64]; /* our directory, made once: on tmpfs where there is one */
static char root[96]; /* base/t: the tree of one input */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)f;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static void rm_tree(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void cleanup(void)
{
	if (base[0])
		rm_tree(base);
}

#define BASE_PREFIX "cbcmn-fuzz-topo-"

/* A crash ends the process without atexit(): the trees of fuzzers that
 * died are removed by the next one (their pid is in the name). */
static void remove_dead(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[PATH_MAX];
		if (strncmp(de->d_name, BASE_PREFIX, strlen(BASE_PREFIX)))
			continue;
		pid_t pid = (pid_t)atoi(de->d_name + strlen(BASE_PREFIX));
		if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		rm_tree(path);
	}
	closedir(d);
}

/* The directory the previous record was written in: records come grouped
 * by directory, and most mkdir() calls would answer EEXIST. */
static char last_dir[MAX_PATH];

static bool made_already(const char *path, size_t n)
{
	return !strncmp(last_dir, path, n) && (last_dir[n] == '/' || !last_dir[n]);
}

/* Writes one record under root; a void record is skipped. */
static void write_record(const char *rec, size_t len)
{
	const char *nl = memchr(rec, '\n', len);
	size_t plen = nl ? (size_t)(nl - rec) : len;
	char path[MAX_PATH];
	size_t n = (size_t)snprintf(path, sizeof(path), "%s", root);
	int depth = 0;
	bool dir = plen && rec[plen - 1] == '/' && !nl;

	if (dir)
		plen--; /* "a/b/" is the directory a/b */
	if (!plen || plen + n + 2 >= sizeof(path))
		return;
	/* Component by component: each a directory but the last. */
	for (size_t i = 0; i < plen;) {
		size_t j = i;
		while (j < plen && rec[j] != '/')
			j++;
		size_t clen = j - i;
		if (clen == 0 || (clen == 1 && rec[i] == '.') ||
		    (clen == 2 && rec[i] == '.' && rec[i + 1] == '.') || ++depth > MAX_DEPTH)
			return;
		path[n++] = '/';
		memcpy(path + n, rec + i, clen);
		n += clen;
		path[n] = 0;
		if (j < plen && !made_already(path, n) && mkdir(path, 0755) != 0 && errno != EEXIST)
			return;
		i = j + 1;
	}
	if (dir) {
		mkdir(path, 0755);
		return;
	}
	char *slash = strrchr(path, '/');
	snprintf(last_dir, sizeof(last_dir), "%.*s", (int)(slash - path), path);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return;
	if (nl) {
		const char *c = nl + 1;
		size_t clen = len - plen - 1;
		while (clen) {
			ssize_t w = write(fd, c, clen);
			if (w <= 0)
				break;
			c += w;
			clen -= (size_t)w;
		}
	}
	close(fd);
}

static void check_topology(const cbcmn_topo *t)
{
	int ncpus = cbcmn_topo_ncpus(t), nn = cbcmn_topo_nnodes(t), nallowed = 0;
	int *core = calloc((size_t)t->ncores + 1, sizeof(int));
	int *llc = calloc((size_t)t->nllcs + 1, sizeof(int));
	int *node = calloc((size_t)nn + 1, sizeof(int)), *node_allowed = calloc((size_t)nn + 1, sizeof(int));
	int *pkg = calloc((size_t)t->npackages + 1, sizeof(int));
	if (!core || !llc || !node || !node_allowed || !pkg)
		abort();
	FUZZ_CHECK(ncpus > 0 && nn > 0, "%d CPUs, %d nodes", ncpus, nn);
	FUZZ_CHECK(t->ncores > 0 && t->nllcs > 0 && t->npackages > 0, "no groups");
	for (int i = 0; i < ncpus; i++) {
		const cbcmn_cpu_info *c = cbcmn_topo_cpu(t, i);
		FUZZ_CHECK(c, "cpu index %d", i);
		FUZZ_CHECK(c->cpu >= 0 && c->cpu < t->nbits, "CPU %d of %d bits", c->cpu, t->nbits);
		FUZZ_CHECK(!i || c->cpu > cbcmn_topo_cpu(t, i - 1)->cpu, "order at %d", i);
		FUZZ_CHECK(cbcmn_topo_find(t, c->cpu) == c, "find(%d)", c->cpu);
		FUZZ_CHECK(c->core >= 0 && c->core < t->ncores, "core %d", c->core);
		FUZZ_CHECK(c->llc >= 0 && c->llc < t->nllcs, "llc %d", c->llc);
		FUZZ_CHECK(c->node >= 0 && c->node < nn, "node %d", c->node);
		FUZZ_CHECK(c->kind == 0 || c->kind == 1, "kind %d", c->kind);
		FUZZ_CHECK(c->smt >= 0 && c->smt < t->core_ncpus[c->core], "smt %d", c->smt);
		int p = cbcmn__topo_package_index(t, c->package);
		FUZZ_CHECK(p >= 0, "package %d", c->package);
		core[c->core]++;
		llc[c->llc]++;
		node[c->node]++;
		pkg[p]++;
		if (c->allowed) {
			nallowed++;
			node_allowed[c->node]++;
		}
	}
	for (int k = 0; k < t->ncores; k++)
		FUZZ_CHECK(core[k] == t->core_ncpus[k] && core[k] > 0, "core %d", k);
	for (int k = 0; k < t->nllcs; k++)
		FUZZ_CHECK(llc[k] == t->llc_ncpus[k] && llc[k] > 0, "llc %d", k);
	for (int k = 0; k < t->npackages; k++)
		FUZZ_CHECK(pkg[k] == t->package_ncpus[k] && (!k || t->package_ids[k] > t->package_ids[k - 1]),
			   "package %d", k);
	FUZZ_CHECK(nallowed == cbcmn_topo_nallowed(t), "nallowed");
	for (int a = 0; a < nn; a++) {
		FUZZ_CHECK(node[a] == t->node_ncpus[a] && node_allowed[a] == t->node_nallowed[a], "node %d", a);
		FUZZ_CHECK(!a || cbcmn_topo_node_id(t, a) > cbcmn_topo_node_id(t, a - 1), "node ids");
		for (int b = 0; b < nn; b++) {
			int d = cbcmn_topo_distance(t, a, b);
			FUZZ_CHECK(a == b ? d == 10 : d >= 10 && d <= 255, "distance %d-%d: %d", a, b, d);
		}
	}
	free(core);
	free(llc);
	free(node);
	free(node_allowed);
	free(pkg);
}

static void check_placement(const cbcmn_topo *t)
{
	int nallowed = cbcmn_topo_nallowed(t);
	uint32_t n = nallowed ? (uint32_t)nallowed + 3 : 2; /* oversubscribed too */
	int *out = calloc(n, sizeof(int));
	char err[256];
	if (!out)
		abort();
	for (int p = CBCMN_POLICY_DEPTH_FIRST; p <= CBCMN_POLICY_RANDOM; p++) {
		bool over = false;
		err[0] = 0;
		int rc = cbcmn_place(t, (cbcmn_policy)p, n, 7, NULL, 0, -1, out, &over, err, sizeof(err));
		if (!nallowed) {
			FUZZ_CHECK(rc < 0 && err[0], "placed on no allowed CPU");
			continue;
		}
		FUZZ_CHECK(rc == 0, "policy %d: %d (%s)", p, rc, err);
		FUZZ_CHECK(over, "oversubscribed not said");
		for (uint32_t i = 0; i < n; i++) {
			const cbcmn_cpu_info *c = cbcmn_topo_find(t, out[i]);
			FUZZ_CHECK(c && c->allowed, "policy %d: executor %u on CPU %d", p, i, out[i]);
		}
	}
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!base[0]) {
		/* A file created on ext4 costs ~0.3 ms: a tree a second.  On
		 * tmpfs the loader, not the file system, takes the time. */
		struct stat st;
		const char *dir = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0
					  ? "/dev/shm" : "/tmp";
		remove_dead(dir);
		snprintf(base, sizeof(base), "%s/" BASE_PREFIX "%d", dir, (int)getpid());
		rm_tree(base); /* a pid reused: that fuzzer is dead */
		if (mkdir(base, 0700) != 0)
			abort();
		snprintf(root, sizeof(root), "%s/t", base);
		atexit(cleanup);
	}
	if (mkdir(root, 0755) != 0)
		abort();
	const char *p = (const char *)data, *end = p + size;
	while (p < end) {
		const char *z = memchr(p, 0, (size_t)(end - p));
		size_t len = z ? (size_t)(z - p) : (size_t)(end - p);
		write_record(p, len);
		p += len + 1;
	}

	cbcmn_topo *t = (cbcmn_topo *)&t;
	char err[512];
	err[0] = 0;
	int rc = cbcmn_topo_load(root, &t, err, sizeof(err));
	if (rc) {
		FUZZ_CHECK(rc < 0, "rc %d", rc);
		FUZZ_CHECK(t == NULL, "*out set on an error");
		FUZZ_ONE_LINE(err);
		FUZZ_CHECK(!strncmp(err, root, strlen(root)), "'%s' does not name the root", err);
	} else {
		check_topology(t);
		check_placement(t);
		cbcmn_topo_free(t);
	}
	rm_tree(root);
	last_dir[0] = 0;
	return 0;
}
