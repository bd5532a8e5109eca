/* stealmx.h: the steal-matrix files of cbcmn-affinity --steal-matrix: a
 * measured steal pattern, one "THIEF VICTIM STEALS [TASKS]" line per
 * thief-victim pair (executor indexes, unsigned decimal numbers separated
 * by blanks), '#' starting a comment, blank lines ignored; as cbcmn-run
 * --bpf --json lists them in bpf.steal_pairs.
 *
 * The reader refuses, with one line naming the file and line: junk or a
 * field too many or too few, an index of STEALMX_MAX_EXECUTORS or more, an
 * executor stealing from itself, a NUL byte (not text), a line longer than
 * STEALMX_MAX_LINE bytes, more than STEALMX_MAX_PAIRS entries, and counts whose
 * sum, weighted by a node distance (at most 255), would not fit in 64
 * bits.  Pure apart from the FILE it reads: any thread may call it.
 */
#ifndef CBCMN_TOOLS_STEALMX_H
#define CBCMN_TOOLS_STEALMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* More executors than this is a typo, not a plan (CBCMN_MAX_EXECUTORS is
 * far lower); the bound keeps the arrays indexed by executor small. */
#define STEALMX_MAX_EXECUTORS (1u << 20)
/* The longest line, its newline included: four 20-digit numbers and a
 * comment fit many times over; a longer one is not a matrix (a binary). */
#define STEALMX_MAX_LINE 4096u
/* The most entries (lines with figures): a full matrix of 1024 executors
 * (CBCMN_MAX_EXECUTORS) has about 2^20 pairs, two such fit.  More is an
 * endless stream ('yes 0 1 0'), refused before memory runs out (48 MiB of
 * entries at most). */
#define STEALMX_MAX_PAIRS (1u << 21)
/* The largest sum of steals (and of tasks): times a distance of up to 255
 * it still fits in a uint64_t. */
#define STEALMX_MAX_TOTAL (UINT64_MAX / 256)

/* One thief -> victim entry (the same pair on two lines is two entries,
 * which add up). */
struct stealmx_pair {
	uint32_t thief, victim;
	uint64_t steals, tasks;
};

struct stealmx {
	struct stealmx_pair *v;
	size_t n, cap;
	uint32_t executors; /* the highest index + 1; 0 without a line */
	bool has_tasks;     /* some line had the fourth column */
	uint64_t steals, tasks; /* the sums, at most STEALMX_MAX_TOTAL */
};

/* Reads every line of f into m (zeroed by the caller); path names the file
 * in messages.  Returns 0; -1 with one line in err ("PATH:LINE: what", or
 * "PATH: why" when reading fails, or "out of memory"), m then freed. */
int stealmx_read(FILE *f, const char *path, struct stealmx *m, char *err, size_t errlen);

void stealmx_free(struct stealmx *m);

#endif
