/* test_examples: every program under examples/ runs and says what it
 * should: fork_join's and pipeline's sums, supervised's answers through a
 * worker that crashes and is restarted, echo_server's echoes to three
 * clients at once, http_server's answers (pipelined, keep-alive, errors)
 * and every response of a 2-second wrk load, tls_echo's echoes over TLS
 * (a throwaway certificate from the openssl CLI), each server ending by
 * itself after --exit-after N connections; and bad arguments, a port in
 * use or a missing certificate make each print one line on stderr and exit
 * non-zero.  The examples are those of this suite's build
 * (build[/SAN]/examples), as make builds them. */
#include "helpers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

extern char **environ;

static char exdir[PATH_MAX]; /* build[/SAN]/examples beside this suite */

static int find_examples(void **state)
{
	(void)state;
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -1;
	exe[n] = 0;
	snprintf(exdir, sizeof(exdir), "%.*s/../examples", (int)(sizeof(exdir) - 16), dirname(exe));
	return 0;
}

/* A running example: its pid and the read ends of its stdout and stderr. */
struct proc {
	pid_t pid;
	int out, err;
};

static void start(struct proc *p, const char *name, const char *const *args)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s", exdir, name);
	if (access(path, X_OK) != 0)
		fail_msg("%s is not built (make examples)", path);
	char *argv[16] = {path};
	int argc = 1;
	for (; args[argc - 1] && argc < 15; argc++)
		argv[argc] = (char *)args[argc - 1];
	argv[argc] = NULL;
	int o[2], e[2];
	assert_int_equal(pipe2(o, O_CLOEXEC), 0);
	assert_int_equal(pipe2(e, O_CLOEXEC), 0);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, o[1], 1);
	posix_spawn_file_actions_adddup2(&fa, e[1], 2);
	assert_int_equal(posix_spawn(&p->pid, path, &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	close(o[1]);
	close(e[1]);
	p->out = o[0];
	p->err = e[0];
}

/* Read fd into buf (NUL-terminated) until EOF, or up to a first newline
 * if line; false on time-out (T_STALL_S). */
static bool slurp(int fd, char *buf, size_t cap, bool line)
{
	size_t len = 0;
	uint64_t end = t_now_ns() + T_STALL_NS;
	buf[0] = 0;
	while (len < cap - 1) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		uint64_t now = t_now_ns();
		if (now >= end || poll(&pf, 1, (int)((end - now) / 1000000) + 1) < 0)
			return false;
		if (!pf.revents)
			continue;
		ssize_t n = read(fd, buf + len, line ? 1 : cap - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		buf[len] = 0;
		if (line && buf[len - 1] == '\n')
			break;
	}
	return true;
}

/* Wait for p to end (T_STALL_S at most: else kill it and fail); its exit
 * code, what it printed (the rest of it) in out and err. */
static int finish(struct proc *p, char *out, size_t outcap, char *err, size_t errcap)
{
	bool ok = slurp(p->out, out, outcap, false) && slurp(p->err, err, errcap, false);
	int st = 0;
	uint64_t end = t_now_ns() + T_STALL_NS;
	pid_t w;
	while ((w = waitpid(p->pid, &st, WNOHANG)) == 0 && t_now_ns() < end) {
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
	}
	close(p->out);
	close(p->err);
	if (w != p->pid || !ok) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, &st, 0);
		fail_msg("the example did not end in %u s", T_STALL_S);
	}
	if (!WIFEXITED(st))
		fail_msg("the example died of signal %d; stderr: %s", WTERMSIG(st), err);
	return WEXITSTATUS(st);
}

/* Run an example to its end: its exit code, stdout and stderr. */
static int run(const char *name, const char *const *args, char *out, size_t outcap, char *err,
	       size_t errcap)
{
	struct proc p;
	start(&p, name, args);
	return finish(&p, out, outcap, err, errcap);
}

