/* test_toprecord.c: cbcmn-top --record: the trace a viewer opens (every
 * slice whole and apart on its executor's track, every arrow with both
 * ends), whose counts are the counters' growth from the first sample to
 * the last, executor by executor, the last being the run's final figures;
 * and bad input as one line and a non-zero status, nothing started. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "toolrun.h"

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
	"if not od['ended'] or not od['complete'] or od['samples'] < 2: fail('otherData %r' % (od,))\n"
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
	struct toolrun r;
	toolrun(&r, argv, 120);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_record_matches_the_runtimes_counters),
		cmocka_unit_test(test_record_with_kernel_steal_arrows),
		cmocka_unit_test(test_record_bad_input),
		cmocka_unit_test(test_record_refused_as_the_same_file_as_o_leaves_it_intact),
		cmocka_unit_test(test_record_full_disk),
		cmocka_unit_test(test_record_of_a_target_whose_name_the_kernel_cut_is_utf8),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
