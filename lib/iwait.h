/* iwait.h: private to libcbcmn: blocking waits that cancellation interrupts.
 *
 * A task blocked on a channel (or, later, on I/O) must wake up when its
 * nursery, or one enclosing it, is cancelled.  Each executor keeps a
 * registry of such waits; cancelling a nursery scans the registries and
 * claims every wait whose task is now cancelled.  A wait is claimed exactly
 * once, by its event (the object it waits on) or by cancellation, with one
 * CAS on its state; the loser does nothing.
 *
 * How a blocking operation uses it (the object's own lock is "objlock"):
 *
 *	lock(objlock);
 *	...nothing available...
 *	cbcmn__iwait_init(&iw, self);        // state WAITING, task PARKING
 *	enqueue &iw on the object;
 *	unlock(objlock);
 *	if (cbcmn__iwait_block(&iw) == IW_CANCELLED) {
 *		lock(objlock); dequeue &iw if still queued; unlock(objlock);
 *		return CBCMN_ECANCELED;
 *	}
 *	... the event's side filled in what we waited for ...
 *
 * and the event's side, under objlock, for each queued wait:
 *
 *	if (cbcmn__iwait_claim(iw)) { hand over; dequeue; cbcmn__iwait_wake(iw, e); }
 *	else { dequeue and skip: cancellation owns it }
 *
 * Lock order: the registry lock is never held with an object's lock.
 *
 * Waits for I/O are the executor's own: the request (or the multishot
 * stream) is listed on the executor it was issued on, the task cannot leave
 * it meanwhile, and only that executor's thread ends the wait.  Such a wait
 * is marked local and stays out of the registry lock: cancellation hands
 * the executor the cells (below) that hold its cancelled I/O waits, and the
 * executor ends them (cbcmn__io_cancel_pending()).  That saves the registry
 * lock twice per I/O call, which is most of the runtime's own cost per
 * request on a busy socket.
 *
 * Finding the waits a cancellation interrupts, in time proportional to
 * what it cancels (issue 15): each nursery whose tasks block gets a cancel
 * scope, made when the first of them blocks and linked under its parent
 * nursery's scope (made first), so that the scopes form the tree of the
 * nurseries that have had waits.  A scope has one cell per executor, on a
 * cache line of its own, holding the waits its tasks block in there:
 *   - registry waits (channels, timers, budget, blocking pool, actors), in
 *     a list under that executor's registry lock, as before;
 *   - local (I/O) waits, in a list only that executor's thread touches:
 *     linked as the task blocks (on that thread), unlinked by the wake
 *     (cbcmn__iwait_wake(), always on that thread).  An I/O call still
 *     takes no lock.
 * Cancelling nursery n walks n's subtree of scopes under rt->scope_lock,
 * skipping subtrees whose nursery is cancelled already (their canceller
 * did or does that part): it claims the registry waits itself, and pushes
 * each cell with local waits on its executor's stack (cancel_cells) and
 * flags that executor (io_cancel), which then looks at those cells' waits
 * only.  A cell is pushed at most once until popped, holding a reference
 * on its scope; a scope goes when its nursery ends and no cell of it is
 * pushed.  A cell's `used` bits say which of its lists ever held a wait:
 * set once, with a fence that pairs with the canceller's, so either the
 * canceller sees the cell used or the task sees the cancellation as it
 * registers (cbcmn__iwait_block()); a canceller skips cells never used.
 * Scopes no allocation could make: their waits go to rt->scope_fallback,
 * which every cancellation visits, checking each wait's task.
 *
 * Registry waits without the registry lock (issue 15: the lock, taken as
 * a task blocked and again as it left, was 15 % of a blocking channel
 * round trip).  A task run by cbcmn__task_call_guarded() has a node
 * (struct cbcmn__iwnode) in that frame, alive as long as the task runs.
 * The node, not the wait, is listed in a cell (under the registry lock),
 * and stays listed from one wait to the next while the task blocks in the
 * same scope on the same executor: each wait then only publishes itself
 * in the node's `cur` and takes it back, without the lock.  The node
 * leaves its cell when the task blocks elsewhere or ends.  Two
 * store-then-load pairs make that safe, a full fence on each side:
 *   - publish: the task stores cur, then reads its cancellation; the
 *     canceller sets the flag, then reads cur under the registry lock.
 *     One of them sees the other (as with cell_use()).
 *   - take back: the task stores NULL in cur, then reads
 *     rt->iw_scanning; a canceller counts itself there before it reads
 *     any cur.  A task that sees a canceller passes through the registry
 *     lock the canceller holds while it touches the wait, so the wait
 *     (on the task's stack) outlives the canceller's use of it.
 * A lasting wait (cbcmn__iwait_keep(): the actor receive's, in the frame
 * above the node's) is taken back without the fence: a canceller that read it in
 * cur may still hold it once the task runs on, and that is harmless:
 *   - it is there: the canceller holds the registry lock of the node's
 *     cell, and the node leaves that cell (node_unlink(), a relink or the
 *     task's end, before the frames holding node and record go) only
 *     through it;
 *   - it reads nothing the task rewrites: w.task and on_cancel (NULL) are
 *     set once per run, the state is atomic;
 *   - it claims only a wait of a cancelled task (reg_cancel() checks,
 *     and a task's cancellation is never withdrawn while it can wait
 *     there: a stopped supervisor clears its stop flag (actor_sup.c,
 *     stop_seen()), but its mailbox stays closed and its receives
 *     re-arm no more), and only one in WAITING, which the task sets
 *     (cbcmn__iwait_rearm()) once committed to block, under the object's
 *     lock: so its claim is what any canceller would do to that later
 *     wait, which the event's side then finds claimed (it claims with a
 *     CAS too);
 *   - its wake is taken: the re-arm makes the task PARKING before the
 *     wait WAITING (release), so a claim that reads WAITING finds the
 *     task parking, not running (a wake cbcmn__wake_task() drops).
 */
