/* probes.c: the USDT semaphores (see probes.h).  The section name is what
 * sys/sdt.h and the tools that attach (libbpf, bpftrace, perf) expect. */
#include "probes.h"

#define CBCMN__SEMA_DEF(name, n)                                               \
	volatile unsigned short cbcmn_##name##_semaphore                        \
		__attribute__((section(".probes"), used)) = 0;
CBCMN__PROBES(CBCMN__SEMA_DEF)
#undef CBCMN__SEMA_DEF
