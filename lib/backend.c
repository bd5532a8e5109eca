/* backend.c: which I/O backend a runtime runs on (backend.h; docs/IO.md,
 * "Backends"): io_uring, or epoll where the kernel refuses io_uring or the
 * program runs under valgrind. */
#include <errno.h>
#include <link.h>
#include <stdatomic.h>
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

/* Under valgrind (any tool): valgrind runs one thread at a time, under a
 * lock it lets go of only around the system calls it knows may block, and
 * 3.19 does not count io_uring_enter among them: an executor parked in its
 * ring held every other thread, and the doorbell or the write that would
 * have woken it never came (the program hung, and not even SIGTERM ended
 * it: valgrind keeps signals blocked in such a call).  Valgrind preloads
 * its vgpreload_core library into the programs it runs, and takes it out
 * of LD_PRELOAD again for the children it does not follow (a child run
 * natively is not mistaken for one under valgrind).  LD_PRELOAD is read
 * as the CBCMN_* variables are (cbcmn__env(): nothing in a set-uid
 * program, which valgrind does not run as such; test_env's imports
 * check). */
static int vgpreload_loaded(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	return info->dlpi_name && strstr(info->dlpi_name, "/vgpreload_core-") != NULL;
}

/* The library loaded, too: a program may rewrite LD_PRELOAD (for its own
 * children, or a cleared environment) before it makes a runtime, and the
 * valgrind running it stays (test_regression_valgrind_recognised_after_
 * ld_preload_changes: it hung on io_uring). */
static bool under_valgrind(void)
{
	const char *p = cbcmn__env("LD_PRELOAD");
	return (p && strstr(p, "/vgpreload_core-") != NULL) || dl_iterate_phdr(vgpreload_loaded, NULL) != 0;
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
	if (under_valgrind()) {
		/* Each said once per process: a program may make many
		 * runtimes, and the warning is not the notice (one flag for
		 * both kept an explicit io_uring's warning unsaid after a
		 * runtime left to choose). */
		static atomic_bool said, warned;
		if (want == CBCMN_BACKEND_AUTO) {
			want = CBCMN_BACKEND_EPOLL;
			if (!atomic_exchange(&said, true))
				fprintf(stderr, "cbcmn: under valgrind: the epoll backend (valgrind "
						"runs no other thread while io_uring_enter waits)\n");
		} else if (want == CBCMN_BACKEND_IO_URING && !atomic_exchange(&warned, true)) {
			fprintf(stderr, "cbcmn: the io_uring backend under valgrind: a wait in "
					"io_uring_enter stops every thread, and may hang\n");
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
