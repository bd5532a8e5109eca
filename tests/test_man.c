/* test_man: the manual pages under man/ cover what the library exports and
 * the tools it builds, their links resolve, and the formatter finds nothing
 * wrong in them.  Reads only the source tree (no runtime is started):
 *   - every name in a global: section of lib/libcbcmn.map has a man3 page
 *     named for it, a real page or a ".so man3/PAGE.3" link, and the NAME
 *     section of the page it lands on lists it;
 *   - every tools/cbcmn-*.c has a man1 page whose NAME lists the tool;
 *   - every ".so" link names an existing page that is not itself a link,
 *     and every reference to one of the project's pages resolves;
 *   - every real page has its .TH (named for its file, and for the
 *     release of lib/include/cbcmn.h) and the sections a reader looks for;
 *   - what a man3 SYNOPSIS declares (and the values its #define lines
 *     show) is what the public headers declare, and every exported
 *     function's prototype is shown on some page;
 *   - every option a tool parses is in its man1 page;
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

/* A character of a C identifier. */
static bool ident_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
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

/* Each reference to a page of this project (".BR cbcmn_x (3)", "cbcmn-top
 * (1)", "janus_... (3)", "CBCMN_... (3)") names a page that exists. */
static void test_references_resolve(void **state)
{
	(void)state;
	all_pages();
	int refs = 0, bad = 0;
	for (int i = 0; i < npages; i++) {
		if (pages[i].link)
			continue;
		char path[PBUF];
		fmt(path, sizeof(path), "%s/man/%s", root, pages[i].rel);
		char *text = slurp(path);
		assert_non_null(text);
		for (const char *l = text; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != 0)) {
			if (strncmp(l, ".BR ", 4))
				continue;
			/* ".BR name (N)" and ".BR a (3) ", " b (3)": each "name (N)" pair. */
			const char *e = l + strcspn(l, "\n");
			for (const char *p = l + 4; p < e; p++) {
				if (!(p == l + 4 || p[-1] == ' ' || p[-1] == '"'))
					continue;
				if (strncmp(p, "cbcmn", 5) && strncmp(p, "janus_", 6) &&
				    strncmp(p, "CBCMN_", 6))
					continue;
				size_t n = 0;
				while (p + n < e && (ident_char(p[n]) || p[n] == '-'))
					n++;
				if (p + n + 3 >= e || p[n] != ' ' || p[n + 1] != '(' ||
				    !isdigit((unsigned char)p[n + 2]) || p[n + 3] != ')')
					continue;
				char want[PBUF];
				fmt(want, sizeof(want), "%s/man/man%c/%.*s.%c", root, p[n + 2], (int)n, p,
				    p[n + 2]);
				refs++;
				if (access(want, R_OK)) {
					print_error("man/%s: %.*s(%c): no such page\n", pages[i].rel, (int)n, p,
						    p[n + 2]);
					bad++;
				}
			}
		}
		free(text);
	}
	printf("%d references between the pages, each to a page that exists\n", refs);
	assert_true(refs > 0);
	assert_int_equal(bad, 0);
}

