/* test_chan: bounded MPMC channels: order, parking, close, try-variants,
 * cancellation, outside threads, reservations (obligations) and their leaks. */
#include "helpers.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>


/* The stress loops: sanitizer runs are short enough to afford a third of
 * the release size (more interleavings for TSan), not the usual tenth. */
#define STRESS(n) ((T_ASAN || T_TSAN) ? (n) / 3 : (n))

#define rt_flags t_runtime_flags

static cbcmn_chan *mkchan(cbcmn_runtime *rt, size_t cap, size_t esize)
{
	cbcmn_chan *c = NULL;
	assert_int_equal(cbcmn_chan_create(rt, cap, esize, &c), 0);
	assert_non_null(c);
	return c;
}

/* Let every other runnable task run until it blocks (one worker). */
static void settle_others(cbcmn_cx *cx, _Atomic int *entered, int want)
{
	while (atomic_load(entered) < want)
		cbcmn_yield(cx);
	for (int i = 0; i < 4; i++)
		cbcmn_yield(cx);
}

/* ---- FIFO, single producer and consumer ---- */

struct spsc {
	cbcmn_chan *c;
	long n;
};

static int64_t spsc_producer(cbcmn_cx *cx, void *arg)
{
	struct spsc *s = arg;
	for (long i = 0; i < s->n; i++)
		TASK_CHECK(cbcmn_chan_send(cx, s->c, &i) == 0);
	TASK_CHECK(cbcmn_chan_close(cx, s->c) == 0);
	return 0;
}

static int64_t spsc_consumer(cbcmn_cx *cx, void *arg)
{
	struct spsc *s = arg;
	long v, want = 0;
	int rc;
	while ((rc = cbcmn_chan_recv(cx, s->c, &v)) == 0) {
		TASK_CHECK(v == want);
		want++;
	}
	TASK_CHECK(rc == -EPIPE);
	TASK_CHECK(want == s->n);
	return 0;
}

static int64_t spsc_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, spsc_consumer, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, spsc_producer, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_fifo_spsc(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct spsc s = {mkchan(rt, 4, sizeof(long)), T_SCALE(20000)};
	t_run(rt, spsc_main, &s, 0);
	assert_int_equal(cbcmn_chan_destroy(s.c), 0);
	t_destroy(rt);
}

/* ---- blocking parks the fiber: other tasks run meanwhile (1 worker) ---- */

struct park {
	cbcmn_chan *c;
	_Atomic int entered;
	_Atomic int log[8];
	_Atomic int nlog;
	_Atomic int received;
	int received_at_send[5];
};

static void logev(struct park *p, int ev)
{
	atomic_store(&p->log[atomic_fetch_add(&p->nlog, 1)], ev);
}

enum { EV_RECV_CALLED = 1, EV_SENDER_RAN, EV_RECV_RETURNED };

static int64_t park_receiver(cbcmn_cx *cx, void *arg)
{
	struct park *p = arg;
	int v = 0;
	logev(p, EV_RECV_CALLED);
	atomic_store(&p->entered, 1);
	TASK_CHECK(cbcmn_chan_recv(cx, p->c, &v) == 0);
	TASK_CHECK(v == 42);
	logev(p, EV_RECV_RETURNED);
	return 0;
}

static int64_t park_sender(cbcmn_cx *cx, void *arg)
{
	struct park *p = arg;
	int v = 42;
	while (!atomic_load(&p->entered))
		cbcmn_yield(cx);
	logev(p, EV_SENDER_RAN);
	TASK_CHECK(cbcmn_chan_send(cx, p->c, &v) == 0);
	return 0;
}

static int64_t park_recv_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, park_sender, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, park_receiver, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* With one worker the sender can only run if the receiver's fiber parked. */
static void test_recv_parks_when_empty(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct park p = {.c = mkchan(rt, 1, sizeof(int))};
	t_run(rt, park_recv_main, &p, 0);
	assert_int_equal(atomic_load(&p.nlog), 3);
	assert_int_equal(atomic_load(&p.log[0]), EV_RECV_CALLED);
	assert_int_equal(atomic_load(&p.log[1]), EV_SENDER_RAN);
	assert_int_equal(atomic_load(&p.log[2]), EV_RECV_RETURNED);
	assert_int_equal(cbcmn_chan_destroy(p.c), 0);
	t_destroy(rt);
}

static int64_t full_sender(cbcmn_cx *cx, void *arg)
{
	struct park *p = arg;
	atomic_store(&p->entered, 1);
	for (int i = 0; i < 5; i++) {
		TASK_CHECK(cbcmn_chan_send(cx, p->c, &i) == 0);
		p->received_at_send[i] = atomic_load(&p->received);
	}
	return 0;
}

static int64_t full_receiver(cbcmn_cx *cx, void *arg)
{
	struct park *p = arg;
	while (!atomic_load(&p->entered))
		cbcmn_yield(cx);
	for (int i = 0; i < 5; i++) {
		int v = -1;
		TASK_CHECK(cbcmn_chan_recv(cx, p->c, &v) == 0);
		TASK_CHECK(v == i);
		atomic_fetch_add(&p->received, 1);
	}
	return 0;
}

static int64_t park_send_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, full_receiver, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, full_sender, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

/* Capacity 2: the third send parks until the receiver (same worker) took one. */
static void test_send_parks_when_full(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct park p = {.c = mkchan(rt, 2, sizeof(int))};
	t_run(rt, park_send_main, &p, 0);
	assert_int_equal(p.received_at_send[0], 0);
	assert_int_equal(p.received_at_send[1], 0);
	assert_true(p.received_at_send[2] >= 1);
	assert_int_equal(atomic_load(&p.received), 5);
	assert_int_equal(cbcmn_chan_destroy(p.c), 0);
	t_destroy(rt);
}

/* ---- MPMC stress: every message received exactly once ---- */

#define NPROD 4
#define NCONS 4

struct mpmc {
	cbcmn_chan *c;
	long per;              /* messages per producer */
	_Atomic uint8_t *seen; /* per message id */
	_Atomic long received;
	int idx_p, idx_c;
	_Atomic int next_p, next_c;
};

static int64_t mpmc_producer(cbcmn_cx *cx, void *arg)
{
	struct mpmc *m = arg;
	int p = atomic_fetch_add(&m->next_p, 1);
	for (long i = 0; i < m->per; i++) {
		long id = p * m->per + i;
		int rc;
		switch (p) {
		case 2: { /* two-phase */
			cbcmn_chan_permit pm;
			TASK_CHECK(cbcmn_chan_reserve(cx, m->c, &pm) == 0);
			TASK_CHECK(cbcmn_chan_commit(cx, &pm, &id) == 0);
			break;
		}
		case 3: /* never blocks */
			while ((rc = cbcmn_chan_try_send(cx, m->c, &id)) == -EAGAIN)
				cbcmn_yield(cx);
			TASK_CHECK(rc == 0);
			break;
		default:
			TASK_CHECK(cbcmn_chan_send(cx, m->c, &id) == 0);
		}
	}
	return 0;
}

