/* jump_x86_64_sysv_elf_gas.S: fiber context switch for x86_64, System V ABI.
 *
 *   void *cbcmn__ctx_jump(void **save_sp, void *to_sp, void *xfer);
 *   void *cbcmn__ctx_jump_fp(void **save_sp, void *to_sp, void *xfer,
 *                            uint64_t fpcw);
 *
 * Saves the caller's callee-saved state on its own stack, stores the stack
 * pointer in *save_sp, switches to to_sp, restores the state found there and
 * continues in that context.  xfer is handed over: the resumed jump returns
 * it in rax, and a fresh context (cbcmn__ctx_make) receives it as its first
 * argument in rdi.
 *
 * cbcmn__ctx_jump_fp is the same for a caller that knows its floating-point
 * control state: fpcw is MXCSR | x87 CW << 32, stored as is instead of being
 * read with STMXCSR, which costs ~10 cycles on current cores (more than the
 * rest of the switch).  The scheduler loop, which never changes its FP
 * state, switches to tasks this way; tasks switch back with the full save.
 *
 * Saved frame, at the saved stack pointer (low addresses first):
 *
 *   +------+-----------------------------------+
 *   | 0x00 | MXCSR (4 bytes)                   |
 *   | 0x04 | x87 control word (2 bytes)        |
 *   | 0x06 | unused (2 bytes)                  |
 *   | 0x08 | r12                               |
 *   | 0x10 | r13                               |
 *   | 0x18 | r14                               |
 *   | 0x20 | r15                               |
 *   | 0x28 | rbx                               |
 *   | 0x30 | rbp                               |
 *   | 0x38 | return address (rip)              |
 *   +------+-----------------------------------+
 *
 * The restore skips LDMXCSR/FLDCW (each ~10 cycles) when the target's
 * control state equals the current one, which it nearly always does.  The
 * compare reads MXCSR and CW back in two loads that each match one store
 * (one 8-byte load over both would defeat store-to-load forwarding).
 *
 * The switch ends in an indirect jump, not a RET: a RET would miss the
 * return stack buffer whenever the target was suspended elsewhere than
 * this jump's caller (it predicts the caller of *this* jump), which costs
 * about as much as the rest of the switch: the scheduler's loop and its
 * tasks.  cbcmn__ctx_jump_ret ends in a RET, for a switch between two
 * contexts that each suspended through the same call (a task blocking
 * straight into another, sched.c's switch_direct()): there the RET's
 * prediction is right, and so are all the returns the target makes after
 * it, where the indirect jump left this caller's return address on the
 * buffer and every one of them, a frame apart, missed (4 or 5 a fiber
 * actor's hop: docs/ACTORS.md, "The hop's fast path").  The target
 * need not have suspended there: both endings continue at the address in
 * its frame's 0x38 slot, whichever switch saved it (a fresh context's
 * entry, a task that last left through the loop, for which the RET misses
 * once as the jump would; test_context runs its switch tests with each
 * ending and with the two alternating).  Neither ending works with a CPU
 * shadow stack on, which a RET into another fiber would fault on and a
 * fiber's later returns too (docs/FIBERS.md, "Shadow stacks").
 *
 * Everything else the ABI lets a callee clobber (rax, rcx, rdx, rsi, rdi,
 * r8-r11, vector registers, flags) is not saved: the compiler already
 * assumes a call destroys it.
 */
	.text
	.globl	cbcmn__ctx_jump
	.hidden	cbcmn__ctx_jump
	.type	cbcmn__ctx_jump,@function
	.align	16
cbcmn__ctx_jump:
	.cfi_startproc
	xorl	%r10d, %r10d		/* r10d = 0: continue with the indirect jump */
.Lsave_all:
	leaq	-0x38(%rsp), %rsp	/* room for the frame below the return address */
	.cfi_adjust_cfa_offset 0x38
	stmxcsr	0x00(%rsp)		/* save MXCSR (control + sticky status bits) */
	fnstcw	0x04(%rsp)		/* save x87 control word */
	movl	0x00(%rsp), %r8d	/* r8d = our MXCSR, r9d = our CW, to compare */
	movzwl	0x04(%rsp), %r9d
	jmp	.Lsave_gprs
	.cfi_endproc
	.size	cbcmn__ctx_jump,.-cbcmn__ctx_jump

	.globl	cbcmn__ctx_jump_ret
	.hidden	cbcmn__ctx_jump_ret
	.type	cbcmn__ctx_jump_ret,@function
	.align	16
