/* test_bpfactor: the eBPF programs' actor counts (cbcmn:actor_migrate,
 * cbcmn:sup_restart, cbcmn:actor_backpressure) equal the runtime's own
 * (cbcmn_executor_stats.actor_migrations, actor_restarts,
 * actor_backpressure), per executor, after a workload that migrates,
 * restarts and meets full mailboxes.  Needs root (or CAP_BPF +
 * CAP_PERFMON) and a kernel with BTF: otherwise a skip that says why. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "helpers.h"
#include "bpf/bpfmon.h"
#include "bpf_open.h"
#include "toolrun.h"
#include "top/top_model.h"
#include "top/top_out.h"
#include "cbcmn_actor.h"

static struct bpfmon *mon;
static char why[256];

static const char *const needed[] = {"cbcmn_actor_migrate", "cbcmn_sup_restart",
				     "cbcmn_actor_backpressure"};

static int setup(void **state)
{
	(void)state;
	mon = t_bpfmon_self(BPFMON_NO_SCHED | BPFMON_NO_IO_URING | BPFMON_NO_FUTEX, needed,
			    sizeof(needed) / sizeof(needed[0]), why, sizeof(why));
	return 0; /* without it, each test skips with why */
}

static int teardown(void **state)
{
	(void)state;
	bpfmon_close(mon);
	return 0;
}

/* ---- the workload ---------------------------------------------------------- */

#define HOGS 32   /* on one executor's wheel: twice its nominal turn */
#define CRASHES 5

struct work {
	cbcmn_runtime *rt;
	_Atomic int started, stop, holding, on1, starts;
	_Atomic cbcmn_actor_ref sup;
	cbcmn_actor_ref slow;
	int bp_rcs[4];
	cbcmn_sup_report rep;
};

/* Migration: a hog that only checkpoints, until told. */
static int64_t hog(cbcmn_cx *cx, void *arg)
{
	struct work *w = arg;
	atomic_fetch_add(&w->started, 1);
	while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
		CBCMN_CHECKPOINT(cx);
		if (cbcmn_cx_executor(cx) == 1)
			atomic_store_explicit(&w->on1, 1, memory_order_relaxed);
	}
	return 0;
}

/* Holds executor 1 (steals nothing) until every hog is on executor 0. */
static int64_t hold1(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	struct work *w = arg;
	atomic_store(&w->holding, 1);
	for (uint64_t end = t_now_ns() + T_STALL_NS;
	     atomic_load(&w->started) < HOGS && t_now_ns() < end;)
		;
	return 0;
}

/* Restarts: crashes CRASHES times, then stops its supervisor. */
static int64_t crasher(cbcmn_cx *cx, void *arg)
{
	struct work *w = arg;
	if (atomic_fetch_add(&w->starts, 1) < CRASHES)
		return -1;
	cbcmn_actor_ref sup;
	while (!(sup = atomic_load(&w->sup)))
		cbcmn_yield(cx);
	cbcmn_actor_stop(NULL, cx, sup, 0);
	return 0;
}

/* Back-pressure: a mailbox of one that is read only at the end. */
static int64_t slow(cbcmn_cx *cx, void *arg)
{
	struct work *w = arg;
	while (!atomic_load(&w->stop))
		cbcmn_yield(cx);
	cbcmn_actor_msg m;
	while (cbcmn_actor_receive(cx, &m, 0) == 0)
		;
	return 0;
}

static void *outside(void *arg)
{
	struct work *w = arg;
	cbcmn_actor_msg m = {.type = 1};
	w->bp_rcs[3] = cbcmn_actor_try_send(w->rt, NULL, w->slow, &m);
	return NULL;
}

