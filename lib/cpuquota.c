/* cpuquota.c: the CPU time a cgroup limit gives this process, so that the
 * default number of executors fits a container's limit (docker --cpus, a
 * Kubernetes CPU limit, systemd CPUQuota=).
 *
 * Two executors on a limit of half a CPU take turns being throttled: each
 * spins or runs while the other's work waits for the next period, and the
 * whole process stops for the rest of every 100 ms period once the quota
 * is spent.  One executor per CPU the limit allows (rounded up) keeps the
 * parallelism the limit can pay for.
 *
 * Where the limit is read (cgroup(7)):
 *   - /proc/self/cgroup names the process's cgroup: "0::PATH" on the
 *     unified (v2) hierarchy, "N:cpu,cpuacct:PATH" on a v1 one with the cpu
 *     controller (a hybrid system has both: v1's cpu controller is the one
 *     that limits, if it is mounted);
 *   - /proc/self/mountinfo says where that hierarchy is mounted and which
 *     of its cgroups the mount shows as its root (a container sees its own
 *     cgroup as "/", through a cgroup namespace or a bind mount); of
 *     several mounts of the hierarchy, the one that shows our cgroup;
 *   - from the process's cgroup up to the mount's root, every level may
 *     limit: v2's cpu.max ("QUOTA PERIOD" or "max PERIOD"), v1's
 *     cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us.  The lowest
 *     wins, as the kernel enforces every level.
 * Anything missing or unreadable is no limit: the default stays one
 * executor per CPU of the affinity mask, as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpuquota.h"

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

/* Whether the comma-separated list names item exactly ("cpu" is not
 * "cpuset" nor "cpuacct"). */
static bool list_has(const char *list, const char *item)
{
	size_t n = strlen(item);
	for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, item, n) && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

/* root/dir/file (dir may be ""); NULL if it cannot be opened or its name
 * is too long. */
static FILE *open_in(const char *root, const char *dir, const char *file)
{
	char full[PATH_MAX];
	int n = snprintf(full, sizeof(full), "%s%s/%s", root, dir, file);
	if (n < 0 || (size_t)n >= sizeof(full))
		return NULL;
	return fopen(full, "re");
}

/* The process's cgroup on the v1 hierarchy with the cpu controller (v2
 * false) or on the unified one (v2 true), into path. */
static bool own_cgroup(const char *root, bool v2, char *path, size_t len)
{
	FILE *f = open_in(root, "/proc/self", "cgroup");
	char line[PATH_MAX + 256];
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c1 = *c2 = '\0';
		bool unified = !strcmp(line, "0") && c2 == c1 + 1;
		if (v2 ? !unified : unified || !list_has(c1 + 1, "cpu"))
			continue;
		if (strlen(c2 + 1) < len) {
			strcpy(path, c2 + 1);
			found = true;
		}
	}
	if (f)
		fclose(f);
	return found;
}

/* Whether cgroup path cg is root or below it ("/a/b" is below "/a", not
 * below "/ab"). */
static bool cg_below(const char *cg, const char *root)
{
	size_t rl = strlen(root);
	if (!strcmp(root, "/"))
		return cg[0] == '/';
	return !strncmp(cg, root, rl) && (cg[rl] == '/' || cg[rl] == '\0');
}

/* The hierarchy's mount point and the cgroup it shows as its root.  A
 * hierarchy may be mounted more than once (the host's cgroupfs bind-mounted
 * into a container beside its own view): the mount that shows our cgroup
 * cg, with the longest root (the closest view of it), else the first. */
static bool find_mount(const char *root, bool v2, const char *cg, char *point, char *mroot,
		       size_t len)
{
	FILE *f = open_in(root, "/proc/self", "mountinfo");
	char line[3 * PATH_MAX];
	bool found = false, shows_cg = false;
	while (f && fgets(line, sizeof(line), f)) {
		/* ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER */
		char *field[6], *save = NULL, *tok = strtok_r(line, " \n", &save);
		int n = 0;
		for (; tok && n < 6; tok = strtok_r(NULL, " \n", &save))
			field[n++] = tok;
		while (tok && strcmp(tok, "-"))
			tok = strtok_r(NULL, " \n", &save);
		char *fstype = tok ? strtok_r(NULL, " \n", &save) : NULL;
		char *source = fstype ? strtok_r(NULL, " \n", &save) : NULL;
		char *super = source ? strtok_r(NULL, " \n", &save) : NULL;
		if (n < 6 || !super)
			continue;
		if (v2 ? strcmp(fstype, "cgroup2") : strcmp(fstype, "cgroup") || !list_has(super, "cpu"))
			continue;
		unescape(field[3]);
		unescape(field[4]);
		if (strlen(field[3]) >= len || strlen(field[4]) >= len)
			continue;
		bool shows = cg_below(cg, field[3]);
		/* A later mount replaces the one kept only if it shows our
		 * cgroup and the kept one does not, or shows it from closer. */
		if (found && (!shows || (shows_cg && strlen(field[3]) <= strlen(mroot))))
			continue;
		strcpy(mroot, field[3]);
		strcpy(point, field[4]);
		found = true;
		shows_cg = shows;
	}
	if (f)
		fclose(f);
	return found;
}

