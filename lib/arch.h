/* arch.h: private to libcbcmn: the one place that picks the CPU architecture. */
#ifndef CBCMN_ARCH_H
#define CBCMN_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__)
/* asm/x86_64/jump_x86_64_sysv_elf_gas.S */
#define CBCMN__ARCH_NAME "x86_64"
/* A spin-wait hint: lets the sibling hyperthread run and saves power. */
static inline void cbcmn__cpu_relax(void) { __asm__ __volatile__("pause" ::: "memory"); }

/* The time-stamp counter, for the executors' fast clock (clock.h).  Not
 * serializing: a few dozen cycles either way do not matter there. */
static inline uint64_t cbcmn__cycles(void)
{
	uint32_t lo, hi;
	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return lo | (uint64_t)hi << 32;
}

/* The counter, read only once every earlier instruction (every load)
 * has completed: lfence first, as the vDSO's rdtsc_ordered(). */
static inline uint64_t cbcmn__cycles_ordered(void)
{
	__asm__ __volatile__("lfence" ::: "memory");
	return cbcmn__cycles();
}

/* Whether the counter ticks at a constant rate through frequency changes
 * and deep sleep states, in step on every CPU: CPUID 0x80000007, EDX bit 8
 * ("invariant TSC"; /proc/cpuinfo's constant_tsc and nonstop_tsc). */
bool cbcmn__cycles_invariant(void);

/* The calling thread's FP control state as cbcmn__ctx_jump_fp wants it:
 * MXCSR | x87 control word << 32. */
static inline uint64_t cbcmn__fpcw_read(void)
{
	uint32_t mxcsr;
	uint16_t cw;
	__asm__ __volatile__("stmxcsr %0" : "=m"(mxcsr));
	__asm__ __volatile__("fnstcw %0" : "=m"(cw));
	return mxcsr | (uint64_t)cw << 32;
}

/* Load an FP control state as cbcmn__fpcw_read gives it. */
static inline void cbcmn__fpcw_write(uint64_t fpcw)
{
	uint32_t mxcsr = (uint32_t)fpcw;
	uint16_t cw = (uint16_t)(fpcw >> 32);
	__asm__ __volatile__("ldmxcsr %0" : : "m"(mxcsr));
	__asm__ __volatile__("fldcw %0" : : "m"(cw));
}

/* What a fresh context starts with (cbcmn__ctx_make): MXCSR 0x1F80, x87
 * CW 0x037F, the ABI's defaults. */
#define CBCMN__FPCW_DEFAULT (0x1F80ull | 0x037Full << 32)

/* Where a frame's return address is, from its canonical frame address. */
#define CBCMN__RA_SLOT(cfa) ((uintptr_t *)((cfa) - 8))
#else
#error "cbcmn: no context switch for this architecture (add asm/<arch>/ and a branch here)"
#endif

/* Switch contexts: save ours in *save_sp, resume to_sp, hand it xfer.
 * Returns the xfer of whoever later resumes us. */
void *cbcmn__ctx_jump(void **save_sp, void *to_sp, void *xfer);
/* The same, ending in a RET rather than an indirect jump: predicted for a
 * switch to a context that suspended through the same call as ours; it
 * continues any saved context (see the .S). */
void *cbcmn__ctx_jump_ret(void **save_sp, void *to_sp, void *xfer);
/* The same, for a caller whose FP control state is fpcw (see the .S). */
void *cbcmn__ctx_jump_fp(void **save_sp, void *to_sp, void *xfer, uint64_t fpcw);
/* A context on a fresh stack that calls entry(xfer) when first jumped to. */
void *cbcmn__ctx_make(void *stack_top, void (*entry)(void *xfer));
/* Where a function run by cbcmn__sys_switch() continues: the saved
 * stack pointer of a context and what its switch returns. */
struct cbcmn__sys_to {
	void *sp;
	void *xfer;
};
/* Suspend ours in *save_sp as cbcmn__ctx_jump() does, run fn(arg) on the
 * stack below sys_top, continue the context it returns (see the .S). */
void *cbcmn__sys_switch(void **save_sp, void *sys_top, struct cbcmn__sys_to (*fn)(void *),
			void *arg);
/* fn(arg) on the stack below sys_top, then back on ours; fn must not
 * switch contexts. */
void *cbcmn__sys_call(void *sys_top, void *(*fn)(void *), void *arg);
/* Not called: a return address.  A function that returns to it ends the
 * task running on this thread (cbcmn__overflow_unwind, overflow.c). */
void cbcmn__ctx_overflow_return(void);
/* Where a fresh context's entry function "returns": aborts.  Unwinders stop
 * at it (tests look for it). */
void cbcmn__ctx_trap(void);

#endif
