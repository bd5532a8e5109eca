/* fuzz_metrics: the scrape endpoint's request parsing (lib/metrics_server.c,
 * cbcmn__metrics_head_end() and cbcmn__metrics_parse()): what any client
 * of cbcmn_metrics_serve() can send.
 *
 * Input: one byte, the size of each read the server's loop is fed (1 to
 * 256), then the bytes as they come from the socket.  The header block is
 * found as read_head() finds it, resuming each scan two bytes before the
 * end of the last; then parsed in a buffer of exactly its length + 1 (ASan
 * sees any read past the NUL).  Checked besides memory safety: the block
 * found read by read is the one found at once, it ends in a \n and alone
 * is whole; the route is one of the four, and a scrape is a GET or a HEAD
 * of /metrics.
 */
#include "fuzz.h"
#include "metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = (size_t)data[0] + 1, len = size - 1;
	const char *in = (const char *)data + 1;
	size_t whole = cbcmn__metrics_head_end(in, len, 0);
	FUZZ_CHECK(whole <= len, "whole %zu of %zu", whole, len);
	size_t got = 0, from = 0, hl = 0;
	while (got < len && !hl) {
		got = got + step < len ? got + step : len;
		hl = cbcmn__metrics_head_end(in, got, from);
		from = got > 2 ? got - 2 : 0;
	}
	FUZZ_CHECK(hl == whole, "read by read %zu, at once %zu", hl, whole);
	if (!hl)
		return 0;
	FUZZ_CHECK(in[hl - 1] == '\n', "ends in %#x", (unsigned char)in[hl - 1]);
	FUZZ_CHECK(cbcmn__metrics_head_end(in, hl, 0) == hl, "alone");
	char *buf = malloc(hl + 1);
	if (!buf)
		abort();
	memcpy(buf, in, hl);
	struct cbcmn__metrics_req r;
	cbcmn__metrics_parse(buf, hl, &r);
	FUZZ_CHECK(r.route >= CBCMN__MR_BAD && r.route <= CBCMN__MR_METRICS, "route %d", r.route);
	FUZZ_CHECK(!r.om || r.route == CBCMN__MR_METRICS, "om on route %d", r.route);
	if (r.route == CBCMN__MR_METRICS)
		FUZZ_CHECK(!strncmp(buf, r.head ? "HEAD /metrics" : "GET /metrics",
				    r.head ? 13 : 12),
			   "a scrape of '%.20s'", buf);
	free(buf);
	return 0;
}
