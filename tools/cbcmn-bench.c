/* cbcmn-bench: the runtime's micro-benchmarks.
 *
 * Prints one line per figure on stdout, "NAME METRIC VALUE", and nothing
 * else there; medians over repetitions, so a noisy shared machine moves
 * them less.  docs/BENCHMARKS.md keeps the latest numbers.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sched.h>

#include "util/clock.h"
#include "arch.h"
#include "cbcmn.h"
#include "cbcmn_actor.h"
#include "cbcmn_chan.h"
#include "cbcmn_io.h"
#include <bpf/bpf.h>

#include "bpf/bpfmon.h"
#include "cbcmn_floor.skel.h"
#include "cli/cli.h"
#include "baseline/epoll_echo.h"
#include "workloads/fib.h"
#include "net/fserv.h"
#include "net/loadgen.h"
#include "util/maskcpu.h"
#include "cli/opts.h"
#include "baseline/pingpong.h"
#include "workloads/workload.h"
#include "workloads/wl_int.h"

static uint32_t workers = 2;
static int reps = 7;
static bool reps_set;
static uint32_t conns = 50;
/* --client ring: the io_uring load client, for echo (loadgen.h) */
static bool client_ring;
static double duration_s = 5.0;
static uint32_t msg_size = 64;
static bool verbose;
static bool multishot = true;
static uint64_t server_spin_ns; /* 0: the runtime's default */
static bool duration_set;
static unsigned bpf_flags; /* BPFMON_NO_*: --bpf-no GROUP */

/* -v: the rings' setup and a server's counters, on stderr. */
static void print_ring_stats(const char *who, const cbcmn_stats *s, uint64_t requests)
{
	if (!verbose)
		return;
	const cbcmn_executor_stats *t = &s->total;
	double q = requests ? (double)requests : 1.0;
	fprintf(stderr,
		"%s: rings %#x (%s%s%s), doorbells %s; per request: %.2f SQEs, %.2f CQEs, "
		"%.3f enters, %.3f parks, %.2f picks\n",
		who, s->ring_setup_flags,
		s->ring_setup_flags & (1u << 13) ? "DEFER_TASKRUN" : "",
		s->ring_setup_flags & (1u << 8) ? "COOP_TASKRUN" : "",
		s->ring_setup_flags & (1u << 1) ? "SQPOLL" : "", s->msg_ring ? "MSG_RING" : "eventfd",
		(double)t->sqes_submitted / q, (double)t->cqes_reaped / q, (double)t->ring_enters / q,
		(double)t->parks / q, (double)(t->local_hits + t->inject_hits) / q);
}

/* -v: the I/O backend a default runtime gets here (CBCMN_BACKEND, or epoll
 * where io_uring is refused), on stderr, once. */
static void print_backend(void)
{
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 1;
	cbcmn_runtime *rt;
	cbcmn_stats st;
	int rc = cbcmn_runtime_create(&c, &rt);
	if (rc) {
		fprintf(stderr, "backend: none (%s)\n", cbcmn_strerror(rc));
		return;
	}
	if (cbcmn_stats_snapshot(rt, &st, NULL, 0) == 0)
		fprintf(stderr, "backend: %s\n", cbcmn_backend_name(st.backend));
	cbcmn_runtime_destroy(rt);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double percentile(double *v, int n, double p)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	int i = (int)(p * (n - 1) + 0.5);
	return v[i];
}

static void die(const char *what, int64_t rc)
{
	fprintf(stderr, "cbcmn-bench: %s: %s\n", what, cbcmn_strerror(rc));
	exit(1);
}

/* A runtime of n executors with flags and spin_ns (0: the default). */
static cbcmn_runtime *runtime_spin(uint32_t n, uint32_t flags, uint64_t spin_ns)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = n;
	cfg.flags = flags;
	cfg.spin_ns = spin_ns;
	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(&cfg, &rt);
	if (rc)
		die("runtime_create", rc);
	return rt;
}

static cbcmn_runtime *runtime(uint32_t n, uint32_t flags)
{
	return runtime_spin(n, flags, 0);
}

static void run(cbcmn_runtime *rt, cbcmn_task_fn fn, void *arg)
{
	int64_t r;
	int rc = cbcmn_runtime_run(rt, fn, arg, &r);
	if (rc || r < 0)
		die("task", rc ? rc : r);
}

/* ---- baselines: the library a user would pick instead --------------------- */

/* The value of the one "BENCH METRIC VALUE" line that `PROG BENCH --reps 1
 * --workers N [OPT VALUE]...` prints (opt: NULL, or option and value pairs
 * ended by a NULL), PROG beside this program (`make bench` builds them
 * from tools/baseline/ when oneTBB, Go and Erlang/OTP are installed).  Run
 * between our own repetitions, so that a ratio compares runs made under
 * the same load.  Returns -1 when PROG is missing or fails, said once on
 * stderr: the ratio is then left out, our own figures are not. */
static double baseline_once(const char *prog, const char *bench, const char *const *opt)
{
	static char said[4][32];
	char dir[4096], path[4200], nw[16];
	ssize_t len = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (len <= 0)
		return -1;
	dir[len] = '\0';
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	snprintf(path, sizeof(path), "%s/%s", dir, prog);
	snprintf(nw, sizeof(nw), "%u", workers);
	const char *why = NULL;
	double v = -1;
	int fd[2];
	if (access(path, X_OK)) {
		why = "not built (scripts/install-deps.sh --bench, then make bench)";
	} else if (pipe(fd)) {
		why = "pipe failed";
	} else {
		pid_t pid = fork();
		if (pid == 0) {
			dup2(fd[1], 1);
			close(fd[0]);
			close(fd[1]);
			const char *argv[16] = {prog, bench, "--reps", "1", "--workers", nw};
			for (size_t a = 6; opt && *opt && a < 15; a++)
				argv[a] = *opt++;
			execv(path, (char *const *)argv);
			_exit(127);
		}
		close(fd[1]);
		/* To the end: a child that says more than out holds (Erlang's
		 * reports of a failed process go to stdout) must not block on
		 * a full pipe while we wait for it; the rest is dropped. */
		char out[256], rest[4096];
		size_t got = 0;
		ssize_t k;
		while (pid > 0 && ((k = got < sizeof(out) - 1
						? read(fd[0], out + got, sizeof(out) - 1 - got)
						: read(fd[0], rest, sizeof(rest))) > 0 ||
				   (k < 0 && errno == EINTR)))
			got += k > 0 && got < sizeof(out) - 1 ? (size_t)k : 0;
		out[got] = '\0';
		close(fd[0]);
		int st = 0;
		while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) ||
		    sscanf(out, "%*s %*s %lf", &v) != 1 || !(v > 0)) {
			why = "failed";
			v = -1;
		}
	}
	for (size_t i = 0; why && i < 4; i++) {
		if (!strcmp(said[i], prog))
			break;
		if (!said[i][0]) {
			snprintf(said[i], sizeof(said[i]), "%s", prog);
			fprintf(stderr, "cbcmn-bench: no %s figures: %s %s\n", bench, path, why);
			break;
		}
	}
	return v;
}

/* Prints "BENCH METRIC median(base)" and "BENCH RATIO_METRIC median(ours /
 * base)" (ratios per repetition, each pair measured back to back), unless
 * a baseline run failed.  Leaves ours[] and base[] unsorted. */
static void print_baseline(const char *bench, const char *metric, const char *ratio_metric,
			   const double *ours, const double *base, int n)
{
	double b[16], q[16];
	for (int r = 0; r < n; r++) {
		if (!(base[r] > 0))
			return;
		b[r] = base[r];
		q[r] = ours[r] / base[r];
	}
	printf("%s %s %.*f\n", bench, metric, b[0] < 1e4 ? 1 : 0, median(b, n));
	printf("%s %s %.3f\n", bench, ratio_metric, median(q, n));
}

/* ---- switch: raw context switch, one thread ------------------------------ */

static void *main_sp, *fiber_sp;
static volatile uint64_t switches_left;

static void pingpong(void *x)
{
	(void)x;
	for (;;)
		cbcmn__ctx_jump(&fiber_sp, main_sp, NULL);
}

static int64_t yielder(cbcmn_cx *cx, void *arg)
{
	long n = (long)(intptr_t)arg;
	for (long i = 0; i < n; i++)
		cbcmn_yield(cx);
	return 0;
}

static void bench_switch(void)
{
	size_t sz = 64 * 1024;
	char *stack = malloc(sz);
	fiber_sp = cbcmn__ctx_make(stack + sz, pingpong);
	const uint64_t n = 10000000;
	double v[16], full[16];
	/* As the runtime switches: the scheduler side knows its FP control
	 * state, the task side saves its own (MXCSR and x87 CW, both ways). */
	uint64_t fpcw = cbcmn__fpcw_read();
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = mono_ns();
		for (uint64_t i = 0; i < n; i++)
			cbcmn__ctx_jump_fp(&main_sp, fiber_sp, NULL, fpcw);
		v[r] = (double)(mono_ns() - t0) / (double)(2 * n); /* two switches per round */
		/* Both sides reading their FP state (any context to any). */
		t0 = mono_ns();
		for (uint64_t i = 0; i < n; i++)
			cbcmn__ctx_jump(&main_sp, fiber_sp, NULL);
		full[r] = (double)(mono_ns() - t0) / (double)(2 * n);
	}
	printf("switch ns_per_switch %.2f\n", median(v, reps));
	printf("switch ns_per_switch_full_save %.2f\n", median(full, reps));
	free(stack);

	/* The same through the scheduler: task -> scheduler -> task. */
	cbcmn_runtime *rt = runtime(1, 0);
	const long ny = 2000000;
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = mono_ns();
		run(rt, yielder, (void *)(intptr_t)ny);
		v[r] = (double)(mono_ns() - t0) / (double)ny;
	}
	printf("switch ns_per_yield %.2f\n", median(v, reps));
	cbcmn_runtime_destroy(rt);
}

/* ---- spawn: 1 000 000 trivial tasks spawned and joined ------------------- */

static int64_t trivial(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t spawner(cbcmn_cx *cx, void *arg)
{
	long n = (long)(intptr_t)arg;
	cbcmn_nursery *nu;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nu);
	if (rc)
		return rc;
	for (long i = 0; i < n; i++)
		if ((rc = cbcmn_nursery_spawn(cx, nu, trivial, NULL, NULL)) != 0)
			break;
	int64_t r = cbcmn_nursery_await_all(cx, nu);
	return rc ? rc : r;
}

static void bench_spawn(void)
{
	const long n = 1000000;
	double v[16];
	static const struct {
		const char *metric;
		uint32_t flags;
	} modes[] = {{"tasks_per_s", 0}, {"tasks_per_s_no_inline", CBCMN_CONFIG_NO_INLINE}};
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		cbcmn_runtime *rt = runtime(workers, modes[m].flags);
		double base[16], cpu[16];
		for (int r = 0; r < reps; r++) {
			uint64_t t0 = mono_ns(), c0 = process_cpu_ns();
			run(rt, spawner, (void *)(intptr_t)n);
			v[r] = (double)n * 1e9 / (double)(mono_ns() - t0);
			cpu[r] = (double)(process_cpu_ns() - c0) / 1e6;
			if (m == 0) /* oneTBB's task_group, the same million */
				base[r] = baseline_once("cbcmn-baseline-tbb", "spawn", NULL);
		}
		if (m == 0) { /* speedup: our tasks/s over TBB's (issue 15: >= 1.5) */
			print_baseline("spawn", "tbb_tasks_per_s", "speedup_vs_tbb", v, base, reps);
			/* Our CPU for the million (TBB runs in a child, not
			 * counted): on a shared, capped host it moves less than
			 * the rates do. */
			printf("spawn cpu_ms %.1f\n", median(cpu, reps));
		}
		printf("spawn %s %.0f\n", modes[m].metric, median(v, reps));
		cbcmn_runtime_destroy(rt);
	}
}

/* ---- fib: fork-join fib(30), a task per call ------------------------------ */

static void bench_fib(void)
{
	cbcmn_runtime *rt = runtime(workers, 0);
	double v[16], base[16], cpu[16];
	for (int r = 0; r < reps; r++) {
		struct fib f = {.n = 30};
		uint64_t t0 = mono_ns(), c0 = process_cpu_ns();
		run(rt, fib_task, &f);
		v[r] = (double)(mono_ns() - t0) / 1e6;
		cpu[r] = (double)(process_cpu_ns() - c0) / 1e6;
		if (f.out != 832040)
			die("fib(30) gave a wrong answer", -EPROTO);
		base[r] = baseline_once("cbcmn-baseline-tbb", "fib", NULL);
	}
	/* time_vs_tbb: our time over TBB's (issue 15: <= 0.9) */
	print_baseline("fib", "tbb_ms", "time_vs_tbb", v, base, reps);
	printf("fib ms %.1f\n", median(v, reps));
	printf("fib cpu_ms %.1f\n", median(cpu, reps));
	cbcmn_runtime_destroy(rt);
}

/* ---- checkpoint: the loop yield check that does not yield ---------------- */

static int64_t checkpoints(cbcmn_cx *cx, void *arg)
{
	long n = (long)(intptr_t)arg;
	for (long i = 0; i < n; i++)
		CBCMN_CHECKPOINT(cx);
	return 0;
}

