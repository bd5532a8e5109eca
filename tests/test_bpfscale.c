/* test_bpfscale: scale and hygiene of the BPF view (bpf/cbcmn.bpf.c loaded by
 * tools/bpf/bpfmon): executors past 256 have their own shards, a figure
 * whose program did not attach reads "not measured" rather than 0, the
 * programs go when the target does, pins a killed loader left are swept, a
 * ring address another process reuses is not counted as ours, values sit
 * on lines of their own, and two runtimes of one process stay apart.
 * Needs root (or CAP_BPF + CAP_PERFMON) and a kernel with BTF: otherwise a
 * skip. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <liburing.h>

#include "helpers.h"
#include "bpf/bpfmon.h"
#include "workloads/fib.h"
#include "bpf_roles.h"

/* A monitor on this process, or a skip saying why there cannot be one. */
static struct bpfmon *open_self(uint32_t runtime, unsigned flags)
{
	struct bpfmon *m;
	char err[256];
	int rc = bpfmon_open_runtime(&m, getpid(), runtime, flags, err, sizeof(err));
	if (rc == -EPERM || rc == -ENOENT)
		T_SKIP("%s", err);
	if (rc)
		fail_msg("bpfmon_open: %s", err);
	return m;
}

static bool has_bpf(char *why, size_t len)
{
	struct bpfmon *m;
	int rc = bpfmon_open(&m, getpid(), BPFMON_NO_SCHED | BPFMON_NO_IO_URING | BPFMON_NO_FUTEX, why,
			     len);
	bpfmon_close(m);
	return rc == 0;
}

#define NEED_BPF()                                                                         \
	do {                                                                               \
		char why_[256];                                                            \
		if (!has_bpf(why_, sizeof(why_)))                                          \
			T_SKIP("%s", why_);                                                \
	} while (0)

/* Executors of the big runtime: 300 (260 under a sanitizer: rows past 256
 * all the same), or CBCMN_TEST_EXECUTORS (up to 1024, the runtime's limit:
 * an attack run, slow on 2 CPUs). */
#define MANY 1024
static uint32_t many(void)
{
	const char *e = getenv("CBCMN_TEST_EXECUTORS");
	long dflt = T_ASAN || T_TSAN ? 260 : 300, n = e ? atol(e) : dflt;
	return n >= 257 && n <= MANY ? (uint32_t)n : (uint32_t)dflt;
}

/* Every slot of m; at least MANY entries (0 past the maps). */
#define CBCMN_BPF_OUTSIDE_OLD 256 /* where executors 256+ used to land */
static struct bpfmon_shard *read_all(struct bpfmon *m)
{
	struct bpfmon_shard *b = calloc(CBCMN_BPF_NSLOTS > MANY ? CBCMN_BPF_NSLOTS : MANY, sizeof(*b));
	assert_non_null(b);
	assert_true(bpfmon_read(m, b, CBCMN_BPF_NSLOTS) >= 0);
	return b;
}

/* Until the runtime's counters stop moving: each probe fired next to its
 * counter.  per gets the last snapshot. */
static void quiesce(cbcmn_runtime *rt, cbcmn_executor_stats *per, uint32_t n)
{
	cbcmn_stats st;
	cbcmn_executor_stats *prev = calloc(n, sizeof(*prev));
	assert_non_null(prev);
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, prev, n), 0);
	for (uint64_t until = t_now_ns() + T_STALL_NS; t_now_ns() < until;) {
		usleep(50000);
		assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, n), 0);
		/* Not the load figures: they move while nothing happens. */
		bool same = true;
		for (uint32_t i = 0; i < n && same; i++)
			same = per[i].xmsgs_sent == prev[i].xmsgs_sent &&
			       per[i].xmsgs_recv == prev[i].xmsgs_recv &&
			       per[i].doorbells_sent == prev[i].doorbells_sent &&
			       per[i].steal_successes == prev[i].steal_successes &&
			       per[i].tasks_run == prev[i].tasks_run && per[i].tid == prev[i].tid;
		memcpy(prev, per, n * sizeof(*per));
		if (same) {
			free(prev);
			return;
		}
	}
	fail_msg("the runtime never went quiet");
}

/* ---- executors past 256 ------------------------------------------------------ */

static int64_t nop_task(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

/* One task pinned to each executor from first on: a lane message (a spawn)
 * to each, and a doorbell to those parked. */
static int64_t spread_main(cbcmn_cx *cx, void *arg)
{
	uint32_t first = (uint32_t)(uintptr_t)arg, n = cbcmn_runtime_workers(cbcmn_cx_runtime(cx));
	cbcmn_nursery *nu;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nu);
	if (rc)
		return rc;
	for (uint32_t i = first; i < n && !rc; i++)
		rc = cbcmn_nursery_spawn_pinned(cx, nu, i, nop_task, NULL, NULL);
	int rc2 = cbcmn_nursery_await_all(cx, nu);
	return rc ? rc : rc2;
}

/* Executors 256 and up were folded into the "outside" slot (256), and each
 * one's exec_start deleted the thread record of the one before: rows 256+
 * read 0.  Now every executor up to the runtime's 1024 has its shard: its
 * thread, and lane messages equal to the runtime's own count. */
