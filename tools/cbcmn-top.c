/* cbcmn-top: a live view of a running cbcmn process, shard by shard: the
 * runtime's own figures (cbcmn_watch_*) and the kernel's (eBPF, through
 * bpfmon), on a curses screen or as batch text or JSON lines.  It can start
 * the process too.  docs/TOP.md. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/errtail.h"
#include "cli/opts.h"
#include "cli/cli.h"
#include "top/top_model.h"
#include "top/top_out.h"
#include "top/top_record.h"
#include "top/top_ui.h"

#define DEFAULT_WAIT_S 10.0 /* for the runtime of a started command to appear */
/* After the end of a started command: how long its stderr may take to
 * reach end of file (something it forked may hold the pipe for ever). */
#define ERR_EOF_WAIT_MS 1000
/* A command whose runtime ended: how long it may take to exit on its own
 * before it gets SIGTERM (its status is then its own, not ours). */
#define EXIT_WAIT_S 2.0
/* A command sent SIGTERM: how long it may take to end before SIGKILL
 * (it may ignore SIGTERM, or shut down slowly). */
#define TERM_WAIT_S 3.0

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

/* A crash: the terminal back first, then the default action (a core).  The
 * BPF programs are attached through descriptors and go with the process. */
static void on_crash(int sig)
{
	top_ui_crash_restore();
	signal(sig, SIG_DFL);
	raise(sig);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: cbcmn-top -p PID [OPTIONS]\n"
		"       cbcmn-top [OPTIONS] -- COMMAND [ARGS...]\n\n"
		"A live view of a cbcmn process, shard (executor) by shard: the runtime's\n"
		"figures, and the kernel's from eBPF programs (root, or CAP_BPF and\n"
		"CAP_PERFMON; without them the runtime's figures still show).  With a\n"
		"COMMAND, starts it, waits for its runtime and attaches.\n\n"
		"  -p, --pid PID        the process to watch\n"
		"  -r, --runtime N      its N-th live runtime, oldest 0 (default 0)\n"
		"  -d, --delay SEC      seconds between refreshes (default 1)\n"
		"  -b, --batch          plain text snapshots on stdout, no screen\n"
		"  -n, --iterations N   snapshots before exiting (batch; default 0: until ^C)\n"
		"  -j, --json           batch, one JSON object per refresh\n"
		"      --no-color       no colours\n"
		"      --no-bpf         runtime figures only: load no BPF program\n"
		"      --bpf-no GROUP   leave sched, io_uring or futex programs off\n"
		"      --futex-tp       count futex waits with the syscall tracepoints where\n"
		"                       fentry is refused (every syscall of the host pays)\n"
		"  -w, --wait SEC       with COMMAND: how long its runtime may take to appear\n"
		"                       (default %.0f)\n"
		"  -o, --output FILE    with COMMAND: its stdout and stderr (default /dev/null)\n"
		"      --record FILE    also write a Chrome JSON trace (ui.perfetto.dev,\n"
		"                       chrome://tracing) of the target's events, per executor:\n"
		"                       task runs, steals (arrows victim -> thief), parks,\n"
		"                       doorbells, SQEs, CQEs, I/O calls, as cbcmn-run --trace,\n"
		"                       from its trace rings (a COMMAND gets\n"
		"                       CBCMN_TRACE_EVENTS=%u unless set; with -p the target\n"
		"                       must have been started with it), else per interval\n"
		"                       the counts between samples.  FILE is replaced\n"
		"  -v, --verbose        libbpf's messages\n"
		"  -h, --help\n\n"
		"Keys: q quit, ? help, space pause, s or < > sort, i invert, / filter,\n"
		"arrows or j k select, Enter detail, t topology.\n\n"
		"Exit status: 0 ok (also when the target ends), 1 an error, 2 bad usage.\n\n"
		"EXAMPLES\n"
		"  cbcmn-top -p $(pgrep -n cbcmn-run)\n"
		"  cbcmn-top -- build/bin/cbcmn-run skew --duration 30\n"
		"  cbcmn-top -b -n 3 -d 0.5 -p 1234          three text snapshots\n"
		"  cbcmn-top --json -n 10 -p 1234 | jq .shards[0].tasks_per_s\n"
		"  cbcmn-top -b -d 0.1 --record skew.json -- build/bin/cbcmn-run skew --duration 2\n"
		"Screen, columns, warnings, JSON keys and --record's trace: docs/TOP.md.\n",
		DEFAULT_WAIT_S, TOP_REC_RING_EVENTS);
}