#ifndef CBCMN_IWAIT_H
#define CBCMN_IWAIT_H

#include "runtime.h"

enum { CBCMN__IW_WAITING = 0, CBCMN__IW_WOKEN, CBCMN__IW_CANCELLED, CBCMN__IW_TIMEDOUT };

/* Room for a lasting wait record (a struct cbcmn__mb_wait, actor_mbox.c,
 * which checks that it fits). */
#define CBCMN__IWAIT_KEEP 160

struct cbcmn__iwait {
	/* First the callbacks, set once per wait, which neither its wake
	 * nor a re-arm touches; from w on, what they do: a record that
	 * embeds an iwait first can place w at a line's start and keep its
	 * hot part apart from the cold head (cbcmn__iwkeep, below, does).
	 *
	 * Set when the waker must not be woken by cancellation itself (I/O in
	 * flight): cancellation claims the wait and calls this instead (the
	 * canceller under the registry lock, so the wait is still there; or
	 * the task itself, when it finds itself cancelled as it registers);
	 * the event's side then wakes the task, which sees
	 * CBCMN__IW_CANCELLED.  It must take no lock.  A local wait's is
	 * called by the task itself only (its executor claims local waits
	 * with cbcmn__iwait_local_cancel() and calls nothing), on its
	 * executor's thread: it may use that executor's ring (io.c turns the
	 * request's queued SQE into a NOP there). */
	void (*on_cancel)(struct cbcmn__iwait *iw);
	/* Set when a timer (timer.h) claims the wait: called instead of the
	 * wake, on the timer's executor, which must be the wait's (the epoll
	 * backend's I/O waits: it unlinks the wait, then wakes it). */
	void (*on_timeout)(struct cbcmn__iwait *iw);
	/* A local wait's end by cancellation, on its executor's thread, once
	 * the wait is claimed CANCELLED (cbcmn__iwait_local_cancel()): cancel
	 * the request in the kernel, or wake the task.  True if it queued an
	 * SQE to submit.  NULL: the wait is listed nowhere, and cancellation
	 * never ends it (a stream's close waits for its last CQE).  Set after
	 * cbcmn__iwait_init(), with local. */
	bool (*local_end)(struct cbcmn__exec *e, struct cbcmn__iwait *iw);
	struct cbcmn__waiter w;
	_Atomic uint32_t state;
	/* An I/O wait: listed by its executor, not in the registry (above).
	 * Set after cbcmn__iwait_init(), with on_cancel. */
	bool local;
	/* Published in its task's node (see above) instead of the registry. */
	bool noded;
	/* Kept in its task's node (cbcmn__iwait_keep()) across its waits:
	 * taken back from the node without the fence (see above). */
	bool lasting;
	/* What the task waits for (CBCMN__G_*, diag.h), for the snapshot;
	 * set after cbcmn__iwait_init().  A local wait counts as I/O. */
	uint8_t kind;
	struct cbcmn__iwait *prev, *next; /* its cell's list (registry or local) */
	struct cbcmn__iwait_reg *reg;     /* registered: whose registry lock */
	struct cbcmn__wcell *cell;        /* listed: in which cell */
	void *user;                       /* for the object's queue */
	struct cbcmn__iwait *qnext;       /* ... likewise */
};