static void test_executors_past_256_have_their_shards(void **state)
{
	(void)state;
	NEED_BPF();
	uint32_t nexec = many();
	struct bpfmon *m = open_self(0, BPFMON_NO_IO_URING | BPFMON_NO_FUTEX);
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = nexec;
	cfg.spin_ns = CBCMN_SPIN_NONE; /* idle executors park at once */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	int64_t r;
	assert_int_equal(cbcmn_runtime_run(rt, spread_main, (void *)(uintptr_t)250, &r), 0);
	assert_int_equal(r, 0);
	cbcmn_executor_stats *per = calloc(nexec, sizeof(*per));
	assert_non_null(per);
	quiesce(rt, per, nexec);
	uint64_t r0 = t_now_ns();
	struct bpfmon_shard *b = read_all(m);
	printf("bpfmon_read of %u slots: %.1f ms\n", CBCMN_BPF_NSLOTS, (t_now_ns() - r0) / 1e6);
	unsigned bad = 0;
	uint64_t high_recv = 0;
	for (uint32_t i = 0; i < nexec; i++) {
		const struct cbcmn_bpf_shard *c = &b[i].c;
		bool ok = c->tid == (uint32_t)per[i].tid && c->xmsgs_recv == per[i].xmsgs_recv &&
			  c->xmsgs_sent == per[i].xmsgs_sent;
		if (!ok && bad++ < 5)
			printf("executor %u: tid %u/%d xmsgs recv %llu/%llu sent %llu/%llu\n", i, c->tid,
			       per[i].tid, (unsigned long long)c->xmsgs_recv,
			       (unsigned long long)per[i].xmsgs_recv, (unsigned long long)c->xmsgs_sent,
			       (unsigned long long)per[i].xmsgs_sent);
		high_recv += i >= CBCMN_BPF_OUTSIDE_OLD ? per[i].xmsgs_recv : 0;
	}
	/* The workload reached the high executors (by lane messages: not
	 * every pinned spawn needs one). */
	assert_true(high_recv > 0);
	printf("%u executors: %u rows differ from the runtime; row %u: tid %u, %llu lane messages in\n",
	       nexec, bad, nexec - 1, b[nexec - 1].c.tid, (unsigned long long)b[nexec - 1].c.xmsgs_recv);
	assert_int_equal(bad, 0);
	/* Nothing of theirs in the outside slot; and room for them all. */
	assert_int_equal(b[CBCMN_BPF_OUTSIDE].c.xmsgs_recv, 0);
	assert_true(CBCMN_BPF_MAX_SHARDS >= CBCMN_MAX_EXECUTORS);
	free(b);
	free(per);
	t_destroy(rt);
	bpfmon_close(m);
}

/* ---- values on lines of their own ------------------------------------------------ */

/* Per shard values were 280 bytes in a plain ARRAY: two executors' counters
 * shared a cache line, written from two pinned CPUs.  Now each value is a
 * multiple of CBCMN_BPF_LINE and the maps are mmapable (values from a page
 * boundary), which the maps' own info says. */
static void test_shard_values_own_their_lines(void **state)
{
	(void)state;
	NEED_BPF();
	struct bpfmon *m = open_self(0, BPFMON_PIN | BPFMON_NO_SCHED | BPFMON_NO_IO_URING | BPFMON_NO_FUTEX);
	static const char *const maps[] = {"shards", "shard_sched", "hists", "sqe_ops", "lock_hist"};
	for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", bpfmon_pin_dir(m), maps[i]);
		int fd = bpf_obj_get(path);
		assert_true(fd >= 0);
		struct bpf_map_info info;
		__u32 len = sizeof(info);
		memset(&info, 0, sizeof(info));
		assert_int_equal(bpf_obj_get_info_by_fd(fd, &info, &len), 0);
		close(fd);
		/* A shard's share: one value, or 32/64 words of a histogram. */
		uint64_t per_shard = !strcmp(maps[i], "hists") || !strcmp(maps[i], "lock_hist")
					     ? (uint64_t)info.value_size * CBCMN_BPF_HIST_SLOTS
				     : !strcmp(maps[i], "sqe_ops") ? (uint64_t)info.value_size * CBCMN_BPF_MAX_OPS
								   : info.value_size;
		printf("%s: value %u bytes, %llu per shard, flags %#x\n", maps[i], info.value_size,
		       (unsigned long long)per_shard, info.map_flags);
		assert_int_equal(per_shard % CBCMN_BPF_LINE, 0);
		assert_true(info.map_flags & BPF_F_MMAPABLE);
	}
	bpfmon_close(m);
}

/* ---- child processes ---------------------------------------------------------- */

/* A child playing role --run IN - (child_run in bpf_roles.h: fork-join
 * until a byte, or EOF, comes on descriptor in); *stop is the write end
 * that ends it. */
static pid_t start_target(int *stop)
{
	int p[2];
	/* The write end is ours alone: no other child may hold it open. */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(fcntl(p[0], F_SETFD, 0), 0);
	char in[16];
	snprintf(in, sizeof(in), "%d", p[0]);
	pid_t pid = spawn_role("--run", in, "-", NULL);
	close(p[0]);
	*stop = p[1];
	/* Its runtime is up once its executors have names. */
	for (uint64_t until = t_now_ns() + T_STALL_NS; t_now_ns() < until; usleep(10000)) {
		cbcmn_watch *w;
		if (!cbcmn_watch_open(pid, 0, &w)) {
			cbcmn_watch_close(w);
			return pid;
		}
	}
	fail_msg("the target's runtime never appeared");
	return -1;
}

