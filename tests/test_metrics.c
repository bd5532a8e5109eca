/* test_metrics.c: the in-process scrape endpoint (cbcmn_metrics_serve) and
 * the library's Prometheus text (cbcmn_metrics_format): scrapes over
 * loopback parse line by line and say what the snapshots around them say,
 * other requests get their status, hostile clients hold nobody up, and the
 * server ends cleanly by stop or by destroy, on either backend. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <regex.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "toolrun.h"
#include "cbcmn_actor.h"
#include "cbcmn_chan.h"
#include "../lib/fault.h"
#include "../lib/metrics.h"
#include "../lib/statseg.h"

/* ---- a client ---------------------------------------------------------------- */

/* A connected socket to 127.0.0.1:port whose reads give up after the
 * stall bound (a server that never answers fails the test, not hangs it). */
static int dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct timeval tv = {.tv_sec = T_STALL_S};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		/* A signal (TSan's, the runtime's) interrupted the wait: the
		 * connection goes on by itself; wait for its outcome. */
		struct pollfd pfd = {fd, POLLOUT, 0};
		int err = errno;
		socklen_t el = sizeof(err);
		if (err == EINTR) {
			while (poll(&pfd, 1, (int)T_STALL_S * 1000) < 0 && errno == EINTR)
				;
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el))
				err = errno;
		}
		if (err)
			fail_msg("connect to port %d: %s", port, strerror(err));
	}
	return fd;
}

