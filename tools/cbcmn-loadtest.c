/* cbcmn-loadtest: exercises the benchmark baselines in tools/baseline: the
 * epoll echo and HTTP servers under the load client, the doorbell
 * ping-pongs, and the many-connection echo check.
 *
 * Prints one line per figure on stdout, "NAME METRIC VALUE", like
 * cbcmn-bench; failures go to stderr and make the exit status 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "baseline/epoll_echo.h"
#include "net/loadgen.h"
#include "util/maskcpu.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "baseline/pingpong.h"
#include "util/rlim.h"

static const char usage_text[] =
	"usage: cbcmn-loadtest [OPTIONS]\n"
	"  Runs the epoll echo (and HTTP) baseline under the load client, the\n"
	"  MSG_RING and eventfd doorbell ping-pongs, and the many-connection echo\n"
	"  check, and prints the figures.\n"
	"\n"
	"  -d, --duration SECS     load time per server (default 2)\n"
	"  -c, --conns N           load connections (default 50)\n"
	"  -s, --size BYTES        echo message size (default 64)\n"
	"  -p, --pipeline N        requests in flight per connection (default 1)\n"
	"  -t, --threads N         client threads (default 1)\n"
	"  -S, --server-cpu CPU    pin the server thread (default: the first CPU of the\n"
	"                          affinity mask; -1 none)\n"
	"  -C, --client-cpu CPU    pin the client threads (default: its second CPU, the\n"
	"                          first if it has one; -1 none)\n"
	"  -n, --verify-conns N    connections of the echo check (default 10000; 0 skips)\n"
	"  -b, --verify-bytes N    bytes per connection of the check (default 256)\n"
	"  -i, --iters N           ping-pong round trips (default 20000; 0 skips)\n"
	"      --no-http           skip the HTTP baseline\n"
	"  -P, --port PORT         instead of the built-in servers, load the server at\n"
	"                          127.0.0.1:PORT (and check it, unless -n 0)\n"
	"      --proto echo|http   what the server at -P speaks (default echo)\n"
	"  -v, --verbose           ring flags and server counters on stderr\n"
	"  -h, --help\n"
	"\n"
	"EXAMPLES\n"
	"  cbcmn-loadtest                     everything, with the defaults\n"
	"  cbcmn-loadtest -d 0.5 -n 1000 -i 2000   a quick run (sanitizer builds)\n"
	"  cbcmn-loadtest -c 200 -p 4 -n 0 -i 0    echo and HTTP load only\n"
	"  cbcmn-loadtest -P 8080 --proto http     load someone else's HTTP server\n";

static bool verbose;
static int failures;

static void fail(const char *what, int rc, const char *detail)
{
	fprintf(stderr, "cbcmn-loadtest: %s: %s%s%s\n", what, strerror(-rc),
		detail && *detail ? ": " : "", detail ? detail : "");
	failures++;
}

static void print_result(const char *name, const struct lg_result *res)
{
	printf("%s req_per_s %.0f\n", name, res->req_per_s);
	printf("%s p50_us %.1f\n", name, res->p50_us);
	printf("%s p99_us %.1f\n", name, res->p99_us);
	printf("%s max_us %.1f\n", name, res->max_us);
}

/* One server under load: start, drive, stop, print. */
static void load(const char *name, bool http, struct lg_config *cfg, int server_cpu)
{
	struct ee_server *srv;
	struct ee_stats st;
	struct lg_result res;
	int rc = http ? ee_start_http(&srv, 0, server_cpu) : ee_start(&srv, 0, server_cpu);

	if (rc) {
		fail(name, rc, "cannot start the server");
		return;
	}
	cfg->port = ee_port(srv);
	cfg->proto = http ? LG_HTTP : LG_ECHO;
	int lrc = lg_run(cfg, &res);
	rc = ee_stop(srv, &st);
	if (lrc) {
		fail(name, lrc, res.error);
		fprintf(stderr, "  (%llu connections failed)\n", (unsigned long long)res.errors);
		return;
	}
	if (rc) {
		fail(name, rc, "server thread failed");
		return;
	}
	print_result(name, &res);
	/* Per request the client completed in the measured time: the
	 * definition every server is held to, whatever it counts itself. */
	printf("%s server_cpu_us_per_req %.3f\n", name,
	       res.requests ? (double)st.cpu_us / (double)res.requests : 0.0);
	if (verbose)
		fprintf(stderr, "%s: %llu requests in %.2f s; server: %llu conns, %llu requests, "
				"%llu us CPU, %llu errors\n",
			name, (unsigned long long)res.requests, res.seconds,
			(unsigned long long)st.conns, (unsigned long long)st.requests,
			(unsigned long long)st.cpu_us, (unsigned long long)st.errors);
}