static void end_target(pid_t pid, int stop)
{
	int st;
	if (write(stop, "q", 1) != 1)
		kill(pid, SIGKILL);
	close(stop);
	assert_int_equal(waitpid(pid, &st, 0), pid);
}

/* BPF links this process holds (its fds whose fdinfo has a link_type). */
static unsigned my_links(void)
{
	DIR *d = opendir("/proc/self/fdinfo");
	struct dirent *de;
	unsigned n = 0;
	assert_non_null(d);
	while ((de = readdir(d))) {
		char p[300], line[256];
		snprintf(p, sizeof(p), "/proc/self/fdinfo/%s", de->d_name);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "link_type:", 10))
				n++;
		fclose(f);
	}
	closedir(d);
	return n;
}

/* ---- detach when the target ends ---------------------------------------------- */

/* The programs stayed attached after the target exited, until the viewer
 * closed the monitor (the sched and io_uring ones run for every task of
 * the host).  Now they go as soon as the process does, and the maps still
 * read. */
static void test_programs_detach_when_target_exits(void **state)
{
	(void)state;
	NEED_BPF();
	int stop;
	pid_t t = start_target(&stop);
	unsigned before = my_links();
	struct bpfmon *m;
	char err[256];
	assert_int_equal(bpfmon_open(&m, t, BPFMON_NO_FUTEX, err, sizeof(err)), 0);
	unsigned attached = my_links() - before;
	assert_true(attached > 0);
	assert_false(bpfmon_detached(m));
	end_target(t, stop);
	uint64_t t0 = t_now_ns();
	/* Both: a link's fd leaves the table before close() returns (its
	 * release, an RCU wait, runs after), and bpfmon_detach says
	 * "detached" only once the last close has returned. */
	while ((my_links() > before || !bpfmon_detached(m)) && t_now_ns() - t0 < T_STALL_NS)
		usleep(10000);
	printf("%u links while the target ran; %u left %.0f ms after it exited\n", attached,
	       my_links() - before, (t_now_ns() - t0) / 1e6);
	assert_int_equal(my_links(), before);
	assert_true(bpfmon_detached(m));
	struct bpfmon_shard *b = read_all(m);
	free(b);
	bpfmon_close(m);
}

/* A target that exits while bpfmon_open is attaching: either the open says
 * so (-ESRCH) or the monitor it returns detaches at once; never programs
 * left attached for a process that is gone. */
static void test_target_exits_during_attach(void **state)
{
	(void)state;
	NEED_BPF();
	unsigned before = my_links();
	/* Killed at once, then later into the attach (each round loads the
	 * programs: a second or two). */
	for (int round = 0; round < (T_ASAN || T_TSAN ? 2 : 3); round++) {
		int stop;
		pid_t t = start_target(&stop);
		pid_t killer = fork();
		assert_true(killer >= 0);
		if (killer == 0) {
			usleep((useconds_t)(round * 80000));
			kill(t, SIGKILL);
			_exit(0);
		}
		struct bpfmon *m = NULL;
		char err[256];
		int rc = bpfmon_open(&m, t, BPFMON_NO_FUTEX, err, sizeof(err));
		waitpid(killer, NULL, 0);
		int st;
		waitpid(t, &st, 0);
		close(stop);
		printf("round %d: bpfmon_open %d%s%s\n", round, rc, rc ? ": " : "", rc ? err : "");
		if (rc) {
			assert_int_equal(rc, -ESRCH);
			assert_int_equal(my_links(), before);
			continue;
		}
		uint64_t t0 = t_now_ns();
		while (!bpfmon_detached(m) && t_now_ns() - t0 < T_STALL_NS)
			usleep(10000);
		assert_true(bpfmon_detached(m));
		assert_int_equal(my_links(), before);
		bpfmon_close(m);
	}
}

/* ---- pins -------------------------------------------------------------------- */

/* Role --pin TARGET OUT: a loader that pins the target's maps, says 'r' on
 * out and waits to be killed. */
static int child_pin(pid_t target, int out)
{
	struct bpfmon *m;
	char err[256];
	if (bpfmon_open(&m, target, BPFMON_PIN | BPFMON_NO_SCHED | BPFMON_NO_IO_URING | BPFMON_NO_FUTEX,
			err, sizeof(err))) {
		fprintf(stderr, "child: %s\n", err);
		return 1;
	}
	if (write(out, "r", 1) != 1)
		return 1;
	for (;;)
		pause();
}

