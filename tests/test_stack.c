/* test_stack: the fiber stack pool: guard regions, canaries, recycling, cost. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "fault.h"
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

#include "stack.h"

#define STACK_BYTES (64u * 1024)
#define MANY 100000u

static size_t pg(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static long read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static long max_map_count(void)
{
	long v = read_long("/proc/sys/vm/max_map_count");
	assert_true(v > 0);
	return v;
}

static long maps_lines(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	assert_non_null(f);
	long n = 0;
	int c;
	while ((c = getc(f)) != EOF)
		n += c == '\n';
	fclose(f);
	return n;
}

/* Bytes of [lo, hi) that /proc/self/maps shows mapped. */
static size_t mapped_bytes(uintptr_t lo, uintptr_t hi)
{
	FILE *f = fopen("/proc/self/maps", "r");
	assert_non_null(f);
	char line[512];
	size_t n = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;
		if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a < hi && b > lo)
			n += (b < hi ? b : hi) - (a > lo ? a : lo);
	}
	fclose(f);
	return n;
}

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	assert_non_null(f);
	char line[256];
	long kib = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	assert_true(kib > 0);
	return kib;
}

/* Can the kernel read this byte?  EFAULT instead of a signal, so it also
 * works where a sanitizer owns SIGSEGV. */
static bool kernel_readable(const void *addr)
{
	int fd[2];
	assert_int_equal(pipe(fd), 0);
	ssize_t n = write(fd[1], addr, 1);
	int err = errno;
	close(fd[0]);
	close(fd[1]);
	if (n < 0)
		assert_int_equal(err, EFAULT);
	return n == 1;
}

/* Pages of [lo, hi) in memory right now. */
static size_t resident_pages(const void *lo, const void *hi)
{
	uintptr_t a = (uintptr_t)lo & ~(uintptr_t)(pg() - 1);
	size_t n = ((uintptr_t)hi - a + pg() - 1) / pg();
	unsigned char *vec = malloc(n);
	assert_non_null(vec);
	assert_int_equal(mincore((void *)a, n * pg(), vec), 0);
	size_t r = 0;
	for (size_t i = 0; i < n; i++)
		r += vec[i] & 1;
	free(vec);
	return r;
}

/* stack.c keeps its slab record private.  This mirrors its head, and the
 * count is only trusted once the slabs' lengths add up to the stacks the
 * pool says it made: a changed layout fails here, loudly. */
struct slab_mirror {
	void *base;
	size_t len;
};

static uint32_t count_slabs(const struct cbcmn__stack_pool *p)
{
	size_t bytes = 0;
	for (uint32_t at = 0; at < p->nslabs; at++) {
		const struct slab_mirror *sl = (const void *)p->by_addr[at];
		assert_int_equal((uintptr_t)sl->base % pg(), 0);
		if (at)
			assert_true(sl->base > ((const struct slab_mirror *)(const void *)p->by_addr[at - 1])->base);
		bytes += sl->len;
	}
	assert_int_equal(bytes, p->stacks_total * p->region);
	return p->nslabs;
}

/* A pool whose guards are made the old way, with mprotect, as on a kernel
 * without MADV_GUARD_INSTALL (before Linux 6.13). */
static void pool_init_prot(struct cbcmn__stack_pool *p, size_t bytes, uint32_t guard_max)
{
	cbcmn__stack_test_no_lightweight_guards = true;
	int rc = cbcmn__stack_pool_init(p, bytes, guard_max);
	cbcmn__stack_test_no_lightweight_guards = false;
	assert_int_equal(rc, 0);
	assert_int_equal(p->guard_kind, CBCMN__GUARD_PROT);
}

/* A pool the default way: lightweight guards where the kernel has them. */
static bool pool_init_default(struct cbcmn__stack_pool *p, size_t bytes, uint32_t guard_max)
{
	assert_int_equal(cbcmn__stack_pool_init(p, bytes, guard_max), 0);
	return p->guard_kind == CBCMN__GUARD_MADV;
}

static void drain_fini(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c)
{
	cbcmn__stack_cache_drain(p, c);
	assert_int_equal(p->nfree, p->stacks_total);
	cbcmn__stack_pool_fini(p);
}

/* ---- the map budget ------------------------------------------------------- */

static void test_guard_budget(void **state)
{
	(void)state;
	long max = max_map_count();
	long maps = maps_lines();
	uint64_t b = cbcmn__stack_guard_budget();
	printf("  vm.max_map_count %ld, %ld maps now, guard budget %llu stacks\n", max, maps,
	       (unsigned long long)b);
	assert_true(b > 0);
	assert_true(b < (uint64_t)max / 2);
	/* Two entries per guarded stack, and room left for the rest of the
	 * process (libraries, threads, rings): spending it all stays below
	 * the limit by at least the reserve. */
	assert_true((long)(2 * b) + maps + max / 4 <= max + 16);
}

static void test_guard_max_clamped_to_budget(void **state)
{
	(void)state;
	struct cbcmn__stack_pool p;
	uint64_t budget = cbcmn__stack_guard_budget();
	pool_init_prot(&p, STACK_BYTES, UINT32_MAX - 1);
	uint64_t granted = p.guard_left;
	cbcmn__stack_pool_fini(&p);
	assert_true(granted > 0);
	assert_true(granted <= budget + 16);

	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, UINT32_MAX), 0);
	assert_int_equal(p.guard_left, 0);
	assert_int_equal(p.guard_kind, CBCMN__GUARD_NONE);
	cbcmn__stack_pool_fini(&p);

	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES + 1, 0), -EINVAL);
}

/* ---- layout and guard regions --------------------------------------------- */

