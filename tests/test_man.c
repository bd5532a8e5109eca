/* test_man: the manual pages under man/ cover what the library exports and
 * the tools it builds, their links resolve, and the formatter finds nothing
 * wrong in them.  Reads only the source tree (no runtime is started):
 *   - every name in a global: section of lib/libcbcmn.map has a man3 page
 *     named for it, a real page or a ".so man3/PAGE.3" link, and the NAME
 *     section of the page it lands on lists it;
 *   - every tools/cbcmn-*.c has a man1 page whose NAME lists the tool;
 *   - every ".so" link names an existing page that is not itself a link;
 *   - every real page has its .TH (named for its file) and the sections a
 *     reader looks for;
 *   - groff -man -ww finds no warning in any real page (a skip that says
 *     why where groff is not installed).
 * The tree is found above the binary (a build under the checkout, or the
 * copy run-unprivileged.sh makes), else above the working directory (make
 * runs in the checkout, whatever BUILD is), or at $CBCMN_SOURCE_DIR. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <spawn.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

extern char **environ;

/* Room for the root and a page's path (or a ".so" target) under it. */
#define PBUF (PATH_MAX + 1024)

static char root[PATH_MAX]; /* the source tree: lib/libcbcmn.map and man/ */

/* vsnprintf into out: false if it did not fit.  (A function of ours, so
 * that gcc's -Wformat-truncation does not second-guess sizes we check.) */
static bool vfmt(char *out, size_t outlen, const char *f, va_list ap)
{
	int n = vsnprintf(out, outlen, f, ap);
	return n >= 0 && (size_t)n < outlen;
}

static bool fmt_ok(char *out, size_t outlen, const char *f, ...) __attribute__((format(printf, 3, 4)));
static bool fmt_ok(char *out, size_t outlen, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	bool ok = vfmt(out, outlen, f, ap);
	va_end(ap);
	return ok;
}

/* In a test: a path that does not fit fails it rather than read another. */
static void fmt(char *out, size_t outlen, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *out, size_t outlen, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	bool ok = vfmt(out, outlen, f, ap);
	va_end(ap);
	assert_true(ok);
}

/* Append a line to a report; one that does not fit is cut (the count of
 * failures is the test's verdict, the report its explanation). */
static void note(char *why, size_t whylen, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void note(char *why, size_t whylen, const char *f, ...)
{
		size_t used = strlen(why);
	va_list ap;
	va_start(ap, f);
	vfmt(why + used, whylen - used, f, ap);
	va_end(ap);
}

/* dir holds the map and the man tree: take it as the root. */
static bool try_root(const char *dir)
{
	char p[PBUF];
	if (!fmt_ok(p, sizeof(p), "%s/lib/libcbcmn.map", dir) || access(p, R_OK))
		return false;
	if (!fmt_ok(p, sizeof(p), "%s/man/man3", dir) || access(p, R_OK | X_OK))
		return false;
	return fmt_ok(root, sizeof(root), "%s", dir);
}

/* start and up to 6 of its parents. */
static bool try_above(const char *start)
{
	char d[PATH_MAX];
	fmt_ok(d, sizeof(d), "%s", start);
	for (int up = 0; up < 7; up++) {
		if (try_root(d))
			return true;
		if (!strcmp(d, "/"))
			break;
		char tmp[PATH_MAX];
		fmt_ok(tmp, sizeof(tmp), "%s", d);
		fmt_ok(d, sizeof(d), "%s", dirname(tmp));
	}
	return false;
}

static int find_root(void **state)
{
	(void)state;
	const char *env = getenv("CBCMN_SOURCE_DIR");
	if (env && *env)
		return try_root(env) ? 0 : -1;
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		if (try_above(dirname(exe)))
			return 0;
	}
	char cwd[PATH_MAX];
	if (getcwd(cwd, sizeof(cwd)) && try_above(cwd))
		return 0;
	/* No tree, no test: a pass here would hide a missing page. */
	print_error("test_man: no source tree (lib/libcbcmn.map and man/man3) above the "
		    "binary or the working directory; set CBCMN_SOURCE_DIR\n");
	return -1;
}

/* The whole file, NUL-terminated; NULL if it cannot be read. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	size_t got;
	while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += got;
		if (cap - len < 2) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	fclose(f);
	if (buf)
		buf[len] = 0;
	return buf;
}

/* ---- the map ----------------------------------------------------------------- */

