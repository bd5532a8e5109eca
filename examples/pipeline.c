/* pipeline: three stages connected by channels.
 *
 *   pipeline [N]    numbers 1..N (default 100000) -> squares -> their sum
 *
 * generate sends 1..N into `numbers`, square turns each into its square on
 * `squares`, sum adds them up.  Each stage is a task; a full channel parks
 * its sender and an empty one its receiver, so the stages run at the pace
 * of the slowest and memory stays bounded by the channels' capacity.  A
 * stage that is done closes its output: the next stage's receive returns
 * -EPIPE once it has drained what is left, and ends in turn.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <cbcmn.h>

#define CAPACITY 64

struct pipeline {
	uint64_t n;
	cbcmn_chan *numbers, *squares;
	uint64_t sum, count;
};

static int64_t generate(cbcmn_cx *cx, void *arg)
{
	struct pipeline *p = arg;
	int rc = 0;
	for (uint64_t i = 1; i <= p->n && rc == 0; i++)
		rc = cbcmn_chan_send(cx, p->numbers, &i);
	cbcmn_chan_close(cx, p->numbers);
	return rc;
}

static int64_t square(cbcmn_cx *cx, void *arg)
{
	struct pipeline *p = arg;
	uint64_t v;
	int rc;
	while ((rc = cbcmn_chan_recv(cx, p->numbers, &v)) == 0) {
		uint64_t sq = v * v;
		if ((rc = cbcmn_chan_send(cx, p->squares, &sq)) != 0)
			break;
	}
	cbcmn_chan_close(cx, p->squares);
	return rc == -EPIPE ? 0 : rc; /* -EPIPE: the input is closed and drained */
}

static int64_t sum(cbcmn_cx *cx, void *arg)
{
	struct pipeline *p = arg;
	uint64_t v;
	int rc;
	while ((rc = cbcmn_chan_recv(cx, p->squares, &v)) == 0) {
		p->sum += v;
		p->count++;
	}
	return rc == -EPIPE ? 0 : rc;
}

static int64_t root(cbcmn_cx *cx, void *arg)
{
	struct pipeline *p = arg;
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	cbcmn_task_fn stages[] = {generate, square, sum};
	for (int i = 0; i < 3 && rc == 0; i++)
		rc = cbcmn_nursery_spawn(cx, n, stages[i], p, NULL);
	if (rc) /* the stages already running would wait for ever */
		cbcmn_nursery_cancel(n);
	int64_t err = cbcmn_nursery_await_all(cx, n); /* the first failure, if any */
	return rc ? rc : err;
}

int main(int argc, char **argv)
{
	struct pipeline p = {.n = 100000};
	if (argc > 1) {
		char *end;
		errno = 0;
		long long v = strtoll(argv[1], &end, 10);
		if (argc > 2 || errno || end == argv[1] || *end || v < 1 || v > 2000000) {
			fprintf(stderr, "usage: pipeline [N (1..2000000)]\n");
			return 2;
		}
		p.n = (uint64_t)v;
	}
	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(NULL, &rt);
	if (rc) {
		fprintf(stderr, "pipeline: cbcmn_runtime_create: %s\n", cbcmn_strerror(rc));
		return 1;
	}
	int64_t result = -1;
	if ((rc = cbcmn_chan_create(rt, CAPACITY, sizeof(uint64_t), &p.numbers)) == 0) {
		if ((rc = cbcmn_chan_create(rt, CAPACITY, sizeof(uint64_t), &p.squares)) == 0) {
			rc = cbcmn_runtime_run(rt, root, &p, &result);
			cbcmn_chan_destroy(p.squares);
		}
		cbcmn_chan_destroy(p.numbers);
	}
	cbcmn_runtime_destroy(rt);
	if (rc || result) {
		fprintf(stderr, "pipeline: %s\n", cbcmn_strerror(rc ? rc : (int)result));
		return 1;
	}
	printf("%" PRIu64 " squares of 1..%" PRIu64 ", sum = %" PRIu64 "\n", p.count, p.n, p.sum);
	return 0;
}
