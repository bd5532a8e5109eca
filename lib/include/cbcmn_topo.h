/* cbcmn_topo.h: the machine's topology and executor placement (docs/TOPOLOGY.md).
 *
 * A topology is read from sysfs (/sys/devices/system/cpu, .../node), or
 * from a directory shaped like it (tests, planning for machines one does
 * not have).  A placement policy turns it into the CPUs the executors are
 * pinned to.
 */
#ifndef CBCMN_TOPO_H
#define CBCMN_TOPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef CBCMN_API
#define CBCMN_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cbcmn_topo cbcmn_topo;

/* One CPU (a hardware thread) as the topology sees it. */
typedef struct cbcmn_cpu_info {
	int cpu;        /* the kernel's CPU number */
	int package;    /* physical_package_id */
	int core;       /* the core's index machine-wide (0..ncores-1); SMT siblings share it */
	int smt;        /* 0 for a core's first thread, 1.. for its siblings */
	int node;       /* NUMA node (0 where the machine has none) */
	int llc;        /* last-level cache group, index machine-wide (0..nllcs-1) */
	int kind;       /* 0: performance (or the only kind); 1: efficiency (hybrid parts) */
	bool allowed;   /* in the process's affinity mask / cpuset (or the fixture's) */
} cbcmn_cpu_info;

/* Read the topology under sysfs_root: NULL means the environment's
 * CBCMN_SYSFS_ROOT if set, else the live "/sys".  For the live machine the
 * allowed CPUs are the process's affinity mask (which the cpuset bounds);
 * for a directory, those listed in its file "cbcmn-allowed" if it has one
 * (a CPU list like "0-3,8"), else every online CPU.  Offline CPUs are left
 * out.  Returns 0 or a negative errno; on failure err (if not NULL) gets one
 * line saying what was wrong, naming the file (e.g. "…/node/node1/distance:
 * 3 values, expected 4"). */
CBCMN_API int cbcmn_topo_load(const char *sysfs_root, cbcmn_topo **out, char *err, size_t errlen);
CBCMN_API void cbcmn_topo_free(cbcmn_topo *t);

/* CPUs (online), in increasing CPU number; i in [0, ncpus). */
CBCMN_API int cbcmn_topo_ncpus(const cbcmn_topo *t);
CBCMN_API const cbcmn_cpu_info *cbcmn_topo_cpu(const cbcmn_topo *t, int i);
/* The entry of CPU number cpu, or NULL. */
CBCMN_API const cbcmn_cpu_info *cbcmn_topo_find(const cbcmn_topo *t, int cpu);
CBCMN_API int cbcmn_topo_nallowed(const cbcmn_topo *t);
CBCMN_API int cbcmn_topo_nnodes(const cbcmn_topo *t);
CBCMN_API int cbcmn_topo_ncores(const cbcmn_topo *t);
CBCMN_API int cbcmn_topo_nllcs(const cbcmn_topo *t);
CBCMN_API int cbcmn_topo_npackages(const cbcmn_topo *t);
/* The node's id as the kernel numbers it (nodes may have holes), for node
 * index i in [0, nnodes); cpu_info.node is such an index. */
CBCMN_API int cbcmn_topo_node_id(const cbcmn_topo *t, int i);
/* SLIT distance between node indexes a and b (10 for a node to itself). */
CBCMN_API int cbcmn_topo_distance(const cbcmn_topo *t, int a, int b);

/* Placement policies (seed 003). */
typedef enum cbcmn_policy {
	CBCMN_POLICY_DEPTH_FIRST = 0, /* fill the first executor's node (LLC first, cores before SMT), then the next-closest node */
	CBCMN_POLICY_BREADTH_FIRST,   /* round-robin over nodes in distance order, then LLCs and cores in each, SMT last */
	CBCMN_POLICY_RANDOM,          /* uniformly random among allowed CPUs, from a seed */
	CBCMN_POLICY_CPUS,            /* an explicit CPU list */
} cbcmn_policy;

/* Parse "depth-first", "breadth-first", "random" or "cpus:LIST" (LIST like
 * "0-3,8,10-11").  For cpus:, *cpus gets a malloc'd array (free() it) and
 * *ncpus its length; otherwise *cpus is NULL.  Returns 0 or -EINVAL (err
 * says why). */
CBCMN_API int cbcmn_policy_parse(const char *s, cbcmn_policy *p, int **cpus, size_t *ncpus, char *err,
		       size_t errlen);
CBCMN_API const char *cbcmn_policy_name(cbcmn_policy p);

/* The CPUs for n executors under policy p: out[i] is executor i's CPU.
 * Deterministic for a given topology, n and seed.  Only allowed CPUs are
 * used; no CPU twice unless n exceeds the allowed CPUs, in which case the
 * placement wraps around and *oversubscribed (if not NULL) is set.  cpus /
 * ncpus: the list for CBCMN_POLICY_CPUS (each must be an allowed CPU).
 * first_cpu: for depth-first, the CPU executor 0 starts from (-1: the
 * lowest allowed).  Returns 0, -EINVAL (n == 0, a bad list: err says
 * which CPU), or -ENODEV (no allowed CPU). */
CBCMN_API int cbcmn_place(const cbcmn_topo *t, cbcmn_policy p, uint32_t n, uint64_t seed, const int *cpus,
		size_t ncpus, int first_cpu, int *out, bool *oversubscribed, char *err,
		size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* CBCMN_TOPO_H */
