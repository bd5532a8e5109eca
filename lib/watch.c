/* watch.c: the statistics segment (statseg.h): made and freed with the
 * runtime, read by cbcmn_stats_snapshot() in the process and by
 * cbcmn_watch_read() from another one. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <numaif.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "runtime.h"

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* rt_id took the hole before start_ns: version 2's layout is unchanged. */
_Static_assert(offsetof(struct cbcmn__seg_hdr, start_ns) == 40 &&
		       offsetof(struct cbcmn__seg_hdr, rt_id) == 36,
	       "the segment header's layout moved");
/* The stall fields went in what was padding: a slot keeps its size, and
 * readers of version 3 from before them read the segment as before. */
_Static_assert(offsetof(struct cbcmn__seg_exec, mbox) == 640, "the segment slot's size moved");

static size_t round_up(size_t n, size_t to)
{
	return (n + to - 1) / to * to;
}

int cbcmn__memfd_sealed(const char *name, size_t size)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && size > rl.rlim_cur)
		return -EFBIG;
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, CBCMN__SEG_SEALS) != 0) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int cbcmn__seg_create(struct cbcmn_runtime *rt, uint32_t nexec, const int32_t *node)
{
	struct cbcmn__seg *s = &rt->seg;
	size_t page = rt->page;
	size_t stride = round_up(sizeof(struct cbcmn__seg_exec), page);
	size_t off = round_up(sizeof(struct cbcmn__seg_hdr), page);
	s->size = off + stride * nexec;
	/* A memfd, so that a watcher can map the same pages; anonymous
	 * shared memory where memfds are refused (the runtime works the
	 * same, it just cannot be watched).  Sealed at its final size before
	 * it is mapped, so no one (a bug here included) can shrink it under
	 * a watcher's mapping, whose reads past the end would be SIGBUS:
	 * watchers refuse unsealed segments. */
	s->fd = cbcmn__memfd_sealed(CBCMN__SEG_NAME, s->size);
	void *p = MAP_FAILED;
	if (s->fd >= 0)
		p = cbcmn__mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
	if (p == MAP_FAILED) {
		if (s->fd >= 0)
			close(s->fd);
		s->fd = -1;
		p = cbcmn__mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return -ENOMEM;
	}
	s->hdr = p;
	s->nexec = nexec;
	s->stride = (uint32_t)stride;
	s->slots_off = (uint32_t)off;
	s->pid = (int32_t)getpid();
	s->start_ns = mono_ns();
	/* The probes' runtime id: 1, 2, ... in this process, never 0
	 * ("unknown" to a reader of an older segment).  Relaxed: only
	 * uniqueness among the runtimes alive at once matters. */
	static _Atomic uint32_t next_rt_id;
	uint32_t id;
	do
		id = atomic_fetch_add_explicit(&next_rt_id, 1, memory_order_relaxed) + 1;
	while (!id);
	s->rt_id = id;
	/* Each slot on its executor's node, before the first touch. */
	for (uint32_t i = 0; i < nexec; i++) {
		if (node[i] < 0 || node[i] >= 1024)
			continue;
		unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
		mask[node[i] / (8 * sizeof(unsigned long))] |= 1ul << (node[i] % (8 * sizeof(unsigned long)));
		(void)mbind((char *)p + off + stride * i, stride, MPOL_PREFERRED, mask, 1024, 0);
	}
	struct cbcmn__seg_hdr *h = s->hdr;
	h->version = CBCMN__SEG_VERSION;
	h->hdr_size = sizeof(*h);
	h->exec_size = sizeof(struct cbcmn__seg_exec);
	h->slots_off = (uint32_t)off;
	h->stride = (uint32_t)stride;
	h->nexec = nexec;
	h->pid = s->pid;
	h->start_ns = s->start_ns;
	h->rt_id = s->rt_id;
	h->policy = CBCMN_PIN_NONE;
	atomic_store_explicit(&h->alive, 1, memory_order_relaxed);
	/* No magic yet: cbcmn__seg_publish() completes the header. */
	return 0;
}