static pid_t start_pinner(pid_t target)
{
	int p[2];
	char t[16], o[16], c;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(fcntl(p[1], F_SETFD, 0), 0);
	snprintf(t, sizeof(t), "%d", (int)target);
	snprintf(o, sizeof(o), "%d", p[1]);
	pid_t pid = spawn_role("--pin", t, o, NULL);
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

/* A loader killed with SIGKILL (no cleanup runs) left its pins, and the
 * next one on the same process failed with "pin ...: File exists".  Now a
 * loader notes who it is (pin_owner) and the next start sweeps the pins
 * of loaders that are gone; a live loader's pins are not taken (-EBUSY). */
static void test_pins_of_a_killed_loader_are_swept(void **state)
{
	(void)state;
	NEED_BPF();
	int stop;
	pid_t t = start_target(&stop);
	char dir[64];
	snprintf(dir, sizeof(dir), "/sys/fs/bpf/cbcmn/%d", (int)t);

	pid_t pinner = start_pinner(t);
	assert_int_equal(access(dir, F_OK), 0);
	/* Two loaders on one target: the second is told who holds the pins. */
	struct bpfmon *m;
	char err[256];
	unsigned flags = BPFMON_PIN | BPFMON_NO_SCHED | BPFMON_NO_IO_URING | BPFMON_NO_FUTEX;
	int rc = bpfmon_open(&m, t, flags, err, sizeof(err));
	printf("while loader %d runs: %d %s\n", (int)pinner, rc, rc ? err : "");
	assert_int_equal(rc, -EBUSY);
	char pid_text[16];
	snprintf(pid_text, sizeof(pid_text), "%d", (int)pinner);
	assert_non_null(strstr(err, pid_text));
	assert_int_equal(access(dir, F_OK), 0); /* its pins untouched */

	kill(pinner, SIGKILL);
	waitpid(pinner, NULL, 0);
	assert_int_equal(access(dir, F_OK), 0); /* left behind */
	rc = bpfmon_open(&m, t, flags, err, sizeof(err));
	printf("after kill -9 of loader %d: %d %s\n", (int)pinner, rc, rc ? err : "");
	assert_int_equal(rc, 0);
	assert_string_equal(bpfmon_pin_dir(m), dir);
	bpfmon_close(m);
	assert_int_not_equal(access(dir, F_OK), 0);

	/* A killed loader of a target that is gone too: swept at the next
	 * start on another target. */
	pinner = start_pinner(t);
	kill(pinner, SIGKILL);
	waitpid(pinner, NULL, 0);
	end_target(t, stop);
	assert_int_equal(access(dir, F_OK), 0);
	int stop2;
	pid_t t2 = start_target(&stop2);
	assert_int_equal(bpfmon_open(&m, t2, flags, err, sizeof(err)), 0);
	assert_int_not_equal(access(dir, F_OK), 0);
	bpfmon_close(m);
	end_target(t2, stop2);
}

/* Role --pin-race TARGET OUT GO: a loader that waits for a byte on GO,
 * pins the target's maps, writes bpfmon_open's result (an int) on OUT,
 * and, if it pinned, keeps them until GO's other end is closed. */
static int child_pin_race(pid_t target, int out, int go)
{
	struct bpfmon *m = NULL;
	char err[256], c;
	if (read(go, &c, 1) != 1)
		return 1;
	int rc = bpfmon_open(&m, target, BPFMON_PIN | BPFMON_NO_SCHED | BPFMON_NO_IO_URING | BPFMON_NO_FUTEX,
			     err, sizeof(err));
	if (rc)
		fprintf(stderr, "child %d: %d %s\n", (int)getpid(), rc, err);
	if (write(out, &rc, sizeof(rc)) != (ssize_t)sizeof(rc))
		return 1;
	while (!rc && read(go, &c, 1) > 0)
		; /* until EOF: the parent is done looking */
	bpfmon_close(m);
	return 0;
}

/* Two loaders pinning one process's maps at once both swept, both found
 * no directory and both made it: one failed with "mkdir ...: File exists"
 * (-EEXIST, where a second loader is -EBUSY), or its sweep took the
 * other's pins as stale while they were being made.  Now the pins change
 * under a lock of /sys/fs/bpf/cbcmn: one pins, the other is -EBUSY, every
 * time (CBCMN_BPF_PIN_PAUSE_MS holds both between the sweep and the
 * directory, where they raced). */
static void test_two_loaders_pinning_at_once_one_is_ebusy(void **state)
{
	(void)state;
	NEED_BPF();
	int stop;
	pid_t t = start_target(&stop);
	char dir[64];
	snprintf(dir, sizeof(dir), "/sys/fs/bpf/cbcmn/%d", (int)t);
	setenv("CBCMN_BPF_PIN_PAUSE_MS", "300", 1);
	for (int round = 0; round < 3; round++) {
		int go[2], out[2][2];
		pid_t kid[2];
		char tt[16], o[16], g[16];
		assert_int_equal(pipe2(go, O_CLOEXEC), 0);
		assert_int_equal(fcntl(go[0], F_SETFD, 0), 0);
		snprintf(tt, sizeof(tt), "%d", (int)t);
		snprintf(g, sizeof(g), "%d", go[0]);
		for (int k = 0; k < 2; k++) {
			assert_int_equal(pipe2(out[k], O_CLOEXEC), 0);
			assert_int_equal(fcntl(out[k][1], F_SETFD, 0), 0);
			snprintf(o, sizeof(o), "%d", out[k][1]);
			kid[k] = spawn_role("--pin-race", tt, o, g);
			close(out[k][1]);
		}
		close(go[0]);
		assert_int_equal(write(go[1], "gg", 2), 2);
		int rc[2];
		for (int k = 0; k < 2; k++)
			assert_int_equal(read(out[k][0], &rc[k], sizeof(rc[k])), (ssize_t)sizeof(rc[k]));
		printf("round %d: loaders %d and %d: %d and %d\n", round, (int)kid[0], (int)kid[1], rc[0], rc[1]);
		assert_true((rc[0] == 0 && rc[1] == -EBUSY) || (rc[0] == -EBUSY && rc[1] == 0));
		assert_int_equal(access(dir, F_OK), 0); /* the winner's pins stand */
		close(go[1]);
		for (int k = 0; k < 2; k++) {
			int st;
			assert_int_equal(waitpid(kid[k], &st, 0), kid[k]);
			assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
			close(out[k][0]);
		}
		assert_int_not_equal(access(dir, F_OK), 0); /* removed at its close */
	}
	unsetenv("CBCMN_BPF_PIN_PAUSE_MS");
	end_target(t, stop);
}

/* A directory without pin_owner (pinned by a bpfmon before it, whose loader
 * may be running: another user's test_bpf here) was swept as stale by any
 * pinning loader, pulling the maps from under a live one.  Now it goes only
 * once its target is dead; while the target lives, a loader for the same
 * target is refused (-EBUSY) and one for another leaves it alone. */
static void test_ownerless_pins_of_a_live_target_are_kept(void **state)
{
	(void)state;
	NEED_BPF();
	int stop, stop2;
	pid_t t = start_target(&stop), t2 = start_target(&stop2);
	char dir[64], pin[96];
	snprintf(dir, sizeof(dir), "/sys/fs/bpf/cbcmn/%d", (int)t);
	snprintf(pin, sizeof(pin), "%s/shards", dir);
	/* What an older loader leaves: maps, no pin_owner. */
	mkdir("/sys/fs/bpf/cbcmn", 0755);
	assert_int_equal(mkdir(dir, 0755), 0);
	int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "shards", 4, 8, 1, NULL);
	assert_true(fd >= 0);
	assert_int_equal(bpf_obj_pin(fd, pin), 0);
	close(fd);
	struct bpfmon *m;
	char err[256];
	unsigned flags = BPFMON_PIN | BPFMON_NO_SCHED | BPFMON_NO_IO_URING | BPFMON_NO_FUTEX;
	assert_int_equal(bpfmon_open(&m, t2, flags, err, sizeof(err)), 0);
	bpfmon_close(m);
	printf("another target's loader: %s is %s\n", pin, access(pin, F_OK) ? "gone" : "kept");
	assert_int_equal(access(pin, F_OK), 0);
	int rc = bpfmon_open(&m, t, flags, err, sizeof(err));
	printf("the same target's loader: %d %s\n", rc, rc ? err : "");
	assert_int_equal(rc, -EBUSY);
	assert_int_equal(access(pin, F_OK), 0);
	/* Its target gone, it is stale. */
	end_target(t, stop);
	assert_int_equal(bpfmon_open(&m, t2, flags, err, sizeof(err)), 0);
	bpfmon_close(m);
	assert_int_not_equal(access(dir, F_OK), 0);
	end_target(t2, stop2);
}

