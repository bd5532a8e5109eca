/* test_watch.c: watching a runtime from another process (cbcmn_watch_*):
 * the statistics segment gives the same figures as cbcmn_stats_snapshot(),
 * live, and says when the runtime or its process is gone. */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "workloads/fib.h"
#include "statseg.h" /* private: to forge segments a hostile target could make */

static void fib_run(cbcmn_runtime *rt, int n)
{
	struct fib f = {.n = n};
	t_run(rt, fib_task, &f, 0);
}

/* Executor threads are named cbcmn-exec-N: tid must be one of ours. */
static void assert_exec_thread(pid_t pid, int32_t tid, uint32_t id)
{
	char path[64], comm[32] = "", want[32];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)pid, (int)tid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(comm, sizeof(comm), f));
	fclose(f);
	comm[strcspn(comm, "\n")] = '\0';
	snprintf(want, sizeof(want), "cbcmn-exec-%u", id);
	assert_string_equal(comm, want);
}

/* In the process itself: the watch and the snapshot agree exactly once
 * the runtime is quiet, and the executors are seen parked. */
static void test_self_matches_snapshot(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	fib_run(rt, 20);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &w), 0);
	cbcmn_stats a, b;
	cbcmn_executor_stats pa[2], pb[2];
	/* Quiet: both executors asleep in their rings. */
	uint64_t deadline = t_now_ns() + 5000000000ull;
	for (;;) {
		assert_int_equal(cbcmn_watch_read(w, &b, pb, 2), 0);
		if (pb[0].state == CBCMN_EXEC_PARKED && pb[1].state == CBCMN_EXEC_PARKED)
			break;
		assert_true(t_now_ns() < deadline);
		usleep(1000);
	}
	assert_int_equal(cbcmn_stats_snapshot(rt, &a, pa, 2), 0);
	assert_int_equal(b.executors, 2);
	assert_int_equal(b.executors_live, a.executors_live);
	assert_int_equal(b.pid, getpid());
	assert_true(b.uptime_ns > 0);
	assert_int_equal(b.tasks_spawned, a.tasks_spawned);
	assert_int_equal(b.tasks_completed, a.tasks_completed);
	assert_int_equal(b.tasks_live, 0);
	assert_true(b.tasks_spawned >= 10946); /* fib(20) tasks at least */
	assert_int_equal(b.total.tasks_run, a.total.tasks_run);
	assert_int_equal(b.total.steal_successes, a.total.steal_successes);
	assert_int_equal(b.total.doorbells_sent, a.total.doorbells_sent);
	assert_int_equal(b.policy, a.policy);
	assert_int_equal(b.ring_setup_flags, a.ring_setup_flags);
	for (uint32_t i = 0; i < 2; i++) {
		assert_int_equal(pb[i].tasks_run, pa[i].tasks_run);
		assert_int_equal(pb[i].cpu, pa[i].cpu);
		assert_int_equal(pb[i].node, pa[i].node);
		assert_int_equal(pb[i].tid, pa[i].tid);
		assert_true(pb[i].tid > 0);
		assert_exec_thread(getpid(), pb[i].tid, i);
	}
	/* The runtime ends: the watch says so, with the last figures. */
	t_destroy(rt);
	assert_int_equal(cbcmn_watch_read(w, &b, pb, 2), -ESRCH);
	assert_int_equal(b.tasks_completed, a.tasks_completed);
	assert_int_equal(pb[0].state, CBCMN_EXEC_STOPPED);
	cbcmn_watch_close(w);
}

/* A child that runs fib in a loop until told to stop, then destroys its
 * runtime, reports, and waits to be killed. */
struct child {
	pid_t pid;
	int to[2], from[2]; /* parent -> child, child -> parent */
};

static void child_main(struct child *c)
{
	close(c->to[1]);
	close(c->from[0]);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(&cfg, &rt) != 0)
		_exit(2);
	char ch = 'r';
	if (write(c->from[1], &ch, 1) != 1)
		_exit(3);
	/* Run until the parent writes. */
	for (;;) {
		struct fib f = {.n = 16};
		if (cbcmn_runtime_run(rt, fib_task, &f, NULL) != 0)
			_exit(4);
		struct pollfd p = {.fd = c->to[0], .events = POLLIN};
		if (poll(&p, 1, 0) == 1)
			break;
	}
	if (read(c->to[0], &ch, 1) != 1 || cbcmn_runtime_destroy(rt) != 0)
		_exit(5);
	ch = 'd';
	if (write(c->from[1], &ch, 1) != 1)
		_exit(6);
	pause();
	_exit(0);
}