static void bench_checkpoint(void)
{
	/* One task alone on one executor: the yield every 1024 checks comes
	 * straight back, so this is the check plus its amortised slow path. */
	cbcmn_runtime *rt = runtime(1, 0);
	const long n = 200000000;
	double v[16];
	for (int r = 0; r < reps; r++) {
		uint64_t t0 = mono_ns();
		run(rt, checkpoints, (void *)(intptr_t)n);
		v[r] = (double)(mono_ns() - t0) / (double)n;
	}
	printf("checkpoint ns_per_check %.3f\n", median(v, reps));
	cbcmn_runtime_destroy(rt);
}

/* ---- budget: what budgets cost fib and spawn, on vs off in one run --------- */

static void bench_budget(void)
{
	cbcmn_runtime *on = runtime(workers, 0), *off = runtime(workers, CBCMN_CONFIG_NO_BUDGETS);
	double fib_on[16], fib_off[16], sp_on[16], sp_off[16];
	for (int r = 0; r < reps; r++) {
		/* Alternate, so drift on a shared machine hits both alike. */
		for (int k = 0; k < 2; k++) {
			cbcmn_runtime *rt = (r + k) % 2 ? off : on;
			struct fib f = {.n = 30};
			uint64_t t0 = mono_ns();
			run(rt, fib_task, &f);
			double ms = (double)(mono_ns() - t0) / 1e6;
			t0 = mono_ns();
			run(rt, spawner, (void *)(intptr_t)1000000);
			double sp = (double)(mono_ns() - t0) / 1e6;
			if (rt == on) {
				fib_on[r] = ms;
				sp_on[r] = sp;
			} else {
				fib_off[r] = ms;
				sp_off[r] = sp;
			}
		}
	}
	double fon = median(fib_on, reps), foff = median(fib_off, reps);
	double son = median(sp_on, reps), soff = median(sp_off, reps);
	printf("budget fib_ms_on %.1f\n", fon);
	printf("budget fib_ms_off %.1f\n", foff);
	printf("budget fib_pct %.1f\n", (fon / foff - 1) * 100);
	printf("budget spawn_ms_on %.1f\n", son);
	printf("budget spawn_ms_off %.1f\n", soff);
	printf("budget spawn_pct %.1f\n", (son / soff - 1) * 100);
	cbcmn_runtime_destroy(on);
	cbcmn_runtime_destroy(off);
}

/* ---- parked: RSS per fiber with 1 000 000 parked ------------------------- */

static struct {
	cbcmn_task **h;
	long n;
	_Atomic long parked;
	_Atomic int release;
} chain;

static int64_t link_task(cbcmn_cx *cx, void *arg)
{
	long i = (long)(intptr_t)arg;
	atomic_fetch_add(&chain.parked, 1);
	if (i + 1 < chain.n) {
		while (!__atomic_load_n(&chain.h[i + 1], __ATOMIC_ACQUIRE))
			cbcmn_yield(cx);
		return cbcmn_task_join(cx, chain.h[i + 1], NULL);
	}
	while (!atomic_load(&chain.release))
		cbcmn_yield(cx);
	return 0;
}

static int64_t chain_root(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	for (long i = 0; i < chain.n && rc == 0; i++) {
		cbcmn_task *h;
		rc = cbcmn_nursery_spawn(cx, n, link_task, (void *)(intptr_t)i, &h);
		if (rc == 0)
			__atomic_store_n(&chain.h[i], h, __ATOMIC_RELEASE);
	}
	int64_t r = cbcmn_nursery_await_all(cx, n);
	if (rc == 0)
		rc = cbcmn_task_join(cx, chain.h[0], NULL);
	return rc ? rc : r;
}

