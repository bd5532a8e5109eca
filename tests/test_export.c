/* test_export.c: the statistics as OpenMetrics text (cbcmn-stat
 * --prometheus, tools/export/openmetrics.c): the text follows the format's
 * rules, says what the snapshot says, and its counters only grow. */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "toolrun.h"
#include "workloads/fib.h"
#include "export/openmetrics.h"

/* ---- a checker of the OpenMetrics text format ------------------------------------ */

#define OM_MAX_SAMPLES 8192

struct om_sample {
	char key[256]; /* name{labels} as written */
	char family[96];
	char type[16];
	double v;
};

struct om_parsed {
	struct om_sample s[OM_MAX_SAMPLES];
	size_t n;
	char err[1024];
};

static bool name_ok(const char *p, size_t n, bool label)
{
	if (!n || !(isalpha((unsigned char)p[0]) || p[0] == '_' || (!label && p[0] == ':')))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)p[i]) || p[i] == '_' || (!label && p[i] == ':')))
			return false;
	return true;
}

#define OM_FAIL(...) (snprintf(p->err, sizeof(p->err), __VA_ARGS__), -1)

/* Check text against the rules a Prometheus scraper applies (OpenMetrics
 * 1.0 text): every sample belongs to the family of the # TYPE before it
 * (so a family's samples are together and each has a TYPE), its name is
 * the family's plus the suffix its type allows, names and label names are
 * valid, label values are quoted, no label set repeats, values are
 * numbers (counters >= 0), and "# EOF" is the last line.  Returns 0 or -1
 * with p->err saying where. */
