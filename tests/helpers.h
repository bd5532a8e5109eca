/* helpers.h: shared by the cmocka suites. */
#ifndef CBCMN_TEST_HELPERS_H
#define CBCMN_TEST_HELPERS_H

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "cbcmn.h"

/* Output goes to a pipe under run-tests.sh: line-buffered, so that a suite
 * that dies (a watchdog's _exit, a signal) still shows how far it got. */
__attribute__((constructor)) static void t_line_buffered(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
}

/* A feature this machine lacks: say why, then skip (never a silent pass). */
#define T_SKIP(...)                                                            \
	do {                                                                    \
		printf("[  SKIP    ] ");                                        \
		printf(__VA_ARGS__);                                            \
		printf("\n");                                                   \
		skip();                                                         \
	} while (0)

/* The I/O backend a default runtime gets here (CBCMN_BACKEND, or no
 * io_uring: epoll), asked once of a one-executor runtime. */
static inline uint32_t t_backend(void)
{
	static uint32_t b;
	if (!b) {
		cbcmn_config c;
		cbcmn_config_init(&c);
		c.workers = 1;
		cbcmn_runtime *rt;
		cbcmn_stats st;
		if (cbcmn_runtime_create(&c, &rt) == 0) {
			if (cbcmn_stats_snapshot(rt, &st, NULL, 0) == 0)
				b = st.backend;
			cbcmn_runtime_destroy(rt);
		}
	}
	return b;
}

/* A test of io_uring itself (its SQEs, rings, multishot, fault sites):
 * skipped, saying so, when the runtimes run on epoll. */
#define T_SKIP_UNLESS_IO_URING(what)                                            \
	do {                                                                    \
		if (t_backend() == CBCMN_BACKEND_EPOLL) {                       \
			T_SKIP("%s: io_uring only, the runtime runs on epoll", what); \
			return;                                                 \
		}                                                               \
	} while (0)

#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#else
#define T_ASAN 0
#endif
/* ASan's fake stacks (ASAN_OPTIONS=detect_stack_use_after_return=1, or a
 * suite that sets the switch, test_sysstack_uar): locals whose address is
 * taken live in libasan's fake frames, not on the stack.  A test whose
 * premise is a real stack frame skips, saying so. */
#if defined(__SANITIZE_ADDRESS__)
extern int __asan_option_detect_stack_use_after_return;
#define T_FAKE_STACKS (__asan_option_detect_stack_use_after_return != 0)
#else
#define T_FAKE_STACKS 0
#endif
#if defined(__SANITIZE_THREAD__)
#define T_TSAN 1
#else
#define T_TSAN 0
#endif
/* Sanitizers slow everything down: scale stress loops by this. */
#define T_SCALE(n) ((T_ASAN || T_TSAN) ? ((n) / 10 ? (n) / 10 : 1) : (n))

/* CBCMN_TEST_SLOW=N (1..100, default 1): the machine is N times slower
 * than a real one, an emulated guest (scripts/kernel-matrix.sh sets it
 * under QEMU's TCG, where a program start or a 9p file read takes 100-500
 * times longer): every hang bound below (T_STALL_S, the watchdogs) is N
 * times longer.  Only how long a test waits before calling it a hang
 * changes, never what it asserts.  Read once. */
static inline unsigned t_slow(void)
{
	/* Relaxed: any thread may compute it first; all compute the same. */
	static unsigned f;
	unsigned v = __atomic_load_n(&f, __ATOMIC_RELAXED);
	if (!v) {
		const char *e = getenv("CBCMN_TEST_SLOW");
		long l = e ? strtol(e, NULL, 10) : 1;
		v = l >= 1 && l <= 100 ? (unsigned)l : 1;
		__atomic_store_n(&f, v, __ATOMIC_RELAXED);
	}
	return v;
}

/* A wait longer than this is a hang (a lost wake-up, a timeout that never
 * fires), not a slow machine: far beyond any delay that load causes (every
 * CPU busy with something else, sanitizers on), yet well inside the
 * watchdog (T_WATCHDOG_S), so that a hang fails with its own message.
 * Tests assert what happened (order, nothing early, nothing lost), never
 * how fast: a deadline exists only to end a test that would not end. */
#define T_STALL_S (t_slow() * ((T_ASAN || T_TSAN) ? 60u : 20u))
#define T_STALL_NS ((uint64_t)T_STALL_S * 1000000000ull)

