/* test_stream_fixed.c: a stream's socket in its executor's fixed-file table
 * (lib/stream.c, "fixed files"): the table lets a closed stream's socket go
 * at once, slots are reused, and streams beyond the table run on their
 * descriptors.  On the epoll backend, or a kernel whose table keeps dropped
 * files (before 6.13), no table is used and the same behaviour is checked. */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "helpers.h"
#include "../lib/runtime.h"

/* Slots of the calling task's executor's table holding a socket. */
static uint32_t slots_used(cbcmn_cx *cx)
{
	const struct cbcmn__ring *r = &((struct cbcmn_task *)cx)->exec->ring;
	return r->fslots_cap - r->fslots_free;
}

static bool fixed(cbcmn_cx *cx)
{
	return cbcmn__fixed_files(((struct cbcmn_task *)cx)->rt);
}

/* One byte sent by the peer comes back from the stream, and is byte. */
static int64_t one_byte(cbcmn_cx *cx, cbcmn_stream *s, int peer, char byte)
{
	if (send(peer, &byte, 1, MSG_NOSIGNAL) != 1)
		return -errno;
	const void *d;
	int64_t n = cbcmn_stream_recv(cx, s, &d);
	if (n != 1)
		return n < 0 ? n : -EPROTO;
	return *(const char *)d == byte ? 0 : -EPROTO;
}

/* ---- a closed stream's socket goes at once, beside an older stream ------------ */

struct two {
	int a[2], b[2];
	uint32_t used_open, used_after;
	bool fixed;
};

static int64_t close_younger(cbcmn_cx *cx, void *arg)
{
	struct two *w = arg;
	cbcmn_stream *sa, *sb;
	int rc = cbcmn_stream_open(cx, w->a[0], &sa);
	if (rc)
		return rc;
	/* a's multishot recv armed by a first recv, and left armed (its
	 * peer sends nothing more): it holds whatever the kernel makes a
	 * fixed-file request hold.  (A stream's recv is armed by its first
	 * cbcmn_stream_recv(), not by its open: without this one nothing of
	 * a's was in the kernel, and the test checked no older request.) */
	int64_t r = one_byte(cx, sa, w->a[1], 'a');
	if (r)
		return r;
	if ((rc = cbcmn_stream_open(cx, w->b[0], &sb)) != 0)
		return rc;
	r = one_byte(cx, sb, w->b[1], 'b');
	if (r)
		return r;
	w->fixed = fixed(cx);
	w->used_open = slots_used(cx);
	if ((rc = cbcmn_stream_close(cx, sb)) != 0)
		return rc;
	w->used_after = slots_used(cx);
	close(w->b[0]);
	/* b's socket has no descriptor and no stream: its peer reads EOF
	 * now, while a's recv is still in the kernel. */
	char c;
	r = recv(w->b[1], &c, 1, MSG_DONTWAIT) == 0 ? 0 : -EBUSY;
	rc = cbcmn_stream_close(cx, sa);
	return r ? r : rc;
}

/* Before 6.13 a fixed file the table dropped was put only once every
 * request submitted before the drop had ended: a's multishot recv would
 * have held b's socket open (no EOF, no FIN) until a ended.  The probe
 * (ring.c, fixed_drop_is_prompt()) keeps such kernels off the table. */
static void test_closed_stream_lets_its_socket_go_beside_an_older_one(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_skip_without_streams(rt);
	struct two w;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w.a), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, w.b), 0);
	assert_int_equal(t_run_pinned(rt, 0, close_younger, &w), 0);
	printf("  streams in a fixed-file table: %s\n", w.fixed ? "yes" : "no (the kernel's table keeps "
				 "dropped files, or epoll)");
	if (w.fixed) {
		assert_int_equal(w.used_open, 2);
		assert_int_equal(w.used_after, 1);
	} else {
		assert_int_equal(w.used_open, 0);
	}
	close(w.a[0]);
	close(w.a[1]);
	close(w.b[1]);
	t_destroy(rt);
}

/* ---- the program closes the socket while the stream's recv waits -------------- */

struct early {
	int sv[2];
	_Atomic int waiting;
	char got;
};

static void *close_under_recv(void *arg)
{
	struct early *x = arg;
	while (!atomic_load(&x->waiting))
		usleep(1000);
	usleep(20000); /* the task is in cbcmn_stream_recv() by now, most likely */
	close(x->sv[0]);
	char c = 'x';
	(void)!send(x->sv[1], &c, 1, MSG_NOSIGNAL);
	return NULL;
}