cbcmn__ctx_jump_ret:
	.cfi_startproc
	movl	$1, %r10d		/* r10d = 1: continue with a RET */
	jmp	.Lsave_all
	.cfi_endproc
	.size	cbcmn__ctx_jump_ret,.-cbcmn__ctx_jump_ret

	.globl	cbcmn__ctx_jump_fp
	.hidden	cbcmn__ctx_jump_fp
	.type	cbcmn__ctx_jump_fp,@function
	.align	16
cbcmn__ctx_jump_fp:
	.cfi_startproc
	xorl	%r10d, %r10d		/* the indirect jump */
	leaq	-0x38(%rsp), %rsp	/* room for the frame below the return address */
	.cfi_adjust_cfa_offset 0x38
	movq	%rcx, 0x00(%rsp)	/* the known MXCSR and CW, as one word */
	movl	%ecx, %r8d		/* r8d = MXCSR */
	shrq	$32, %rcx
	movzwl	%cx, %r9d		/* r9d = CW */
.Lsave_gprs:
	movq	%r12, 0x08(%rsp)	/* callee-saved GPRs */
	movq	%r13, 0x10(%rsp)
	movq	%r14, 0x18(%rsp)
	movq	%r15, 0x20(%rsp)
	movq	%rbx, 0x28(%rsp)
	movq	%rbp, 0x30(%rsp)

	movq	%rsp, (%rdi)		/* *save_sp = our frame */
	movq	%rsi, %rsp		/* switch stacks */

	cmpl	0x00(%rsp), %r8d	/* same MXCSR as the target? */
	jne	1f			/* rarely: restore its FP control state */
	cmpw	0x04(%rsp), %r9w	/* same x87 CW? */
	jne	1f
2:
	movq	0x08(%rsp), %r12	/* restore callee-saved GPRs */
	movq	0x10(%rsp), %r13
	movq	0x18(%rsp), %r14
	movq	0x20(%rsp), %r15
	movq	0x28(%rsp), %rbx
	movq	0x30(%rsp), %rbp
	movq	%rdx, %rax		/* xfer: return value of the resumed jump */
	movq	%rdx, %rdi		/* xfer: first argument of a fresh entry */
	testl	%r10d, %r10d
	jnz	3f
	movq	0x38(%rsp), %r8		/* where the target continues */
	leaq	0x40(%rsp), %rsp	/* pop the frame and the return address */
	.cfi_adjust_cfa_offset -0x40
	jmp	*%r8			/* into the target context */
3:
	.cfi_adjust_cfa_offset 0x40
	leaq	0x38(%rsp), %rsp	/* pop the frame: the return address is next */
	.cfi_adjust_cfa_offset -0x38
	ret				/* into the target context, as predicted */
1:
	.cfi_adjust_cfa_offset 0x38
	ldmxcsr	0x00(%rsp)		/* restore MXCSR */
	fldcw	0x04(%rsp)		/* restore x87 control word */
	jmp	2b
	.cfi_endproc
	.size	cbcmn__ctx_jump_fp,.-cbcmn__ctx_jump_fp

/* void *cbcmn__sys_switch(void **save_sp, void *sys_top,
 *                         struct cbcmn__sys_to (*fn)(void *arg), void *arg);
 *
 * Go's mcall: suspend the caller as cbcmn__ctx_jump would (the same frame,
 * the same *save_sp), then run fn(arg) on another stack, sys_top (an
 * executor's system stack, 16-byte aligned), and continue the context
 * whose saved stack pointer fn returns, handing it the xfer fn returns
 * beside it (struct cbcmn__sys_to: rax, rdx).  fn may return the caller's
 * own frame (*save_sp): the call then returns xfer at once.  The runtime's
 * paths of a block run on the system stack, which stays in cache, so that
 * an actor's own stack holds its frames and this saved frame only
 * (docs/ACTORS.md, "The system stack").
 *
 * The switch into the target ends in a RET: the return stack buffer's top
 * is this call's own return address, which the target's frame holds too
 * when it suspended through this same call (a ring's actors, each parked
 * in its receive): predicted, and so is every return after it.  Other
 * targets (the scheduler's loop, a task that left through it) continue
 * as correctly, the RET missed once.
 *
 * While fn runs r14 holds save_sp (callee-saved: fn keeps it), and the
 * unwind info finds the caller's frame through it: a backtrace from the
 * system stack goes on into the suspended task's frames.  r12/r13 hold
 * our MXCSR and x87 CW for the compare with the target's.
 */
	.globl	cbcmn__sys_switch
	.hidden	cbcmn__sys_switch
	.type	cbcmn__sys_switch,@function
	.align	16
