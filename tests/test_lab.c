/* test_lab: lab mode (SPEC-021 §9): the same seed gives the same order,
 * another seed another one; virtual time; the replay line. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>
#include <dirent.h>
#include <stdio.h>
#include <liburing.h>

#include "helpers.h"

#include <cbcmn_actor.h>
#include <cbcmn_chan.h>
#include <cbcmn_io.h>
#include <cbcmn_metrics.h>

#define S 1000000000ull

/* ---- the order of execution ---- */

static uint64_t trace[4096];
static _Atomic int ntrace;

static void mark(cbcmn_cx *cx)
{
	int i = atomic_fetch_add(&ntrace, 1);
	if (i < 4096)
		trace[i] = cbcmn_cx_task_id(cx);
}

struct prog {
	cbcmn_chan *c;
	int depth;
};

static int64_t producer(cbcmn_cx *cx, void *arg)
{
	struct prog *p = arg;
	for (long i = 0; i < 8; i++) {
		mark(cx);
		TASK_CHECK(cbcmn_chan_send(cx, p->c, &i) == 0);
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t consumer(cbcmn_cx *cx, void *arg)
{
	struct prog *p = arg;
	for (int i = 0; i < 8; i++) {
		long v;
		TASK_CHECK(cbcmn_chan_recv(cx, p->c, &v) == 0);
		mark(cx);
	}
	return 0;
}

static int64_t tree(cbcmn_cx *cx, void *arg)
{
	int depth = (int)(intptr_t)arg;
	mark(cx);
	if (depth == 0) {
		cbcmn_yield(cx);
		mark(cx);
		return 0;
	}
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 3; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, tree, (void *)(intptr_t)(depth - 1), NULL) == 0);
	cbcmn_yield(cx);
	mark(cx);
	return cbcmn_nursery_await_all(cx, n);
}

/* Spawns, yields, channels, nested nurseries. */
static int64_t program(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct prog p;
	TASK_CHECK(cbcmn_chan_create(cbcmn_cx_runtime(cx), 2, sizeof(long), &p.c) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < 3; i++) {
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, producer, &p, NULL) == 0);
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, consumer, &p, NULL) == 0);
	}
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, tree, (void *)(intptr_t)3, NULL) == 0);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(cbcmn_chan_destroy(p.c) == 0);
	return r;
}

/* Runs prog in a lab runtime of seed; the trace it marked into out. */
static int record_prog(uint64_t seed, cbcmn_task_fn prog, uint64_t *out)
{
	cbcmn_runtime *rt = t_runtime_lab(seed);
	atomic_store(&ntrace, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, prog, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	cbcmn_stats st;
	cbcmn_executor_stats per[1];
	assert_int_equal(cbcmn_stats_snapshot(rt, &st, per, 1), 0);
	assert_int_equal(per[0].xmsgs_sent, 0); /* one executor: no lane */
	t_destroy(rt);
	int n = atomic_load(&ntrace);
	assert_true(n > 100 && n <= 4096);
	memcpy(out, trace, (size_t)n * sizeof(*out));
	return n;
}

static int record(uint64_t seed, uint64_t *out)
{
	return record_prog(seed, program, out);
}

static uint64_t run_a[4096], run_b[4096], run_c[4096];

static void test_same_seed_same_order(void **state)
{
	(void)state;
	int a = record(42, run_a);
	int b = record(42, run_b);
	assert_int_equal(a, b);
	assert_memory_equal(run_a, run_b, (size_t)a * sizeof(uint64_t)); /* byte for byte */
	int c = record(43, run_c);
	assert_int_equal(a, c); /* the same work... */
	assert_true(memcmp(run_a, run_c, (size_t)a * sizeof(uint64_t)) != 0); /* ...in another order */
}

/* ---- virtual time ---- */

static int64_t ticker(cbcmn_cx *cx, void *arg)
{
	cbcmn_chan *c = arg;
	for (int i = 0; i < 10; i++) {
		TASK_CHECK(cbcmn_sleep(cx, S) == 0); /* one simulated second */
		long v = i;
		if (cbcmn_chan_try_send(cx, c, &v) != 0)
			(void)0; /* full: fine */
	}
	return 0;
}

static int64_t ten_seconds(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	uint64_t t0 = cbcmn_now(rt);
	cbcmn_chan *c;
	TASK_CHECK(cbcmn_chan_create(rt, 1000, sizeof(long), &c) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	for (int i = 0; i < 100; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, ticker, c, NULL) == 0);
	/* A receive that times out after 30 simulated seconds of silence. */
	long v;
	int got = 0;
	while (cbcmn_chan_recv_timeout(cx, c, &v, 30 * S) == 0)
		got++;
	TASK_CHECK(got == 1000);
	int64_t r = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(cbcmn_now(rt) - t0 == 40 * S); /* 10 s of ticks + the 30 s timeout */
	TASK_CHECK(cbcmn_chan_destroy(c) == 0);
	return r;
}

static void test_virtual_time(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_lab(1);
	assert_int_equal(cbcmn_now(rt), 0);
	uint64_t t0 = t_now_ns();
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, ten_seconds, NULL, &r), 0);
	uint64_t wall = t_now_ns() - t0;
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	printf("[ INFO     ] 40 simulated seconds in %.1f ms\n", (double)wall / 1e6);
	/* Not a speed limit: a runtime that slept for real would take the whole
	 * 40 s.  Half of that leaves any loaded machine room (it takes a few
	 * ms here, and once 0.8 s under TSan beside a CPU hog). */
	assert_true(wall < 20 * S);
	t_destroy(rt);
}

