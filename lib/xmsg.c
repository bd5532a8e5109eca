/* xmsg.c: messages between executors (seed 001's payload queues, seed 003's
 * exactly-once delivery).
 *
 * Every ordered pair of executors (src, dst) has its own single-producer,
 * single-consumer lane, made by src the first time it sends to dst.  A
 * message is allocated by its sender, goes to dst through lane (src, dst),
 * and comes back through lane (dst, src) as the acknowledgement; only then
 * does the sender reuse it.  A lane entry is consumed once by its one
 * consumer, so a message is delivered exactly once, and the sender knows
 * when (it counts what is out).
 *
 * A call may carry its argument by value in the message (m->data): an
 * actor's send to another executor carries the actor message itself
 * (actor_mbox.c), so the body lives in the sender's pool while in flight
 * and goes back there with the acknowledgement, with nothing to free on
 * the receiving side and no wait on the sending one.
 *
 * Wake-ups are coalesced: dst has a bit per source lane with entries and a
 * summary word; only the send that sets the bit (the lane's transition to
 * non-empty, as far as dst knows) unparks dst, and unparking rings a
 * doorbell only when dst sleeps (wake.c).  dst drains every flagged lane
 * in one pass.
 *
 * A full lane never drops: the entry waits on the sender's backlog for that
 * destination, counted as back-pressure, and the sender retries at every
 * turn of its loop.  Threads outside the runtime hand work to a given
 * executor (pinned spawns, tasks woken that go home) through its `remote`
 * list instead (a lock-free LIFO taken whole).
 */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "probes.h"
#include "runtime.h"

#define XM_SLAB 64u

int cbcmn__xmsg_init(struct cbcmn__exec *e, uint32_t nexec)
{
	e->in = cbcmn__calloc(nexec, sizeof(*e->in));
	e->backlog = cbcmn__calloc(nexec, sizeof(*e->backlog));
	e->backlog_tail = cbcmn__calloc(nexec, sizeof(*e->backlog_tail));
	e->lane_posted = cbcmn__calloc(nexec, sizeof(*e->lane_posted));
	e->lane_done = cbcmn__calloc(nexec, sizeof(*e->lane_done));
	e->lw_head = cbcmn__calloc(nexec, sizeof(*e->lw_head));
	e->lw_tail = cbcmn__calloc(nexec, sizeof(*e->lw_tail));
	if (!e->in || !e->backlog || !e->backlog_tail || !e->lane_posted || !e->lane_done ||
	    !e->lw_head || !e->lw_tail)
		return -ENOMEM;
	return 0;
}

void cbcmn__xmsg_fini(struct cbcmn__exec *e)
{
	if (e->in)
		for (uint32_t i = 0; i < e->rt->nexec; i++)
			free(atomic_load_explicit(&e->in[i], memory_order_relaxed));
	free(e->in);
	free(e->backlog);
	free(e->backlog_tail);
	free(e->lane_posted);
	free((void *)e->lane_done);
	free(e->lw_head);
	free(e->lw_tail);
	e->lane_posted = NULL;
	e->lane_done = NULL;
	e->lw_head = e->lw_tail = NULL;
	for (uint32_t i = 0; i < e->xm_nslabs; i++)
		free(e->xm_slabs[i]);
	free(e->xm_slabs);
	e->in = NULL;
	e->backlog = e->backlog_tail = NULL;
	e->xm_slabs = NULL;
	e->xm_nslabs = 0;
}

static struct cbcmn__xmsg *xm_alloc(struct cbcmn__exec *e)
{
	struct cbcmn__xmsg *m = e->xm_free;
	if (m) {
		e->xm_free = m->next;
		return m;
	}
	void **slabs = realloc(e->xm_slabs, (e->xm_nslabs + 1) * sizeof(*slabs));
	if (!slabs)
		return NULL;
	e->xm_slabs = slabs;
	struct cbcmn__xmsg *s = cbcmn__calloc(XM_SLAB, sizeof(*s));
	if (!s)
		return NULL;
	slabs[e->xm_nslabs++] = s;
	for (uint32_t i = 1; i < XM_SLAB; i++) {
		s[i].next = e->xm_free;
		e->xm_free = &s[i];
	}
	return &s[0];
}

static struct cbcmn__lane *lane_get(struct cbcmn__exec *src, struct cbcmn__exec *dst)
{
	struct cbcmn__lane *l = atomic_load_explicit(&dst->in[src->id], memory_order_acquire);
	if (l)
		return l;
	/* Only src makes lane (src, dst): no race to lose. */
	l = aligned_alloc(CBCMN__CACHELINE, sizeof(*l));
	if (!l)
		return NULL;
	memset(l, 0, sizeof(*l));
	/* release: the zeroed lane before its pointer. */
	atomic_store_explicit(&dst->in[src->id], l, memory_order_release);
	return l;
}