static void child_start(struct child *c)
{
	assert_int_equal(pipe(c->to), 0);
	assert_int_equal(pipe(c->from), 0);
	c->pid = fork();
	assert_true(c->pid >= 0);
	if (c->pid == 0)
		child_main(c);
	close(c->to[0]);
	close(c->from[1]);
	char ch;
	assert_int_equal(read(c->from[0], &ch, 1), 1);
	assert_int_equal(ch, 'r');
}

static void child_reap(struct child *c)
{
	kill(c->pid, SIGKILL);
	waitpid(c->pid, NULL, 0);
	close(c->to[1]);
	close(c->from[0]);
}

/* Another process: its figures move while it works; its runtime's end and
 * its exit both read as -ESRCH. */
static void test_other_process(void **state)
{
	(void)state;
	struct child c;
	child_start(&c);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(c.pid, 0, &w), 0);
	cbcmn_stats s1, s2;
	cbcmn_executor_stats per[2];
	assert_int_equal(cbcmn_watch_read(w, &s1, per, 2), 0);
	/* Until its figures move: a loaded machine may give the child no CPU
	 * for a while. */
	uint64_t end = t_now_ns() + T_STALL_NS;
	do {
		usleep(10000);
		assert_int_equal(cbcmn_watch_read(w, &s2, per, 2), 0);
	} while ((s2.tasks_completed <= s1.tasks_completed || s2.total.tasks_run <= s1.total.tasks_run) &&
		 t_now_ns() < end);
	assert_int_equal(s2.pid, c.pid);
	assert_int_equal(s2.executors, 2);
	assert_true(s2.tasks_completed > s1.tasks_completed);
	assert_true(s2.total.tasks_run > s1.total.tasks_run);
	assert_true(s2.uptime_ns > s1.uptime_ns);
	for (uint32_t i = 0; i < 2; i++) {
		assert_true(per[i].tid > 0);
		assert_exec_thread(c.pid, per[i].tid, i);
		assert_true(per[i].state != CBCMN_EXEC_STOPPED);
	}
	/* Only one runtime there. */
	cbcmn_watch *w2;
	assert_int_equal(cbcmn_watch_open(c.pid, 1, &w2), -ENOENT);

	char ch = 's';
	assert_int_equal(write(c.to[1], &ch, 1), 1);
	assert_int_equal(read(c.from[0], &ch, 1), 1);
	assert_int_equal(ch, 'd');
	assert_int_equal(cbcmn_watch_read(w, &s2, NULL, 0), -ESRCH);
	assert_true(s2.tasks_completed >= s1.tasks_completed);
	/* Gone for good, and no runtime left to open. */
	assert_int_equal(cbcmn_watch_open(c.pid, 0, &w2), -ENOENT);
	cbcmn_watch_close(w);
	child_reap(&c);
}

static void test_process_exit(void **state)
{
	(void)state;
	struct child c;
	child_start(&c);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(c.pid, 0, &w), 0);
	cbcmn_stats s;
	assert_int_equal(cbcmn_watch_read(w, &s, NULL, 0), 0);
	kill(c.pid, SIGKILL);
	waitpid(c.pid, NULL, 0);
	assert_int_equal(cbcmn_watch_read(w, &s, NULL, 0), -ESRCH);
	assert_int_equal(s.pid, c.pid);
	cbcmn_watch_close(w);
	close(c.to[1]);
	close(c.from[0]);
}

/* The watched process's descriptor of the segment closed, and its number
 * reused for a file on another device that has the segment's inode
 * number: not the segment any more.  No file system lets a test choose an
 * inode number, so stat(2) of /proc/PID/fd/NR says so here (this file's
 * stat() is the one the library calls: a static link).  Before, only
 * st_ino was compared, and the runtime looked alive for good. */
static char stat_fake_prefix[64]; /* "/proc/PID/fd/": its entries move */

int stat(const char *restrict path, struct stat *restrict st)
{
	int rc = fstatat(AT_FDCWD, path, st, 0);
	if (rc == 0 && stat_fake_prefix[0] &&
	    !strncmp(path, stat_fake_prefix, strlen(stat_fake_prefix)))
		st->st_dev ^= 1;
	return rc;
}