static int64_t mpmc_consumer(cbcmn_cx *cx, void *arg)
{
	struct mpmc *m = arg;
	int me = atomic_fetch_add(&m->next_c, 1);
	long last[NPROD] = {-1, -1, -1, -1};
	long id;
	int rc;
	for (;;) {
		if (me == 3) {
			while ((rc = cbcmn_chan_try_recv(cx, m->c, &id)) == -EAGAIN)
				cbcmn_yield(cx);
		} else {
			rc = cbcmn_chan_recv(cx, m->c, &id);
		}
		if (rc != 0)
			break;
		TASK_CHECK(id >= 0 && id < NPROD * m->per);
		if (id < 0 || id >= NPROD * m->per)
			break;
		long p = id / m->per, seq = id % m->per;
		TASK_CHECK(seq > last[p]); /* FIFO per producer, as each consumer sees it */
		last[p] = seq;
		atomic_fetch_add(&m->seen[id], 1);
		atomic_fetch_add(&m->received, 1);
	}
	TASK_CHECK(rc == -EPIPE);
	return 0;
}

static int64_t mpmc_main(cbcmn_cx *cx, void *arg)
{
	struct mpmc *m = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	cbcmn_nursery *prod, *cons;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &cons) == 0);
	for (int i = 0; i < NCONS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, cons, mpmc_consumer, m, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &prod) == 0);
	for (int i = 0; i < NPROD; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, prod, mpmc_producer, m, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_await_all(cx, prod) == 0);
	TASK_CHECK(cbcmn_chan_close(cx, m->c) == 0);
	return cbcmn_nursery_await_all(cx, cons);
}

static void test_mpmc_exactly_once(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct mpmc m = {.c = mkchan(rt, 16, sizeof(long)), .per = STRESS(50000)};
	long total = NPROD * m.per;
	m.seen = calloc((size_t)total, sizeof(*m.seen));
	assert_non_null(m.seen);
	uint64_t t0 = t_now_ns();
	t_run(rt, mpmc_main, &m, 0);
	uint64_t dt = t_now_ns() - t0;
	assert_int_equal(atomic_load(&m.received), total);
	for (long i = 0; i < total; i++)
		if (atomic_load(&m.seen[i]) != 1)
			fail_msg("message %ld received %u times", i, (unsigned)atomic_load(&m.seen[i]));
	printf("[ INFO     ] %ld messages, %d producers x %d consumers, 2 workers: %.0f ns/msg\n",
	       total, NPROD, NCONS, (double)dt / (double)total);
	assert_int_equal(cbcmn_chan_destroy(m.c), 0);
	free(m.seen);
	t_destroy(rt);
}

/* Cancellation racing the hand-offs: consumers, then producers, cancelled
 * mid-stream on three workers.  A send that returned 0 was delivered exactly
 * once (to a consumer, or is still in the channel); one that returned
 * CBCMN_ECANCELED never arrives. */
struct midstream {
	cbcmn_chan *c;
	long per;
	_Atomic uint8_t *sent, *seen;
	_Atomic long received;
	_Atomic int next_p;
	cbcmn_nursery *prod, *cons;
	int64_t prod_rc, cons_rc;
};

static int64_t ms_producer(cbcmn_cx *cx, void *arg)
{
	struct midstream *m = arg;
	int p = atomic_fetch_add(&m->next_p, 1) % NPROD;
	for (long i = 0; i < m->per; i++) {
		long id = p * m->per + i;
		int rc;
		if (p == 2) {
			cbcmn_chan_permit pm;
			rc = cbcmn_chan_reserve(cx, m->c, &pm);
			if (rc == 0)
				TASK_CHECK(cbcmn_chan_commit(cx, &pm, &id) == 0);
		} else {
			rc = cbcmn_chan_send(cx, m->c, &id);
		}
		if (rc != 0) {
			TASK_CHECK(rc == CBCMN_ECANCELED);
			return rc;
		}
		atomic_store(&m->sent[id], 1);
	}
	return 0;
}

static int64_t ms_consumer(cbcmn_cx *cx, void *arg)
{
	struct midstream *m = arg;
	long id;
	int rc;
	while ((rc = cbcmn_chan_recv(cx, m->c, &id)) == 0) {
		TASK_CHECK(id >= 0 && id < NPROD * m->per);
		if (id < 0 || id >= NPROD * m->per)
			return -EINVAL;
		atomic_fetch_add(&m->seen[id], 1);
		atomic_fetch_add(&m->received, 1);
	}
	TASK_CHECK(rc == CBCMN_ECANCELED);
	return rc;
}

static int64_t ms_main(cbcmn_cx *cx, void *arg)
{
	struct midstream *m = arg;
	cbcmn_runtime *rt = cbcmn_cx_runtime(cx);
	long total = NPROD * m->per;
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &m->cons) == 0);
	TASK_CHECK(cbcmn_nursery_open(rt, cx, &m->prod) == 0);
	for (int i = 0; i < NCONS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, m->cons, ms_consumer, m, NULL) == 0);
	for (int i = 0; i < NPROD; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, m->prod, ms_producer, m, NULL) == 0);
	while (atomic_load(&m->received) < total / 3)
		cbcmn_yield(cx);
	cbcmn_nursery_cancel(m->cons);
	m->cons_rc = cbcmn_nursery_await_all(cx, m->cons);
	for (int i = 0; i < 50; i++)
		cbcmn_yield(cx);
	cbcmn_nursery_cancel(m->prod);
	m->prod_rc = cbcmn_nursery_await_all(cx, m->prod);
	return 0;
}

static void test_cancel_midstream_exactly_once(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(3);
	int rounds = (T_ASAN || T_TSAN) ? 6 : 20;
	for (int round = 0; round < rounds; round++) {
		struct midstream m = {.c = mkchan(rt, 4, sizeof(long)), .per = STRESS(20000)};
		long total = NPROD * m.per;
		m.sent = calloc((size_t)total, 1);
		m.seen = calloc((size_t)total, 1);
		assert_non_null(m.sent);
		assert_non_null(m.seen);
		t_run(rt, ms_main, &m, 0);
		assert_int_equal(m.cons_rc, CBCMN_ECANCELED);
		assert_true(m.prod_rc == CBCMN_ECANCELED || m.prod_rc == 0);
		long id;
		while (cbcmn_chan_try_recv(NULL, m.c, &id) == 0) {
			assert_true(id >= 0 && id < total);
			atomic_fetch_add(&m.seen[id], 1);
		}
		long nsent = 0;
		for (long i = 0; i < total; i++) {
			nsent += atomic_load(&m.sent[i]);
			if (atomic_load(&m.seen[i]) != atomic_load(&m.sent[i]))
				fail_msg("round %d: message %ld sent %u, received %u times", round, i,
					 (unsigned)atomic_load(&m.sent[i]),
					 (unsigned)atomic_load(&m.seen[i]));
		}
		assert_true(nsent >= total / 3);
		assert_int_equal(cbcmn_chan_destroy(m.c), 0); /* nobody left on it */
		free(m.sent);
		free(m.seen);
	}
	t_destroy(rt);
}

/* ---- ping-pong between two tasks (hand-off to a parked receiver) ---- */

struct pp {
	cbcmn_chan *ab, *ba;
	long rounds;
};

static int64_t pp_ping(cbcmn_cx *cx, void *arg)
{
	struct pp *p = arg;
	for (long i = 0; i < p->rounds; i++) {
		long v = -1;
		TASK_CHECK(cbcmn_chan_send(cx, p->ab, &i) == 0);
		TASK_CHECK(cbcmn_chan_recv(cx, p->ba, &v) == 0);
		TASK_CHECK(v == i + 1);
	}
	return 0;
}