static void guard_region_case(bool prot)
{
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	if (prot)
		pool_init_prot(&p, STACK_BYTES, 4);
	else if (!pool_init_default(&p, STACK_BYTES, 4))
		printf("  no lightweight guards on this kernel: mprotect twice\n");
	long maps0 = maps_lines();
	struct cbcmn__stack *s = cbcmn__stack_get(&p, &c);
	assert_non_null(s);
	assert_true(s->guarded);

	char *lo = s->lo, *top = cbcmn__stack_top(s);
	assert_int_equal((uintptr_t)lo % pg(), 0);
	assert_int_equal(s->size, STACK_BYTES - sizeof(struct cbcmn__stack));
	assert_ptr_equal(top, lo + s->size);
	assert_int_equal((uintptr_t)top % 16, 0);
	/* A red page, then the yellow zone, then the stack. */
	assert_ptr_equal(cbcmn__stack_yellow_lo(s), s->guard_lo + CBCMN__RED_BYTES);
	assert_true((size_t)(lo - cbcmn__stack_yellow_lo(s)) >= CBCMN__YELLOW_BYTES);
	assert_int_equal((size_t)(lo - s->guard_lo), p.guard_bytes);

	char perms[5];
	if (s->guard_kind == CBCMN__GUARD_PROT) {
		assert_true(t_maps_perms(lo - 1, perms, NULL));
		assert_string_equal(perms, "---p");
		assert_true(t_maps_perms(s->guard_lo, perms, NULL));
		assert_string_equal(perms, "---p");
	} else {
		/* Markers in the page tables: the slab stays one mapping. */
		assert_int_equal(s->guard_kind, CBCMN__GUARD_MADV);
		assert_true(t_maps_perms(lo - 1, perms, NULL));
		assert_string_equal(perms, "rw-p");
		assert_true(maps_lines() - maps0 <= 2);
	}
	assert_true(t_maps_perms(lo, perms, NULL));
	assert_string_equal(perms, "rw-p");
	assert_true(t_maps_perms(top - 1, perms, NULL));
	assert_string_equal(perms, "rw-p");
	assert_false(kernel_readable(lo - 1));
	assert_false(kernel_readable(cbcmn__stack_yellow_lo(s)));
	assert_false(kernel_readable(s->guard_lo));
	assert_true(kernel_readable(lo));

	assert_true(cbcmn__stack_in_guard(s, lo - 1));
	assert_true(cbcmn__stack_in_guard(s, s->guard_lo));
	assert_false(cbcmn__stack_in_guard(s, lo));
	assert_false(cbcmn__stack_in_guard(s, s->guard_lo - 1));
	assert_true(cbcmn__stack_in_red(s, s->guard_lo));
	assert_true(cbcmn__stack_in_red(s, cbcmn__stack_yellow_lo(s) - 1));
	assert_false(cbcmn__stack_in_red(s, cbcmn__stack_yellow_lo(s)));
	assert_false(cbcmn__stack_in_red(s, lo - 1));

	/* The whole usable range is ours, and the descriptor right above it
	 * survives a fiber that fills it. */
	memset(lo, 0x5a, s->size);
	assert_ptr_equal(s->lo, lo);
	assert_int_equal(s->size, STACK_BYTES - sizeof(struct cbcmn__stack));
	assert_true(s->guarded);

	/* The real thing: an overflow by one byte kills with SIGSEGV. */
	pid_t pid = t_fork_coreless();
	if (pid == 0) {
		/* Straight to the kernel: a sanitizer's sigaction interceptor
		 * may refuse to give SIGSEGV back. */
		struct { void *handler; unsigned long flags; void *restorer; uint64_t mask; }
			dfl = {SIG_DFL, 0, NULL, 0};
		syscall(SYS_rt_sigaction, SIGSEGV, &dfl, NULL, sizeof(dfl.mask));
		volatile char *v = lo;
		v[0] = 1;
		v[s->size - 1] = 1;
		v[-1] = 1;
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV)
		fail_msg("write below lo: child %s %d, want killed by SIGSEGV",
			 WIFSIGNALED(st) ? "signal" : "exit status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));

	cbcmn__stack_put(&p, &c, s);
	drain_fini(&p, &c);
}

static void test_guard_region_faults(void **state)
{
	(void)state;
	guard_region_case(false);
	guard_region_case(true);
}

/* The yellow zone opens for a library call to finish (overflow.c) and
 * closes again: the red page below it never opens. */
static void yellow_case(bool prot)
{
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	if (prot)
		pool_init_prot(&p, STACK_BYTES, 0);
	else
		pool_init_default(&p, STACK_BYTES, 0);
	long maps0 = maps_lines();
	struct cbcmn__stack *s = cbcmn__stack_get(&p, &c);
	assert_non_null(s);
	long maps1 = maps_lines();
	char *check = s->check_lo;
	assert_true(check > s->lo && check <= s->lo + 8192);

	assert_int_equal(cbcmn__stack_yellow_open(s), 0);
	assert_true(s->yellow_open);
	assert_ptr_equal(s->check_lo, (char *)UINTPTR_MAX); /* the next runtime call ends it */
	memset(cbcmn__stack_yellow_lo(s), 0x6b, (size_t)(s->lo - cbcmn__stack_yellow_lo(s)));
	assert_false(kernel_readable(cbcmn__stack_yellow_lo(s) - 1));
	assert_false(kernel_readable(s->guard_lo));
	/* Opening from the top merges with the stack's mapping. */
	assert_true(maps_lines() <= maps1 + 1);

	cbcmn__stack_yellow_close(s);
	assert_false(s->yellow_open);
	assert_ptr_equal(s->check_lo, check);
	assert_false(kernel_readable(cbcmn__stack_yellow_lo(s)));
	assert_false(kernel_readable(s->lo - 1));
	assert_true(maps_lines() <= maps1);
	/* And it gave the memory back. */
	assert_int_equal(resident_pages(cbcmn__stack_yellow_lo(s), s->lo), 0);

	/* A stack handed back with its zone open is guarded again, into a
	 * cache or straight to the shared pool. */
	assert_int_equal(cbcmn__stack_yellow_open(s), 0);
	cbcmn__stack_put(&p, &c, s);
	assert_false(s->yellow_open);
	assert_false(kernel_readable(s->lo - 1));
	assert_ptr_equal(cbcmn__stack_get(&p, &c), s);
	assert_int_equal(cbcmn__stack_yellow_open(s), 0);
	cbcmn__stack_put(&p, NULL, s);
	assert_true(cbcmn__stack_pool_holds(&p, s));
	assert_false(s->yellow_open);
	assert_false(kernel_readable(s->lo - 1));
	drain_fini(&p, &c);
	assert_true(maps_lines() <= maps0 + 2);
}

static void test_yellow_zone_opens_and_closes(void **state)
{
	(void)state;
	yellow_case(false);
	yellow_case(true);
}

static int cmp_stack_lo(const void *a, const void *b)
{
	const struct cbcmn__stack *x = *(struct cbcmn__stack *const *)a;
	const struct cbcmn__stack *y = *(struct cbcmn__stack *const *)b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Regression: beyond the map budget a stack had no guard page, only a
 * canary checked after the fact, and a fiber that overflowed it wrote over
 * its neighbour and aborted the process.  Now such a stack is refused (its
 * task fails with -ENOMEM), or, with lightweight guards, there is no
 * budget to run out of. */
static void test_beyond_map_budget_a_stack_is_refused(void **state)
{
	(void)state;
	enum { N = 200 };
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	struct cbcmn__stack *s[N];
	pool_init_prot(&p, STACK_BYTES, 4);
	long maps0 = maps_lines();
	int saved, fd = t_stderr_capture(&saved);
	for (int i = 0; i < 4; i++) {
		s[i] = cbcmn__stack_get(&p, &c);
		assert_non_null(s[i]);
		assert_true(s[i]->guarded);
	}
	struct cbcmn__stack *more = cbcmn__stack_get(&p, &c);
	struct cbcmn__stack *again = cbcmn__stack_get(&p, &c);
	char msg[1024];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	assert_null(more);
	assert_null(again);
	assert_int_equal(p.stacks_guarded, 4);
	assert_int_equal(p.stacks_total, 4);
	assert_int_equal(p.guard_left, 0);
	/* One line, once, naming the cause and the ways out. */
	assert_non_null(strstr(msg, "vm.max_map_count"));
	assert_non_null(strstr(msg, "guard_stacks_max"));
	assert_null(strstr(strstr(msg, "cbcmn:") + 1, "cbcmn:"));
	/* Four guards split their slab into 8 entries. */
	assert_true(maps_lines() - maps0 <= 8 + (long)count_slabs(&p) + 4);
	/* A stack given back is handed out again: recycling needs no map. */
	cbcmn__stack_put(&p, &c, s[3]);
	assert_ptr_equal(cbcmn__stack_get(&p, &c), s[3]);
	for (int i = 0; i < 4; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	drain_fini(&p, &c);

	/* With lightweight guards guard_stacks_max costs nothing to honour:
	 * every stack is guarded and the slabs stay whole. */
	if (!pool_init_default(&p, STACK_BYTES, 4)) {
		cbcmn__stack_pool_fini(&p);
		T_SKIP("no MADV_GUARD_INSTALL (Linux 6.13+): lightweight guards untested");
		return;
	}
	maps0 = maps_lines();
	for (int i = 0; i < N; i++) {
		s[i] = cbcmn__stack_get(&p, &c);
		assert_non_null(s[i]);
		assert_true(s[i]->guarded);
		assert_int_equal(s[i]->guard_kind, CBCMN__GUARD_MADV);
	}
	assert_int_equal(p.stacks_guarded, p.stacks_total);
	assert_true(maps_lines() - maps0 <= (long)count_slabs(&p) + 4);
	/* No two stacks share a byte, guard regions and descriptors included. */
	qsort(s, N, sizeof(s[0]), cmp_stack_lo);
	for (int i = 1; i < N; i++) {
		char *prev_end = (char *)cbcmn__stack_top(s[i - 1]) + sizeof(struct cbcmn__stack);
		assert_true(prev_end <= s[i]->guard_lo);
	}
	for (int i = 0; i < N; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	drain_fini(&p, &c);
}

static void test_no_guards(void **state)
{
	(void)state;
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	struct cbcmn__stack *s[100];
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, UINT32_MAX), 0);
	for (int i = 0; i < 100; i++) {
		s[i] = cbcmn__stack_get(&p, &c);
		assert_non_null(s[i]);
		assert_false(s[i]->guarded);
		assert_false(cbcmn__stack_in_guard(s[i], s[i]->lo - 1));
		assert_true(cbcmn__stack_canary_ok(s[i]));
	}
	assert_int_equal(p.stacks_guarded, 0);
	for (int i = 0; i < 100; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	drain_fini(&p, &c);
}

/* ---- slab growth under memory pressure ------------------------------------ */

/* Regression: after one large slab mapping failed, every later stack_get
 * that needed a new slab failed too (-ENOMEM), though smaller mappings
 * still fit.  Now the slab halves, down to one stack. */
static void test_slab_halves_after_a_failed_mapping(void **state)
{
	(void)state;
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	struct cbcmn__stack *s[200];
	pool_init_default(&p, STACK_BYTES, 0);
	/* Nothing over three stacks maps: slabs of 2 after 16, 8, 4 fail. */
	cbcmn__stack_test_fail_map_over = 3 * p.region;
	for (int i = 0; i < 200; i++) {
		s[i] = cbcmn__stack_get(&p, &c);
		if (!s[i]) {
			cbcmn__stack_test_fail_map_over = 0;
			fail_msg("stack %d: NULL although slabs of 2 still map", i);
		}
		assert_true(s[i]->guarded);
	}
	uint32_t small = count_slabs(&p);
	assert_int_equal(p.stacks_total, 200);
	assert_true(small >= 100);
	/* The pressure is gone: slabs grow again, from where they were. */
	cbcmn__stack_test_fail_map_over = 0;
	uint64_t total = p.stacks_total;
	uint32_t more = 0;
	while (p.stacks_total < total + 64) {
		assert_non_null(cbcmn__stack_get(&p, &c));
		more++;
	}
	assert_true(count_slabs(&p) - small <= 6);

	/* Nothing maps at all: a clean NULL once the free stacks are gone. */
	cbcmn__stack_test_fail_map_over = 1;
	while (cbcmn__stack_get(&p, &c))
		more++;
	assert_null(cbcmn__stack_get(&p, &c));
	cbcmn__stack_test_fail_map_over = 0;
	assert_int_equal(200 + more, p.stacks_total);
	for (int i = 0; i < 200; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	cbcmn__stack_cache_drain(&p, &c);
	cbcmn__stack_pool_fini(&p); /* fini unmaps every slab, stacks out or not */
}

/* The same under a real limit: RLIMIT_AS lets small slabs map where big
 * ones fail, much as a commit limit does (vm.overcommit_memory=2 ignores
 * MAP_NORESERVE and charges every slab in full). */
static void test_slab_halves_under_rlimit_as(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) {
		T_SKIP("sanitizers reserve terabytes of address space: no RLIMIT_AS");
		return;
	}
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct cbcmn__stack_pool p;
		struct cbcmn__stack_cache c = {0};
		if (cbcmn__stack_pool_init(&p, STACK_BYTES, 0) != 0)
			_exit(2);
		FILE *f = fopen("/proc/self/status", "r");
		char line[256];
		long vm_kib = -1;
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "VmSize: %ld kB", &vm_kib) == 1)
				break;
		if (f)
			fclose(f);
		if (vm_kib < 0)
			_exit(3);
		/* Room for about 40 stacks: the first slab (16) fits, the
		 * second (32) does not. */
		struct rlimit as;
		getrlimit(RLIMIT_AS, &as);
		as.rlim_cur = (rlim_t)vm_kib * 1024 + 40 * p.region;
		if (setrlimit(RLIMIT_AS, &as) != 0)
			_exit(4);
		int got = 0;
		while (got < 10000 && cbcmn__stack_get(&p, &c))
			got++;
		/* Before: 16, then every slab failed; now they halve into
		 * what is left. */
		_exit(got >= 32 && got < 10000 ? 0 : 10 + (got > 200 ? 200 : got));
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) != 0)
		fail_msg("child exit %d (>= 10: 10 + stacks it got)", WEXITSTATUS(st));
}

