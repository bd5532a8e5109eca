/* pingpong.c: two-thread ping-pong over IORING_OP_MSG_RING or eventfd, the
 * baselines of the doorbell benchmark (pingpong.h). */
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "baseline/pingpong.h"

#define PP_BATCHES 5

/* Message values: the eventfd counter value, or the MSG_RING CQE's res. */
enum { PP_PING = 1, PP_STOP = 2 };

/* user_data of a CQE that MSG_RING posted on the receiving ring, and of
 * the sender's own MSG_RING request (its CQE only shows up on failure,
 * with IOSQE_CQE_SKIP_SUCCESS). */
#define PP_TAG 0x70696e67ull
#define PP_SELF 0x73656c66ull

struct pp_run;

struct pp_side {
	struct pp_run *run;
	int id;			/* 0: A, sends first and keeps time; 1: B, answers */
	int cpu;		/* -1: not pinned */
	bool inited;
	int err;
	pthread_t tid;
	/* msg_ring */
	struct io_uring ring;
	unsigned ring_flags;	/* the setup flags the kernel took */
	unsigned sqe_flags;	/* IOSQE_CQE_SKIP_SUCCESS if the kernel has it */
	bool defer;		/* DEFER_TASKRUN: messages arrive as task work */
	bool taskrun_flag;	/* ... and IORING_SQ_TASKRUN says when */
	/* eventfd */
	int efd;
};

struct pp_ops {
	int (*init)(struct pp_side *s);
	/* Sends msg to peer.  then_wait: the caller's next call is recv(),
	 * which may carry the send into the kernel with its wait. */
	int (*send)(struct pp_side *s, struct pp_side *peer, uint32_t msg, bool then_wait);
	int (*recv)(struct pp_side *s, uint32_t *msg);
	void (*fini)(struct pp_side *s);
};

struct pp_run {
	const struct pp_ops *ops;
	uint32_t iters;
	bool spin;
	bool yield;		/* unpinned on one CPU: spinners must yield */
	bool fallback;		/* msg_ring: try the flag chain, not just flags */
	unsigned flags;
	struct pp_side side[2];
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int ready;		/* sides that finished init (or never started) */
	bool failed;
	double ns;
};

static void pp__relax(const struct pp_run *r)
{
	if (r->yield)
		sched_yield();
#if defined(__x86_64__) || defined(__i386__)
	else
		__asm__ __volatile__("pause" ::: "memory");
#endif
}

/* ---- IORING_OP_MSG_RING --------------------------------------------------- */

static int mr_init(struct pp_side *s)
{
	static const unsigned chain[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
		IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
		0,
	};
	struct pp_run *r = s->run;
	int rc;

	if (!r->fallback) {
		rc = io_uring_queue_init(8, &s->ring, r->flags);
	} else {
		/* An older kernel refuses flags it does not know with EINVAL. */
		for (unsigned i = 0; i < sizeof(chain) / sizeof(chain[0]); i++)
			if ((rc = io_uring_queue_init(8, &s->ring, chain[i])) != -EINVAL)
				break;
	}
	if (rc)
		return rc;

	struct io_uring_probe *p = io_uring_get_probe_ring(&s->ring);
	bool ok = p && io_uring_opcode_supported(p, IORING_OP_MSG_RING);
	io_uring_free_probe(p);
	if (!ok) {
		io_uring_queue_exit(&s->ring);
		return -ENOSYS;
	}
	s->sqe_flags = s->ring.features & IORING_FEAT_CQE_SKIP ? IOSQE_CQE_SKIP_SUCCESS : 0;
	s->ring_flags = s->ring.flags;
	s->defer = s->ring.flags & IORING_SETUP_DEFER_TASKRUN;
	s->taskrun_flag = s->ring.flags & IORING_SETUP_TASKRUN_FLAG;
	return 0;
}

static int mr_send(struct pp_side *s, struct pp_side *peer, uint32_t msg, bool then_wait)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

	/* One SQE at most is ever outstanding: the queue cannot be full. */
	if (!sqe)
		return -EBUSY;
	io_uring_prep_msg_ring(sqe, peer->ring.ring_fd, msg, PP_TAG, 0);
	sqe->user_data = PP_SELF;
	sqe->flags |= s->sqe_flags;
	/* Parked, recv's io_uring_submit_and_wait() submits this in the same
	 * system call that waits for the answer. */
	if (then_wait && !s->run->spin)
		return 0;
	int rc = io_uring_submit(&s->ring);
	return rc < 0 ? rc : 0;
}