static long status_kib(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	size_t kl = strlen(key);
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && sscanf(line + kl, " %ld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

static void *chain_thread(void *rt)
{
	run(rt, chain_root, NULL);
	return NULL;
}

static void bench_parked(void)
{
	chain.n = 1000000;
	chain.h = calloc((size_t)chain.n, sizeof(*chain.h));
	/* Records in the stacks: the configuration for many parked fibers. */
	cbcmn_runtime *rt = runtime(1, CBCMN_CONFIG_NO_INLINE | CBCMN_CONFIG_RECORD_IN_STACK);
	long rss0 = status_kib("VmRSS:"), pte0 = status_kib("VmPTE:");
	pthread_t th;
	pthread_create(&th, NULL, chain_thread, rt);
	while (atomic_load(&chain.parked) < chain.n)
		usleep(10000);
	long rss1 = status_kib("VmRSS:"), pte1 = status_kib("VmPTE:");
	atomic_store(&chain.release, 1);
	pthread_join(th, NULL);
	printf("parked bytes_per_fiber %.0f\n", (double)(rss1 - rss0) * 1024.0 / (double)chain.n);
	printf("parked page_table_bytes_per_fiber %.0f\n",
	       (double)(pte1 - pte0) * 1024.0 / (double)chain.n);
	cbcmn_runtime_destroy(rt);
	free(chain.h);
}

/* ---- steal: push on one executor -> start on a spinning thief ------------- */

struct probe {
	uint64_t pushed;
	_Atomic uint64_t started;
	_Atomic uint32_t where;
};

static int64_t record_start(cbcmn_cx *cx, void *arg)
{
	struct probe *p = arg;
	atomic_store_explicit(&p->where, cbcmn_cx_executor(cx), memory_order_relaxed);
	atomic_store_explicit(&p->started, mono_ns(), memory_order_release);
	return 0;
}

struct steal_run {
	int samples;
	double *lat;
	int got;
};

static int64_t steal_producer(cbcmn_cx *cx, void *arg)
{
	struct steal_run *s = arg;
	uint32_t me = cbcmn_cx_executor(cx);
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	struct probe p;
	uint64_t seed = 88172645463325252ull;
	for (int i = 0; i < s->samples * 2 && s->got < s->samples; i++) {
		atomic_store(&p.started, 0);
		p.pushed = mono_ns();
		rc = cbcmn_nursery_spawn(cx, n, record_start, &p, NULL);
		if (rc)
			break;
		/* Stay busy (do not pop our own queue) until someone starts it. */
		uint64_t t;
		while (!(t = atomic_load_explicit(&p.started, memory_order_acquire)))
			cbcmn__cpu_relax();
		if (atomic_load(&p.where) != me)
			s->lat[s->got++] = (double)(t - p.pushed);
		/* A random 0..8 us pause: the thief is in its spinning back-off. */
		seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
		uint64_t until = mono_ns() + seed % 8000;
		while (mono_ns() < until)
			cbcmn__cpu_relax();
	}
	int64_t r = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : r;
}

/* One run of the steal probe on a runtime with spin_ns (0: the default,
 * which the host's load gates: lib/monitor.c); its p50 and p99. */
static void steal_once(uint64_t spin_ns, double *p50, double *p99)
{
	cbcmn_runtime *rt = runtime_spin(workers, 0, spin_ns);
	struct steal_run s = {.samples = 20000};
	s.lat = calloc((size_t)s.samples, sizeof(double));
	run(rt, steal_producer, &s);
	if (s.got < 100)
		die("too few steals observed", -EAGAIN);
	*p50 = percentile(s.lat, s.got, 0.50);
	*p99 = percentile(s.lat, s.got, 0.99);
	free(s.lat);
	cbcmn_runtime_destroy(rt);
}

/* Two thieves, one run each: the default spin (what a program gets: on
 * a busy host the spin gate stops the long spin, and the thief is then
 * mostly a parked executor woken by a doorbell), and a spin the program
 * chose (1 ms: the gate never applies, a spinning thief whatever the
 * host's load).  Their ratio, one run, says what the gate costs here. */
static void bench_steal(void)
{
	if (workers < 2) {
		fprintf(stderr, "cbcmn-bench: steal needs --workers >= 2\n");
		exit(2);
	}
	double d50, d99, s50, s99;
	steal_once(0, &d50, &d99);
	steal_once(1000000, &s50, &s99);
	printf("steal p50_ns %.0f\n", d50); /* the default spin, gated */
	printf("steal p99_ns %.0f\n", d99);
	printf("steal spinning_p50_ns %.0f\n", s50); /* spin_ns 1 ms: never gated */
	printf("steal spinning_p99_ns %.0f\n", s99);
	printf("steal p99_default_over_spinning %.2f\n", s99 > 0 ? d99 / s99 : 0);
}

/* ---- chan: ping-pong round trip and MPMC throughput ---------------------- */

struct chan_pp {
	cbcmn_chan *ab, *ba;
	long rounds;
	int spin;                  /* two executors, try-variants + yield */
	_Atomic uint32_t exec[2];  /* where each side ran last */
	_Atomic int started;
};

/* side 0 pings, side 1 pongs; the message is the round number. */
static int64_t chan_pp_side(cbcmn_cx *cx, void *arg)
{
	struct chan_pp *p = ((void **)arg)[0];
	int side = (int)(intptr_t)((void **)arg)[1];
	cbcmn_chan *out = side ? p->ba : p->ab, *in = side ? p->ab : p->ba;
	if (p->spin) {
		/* Hold this executor, without yielding, until the other side
		 * runs: it can then only be on another one.  From there on a
		 * side that yields stays where it is (yield lists are never
		 * stolen from). */
		atomic_fetch_add(&p->started, 1);
		while (atomic_load(&p->started) < 2)
			cbcmn__cpu_relax();
	}
	for (long i = 0; i < p->rounds; i++) {
		long v = i;
		int rc;
		if (side == 0 && (rc = p->spin ? cbcmn_chan_try_send(cx, out, &v)
					       : cbcmn_chan_send(cx, out, &v)) != 0)
			return rc;
		if (p->spin)
			while ((rc = cbcmn_chan_try_recv(cx, in, &v)) == -EAGAIN)
				cbcmn_yield(cx);
		else
			rc = cbcmn_chan_recv(cx, in, &v);
		if (rc)
			return rc;
		if (side == 1 && (rc = p->spin ? cbcmn_chan_try_send(cx, out, &v)
					       : cbcmn_chan_send(cx, out, &v)) != 0)
			return rc;
	}
	atomic_store(&p->exec[side], cbcmn_cx_executor(cx));
	return 0;
}

static int64_t chan_pp_main(cbcmn_cx *cx, void *arg)
{
	void *a0[2] = {arg, (void *)0}, *a1[2] = {arg, (void *)1};
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	cbcmn_nursery_spawn(cx, n, chan_pp_side, a1, NULL);
	cbcmn_nursery_spawn(cx, n, chan_pp_side, a0, NULL);
	return cbcmn_nursery_await_all(cx, n);
}

/* spin: each side is a root started by its own thread (through the inject
 * queue), so neither waits behind the other in one executor's deque. */
static cbcmn_runtime *chan_pp_rt;

static void *chan_pp_thread(void *arg)
{
	run(chan_pp_rt, chan_pp_side, arg);
	return NULL;
}

static void chan_pp_run(cbcmn_runtime *rt, struct chan_pp *p)
{
	if (!p->spin) {
		run(rt, chan_pp_main, p);
		return;
	}
	void *a[2][2] = {{p, (void *)0}, {p, (void *)1}};
	pthread_t th[2];
	chan_pp_rt = rt;
	for (int i = 0; i < 2; i++)
		if (pthread_create(&th[i], NULL, chan_pp_thread, a[i]))
			die("pthread_create", -EAGAIN);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
}

#define CHAN_NP 4
#define CHAN_NC 4

struct chan_mpmc {
	cbcmn_chan *c;
	long per;
};

static int64_t chan_producer(cbcmn_cx *cx, void *arg)
{
	struct chan_mpmc *m = arg;
	for (long i = 0; i < m->per; i++) {
		int rc = cbcmn_chan_send(cx, m->c, &i);
		if (rc)
			return rc;
	}
	return 0;
}

static int64_t chan_consumer(cbcmn_cx *cx, void *arg)
{
	struct chan_mpmc *m = arg;
	long v;
	int rc;
	while ((rc = cbcmn_chan_recv(cx, m->c, &v)) == 0)
		;
	return rc == -EPIPE ? 0 : rc;
}

static int64_t chan_mpmc_main(cbcmn_cx *cx, void *arg)
{
	struct chan_mpmc *m = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *prod, *cons;
	int rc;
	if ((rc = cbcmn_nursery_open(rt, cx, &cons)) || (rc = cbcmn_nursery_open(rt, cx, &prod)))
		return rc;
	for (int i = 0; i < CHAN_NC; i++)
		cbcmn_nursery_spawn(cx, cons, chan_consumer, m, NULL);
	for (int i = 0; i < CHAN_NP; i++)
		cbcmn_nursery_spawn(cx, prod, chan_producer, m, NULL);
	int64_t r = cbcmn_nursery_await_all(cx, prod);
	cbcmn_chan_close(cx, m->c);
	int64_t r2 = cbcmn_nursery_await_all(cx, cons);
	return r ? r : r2;
}

static void bench_chan(void)
{
	double v[16];
	if (workers < 2) {
		fprintf(stderr, "cbcmn-bench: chan needs --workers >= 2\n");
		return;
	}
	cbcmn_runtime *rt = runtime(workers, CBCMN_CONFIG_NO_INLINE);
	/* Round trip over capacity-1 channels both ways.  rtt_ns: blocking
	 * calls, each side parks every hop and is woken into its waker's
	 * next-task slot, so the scheduler usually runs the pair on one
	 * executor.  rtt_ns_two_exec: the two sides on two executors, polling
	 * with the try-variants (yield while empty): the cross-core cost of
	 * the channel lock and the message lines, no parking.  Each is
	 * followed by how many runs really had the sides apart. */
	/* rtt_ns: the two sides on two executors (what the issue asks for);
	 * rtt_ns_one_exec: blocking ping-pong, which the scheduler usually
	 * keeps on one executor. */
	static const char *const metric[2] = {"rtt_ns_one_exec", "rtt_ns"};
	double base[16];
	for (int spin = 0; spin < 2; spin++) {
		uint32_t apart = 0;
		for (int r = 0; r < reps; r++) {
			struct chan_pp p = {.rounds = 200000, .spin = spin};
			int rc;
			if ((rc = cbcmn_chan_create(rt, 1, sizeof(long), &p.ab)) ||
			    (rc = cbcmn_chan_create(rt, 1, sizeof(long), &p.ba)))
				die("chan_create", rc);
			uint64_t t0 = mono_ns();
			chan_pp_run(rt, &p);
			v[r] = (double)(mono_ns() - t0) / (double)p.rounds;
			apart += atomic_load(&p.exec[0]) != atomic_load(&p.exec[1]);
			cbcmn_chan_destroy(p.ab);
			cbcmn_chan_destroy(p.ba);
			if (spin == 0) /* Go's unbuffered channels, GOMAXPROCS = workers */
				base[r] = baseline_once("cbcmn-baseline-go", "chan", NULL);
		}
		if (spin == 0) /* our round trip over Go's (issue 15: <= 1) */
			print_baseline("chan", "go_rtt_ns", "rtt_one_exec_vs_go", v, base, reps);
		printf("chan %s %.0f\n", metric[spin], median(v, reps));
		printf("chan %s_runs_on_two_executors %u/%d\n", metric[spin], apart, reps);
	}
	/* Throughput: 4 producers x 4 consumers, capacity 64, blocking calls. */
	for (int r = 0; r < reps; r++) {
		struct chan_mpmc m = {.per = 250000};
		int rc = cbcmn_chan_create(rt, 64, sizeof(long), &m.c);
		if (rc)
			die("chan_create", rc);
		uint64_t t0 = mono_ns();
		run(rt, chan_mpmc_main, &m);
		v[r] = (double)(CHAN_NP * m.per) * 1e9 / (double)(mono_ns() - t0);
		cbcmn_chan_destroy(m.c);
	}
	printf("chan msgs_per_s %.0f\n", median(v, reps));
	cbcmn_runtime_destroy(rt);
}
/* benches[]: {"chan", bench_chan, "channel ping-pong round trip ns; 4x4 MPMC msgs/s"}, */

/* ---- doorbells ----------------------------------------------------------- */

struct db_pp {
	cbcmn_chan *ab, *ba;
	long rounds;
	uint64_t ns;
};

/* Pin the calling executor's thread to CPU cpu (when the machine has it). */
static void pin_self(int cpu)
{
	cpu_set_t set;
	if (cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(set), &set) != 0 || !CPU_ISSET(cpu, &set))
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static int64_t db_side(cbcmn_cx *cx, void *arg)
{
	struct db_pp *p = ((void **)arg)[0];
	int side = (int)(intptr_t)((void **)arg)[1];
	pin_self(side);
	cbcmn_chan *out = side ? p->ba : p->ab, *in = side ? p->ab : p->ba;
	long v = 0;
	int rc;
	/* Warm up, then time the rounds. */
	for (int pass = 0; pass < 2; pass++) {
		long n = pass ? p->rounds : p->rounds / 10;
		uint64_t t0 = mono_ns();
		for (long i = 0; i < n; i++) {
			if (side == 0 && (rc = cbcmn_chan_send(cx, out, &v)) != 0)
				return rc;
			if ((rc = cbcmn_chan_recv(cx, in, &v)) != 0)
				return rc;
			if (side == 1 && (rc = cbcmn_chan_send(cx, out, &v)) != 0)
				return rc;
		}
		if (side == 0 && pass)
			p->ns = mono_ns() - t0;
	}
	return 0;
}

static int64_t db_main(cbcmn_cx *cx, void *arg)
{
	struct db_pp *p = arg;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	void *a0[2] = {p, (void *)0}, *a1[2] = {p, (void *)1};
	cbcmn_nursery_spawn_pinned(cx, n, 1, db_side, a1, NULL);
	cbcmn_nursery_spawn_pinned(cx, n, 0, db_side, a0, NULL);
	return cbcmn_nursery_await_all(cx, n);
}

/* Why an SQPOLL runtime could not be made (its figures are skipped). */
static int sqpoll_refused;

/* A runtime of nexec parked (spin_ns) or spinning executors with rings
 * of ring_flags, and p's channels; NULL where SQPOLL rings are refused. */
static cbcmn_runtime *db_open(uint32_t nexec, uint64_t spin_ns, uint32_t ring_flags,
			      struct db_pp *p)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = nexec;
	cfg.spin_ns = spin_ns;
	cfg.ring_flags = ring_flags;
	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(&cfg, &rt);
	if (rc && (ring_flags & CBCMN_RING_SQPOLL)) {
		sqpoll_refused = rc; /* the caller skips SQPOLL's figures */
		return NULL;
	}
	if (rc)
		die("runtime_create", rc);
	if ((rc = cbcmn_chan_create(rt, 1, sizeof(long), &p->ab)) ||
	    (rc = cbcmn_chan_create(rt, 1, sizeof(long), &p->ba)))
		die("chan_create", rc);
	return rt;
}

/* The ns a round trip of p's, and rt gone. */
static double db_close(cbcmn_runtime *rt, struct db_pp *p)
{
	cbcmn_chan_destroy(p->ab);
	cbcmn_chan_destroy(p->ba);
	cbcmn_runtime_destroy(rt);
	return (double)p->ns / (double)p->rounds;
}

/* Round trip between two tasks pinned to two executors on two CPUs, over a
 * pair of channels: each hop wakes the other side's task, which goes home
 * through the lanes and, if its executor sleeps, a doorbell. */
static double doorbell_rtt(uint64_t spin_ns, uint32_t ring_flags, long rounds)
{
	struct db_pp p = {.rounds = rounds};
	cbcmn_runtime *rt = db_open(2, spin_ns, ring_flags, &p);
	if (!rt)
		return NAN;
	int64_t r;
	int rc;
	if ((rc = cbcmn_runtime_run(rt, db_main, &p, &r)) || r)
		die("doorbell ping-pong", rc ? rc : r);
	return db_close(rt, &p);
}

/* db_side() 0 on a thread of the program's (no cx: the channels' thread
 * calls). */
static void *db_thread(void *arg)
{
	return (void *)(intptr_t)db_side(NULL, arg);
}

/* Round trip between a thread outside the runtime (on CPU 0) and a task on
 * its one parked executor (CPU 1): the thread's send wakes the task with a
 * doorbell (lib/ring.c, cbcmn__doorbell(): with SQPOLL rings a MSG_RING
 * sent without a ring, or with CBCMN_RING_NO_MSG_RING the eventfd, as
 * every outside thread's before the twenty-first session); the task's
 * wakes the thread's futex. */
static double doorbell_thread_rtt(uint32_t ring_flags, long rounds)
{
	struct db_pp p = {.rounds = rounds};
	cbcmn_runtime *rt = db_open(1, CBCMN_SPIN_NONE, ring_flags, &p);
	if (!rt)
		return NAN;
	void *a0[2] = {&p, (void *)0}, *a1[2] = {&p, (void *)1};
	pthread_t th;
	int rc = pthread_create(&th, NULL, db_thread, a0);
	if (rc)
		die("pthread_create", -rc);
	int64_t r;
	void *tr;
	rc = cbcmn_runtime_run(rt, db_side, a1, &r);
	pthread_join(th, &tr);
	if (rc || r || tr)
		die("thread doorbell ping-pong", rc ? rc : r ? r : (int)(intptr_t)tr);
	return db_close(rt, &p);
}

static void bench_doorbell(void)
{
	int n = reps_set ? reps : 5;
	double parked[16], spinning[16], raw[16], efd[16], raw_spin[16], parked_efd[16], sqpoll[16],
		sqpoll_efd[16], thread_sq[16], thread_sq_efd[16];
	for (int r = 0; r < n; r++) {
		/* Alternated in one run: the machine's noise hits all alike. */
		parked[r] = doorbell_rtt(CBCMN_SPIN_NONE, 0, 2000);
		/* The runtime's eventfd doorbell, without SQPOLL, to price
		 * the doorbell alone against MSG_RING; then the whole path an
		 * SQPOLL runtime pays, its doorbells MSG_RINGs sent without a
		 * ring (lib/ring.c, doorbell_sync(); fewer rounds: ms a hop
		 * on a loaded host). */
		parked_efd[r] = doorbell_rtt(CBCMN_SPIN_NONE, CBCMN_RING_NO_MSG_RING, 2000);
		sqpoll[r] = doorbell_rtt(CBCMN_SPIN_NONE, CBCMN_RING_SQPOLL, 200);
		/* SQPOLL doorbells as eventfd writes (before the nineteenth
		 * session's MSG_RING without a ring, 6.13): each wake waits
		 * for the target's poller to complete the eventfd read. */
		sqpoll_efd[r] = isnan(sqpoll[r]) ? NAN
						  : doorbell_rtt(CBCMN_SPIN_NONE,
								 CBCMN_RING_SQPOLL | CBCMN_RING_NO_MSG_RING, 200);
		/* A thread outside the runtime rings an SQPOLL executor. */
		thread_sq[r] = isnan(sqpoll[r]) ? NAN : doorbell_thread_rtt(CBCMN_RING_SQPOLL, 200);
		thread_sq_efd[r] = isnan(sqpoll[r]) ? NAN
						    : doorbell_thread_rtt(CBCMN_RING_SQPOLL |
									   CBCMN_RING_NO_MSG_RING,
								   200);
		spinning[r] = doorbell_rtt(10ull * 1000000000ull, 0, 100000);
		int rc;
		if ((rc = pp_msgring_rtt(2000, false, &raw[r])) != 0)
			die("raw MSG_RING ping-pong", rc);
		if ((rc = pp_msgring_rtt(100000, true, &raw_spin[r])) != 0)
			die("raw MSG_RING ping-pong (spinning)", rc);
		if ((rc = pp_eventfd_rtt(2000, false, &efd[r])) != 0)
			die("eventfd ping-pong", rc);
	}
	double pk = median(parked, n), rw = median(raw, n);
	printf("doorbell parked_rtt_ns %.0f\n", pk);
	printf("doorbell spinning_rtt_ns %.0f\n", median(spinning, n));
	printf("doorbell raw_msgring_rtt_ns %.0f\n", rw);
	printf("doorbell raw_msgring_spinning_rtt_ns %.0f\n", median(raw_spin, n));
	printf("doorbell eventfd_rtt_ns %.0f\n", median(efd, n));
	printf("doorbell parked_vs_raw_ratio %.2f\n", pk / rw);
	double pe = median(parked_efd, n);
	printf("doorbell parked_eventfd_rtt_ns %.0f\n", pe);
	printf("doorbell eventfd_vs_msgring_ratio %.2f\n", pe / pk);
	if (isnan(sqpoll[0]) || isnan(sqpoll_efd[0])) {
		fprintf(stderr, "cbcmn-bench: doorbell: SQPOLL rings refused here (%s), their figures skipped\n",
			strerror(-sqpoll_refused));
		return;
	}
	double sq = median(sqpoll, n), sqe = median(sqpoll_efd, n);
	printf("doorbell parked_sqpoll_rtt_ns %.0f\n", sq);
	printf("doorbell parked_sqpoll_eventfd_rtt_ns %.0f\n", sqe);
	printf("doorbell sqpoll_eventfd_vs_msgring_ratio %.2f\n", sqe / sq);
	double ts = median(thread_sq, n), tse = median(thread_sq_efd, n);
	printf("doorbell thread_sqpoll_rtt_ns %.0f\n", ts);
	printf("doorbell thread_sqpoll_eventfd_rtt_ns %.0f\n", tse);
	printf("doorbell thread_sqpoll_eventfd_vs_msgring_ratio %.2f\n", tse / ts);
}

/* ---- echo and HTTP over loopback ------------------------------------------ */

struct io_fig {
	double rps, p50, p99, cpu;
};

static void print_fig(const char *name, struct io_fig *f, int n)
{
	double v[16];
	for (int i = 0; i < n; i++)
		v[i] = f[i].rps;
	printf("%s req_per_s %.0f\n", name, median(v, n));
	for (int i = 0; i < n; i++)
		v[i] = f[i].p50;
	printf("%s p50_us %.1f\n", name, median(v, n));
	for (int i = 0; i < n; i++)
		v[i] = f[i].p99;
	printf("%s p99_us %.1f\n", name, median(v, n));
	for (int i = 0; i < n; i++)
		v[i] = f[i].cpu;
	printf("%s server_cpu_us_per_req %.2f\n", name, median(v, n));
}

static void load(enum lg_proto proto, uint16_t port, struct lg_result *res)
{
	struct lg_config lc;
	lg_config_init(&lc);
	lc.port = port;
	lc.conns = conns;
	lc.msg_size = msg_size;
	lc.duration_s = duration_s;
	lc.cpu = mask_cpu(1);
	lc.proto = proto;
	lc.ring = client_ring;
	char err[200];
	if (wl_load(&lc, res, err, sizeof(err))) {
		fprintf(stderr, "cbcmn-bench: %s\n", err);
		exit(1);
	}
}

/* cbcmn's server for the loopback benches: one executor on the first CPU
 * of the affinity mask, with the command line's multishot and spin
 * settings. */
static struct fs_server *server_start(enum fs_proto fp)
{
	struct fs_config fc;
	fs_config_init(&fc);
	fc.proto = fp;
	fc.cpu = mask_cpu(0);
	fc.multishot = multishot;
	fc.spin_ns = server_spin_ns;
	struct fs_server *fs = NULL;
	int rc = fs_start(&fs, &fc);
	if (rc)
		die("fiber server", rc);
	return fs;
}

/* Server on one executor pinned to the first CPU of the affinity mask,
 * client on the second (the same one on one CPU), same client for cbcmn's
 * server and the epoll baseline, alternated in one run. */
static void bench_loopback(const char *name, enum fs_proto fp)
{
	int n = reps_set ? reps : 1;
	struct io_fig ours[16], base[16];
	enum lg_proto lp = fp == FS_HTTP ? LG_HTTP : LG_ECHO;
	for (int r = 0; r < n; r++) {
		struct fs_server *fs = server_start(fp);
		int rc;
		struct lg_result res;
		load(lp, fs_port(fs), &res);
		struct fs_stats st;
		if ((rc = fs_stop(fs, &st)) != 0)
			die("fiber server stop", rc);
		print_ring_stats(name, &st.rt, st.requests);
		ours[r] = (struct io_fig){res.req_per_s, res.p50_us, res.p99_us,
					  st.requests ? (double)st.cpu_us / (double)st.requests : 0};

		struct ee_server *es;
		rc = fp == FS_HTTP ? ee_start_http(&es, 0, mask_cpu(0)) : ee_start(&es, 0, mask_cpu(0));
		if (rc)
			die("epoll server", rc);
		load(lp, ee_port(es), &res);
		struct ee_stats est = {0};
		ee_stop(es, &est);
		base[r] = (struct io_fig){res.req_per_s, res.p50_us, res.p99_us,
					  est.requests ? (double)est.cpu_us / (double)est.requests : 0};
	}
	print_fig(name, ours, n);
	char bname[32];
	snprintf(bname, sizeof(bname), "%s-epoll", name);
	print_fig(bname, base, n);
	double a[16];
	for (int i = 0; i < n; i++)
		a[i] = ours[i].rps / base[i].rps;
	printf("%s vs_epoll_req_ratio %.3f\n", name, median(a, n));
	for (int i = 0; i < n; i++)
		a[i] = base[i].cpu > 0 ? ours[i].cpu / base[i].cpu : 0;
	printf("%s vs_epoll_cpu_ratio %.3f\n", name, median(a, n));
}

static void bench_echo(void)
{
	bench_loopback("echo", FS_ECHO);
}

static void bench_http(void)
{
	bench_loopback("http", FS_HTTP);
}

/* ---- bpf-overhead: the eBPF programs attached to this process vs not ----- */

/* Attach bpf/cbcmn.bpf.c to this very process; on failure say why on
 * stderr and leave (this bench only: it is not part of "all"). */
static struct bpfmon *bpf_attach(unsigned *nattached)
{
	struct bpfmon *m;
	char err[256] = "";
	int rc = bpfmon_open(&m, getpid(), bpf_flags, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "cbcmn-bench: bpf-overhead: cannot load the eBPF programs: %s\n",
			err[0] ? err : strerror(-rc));
		exit(1);
	}
	static bool listed;
	const struct bpfmon_prog *p;
	unsigned n = bpfmon_progs(m, &p), a = 0;
	for (unsigned i = 0; i < n; i++)
		if (p[i].state == BPFMON_ATTACHED) {
			a++;
			if (verbose && !listed)
				fprintf(stderr, "bpf-overhead: attached %s (%s)\n", p[i].name, p[i].target);
		}
	listed = true;
	*nattached = a;
	return m;
}

