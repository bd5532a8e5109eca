/* openmetrics.h: the statistics of cbcmn runtimes as an OpenMetrics text
 * exposition (what Prometheus scrapes), for cbcmn-stat --prometheus: the
 * library's cbcmn_metrics_format() (cbcmn_metrics.h, which says what the
 * families are) written to a stdio stream.  docs/OBSERVABILITY.md lists
 * the families.
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
 * Returns 0, -EIO when writing failed (a full disk, a closed pipe), or
 * -ENOMEM. */
int om_write(FILE *f, const struct om_runtime *rts, size_t n);

#endif
