/* cbcmn_actor.h: actors: tasks with a bounded mailbox, addressed by reference.
 *
 * An actor is a task (it runs on the executors like any other, in a nursery,
 * with a budget, and is cancelled with its nursery) that owns a mailbox of
 * fixed-size messages (cbcmn_actor_msg) and is known to others by a
 * reference: a 64-bit generation-checked id, not a pointer.  Anyone holding
 * the reference (a task, another actor, a thread outside the runtime) may
 * send to it; only the actor itself receives.
 *
 *     static int64_t counter(cbcmn_cx *cx, void *state) {
 *             cbcmn_actor_msg m;
 *             while (cbcmn_actor_receive(cx, &m, CBCMN_ACTOR_FOREVER) == 0)
 *                     *(uint64_t *)state += m.body.u64[0];
 *             return 0;                    // the halt reason: 0 is normal
 *     }
 *     cbcmn_actor_ref a;
 *     cbcmn_actor_spawn(cx, n, counter, &total, NULL, &a);
 *     cbcmn_actor_msg m = {.type = 1, .body.u64 = {5}};
 *     cbcmn_actor_send(NULL, cx, a, &m);   // waits while the mailbox is full
 *
 * Lifetime.  An actor lives until its behaviour function returns (the
 * return value is its halt reason: 0 normal, negative an error), it is
 * stopped (cbcmn_actor_stop()), its nursery is cancelled, or the runtime
 * ends it (stack overflow: CBCMN_EPANIC; budget given up: CBCMN_EBUDGET).
 * A cancellation ends an actor as it ends a task: a fiber actor's waits
 * (receive, send, sleep...) return CBCMN_ECANCELED and its behaviour
 * decides what to return, which stays its halt reason (return 0 after
 * cleaning up and its DOWN says 0; pass the CBCMN_ECANCELED on and it
 * says that; the cancelled nursery's await_all returns CBCMN_ECANCELED
 * either way, as for tasks, unless a child failed); one cancelled before
 * it first ran, or ended at a CBCMN_CHECKPOINT(), halts with
 * CBCMN_ECANCELED.  A handler actor is never called to see it: its host
 * halts it with CBCMN_ECANCELED (cbcmn_actor_spawn_handler(), below).
 * Its nursery's await_all waits for it like for any child and sees the
 * halt reason as the child's result.  At halt, the reference dies at
 * once: every later send returns -ESRCH, and senders blocked on the full
 * mailbox return -ESRCH (their message was not taken).  Messages still in
 * the mailbox are undelivered: each is passed to the actor's drop
 * callback (cbcmn_actor_opts.drop) if it has one, then discarded.
 * Monitors get their DOWN message.
 *
 * References.  A reference names one actor for ever: the slot it lives in is
 * recycled for later actors with a new generation, so a reference to a
 * halted actor, or any 64-bit value that was never a reference, is refused
 * (-ESRCH) and never touches freed memory.  CBCMN_ACTOR_NONE (0) is never
 * a reference.  A slot is retired for good after 2^32 - 1 actors.  A
 * reference carries a 10-bit tag of its runtime: one passed to another
 * runtime is refused there (-ESRCH), never delivered to the actor that
 * runtime has in the same slot, unless 1023 runtimes were created between
 * the two (then their tags may be equal).
 *
 * Delivery.  A send that returns 0 has put the message in the mailbox (or
 * in the waiting receiver's buffer), or, across executors (below), holds
 * a place reserved there for it: it is received exactly once, unless the
 * actor halts first (then it is dropped as above, never received).
 * Messages from one sender (a task, actor or thread that waits for each
 * send to return) are received in the order they were sent, whatever
 * executors the two run on and however often either moves between them.
 * Messages of different senders interleave in the order their sends took
 * effect (across executors: as the receiver's executor put them).
 *
 * Back-pressure.  A mailbox holds at most its capacity of messages;
 * cbcmn_actor_send() waits while it is full (a task's fiber is suspended,
 * a thread sleeps), cbcmn_actor_try_send() returns -EAGAIN instead, and
 * cbcmn_actor_send_timeout() gives up with -ETIMEDOUT.  Waiting senders
 * get the freed slots in the order they began to wait (a task sending
 * across executors waits for room to reserve instead, and is woken with
 * the others waiting so once half the mailbox is free).  An actor sending to
 * its own full mailbox would wait for ever: -EDEADLK.  DOWN messages are
 * not counted against the capacity (their room is taken when the monitor
 * is set up), so a halt never waits for a full mailbox.
 *
 * Budget.  Every send (blocking, try or timed) and every receive from a
 * task or actor costs one op and one channel_ops unit of the caller's
 * budget (docs/BUDGETS.md), paid before the mailbox is touched; threads
 * outside the runtime have no budget.
 *
 * Cancellation.  A task blocked in a send or a receive whose nursery (or
 * one enclosing it) is cancelled returns CBCMN_ECANCELED, and leaves no
 * trace: its message was not taken, its buffer not written.
 *
 * Across executors.  A task's send to an actor whose home is another
 * executor, once that actor's task has started, reserves a place in the
 * mailbox and posts the message on the executors' lanes: that executor
 * puts it in the reserved place at its next look at its mail.  The send
 * returns 0 at the post (nothing can refuse it after that: a cancellation
 * later leaves it delivered; a halt before the put counts and drops it as
 * a message in the mailbox).  No place to reserve: try_send and a zero
 * timeout answer as above, a send waits for room.  A sender's next send
 * by another way (it moved to another executor, the receiver moved, the
 * lock) first waits for its messages still in lanes to be put: order per
 * sender holds.  Threads and handler actors send through the mailbox
 * lock.
 *
 * Contexts.  cx is the calling task (an actor is a task), or NULL from a
 * thread outside the runtime, which then blocks as a thread and must not be
 * one of the runtime's executors (-EDEADLK).  Such a thread's calls must
 * have returned before cbcmn_runtime_destroy() is called: the runtime
 * refuses to go while an actor lives (-EBUSY), and a thread blocked on a
 * mailbox is woken (-ESRCH) when its actor halts, but a call still under
 * way while the runtime is freed touches freed memory.  Calls that only an actor may
 * make (receive, self, monitor) return -EPERM from anything else.  A
 * task's cx used on another thread (a cbcmn_blocking() function's) sends
 * as such a thread does, from its actor still: the sends that may wait
 * (cbcmn_actor_send(), cbcmn_actor_send_timeout()) return -EPERM there,
 * cbcmn_actor_try_send() works.
 *
 * Errors.  Negative errno or CBCMN_E*: -EINVAL for NULL or bad arguments,
 * -ESRCH for a dead or unknown reference, CBCMN_EWRONGRT for a context of
 * another runtime, CBCMN_EFORKED in a forked child (cbcmn_runtime_create()).
 *
 * Visibility.  cbcmn_stats_snapshot() counts, per executor, the actors
 * homed there by state (cbcmn_executor_stats.actors, actors_runnable,
 * actors_running, actors_waiting, actors_receiving, actors_halting) and
 * the messages in their mailboxes (mailbox_depth); the sends a full
 * mailbox held or refused (actor_backpressure, where the sender runs;
 * cbcmn_stats.ext_actor_backpressure for threads outside), and the depth
 * each receive found (mailbox_depth_hist, mailbox_depth_p99).  USDT probes
 * actor_spawn, actor_send, actor_backpressure, actor_receive, actor_halt,
 * actor_restart, sup_restart and actor_migrate (docs/PROBES.md).
 *
 * Migration.  An actor runs on the executor that picked it; when that
 * executor's load is well above another's, an actor that used its whole
 * quantum, or one that was waiting and just became runnable, may be handed
 * over to it (docs/ACTORS.md "Migration").  Pinned actors and posse
 * members never move; its mailbox never moves, so delivery and order are
 * unaffected.
 *
 * Supervisors (cbcmn_sup_start(), below) start and restart trees of
 * actors.  docs/ACTORS.md has the design and what is still to come.
 */
