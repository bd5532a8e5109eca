/* overflow.c: leaving a fiber stack overflow cleanly.
 *
 * A fault in the guard region below the current task's stack is an
 * overflow (signal.c catches it); the task must end (CBCMN_EPANIC) at its
 * landing pad, a frame above the overflow (cbcmn__task_call_guarded,
 * sched.c).  Jumping there abandons every frame in between, which is only
 * safe if none of them holds a lock.  So the frames are walked with the
 * unwinder first:
 *
 *   - all of them are the program's own code: jump now;
 *   - some belong to the C library (or the loader, libgcc_s, libstdc++, a
 *     sanitizer runtime), which take process-wide locks (stdio, malloc, the
 *     loader): open the stack's yellow zone (stack.h) so that the library
 *     call can finish, and replace the return address of the outermost such
 *     frame with cbcmn__ctx_overflow_return, which ends the task as soon as
 *     the library has returned and released what it held;
 *   - the yellow zone is already spent, or the frames cannot be walked:
 *     jump anyway and say that a lock may stay held.
 *
 * At the landing pad the signal mask of the executor and the FP control
 * state the task started with come back (the kernel gave the handler a
 * fresh FP state, and a user handler the task overflowed in left its mask),
 * and the nurseries the task left open are cancelled and awaited.
 * Everything up to the jump runs in the SIGSEGV handler: async-signal-safe.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

#include "arch.h"
#include "overflow.h"
#include "probes.h"
#include "runtime.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#endif

/* ---- the executor's signal mask ----------------------------------------------- */

/* The executor thread's own signal mask, given back at the landing pad. */
static __thread sigset_t base_mask;
static __thread bool have_base_mask;
__thread void **cbcmn__halt_pad;

void cbcmn__overflow_thread_start(void)
{
	pthread_sigmask(SIG_BLOCK, NULL, &base_mask);
	have_base_mask = true;
}

void cbcmn__overflow_thread_end(void)
{
	have_base_mask = false;
}

/* ---- one line on stderr, async-signal-safe --------------------------------- */

struct line {
	char buf[320];
	size_t n;
};

static void put_s(struct line *l, const char *s)
{
	while (*s && l->n < sizeof(l->buf) - 1)
		l->buf[l->n++] = *s++;
}

static void put_u(struct line *l, uint64_t v)
{
	char tmp[24];
	int n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		put_s(l, (char[2]){tmp[--n], 0});
}

/* "cbcmn: task <id> <what> its <size>-byte stack <where><lib><then>" */
static void say(const struct cbcmn_task *t, const char *what, const char *where, const char *lib,
		const char *then)
{
	struct line l = {.n = 0};
	/* Landing in an actor's halt ends the drop or fini that ran there,
	 * and the halt goes on: "it" below is that callback, not the task
	 * (a handler's host, or the task that ran the halt), which said it
	 * ended when it did not. */
	put_s(&l, t->landing && t->landing == cbcmn__halt_pad ? "cbcmn: an actor's drop or fini on task "
							      : "cbcmn: task ");
	put_u(&l, t->id);
	put_s(&l, what);
	/* The size the user configured, which is what they can change. */
	put_u(&l, t->rt->cfg.stack_size);
	put_s(&l, "-byte stack ");
	put_s(&l, where);
	if (lib)
		put_s(&l, lib);
	put_s(&l, then);
	put_s(&l, "\n");
	ssize_t rc = write(STDERR_FILENO, l.buf, l.n);
	(void)rc;
}

#define OVERFLOWED " overflowed its "

/* ---- which code may hold a lock we cannot see ------------------------------ */

/* Libraries whose functions take process-wide locks (stdio, malloc, the
 * loader's, the unwinder's, locale, NSS) or run with them held. */
static const char *const lock_holders[] = {
	"libc.so",     "ld-linux",  "libpthread.so", "libdl.so",   "librt.so",
	"libm.so",     "libresolv", "libnss_",       "libgcc_s.so", "libstdc++.so",
	"libasan.so",  "libtsan.so", "libubsan.so",  "liblsan.so",
};

static bool has_prefix(const char *s, const char *p)
{
	while (*p)
		if (*s++ != *p++)
			return false;
	return true;
}

/* The basename of the library pc is in, if it is one of those; else NULL.
 * _dl_find_object is async-signal-safe and takes no lock (glibc 2.35). */