/* ---- canaries and the spill path ------------------------------------------ */

static void test_canary(void **state)
{
	(void)state;
	struct cbcmn__stack_pool pu, pg_;
	struct cbcmn__stack_cache cu = {0}, cg = {0};
	assert_int_equal(cbcmn__stack_pool_init(&pu, STACK_BYTES, UINT32_MAX), 0);
	assert_int_equal(cbcmn__stack_pool_init(&pg_, STACK_BYTES, 0), 0);
	struct cbcmn__stack *g = cbcmn__stack_get(&pg_, &cg), *s = cbcmn__stack_get(&pu, &cu);
	assert_non_null(g);
	assert_non_null(s);
	assert_true(g->guarded);
	assert_false(s->guarded);
	assert_true(cbcmn__stack_canary_ok(s));

	/* Any byte of the canary counts; the byte above it does not. */
	s->lo[CBCMN__CANARY_BYTES - 1] = 1;
	assert_false(cbcmn__stack_canary_ok(s));
	s->lo[CBCMN__CANARY_BYTES - 1] = 0;
	assert_true(cbcmn__stack_canary_ok(s));
	s->lo[0] = (char)0x80;
	assert_false(cbcmn__stack_canary_ok(s));
	s->lo[0] = 0;
	s->lo[CBCMN__CANARY_BYTES] = 1;
	assert_true(cbcmn__stack_canary_ok(s));

	/* A guarded stack has its guard region instead. */
	g->lo[0] = 1;
	assert_true(cbcmn__stack_canary_ok(g));

	/* Spill with no cache: the memory goes back, which re-zeroes the
	 * canary, but the descriptor's page stays. */
	memset(s->lo, 0x77, s->size);
	assert_false(cbcmn__stack_canary_ok(s));
	size_t all = resident_pages(s->lo, cbcmn__stack_top(s));
	assert_true(all >= STACK_BYTES / pg() - 1);
	cbcmn__stack_put(&pu, NULL, s);
	/* Count before the canary read below maps the zero page back in. */
	assert_int_equal(resident_pages(s->lo, cbcmn__stack_top(s)), 1);
	assert_true(cbcmn__stack_canary_ok(s));
	assert_ptr_equal(s->lo + s->size, (char *)cbcmn__stack_top(s));

	cbcmn__stack_put(&pg_, &cg, g);
	drain_fini(&pu, &cu);
	drain_fini(&pg_, &cg);
}

