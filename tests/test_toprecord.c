/* test_toprecord.c: cbcmn-top --record: the trace a viewer opens (every
 * slice whole and apart on its executor's track, every arrow with both
 * ends).  From the target's shared trace rings: its single events, which
 * are its counters one for one, each taken once when the target drains
 * its rings too; from the samples (a target without rings): counts that
 * are the counters' growth from the first sample to the last, executor by
 * executor, the last being the run's final figures.  A target whose rings
 * are corrupt: one line, no crash, a whole file.  Bad input as one line
 * and a non-zero status, nothing started. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "toolrun.h"
#include "../lib/fault.h"
#include "../lib/runtime.h"
#include "../lib/statseg.h"
#include "../lib/trace.h"
#include "../lib/trace_seg.h"
#include "workloads/fib.h"

/* argv: trace, cbcmn-run's --json output, "runtime" or "kernel".  Prints
 * one line; exit 0 when every check passed.  The events' counts per
 * executor (the slices' for tasks, the instants' for the rest) equal
 * counters_last - counters_first; the last steals equal cbcmn-run's own
 * final count (the runtime ended: the last read is its final figures).
 * "kernel": steal arrows go victim -> thief between executor tracks, and
 * count no more steals than the runtime did (each probe is a steal the
 * runtime counts). */
static const char check_py[] =
	PY_TRACE_OPEN
	"if not od['ended'] or not od['complete'] or od['samples'] < 2 or od['source_events'] != 'none': fail('otherData %r' % (od,))\n"
	"first = od['counters_first']['per_executor']; last = od['counters_last']['per_executor']\n"
	"if len(first) != nx or len(last) != nx: fail('per_executor %r' % (od,))\n"
	"slices = {}; flows = {}\n"
	"got = [dict() for _ in range(nx)]\n"
	"def add(i, k, v): got[i][k] = got[i].get(k, 0) + v\n"
	"names = {'steals': (('steals', 'steal_successes'), ('tasks', 'tasks_stolen')),\n"
	"         'parks': (('parks', 'parks'), ('wakes', 'wakes')),\n"
	"         'doorbells': (('sent', 'doorbells_sent'), ('recv', 'doorbells_recv')),\n"
	"         'io_submit': (('sqes', 'sqes_submitted'),), 'io_complete': (('cqes', 'cqes_reaped'),)}\n"
	"for e in ev:\n"
	"    ph = e['ph']\n"
	"    if ph in 'MC': continue\n"
	"    tid = e['tid']\n"
	"    if not (isinstance(tid, int) and 1 <= tid <= nx): fail('tid %r' % (e,))\n"
	"    if e['ts'] < 0: fail('ts %r' % (e,))\n"
	"    a = e.get('args', {})\n"
	"    if ph == 'X':\n"
	"        if e['dur'] < 0 or e['name'] != 'interval': fail('slice %r' % (e,))\n"
	"        slices.setdefault(tid, []).append(e)\n"
	"        add(tid - 1, 'tasks_run', a['tasks']); add(tid - 1, 'io_ops', a['io_calls'])\n"
	"    elif ph in 'sf': flows.setdefault(e['id'], []).append(e)\n"
	"    elif ph == 'i':\n"
	"        if e['name'] not in names: fail('instant %r' % (e,))\n"
	"        for k, c in names[e['name']]: add(tid - 1, c, a[k])\n"
	"    else: fail('phase %r' % (e,))\n"
	"for tid, ss in slices.items():\n"
	"    ss.sort(key=lambda e: e['ts'])\n"
	"    for x, y in zip(ss, ss[1:]):\n"
	"        if y['ts'] < x['ts'] + x['dur'] - 1e-6: fail('overlap on %d: %r %r' % (tid, x, y))\n"
	"arrows = 0\n"
	"for i, fl in flows.items():\n"
	"    if sorted(x['ph'] for x in fl) != ['f', 's']: fail('flow %r' % (fl,))\n"
	"    s = [x for x in fl if x['ph'] == 's'][0]; f = [x for x in fl if x['ph'] == 'f'][0]\n"
	"    a = s['args']\n"
	"    if s['tid'] != a['victim'] + 1 or f['tid'] != a['thief'] + 1 or a['thief'] == a['victim'] or a['steals'] < 1: fail('flow %r' % (fl,))\n"
	"    arrows += a['steals']\n"
	"for i in range(nx):\n"
	"    for c in last[i]:\n"
	"        if got[i].get(c, 0) != last[i][c] - first[i][c]: fail('executor %d: %s %d in events, counters %d -> %d' % (i, c, got[i].get(c, 0), first[i][c], last[i][c]))\n"
	"run = json.load(open(sys.argv[2]))['stats']\n"
	"lt = od['counters_last']\n"
	"if lt['steal_successes'] != run['steal_successes'] or lt['tasks_run'] < run['tasks_run']: fail('last %r, the run counted %r' % (lt, run))\n"
	"steals = lt['steal_successes'] - od['counters_first']['steal_successes']\n"
	"if sys.argv[3] == 'kernel' and (arrows > steals or not flows and steals > 10): fail('%d steals in arrows, %d counted' % (arrows, steals))\n"
	"print('ok', od['samples'], 'samples', steals, 'steals', arrows, 'in arrows', lt['tasks_run'] - od['counters_first']['tasks_run'], 'tasks')\n";

static char runner[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	if (!tool_path("cbcmn-run", runner, sizeof(runner)))
		runner[0] = 0; /* the tests skip, saying so */
	return 0;
}

/* cbcmn-top --record over cbcmn-run skew (two executors, all work born on
 * executor 0: executor 1 steals) from its start to its end, in batch
 * mode, sampling every 0.1 s; kernel figures or not.  The trace file
 * exists beforehand, holding something else: it is replaced. */
static void record_skew(bool kernel)
{
	if (!runner[0]) {
		T_SKIP("cbcmn-run is not built beside this suite (make tools)");
		return;
	}
	if (kernel && geteuid() != 0) {
		T_SKIP("kernel figures need root");
		return;
	}
	char trace[] = "/tmp/cbcmn-toprec-XXXXXX", out[] = "/tmp/cbcmn-toprec-run-XXXXXX";
	int fd = mkstemp(trace), ofd = mkstemp(out);
	assert_true(fd >= 0 && ofd >= 0);
	assert_int_equal(write(fd, "not a trace", 11), 11);
	close(fd);
	close(ofd);
	const char *argv[24] = {"cbcmn-top", "-b", "-d", "0.1", "--record", trace, "-o", out};
	size_t n = 8;
	if (!kernel)
		argv[n++] = "--no-bpf";
	/* Long enough to outlast the programs' loading, which comes before
	 * the first sample. */
	const char *cmd[] = {"--", runner, "skew", "--workers", "2", "--duration",
			     kernel ? "2.5" : "0.6", "--json", NULL};
	for (size_t i = 0; cmd[i]; i++)
		argv[n++] = cmd[i];
	/* No rings: the samples' counts (the events' test is below). */
	setenv("CBCMN_TRACE_EVENTS", "0", 1);
	struct toolrun r;
	toolrun(&r, argv, 120);
	unsetenv("CBCMN_TRACE_EVENTS");
	if (r.status != 0)
		fail_msg("status %d: %s", r.status, r.err);
	const char *args[] = {trace, out, kernel ? "kernel" : "runtime", NULL};
	pycheck(check_py, args, kernel ? "kernel" : "runtime");
	free(r.out);
	unlink(trace);
	unlink(out);
}

static void test_record_matches_the_runtimes_counters(void **state)
{
	(void)state;
	record_skew(false);
}

static void test_record_with_kernel_steal_arrows(void **state)
{
	(void)state;
	record_skew(true);
}

/* ---- single events, from the target's trace rings -------------------------------------- */

/* argv: trace, cbcmn-run's --json output ("-": none), "exact" or
 * "whole", and a second trace ("-": none) that the target's own drain
 * wrote (cbcmn-run --trace) at the same time.  "whole": a file a viewer
 * takes: tids of executor tracks, slices apart per track, arrows and
 * spans with both ends.  "exact": nothing lost, and the events of both
 * files together are the run's final counters (otherData's last read,
 * after the runtime ended; inline runs from the run's own figures): steal arrows = steals per
 * thief, their tasks = tasks stolen, tasks whose first slice is on an
 * executor within [tasks_run - inline_runs, tasks_run - inline_runs +
 * every executor's inline_runs] of it (a task run inline has its first
 * slice where it resumes), park
 * slices = parks, I/O spans = io_ops; and no event in both files (the
 * same track, time on the monotonic clock, length and args). */
