/* ring.c: each executor's io_uring ring: setup, submission, reaping,
 * parking and doorbells (ring.h, docs/IO.md).
 *
 * Setup flags: the best set the kernel accepts, probed once per runtime
 * and then used for every ring, in this order of preference:
 *   SUBMIT_ALL | SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG
 *   SUBMIT_ALL | COOP_TASKRUN | TASKRUN_FLAG
 *   SUBMIT_ALL
 *   (none)
 * DEFER_TASKRUN runs completion work only when the owner asks for events,
 * so a busy executor is never interrupted by its completions; TASKRUN_FLAG
 * makes the kernel say so in the SQ flags, so the loop needs no system call
 * to find out.  With SQPOLL a kernel thread submits, and DEFER_TASKRUN is
 * not allowed: SQPOLL | SUBMIT_ALL | COOP_TASKRUN | TASKRUN_FLAG first.
 *
 * Each executor creates its ring on its own thread, which makes that thread
 * the single issuer; cbcmn_runtime_create() probes the flags first and
 * waits until every ring exists, so no task runs (and no doorbell is rung)
 * before all of them do.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "epoll.h"
#include "probes.h"
#include "runtime.h"
#include "trace.h"

#define RING_ENTRIES_DEFAULT 256u

/* A MSG_RING from no ring (6.13; liburing 2.8's io_uring_register_sync_msg()). */
#ifndef IORING_REGISTER_SEND_MSG_RING
#define IORING_REGISTER_SEND_MSG_RING 31
#endif

static const uint32_t flag_sets[] = {
	IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
		IORING_SETUP_TASKRUN_FLAG,
	IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
	IORING_SETUP_SUBMIT_ALL,
	0,
};

static const uint32_t sqpoll_sets[] = {
	IORING_SETUP_SQPOLL | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
		IORING_SETUP_TASKRUN_FLAG,
	IORING_SETUP_SQPOLL | IORING_SETUP_SUBMIT_ALL,
	IORING_SETUP_SQPOLL,
};

static int ring_init(struct io_uring *u, uint32_t entries, uint32_t flags, const cbcmn_config *cfg)
{
	int err = CBCMN__FAULT(CBCMN__F_RING);
	if (err)
		return err;
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	p.flags = flags | IORING_SETUP_CQSIZE;
	p.cq_entries = entries * 2;
	if (flags & IORING_SETUP_SQPOLL)
		p.sq_thread_idle = cfg->sqpoll_idle_ms ? cfg->sqpoll_idle_ms : 100;
	return io_uring_queue_init_params(entries, u, &p);
}

/* ---- locked memory ----------------------------------------------------------
 *
 * For a process without CAP_IPC_LOCK a ring's memory (SQ, CQ, SQEs) counts
 * against RLIMIT_MEMLOCK, and io_uring_setup() fails with -ENOMEM when it
 * would not fit.  Which kernels: before 5.12 all of them; from 5.12 ring
 * memory went to the memory cgroup instead (Debian 12's 6.1 counts only
 * registered buffers and the like); from 6.13-6.15 the rings are kernel
 * "regions" again accounted to the limit (this machine's 6.18 does: a
 * 256-entry ring, CQ 512, costs 32 KiB, an 8-entry one 8 KiB).  The count
 * is per *user*, shared by all of that user's processes, and a ring's
 * share is given back asynchronously, some ms after its fd is closed.
 *
 * So: a ring that does not fit is made smaller (to CBCMN__RING_MIN_ENTRIES),
 * the smallest is retried for a while (a ring closed just before, the
 * probe's, may still be counted), and what still fails is reported as
 * CBCMN_EMEMLOCK, not as an ENOMEM that reads as the machine being out of
 * memory.
 *
 * How long: the share comes back when the kernel's exit work for the
 * ring has run, after an RCU grace period, on a kworker that a loaded
 * machine runs late: measured here 21 ms on average, 80 ms at worst,
 * closing and remaking an 8-entry ring 50 times; a CI run with every CPU
 * busy saw it take more than 120 ms, and a create under a limit with
 * room for one ring (the probe's, then the executor's) failed with
 * CBCMN_EMEMLOCK (test_takeover_fits_in_the_dead_rings_locked_memory,
 * 20 runs in 50 beside `hog.sh -n 8`).  No call says when the share is
 * back.  So a ring of ours closed shortly before is waited for much
 * longer (RING_GIVEBACK_NS after its close), but only while the ring
 * asked for fits beside the rings we still hold: then the wait ends when
 * the kernel gives the share back.  Otherwise (another process of the
 * user holds the rest, or nothing of ours was closed) RING_RETRY_NS.
 *
 * Why the probe's ring is not kept as executor 0's, which would leave no
 * closed ring to wait for: executor 0 makes its ring on its own thread,
 * and SINGLE_ISSUER / DEFER_TASKRUN bind a ring to the thread that made
 * it unless it is made disabled (IORING_SETUP_R_DISABLED) and enabled by
 * its user; a disabled ring refuses a MSG_RING (-EBADFD), which the probe
 * sends to it (sync_msg_ring, SQPOLL rings); and the probe's ring has
 * RING_MIN_ENTRIES, where executor 0's size is planned from the locked
 * memory left (ring_entries_planned()) only once the flags are known.
 * Each is a change to the ring's set-up of its own (twenty-second
 * session: not done). */

#define RING_MIN_ENTRIES 8u
/* The smallest ring is retried this long, in doubling sleeps. */
#define RING_RETRY_NS (120u * 1000000u)
/* ... or this long after this process last closed a ring. */
#define RING_GIVEBACK_NS (2000u * 1000000ull)
/* The longest of those sleeps: the share, once back, is found soon. */
#define RING_SLEEP_MAX_NS (32u * 1000000u)

/* CAP_IPC_LOCK in the initial user namespace exempts a process from the
 * count; a capability held in a child namespace (rootless containers) does
 * not, so it counts only where the uid map is the identity of the whole
 * range, i.e. the initial namespace (or /proc cannot tell: then trust it). */