#ifndef CBCMN_ACTOR_H
#define CBCMN_ACTOR_H

#include "cbcmn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A reference to an actor: an opaque generation-checked id. */
typedef uint64_t cbcmn_actor_ref;
#define CBCMN_ACTOR_NONE ((cbcmn_actor_ref)0)

/* A message: a type, the sender, and 48 bytes of body, copied in and out.
 * Larger data travels by pointer in the body; who frees it is up to the
 * program (see cbcmn_actor_opts.drop for the messages that are never
 * received).  Types at or above CBCMN_ACTOR_SYS are the runtime's. */
typedef struct cbcmn_actor_msg {
	uint32_t type;          /* the program's (< CBCMN_ACTOR_SYS), CBCMN_ACTOR_DOWN or _EXIT */
	uint32_t _reserved;     /* zero */
	cbcmn_actor_ref from;   /* set by send: the sending actor, or CBCMN_ACTOR_NONE */
	union {
		uint64_t u64[6];
		void *ptr;
		unsigned char bytes[48];
		/* CBCMN_ACTOR_DOWN: the watched actor (also in from) halted. */
		struct {
			uint64_t monitor;   /* what cbcmn_actor_monitor() returned */
			int64_t reason;     /* its halt reason; -ESRCH: it was dead already */
			/* messages left in its mailbox at halt (a handler
			 * actor's: with the one it held for a RETRY), each
			 * given to its opts.drop */
			uint64_t undelivered;
		} down;
		/* CBCMN_ACTOR_EXIT: a linked actor (also in from) halted, and
		 * the receiver traps exits (cbcmn_actor_trap_exit()). */
		struct {
			uint64_t _zero;     /* 0 */
			int64_t reason;     /* its halt reason, 0 included */
		} exit;
		/* CBCMN_ACTOR_TIMEOUT: nothing came for the handler actor
		 * by the deadline cbcmn_actor_set_receive_timeout() set. */
		struct {
			uint64_t deadline;  /* that deadline, on cbcmn_now()'s clock */
		} timeout;
	} body;
} cbcmn_actor_msg;

#define CBCMN_ACTOR_SYS 0xffff0000u
#define CBCMN_ACTOR_DOWN (CBCMN_ACTOR_SYS + 1)
#define CBCMN_ACTOR_EXIT (CBCMN_ACTOR_SYS + 2)
/* A handler actor's first call when spawned with cbcmn_actor_opts.start. */
#define CBCMN_ACTOR_START (CBCMN_ACTOR_SYS + 3)
/* A handler actor's call when its receive deadline passed with nothing
 * for it (cbcmn_actor_set_receive_timeout()). */