/* ---- timeouts that did not fire ---- */

static int64_t pinger(cbcmn_cx *cx, void *arg)
{
	cbcmn_chan *c = arg;
	for (long i = 0; i < 2000; i++)
		TASK_CHECK(cbcmn_chan_send(cx, c, &i) == 0);
	return 0;
}

static int64_t quick_receives(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_chan *c;
	TASK_CHECK(cbcmn_chan_create(rt, 1, sizeof(long), &c) == 0);
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, pinger, c, NULL) == 0);
	for (int i = 0; i < 2000; i++) {
		long v;
		TASK_CHECK(cbcmn_chan_recv_timeout(cx, c, &v, 3600 * S) == 0); /* an hour */
	}
	int64_t r = cbcmn_nursery_await_all(cx, n);
	TASK_CHECK(cbcmn_chan_destroy(c) == 0);
	return r;
}

/* Regression: a timer whose wait ended early stayed in the heap until its
 * deadline; the idle lab clock then jumped to it (an hour), and a loop of
 * such waits grew the heap without bound. */
static void test_regression_dead_timers_do_not_move_the_clock(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_lab(5);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, quick_receives, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	usleep(20000); /* let the executor go idle */
	assert_int_equal(cbcmn_now(rt), 0);
	t_destroy(rt);
}

/* ---- the clock at the end of time ---- */

static int64_t far_receiver(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_actor_msg m;
	/* Nothing else runs: the clock jumps to the deadline, however far. */
	TASK_CHECK(cbcmn_actor_receive(cx, &m, UINT64_MAX - 1) == -ETIMEDOUT);
	TASK_CHECK(cbcmn_now(rt) == UINT64_MAX - 1);
	/* Deadlines saturate there (UINT64_MAX is none): every later sleep
	 * and timeout is due at once, and the clock stays. */
	TASK_CHECK(cbcmn_sleep(cx, S) == 0);
	TASK_CHECK(cbcmn_actor_receive(cx, &m, S) == -ETIMEDOUT);
	TASK_CHECK(cbcmn_now(rt) == UINT64_MAX - 1);
	return 0;
}

