/* cbcmn-stat: per shard (executor) metrics of a running cbcmn process, seen
 * by the eBPF programs of bpf/cbcmn.bpf.c: one dump or one per interval,
 * for scripts (like vmstat or perf stat).  docs/OBSERVABILITY.md explains
 * every column.  With --prometheus, the runtimes' statistics segments
 * instead, as OpenMetrics text (no eBPF, no privilege). */
#include <errno.h>
#include <stddef.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "bpf/bpfmon.h"
#include "export/openmetrics.h"
#include "util/uring_ops.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "cbcmn.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* The fields printed, in order: name, offset in struct cbcmn_bpf_shard,
 * and whether it is ns shown as ms. */
#define F(name, field, ms) {name, #field, offsetof(struct cbcmn_bpf_shard, field), ms}
static const struct col {
	const char *name; /* text column */
	const char *key;  /* JSON key: the field's name */
	size_t off;
	int ms;
} cols[] = {
	F("steals", steals, 0),          F("stolen", tasks_stolen, 0),
	F("steal_fail", steal_fails, 0), F("db_msgring", doorbells_msg_ring, 0),
	F("db_efd", doorbells_eventfd, 0), F("db_recv", doorbells_recv, 0),
	F("db_coal", doorbells_coalesced, 0), F("xmsg_tx", xmsgs_sent, 0),
	F("xmsg_rx", xmsgs_recv, 0),     F("parks", parks, 0),
	F("lock_cont", lock_contended, 0), F("lock_ms", lock_wait_ns, 1),
	F("on_ms", oncpu_ns, 1),         F("off_ms", offcpu_ns, 1),
	F("switches", switches, 0),      F("invol", involuntary, 0),
	F("migr", migrations, 0),
	F("sqes", sqes, 0),              F("msgring_sqe", msg_ring_sqes, 0),
	F("cqes", cqes, 0),              F("cqe_err", cqe_errors, 0),
	F("cq_waits", cqring_waits, 0),  F("async", async_work, 0),
	F("overflow", cqe_overflows, 0),
	F("runq", runq_waits, 0),        F("runq_ms", runq_ns, 1),
	F("futex", futex_waits, 0),      F("futex_ms", futex_wait_ns, 1),
	F("db_lat", doorbell_lat, 0),    F("db_lat_ms", doorbell_lat_ns, 1),
	F("db_running", doorbells_running, 0), F("db_pending", doorbells_pending, 0),
	F("steal_lat", steal_lat, 0),    F("steal_lat_ms", steal_lat_ns, 1),
	F("act_migr", actor_migrations, 0), F("act_restart", actor_restarts, 0),
	F("mbox_bp", actor_backpressure, 0),
};
#define NCOLS (sizeof(cols) / sizeof(cols[0]))

/* Columns whose programs did not attach (bpfmon_measured): "-" in text,
 * null in JSON, never 0.  Set once after attach. */
static bool col_off[NCOLS];

static uint64_t get(const struct bpfmon_shard *s, const struct col *c)
{
	return *(const uint64_t *)((const char *)&s->c + c->off);
}

/* bpfmon_read, with on_ms and off_ms up to the read: the time since each
 * thread's last switch folded in, so a thread that never leaves its CPU
 * (or never gets one) is counted, not at 0 until it switches. */
static int read_now(struct bpfmon *m, struct bpfmon_shard *k)
{
	int n = bpfmon_read(m, k, CBCMN_BPF_NSLOTS);
	for (int i = 0; n >= 0 && i < CBCMN_BPF_NSLOTS; i++) {
		k[i].c.oncpu_ns = bpfmon_oncpu_ns(&k[i]);
		k[i].c.offcpu_ns = bpfmon_offcpu_ns(&k[i]);
		k[i].oncpu_now_ns = k[i].offcpu_now_ns = 0;
	}
	return n;
}

/* Percentiles from the histograms: name, which histogram (-1: lock_hist,
 * in ns), percentile.  Text and JSON show the slot's upper bound in us
 * (ns for lock_hist). */
