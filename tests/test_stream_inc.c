/* test_stream_inc.c: a stream pool of incremental buffers (lib/stream.c,
 * IOU_PBUF_RING_INC, Linux 6.12): small receives packed one after another
 * in a buffer, whichever streams they are for, and a buffer back in the
 * ring only once the kernel is done with it and every chunk in it was
 * given back.  The suite runs twice: as the runtime chooses (incremental
 * on a ring where the kernel has it), and with CBCMN_PBUF_INC=0 (whole
 * buffers, as on the epoll backend and before 6.12): the same behaviour. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>

#include "helpers.h"
#include "../lib/fault.h"
#include "../lib/runtime.h"

#define BUF 4096u /* the pool's buffers (the default stream_buf_size) */

static struct cbcmn__pool_state pool_state(cbcmn_cx *cx)
{
	struct cbcmn__pool_state st;
	cbcmn__bufpool_state(((struct cbcmn_task *)cx)->exec, &st);
	return st;
}

/* Incremental buffers are what the pool asks the kernel for: on a ring,
 * CBCMN_PBUF_INC not 0. */
static bool inc_asked(cbcmn_cx *cx)
{
	const char *v = getenv("CBCMN_PBUF_INC");
	return !((struct cbcmn_task *)cx)->exec->ep && !(v && strcmp(v, "0") == 0);
}

/* Incremental buffers are what this run expects: asked for, and a kernel
 * of 6.12 or later. */
static bool inc_expected(cbcmn_cx *cx)
{
	if (!inc_asked(cx))
		return false;
	struct utsname u;
	int maj = 0, min = 0;
	if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &maj, &min) != 2)
		return false;
	return maj > 6 || (maj == 6 && min >= 12);
}

/* Byte i of what stream k's peer sends: no stretch of one stream's bytes
 * is another's, or the same stream's elsewhere. */
static char byte_at(int k, size_t i)
{
	return (char)(k * 37 + (int)i * 7 + (int)(i / 251));
}

static bool bytes_are(const void *d, size_t len, int k, size_t at)
{
	const char *p = d;
	for (size_t i = 0; i < len; i++)
		if (p[i] != byte_at(k, at + i))
			return false;
	return true;
}

/* What stream k's peer sends and its reader took so far. */
struct flow {
	int k;
	int sv[2];
	size_t sent, got;
};

/* Writes the next len bytes of f to its peer, then sleeps: the kernel may
 * receive them on their own (or together with the next: every check
 * below takes chunks as the byte stream they are). */
static int put(cbcmn_cx *cx, struct flow *f, size_t len)
{
	char m[512];
	if (len > sizeof(m))
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		m[i] = byte_at(f->k, f->sent + i);
	if (write(f->sv[1], m, len) != (ssize_t)len)
		return -EIO;
	f->sent += len;
	return cbcmn_sleep(cx, 50000);
}

/* The next chunk of s, checked against f: its length (<= 0 at the end). */
static int64_t take(cbcmn_cx *cx, cbcmn_stream *s, struct flow *f, const void **d)
{
	int64_t n = cbcmn_stream_recv(cx, s, d);
	if (n > 0) {
		TASK_CHECK(f->got + (size_t)n <= f->sent && bytes_are(*d, (size_t)n, f->k, f->got));
		f->got += (size_t)n;
	}
	return n;
}

static int flow_open(cbcmn_cx *cx, struct flow *f, int k, cbcmn_stream **s)
{
	*f = (struct flow){.k = k};
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->sv))
		return -errno;
	return cbcmn_stream_open(cx, f->sv[0], s);
}

static void flow_close(struct flow *f)
{
	for (int i = 0; i < 2; i++)
		if (f->sv[i] >= 0)
			close(f->sv[i]);
}

/* Nothing of the pool held any more: every chunk given back, every full
 * buffer back in the ring. */
static bool pool_idle(cbcmn_cx *cx)
{
	struct cbcmn__pool_state st = pool_state(cx);
	return st.out == 0 && st.chunks == 0;
}

