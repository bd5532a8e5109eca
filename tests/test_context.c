/* test_context: the x86_64 context switch (cbcmn__ctx_jump / _make).
 *
 * The switch tests run three times: with cbcmn__ctx_jump, with
 * cbcmn__ctx_jump_ret (the same switch ending in a RET, sched.c's
 * switch_direct()), and with the two alternating, so that a context saved
 * by one is resumed by the other (a task that blocked through the loop,
 * resumed by a direct switch, and the other way round). */
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xmmintrin.h>

#include "helpers.h"
#include "unwind_test.h"

#include "arch.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#define STACK_BYTES (64u * 1024)
#define NREGS 6 /* rbx, rbp, r12, r13, r14, r15 */

/* ---- assembly helpers ----------------------------------------------------
 *
 * C cannot put chosen values in callee-saved registers across a call, so
 * the register test jumps from assembly:
 *
 *   void *t_jump_regs(void **save_sp, void *to_sp, void *xfer,
 *                     const uint64_t in[6], uint64_t out[6]);
 *
 * loads in[] into rbx, rbp, r12-r15, calls the switch under test (t_jump),
 * and stores what
 * those registers hold when the jump returns into out[].  The caller's own
 * values are pushed first and popped last, so C sees an ordinary call.
 *
 * t_probe_entry is a ctx_make entry that records rsp and rbx, rbp, r12-r15
 * exactly as the switch left them, before any compiled prologue can change
 * them, then tail-jumps to t_probe_c(xfer).
 */
__asm__(
	"	.pushsection .text\n"
	"	.globl	t_jump_regs\n"
	"	.hidden	t_jump_regs\n"
	"	.type	t_jump_regs, @function\n"
	"	.p2align 4\n"
	"t_jump_regs:\n"
	"	.cfi_startproc\n"
	"	pushq	%rbp\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	.cfi_rel_offset rbp, 0\n"
	"	pushq	%rbx\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	.cfi_rel_offset rbx, 0\n"
	"	pushq	%r12\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	.cfi_rel_offset r12, 0\n"
	"	pushq	%r13\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	.cfi_rel_offset r13, 0\n"
	"	pushq	%r14\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	.cfi_rel_offset r14, 0\n"
	"	pushq	%r15\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	.cfi_rel_offset r15, 0\n"
	/* out[] survives the jump on our own stack; 7 pushes realign rsp. */
	"	pushq	%r8\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	movq	0x00(%rcx), %rbx\n"
	"	movq	0x08(%rcx), %rbp\n"
	"	movq	0x10(%rcx), %r12\n"
	"	movq	0x18(%rcx), %r13\n"
	"	movq	0x20(%rcx), %r14\n"
	"	movq	0x28(%rcx), %r15\n"
	"	call	*t_jump(%rip)\n"
	"	popq	%r8\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	movq	%rbx, 0x00(%r8)\n"
	"	movq	%rbp, 0x08(%r8)\n"
	"	movq	%r12, 0x10(%r8)\n"
	"	movq	%r13, 0x18(%r8)\n"
	"	movq	%r14, 0x20(%r8)\n"
	"	movq	%r15, 0x28(%r8)\n"
	"	popq	%r15\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq	%r14\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq	%r13\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq	%r12\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq	%rbx\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq	%rbp\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	ret\n"
	"	.cfi_endproc\n"
	"	.size	t_jump_regs, .-t_jump_regs\n"
	"\n"
	"	.globl	t_probe_entry\n"
	"	.hidden	t_probe_entry\n"
	"	.type	t_probe_entry, @function\n"
	"	.p2align 4\n"
	"t_probe_entry:\n"
	"	.cfi_startproc\n"
	"	movq	%rsp, t_probe+0x00(%rip)\n"
	"	movq	%rbx, t_probe+0x08(%rip)\n"
	"	movq	%rbp, t_probe+0x10(%rip)\n"
	"	movq	%r12, t_probe+0x18(%rip)\n"
	"	movq	%r13, t_probe+0x20(%rip)\n"
	"	movq	%r14, t_probe+0x28(%rip)\n"
	"	movq	%r15, t_probe+0x30(%rip)\n"
	"	jmp	t_probe_c\n"
	"	.cfi_endproc\n"
	"	.size	t_probe_entry, .-t_probe_entry\n"
	"	.popsection\n");

