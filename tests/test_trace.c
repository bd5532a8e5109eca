/* test_trace.c: the trace rings (cbcmn_trace_drain) and cbcmn-run --trace:
 * the file is JSON that a trace viewer takes (slices whole and apart on
 * each track, every arrow with both ends), and its events are the run's
 * counters, one for one. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "toolrun.h"
#include "workloads/fib.h"
#include "../lib/trace.h"

/* ---- the API ------------------------------------------------------------------------ */

static void test_drain_refuses_bad_calls(void **state)
{
	(void)state;
	cbcmn_trace_event ev[4];
	assert_int_equal(cbcmn_trace_drain(NULL, ev, 4, NULL), -EINVAL);
	cbcmn_runtime *rt = t_runtime(1);
	assert_int_equal(cbcmn_trace_drain(rt, ev, 4, NULL), -EOPNOTSUPP); /* created without */
	cbcmn_runtime_destroy(rt);
	cbcmn_config c;
	cbcmn_config_init(&c);
	assert_int_equal(c.trace_events, 0); /* off by default */
	c.workers = 1;
	c.trace_events = (1u << 24) + 1;
	assert_int_equal(cbcmn_runtime_create(&c, &rt), -EINVAL);
	c.trace_events = 3;
	rt = t_runtime_cfg(&c);
	assert_int_equal(cbcmn_trace_drain(rt, NULL, 4, NULL), -EINVAL);
	assert_int_equal(cbcmn_trace_drain(rt, NULL, 0, NULL), 0);
	cbcmn_runtime_destroy(rt);
}

/* Nobody drains: a ring of 3 (rounded up to 4) keeps its first 4 events
 * and counts the rest as dropped; nothing waits for the drain. */
static void test_full_ring_keeps_the_first_and_counts_the_rest(void **state)
{
	(void)state;
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 1;
	c.trace_events = 3;
	c.flags = CBCMN_CONFIG_NO_INLINE; /* every task a slice of its own */
	cbcmn_runtime *rt = t_runtime_cfg(&c);
	struct fib f = {.n = 10}; /* 177 tasks */
	t_run(rt, fib_task, &f, 0);
	cbcmn_trace_event ev[64];
	uint64_t dropped = 0;
	int n = cbcmn_trace_drain(rt, ev, 64, &dropped);
	assert_int_equal(n, 4);
	assert_true(dropped >= 177 - 4);
	uint64_t prev_end = 0;
	for (int i = 0; i < n; i++) {
		assert_int_equal(ev[i].executor, 0);
		assert_true(ev[i].kind >= CBCMN_TRACE_TASK && ev[i].kind <= CBCMN_TRACE_IO);
		if (ev[i].kind == CBCMN_TRACE_TASK || ev[i].kind == CBCMN_TRACE_PARK) {
			assert_true(ev[i].ts_ns >= prev_end);
			prev_end = ev[i].ts_ns + ev[i].dur_ns;
		}
	}
	/* Drained: room again, and the drops stay counted. */
	f.n = 10;
	t_run(rt, fib_task, &f, 0);
	uint64_t d2;
	assert_int_equal(cbcmn_trace_drain(rt, ev, 64, &d2), 4);
	assert_true(d2 > dropped);
	cbcmn_runtime_destroy(rt);
}

/* A child forked with events waiting: its drain is CBCMN_EFORKED, and the
 * parent's drain still has them all.  The child's drain took its copies
 * of the parent's rings and reported them (each event twice over the two
 * processes). */
static void test_drain_in_a_forked_child_is_eforked(void **state)
{
	(void)state;
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 1;
	c.trace_events = 64;
	c.flags = CBCMN_CONFIG_NO_INLINE;
	cbcmn_runtime *rt = t_runtime_cfg(&c);
	struct fib f = {.n = 3};
	t_run(rt, fib_task, &f, 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		cbcmn_trace_event ev[64];
		int n = cbcmn_trace_drain(rt, ev, 64, NULL);
		_exit(n == CBCMN_EFORKED ? 0 : n >= 0 && n < 100 ? 10 + n : 1);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) != 0)
		fail_msg("the child's drain: %s", WEXITSTATUS(st) >= 10 ? "events (copies)" : "another error");
	cbcmn_trace_event ev[64];
	assert_true(cbcmn_trace_drain(rt, ev, 64, NULL) >= 5); /* fib(3): 5 tasks */
	cbcmn_runtime_destroy(rt);
}