static bool ipc_lock_exempt(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) != 0 ||
	    !(d[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))))
		return false;
	FILE *f = fopen("/proc/self/uid_map", "re");
	if (!f)
		return true;
	unsigned long inner, outer, count;
	int n = fscanf(f, "%lu %lu %lu", &inner, &outer, &count);
	fclose(f);
	return n != 3 || (inner == 0 && outer == 0 && count == 4294967295ul);
}

/* Is an -ENOMEM from io_uring_setup() the locked-memory limit? */
static bool memlock_bound(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return false;
	return !ipc_lock_exempt();
}

/* What a failed ring set-up reports: CBCMN_EMEMLOCK for the limit.  Also
 * for stream.c's buffer ring, which counts the same way. */
int cbcmn__ring_error(int rc)
{
	return rc == -ENOMEM && memlock_bound() ? CBCMN_EMEMLOCK : rc;
}

/* Locked memory a ring of `entries` SQEs (CQ twice that) takes from the
 * count, as measured on 6.18: the SQE array and the SQ/CQ rings are two
 * regions, each a power-of-two number of pages (256 entries: 16 + 16
 * KiB; 64 down to 8: 4 + 4 KiB). */
static uint64_t ring_cost(uint32_t entries)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t pg = page > 0 ? (uint64_t)page : 4096;
	uint64_t parts[2] = {(uint64_t)entries * sizeof(struct io_uring_sqe),
			     (uint64_t)entries * 2 * sizeof(struct io_uring_cqe) +
				     (uint64_t)entries * sizeof(uint32_t) + 384};
	uint64_t cost = 0;
	for (int i = 0; i < 2; i++) {
		uint64_t pages = (parts[i] + pg - 1) / pg, p2 = 1;
		while (p2 < pages)
			p2 *= 2;
		cost += p2 * pg;
	}
	return cost;
}

/* ring_cost() of every executor ring of this process that is up, all
 * runtimes: what other runtimes already hold of the limit.  Relaxed: a
 * sizing figure read once per runtime create, ordered with nothing. */
static _Atomic uint64_t rings_held;

/* When this process last closed a ring of its own (cbcmn__mono_ns()),
 * whose share the kernel may not have given back yet.  Relaxed: a hint
 * for how long a ring that does not fit is retried. */
static _Atomic uint64_t rings_closed_ns;

static void ring_closed(void)
{
	atomic_store_explicit(&rings_closed_ns, cbcmn__mono_ns(), memory_order_relaxed);
}

/* Until when a ring of `entries` that did not fit at `start` is retried
 * (see "locked memory" above). */
static uint64_t ring_retry_until(uint32_t entries, uint64_t start)
{
	uint64_t until = start + RING_RETRY_NS;
	uint64_t closed = atomic_load_explicit(&rings_closed_ns, memory_order_relaxed);
	struct rlimit rl;
	if (closed && closed + RING_GIVEBACK_NS > until && memlock_bound() &&
	    getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
	    atomic_load_explicit(&rings_held, memory_order_relaxed) + ring_cost(entries) <=
		    (uint64_t)rl.rlim_cur)
		until = closed + RING_GIVEBACK_NS;
	return until;
}

/* Under a locked-memory limit, `entries` made small enough that one ring
 * per executor fits in three quarters of it (the rest for buffer rings,
 * the probe's ring given back late, the user's other processes), less
 * what the process's other runtimes' rings hold.  Without this the first
 * executors took full 32 KiB rings until the limit ran out and the rest
 * had none: 600 executors failed in a login's 8 MiB, where 600 small
 * rings (4.8 MiB) fit; so did a second runtime planned as if it were
 * alone.  Planned once per runtime, at the probe, before any of its rings
 * exists.  Where the kernel does not count rings (5.12 to 6.12) this only
 * makes rings of many executors smaller: fewer SQEs in flight per
 * executor, not an error. */
static uint32_t ring_entries_planned(const struct cbcmn_runtime *rt, uint32_t entries)
{
	struct rlimit rl;
	if (!memlock_bound() || getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
		return entries;
	uint64_t budget = (uint64_t)rl.rlim_cur / 4 * 3;
	uint64_t held = atomic_load_explicit(&rings_held, memory_order_relaxed);
	uint64_t share = (budget > held ? budget - held : 0) / (rt->cfg.workers ? rt->cfg.workers : 1);
	while (entries > RING_MIN_ENTRIES && ring_cost(entries) > share)
		entries /= 2;
	return entries;
}

/* A ring of up to `entries` SQEs with `flags`: fewer while it does not fit
 * in locked memory (halving, down to RING_MIN_ENTRIES, which is retried
 * until ring_retry_until()).  0 with *got set, or the set-up's error. */
static int ring_init_fit(struct io_uring *u, uint32_t entries, uint32_t flags,
			 const cbcmn_config *cfg, uint32_t *got)
{
	int rc;
	for (;;) {
		rc = ring_init(u, entries, flags, cfg);
		if (rc != -ENOMEM || entries <= RING_MIN_ENTRIES)
			break;
		entries /= 2;
	}
	if (rc == -ENOMEM) {
		uint64_t until = ring_retry_until(entries, cbcmn__mono_ns());
		for (uint64_t ns = 1000000; rc == -ENOMEM && cbcmn__mono_ns() < until;
		     ns = ns * 2 < RING_SLEEP_MAX_NS ? ns * 2 : RING_SLEEP_MAX_NS) {
			struct timespec ts = {0, (long)ns};
			nanosleep(&ts, NULL);
			rc = ring_init(u, entries, flags, cfg);
		}
	}
	if (rc == 0)
		*got = entries;
	return cbcmn__ring_error(rc);
}

/* Does a fixed file the table drops go at once, while a request on
 * another fixed file lives?  Before 6.13 the files a table dropped were
 * put in the order of its resource nodes, each held by every fixed-file
 * request submitted while it was current (io_rsrc_node_ref_zero()
 * "recycles ref nodes in order"): a stream's multishot recv holds its node
 * for its connection's life, so a stream closed beside an older one would
 * keep its socket open, no FIN to the peer, until that one ended.  6.13
 * gave each slot a node of its own.  No flag or opcode says which, so the
 * behaviour itself is probed on u: a poll armed on slot 0, slot 1 dropped
 * and our other descriptor of its socket closed; its AF_UNIX peer learns
 * of the last close in that close(2) (unix_release_sock()), so a read
 * without waiting says EOF (let go) or EAGAIN (still held).  Not with
 * SQPOLL, whose thread may issue the poll after the drop. */
static int fixed_drop_is_prompt_on(struct io_uring *u)
{
	int a[2], b[2];
	int prompt = -1; /* 1 let go, 0 held, -1 not asked (out of descriptors ...) */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a))
		return -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b))
		goto out_a;
	int fds[2] = {a[0], b[0]}, none = -1;
	if (io_uring_register_files(u, fds, 2))
		goto out_b;
	struct io_uring_sqe *sqe = io_uring_get_sqe(u);
	if (!sqe)
		goto out_b;
	io_uring_prep_poll_add(sqe, 0, POLLIN);
	sqe->flags |= IOSQE_FIXED_FILE;
	if (io_uring_submit(u) != 1 || io_uring_register_files_update(u, 1, &none, 1) != 1)
		goto out_b;
	close(b[0]);
	b[0] = -1;
	char c;
	ssize_t n = recv(b[1], &c, 1, MSG_DONTWAIT);
	prompt = n == 0 ? 1 : n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