/* The command we started: its pid, its name for messages, its stderr. */
static struct {
	pid_t pid;
	const char *name;
	char prefix[64]; /* "name[pid]: ", before each line it wrote */
	struct errtail *err;
	int out_fd;      /* -o FILE, where its stderr is copied too; -1 */
} child = {.out_fd = -1};

/* Start argv with stdin from /dev/null, its stdout to out (NULL:
 * /dev/null) and its stderr to a pipe read into child.err (and copied to
 * out).  It gets SIGTERM should we die first.  Returns its pid, or -1
 * with a line on stderr (the exec's own failure is reported through a
 * close-on-exec pipe). */
static pid_t start_command(char **argv, const char *out)
{
	int p[2], ep[2];
	if (pipe2(p, O_CLOEXEC)) {
		fprintf(stderr, "cbcmn-top: pipe: %s\n", strerror(errno));
		return -1;
	}
	if (pipe2(ep, O_CLOEXEC)) {
		fprintf(stderr, "cbcmn-top: pipe: %s\n", strerror(errno));
		close(p[0]);
		close(p[1]);
		return -1;
	}
	int ofd = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (ofd < 0) {
		fprintf(stderr, "cbcmn-top: %s: %s\n", out ? out : "/dev/null", strerror(errno));
		close(p[0]);
		close(p[1]);
		close(ep[0]);
		close(ep[1]);
		return -1;
	}
	pid_t ppid = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "cbcmn-top: fork: %s\n", strerror(errno));
		close(p[0]);
		close(p[1]);
		close(ep[0]);
		close(ep[1]);
		close(ofd);
		return -1;
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != ppid)
			_exit(127); /* we died before the line above */
		if (nul < 0 || dup2(nul, 0) < 0 || dup2(ofd, 1) < 0 || dup2(ep[1], 2) < 0)
			goto failed;
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		/* Ours is ignored, and an ignored signal stays so across exec:
		 * the command gets the default a shell would give it. */
		signal(SIGPIPE, SIG_DFL);
		signal(SIGXFSZ, SIG_DFL);
		execvp(argv[0], argv);
failed:;
		int e = errno;
		ssize_t rc = write(p[1], &e, sizeof(e));
		(void)rc;
		_exit(127);
	}
	close(p[1]);
	close(ep[1]);
	int err;
	ssize_t n = read(p[0], &err, sizeof(err));
	close(p[0]);
	if (n == (ssize_t)sizeof(err)) {
		fprintf(stderr, "cbcmn-top: %s: %s\n", argv[0], strerror(err));
		waitpid(pid, NULL, 0);
		close(ep[0]);
		close(ofd);
		return -1;
	}
	/* Our copy of the output file shares its offset with the child's
	 * stdout: what both write lands one after the other, in no set order. */
	child.out_fd = out ? ofd : -1;
	if (!out)
		close(ofd);
	int rc = errtail_open(&child.err, ep[0], child.out_fd);
	if (rc) /* it still runs; only its last words will be missing */
		fprintf(stderr, "cbcmn-top: reading the stderr of %s: %s\n", argv[0], strerror(-rc));
	return pid;
}

/* Print head (a line without its newline), then the lines of its stderr
 * not printed yet, each as "name[pid]: ...".  Its stderr is first read to
 * its end (boundedly) if end.  With lines_only, nothing unless there are
 * lines.  Every byte of a line is safe on a terminal (errtail.h). */
static void child_stderr(const char *head, bool end, bool lines_only)
{
	if (child.err && end)
		errtail_stop(child.err, ERR_EOF_WAIT_MS);
	size_t n = child.err ? errtail_pending(child.err) : 0;
	if (lines_only && !n)
		return;
	fprintf(stderr, "%s%s\n", head, n ? "; the last lines of its stderr follow" : "");
	if (n)
		errtail_print(child.err, stderr, child.prefix);
}