static int64_t far_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_actor_ref a;
	TASK_CHECK(cbcmn_actor_spawn(cx, n, far_receiver, arg, NULL, &a) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* docs/LAB.md "The virtual clock": a wait of UINT64_MAX - 1 moves the clock
 * to its saturated deadline for good; pinned so that it stays documented. */
static void test_far_deadline_moves_the_clock_to_its_end(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_lab(7);
	int64_t r = -1;
	/* No bound on the real time taken: a real wait this long would never
	 * end, which the watchdog reports (a bound would only assert speed). */
	assert_int_equal(cbcmn_runtime_run(rt, far_main, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	assert_true(cbcmn_now(rt) == UINT64_MAX - 1);
	t_destroy(rt);
}

/* UINT64_MAX is "no deadline" only for the calls that say so (an actor's
 * receive and timed send, CBCMN_ACTOR_FOREVER).  A sleep's or a channel
 * timeout's is a duration like any other: it saturates at the clock's end
 * like one of UINT64_MAX - 1, and in lab mode a wait that nothing ends
 * gets there.  docs/LAB.md told to use CBCMN_ACTOR_FOREVER for "no
 * deadline" with any of them: on a channel that timed out. */
static int64_t forever_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_chan *c;
	int x = 0;
	TASK_CHECK(cbcmn_chan_create(rt, 1, sizeof(x), &c) == 0);
	TASK_CHECK(cbcmn_chan_try_send(cx, c, &x) == 0); /* full: nobody takes it */
	TASK_CHECK(cbcmn_chan_send_timeout(cx, c, &x, UINT64_MAX) == -ETIMEDOUT);
	TASK_CHECK(cbcmn_now(rt) == UINT64_MAX - 1);
	TASK_CHECK(cbcmn_chan_recv_timeout(cx, c, &x, UINT64_MAX) == 0);
	TASK_CHECK(cbcmn_chan_recv_timeout(cx, c, &x, UINT64_MAX) == -ETIMEDOUT);
	TASK_CHECK(cbcmn_sleep(cx, UINT64_MAX) == 0);
	TASK_CHECK(cbcmn_now(rt) == UINT64_MAX - 1);
	TASK_CHECK(cbcmn_chan_destroy(c) == 0);
	return 0;
}

static void test_uint64_max_is_a_duration_for_sleeps_and_channels(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_lab(9);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, forever_main, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
}

/* ---- replay ---- */

static int64_t fails(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return -EIO;
}

static void test_replay_line_and_seed_override(void **state)
{
	(void)state;
	int saved, fd = t_stderr_capture(&saved);
	cbcmn_runtime *rt = t_runtime_lab(0xabcdef);
	int64_t r;
	assert_int_equal(cbcmn_runtime_run(rt, fails, NULL, &r), 0);
	t_destroy(rt);
	char msg[512];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_int_equal(r, -EIO);
	assert_non_null(strstr(msg, "seed=0xabcdef"));
	assert_non_null(strstr(msg, "replay with CBCMN_LAB_SEED=0xabcdef"));

	/* The variable replays that seed, whatever the program asked for. */
	int a = record(7, run_a);
	setenv("CBCMN_LAB_SEED", "7", 1);
	int b = record(12345, run_b);
	unsetenv("CBCMN_LAB_SEED");
	assert_int_equal(a, b);
	assert_memory_equal(run_a, run_b, (size_t)a * sizeof(uint64_t));
}

/* A CBCMN_LAB_SEED that is not one number, decimal or 0x-hex as
 * docs/LAB.md says, is refused with a line that says so: strtoull() took
 * "0xabcdeg" (a typo of a replay line) as 0xabcde, "junk" as 0 and "010"
 * as 8, and the run silently replayed another order than the one asked
 * for. */
static void test_bad_seed_variable_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {"0xabcdeg", "junk", "-1", " 7", "7 ", "0x",
					  "18446744073709551616", "1e3"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cfg.flags = CBCMN_CONFIG_LAB;
		t_create_refuses_env(&cfg, "CBCMN_LAB_SEED", bad[i]);
	}
	/* Decimal, leading zero or not: 010 is ten. */
	int a = record(10, run_a);
	setenv("CBCMN_LAB_SEED", "010", 1);
	int b = record(99, run_b);
	setenv("CBCMN_LAB_SEED", "0xA", 1);
	int c = record(98, run_c);
	unsetenv("CBCMN_LAB_SEED");
	assert_int_equal(a, b);
	assert_memory_equal(run_a, run_b, (size_t)a * sizeof(uint64_t));
	assert_int_equal(a, c);
	assert_memory_equal(run_a, run_c, (size_t)a * sizeof(uint64_t));
}

/* ---- actors: sends between them, the same order ---- */

#define NACT 4
#define AMSGS 8 /* to each other actor: 24 in each mailbox, room for all */

static cbcmn_actor_ref acts[NACT];
static _Atomic int acts_ready;

/* Sends AMSGS to each other actor, with yields, then receives as many;
 * marks each step, and each message's sender. */
static int64_t lab_actor(cbcmn_cx *cx, void *arg)
{
	int me = (int)(intptr_t)arg;
	while (!atomic_load(&acts_ready))
		cbcmn_yield(cx);
	for (int i = 0; i < AMSGS * (NACT - 1); i++) {
		cbcmn_actor_msg m = {.type = 1};
		m.body.u64[0] = (uint64_t)me;
		TASK_CHECK(cbcmn_actor_send(NULL, cx, acts[(me + 1 + i % (NACT - 1)) % NACT], &m) == 0);
		mark(cx);
		if (i % 3 == 0)
			cbcmn_yield(cx);
	}
	for (int i = 0; i < AMSGS * (NACT - 1); i++) {
		cbcmn_actor_msg m;
		TASK_CHECK(cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0);
		mark(cx);
		int j = atomic_fetch_add(&ntrace, 1);
		if (j < 4096)
			trace[j] = m.body.u64[0];
	}
	return 0;
}

static int64_t actor_program(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	atomic_store(&acts_ready, 0);
	for (int i = 0; i < NACT; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, lab_actor, (void *)(intptr_t)i, NULL, &acts[i]) == 0);
	atomic_store(&acts_ready, 1);
	return cbcmn_nursery_await_all(cx, n);
}