/* Everything until the server closes (or resets); NUL-terminated. */
static char *read_all(int fd, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *b = malloc(cap);
	assert_non_null(b);
	for (;;) {
		if (n + 1 == cap)
			assert_non_null(b = realloc(b, cap *= 2));
		ssize_t r = recv(fd, b + n, cap - n - 1, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			fail_msg("the server neither answered nor closed in %u s", T_STALL_S);
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	b[n] = 0;
	if (len)
		*len = n;
	return b;
}

struct reply {
	int status;
	char *raw;  /* the whole reply */
	char *body; /* into raw */
	size_t body_len;
	long content_length; /* -1: none */
	char ctype[128];
};

static void reply_free(struct reply *r)
{
	free(r->raw);
}

/* Send req (len bytes) and read the reply up to the close. */
static struct reply ask(int port, const char *req, size_t len)
{
	struct reply r = {.content_length = -1};
	int fd = dial(port);
	for (size_t sent = 0; sent < len;) {
		ssize_t w = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		assert_true(w > 0);
		sent += (size_t)w;
	}
	size_t n;
	r.raw = read_all(fd, &n);
	close(fd);
	if (sscanf(r.raw, "HTTP/1.1 %d ", &r.status) != 1)
		fail_msg("not an HTTP reply: \"%.80s\"", r.raw);
	char *end = strstr(r.raw, "\r\n\r\n");
	assert_non_null(end);
	*end = 0;
	r.body = end + 4;
	r.body_len = n - (size_t)(r.body - r.raw);
	const char *cl = strcasestr(r.raw, "\r\nContent-Length: ");
	if (cl)
		r.content_length = strtol(cl + 18, NULL, 10);
	const char *ct = strcasestr(r.raw, "\r\nContent-Type: ");
	if (ct)
		sscanf(ct + 16, "%127[^\r]", r.ctype);
	return r;
}

static struct reply get(int port, const char *path, const char *extra_headers)
{
	char req[1024];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: localhost\r\n%s\r\n", path,
			 extra_headers);
	return ask(port, req, (size_t)n);
}

/* GET path with extra_headers: the reply's status must be want. */
static void expect(int port, const char *path, const char *extra_headers, int want)
{
	struct reply r = get(port, path, extra_headers);
	if (r.status != want)
		fail_msg("GET %s: %d, not %d", path, r.status, want);
	reply_free(&r);
}

/* ---- a parser of the text format ----------------------------------------------------- */

#define MAX_SAMPLES 4096

struct sample {
	char key[256]; /* name{labels} */
	char name[96];
	char type[16];
	double v;
};

struct parsed {
	struct sample s[MAX_SAMPLES];
	size_t n;
	size_t families;
};

/* A metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or a label name (no ':'),
 * as the format defines them. */
static bool name_ok(const char *p, size_t n, bool label)
{
	static regex_t re[2];
	static bool compiled;
	if (!compiled) {
		assert_int_equal(regcomp(&re[0], "^[a-zA-Z_:][a-zA-Z0-9_:]*$", REG_EXTENDED | REG_NOSUB), 0);
		assert_int_equal(regcomp(&re[1], "^[a-zA-Z_][a-zA-Z0-9_]*$", REG_EXTENDED | REG_NOSUB), 0);
		compiled = true;
	}
	char name[256];
	if (n >= sizeof(name))
		return false;
	memcpy(name, p, n);
	name[n] = 0;
	return regexec(&re[label], name, 0, NULL, 0) == 0;
}

/* Parse text line by line as a Prometheus scraper does, failing the test
 * at the first line that breaks the format: 0.0.4 (om false: # TYPE names
 * the samples, counters end _total) or OpenMetrics (# TYPE names the
 * family, "# EOF" last).  Every sample follows its family's # TYPE and
 * # HELP, names and label names are valid, label values quoted, values
 * numbers, no sample repeats. */
static void parse(const char *text, bool om, struct parsed *p)
{
	char fam[96] = "", type[16] = "";
	bool help = false, eof = false;
	p->n = p->families = 0;
	size_t line = 0;
	for (const char *l = text, *eol; *l; l = eol + 1) {
		line++;
		if (!(eol = strchr(l, '\n')))
			fail_msg("line %zu: no newline at the end", line);
		size_t len = (size_t)(eol - l);
		if (eof)
			fail_msg("line %zu: after # EOF", line);
		if (om && len == 5 && !strncmp(l, "# EOF", 5)) {
			eof = true;
			continue;
		}
		if (len >= 7 && !strncmp(l, "# TYPE ", 7)) {
			char n[96], t[16];
			if (sscanf(l + 7, "%95s %15s", n, t) != 2 || !name_ok(n, strlen(n), false))
				fail_msg("line %zu: bad # TYPE: %.*s", line, (int)len, l);
			if (!strcmp(n, fam))
				fail_msg("line %zu: a second # TYPE for %s", line, n);
			for (size_t i = 0; i < p->n; i++)
				if (!strcmp(p->s[i].name, n))
					fail_msg("line %zu: family %s is not together", line, n);
			bool known = !strcmp(t, "counter") || !strcmp(t, "gauge") ||
				     (om && (!strcmp(t, "info") || !strcmp(t, "stateset")));
			if (!known)
				fail_msg("line %zu: type %s in %s", line, t, om ? "OpenMetrics" : "0.0.4");
			size_t nl = strlen(n);
			if (!strcmp(t, "counter") && om == (nl > 6 && !strcmp(n + nl - 6, "_total")))
				fail_msg("line %zu: counter %s %s _total", line, n,
					 om ? "names its family with" : "named without");
			snprintf(fam, sizeof(fam), "%s", n);
			snprintf(type, sizeof(type), "%s", t);
			help = false;
			p->families++;
			continue;
		}
		if (len >= 7 && !strncmp(l, "# HELP ", 7)) {
			size_t fl = strlen(fam);
			if (strncmp(l + 7, fam, fl) || l[7 + fl] != ' ' || len < 9 + fl)
				fail_msg("line %zu: # HELP not for the family %s", line, fam);
			help = true;
			continue;
		}
		if (len && l[0] == '#')
			fail_msg("line %zu: a comment the format does not know", line);
		/* A sample: name{labels} value */
		if (!*fam || !help)
			fail_msg("line %zu: a sample without # TYPE and # HELP before it", line);
		size_t nl = strcspn(l, "{ ");
		if (nl >= len || !name_ok(l, nl, false))
			fail_msg("line %zu: bad metric name: %.*s", line, (int)len, l);
		char want[112];
		snprintf(want, sizeof(want), "%s%s", fam,
			 !om                          ? ""
			 : !strcmp(type, "counter") ? "_total"
			 : !strcmp(type, "info")    ? "_info"
						    : "");
		if (strlen(want) != nl || strncmp(l, want, nl))
			fail_msg("line %zu: sample %.*s of family %s (%s)", line, (int)nl, l, fam, type);
		const char *q = l + nl;
		if (*q == '{') {
			q++;
			while (*q != '}') {
				size_t ln = strcspn(q, "=");
				if (!name_ok(q, ln, true) || q[ln + 1] != '"')
					fail_msg("line %zu: bad label", line);
				q += ln + 2;
				while (*q && *q != '"' && *q != '\n')
					q += *q == '\\' ? 2 : 1;
				if (*q != '"')
					fail_msg("line %zu: unterminated label value", line);
				q++;
				if (*q == ',')
					q++;
				else if (*q != '}')
					fail_msg("line %zu: bad label list", line);
			}
			q++;
		}
		if (*q != ' ')
			fail_msg("line %zu: no value", line);
		char *vend;
		double v = strtod(q + 1, &vend);
		if (vend == q + 1 || vend != eol)
			fail_msg("line %zu: value not a number: %.*s", line, (int)(eol - q - 1), q + 1);
		if (!strcmp(type, "counter") && v < 0)
			fail_msg("line %zu: a negative counter", line);
		assert_true(p->n < MAX_SAMPLES);
		struct sample *s = &p->s[p->n];
		snprintf(s->key, sizeof(s->key), "%.*s", (int)(q - l), l);
		snprintf(s->name, sizeof(s->name), "%s", fam);
		snprintf(s->type, sizeof(s->type), "%s", type);
		s->v = v;
		for (size_t i = 0; i < p->n; i++)
			if (!strcmp(p->s[i].key, s->key))
				fail_msg("line %zu: %s twice", line, s->key);
		p->n++;
	}
	if (om && !eof)
		fail_msg("no # EOF at the end");
}

static const struct sample *find(const struct parsed *p, const char *key)
{
	for (size_t i = 0; i < p->n; i++)
		if (!strcmp(p->s[i].key, key))
			return &p->s[i];
	fail_msg("no sample %s", key);
	return NULL;
}

static double value(const struct parsed *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static double value(const struct parsed *p, const char *fmt, ...)
{
	char key[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(key, sizeof(key), fmt, ap);
	va_end(ap);
	return find(p, key)->v;
}

/* ---- work to count ------------------------------------------------------------------- */

static int64_t leaf(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	return cbcmn_yield(cx) == 0 ? 0 : -1;
}

static int64_t some_work(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	if (cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n))
		return -1;
	for (int i = 0; i < 64; i++)
		cbcmn_nursery_spawn(cx, n, leaf, NULL, NULL);
	return cbcmn_nursery_await_all(cx, n);
}

static cbcmn_runtime *runtime_on(uint32_t workers, uint32_t backend)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cfg.backend = backend;
	return t_runtime_cfg(&cfg);
}

static cbcmn_metrics_server *serve(cbcmn_runtime *rt, const struct cbcmn__metrics_limits *lim)
{
	cbcmn_metrics_server *ms = NULL;
	int rc = cbcmn__metrics_serve_ex(rt, NULL, 0, lim, &ms);
	if (rc)
		fail_msg("cbcmn_metrics_serve: %s", cbcmn_strerror(rc));
	assert_true(cbcmn_metrics_port(ms) > 0);
	return ms;
}

static void stop_and_destroy(cbcmn_metrics_server *ms, cbcmn_runtime *rt)
{
	assert_int_equal(cbcmn_metrics_stop(ms), 0);
	t_destroy(rt);
}

/* ---- the tests ------------------------------------------------------------------------ */

/* A scrape between two snapshots: every line parses, each counter lies
 * between the two snapshots' figures, and a second scrape's counters are
 * no smaller than the first's. */
static void scrape_matches_snapshots(uint32_t backend)
{
	cbcmn_runtime *rt = runtime_on(2, backend);
	t_run(rt, some_work, NULL, 0);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	int port = cbcmn_metrics_port(ms);
	static struct parsed p1, p2;
	cbcmn_stats a, b;
	cbcmn_executor_stats pa[2], pb[2];
	assert_int_equal(cbcmn_stats_snapshot(rt, &a, pa, 2), 0);
	struct reply r = get(port, "/metrics", "");
	assert_int_equal(cbcmn_stats_snapshot(rt, &b, pb, 2), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.ctype, "text/plain; version=0.0.4; charset=utf-8");
	assert_int_equal(r.content_length, (long)r.body_len);
	parse(r.body, false, &p1);
	assert_true(p1.families >= 30);
	uint32_t id = a.runtime_id;
	assert_true(id > 0);
	double v = value(&p1, "cbcmn_tasks_spawned_total{runtime=\"%u\"}", id);
	assert_true(v >= (double)a.tasks_spawned && v <= (double)b.tasks_spawned);
	assert_true(v >= 65); /* some_work's tasks */
	v = value(&p1, "cbcmn_tasks_completed_total{runtime=\"%u\"}", id);
	assert_true(v >= (double)a.tasks_completed && v <= (double)b.tasks_completed);
	assert_true(value(&p1, "cbcmn_executors{runtime=\"%u\"}", id) == 2);
	assert_true(value(&p1, "cbcmn_runtime_info{runtime=\"%u\",pid=\"%d\",backend=\"%s\","
			       "policy=\"%s\",msg_ring=\"%d\",oversubscribed=\"%d\"}",
			  id, (int)getpid(), cbcmn_backend_name(a.backend),
			  a.policy >= 0 ? cbcmn_policy_name((cbcmn_policy)a.policy) : "none",
			  (int)a.msg_ring, (int)a.oversubscribed) == 1);
	for (uint32_t i = 0; i < 2; i++) {
		v = value(&p1, "cbcmn_tasks_run_total{runtime=\"%u\",executor=\"%u\"}", id, i);
		assert_true(v >= (double)pa[i].tasks_run && v <= (double)pb[i].tasks_run);
		v = value(&p1, "cbcmn_steals_total{runtime=\"%u\",executor=\"%u\"}", id, i);
		assert_true(v >= (double)pa[i].steal_successes && v <= (double)pb[i].steal_successes);
		v = value(&p1, "cbcmn_io_ops_total{runtime=\"%u\",executor=\"%u\"}", id, i);
		assert_true(v >= (double)pa[i].io_ops && v <= (double)pb[i].io_ops);
		double states = 0;
		for (const char *const *s = (const char *const[]){"stopped", "running", "searching", "parked", NULL};
		     *s; s++)
			states += value(&p1, "cbcmn_executor_state{runtime=\"%u\",executor=\"%u\","
					     "cbcmn_executor_state=\"%s\"}", id, i, *s);
		assert_true(states == 1);
	}
	reply_free(&r);

	t_run(rt, some_work, NULL, 0);
	r = get(port, "/metrics?x=1", "Accept: text/plain\r\n");
	assert_int_equal(r.status, 200);
	parse(r.body, false, &p2);
	assert_int_equal(p2.n, p1.n);
	for (size_t i = 0; i < p1.n; i++)
		if (!strcmp(p1.s[i].type, "counter"))
			if (find(&p2, p1.s[i].key)->v < p1.s[i].v)
				fail_msg("%s went down: %g then %g", p1.s[i].key, p1.s[i].v,
					 find(&p2, p1.s[i].key)->v);
	/* The second run's spawns are there. */
	assert_true(value(&p2, "cbcmn_tasks_spawned_total{runtime=\"%u\"}", id) >=
		    value(&p1, "cbcmn_tasks_spawned_total{runtime=\"%u\"}", id) + 65);
	reply_free(&r);
	stop_and_destroy(ms, rt);
}

static void test_scrape_parses_and_matches_snapshots(void **state)
{
	scrape_matches_snapshots(CBCMN_BACKEND_AUTO);
}

static void test_scrape_on_epoll_backend(void **state)
{
	scrape_matches_snapshots(CBCMN_BACKEND_EPOLL);
}

/* Accept: application/openmetrics-text gets OpenMetrics (as Prometheus
 * asks), q=0 does not; HEAD gets the headers alone. */
static void test_openmetrics_when_accepted(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	int port = cbcmn_metrics_port(ms);
	static struct parsed p;
	struct reply r = get(port, "/metrics",
			     "Accept: application/openmetrics-text;version=1.0.0,application/"
			     "openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,"
			     "*/*;q=0.1\r\n");
	assert_int_equal(r.status, 200);
	assert_string_equal(r.ctype, "application/openmetrics-text; version=1.0.0; charset=utf-8");
	parse(r.body, true, &p);
	assert_true(r.body_len > 6 && !strcmp(r.body + r.body_len - 6, "# EOF\n"));
	struct reply om = r;
	r = get(port, "/metrics", "accept: text/plain;q=1, Application/OpenMetrics-Text ; q=0.0\r\n");
	assert_int_equal(r.status, 200);
	assert_string_equal(r.ctype, "text/plain; version=0.0.4; charset=utf-8");
	parse(r.body, false, &p);
	struct reply text = r;
	r = ask(port, "HEAD /metrics HTTP/1.0\r\n\r\n", 26);
	assert_int_equal(r.status, 200);
	assert_true(r.content_length > 1000);
	assert_int_equal(r.body_len, 0);
	reply_free(&r);
	stop_and_destroy(ms, rt);
	/* The reference parsers too, once no executor runs (they fork). */
	om_refcheck(om.body, om.body_len, true);
	om_refcheck(text.body, text.body_len, false);
	reply_free(&om);
	reply_free(&text);
}

/* Other paths 404, other methods 405 (with Allow), garbage 400, and a
 * request past the limit 431: each answered, and the server goes on. */
static void test_other_requests_get_their_status(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	int port = cbcmn_metrics_port(ms);
	expect(port, "/", "", 404);
	expect(port, "/metricsx", "", 404);
	struct reply r = ask(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 45);
	assert_int_equal(r.status, 405);
	assert_non_null(strstr(r.raw, "\r\nAllow: GET, HEAD"));
	reply_free(&r);
	static const char *const bad[] = {"garbage\r\n\r\n", "GET /metrics\r\n\r\n",
					  "GET /metrics HTTP/2.0\r\n\r\n", "GET  /metrics HTTP/1.1\r\n\r\n",
					  "GET /metrics HTTP/1.1 x\r\n\r\n", "\r\n\r\n",
					  "GET /metrics  HTTP/1.1\r\n\r\n", "GET /metrics HTTP/1.1\r\r\n\r\n",
					  "get /metrics HTTP/1.1\r\n\r\n", "GET\t/metrics HTTP/1.1\r\n\r\n"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = ask(port, bad[i], strlen(bad[i]));
		if (r.status != 400)
			fail_msg("\"%s\": %d, not 400", bad[i], r.status);
		reply_free(&r);
	}
	/* Past 8 KiB without the blank line: refused, not buffered on. */
	size_t big = CBCMN__METRICS_REQ_MAX + 4096;
	char *req = malloc(big);
	assert_non_null(req);
	memcpy(req, "GET /metrics HTTP/1.1\r\nX-Pad: ", 30);
	memset(req + 30, 'a', big - 30);
	r = ask(port, req, big);
	assert_int_equal(r.status, 431);
	reply_free(&r);
	free(req);
	expect(port, "/metrics", "", 200);
	stop_and_destroy(ms, rt);
}

/* A client that connects and sends nothing, and one that sends half a
 * request, hold up no scrape; the timeout then closes both. */
static void test_silent_client_does_not_stop_scrapes(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	struct cbcmn__metrics_limits lim = {1000000000, 8, 1024};
	cbcmn_metrics_server *ms = serve(rt, &lim);
	int port = cbcmn_metrics_port(ms);
	int silent = dial(port), half = dial(port);
	assert_int_equal(send(half, "GET /metr", 9, 0), 9);
	for (int i = 0; i < 3; i++) {
		expect(port, "/metrics", "", 200);
	}
	/* The timeout: each is closed without an answer (read_all fails the
	 * test if the server keeps them past the stall bound). */
	char *s = read_all(silent, NULL);
	assert_string_equal(s, "");
	free(s);
	s = read_all(half, NULL);
	assert_string_equal(s, "");
	free(s);
	close(silent);
	close(half);
	stop_and_destroy(ms, rt);
}

/* A client that trickles a byte at a time is cut at the deadline: the
 * timeout is for the whole request, not for each read. */
static void test_trickling_client_is_cut_at_the_deadline(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	struct cbcmn__metrics_limits lim = {1000000000, 8, 1024};
	cbcmn_metrics_server *ms = serve(rt, &lim);
	int fd = dial(cbcmn_metrics_port(ms));
	bool cut = false;
	/* 250 bytes 20 ms apart: 5 s, far past the 1 s, each gap far within. */
	for (int i = 0; i < 250 && !cut; i++) {
		if (send(fd, "X", 1, MSG_NOSIGNAL) != 1)
			cut = true;
		struct pollfd pfd = {fd, POLLIN, 0};
		if (poll(&pfd, 1, 20) == 1)
			cut = true; /* EOF (or a reset) */
	}
	assert_true(cut);
	close(fd);
	stop_and_destroy(ms, rt);
}

/* A request that arrives a byte at a time is answered: the end of its
 * head (CRLF CRLF, or LF LF) is found whichever read brings each of its
 * bytes (the scan resumes where the last one stopped, two bytes back). */
static void test_request_sent_a_byte_at_a_time_is_answered(void **state)
{
	static const char *const reqs[] = {"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
					   "GET /metrics HTTP/1.0\n\n"};
	cbcmn_runtime *rt = t_runtime(1);
	struct cbcmn__metrics_limits lim = {T_STALL_NS, 8, 1024};
	cbcmn_metrics_server *ms = serve(rt, &lim);
	for (size_t k = 0; k < sizeof(reqs) / sizeof(reqs[0]); k++) {
		int fd = dial(cbcmn_metrics_port(ms));
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		for (const char *p = reqs[k]; *p; p++) {
			assert_int_equal(send(fd, p, 1, MSG_NOSIGNAL), 1);
			usleep(2000); /* one read each, as far as the server can tell */
		}
		char *r = read_all(fd, NULL);
		if (strncmp(r, "HTTP/1.1 200 ", 13))
			fail_msg("request %zu, a byte at a time: answered '%.40s'", k, r);
		free(r);
		close(fd);
	}
	stop_and_destroy(ms, rt);
}

/* Past max_clients a connection gets 503 at once; once the others have
 * gone, scrapes are answered again. */
static void test_clients_over_the_limit_get_503(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	struct cbcmn__metrics_limits lim = {T_STALL_NS, 2, 1024};
	cbcmn_metrics_server *ms = serve(rt, &lim);
	int port = cbcmn_metrics_port(ms);
	int a = dial(port), b = dial(port);
	/* The third is accepted after the first two (the backlog is FIFO). */
	expect(port, "/metrics", "", 503);
	close(a);
	close(b);
	/* Their tasks see the EOF and end; until they have, 503. */
	uint64_t t0 = t_now_ns();
	for (;;) {
		struct reply r = get(port, "/metrics", "");
		int st = r.status;
		reply_free(&r);
		if (st == 200)
			break;
		assert_int_equal(st, 503);
		assert_true(t_now_ns() - t0 < T_STALL_NS);
		usleep(10000);
	}
	stop_and_destroy(ms, rt);
}

/* Several threads scraping at once all get whole, parseable answers. */
#define NSCRAPERS 8
#define NSCRAPES 3
static int concurrent_port;
static struct reply concurrent[NSCRAPERS][NSCRAPES];

/* The replies only: cmocka's checks belong to the main thread. */
static void *scraper(void *arg)
{
	struct reply *out = arg;
	for (int i = 0; i < NSCRAPES; i++)
		out[i] = get(concurrent_port, "/metrics", "");
	return NULL;
}

static void test_concurrent_scrapers(void **state)
{
	cbcmn_runtime *rt = t_runtime(2);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	concurrent_port = cbcmn_metrics_port(ms);
	pthread_t th[NSCRAPERS];
	for (int i = 0; i < NSCRAPERS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, scraper, concurrent[i]), 0);
	for (int i = 0; i < NSCRAPERS; i++)
		pthread_join(th[i], NULL);
	static struct parsed p;
	for (int i = 0; i < NSCRAPERS; i++)
		for (int k = 0; k < NSCRAPES; k++) {
			struct reply *r = &concurrent[i][k];
			assert_int_equal(r->status, 200);
			assert_int_equal(r->content_length, (long)r->body_len);
			parse(r->body, false, &p);
			reply_free(r);
		}
	stop_and_destroy(ms, rt);
}

