/* topo.h: private to libcbcmn: what a loaded topology holds (topo.c), for
 * the placement code (place.c) and the runtime to read directly.
 *
 * Everything is filled once by cbcmn_topo_load() and never changes after:
 * any thread may read it without a lock.  Indexes, not kernel numbers, are
 * what tie the arrays together: cpus[i].core is an index into core_ncpus,
 * cpus[i].llc into llc_ncpus, cpus[i].node into node_ids, node_ncpus and
 * the distance matrix.  The one exception is cpus[i].package, which the
 * public header defines as the raw physical_package_id; package_ids maps
 * it back to an index when one is needed (cbcmn__topo_package_index()).
 *
 * Things a reader must not assume (docs/TOPOLOGY.md says why):
 *   - a node may have no CPUs at all (memory-only nodes: CXL, HBM), so
 *     node_ncpus[n] may be 0;
 *   - an LLC group is not always inside one node (Intel SNC splits a
 *     package's single L3 into several nodes), nor a node inside one LLC;
 *   - CPU numbers have holes (offline or absent CPUs), so cpus[i].cpu != i.
 */
#ifndef CBCMN_TOPO_INTERNAL_H
#define CBCMN_TOPO_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "cbcmn_topo.h"

/* Largest CPU number + 1 and node id + 1 the loader accepts: above any
 * kernel's NR_CPUS (8192) and at its MAX_NUMNODES (1 << NODES_SHIFT, at
 * most 10 on every architecture), low enough that a corrupt list like
 * "0-2000000000" is refused instead of allocated.  Nodes are bounded
 * tighter because the distance matrix is nnodes squared: 65536 node ids
 * were a 16 GiB allocation, and the index a * nnodes overflowed an int. */
#define CBCMN__TOPO_MAX_CPUS  65536
#define CBCMN__TOPO_MAX_NODES 1024

struct cbcmn_topo {
	char *root;              /* the sysfs root it was read from ("/sys" when live) */
	bool live;               /* read from the running machine: allowed = affinity mask */

	int ncpus;               /* online CPUs */
	cbcmn_cpu_info *cpus;    /* [ncpus], by increasing CPU number */
	int nallowed;            /* entries with .allowed set */

	int nbits;               /* every CPU number that exists is < nbits */
	int *index_of;           /* [nbits]: CPU number -> index in cpus, -1 if not online */

	int ncores;
	int *core_ncpus;         /* [ncores]: online threads of each core (1 without SMT) */

	int nllcs;
	int *llc_ncpus;          /* [nllcs]: online CPUs sharing each last-level cache */

	int npackages;
	int *package_ids;        /* [npackages]: physical_package_id values, increasing */
	int *package_ncpus;      /* [npackages]: online CPUs of each */

	int nnodes;              /* >= 1: a machine without NUMA is one node 0 */
	int *node_ids;           /* [nnodes]: the kernel's node id of each index, increasing */
	int *node_ncpus;         /* [nnodes]: online CPUs of each node (may be 0) */
	int *node_nallowed;      /* [nnodes]: allowed CPUs of each node */
	int *distance;           /* [nnodes * nnodes]: SLIT distance, row a = from node a */
};

/* The package index (into package_ids) of a physical_package_id, or -1. */
int cbcmn__topo_package_index(const struct cbcmn_topo *t, int package_id);

/* Parse a kernel CPU list ("0-3,8,10-11", the format of sysfs cpulist files
 * and of cpuset.cpus) into bits, a bitmap of nbits bits the caller zeroed.
 * Trailing white space (the newline) is accepted; an empty list is valid.
 * Returns 0; -EINVAL on a syntax error or a range that goes down ("3-1"),
 * with *bad the byte offset of the offending item; -ERANGE when a number is
 * >= nbits, with *bad the first such number. */
int cbcmn__cpulist_parse(const char *s, uint64_t *bits, int nbits, int *bad);

#endif /* CBCMN_TOPO_INTERNAL_H */
