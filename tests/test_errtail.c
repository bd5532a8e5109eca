/* test_errtail: the last lines of a child's stderr (tools/util/errtail),
 * which cbcmn-top prints when a command it started dies.  Here in process,
 * so that ASan and TSan see the reading thread: lines in order, the last
 * ERRTAIL_LINES kept and the rest counted, long lines cut, bytes unsafe
 * on a terminal replaced, the copy written whole, a writer that never
 * blocks, and a stop that waits for the end of the stream only so long. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "util/errtail.h"

/* What errtail_print printed, as a string (freed by the caller). */
static char *printed(struct errtail *t, const char *prefix, size_t *nlines)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	size_t n = errtail_print(t, f, prefix);
	assert_int_equal(fclose(f), 0);
	if (nlines)
		*nlines = n;
	return buf;
}

static void write_str(int fd, const char *s)
{
	assert_int_equal(write(fd, s, strlen(s)), (ssize_t)strlen(s));
}

static struct errtail *open_pipe(int *wfd, int copy_fd)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	struct errtail *t;
	assert_int_equal(errtail_open(&t, p[0], copy_fd), 0);
	*wfd = p[1];
	return t;
}

/* Lines in order; a line without a newline is complete at the stop;
 * what was printed is not printed again. */
static void test_lines_in_order(void **state)
{
	(void)state;
	int w;
	struct errtail *t = open_pipe(&w, -1);
	write_str(w, "one\ntwo\nthr");
	write_str(w, "ee\nunfinished");
	close(w);
	errtail_stop(t, 5000);
	size_t n;
	char *s = printed(t, "x[1]: ", &n);
	assert_int_equal(n, 4);
	assert_string_equal(s, "x[1]: one\nx[1]: two\nx[1]: three\nx[1]: unfinished\n");
	free(s);
	s = printed(t, "x[1]: ", &n);
	assert_int_equal(n, 0);
	assert_string_equal(s, "");
	free(s);
	errtail_close(t);
}

/* Escape sequences, NUL, DEL and bad UTF-8 are '?' (a CR starts the line
 * over: test_regression_carriage_returns_keep_the_last_state); good UTF-8
 * stays.
 * Overlong forms, surrogates, code points past U+10FFFF and a sequence
 * cut short are bad. */
static void test_unsafe_bytes_replaced(void **state)
{
	(void)state;
	int w;
	struct errtail *t = open_pipe(&w, -1);
	static const char in[] = "a\033[2Jb\x1b\bc\0d\x7f"
				 "e \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 "
				 "\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82 \xff\n";
	assert_int_equal(write(w, in, sizeof(in) - 1), (ssize_t)sizeof(in) - 1);
	close(w);
	errtail_stop(t, 5000);
	char *s = printed(t, "", NULL);
	assert_string_equal(s, "a?[2Jb??c?d?e \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 ?? ??? ???? ?? ?\n");
	free(s);
	errtail_close(t);
}

/* More lines than the ring holds, and a line longer than a line may be:
 * the last ERRTAIL_LINES, a count of the others, the long one cut with
 * "...".  The copy has every byte. */
static void test_flood_keeps_the_last(void **state)
{
	(void)state;
	char copy[] = "/tmp/test_errtail-XXXXXX";
	int cfd = mkstemp(copy);
	assert_true(cfd >= 0);
	unlink(copy);
	int w;
	struct errtail *t = open_pipe(&w, cfd);
	/* Far more than a pipe holds: the writer would block on a reader
	 * that does not keep up. */
	size_t total = 0;
	char line[64];
	for (int i = 0; i < 20000; i++) {
		int k = snprintf(line, sizeof(line), "line %d\n", i);
		write_str(w, line);
		total += (size_t)k;
	}
	char *longl = malloc(ERRTAIL_LINE_MAX * 3 + 2);
	assert_non_null(longl);
	memset(longl, 'x', ERRTAIL_LINE_MAX * 3);
	longl[ERRTAIL_LINE_MAX * 3] = '\n';
	longl[ERRTAIL_LINE_MAX * 3 + 1] = 0;
	write_str(w, longl);
	total += ERRTAIL_LINE_MAX * 3 + 1;
	close(w);
	errtail_stop(t, 5000);
	assert_int_equal(errtail_pending(t), 20001);
	size_t n;
	char *s = printed(t, "p: ", &n);
	assert_int_equal(n, ERRTAIL_LINES);
	char want[64];
	snprintf(want, sizeof(want), "p: (%d earlier lines not kept)\np: line %d\n",
		 20001 - ERRTAIL_LINES, 20001 - ERRTAIL_LINES);
	assert_true(!strncmp(s, want, strlen(want)));
	char *last = strstr(s, "p: xxx");
	assert_non_null(last);
	assert_int_equal(strlen(last), 3 + ERRTAIL_LINE_MAX + 3 + 1);
	assert_true(!strcmp(last + 3 + ERRTAIL_LINE_MAX, "...\n"));
	free(s);
	free(longl);
	errtail_close(t);
	assert_int_equal(lseek(cfd, 0, SEEK_END), (off_t)total);
	close(cfd);
}