void *t_jump_regs(void **save_sp, void *to_sp, void *xfer, const uint64_t in[NREGS],
		  uint64_t out[NREGS]);
void t_probe_entry(void *xfer);
void t_probe_c(void *xfer);
/* rsp, then rbx, rbp, r12-r15, at the first instruction of a fresh context. */
uint64_t t_probe[1 + NREGS];

/* ---- the switch under test ------------------------------------------------ */

typedef void *jump_fn(void **save_sp, void *to_sp, void *xfer);

/* Called by every switch below (and by t_jump_regs). */
jump_fn *t_jump = cbcmn__ctx_jump;
static unsigned t_mixed_n;

/* Each switch the other way from the one before. */
static void *jump_mixed(void **save_sp, void *to_sp, void *xfer)
{
	jump_fn *f = t_mixed_n++ % 2 ? cbcmn__ctx_jump_ret : cbcmn__ctx_jump;
	return f(save_sp, to_sp, xfer);
}

static int use_jump(void **state)
{
	(void)state;
	t_jump = cbcmn__ctx_jump;
	return 0;
}

static int use_jump_ret(void **state)
{
	(void)state;
	t_jump = cbcmn__ctx_jump_ret;
	return 0;
}

static int use_jump_mixed(void **state)
{
	(void)state;
	t_mixed_n = 0;
	t_jump = jump_mixed;
	return 0;
}

/* ---- contexts with the sanitizer bookkeeping ------------------------------ */

/* One side of a switch: the test's main context or a fiber. */
struct ctx {
	void *sp;              /* saved while switched away */
	char *map;             /* fibers: the mapping, guard page at the bottom */
	size_t map_len;
	char *lo, *top;        /* fibers: usable stack */
	void *asan_fake;       /* ASan: fake stack while switched away */
	const void *asan_lo;   /* ASan: stack bounds for switching to us */
	size_t asan_size;
};

static void fiber_new(struct ctx *f, void (*entry)(void *), size_t top_gap)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	memset(f, 0, sizeof(*f));
	f->map_len = STACK_BYTES + pg;
	f->map = mmap(NULL, f->map_len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	assert_true(f->map != MAP_FAILED);
	/* A runaway fiber faults instead of scribbling over the heap. */
	assert_int_equal(mprotect(f->map, pg, PROT_NONE), 0);
	f->lo = f->map + pg;
	f->top = f->map + f->map_len - top_gap;
	f->asan_lo = f->lo;
	f->asan_size = (size_t)(f->top - f->lo);
	f->sp = cbcmn__ctx_make(f->top, entry);
	assert_non_null(f->sp);
}

static void fiber_free(struct ctx *f)
{
#ifdef __SANITIZE_ADDRESS__
	/* Frames of a fiber that never finished leave poisoned redzones in the
	 * shadow; the next mapping at this address would inherit them. */
	__asan_unpoison_memory_region(f->lo, (size_t)(f->map + f->map_len - f->lo));
#endif
	assert_int_equal(munmap(f->map, f->map_len), 0);
}

static inline void san_start(void **fake, const struct ctx *to)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_start_switch_fiber(fake, to->asan_lo, to->asan_size);
#else
	(void)fake;
	(void)to;
#endif
}

static inline void san_finish(void *fake, const void **from_lo, size_t *from_size)
{
#ifdef __SANITIZE_ADDRESS__
	__sanitizer_finish_switch_fiber(fake, from_lo, from_size);
#else
	(void)fake;
	(void)from_lo;
	(void)from_size;
#endif
}

/* First thing on a fresh fiber: ASan learns it arrived, and tells us the
 * bounds of the stack we came from (the only way to learn main's). */
static void fiber_begin(struct ctx *from)
{
	const void *lo = NULL;
	size_t size = 0;
	san_finish(NULL, &lo, &size);
	if (size) {
		from->asan_lo = lo;
		from->asan_size = size;
	}
}

static void *ctx_switch(struct ctx *from, struct ctx *to, void *xfer)
{
	san_start(&from->asan_fake, to);
	void *r = t_jump(&from->sp, to->sp, xfer);
	san_finish(from->asan_fake, NULL, NULL);
	return r;
}

