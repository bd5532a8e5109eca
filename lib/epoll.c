/* epoll.c: the readiness backend, for kernels and sandboxes without io_uring
 * (epoll.h; docs/IO.md, "Backends").
 *
 * Each executor has an epoll set, made with the runtime, holding its
 * doorbell eventfd (ring.efd: cbcmn__efd_ring() writes it, as for a ring
 * without MSG_RING) and the descriptors its tasks wait on.  A fiber I/O call
 * tries its system call at once, non-blocking without touching the
 * descriptor's flags (MSG_DONTWAIT; RWF_NOWAIT for read/write); on EAGAIN
 * the task registers a wait for the readiness it needs with its executor
 * and parks; the executor finds it ready between tasks (once every
 * BATCH_TURNS picks, or at once when idle) or in its park (epoll_pwait2,
 * with the next timer as the timeout), wakes it, and the task tries again.
 * Nothing is in flight in the kernel meanwhile, which makes cancellation
 * and timeouts simple: a wait that ends without readiness ended before the
 * call did anything (CBCMN_ECANCELED, -ETIMEDOUT).
 *
 * Registrations are kept, one per descriptor.  While an emulated request
 * (a stream's multishot recv, an acceptor) watches it, the registration is
 * edge-triggered and stays armed across readinesses, as the baseline
 * server's: no epoll_ctl per chunk, only once per request and when it
 * stops before EAGAIN (its batch done: a MOD has the set report it
 * again).  For tasks' waits alone it is EPOLLONESHOT: each wait sets it
 * with one EPOLL_CTL_MOD, which both looks at the file at once and tells
 * whether the number still names the file registered (a plain close(2)
 * and the number reused: the kernel's ENOENT, and it is registered anew),
 * and a task that moves to another executor leaves nothing armed behind.
 * An event nobody watches narrows a kept registration to what is still
 * watched (fd_ready()), and the end of its last request makes it one-shot
 * again (tasks' waits left) or removes it.  A stale registration of a file
 * still open elsewhere may wake a waiter of the new one, which tries again
 * and waits again: a spurious wake-up, never a lost one.  A cbcmn_close()
 * removes the descriptor from every set where something may watch it
 * (before the close: after, a copy of the file alive elsewhere would keep
 * a registration nothing could remove by number) and ends the waits on it
 * that began before it, on every executor (-EBADF: the runtime's close
 * log, close_apply()), so that no wait outlives its file or goes on with
 * the number's next one.
 *
 * A wait is the task's (on its stack) and listed by its executor; it is
 * claimed once (iwait.h) by readiness, cancellation or its timer, all on
 * that executor's thread, and whoever claims it unlinks it before waking
 * the task, which may then run anywhere.
 *
 * What epoll cannot watch (regular files: EPERM from epoll_ctl) and what a
 * non-blocking attempt cannot express (openat, statx, fsync) runs in the
 * blocking pool (blocking.c).  A read or write of a file that refuses
 * RWF_NOWAIT and is not O_NONBLOCK (a pipe before 6.2, a tty) goes through
 * a private O_NONBLOCK description of a pipe (reopen_fifo()), else to the
 * pool a slice at a time (sliced_pool()): never a pool thread held on an
 * empty or full descriptor.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "epoll_int.h"
#include "timer.h"

/* ---- the set (the executor's thread, or its task on it) --------------------- */

int cbcmn__ep_init(struct cbcmn__exec *e)
{
	struct cbcmn__ep *ep = cbcmn__calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	ep->tfd = -1;
	ep->epfd = epoll_create1(EPOLL_CLOEXEC);
	/* Non-blocking: the executor drains it after readiness, with nothing
	 * else to tell it whether a second doorbell already did. */
	e->ring.efd = ep->epfd < 0 ? -1 : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_EFD};
	int rc = 0;
	if (ep->epfd < 0 || e->ring.efd < 0 || epoll_ctl(ep->epfd, EPOLL_CTL_ADD, e->ring.efd, &ev))
		rc = -errno;
	e->ep = ep; /* destroy frees what was made */
	cbcmn__ep_pool_init();
	/* The runtime's close log: with the first executor (made first,
	 * freed first, once every thread is joined). */
	if (e->id == 0 && !rc) {
		void *cl = NULL;
		if (posix_memalign(&cl, CBCMN__CACHELINE, sizeof(*e->rt->ep_closes)) != 0)
			return -ENOMEM;
		memset(cl, 0, sizeof(*e->rt->ep_closes));
		e->rt->ep_closes = cl;
	}
	ep->closes = e->rt->ep_closes;
	return rc ? rc : cbcmn__ep_sq_init(ep);
}

void cbcmn__ep_destroy(struct cbcmn__exec *e)
{
	struct cbcmn__ep *ep = e->ep;
	if (!ep)
		return;
	if (ep->epfd >= 0)
		close(ep->epfd);
	if (ep->tfd >= 0)
		close(ep->tfd);
	cbcmn__ep_sq_fini(ep);
	free(ep->fds);
	free(ep);
	e->ep = NULL;
	if (e->id == 0) {
		free(e->rt->ep_closes);
		e->rt->ep_closes = NULL;
	}
}

int cbcmn__ep_takeover(struct cbcmn__exec *e)
{
	/* The dead thread ran tasks that may have used the set; it is gone
	 * once joined (ring.c says why join and not /proc). */
	pthread_join(e->dead_thread, NULL);
	return 0;
}

static uint64_t mono_ns(void);

/* The time of the set's looks, for cbcmn__ep_busy()'s bound: the runtime's
 * counter clock, unordered (this thread's own durations, read at every
 * turn while waits are registered: clock_gettime() cost 25-50 ns a read
 * on a VM's kvm-clock, two reads an echo request). */
static inline uint64_t look_clock(void)
{
	return cbcmn__now_ns_unordered();
}

/* Asked between tasks (and while spinning idle, and before parking): each
 * ask counts as a turn, and a look at the set is due every BATCH_TURNS,
 * or sooner once cfg.io_batch_ns has passed since the last look: beside
 * tasks that each run for milliseconds, 16 turns held a read whose data
 * had come for several of them (issue 15, liveness 4, as the ring's
 * submission, sched.c's ring_may_defer()); now the turn after a long pick
 * looks.  Time passed only, not the next pick's mean as the ring counts:
 * the park's last look asks this too (cbcmn__own_work()), just after the
 * idle search turn looked, and a mean pick past the bound would answer
 * "look" every time, the executor never sleeping.  The clock is read
 * once a turn only while waits are registered; lab mode looks by turns
 * alone, to repeat. */
bool cbcmn__ep_busy(const struct cbcmn__exec *e)
{
	struct cbcmn__ep *ep = e->ep;
	if (cbcmn__ep_sq_busy(ep))
		return true;
	if (!ep->all)
		return false;
	if (++ep->turns >= BATCH_TURNS)
		return true;
	if (e->rt->lab)
		return false;
	if (cbcmn__ns_since(look_clock(), ep->look_ns) < e->rt->cfg.io_batch_ns)
		return false;
	ep->turns = BATCH_TURNS; /* cbcmn__ep_poll() looks */
	return true;
}

static int fd_slot(struct cbcmn__ep *ep, int fd)
{
	if ((uint32_t)fd < ep->nfds)
		return 0;
	uint32_t n = ep->nfds ? ep->nfds : 64;
	while (n <= (uint32_t)fd)
		n *= 2;
	struct ep_fd *f = realloc(ep->fds, n * sizeof(*f));
	if (!f)
		return -ENOMEM;
	memset(f + ep->nfds, 0, (n - ep->nfds) * sizeof(*f));
	ep->fds = f;
	ep->nfds = n;
	return 0;
}