static int two_open(cbcmn_cx *cx, struct flow *a, int ka, cbcmn_stream **sa, struct flow *b,
		    cbcmn_stream **sb)
{
	int rc = flow_open(cx, a, ka, sa);
	return rc ? rc : flow_open(cx, b, ka + 1, sb);
}

/* Both closed, and then the pool holds nothing. */
static void two_close(cbcmn_cx *cx, cbcmn_stream *sa, cbcmn_stream *sb, struct flow *a,
		      struct flow *b)
{
	TASK_CHECK(cbcmn_stream_close(cx, sa) == 0);
	TASK_CHECK(cbcmn_stream_close(cx, sb) == 0);
	TASK_CHECK(pool_idle(cx));
	flow_close(a);
	flow_close(b);
}

/* fn run on rt's executor 0, its checks checked, rt destroyed. */
static void run_on(cbcmn_runtime *rt, cbcmn_task_fn fn)
{
	t_skip_without_streams(rt);
	assert_int_equal(t_run_pinned(rt, 0, fn, NULL), 0);
	ASSERT_TASK_CHECKS();
	t_destroy(rt);
}

/* ---- packing -------------------------------------------------------------------- */

static int64_t packs(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct flow f;
	cbcmn_stream *s;
	int rc = flow_open(cx, &f, 0, &s);
	if (rc)
		return rc;
	const char *prev = NULL;
	int64_t prev_n = 0;
	for (int r = 0; r < 8; r++) {
		TASK_CHECK(put(cx, &f, 64) == 0);
		const void *d;
		int64_t n = take(cx, s, &f, &d); /* waits: the receive is on its own */
		TASK_CHECK(n == 64);
		/* Incremental: each right after the one before, in the same
		 * buffer; whole buffers: each in a buffer of its own. */
		if (prev && inc_expected(cx))
			TASK_CHECK((const char *)d == prev + prev_n);
		else if (prev)
			TASK_CHECK((const char *)d != prev + prev_n);
		prev = d;
		prev_n = n;
	}
	TASK_CHECK(pool_state(cx).inc == inc_expected(cx));
	TASK_CHECK(cbcmn_stream_close(cx, s) == 0);
	TASK_CHECK(pool_idle(cx));
	flow_close(&f);
	return 0;
}

static void test_small_receives_pack_in_a_buffer(void **state)
{
	(void)state;
	run_on(t_runtime(1), packs);
}

/* ---- many streams in one buffer, consumed out of order ---------------------------- */

#define NS 8
#define ROUNDS 6

/* Messages of NS streams interleaved (so that, incremental, each buffer
 * holds chunks of several), then taken in another order: one chunk of
 * each in reverse, held while more comes for the even streams, the odd
 * ones closed with chunks queued (mid-buffer), the even ones read to
 * the end.  Every chunk is what was sent, and no chunk held is
 * overwritten by receives for the others. */