/* A fiber's last switch: nobody resumes it, ASan may drop its fake stack. */
static _Noreturn void ctx_exit(struct ctx *from, struct ctx *to, void *xfer)
{
	san_start(NULL, to);
	t_jump(&from->sp, to->sp, xfer);
	abort();
}

/* ---- (a) callee-saved registers ------------------------------------------ */

#define REG_ROUNDS 8

struct regs_test {
	struct ctx main, fib;
	uint64_t main_in[NREGS], main_out[NREGS];
	uint64_t fib_in[NREGS], fib_out[NREGS];
	int fib_bad, fib_rounds;
	uint64_t fib_bad_reg, fib_bad_val;
};

static const char *const reg_name[NREGS] = {"rbx", "rbp", "r12", "r13", "r14", "r15"};

/* Distinct per register, round and side, and never a value the other side
 * could leave behind by accident (zero, a stack address). */
static void reg_pattern(uint64_t v[NREGS], int round, bool fiber)
{
	for (int k = 0; k < NREGS; k++)
		v[k] = (fiber ? 0xf00dfeed00000000ull : 0x5afec0de00000000ull) ^
		       ((uint64_t)(k + 1) << 24) ^ ((uint64_t)(round + 1) << 8) ^ 0xa5;
}

static void regs_entry(void *xfer)
{
	struct regs_test *rt = xfer;
	fiber_begin(&rt->main);
	for (int round = 0; round < REG_ROUNDS; round++) {
		reg_pattern(rt->fib_in, round, true);
		san_start(&rt->fib.asan_fake, &rt->main);
		t_jump_regs(&rt->fib.sp, rt->main.sp, NULL, rt->fib_in, rt->fib_out);
		san_finish(rt->fib.asan_fake, NULL, NULL);
		for (int k = 0; k < NREGS; k++) {
			if (rt->fib_out[k] != rt->fib_in[k] && !rt->fib_bad++) {
				rt->fib_bad_reg = (uint64_t)k;
				rt->fib_bad_val = rt->fib_out[k];
			}
		}
		rt->fib_rounds++;
	}
	ctx_exit(&rt->fib, &rt->main, NULL);
}

static void check_regs(const uint64_t in[NREGS], const uint64_t out[NREGS], const char *side,
		       int round)
{
	for (int k = 0; k < NREGS; k++)
		if (out[k] != in[k])
			fail_msg("%s round %d: %s is %#llx after the switch, was %#llx", side,
				 round, reg_name[k], (unsigned long long)out[k],
				 (unsigned long long)in[k]);
}

static void test_callee_saved_registers(void **state)
{
	(void)state;
	static struct regs_test rt;
	memset(&rt, 0, sizeof(rt));
	fiber_new(&rt.fib, regs_entry, 0);
	/* Every jump back into main comes from a fiber that loaded its own
	 * values into all six registers; the last one comes from ctx_exit. */
	for (int round = 0; round <= REG_ROUNDS; round++) {
		reg_pattern(rt.main_in, round, false);
		memset(rt.main_out, 0, sizeof(rt.main_out));
		san_start(&rt.main.asan_fake, &rt.fib);
		t_jump_regs(&rt.main.sp, rt.fib.sp, &rt, rt.main_in, rt.main_out);
		san_finish(rt.main.asan_fake, NULL, NULL);
		check_regs(rt.main_in, rt.main_out, "main", round);
	}
	if (rt.fib_bad)
		fail_msg("fiber: %d registers wrong after a switch back, first %s = %#llx",
			 rt.fib_bad, reg_name[rt.fib_bad_reg], (unsigned long long)rt.fib_bad_val);
	assert_int_equal(rt.fib_rounds, REG_ROUNDS);
	fiber_free(&rt.fib);
}

/* ---- (b) floating-point control state ------------------------------------ */

#define MXCSR_CONTROL 0xffc0u  /* without the sticky exception flags */
#define MXCSR_DEFAULT 0x1f80u
#define MXCSR_RC_MASK 0x6000u
#define MXCSR_RC_DOWN 0x2000u
#define MXCSR_RC_UP 0x4000u
#define MXCSR_RC_ZERO 0x6000u
#define MXCSR_FTZ 0x8000u
#define FPUCW_DEFAULT 0x037fu
#define FPUCW_PC_DOUBLE 0x0200u
#define FPUCW_RC_DOWN 0x0400u
#define FPUCW_RC_UP 0x0800u