static int om_parse(const char *text, struct om_parsed *p)
{
	char fam[96] = "", type[16] = "";
	char seen[256][96];
	size_t nseen = 0, line = 0;
	bool eof = false;
	p->n = 0;
	for (const char *l = text; *l; line++) {
		const char *nl = strchr(l, '\n');
		if (!nl)
			return OM_FAIL("line %zu has no newline", line);
		size_t len = (size_t)(nl - l);
		if (eof)
			return OM_FAIL("line %zu after # EOF", line);
		if (len >= 2 && l[0] == '#') {
			char kw[8], name[96], rest[160] = "";
			if (len == 5 && !memcmp(l, "# EOF", 5)) {
				eof = true;
				l = nl + 1;
				continue;
			}
			char buf[320];
			snprintf(buf, sizeof(buf), "%.*s", (int)len, l);
			if (sscanf(buf, "# %7s %95s %159[^\n]", kw, name, rest) < 3)
				return OM_FAIL("line %zu: bad metadata '%s'", line, buf);
			if (!name_ok(name, strlen(name), false))
				return OM_FAIL("line %zu: bad family name '%s'", line, name);
			if (!strcmp(kw, "TYPE")) {
				static const char *const types[] = {"counter", "gauge", "stateset", "info",
								    "histogram", "gaugehistogram", "summary",
								    "unknown"};
				bool ok = false;
				for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
					ok |= !strcmp(rest, types[i]);
				if (!ok)
					return OM_FAIL("line %zu: unknown type '%s'", line, rest);
				for (size_t i = 0; i < nseen; i++)
					if (!strcmp(seen[i], name))
						return OM_FAIL("line %zu: family %s twice", line, name);
				if (nseen < 256)
					snprintf(seen[nseen++], sizeof(seen[0]), "%s", name);
				snprintf(fam, sizeof(fam), "%s", name);
				snprintf(type, sizeof(type), "%.15s", rest); /* a known type: short */
			} else if (!strcmp(kw, "HELP") || !strcmp(kw, "UNIT")) {
				if (strcmp(name, fam))
					return OM_FAIL("line %zu: %s of %s inside family '%s'", line, kw, name, fam);
			} else {
				return OM_FAIL("line %zu: unknown metadata '%s'", line, kw);
			}
			l = nl + 1;
			continue;
		}
		/* A sample: name{labels} value */
		size_t nlen = 0;
		while (nlen < len && l[nlen] != '{' && l[nlen] != ' ')
			nlen++;
		if (!name_ok(l, nlen, false))
			return OM_FAIL("line %zu: bad metric name '%.*s'", line, (int)len, l);
		if (!fam[0])
			return OM_FAIL("line %zu: a sample before any # TYPE", line);
		size_t flen = strlen(fam);
		const char *suffix = nlen >= flen && !memcmp(l, fam, flen) ? l + flen : NULL;
		size_t slen = suffix ? nlen - flen : 0;
		bool suffix_ok = suffix && ((!strcmp(type, "counter") && slen == 6 && !memcmp(suffix, "_total", 6)) ||
					    (!strcmp(type, "info") && slen == 5 && !memcmp(suffix, "_info", 5)) ||
					    ((!strcmp(type, "gauge") || !strcmp(type, "stateset")) && slen == 0));
		if (!suffix_ok)
			return OM_FAIL("line %zu: sample %.*s is not of family %s (%s)", line, (int)nlen, l, fam,
				       type);
		const char *q = l + nlen;
		char labels[16][64];
		size_t nlab = 0;
		if (*q == '{') {
			q++;
			while (*q != '}') {
				size_t k = 0;
				while (q + k < nl && q[k] != '=')
					k++;
				if (!name_ok(q, k, true) || q[k] != '=' || q[k + 1] != '"')
					return OM_FAIL("line %zu: bad label at '%.*s'", line, (int)(nl - q), q);
				for (size_t i = 0; i < nlab; i++)
					if (strlen(labels[i]) == k && !memcmp(labels[i], q, k))
						return OM_FAIL("line %zu: label %.*s twice", line, (int)k, q);
				if (nlab < 16)
					snprintf(labels[nlab++], sizeof(labels[0]), "%.*s", (int)k, q);
				q += k + 2;
				while (q < nl && *q != '"')
					q += *q == '\\' && q + 1 < nl ? 2 : 1;
				if (q >= nl)
					return OM_FAIL("line %zu: unterminated label value", line);
				q++;
				if (*q == ',')
					q++;
				else if (*q != '}')
					return OM_FAIL("line %zu: want , or } after a label", line);
			}
			q++;
		}
		if (*q != ' ')
			return OM_FAIL("line %zu: want a space before the value", line);
		char num[64], *end;
		snprintf(num, sizeof(num), "%.*s", (int)(nl - q - 1), q + 1);
		double v = strtod(num, &end);
		if (!num[0] || *end)
			return OM_FAIL("line %zu: value '%s' is not a number", line, num);
		if (!strcmp(type, "counter") && !(v >= 0))
			return OM_FAIL("line %zu: counter below 0", line);
		if ((!strcmp(type, "stateset") && v != 0 && v != 1) || (!strcmp(type, "info") && v != 1))
			return OM_FAIL("line %zu: a %s sample worth %g", line, type, v);
		if (p->n == OM_MAX_SAMPLES)
			return OM_FAIL("more than %d samples", OM_MAX_SAMPLES);
		struct om_sample *s = &p->s[p->n];
		snprintf(s->key, sizeof(s->key), "%.*s", (int)(q - l), l);
		for (size_t i = 0; i < p->n; i++)
			if (!strcmp(p->s[i].key, s->key))
				return OM_FAIL("line %zu: sample %s twice", line, s->key);
		snprintf(s->family, sizeof(s->family), "%s", fam);
		snprintf(s->type, sizeof(s->type), "%s", type);
		s->v = v;
		p->n++;
		l = nl + 1;
	}
	if (!eof)
		return OM_FAIL("no # EOF at the end");
	return 0;
}

static const struct om_sample *om_find(const struct om_parsed *p, const char *key)
{
	for (size_t i = 0; i < p->n; i++)
		if (!strcmp(p->s[i].key, key))
			return &p->s[i];
	return NULL;
}

static void assert_parses(const char *text, struct om_parsed *p)
{
	if (om_parse(text, p))
		fail_msg("not OpenMetrics: %s", p->err);
}