static int64_t shared(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct flow f[NS];
	cbcmn_stream *s[NS];
	const void *d;
	for (int k = 0; k < NS; k++) {
		int rc = flow_open(cx, &f[k], k, &s[k]);
		if (rc)
			return rc;
		/* Armed: its receives run as data comes. */
		TASK_CHECK(put(cx, &f[k], 10) == 0);
		TASK_CHECK(take(cx, s[k], &f[k], &d) == 10);
	}
	for (int r = 0; r < ROUNDS; r++)
		for (int k = 0; k < NS; k++)
			TASK_CHECK(put(cx, &f[(k * 3 + r) % NS], 48) == 0);
	const void *held[NS];
	int64_t held_n[NS];
	for (int k = NS - 1; k >= 0; k--)
		TASK_CHECK((held_n[k] = take(cx, s[k], &f[k], &held[k])) > 0);
	/* Incremental: the chunks of several streams in one buffer. */
	if (inc_expected(cx))
		TASK_CHECK(((uintptr_t)held[0] & ~(uintptr_t)(BUF - 1)) ==
			   ((uintptr_t)held[1] & ~(uintptr_t)(BUF - 1)));
	/* More for the even streams, past the chunks held: 10 KiB each,
	 * which fills the buffers they are in. */
	for (int r = 0; r < 40; r++)
		for (int k = 0; k < NS; k += 2)
			TASK_CHECK(put(cx, &f[k], 256) == 0);
	for (int k = 1; k < NS; k += 2)
		TASK_CHECK(bytes_are(held[k], (size_t)held_n[k], k, 10)); /* not overwritten */
	for (int k = 1; k < NS; k += 2)
		TASK_CHECK(cbcmn_stream_close(cx, s[k]) == 0); /* chunks queued */
	for (int k = 0; k < NS; k += 2) {
		TASK_CHECK(bytes_are(held[k], (size_t)held_n[k], k, 10));
		close(f[k].sv[1]);
		f[k].sv[1] = -1;
		while (take(cx, s[k], &f[k], &d) > 0)
			;
		TASK_CHECK(f[k].got == f[k].sent);
		TASK_CHECK(cbcmn_stream_close(cx, s[k]) == 0);
	}
	TASK_CHECK(pool_idle(cx));
	for (int k = 0; k < NS; k++)
		flow_close(&f[k]);
	return 0;
}

static void test_streams_share_a_buffer_out_of_order(void **state)
{
	(void)state;
	run_on(t_runtime(1), shared);
}

/* ---- a stream's end in the middle of a buffer ------------------------------------------ */

/* One stream's end (EOF) comes while its chunks are the only ones in
 * the buffer at the ring's head, and they are given back: its end took
 * no bytes, so the kernel is not done with that buffer, and the next
 * stream's bytes land after the chunks, and are read from there (a pool
 * that took the end for the buffer's would put it back in the ring
 * while the kernel goes on filling it). */
static int64_t eof_mid(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct flow a, b;
	cbcmn_stream *sa, *sb;
	int rc = two_open(cx, &a, 7, &sa, &b, &sb);
	if (rc)
		return rc;
	const void *d;
	for (int r = 0; r < 3; r++) {
		TASK_CHECK(put(cx, &a, 100) == 0);
		TASK_CHECK(take(cx, sa, &a, &d) == 100);
	}
	shutdown(a.sv[1], SHUT_WR);
	TASK_CHECK(cbcmn_sleep(cx, 50000) == 0); /* its end received */
	TASK_CHECK(take(cx, sa, &a, &d) == 0); /* gives the last chunk back */
	for (int r = 0; r < 3; r++) {
		TASK_CHECK(put(cx, &b, 50) == 0);
		TASK_CHECK(take(cx, sb, &b, &d) == 50);
	}
	two_close(cx, sa, sb, &a, &b);
	return 0;
}

static void test_end_of_a_stream_mid_buffer(void **state)
{
	(void)state;
	run_on(t_runtime(1), eof_mid);
}

/* The same with an error for the end: stream a's peer closed with bytes
 * of a's unread (AF_UNIX: -ECONNRESET) while a holds a chunk at the head
 * buffer's start.  The chunk stays intact while b's bytes land after it,
 * a's next call says -ECONNRESET and gives it back, and b's next bytes
 * go on after b's. */
static int64_t reset_mid(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct flow a, b;
	cbcmn_stream *sa, *sb;
	int rc = two_open(cx, &a, 11, &sa, &b, &sb);
	if (rc)
		return rc;
	const void *d, *ha;
	TASK_CHECK(put(cx, &a, 100) == 0);
	TASK_CHECK(take(cx, sa, &a, &ha) == 100);
	TASK_CHECK(write(a.sv[0], "x", 1) == 1); /* unread by the peer */
	close(a.sv[1]);
	a.sv[1] = -1;
	TASK_CHECK(cbcmn_sleep(cx, 50000) == 0); /* the error received */
	TASK_CHECK(put(cx, &b, 50) == 0);
	TASK_CHECK(take(cx, sb, &b, &d) == 50);
	TASK_CHECK(bytes_are(ha, 100, 11, 0));
	TASK_CHECK(cbcmn_stream_recv(cx, sa, &d) == -ECONNRESET);
	for (int r = 0; r < 3; r++) {
		TASK_CHECK(put(cx, &b, 50) == 0);
		TASK_CHECK(take(cx, sb, &b, &d) == 50);
	}
	two_close(cx, sa, sb, &a, &b);
	return 0;
}