/* ---- "not measured" is not 0 ------------------------------------------------------ */

/* out = rel in this build (next to tests/). */
static void built(char out[PATH_MAX], const char *rel)
{
	snprintf(out, PATH_MAX, "%s/../%s", dirname(strdupa(self)), rel);
	if (access(out, X_OK))
		fail_msg("%s is not built (make %s)", out, out);
}

/* Run argv with stdout into buf (len), the environment plus env; returns
 * the exit status. */
static int run_capture(char *const argv[], const char *env, char *buf, size_t len)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		if (env)
			putenv((char *)env);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	t_read_all(p[0], buf, len);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A program that could not attach (here: the verifier refuses both forms
 * of sched_switch, which migrations rest on, CBCMN_BPF_REJECT) left its figures at 0: cbcmn-top
 * showed MIGR 0 and "migrations":0, cbcmn-stat "migr" 0.  Now they are
 * "-" and null, and the header / stderr say what is not measured and why. */
static void test_unmeasured_is_not_zero(void **state)
{
	(void)state;
	NEED_BPF();
	static char out[1 << 17];
	char top[PATH_MAX], stat[PATH_MAX], p[16];
	built(top, "bin/cbcmn-top");
	built(stat, "bin/cbcmn-stat");
	int stop;
	pid_t t = start_target(&stop);
	snprintf(p, sizeof(p), "%d", (int)t);
	const char *env = "CBCMN_BPF_REJECT=cbcmn_sched_switch,cbcmn_sched_switch_raw";

	char *const json[] = {top, "--json", "-n", "2", "-d", "0.3", "-p", p, NULL};
	assert_int_equal(run_capture(json, env, out, sizeof(out)), 0);
	const char *last = strrchr(out, '{') ? out : out;
	for (const char *l = out; (l = strstr(l, "\n{")); l++)
		last = l + 1;
	printf("cbcmn-top --json: %.300s...\n", last);
	assert_non_null(strstr(last, "\"migrations\":null"));
	assert_null(strstr(last, "\"migrations\":0"));
	const char *nm = strstr(last, "\"not_measured\":[");
	assert_non_null(nm);
	assert_non_null(strstr(nm, "{\"column\":\"MIGR\",\"key\":\"migrations\",\"why\":\""));
	assert_non_null(strstr(nm, "sched_switch: "));

	char *const text[] = {top, "-b", "-n", "1", "-d", "0.3", "-p", p, NULL};
	assert_int_equal(run_capture(text, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "not measured: MIGR"));
	/* The MIGR column of each row is "-": the header's position. */
	const char *head = strstr(out, " ID ");
	assert_non_null(head);
	const char *migr = strstr(head, "MIGR");
	assert_non_null(migr);
	size_t col_end = (size_t)(migr - head) + 4;
	const char *row = strchr(head, '\n') + 1;
	assert_true(strlen(row) > col_end);
	printf("row: %.*s\n", (int)strcspn(row, "\n"), row);
	assert_int_equal(row[col_end - 1], '-');

	char *const js[] = {stat, "-p", p, "-i", "0.3", "--json", NULL};
	assert_int_equal(run_capture(js, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "\"migrations\":null"));
	assert_null(strstr(out, "\"migrations\":0"));
	end_target(t, stop);
}