/* What is known only after the executors are placed and the rings probed. */
void cbcmn__seg_publish(struct cbcmn_runtime *rt)
{
	struct cbcmn__seg_hdr *h = rt->seg.hdr;
	h->ring_setup_flags = rt->ring_caps.setup_flags;
	h->msg_ring = cbcmn__doorbells_are_msg_rings(rt);
	h->oversubscribed = rt->oversubscribed;
	h->backend = (uint8_t)(rt->ep_backend ? CBCMN_BACKEND_EPOLL : CBCMN_BACKEND_IO_URING);
	h->spare = (uint8_t)rt->spare;
	h->policy = rt->policy;
	atomic_store_explicit(&h->nlive, cbcmn__nlive(rt), memory_order_relaxed);
	/* The magic last, release: pairs with seg_map()'s acquire load, so a
	 * watcher that sees it sees the whole header, these fields included
	 * (none of which changes after this). */
	atomic_store_explicit(&h->magic, CBCMN__SEG_MAGIC, memory_order_release);
}

/* Unmap a segment and close its descriptor (a watcher's view, or ours). */
static void seg_unmap(struct cbcmn__seg *s)
{
	if (s->hdr)
		munmap(s->hdr, s->size);
	if (s->fd >= 0)
		close(s->fd);
	s->hdr = NULL;
	s->fd = -1;
}

void cbcmn__seg_destroy(struct cbcmn__seg *s)
{
	if (s->hdr)
		atomic_store_explicit(&s->hdr->alive, 0, memory_order_release);
	seg_unmap(s);
}

/* A gauge: negative only in a torn read (an add seen before the one it
 * undoes), shown as 0. */
static uint64_t gauge(const _Atomic int64_t *g)
{
	int64_t v = atomic_load_explicit(g, memory_order_relaxed);
	return v > 0 ? (uint64_t)v : 0;
}

/* An actor gauge: its shared share plus the executor's own (statseg.h).
 * The own share is read between two reads of the shared one that agree,
 * so the sum is the gauge at one instant: read far apart (a reader
 * preempted between them), the two shares counted the moves of that while
 * once in and not out, and one actor showed as two receiving.  Agreeing
 * reads saw no move at all, not even one out and back in: the shared
 * share counts its moves (CBCMN__SEG_AGAUGE_MOVE).  A few tries (the
 * shares may move at every hop), then the last sum.  Acquire: the three
 * loads in their order. */
