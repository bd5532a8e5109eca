/* bpf_roles.h: the workloads and child roles test_bpf, test_bpfns and
 * test_bpfscale share.  Each of those binaries also plays child processes
 * (roles named on its command line, dispatched in its main()): self is its
 * path (find_self), spawn_role starts it again in a role.  The workloads: a
 * channel ping-pong between executors 0 and 1 (pp_main, pingpong),
 * fork-join until a byte (or EOF) comes on a descriptor (fib_until_byte,
 * child_run), and a runtime's per-executor stats once they stop moving
 * (quiet_stats).  Include after helpers.h and workloads/fib.h. */
#ifndef CBCMN_TEST_BPF_ROLES_H
#define CBCMN_TEST_BPF_ROLES_H

#include <limits.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

static char self[PATH_MAX]; /* this binary, which also plays the child processes */

/* self from /proc/self/exe: 0, or -1 when it cannot be read. */
static inline int find_self(void)
{
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return -1;
	self[n] = 0;
	return 0;
}

/* Start this binary again as a child playing role with arguments a1, a2
 * and a3 (a NULL one ends the list). */
static inline pid_t spawn_role(const char *role, const char *a1, const char *a2, const char *a3)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl(self, self, role, a1, a2, a3, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* ---- channel ping-pong between executors 0 and 1 --------------------------- */

struct pp {
	cbcmn_chan *ab, *ba;
	long rounds;
};

/* One side ({struct pp *, side 0 or 1}): 0 sends first.  The first
 * channel operation's error, or 0. */
static inline int64_t pp_side(cbcmn_cx *cx, void *arg)
{
	struct pp *p = ((void **)arg)[0];
	int side = (int)(intptr_t)((void **)arg)[1];
	cbcmn_chan *out = side ? p->ba : p->ab, *in = side ? p->ab : p->ba;
	long v = 0;
	int rc;
	for (long i = 0; i < p->rounds; i++) {
		if (side == 0 && (rc = cbcmn_chan_send(cx, out, &v)) != 0)
			return rc;
		if ((rc = cbcmn_chan_recv(cx, in, &v)) != 0)
			return rc;
		if (side == 1 && (rc = cbcmn_chan_send(cx, out, &v)) != 0)
			return rc;
	}
	return 0;
}

/* Task: p->rounds round trips over p's channels (arg a struct pp *), one
 * side pinned to each of executors 0 and 1. */
static inline int64_t pp_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	void *a0[2] = {arg, (void *)0}, *a1[2] = {arg, (void *)1};
	cbcmn_nursery_spawn_pinned(cx, n, 1, pp_side, a1, NULL);
	cbcmn_nursery_spawn_pinned(cx, n, 0, pp_side, a0, NULL);
	return cbcmn_nursery_await_all(cx, n);
}

/* A ping-pong of rounds on rt, on channels of its own: lane messages and
 * doorbells on both executors. */
static inline void pingpong(cbcmn_runtime *rt, long rounds)
{
	struct pp p = {.rounds = rounds};
	int64_t r;
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(long), &p.ab), 0);
	assert_int_equal(cbcmn_chan_create(rt, 1, sizeof(long), &p.ba), 0);
	assert_int_equal(cbcmn_runtime_run(rt, pp_main, &p, &r), 0);
	assert_int_equal(r, 0);
	cbcmn_chan_destroy(p.ab);
	cbcmn_chan_destroy(p.ba);
}

/* ---- fork-join until told to stop ----------------------------------------- */

/* fib(n) on rt, again and again usleep(pause_us) apart, until a byte (or
 * EOF) comes on descriptor in (left unread): 0, or -1 when a run failed. */
static inline int fib_until_byte(cbcmn_runtime *rt, int in, int n, useconds_t pause_us)
{
	for (;;) {
		struct pollfd p = {.fd = in, .events = POLLIN};
		if (poll(&p, 1, 0) != 0)
			return 0;
		struct fib f = {.n = n};
		int64_t r;
		if (cbcmn_runtime_run(rt, fib_task, &f, &r) || r)
			return -1;
		usleep(pause_us);
	}
}

/* Role --run: a default runtime busy with fib_until_byte(n, pause_us) on
 * in, then destroyed.  The exit status. */
static inline int child_run(int in, int n, useconds_t pause_us)
{
	cbcmn_runtime *rt = NULL;
	if (cbcmn_runtime_create(NULL, &rt))
		return 1;
	if (fib_until_byte(rt, in, n, pause_us))
		return 1;
	cbcmn_runtime_destroy(rt);
	return 0;
}

/* ---- a runtime gone quiet --------------------------------------------------- */

/* rt's first n executors' stats into per once two snapshots 20 ms apart
 * agree (every executor parked), or after T_STALL_NS; prev: n more of
 * scratch. */
static inline void quiet_stats(cbcmn_runtime *rt, cbcmn_executor_stats *per, cbcmn_executor_stats *prev,
			       uint32_t n)
{
	cbcmn_stats st;
	cbcmn_stats_snapshot(rt, &st, prev, n);
	for (uint64_t until = t_now_ns() + T_STALL_NS; t_now_ns() < until;) {
		usleep(20000);
		cbcmn_stats_snapshot(rt, &st, per, n);
		if (!memcmp(prev, per, n * sizeof(*per)))
			break;
		memcpy(prev, per, n * sizeof(*per));
	}
}

#endif
