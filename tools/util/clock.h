/* SPDX-License-Identifier: MIT */
/* The tools' one clock: CLOCK_MONOTONIC in ns, the clock of
 * bpf_ktime_get_ns() too, so user-space times and the BPF programs'
 * compare directly. */
#ifndef CBCMN_TOOLS_CLOCK_H
#define CBCMN_TOOLS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CPU time of the whole process (every thread), ns: in a CPU-capped
 * cgroup the wall time counts the throttled spells too, this does not. */
static inline uint64_t process_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