static uint64_t agauge(const _Atomic int64_t *shared, const _Atomic int64_t *own)
{
	int64_t s = atomic_load_explicit(shared, memory_order_acquire), o;
	for (int tries = 0;; tries++) {
		o = atomic_load_explicit(own, memory_order_acquire);
		int64_t again = atomic_load_explicit(shared, memory_order_acquire);
		if (again == s || tries == 3)
			break;
		s = again;
	}
	/* Summed modulo 2^40: no overflow, whatever a forged segment holds
	 * (fuzz_watch found INT64_MIN + -1 when the sum was 64 bits). */
	int64_t v = cbcmn__seg_agauge(s, o);
	return v > 0 ? (uint64_t)v : 0;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t cbcmn_stats_hist_quantile(const uint64_t *hist, uint32_t nslots, uint32_t pct)
{
	if (!hist || !nslots)
		return 0;
	/* Sums saturate: a histogram from another process's segment may hold
	 * anything, and a wrapped total would move the percentile. */
	uint64_t total = 0;
	for (uint32_t k = 0; k < nslots; k++)
		total = sat_add(total, hist[k]);
	if (!total)
		return 0;
	if (pct > 100)
		pct = 100;
	/* The rank of the sample wanted, ceil(total * pct / 100) and at
	 * least 1, without the product (which may overflow). */
	uint64_t rank = total / 100 * pct + ((total % 100) * pct + 99) / 100;
	if (!rank)
		rank = 1;
	uint64_t seen = 0;
	uint32_t k = 0;
	for (; k < nslots - 1; k++)
		if ((seen = sat_add(seen, hist[k])) >= rank)
			break;
	return k >= 63 ? UINT64_MAX : (2ull << k) - 1;
}

/* The actor gauges and mailbox figures of a slot; runnable is what no
 * other state holds. */
static void actor_fill(const struct cbcmn__seg_actors *a, const struct cbcmn__seg_actors_own *o,
		       const struct cbcmn__seg_mbox *mb, cbcmn_executor_stats *e)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	e->actor_load_milli =
		cbcmn__seg_actor_load(a, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
	e->actor_migrations = atomic_load_explicit(&a->migrations, memory_order_relaxed);
	e->actor_restarts = atomic_load_explicit(&a->restarts, memory_order_relaxed);
	e->actors = agauge(&a->live, &o->live);
	e->actors_running = gauge(&a->running);
	e->actors_waiting = agauge(&a->waiting, &o->waiting);
	e->actors_receiving = agauge(&a->receiving, &o->receiving);
	e->actors_halting = agauge(&a->halting, &o->halting);
	e->mailbox_depth = agauge(&a->mailbox, &o->mailbox);
	e->actor_backpressure = atomic_load_explicit(&mb->backpressure, memory_order_relaxed);
	for (uint32_t k = 0; k < CBCMN_MAILBOX_HIST_SLOTS; k++)
		e->mailbox_depth_hist[k] = atomic_load_explicit(&mb->depth_hist[k], memory_order_relaxed);
	e->mailbox_depth_p99 = cbcmn_stats_hist_quantile(e->mailbox_depth_hist, CBCMN_MAILBOX_HIST_SLOTS, 99);
	uint64_t busy = e->actors_running + e->actors_waiting + e->actors_halting;
	e->actors_runnable = e->actors > busy ? e->actors - busy : 0;
}

/* The statistics a segment holds, for cbcmn_stats_snapshot() and
 * cbcmn_watch_read() alike. */
static void seg_fill(const struct cbcmn__seg *s, cbcmn_stats *out, cbcmn_executor_stats *per,
		     uint32_t nper)
{
	/* The geometry from s, never from h: h may be another process's and
	 * change under us. */
	const struct cbcmn__seg_hdr *h = s->hdr;
	memset(out, 0, sizeof(*out));
	/* The spare's slot is in the totals (what it ran), never in the
	 * count nor in per[] (min(nper, executors) entries are written). */
	out->executors = s->nexec - (h->spare && s->nexec ? 1 : 0);
	cbcmn_executor_stats *tot = &out->total;
	/* Completions before spawns: a task counted as completed was counted
	 * as spawned before, so tasks_live never underflows. */
	uint64_t completed = atomic_load_explicit(&h->ext_completions, memory_order_acquire);
	uint64_t spawned = 0;
	for (uint32_t i = 0; i < s->nexec; i++)
		completed += atomic_load_explicit(&cbcmn__seg_slot(s, i)->ctr.completions,
						  memory_order_acquire);
	CBCMN__PAUSE(CBCMN__P_LIVE_COUNTS, (void *)s);
	spawned += atomic_load_explicit(&h->ext_spawns, memory_order_acquire);
	for (uint32_t i = 0; i < s->nexec; i++) {
		const struct cbcmn__seg_exec *x = cbcmn__seg_slot(s, i);
		const struct cbcmn__counters *c = &x->ctr;
		cbcmn_executor_stats e = {
#define LD(f) .f = atomic_load_explicit(&c->f, memory_order_relaxed)
			LD(tasks_run),       LD(local_hits),      LD(inject_hits),
			LD(steal_attempts),  LD(steal_successes), LD(tasks_stolen),
			LD(inline_runs),     LD(parks),           LD(wakes),
			LD(spawns),          LD(steals_gated),    LD(doorbells_sent),
			LD(doorbells_recv),  LD(doorbells_coalesced),
			LD(ring_msgs_submitted), LD(ring_msgs_backpressure),
			LD(sqes_submitted),  LD(cqes_reaped),     LD(ring_enters),
			LD(xmsgs_sent),      LD(xmsgs_recv),      LD(xmsgs_acked),
			LD(handoffs),        LD(io_ops),          LD(accept_errors),
			LD(stalls),
#undef LD
			.avg_task_ns = atomic_load_explicit(&x->avg_task_ns, memory_order_relaxed),
			.queue_depth = atomic_load_explicit(&x->queue_depth, memory_order_relaxed),
			.busy_pct = atomic_load_explicit(&x->busy_pct, memory_order_relaxed),
			.state = atomic_load_explicit(&x->state, memory_order_relaxed),
			.tid = atomic_load_explicit(&x->tid, memory_order_relaxed),
			.cpu = x->cpu,
			.node = x->node,
			.stalled_task = atomic_load_explicit(&x->stall_task, memory_order_relaxed),
		};
		actor_fill(&x->act, &x->act_own, &x->mbox, &e);
		spawned += e.spawns;
		if (per && i < nper && i < out->executors)
			per[i] = e;
		tot->tasks_run += e.tasks_run;
		tot->local_hits += e.local_hits;
		tot->inject_hits += e.inject_hits;
		tot->steal_attempts += e.steal_attempts;
		tot->steal_successes += e.steal_successes;
		tot->tasks_stolen += e.tasks_stolen;
		tot->inline_runs += e.inline_runs;
		tot->parks += e.parks;
		tot->wakes += e.wakes;
		tot->spawns += e.spawns;
		tot->queue_depth += e.queue_depth;
		tot->steals_gated += e.steals_gated;
		tot->doorbells_sent += e.doorbells_sent;
		tot->doorbells_recv += e.doorbells_recv;
		tot->doorbells_coalesced += e.doorbells_coalesced;
		tot->ring_msgs_submitted += e.ring_msgs_submitted;
		tot->ring_msgs_backpressure += e.ring_msgs_backpressure;
		tot->sqes_submitted += e.sqes_submitted;
		tot->cqes_reaped += e.cqes_reaped;
		tot->ring_enters += e.ring_enters;
		tot->xmsgs_sent += e.xmsgs_sent;
		tot->xmsgs_recv += e.xmsgs_recv;
		tot->xmsgs_acked += e.xmsgs_acked;
		tot->handoffs += e.handoffs;
		tot->io_ops += e.io_ops;
		tot->accept_errors += e.accept_errors;
		tot->stalls += e.stalls;
		tot->stalled_task += e.stalled_task != 0; /* the total counts them */
		tot->actors += e.actors;
		tot->actors_runnable += e.actors_runnable;
		tot->actors_running += e.actors_running;
		tot->actors_waiting += e.actors_waiting;
		tot->actors_receiving += e.actors_receiving;
		tot->actors_halting += e.actors_halting;
		tot->mailbox_depth += e.mailbox_depth;
		tot->actor_migrations += e.actor_migrations;
		tot->actor_restarts += e.actor_restarts;
		tot->actor_backpressure += e.actor_backpressure;
		/* Saturating, as the quantile's own sums: a hostile segment's
		 * slots must not wrap into a small total. */
		for (uint32_t k = 0; k < CBCMN_MAILBOX_HIST_SLOTS; k++)
			tot->mailbox_depth_hist[k] = sat_add(tot->mailbox_depth_hist[k], e.mailbox_depth_hist[k]);
		if (e.actor_load_milli > tot->actor_load_milli)
			tot->actor_load_milli = e.actor_load_milli; /* the largest */
		if (e.avg_task_ns > tot->avg_task_ns)
			tot->avg_task_ns = e.avg_task_ns; /* the total holds the largest */
		if (e.busy_pct > tot->busy_pct)
			tot->busy_pct = e.busy_pct;       /* ... and the busiest */
		if (e.state != CBCMN_EXEC_STOPPED)
			tot->state = CBCMN_EXEC_RUNNING;
	}
	tot->cpu = tot->node = -1;
	tot->mailbox_depth_p99 =
		cbcmn_stats_hist_quantile(tot->mailbox_depth_hist, CBCMN_MAILBOX_HIST_SLOTS, 99);
	out->ext_actor_backpressure = atomic_load_explicit(&h->ext_backpressure, memory_order_relaxed);
	out->ext_doorbells = atomic_load_explicit(&h->ext_doorbells, memory_order_relaxed);
	out->ring_setup_flags = h->ring_setup_flags;
	out->msg_ring = h->msg_ring;
	out->oversubscribed = h->oversubscribed;
	out->backend = h->backend ? h->backend : CBCMN_BACKEND_IO_URING;
	out->policy = h->policy;
	out->executors_live = atomic_load_explicit(&h->nlive, memory_order_relaxed);
	out->executor_starts = atomic_load_explicit(&h->exec_starts, memory_order_relaxed);
	out->executor_retires = atomic_load_explicit(&h->exec_retires, memory_order_relaxed);
	out->tasks_spawned = spawned;
	out->tasks_completed = completed;
	out->tasks_live = spawned > completed ? spawned - completed : 0;
	uint64_t now = mono_ns();
	out->uptime_ns = now > s->start_ns ? now - s->start_ns : 0;
	out->pid = s->pid;
	out->runtime_id = s->rt_id;
	/* Work found at home (queue picks and inline runs) against all work
	 * found: the share that did not come from elsewhere (seed 001). */
	uint64_t local = tot->local_hits + tot->inline_runs;
	uint64_t picks = local + tot->inject_hits + tot->tasks_stolen;
	out->local_hit_ratio = picks ? (double)local / (double)picks : 0.0;
	out->steal_success_rate =
		tot->steal_attempts ? (double)tot->steal_successes / (double)tot->steal_attempts : 0.0;
}

uint64_t cbcmn__seg_live_tasks(const struct cbcmn__seg *s)
{
	cbcmn_stats st;
	seg_fill(s, &st, NULL, 0);
	return st.tasks_live;
}

int cbcmn_stats_snapshot(const cbcmn_runtime *rt, cbcmn_stats *out, cbcmn_executor_stats *per,
			 uint32_t nper)
{
	if (!rt || !out || (nper && !per))
		return -EINVAL;
	seg_fill(&rt->seg, out, per, nper);
	/* In the process the run queues can be counted now, not sampled. */
	out->total.queue_depth = 0;
	for (uint32_t i = 0; i < rt->nexec; i++) {
		uint64_t d = cbcmn__exec_queue_depth(rt->exec[i]);
		out->total.queue_depth += d;
		if (per && i < nper && i < out->executors)
			per[i].queue_depth = d;
	}
	out->executors_live = cbcmn__nlive(rt);
	return 0;
}

/* ---- watching another process ------------------------------------------ */

/* A file, as stat(2) names it: an inode number is unique on its device
 * only (a descriptor reused for a file elsewhere may share it). */
struct file_id {
	dev_t dev;
	ino_t ino;
};

static struct file_id file_id_of(const struct stat *st)
{
	return (struct file_id){st->st_dev, st->st_ino};
}

static bool same_file(struct file_id a, struct file_id b)
{
	return a.dev == b.dev && a.ino == b.ino;
}

struct cbcmn_watch {
	struct cbcmn__seg seg;         /* mapped read only */
	int pidfd;                     /* readable once the process has exited */
	/* The segment as the process holds it: its descriptor nr refers to
	 * memfd file id while the runtime is the process's (seg_still_open). */
	pid_t pid;
	int nr;
	struct file_id id;
	bool gone;                     /* the runtime or its process has ended */
	uint64_t end_uptime_ns;        /* the uptime when that was seen */
};

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* The header (a private copy) describes a segment of size bytes we can
 * read: our layout, slots that fit the file, aligned for their atomics,
 * beside the header rather than over it, and made by pid.  Every field may
 * be garbage: the sums are done in 64 bits, nexec is bounded first. */
static int seg_check(const struct cbcmn__seg_hdr *h, uint64_t size, pid_t pid)
{
	const uint64_t align = _Alignof(struct cbcmn__seg_exec);
	if (atomic_load_explicit(&h->magic, memory_order_relaxed) != CBCMN__SEG_MAGIC)
		return -ENOENT;
	if (h->version != CBCMN__SEG_VERSION || h->hdr_size != sizeof(*h) ||
	    h->exec_size != sizeof(struct cbcmn__seg_exec))
		return -EPROTO;
	if (h->nexec == 0 || h->nexec > CBCMN_MAX_EXECUTORS || h->stride < h->exec_size ||
	    h->stride % align || h->slots_off < h->hdr_size || h->slots_off % align ||
	    (uint64_t)h->slots_off + (uint64_t)h->stride * h->nexec > size)
		return -ENOENT; /* torn or corrupt: no runtime we can read */
	if (h->pid != pid)
		return -ENOENT; /* a segment inherited from a parent */
	return 0;
}

/* Process pid (as /proc here numbers it) in its own pid namespace: what
 * its getpid() returned when it wrote the segment's pid.  In a container
 * the two differ.  The last number of the NSpid line of its status; pid
 * itself when there is none (kernels before 4.1, or unreadable). */
pid_t cbcmn__own_pid(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	long own = pid;
	if (!f)
		return pid;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6))
			continue;
		char *at = line + 6, *end;
		for (long v; (v = strtol(at, &end, 10)), end != at; at = end)
			own = v;
		break;
	}
	fclose(f);
	return (pid_t)own;
}

