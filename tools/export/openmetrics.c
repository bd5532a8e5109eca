/* openmetrics.c: runtime statistics as OpenMetrics text (openmetrics.h),
 * written by the library's formatter (cbcmn_metrics_format). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "export/openmetrics.h"

int om_write(FILE *f, const struct om_runtime *rts, size_t n)
{
	cbcmn_metrics_source *src = calloc(n ? n : 1, sizeof(*src));
	if (!src)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		src[i] = (cbcmn_metrics_source){rts[i].s, rts[i].per, rts[i].nper};
	/* Sized first, then written: the same sources give the same text. */
	int64_t len = cbcmn_metrics_format(src, n, CBCMN_METRICS_OPENMETRICS, NULL, 0);
	char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
	int rc = len < 0 ? (int)len : text ? 0 : -ENOMEM;
	if (!rc && cbcmn_metrics_format(src, n, CBCMN_METRICS_OPENMETRICS, text, (size_t)len + 1) != len)
		rc = -EIO; /* cannot happen: the same sources */
	if (!rc && (fwrite(text, 1, (size_t)len, f) != (size_t)len || fflush(f) || ferror(f)))
		rc = -EIO;
	free(text);
	free(src);
	return rc;
}