/* -v: what the programs counted while attached, by group (USDT probe hits,
 * sched events, io_uring events): the hits times a per-hit cost is the
 * overhead to expect. */
static void bpf_report(struct bpfmon *m, const char *what)
{
	if (!verbose || !m)
		return;
	static struct bpfmon_shard sh[CBCMN_BPF_NSLOTS];
	int n = bpfmon_read(m, sh, CBCMN_BPF_NSLOTS);
	if (n < 0)
		return;
#define F(x) offsetof(struct cbcmn_bpf_shard, x)
	static const size_t usdt_f[] = {F(steals), F(steal_fails), F(doorbells_msg_ring),
					F(doorbells_eventfd), F(doorbells_coalesced), F(xmsgs_sent),
					F(lock_contended), F(parks)};
	static const size_t sched_f[] = {F(switches), F(migrations)};
	static const size_t io_f[] = {F(sqes), F(cqes), F(cqring_waits), F(async_work)};
#undef F
	/* A group is "-" unless every counter in it is measured: a sum
	 * with a part missing is no count of the group. */
	struct {
		const char *name;
		const size_t *f;
		size_t n;
		uint64_t sum;
		bool measured;
		char text[24];
	} g[] = {{.name = "usdt", .f = usdt_f, .n = 8},
		 {.name = "steal+steal_fail", .f = usdt_f, .n = 2},
		 {.name = "sched", .f = sched_f, .n = 2},
		 {.name = "io_uring", .f = io_f, .n = 4}};
	enum { NG = sizeof(g) / sizeof(g[0]) };
	static bool told;
	for (int k = 0; k < NG; k++) {
		char why[200];
		g[k].measured = bpfmon_measured_all(m, g[k].f, g[k].n, why, sizeof(why));
		if (!g[k].measured && !told)
			fprintf(stderr, "bpf-overhead: %s not measured (\"-\"): %s\n", g[k].name, why);
		for (int i = 0; i < n; i++)
			for (size_t f = 0; f < g[k].n; f++)
				g[k].sum += *(const uint64_t *)((const char *)&sh[i].c + g[k].f[f]);
	}
	told = true;
	fprintf(stderr, "bpf-overhead: %s counted: usdt %s (steal+steal_fail %s) sched %s io_uring %s\n",
		what, bpfmon_fig(g[0].measured, g[0].sum, g[0].text, sizeof(g[0].text)),
		bpfmon_fig(g[1].measured, g[1].sum, g[1].text, sizeof(g[1].text)),
		bpfmon_fig(g[2].measured, g[2].sum, g[2].text, sizeof(g[2].text)),
		bpfmon_fig(g[3].measured, g[3].sum, g[3].text, sizeof(g[3].text)));
}

/* A figure of the bench that could not be measured (NAN) is "-" and why,
 * as the tools print what is not measured (bpfmon_fig): never a number
 * made up, nor "nan". */
static void print_ns(const char *key, double v, int prec, const char *why)
{
	char buf[24];
	if (isnan(v))
		printf("bpf-overhead %s %s (not measured: %s)\n", key, bpfmon_fig(false, 0, buf, sizeof(buf)),
		       why);
	else
		printf("bpf-overhead %s %.*f\n", key, prec, v);
}

/* A sample: wall (ms for fib, req/s for echo) and CPU time (process ms
 * for fib, server thread µs per request for echo).  The CPU figure counts
 * the programs' run time, which runs in the traced threads' context, and
 * not the time other tenants take the CPU away: steadier on a noisy host. */
struct bo_sample {
	double wall, cpu;
};

static double process_cpu_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static struct bo_sample fib_once(cbcmn_runtime *rt, bool with_bpf, unsigned *nattached)
{
	/* One sample: the median of FIB_RUNS fib(30) under one attach, as one
	 * ~100 ms run moves by 20 % on a shared machine. */
	enum { FIB_RUNS = 5 };
	double ms[FIB_RUNS], cpu[FIB_RUNS];
	struct bpfmon *m = with_bpf ? bpf_attach(nattached) : NULL;
	for (int i = 0; i < FIB_RUNS; i++) {
		struct fib f = {.n = 30};
		double c0 = process_cpu_ms();
		uint64_t t0 = mono_ns();
		run(rt, fib_task, &f);
		ms[i] = (double)(mono_ns() - t0) / 1e6;
		cpu[i] = process_cpu_ms() - c0;
		if (f.out != 832040)
			die("fib(30) gave a wrong answer", -EPROTO);
	}
	bpf_report(m, "fib x5");
	bpfmon_close(m);
	return (struct bo_sample){median(ms, FIB_RUNS), median(cpu, FIB_RUNS)};
}

static struct bo_sample echo_once(bool with_bpf, unsigned *nattached)
{
	struct fs_server *fs = server_start(FS_ECHO);
	int rc;
	/* The executor exists: bpfmon finds it by its thread name. */
	struct bpfmon *m = with_bpf ? bpf_attach(nattached) : NULL;
	struct lg_result res;
	load(LG_ECHO, fs_port(fs), &res);
	struct fs_stats st;
	if ((rc = fs_stop(fs, &st)) != 0)
		die("fiber server stop", rc);
	bpf_report(m, "echo");
	bpfmon_close(m);
	return (struct bo_sample){res.req_per_s,
				  st.requests ? (double)st.cpu_us / (double)st.requests : 0};
}

/* host_switch_ns: what the attached programs add to a context switch of a
 * process they do not watch (every other process of the host).  Two
 * processes forked from here (not the watched one) ping-pong a byte
 * through two pipes, both pinned to one CPU, so that each hop is a
 * wakeup and a direct switch from one to the other: a round trip is two
 * switches (and the two wakeups that cause them, which the sched_wakeup
 * program sees too; both are charged to the switch).  Timed in CPU time,
 * the two processes' summed, not wall time: the programs run in the
 * switching tasks' context, and on a shared machine the wall time of a
 * hop mostly measures how long other tenants keep CPU 0 (8 +- 2 us a
 * switch here under the stress loop, hiding tens of ns).  One sample: the
 * median over HS_BLOCKS blocks of HS_RTT round trips, ns per switch.
 * Returns NAN when the processes could not be started. */
enum { HS_RTT = 20000, HS_BLOCKS = 5 };

/* Round trips a block: HS_RTT, or CBCMN_BENCH_HS_RTT=N (1..HS_RTT), a
 * test aid (docs/BENCHMARKS.md) for tests that check what the bench
 * prints, not its figures: under an emulator a switch takes ~150 us, and
 * the default ping-pongs of one --reps 1 run took minutes there. */
static int hs_rtt(void)
{
	const char *e = getenv("CBCMN_BENCH_HS_RTT");
	long v = e ? atol(e) : 0;
	return v > 0 && v <= HS_RTT ? (int)v : HS_RTT;
}

static void hs_side(int in, int out, bool first, int report)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	sched_setaffinity(0, sizeof(one), &one); /* both on CPU 0: every hop switches */
	char c = 0;
	double cpu[HS_BLOCKS];
	const int rtt = hs_rtt();
	for (int b = -1; b < HS_BLOCKS; b++) { /* block -1: warm-up */
		double c0 = process_cpu_ms();
		for (int i = 0; i < rtt; i++) {
			if (first && write(out, &c, 1) != 1)
				_exit(1);
			if (read(in, &c, 1) != 1)
				_exit(1);
			if (!first && write(out, &c, 1) != 1)
				_exit(1);
		}
		if (b >= 0)
			cpu[b] = (process_cpu_ms() - c0) * 1e6;
	}
	if (write(report, cpu, sizeof(cpu)) != (ssize_t)sizeof(cpu))
		_exit(1);
	_exit(0);
}

static double host_switch_once(void)
{
	int ab[2], ba[2], rep[2][2];
	if (pipe(ab) || pipe(ba) || pipe(rep[0]) || pipe(rep[1]))
		return NAN;
	pid_t a = fork();
	if (a == 0)
		hs_side(ba[0], ab[1], true, rep[0][1]);
	pid_t b = a > 0 ? fork() : -1;
	if (b == 0)
		hs_side(ab[0], ba[1], false, rep[1][1]);
	close(ab[0]);
	close(ab[1]);
	close(ba[0]);
	close(ba[1]);
	close(rep[0][1]);
	close(rep[1][1]);
	double ns = NAN, ca[HS_BLOCKS], cb[HS_BLOCKS], per[HS_BLOCKS];
	if (a > 0 && b > 0 && read(rep[0][0], ca, sizeof(ca)) == (ssize_t)sizeof(ca) &&
	    read(rep[1][0], cb, sizeof(cb)) == (ssize_t)sizeof(cb)) {
		for (int i = 0; i < HS_BLOCKS; i++)
			per[i] = (ca[i] + cb[i]) / (2.0 * hs_rtt());
		ns = median(per, HS_BLOCKS);
	}
	close(rep[0][0]);
	close(rep[1][0]);
	if (a > 0)
		waitpid(a, NULL, 0);
	if (b > 0)
		waitpid(b, NULL, 0);
	return ns;
}

/* The floor: bpf/cbcmn_floor.bpf.c's empty programs on the same sched
 * tracepoints; NULL (and why on stderr) where they do not load. */
static struct cbcmn_floor_bpf *floor_attach(void)
{
	struct cbcmn_floor_bpf *f = cbcmn_floor_bpf__open_and_load();
	if (f && cbcmn_floor_bpf__attach(f) == 0)
		return f;
	fprintf(stderr, "cbcmn-bench: bpf-overhead: the empty sched programs do not load: %s\n",
		strerror(errno));
	cbcmn_floor_bpf__destroy(f);
	return NULL;
}

/* ns per run of one loaded program, as the kernel's run statistics time
 * it (its body, from the call into it: the dispatch before is not in it). */
static double prog_ns_per_run(int fd)
{
	struct bpf_prog_info info;
	__u32 len = sizeof(info);
	memset(&info, 0, sizeof(info));
	if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len) || !info.run_cnt)
		return NAN;
	return (double)info.run_time_ns / (double)info.run_cnt;
}