static uint32_t get_mxcsr(void)
{
	uint32_t v;
	__asm__ __volatile__("stmxcsr %0" : "=m"(v));
	return v;
}

static void set_mxcsr(uint32_t v) { __asm__ __volatile__("ldmxcsr %0" : : "m"(v)); }

static uint16_t get_fpucw(void)
{
	uint16_t v;
	__asm__ __volatile__("fnstcw %0" : "=m"(v));
	return v;
}

static void set_fpucw(uint16_t v) { __asm__ __volatile__("fldcw %0" : : "m"(v)); }

/* 1/10 is inexact: its last bit tells whether SSE rounded up or down. */
static uint64_t tenth_bits(void)
{
	volatile double one = 1.0, ten = 10.0;
	volatile double q = one / ten;
	double r = q;
	uint64_t bits;
	memcpy(&bits, &r, sizeof(bits));
	return bits;
}

#define TENTH_DOWN 0x3fb9999999999999ull /* toward zero or -inf */
#define TENTH_UP 0x3fb999999999999aull   /* nearest or +inf */

/* Which control state each context sets for itself.  The switches go
 * main -> A -> B -> main: main and A differ only in the x87 CW, A and B only
 * in MXCSR, B and main in both, so a switch that compares or restores only
 * half of the control state fails one of the three. */
enum { FP_MAIN, FP_A, FP_B, FP_CTXS };
static const uint32_t fp_mxcsr[FP_CTXS] = {
	MXCSR_DEFAULT | MXCSR_RC_ZERO | MXCSR_FTZ,
	MXCSR_DEFAULT | MXCSR_RC_ZERO | MXCSR_FTZ,
	MXCSR_DEFAULT | MXCSR_RC_UP,
};
static const uint16_t fp_cw[FP_CTXS] = {
	(FPUCW_DEFAULT & ~0x0f00u) | FPUCW_PC_DOUBLE | FPUCW_RC_UP,
	(FPUCW_DEFAULT & ~0x0f00u) | FPUCW_RC_DOWN,
	(FPUCW_DEFAULT & ~0x0f00u) | FPUCW_RC_DOWN,
};
static const uint64_t fp_tenth[FP_CTXS] = {TENTH_DOWN, TENTH_DOWN, TENTH_UP};

#define FP_ROUNDS 1000
#define FP_STOP ((void *)(uintptr_t)0x5709)

struct fp_test {
	struct ctx main, a, b;
	/* What each fiber saw when it started, and on later resumes. */
	uint32_t first_mxcsr[FP_CTXS];
	uint16_t first_cw[FP_CTXS];
	uint64_t first_tenth[FP_CTXS];
	int resumes[FP_CTXS], bad[FP_CTXS];
	uint32_t bad_mxcsr[FP_CTXS];
	uint16_t bad_cw[FP_CTXS];
};

static void fp_record_first(struct fp_test *ft, int who)
{
	ft->first_mxcsr[who] = get_mxcsr() & MXCSR_CONTROL;
	ft->first_cw[who] = get_fpucw();
	ft->first_tenth[who] = tenth_bits();
	set_mxcsr(fp_mxcsr[who]);
	set_fpucw(fp_cw[who]);
}

/* On every resume a context must find exactly the state it left. */
static void fp_check_own(struct fp_test *ft, int who)
{
	uint32_t m = get_mxcsr() & MXCSR_CONTROL;
	uint16_t cw = get_fpucw();
	bool ok = m == fp_mxcsr[who] && cw == fp_cw[who] && tenth_bits() == fp_tenth[who];
	if (!ok && !ft->bad[who]++) {
		ft->bad_mxcsr[who] = m;
		ft->bad_cw[who] = cw;
	}
	ft->resumes[who]++;
	/* Clear the sticky flags 1/10 raised: the switch compares whole
	 * words, and equal words are what lets it skip the restore. */
	set_mxcsr(fp_mxcsr[who]);
}

