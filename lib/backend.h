/* backend.h: private to libcbcmn: the one place the core (runtime.c,
 * sched.c, wake.c) picks between the two I/O backends: io_uring rings
 * (ring.c) and epoll sets (epoll.c); docs/IO.md, "Backends".
 *
 * The choice is made once per runtime (cbcmn__backend_choose()) and an
 * executor of an epoll runtime has e->ep; nothing else branches on it but
 * these, cbcmn__ring_busy() and io.c's start of a call.
 */
#ifndef CBCMN_BACKEND_H
#define CBCMN_BACKEND_H

#include "epoll.h"
#include "runtime.h"

/* At create, on the creating thread, before any executor exists: the
 * backend (cfg.backend, CBCMN_BACKEND) and, for io_uring, the kernel's
 * ring features.  0, or the create call's error. */
int cbcmn__backend_choose(struct cbcmn_runtime *rt);

/* At create, per executor: its doorbell (and epoll set). */
static inline int cbcmn__be_init(struct cbcmn__exec *e)
{
	return e->rt->ep_backend ? cbcmn__ep_init(e) : cbcmn__ring_efd(e);
}

/* On the executor's new thread: its ring (an epoll set is the executor's
 * from create on, whatever thread runs it). */
static inline int cbcmn__be_start(struct cbcmn__exec *e)
{
	return e->ep ? 0 : cbcmn__ring_create(e);
}

/* A new thread takes over from one that died. */
static inline int cbcmn__be_takeover(struct cbcmn__exec *e)
{
	return e->ep ? cbcmn__ep_takeover(e) : cbcmn__ring_takeover(e);
}

/* The thread ends (retires): its ring goes; an epoll set stays. */
static inline void cbcmn__be_close(struct cbcmn__exec *e)
{
	if (!e->ep)
		cbcmn__ring_close(e);
}

/* Park in the backend for a doorbell, I/O or timeout_ns (0: no limit). */
static inline void cbcmn__be_wait(struct cbcmn__exec *e, uint64_t timeout_ns)
{
	if (e->ep) {
		cbcmn__ep_wait(e, timeout_ns);
		return;
	}
	/* Submits what is queued too: the time slice's last step. */
	cbcmn__ring_submit(e, true, timeout_ns);
	cbcmn__ring_reap(e);
}

/* The executor goes (destroy): both are safe on what was never made. */
static inline void cbcmn__be_destroy(struct cbcmn__exec *e)
{
	cbcmn__ep_destroy(e);
	cbcmn__ring_destroy(e);
	cbcmn__mshot_fini(e); /* streams left open: nothing refers to them now */
}

#endif