out_b:
	if (b[0] >= 0)
		close(b[0]);
	close(b[1]);
out_a:
	close(a[0]);
	close(a[1]);
	return prompt; /* the poll and the table go with the ring */
}

/* The kernel's answer, once a process: 0 not asked yet, 1 yes, 2 no.
 * (Tests set it back to 0.) */
_Atomic int cbcmn__fixed_prompt;

/* Asked when a runtime's first stream opens (stream.c), not at create:
 * the probe's socketpair(2) and ring are a stream's business, and a
 * program that uses no socket may forbid them (a seccomp filter that
 * kills on socketpair, as systemd's SystemCallFilter=~@network-io: create
 * killed such a program: test_regression_create_without_socketpair).  On
 * a small plain ring of its own, 2 entries (its memory comes back some ms
 * after it is closed, as the create's throwaway ring's: an executor's
 * ring made meanwhile retries, ring_init_fit()).  Of two first streams
 * at once, one asks and the other goes without the table. */
bool cbcmn__fixed_drop_is_prompt(void)
{
	static pthread_mutex_t asking = PTHREAD_MUTEX_INITIALIZER;
	int known = atomic_load_explicit(&cbcmn__fixed_prompt, memory_order_acquire);
	if (known)
		return known == 1;
	/* One asks at a time; a stream opening meanwhile goes without the
	 * table rather than wait on an executor (or, forked meanwhile, for
	 * ever).  One at a time also orders the probes' rings, which the
	 * kernel may map at the same address one after the other (TSan saw
	 * two threads' SQE writes there as a race). */
	if (pthread_mutex_trylock(&asking) != 0)
		return false;
	int prompt = -1;
	known = atomic_load_explicit(&cbcmn__fixed_prompt, memory_order_acquire);
	if (known) {
		prompt = known == 1;
	} else {
		struct io_uring u;
		if (io_uring_queue_init(2, &u, 0) == 0) {
			prompt = fixed_drop_is_prompt_on(&u);
			io_uring_queue_exit(&u);
			ring_closed();
		}
		/* Not asked (out of descriptors: a server at its limit, or
		 * memory): no table this time, and asked again at the next
		 * stream, rather than fixed files off for the process's life. */
		if (prompt >= 0)
			atomic_store_explicit(&cbcmn__fixed_prompt, prompt ? 1 : 2,
					      memory_order_release);
	}
	pthread_mutex_unlock(&asking);
	return prompt == 1;
}

/* Post a CQE (user_data ud, res 0) on the ring numbered fd from the
 * calling thread, through no ring of its own: done when the call returns.
 * Before 6.13 fd -1 names no ring (-EBADF); -EBADF, -EBADFD: fd is no
 * ring; -EOVERFLOW: its CQ full and no memory to keep the CQE past it.
 * A raw system call: no cancellation point (cbcmn__efd_ring()). */
static int sync_msg(int fd, uint64_t ud)
{
	struct io_uring_sqe sqe;
	memset(&sqe, 0, sizeof(sqe));
	io_uring_prep_msg_ring(&sqe, fd, 0, ud, 0);
	int saved = errno; /* a program's thread's (cbcmn__doorbell()) */
	int rc = syscall(__NR_io_uring_register, -1, IORING_REGISTER_SEND_MSG_RING, &sqe, 1) < 0
			 ? -errno
			 : 0;
	errno = saved;
	return rc;
}

/* What the kernel supports, once per runtime, on the creating thread: the
 * best setup flags it accepts, then the opcodes, on one small throwaway
 * ring (its locked memory is given back only some ms after it is closed:
 * one ring, not two). */