/* Issue 16: actor sends keep lab mode's order.  A lab runtime has one
 * executor, so every send is to its own executor and takes the mailbox
 * lock, never a lane (lanes join two executors): the order of sends,
 * receives and senders is the seed's. */
static void test_actor_sends_same_seed_same_order(void **state)
{
	(void)state;
	int a = record_prog(42, actor_program, run_a);
	int b = record_prog(42, actor_program, run_b);
	assert_int_equal(a, 3 * NACT * AMSGS * (NACT - 1)); /* sends, receives, senders */
	assert_int_equal(a, b);
	assert_memory_equal(run_a, run_b, (size_t)a * sizeof(uint64_t));
}

/* ---- actors: the next place keeps the seed's order ---- */

/* docs/ACTORS.md "The next place": a spawned actor's series of picks
 * ahead of the wheel's order ends after 16 picks or a quantum's time.
 * The time half read the real clock, so in the lab how long a link's run
 * took (the machine's load, a sanitizer) changed which actor ran next:
 * the same seed gave another order.  Links that each spin 3 ms of real
 * time (no checkpoint) must give the order links that do not spin give. */
#define NXL_OTHERS 2
#define NXL_LINKS 24

static struct {
	cbcmn_nursery *n;
	_Atomic int links, stop;
	bool spin;
} nxl;

static int64_t nxl_other(cbcmn_cx *cx, void *arg)
{
	while (!atomic_load(&nxl.stop)) {
		int i = atomic_fetch_add(&ntrace, 1);
		if (i < 4096)
			trace[i] = 100 + (uint64_t)(intptr_t)arg;
		for (int k = 0; k < 4; k++)
			CBCMN_CHECKPOINT(cx);
		cbcmn_yield(cx);
	}
	return 0;
}

