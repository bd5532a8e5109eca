/* top_record.h: cbcmn-top --record: what the target did, as a Chrome JSON
 * trace (export/chrome_trace.h) that ui.perfetto.dev and chrome://tracing
 * open (docs/TOP.md, "Recording").
 *
 * A target started with CBCMN_TRACE_EVENTS keeps its trace rings in a
 * shared memfd (lib/trace_seg.h): a thread of ours drains them every 5 ms
 * and the trace holds its single events, as cbcmn-run --trace's, plus the
 * samples' rates as counter tracks.
 *
 * Without them the source is the viewer's: the statistics segment's cumulative
 * counters and, with kernel figures on, the eBPF steal pairs.  Neither
 * holds single events, so the trace holds what changed between two
 * samples: a slice per executor and interval with the interval's counts,
 * instants for its steals, parks, doorbells, SQEs and CQEs, steal arrows
 * victim -> thief per pair (kernel figures), counter tracks of the rates.
 * The sums of the counts are the counters' growth from the first sample
 * to the last, exactly; otherData holds both ends.
 *
 * top_rec_read is the model's on_read hook (its thread); the drain thread
 * shares the writer under a mutex.
 */
#ifndef CBCMN_TOOLS_TOP_RECORD_H
#define CBCMN_TOOLS_TOP_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cbcmn.h"
#include "top/top_model.h"

struct top_rec;

/* Records per executor ring a started command gets (CBCMN_TRACE_EVENTS):
 * 2 MiB each, touched only as written; room for what its executors do
 * between its runtime's start and our first drain. */
#define TOP_REC_RING_EVENTS 65536u

/* Create (or truncate) path, which must outlive the recorder; nothing is
 * read yet.  Returns 0, or a
 * negative errno with one line in err ("PATH: Permission denied"). */
int top_rec_open(struct top_rec **out, const char *path, char *err, size_t errlen);

/* Map runtime rt_id of process pid's trace rings, if it has them, and
 * start draining them; once (later calls do nothing).  top_rec_read calls
 * it at the first sample; call it sooner, as soon as a started command's
 * runtime appears, so that fewer of its first events wait in the rings.
 * Without rings the trace holds the samples (why: otherData). */
void top_rec_attach(struct top_rec *r, pid_t pid, uint32_t rt_id);

/* The model's on_read hook (struct top_model_opts), arg the recorder: the
 * first call sets the trace's time 0 and names the tracks; each later one
 * writes the interval since the one before. */
void top_rec_read(const struct top_model *m, uint64_t t_ns, const cbcmn_stats *st,
		  const cbcmn_executor_stats *per, uint32_t n, void *arg);

/* End the trace (otherData: the source, the counters at the first and the
 * last sample, lost events) and free r; m is the model recorded (NULL: it
 * never opened).  Returns 0, or a negative errno with one line in err
 * (writing failed, out of memory, -EBADMSG a corrupt ring of the target:
 * the file is whole, without that ring's later events).  With 0, err may
 * still hold a line: events the target's full rings lost.  NULL r is
 * fine. */
int top_rec_close(struct top_rec *r, const struct top_model *m, char *err, size_t errlen);

#endif