#define MAX_SYMS 1024
#define SYM_LEN 128

/* The names in the global: sections of every version node of the map. */
static int map_symbols(char syms[][SYM_LEN], int max)
{
	char path[PBUF];
	fmt(path, sizeof(path), "%s/lib/libcbcmn.map", root);
	char *text = slurp(path);
	assert_non_null(text);
	/* Comments out first: they may hold any word. */
	for (char *c = strstr(text, "/*"); c; c = strstr(c, "/*")) {
		char *e = strstr(c + 2, "*/");
		char *stop = e ? e + 2 : c + strlen(c);
		memset(c, ' ', (size_t)(stop - c));
		c = stop;
	}
	int n = 0;
	bool global = false;
	char *save = NULL;
	for (char *tok = strtok_r(text, " \t\n{", &save); tok; tok = strtok_r(NULL, " \t\n{", &save)) {
		if (tok[0] == '}') { /* a node ends: "} CBCMN_0.1;" names its parent */
			global = false;
			continue;
		}
		if (!strcmp(tok, "global:")) {
			global = true;
			continue;
		}
		if (!strcmp(tok, "local:")) {
			global = false;
			continue;
		}
		size_t len = strlen(tok);
		if (!global || len < 2 || tok[len - 1] != ';')
			continue; /* a node's name, "*;" of local:, ... */
		tok[len - 1] = 0;
		assert_true(n < max);
		assert_true(strlen(tok) < SYM_LEN);
		fmt(syms[n++], SYM_LEN, "%s", tok);
	}
	free(text);
	return n;
}

/* ---- pages ------------------------------------------------------------------- */

/* The page's ".so" target ("man3/x.3"), copied to out, or false for a real
 * page.  A link page is that one line and nothing else. */
static bool so_target(const char *text, char *out, size_t outlen)
{
	if (strncmp(text, ".so ", 4))
		return false;
	const char *t = text + 4;
	size_t len = strcspn(t, "\n");
	fmt(out, outlen, "%.*s", (int)len, t);
	return true;
}

/* Does the NAME section of page text list name (before its "\-")? */
static bool name_lists(const char *text, const char *name)
{
	const char *s = strstr(text, ".SH NAME\n");
	if (!s)
		return false;
	s += strlen(".SH NAME\n");
	const char *end = strstr(s, "\\-");
	const char *next = strstr(s, "\n.SH");
	if (!end || (next && next < end))
		return false;
	size_t want = strlen(name);
	const char *p = s;
	while (p < end) {
		while (p < end && (*p == ',' || isspace((unsigned char)*p)))
			p++;
		const char *q = p;
		while (q < end && *q != ',' && !isspace((unsigned char)*q))
			q++;
		if ((size_t)(q - p) == want && !strncmp(p, name, want))
			return true;
		p = q;
	}
	return false;
}

/* Check that the page man/<rel> documents name, following one link.  On a
 * failure, appends a line to why and returns false. */
static bool documents(const char *rel, const char *name, char *why, size_t whylen)
{
	char path[PBUF], target[256];
	fmt(path, sizeof(path), "%s/man/%s", root, rel);
	char *text = slurp(path);
		if (!text) {
		note(why, whylen, "  %s: no page man/%s\n", name, rel);
		return false;
	}
	if (so_target(text, target, sizeof(target))) {
		free(text);
		fmt(path, sizeof(path), "%s/man/%s", root, target);
		text = slurp(path);
		if (!text) {
			note(why, whylen, "  %s: man/%s links to %s, which is missing\n",
				 name, rel, target);
			return false;
		}
		rel = target;
	}
	bool ok = name_lists(text, name);
	if (!ok)
		note(why, whylen, "  %s: the NAME section of man/%s does not list it\n",
			 name, rel);
	free(text);
	return ok;
}

static void test_every_exported_symbol_has_a_page(void **state)
{
	(void)state;
	static char syms[MAX_SYMS][SYM_LEN];
	int n = map_symbols(syms, MAX_SYMS);
	assert_true(n > 0); /* a map we could not read is not "all covered" */
	static char why[16384];
	why[0] = 0;
	int missing = 0;
	for (int i = 0; i < n; i++) {
		char rel[SYM_LEN + 16];
		fmt(rel, sizeof(rel), "man3/%s.3", syms[i]);
		if (!documents(rel, syms[i], why, sizeof(why)))
			missing++;
	}
	if (missing)
		print_error("%d of %d exported symbols are not documented:\n%s", missing, n, why);
	else
		printf("%d exported symbols, each documented in man/man3\n", n);
	assert_int_equal(missing, 0);
}