static const char *lock_holder_at(uintptr_t pc)
{
#ifdef DLFO_EH_SEGMENT_TYPE
	struct dl_find_object fo;
	if (_dl_find_object((void *)pc, &fo) != 0 || !fo.dlfo_link_map)
		return NULL;
	const char *name = fo.dlfo_link_map->l_name, *base = name;
	if (!name)
		return NULL;
	for (const char *c = name; *c; c++)
		if (*c == '/')
			base = c + 1;
	for (size_t i = 0; i < sizeof(lock_holders) / sizeof(lock_holders[0]); i++)
		if (has_prefix(base, lock_holders[i]))
			return base;
#else
	(void)pc; /* no lock-free lookup: every frame counts as the program's */
#endif
	return NULL;
}

/* ---- the frames between the fault and the landing pad ---------------------- */

/* libgcc's callback sees each frame with the stack pointer it had at its
 * call (_Unwind_GetCFA: the canonical frame address of the frame it
 * called), so a callee's return slot is found from its caller's entry. */
struct walk {
	uintptr_t pc;             /* the faulting instruction */
	uintptr_t landing;        /* the landing pad's jmp buffer, in its frame */
	bool started;
	unsigned frames;
	uintptr_t last_sp;
	/* Whether the last frame seen holds locks; whether it was a signal
	 * trampoline (which holds nothing) shows only at its caller, which
	 * the signal interrupted. */
	const char *prev_lib;
	/* The outermost lock holder's caller (its sp), trampolines aside. */
	uintptr_t outer_sp;
	const char *outer_lib;
	/* The outermost return from a lock holder into the program: its slot
	 * (below the caller's sp) and the address it holds. */
	uintptr_t *slot;
	uintptr_t slot_sp, slot_ra;
	/* The walk got to the landing pad's frame: it saw every frame. */
	bool reached;
};

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg)
{
	struct walk *w = arg;
	int interrupted = 0;
	uintptr_t ip = _Unwind_GetIPInfo(ctx, &interrupted);
	uintptr_t sp = _Unwind_GetCFA(ctx);
	if (!w->started) {
		/* Our own frames and our signal's trampoline come first. */
		if (!interrupted || ip != w->pc)
			return _URC_NO_REASON;
		w->started = true;
		w->prev_lib = NULL;
		w->last_sp = sp;
	} else if (sp < w->last_sp || ++w->frames > (1u << 16)) {
		return _URC_END_OF_STACK; /* unwind info we cannot trust */
	}
	w->last_sp = sp;
	/* A return address may be the byte after a call that ends its
	 * function: look up the call. */
	const char *lib = lock_holder_at(interrupted ? ip : ip - 1);
	if (w->prev_lib && !interrupted) {
		w->outer_sp = sp;
		w->outer_lib = w->prev_lib;
		if (!lib) {
			w->slot = CBCMN__RA_SLOT(sp);
			w->slot_sp = sp;
			w->slot_ra = ip;
		}
	}
	w->prev_lib = lib;
	/* Past the landing pad's jmp buffer: this is its frame or above. */
	if (sp > w->landing) {
		w->reached = true;
		return _URC_END_OF_STACK;
	}
	return _URC_NO_REASON;
}

/* ---- the unwinder's own lock ----------------------------------------------- */

/* Where libgcc_s's code lies.  The unwinder's FDE lookup takes libgcc's
 * object_mutex (not recursive) whenever some code registered frames
 * (__register_frame_info: a JIT's, a program's own): an overflow while
 * this thread holds it (a throw or backtrace whose first lookup sorts a
 * registered object) would hang the walk below in the handler for ever.
 * Found at the first runtime start (dl_iterate_phdr, not in the
 * handler); relaxed: written before any executor exists. */
static uintptr_t unwinder_lo, unwinder_hi;

static int find_unwinder(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	const char *name = info->dlpi_name, *base = name;
	if (!name)
		return 0;
	for (const char *c = name; *c; c++)
		if (*c == '/')
			base = c + 1;
	if (!has_prefix(base, "libgcc_s.so"))
		return 0;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		if (a < lo)
			lo = a;
		if (a + ph->p_memsz > hi)
			hi = a + ph->p_memsz;
	}
	if (lo < hi) {
		__atomic_store_n(&unwinder_lo, lo, __ATOMIC_RELAXED);
		__atomic_store_n(&unwinder_hi, hi, __ATOMIC_RELAXED);
	}
	return 1;
}

/* Whether a word between the faulting sp and the landing pad is a return
 * address into libgcc_s: the unwinder may be running there, holding its
 * lock.  (A stale word left by an earlier call only costs the finer
 * handling below.)  An unwinder linked into the program (-static-libgcc)
 * is not seen: its code is the program's. */