static const char events_py[] =
	PY_TRACE_OPEN
	PY_ACTOR_MSGS
	"def events(tr, nx):\n"
	"    slices = {}; flows = {}; spans = {}; inst = {}\n"
	"    for e in tr['traceEvents']:\n"
	"        ph = e['ph']\n"
	"        if ph in 'MC': continue\n"
	"        tid = e['tid']\n"
	"        if not (isinstance(tid, int) and 1 <= tid <= nx + 1): fail('tid %r' % (e,))\n"
	"        if e['ts'] < 0: fail('ts %r' % (e,))\n"
	"        if ph == 'X':\n"
	"            if e['dur'] < 0 or e['name'] not in ('task', 'park'): fail('slice %r' % (e,))\n"
	"            slices.setdefault(tid, []).append(e)\n"
	"        elif ph in 'sf':\n"
	"            if is_steal(e): flows.setdefault(e['id'], []).append(e)\n"
	"        elif ph in 'be': spans.setdefault(e['id'], []).append(e)\n"
	"        elif ph == 'i': inst.setdefault(e['name'], []).append(e)\n"
	"        else: fail('phase %r' % (e,))\n"
	"    for tid, ss in slices.items():\n"
	"        ss.sort(key=lambda e: e['ts'])\n"
	"        for a, b in zip(ss, ss[1:]):\n"
	"            if b['ts'] < a['ts'] + a['dur'] - 1e-6: fail('overlap on %d: %r %r' % (tid, a, b))\n"
	"    arrows = []\n"
	"    for i, fl in flows.items():\n"
	"        if sorted(x['ph'] for x in fl) != ['f', 's']: fail('flow %r' % (fl,))\n"
	"        s = [x for x in fl if x['ph'] == 's'][0]; f = [x for x in fl if x['ph'] == 'f'][0]\n"
	"        a = s['args']\n"
	"        if s['tid'] != a['victim'] + 1 or f['tid'] != a['thief'] + 1 or a['thief'] == a['victim']: fail('flow %r' % (fl,))\n"
	"        arrows.append((a['thief'], a['victim'], a['tasks'], s['ts']))\n"
	"    for i, sp in spans.items():\n"
	"        if sorted(x['ph'] for x in sp) != ['b', 'e']: fail('span %r' % (sp,))\n"
	"    return slices, arrows, spans, inst\n"
	"if od['source_events'] != \"the target's trace rings\": fail('no events: %r' % (od,))\n"
	"slices, arrows, spans, inst = events(tr, nx)\n"
	"sends, recvs = messages(ev)\n"
	"# A slice's identity: its track, name, start and length in ns on the\n"
	"# monotonic clock (each file's ts counts from its own time 0, t0_ns, and\n"
	"# the two files' differ: a ts alone matched distinct slices of the two\n"
	"# files by chance), and its args (the task); exact within one file too.\n"
	"def ident(slices, t0):\n"
	"    ids = set((tid, e['name'], t0 + round(e['ts'] * 1000), round(e['dur'] * 1000), json.dumps(e['args'], sort_keys=True)) for tid, ss in slices.items() for e in ss)\n"
	"    if len(ids) != sum(len(ss) for ss in slices.values()): fail('two slices of one file alike')\n"
	"    return ids\n"
	"mine = ident(slices, od['t0_ns'])\n"
	"if sys.argv[4] != '-':\n"
	"    other = json.load(open(sys.argv[4]))\n"
	"    o_slices, o_arrows, o_spans, o_inst = events(other, other['otherData']['executors'])\n"
	"    both = mine & ident(o_slices, other['otherData']['t0_ns'])\n"
	"    if both: fail('%d slices taken by both consumers, e.g. %r' % (len(both), sorted(both)[:3]))\n"
	"    if not o_slices or not slices: fail('a consumer took nothing: %d and %d tracks' % (len(slices), len(o_slices)))\n"
	"    # merged on this file's time base: which slice of a task came first\n"
	"    # is compared across the files (a task first run on executor 0 in one\n"
	"    # file read as first run on executor 1 in the other, 1-5 ms apart)\n"
	"    shift = (other['otherData']['t0_ns'] - od['t0_ns']) / 1000.0\n"
	"    for tid, ss in o_slices.items(): slices.setdefault(tid, []).extend(dict(e, ts=e['ts'] + shift) for e in ss)\n"
	"    o_sends, o_recvs = messages(other['traceEvents'])\n"
	"    if set(sends) & set(o_sends) or set(recvs) & set(o_recvs): fail('a message in both files')\n"
	"    sends.update(o_sends); recvs.update(o_recvs)\n"
	"    # the same arrow across the files (their times have different bases:\n"
	"    # messages() compared those within each)\n"
	"    for k, r in recvs.items():\n"
	"        x = sends.get(k)\n"
	"        if x and x[2] != r[2]: fail('message %r: sent %r, received %r' % (k, x, r))\n"
	"    arrows += o_arrows; spans.update({('o', k): v for k, v in o_spans.items()})\n"
	"    if other['otherData']['dropped'] or other['otherData']['not_written']: fail('the target lost events %r' % (other['otherData'],))\n"
	"    o_n = sum(1 for e in other['traceEvents'] if e['ph'] in 'Xisb')\n"
	"    if not (0 < od['taken_by_others'] <= o_n): fail('taken by others %d, the other file holds %d' % (od['taken_by_others'], o_n))\n"
	"if sys.argv[3] == 'exact':\n"
	"    if od['dropped'] or od['invalid'] or od['corrupt_rings'] or od['not_written']: fail('lost events %r' % (od,))\n"
	"    if (sys.argv[4] == '-') != (od['complete'] and not od['taken_by_others']): fail('another consumer %r' % (od,))\n"
	"    st = json.load(open(sys.argv[2])); runper = st['per_executor']\n"
	"    if not od['ended']: fail('the runtime did not end while recorded %r' % (od,))\n"
	"    # The final counts: the last read, after the runtime ended (cbcmn-run's\n"
	"    # own figures come before its runtime's end, when executors still park).\n"
	"    s = od['counters_last']; per = s['per_executor']\n"
	"    first = {}\n"
	"    for tid, ss in slices.items():\n"
	"        for e in ss:\n"
	"            if e['name'] == 'task':\n"
	"                t = e['args']['task']\n"
	"                if t not in first or e['ts'] < first[t][0]: first[t] = (e['ts'], tid - 1)\n"
	"    inline_all = sum(r['inline_runs'] for r in runper)\n"
	"    if len(first) > sum(p['tasks_run'] for p in per): fail('%d tasks began, %d run' % (len(first), sum(p['tasks_run'] for p in per)))\n"
	"    for i, p in enumerate(per):\n"
	"        thief = [a for a in arrows if a[0] == i]\n"
	"        if len(thief) != p['steal_successes']: fail('thief %d: %d arrows, %d steals' % (i, len(thief), p['steal_successes']))\n"
	"        if sum(a[2] for a in thief) != p['tasks_stolen']: fail('thief %d: %d tasks in arrows, %d stolen' % (i, sum(a[2] for a in thief), p['tasks_stolen']))\n"
	"        began = sum(1 for t in first.values() if t[1] == i)\n"
	"        inl = runper[i]['inline_runs']\n"
	"        # A task run inline is counted where it starts, with no slice of its\n"
	"        # own there: its first slice, if any, is where it resumes after a\n"
	"        # wait, on any executor (stolen, under load: mixed's child of the\n"
	"        # awaiting root, ring's actors)\n"
	"        if not (p['tasks_run'] - inl <= began <= p['tasks_run'] - inl + inline_all): fail('executor %d: %d tasks began, counters %r, inline %d of %d' % (i, began, p, inl, inline_all))\n"
	"        parks = sum(1 for e in slices.get(i + 1, []) if e['name'] == 'park')\n"
	"        if parks != p['parks']: fail('executor %d: %d park slices, %d parks' % (i, parks, p['parks']))\n"
	"    if len(spans) != s['io_ops']: fail('%d I/O spans, %d io_ops' % (len(spans), s['io_ops']))\n"
	"    # ring of N (4 here): 10 N + 4 token sends and N QUITs a round, all taken\n"
	"    if st['workload'] == 'ring':\n"
	"        want = st['rounds'] * (11 * 4 + 4)\n"
	"        if len(sends) != want or len(recvs) != want or set(sends) != set(recvs): fail('%d sends, %d receives, %d messages' % (len(sends), len(recvs), want))\n"
	"print('ok', len(mine), 'slices', len(arrows), 'steal arrows', len(sends), 'sends', len(recvs), 'receives', od['events'], 'events', 'dropped', od['dropped'])\n";

