/* helpers.h: shared by the cmocka suites. */
#ifndef CBCMN_TEST_HELPERS_H
#define CBCMN_TEST_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "cbcmn.h"

/* A feature this machine lacks: say why, then skip (never a silent pass). */
#define T_SKIP(...)                                                            \
	do {                                                                    \
		printf("[  SKIP    ] ");                                        \
		printf(__VA_ARGS__);                                            \
		printf("\n");                                                   \
		skip();                                                         \
	} while (0)

#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#else
#define T_ASAN 0
#endif
#if defined(__SANITIZE_THREAD__)
#define T_TSAN 1
#else
#define T_TSAN 0
#endif
/* Sanitizers slow everything down: scale stress loops by this. */
#define T_SCALE(n) ((T_ASAN || T_TSAN) ? ((n) / 10 ? (n) / 10 : 1) : (n))

static inline uint64_t t_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A runtime with n workers (0: default) and otherwise default config. */
static inline cbcmn_runtime *t_runtime(uint32_t workers)
{
	cbcmn_config cfg;
	cbcmn_config_init(&cfg);
	cfg.workers = workers;
	cbcmn_runtime *rt = NULL;
	int rc = cbcmn_runtime_create(&cfg, &rt);
	if (rc != 0)
		fail_msg("cbcmn_runtime_create: %s", cbcmn_strerror(rc));
	return rt;
}

static inline void t_destroy(cbcmn_runtime *rt)
{
	int rc = cbcmn_runtime_destroy(rt);
	if (rc != 0)
		fail_msg("cbcmn_runtime_destroy: %s", cbcmn_strerror(rc));
}

#endif