int cbcmn__ring_probe(struct cbcmn_runtime *rt)
{
	const cbcmn_config *cfg = &rt->cfg;
	const uint32_t *sets = flag_sets;
	size_t nsets = sizeof(flag_sets) / sizeof(flag_sets[0]);
	if (cfg->ring_flags & CBCMN_RING_SQPOLL) {
		sets = sqpoll_sets;
		nsets = sizeof(sqpoll_sets) / sizeof(sqpoll_sets[0]);
	} else if (cfg->ring_flags & CBCMN_RING_PLAIN) {
		sets = flag_sets + 2;
		nsets = 2;
	}
	struct io_uring u;
	uint32_t got;
	int rc = -EINVAL;
	size_t i;
	for (i = 0; i < nsets; i++) {
		rc = ring_init_fit(&u, RING_MIN_ENTRIES, sets[i], cfg, &got);
		if (rc != -EINVAL)
			break; /* made, or out of memory, fds, locked memory, io_uring */
	}
	if (rc)
		return rc; /* -ENOSYS, -EPERM where io_uring is disabled, ... */
	struct cbcmn__ring_caps *c = &rt->ring_caps;
	c->setup_flags = sets[i];
	c->ext_arg = u.features & IORING_FEAT_EXT_ARG;
	c->nodrop = u.features & IORING_FEAT_NODROP;
	struct io_uring_probe *pr = io_uring_get_probe_ring(&u);
	if (pr) {
		c->msg_ring = io_uring_opcode_supported(pr, IORING_OP_MSG_RING);
		c->socket = io_uring_opcode_supported(pr, IORING_OP_SOCKET);
		/* Multishot accept came with IORING_OP_SOCKET (5.19); multishot
		 * recv with IORING_OP_SEND_ZC (6.0).  No flag to probe them by. */
		c->multishot_accept = c->socket;
		c->multishot_recv = io_uring_opcode_supported(pr, IORING_OP_SEND_ZC);
		io_uring_free_probe(pr);
	}
	/* Asked of SQPOLL rings only, the one place it serves (doorbell_sync()). */
	c->sync_msg_ring = (c->setup_flags & IORING_SETUP_SQPOLL) &&
			   sync_msg(u.ring_fd, CBCMN__UD_IGNORE) == 0;
	/* Whether a dropped slot lets its file go at once is asked at the
	 * first stream (cbcmn__fixed_drop_is_prompt()). */
	c->fixed_files = c->multishot_recv && !(c->setup_flags & IORING_SETUP_SQPOLL);
	io_uring_queue_exit(&u);
	ring_closed();
	if (!c->ext_arg)
		return -EOPNOTSUPP; /* timed waits need IORING_FEAT_EXT_ARG (5.11) */
	c->plan_entries = ring_entries_planned(rt, cfg->ring_entries ? cfg->ring_entries
								 : RING_ENTRIES_DEFAULT);
	return 0;
}

/* The doorbell eventfd, made with the runtime (threads outside ring it). */
int cbcmn__ring_efd(struct cbcmn__exec *e)
{
	/* Blocking: io_uring polls it; a non-blocking one would make the armed
	 * read complete at once with -EAGAIN. */
	e->ring.efd = eventfd(0, EFD_CLOEXEC);
	return e->ring.efd < 0 ? -errno : 0;
}

static void efd_arm(struct cbcmn__exec *e)
{
	struct io_uring_sqe *sqe = cbcmn__ring_sqe(e);
	io_uring_prep_read(sqe, e->ring.efd, &e->ring.efd_val, sizeof(e->ring.efd_val), 0);
	io_uring_sqe_set_data64(sqe, CBCMN__UD_EVENTFD);
	e->ring.efd_armed = true;
}

/* A ring's number, once published in fd for doorbells, is never closed
 * while another thread may send to it (an executor, or any thread to an
 * SQPOLL executor: doorbell_sync()): a sender reads it, then sends
 * its MSG_RING, and a number closed in between may name another io_uring
 * of the process by then (another runtime's, a library's), which would
 * get our doorbell's CQE.  When the ring goes, dup3() puts the eventfd
 * under the number in the same step as it drops the ring's file: a
 * MSG_RING to it fails and its sender rings the eventfd instead.  The
 * number is held until the executor's next ring takes it (a restart after
 * a retire, a takeover) or destroy closes it, when nobody sends.
 * dup3() onto an open number takes no new descriptor, so a full table
 * does not fail it; an RLIMIT_NOFILE lowered below the number does
 * (-EBADF): then the number is closed and -1 published, as before. */
static int held_dup(int from, int to)
{
	int err = CBCMN__FAULT(CBCMN__F_DUP); /* tests: each path's failure */
	if (err) {
		errno = -err;
		return -1;
	}
	return dup3(from, to, O_CLOEXEC);
}

static void ring_fd_drop(struct cbcmn__ring *r)
{
	int fd = r->u.ring_fd;
	if (atomic_load_explicit(&r->fd, memory_order_relaxed) != fd) {
		close(fd); /* never published (ring_fd_adopt() failed) */
		return;
	}
	if (held_dup(r->efd, fd) < 0) {
		atomic_store_explicit(&r->fd, -1, memory_order_relaxed);
		close(fd);
	}
}

/* Publish the new ring's number: the one held (ring_fd_drop()), the ring
 * put under it in place of the eventfd, else its own.  Should that dup3()
 * fail, the held number stays on the eventfd: doorbells take the eventfd,
 * slower but ours.  After the ring's registration: an unregistered ring
 * enters through the number. */
static void ring_fd_adopt(struct cbcmn__ring *r)
{
	int held = atomic_load_explicit(&r->fd, memory_order_relaxed);
	if (held < 0) {
		atomic_store_explicit(&r->fd, r->u.ring_fd, memory_order_relaxed);
		return;
	}
	if (held_dup(r->u.ring_fd, held) < 0)
		return;
	/* Registered, enters name the file, not the number. */
	close(r->u.ring_fd);
	r->u.ring_fd = held;
	if (!r->registered)
		r->u.enter_ring_fd = held;
}

/* Make the executor's ring, on its own thread, which becomes its single
 * issuer, with the flags the probe chose. */
int cbcmn__ring_create(struct cbcmn__exec *e)
{
	struct cbcmn_runtime *rt = e->rt;
	struct cbcmn__ring *r = &e->ring;
	uint32_t entries = rt->ring_caps.plan_entries;
	int rc = ring_init_fit(&r->u, entries, rt->ring_caps.setup_flags, &rt->cfg, &r->entries);
	if (rc)
		return rc;
	atomic_fetch_add_explicit(&rings_held, ring_cost(r->u.sq.ring_entries), memory_order_relaxed);
	r->up = true;
	r->enabled = true;
	r->dropped = false;
	r->overflow_seen = IO_URING_READ_ONCE(*r->u.cq.koverflow);
	/* io-wq is per thread: the cap applies to this executor's bounded
	 * workers (regular files, opens, fsync).  Never to the
	 * unbounded ones (0 keeps the kernel's limit, RLIMIT_NPROC): they run,
	 * blocking, the calls io_uring cannot make non-blocking on files that
	 * are not regular (every pipe read and write before 6.4, as on Debian
	 * 12's 6.1; inotify, ttys), and those may wait there for another
	 * call.  Capped at 4, 4 pipe writers blocked in workers kept their
	 * readers' reads queued behind them and nothing moved again
	 * (test_pipe_stream_two_executors in the 6.1 guest;
	 * test_regression_iowq_cap_starves_a_ready_blocking_read here).
	 * Old kernels lack the call: then the kernel's default stays. */
	uint32_t n = rt->cfg.iowq_max_workers ? rt->cfg.iowq_max_workers : 4;
	unsigned int vals[2] = {n, 0};
	(void)io_uring_register_iowq_max_workers(&r->u, vals);
	/* Enter through a registered ring fd: a cheaper fd lookup per enter.
	 * Registered in this thread's table: unregistered on it too. */
	r->registered = io_uring_register_ring_fd(&r->u) == 1;
	ring_fd_adopt(r);
	efd_arm(e);
	io_uring_submit(&r->u);
	return 0;
}