/* The registration's events for `want`: edge-triggered and kept armed
 * while an emulated request watches (`kept`); one-shot for tasks' waits
 * alone (each sets it anyway, and a task that moves to another executor
 * leaves nothing armed behind); with nothing wanted, one-shot with no
 * events (EPOLLERR and EPOLLHUP, which epoll always adds, fire once). */
static uint32_t arm_events(uint32_t want, bool kept)
{
	return want && kept ? want | EPOLLET : want | EPOLLONESHOT;
}

/* Between a cbcmn_close()'s removal of fd from every set and its
 * close(2), an add (a stream's request re-armed on another executor, its
 * MOD finding the registration gone) registered the file again, which
 * after the close(2), a copy of the file alive elsewhere, nothing could
 * remove by number: edge-triggered, it woke that executor at every edge
 * of the copy's file
 * (test_epoll_close_elsewhere_racing_a_rearm_leaves_no_registration); and
 * a MOD arming a stream's registration that the close's look had not
 * counted kept it armed past the close(2).  So an arming of fd waits for
 * a close of fd under way, and a close for the armings of its slot's
 * numbers under way (one system call each): the close's look, removals
 * and close(2) fall on one side of each arming.  An arming of another
 * number of the slot goes on: a close(2) may block for long (SO_LINGER
 * with data unsent, a flush to a network file), and held that executor,
 * spinning, however much the close needed it
 * (test_epoll_lingering_close_leaves_a_number_4096_above_armable).  After
 * the close an arming finds the number closed, or its next file (the
 * close log then tells the waits of the old one from the new one's). */
static void slot_pause(unsigned *spins)
{
	if ((*spins)++ < 64)
		cbcmn__cpu_relax();
	else
		sched_yield();
}

static void arm_enter(struct cbcmn__ep_closes *cl, uint32_t s, uint32_t what)
{
	for (unsigned spins = 0;;) {
		/* seq_cst, both: with close_enter()'s store and load, either
		 * the closer sees this count or we see its number. */
		atomic_fetch_add(&cl->arming[s], 1);
		if (atomic_load(&cl->closing[s]) != what)
			return;
		atomic_fetch_sub_explicit(&cl->arming[s], 1, memory_order_relaxed);
		while (atomic_load_explicit(&cl->closing[s], memory_order_relaxed) == what)
			slot_pause(&spins);
	}
}

static void arm_leave(struct cbcmn__ep_closes *cl, uint32_t s)
{
	/* release: a closer that sees the count drop sees our registration. */
	atomic_fetch_sub_explicit(&cl->arming[s], 1, memory_order_release);
}

/* Closes of two numbers of one slot take turns (rare: CLOSE_SLOTS apart). */
static void close_enter(struct cbcmn__ep_closes *cl, uint32_t s, uint32_t what)
{
	unsigned spins = 0;
	for (uint32_t v = 0; !atomic_compare_exchange_weak(&cl->closing[s], &v, what); v = 0)
		slot_pause(&spins);
	while (atomic_load(&cl->arming[s]) != 0)
		slot_pause(&spins);
}

static void close_leave(struct cbcmn__ep_closes *cl, uint32_t s)
{
	atomic_store_explicit(&cl->closing[s], 0, memory_order_release);
}

/* An EPOLL_CTL_ADD or MOD of fd, on one side of any cbcmn_close() of fd
 * (above): a fetch-add, a load and a fetch-sub beside a system call of
 * about a microsecond. */
static int fd_ctl(struct cbcmn__ep *ep, int op, int fd, struct epoll_event *ev)
{
	uint32_t s = (uint32_t)fd % CLOSE_SLOTS;
	arm_enter(ep->closes, s, (uint32_t)fd + 1);
	int rc = epoll_ctl(ep->epfd, op, fd, ev);
	int err = errno;
	arm_leave(ep->closes, s);
	errno = err;
	return rc;
}

/* Set fd's registration to `want`.  A MOD that finds nothing (the number
 * names another file now, or the file was closed) adds; an ADD that finds
 * one (a file we knew under this number is back) modifies.  Either looks
 * at the file: what is ready already is reported at the next look.
 * -EPERM: epoll cannot watch this file (a regular file).  *moved (if not
 * NULL): the registration we had under this number was gone (its file
 * closed or the number reused) and is now the number's present file's. */
static int fd_arm(struct cbcmn__ep *ep, int fd, uint32_t want, bool kept, bool *moved)
{
	struct ep_fd *f = &ep->fds[fd];
	struct epoll_event ev = {.events = arm_events(want, kept), .data.u64 = (uint64_t)fd};
	int op = f->added ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
	for (int tries = 0; tries < 2; tries++) {
		if (fd_ctl(ep, op, fd, &ev) == 0) {
			f->added = true;
			f->mask = want;
			f->kept = want && kept;
			return 0;
		}
		if (errno == ENOENT && op == EPOLL_CTL_MOD) {
			op = EPOLL_CTL_ADD;
			if (moved)
				*moved = true;
		}
		else if (errno == EEXIST && op == EPOLL_CTL_ADD)
			op = EPOLL_CTL_MOD;
		else
			break;
	}
	f->added = false;
	f->mask = 0;
	f->kept = false;
	return -errno;
}

/* Remove fd's registration, which nothing here watches.  A DEL finds none
 * if the number names another file now, and registers nothing. */
static void fd_remove(struct cbcmn__ep *ep, int fd)
{
	struct ep_fd *f = &ep->fds[fd];
	(void)epoll_ctl(ep->epfd, EPOLL_CTL_DEL, fd, NULL);
	f->added = false;
	f->mask = 0;
	f->kept = false;
}

/* The events fd's waits watch; *kept: an emulated request is among them. */
static uint32_t fd_wanted(const struct cbcmn__ep *ep, int fd, bool *kept)
{
	uint32_t want = 0;
	*kept = false;
	for (const struct ep_wait *w = ep->fds[fd].head; w; w = w->fnext) {
		want |= w->events;
		*kept |= w->ready != NULL;
	}
	return want;
}

/* The waits on f watched a file gone from its number (our registration
 * was made anew for the number's next file): a close of it ends them. */
static void fd_stale(struct ep_fd *f)
{
	for (struct ep_wait *w = f->head; w; w = w->fnext)
		w->stale = true;
}