__attribute__((no_sanitize_address)) /* reads the redzones between frames too */
static bool unwinder_on_stack(const struct cbcmn__stack *s, uintptr_t sp, uintptr_t landing)
{
	uintptr_t lo = __atomic_load_n(&unwinder_lo, __ATOMIC_RELAXED);
	uintptr_t hi = __atomic_load_n(&unwinder_hi, __ATOMIC_RELAXED);
	/* Readable from here: lo, or the yellow zone's bottom once open. */
	uintptr_t from = (uintptr_t)(s->yellow_open ? cbcmn__stack_yellow_lo(s) : s->lo);
	if (lo >= hi || sp > landing)
		return false;
	if (sp > from)
		from = sp;
	for (const uintptr_t *w = (const uintptr_t *)((from + 7) & ~(uintptr_t)7);
	     (uintptr_t)w < landing; w++)
		if (*w - lo < hi - lo)
			return true;
	return false;
}

/* Set while this thread walks: a stack smashed below the overflow can send
 * the unwinder to a wild address, and that fault ends the walk instead of
 * the process. */
static __thread void **walking;

void cbcmn__overflow_walk_fault(void)
{
	if (walking) {
		void **jb = walking;
		walking = NULL;
		__builtin_longjmp(jb, 1);
	}
}

static _Unwind_Reason_Code walk_nothing(struct _Unwind_Context *ctx, void *arg)
{
	(void)ctx;
	(void)arg;
	return _URC_END_OF_STACK;
}

/* Whether the CPU's user shadow stack (CET) is on for this process
 * (glibc 2.39+ turns it on at start for a program whose every object is
 * marked for it; the context switch's asm is not, so a program linked
 * with this library is not, unless forced with -z shstk).  Read once at
 * each runtime start; written before any executor exists, read by them. */
static bool shadow_stack;

#define ARCH_SHSTK_STATUS_ 0x5005 /* Linux 6.6, asm/prctl.h */
#define ARCH_SHSTK_SHSTK_ (1ul << 0)

void cbcmn__overflow_init(void)
{
	/* The unwinder sets itself up on first use (a pthread_once): not in
	 * the handler. */
	_Unwind_Backtrace(walk_nothing, NULL);
	/* Once: an overflow that left the loader's lock held (documented)
	 * must not hang the next runtime's start here. */
	static bool unwinder_looked_up; /* under signal.c's install_lock */
	if (!unwinder_looked_up) {
		unwinder_looked_up = true;
		dl_iterate_phdr(find_unwinder, NULL);
	}
	unsigned long features = 0;
	if (syscall(SYS_arch_prctl, ARCH_SHSTK_STATUS_, &features) == 0)
		shadow_stack = (features & ARCH_SHSTK_SHSTK_) != 0;
}

/* ---- ending the task ------------------------------------------------------- */

/* The frame of the replaced return address (cbcmn__ctx_overflow_return,
 * asm/) names this personality: it catches whatever unwinds to it. */
_Unwind_Reason_Code cbcmn__overflow_personality(int version, _Unwind_Action actions,
						 _Unwind_Exception_Class cls,
						 struct _Unwind_Exception *exc,
						 struct _Unwind_Context *ctx);

/* The exception the frame caught, freed once the task has landed. */
static __thread struct _Unwind_Exception *caught;

_Unwind_Reason_Code cbcmn__overflow_personality(int version, _Unwind_Action actions,
						 _Unwind_Exception_Class cls,
						 struct _Unwind_Exception *exc,
						 struct _Unwind_Context *ctx)
{
	(void)version;
	(void)cls;
	if (actions & _UA_SEARCH_PHASE)
		return _URC_HANDLER_FOUND;
	/* A forced unwind (a thread's cancellation) owns its exception: it
	 * is not ours to delete. */
	caught = (actions & _UA_FORCE_UNWIND) ? NULL : exc;
	/* With rsp at this frame's CFA, the caller's sp: as after the return. */
	_Unwind_SetIP(ctx, (uintptr_t)cbcmn__ctx_overflow_return);
	return _URC_INSTALL_CONTEXT;
}

__attribute__((noreturn)) static void land(struct cbcmn_task *t)
{
	CBCMN_PROBE3(task_panic, t->id, t->rt->cfg.stack_size, t->rt->seg.rt_id);
	t->unwind_result = CBCMN_EPANIC;
	__builtin_longjmp(t->landing, 1);
}