/* ---- a drain racing the executors (TSan) --------------------------------------------- */

struct racer {
	cbcmn_runtime *rt;
	_Atomic bool stop;
	uint64_t tasks, bad;
	uint64_t last_end[4]; /* per executor: where its last slice ended */
	cbcmn_trace_event ev[256];
};

/* Take what is there; per executor the slices come out in order and never
 * overlap (a record torn by the race would break one or the other). */
static int race_drain(struct racer *r)
{
	int n = cbcmn_trace_drain(r->rt, r->ev, 256, NULL);
	for (int i = 0; i < n; i++) {
		const cbcmn_trace_event *e = &r->ev[i];
		if (e->executor >= 4 || e->kind < CBCMN_TRACE_TASK || e->kind > CBCMN_TRACE_IO) {
			r->bad++;
			continue;
		}
		if (e->kind != CBCMN_TRACE_TASK && e->kind != CBCMN_TRACE_PARK)
			continue;
		if (e->ts_ns < r->last_end[e->executor])
			r->bad++;
		r->last_end[e->executor] = e->ts_ns + e->dur_ns;
		r->tasks += e->kind == CBCMN_TRACE_TASK;
	}
	return n;
}

static void *race_main(void *arg)
{
	struct racer *r = arg;
	/* Acquire: pairs with the release store below, after the last run. */
	while (!atomic_load_explicit(&r->stop, memory_order_acquire))
		if (race_drain(r) == 0)
			usleep(100);
	return NULL;
}

static void test_drain_while_executors_record(void **state)
{
	(void)state;
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 2;
	c.trace_events = 64; /* small: the ring wraps many times */
	static struct racer r;
	memset(&r, 0, sizeof(r));
	r.rt = t_runtime_cfg(&c);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, race_main, &r), 0);
	for (int i = 0; i < T_SCALE(20); i++) {
		struct fib f = {.n = 12};
		t_run(r.rt, fib_task, &f, 0);
	}
	/* release: pairs with the acquire load in race_main. */
	atomic_store_explicit(&r.stop, true, memory_order_release);
	pthread_join(th, NULL);
	while (race_drain(&r) > 0)
		;
	assert_int_equal(r.bad, 0);
	assert_true(r.tasks > 0);
	cbcmn_runtime_destroy(r.rt);
}

/* ---- cbcmn-run --trace ------------------------------------------------------------------ */

/* The checks, in Python for its JSON parser (argv: trace, cbcmn-run's
 * --json output or "-", "exact" or "whole").  Prints one line; exit 0 when
 * every check passed.  "whole": the file is a valid trace (every slice
 * whole and apart from the others on its track, every arrow and every
 * I/O span with both ends on the right tracks, instants on executor
 * tracks, which are tid 1..N: no tid 0).  "exact" adds:
 * nothing was lost, and the events are the run's counters (steal arrows =
 * steals counted, per thief too; stolen tasks; tasks run; I/O spans =
 * fiber I/O calls (every task has ended: every call has its result); parks and
 * doorbells between the counters around the last drain, each executor
 * having at most one event counted and not yet recorded). */