/* A scratch file name in name (a template), the file made empty. */
static void scratch(char *name)
{
	int fd = mkstemp(name);
	assert_true(fd >= 0);
	close(fd);
}

/* cbcmn-top --record over cbcmn-run WORKLOAD from its start to its end
 * (rings of ring_events, which cbcmn-top passes on), the run's --json in
 * out; with own, the run also drains its own rings into that trace. */
static void record_events(const char *workload, const char *ring_events, const char *trace,
			  const char *out, const char *own, struct toolrun *r)
{
	/* ring: of 4 actors (the checks count its messages so) */
	bool ring = !strcmp(workload, "ring");
	const char *argv[24] = {"cbcmn-top", "-b", "--no-bpf", "-d", "0.1", "--record", trace, "-o", out,
				"--", runner, workload, "--workers", "2", "--duration", "0.3", "--json"};
	size_t k = 17;
	if (ring) {
		argv[k++] = "--size";
		argv[k++] = "4";
	}
	if (own) {
		argv[k++] = "--trace";
		argv[k++] = own;
	}
	argv[k] = NULL;
	setenv("CBCMN_TRACE_EVENTS", ring_events, 1);
	toolrun(r, argv, 120);
	unsetenv("CBCMN_TRACE_EVENTS");
	printf("    %s: status %d %s", workload, r->status, r->err);
}

/* record_events() of workload, nothing lost (rings of 2^20), checked
 * exact against the run's counters; with two, the target drains its own
 * rings into a second trace too. */
static void events_case(const char *workload, bool two)
{
	if (!runner[0]) {
		T_SKIP("cbcmn-run is not built beside this suite (make tools)");
		return;
	}
	char trace[] = "/tmp/cbcmn-toprec-ev-XXXXXX", out[] = "/tmp/cbcmn-toprec-evrun-XXXXXX";
	char own[] = "/tmp/cbcmn-toprec-own-XXXXXX";
	scratch(trace);
	scratch(out);
	scratch(own);
	struct toolrun r;
	record_events(workload, "1048576", trace, out, two ? own : NULL, &r);
	if (r.status != 0)
		fail_msg("status %d: %s", r.status, r.err);
	const char *args[] = {trace, out, "exact", two ? own : "-", NULL};
	pycheck(events_py, args, two ? "two consumers" : workload);
	free(r.out);
	unlink(trace);
	unlink(out);
	unlink(own);
}

/* Steals on skew, I/O on mixed, actor messages on ring. */
static void test_record_events_match_the_runtimes_counters(void **state)
{
	(void)state;
	events_case("skew", false);
	events_case("mixed", false);
	events_case("ring", false);
}

/* Two consumers: the target drains its own rings (cbcmn-run --trace)
 * while cbcmn-top takes them too.  Each event is in one file, never both,
 * and the two together are the run's counters. */
static void test_record_and_the_targets_own_drain_take_each_event_once(void **state)
{
	(void)state;
	events_case("skew", true);
	events_case("ring", true);
}

/* Rings of 16 records: most events are lost, and said: the file's
 * otherData counts them, one line on stderr, status 0, a whole trace. */
static void test_record_events_lost_to_full_rings_are_counted(void **state)
{
	(void)state;
	if (!runner[0]) {
		T_SKIP("cbcmn-run is not built beside this suite (make tools)");
		return;
	}
	char trace[] = "/tmp/cbcmn-toprec-lost-XXXXXX", out[] = "/tmp/cbcmn-toprec-lostrun-XXXXXX";
	scratch(trace);
	scratch(out);
	struct toolrun r;
	record_events("skew", "16", trace, out, NULL, &r);
	assert_int_equal(r.status, 0);
	if (!strstr(r.err, "events not in the trace, ") ||
	    !strstr(r.err, "dropped by the target's full rings (16 records each)"))
		fail_msg("stderr: %s", r.err);
	static const char lost_py[] =
		PY_TRACE_OPEN
		"if od['dropped'] == 0 or od['complete'] or od['ring_events'] != 16: fail('%r' % (od,))\n"
		"print('ok', od['events'], 'events', od['dropped'], 'dropped')\n";
	const char *args[] = {trace, NULL};
	pycheck(lost_py, args, "lost");
	free(r.out);
	unlink(trace);
	unlink(out);
}

/* ---- cbcmn-top -p: a target started with CBCMN_TRACE_EVENTS ---------------------------- */

struct target {
	pid_t pid;
	int fd;                          /* its rings' memfd, ours through /proc */
	struct cbcmn__tseg_hdr *h;
	size_t size;
};

static void target_map(struct target *t);

/* A target of our own: a child that makes a runtime of 2 executors with
 * rings of ring_events in the shared memfd, runs fib tasks for as long as
 * it lives (or once, with no child run inline, then idles, with busy
 * false), and our mapping of its
 * rings (read-write, as a watcher's). */
static void target_start(struct target *t, const char *ring_events, bool busy,
			 unsigned die_after_ms)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	t->pid = fork();
	assert_true(t->pid >= 0);
	if (t->pid == 0) {
		close(p[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test leaves none behind */
		setenv("CBCMN_TRACE_EVENTS", ring_events, 1);
		if (die_after_ms) /* SIGALRM: killed mid-run, its rings as they are */
			setitimer(ITIMER_REAL,
				  &(struct itimerval){.it_value = {.tv_sec = die_after_ms / 1000,
								   .tv_usec = die_after_ms % 1000 * 1000}},
				  NULL);
		cbcmn_config c;
		cbcmn_config_init(&c);
		c.workers = 2;
		c.min_workers = 2;
		/* Run once: each of fib's 465 tasks a slice of its own, so
		 * that the records fill a ring of 64 at least.  Inline, under
		 * ASan and load, one executor ran them all inside the root's
		 * one slice while the other stayed parked (its park not yet
		 * recorded): neither ring held the 2 records a test spoils. */
		if (!busy)
			c.flags |= CBCMN_CONFIG_NO_INLINE;
		cbcmn_runtime *rt;
		if (cbcmn_runtime_create(&c, &rt))
			_exit(1);
		for (int round = 0;; round++) {
			struct fib f = {.n = 12};
			int64_t res;
			if (cbcmn_runtime_run(rt, fib_task, &f, &res))
				_exit(2);
			if (round == 0 && write(p[1], "r", 1) != 1)
				_exit(3);
			if (!busy)
				pause();
			usleep(2000);
		}
	}
	close(p[1]);
	char c;
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	target_map(t);
}

/* Our mapping of t->pid's rings, read-write (as a watcher's): the memfd
 * of that name the process made (it may hold others' open, as this suite
 * does while it watches a child). */
static void target_map(struct target *t)
{
	int *fds = NULL;
	uint32_t n = 0;
	assert_int_equal(cbcmn__memfd_fds(t->pid, CBCMN__TSEG_NAME, &fds, &n), 0);
	t->h = NULL;
	for (uint32_t i = 0; i < n && !t->h; i++) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)t->pid, fds[i]);
		t->fd = open(path, O_RDWR | O_CLOEXEC);
		assert_true(t->fd >= 0);
		struct stat st;
		assert_int_equal(fstat(t->fd, &st), 0);
		t->size = (size_t)st.st_size;
		t->h = mmap(NULL, t->size, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
		assert_true(t->h != MAP_FAILED);
		if (t->h->pid != t->pid) {
			munmap(t->h, t->size);
			close(t->fd);
			t->h = NULL;
		}
	}
	free(fds);
	assert_non_null(t->h);
}

static struct cbcmn__trace_ring *target_ring(struct target *t, uint32_t i)
{
	return (struct cbcmn__trace_ring *)((char *)t->h + t->h->rings_off + t->h->ring_stride * i);
}

static void target_stop(struct target *t)
{
	kill(t->pid, SIGKILL);
	waitpid(t->pid, NULL, 0);
	munmap(t->h, t->size);
	close(t->fd);
}

/* cbcmn-top -p of the target for n samples (0: until it ends),
 * recording into trace. */
static void record_pid_n(struct target *t, const char *n, const char *trace, struct toolrun *r)
{
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)t->pid);
	const char *argv[] = {"cbcmn-top", "-b", "--no-bpf", "-d", "0.1", "-n", n,
			      "--record", trace, "-p", pid, NULL};
	toolrun(r, argv, 60);
	printf("    -p: status %d %s", r->status, r->err);
}