/* The usual way into the spill: a put that finds the cache full. */
static void test_spill_from_full_cache(void **state)
{
	(void)state;
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0}, other = {0};
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, UINT32_MAX), 0);
	struct cbcmn__stack *x = cbcmn__stack_get(&p, &other);
	memset(x->lo, 0x33, x->size);
	assert_false(cbcmn__stack_canary_ok(x));

	/* A stack that goes into a cache with room keeps its memory: the
	 * next fiber on this executor finds it warm. */
	struct cbcmn__stack *warm = cbcmn__stack_get(&p, &other);
	memset(warm->lo, 0x44, warm->size);
	cbcmn__stack_put(&p, &c, warm);
	assert_int_equal(c.n, 1);
	assert_true(resident_pages(warm->lo, cbcmn__stack_top(warm)) >= STACK_BYTES / pg() - 1);

	while (c.n < CBCMN__STACK_CACHE_MAX)
		cbcmn__stack_put(&p, &c, cbcmn__stack_get(&p, &other));
	uint32_t nfree = p.nfree;
	cbcmn__stack_put(&p, &c, x);
	/* x and half the cache went to the pool. */
	assert_int_equal(c.n, CBCMN__STACK_CACHE_MAX / 2);
	assert_int_equal(p.nfree, nfree + 1 + CBCMN__STACK_CACHE_MAX / 2);
	assert_int_equal(resident_pages(x->lo, cbcmn__stack_top(x)), 1);
	assert_true(cbcmn__stack_canary_ok(x));
	assert_true(cbcmn__stack_pool_holds(&p, x));
	assert_false(cbcmn__stack_pool_holds(&p, c.free));

	cbcmn__stack_cache_drain(&p, &c);
	cbcmn__stack_cache_drain(&p, &other);
	assert_int_equal(p.nfree, p.stacks_total);
	cbcmn__stack_pool_fini(&p);
}

/* ---- recycling ------------------------------------------------------------ */

static void test_recycle_without_new_slabs(void **state)
{
	(void)state;
	enum { BURST = 300 };
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0}, c2 = {0};
	struct cbcmn__stack *s[BURST];
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, 0), 0);

	struct cbcmn__stack *a = cbcmn__stack_get(&p, &c);
	uint64_t total = p.stacks_total;
	uint32_t slabs = count_slabs(&p);
	cbcmn__stack_put(&p, &c, a);
	/* The cache is LIFO: the stack just freed is the warmest. */
	assert_ptr_equal(cbcmn__stack_get(&p, &c), a);
	cbcmn__stack_put(&p, &c, a);
	for (int i = 0; i < 100000; i++) {
		struct cbcmn__stack *x = cbcmn__stack_get(&p, &c);
		assert_non_null(x);
		((volatile char *)cbcmn__stack_top(x))[-1] = 1;
		cbcmn__stack_put(&p, &c, x);
	}
	assert_int_equal(p.stacks_total, total);

	/* Bursts bigger than a cache go through spill and refill. */
	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < BURST; i++)
			assert_non_null(s[i] = cbcmn__stack_get(&p, &c));
		if (round == 0) {
			total = p.stacks_total;
			slabs = count_slabs(&p);
		}
		/* Freed on another executor: stacks migrate between caches. */
		for (int i = 0; i < BURST; i++)
			cbcmn__stack_put(&p, round & 1 ? &c2 : &c, s[i]);
		assert_true(c.n <= CBCMN__STACK_CACHE_MAX);
		assert_true(c2.n <= CBCMN__STACK_CACHE_MAX);
	}
	assert_int_equal(p.stacks_total, total);
	assert_int_equal(count_slabs(&p), slabs);
	assert_true(total < 2 * BURST);

	/* Every stack is somewhere, once. */
	cbcmn__stack_cache_drain(&p, &c);
	cbcmn__stack_cache_drain(&p, &c2);
	assert_int_equal(c.n, 0);
	assert_null(c.free);
	assert_int_equal(p.nfree, p.stacks_total);
	/* Handed out once each, every one of them. */
	struct cbcmn__stack **all = calloc(p.stacks_total, sizeof(*all));
	assert_non_null(all);
	for (uint64_t i = 0; i < total; i++) {
		assert_non_null(all[i] = cbcmn__stack_get(&p, &c));
		cbcmn__stack_cache_drain(&p, &c); /* the batch's rest */
		assert_false(cbcmn__stack_pool_holds(&p, all[i]));
		for (uint64_t j = 0; j < i; j++)
			assert_ptr_not_equal(all[j], all[i]);
	}
	assert_int_equal(p.nfree, 0);
	assert_int_equal(p.stacks_total, total);
	for (uint64_t i = 0; i < total; i++)
		cbcmn__stack_put(&p, NULL, all[i]);
	free(all);
	assert_int_equal(p.nfree, p.stacks_total);
	cbcmn__stack_pool_fini(&p);
}

static void test_init_fini(void **state)
{
	(void)state;
	long maps0 = maps_lines();
	for (int round = 0; round < 3; round++) {
		struct cbcmn__stack_pool p;
		struct cbcmn__stack_cache c = {0};
		struct cbcmn__stack *s[100];
		assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, round == 1 ? UINT32_MAX : 0), 0);
		for (int i = 0; i < 100; i++)
			assert_non_null(s[i] = cbcmn__stack_get(&p, &c));
		for (int i = 0; i < 100; i++)
			cbcmn__stack_put(&p, &c, s[i]);
		cbcmn__stack_cache_drain(&p, &c);
		cbcmn__stack_pool_fini(&p);
		assert_null(p.by_addr);
		assert_int_equal(p.nslabs, 0);
	}
	/* A pool that never handed out a stack has nothing to unmap. */
	struct cbcmn__stack_pool p;
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, 0), 0);
	cbcmn__stack_pool_fini(&p);
	/* Every slab unmapped (stdio may have mapped a buffer meanwhile). */
	assert_true(maps_lines() <= maps0 + 2);
}

/* ---- 100 000 stacks ------------------------------------------------------- */

