/* openmetrics.h: the statistics of cbcmn runtimes as an OpenMetrics text
 * exposition (what Prometheus scrapes), for cbcmn-stat --prometheus.
 *
 * One metric family per figure of cbcmn_stats / cbcmn_executor_stats:
 * counters as cbcmn_<name>_total, gauges as cbcmn_<name>, labelled
 * runtime="<cbcmn_stats.runtime_id>" and, per executor, executor="<i>".
 * Every family has its # TYPE and # HELP lines before its samples, the
 * samples of one family are together (the format requires it, also when
 * several runtimes are written), and the exposition ends with "# EOF".
 * Times are in seconds and shares in [0, 1], as Prometheus names them.
 * docs/OBSERVABILITY.md lists the families.
 */
#ifndef CBCMN_TOOLS_OPENMETRICS_H
#define CBCMN_TOOLS_OPENMETRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cbcmn.h"

/* One runtime's statistics: per[] has nper (<= s->executors) entries. */
struct om_runtime {
	const cbcmn_stats *s;
	const cbcmn_executor_stats *per;
	uint32_t nper;
};

/* Write the exposition of rts[0..n) to f, "# EOF" last, and flush.
 * Returns 0, or -EIO when writing failed (a full disk, a closed pipe). */
int om_write(FILE *f, const struct om_runtime *rts, size_t n);

#endif