/* What our sched programs' code adds over an empty one, per context
 * switch of tasks that are not the target: the empty sched_switch program
 * and ours attached together, the ping-pong run once with the kernel's
 * run statistics on (two clock reads around each run, the same for
 * both), and the difference of their ns per switch: ours is every
 * cbcmn_sched_* program's run time (any program on the host's scheduling
 * path) over the switches ours saw.  One run, both timed over the same
 * switches, so that the machine's drift between runs (tens of ns on a
 * shared host) cancels; which one runs first on the tracepoint
 * alternates (floor_first).  NAN where statistics cannot be turned on. */
static char filter_why[160] = "?";

static double filter_ns_once(unsigned *attached, bool floor_first)
{
	int sfd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (sfd < 0) {
		snprintf(filter_why, sizeof(filter_why),
			 "the kernel's run statistics cannot be turned on (BPF_ENABLE_STATS: %s)", strerror(errno));
		return NAN;
	}
	struct cbcmn_floor_bpf *f = floor_first ? floor_attach() : NULL;
	struct bpfmon *m = bpf_attach(attached);
	if (!floor_first)
		f = floor_attach();
	double empty = NAN, ours = NAN;
	struct bpfmon_cost all, sw;
	if (!f)
		snprintf(filter_why, sizeof(filter_why), "the empty sched_switch program does not load");
	if (f) {
		host_switch_once();
		empty = prog_ns_per_run(bpf_program__fd(f->progs.floor_switch));
		if (!bpfmon_cost_of(m, "cbcmn_sched", &all) && !bpfmon_cost_of(m, "cbcmn_sched_switch", &sw) &&
		    sw.runs)
			ours = (double)all.run_ns / (double)sw.runs;
	}
	bpfmon_close(m);
	cbcmn_floor_bpf__destroy(f);
	close(sfd);
	if (verbose)
		fprintf(stderr, "bpf-overhead: ns per switch (run statistics, %s first): empty %.1f, ours %.1f\n",
			floor_first ? "empty" : "ours", empty, ours);
	return ours - empty;
}

/* uprobe_trap_ns: what one USDT hit costs the traced thread before our
 * program runs: the breakpoint trap into the kernel, the uprobe lookup,
 * the single-step or emulation of the replaced instruction, the return.
 * An empty uprobe program on a function of ours, called in a loop with
 * and without it; medians of UT_RUNS pairs, ns per call. */
enum { UT_CALLS = 200000, UT_RUNS = 5 };

/* The probed spot is a nop, as a USDT site is (sys/sdt.h): the kernel
 * skips it without single-stepping.  In assembly so that no prologue
 * (endbr64, which a uprobe must single-step: ~27 us a hit here) comes
 * first. */
__asm__(".text\n"
	".globl cbcmn_bench_uprobe_target\n"
	".type cbcmn_bench_uprobe_target, @function\n"
	"cbcmn_bench_uprobe_target:\n"
	"\tnop\n"
	"\tret\n"
	".size cbcmn_bench_uprobe_target, .-cbcmn_bench_uprobe_target\n");
void cbcmn_bench_uprobe_target(void);

static double uprobe_loop_ns(void)
{
	uint64_t t0 = mono_ns();
	for (int i = 0; i < UT_CALLS; i++)
		cbcmn_bench_uprobe_target();
	return (double)(mono_ns() - t0) / UT_CALLS;
}

static char uprobe_why[256] = "?";

static double uprobe_trap_ns(void)
{
	struct cbcmn_floor_bpf *f = cbcmn_floor_bpf__open_and_load();
	double d[UT_RUNS];
	int n = 0;
	if (!f)
		snprintf(uprobe_why, sizeof(uprobe_why), "the empty uprobe program does not load: %s",
			 strerror(errno));
	for (int r = 0; f && r < UT_RUNS; r++) {
		LIBBPF_OPTS(bpf_uprobe_opts, o, .func_name = "cbcmn_bench_uprobe_target");
		double off = uprobe_loop_ns();
		struct bpf_link *l = bpf_program__attach_uprobe_opts(f->progs.floor_uprobe, getpid(),
								     "/proc/self/exe", 0, &o);
		if (!l) {
			int e = errno;
			snprintf(uprobe_why, sizeof(uprobe_why), "an empty uprobe cannot be attached: %s%s",
				 strerror(e), bpfmon_uprobe_caps_why(-e));
			break;
		}
		double on = uprobe_loop_ns();
		bpf_link__destroy(l);
		d[n++] = on - off;
	}
	cbcmn_floor_bpf__destroy(f);
	return n ? median(d, n) : NAN;
}

/* Triples, in a rotating order: nothing attached, the empty programs,
 * ours (bpfmon_open on this process, so the ping-pong is not watched).
 * host_switch_ns: ours minus nothing; host_switch_floor_ns: empty minus
 * nothing (the tracepoint's call into BPF, which no program avoids);
 * host_switch_filter_cpu_ns: ours minus empty, what our programs' code
 * adds for a task that is not the target.  Medians of the per-triple
 * differences.  Then host_switch_filter_ns, the same from the kernel's
 * run statistics (filter_ns_once): the figure to hold to 10 ns, the
 * others move by hundreds of ns on a shared machine. */
static void bench_host_switch(unsigned *attached)
{
	int n = reps_set ? reps : 9;
	double d[32], fl[32], fi[32], base[32];
	if (n > 32)
		n = 32;
	for (int r = 0; r < n; r++) {
		double t[3]; /* nothing, empty, ours */
		for (int k = 0; k < 3; k++) {
			int which = (r + k) % 3;
			struct bpfmon *m = which == 2 ? bpf_attach(attached) : NULL;
			struct cbcmn_floor_bpf *f = which == 1 ? floor_attach() : NULL;
			if (which == 1 && !f)
				exit(1);
			t[which] = host_switch_once();
			bpfmon_close(m);
			cbcmn_floor_bpf__destroy(f);
			if (isnan(t[which])) {
				fprintf(stderr, "cbcmn-bench: bpf-overhead: the ping-pong processes did not run\n");
				exit(1);
			}
		}
		base[r] = t[0];
		d[r] = t[2] - t[0];
		fl[r] = t[1] - t[0];
		fi[r] = t[2] - t[1];
		if (verbose)
			fprintf(stderr, "bpf-overhead: host switch without %.1f ns, empty programs %+.1f, ours %+.1f\n",
				t[0], fl[r], d[r]);
	}
	printf("bpf-overhead host_switch_base_ns %.1f\n", median(base, n));
	printf("bpf-overhead host_switch_ns %.1f\n", median(d, n));
	printf("bpf-overhead host_switch_floor_ns %.1f\n", median(fl, n));
	printf("bpf-overhead host_switch_filter_cpu_ns %.1f\n", median(fi, n));
	bool all = true;
	for (int r = 0; r < n; r++)
		all &= !isnan(fi[r] = filter_ns_once(attached, r & 1));
	print_ns("host_switch_filter_ns", all ? median(fi, n) : NAN, 1, filter_why);
	print_ns("uprobe_trap_ns", uprobe_trap_ns(), 0, uprobe_why);
	fflush(stdout);
}

/* bpf-host-switch: host_switch_ns alone (bpf-overhead's last figure). */
static void bench_bpf_host_switch(void)
{
	unsigned attached = 0;
	bench_host_switch(&attached);
	printf("bpf-overhead attached_programs %u\n", attached);
}

/* Pairs of runs, with and without, alternated (which goes first alternates
 * too, so a drift of the machine cancels); the figure is the median of the
 * per-pair slowdowns in %.  Positive: slower with the programs attached. */
static void bench_bpf_overhead(void)
{
	unsigned attached = 0;
	double pct[16], cpct[16];
	int n = reps_set ? reps : 5;
	cbcmn_runtime *rt = runtime(workers, 0);
	fib_once(rt, false, &attached); /* warm-up: stacks, caches */
	for (int r = 0; r < n; r++) {
		struct bo_sample on, off;
		if (r & 1) {
			off = fib_once(rt, false, &attached);
			on = fib_once(rt, true, &attached);
		} else {
			on = fib_once(rt, true, &attached);
			off = fib_once(rt, false, &attached);
		}
		pct[r] = (on.wall - off.wall) / off.wall * 100.0;
		cpct[r] = (on.cpu - off.cpu) / off.cpu * 100.0;
		if (verbose)
			fprintf(stderr, "bpf-overhead: fib with %.1f ms (cpu %.1f) without %.1f ms (cpu %.1f): %+.2f%% (cpu %+.2f%%)\n",
				on.wall, on.cpu, off.wall, off.cpu, pct[r], cpct[r]);
	}
	cbcmn_runtime_destroy(rt);
	printf("bpf-overhead fib_pct %.2f\n", median(pct, n));
	printf("bpf-overhead fib_cpu_pct %.2f\n", median(cpct, n));
	fflush(stdout);

	double saved = duration_s;
	if (!duration_set)
		duration_s = 2.0;
	n = reps_set ? reps : 3;
	for (int r = 0; r < n; r++) {
		struct bo_sample on, off;
		if (r & 1) {
			off = echo_once(false, &attached);
			on = echo_once(true, &attached);
		} else {
			on = echo_once(true, &attached);
			off = echo_once(false, &attached);
		}
		pct[r] = (off.wall - on.wall) / off.wall * 100.0;
		cpct[r] = (on.cpu - off.cpu) / off.cpu * 100.0;
		if (verbose)
			fprintf(stderr, "bpf-overhead: echo with %.0f req/s (%.2f cpu us/req) without %.0f req/s (%.2f): %+.2f%% (cpu %+.2f%%)\n",
				on.wall, on.cpu, off.wall, off.cpu, pct[r], cpct[r]);
	}
	duration_s = saved;
	printf("bpf-overhead echo_pct %.2f\n", median(pct, n));
	printf("bpf-overhead echo_cpu_pct %.2f\n", median(cpct, n));
	bench_host_switch(&attached);
	printf("bpf-overhead attached_programs %u\n", attached);
}

/* ---- iolat: a write's latency beside CPU-bound tasks (issue 15) ----------- */

#define IOLAT_HOGS 16
#define IOLAT_HOG_NS 2000000ull /* each runs 2 ms between yields */
#define IOLAT_MAX 4096