int cbcmn__task_yellow_open(struct cbcmn_task *t)
{
	int rc = cbcmn__stack_yellow_open(t->stack);
	if (rc != 0)
		return rc;
	/* Its bound is now the top: no stack_room of t's, nor of the tasks
	 * t runs inline under, which share the stack and resume on it. */
	for (struct cbcmn_task *x = t; x; x = x->inline_parent)
		cbcmn__stack_room_clear(x);
	return 0;
}

__attribute__((noinline)) void cbcmn__stack_room_refresh(struct cbcmn_task *t)
{
	struct cbcmn__stack *s = t->stack;
	const char *f = __builtin_frame_address(0); /* on the caller's stack */
	/* Only from a frame on t's own stack, so on its own thread (where
	 * the SIGSEGV handler clears it); a task on a borrowed stack (run
	 * inline) keeps asking the descriptor. */
	if (t->inline_parent || f < s->guard_lo || f >= (const char *)s)
		return;
	t->stack_room = cbcmn__stack_room_of(s);
	/* The handler may have opened the yellow zone after the read. */
	atomic_signal_fence(memory_order_seq_cst);
	if (s->yellow_open)
		cbcmn__stack_room_clear(t);
}

void cbcmn__overflow(struct cbcmn_task *t, const void *addr, ucontext_t *uc)
{
	struct cbcmn__stack *s = t->stack;
	struct walk w = {.pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP],
			 .landing = (uintptr_t)t->landing};
	void *jb[5];
	/* The unwinder may hold its lock here: no walk.  The code goes on in
	 * the yellow zone, where the unwinder finishes and lets go of it, and
	 * the task ends at its next runtime call (check_lo) or when its
	 * function returns (sched.c): no return address is replaced, which
	 * would need the walk. */
	if (unwinder_on_stack(s, (uintptr_t)uc->uc_mcontext.gregs[REG_RSP], w.landing)) {
		if (!s->yellow_open && !cbcmn__stack_in_red(s, addr) &&
		    cbcmn__task_yellow_open(t) == 0) {
			say(t, OVERFLOWED, "under ", "libgcc_s (the unwinder)",
			    "; it goes on in the stack's reserve and ends with "
			    "CBCMN_EPANIC at its next runtime call or when its function returns");
			return;
		}
		say(t, OVERFLOWED, "under ", "libgcc_s (the unwinder)",
		    " with no room left for it to finish; it ends with CBCMN_EPANIC, and the "
		    "unwinder's lock may stay held");
		land(t);
	}
	if (__builtin_setjmp(jb) == 0) {
		walking = jb;
		_Unwind_Backtrace(walk_frame, &w);
	} else {
		walking = NULL;
		say(t, OVERFLOWED, "(guard page hit), over frames the unwinder could not read", NULL,
		    "; it ends with CBCMN_EPANIC, and a lock a library held there may stay held");
		land(t);
	}
	walking = NULL;
	if (!w.started) /* the unwinder could not get past our signal: the pc alone */
		w.prev_lib = lock_holder_at(w.pc);
	if (w.prev_lib) { /* the walk ended in a lock holder: nothing covers it */
		w.outer_lib = w.prev_lib;
		w.outer_sp = UINTPTR_MAX;
	}
	if (!w.outer_lib) {
		/* A frame without unwind info (-fno-asynchronous-unwind-tables,
		 * hand-written assembly) ends the walk: a library call above
		 * it (vfprintf running a fopencookie function) is not seen. */
		say(t, OVERFLOWED, "(guard page hit)",
		    w.reached ? NULL : ", over frames the unwinder could not read",
		    w.reached ? "; it ends with CBCMN_EPANIC"
			      : "; it ends with CBCMN_EPANIC, and a lock a library held there may "
				"stay held");
		land(t);
	}
	/* With the CPU's shadow stack on, a replaced return address is a
	 * control-protection fault (SIGSEGV, SEGV_CPERR): no reserve. */
	if (shadow_stack) {
		say(t, OVERFLOWED, "inside ", w.outer_lib,
		    " with shadow stacks on, which forbid finishing the call; it ends with "
		    "CBCMN_EPANIC, and a lock that library held may stay held");
		land(t);
	}
	/* A lock holder runs, or waits for code it called.  Let it finish
	 * in the yellow zone if the return into the program covers every
	 * holder's frame and really is where the slot points. */
	if (!s->yellow_open && !cbcmn__stack_in_red(s, addr) && w.slot &&
	    w.slot_sp >= w.outer_sp && *w.slot == w.slot_ra &&
	    cbcmn__task_yellow_open(t) == 0) {
		*w.slot = (uintptr_t)cbcmn__ctx_overflow_return;
		say(t, OVERFLOWED, "inside ", w.outer_lib,
		    "; the call finishes in the stack's reserve, then it ends with "
		    "CBCMN_EPANIC");
		return;
	}
	say(t, OVERFLOWED, "inside ", w.outer_lib,
	    " with no room left for the call to finish; it ends with CBCMN_EPANIC, and a "
	    "lock that library held may stay held");
	land(t);
}