/* ---- the checker itself ----------------------------------------------------------- */

/* A checker that passes anything proves nothing: each rule is seen to bite. */
static void test_checker_refuses_what_a_scraper_refuses(void **state)
{
	(void)state;
	static struct om_parsed p;
	static const char *const bad[] = {
		"a_total 1\n# EOF\n",                                   /* no TYPE */
		"# TYPE a counter\na 1\n# EOF\n",                       /* counter without _total */
		"# TYPE a gauge\na 1\n",                                /* no EOF */
		"# TYPE a gauge\na 1\n# EOF\na 2\n",                    /* after EOF */
		"# TYPE a gauge\n# TYPE b gauge\na 1\n# EOF\n",         /* a's sample in b's family */
		"# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# TYPE a gauge\n# EOF\n", /* a twice */
		"# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n# EOF\n",        /* label twice */
		"# TYPE a gauge\na{1x=\"1\"} 1\n# EOF\n",               /* bad label name */
		"# TYPE a gauge\na{x=1} 1\n# EOF\n",                    /* unquoted value */
		"# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n# EOF\n",  /* sample twice */
		"# TYPE a gauge\na one\n# EOF\n",                       /* not a number */
		"# TYPE a-b gauge\n# EOF\n",                            /* bad family name */
		"# TYPE a counter\na_total -1\n# EOF\n",                /* counter < 0 */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (om_parse(bad[i], &p) == 0)
			fail_msg("case %zu passed: '%s'", i, bad[i]);
	assert_int_equal(om_parse("# TYPE a counter\n# HELP a A.\na_total{x=\"\\\"\"} 3\n# EOF\n", &p), 0);
	assert_int_equal(p.n, 1);
}

/* ---- in process: the text says what the snapshot says ----------------------------- */

static char *om_text(const struct om_runtime *rts, size_t n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(om_write(f, rts, n), 0);
	fclose(f);
	return buf;
}

/* Every per-executor counter (and the runtime's) lies between the
 * snapshot taken before the scrape and the one after: the figures of a
 * known workload, fib(16), which spawns one task per call. */
static void test_exposition_matches_the_snapshot(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct fib f = {.n = 16};
	t_run(rt, fib_task, &f, 0);
	cbcmn_watch *w;
	assert_int_equal(cbcmn_watch_open(getpid(), 0, &w), 0);
	cbcmn_stats a, s, b;
	cbcmn_executor_stats pa[2], ps[2], pb[2];
	assert_int_equal(cbcmn_stats_snapshot(rt, &a, pa, 2), 0);
	assert_int_equal(cbcmn_watch_read(w, &s, ps, 2), 0);
	assert_int_equal(cbcmn_stats_snapshot(rt, &b, pb, 2), 0);
	struct om_runtime r = {&s, ps, 2};
	char *text = om_text(&r, 1);
	static struct om_parsed p;
	assert_parses(text, &p);

	char key[256];
	/* One task per call of fib(16), the root included: 2 * fib(17) - 1. */
	snprintf(key, sizeof(key), "cbcmn_tasks_spawned_total{runtime=\"%u\"}", a.runtime_id);
	const struct om_sample *x = om_find(&p, key);
	assert_non_null(x);
	assert_true(x->v == (double)(2 * fib_seq(17) - 1));
	assert_true(x->v == (double)a.tasks_spawned);
	snprintf(key, sizeof(key), "cbcmn_tasks_completed_total{runtime=\"%u\"}", a.runtime_id);
	assert_non_null(x = om_find(&p, key));
	assert_true(x->v == (double)a.tasks_completed);
	snprintf(key, sizeof(key), "cbcmn_executors{runtime=\"%u\"}", a.runtime_id);
	assert_non_null(x = om_find(&p, key));
	assert_true(x->v == 2);
	static const struct {
		const char *name;
		size_t off;
	} ctr[] = {
		{"tasks_run", offsetof(cbcmn_executor_stats, tasks_run)},
		{"steals", offsetof(cbcmn_executor_stats, steal_successes)},
		{"steal_attempts", offsetof(cbcmn_executor_stats, steal_attempts)},
		{"parks", offsetof(cbcmn_executor_stats, parks)},
		{"spawns", offsetof(cbcmn_executor_stats, spawns)},
		{"doorbells_sent", offsetof(cbcmn_executor_stats, doorbells_sent)},
		{"cqes_reaped", offsetof(cbcmn_executor_stats, cqes_reaped)},
	};
	uint64_t run = 0;
	for (uint32_t i = 0; i < 2; i++)
		for (size_t k = 0; k < sizeof(ctr) / sizeof(ctr[0]); k++) {
			snprintf(key, sizeof(key), "cbcmn_%s_total{runtime=\"%u\",executor=\"%u\"}", ctr[k].name,
				 a.runtime_id, i);
			assert_non_null(x = om_find(&p, key));
			uint64_t lo = *(uint64_t *)((char *)&pa[i] + ctr[k].off);
			uint64_t hi = *(uint64_t *)((char *)&pb[i] + ctr[k].off);
			if (!(x->v >= (double)lo && x->v <= (double)hi))
				fail_msg("%s = %g, snapshots %llu..%llu", key, x->v, (unsigned long long)lo,
					 (unsigned long long)hi);
			if (k == 0)
				run += (uint64_t)x->v;
		}
	assert_true(run == a.total.tasks_run);
	/* Each executor is in exactly one state. */
	for (uint32_t i = 0; i < 2; i++) {
		double sum = 0;
		for (size_t k = 0; k < p.n; k++) {
			snprintf(key, sizeof(key), "cbcmn_executor_state{runtime=\"%u\",executor=\"%u\",", a.runtime_id, i);
			if (!strncmp(p.s[k].key, key, strlen(key)))
				sum += p.s[k].v;
		}
		assert_true(sum == 1);
	}
	free(text);
	cbcmn_watch_close(w);
	cbcmn_runtime_destroy(rt);
}

/* Two runtimes in one text: a family's samples stay together (a scraper
 * refuses a family that comes back), each runtime under its own label. */
static void test_two_runtimes_keep_each_family_together(void **state)
{
	(void)state;
	cbcmn_runtime *r1 = t_runtime(1), *r2 = t_runtime(2);
	cbcmn_stats s[2];
	cbcmn_executor_stats p1[1], p2[2];
	assert_int_equal(cbcmn_stats_snapshot(r1, &s[0], p1, 1), 0);
	assert_int_equal(cbcmn_stats_snapshot(r2, &s[1], p2, 2), 0);
	assert_int_not_equal(s[0].runtime_id, s[1].runtime_id);
	struct om_runtime rts[2] = {{&s[0], p1, 1}, {&s[1], p2, 2}};
	char *text = om_text(rts, 2);
	static struct om_parsed p;
	assert_parses(text, &p);
	char key[128];
	snprintf(key, sizeof(key), "cbcmn_parks_total{runtime=\"%u\",executor=\"1\"}", s[1].runtime_id);
	assert_non_null(om_find(&p, key));
	snprintf(key, sizeof(key), "cbcmn_parks_total{runtime=\"%u\",executor=\"1\"}", s[0].runtime_id);
	assert_null(om_find(&p, key));
	free(text);
	cbcmn_runtime_destroy(r1);
	cbcmn_runtime_destroy(r2);
}

/* cbcmn-stat --prometheus writes the library's text byte for byte (the
 * endpoint's OpenMetrics answer is the same function's): the tool's writer
 * against cbcmn_metrics_format() on the same figures, every figure of the
 * actors and the executor's thread set, so that a family the formatter
 * gains shows in both or the test says which. */
static void test_tool_text_is_the_library_formatter_byte_for_byte(void **state)
{
	(void)state;
	cbcmn_stats st = {.executors = 2, .runtime_id = 3, .tasks_spawned = 10, .pid = 42};
	cbcmn_executor_stats per[2] = {
		{.tasks_run = 7, .cpu = 0, .node = 0, .tid = 4242, .actors = 5, .actors_running = 1,
		 .actors_waiting = 3, .actors_receiving = 2, .actors_runnable = 1, .mailbox_depth = 9,
		 .actor_migrations = 4, .actor_load_milli = 1500},
		{.cpu = -1, .node = -1, .tid = 0, .actors_halting = 1, .actors = 1},
	};
	struct om_runtime r = {&st, per, 2};
	char *tool = om_text(&r, 1);
	cbcmn_metrics_source src = {&st, per, 2};
	int64_t len = cbcmn_metrics_format(&src, 1, CBCMN_METRICS_OPENMETRICS, NULL, 0);
	assert_true(len > 0);
	char *lib = malloc((size_t)len + 1);
	assert_non_null(lib);
	assert_int_equal(cbcmn_metrics_format(&src, 1, CBCMN_METRICS_OPENMETRICS, lib, (size_t)len + 1), len);
	assert_string_equal(tool, lib);
	static struct om_parsed p;
	assert_parses(tool, &p);
	static const struct {
		const char *key;
		double v;
	} want[] = {
		{"cbcmn_actors{runtime=\"3\",executor=\"0\"}", 5},
		{"cbcmn_actors_by_state{runtime=\"3\",executor=\"0\",state=\"running\"}", 1},
		{"cbcmn_actors_by_state{runtime=\"3\",executor=\"0\",state=\"waiting\"}", 3},
		{"cbcmn_actors_by_state{runtime=\"3\",executor=\"0\",state=\"runnable\"}", 1},
		{"cbcmn_actors_by_state{runtime=\"3\",executor=\"1\",state=\"halting\"}", 1},
		{"cbcmn_actors_receiving{runtime=\"3\",executor=\"0\"}", 2},
		{"cbcmn_actor_mailbox_messages{runtime=\"3\",executor=\"0\"}", 9},
		{"cbcmn_actor_migrations_total{runtime=\"3\",executor=\"0\"}", 4},
		{"cbcmn_actor_load_milli{runtime=\"3\",executor=\"0\"}", 1500},
		{"cbcmn_executor_info{runtime=\"3\",executor=\"0\",cpu=\"0\",node=\"0\",tid=\"4242\"}", 1},
		{"cbcmn_executor_info{runtime=\"3\",executor=\"1\",cpu=\"-1\",node=\"-1\",tid=\"0\"}", 1},
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct om_sample *x = om_find(&p, want[i].key);
		if (!x || x->v != want[i].v)
			fail_msg("%s: %s, not %g", want[i].key, x ? "another value" : "missing", want[i].v);
	}
	free(lib);
	free(tool);
}

/* ---- the tool: cbcmn-stat --prometheus against another process -------------------- */

/* A child running fib on two executors until killed; returns its pid once
 * its runtime exists. */
static pid_t busy_child(unsigned lifetime_s)
{
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 2;
		cbcmn_runtime *rt;
		if (cbcmn_runtime_create(&cfg, &rt) != 0)
			_exit(2);
		if (write(fds[1], "r", 1) != 1)
			_exit(3);
		alarm(lifetime_s); /* SIGALRM ends it, mid-scrape maybe */
		for (;;) {
			struct fib f = {.n = 14};
			if (cbcmn_runtime_run(rt, fib_task, &f, NULL) != 0)
				_exit(4);
			usleep(1000);
		}
	}
	close(fds[1]);
	char c;
	assert_int_equal(read(fds[0], &c, 1), 1);
	close(fds[0]);
	return pid;
}

