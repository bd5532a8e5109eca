/* obligation.h: private to libcbcmn: obligations a task holds, and their leaks.
 *
 * An obligation (seed 000) is something a task reserved and must resolve,
 * commit or abort, before it ends: a channel permit (chan.c) or a general
 * obligation (cbcmn_obligation_reserve()).  Each kind embeds this header in
 * its own record; obligation.c keeps the owner's list, the count of what is
 * outstanding (the snapshot's gauge) and, when the owner ends with some
 * left, aborts them through their kind's leak() and applies the runtime's
 * leak policy (cbcmn_config.obligation_leak).  One mechanism for both kinds.
 */
#ifndef CBCMN_OBLIGATION_H
#define CBCMN_OBLIGATION_H

#include "runtime.h"

struct cbcmn__oblig {
	/* The task that reserved it, NULL for a thread outside the runtime.
	 * Written once per reservation, before anyone else can see the record;
	 * read by others only to refuse them (-EPERM). */
	_Atomic(struct cbcmn_task *) owner;
	struct cbcmn__oblig *tprev, *tnext; /* owner->obligations: owner only */
	/* Abort a leaked one as its owner ends: undo what it holds and call
	 * cbcmn__oblig_untrack().  Runs on the ending task's stack. */
	void (*leak)(struct cbcmn__oblig *ob);
	const char *what; /* for the leak line: "reservation on channel" ... */
	const void *obj;  /* ... and the object, printed as a pointer */
	uint32_t home;    /* where the gauge counted it (diag.h) */
};

/* Start tracking ob for owner (NULL: a thread) on the calling thread (e: its
 * executor, NULL outside rt): the owner's list and the outstanding count. */
void cbcmn__oblig_track(struct cbcmn_runtime *rt, struct cbcmn_task *owner,
			struct cbcmn__oblig *ob, struct cbcmn__exec *e);
/* ob is resolved: off its owner's list (called by the owner, or as it
 * ends) and out of the count.  e as above. */
void cbcmn__oblig_untrack(struct cbcmn_runtime *rt, struct cbcmn__oblig *ob,
			  struct cbcmn__exec *e);

/* runtime.c: free the general obligations' records (destroy). */
void cbcmn__oblig_fini(struct cbcmn_runtime *rt);

#endif