/* With the steal programs not attached (CBCMN_BPF_REJECT), cbcmn-top's
 * steals between groups of the topology, which rest on them (the steal
 * pairs), said "placed_steals_per_s":0 and "steals in 0/s": not measured
 * shown as 0.  Now null and "-". */
static void test_unmeasured_group_steals_are_not_zero(void **state)
{
	(void)state;
	NEED_BPF();
	static char out[1 << 17];
	char top[PATH_MAX], p[16];
	built(top, "bin/cbcmn-top");
	int stop;
	pid_t t = start_target(&stop);
	snprintf(p, sizeof(p), "%d", (int)t);
	const char *env = "CBCMN_BPF_REJECT=cbcmn_steal,cbcmn_steal_fail";
	char *const json[] = {top, "--json", "-n", "2", "-d", "0.3", "-p", p, NULL};
	assert_int_equal(run_capture(json, env, out, sizeof(out)), 0);
	const char *last = out;
	for (const char *l = out; (l = strstr(l, "\n{")); l++)
		last = l + 1;
	const char *g = strstr(last, "\"placed_steals_per_s\":");
	printf("cbcmn-top --json: %.120s\n", g ? g : "(no placed_steals_per_s)");
	assert_non_null(strstr(last, "\"steals_out_per_s\":null"));
	if (!g) {
		end_target(t, stop);
		skip(); /* no topology here: no groups */
	}
	assert_non_null(strstr(last, "\"placed_steals_per_s\":null"));
	assert_non_null(strstr(last, "\"cross_llc_steals_per_s\":null"));
	assert_non_null(strstr(last, "\"cross_node_steals_per_s\":null"));
	end_target(t, stop);
}

/* cbcmn-run --bpf printed a figure whose programs did not attach as 0
 * ("migrations 0", "migrations":0; and contention_ns without the futex
 * waits, where fentry is refused, as if whole).  Now "-", null, and why on
 * stderr. */
static void test_run_bpf_unmeasured_is_not_zero(void **state)
{
	(void)state;
	NEED_BPF();
	static char out[1 << 16];
	char run[PATH_MAX];
	built(run, "bin/cbcmn-run");
	const char *env = "CBCMN_BPF_REJECT=cbcmn_sched_switch,cbcmn_sched_switch_raw";
	char *const json[] = {run, "fib", "-w", "2", "-d", "0.2", "--bpf", "--json", NULL};
	assert_int_equal(run_capture(json, env, out, sizeof(out)), 0);
	const char *b = strstr(out, "\"bpf\":{");
	assert_non_null(b);
	printf("cbcmn-run --bpf --json: %.200s\n", b);
	assert_non_null(strstr(b, "\"migrations\":null"));
	assert_null(strstr(b, "\"migrations\":0"));
	char *const text[] = {run, "fib", "-w", "2", "-d", "0.2", "--bpf", NULL};
	assert_int_equal(run_capture(text, env, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "migrations -,"));
}

/* ---- rings: a freed address reused by another process -------------------------- */

/* Role --rings N -: a process with io_uring of its own: N rings made one
 * after another (kept open), each with 64 NOPs completed. */
static int child_rings(int n)
{
	struct io_uring *r = calloc((size_t)n, sizeof(*r));
	if (!r)
		return 1;
	for (int i = 0; i < n; i++) {
		if (io_uring_queue_init(64, &r[i], 0))
			return 1;
		for (int k = 0; k < 64; k++)
			io_uring_prep_nop(io_uring_get_sqe(&r[i]));
		if (io_uring_submit_and_wait(&r[i], 64) < 0)
			return 1;
		struct io_uring_cqe *c;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&r[i], head, c)
			seen++;
		io_uring_cq_advance(&r[i], seen);
	}
	for (int i = 0; i < n; i++)
		io_uring_queue_exit(&r[i]);
	free(r);
	return 0;
}

static uint64_t cqes_of(struct bpfmon *m, uint32_t n)
{
	struct bpfmon_shard *b = read_all(m);
	uint64_t c = 0;
	for (uint32_t i = 0; i < n; i++)
		c += b[i].c.cqes;
	free(b);
	return c;
}

/* Our runtime's rings stayed in `rings` (and the ring cache) after it
 * ended: a ring another process made at a freed address was counted as
 * ours.  Now a shard's ring is forgotten when its thread leaves its loop
 * or exits, and a ring found in the maps counts only if our process made
 * it (io_ring_ctx.mm_account).  Another process doing io_uring at the same
 * time, and after our rings are freed, adds nothing to our shards. */