static void test_reset_of_a_stream_mid_buffer(void **state)
{
	(void)state;
	run_on(t_runtime(1), reset_mid);
}

/* ---- buffers come round ------------------------------------------------------------- */

/* A pool of 8 buffers goes round many times under odd-sized receives of
 * two streams, one reading all it gets, the other holding one chunk
 * across 50 rounds of the first's: buffers fill, come back, and are
 * filled again without a chunk lost, overwritten or left out. */
static int64_t rounds(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct flow a, b;
	cbcmn_stream *sa, *sb;
	int rc = two_open(cx, &a, 1, &sa, &b, &sb);
	if (rc)
		return rc;
	const void *hb = NULL;
	int64_t hb_n = 0;
	size_t hb_at = 0;
	for (int r = 0; r < 600; r++) {
		TASK_CHECK(put(cx, &a, 1 + (size_t)(r * 97) % 300) == 0);
		const void *d;
		while (a.got < a.sent)
			if (take(cx, sa, &a, &d) <= 0)
				return -EIO;
		if (r % 50 == 0) {
			if (hb)
				TASK_CHECK(bytes_are(hb, (size_t)hb_n, 2, hb_at));
			TASK_CHECK(put(cx, &b, 30) == 0);
			hb_at = b.got;
			TASK_CHECK((hb_n = take(cx, sb, &b, &hb)) > 0);
		}
	}
	TASK_CHECK(bytes_are(hb, (size_t)hb_n, 2, hb_at));
	two_close(cx, sa, sb, &a, &b);
	return 0;
}

static void test_buffers_come_round(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.stream_buf_share = 4;
	cfg.stream_bufs_max = 8;
	run_on(t_runtime_cfg(&cfg), rounds);
}

/* ---- cancellation --------------------------------------------------------------------- */

struct cx_args {
	struct flow f;
	_Atomic int state; /* 1: holding a chunk, waiting for the next */
};

/* Opens a stream, takes a chunk, waits for the next: cancelled there, it
 * unwinds, and its stream is closed as it lands (its opener's). */
static int64_t cancelled_reader(cbcmn_cx *cx, void *arg)
{
	struct cx_args *c = arg;
	cbcmn_stream *s;
	int rc = cbcmn_stream_open(cx, c->f.sv[0], &s);
	if (rc)
		return rc;
	const void *d;
	TASK_CHECK(take(cx, s, &c->f, &d) > 0);
	atomic_store(&c->state, 1);
	int64_t n = cbcmn_stream_recv(cx, s, &d);
	TASK_CHECK(n == CBCMN_ECANCELED);
	return n;
}

/* A reader cancelled while it holds a chunk of a buffer that another
 * stream's chunks share: the other stream's chunks are intact, and when
 * both are done the pool holds nothing. */