static int64_t pp_pong(cbcmn_cx *cx, void *arg)
{
	struct pp *p = arg;
	for (long i = 0; i < p->rounds; i++) {
		long v = -1;
		TASK_CHECK(cbcmn_chan_recv(cx, p->ab, &v) == 0);
		TASK_CHECK(v == i);
		v++;
		TASK_CHECK(cbcmn_chan_send(cx, p->ba, &v) == 0);
	}
	return 0;
}

static int64_t pp_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, pp_pong, arg, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, pp_ping, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_ping_pong(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_flags(2, CBCMN_CONFIG_NO_INLINE);
	struct pp p = {mkchan(rt, 1, sizeof(long)), mkchan(rt, 1, sizeof(long)), T_SCALE(20000)};
	t_run(rt, pp_main, &p, 0);
	assert_int_equal(cbcmn_chan_destroy(p.ab), 0);
	assert_int_equal(cbcmn_chan_destroy(p.ba), 0);
	t_destroy(rt);
}

/* ---- close wakes every blocked sender, reserver and receiver ---- */

struct blockers {
	cbcmn_chan *full, *empty;
	_Atomic int entered;
	_Atomic int rc[16];
	_Atomic int next;
	cbcmn_nursery *n;
	int64_t await_rc;
};

static int64_t blk_send(cbcmn_cx *cx, void *arg)
{
	struct blockers *b = arg;
	int me = atomic_fetch_add(&b->next, 1), v = 1000 + me;
	atomic_fetch_add(&b->entered, 1);
	atomic_store(&b->rc[me], cbcmn_chan_send(cx, b->full, &v));
	return 0;
}

static int64_t blk_reserve(cbcmn_cx *cx, void *arg)
{
	struct blockers *b = arg;
	int me = atomic_fetch_add(&b->next, 1);
	cbcmn_chan_permit p;
	atomic_fetch_add(&b->entered, 1);
	int rc = cbcmn_chan_reserve(cx, b->full, &p);
	atomic_store(&b->rc[me], rc);
	if (rc == 0)
		cbcmn_chan_abort(cx, &p);
	return 0;
}

static int64_t blk_recv(cbcmn_cx *cx, void *arg)
{
	struct blockers *b = arg;
	int me = atomic_fetch_add(&b->next, 1), v = -1;
	atomic_fetch_add(&b->entered, 1);
	int rc = cbcmn_chan_recv(cx, b->empty, &v);
	TASK_CHECK(v == -1); /* nothing written on failure */
	atomic_store(&b->rc[me], rc);
	return 0;
}

#define NBLK 7 /* 3 senders, 1 reserver, 3 receivers */

static void spawn_blockers(cbcmn_cx *cx, struct blockers *b)
{
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &b->n) == 0);
	for (int i = 0; i < 3; i++) {
		TASK_CHECK(cbcmn_nursery_spawn(cx, b->n, blk_send, b, NULL) == 0);
		TASK_CHECK(cbcmn_nursery_spawn(cx, b->n, blk_recv, b, NULL) == 0);
	}
	TASK_CHECK(cbcmn_nursery_spawn(cx, b->n, blk_reserve, b, NULL) == 0);
}

static int64_t close_main(cbcmn_cx *cx, void *arg)
{
	struct blockers *b = arg;
	spawn_blockers(cx, b);
	settle_others(cx, &b->entered, NBLK); /* one worker: all are parked now */
	for (int i = 0; i < NBLK; i++)
		TASK_CHECK(atomic_load(&b->rc[i]) == 1); /* still blocked */
	TASK_CHECK(cbcmn_chan_close(cx, b->full) == 0);
	TASK_CHECK(cbcmn_chan_close(cx, b->empty) == 0);
	TASK_CHECK(cbcmn_chan_close(cx, b->empty) == 0); /* idempotent */
	b->await_rc = cbcmn_nursery_await_all(cx, b->n);
	return 0;
}

static void init_blockers(struct blockers *b, cbcmn_runtime *rt)
{
	memset(b, 0, sizeof(*b));
	b->full = mkchan(rt, 1, sizeof(int));
	b->empty = mkchan(rt, 1, sizeof(int));
	for (int i = 0; i < 16; i++)
		atomic_store(&b->rc[i], 1);
	int v = 7;
	assert_int_equal(cbcmn_chan_try_send(NULL, b->full, &v), 0);
}

static void test_close_wakes_all(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct blockers b;
	init_blockers(&b, rt);
	t_run(rt, close_main, &b, 0);
	assert_int_equal(b.await_rc, 0);
	for (int i = 0; i < NBLK; i++)
		assert_int_equal(atomic_load(&b.rc[i]), -EPIPE);
	/* The message buffered before the close is still delivered, then -EPIPE. */
	int v = 0;
	assert_int_equal(cbcmn_chan_try_recv(NULL, b.full, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(cbcmn_chan_try_recv(NULL, b.full, &v), -EPIPE);
	assert_int_equal(cbcmn_chan_recv(NULL, b.full, &v), -EPIPE);
	assert_int_equal(cbcmn_chan_destroy(b.full), 0);
	assert_int_equal(cbcmn_chan_destroy(b.empty), 0);
	t_destroy(rt);
}

/* ---- cancellation of blocked operations ---- */

static int64_t cancel_main(cbcmn_cx *cx, void *arg)
{
	struct blockers *b = arg;
	spawn_blockers(cx, b);
	settle_others(cx, &b->entered, NBLK);
	for (int i = 0; i < NBLK; i++)
		TASK_CHECK(atomic_load(&b->rc[i]) == 1); /* still blocked */
	TASK_CHECK(cbcmn_nursery_cancel(b->n) == 0);
	b->await_rc = cbcmn_nursery_await_all(cx, b->n);
	return 0;
}

/* The channels afterwards: exactly as before the blocked calls. */
static void check_no_trace(struct blockers *b)
{
	int v = 0;
	assert_int_equal(cbcmn_chan_try_recv(NULL, b->full, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(cbcmn_chan_try_recv(NULL, b->full, &v), -EAGAIN);
	cbcmn_chan_permit p;
	assert_int_equal(cbcmn_chan_try_reserve(NULL, b->full, &p), 0);
	v = 8;
	assert_int_equal(cbcmn_chan_commit(NULL, &p, &v), 0);
	assert_int_equal(cbcmn_chan_try_recv(NULL, b->full, &v), 0);
	assert_int_equal(v, 8);
	v = 9;
	assert_int_equal(cbcmn_chan_try_send(NULL, b->empty, &v), 0);
	assert_int_equal(cbcmn_chan_try_recv(NULL, b->empty, &v), 0);
	assert_int_equal(v, 9);
	assert_int_equal(cbcmn_chan_destroy(b->full), 0);
	assert_int_equal(cbcmn_chan_destroy(b->empty), 0);
}

static void test_cancel_blocked(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct blockers b;
	init_blockers(&b, rt);
	t_run(rt, cancel_main, &b, 0);
	assert_int_equal(b.await_rc, CBCMN_ECANCELED);
	for (int i = 0; i < NBLK; i++)
		assert_int_equal(atomic_load(&b.rc[i]), CBCMN_ECANCELED);
	check_no_trace(&b);
	t_destroy(rt);
}

/* Several workers, children looping, cancelled from a thread outside. */
struct loopers {
	cbcmn_chan *full, *empty;
	_Atomic int entered, cancelled_seen;
	cbcmn_nursery *n;
	_Atomic int opened;
	_Atomic int go_await;
	int64_t await_rc;
};

static int64_t loop_send(cbcmn_cx *cx, void *arg)
{
	struct loopers *l = arg;
	int v = 5, rc;
	atomic_fetch_add(&l->entered, 1);
	while ((rc = cbcmn_chan_send(cx, l->full, &v)) == 0)
		;
	if (rc == CBCMN_ECANCELED)
		atomic_fetch_add(&l->cancelled_seen, 1);
	return rc;
}

static int64_t loop_recv(cbcmn_cx *cx, void *arg)
{
	struct loopers *l = arg;
	int v, rc;
	atomic_fetch_add(&l->entered, 1);
	while ((rc = cbcmn_chan_recv(cx, l->empty, &v)) == 0)
		;
	if (rc == CBCMN_ECANCELED)
		atomic_fetch_add(&l->cancelled_seen, 1);
	return rc;
}

static int64_t loop_main(cbcmn_cx *cx, void *arg)
{
	struct loopers *l = arg;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &l->n) == 0);
	for (int i = 0; i < 4; i++) {
		TASK_CHECK(cbcmn_nursery_spawn(cx, l->n, loop_send, l, NULL) == 0);
		TASK_CHECK(cbcmn_nursery_spawn(cx, l->n, loop_recv, l, NULL) == 0);
	}
	atomic_store(&l->opened, 1);
	l->await_rc = cbcmn_nursery_await_all(cx, l->n);
	return 0;
}

static void *loop_runner(void *arg)
{
	cbcmn_runtime *rt = ((void **)arg)[0];
	struct loopers *l = ((void **)arg)[1];
	int64_t r = -1;
	if (cbcmn_runtime_run(rt, loop_main, l, &r) != 0 || r != 0)
		l->await_rc = -12345;
	return NULL;
}

static void test_cancel_blocked_many_workers(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(3);
	struct loopers l = {.full = mkchan(rt, 1, sizeof(int)), .empty = mkchan(rt, 1, sizeof(int))};
	int v = 7;
	assert_int_equal(cbcmn_chan_try_send(NULL, l.full, &v), 0);
	void *args[2] = {rt, &l};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, loop_runner, args), 0);
	while (atomic_load(&l.entered) < 8)
		usleep(100);
	usleep(2000); /* most are parked by now; the rest see it at entry */
	assert_int_equal(cbcmn_nursery_cancel(l.n), 0);
	pthread_join(th, NULL);
	ASSERT_TASK_CHECKS();
	assert_int_equal(l.await_rc, CBCMN_ECANCELED);
	assert_int_equal(atomic_load(&l.cancelled_seen), 8);
	struct blockers b = {.full = l.full, .empty = l.empty};
	check_no_trace(&b);
	t_destroy(rt);
}