/* Clock id's time, ns. */
static inline uint64_t t_clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t t_now_ns(void)
{
	return t_clock_ns(CLOCK_MONOTONIC);
}

/* A runtime from cfg, or the test fails saying why. */
static inline cbcmn_runtime *t_runtime_cfg(const cbcmn_config *cfg)
{
	cbcmn_runtime *rt = NULL;
	int rc = cbcmn_runtime_create(cfg, &rt);
	if (rc != 0)
		fail_msg("cbcmn_runtime_create: %s", cbcmn_strerror(rc));
	return rt;
}

/* A runtime with workers executors and otherwise the defaults. */
static inline cbcmn_runtime *t_runtime(uint32_t workers)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	return t_runtime_cfg(&cfg);
}

/* A lab-mode runtime (one executor, the virtual clock) seeded with seed,
 * otherwise the defaults. */
static inline cbcmn_runtime *t_runtime_lab(uint64_t seed)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.flags = CBCMN_CONFIG_LAB;
	cfg.seed = seed;
	return t_runtime_cfg(&cfg);
}

/* A runtime of profile p with workers executors and
 * otherwise the defaults. */
static inline cbcmn_runtime *t_runtime_profile(cbcmn_profile p, uint32_t workers)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cfg.profile = p;
	return t_runtime_cfg(&cfg);
}

static inline void t_destroy(cbcmn_runtime *rt)
{
	int rc = cbcmn_runtime_destroy(rt);
	if (rc != 0)
		fail_msg("cbcmn_runtime_destroy: %s", cbcmn_strerror(rc));
}

/* ---- for suites whose tasks run on executor threads ------------------------ */

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* cmocka's assertions longjmp out of the test, which must never happen on an
 * executor thread: tasks record the first failed check and the test thread
 * asserts on it once the tasks are done. */
static _Atomic int task_bad_line __attribute__((unused));
#define TASK_CHECK(c)                                                          \
	do {                                                                    \
		if (!(c)) {                                                     \
			int z_ = 0;                                             \
			atomic_compare_exchange_strong(&task_bad_line, &z_, __LINE__); \
		}                                                               \
	} while (0)
#define ASSERT_TASK_CHECKS()                                                   \
	do {                                                                    \
		int l_ = atomic_exchange(&task_bad_line, 0);                    \
		if (l_)                                                         \
			fail_msg("check inside a task failed at line %d", l_);  \
	} while (0)

/* A hang (a lost wake-up, a waiter nobody wakes) must fail the suite, not
 * stall it: tests run under an alarm that names them. */
static const char *volatile t_watchdog_name = "?";

/* Appends file `dir`/`name` to out (at most cap bytes, newlines made
 * ';'); for the watchdog, so async-signal-safe: system calls only. */
static inline size_t t_hang_cat(char *out, size_t cap, const char *dir, const char *name)
{
	char path[96];
	size_t n = 0;
	for (const char *p = dir; *p && n < sizeof(path) - 1; p++)
		path[n++] = *p;
	for (const char *p = name; *p && n < sizeof(path) - 1; p++)
		path[n++] = *p;
	path[n] = 0;
	int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t got = read(fd, out, cap);
	close(fd);
	size_t len = got > 0 ? (size_t)got : 0;
	while (len && out[len - 1] == '\n')
		len--;
	for (size_t i = 0; i < len; i++)
		if (out[i] == '\n')
			out[i] = ';';
	return len;
}

/* Appends the decimal digits of v to out (async-signal-safe). */
static inline size_t t_hang_num(char *out, long v)
{
	char d[24];
	size_t n = 0, w = 0;
	do
		d[n++] = (char)('0' + v % 10);
	while ((v /= 10) && n < sizeof(d));
	while (n)
		out[w++] = d[--n];
	return w;
}

/* fn(name, arg) for each entry of directory path whose name begins with a
 * digit (a process or thread id), for the watchdog: system calls only. */
static inline void t_hang_each(const char *path, void (*fn)(const char *name, void *arg), void *arg)
{
	int dfd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	char ents[4096];
	long n;
	while ((n = syscall(SYS_getdents64, dfd, ents, sizeof(ents))) > 0) {
		for (long off = 0; off < n;) {
			/* struct linux_dirent64: ino, off, reclen, type, name */
			unsigned short reclen;
			memcpy(&reclen, ents + off + 16, sizeof(reclen));
			const char *name = ents + off + 19;
			off += reclen;
			if (name[0] >= '0' && name[0] <= '9')
				fn(name, arg);
		}
	}
	close(dfd);
}