/* -P: a server that runs elsewhere. */
static int external(struct lg_config *cfg, uint16_t port, uint32_t vconns, uint32_t vbytes)
{
	const char *name = cfg->proto == LG_HTTP ? "http-ext" : "echo-ext";
	struct lg_result res;
	int rc;

	cfg->port = port;
	if ((rc = lg_run(cfg, &res))) {
		fail(name, rc, res.error);
		fprintf(stderr, "  (%llu connections failed)\n", (unsigned long long)res.errors);
	} else {
		print_result(name, &res);
	}
	if (vconns && cfg->proto == LG_ECHO) {
		rc = lg_verify_echo_conns(NULL, port, vconns, vbytes, &res);
		printf("verify-ext ok %d\n", !rc);
		printf("verify-ext seconds %.3f\n", res.seconds);
		if (rc)
			fail("verify-ext", rc, res.error);
	}
	return failures ? 1 : 0;
}

static void flags_name(unsigned f, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s%s%s%s",
		 f & IORING_SETUP_SINGLE_ISSUER ? "SINGLE_ISSUER|" : "",
		 f & IORING_SETUP_DEFER_TASKRUN ? "DEFER_TASKRUN|" : "",
		 f & IORING_SETUP_COOP_TASKRUN ? "COOP_TASKRUN|" : "",
		 f & IORING_SETUP_TASKRUN_FLAG ? "TASKRUN_FLAG|" : "", f ? "" : "0|");
	buf[strlen(buf) - 1] = '\0';
}

static void doorbells(uint32_t iters)
{
	static const struct {
		const char *name;
		unsigned flags;
	} variants[] = {
		{"defer-noflag", IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN},
		{"coop", IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG},
		{"plain", 0},
	};
	char name[64], fl[96];
	double ns;
	int rc;

	for (int spin = 0; spin < 2; spin++) {
		const char *mode = spin ? "spin" : "parked";
		unsigned used = 0;

		snprintf(name, sizeof(name), "doorbell-msgring-%s", mode);
		if ((rc = pp_msgring_rtt_ex(iters, spin, &ns, &used)) == -ENOSYS) {
			fprintf(stderr, "%s: skipped, the kernel lacks IORING_OP_MSG_RING\n", name);
		} else if (rc) {
			fail(name, rc, NULL);
		} else {
			printf("%s rtt_ns %.0f\n", name, ns);
			if (verbose) {
				flags_name(used, fl, sizeof(fl));
				fprintf(stderr, "%s: ring flags %s\n", name, fl);
			}
		}
		snprintf(name, sizeof(name), "doorbell-eventfd-%s", mode);
		if ((rc = pp_eventfd_rtt(iters, spin, &ns)))
			fail(name, rc, NULL);
		else
			printf("%s rtt_ns %.0f\n", name, ns);
	}
	/* The same MSG_RING ping-pong on other ring setups. */
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
		for (int spin = 0; spin < 2; spin++) {
			snprintf(name, sizeof(name), "doorbell-msgring-%s-%s", variants[v].name,
				 spin ? "spin" : "parked");
			rc = pp_msgring_rtt_flags(iters, spin, variants[v].flags, &ns);
			if (rc == -ENOSYS || rc == -EINVAL)
				fprintf(stderr, "%s: skipped: %s\n", name, strerror(-rc));
			else if (rc)
				fail(name, rc, NULL);
			else
				printf("%s rtt_ns %.0f\n", name, ns);
		}
	}
}

/* The check needs a descriptor per connection at both ends.  When the
 * limit cannot hold both in one process (the hard limit is too low and
 * raising it takes CAP_SYS_RESOURCE), the server runs in a child process,
 * which has a descriptor table, and a limit, of its own. */
static bool fits_one_process(uint32_t nconns)
{
	rlim_t want = (rlim_t)nconns * 2 + 1024;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return false;
	if (rl.rlim_max >= want)
		return true;
	rl.rlim_cur = rl.rlim_max = want;
	return !setrlimit(RLIMIT_NOFILE, &rl);
}

struct verify_server {
	struct ee_server *srv;	/* in this process */
	pid_t pid;		/* or in this child */
	int up, down;		/* child -> parent: port, stats; parent -> child: stop */
};