static void test_descriptor_reused_for_the_same_inode_elsewhere_is_gone(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &w), 0);
	cbcmn_stats s;
	assert_int_equal(cbcmn_watch_read(w, &s, NULL, 0), 0);
	snprintf(stat_fake_prefix, sizeof(stat_fake_prefix), "/proc/%d/fd/", (int)getpid());
	int rc = cbcmn_watch_read(w, &s, NULL, 0);
	stat_fake_prefix[0] = 0;
	cbcmn_watch_close(w);
	t_destroy(rt);
	assert_int_equal(rc, -ESRCH);
}

/* Two runtimes in one process: index 0 is the older. */
static void test_two_runtimes(void **state)
{
	(void)state;
	cbcmn_runtime *a = t_runtime(1), *b = t_runtime(2);
	cbcmn_watch *wa, *wb, *wc;
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &wa), 0);
	assert_int_equal(cbcmn_watch_open(getpid(), 1, &wb), 0);
	assert_int_equal(cbcmn_watch_open(getpid(), 2, &wc), -ENOENT);
	cbcmn_stats sa, sb;
	assert_int_equal(cbcmn_watch_read(wa, &sa, NULL, 0), 0);
	assert_int_equal(cbcmn_watch_read(wb, &sb, NULL, 0), 0);
	assert_int_equal(sa.executors, 1);
	assert_int_equal(sb.executors, 2);
	t_destroy(a);
	assert_int_equal(cbcmn_watch_read(wa, &sa, NULL, 0), -ESRCH);
	assert_int_equal(cbcmn_watch_read(wb, &sb, NULL, 0), 0);
	/* The older one gone, the younger is now index 0. */
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &wc), 0);
	assert_int_equal(cbcmn_watch_read(wc, &sa, NULL, 0), 0);
	assert_int_equal(sa.executors, 2);
	cbcmn_watch_close(wc);
	cbcmn_watch_close(wa);
	cbcmn_watch_close(wb);
	t_destroy(b);
}

/* Bad input, a process without a runtime, a segment inherited through
 * fork (it is the parent's, not the child's), and no descriptor left over
 * by a runtime or a watch. */
static void test_errors(void **state)
{
	(void)state;
	cbcmn_watch *w = NULL;
	cbcmn_stats s;
	assert_int_equal(cbcmn_watch_open(getpid(), 0, NULL), -EINVAL);
	assert_int_equal(cbcmn_watch_open(0, 0, &w), -EINVAL);
	assert_int_equal(cbcmn_watch_open(-5, 0, &w), -EINVAL);
	assert_int_equal(cbcmn_watch_read(NULL, &s, NULL, 0), -EINVAL);
	cbcmn_watch_close(NULL);
	/* pid_max is at most 2^22. */
	assert_int_equal(cbcmn_watch_open(1 << 23, 0, &w), -ESRCH);
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &w), -ENOENT);
	assert_null(w);

	int fds = t_count_fds();
	cbcmn_runtime *rt = t_runtime(1);
	pid_t kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		pause();
		_exit(0);
	}
	assert_int_equal(cbcmn_watch_open(kid, 0, &w), -ENOENT);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &w), 0);
	assert_int_equal(cbcmn_watch_read(w, &s, NULL, 0), 0);
	cbcmn_watch_close(w);
	t_destroy(rt);
	assert_int_equal(t_count_fds(), fds);
}

/* Looking at another user's process takes ptrace-read access. */
static void test_not_permitted(void **state)
{
	(void)state;
	if (geteuid() != 0)
		T_SKIP("needs root to drop to another user (running as uid %d)", (int)geteuid());
	cbcmn_runtime *rt = t_runtime(1);
	pid_t kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
			_exit(2);
		cbcmn_watch *w;
		_exit(cbcmn_watch_open(getppid(), 0, &w) == -EACCES ? 0 : 1);
	}
	int st;
	assert_int_equal(waitpid(kid, &st, 0), kid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	t_destroy(rt);
}

/* ---- forged segments: what a corrupt or hostile target can show ------- */

#define T_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* A process (kid) holding a memfd named like a runtime's, whose pages this
 * process writes through its own mapping: the header is whatever a test
 * makes it. */
struct fake {
	pid_t kid;
	int fd;
	struct cbcmn__seg_hdr *h;
	size_t size, stride, off;
	uint32_t nexec;
};

static void fake_header(struct fake *f)
{
	struct cbcmn__seg_hdr *h = f->h;
	memset(h, 0, sizeof(*h));
	h->version = CBCMN__SEG_VERSION;
	h->hdr_size = sizeof(*h);
	h->exec_size = sizeof(struct cbcmn__seg_exec);
	h->slots_off = (uint32_t)f->off;
	h->stride = (uint32_t)f->stride;
	h->nexec = f->nexec;
	h->pid = f->kid;
	h->start_ns = t_now_ns();
	atomic_store(&h->alive, 1);
	atomic_store(&h->nlive, f->nexec);
	h->magic = CBCMN__SEG_MAGIC;
}