/* A thread's line, of process *pid (self when 0). */
static inline void t_hang_thread(const char *tid, void *arg)
{
	long pid = *(const long *)arg;
	char dir[72] = "/proc/", line[1024];
	size_t d = 6, w = 0;
	if (pid) {
		d += t_hang_num(dir + d, pid);
		memcpy(dir + d, "/task/", 6);
		d += 6;
	} else {
		memcpy(dir + d, "self/task/", 10);
		d += 10;
	}
	for (const char *p = tid; *p && d < sizeof(dir) - 2; p++)
		dir[d++] = *p;
	dir[d++] = '/';
	dir[d] = 0;
	static const char *const what[] = {"comm", "wchan", "stack"};
	memcpy(line, pid ? "  child " : "  thread ", pid ? 8 : 9);
	w = pid ? 8 : 9;
	if (pid) {
		w += t_hang_num(line + w, pid);
		line[w++] = ' ';
	}
	for (const char *p = tid; *p && w < 48; p++)
		line[w++] = *p;
	for (size_t k = 0; k < 3; k++) {
		line[w++] = ' ';
		w += t_hang_cat(line + w, sizeof(line) - w - 2, dir, what[k]);
	}
	line[w++] = '\n';
	ssize_t rc = write(2, line, w);
	(void)rc;
}

/* One line per thread of process pid (self when 0) as the watchdog fires:
 * id, name, state, where it sleeps in the kernel, and its kernel stack
 * where readable (root): the executors, the pool, and io_uring's io-wq
 * workers ("iou-wrk-N"), which show what a hung call waits on (a guest
 * run of a hang decides from this one line per thread, docs/STATUS.md). */
static inline void t_hang_proc(long pid)
{
	char path[40] = "/proc/";
	size_t b = 6;
	if (pid) {
		b += t_hang_num(path + b, pid);
		memcpy(path + b, "/task", 6);
	} else {
		memcpy(path + b, "self/task", 10);
	}
	t_hang_each(path, t_hang_thread, &pid);
}

/* The threads of parent's children, and of theirs (a test's target, the
 * tools it runs): the test may hang waiting for one of them (waitpid),
 * which its own threads cannot show.  Found by their parent in
 * /proc/PID/stat ("children" needs CONFIG_PROC_CHILDREN).  arg: the
 * parent's id and the depth, at most 3. */
static inline void t_hang_child(const char *name, void *arg)
{
	const long *pd = arg;
	long pid = 0;
	for (const char *p = name; *p >= '0' && *p <= '9'; p++)
		pid = pid * 10 + (*p - '0');
	char dir[32] = "/proc/", st[512];
	size_t d = 6 + t_hang_num(dir + 6, pid);
	memcpy(dir + d, "/", 2);
	size_t len = t_hang_cat(st, sizeof(st) - 1, dir, "stat");
	/* "pid (comm) S ppid ...": the comm may hold ") " */
	size_t i = len;
	while (i && st[i - 1] != ')')
		i--;
	long ppid = 0;
	for (i += 3; i < len && st[i] >= '0' && st[i] <= '9'; i++)
		ppid = ppid * 10 + (st[i] - '0');
	if (ppid != pd[0] || !len)
		return;
	t_hang_proc(pid);
	long next[2] = {pid, pd[1] + 1};
	if (next[1] <= 3)
		t_hang_each("/proc", t_hang_child, next);
}

static inline void t_hang_threads(void)
{
	long self[2] = {getpid(), 0};
	t_hang_proc(0);
	t_hang_each("/proc", t_hang_child, self);
}

static void t_watchdog_fire(int sig)
{
	static const char m[] = "\n[  HANG    ] test did not finish in time: ";
	(void)sig;
	ssize_t rc = write(2, m, sizeof(m) - 1);
	rc = write(2, (const char *)t_watchdog_name, strlen((const char *)t_watchdog_name));
	rc = write(2, "\n", 1);
	(void)rc;
	t_hang_threads();
	_exit(1);
}

static inline void t_watchdog_start(const char *name, unsigned secs)
{
	t_watchdog_name = name;
	atomic_store(&task_bad_line, 0);
	signal(SIGALRM, t_watchdog_fire);
	alarm(secs);
}

static inline void t_watchdog_stop(void)
{
	alarm(0);
}