static const char check_py[] =
	PY_TRACE_OPEN
	PY_ACTOR_MSGS
	"if len(tracks) != nx: fail('%d tracks, %d executors' % (len(tracks), nx))\n"
	"slices = {}; flows = {}; inst = {}; spans = {}\n"
	"for e in ev:\n"
	"    ph = e['ph']\n"
	"    if ph == 'M': continue\n"
	"    tid = e['tid']\n"
	"    if not (isinstance(tid, int) and 1 <= tid <= nx): fail('tid %r (executor N is tid N + 1: Perfetto merged tid 0 into tid 1, Tracy took it for a crashed thread)' % (e,))\n"
	"    if e['ts'] < 0: fail('ts %r' % (e,))\n"
	"    if ph == 'X':\n"
	"        if e['dur'] < 0: fail('dur %r' % (e,))\n"
	"        slices.setdefault(tid, []).append(e)\n"
	"    elif ph in 'BE': fail('B/E unmatched by design %r' % (e,))\n"
	"    elif ph in 'sf':\n"
	"        if is_steal(e): flows.setdefault(e['id'], []).append(e)\n"
	"    elif ph in 'be': spans.setdefault(e['id'], []).append(e)\n"
	"    elif ph == 'i': inst.setdefault(e['name'], []).append(e)\n"
	"    else: fail('phase %r' % (e,))\n"
	"sends, recvs = messages(ev)\n"
	"for tid, ss in slices.items():\n"
	"    ss.sort(key=lambda e: e['ts'])\n"
	"    for a, b in zip(ss, ss[1:]):\n"
	"        if b['ts'] < a['ts'] + a['dur'] - 1e-6: fail('overlap on %d: %r %r' % (tid, a, b))\n"
	"by_thief = {}\n"
	"stolen = 0\n"
	"for i, fl in flows.items():\n"
	"    if sorted(x['ph'] for x in fl) != ['f', 's']: fail('flow %r' % (fl,))\n"
	"    s = [x for x in fl if x['ph'] == 's'][0]; f = [x for x in fl if x['ph'] == 'f'][0]\n"
	"    a = s['args']\n"
	"    if s['tid'] != a['victim'] + 1 or f['tid'] != a['thief'] + 1 or a['thief'] == a['victim'] or s['ts'] != f['ts']: fail('flow %r' % (fl,))\n"
	"    by_thief[a['thief']] = by_thief.get(a['thief'], 0) + 1; stolen += a['tasks']\n"
	"for i, sp in spans.items():\n"
	"    if sorted(x['ph'] for x in sp) != ['b', 'e']: fail('span %r' % (sp,))\n"
	"    b = [x for x in sp if x['ph'] == 'b'][0]; x = [x for x in sp if x['ph'] == 'e'][0]\n"
	"    if b['tid'] != x['tid'] or b['name'] != x['name'] or x['ts'] < b['ts'] or b['cat'] != 'io': fail('span %r' % (sp,))\n"
	"tasks = set(); parks = 0\n"
	"for ss in slices.values():\n"
	"    for e in ss:\n"
	"        if e['name'] == 'task': tasks.add(e['args']['task'])\n"
	"        else: parks += 1\n"
	"bells = len(inst.get('doorbell', []))\n"
	"sqes = sum(e['args']['sqes'] for e in inst.get('io_submit', []))\n"
	"cqes = sum(e['args']['cqes'] for e in inst.get('io_complete', []))\n"
	"if sys.argv[3] == 'exact':\n"
	"    st = json.load(open(sys.argv[2]))\n"
	"    s = st['stats']; per = st['per_executor']; lo = od['counters_before_last_drain']; hi = od['counters_after_last_drain']\n"
	"    if not od['complete'] or od['dropped'] or od['not_written']: fail('lost events %r' % (od,))\n"
	"    if len(flows) != s['steal_successes']: fail('%d arrows, %d steals' % (len(flows), s['steal_successes']))\n"
	"    for i, p in enumerate(per):\n"
	"        if by_thief.get(i, 0) != p['steal_successes']: fail('thief %d: %d arrows, %d steals' % (i, by_thief.get(i, 0), p['steal_successes']))\n"
	"    if stolen != s['tasks_stolen']: fail('%d stolen in arrows, %d counted' % (stolen, s['tasks_stolen']))\n"
	"    if not (s['tasks_run'] - s['inline_runs'] <= len(tasks) <= s['tasks_run']): fail('%d tasks ran, counters %r' % (len(tasks), s))\n"
	"    for name, n in (('parks', parks), ('doorbells_sent', bells)):\n"
	"        if not (lo[name] - nx <= n <= hi[name]): fail('%s: %d events, counted %d..%d' % (name, n, lo[name], hi[name]))\n"
	"    if len(spans) != s['io_ops']: fail('%d I/O spans, %d io_ops' % (len(spans), s['io_ops']))\n"
	"    for name, n in (('sqes_submitted', sqes), ('cqes_reaped', cqes)):\n"
	"        if n > hi[name] or (n == 0 and lo[name] > 0): fail('%s: %d in events, %r' % (name, n, hi))\n"
	"    # ring of N: each round sends the token 10 N + 4 times and QUIT N times; all taken\n"
	"    if st['workload'] == 'ring':\n"
	"        size = int(sys.argv[4]); want = st['rounds'] * (11 * size + 4)\n"
	"        if len(sends) != want or len(recvs) != want or set(sends) != set(recvs): fail('%d sends, %d receives, %d messages' % (len(sends), len(recvs), want))\n"
	"print('ok', len(tasks), 'tasks', len(flows), 'steals', len(sends), 'sends', len(recvs), 'receives', len(spans), 'io calls', parks, 'parks', bells, 'doorbells', sqes, 'sqes', cqes, 'cqes', 'dropped', od['dropped'], 'not_written', od['not_written'])\n";