/* Stop with a client connected and waiting: stop returns, the client
 * sees the connection close, no descriptor is left (the watchdog's
 * teardown sweeps them), and the runtime destroys. */
static void test_stop_while_a_client_is_connected(void **state)
{
	cbcmn_runtime *rt = t_runtime(2);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	int port = cbcmn_metrics_port(ms);
	int fd = dial(port), fd2 = dial(port);
	assert_int_equal(send(fd2, "GET /", 5, 0), 5);
	expect(port, "/metrics", "", 200);
	assert_int_equal(cbcmn_metrics_stop(ms), 0);
	char *s = read_all(fd, NULL);
	assert_string_equal(s, "");
	free(s);
	s = read_all(fd2, NULL);
	free(s);
	close(fd);
	close(fd2);
	/* The port is closed. */
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), -1);
	assert_int_equal(errno, ECONNREFUSED);
	close(c);
	t_destroy(rt);
}

/* Destroy with the server running and a client connected: destroy stops
 * it (it is not "busy"), the client sees the close, nothing leaks. */
static void test_destroy_with_the_server_running(void **state)
{
	for (uint32_t backend = CBCMN_BACKEND_AUTO; backend <= CBCMN_BACKEND_EPOLL; backend += 2) {
		cbcmn_runtime *rt = runtime_on(2, backend);
		cbcmn_metrics_server *ms = serve(rt, NULL), *ms2 = serve(rt, NULL);
		int fd = dial(cbcmn_metrics_port(ms));
		expect(cbcmn_metrics_port(ms2), "/metrics", "", 200);
		t_destroy(rt);
		char *s = read_all(fd, NULL);
		assert_string_equal(s, "");
		free(s);
		close(fd);
	}
}

