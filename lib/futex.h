/* futex.h: private to libcbcmn: the two futex calls the runtime uses. */
#ifndef CBCMN_FUTEX_H
#define CBCMN_FUTEX_H

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleep while *word == expect, at most timeout (NULL: forever, relative).
 * Returns 0 on wake-up, or -errno (EAGAIN: value differed, ETIMEDOUT). */
static inline int cbcmn__futex_wait(_Atomic uint32_t *word, uint32_t expect,
				    const struct timespec *timeout)
{
	long rc = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expect, timeout,
			  NULL, 0);
	return rc == 0 ? 0 : -errno;
}

static inline void cbcmn__futex_wake(_Atomic uint32_t *word, int n)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

#endif
