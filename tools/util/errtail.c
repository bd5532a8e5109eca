/* errtail.c: the last lines of a child's stderr, read on a thread (errtail.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/errtail.h"

static const char cut_mark[] = "...";

struct errtail {
	pthread_mutex_t mu; /* everything below but the descriptors */
	pthread_cond_t cv;  /* eof became true */
	pthread_t th;
	int fd, copy_fd, wake[2];
	bool eof, joined;
	/* Line k (0-based, complete lines only) is in ring[k % ERRTAIL_LINES]. */
	char ring[ERRTAIL_LINES][ERRTAIL_LINE_MAX + sizeof(cut_mark)];
	size_t total;   /* complete lines so far */
	size_t printed; /* lines 0..printed-1 were printed or dropped */
	char cur[ERRTAIL_LINE_MAX + sizeof(cut_mark)];
	size_t curlen;
	bool cur_cut, cur_any; /* cut at ERRTAIL_LINE_MAX; a byte since the last newline */
	bool cur_cr;           /* a carriage return last: what comes next starts the line over */
};

/* The line being built is complete: into the ring.  Under mu. */
static void push_line(struct errtail *t)
{
	t->cur[t->curlen] = 0;
	memcpy(t->ring[t->total % ERRTAIL_LINES], t->cur, t->curlen + 1);
	t->total++;
	t->curlen = 0;
	t->cur_cut = t->cur_any = t->cur_cr = false;
}

/* Under mu.  Control bytes are stored as '?' already: a stored line is a
 * C string with nothing in it that moves a terminal's cursor. */
static void feed(struct errtail *t, const char *buf, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (c == '\n') {
			push_line(t);
			continue;
		}
		t->cur_any = true;
		/* A carriage return moves a terminal's cursor back: what follows
		 * writes over the line (a progress report), unless it is the
		 * newline of CRLF. */
		if (c == '\r') {
			t->cur_cr = true;
			continue;
		}
		if (t->cur_cr) {
			t->curlen = 0;
			t->cur_cut = t->cur_cr = false;
		}
		if (t->cur_cut)
			continue;
		if (t->curlen == ERRTAIL_LINE_MAX) {
			/* A continuation byte: the cut splits a character,
			 * whose first bytes would print as '?': cut before it. */
			if (c >= 0x80 && c < 0xc0) {
				size_t k = t->curlen, back = 0;
				while (back < 3 && k > 0 && ((unsigned char)t->cur[k - 1] & 0xc0) == 0x80)
					k--, back++;
				if (k > 0 && (unsigned char)t->cur[k - 1] >= 0xc0)
					t->curlen = k - 1;
			}
			memcpy(t->cur + t->curlen, cut_mark, sizeof(cut_mark) - 1);
			t->curlen += sizeof(cut_mark) - 1;
			t->cur_cut = true;
			continue;
		}
		t->cur[t->curlen++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
}

static void write_all(int fd, const char *buf, size_t n)
{
	while (n) {
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* a full disk, a closed file: the ring still has it */
		buf += w;
		n -= (size_t)w;
	}
}

static void *reader_main(void *arg)
{
	struct errtail *t = arg;
	char buf[4096];
	for (;;) {
		struct pollfd p[2] = {{t->fd, POLLIN, 0}, {t->wake[0], POLLIN, 0}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			return NULL; /* errtail_stop: done waiting */
		ssize_t n = read(t->fd, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break;
		if (t->copy_fd >= 0)
			write_all(t->copy_fd, buf, (size_t)n);
		pthread_mutex_lock(&t->mu);
		feed(t, buf, (size_t)n);
		pthread_mutex_unlock(&t->mu);
	}
	pthread_mutex_lock(&t->mu);
	t->eof = true;
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

int errtail_open(struct errtail **out, int fd, int copy_fd)
{
	struct errtail *t = calloc(1, sizeof(*t));
	if (!t) {
		close(fd);
		return -ENOMEM;
	}
	t->fd = fd;
	t->copy_fd = copy_fd;
	pthread_mutex_init(&t->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pipe2(t->wake, O_CLOEXEC)) {
		int e = -errno;
		t->wake[0] = t->wake[1] = -1;
		t->joined = true;
		errtail_close(t);
		return e;
	}
	/* Signals are the main thread's: its sleeps and its screen's reads
	 * must be the ones a ^C interrupts.  Not a fault of this thread's own,
	 * which blocked would kill the process past the owner's handler
	 * (cbcmn-top's gives the terminal back). */
	sigset_t all, old;
	sigfillset(&all);
	static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
		sigdelset(&all, faults[i]);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&t->th, NULL, reader_main, t);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		t->joined = true;
		errtail_close(t);
		return -rc;
	}
	*out = t;
	return 0;
}

void errtail_stop(struct errtail *t, unsigned wait_ms)
{
	if (t->joined)
		return;
	struct timespec at;
	clock_gettime(CLOCK_MONOTONIC, &at);
	uint64_t ns = (uint64_t)at.tv_nsec + (uint64_t)wait_ms * 1000000u;
	at.tv_sec += (time_t)(ns / 1000000000u);
	at.tv_nsec = (long)(ns % 1000000000u);
	pthread_mutex_lock(&t->mu);
	while (!t->eof && pthread_cond_timedwait(&t->cv, &t->mu, &at) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&t->mu);
	ssize_t w = write(t->wake[1], "", 1);
	(void)w; /* a pipe of ours with room for one byte */
	pthread_join(t->th, NULL);
	t->joined = true;
	if (t->cur_any)
		push_line(t);
}

/* Bytes of a well-formed UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned lo = 0x80, hi = 0xbf; /* the second byte's range */
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, lo = s[0] == 0xe0 ? 0xa0 : 0x80, hi = s[0] == 0xed ? 0x9f : 0xbf;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, lo = s[0] == 0xf0 ? 0x90 : 0x80, hi = s[0] == 0xf4 ? 0x8f : 0xbf;
	else
		return 0; /* a continuation byte, an overlong lead, or beyond U+10FFFF */
	if (len > n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/* s with every byte that is not part of well-formed UTF-8 as '?'. */
static void put_line(FILE *f, const char *prefix, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	fputs(prefix, f);
	for (size_t i = 0; i < n;) {
		size_t k = utf8_len(p + i, n - i);
		if (k)
			fwrite(p + i, 1, k, f);
		else
			fputc('?', f);
		i += k ? k : 1;
	}
	fputc('\n', f);
}

size_t errtail_print(struct errtail *t, FILE *f, const char *prefix)
{
	pthread_mutex_lock(&t->mu);
	size_t first = t->total > ERRTAIL_LINES ? t->total - ERRTAIL_LINES : 0;
	if (first > t->printed)
		fprintf(f, "%s(%zu earlier lines not kept)\n", prefix, first - t->printed);
	else
		first = t->printed;
	for (size_t k = first; k < t->total; k++)
		put_line(f, prefix, t->ring[k % ERRTAIL_LINES]);
	size_t n = t->total - first;
	t->printed = t->total;
	pthread_mutex_unlock(&t->mu);
	fflush(f);
	return n;
}

size_t errtail_pending(struct errtail *t)
{
	pthread_mutex_lock(&t->mu);
	size_t n = t->total - t->printed;
	pthread_mutex_unlock(&t->mu);
	return n;
}

void errtail_close(struct errtail *t)
{
	if (!t)
		return;
	errtail_stop(t, 0);
	close(t->fd);
	if (t->wake[0] >= 0) {
		close(t->wake[0]);
		close(t->wake[1]);
	}
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
}