/* A connection accepted in the instant before a stop: its spawn is
 * refused (the server's nursery is cancelled), and it is closed
 * unanswered like every other connection at the stop.  It was refused
 * as a connection over the limit, a 503 telling the client to come back
 * in a second (CI, under TSan: the accept of test_destroy_with_the_
 * server_running's client came late).  The hook holds the acceptor
 * between its accept and the spawn until the stop has cancelled it. */
static _Atomic int accepted_held;

static void hold_accepted_until_cancelled(enum cbcmn__pause_point p, void *cx)
{
	if (p != CBCMN__P_ACCEPTED)
		return;
	atomic_store(&accepted_held, 1);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (!cbcmn_cx_cancelled(cx) && t_now_ns() < end)
		usleep(1000);
}

static void test_stop_closes_a_connection_accepted_as_it_began(void **state)
{
	(void)state;
	if (!cbcmn__pause_set(NULL))
		T_SKIP("built without CBCMN_FAULTS: runs in the ASan build");
	for (uint32_t backend = CBCMN_BACKEND_AUTO; backend <= CBCMN_BACKEND_EPOLL; backend += 2) {
		cbcmn_runtime *rt = runtime_on(2, backend);
		cbcmn_metrics_server *ms = serve(rt, NULL);
		atomic_store(&accepted_held, 0);
		cbcmn__pause_set(hold_accepted_until_cancelled);
		int fd = dial(cbcmn_metrics_port(ms));
		uint64_t end = t_now_ns() + T_STALL_NS;
		while (!atomic_load(&accepted_held) && t_now_ns() < end)
			usleep(1000);
		assert_true(atomic_load(&accepted_held)); /* else: never accepted */
		assert_int_equal(cbcmn_metrics_stop(ms), 0);
		cbcmn__pause_set(NULL);
		char *s = read_all(fd, NULL);
		assert_string_equal(s, "");
		free(s);
		close(fd);
		t_destroy(rt);
	}
}

/* Destroy refused (-EBUSY: a task of the program's is live, or a nursery a
 * thread opened is not awaited) leaves the runtime as it was, its scrape
 * endpoints too: they were stopped before the refusal, so the runtime
 * lived on without them. */
static int64_t waits_on(cbcmn_cx *cx, void *arg)
{
	int v;
	return cbcmn_chan_recv(cx, arg, &v);
}

static void test_busy_destroy_keeps_the_server(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	int port = cbcmn_metrics_port(ms);
	cbcmn_chan *c;
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &c), 0);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, n, waits_on, c, NULL), 0);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY); /* the nursery */
	expect(port, "/metrics", "", 200);
	int v = 1;
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), 0);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	/* A nursery a thread opened, empty; a reservation a thread holds. */
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	expect(port, "/metrics", "", 200);
	assert_int_equal(cbcmn_nursery_await_all(NULL, n), 0);
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(int), &c), 0);
	cbcmn_chan_permit p;
	assert_int_equal(cbcmn_chan_try_reserve(NULL, c, &p), 0);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	expect(port, "/metrics", "", 200);
	assert_int_equal(cbcmn_chan_abort(NULL, &p), 0);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	stop_and_destroy(ms, rt);
}

/* Destroy's look at the program's tasks, with a scrape's task started and
 * ended inside its count of live tasks (between the completions and the
 * spawns it reads): that task is no task of the program's.  It was taken
 * for one (-EBUSY with nothing of the program's alive): the look read the
 * servers' count before and after, and the task was in neither. */
static _Atomic int look_armed;
static int look_port;
static pthread_t look_thread;

/* The completions seg counts, as the look sums them. */
static uint64_t seg_completions(const struct cbcmn__seg *s)
{
	uint64_t n = atomic_load(&s->hdr->ext_completions);
	for (uint32_t i = 0; i < s->nexec; i++)
		n += atomic_load(&cbcmn__seg_slot(s, i)->ctr.completions);
	return n;
}

static void scrape_inside_the_look(enum cbcmn__pause_point p, void *seg)
{
	if (p != CBCMN__P_LIVE_COUNTS || !pthread_equal(pthread_self(), look_thread) ||
	    !atomic_exchange(&look_armed, 0))
		return;
	uint64_t done = seg_completions(seg);
	int fd = dial(look_port);
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
	(void)!send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL);
	char buf[4096];
	while (recv(fd, buf, sizeof(buf), 0) > 0) /* to its close: the task's end */
		;
	close(fd);
	/* The task's completion, counted after its close (a hang guard). */
	uint64_t deadline = t_now_ns() + T_STALL_NS;
	while (seg_completions(seg) == done && t_now_ns() < deadline)
		usleep(100);
}

static void test_destroy_look_ignores_a_scrape_inside_it(void **state)
{
	(void)state;
	if (!cbcmn__pause_set(NULL))
		T_SKIP("built without CBCMN_FAULTS: runs in the ASan and TSan builds");
	cbcmn_runtime *rt = t_runtime(2);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	look_port = cbcmn_metrics_port(ms);
	look_thread = pthread_self();
	atomic_store(&look_armed, 1);
	cbcmn__pause_set(scrape_inside_the_look);
	int rc = cbcmn_runtime_destroy(rt); /* stops the server too */
	cbcmn__pause_set(NULL);
	assert_int_equal(atomic_load(&look_armed), 0);
	if (rc != 0) {
		stop_and_destroy(ms, rt);
		fail_msg("destroy: %d, nothing of the program's alive", rc);
	}
}

/* A scrape of /metrics over c, a socket made beforehand (the table may be
 * full): the first bytes of its answer, NUL-terminated, or <= 0 if none
 * came within T_STALL_NS. */
static ssize_t scrape_on(int c, int port, char *buf, size_t size)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
	assert_int_equal(send(c, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
	struct pollfd pf = {.fd = c, .events = POLLIN};
	ssize_t n = poll(&pf, 1, (int)(T_STALL_NS / 1000000)) == 1 ? recv(c, buf, size - 1, 0) : -1;
	buf[n > 0 ? n : 0] = 0;
	return n;
}

/* A server on rt (*ms) serving from a full descriptor table: the limit
 * lowered to 64 past a socket made beforehand, the table filled once, a
 * scrape over that socket, then the table freed and the limit restored.
 * The scrape's answer as scrape_on() gives it. */
static ssize_t scrape_out_of_descriptors(cbcmn_runtime *rt, cbcmn_metrics_server **ms, char *buf,
					 size_t size)
{
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* before the table fills */
	assert_true(c >= 0);
	/* The limit first: an io_uring accept takes it as it is queued. */
	struct rlimit old, low;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = (rlim_t)c + 64 < old.rlim_cur ? (rlim_t)c + 64 : old.rlim_cur;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	/* No scrape before: its connection, closed late on the server's
	 * side, would free a descriptor after the fill. */
	*ms = serve(rt, NULL);
	static int fill[4096];
	int nfill = 0;
	/* Once: the server's reserve, let go while it sheds, would be taken
	 * by a second fill. */
	while (nfill < 4096 && (fill[nfill] = dup(c)) >= 0)
		nfill++;
	assert_int_equal(errno, EMFILE);
	ssize_t n = scrape_on(c, cbcmn_metrics_port(*ms), buf, size);
	for (int i = 0; i < nfill; i++)
		close(fill[i]);
	close(c);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	return n;
}

/* Out of descriptors (EMFILE): the accept cannot take the connection, and
 * its client waited unanswered, the acceptor backing off, until the
 * process closed some.  The server's reserve descriptor makes room: the
 * client gets a 503 at once, and a 200 once descriptors are free. */
static void test_out_of_descriptors_answers_503_then_serves(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_metrics_server *ms;
	char buf[256];
	ssize_t n = scrape_out_of_descriptors(rt, &ms, buf, sizeof(buf));
	if (n <= 0)
		fail_msg("no answer while out of descriptors (recv %zd)", n);
	if (!strstr(buf, "HTTP/1.1 503"))
		fail_msg("not a 503: %.80s", buf);
	expect(cbcmn_metrics_port(ms), "/metrics", "", 200);
	stop_and_destroy(ms, rt);
}

/* Two sockets c made, then the descriptor limit lowered to 64 past them
 * (*old: what it was, *low: what it is). */
static void sockets_under_a_low_limit(int c[2], struct rlimit *old, struct rlimit *low)
{
	for (int i = 0; i < 2; i++)
		assert_true((c[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, old), 0);
	*low = *old;
	low->rlim_cur = (rlim_t)c[1] + 64 < old->rlim_cur ? (rlim_t)c[1] + 64 : old->rlim_cur;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, low), 0);
}