/* The page's .TH names its file, in capitals, its section and the release
 * the tree's cbcmn.h says; it has the sections every reader looks for. */
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
		/* Its footer names the release it describes: the header's. */
		char line[512], ver[64];
		fmt(line, sizeof(line), "%.*s", (int)strcspn(text, "\n"), text);
		fmt(ver, sizeof(ver), "\"cbcmn %d.%d\"", CBCMN_VERSION_MAJOR, CBCMN_VERSION_MINOR);
		if (!strstr(line, ver)) {
			print_error("man/%s: its .TH does not say %s, the version of "
				    "lib/include/cbcmn.h\n", pages[i].rel, ver);
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

/* ---- the synopses ------------------------------------------------------------ */

/* Runs of white space become one space, none after "(" or before ")" and
 * ",": the header's line breaks and the page's layout then compare equal. */
static void normalise(char *s)
{
	char *w = s;
	bool space = false;
	for (const char *r = s; *r; r++) {
		if (isspace((unsigned char)*r)) {
			space = true;
			continue;
		}
		if (space && w > s && w[-1] != '(' && *r != ')' && *r != ',')
			*w++ = ' ';
		space = false;
		*w++ = *r;
	}
	*w = 0;
}

/* Blank out every C comment of s. */
static void uncomment(char *s)
{
	for (char *c = strstr(s, "/*"); c; c = strstr(c, "/*")) {
		char *e = strstr(c + 2, "*/");
		char *stop = e ? e + 2 : c + strlen(c);
		memset(c, ' ', (size_t)(stop - c));
		c = stop;
	}
}

/* needle in hay, not as part of a longer word: "int64_t f(" is not found
 * in "uint64_t f(", nor "uint64_t sys" in "uint64_t syscalls". */
static bool find_whole(const char *hay, const char *needle)
{
	size_t n = strlen(needle);
	for (const char *at = strstr(hay, needle); at; at = strstr(at + 1, needle))
		if ((at == hay || !ident_char(at[-1]) || !ident_char(needle[0])) &&
		    (!ident_char(at[n]) || !ident_char(needle[n - 1])))
			return true;
	return false;
}

/* Every public header (the .h files of lib/include), comments and export
 * attributes out, normalised. */
static char *headers_text(void)
{
	char dir[PBUF];
	fmt(dir, sizeof(dir), "%s/lib/include", root);
	DIR *d = opendir(dir);
	assert_non_null(d);
	size_t cap = 1, len = 0;
	char *all = calloc(1, 1);
	assert_non_null(all);
	int nh = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t nl = strlen(de->d_name);
		if (nl < 3 || strcmp(de->d_name + nl - 2, ".h"))
			continue;
		char path[PBUF];
		fmt(path, sizeof(path), "%s/%s", dir, de->d_name);
		char *h = slurp(path);
		assert_non_null(h);
		uncomment(h);
		size_t hl = strlen(h);
		cap += hl + 1;
		all = realloc(all, cap);
		assert_non_null(all);
		memcpy(all + len, h, hl);
		all[len + hl] = '\n';
		len += hl + 1;
		all[len] = 0;
		free(h);
		nh++;
	}
	closedir(d);
	assert_true(nh > 0);
	static const char *const attrs[] = {"CBCMN_API ", "JANUS_API "};
	for (size_t i = 0; i < 2; i++)
		for (char *a = strstr(all, attrs[i]); a; a = strstr(a, attrs[i]))
			memset(a, ' ', strlen(attrs[i]));
	normalise(all);
	return all;
}

/* What a request line of the SYNOPSIS prints: .B joins its arguments with
 * spaces, the alternating-font requests (.BI, .BR, ...) without; quotes
 * go, and the escapes the pages use there (\-, \e, \&) are undone. */
static void roff_text(const char *line, char *out, size_t outlen)
{
	bool spaced = !strncmp(line, ".B ", 3) || !strncmp(line, ".I ", 3);
	const char *p = line + strcspn(line, " ");
	size_t o = 0;
	bool first = true;
	out[0] = 0;
	while (*p && *p != '\n') {
		while (*p == ' ')
			p++;
		if (!*p || *p == '\n')
			break;
		const char *a = p, *e;
		if (*p == '"') {
			a = ++p;
			e = strchr(p, '"');
			if (!e)
				e = p + strcspn(p, "\n");
			p = *e == '"' ? e + 1 : e;
		} else {
			e = p + strcspn(p, " \n");
			p = e;
		}
		if (spaced && !first && o + 1 < outlen)
			out[o++] = ' ';
		first = false;
		for (const char *c = a; c < e && o + 1 < outlen; c++) {
			if (*c == '\\' && c + 1 < e) {
				c++;
				if (*c == '-')
					out[o++] = '-';
				else if (*c == 'e')
					out[o++] = '\\';
				/* \& prints nothing */
				continue;
			}
			out[o++] = *c;
		}
	}
	out[o] = 0;
}

/* Each declaration a man3 SYNOPSIS shows (prototypes, typedefs, structs;
 * not a macro's call form) is the header's, word for word once comments
 * and layout are set aside; each #include names a public header; and each
 * exported symbol's prototype is shown on some page. */