void cbcmn__ep_unwatch(struct cbcmn__ep *ep, struct ep_wait *w)
{
	struct ep_fd *f = &ep->fds[w->fd];
	if (w->fprev)
		w->fprev->fnext = w->fnext;
	else
		f->head = w->fnext;
	if (w->fnext)
		w->fnext->fprev = w->fprev;
	if (w->aprev)
		w->aprev->anext = w->anext;
	else
		ep->all = w->anext;
	if (w->anext)
		w->anext->aprev = w->aprev;
	if (!w->ready)
		w->e->ring.inflight--; /* a task's I/O wait (an emulated request is stream.c's) */
	/* release: nothing to order; the closer reads it with seq_cst. */
	atomic_fetch_sub_explicit(&w->e->rt->ep_closes->watched[(uint32_t)w->fd % CLOSE_SLOTS], 1,
				  memory_order_release);
	if (w->real_deadline) {
		if (w->tprev)
			w->tprev->tnext = w->tnext;
		else
			ep->timed = w->tnext;
		if (w->tnext)
			w->tnext->tprev = w->tprev;
	}
	/* The last emulated request on fd ended: back to one-shot for the
	 * tasks' waits left, or removed if none is (one epoll_ctl a request),
	 * so that no registration stays armed for good behind a close(2) we
	 * are not told of while a copy of the file lives on elsewhere (a dup,
	 * a child): one-shot, it fires once at most.  Removed, not disarmed:
	 * a MOD that finds nothing adds, and the number may name another file
	 * by now (closed elsewhere and reused), which nobody asked us to
	 * watch.  A MOD that finds nothing for the tasks' waits left adds
	 * the number's present file: they watched the one gone, and are
	 * marked so, as fd_ready() marks them, so that its close ends them
	 * (before, the close log took them for waits on the new file, and a
	 * send went on into another socket:
	 * test_epoll_stream_end_after_close_elsewhere_leaves_its_send_ending). */
	if (w->ready && f->kept) {
		bool kept, moved = false;
		uint32_t rest = fd_wanted(ep, w->fd, &kept);
		if (!kept && rest)
			(void)fd_arm(ep, w->fd, rest, false, &moved);
		else if (!kept)
			fd_remove(ep, w->fd);
		if (moved)
			fd_stale(f);
	}
}

int cbcmn__ep_watch(struct cbcmn__exec *e, struct ep_wait *w)
{
	struct cbcmn__ep *ep = e->ep;
	int fd = w->fd;
	if (fd < 0)
		return -EBADF;
	int rc = fd_slot(ep, fd);
	if (rc)
		return rc;
	bool kept;
	uint32_t want = w->events | fd_wanted(ep, fd, &kept);
	/* seq_cst, both, before the registration: pairs with do_close()'s
	 * close count and its read of watched.  Either the closer sees this
	 * wait counted (and rings our doorbell), or we see its close in
	 * epoch, and then our registration is the number's next file's. */
	struct cbcmn__ep_closes *cl = e->rt->ep_closes;
	_Atomic uint32_t *slot = &cl->watched[(uint32_t)fd % CLOSE_SLOTS];
	atomic_fetch_add(slot, 1);
	w->epoch = atomic_load(&cl->seq);
	w->closed = false;
	w->stale = false;
	bool moved = false;
	if ((rc = fd_arm(ep, fd, want, kept || w->ready, &moved)) != 0) {
		atomic_fetch_sub_explicit(slot, 1, memory_order_relaxed);
		return rc;
	}
	/* The waits before this one watched a file that is gone from this
	 * number: a close ends them (the log's entry for it, or, if the log
	 * wrapped, close_sweep(), whose MOD now finds this file). */
	if (moved)
		fd_stale(&ep->fds[fd]);
	/* The first wait: the closes before it concern nobody here. */
	if (!ep->all)
		ep->close_seen = w->epoch;
	w->e = e;
	w->fprev = w->aprev = NULL;
	w->fnext = ep->fds[fd].head;
	if (w->fnext)
		w->fnext->fprev = w;
	ep->fds[fd].head = w;
	w->anext = ep->all;
	if (w->anext)
		w->anext->aprev = w;
	ep->all = w;
	if (!w->ready)
		e->ring.inflight++;
	return 0;
}

/* The wait was claimed (by cancellation or its timer): unlink it, then
 * wake its task, which may run elsewhere at once.  On w's executor's
 * thread: iwait.h's on_cancel for a local wait, and timer.c's hook. */
static void wait_end(struct cbcmn__iwait *iw)
{
	struct ep_wait *w = (struct ep_wait *)((char *)iw - offsetof(struct ep_wait, iw));
	struct cbcmn__exec *e = w->e;
	cbcmn__ep_unwatch(e->ep, w);
	cbcmn__iwait_wake(iw, e);
}

/* Readiness on fd: wake the waits it concerns (an error or a hang-up
 * concerns them all: they try again and see it) and run the emulated
 * requests it concerns.  A one-shot registration is re-armed for the
 * waits left.  A kept one (edge-triggered) stays armed, untouched in the
 * usual case; a MOD only when a request stopped before EAGAIN (the set
 * reports it again) or the event carried what nobody watched (narrowed to
 * what is still watched, disarmed if nothing is: an idle descriptor wakes
 * nobody twice). */