static void record_pid(struct target *t, const char *trace, struct toolrun *r)
{
	record_pid_n(t, "3", trace, r);
}

/* The trace a -p recording wrote is whole (events_py "whole"); then the
 * run's output and the file go. */
static void whole_and_done(char *trace, struct toolrun *r, const char *label)
{
	const char *args[] = {trace, "-", "whole", "-", NULL};
	pycheck(events_py, args, label);
	free(r->out);
	unlink(trace);
}

/* The rings' tails, summed: how many events the target recorded. */
static uint64_t target_tails(struct target *t)
{
	uint64_t sum = 0;
	for (uint32_t i = 0; i < t->h->nexec; i++)
		sum += atomic_load(&target_ring(t, i)->tail) + atomic_load(&target_ring(t, i)->dropped);
	return sum;
}

/* CBCMN_TRACE_EVENTS=N:lazy: a busy target records nothing (no clock
 * read, the sites one flag test) until a recorder attaches, then its
 * events come, and when the recorder leaves it stops again. */
static void test_lazy_rings_record_only_while_a_recorder_is_attached(void **state)
{
	(void)state;
	struct target t;
	target_start(&t, "65536:lazy", true, 0);
	usleep(100000);
	assert_int_equal(atomic_load(&t.h->holds), 0);
	assert_int_equal(target_tails(&t), 0);
	char trace[] = "/tmp/cbcmn-toprec-lazy-XXXXXX";
	scratch(trace);
	struct toolrun r;
	record_pid(&t, trace, &r);
	assert_int_equal(r.status, 0);
	uint64_t after = target_tails(&t);
	assert_int_equal(atomic_load(&t.h->holds), 0); /* let go */
	usleep(100000);
	uint64_t later = target_tails(&t);
	target_stop(&t);
	printf("    recorded %llu events while attached, %llu after\n", (unsigned long long)after,
	       (unsigned long long)(later - after));
	assert_true(after > 0);
	assert_true(later - after <= 2 * 3); /* a slice or two under way per executor as it left */
	whole_and_done(trace, &r, "lazy");
}

/* Wait up to ms for t's holds to be want; the holds then. */
static uint32_t holds_become(struct target *t, uint32_t want, unsigned ms)
{
	uint64_t end = t_now_ns() + ms * 1000000ull;
	uint32_t h;
	while ((h = atomic_load(&t->h->holds)) != want && t_now_ns() < end)
		usleep(10000);
	return h;
}

/* A recorder killed (-9) while attached to a lazy target: its hold ends
 * with the lease (trace_seg.h) once the rings are full, and the target
 * stops recording.  It kept recording for ever before. */
static void test_lazy_rings_of_a_recorder_killed_stop_recording(void **state)
{
	(void)state;
	struct target t;
	target_start(&t, "64:lazy", true, 0);
	int p[2];
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid_t rec = fork();
	assert_true(rec >= 0);
	if (rec == 0) {
		struct cbcmn__tsw *w;
		if (cbcmn__tsw_open(t.pid, t.h->rt_id, &w) != 0)
			_exit(1);
		cbcmn_trace_event ev[64];
		struct cbcmn__tsw_stat st = {0};
		(void)cbcmn__tsw_drain(w, ev, 64, &st);
		if (write(p[1], "a", 1) != 1)
			_exit(2);
		pause(); /* attached until killed */
	}
	close(p[1]);
	char c;
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	assert_int_equal(atomic_load(&t.h->holds), 1);
	kill(rec, SIGKILL);
	waitpid(rec, NULL, 0);
	/* The lease (1 s) from when each ring is full, under load. */
	uint32_t h = holds_become(&t, 0, 15000);
	uint64_t before = target_tails(&t);
	usleep(100000);
	uint64_t after = target_tails(&t);
	target_stop(&t);
	printf("    holds %u after the recorder died; %llu events in 0.1 s after\n", h,
	       (unsigned long long)(after - before));
	assert_int_equal(h, 0);
	assert_true(after - before <= 2 * 3); /* a slice under way per executor */
}

/* A live recorder keeps its hold past the lease while it drains; one
 * stopped past it (^Z) loses it, and takes it again at its next drain,
 * which counts the lapse; its close lets go of it. */
static void test_lazy_rings_hold_of_a_live_recorder_lasts_and_comes_back(void **state)
{
	(void)state;
	struct target t;
	target_start(&t, "64:lazy", true, 0);
	struct cbcmn__tsw *w;
	assert_int_equal(cbcmn__tsw_open(t.pid, t.h->rt_id, &w), 0);
	cbcmn_trace_event ev[256];
	struct cbcmn__tsw_stat st = {0};
	uint32_t low = 1;
	for (uint64_t end = t_now_ns() + 2 * CBCMN__TSEG_LEASE_NS; t_now_ns() < end;) {
		(void)cbcmn__tsw_drain(w, ev, 256, &st);
		uint32_t h = atomic_load(&t.h->holds);
		low = h < low ? h : low;
		usleep(5000);
	}
	uint32_t lapses_draining = st.lapses;
	uint32_t stopped = holds_become(&t, 0, 15000);
	(void)cbcmn__tsw_drain(w, ev, 256, &st);
	uint32_t back = atomic_load(&t.h->holds);
	/* The lapse is said: the events while our hold was ended are in no
	 * count, the rings' dropped included (a lazy target records none). */
	uint32_t lapses = st.lapses;
	(void)cbcmn__tsw_drain(w, ev, 256, &st);
	uint32_t lapses_later = st.lapses;
	cbcmn__tsw_close(w);
	uint32_t closed = atomic_load(&t.h->holds);
	target_stop(&t);
	printf("    holds: %u at least while draining, %u stopped, %u back, %u closed\n", low,
	       stopped, back, closed);
	assert_int_equal(low, 1);
	assert_int_equal(stopped, 0);
	assert_int_equal(back, 1);
	assert_int_equal(closed, 0);
	assert_int_equal(lapses_draining, 0);
	assert_int_equal(lapses, 1);
	assert_int_equal(lapses_later, 1);
}

/* Our child running cbcmn-top, found in /proc (toolrun hides its pid),
 * within ms; 0 if none. */
static pid_t top_child(unsigned ms)
{
	for (uint64_t end = t_now_ns() + ms * 1000000ull; t_now_ns() < end; usleep(10000)) {
		DIR *d = opendir("/proc");
		assert_non_null(d);
		pid_t found = 0;
		for (struct dirent *e; !found && (e = readdir(d));) {
			char path[300], buf[256];
			snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
			FILE *f = e->d_name[0] >= '1' && e->d_name[0] <= '9' ? fopen(path, "r") : NULL;
			if (!f)
				continue;
			size_t n = fread(buf, 1, sizeof(buf) - 1, f);
			fclose(f);
			buf[n] = 0;
			int ppid;
			char *rp = strrchr(buf, ')');
			if (strstr(buf, "(cbcmn-top)") && rp && sscanf(rp + 2, "%*c %d", &ppid) == 1 &&
			    ppid == getpid())
				found = atoi(e->d_name);
		}
		closedir(d);
		if (found)
			return found;
	}
	return 0;
}

struct stopper {
	struct target *t;
	uint32_t holds_stopped;
	pid_t top;
};

/* Stop the recording cbcmn-top once attached until the target's lease
 * ended its hold, then let it go on. */
static void *stop_the_recorder(void *arg)
{
	struct stopper *s = arg;
	if (holds_become(s->t, 1, 15000) != 1 || !(s->top = top_child(5000)))
		return NULL;
	kill(s->top, SIGSTOP);
	s->holds_stopped = holds_become(s->t, 0, 15000);
	kill(s->top, SIGCONT);
	return NULL;
}

/* cbcmn-top --record stopped past the lease of a lazy target: the
 * target recorded nothing, not even drops, until its next drain; the
 * trace says it (otherData's hold_lapses, not complete, a line on
 * stderr).  Before, it only counted the drops before the lease ended,
 * as if they were all that was lost. */
