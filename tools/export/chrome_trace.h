/* chrome_trace.h: cbcmn_trace_drain()'s events as a Chrome JSON trace
 * (the Trace Event Format's object form), which chrome://tracing and
 * ui.perfetto.dev open: one track (tid) per executor, task runs and parks
 * as complete slices, steals as flow arrows from the victim's track to
 * the thief's, each fiber I/O call as an async span, doorbells and I/O
 * batches as instants.  docs/TRACE.md.
 *
 * One writer, one thread at a time.
 */
#ifndef CBCMN_TOOLS_CHROME_TRACE_H
#define CBCMN_TOOLS_CHROME_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cbcmn.h"

struct ct_writer {
	FILE *f;
	int pid;
	uint64_t t0_ns;     /* the trace's time 0 (CLOCK_MONOTONIC) */
	uint64_t limit;     /* events written at most; the rest are counted */
	uint64_t written;   /* events written (metadata aside) */
	uint64_t over;      /* events past the limit, not written */
	uint64_t flows;     /* steal arrows so far: their ids */
	uint64_t spans;     /* I/O calls so far: their ids */
	bool any;           /* something is in the array: a comma goes first */
};

/* Create path and begin the trace; t0_ns is its time 0, limit the most
 * events it will hold.  Returns 0, or a negative errno with err saying
 * what, in one line. */
int ct_open(struct ct_writer *w, const char *path, uint64_t t0_ns, uint64_t limit, char *err,
	    size_t errlen);

/* Name the tracks: process name, "executor N" for tid N in [0, n). */
void ct_names(struct ct_writer *w, const char *process, uint32_t n);

void ct_events(struct ct_writer *w, const cbcmn_trace_event *ev, size_t n);

/* End the trace: otherdata (a JSON object's members, without braces, or
 * NULL) goes under "otherData".  Closes the file in every case.  Returns
 * 0, or -EIO when some write failed (a full disk). */
int ct_close(struct ct_writer *w, const char *otherdata);

#endif