static void test_synopses_match_the_headers(void **state)
{
	(void)state;
	all_pages();
	char *hdr = headers_text();
	static char syms[MAX_SYMS][SYM_LEN];
	int nsyms = map_symbols(syms, MAX_SYMS);
	static bool shown[MAX_SYMS];
	memset(shown, 0, sizeof(shown));
	int checked = 0, bad = 0;
	for (int i = 0; i < npages; i++) {
		if (pages[i].link || strncmp(pages[i].rel, "man3/", 5))
			continue;
		char path[PBUF];
		fmt(path, sizeof(path), "%s/man/%s", root, pages[i].rel);
		char *text = slurp(path);
		assert_non_null(text);
		const char *s = strstr(text, ".SH SYNOPSIS\n");
		assert_non_null(s);
		const char *end = strstr(s + 1, "\n.SH ");
		if (!end)
			end = s + strlen(s);
		static char acc[8192];
		acc[0] = 0;
		/* Each line of the section ends with "\n" (end is one). */
		for (const char *l = strchr(s, '\n') + 1; l < end; l = strchr(l, '\n') + 1) {
			if (!strncmp(l, ".PP", 3) || !strncmp(l, ".fi", 3)) {
				acc[0] = 0;
				continue;
			}
			if (strncmp(l, ".B ", 3) && strncmp(l, ".BI ", 4))
				continue;
			char t[1024];
			roff_text(l, t, sizeof(t));
			if (!strncmp(t, "#include <", 10)) {
				char h[PBUF];
				fmt(h, sizeof(h), "%s/lib/include/%.*s", root, (int)strcspn(t + 10, ">"),
				    t + 10);
				if (access(h, R_OK)) {
					print_error("man/%s: %s: no such public header\n", pages[i].rel, t);
					bad++;
				}
				continue;
			}
			/* A constant's #define, whole: a value the page shows is
			 * the header's (a macro whose value changes between
			 * releases is shown by its name alone). */
			if (!strncmp(t, "#define ", 8)) {
				normalise(t);
				checked++;
				if (!find_whole(hdr, t)) {
					print_error("man/%s: not as the header defines it: %s\n",
						    pages[i].rel, t);
					bad++;
				}
				acc[0] = 0;
				continue;
			}
			size_t al = strlen(acc);
			fmt(acc + al, sizeof(acc) - al, "%s%s", al ? " " : "", t);
			uncomment(acc);
			normalise(acc);
			size_t n = strlen(acc);
			int depth = 0;
			for (const char *c = acc; *c; c++)
				depth += (*c == '{') - (*c == '}');
			if (!n || acc[n - 1] != ';' || depth)
				continue; /* the declaration (or the struct) goes on */
			acc[n - 1] = 0; /* a static inline's header line has "{" instead */
			/* CBCMN_CHECKPOINT(cx): a macro's call form, not its #define. */
			bool macro = isupper((unsigned char)acc[0]) &&
				     strcspn(acc, "(") < strcspn(acc, " ");
			if (!macro) {
				checked++;
				if (!find_whole(hdr, acc)) {
					print_error("man/%s: not as the header declares it: %s;\n",
						    pages[i].rel, acc);
					bad++;
				}
				for (int k = 0; k < nsyms; k++) {
					char call[SYM_LEN + 2];
					fmt(call, sizeof(call), "%s(", syms[k]);
					const char *at = strstr(acc, call);
					/* the name whole: not the tail of a longer one */
					if (at && (at == acc || !ident_char(at[-1])))
						shown[k] = true;
				}
			}
			acc[0] = 0;
		}
		free(text);
	}
	for (int k = 0; k < nsyms; k++)
		if (!shown[k]) {
			print_error("%s: no man3 SYNOPSIS shows its prototype\n", syms[k]);
			bad++;
		}
	free(hdr);
	printf("%d declarations in the synopses, each as the headers have it\n", checked);
	assert_true(checked > 0);
	assert_int_equal(bad, 0);
}

/* ---- the tools' options ------------------------------------------------------- */

/* Does the page mention option opt ("\-x" or "\-\-long") on its own, not
 * as the start of a longer option ("\-\-bpf" in "\-\-bpf\-no", "\-v" in
 * "\-\-verbose")? */