static struct cbcmn__seg_exec *fake_slot(struct fake *f, uint32_t i)
{
	return (struct cbcmn__seg_exec *)((char *)f->h + f->off + f->stride * i);
}

static void fake_start(struct fake *f, bool sealed, uint32_t nexec)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	f->nexec = nexec;
	f->off = page;
	f->stride = (sizeof(struct cbcmn__seg_exec) + page - 1) / page * page;
	f->size = f->off + f->stride * nexec;
	f->fd = memfd_create(CBCMN__SEG_NAME, MFD_CLOEXEC | (sealed ? MFD_ALLOW_SEALING : 0));
	assert_true(f->fd >= 0);
	assert_int_equal(ftruncate(f->fd, (off_t)f->size), 0);
	if (sealed)
		assert_int_equal(fcntl(f->fd, F_ADD_SEALS, T_SEALS), 0);
	f->h = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
	assert_true(f->h != MAP_FAILED);
	f->kid = fork();
	assert_true(f->kid >= 0);
	if (f->kid == 0) {
		pause();
		_exit(0);
	}
	fake_header(f);
	for (uint32_t i = 0; i < nexec; i++) {
		atomic_store(&fake_slot(f, i)->ctr.tasks_run, 100 + i);
		fake_slot(f, i)->cpu = fake_slot(f, i)->node = -1;
	}
}

static void fake_stop(struct fake *f)
{
	kill(f->kid, SIGKILL);
	waitpid(f->kid, NULL, 0);
	munmap(f->h, f->size);
	close(f->fd);
}

/* A runtime between its memfd_create() and its seals (sized, the header
 * still zero: cbcmn__memfd_sealed()) is not one yet: -ENOENT, which a
 * watcher waiting for its target's runtime (cbcmn-top -- CMD) waits on.
 * Before, -EPROTO, as for a layout unknown: cbcmn-top --record of a
 * program starting under load failed with "Protocol error" (1 in 50
 * runs of test_toprecord's events test beside scripts/hog.sh). */
static void test_segment_not_sealed_yet_is_no_runtime_yet(void **state)
{
	(void)state;
	int fd = memfd_create(CBCMN__SEG_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 2 * sysconf(_SC_PAGESIZE)), 0);
	pid_t kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		pause();
		_exit(0);
	}
	cbcmn_watch *w = NULL;
	int rc = cbcmn_watch_open(kid, 0, &w);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	close(fd);
	cbcmn_watch_close(w);
	assert_int_equal(rc, -ENOENT);
}

/* A target that shrinks its segment under a watcher's mapping: reading the
 * pages past the new end would be SIGBUS.  Unsealed segments are refused;
 * a sealed one cannot shrink. */