static int64_t recv_past_close(cbcmn_cx *cx, void *arg)
{
	struct early *x = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, x->sv[0], &s);
	if (rc)
		return rc;
	atomic_store(&x->waiting, 1);
	const void *d;
	int64_t n = cbcmn_stream_recv(cx, s, &d);
	if (n == 1)
		x->got = *(const char *)d;
	rc = cbcmn_stream_close(cx, s);
	return n == 1 ? rc : (n < 0 ? n : -EPROTO);
}

/* close(2) of a stream's socket while its recv waits (a misuse: the
 * socket is the program's to close after the stream) closes nothing under
 * the stream: its recv goes on with the socket and gets what comes, as a
 * request's own file reference did before the table.  Once the stream is
 * closed nothing holds the socket: the peer's send fails. */
static void test_socket_closed_while_the_recv_waits(void **state)
{
	(void)state;
	/* The epoll backend does not see a close(2) behind its back at all
	 * (docs/IO.md, "Backends"): nothing to check there. */
	T_SKIP_UNLESS_IO_URING("a request's hold on its file");
	cbcmn_runtime *rt = t_runtime(1);
	t_skip_without_streams(rt);
	struct early x = {.waiting = 0};
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x.sv), 0);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, close_under_recv, &x), 0);
	assert_int_equal(t_run_pinned(rt, 0, recv_past_close, &x), 0);
	pthread_join(th, NULL);
	assert_int_equal(x.got, 'x');
	char c = 'y';
	assert_int_equal(send(x.sv[1], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT), -1);
	assert_int_equal(errno, EPIPE);
	close(x.sv[1]);
	t_destroy(rt);
}

/* ---- descriptors and slots reused ---------------------------------------------- */

#define ROUNDS 300

struct reuse {
	uint32_t used_end;
	bool fixed;
};

static int64_t reuse_rounds(cbcmn_cx *cx, void *arg)
{
	struct reuse *u = arg;
	int old[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, old))
		return -errno;
	cbcmn_stream *so;
	int64_t rc = cbcmn_stream_open(cx, old[0], &so);
	for (int i = 0; rc == 0 && i < ROUNDS; i++) {
		/* Each round's sockets take the numbers the last one freed,
		 * and its stream the slot: the byte must be this round's. */
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
			return -errno;
		cbcmn_stream *s;
		if ((rc = cbcmn_stream_open(cx, sv[0], &s)) == 0) {
			rc = one_byte(cx, s, sv[1], (char)i);
			int crc = cbcmn_stream_close(cx, s);
			rc = rc ? rc : crc;
		}
		close(sv[0]);
		char c;
		if (rc == 0 && recv(sv[1], &c, 1, MSG_DONTWAIT) != 0)
			rc = -EBUSY; /* the socket outlived its descriptor and stream */
		close(sv[1]);
		if (rc == 0 && i % 50 == 0)
			rc = one_byte(cx, so, old[1], 'o'); /* the older stream still works */
	}
	u->fixed = fixed(cx);
	if (rc == 0)
		rc = cbcmn_stream_close(cx, so);
	u->used_end = slots_used(cx);
	close(old[0]);
	close(old[1]);
	return rc;
}

static void test_descriptors_and_slots_reused(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_skip_without_streams(rt);
	struct reuse u = {0};
	assert_int_equal(t_run_pinned(rt, 0, reuse_rounds, &u), 0);
	assert_int_equal(u.used_end, 0);
	t_destroy(rt);
}

/* ---- more streams than the table has slots ------------------------------------- */

#define MANY 24
#define TABLE 6 /* RLIMIT_NOFILE at the first open: the table's size */

struct many {
	int sv[MANY][2];
	struct rlimit rl;
	uint32_t used;
	bool fixed;
};

static int64_t many_streams(cbcmn_cx *cx, void *arg)
{
	struct many *m = arg;
	cbcmn_stream *s[MANY];
	int64_t rc = 0;
	int n;
	/* The kernel takes no table larger than RLIMIT_NOFILE: lowered for
	 * the first open, the table has TABLE slots. */
	struct rlimit low = {TABLE, m->rl.rlim_max};
	if (setrlimit(RLIMIT_NOFILE, &low))
		return -errno;
	rc = cbcmn_stream_open(cx, m->sv[0][0], &s[0]);
	if (setrlimit(RLIMIT_NOFILE, &m->rl))
		return -errno;
	for (n = rc == 0; rc == 0 && n < MANY; n++)
		rc = cbcmn_stream_open(cx, m->sv[n][0], &s[n]);
	if (rc)
		n--;
	m->fixed = fixed(cx);
	m->used = slots_used(cx);
	/* Twice round: in the table and beyond it, every stream gets its own
	 * peer's byte. */
	for (int r = 0; rc == 0 && r < 2; r++)
		for (int i = 0; rc == 0 && i < n; i++)
			rc = one_byte(cx, s[i], m->sv[i][1], (char)(i + r * MANY));
	for (int i = 0; i < n; i++) {
		int crc = cbcmn_stream_close(cx, s[i]);
		rc = rc ? rc : crc;
	}
	return rc ? rc : (int64_t)slots_used(cx);
}