/* A server on a runtime of one executor, under a low descriptor limit
 * (sockets_under_a_low_limit(): c, old, low), listening on port. */
struct low_limit {
	cbcmn_runtime *rt;
	cbcmn_metrics_server *ms;
	int port, c[2];
	struct rlimit old, low;
};

static void serve_under_a_low_limit(struct low_limit *l)
{
	l->rt = t_runtime(1);
	sockets_under_a_low_limit(l->c, &l->old, &l->low);
	l->ms = serve(l->rt, NULL);
	l->port = cbcmn_metrics_port(l->ms);
}

/* dup()s of fd into fill[*n] and on until the table (or fill) is full. */
static void fill_the_table(int fd, int *fill, int *n)
{
	while (*n < 4096 && (fill[*n] = dup(fd)) >= 0)
		(*n)++;
}

/* Out of descriptors, the server keeps its reserve while no connection
 * waits: a program filling the table again (or any thread's open) must
 * not find it let go.  It was given up for each 100 ms accept of an idle
 * server: a second fill took it, and the next scrape waited unanswered
 * in the backlog. */
static void test_out_of_descriptors_keeps_the_reserve(void **state)
{
	(void)state;
	struct low_limit l;
	serve_under_a_low_limit(&l);
	static int fill[4096];
	int nfill = 0;
	fill_the_table(l.c[0], fill, &nfill);
	char buf[256];
	ssize_t n0 = scrape_on(l.c[0], l.port, buf, sizeof(buf)); /* the server now sheds */
	bool shed = n0 > 0 && strstr(buf, "HTTP/1.1 503") != NULL;
	/* Fill again for 300 ms, while the server waits for connections. */
	int stolen = 0;
	for (int i = 0; i < 300 && nfill < 4096; i++) {
		if ((fill[nfill] = dup(l.c[0])) >= 0) {
			nfill++;
			stolen++;
		}
		usleep(1000);
	}
	ssize_t n1 = scrape_on(l.c[1], l.port, buf, sizeof(buf));
	for (int i = 0; i < nfill; i++)
		close(fill[i]);
	close(l.c[0]);
	close(l.c[1]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &l.old), 0);
	if (!shed) /* buf holds the second scrape's answer now */
		fail_msg("the first scrape was not refused with a 503 (recv %zd)", n0);
	assert_int_equal(stolen, 0);
	if (n1 <= 0)
		fail_msg("the second scrape was not answered (recv %zd)", n1);
	expect(l.port, "/metrics", "", 200);
	stop_and_destroy(l.ms, l.rt);
}

/* A reserve lost: another thread takes its number in the instant between
 * shed_one()'s close and its accept (here the pause point's hook, a dup
 * into it), the accept finds the table full, and no reserve can be had.
 * It is taken again once descriptors are free (the next accept that
 * succeeds, a connection's end), so the next time the table is full a
 * scrape is still answered (503).  It was retried only at that next
 * EMFILE, when it cannot be had: the scrape waited unanswered. */
static int reserve_thief_fd = -1;
static _Atomic int reserve_stolen = -1;

/* The descriptor below lim that holds the other end of connected socket
 * c (the server's side, in this process), or -1. */
static int peer_fd(int c, int lim)
{
	struct sockaddr_in me, peer;
	socklen_t l = sizeof(me);
	if (getsockname(c, (struct sockaddr *)&me, &l) != 0)
		return false;
	for (int fd = 0; fd < lim; fd++) {
		l = sizeof(peer);
		if (fd != c && getpeername(fd, (struct sockaddr *)&peer, &l) == 0 &&
		    peer.sin_family == AF_INET && peer.sin_port == me.sin_port &&
		    peer.sin_addr.s_addr == me.sin_addr.s_addr)
			return fd;
	}
	return -1;
}

static void steal_the_reserve(enum cbcmn__pause_point p, void *rt)
{
	(void)rt;
	if (p == CBCMN__P_RESERVE_GONE && atomic_load(&reserve_stolen) < 0)
		atomic_store(&reserve_stolen, dup(reserve_thief_fd));
}

static void test_a_lost_reserve_is_taken_again_once_descriptors_are_free(void **state)
{
	(void)state;
	if (!cbcmn__pause_set(NULL))
		T_SKIP("built without CBCMN_FAULTS: runs in the ASan build");
	if (T_TSAN)
		T_SKIP("TSan's account of descriptors sees no order between the hook's dup on "
		       "the server's thread and ours: ASan runs it");
	struct low_limit l;
	serve_under_a_low_limit(&l);
	reserve_thief_fd = l.c[0];
	atomic_store(&reserve_stolen, -1);
	cbcmn__pause_set(steal_the_reserve);
	static int fill[4096];
	int nfill = 0;
	fill_the_table(l.c[0], fill, &nfill);
	/* A scrape while full: the server lets its reserve go, which is
	 * stolen; its accept fails; it backs off. */
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)l.port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(l.c[0], (struct sockaddr *)&sa, sizeof(sa)), 0);
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
	assert_int_equal(send(l.c[0], req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
	uint64_t end = t_now_ns() + T_STALL_NS;
	while (atomic_load(&reserve_stolen) < 0 && t_now_ns() < end)
		usleep(1000);
	cbcmn__pause_set(NULL);
	int stolen = atomic_load(&reserve_stolen);
	/* The acceptor backs off to 100 ms rounds (an accept, EMFILE, no
	 * reserve to be had): free descriptors between rounds, where only the
	 * next accept, which succeeds, sees them (in a round, the old retry
	 * at an EMFILE would take the reserve again itself).  Two: the
	 * accept's and the reserve's. */
	usleep(300000);
	if (nfill >= 2) {
		close(fill[--nfill]);
		close(fill[--nfill]);
	}
	char buf[256];
	struct pollfd pf = {.fd = l.c[0], .events = POLLIN};
	ssize_t n0 = -1;
	if (poll(&pf, 1, (int)(T_STALL_NS / 1000000)) == 1)
		n0 = recv(l.c[0], buf, sizeof(buf) - 1, 0);
	buf[n0 > 0 ? n0 : 0] = 0;
	bool served = n0 > 0 && strstr(buf, "HTTP/1.1 200") != NULL;
	/* Its connection's end: the server's side closed (a descriptor
	 * free, which an accept would take), then the table filled again. */
	int side = peer_fd(l.c[0], (int)l.low.rlim_cur); /* before the FINs: still connected */
	while (recv(l.c[0], buf, sizeof(buf), 0) > 0)
		;
	shutdown(l.c[0], SHUT_WR);
	end = t_now_ns() + T_STALL_NS;
	while (side >= 0 && fcntl(side, F_GETFD) >= 0 && t_now_ns() < end)
		usleep(1000);
	fill_the_table(l.c[0], fill, &nfill);
	ssize_t n1 = scrape_on(l.c[1], l.port, buf, sizeof(buf));
	bool shed = n1 > 0 && strstr(buf, "HTTP/1.1 503") != NULL;
	for (int i = 0; i < nfill; i++)
		close(fill[i]);
	if (stolen >= 0)
		close(stolen);
	close(l.c[0]);
	close(l.c[1]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &l.old), 0);
	if (stolen < 0)
		fail_msg("the reserve was not let go (no shed)");
	if (side < 0)
		fail_msg("the server's side of the first scrape was not found");
	if (!served)
		fail_msg("the first scrape was not served once descriptors were free (recv %zd)",
			 n0);
	if (!shed)
		fail_msg("full again, the scrape was not refused with a 503 (recv %zd): no reserve",
			 n1);
	expect(l.port, "/metrics", "", 200);
	stop_and_destroy(l.ms, l.rt);
}

/* Start and stop at once, over and over: the acceptor may not have run
 * yet (its descriptor is then closed by stop), nothing leaks. */