/* Producer side: one entry into lane (src, dst); false if it is full. */
static bool lane_put(struct cbcmn__lane *l, uintptr_t ent)
{
	uint32_t tail = atomic_load_explicit(&l->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&l->head, memory_order_acquire);
	if (tail - head >= CBCMN__LANE_CAP)
		return false;
	atomic_store_explicit(&l->slot[tail % CBCMN__LANE_CAP], ent, memory_order_relaxed);
	/* release: the entry (and the message it points to) before the tail. */
	atomic_store_explicit(&l->tail, tail + 1, memory_order_release);
	return true;
}

/* Flag lane src as non-empty for dst.  True if it was the transition (dst
 * must be told); false if dst has the flag already (coalesced).  An
 * acknowledgement wakes nobody, so it has a flag of its own: a message
 * flag set means "dst was told", and a message behind an ack still is. */
static bool mail_flag(struct cbcmn__exec *dst, uint32_t src, bool ack)
{
	uint64_t bit = 1ull << (src % 64);
	/* seq_cst: the lane's tail store before the flag, and the flag before
	 * the park word the unpark reads (wake.c's store-buffering pair). */
	uint64_t old = atomic_fetch_or_explicit(ack ? &dst->ack_bits[src / 64]
						    : &dst->mail_bits[src / 64],
						bit, memory_order_seq_cst);
	if (old & bit)
		return false;
	atomic_store_explicit(&dst->mail_any, 1, memory_order_seq_cst);
	return true;
}

/* Work was posted to dst: it must run.  seq_cst: the post before the look
 * at its state, against try_retire()'s state change before its last look
 * at its mail (sched.c). */
static void ensure_live(struct cbcmn__exec *dst)
{
	struct cbcmn_runtime *rt = dst->rt;
	if (!rt->dynamic)
		return;
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&dst->lstate, memory_order_seq_cst) != CBCMN__EX_RUNNING)
		cbcmn__exec_want(rt, dst->id);
}

static void backlog_add(struct cbcmn__exec *e, uint32_t dst, struct cbcmn__xmsg *m, uintptr_t ent)
{
	m->backlog_ent = ent;
	m->next = NULL;
	if (e->backlog_tail[dst])
		e->backlog_tail[dst]->next = m;
	else
		e->backlog[dst] = m;
	e->backlog_tail[dst] = m;
	e->nbacklog++;
	CBCMN__COUNT(e, ring_msgs_backpressure, 1);
}

/* Put entry ent (message m, maybe tagged as an ack) on lane (e, dst), or
 * behind what is already backlogged for dst; wake dst if wake. */
static void post(struct cbcmn__exec *e, struct cbcmn__exec *dst, struct cbcmn__xmsg *m,
		 uintptr_t ent, bool wake)
{
	struct cbcmn__lane *l = lane_get(e, dst);
	if (!l || e->backlog[dst->id] || !lane_put(l, ent)) {
		backlog_add(e, dst->id, m, ent); /* keeps the order per lane */
		/* The lane may be full of acknowledgements that woke nobody:
		 * wake dst now so that it drains them and makes room. */
		if (mail_flag(dst, e->id, false))
			cbcmn__kick(dst);
		if (wake)
			ensure_live(dst);
		return;
	}
	if (mail_flag(dst, e->id, !wake)) {
		if (wake)
			cbcmn__kick(dst);
	} else if (wake) {
		CBCMN__COUNT(e, doorbells_coalesced, 1);
		CBCMN_PROBE3(doorbell_coalesced, (int)e->id, dst->id, e->rt->seg.rt_id);
	}
	if (wake)
		ensure_live(dst);
}

void cbcmn__backlog_flush(struct cbcmn__exec *e)
{
	for (uint32_t d = 0; d < e->rt->nexec && e->nbacklog; d++) {
		struct cbcmn__xmsg *m = e->backlog[d];
		if (!m)
			continue;
		struct cbcmn__exec *dst = e->rt->exec[d];
		struct cbcmn__lane *l = lane_get(e, dst);
		bool moved = false;
		/* next is read before the entry is published: from then on the
		 * receiver owns m, and may link it on its own backlog. */
		struct cbcmn__xmsg *next;
		while (m && l && (next = m->next, lane_put(l, m->backlog_ent))) {
			e->backlog[d] = next;
			e->nbacklog--;
			m = next;
			moved = true;
		}
		if (!m)
			e->backlog_tail[d] = NULL;
		if (moved && mail_flag(dst, e->id, false))
			cbcmn__kick(dst);
		if (moved)
			ensure_live(dst);
	}
}