static void test_record_stopped_past_the_lease_says_so(void **state)
{
	(void)state;
	struct target t;
	target_start(&t, "64:lazy", true, 0);
	char trace[] = "/tmp/cbcmn-toprec-lapse-XXXXXX";
	scratch(trace);
	struct stopper s = {.t = &t, .holds_stopped = 99};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, stop_the_recorder, &s), 0);
	struct toolrun r;
	record_pid_n(&t, "20", trace, &r);
	pthread_join(th, NULL);
	target_stop(&t);
	assert_int_equal(r.status, 0);
	assert_true(s.top > 0);
	assert_int_equal(s.holds_stopped, 0);
	if (!strstr(r.err, "recording stopped 1 time (we drained too seldom"))
		fail_msg("stderr: %s", r.err);
	static const char lapse_py[] =
		PY_TRACE_OPEN
		"if od.get('hold_lapses') != 1 or od['complete']: fail('%r' % (od,))\n"
		"print('ok', od['events'], 'events', od['dropped'], 'dropped, 1 lapse')\n";
	const char *args[] = {trace, NULL};
	pycheck(lapse_py, args, "lapse");
	free(r.out);
	unlink(trace);
}

/* A recorder whose hold the lease ended (stopped, never drained again)
 * leaves at its close the hold of a recorder attached since: it is not
 * its own to let go (and holds never goes below the runtime's part). */
static void test_lazy_rings_close_of_an_expired_recorder_keeps_anothers_hold(void **state)
{
	(void)state;
	struct target t;
	target_start(&t, "64:lazy", true, 0);
	struct cbcmn__tsw *stale, *live;
	assert_int_equal(cbcmn__tsw_open(t.pid, t.h->rt_id, &stale), 0);
	uint32_t expired = holds_become(&t, 0, 15000);
	assert_int_equal(cbcmn__tsw_open(t.pid, t.h->rt_id, &live), 0);
	cbcmn__tsw_close(stale);
	uint32_t kept = atomic_load(&t.h->holds);
	cbcmn__tsw_close(live);
	uint32_t closed = atomic_load(&t.h->holds);
	target_stop(&t);
	printf("    holds: %u expired, %u after the stale close, %u after the live one\n", expired,
	       kept, closed);
	assert_int_equal(expired, 0);
	assert_int_equal(kept, 1);
	assert_int_equal(closed, 0);
}

/* The lease ends while a recorder closes, between its disarm's test of
 * expired and its exchange, and another recorder takes its hold again
 * meanwhile (the pause point holds the closing one there): the close
 * must leave that hold.  Before, it took it, and the live recorder's
 * target stopped recording for good (its beats saw no expiry). */
struct disarm_race {
	struct target *t;
	struct cbcmn__tsw *live;
	uint32_t expired;  /* holds once the lease ended, in the pause */
	uint32_t retaken;  /* holds once the live recorder drained again */
};
static struct disarm_race *dr; /* for the pause hook */

static void disarm_pause(enum cbcmn__pause_point pt, void *exec)
{
	(void)exec;
	if (pt != CBCMN__P_TSW_DISARM || !dr)
		return;
	cbcmn_trace_event ev[64];
	struct cbcmn__tsw_stat st = {0};
	dr->expired = holds_become(dr->t, 0, 15000);
	(void)cbcmn__tsw_drain(dr->live, ev, 64, &st);
	dr->retaken = atomic_load(&dr->t->h->holds);
	dr = NULL; /* once */
}

static void test_lazy_rings_close_racing_the_lease_keeps_anothers_retaken_hold(void **state)
{
	(void)state;
	if (!cbcmn__pause_set(NULL)) {
		T_SKIP("pause points need a CBCMN_FAULTS build (make SAN=asan or tsan)");
		return;
	}
	struct target t;
	target_start(&t, "64:lazy", true, 0);
	struct cbcmn__tsw *closing, *live;
	assert_int_equal(cbcmn__tsw_open(t.pid, t.h->rt_id, &closing), 0);
	assert_int_equal(cbcmn__tsw_open(t.pid, t.h->rt_id, &live), 0);
	struct disarm_race d = {.t = &t, .live = live, .expired = 99, .retaken = 99};
	dr = &d;
	cbcmn__pause_set(disarm_pause);
	cbcmn__tsw_close(closing);
	cbcmn__pause_set(NULL);
	uint32_t kept = atomic_load(&t.h->holds);
	cbcmn__tsw_close(live);
	uint32_t closed = atomic_load(&t.h->holds);
	target_stop(&t);
	printf("    holds: %u expired, %u retaken, %u after the racing close, %u after the live one\n",
	       d.expired, d.retaken, kept, closed);
	assert_int_equal(d.expired, 0);
	assert_int_equal(d.retaken, 1);
	assert_int_equal(kept, 1);
	assert_int_equal(closed, 0);
}

/* A target killed while recorded (SIGALRM, 0.6 s in): the recording ends
 * with it, status 0, the file whole, with what its rings held then (our
 * mapping keeps them). */
static void test_record_pid_of_a_target_killed_meanwhile_is_whole(void **state)
{
	(void)state;
	struct target t;
	target_start(&t, "65536", true, 600);
	char trace[] = "/tmp/cbcmn-toprec-die-XXXXXX";
	scratch(trace);
	struct toolrun r;
	record_pid_n(&t, "0", trace, &r);
	int st;
	assert_int_equal(waitpid(t.pid, &st, 0), t.pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM);
	munmap(t.h, t.size);
	close(t.fd);
	assert_int_equal(r.status, 0);
	static const char die_py[] =
		PY_TRACE_OPEN
		"if not od['ended'] or od['events'] == 0 or od['corrupt_rings']: fail('%r' % (od,))\n"
		"print('ok', od['events'], 'events')\n";
	const char *args[] = {trace, NULL};
	pycheck(die_py, args, "killed");
	whole_and_done(trace, &r, "killed, whole");
}

/* A running target, recorded with -p: its events as they come, whole
 * (its earlier ones too: what its rings held when we came). */
static void test_record_pid_of_a_target_with_rings(void **state)
{
	(void)state;
	struct target t;
	target_start(&t, "65536", true, 0);
	char trace[] = "/tmp/cbcmn-toprec-pid-XXXXXX";
	scratch(trace);
	struct toolrun r;
	record_pid(&t, trace, &r);
	target_stop(&t);
	assert_int_equal(r.status, 0);
	whole_and_done(trace, &r, "-p");
}

/* A hostile or broken target: the head of a ring beyond its tail (tail -
 * head, unsigned, past the capacity), a record of no known kind, a steal
 * from an executor that does not exist, and then a header whose geometry
 * would send reads outside the segment.  Each time one line, status 1, a
 * whole file; never a crash, a hang, or the bogus records in the file. */
static void test_record_of_a_corrupt_ring_is_one_line(void **state)
{
	(void)state;
	struct target t;
	target_start(&t, "64", false, 0); /* fib(12) fills a ring of 64; then idle */
	/* One ring's first records made bogus: one that has two (fib's 465
	 * tasks fill one ring at least; under load either executor may have
	 * run them all); the other ring's head put beyond its tail. */
	uint32_t b = atomic_load(&target_ring(&t, 0)->tail) >= 2 ? 0 : 1, c = 1 - b;
	struct cbcmn__trace_ring *r0 = target_ring(&t, b), *r1 = target_ring(&t, c);
	uint64_t tail1 = atomic_load(&r1->tail);
	atomic_store(&r1->head, tail1 + 1000);
	uint64_t head0 = atomic_load(&r0->head), tail0 = atomic_load(&r0->tail);
	if (tail0 - head0 < 2)
		fail_msg("ring %u: head %llu tail %llu; ring %u: tail %llu", b,
			 (unsigned long long)head0, (unsigned long long)tail0, c,
			 (unsigned long long)tail1);
	r0->rec[head0 & 63].kind = 99;
	r0->rec[(head0 + 1) & 63].kind = CBCMN_TRACE_STEAL;
	r0->rec[(head0 + 1) & 63].peer = 1u << 30;
	char trace[] = "/tmp/cbcmn-toprec-bad-XXXXXX";
	scratch(trace);
	struct toolrun r;
	record_pid(&t, trace, &r);
	assert_int_equal(r.status, 1);
	assert_one_line(r.err);
	char says[64], tid[16];
	snprintf(says, sizeof(says), "trace ring of executor %u is corrupt", c);
	if (!strstr(r.err, says))
		fail_msg("stderr: %s", r.err);
	static const char bad_py[] =
		PY_TRACE_OPEN
		"if od['corrupt_rings'] != 1 or od['invalid'] != 2 or od['complete']: fail('%r' % (od,))\n"
		"if any(e.get('tid') == int(sys.argv[2]) and e['ph'] in 'Xi' for e in ev):\n"
		"    fail('events of the corrupt ring')\n"
		"print('ok', od['events'], 'events')\n";
	snprintf(tid, sizeof(tid), "%u", c + 1);
	const char *args[] = {trace, tid, NULL};
	pycheck(bad_py, args, "corrupt ring");
	free(r.out);

	/* The header: rings past the end of the segment. */
	t.h->ring_stride = 1ull << 39;
	record_pid(&t, trace, &r);
	target_stop(&t);
	assert_int_equal(r.status, 1);
	assert_one_line(r.err);
	if (!strstr(r.err, "header is corrupt"))
		fail_msg("stderr: %s", r.err);
	static const char hdr_py[] =
		PY_TRACE_OPEN
		"if od['source_events'] != 'none' or 'corrupt' not in od['events_off']: fail('%r' % (od,))\n"
		"print('ok, samples only:', od['samples'])\n";
	pycheck(hdr_py, args, "corrupt header");
	free(r.out);
	unlink(trace);
}