static void test_stop_right_after_serve(void **state)
{
	cbcmn_runtime *rt = t_runtime(2);
	for (int i = 0; i < T_SCALE(50); i++) {
		cbcmn_metrics_server *ms = serve(rt, NULL);
		if (i % 2) {
			int fd = dial(cbcmn_metrics_port(ms));
			assert_int_equal(cbcmn_metrics_stop(ms), 0);
			close(fd);
		} else {
			assert_int_equal(cbcmn_metrics_stop(ms), 0);
		}
	}
	t_destroy(rt);
}

/* The default address is loopback: the listening socket is 127.0.0.1's,
 * as /proc/net/tcp shows it (0100007F, LISTEN 0A). */
static void test_default_address_is_loopback(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_metrics_server *ms = NULL;
	assert_int_equal(cbcmn_metrics_serve(rt, NULL, 0, &ms), 0);
	char want[32];
	snprintf(want, sizeof(want), "0100007F:%04X", cbcmn_metrics_port(ms));
	FILE *f = fopen("/proc/self/net/tcp", "r");
	assert_non_null(f);
	char line[512], local[64], st[8];
	bool found = false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, " %*s %63s %*s %7s", local, st) == 2 && !strcmp(st, "0A") &&
		    !strcmp(local, want))
			found = true;
	fclose(f);
	assert_true(found);
	stop_and_destroy(ms, rt);
}

/* Profiles with budgets: the server's tasks are the runtime's, not the
 * program's, so they serve under sovereign (roots hold no capability:
 * no CapSpawn to start a connection's task) and service alike. */
static void test_serves_under_every_profile(void **state)
{
	static const cbcmn_profile profiles[] = {CBCMN_PROFILE_SERVICE, CBCMN_PROFILE_CLUSTER,
						 CBCMN_PROFILE_SOVEREIGN};
	for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cfg.profile = profiles[i];
		cfg.yield_interval = 256;
		cbcmn_runtime *rt = t_runtime_cfg(&cfg);
		cbcmn_metrics_server *ms = serve(rt, NULL);
		for (int k = 0; k < 2; k++) {
			struct reply r = get(cbcmn_metrics_port(ms), "/metrics", "");
			if (r.status != 200)
				fail_msg("profile %d: %d", (int)profiles[i], r.status);
			reply_free(&r);
		}
		stop_and_destroy(ms, rt);
	}
}

/* The smallest stacks a program may choose (CBCMN_STACK_MIN): the
 * server's tasks, formatting included, fit in them.  A task of the server
 * that overflowed would end with CBCMN_EPANIC, and that first failure of
 * the nursery would cancel the acceptor with it: the server gone. */
static void test_serves_with_the_smallest_stacks(void **state)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 2;
	cfg.stack_size = CBCMN_STACK_MIN;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	static struct parsed p;
	for (int k = 0; k < 3; k++) {
		struct reply r = get(cbcmn_metrics_port(ms), "/metrics",
				     k == 1 ? "Accept: application/openmetrics-text\r\n" : "");
		assert_int_equal(r.status, 200);
		parse(r.body, k == 1, &p);
		reply_free(&r);
	}
	stop_and_destroy(ms, rt);
}

/* A client that resets the connection as soon as it has asked: the
 * server's send fails (EPIPE or ECONNRESET), never with a SIGPIPE that
 * would end the process, and the server goes on. */
static void test_client_gone_before_the_answer(void **state)
{
	cbcmn_runtime *rt = t_runtime(2);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	int port = cbcmn_metrics_port(ms);
	for (int i = 0; i < 20; i++) {
		int fd = dial(port);
		static const char req[] = "GET /metrics HTTP/1.1\r\n\r\n";
		assert_int_equal(send(fd, req, sizeof(req) - 1, 0), (ssize_t)sizeof(req) - 1);
		struct linger lg = {1, 0}; /* close is a reset */
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(fd);
	}
	expect(port, "/metrics", "", 200);
	stop_and_destroy(ms, rt);
}

/* Fault injection exists in the ASan and TSan builds only (fault.h). */
#define SKIP_WITHOUT_FAULTS()                                                   \
	do {                                                                    \
		if (T_TSAN)                                                     \
			T_SKIP("arming faults while the server's tasks may hit them races " \
			       "with their reads of the plan (fault.c): ASan runs these"); \
		struct cbcmn__fault_plan never = {.nth = UINT64_MAX};           \
		if (!cbcmn__fault_arm(CBCMN__F_IO, &never))                     \
			T_SKIP("fault injection is compiled in only with CBCMN_FAULTS (ASan, TSan builds)"); \
		cbcmn__fault_disarm_all();                                      \
	} while (0)

/* In a child forked while a server runs, stop does nothing and says so,
 * as every call on the parent's runtime does there (cbcmn_runtime_create):
 * the server is the parent's, and freeing the child's copy of it (after
 * waits that return at once) would pass for a stop. */
static void test_stop_in_a_forked_child_is_eforked(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(cbcmn_metrics_stop(ms) == CBCMN_EFORKED ? 0 : 1);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	expect(cbcmn_metrics_port(ms), "/metrics", "", 200);
	stop_and_destroy(ms, rt);
}

/* A passing accept(2) error (ENETDOWN and the other network errors
 * accept(2) says to treat as EAGAIN) does not end the acceptor: it
 * backs off and accepts again.  Injected into the first fiber I/O call
 * after arming, which is the acceptor's first accept. */
static void test_network_accept_error_does_not_end_serving(void **state)
{
	SKIP_WITHOUT_FAULTS();
	cbcmn_runtime *rt = t_runtime(1);
	struct cbcmn__fault_plan plan = {.nth = 1, .err = -ENETDOWN};
	assert_true(cbcmn__fault_arm(CBCMN__F_IO, &plan));
	cbcmn_metrics_server *ms = serve(rt, NULL);
	/* Until the accept failed, nothing is known: wait for the hit. */
	uint64_t t0 = t_now_ns();
	while (cbcmn__fault_fails(CBCMN__F_IO) == 0) {
		assert_true(t_now_ns() - t0 < T_STALL_NS);
		usleep(1000);
	}
	cbcmn__fault_disarm_all();
	expect(cbcmn_metrics_port(ms), "/metrics", "", 200);
	stop_and_destroy(ms, rt);
}

/* An allocation that fails anywhere on a scrape's path (the connection's
 * buffer, its task, its I/O, the snapshot's buffers, the text) costs that
 * scrape at most (a 503, or its connection closed unanswered), never the
 * server: the scrapes after it are answered. */
