/* test_stack: the fiber stack pool: guard pages, canaries, recycling, cost. */
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

/* The permissions ("rw-p", "---p") of the mapping holding addr. */
static bool maps_perms(const void *addr, char perms[5])
{
	FILE *f = fopen("/proc/self/maps", "r");
	assert_non_null(f);
	char line[512];
	bool found = false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char p[5];
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, p) != 3)
			continue;
		if ((uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
			memcpy(perms, p, 5);
			found = true;
			break;
		}
	}
	fclose(f);
	return found;
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

/* stack.c keeps its slab list private.  This mirrors it, and the count is
 * only trusted once the slabs' lengths add up to the stacks the pool says it
 * made: a changed layout fails here, loudly.  (Not exactly: a slab whose
 * mprotect failed keeps guard-sized regions for its unguarded stacks.) */
struct slab_mirror {
	void *base;
	size_t len;
	struct slab_mirror *next;
};

static uint32_t count_slabs(const struct cbcmn__stack_pool *p)
{
	uint32_t n = 0;
	size_t bytes = 0;
	for (const struct slab_mirror *sl = (const void *)p->slabs; sl; sl = sl->next) {
		assert_int_equal((uintptr_t)sl->base % pg(), 0);
		bytes += sl->len;
		n++;
	}
	assert_true(bytes >= p->stacks_total * p->region + p->stacks_guarded * pg());
	assert_true(bytes <= p->stacks_total * (p->region + pg()));
	return n;
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
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, UINT32_MAX - 1), 0);
	uint64_t granted = p.guard_left;
	cbcmn__stack_pool_fini(&p);
	assert_true(granted > 0);
	assert_true(granted <= budget + 16);

	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, UINT32_MAX), 0);
	assert_int_equal(p.guard_left, 0);
	cbcmn__stack_pool_fini(&p);

	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES + 1, 0), -EINVAL);
}

/* ---- layout and guard pages ----------------------------------------------- */

static void test_guard_page_is_prot_none(void **state)
{
	(void)state;
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, 4), 0);
	struct cbcmn__stack *s = cbcmn__stack_get(&p, &c);
	assert_non_null(s);
	assert_true(s->guarded);

	char *lo = s->lo, *top = cbcmn__stack_top(s);
	assert_int_equal((uintptr_t)lo % pg(), 0);
	assert_int_equal(s->size, STACK_BYTES - sizeof(struct cbcmn__stack));
	assert_ptr_equal(top, lo + s->size);
	assert_int_equal((uintptr_t)top % 16, 0);

	char perms[5];
	assert_true(maps_perms(lo - 1, perms));
	assert_string_equal(perms, "---p");
	assert_true(maps_perms(lo - pg(), perms));
	assert_string_equal(perms, "---p");
	assert_true(maps_perms(lo, perms));
	assert_string_equal(perms, "rw-p");
	assert_true(maps_perms(top - 1, perms));
	assert_string_equal(perms, "rw-p");
	assert_false(kernel_readable(lo - 1));
	assert_false(kernel_readable(lo - pg()));

	assert_true(cbcmn__stack_in_guard(s, lo - 1, pg()));
	assert_true(cbcmn__stack_in_guard(s, lo - pg(), pg()));
	assert_false(cbcmn__stack_in_guard(s, lo, pg()));
	assert_false(cbcmn__stack_in_guard(s, lo - pg() - 1, pg()));

	/* The whole usable range is ours, and the descriptor right above it
	 * survives a fiber that fills it. */
	memset(lo, 0x5a, s->size);
	assert_ptr_equal(s->lo, lo);
	assert_int_equal(s->size, STACK_BYTES - sizeof(struct cbcmn__stack));
	assert_true(s->guarded);

	/* The real thing: an overflow by one byte kills with SIGSEGV. */
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit no_core = {0, 0};
		setrlimit(RLIMIT_CORE, &no_core);
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
	cbcmn__stack_cache_drain(&p, &c);
	cbcmn__stack_pool_fini(&p);
}