/* Unmap ring u and close its fd: liburing's io_uring_queue_exit() without
 * its unregistering of the registered ring fd.  That index lives in the
 * owner thread's table: from any other thread it names that thread's own
 * registered ring (or the kernel refuses, -EEXIST, for a SINGLE_ISSUER
 * ring), so only the owner unregisters (cbcmn__ring_leave()), and a thread
 * that ends drops its table anyway. */
static void ring_unmap(struct io_uring *u, int fd)
{
	atomic_fetch_sub_explicit(&rings_held, ring_cost(u->sq.ring_entries), memory_order_relaxed);
	munmap(u->sq.sqes, u->sq.ring_entries * sizeof(struct io_uring_sqe));
	if (u->cq.ring_ptr && u->cq.ring_ptr != u->sq.ring_ptr)
		munmap(u->cq.ring_ptr, u->cq.ring_sz);
	munmap(u->sq.ring_ptr, u->sq.ring_sz);
	if (fd >= 0)
		close(fd);
	ring_closed(); /* its fd is closed here or by ring_fd_drop() */
}

/* The owner thread is about to end: give back its registered ring fd.  On
 * the owner only (see ring_unmap()). */
void cbcmn__ring_leave(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	if (r->up && r->registered && io_uring_unregister_ring_fd(&r->u) == 1)
		r->registered = false;
}

/* The ring goes (a retiring executor, on its thread; destroy, on another
 * once the owner has ended, after its cbcmn__ring_leave()); the eventfd
 * stays, for the thread that may start on the executor later, and under
 * the ring's number too (ring_fd_drop()). */
void cbcmn__ring_close(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	if (r->up) {
		ring_unmap(&r->u, -1);
		ring_fd_drop(r);
	}
	r->registered = false;
	cbcmn__bufring_fini(e);
	r->up = r->enabled = r->efd_armed = false;
	r->inflight = r->defer = 0;
	r->resubmit = false;
	r->reqs = NULL;
}

void cbcmn__ring_destroy(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	cbcmn__ring_close(e);
	/* Every executor has ended: nobody sends to the number any more. */
	int fd = atomic_exchange_explicit(&r->fd, -1, memory_order_relaxed);
	if (fd >= 0)
		close(fd);
	if (r->efd >= 0)
		close(r->efd);
	r->efd = -1;
}

/* The SQ is full: submit it, and with SQPOLL wait for the kernel's poller
 * to take entries (a submit there only wakes it). */
static void sq_full(struct cbcmn__exec *e)
{
	CBCMN__COUNT(e, ring_msgs_backpressure, 1);
	cbcmn__ring_submit(e, false, 0);
	if (e->ring.u.flags & IORING_SETUP_SQPOLL)
		io_uring_sqring_wait(&e->ring.u);
}

/* An SQE, never NULL: a full SQ is submitted first (back-pressure). */
struct io_uring_sqe *cbcmn__ring_sqe(struct cbcmn__exec *e)
{
	if (e->ep)
		return cbcmn__ep_sqe(e); /* no ring: the epoll backend's stand-in */
	struct io_uring_sqe *sqe;
	while (!(sqe = io_uring_get_sqe(&e->ring.u)))
		sq_full(e);
	return sqe;
}

/* Room for n SQEs in a row (a linked pair must not be split by a submit). */
bool cbcmn__ring_sq_room(struct cbcmn__exec *e, unsigned n)
{
	while (io_uring_sq_space_left(&e->ring.u) < n)
		sq_full(e);
	return true;
}

/* An injected io_uring_enter failure (CBCMN__F_SUBMIT), or 0: the enter
 * failed after liburing had moved the SQEs to the kernel's SQ, as a real
 * failure leaves them (cbcmn__ring_submit()). */
static int submit_fault(struct io_uring *u)
{
	int rc = CBCMN__FAULT(CBCMN__F_SUBMIT);
	if (rc && !(u->flags & IORING_SETUP_SQPOLL)) {
		u->sq.sqe_head = u->sq.sqe_tail;
		/* release: the SQEs' contents before the tail the kernel
		 * reads (as liburing's own flush). */
		io_uring_smp_store_release(u->sq.ktail, u->sq.sqe_tail);
	}
	return rc;
}

/* After an io_uring_enter that submitted the n SQEs queued (counted) and
 * returned rc. */
static void submitted(struct cbcmn__exec *e, unsigned n, int rc)
{
	struct io_uring *u = &e->ring.u;
	/* Whatever submitted them (the loop, a doorbell's own enter), the
	 * SQEs that waited for a batch are gone: the next batch starts
	 * afresh (sched.c, ring_may_defer()). */
	e->ring.defer = 0;
	CBCMN__COUNT(e, ring_enters, 1);
	if (n) {
		CBCMN__COUNT(e, sqes_submitted, n);
		CBCMN__TRACE(e, CBCMN_TRACE_IO_SUBMIT, cbcmn__trace_now(), 0, n, 0);
	}
	e->ring.resubmit = false;
	if (rc < 0 && rc != -ETIME) {
		/* -EBUSY, -EAGAIN: the CQ overflowed (kernels before 5.19
		 * refuse to submit until it is drained) or no request could be
		 * allocated; -EINTR.  liburing has handed the SQEs to the
		 * kernel's SQ all the same (its head moved), so they no longer
		 * count as unflushed: without a mark they would wait for the
		 * next park, which a busy executor may never reach.  The loop
		 * submits again after its next reap. */
		if (rc == -EBUSY || rc == -EAGAIN)
			CBCMN__COUNT(e, ring_msgs_backpressure, 1);
		e->ring.resubmit = !(u->flags & IORING_SETUP_SQPOLL) && io_uring_sq_ready(u) != 0;
		/* -EBADR: the kernel dropped CQEs (cqes_dropped()).  It says
		 * so once; the overflow count says so too. */
		if (rc == -EBADR)
			e->ring.dropped = true;
	}
}