/* Fill message m in and send it to dst (a wake: dst must look). */
static void xm_post(struct cbcmn__exec *e, uint32_t dst, struct cbcmn__xmsg *m, uint32_t kind,
		    struct cbcmn_task *t, void (*fn)(struct cbcmn__exec *, void *), void *arg)
{
	m->kind = kind;
	m->src = e->id;
	m->task = t;
	m->fn = fn;
	m->arg = arg;
	CBCMN__COUNT(e, xmsgs_sent, 1);
	CBCMN_PROBE4(xmsg, e->id, dst, kind, e->rt->seg.rt_id);
	post(e, e->rt->exec[dst], m, (uintptr_t)m, true);
}

int cbcmn__xmsg_send(struct cbcmn__exec *e, uint32_t dst, uint32_t kind, struct cbcmn_task *t,
		     void (*fn)(struct cbcmn__exec *, void *), void *arg)
{
	struct cbcmn__xmsg *m = xm_alloc(e);
	if (!m)
		return -ENOMEM;
	xm_post(e, dst, m, kind, t, fn, arg);
	return 0;
}

struct cbcmn__xmsg *cbcmn__xmsg_get(struct cbcmn__exec *e)
{
	return xm_alloc(e);
}

void cbcmn__xmsg_unget(struct cbcmn__exec *e, struct cbcmn__xmsg *m)
{
	m->next = e->xm_free;
	e->xm_free = m;
}

void cbcmn__xmsg_call_post(struct cbcmn__exec *e, uint32_t dst, struct cbcmn__xmsg *m,
			   void (*fn)(struct cbcmn__exec *, void *))
{
	xm_post(e, dst, m, CBCMN__XM_VCALL, NULL, fn, m->data);
}

void cbcmn__xmsg_then(void *data, void (*fn)(struct cbcmn__exec *, void *))
{
	struct cbcmn__xmsg *m =
		(struct cbcmn__xmsg *)((char *)data - offsetof(struct cbcmn__xmsg, data));
	/* A call: the monitor passes over calls (lanes_take()), and the
	 * executor's drain runs it (deliver()).  Left a VCALL with fn set,
	 * the monitor's next rescue of a still stalled executor (the message
	 * stays in the lane until the drain) would run fn on the monitor's
	 * thread, which has no ring: the kind is the mark lanes_take() reads,
	 * so the rewrite stays. */
	m->kind = CBCMN__XM_CALL;
	m->fn = fn;
}

/* Outside threads: work for dst (a task to start or resume). */
void cbcmn__remote_push(struct cbcmn__exec *dst, struct cbcmn_task *t)
{
	struct cbcmn_task *head = atomic_load_explicit(&dst->remote, memory_order_relaxed);
	do
		t->next = head;
	while (!atomic_compare_exchange_weak_explicit(&dst->remote, &head, t, memory_order_release,
						      memory_order_relaxed));
	atomic_store_explicit(&dst->mail_any, 1, memory_order_seq_cst);
	cbcmn__kick(dst);
	ensure_live(dst);
}

/* Take e's remote list, first come first: the owner (cbcmn__mail_drain())
 * or the stall monitor (cbcmn__stall_rescue()), each with an exchange, so
 * each task has one taker.  acquire: pairs with cbcmn__remote_push()'s
 * release. */
static struct cbcmn_task *remote_take(struct cbcmn__exec *e)
{
	struct cbcmn_task *r = atomic_exchange_explicit(&e->remote, NULL, memory_order_acquire);
	struct cbcmn_task *rev = NULL;
	while (r) { /* LIFO as pushed: reverse */
		struct cbcmn_task *n = r->next;
		r->next = rev;
		rev = r;
		r = n;
	}
	return rev;
}

/* Where a rescued task goes: where a thread's wake or spawn goes now
 * (cbcmn__schedule(): not home to a stalled executor, so the inject
 * queue). */
static void rescue_place(struct cbcmn_runtime *rt, struct cbcmn_task *t)
{
	if (t->sp)
		cbcmn__schedule(rt, t, NULL);
	else
		cbcmn__schedule_new(rt, t, NULL);
}