static void fd_ready(struct cbcmn__exec *e, int fd, uint32_t revents)
{
	struct cbcmn__ep *ep = e->ep;
	if ((uint32_t)fd >= ep->nfds)
		return;
	bool kept;
	uint32_t watched = fd_wanted(ep, fd, &kept);
	bool again = false;
	struct ep_wait *next;
	for (struct ep_wait *w = ep->fds[fd].head; w; w = next) {
		next = w->fnext;
		if (!(revents & (w->events | EPOLLERR | EPOLLHUP)))
			continue;
		if (w->ready) {
			again |= w->ready(e, w, revents); /* queues completions only */
			continue;
		}
		/* Always won: cancellation and timers claim on this thread
		 * and unlink in the same step. */
		if (cbcmn__iwait_claim(&w->iw)) {
			cbcmn__ep_unwatch(ep, w);
			cbcmn__iwait_wake(&w->iw, e);
		}
	}
	struct ep_fd *f = &ep->fds[fd];
	uint32_t rest = fd_wanted(ep, fd, &kept);
	if (!f->kept) {
		if (!rest) {
			f->mask = 0; /* fired: disarmed */
			return;
		}
	} else if (!f->added || !(again || (revents & f->mask & ~watched))) {
		return; /* the usual case for a stream: no system call */
	}
	bool moved = false;
	int err = fd_arm(ep, fd, rest, kept, &moved);
	/* Re-armed for the number's next file: those left watched the old
	 * one (a plain close(2) behind our back; docs/IO.md). */
	if (moved)
		fd_stale(f);
	if (err && rest) {
		/* Cannot re-arm (out of memory in the kernel, the watch limit,
		 * the descriptor closed): nothing would wake them.  A task's
		 * wait tries again and registers anew (or fails with the
		 * error); an emulated request ends with the error, which its
		 * stream or acceptor reports (an acceptor takes -ENOMEM as a
		 * failure that passes and arms again after a pause). */
		for (struct ep_wait *w = f->head; w; w = next) {
			next = w->fnext;
			if (w->ready) {
				cbcmn__ep_sq_fail(e, w, err);
			} else if (cbcmn__iwait_claim(&w->iw)) {
				cbcmn__ep_unwatch(ep, w);
				cbcmn__iwait_wake(&w->iw, e);
			}
		}
	}
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Lab mode: end the waits whose real-time deadline has come (-ETIMEDOUT).
 * O(such waits): lab runtimes are small. */
static void timed_expire(struct cbcmn__exec *e)
{
	uint64_t now = 0;
	struct ep_wait *next;
	for (struct ep_wait *w = e->ep->timed; w; w = next) {
		next = w->tnext;
		if (w->real_deadline <= (now ? now : (now = mono_ns())) &&
		    cbcmn__iwait_claim_as(&w->iw, CBCMN__IW_TIMEDOUT))
			wait_end(&w->iw);
	}
}

/* ns until the first of them, UINT64_MAX for none. */
static uint64_t timed_next(const struct cbcmn__ep *ep)
{
	uint64_t first = UINT64_MAX;
	for (const struct ep_wait *w = ep->timed; w; w = w->tnext)
		if (w->real_deadline < first)
			first = w->real_deadline;
	if (first == UINT64_MAX)
		return first;
	uint64_t now = mono_ns();
	return first > now ? first - now : 0;
}

/* End w, whose file was closed: a task's wait with -EBADF, nothing done;
 * an emulated request with its last completion, -EBADF. */
static void close_end(struct cbcmn__exec *e, struct ep_wait *w)
{
	if (w->ready) {
		cbcmn__ep_sq_fail(e, w, -EBADF);
	} else if (cbcmn__iwait_claim(&w->iw)) {
		cbcmn__ep_unwatch(e->ep, w);
		w->closed = true; /* released by the wake */
		cbcmn__iwait_wake(&w->iw, e);
	}
}

/* Is our registration under fd for the file fd names now?  Asked with a
 * MOD (which re-arms it: at worst a wake-up for nothing): ENOENT, the
 * number names another file; EBADF, none.  Any other failure: taken as
 * yes (the waits are left to their timeouts rather than ended wrongly). */
static bool reg_current(struct cbcmn__ep *ep, int fd)
{
	const struct ep_fd *f = &ep->fds[fd];
	struct epoll_event ev = {.events = arm_events(f->mask, f->kept), .data.u64 = (uint64_t)fd};
	return epoll_ctl(ep->epfd, EPOLL_CTL_MOD, fd, &ev) == 0 || (errno != ENOENT && errno != EBADF);
}

/* The descriptor fd was closed with close number s: end the waits on it
 * that began before (a task's: -EBADF, nothing done; an emulated request:
 * its last completion, -EBADF).  Those that began after watch the number's
 * next file.  "Before" is not the epoch alone: the closer counts its
 * close after close(2) returned, and the number may have gone to a new
 * file meanwhile, which a wait of epoch < s registered (a wait on a pipe
 * just made ended with -EBADF).  So a wait that is not stale ends only if
 * our registration is not the number's present file's (reg_current(): a
 * wait registered for the old file, whose registration went with it or
 * stays under a file the number no longer names). */
static void close_fd(struct cbcmn__exec *e, int fd, uint64_t s)
{
	struct cbcmn__ep *ep = e->ep;
	if (fd < 0 || (uint32_t)fd >= ep->nfds)
		return;
	int current = -1; /* not asked yet */
	struct ep_wait *next;
	for (struct ep_wait *w = ep->fds[fd].head; w; w = next) {
		next = w->fnext;
		if (w->epoch >= s)
			continue;
		if (!w->stale && current < 0)
			current = reg_current(ep, fd);
		if (w->stale || !current)
			close_end(e, w);
	}
	/* The registration went with the file (or stays for a copy open
	 * elsewhere: its events then only wake a later wait for nothing). */
	if (!ep->fds[fd].head)
		ep->fds[fd].added = false;
}

/* The log's entries were overwritten before this set read them: which
 * descriptors were closed is lost.  Ask the kernel about each watched one
 * (O(waits)): a registration the MOD no longer finds (ENOENT: the number
 * names another file; EBADF: none) went with its file.  A stale wait went
 * with its file too, though the MOD finds the registration: a later wait
 * here made it anew for the number's next file (cbcmn__ep_watch()). */
static void close_sweep(struct cbcmn__exec *e, uint64_t s)
{
	struct cbcmn__ep *ep = e->ep;
	for (struct ep_wait *w = ep->all, *next; w; w = next) {
		next = w->anext;
		if (w->epoch >= s)
			continue;
		if (w->stale) {
			close_end(e, w); /* off the list: each pass ends one */
			next = ep->all;
			continue;
		}
		if (!reg_current(ep, w->fd)) {
			/* next may be ended with it: start again (each pass
			 * ends at least one wait). */
			close_fd(e, w->fd, s);
			next = ep->all;
		}
	}
}

/* Apply the runtime's closes this set has not seen (at each look at the
 * set, before its events: a late event of a closed file wakes nobody). */
static void close_apply(struct cbcmn__exec *e)
{
	struct cbcmn__ep *ep = e->ep;
	struct cbcmn__ep_closes *cl = e->rt->ep_closes;
	/* seq_cst: pairs with do_close()'s count, and with its store of the
	 * entry and load of seq after it (a plain load on x86 and arm64). */
	uint64_t cur = atomic_load(&cl->seq);
	if (cur == ep->close_seen)
		return; /* the usual case: one load */
	if (!ep->all) {
		ep->close_seen = cur; /* nothing waits: nothing to end */
		return;
	}
	for (uint64_t s = ep->close_seen + 1; s <= cur; s++) {
		/* seq_cst: pairs with do_close()'s store of the entry and its
		 * load of seq after it (we read seq first). */
		uint64_t v = atomic_load(&cl->log[s % CLOSE_LOG]);
		if ((uint32_t)(v >> 32) == (uint32_t)s) {
			close_fd(e, (int)(uint32_t)v, s);
			continue;
		}
		if (atomic_load(&cl->seq) < s + CLOSE_LOG) {
			/* Its closer has not written it yet: at the next look
			 * (it rings us then: it sees a later close in seq). */
			ep->close_seen = s - 1;
			return;
		}
		/* Overwritten: everything up to here, the hard way. */
		close_sweep(e, atomic_load(&cl->seq) + 1);
		ep->close_seen = cur;
		return;
	}
	ep->close_seen = cur;
}

/* Raw system calls in the loop: read(2) and epoll_wait(2) are cancellation
 * points, and an executor thread must not end half-way there (ring.c,
 * cbcmn__efd_ring()). */
static void dispatch(struct cbcmn__exec *e, const struct epoll_event *ev, int n)
{
	struct cbcmn__ep *ep = e->ep;
	close_apply(e);
	for (int i = 0; i < n; i++) {
		uint64_t v;
		if (ev[i].data.u64 == TAG_EFD) {
			if (syscall(SYS_read, e->ring.efd, &v, sizeof(v)) == (long)sizeof(v))
				CBCMN__COUNT(e, doorbells_recv, 1);
		} else if (ev[i].data.u64 == TAG_TFD) {
			(void)syscall(SYS_read, ep->tfd, &v, sizeof(v));
		} else {
			fd_ready(e, (int)ev[i].data.u64, ev[i].events);
		}
	}
	ep->turns = 0;
	ep->look_ns = e->rt->lab ? 0 : look_clock();
	if (ep->timed)
		timed_expire(e);
	cbcmn__ep_sq_run(e);
}

void cbcmn__ep_poll(struct cbcmn__exec *e, bool idle)
{
	struct cbcmn__ep *ep = e->ep;
	if (!ep->all || (!idle && ep->turns < BATCH_TURNS)) {
		cbcmn__ep_sq_run(e); /* SQEs queued, completions to hand out */
		return;
	}
	struct epoll_event ev[NEVENTS];
	long n = syscall(SYS_epoll_pwait, ep->epfd, ev, NEVENTS, 0, NULL, (size_t)8);
	CBCMN__COUNT(e, ring_enters, 1);
	dispatch(e, ev, n > 0 ? (int)n : 0);
}

/* A wait of timeout_ns without epoll_pwait2: a timerfd in the set. */
static long wait_timerfd(struct cbcmn__ep *ep, struct epoll_event *ev, uint64_t timeout_ns)
{
	if (timeout_ns && ep->tfd < 0) {
		int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		struct epoll_event tev = {.events = EPOLLIN, .data.u64 = TAG_TFD};
		if (fd >= 0 && epoll_ctl(ep->epfd, EPOLL_CTL_ADD, fd, &tev) == 0) {
			ep->tfd = fd;
		} else if (fd >= 0) {
			close(fd);
		}
	}
	int ms = -1;
	if (timeout_ns && ep->tfd >= 0) {
		struct itimerspec its = {.it_value = {(time_t)(timeout_ns / 1000000000u),
						      (long)(timeout_ns % 1000000000u)}};
		timerfd_settime(ep->tfd, 0, &its, NULL);
	} else if (timeout_ns) {
		/* No timerfd either: whole ms, rounded up (never early). */
		uint64_t m = (timeout_ns + 999999u) / 1000000u;
		ms = m > INT32_MAX ? INT32_MAX : (int)m;
	}
	return syscall(SYS_epoll_pwait, ep->epfd, ev, NEVENTS, ms, NULL, (size_t)8);
}

void cbcmn__ep_wait(struct cbcmn__exec *e, uint64_t timeout_ns)
{
	struct cbcmn__ep *ep = e->ep;
	struct epoll_event ev[NEVENTS];
	long n = -1;
	/* Emulated SQEs queued or completions waiting: look, do not sleep;
	 * an emulated timeout (stream.c's pauses) is a deadline too. */
	if (cbcmn__ep_sq_busy(ep))
		timeout_ns = 1;
	uint64_t sq_ns = cbcmn__ep_sq_next(ep), t_ns = ep->timed ? timed_next(ep) : UINT64_MAX;
	if (t_ns < sq_ns)
		sq_ns = t_ns;
	if (sq_ns != UINT64_MAX && (timeout_ns == 0 || sq_ns < timeout_ns))
		timeout_ns = sq_ns ? sq_ns : 1;
	errno = ENOSYS;
	if (!ep->no_pwait2) {
		struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
		n = syscall(SYS_epoll_pwait2, ep->epfd, ev, NEVENTS, timeout_ns ? &ts : NULL, NULL,
			    (size_t)8);
		if (n < 0 && errno == ENOSYS)
			ep->no_pwait2 = true; /* before 5.11 */
	}
	if (ep->no_pwait2)
		n = wait_timerfd(ep, ev, timeout_ns);
	CBCMN__COUNT(e, ring_enters, 1);
	dispatch(e, ev, n > 0 ? (int)n : 0);
}

/* A task's wait ended by cancellation, claimed (its iwait's local_end,
 * iwait.h): on e's thread, as every end of it. */
static bool wait_cancel_end(struct cbcmn__exec *e, struct cbcmn__iwait *iw)
{
	(void)e;
	wait_end(iw);
	return false;
}

/* ---- task side -------------------------------------------------------------- */

/* Park t until fd is ready for `events`, or its deadline (cbcmn__now; in
 * lab mode CLOCK_MONOTONIC, a timed_expire() wait), or its cancellation.  0 when ready (or possibly ready: try again),
 * CBCMN_ECANCELED, -ETIMEDOUT, -EPERM where epoll cannot watch fd (a
 * regular file), another epoll_ctl error (-EBADF), -ENOMEM. */
static int wait_fd(struct cbcmn_task *t, int fd, uint32_t events, uint64_t deadline)
{
	struct cbcmn__exec *e = t->exec;
	struct ep_wait w = {.fd = fd, .events = events};
	int rc = cbcmn__ep_watch(e, &w);
	if (rc)
		return rc;
	cbcmn__iwait_init(&w.iw, t);
	w.iw.on_cancel = wait_end;
	w.iw.on_timeout = wait_end;
	w.iw.local = true;
	w.iw.local_end = wait_cancel_end;
	struct cbcmn__timer *tm = NULL;
	if (deadline != UINT64_MAX && t->rt->lab) {
		struct cbcmn__ep *ep = e->ep;
		w.real_deadline = deadline ? deadline : 1;
		w.tnext = ep->timed;
		if (w.tnext)
			w.tnext->tprev = &w;
		ep->timed = &w;
	} else if (deadline != UINT64_MAX && !(tm = cbcmn__timer_arm(e, deadline, &w.iw))) {
		cbcmn__ep_unwatch(e->ep, &w);
		atomic_store_explicit(&t->state, CBCMN__T_RUNNING, memory_order_relaxed);
		return -ENOMEM;
	}
	uint32_t how = cbcmn__iwait_block(&w.iw);
	if (tm)
		cbcmn__timer_disarm(tm);
	if (how == CBCMN__IW_WOKEN)
		return w.closed ? -EBADF : 0;
	return how == CBCMN__IW_CANCELLED ? CBCMN_ECANCELED : -ETIMEDOUT;
}

/* One call in progress: what it has done so far (MSG_WAITALL, a regular
 * file's remainder) and how to go on. */
struct call {
	const struct io_uring_sqe *sqe;
	size_t done;                     /* bytes moved so far */
	bool plain;                      /* no RWF_NOWAIT: fd (or alt) is O_NONBLOCK itself */
	bool reopened;                   /* alt was tried */
	int alt;                         /* a private O_NONBLOCK description of fd, or -1 */
	bool pool;                       /* in the blocking pool: may block */
	size_t ctl_len;                  /* recvmsg: the caller's msg_controllen, before */
};

static int64_t sys(long rc)
{
	return rc < 0 ? -errno : rc;
}

/* iov advanced by `skip` bytes, in *out: iov itself when skip is 0, else a
 * copy (malloc'd when it has more than one entry: *out != one).  The count,
 * or -ENOMEM. */
static int iov_skip(const struct iovec *iov, int cnt, size_t skip, struct iovec *one,
		    const struct iovec **out)
{
	if (skip == 0) {
		*out = iov; /* the usual case: nothing done yet */
		return cnt;
	}
	while (cnt > 0 && skip >= iov->iov_len) {
		skip -= iov->iov_len;
		iov++;
		cnt--;
	}
	struct iovec *v = cnt > 1 ? malloc((size_t)cnt * sizeof(*v)) : one;
	if (!v)
		return -ENOMEM;
	if (cnt > 0) {
		memcpy(v, iov, (size_t)cnt * sizeof(*v));
		v[0].iov_base = (char *)v[0].iov_base + skip;
		v[0].iov_len -= skip;
	}
	*out = v;
	return cnt;
}

static size_t iov_total(const struct iovec *iov, size_t cnt)
{
	size_t n = 0;
	for (size_t i = 0; i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

/* recvmsg/sendmsg from where c->done left off (MSG_WAITALL part-way, as
 * io_uring goes on): the rest of the iovec.  A send's ancillary data went
 * with its first part; a receive goes on only while none came (the
 * kernel's MSG_WAITALL stops at it), so the caller's control buffer is
 * still whole, and its msg_controllen and msg_flags say what the last
 * part got. */
static int64_t msg_call(struct call *c, int fl, bool snd)
{
	const struct io_uring_sqe *sqe = c->sqe;
	struct msghdr *um = (struct msghdr *)(uintptr_t)sqe->addr;
	if (c->done == 0)
		return snd ? sys(sendmsg(sqe->fd, um, fl)) : sys(recvmsg(sqe->fd, um, fl));
	struct msghdr m = *um;
	struct iovec one;
	const struct iovec *iov;
	int cnt = iov_skip(um->msg_iov, (int)um->msg_iovlen, c->done, &one, &iov);
	if (cnt < 0)
		return cnt;
	m.msg_iov = (struct iovec *)(uintptr_t)iov;
	m.msg_iovlen = (size_t)cnt;
	m.msg_name = NULL;
	m.msg_namelen = 0;
	m.msg_control = snd ? NULL : um->msg_control;
	m.msg_controllen = snd ? 0 : c->ctl_len;
	int64_t rc = snd ? sys(sendmsg(sqe->fd, &m, fl)) : sys(recvmsg(sqe->fd, &m, fl));
	if (!snd && rc >= 0) {
		um->msg_controllen = m.msg_controllen;
		um->msg_flags = m.msg_flags;
	}
	if (iov != &one)
		free((void *)(uintptr_t)iov);
	return rc;
}

/* MSG_WAITALL goes on after a short transfer on stream sockets only, as
 * io_uring's retry (and recv(2)): a datagram is a whole message. */
static bool stream_socket(int fd)
{
	int type = 0;
	socklen_t len = sizeof(type);
	return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
	       (type == SOCK_STREAM || type == SOCK_SEQPACKET);
}

/* read, write, readv, writev, pread, pwrite: preadv2/pwritev2 from where
 * c->done left off.  RWF_NOWAIT makes one attempt non-blocking without the
 * descriptor's O_NONBLOCK (sockets, pipes, eventfds; a regular file reads
 * what is cached); in the pool, or on a descriptor that is O_NONBLOCK
 * itself, the plain call. */
static int64_t rw(struct call *c)
{
	const struct io_uring_sqe *sqe = c->sqe;
	bool wr = sqe->opcode == IORING_OP_WRITE || sqe->opcode == IORING_OP_WRITEV;
	bool vec = sqe->opcode == IORING_OP_READV || sqe->opcode == IORING_OP_WRITEV;
	struct iovec one = {(void *)(uintptr_t)sqe->addr, sqe->len};
	const struct iovec *iov = &one, *user = (const struct iovec *)(uintptr_t)sqe->addr;
	int cnt = 1;
	if (vec) {
		cnt = iov_skip(user, (int)sqe->len, c->done, &one, &iov);
		if (cnt < 0)
			return cnt;
	} else {
		one.iov_base = (char *)one.iov_base + c->done;
		one.iov_len -= c->done;
	}
	off_t off = sqe->off == (uint64_t)-1 ? -1 : (off_t)(sqe->off + c->done);
	int fl = c->pool || c->plain ? 0 : RWF_NOWAIT;
	int fd = c->alt >= 0 ? c->alt : sqe->fd;
	int64_t rc;
	for (;;) {
		rc = wr ? sys(pwritev2(fd, iov, cnt, off, fl)) : sys(preadv2(fd, iov, cnt, off, fl));
		/* A file that cannot seek: the offset is ignored, as io_uring
		 * does (io.c). */
		if (rc != -ESPIPE || off == -1)
			break;
		off = -1;
	}
	if (vec && iov != &one && iov != user)
		free((void *)iov);
	return rc;
}

/* The blocking pool's side: the call, blocking (epoll_pool.c interrupts it
 * with a signal: -EINTR). */
static int64_t pool_fn(void *arg)
{
	struct call *c = arg;
	const struct io_uring_sqe *sqe = c->sqe;
	switch (sqe->opcode) {
	case IORING_OP_OPENAT:
		return sys(openat(sqe->fd, (const char *)(uintptr_t)sqe->addr, (int)sqe->open_flags,
				  (mode_t)sqe->len));
	case IORING_OP_STATX:
		return sys(statx(sqe->fd, (const char *)(uintptr_t)sqe->addr, (int)sqe->statx_flags,
				 sqe->len, (struct statx *)(uintptr_t)sqe->off));
	case IORING_OP_FSYNC:
		return sys(sqe->fsync_flags & IORING_FSYNC_DATASYNC ? fdatasync(sqe->fd) : fsync(sqe->fd));
	default:
		return rw(c);
	}
}

/* Run the rest of c in the blocking pool, until deadline or the task's
 * cancellation, which interrupt it (epoll_pool.c).  What it did is the
 * result, even when the task was cancelled meanwhile; CBCMN_ECANCELED or
 * -ETIMEDOUT only if it did not happen. */
static int64_t pool_call(struct cbcmn_task *t, struct call *c, uint64_t deadline)
{
	bool ran;
	c->pool = true;
	return cbcmn__ep_pool_call(t, pool_fn, c, deadline, &ran);
}

/* Set a listening socket O_NONBLOCK for good (docs/IO.md): accept4(2) has
 * no per-call flag, and a wait for readiness followed by a blocking accept
 * would block the executor whenever another task or thread took the
 * connection first. */
int cbcmn__ep_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -errno;
	if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* One non-blocking attempt at c.  -EAGAIN with *events: wait for them. */
static int64_t attempt(struct call *c, uint32_t *events)
{
	const struct io_uring_sqe *sqe = c->sqe;
	int fd = sqe->fd;
	int fl = (int)sqe->msg_flags | MSG_DONTWAIT;
	void *buf = (char *)(uintptr_t)sqe->addr + c->done;
	*events = EPOLLIN;
	switch (sqe->opcode) {
	case IORING_OP_WRITE:
	case IORING_OP_WRITEV:
		*events = EPOLLOUT;
		/* fall through */
	case IORING_OP_READ:
	case IORING_OP_READV:
		return rw(c);
	case IORING_OP_RECV:
		return sys(recv(fd, buf, sqe->len - c->done, fl));
	case IORING_OP_SEND:
		*events = EPOLLOUT;
		/* io_uring's sends never raise SIGPIPE (it adds MSG_NOSIGNAL):
		 * a peer gone is -EPIPE, not the process killed. */
		return sys(send(fd, buf, sqe->len - c->done, fl | MSG_NOSIGNAL));
	case IORING_OP_RECVMSG:
		return msg_call(c, fl, false);
	case IORING_OP_SENDMSG:
		*events = EPOLLOUT;
		return msg_call(c, fl | MSG_NOSIGNAL, true);
	case IORING_OP_ACCEPT: {
		int rc = cbcmn__ep_nonblock(fd);
		if (rc)
			return rc;
		return sys(accept4(fd, (struct sockaddr *)(uintptr_t)sqe->addr,
				   (socklen_t *)(uintptr_t)sqe->off, (int)sqe->accept_flags));
	}
	case IORING_OP_SHUTDOWN:
		return sys(shutdown(fd, (int)sqe->len));
	default:
		return -EINVAL;
	}
}

/* connect(2) without blocking the executor: O_NONBLOCK for the connect
 * call alone (a connection is set up by one task; docs/IO.md), then wait
 * for writability and read the outcome (SO_ERROR).  Cancelled or timed
 * out while connecting: CBCMN_ECANCELED / -ETIMEDOUT, and the kernel may
 * still connect, as after a connect(2) a signal interrupted (cbcmn_io.h). */
static int64_t do_connect(struct cbcmn_task *t, const struct io_uring_sqe *sqe, uint64_t deadline)
{
	int fd = sqe->fd;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -errno;
	if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	int64_t rc = sys(connect(fd, (const struct sockaddr *)(uintptr_t)sqe->addr, (socklen_t)sqe->off));
	if (!(fl & O_NONBLOCK))
		(void)fcntl(fd, F_SETFL, fl);
	/* A Unix socket whose listener's backlog is full: EAGAIN, and it
	 * needs another connect once there is room. */
	while (rc == -EAGAIN) {
		if ((rc = wait_fd(t, fd, EPOLLOUT, deadline)) != 0)
			return rc;
		if (cbcmn__task_cancelled(t))
			return CBCMN_ECANCELED;
		rc = sys(connect(fd, (const struct sockaddr *)(uintptr_t)sqe->addr, (socklen_t)sqe->off));
	}
	if (rc != -EINPROGRESS)
		return rc;
	if ((rc = wait_fd(t, fd, EPOLLOUT, deadline)) != 0) {
		/* Cancelled or timed out: unless it connected (or failed)
		 * meanwhile, which is then its result. */
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		if (poll(&p, 1, 0) != 1)
			return rc;
	}
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -errno;
	return -err;
}

/* close: never undone.  Our registration of fd goes first (the number may
 * be reused at once); other executors' sets drop it with the file.  Then
 * every wait on fd that began before ends with -EBADF: ours at once,
 * other executors' at their next look at their sets, which this rings
 * when any waits on fd (docs/IO.md, "Backends"). */
/* fd is about to be closed and something waits on its slot (slot != 0),
 * maybe in another executor's set: remove fd's registration from the other
 * sets too, while the number still names the file.  Once it is closed, a
 * registration of a file that lives on elsewhere (a dup, a child's) can no
 * longer be removed by number, and a stream's, edge-triggered and kept
 * armed, would wake that executor at every edge of the file for as long as
 * it lives.  The other executor learns of it from the close (close_apply():
 * its MOD no longer finds the registration, and its waits end); a set
 * without one says ENOENT.  epoll_ctl() on another thread's set is safe:
 * the kernel locks it.  A watch that races the close (its count after our
 * look) arms only after the close(2) (fd_ctl()): a program that closes a
 * descriptor in use elsewhere has its waits end with -EBADF, no more. */
static void unregister_elsewhere(struct cbcmn__exec *e, int fd, _Atomic uint32_t *slot)
{
	/* seq_cst: pairs with cbcmn__ep_watch()'s count. */
	if (atomic_load(slot) == 0)
		return; /* the usual case: nobody waits on it (nor on its slot) */
	struct cbcmn_runtime *rt = e->rt;
	for (uint32_t i = 0; i < rt->nexec; i++)
		if (rt->exec[i] != e && rt->exec[i]->ep)
			(void)epoll_ctl(rt->exec[i]->ep->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static int64_t do_close(struct cbcmn__exec *e, int fd)
{
	struct cbcmn__ep *ep = e->ep;
	struct cbcmn__ep_closes *cl = e->rt->ep_closes;
	/* No set arms fd from our look at its watchers to its close (fd_ctl()). */
	if (fd >= 0)
		close_enter(cl, (uint32_t)fd % CLOSE_SLOTS, (uint32_t)fd + 1);
	if (fd >= 0 && (uint32_t)fd < ep->nfds && ep->fds[fd].added) {
		(void)epoll_ctl(ep->epfd, EPOLL_CTL_DEL, fd, NULL);
		ep->fds[fd].added = false;
	}
	if (fd >= 0)
		unregister_elsewhere(e, fd, &cl->watched[(uint32_t)fd % CLOSE_SLOTS]);
	int64_t rc = sys(close(fd));
	if (fd >= 0)
		close_leave(cl, (uint32_t)fd % CLOSE_SLOTS);
	if (rc == -EBADF || fd < 0)
		return rc; /* nothing was closed (any other error closed it) */
	/* seq_cst: pairs with cbcmn__ep_watch()'s (see there). */
	uint64_t s = atomic_fetch_add(&cl->seq, 1) + 1;
	/* One word (the close's number's low half, fd): close_apply() reads
	 * it whole.  seq_cst, with the load of seq after it: pairs with
	 * close_apply()'s load of seq, then of the entry.  A set that read
	 * seq past s before this store stopped at s (not written yet) and
	 * left the later closes, whose rings it has had, for its next look:
	 * then this load sees those closes, and we ring every set. */
	atomic_store(&cl->log[s % CLOSE_LOG], (s << 32) | (uint32_t)fd);
	bool later = atomic_load(&cl->seq) != s;
	_Atomic uint32_t *slot = &cl->watched[(uint32_t)fd % CLOSE_SLOTS];
	if (!later && atomic_load(slot) == 0)
		return rc; /* the usual case: nobody waits on it (nor on its slot) */
	close_fd(e, fd, s);
	if (!later && atomic_load(slot) == 0)
		return rc; /* they were ours */
	struct cbcmn_runtime *rt = e->rt;
	for (uint32_t i = 0; i < rt->nexec; i++)
		if (rt->exec[i] != e && rt->exec[i]->ep)
			cbcmn__efd_ring(rt->exec[i]);
	return rc;
}

int64_t cbcmn__ep_poll_now(int fd, uint32_t events)
{
	if (fd < 0)
		return -EBADF; /* poll(2) would skip it, and report nothing */
	struct pollfd p = {.fd = fd, .events = (short)events};
	int n;
	while ((n = poll(&p, 1, 0)) < 0 && errno == EINTR)
		;
	if (n < 0)
		return -errno; /* -ENOMEM */
	if (n == 0)
		return 0;
	return p.revents & POLLNVAL ? -EBADF : (int64_t)(uint16_t)p.revents;
}

/* cbcmn_poll(): readiness is looked at with poll(2), as a ring's POLL_ADD
 * looks at once, and waited for in the set.  A wait ended by readiness
 * reports what poll(2) then finds, even if the task was cancelled
 * meanwhile: the poll happened, as a POLL_ADD that completed before its
 * cancel.  A wake-up that finds nothing (another reader took it, or the
 * readiness was for another wait's events) waits again, or returns
 * CBCMN_ECANCELED if the task is cancelled by then.  A file epoll cannot
 * watch (a regular file) that poll(2) finds not ready for `events` (only
 * POLLPRI asked) never will be: -EINVAL, as io_uring says. */
static int64_t do_poll(struct cbcmn_task *t, const struct io_uring_sqe *sqe, uint64_t deadline)
{
	int fd = sqe->fd;
	uint32_t events = sqe->poll32_events;
	for (;;) {
		int64_t rc = cbcmn__ep_poll_now(fd, events);
		if (rc)
			return rc;
		if (cbcmn__task_cancelled(t))
			return CBCMN_ECANCELED;
		rc = wait_fd(t, fd, events, deadline);
		if (rc == -EPERM)
			return -EINVAL;
		if (rc)
			return rc; /* cancelled, timed out, closed (-EBADF), -ENOMEM */
	}
}

/* A private non-blocking description of the pipe (or FIFO) fd names, for a
 * kernel that refuses RWF_NOWAIT on pipes (before 6.2): O_NONBLOCK is its
 * own, the caller's description and flags are untouched.  Opened through
 * /proc/thread-self/fd (this thread's descriptor table, as the call's),
 * which opens the file anew: only a FIFO, where that is surely the same
 * pipe and has no side effect (a character device's open may make another
 * instance, /dev/ptmx, /dev/net/tun, or take a controlling tty).  It lives
 * for one call: one kept would be one more reader (writer) of the pipe and
 * hold back its other end's EPIPE (EOF) after the caller's close(2).  -1
 * when it cannot: not a FIFO, no /proc, EACCES, a write with no reader
 * (ENXIO; the call then fails with EPIPE anyway). */
static int reopen_fifo(int fd, int fl, bool wr)
{
	/* Never more than fd's own access: a read of a write end stays the
	 * kernel's EBADF (the pool's call says so). */
	int acc = fl & O_ACCMODE;
	if (acc != O_RDWR && acc != (wr ? O_WRONLY : O_RDONLY))
		return -1;
	struct stat st, alt_st;
	if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode))
		return -1;
	char path[40];
	snprintf(path, sizeof(path), "/proc/thread-self/fd/%d", fd);
	int alt = open(path, (wr ? O_WRONLY : O_RDONLY) | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (alt < 0)
		return -1;
	/* The number closed and reused meanwhile: not what fd was. */
	if (fstat(alt, &alt_st) != 0 || alt_st.st_dev != st.st_dev || alt_st.st_ino != st.st_ino) {
		close(alt);
		return -1;
	}
	return alt;
}

/* c (a read or write of a file without RWF_NOWAIT, not O_NONBLOCK, that
 * reopen_fifo() could not serve) after readiness in the pool, where it may
 * block if another reader (writer) took what was ready: then it is
 * interrupted after SLICE_NS and waits for readiness again, so that such
 * calls never hold the pool's threads against the one that would make
 * them ready (a writer's call queued behind readers blocked on an empty
 * pipe).  Without the pool's interrupt (the program owns its signal) or in
 * lab mode, the call blocks in the pool until done (docs/IO.md). */
#define SLICE_NS 2000000ull

static int64_t sliced_pool(struct cbcmn_task *t, struct call *c, uint32_t events, uint64_t deadline)
{
	bool sliced = !t->rt->lab && cbcmn__ep_pool_interruptible();
	for (;;) {
		int64_t rc = wait_fd(t, c->sqe->fd, events, deadline);
		if (rc == 0 && cbcmn__task_cancelled(t))
			rc = CBCMN_ECANCELED;
		if (rc && rc != -EPERM)
			return rc;
		if (!sliced || rc == -EPERM)
			return pool_call(t, c, deadline);
		uint64_t now = cbcmn__now(t->rt);
		uint64_t end = deadline > now && deadline - now > SLICE_NS ? now + SLICE_NS : deadline;
		bool ran;
		c->pool = true;
		rc = cbcmn__ep_pool_call(t, pool_fn, c, end, &ran);
		if (ran || rc != -ETIMEDOUT || end == deadline)
			return rc;
	}
}

/* The rest of cbcmn__ep_io(): a call that may wait for readiness. */
static int64_t io_loop(struct cbcmn_task *t, struct call *c, uint64_t deadline)
{
	const struct io_uring_sqe *sqe = c->sqe;
	bool msg = sqe->opcode == IORING_OP_RECVMSG || sqe->opcode == IORING_OP_SENDMSG;
	bool waitall = (sqe->opcode == IORING_OP_RECV || sqe->opcode == IORING_OP_SEND || msg) &&
		       (sqe->msg_flags & MSG_WAITALL);
	size_t total = sqe->len; /* what MSG_WAITALL waits for */
	if (msg) {
		const struct msghdr *m = (const struct msghdr *)(uintptr_t)sqe->addr;
		total = iov_total(m->msg_iov, m->msg_iovlen);
		c->ctl_len = m->msg_controllen;
	}
	bool rwop = sqe->opcode == IORING_OP_READ || sqe->opcode == IORING_OP_WRITE ||
		    sqe->opcode == IORING_OP_READV || sqe->opcode == IORING_OP_WRITEV;
	for (;;) {
		uint32_t events;
		int64_t rc = attempt(c, &events);
		if (rc == -EINTR)
			continue; /* a signal on this thread: a ring would not say so either */
		if (rc == -EOPNOTSUPP && rwop && !c->plain) {
			/* No RWF_NOWAIT for this file (a pipe before 6.2, a
			 * tty, an eventfd, inotify): the plain call if it is
			 * O_NONBLOCK itself, or on a private O_NONBLOCK
			 * description of a pipe; else readiness, then the call
			 * in the pool for a slice at a time. */
			int fl = fcntl(sqe->fd, F_GETFL);
			if (fl >= 0 && (fl & O_NONBLOCK)) {
				c->plain = true;
				continue;
			}
			if (fl >= 0 && !c->reopened) {
				c->reopened = true;
				if ((c->alt = reopen_fifo(sqe->fd, fl, events == EPOLLOUT)) >= 0) {
					c->plain = true;
					continue;
				}
			}
			return sliced_pool(t, c, events, deadline);
		}
		if (rc > 0 && waitall && c->done + (size_t)rc < total && stream_socket(sqe->fd) &&
		    !(sqe->opcode == IORING_OP_RECVMSG &&
		      ((const struct msghdr *)(uintptr_t)sqe->addr)->msg_controllen)) {
			c->done += (size_t)rc; /* MSG_WAITALL: all of it, as io_uring does */
			rc = -EAGAIN;
		} else if (rc > 0 && rwop && !c->plain) {
			/* A regular file reads (writes) what RWF_NOWAIT can
			 * without blocking; read(2) would go on: the rest in
			 * the pool. */
			struct stat st;
			size_t want = sqe->len;
			if (sqe->opcode == IORING_OP_READV || sqe->opcode == IORING_OP_WRITEV)
				want = iov_total((const struct iovec *)(uintptr_t)sqe->addr, sqe->len);
			if (c->done + (size_t)rc < want && fstat(sqe->fd, &st) == 0 &&
			    (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))) {
				c->done += (size_t)rc;
				/* A read that reached the end of a regular file
				 * is done (the usual short read of a small file:
				 * no trip to the pool). */
				bool rd = sqe->opcode == IORING_OP_READ || sqe->opcode == IORING_OP_READV;
				off_t pos = sqe->off == (uint64_t)-1 ? lseek(sqe->fd, 0, SEEK_CUR)
								     : (off_t)(sqe->off + c->done);
				if (rd && S_ISREG(st.st_mode) && pos >= st.st_size)
					return (int64_t)c->done;
				int64_t more = pool_call(t, c, deadline);
				return more < 0 ? (int64_t)c->done : (int64_t)c->done + more;
			}
		}
		if (rc != -EAGAIN || (sqe->msg_flags & MSG_DONTWAIT && !rwop))
			return rc >= 0 ? rc + (int64_t)c->done : c->done ? (int64_t)c->done : rc;
		rc = wait_fd(t, sqe->fd, events, deadline);
		if (rc == -EPERM) /* a regular file not in the page cache */
			return c->done ? (int64_t)c->done : pool_call(t, c, deadline);
		if (rc == 0 && cbcmn__task_cancelled(t))
			rc = CBCMN_ECANCELED; /* ready, but not tried: nothing happened */
		if (rc)
			return c->done ? (int64_t)c->done : rc;
	}
}

int64_t cbcmn__ep_io(struct cbcmn_task *t, const struct io_uring_sqe *sqe, uint64_t timeout_ns)
{
	struct call c = {.sqe = sqe, .alt = -1};
	uint64_t deadline = UINT64_MAX;
	if (timeout_ns) {
		/* In lab mode in real time, as a ring's linked timeout. */
		uint64_t now = t->rt->lab ? mono_ns() : cbcmn__now(t->rt);
		deadline = timeout_ns > UINT64_MAX - 1 - now ? UINT64_MAX - 1 : now + timeout_ns;
	}
	switch (sqe->opcode) {
	case IORING_OP_CLOSE:
		return do_close(t->exec, sqe->fd);
	case IORING_OP_CONNECT:
		return do_connect(t, sqe, deadline);
	case IORING_OP_POLL_ADD:
		return do_poll(t, sqe, deadline);
	case IORING_OP_OPENAT: /* a FIFO's open, a slow disk: may block */
	case IORING_OP_STATX:
	case IORING_OP_FSYNC:
		return pool_call(t, &c, deadline);
	default:
		break;
	}
	int64_t rc = io_loop(t, &c, deadline);
	if (c.alt >= 0)
		close(c.alt);
	return rc;
}