static const struct pcol {
	const char *name;
	int hist;
	double pct;
} pcols[] = {
	{"runq_p50_us", CBCMN_BPF_HIST_RUNQ, 50},      {"runq_p99_us", CBCMN_BPF_HIST_RUNQ, 99},
	{"futex_p50_us", CBCMN_BPF_HIST_FUTEX, 50},    {"futex_p99_us", CBCMN_BPF_HIST_FUTEX, 99},
	{"db_p50_us", CBCMN_BPF_HIST_DOORBELL, 50},    {"db_p99_us", CBCMN_BPF_HIST_DOORBELL, 99},
	{"steal_p50_us", CBCMN_BPF_HIST_STEAL, 50},    {"steal_p99_us", CBCMN_BPF_HIST_STEAL, 99},
	{"lock_p50_ns", -1, 50},                       {"lock_p99_ns", -1, 99},
};
#define NPCOLS (sizeof(pcols) / sizeof(pcols[0]))

/* The counter whose programs a histogram rests on. */
static size_t pcol_field(const struct pcol *p)
{
	switch (p->hist) {
	case CBCMN_BPF_HIST_RUNQ:
		return offsetof(struct cbcmn_bpf_shard, runq_waits);
	case CBCMN_BPF_HIST_FUTEX:
		return offsetof(struct cbcmn_bpf_shard, futex_waits);
	case CBCMN_BPF_HIST_DOORBELL:
		return offsetof(struct cbcmn_bpf_shard, doorbell_lat);
	case CBCMN_BPF_HIST_STEAL:
		return offsetof(struct cbcmn_bpf_shard, steal_lat);
	default:
		return offsetof(struct cbcmn_bpf_shard, lock_contended);
	}
}

static bool pcol_off[NPCOLS];

static uint64_t pget(const struct bpfmon_shard *s, const struct pcol *p)
{
	return bpfmon_hist_pct(p->hist < 0 ? s->lock_hist : s->hist[p->hist], p->pct);
}

/* The mailbox depth p99 of each shard's receives in the interval, from the
 * runtime's own histogram (its statistics segment: BPF sees no depth),
 * index CBCMN_BPF_NSLOTS the total's; shown only when one runtime is
 * watched (mbox_w), else "-" and null.  Without -r, the process's only
 * live runtime, looked for again at each read while there is none: a
 * runtime made after cbcmn-stat started, or after the last one ended,
 * still gets its column (the BPF columns count every runtime anyway). */
static cbcmn_watch *mbox_w;
static pid_t mbox_pid;  /* > 0: (re)open the only runtime of this process */
static uint64_t mbox_t; /* when the last read was, mono_ns */
static bool mbox_ok; /* the last read worked */
static uint64_t mbox_p99[CBCMN_BPF_NSLOTS + 1];
static cbcmn_executor_stats *mbox_prev, *mbox_now;

/* The process's runtime if it has exactly one live, else NULL. */
static cbcmn_watch *mbox_only(pid_t pid)
{
	cbcmn_watch *w;
	if (!cbcmn_watch_open((int32_t)pid, 1, &w)) {
		cbcmn_watch_close(w);
		return NULL; /* more than one: their shards are merged */
	}
	return cbcmn_watch_open((int32_t)pid, 0, &w) ? NULL : w;
}