static int64_t nxl_link(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	int l = atomic_fetch_add(&nxl.links, 1);
	int i = atomic_fetch_add(&ntrace, 1);
	if (i < 4096)
		trace[i] = (uint64_t)l;
	if (nxl.spin) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		do
			clock_gettime(CLOCK_MONOTONIC, &b);
		while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 3000000L);
	}
	if (l + 1 >= NXL_LINKS) {
		atomic_store(&nxl.stop, 1);
		return 0;
	}
	cbcmn_actor_ref c;
	TASK_CHECK(cbcmn_actor_spawn(cx, nxl.n, nxl_link, NULL, NULL, &c) == 0);
	return 0;
}

static int64_t nxl_program(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_actor_ref r;
	atomic_store(&nxl.links, 0);
	atomic_store(&nxl.stop, 0);
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &nxl.n) == 0);
	for (int i = 0; i < NXL_OTHERS; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, nxl.n, nxl_other, (void *)(intptr_t)i, NULL, &r) == 0);
	/* The others run a few times first: the wheel times its quantum. */
	for (int i = 0; i < 8; i++)
		cbcmn_yield(cx);
	TASK_CHECK(cbcmn_actor_spawn(cx, nxl.n, nxl_link, NULL, NULL, &r) == 0);
	/* Open for the links until the last (an await closes it). */
	while (!atomic_load(&nxl.stop))
		cbcmn_yield(cx);
	return cbcmn_nursery_await_all(cx, nxl.n);
}

static int nxl_record(bool spin, uint64_t *out)
{
	nxl.spin = spin;
	cbcmn_runtime *rt = t_runtime_lab(42);
	atomic_store(&ntrace, 0);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, nxl_program, NULL, &r), 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
	int n = atomic_load(&ntrace);
	assert_true(n >= NXL_LINKS && n <= 4096);
	memcpy(out, trace, (size_t)n * sizeof(*out));
	return n;
}

static void test_next_place_order_ignores_real_time(void **state)
{
	(void)state;
	int a = nxl_record(false, run_a);
	int b = nxl_record(true, run_b);
	if (getenv("NXL_SHOW")) {
		for (int i = 0; i < a; i++)
			fprintf(stderr, "%d ", (int)run_a[i]);
		fprintf(stderr, "\n");
		for (int i = 0; i < b; i++)
			fprintf(stderr, "%d ", (int)run_b[i]);
		fprintf(stderr, "\n");
	}
	assert_int_equal(a, b);
	assert_memory_equal(run_a, run_b, (size_t)a * sizeof(uint64_t));
}

/* ---- a yielder and the clock (lab_yield_alone(), sched.c) ---- */

/* docs/LAB.md: the clock moves when no task can run now, and a yielder
 * alone runnable counts as one spinning until the next deadline.  Work
 * outside the clock (a task's I/O in flight, a cbcmn_blocking() call, a
 * stream's multishot receive, a metrics server's accept) never holds it:
 * a yield beside it moves the clock as search() does.  Two tasks yielding
 * to each other keep it where it is.  A sleeper of one virtual second
 * beside a yielder and a waiter whose wait the sleeper ends (a byte, a
 * flag) once it woke. */
#define YIELDS 2000

enum { YL_SLEPT = 1, YL_WAITED };

static struct {
	int fd[2];
	_Atomic long yields;
	_Atomic int done, flag;
	_Atomic uint64_t moved; /* a yield that saw the clock move */
	bool bounded;           /* the yielders yield YIELDS times */
	int waiters;            /* tasks the yielder waits for (the sleeper's included) */
	uint64_t ev[8][2];      /* what happened, and when on the clock */
	int nev;
} yl;

static void yl_note(cbcmn_cx *cx, int what)
{
	if (yl.nev < 8) {
		yl.ev[yl.nev][0] = (uint64_t)what;
		yl.ev[yl.nev++][1] = cbcmn_now(cbcmn_cx_runtime(cx));
	}
	yl.done++;
}

/* Sleeps a second, then ends the waiter's wait: a byte on fd[1] (a plain
 * write: no request of the runtime's) and the flag. */
