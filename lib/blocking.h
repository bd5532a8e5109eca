/* blocking.h: private to libcbcmn: the blocking pool's call for the epoll
 * backend (blocking.c; epoll.c), which needs what cbcmn_blocking() leaves
 * out: a deadline, and a way to interrupt fn once it runs.
 */
#ifndef CBCMN_BLOCKING_H
#define CBCMN_BLOCKING_H

#include "runtime.h"

/* cbcmn_blocking() for task self (checked by the caller), whose wait also
 * ends at deadline (cbcmn__now ns; UINT64_MAX: none), then -ETIMEDOUT as
 * CBCMN_ECANCELED otherwise.  Cancelled or timed out while fn runs, the
 * task calls interrupt(arg) (if not NULL) once, then waits for fn's return
 * as cbcmn_blocking() does, and *result is set.  -ENOMEM: no timer. */
int cbcmn__blocking_call(struct cbcmn_task *self, cbcmn_blocking_fn fn, void *arg,
			 int64_t *result, uint64_t deadline, void (*interrupt)(void *arg));

#endif