static void test_other_process_rings_not_ours(void **state)
{
	(void)state;
	NEED_BPF();
	struct bpfmon *m = open_self(0, BPFMON_NO_FUTEX);
	for (int round = 0; round < (T_ASAN || T_TSAN ? 1 : 2); round++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 2;
		cfg.spin_ns = CBCMN_SPIN_NONE; /* MSG_RING doorbells: SQEs and CQEs on our rings */
		cbcmn_runtime *rt = t_runtime_cfg(&cfg);
		struct fib f = {.n = 18};
		int64_t r;
		/* While ours runs, another process's rings complete NOPs. */
		pid_t other = spawn_role("--rings", "16", "-", NULL);
		for (int i = 0; i < 20; i++)
			assert_int_equal(cbcmn_runtime_run(rt, fib_task, &f, &r), 0);
		int st;
		assert_int_equal(waitpid(other, &st, 0), other);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		t_destroy(rt);
		/* io_uring frees a ring's context from a work queue after the
		 * close: give it the time, then make many rings elsewhere. */
		usleep(200000);
		uint64_t ours = cqes_of(m, 2);
		other = spawn_role("--rings", "128", "-", NULL);
		assert_int_equal(waitpid(other, &st, 0), other);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		uint64_t after = cqes_of(m, 2);
		printf("round %d: our shards' CQEs %llu when our runtime ended, %llu after another "
		       "process's 128 rings\n",
		       round, (unsigned long long)ours, (unsigned long long)after);
		assert_int_equal(after, ours);
	}
	bpfmon_close(m);
}

/* ---- two runtimes in one process ------------------------------------------------ */

/* Two runtimes alive at once in one process have the same executor ids:
 * their probes landed on the same shards and merged.  The probes carry the
 * runtime's id (cbcmn_stats.runtime_id) and a monitor of one runtime counts
 * its probes only: each monitor's shards equal its runtime's own figures. */
static void test_two_runtimes_stay_apart(void **state)
{
	(void)state;
	NEED_BPF();
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.spin_ns = CBCMN_SPIN_NONE;
	cbcmn_runtime *ra = t_runtime_cfg(&cfg), *rb = t_runtime_cfg(&cfg);
	cbcmn_stats sa, sb;
	assert_int_equal(cbcmn_stats_snapshot(ra, &sa, NULL, 0), 0);
	assert_int_equal(cbcmn_stats_snapshot(rb, &sb, NULL, 0), 0);
	printf("runtime ids %u and %u\n", sa.runtime_id, sb.runtime_id);
	struct bpfmon *ma = open_self(sa.runtime_id, BPFMON_NO_FUTEX);
	struct bpfmon *mb = open_self(sb.runtime_id, BPFMON_NO_FUTEX);
	/* Both ran before the monitors: their counts start here. */
	cbcmn_executor_stats a0[2], b0[2], a1[2], b1[2];
	quiesce(ra, a0, 2);
	quiesce(rb, b0, 2);
	pingpong(ra, T_SCALE(600));
	pingpong(rb, T_SCALE(200));
	quiesce(ra, a1, 2);
	quiesce(rb, b1, 2);
	struct bpfmon_shard *ka = read_all(ma), *kb = read_all(mb);
	for (int i = 0; i < 2; i++) {
		printf("executor %d: A xmsgs %llu/%llu doorbells %llu/%llu tid %u/%d; "
		       "B xmsgs %llu/%llu doorbells %llu/%llu tid %u/%d\n",
		       i, (unsigned long long)ka[i].c.xmsgs_sent,
		       (unsigned long long)(a1[i].xmsgs_sent - a0[i].xmsgs_sent),
		       (unsigned long long)(ka[i].c.doorbells_msg_ring + ka[i].c.doorbells_eventfd),
		       (unsigned long long)(a1[i].doorbells_sent - a0[i].doorbells_sent), ka[i].c.tid,
		       a1[i].tid, (unsigned long long)kb[i].c.xmsgs_sent,
		       (unsigned long long)(b1[i].xmsgs_sent - b0[i].xmsgs_sent),
		       (unsigned long long)(kb[i].c.doorbells_msg_ring + kb[i].c.doorbells_eventfd),
		       (unsigned long long)(b1[i].doorbells_sent - b0[i].doorbells_sent), kb[i].c.tid,
		       b1[i].tid);
		assert_int_equal(ka[i].c.xmsgs_sent, a1[i].xmsgs_sent - a0[i].xmsgs_sent);
		assert_int_equal(kb[i].c.xmsgs_sent, b1[i].xmsgs_sent - b0[i].xmsgs_sent);
		assert_int_equal(ka[i].c.doorbells_msg_ring + ka[i].c.doorbells_eventfd,
				 a1[i].doorbells_sent - a0[i].doorbells_sent);
		assert_int_equal(kb[i].c.doorbells_msg_ring + kb[i].c.doorbells_eventfd,
				 b1[i].doorbells_sent - b0[i].doorbells_sent);
		/* The loader found each runtime's own threads. */
		assert_int_equal(ka[i].c.tid, (uint32_t)a1[i].tid);
		assert_int_equal(kb[i].c.tid, (uint32_t)b1[i].tid);
	}
	assert_true(ka[0].c.xmsgs_sent + ka[1].c.xmsgs_sent > 0);
	assert_true(sa.runtime_id != 0 && sb.runtime_id != 0 && sa.runtime_id != sb.runtime_id);
	free(ka);
	free(kb);
	bpfmon_close(ma);
	bpfmon_close(mb);
	t_destroy(ra);
	t_destroy(rb);
}

/* Role --two IN -: two runtimes; the first runs fork-join until a byte (or
 * EOF) on in, the second idles. */
