/* cli.h: strict parsing of the values the tools take on their command lines
 * (numbers, seconds) and the one-line messages for what getopt refuses.
 *
 * Strict means: the whole string is the value, nothing else.  No leading
 * white space, no '+', no trailing junk ("12abc"), no empty string, no
 * negative number where a count is wanted (strtoull("-1") is 2^64 - 1),
 * nothing that overflows, no "inf" or "nan".  Integers are decimal, or
 * hexadecimal after "0x" (seeds are often written so); a leading 0 does
 * not make a number octal.  Seconds are decimal with an optional fraction
 * and exponent ("0.5", "2", "1e-3"), read the same in every locale.
 *
 * Pure functions (cli_getopt_error reads getopt's optind and optopt): any
 * thread may call them.
 */
#ifndef CBCMN_TOOLS_CLI_H
#define CBCMN_TOOLS_CLI_H

#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An unsigned integer in lo..hi.  Returns 0 with *out set; -EINVAL if s is
 * not a number; -ERANGE if it is one outside lo..hi (overflow included). */
int cli_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* The same with an optional leading '-' ("-1" for "none"), in lo..hi. */
int cli_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* Seconds in lo..hi, or (lo, hi] when lo_open.  Returns 0, -EINVAL (not a
 * number) or -ERANGE. */
int cli_secs(const char *s, double lo, bool lo_open, double hi, double *out);

/* Turns every control byte of s into '?': a message that quotes what a
 * user gave stays one line.  Returns s. */
char *cli_one_line(char *s);

/* Formats one line into err (printf-style) and turns every control byte
 * into '?', so that an argument quoted in it cannot split it.  Returns -1,
 * the parsers' error value. */
int cli_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Flushes stdout.  False, with "prog: writing the output failed" on
 * stderr, when what was printed could not be written (a full disk; a
 * closed pipe too where SIGPIPE is ignored, else that signal ends the tool
 * first, as any filter): the tool then fails, so that lost output never
 * passes for a result. */
bool cli_stdout_flushed(const char *prog);

/* SIGPIPE back to its default, and unblocked in the calling thread: a
 * reader that stops early (`| head -1`) ends the tool quietly, status 141,
 * as any filter, also where the parent left SIGPIPE ignored or blocked
 * (then each write failed with EPIPE and the tool said "writing the
 * output failed", status 1).  Call it before any thread starts.  For the tools that print
 * results and write no file of their own (bench, affinity, demo);
 * cbcmn-top ignores SIGPIPE and says so (docs/TOP.md). */
void cli_sigpipe_default(void);

/* For a tool that also writes a file of its own (cbcmn-run's --trace,
 * which may be a pipe: `--trace >(gzip >t.gz)`): SIGPIPE ignored, so that
 * a file whose reader left fails its write with EPIPE, said, status 1,
 * and does not end the tool mid-run by the signal; its stdout then ends
 * it as a filter through cli_stdout_gone(). */
void cli_sigpipe_ignore(void);

/* After a write to stdout failed with err (an errno): a reader that left
 * (EPIPE) ends the tool as SIGPIPE's default action would, quietly, status
 * 141, SIGPIPE blocked or not; any other error returns (the caller says
 * it). */
void cli_stdout_gone(int err);

/* Says in err what getopt_long refused, given what it returned (c, '?' or
 * ':'), with opterr = 0 and an optstring whose first option character is
 * preceded by ':' (so that ':' means a missing argument): an unknown
 * option, a missing argument, or an argument given to a long option that
 * takes none.  Returns -1. */
int cli_getopt_error(int c, int argc, char *const argv[], const struct option *longopts, char *err,
		     size_t errlen);

#endif
