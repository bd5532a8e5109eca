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

#endif