static void test_shrunk_segment_no_sigbus(void **state)
{
	(void)state;
	struct fake f;
	fake_start(&f, false, 1);
	cbcmn_watch *w = NULL;
	cbcmn_stats s;
	int rc = cbcmn_watch_open(f.kid, 0, &w);
	if (rc == 0) {
		/* Only without the fix: shrink, then read (SIGBUS here). */
		assert_int_equal(ftruncate(f.fd, 0), 0);
		cbcmn_watch_read(w, &s, NULL, 0);
		cbcmn_watch_close(w);
	}
	assert_int_equal(rc, -EPROTO);
	assert_null(w);
	fake_stop(&f);

	fake_start(&f, true, 1);
	assert_int_equal(cbcmn_watch_open(f.kid, 0, &w), 0);
	assert_int_equal(ftruncate(f.fd, 0), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(cbcmn_watch_read(w, &s, NULL, 0), 0);
	assert_int_equal(s.total.tasks_run, 100);
	cbcmn_watch_close(w);
	fake_stop(&f);
}

/* A FIFO, in a directory of its own, whose opens (not as a path) the
 * returned inotify descriptor reports. */
static int fifo_watched(char *dir, char *fifo, size_t len)
{
	assert_non_null(mkdtemp(dir));
	snprintf(fifo, len, "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	assert_true(in >= 0);
	assert_true(inotify_add_watch(in, fifo, IN_OPEN) >= 0);
	return in;
}

static int fifo_opens(int in)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	int n = 0;
	for (ssize_t r; (r = read(in, buf, sizeof(buf))) > 0;)
		for (char *p = buf; p < buf + r; p += sizeof(struct inotify_event) + ((struct inotify_event *)p)->len)
			n++;
	return n;
}

/* The descriptor a watcher found by its name is checked before it is
 * opened: a FIFO (as a device node, whose open alone acts, with the
 * watcher's credentials) is never opened, nor a memfd of another name;
 * a runtime's is. */
static void test_memfd_open_checks_before_it_opens(void **state)
{
	(void)state;
	char dir[] = "/tmp/cbcmn-watch-fifo-XXXXXX", fifo[64];
	int in = fifo_watched(dir, fifo, sizeof(fifo));
	int path = open(fifo, O_PATH | O_CLOEXEC);
	assert_true(path >= 0);
	struct stat st;
	struct cbcmn__seg_hdr h;
	assert_int_equal(cbcmn__memfd_open(getpid(), path, CBCMN__SEG_NAME, O_RDWR, &st, &h, sizeof(h)),
			 -ENOENT);
	assert_int_equal(fifo_opens(in), 0);
	int other = cbcmn__memfd_sealed("cbcmn-other", 4096);
	int ours = cbcmn__memfd_sealed(CBCMN__SEG_NAME, 4096);
	assert_true(other >= 0 && ours >= 0);
	assert_int_equal(cbcmn__memfd_open(getpid(), other, CBCMN__SEG_NAME, O_RDONLY, &st, &h,
					   sizeof(h)),
			 -ENOENT);
	int fd = cbcmn__memfd_open(getpid(), ours, CBCMN__SEG_NAME, O_RDONLY, &st, &h, sizeof(h));
	assert_true(fd >= 0);
	close(fd);
	close(other);
	close(ours);
	close(path);
	close(in);
	unlink(fifo);
	rmdir(dir);
}

/* A target that swaps, at the descriptor of its segment, the memfd and a
 * FIFO (opened as a path: no permission needed, no open) as fast as it
 * can: a watcher that opened /proc/PID/fd/N after it listed the name
 * opened the FIFO within a few tries, with its own credentials (a root
 * cbcmn-top, a device node: a watchdog armed).  Bounded: 1 s. */
static void test_watch_of_a_target_swapping_its_descriptor_opens_only_memfds(void **state)
{
	(void)state;
	char dir[] = "/tmp/cbcmn-watch-swap-XXXXXX", fifo[64];
	int in = fifo_watched(dir, fifo, sizeof(fifo));
	fflush(NULL);
	pid_t kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int seg = cbcmn__memfd_sealed(CBCMN__SEG_NAME, 8192);
		int path = open(fifo, O_PATH);
		if (seg < 0 || path < 0)
			_exit(1);
		for (;;) {
			dup2(seg, 200);
			dup2(path, 200);
		}
	}
	int tries = 0, opens = 0;
	for (uint64_t end = t_now_ns() + 1000000000ull; t_now_ns() < end && !opens; tries++) {
		cbcmn_watch *w = NULL;
		if (cbcmn_watch_open(kid, 0, &w) == 0)
			cbcmn_watch_close(w); /* not a live runtime's: never */
		opens = fifo_opens(in);
	}
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	close(in);
	unlink(fifo);
	rmdir(dir);
	printf("    %d watch opens of a swapping target: the FIFO opened %d times\n", tries, opens);
	assert_int_equal(opens, 0);
}

/* A hostile target's mailbox histograms: per executor the quantile
 * saturates its sums (cbcmn_stats_hist_quantile()), but the total's
 * histogram was summed over executors with a plain add, so 2^64 - 1 and 2
 * samples in slot 1 wrapped to 1, and the total's p99 climbed to slot 5
 * (63) while every executor's was 3. */
static void test_forged_mailbox_hist_total_does_not_wrap(void **state)
{
	(void)state;
	struct fake f;
	fake_start(&f, true, 2);
	atomic_store(&fake_slot(&f, 0)->mbox.depth_hist[1], UINT64_MAX);
	atomic_store(&fake_slot(&f, 1)->mbox.depth_hist[1], 2);
	atomic_store(&fake_slot(&f, 1)->mbox.depth_hist[5], 1);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(f.kid, 0, &w), 0);
	cbcmn_stats s;
	cbcmn_executor_stats per[2];
	int rc = cbcmn_watch_read(w, &s, per, 2);
	cbcmn_watch_close(w);
	fake_stop(&f); /* first: a failure must leave no forged segment behind */
	assert_int_equal(rc, 0);
	assert_int_equal(per[0].mailbox_depth_p99, 3);
	assert_int_equal(per[1].mailbox_depth_p99, 63); /* 1 of 3 samples in slot 5 */
	assert_true(s.total.mailbox_depth_hist[1] == UINT64_MAX);
	assert_int_equal(s.total.mailbox_depth_p99, 3);
}