#define CBCMN_ACTOR_TIMEOUT (CBCMN_ACTOR_SYS + 4)

/* An actor's behaviour: runs as its task, receives with
 * cbcmn_actor_receive(), returns its halt reason (0 normal, negative an
 * error, which fails its nursery like any child's error). */
typedef int64_t (*cbcmn_actor_fn)(cbcmn_cx *cx, void *state);

#define CBCMN_ACTOR_MAILBOX_DEFAULT 64u
#define CBCMN_ACTOR_MAILBOX_MAX (1u << 20)
#define CBCMN_ACTOR_FOREVER UINT64_MAX

typedef struct cbcmn_actor_opts {
	/* Mailbox capacity in messages, 1..CBCMN_ACTOR_MAILBOX_MAX; 0: the
	 * default (CBCMN_ACTOR_MAILBOX_DEFAULT). */
	uint32_t mailbox_cap;
	/* Where it starts and whether it may move: CBCMN_PLACE_* and shard,
	 * as in cbcmn_spawn_opts (CBCMN_PLACE_PINNED: never migrates). */
	uint32_t placement;
	uint32_t shard;
	/* Its budget (components 0: the config's child_budget); NULL: the
	 * config's child_budget.  Drawn from the spawner's, as for a task,
	 * except that what is not asked here (the child_budget, the
	 * profile's default) is at most half of what the spawner has: a
	 * spawner keeps budget to receive with (docs/ACTORS.md "Budgets").
	 * What is asked here and the spawner has not got is refused, as a
	 * task's: CBCMN_EBUDGET, nothing spawned. */
	const cbcmn_budget *budget;
	/* Its capabilities, intersected with the spawner's; NULL: all the
	 * spawner holds (as in cbcmn_spawn_opts; the CapBudget the native
	 * profile implies is not inherited with a finite budget).  Without
	 * CBCMN_CAP_BUDGET, an actor that cannot pay a cost waits while a
	 * child it paid for may give back; else it halts with CBCMN_EBUDGET
	 * at once (nobody holds a handle to recharge an actor), or, a
	 * supervisor's child, its supervisor ends it or tops it up
	 * (docs/ACTORS.md "Budgets"). */
	const cbcmn_caps *caps;
	/* Called at halt for each message left undelivered in the mailbox,
	 * oldest first, on the halting actor's executor.  It never waits:
	 * with the halting actor's cx (a fiber actor's, or the one its
	 * handler was called with), every call that would wait returns at
	 * once, as in a cancelled task: a receive of the halting actor is
	 * -ESHUTDOWN (a handler's -EPERM), a blocking send a try_send
	 * (-EAGAIN on a full mailbox), a sleep, a channel wait, I/O, a
	 * yield, a spawn, a join of a running task, an await of a nursery
	 * opened before the halt whose children still run (they are
	 * cancelled; it stays open for its owner's end) CBCMN_ECANCELED; a budget run out there ends the task, as anywhere
	 * nobody can recharge it (CBCMN_EBUDGET; the halt goes on); a close
	 * closes; cbcmn_cx_cancelled() is true.
	 * Only an actor stopped, or its nursery cancelled, also ends a
	 * CBCMN_CHECKPOINT() there (docs/ACTORS.md, "A halt never waits").
	 * Blocking calls without a cx (a plain mutex, read(2)) block its
	 * executor's thread.  NULL: they are discarded. */
	void (*drop)(void *state, const cbcmn_actor_msg *m);
	/* Trap exits from the start (as cbcmn_actor_trap_exit(cx, true) in
	 * its first line, but before anyone can link with it). */
	bool trap_exit;
	/* Its posse (seed 003): 0 none; any other id makes it a member, and
	 * posse members never migrate between executors (as if pinned, but
	 * placed and stolen before their first run like any actor). */
	uint32_t posse;
	/* A handler actor (cbcmn_actor_spawn_handler()): its first call is
	 * a CBCMN_ACTOR_START message (from CBCMN_ACTOR_NONE, body zero),
	 * before any message sent to it, so that it can set itself up
	 * (spawn, send) without being sent anything.  Ignored for actors
	 * with a task (their behaviour starts by itself). */
	bool start;
} cbcmn_actor_opts;

/* Spawn an actor running fn(cx, state) as a child of nursery n, with a
 * mailbox per opts (NULL: defaults), and store its reference in *out.
 * cx is the calling task, or NULL from the thread outside the runtime that
 * opened n.  The rules of cbcmn_nursery_spawn_ex() apply (who may spawn
 * into n: its opener or a task inside it, until its await_all begins;
 * capabilities; budget drawn; placement).
 * *out is valid as soon as the call returns, before the actor first runs:
 * messages sent then wait in the mailbox.  Returns 0, -EINVAL (a bad
 * option), -ENOMEM, CBCMN_ECLOSED, CBCMN_ECANCELED, CBCMN_ESPAWNDENIED,
 * CBCMN_EWRONGRT, or what the spawn returns; on failure *out is
 * CBCMN_ACTOR_NONE and nothing runs.  Any thread (see cx). */