/* Take the tasks out of the messages in x's lanes: the monitor may not
 * consume an entry (x is each lane's one consumer, and the acknowledgement
 * is x's to send on lanes it alone produces to), so it leaves the message,
 * task NULL, for x to acknowledge when it drains.  Pinned tasks and calls
 * stay.  Returns the tasks taken, linked by next. */
static struct cbcmn_task *lanes_take(struct cbcmn__exec *x)
{
	struct cbcmn_task *got = NULL, **tail = &got;
	for (uint32_t s = 0; s < x->rt->nexec; s++) {
		struct cbcmn__lane *l = atomic_load_explicit(&x->in[s], memory_order_acquire);
		if (!l)
			continue;
		/* head is x's, and x is kept out (cbcmn__stall_rescue());
		 * x stored it last before the stalled run began, and the
		 * monitor's acquire load of that run's run_seq (mon_look(),
		 * pairing with run_seq_begin()'s release) makes it visible.
		 * acquire on tail pairs with lane_put()'s release: the
		 * messages before it are whole. */
		uint32_t head = atomic_load_explicit(&l->head, memory_order_relaxed);
		uint32_t end = atomic_load_explicit(&l->tail, memory_order_acquire);
		for (; head != end; head++) {
			uintptr_t ent = atomic_load_explicit(&l->slot[head % CBCMN__LANE_CAP],
							     memory_order_relaxed);
			struct cbcmn__xmsg *m = (struct cbcmn__xmsg *)ent;
			if (!(ent & 1) && m->kind == CBCMN__XM_VCALL && m->fn) {
				/* An actor's message: run here, in the lane's
				 * order (x is kept out), as x would; x then
				 * only acknowledges it, or runs what fn left
				 * for its own thread (cbcmn__xmsg_then()). */
				void (*fn)(struct cbcmn__exec *, void *) = m->fn;
				m->fn = NULL;
				fn(x, m->arg);
				continue;
			}
			if ((ent & 1) || m->kind >= CBCMN__XM_CALL || !m->task ||
			    (m->task->flags & CBCMN__TF_PINNED))
				continue;
			*tail = m->task;
			tail = &m->task->next;
			m->task = NULL;
		}
	}
	*tail = NULL;
	return got;
}

/* The stall monitor, for executor x found stalled in run seq (monitor.c):
 * the tasks sent to x before the stall was seen would wait as long as
 * the stall, forever if the blocked call waits for one of them (issue 15,
 * liveness 2).  What threads sent (its remote list) and what executors
 * sent (its lanes' messages) go where a thread's wake or spawn goes now;
 * pinned tasks stay, they never move.  x is kept out of its lanes
 * meanwhile, a store-buffering pair: we flag rescuing, then look at x's
 * run; x, in cbcmn__mail_drain(), ends its run, then looks at the flag
 * (after its seq_cst fence) and waits for 0.  Either x sees the flag, or
 * we see its run ended and take nothing from its lanes. */
void cbcmn__stall_rescue(struct cbcmn__exec *x, uint64_t seq)
{
	struct cbcmn_runtime *rt = x->rt;
	struct cbcmn_task *t, *n;
	/* The remote list needs no exclusion: one exchange, one taker. */
	for (t = remote_take(x); t; t = n) {
		n = t->next;
		if (t->flags & CBCMN__TF_PINNED)
			cbcmn__remote_push(x, t);
		else
			rescue_place(rt, t);
	}
	atomic_store_explicit(&x->rescuing, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst); /* pairs with cbcmn__mail_drain()'s */
	t = atomic_load_explicit(&x->diag.run_seq, memory_order_relaxed) == seq ? lanes_take(x)
										 : NULL;
	/* release: our m->task = NULL stores before x's drain reads them
	 * (its acquire load of the flag). */
	atomic_store_explicit(&x->rescuing, 0, memory_order_release);
	for (; t; t = n) {
		n = t->next;
		rescue_place(rt, t);
	}
}

void cbcmn__pq_push(struct cbcmn__exec *e, struct cbcmn_task *t)
{
	t->next = NULL;
	if (e->pq_tail)
		e->pq_tail->next = t;
	else
		e->pq_head = t;
	e->pq_tail = t;
}

/* A task that arrived here, new or woken. */
static void take_task(struct cbcmn__exec *e, struct cbcmn_task *t, bool woken)
{
	if (t->flags & CBCMN__TF_PINNED)
		cbcmn__pq_push(e, t);
	else if (woken)
		cbcmn__schedule(e->rt, t, e);
	else
		cbcmn__schedule_new(e->rt, t, e);
}