/* Is link (a /proc/.../fd/N's target) a memfd named name? */
static bool memfd_named(const char *link, const char *name)
{
	size_t len = strlen(name);
	return strncmp(link, "/memfd:", 7) == 0 && strncmp(link + 7, name, len) == 0 &&
	       link[7 + len] == ' ';
}

/* Open pid's descriptor nr as a path only (O_PATH): no open(2) of the
 * file itself happens, whatever it is.  -errno, or the descriptor if it
 * is a regular tmpfs file, a memfd named name, as this process sees it
 * now; else -ENOENT. */
static int memfd_path(pid_t pid, int nr, const char *name)
{
	char path[64], link[128];
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, nr);
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return errno == EPERM ? -EACCES : -errno;
	/* tmpfs: not hugetlbfs, whose faults can fail with SIGBUS when its
	 * pool is empty, nor a file with a look-alike name. */
	struct statfs sfs;
	struct stat st;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n > 0)
		link[n] = '\0';
	if (n <= 0 || !memfd_named(link, name) || fstatfs(fd, &sfs) != 0 ||
	    sfs.f_type != TMPFS_MAGIC || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -ENOENT;
	}
	return fd;
}

/* Map the segment behind /proc/pid/fd/nr if it is a live one; *ino
 * tells which memfd it is (a watcher's view of a segment is one more
 * descriptor for the same one).  The target may be hostile, and may put
 * anything at nr between the listing that found the name and here: a
 * device node or a FIFO, whose open(2) alone acts (a watchdog arms, a
 * waiting reader wakes), with our credentials.  So nr is opened as a
 * path first and checked (memfd_path()), then that very file reopened
 * through our own descriptor, which nobody else can swap.  What we map
 * must be a sealed tmpfs file (nothing can shrink it, so no read of the
 * mapping can fault with SIGBUS), its header is checked on a copy read
 * with pread (no mapping needed to look), and only the part the checked
 * geometry covers is mapped. */