CBCMN_API int cbcmn_actor_spawn(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_fn fn, void *state,
				const cbcmn_actor_opts *opts, cbcmn_actor_ref *out);

/* Send *m (its type below CBCMN_ACTOR_SYS; from is filled in) to actor a
 * of runtime rt, waiting while a's mailbox is full.  A reference does not
 * name its runtime: rt is the runtime, and may be NULL when cx is given
 * (cx's runtime); a thread outside the runtime passes rt and a NULL cx.  Returns 0 (delivered to the mailbox),
 * -ESRCH (a is dead, or halted while we waited: not taken),
 * CBCMN_ECANCELED (not taken), -EDEADLK (an actor to its own full mailbox,
 * or a NULL cx on an executor thread), -EPERM (a task's cx used on
 * another thread: a cbcmn_blocking() function's, whose try_send works),
 * -EINVAL, CBCMN_EWRONGRT. */
CBCMN_API int cbcmn_actor_send(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref a,
			       const cbcmn_actor_msg *m);

/* cbcmn_actor_send() that never waits: -EAGAIN when the mailbox is full
 * (across executors, counting places reserved by messages in lanes; it
 * may wait for its own earlier messages in lanes to be put, above).
 * Works in a cancelled task and with a NULL cx on an executor thread. */
CBCMN_API int cbcmn_actor_try_send(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref a,
				   const cbcmn_actor_msg *m);

/* cbcmn_actor_send() that gives up after timeout_ns of the runtime's
 * clock (virtual in lab mode): -ETIMEDOUT, the message was not taken.
 * A thread outside the runtime (NULL cx) sleeps on its own, at most that
 * long; it cannot wait on a lab runtime's virtual clock (-EINVAL). */
CBCMN_API int cbcmn_actor_send_timeout(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref a,
				       const cbcmn_actor_msg *m, uint64_t timeout_ns);

/* Receive the next message of the calling actor's mailbox into *m, waiting
 * up to timeout_ns (CBCMN_ACTOR_FOREVER: no limit; 0: do not wait).
 * A DOWN message comes after every message the watched actor sent before
 * it halted.  Returns 0, -ETIMEDOUT (nothing came; *m untouched),
 * -ESHUTDOWN (the actor was stopped: it should return; *m untouched),
 * CBCMN_ECANCELED (its nursery was cancelled), -EPERM (cx is not an
 * actor), -EINVAL. */
CBCMN_API int cbcmn_actor_receive(cbcmn_cx *cx, cbcmn_actor_msg *m, uint64_t timeout_ns);

/* The calling actor's own reference; CBCMN_ACTOR_NONE when cx is not an
 * actor (a plain task, or NULL). */
CBCMN_API cbcmn_actor_ref cbcmn_actor_self(const cbcmn_cx *cx);

/* Ask actor a to stop with reason (its halt reason from then on, whatever
 * it returns; use a negative one for a failure, 0 for a normal stop).  Its
 * mailbox closes at once: later sends and senders waiting on it get -ESRCH;
 * its current or next cbcmn_actor_receive() returns -ESHUTDOWN, and the
 * behaviour is expected to return then.  Any other wait of the actor ends
 * too, at that call, as a cancellation of its task would end it: a
 * channel operation, a sleep, a timed wait, a budget wait, a blocking
 * call or an I/O call under way return CBCMN_ECANCELED (an I/O that had
 * completed returns its result instead, never ECANCELED), a nursery it
 * awaits is cancelled (its await_all returns once those children ended),
 * and from then on every blocking call and yield of the actor returns
 * CBCMN_ECANCELED while its receive returns -ESHUTDOWN, and its next
 * CBCMN_CHECKPOINT() that reaches the slow path ends it (as a cancelled
 * task's does).  An actor that computes without a checkpoint is not
 * interrupted.  Idempotent: the
 * first reason wins.  Returns 0, -ESRCH (already halted), -EINVAL.  Any
 * thread, any task; rt and cx as for cbcmn_actor_send(). */
CBCMN_API int cbcmn_actor_stop(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref a,
			       int64_t reason);

/* Watch actor a from the calling actor: when a halts, the caller receives
 * one CBCMN_ACTOR_DOWN message (from = a, body.down = {the id stored in
 * *mon, a's halt reason}).  If a is already dead, that message comes at
 * once with reason -ESRCH.  Watching the same actor twice gives two
 * messages.  A monitor ends with its DOWN, with cbcmn_actor_demonitor(),
 * or when the watcher halts (then it is taken off a, which keeps nothing of
 * it).  Returns 0, -EPERM (cx is not an actor), -ESHUTDOWN (the caller is
 * halting: from its drop callback), -ENOMEM, -EINVAL. */
CBCMN_API int cbcmn_actor_monitor(cbcmn_cx *cx, cbcmn_actor_ref a, uint64_t *mon);

/* Undo cbcmn_actor_monitor(): no DOWN for monitor mon (on actor a) will be
 * received after this returns, whether a is alive, halting or halted (a
 * DOWN already in the caller's mailbox is removed).  Returns 0, -ENOENT (no
 * such monitor: its DOWN was received already, or mon is not the caller's
 * or not on a: another monitor's DOWN is left alone),
 * -EPERM (cx is not an actor).  May yield while a is halting; never from
 * the caller's own halt (its drop callback, a handler actor's too: the
 * halting handler actor's monitors), where no DOWN can reach it any more:
 * it returns at once. */