static int64_t boss(cbcmn_cx *cx, void *arg)
{
	struct work *w = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	/* Restarts, on whichever executor the supervisor runs. */
	cbcmn_sup_child c = {.fn = crasher, .state = w, .restart = CBCMN_SUP_TRANSIENT, .node = -1};
	cbcmn_sup_spec spec = {.strategy = CBCMN_SUP_ONE, .max_restarts = CRASHES + 1,
			       .children = &c, .nchildren = 1, .report = &w->rep};
	cbcmn_actor_ref sup;
	TASK_CHECK(cbcmn_sup_start(cx, n, &spec, NULL, &sup) == 0);
	atomic_store(&w->sup, sup);
	/* Back-pressure from this task and from a thread. */
	cbcmn_actor_opts one = {.mailbox_cap = 1};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, slow, w, &one, &w->slow) == 0);
	cbcmn_actor_msg m = {.type = 1};
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, w->slow, &m) == 0);
	w->bp_rcs[0] = cbcmn_actor_try_send(NULL, cx, w->slow, &m);
	w->bp_rcs[1] = cbcmn_actor_send_timeout(NULL, cx, w->slow, &m, 0);
	w->bp_rcs[2] = cbcmn_actor_send_timeout(NULL, cx, w->slow, &m, 1000000);
	pthread_t th;
	TASK_CHECK(pthread_create(&th, NULL, outside, w) == 0);
	TASK_CHECK(pthread_join(th, NULL) == 0);
	/* Migration: every hog on executor 0, then executor 1 free. */
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 1, hold1, w, NULL) == 0);
	while (!atomic_load(&w->holding))
		cbcmn_yield(cx);
	cbcmn_actor_ref r;
	for (int i = 0; i < HOGS; i++)
		TASK_CHECK(cbcmn_actor_spawn(cx, n, hog, w, NULL, &r) == 0);
	while (!atomic_load(&w->on1)) /* a hang: nothing migrated (the watchdog says) */
		cbcmn_yield(cx);
	atomic_store(&w->stop, 1);
	return cbcmn_nursery_await_all(cx, n);
}

