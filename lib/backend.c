/* backend.c: which I/O backend a runtime runs on (backend.h; docs/IO.md,
 * "Backends"): io_uring, or epoll where the kernel refuses io_uring. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "backend.h"

/* io_uring_setup's answers that mean "no io_uring here", as opposed to a
 * resource the caller can do something about (-ENOMEM, -EMFILE,
 * CBCMN_EMEMLOCK): a seccomp profile or kernel.io_uring_disabled (-EPERM;
 * some LSMs say -EACCES), a kernel built without it (-ENOSYS), one too old
 * for the runtime (-EOPNOTSUPP: no IORING_FEAT_EXT_ARG, before 5.11). */
static bool refused(int rc)
{
	return rc == -EPERM || rc == -EACCES || rc == -ENOSYS || rc == -EOPNOTSUPP;
}

int cbcmn__backend_choose(struct cbcmn_runtime *rt)
{
	uint32_t want = rt->cfg.backend;
	const char *env = cbcmn__env("CBCMN_BACKEND");
	/* The environment overrides the default only: a program that asked
	 * for a backend gets it. */
	if (want == CBCMN_BACKEND_AUTO && env && *env) {
		if (strcmp(env, "io_uring") == 0) {
			want = CBCMN_BACKEND_IO_URING;
		} else if (strcmp(env, "epoll") == 0) {
			want = CBCMN_BACKEND_EPOLL;
		} else if (strcmp(env, "auto") != 0) {
			fprintf(stderr, "cbcmn: CBCMN_BACKEND=%.40s: not auto, io_uring or epoll\n", env);
			return -EINVAL;
		}
	}
	if (want != CBCMN_BACKEND_EPOLL) {
		int rc = cbcmn__ring_probe(rt);
		if (rc == 0)
			return 0;
		if (want == CBCMN_BACKEND_IO_URING && refused(rc))
			fprintf(stderr, "cbcmn: the io_uring backend was asked for and the kernel "
					"refuses io_uring (%s)\n", cbcmn_strerror(rc));
		if (want == CBCMN_BACKEND_IO_URING || !refused(rc))
			return rc;
	}
	memset(&rt->ring_caps, 0, sizeof(rt->ring_caps));
	/* Streams and acceptors: their SQEs are emulated (epoll_sq.c). */
	rt->ring_caps.multishot_recv = rt->ring_caps.multishot_accept = true;
	rt->ep_backend = true;
	return 0;
}