CBCMN_API int cbcmn_actor_demonitor(cbcmn_cx *cx, cbcmn_actor_ref a, uint64_t mon);

/* Link the calling actor with actor a, both ways: when either halts with a
 * reason other than 0, the other is stopped (cbcmn_actor_stop()) with that
 * reason, which its own links pass on in turn; a normal halt (0) stops
 * nobody.  An actor that traps exits (cbcmn_actor_trap_exit()) is not
 * stopped: it receives one CBCMN_ACTOR_EXIT message (from = the peer,
 * body.exit.reason = its halt reason) for every halt of a linked peer,
 * normal ones included, after the messages the peer had sent it.  The link
 * is gone either way.  Linking twice is the same as once.  Returns 0, -ESRCH (a is
 * dead: nothing linked), -EINVAL (a is the caller itself), -EPERM (cx is
 * not an actor), -ESHUTDOWN (the caller is halting: from its drop
 * callback, whatever a is, CBCMN_ACTOR_NONE included), -ENOMEM. */
CBCMN_API int cbcmn_actor_link(cbcmn_cx *cx, cbcmn_actor_ref a);

/* Undo cbcmn_actor_link() between the calling actor and a, both ways: once
 * it returns, a's halt does not stop the caller, nor the caller's a.  Not
 * linked (or a dead): nothing to do, 0.  Returns 0, -EPERM (cx is not an
 * actor). */
CBCMN_API int cbcmn_actor_unlink(cbcmn_cx *cx, cbcmn_actor_ref a);

/* Make the calling actor trap exits (on) or not: while it does, a linked
 * actor's halt arrives as a CBCMN_ACTOR_EXIT message instead of stopping
 * it (cbcmn_actor_link()).  A halt is judged when it happens: turning it
 * off does not take back EXIT messages already queued.  Returns the
 * previous setting (0 or 1), -EPERM (cx is not an actor). */
CBCMN_API int cbcmn_actor_trap_exit(cbcmn_cx *cx, bool on);

/* ------------------------------------------------------------------------
 * Handler actors (docs/ACTORS.md "Handler actors")
 *
 * A handler actor has no stack of its own: its behaviour is a callback
 * that a host task calls once per message, on the host's stack.  It is a
 * full actor otherwise: the same references, mailbox (bounded, in order,
 * exactly once per sender), send, try_send, stop, monitor, link, DOWN and
 * EXIT (delivered as calls like any message), drop callback, trap_exit,
 * and it can be a supervisor's child (cbcmn_sup_child.handler).
 *
 * Hosts.  A handler actor spawned by a handler (cx is the context a
 * handler was called with) into that handler's own nursery, with the
 * default placement and no budget or caps of its own, joins the caller's
 * host; any other spawn makes a new host: a task of nursery n (placed,
 * budgeted and capped by opts, as cbcmn_actor_spawn()'s task would be)
 * that ends once its last handler actor has halted.  A host runs on one
 * executor at a time and moves between executors as any task; its
 * handler actors run where it runs.  So a program that wants a million
 * cheap actors spawns one from a task and the rest from handlers.
 *
 * Calls.  h(cx, state, m) for each message, in mailbox order (a due
 * DOWN or EXIT first, as cbcmn_actor_receive() would), after a
 * CBCMN_ACTOR_START one if opts.start (a supervisor's child:
 * cbcmn_sup_child.start, at each restart too) asks for it.  It must not
 * block: cbcmn_actor_send() and cbcmn_actor_send_timeout() from a handler
 * never wait (they are cbcmn_actor_try_send(): -EAGAIN when full; to
 * the handler actor's own full mailbox -EDEADLK, as an actor's), and
 * cbcmn_actor_receive() is -EPERM.  cbcmn_actor_self(cx), monitor,
 * demonitor, link, unlink and trap_exit work on the handler actor.
 * Any other blocking call (a sleep, a channel) blocks its whole host.
 * It returns:
 *   CBCMN_ACTOR_CONTINUE  wait for the next message;
 *   CBCMN_ACTOR_RETRY     call me again with this same message later (a
 *                         send found a full mailbox; other handlers and
 *                         tasks run first; a poll, not a wait);
 *   CBCMN_ACTOR_HALT      halt, reason 0;
 *   a negative value      halt with that reason (a crash: its nursery
 *                         fails and cancels, unless it is a supervisor's
 *                         child, which is restarted);
 *   anything else         halt with -EINVAL (a crash).
 * A stop (cbcmn_actor_stop()) halts it before its next call, with the
 * stop's reason; a cancellation of its nursery (or one enclosing it)
 * before its next call, with CBCMN_ECANCELED, also when its mailbox is
 * empty.  A handler that computes for ever is not interrupted.
 *
 * Budget and fairness.  The host pays: each call is one op and one
 * channel_ops unit of the host task's budget (its sends as any task's),
 * and the host yields to other tasks and actors every yield interval
 * (cbcmn_config.yield_interval) calls, however many messages wait.
 *
 * Receive timeouts.  A handler waits at most a time for its next message
 * by calling cbcmn_actor_set_receive_timeout() before it returns
 * CBCMN_ACTOR_CONTINUE: if no call comes by then, the next one is a
 * CBCMN_ACTOR_TIMEOUT message (below).
 *
 * Statistics.  A handler actor counts in cbcmn_executor_stats.actors and,
 * while it lives, actors_waiting (of the executor that spawned it), and
 * while a receive deadline of its is armed, actors_receiving (the seed's
 * idle/timed-out: waiting for a message, with a deadline); its host is a
 * task. */