static bool blank(const void *p, size_t len)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < len; i++)
		if (c[i])
			return false;
	return true;
}

int cbcmn__memfd_open(pid_t pid, int nr, const char *name, int flags, struct stat *st, void *hdr,
		      size_t hlen)
{
	int pfd = memfd_path(pid, nr, name);
	if (pfd < 0)
		return pfd;
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", pfd);
	/* O_NONBLOCK, O_NOCTTY: nothing but a regular file gets here now;
	 * kept as a second line. */
	int fd = open(path, flags | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	int err = errno;
	close(pfd);
	if (fd < 0)
		return err == EPERM ? -EACCES : -err;
	/* Seals are never removed: once seen, the size is final; so the size
	 * is read after them (before, the owner could shrink the file, then
	 * seal it, and we would map the old size: SIGBUS). */
	int seals;
	if ((seals = fcntl(fd, F_GET_SEALS)) < 0 || fstat(fd, st) != 0 || !S_ISREG(st->st_mode) ||
	    st->st_size < (off_t)hlen || pread(fd, hdr, hlen, 0) != (ssize_t)hlen) {
		close(fd);
		return -ENOENT;
	}
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
		close(fd);
		/* Unsealed: version 1, or not a runtime's; or a runtime's
		 * between its memfd_create() and its seals
		 * (cbcmn__memfd_sealed()), its header still zero: not one
		 * yet, as before the memfd existed. */
		return blank(hdr, hlen) ? -ENOENT : -EPROTO;
	}
	return fd;
}