/* ---- threads outside the runtime (cx NULL) ---- */

struct outside {
	cbcmn_chan *in, *out;
	long n;
	int recv_rc;
	long got;
};

static void *outside_producer(void *arg)
{
	struct outside *o = arg;
	for (long i = 0; i < o->n; i++)
		if (cbcmn_chan_send(NULL, o->in, &i) != 0)
			return (void *)1;
	return NULL;
}

static void *outside_consumer(void *arg)
{
	struct outside *o = arg;
	long v;
	int rc;
	while ((rc = cbcmn_chan_recv(NULL, o->out, &v)) == 0) {
		if (v != o->got)
			break;
		o->got++;
	}
	o->recv_rc = rc;
	return NULL;
}

/* The task relays what the producer thread sends to the consumer thread. */
static int64_t relay(cbcmn_cx *cx, void *arg)
{
	struct outside *o = arg;
	long v;
	int tmp = 0;
	TASK_CHECK(cbcmn_chan_send(NULL, o->in, &tmp) == -EDEADLK); /* would block the worker */
	TASK_CHECK(cbcmn_chan_recv(NULL, o->in, &tmp) == -EDEADLK);
	for (long i = 0; i < o->n; i++) {
		TASK_CHECK(cbcmn_chan_recv(cx, o->in, &v) == 0);
		TASK_CHECK(v == i);
		TASK_CHECK(cbcmn_chan_send(cx, o->out, &v) == 0);
	}
	TASK_CHECK(cbcmn_chan_close(cx, o->out) == 0); /* wakes the consumer thread */
	return 0;
}

static void test_outside_threads(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(2);
	struct outside o = {mkchan(rt, 2, sizeof(long)), mkchan(rt, 2, sizeof(long)),
			    T_SCALE(5000), 0, 0};
	pthread_t p, c;
	assert_int_equal(pthread_create(&c, NULL, outside_consumer, &o), 0);
	assert_int_equal(pthread_create(&p, NULL, outside_producer, &o), 0);
	t_run(rt, relay, &o, 0);
	void *prc;
	pthread_join(p, &prc);
	pthread_join(c, NULL);
	assert_null(prc);
	assert_int_equal(o.got, o.n);
	assert_int_equal(o.recv_rc, -EPIPE);
	assert_int_equal(cbcmn_chan_destroy(o.in), 0);
	assert_int_equal(cbcmn_chan_destroy(o.out), 0);
	t_destroy(rt);
}

/* ---- try-variants, close and drain (no task needed) ---- */

static void test_try_variants(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_chan *c = mkchan(rt, 2, sizeof(int));
	int v = 0;
	cbcmn_chan_permit p;
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), -EAGAIN);
	v = 1;
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), 0);
	v = 2;
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), 0);
	v = 3;
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), -EAGAIN);
	assert_int_equal(cbcmn_chan_try_reserve(NULL, c, &p), -EAGAIN);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), 0);
	assert_int_equal(v, 1);
	v = 4;
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), 0);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), 0);
	assert_int_equal(v, 4);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), -EAGAIN);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	t_destroy(rt);
}

static void test_drain_after_close(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_chan *c = mkchan(rt, 8, sizeof(int));
	cbcmn_chan_permit p;
	for (int i = 0; i < 5; i++)
		assert_int_equal(cbcmn_chan_send(NULL, c, &i), 0);
	assert_int_equal(cbcmn_chan_reserve(NULL, c, &p), 0);
	assert_int_equal(cbcmn_chan_close(NULL, c), 0);
	int v = 99;
	assert_int_equal(cbcmn_chan_send(NULL, c, &v), -EPIPE);
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), -EPIPE);
	cbcmn_chan_permit q;
	assert_int_equal(cbcmn_chan_reserve(NULL, c, &q), -EPIPE);
	/* A reservation does not survive close: reported, not delivered. */
	assert_int_equal(cbcmn_chan_commit(NULL, &p, &v), -EPIPE);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(cbcmn_chan_recv(NULL, c, &v), 0);
		assert_int_equal(v, i);
	}
	assert_int_equal(cbcmn_chan_recv(NULL, c, &v), -EPIPE);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), -EPIPE);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	t_destroy(rt);
}

/* The try-variants answer an empty or full ring without the lock
 * (chan.c, try_would_wait()): a closed channel must still say -EPIPE
 * there, full or empty, never -EAGAIN. */
static void test_try_on_closed_full_and_empty(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_chan *c = mkchan(rt, 2, sizeof(int));
	int v = 7;
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), 0);
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), 0);
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), -EAGAIN); /* full, open */
	assert_int_equal(cbcmn_chan_close(NULL, c), 0);
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), -EPIPE); /* full, closed */
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), 0);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), 0);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), -EPIPE); /* empty, closed */
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	t_destroy(rt);
}

/* Two threads ping-pong with the try-variants only, each polling while
 * its side is empty: every message arrives once and in order, and a
 * poller sees the close that ends it (TSan: the unlocked reads).  At most
 * 20 000 rounds or 2 s of them: beside a CPU hog every sched_yield() may
 * give a whole time slice away (it hit the suite's hang limit twice). */