static int vs_start(struct verify_server *vs, bool child, uint32_t nconns, int server_cpu,
		    uint16_t *port)
{
	int up[2], down[2];

	vs->pid = -1;
	if (!child) {
		int rc = ee_start(&vs->srv, 0, server_cpu);
		*port = rc ? 0 : ee_port(vs->srv);
		return rc;
	}
	if (pipe2(up, O_CLOEXEC))
		return -errno;
	if (pipe2(down, O_CLOEXEC)) {
		int rc = -errno;
		close(up[0]);
		close(up[1]);
		return rc;
	}
	fflush(NULL);
	vs->pid = fork();
	if (vs->pid == 0) {
		/* A descriptor per connection, past the soft 1024 of a login
		 * (the parent raised its own, not this one's to come). */
		rlim_nofile_up((rlim_t)nconns + 1024);
		struct ee_server *srv;
		struct ee_stats st = {0};
		int rc = ee_start(&srv, 0, server_cpu);
		uint16_t p = rc ? 0 : ee_port(srv);
		char b;

		close(up[0]);
		close(down[1]);
		if (write(up[1], &p, sizeof(p)) != sizeof(p) || rc)
			_exit(1);
		/* EOF when the parent is done (or dies). */
		(void)!read(down[0], &b, 1);
		rc = ee_stop(srv, &st);
		_exit(write(up[1], &st, sizeof(st)) == sizeof(st) && !rc ? 0 : 1);
	}
	int rc = vs->pid < 0 ? -errno : 0;
	close(up[1]);
	close(down[0]);
	vs->up = up[0];
	vs->down = down[1];
	*port = 0;
	if (!rc && read(vs->up, port, sizeof(*port)) != sizeof(*port))
		rc = -EIO;
	if (!rc && !*port)
		rc = -EIO;	/* the child could not start the server */
	return rc;
}

static int vs_stop(struct verify_server *vs, struct ee_stats *st)
{
	int status, rc = 0;

	if (vs->pid < 0 && vs->srv)
		return ee_stop(vs->srv, st);
	memset(st, 0, sizeof(*st));
	close(vs->down);
	if (vs->pid > 0) {
		if (read(vs->up, st, sizeof(*st)) != sizeof(*st))
			rc = -EIO;
		if (waitpid(vs->pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
			rc = -EIO;
	}
	close(vs->up);
	return rc;
}

static void verify(uint32_t nconns, uint32_t bytes, int server_cpu)
{
	struct verify_server vs = {0};
	struct ee_stats st;
	struct lg_result res;
	bool child = !fits_one_process(nconns);
	uint16_t port;
	int rc = vs_start(&vs, child, nconns, server_cpu, &port);

	if (rc) {
		vs_stop(&vs, &st);
		fail("verify-echo", rc, "cannot start the server");
		return;
	}
	int vrc = lg_verify_echo_conns(NULL, port, nconns, bytes, &res);
	rc = vs_stop(&vs, &st);
	printf("verify-echo conns %u\n", nconns);
	printf("verify-echo bytes_per_conn %u\n", bytes);
	printf("verify-echo ok %d\n", !vrc && !rc);
	printf("verify-echo seconds %.3f\n", res.seconds);
	if (vrc)
		fail("verify-echo", vrc, res.error);
	else if (rc)
		fail("verify-echo", rc, "server failed");
	if (verbose)
		fprintf(stderr, "verify-echo: server in %s; %llu conns passed, %llu bytes, "
				"%llu errors; server: %llu conns, %llu errors\n",
			child ? "a child process (descriptor limit)" : "this process",
			(unsigned long long)res.requests, (unsigned long long)res.bytes,
			(unsigned long long)res.errors, (unsigned long long)st.conns,
			(unsigned long long)st.errors);
}

int main(int argc, char **argv)
{
	/* The first two CPUs of the affinity mask (maskcpu.h) unless told. */
	struct loadtest_opts o = {.server_cpu = mask_cpu(0), .vconns = 10000, .vbytes = 256, .iters = 20000,
				  .http = true};
	char err[256];

	lg_config_init(&o.cfg);
	o.cfg.conns = 50;
	o.cfg.msg_size = 64;
	o.cfg.duration_s = 2.0;
	o.cfg.cpu = mask_cpu(1);
	if (loadtest_opts_parse(argc, argv, &o, err, sizeof(err))) {
		fprintf(stderr, "cbcmn-loadtest: %s (try --help)\n", err);
		return 2;
	}
	if (o.help) {
		fputs(usage_text, stdout);
		return cli_stdout_flushed("cbcmn-loadtest") ? 0 : 1;
	}
	struct lg_config cfg = o.cfg;
	int server_cpu = o.server_cpu;
	uint32_t vconns = o.vconns, vbytes = o.vbytes, iters = o.iters;
	bool http = o.http;
	uint16_t ext_port = o.port;
	verbose = o.verbose;

	if (ext_port)
		return external(&cfg, ext_port, vconns, vbytes);
	load("echo-epoll", false, &cfg, server_cpu);
	if (http)
		load("http-epoll", true, &cfg, server_cpu);
	if (iters)
		doorbells(iters);
	if (vconns)
		verify(vconns, vbytes, server_cpu);
	return failures || !cli_stdout_flushed("cbcmn-loadtest") ? 1 : 0;
}
