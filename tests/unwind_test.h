/* unwind_test.h: a backtrace's return addresses, collected with
 * _Unwind_Backtrace(t_trace_frame, &trace), for the suites that check
 * what an unwinder sees across the runtime's stack switches. */
#ifndef CBCMN_TESTS_UNWIND_TEST_H
#define CBCMN_TESTS_UNWIND_TEST_H

#include <stdint.h>
#include <unwind.h>

#define T_TRACE_MAX 32

struct t_trace {
	uintptr_t ip[T_TRACE_MAX];
	int n;
};

static inline _Unwind_Reason_Code t_trace_frame(struct _Unwind_Context *c, void *arg)
{
	struct t_trace *t = arg;
	if (t->n == T_TRACE_MAX)
		return _URC_NORMAL_STOP;
	t->ip[t->n++] = _Unwind_GetIP(c);
	return _URC_NO_REASON;
}

#endif
