/* test_cli: the tools' command lines.  Bad input of every kind (junk after a
 * number, a sign, overflow, an empty string, an unknown option, a missing
 * argument) is refused with one line and a non-zero status; the strict
 * value parsers (tools/cli/cli.c) and the option parsers
 * (tools/cli/opts.c) directly; and each bug the fuzzing found or the
 * review of the parsers showed, through the tool itself. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include "helpers.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/stealmx.h"

extern char **environ;

/* ---- the strict values ------------------------------------------------------- */

static void test_cli_u64(void **state)
{
	(void)state;
	uint64_t v = 7;
	assert_int_equal(cli_u64("0", 0, 10, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(cli_u64("010", 0, 100, &v), 0);
	assert_int_equal(v, 10); /* decimal, not octal */
	assert_int_equal(cli_u64("0x1F", 0, 100, &v), 0);
	assert_int_equal(v, 31);
	assert_int_equal(cli_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	v = 7;
	static const char *const junk[] = {"", " 1", "1 ", "+1", "-1", " -1", "12abc", "0x", "0x-1",
					   "1.0", "1e3", "0b1", "١", "\n1"};
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
		if (cli_u64(junk[i], 0, UINT64_MAX, &v) != -EINVAL)
			fail_msg("'%s' accepted", junk[i]);
	assert_int_equal(cli_u64("18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
	assert_int_equal(cli_u64("0x10000000000000000", 0, UINT64_MAX, &v), -ERANGE);
	assert_int_equal(cli_u64("99999999999999999999x", 0, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(cli_u64("11", 0, 10, &v), -ERANGE);
	assert_int_equal(cli_u64("0", 1, 10, &v), -ERANGE);
	assert_int_equal(cli_u64(NULL, 0, 10, &v), -EINVAL);
	assert_int_equal(v, 7); /* untouched by every refusal */
}

static void test_cli_i64(void **state)
{
	(void)state;
	int64_t v = 7;
	assert_int_equal(cli_i64("-1", -1, 10, &v), 0);
	assert_int_equal(v, -1);
	assert_int_equal(cli_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v), 0);
	assert_true(v == INT64_MIN);
	assert_int_equal(cli_i64("9223372036854775807", INT64_MIN, INT64_MAX, &v), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(cli_i64("9223372036854775808", INT64_MIN, INT64_MAX, &v), -ERANGE);
	assert_int_equal(cli_i64("-9223372036854775809", INT64_MIN, INT64_MAX, &v), -ERANGE);
	assert_int_equal(cli_i64("-2", -1, 10, &v), -ERANGE);
	assert_int_equal(cli_i64("--1", -1, 10, &v), -EINVAL);
	assert_int_equal(cli_i64("-", -1, 10, &v), -EINVAL);
	assert_int_equal(cli_i64("", -1, 10, &v), -EINVAL);
	assert_int_equal(cli_i64("- 1", -1, 10, &v), -EINVAL);
}

static void test_cli_secs(void **state)
{
	(void)state;
	double v = 7;
	assert_int_equal(cli_secs("0.5", 0, true, 10, &v), 0);
	assert_true(v == 0.5);
	assert_int_equal(cli_secs(".5", 0, true, 10, &v), 0);
	assert_int_equal(cli_secs("5.", 0, true, 10, &v), 0);
	assert_int_equal(cli_secs("1e-3", 0, true, 10, &v), 0);
	assert_true(v == 1e-3);
	assert_int_equal(cli_secs("2E+0", 0, true, 10, &v), 0);
	assert_int_equal(cli_secs("0", 0, true, 10, &v), -ERANGE);   /* (0, 10] */
	assert_int_equal(cli_secs("0", 0, false, 10, &v), 0);        /* [0, 10] */
	assert_int_equal(cli_secs("1e999", 0, true, 10, &v), -ERANGE);
	assert_int_equal(cli_secs("1e-999", 0, true, 10, &v), -ERANGE);
	static const char *const junk[] = {"",     " 1",   "1 ",  "+1",  "-1",  "1,5", "0x1p-3",
					   "inf",  "nan",  "1e",  "1e+", ".",   "e3",  "1..2",
					   "1.5s", "\t1"};
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
		if (cli_secs(junk[i], 0, false, 1e9, &v) != -EINVAL)
			fail_msg("'%s' accepted", junk[i]);
}

/* strtod() reads "0.5" as 0 in a locale with a decimal comma, and cbcmn-top
 * calls setlocale(LC_ALL, ""): the values must not depend on it. */
static void test_cli_secs_ignores_the_locale(void **state)
{
	(void)state;
	static const char *const comma[] = {"de_DE.UTF-8", "fr_FR.UTF-8", "de_DE", "fr_FR", "ru_RU.UTF-8"};
	const char *got = NULL;
	for (size_t i = 0; i < sizeof(comma) / sizeof(comma[0]) && !got; i++)
		got = setlocale(LC_NUMERIC, comma[i]);
	if (!got)
		T_SKIP("no locale with a decimal comma is installed");
	double v = 0;
	int rc = cli_secs("0.5", 0, true, 10, &v);
	setlocale(LC_NUMERIC, "C");
	assert_int_equal(rc, 0);
	assert_true(v == 0.5);
}

static void test_cli_err_is_one_line(void **state)
{
	(void)state;
	char err[64];
	assert_int_equal(cli_err(err, sizeof(err), "got '%s'", "a\nb\rc\x7f"), -1);
	assert_string_equal(err, "got 'a?b?c?'");
	assert_int_equal(cli_err(NULL, 0, "x"), -1);
}

/* ---- the option parsers, called directly ---------------------------------------- */

#define MAX_ARGS 16

/* argv from a NULL-terminated list (getopt_long permutes it: a copy). */
struct args {
	int argc;
	char *argv[MAX_ARGS + 1];
};

static void args_of(struct args *a, const char *const *list)
{
	a->argc = 0;
	for (; *list && a->argc < MAX_ARGS; list++)
		a->argv[a->argc++] = (char *)*list;
	a->argv[a->argc] = NULL;
}

enum tool { T_AFFINITY, T_RUN, T_BENCH, T_DEMO, T_LOADTEST, T_STAT, T_TOP };

static int parse(enum tool t, const char *const *list, char *err, size_t errlen)
{
	struct args a;
	args_of(&a, list);
	err[0] = 0;
	switch (t) {
	case T_AFFINITY: {
		struct affinity_opts o = {.first_cpu = -1};
		return affinity_opts_parse(a.argc, a.argv, &o, err, errlen);
	}
	case T_RUN: {
		struct run_opts o = {.workers = CBCMN_WORKERS_AUTO, .duration_s = 3};
		return run_opts_parse(a.argc, a.argv, &o, err, errlen);
	}
	case T_BENCH: {
		struct bench_opts o = {.workers = 2, .reps = 7, .conns = 50, .duration_s = 5};
		return bench_opts_parse(a.argc, a.argv, &o, err, errlen);
	}
	case T_DEMO: {
		struct demo_opts o = {.n = 27};
		return demo_opts_parse(a.argc, a.argv, &o, err, errlen);
	}
	case T_LOADTEST: {
		struct loadtest_opts o = {.http = true};
		return loadtest_opts_parse(a.argc, a.argv, &o, err, errlen);
	}
	case T_STAT: {
		struct stat_opts o = {.interval = 1, .count = 1};
		return stat_opts_parse(a.argc, a.argv, &o, err, errlen);
	}
	case T_TOP: {
		struct top_opts o = {.delay = 1, .wait_s = 10, .color = true};
		return top_opts_parse(a.argc, a.argv, &o, err, errlen);
	}
	}
	return 0;
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_parsers_refuse_bad_input(void **state)
{
	(void)state;
	const struct {
		enum tool t;
		const char *const *argv;
		const char *says;
	} bad[] = {
		{T_AFFINITY, L("a", "-n", "12abc"), "-n wants 1..1048576, got '12abc'"},
		{T_AFFINITY, L("a", "-n", ""), "-n wants"},
		{T_AFFINITY, L("a", "-n", "0"), "-n wants"},
		{T_AFFINITY, L("a", "--seed", "-1"), "--seed wants"},
		{T_AFFINITY, L("a", "--seed", "18446744073709551616"), "--seed wants"},
		{T_AFFINITY, L("a", "--first-cpu", "-1"), "--first-cpu wants"},
		{T_AFFINITY, L("a", "--json=yes"), "'--json': it takes no argument"},
		{T_AFFINITY, L("a", "--steal-matrix"), "'--steal-matrix': it needs an argument"},
		{T_AFFINITY, L("a", "-jm"), "'-m': it needs an argument"},
		{T_AFFINITY, L("a", "-jz"), "'-z' (unknown)"},
		{T_AFFINITY, L("a", "--no-such"), "'--no-such' (unknown or ambiguous)"},
		{T_AFFINITY, L("a", "x"), "unexpected argument 'x'"},
		{T_RUN, L("r", "fib", "--workers", "0"), "--workers wants 1..1024"},
		{T_RUN, L("r", "fib", "--workers", "1025"), "--workers wants"},
		{T_RUN, L("r", "fib", "--workers", "2x"), "--workers wants"},
		{T_RUN, L("r", "fib", "--seed", " -1"), "--seed wants"},
		{T_RUN, L("r", "fib", "--duration", "-1"), "--duration wants"},
		{T_RUN, L("r", "fib", "--duration", "nan"), "--duration wants"},
		{T_RUN, L("r", "fib", "--duration", "86401"), "--duration wants"},
		{T_RUN, L("r", "fib", "--size", "4294967296"), "--size wants"},
		{T_RUN, L("r", "fib", "--futex-tp"), "--futex-tp goes with --bpf"},
		{T_RUN, L("r"), "which workload?"},
		{T_RUN, L("r", "fib", "skew"), "unexpected argument 'skew'"},
		{T_RUN, L("r", "fib", "--s", "1"), "(unknown or ambiguous)"}, /* --seed or --size */
		{T_BENCH, L("b", "fib", "--server-spin-ns", "-5"), "--server-spin-ns wants"},
		{T_BENCH, L("b", "fib", "--server-spin-ns", "18446744073709551615"), "--server-spin-ns wants"},
		{T_BENCH, L("b", "fib", "--reps", "17"), "--reps wants 1..16"},
		{T_BENCH, L("b", "fib", "--conns", " 5"), "--conns wants"},
		{T_BENCH, L("b", "fib", "--duration", ""), "--duration wants"},
		{T_BENCH, L("b", "fib", "--bpf-no", "net"), "--bpf-no wants"},
		{T_BENCH, L("b", "actors", "--hops", "0"), "--hops wants"},
		{T_BENCH, L("b", "actors", "--actors", "9"), "--actors wants 10.."},
		{T_BENCH, L("b", "actors", "--ring", "1"), "--ring wants 2.."},
		{T_BENCH, L("b"), "which benchmark?"},
		{T_BENCH, L("b", "fib", "spawn"), "unexpected argument 'spawn'"},
		{T_DEMO, L("d", "-n", "41"), "-n wants 0..40"},
		{T_DEMO, L("d", "-w", "-1"), "-w wants"},
		{T_DEMO, L("d", "x"), "unexpected argument 'x'"},
		{T_DEMO, L("d", "--help"), "(unknown or ambiguous)"},
		{T_LOADTEST, L("l", "-S", "-2"), "-S wants -1..1023"},
		{T_LOADTEST, L("l", "-C", "1024"), "-C wants -1..1023"},
		{T_LOADTEST, L("l", "-P", "0"), "-P wants 1..65535"},
		{T_LOADTEST, L("l", "-P", "65536"), "-P wants"},
		{T_LOADTEST, L("l", "-d", "0"), "-d wants"},
		{T_LOADTEST, L("l", "--proto", "ftp"), "--proto wants echo or http"},
		{T_LOADTEST, L("l", "x"), "unexpected argument 'x'"},
		{T_STAT, L("s", "-p", "4294967297"), "-p wants a process id"},
		{T_STAT, L("s", "-p", "0"), "-p wants a process id"},
		{T_STAT, L("s", "-p", "1", "-c", "99999999999999999999"), "-c wants"},
		{T_STAT, L("s", "-p", "1", "-c", "-1"), "-c wants"},
		{T_STAT, L("s", "-p", "1", "-i", "0"), "-i wants"},
		{T_STAT, L("s"), "-p PID is required"},
		{T_STAT, L("s", "-p", "1", "x"), "unexpected argument 'x'"},
		{T_TOP, L("t", "-b", "-p", "12abc"), "-p wants a process id"},
		{T_TOP, L("t", "-b", "-n", "99999999999999999999", "-p", "1"), "-n wants"},
		{T_TOP, L("t", "-d", "0.01", "-p", "1"), "-d wants seconds in [0.05, 86400]"},
		{T_TOP, L("t", "-w", "x", "-p", "1"), "-w wants"},
		{T_TOP, L("t", "-n", "3", "-p", "1"), "-n counts batch snapshots"},
		{T_TOP, L("t", "-p", "1", "cmd"), "exclude each other"},
		{T_TOP, L("t", "-b"), "-p PID or -- COMMAND is required"},
		{T_TOP, L("t", "-o", "f", "-p", "1"), "-o is for the output of a COMMAND"},
		{T_TOP, L("t", "--bpf-no", "x", "-p", "1"), "--bpf-no wants"},
	};
	char err[256];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = parse(bad[i].t, bad[i].argv, err, sizeof(err));
		if (rc != -1 || !strstr(err, bad[i].says) || strchr(err, '\n'))
			fail_msg("case %zu (%s %s): rc %d, err '%s', want '%s'", i, bad[i].argv[0],
				 bad[i].argv[1] ? bad[i].argv[1] : "", rc, err, bad[i].says);
	}
}

static void test_parsers_take_good_input(void **state)
{
	(void)state;
	char err[256];
	struct args a;

	struct affinity_opts af = {.first_cpu = -1};
	args_of(&a, L("a", "--sysfs-root", "/x", "-n", "8", "-p", "cpus:0-3", "-s", "0x10", "-f", "2",
		      "-m", "-", "-j"));
	assert_int_equal(affinity_opts_parse(a.argc, a.argv, &af, err, sizeof(err)), 0);
	assert_string_equal(af.root, "/x");
	assert_int_equal(af.n, 8);
	assert_string_equal(af.policy, "cpus:0-3");
	assert_int_equal(af.seed, 16);
	assert_int_equal(af.first_cpu, 2);
	assert_string_equal(af.matrix, "-");
	assert_true(af.json && !af.help);

	struct run_opts r = {.workers = CBCMN_WORKERS_AUTO, .duration_s = 3};
	args_of(&a, L("r", "--workers=2", "skew", "-d", "0.25", "--size", "100", "--bpf", "--futex-tp"));
	assert_int_equal(run_opts_parse(a.argc, a.argv, &r, err, sizeof(err)), 0);
	assert_int_equal(r.workers, 2);
	assert_true(r.duration_s == 0.25);
	assert_int_equal(r.size, 100);
	assert_string_equal(r.workload, "skew");
	assert_true(r.bpf && r.futex_tp);

	/* A second call starts afresh (the fuzz target calls in a loop). */
	struct run_opts r2 = {.workers = CBCMN_WORKERS_AUTO, .duration_s = 3};
	args_of(&a, L("r", "fib"));
	assert_int_equal(run_opts_parse(a.argc, a.argv, &r2, err, sizeof(err)), 0);
	assert_string_equal(r2.workload, "fib");
	assert_int_equal(r2.workers, CBCMN_WORKERS_AUTO);

	struct bench_opts b = {.multishot = true};
	args_of(&a, L("b", "echo", "--server-spin-ns", "none", "--no-multishot", "--bpf-no", "futex-tp"));
	assert_int_equal(bench_opts_parse(a.argc, a.argv, &b, err, sizeof(err)), 0);
	assert_true(b.server_spin_ns == CBCMN_SPIN_NONE);
	assert_false(b.multishot);
	assert_string_equal(b.name, "echo");
	args_of(&a, L("b", "actors", "--hops", "1000", "--actors", "100"));
	assert_int_equal(bench_opts_parse(a.argc, a.argv, &b, err, sizeof(err)), 0);
	assert_true(b.hops == 1000 && b.actors == 100);
	args_of(&a, L("b", "actors", "--ring", "3000"));
	assert_int_equal(bench_opts_parse(a.argc, a.argv, &b, err, sizeof(err)), 0);
	assert_true(b.ring == 3000); /* any size: not skynet's power of 10 */
	args_of(&a, L("b", "echo", "--client", "ring"));
	assert_int_equal(bench_opts_parse(a.argc, a.argv, &b, err, sizeof(err)), 0);
	assert_true(b.client_ring);
	args_of(&a, L("b", "echo", "--client", "epoll"));
	assert_int_equal(bench_opts_parse(a.argc, a.argv, &b, err, sizeof(err)), 0);
	assert_false(b.client_ring);
	args_of(&a, L("b", "echo", "--client", "uring"));
	assert_int_equal(bench_opts_parse(a.argc, a.argv, &b, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "--client wants epoll or ring"));
	/* The io_uring client speaks echo only: refused before any bench
	 * runs, not after every bench of "all" up to http (review). */
	args_of(&a, L("b", "bpf-overhead", "--client", "ring"));
	assert_int_equal(bench_opts_parse(a.argc, a.argv, &b, err, sizeof(err)), 0);
	static const char *const not_echo[] = {"http", "all", "spawn"};
	for (size_t i = 0; i < sizeof(not_echo) / sizeof(not_echo[0]); i++) {
		args_of(&a, L("b", not_echo[i], "--client", "ring"));
		assert_int_equal(bench_opts_parse(a.argc, a.argv, &b, err, sizeof(err)), -1);
		assert_non_null(strstr(err, "--client ring goes with echo"));
	}
	args_of(&a, L("b", "http", "--client", "epoll"));
	assert_int_equal(bench_opts_parse(a.argc, a.argv, &b, err, sizeof(err)), 0);

	struct loadtest_opts l = {.http = true};
	args_of(&a, L("l", "-S", "-1", "-C", "3", "--no-http", "--proto", "http", "-P", "8080"));
	assert_int_equal(loadtest_opts_parse(a.argc, a.argv, &l, err, sizeof(err)), 0);
	assert_int_equal(l.server_cpu, -1);
	assert_int_equal(l.cfg.cpu, 3);
	assert_false(l.http);
	assert_int_equal(l.cfg.proto, LG_HTTP);
	assert_int_equal(l.port, 8080);

	struct top_opts t = {.delay = 1, .color = true};
	args_of(&a, L("t", "-b", "-n", "3", "--", "/bin/sleep", "-x", "5"));
	assert_int_equal(top_opts_parse(a.argc, a.argv, &t, err, sizeof(err)), 0);
	assert_non_null(t.cmd);
	assert_string_equal(t.cmd[0], "/bin/sleep");
	assert_string_equal(t.cmd[1], "-x"); /* the command's own options are its own */

	struct stat_opts s = {.count = 1};
	args_of(&a, L("s", "--pid", "2147483647", "-c", "0", "-i", "1e-1"));
	assert_int_equal(stat_opts_parse(a.argc, a.argv, &s, err, sizeof(err)), 0);
	assert_int_equal(s.pid, 2147483647);
	assert_int_equal(s.count, 0);

	struct demo_opts d = {.n = 27};
	args_of(&a, L("d", "-h"));
	assert_int_equal(demo_opts_parse(a.argc, a.argv, &d, err, sizeof(err)), 0);
	assert_true(d.help);
}

/* ---- the steal-matrix reader ----------------------------------------------------- */

static int read_matrix(const char *text, size_t len, struct stealmx *m, char *err, size_t errlen)
{
	FILE *f = fmemopen((void *)text, len, "r");
	assert_non_null(f);
	*m = (struct stealmx){0};
	int rc = stealmx_read(f, "m", m, err, errlen);
	fclose(f);
	return rc;
}

static void test_stealmx(void **state)
{
	(void)state;
	struct stealmx m;
	char err[256];
	static const char good[] = "# thief victim steals tasks\n1 0 10 20\n\n2 0 5 # no tasks\r\n"
				   "1 0 1 1\n";
	assert_int_equal(read_matrix(good, sizeof(good) - 1, &m, err, sizeof(err)), 0);
	assert_int_equal(m.n, 3);
	assert_int_equal(m.executors, 3);
	assert_int_equal(m.steals, 16);
	assert_int_equal(m.tasks, 21);
	assert_true(m.has_tasks);
	stealmx_free(&m);

	static const struct {
		const char *text, *says;
	} bad[] = {
		{"0 1\n", "m:1: expected 'THIEF VICTIM STEALS [TASKS]'"},
		{"0 1 2\n0 x 2\n", "m:2: expected"},
		{"0 1 2 3 4\n", "m:1: expected"},
		{"0 1 -2\n", "m:1: expected"},
		{"0 1 2x\n", "m:1: expected"},
		{"0 1 18446744073709551616\n", "m:1: expected"},
		{"1 1 5\n", "m:1: executor 1 steals from itself"},
		{"1048576 0 5\n", "m:1: executor index above 1048575"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = read_matrix(bad[i].text, strlen(bad[i].text), &m, err, sizeof(err));
		if (rc != -1 || !strstr(err, bad[i].says) || m.v)
			fail_msg("'%s': rc %d, err '%s', want '%s'", bad[i].text, rc, err, bad[i].says);
	}
}

/* The sums of steals and tasks wrapped around 2^64: a prediction then said
 * "0 steals" of a matrix full of them, and divided by the wrapped sum. */
static void test_stealmx_sum_overflow_is_refused(void **state)
{
	(void)state;
	struct stealmx m;
	char err[256];
	static const char wrap[] = "1 0 18446744073709551615\n2 0 1\n";
	assert_int_equal(read_matrix(wrap, sizeof(wrap) - 1, &m, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "add up past"));
	static const char tasks[] = "1 0 1 72057594037927935\n2 0 1 1\n";
	assert_int_equal(read_matrix(tasks, sizeof(tasks) - 1, &m, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "m:2: the counts add up past"));
}

/* A NUL byte ended the line for the field scanner: "1 0 5\0junk" was read
 * as "1 0 5" and the junk after it ignored. */
static void test_stealmx_nul_byte_is_refused(void **state)
{
	(void)state;
	struct stealmx m;
	char err[256];
	static const char nul[] = "1 0 5\0 junk\n";
	assert_int_equal(read_matrix(nul, sizeof(nul) - 1, &m, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "m:1: a NUL byte"));
}

/* An endless stream, unit repeated (a NUL: /dev/zero, a binary; a line:
 * 'yes 0 1 0'), as a FILE whose reads are counted in given and that ends
 * after 64 MiB. */
struct endless {
	const char *unit;
	size_t len, given;
};

static ssize_t endless_read(void *cookie, char *buf, size_t len)
{
	struct endless *e = cookie;
	if (e->given >= (64u << 20))
		return 0;
	len -= len % e->len;
	for (size_t i = 0; i < len; i += e->len)
		memcpy(buf + i, e->unit, e->len);
	e->given += len;
	return (ssize_t)len;
}

/* stealmx_read() of e, refused: *m left empty, the line in err. */
static void endless_refused(struct endless *e, char *err, size_t errlen)
{
	FILE *f = fopencookie(e, "r", (cookie_io_functions_t){.read = endless_read});
	assert_non_null(f);
	struct stealmx m = {0};
	assert_int_equal(stealmx_read(f, "z", &m, err, errlen), -1);
	fclose(f);
	assert_null(m.v);
}

/* getline() grew its line until memory ran out (64 MiB here, all of it on
 * /dev/zero) before saying anything: a line is at most STEALMX_MAX_LINE. */
static void test_stealmx_endless_line_is_refused_early(void **state)
{
	(void)state;
	struct endless e = {"", 1, 0};
	char err[256];
	endless_refused(&e, err, sizeof(err));
	assert_non_null(strstr(err, "z:1: a line longer than 4096 bytes"));
	assert_true(e.given <= (1u << 20)); /* a stdio buffer or so, not the stream */
}

/* An endless stream of well-formed lines: each became an entry, and the
 * array grew until memory ran out (60 MB a second through
 * cbcmn-affinity): at most STEALMX_MAX_PAIRS. */
static void test_stealmx_endless_pairs_are_refused(void **state)
{
	(void)state;
	struct endless e = {"0 1 0\n", 6, 0};
	char err[256], want[128];
	endless_refused(&e, err, sizeof(err));
	snprintf(want, sizeof(want), "z:%u: more than %u thief-victim lines", STEALMX_MAX_PAIRS + 1,
		 STEALMX_MAX_PAIRS);
	if (!strstr(err, want))
		fail_msg("want '%s...', got '%s'", want, err);
	assert_true(e.given < (32u << 20)); /* stopped at the bound, not the stream's end */
}

/* ---- the tools themselves ---------------------------------------------------------- */

static char bindir[PATH_MAX];   /* build[/SAN]/bin beside this suite, or $CBCMN_TOOLS_BIN */
static char fixtures[PATH_MAX]; /* tests/fixtures/sysfs */

static int find_dirs(void **state)
{
	(void)state;
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return 0;
	exe[n] = 0;
	char *d = dirname(exe);
	const char *env = getenv("CBCMN_TOOLS_BIN"); /* to run the checks on another build */
	if (env && *env)
		snprintf(bindir, sizeof(bindir), "%s", env);
	else
		snprintf(bindir, sizeof(bindir), "%.*s/../bin", (int)(sizeof(bindir) - 8), d);
	for (int up = 0; up < 5; up++) {
		char cand[PATH_MAX + 64];
		snprintf(cand, sizeof(cand), "%s/tests/fixtures/sysfs/vm2/devices", d);
		if (access(cand, F_OK) == 0) {
			snprintf(fixtures, sizeof(fixtures), "%.*s/tests/fixtures/sysfs",
				 (int)(sizeof(fixtures) - 32), d);
			break;
		}
		d = dirname(d);
	}
	return 0;
}

struct outcome {
	int status;     /* exit status; -1: killed (it hung) */
	char err[2048]; /* its stderr */
	size_t out_len; /* bytes on its stdout */
};

/* Where run_tool() sends the tool's stdout instead of a file it measures
 * (a test that fills it: /dev/full), or NULL; or a descriptor (a pipe
 * nobody reads), or -1. */
static const char *tool_stdout;
static int tool_stdout_fd = -1;
/* RLIMIT_NOFILE (soft and hard) of the tool, 0: the test's own; set by a
 * shell's ulimit, before the exec (the tools raise the soft limit). */
static unsigned tool_nofile;
/* Run the tool with a SIGPIPE pending (raised by a shell with it blocked,
 * then exec: a pending signal survives execve(2)). */
static bool tool_sigpipe_pending;

/* Runs bindir/tool with argv (argv[0] is the tool's name), stdin from
 * in (NULL: /dev/null), killed after secs. */
static void run_tool(const char *tool, const char *const *argv, const char *in, size_t in_len,
		     unsigned secs, struct outcome *o)
{
	char path[PATH_MAX + 64], efile[] = "/tmp/cbcmn-cli-err-XXXXXX", ofile[] = "/tmp/cbcmn-cli-out-XXXXXX",
	     ifile[] = "/tmp/cbcmn-cli-in-XXXXXX";
	snprintf(path, sizeof(path), "%s/%s", bindir, tool);
	if (access(path, X_OK) != 0)
		T_SKIP("%s is not built (make tools, or make SAN=... tools)", path);
	int efd = mkstemp(efile), ofd = mkstemp(ofile), ifd = mkstemp(ifile);
	assert_true(efd >= 0 && ofd >= 0 && ifd >= 0);
	if (in)
		assert_int_equal(write(ifd, in, in_len), (ssize_t)in_len);
	assert_int_equal(lseek(ifd, 0, SEEK_SET), 0);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, ifd, 0);
	if (tool_stdout)
		posix_spawn_file_actions_addopen(&fa, 1, tool_stdout, O_WRONLY, 0);
	else
		posix_spawn_file_actions_adddup2(&fa, tool_stdout_fd >= 0 ? tool_stdout_fd : ofd, 1);
	posix_spawn_file_actions_adddup2(&fa, efd, 2);
	pid_t pid;
	const char *sh[32];
	char script[64];
	if (tool_sigpipe_pending)
		snprintf(script, sizeof(script), "kill -PIPE $$; exec \"$0\" \"$@\"");
	else
		snprintf(script, sizeof(script), "ulimit -n %u && exec \"$0\" \"$@\"", tool_nofile);
	bool sh_wrap = tool_nofile || tool_sigpipe_pending;
	if (sh_wrap) {
		size_t k = 0;
		sh[k++] = "sh";
		sh[k++] = "-c";
		sh[k++] = script;
		sh[k++] = path;
		for (size_t i = 1; argv[i] && k < 31; i++)
			sh[k++] = argv[i];
		sh[k] = NULL;
	}
	assert_int_equal(posix_spawn(&pid, sh_wrap ? "/bin/sh" : path, &fa, NULL,
				     (char *const *)(sh_wrap ? sh : argv), environ),
			 0);
	posix_spawn_file_actions_destroy(&fa);
	int st = 0;
	uint64_t end = t_now_ns() + (uint64_t)secs * 1000000000ull;
	o->status = -1;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid) {
			o->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			break;
		}
		if (t_now_ns() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		usleep(10000);
	}
	ssize_t n = pread(efd, o->err, sizeof(o->err) - 1, 0);
	o->err[n > 0 ? n : 0] = 0;
	o->out_len = (size_t)lseek(ofd, 0, SEEK_END);
	close(efd);
	close(ofd);
	close(ifd);
	unlink(efile);
	unlink(ofile);
	unlink(ifile);
}

/* Refused: the status, one line on stderr saying so, nothing on stdout. */
static void expect_refused(const char *tool, const char *const *argv, int status, const char *says)
{
	struct outcome o;
	run_tool(tool, argv, NULL, 0, 20, &o);
	size_t len = strlen(o.err);
	bool one_line = len && o.err[len - 1] == '\n' && strchr(o.err, '\n') == o.err + len - 1;
	if (o.status != status || !one_line || !strstr(o.err, says) || o.out_len)
		fail_msg("%s %s %s: status %d (want %d), %zu bytes out, stderr '%s' (want one line with '%s')",
			 tool, argv[1] ? argv[1] : "", argv[1] && argv[2] ? argv[2] : "", o.status, status,
			 o.out_len, o.err, says);
}

/* cbcmn-stat -p cast a long to pid_t: 4294967297 watched process 1. */
static void test_stat_pid_above_pid_t_is_refused(void **state)
{
	(void)state;
	expect_refused("cbcmn-stat", L("cbcmn-stat", "-p", "4294967297", "-i", "0.1"), 1,
		       "-p wants a process id");
}

/* A count past LONG_MAX was taken as LONG_MAX (strtol saturates) and the
 * tool ran for ever; cbcmn-top's -n the same. */
static void test_count_overflow_is_refused(void **state)
{
	(void)state;
	char me[16];
	snprintf(me, sizeof(me), "%d", (int)getpid());
	expect_refused("cbcmn-stat", L("cbcmn-stat", "-p", me, "-i", "0.1", "-c", "99999999999999999999"), 1,
		       "-c wants");
	expect_refused("cbcmn-top", L("cbcmn-top", "-b", "-n", "99999999999999999999", "-p", me), 2,
		       "-n wants");
}

/* strtoull() negates "-5": 2^64 - 5 ns of spinning was accepted. */
static void test_bench_negative_spin_is_refused(void **state)
{
	(void)state;
	expect_refused("cbcmn-bench", L("cbcmn-bench", "--server-spin-ns", "-5", "nope"), 2,
		       "--server-spin-ns wants");
}

/* cbcmn-run refused "-1" by its first byte, but strtoull skips blanks:
 * " -1" was the seed 2^64 - 1 and the workload ran. */
static void test_run_seed_blank_minus_is_refused(void **state)
{
	(void)state;
	expect_refused("cbcmn-run", L("cbcmn-run", "fib", "--seed", " -1", "--duration", "0.05", "--workers", "1"),
		       2, "--seed wants");
}

/* An unknown option printed getopt's own line and then the whole usage. */
static void test_unknown_option_is_one_line(void **state)
{
	(void)state;
	expect_refused("cbcmn-bench", L("cbcmn-bench", "--bogus", "fib"), 2, "bad option '--bogus'");
	expect_refused("cbcmn-bench", L("cbcmn-bench"), 2, "which benchmark?");
	expect_refused("cbcmn-loadtest", L("cbcmn-loadtest", "--bogus"), 2, "bad option '--bogus'");
	expect_refused("cbcmn-loadtest", L("cbcmn-loadtest", "extra"), 2, "unexpected argument 'extra'");
	expect_refused("cbcmn-stat", L("cbcmn-stat", "-q"), 1, "bad option '-q'");
	expect_refused("cbcmn-demo", L("cbcmn-demo", "-x"), 2, "bad option '-x'");
	expect_refused("cbcmn-affinity", L("cbcmn-affinity", "--bogus"), 1, "bad option '--bogus'");
	expect_refused("cbcmn-run", L("cbcmn-run", "--bogus"), 2, "bad option '--bogus'");
	expect_refused("cbcmn-top", L("cbcmn-top", "--bogus"), 2, "bad option '--bogus'");
}

/* A name quoted in a message split it when it held a newline. */
static void test_quoted_newline_stays_one_line(void **state)
{
	(void)state;
	expect_refused("cbcmn-run", L("cbcmn-run", "fi\nb"), 2, "no workload named 'fi?b'");
	expect_refused("cbcmn-bench", L("cbcmn-bench", "fi\nb"), 2, "no benchmark named 'fi?b'");
	expect_refused("cbcmn-affinity", L("cbcmn-affinity", "-n", "1\n2"), 1, "-n wants 1..1048576, got '1?2'");
}

static void steal_matrix(const char *matrix, size_t len, int status, const char *says)
{
	if (!fixtures[0])
		T_SKIP("tests/fixtures/sysfs not found");
	char root[PATH_MAX + 16];
	snprintf(root, sizeof(root), "%s/vm2", fixtures);
	struct outcome o;
	run_tool("cbcmn-affinity", L("cbcmn-affinity", "--sysfs-root", root, "--steal-matrix", "-"),
		 matrix, len, 20, &o);
	size_t elen = strlen(o.err);
	if (o.status != status || (says && (!strstr(o.err, says) || strchr(o.err, '\n') != o.err + elen - 1)))
		fail_msg("status %d (want %d), stderr '%s' (want '%s')", o.status, status, o.err,
			 says ? says : "");
}

/* Through the tool: the wrapped sum printed a prediction of 0 steals. */
static void test_affinity_steal_sum_overflow_is_refused(void **state)
{
	(void)state;
	static const char wrap[] = "1 0 18446744073709551615\n0 1 1\n";
	steal_matrix(wrap, sizeof(wrap) - 1, 1, "-:1: the counts add up past");
	static const char nul[] = "1 0 5\0junk\n";
	steal_matrix(nul, sizeof(nul) - 1, 1, "-:1: a NUL byte");
	static const char ok[] = "1 0 5 7\n";
	steal_matrix(ok, sizeof(ok) - 1, 0, NULL);
}

/* A cpus: list's refusal said the policy twice ("cpus: cpus: CPU 5 is not
 * an online CPU"): cbcmn_place()'s messages for that list name it already. */
static void test_affinity_cpus_refusal_names_the_policy_once(void **state)
{
	(void)state;
	if (!fixtures[0])
		T_SKIP("tests/fixtures/sysfs not found");
	char root[PATH_MAX + 16];
	snprintf(root, sizeof(root), "%s/vm2", fixtures);
	expect_refused("cbcmn-affinity", L("cbcmn-affinity", "--sysfs-root", root, "-p", "cpus:5"), 1,
		       "cbcmn-affinity: cpus: CPU 5 is not an online CPU");
	expect_refused("cbcmn-affinity", L("cbcmn-affinity", "--sysfs-root", root, "-f", "5"), 1,
		       "cbcmn-affinity: depth-first: first_cpu 5 is not an allowed online CPU");
}

/* Output that could not be written is a failure: cbcmn-run said so on
 * stderr and exited 0; cbcmn-bench, cbcmn-demo and cbcmn-loadtest said
 * nothing and exited 0 (a script reading their
 * figures through a full disk took the silence for a run).  --help too:
 * every tool exited 0 with its usage lost. */
struct tool_run {
	const char *tool;
	const char *const *argv;
};

/* Short runs of the tools that print results. */
static const char *const run_text[] = {"cbcmn-run", "fib", "-n", "5", "-w", "1", "-d", "0.05", NULL},
			 *const run_json[] = {"cbcmn-run", "fib", "-n", "5", "-w", "1", "-d", "0.05",
					      "--json", NULL},
			 *const bench_run[] = {"cbcmn-bench", "checkpoint", "--reps", "1", NULL},
			 *const demo_run[] = {"cbcmn-demo", "-w", "1", NULL},
			 *const affinity_run[] = {"cbcmn-affinity", "-n", "1", NULL};
static const struct tool_run result_runs[] = {
	{"cbcmn-run", run_text},     {"cbcmn-run", run_json},	       {"cbcmn-bench", bench_run},
	{"cbcmn-demo", demo_run},    {"cbcmn-affinity", affinity_run},
};
#define NRESULT_RUNS (sizeof(result_runs) / sizeof(result_runs[0]))

static void test_unwritable_output_fails(void **state)
{
	(void)state;
	const struct tool_run more[] = {
		{"cbcmn-loadtest", L("cbcmn-loadtest", "-d", "0.1", "-c", "2", "-n", "0", "-i", "10",
				     "--no-http")},
		{"cbcmn-run", L("cbcmn-run", "--help")},
		{"cbcmn-bench", L("cbcmn-bench", "--help")},
		{"cbcmn-demo", L("cbcmn-demo", "-h")},
		{"cbcmn-affinity", L("cbcmn-affinity", "--help")},
		{"cbcmn-loadtest", L("cbcmn-loadtest", "--help")},
		{"cbcmn-top", L("cbcmn-top", "--help")},
		{"cbcmn-stat", L("cbcmn-stat", "--help")},
	};
	size_t nmore = sizeof(more) / sizeof(more[0]);
	for (size_t i = 0; i < NRESULT_RUNS + nmore; i++) {
		const struct tool_run *r = i < NRESULT_RUNS ? &result_runs[i] : &more[i - NRESULT_RUNS];
		struct outcome o;
		tool_stdout = "/dev/full"; /* for this run only: no later test gets it */
		run_tool(r->tool, r->argv, NULL, 0, 60, &o);
		tool_stdout = NULL;
		size_t len = strlen(o.err);
		bool one_line = len && o.err[len - 1] == '\n' && strchr(o.err, '\n') == o.err + len - 1;
		if (o.status != 1 || !one_line || !strstr(o.err, "writing the output failed"))
			fail_msg("%s %s: status %d (want 1), stderr '%s' (want one line saying so)",
				 r->tool, r->argv[1], o.status, o.err);
	}
}

/* A failed workload whose JSON went to a full disk said so in two lines,
 * its failure and "writing the output failed": one line says what was
 * wrong (the workload), exit 1.  The runtime cannot start with 12
 * descriptors (docs/RUN.md's example of a failure). */
static void test_a_failed_run_into_a_full_disk_says_one_line(void **state)
{
	(void)state;
	const char *const *argvs[] = {
		L("cbcmn-run", "fib", "-n", "5", "-w", "4", "-d", "0.05", "--json"),
		L("cbcmn-run", "fib", "-n", "5", "-w", "4", "-d", "0.05"),
	};
	for (size_t i = 0; i < sizeof(argvs) / sizeof(argvs[0]); i++) {
		struct outcome o;
		tool_stdout = "/dev/full"; /* for this run only */
		tool_nofile = 12;
		run_tool("cbcmn-run", argvs[i], NULL, 0, 60, &o);
		tool_stdout = NULL;
		tool_nofile = 0;
		size_t len = strlen(o.err);
		bool one_line = len && o.err[len - 1] == '\n' && strchr(o.err, '\n') == o.err + len - 1;
		if (o.status != 1 || !one_line || !strstr(o.err, "fib: cannot start the runtime"))
			fail_msg("run %zu: status %d (want 1), stderr '%s' (want one line, the "
				 "workload's failure)",
				 i, o.status, o.err);
	}
}

/* A reader that stops early (`| head -1`) ends the tools quietly: status
 * 141 (SIGPIPE) or 0 (all written before the close), nothing on stderr;
 * also where the parent left SIGPIPE ignored (before: "writing the output
 * failed", status 1), or blocked (a mask is inherited across exec: before
 * the twenty-fourth session each write failed with EPIPE, the signal
 * pending, and the tools said "writing the output failed", status 1). */
static void test_a_closed_pipe_ends_the_tools_quietly(void **state)
{
	(void)state;
	static const char *const mode[] = {"default", "ignored", "blocked"};
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	close(p[0]); /* the reader is gone before the tool writes */
	for (int m = 0; m < 3; m++) {
		void (*was)(int) = signal(SIGPIPE, m == 1 ? SIG_IGN : SIG_DFL); /* inherited */
		sigset_t pipe_set, old_mask;
		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		/* Inherited by posix_spawn() from this thread. */
		assert_int_equal(pthread_sigmask(m == 2 ? SIG_BLOCK : SIG_UNBLOCK, &pipe_set, &old_mask),
				 0);
		for (size_t i = 0; i < NRESULT_RUNS; i++) {
			const struct tool_run *r = &result_runs[i];
			struct outcome o;
			tool_stdout_fd = p[1];
			run_tool(r->tool, r->argv, NULL, 0, 60, &o);
			tool_stdout_fd = -1;
			if ((o.status != 141 && o.status != 0) || o.err[0]) {
				pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
				signal(SIGPIPE, was);
				fail_msg("%s %s (SIGPIPE %s): status %d (want 141 or 0), stderr '%s' "
					 "(want none)",
					 r->tool, r->argv[1], mode[m], o.status, o.err);
			}
		}
		pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
		signal(SIGPIPE, was);
	}
	close(p[1]);
}

/* A SIGPIPE pending when the tool starts (its parent blocked SIGPIPE, got
 * one, and exec'd the tool: a pending signal survives execve(2)) is not
 * the tool's: it runs and prints its results, status 0.  Unblocked as it
 * was by cli_sigpipe_default() (session 24), it ended bench, demo and
 * affinity at once, status 141, nothing printed. */
static void test_a_sigpipe_pending_at_start_is_not_the_tools(void **state)
{
	(void)state;
	sigset_t pipe_set, old_mask;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	void (*was)(int) = signal(SIGPIPE, SIG_DFL); /* inherited: a blocked one stays pending */
	/* Inherited by posix_spawn() from this thread, then by the shell. */
	assert_int_equal(pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask), 0);
	struct outcome o[NRESULT_RUNS];
	tool_sigpipe_pending = true;
	for (size_t i = 0; i < NRESULT_RUNS; i++)
		run_tool(result_runs[i].tool, result_runs[i].argv, NULL, 0, 60, &o[i]);
	tool_sigpipe_pending = false;
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	signal(SIGPIPE, was);
	for (size_t i = 0; i < NRESULT_RUNS; i++)
		if (o[i].status != 0 || !o[i].out_len)
			fail_msg("%s %s (a SIGPIPE pending at exec): status %d (want 0), %zu bytes "
				 "out, stderr '%s'",
				 result_runs[i].tool, result_runs[i].argv[1], o[i].status,
				 o[i].out_len, o[i].err);
}

/* A --trace file that is a pipe whose reader left (`--trace >(...)` that
 * stopped early) ended cbcmn-run by SIGPIPE mid-run, status 141 and
 * nothing said, also where the parent left SIGPIPE ignored (the
 * SIGPIPE default set for stdout's sake): the trace's failure is said,
 * status 1, and the results still printed (docs/RUN.md), SIGPIPE left
 * blocked by the parent too.  The reader
 * opens the FIFO and closes it at once; the trace is larger than a
 * pipe's buffer, so some write finds it gone. */
static void *fifo_open_close(void *arg)
{
	int fd = open(arg, O_RDONLY | O_CLOEXEC); /* until the tool opens it */
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void test_a_trace_into_a_closed_pipe_is_a_failure_said(void **state)
{
	(void)state;
	char dir[] = "/tmp/cbcmn-cli-fifo-XXXXXX", fifo[64];
	assert_non_null(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/trace", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	static const char *const mode[] = {"default", "ignored", "blocked"};
	struct outcome o[3];
	for (int ignored = 0; ignored < 3; ignored++) {
		void (*was)(int) = signal(SIGPIPE, ignored == 1 ? SIG_IGN : SIG_DFL); /* inherited */
		sigset_t pipe_set, old_mask;
		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		assert_int_equal(pthread_sigmask(ignored == 2 ? SIG_BLOCK : SIG_UNBLOCK, &pipe_set,
						 &old_mask),
				 0);
		pthread_t th;
		assert_int_equal(pthread_create(&th, NULL, fifo_open_close, fifo), 0);
		run_tool("cbcmn-run",
			 L("cbcmn-run", "fib", "-n", "5", "-w", "1", "-d", "0.05", "--trace", fifo), NULL,
			 0, 60, &o[ignored]);
		int fd = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC); /* a reader still waiting */
		if (fd >= 0)
			close(fd);
		pthread_join(th, NULL);
		pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
		signal(SIGPIPE, was);
	}
	unlink(fifo);
	rmdir(dir);
	for (int ignored = 0; ignored < 3; ignored++)
		if (o[ignored].status != 1 || !strstr(o[ignored].err, "--trace: writing") ||
		    !o[ignored].out_len)
			fail_msg("SIGPIPE %s: status %d (want 1), %zu bytes out, stderr '%s' (want "
				 "the trace's failure said, the results printed)",
				 mode[ignored], o[ignored].status,
				 o[ignored].out_len, o[ignored].err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_cli_u64),
		T_WATCHED_TEST(test_cli_i64),
		T_WATCHED_TEST(test_cli_secs),
		T_WATCHED_TEST(test_cli_secs_ignores_the_locale),
		T_WATCHED_TEST(test_cli_err_is_one_line),
		T_WATCHED_TEST(test_parsers_refuse_bad_input),
		T_WATCHED_TEST(test_parsers_take_good_input),
		T_WATCHED_TEST(test_stealmx),
		T_WATCHED_TEST(test_stealmx_sum_overflow_is_refused),
		T_WATCHED_TEST(test_stealmx_nul_byte_is_refused),
		T_WATCHED_TEST(test_stealmx_endless_line_is_refused_early),
		T_WATCHED_TEST(test_stealmx_endless_pairs_are_refused),
		T_WATCHED_TEST(test_stat_pid_above_pid_t_is_refused),
		T_WATCHED_TEST(test_count_overflow_is_refused),
		T_WATCHED_TEST(test_bench_negative_spin_is_refused),
		T_WATCHED_TEST(test_run_seed_blank_minus_is_refused),
		T_WATCHED_TEST(test_unknown_option_is_one_line),
		T_WATCHED_TEST(test_quoted_newline_stays_one_line),
		T_WATCHED_TEST(test_affinity_steal_sum_overflow_is_refused),
		T_WATCHED_TEST(test_affinity_cpus_refusal_names_the_policy_once),
		T_WATCHED_TEST(test_unwritable_output_fails),
		T_WATCHED_TEST(test_a_failed_run_into_a_full_disk_says_one_line),
		T_WATCHED_TEST(test_a_closed_pipe_ends_the_tools_quietly),
		T_WATCHED_TEST(test_a_sigpipe_pending_at_start_is_not_the_tools),
		T_WATCHED_TEST(test_a_trace_into_a_closed_pipe_is_a_failure_said),
	};
	return cmocka_run_group_tests(tests, find_dirs, NULL);
}