#define CBCMN_ACTOR_CONTINUE 0
#define CBCMN_ACTOR_HALT 1
#define CBCMN_ACTOR_RETRY 2

/* A handler actor's behaviour (above). */
typedef int64_t (*cbcmn_actor_handler)(cbcmn_cx *cx, void *state, const cbcmn_actor_msg *m);

/* Spawn a handler actor h with state as a child of nursery n, options as
 * cbcmn_actor_spawn() (placement, budget and caps are its host's, and only
 * used when it gets a new one), and store its reference in *out.  Returns
 * 0, -EINVAL, -ENOMEM, or what the host task's spawn returns
 * (CBCMN_ECLOSED, CBCMN_ECANCELED, CBCMN_ESPAWNDENIED...); joining the
 * caller's host also works while n's await_all runs (the host is n's
 * child that the await waits for), but not once n or its host is
 * cancelled (CBCMN_ECANCELED).  Any thread, any task, any handler. */
CBCMN_API int cbcmn_actor_spawn_handler(cbcmn_cx *cx, cbcmn_nursery *n, cbcmn_actor_handler h,
					void *state, const cbcmn_actor_opts *opts,
					cbcmn_actor_ref *out);

/* From a handler (cx the context it was called with): wait at most
 * timeout_ns of the runtime's clock (cbcmn_now(); virtual in lab mode),
 * from this call, for the handler actor's next call.  If none has come by
 * then, the next call is a CBCMN_ACTOR_TIMEOUT message (from
 * CBCMN_ACTOR_NONE, body.timeout.deadline the deadline), made at or after
 * the deadline, never before, and once.  The deadline is for the wait
 * after this call, and only if the call returns CBCMN_ACTOR_CONTINUE:
 * the next call, whatever it is (a message, a DOWN or EXIT, the TIMEOUT),
 * ends it, as does a RETRY (the same message comes next) or a halt.  The
 * TIMEOUT is made when the host finds the deadline passed and nothing
 * for the handler actor: a message that is there by then (in time, or
 * a little late) is called instead, and no TIMEOUT is made; one that
 * comes after is called after the TIMEOUT.  Nothing is lost either way.
 * Set again in the same call, the last deadline wins;
 * CBCMN_ACTOR_FOREVER takes it back; 0 is due at once (a TIMEOUT unless
 * a message is there).  To time out every wait, set it in every call
 * (the TIMEOUT's included).  A stopped, halted or cancelled handler
 * actor gets no TIMEOUT.  The deadline belongs to the handler actor's
 * host, and moves with it between executors.  It is late by what the
 * host does meanwhile (other handlers' calls, other tasks of its
 * executor): a host looks at its deadlines between batches of calls.
 * Returns 0, -EPERM (cx is not a handler's: a task, a fiber actor, whose
 * cbcmn_actor_receive() takes a timeout, NULL), CBCMN_EFORKED, -ENOMEM
 * (nothing changed: a deadline set before in this call stays). */
CBCMN_API int cbcmn_actor_set_receive_timeout(cbcmn_cx *cx, uint64_t timeout_ns);