static int64_t yl_sleeper(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(cbcmn_sleep(cx, S) == 0);
	yl_note(cx, YL_SLEPT);
	if (yl.fd[1] > 0)
		TASK_CHECK(write(yl.fd[1], "x", 1) == 1);
	atomic_store(&yl.flag, 1);
	return 0;
}

/* Yields YIELDS times (bounded), or until the others are done. */
static int64_t yl_yielder(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	for (long i = 0; yl.bounded ? i < YIELDS : yl.done < yl.waiters; i++) {
		atomic_fetch_add(&yl.yields, 1);
		cbcmn_yield(cx);
		if (yl.bounded && cbcmn_now(rt) != 0)
			atomic_fetch_add(&yl.moved, 1);
	}
	return 0;
}

/* A read in flight. */
static int64_t yl_reader(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	char c;
	TASK_CHECK(cbcmn_read(cx, yl.fd[0], &c, 1) == 1);
	yl_note(cx, YL_WAITED);
	return 0;
}

/* A stream's multishot receive armed. */
static int64_t yl_streamer(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_stream *st;
	TASK_CHECK(cbcmn_stream_open(cx, yl.fd[0], &st) == 0);
	const void *data;
	TASK_CHECK(cbcmn_stream_recv(cx, st, &data) == 1);
	yl_note(cx, YL_WAITED);
	TASK_CHECK(cbcmn_stream_close(cx, st) == 0);
	return 0;
}

/* A pool thread's wait for the flag (real time, bounded). */
static int64_t yl_wait_flag(void *arg)
{
	(void)arg;
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!atomic_load(&yl.flag) && t_now_ns() < end)
		usleep(1000);
	return atomic_load(&yl.flag);
}

static int64_t yl_blocker(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	int64_t r = 0;
	TASK_CHECK(cbcmn_blocking(cx, yl_wait_flag, NULL, &r) == 0);
	TASK_CHECK(r == 1);
	yl_note(cx, YL_WAITED);
	return 0;
}

static int64_t yl_spawn(cbcmn_cx *cx, void *arg)
{
	int64_t (**fns)(cbcmn_cx *, void *) = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; fns[i]; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, fns[i], NULL, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static bool yl_serving; /* yl_run() with a metrics server (its accept in flight) */

static void yl_run(int64_t (**fns)(cbcmn_cx *, void *))
{
	cbcmn_runtime *rt = t_runtime_lab(3);
	cbcmn_metrics_server *ms = NULL;
	if (yl_serving)
		assert_int_equal(cbcmn_metrics_serve(rt, "127.0.0.1", 0, &ms), 0);
	t_run(rt, yl_spawn, fns, 0);
	ASSERT_TASK_CHECKS();
	if (ms)
		assert_int_equal(cbcmn_metrics_stop(ms), 0);
	assert_int_equal(cbcmn_now(rt), S); /* the sleep ended at its deadline */
	t_destroy(rt);
}

/* Two tasks yielding to each other: neither is alone, the clock stays at
 * 0 through every yield; the sleep ends once both have ended. */
static void test_two_yielders_keep_the_clock_still(void **state)
{
	(void)state;
	memset(&yl, 0, sizeof(yl));
	yl.bounded = true;
	int64_t (*fns[])(cbcmn_cx *, void *) = {yl_yielder, yl_yielder, yl_sleeper, NULL};
	yl_run(fns);
	assert_int_equal(atomic_load(&yl.yields), 2 * YIELDS);
	assert_int_equal(atomic_load(&yl.moved), 0);
}

/* A yielder, the sleeper and waiter (if any), twice with the
 * same seed: the same events at the same times, the sleep's at its
 * deadline (nothing early), the wait's after it. */
static void yl_outside(int64_t (*waiter)(cbcmn_cx *, void *), bool pipe)
{
	uint64_t first[8][2];
	for (int run = 0; run < 2; run++) {
		memset(&yl, 0, sizeof(yl));
		yl.waiters = waiter ? 2 : 1;
		if (pipe)
			assert_int_equal(pipe2(yl.fd, O_CLOEXEC), 0);
		else if (waiter)
			assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, yl.fd), 0);
		int64_t (*fns[])(cbcmn_cx *, void *) = {yl_sleeper, yl_yielder, waiter, NULL};
		if (!waiter)
			fns[2] = NULL;
		yl_run(fns);
		if (yl.fd[1] > 0) {
			close(yl.fd[0]);
			close(yl.fd[1]);
		}
		assert_int_equal(yl.nev, yl.waiters);
		assert_int_equal(yl.ev[0][0], YL_SLEPT);
		assert_int_equal(yl.ev[0][1], S);
		if (waiter) {
			assert_int_equal(yl.ev[1][0], YL_WAITED);
			assert_int_equal(yl.ev[1][1], S);
		}
		if (run == 1)
			assert_memory_equal(first, yl.ev, sizeof(first));
		memcpy(first, yl.ev, sizeof(first));
	}
}