/* A task's registry waits, published one at a time (see above): in
 * cbcmn__task_call_guarded()'s frame, the task's for its run. */
struct cbcmn__iwnode {
	_Atomic(struct cbcmn__iwait *) cur; /* the wait it blocks in, or NULL */
	struct cbcmn__iwnode *prev, *next;  /* its cell's nodes: the cell's registry lock */
	struct cbcmn__wcell *cell;          /* listed there (its task writes it, under that lock) */
	struct cbcmn__iwait_reg *reg;       /* ... whose lock is this */
	/* Room for one lasting wait record (cbcmn__iwait_keep(): the actor
	 * receive's), in cbcmn__iwait_call_keeping()'s frame; or NULL. */
	unsigned char *keep;
	bool keep_used;
};

/* One scope's waits on one executor (see above). */
struct cbcmn__wcell {
	struct cbcmn__iwait *reg;         /* registry waits: the executor's registry lock */
	struct cbcmn__iwnode *nodes;      /* nodes of tasks that blocked here: the same lock */
	struct cbcmn__iwait *local;       /* local waits: the executor's thread only */
	struct cbcmn__wcell *qnext;       /* on the executor's cancel_cells */
	struct cbcmn__scope *scope;
	_Atomic uint32_t queued;          /* on cancel_cells, not yet popped */
	_Atomic uint32_t used;            /* CBCMN__CELL_* lists that ever held a wait */
} __attribute__((aligned(CBCMN__CACHELINE)));
enum { CBCMN__CELL_REG = 1, CBCMN__CELL_LOCAL = 2 };

/* A nursery's cancel scope (see above).  The tree links are rt->scope_lock's. */
struct cbcmn__scope {
	struct cbcmn_nursery *n;          /* NULL: rt->scope_fallback */
	struct cbcmn__scope *parent, *child, *prev, *next;
	_Atomic uint32_t refs;            /* its nursery's, and one per pushed cell */
	uint32_t ncell;
	struct cbcmn__wcell cell[];       /* one per executor */
};

/* runtime.c: the lock and the fallback scope (-ENOMEM); the end of an
 * executor's pushed cells, and of those, once no thread runs. */
int cbcmn__scope_rt_init(struct cbcmn_runtime *rt, uint32_t nexec);
void cbcmn__scope_exec_fini(struct cbcmn__exec *e);
void cbcmn__scope_rt_fini(struct cbcmn_runtime *rt);
/* nursery.c: n's await_all is over, nothing of it blocks any more: its
 * scope leaves the tree, and goes once no executor holds a cell of it. */
void cbcmn__scope_drop(struct cbcmn_nursery *n);

/* Run actor task t guarded (cbcmn__task_call_guarded()) with room for a
 * lasting wait record in this frame, above the guarded call's: intact
 * when an overflow lands there, and alive until the node has left its
 * cell (cbcmn__iwait_node_end()), so past any canceller that holds it. */