/* The executor's system stack (sched.c) holds runtime code alone, a
 * block's publication and pick, a send's put: nothing there can end
 * cleanly, so the fault goes on to kill the process (signal.c), but with
 * a line that says which stack ran out rather than a bare SIGSEGV. */
bool cbcmn__overflow_sys(const struct cbcmn__exec *e, const void *addr)
{
	size_t pg = e->rt->page; /* not sysconf(): not async-signal-safe by POSIX */
	if (!e->sys_stack || (const char *)addr < e->sys_stack ||
	    (const char *)addr >= e->sys_stack + pg)
		return false;
	struct line l = {.n = 0};
	put_s(&l, "cbcmn: executor ");
	put_u(&l, e->id);
	put_s(&l, OVERFLOWED);
	put_u(&l, e->sys_stack_size - pg);
	put_s(&l, "-byte system stack (guard page hit) running the runtime's part of an "
		  "actor's block or send; the process ends\n");
	ssize_t rc = write(STDERR_FILENO, l.buf, l.n);
	(void)rc;
	return true;
}

/* cbcmn__ctx_overflow_return comes here once the library call that overflowed
 * has returned, or an unwind has reached where it would return. */
__attribute__((noreturn)) void cbcmn__overflow_unwind(void)
{
	if (caught) {
		struct _Unwind_Exception *exc = caught;
		caught = NULL;
		_Unwind_DeleteException(exc);
	}
	land(cbcmn__tls_exec->current);
}

/* cbcmn__stack_exhausted() left its line for the landing pad:
 * the frame that called it may lie below the guard (one big frame steps
 * over it), in the next stack's memory, and the line's frames went there
 * too: 616 bytes written there, 152 without them (session 17). */
static __thread bool unsaid;

void cbcmn__stack_exhausted(struct cbcmn_task *t)
{
	/* After an overflow in a library the line was said already. */
	if (!t->stack->yellow_open)
		unsaid = true;
	land(t);
}

/* Not inline: its frame is the bound below (the pad's caller's next). */
__attribute__((noinline)) void cbcmn__overflow_landed_frame(struct cbcmn_task *t, uint64_t fpcw)
{
	if (unsaid) { /* t: the jump from there came here */
		unsaid = false;
		say(t, " is about to overflow its ", "(in a runtime call)", NULL,
		    "; it ends with CBCMN_EPANIC");
	}
#ifdef __SANITIZE_ADDRESS__
	/* The abandoned frames below the landing pad keep their poisoned
	 * redzones in ASan's shadow; clear them for the frames to come:
	 * all below this call's frame, which lies under the pad's (with
	 * cbcmn__overflow_landed()'s between, or none).
	 * Not below the pad's jump buffer: with detect_stack_use_after_return
	 * that is on a fake stack, no address of t's (an ASan CHECK failed
	 * on the range from guard_lo to it: test_sysstack_uar). */
	char *lo = t->stack->guard_lo;
	__asan_unpoison_memory_region(lo, (size_t)((char *)__builtin_frame_address(0) - lo));
#endif
	/* Nothing runs below the landing pad any more. */
	cbcmn__stack_yellow_close(t->stack);
	/* We left the SIGSEGV handler (or a handler of the program's that
	 * overflowed) by a jump, not by sigreturn: its mask is still on. */
	if (have_base_mask)
		pthread_sigmask(SIG_SETMASK, &base_mask, NULL);
	cbcmn__fpcw_write(fpcw);
}

void cbcmn__overflow_landed(struct cbcmn_task *t, uint64_t fpcw)
{
	cbcmn__overflow_landed_frame(t, fpcw);
	/* The nurseries it left open are cancelled and awaited here (they
	 * cannot outlive it; their children that never started do not run).
	 * The task passed a stack check when it opened them, a few frames
	 * below this one; the await's check, a few frames below, could fail
	 * where that one passed, and land here again, for ever. */
	cbcmn__stack_check_relax(t->stack);
	cbcmn__nursery_close_all(t);
	cbcmn__stack_check_reset(t->stack);
	cbcmn__stack_room_clear(t); /* the bound went up again */
}