/* A server started with port 0: the port its first line names. */
static int server_port(struct proc *p, const char *name)
{
	char line[256], want[64];
	assert_true(slurp(p->out, line, sizeof(line), true));
	snprintf(want, sizeof(want), "%s: listening on 127.0.0.1:", name);
	if (strncmp(line, want, strlen(want)))
		fail_msg("%s's first line: '%s'", name, line);
	int port = atoi(line + strlen(want));
	assert_true(port > 0 && port < 65536);
	return port;
}

static int connect_to(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	struct timeval tv = {T_STALL_S, 0}; /* a hang fails, it does not block */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* ---- compute examples ------------------------------------------------------ */

static void test_fork_join_prints_the_sum(void **state)
{
	(void)state;
	char out[256], err[256];
	assert_int_equal(run("fork_join", (const char *[]){"100000", "7", NULL}, out, sizeof(out),
			     err, sizeof(err)), 0);
	assert_string_equal(out, "sum of 1..100000 in 7 tasks = 5000050000\n");
	assert_string_equal(err, "");
	/* More tasks than numbers: one each. */
	assert_int_equal(run("fork_join", (const char *[]){"3", "1024", NULL}, out, sizeof(out), err,
			     sizeof(err)), 0);
	assert_string_equal(out, "sum of 1..3 in 3 tasks = 6\n");
}

static void test_pipeline_prints_the_sum_of_squares(void **state)
{
	(void)state;
	char out[256], err[256];
	assert_int_equal(run("pipeline", (const char *[]){"1000", NULL}, out, sizeof(out), err,
			     sizeof(err)), 0);
	assert_string_equal(out, "1000 squares of 1..1000, sum = 333833500\n");
	assert_string_equal(err, "");
}

/* Every request answered once through a worker that crashes on each
 * request ending in 7 (so 10 restarts for 100, 1 for 7), the store's total
 * the answers' sum, and the tree stopped dependents first: the program
 * checks all of it and says so on stdout. */
static void test_supervised_answers_through_crashes(void **state)
{
	(void)state;
	char out[512], err[256];
	assert_int_equal(run("supervised", (const char *[]){NULL}, out, sizeof(out), err, sizeof(err)),
			 0);
	assert_string_equal(out, "supervised: stopped front, worker, store (dependents first)\n"
				 "supervised: 100 requests answered, sum of squares 338350, store total 338350\n"
				 "supervised: worker crashes 10, supervisor restarts 10\n");
	assert_string_equal(err, "");
	assert_int_equal(run("supervised", (const char *[]){"7", NULL}, out, sizeof(out), err,
			     sizeof(err)), 0);
	assert_string_equal(out, "supervised: stopped front, worker, store (dependents first)\n"
				 "supervised: 7 requests answered, sum of squares 140, store total 140\n"
				 "supervised: worker crashes 1, supervisor restarts 1\n");
}

/* ---- echo_server ------------------------------------------------------------ */

/* Three clients at once, each several messages (one of 64 KiB, more than
 * a socket buffer); the server ends by itself after the third. */
static void test_echo_server_echoes_and_exits_after_n(void **state)
{
	(void)state;
	struct proc p;
	start(&p, "echo_server", (const char *[]){"0", "--exit-after", "3", NULL});
	int port = server_port(&p, "echo_server");
	int fd[3];
	for (int i = 0; i < 3; i++)
		fd[i] = connect_to(port);
	static char big[65536], back[65536];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)('a' + i % 26);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 3; i++) {
			size_t len = round == 1 && i == 0 ? sizeof(big) : (size_t)(10 + i + round);
			big[0] = (char)('0' + i);
			assert_int_equal(send(fd[i], big, len, MSG_NOSIGNAL), (ssize_t)len);
			size_t got = 0;
			while (got < len) {
				ssize_t n = recv(fd[i], back + got, len - got, 0);
				assert_true(n > 0);
				got += (size_t)n;
			}
			assert_memory_equal(back, big, len);
		}
	}
	for (int i = 0; i < 3; i++)
		close(fd[i]);
	char out[256], err[256];
	assert_int_equal(finish(&p, out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, "echo_server: served 3 connections\n");
	assert_string_equal(err, "");
}