/* Submit what is queued and collect completions into the CQ: one
 * io_uring_enter.  wait_one: also wait for a CQE, at most timeout_ns
 * (0: no limit).  The CQEs are left for cbcmn__ring_reap(). */
void cbcmn__ring_submit(struct cbcmn__exec *e, bool wait_one, uint64_t timeout_ns)
{
	struct io_uring *u = &e->ring.u;
	unsigned n = cbcmn__sq_unflushed(u);
	int rc = submit_fault(u);
	if (rc == 0 && wait_one) {
		struct io_uring_cqe *cqe;
		struct __kernel_timespec ts = {.tv_sec = (long long)(timeout_ns / 1000000000u),
					       .tv_nsec = (long long)(timeout_ns % 1000000000u)};
		rc = io_uring_submit_and_wait_timeout(u, &cqe, 1, timeout_ns ? &ts : NULL, NULL);
	} else if (rc == 0) {
		rc = io_uring_submit_and_get_events(u);
	}
	submitted(e, n, rc);
}

/* Ring x's eventfd.  A raw system call, not write(): write() is a
 * cancellation point, and an executor thread cancelled there (a task's
 * pthread_cancel of its own thread, acted upon in a spawn's doorbell)
 * ended after the wake-up was handed out (permit, idle bit, the searching
 * count it carries) but before the doorbell rang: its target slept on and
 * every later notification was skipped.  Cannot fail: the counter never
 * nears its maximum. */
void cbcmn__efd_ring(struct cbcmn__exec *x)
{
	uint64_t one = 1;
	(void)syscall(SYS_write, x->ring.efd, &one, sizeof(one));
}

static void dispatch(struct cbcmn__exec *e, uint64_t ud, int32_t res, uint32_t flags)
{
	switch (ud & CBCMN__UD_MASK) {
	case CBCMN__UD_REQ:
		cbcmn__io_cqe(e, (struct cbcmn__ioreq *)(uintptr_t)ud, res, flags, false);
		break;
	case CBCMN__UD_LTIMEOUT:
		cbcmn__io_cqe(e, (struct cbcmn__ioreq *)(uintptr_t)(ud & ~(uint64_t)CBCMN__UD_MASK),
			      res, flags, true);
		break;
	case CBCMN__UD_MSHOT:
		cbcmn__mshot_cqe(e, (struct cbcmn__mshot *)(uintptr_t)(ud & ~(uint64_t)CBCMN__UD_MASK),
				 res, flags);
		break;
	case CBCMN__UD_DOORBELL:
		CBCMN__COUNT(e, doorbells_recv, 1);
		break;
	case CBCMN__UD_EVENTFD:
		e->ring.efd_armed = false;
		if (res > 0)
			CBCMN__COUNT(e, doorbells_recv, 1);
		if (res != -ECANCELED && e->ring.enabled)
			efd_arm(e);
		break;
	case CBCMN__UD_DBSEND: {
		/* MSG_RING failed (the target's CQ is full, say): ring its
		 * eventfd instead, never lose a wake-up. */
		uint32_t id = (uint32_t)(ud >> 3);
		if (res < 0 && id < e->rt->nexec)
			cbcmn__efd_ring(e->rt->exec[id]);
		break;
	}
	default:
		break; /* cancel requests, liburing's own timeouts */
	}
}

/* ---- dropped CQEs -------------------------------------------------------------
 *
 * With IORING_FEAT_NODROP the kernel keeps the CQEs that do not fit in the
 * CQ on a list of its own; if even that allocation fails it drops the CQE,
 * counts it in the CQ ring's overflow field and fails the next wait with
 * -EBADR.  Whose CQE it was is unknown, and a fiber waiting for it would
 * wait forever; nor can a request still listed be ended safely while the
 * kernel may yet complete it (a buffered read waiting for a page is in no
 * list a cancel searches).  So the executor replaces its thread, as when
 * a task ends one (sched.c): the old thread's exit cancels every request
 * it made and waits for all of them; the new thread takes over with a new
 * ring and ends every wait still listed, and every stream and acceptor,
 * as cancelled (cbcmn__ring_takeover()).  Completions reaped before that
 * keep their results.  ring.dropped asks for it; cbcmn__ring_busy() keeps
 * the executor from parking meanwhile. */

/* Drops the kernel counted since the last look. */
static void drops_check(struct cbcmn__exec *e)
{
	uint32_t ov = IO_URING_READ_ONCE(*e->ring.u.cq.koverflow);
	if (__builtin_expect(ov != e->ring.overflow_seen, 0)) {
		e->ring.overflow_seen = ov;
		e->ring.dropped = true;
	}
}

/* Hand CQEs to their owners, at most one SQ's worth (ring.entries) per
 * call: completions that keep coming (a busy multishot, an overflow being
 * flushed) must not keep the executor from its tasks; what is left is
 * seen by cbcmn__ring_busy() and reaped at the next turn.  Returns how
 * many.  The CQEs are copied out and the CQ advanced before they are
 * handled, so a handler may submit. */
