/* test_ring.c: the executors' rings over their life: registration, submit
 * failures, reaping, and what a runtime leaves of the caller's own rings. */
#include <errno.h>
#include <liburing.h>

#include "helpers.h"

/* A NOP through ring u and its completion: 0, or what failed. */
static int ring_nop(struct io_uring *u)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(u);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, 42);
	int rc = io_uring_submit(u);
	if (rc != 1)
		return rc < 0 ? rc : -EIO;
	struct io_uring_cqe *cqe;
	rc = io_uring_wait_cqe(u, &cqe);
	if (rc)
		return rc;
	rc = cqe->user_data == 42 ? cqe->res : -EIO;
	io_uring_cqe_seen(u, cqe);
	return rc;
}

static int64_t noop(cbcmn_cx *cx, void *arg)
{
	(void)cx;
	(void)arg;
	return 0;
}

/* The bug: destroy ran liburing's io_uring_queue_exit() for every
 * executor's ring on the calling thread; each ring's fd was registered (an
 * index into its owner thread's table), and unregistering it from here
 * removed the caller's own registered ring at the same index. */
static void test_destroy_keeps_the_callers_registered_ring(void **state)
{
	(void)state;
	struct io_uring mine;
	assert_int_equal(io_uring_queue_init(8, &mine, 0), 0);
	int rc = io_uring_register_ring_fd(&mine);
	if (rc != 1) {
		io_uring_queue_exit(&mine);
		T_SKIP("registered ring fds are not supported here (%s)", strerror(-rc));
	}
	assert_int_equal(ring_nop(&mine), 0);
	/* Each set of setup flags: with SINGLE_ISSUER the kernel refuses a
	 * register call from another thread (-EEXIST), which hid the bug. */
	static const uint32_t flags[] = {0, CBCMN_RING_PLAIN, CBCMN_RING_SQPOLL};
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		cbcmn_config cfg;
		cbcmn_config_init(&cfg);
		cfg.workers = 2;
		cfg.ring_flags = flags[i];
		cbcmn_runtime *rt = t_runtime_cfg(&cfg);
		t_run(rt, noop, NULL, 0);
		t_destroy(rt);
		assert_int_equal(ring_nop(&mine), 0);
	}
	io_uring_queue_exit(&mine);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T_WATCHED_TEST(test_destroy_keeps_the_callers_registered_ring),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
