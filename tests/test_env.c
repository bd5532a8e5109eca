/* test_env: the CBCMN_* environment variables, and a privileged program
 * that ignores them (lib/env.h). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cbcmn_topo.h"
#include "helpers.h"

/* Child mode (argv[1] "--env-child", argv[2] what to do): exit 0 when the
 * library took no notice of the bad value the parent put in the
 * environment, 1 when it refused it, 3 when the process does not run
 * with AT_SECURE and argv[3] says it should, 4 when such a copy still
 * has a name.  _exit: LeakSanitizer's
 * exit-time scan cannot ptrace a non-dumpable (set-uid) process. */
static void env_child(char **argv)
{
	if (argv[3] && !getauxval(AT_SECURE))
		_exit(3);
	/* A set-user-ID copy has no name anywhere: the parent unlinked it
	 * before running it, so no failure or kill of the parent can leave
	 * it behind. */
	char self[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (argv[3] && (len < 10 || strncmp(self + len - 10, " (deleted)", 10) != 0))
		_exit(4);
	int rc;
	if (strcmp(argv[2], "sysfs") == 0) {
		cbcmn_topo *t;
		char err[256];
		rc = cbcmn_topo_load(NULL, &t, err, sizeof(err));
		if (rc == 0)
			cbcmn_topo_free(t);
	} else {
		cbcmn_config c;
		cbcmn_config_init(&c);
		c.workers = 1;
		cbcmn_runtime *rt;
		rc = cbcmn_runtime_create(&c, &rt);
		if (rc == 0)
			cbcmn_runtime_destroy(rt);
	}
	_exit(rc == 0 ? 0 : 1);
}

/* Run the program behind descriptor exe (fexecve) in child mode with
 * name=value in its environment; its exit status (127: it could not run). */
static int run_child(int exe, const char *what, const char *name, const char *value,
		     bool secure)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		setenv(name, value, 1);
		char *argv[] = {"test_env", "--env-child", (char *)what, secure ? "secure" : NULL,
				NULL};
		fexecve(exe, argv, environ);
		_exit(127);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static const struct {
	const char *what, *name, *value;
} bad_env[] = {
	{"runtime", "CBCMN_BACKEND", "not-a-backend"},
	{"runtime", "CBCMN_PBUF_INC", "off"},
	{"runtime", "CBCMN_TRACE_EVENTS", "not-a-count"},
	{"sysfs", "CBCMN_SYSFS_ROOT", "/nonexistent/cbcmn-sysfs"},
};

/* A set-user-ID copy of this suite (to nobody, run by root: AT_SECURE)
 * takes no CBCMN_* variable from its environment: a value each one
 * refuses, which the same copy without the bit does refuse, changes
 * nothing.  With getenv the set-uid run refused them too. */
static void test_setuid_program_ignores_cbcmn_variables(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		T_SKIP("making a set-user-ID program needs root (to chown it)");
		return;
	}
	char dir[] = "/tmp/cbcmn-env-XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct statvfs vfs;
	int vrc = statvfs(dir, &vfs);
	char exe[PATH_MAX];
	snprintf(exe, sizeof(exe), "%s/test_env", dir);
	int in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	int out = open(exe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	int fd = open(exe, O_RDONLY | O_CLOEXEC);
	/* The copy loses its name before anything can fail: from here on it
	 * is only our descriptors' (fexecve), and goes with the last of them
	 * on every path, an assertion's or a kill's.  A set-user-ID file
	 * never has a name in /tmp. */
	unlink(exe);
	rmdir(dir);
	assert_int_equal(vrc, 0);
	if (vfs.f_flag & ST_NOSUID) {
		close(in);
		close(out);
		close(fd);
		T_SKIP("/tmp is mounted nosuid: no set-user-ID program runs there");
		return;
	}
	assert_true(in >= 0 && out >= 0 && fd >= 0);
	char buf[1 << 16];
	for (ssize_t n; (n = read(in, buf, sizeof(buf))) > 0;)
		assert_int_equal(write(out, buf, (size_t)n), n);
	close(in);
	close(out); /* else its exec fails: ETXTBSY */
	size_t nbad = sizeof(bad_env) / sizeof(bad_env[0]);
	if (run_child(fd, "runtime", "CBCMN_UNUSED", "", false) == 127) {
		close(fd);
		T_SKIP("/tmp is mounted noexec: no copy of the suite runs there");
		return;
	}
	/* The variables are read at all: refused without the bit. */
	for (size_t i = 0; i < nbad; i++)
		assert_int_equal(run_child(fd, bad_env[i].what, bad_env[i].name, bad_env[i].value,
					   false),
				 1);
	assert_int_equal(fchown(fd, 65534, 65534), 0);
	assert_int_equal(fchmod(fd, 04755), 0);
	int rc[sizeof(bad_env) / sizeof(bad_env[0])];
	for (size_t i = 0; i < nbad; i++) {
		rc[i] = run_child(fd, bad_env[i].what, bad_env[i].name, bad_env[i].value, true);
		printf("    set-uid, %s=%s: exit %d\n", bad_env[i].name, bad_env[i].value, rc[i]);
	}
	close(fd);
	if (rc[0] == 3) {
		T_SKIP("the set-user-ID copy did not run with AT_SECURE here");
		return;
	}
	for (size_t i = 0; i < nbad; i++)
		assert_int_equal(rc[i], 0);
}

/* No CBCMN_* read escapes: libcbcmn.so imports no getenv at all (every
 * read goes through cbcmn__env's secure_getenv). */
static void test_library_imports_no_getenv(void **state)
{
	(void)state;
	char self[PATH_MAX], cmd[PATH_MAX + 128];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(n > 0);
	self[n] = 0;
	/* build[/SAN]/tests/test_env -> build[/SAN]/lib/libcbcmn.so */
	snprintf(cmd, sizeof(cmd), "nm -D --undefined-only '%s/../lib/libcbcmn.so' 2>/dev/null",
		 dirname(self));
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	char line[512];
	int syms = 0, plain = 0, secure = 0;
	while (fgets(line, sizeof(line), p)) {
		syms++;
		char *name = strrchr(line, ' ');
		name = name ? name + 1 : line;
		size_t len = strcspn(name, "@\n");
		plain += len == 6 && strncmp(name, "getenv", 6) == 0;
		secure += len == 13 && strncmp(name, "secure_getenv", 13) == 0;
	}
	int st = pclose(p);
	if (syms == 0 || st != 0) {
		T_SKIP("nm (binutils) cannot list libcbcmn.so's imports here");
		return;
	}
	printf("    libcbcmn.so imports: getenv %d, secure_getenv %d\n", plain, secure);
	assert_int_equal(plain, 0);
	assert_int_equal(secure, 1);
}

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "--env-child") == 0)
		env_child(argv);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_setuid_program_ignores_cbcmn_variables),
		cmocka_unit_test(test_library_imports_no_getenv),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