/* Runs fn(arg) on a thread of its own and waits at most secs for it: a test
 * that may block forever fails on its own instead of taking the suite with
 * it.  On time-out the thread is left behind, blocked, with its runtime. */
struct t_bounded {
	void (*fn)(void *);
	void *arg;
};

static inline void *t_bounded_main(void *p)
{
	struct t_bounded *b = p;
	b->fn(b->arg);
	return NULL;
}

static inline bool run_bounded(void (*fn)(void *), void *arg, unsigned secs)
{
	struct t_bounded *b = malloc(sizeof(*b));
	assert_non_null(b);
	b->fn = fn;
	b->arg = arg;
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, t_bounded_main, b), 0);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += secs;
	if (pthread_timedjoin_np(th, NULL, &ts) == 0) {
		free(b);
		return true;
	}
	pthread_detach(th);
	return false;
}


/* The usual watchdog for a test whose cmocka state is its name. */
#define T_WATCHDOG_S (t_slow() * ((T_ASAN || T_TSAN) ? 170u : 55u))

static inline void t_fds_mark(void);
static inline void t_fds_sweep(const char *test);

static inline int t_watchdog_setup(void **state)
{
	t_fds_mark();
	t_watchdog_start(*state, T_WATCHDOG_S);
	return 0;
}

static inline int t_watchdog_teardown(void **state)
{
	t_watchdog_stop();
	t_fds_sweep(*state);
	return 0;
}

#define T_WATCHED_TEST(f)                                                      \
	cmocka_unit_test_prestate_setup_teardown(f, t_watchdog_setup, t_watchdog_teardown, \
						 (void *)#f)

/* A test that drives a pipeline of processes (a script running the
 * tools, each loading eBPF programs: a minute, several on a loaded
 * machine) gets three times the watchdog. */
static inline int t_watchdog_setup_long(void **state)
{
	t_fds_mark();
	t_watchdog_start(*state, 3 * T_WATCHDOG_S);
	return 0;
}

#define T_WATCHED_TEST_LONG(f)                                                 \
	cmocka_unit_test_prestate_setup_teardown(f, t_watchdog_setup_long, t_watchdog_teardown, \
						 (void *)#f)

/* A runtime with workers executors, cfg.flags = flags and cfg.ring_flags =
 * ring_flags. */
static inline cbcmn_runtime *t_runtime_with(uint32_t workers, uint32_t flags, uint32_t ring_flags)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cfg.flags = flags;
	cfg.ring_flags = ring_flags;
	return t_runtime_cfg(&cfg);
}

/* A runtime with workers executors and cfg.flags = flags. */
static inline cbcmn_runtime *t_runtime_flags(uint32_t workers, uint32_t flags)
{
	return t_runtime_with(workers, flags, 0);
}

/* Redirect stderr to an unlinked temp file, to check what the library
 * says there; t_stderr_restore() puts it back and reads the text. */
static inline int t_stderr_capture(int *saved)
{
	char path[] = "/tmp/cbcmn-test-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	fflush(stderr);
	*saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	return fd;
}

/* Run fn(arg) as a root task; it must return want, and no check inside a
 * task may have failed. */
static inline void t_run(cbcmn_runtime *rt, cbcmn_task_fn fn, void *arg, int64_t want)
{
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, fn, arg, &r), 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, want);
}

/* Run fn(arg) as a task pinned to executor shard; returns its result. */
struct t_pinned_call {
	cbcmn_task_fn fn;
	void *arg;
	uint32_t shard;
};

static inline int64_t t_pinned_main(cbcmn_cx *cx, void *arg)
{
	struct t_pinned_call *c = arg;
	cbcmn_nursery *n;
	cbcmn_task *t;
	int64_t r = -1;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -1;
	int rc = cbcmn_nursery_spawn_pinned(cx, n, c->shard, c->fn, c->arg, &t);
	cbcmn_nursery_await_all(cx, n);
	if (rc == 0)
		cbcmn_task_join(cx, t, &r);
	return r;
}

static inline int64_t t_run_pinned(cbcmn_runtime *rt, uint32_t shard, cbcmn_task_fn fn, void *arg)
{
	struct t_pinned_call c = {fn, arg, shard};
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, t_pinned_main, &c, &r), 0);
	return r;
}