static void test_more_streams_than_the_table_holds(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_skip_without_streams(rt); /* its probe opened no table: the stream was closed */
	struct many m;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &m.rl), 0);
	for (int i = 0; i < MANY; i++)
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, m.sv[i]), 0);
	/* The probe's open made the table already: a new runtime's comes
	 * with the first open of many_streams(). */
	t_destroy(rt);
	rt = t_runtime(1);
	assert_int_equal(t_run_pinned(rt, 0, many_streams, &m), 0);
	assert_int_equal(m.used, m.fixed ? TABLE : 0);
	for (int i = 0; i < MANY; i++) {
		close(m.sv[i][0]);
		close(m.sv[i][1]);
	}
	t_destroy(rt);
}

/* ---- the table or a slot refused (fault site "fixed") --------------------------- */

#define REFUSED 3

struct refused {
	int sv[REFUSED][2];
	uint32_t used[REFUSED]; /* slots in use after each open */
	uint32_t used_end;
	int64_t eof[REFUSED];   /* each peer's read once its stream and descriptor closed */
	int64_t eof_late[REFUSED]; /* and once the runtime is destroyed */
};

/* Streams opened in turn, each checked with its own peer's bytes, then
 * closed with their descriptors: each peer must read EOF at once (its
 * socket let go, whether it sat in a slot or not). */
static int64_t refused_streams(cbcmn_cx *cx, void *arg)
{
	struct refused *f = arg;
	cbcmn_stream *s[REFUSED];
	int64_t rc;
	for (int i = 0; i < REFUSED; i++) {
		if ((rc = cbcmn_stream_open(cx, f->sv[i][0], &s[i])) != 0)
			return rc;
		f->used[i] = slots_used(cx);
	}
	for (int r = 0; r < 2; r++)
		for (int i = 0; i < REFUSED; i++)
			if ((rc = one_byte(cx, s[i], f->sv[i][1], (char)('a' + i + r * REFUSED))) != 0)
				return rc;
	for (int i = 0; i < REFUSED; i++) {
		if ((rc = cbcmn_stream_close(cx, s[i])) != 0)
			return rc;
		close(f->sv[i][0]);
		char c;
		f->eof[i] = recv(f->sv[i][1], &c, 1, MSG_DONTWAIT);
	}
	f->used_end = slots_used(cx);
	return 0;
}

/* A fresh runtime, one executor, the fault site armed with plan: its
 * first stream makes the table.  False: no fault injection (skipped). */
static bool refused_run(const struct cbcmn__fault_plan *plan, struct refused *f)
{
	cbcmn_runtime *rt = t_runtime(1);
	t_skip_without_streams(rt);
	if (!cbcmn__fixed_files((struct cbcmn_runtime *)rt)) {
		t_destroy(rt);
		T_SKIP("no fixed files here (kernel before 6.13, or epoll)");
		return false;
	}
	t_destroy(rt); /* the probe's stream made the table: a new runtime */
	if (!cbcmn__fault_arm(CBCMN__F_FIXED, plan)) {
		T_SKIP("no fault injection in this build (make SAN=asan)");
		return false;
	}
	for (int i = 0; i < REFUSED; i++)
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->sv[i]), 0);
	rt = t_runtime(1);
	int64_t rc = t_run_pinned(rt, 0, refused_streams, f);
	cbcmn__fault_disarm_all();
	t_destroy(rt);
	assert_int_equal(rc, 0);
	/* A socket still held after its close, by a slot that could not be
	 * emptied, goes with the ring: its peer reads EOF (the ring's files
	 * are put by the kernel's exit work: not within the close; the
	 * suite's hang bound, a workqueue beside the hog may take seconds). */
	for (int i = 0; i < REFUSED; i++) {
		struct pollfd p = {.fd = f->sv[i][1], .events = POLLIN};
		char c;
		f->eof_late[i] = poll(&p, 1, (int)T_STALL_S * 1000) == 1
					 ? recv(f->sv[i][1], &c, 1, MSG_DONTWAIT)
					 : -2;
		close(f->sv[i][1]);
	}
	return true;
}