static struct cbcmn__stack **get_many(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c)
{
	struct cbcmn__stack **s = malloc(MANY * sizeof(*s));
	assert_non_null(s);
	for (uint32_t i = 0; i < MANY; i++) {
		s[i] = cbcmn__stack_get(p, c);
		if (!s[i])
			fail_msg("stack %u of %u: out of memory or maps", i, MANY);
	}
	return s;
}

static void put_many(struct cbcmn__stack_pool *p, struct cbcmn__stack_cache *c,
		     struct cbcmn__stack **s)
{
	for (uint32_t i = 0; i < MANY; i++)
		cbcmn__stack_put(p, c, s[i]);
	cbcmn__stack_cache_drain(p, c);
	free(s);
}

#ifdef __SANITIZE_ADDRESS__
#define ASAN_SIZE_CLASS_MAPS 24
#else
#define ASAN_SIZE_CLASS_MAPS 0
#endif

/* Map entries one slab's mmap adds.  TSan maps the slab's meta shadow
 * at each mmap, a map entry of its own, and the slab no longer merges
 * with its neighbour: 100 plain mmaps add 205 entries under TSan, 1
 * without (measured on 6.x, gcc 12). */
#define MAPS_PER_SLAB (T_TSAN ? 2 : 1)
/* And TSan keeps both after the munmap (100 plain mmaps and munmaps
 * leave 202 entries). */
#define TSAN_KEPT_MAPS(slabs) (T_TSAN ? 2 * (long)(slabs) : 0)

static void test_100k_stacks_within_map_count(void **state)
{
	(void)state;
	long max = max_map_count();
	long maps0 = maps_lines();
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	if (!pool_init_default(&p, STACK_BYTES, 0)) {
		cbcmn__stack_pool_fini(&p);
		T_SKIP("no MADV_GUARD_INSTALL (Linux 6.13+): test_map_budget_spent_exactly covers it");
		return;
	}
	uint64_t t0 = t_now_ns();
	struct cbcmn__stack **s = get_many(&p, &c);
	uint64_t ns = t_now_ns() - t0;
	long maps1 = maps_lines();
	uint32_t slabs = count_slabs(&p);
	printf("  %u stacks in %.0f ms: %llu guarded, %u slabs, maps %ld -> %ld (max %ld)\n",
	       MANY, ns / 1e6, (unsigned long long)p.stacks_guarded, slabs, maps0, maps1, max);
	/* Every one guarded, at one map entry per slab. */
	assert_int_equal(p.stacks_guarded, p.stacks_total);
	for (uint32_t i = 0; i < MANY; i++)
		assert_true(s[i]->guarded);
	assert_true(maps1 - maps0 <= MAPS_PER_SLAB * (long)slabs + 16);
	put_many(&p, &c, s);
	/* by_addr is the pool's one record of its slabs: fini() unmaps each
	 * (a count of map entries misses one slab of many, with its own
	 * slack and TSan's). */
	struct slab_mirror *was = malloc(slabs * sizeof(*was));
	assert_non_null(was);
	for (uint32_t at = 0; at < slabs; at++)
		was[at] = *(const struct slab_mirror *)(const void *)p.by_addr[at];
	cbcmn__stack_pool_fini(&p);
	for (uint32_t at = 0; at < slabs; at++)
		assert_int_equal(mapped_bytes((uintptr_t)was[at].base,
					      (uintptr_t)was[at].base + was[at].len), 0);
	free(was);
	/* The slabs are gone.  ASan's allocator maps a region for each size
	 * class the first time it is used (the slabs' bitmaps, the sorted
	 * slab array as it grows), and keeps it. */
	assert_true(maps_lines() <= maps0 + 2 + ASAN_SIZE_CLASS_MAPS + TSAN_KEPT_MAPS(slabs));
}

/* With mprotect guards the budget is spent, exactly, and not exceeded;
 * past it stacks are refused, never handed out unguarded. */
