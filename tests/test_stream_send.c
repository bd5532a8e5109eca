/* test_stream_send.c: cbcmn_stream_send(), a stream's send that does not
 * wait (cbcmn_io.h): order, short sends, errors reported once, close and
 * cancellation with a send stuck, more sends than the SQ holds. */
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>

#include "helpers.h"

static int64_t run_on_0(cbcmn_runtime *rt, cbcmn_task_fn fn, void *arg)
{
	return t_run_pinned(rt, 0, fn, arg);
}

static int64_t probe_stream(cbcmn_cx *cx, void *arg)
{
	int *sv = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, sv[0], &s);
	if (rc)
		return rc;
	return cbcmn_stream_close(cx, s);
}

/* A runtime of n executors where streams work, or the test is skipped. */
static cbcmn_runtime *stream_runtime(uint32_t n)
{
	cbcmn_runtime *rt = t_runtime(n);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	int64_t r = run_on_0(rt, probe_stream, sv);
	close(sv[0]);
	close(sv[1]);
	if (r == -EOPNOTSUPP) {
		t_destroy(rt);
		T_SKIP("this kernel has no multishot recv with buffer rings (6.0)");
	}
	assert_int_equal(r, 0);
	return rt;
}

/* ---- an echo through a small send buffer: order, short sends -------------- */

#define BIG (4u << 20)

struct echo {
	int sv[2];
	uint8_t *sent;
	size_t got;
	int bad;
	int64_t end, flush, close;
};

static void *echo_writer(void *arg)
{
	struct echo *x = arg;
	size_t off = 0;
	while (off < BIG) {
		size_t chunk = 1 + (size_t)rand() % 20000;
		if (chunk > BIG - off)
			chunk = BIG - off;
		ssize_t n = write(x->sv[1], x->sent + off, chunk);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	shutdown(x->sv[1], SHUT_WR);
	return NULL;
}

/* Reads back what the task echoes, in small reads: the task's sends meet a
 * full socket and go out in pieces. */
static void *echo_reader(void *arg)
{
	struct echo *x = arg;
	uint8_t buf[3000];
	while (x->got < BIG) {
		ssize_t n = read(x->sv[1], buf, 1 + (size_t)rand() % sizeof(buf));
		if (n <= 0)
			break;
		if (memcmp(buf, x->sent + x->got, (size_t)n) != 0)
			x->bad = 1;
		x->got += (size_t)n;
	}
	return NULL;
}

static int64_t echo_task(cbcmn_cx *cx, void *arg)
{
	struct echo *x = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, x->sv[0], &s);
	if (rc)
		return rc;
	for (;;) {
		const void *data;
		int64_t n = cbcmn_stream_recv(cx, s, &data);
		if (n <= 0) {
			x->end = n;
			break;
		}
		int64_t r = cbcmn_stream_send(cx, s, data, (size_t)n, MSG_NOSIGNAL);
		if (r) {
			x->end = r;
			break;
		}
	}
	x->flush = cbcmn_stream_send(cx, s, NULL, 0, 0);
	x->close = cbcmn_stream_close(cx, s);
	return 0;
}