/* Regression: a read in flight kept a yielder's clock still, and the byte
 * it waited for came from a task sleeping on that clock: the yielder
 * spun for ever (the read was no work of the clock's: search() jumps over
 * it, as over any I/O). */
static void test_io_in_flight_leaves_a_yielders_clock_free(void **state)
{
	(void)state;
	yl_outside(yl_reader, true);
}

/* A stream's multishot receive, and a task in cbcmn_blocking(): neither
 * holds the clock, as an idle executor's search() does not. */
static void test_a_stream_receive_leaves_a_yielders_clock_free(void **state)
{
	(void)state;
	yl_outside(yl_streamer, false);
}

static void test_a_blocking_call_leaves_a_yielders_clock_free(void **state)
{
	(void)state;
	yl_outside(yl_blocker, false);
}

/* Regression: a metrics server's accept is in flight for as long as it
 * serves, and kept every yielder's clock still: the sleep never ended. */
static void test_a_metrics_server_leaves_a_yielders_clock_free(void **state)
{
	(void)state;
	yl_serving = true;
	yl_outside(NULL, false);
	yl_serving = false;
}

/* Regression: on the epoll backend a ready wait is known only by looking
 * at the set, and a yield beside a read whose byte a sleeper had just
 * written jumped the clock to the next deadline (a second sleeper's, 2 s):
 * the reader, which could run at 1 s, read at 2 s (search() looks before
 * its jump).  Both backends, a pipe's read and a stream's receive: at
 * 1 s, the clock's rule (no move while a task can run now). */
static int64_t yl_late_sleeper(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	TASK_CHECK(cbcmn_sleep(cx, 2 * S) == 0);
	yl.done++;
	return 0;
}

/* Does io_uring finish a pipe read, once its poll fired, in an io-wq
 * worker?  Debian 12's 6.1 does (pipes lack NOWAIT there: the poll's
 * wake queues the read to io-wq, traced in the 6.1 guest:
 * io_uring_poll_arm, io_uring_task_add, io_uring_queue_async_work, then
 * io_uring_complete on iou-wrk): the read then ends on that thread in
 * real time, after the lab's clock jumped, outside work for the clock
 * (docs/LAB.md).  Known by the iou-wrk thread the read leaves (idle
 * workers linger for seconds).  A ring of our own, one read. */
static bool pipe_read_goes_to_iowq(void)
{
	struct io_uring u;
	int p[2];
	bool wrk = false;
	if (pipe2(p, O_CLOEXEC) != 0)
		return false;
	if (io_uring_queue_init(4, &u, 0) == 0) {
		char c;
		struct io_uring_sqe *sqe = io_uring_get_sqe(&u);
		io_uring_prep_read(sqe, p[0], &c, 1, 0);
		struct io_uring_cqe *cqe;
		if (io_uring_submit(&u) == 1 && write(p[1], "x", 1) == 1 &&
		    io_uring_wait_cqe(&u, &cqe) == 0) {
			io_uring_cqe_seen(&u, cqe);
			DIR *d = opendir("/proc/self/task");
			struct dirent *de;
			while (d && !wrk && (de = readdir(d))) {
				char path[300], comm[32] = "";
				snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
				FILE *f = fopen(path, "r");
				if (f) {
					wrk = fgets(comm, sizeof(comm), f) && !strncmp(comm, "iou-wrk", 7);
					fclose(f);
				}
			}
			if (d)
				closedir(d);
		}
		io_uring_queue_exit(&u);
	}
	close(p[0]);
	close(p[1]);
	return wrk;
}