/* A limit file's text in CPUs (0: none): v2's cpu.max ("QUOTA PERIOD" or
 * "max PERIOD"), or v1's cpu.cfs_quota_us (-1: none) over period. */
static double limit_of(const char *text, bool v2, long long period)
{
	long long quota = -1;
	if (v2) {
		char q[32];
		if (sscanf(text, "%31s %lld", q, &period) == 2 && strcmp(q, "max"))
			quota = strtoll(q, NULL, 10);
	} else if (sscanf(text, "%lld", &quota) != 1) {
		quota = -1;
	}
	return quota > 0 && period > 0 ? (double)quota / (double)period : 0;
}

/* root/dir/file opened for a pread on each tick, or -1. */
static int open_held(const char *root, const char *dir, const char *file)
{
	char full[PATH_MAX];
	int n = snprintf(full, sizeof(full), "%s%s/%s", root, dir, file);
	if (n < 0 || (size_t)n >= sizeof(full))
		return -1;
	return open(full, O_RDONLY | O_CLOEXEC);
}

/* fd's text from its start into text (size len), or false. */
static bool pread_text(int fd, char *text, size_t len)
{
	ssize_t k = fd >= 0 ? pread(fd, text, len - 1, 0) : -1;
	if (k <= 0)
		return false;
	text[k] = '\0';
	return true;
}

/* The limit one level's files say now, in CPUs (0: none); pfd: v1's
 * period. */
static double level_limit(int fd, int pfd, bool v2)
{
	char text[64], ptext[32];
	long long period = 0;
	if (!pread_text(fd, text, sizeof(text)))
		return 0;
	if (!v2 && (!pread_text(pfd, ptext, sizeof(ptext)) || sscanf(ptext, "%lld", &period) != 1))
		return 0; /* v1 without a period: no limit there */
	return limit_of(text, v2, period);
}

/* The kernel enforces every level: the lowest limit wins (0: none). */
static double lower(double low, double l)
{
	return l > 0 && (low == 0 || l < low) ? l : low;
}

/* An open failed for want of descriptors or memory, not for a file that
 * is not there: a level missed so may hold the limit. */
static bool short_of_fds(void)
{
	return errno == EMFILE || errno == ENFILE || errno == ENOMEM;
}

static void close_level(int fd, int pfd)
{
	if (fd >= 0)
		close(fd);
	if (pfd >= 0)
		close(pfd);
}

/* Hold a level's files (v1's period beside its quota: a resize may change
 * both, docker update --cpu-period); false without memory. */
static bool cgq_push(struct cbcmn__cgq *q, int fd, int pfd)
{
	if (q->n == q->cap) {
		uint32_t cap = q->cap ? 2 * q->cap : 8;
		struct cbcmn__cgq_level *lv = realloc(q->lv, cap * sizeof(*lv));
		if (!lv)
			return false;
		q->lv = lv;
		q->cap = cap;
	}
	q->lv[q->n++] = (struct cbcmn__cgq_level){.fd = fd, .pfd = pfd};
	return true;
}

static void levels_open(struct cbcmn__cgq *q, const char *root, char *dir, size_t floor,
			bool v2, double *once);

/* Open q's files on one hierarchy, the process's cgroup first, then each
 * ancestor up to the mount's root; or, with once, read each level as it
 * is opened into *once (the lowest) and hold nothing: a one-off read
 * needs two descriptors at a time, not two per level.  Short of
 * descriptors, q holds nothing: a level missed may be the limiting one,
 * and the limit found at create stays (monitor.c reads only a q with
 * files).  keep, with once: where the files are, into q, to be held
 * later (cbcmn__cgq_hold()).  False if there is no such hierarchy. */
