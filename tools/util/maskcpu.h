/* maskcpu.h: which CPUs the loopback benchmarks pin their server and client
 * to: CPUs of the process's affinity mask, so that they stay inside a
 * taskset or a container's cpuset and work on a one-CPU machine (a fixed
 * CPU 1 does not exist there, and a fixed CPU 0 escapes `taskset -c 2,3`). */
#ifndef CBCMN_TOOLS_MASKCPU_H
#define CBCMN_TOOLS_MASKCPU_H

/* The k-th CPU (k >= 0, counted from the lowest, wrapping around) of this
 * thread's affinity mask; -1 (do not pin) if the mask cannot be read. */
int mask_cpu(int k);

#endif
