/* fuzz_cpulist: the two CPU-list parsers: the topology's (sysfs cpulist
 * files, cpuset.cpus; lib/topo.c cbcmn__cpulist_parse) and the placement
 * policy's (--policy depth-first|breadth-first|random|cpus:LIST;
 * lib/place.c cbcmn_policy_parse).
 *
 * Input: two bytes giving the bitmap's size (1..4096 bits), then the text.
 * Checked besides memory safety: the error's position or number is in
 * range; a parsed list sets no bit at or past nbits and survives a round
 * trip through its canonical form; a cpus: policy lists each CPU once,
 * each below 65536, and no other policy returns a list.
 */
#include <errno.h>

#include "fuzz.h"
#include "cbcmn_topo.h"
#include "topo.h"

#define MAX_BITS 4096
#define WORDS (MAX_BITS / 64 + 1)

static bool test_bit(const uint64_t *b, int i)
{
	return b[i / 64] >> (i % 64) & 1;
}

/* "0-3,8," style, canonical: increasing, ranges merged. */
static void format_list(const uint64_t *b, int nbits, char *out, size_t len)
{
	size_t n = 0;
	out[0] = 0;
	for (int i = 0; i < nbits;) {
		if (!test_bit(b, i)) {
			i++;
			continue;
		}
		int j = i;
		while (j + 1 < nbits && test_bit(b, j + 1))
			j++;
		n += (size_t)snprintf(out + n, len - n, n ? ",%d" : "%d", i);
		if (j > i)
			n += (size_t)snprintf(out + n, len - n, "-%d", j);
		i = j + 1;
	}
}

static void cpulist(const char *s, int nbits)
{
	uint64_t bits[WORDS] = {0}, again[WORDS] = {0};
	int bad = -12345;
	int rc = cbcmn__cpulist_parse(s, bits, nbits, &bad);
	if (rc == -EINVAL) {
		FUZZ_CHECK(bad >= 0 && (size_t)bad <= strlen(s), "syntax error at %d", bad);
		return;
	}
	if (rc == -ERANGE) {
		FUZZ_CHECK(bad >= nbits, "out of range %d < %d", bad, nbits);
		return;
	}
	FUZZ_CHECK(rc == 0, "rc %d", rc);
	for (int i = nbits; i < WORDS * 64; i++)
		FUZZ_CHECK(!test_bit(bits, i), "bit %d of %d", i, nbits);
	/* At most MAX_BITS / 2 items of up to 5 bytes and a comma. */
	static char canon[MAX_BITS * 6 + 16];
	format_list(bits, nbits, canon, sizeof(canon));
	FUZZ_CHECK(cbcmn__cpulist_parse(canon, again, nbits, &bad) == 0, "'%s'", canon);
	FUZZ_CHECK(!memcmp(bits, again, sizeof(bits)), "round trip of '%s'", canon);
}

static void policy(const char *s)
{
	cbcmn_policy p = (cbcmn_policy)-1;
	int *cpus = (int *)&p;
	size_t n = 12345;
	char err[256] = "";
	int rc = cbcmn_policy_parse(s, &p, &cpus, &n, err, sizeof(err));
	if (rc) {
		FUZZ_CHECK(rc == -EINVAL || rc == -ENOMEM, "rc %d", rc);
		FUZZ_CHECK(err[0], "no message");
		FUZZ_CHECK(!cpus && !n, "a list with an error");
		return;
	}
	FUZZ_CHECK(p >= CBCMN_POLICY_DEPTH_FIRST && p <= CBCMN_POLICY_CPUS, "policy %d", (int)p);
	if (p != CBCMN_POLICY_CPUS) {
		FUZZ_CHECK(!cpus && !n, "a list for policy %d", (int)p);
		return;
	}
	FUZZ_CHECK(cpus && n >= 1 && n <= 65536, "%zu CPUs", n);
	static uint64_t seen[65536 / 64];
	memset(seen, 0, sizeof(seen));
	for (size_t i = 0; i < n; i++) {
		FUZZ_CHECK(cpus[i] >= 0 && cpus[i] < 65536, "CPU %d", cpus[i]);
		FUZZ_CHECK(!test_bit(seen, cpus[i]), "CPU %d twice", cpus[i]);
		seen[cpus[i] / 64] |= 1ull << (cpus[i] % 64);
	}
	free(cpus);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	int nbits = 1 + ((data[0] | data[1] << 8) % MAX_BITS);
	char *s = fuzz_strndup(data + 2, size - 2);
	cpulist(s, nbits);
	policy(s);
	free(s);
	return 0;
}
