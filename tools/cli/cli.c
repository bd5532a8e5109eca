/* cli.c: strict command-line values and getopt's refusals as one line
 * (cli.h). */
#include <errno.h>
#include <locale.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int hex_value(char c)
{
	if (is_digit(c))
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The magnitude of an unsigned number that is all of s: -EINVAL if s is
 * not one, -ERANGE if it does not fit in 64 bits. */
static int magnitude(const char *s, uint64_t *out)
{
	unsigned base = 10;
	uint64_t v = 0;
	bool big = false;

	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
	}
	if (!*s)
		return -EINVAL; /* "" or a bare "0x" */
	for (; *s; s++) {
		int d = base == 16 ? hex_value(*s) : is_digit(*s) ? *s - '0' : -1;
		if (d < 0)
			return -EINVAL;
		/* Keep scanning after an overflow: "99999999999999999999x" is
		 * junk, not a number out of range. */
		if (v > (UINT64_MAX - (uint64_t)d) / base)
			big = true;
		else
			v = v * base + (uint64_t)d;
	}
	*out = v;
	return big ? -ERANGE : 0;
}

int cli_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t v;
	int rc;

	if (!s)
		return -EINVAL;
	if ((rc = magnitude(s, &v)) != 0)
		return rc;
	if (v < lo || v > hi)
		return -ERANGE;
	*out = v;
	return 0;
}

int cli_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
	bool neg;
	uint64_t m;
	int64_t v;
	int rc;

	if (!s)
		return -EINVAL;
	neg = s[0] == '-';
	if ((rc = magnitude(s + neg, &m)) != 0)
		return rc;
	/* -2^63 is the one magnitude above INT64_MAX that fits. */
	if (m > (uint64_t)INT64_MAX + neg)
		return -ERANGE;
	v = neg ? (int64_t)(0 - m) : (int64_t)m;
	if (v < lo || v > hi)
		return -ERANGE;
	*out = v;
	return 0;
}

/* strtod() follows LC_NUMERIC, and cbcmn-top calls setlocale(): in a
 * locale with a decimal comma "0.5" would stop at the dot.  The "C"
 * locale, made once, reads every value the same way. */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void make_c_locale(void)
{
	c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

int cli_secs(const char *s, double lo, bool lo_open, double hi, double *out)
{
	const char *p = s;
	size_t digits = 0;

	if (!s)
		return -EINVAL;
	/* digits [. digits] [e [+-] digits], with a digit somewhere before
	 * the exponent: no sign, no space, no hex, no inf or nan. */
	for (; is_digit(*p); p++)
		digits++;
	if (*p == '.')
		for (p++; is_digit(*p); p++)
			digits++;
	if (!digits)
		return -EINVAL;
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!is_digit(*p))
			return -EINVAL;
		while (is_digit(*p))
			p++;
	}
	if (*p)
		return -EINVAL;
	pthread_once(&c_locale_once, make_c_locale);
	if (!c_locale)
		return -ENOMEM;
	double v = strtod_l(s, NULL, c_locale); /* overflow: HUGE_VAL, refused below */
	if (!(lo_open ? v > lo : v >= lo) || !(v <= hi))
		return -ERANGE;
	*out = v;
	return 0;
}

bool cli_stdout_flushed(const char *prog)
{
	if (!fflush(stdout) && !ferror(stdout))
		return true;
	fprintf(stderr, "%s: writing the output failed\n", prog);
	return false;
}

/* A signal mask is inherited across exec: a parent that blocked SIGPIPE
 * (for its own sake) left each write to a closed pipe failing with EPIPE,
 * the signal pending, and the tool said "writing the output failed",
 * status 1, where a filter ends quietly.  The calling thread's (the main
 * thread's, before any other: the runtime's threads inherit it). */
static void sigpipe_unblock(void)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGPIPE);
	pthread_sigmask(SIG_UNBLOCK, &s, NULL);
}

void cli_sigpipe_default(void)
{
	/* A SIGPIPE pending (a parent that blocked it got one, then exec'd
	 * us: a pending signal survives execve(2)) is not ours: unblocked
	 * with it, the tool ended at once, status 141, nothing printed.
	 * Setting SIG_IGN discards a pending one (POSIX, sigaction(2)); a
	 * caller about to raise its own (cli_stdout_gone()) raises it after. */
	signal(SIGPIPE, SIG_IGN);
	signal(SIGPIPE, SIG_DFL);
	sigpipe_unblock();
}

void cli_sigpipe_ignore(void)
{
	signal(SIGPIPE, SIG_IGN);
}

void cli_stdout_gone(int err)
{
	if (err != EPIPE)
		return;
	fflush(stderr);
	cli_sigpipe_default();
	raise(SIGPIPE);
}

char *cli_one_line(char *s)
{
	for (char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return s;
}

int cli_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	cli_one_line(err);
	return -1;
}

int cli_getopt_error(int c, int argc, char *const argv[], const struct option *longopts, char *err,
		     size_t errlen)
{
	/* A long option always advances optind past its word; a short one
	 * inside a cluster ("-jz") may not, so argv[optind - 1] is trusted
	 * only when it names the long option getopt complained about. */
	const char *word = optind > 0 && optind <= argc ? argv[optind - 1] : "";
	bool long_word = word && !strncmp(word, "--", 2) && word[2];
	size_t n = long_word ? strcspn(word + 2, "=") : 0;

	if (optopt == 0) /* an unknown or ambiguous long option */
		return cli_err(err, errlen, "bad option '%.*s' (unknown or ambiguous)", (int)(n + 2),
			       long_word ? word : "?");
	for (const struct option *o = longopts; o && o->name; o++) {
		if (o->val != optopt || !long_word || strlen(o->name) < n ||
		    strncmp(o->name, word + 2, n))
			continue;
		if (c == ':')
			return cli_err(err, errlen, "bad option '--%s': it needs an argument", o->name);
		return cli_err(err, errlen, "bad option '--%s': it takes no argument", o->name);
	}
	if (optopt < 0 || optopt > 0xff)
		return cli_err(err, errlen, "bad option '%s'", word ? word : "?");
	if (c == ':')
		return cli_err(err, errlen, "bad option '-%c': it needs an argument", optopt);
	return cli_err(err, errlen, "bad option '-%c' (unknown)", optopt);
}