static void deliver(struct cbcmn__exec *e, struct cbcmn__xmsg *m)
{
	CBCMN__COUNT(e, xmsgs_recv, 1);
	switch (m->kind) {
	case CBCMN__XM_WAKE: /* task NULL: the stall monitor took it (cbcmn__stall_rescue()) */
		if (m->task)
			take_task(e, m->task, true);
		break;
	case CBCMN__XM_SPAWN:
		if (m->task)
			take_task(e, m->task, false);
		break;
	case CBCMN__XM_CALL:
		m->fn(e, m->arg);
		break;
	case CBCMN__XM_VCALL: /* fn NULL: the stall monitor ran it (lanes_take()) */
		if (m->fn)
			m->fn(e, m->arg);
		break;
	}
}

/* The acknowledgement of m: the same pointer, back to its sender dst, in
 * the lane without its flag (one flag for a drain's acknowledgements,
 * lane_drain(): a flag is a locked write to a line dst reads, the lane
 * entries share lines).  True if it needs that flag, false if the lane
 * was full and it went on the backlog, which flagged it (post()). */
static bool ack_put(struct cbcmn__exec *e, struct cbcmn__exec *dst, struct cbcmn__xmsg *m)
{
	uintptr_t ent = (uintptr_t)m | 1;
	struct cbcmn__lane *l = lane_get(e, dst);
	if (l && !e->backlog[dst->id] && lane_put(l, ent))
		return true;
	post(e, dst, m, ent, false);
	return false;
}

static void lane_drain(struct cbcmn__exec *e, struct cbcmn__lane *l, uint32_t src)
{
	struct cbcmn__exec *back = e->rt->exec[src];
	bool acks = false;
	uint32_t head = atomic_load_explicit(&l->head, memory_order_relaxed);
	/* acquire: pairs with lane_put()'s release of the tail. */
	uint32_t tail = atomic_load_explicit(&l->tail, memory_order_acquire);
	while (head != tail) {
		uintptr_t ent = atomic_load_explicit(&l->slot[head % CBCMN__LANE_CAP],
						     memory_order_relaxed);
		head++;
		/* release: the producer may reuse the entry. */
		atomic_store_explicit(&l->head, head, memory_order_release);
		struct cbcmn__xmsg *m = (struct cbcmn__xmsg *)(ent & ~(uintptr_t)1);
		if (ent & 1) {
			m->next = e->xm_free; /* acknowledged: ours again */
			e->xm_free = m;
			CBCMN__COUNT(e, xmsgs_acked, 1);
		} else {
			deliver(e, m);
			acks |= ack_put(e, back, m);
		}
	}
	if (acks)
		mail_flag(back, e->id, true);
}

/* Take everything sent to e.  True if anything came. */
bool cbcmn__mail_drain(struct cbcmn__exec *e)
{
	bool got = false;
	if (atomic_load_explicit(&e->io_cancel, memory_order_relaxed))
		cbcmn__io_cancel_pending(e);
	if (!atomic_load_explicit(&e->mail_any, memory_order_relaxed))
		return false;
	atomic_store_explicit(&e->mail_any, 0, memory_order_relaxed);
	/* seq_cst: clearing the summary before reading the bits, against a
	 * sender's bit-then-summary (mail_flag). */
	atomic_thread_fence(memory_order_seq_cst);
	/* The stall monitor may be taking tasks out of our lanes: after the
	 * fence, the other half of cbcmn__stall_rescue()'s pair (our run
	 * ended before it).  acquire: pairs with its release of the flag. */
	while (__builtin_expect(atomic_load_explicit(&e->rescuing, memory_order_acquire), 0))
		sched_yield(); /* microseconds, unless the monitor is preempted */
	for (struct cbcmn_task *t = remote_take(e), *n; t; t = n) {
		n = t->next;
		take_task(e, t, t->sp != NULL); /* started: woken */
		got = true;
	}
	uint32_t words = (e->rt->nexec + 63) / 64;
	for (uint32_t w = 0; w < words; w++) {
		uint64_t bits = atomic_exchange_explicit(&e->mail_bits[w], 0, memory_order_acquire);
		bits |= atomic_exchange_explicit(&e->ack_bits[w], 0, memory_order_acquire);
		while (bits) {
			uint32_t src = w * 64 + (uint32_t)__builtin_ctzll(bits);
			bits &= bits - 1;
			struct cbcmn__lane *l = atomic_load_explicit(&e->in[src], memory_order_acquire);
			if (l) {
				lane_drain(e, l, src);
				got = true;
			}
		}
	}
	return got;
}