/* Read the segment, and the interval's p99s against the last read. */
static void mbox_read(bool first)
{
	cbcmn_stats st;
	uint64_t t = mono_ns(), since = t - mbox_t;
	mbox_t = t;
	bool fresh = false; /* watched from this read on */
	int rc = -ESRCH;
	for (int tries = 0; tries < 2; tries++) {
		if (!mbox_w && mbox_pid > 0 && mbox_prev && (mbox_w = mbox_only(mbox_pid)))
			fresh = true;
		if (!mbox_w)
			break;
		rc = cbcmn_watch_read(mbox_w, &st, mbox_now, CBCMN_MAX_EXECUTORS);
		if (rc != -ESRCH || mbox_pid <= 0)
			break;
		/* That runtime ended: another may have taken its place. */
		cbcmn_watch_close(mbox_w);
		mbox_w = NULL;
	}
	if (rc) {
		mbox_ok = false;
		return;
	}
	/* A runtime first seen now: its histogram since start is the
	 * interval's only if it started after the last read; else there is
	 * no interval yet ("-" once, the baseline taken). */
	bool zero = fresh && !first && st.uptime_ns <= since;
	bool have = first || !fresh || zero;
	uint64_t tot[CBCMN_MAILBOX_HIST_SLOTS] = {0};
	/* A shard past this runtime's executors (another runtime's, in the
	 * BPF maps) has none: null, not an older runtime's figure. */
	memset(mbox_p99, 0, sizeof(mbox_p99));
	for (uint32_t i = 0; i < st.executors && i < CBCMN_BPF_MAX_SHARDS; i++) {
		uint64_t h[CBCMN_MAILBOX_HIST_SLOTS];
		for (int k = 0; k < CBCMN_MAILBOX_HIST_SLOTS; k++) {
			uint64_t a = mbox_now[i].mailbox_depth_hist[k];
			uint64_t b = zero ? 0 : first || fresh ? a : mbox_prev[i].mailbox_depth_hist[k];
			h[k] = a > b ? a - b : 0;
			/* saturating: a hostile segment's slots must not wrap */
			tot[k] = tot[k] > UINT64_MAX - h[k] ? UINT64_MAX : tot[k] + h[k];
		}
		mbox_p99[i] = cbcmn_stats_hist_quantile(h, CBCMN_MAILBOX_HIST_SLOTS, 99);
	}
	mbox_p99[CBCMN_BPF_NSLOTS] = cbcmn_stats_hist_quantile(tot, CBCMN_MAILBOX_HIST_SLOTS, 99);
	cbcmn_executor_stats *x = mbox_prev;
	mbox_prev = mbox_now;
	mbox_now = x;
	mbox_ok = have;
}

/* t = the sum of shards [0, n): counters and histograms. */
static void total(struct bpfmon_shard *t, const struct bpfmon_shard *d, int n)
{
	memset(t, 0, sizeof(*t));
	for (int i = 0; i < n; i++) {
		for (size_t k = 0; k < NCOLS; k++)
			*(uint64_t *)((char *)&t->c + cols[k].off) += get(&d[i], &cols[k]);
		for (int k = 0; k < CBCMN_BPF_MAX_OPS; k++)
			t->sqe_ops[k] += d[i].sqe_ops[k];
		for (int k = 0; k < CBCMN_BPF_HIST_SLOTS; k++) {
			t->lock_hist[k] += d[i].lock_hist[k];
			for (int h = 0; h < CBCMN_BPF_NHISTS; h++)
				t->hist[h][k] += d[i].hist[h][k];
		}
	}
}


/* d = now - before, field by field. */
static void delta(struct bpfmon_shard *d, const struct bpfmon_shard *now,
		  const struct bpfmon_shard *before)
{
	*d = *now;
	for (size_t k = 0; k < NCOLS; k++) {
		uint64_t a = get(now, &cols[k]), b = get(before, &cols[k]);
		/* off-CPU time may step back by a tick (bpfmon.h) */
		*(uint64_t *)((char *)&d->c + cols[k].off) = a > b ? a - b : 0;
	}
	for (int k = 0; k < CBCMN_BPF_MAX_OPS; k++)
		d->sqe_ops[k] = now->sqe_ops[k] - before->sqe_ops[k];
	for (int k = 0; k < CBCMN_BPF_HIST_SLOTS; k++) {
		d->lock_hist[k] = now->lock_hist[k] - before->lock_hist[k];
		for (int h = 0; h < CBCMN_BPF_NHISTS; h++)
			d->hist[h][k] = now->hist[h][k] - before->hist[h][k];
	}
}

