/* maskcpu.c: the k-th CPU of the affinity mask (maskcpu.h). */
#include <sched.h>

#include "util/maskcpu.h"

int mask_cpu(int k)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) != 0)
		return -1;
	int n = CPU_COUNT(&set);
	if (n <= 0 || k < 0)
		return -1;
	k %= n;
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
		if (CPU_ISSET(cpu, &set) && k-- == 0)
			return cpu;
	return -1;
}
