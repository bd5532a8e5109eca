/* fault.h: private to libcbcmn: fault injection for tests (docs/FAULTS.md).
 *
 * Each place the runtime asks the system for something that can fail (a
 * mapping, an allocation, a ring, an I/O operation, a doorbell) asks
 * CBCMN__FAULT(site) first; a non-zero answer is the negative errno to fail
 * with, as if the system had said so.  A test arms a site to fail its Nth
 * hit, every Kth after that, or a seeded fraction of hits, then checks that
 * the runtime reports the error and loses nothing.
 *
 * Compiled in only with CBCMN_FAULTS (the ASan and TSan builds): in a
 * release build every hook is the constant 0 and costs nothing.
 */
#ifndef CBCMN_FAULT_H
#define CBCMN_FAULT_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

enum cbcmn__fault_site {
	CBCMN__F_MALLOC,    /* the runtime's own allocations (cbcmn__fault_malloc()) */
	CBCMN__F_MMAP,      /* stack slabs, buffer rings, the stats segment */
	CBCMN__F_MPROTECT,  /* guard pages (mprotect, or MADV_GUARD_INSTALL: then the
	                     * pool turns to mprotect guards) */
	CBCMN__F_RING,      /* setting up an executor's io_uring */
	CBCMN__F_IO,        /* a fiber I/O call: fails before its SQE is queued */
	CBCMN__F_IO_SHORT,  /* a fiber read/write/recv/send, or a stream's send, asks for
	                     * fewer bytes */
	CBCMN__F_SUBMIT,    /* io_uring_enter fails (-EBUSY, -EINTR, -EAGAIN...) */
	CBCMN__F_MSG_RING,  /* a MSG_RING doorbell fails in the kernel */
	CBCMN__F_CQE_DROP,  /* a CQE is lost, as the kernel drops one (-EBADR) */
	CBCMN__F_FIXED,     /* a stream's fixed-file table: registered sparse, a slot
	                     * filled or emptied (io_uring_register) */
	CBCMN__F_DUP,       /* an executor's held ring number: the dup3() that puts the
	                     * eventfd under it, or the next ring (ring.c) */
	CBCMN__F_PBUF_INC,  /* a stream pool's registration with IOU_PBUF_RING_INC: refused
	                     * (-EINVAL) as a kernel before 6.12 refuses it */
	CBCMN__F_NSITES
};

/* How an armed site fails.  A hit h (1 for the first after arming) fails
 * when h == nth, or h > nth and every != 0 and (h - nth) % every == 0, or
 * (permille != 0) a draw seeded by (seed, h) falls under permille / 1000.
 * err is the negative errno a failing hit returns (for CBCMN__F_IO_SHORT:
 * anything non-zero). */
struct cbcmn__fault_plan {
	uint64_t nth;
	uint64_t every;
	uint32_t permille;
	uint64_t seed;
	int err;
};

#ifdef CBCMN_FAULTS
int cbcmn__fault_hit(enum cbcmn__fault_site site);
#define CBCMN__FAULT(site) cbcmn__fault_hit(site)
#else
#define CBCMN__FAULT(site) 0
#endif

/* Test side (a no-op returning false in builds without CBCMN_FAULTS, so
 * that a test can skip, saying why). */
bool cbcmn__fault_arm(enum cbcmn__fault_site site, const struct cbcmn__fault_plan *plan);
void cbcmn__fault_disarm_all(void);
/* Hits and failures of a site since it was last armed. */
uint64_t cbcmn__fault_hits(enum cbcmn__fault_site site);
uint64_t cbcmn__fault_fails(enum cbcmn__fault_site site);
const char *cbcmn__fault_name(enum cbcmn__fault_site site);

/* Pause points: places inside a lock-free protocol where a test holds the
 * thread that reaches them, to open a race window that is a few
 * instructions wide otherwise (test_liveness).  The hook gets the point
 * and the executor concerned (NULL if none); it runs on the runtime's
 * threads, so it must not call the runtime.  Compiled in only with
 * CBCMN_FAULTS, as the fault sites are. */