/* The target's own drain (cbcmn_trace_drain) of a ring whose head a
 * watcher with write access made impossible (beyond the tail): it took
 * as many stale records as it was asked for, again and again (head ran
 * on from its bogus value, and the executor, seeing the ring full,
 * dropped every new event).  Now the ring is skipped to its tail, and
 * records again. */
static void test_own_drain_of_a_ring_a_watcher_corrupted_goes_on_from_its_tail(void **state)
{
	(void)state;
	setenv("CBCMN_TRACE_EVENTS", "64", 1);
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 1;
	c.flags = CBCMN_CONFIG_NO_INLINE;
	cbcmn_runtime *rt = t_runtime_cfg(&c);
	unsetenv("CBCMN_TRACE_EVENTS");
	struct fib f = {.n = 4};
	t_run(rt, fib_task, &f, 0);
	struct target t = {.pid = getpid()};
	target_map(&t);
	struct cbcmn__trace_ring *r0 = target_ring(&t, 0);
	uint64_t tail = atomic_load(&r0->tail);
	assert_true(tail > 0);
	atomic_store(&r0->head, tail + 1000);
	static cbcmn_trace_event ev[4096];
	int n = cbcmn_trace_drain(rt, ev, 4096, NULL);
	printf("    the drain of the corrupt ring: %d events\n", n);
	assert_int_equal(n, 0);
	assert_int_equal(atomic_load(&r0->head), atomic_load(&r0->tail));
	f.n = 4; /* 9 tasks */
	t_run(rt, fib_task, &f, 0);
	n = cbcmn_trace_drain(rt, ev, 4096, NULL);
	assert_true(n >= 9 && n <= 64);
	uint64_t tasks = 0;
	for (int i = 0; i < n; i++)
		tasks += ev[i].kind == CBCMN_TRACE_TASK;
	assert_true(tasks >= 9);
	munmap(t.h, t.size);
	close(t.fd);
	cbcmn_runtime_destroy(rt);
}

/* CBCMN_TRACE_EVENTS that is not a count (up to 2^24, optionally
 * ":lazy"): the create fails with -EINVAL and one line, as a bad
 * CBCMN_BACKEND does; empty or 0: no rings, a runtime as without it. */
/* The create with CBCMN_TRACE_EVENTS=v fails with -EINVAL and one line. */
static void refused_variable(const char *v)
{
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 1;
	setenv("CBCMN_TRACE_EVENTS", v, 1);
	int saved;
	int fd = t_stderr_capture(&saved);
	cbcmn_runtime *rt = NULL;
	int rc = cbcmn_runtime_create(&c, &rt);
	char err[512];
	t_stderr_restore(fd, saved, err, sizeof(err));
	unsetenv("CBCMN_TRACE_EVENTS");
	printf("    \"%s\": %d %s", v, rc, err);
	if (rt)
		cbcmn_runtime_destroy(rt);
	assert_int_equal(rc, -EINVAL);
	assert_null(rt);
	assert_one_line(err);
	assert_non_null(strstr(err, "CBCMN_TRACE_EVENTS"));
}

static void test_bad_trace_events_variable_fails_the_create(void **state)
{
	(void)state;
	static const char *const bad[] = {"12x", "-1", "16777217", "64:lazyx", ":lazy", "64:"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		refused_variable(bad[i]);
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 1;
	static const char *const none[] = {"", "0", "0:lazy"};
	for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
		setenv("CBCMN_TRACE_EVENTS", none[i], 1);
		cbcmn_runtime *rt = t_runtime_cfg(&c);
		cbcmn_trace_event ev[1];
		assert_int_equal(cbcmn_trace_drain(rt, ev, 1, NULL), -EOPNOTSUPP); /* no rings */
		cbcmn_runtime_destroy(rt);
	}
	unsetenv("CBCMN_TRACE_EVENTS");
}

/* strtoull passes leading blanks and a sign over: " 64" and "+64" made
 * rings (" -0" none) while "64 " was refused. */
static void test_trace_events_variable_with_blanks_or_a_sign_fails_the_create(void **state)
{
	(void)state;
	static const char *const bad[] = {" 64", "+64", "\t64:lazy", " -0"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		refused_variable(bad[i]);
}

/* In a child under a limit the rings are over: a runtime of one executor
 * made with CBCMN_TRACE_EVENTS=events goes on without shared rings (its
 * own drain: -EOPNOTSUPP).  The child's exit status: 0 if so. */
static int create_without_rings(const char *events)
{
	setenv("CBCMN_TRACE_EVENTS", events, 1);
	cbcmn_config c;
	cbcmn_config_init(&c);
	c.workers = 1;
	cbcmn_runtime *rt;
	if (cbcmn_runtime_create(&c, &rt))
		return 21;
	cbcmn_trace_event ev[1];
	int rc = cbcmn_trace_drain(rt, ev, 1, NULL); /* no rings */
	cbcmn_runtime_destroy(rt);
	return rc == -EOPNOTSUPP ? 0 : 22;
}

/* A runtime made under a file size limit (ulimit -f) smaller than its
 * rings' memfd: ftruncate past RLIMIT_FSIZE raises SIGXFSZ, whose default
 * action killed the program in cbcmn_runtime_create (cbcmn-top --record
 * gives a command 2 MiB per executor).  Now the create goes on without
 * shared rings, as where memfds are refused, and says so in one line. */
static void test_trace_rings_over_the_file_size_limit_do_not_kill_the_program(void **state)
{
	(void)state;
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = {1 << 20, 1 << 20}; /* the rings: 2 MiB */
		if (setrlimit(RLIMIT_FSIZE, &rl))
			_exit(20);
		_exit(create_without_rings("65536"));
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		fail_msg("the program was killed by signal %d (SIGXFSZ %d)", WTERMSIG(st), SIGXFSZ);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* Rings the address space limit (ulimit -v) cannot map: the runtime goes
 * on without them, as over the file size limit, and says so in one line.
 * It said nothing, and cbcmn-top --record, finding no rings, told the user
 * to start the target with CBCMN_TRACE_EVENTS, which it had been.  Not
 * under a sanitizer, whose shadow memory wants the address space. */
static long vm_size(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	long kib = -1;
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "VmSize:", 7) == 0)
			kib = atol(line + 7);
	if (f)
		fclose(f);
	return kib;
}

static void test_trace_rings_over_the_address_space_limit_are_one_line(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) {
		T_SKIP("a sanitizer's shadow memory wants more address space than the limit");
		return;
	}
	char errf[] = "/tmp/cbcmn-toprec-as-XXXXXX";
	int efd = mkstemp(errf);
	assert_true(efd >= 0);
	unlink(errf);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Room for a runtime of one executor (its thread's stack and
		 * malloc arena), not for its 512 MiB ring. */
		long kib = vm_size();
		struct rlimit rl = {(rlim_t)(kib + (384l << 10)) << 10, (rlim_t)(kib + (384l << 10)) << 10};
		if (kib < 0 || dup2(efd, 2) < 0 || setrlimit(RLIMIT_AS, &rl))
			_exit(20);
		_exit(create_without_rings("16777216"));
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	char err[512] = "";
	ssize_t n = pread(efd, err, sizeof(err) - 1, 0);
	close(efd);
	err[n > 0 ? n : 0] = 0;
	printf("    status %d, stderr: %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, err);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	if (!strstr(err, "CBCMN_TRACE_EVENTS") || !strstr(err, "not shared"))
		fail_msg("the rings were dropped without a word: stderr '%s'", err);
	assert_non_null(strchr(err, '\n'));
	assert_null(strchr(strchr(err, '\n') + 1, '\n'));
}

/* Bad input: one line, status st, and the command (which would create
 * its marker file) never started. */