struct trypp {
	cbcmn_chan *ab, *ba;
	_Atomic long rounds; /* the main thread's count, final before the close */
};

static void *trypp_pong(void *arg)
{
	struct trypp *p = arg;
	long v, want = 0;
	int rc;
	for (;;) {
		while ((rc = cbcmn_chan_try_recv(NULL, p->ab, &v)) == -EAGAIN)
			sched_yield();
		if (rc)
			break;
		if (v != want++)
			return (void *)1;
		while ((rc = cbcmn_chan_try_send(NULL, p->ba, &v)) == -EAGAIN)
			sched_yield();
		if (rc)
			return (void *)2;
	}
	return rc == -EPIPE && want == p->rounds ? NULL : (void *)3;
}

static void test_try_pingpong_threads(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct trypp p = {mkchan(rt, 1, sizeof(long)), mkchan(rt, 1, sizeof(long)), 20000};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, trypp_pong, &p), 0);
	uint64_t deadline = t_now_ns() + 2000000000ull;
	long i;
	for (i = 0; i < p.rounds; i++) {
		if (i % 256 == 255 && t_now_ns() > deadline)
			break;
		long v = i;
		int rc;
		while ((rc = cbcmn_chan_try_send(NULL, p.ab, &v)) == -EAGAIN)
			sched_yield();
		assert_int_equal(rc, 0);
		while ((rc = cbcmn_chan_try_recv(NULL, p.ba, &v)) == -EAGAIN)
			sched_yield();
		assert_int_equal(rc, 0);
		assert_int_equal(v, i);
	}
	atomic_store(&p.rounds, i);
	assert_int_equal(cbcmn_chan_close(NULL, p.ab), 0);
	void *res;
	assert_int_equal(pthread_join(th, &res), 0);
	assert_null(res);
	assert_int_equal(cbcmn_chan_destroy(p.ab), 0);
	assert_int_equal(cbcmn_chan_destroy(p.ba), 0);
	t_destroy(rt);
}

/* A try_recv never says -EAGAIN while the ring is never empty.  Capacity
 * one, full, with K senders parked behind it: each receive takes the
 * message and refills the ring from the first parked sender under one
 * lock, so with at most K receives the ring is empty before or after none
 * of them.  A thread receiving with try_recv meanwhile must always get a
 * message.  (The unlocked check in try_would_wait() once read the count
 * between the take and the refill, and said -EAGAIN.)  Messages of a
 * quarter MiB keep the refill's copy, inside that window, long enough to
 * be met on a loaded host. */
#define REFILL_SENDERS 32
#define REFILL_ESIZE (256u << 10)

struct refill {
	cbcmn_chan *c;
	const char *msg;       /* every sender's message */
	char *got[2];          /* where the two receivers put theirs */
	_Atomic int entered, left, eagain, started;
	cpu_set_t cpus;        /* the test's: not the executor's it inherits */
};

static int64_t refill_sender(cbcmn_cx *cx, void *arg)
{
	struct refill *r = arg;
	atomic_fetch_add(&r->entered, 1);
	TASK_CHECK(cbcmn_chan_send(cx, r->c, r->msg) == 0);
	return 0;
}

/* One of the K receives, if any are left to take. */
static bool refill_claim(struct refill *r)
{
	return atomic_fetch_sub(&r->left, 1) > 0;
}

static void *refill_poller(void *arg)
{
	struct refill *r = arg;
	if (sched_setaffinity(0, sizeof(r->cpus), &r->cpus) != 0)
		return (void *)1;
	atomic_store(&r->started, 1);
	while (atomic_load(&r->started) == 1)
		; /* until the other receiver is ready too */
	while (refill_claim(r)) {
		int rc = cbcmn_chan_try_recv(NULL, r->c, r->got[1]);
		if (rc == -EAGAIN)
			atomic_fetch_add(&r->eagain, 1);
		else if (rc)
			return (void *)2;
	}
	return NULL;
}

static int64_t refill_main(cbcmn_cx *cx, void *arg)
{
	struct refill *r = arg;
	cbcmn_nursery *n;
	pthread_t th;
	void *res;
	atomic_store(&r->entered, 0);
	atomic_store(&r->left, 0);
	atomic_store(&r->started, 0);
	TASK_CHECK(cbcmn_chan_try_send(cx, r->c, r->msg) == 0);
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	for (int i = 0; i < REFILL_SENDERS; i++)
		TASK_CHECK(cbcmn_nursery_spawn(cx, n, refill_sender, r, NULL) == 0);
	settle_others(cx, &r->entered, REFILL_SENDERS); /* all parked */
	atomic_store(&r->left, REFILL_SENDERS);
	TASK_CHECK(pthread_create(&th, NULL, refill_poller, r) == 0);
	while (!atomic_load(&r->started))
		sched_yield();
	atomic_store(&r->started, 2);
	while (refill_claim(r))
		TASK_CHECK(cbcmn_chan_recv(cx, r->c, r->got[0]) == 0);
	TASK_CHECK(pthread_join(th, &res) == 0 && res == NULL);
	while (cbcmn_chan_try_recv(cx, r->c, r->got[0]) == 0)
		; /* what is left, so that every sender finishes */
	return cbcmn_nursery_await_all(cx, n);
}

static void test_try_recv_sees_refilled_ring(void **state)
{
	(void)state;
	cbcmn_runtime *rt = rt_flags(1, CBCMN_CONFIG_NO_BUDGETS);
	struct refill r = {.c = mkchan(rt, 1, REFILL_ESIZE)};
	char *bufs = calloc(3, REFILL_ESIZE);
	assert_non_null(bufs);
	r.msg = bufs;
	r.got[0] = bufs + REFILL_ESIZE;
	r.got[1] = bufs + 2 * REFILL_ESIZE;
	assert_int_equal(sched_getaffinity(0, sizeof(r.cpus), &r.cpus), 0);
	uint64_t end = t_now_ns() + 3000000000ull; /* bounded: a loaded host */
	for (int round = 0; round < STRESS(600) && t_now_ns() < end; round++)
		t_run(rt, refill_main, &r, 0);
	assert_int_equal(atomic_load(&r.eagain), 0);
	assert_int_equal(cbcmn_chan_destroy(r.c), 0);
	free(bufs);
	t_destroy(rt);
}

/* ---- reservations ---- */

static void test_reserve_commit_abort(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_chan *c = mkchan(rt, 2, sizeof(int));
	cbcmn_chan_permit a, b, z = {0};
	int v;
	assert_int_equal(cbcmn_chan_reserve(NULL, c, &a), 0);
	assert_int_equal(cbcmn_chan_reserve(NULL, c, &b), 0);
	/* Reserved slots count against the capacity. */
	v = 1;
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), -EAGAIN);
	assert_int_equal(cbcmn_chan_destroy(c), -EBUSY); /* reservations outstanding */
	/* Nothing is visible before commit. */
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), -EAGAIN);
	v = 42;
	assert_int_equal(cbcmn_chan_commit(NULL, &b, &v), 0);
	assert_int_equal(cbcmn_chan_abort(NULL, &a), 0);
	/* Resolved permits are spent. */
	assert_int_equal(cbcmn_chan_commit(NULL, &b, &v), -EINVAL);
	assert_int_equal(cbcmn_chan_abort(NULL, &a), -EINVAL);
	assert_int_equal(cbcmn_chan_abort(NULL, &z), -EINVAL);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), 0);
	assert_int_equal(v, 42);
	/* The aborted slot is free again: two sends fit. */
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), 0);
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), 0);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), 0);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), 0);
	/* A copy of a spent permit is spent too (generation check). */
	assert_int_equal(cbcmn_chan_reserve(NULL, c, &a), 0);
	cbcmn_chan_permit copy = a;
	assert_int_equal(cbcmn_chan_abort(NULL, &a), 0);
	assert_int_equal(cbcmn_chan_reserve(NULL, c, &b), 0); /* may reuse the record */
	assert_int_equal(cbcmn_chan_commit(NULL, &copy, &v), -EINVAL);
	assert_int_equal(cbcmn_chan_abort(NULL, &b), 0);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	t_destroy(rt);
}