static void ops_summary(const struct bpfmon_shard *s, char *buf, size_t len, int json)
{
	size_t at = 0;
	buf[0] = 0;
	for (unsigned op = 0; op < CBCMN_BPF_MAX_OPS && at < len; op++) {
		if (!s->sqe_ops[op])
			continue;
		char name[32];
		uring_op_name(op, name, sizeof(name));
		at += (size_t)snprintf(buf + at, len - at, json ? "%s\"%s\":%llu" : "%s%s=%llu",
				       at ? "," : "", name, (unsigned long long)s->sqe_ops[op]);
	}
	if (!at && !json)
		snprintf(buf, len, "-");
}

static void print_text(int n, const struct bpfmon_shard *d, const struct bpfmon_shard *outside,
		       const struct bpfmon_shard *tot, bool header)
{
	if (header) {
		printf("%-7s %-8s %4s", "shard", "tid", "cpu");
		for (size_t k = 0; k < NCOLS; k++)
			printf(" %*s", (int)strlen(cols[k].name) > 8 ? (int)strlen(cols[k].name) : 8, cols[k].name);
		for (size_t k = 0; k < NPCOLS; k++)
			printf(" %*s", (int)strlen(pcols[k].name), pcols[k].name);
		printf(" mbox_p99 sqe_ops\n");
	}
	for (int i = 0; i <= n + 1; i++) {
		const struct bpfmon_shard *s = i < n ? &d[i] : i == n ? tot : outside;
		char ops[1024];
		if (i == n) {
			printf("%-7s %-8s %4s", "total", "-", "-");
		} else if (i == n + 1) {
			bool any = false;
			for (size_t k = 0; k < NCOLS; k++)
				any |= get(s, &cols[k]) != 0;
			if (!any)
				break;
			printf("%-7s %-8s %4s", "outside", "-", "-");
		} else {
			printf("%-7d %-8u %4d", i, s->c.tid, s->c.tid ? s->c.cpu : -1);
		}
		for (size_t k = 0; k < NCOLS; k++) {
			int w = (int)strlen(cols[k].name) > 8 ? (int)strlen(cols[k].name) : 8;
			if (col_off[k])
				printf(" %*s", w, "-");
			else if (cols[k].ms)
				printf(" %*.1f", w, get(s, &cols[k]) / 1e6);
			else
				printf(" %*llu", w, (unsigned long long)get(s, &cols[k]));
		}
		for (size_t k = 0; k < NPCOLS; k++)
			if (pcol_off[k])
				printf(" %*s", (int)strlen(pcols[k].name), "-");
			else
				printf(" %*llu", (int)strlen(pcols[k].name),
				       (unsigned long long)pget(s, &pcols[k]));
		/* outside: no receives there; 0: none in the interval */
		if (mbox_ok && i <= n && mbox_p99[i < n ? i : CBCMN_BPF_NSLOTS])
			printf(" %8llu", (unsigned long long)mbox_p99[i < n ? i : CBCMN_BPF_NSLOTS]);
		else
			printf(" %8s", "-");
		ops_summary(s, ops, sizeof(ops), 0);
		printf(" %s\n", ops);
	}
}

static void json_fields(const struct bpfmon_shard *s, int mbox)
{
	char ops[2048];
	/* null without a receive in the interval (the quantile's 0): there
	 * is no depth to show, as cbcmn-top's MBp99 */
	if (mbox_ok && mbox >= 0 && mbox_p99[mbox])
		printf(",\"mbox_p99\":%llu", (unsigned long long)mbox_p99[mbox]);
	else
		printf(",\"mbox_p99\":null");
	for (size_t k = 0; k < NCOLS; k++)
		if (col_off[k])
			printf(",\"%s\":null", cols[k].key);
		else
			printf(",\"%s\":%llu", cols[k].key, (unsigned long long)get(s, &cols[k]));
	for (size_t k = 0; k < NPCOLS; k++)
		if (pcol_off[k])
			printf(",\"%s\":null", pcols[k].name);
		else
			printf(",\"%s\":%llu", pcols[k].name, (unsigned long long)pget(s, &pcols[k]));
	ops_summary(s, ops, sizeof(ops), 1);
	printf(",\"sqe_ops\":{%s}}", ops);
}

