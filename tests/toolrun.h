/* toolrun.h: for the suites that run a tool of their own build (the one in
 * build[/SAN]/bin beside the suite's binary) and read what it wrote. */
#ifndef CBCMN_TEST_TOOLRUN_H
#define CBCMN_TEST_TOOLRUN_H

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

extern char **environ;

/* bindir/tool beside this suite into out; false if it is not built. */
static inline bool tool_path(const char *tool, char *out, size_t len)
{
	char self[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return false;
	self[n] = 0;
	*strrchr(self, '/') = 0;
	snprintf(out, len, "%s/../bin/%s", self, tool);
	return access(out, X_OK) == 0;
}

struct toolrun {
	int status;     /* exit status, 128 + signal, -1: killed after the time given */
	char *out;      /* its stdout, NUL-terminated (free it) */
	size_t out_len;
	char err[4096]; /* its stderr */
};

static inline char *slurp_fd(int fd, size_t *len)
{
	off_t end = lseek(fd, 0, SEEK_END);
	char *b = malloc(end > 0 ? (size_t)end + 1 : 1);
	assert_non_null(b);
	ssize_t n = end > 0 ? pread(fd, b, (size_t)end, 0) : 0;
	b[n > 0 ? n : 0] = 0;
	*len = n > 0 ? (size_t)n : 0;
	return b;
}

/* Run tool (argv[0] its name) of this build, killed after secs (scaled by
 * CBCMN_TEST_SLOW), skipping the test if it is not built. */
static inline void toolrun(struct toolrun *r, const char *const *argv, unsigned secs)
{
	char path[PATH_MAX], ef[] = "/tmp/cbcmn-toolrun-err-XXXXXX", of[] = "/tmp/cbcmn-toolrun-out-XXXXXX";
	if (!tool_path(argv[0], path, sizeof(path))) {
		T_SKIP("%s is not built beside this suite (make tools)", argv[0]);
		return;
	}
	int efd = mkstemp(ef), ofd = mkstemp(of);
	assert_true(efd >= 0 && ofd >= 0);
	unlink(ef);
	unlink(of);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, ofd, 1);
	posix_spawn_file_actions_adddup2(&fa, efd, 2);
	pid_t pid;
	fflush(NULL);
	assert_int_equal(posix_spawn(&pid, path, &fa, NULL, (char *const *)argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	uint64_t end = t_now_ns() + (uint64_t)secs * t_slow() * 1000000000ull;
	int st;
	r->status = -1;
	for (;;) {
		if (waitpid(pid, &st, WNOHANG) == pid) {
			r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			break;
		}
		if (t_now_ns() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		usleep(5000);
	}
	size_t elen;
	char *e = slurp_fd(efd, &elen);
	snprintf(r->err, sizeof(r->err), "%s", e);
	free(e);
	r->out = slurp_fd(ofd, &r->out_len);
	close(efd);
	close(ofd);
}

/* toolrun() with a file size limit (ulimit -f) of limit bytes, which the
 * tool and what it starts inherit; ours is back after.  False, nothing
 * run (a skip said), where the hard limit is below. */
static inline bool toolrun_fsize(struct toolrun *r, const char *const *argv, unsigned secs,
				 rlim_t limit)
{
	struct rlimit old, rl;
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	if (old.rlim_max != RLIM_INFINITY && old.rlim_max < limit) {
		T_SKIP("the hard file size limit is below %llu bytes", (unsigned long long)limit);
		return false;
	}
	rl = old;
	rl.rlim_cur = limit;
	/* Nothing of ours is written while the limit is ours too. */
	fflush(NULL);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
	toolrun(r, argv, secs);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	return true;
}

/* Part of PY_TRACE_OPEN: the process's name, and one track per executor
 * (at least nx: cbcmn-top's has the spare executor's too), tid N + 1 named
 * "executor N", each once, none other; tracks: {tid: [its names]}. */
#define PY_TRACE_TRACKS                                                                      \
	"tracks = {}\n"                                                                       \
	"for e in ev:\n"                                                                      \
	"    if e['ph'] == 'M' and e['name'] == 'thread_name': tracks.setdefault(e['tid'], []).append(e['args']['name'])\n" \
	"procs = [e['args']['name'] for e in ev if e['ph'] == 'M' and e['name'] == 'process_name']\n" \
	"if len(procs) != 1 or len(tracks) < nx or sorted(tracks) != list(range(1, len(tracks) + 1)) or any(n != ['executor %d' % (t - 1)] for t, n in tracks.items()): fail('tracks %r, process %r: want one named track per executor (%d)' % (tracks, procs, nx))\n"

/* The start of a pycheck() script on a Chrome JSON trace (argv[1]), parsed
 * as strictly as a browser's JSON.parse (Python's json takes NaN and
 * Infinity, which Perfetto and chrome://tracing refuse): tr the whole,
 * od its otherData, ev its events, nx its executors; fail(m) prints m and
 * exits 1. */
#define PY_TRACE_OPEN                                                            \
	"import json, sys\n"                                                     \
	"def strict(c): raise ValueError('%s is not JSON (a viewer refuses it)' % c)\n" \
	"tr = json.load(open(sys.argv[1]), parse_constant=strict)\n"           \
	"od = tr['otherData']; ev = tr['traceEvents']; nx = od['executors']\n"  \
	"def fail(m):\n"                                                         \
	"    print('FAIL', m); sys.exit(1)\n"                                      \
	PY_TRACE_TRACKS

/* After PY_TRACE_OPEN: is_steal(e) of an arrow's end (else an actor
 * message's); messages(ev) checks the actor messages of a trace
 * (docs/TRACE.md) and returns (sends, receives), dicts keyed by (the
 * receiver, the message's number) of (ts, tid, flow id): each end an
 * instant (send, receive) followed by its arrow's end (s, f "bp":"e") on
 * the same track at the same time; no message sent or received twice;
 * every receive after its send, on the same arrow.  A message cannot
 * be received before it was sent, nor by another actor. */
#define PY_ACTOR_MSGS                                                                        \
	"def is_steal(e):\n"                                                                   \
	"    if e['name'] not in ('steal', 'message'): fail('flow %r' % (e,))\n"                \
	"    return e['name'] == 'steal'\n"                                                    \
	"def messages(ev):\n"                                                                   \
	"    ends = ({}, {})\n"                                                                 \
	"    for i, e in enumerate(ev):\n"                                                      \
	"        if e.get('cat') != 'actor' or e['ph'] != 'i': continue\n"                      \
	"        rx = e['name'] == 'receive'\n"                                                 \
	"        if e['name'] not in ('send', 'receive') or i + 1 >= len(ev): fail('actor %r' % (e,))\n" \
	"        f = ev[i + 1]\n"                                                               \
	"        if f['ph'] != 'sf'[rx] or f['name'] != 'message' or f['tid'] != e['tid'] or f['ts'] != e['ts'] or rx != (f.get('bp') == 'e'): fail('arrow %r %r' % (e, f))\n" \
	"        a = e['args']; k = (int(a['to'], 16), a['seq'])\n"                              \
	"        if k in ends[rx]: fail('%s twice: %r' % (e['name'], e))\n"                     \
	"        ends[rx][k] = (e['ts'], e['tid'], f['id'])\n"                                  \
	"    for k, r in ends[1].items():\n"                                                    \
	"        s = ends[0].get(k)\n"                                                          \
	"        if s and (s[2] != r[2] or s[0] > r[0]): fail('message %r: sent %r, received %r' % (k, s, r))\n" \
	"    return ends\n"

/* python3 -c script args... (its json module parses the tools' JSON
 * files), its output printed after label; fails the test with that output
 * unless it exits 0.  Skips without /usr/bin/python3. */
static inline void pycheck(const char *script, const char *const *args, const char *label)
{
	if (access("/usr/bin/python3", X_OK) != 0) {
		T_SKIP("no /usr/bin/python3 to parse the file with");
		return;
	}
	const char *argv[16] = {"python3", "-c", script};
	size_t n = 3;
	while (*args && n < 15)
		argv[n++] = *args++;
	argv[n] = NULL;
	/* toolrun runs this build's tools: python3 is the system's. */
	char err[] = "/tmp/cbcmn-pycheck-XXXXXX";
	int efd = mkstemp(err);
	assert_true(efd >= 0);
	unlink(err);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(efd, 1);
		dup2(efd, 2);
		execv("/usr/bin/python3", (char *const *)argv);
		_exit(127);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	size_t len;
	char *out = slurp_fd(efd, &len);
	close(efd);
	printf("    %s: %s", label, out);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("the file failed its check: %s", out);
	free(out);
}

/* A second opinion on an exposition: the parser of the Prometheus Python
 * client (Debian's python3-prometheus-client, the reference
 * implementation's text parsers), OpenMetrics 1.0 or Prometheus text
 * 0.0.4, must take text (len bytes) whole and find the steal counter per
 * executor as Prometheus names it: family cbcmn_steals, a counter, its
 * samples cbcmn_steals_total{executor="0"...}.  Skips, saying why,
 * without that package. */
#define PROM_CLIENT "/usr/lib/python3/dist-packages/prometheus_client"
#define OM_REFCHECK_PY \
	"import sys\n" \
	"text = open(sys.argv[1]).read()\n" \
	"if sys.argv[2] == 'openmetrics':\n" \
	"    from prometheus_client.openmetrics.parser import text_string_to_metric_families\n" \
	"else:\n" \
	"    from prometheus_client.parser import text_string_to_metric_families\n" \
	"fams = {f.name: f for f in text_string_to_metric_families(text)}\n" \
	"st = fams.get('cbcmn_steals')\n" \
	"ex = st and [s.labels.get('executor') for s in st.samples if s.name == 'cbcmn_steals_total']\n" \
	"if not st or st.type != 'counter' or '0' not in ex: print('FAIL no counter cbcmn_steals_total{executor=\"0\"}:', st); sys.exit(1)\n" \
	"print('ok', len(fams), 'families,', sum(len(f.samples) for f in fams.values()), 'samples')\n"

static inline void om_refcheck(const char *text, size_t len, bool openmetrics)
{
	if (access(PROM_CLIENT "/openmetrics/parser.py", R_OK) != 0) {
		T_SKIP("no " PROM_CLIENT " (Debian package python3-prometheus-client; "
		       "scripts/install-deps.sh) for a second parse");
		return;
	}
	char path[] = "/tmp/cbcmn-scrape-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	close(fd);
	const char *args[] = {path, openmetrics ? "openmetrics" : "0.0.4", NULL};
	pycheck(OM_REFCHECK_PY, args, openmetrics ? "prometheus_client, OpenMetrics" : "prometheus_client, 0.0.4");
	unlink(path);
}

/* One line on stderr, ending in a newline, nothing before it. */
static inline void assert_one_line(const char *err)
{
	const char *nl = strchr(err, '\n');
	if (!nl || nl[1] != 0)
		fail_msg("want one line on stderr, got '%s'", err);
}

#endif