static int cmp_stack_lo(const void *a, const void *b)
{
	const struct cbcmn__stack *x = *(struct cbcmn__stack *const *)a;
	const struct cbcmn__stack *y = *(struct cbcmn__stack *const *)b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void test_guard_max_4(void **state)
{
	(void)state;
	enum { N = 200 };
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	struct cbcmn__stack *s[N];
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, 4), 0);
	long maps0 = maps_lines();
	for (int i = 0; i < N; i++) {
		s[i] = cbcmn__stack_get(&p, &c);
		assert_non_null(s[i]);
		if (s[i]->guarded != (i < 4))
			fail_msg("stack %d: guarded %d, want %d", i, s[i]->guarded, i < 4);
	}
	assert_int_equal(p.stacks_guarded, 4);
	assert_int_equal(p.guard_left, 0);
	/* Four guard pages split their slab into 8 entries; the unguarded
	 * slabs add one each at most. */
	assert_true(maps_lines() - maps0 <= 8 + (long)count_slabs(&p) + 4);

	char perms[5];
	for (int i = 0; i < N; i++) {
		if (s[i]->guarded) {
			assert_true(maps_perms(s[i]->lo - 1, perms));
			assert_string_equal(perms, "---p");
		} else {
			assert_false(cbcmn__stack_in_guard(s[i], s[i]->lo - 1, pg()));
		}
		assert_true(maps_perms(s[i]->lo, perms));
		assert_string_equal(perms, "rw-p");
	}

	/* No two stacks share a byte, guard pages and descriptors included. */
	qsort(s, N, sizeof(s[0]), cmp_stack_lo);
	for (int i = 1; i < N; i++) {
		char *prev_end = (char *)cbcmn__stack_top(s[i - 1]) + sizeof(struct cbcmn__stack);
		char *start = s[i]->lo - (s[i]->guarded ? pg() : 0);
		assert_true(prev_end <= start);
	}

	for (int i = 0; i < N; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	cbcmn__stack_cache_drain(&p, &c);
	assert_int_equal(p.nfree, p.stacks_total);
	cbcmn__stack_pool_fini(&p);
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
		assert_true(cbcmn__stack_canary_ok(s[i]));
	}
	assert_int_equal(p.stacks_guarded, 0);
	for (int i = 0; i < 100; i++)
		cbcmn__stack_put(&p, &c, s[i]);
	cbcmn__stack_cache_drain(&p, &c);
	cbcmn__stack_pool_fini(&p);
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
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, 0), 0);
	/* Nothing over three stacks maps: slabs of 2 after 16, 8, 4 fail. */
	cbcmn__stack_test_fail_map_over = 3 * (p.region + pg());
	for (int i = 0; i < 200; i++) {
		s[i] = cbcmn__stack_get(&p, &c);
		if (!s[i]) {
			cbcmn__stack_test_fail_map_over = 0;
			fail_msg("stack %d: NULL although slabs of 2 still map", i);
		}
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
		as.rlim_cur = (rlim_t)vm_kib * 1024 + 40 * (p.region + 4096);
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
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	struct cbcmn__stack *k[5];
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, 4), 0);
	/* Four guarded, then unguarded (test_guard_max_4). */
	for (int i = 0; i < 5; i++)
		assert_non_null(k[i] = cbcmn__stack_get(&p, &c));
	struct cbcmn__stack *g = k[0], *s = k[4];
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

	/* A guarded stack has its guard page instead. */
	g->lo[0] = 1;
	assert_true(cbcmn__stack_canary_ok(g));

	/* Spill with no cache: the memory goes back, which re-zeroes the
	 * canary, but the descriptor's page stays. */
	memset(s->lo, 0x77, s->size);
	assert_false(cbcmn__stack_canary_ok(s));
	size_t all = resident_pages(s->lo, cbcmn__stack_top(s));
	assert_true(all >= STACK_BYTES / pg() - 1);
	cbcmn__stack_put(&p, NULL, s);
	/* Count before the canary read below maps the zero page back in. */
	assert_int_equal(resident_pages(s->lo, cbcmn__stack_top(s)), 1);
	assert_true(cbcmn__stack_canary_ok(s));
	assert_ptr_equal(s->lo + s->size, (char *)cbcmn__stack_top(s));

	for (int i = 0; i < 4; i++)
		cbcmn__stack_put(&p, &c, k[i]);
	cbcmn__stack_cache_drain(&p, &c);
	assert_int_equal(p.nfree, p.stacks_total);
	cbcmn__stack_pool_fini(&p);
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
	bool x_in_pool = false;
	for (struct cbcmn__stack *f = p.free; f; f = f->next)
		x_in_pool |= f == x;
	assert_true(x_in_pool);

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
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, 4), 0);

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
	uint64_t n = 0;
	for (struct cbcmn__stack *f = p.free; f; f = f->next)
		n++;
	assert_int_equal(n, p.stacks_total);
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
		assert_null(p.slabs);
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

