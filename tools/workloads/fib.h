/* fib.h: the fork-join workload the tools share: fib(n) with one task per
 * call, each call opening a nursery for its two children. */
#ifndef CBCMN_TOOLS_FIB_H
#define CBCMN_TOOLS_FIB_H

#include "cbcmn.h"

struct fib {
	int n;
	int64_t out;
};

static int64_t fib_task(cbcmn_cx *cx, void *arg)
{
	struct fib *f = arg;
	if (f->n < 2) {
		f->out = f->n;
		return 0;
	}
	struct fib a = {.n = f->n - 1}, b = {.n = f->n - 2};
	cbcmn_nursery *n;
	int rc = cbcmn_nursery_open(cbcmn_cx_runtime(cx), cx, &n);
	if (rc)
		return rc;
	if ((rc = cbcmn_nursery_spawn(cx, n, fib_task, &a, NULL)) == 0)
		rc = cbcmn_nursery_spawn(cx, n, fib_task, &b, NULL);
	/* On a failed spawn the nursery still has to be awaited. */
	int64_t r = cbcmn_nursery_await_all(cx, n);
	f->out = a.out + b.out;
	return rc ? rc : r;
}

/* The answer to check against. */
static inline int64_t fib_seq(int n)
{
	return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2);
}

#endif