/* Two threads resolve one thread-owned permit at once, one committing and
 * one aborting, each with its own copy or both given one permit object:
 * exactly one wins, the other gets -EINVAL, and the channel holds the
 * message only if the commit won.  Shared, the loser read the permit
 * twice, saw the record, then the winner's NULL, and dereferenced it
 * (SIGSEGV in chan_resolve() within some 100 000 rounds; TSan: a race on
 * the permit at once).  Thread 0 commits, thread 1 aborts (t_race2()). */
static int permit_resolve(int i, void *h)
{
	int v = 7;
	return i ? cbcmn_chan_abort(NULL, h) : cbcmn_chan_commit(NULL, h, &v);
}

static void test_racing_permit_resolutions_one_wins(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_chan *c = mkchan(rt, 1, sizeof(int));
	for (int round = 0; round < T_SCALE(400); round++) {
		cbcmn_chan_permit p;
		assert_int_equal(cbcmn_chan_try_reserve(NULL, c, &p), 0);
		int rc[2];
		t_race2(&p, sizeof(p), round & 1, permit_resolve, rc);
		bool committed = rc[0] == 0;
		assert_int_equal(rc[committed ? 1 : 0], -EINVAL);
		assert_int_equal(rc[committed ? 0 : 1], 0);
		int v = 0;
		assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), committed ? 0 : -EAGAIN);
		assert_int_equal(v, committed ? 7 : 0);
	}
	assert_int_equal(cbcmn_chan_destroy(c), 0); /* nothing outstanding */
	t_destroy(rt);
}

/* A reserver parked on a full channel gets the slot a receiver frees; only
 * the task that reserved may resolve the permit. */
struct resv {
	cbcmn_chan *c;
	_Atomic int entered;
	int rc_reserve, rc_foreign, rc_commit;
};

static int64_t resv_task(cbcmn_cx *cx, void *arg)
{
	struct resv *r = arg;
	cbcmn_chan_permit p;
	int v = 77;
	atomic_store(&r->entered, 1);
	r->rc_reserve = cbcmn_chan_reserve(cx, r->c, &p);
	r->rc_foreign = cbcmn_chan_commit(NULL, &p, &v); /* not the owner */
	r->rc_commit = cbcmn_chan_commit(cx, &p, &v);
	return 0;
}

static int64_t resv_main(cbcmn_cx *cx, void *arg)
{
	struct resv *r = arg;
	cbcmn_nursery *n;
	int v = 0;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, resv_task, r, NULL) == 0);
	settle_others(cx, &r->entered, 1);
	TASK_CHECK(r->rc_reserve == 1); /* parked: the channel is full */
	TASK_CHECK(cbcmn_chan_recv(cx, r->c, &v) == 0);
	TASK_CHECK(v == 5);
	TASK_CHECK(cbcmn_nursery_await_all(cx, n) == 0);
	TASK_CHECK(cbcmn_chan_recv(cx, r->c, &v) == 0);
	TASK_CHECK(v == 77);
	return 0;
}

static void test_reserve_parks_and_owner_only(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct resv r = {.c = mkchan(rt, 1, sizeof(int)), .rc_reserve = 1};
	int v = 5;
	assert_int_equal(cbcmn_chan_try_send(NULL, r.c, &v), 0);
	t_run(rt, resv_main, &r, 0);
	assert_int_equal(r.rc_reserve, 0);
	assert_int_equal(r.rc_foreign, -EPERM);
	assert_int_equal(r.rc_commit, 0);
	assert_int_equal(cbcmn_chan_destroy(r.c), 0);
	t_destroy(rt);
}

/* ---- a task that ends holding a reservation: a leak, reported and aborted ---- */

struct leak {
	cbcmn_chan *c;
	_Atomic int reserved, sender_entered;
	uint64_t leaker_id;
	int send_rc;
	int64_t await_rc;
};

static int64_t leaker(cbcmn_cx *cx, void *arg)
{
	struct leak *l = arg;
	cbcmn_chan_permit p;
	l->leaker_id = cbcmn_cx_task_id(cx);
	TASK_CHECK(cbcmn_chan_reserve(cx, l->c, &p) == 0);
	atomic_store(&l->reserved, 1);
	settle_others(cx, &l->sender_entered, 1); /* the sender is parked */
	return 0;                                 /* p forgotten */
}

static int64_t waiting_sender(cbcmn_cx *cx, void *arg)
{
	struct leak *l = arg;
	int v = 77;
	while (!atomic_load(&l->reserved))
		cbcmn_yield(cx);
	atomic_store(&l->sender_entered, 1);
	l->send_rc = cbcmn_chan_send(cx, l->c, &v); /* full: the leaked slot */
	return 0;
}

static int64_t leak_main(cbcmn_cx *cx, void *arg)
{
	struct leak *l = arg;
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, waiting_sender, l, NULL) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, leaker, l, NULL) == 0);
	l->await_rc = cbcmn_nursery_await_all(cx, n);
	return 0;
}

static void leak_case(uint32_t flags, size_t stack_size)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.flags = flags;
	cfg.stack_size = stack_size;
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct leak l = {.c = mkchan(rt, 1, sizeof(int)), .send_rc = 1};
	int saved, fd = t_stderr_capture(&saved);
	int64_t r = -1;
	int rrc = cbcmn_runtime_run(rt, leak_main, &l, &r);
	char msg[4096];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_int_equal(rrc, 0);
	assert_int_equal(r, 0);
	ASSERT_TASK_CHECKS();
	/* The nursery reports the leak, naming the task. */
	assert_int_equal(l.await_rc, CBCMN_ELEAKED);
	char want[96];
	snprintf(want, sizeof(want), "cbcmn: task %llu ended holding an unresolved reservation",
		 (unsigned long long)l.leaker_id);
	if (!strstr(msg, want))
		fail_msg("stderr lacks \"%s\": got \"%s\"", want, msg);
	/* The slot was aborted: the parked sender got it. */
	assert_int_equal(l.send_rc, 0);
	int v = 0;
	assert_int_equal(cbcmn_chan_try_recv(NULL, l.c, &v), 0);
	assert_int_equal(v, 77);
	assert_int_equal(cbcmn_chan_destroy(l.c), 0); /* nothing outstanding */
	t_destroy(rt);
}

static void test_leaked_reservation(void **state)
{
	(void)state;
	leak_case(0, 0);
}

static void test_leaked_reservation_no_inline(void **state)
{
	(void)state;
	leak_case(CBCMN_CONFIG_NO_INLINE, 0);
}

/* The report is written on the ending task's stack: it must fit a minimal
 * one (fprintf to unbuffered stderr takes 8 KiB of stack in glibc < 2.37). */
