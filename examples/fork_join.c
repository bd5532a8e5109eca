/* fork_join: a parallel sum with a nursery.
 *
 *   fork_join [N [TASKS]]    sum of 1..N (default 10000000) in TASKS (8) parts
 *
 * The root task opens a nursery, spawns one child per slice of 1..N, and
 * joins each child for its partial sum.  The children may run on any
 * executor (one per CPU); cbcmn_nursery_await_all() returns only when every
 * child has ended, so no task outlives the scope that started it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <cbcmn.h>

#define MAX_TASKS 1024

struct slice {
	uint64_t from, to; /* [from, to] */
};

static int64_t sum_slice(cbcmn_cx *cx, void *arg)
{
	const struct slice *s = arg;
	uint64_t sum = 0;
	for (uint64_t i = s->from; i <= s->to; i++) {
		sum += i;
		if ((i & 0xffff) == 0)
			cbcmn_yield(cx); /* a long loop lets the executor's other tasks run */
	}
	return (int64_t)sum;
}

struct job {
	uint64_t n;
	unsigned tasks;
	uint64_t sum;
};

static int64_t root(cbcmn_cx *cx, void *arg)
{
	struct job *job = arg;
	struct slice slices[MAX_TASKS];
	cbcmn_task *handles[MAX_TASKS];
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	uint64_t per = job->n / job->tasks;
	unsigned spawned = 0;
	for (unsigned k = 0; k < job->tasks; k++) {
		slices[k].from = k * per + 1;
		slices[k].to = k + 1 == job->tasks ? job->n : (k + 1) * per;
		rc = cbcmn_nursery_spawn(cx, n, sum_slice, &slices[k], &handles[k]);
		if (rc)
			break;
		spawned++;
	}
	int64_t err = cbcmn_nursery_await_all(cx, n);
	job->sum = 0;
	for (unsigned k = 0; k < spawned; k++) {
		int64_t part = 0;
		cbcmn_task_join(cx, handles[k], &part); /* once per handle */
		job->sum += (uint64_t)part;
	}
	return rc ? rc : err;
}

/* A whole number in [min, max] from s, or -1. */
static long long arg_num(const char *s, long long min, long long max)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -1;
	return v;
}

static int usage(void)
{
	fprintf(stderr, "usage: fork_join [N (1..1000000000) [TASKS (1..%d)]]\n", MAX_TASKS);
	return 2;
}

int main(int argc, char **argv)
{
	long long n = 10000000, tasks = 8;
	if (argc > 3)
		return usage();
	if (argc > 1 && (n = arg_num(argv[1], 1, 1000000000)) < 0)
		return usage();
	if (argc > 2 && (tasks = arg_num(argv[2], 1, MAX_TASKS)) < 0)
		return usage();
	struct job job = {.n = (uint64_t)n, .tasks = (unsigned)(tasks < n ? tasks : n)};

	cbcmn_runtime *rt;
	int rc = cbcmn_runtime_create(NULL, &rt); /* defaults: an executor per CPU */
	if (rc) {
		fprintf(stderr, "fork_join: cbcmn_runtime_create: %s\n", cbcmn_strerror(rc));
		return 1;
	}
	int64_t result = 0;
	rc = cbcmn_runtime_run(rt, root, &job, &result);
	cbcmn_runtime_destroy(rt);
	if (rc || result) {
		fprintf(stderr, "fork_join: %s\n", cbcmn_strerror(rc ? rc : (int)result));
		return 1;
	}
	printf("sum of 1..%" PRIu64 " in %u tasks = %" PRIu64 "\n", job.n, job.tasks, job.sum);
	return 0;
}