static double mono_s(void)
{
	return mono_ns() / 1e9;
}

static void describe_status(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "was killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, len, "stopped");
}

/* Wait until process pid (the command we started) has a runtime to
 * watch, at most wait_s.  Returns 0 and *w, a watch of it kept open from
 * the moment it appeared (a command that ends from then on, even while
 * the programs attach, still has its last figures); or, with a line on
 * stderr (and the last lines of its own), 1 while it runs, 2 when it
 * ended and was reaped. */
#define DENIED_S 0.5 /* how long a refusal may be the command's exec or exit */

static int wait_runtime(pid_t pid, const char *name, double wait_s, cbcmn_watch **w)
{
	double deadline = mono_s() + wait_s, denied_since = 0;
	for (;;) {
		int rc = cbcmn_watch_open(pid, 0, w);
		if (rc == 0)
			return 0;
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid) {
			char how[64], head[PATH_MAX + 160];
			describe_status(status, how, sizeof(how));
			snprintf(head, sizeof(head),
				 "cbcmn-top: %s (pid %d) %s before a cbcmn runtime appeared in it", name,
				 (int)pid, how);
			child_stderr(head, true, false);
			return 2;
		}
		/* Refused while the command execs or exits (its /proc entries
		 * are closed to us for that moment: seen as a user without
		 * privilege, /bin/true said "Permission denied" instead of its
		 * exit): an error only once it lasts. */
		if (rc == -EACCES && (denied_since == 0 || mono_s() - denied_since < DENIED_S)) {
			if (denied_since == 0)
				denied_since = mono_s();
		} else if (rc != -ENOENT && rc != -ESRCH) {
			fprintf(stderr, "cbcmn-top: watching %s (pid %d): %s\n", name, (int)pid,
				cbcmn_strerror(rc));
			return 1;
		} else {
			denied_since = 0;
		}
		if (stop) {
			char head[PATH_MAX + 160];
			snprintf(head, sizeof(head),
				 "cbcmn-top: interrupted while waiting for the runtime of %s (pid %d)", name,
				 (int)pid);
			child_stderr(head, false, false);
			return 1;
		}
		if (mono_s() > deadline) {
			char head[PATH_MAX + 160];
			snprintf(head, sizeof(head),
				 "cbcmn-top: %s (pid %d) started no cbcmn runtime within %.1f s (-w)", name,
				 (int)pid, wait_s);
			child_stderr(head, false, false);
			return 1;
		}
		usleep(20000);
	}
}

/* SIGTERM to the command we started, and its end: SIGKILL, said on
 * stderr, if it has not ended TERM_WAIT_S later.  *status: how it ended. */
static void end_command(int *status)
{
	kill(child.pid, SIGTERM);
	double until = mono_s() + TERM_WAIT_S;
	pid_t r;
	while ((r = waitpid(child.pid, status, WNOHANG)) == 0 && mono_s() < until)
		usleep(10000);
	if (r != 0)
		return; /* ended, or not ours to wait for */
	fprintf(stderr, "cbcmn-top: %s (pid %d) did not end on SIGTERM within %.0f s: sent SIGKILL\n",
		child.name, (int)child.pid, TERM_WAIT_S);
	kill(child.pid, SIGKILL);
	while (waitpid(child.pid, status, 0) < 0 && errno == EINTR)
		;
}

/* Free what child holds. */
static void child_end(void)
{
	errtail_close(child.err);
	child.err = NULL;
	if (child.out_fd >= 0)
		close(child.out_fd);
	child.out_fd = -1;
}

/* A command we started goes with us.  If it ended on its own (given a
 * moment when its runtime has ended: its exit follows), its status and
 * the rest of its stderr; if it got our SIGTERM, the rest of its stderr
 * only, if any.  Quiet: neither (our failure was said in one line, and
 * the command's end is not news beside it). */