static void print_json(pid_t pid, double secs, bool exited, int n, const struct bpfmon_shard *d,
		       const struct bpfmon_shard *outside, const struct bpfmon_shard *tot)
{
	printf("{\"pid\":%d,\"interval_s\":%.3f,\"exited\":%s,\"shards\":[", (int)pid, secs,
	       exited ? "true" : "false");
	for (int i = 0; i <= n; i++) {
		const struct bpfmon_shard *s = i < n ? &d[i] : outside;
		if (i)
			printf(",");
		if (i < n)
			printf("{\"shard\":%d,\"tid\":%u,\"cpu\":%d", i, s->c.tid, s->c.tid ? s->c.cpu : -1);
		else
			printf("{\"shard\":\"outside\"");
		json_fields(s, i < n ? i : -1);
	}
	printf("],\"total\":{\"shards\":%d", n);
	json_fields(tot, CBCMN_BPF_NSLOTS);
	printf("}\n");
}

/* Sleep one interval, or less: returns true as soon as the process exits
 * (false at the interval's end or on ^C).  Without a pidfd (kernels before
 * 5.3), it looks every 50 ms. */
static bool wait_interval(int pidfd, pid_t pid, double interval)
{
	uint64_t end = mono_ns() + (uint64_t)(interval * 1e9);
	for (uint64_t now; !stop && (now = mono_ns()) < end;) {
		uint64_t left_ms = (end - now + 999999) / 1000000;
		if (pidfd >= 0) {
			struct pollfd p = {.fd = pidfd, .events = POLLIN};
			if (poll(&p, 1, (int)(left_ms < 1000 ? left_ms : 1000)) > 0)
				return true;
		} else {
			if (kill(pid, 0) && errno == ESRCH)
				return true;
			struct timespec ts = {0, (long)(left_ms < 50 ? left_ms : 50) * 1000000};
			nanosleep(&ts, NULL);
		}
	}
	return false;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: cbcmn-stat -p PID [-r N] [-i SEC] [-c COUNT] [--json] [--futex-tp] [-v]\n"
		"       cbcmn-stat -p PID --prometheus [-r N] [-i SEC] [-c COUNT]\n\n"
		"Per shard (executor) metrics of a running cbcmn process, from eBPF programs\n"
		"on the library's USDT probes and the sched and io_uring tracepoints.  Each\n"
		"report covers one interval (default 1 s); counting starts at attach.\n"
		"Needs root (CAP_BPF and CAP_PERFMON; the USDT probes CAP_SYS_ADMIN too) and\n"
		"a kernel with BTF (docs/OBSERVABILITY.md).\n\n"
		"  -p, --pid PID        the process to watch\n"
		"  -r, --runtime N      its N-th live runtime only, oldest 0 (default: every\n"
		"                       runtime of the process, their shards merged)\n"
		"  -i, --interval SEC   seconds per report (default 1)\n"
		"  -c, --count N        reports before exiting (default 1; 0: until ^C)\n"
		"  -j, --json           one JSON object per report\n"
		"  -v, --verbose        list the programs and libbpf's messages\n"
		"      --futex-tp       count futex waits with the syscall tracepoints where\n"
		"                       fentry is refused (every syscall of the host pays)\n"
		"      --prometheus     the runtimes' statistics (cbcmn_stats_snapshot's figures)\n"
		"                       as OpenMetrics text, one exposition ending \"# EOF\" per\n"
		"                       interval; no eBPF: the same user as the process is enough\n\n"
		"EXAMPLES\n"
		"  cbcmn-stat -p $(pgrep cbcmn-demo)          one 1 s report\n"
		"  cbcmn-stat -p 1234 -i 2 -c 0               every 2 s until ^C\n"
		"  cbcmn-stat -p 1234 --json | jq .shards[0]  for scripts\n"
		"  cbcmn-stat -p 1234 --prometheus > /var/lib/node_exporter/cbcmn.prom\n\n"
		"If the process exits, the report under way is printed at once, covering\n"
		"the time up to the exit (JSON: \"exited\":true, interval_s the real time),\n"
		"and cbcmn-stat says so on stderr.\n\n"
		"EXIT STATUS\n"
		"  0  every report printed (-c 0: stopped by ^C or SIGTERM)\n"
		"  1  bad arguments, or the programs could not be loaded or read\n"
		"  2  the process exited first; the last report covers up to its exit\n"
		"Columns: docs/OBSERVABILITY.md.\n");
}