static void test_map_budget_spent_exactly(void **state)
{
	(void)state;
	long max = max_map_count();
	long maps0 = maps_lines();
	uint64_t budget = cbcmn__stack_guard_budget();
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	pool_init_prot(&p, STACK_BYTES, 0);
	int saved, fd = t_stderr_capture(&saved);
	struct cbcmn__stack **s = malloc(MANY * sizeof(*s));
	assert_non_null(s);
	uint32_t n = 0;
	while (n < MANY && (s[n] = cbcmn__stack_get(&p, &c)) != NULL)
		n++;
	char msg[1024];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	long maps1 = maps_lines();
	uint32_t slabs = count_slabs(&p);
	printf("  %u stacks before the refusal, budget %llu, maps %ld -> %ld (max %ld)\n", n,
	       (unsigned long long)budget, maps0, maps1, max);
	assert_true(n < MANY);
	assert_non_null(strstr(msg, "vm.max_map_count"));
	assert_int_equal(p.stacks_guarded, n);
	assert_int_equal(p.stacks_total, n);
	assert_true(n <= budget + 16);
	assert_true(n + 64 >= budget);
	assert_int_equal(p.guard_left, 0);
	assert_true(maps1 < max);
	assert_true(maps1 - maps0 <= (long)(2 * n) + MAPS_PER_SLAB * (long)slabs + 16);
	/* Still room for the rest of the process, as the budget promised. */
	assert_true(max - maps1 >= max / 4 - 16 - MAPS_PER_SLAB * (long)slabs);
	for (uint32_t i = 0; i < n; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	free(s);
	drain_fini(&p, &c);
	printf("  maps %ld after the pool's end\n", maps_lines());
	assert_true(maps_lines() <= maps0 + 2 + ASAN_SIZE_CLASS_MAPS + TSAN_KEPT_MAPS(slabs));
}

/* Regression: every pool took the whole guard budget for itself, so two
 * runtimes in one process mapped up to vm.max_map_count between them, after
 * which mmap and pthread_create fail for the whole process. */
static void test_two_pools_share_one_map_budget(void **state)
{
	(void)state;
	long max = max_map_count();
	uint64_t budget = cbcmn__stack_guard_budget();
	/* Enough from each pool to spend a whole budget. */
	uint32_t n = (uint32_t)budget + 1024;
	struct cbcmn__stack_pool a, b;
	struct cbcmn__stack_cache ca = {0}, cb = {0};
	struct cbcmn__stack **sa = malloc(n * sizeof(*sa)), **sb = malloc(n * sizeof(*sb));
	assert_true(sa && sb);
	pool_init_prot(&a, STACK_BYTES, 0);
	pool_init_prot(&b, STACK_BYTES, 0);
	/* No assertion may leave the maps behind: count, clean up, then judge. */
	int saved, fd = t_stderr_capture(&saved);
	uint32_t na = 0, nb = 0;
	while (na < n && (sa[na] = cbcmn__stack_get(&a, &ca)) != NULL)
		na++;
	while (nb < n && (sb[nb] = cbcmn__stack_get(&b, &cb)) != NULL)
		nb++;
	char msg[1024];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	long maps = maps_lines();
	uint32_t slabs = count_slabs(&a) + count_slabs(&b);
	void *probe = mmap(NULL, pg(), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	bool can_map = probe != MAP_FAILED;
	if (can_map)
		munmap(probe, pg());
	uint64_t guarded = a.stacks_guarded + b.stacks_guarded;
	printf("  budget %llu; guarded %llu + %llu; got %u + %u of %u stacks; maps %ld of "
	       "%ld; mmap %s\n",
	       (unsigned long long)budget, (unsigned long long)a.stacks_guarded,
	       (unsigned long long)b.stacks_guarded, na, nb, n, maps, max,
	       can_map ? "works" : "fails");
	for (uint32_t i = 0; i < na; i++)
		cbcmn__stack_put(&a, &ca, sa[i]);
	for (uint32_t i = 0; i < nb; i++)
		cbcmn__stack_put(&b, &cb, sb[i]);
	drain_fini(&a, &ca);
	drain_fini(&b, &cb);
	free(sa);
	free(sb);

	assert_int_equal(na + nb, guarded); /* none unguarded */
	assert_true(na < n && nb < n);      /* both refused in the end */
	assert_true(can_map);
	assert_true(guarded <= budget + 16);
	assert_true(max - maps >= max / 4 - 16 - (long)slabs);
}

/* Regression: the first pool promised itself the whole guard budget at
 * init, so a second one (a second runtime in the process) got no guard
 * at all while the first lived, and every task of it that needed a new
 * stack ended with -ENOMEM: before Linux 6.13 (mprotect guards), i.e. on
 * Debian 12's 6.1 and 6.12 (test_badinput's two-runtime tests there). */
static void test_second_pool_gets_guards_while_the_first_lives(void **state)
{
	(void)state;
	struct cbcmn__stack_pool a, b;
	struct cbcmn__stack_cache ca = {0}, cb = {0};
	pool_init_prot(&a, STACK_BYTES, 0);
	struct cbcmn__stack *sa = cbcmn__stack_get(&a, &ca);
	pool_init_prot(&b, STACK_BYTES, 0);
	int saved, fd = t_stderr_capture(&saved);
	struct cbcmn__stack *sb = cbcmn__stack_get(&b, &cb);
	char msg[1024];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	bool b_guarded = sb && sb->guarded;
	if (sb)
		cbcmn__stack_put(&b, &cb, sb);
	if (sa)
		cbcmn__stack_put(&a, &ca, sa);
	drain_fini(&b, &cb);
	drain_fini(&a, &ca);
	assert_non_null(sa);
	if (!sb)
		fail_msg("the second pool got no stack: %s", msg);
	assert_true(b_guarded);
}

/* guard_max caps a pool's guards when they are taken a slab at a time. */
static void test_guard_max_caps_lazy_promises(void **state)
{
	(void)state;
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	pool_init_prot(&p, STACK_BYTES, 40);
	struct cbcmn__stack *s[64];
	uint32_t n = 0;
	int saved, fd = t_stderr_capture(&saved);
	while (n < 64 && (s[n] = cbcmn__stack_get(&p, &c)) != NULL)
		n++;
	char msg[1024];
	t_stderr_restore(fd, saved, msg, sizeof(msg));
	uint64_t guarded = p.stacks_guarded;
	for (uint32_t i = 0; i < n; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	drain_fini(&p, &c);
	assert_int_equal(n, 40);
	assert_int_equal(guarded, 40);
}

static void test_100k_stacks_rss(void **state)
{
	(void)state;
	if (T_ASAN || T_TSAN) {
		/* TSan: the shadow of each page written counts in VmRSS too
		 * (8265 bytes a stack measured, for its one 4 KiB page). */
		T_SKIP("the sanitizer's shadow (and ASan's quarantine) make VmRSS meaningless");
		return;
	}
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	long rss0 = rss_kib();
	/* 100 000 guarded stacks need lightweight guards: mprotect ones stop
	 * at the map budget (~24 500), which test_map_budget_spent_exactly
	 * covers.  It failed "stack 24560 of 100000" on 6.1 and 6.12. */
	if (!pool_init_default(&p, STACK_BYTES, 0)) {
		cbcmn__stack_pool_fini(&p);
		T_SKIP("no MADV_GUARD_INSTALL (Linux 6.13+): 100 000 guarded stacks exceed the map budget");
	}
	struct cbcmn__stack **s = get_many(&p, &c);
	/* A fiber that barely runs touches only its first frames. */
	for (uint32_t i = 0; i < MANY; i++)
		memset((char *)cbcmn__stack_top(s[i]) - 256, 0xab, 256);
	long rss1 = rss_kib();
	double per = (double)(rss1 - rss0) * 1024.0 / MANY;
	printf("  VmRSS %ld -> %ld KiB: %.0f bytes per stack\n", rss0, rss1, per);
	assert_true(per < 5 * 1024);
	put_many(&p, &c, s);
	cbcmn__stack_pool_fini(&p);
}

/* A slab given back keeps no ASan poison: a fiber's frames left poisoned
 * (a parked task's locals at destroy) used to stay in the shadow after
 * the munmap, and the next mapping there (a ring's SQE array, in
 * test_run's oversubscribed runs) read as a stack buffer underflow. */
static void test_unmapped_stacks_leave_no_asan_poison(void **state)
{
	(void)state;
	if (!T_ASAN)
		T_SKIP("an ASan shadow matter: runs in the ASan build");
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	pool_init_default(&p, STACK_BYTES, UINT32_MAX - 1);
	struct cbcmn__stack *s = cbcmn__stack_get(&p, &c);
	assert_non_null(s);
	char *lo = s->lo;
	size_t size = s->size;
#ifdef __SANITIZE_ADDRESS__
	__asan_poison_memory_region(lo + size / 2, 64); /* a frame left behind */
#endif
	cbcmn__stack_put(&p, &c, s);
	drain_fini(&p, &c);
	char *m = mmap(lo, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (m == MAP_FAILED)
		T_SKIP("the address was taken again before the test could map it");
	assert_ptr_equal(m, lo);
	memset(m, 1, size); /* ASan aborts here if the poison stayed */
	munmap(m, size);
}

/* Stacks freed in any order come back lowest address first: tasks spawned
 * one after another get neighbouring stacks, round after round (issue 16:
 * a LIFO pool scattered a ring's stacks further each round). */
static void lowest_first(bool small_slabs)
{
	enum { N = 300, ROUNDS = 4 };
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0}, c2 = {0};
	struct cbcmn__stack *s[N];
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, 0), 0);
	/* Slabs of two stacks: 150 of them, mapped while others are out. */
	if (small_slabs)
		cbcmn__stack_test_fail_map_over = 2 * p.region;
	for (int i = 0; i < N; i++) {
		assert_non_null(s[i] = cbcmn__stack_get(&p, &c));
		if (i % 7 == 3) /* one back before the next slabs come */
			cbcmn__stack_put(&p, NULL, cbcmn__stack_get(&p, &c2));
	}
	cbcmn__stack_test_fail_map_over = 0;
	assert_true(count_slabs(&p) > 1); /* the order spans slabs */
	uint32_t seed = 12345;
	for (int round = 0; round < ROUNDS; round++) {
		/* Freed scattered, on two executors, through spills. */
		for (int i = N - 1; i > 0; i--) {
			seed = seed * 1103515245u + 12345u;
			int j = (int)((seed >> 8) % (uint32_t)(i + 1));
			struct cbcmn__stack *x = s[i];
			s[i] = s[j];
			s[j] = x;
		}
		for (int i = 0; i < N; i++)
			cbcmn__stack_put(&p, i % 3 ? &c : &c2, s[i]);
		cbcmn__stack_cache_drain(&p, &c);
		cbcmn__stack_cache_drain(&p, &c2);
		assert_int_equal(p.nfree, p.stacks_total);
		for (int i = 0; i < N; i++) {
			assert_non_null(s[i] = cbcmn__stack_get(&p, &c));
			if (i > 0)
				assert_true((char *)s[i] > (char *)s[i - 1]);
		}
		/* Nothing else free lies below the highest handed out (a new
		 * slab may: the kernel picks its address). */
		bool had = p.nfree > 0;
		struct cbcmn__stack *next = cbcmn__stack_get(&p, &c2);
		assert_non_null(next);
		if (had)
			assert_true((char *)next > (char *)s[N - 1]);
		cbcmn__stack_put(&p, &c2, next);
	}
	for (int i = 0; i < N; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	cbcmn__stack_cache_drain(&p, &c2);
	drain_fini(&p, &c);
}

static void test_pool_hands_out_lowest_first(void **state)
{
	(void)state;
	lowest_first(false);
}

/* The same over many small slabs (a mapping of more than two stacks fails),
 * mapped at addresses the kernel picks. */
static void test_lowest_first_over_small_slabs(void **state)
{
	(void)state;
	lowest_first(true);
}

/* The only free stacks are far apart, hundreds of slabs whose stacks are
 * all out between them: a take hands out the lower, then the higher, and
 * nothing else (the take jumps over the slabs in between, several words
 * of has_free, rather than walking them). */
static void test_take_over_slabs_all_out(void **state)
{
	(void)state;
	enum { N = 300 };
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	struct cbcmn__stack *s[N];
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, UINT32_MAX), 0);
	cbcmn__stack_test_fail_map_over = p.region; /* slabs of one stack */
	for (int i = 0; i < N; i++)
		assert_non_null(s[i] = cbcmn__stack_get(&p, &c));
	cbcmn__stack_test_fail_map_over = 0;
	assert_int_equal(count_slabs(&p), N);
	qsort(s, N, sizeof(*s), cmp_stack_lo); /* by address */
	static const int pairs[][2] = {{0, N - 1}, {1, 64}, {63, 64}, {64, 255}, {0, 1},
				       {130, 299}, {5, 200}, {127, 128}};
	for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
		int lo = pairs[k][0], hi = pairs[k][1];
		cbcmn__stack_put(&p, NULL, s[hi]);
		cbcmn__stack_put(&p, NULL, s[lo]);
		assert_int_equal(p.nfree, 2);
		assert_ptr_equal(cbcmn__stack_get(&p, &c), s[lo]);
		assert_int_equal(c.n, 1);
		assert_int_equal(p.nfree, 0);
		assert_ptr_equal(cbcmn__stack_get(&p, &c), s[hi]);
	}
	for (int i = 0; i < N; i++)
		cbcmn__stack_put(&p, NULL, s[i]);
	for (int i = 0; i < N; i++)
		assert_ptr_equal(cbcmn__stack_get(&p, &c), s[i]); /* ascending */
	for (int i = 0; i < N; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	drain_fini(&p, &c);
}