unsigned cbcmn__ring_reap(struct cbcmn__exec *e)
{
	struct io_uring *u = &e->ring.u;
	unsigned total = 0, bound = e->ring.entries ? e->ring.entries : RING_MIN_ENTRIES;
	if (IO_URING_READ_ONCE(*u->sq.kflags) & IORING_SQ_CQ_OVERFLOW) {
		CBCMN__COUNT(e, ring_msgs_backpressure, 1);
		io_uring_get_events(u); /* flush the kernel's overflow list */
	}
	drops_check(e);
	while (total < bound) {
		struct io_uring_cqe *cqes[32];
		unsigned n = io_uring_peek_batch_cqe(u, cqes, bound - total < 32 ? bound - total : 32);
		if (n == 0)
			break;
		struct {
			uint64_t ud;
			int32_t res;
			uint32_t flags;
		} got[32];
		unsigned kept = 0;
		for (unsigned i = 0; i < n; i++) {
			if (CBCMN__FAULT(CBCMN__F_CQE_DROP)) {
				e->ring.dropped = true; /* as if the kernel had dropped it */
				continue;
			}
			got[kept].ud = cqes[i]->user_data;
			got[kept].res = cqes[i]->res;
			got[kept].flags = cqes[i]->flags;
			kept++;
		}
		io_uring_cq_advance(u, n);
		for (unsigned i = 0; i < kept; i++)
			dispatch(e, got[i].ud, got[i].res, got[i].flags);
		total += n;
	}
	if (total) {
		CBCMN__COUNT(e, cqes_reaped, total);
		CBCMN__TRACE(e, CBCMN_TRACE_IO_COMPLETE, cbcmn__trace_now(), 0, total, 0);
	}
	return total;
}

/* Are doorbells MSG_RINGs from the sender's ring?  Not with SQPOLL: the
 * kernel's poller sends the SQE when it gets to it, and a ring closed
 * before that drops it: the spare, retiring right after it handed its
 * tasks on and rang an executor, left that executor asleep beside them
 * (tens of seconds, until something else woke it; test_io, beside the
 * hog).  A MSG_RING without a ring (doorbell_sync()) or an eventfd
 * write is done when it returns. */
bool cbcmn__doorbell_msg_ring(const struct cbcmn_runtime *rt)
{
	return rt->ring_caps.msg_ring &&
	       !(rt->cfg.ring_flags & (CBCMN_RING_NO_MSG_RING | CBCMN_RING_SQPOLL));
}

/* ring_caps, read by every doorbell, shares its line with no counter
 * other threads write (ext_msg_doorbells, place_rr: runtime.h). */
_Static_assert(offsetof(struct cbcmn_runtime, ring_caps) / CBCMN__CACHELINE !=
			       offsetof(struct cbcmn_runtime, ext_msg_doorbells) / CBCMN__CACHELINE &&
		       offsetof(struct cbcmn_runtime, ring_caps) / CBCMN__CACHELINE !=
			       offsetof(struct cbcmn_runtime, place_rr) / CBCMN__CACHELINE,
	       "ring_caps on a line no counter writes");

/* Do SQPOLL executors ring with doorbell_sync()? */
static bool doorbell_sync_on(const struct cbcmn_runtime *rt)
{
	return rt->ring_caps.sync_msg_ring && !(rt->cfg.ring_flags & CBCMN_RING_NO_MSG_RING);
}

/* The number a doorbell's MSG_RING names: target's ring's, never closed
 * while we may send to it (ring_fd_drop()).  An injected failure names
 * no ring: the kernel fails the MSG_RING (-EBADF) and the eventfd serves,
 * as for a full CQ. */
static int doorbell_fd(struct cbcmn__exec *target)
{
	int fd = CBCMN__FAULT(CBCMN__F_MSG_RING)
			 ? -1
			 : atomic_load_explicit(&target->ring.fd, memory_order_relaxed);
	CBCMN__PAUSE(CBCMN__P_DOORBELL_FD, target);
	return fd;
}

/* A doorbell rung by executor me: counted, traced (how: 0 a MSG_RING,
 * 1 the eventfd) and probed. */
static void doorbell_sent(struct cbcmn__exec *me, struct cbcmn__exec *target, int how)
{
	CBCMN__COUNT(me, doorbells_sent, 1);
	CBCMN__TRACE(me, CBCMN_TRACE_DOORBELL, cbcmn__trace_now(), 0, how, target->id);
	CBCMN_PROBE4(doorbell, (int)me->id, target->id, how, target->rt->seg.rt_id);
}

/* This thread's MSG_RINGs without a ring were refused for good: its
 * doorbells ring the eventfd, not a failed system call each first.  Per
 * thread: a seccomp filter is a thread's (a program's thread may have one
 * the executors have not), and a kernel that refuses refuses each thread
 * once.  Kept for the thread's life, whatever runtime it rings. */
static _Thread_local bool sync_msg_refused;

/* Refusals that never change for a thread: a seccomp filter's (EPERM,
 * or the errno it chose: ENOSYS, EOPNOTSUPP are common ones), a kernel
 * without the call or the opcode (EINVAL, before 6.13).  The others say
 * the target's state (EBADF, EBADFD: its ring gone; EOVERFLOW: its CQ
 * full): the next may pass. */
static bool refused_for_good(int rc)
{
	return rc == -EPERM || rc == -EINVAL || rc == -ENOSYS || rc == -EOPNOTSUPP;
}

/* A doorbell to an SQPOLL executor, from src (an executor's id, or
 * rt->nexec: a thread outside the runtime): a MSG_RING sent by the
 * calling thread itself (sync_msg()), which posts target's CQE and wakes
 * it when the call returns.  Not the eventfd first: its read, armed on an
 * SQPOLL ring, completes only once that ring's poller thread runs (the
 * read's poll wake-up is task work for the thread that issued it), one
 * more thread to get a CPU each hop: 1.27x a parked round trip on a
 * quiet host, 40x (5-20 ms) in a throttled cgroup (docs/BENCHMARKS.md,
 * "Nineteenth session").  The same for a thread of the program's: a
 * channel send or a task's wake from it.  Its fd is the eventfd's peer
 * in lifetime: the number stays ours while anyone may ring it
 * (ring_fd_drop()).  0, or it failed (no such call, no SQPOLL rings, the
 * target's ring gone or its CQ full, refused for good on this thread
 * before): the eventfd serves. */
static int doorbell_sync(struct cbcmn__exec *target, uint32_t src)
{
	if (!doorbell_sync_on(target->rt) || sync_msg_refused)
		return -EOPNOTSUPP;
	int rc = sync_msg(doorbell_fd(target), CBCMN__UD_DOORBELL | ((uint64_t)src << 3));
	if (__builtin_expect(rc, 0) && refused_for_good(rc)) {
		sync_msg_refused = true;
		atomic_fetch_add_explicit(&target->rt->sync_msg_refused, 1, memory_order_relaxed);
	}
	return rc;
}