static void reap_command(bool ended, bool quiet)
{
	int status;
	double until = mono_s() + (ended ? EXIT_WAIT_S : 0);
	pid_t r;
	while ((r = waitpid(child.pid, &status, WNOHANG)) == 0 && mono_s() < until)
		usleep(10000);
	char head[PATH_MAX + 160];
	if (quiet) {
		if (r != child.pid)
			end_command(&status);
	} else if (r == child.pid) {
		char how[64];
		describe_status(status, how, sizeof(how));
		snprintf(head, sizeof(head), "cbcmn-top: %s (pid %d) %s", child.name, (int)child.pid,
			 how);
		child_stderr(head, true, false);
	} else {
		end_command(&status);
		snprintf(head, sizeof(head), "cbcmn-top: %s (pid %d) was sent SIGTERM as cbcmn-top exits",
			 child.name, (int)child.pid);
		child_stderr(head, true, true);
	}
	child_end();
}

/* Batch: a snapshot every delay_s; n of them (0: until stopped).  1 with
 * a line on failure; *lost then says whether it was stdout's. */
static int run_batch(struct top_model *m, double delay_s, long n, bool json, bool *lost)
{
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (long i = 0; (!n || i < n) && !stop; i++) {
		double t = next.tv_sec + next.tv_nsec / 1e9 + delay_s;
		next.tv_sec = (time_t)t;
		next.tv_nsec = (long)((t - (double)next.tv_sec) * 1e9);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR && !stop)
			;
		if (stop)
			break;
		int rc = top_model_sample(m);
		if (rc && rc != -ESRCH) {
			fprintf(stderr, "cbcmn-top: reading process %d: %s\n", (int)m->pid,
				cbcmn_strerror(rc));
			return 1;
		}
		rc = json ? top_print_json(stdout, m) : top_print_text(stdout, m);
		if (rc) {
			fprintf(stderr, "cbcmn-top: writing stdout: %s\n", strerror(errno ? errno : EIO));
			*lost = true;
			return 1;
		}
		/* What a started command said meanwhile: no screen to spoil. */
		if (child.err)
			errtail_print(child.err, stderr, child.prefix);
		if (m->ended) {
			fprintf(stderr,
				"cbcmn-top: process %d: its runtime has ended after %ld snapshots; the last holds its final figures\n",
				(int)m->pid, i + 1);
			break;
		}
	}
	return 0;
}

/* Do paths a and b (b may be NULL) name one existing file? */
static bool same_file(const char *a, const char *b)
{
	struct stat as, bs;
	return b && !stat(a, &as) && !stat(b, &bs) && as.st_dev == bs.st_dev &&
	       as.st_ino == bs.st_ino;
}

/* --record: end the trace (m: the model recorded, NULL if none opened),
 * once.  Returns ret, or 1 with a line when writing it failed. */
static int record_end(struct top_rec **rec, const struct top_model *m, int ret)
{
	char err[PATH_MAX + 256];
	if (*rec && top_rec_close(*rec, m, err, sizeof(err))) {
		fprintf(stderr, "cbcmn-top: --record %s\n", err);
		ret = 1;
	} else if (*rec && err[0]) {
		fprintf(stderr, "cbcmn-top: --record %s\n", err); /* events lost: a note */
	}
	*rec = NULL;
	return ret;
}