/* In a child: a descriptor no slab holds, on top of pages written (and
 * its lo naming them), put back to the pool, as a cache's spill does;
 * with yellow set, its yellow zone (the page below lo) marked open, as a
 * stack's is after an overflow its landing pad did not close.  Exits 0
 * if the pages kept their bytes and access and the pool did not count
 * it. */
static void foreign_put_child(int yellow)
{
	size_t len = 4 * pg();
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		_exit(10);
	memset(m, 0xab, len);
	struct cbcmn__stack *fake = (struct cbcmn__stack *)(m + len - sizeof(*fake));
	memset(fake, 0, sizeof(*fake));
	fake->lo = m;
	fake->size = (size_t)((char *)fake - m);
	if (yellow) {
		fake->guard_lo = m;
		fake->lo = m + CBCMN__RED_BYTES + pg();
		fake->size = (size_t)((char *)fake - fake->lo);
		fake->guarded = true;
		fake->guard_kind = CBCMN__GUARD_PROT;
		fake->yellow_open = 1;
	}
	int pipefd[2];
	if (pipe(pipefd) != 0)
		_exit(10);
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	if (cbcmn__stack_pool_init(&p, STACK_BYTES, UINT32_MAX) != 0)
		_exit(10);
	struct cbcmn__stack *s = cbcmn__stack_get(&p, &c);
	uint32_t total = (uint32_t)p.stacks_total;
	cbcmn__stack_put(&p, NULL, s);
	cbcmn__stack_cache_drain(&p, &c);
	cbcmn__stack_put(&p, NULL, fake);
	if (p.nfree != total)
		_exit(11);
	for (size_t i = 0; i < 3 * pg(); i += pg())
		if (write(pipefd[1], m + i, 1) != 1)
			_exit(15); /* guarded before it was checked */
	for (size_t i = 0; i < 3 * pg(); i++)
		if ((unsigned char)m[i] != 0xab)
			_exit(14); /* given back before it was checked */
	_exit(0);
}

/* In a child: a stack put back twice through a cache, before any get
 * (how 0); or put back while another cache holds it, got from the pool
 * and not handed out (how 1).  Exits 0 if the second put was refused and
 * the stack comes out once. */
static void cache_double_put_child(int how)
{
	enum { N = 16 };
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0}, c2 = {0};
	struct cbcmn__stack *s[N];
	if (cbcmn__stack_pool_init(&p, STACK_BYTES, UINT32_MAX) != 0)
		_exit(10);
	for (int i = 0; i < N; i++)
		if (!(s[i] = cbcmn__stack_get(&p, &c)))
			_exit(10);
	if (how == 0) {
		cbcmn__stack_put(&p, &c, s[N - 1]);
		cbcmn__stack_put(&p, &c, s[N - 1]);
		if (c.n != 1)
			_exit(11);
		if (cbcmn__stack_get(&p, &c) != s[N - 1] || cbcmn__stack_get(&p, &c) == s[N - 1])
			_exit(13);
		_exit(0);
	}
	for (int i = 0; i < N; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	cbcmn__stack_cache_drain(&p, &c);
	/* The lowest handed out, the other N - 1 (s[N - 1] too) in c2. */
	if (cbcmn__stack_get(&p, &c2) != s[0] || p.nfree != 0 || c2.n != N - 1)
		_exit(12);
	cbcmn__stack_put(&p, NULL, s[N - 1]);
	_exit(p.nfree == 0 ? 0 : 11);
}

static void expect_refused(void (*child)(int), int arg)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		child(arg);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
#ifdef CBCMN_DEBUG
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGABRT);
#else
	if (WIFEXITED(st) && WEXITSTATUS(st))
		fail_msg("child %d: exit %d", arg, WEXITSTATUS(st));
	assert_true(WIFEXITED(st));