/* Entries of a /proc directory, "." and ".." aside. */
#include <dirent.h>
#include <sys/resource.h>
static inline int t_dir_entries(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Open descriptors and threads of this process right now. */
static inline int t_count_fds(void)
{
	return t_dir_entries("/proc/self/fd") - 1; /* the directory's own */
}

static inline int t_count_threads(void)
{
	return t_dir_entries("/proc/self/task");
}

/* ---- stack overflows and mappings ------------------------------------------ */

#include <sys/resource.h>

/* fork() for a child that may die of a signal, without a core file.  The
 * pid, 0 in the child. */
__attribute__((unused)) static pid_t t_fork_coreless(void)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
	}
	return pid;
}

/* Keeps the compiler from calling t_recurse an infinite recursion. */
static volatile int64_t t_depth_limit __attribute__((unused)) = INT64_MAX;

/* Recurses with 512-byte frames until the stack runs out. */
__attribute__((unused)) static int64_t t_recurse(volatile char *p, int64_t depth)
{
	volatile char pad[512];
	pad[0] = (char)depth;
	pad[511] = p ? p[0] : 0;
	if (depth >= t_depth_limit)
		return 0;
	return t_recurse(pad, depth + 1) + pad[7]; /* not a tail call */
}

/* The permissions ("rw-p", "---p") of the mapping holding addr, and where
 * it ends (end may be NULL).  False if nothing is mapped there. */
__attribute__((unused)) static bool t_maps_perms(const void *addr, char perms[5], uintptr_t *end)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return false;
	char line[512];
	bool found = false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char p[5];
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, p) != 3)
			continue;
		if ((uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
			memcpy(perms, p, 5);
			if (end)
				*end = hi;
			found = true;
			break;
		}
	}
	fclose(f);
	return found;
}

static inline void t_stderr_restore(int fd, int saved, char *buf, size_t len)
{
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	ssize_t n = pread(fd, buf, len - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	close(fd);
}

/* cbcmn_runtime_create(cfg) with var=value in the environment fails with
 * -EINVAL and a line on stderr that names var (a variable the library
 * refuses rather than misreads). */
static inline void t_create_refuses_env(const cbcmn_config *cfg, const char *var,
					const char *value)
{
	cbcmn_runtime *rt = NULL;
	assert_int_equal(setenv(var, value, 1), 0);
	int saved, fd = t_stderr_capture(&saved);
	int rc = cbcmn_runtime_create(cfg, &rt);
	char msg[512];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	unsetenv(var);
	if (rt)
		t_destroy(rt);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(msg, var));
}

/* ---- descriptors: what a failed test leaves open, and how many there are -- */

/* A test that fails half-way (cmocka's assertions jump out of it) leaves
 * its sockets and pipes open; with RLIMIT_NOFILE at the usual 1024 a
 * thousand of them make every later test's cbcmn_runtime_create() fail
 * with EMFILE.  T_WATCHED_TEST marks the descriptors open before the test
 * and closes afterwards the sockets and pipes it left.  Only those: a
 * runtime the failed test left behind still owns its rings, eventfds and
 * memfds, and its executor threads may still use them. */
#define T_FDS_MAX (1u << 20)
static unsigned char t_fds_open[T_FDS_MAX / 8];

static inline void t_fds_mark(void)
{
	memset(t_fds_open, 0, sizeof(t_fds_open));
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		long fd = de->d_name[0] == '.' ? -1 : strtol(de->d_name, NULL, 10);
		if (fd >= 0 && fd < (long)T_FDS_MAX)
			t_fds_open[fd / 8] |= (unsigned char)(1u << (fd % 8));
	}
	closedir(d);
}