static void test_a_ready_read_runs_before_the_clock_moves(void **state)
{
	(void)state;
	static const uint32_t backends[] = {CBCMN_BACKEND_IO_URING, CBCMN_BACKEND_EPOLL};
	for (size_t k = 0; k < 4; k++) {
		size_t b = k & 1;
		bool stream = k >= 2; /* a stream's receive, on a socket */
		if (k == 0 && pipe_read_goes_to_iowq()) {
			printf("[  SKIP    ] io_uring, pipe: this kernel ends a pipe read in an io-wq "
			       "worker (6.1: no NOWAIT for pipes), outside work for the clock\n");
			continue;
		}
		memset(&yl, 0, sizeof(yl));
		yl.waiters = 3;
		if (stream)
			assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, yl.fd), 0);
		else
			assert_int_equal(pipe2(yl.fd, O_CLOEXEC), 0);
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cfg.flags = CBCMN_CONFIG_LAB;
		cfg.seed = 3;
		cfg.backend = backends[b];
		cbcmn_runtime *rt = t_runtime_cfg(&cfg);
		int64_t (*fns[])(cbcmn_cx *, void *) = {yl_sleeper, yl_late_sleeper,
							stream ? yl_streamer : yl_reader,
							yl_yielder, NULL};
		t_run(rt, yl_spawn, fns, 0);
		ASSERT_TASK_CHECKS();
		t_destroy(rt);
		close(yl.fd[0]);
		close(yl.fd[1]);
		assert_int_equal(yl.nev, 2);
		assert_int_equal(yl.ev[1][0], YL_WAITED);
		if (yl.ev[1][1] != S)
			fail_msg("%s, %s: the read at %llu ns, want %llu (its byte came at 1 s)",
				 cbcmn_backend_name(backends[b]), stream ? "stream" : "pipe",
				 (unsigned long long)yl.ev[1][1],
				 (unsigned long long)S);
	}
}

static void test_lab_needs_one_executor(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.flags = CBCMN_CONFIG_LAB;
	cbcmn_runtime *rt;
	assert_int_equal(cbcmn_runtime_create(&cfg, &rt), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_same_seed_same_order),
		T_WATCHED_TEST(test_virtual_time),
		T_WATCHED_TEST(test_regression_dead_timers_do_not_move_the_clock),
		T_WATCHED_TEST(test_far_deadline_moves_the_clock_to_its_end),
		T_WATCHED_TEST(test_uint64_max_is_a_duration_for_sleeps_and_channels),
		T_WATCHED_TEST(test_replay_line_and_seed_override),
		T_WATCHED_TEST(test_bad_seed_variable_refused),
		T_WATCHED_TEST(test_lab_needs_one_executor),
		T_WATCHED_TEST(test_actor_sends_same_seed_same_order),
		T_WATCHED_TEST(test_next_place_order_ignores_real_time),
		T_WATCHED_TEST(test_two_yielders_keep_the_clock_still),
		T_WATCHED_TEST(test_io_in_flight_leaves_a_yielders_clock_free),
		T_WATCHED_TEST(test_a_stream_receive_leaves_a_yielders_clock_free),
		T_WATCHED_TEST(test_a_blocking_call_leaves_a_yielders_clock_free),
		T_WATCHED_TEST(test_a_metrics_server_leaves_a_yielders_clock_free),
		T_WATCHED_TEST(test_a_ready_read_runs_before_the_clock_moves),
	};
	return cmocka_run_group_tests_name("lab", tests, NULL, NULL);
}