/* ---- --prometheus: the statistics segments, no eBPF ------------------------------ */

#define PROM_MAX_RUNTIMES 64

/* The runtimes to scrape: -r N's, or every live one (at most 64), oldest
 * first.  Returns how many were opened, or -1 after one line on stderr. */
static int prom_open(long pid, long runtime, cbcmn_watch **w)
{
	int n = 0, rc = 0;
	if (runtime >= 0) {
		rc = cbcmn_watch_open((int32_t)pid, (uint32_t)runtime, &w[0]);
		n = rc ? 0 : 1;
	} else {
		while (n < PROM_MAX_RUNTIMES && (rc = cbcmn_watch_open((int32_t)pid, (uint32_t)n, &w[n])) == 0)
			n++;
		if (n && rc == -ENOENT)
			rc = 0;
	}
	if (rc && rc != -ENOENT) {
		for (int i = 0; i < n; i++)
			cbcmn_watch_close(w[i]);
		fprintf(stderr, "cbcmn-stat: process %ld: %s\n", pid,
			rc == -ESRCH    ? "no such process"
			: rc == -EPROTO ? "its runtime's statistics are of another layout (another "
					  "libcbcmn version): use the cbcmn-stat of its libcbcmn"
					: cbcmn_strerror(rc));
		return -1;
	}
	if (!n) {
		if (runtime >= 0)
			fprintf(stderr, "cbcmn-stat: process %ld: runtime %ld: no such live runtime "
					"(-r counts from 0)\n", pid, runtime);
		else
			fprintf(stderr, "cbcmn-stat: process %ld has no live cbcmn runtime\n", pid);
		return -1;
	}
	return n;
}

/* Exit status as without --prometheus: 0 every scrape printed, 1 bad input
 * or unreadable, 2 the process (or every runtime) ended first. */
static int prometheus_main(const struct stat_opts *o)
{
	cbcmn_watch *w[PROM_MAX_RUNTIMES];
	int n = prom_open(o->pid, o->runtime, w);
	if (n < 0)
		return 1;
	cbcmn_stats st[PROM_MAX_RUNTIMES];
	cbcmn_executor_stats *per[PROM_MAX_RUNTIMES] = {0};
	struct om_runtime rts[PROM_MAX_RUNTIMES];
	bool gone[PROM_MAX_RUNTIMES] = {0};
	int ret = 0;
	for (int i = 0; i < n; i++)
		if (!(per[i] = calloc(CBCMN_MAX_EXECUTORS, sizeof(*per[i])))) {
			fprintf(stderr, "cbcmn-stat: out of memory\n");
			ret = 1;
			goto out;
		}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)o->pid, 0);
	for (long r = 0; (!o->count || r < o->count) && !stop; r++) {
		/* The first scrape at once: a scraper wants the figures now. */
		if (r)
			(void)wait_interval(pidfd, (pid_t)o->pid, o->interval); /* an exit shows below */
		if (stop)
			break;
		size_t k = 0;
		for (int i = 0; i < n; i++) {
			if (gone[i])
				continue;
			int rc = cbcmn_watch_read(w[i], &st[i], per[i], CBCMN_MAX_EXECUTORS);
			if (rc == -ESRCH) {
				/* Destroyed, or the process ended: out of this
				 * scrape and the next (its figures would never move). */
				gone[i] = true;
				continue;
			}
			if (rc) {
				fprintf(stderr, "cbcmn-stat: reading runtime %d: %s\n", i, cbcmn_strerror(rc));
				ret = 1;
				goto done;
			}
			uint32_t m = st[i].executors < CBCMN_MAX_EXECUTORS ? st[i].executors
									   : CBCMN_MAX_EXECUTORS;
			rts[k++] = (struct om_runtime){&st[i], per[i], m};
		}
		if (!k) {
			fprintf(stderr, "cbcmn-stat: process %ld: no runtime left to read (destroyed, "
					"or the process exited)\n", o->pid);
			ret = 2;
			goto done;
		}
		if (om_write(stdout, rts, k)) {
			fprintf(stderr, "cbcmn-stat: writing the output failed\n");
			ret = 1;
			goto done;
		}
	}