/* A gauge's two shares (statseg.h) forged to the ends of their range:
 * summed modulo 2^32 (version 6), a negative sum reads 0 and nothing
 * overflows (before: INT64_MIN + -1, signed overflow, read as 2^63 - 1
 * actors receiving; found by fuzz_watch). */
static void test_forged_gauge_shares_saturate(void **state)
{
	(void)state;
	struct fake f;
	fake_start(&f, true, 1);
	struct cbcmn__seg_exec *x = fake_slot(&f, 0);
	atomic_store(&x->act.receiving, INT64_MIN);
	atomic_store(&x->act_own.receiving, -1);
	atomic_store(&x->act.waiting, INT64_MAX);
	atomic_store(&x->act_own.waiting, 1);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(f.kid, 0, &w), 0);
	cbcmn_stats s;
	cbcmn_executor_stats per[1];
	int rc = cbcmn_watch_read(w, &s, per, 1);
	cbcmn_watch_close(w);
	fake_stop(&f); /* first: a failure must leave no forged segment behind */
	assert_int_equal(rc, 0);
	assert_true(per[0].actors_receiving == 0);  /* 0 + -1 */
	assert_true(per[0].actors_waiting == 0);    /* 0xffffffff + 1: 0 */
}

/* The header's geometry changes after the watch was opened: the reader
 * keeps using what it checked at open, never reading outside its map. */
static void test_header_rewritten_after_open(void **state)
{
	(void)state;
	struct fake f;
	fake_start(&f, true, 2);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(f.kid, 0, &w), 0);
	cbcmn_stats s;
	cbcmn_executor_stats per[2];
	f.h->nexec = 0x7fffffff;
	f.h->stride = 0x7ffff000;
	f.h->slots_off = 0xfffff000;
	f.h->start_ns = UINT64_MAX;
	assert_int_equal(cbcmn_watch_read(w, &s, per, 2), 0);
	assert_int_equal(s.executors, 2);
	assert_int_equal(per[0].tasks_run, 100);
	assert_int_equal(per[1].tasks_run, 101);
	assert_int_equal(s.pid, f.kid);
	cbcmn_watch_close(w);
	fake_stop(&f);
}

/* Garbage in every header field a reader depends on: an error, never a
 * crash, and no descriptor or mapping left behind. */
static void test_corrupt_headers_refused(void **state)
{
	(void)state;
	struct fake f;
	fake_start(&f, true, 2);
	const size_t page = f.off;
	struct {
		const char *what;
		size_t field;   /* offsetof, in struct cbcmn__seg_hdr */
		uint32_t value;
		int want;
	} bad[] = {
		{"version", offsetof(struct cbcmn__seg_hdr, version), CBCMN__SEG_VERSION + 1, -EPROTO},
		{"hdr_size", offsetof(struct cbcmn__seg_hdr, hdr_size), 8, -EPROTO},
		{"exec_size", offsetof(struct cbcmn__seg_hdr, exec_size), 8, -EPROTO},
		{"no executor", offsetof(struct cbcmn__seg_hdr, nexec), 0, -ENOENT},
		{"nexec past the file", offsetof(struct cbcmn__seg_hdr, nexec), 3, -ENOENT},
		{"nexec huge", offsetof(struct cbcmn__seg_hdr, nexec), UINT32_MAX, -ENOENT},
		{"stride huge", offsetof(struct cbcmn__seg_hdr, stride), 0x80000000u, -ENOENT},
		{"stride short", offsetof(struct cbcmn__seg_hdr, stride), 8, -ENOENT},
		{"stride misaligned", offsetof(struct cbcmn__seg_hdr, stride),
		 (uint32_t)sizeof(struct cbcmn__seg_exec) + 4, -ENOENT},
		{"slots in the header", offsetof(struct cbcmn__seg_hdr, slots_off), 0, -ENOENT},
		{"slots misaligned", offsetof(struct cbcmn__seg_hdr, slots_off), (uint32_t)page + 4,
		 -ENOENT},
		{"slots past the file", offsetof(struct cbcmn__seg_hdr, slots_off), UINT32_MAX,
		 -ENOENT},
		{"another pid", offsetof(struct cbcmn__seg_hdr, pid), 1, -ENOENT},
		{"not alive", offsetof(struct cbcmn__seg_hdr, alive), 0, -ENOENT},
	};
	int fds = t_count_fds();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		fake_header(&f);
		memcpy((char *)f.h + bad[i].field, &bad[i].value, sizeof(uint32_t));
		cbcmn_watch *w = NULL;
		int rc = cbcmn_watch_open(f.kid, 0, &w);
		if (rc != bad[i].want)
			fail_msg("%s: %d, not %d", bad[i].what, rc, bad[i].want);
		assert_null(w);
	}
	fake_header(&f);
	f.h->magic = 0;
	cbcmn_watch *w = NULL;
	assert_int_equal(cbcmn_watch_open(f.kid, 0, &w), -ENOENT);
	assert_int_equal(t_count_fds(), fds);
	fake_header(&f);
	assert_int_equal(cbcmn_watch_open(f.kid, 0, &w), 0);
	cbcmn_watch_close(w);
	assert_int_equal(t_count_fds(), fds);
	fake_stop(&f);
}

