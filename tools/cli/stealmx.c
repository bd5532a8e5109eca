/* stealmx.c: reading a steal-matrix file (stealmx.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/stealmx.h"

/* Unsigned decimal fields of a line, at most max of them; -1 on junk or a
 * number that does not fit in 64 bits. */
static int fields(const char *s, uint64_t *out, int max)
{
	int k = 0;

	for (;;) {
		while (*s == ' ' || *s == '\t')
			s++;
		if (!*s || *s == '\n' || *s == '\r' || *s == '#')
			return k;
		if (k == max || *s < '0' || *s > '9')
			return -1;
		uint64_t v = 0;
		for (; *s >= '0' && *s <= '9'; s++) {
			if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
				return -1;
			v = v * 10 + (uint64_t)(*s - '0');
		}
		if (*s && *s != ' ' && *s != '\t' && *s != '\n' && *s != '\r' && *s != '#')
			return -1;
		out[k++] = v;
	}
}

void stealmx_free(struct stealmx *m)
{
	free(m->v);
	*m = (struct stealmx){0};
}

/* Ends the read: m freed, the line in err. */
#define FAIL(...)                                      \
	do {                                           \
		cli_err(err, errlen, __VA_ARGS__);     \
		stealmx_free(m);                       \
		return -1;                             \
	} while (0)

/* One line of f into line (STEALMX_MAX_LINE bytes and a NUL), its newline
 * kept: its length, 0 at the end of f, -1 when it does not fit.  Not
 * getline(): a file with no newline (a binary, /dev/zero) grew its buffer
 * until memory ran out before anything was said about it. */
static ssize_t read_line(FILE *f, char *line)
{
	size_t n = 0;
	int ch;

	while ((ch = getc(f)) != EOF) {
		if (n == STEALMX_MAX_LINE)
			return -1;
		line[n++] = (char)ch;
		if (ch == '\n')
			break;
	}
	line[n] = 0;
	return (ssize_t)n;
}

int stealmx_read(FILE *f, const char *path, struct stealmx *m, char *err, size_t errlen)
{
	char line[STEALMX_MAX_LINE + 1];
	ssize_t got;
	unsigned long lineno = 0;

	while ((got = read_line(f, line)) != 0) {
		uint64_t x[4];
		int k;

		lineno++;
		if (got < 0)
			FAIL("%s:%lu: a line longer than %u bytes: not a steal matrix", path, lineno,
			     STEALMX_MAX_LINE);
		/* fields() would stop at a NUL and take the rest for the end. */
		if (memchr(line, 0, (size_t)got))
			FAIL("%s:%lu: a NUL byte: not a text file", path, lineno);
		k = fields(line, x, 4);
		if (k == 0)
			continue;
		if (k < 3)
			FAIL("%s:%lu: expected 'THIEF VICTIM STEALS [TASKS]' (unsigned numbers)", path,
			     lineno);
		if (x[0] >= STEALMX_MAX_EXECUTORS || x[1] >= STEALMX_MAX_EXECUTORS)
			FAIL("%s:%lu: executor index above %u", path, lineno, STEALMX_MAX_EXECUTORS - 1);
		if (x[0] == x[1])
			FAIL("%s:%lu: executor %" PRIu64 " steals from itself", path, lineno, x[0]);
		uint64_t tasks = k == 4 ? x[3] : 0;
		/* The sums are divided by, and the steals weighted by distances
		 * of up to 255: a total that wraps would print a wrong figure. */
		if (x[2] > STEALMX_MAX_TOTAL - m->steals || tasks > STEALMX_MAX_TOTAL - m->tasks)
			FAIL("%s:%lu: the counts add up past %" PRIu64, path, lineno,
			     (uint64_t)STEALMX_MAX_TOTAL);
		if (m->n == STEALMX_MAX_PAIRS)
			FAIL("%s:%lu: more than %u thief-victim lines: not a steal matrix", path,
			     lineno, STEALMX_MAX_PAIRS);
		if (m->n == m->cap) {
			size_t cap = m->cap ? 2 * m->cap : 64;
			struct stealmx_pair *v = realloc(m->v, cap * sizeof(*v));

			if (!v)
				FAIL("out of memory");
			m->v = v;
			m->cap = cap;
		}
		m->v[m->n++] = (struct stealmx_pair){(uint32_t)x[0], (uint32_t)x[1], x[2], tasks};
		m->has_tasks |= k == 4;
		m->steals += x[2];
		m->tasks += tasks;
		for (int i = 0; i < 2; i++)
			if (x[i] + 1 > m->executors)
				m->executors = (uint32_t)x[i] + 1;
	}
	if (ferror(f))
		FAIL("%s: %s", path, strerror(errno));
	return 0;
}