/* ---- http_server ------------------------------------------------------------ */

#define HELLO "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\r\nHello, world!\n"

/* Send req on a new connection and read until the server closes it. */
static void exchange(int port, const char *req, char *resp, size_t cap)
{
	int fd = connect_to(port);
	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	size_t len = 0;
	ssize_t n;
	while (len < cap - 1 && (n = recv(fd, resp + len, cap - 1 - len, 0)) > 0)
		len += (size_t)n;
	resp[len] = 0;
	close(fd);
}

/* Pipelined requests answered in order on one connection (a HEAD, a 404,
 * one with a body, then one that closes); a request it cannot parse gets
 * 400 and the connection closes. */
static void test_http_server_answers(void **state)
{
	(void)state;
	struct proc p;
	start(&p, "http_server", (const char *[]){"0", "--exit-after", "3", NULL});
	int port = server_port(&p, "http_server");
	char resp[4096];
	exchange(port,
		 "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
		 "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n"
		 "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
		 "GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
		 "POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\nhi"
		 "GET / HTTP/1.1\r\nConnection: close\r\n\r\n"
		 "GET / HTTP/1.1\r\n\r\n", /* after the close: never answered */
		 resp, sizeof(resp));
	assert_string_equal(resp,
			    HELLO
			    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n\r\n"
			    "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\nnot found\n"
			    HELLO
			    "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain\r\nContent-Length: 17\r\n\r\nGET or HEAD only\n"
			    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\nConnection: close\r\n\r\nHello, world!\n");
	exchange(port, "HELLO\r\n\r\n", resp, sizeof(resp));
	assert_string_equal(resp, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n"
				  "Content-Length: 12\r\nConnection: close\r\n\r\nbad request\n");
	/* HTTP/1.0 closes unless asked to keep alive. */
	exchange(port, "GET / HTTP/1.0\r\n\r\n", resp, sizeof(resp));
	assert_string_equal(resp, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n"
				  "Connection: close\r\n\r\nHello, world!\n");
	char out[256], err[256];
	assert_int_equal(finish(&p, out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, "http_server: served 3 connections\n");
	assert_string_equal(err, "");
}

/* wrk over loopback for 2 s, 4 connections: a Lua script checks every
 * response's status and body; no error of any kind, some requests, and
 * every one of them checked good. */
static const char WRK_LUA[] =
	"local threads = {}\n"
	"function setup(thread) table.insert(threads, thread) end\n"
	"function init(args) good = 0; bad = 0 end\n"
	"function response(status, headers, body)\n"
	"  if status == 200 and body == 'Hello, world!\\n' then good = good + 1 else bad = bad + 1 end\n"
	"end\n"
	"function done(summary, latency, requests)\n"
	"  local g, b = 0, 0\n"
	"  for _, t in ipairs(threads) do g = g + t:get('good'); b = b + t:get('bad') end\n"
	"  io.write(string.format('checked: %d good, %d bad, %d requests, %d errors\\n', g, b,\n"
	"    summary.requests, summary.errors.connect + summary.errors.read + summary.errors.write +\n"
	"    summary.errors.status + summary.errors.timeout))\n"
	"end\n";

static const char *which_wrk(void)
{
	static const char *const dirs[] = {"/usr/bin/wrk", "/usr/local/bin/wrk"};
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (access(dirs[i], X_OK) == 0)
			return dirs[i];
	return NULL;
}

static void test_http_server_under_wrk(void **state)
{
	(void)state;
	const char *wrk = which_wrk();
	if (!wrk) {
		T_SKIP("wrk is not installed (Debian package wrk; scripts/install-deps.sh)");
		return;
	}
	char lua[] = "/tmp/cbcmn-wrk-XXXXXX.lua";
	int lfd = mkstemps(lua, 4);
	assert_true(lfd >= 0);
	assert_int_equal(write(lfd, WRK_LUA, sizeof(WRK_LUA) - 1), (ssize_t)sizeof(WRK_LUA) - 1);
	close(lfd);

	struct proc srv;
	start(&srv, "http_server", (const char *[]){"0", "--exit-after", "50", NULL});
	int port = server_port(&srv, "http_server");
	char url[64], timeout[16];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
	snprintf(timeout, sizeof(timeout), "%us", T_STALL_S);
	char *argv[] = {(char *)wrk, "-t1", "-c4", "-d2s", "--timeout", timeout, "-s", lua, url, NULL};
	int o[2];
	assert_int_equal(pipe2(o, O_CLOEXEC), 0);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, o[1], 1);
	posix_spawn_file_actions_adddup2(&fa, o[1], 2);
	pid_t pid;
	assert_int_equal(posix_spawn(&pid, wrk, &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	close(o[1]);
	char report[8192];
	bool ended = slurp(o[0], report, sizeof(report), false);
	close(o[0]);
	int st;
	if (!ended)
		kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	unlink(lua);
	printf("%s", report);
	assert_true(ended);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_null(strstr(report, "Non-2xx"));
	assert_null(strstr(report, "Socket errors"));
	const char *c = strstr(report, "checked: ");
	assert_non_null(c);
	long good, bad, requests, errors;
	assert_int_equal(sscanf(c, "checked: %ld good, %ld bad, %ld requests, %ld errors", &good, &bad,
				&requests, &errors), 4);
	assert_true(requests > 0);
	assert_int_equal(bad, 0);
	assert_int_equal(errors, 0);
	assert_int_equal(good, requests);

	/* wrk makes a connection of its own before its 4 (wrk 4.1 with a
	 * script): how many it made is not ours to count.  Plain requests,
	 * each answered in full, take the rest of the server's 50; the one
	 * after them finds it ending (refused, reset or closed unanswered). */
	int answered = 0;
	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		assert_true(fd >= 0);
		struct timeval tv = {T_STALL_S, 0};
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		static const char req[] = "GET / HTTP/1.1\r\nConnection: close\r\n\r\n";
		char resp[512];
		size_t len = 0;
		ssize_t n;
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		    send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(req) - 1)
			while (len < sizeof(resp) - 1 && (n = recv(fd, resp + len, sizeof(resp) - 1 - len, 0)) > 0)
				len += (size_t)n;
		resp[len] = 0;
		close(fd);
		if (!len)
			break;
		assert_string_equal(resp, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 14\r\n"
					  "Connection: close\r\n\r\nHello, world!\n");
		assert_true(++answered < 50);
	}
	assert_true(answered > 0);
	char out[256], err[256];
	assert_int_equal(finish(&srv, out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, "http_server: served 50 connections\n");
	assert_string_equal(err, "");
}

/* A NUL byte inside a header line: the header scan walked from line to
 * line with strstr(), which stops at the NUL, and stepped past a NULL (the
 * server died of SIGSEGV).  Now the request is answered, and the server
 * goes on to the next connection. */
static void test_http_server_survives_a_nul_in_a_header(void **state)
{
	(void)state;
	struct proc p;
	start(&p, "http_server", (const char *[]){"0", "--exit-after", "2", NULL});
	int port = server_port(&p, "http_server");
	static const char req[] = "GET / HTTP/1.1\r\nHost: a\0b\r\nConnection: close\r\n\r\n";
	int fd = connect_to(port);
	assert_int_equal(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
	char resp[512];
	ssize_t n = recv(fd, resp, sizeof(resp) - 1, 0);
	close(fd);
	assert_true(n > 0);
	resp[n] = 0;
	assert_non_null(strstr(resp, "HTTP/1.1 "));
	exchange(port, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n", resp, sizeof(resp));
	assert_non_null(strstr(resp, "\r\n\r\nHello, world!\n"));
	char out[256], err[256];
	assert_int_equal(finish(&p, out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, "http_server: served 2 connections\n");
}

/* A NUL byte in the request line: the server looked for the line's end
 * with strstr(), which stops at the NUL, and took the headers from 2 past
 * its NULL (the server died of SIGSEGV at the first such request).  Now
 * it is a 400 that closes the connection, and the server goes on. */
static void test_http_server_survives_a_nul_in_the_request_line(void **state)
{
	(void)state;
	struct proc p;
	start(&p, "http_server", (const char *[]){"0", "--exit-after", "3", NULL});
	int port = server_port(&p, "http_server");
	static const char *const reqs[] = {"G\0T / HTTP/1.1\r\nHost: a\r\n\r\n",
					   "GET / HTTP/1.1\0\r\n\r\n"};
	static const size_t lens[] = {sizeof("G\0T / HTTP/1.1\r\nHost: a\r\n\r\n") - 1,
				      sizeof("GET / HTTP/1.1\0\r\n\r\n") - 1};
	char resp[512];
	for (int i = 0; i < 2; i++) {
		int fd = connect_to(port);
		assert_int_equal(send(fd, reqs[i], lens[i], MSG_NOSIGNAL), (ssize_t)lens[i]);
		size_t len = 0;
		ssize_t n;
		while (len < sizeof(resp) - 1 && (n = recv(fd, resp + len, sizeof(resp) - 1 - len, 0)) > 0)
			len += (size_t)n;
		resp[len] = 0;
		close(fd);
		if (strncmp(resp, "HTTP/1.1 400 Bad Request\r\n", 26))
			fail_msg("request %d: '%s'", i, resp);
	}
	exchange(port, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n", resp, sizeof(resp));
	assert_non_null(strstr(resp, "\r\n\r\nHello, world!\n"));
	char out[256], err[256];
	assert_int_equal(finish(&p, out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, "http_server: served 3 connections\n");
}

/* Out of descriptors (RLIMIT_NOFILE 48 and 4 for each executor's ring,
 * eventfd and the like; 16 more clients than that at once): an accept's
 * EMFILE ended the accept loop, and the server stopped serving for good
 * (it answered the connections it had and exited 1).  Now it pauses and
 * accepts again: every client is answered once others have gone. */
static void test_http_server_survives_running_out_of_descriptors(void **state)
{
	(void)state;
	struct rlimit old, low;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	int limit = 48 + 4 * get_nprocs(), n_clients = limit + 16;
	char exit_after[16];
	snprintf(exit_after, sizeof(exit_after), "%d", n_clients + 1);
	low = (struct rlimit){(rlim_t)limit, old.rlim_max};
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0); /* the child inherits it */
	struct proc p;
	start(&p, "http_server", (const char *[]){"0", "--exit-after", exit_after, NULL});
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	int port = server_port(&p, "http_server");
	int N = n_clients, *fd = calloc((size_t)N, sizeof(int));
	assert_non_null(fd);
	static const char req[] = "GET / HTTP/1.1\r\n\r\n";
	for (int i = 0; i < N; i++) {
		fd[i] = connect_to(port);
		assert_int_equal(send(fd[i], req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
	}
	/* In order: the first ones were accepted; the later ones wait in
	 * the backlog until the first ones close. */
	for (int i = 0; i < N; i++) {
		char resp[512] = "";
		size_t len = 0;
		ssize_t n;
		while (!strstr(resp, "Hello, world!\n") && len < sizeof(resp) - 1 &&
		       (n = recv(fd[i], resp + len, sizeof(resp) - 1 - len, 0)) > 0) {
			len += (size_t)n;
			resp[len] = 0;
		}
		resp[len] = 0;
		if (!strstr(resp, "Hello, world!\n"))
			fail_msg("client %d of %d: no answer ('%s')", i, N, resp);
		close(fd[i]);
	}
	free(fd);
	char resp[512];
	exchange(port, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n", resp, sizeof(resp));
	assert_non_null(strstr(resp, "Hello, world!\n"));
	char out[256], err[256], want[64];
	assert_int_equal(finish(&p, out, sizeof(out), err, sizeof(err)), 0);
	snprintf(want, sizeof(want), "http_server: served %d connections\n", n_clients + 1);
	assert_string_equal(out, want);
}

/* ---- tls_echo --------------------------------------------------------------- */

/* A throwaway self-signed certificate and key (P-256: quick to make) in
 * dir; false if the openssl CLI is not there. */
static bool make_cert(const char *dir)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		 "-keyout '%s/key.pem' -out '%s/cert.pem' -days 1 -subj /CN=localhost "
		 "-addext subjectAltName=DNS:localhost >/dev/null 2>&1",
		 dir, dir);
	return system(cmd) == 0;
}

/* One TLS client: the handshake (the certificate verified against the
 * throwaway one, for the name localhost), then messages echoed back. */
static void tls_client(SSL_CTX *ctx, int port, int id)
{
	int fd = connect_to(port);
	SSL *ssl = SSL_new(ctx);
	assert_non_null(ssl);
	SSL_set_fd(ssl, fd);
	SSL_set1_host(ssl, "localhost");
	SSL_set_tlsext_host_name(ssl, "localhost");
	if (SSL_connect(ssl) != 1) {
		char e[256];
		ERR_error_string_n(ERR_get_error(), e, sizeof(e));
		fail_msg("TLS handshake: %s", e);
	}
	for (int i = 0; i < 3; i++) {
		char msg[64], back[64];
		int len = snprintf(msg, sizeof(msg), "client %d message %d", id, i);
		assert_int_equal(SSL_write(ssl, msg, len), len);
		int got = 0;
		while (got < len) {
			int n = SSL_read(ssl, back + got, len - got);
			assert_true(n > 0);
			got += n;
		}
		assert_memory_equal(back, msg, (size_t)len);
	}
	SSL_shutdown(ssl);
	SSL_free(ssl);
	close(fd);
}

static void test_tls_echo_echoes_over_tls(void **state)
{
	(void)state;
	char dir[] = "/tmp/cbcmn-tls-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char cert[PATH_MAX], key[PATH_MAX];
	snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
	snprintf(key, sizeof(key), "%s/key.pem", dir);
	if (!make_cert(dir)) {
		rmdir(dir);
		T_SKIP("the openssl command cannot make a certificate (Debian package openssl)");
		return;
	}
	struct proc p;
	start(&p, "tls_echo", (const char *[]){"0", cert, key, "--exit-after", "3", NULL});
	int port = server_port(&p, "tls_echo");
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	assert_non_null(ctx);
	assert_int_equal(SSL_CTX_load_verify_locations(ctx, cert, NULL), 1);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	tls_client(ctx, port, 1);
	tls_client(ctx, port, 2);
	/* A client that is no TLS client: its connection fails alone. */
	char resp[256];
	exchange(port, "GET / HTTP/1.1\r\n\r\n", resp, sizeof(resp));
	SSL_CTX_free(ctx);
	char out[256], err[256];
	int rc = finish(&p, out, sizeof(out), err, sizeof(err));
	unlink(cert);
	unlink(key);
	rmdir(dir);
	assert_int_equal(rc, 0);
	assert_string_equal(out, "tls_echo: served 3 connections\n");
	assert_string_equal(err, "");
}

/* ---- bad input -------------------------------------------------------------- */

/* name with args: exit code != 0, one line on stderr, nothing on stdout. */
static void rejects(const char *name, const char *const *args)
{
	char out[1024], err[1024];
	int rc = run(name, args, out, sizeof(out), err, sizeof(err));
	if (rc == 0 || strcmp(out, "") || !err[0] || strchr(err, '\n') != err + strlen(err) - 1)
		fail_msg("%s %s ...: exit %d, stdout '%s', stderr '%s'", name, args[0] ? args[0] : "", rc,
			 out, err);
}

/* Each program's own parser, every way it can be wrong.  A sanitizer
 * build takes half a second to start a process here: there the first case
 * of each program only (the parsers are the same code). */
struct bad {
	const char *name;
	const char *args[6];
};

static const struct bad BAD[] = {
	{"fork_join", {"x"}},
	{"pipeline", {"12abc"}},
	{"echo_server", {NULL}},
	{"http_server", {"0", "--exit-after", "0"}},
	{"tls_echo", {"0", "/nonexistent/cert.pem", "/nonexistent/key.pem"}},
	{"supervised", {"0"}},
	/* The rest: release builds only. */
	{"fork_join", {"0"}},
	{"fork_join", {"10", "0"}},
	{"fork_join", {"10", "5000"}},
	{"fork_join", {"99999999999999999999"}},
	{"fork_join", {"1", "2", "3"}},
	{"pipeline", {"-5"}},
	{"pipeline", {"1", "2"}},
	{"echo_server", {"70000"}},
	{"echo_server", {"-1"}},
	{"echo_server", {"0", "--exit-after"}},
	{"echo_server", {"0", "--exit-after", "0"}},
	{"echo_server", {"0", "--exit-after", "-3"}},
	{"echo_server", {"0", "--bogus", "3"}},
	{"echo_server", {"0", "extra"}},
	{"http_server", {NULL}},
	{"http_server", {"http"}},
	{"http_server", {"0", "--exit-after"}},
	{"http_server", {"0", "--exit-after", "1x"}},
	{"tls_echo", {"0"}},
	{"tls_echo", {"0", "cert.pem"}},
	{"tls_echo", {"0", "/dev/null", "/dev/null"}},
	{"tls_echo", {"0", "a", "b", "--exit-after", "x"}},
	{"supervised", {"1001"}},
	{"supervised", {"1", "2"}},
	{"supervised", {"ten"}},
};

static void test_examples_reject_bad_arguments(void **state)
{
	(void)state;
	size_t n = T_ASAN || T_TSAN ? 6 : sizeof(BAD) / sizeof(BAD[0]);
	for (size_t i = 0; i < n; i++)
		rejects(BAD[i].name, BAD[i].args);
}

/* A port another socket holds: one line naming it, exit 1, for each server. */
static void test_servers_report_a_port_in_use(void **state)
{
	(void)state;
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(ls, 1), 0);
	assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &al), 0);
	char port[16];
	snprintf(port, sizeof(port), "%d", ntohs(a.sin_port));
	static const char *const servers[] = {"echo_server", "http_server"};
	for (size_t i = 0; i < 2; i++) {
		char out[256], err[256];
		assert_int_equal(run(servers[i], (const char *[]){port, NULL}, out, sizeof(out), err,
				     sizeof(err)), 1);
		assert_string_equal(out, "");
		assert_non_null(strstr(err, "Address already in use\n"));
		assert_ptr_equal(strchr(err, '\n'), err + strlen(err) - 1);
	}
	close(ls);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_fork_join_prints_the_sum),
		T_WATCHED_TEST(test_pipeline_prints_the_sum_of_squares),
		T_WATCHED_TEST(test_supervised_answers_through_crashes),
		T_WATCHED_TEST(test_echo_server_echoes_and_exits_after_n),
		T_WATCHED_TEST(test_http_server_answers),
		T_WATCHED_TEST(test_http_server_under_wrk),
		T_WATCHED_TEST(test_http_server_survives_a_nul_in_a_header),
		T_WATCHED_TEST(test_http_server_survives_a_nul_in_the_request_line),
		T_WATCHED_TEST(test_http_server_survives_running_out_of_descriptors),
		T_WATCHED_TEST(test_tls_echo_echoes_over_tls),
		T_WATCHED_TEST(test_examples_reject_bad_arguments),
		T_WATCHED_TEST(test_servers_report_a_port_in_use),
	};
	return cmocka_run_group_tests(tests, find_examples, NULL);
}