static void test_leak_report_fits_minimal_stack(void **state)
{
	(void)state;
	leak_case(CBCMN_CONFIG_NO_INLINE, CBCMN_STACK_MIN);
}

/* A task that failed on its own keeps its own result. */
static int64_t leak_and_fail(cbcmn_cx *cx, void *arg)
{
	cbcmn_chan_permit p;
	TASK_CHECK(cbcmn_chan_reserve(cx, arg, &p) == 0);
	return -EIO;
}

static int64_t leak_fail_main(cbcmn_cx *cx, void *arg)
{
	cbcmn_nursery *n;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, leak_and_fail, arg, NULL) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_leak_keeps_own_failure(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_chan *c = mkchan(rt, 1, sizeof(int));
	int saved, fd = t_stderr_capture(&saved);
	int64_t r = 0;
	int rrc = cbcmn_runtime_run(rt, leak_fail_main, c, &r);
	char msg[4096];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_int_equal(rrc, 0);
	ASSERT_TASK_CHECKS();
	assert_int_equal(r, -EIO);
	assert_non_null(strstr(msg, "obligation leak"));
	int v = 1;
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), 0); /* slot free again */
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &v), 0);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	t_destroy(rt);
}

/* ---- bad input ---- */

static int64_t wrong_rt(cbcmn_cx *cx, void *arg)
{
	cbcmn_chan *c = arg;
	int v = 0;
	cbcmn_chan_permit p;
	TASK_CHECK(cbcmn_chan_send(cx, c, &v) == CBCMN_EWRONGRT);
	TASK_CHECK(cbcmn_chan_try_send(cx, c, &v) == CBCMN_EWRONGRT);
	TASK_CHECK(cbcmn_chan_recv(cx, c, &v) == CBCMN_EWRONGRT);
	TASK_CHECK(cbcmn_chan_try_recv(cx, c, &v) == CBCMN_EWRONGRT);
	TASK_CHECK(cbcmn_chan_reserve(cx, c, &p) == CBCMN_EWRONGRT);
	TASK_CHECK(cbcmn_chan_close(cx, c) == CBCMN_EWRONGRT);
	return 0;
}

/* destroy is refused while a task is parked on the channel. */
struct busy {
	cbcmn_chan *c;
	_Atomic int entered;
	int destroy_rc, recv_rc, v;
};

static int64_t busy_recv(cbcmn_cx *cx, void *arg)
{
	struct busy *b = arg;
	atomic_store(&b->entered, 1);
	b->recv_rc = cbcmn_chan_recv(cx, b->c, &b->v);
	return 0;
}

static int64_t busy_main(cbcmn_cx *cx, void *arg)
{
	struct busy *b = arg;
	cbcmn_nursery *n;
	int v = 3;
	TASK_CHECK(cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n) == 0);
	TASK_CHECK(cbcmn_nursery_spawn(cx, n, busy_recv, b, NULL) == 0);
	settle_others(cx, &b->entered, 1);
	b->destroy_rc = cbcmn_chan_destroy(b->c);
	TASK_CHECK(cbcmn_chan_send(cx, b->c, &v) == 0);
	return cbcmn_nursery_await_all(cx, n);
}

static void test_bad_input(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1), *rt2 = t_runtime(1);
	cbcmn_chan *c = NULL;
	int v = 0;
	cbcmn_chan_permit p = {0};
	assert_int_equal(cbcmn_chan_create(NULL, 1, 1, &c), -EINVAL);
	assert_int_equal(cbcmn_chan_create(rt, 1, 1, NULL), -EINVAL);
	assert_int_equal(cbcmn_chan_create(rt, 0, 1, &c), -EINVAL);
	assert_int_equal(cbcmn_chan_create(rt, 1, 0, &c), -EINVAL);
	assert_int_equal(cbcmn_chan_create(rt, SIZE_MAX / 2, 4, &c), -EINVAL);
	assert_null(c);
	assert_int_equal(cbcmn_chan_destroy(NULL), -EINVAL);
	assert_int_equal(cbcmn_chan_send(NULL, NULL, &v), -EINVAL);
	assert_int_equal(cbcmn_chan_recv(NULL, NULL, &v), -EINVAL);
	assert_int_equal(cbcmn_chan_try_send(NULL, NULL, &v), -EINVAL);
	assert_int_equal(cbcmn_chan_try_recv(NULL, NULL, &v), -EINVAL);
	assert_int_equal(cbcmn_chan_reserve(NULL, NULL, &p), -EINVAL);
	assert_int_equal(cbcmn_chan_try_reserve(NULL, NULL, &p), -EINVAL);
	assert_int_equal(cbcmn_chan_close(NULL, NULL), -EINVAL);
	assert_int_equal(cbcmn_chan_commit(NULL, NULL, &v), -EINVAL);
	assert_int_equal(cbcmn_chan_commit(NULL, &p, &v), -EINVAL);
	assert_int_equal(cbcmn_chan_abort(NULL, NULL), -EINVAL);
	assert_int_equal(cbcmn_chan_abort(NULL, &p), -EINVAL);

	c = mkchan(rt, 1, sizeof(int));
	assert_int_equal(cbcmn_chan_send(NULL, c, NULL), -EINVAL);
	assert_int_equal(cbcmn_chan_recv(NULL, c, NULL), -EINVAL);
	assert_int_equal(cbcmn_chan_try_send(NULL, c, NULL), -EINVAL);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, NULL), -EINVAL);
	assert_int_equal(cbcmn_chan_reserve(NULL, c, NULL), -EINVAL);
	assert_int_equal(cbcmn_chan_reserve(NULL, c, &p), 0);
	assert_int_equal(cbcmn_chan_commit(NULL, &p, NULL), -EINVAL); /* still held */
	assert_int_equal(cbcmn_chan_abort(NULL, &p), 0);
	t_run(rt2, wrong_rt, c, 0);

	struct busy b = {.c = c};
	t_run(rt, busy_main, &b, 0);
	assert_int_equal(b.destroy_rc, -EBUSY);
	assert_int_equal(b.recv_rc, 0);
	assert_int_equal(b.v, 3);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
	t_destroy(rt);
	t_destroy(rt2);
}

/* A receive whose wait a cancellation claimed is still inside
 * cbcmn_chan_recv() until its task runs again (it comes back to take its
 * wait off the queue).  A send that meets the claimed wait first dequeues
 * and skips it; the destroy after it must still say -EBUSY: it returned 0
 * and freed c, and the receiver then locked the freed channel (ASan:
 * heap-use-after-free in chan_block()).  One executor, held by a spinning
 * task, keeps the cancelled receiver from running meanwhile. */
struct claimed {
	cbcmn_chan *c;
	_Atomic int holding, release;
	int recv_rc;
};

static int64_t claimed_receiver(cbcmn_cx *cx, void *arg)
{
	struct claimed *k = arg;
	int v;
	k->recv_rc = cbcmn_chan_recv(cx, k->c, &v);
	return 0;
}

static int64_t claimed_holder(cbcmn_cx *cx, void *arg)
{
	struct claimed *k = arg;
	(void)cx;
	atomic_store(&k->holding, 1);
	while (!atomic_load(&k->release))
		sched_yield(); /* the thread, not the task: the executor stays held */
	return 0;
}