/* ------------------------------------------------------------------------
 * Supervisors (seed 003 "Supervisors", SPEC-021 §10 :cluster;
 * docs/ACTORS.md "Supervisors")
 *
 * A supervisor is an actor that starts children from a declared startup
 * graph and restarts them when they halt.  cbcmn_sup_start() checks the
 * spec, copies it (the caller's spec may go once it returns) and spawns the
 * supervisor; the supervisor starts its children in an order where every
 * child starts after its dependencies (deps[]), each as an actor of a
 * nursery the supervisor opens, monitored by it.  Children are contained: a child's
 * halt, whatever its reason, never cancels its siblings nor fails the
 * supervisor's nursery; it reaches only the supervisor (as a DOWN).
 *
 * A child crashes when it halts with a negative reason: it returned one,
 * overflowed its stack (CBCMN_EPANIC), ran out of budget nobody recharged
 * (CBCMN_EBUDGET: a supervisor ends an exhausted child at once, or, with
 * spec.recharge, tops it up), or its executor's thread died under it
 * (CBCMN_EPANIC).  Whether it is restarted is its restart type
 * (CBCMN_SUP_PERMANENT: always, after a normal halt too;
 * CBCMN_SUP_TRANSIENT: only after a crash; CBCMN_SUP_TEMPORARY: never);
 * what else is restarted with it, the strategy:
 *   CBCMN_SUP_ONE         the child alone;
 *   CBCMN_SUP_DOWNSTREAM  it and every child that depends on it, transitively;
 *   CBCMN_SUP_UPSTREAM    it and every child it depends on, transitively;
 *   CBCMN_SUP_ALL         every child.
 * The others of that set are stopped first, dependents before their
 * dependencies, each waited for; then the set starts again in startup
 * order.  One crash is one restart, however many children it restarts.
 *
 * Intensity: at most max_restarts restarts in any window of period_ns.
 * The window is half open: a restart is allowed when the oldest of the
 * last max_restarts restarts was period_ns or more before it (a restart
 * exactly period_ns after that one is allowed, one period_ns - 1 after it
 * is not), times read from cbcmn_now() (virtual in lab mode) when the
 * supervisor handles the crash (crashed children in startup order, each
 * after the restart before it: a later one reads a later time, not its
 * DOWN's).  One more and the supervisor gives
 * up: it stops every child (reverse startup order) and halts with
 * CBCMN_ESUPERVISOR, which its own supervisor sees as a crash of that
 * child (escalation), or its nursery as a failure.
 *
 * Stopping a supervisor (cbcmn_actor_stop()) stops its children in reverse
 * startup order, each waited for (up to shutdown_ns, after which the
 * children left are cancelled together); cancelling its nursery ends them
 * all at once.  Either way the supervisor halts only after every child has,
 * and its report (spec.report) adds up the messages its children, and
 * theirs, left undelivered.
 *
 * A supervisor does not trap links: an actor linked with it that halts
 * abnormally stops it (and so its tree), as for any actor.  Link children
 * with each other, not with their supervisor.
 *
 * Placement of a child: as for any actor (placement, shard), on a NUMA
 * node (node >= 0: one of the executors of that node, in turn, pinned;
 * an unpinned runtime's executors are all node 0), or on a big or a little
 * core (CBCMN_SUP_PLACE_BIG, _LITTLE: in turn, pinned, where the
 * executors span both kinds; else as by default).
 *
 * Each start of a child is a spawn charged to the supervisor's budget
 * (an op, a spawn, the stack's memory until the child ends), and the
 * child's budget is drawn from the supervisor's: give a supervisor that
 * restarts often a budget that covers it (or an unlimited one).  In the
 * service and cluster profiles a child may not spawn by default: a
 * supervisor needs opts.budget with a spawn_count.  A child's default
 * budget is at most half of what the supervisor has left, so a supervisor
 * never gives all of it away by default (cbcmn_actor_opts.budget).
 */

/* Strategies (cbcmn_sup_spec.strategy). */
#define CBCMN_SUP_ONE 0u
#define CBCMN_SUP_UPSTREAM 1u
#define CBCMN_SUP_DOWNSTREAM 2u
#define CBCMN_SUP_ALL 3u
/* Restart types (cbcmn_sup_child.restart). */
#define CBCMN_SUP_PERMANENT 0u
#define CBCMN_SUP_TRANSIENT 1u
#define CBCMN_SUP_TEMPORARY 2u
/* A child's placement besides the CBCMN_PLACE_* ones: pinned to one of the
 * executors of NUMA node `node`, in turn (an unpinned runtime's executors
 * are all node 0). */
#define CBCMN_SUP_PLACE_NODE 16u
/* Pinned to one of the executors on big (performance) cores, in turn, or
 * on little (efficiency) cores: the core kinds of cbcmn_cpu_info.kind.
 * Where the program's executors are all of one kind (a machine with one
 * kind of core, an unpinned runtime, executors pinned to one kind only)
 * there is no choice to make: the child is placed as by default
 * (CBCMN_PLACE_LOCAL: it may migrate). */
#define CBCMN_SUP_PLACE_BIG 17u
#define CBCMN_SUP_PLACE_LITTLE 18u

#define CBCMN_SUP_MAX_CHILDREN 1024u
/* The children of a whole tree, nested supervisors' included, at most
 * (each nested spec is copied once per child that names it: a few
 * specs naming each other would otherwise multiply without bound). */
#define CBCMN_SUP_MAX_TREE 65536u
/* cbcmn_sup_spec.max_restarts: at most this (the supervisor keeps the time
 * of each of the last max_restarts restarts, 8 bytes each), or
 * CBCMN_SUP_UNLIMITED: never give up. */
#define CBCMN_SUP_MAX_RESTARTS 65536u
#define CBCMN_SUP_UNLIMITED UINT32_MAX

struct cbcmn_sup_spec;