/* main -> A -> B -> main, so the fibers also switch to each other directly,
 * each time between two different non-default control states. */
static void fp_entry_a(void *xfer)
{
	struct fp_test *ft = xfer;
	fiber_begin(&ft->main);
	fp_record_first(ft, FP_A);
	void *x = ctx_switch(&ft->a, &ft->b, ft);
	while (x != FP_STOP) {
		fp_check_own(ft, FP_A);
		x = ctx_switch(&ft->a, &ft->b, ft);
	}
	ctx_exit(&ft->a, &ft->b, FP_STOP);
}

static void fp_entry_b(void *xfer)
{
	struct fp_test *ft = xfer;
	fiber_begin(&ft->a);
	fp_record_first(ft, FP_B);
	void *x = ctx_switch(&ft->b, &ft->main, NULL);
	while (x != FP_STOP) {
		fp_check_own(ft, FP_B);
		x = ctx_switch(&ft->b, &ft->main, NULL);
	}
	ctx_exit(&ft->b, &ft->main, NULL);
}

static void test_fp_control_state(void **state)
{
	(void)state;
	static struct fp_test ft;
	memset(&ft, 0, sizeof(ft));
	uint32_t saved_mxcsr = get_mxcsr();
	uint16_t saved_cw = get_fpucw();
	fiber_new(&ft.a, fp_entry_a, 0);
	fiber_new(&ft.b, fp_entry_b, 0);

	set_mxcsr(fp_mxcsr[FP_MAIN]);
	set_fpucw(fp_cw[FP_MAIN]);
	for (int i = 0; i < FP_ROUNDS; i++) {
		ctx_switch(&ft.main, &ft.a, &ft);
		fp_check_own(&ft, FP_MAIN);
	}
	ctx_switch(&ft.main, &ft.a, FP_STOP);
	fp_check_own(&ft, FP_MAIN);
	/* Back to the defaults before cmocka does anything. */
	set_mxcsr(saved_mxcsr);
	set_fpucw(saved_cw);

	for (int who = FP_A; who <= FP_B; who++) {
		const char *name = who == FP_A ? "fiber A" : "fiber B";
		if (ft.first_mxcsr[who] != MXCSR_DEFAULT || ft.first_cw[who] != FPUCW_DEFAULT)
			fail_msg("%s started with MXCSR %#x, x87 CW %#x; expected the "
				 "defaults %#x, %#x",
				 name, ft.first_mxcsr[who], ft.first_cw[who], MXCSR_DEFAULT,
				 FPUCW_DEFAULT);
		/* Round to nearest really is in effect, not just in the bits. */
		assert_true(ft.first_tenth[who] == TENTH_UP);
	}
	for (int who = 0; who < FP_CTXS; who++) {
		if (ft.bad[who])
			fail_msg("context %d: %d resumes with the wrong FP state, first MXCSR "
				 "%#x (want %#x), x87 CW %#x (want %#x)",
				 who, ft.bad[who], ft.bad_mxcsr[who], fp_mxcsr[who],
				 ft.bad_cw[who], fp_cw[who]);
	}
	assert_int_equal(ft.resumes[FP_MAIN], FP_ROUNDS + 1);
	assert_int_equal(ft.resumes[FP_A], FP_ROUNDS - 1);
	assert_int_equal(ft.resumes[FP_B], FP_ROUNDS - 1);
	fiber_free(&ft.a);
	fiber_free(&ft.b);
}

/* ---- (c) xfer both ways --------------------------------------------------- */

/* Full 64-bit values: a jump that moved only edx/eax would lose the top. */
#define XFER_FIRST ((void *)(uintptr_t)0xdeadbeefcafef00dull)
#define XFER_ROUNDS 64

struct xfer_test {
	struct ctx main, fib;
	void *entry_arg;
	void *got[XFER_ROUNDS];
};

static void *xfer_reply(int i)
{
	return (void *)(uintptr_t)(0x8000000000000000ull | (uint64_t)i << 32 | 0x11);
}

static void *xfer_send(int i)
{
	return (void *)(uintptr_t)(0x7fff000000000000ull | (uint64_t)i << 20 | 0x22);
}

static struct xfer_test xt;

