/* test_probes: the USDT probes docs/PROBES.md lists are in the library, each
 * with its semaphore, and a detached probe computes nothing. */
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "probes.h"

static char notes[65536];

static int read_notes(void **state)
{
	(void)state;
	char exe[PATH_MAX], cmd[PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -1;
	exe[n] = 0;
	/* The probes of the shared library, as readelf lists them. */
	snprintf(cmd, sizeof(cmd), "readelf -n %s/../lib/libcbcmn.so", dirname(exe));
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	size_t len = fread(notes, 1, sizeof(notes) - 1, p);
	notes[len] = 0;
	return pclose(p) == 0 && len > 0 ? 0 : -1;
}

static bool has_probe(const char *name)
{
	/* readelf prints "Provider: cbcmn" then "Name: <probe>" and then the
	 * semaphore address of that note. */
	char want[64];
	snprintf(want, sizeof(want), "Name: %s\n", name);
	const char *at = strstr(notes, want);
	if (!at)
		return false;
	const char *prov = strstr(at - 64 > notes ? at - 64 : notes, "Provider: cbcmn");
	const char *sema = strstr(at, "Semaphore: ");
	return prov && prov < at && sema && strncmp(sema, "Semaphore: 0x0000000000000000", 29) != 0;
}

static void test_every_documented_probe_is_present(void **state)
{
	(void)state;
	static const char *const names[] = {"spawn", "steal", "steal_fail", "park", "unpark",
					     "wake", "lock_contended", "task_panic", "doorbell",
					     "doorbell_coalesced", "xmsg", "exec_start", "exec_stop",
					     "accept_error"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!has_probe(names[i]))
			fail_msg("probe cbcmn:%s (with a semaphore) is not in libcbcmn.so", names[i]);
}

static int evaluated;

static int side_effect(void)
{
	return ++evaluated;
}

/* Detached (semaphore zero): a probe site does not evaluate its arguments. */
static void test_detached_probe_costs_nothing(void **state)
{
	(void)state;
	assert_int_equal(cbcmn_spawn_semaphore, 0);
	evaluated = 0;
	CBCMN_PROBE3(spawn, side_effect(), side_effect(), side_effect());
	assert_int_equal(evaluated, 0);
	/* Attached (what the kernel does to the semaphore): it does. */
	cbcmn_spawn_semaphore = 1;
	CBCMN_PROBE3(spawn, side_effect(), 0, 0);
	cbcmn_spawn_semaphore = 0;
	assert_int_equal(evaluated, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_documented_probe_is_present),
		cmocka_unit_test(test_detached_probe_costs_nothing),
	};
	return cmocka_run_group_tests_name("probes", tests, read_notes, NULL);
}