struct traced {
	struct toolrun run;
	char trace[64], stats[64];
};

/* Run cbcmn-run WORKLOAD --trace into a scratch file, with extra options,
 * its --json output kept in another. */
static void run_traced(struct traced *t, const char *workload, const char *const *extra)
{
	snprintf(t->trace, sizeof(t->trace), "/tmp/cbcmn-trace-XXXXXX");
	int fd = mkstemp(t->trace);
	assert_true(fd >= 0);
	close(fd);
	const char *argv[32] = {"cbcmn-run", workload, "--workers", "2", "--duration", "0.2", "--json",
				"--trace", t->trace};
	size_t n = 9;
	while (extra && *extra && n < 31)
		argv[n++] = *extra++;
	argv[n] = NULL;
	toolrun(&t->run, argv, 120);
	snprintf(t->stats, sizeof(t->stats), "/tmp/cbcmn-trace-stats-XXXXXX");
	fd = mkstemp(t->stats);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, t->run.out, t->run.out_len), (ssize_t)t->run.out_len);
	close(fd);
}

static void traced_free(struct traced *t)
{
	unlink(t->trace);
	unlink(t->stats);
	free(t->run.out);
}

/* python3 check_py on t, in mode; fails the test with its line. */
static void check(struct traced *t, const char *mode)
{
	const char *args[] = {t->trace, t->stats, mode, "4", NULL};
	pycheck(check_py, args, mode);
}

/* Steals: skew makes executor 1 steal from executor 0. */
static void test_trace_of_skew_matches_its_counters(void **state)
{
	(void)state;
	struct traced t;
	run_traced(&t, "skew", NULL);
	if (t.run.status != 0)
		fail_msg("status %d: %s", t.run.status, t.run.err);
	check(&t, "exact");
	traced_free(&t);
}

/* I/O: mixed writes and reads socket pairs through the rings. */
static void test_trace_of_mixed_matches_its_counters(void **state)
{
	(void)state;
	struct traced t;
	run_traced(&t, "mixed", NULL);
	if (t.run.status != 0)
		fail_msg("status %d: %s", t.run.status, t.run.err);
	check(&t, "exact");
	traced_free(&t);
}

/* Actor messages: ring passes a token round 4 actors (messages from task
 * to actor, actor to actor, across executors): one send and one receive
 * per message, paired, each receive after its send.  Nothing may be lost,
 * whenever the drain runs: 10 ms of rounds (the first is always whole)
 * make a few thousand events per executor, rings of 2^20 hold them all
 * with no drain at all.  (0.2 s in rings of the default 16 384 dropped
 * 237 946 events where a loaded machine kept the drain off its CPU.) */
static void test_trace_of_ring_holds_each_message_sent_and_received(void **state)
{
	(void)state;
	struct traced t;
	const char *extra[] = {"--size", "4", "--duration", "0.01", "--trace-events", "1048576", NULL};
	run_traced(&t, "ring", extra);
	if (t.run.status != 0)
		fail_msg("status %d: %s", t.run.status, t.run.err);
	check(&t, "exact");
	traced_free(&t);
}

/* Rings of 1 event: most are dropped, and said (one line, status still 0:
 * the run was right); what the file holds is still a whole trace. */
static void test_trace_full_rings_leave_a_whole_trace(void **state)
{
	(void)state;
	struct traced t;
	run_traced(&t, "skew", (const char *const[]){"--trace-events", "1", NULL});
	if (t.run.status != 0)
		fail_msg("status %d: %s", t.run.status, t.run.err);
	assert_non_null(strstr(t.run.err, "dropped by full rings"));
	assert_one_line(t.run.err);
	check(&t, "whole");
	traced_free(&t);
}

/* A huge run cannot fill the disk: past --trace-limit events are counted,
 * not written, and the file stays whole. */
