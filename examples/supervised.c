/* supervised: a supervised actor tree that keeps answering while a child
 * crashes.
 *
 *   supervised [N]    N requests (default 100, at most 1000)
 *
 * The tree, one supervisor and three children, each started after the ones
 * it depends on and stopped before them:
 *
 *   supervisor (strategy: restart the crashed child alone)
 *     0 store   keeps the total of every square computed
 *     1 worker  squares a number and adds it to the store  (needs the store)
 *     2 front   takes requests, hands them to the worker,  (needs the worker)
 *               answers them
 *
 * A client task sends the front requests 1..N and collects the answers on a
 * channel.  The worker crashes (returns an error) on its first try of every
 * request whose number ends in 7: the supervisor sees the DOWN and starts
 * a new worker, and the front, which monitors the worker, sends it again
 * every request not yet answered.  The one the worker died on is the oldest
 * of them (the worker takes its jobs in order, and its answers arrive
 * before its DOWN), so only that one counts a try: the next try succeeds.
 * Every request is answered once, the store has added each square once,
 * and the worker was restarted once per poison request; the program checks
 * all three and exits 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <cbcmn.h>
#include <cbcmn_actor.h>

#define MAX_REQUESTS 1000
/* Larger than every message that can be in one mailbox at once (N
 * requests, N answers), so that no actor ever waits on a full one: the
 * front and the worker send to each other, and two actors each waiting
 * for room in the other's mailbox would wait for ever. */
#define MAILBOX 2048

enum { STORE, WORKER, FRONT, NCHILDREN };
static const char *const child_name[NCHILDREN] = {"store", "worker", "front"};

/* Message types (below CBCMN_ACTOR_SYS). */
enum {
	REQ = 1, /* client -> front: body.u64 = {id, x} */
	JOB,     /* front -> worker: {id, x, tries} */
	RESULT,  /* worker -> front: {id, x * x} */
	ADD,     /* worker -> store: {x * x} */
	TOTAL,   /* client -> store: answer on the channel */
};

/* An answer on the client's channel. */
struct answer {
	uint64_t id, value;
};

/* What the tree shares: the children's state (each child gets a pointer
 * to it).  Written by one child at a time, or read after the tree ended. */
struct app {
	cbcmn_runtime *rt;
	cbcmn_actor_ref sup;    /* set before the first request reaches the front */
	cbcmn_chan *answers;    /* the client's */
	_Atomic uint32_t seq;   /* stop order */
	uint32_t stopped[NCHILDREN];
	_Atomic uint64_t crashes;
};

/* A child records its stop, to show the order: the supervisor stops the
 * front first, waits for it to end, then the worker, then the store. */
static void stopped(struct app *a, int i)
{
	a->stopped[i] = atomic_fetch_add(&a->seq, 1) + 1;
}

/* The reference of the running incarnation of child i: a restart makes a
 * new actor with a new reference, so children look each other up through
 * the supervisor instead of keeping one.  Waits while it is restarting. */
static int child(cbcmn_cx *cx, struct app *a, uint32_t i, cbcmn_actor_ref *out)
{
	int rc;
	while ((rc = cbcmn_sup_child_ref(NULL, cx, a->sup, i, out)) == -EAGAIN)
		if ((rc = cbcmn_sleep(cx, 1000000)) != 0)
			break;
	return rc;
}

/* ---- store --------------------------------------------------------------- */

static int64_t store(cbcmn_cx *cx, void *state)
{
	struct app *a = state;
	uint64_t total = 0;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0) {
		if (m.type == ADD) {
			total += m.body.u64[0];
		} else if (m.type == TOTAL) {
			struct answer ans = {0, total};
			cbcmn_chan_send(cx, a->answers, &ans);
		}
	}
	if (rc == -ESHUTDOWN) /* stopped: a normal end */
		stopped(a, STORE);
	return rc == -ESHUTDOWN ? 0 : rc;
}

/* ---- worker -------------------------------------------------------------- */