static bool hierarchy_open(struct cbcmn__cgq *q, const char *root, bool v2, double *once,
			   bool keep)
{
	char cg[PATH_MAX], point[PATH_MAX], mroot[PATH_MAX], dir[PATH_MAX];
	if (!own_cgroup(root, v2, cg, sizeof(cg)) ||
	    !find_mount(root, v2, cg, point, mroot, sizeof(mroot)))
		return false; /* no such hierarchy */
	q->v2 = v2;
	/* The part of our path below what the mount shows: all of it when the
	 * mount shows the hierarchy's root, nothing when our cgroup is not
	 * below it (the limit we can see is then the mount's own). */
	const char *rel = cg;
	if (strcmp(mroot, "/"))
		rel = cg_below(cg, mroot) ? cg + strlen(mroot) : "";
	if (strstr(rel, "/.."))
		rel = ""; /* never above the mount, whatever the file says */
	int n = snprintf(dir, sizeof(dir), "%s%s", point, strcmp(rel, "/") ? rel : "");
	if (n < 0 || (size_t)n >= sizeof(dir))
		return true;
	size_t floor = strlen(point);
	if (keep && once) {
		/* Held later (cbcmn__cgq_hold()); none without memory, as a
		 * q short of it. */
		q->dir = strdup(dir);
		q->floor = (uint32_t)floor;
		q->short_of = !q->dir;
	}
	levels_open(q, root, dir, floor, v2, once);
	return true;
}

/* hierarchy_open()'s levels: dir (modified) and each ancestor down to its
 * first floor characters. */
static void levels_open(struct cbcmn__cgq *q, const char *root, char *dir, size_t floor,
			bool v2, double *once)
{
	q->v2 = v2;
	for (;;) {
		int fd = open_held(root, dir, v2 ? "cpu.max" : "cpu.cfs_quota_us");
		int pfd = fd >= 0 && !v2 ? open_held(root, dir, "cpu.cfs_period_us") : -1;
		bool short_of = (fd < 0 || (!v2 && pfd < 0)) && short_of_fds(); /* the last open's errno */
		if (once) {
			*once = lower(*once, level_limit(fd, pfd, v2));
			close_level(fd, pfd);
		} else if (short_of || (fd >= 0 && !cgq_push(q, fd, pfd))) {
			close_level(fd, pfd);
			cbcmn__cgq_close(q);
			q->v2 = v2;
			q->short_of = true;
			return;
		}
		char *slash = strrchr(dir, '/');
		if (strlen(dir) <= floor || !slash || (size_t)(slash - dir) < floor)
			break;
		*slash = '\0';
	}
}

/* v1's cpu hierarchy if there is one, else v2's (hybrid hosts). */
static void cgq_walk(struct cbcmn__cgq *q, const char *root, double *once, bool keep)
{
	*q = (struct cbcmn__cgq){.lv = NULL};
	if (!root)
		root = "";
	if (!hierarchy_open(q, root, false, once, keep))
		hierarchy_open(q, root, true, once, keep);
}

void cbcmn__cgq_open(struct cbcmn__cgq *q, const char *root)
{
	cgq_walk(q, root, NULL, false);
}

void cbcmn__cgq_hold(struct cbcmn__cgq *q)
{
	if (!q->dir)
		return; /* nothing found, or held already */
	char *dir = q->dir;
	q->dir = NULL;
	levels_open(q, "", dir, q->floor, q->v2, NULL);
	free(dir);
}

double cbcmn__cgq_read(const struct cbcmn__cgq *q)
{
	double low = 0;
	for (uint32_t i = 0; i < q->n; i++)
		low = lower(low, level_limit(q->lv[i].fd, q->lv[i].pfd, q->v2));
	return low;
}

void cbcmn__cgq_close(struct cbcmn__cgq *q)
{
	for (uint32_t i = 0; i < q->n; i++)
		close_level(q->lv[i].fd, q->lv[i].pfd);
	free(q->lv);
	free(q->dir);
	*q = (struct cbcmn__cgq){.lv = NULL};
}

double cbcmn__cgq_start(struct cbcmn__cgq *q, bool hold)
{
	double low = 0;
	cgq_walk(q, NULL, &low, hold);
	return low;
}

double cbcmn__cgroup_cpu_limit(const char *root)
{
	struct cbcmn__cgq q;
	double low = 0;
	cgq_walk(&q, root, &low, false);
	return low;
}

uint32_t cbcmn__cpus_for_limit(uint32_t cpus, double limit)
{
	if (limit <= 0)
		return cpus;
	/* Rounded up: a limit of 1.5 CPUs pays for two executors part of the
	 * time, and one executor would leave half a CPU unused. */
	double want = limit > (double)cpus ? (double)cpus : limit;
	uint32_t n = (uint32_t)want;
	if ((double)n < want)
		n++;
	return n ? n : 1;
}