int64_t cbcmn__iwait_call_keeping(struct cbcmn_task *t);
/* What cbcmn__iwait_call_keeping()'s frame holds for the run: the room
 * for the receive's record and the node itself (in place of the guarded
 * frame's), in four lines from a line's start.  The room begins where
 * the record's waiter (w) falls at the second line's start: what a hop
 * touches of the record, from w to the mailbox's fields after the iwait
 * (actor_mbox.c checks it), fills the second and third lines, its cold
 * head (the iwait's callbacks) ends the first, and the node (56 bytes)
 * is in the fourth: three lines a hop, where the node in the first line
 * and the record in the next three took four (docs/ACTORS.md, "The
 * receive record's lines"), and unaligned and apart five or six.  Only
 * an actor's fiber pays the alignment: a node in every guarded frame,
 * inline children's too, aligned, overflowed 48 nested ones under ASan
 * (test_cancelscope). */
#define CBCMN__IWAIT_KEEP_LEAD (CBCMN__CACHELINE - offsetof(struct cbcmn__iwait, w))
struct cbcmn__iwkeep {
	unsigned char lead[CBCMN__IWAIT_KEEP_LEAD];
	_Alignas(8) unsigned char room[CBCMN__IWAIT_KEEP];
	struct cbcmn__iwnode nd;
} __attribute__((aligned(CBCMN__CACHELINE)));
_Static_assert(offsetof(struct cbcmn__iwkeep, room) + offsetof(struct cbcmn__iwait, w) ==
			       CBCMN__CACHELINE &&
		       offsetof(struct cbcmn__iwkeep, nd) >= 3 * CBCMN__CACHELINE &&
		       sizeof(struct cbcmn__iwkeep) == 4 * CBCMN__CACHELINE,
	       "struct cbcmn__iwkeep: the record's waiter begins line 1, the node is in line 3");
/* That frame's, from cbcmn__iwait_call_keeping() to the node it begins. */
extern __thread struct cbcmn__iwkeep *cbcmn__iw_keep_next;

/* cbcmn__task_call_guarded(): task t's node is nd (that frame's), or the
 * one cbcmn__iwait_call_keeping() holds for it, from now on, until
 * cbcmn__iwait_node_end(t), before the frame that holds it returns. */
static inline void cbcmn__iwait_node_begin(struct cbcmn_task *t, struct cbcmn__iwnode *nd)
{
	struct cbcmn__iwkeep *k = cbcmn__iw_keep_next; /* the frame above ours, if any */
	cbcmn__iw_keep_next = NULL;                    /* not an inline child's */
	if (k)
		nd = &k->nd;
	atomic_init(&nd->cur, NULL);
	nd->cell = NULL;
	nd->reg = NULL;
	nd->keep = k ? k->room : NULL;
	nd->keep_used = false;
	t->iwn = nd;
}
void cbcmn__iwait_node_end(struct cbcmn_task *t);

/* The lasting wait record of task t's run (CBCMN__IWAIT_KEEP bytes, one
 * user: the actor receive), or NULL if t has no node or no room (not run
 * by cbcmn__iwait_call_keeping(): the caller then waits on its stack).  *fresh: its first use in this run, which sets it
 * up with cbcmn__iwait_init() and marks it lasting; each later wait
 * re-arms it with cbcmn__iwait_rearm().  Its w.task and on_cancel never
 * change in the run: a canceller may still read them (see above). */
static inline void *cbcmn__iwait_keep(struct cbcmn_task *t, bool *fresh)
{
	struct cbcmn__iwnode *nd = t->iwn;
	if (!nd || !nd->keep)
		return NULL;
	*fresh = !nd->keep_used;
	nd->keep_used = true;
	return nd->keep;
}

/* cbcmn__iwait_init() for a lasting record's next wait: the same task, the
 * same on_cancel (NULL), kind and local; nothing a canceller reads is
 * written but the state. */
void cbcmn__iwait_rearm(struct cbcmn__iwait *iw);

/* Unlink a local wait from its cell: its executor's thread, as it wakes it. */
void cbcmn__iwait_local_unlink(struct cbcmn__iwait *iw);