static void test_destroy_busy_while_cancelled_waiter_returns(void **state)
{
	(void)state;
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = 1;
	cfg.stall_ns = CBCMN_STALL_OFF; /* no spare to run the receiver */
	cbcmn_runtime *rt = t_runtime_cfg(&cfg);
	struct claimed k = {.c = mkchan(rt, 1, sizeof(int))};
	cbcmn_nursery *nr, *nh;
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &nr), 0);
	assert_int_equal(cbcmn_nursery_open(rt, NULL, &nh), 0);
	assert_int_equal(cbcmn_nursery_spawn(NULL, nr, claimed_receiver, &k, NULL), 0);
	cbcmn_snapshot s = {.size = sizeof(s), .version = CBCMN_SNAPSHOT_VERSION};
	do {
		usleep(1000);
		assert_int_equal(cbcmn_runtime_snapshot(rt, &s, NULL, 0), 0);
	} while (s.total.blocked_chan != 1);
	assert_int_equal(cbcmn_nursery_spawn(NULL, nh, claimed_holder, &k, NULL), 0);
	while (!atomic_load(&k.holding))
		usleep(100);
	assert_int_equal(cbcmn_nursery_cancel(nr), 0);
	int v = 7;
	assert_int_equal(cbcmn_chan_try_send(NULL, k.c, &v), 0); /* skips the claimed wait */
	int destroy_rc = cbcmn_chan_destroy(k.c);
	atomic_store(&k.release, 1);
	(void)cbcmn_nursery_await_all(NULL, nr); /* cancelled */
	assert_int_equal(cbcmn_nursery_await_all(NULL, nh), 0);
	assert_int_equal(destroy_rc, -EBUSY);
	assert_int_equal(k.recv_rc, CBCMN_ECANCELED);
	assert_int_equal(cbcmn_chan_destroy(k.c), 0);
	t_destroy(rt);
}

/* A channel destroyed after its runtime (a program's clean-up in the
 * order it made things, or a leaked channel freed late): destroy read the
 * freed runtime (ASan: heap-use-after-free in cbcmn__forked()). */
static void test_destroy_after_its_runtime(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_chan *c = mkchan(rt, 4, sizeof(int));
	int v = 5;
	assert_int_equal(cbcmn_chan_try_send(NULL, c, &v), 0);
	t_destroy(rt); /* a channel does not keep its runtime */
	assert_int_equal(cbcmn_chan_destroy(c), 0);
}

/* A reservation a thread outside holds is still to be committed or
 * aborted, each touching the runtime (as a nursery a thread opened is
 * still to be awaited): destroying the runtime meanwhile returned 0; the
 * channel's destroy, allowed after it, then said -EBUSY for ever, and the
 * abort that would end the reservation read the freed runtime (ASan:
 * heap-use-after-free in chan_resolve()). */
static void test_runtime_busy_while_thread_holds_permit(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	cbcmn_chan *c = mkchan(rt, 2, sizeof(int));
	cbcmn_chan_permit p, q;
	int v = 3, got = 0;
	assert_int_equal(cbcmn_chan_try_reserve(NULL, c, &p), 0);
	assert_int_equal(cbcmn_chan_try_reserve(NULL, c, &q), 0);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	assert_int_equal(cbcmn_chan_abort(NULL, &p), 0);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	assert_int_equal(cbcmn_chan_commit(NULL, &q, &v), 0);
	assert_int_equal(cbcmn_chan_try_recv(NULL, c, &got), 0);
	assert_int_equal(got, 3);
	t_destroy(rt);
	assert_int_equal(cbcmn_chan_destroy(c), 0);
}

/* A thread outside blocked on a channel is woken only by a send or a
 * close, each touching the runtime: destroying the runtime meanwhile
 * returned 0, and the close that would wake the thread read the freed
 * runtime (ASan: heap-use-after-free in cbcmn_chan_close()).  A thread
 * blocked in a reservation that is then granted holds the runtime on, to
 * its abort. */
struct outside_waiter {
	cbcmn_chan *c;
	bool reserve;
	_Atomic int tid;
	int rc;
	cbcmn_chan_permit p;
};

static void *outside_wait(void *arg)
{
	struct outside_waiter *o = arg;
	int v;
	atomic_store(&o->tid, (int)gettid());
	o->rc = o->reserve ? cbcmn_chan_reserve(NULL, o->c, &o->p) : cbcmn_chan_recv(NULL, o->c, &v);
	return NULL;
}

/* Until the thread sleeps (in the channel: it does nothing else). */
static void outside_wait_start(struct outside_waiter *o, pthread_t *t)
{
	assert_int_equal(pthread_create(t, NULL, outside_wait, o), 0);
	char path[64], st[256], *p = NULL;
	do {
		usleep(1000);
		snprintf(path, sizeof(path), "/proc/self/task/%d/stat", atomic_load(&o->tid));
		FILE *f = atomic_load(&o->tid) ? fopen(path, "r") : NULL;
		p = f && fgets(st, sizeof(st), f) ? strrchr(st, ')') : NULL;
		if (f)
			fclose(f);
	} while (!p || p[2] != 'S');
}

static void test_runtime_busy_while_thread_blocked_on_chan(void **state)
{
	(void)state;
	cbcmn_runtime *rt = t_runtime(1);
	struct outside_waiter o = {.c = mkchan(rt, 1, sizeof(int))};
	pthread_t t;
	outside_wait_start(&o, &t);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	assert_int_equal(cbcmn_chan_close(NULL, o.c), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(o.rc, -EPIPE);
	assert_int_equal(cbcmn_chan_destroy(o.c), 0);

	o = (struct outside_waiter){.c = mkchan(rt, 1, sizeof(int)), .reserve = true};
	int v = 1;
	assert_int_equal(cbcmn_chan_try_send(NULL, o.c, &v), 0); /* full */
	outside_wait_start(&o, &t);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	assert_int_equal(cbcmn_chan_try_recv(NULL, o.c, &v), 0); /* grants the slot */
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(o.rc, 0);
	assert_int_equal(cbcmn_runtime_destroy(rt), -EBUSY);
	assert_int_equal(cbcmn_chan_abort(NULL, &o.p), 0);
	t_destroy(rt);
	assert_int_equal(cbcmn_chan_destroy(o.c), 0);
}

int main(void)
{
/* A hang (a waiter nobody wakes) fails the test, naming it, instead of
 * stalling the suite. */
#define T(f) T_WATCHED_TEST(f)
	const struct CMUnitTest tests[] = {
		T(test_fifo_spsc),
		T(test_recv_parks_when_empty),
		T(test_send_parks_when_full),
		T(test_mpmc_exactly_once),
		T(test_cancel_midstream_exactly_once),
		T(test_ping_pong),
		T(test_close_wakes_all),
		T(test_cancel_blocked),
		T(test_cancel_blocked_many_workers),
		T(test_destroy_busy_while_cancelled_waiter_returns),
		T(test_destroy_after_its_runtime),
		T(test_runtime_busy_while_thread_holds_permit),
		T(test_runtime_busy_while_thread_blocked_on_chan),
		T(test_outside_threads),
		T(test_try_variants),
		T(test_drain_after_close),
		T(test_try_on_closed_full_and_empty),
		T(test_try_pingpong_threads),
		T(test_try_recv_sees_refilled_ring),
		T(test_reserve_commit_abort),
		T(test_racing_permit_resolutions_one_wins),
		T(test_reserve_parks_and_owner_only),
		T(test_leaked_reservation),
		T(test_leaked_reservation_no_inline),
		T(test_leak_report_fits_minimal_stack),
		T(test_leak_keeps_own_failure),
		T(test_bad_input),
	};
#undef T
	return cmocka_run_group_tests_name("chan", tests, NULL, NULL);
}