/* Two scrapes of one run: both parse, they have the same samples, and no
 * counter went down. */
static void test_prometheus_scrapes_parse_and_counters_grow(void **state)
{
	(void)state;
	pid_t kid = busy_child(0);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)kid);
	struct toolrun r;
	toolrun(&r, (const char *const[]){"cbcmn-stat", "--prometheus", "-p", pid, "-i", "0.2", "-c", "2", NULL},
		60);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	if (r.status != 0)
		fail_msg("status %d, stderr '%s'", r.status, r.err);
	char *second = strstr(r.out, "# EOF\n");
	assert_non_null(second);
	second += 6;
	assert_non_null(strstr(second, "# EOF\n"));
	char save = *second;
	*second = 0;
	static struct om_parsed p1, p2;
	assert_parses(r.out, &p1);
	*second = save;
	assert_parses(second, &p2);
	assert_int_equal(p1.n, p2.n);
	om_refcheck(second, strlen(second), true);
	size_t counters = 0;
	for (size_t i = 0; i < p1.n; i++) {
		const struct om_sample *b = om_find(&p2, p1.s[i].key);
		if (!b)
			fail_msg("%s in the first scrape only", p1.s[i].key);
		if (!strcmp(p1.s[i].type, "counter")) {
			counters++;
			if (b->v < p1.s[i].v)
				fail_msg("counter %s went from %g to %g", p1.s[i].key, p1.s[i].v, b->v);
		}
	}
	assert_true(counters >= 25 * 2);
	free(r.out);
}

