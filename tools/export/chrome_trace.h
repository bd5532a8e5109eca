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
 * what, in one line.  Ignores SIGXFSZ, for the whole process: a write
 * past the file size limit (ulimit -f) then fails with EFBIG, reported at
 * ct_close() as a full disk's is, instead of killing the tool in the
 * middle of the trace (a program the tool starts wants SIG_DFL back). */
int ct_open(struct ct_writer *w, const char *path, uint64_t t0_ns, uint64_t limit, char *err,
	    size_t errlen);

/* Name the tracks: process name, "executor N" for tid N in [0, n). */
void ct_names(struct ct_writer *w, const char *process, uint32_t n);
/* Name one more track: "executor N" for executor exec (one born later). */
void ct_track(struct ct_writer *w, uint32_t exec);

void ct_events(struct ct_writer *w, const cbcmn_trace_event *ev, size_t n);

/* Single events, for a writer whose source is not cbcmn_trace_drain()
 * (cbcmn-top --record: what changed between two samples).  exec is an
 * executor's index (its track), args a JSON object's members without the
 * braces ("\"tasks\":3"), or NULL; each counts as one event against the
 * limit.  A complete slice; an instant; a steal arrow from the victim's
 * track to the thief's (both ends at ts); a counter track of the process
 * (name), one value per member of args. */
void ct_slice(struct ct_writer *w, uint32_t exec, const char *name, const char *cat,
	      uint64_t ts_ns, uint64_t dur_ns, const char *args);
void ct_instant(struct ct_writer *w, uint32_t exec, const char *name, const char *cat,
		uint64_t ts_ns, const char *args);
void ct_steal(struct ct_writer *w, uint32_t thief, uint32_t victim, uint64_t ts_ns,
	      const char *args);
void ct_counter(struct ct_writer *w, const char *name, uint64_t ts_ns, const char *args);

/* End the trace: "t0_ns" (the trace's time 0, CLOCK_MONOTONIC ns) and
 * otherdata (a JSON object's members, without braces, or NULL) go under
 * "otherData".  Closes the file in every case.  Returns
 * 0, or -EIO when some write failed (a full disk). */
int ct_close(struct ct_writer *w, const char *otherdata);

#endif