/* The runtime seals its segment: it can never shrink under a watcher. */
static void test_runtime_segment_sealed(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	DIR *d = opendir("/proc/self/fd");
	assert_non_null(d);
	int found = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		char target[128];
		ssize_t len = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
		if (len < 0)
			continue;
		target[len] = '\0';
		if (strncmp(target, "/memfd:" CBCMN__SEG_NAME " ", strlen("/memfd:" CBCMN__SEG_NAME " ")))
			continue;
		int fd = atoi(de->d_name);
		int seals = fcntl(fd, F_GET_SEALS);
		assert_int_equal(seals & T_SEALS, T_SEALS);
		assert_int_equal(ftruncate(fd, 0), -1);
		found++;
	}
	closedir(d);
	assert_int_equal(found, 1);
	t_destroy(rt);
}

/* An executor that retires reads STOPPED with no thread; started again, it
 * reads live with its new thread. */
static void test_retired_then_restarted(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.min_workers = 1;
	cfg.idle_retire_ms = 20;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &w), 0);
	cbcmn_stats s;
	cbcmn_executor_stats per[2];
	assert_int_equal(cbcmn_watch_read(w, &s, per, 2), 0);
	assert_int_equal(s.executors_live, 1);
	assert_int_equal(per[1].state, CBCMN_EXEC_STOPPED);
	assert_int_equal(per[1].tid, 0);
	for (int round = 0; round < 2; round++) {
		struct fib f = {.n = 10};
		assert_int_equal(t_run_pinned(rt, 1, fib_task, &f), 0);
		assert_int_equal(cbcmn_watch_read(w, &s, per, 2), 0);
		/* Retiring takes 20 ms idle: seen live before unless the host
		 * stalled us for that long. */
		if (per[1].tid > 0 && per[1].state != CBCMN_EXEC_STOPPED)
			assert_exec_thread(getpid(), per[1].tid, 1);
		uint64_t deadline = t_now_ns() + 5000000000ull;
		for (;;) {
			assert_int_equal(cbcmn_watch_read(w, &s, per, 2), 0);
			/* The retire count comes a step after the state. */
			if (s.executors_live == 1 && per[1].state == CBCMN_EXEC_STOPPED &&
			    s.executor_retires >= (uint64_t)round + 1)
				break;
			assert_true(t_now_ns() < deadline);
			usleep(1000);
		}
		assert_int_equal(per[1].tid, 0);
		assert_true(per[0].state != CBCMN_EXEC_STOPPED);
	}
	cbcmn_watch_close(w);
	t_destroy(rt);
}

static int64_t quitter(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	pthread_exit(NULL); /* ends the executor's thread (test_worker.c) */
	return 0;
}

/* An executor whose thread dies under a task gets a new thread: the watch
 * shows the new one, never the dead one. */
static void test_replaced_thread_published(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN)
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &w), 0);
	cbcmn_stats s;
	cbcmn_executor_stats per[1];
	assert_int_equal(cbcmn_watch_read(w, &s, per, 1), 0);
	int32_t old = per[0].tid;
	assert_true(old > 0);
	int saved, cap = t_stderr_capture(&saved); /* the runtime reports the death */
	int64_t r = 0;
	cbcmn_runtime_run(rt, quitter, NULL, &r);
	char text[512];
	t_stderr_restore(cap, saved, text, sizeof(text));
	assert_non_null(strstr(text, "a new thread takes over"));
	uint64_t deadline = t_now_ns() + 5000000000ull;
	for (;;) {
		assert_int_equal(cbcmn_watch_read(w, &s, per, 1), 0);
		if (per[0].tid > 0 && per[0].tid != old)
			break;
		assert_true(t_now_ns() < deadline);
		usleep(1000);
	}
	assert_exec_thread(getpid(), per[0].tid, 0);
	assert_true(per[0].state != CBCMN_EXEC_STOPPED);
	cbcmn_watch_close(w);
	t_destroy(rt);
}

