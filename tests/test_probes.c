/* test_probes: the USDT probes docs/PROBES.md lists are in the library, each
 * with its semaphore and arguments every USDT tool reads, and a detached
 * probe computes nothing. */
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "probes.h"

static char notes[1 << 20];
static char lib_dir[PATH_MAX];
static bool no_readelf; /* binutils' readelf not on PATH: those tests skip */

#define SKIP_WITHOUT_READELF()                                                   \
	do {                                                                     \
		if (no_readelf) {                                                \
			T_SKIP("readelf (binutils) is not on PATH: no notes to read"); \
			return;                                                  \
		}                                                                \
	} while (0)

/* readelf -n of file (in the library's directory) into buf: 0, or -1 (not
 * there, or more than buf holds). */
static int read_notes_of(const char *file, char *buf, size_t size)
{
	char cmd[PATH_MAX + 64];
	snprintf(cmd, sizeof(cmd), "readelf -n %s/%s", lib_dir, file);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	size_t len = fread(buf, 1, size - 1, p);
	buf[len] = 0;
	char extra;
	bool whole = fread(&extra, 1, 1, p) == 0;
	return pclose(p) == 0 && len > 0 && whole ? 0 : -1;
}

static int read_notes(void **state)
{
	(void)state;
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -1;
	exe[n] = 0;
	/* The probes of the shared library, as readelf lists them (this
	 * build's: build/asan/tests/test_probes reads build/asan/lib). */
	snprintf(lib_dir, sizeof(lib_dir), "%s/../lib", dirname(exe));
	/* Without readelf the tests that read notes skip (the group's setup
	 * failed, every test with it, the one that reads none included). */
	if (system("readelf --version >/dev/null 2>&1") != 0) {
		no_readelf = true;
		return 0;
	}
	return read_notes_of("libcbcmn.so", notes, sizeof(notes));
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
	SKIP_WITHOUT_READELF();
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
	SKIP_WITHOUT_READELF();
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

/* One USDT argument, "size@location", as libbpf before 1.4 parses it on
 * x86-64 (src/usdt.c, parse_usdt_arg() and calc_pt_regs_off() of v1.1.2,
 * Debian 12's; from 1.4 it also takes "off(%base,%index,scale)"): a
 * register, an immediate, or a register's memory with a constant offset or
 * none, of 1, 2, 4 or 8 bytes (negative: signed).  Anything else, an index
 * register or a symbol (%rip-relative) included, and libbpf 1.1 refuses to
 * attach the probe (-EINVAL, -ENOENT).  The same formats as libbpf's, so
 * that what they accept and what this accepts are one. */
static bool old_libbpf_reg(const char *name)
{
	static const char *const regs[] = {
		"rip", "eip", "rax", "eax", "ax", "al", "rbx", "ebx", "bx", "bl",
		"rcx", "ecx", "cx", "cl", "rdx", "edx", "dx", "dl", "rsi", "esi", "si", "sil",
		"rdi", "edi", "di", "dil", "rbp", "ebp", "bp", "bpl", "rsp", "esp", "sp", "spl",
		"r8", "r8d", "r8w", "r8b", "r9", "r9d", "r9w", "r9b", "r10", "r10d", "r10w", "r10b",
		"r11", "r11d", "r11w", "r11b", "r12", "r12d", "r12w", "r12b",
		"r13", "r13d", "r13w", "r13b", "r14", "r14d", "r14w", "r14b",
		"r15", "r15d", "r15w", "r15b",
	};
	for (size_t i = 0; i < sizeof(regs) / sizeof(regs[0]); i++)
		if (strcmp(name, regs[i]) == 0)
			return true;
	return false;
}

/* Parse the argument at *s as libbpf 1.1 does and move *s past it: false
 * if libbpf 1.1 rejects it. */
static bool old_libbpf_arg(const char **s)
{
	char reg[16];
	int size, len = 0;
	long off;
	bool reg_ok;
	if (sscanf(*s, " %d @ %ld ( %%%15[^)] ) %n", &size, &off, reg, &len) == 3)
		reg_ok = old_libbpf_reg(reg); /* -4@-20(%rbp) */
	else if (sscanf(*s, " %d @ ( %%%15[^)] ) %n", &size, reg, &len) == 2)
		reg_ok = old_libbpf_reg(reg); /* 8@(%rsp) */
	else if (sscanf(*s, " %d @ %%%15s %n", &size, reg, &len) == 2)
		reg_ok = old_libbpf_reg(reg); /* -4@%eax */
	else if (sscanf(*s, " %d @ $%ld %n", &size, &off, &len) == 2)
		reg_ok = true; /* 4@$71 */
	else
		return false;
	if (size < 0)
		size = -size;
	*s += len;
	return reg_ok && len > 0 && (size == 1 || size == 2 || size == 4 || size == 8);
}

/* Each argument of each probe site in notes (readelf -n of file) parses
 * as libbpf 1.1 wants; the count of sites checked, or a failure that
 * names the site. */
static int assert_args_old_libbpf_reads(const char *file, const char *buf)
{
	int sites = 0;
	for (const char *at = buf; (at = strstr(at, "Arguments: ")); sites++) {
		const char *name = at;
		while (name > buf && strncmp(name, "Name: ", 6) != 0)
			name--;
		char args[512];
		at += 11;
		size_t n = strcspn(at, "\n");
		snprintf(args, sizeof(args), "%.*s", (int)(n < sizeof(args) ? n : sizeof(args) - 1), at);
		for (const char *s = args; *s;) {
			const char *arg = s;
			if (!old_libbpf_arg(&s))
				fail_msg("%s: probe %.*s: argument \"%.*s\" (of \"%s\") is not one libbpf "
					 "before 1.4 parses (a register, an immediate, off(%%reg))",
					 file, (int)strcspn(name + 6, "\n"), name + 6,
					 (int)strcspn(arg + strspn(arg, " "), " "), arg + strspn(arg, " "), args);
		}
	}
	return sites;
}

/* Every argument of every probe site is a form libbpf before 1.4 parses
 * (Debian 12 ships 1.1.2): one it does not makes the attach of that probe
 * fail there, for cbcmn-top, cbcmn-trace and any libbpf tool, and for
 * bpftrace linked with it.  Before, GCC could emit a memory operand with
 * an index register, actor_restart's 4th argument "8@(%rdx,%r13)" in both
 * the LTO and the file-by-file builds (session 24); sys/sdt.h's default
 * constraint "nor" lets it, probes.h's "nr" does not.  The shared library
 * and the static one (an LTO build's or this build's objects), in each
 * build that runs this (release, ASan, TSan). */
static void test_probe_arguments_are_forms_old_libbpf_parses(void **state)
{
	(void)state;
	SKIP_WITHOUT_READELF();
	/* The parser itself: what libbpf 1.1 takes and refuses. */
	static const char *const good[] = {"-4@%esi", "8@-24(%rbp)", "8@(%rsp)", "4@$71", "-8@$-1",
					    "1@%al", "8@%r13", "2@%r9w"};
	static const char *const bad[] = {"8@(%rdx,%r13)", "8@8(%rax,%rbx,8)", "8@cbcmn_x(%rip)",
					   "4@%ah", "3@%eax", "8@%xmm0"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		const char *s = good[i];
		assert_true(old_libbpf_arg(&s) && !*s);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *s = bad[i];
		if (old_libbpf_arg(&s))
			fail_msg("the check takes \"%s\", libbpf 1.1 does not", bad[i]);
	}
	int sites = assert_args_old_libbpf_reads("libcbcmn.so", notes);
	static char a_notes[sizeof(notes)];
	int a_sites = -1;
	if (read_notes_of("libcbcmn.a", a_notes, sizeof(a_notes)) == 0)
		a_sites = assert_args_old_libbpf_reads("libcbcmn.a", a_notes);
	printf("    %d probe sites in libcbcmn.so, %d in libcbcmn.a (-1: not built): every "
	       "argument one libbpf 1.1 parses\n", sites, a_sites);
	assert_true(sites >= 24);
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
		cmocka_unit_test(test_probe_arguments_are_forms_old_libbpf_parses),
	};
	return cmocka_run_group_tests_name("probes", tests, read_notes, NULL);
}