/* A socket or a pipe, that fd was not open at t_fds_mark()? */
static inline bool t_fds_left(long fd)
{
	if (fd < 0 || fd >= (long)T_FDS_MAX || (t_fds_open[fd / 8] & (1u << (fd % 8))))
		return false;
	char path[64], what[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%ld", fd);
	ssize_t k = readlink(path, what, sizeof(what) - 1);
	if (k <= 0)
		return false;
	what[k] = 0;
	return !strncmp(what, "socket:", 7) || !strncmp(what, "pipe:", 5);
}

static inline void t_fds_sweep(const char *test)
{
	size_t n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (d) {
		/* Closed after the listing: closing while reading it skips
		 * entries. */
		int *left = NULL;
		size_t cap = 0;
		struct dirent *de;
		while ((de = readdir(d))) {
			long fd = de->d_name[0] == '.' ? -1 : strtol(de->d_name, NULL, 10);
			if (fd == dirfd(d) || !t_fds_left(fd))
				continue;
			if (n == cap) {
				cap = cap ? 2 * cap : 64;
				int *more = realloc(left, cap * sizeof(*left));
				if (!more)
					break;
				left = more;
			}
			left[n++] = (int)fd;
		}
		closedir(d);
		for (size_t i = 0; i < n; i++)
			close(left[i]);
		free(left);
	} else {
		/* At the limit (the very case this is for), opendir() has no
		 * descriptor left: look at every number below the limit. */
		struct rlimit rl;
		long max = getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur > T_FDS_MAX
				   ? (long)T_FDS_MAX
				   : (long)rl.rlim_cur;
		for (long fd = 0; fd < max; fd++)
			if (t_fds_left(fd))
				n += close((int)fd) == 0;
	}
	if (n)
		printf("[  FDS     ] %s left %zu sockets and pipes open: closed\n", test ? test : "?", n);
}

/* Descriptors this process may still open.  The soft RLIMIT_NOFILE is
 * raised to the hard limit first (the usual soft limit is 1024, a test
 * that wants more may take what the hard limit allows); the hard limit
 * itself is the administrator's and stays. */
static inline long t_nofile_free(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return 0;
	if (rl.rlim_cur < rl.rlim_max) {
		struct rlimit up = {rl.rlim_max, rl.rlim_max};
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl = up;
	}
	long lim = rl.rlim_cur > (rlim_t)INT32_MAX ? INT32_MAX : (long)rl.rlim_cur;
	return lim - t_count_fds();
}

/* How many of want units (of per descriptors each) fit in what this
 * process may still open, keeping spare for the runtime (rings, eventfds)
 * and the test's own.  When fewer than want fit, says how many and why:
 * a test sizes itself to what the limits give instead of failing with
 * EMFILE half-way. */
static inline uint32_t t_nofile_fit(const char *what, uint32_t want, uint32_t per, uint32_t spare)
{
	long room = t_nofile_free() - (long)spare;
	uint32_t n = room <= 0 ? 0 : (uint64_t)room / per < want ? (uint32_t)(room / per) : want;
	if (n < want) {
		struct rlimit rl;
		getrlimit(RLIMIT_NOFILE, &rl);
		printf("[  NOTE    ] %u %s instead of %u: RLIMIT_NOFILE is %llu (hard %llu), %d "
		       "descriptors open\n",
		       n, what, want, (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
		       t_count_fds());
	}
	return n;
}

/* ---- executors ------------------------------------------------------------- */

/* Waits until every running executor of rt is parked (asleep in its
 * ring), at most T_STALL_NS: what a fixed sleep ("both parked by now")
 * cannot promise on a loaded machine.  False if they never all were. */
static inline bool t_wait_parked(cbcmn_runtime *rt)
{
	uint32_t n = cbcmn_runtime_workers(rt);
	cbcmn_executor_stats *per = calloc(n ? n : 1, sizeof(*per));
	if (!per)
		return false;
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	bool all = false;
	while (!all && t_now_ns() < deadline) {
		cbcmn_stats s;
		all = cbcmn_stats_snapshot(rt, &s, per, n) == 0;
		/* Executors above executors_live have no thread (min_workers). */
		for (uint32_t i = 0; all && i < s.executors_live && i < n; i++)
			all = per[i].state == CBCMN_EXEC_PARKED;
		if (!all) {
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, NULL);
		}
	}
	free(per);
	return all;
}

/* ---- files around the suite ---------------------------------------------- */

#include <limits.h>

/* Everything fd gives until EOF (or len - 1 bytes) into buf, NUL-ended;
 * closes fd.  Returns the length read. */
static inline size_t t_read_all(int fd, char *buf, size_t len)
{
	size_t at = 0;
	ssize_t n;
	while (at + 1 < len && (n = read(fd, buf + at, len - 1 - at)) > 0)
		at += (size_t)n;
	buf[at] = 0;
	close(fd);
	return at;
}

/* The nearest directory above this binary that holds rel, executable
 * (build/tests: two levels up, build/asan/tests: three) into dir.  False
 * if there is none within five levels. */
static inline bool t_dir_above_exe(const char *rel, char *dir, size_t len)
{
	char path[PATH_MAX], probe[PATH_MAX + 128];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
	if (n <= 0)
		return false;
	path[n] = 0;
	for (int up = 0; up < 5; up++) {
		char *slash = strrchr(path, '/');
		if (!slash || slash == path)
			return false;
		*slash = 0;
		snprintf(probe, sizeof(probe), "%s/%s", path, rel);
		if (access(probe, X_OK) == 0)
			return snprintf(dir, len, "%s", path) < (int)len;
	}
	return false;
}


/* ---- streams (cbcmn_io.h): does this kernel have them? --------------------- */

#include <errno.h>
#include <sys/socket.h>

static inline int64_t t_probe_stream(cbcmn_cx *cx, void *arg)
{
	int *sv = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, sv[0], &s);
	if (rc)
		return rc;
	return cbcmn_stream_close(cx, s);
}

