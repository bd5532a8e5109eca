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
/* Each argument in a register or an immediate, never in memory: sys/sdt.h's
 * default, "nor", let GCC name a memory operand with an index register
 * (actor_restart's 4th argument read "8@(%rdx,%r13)", LTO or not), which
 * libbpf before 1.4 cannot parse (Debian 12 ships 1.1.2): attaching that
 * probe failed there, for our tools and any libbpf or bpftrace user.  A
 * register or an immediate every USDT tool reads (test_probes checks each
 * argument of the built library).  The loads this adds are inside the
 * probe's branch, taken only while a tool is attached: a detached probe
 * costs what it did. */
#define STAP_SDT_ARG_CONSTRAINT nr
#include <sys/sdt.h>

/* name, number of arguments.  The last argument of every probe but
 * lock_contended is the runtime's id in its process (struct cbcmn__seg
 * rt_id: 1, 2, ...): two runtimes of one process have the same executor
 * ids.  It was added last so that the other arguments kept their places. */
#define CBCMN__PROBES(XX)                                                      \
	XX(spawn, 4)          /* task_id, parent_task_id, executor (-1: outside), rt */ \
	XX(steal, 5)          /* thief, victim, tasks taken, ns since the search began, rt */ \
	XX(steal_fail, 3)     /* thief, victim, rt */                              \
	XX(park, 2)           /* executor, rt */                                    \
	XX(unpark, 3)         /* executor, 1 = notified, 0 = timeout, rt */         \
	XX(wake, 3)           /* waker executor (-1: outside), woken executor, rt */ \
	XX(lock_contended, 2) /* lock name (char *), wait ns */                     \
	XX(task_panic, 3)     /* task_id, stack bytes, rt */                        \
	XX(doorbell, 4)       /* sender executor (-1: outside), target, 0 MSG_RING / 1 eventfd, rt */ \
	XX(doorbell_coalesced, 3) /* waker executor (-1: outside), target, rt */    \
	XX(xmsg, 4)           /* sender executor, receiver, kind (1 wake, 2 spawn, 3 call), rt */ \
	XX(exec_start, 4)     /* executor, thread id, CPU (-1: not pinned), rt */   \
	XX(exec_stop, 3)      /* executor, 1 = retired (idle), 0 = runtime ends, rt */ \
	XX(accept_error, 4)   /* executor, errno, ns the acceptor backs off, rt */ \
	XX(actor_spawn, 4)    /* actor ref, spawner's executor (-1: outside), mailbox capacity, rt */ \
	XX(actor_send, 5)     /* to ref, from ref (0: not an actor), result, 1 = it waited for room, rt */ \
	XX(actor_receive, 4)  /* actor ref, message type (0: none), result, rt */ \
	XX(actor_halt, 4)     /* actor ref, halt reason, messages dropped, rt */ \
	XX(actor_restart, 5)  /* supervisor ref, child index, crash reason (0: restarted with it), new ref, rt */ \
	XX(actor_migrate, 5)  /* actor ref, from executor, to executor, case (1 yield, 3 wake), rt */ \
	XX(actor_backpressure, 5) /* to ref, sender's executor (-1: outside), result, 1 = it waited, rt */ \
	XX(sup_restart, 5)    /* supervisor ref, crashed child index, crash reason, executor, rt */ \
	XX(exec_stall, 4)     /* executor, task_id, ns the run has lasted, rt */ \
	XX(exec_spare, 3)     /* spare executor, stalled executor asleep in a call, rt */

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

#define CBCMN_PROBE5(name, a, b, c, d, e)                                      \
	do {                                                                    \
		if (CBCMN_PROBE_ENABLED(name))                                  \
			STAP_PROBE5(cbcmn, name, a, b, c, d, e);                \
	} while (0)

#endif