static void test_every_tool_has_a_page(void **state)
{
	(void)state;
	char dir[PBUF];
	fmt(dir, sizeof(dir), "%s/tools", root);
	DIR *d = opendir(dir);
	assert_non_null(d);
	static char why[8192];
	why[0] = 0;
	int tools = 0, missing = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (strncmp(de->d_name, "cbcmn-", 6) || len < 3 || strcmp(de->d_name + len - 2, ".c"))
			continue;
		char tool[256], rel[300];
		fmt(tool, sizeof(tool), "%.*s", (int)(len - 2), de->d_name);
		fmt(rel, sizeof(rel), "man1/%s.1", tool);
		tools++;
		if (!documents(rel, tool, why, sizeof(why)))
			missing++;
	}
	closedir(d);
	assert_true(tools > 0);
	if (missing)
		print_error("%d of %d tools have no page:\n%s", missing, tools, why);
	else
		printf("%d tools, each documented in man/man1\n", tools);
	assert_int_equal(missing, 0);
}

/* ---- every page of man1 and man3 ---------------------------------------------- */

struct page {
	char rel[300]; /* "man3/x.3" */
	bool link;
};

/* The pages of man/<sect> whose names end in .<digit of sect>. */
static int list_pages(const char *sect, struct page *out, int max)
{
	char dir[PBUF];
	fmt(dir, sizeof(dir), "%s/man/%s", root, sect);
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	char suffix[3] = {'.', sect[strlen(sect) - 1], 0};
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (de->d_name[0] == '.' || len < 3 || strcmp(de->d_name + len - 2, suffix))
			continue;
		assert_true(n < max);
		fmt(out[n].rel, sizeof(out[n].rel), "%s/%s", sect, de->d_name);
		char path[PBUF];
		fmt(path, sizeof(path), "%s/man/%s", root, out[n].rel);
		char *text = slurp(path);
		assert_non_null(text);
		char target[256];
		out[n].link = so_target(text, target, sizeof(target));
		free(text);
		n++;
	}
	closedir(d);
	return n;
}

#define MAX_PAGES 1024
static struct page pages[MAX_PAGES];
static int npages;

static void all_pages(void)
{
	if (npages)
		return;
	npages = list_pages("man1", pages, MAX_PAGES);
	npages += list_pages("man3", pages + npages, MAX_PAGES - npages);
}

static void test_links_resolve(void **state)
{
	(void)state;
	all_pages();
	int bad = 0, links = 0;
	for (int i = 0; i < npages; i++) {
		if (!pages[i].link)
			continue;
		links++;
		char path[PBUF], target[256];
		fmt(path, sizeof(path), "%s/man/%s", root, pages[i].rel);
		char *text = slurp(path);
		assert_non_null(text);
		so_target(text, target, sizeof(target));
		/* One line: man-db and groff read the rest as text. */
		size_t len = strlen(text), nl = strcspn(text, "\n");
		bool one_line = nl + 1 == len;
		free(text);
		fmt(path, sizeof(path), "%s/man/%s", root, target);
		char *t = slurp(path);
		char dummy[256];
		if (!t || so_target(t, dummy, sizeof(dummy)) || !one_line ||
		    strncmp(target, "man", 3) || strchr(target, ' ')) {
			print_error("man/%s: \".so %s\": %s\n", pages[i].rel, target,
				    !t ? "no such page"
				    : !one_line ? "a link page is one line"
				    : strncmp(target, "man", 3) ? "not relative to the man/ tree (manN/page.N)"
								: "a link to a link");
			bad++;
		}
		free(t);
	}
	printf("%d pages, %d of them links\n", npages, links);
	assert_int_equal(bad, 0);
}

/* The page's .TH names its file, in capitals, and its section; it has the
 * sections every reader looks for. */
