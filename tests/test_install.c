/* test_install: make install and make uninstall, as a user of the library
 * meets them (docs/INSTALL.md).
 *
 * Each test installs this build (NOBUILD=1: the binaries as they are, the
 * suite never rebuilds them) into a scratch DESTDIR, checks what landed
 * where (soname links, the pc file, the exported symbols against
 * lib/libcbcmn.map), builds the README's example with pkg-config against
 * it, statically and shared, runs it, and uninstalls.  The source tree is
 * $CBCMN_SRCDIR, else the one above this binary (build/tests,
 * build/x/tests, the copy that scripts/run-unprivileged.sh makes), else
 * the current directory (a BUILD elsewhere, run from the checkout as make
 * test does); none is a skip that says so.  Needs make, cc, readelf and pkg-config
 * (scripts/install-deps.sh).  Installs in the release pass only (make
 * install refuses a sanitizer build: not what a user installs); there the
 * export check reads the build's own libcbcmn.so, and the rest skips
 * saying why. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "helpers.h"

static char srcdir[PATH_MAX]; /* the checkout: Makefile, lib/, README.md */
static char builddir[PATH_MAX]; /* this binary's build: BUILD= */

#define VERSION_STR_(a, b, c) #a "." #b "." #c
#define VERSION_STR(a, b, c) VERSION_STR_(a, b, c)
#define VERSION VERSION_STR(CBCMN_VERSION_MAJOR, CBCMN_VERSION_MINOR, CBCMN_VERSION_PATCH)
#define SONAME_STR_(m) "libcbcmn.so." #m
#define SONAME_STR(m) SONAME_STR_(m)
#define SONAME SONAME_STR(CBCMN_VERSION_MAJOR)

/* ---- the shell -------------------------------------------------------------- */

/* Runs the command cmd under sh with its stderr joined to its stdout,
 * which lands in out (NUL-ended, truncated to len).  Its exit status, or
 * -1 if it did not exit. */
static int vsh(char *out, size_t len, char *cmd, size_t cap, const char *fmt, va_list ap)
{
	int n = vsnprintf(cmd, cap - 8, fmt, ap);
	assert_true(n > 0 && (size_t)n < cap - 8);
	strcat(cmd, " 2>&1");
	fflush(NULL);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t at = 0, got;
	char sink[4096];
	while ((got = fread(at + 1 < len ? out + at : sink, 1,
			    at + 1 < len ? len - 1 - at : sizeof(sink), p)) > 0)
		if (at + 1 < len)
			at += got;
	out[at] = 0;
	int st = pclose(p);
	return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The command fmt...: its exit status; its output into out. */
__attribute__((format(printf, 3, 4))) static int sh(char *out, size_t len, const char *fmt, ...)
{
	char cmd[8192], own[256];
	va_list ap;
	va_start(ap, fmt);
	int rc = vsh(out ? out : own, out ? len : sizeof(own), cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return rc;
}

/* The command fmt..., which must exit 0: else the test fails with the
 * command and its output.  Its output into out (which may be NULL). */
__attribute__((format(printf, 3, 4))) static void sh_ok(char *out, size_t len, const char *fmt, ...)
{
	char cmd[8192], own[8192];
	va_list ap;
	va_start(ap, fmt);
	int rc = vsh(out ? out : own, out ? len : sizeof(own), cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (rc != 0)
		fail_msg("exit status %d: %s\n%s", rc, cmd, out ? out : own);
}

/* ---- where things are --------------------------------------------------------- */

/* What the paths on a command line must not hold. */
#define ODD " '\"\\$`"

static bool is_checkout(const char *dir)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/Makefile", dir);
	if (access(p, R_OK))
		return false;
	snprintf(p, sizeof(p), "%s/lib/libcbcmn.map", dir);
	if (access(p, R_OK))
		return false;
	snprintf(p, sizeof(p), "%s/cbcmn.pc.in", dir);
	return access(p, R_OK) == 0;
}

static int find_dirs(void **state)
{
	(void)state;
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -1;
	exe[n] = 0;
	/* BUILD/tests/test_install -> BUILD */
	*strrchr(exe, '/') = 0;
	*strrchr(exe, '/') = 0;
	snprintf(builddir, sizeof(builddir), "%s", exe);
	const char *env = getenv("CBCMN_SRCDIR");
	if (env && is_checkout(env))
		snprintf(srcdir, sizeof(srcdir), "%s", env);
	while (!srcdir[0]) {
		if (is_checkout(exe))
			snprintf(srcdir, sizeof(srcdir), "%s", exe);
		char *up = strrchr(exe, '/');
		if (!up || up == exe)
			break;
		*up = 0;
	}
	if (!srcdir[0] && getcwd(exe, sizeof(exe)) && is_checkout(exe))
		snprintf(srcdir, sizeof(srcdir), "%s", exe);
	/* Paths go into sh and make command lines (make splits at spaces). */
	if (strpbrk(srcdir, ODD) || strpbrk(builddir, ODD))
		srcdir[0] = 0;
	return 0;
}

/* An install: DESTDIR and the variables given to make install. */
struct inst {
	char root[PATH_MAX - 64]; /* the scratch directory, removed after */
	char dest[PATH_MAX];  /* the DESTDIR: root, or a directory in it */
	char vars[512];       /* PREFIX=... LIBDIR=... */
	char prefix[256];     /* where the files claim to be */
};

/* The test's install: a test that fails half-way leaves it to teardown. */
static struct inst *current;

static void make_in(struct inst *in, const char *target)
{
	/* What the caller's make passed on (a jobserver, command-line
	 * variables) and install variables from the environment are not the
	 * suite's: it says every one it means. */
	sh_ok(NULL, 0,
	      "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u LIBDIR -u INCLUDEDIR -u BINDIR -u MANDIR "
	      "-u PKGCONFIGDIR make -s -C '%s' SAN= BUILD='%s' NOBUILD=1 DESTDIR='%s' %s %s",
	      srcdir, builddir, in->dest, in->vars, target);
}

/* Installs into a fresh DESTDIR: PREFIX prefix, LIBDIR libdir (NULL: the
 * default); the DESTDIR is the scratch directory itself, or its sub (NULL:
 * itself). */
static struct inst *install_in(const char *sub, const char *prefix, const char *libdir)
{
	if (T_ASAN || T_TSAN) {
		T_SKIP("install: the release pass installs the release build");
		return NULL;
	}
	if (!srcdir[0]) {
		T_SKIP("install: no checkout above %s nor here (set CBCMN_SRCDIR)", builddir);
		return NULL;
	}
	struct inst *in = calloc(1, sizeof(*in));
	assert_non_null(in);
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp || strpbrk(tmp, ODD))
		tmp = "/tmp";
	snprintf(in->root, sizeof(in->root), "%s/cbcmn-install-XXXXXX", tmp);
	assert_non_null(mkdtemp(in->root));
	current = in;
	snprintf(in->dest, sizeof(in->dest), "%s%s%s", in->root, sub ? "/" : "", sub ? sub : "");
	if (sub)
		assert_int_equal(mkdir(in->dest, 0700), 0);
	snprintf(in->prefix, sizeof(in->prefix), "%s", prefix);
	snprintf(in->vars, sizeof(in->vars), "PREFIX=%s%s%s", prefix, libdir ? " LIBDIR=" : "",
		 libdir ? libdir : "");
	make_in(in, "install");
	return in;
}

static struct inst *install_at(const char *prefix, const char *libdir)
{
	return install_in(NULL, prefix, libdir);
}

static void inst_free(struct inst *in)
{
	if (!in)
		return;
	sh(NULL, 0, "rm -rf '%s'", in->root);
	free(in);
	current = NULL;
}

/* Each test drives make, the compiler and the programs it built: the long
 * watchdog (a loaded machine), and its scratch DESTDIR removed whatever
 * happened. */
static int inst_setup(void **state)
{
	return t_watchdog_setup_long(state);
}

static int inst_teardown(void **state)
{
	inst_free(current);
	return t_watchdog_teardown(state);
}

#define INSTALL_TEST(f) cmocka_unit_test_prestate_setup_teardown(f, inst_setup, inst_teardown, (void *)#f)

/* DESTDIR's path of the installed rel under in->prefix (or absolute). */
static const char *at(const struct inst *in, const char *rel)
{
	static char p[4][PATH_MAX + 512];
	static unsigned k;
	char *b = p[k++ % 4];
	if (rel[0] == '/')
		snprintf(b, sizeof(p[0]), "%s%s", in->dest, rel);
	else
		snprintf(b, sizeof(p[0]), "%s%s/%s", in->dest, in->prefix, rel);
	return b;
}

static void assert_file(const char *path, mode_t mode)
{
	struct stat st;
	if (lstat(path, &st))
		fail_msg("%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode) || (st.st_mode & 07777) != mode)
		fail_msg("%s: mode %o, want a file of mode %o", path, st.st_mode, mode);
}

static void assert_link(const char *path, const char *target)
{
	char t[PATH_MAX];
	ssize_t n = readlink(path, t, sizeof(t) - 1);
	if (n <= 0)
		fail_msg("%s: not a symbolic link (%s)", path, strerror(errno));
	t[n] = 0;
	if (strcmp(t, target))
		fail_msg("%s -> %s, want -> %s", path, t, target);
}

/* Calls fn(name) for each name in srcdir/dir that begins with prefix and
 * ends in suffix; how many. */
static size_t each_source(const char *dir, const char *prefix, const char *suffix,
			  void (*fn)(const char *, void *), void *arg)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof(p), "%s/%s", srcdir, dir);
	DIR *d = opendir(p);
	if (!d)
		return 0;
	size_t n = 0, sl = strlen(suffix);
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (de->d_name[0] == '.' || l <= sl || strcmp(de->d_name + l - sl, suffix) ||
		    strncmp(de->d_name, prefix, strlen(prefix)))
			continue;
		fn(de->d_name, arg);
		n++;
	}
	closedir(d);
	return n;
}