static void test_trace_limit_keeps_the_file_whole(void **state)
{
	(void)state;
	struct traced t;
	run_traced(&t, "skew", (const char *const[]){"--trace-limit", "50", NULL});
	if (t.run.status != 0)
		fail_msg("status %d: %s", t.run.status, t.run.err);
	assert_non_null(strstr(t.run.err, "past --trace-limit 50"));
	check(&t, "whole");
	FILE *f = fopen(t.trace, "r");
	assert_non_null(f);
	char line[512];
	int events = 0;
	while (fgets(line, sizeof(line), f))
		events += strstr(line, "\"ph\":\"M\"") == NULL && strstr(line, "\"ph\":") != NULL;
	fclose(f);
	assert_true(events <= 50 * 2); /* a steal is two events, its arrow's ends */
	traced_free(&t);
}

/* Bad input: one line, status 2, nothing run, nothing on stdout. */
static void test_trace_bad_input_is_one_line(void **state)
{
	(void)state;
	const char *const *cases[] = {
		(const char *const[]){"cbcmn-run", "fib", "--trace", "/nonexistent/dir/t.json", NULL},
		(const char *const[]){"cbcmn-run", "fib", "--trace", "", NULL},
		(const char *const[]){"cbcmn-run", "fib", "--trace-events", "8", NULL},
		(const char *const[]){"cbcmn-run", "fib", "--trace", "/tmp/x.json", "--trace-events", "0", NULL},
		(const char *const[]){"cbcmn-run", "fib", "--trace", "/tmp/x.json", "--trace-events", "16777217", NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct toolrun r;
		toolrun(&r, cases[i], 30);
		if (r.status != 2 || r.out_len)
			fail_msg("case %zu: status %d, %zu bytes out, stderr '%s'", i, r.status, r.out_len, r.err);
		assert_one_line(r.err);
		free(r.out);
	}
}

/* A file that takes no bytes (a full disk): the run is right, the trace
 * is not: one line and status 1. */
static void test_trace_write_failure_is_one_line(void **state)
{
	(void)state;
	if (access("/dev/full", W_OK) != 0) {
		T_SKIP("no writable /dev/full");
		return;
	}
	struct toolrun r;
	toolrun(&r, (const char *const[]){"cbcmn-run", "fib", "--size", "12", "--workers", "2", "--duration",
					  "0.05", "--trace", "/dev/full", NULL},
		60);
	if (r.status != 1)
		fail_msg("status %d, stderr '%s'", r.status, r.err);
	assert_one_line(r.err);
	assert_non_null(strstr(r.err, "writing /dev/full failed"));
	free(r.out);
}

/* A trace past the file size limit (ulimit -f): as a full disk, one line
 * and status 1.  SIGXFSZ's default action killed cbcmn-run in the middle
 * of a write (status 128 + SIGXFSZ, no line, a trace cut short). */
static void test_trace_over_the_file_size_limit_is_one_line(void **state)
{
	(void)state;
	char trace[] = "/tmp/cbcmn-trace-fsize-XXXXXX";
	int fd = mkstemp(trace);
	assert_true(fd >= 0);
	close(fd);
	const rlim_t limit = 8 << 10; /* its output is some 600 bytes */
	struct toolrun r;
	if (!toolrun_fsize(&r, (const char *const[]){"cbcmn-run", "fib", "--size", "12", "--workers",
						     "2", "--duration", "0.2", "--trace", trace, NULL},
			   60, limit)) {
		unlink(trace);
		return;
	}
	struct stat st;
	assert_int_equal(stat(trace, &st), 0);
	unlink(trace);
	if (r.status == 128 + SIGXFSZ)
		fail_msg("killed by SIGXFSZ, the trace cut at %lld bytes", (long long)st.st_size);
	if (r.status != 1)
		fail_msg("status %d, stderr '%s'", r.status, r.err);
	assert_one_line(r.err);
	assert_non_null(strstr(r.err, "failed"));
	assert_true(st.st_size <= (off_t)limit);
	free(r.out);
}

/* The claim under load (trace_seg.h; in this suite, which TSan runs): an
 * executor writing a small ring as fast as it can, two consumers taking
 * from it at once.  Each record is taken once,
 * whole (its fields agree with each other), none lost, and no claim ever
 * says "corrupt" (a head gone stale between a claim's loads did). */
#define CLAIM_N 100000u

struct claim_run {
	struct cbcmn__trace tr;
	_Atomic bool done;
	_Atomic uint32_t *seen; /* per sequence number: times taken */
	_Atomic uint64_t torn, corrupt;
};

static void *claim_consumer(void *arg)
{
	struct claim_run *c = arg;
	cbcmn_trace_event ev[8];
	for (;;) {
		bool last = atomic_load(&c->done); /* read first: then one more take sees all */
		uint64_t h, t;
		int n = cbcmn__trace_take(c->tr.ring, c->tr.mask, 0, ev, 8, &h, &t);
		if (n < 0) {
			atomic_fetch_add(&c->corrupt, 1);
			n = 0;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].arg >= CLAIM_N || ev[i].ts_ns != 3 * ev[i].arg + 1 ||
			    ev[i].dur_ns != 5 * ev[i].arg || ev[i].peer != (uint32_t)ev[i].arg * 7)
				atomic_fetch_add(&c->torn, 1);
			else
				atomic_fetch_add(&c->seen[ev[i].arg], 1);
		}
		if (last && n == 0)
			return NULL;
		if (n == 0)
			sched_yield(); /* a CPU quota spent spinning stalls the writer */
	}
}