struct iolat {
	int fd;
	_Atomic bool stop;
	uint32_t n, ncpu;
	double us[IOLAT_MAX];
	/* The same writes in the CPU time of the writer's executor thread,
	 * those that ended on the executor they began on: what ran there
	 * meanwhile (the neighbours' slices included), without the pauses a
	 * CPU quota or another process puts in wall time. */
	double cpu_us[IOLAT_MAX];
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t iolat_hog(cbcmn_cx *cx, void *arg)
{
	struct iolat *l = arg;
	while (!atomic_load_explicit(&l->stop, memory_order_relaxed)) {
		uint64_t end = mono_ns() + IOLAT_HOG_NS;
		while (mono_ns() < end)
			;
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t iolat_writer(cbcmn_cx *cx, void *arg)
{
	struct iolat *l = arg;
	uint64_t stop = mono_ns() + (duration_set ? (uint64_t)duration_s : 1) * 1000000000ull;
	int64_t rc = 0;
	while (l->n < IOLAT_MAX && mono_ns() < stop) {
		uint32_t ex = cbcmn_cx_executor(cx);
		uint64_t c0 = thread_cpu_ns(), t0 = mono_ns();
		rc = cbcmn_write(cx, l->fd, "x", 1);
		if (rc != 1)
			break;
		uint64_t t1 = mono_ns(), c1 = thread_cpu_ns();
		l->us[l->n++] = (double)(t1 - t0) / 1e3;
		if (cbcmn_cx_executor(cx) == ex)
			l->cpu_us[l->ncpu++] = (double)(c1 - c0) / 1e3;
		cbcmn_sleep(cx, 1000000); /* 1 ms: a request now and then */
	}
	atomic_store(&l->stop, true);
	return rc == 1 ? 0 : rc < 0 ? rc : -EIO;
}

static int64_t iolat_root(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	for (int i = 0; i < IOLAT_HOGS && !rc; i++)
		rc = cbcmn_nursery_spawn(cx, n, iolat_hog, arg, NULL);
	if (!rc)
		rc = cbcmn_nursery_spawn(cx, n, iolat_writer, arg, NULL);
	if (rc)
		atomic_store(&((struct iolat *)arg)->stop, true);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : r;
}

/* The socket's other end, drained by a thread: a peer that never reads
 * fills the socket (about 280 one-byte writes here), and the writer then
 * waits for room for ever. */
static void *iolat_drain(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char buf[4096];
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

/* p50/p99 of a 1-byte cbcmn_write to a socket, a request every 1 ms from
 * one task, beside 16 tasks that each compute 2 ms between yields: with
 * the time bound on submission (cfg.io_batch_ns, the default) and without
 * it (the old 16-pick batch), in the same run. */
static void bench_iolat(void)
{
	static const struct {
		const char *mode;
		uint64_t batch_ns;
	} modes[] = {{"", 0}, {"_pick_batch_only", UINT64_MAX / 4}};
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
			die("socketpair", -errno);
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = workers;
		cfg.io_batch_ns = modes[m].batch_ns;
		cbcmn_runtime *rt;
		int rc = cbcmn_runtime_create(&cfg, &rt);
		if (rc)
			die("runtime_create", rc);
		struct iolat *l = calloc(1, sizeof(*l));
		if (!l)
			die("calloc", -ENOMEM);
		l->fd = sv[0];
		pthread_t drain;
		if (pthread_create(&drain, NULL, iolat_drain, (void *)(intptr_t)sv[1]))
			die("pthread_create", -EAGAIN);
		run(rt, iolat_root, l);
		cbcmn_runtime_destroy(rt);
		shutdown(sv[0], SHUT_WR); /* the drain's end of file */
		pthread_join(drain, NULL);
		close(sv[0]);
		close(sv[1]);
		if (l->n == 0)
			die("iolat: no write completed", -EIO);
		printf("iolat write_p50_us%s %.1f\n", modes[m].mode, percentile(l->us, (int)l->n, 0.50));
		printf("iolat write_p99_us%s %.1f\n", modes[m].mode, percentile(l->us, (int)l->n, 0.99));
		if (l->ncpu) {
			printf("iolat write_p50_cpu_us%s %.1f\n", modes[m].mode,
			       percentile(l->cpu_us, (int)l->ncpu, 0.50));
			printf("iolat write_p99_cpu_us%s %.1f\n", modes[m].mode,
			       percentile(l->cpu_us, (int)l->ncpu, 0.99));
		}
		free(l);
	}
}

/* ---- sqpoll: a ready read's cost on an SQPOLL ring vs a plain one ---------- */

/* Each call on an SQPOLL ring waits for the kernel's poller thread
 * (iou-sqp-TID, TID the thread that made the ring) to pick its SQE up: on
 * a host whose CPUs are all busy that thread waits for a CPU like any
 * other (docs/IO.md, "SQPOLL").  Its time waiting to run, from
 * /proc/self/task/ID/schedstat (ns on the CPU, ns waiting on a run queue,
 * times run).  *tid 0: find the poller of the calling executor's ring,
 * iou-sqp-<its thread id>; not any iou-sqp (the runtime has another, and
 * a destroyed ring's poller lingers for tens of ms: its wait counted at
 * the start and gone at the end wrapped the difference, poller_wait_pct
 * 19391653588807.1).  False without that poller, or without schedstat
 * ("0 0 0" where the kernel keeps no sched_info: not a wait of 0). */
static pid_t sqpoll_poller(void)
{
	char path[96], comm[32], want[32];
	pid_t tid = 0;
	snprintf(want, sizeof(want), "iou-sqp-%d\n", (int)gettid());
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return 0;
	for (struct dirent *de; !tid && (de = readdir(d)) != NULL;) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%.20s/comm", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && strcmp(comm, want) == 0)
			tid = (pid_t)atoi(de->d_name);
		fclose(f);
	}
	closedir(d);
	return tid;
}

static bool sqpoll_wait_ns(pid_t *tid, uint64_t *wait_ns)
{
	char path[96];
	if (*tid == 0 && (*tid = sqpoll_poller()) == 0)
		return false;
	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)*tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	unsigned long long run_ns, wait, slices;
	bool ok = fscanf(f, "%llu %llu %llu", &run_ns, &wait, &slices) == 3 && slices > 0;
	fclose(f);
	*wait_ns = wait;
	return ok;
}

#define SQ_CALLS 2000

struct sq_run {
	int p[2];
	bool sqpoll;
	double ns[SQ_CALLS];
	uint64_t wall_ns, poller_wait_ns;
	bool seen; /* the poller's schedstat was read */
};

/* SQ_CALLS 1-byte reads of a pipe that already holds the byte: the call's
 * own cost, no waiting for data. */
static int64_t sq_root(cbcmn_cx *cx, void *arg)
{
	struct sq_run *s = arg;
	uint64_t w0 = 0, w1 = 0;
	pid_t tid = 0;
	uint64_t t0 = mono_ns(); /* the wall time holds the wait's window */
	bool seen = s->sqpoll && sqpoll_wait_ns(&tid, &w0);
	for (int i = 0; i < SQ_CALLS; i++) {
		char c = 'x';
		if (write(s->p[1], &c, 1) != 1)
			return -errno;
		uint64_t t = mono_ns();
		int64_t rc = cbcmn_read(cx, s->p[0], &c, 1);
		if (rc != 1)
			return rc < 0 ? rc : -EIO;
		s->ns[i] = (double)(mono_ns() - t);
	}
	s->seen = seen && sqpoll_wait_ns(&tid, &w1) && w1 >= w0;
	s->wall_ns = mono_ns() - t0;
	s->poller_wait_ns = s->seen ? w1 - w0 : 0;
	return 0;
}

/* One round of one mode: its p50 and p99 (ns), and the share (%) of the
 * calls' time the poller spent waiting for a CPU; false where SQPOLL rings
 * are refused (refused: why). */
static bool sq_round(bool sqpoll, double *p50, double *p99, double *wait_pct, int *refused)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.ring_flags = sqpoll ? CBCMN_RING_SQPOLL : 0;
	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(&cfg, &rt);
	if (rc && sqpoll) {
		*refused = rc;
		return false;
	}
	if (rc)
		die("runtime_create", rc);
	struct sq_run *s = calloc(1, sizeof(*s));
	if (!s)
		die("calloc", -ENOMEM);
	if (pipe2(s->p, O_CLOEXEC))
		die("pipe", -errno);
	s->sqpoll = sqpoll;
	run(rt, sq_root, s);
	cbcmn_runtime_destroy(rt);
	close(s->p[0]);
	close(s->p[1]);
	*p50 = percentile(s->ns, SQ_CALLS, 0.50);
	*p99 = percentile(s->ns, SQ_CALLS, 0.99);
	/* At most 100: a wait under way at the start is counted whole when
	 * it ends (schedstat adds it then), its part before the window too. */
	*wait_pct = s->seen ? fmin(100.0, 100.0 * (double)s->poller_wait_ns / (double)s->wall_ns) : NAN;
	free(s);
	return true;
}

/* p50/p99 of a ready 1-byte read on a 1-executor runtime, plain ring and
 * SQPOLL ring alternated round by round (medians over the rounds), and the
 * share of the SQPOLL calls' time its poller thread waited for a CPU:
 * near 0 on an idle host; near 100 where the host has no CPU to spare,
 * and each call then waits for the poller to be scheduled. */
static void bench_sqpoll(void)
{
	double p50[2][16], p99[2][16], pct[16];
	int n = reps < 16 ? reps : 16, refused = 0, seen = 0;
	for (int r = 0; r < n; r++) {
		double unused;
		sq_round(false, &p50[0][r], &p99[0][r], &unused, &refused);
		if (!sq_round(true, &p50[1][r], &p99[1][r], &pct[r], &refused)) {
			fprintf(stderr, "cbcmn-bench: sqpoll: SQPOLL rings refused here (%s), its figures skipped\n",
				cbcmn_strerror(refused));
			return;
		}
		seen += !isnan(pct[r]);
	}
	double a50 = median(p50[0], n), b50 = median(p50[1], n);
	printf("sqpoll read_p50_ns %.0f\n", a50);
	printf("sqpoll read_p99_ns %.0f\n", median(p99[0], n));
	printf("sqpoll sqpoll_read_p50_ns %.0f\n", b50);
	printf("sqpoll sqpoll_read_p99_ns %.0f\n", median(p99[1], n));
	printf("sqpoll sqpoll_vs_plain_p50_ratio %.2f\n", b50 / a50);
	if (seen == n)
		printf("sqpoll poller_wait_pct %.1f\n", median(pct, n));
	else
		fprintf(stderr, "cbcmn-bench: sqpoll: poller_wait_pct skipped: the poller's schedstat read in %d of %d rounds\n",
			seen, n);
}

/* ---- scaling: 1 -> 2 executors, and 64 on this machine (issue 15) -------- */

/* Three workloads, each timed in wall and process CPU time:
 *   fib    fib(SCALE_FIB_N) with a task per call: parallel work for all;
 *          its wall time with 1 and 2 executors gives the speed-up;
 *   chain  SCALE_CHAINS tasks that each spawn one empty child and await
 *          it, over and over, for SCALE_RUN_MS: short bursts, every spawn
 *          a notification that wakes an idle executor;
 *   tick   SCALE_TICKERS tasks, one pinned to each executor in turn, that
 *          each sleep 1 ms, SCALE_TICKS times, and record how late each
 *          wake-up came: every executor woken by its own timer (as by its
 *          own ring's I/O), a little work, then idle again: where
 *          executors that spin after every wake-up take the CPU the
 *          others need.
 * With 64 executors on this machine's CPUs: what oversubscription costs. */
#define SCALE_FIB_N 27
#define SCALE_CHAINS 4
#define SCALE_RUN_MS 300u
#define SCALE_TICKERS 64
#define SCALE_TICKS 100
#define SCALE_LATE_MAX (SCALE_TICKERS * SCALE_TICKS)

enum scale_kind { SCALE_FIB, SCALE_CHAIN, SCALE_TICK };

struct scale_run {
	enum scale_kind kind;
	_Atomic bool stop;
	_Atomic uint64_t chain_joins;
	_Atomic uint32_t nlate;
	double late_us[SCALE_LATE_MAX];
};

static int64_t scale_ticker(cbcmn_cx *cx, void *arg)
{
	struct scale_run *s = arg;
	for (int i = 0; i < SCALE_TICKS; i++) {
		uint64_t t0 = mono_ns();
		int rc = cbcmn_sleep(cx, 1000000);
		if (rc)
			return rc;
		uint64_t late = mono_ns() - t0;
		uint32_t k = atomic_fetch_add(&s->nlate, 1);
		if (k < SCALE_LATE_MAX)
			s->late_us[k] = late > 1000000 ? (double)(late - 1000000) / 1e3 : 0.0;
	}
	return 0;
}

static int64_t scale_empty(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

static int64_t scale_chain(cbcmn_cx *cx, void *arg)
{
	struct scale_run *s = arg;
	uint64_t n = 0;
	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		cbcmn_nursery *c;
		int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &c);
		if (rc)
			return rc;
		rc = cbcmn_nursery_spawn(cx, c, scale_empty, NULL, NULL);
		int64_t r = cbcmn_nursery_await_all(cx, c);
		if (rc || r)
			return rc ? rc : r;
		n++;
	}
	atomic_fetch_add(&s->chain_joins, n);
	return 0;
}

static int64_t scale_root(cbcmn_cx *cx, void *arg)
{
	struct scale_run *s = arg;
	if (s->kind == SCALE_FIB) {
		struct fib f = {.n = SCALE_FIB_N};
		int64_t r = fib_task(cx, &f);
		return r ? r : f.out == fib_seq(SCALE_FIB_N) ? 0 : -EPROTO;
	}
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	if (s->kind == SCALE_CHAIN) {
		for (int i = 0; i < SCALE_CHAINS && !rc; i++)
			rc = cbcmn_nursery_spawn(cx, n, scale_chain, s, NULL);
		if (!rc)
			rc = cbcmn_sleep(cx, SCALE_RUN_MS * 1000000ull);
	}
	/* Ticker i on executor i: each executor woken by its own timer. */
	uint32_t nx = cbcmn_runtime_workers(cbcmn_cx_runtime(cx));
	for (uint32_t i = 0; s->kind == SCALE_TICK && i < SCALE_TICKERS && !rc; i++)
		rc = cbcmn_nursery_spawn_pinned(cx, n, i % nx, scale_ticker, s, NULL);
	atomic_store(&s->stop, true);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	return rc ? rc : r;
}

struct scale_fig {
	double wall_ms, cpu_ms, rate, per_cpu_ms, late_p99_us;
};

static struct scale_fig scale_once(cbcmn_runtime *rt, enum scale_kind kind)
{
	struct scale_run *s = calloc(1, sizeof(*s));
	if (!s)
		die("calloc", -ENOMEM);
	s->kind = kind;
	uint64_t c0 = process_cpu_ns(), t0 = mono_ns();
	run(rt, scale_root, s);
	struct scale_fig f = {
		.wall_ms = (double)(mono_ns() - t0) / 1e6,
		.cpu_ms = (double)(process_cpu_ns() - c0) / 1e6,
	};
	uint32_t nl = atomic_load(&s->nlate);
	if (nl > SCALE_LATE_MAX)
		nl = SCALE_LATE_MAX;
	f.late_p99_us = nl ? percentile(s->late_us, (int)nl, 0.99) : 0;
	f.rate = (double)atomic_load(&s->chain_joins) / (f.wall_ms / 1e3);
	/* In a CPU-capped cgroup beside other tenants the wall rate counts
	 * their share too: joins per ms of this process's CPU does not. */
	f.per_cpu_ms = (double)atomic_load(&s->chain_joins) / (f.cpu_ms > 0 ? f.cpu_ms : 1);
	free(s);
	return f;
}

#define SCALE_REPS_MAX 16

/* One figure over the reps: the median. */
static double scale_median(struct scale_fig (*v)[SCALE_REPS_MAX], int i, int n, size_t off)
{
	double x[SCALE_REPS_MAX];
	for (int r = 0; r < n; r++)
		x[r] = *(const double *)((const char *)&v[i][r] + off);
	return median(x, n);
}