static void refused(const char *record, const char *output, int st, const char *says)
{
	char marker[] = "/tmp/cbcmn-toprec-marker-XXXXXX";
	int fd = mkstemp(marker);
	assert_true(fd >= 0);
	close(fd);
	unlink(marker);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "touch %s", marker);
	const char *argv[12] = {"cbcmn-top", "-b", "--no-bpf", "--record", record};
	size_t n = 5;
	if (output) {
		argv[n++] = "-o";
		argv[n++] = output;
	}
	argv[n++] = "--";
	argv[n++] = "/bin/sh";
	argv[n++] = "-c";
	argv[n++] = cmd;
	struct toolrun r;
	toolrun(&r, argv, 30);
	printf("    --record '%s': status %d, %s", record, r.status, r.err);
	assert_int_equal(r.status, st);
	assert_one_line(r.err);
	if (!strstr(r.err, says))
		fail_msg("want '%s' in '%s'", says, r.err);
	assert_int_equal(access(marker, F_OK), -1); /* not started */
	free(r.out);
}

static void test_record_bad_input(void **state)
{
	(void)state;
	refused("/nonexistent-dir/x.json", NULL, 1, "No such file or directory");
	refused("/tmp", NULL, 1, "Is a directory");
	refused("", NULL, 2, "--record wants a file name");
	char same[] = "/tmp/cbcmn-toprec-same-XXXXXX";
	int fd = mkstemp(same);
	assert_true(fd >= 0);
	close(fd);
	refused(same, same, 1, "the same file as -o");
	unlink(same);
	/* As a user who may not write there (root writes anywhere). */
	if (geteuid() != 0)
		refused("/proc/version", NULL, 1, "/proc/version");
}

/* --record and -o naming one file: refused, and the file as it was.  The
 * trace was opened (truncated, then given a trace's header and end) before
 * the names were compared: the refusal came after the file was lost. */
static void test_record_refused_as_the_same_file_as_o_leaves_it_intact(void **state)
{
	(void)state;
	char same[] = "/tmp/cbcmn-toprec-keep-XXXXXX";
	int fd = mkstemp(same);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "keep me\n", 8), 8);
	close(fd);
	refused(same, same, 1, "the same file as -o");
	/* And a file that does not exist yet, named two ways: the same file
	 * once the trace has made it. */
	char fresh[] = "/tmp/cbcmn-toprec-new-XXXXXX", alias[64];
	fd = mkstemp(fresh);
	assert_true(fd >= 0);
	close(fd);
	unlink(fresh);
	snprintf(alias, sizeof(alias), "/tmp/./%s", fresh + 5);
	refused(fresh, alias, 1, "the same file as -o");
	unlink(fresh);
	char buf[64] = {0};
	FILE *f = fopen(same, "r");
	assert_non_null(f);
	size_t got = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	unlink(same);
	assert_int_equal(got, 8);
	assert_string_equal(buf, "keep me\n");
}

/* A write that fails (a full disk): one line at the end, status 1. */
static void test_record_full_disk(void **state)
{
	(void)state;
	if (!runner[0] || access("/dev/full", W_OK)) {
		T_SKIP("needs cbcmn-run built and /dev/full");
		return;
	}
	const char *argv[] = {"cbcmn-top", "-b", "--no-bpf", "-d", "0.1", "--record", "/dev/full",
			      "--", runner, "skew", "--workers", "2", "--duration", "0.2", NULL};
	struct toolrun r;
	toolrun(&r, argv, 60);
	printf("    status %d, %s", r.status, r.err);
	assert_int_equal(r.status, 1);
	if (!strstr(r.err, "cbcmn-top: --record /dev/full: writing the trace failed"))
		fail_msg("stderr: %s", r.err);
	free(r.out);
}

/* A trace past the file size limit (ulimit -f): a write that fails, as
 * on a full disk, one line and status 1.  SIGXFSZ's default action killed
 * cbcmn-top in the middle of a write (status 128 + SIGXFSZ, no line, a
 * trace cut short, the started command left to its parent-death signal).
 * Small rings (CBCMN_TRACE_EVENTS=64: 12 KiB, under the limit the command
 * inherits) give events faster than a few samples' output grows. */
static void test_record_over_the_file_size_limit_is_one_line(void **state)
{
	(void)state;
	if (!runner[0]) {
		T_SKIP("cbcmn-run is not built beside this suite (make tools)");
		return;
	}
	char trace[] = "/tmp/cbcmn-toprec-fsize-XXXXXX";
	int fd = mkstemp(trace);
	assert_true(fd >= 0);
	close(fd);
	const char *argv[] = {"cbcmn-top", "-b", "--no-bpf", "-d", "0.1", "--record", trace,
			      "--", runner, "skew", "--workers", "2", "--duration", "0.5", NULL};
	const rlim_t limit = 16 << 10;
	setenv("CBCMN_TRACE_EVENTS", "64", 1);
	struct toolrun r;
	bool ran = toolrun_fsize(&r, argv, 60, limit);
	unsetenv("CBCMN_TRACE_EVENTS");
	if (!ran) {
		unlink(trace);
		return;
	}
	struct stat st;
	assert_int_equal(stat(trace, &st), 0);
	unlink(trace);
	printf("    status %d, trace %lld bytes, %s", r.status, (long long)st.st_size, r.err);
	if (r.status == 128 + SIGXFSZ)
		fail_msg("killed by SIGXFSZ, the trace cut at %lld bytes", (long long)st.st_size);
	assert_int_equal(r.status, 1);
	assert_true(st.st_size <= (off_t)limit);
	if (!strstr(r.err, "writing the trace failed"))
		fail_msg("stderr: %s", r.err);
	free(r.out);
}

/* The kernel keeps 15 bytes of a program's name (/proc/PID/comm), cutting
 * a UTF-8 character in two: the trace named the target's process with
 * that half character as it was, a file that is not JSON to a strict
 * reader (JSON is UTF-8; Python's decoder refuses it). */
static const char utf8_py[] =
	"import json, sys\n"
	"tr = json.loads(open(sys.argv[1], 'rb').read().decode('utf-8'))\n"
	"name = [e for e in tr['traceEvents'] if e.get('name') == 'process_name'][0]['args']['name']\n"
	"if not name.startswith('\\u00e9' * 7): print('FAIL name %r' % name); sys.exit(1)\n"
	"print('ok', repr(name))\n";

static void test_record_of_a_target_whose_name_the_kernel_cut_is_utf8(void **state)
{
	(void)state;
	if (!runner[0]) {
		T_SKIP("cbcmn-run is not built beside this suite (make tools)");
		return;
	}
	char dir[] = "/tmp/cbcmn-toprec-name-XXXXXX", trace[] = "/tmp/cbcmn-toprec-XXXXXX";
	assert_non_null(mkdtemp(dir));
	int fd = mkstemp(trace);
	assert_true(fd >= 0);
	close(fd);
	/* Nine e-acute, 18 bytes: comm holds seven and half of the eighth. */
	char link[PATH_MAX];
	snprintf(link, sizeof(link), "%s/%s", dir,
		 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
	assert_int_equal(symlink(runner, link), 0);
	const char *argv[] = {"cbcmn-top", "-b", "--no-bpf", "-d", "0.1", "--record", trace, "--",
			      link, "skew", "--workers", "2", "--duration", "0.3", NULL};
	struct toolrun r;
	toolrun(&r, argv, 60);
	unlink(link);
	rmdir(dir);
	if (r.status != 0)
		fail_msg("status %d: %s", r.status, r.err);
	const char *args[] = {trace, NULL};
	pycheck(utf8_py, args, "name");
	free(r.out);
	unlink(trace);
}

/* ---- the claim and the segment's opening, interleaved by hand ------------------------ */

/* A consumer read head, then (a page fault later) tail: meanwhile another
 * consumer took the ring's records and the executor wrote it full again.
 * tail - head (the stale head) is then above the capacity, which the
 * claim took for a corrupt ring: cbcmn-top left that executor's events
 * out for the rest of the recording and exited 1 saying the target's ring
 * was corrupt.  The interleaving: the ring laid across two pages, tail on
 * the first, which faults; the handler plays the other consumer and the
 * executor. */
static struct cbcmn__trace_ring *race_ring;
static char *race_page;
static size_t race_pg;

static void race_segv(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	char *a = si->si_addr;
	if (a < race_page || a >= race_page + race_pg) {
		signal(sig, SIG_DFL); /* not ours: crash as it would */
		return;
	}
	(void)mprotect(race_page, race_pg, PROT_READ | PROT_WRITE);
	/* The other consumer took records 0 and 1; the executor wrote 2, 3. */
	atomic_store(&race_ring->head, 2);
	for (uint64_t i = 2; i < 4; i++)
		race_ring->rec[i & 1] = (struct cbcmn__trace_rec){.ts = 100 + i, .arg = 10 + i,
								   .kind = CBCMN_TRACE_TASK};
	atomic_store(&race_ring->tail, 4);
}

static void test_take_of_a_ring_emptied_and_refilled_meanwhile_is_not_corrupt(void **state)
{
	(void)state;
	race_pg = (size_t)sysconf(_SC_PAGESIZE);
	char *base = mmap(NULL, 2 * race_pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	assert_true(base != MAP_FAILED);
	/* tail on the first page's last line, head and the records on the second. */
	race_page = base;
	race_ring = (struct cbcmn__trace_ring *)(base + race_pg - 64);
	assert_true((char *)&race_ring->head >= base + race_pg);
	for (uint64_t i = 0; i < 2; i++)
		race_ring->rec[i] = (struct cbcmn__trace_rec){.ts = 100 + i, .arg = 10 + i,
							      .kind = CBCMN_TRACE_TASK};
	atomic_store(&race_ring->head, 0);
	atomic_store(&race_ring->tail, 2); /* full: a capacity of 2 */
	struct sigaction sa = {.sa_sigaction = race_segv, .sa_flags = SA_SIGINFO}, old;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGSEGV, &sa, &old), 0);
	assert_int_equal(mprotect(race_page, race_pg, PROT_NONE), 0);
	cbcmn_trace_event ev[4];
	uint64_t head = 0, tail = 0;
	int n = cbcmn__trace_take(race_ring, 1, 0, ev, 4, &head, &tail);
	sigaction(SIGSEGV, &old, NULL);
	printf("    take: %d (head %llu, tail %llu)\n", n, (unsigned long long)head,
	       (unsigned long long)tail);
	assert_int_equal(n, 2);
	assert_int_equal(ev[0].arg, 12);
	assert_int_equal(ev[1].arg, 13);
	assert_int_equal(atomic_load(&race_ring->head), 4);
	munmap(base, 2 * race_pg);
}