static int seg_map(pid_t pid, int nr, struct cbcmn__seg *out, struct file_id *id)
{
	struct stat st;
	struct cbcmn__seg_hdr h;
	int fd = cbcmn__memfd_open(pid, nr, CBCMN__SEG_NAME, O_RDONLY, &st, &h, sizeof(h));
	if (fd < 0)
		return fd;
	int rc;
	if ((rc = seg_check(&h, (uint64_t)st.st_size, cbcmn__own_pid(pid))) != 0)
		goto fail;
	size_t len = (size_t)h.slots_off + (size_t)h.stride * h.nexec;
	void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		rc = -errno;
		goto fail;
	}
	/* The magic again, acquire, from the mapping we read from now on:
	 * pairs with cbcmn__seg_publish()'s release store, so the header's
	 * other fields read later are the ones written before it.  (The copy
	 * above only chose the geometry, which is ours from now on.) */
	const struct cbcmn__seg_hdr *mh = p;
	if (atomic_load_explicit(&mh->magic, memory_order_acquire) != CBCMN__SEG_MAGIC ||
	    !atomic_load_explicit(&mh->alive, memory_order_acquire)) {
		munmap(p, len);
		rc = -ENOENT;
		goto fail;
	}
	*out = (struct cbcmn__seg){
		.hdr = p,
		.size = len,
		.fd = fd,
		.nexec = h.nexec,
		.stride = h.stride,
		.slots_off = h.slots_off,
		.pid = h.pid,
		.start_ns = h.start_ns,
		.rt_id = mh->rt_id, /* after the acquire above: published with the magic */
	};
	*id = file_id_of(&st);
	return 0;
