/* overflow.h: private to libcbcmn: leaving a fiber stack overflow
 * (overflow.c), for the SIGSEGV handler (signal.c), the landing pad
 * (sched.c). */
#ifndef CBCMN_OVERFLOW_H
#define CBCMN_OVERFLOW_H

#include <stdbool.h>
#include <stdint.h>
#include <ucontext.h>

struct cbcmn_task;
struct cbcmn__exec;

/* Once per runtime start, outside any handler, under signal.c's install
 * lock. */
void cbcmn__overflow_init(void);
/* On each executor thread, as it starts and ends: its signal mask is what
 * a landing restores. */
void cbcmn__overflow_thread_start(void);
void cbcmn__overflow_thread_end(void);

/* From the SIGSEGV handler, for a fault at addr in the guard region of t's
 * stack.  Returns when the faulting code may go on (into the yellow zone);
 * otherwise jumps to t's landing pad. */
void cbcmn__overflow(struct cbcmn_task *t, const void *addr, ucontext_t *uc);
/* A fault at addr in executor e's system stack's guard page: says so on
 * stderr and returns true (the caller lets the fault kill the process);
 * false if addr is not there. */
bool cbcmn__overflow_sys(const struct cbcmn__exec *e, const void *addr);
/* First thing in the SIGSEGV handler: a fault raised while this thread
 * walks frames for cbcmn__overflow ends the walk (jumps back into it). */
void cbcmn__overflow_walk_fault(void);

/* At t's landing pad, called from its frame: guard the stack again, give the executor its signal mask back, load fpcw (the FP control
 * state t started with), then cancel and await the nurseries t left open.
 * Runs on t's fiber: may block. */
void cbcmn__overflow_landed(struct cbcmn_task *t, uint64_t fpcw);
/* The landing pad of the actor halt this thread runs (actor.c,
 * cbcmn__actor_end_guarded()), or NULL: an overflow landing there ends
 * a drop or fini, not the task whose stack it runs on (say()'s line). */
extern __thread void **cbcmn__halt_pad;
/* The same but for the nurseries: at a pad below which a callback ran
 * on t's stack (actor.c: a halt's drop or fini) and t goes on. */
void cbcmn__overflow_landed_frame(struct cbcmn_task *t, uint64_t fpcw);
/* cbcmn__ctx_overflow_return (asm/) comes here: ends the task running on
 * this thread, whose library call that overflowed has returned (or been
 * unwound through). */
__attribute__((noreturn)) void cbcmn__overflow_unwind(void);

#endif