/* A hostile target shrinks its memfd and only then seals it, between the
 * watcher's look at the size and its look at the seals: the watcher
 * believed the old size, mapped the rings it described, and its first read
 * past the new end was a SIGBUS.  Played here by fstatfs (called between
 * the two), ours in this program: on the armed file it shrinks and seals. */
static int shrink_ino_fd = -1;

int fstatfs(int fd, struct statfs *buf)
{
	struct stat a, b;
	if (shrink_ino_fd >= 0 && fstat(fd, &a) == 0 && fstat(shrink_ino_fd, &b) == 0 &&
	    a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
		int f = shrink_ino_fd;
		shrink_ino_fd = -1;
		if (ftruncate(f, 4096) != 0 ||
		    fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
			return -1;
	}
	return (int)syscall(SYS_fstatfs, fd, buf);
}

static void test_rings_of_a_memfd_shrunk_before_its_seals_are_not_mapped(void **state)
{
	(void)state;
	int fd = memfd_create(CBCMN__TSEG_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(fd >= 0);
	size_t size = 1 << 20;
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	struct cbcmn__tseg_hdr *h = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(h != MAP_FAILED);
	/* A header whose one ring fills the megabyte. */
	const uint32_t rt_id = 0x5eed1e55u;
	h->version = CBCMN__TSEG_VERSION;
	h->hdr_size = sizeof(*h);
	h->rec_size = sizeof(struct cbcmn__trace_rec);
	h->nexec = 1;
	h->cap = 16384;
	h->rt_id = rt_id;
	h->rings_off = 4096;
	h->ring_stride = size - 4096;
	h->pid = cbcmn__own_pid(getpid());
	atomic_store(&h->magic, CBCMN__TSEG_MAGIC);
	munmap(h, 4096);
	shrink_ino_fd = fd;
	struct cbcmn__tsw *w = NULL;
	int rc = cbcmn__tsw_open(getpid(), rt_id, &w);
	shrink_ino_fd = -1;
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	printf("    open: %d, the file now %lld bytes\n", rc, (long long)st.st_size);
	assert_int_equal(st.st_size, 4096); /* the hook ran */
	if (rc == 0) {
		cbcmn__tsw_close(w);
		fail_msg("1 MiB of rings mapped over a file of 4 KiB: the drain would SIGBUS");
	}
	assert_int_equal(rc, -EBADMSG);
	close(fd);
}

/* The segment is published (its magic stored) before the executors are
 * made: a watcher may rewrite its header meanwhile.  An executor's ring
 * was placed by the header's rings_off and ring_stride, so a rewritten
 * one sent the executor's writes anywhere in the target's memory. */
static void test_ring_of_an_executor_is_where_the_runtime_put_it_not_the_header(void **state)
{
	(void)state;
	struct cbcmn_runtime *rt = calloc(1, sizeof(*rt));
	assert_non_null(rt);
	rt->page = (size_t)sysconf(_SC_PAGESIZE);
	rt->seg.pid = getpid();
	setenv("CBCMN_TRACE_EVENTS", "64", 1);
	int rc = cbcmn__tseg_create(rt, 2);
	unsetenv("CBCMN_TRACE_EVENTS");
	assert_int_equal(rc, 0);
	assert_non_null(rt->tseg);
	struct cbcmn__tseg_hdr *h = rt->tseg->hdr;
	char *lo = (char *)h, *hi = lo + rt->tseg->size;
	/* The watcher's rewrite, after the magic, before the executors. */
	h->rings_off = 1ull << 40;
	h->ring_stride = 1ull << 30;
	struct cbcmn__trace *tr = cbcmn__trace_new(rt, 1, -1);
	assert_non_null(tr);
	char *ring = (char *)tr->ring;
	printf("    ring 1 at segment + %lld of %zu bytes\n", (long long)(ring - lo), rt->tseg->size);
	bool inside = ring >= lo && ring + sizeof(*tr->ring) + 64 * sizeof(tr->ring->rec[0]) <= hi;
	cbcmn__trace_free(tr);
	cbcmn__tseg_destroy(rt);
	free(rt);
	assert_true(inside);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_record_matches_the_runtimes_counters),
		cmocka_unit_test(test_record_with_kernel_steal_arrows),
		cmocka_unit_test(test_record_events_match_the_runtimes_counters),
		cmocka_unit_test(test_record_and_the_targets_own_drain_take_each_event_once),
		cmocka_unit_test(test_record_events_lost_to_full_rings_are_counted),
		cmocka_unit_test(test_record_pid_of_a_target_with_rings),
		cmocka_unit_test(test_record_pid_of_a_target_killed_meanwhile_is_whole),
		cmocka_unit_test(test_lazy_rings_record_only_while_a_recorder_is_attached),
		cmocka_unit_test(test_lazy_rings_of_a_recorder_killed_stop_recording),
		cmocka_unit_test(test_lazy_rings_hold_of_a_live_recorder_lasts_and_comes_back),
		cmocka_unit_test(test_lazy_rings_close_of_an_expired_recorder_keeps_anothers_hold),
		cmocka_unit_test(test_lazy_rings_close_racing_the_lease_keeps_anothers_retaken_hold),
		cmocka_unit_test(test_record_stopped_past_the_lease_says_so),
		cmocka_unit_test(test_record_of_a_corrupt_ring_is_one_line),
		cmocka_unit_test(test_own_drain_of_a_ring_a_watcher_corrupted_goes_on_from_its_tail),
		cmocka_unit_test(test_bad_trace_events_variable_fails_the_create),
		cmocka_unit_test(test_trace_events_variable_with_blanks_or_a_sign_fails_the_create),
		cmocka_unit_test(test_trace_rings_over_the_file_size_limit_do_not_kill_the_program),
		cmocka_unit_test(test_trace_rings_over_the_address_space_limit_are_one_line),
		cmocka_unit_test(test_record_bad_input),
		cmocka_unit_test(test_record_refused_as_the_same_file_as_o_leaves_it_intact),
		cmocka_unit_test(test_record_full_disk),
		cmocka_unit_test(test_record_over_the_file_size_limit_is_one_line),
		cmocka_unit_test(test_record_of_a_target_whose_name_the_kernel_cut_is_utf8),
		cmocka_unit_test(test_take_of_a_ring_emptied_and_refilled_meanwhile_is_not_corrupt),
		cmocka_unit_test(test_rings_of_a_memfd_shrunk_before_its_seals_are_not_mapped),
		cmocka_unit_test(test_ring_of_an_executor_is_where_the_runtime_put_it_not_the_header),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