/* The kernel short of memory for the table: its registration fails once,
 * is not asked again at each stream, and every stream runs on its
 * descriptor, its socket let go at its close. */
static void test_table_refused_streams_use_descriptors(void **state)
{
	(void)state;
	struct cbcmn__fault_plan plan = {.nth = 1, .err = -ENOMEM};
	struct refused f = {0};
	if (!refused_run(&plan, &f))
		return;
	for (int i = 0; i < REFUSED; i++) {
		assert_int_equal(f.used[i], 0);
		assert_int_equal(f.eof[i], 0);
	}
	assert_int_equal(f.used_end, 0);
	assert_int_equal(cbcmn__fault_hits(CBCMN__F_FIXED), 1);
}

/* Hits: the table (1) and stream 0's slot (2) at its open, the slots of
 * streams 1 and 2 (3, 4), then the emptying of 0's and 2's (5, 6).  Hits
 * 3 and 6 fail.  Stream 1's slot refused (the kernel short of memory):
 * it runs on its descriptor beside streams in slots, and its close
 * touches no slot.  Stream 2's slot cannot be emptied: it is not reused,
 * its socket goes with the ring, and nothing else breaks. */
static void test_slot_refused_stream_uses_its_descriptor(void **state)
{
	(void)state;
	struct cbcmn__fault_plan plan = {.nth = 3, .every = 3, .err = -ENOMEM};
	struct refused f = {0};
	if (!refused_run(&plan, &f))
		return;
	assert_int_equal(f.used[0], 1);
	assert_int_equal(f.used[1], 1);
	assert_int_equal(f.used[2], 2);
	assert_int_equal(f.used_end, 1);
	assert_int_equal(f.eof[0], 0);
	assert_int_equal(f.eof[1], 0);
	assert_int_equal(f.eof[2], -1); /* held by its slot */
	assert_int_equal(f.eof_late[2], 0);
}

/* ---- the executor's thread dies with a stream in its table ---------------------- */

struct death {
	int a[2], b[2];
	int64_t a_after;
	uint32_t used_end;
};

static int64_t death_main(cbcmn_cx *cx, void *arg)
{
	struct death *d = arg;
	cbcmn_stream *sa, *sb;
	cbcmn_nursery *n;
	int64_t rc = cbcmn_stream_open(cx, d->a[0], &sa);
	if (rc || (rc = one_byte(cx, sa, d->a[1], 'a')) != 0)
		return rc;
	if ((rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n)) != 0 ||
	    (rc = cbcmn_nursery_spawn_pinned(cx, n, 0, t_thread_quitter, NULL, NULL)) != 0 ||
	    cbcmn_nursery_await_all(cx, n) != CBCMN_EPANIC)
		return -EPROTO;
	/* The old ring and its table are gone: a's slot must not be emptied
	 * in the new one's, where b's socket may sit. */
	if ((rc = cbcmn_stream_open(cx, d->b[0], &sb)) != 0)
		return rc;
	const void *data;
	d->a_after = cbcmn_stream_recv(cx, sa, &data);
	if ((rc = cbcmn_stream_close(cx, sa)) != 0 || (rc = one_byte(cx, sb, d->b[1], 'b')) != 0)
		return rc;
	rc = cbcmn_stream_close(cx, sb);
	d->used_end = slots_used(cx);
	return rc;
}

/* After its thread died the executor's new ring has a table of its own:
 * the old streams end (-ECANCELED) and close without touching it, a new
 * stream works, and every socket is let go when closed. */
static void test_thread_death_with_a_stream_in_the_table(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime_for_thread_death("a dead thread's ring and its table");
	struct death d = {0};
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, d.a), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, d.b), 0);
	int saved, efd = t_stderr_capture(&saved);
	int64_t r = -1;
	int rc = cbcmn_runtime_run(rt, death_main, &d, &r);
	char msg[4096];
	t_stderr_restore(efd, saved, msg, sizeof(msg));
	assert_int_equal(rc, 0);
	assert_int_equal(r, 0);
	assert_int_equal(d.a_after, CBCMN_ECANCELED);
	assert_int_equal(d.used_end, 0);
	close(d.a[0]);
	close(d.b[0]);
	/* Both sockets go: b's at once, a's once the old ring's exit has
	 * put its table (the kernel's, asynchronous). */
	char c;
	assert_int_equal(recv(d.b[1], &c, 1, MSG_DONTWAIT), 0);
	struct pollfd p = {.fd = d.a[1], .events = POLLIN};
	assert_int_equal(poll(&p, 1, (int)(T_STALL_S * 1000 / 4)), 1);
	assert_int_equal(recv(d.a[1], &c, 1, MSG_DONTWAIT), 0);
	close(d.a[1]);
	close(d.b[1]);
	t_destroy(rt);
}