int main(int argc, char **argv)
{
	struct top_opts o = {.delay = 1.0, .wait_s = DEFAULT_WAIT_S, .color = true};
	char perr[256];

	setlocale(LC_ALL, "");
	if (top_opts_parse(argc, argv, &o, perr, sizeof(perr))) {
		fprintf(stderr, "cbcmn-top: %s (--help for usage)\n", perr);
		return 2;
	}
	if (o.help) {
		usage(stdout);
		return cli_stdout_flushed("cbcmn-top") ? 0 : 1;
	}
	long pid = o.pid, iterations = o.iterations;
	double delay = o.delay, wait_s = o.wait_s;
	bool batch = o.batch, json = o.json, color = o.color;
	const char *output = o.output;
	struct top_model_opts mo = {.no_bpf = o.no_bpf, .bpf_flags = o.bpf_flags,
				    .runtime = (uint32_t)o.runtime};
	char **cmd = o.cmd;

	if (!batch && (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))) {
		fprintf(stderr, "cbcmn-top: the screen needs a terminal; -b or --json for batch output\n");
		return 2;
	}

	/* The trace file first: a name it cannot write starts nothing. */
	struct top_rec *rec = NULL;
	int ret = 1;
	if (o.record) {
		char rerr[PATH_MAX + 64];
		/* The command's output into the trace would leave neither
		 * whole.  Looked at before the trace is opened (that truncates
		 * it), and again after (two names of a file it created). */
		bool same = same_file(o.record, o.output);
		if (!same && top_rec_open(&rec, o.record, rerr, sizeof(rerr))) {
			fprintf(stderr, "cbcmn-top: --record %s\n", rerr);
			return 1;
		}
		if (same || same_file(o.record, o.output)) {
			fprintf(stderr, "cbcmn-top: --record %s: the same file as -o %s\n", o.record,
				o.output);
			top_rec_close(rec, NULL, rerr, sizeof(rerr));
			return 1;
		}
		mo.on_read = top_rec_read;
		mo.on_read_arg = rec;
		/* A started command keeps its events in rings we can drain
		 * (docs/TOP.md, "Recording"), unless the user chose otherwise
		 * (0: none, the samples only). */
		char ev[16];
		snprintf(ev, sizeof(ev), "%u", TOP_REC_RING_EVENTS);
		if (cmd && !getenv("CBCMN_TRACE_EVENTS"))
			setenv("CBCMN_TRACE_EVENTS", ev, 0);
	}

	struct sigaction sa = {.sa_handler = on_stop};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN); /* a closed stdout is a write error, reported */
	/* So is a write past ulimit -f, --record's trace's (ct_open() ignores
	 * it too) or stdout's: SIGXFSZ's default ended us mid-write. */
	signal(SIGXFSZ, SIG_IGN);
	/* Those whose default action ends the process (with a core or not)
	 * but a user may send, SIGQUIT (Ctrl-backslash) among them, restore too.
	 * Not SIGXFSZ, ignored above. */
	static const int fatal[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL,
				    SIGQUIT, SIGTRAP, SIGSYS, SIGXCPU};
	for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
		signal(fatal[i], on_crash);

	if (cmd) {
		if ((child.pid = start_command(cmd, output)) < 0)
			goto record;
		child.name = cmd[0];
		const char *base = strrchr(cmd[0], '/');
		snprintf(child.prefix, sizeof(child.prefix), "%.40s[%d]: ", base ? base + 1 : cmd[0],
			 (int)child.pid);
		int wrc = wait_runtime(child.pid, cmd[0], wait_s, &mo.watch);
		if (wrc) {
			if (wrc == 1) { /* still running (2: reaped) */
				int status;
				end_command(&status);
			}
			child_end();
			goto record;
		}
		pid = child.pid;
		/* Its first events wait in its rings until we drain them:
		 * from now on, not after the BPF programs have loaded. */
		cbcmn_stats st;
		if (rec && !mo.runtime && mo.watch && cbcmn_watch_read(mo.watch, &st, NULL, 0) == 0)
			top_rec_attach(rec, child.pid, st.runtime_id);
		if (mo.runtime) { /* -r N: the model opens that one */
			cbcmn_watch_close(mo.watch);
			mo.watch = NULL;
		}
	}

	struct top_model *m;
	char err[320];
	bool ended = false, lost = false;
	int rc = top_model_open(&m, (pid_t)pid, &mo, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "cbcmn-top: %s\n", err);
		goto reap;
	}
	if (batch) {
		ret = run_batch(m, delay, iterations, json, &lost);
	} else {
		struct top_ui_opts uo = {.delay_s = delay, .color = color};
		rc = top_ui_run(m, &uo, &stop);
		ret = rc ? 1 : 0;
		if (rc == -ENOTTY)
			fprintf(stderr,
				"cbcmn-top: cannot set up the screen (TERM=%s); -b or --json for batch output\n",
				getenv("TERM") ? getenv("TERM") : "");
		else if (rc)
			fprintf(stderr, "cbcmn-top: reading process %d: %s\n", (int)pid, cbcmn_strerror(rc));
		else if (m->ended)
			fprintf(stderr, "cbcmn-top: process %d: its runtime has ended\n", (int)pid);
	}
	ended = m->ended;
	ret = record_end(&rec, m, ret);
	top_model_close(m);
reap:
	if (child.pid > 0)
		reap_command(ended, lost);
record:
	return record_end(&rec, NULL, ret);
}