static void xfer_entry(void *xfer)
{
	fiber_begin(&xt.main);
	xt.entry_arg = xfer;
	for (int i = 0; i < XFER_ROUNDS; i++)
		xt.got[i] = ctx_switch(&xt.fib, &xt.main, xfer_reply(i));
	ctx_exit(&xt.fib, &xt.main, NULL);
}

static void test_xfer_both_ways(void **state)
{
	(void)state;
	memset(&xt, 0, sizeof(xt));
	fiber_new(&xt.fib, xfer_entry, 0);
	void *r = ctx_switch(&xt.main, &xt.fib, XFER_FIRST);
	assert_ptr_equal(xt.entry_arg, XFER_FIRST);
	for (int i = 0; i < XFER_ROUNDS; i++) {
		assert_ptr_equal(r, xfer_reply(i));
		r = ctx_switch(&xt.main, &xt.fib, xfer_send(i));
		assert_ptr_equal(xt.got[i], xfer_send(i));
	}
	assert_null(r);
	fiber_free(&xt.fib);
}

/* ---- (d) a fresh context's stack and registers ---------------------------- */

struct probe_result {
	uint64_t rsp, regs[NREGS];
	uintptr_t aligned_local;
	int sse_ok;
};

static struct {
	struct ctx main, fib;
	struct probe_result r;
} pt;

/* Reached by a jmp from t_probe_entry: rsp is as the switch left it. */
void t_probe_c(void *xfer)
{
	(void)xfer;
	fiber_begin(&pt.main);
	pt.r.rsp = t_probe[0];
	memcpy(pt.r.regs, &t_probe[1], sizeof(pt.r.regs));
	/* The compiler places this assuming rsp % 16 == 8 at entry. */
	_Alignas(16) volatile float v[4];
	pt.r.aligned_local = (uintptr_t)v;
	/* movaps faults on a misaligned address: the failure real code sees. */
	_mm_store_ps((float *)v, _mm_set1_ps(1.5f));
	pt.r.sse_ok = v[3] == 1.5f;
	ctx_exit(&pt.fib, &pt.main, NULL);
}

static void test_fresh_context_abi(void **state)
{
	(void)state;
	/* The top need not be aligned: ctx_make rounds it down. */
	for (size_t gap = 64; gap < 64 + 16; gap++) {
		memset(&pt, 0, sizeof(pt));
		memset(t_probe, 0xff, sizeof(t_probe));
		fiber_new(&pt.fib, t_probe_entry, gap);
		uintptr_t top = (uintptr_t)pt.fib.top;
		uintptr_t atop = top & ~(uintptr_t)15;
		/* ctx_make builds below the top and nowhere above it. */
		memset(pt.fib.top, 0xcc, 64);
		pt.fib.sp = cbcmn__ctx_make(pt.fib.top, t_probe_entry);
		for (int i = 0; i < 64; i++)
			assert_int_equal((unsigned char)pt.fib.top[i], 0xcc);
		assert_true((uintptr_t)pt.fib.sp < atop);
		assert_true((uintptr_t)pt.fib.sp >= atop - 256);

		ctx_switch(&pt.main, &pt.fib, NULL);
		/* SysV: at a function's first instruction rsp + 8 is 16-aligned,
		 * and the return-address slot sits right below the top. */
		if (pt.r.rsp % 16 != 8)
			fail_msg("top %#lx: rsp at entry %#llx, rsp %% 16 = %llu, want 8",
				 (unsigned long)top, (unsigned long long)pt.r.rsp,
				 (unsigned long long)(pt.r.rsp % 16));
		assert_int_equal(pt.r.rsp, atop - 8);
		assert_int_equal(pt.r.aligned_local % 16, 0);
		assert_true(pt.r.sse_ok);
		/* Zero rbp ends frame-pointer unwinds (debuggers, profilers)
		 * at the fiber's first frame; the others start zero too. */
		for (int k = 0; k < NREGS; k++)
			if (pt.r.regs[k] != 0)
				fail_msg("%s is %#llx at entry, want 0", reg_name[k],
					 (unsigned long long)pt.r.regs[k]);
		fiber_free(&pt.fib);
	}
}

/* An entry that returns lands in the trap, which must abort: returning
 * into whatever lies above the stack top would run garbage. */
static struct {
	struct ctx main, fib;
} rt_ret;