/* ---- a probe that could not ask is asked again ------------------------------------ */

struct unasked {
	int sv[2][2];
	uint32_t used_starved, used_later;
};

static int64_t open_at_the_fd_limit(cbcmn_cx *cx, void *arg)
{
	struct unasked *u = arg;
	struct rlimit rl, low;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return -errno;
	int lowest = dup(0); /* the number the next descriptor would take */
	if (lowest < 0)
		return -errno;
	close(lowest);
	low = (struct rlimit){(rlim_t)lowest, rl.rlim_max};
	atomic_store(&cbcmn__fixed_prompt, 0); /* not asked yet */
	cbcmn_stream *s0, *s1;
	if (setrlimit(RLIMIT_NOFILE, &low))
		return -errno;
	int rc = cbcmn_stream_open(cx, u->sv[0][0], &s0); /* the probe finds no descriptor */
	if (setrlimit(RLIMIT_NOFILE, &rl))
		return -errno;
	if (rc)
		return rc;
	u->used_starved = slots_used(cx);
	if ((rc = cbcmn_stream_open(cx, u->sv[1][0], &s1)) != 0)
		return rc;
	u->used_later = slots_used(cx);
	int64_t r = one_byte(cx, s0, u->sv[0][1], '0');
	if (!r)
		r = one_byte(cx, s1, u->sv[1][1], '1');
	rc = cbcmn_stream_close(cx, s0);
	int rc1 = cbcmn_stream_close(cx, s1);
	return r ? r : rc ? rc : rc1;
}

/* The first stream of a server at its descriptor limit: the probe cannot
 * open its sockets, so that stream goes without a slot; the next stream,
 * with descriptors to spare, asks again and gets one.  Before, the failed
 * probe counted as "no", and fixed files were off for the process's
 * life. */
static void test_regression_probe_out_of_descriptors_asks_again(void **state)
{
	(void)state;
	T_SKIP_UNLESS_IO_URING("the fixed-file probe");
	cbcmn_runtime *rt = t_runtime(1);
	t_skip_without_streams(rt);
	if (!cbcmn__fixed_files((struct cbcmn_runtime *)rt)) {
		t_destroy(rt);
		T_SKIP("this kernel's table keeps dropped files: no fixed files");
	}
	struct unasked u = {0};
	for (int i = 0; i < 2; i++)
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, u.sv[i]), 0);
	assert_int_equal(t_run_pinned(rt, 0, open_at_the_fd_limit, &u), 0);
	for (int i = 0; i < 2; i++) {
		close(u.sv[i][0]);
		close(u.sv[i][1]);
	}
	t_destroy(rt);
	assert_int_equal(u.used_starved, 0);
	assert_int_equal(u.used_later, 1);
}

/* ---- the probe at the first stream, not at create ------------------------------ */

static int64_t seven(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 7;
}

/* A program whose seccomp filter kills socketpair(2) (systemd's
 * SystemCallFilter=~@network-io: a service that uses no socket) creates a
 * runtime and runs a task.  The probe of fixed files (two socketpairs)
 * ran in cbcmn_runtime_create(), and the filter killed the program there
 * (SIGSYS); it now runs at the first stream.  In a child: the filter is
 * for good. */
static void test_regression_create_without_socketpair(void **state)
{
	(void)state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sock_filter f[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socketpair, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog prog = {sizeof(f) / sizeof(f[0]), f};
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
			_exit(2);
		cbcmn_runtime *rt;
		int64_t r = 0;
		if (cbcmn_runtime_create(NULL, &rt) || cbcmn_runtime_run(rt, seven, NULL, &r))
			_exit(3);
		cbcmn_runtime_destroy(rt);
		_exit(r == 7 ? 0 : 4);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		fail_msg("the runtime's creator was killed by signal %d", WTERMSIG(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_closed_stream_lets_its_socket_go_beside_an_older_one),
		T_WATCHED_TEST(test_socket_closed_while_the_recv_waits),
		T_WATCHED_TEST(test_descriptors_and_slots_reused),
		T_WATCHED_TEST(test_more_streams_than_the_table_holds),
		T_WATCHED_TEST(test_table_refused_streams_use_descriptors),
		T_WATCHED_TEST(test_slot_refused_stream_uses_its_descriptor),
		T_WATCHED_TEST(test_regression_create_without_socketpair),
		T_WATCHED_TEST(test_regression_probe_out_of_descriptors_asks_again),
		T_WATCHED_TEST(test_thread_death_with_a_stream_in_the_table),
	};
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