static void test_echo_through_a_small_send_buffer(void **state)
{
	(void)state;
	cbcmn_runtime *rt = stream_runtime(2);
	struct echo x = {.sent = malloc(BIG)};
	assert_non_null(x.sent);
	for (size_t i = 0; i < BIG; i++)
		x.sent[i] = (uint8_t)(i * 131 + (i >> 12));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x.sv), 0);
	int small = 2048; /* the kernel's floor: sends of a 4 KiB chunk stop short */
	assert_int_equal(setsockopt(x.sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	pthread_t w, r;
	assert_int_equal(pthread_create(&w, NULL, echo_writer, &x), 0);
	assert_int_equal(pthread_create(&r, NULL, echo_reader, &x), 0);
	assert_int_equal(run_on_0(rt, echo_task, &x), 0);
	pthread_join(w, NULL);
	pthread_join(r, NULL);
	assert_int_equal(x.end, 0); /* EOF, no send failed */
	assert_int_equal(x.flush, 0);
	assert_int_equal(x.close, 0);
	assert_int_equal(x.bad, 0);
	assert_int_equal(x.got, BIG);
	close(x.sv[0]);
	close(x.sv[1]);
	free(x.sent);
	t_destroy(rt);
}

/* ---- arguments ---------------------------------------------------------------- */

static int64_t bad_args_task(cbcmn_cx *cx, void *arg)
{
	int *sv = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, sv[0], &s);
	if (rc)
		return rc;
	int64_t r = 0;
	char own[8] = "xxxxx";
	const void *data;
	if (cbcmn_stream_send(cx, s, own, 1, 0) != -EINVAL) /* no chunk held yet */
		r = 1;
	else if (cbcmn_stream_recv(cx, s, &data) != 5)
		r = 2;
	else if (cbcmn_stream_send(cx, s, data, 6, 0) != -EINVAL) /* past the chunk */
		r = 3;
	else if (cbcmn_stream_send(cx, s, own, 1, 0) != -EINVAL) /* not in it */
		r = 4;
	else if (cbcmn_stream_send(cx, s, (const char *)data + 1, 4, 0) != 0)
		r = 5;
	else if (cbcmn_stream_send(cx, s, data, 1, 0) != -EINVAL) /* handed to the send */
		r = 6;
	else if (cbcmn_stream_send(cx, s, NULL, 0, 0) != 0)
		r = 7;
	else if (cbcmn_stream_send(cx, NULL, data, 1, 0) != -EINVAL ||
		 cbcmn_stream_send(cx, s, NULL, 1, 0) != -EINVAL)
		r = 8;
	cbcmn_stream_close(cx, s);
	return r;
}

static void test_send_takes_only_the_chunk_held(void **state)
{
	(void)state;
	cbcmn_runtime *rt = stream_runtime(1);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(write(sv[1], "hello", 5), 5);
	assert_int_equal(run_on_0(rt, bad_args_task, sv), 0);
	char buf[8] = {0};
	assert_int_equal(read(sv[1], buf, sizeof(buf)), 4);
	assert_string_equal(buf, "ello");
	close(sv[0]);
	close(sv[1]);
	t_destroy(rt);
}

/* ---- a peer gone: the error is reported, once ------------------------------------- */

static int64_t dead_peer_task(cbcmn_cx *cx, void *arg)
{
	int *sv = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, sv[0], &s);
	if (rc)
		return rc;
	const void *data;
	int64_t r[5] = {0};
	if (cbcmn_stream_recv(cx, s, &data) != 3) {
		cbcmn_stream_close(cx, s);
		return 100;
	}
	close(sv[1]); /* the peer goes before the echo */
	sv[1] = -1;
	r[0] = cbcmn_stream_send(cx, s, data, 3, MSG_NOSIGNAL);
	r[1] = cbcmn_stream_recv(cx, s, &data);
	r[2] = cbcmn_stream_recv(cx, s, &data);
	r[3] = cbcmn_stream_send(cx, s, NULL, 0, 0);
	r[4] = cbcmn_stream_send(cx, s, NULL, 0, 0);
	cbcmn_stream_close(cx, s);
	/* On the ring the failure comes with the stream's next call (a recv
	 * that finds the end first returns 0, then a call returns it); on
	 * epoll the send fails itself.  Exactly once either way. */
	int epipe = 0;
	for (int i = 0; i < 5; i++) {
		if (r[i] == -EPIPE)
			epipe++;
		else if (r[i] != 0)
			return 10 + i;
	}
	return epipe == 1 ? 0 : 20 + epipe;
}

static void test_send_to_a_gone_peer_fails_once(void **state)
{
	(void)state;
	cbcmn_runtime *rt = stream_runtime(1);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(write(sv[1], "abc", 3), 3);
	assert_int_equal(run_on_0(rt, dead_peer_task, sv), 0);
	close(sv[0]);
	t_destroy(rt);
}

/* ---- a send stuck on a peer that reads nothing: cancel, close ------------------ */

struct stuck {
	int sv[2];
	cbcmn_nursery *n;
	int64_t first, second, close;
	size_t filled;
};

