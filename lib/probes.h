/* probes.h: private to libcbcmn: USDT probes, provider "cbcmn".
 *
 * Every probe has a semaphore: the kernel increments it while a uprobe is
 * attached, and until then a probe site costs one predicted-not-taken load
 * and branch (no arguments are computed).  docs/PROBES.md lists each probe
 * and its arguments.
 */
#ifndef CBCMN_PROBES_H
#define CBCMN_PROBES_H

#include <stdint.h>

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

/* name, number of arguments */
#define CBCMN__PROBES(XX)                                                      \
	XX(spawn, 3)          /* task_id, parent_task_id, executor (-1: outside) */ \
	XX(steal, 4)          /* thief, victim, tasks taken, ns since the search began */ \
	XX(steal_fail, 2)     /* thief, victim */                                  \
	XX(park, 1)           /* executor */                                        \
	XX(unpark, 2)         /* executor, 1 = notified, 0 = timeout */             \
	XX(wake, 2)           /* waker executor (-1: outside), woken executor */    \
	XX(lock_contended, 2) /* lock name (char *), wait ns */                     \
	XX(task_panic, 2)     /* task_id, stack bytes */                            \
	XX(doorbell, 3)       /* sender executor (-1: outside), target, 0 MSG_RING / 1 eventfd */ \
	XX(doorbell_coalesced, 2) /* waker executor (-1: outside), target */        \
	XX(xmsg, 3)           /* sender executor, receiver, kind (1 wake, 2 spawn, 3 call) */ \
	XX(exec_start, 3)     /* executor, thread id, CPU (-1: not pinned) */       \
	XX(exec_stop, 2)      /* executor, 1 = retired (idle), 0 = runtime ends */  \
	XX(accept_error, 3)   /* executor, errno, ns the acceptor backs off */

#define CBCMN__SEMA_DECL(name, n) extern volatile unsigned short cbcmn_##name##_semaphore;
CBCMN__PROBES(CBCMN__SEMA_DECL)
#undef CBCMN__SEMA_DECL

#define CBCMN_PROBE_ENABLED(name) __builtin_expect(cbcmn_##name##_semaphore != 0, 0)

#define CBCMN_PROBE1(name, a)                                                  \
	do {                                                                    \
		if (CBCMN_PROBE_ENABLED(name))                                  \
			STAP_PROBE1(cbcmn, name, a);                            \
	} while (0)
#define CBCMN_PROBE2(name, a, b)                                               \
	do {                                                                    \
		if (CBCMN_PROBE_ENABLED(name))                                  \
			STAP_PROBE2(cbcmn, name, a, b);                         \
	} while (0)
#define CBCMN_PROBE3(name, a, b, c)                                            \
	do {                                                                    \
		if (CBCMN_PROBE_ENABLED(name))                                  \
			STAP_PROBE3(cbcmn, name, a, b, c);                      \
	} while (0)

#define CBCMN_PROBE4(name, a, b, c, d)                                         \
	do {                                                                    \
		if (CBCMN_PROBE_ENABLED(name))                                  \
			STAP_PROBE4(cbcmn, name, a, b, c, d);                   \
	} while (0)

#endif