/* Without memfd_create (seccomp says ENOSYS here) the runtime keeps its
 * statistics in anonymous shared memory: it works and snapshots, it just
 * cannot be watched. */
static void test_no_memfd_falls_back(void **state)
{
	(void)state;
#if defined(__x86_64__)
	const uint32_t arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
	const uint32_t arch = AUDIT_ARCH_AARCH64;
#else
	T_SKIP("no seccomp filter written for this architecture");
	const uint32_t arch = 0;
#endif
	pid_t kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		struct sock_filter prog[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog fp = {.len = sizeof(prog) / sizeof(prog[0]), .filter = prog};
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp) != 0)
			_exit(10);
		if (memfd_create("x", 0) >= 0 || errno != ENOSYS)
			_exit(11);
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 2;
		cbcmn_runtime *rt;
		if (cbcmn_runtime_create(&cfg, &rt) != 0)
			_exit(12);
		struct fib f = {.n = 15};
		if (cbcmn_runtime_run(rt, fib_task, &f, NULL) != 0)
			_exit(13);
		cbcmn_stats s;
		if (cbcmn_stats_snapshot(rt, &s, NULL, 0) != 0 || s.tasks_completed < 987 ||
		    s.executors != 2 || s.pid != getpid())
			_exit(14);
		cbcmn_watch *w;
		if (cbcmn_watch_open(getpid(), 0, &w) != -ENOENT)
			_exit(15);
		if (cbcmn_runtime_destroy(rt) != 0)
			_exit(16);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(kid, &st, 0), kid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* Under a file size limit (ulimit -f) smaller than the segment: its
 * ftruncate raised SIGXFSZ, whose default action killed the program in
 * cbcmn_runtime_create.  Now it is anonymous memory, as without memfds. */
static void test_segment_over_the_file_size_limit_does_not_kill_the_program(void **state)
{
	(void)state;
	fflush(NULL);
	pid_t kid = fork();
	assert_true(kid >= 0);
	if (kid == 0) {
		struct rlimit rl = {0, 0};
		if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
			_exit(10);
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cbcmn_runtime *rt;
		if (cbcmn_runtime_create(&cfg, &rt) != 0)
			_exit(11);
		cbcmn_watch *w;
		int rc = cbcmn_watch_open(getpid(), 0, &w);
		cbcmn_runtime_destroy(rt);
		_exit(rc == -ENOENT ? 0 : 12);
	}
	int st;
	assert_int_equal(waitpid(kid, &st, 0), kid);
	if (WIFSIGNALED(st))
		fail_msg("the program was killed by signal %d (SIGXFSZ %d)", WTERMSIG(st), SIGXFSZ);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_self_matches_snapshot),
		T_WATCHED_TEST(test_other_process),
		T_WATCHED_TEST(test_process_exit),
		T_WATCHED_TEST(test_two_runtimes),
		T_WATCHED_TEST(test_errors),
		T_WATCHED_TEST(test_not_permitted),
		T_WATCHED_TEST(test_shrunk_segment_no_sigbus),
		T_WATCHED_TEST(test_memfd_open_checks_before_it_opens),
		T_WATCHED_TEST(test_watch_of_a_target_swapping_its_descriptor_opens_only_memfds),
		T_WATCHED_TEST(test_header_rewritten_after_open),
		T_WATCHED_TEST(test_forged_mailbox_hist_total_does_not_wrap),
		T_WATCHED_TEST(test_forged_gauge_shares_saturate),
		T_WATCHED_TEST(test_corrupt_headers_refused),
		T_WATCHED_TEST(test_runtime_segment_sealed),
		T_WATCHED_TEST(test_retired_then_restarted),
		T_WATCHED_TEST(test_replaced_thread_published),
		T_WATCHED_TEST(test_no_memfd_falls_back),
		T_WATCHED_TEST(test_segment_not_sealed_yet_is_no_runtime_yet),
		T_WATCHED_TEST(test_descriptor_reused_for_the_same_inode_elsewhere_is_gone),
		T_WATCHED_TEST(test_segment_over_the_file_size_limit_does_not_kill_the_program),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
