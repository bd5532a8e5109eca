/* cbcmn-top: a live view of a running cbcmn process, shard by shard: the
 * runtime's own figures (cbcmn_watch_*) and the kernel's (eBPF, through
 * bpfmon), on a curses screen or as batch text or JSON lines.  It can start
 * the process too.  docs/TOP.md. */
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/opts.h"
#include "common/top_model.h"
#include "common/top_out.h"
#include "common/top_ui.h"

#define DEFAULT_WAIT_S 10.0 /* for the runtime of a started command to appear */

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
		"Screen, columns, warnings and JSON keys: docs/TOP.md.\n",
		DEFAULT_WAIT_S);
}

/* Start argv with stdin from /dev/null and its output to out (NULL:
 * /dev/null).  It gets SIGTERM should we die first.  Returns its pid, or
 * -1 with a line on stderr (the exec's own failure is reported through a
 * close-on-exec pipe). */
static pid_t start_command(char **argv, const char *out)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC)) {
		fprintf(stderr, "cbcmn-top: pipe: %s\n", strerror(errno));
		return -1;
	}
	int ofd = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (ofd < 0) {
		fprintf(stderr, "cbcmn-top: %s: %s\n", out ? out : "/dev/null", strerror(errno));
		close(p[0]);
		close(p[1]);
		return -1;
	}
	pid_t ppid = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "cbcmn-top: fork: %s\n", strerror(errno));
		close(p[0]);
		close(p[1]);
		close(ofd);
		return -1;
	}
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != ppid)
			_exit(127); /* we died before the line above */
		if (nul < 0 || dup2(nul, 0) < 0 || dup2(ofd, 1) < 0 || dup2(ofd, 2) < 0)
			goto failed;
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		execvp(argv[0], argv);
failed:;
		int e = errno;
		ssize_t rc = write(p[1], &e, sizeof(e));
		(void)rc;
		_exit(127);
	}
	close(p[1]);
	close(ofd);
	int e;
	ssize_t n = read(p[0], &e, sizeof(e));
	close(p[0]);
	if (n == (ssize_t)sizeof(e)) {
		fprintf(stderr, "cbcmn-top: %s: %s\n", argv[0], strerror(e));
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
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

/* Wait until child has a runtime to watch, at most wait_s.  Returns 0, or
 * 1 with a line on stderr. */
static int wait_runtime(pid_t child, const char *name, double wait_s)
{
	double deadline = mono_s() + wait_s;
	for (;;) {
		cbcmn_watch *w;
		int rc = cbcmn_watch_open(child, 0, &w);
		if (rc == 0) {
			cbcmn_watch_close(w);
			return 0;
		}
		int status;
		if (waitpid(child, &status, WNOHANG) == child) {
			char how[64];
			describe_status(status, how, sizeof(how));
			fprintf(stderr, "cbcmn-top: %s (pid %d) %s before a cbcmn runtime appeared in it\n",
				name, (int)child, how);
			return 1;
		}
		if (rc != -ENOENT && rc != -ESRCH) {
			fprintf(stderr, "cbcmn-top: watching %s (pid %d): %s\n", name, (int)child,
				cbcmn_strerror(rc));
			return 1;
		}
		if (stop) {
			fprintf(stderr, "cbcmn-top: interrupted while waiting for the runtime of %s (pid %d)\n",
				name, (int)child);
			return 1;
		}
		if (mono_s() > deadline) {
			fprintf(stderr, "cbcmn-top: %s (pid %d) started no cbcmn runtime within %.1f s (-w)\n",
				name, (int)child, wait_s);
			return 1;
		}
		usleep(20000);
	}
}

/* Batch: a snapshot every delay_s; n of them (0: until stopped). */
static int run_batch(struct top_model *m, double delay_s, long n, bool json)
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
			return 1;
		}
		if (m->ended) {
			fprintf(stderr,
				"cbcmn-top: process %d: its runtime has ended after %ld snapshots; the last holds its final figures\n",
				(int)m->pid, i + 1);
			break;
		}
	}
	return 0;
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
		return 0;
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

	struct sigaction sa = {.sa_handler = on_stop};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN); /* a closed stdout is a write error, reported */
	/* Those whose default action ends the process (with a core or not)
	 * but a user may send, SIGQUIT (Ctrl-backslash) among them, restore too. */
	static const int fatal[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL,
				    SIGQUIT, SIGTRAP, SIGSYS, SIGXCPU, SIGXFSZ};
	for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
		signal(fatal[i], on_crash);

	pid_t child = 0;
	if (cmd) {
		if ((child = start_command(cmd, output)) < 0)
			return 1;
		if (wait_runtime(child, cmd[0], wait_s)) {
			kill(child, SIGTERM);
			waitpid(child, NULL, 0);
			return 1;
		}
		pid = child;
	}

	struct top_model *m;
	char err[320];
	int ret = 1;
	int rc = top_model_open(&m, (pid_t)pid, &mo, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "cbcmn-top: %s\n", err);
		goto reap;
	}
	if (batch) {
		ret = run_batch(m, delay, iterations, json);
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
	top_model_close(m);
reap:
	/* A command we started goes with us. */
	if (child > 0) {
		int status;
		if (waitpid(child, &status, WNOHANG) == 0) {
			kill(child, SIGTERM);
			waitpid(child, &status, 0);
		}
	}
	return ret;
}