static void bench_scaling(void)
{
	static const uint32_t execs[] = {1, 2, 64};
	enum { NE = sizeof(execs) / sizeof(execs[0]) };
	int n = reps_set ? reps : 5;
	if (n > SCALE_REPS_MAX)
		n = SCALE_REPS_MAX;
	struct scale_fig fib[NE][SCALE_REPS_MAX], chn[NE][SCALE_REPS_MAX], tick[NE][SCALE_REPS_MAX];
	cbcmn_runtime *rt[NE];
	for (int i = 0; i < NE; i++)
		rt[i] = runtime(execs[i], 0);
	/* Rounds alternate the order of the executor counts, so that a
	 * drift of the machine falls on all of them alike. */
	for (int r = 0; r < n; r++)
		for (int j = 0; j < NE; j++) {
			int i = (r & 1) ? NE - 1 - j : j;
			fib[i][r] = scale_once(rt[i], SCALE_FIB);
			chn[i][r] = scale_once(rt[i], SCALE_CHAIN);
			tick[i][r] = scale_once(rt[i], SCALE_TICK);
		}
	for (int i = 0; i < NE; i++)
		cbcmn_runtime_destroy(rt[i]);
	double up[SCALE_REPS_MAX], over[SCALE_REPS_MAX];
	for (int r = 0; r < n; r++) {
		up[r] = fib[0][r].wall_ms / fib[1][r].wall_ms;
		over[r] = fib[2][r].cpu_ms / fib[1][r].cpu_ms;
	}
	printf("scaling speedup_1_to_2 %.2f\n", median(up, n));
	printf("scaling fib_cpu_ratio_64_vs_2 %.2f\n", median(over, n));
	/* Per executor count: which workload, which figure, its decimals. */
	static const struct {
		const char *name;
		int w; /* 0 fib, 1 chain, 2 tick */
		size_t off;
		int prec;
	} figs[] = {
		{"fib_ms", 0, offsetof(struct scale_fig, wall_ms), 1},
		{"fib_cpu_ms", 0, offsetof(struct scale_fig, cpu_ms), 1},
		{"chain_joins_per_s", 1, offsetof(struct scale_fig, rate), 0},
		{"chain_cpu_ms", 1, offsetof(struct scale_fig, cpu_ms), 1},
		{"chain_joins_per_cpu_ms", 1, offsetof(struct scale_fig, per_cpu_ms), 0},
		{"tick_timer_late_p99_us", 2, offsetof(struct scale_fig, late_p99_us), 0},
		{"tick_cpu_ms", 2, offsetof(struct scale_fig, cpu_ms), 1},
		{"tick_ms", 2, offsetof(struct scale_fig, wall_ms), 1},
	};
	struct scale_fig (*const runs[])[SCALE_REPS_MAX] = {fib, chn, tick};
	for (int i = 0; i < NE; i++)
		for (size_t f = 0; f < sizeof(figs) / sizeof(figs[0]); f++)
			printf("scaling %s_exec%u %.*f\n", figs[f].name, execs[i], figs[f].prec,
			       scale_median(runs[figs[f].w], i, n, figs[f].off));
}

/* ---- cancel: one small nursery's cancel beside N blocked fibers ---------- */

/* Issue 15: every cancel made every executor walk all its requests and
 * streams, and scanned every registered wait: 80 us per cancel with 8 000
 * fibers blocked.  N fibers block in a background nursery, half in a recv
 * (requests on the rings), half in a channel receive (registered waits);
 * then, round after round, a small nursery's one task blocks in a recv and
 * is cancelled: the cancel call up to its await's return, median ns, with
 * N = 0 and N = 8 000 in one run, and their ratio. */
#define CANCEL_SOCKS 16
struct cancel_bg {
	int sp[CANCEL_SOCKS][2];
	cbcmn_chan *ch;
	_Atomic uint32_t armed;
};

static int64_t cancel_bg_waiter(cbcmn_cx *cx, void *arg)
{
	struct cancel_bg *b = arg;
	uint32_t i = atomic_fetch_add(&b->armed, 1);
	char c;
	int v;
	if (i % 2)
		return cbcmn_chan_recv(cx, b->ch, &v) == CBCMN_ECANCELED ? 0 : -EPROTO;
	int64_t r = cbcmn_recv(cx, b->sp[(i / 2) % CANCEL_SOCKS][0], &c, 1, 0);
	return r == CBCMN_ECANCELED ? 0 : -EPROTO;
}

static uint64_t cancel_blocked(cbcmn_runtime *rt)
{
	cbcmn_snapshot s = {.size = sizeof(s), .version = CBCMN_SNAPSHOT_VERSION};
	if (cbcmn_runtime_snapshot(rt, &s, NULL, 0))
		return 0;
	return s.total.blocked_io + s.total.blocked_chan;
}

static void cancel_wait_blocked(cbcmn_runtime *rt, uint64_t want)
{
	uint64_t deadline = mono_ns() + 60ull * 1000000000ull;
	while (cancel_blocked(rt) < want) {
		if (mono_ns() > deadline) {
			fprintf(stderr, "cbcmn-bench: cancel: %lu of %lu fibers blocked after 60 s\n",
				(unsigned long)cancel_blocked(rt), (unsigned long)want);
			exit(1);
		}
		usleep(100);
	}
}

/* Median ns of `rounds` cancels of a one-task nursery, beside n blocked:
 * up to await_all's return (the task woken and ended), and of the
 * cbcmn_nursery_cancel() call alone (in *call). */
static double cancel_run(uint32_t n, int rounds, double *call)
{
	cbcmn_runtime *rt = runtime(workers, 0);
	struct cancel_bg bg = {0}, small = {0};
	int64_t rc;
	for (int i = 0; i < CANCEL_SOCKS; i++)
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, bg.sp[i]) || socketpair(AF_UNIX, SOCK_STREAM, 0, small.sp[i]))
			die("socketpair", -errno);
	if ((rc = cbcmn_chan_create(rt, 1, sizeof(int), &bg.ch)) ||
	    (rc = cbcmn_chan_create(rt, 1, sizeof(int), &small.ch)))
		die("chan_create", rc);
	cbcmn_nursery *b;
	if ((rc = cbcmn_nursery_open(rt, NULL, &b)))
		die("nursery_open", rc);
	for (uint32_t i = 0; i < n; i++)
		if ((rc = cbcmn_nursery_spawn(NULL, b, cancel_bg_waiter, &bg, NULL)))
			die("spawn", rc);
	cancel_wait_blocked(rt, n);
	double *v = calloc((size_t)rounds, sizeof(*v)), *c = calloc((size_t)rounds, sizeof(*c));
	for (int r = 0; r < rounds; r++) {
		cbcmn_nursery *a;
		if ((rc = cbcmn_nursery_open(rt, NULL, &a)))
			die("nursery_open", rc);
		atomic_store(&small.armed, 0); /* even: a recv */
		if ((rc = cbcmn_nursery_spawn(NULL, a, cancel_bg_waiter, &small, NULL)))
			die("spawn", rc);
		cancel_wait_blocked(rt, n + 1);
		uint64_t t0 = mono_ns();
		cbcmn_nursery_cancel(a);
		c[r] = (double)(mono_ns() - t0);
		rc = cbcmn_nursery_await_all(NULL, a);
		v[r] = (double)(mono_ns() - t0);
		if (rc != CBCMN_ECANCELED)
			die("await_all", rc);
	}
	double m = median(v, rounds);
	*call = median(c, rounds);
	free(v);
	free(c);
	cbcmn_nursery_cancel(b);
	if ((rc = cbcmn_nursery_await_all(NULL, b)) != CBCMN_ECANCELED)
		die("await_all", rc);
	cbcmn_chan_destroy(bg.ch);
	cbcmn_chan_destroy(small.ch);
	for (int i = 0; i < CANCEL_SOCKS; i++) {
		close(bg.sp[i][0]), close(bg.sp[i][1]);
		close(small.sp[i][0]), close(small.sp[i][1]);
	}
	cbcmn_runtime_destroy(rt);
	return m;
}

static void bench_cancel(void)
{
	int rounds = reps_set ? reps * 50 : 301;
	double call0, call8;
	double none = cancel_run(0, rounds, &call0);
	double full = cancel_run(8000, rounds, &call8);
	printf("cancel ns_per_cancel_beside_0 %.0f\n", none);
	printf("cancel ns_per_cancel_beside_8000 %.0f\n", full);
	printf("cancel ratio_8000_vs_0 %.2f\n", full / none);
	printf("cancel ns_per_cancel_call_beside_0 %.0f\n", call0);
	printf("cancel ns_per_cancel_call_beside_8000 %.0f\n", call8);
	printf("cancel call_ratio_8000_vs_0 %.2f\n", call8 / call0);
}

/* ---- actors: a one-for-one supervisor restarting a crashing child ----------- */

#define RESTARTS 20000

struct restarts {
	_Atomic long starts;
	_Atomic cbcmn_actor_ref sup;
};

/* Crashes at once, RESTARTS times; the last incarnation stops the tree. */
static int64_t crasher(cbcmn_cx *cx, void *arg)
{
	struct restarts *r = arg;
	if (atomic_fetch_add_explicit(&r->starts, 1, memory_order_relaxed) < RESTARTS)
		return -1;
	cbcmn_actor_ref sup;
	while (!(sup = atomic_load(&r->sup)))
		cbcmn_yield(cx);
	cbcmn_actor_stop(NULL, cx, sup, 0);
	return 0;
}

static int64_t restart_tree(cbcmn_cx *cx, void *arg)
{
	struct restarts *r = arg;
	cbcmn_sup_child c = {.fn = crasher, .state = r, .restart = CBCMN_SUP_TRANSIENT, .node = -1};
	cbcmn_sup_spec spec = {.strategy = CBCMN_SUP_ONE, .max_restarts = RESTARTS + 1,
			       .period_ns = UINT64_MAX / 2, .children = &c, .nchildren = 1};
	cbcmn_sup_report rep;
	spec.report = &rep;
	cbcmn_nursery *n;
	cbcmn_actor_ref sup;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc || (rc = cbcmn_sup_start(cx, n, &spec, NULL, &sup)))
		die("sup_start", rc);
	atomic_store(&r->sup, sup);
	int64_t a = cbcmn_nursery_await_all(cx, n);
	if (a || rep.restarts != RESTARTS)
		die("supervisor", a ? a : -EPROTO);
	return 0;
}

/* ---- actors: a ring, skynet, and 4 x 4 cross-executor messages --------------- */

/* Reset the process's VmHWM to its current RSS (Linux >= 4.0; older:
 * the peak stays the process's, an overstatement). */
static void reset_hwm(void)
{
	FILE *f = fopen("/proc/self/clear_refs", "w");
	if (f) {
		fputs("5", f);
		fclose(f);
	}
}

static uint64_t act_hops = 1000000;  /* --hops: ring hops; messages of msgs_per_s */
static uint64_t act_actors;          /* --actors: ring size and skynet leaves; 0: defaults */
static uint64_t act_ring;            /* --ring: the ring's size alone (over --actors); 0: not given */

#define RING_ACTORS 10000u
#define SKYNET_LEAVES 1000000u
#define MSG_PAIRS 4u

enum { ACT_TOKEN = 1 };

struct mpair {
	cbcmn_actor_ref to;
	uint64_t msgs, got;
	_Atomic int *bad;
	uint32_t to_shard; /* the receivers' executor (the senders are on 0) */
};

static int64_t mp_receiver(cbcmn_cx *cx, void *arg)
{
	struct mpair *p = arg;
	cbcmn_actor_msg m;
	int rc = 0;
	while (p->got < p->msgs && !(rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)))
		if (m.body.u64[0] != p->got++)
			atomic_store(p->bad, 1); /* out of order, lost or twice */
	return rc;
}

static int64_t mp_sender(cbcmn_cx *cx, void *arg)
{
	struct mpair *p = arg;
	cbcmn_actor_msg m = {.type = ACT_TOKEN};
	for (uint64_t i = 0; i < p->msgs; i++) {
		m.body.u64[0] = i;
		int rc = cbcmn_actor_send(NULL, cx, p->to, &m);
		if (rc)
			return rc;
	}
	return 0;
}

static int64_t mp_root(cbcmn_cx *cx, void *arg)
{
	struct mpair *p = arg;
	cbcmn_nursery *n;
	cbcmn_actor_ref ref;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		die("msgs", rc);
	for (uint32_t i = 0; i < MSG_PAIRS && !rc; i++) {
		cbcmn_actor_opts to = {.placement = CBCMN_PLACE_PINNED, .shard = p[i].to_shard,
				       .mailbox_cap = 256};
		rc = cbcmn_actor_spawn(cx, n, mp_receiver, &p[i], &to, &p[i].to);
	}
	for (uint32_t i = 0; i < MSG_PAIRS && !rc; i++) {
		cbcmn_actor_opts from = {.placement = CBCMN_PLACE_PINNED, .shard = 0};
		rc = cbcmn_actor_spawn(cx, n, mp_sender, &p[i], &from, &ref);
	}
	if (rc)
		cbcmn_nursery_cancel(n); /* a receiver without its sender would wait for ever */
	int64_t a = cbcmn_nursery_await_all(cx, n);
	if (rc || a)
		die("msgs", rc ? rc : a);
	return 0;
}