static int mr_recv(struct pp_side *s, uint32_t *msg)
{
	struct io_uring *ring = &s->ring;
	struct io_uring_cqe *cqe;
	int rc;

	for (;;) {
		rc = io_uring_peek_cqe(ring, &cqe);
		if (rc == -EAGAIN) {
			if (!s->run->spin) {
				rc = io_uring_submit_and_wait(ring, 1);
			} else if (s->defer &&
				   (!s->taskrun_flag ||
				    /* Relaxed: what the flag announces is read
				     * by the system call below, itself a full
				     * barrier. */
				    (__atomic_load_n(ring->sq.kflags, __ATOMIC_RELAXED) &
				     IORING_SQ_TASKRUN))) {
				/* The message waits as task work that only
				 * our own GETEVENTS enter runs. */
				rc = io_uring_get_events(ring);
				/* A syscall is no yield: on a shared CPU the
				 * sender must still get to run. */
				if (s->run->yield)
					sched_yield();
			} else {
				pp__relax(s->run);
				rc = 0;
			}
			if (rc < 0 && rc != -EINTR)
				return rc;
			continue;
		}
		if (rc < 0)
			return rc;
		uint64_t ud = cqe->user_data;
		int res = cqe->res;
		io_uring_cqe_seen(ring, cqe);
		if (ud == PP_SELF) {
			/* Our own MSG_RING: failed, or the kernel lacks
			 * CQE_SKIP_SUCCESS and reports every success. */
			if (res < 0)
				return res;
			continue;
		}
		if (ud != PP_TAG)
			return -EPROTO;
		*msg = (uint32_t)res;
		return 0;
	}
}

static void mr_fini(struct pp_side *s)
{
	io_uring_queue_exit(&s->ring);
}

static const struct pp_ops msgring_ops = {
	.init = mr_init,
	.send = mr_send,
	.recv = mr_recv,
	.fini = mr_fini,
};

/* ---- eventfd -------------------------------------------------------------- */

static int ev_init(struct pp_side *s)
{
	s->efd = eventfd(0, EFD_CLOEXEC | (s->run->spin ? EFD_NONBLOCK : 0));
	return s->efd < 0 ? -errno : 0;
}

static int ev_send(struct pp_side *s, struct pp_side *peer, uint32_t msg, bool then_wait)
{
	uint64_t v = msg;

	/* A write is the whole send: nothing to hand to the next recv. */
	(void)s;
	(void)then_wait;
	while (write(peer->efd, &v, sizeof(v)) != sizeof(v))
		if (errno != EINTR)
			return -errno;
	return 0;
}

static int ev_recv(struct pp_side *s, uint32_t *msg)
{
	uint64_t v;

	/* The sides strictly alternate, so a read never finds two messages
	 * added up in the counter. */
	while (read(s->efd, &v, sizeof(v)) != sizeof(v)) {
		if (errno == EAGAIN)
			pp__relax(s->run);
		else if (errno != EINTR)
			return -errno;
	}
	*msg = (uint32_t)v;
	return 0;
}

static void ev_fini(struct pp_side *s)
{
	close(s->efd);
}

static const struct pp_ops eventfd_ops = {
	.init = ev_init,
	.send = ev_send,
	.recv = ev_recv,
	.fini = ev_fini,
};

/* ---- the ping-pong -------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int round_trip(const struct pp_ops *ops, struct pp_side *s, struct pp_side *peer)
{
	uint32_t msg;
	int rc = ops->send(s, peer, PP_PING, true);

	if (!rc)
		rc = ops->recv(s, &msg);
	/* PP_STOP here: B failed and says so. */
	if (!rc && msg != PP_PING)
		rc = -ECANCELED;
	return rc;
}

/* A: warm up, time the batches, tell B to stop. */
static int pp__ping(struct pp_side *s, struct pp_side *peer)
{
	const struct pp_ops *ops = s->run->ops;
	uint32_t iters = s->run->iters, batch = iters / PP_BATCHES ? iters / PP_BATCHES : 1;
	double v[PP_BATCHES];
	int rc = 0;

	for (uint32_t i = 0; !rc && i < iters / 10 + 1; i++)
		rc = round_trip(ops, s, peer);
	for (int b = 0; !rc && b < PP_BATCHES; b++) {
		uint64_t t0 = mono_ns();
		for (uint32_t i = 0; !rc && i < batch; i++)
			rc = round_trip(ops, s, peer);
		v[b] = (double)(mono_ns() - t0) / batch;
	}
	if (rc == -ECANCELED)
		return rc;	/* B is gone already */
	int src = ops->send(s, peer, PP_STOP, false);
	if (rc)
		return rc;
	if (src)
		return src;
	qsort(v, PP_BATCHES, sizeof(v[0]), cmp_double);
	s->run->ns = v[PP_BATCHES / 2];
	return 0;
}