static int64_t cancel_main(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct cx_args c = {0};
	struct flow o;
	cbcmn_stream *so;
	int rc = flow_open(cx, &o, 3, &so);
	if (rc)
		return rc;
	c.f.k = 4;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c.f.sv))
		return -errno;
	TASK_CHECK(put(cx, &o, 48) == 0);
	TASK_CHECK(put(cx, &c.f, 48) == 0);
	TASK_CHECK(put(cx, &o, 48) == 0);
	cbcmn_nursery *n;
	if ((rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n)) != 0)
		return rc;
	cbcmn_nursery_spawn_pinned(cx, n, 0, cancelled_reader, &c, NULL);
	while (atomic_load(&c.state) != 1)
		cbcmn_yield(cx);
	TASK_CHECK(put(cx, &o, 48) == 0); /* (the reader waits meanwhile) */
	cbcmn_nursery_cancel(n);
	cbcmn_nursery_await_all(cx, n);
	const void *d;
	while (o.got < o.sent)
		if (take(cx, so, &o, &d) <= 0)
			return -EIO;
	TASK_CHECK(cbcmn_stream_close(cx, so) == 0);
	TASK_CHECK(pool_idle(cx));
	flow_close(&o);
	flow_close(&c.f);
	return 0;
}

static void test_cancelled_reader_gives_its_chunks_back(void **state)
{
	(void)state;
	run_on(t_runtime(1), cancel_main);
}

/* ---- sends from a shared buffer --------------------------------------------------------- */

/* len bytes from fd, read without blocking the executor (whose ring
 * sends them): -EIO if they do not come. */
static int get_back(cbcmn_cx *cx, int fd, char *buf, size_t len)
{
	size_t got = 0;
	for (int i = 0; got < len && i < 200000; i++) {
		ssize_t n = recv(fd, buf + got, len - got, MSG_DONTWAIT);
		if (n > 0)
			got += (size_t)n;
		else if (n == 0 || (errno != EAGAIN && errno != EINTR))
			return -EIO;
		else
			cbcmn_sleep(cx, 20000);
	}
	return got == len ? 0 : -EIO;
}

/* Echo of chunks of two streams that share buffers: each send takes only
 * the part of its chunk it names, and the buffers come back after. */
static int64_t echoes(cbcmn_cx *cx, void *arg)
{
	(void)arg;
	struct flow a, b;
	cbcmn_stream *sa, *sb;
	int rc = two_open(cx, &a, 5, &sa, &b, &sb);
	if (rc)
		return rc;
	for (int r = 0; r < 200; r++) {
		TASK_CHECK(put(cx, &a, 40) == 0);
		TASK_CHECK(put(cx, &b, 24) == 0);
		const void *da, *db;
		size_t at_a = a.got, at_b = b.got;
		int64_t na = take(cx, sa, &a, &da), nb = take(cx, sb, &b, &db);
		TASK_CHECK(na == 40 && nb == 24);
		if (na != 40 || nb != 24)
			return -EIO;
		TASK_CHECK(cbcmn_stream_send(cx, sa, da, 40, MSG_NOSIGNAL) == 0);
		TASK_CHECK(cbcmn_stream_send(cx, sb, (const char *)db + 4, 20, MSG_NOSIGNAL) == 0);
		char back[64];
		TASK_CHECK(get_back(cx, a.sv[1], back, 40) == 0 && bytes_are(back, 40, 5, at_a));
		TASK_CHECK(get_back(cx, b.sv[1], back, 20) == 0 && bytes_are(back, 20, 6, at_b + 4));
	}
	two_close(cx, sa, sb, &a, &b);
	return 0;
}

static void test_sends_of_chunks_that_share_a_buffer(void **state)
{
	(void)state;
	run_on(t_runtime(1), echoes);
}

/* ---- the kernel refuses the flag ---------------------------------------------------------- */

/* The pool's registration with IOU_PBUF_RING_INC refused, as a kernel
 * before 6.12 refuses it (the pbuf_inc fault site): the pool is
 * registered again with whole buffers, under the same group (a ring left
 * half registered would make that say -EEXIST, and the stream fail), and
 * serves: each chunk in a buffer of its own, every byte as sent, nothing
 * held after the close. */