enum cbcmn__pause_point {
	CBCMN__P_IDLE_SET,         /* a parker between its idle count and its bit (wake.c) */
	CBCMN__P_NOTIFY_UNCLAIMED, /* a notifier that found no bit to claim (wake.c) */
	CBCMN__P_SPAWN_PUSH,       /* a spawner just before its push (sched.c) */
	CBCMN__P_TSW_DISARM,       /* a recorder's disarm between its lease test and
	                            * its exchange (trace_watch.c) */
	CBCMN__P_SCAN_WAIT,        /* a canceller holding a node's published wait,
	                            * before it claims it (iwait.c); the hook
	                            * gets the wait, not an executor */
	CBCMN__P_REARM,            /* a lasting wait re-armed, its state WAITING
	                            * (iwait.c); the hook gets the wait */
	CBCMN__P_DOORBELL_FD,      /* a doorbell's sender holding the number of its
	                            * target's ring, before its MSG_RING (ring.c);
	                            * the hook gets the target */
	CBCMN__P_SCOPE_NEW,        /* a task about to allocate its nursery's cancel
	                            * scope (iwait.c); the hook gets the runtime */
	CBCMN__P_LIVE_COUNTS,      /* a count of live tasks between its reads of the
	                            * completions and of the spawns (watch.c);
	                            * the hook gets the seg */
	CBCMN__P_RESERVE_GONE,     /* the metrics server's acceptor between the
	                            * close of its reserve and its accept
	                            * (metrics_server.c, shed_one()); the hook
	                            * gets the runtime */
	CBCMN__P_ACCEPTED,         /* the metrics server's acceptor between an
	                            * accept that succeeded and its connection's
	                            * spawn (metrics_server.c); the hook gets the
	                            * acceptor's cx */
	CBCMN__P_PARK_POSTED,      /* a park on the system stack that has just
	                            * published its task and begun the next
	                            * (sched.c, park_sys()) */
	CBCMN__P_WAKE_SLOT,        /* a waker just after its exchange into its
	                            * executor's slot (sched.c); the hook gets
	                            * the woken task, a thief's from then on */
	CBCMN__P_WHEEL_RESCUE,     /* the stall monitor holding a stalled
	                            * executor's wheel, its actors just taken
	                            * (actor_sched.c); the hook gets the executor */
	CBCMN__P_NPOINTS
};

typedef void (*cbcmn__pause_fn)(enum cbcmn__pause_point p, void *exec);

#ifdef CBCMN_FAULTS
void cbcmn__pause_hit(enum cbcmn__pause_point p, void *exec);
#define CBCMN__PAUSE(p, exec) cbcmn__pause_hit(p, exec)
#else
#define CBCMN__PAUSE(p, exec) ((void)0)
#endif

/* Test side: install (NULL: remove) the hook.  False in builds without
 * CBCMN_FAULTS. */
bool cbcmn__pause_set(cbcmn__pause_fn fn);

/* malloc and calloc through CBCMN__F_MALLOC: NULL with errno ENOMEM when
 * an injected failure says so.  For the allocations whose failure the
 * runtime must survive (creating a runtime, a stream, a channel...). */
static inline void *cbcmn__malloc(size_t size)
{
	if (CBCMN__FAULT(CBCMN__F_MALLOC)) {
		errno = ENOMEM;
		return NULL;
	}
	return malloc(size);
}

static inline void *cbcmn__calloc(size_t n, size_t size)
{
	if (CBCMN__FAULT(CBCMN__F_MALLOC)) {
		errno = ENOMEM;
		return NULL;
	}
	return calloc(n, size);
}

/* mmap and mprotect through CBCMN__F_MMAP and CBCMN__F_MPROTECT (errno
 * set to the injected error). */
static inline void *cbcmn__mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	int err = CBCMN__FAULT(CBCMN__F_MMAP);
	if (err) {
		errno = -err;
		return MAP_FAILED;
	}
	return mmap(addr, len, prot, flags, fd, off);
}

static inline int cbcmn__mprotect(void *addr, size_t len, int prot)
{
	int err = CBCMN__FAULT(CBCMN__F_MPROTECT);
	if (err) {
		errno = -err;
		return -1;
	}
	return mprotect(addr, len, prot);
}

#endif