/* The task side of a local wait cancelled as it registers (its on_cancel,
 * on the executor's thread): have the executor end it. */
void cbcmn__iwait_local_kick(struct cbcmn__iwait *iw);

/* Executor side (io.c): end the cancelled local waits of the cells pushed
 * on e.  True if an SQE was queued to submit. */
bool cbcmn__iwait_cells_run(struct cbcmn__exec *e);

void cbcmn__iwait_reg_init(struct cbcmn__iwait_reg *r);
void cbcmn__iwait_reg_fini(struct cbcmn__iwait_reg *r);

/* Prepare a wait for task self (which becomes PARKING).  self may be NULL
 * for a thread outside the runtime (then nothing interrupts the wait). */
void cbcmn__iwait_init(struct cbcmn__iwait *iw, struct cbcmn_task *self);

/* Block until claimed.  Returns CBCMN__IW_WOKEN, CBCMN__IW_CANCELLED or
 * CBCMN__IW_TIMEDOUT (a timer, timer.h). */
uint32_t cbcmn__iwait_block(struct cbcmn__iwait *iw);
/* The two halves of a task's cbcmn__iwait_block() (iw->w.task set), for
 * the park on the system stack (cbcmn__sys_park(), sched.c), which
 * suspends between them.  begin: false if the wait ended at once (it was
 * cancelled: do not suspend); end: once resumed, the wait's state. */
bool cbcmn__iwait_begin(struct cbcmn__iwait *iw);
uint32_t cbcmn__iwait_end(struct cbcmn__iwait *iw);

/* Event side: claim the wait.  False if cancellation claimed it first. */
static inline bool cbcmn__iwait_claim(struct cbcmn__iwait *iw)
{
	uint32_t s = CBCMN__IW_WAITING;
	/* acq_rel: what the claimer hands over is released to the waiter,
	 * which reads the state with acquire after it wakes. */
	return atomic_compare_exchange_strong_explicit(&iw->state, &s, CBCMN__IW_WOKEN,
						       memory_order_acq_rel, memory_order_acquire);
}

/* Claim with another outcome than WOKEN (a timer: CBCMN__IW_TIMEDOUT). */
static inline bool cbcmn__iwait_claim_as(struct cbcmn__iwait *iw, uint32_t how)
{
	uint32_t s = CBCMN__IW_WAITING;
	return atomic_compare_exchange_strong_explicit(&iw->state, &s, how, memory_order_acq_rel,
						       memory_order_acquire);
}

/* Event side: wake a wait it has claimed.  waker: the calling executor, or
 * NULL outside the runtime. */
static inline void cbcmn__iwait_wake(struct cbcmn__iwait *iw, struct cbcmn__exec *waker)
{
	/* A listed local wait leaves its cell here, on its executor's
	 * thread, the only one that touches that list. */
	if (iw->local && iw->cell)
		cbcmn__iwait_local_unlink(iw);
	if (iw->w.task)
		cbcmn__wake_claimed(iw->w.task, waker); /* ours alone: the claim */
	else
		cbcmn__waiter_wake(&iw->w, waker);
}

/* An on_cancel for waits that must not end before their event (it still
 * claims them: the waiter sees CBCMN__IW_CANCELLED when the event wakes it). */
void cbcmn__iwait_ignore_cancel(struct cbcmn__iwait *iw);

/* Executor side (io.c): claim a local wait whose task is cancelled.  True
 * if the wait is cancelled, now or before. */
bool cbcmn__iwait_local_cancel(struct cbcmn__iwait *iw);

/* A task of nursery n now counts as cancelled on its own (a stopped actor,
 * actor.c): interrupt the waits of n's scope (not its subtree's) and of
 * the fallback whose task is cancelled.  O(waits of n). */
void cbcmn__iwait_cancel_task_scan(struct cbcmn_nursery *n);

/* Called after nursery n was cancelled: interrupt the registry waits of
 * its subtree's scopes, and have the executors holding local waits of
 * them look at those.  O(scopes below n x executors + their waits). */
void cbcmn__iwait_cancel_scan(struct cbcmn_nursery *n);

#endif