static int child_two(int in)
{
	/* Two executors each, whatever a cgroup CPU limit would make the
	 * default: the busy one must have a thief to probe. */
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cbcmn_runtime *a = NULL, *b = NULL;
	if (cbcmn_runtime_create(&cfg, &a) || cbcmn_runtime_create(&cfg, &b))
		return 1;
	if (fib_until_byte(a, in, 16, 2000))
		return 1;
	cbcmn_runtime_destroy(b);
	cbcmn_runtime_destroy(a);
	return 0;
}

/* Sum of a per-shard key's numbers in a cbcmn-top JSON line ("key":N). */
static double json_sum(const char *line, const char *key)
{
	char k[64];
	double sum = 0;
	snprintf(k, sizeof(k), "\"%s\":", key);
	for (const char *at = line; (at = strstr(at, k)); at += strlen(k))
		sum += atof(at + strlen(k));
	return sum;
}

/* cbcmn-top shows one runtime of a process that has two: -r 1 is the
 * second, its header and JSON say which of how many, and its kernel
 * figures are that runtime's (idle: no steal probe) while -r 0 shows the
 * busy one's. */
static void test_top_shows_the_runtime_asked_for(void **state)
{
	(void)state;
	NEED_BPF();
	static char out[1 << 17];
	char top[PATH_MAX], p[16], in[16];
	built(top, "bin/cbcmn-top");
	int fds[2];
	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	assert_int_equal(fcntl(fds[0], F_SETFD, 0), 0);
	snprintf(in, sizeof(in), "%d", fds[0]);
	pid_t t = spawn_role("--two", in, "-", NULL);
	close(fds[0]);
	for (uint64_t until = t_now_ns() + T_STALL_NS;; usleep(10000)) {
		cbcmn_watch *w;
		if (!cbcmn_watch_open(t, 1, &w)) {
			cbcmn_watch_close(w);
			break;
		}
		assert_true(t_now_ns() < until);
	}
	snprintf(p, sizeof(p), "%d", (int)t);
	double probes[2];
	/* -r 0 until its snapshots saw the busy runtime probe: on a loaded
	 * machine it may get no CPU while one cbcmn-top runs (0 tasks/s). */
	uint64_t until = t_now_ns() + T_STALL_NS;
	for (int r = 0; r < 2; r++) {
		char rt[16];
		snprintf(rt, sizeof(rt), "%d", r);
		char *const argv[] = {top, "--json", "-n", "2", "-d", "0.4", "-r", rt, "-p", p, NULL};
		assert_int_equal(run_capture(argv, NULL, out, sizeof(out)), 0);
		const char *last = out;
		for (const char *l = out; (l = strstr(l, "\n{")); l++)
			last = l + 1;
		char want[32];
		snprintf(want, sizeof(want), "\"runtime\":%d,", r);
		assert_non_null(strstr(last, want));
		assert_non_null(strstr(last, "\"runtimes\":2,"));
		probes[r] = json_sum(last, "steals") + json_sum(last, "steal_fails");
		printf("-r %d: steal probes %.0f, tasks/s %.0f\n", r, probes[r], json_sum(last, "tasks_per_s"));
		if (r == 0 && probes[0] == 0) {
			if (t_now_ns() > until)
				fail_msg("-r 0: no steal probe of the busy runtime in %u s", T_STALL_S);
			r--;
		}
	}
	assert_true(probes[0] > 0);
	assert_true(probes[1] == 0);
	char *const text[] = {top, "-b", "-n", "1", "-d", "0.3", "-r", "1", "-p", p, NULL};
	assert_int_equal(run_capture(text, NULL, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "runtime 1/2"));
	assert_int_equal(write(fds[1], "q", 1), 1);
	close(fds[1]);
	int st;
	assert_int_equal(waitpid(t, &st, 0), t);
}

int main(int argc, char **argv)
{
	/* The child roles this binary plays for the tests above. */
	if (argc == 4 && !strcmp(argv[1], "--run"))
		return child_run(atoi(argv[2]), 16, 5000);
	if (argc == 4 && !strcmp(argv[1], "--pin"))
		return child_pin(atoi(argv[2]), atoi(argv[3]));
	if (argc == 5 && !strcmp(argv[1], "--pin-race"))
		return child_pin_race(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	if (argc == 4 && !strcmp(argv[1], "--two"))
		return child_two(atoi(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "--rings"))
		return child_rings(atoi(argv[2]));
	if (find_self())
		return 1;
	if (getenv("T_FILTER")) /* run only the tests whose names match */
		cmocka_set_test_filter(getenv("T_FILTER"));
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_executors_past_256_have_their_shards),
		T_WATCHED_TEST(test_shard_values_own_their_lines),
		T_WATCHED_TEST(test_programs_detach_when_target_exits),
		T_WATCHED_TEST(test_target_exits_during_attach),
		T_WATCHED_TEST(test_pins_of_a_killed_loader_are_swept),
		T_WATCHED_TEST(test_ownerless_pins_of_a_live_target_are_kept),
		T_WATCHED_TEST(test_two_loaders_pinning_at_once_one_is_ebusy),
		T_WATCHED_TEST(test_unmeasured_is_not_zero),
		T_WATCHED_TEST(test_unmeasured_group_steals_are_not_zero),
		T_WATCHED_TEST(test_run_bpf_unmeasured_is_not_zero),
		T_WATCHED_TEST(test_other_process_rings_not_ours),
		T_WATCHED_TEST(test_two_runtimes_stay_apart),
		T_WATCHED_TEST(test_top_shows_the_runtime_asked_for),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
