/* fuzz_stealmx: cbcmn-affinity --steal-matrix files (tools/cli/stealmx.c).
 *
 * Input: the file.  Checked besides memory safety: an error is one line
 * naming the file and frees everything; a success holds only pairs a
 * placement can index (thief != victim, both below executors, which is
 * below STEALMX_MAX_EXECUTORS) and sums that are the pairs' sums, within
 * STEALMX_MAX_TOTAL.
 */
#include "fuzz.h"
#include "cli/stealmx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* fmemopen of 0 bytes is EINVAL in old glibc: an empty file is a
	 * file with no line, tested by the corpus's comment-only seed. */
	if (size == 0)
		return 0;
	FILE *f = fmemopen((void *)data, size, "r");
	if (!f)
		abort();
	struct stealmx m = {0};
	char err[512];
	err[0] = 0;
	int rc = stealmx_read(f, "matrix", &m, err, sizeof(err));
	fclose(f);
	if (rc) {
		FUZZ_CHECK(rc == -1, "rc %d", rc);
		FUZZ_ONE_LINE(err);
		FUZZ_CHECK(!strncmp(err, "matrix", 6) || !strcmp(err, "out of memory"), "'%s'", err);
		FUZZ_CHECK(!m.v && !m.n, "not freed");
		return 0;
	}
	uint64_t steals = 0, tasks = 0;
	uint32_t top = 0;
	for (size_t i = 0; i < m.n; i++) {
		const struct stealmx_pair *p = &m.v[i];
		FUZZ_CHECK(p->thief != p->victim, "pair %zu", i);
		FUZZ_CHECK(p->thief < m.executors && p->victim < m.executors, "pair %zu", i);
		steals += p->steals;
		tasks += p->tasks;
		top = p->thief > top ? p->thief : top;
		top = p->victim > top ? p->victim : top;
		FUZZ_CHECK(m.has_tasks || !p->tasks, "tasks without has_tasks");
	}
	FUZZ_CHECK(m.executors <= STEALMX_MAX_EXECUTORS, "%u executors", m.executors);
	FUZZ_CHECK(m.executors == (m.n ? top + 1 : 0), "executors %u, top %u", m.executors, top);
	FUZZ_CHECK(steals == m.steals && tasks == m.tasks, "sums");
	FUZZ_CHECK(m.steals <= STEALMX_MAX_TOTAL && m.tasks <= STEALMX_MAX_TOTAL, "totals");
	stealmx_free(&m);
	return 0;
}