static void header_is_installed(const char *name, void *arg)
{
	char rel[PATH_MAX];
	snprintf(rel, sizeof(rel), "include/%s", name);
	assert_file(at(arg, rel), 0644);
}

static void tool_is_installed(const char *name, void *arg)
{
	char rel[PATH_MAX];
	snprintf(rel, sizeof(rel), "bin/%.*s", (int)(strlen(name) - 2), name);
	assert_file(at(arg, rel), 0755);
}

struct man_sec {
	struct inst *in;
	const char *sec;
};

static void page_is_installed(const char *name, void *arg)
{
	struct man_sec *m = arg;
	char rel[PATH_MAX];
	snprintf(rel, sizeof(rel), "share/man/man%s/%s", m->sec, name);
	assert_file(at(m->in, rel), 0644);
}

/* Every file (not directory) under DESTDIR, one a line, into out. */
static void files_under(const struct inst *in, char *out, size_t len)
{
	sh_ok(out, len, "cd '%s' && find . ! -type d | sort", in->dest);
}

static size_t lines(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* ---- the files ---------------------------------------------------------------- */

static void test_install_puts_each_file_in_its_place(void **state)
{
	(void)state;
	struct inst *in = install_at("/usr/local", NULL);
	if (!in)
		return;
	size_t want = 0;
	want += each_source("lib/include", "", ".h", header_is_installed, in);
	assert_true(want >= 1);
	size_t tools = each_source("tools", "cbcmn-", ".c", tool_is_installed, in);
	assert_true(tools >= 1);
	want += tools;
	/* Pages where man/ has them: none is fine (they are another part). */
	struct man_sec m1 = {in, "1"}, m3 = {in, "3"};
	want += each_source("man/man1", "", ".1", page_is_installed, &m1);
	want += each_source("man/man3", "", ".3", page_is_installed, &m3);

	/* The real file, named for the whole version; the soname's link, which
	 * the loader follows; the link a -lcbcmn link finds. */
	assert_file(at(in, "lib/libcbcmn.so." VERSION), 0644);
	assert_link(at(in, "lib/" SONAME), "libcbcmn.so." VERSION);
	assert_link(at(in, "lib/libcbcmn.so"), SONAME);
	assert_file(at(in, "lib/libcbcmn.a"), 0644);
	assert_file(at(in, "lib/pkgconfig/cbcmn.pc"), 0644);
	want += 5;

	char *pc = malloc(4096);
	assert_non_null(pc);
	FILE *f = fopen(at(in, "lib/pkgconfig/cbcmn.pc"), "r");
	assert_non_null(f);
	pc[fread(pc, 1, 4095, f)] = 0;
	fclose(f);
	assert_non_null(strstr(pc, "\nprefix=/usr/local\n"));
	assert_non_null(strstr(pc, "\nlibdir=${prefix}/lib\n"));
	assert_non_null(strstr(pc, "\nincludedir=${prefix}/include\n"));
	assert_non_null(strstr(pc, "\nVersion: " VERSION "\n"));
	free(pc);

	/* Nothing else. */
	char *all = malloc(1 << 16);
	assert_non_null(all);
	files_under(in, all, 1 << 16);
	printf("installed %zu files (%zu tools): %s", lines(all), tools, all);
	if (lines(all) != want)
		fail_msg("%zu files installed, %zu expected", lines(all), want);
	free(all);
	inst_free(in);
}

static void test_uninstall_removes_what_install_put_and_nothing_else(void **state)
{
	(void)state;
	struct inst *in = install_at("/usr/local", NULL);
	if (!in)
		return;
	/* Another package's files beside ours, and an older release's. */
	sh_ok(NULL, 0,
	      "cd '%s/usr/local' && touch lib/libother.so include/other.h bin/other "
	      "lib/libcbcmn.so.0.0.9 lib/pkgconfig/other.pc",
	      in->dest);
	make_in(in, "uninstall");
	char left[4096];
	files_under(in, left, sizeof(left));
	assert_string_equal(left, "./usr/local/bin/other\n"
				  "./usr/local/include/other.h\n"
				  "./usr/local/lib/libcbcmn.so.0.0.9\n"
				  "./usr/local/lib/libother.so\n"
				  "./usr/local/lib/pkgconfig/other.pc\n");
	/* Again: nothing to remove is no error. */
	make_in(in, "uninstall");
	inst_free(in);
}

/* A DESTDIR with a space in it (a staging directory under "My Files", a
 * packager's "build dir"): everything lands under it, and uninstall
 * removes nothing beside it.  make split it at the space: install made
 * "dir/usr/local/..." in the checkout and failed, and uninstall removed
 * the unrelated file ".../stage" for DESTDIR=".../stage dir". */
static void test_destdir_with_a_space_stays_inside_it(void **state)
{
	(void)state;
	char junk[PATH_MAX + 8];
	snprintf(junk, sizeof(junk), "%s/dir", srcdir);
	bool junk_before = access(junk, F_OK) == 0;
	struct inst *in = install_in("stage dir", "/usr/local", NULL);
	if (!in)
		return;
	assert_true(junk_before || access(junk, F_OK) != 0);
	assert_file(at(in, "include/cbcmn.h"), 0644);
	assert_link(at(in, "lib/" SONAME), "libcbcmn.so." VERSION);
	assert_file(at(in, "lib/pkgconfig/cbcmn.pc"), 0644);
	/* A file beside the DESTDIR, named as its first word. */
	sh_ok(NULL, 0, "echo keep > '%s/stage'", in->root);
	make_in(in, "uninstall");
	char left[4096];
	sh_ok(left, sizeof(left), "cd '%s' && find . ! -type d | sort", in->root);
	assert_string_equal(left, "./stage\n");
	inst_free(in);
}

/* An empty scratch DESTDIR for a make install that must write nothing
 * (one install and uninstall: the skips of install_in() apply). */
static struct inst *scratch(void)
{
	struct inst *in = install_at("/usr/local", NULL);
	if (in)
		sh_ok(NULL, 0, "rm -rf '%s/usr'", in->dest);
	return in;
}

/* cbcmn.pc names PREFIX to every later build, and DESTDIR is glued in
 * front of it: a relative PREFIX is refused before anything is written
 * (it installed into "$(DESTDIR)usr/local" and wrote prefix=usr/local). */
static void test_relative_prefix_is_refused(void **state)
{
	(void)state;
	struct inst *in = scratch();
	if (!in)
		return;
	char out[4096];
	for (const char *const *v = (const char *const[]){"PREFIX=usr/local", "LIBDIR=lib",
							  "PKGCONFIGDIR=./pc", "'PREFIX=/opt/my stuff'",
							  NULL};
	     *v; v++) {
		int rc = sh(out, sizeof(out),
			    "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C '%s' SAN= BUILD='%s' "
			    "NOBUILD=1 DESTDIR='%s/' %s install",
			    srcdir, builddir, in->dest, *v);
		if (rc == 0 || !strstr(out, "absolute"))
			fail_msg("make install %s: exit %d, %s", *v, rc, out);
		char left[4096];
		files_under(in, left, sizeof(left));
		assert_string_equal(left, "");
	}
	inst_free(in);
}

/* A place make install may not write (a user's install without root into
 * /usr/local, a DESTDIR under a file): one line that says where and what
 * to do, before anything is written.  It was install(1)'s line per
 * directory ("cannot change permissions of '/usr/local/lib/pkgconfig': No
 * such file or directory") and make's. */
static void refused_in(struct inst *in, const char *destdir)
{
	char out[4096];
	int rc = sh(out, sizeof(out),
		    "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C '%s' SAN= BUILD='%s' NOBUILD=1 "
		    "DESTDIR='%s' install",
		    srcdir, builddir, destdir);
	const char *line = strstr(out, "cbcmn: make install cannot write in ");
	if (rc == 0 || !line || strstr(line + 1, "cbcmn:") || strstr(out, "install: "))
		fail_msg("make install DESTDIR='%s': exit %d, %s", destdir, rc, out);
	assert_non_null(strstr(line, "DESTDIR"));
	char left[4096];
	files_under(in, left, sizeof(left));
	assert_string_equal(left, "./file\n");
}

static void test_install_where_it_may_not_write_is_one_line(void **state)
{
	(void)state;
	struct inst *in = scratch();
	if (!in)
		return;
	sh_ok(NULL, 0, "cd '%s' && touch file", in->dest);
	char dest[PATH_MAX + 32];
	snprintf(dest, sizeof(dest), "%s/file/stage", in->dest);
	refused_in(in, dest);
	/* A directory this user may not write in (root may write anywhere:
	 * the unprivileged pass runs this). */
	if (geteuid() != 0) {
		snprintf(dest, sizeof(dest), "%s/ro", in->dest);
		assert_int_equal(mkdir(dest, 0555), 0);
		refused_in(in, dest);
		chmod(dest, 0755);
	}
	inst_free(in);
}

/* A Debian-style multiarch LIBDIR: the libraries and the pc file go there,
 * and the pc file says so (relative to prefix, as pkg-config wants for
 * --define-variable=prefix). */
static void test_multiarch_libdir_is_where_the_pc_file_points(void **state)
{
	(void)state;
	char triplet[128], libdir[256];
	sh_ok(triplet, sizeof(triplet), "cc -dumpmachine");
	triplet[strcspn(triplet, "\n")] = 0;
	snprintf(libdir, sizeof(libdir), "/usr/lib/%s", triplet);
	struct inst *in = install_at("/usr", libdir);
	if (!in)
		return;
	char rel[512];
	snprintf(rel, sizeof(rel), "%s/" SONAME, libdir);
	assert_link(at(in, rel), "libcbcmn.so." VERSION);
	snprintf(rel, sizeof(rel), "%s/pkgconfig/cbcmn.pc", libdir);
	char pc[4096], want[PATH_MAX + 512];
	sh_ok(pc, sizeof(pc), "cat '%s'", at(in, rel));
	snprintf(want, sizeof(want), "\nprefix=/usr\n");
	assert_non_null(strstr(pc, want));
	snprintf(want, sizeof(want), "\nlibdir=${prefix}/lib/%s\n", triplet);
	if (!strstr(pc, want))
		fail_msg("no '%s' in the pc file:\n%s", want + 1, pc);
	/* Relocated by prefix alone, as the pc file was written to allow. */
	char found[1024];
	sh_ok(found, sizeof(found),
	      "PKG_CONFIG_PATH='%s%s/pkgconfig' pkg-config --define-variable=prefix='%s/usr' "
	      "--variable=libdir cbcmn",
	      in->dest, libdir, in->dest);
	snprintf(want, sizeof(want), "%s%s\n", in->dest, libdir);
	assert_string_equal(found, want);
	inst_free(in);
}

/* ---- the shared library --------------------------------------------------------- */

#define MAX_SYMS 1024
struct sym {
	char name[128];
	char node[128];
};

/* The global symbols of lib/libcbcmn.map, each with its version node. */
static size_t map_globals(struct sym *out, size_t max)
{
	char path[PATH_MAX + 32], tok[128], node[128] = "", prev[128] = "";
	snprintf(path, sizeof(path), "%s/lib/libcbcmn.map", srcdir);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	enum { OUT, IN, AFTER } where = OUT;
	bool global = false;
	size_t n = 0, t = 0;
	int c, last = 0;
	while ((c = fgetc(f)) != EOF) {
		if (last == '/' && c == '*') { /* a comment, to its end */
			t = 0;
			for (last = 0; (c = fgetc(f)) != EOF && !(last == '*' && c == '/'); last = c)
				;
			last = 0;
			continue;
		}
		last = c;
		if (c == '_' || c == '.' || c == '*' || (c >= '0' && c <= '9') ||
		    (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			if (t + 1 < sizeof(tok))
				tok[t++] = (char)c;
			continue;
		}
		if (c == '/')
			continue;
		tok[t] = 0;
		if (t)
			snprintf(prev, sizeof(prev), "%s", tok);
		t = 0;
		if (c == '{' && where == OUT) {
			snprintf(node, sizeof(node), "%s", prev);
			where = IN;
			global = false;
		} else if (c == ':' && where == IN) {
			global = !strcmp(prev, "global");
		} else if (c == ';' && where == IN && prev[0]) {
			if (global) {
				assert_true(n < max);
				snprintf(out[n].name, sizeof(out[n].name), "%s", prev);
				snprintf(out[n].node, sizeof(out[n].node), "%s", node);
				n++;
			}
		} else if (c == '}' && where == IN) {
			where = AFTER; /* then the parent's name, to the ';' */
		} else if (c == ';' && where == AFTER) {
			where = OUT;
		}
		if (c == ';' || c == ':' || c == '{' || c == '}')
			prev[0] = 0;
	}
	fclose(f);
	return n;
}

static void test_shared_library_has_the_soname_and_exports_the_map_alone(void **state)
{
	(void)state;
	/* The release pass: the installed file.  A sanitizer build: its own
	 * libcbcmn.so, linked with the same map and soname, so that the
	 * checking code runs under the sanitizers too. */
	struct inst *in = NULL;
	char built[PATH_MAX + 32];
	const char *so = built, *link = built;
	snprintf(built, sizeof(built), "%s/lib/libcbcmn.so", builddir);
	if (!(T_ASAN || T_TSAN) || !srcdir[0]) {
		if (!(in = install_at("/usr/local", NULL)))
			return;
		so = at(in, "lib/libcbcmn.so." VERSION);
		link = at(in, "lib/" SONAME);
	}
	char out[1024];
	sh_ok(out, sizeof(out), "readelf -d '%s' | grep SONAME", so);
	if (!strstr(out, "[" SONAME "]"))
		fail_msg("want soname " SONAME ": %s", out);

	static struct sym map[MAX_SYMS];
	size_t nmap = map_globals(map, MAX_SYMS);
	assert_true(nmap > 50);
	/* Nodes are named for the version that added their calls: none
	 * later than the header's (a new call goes with a version bump). */
	for (size_t i = 0; i < nmap; i++) {
		unsigned maj, min;
		if (sscanf(map[i].node, "CBCMN_%u.%u", &maj, &min) != 2)
			fail_msg("%s: node %s is not CBCMN_MAJOR.MINOR", map[i].name, map[i].node);
		if (maj > CBCMN_VERSION_MAJOR ||
		    (maj == CBCMN_VERSION_MAJOR && min > CBCMN_VERSION_MINOR))
			fail_msg("%s is in node %s, later than the header's version " VERSION,
				 map[i].name, map[i].node);
	}
	bool seen[MAX_SYMS] = {0};

	char *dyn = malloc(1 << 20);
	assert_non_null(dyn);
	sh_ok(dyn, 1 << 20, "readelf --dyn-syms -W '%s'", so);
	size_t defined = 0;
	for (char *l = strtok(dyn, "\n"); l; l = strtok(NULL, "\n")) {
		char type[16], bind[16], vis[16], ndx[16], name[256];
		if (sscanf(l, " %*d: %*s %*s %15s %15s %15s %15s %255s", type, bind, vis, ndx,
			   name) != 5 ||
		    !strcmp(ndx, "UND") || !strcmp(bind, "LOCAL"))
			continue;
		char *ver = strstr(name, "@@");
		if (!ver && !strcmp(ndx, "ABS") && !strcmp(type, "OBJECT"))
			continue; /* a version node's own entry */
		if (!ver)
			fail_msg("%s is exported without a default version", name);
		*ver = 0;
		ver += 2;
		size_t i = 0;
		while (i < nmap && strcmp(map[i].name, name))
			i++;
		if (i == nmap)
			fail_msg("%s is exported but not in lib/libcbcmn.map", name);
		if (strcmp(map[i].node, ver))
			fail_msg("%s is exported as %s, the map puts it in %s", name, ver, map[i].node);
		seen[i] = true;
		defined++;
	}
	free(dyn);
	for (size_t i = 0; i < nmap; i++)
		if (!seen[i])
			fail_msg("%s is in lib/libcbcmn.map but not exported", map[i].name);
	printf("%zu symbols exported, as the map lists\n", defined);

	/* The other way: what the objects make visible (CBCMN_API, JANUS_API
	 * in a public header) is in the map.  A call declared in a header but
	 * left out of the map is hidden by its "local: *": programs linked
	 * with libcbcmn.a find it, programs linked with -lcbcmn do not.
	 * (Names from "__" on are a sanitizer's.) */
	char *objs = malloc(1 << 22);
	assert_non_null(objs);
	sh_ok(objs, 1 << 22, "readelf -sW '%s/lib/libcbcmn.a'", builddir);
	size_t visible = 0;
	for (char *l = strtok(objs, "\n"); l; l = strtok(NULL, "\n")) {
		char bind[16], vis[16], ndx[16], name[256];
		if (sscanf(l, " %*d: %*s %*s %*s %15s %15s %15s %255s", bind, vis, ndx, name) != 4 ||
		    !strcmp(ndx, "UND") || !strcmp(bind, "LOCAL") || strcmp(vis, "DEFAULT") ||
		    !strncmp(name, "__", 2))
			continue;
		size_t i = 0;
		while (i < nmap && strcmp(map[i].name, name))
			i++;
		if (i == nmap)
			fail_msg("%s has default visibility in libcbcmn.a but is not in lib/libcbcmn.map: "
				 "libcbcmn.so hides it", name);
		visible++;
	}
	free(objs);
	assert_int_equal(visible, nmap);

	/* The installed library says its version, through the soname's link,
	 * as the loader finds it. */
	void *h = dlopen(link, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		fail_msg("dlopen: %s", dlerror());
	const char *(*ver_s)(void) = (const char *(*)(void))dlsym(h, "cbcmn_version");
	unsigned (*ver_n)(void) = (unsigned (*)(void))dlsym(h, "cbcmn_version_number");
	assert_non_null(ver_s);
	assert_non_null(ver_n);
	assert_string_equal(ver_s(), VERSION);
	assert_int_equal(ver_n(), CBCMN_VERSION_NUMBER);
	dlclose(h);
	inst_free(in);
}

/* This build's libcbcmn.a holds GCC's IR (LTO_ARCHIVE=fat): its objects
 * have .gnu.lto_ sections. */
static bool archive_is_fat(void)
{
	char out[256];
	return sh(out, sizeof(out), "readelf -SW '%s/lib/libcbcmn.a' | grep -q '[.]gnu[.]lto_'",
		  builddir) == 0;
}

/* GCC's name for an LTO object's early debug info: FILE.c.HEX. */
static bool early_debug_name(const char *name)
{
	const char *c = strstr(name, ".c.");
	if (!c || c == name || !c[3])
		return false;
	for (c += 3; *c; c++)
		if (!strchr("0123456789abcdef", *c))
			return false;
	return true;
}

/* libcbcmn.a defines, outside its objects, only names C gives: none with
 * a dot.  The release archive is one object linked by GCC's LTO (-r), which
 * left global the names it made for lib/'s statics shared between its
 * partitions (take.lto_priv.0) and their debug info (actor.c.f45d6153):
 * a program built with GCC's LTO names its own statics so, and one with a
 * static take() in two files failed to link against the archive
 * ("multiple definition of `take.lto_priv.0'").  The Makefile makes them
 * local. */
static void test_static_library_defines_no_compiler_made_global_name(void **state)
{
	(void)state;
	/* A sanitizer build is never LTO, and ASan's own global names hold a
	 * dot on purpose (its ODR indicators, __odr_asan.<name>). */
	if (T_ASAN || T_TSAN)
		T_SKIP("the release build's archive, the one LTO links");
	bool fat = archive_is_fat();
	char *objs = malloc(1 << 22);
	assert_non_null(objs);
	sh_ok(objs, 1 << 22, "readelf -sW '%s/lib/libcbcmn.a'", builddir);
	size_t globals = 0, bad = 0;
	for (char *l = strtok(objs, "\n"); l; l = strtok(NULL, "\n")) {
		char bind[16], ndx[16], name[256];
		if (sscanf(l, " %*d: %*s %*s %*s %15s %*s %15s %255s", bind, ndx, name) != 3 ||
		    !strcmp(ndx, "UND") || !strcmp(bind, "LOCAL"))
			continue;
		globals++;
		/* sys/sdt.h's probe base is weak on purpose, one per program.
		 * A fat LTO object (LTO_ARCHIVE=fat) names its early debug
		 * info FILE.c.HASH, weak: every GCC -flto -g object does, and
		 * a weak name never clashes. */
		if (fat && !strcmp(bind, "WEAK") && early_debug_name(name))
			continue;
		if (strchr(name, '.') && strcmp(name, "_.stapsdt.base") && bad++ < 5)
			printf("%s %s\n", bind, name);
	}
	free(objs);
	assert_true(globals > 100);
	if (bad)
		fail_msg("%zu compiler-made names are global in libcbcmn.a", bad);
}

/* The version calls agree with the header's macros (this binary links the
 * static library). */
static void test_version_calls_say_the_header_version(void **state)
{
	(void)state;
	assert_string_equal(cbcmn_version(), VERSION);
	assert_int_equal(cbcmn_version_number(),
			 (CBCMN_VERSION_MAJOR << 16) | (CBCMN_VERSION_MINOR << 8) | CBCMN_VERSION_PATCH);
	/* Each part fits its byte, so the number orders as the versions do. */
	assert_true(CBCMN_VERSION_MINOR < 256 && CBCMN_VERSION_PATCH < 256);
}

/* ---- a host that dlclose()s the library ---------------------------------------- */

/* janus keeps a thread's nurseries with a pthread key whose destructor
 * runs at the thread's exit: code of this library.  A host that used janus
 * on a thread, shut the runtime down and dlclose()d the library used to
 * crash when that thread ended (the destructor was unmapped); the library
 * is linked -z nodelete, so a dlclose() leaves it mapped. */
typedef int64_t (*dl_task_fn)(void *);
static struct {
	void *(*create)(void);
	int (*spawn)(dl_task_fn, void *);
	long (*await_all)(void);
	void (*shutdown)(void);
	int used[2], go[2];
} dl;

static int64_t dl_nothing(void *arg)
{
	(void)arg;
	return 0;
}

static void *dl_janus_thread(void *arg)
{
	(void)arg;
	char c = 0;
	bool ok = dl.create() && dl.spawn(dl_nothing, NULL) == 0 && dl.await_all() == 0;
	c = ok ? 'y' : 'n';
	if (write(dl.used[1], &c, 1) != 1 || read(dl.go[0], &c, 1) != 1)
		return NULL;
	return NULL; /* the key's destructor runs now */
}

static int dl_child(const char *so)
{
	void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return 2;
	*(void **)&dl.create = dlsym(h, "janus_nursery_create");
	*(void **)&dl.spawn = dlsym(h, "janus_nursery_spawn");
	*(void **)&dl.await_all = dlsym(h, "janus_nursery_await_all");
	*(void **)&dl.shutdown = dlsym(h, "janus_rt_shutdown");
	if (!dl.create || !dl.spawn || !dl.await_all || !dl.shutdown || pipe(dl.used) || pipe(dl.go))
		return 3;
	pthread_t th;
	char c;
	if (pthread_create(&th, NULL, dl_janus_thread, NULL) || read(dl.used[0], &c, 1) != 1 || c != 'y')
		return 4;
	dl.shutdown();
	dlclose(h);
	if (write(dl.go[1], "x", 1) != 1 || pthread_join(th, NULL))
		return 5;
	return 0;
}

static void test_dlclose_then_a_janus_thread_ends_does_not_crash(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN)
		T_SKIP("dlclose: a sanitizer runtime keeps its own hold on what it loaded");
	char so[PATH_MAX + 32];
	snprintf(so, sizeof(so), "%s/lib/libcbcmn.so", builddir);
	if (access(so, R_OK))
		T_SKIP("dlclose: no %s in this build", so);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(dl_child(so));
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		fail_msg("the thread's exit after dlclose died of signal %d", WTERMSIG(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- a program built against the install ------------------------------------------ */

/* The README's example (the C block under "## Example") into path. */
static void readme_example(const char *path)
{
	char readme[PATH_MAX + 16];
	snprintf(readme, sizeof(readme), "%s/README.md", srcdir);
	FILE *in = fopen(readme, "r");
	assert_non_null(in);
	FILE *out = fopen(path, "w");
	assert_non_null(out);
	char line[1024];
	int state = 0; /* 0: before ## Example, 1: before ```c, 2: in it, 3: done */
	size_t n = 0;
	while (state < 3 && fgets(line, sizeof(line), in)) {
		if (state == 0 && !strncmp(line, "## Example", 10))
			state = 1;
		else if (state == 1 && !strncmp(line, "```c", 4))
			state = 2;
		else if (state == 2 && !strncmp(line, "```", 3))
			state = 3;
		else if (state == 2)
			n += fputs(line, out) >= 0;
	}
	fclose(in);
	assert_int_equal(fclose(out), 0);
	if (state != 3 || n < 10)
		fail_msg("README.md has no C example under '## Example'");
}

static void test_readme_example_builds_with_pkg_config_and_runs(void **state)
{
	(void)state;
	struct inst *in = install_at("/usr/local", NULL);
	if (!in)
		return;
	char src[PATH_MAX + 32], out[8192];
	snprintf(src, sizeof(src), "%s/fib.c", in->dest);
	readme_example(src);
	/* pkg-config finds the staged install as it would the real one; the
	 * sysroot maps its paths into DESTDIR.  The example compiles clean
	 * without _GNU_SOURCE (the public headers must not need it). */
	const char *pc = "PKG_CONFIG_PATH=\"$D/usr/local/lib/pkgconfig\" PKG_CONFIG_SYSROOT_DIR=\"$D\"";
	sh_ok(out, sizeof(out), "D='%s'; %s pkg-config --modversion cbcmn", in->dest, pc);
	assert_string_equal(out, VERSION "\n");
	sh_ok(out, sizeof(out),
	      "D='%s'; cc -std=gnu11 -Wall -Wextra -Werror -o \"$D/fib-shared\" \"$D/fib.c\" "
	      "$(%s pkg-config --cflags --libs cbcmn)",
	      in->dest, pc);
	sh_ok(out, sizeof(out), "readelf -d '%s/fib-shared' | grep NEEDED", in->dest);
	if (!strstr(out, "[" SONAME "]"))
		fail_msg("the shared example does not need " SONAME ":\n%s", out);
	sh_ok(out, sizeof(out), "LD_LIBRARY_PATH='%s/usr/local/lib' '%s/fib-shared' 20", in->dest,
	      in->dest);
	assert_string_equal(out, "fib(20) = 6765\n");

	/* Static: pkg-config --static adds what libcbcmn.a needs (liburing,
	 * libnuma through Requires.private); the program needs no libcbcmn.so. */
	if (sh(out, sizeof(out), "D='%s'; cc -std=gnu11 -Wall -Wextra -Werror -static -o \"$D/fib-static\" "
				 "\"$D/fib.c\" $(%s pkg-config --static --cflags --libs cbcmn)",
	       in->dest, pc)) {
		/* A distribution without static libc, liburing or libnuma. */
		if (strstr(out, "cannot find -l")) {
			inst_free(in);
			T_SKIP("no static link here: %s", out);
			return;
		}
		fail_msg("static link: %s", out);
	} else {
		sh_ok(out, sizeof(out), "readelf -d '%s/fib-static'", in->dest);
		if (strstr(out, "libcbcmn"))
			fail_msg("the static example needs a libcbcmn: %s", out);
		sh_ok(out, sizeof(out), "'%s/fib-static' 21", in->dest);
		assert_string_equal(out, "fib(21) = 10946\n");
	}
	inst_free(in);
}

/* Each installed header compiles on its own, the first and only one a
 * file includes, as C (-std=c99 -pedantic: no GNU extension needed) and,
 * where g++ is, as C++: the man pages offer "#include <cbcmn_io.h>"
 * alone.  cbcmn_io.h and cbcmn_metrics.h did not compile without cbcmn.h
 * before them (CBCMN_API, cbcmn_cx, cbcmn_stats unknown). */
static void header_compiles_alone(const char *name, void *arg)
{
	struct inst *in = arg;
	char out[8192];
	const char *cc[] = {"cc -std=c99 -pedantic -x c", "c++ -std=c++17 -x c++"};
	for (int k = 0; k < 2; k++) {
		if (k == 1 && sh(NULL, 0, "command -v c++"))
			continue;
		if (sh(out, sizeof(out),
		       "printf '#include <%s>\\nint main(void) { return 0; }\\n' | %s -Wall -Wextra -Werror "
		       "-fsyntax-only -I'%s/usr/local/include' -",
		       name, cc[k], in->dest))
			fail_msg("#include <%s> alone (%s): %s", name, cc[k], out);
	}
}

static void test_each_header_compiles_alone(void **state)
{
	(void)state;
	struct inst *in = install_at("/usr/local", NULL);
	if (!in)
		return;
	assert_true(each_source("lib/include", "", ".h", header_compiles_alone, in) >= 5);
	inst_free(in);
}

/* The README's example with its fifth spawn failing (-ENOMEM, as a spawn
 * may): it must say so and exit non-zero.  It printed a wrong sum and
 * exited 0 (the spawns' errors were dropped, and the nursery has no
 * failure to report for a child that never was).  Against this build's
 * libcbcmn.a, the spawn wrapped by the linker; no install. */
static void test_readme_example_reports_a_failed_spawn(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN || !srcdir[0])
		T_SKIP("the release build's library, from a checkout");
	char dir[] = "/tmp/cbcmn-readme-XXXXXX", src[64], wrap[64], out[8192];
	assert_non_null(mkdtemp(dir));
	snprintf(src, sizeof(src), "%s/fib.c", dir);
	snprintf(wrap, sizeof(wrap), "%s/wrap.c", dir);
	readme_example(src);
	FILE *w = fopen(wrap, "w");
	assert_non_null(w);
	fputs("#include <errno.h>\n#include <cbcmn.h>\n"
	      "int __real_cbcmn_nursery_spawn(cbcmn_cx *, cbcmn_nursery *, cbcmn_task_fn, void *,"
	      " cbcmn_task **);\n"
	      "static _Atomic int calls;\n"
	      "int __wrap_cbcmn_nursery_spawn(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_task_fn fn,"
	      " void *arg, cbcmn_task **t)\n"
	      "{\n\treturn ++calls == 5 ? -ENOMEM : __real_cbcmn_nursery_spawn(cx, n, fn, arg, t);\n}\n",
	      w);
	assert_int_equal(fclose(w), 0);
	sh_ok(out, sizeof(out),
	      "cc -std=gnu11 -Wall -Wextra -Werror -I'%s/lib/include' -Wl,--wrap=cbcmn_nursery_spawn "
	      "-o '%s/fib' '%s' '%s' '%s/lib/libcbcmn.a' -luring -lnuma -lpthread",
	      srcdir, dir, src, wrap, builddir);
	int rc = sh(out, sizeof(out), "'%s/fib' 10", dir);
	sh(NULL, 0, "rm -rf '%s'", dir);
	if (rc == 0)
		fail_msg("a failed spawn went unsaid: exit 0, '%s'", out);
	assert_non_null(strstr(out, "cbcmn: "));
}

/* A program linked against this build's libcbcmn.a by GCC with -flto and
 * with -fno-lto: both run.  The program wraps cbcmn_nursery_spawn(), which
 * cbcmn_runtime_run() (another of lib/'s files) calls.  An archive of fat
 * LTO objects (make LTO_ARCHIVE=fat, docs/INSTALL.md) is lib/'s files one
 * by one: the -flto link optimises the program with the library (its IR is
 * in the link's resolution file), and the wrap reaches the library's own
 * call in both links.  The default archive is one object: no IR, and
 * lib/'s call stays inside it (said, not asserted); LTO=0's objects have
 * no IR either. */
static const char lto_prog[] =
	"#include <stdio.h>\n#include <cbcmn.h>\n"
	"int __real_cbcmn_nursery_spawn(cbcmn_cx *, cbcmn_nursery *, cbcmn_task_fn, void *,"
	" cbcmn_task **);\n"
	"static _Atomic int calls;\n"
	"int __wrap_cbcmn_nursery_spawn(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_task_fn fn,"
	" void *arg, cbcmn_task **t)\n"
	"{\n\tcalls++;\n\treturn __real_cbcmn_nursery_spawn(cx, n, fn, arg, t);\n}\n"
	"static int64_t body(cbcmn_cx *cx, void *arg)\n{\n\t(void)cx;\n\treturn *(int *)arg + 1;\n}\n"
	"int main(void)\n{\n\tcbcmn_config c;\n\tcbcmn_runtime *rt;\n\tint64_t r = 0;\n"
	"\tint v = 41;\n\tcbcmn_config_init(&c);\n\tc.workers = 1;\n"
	"\tif (cbcmn_runtime_create(&c, &rt))\n\t\treturn 1;\n"
	"\tint rc = cbcmn_runtime_run(rt, body, &v, &r);\n\tcbcmn_runtime_destroy(rt);\n"
	"\tprintf(\"rc %d result %lld wrapped %d\\n\", rc, (long long)r, (int)calls);\n"
	"\treturn rc != 0;\n}\n";

static void test_program_links_the_archive_with_and_without_lto(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN || !srcdir[0])
		T_SKIP("the release build's library, from a checkout");
	/* The archive the build was asked for (the Makefile says), not the
	 * one it holds: a LTO_ARCHIVE=fat that installed the one-object
	 * archive passed as the default build. */
	bool fat = T_LTO_ARCHIVE_FAT; /* the Makefile's -D: 1 for LTO_ARCHIVE=fat */
	if (archive_is_fat() != fat)
		fail_msg("make LTO_ARCHIVE=%s built a libcbcmn.a %s GCC's IR", fat ? "fat" : "one",
			 fat ? "without" : "with");
	char dir[] = "/tmp/cbcmn-lto-XXXXXX", src[64], out[8192];
	assert_non_null(mkdtemp(dir));
	snprintf(src, sizeof(src), "%s/prog.c", dir);
	FILE *w = fopen(src, "w");
	assert_non_null(w);
	fputs(lto_prog, w);
	assert_int_equal(fclose(w), 0);
	/* GCC of the build's version: another's -flto link refuses its IR
	 * (docs/INSTALL.md); CC=gcc-13 wants gcc-13 here, not gcc. */
	char gcc[32];
	snprintf(gcc, sizeof(gcc), "gcc-%d", __GNUC__);
	if (sh(NULL, 0, "command -v %s >/dev/null", gcc))
		snprintf(gcc, sizeof(gcc), "gcc");
	static const char *const modes[] = {"-flto=auto", "-fno-lto"};
	int wrapped[2] = {-1, -1};
	for (int m = 0; m < 2; m++) {
		/* -save-temps: the -flto link keeps its resolution file
		 * (prog.res), which names each object whose IR it took. */
		sh_ok(out, sizeof(out),
		      "cd '%s' && %s -std=gnu11 -O2 -Wall -Wextra -Werror %s -save-temps "
		      "-I'%s/lib/include' -Wl,--wrap=cbcmn_nursery_spawn -o prog prog.c "
		      "'%s/lib/libcbcmn.a' -luring -lnuma -lpthread",
		      dir, gcc, modes[m], srcdir, builddir);
		sh_ok(out, sizeof(out), "'%s/prog'", dir);
		long long r;
		int rc;
		if (sscanf(out, "rc %d result %lld wrapped %d", &rc, &r, &wrapped[m]) != 3)
			fail_msg("%s: '%s'", modes[m], out);
		assert_int_equal(rc, 0);
		assert_int_equal(r, 42);
		if (m == 0) {
			int ir = sh(out, sizeof(out), "grep -c 'libcbcmn[.]a@' '%s/prog.res'", dir) == 0;
			if (fat && !ir)
				fail_msg("-flto linked none of the fat archive's IR");
			if (!fat && ir)
				fail_msg("an archive without IR gave the -flto link IR");
		}
	}
	sh(NULL, 0, "rm -rf '%s'", dir);
	if (fat) {
		assert_int_equal(wrapped[0], 1);
		assert_int_equal(wrapped[1], 1);
	} else {
		printf("libcbcmn.a holds no IR: --wrap saw %d and %d of lib/'s own calls\n",
		       wrapped[0], wrapped[1]);
	}
}

/* make LTO_ARCHIVE=fat (and TOOLS_LTO=1) archive GCC's IR with GCC's ar
 * of CC's version: gcc-ar-99 for CC=gcc-99.  One not found is one line
 * that names it, before anything is built; it was sh's "gcc-ar-13: not
 * found" and make's error, after all of lib/ had compiled (make -n, here,
 * printed the whole build). */
static void test_fat_archive_without_gcc_ar_is_one_line(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN || !srcdir[0])
		T_SKIP("the release build's Makefile, from a checkout");
	static const char *const cases[][2] = {
		{"LTO_ARCHIVE=fat GCC_AR=/nonexistent/gcc-ar", "GCC_AR=/nonexistent/gcc-ar is not found"},
		{"LTO_ARCHIVE=fat CC=gcc-99", "GCC_AR=gcc-ar-99 is not found"},
		{"TOOLS_LTO=1 CC=/nonexistent/x86_64-linux-gnu-gcc-99",
		 "GCC_AR=/nonexistent/x86_64-linux-gnu-gcc-ar-99 is not found"},
	};
	char dir[] = "/tmp/cbcmn-gccar-XXXXXX", out[8192];
	assert_non_null(mkdtemp(dir));
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		int rc = sh(out, sizeof(out),
			    "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -n -C '%s' SAN= "
			    "BUILD='%s/build' %s all",
			    srcdir, dir, cases[k][0]);
		const char *nl = strchr(out, '\n');
		if (rc == 0 || !strstr(out, cases[k][1]) || (nl && nl[1]))
			fail_msg("make %s: exit %d, %s", cases[k][0], rc, out);
	}
	/* The default build needs no GCC_AR. */
	sh_ok(out, sizeof(out),
	      "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -n -C '%s' SAN= BUILD='%s/build' "
	      "GCC_AR=/nonexistent/gcc-ar all >/dev/null",
	      srcdir, dir);
	sh_ok(out, sizeof(out), "ls -A '%s'", dir);
	assert_string_equal(out, "");
	sh(NULL, 0, "rm -rf '%s'", dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_version_calls_say_the_header_version),
		INSTALL_TEST(test_install_puts_each_file_in_its_place),
		INSTALL_TEST(test_uninstall_removes_what_install_put_and_nothing_else),
		INSTALL_TEST(test_destdir_with_a_space_stays_inside_it),
		INSTALL_TEST(test_relative_prefix_is_refused),
		INSTALL_TEST(test_install_where_it_may_not_write_is_one_line),
		INSTALL_TEST(test_multiarch_libdir_is_where_the_pc_file_points),
		INSTALL_TEST(test_shared_library_has_the_soname_and_exports_the_map_alone),
		T_WATCHED_TEST(test_static_library_defines_no_compiler_made_global_name),
		cmocka_unit_test(test_dlclose_then_a_janus_thread_ends_does_not_crash),
		INSTALL_TEST(test_readme_example_builds_with_pkg_config_and_runs),
		INSTALL_TEST(test_each_header_compiles_alone),
		cmocka_unit_test(test_readme_example_reports_a_failed_spawn),
		T_WATCHED_TEST_LONG(test_program_links_the_archive_with_and_without_lto),
		cmocka_unit_test(test_fat_archive_without_gcc_ar_is_one_line),
	};
	return cmocka_run_group_tests(tests, find_dirs, NULL);
}