cbcmn__sys_switch:
	.cfi_startproc
	leaq	-0x38(%rsp), %rsp	/* the frame cbcmn__ctx_jump saves */
	.cfi_adjust_cfa_offset 0x38
	stmxcsr	0x00(%rsp)
	fnstcw	0x04(%rsp)
	movq	%r12, 0x08(%rsp)
	.cfi_rel_offset r12, 0x08
	movq	%r13, 0x10(%rsp)
	.cfi_rel_offset r13, 0x10
	movq	%r14, 0x18(%rsp)
	.cfi_rel_offset r14, 0x18
	movq	%r15, 0x20(%rsp)
	.cfi_rel_offset r15, 0x20
	movq	%rbx, 0x28(%rsp)
	.cfi_rel_offset rbx, 0x28
	movq	%rbp, 0x30(%rsp)
	.cfi_rel_offset rbp, 0x30
	movq	%rsp, (%rdi)		/* *save_sp = our frame: we are suspended */
	movq	%rdi, %r14		/* kept across fn: the unwinder's way back */
	movl	0x00(%rsp), %r12d	/* our MXCSR and CW, to compare */
	movzwl	0x04(%rsp), %r13d
	movq	%rsi, %rsp		/* onto the system stack */
	/* CFA = *r14 + 0x40; each register saved at *r14 + its offset. */
	/* DW_CFA_def_cfa_expression, 5 bytes: DW_OP_breg14 0, DW_OP_deref,
	 * DW_OP_plus_uconst 0x40. */
	.cfi_escape 0x0f, 0x05, 0x7e, 0x00, 0x06, 0x23, 0x40
	.cfi_offset rip, -0x08
	.cfi_offset r12, -0x38
	.cfi_offset r13, -0x30
	.cfi_offset r14, -0x28
	.cfi_offset r15, -0x20
	.cfi_offset rbx, -0x18
	.cfi_offset rbp, -0x10
	movq	%rcx, %rdi
	call	*%rdx			/* rax: the target's frame, rdx: its xfer */
	movq	%rax, %rsp		/* leave the system stack */
	.cfi_def_cfa rsp, 0x40
	cmpl	0x00(%rsp), %r12d	/* same FP control state as the target? */
	jne	1f
	cmpw	0x04(%rsp), %r13w
	jne	1f
2:
	movq	0x08(%rsp), %r12
	movq	0x10(%rsp), %r13
	movq	0x18(%rsp), %r14
	movq	0x20(%rsp), %r15
	movq	0x28(%rsp), %rbx
	movq	0x30(%rsp), %rbp
	movq	%rdx, %rax		/* xfer: the resumed call's result */
	movq	%rdx, %rdi		/* ... or a fresh context's argument */
	leaq	0x38(%rsp), %rsp
	.cfi_adjust_cfa_offset -0x38
	ret
1:
	.cfi_adjust_cfa_offset 0x38
	ldmxcsr	0x00(%rsp)
	fldcw	0x04(%rsp)
	jmp	2b
	.cfi_endproc
	.size	cbcmn__sys_switch,.-cbcmn__sys_switch

/* uint64_t cbcmn__sys_call(void *sys_top, cbcmn__sys_fn *fn,
 *                          uint64_t a, uint64_t b, uint64_t c, uint64_t d,
 *                          uint64_t e);
 *
 * fn(a, b, c, d, e) on the system stack, back on ours when it returns,
 * its result returned (Go's systemstack).  The arguments go in registers,
 * shifted down two (e, the caller's first stack argument, read before
 * the switch): a caller packing them in a struct for fn to read back
 * paid a dozen instructions a send (docs/ACTORS.md, "The system stack").
 * fn must not switch contexts: the system stack is the executor's, and
 * the next block would run over its frames.
 */
	.globl	cbcmn__sys_call
	.hidden	cbcmn__sys_call
	.type	cbcmn__sys_call,@function
	.align	16
cbcmn__sys_call:
	.cfi_startproc
	pushq	%rbp
	.cfi_adjust_cfa_offset 8
	.cfi_rel_offset rbp, 0
	movq	%rsp, %rbp
	.cfi_def_cfa_register rbp
	movq	%rsi, %rax		/* fn */
	movq	%rdi, %rsp		/* onto the system stack */
	movq	%rdx, %rdi		/* a */
	movq	%rcx, %rsi		/* b */
	movq	%r8, %rdx		/* c */
	movq	%r9, %rcx		/* d */
	movq	0x10(%rbp), %r8		/* e, above our return address */
	call	*%rax
	movq	%rbp, %rsp		/* back */
	.cfi_def_cfa_register rsp
	popq	%rbp
	.cfi_adjust_cfa_offset -8
	.cfi_restore rbp
	ret
	.cfi_endproc
	.size	cbcmn__sys_call,.-cbcmn__sys_call