static void returning_entry(void *xfer)
{
	(void)xfer;
	fiber_begin(&rt_ret.main);
}

static void test_entry_return_aborts(void **state)
{
	(void)state;
	pid_t pid = t_fork_coreless();
	if (pid == 0) {
		signal(SIGABRT, SIG_DFL);
		fiber_new(&rt_ret.fib, returning_entry, 0);
		ctx_switch(&rt_ret.main, &rt_ret.fib, NULL);
		_exit(3); /* came back: the trap did not catch the return */
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
		fail_msg("child: %s %d, want killed by SIGABRT",
			 WIFSIGNALED(st) ? "signal" : "exit status",
			 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

/* ---- (e) ping-pong -------------------------------------------------------- */

#define PP_SWITCHES 1000000u
#define PP_STOP ((void *)(uintptr_t)~0ull)

static struct {
	struct ctx main, fib;
	uint64_t fib_count, fib_bad;
} pp;

static void pp_entry(void *xfer)
{
	fiber_begin(&pp.main);
	uint64_t expect = 0;
	while (xfer != PP_STOP) {
		if ((uintptr_t)xfer != expect)
			pp.fib_bad++;
		expect++;
		pp.fib_count++;
		xfer = ctx_switch(&pp.fib, &pp.main, (void *)((uintptr_t)xfer + 1));
	}
	ctx_exit(&pp.fib, &pp.main, NULL);
}

static void test_ping_pong(void **state)
{
	(void)state;
	memset(&pp, 0, sizeof(pp));
	fiber_new(&pp.fib, pp_entry, 0);
	/* Each round is two switches, one each way. */
	uint64_t rounds = PP_SWITCHES / 2, bad = 0;
	uint64_t t0 = t_now_ns();
	for (uint64_t i = 0; i < rounds; i++) {
		void *r = ctx_switch(&pp.main, &pp.fib, (void *)(uintptr_t)i);
		bad += (uintptr_t)r != i + 1;
	}
	uint64_t ns = t_now_ns() - t0;
	assert_null(ctx_switch(&pp.main, &pp.fib, PP_STOP));
	printf("  %llu switches, %.1f ns per switch\n", (unsigned long long)(2 * rounds),
	       (double)ns / (double)(2 * rounds));
	assert_int_equal(bad, 0);
	assert_int_equal(pp.fib_bad, 0);
	assert_int_equal(pp.fib_count, rounds);
	fiber_free(&pp.fib);
}

/* ---- (f) backtraces end at a fiber's first frame --------------------------
 *
 * Regression: the return address ctx_make left for the entry function was
 * the first byte of cbcmn__ctx_trap, and unwinders look up return address
 * - 1, which fell outside it: gdb went on reading the words above the
 * stack top (a fiber stack's descriptor) as frames, "?? ()" after "?? ()".
 */

static struct {
	struct ctx main, fib;
	struct t_trace tr;
	int rc;
} uw;

/* Somewhere for the debugger to stop: a fiber's frame, not its entry. */
__attribute__((noinline)) void t_fiber_stop_here(void)
{
	__asm__ __volatile__("" ::: "memory");
	uw.rc = _Unwind_Backtrace(t_trace_frame, &uw.tr);
}

static void uw_entry(void *xfer)
{
	(void)xfer;
	fiber_begin(&uw.main);
	t_fiber_stop_here();
	ctx_exit(&uw.fib, &uw.main, NULL);
}

static bool in_trap(uintptr_t ip)
{
	/* The call whose return address this is: one byte before. */
	uintptr_t trap = (uintptr_t)cbcmn__ctx_trap;
	return ip - 1 >= trap && ip - 1 < trap + 16;
}

static void test_unwind_stops_at_fiber_entry(void **state)
{
	(void)state;
	memset(&uw, 0, sizeof(uw));
	fiber_new(&uw.fib, uw_entry, 0);
	ctx_switch(&uw.main, &uw.fib, NULL);
	fiber_free(&uw.fib);
	for (int i = 0; i < uw.tr.n; i++)
		printf("  #%d %#lx%s\n", i, (unsigned long)uw.tr.ip[i], in_trap(uw.tr.ip[i]) ? " (trap)" : "");
	assert_int_equal(uw.rc, _URC_END_OF_STACK);
	/* stop_here, the entry, the trap; then libgcc reports the trap's
	 * undefined return address as one last frame at 0. */
	int trap_at = -1;
	for (int i = 0; i < uw.tr.n; i++)
		if (in_trap(uw.tr.ip[i]))
			trap_at = i;
	if (trap_at < 0)
		fail_msg("no frame returns into cbcmn__ctx_trap: the unwinder did not find "
			 "its unwind info");
	assert_true(trap_at <= 4);
	for (int i = trap_at + 1; i < uw.tr.n; i++)
		assert_int_equal(uw.tr.ip[i], 0);
}

/* The same seen from gdb: the test runs itself under gdb -batch. */
static int gdb_target(void)
{
	memset(&uw, 0, sizeof(uw));
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uw.fib.map_len = STACK_BYTES + pg;
	uw.fib.map = mmap(NULL, uw.fib.map_len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (uw.fib.map == MAP_FAILED)
		return 2;
	uw.fib.lo = uw.fib.map + pg;
	uw.fib.top = uw.fib.map + uw.fib.map_len;
	/* What a cbcmn stack keeps above its top: words that look like a
	 * frame (a pointer into the stack, a size, a pointer). */
	uintptr_t *fake = (uintptr_t *)(uw.fib.top - 64);
	fake[0] = (uintptr_t)uw.fib.lo;
	fake[1] = 0xffc0;
	fake[2] = (uintptr_t)(uw.fib.top - 4096);
	fake[3] = 1;
	uw.fib.top -= 64;
	uw.fib.asan_lo = uw.fib.lo;
	uw.fib.asan_size = (size_t)(uw.fib.top - uw.fib.lo);
	uw.fib.sp = cbcmn__ctx_make(uw.fib.top, uw_entry);
	ctx_switch(&uw.main, &uw.fib, NULL);
	return 0;
}

static void test_gdb_backtrace_stops_at_fiber_entry(void **state)
{
	(void)state;
	if (system("command -v gdb >/dev/null 2>&1") != 0) {
		T_SKIP("gdb is not installed");
		return;
	}
	char exe[4096];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(len > 0);
	exe[len] = 0;
	char cmd[8192];
	snprintf(cmd, sizeof(cmd),
		 "timeout 120 gdb -nx -batch -ex 'set debuginfod enabled off' -ex 'set startup-with-shell off' "
		 "-ex 'break t_fiber_stop_here' -ex run -ex bt -ex kill --args '%s' "
		 "--gdb-target 2>&1",
		 exe);
	FILE *f = popen(cmd, "r");
	assert_non_null(f);
	char line[1024], last[1024] = "";
	int frames = 0, unknown = 0;
	bool stopped = false;
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, "Breakpoint 1, "))
			stopped = true;
		if (line[0] != '#')
			continue;
		printf("  %s", line);
		frames++;
		unknown += strstr(line, "?? ()") != NULL;
		memcpy(last, line, sizeof(last));
	}
	pclose(f);
	if (!stopped) {
		T_SKIP("gdb could not run the test to its breakpoint (no ptrace here?)");
		return;
	}
	assert_int_equal(unknown, 0);
	assert_non_null(strstr(last, "cbcmn__ctx_trap"));
	assert_true(frames <= 5);
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--gdb-target") == 0)
		return gdb_target();
	const struct CMUnitTest tests[] = {
#define EACH_JUMP(f)                                                                     \
	cmocka_unit_test_setup(f, use_jump), cmocka_unit_test_setup(f, use_jump_ret),     \
		cmocka_unit_test_setup(f, use_jump_mixed)
		EACH_JUMP(test_callee_saved_registers),
		EACH_JUMP(test_fp_control_state),
		EACH_JUMP(test_xfer_both_ways),
		EACH_JUMP(test_fresh_context_abi),
		EACH_JUMP(test_entry_return_aborts),
		EACH_JUMP(test_ping_pong),
		EACH_JUMP(test_unwind_stops_at_fiber_entry),
		cmocka_unit_test(test_gdb_backtrace_stops_at_fiber_entry),
	};
	return cmocka_run_group_tests_name("context", tests, NULL, NULL);
}