fail:
	close(fd);
	return rc;
}

struct seg_found {
	int nr;            /* the descriptor in the target */
	struct file_id id;
	uint64_t start_ns; /* when its runtime was made */
};

static int found_cmp(const void *a, const void *b)
{
	const struct seg_found *x = a, *y = b;
	if (x->start_ns != y->start_ns)
		return x->start_ns < y->start_ns ? -1 : 1;
	if (x->id.dev != y->id.dev)
		return x->id.dev < y->id.dev ? -1 : 1;
	return (x->id.ino > y->id.ino) - (x->id.ino < y->id.ino);
}

int cbcmn__memfd_fds(pid_t pid, const char *name, int **fds, uint32_t *n)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT ? -ESRCH : -errno;
	int *v = NULL;
	uint32_t cnt = 0, cap = 0;
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char link[PATH_MAX], target[128];
		snprintf(link, sizeof(link), "%s/%s", path, de->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len < 0)
			continue; /* closed meanwhile */
		target[len] = '\0';
		if (!memfd_named(target, name))
			continue; /* a hint only: memfd_path() checks what it opens */
		if (cnt == cap) {
			int *nv = realloc(v, (cap = cap ? 2 * cap : 4) * sizeof(*v));
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
		}
		v[cnt++] = atoi(de->d_name);
	}
	closedir(d);
	if (rc) {
		free(v);
		return rc;
	}
	*fds = v;
	*n = cnt;
	return 0;
}

