/* top_record.h: cbcmn-top --record: what the viewer reads, sample by
 * sample, as a Chrome JSON trace (export/chrome_trace.h) that
 * ui.perfetto.dev and chrome://tracing open (docs/TOP.md, "Recording").
 *
 * The source is the viewer's: the statistics segment's cumulative
 * counters and, with kernel figures on, the eBPF steal pairs.  Neither
 * holds single events, so the trace holds what changed between two
 * samples: a slice per executor and interval with the interval's counts,
 * instants for its steals, parks, doorbells, SQEs and CQEs, steal arrows
 * victim -> thief per pair (kernel figures), counter tracks of the rates.
 * The sums of the counts are the counters' growth from the first sample
 * to the last, exactly; otherData holds both ends.
 *
 * One thread: the model's (top_rec_read is its on_read hook).
 */
#ifndef CBCMN_TOOLS_TOP_RECORD_H
#define CBCMN_TOOLS_TOP_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "cbcmn.h"
#include "top/top_model.h"

struct top_rec;

/* Create (or truncate) path, which must outlive the recorder; nothing is
 * read yet.  Returns 0, or a
 * negative errno with one line in err ("PATH: Permission denied"). */
int top_rec_open(struct top_rec **out, const char *path, char *err, size_t errlen);

/* The model's on_read hook (struct top_model_opts), arg the recorder: the
 * first call sets the trace's time 0 and names the tracks; each later one
 * writes the interval since the one before. */
void top_rec_read(const struct top_model *m, uint64_t t_ns, const cbcmn_stats *st,
		  const cbcmn_executor_stats *per, uint32_t n, void *arg);

/* End the trace (otherData: the source, the counters at the first and the
 * last sample, lost events) and free r; m is the model recorded (NULL: it
 * never opened).  Returns 0, or a negative errno with one line in err
 * (writing failed, out of memory).  NULL r is fine. */
int top_rec_close(struct top_rec *r, const struct top_model *m, char *err, size_t errlen);

#endif