/* A doorbell rung by a thread outside rt: counted (how: 0 a MSG_RING, 1
 * the eventfd) and probed. */
static void ext_doorbell_sent(struct cbcmn_runtime *rt, struct cbcmn__exec *target, int how)
{
	atomic_fetch_add_explicit(&rt->seg.hdr->ext_doorbells, 1, memory_order_relaxed);
	if (how == 0)
		atomic_fetch_add_explicit(&rt->ext_msg_doorbells, 1, memory_order_relaxed);
	CBCMN_PROBE4(doorbell, -1, target->id, how, rt->seg.rt_id);
}

/* Are an executor's doorbells MSG_RINGs, from its ring or without one
 * (cbcmn_stats.msg_ring)? */
bool cbcmn__doorbells_are_msg_rings(const struct cbcmn_runtime *rt)
{
	return cbcmn__doorbell_msg_ring(rt) || doorbell_sync_on(rt);
}

/* Ring target's doorbell: a MSG_RING CQE on its ring from the calling
 * executor's ring; to an SQPOLL executor a MSG_RING sent without a ring
 * (doorbell_sync(), from any thread); else, or when either fails, a write
 * to its eventfd (MSG_RING missing, turned off or sent late: above; the
 * epoll backend). */
void cbcmn__doorbell(struct cbcmn__exec *target)
{
	struct cbcmn_runtime *rt = target->rt;
	struct cbcmn__exec *me = cbcmn__tls_exec;
	bool ours = me && me->rt == rt;
	if (ours && me->ring.enabled && cbcmn__doorbell_msg_ring(rt)) {
		struct io_uring_sqe *sqe = cbcmn__ring_sqe(me);
		io_uring_prep_msg_ring(sqe, doorbell_fd(target), 0,
				       CBCMN__UD_DOORBELL | ((uint64_t)me->id << 3), 0);
		io_uring_sqe_set_data64(sqe, CBCMN__UD_DBSEND | ((uint64_t)target->id << 3));
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		unsigned n = cbcmn__sq_unflushed(&me->ring.u);
		int rc = submit_fault(&me->ring.u);
		/* A failure marks the SQEs for the next turn, like any other
		 * submit's: this one may never be followed by another enter
		 * (a busy sender without I/O) and its target sleeps meanwhile. */
		submitted(me, n, rc ? rc : io_uring_submit(&me->ring.u));
		CBCMN__COUNT(me, ring_msgs_submitted, 1);
		doorbell_sent(me, target, 0);
		return;
	}
	int how = doorbell_sync(target, ours ? me->id : rt->nexec) == 0 ? 0 : 1;
	if (how)
		cbcmn__efd_ring(target);
	if (ours)
		doorbell_sent(me, target, how);
	else
		ext_doorbell_sent(rt, target, how);
}

/* The executor's thread died and a new one takes over (sched.c).  The old
 * ring's single issuer is gone, so the new thread needs its own ring, under
 * the same fd number, which other executors may still use for MSG_RING.
 * First wait for the old thread to be gone: its exit cancels its requests
 * and waits for them, after which no buffer of ours is in the kernel's
 * hands; their waits end with what the old CQ says (io.c), its streams and
 * acceptors as cancelled.
 *
 * "Gone" is pthread_join() of the old thread: it returns once the kernel
 * has cleared the thread's tid at its very end (CLONE_CHILD_CLEARTID, after
 * its io_uring requests were cancelled and reaped), whatever /proc shows:
 * a /proc of another pid namespace, none, or a new thread that reused the
 * tid (which the previous check, polling /proc/self/task/<tid>, took for
 * the old one and waited on forever).
 *
 * The old ring goes before the new one is made: both at once would need
 * twice the ring's locked memory, and an executor whose ring just fitted
 * in RLIMIT_MEMLOCK would be lost, its dead task's nursery waiting
 * forever.  Meanwhile its number names our eventfd (ring_fd_drop()): a
 * MSG_RING sent to it fails and its sender rings the eventfd instead. */
int cbcmn__ring_takeover(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	/* Unbounded: until the old thread is gone the kernel may still write
	 * into the buffers of the requests it had in flight. */
	pthread_join(e->dead_thread, NULL);
	bool was_up = r->up;
	r->up = r->enabled = r->efd_armed = r->registered = false;
	cbcmn__bufring_retire(e); /* registered with the old ring */
	/* Unmapped first: each mapping holds the ring's file, whose last
	 * reference, going below, gives its locked memory back (some ms
	 * later: ring_init_fit() retries meanwhile).  The CQEs the dead thread did not reap are copied out before the
	 * unmap and handed out once the new ring is up (a stream's may
	 * re-arm on it).  Without memory for the copy they are lost: those
	 * requests end -ECANCELED, as those of an overflowed CQ do. */
	struct io_uring_cqe *old_cqes = NULL;
	unsigned nold = 0;
	if (was_up) {
		const struct io_uring_cq *cq = &r->u.cq;
		/* acquire: the kernel's CQE stores before its tail; the thread
		 * that posted them is gone, so this is a formality. */
		unsigned head = *cq->khead, tail = io_uring_smp_load_acquire(cq->ktail);
		if (tail != head && (old_cqes = cbcmn__malloc((size_t)(tail - head) * sizeof(*old_cqes))))
			for (; head != tail; head++)
				old_cqes[nold++] = cq->cqes[head & cq->ring_mask];
		ring_unmap(&r->u, -1);
		ring_fd_drop(r);
	}
	/* The new ring under the old number (ring_fd_adopt()). */
	int rc = cbcmn__ring_create(e);
	if (rc) {
		/* No ring: doorbells fail on the eventfd under the number,
		 * held until destroy, and fall back to it. */
		free(old_cqes);
		return rc;
	}
	/* What the old CQ held, for requests (io.c) and streams (stream.c). */
	cbcmn__io_orphan_all(e, old_cqes, nold);
	cbcmn__mshot_orphan_all(e, old_cqes, nold);
	free(old_cqes);
	r->inflight = 0;
	return 0;
}