static int64_t stuck_sender(cbcmn_cx *cx, void *arg)
{
	struct stuck *k = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, k->sv[0], &s);
	if (rc)
		return rc;
	const void *data;
	int64_t n = cbcmn_stream_recv(cx, s, &data);
	if (n != 1) {
		cbcmn_stream_close(cx, s);
		return 100;
	}
	/* Fill the socket: nothing more goes until the peer reads. */
	char junk[4096] = {0};
	while (send(k->sv[0], junk, sizeof(junk), MSG_DONTWAIT) > 0)
		k->filled += sizeof(junk);
	k->first = cbcmn_stream_send(cx, s, data, 1, MSG_NOSIGNAL);
	k->second = cbcmn_stream_send(cx, s, NULL, 0, 0); /* waits for the first */
	k->close = cbcmn_stream_close(cx, s);
	return 0;
}

static int64_t stuck_canceller(cbcmn_cx *cx, void *arg)
{
	struct stuck *k = arg;
	cbcmn_sleep(cx, 30 * 1000000ull);
	cbcmn_nursery_cancel(k->n);
	return 0;
}

static int64_t stuck_main(cbcmn_cx *cx, void *arg)
{
	struct stuck *k = arg;
	int64_t rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &k->n);
	if (rc)
		return rc;
	cbcmn_nursery_spawn_pinned(cx, k->n, 0, stuck_sender, k, NULL);
	cbcmn_nursery_spawn_pinned(cx, k->n, 0, stuck_canceller, k, NULL);
	cbcmn_nursery_await_all(cx, k->n);
	return 0;
}

static void test_cancel_and_close_with_a_send_stuck(void **state)
{
	(void)state;
	cbcmn_runtime *rt = stream_runtime(1);
	struct stuck k = {0};
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, k.sv), 0);
	assert_int_equal(write(k.sv[1], "x", 1), 1);
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, stuck_main, &k, &r), 0);
	assert_int_equal(r, 0);
	assert_true(k.filled > 0);
	/* The ring: the send is queued (0) and the flush waiting for it is
	 * cancelled.  Epoll: the send itself waits and is cancelled, and
	 * the flush finds nothing to wait for. */
	if (k.first == 0)
		assert_int_equal(k.second, CBCMN_ECANCELED);
	else
		assert_int_equal(k.first, CBCMN_ECANCELED);
	assert_int_equal(k.close, 0); /* the stuck send cancelled, not waited for */
	/* Nothing of the cancelled echo came after the filler. */
	char buf[4096];
	size_t got = 0;
	ssize_t n;
	while ((n = recv(k.sv[1], buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		got += (size_t)n;
	assert_int_equal(got, k.filled);
	close(k.sv[0]);
	close(k.sv[1]);
	t_destroy(rt);
}

/* ---- the executor's thread dies with a send in flight ---------------------------- */

struct gone {
	int sv[2];
	_Atomic int stuck;
	int64_t send, flush, close;
	size_t filled;
};

static int64_t gone_sender(cbcmn_cx *cx, void *arg)
{
	struct gone *g = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, g->sv[0], &s);
	if (rc)
		return rc;
	const void *data;
	if (cbcmn_stream_recv(cx, s, &data) != 1) {
		cbcmn_stream_close(cx, s);
		return 100;
	}
	char junk[4096] = {0};
	while (send(g->sv[0], junk, sizeof(junk), MSG_DONTWAIT) > 0)
		g->filled += sizeof(junk);
	g->send = cbcmn_stream_send(cx, s, data, 1, MSG_NOSIGNAL);
	atomic_store(&g->stuck, 1);
	g->flush = cbcmn_stream_send(cx, s, NULL, 0, 0); /* across the thread's death */
	g->close = cbcmn_stream_close(cx, s);
	return 0;
}

static int64_t gone_quitter(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	pthread_exit(NULL);
	return 0;
}

static int64_t gone_main(cbcmn_cx *cx, void *arg)
{
	struct gone *g = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *senders, *quitters;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &senders) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, senders, gone_sender, g, NULL) == 0);
	while (!atomic_load(&g->stuck))
		cbcmn_yield(cx);
	cbcmn_sleep(cx, 2000000); /* the send is in the kernel, waiting for room */
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &quitters) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, quitters, gone_quitter, g, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, quitters) == CBCMN_EPANIC);
	return cbcmn_nursery_await_all(cx, senders);
}