static int64_t boss_on0(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn_pinned(cx, n, 0, boss, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* The three counts of executor e, in one value to compare. */
static uint64_t counts(const cbcmn_executor_stats *e)
{
	return e->actor_migrations * 1000003 + e->actor_restarts * 1009 + e->actor_backpressure;
}

/* Until the three counts stop moving (a hand-over counts after the lane
 * took the actor, which may end first): each probe has fired next to its
 * count.  Not the whole struct: a wheel's load decays while it stands
 * empty, at every read. */
static void quiet(cbcmn_runtime *rt, cbcmn_stats *st, cbcmn_executor_stats *per)
{
	assert_int_equal(cbcmn_stats_snapshot(rt, st, per, 2), 0);
	uint64_t prev[2] = {counts(&per[0]), counts(&per[1])};
	for (uint64_t until = t_now_ns() + T_STALL_NS; t_now_ns() < until;) {
		usleep(20000);
		assert_int_equal(cbcmn_stats_snapshot(rt, st, per, 2), 0);
		if (prev[0] == counts(&per[0]) && prev[1] == counts(&per[1]))
			return;
		prev[0] = counts(&per[0]);
		prev[1] = counts(&per[1]);
	}
	fail_msg("the runtime never went quiet");
}

/* ---- tests ----------------------------------------------------------------- */

static void test_actor_counts_match_runtime(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	cbcmn_runtime *rt = t_runtime(2);
	struct work w = {.rt = rt};
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, boss_on0, &w, &res), 0);
	assert_int_equal(res, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(w.bp_rcs[0], -EAGAIN);
	assert_int_equal(w.bp_rcs[1], -ETIMEDOUT);
	assert_int_equal(w.bp_rcs[2], -ETIMEDOUT);
	assert_int_equal(w.bp_rcs[3], -EAGAIN);
	assert_int_equal(w.rep.restarts, CRASHES);

	cbcmn_stats st;
	cbcmn_executor_stats per[2];
	quiet(rt, &st, per);
	struct bpfmon_shard *b = calloc(CBCMN_BPF_NSLOTS, sizeof(*b));
	assert_non_null(b);
	assert_true(bpfmon_read(mon, b, CBCMN_BPF_NSLOTS) >= 1);
	for (int i = 0; i < 2; i++) {
		const struct cbcmn_bpf_shard *c = &b[i].c;
		printf("executor %d: migrations %llu/%llu restarts %llu/%llu back-pressure %llu/%llu\n",
		       i, (unsigned long long)c->actor_migrations,
		       (unsigned long long)per[i].actor_migrations,
		       (unsigned long long)c->actor_restarts, (unsigned long long)per[i].actor_restarts,
		       (unsigned long long)c->actor_backpressure,
		       (unsigned long long)per[i].actor_backpressure);
		assert_int_equal(c->actor_migrations, per[i].actor_migrations);
		assert_int_equal(c->actor_restarts, per[i].actor_restarts);
		assert_int_equal(c->actor_backpressure, per[i].actor_backpressure);
	}
	/* The workload did what it is for. */
	assert_true(st.total.actor_migrations > 0);
	assert_int_equal(st.total.actor_restarts, CRASHES);
	assert_int_equal(st.total.actor_backpressure, 3);
	assert_int_equal(b[CBCMN_BPF_OUTSIDE].c.actor_backpressure, st.ext_actor_backpressure);
	assert_int_equal(st.ext_actor_backpressure, 1);
	/* All three are measured: the tools show figures, not "-". */
	const size_t f[] = {offsetof(struct cbcmn_bpf_shard, actor_migrations),
			    offsetof(struct cbcmn_bpf_shard, actor_restarts),
			    offsetof(struct cbcmn_bpf_shard, actor_backpressure)};
	assert_true(bpfmon_measured_all(mon, f, 3, why, sizeof(why)));
	free(b);
	t_destroy(rt);
}

/* ---- cbcmn-stat's mbox_p99 against a known depth ---------------------------- */

#define DEPTH 100

struct cycles {
	pid_t stat;          /* cbcmn-stat, until it has exited */
	int stat_status;
	bool idle;           /* no messages: no receive at all */
	_Atomic int go;
	_Atomic long taken;  /* messages the drainer has received */
	long rounds;
};

/* Takes DEPTH messages each round once told: depths DEPTH, DEPTH - 1 ... 1. */
static int64_t drainer(cbcmn_cx *cx, void *arg)
{
	struct cycles *c = arg;
	for (;;) {
		while (!atomic_load(&c->go))
			cbcmn_yield(cx);
		atomic_store(&c->go, 0);
		cbcmn_actor_msg m;
		for (int i = 0; i < DEPTH; i++)
			if (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) || m.type == 2)
				return 0;
			else
				atomic_fetch_add(&c->taken, 1);
	}
}

/* Rounds of DEPTH messages into an idle mailbox until cbcmn-stat ends
 * (idle: none, only the wait). */
static int64_t cycle_root(cbcmn_cx *cx, void *arg)
{
	struct cycles *c = arg;
	cbcmn_nursery *n;
	cbcmn_actor_ref a;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	cbcmn_actor_opts o = {.mailbox_cap = 128};
	TASK_CHECK(cbcmn_actor_spawn(cx, n, drainer, c, &o, &a) == 0);
	cbcmn_actor_msg m = {.type = 1};
	for (uint64_t end = t_now_ns() + T_STALL_NS; t_now_ns() < end; c->rounds++) {
		if (waitpid(c->stat, &c->stat_status, WNOHANG) == c->stat)
			break;
		if (c->idle) {
			TASK_CHECK(cbcmn_sleep(cx, 10000000) == 0);
			continue;
		}
		for (int i = 0; i < DEPTH; i++)
			TASK_CHECK(cbcmn_actor_try_send(NULL, cx, a, &m) == 0);
		atomic_store(&c->go, 1);
		/* until it took them all (its own count: a mailbox_depth of 0
		 * can still have the round's messages on their way over the
		 * lanes, and the next round's would overfill it) */
		while (atomic_load(&c->taken) < (c->rounds + 1) * DEPTH)
			cbcmn_yield(cx);
	}
	m.type = 2;
	TASK_CHECK(cbcmn_actor_try_send(NULL, cx, a, &m) == 0);
	atomic_store(&c->go, 1);
	return cbcmn_nursery_await_all(cx, n);
}