static bool mentions_option(const char *page, const char *opt)
{
	size_t n = strlen(opt);
	for (const char *at = strstr(page, opt); at; at = strstr(at + 1, opt)) {
		bool after_dash = at - page >= 2 && at[-2] == '\\' && at[-1] == '-';
		char next = at[n];
		if (!after_dash && !ident_char(next) && next != '\\' && next != '-')
			return true;
	}
	return false;
}

/* Every option a tool parses (its getopt_long string and long options in
 * tools/cli/opts.c, found through the X_opts_parse() it calls) is in its
 * man1 page: an option added without a word in the manual fails here. */
static void test_tool_pages_list_every_option(void **state)
{
	(void)state;
	char path[PBUF];
	fmt(path, sizeof(path), "%s/tools/cli/opts.c", root);
	char *opts = slurp(path);
	if (!opts) {
		T_SKIP("tools/cli/opts.c is not there: the tools' options are parsed elsewhere now");
		return;
	}
	all_pages();
	int tools = 0, checked = 0, bad = 0;
	for (int i = 0; i < npages; i++) {
		if (pages[i].link || strncmp(pages[i].rel, "man1/cbcmn-", 11))
			continue;
		const char *tool = pages[i].rel + 5; /* "cbcmn-x.1" */
		fmt(path, sizeof(path), "%s/tools/%.*s.c", root, (int)strlen(tool) - 2, tool);
		char *src = slurp(path);
		if (!src)
			continue; /* a page without a tool is test_every_tool_has_a_page's */
		/* "x_opts_parse(argc": the parser this tool calls. */
		const char *call = strstr(src, "_opts_parse(argc");
		if (!call) {
			free(src);
			continue;
		}
		const char *b = call;
		while (b > src && ident_char(b[-1]))
			b--;
		char def[128];
		fmt(def, sizeof(def), "\nint %.*s_opts_parse(", (int)(call - b), b);
		free(src);
		const char *body = strstr(opts, def);
		assert_non_null(body);
		const char *end = strstr(body, "\n}\n");
		assert_non_null(end);
		fmt(path, sizeof(path), "%s/man/%s", root, pages[i].rel);
		char *page = slurp(path);
		assert_non_null(page);
		tools++;
		/* Long options: {"name", ... */
		for (const char *l = strstr(body, "{\""); l && l < end; l = strstr(l + 2, "{\"")) {
			size_t ln = strcspn(l + 2, "\"");
			char opt[128];
			fmt(opt, sizeof(opt), "\\-\\-");
			for (size_t k = 0; k < ln && strlen(opt) + 3 < sizeof(opt); k++) {
				size_t ol = strlen(opt);
				if (l[2 + k] == '-')
					fmt(opt + ol, sizeof(opt) - ol, "\\-");
				else
					fmt(opt + ol, sizeof(opt) - ol, "%c", l[2 + k]);
			}
			checked++;
			if (!mentions_option(page, opt)) {
				print_error("man/%s: no %.*s (--%.*s)\n", pages[i].rel, (int)strlen(opt), opt,
					    (int)ln, l + 2);
				bad++;
			}
		}
		/* Short options: the getopt_long string. */
		const char *g = strstr(body, "getopt_long(argc, argv, \"");
		assert_true(g && g < end);
		for (g += strlen("getopt_long(argc, argv, \""); *g && *g != '"'; g++) {
			if (*g == ':' || *g == '+')
				continue;
			char opt[4] = {'\\', '-', *g, 0};
			checked++;
			if (!mentions_option(page, opt)) {
				print_error("man/%s: no \\-%c\n", pages[i].rel, *g);
				bad++;
			}
		}
		free(page);
	}
	free(opts);
	printf("%d options of %d tools, each in its page\n", checked, tools);
	assert_true(tools > 0);
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
		cmocka_unit_test(test_references_resolve),
		cmocka_unit_test(test_pages_have_their_sections),
		cmocka_unit_test(test_synopses_match_the_headers),
		cmocka_unit_test(test_tool_pages_list_every_option),
		cmocka_unit_test(test_groff_finds_no_warnings),
	};
	return cmocka_run_group_tests_name("man", tests, find_root, NULL);
}