/* The send ends with the ring (-ECANCELED, from the flush waiting for it),
 * its buffer goes back, and the stream closes. */
static void test_thread_death_ends_a_send_in_flight(void **state)
{
	(void)state;
	T_SKIP_UNLESS_IO_URING("a send in flight in the dead thread's ring");
	if (T_ASAN || T_TSAN)
		T_SKIP("sanitizer runtimes do not follow a thread unwinding off a fiber stack");
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.flags = CBCMN_CONFIG_NO_INLINE; /* the quitter on a fiber of its own */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct gone g = {0};
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, g.sv), 0);
	assert_int_equal(write(g.sv[1], "x", 1), 1);
	int saved, efd = t_stderr_capture(&saved);
	int64_t r = -1;
	int rc = cbcmn_runtime_run(rt, gone_main, &g, &r);
	char msg[4096];
	t_stderr_restore(efd, saved, msg, sizeof(msg));
	assert_int_equal(rc, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, 0);
	assert_int_equal(g.send, 0);
	assert_int_equal(g.flush, -ECANCELED);
	assert_int_equal(g.close, 0);
	close(g.sv[0]);
	close(g.sv[1]);
	t_destroy(rt);
}

/* ---- more sends in one turn than the SQ holds ---------------------------------- */

#define MANY 600

struct many {
	int sv[MANY][2];
	_Atomic int bad;
};

struct one {
	struct many *m;
	int i;
};

static int64_t one_echo(cbcmn_cx *cx, void *arg)
{
	struct one *o = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, o->m->sv[o->i][0], &s);
	if (rc)
		return rc;
	const void *data;
	int64_t n = cbcmn_stream_recv(cx, s, &data);
	if (n != sizeof(int) || cbcmn_stream_send(cx, s, data, (size_t)n, MSG_NOSIGNAL) != 0 ||
	    cbcmn_stream_send(cx, s, NULL, 0, 0) != 0)
		atomic_fetch_add(&o->m->bad, 1);
	return cbcmn_stream_close(cx, s);
}

static int64_t many_main(cbcmn_cx *cx, void *arg)
{
	struct many *m = arg;
	static struct one ones[MANY];
	cbcmn_nursery *n;
	int64_t rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	for (int i = 0; i < MANY; i++) {
		ones[i] = (struct one){m, i};
		cbcmn_nursery_spawn_pinned(cx, n, 0, one_echo, &ones[i], NULL);
	}
	return cbcmn_nursery_await_all(cx, n);
}

static void test_more_sends_than_the_sq_holds(void **state)
{
	(void)state;
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 2 * MANY + 64) {
		rl.rlim_cur = rl.rlim_max < 2 * MANY + 64 ? rl.rlim_max : 2 * MANY + 64;
		setrlimit(RLIMIT_NOFILE, &rl);
		if (rl.rlim_cur < 2 * MANY + 64)
			T_SKIP("RLIMIT_NOFILE too low for %d socket pairs", MANY);
	}
	cbcmn_runtime *rt = stream_runtime(1);
	struct many *m = calloc(1, sizeof(*m));
	assert_non_null(m);
	for (int i = 0; i < MANY; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, m->sv[i]), 0);
		assert_int_equal(write(m->sv[i][1], &i, sizeof(i)), sizeof(i));
	}
	int64_t r = -1;
	assert_int_equal(cbcmn_runtime_run(rt, many_main, m, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(atomic_load(&m->bad), 0);
	for (int i = 0; i < MANY; i++) {
		int v = -1;
		assert_int_equal(read(m->sv[i][1], &v, sizeof(v)), sizeof(v));
		assert_int_equal(v, i);
		close(m->sv[i][0]);
		close(m->sv[i][1]);
	}
	free(m);
	t_destroy(rt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_echo_through_a_small_send_buffer),
		T_WATCHED_TEST(test_send_takes_only_the_chunk_held),
		T_WATCHED_TEST(test_send_to_a_gone_peer_fails_once),
		T_WATCHED_TEST(test_cancel_and_close_with_a_send_stuck),
		T_WATCHED_TEST(test_thread_death_ends_a_send_in_flight),
		T_WATCHED_TEST(test_more_sends_than_the_sq_holds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