static void test_pages_have_their_sections(void **state)
{
	(void)state;
	all_pages();
	int bad = 0;
	for (int i = 0; i < npages; i++) {
		if (pages[i].link)
			continue;
		char path[PBUF];
		fmt(path, sizeof(path), "%s/man/%s", root, pages[i].rel);
		char *text = slurp(path);
		assert_non_null(text);
		const char *base = strchr(pages[i].rel, '/') + 1;
		size_t blen = strlen(base) - 2; /* without ".N" */
		char th[320];
		strcpy(th, ".TH ");
		size_t k = 4;
		for (size_t j = 0; j < blen && k < sizeof(th) - 4; j++)
			th[k++] = (char)toupper((unsigned char)base[j]);
		fmt(th + k, sizeof(th) - k, " %c ", base[blen + 1]);
		const char *need[] = {".SH NAME\n", ".SH SYNOPSIS\n", ".SH DESCRIPTION\n",
				      ".SH SEE ALSO\n", base[blen + 1] == '3' ? ".SH RETURN VALUE\n"
									      : ".SH EXAMPLES\n"};
		if (strncmp(text, th, strlen(th))) {
			print_error("man/%s: does not start with \"%s\"\n", pages[i].rel, th);
			bad++;
		}
		for (size_t j = 0; j < sizeof(need) / sizeof(need[0]); j++)
			if (!strstr(text, need[j])) {
				print_error("man/%s: no %.*s\n", pages[i].rel, (int)strlen(need[j]) - 1,
					    need[j]);
				bad++;
			}
		/* The page documents what it is named for. */
		char self[320];
		fmt(self, sizeof(self), "%.*s", (int)blen, base);
		if (!name_lists(text, self)) {
			print_error("man/%s: its NAME section does not list %s\n", pages[i].rel, self);
			bad++;
		}
		free(text);
	}
	assert_int_equal(bad, 0);
}

/* ---- the formatter -------------------------------------------------------------- */

/* An executable named name on $PATH? */
static bool on_path(const char *name)
{
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/bin:/bin";
	char buf[PATH_MAX];
	while (*path) {
		size_t len = strcspn(path, ":");
		fmt(buf, sizeof(buf), "%.*s/%s", (int)len, path, name);
		if (len && access(buf, X_OK) == 0)
			return true;
		path += len + (path[len] == ':');
	}
	return false;
}

static void test_groff_finds_no_warnings(void **state)
{
	(void)state;
	if (!on_path("groff")) {
		T_SKIP("groff is not installed (Debian package groff-base): the pages' roff "
		       "is not checked");
		return;
	}
	all_pages();
	/* One groff for every real page: each starts with its own .TH.  -Tutf8
	 * as man(1) formats for a terminal, where a line that cannot be broken
	 * or adjusted shows; -z: no output, only the diagnostics. */
	char *argv[MAX_PAGES + 8];
	int a = 0;
	argv[a++] = "groff";
	argv[a++] = "-man";
	argv[a++] = "-Tutf8";
	argv[a++] = "-ww";
	argv[a++] = "-z";
	static char paths[MAX_PAGES][PATH_MAX + 320];
	int real = 0;
	for (int i = 0; i < npages; i++) {
		if (pages[i].link)
			continue;
		fmt(paths[real], sizeof(paths[real]), "%s/man/%s", root, pages[i].rel);
		argv[a++] = paths[real++];
	}
	argv[a] = NULL;
	assert_true(real > 0);

	/* Its stderr in memory: no file to leave behind, no pipe to fill. */
	int efd = memfd_create("test_man", MFD_CLOEXEC);
	assert_true(efd >= 0);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, efd, 2);
	pid_t pid;
	int rc = posix_spawnp(&pid, "groff", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	assert_int_equal(rc, 0);
	int st;
	while (waitpid(pid, &st, 0) < 0)
		assert_int_equal(errno, EINTR);
	char err[8192];
	ssize_t n = pread(efd, err, sizeof(err) - 1, 0);
	close(efd);
	err[n > 0 ? n : 0] = 0;
	if (n > 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		print_error("groff -man -ww on %d pages: status %#x\n%s", real, st, err);
	else
		printf("groff -man -Tutf8 -ww: %d pages, no warning\n", real);
	assert_true(n == 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_exported_symbol_has_a_page),
		cmocka_unit_test(test_every_tool_has_a_page),
		cmocka_unit_test(test_links_resolve),
		cmocka_unit_test(test_pages_have_their_sections),
		cmocka_unit_test(test_groff_finds_no_warnings),
	};
	return cmocka_run_group_tests_name("man", tests, find_root, NULL);
}