/* The process dies while scraped until stopped: every exposition printed
 * is whole and parses, then one line and status 2. */
static void test_prometheus_process_ending_between_scrapes(void **state)
{
	(void)state;
	pid_t kid = busy_child(1);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)kid);
	struct toolrun r;
	toolrun(&r, (const char *const[]){"cbcmn-stat", "--prometheus", "-p", pid, "-i", "0.05", "-c", "0", NULL},
		60);
	waitpid(kid, NULL, 0);
	if (r.status != 2)
		fail_msg("status %d, stderr '%s'", r.status, r.err);
	assert_one_line(r.err);
	size_t n = 0;
	static struct om_parsed p;
	for (char *at = r.out; *at; n++) {
		char *end = strstr(at, "# EOF\n");
		if (!end)
			fail_msg("exposition %zu is cut short", n);
		end += 6;
		char save = *end;
		*end = 0;
		assert_parses(at, &p);
		*end = save;
		at = end;
	}
	assert_true(n >= 1);
	free(r.out);
}

/* Bad input: one line on stderr, nothing on stdout, a non-zero status. */
static void test_prometheus_bad_input_is_one_line(void **state)
{
	(void)state;
	/* A pid that was ours and is gone. */
	pid_t gone = fork();
	assert_true(gone >= 0);
	if (gone == 0)
		_exit(0);
	waitpid(gone, NULL, 0);
	char pid[16], self[16];
	snprintf(pid, sizeof(pid), "%d", (int)gone);
	snprintf(self, sizeof(self), "%d", (int)getpid());
	const char *const *cases[] = {
		(const char *const[]){"cbcmn-stat", "--prometheus", "-p", pid, NULL},
		/* This suite has no runtime alive now. */
		(const char *const[]){"cbcmn-stat", "--prometheus", "-p", self, NULL},
		(const char *const[]){"cbcmn-stat", "--prometheus", "-p", self, "-r", "3", NULL},
		(const char *const[]){"cbcmn-stat", "--prometheus", "--json", "-p", self, NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct toolrun r;
		toolrun(&r, cases[i], 30);
		if (r.status != 1 || r.out_len)
			fail_msg("case %zu: status %d, %zu bytes out, stderr '%s'", i, r.status, r.out_len, r.err);
		assert_one_line(r.err);
		free(r.out);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_checker_refuses_what_a_scraper_refuses),
		cmocka_unit_test(test_exposition_matches_the_snapshot),
		cmocka_unit_test(test_two_runtimes_keep_each_family_together),
		cmocka_unit_test(test_tool_text_is_the_library_formatter_byte_for_byte),
		cmocka_unit_test(test_prometheus_scrapes_parse_and_counters_grow),
		cmocka_unit_test(test_prometheus_process_ending_between_scrapes),
		cmocka_unit_test(test_prometheus_bad_input_is_one_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