/* void *cbcmn__ctx_make(void *stack_top, void (*entry)(void *xfer));
 *
 * Build a context on a fresh stack that, when jumped to, calls entry(xfer)
 * with the ABI's default FP control state (MXCSR 0x1F80, x87 CW 0x037F) and
 * a correctly aligned stack.  entry must never return: its return address
 * is inside cbcmn__ctx_trap, which aborts.  Returns the context's stack
 * pointer.
 *
 * Layout built below stack_top (rounded down to 16 bytes):
 *   top-0x08  .Ltrap_ret       (entry's return address; entry sees
 *                               rsp % 16 == 8, as after a call)
 *   top-0x10  entry            (the frame's return address slot)
 *   top-0x48  the 0x38-byte frame, GPRs zero
 *
 * Unwinders (gdb, perf, libgcc) find the caller of a frame by looking up
 * return address - 1.  .Ltrap_ret is one byte into cbcmn__ctx_trap, whose
 * unwind info says "no caller" (rip undefined): a backtrace from a fiber
 * ends there, instead of reading the stack's descriptor above as frames.
 */
	.globl	cbcmn__ctx_make
	.hidden	cbcmn__ctx_make
	.type	cbcmn__ctx_make,@function
	.align	16
cbcmn__ctx_make:
	.cfi_startproc
	movq	%rdi, %rax
	andq	$-16, %rax		/* align the top */
	leaq	.Ltrap_ret(%rip), %rcx
	movq	%rcx, -0x08(%rax)	/* where entry would return to */
	movq	%rsi, -0x10(%rax)	/* the jump continues in entry */
	leaq	-0x48(%rax), %rax	/* the saved frame */
	movl	$0x1F80, 0x00(%rax)	/* default MXCSR: all exceptions masked */
	movw	$0x037F, 0x04(%rax)	/* default x87 CW: extended precision, masked */
	movw	$0, 0x06(%rax)
	xorl	%ecx, %ecx
	movq	%rcx, 0x08(%rax)	/* r12..rbp start as zero */
	movq	%rcx, 0x10(%rax)
	movq	%rcx, 0x18(%rax)
	movq	%rcx, 0x20(%rax)
	movq	%rcx, 0x28(%rax)
	movq	%rcx, 0x30(%rax)	/* rbp = 0 ends frame-pointer unwinding */
	ret
	.cfi_endproc
	.size	cbcmn__ctx_make,.-cbcmn__ctx_make

/* The outermost frame of every fiber.  Reached only if an entry function
 * returned: that is a bug in the runtime, not in a task. */
	.globl	cbcmn__ctx_trap
	.hidden	cbcmn__ctx_trap
	.type	cbcmn__ctx_trap,@function
	.align	16
cbcmn__ctx_trap:
	.cfi_startproc
	.cfi_undefined rip		/* no caller: unwinders stop here */
	nop				/* return address - 1 lands on this byte */
.Ltrap_ret:
	andq	$-16, %rsp		/* realign for the call */
	call	abort@PLT
	hlt
	.cfi_endproc
	.size	cbcmn__ctx_trap,.-cbcmn__ctx_trap

/* void cbcmn__ctx_overflow_return(void);
 *
 * Never called: the SIGSEGV handler writes its address over the return
 * address of a C library function that overflowed a fiber's stack
 * (lib/overflow.c).  When that function returns here, with its locks
 * released, the task ends: cbcmn__overflow_unwind jumps to its landing pad.
 * rax/rdx (the function's result) are dropped; rsp is the caller's.
 *
 * The unwinder may meet this address before the call returns (a C++ throw
 * out of the call, a forced unwind, a backtrace) and read it as a frame with
 * no caller, where a throw would find no catch and std::terminate would
 * abort the process: so the frame has a personality
 * (cbcmn__overflow_personality) that catches whatever unwinds to it and
 * ends the task the same way.  The nop puts (return address - 1), which the
 * unwinder looks up, inside the frame.
 */
	.globl	cbcmn__ctx_overflow_return
	.hidden	cbcmn__ctx_overflow_return
	.type	cbcmn__ctx_overflow_return,@function
	.p2align 4
	.cfi_startproc
	.cfi_personality 0x9b, .Loverflow_personality_ref /* pcrel|sdata4|indirect: PIE and .so */
	.cfi_undefined rip		/* no caller: unwinders stop here */
	nop				/* return address - 1 lands on this byte */
cbcmn__ctx_overflow_return:
	andq	$-16, %rsp		/* aligned for the call, whatever happened */
	call	cbcmn__overflow_unwind	/* does not return */
	hlt
	.cfi_endproc
	.size	cbcmn__ctx_overflow_return,.-cbcmn__ctx_overflow_return

	.section .data.rel.ro,"aw"
	.p2align 3
.Loverflow_personality_ref:
	.quad	cbcmn__overflow_personality
	.text

	.section .note.GNU-stack,"",%progbits