static void test_two_consumers_take_each_record_once_and_whole(void **state)
{
	(void)state;
	struct claim_run c = {0};
	size_t size = sizeof(struct cbcmn__trace_ring) + 4 * sizeof(struct cbcmn__trace_rec);
	c.tr.ring = aligned_alloc(64, (size + 63) / 64 * 64);
	assert_non_null(c.tr.ring);
	memset(c.tr.ring, 0, size);
	c.tr.mask = 3;
	atomic_init(&c.tr.on_self, 1);
	c.tr.on = &c.tr.on_self;
	c.seen = calloc(CLAIM_N, sizeof(*c.seen));
	assert_non_null(c.seen);
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[i], NULL, claim_consumer, &c), 0);
	/* This thread is the executor; a record the full ring drops is
	 * written again, so that every number is there to be taken. */
	uint64_t put = 0;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint32_t seq = 0; seq < CLAIM_N;) {
		/* Bounded in time on a loaded machine: what was written by then. */
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - t0.tv_sec) * 1000000000l + (now.tv_nsec - t0.tv_nsec) > 500000000l)
			break;
		cbcmn__trace_put(&c.tr, CBCMN_TRACE_TASK, 3ull * seq + 1, 5ull * seq, seq, seq * 7);
		uint64_t tail = atomic_load(&c.tr.ring->tail);
		if (tail != put)
			seq++;
		else
			sched_yield();
		put = tail;
	}
	atomic_store(&c.done, true);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	uint64_t once = 0, twice = 0;
	for (uint32_t i = 0; i < put; i++) {
		once += c.seen[i] == 1;
		twice += c.seen[i] > 1;
	}
	uint64_t dropped = atomic_load(&c.tr.ring->dropped); /* tries again, each */
	printf("    %llu written, %llu dropped; taken once %llu, more %llu, torn %llu, "
	       "\"corrupt\" %llu\n",
	       (unsigned long long)put, (unsigned long long)dropped, (unsigned long long)once,
	       (unsigned long long)twice, (unsigned long long)atomic_load(&c.torn),
	       (unsigned long long)atomic_load(&c.corrupt));
	free(c.seen);
	free(c.tr.ring);
	assert_true(put > 0);
	assert_int_equal(twice, 0);
	assert_int_equal(atomic_load(&c.torn), 0);
	assert_int_equal(atomic_load(&c.corrupt), 0);
	assert_int_equal(once, put);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_drain_refuses_bad_calls),
		cmocka_unit_test(test_full_ring_keeps_the_first_and_counts_the_rest),
		cmocka_unit_test(test_drain_in_a_forked_child_is_eforked),
		cmocka_unit_test(test_drain_while_executors_record),
		cmocka_unit_test(test_trace_of_skew_matches_its_counters),
		cmocka_unit_test(test_trace_of_mixed_matches_its_counters),
		cmocka_unit_test(test_trace_of_ring_holds_each_message_sent_and_received),
		cmocka_unit_test(test_trace_full_rings_leave_a_whole_trace),
		cmocka_unit_test(test_trace_limit_keeps_the_file_whole),
		cmocka_unit_test(test_trace_bad_input_is_one_line),
		cmocka_unit_test(test_trace_write_failure_is_one_line),
		cmocka_unit_test(test_trace_over_the_file_size_limit_is_one_line),
		cmocka_unit_test(test_two_consumers_take_each_record_once_and_whole),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