/* A stream opened and closed on rt's executor 0: true if the kernel has
 * multishot recv with buffer rings (6.0); any error but -EOPNOTSUPP fails
 * the test. */
static inline bool t_have_streams(cbcmn_runtime *rt)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	int64_t r = t_run_pinned(rt, 0, t_probe_stream, sv);
	close(sv[0]);
	close(sv[1]);
	if (r != 0 && r != -EOPNOTSUPP)
		fail_msg("cbcmn_stream_open: %s", cbcmn_strerror(r));
	return r == 0;
}

/* Ends the test as a skip (cmocka's skip() does not return), the runtime
 * destroyed, where the kernel has no streams. */
static inline void t_skip_without_streams(cbcmn_runtime *rt)
{
	if (t_have_streams(rt))
		return;
	t_destroy(rt);
	T_SKIP("this kernel has no multishot recv with buffer rings (6.0)");
}

/* A config of one executor, no inline runs, for a test that ends that
 * executor's thread under a task; a skip under the sanitizers, whose
 * runtimes do not follow a thread unwinding off a fiber stack. */
static inline void t_config_for_thread_death(cbcmn_config *cfg)
{
	if (T_ASAN || T_TSAN)
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
	cbcmn_config_init(cfg);
	cfg->workers = 1;
	cfg->flags = CBCMN_CONFIG_NO_INLINE;
}

/* A runtime for a test whose task ends its executor's thread under a
 * stream: one executor, the quitter on a fiber of its own (no inline
 * runs).  Skips (does not return) on epoll, under a sanitizer (its
 * runtime does not follow a thread unwinding off a fiber stack) and
 * without streams; what names the io_uring part the test needs. */
static inline cbcmn_runtime *t_runtime_for_thread_death(const char *what)
{
	if (t_backend() == CBCMN_BACKEND_EPOLL)
		T_SKIP("%s: io_uring only, the runtime runs on epoll", what);
	cbcmn_config cfg;
	t_config_for_thread_death(&cfg);
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	t_skip_without_streams(rt);
	return rt;
}

/* A task that ends its executor's thread (the runtime starts another). */
static inline int64_t t_thread_quitter(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	pthread_exit(NULL);
	return 0;
}

/* Two threads resolve one handle at once (test_chan's permits,
 * test_obligation's obligations): after a barrier, thread i calls
 * resolve(i, h), h the handle itself (shared: both given one object) or
 * a copy of its own (size bytes); rc[i] is what it returned. */
struct t_race2 {
	void *handle;
	size_t size;
	bool shared;
	int (*resolve)(int i, void *h);
	pthread_barrier_t go;
	int rc[2];
};

struct t_race2_side {
	struct t_race2 *r;
	int i;
};

static inline void *t_race2_side(void *arg)
{
	struct t_race2_side *s = arg;
	struct t_race2 *r = s->r;
	_Alignas(max_align_t) unsigned char mine[128];
	void *h = r->handle;
	if (!r->shared) {
		memcpy(mine, r->handle, r->size);
		h = mine;
	}
	pthread_barrier_wait(&r->go);
	r->rc[s->i] = r->resolve(s->i, h);
	return NULL;
}

__attribute__((unused)) static void t_race2(void *handle, size_t size, bool shared,
					    int (*resolve)(int i, void *h), int rc[2])
{
	assert_true(size <= 128);
	struct t_race2 r = {.handle = handle, .size = size, .shared = shared, .resolve = resolve};
	struct t_race2_side sides[2] = {{&r, 0}, {&r, 1}};
	pthread_barrier_init(&r.go, NULL, 2);
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, t_race2_side, &sides[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&r.go);
	rc[0] = r.rc[0];
	rc[1] = r.rc[1];
}

#endif