#endif
}

/* A foreign descriptor's pages were released (madvise), or its yellow
 * zone guarded again, before the pool found it was not its own; and a
 * cache took a stack put back twice, or one still held by another cache,
 * and handed it out twice. */
static void test_bad_put_through_a_cache_is_refused(void **state)
{
	(void)state;
	expect_refused(foreign_put_child, 0);
	expect_refused(foreign_put_child, 1);
	expect_refused(cache_double_put_child, 0);
	expect_refused(cache_double_put_child, 1);
}

/* In a child: put back a stack twice (bad 0) or a descriptor no slab holds
 * (bad 1), then take every stack.  Exits 0 if the pool's count stayed
 * true and each stack came out once. */
static void bad_put_child(int bad)
{
	static struct cbcmn__stack fake;
	fake.lo = (char *)&fake; /* nothing below it to release */
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	if (cbcmn__stack_pool_init(&p, STACK_BYTES, UINT32_MAX) != 0)
		_exit(10);
	struct cbcmn__stack *s = cbcmn__stack_get(&p, &c);
	cbcmn__stack_cache_drain(&p, &c);
	uint32_t total = (uint32_t)p.stacks_total, seen = 0;
	cbcmn__stack_put(&p, NULL, s);
	cbcmn__stack_put(&p, NULL, bad ? &fake : s);
	if (p.nfree != total)
		_exit(11);
	for (uint32_t i = 0; i < total; i++) {
		struct cbcmn__stack *x = cbcmn__stack_get(&p, &c);
		if (!x || x == &fake)
			_exit(12);
		seen += x == s;
	}
	_exit(seen == 1 ? 0 : 13);
}

/* In a child: a kept stack put back twice, then a foreign one.  Exits 0
 * if the refused puts left the guard quota where the first put had it. */
static void kept_double_put_child(int unused)
{
	(void)unused;
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	if (cbcmn__stack_pool_init(&p, STACK_BYTES, 1000) != 0)
		_exit(10);
	struct cbcmn__stack *s = cbcmn__stack_get_kept(&p, &c);
	if (!s)
		_exit(10);
	cbcmn__stack_put_kept(&p, &c, s);
	uint64_t quota = p.guard_quota;
	cbcmn__stack_put_kept(&p, &c, s);
	if (p.guard_quota != quota)
		_exit(11);
	static struct cbcmn__stack fake; /* not the pool's: refused at its spill */
	fake.lo = (char *)&fake;
	cbcmn__stack_put_kept(&p, NULL, &fake);
	_exit(p.guard_quota == quota ? 0 : 12);
}

/* A refused put of a kept stack gave back a guard it never took: the
 * quota fell one below the program's guard_max at each (review of
 * session 19). */
static void test_regression_refused_kept_put_keeps_the_quota(void **state)
{
	(void)state;
	expect_refused(kept_double_put_child, 0);
}

/* A bad put used to count a stack the pool did not have (the get that
 * trusted the count crashed), or to index past the slab array.  Now debug
 * builds stop at the put, and the others drop it. */
static void test_bad_put_is_refused(void **state)
{
	(void)state;
	for (int bad = 0; bad < 2; bad++)
		expect_refused(bad_put_child, bad);
}

/* The sorted slab array cannot grow (out of memory): the get fails, the
 * slab it would have added is not kept, no stack is lost or handed out
 * twice, and the next get grows it.  Slabs of one stack: the array's
 * first 16 places fill after 16 stacks. */
static void test_slab_array_growth_fails(void **state)
{
	(void)state;
	enum { N = 16 };
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	struct cbcmn__stack *s[N + 1];
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, UINT32_MAX), 0);
	cbcmn__stack_test_fail_map_over = p.region;
	for (int i = 0; i < N; i++)
		assert_non_null(s[i] = cbcmn__stack_get(&p, &c));
	assert_int_equal(count_slabs(&p), N);
	/* The slab's record is the first allocation, the arrays the next
	 * ones (by address, then which slabs have free stacks). */
	for (uint64_t nth = 2; nth <= 3; nth++) {
		struct cbcmn__fault_plan plan = {.nth = nth, .err = -ENOMEM};
		if (!cbcmn__fault_arm(CBCMN__F_MALLOC, &plan)) {
			cbcmn__stack_test_fail_map_over = 0;
			for (int i = 0; i < N; i++)
				cbcmn__stack_put(&p, &c, s[i]);
			drain_fini(&p, &c);
			skip(); /* fault injection is built into the sanitizer builds */
		}
		assert_null(cbcmn__stack_get(&p, &c));
		assert_int_equal(cbcmn__fault_fails(CBCMN__F_MALLOC), 1);
		cbcmn__fault_disarm_all();
		assert_int_equal(count_slabs(&p), N);
		assert_int_equal(p.stacks_total, N);
		assert_int_equal(p.nfree, 0);
		assert_int_equal(c.n, 0);
	}
	assert_non_null(s[N] = cbcmn__stack_get(&p, &c));
	cbcmn__stack_test_fail_map_over = 0;
	assert_int_equal(count_slabs(&p), N + 1);
	for (int i = 0; i < N; i++)
		assert_ptr_not_equal(s[i], s[N]);
	for (int i = 0; i <= N; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	drain_fini(&p, &c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unmapped_stacks_leave_no_asan_poison),
		cmocka_unit_test(test_guard_budget),
		cmocka_unit_test(test_guard_max_clamped_to_budget),
		cmocka_unit_test(test_second_pool_gets_guards_while_the_first_lives),
		cmocka_unit_test(test_guard_max_caps_lazy_promises),
		cmocka_unit_test(test_guard_region_faults),
		cmocka_unit_test(test_yellow_zone_opens_and_closes),
		cmocka_unit_test(test_beyond_map_budget_a_stack_is_refused),
		cmocka_unit_test(test_no_guards),
		cmocka_unit_test(test_slab_halves_after_a_failed_mapping),
		cmocka_unit_test(test_slab_halves_under_rlimit_as),
		cmocka_unit_test(test_canary),
		cmocka_unit_test(test_spill_from_full_cache),
		cmocka_unit_test(test_recycle_without_new_slabs),
		cmocka_unit_test(test_pool_hands_out_lowest_first),
		cmocka_unit_test(test_lowest_first_over_small_slabs),
		cmocka_unit_test(test_take_over_slabs_all_out),
		cmocka_unit_test(test_slab_array_growth_fails),
		cmocka_unit_test(test_bad_put_is_refused),
		cmocka_unit_test(test_bad_put_through_a_cache_is_refused),
		cmocka_unit_test(test_regression_refused_kept_put_keeps_the_quota),
		cmocka_unit_test(test_init_fini),
		cmocka_unit_test(test_100k_stacks_within_map_count),
		cmocka_unit_test(test_map_budget_spent_exactly),
		cmocka_unit_test(test_two_pools_share_one_map_budget),
		cmocka_unit_test(test_100k_stacks_rss),
	};
	return cmocka_run_group_tests_name("stack", tests, NULL, NULL);
}