done:
	if (pidfd >= 0)
		close(pidfd);
out:
	for (int i = 0; i < n; i++) {
		free(per[i]);
		cbcmn_watch_close(w[i]);
	}
	return ret;
}

int main(int argc, char **argv)
{
	struct stat_opts o = {.interval = 1.0, .count = 1, .runtime = -1};
	char perr[256];
	if (stat_opts_parse(argc, argv, &o, perr, sizeof(perr))) {
		fprintf(stderr, "cbcmn-stat: %s (try --help)\n", perr);
		return 1;
	}
	if (o.help) {
		usage(stdout);
		return cli_stdout_flushed("cbcmn-stat") ? 0 : 1;
	}
	if (o.prometheus)
		return prometheus_main(&o);
	long pid = o.pid, count = o.count;
	double interval = o.interval;
	bool json = o.json, verbose = o.verbose;
	unsigned flags = o.futex_tp ? BPFMON_FUTEX_TP : 0; /* syscall tracepoints: every syscall pays */

	struct bpfmon *m = NULL;
	struct bpfmon_shard *prev = NULL, *now = NULL, *d = NULL, tot;
	char err[256];
	int ret = 1;
	/* -r N: the N-th live runtime only (by its id, the probes' last
	 * argument); without it, every runtime of the process, merged. */
	uint32_t rt_id = 0;
	if (o.runtime >= 0) {
		cbcmn_watch *w;
		cbcmn_stats st;
		int wrc = cbcmn_watch_open((int32_t)pid, (uint32_t)o.runtime, &w);
		if (!wrc) {
			wrc = cbcmn_watch_read(w, &st, NULL, 0);
			cbcmn_watch_close(w);
		}
		if (wrc) {
			fprintf(stderr, "cbcmn-stat: process %ld: runtime %ld: %s\n", pid, o.runtime,
				wrc == -ENOENT ? "no such live runtime (-r counts from 0)" : cbcmn_strerror(wrc));
			return 1;
		}
		rt_id = st.runtime_id;
	} else {
		cbcmn_watch *w;
		if (!cbcmn_watch_open((int32_t)pid, 1, &w)) {
			cbcmn_watch_close(w);
			fprintf(stderr, "cbcmn-stat: process %ld has more than one runtime: their shards are "
				"counted together (-r N for one)\n", pid);
		} else {
			mbox_pid = (pid_t)pid; /* its only runtime, once there is one */
		}
	}
	if (o.runtime >= 0 && cbcmn_watch_open((int32_t)pid, (uint32_t)o.runtime, &mbox_w))
		mbox_w = NULL;
	int rc = bpfmon_open_runtime(&m, (pid_t)pid, rt_id, flags | (verbose ? BPFMON_VERBOSE : 0), err,
				     sizeof(err));
	if (rc) {
		fprintf(stderr, "cbcmn-stat: %s\n", err);
		return 1;
	}
	const struct bpfmon_prog *p;
	unsigned np = bpfmon_progs(m, &p);
	for (unsigned i = 0; i < np; i++) {
		if (p[i].state == BPFMON_MISSING || p[i].state == BPFMON_FAILED)
			fprintf(stderr, "cbcmn-stat: %s: %s%s\n", p[i].target, p[i].reason,
				!strncmp(p[i].target, "fentry futex", 12) && !(flags & BPFMON_FUTEX_TP)
					? " (futex waits not counted; --futex-tp counts them)" : "");
		else if (verbose)
			fprintf(stderr, "cbcmn-stat: %s: %s\n", p[i].target,
				p[i].state == BPFMON_ATTACHED ? "attached" : "off");
	}
	/* Not measured (a program that did not attach): "-" and null. */
	char off_line[1024] = "";
	size_t at = 0;
	for (size_t k = 0; k < NCOLS; k++)
		if ((col_off[k] = !bpfmon_measured(m, cols[k].off, NULL, 0)) && at < sizeof(off_line))
			at += (size_t)snprintf(off_line + at, sizeof(off_line) - at, " %s", cols[k].name);
	for (size_t k = 0; k < NPCOLS; k++)
		if ((pcol_off[k] = !bpfmon_measured(m, pcol_field(&pcols[k]), NULL, 0)) &&
		    at < sizeof(off_line))
			at += (size_t)snprintf(off_line + at, sizeof(off_line) - at, " %s", pcols[k].name);
	if (off_line[0])
		fprintf(stderr, "cbcmn-stat: not measured (\"-\", JSON null):%s\n", off_line);
	mbox_prev = calloc(CBCMN_MAX_EXECUTORS, sizeof(*mbox_prev));
	mbox_now = calloc(CBCMN_MAX_EXECUTORS, sizeof(*mbox_now));
	if (!mbox_prev || !mbox_now) {
		cbcmn_watch_close(mbox_w);
		mbox_w = NULL;
	}
	prev = calloc(CBCMN_BPF_NSLOTS, sizeof(*prev));
	now = calloc(CBCMN_BPF_NSLOTS, sizeof(*now));
	d = calloc(CBCMN_BPF_NSLOTS, sizeof(*d));
	if (!prev || !now || !d) {
		fprintf(stderr, "cbcmn-stat: out of memory\n");
		goto cleanup;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	/* A pidfd turns readable when the process exits (a zombie too): a
	 * report is cut short at the exit, not a whole interval later. */
	int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	bool exited = false, lost = false;
	double secs = 0;
	if ((rc = read_now(m, prev)) < 0)
		goto read_failed;
	mbox_read(true);
	for (long r = 0; (!count || r < count) && !stop && !exited; r++) {
		uint64_t t0 = mono_ns();
		exited = wait_interval(pidfd, (pid_t)pid, interval);
		secs = (mono_ns() - t0) / 1e9;
		int n = read_now(m, now);
		if ((rc = n) < 0)
			goto read_failed;
		mbox_read(false);
		for (int i = 0; i < CBCMN_BPF_NSLOTS; i++)
			delta(&d[i], &now[i], &prev[i]);
		total(&tot, d, n);
		if (json)
			print_json((pid_t)pid, secs, exited, n, d, &d[CBCMN_BPF_OUTSIDE], &tot);
		else
			print_text(n, d, &d[CBCMN_BPF_OUTSIDE], &tot, r == 0);
		/* Each report as it is made; one nobody can read (a full
		 * disk) fails the run rather than pass for one. */
		if ((lost = !cli_stdout_flushed("cbcmn-stat")))
			break;
		struct bpfmon_shard *t = prev;
		prev = now;
		now = t;
	}
	if (pidfd >= 0)
		close(pidfd);
	if (lost) /* said; ret is 1 */
		goto cleanup;
	if (exited) {
		fprintf(stderr, "cbcmn-stat: process %ld exited; the last report covers %.3f s up to its exit\n",
			pid, secs);
		ret = 2;
		goto cleanup;
	}
	ret = 0;
	goto cleanup;
read_failed:
	fprintf(stderr, "cbcmn-stat: reading the maps: %s\n", strerror(-rc));
cleanup:
	cbcmn_watch_close(mbox_w);
	free(mbox_prev);
	free(mbox_now);
	free(prev);
	free(now);
	free(d);
	bpfmon_close(m);
	return ret;
}
