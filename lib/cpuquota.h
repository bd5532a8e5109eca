/* cpuquota.h: private to libcbcmn: a cgroup's CPU limit (cpuquota.c). */
#ifndef CBCMN_CPUQUOTA_H
#define CBCMN_CPUQUOTA_H

#include <stdbool.h>
#include <stdint.h>

/* The lowest CPU limit on this process's cgroup and its ancestors, in CPUs
 * (1.5: one and a half), or 0 if there is none or it cannot be read.
 * root prefixes every path read (/proc/self/..., the cgroup mounts): NULL
 * or "" for the live system, a directory of recorded files for a test. */
double cbcmn__cgroup_cpu_limit(const char *root);

/* The files that say that limit, held open so that it can be read again
 * while the runtime runs (a pod resized in place) with a pread each and
 * no open(2): the process's cgroup first, then every ancestor (no cap:
 * a limit far up a deep path counts as at create).  A process moved to
 * another cgroup afterwards still reads the old one's. */
struct cbcmn__cgq_level {
	int fd;  /* cpu.max (v2), cpu.cfs_quota_us (v1) */
	int pfd; /* v1's cpu.cfs_period_us (a resize may change it), v2's -1 */
};
struct cbcmn__cgq {
	struct cbcmn__cgq_level *lv; /* n of them, room for cap */
	uint32_t n, cap;
	bool v2;
	/* None held for want of descriptors or memory (a level missed may
	 * be the limiting one), not for want of files. */
	bool short_of;
	/* Where the files are, found by cbcmn__cgq_start() and opened by
	 * cbcmn__cgq_hold() (no walk): the process's level (malloc'd), and
	 * the length of the mount's path, above which no level is read. */
	char *dir;
	uint32_t floor;
};
/* Open them (root as above); none (n 0) where nothing can be read. */
void cbcmn__cgq_open(struct cbcmn__cgq *q, const char *root);
/* The lowest limit they say now, in CPUs (0: none). */
double cbcmn__cgq_read(const struct cbcmn__cgq *q);
void cbcmn__cgq_close(struct cbcmn__cgq *q);
/* The limit for a runtime's create, in one walk of the live tree, read
 * with two descriptors at a time; q holds no file, but (hold: for the
 * monitor's reads) where they are, for cbcmn__cgq_hold(). */
double cbcmn__cgq_start(struct cbcmn__cgq *q, bool hold);
/* Open the files cbcmn__cgq_start(q, true) found, without a walk: once
 * every descriptor the runtime needs is made (runtime.c). */
void cbcmn__cgq_hold(struct cbcmn__cgq *q);

/* Executors for cpus CPUs under a limit (0: none): the limit rounded up,
 * at least 1, at most cpus. */
uint32_t cbcmn__cpus_for_limit(uint32_t cpus, double limit);

#endif