static int64_t worker(cbcmn_cx *cx, void *state)
{
	struct app *a = state;
	/* The store's reference, looked up at the first job: a->sup is
	 * known by then (the client set it before its first request). */
	cbcmn_actor_ref st = CBCMN_ACTOR_NONE;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0) {
		if (m.type != JOB || (st == CBCMN_ACTOR_NONE && (rc = child(cx, a, STORE, &st))))
			break;
		uint64_t id = m.body.u64[0], x = m.body.u64[1], tries = m.body.u64[2];
		if (id % 10 == 7 && tries == 0) {
			/* The crash: an error return halts the actor; its
			 * supervisor starts another. */
			atomic_fetch_add(&a->crashes, 1);
			return -EIO;
		}
		cbcmn_actor_msg add = {.type = ADD, .body.u64 = {x * x}};
		cbcmn_actor_msg res = {.type = RESULT, .body.u64 = {id, x * x}};
		if ((rc = cbcmn_actor_send(NULL, cx, st, &add)) ||
		    (rc = cbcmn_actor_send(NULL, cx, m.from, &res)))
			break;
	}
	if (rc == -ESHUTDOWN)
		stopped(a, WORKER);
	return rc == -ESHUTDOWN ? 0 : rc;
}

/* ---- front --------------------------------------------------------------- */

/* The requests handed to the worker and not yet answered, oldest first. */
struct pending {
	uint64_t id, x, tries;
};

static int64_t front(cbcmn_cx *cx, void *state)
{
	struct app *a = state;
	static struct pending p[MAX_REQUESTS]; /* one front at a time */
	size_t head = 0, tail = 0;             /* p[head..tail) pending */
	cbcmn_actor_ref w = CBCMN_ACTOR_NONE;
	uint64_t mon;
	cbcmn_actor_msg m;
	int rc;
	while ((rc = cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER)) == 0) {
		size_t from = tail; /* what to send to the worker after this message */
		if (m.type == REQ) {
			p[tail++] = (struct pending){m.body.u64[0], m.body.u64[1], 0};
		} else if (m.type == RESULT) {
			/* Answers come in the order the jobs went. */
			struct answer ans = {m.body.u64[0], m.body.u64[1]};
			head++;
			cbcmn_chan_send(cx, a->answers, &ans);
			continue;
		} else if (m.type == CBCMN_ACTOR_DOWN && m.from == w) {
			/* The worker crashed on the oldest pending job (the
			 * rest are lost in its mailbox): one more try for
			 * that one, and everything again to the new worker.
			 * -ESRCH: the reference we looked up was of the worker
			 * that just died (its supervisor had not seen its end
			 * yet): no crash of its own; look again a little later. */
			if (m.body.down.reason == -ESRCH)
				cbcmn_sleep(cx, 1000000);
			else if (head < tail)
				p[head].tries++;
			w = CBCMN_ACTOR_NONE;
			from = head;
		} else {
			continue;
		}
		if (w == CBCMN_ACTOR_NONE) {
			/* First job, or a new worker: find it and watch it. */
			if ((rc = child(cx, a, WORKER, &w)) || (rc = cbcmn_actor_monitor(cx, w, &mon)))
				break;
		}
		for (size_t i = from; i < tail; i++) {
			cbcmn_actor_msg job = {.type = JOB, .body.u64 = {p[i].id, p[i].x, p[i].tries}};
			/* -ESRCH: the worker has just died; its DOWN is on the
			 * way and will send this job again. */
			if ((rc = cbcmn_actor_send(NULL, cx, w, &job)) != 0 && rc != -ESRCH)
				goto out;
		}
	}
out:
	if (rc == -ESHUTDOWN)
		stopped(a, FRONT);
	return rc == -ESHUTDOWN ? 0 : rc;
}

/* ---- the client and main ---------------------------------------------------- */

struct run {
	struct app *app;
	uint64_t n, answered, sum, total, restarts;
	int64_t sup_reason;
};

