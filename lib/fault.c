/* fault.c: fault injection for tests (fault.h, docs/FAULTS.md). */
#include <stdatomic.h>
#include <string.h>

#include "fault.h"
#include "rng.h"

static const char *const names[CBCMN__F_NSITES] = {
	[CBCMN__F_MALLOC] = "malloc",   [CBCMN__F_MMAP] = "mmap",
	[CBCMN__F_MPROTECT] = "mprotect", [CBCMN__F_RING] = "ring",
	[CBCMN__F_IO] = "io",           [CBCMN__F_IO_SHORT] = "io_short",
	[CBCMN__F_SUBMIT] = "submit",   [CBCMN__F_MSG_RING] = "msg_ring",
	[CBCMN__F_CQE_DROP] = "cqe_drop", [CBCMN__F_FIXED] = "fixed",
	[CBCMN__F_DUP] = "dup",         [CBCMN__F_PBUF_INC] = "pbuf_inc",
};

const char *cbcmn__fault_name(enum cbcmn__fault_site site)
{
	return (unsigned)site < CBCMN__F_NSITES ? names[site] : "?";
}

#ifdef CBCMN_FAULTS

/* A plan is written while its site is disarmed and published by the
 * release store of `armed`; hits read it after an acquire load of `armed`.
 * Re-arming a site that tasks are hitting is the test's business: it
 * disarms first, and a hit that raced the change sees either plan. */
static struct site {
	_Atomic bool armed;
	struct cbcmn__fault_plan plan;
	_Atomic uint64_t hits, fails;
} sites[CBCMN__F_NSITES];

int cbcmn__fault_hit(enum cbcmn__fault_site site)
{
	struct site *s = &sites[site];
	/* acquire: pairs with the release in cbcmn__fault_arm(), so the plan
	 * read below is the one armed. */
	if (!atomic_load_explicit(&s->armed, memory_order_acquire))
		return 0;
	uint64_t h = atomic_fetch_add_explicit(&s->hits, 1, memory_order_relaxed) + 1;
	const struct cbcmn__fault_plan *p = &s->plan;
	bool fail = false;
	if (p->nth && h >= p->nth)
		fail = h == p->nth || (p->every && (h - p->nth) % p->every == 0);
	if (!fail && p->permille) {
		/* A draw per hit index, not per thread: the same seed fails the
		 * same hits whichever thread makes them. */
		uint64_t x = p->seed ^ (h * 0x9e3779b97f4a7c15ull);
		fail = cbcmn__splitmix64(&x) % 1000 < p->permille;
	}
	if (!fail)
		return 0;
	atomic_fetch_add_explicit(&s->fails, 1, memory_order_relaxed);
	return p->err ? p->err : -EIO;
}

bool cbcmn__fault_arm(enum cbcmn__fault_site site, const struct cbcmn__fault_plan *plan)
{
	if ((unsigned)site >= CBCMN__F_NSITES)
		return false;
	struct site *s = &sites[site];
	atomic_store_explicit(&s->armed, false, memory_order_relaxed);
	s->plan = *plan;
	atomic_store_explicit(&s->hits, 0, memory_order_relaxed);
	atomic_store_explicit(&s->fails, 0, memory_order_relaxed);
	/* release: pairs with the acquire in cbcmn__fault_hit(). */
	atomic_store_explicit(&s->armed, true, memory_order_release);
	return true;
}

void cbcmn__fault_disarm_all(void)
{
	for (unsigned i = 0; i < CBCMN__F_NSITES; i++)
		atomic_store_explicit(&sites[i].armed, false, memory_order_relaxed);
}

uint64_t cbcmn__fault_hits(enum cbcmn__fault_site site)
{
	return atomic_load_explicit(&sites[site].hits, memory_order_relaxed);
}

uint64_t cbcmn__fault_fails(enum cbcmn__fault_site site)
{
	return atomic_load_explicit(&sites[site].fails, memory_order_relaxed);
}

/* acquire/release: the hook's own state, set up before it is installed,
 * is seen by the threads that call it. */
static _Atomic(cbcmn__pause_fn) pause_fn;

void cbcmn__pause_hit(enum cbcmn__pause_point p, void *exec)
{
	cbcmn__pause_fn fn = atomic_load_explicit(&pause_fn, memory_order_acquire);
	if (fn)
		fn(p, exec);
}

bool cbcmn__pause_set(cbcmn__pause_fn fn)
{
	atomic_store_explicit(&pause_fn, fn, memory_order_release);
	return true;
}

#else /* !CBCMN_FAULTS */

bool cbcmn__pause_set(cbcmn__pause_fn fn)
{
	(void)fn;
	return false;
}

bool cbcmn__fault_arm(enum cbcmn__fault_site site, const struct cbcmn__fault_plan *plan)
{
	(void)site;
	(void)plan;
	return false;
}

void cbcmn__fault_disarm_all(void) {}
uint64_t cbcmn__fault_hits(enum cbcmn__fault_site site) { (void)site; return 0; }
uint64_t cbcmn__fault_fails(enum cbcmn__fault_site site) { (void)site; return 0; }

#endif
