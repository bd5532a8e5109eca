/* cpuquota.h: private to libcbcmn: a cgroup's CPU limit (cpuquota.c). */
#ifndef CBCMN_CPUQUOTA_H
#define CBCMN_CPUQUOTA_H

#include <stdint.h>

/* The lowest CPU limit on this process's cgroup and its ancestors, in CPUs
 * (1.5: one and a half), or 0 if there is none or it cannot be read.
 * root prefixes every path read (/proc/self/..., the cgroup mounts): NULL
 * or "" for the live system, a directory of recorded files for a test. */
double cbcmn__cgroup_cpu_limit(const char *root);

/* Executors for cpus CPUs under a limit (0: none): the limit rounded up,
 * at least 1, at most cpus. */
uint32_t cbcmn__cpus_for_limit(uint32_t cpus, double limit);

#endif