static int64_t refused(cbcmn_cx *cx, void *arg)
{
	bool *inc_wanted = arg;
	*inc_wanted = inc_asked(cx); /* (before 6.12 the fault answers first) */
	struct flow f;
	cbcmn_stream *s;
	int rc = flow_open(cx, &f, 9, &s);
	if (rc)
		return rc;
	TASK_CHECK(!pool_state(cx).inc);
	const void *d, *prev = NULL;
	for (int r = 0; r < 20; r++) {
		TASK_CHECK(put(cx, &f, 64) == 0);
		TASK_CHECK(take(cx, s, &f, &d) == 64);
		TASK_CHECK((const char *)d != (const char *)prev + 64);
		prev = d;
	}
	TASK_CHECK(cbcmn_stream_close(cx, s) == 0);
	TASK_CHECK(pool_idle(cx));
	flow_close(&f);
	return 0;
}

static void test_a_refused_flag_falls_back_to_whole_buffers(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	t_skip_without_streams(rt);
	t_destroy(rt); /* its probe made the pool: a new runtime */
	const struct cbcmn__fault_plan once = {.nth = 1, .err = -EINVAL};
	if (!cbcmn__fault_arm(CBCMN__F_PBUF_INC, &once)) {
		T_SKIP("no fault injection in this build (make SAN=asan)");
		return;
	}
	bool inc_wanted = false;
	rt = t_runtime(1);
	int64_t rc = t_run_pinned(rt, 0, refused, &inc_wanted);
	uint64_t fails = cbcmn__fault_fails(CBCMN__F_PBUF_INC);
	cbcmn__fault_disarm_all();
	t_destroy(rt);
	assert_int_equal(rc, 0);
	ASSERT_TASK_CHECKS();
	/* Asked for, refused once; not asked for, never tried. */
	assert_int_equal(fails, inc_wanted ? 1 : 0);
}

/* ---- CBCMN_PBUF_INC ------------------------------------------------------------------- */

/* A value CBCMN_PBUF_INC does not know ("off" once kept incremental
 * buffers on, "0junk" turned them off) fails the runtime's creation, as
 * CBCMN_BACKEND's do; 1 and empty are the default. */
static void test_a_bad_CBCMN_PBUF_INC_is_refused(void **state)
{
	(void)state;
	const char *was = getenv("CBCMN_PBUF_INC");
	char *saved = was ? strdup(was) : NULL;
	static const struct {
		const char *v;
		int rc;
	} cases[] = {{"off", -EINVAL}, {"0junk", -EINVAL}, {" 0", -EINVAL}, {"no", -EINVAL},
		     {"1", 0},        {"", 0},             {"0", 0}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		setenv("CBCMN_PBUF_INC", cases[i].v, 1);
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 1;
		cbcmn_runtime *rt = NULL;
		int rc = cbcmn_runtime_create(&cfg, &rt);
		if (rc == 0)
			cbcmn_runtime_destroy(rt);
		if (rc != cases[i].rc)
			fail_msg("CBCMN_PBUF_INC=\"%s\": %d, not %d", cases[i].v, rc, cases[i].rc);
	}
	if (saved)
		setenv("CBCMN_PBUF_INC", saved, 1);
	else
		unsetenv("CBCMN_PBUF_INC");
	free(saved);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_small_receives_pack_in_a_buffer),
		T_WATCHED_TEST(test_streams_share_a_buffer_out_of_order),
		T_WATCHED_TEST(test_end_of_a_stream_mid_buffer),
		T_WATCHED_TEST(test_reset_of_a_stream_mid_buffer),
		T_WATCHED_TEST(test_buffers_come_round),
		T_WATCHED_TEST(test_cancelled_reader_gives_its_chunks_back),
		T_WATCHED_TEST(test_sends_of_chunks_that_share_a_buffer),
		T_WATCHED_TEST(test_a_refused_flag_falls_back_to_whole_buffers),
		T_WATCHED_TEST(test_a_bad_CBCMN_PBUF_INC_is_refused),
	};
	int rc = cmocka_run_group_tests_name("as chosen", tests, NULL, NULL);
	setenv("CBCMN_PBUF_INC", "0", 1); /* whole buffers */
	return rc | cmocka_run_group_tests_name("CBCMN_PBUF_INC=0", tests, NULL, NULL);
}