static int64_t client(cbcmn_cx *cx, void *arg)
{
	struct run *r = arg;
	struct app *a = r->app;
	static const uint32_t worker_deps[] = {STORE}, front_deps[] = {WORKER};
	/* Placement 0 (CBCMN_PLACE_LOCAL): each child starts on the
	 * supervisor's executor and may be stolen or migrated. */
	const cbcmn_sup_child children[NCHILDREN] = {
		[STORE] = {.fn = store, .state = a, .mailbox_cap = MAILBOX},
		[WORKER] = {.fn = worker, .state = a, .deps = worker_deps, .ndeps = 1,
			    .mailbox_cap = MAILBOX},
		[FRONT] = {.fn = front, .state = a, .deps = front_deps, .ndeps = 1,
			   .mailbox_cap = MAILBOX},
	};
	cbcmn_sup_report report;
	const cbcmn_sup_spec spec = {
		.strategy = CBCMN_SUP_ONE, /* the crashed child alone */
		.max_restarts = MAX_REQUESTS, /* more in period_ns and the supervisor gives up */
		.period_ns = 10ull * 1000000000,
		.children = children,
		.nchildren = NCHILDREN,
		.report = &report,
	};
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(a->rt, cx, &n);
	if (rc)
		return rc;
	if ((rc = cbcmn_sup_start(cx, n, &spec, NULL, &a->sup)) == 0) {
		cbcmn_actor_ref f;
		rc = child(cx, a, FRONT, &f);
		for (uint64_t id = 1; id <= r->n && rc == 0; id++) {
			cbcmn_actor_msg req = {.type = REQ, .body.u64 = {id, id}};
			rc = cbcmn_actor_send(NULL, cx, f, &req);
		}
		struct answer ans;
		while (rc == 0 && r->answered < r->n && (rc = cbcmn_chan_recv(cx, a->answers, &ans)) == 0) {
			r->answered++;
			r->sum += ans.value;
		}
		/* Every square is in: ask the store for its total. */
		cbcmn_actor_ref st;
		cbcmn_actor_msg q = {.type = TOTAL};
		if (rc == 0 && (rc = child(cx, a, STORE, &st)) == 0 &&
		    (rc = cbcmn_actor_send(NULL, cx, st, &q)) == 0 &&
		    (rc = cbcmn_chan_recv(cx, a->answers, &ans)) == 0)
			r->total = ans.value;
		/* Stop the tree: front, worker, store, each waited for. */
		cbcmn_actor_stop(NULL, cx, a->sup, 0);
	}
	int64_t end = cbcmn_nursery_await_all(cx, n);
	if (rc == 0) {
		r->restarts = report.restarts;
		r->sup_reason = report.reason;
	}
	return rc ? rc : end;
}

int main(int argc, char **argv)
{
	struct app app = {0};
	struct run r = {.app = &app, .n = 100};
	if (argc > 1) {
		char *end;
		errno = 0;
		long long v = strtoll(argv[1], &end, 10);
		if (argc > 2 || errno || end == argv[1] || *end || v < 1 || v > MAX_REQUESTS) {
			fprintf(stderr, "usage: supervised [N (1..%d)]\n", MAX_REQUESTS);
			return 2;
		}
		r.n = (uint64_t)v;
	}
	int rc = cbcmn_runtime_create(NULL, &app.rt);
	if (rc) {
		fprintf(stderr, "supervised: cbcmn_runtime_create: %s\n", cbcmn_strerror(rc));
		return 1;
	}
	int64_t result = -1;
	/* Room for every answer: the front never waits on the client. */
	if ((rc = cbcmn_chan_create(app.rt, MAX_REQUESTS + 1, sizeof(struct answer), &app.answers)) == 0) {
		rc = cbcmn_runtime_run(app.rt, client, &r, &result);
		cbcmn_chan_destroy(app.answers);
	}
	cbcmn_runtime_destroy(app.rt);
	if (rc || result) {
		fprintf(stderr, "supervised: %s\n", cbcmn_strerror(rc ? rc : (int)result));
		return 1;
	}
	uint64_t want_sum = r.n * (r.n + 1) * (2 * r.n + 1) / 6, want_crashes = (r.n + 3) / 10;
	/* The children in the order they stopped. */
	const char *order[NCHILDREN] = {"?", "?", "?"};
	for (int i = 0; i < NCHILDREN; i++)
		if (app.stopped[i] >= 1 && app.stopped[i] <= NCHILDREN)
			order[app.stopped[i] - 1] = child_name[i];
	printf("supervised: stopped %s, %s, %s (dependents first)\n", order[0], order[1], order[2]);
	printf("supervised: %" PRIu64 " requests answered, sum of squares %" PRIu64
	       ", store total %" PRIu64 "\n", r.answered, r.sum, r.total);
	printf("supervised: worker crashes %" PRIu64 ", supervisor restarts %" PRIu64 "\n",
	       (uint64_t)app.crashes, r.restarts);
	bool ok = r.answered == r.n && r.sum == want_sum && r.total == want_sum &&
		  app.crashes == want_crashes && r.restarts == want_crashes && r.sup_reason == 0 &&
		  app.stopped[FRONT] == 1 && app.stopped[WORKER] == 2 && app.stopped[STORE] == 3;
	if (!ok) {
		fprintf(stderr, "supervised: check failed (want %" PRIu64 " answers, sum %" PRIu64
				", %" PRIu64 " restarts, stops front, worker, store)\n",
			r.n, want_sum, want_crashes);
		return 1;
	}
	return 0;
}
