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
					     "accept_error", "actor_spawn", "actor_send",
					     "actor_receive", "actor_halt", "actor_restart",
					     "actor_migrate", "exec_stall", "exec_spare",
					     "actor_backpressure", "sup_restart"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!has_probe(names[i]))
			fail_msg("probe cbcmn:%s (with a semaphore) is not in libcbcmn.so", names[i]);
}

/* Every probe but lock_contended carries its runtime's id as its last
 * argument (docs/PROBES.md): before it, two runtimes of one process could
 * not be told apart by a tool (their executor ids are the same).  Each site
 * of each probe has the documented number of arguments. */
static void test_probes_carry_the_runtime_id(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		int args;
	} want[] = {
		{"spawn", 4}, {"steal", 5}, {"steal_fail", 3}, {"park", 2}, {"unpark", 3},
		{"wake", 3}, {"lock_contended", 2}, {"task_panic", 3}, {"doorbell", 4},
		{"doorbell_coalesced", 3}, {"xmsg", 4}, {"exec_start", 4}, {"exec_stop", 3},
		{"accept_error", 4}, {"actor_spawn", 4}, {"actor_send", 5},
		{"actor_receive", 4}, {"actor_halt", 4}, {"actor_restart", 5},
		{"actor_migrate", 5}, {"exec_stall", 4}, {"exec_spare", 3},
		{"actor_backpressure", 5}, {"sup_restart", 5},
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		char key[64];
		snprintf(key, sizeof(key), "Name: %s\n", want[i].name);
		int sites = 0;
		for (const char *at = notes; (at = strstr(at, key)); at++) {
			const char *args = strstr(at, "Arguments: ");
			if (!args)
				fail_msg("cbcmn:%s: no Arguments line", want[i].name);
			args += 11;
			int n = 0;
			for (const char *c = args; *c && *c != '\n'; c++)
				n += (c == args || c[-1] == ' ') && *c != ' ';
			if (n != want[i].args)
				fail_msg("cbcmn:%s has %d arguments at a site, want %d (%.*s)", want[i].name, n,
					 want[i].args, (int)strcspn(args, "\n"), args);
			sites++;
		}
		assert_true(sites > 0);
	}
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
		cmocka_unit_test(test_probes_carry_the_runtime_id),
	};
	return cmocka_run_group_tests_name("probes", tests, read_notes, NULL);
}