static void test_100k_stacks_within_map_count(void **state)
{
	(void)state;
	long max = max_map_count();
	long maps0 = maps_lines();
	uint64_t budget = cbcmn__stack_guard_budget();
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, 0), 0);
	uint64_t t0 = t_now_ns();
	struct cbcmn__stack **s = get_many(&p, &c);
	uint64_t ns = t_now_ns() - t0;
	long maps1 = maps_lines();
	uint32_t slabs = count_slabs(&p);
	uint64_t guarded = p.stacks_guarded, seen_guarded = 0;
	for (uint32_t i = 0; i < MANY; i++)
		seen_guarded += s[i]->guarded;
	printf("  %u stacks in %.0f ms: %llu guarded, %u slabs, maps %ld -> %ld (max %ld)\n",
	       MANY, ns / 1e6, (unsigned long long)guarded, slabs, maps0, maps1, max);

	/* The budget is spent, exactly, and not exceeded. */
	assert_true(guarded > 0);
	assert_true(guarded < MANY);
	assert_true(guarded <= budget + 16);
	assert_int_equal(p.guard_left, 0);
	assert_int_equal(seen_guarded, guarded);
	assert_true(maps1 < max);
	assert_true(maps1 - maps0 <= (long)(2 * guarded) + (long)slabs + 16);
	/* Still room for the rest of the process, as the budget promised. */
	assert_true(max - maps1 >= max / 4 - 16 - (long)slabs);

	put_many(&p, &c, s);
	cbcmn__stack_pool_fini(&p);
	assert_true(maps_lines() <= maps0 + 2);
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
	assert_int_equal(cbcmn__stack_pool_init(&a, STACK_BYTES, 0), 0);
	assert_int_equal(cbcmn__stack_pool_init(&b, STACK_BYTES, 0), 0);
	/* No assertion may leave the maps behind: count, clean up, then judge. */
	uint32_t na = 0, nb = 0;
	while (na < n && (sa[na] = cbcmn__stack_get(&a, &ca)) != NULL)
		na++;
	while (nb < n && (sb[nb] = cbcmn__stack_get(&b, &cb)) != NULL)
		nb++;
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
	cbcmn__stack_cache_drain(&a, &ca);
	cbcmn__stack_cache_drain(&b, &cb);
	cbcmn__stack_pool_fini(&a);
	cbcmn__stack_pool_fini(&b);
	free(sa);
	free(sb);

	assert_int_equal(na, n);
	assert_int_equal(nb, n);
	assert_true(can_map);
	assert_true(guarded <= budget + 16);
	assert_true(max - maps >= max / 4 - 16 - (long)slabs);
}

static void test_100k_stacks_rss(void **state)
{
	(void)state;
	if (T_ASAN) {
		T_SKIP("ASan's shadow and quarantine make VmRSS meaningless");
		return;
	}
	struct cbcmn__stack_pool p;
	struct cbcmn__stack_cache c = {0};
	long rss0 = rss_kib();
	assert_int_equal(cbcmn__stack_pool_init(&p, STACK_BYTES, 0), 0);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_guard_budget),
		cmocka_unit_test(test_guard_max_clamped_to_budget),
		cmocka_unit_test(test_guard_page_is_prot_none),
		cmocka_unit_test(test_guard_max_4),
		cmocka_unit_test(test_no_guards),
		cmocka_unit_test(test_slab_halves_after_a_failed_mapping),
		cmocka_unit_test(test_slab_halves_under_rlimit_as),
		cmocka_unit_test(test_canary),
		cmocka_unit_test(test_spill_from_full_cache),
		cmocka_unit_test(test_recycle_without_new_slabs),
		cmocka_unit_test(test_init_fini),
		cmocka_unit_test(test_100k_stacks_within_map_count),
		cmocka_unit_test(test_two_pools_share_one_map_budget),
		cmocka_unit_test(test_100k_stacks_rss),
	};
	return cmocka_run_group_tests_name("stack", tests, NULL, NULL);
}