static void test_failed_allocation_costs_one_scrape_at_most(void **state)
{
	SKIP_WITHOUT_FAULTS();
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	int port = cbcmn_metrics_port(ms);
	for (uint64_t nth = 1; nth <= 6; nth++) {
		struct cbcmn__fault_plan plan = {.nth = nth, .err = -ENOMEM};
		assert_true(cbcmn__fault_arm(CBCMN__F_MALLOC, &plan));
		int fd = dial(port);
		static const char req[] = "GET /metrics HTTP/1.1\r\n\r\n";
		assert_int_equal(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
		char *text = read_all(fd, NULL);
		close(fd);
		int st = 0;
		if (*text && (sscanf(text, "HTTP/1.1 %d ", &st) != 1 || (st != 200 && st != 503)))
			fail_msg("malloc %llu failing: \"%.60s\"", (unsigned long long)nth, text);
		free(text);
		cbcmn__fault_disarm_all();
		expect(port, "/metrics", "", 200);
	}
	stop_and_destroy(ms, rt);
}

/* An allocation failing while the server starts (its record, its
 * nursery, the acceptor's task or its stack): serve fails with -ENOMEM
 * and leaves nothing open, or succeeds with an acceptor that runs.  A
 * serve that returned 0 with an acceptor that never began took
 * connections into its backlog and answered none. */
static void test_serve_with_failing_allocations(void **state)
{
	SKIP_WITHOUT_FAULTS();
	cbcmn_runtime *rt = t_runtime(1);
	for (uint64_t nth = 1; nth <= 8; nth++) {
		struct cbcmn__fault_plan plan = {.nth = nth, .err = -ENOMEM};
		assert_true(cbcmn__fault_arm(CBCMN__F_MALLOC, &plan));
		cbcmn_metrics_server *ms = NULL;
		int rc = cbcmn_metrics_serve(rt, NULL, 0, &ms);
		cbcmn__fault_disarm_all();
		if (rc == -ENOMEM)
			continue;
		assert_int_equal(rc, 0);
		expect(cbcmn_metrics_port(ms), "/metrics", "", 200);
		assert_int_equal(cbcmn_metrics_stop(ms), 0);
	}
	t_destroy(rt);
}

static int64_t serve_from_task(cbcmn_cx *cx, void *arg)
{
	cbcmn_metrics_server *ms = NULL;
	return cbcmn_metrics_serve(cbcmn_cx_runtime(cx), NULL, 0, &ms);
}

static int64_t serve_ex_from_task(cbcmn_cx *cx, void *arg)
{
	cbcmn_metrics_server *ms = NULL;
	cbcmn_metrics_opts o = {.size = sizeof(o)};
	return cbcmn_metrics_serve_ex(cbcmn_cx_runtime(cx), &o, &ms);
}

/* The blocking pool is the runtime's too. */
static int64_t serve_in_pool(void *arg)
{
	cbcmn_metrics_server *ms = NULL;
	return cbcmn_metrics_serve(arg, NULL, 0, &ms);
}

static int64_t serve_from_blocking_pool(cbcmn_cx *cx, void *arg)
{
	int64_t r = 0;
	int rc = cbcmn_blocking(cx, serve_in_pool, cbcmn_cx_runtime(cx), &r);
	return rc ? rc : r;
}

static int64_t stop_from_task(cbcmn_cx *cx, void *arg)
{
	return cbcmn_metrics_stop(arg);
}

/* What the calls refuse. */
static void test_bad_calls(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_metrics_server *ms = NULL;
	assert_int_equal(cbcmn_metrics_serve(NULL, NULL, 0, &ms), -EINVAL);
	assert_int_equal(cbcmn_metrics_serve(rt, NULL, 0, NULL), -EINVAL);
	assert_int_equal(cbcmn_metrics_serve(rt, "localhost", 0, &ms), -EINVAL);
	assert_int_equal(cbcmn_metrics_serve(rt, "127.0.0.1 ", 0, &ms), -EINVAL);
	assert_int_equal(cbcmn_metrics_stop(NULL), -EINVAL);
	assert_int_equal(cbcmn_metrics_port(NULL), -EINVAL);
	t_run(rt, serve_from_task, NULL, -EDEADLK);
	t_run(rt, serve_ex_from_task, NULL, -EDEADLK);
	t_run(rt, serve_from_blocking_pool, NULL, -EDEADLK);
	assert_int_equal(cbcmn_metrics_serve(rt, "127.0.0.1", 0, &ms), 0);
	cbcmn_metrics_server *ms2 = NULL;
	assert_int_equal(cbcmn_metrics_serve(rt, "127.0.0.1", (uint16_t)cbcmn_metrics_port(ms), &ms2),
			 -EADDRINUSE);
	/* IPv6 where the machine has it. */
	int rc = cbcmn_metrics_serve(rt, "::1", 0, &ms2);
	if (rc == 0)
		assert_int_equal(cbcmn_metrics_stop(ms2), 0);
	else if (rc != -EADDRNOTAVAIL && rc != -EAFNOSUPPORT)
		fail_msg("serving on ::1: %s", cbcmn_strerror(rc));
	t_run(rt, stop_from_task, ms, -EDEADLK);
	assert_int_equal(cbcmn_metrics_stop(ms), 0);

	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.profile = CBCMN_PROFILE_CORE;
	cbcmn_runtime *core = t_runtime_cfg(&cfg);
	assert_int_equal(cbcmn_metrics_serve(core, NULL, 0, &ms), CBCMN_ENOSCHED);
	t_destroy(core);
	t_destroy(rt);
}

/* GET path: want, once the connections before it have ended (a slot is
 * free only when the task of the last one has ended, a moment after its
 * client saw it close; until then 503). */
static void expect_once_free(int port, const char *path, const char *extra_headers, int want)
{
	uint64_t t0 = t_now_ns();
	for (int st = 0; st != want; usleep(10000)) {
		struct reply r = get(port, path, extra_headers);
		st = r.status;
		reply_free(&r);
		if (st != want && st != 503)
			fail_msg("GET %s: %d, not %d", path, st, want);
		assert_true(t_now_ns() - t0 < T_STALL_NS);
	}
}

/* cbcmn_metrics_serve_ex(): the public options set the limits.  One
 * client at most (a second gets 503 until the first has gone), a request
 * buffer of 64 bytes (a longer head gets 431); opts NULL serves with the
 * defaults. */
static void test_serve_ex_options_set_the_limits(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_metrics_opts o = {.size = sizeof(o), .addr = "127.0.0.1", .max_clients = 1,
				.max_request = 64, .timeout_ns = T_STALL_NS};
	cbcmn_metrics_server *ms = NULL;
	assert_int_equal(cbcmn_metrics_serve_ex(rt, &o, &ms), 0);
	int port = cbcmn_metrics_port(ms);
	int a = dial(port);
	expect(port, "/metrics", "", 503);
	close(a);
	expect_once_free(port, "/metrics", "", 200);
	expect_once_free(port, "/metrics", "X-Padding: 0123456789012345678901234567890123456789\r\n", 431);
	assert_int_equal(cbcmn_metrics_stop(ms), 0);
	assert_int_equal(cbcmn_metrics_serve_ex(rt, NULL, &ms), 0);
	expect(cbcmn_metrics_port(ms), "/metrics", "", 200);
	stop_and_destroy(ms, rt);
}

/* Options the library does not know, or limits out of their range, are
 * refused with nothing started. */
static void test_serve_ex_refuses_bad_options(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	static const cbcmn_metrics_opts bad[] = {
		{.size = 0},
		{.size = sizeof(cbcmn_metrics_opts) - 1},
		{.size = sizeof(cbcmn_metrics_opts) + 8},
		{.size = sizeof(cbcmn_metrics_opts), .timeout_ns = 3601ull * 1000000000},
		{.size = sizeof(cbcmn_metrics_opts), .max_clients = 65537},
		{.size = sizeof(cbcmn_metrics_opts), .max_request = 63},
		{.size = sizeof(cbcmn_metrics_opts), .max_request = (1u << 20) + 1},
		{.size = sizeof(cbcmn_metrics_opts), .addr = "localhost"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cbcmn_metrics_server *ms = NULL;
		if (cbcmn_metrics_serve_ex(rt, &bad[i], &ms) != -EINVAL || ms)
			fail_msg("options %zu were not refused", i);
	}
	cbcmn_metrics_opts o = {.size = sizeof(o)};
	assert_int_equal(cbcmn_metrics_serve_ex(rt, &o, NULL), -EINVAL);
	assert_int_equal(cbcmn_metrics_serve_ex(NULL, &o, NULL), -EINVAL);
	t_destroy(rt);
}

/* ---- the actors' figures and the executors' threads ---------------------------------- */

static int64_t receiver(cbcmn_cx *cx, void *arg)
{
	cbcmn_actor_msg m;
	while (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0)
		;
	return 0;
}

static int64_t sleeper(cbcmn_cx *cx, void *arg)
{
	cbcmn_sleep(cx, 1000ull * T_STALL_NS); /* until its nursery is cancelled */
	return 0;
}

/* Three actors blocked in a receive and one asleep with two messages in
 * its mailbox of two: a scrape (OpenMetrics) shows them per executor by
 * state, the receiving ones, the mailbox's depth, and the executor's
 * thread id; a third message refused (back-pressure of a thread outside)
 * and one received (the depth p99) show too. */
static void test_scrape_shows_actors_and_thread_ids(void **state)
{
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_metrics_server *ms = serve(rt, NULL);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	cbcmn_actor_ref a[4];
	for (int i = 0; i < 3; i++)
		assert_int_equal(cbcmn_actor_spawn(NULL, n, receiver, NULL, NULL, &a[i]), 0);
	cbcmn_actor_opts two = {.mailbox_cap = 2};
	assert_int_equal(cbcmn_actor_spawn(NULL, n, sleeper, NULL, &two, &a[3]), 0);
	cbcmn_actor_msg m = {.type = 1};
	assert_int_equal(cbcmn_actor_try_send(rt, NULL, a[3], &m), 0);
	assert_int_equal(cbcmn_actor_try_send(rt, NULL, a[3], &m), 0);
	assert_int_equal(cbcmn_actor_try_send(rt, NULL, a[3], &m), -EAGAIN);
	assert_int_equal(cbcmn_actor_try_send(rt, NULL, a[0], &m), 0);
	/* Until all four have blocked (nothing moves after that). */
	cbcmn_stats st;
	cbcmn_executor_stats per;
	uint64_t t0 = t_now_ns();
	for (;;) {
		assert_int_equal(cbcmn_stats_snapshot(rt, &st, &per, 1), 0);
		if (per.actors_waiting == 4 && per.actors_receiving == 3 && per.mailbox_depth_hist[0] == 1)
			break;
		assert_true(t_now_ns() - t0 < T_STALL_NS);
		usleep(1000);
	}
	struct reply r = get(cbcmn_metrics_port(ms), "/metrics",
			     "Accept: application/openmetrics-text; version=1.0.0\r\n");
	assert_int_equal(r.status, 200);
	static struct parsed p;
	parse(r.body, true, &p);
	uint32_t id = st.runtime_id;
	assert_true(value(&p, "cbcmn_actors{runtime=\"%u\",executor=\"0\"}", id) == 4);
	static const struct {
		const char *state;
		double want;
	} by[] = {{"runnable", 0}, {"running", 0}, {"waiting", 4}, {"halting", 0}};
	for (size_t i = 0; i < 4; i++)
		if (value(&p, "cbcmn_actors_by_state{runtime=\"%u\",executor=\"0\",state=\"%s\"}", id,
			  by[i].state) != by[i].want)
			fail_msg("actors %s: not %g", by[i].state, by[i].want);
	assert_true(value(&p, "cbcmn_actors_receiving{runtime=\"%u\",executor=\"0\"}", id) == 3);
	assert_true(value(&p, "cbcmn_actor_mailbox_messages{runtime=\"%u\",executor=\"0\"}", id) == 2);
	assert_true(value(&p, "cbcmn_actor_migrations_total{runtime=\"%u\",executor=\"0\"}", id) == 0);
	assert_true(value(&p, "cbcmn_actor_restarts_total{runtime=\"%u\",executor=\"0\"}", id) == 0);
	assert_true(value(&p, "cbcmn_actor_backpressure_total{runtime=\"%u\",executor=\"0\"}", id) == 0);
	assert_true(value(&p, "cbcmn_external_actor_backpressure_total{runtime=\"%u\"}", id) == 1);
	assert_true(value(&p, "cbcmn_actor_mailbox_depth_p99{runtime=\"%u\",executor=\"0\"}", id) == 1);
	assert_true(per.tid > 0);
	assert_true(value(&p, "cbcmn_executor_info{runtime=\"%u\",executor=\"0\",cpu=\"%d\","
			      "node=\"%d\",tid=\"%d\"}",
			  id, (int)per.cpu, (int)per.node, (int)per.tid) == 1);
	reply_free(&r);
	cbcmn_nursery_cancel(n);
	cbcmn_nursery_await_all(NULL, n);
	stop_and_destroy(ms, rt);
}

/* cbcmn_metrics_format() sizes as snprintf() does: a short buffer gets
 * the start of the text, NUL-terminated, and the whole length. */
static void test_format_is_sized_like_snprintf(void **state)
{
	cbcmn_stats st = {.executors = 1, .runtime_id = 7, .tasks_spawned = 1ull << 60};
	cbcmn_executor_stats per = {.tasks_run = 3, .busy_pct = 50, .cpu = -1, .node = -1};
	cbcmn_metrics_source src = {&st, &per, 1};
	int64_t len = cbcmn_metrics_format(&src, 1, 0, NULL, 0);
	assert_true(len > 1000);
	char *full = malloc((size_t)len + 1), small[100];
	assert_non_null(full);
	assert_int_equal(cbcmn_metrics_format(&src, 1, 0, full, (size_t)len + 1), len);
	assert_int_equal(strlen(full), (size_t)len);
	assert_int_equal(cbcmn_metrics_format(&src, 1, 0, small, sizeof(small)), len);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_memory_equal(small, full, sizeof(small) - 1);
	static struct parsed p;
	parse(full, false, &p);
	assert_true(value(&p, "cbcmn_tasks_spawned_total{runtime=\"7\"}") == (double)(1ull << 60));
	assert_non_null(strstr(full, "\ncbcmn_tasks_spawned_total{runtime=\"7\"} 1152921504606846976\n"));
	assert_true(value(&p, "cbcmn_busy_ratio{runtime=\"7\",executor=\"0\"}") == 0.5);
	free(full);
	/* No sources: the families alone. */
	assert_true(cbcmn_metrics_format(NULL, 0, CBCMN_METRICS_OPENMETRICS, NULL, 0) > 0);
	assert_int_equal(cbcmn_metrics_format(NULL, 1, 0, NULL, 0), -EINVAL);
	assert_int_equal(cbcmn_metrics_format(&src, 1, 0, NULL, 10), -EINVAL);
	assert_int_equal(cbcmn_metrics_format(&src, 1, 0x2, NULL, 0), -EINVAL);
	src.nper = 2; /* more than the runtime has */
	assert_int_equal(cbcmn_metrics_format(&src, 1, 0, NULL, 0), -EINVAL);
	src = (cbcmn_metrics_source){&st, NULL, 1};
	assert_int_equal(cbcmn_metrics_format(&src, 1, 0, NULL, 0), -EINVAL);
}

/* A refused connection's number is kept as the reserve, the listening
 * socket dup'ed over it: a second descriptor of that socket.  An
 * acceptor that ended (here on an accept error that is not passing)
 * closed only the first, and the port went on taking connections into
 * its backlog, answered by no one, until stop. */
static void test_ended_acceptor_closes_a_reserve_dup_of_the_socket(void **state)
{
	SKIP_WITHOUT_FAULTS();
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_metrics_server *ms;
	char buf[256];
	ssize_t n = scrape_out_of_descriptors(rt, &ms, buf, sizeof(buf));
	assert_true(n > 0 && strstr(buf, "HTTP/1.1 503")); /* refused: the reserve is the dup */
	int port = cbcmn_metrics_port(ms);
	/* Every I/O call fails for good: the next connection's accept ends
	 * the acceptor. */
	struct cbcmn__fault_plan plan = {.nth = 1, .every = 1, .err = -EBADF};
	assert_true(cbcmn__fault_arm(CBCMN__F_IO, &plan));
	int d = dial(port);
	close(d);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bool refused = false;
	for (uint64_t t0 = t_now_ns(); !refused && t_now_ns() - t0 < T_STALL_NS; usleep(1000)) {
		int k = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(k >= 0);
		refused = connect(k, (struct sockaddr *)&a, sizeof(a)) && errno == ECONNREFUSED;
		close(k);
	}
	cbcmn__fault_disarm_all();
	assert_true(refused);
	stop_and_destroy(ms, rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_scrape_parses_and_matches_snapshots),
		T_WATCHED_TEST(test_scrape_on_epoll_backend),
		T_WATCHED_TEST(test_openmetrics_when_accepted),
		T_WATCHED_TEST(test_other_requests_get_their_status),
		T_WATCHED_TEST(test_silent_client_does_not_stop_scrapes),
		T_WATCHED_TEST(test_trickling_client_is_cut_at_the_deadline),
		T_WATCHED_TEST(test_request_sent_a_byte_at_a_time_is_answered),
		T_WATCHED_TEST(test_clients_over_the_limit_get_503),
		T_WATCHED_TEST(test_concurrent_scrapers),
		T_WATCHED_TEST(test_stop_while_a_client_is_connected),
		T_WATCHED_TEST(test_destroy_with_the_server_running),
		T_WATCHED_TEST(test_stop_closes_a_connection_accepted_as_it_began),
		T_WATCHED_TEST(test_busy_destroy_keeps_the_server),
		T_WATCHED_TEST(test_destroy_look_ignores_a_scrape_inside_it),
		T_WATCHED_TEST(test_out_of_descriptors_answers_503_then_serves),
		T_WATCHED_TEST(test_out_of_descriptors_keeps_the_reserve),
		T_WATCHED_TEST(test_a_lost_reserve_is_taken_again_once_descriptors_are_free),
		T_WATCHED_TEST(test_stop_right_after_serve),
		T_WATCHED_TEST(test_default_address_is_loopback),
		T_WATCHED_TEST(test_serves_under_every_profile),
		T_WATCHED_TEST(test_serves_with_the_smallest_stacks),
		T_WATCHED_TEST(test_client_gone_before_the_answer),
		T_WATCHED_TEST(test_stop_in_a_forked_child_is_eforked),
		T_WATCHED_TEST(test_network_accept_error_does_not_end_serving),
		T_WATCHED_TEST(test_failed_allocation_costs_one_scrape_at_most),
		T_WATCHED_TEST(test_serve_with_failing_allocations),
		T_WATCHED_TEST(test_bad_calls),
		T_WATCHED_TEST(test_serve_ex_options_set_the_limits),
		T_WATCHED_TEST(test_serve_ex_refuses_bad_options),
		T_WATCHED_TEST(test_scrape_shows_actors_and_thread_ids),
		T_WATCHED_TEST(test_format_is_sized_like_snprintf),
		T_WATCHED_TEST(test_ended_acceptor_closes_a_reserve_dup_of_the_socket),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
