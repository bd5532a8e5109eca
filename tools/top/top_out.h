/* top_out.h: cbcmn-top's batch output, plain text or one JSON object per
 * refresh (docs/TOP.md, "Batch mode"). */
#ifndef CBCMN_TOOLS_TOP_OUT_H
#define CBCMN_TOOLS_TOP_OUT_H

#include <stdio.h>

#include "top/top_model.h"

/* One plain-text snapshot: header lines, a row per shard (every column),
 * warnings, a blank line.  No escape codes.  Returns 0 or -EIO. */
int top_print_text(FILE *f, const struct top_model *m);

/* One JSON object on one line.  Returns 0 or -EIO. */
int top_print_json(FILE *f, const struct top_model *m);

/* The header's text lines, shared by the screen and the batch text:
 * line 0 process, executors, policy, uptime; 1 totals and rates; 2 kernel
 * figures; 3 own cost. */
#define TOP_HEADER_LINES 4
void top_header_line(const struct top_model *m, int line, char *buf, size_t len);

#endif