/* B: answer until told to stop. */
static int pp__pong(struct pp_side *s, struct pp_side *peer)
{
	const struct pp_ops *ops = s->run->ops;

	for (;;) {
		uint32_t msg;
		int rc = ops->recv(s, &msg);
		if (!rc && msg == PP_STOP)
			return 0;
		if (!rc)
			rc = ops->send(s, peer, PP_PING, true);
		if (rc) {
			/* Best effort: A would otherwise wait for ever. */
			ops->send(s, peer, PP_STOP, false);
			return rc;
		}
	}
}

static void *pp__thread(void *arg)
{
	struct pp_side *s = arg, *peer = &s->run->side[!s->id];
	struct pp_run *r = s->run;
	int rc = r->ops->init(s);
	bool go;

	s->inited = !rc;
	pthread_mutex_lock(&r->mu);
	if (rc) {
		s->err = rc;
		r->failed = true;
	}
	r->ready++;
	pthread_cond_broadcast(&r->cv);
	while (r->ready < 2)
		pthread_cond_wait(&r->cv, &r->mu);
	/* The mutex also publishes the peer's ring fd / eventfd. */
	go = !r->failed;
	pthread_mutex_unlock(&r->mu);

	if (go)
		s->err = s->id == 0 ? pp__ping(s, peer) : pp__pong(s, peer);
	if (s->inited)
		r->ops->fini(s);
	return NULL;
}

static int pp__run(struct pp_run *r, double *ns_per_rtt)
{
	cpu_set_t allowed;
	int rc = 0, started = 0;

	if (!ns_per_rtt || !r->iters)
		return -EINVAL;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);

	/* Pin A and B apart on CPUs 0 and 1 when the process may use both;
	 * otherwise leave placement to the scheduler. */
	bool known = !sched_getaffinity(0, sizeof(allowed), &allowed);
	bool pin = known && CPU_ISSET(0, &allowed) && CPU_ISSET(1, &allowed);
	/* Two spinners sharing one CPU would each burn a whole time slice
	 * before the other may answer. */
	r->yield = known ? CPU_COUNT(&allowed) < 2 : sysconf(_SC_NPROCESSORS_ONLN) < 2;

	for (int i = 0; i < 2; i++) {
		struct pp_side *s = &r->side[i];
		pthread_attr_t attr;
		cpu_set_t set;

		s->run = r;
		s->id = i;
		s->cpu = pin ? i : -1;
		if ((rc = -pthread_attr_init(&attr)))
			break;
		if (pin) {
			CPU_ZERO(&set);
			CPU_SET(i, &set);
			rc = -pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
		}
		if (!rc)
			rc = -pthread_create(&s->tid, &attr, pp__thread, s);
		pthread_attr_destroy(&attr);
		if (rc)
			break;
		started++;
	}
	if (rc) {
		/* Stand in for the side that never started, so A does not
		 * wait for it. */
		pthread_mutex_lock(&r->mu);
		r->failed = true;
		r->ready += 2 - started;
		pthread_cond_broadcast(&r->cv);
		pthread_mutex_unlock(&r->mu);
	}
	for (int i = 0; i < started; i++)
		pthread_join(r->side[i].tid, NULL);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	if (rc)
		return rc;
	/* A's error first: B's is often just the echo of A's stop. */
	if ((rc = r->side[0].err) && rc != -ECANCELED)
		return rc;
	if (r->side[1].err)
		return r->side[1].err;
	if (rc)
		return rc;
	*ns_per_rtt = r->ns;
	return 0;
}

int pp_msgring_rtt_ex(uint32_t iters, bool spin, double *ns_per_rtt, unsigned *used_flags)
{
	struct pp_run r = {.ops = &msgring_ops, .iters = iters, .spin = spin, .fallback = true};
	int rc = pp__run(&r, ns_per_rtt);

	if (!rc && used_flags)
		*used_flags = r.side[0].ring_flags;
	return rc;
}

int pp_msgring_rtt(uint32_t iters, bool spin, double *ns_per_rtt)
{
	return pp_msgring_rtt_ex(iters, spin, ns_per_rtt, NULL);
}

int pp_msgring_rtt_flags(uint32_t iters, bool spin, unsigned setup_flags, double *ns_per_rtt)
{
	struct pp_run r = {.ops = &msgring_ops, .iters = iters, .spin = spin, .flags = setup_flags};
	return pp__run(&r, ns_per_rtt);
}

int pp_eventfd_rtt(uint32_t iters, bool spin, double *ns_per_rtt)
{
	struct pp_run r = {.ops = &eventfd_ops, .iters = iters, .spin = spin};
	return pp__run(&r, ns_per_rtt);
}