/* True once process pid holds a BPF link: cbcmn-stat has attached, past
 * the point where it looks for the runtimes it watches. */
static bool has_bpf_link(pid_t pid)
{
	char dir[64], path[PATH_MAX], target[128];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dir);
	bool found = false;
	for (struct dirent *de; d && !found && (de = readdir(d));) {
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		found = n > 0 && (target[n] = 0, strstr(target, "bpf_link"));
	}
	if (d)
		closedir(d);
	return found;
}

/* cbcmn-stat --json at 0.5 s intervals, count of them, over this process
 * while a runtime does c's rounds.  late: the runtime is made only after
 * cbcmn-stat has attached.  Returns the last interval's "total" object
 * (free *json); NULL: the test skips. */
static const char *stat_over(struct cycles *c, const char *count, bool late, char **json)
{
	char path[PATH_MAX], out[] = "/tmp/cbcmn-bpfactor-XXXXXX", pid[16];
	if (!tool_path("cbcmn-stat", path, sizeof(path))) {
		T_SKIP("cbcmn-stat is not built beside this suite (make tools)");
		return NULL;
	}
	int fd = mkstemp(out);
	assert_true(fd >= 0);
	unlink(out);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd, 1);
	char *argv[] = {path, "-p", pid, "-i", "0.5", "-c", (char *)count, "--json", NULL};
	c->stat_status = -1;
	assert_int_equal(posix_spawn(&c->stat, path, &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	for (uint64_t end = t_now_ns() + T_STALL_NS; late && !has_bpf_link(c->stat);) {
		if (t_now_ns() > end || waitpid(c->stat, &c->stat_status, WNOHANG) == c->stat)
			fail_msg("cbcmn-stat never attached (status %d)", c->stat_status);
		usleep(10000);
	}
	cbcmn_runtime *rt = t_runtime(2);
	int64_t res = -1;
	assert_int_equal(cbcmn_runtime_run(rt, cycle_root, c, &res), 0);
	t_destroy(rt);
	if (c->stat_status == -1) { /* the deadline came first */
		kill(c->stat, SIGKILL);
		waitpid(c->stat, NULL, 0);
		fail_msg("cbcmn-stat did not end in time");
	}
	assert_int_equal(res, 0);
	ASSERT_TASK_CHECKS();
	size_t len;
	*json = slurp_fd(fd, &len);
	close(fd);
	printf("%ld rounds; cbcmn-stat status %d\n", c->rounds, c->stat_status);
	assert_true(WIFEXITED(c->stat_status) && WEXITSTATUS(c->stat_status) == 0);
	const char *tot = NULL;
	for (const char *at = *json; (at = strstr(at, "\"total\":{")); at++)
		tot = at;
	assert_non_null(tot);
	return tot;
}

/* cbcmn-stat watching this process while one actor's receives find depths
 * DEPTH ... 1 over and over: its mbox_p99 total is the slot of 99 of 100,
 * [64, 128) (BPF's shards, the runtime's histogram). */
static void test_stat_shows_the_mailbox_depth_p99(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	struct cycles c = {0};
	char *json = NULL;
	const char *tot = stat_over(&c, "1", false, &json);
	if (tot && !strstr(tot, "\"mbox_p99\":127"))
		fail_msg("total's mbox_p99 is not 127: %.200s", strstr(tot, "mbox_p99"));
	free(json);
}

/* cbcmn-stat started before the process made its runtime looked for the
 * runtime's segment once, at start: every interval after showed mbox_p99
 * null, while the BPF columns counted the new runtime.  Any interval's
 * total will do, not the last: on a loaded host the process may not run
 * at all for one of cbcmn-stat's half seconds (CI saw a last interval
 * with every column 0). */
static void test_stat_mbox_p99_of_a_runtime_made_after_it_started(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	struct cycles c = {0};
	char *json = NULL;
	const char *tot = stat_over(&c, "3", true, &json);
	bool seen = false;
	for (const char *at = json; tot && !seen && (at = strstr(at, "\"total\":{")); at++) {
		const char *p99 = strstr(at, "\"mbox_p99\":");
		const char *next = strstr(at + 1, "\"total\":{");
		seen = p99 && (!next || p99 < next) && !strncmp(p99, "\"mbox_p99\":127", 14);
	}
	if (tot && !seen)
		fail_msg("no total's mbox_p99 is 127; the last: %.200s", strstr(tot, "mbox_p99"));
	free(json);
}

/* An interval without a single receive has no depth p99: null, as
 * cbcmn-top's MBp99, not a 0 no receive found. */
static void test_stat_mbox_p99_without_receives_is_null(void **state)
{
	(void)state;
	if (!mon)
		T_SKIP("%s", why);
	struct cycles c = {.idle = true};
	char *json = NULL;
	const char *tot = stat_over(&c, "1", false, &json);
	if (tot && !strstr(tot, "\"mbox_p99\":null"))
		fail_msg("total's mbox_p99 is not null: %.200s", strstr(tot, "mbox_p99"));
	free(json);
}

static int64_t asleep(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	cbcmn_sleep(cx, 1000ull * T_STALL_NS); /* until its nursery is cancelled */
	return 0;
}

/* cbcmn-top showed back-pressure per shard only: sends from threads
 * outside the runtime (cbcmn_stats.ext_actor_backpressure, cbcmn-stat's
 * "outside" row) were in no figure of its rows or JSON. */
static void test_top_json_shows_back_pressure_of_outside_threads(void **state)
{
	(void)state; /* no BPF: the runtime's own figures */
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_nursery *n;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &n), 0);
	cbcmn_actor_opts one = {.mailbox_cap = 1};
	cbcmn_actor_ref a;
	assert_int_equal(cbcmn_actor_spawn(NULL, n, asleep, NULL, &one, &a), 0);
	struct top_model *m;
	char err[256];
	struct top_model_opts o = {.no_bpf = true};
	assert_int_equal(top_model_open(&m, getpid(), &o, err, sizeof(err)), 0);
	cbcmn_actor_msg msg = {.type = 1};
	assert_int_equal(cbcmn_actor_try_send(rt, NULL, a, &msg), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(cbcmn_actor_try_send(rt, NULL, a, &msg), -EAGAIN);
	usleep(2000); /* an interval */
	assert_int_equal(top_model_sample(m), 0);
	char *json = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&json, &len);
	assert_non_null(f);
	assert_int_equal(top_print_json(f, m), 0);
	fclose(f);
	const char *at = strstr(json, "\"external_actor_backpressure_per_s\":");
	if (!at)
		fail_msg("no outside back-pressure in cbcmn-top's JSON: %.300s", json);
	/* 3 in a few ms: well above 0 */
	assert_true(strtod(at + strlen("\"external_actor_backpressure_per_s\":"), NULL) > 0);
	free(json);
	top_model_close(m);
	cbcmn_nursery_cancel(n);
	cbcmn_nursery_await_all(NULL, n);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_actor_counts_match_runtime),
		T_WATCHED_TEST(test_stat_shows_the_mailbox_depth_p99),
		T_WATCHED_TEST(test_stat_mbox_p99_of_a_runtime_made_after_it_started),
		T_WATCHED_TEST(test_stat_mbox_p99_without_receives_is_null),
		T_WATCHED_TEST(test_top_json_shows_back_pressure_of_outside_threads),
	};
	return cmocka_run_group_tests_name("bpfactor", tests, setup, teardown);
}