typedef struct cbcmn_sup_child {
	/* Its behaviour and state (as cbcmn_actor_spawn()); or, fn NULL, a
	 * nested supervisor started from sup (a subtree), or a handler actor
	 * (handler, below). */
	cbcmn_actor_fn fn;
	void *state;
	const struct cbcmn_sup_spec *sup;
	/* Indices in the spec's children of the children it needs started
	 * first (and stopped after it). */
	const uint32_t *deps;
	uint32_t ndeps;
	uint32_t restart;       /* CBCMN_SUP_PERMANENT, _TRANSIENT, _TEMPORARY */
	uint32_t placement;     /* CBCMN_PLACE_*, as in cbcmn_actor_opts, or CBCMN_SUP_PLACE_NODE,
				 * _BIG, _LITTLE */
	uint32_t shard;         /* with CBCMN_PLACE_PINNED, _STEALABLE_ON */
	int32_t node;           /* with CBCMN_SUP_PLACE_NODE: the NUMA node; else unused */
	uint32_t mailbox_cap;   /* 0: CBCMN_ACTOR_MAILBOX_DEFAULT */
	const cbcmn_budget *budget; /* NULL: the config's child_budget */
	const cbcmn_caps *caps;     /* NULL: the supervisor's */
	/* As cbcmn_actor_opts.drop, called with state (a nested supervisor's
	 * too: its state is used for nothing else). */
	void (*drop)(void *state, const cbcmn_actor_msg *m);
	/* A handler actor instead of fn (fn and sup NULL): started with
	 * cbcmn_actor_spawn_handler() semantics, on a host of its own. */
	cbcmn_actor_handler handler;
	/* As cbcmn_actor_opts.start, for a handler child: each start of it
	 * (the first and every restart) begins with a CBCMN_ACTOR_START
	 * call, before any message sent to that incarnation, so that it can
	 * set itself up (arm a receive timeout, spawn, send) without being
	 * sent anything.  An incarnation halted before its first call (a
	 * sibling's restart stopped it, or the supervisor's stop) is never
	 * called, its START neither.  Ignored for fn and sup children
	 * (their behaviour starts by itself).  Added in 0.2 (before 0.2.0,
	 * docs/INSTALL.md): a spec zeroed or built with designated
	 * initializers gets false. */
	bool start;
} cbcmn_sup_child;

/* Written when the supervisor halts (before its nursery's await_all can
 * return), also when cbcmn_sup_start()'s spawn is refused (reason: what
 * it returns); left alone when the spec is refused. */
typedef struct cbcmn_sup_report {
	int64_t reason;        /* its halt reason, as its DOWN says (a stop's wins over its
				* own): 0, CBCMN_ESUPERVISOR, a stop's reason, ... */
	uint64_t restarts;     /* restarts decided, one per crash, nested supervisors'
				* included (also one a stop, a cancellation or a spawn
				* that failed cut short: sup_restart, actor_restarts) */
	uint64_t undelivered;  /* messages left in children's mailboxes at their halts, subtree included */
	uint64_t exhausted;    /* children found exhausted: ended (CBCMN_EBUDGET) or recharged */
} cbcmn_sup_report;

typedef struct cbcmn_sup_spec {
	uint32_t strategy;            /* CBCMN_SUP_ONE ... CBCMN_SUP_ALL */
	uint32_t max_restarts;        /* intensity: restarts allowed in period_ns (0: none;
				       * CBCMN_SUP_UNLIMITED: any number) */
	uint64_t period_ns;           /* the window; 0: 5 s */
	const cbcmn_sup_child *children;
	uint32_t nchildren;           /* 1..CBCMN_SUP_MAX_CHILDREN */
	uint64_t shutdown_ns;         /* per child at a stop, then cancel; 0: 5 s;
				       * UINT64_MAX: no limit */
	/* An exhausted child is topped up by this much, taken from the
	 * supervisor's budget (SPEC-021 :cluster; other profiles: -EINVAL);
	 * NULL, when the supervisor cannot pay, or when this gives none of
	 * the component the child ran out of: it is ended (CBCMN_EBUDGET),
	 * a crash. */
	const cbcmn_budget *recharge;
	cbcmn_sup_report *report;     /* NULL: none; must outlive the supervisor */
} cbcmn_sup_spec;

/* Start a supervisor for spec as an actor of nursery n (cx and n as for
 * cbcmn_actor_spawn(); opts: the supervisor's own options, NULL:
 * defaults), and store its reference in *out.  The spec is checked and
 * copied first: -EINVAL for a bad field, a dependency out of range or on
 * itself, a cycle in the dependencies (of this spec or a nested one), or
 * a tree of more than CBCMN_SUP_MAX_TREE children.
 * opts->drop gets the messages left in the supervisor's mailbox at its
 * halt (those the program sent it) with a NULL state: a supervisor has no
 * state of the program's.  One the program sends it while it runs is
 * taken and discarded: it reads only its children's DOWNs (send to a
 * child, cbcmn_sup_child_ref()).  A nested supervisor's drop (its
 * cbcmn_sup_child.drop) gets that child's state.
 * Returns 0, -EINVAL, -ENOMEM, or what cbcmn_actor_spawn() returns.  A
 * child that cannot be spawned when the supervisor starts it halts the
 * supervisor with that error, after stopping the children started. */
CBCMN_API int cbcmn_sup_start(cbcmn_cx *cx, cbcmn_nursery *n, const cbcmn_sup_spec *spec,
			      const cbcmn_actor_opts *opts, cbcmn_actor_ref *out);

/* The reference of the running incarnation of child index of supervisor
 * sup.  Returns 0, -EAGAIN (not running at this instant: not started yet,
 * restarting, or not to be restarted), -ESRCH (sup is not a live
 * supervisor), -EINVAL.  *out is CBCMN_ACTOR_NONE whenever it does not
 * return 0.  rt and cx as for cbcmn_actor_send(). */
CBCMN_API int cbcmn_sup_child_ref(cbcmn_runtime *rt, cbcmn_cx *cx, cbcmn_actor_ref sup,
				  uint32_t index, cbcmn_actor_ref *out);

#ifdef __cplusplus
}
#endif

#endif /* CBCMN_ACTOR_H */