static void bench_actors(void)
{
	if (workers < 2)
		die("actors: wants --workers 2 or more", -EINVAL);
	cbcmn_runtime *rt = runtime(workers, 0);
	double v[16], c[16];
	uint64_t ring_n = act_ring ? act_ring : act_actors ? act_actors : RING_ACTORS;
	uint64_t leaves = act_actors ? act_actors : SKYNET_LEAVES;
	uint64_t p10 = 1;
	while (p10 < leaves)
		p10 *= 10;
	if (p10 != leaves || leaves < 10) {
		fprintf(stderr, "cbcmn-bench: actors: --actors wants a power of 10 (skynet's "
				"leaves), got %llu\n", (unsigned long long)leaves);
		exit(2);
	}

	cbcmn_actor_ref *refs = calloc(ring_n, sizeof(*refs));
	if (!refs)
		die("ring", -ENOMEM);
	/* The default placement (the actors spread by stealing: hops cross
	 * executors), then all on one executor (the cost of a hop itself),
	 * then handler actors (one host: every hop a call), then handler
	 * actors that set a receive timeout (1 s, an idle limit) in every
	 * call; the four alternate, round by round, so that they share the
	 * machine's moods. */
	enum { RING_MODES = 4 };
	static const char *const ring_name[RING_MODES] = {"", "_one_exec", "_handler",
							  "_handler_idle"};
	double rv[RING_MODES][16], rc_[RING_MODES][16];
	/* Go's and Erlang/OTP's rings of the same shape (tools/baseline/;
	 * issue 16 quoted them "for scale" from another day), each run after
	 * our four in every round: their ratios compare runs made minutes
	 * apart at most. */
	char nring[24], nhops[24], nleaves[24];
	snprintf(nring, sizeof(nring), "%llu", (unsigned long long)ring_n);
	snprintf(nhops, sizeof(nhops), "%llu", (unsigned long long)act_hops);
	snprintf(nleaves, sizeof(nleaves), "%llu", (unsigned long long)leaves);
	const char *const ring_opt[] = {"--ring", nring, "--hops", nhops, NULL};
	const char *const sky_opt[] = {"--leaves", nleaves, NULL};
	double go_ring[16], erl_ring[16], go_sky[16], erl_sky[16];
	for (int i = 0; i < reps; i++) {
		for (int mode = 0; mode < RING_MODES; mode++) {
			struct wl_ring r = {.refs = refs, .n = ring_n, .hops = act_hops,
					    .one_exec = mode == 1, .handler = mode >= 2,
					    .idle_ns = mode == 3 ? 1000000000ull : 0};
			run(rt, wl_ring_root, &r);
			if (r.count != act_hops || r.last_at != act_hops % ring_n) {
				fprintf(stderr, "cbcmn-bench: actors ring%s: the token made %llu hops and "
						"ended at actor %llu, expected %llu and %llu\n", ring_name[mode],
					(unsigned long long)r.count, (unsigned long long)r.last_at,
					(unsigned long long)act_hops, (unsigned long long)(act_hops % ring_n));
				exit(1);
			}
			rv[mode][i] = (double)(r.t_end - r.t0) / (double)act_hops;
			rc_[mode][i] = (double)(r.c_end - r.c0) / (double)act_hops;
			/* The drift from round to round in one runtime (issue 16):
			 * the medians hide it. */
			if (getenv("CBCMN_BENCH_ROUNDS"))
				fprintf(stderr, "actors ring%s round %d cpu_ns_per_hop %.0f\n",
					ring_name[mode], i, rc_[mode][i]);
		}
		go_ring[i] = baseline_once("cbcmn-baseline-go", "ring", ring_opt);
		erl_ring[i] = baseline_once("cbcmn-baseline-erlang", "ring", ring_opt);
	}
	for (int mode = 0; mode < RING_MODES; mode++) {
		printf("actors ring%s_ns_per_hop %.0f\n", ring_name[mode], median(rv[mode], reps));
		printf("actors ring%s_cpu_ns_per_hop %.0f\n", ring_name[mode], median(rc_[mode], reps));
	}
	/* ours: the fiber ring, default placement (ring_ns_per_hop) */
	print_baseline("actors", "go_ring_ns_per_hop", "ring_vs_go", rv[0], go_ring, reps);
	print_baseline("actors", "erlang_ring_ns_per_hop", "ring_vs_erlang", rv[0], erl_ring, reps);
	fflush(stdout);
	free(refs);

	/* A runtime of its own: the ring's stacks, kept for reuse, would hide
	 * what the tree's actors take. */
	cbcmn_runtime_destroy(rt);
	long rss0 = status_kib("VmRSS:");
	rt = runtime(workers, 0);
	/* Fiber actors (each node awaits its children), then handler
	 * actors (one host), alternating round by round. */
	static const char *const sky_name[2] = {"", "_handler"};
	long peak[2] = {0, 0};
	double sv[2][16], sc[2][16];
	for (int i = 0; i < reps; i++) {
		for (int mode = 0; mode < 2; mode++) {
			uint64_t sum = 0, got = 0;
			struct wl_sky root = {0, leaves, CBCMN_ACTOR_NONE, &sum, &got, false, mode == 1};
			reset_hwm();
			uint64_t t0 = mono_ns(), c0 = process_cpu_ns();
			run(rt, wl_sky_root, &root);
			sv[mode][i] = (double)(mono_ns() - t0) / 1e6;
			sc[mode][i] = (double)(process_cpu_ns() - c0) / 1e6;
			uint64_t want = leaves * (leaves - 1) / 2;
			if (sum != want || got != leaves) {
				fprintf(stderr, "cbcmn-bench: actors skynet%s: sum %llu from %llu leaves, "
						"expected %llu\n", sky_name[mode],
					(unsigned long long)sum, (unsigned long long)got, (unsigned long long)want);
				exit(1);
			}
			long hwm = status_kib("VmHWM:");
			peak[mode] = hwm > peak[mode] ? hwm : peak[mode];
		}
		/* Go's and Erlang/OTP's trees, after ours in every round */
		go_sky[i] = baseline_once("cbcmn-baseline-go", "skynet", sky_opt);
		erl_sky[i] = baseline_once("cbcmn-baseline-erlang", "skynet", sky_opt);
	}
	for (int mode = 0; mode < 2; mode++) {
		printf("actors skynet%s_ms %.0f\n", sky_name[mode], median(sv[mode], reps));
		printf("actors skynet%s_cpu_ms %.0f\n", sky_name[mode], median(sc[mode], reps));
		/* The process's high-water mark over the runs, less what it
		 * held before: the tree's live actors at their most (stacks,
		 * mailboxes; the handler runs reuse what the fiber runs left). */
		printf("actors skynet%s_peak_rss_mib %.0f\n", sky_name[mode],
		       (double)(peak[mode] - rss0) / 1024);
	}
	/* ours: the tree of fiber actors (skynet_ms) */
	print_baseline("actors", "go_skynet_ms", "skynet_vs_go", sv[0], go_sky, reps);
	print_baseline("actors", "erlang_skynet_ms", "skynet_vs_erlang", sv[0], erl_sky, reps);
	fflush(stdout);

	/* Receivers on the other executor (the figure), then on the
	 * senders' own: what crossing costs.  Rounds alternate, so that both
	 * see the same machine.  xmsgs: the lane messages per message (the
	 * wakes of a parked receiver there, each acknowledged by its pointer
	 * coming back: docs/ACTORS.md "Delivery"). */
	double cross[64], one[64], xm[64];
	for (int i = 0; i < 2 * reps; i++) {
		struct mpair p[MSG_PAIRS];
		_Atomic int bad = 0;
		for (uint32_t k = 0; k < MSG_PAIRS; k++)
			p[k] = (struct mpair){.msgs = act_hops / MSG_PAIRS ? act_hops / MSG_PAIRS : 1,
					      .bad = &bad, .to_shard = i & 1 ? 0 : 1};
		cbcmn_stats st;
		cbcmn_executor_stats per[2];
		cbcmn_stats_snapshot(rt, &st, per, 2);
		uint64_t x0 = per[0].xmsgs_sent + per[1].xmsgs_sent;
		uint64_t t0 = mono_ns();
		run(rt, mp_root, p);
		double s = (double)(mono_ns() - t0) / 1e9;
		cbcmn_stats_snapshot(rt, &st, per, 2);
		if (atomic_load(&bad)) {
			fprintf(stderr, "cbcmn-bench: actors msgs: a message came out of order, "
					"twice or not at all\n");
			exit(1);
		}
		double msgs = (double)(p[0].msgs * MSG_PAIRS);
		if (i & 1) {
			one[i / 2] = msgs / s;
		} else {
			cross[i / 2] = msgs / s;
			xm[i / 2] = (double)(per[0].xmsgs_sent + per[1].xmsgs_sent - x0) / msgs;
		}
	}
	printf("actors msgs_per_s %.0f\n", median(cross, reps));
	printf("actors msgs_one_exec_per_s %.0f\n", median(one, reps));
	printf("actors msgs_xmsgs_per_msg %.3f\n", median(xm, reps));
	fflush(stdout);

	for (int i = 0; i < reps; i++) {
		struct restarts r = {0};
		uint64_t t0 = mono_ns(), c0 = process_cpu_ns();
		run(rt, restart_tree, &r);
		v[i] = (double)(mono_ns() - t0) / 1e3 / RESTARTS;
		c[i] = (double)(process_cpu_ns() - c0) / 1e3 / RESTARTS;
	}
	printf("actors restart_us %.2f\n", median(v, reps));
	printf("actors restart_cpu_us %.2f\n", median(c, reps));
	cbcmn_runtime_destroy(rt);
}

/* ---- main --------------------------------------------------------------- */

static const struct bench {
	const char *name;
	void (*fn)(void);
	const char *help;
} benches[] = {
	{"switch", bench_switch, "context switch ns (raw, one thread) and yield round trip"},
	{"spawn", bench_spawn, "1 000 000 trivial tasks spawned and joined, tasks/s"},
	{"fib", bench_fib, "fork-join fib(30) with a task per call, ms"},
	{"parked", bench_parked, "RSS per fiber with 1 000 000 parked fibers"},
	{"steal", bench_steal,
	 "push on one executor -> start on a thief, p50/p99 ns: default spin (gated on a busy host), then spin_ns 1 ms"},
	{"checkpoint", bench_checkpoint, "CBCMN_CHECKPOINT() that does not yield, ns"},
	{"budget", bench_budget, "fib(30) and 1M spawns with budgets on vs off, same run, %"},
	{"chan", bench_chan, "channel ping-pong round trip ns; 4x4 MPMC msgs/s"},
	{"doorbell", bench_doorbell, "shard-to-shard round trip, parked and spinning, vs raw MSG_RING and eventfd"},
	{"echo", bench_echo, "loopback echo server (fiber I/O) vs an epoll server, same client"},
	{"http", bench_http, "HTTP/1.1 keep-alive hello server vs an epoll one, same client"},
	{"actors", bench_actors,
	 "ring ns/hop (10 000 actors or --ring N, --hops 1 000 000), skynet ms (--actors 1 000 000 leaves), "
	 "4x4 cross-executor msgs/s, us per supervised restart"},
	{"cancel", bench_cancel, "ns per cancel of a one-task nursery beside 0 and 8 000 fibers blocked in another"},
	{"scaling", bench_scaling, "fib(27), spawn-join chains and 64 1-ms tickers on 1, 2 and 64 executors: speed-up 1 -> 2, CPU ms, timer lateness p99"},
	{"iolat", bench_iolat, "1-byte write p50/p99 us, wall and CPU time, beside 16 tasks computing 2 ms each, with and without the time bound"},
	{"sqpoll", bench_sqpoll,
	 "ready 1-byte read p50/p99 ns, plain vs SQPOLL ring, and % of the SQPOLL calls' time its poller waited for a CPU"},
	{"bpf-overhead", bench_bpf_overhead,
	 "fib(30) and echo with the eBPF programs attached vs not, alternated, slowdown %; then host_switch_ns; root, not in all"},
	{"bpf-host-switch", bench_bpf_host_switch,
	 "ns the eBPF programs add to a context switch of a process they do not watch; root, not in all"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: cbcmn-bench NAME|all [--workers N] [--reps R] [--conns N] "
		   "[--duration SEC] [--msg-size BYTES] [--no-multishot] [--server-spin-ns NS|none] "
		   "[--client epoll|ring] "
		   "[--bpf-no sched|io_uring|futex] [--hops N] [--actors N] [--ring N] [-v]\n\nbenchmarks:\n");
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++)
		fprintf(f, "  %-12s %s\n", benches[i].name, benches[i].help);
	fprintf(f, "\nPrints one line per figure: NAME METRIC VALUE (medians of R runs).\n"
		   "\nEXAMPLES\n  cbcmn-bench fib --workers 2\n  cbcmn-bench all\n");
}

int main(int argc, char **argv)
{
	struct bench_opts o = {
		.workers = workers, .conns = conns, .msg_size = msg_size, .reps = reps,
		.duration_s = duration_s, .multishot = multishot, .server_spin_ns = server_spin_ns,
	};
	char err[256];
	cli_sigpipe_default();
	if (bench_opts_parse(argc, argv, &o, err, sizeof(err))) {
		fprintf(stderr, "cbcmn-bench: %s (try --help)\n", err);
		return 2;
	}
	if (o.help) {
		usage(stdout);
		return cli_stdout_flushed("cbcmn-bench") ? 0 : 1;
	}
	workers = o.workers;
	conns = o.conns;
	msg_size = o.msg_size;
	reps = o.reps;
	reps_set = o.reps_set;
	duration_s = o.duration_s;
	duration_set = o.duration_set;
	verbose = o.verbose;
	if (verbose)
		print_backend();
	multishot = o.multishot;
	client_ring = o.client_ring;
	server_spin_ns = o.server_spin_ns;
	bpf_flags = o.bpf_flags;
	if (o.hops)
		act_hops = o.hops;
	act_actors = o.actors;
	act_ring = o.ring;
	const char *name = o.name;
	int found = 0;
	for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) {
		bool all = !strcmp(name, "all") && benches[i].fn != bench_bpf_overhead &&
			   benches[i].fn != bench_bpf_host_switch;
		if (all || !strcmp(name, benches[i].name)) {
			benches[i].fn();
			found = 1;
			/* Figures nobody can read (a full disk, a closed
			 * pipe): fail now rather than run the rest for nothing. */
			if (!cli_stdout_flushed("cbcmn-bench"))
				return 1;
		}
	}
	if (!found) {
		char q[128];
		snprintf(q, sizeof(q), "%s", name);
		fprintf(stderr, "cbcmn-bench: no benchmark named '%s' (try --help)\n", cli_one_line(q));
		return 2;
	}
	return 0;
}