/* A writer that keeps the pipe: the stop waits as long as asked, no more,
 * and still has what came; a close without a stop does not wait. */
static void test_stop_is_bounded(void **state)
{
	(void)state;
	int w;
	struct errtail *t = open_pipe(&w, -1);
	write_str(w, "held\n");
	uint64_t t0 = t_now_ns();
	errtail_stop(t, 200);
	uint64_t took = t_now_ns() - t0;
	assert_true(took >= 190000000ull);
	assert_true(took < T_STALL_NS);
	char *s = printed(t, "", NULL);
	assert_string_equal(s, "held\n");
	free(s);
	errtail_stop(t, 5000); /* again: nothing to wait for */
	errtail_close(t);
	close(w);

	t = open_pipe(&w, -1);
	t0 = t_now_ns();
	errtail_close(t);
	assert_true(t_now_ns() - t0 < T_STALL_NS);
	close(w);
}

/* The bug: a carriage return was stored as '?', so a command that reports
 * progress on one line ("\rstep 1/200\rstep 2/200...") made one long line
 * cut after its first ERRTAIL_LINE_MAX bytes: cbcmn-top showed the first
 * steps and lost what the command wrote last, its error included.  A
 * carriage return now starts the line over, as on a terminal; CRLF still
 * ends a line with its text. */
static void test_regression_carriage_returns_keep_the_last_state(void **state)
{
	(void)state;
	int w;
	struct errtail *t = open_pipe(&w, -1);
	char step[32];
	for (int i = 1; i <= 200; i++) {
		snprintf(step, sizeof(step), "\rstep %d/200", i);
		write_str(w, step);
	}
	write_str(w, "\rfatal: out of disk\r\n");
	write_str(w, "crlf line\r\n");
	write_str(w, "ends in a return\r\r");
	close(w);
	errtail_stop(t, 5000);
	size_t n;
	char *s = printed(t, "", &n);
	assert_string_equal(s, "fatal: out of disk\ncrlf line\nends in a return\n");
	assert_int_equal(n, 3);
	free(s);
	errtail_close(t);
}

/* The bug: a line cut at ERRTAIL_LINE_MAX in the middle of a character
 * kept the character's first bytes, printed as '?' before the "...": a
 * byte the command never wrote.  The cut now falls before the character. */
static void test_regression_cut_inside_a_character_prints_no_question_mark(void **state)
{
	(void)state;
	for (size_t before = 1; before <= 3; before++) {
		int w;
		struct errtail *t = open_pipe(&w, -1);
		/* "\xf0\x9f\x98\x80" (4 bytes) with 1, 2 or 3 of them inside
		 * the kept ERRTAIL_LINE_MAX. */
		char line[ERRTAIL_LINE_MAX + 16];
		size_t x = ERRTAIL_LINE_MAX - before;
		memset(line, 'x', x);
		memcpy(line + x, "\xf0\x9f\x98\x80 tail\n", 10);
		assert_int_equal(write(w, line, x + 10), (ssize_t)(x + 10));
		close(w);
		errtail_stop(t, 5000);
		char *s = printed(t, "", NULL);
		assert_int_equal(strlen(s), x + 4);
		assert_null(strchr(s, '?'));
		assert_string_equal(s + x, "...\n");
		free(s);
		errtail_close(t);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_lines_in_order),
		T_WATCHED_TEST(test_unsafe_bytes_replaced),
		T_WATCHED_TEST(test_flood_keeps_the_last),
		T_WATCHED_TEST(test_stop_is_bounded),
		T_WATCHED_TEST(test_regression_carriage_returns_keep_the_last_state),
		T_WATCHED_TEST(test_regression_cut_inside_a_character_prints_no_question_mark),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