int cbcmn_watch_open(int32_t pid, uint32_t index, cbcmn_watch **out)
{
	if (!out || pid <= 0)
		return -EINVAL;
	*out = NULL;
	/* The pidfd first: should pid be reused later, reads see the exit. */
	int pidfd = pidfd_open_(pid);
	if (pidfd < 0)
		return errno == ESRCH ? -ESRCH : -errno;
	int *fds = NULL;
	uint32_t n = 0;
	int rc = cbcmn__memfd_fds(pid, CBCMN__SEG_NAME, &fds, &n);
	if (rc) {
		close(pidfd);
		return rc == -EPERM ? -EACCES : rc;
	}
	/* The live runtimes, each once, oldest first. */
	struct seg_found *found = calloc(n ? n : 1, sizeof(*found));
	struct cbcmn__seg seg = {.fd = -1};
	uint32_t nfound = 0;
	rc = found ? -ENOENT : -ENOMEM; /* when no runtime matches: why */
	for (uint32_t i = 0; found && i < n; i++) {
		struct file_id id;
		int r = seg_map(pid, fds[i], &seg, &id);
		if (r == 0) {
			found[nfound++] = (struct seg_found){fds[i], id, seg.start_ns};
			seg_unmap(&seg);
		} else if (r == -EACCES) {
			rc = -EACCES;
		} else if (r == -EPROTO && rc == -ENOENT) {
			rc = -EPROTO;
		}
	}
	free(fds);
	if (nfound)
		qsort(found, nfound, sizeof(*found), found_cmp);
	uint32_t k = 0;
	int nr = -1;
	struct file_id id = {0};
	for (uint32_t i = 0; i < nfound; i++) {
		if (i > 0 && same_file(found[i].id, found[i - 1].id))
			continue;
		if (k++ < index)
			continue;
		nr = found[i].nr;
		int r = seg_map(pid, found[i].nr, &seg, &id);
		if (r == 0 && !same_file(id, found[i].id))
			seg_unmap(&seg); /* the descriptor was reused meanwhile */
		if (r != 0 || !seg.hdr)
			rc = r ? r : -ENOENT;
		break;
	}
	free(found);
	/* pid may have exited and been reused since the pidfd was opened:
	 * the pidfd, readable once its process has exited, tells. */
	struct pollfd pp = {.fd = pidfd, .events = POLLIN};
	if (seg.hdr && poll(&pp, 1, 0) == 1 && (pp.revents & POLLIN)) {
		seg_unmap(&seg);
		rc = -ESRCH;
	}
	cbcmn_watch *w = seg.hdr ? calloc(1, sizeof(*w)) : NULL;
	if (!w) {
		seg_unmap(&seg);
		close(pidfd);
		return seg.hdr ? -ENOMEM : rc;
	}
	w->seg = seg;
	w->pidfd = pidfd;
	w->pid = pid;
	w->nr = nr;
	w->id = id;
	*out = w;
	return 0;
}

/* Is the segment still the process's?  Its descriptor closes when the
 * process execs (MFD_CLOEXEC) and the runtime with it, which never cleared
 * alive: the segment, mapped here, would look live for good. */
static bool seg_still_open(const cbcmn_watch *w)
{
	char p[64];
	struct stat st;
	snprintf(p, sizeof(p), "/proc/%d/fd/%d", (int)w->pid, w->nr);
	return stat(p, &st) == 0 && same_file(file_id_of(&st), w->id);
}

int cbcmn_watch_read(cbcmn_watch *w, cbcmn_stats *out, cbcmn_executor_stats *per, uint32_t nper)
{
	if (!w || !out || (nper && !per))
		return -EINVAL;
	if (!w->gone) {
		/* Our mapping keeps the pages after the runtime or its process
		 * is gone: both mean the figures are final. */
		struct pollfd p = {.fd = w->pidfd, .events = POLLIN};
		if ((poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) ||
		    !atomic_load_explicit(&w->seg.hdr->alive, memory_order_acquire) ||
		    !seg_still_open(w)) {
			w->gone = true;
			uint64_t now = mono_ns();
			w->end_uptime_ns = now > w->seg.start_ns ? now - w->seg.start_ns : 0;
		}
	}
	seg_fill(&w->seg, out, per, nper);
	if (w->gone)
		out->uptime_ns = w->end_uptime_ns;
	return w->gone ? -ESRCH : 0;
}

void cbcmn_watch_close(cbcmn_watch *w)
{
	if (!w)
		return;
	seg_unmap(&w->seg);
	close(w->pidfd);
	free(w);
}
