/* stream.c: multishot receive streams and acceptors (cbcmn_io.h).
 *
 * One SQE keeps delivering: a multishot recv puts each chunk it receives in
 * a buffer it picks from the executor's provided-buffer pool, a multishot
 * accept posts each new connection, and neither re-arms a poll per event.
 * Both share the core below: the executor's CQE handler queues what
 * arrives (a buffer id and length, or a descriptor) on the object and wakes
 * the task waiting on it, if any; the task takes from the queue.
 *
 * The object belongs to the executor whose ring holds its SQE, and only a
 * task running there may use it (-EXDEV elsewhere): use it from a pinned
 * task.  Closing cancels the SQE (and the watch, below) and waits for its
 * last CQE (the one without IORING_CQE_F_MORE) before the object is freed,
 * so no CQE ever points to freed memory; descriptors still queued are
 * closed, buffers go back.
 *
 * Buffers (docs/IO.md, "Buffers"): the streams of an executor share one
 * pool, and each may hold at most its share of it (queued plus the one its
 * task reads): a stream that reaches its share has its SQE cancelled and is
 * re-armed only when its task has emptied its queue, so a stream whose task
 * is busy leaves the rest of the pool to the others.  The pool grows with
 * the number of streams (share each), and when a stream finds it empty
 * anyway (a stream may overshoot its share by what its socket held when the
 * kernel last ran its receive), up to stream_bufs_max.  A stream that finds
 * the pool empty and at its limit, with data waiting, waits without polling
 * in a FIFO of starved streams: each buffer that comes back is the turn of
 * the longest waiting.  One with nothing waiting needs no buffer yet: it
 * waits for its socket, whose data puts it in line and whose end ends it.
 *
 * An acceptor whose accept fails for a cause that passes (out of
 * descriptors or memory, a connection aborted before it was taken) backs
 * off, 1 ms doubling to 100 ms, and accepts again; the connections wait in
 * the listen backlog meanwhile.  Each such failure counts in accept_errors
 * and fires the accept_error probe.  An acceptor holds at most
 * ACCEPT_QUEUE_MAX connections its task has not taken (more by what one
 * pass of the kernel accepted): then its accept is cancelled until the
 * task has taken them all, and the listen backlog holds the rest.
 *
 * Waiting for something other than its SQE (its socket, the end of a
 * pause) an object has a second SQE, its watch: a one-shot poll or
 * timeout, whose user_data is marked with MS_WATCH.  Its CQE comes to the
 * executor like the others, so only the executor ends a task's wait on
 * the object, and a timeout is in real time even in lab mode, where the
 * runtime's clock would jump over a pause that waits for the world outside.
 *
 * Ownership (docs/IO.md, "Who closes a stream"): an object is its opener's
 * (m->owner) until another task makes a call on it.  An opener unwound
 * closes what it still owns as it lands (cbcmn__mshot_unwound(), as an
 * ending task's reservations are aborted); destroy frees whatever is still
 * open (cbcmn__mshot_fini()).
 *
 * A task inside a call on an object may be moved to another executor while
 * it waits (an unpinned task: stolen, or woken elsewhere after a wait for
 * budget).  It then touches the object no more: the call returns -EXDEV,
 * and the object's executor releases it (ms_release_there()).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "env.h"
#include "epoll.h"
#include "iwait.h"
#include "probes.h"
#include "runtime.h"

#define BUFPOOL_BGID 0
/* Incremental consumption of the pool's buffers (Linux 6.12): the uapi's
 * IOU_PBUF_RING_INC and IORING_CQE_F_BUF_MORE, which older headers lack
 * (and newer ones declare in an enum, which #ifndef cannot see). */
#define POOL_RING_INC 2u
#define POOL_CQE_BUF_MORE (1u << 4)
#define BUFPOOL_CHUNK_BYTES (1u << 20) /* a pool grows a mapping of this size at a time */
#define MS_QUEUE_MIN 16u
#define BACKOFF_MIN_NS 1000000ull   /* the first pause after a failed accept or growth */
#define BACKOFF_MAX_NS 100000000ull /* doubled per failure in a row, up to this */
#define ACCEPT_QUEUE_MAX 64u /* connections an acceptor holds before it stops accepting */
/* In the user_data of an object's watch SQE, and of a stream's send,
 * beside the tag: the objects are aligned to MS_ALIGN (ms_alloc()), so the
 * bits are free in their address. */
#define MS_WATCH 8u
#define MS_SEND 16u
#define MS_ALIGN 32u

/* An acceptor's pause after a failed accept. */
enum { PAUSE_NONE, PAUSE_DUE, PAUSE_TIMING };

enum { MS_STREAM, MS_ACCEPT };

struct ms_item {
	uint32_t val; /* buffer id, or descriptor */
	uint32_t len;
	uint32_t off; /* where the chunk begins in its buffer (0 unless the pool is incremental) */
};

struct cbcmn__mshot {
	struct cbcmn__exec *e;
	int fd;
	int32_t slot;          /* stream: fd's slot in e's fixed-file table, -1 none */
	uint32_t kind;
	bool armed;            /* its SQE may still post CQEs */
	bool done;             /* ended for good: err says why (0: EOF) */
	bool cancel_sent;      /* its SQE is being cancelled (close, or over its share) */
	bool nobufs;           /* its SQE ended for want of buffers */
	bool busy;             /* a task is inside a call on it (ms_next, ms_close) */
	bool closing;          /* closed by a task moved away: its last CQE frees it */
	bool starved;          /* stream: on its pool's starved list */
	bool watch_armed;      /* its watch SQE (a poll or a timeout) is yet to post its CQE */
	bool watch_cancel_sent; /* ... and is being cancelled */
	uint8_t pause;         /* acceptor: PAUSE_* */
	bool turn;             /* stream: woken for a buffer it has not asked for yet */
	int32_t err;
	uint64_t owner;        /* id of the task that opened it, while no other task has made
				* a call on it (0: handed over): closed if that task is
				* unwound (cbcmn__mshot_unwound()) */
	struct ms_item *q;     /* arrived, not yet taken: FIFO ring */
	uint32_t qhead, qlen, qcap;
	struct cbcmn__iwait *waiter; /* a task waiting for an item or the end */
	struct cbcmn__mshot *prev, *next; /* the executor's list (cancellation) */
	struct cbcmn__mshot *sprev, *snext; /* its pool's starved list */
	struct cbcmn__bufpool *pool; /* stream: where its buffers come from */
	int32_t held;          /* stream: buffer id the user holds, -1 none */
	uint32_t held_len;     /* ... and the length of the chunk in it */
	uint32_t held_off;     /* ... and where it begins */
	/* A stream's send (cbcmn_stream_send()): one at a time, so that bytes
	 * go out in order.  Its buffer is the stream's until the kernel has
	 * taken [send_off, send_end) of it. */
	int32_t send_bid;      /* its buffer, -1: no send */
	uint32_t send_off, send_end;
	int send_flags;
	int32_t send_err;      /* a send that failed, for the stream's next call */
	bool send_armed;       /* its SQE is yet to post its CQE */
	bool send_cancel_sent; /* ... and is being cancelled (close) */
	bool send_waiting;     /* the task waits for it to end (the next send) */
	uint32_t accept_flags;
	uint64_t backoff_ns;   /* its last pause (acceptor: after a failed accept; stream:
				* starved, after a failed growth), 0 after a success */
	struct __kernel_timespec watch_ts; /* a timeout watch's, read at its submission */
};

struct cbcmn_stream {
	struct cbcmn__mshot ms;
};

struct cbcmn_acceptor {
	struct cbcmn__mshot ms;
};

/* ---- the executor's provided-buffer pool ------------------------------------ */

/* One buffer ring, registered with the executor's ring as group
 * BUFPOOL_BGID and sized for the most buffers the pool may have; the
 * buffers themselves are mapped a chunk at a time as the pool grows.
 *
 * Incremental (IOU_PBUF_RING_INC, where the kernel has it): a receive
 * takes only the bytes it needs of the buffer at the ring's head, and the
 * next receive, of any stream, goes on from there; the buffer leaves the
 * ring when it is full (its last CQE lacks IORING_CQE_F_BUF_MORE).  Small
 * receives then share pages instead of touching one each (docs/IO.md,
 * "Buffers").  The kernel says no offset: the CQEs of the group come in
 * the order the kernel filled the buffer, so each buffer's fill counts
 * where the next chunk begins.  A buffer goes back to the ring once the
 * kernel is done with it and every chunk in it was given back. */
struct pbuf_use {
	uint32_t fill;  /* bytes the kernel has put in it since it was provided */
	uint32_t refs;  /* its chunks queued, held or being sent */
	bool full;      /* the kernel is done with it */
};

struct cbcmn__bufpool {
	struct io_uring_buf_ring *br;
	size_t br_bytes;
	uint32_t mask;         /* ring entries - 1 */
	uint32_t size, share, max; /* cbcmn_config.stream_buf_size, _share, stream_bufs_max */
	uint32_t chunk_shift;  /* log2 of buffers per chunk */
	uint32_t n;            /* buffers provided so far: chunks [0, n >> chunk_shift] */
	uint32_t out;          /* taken by the kernel (CQE reaped; incremental: its last),
				* not given back yet */
	bool inc;              /* incremental: chunks packed in the buffers */
	struct pbuf_use *use;  /* incremental: per buffer id */
	uint32_t streams;      /* streams drawing from it */
	uint32_t promised;     /* starved streams woken for a buffer, not re-armed yet */
	char **chunk;
	struct cbcmn__mshot *starved, *starved_tail; /* FIFO */
	struct cbcmn__bufpool *dead; /* the next pool of a dead thread's ring */
};

static char *buf_addr(const struct cbcmn__bufpool *p, uint32_t bid)
{
	uint32_t per = 1u << p->chunk_shift;
	return p->chunk[bid >> p->chunk_shift] + (size_t)(bid & (per - 1)) * p->size;
}

/* Buffers the kernel may still pick, as far as the CQEs reaped tell: never
 * fewer than it really has (one it took shows up at the next reap). */
static uint32_t pool_free(const struct cbcmn__bufpool *p)
{
	return p->n - p->out;
}

/* Map and provide buffers until the pool has want (at most max).  0, or
 * -ENOMEM when it stopped short. */
static int pool_grow(struct cbcmn__bufpool *p, uint32_t want)
{
	if (want > p->max)
		want = p->max;
	while (p->n < want) {
		uint32_t per = 1u << p->chunk_shift;
		uint32_t k = p->max - p->n < per ? p->max - p->n : per;
		/* Populated now: the ring hands the buffers out in turn, so
		 * a busy pool touches every one of them soon, and a page the
		 * receive's copy faults in costs several times as much
		 * (docs/BENCHMARKS.md, "Eighteenth session"). */
		char *mem = cbcmn__mmap(NULL, (size_t)k * p->size, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		if (mem == MAP_FAILED)
			return -ENOMEM;
		p->chunk[p->n >> p->chunk_shift] = mem;
		for (uint32_t i = 0; i < k; i++)
			io_uring_buf_ring_add(p->br, mem + (size_t)i * p->size, p->size,
					      (unsigned short)(p->n + i), (int)p->mask, (int)i);
		/* Publishes the entries to the kernel (a release store of the
		 * ring's tail, which the kernel reads with acquire). */
		io_uring_buf_ring_advance(p->br, (int)k);
		p->n += k;
	}
	return 0;
}

static void pool_free_mem(struct cbcmn__bufpool *p)
{
	uint32_t per = 1u << p->chunk_shift;
	for (uint32_t c = 0; c * per < p->n; c++) {
		uint32_t k = p->n - c * per < per ? p->n - c * per : per;
		munmap(p->chunk[c], (size_t)k * p->size);
	}
	munmap(p->br, p->br_bytes);
	free(p->use);
	free(p->chunk);
	free(p);
}

/* The registration's flags: the u16 after bgid, "pad" in older headers
 * (which the kernel before 6.12 checks is 0), "flags" in newer. */
static void buf_reg_flags(struct io_uring_buf_reg *reg, uint16_t flags)
{
	_Static_assert(sizeof(*reg) == 40 && offsetof(struct io_uring_buf_reg, bgid) == 12,
		       "struct io_uring_buf_reg: the uapi layout");
	memcpy((char *)reg + 14, &flags, sizeof(flags));
}

/* CBCMN_PBUF_INC: unset, empty or 1, incremental buffers where the
 * kernel has them; 0, whole buffers (a comparison, a test).  Anything else
 * is refused, as CBCMN_BACKEND's and CBCMN_CLOCK's unknown values are,
 * rather than taken for one or the other.  Read here, once, not by the
 * executor that opens its first stream, whose getenv could race the
 * program's setenv. */
int cbcmn__pbuf_env(struct cbcmn_runtime *rt)
{
	const char *v = cbcmn__env("CBCMN_PBUF_INC");
	rt->pbuf_whole = v && strcmp(v, "0") == 0;
	if (!v || !*v || rt->pbuf_whole || strcmp(v, "1") == 0)
		return 0;
	fprintf(stderr, "cbcmn: CBCMN_PBUF_INC=%.40s: not 0 or 1\n", v);
	return -EINVAL;
}

/* Incremental buffers wanted: on a ring (the epoll backend hands whole
 * buffers out), unless CBCMN_PBUF_INC=0 says not. */
static bool pool_want_inc(const struct cbcmn__exec *e)
{
	return !e->ep && !e->rt->pbuf_whole;
}

/* Register p's buffer ring with r: entries for up to p->max buffers, or as
 * many as fit in locked memory, incremental if the kernel takes the flag
 * (before 6.12 it says -EINVAL: asked again without).  For a user
 * without CAP_IPC_LOCK the kernel counts the ring's pages against RLIMIT_MEMLOCK (as it counts the
 * rings', docs/IO.md "Rings"), and says -ENOMEM when they do not fit: then
 * half as many entries, down to one page's worth, and the pool's limit
 * with them.  0, or the error (CBCMN_EMEMLOCK when even a page does not
 * fit). */
static int pool_register(struct cbcmn__exec *e, struct cbcmn__bufpool *p)
{
	struct cbcmn__ring *r = &e->ring;
	const uint32_t page_entries = 4096 / sizeof(struct io_uring_buf);
	uint32_t entries = 1;
	while (entries < p->max)
		entries <<= 1;
	p->inc = p->use != NULL; /* pool_get(): pool_want_inc() */
	for (;;) {
		p->br_bytes = (size_t)entries * sizeof(struct io_uring_buf);
		p->br = cbcmn__mmap(NULL, p->br_bytes, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p->br == MAP_FAILED)
			return -ENOMEM;
		io_uring_buf_ring_init(p->br);
		struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)p->br,
					       .ring_entries = entries,
					       .bgid = BUFPOOL_BGID};
		if (p->inc)
			buf_reg_flags(&reg, POOL_RING_INC);
		/* No ring: the epoll backend takes buffers from it as the
		 * kernel would (epoll_sq.c). */
		int rc = 0;
		if (e->ep)
			cbcmn__ep_buf_ring(e, p->br, entries);
		else if (p->inc && CBCMN__FAULT(CBCMN__F_PBUF_INC))
			rc = -EINVAL; /* tests: the fallback, as before 6.12 */
		else
			rc = io_uring_register_buf_ring(&r->u, &reg, 0);
		if (rc == 0)
			break;
		munmap(p->br, p->br_bytes);
		p->br = MAP_FAILED;
		if (rc == -EINVAL && p->inc) {
			p->inc = false;
			continue;
		}
		if (rc != -ENOMEM || entries <= page_entries)
			return rc == -EINVAL ? -EOPNOTSUPP : cbcmn__ring_error(rc);
		entries /= 2;
	}
	p->mask = entries - 1;
	if (p->max > entries)
		p->max = entries;
	if (p->share > p->max)
		p->share = p->max;
	return 0;
}

/* ---- fixed files ---------------------------------------------------------------- *
 *
 * A stream's socket is registered in its executor's fixed-file table while
 * it is open, and its recv and sends name the slot (IOSQE_FIXED_FILE): the
 * kernel then takes no file reference per request (io_file_get_normal()
 * and fput(), about 1 % of an echo server's CPU).  Two io_uring_register
 * calls a stream (its open and its free) pay for that.  Only where a slot
 * dropped lets its file go at once (ring.c, cbcmn__fixed_drop_is_prompt():
 * 6.13 on, asked at the first stream), else a closed stream's socket
 * could stay open beside an older stream's recv; never on the epoll
 * backend.  The watch and the peek use
 * the descriptor: rare, and a table full (FIXED_SLOTS, or RLIMIT_NOFILE
 * when lower) leaves further streams on their descriptors.  The slot holds
 * the file as a request would: the program's close(2) of a stream's socket
 * while the stream is open closes nothing until the stream does, as
 * before (its recv held the file). */

#define FIXED_SLOTS 1024u /* 8 bytes of kernel memory each (its node pointer) */

bool cbcmn__fixed_files(const struct cbcmn_runtime *rt)
{
	return rt->ring_caps.fixed_files && cbcmn__fixed_drop_is_prompt();
}

/* e's table, registered sparse on first use: 0, or why not. */
static int fixed_table(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	if (r->fslots_tried)
		return r->fslots_cap ? 0 : -ENFILE;
	r->fslots_tried = true;
	struct rlimit rl;
	uint32_t cap = FIXED_SLOTS;
	/* The kernel refuses a table above RLIMIT_NOFILE (-EMFILE). */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < cap)
		cap = (uint32_t)rl.rlim_cur;
	uint32_t *slots = cap ? cbcmn__calloc(cap, sizeof(*slots)) : NULL;
	/* The kernel short of memory for the table (-ENOMEM: it is charged
	 * to the memory cgroup; a kernel without sparse tables, before 5.19,
	 * never gets here: cbcmn__fixed_files() said no at 6.12 and before):
	 * every stream of e on its descriptor. */
	if (!slots || CBCMN__FAULT(CBCMN__F_FIXED) ||
	    io_uring_register_files_sparse(&r->u, cap) != 0) {
		free(slots);
		return -ENFILE;
	}
	for (uint32_t i = 0; i < cap; i++)
		slots[i] = cap - 1 - i; /* the lowest slot on top */
	r->fslots = slots;
	r->fslots_free = r->fslots_cap = cap;
	return 0;
}

/* A slot of e's table holding fd, or -1: m then uses fd itself. */
static int32_t fixed_get(struct cbcmn__exec *e, int fd)
{
	if (!cbcmn__fixed_files(e->rt) || fixed_table(e) != 0 || !e->ring.fslots_free)
		return -1;
	struct cbcmn__ring *r = &e->ring;
	uint32_t slot = r->fslots[r->fslots_free - 1];
	/* fd is no descriptor (-EBADF: the recv will say so), or the kernel
	 * is short of memory for the slot's node: fd serves. */
	if (CBCMN__FAULT(CBCMN__F_FIXED) || io_uring_register_files_update(&r->u, slot, &fd, 1) != 1)
		return -1;
	r->fslots_free--;
	return (int32_t)slot;
}

/* m's slot given back, its file let go, once no request of m's is in the
 * kernel (ms_free()): none queued either, so no SQE submitted later names
 * the slot when the next stream's io_uring_register has filled it. */
static void fixed_put(struct cbcmn__exec *e, struct cbcmn__mshot *m)
{
	if (m->slot < 0)
		return;
	struct cbcmn__ring *r = &e->ring;
	int none = -1;
	/* A slot that cannot be emptied (never seen: removal allocates
	 * nothing) is not reused; its file goes with the ring. */
	if (!CBCMN__FAULT(CBCMN__F_FIXED) &&
	    io_uring_register_files_update(&r->u, (unsigned)m->slot, &none, 1) == 1)
		r->fslots[r->fslots_free++] = (uint32_t)m->slot;
	m->slot = -1;
}

/* The table went with its ring (closed, or its thread died): the next
 * stream registers a new one. */
static void fixed_forget(struct cbcmn__ring *r)
{
	free(r->fslots);
	r->fslots = NULL;
	r->fslots_free = r->fslots_cap = 0;
	r->fslots_tried = false;
}

/* The descriptor of m's requests on the ring: its slot, if it has one. */
static void ms_sqe_file(struct io_uring_sqe *sqe, const struct cbcmn__mshot *m)
{
	if (m->slot >= 0) {
		sqe->fd = m->slot;
		sqe->flags |= IOSQE_FIXED_FILE;
	}
}

/* e's pool, made (and registered with its ring) on first use. */
static int pool_get(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	if (r->pool)
		return 0;
	if (!e->rt->ring_caps.multishot_recv)
		return -EOPNOTSUPP;
	const cbcmn_config *cfg = &e->rt->cfg;
	struct cbcmn__bufpool *p = cbcmn__calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->size = cfg->stream_buf_size;
	p->share = cfg->stream_buf_share;
	p->max = cfg->stream_bufs_max;
	uint32_t per = BUFPOOL_CHUNK_BYTES / p->size;
	while (per > 1 && (1u << (p->chunk_shift + 1)) <= per)
		p->chunk_shift++;
	p->chunk = cbcmn__calloc((p->max >> p->chunk_shift) + 1, sizeof(char *));
	/* Without memory for the counts a pool is whole buffers. */
	if (p->chunk && pool_want_inc(e))
		p->use = cbcmn__calloc(p->max, sizeof(*p->use));
	int rc = p->chunk ? pool_register(e, p) : -ENOMEM;
	if (rc) {
		free(p->use);
		free(p->chunk);
		free(p);
		return rc;
	}
	r->pool = p;
	return 0;
}

static void starved_remove(struct cbcmn__bufpool *p, struct cbcmn__mshot *m)
{
	if (m->sprev)
		m->sprev->snext = m->snext;
	else
		p->starved = m->snext;
	if (m->snext)
		m->snext->sprev = m->sprev;
	else
		p->starved_tail = m->sprev;
	m->sprev = m->snext = NULL;
	m->starved = false;
}

static void ms_event(struct cbcmn__exec *e, struct cbcmn__mshot *m);
static bool ms_closed(struct cbcmn__mshot *m);

/* Buffers are free: wake the starved streams in the order they began to
 * wait, each promised a buffer, as long as there are buffers no woken
 * stream has been promised. */
static void pool_wake(struct cbcmn__exec *e, struct cbcmn__bufpool *p)
{
	struct cbcmn__mshot *m = p->starved;
	while (m && pool_free(p) > p->promised) {
		struct cbcmn__mshot *next = m->snext;
		starved_remove(p, m);
		m->turn = true;
		p->promised++;
		ms_event(e, m);
		m = next;
	}
}

/* A woken starved stream re-arms, or gives up its turn. */
static void turn_used(struct cbcmn__mshot *m)
{
	if (m->turn) {
		m->turn = false;
		m->pool->promised--;
	}
}

static void buf_return(struct cbcmn__exec *e, struct cbcmn__bufpool *p, uint32_t bid)
{
	io_uring_buf_ring_add(p->br, buf_addr(p, bid), p->size, (unsigned short)bid, (int)p->mask,
			      0);
	io_uring_buf_ring_advance(p->br, 1); /* release: as in pool_grow() */
	p->out--;
	pool_wake(e, p);
}

/* A chunk of res bytes the kernel put in buffer bid (a CQE's, flags): where
 * it begins in the buffer.  The buffer counts as out of the ring when the
 * kernel is done with it: at once for a whole-buffer pool, at its last
 * chunk for an incremental one. */
static uint32_t chunk_take(struct cbcmn__bufpool *p, uint32_t bid, int32_t res, uint32_t flags)
{
	if (!p->inc) {
		p->out++;
		return 0;
	}
	struct pbuf_use *u = &p->use[bid];
	uint32_t off = u->fill;
	u->fill += (uint32_t)res;
	u->refs++;
	if (!(flags & POOL_CQE_BUF_MORE)) {
		u->full = true;
		p->out++;
	}
	return off;
}

/* A chunk of buffer bid given back (read, sent, or dropped): the buffer
 * goes back to the ring when it holds no other and the kernel is done
 * with it. */
static void chunk_put(struct cbcmn__exec *e, struct cbcmn__bufpool *p, uint32_t bid)
{
	if (p->inc) {
		struct pbuf_use *u = &p->use[bid];
		if (--u->refs || !u->full)
			return;
		*u = (struct pbuf_use){0};
	}
	buf_return(e, p, bid);
}

static char *chunk_addr(const struct cbcmn__bufpool *p, uint32_t bid, uint32_t off)
{
	return buf_addr(p, bid) + off;
}

void cbcmn__bufpool_state(const struct cbcmn__exec *e, struct cbcmn__pool_state *st)
{
	const struct cbcmn__bufpool *p = e->ring.pool;
	*st = (struct cbcmn__pool_state){0};
	if (!p)
		return;
	st->inc = p->inc;
	st->bufs = p->n;
	st->out = p->out;
	for (uint32_t i = 0; p->inc && i < p->n; i++)
		st->chunks += p->use[i].refs;
}

/* No stream is open on e any more: unmap its buffers, and those of rings
 * its dead threads left (cbcmn__bufring_retire()). */
void cbcmn__bufring_fini(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	while (r->dead_pools) {
		struct cbcmn__bufpool *next = r->dead_pools->dead;
		pool_free_mem(r->dead_pools);
		r->dead_pools = next;
	}
	if (r->pool)
		pool_free_mem(r->pool);
	r->pool = NULL;
	fixed_forget(r);
}

/* The ring the buffers were registered with died with its thread: the next
 * stream gets a new pool.  The old memory stays mapped until no stream is
 * open (cbcmn__bufring_fini()), since a task may still read the buffer it
 * holds; its streams end (cbcmn__mshot_orphan_all()). */
void cbcmn__bufring_retire(struct cbcmn__exec *e)
{
	struct cbcmn__ring *r = &e->ring;
	struct cbcmn__bufpool *p = r->pool;
	fixed_forget(r); /* its streams' slots too: cbcmn__mshot_orphan_all() */
	if (!p)
		return;
	p->starved = p->starved_tail = NULL;
	p->promised = 0;
	p->dead = r->dead_pools;
	r->dead_pools = p;
	r->pool = NULL;
}

/* ---- the shared core ----------------------------------------------------------- */

static int ms_push(struct cbcmn__mshot *m, uint32_t val, uint32_t len, uint32_t off)
{
	if (m->qlen == m->qcap) {
		uint32_t cap = m->qcap ? m->qcap * 2 : MS_QUEUE_MIN;
		struct ms_item *q = cbcmn__malloc(cap * sizeof(*q));
		if (!q)
			return -ENOMEM;
		for (uint32_t i = 0; i < m->qlen; i++)
			q[i] = m->q[(m->qhead + i) % m->qcap];
		free(m->q);
		m->q = q;
		m->qhead = 0;
		m->qcap = cap;
	}
	m->q[(m->qhead + m->qlen) % m->qcap] = (struct ms_item){val, len, off};
	m->qlen++;
	return 0;
}

static struct ms_item ms_pop(struct cbcmn__mshot *m)
{
	struct ms_item it = m->q[m->qhead];
	m->qhead = (m->qhead + 1) % m->qcap;
	m->qlen--;
	return it;
}

/* Something happened on m (a CQE, or the end of its ring): wake its
 * waiter, ours to wake if we claim it, or if cancellation claimed it but
 * left the wake to us (on_cancel: closing waits for the last CQE).  A wait
 * that cancellation woke itself is not touched again. */
static void ms_event(struct cbcmn__exec *e, struct cbcmn__mshot *m)
{
	struct cbcmn__iwait *w = m->waiter;
	if (w && (cbcmn__iwait_claim(w) || w->on_cancel)) {
		m->waiter = NULL;
		cbcmn__iwait_wake(w, e);
	}
}

/* Buffers m holds: queued, and the one its task reads. */
static uint32_t ms_bufs(const struct cbcmn__mshot *m)
{
	return m->qlen + (m->held >= 0) + (m->send_bid >= 0);
}

/* Have the kernel cancel m's request marked ud: no CQE of the cancel's own
 * (the request's last one says what happened). */
static void ms_cancel_ud(struct cbcmn__mshot *m, uint64_t ud)
{
	struct io_uring_sqe *sqe = cbcmn__ring_sqe(m->e);
	io_uring_prep_cancel64(sqe, ud, 0);
	io_uring_sqe_set_data64(sqe, CBCMN__UD_IGNORE);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
}

/* Have m's SQE cancelled (its last CQE then ends it). */
static void ms_cancel(struct cbcmn__mshot *m)
{
	if (m->cancel_sent)
		return;
	ms_cancel_ud(m, (uint64_t)(uintptr_t)m | CBCMN__UD_MSHOT);
	m->cancel_sent = true;
}

static uint64_t ms_watch_ud(const struct cbcmn__mshot *m)
{
	return (uint64_t)(uintptr_t)m | MS_WATCH | CBCMN__UD_MSHOT;
}

/* Watch stream m's socket for data or its end: one CQE, then ms_event(). */
static void ms_watch_socket(struct cbcmn__mshot *m)
{
	struct io_uring_sqe *sqe = cbcmn__ring_sqe(m->e);
	io_uring_prep_poll_add(sqe, m->fd, POLLIN | POLLRDHUP);
	io_uring_sqe_set_data64(sqe, ms_watch_ud(m));
	m->watch_armed = true;
	m->watch_cancel_sent = false;
}

/* An event for m in ns: one CQE, then ms_event(). */
static void ms_watch_time(struct cbcmn__mshot *m, uint64_t ns)
{
	m->watch_ts.tv_sec = (long long)(ns / 1000000000u);
	m->watch_ts.tv_nsec = (long long)(ns % 1000000000u);
	struct io_uring_sqe *sqe = cbcmn__ring_sqe(m->e);
	io_uring_prep_timeout(sqe, &m->watch_ts, 0, 0);
	io_uring_sqe_set_data64(sqe, ms_watch_ud(m));
	m->watch_armed = true;
	m->watch_cancel_sent = false;
}

/* Have m's watch cancelled, if it is armed (its CQE then says so). */
static void ms_watch_cancel(struct cbcmn__mshot *m)
{
	if (!m->watch_armed || m->watch_cancel_sent)
		return;
	ms_cancel_ud(m, ms_watch_ud(m));
	m->watch_cancel_sent = true;
}

/* ---- a stream's send ------------------------------------------------------------ */

static uint64_t ms_send_ud(const struct cbcmn__mshot *m)
{
	return (uint64_t)(uintptr_t)m | MS_SEND | CBCMN__UD_MSHOT;
}

/* Send what is left of stream m's send: one SQE, then send_cqe(). */
static void send_arm(struct cbcmn__mshot *m)
{
	struct io_uring_sqe *sqe = cbcmn__ring_sqe(m->e);
	uint32_t len = m->send_end - m->send_off;
	if (len > 1 && CBCMN__FAULT(CBCMN__F_IO_SHORT))
		len /= 2; /* a short send, as the kernel may make any (fault.h) */
	io_uring_prep_send(sqe, m->fd, buf_addr(m->pool, (uint32_t)m->send_bid) + m->send_off,
			   len, m->send_flags);
	ms_sqe_file(sqe, m);
	io_uring_sqe_set_data64(sqe, ms_send_ud(m));
	m->send_armed = true;
	m->send_cancel_sent = false;
}

/* Have m's send cancelled, if it is in flight (a peer that reads nothing
 * would keep it, and the close waiting for it, for ever). */
static void send_cancel(struct cbcmn__mshot *m)
{
	if (!m->send_armed || m->send_cancel_sent)
		return;
	ms_cancel_ud(m, ms_send_ud(m));
	m->send_cancel_sent = true;
}

/* Why m's send stopped with bytes left, its CQE res: its ring died, or
 * its close cancelled it (the kernel's -ECANCELED, or a short send that
 * came as the cancel was asked for: not continued), or the kernel's
 * error.  0 bytes for a non-empty send is not a stream socket's answer. */
static int32_t send_failure(const struct cbcmn__mshot *m, int32_t res, bool alive)
{
	if (!alive || (res >= 0 && (m->send_cancel_sent || m->closing)))
		return -ECANCELED;
	return res < 0 ? res : -EIO;
}

/* The CQE of m's send (res), or its loss with a dead ring (!alive): a
 * short send goes on from where it stopped, as send_all loops do; at its
 * end the buffer goes back, and a failure waits in send_err for the
 * stream's next call.  True if the task must look: an error to report, a
 * send waiting for this one, or a close. */
static bool send_cqe(struct cbcmn__exec *e, struct cbcmn__mshot *m, int32_t res, bool alive)
{
	m->send_armed = false;
	if (res > 0)
		m->send_off += (uint32_t)res;
	bool rest = m->send_off < m->send_end;
	if (rest && res > 0 && alive && !m->send_cancel_sent && !m->closing) {
		send_arm(m);
		return false;
	}
	if (rest && !m->send_err)
		m->send_err = send_failure(m, res, alive);
	chunk_put(e, m->pool, (uint32_t)m->send_bid);
	m->send_bid = -1;
	return m->send_err || m->send_waiting || m->send_cancel_sent; /* (a closer) */
}

/* A stream's CQE: a chunk in a buffer, the end, or why it stopped. */
static void stream_cqe(struct cbcmn__exec *e, struct cbcmn__mshot *m, int32_t res, uint32_t flags)
{
	struct cbcmn__bufpool *p = m->pool;
	/* (A receive that got nothing gives its buffer back to the ring
	 * untouched, and its CQE names none: the check is for a kernel
	 * that would, whose incremental buffer would not have moved.) */
	if ((flags & IORING_CQE_F_BUFFER) && (res > 0 || !p->inc)) {
		uint32_t bid = flags >> IORING_CQE_BUFFER_SHIFT;
		uint32_t off = chunk_take(p, bid, res, flags);
		if (res > 0 && !m->done && ms_push(m, bid, (uint32_t)res, off) == 0) {
			/* Over its share: stop receiving until the task has
			 * emptied its queue (ms_next() re-arms), and leave the
			 * rest of the pool to the other streams. */
			if (m->armed && ms_bufs(m) >= p->share)
				ms_cancel(m);
			return;
		}
		chunk_put(e, p, bid);
		if (res > 0 && !m->done) {
			m->done = true;
			m->err = -ENOMEM;
			if (m->armed)
				ms_cancel(m);
		}
	}
	if (res == 0) {
		m->done = true; /* EOF */
	} else if (res == -ENOBUFS) {
		/* The pool was empty when data came: ms_next() re-arms when a
		 * buffer is free, or grows the pool, or waits for one. */
		m->nobufs = true;
		CBCMN__COUNT(e, ring_msgs_backpressure, 1);
	} else if (res < 0 && !(m->cancel_sent && res == -ECANCELED)) {
		m->done = true;
		m->err = res;
	}
}

/* The next pause of m after a failure that passes: 1 ms, doubling per
 * failure in a row up to 100 ms. */
static uint64_t ms_backoff(struct cbcmn__mshot *m)
{
	uint64_t b = m->backoff_ns ? m->backoff_ns * 2 : BACKOFF_MIN_NS;
	m->backoff_ns = b < BACKOFF_MAX_NS ? b : BACKOFF_MAX_NS;
	return m->backoff_ns;
}

/* Accept errors that pass: the process (or the system) is out of
 * descriptors or memory, and the connection waits in the backlog until it
 * is not; or the connection went away before it was taken (accept(2): to
 * be treated like EAGAIN). */
bool cbcmn__accept_transient(int32_t res)
{
	switch (-res) {
	case EMFILE: case ENFILE: case ENOMEM: case ENOBUFS:
	case ECONNABORTED: case EPROTO: case ENETDOWN: case ENETUNREACH: case EHOSTDOWN:
	case EHOSTUNREACH: case ENONET: case ENOPROTOOPT: case EAGAIN: case EINTR:
		return true;
	default:
		return false;
	}
}

/* An acceptor's CQE: a connection, or why its SQE stopped. */
static void accept_cqe(struct cbcmn__exec *e, struct cbcmn__mshot *m, int32_t res)
{
	if (res >= 0) {
		m->backoff_ns = 0;
		if (ms_push(m, (uint32_t)res, 0, 0) != 0)
			close(res); /* no room to queue it: refuse it, never leak */
		/* Its task is not taking them: leave the rest in the listen
		 * backlog (the kernel's back-pressure) rather than turn them
		 * into descriptors of ours; armed again when the queue is
		 * empty (ms_next()). */
		if (m->armed && m->qlen >= ACCEPT_QUEUE_MAX)
			ms_cancel(m);
	} else if (m->cancel_sent && res == -ECANCELED) {
		/* closing */
	} else if (cbcmn__accept_transient(res)) {
		/* Not the end: ms_next() arms it again after the pause (a
		 * server at its descriptor limit meets EMFILE first). */
		ms_backoff(m);
		m->pause = PAUSE_DUE;
		CBCMN__COUNT(e, accept_errors, 1);
		CBCMN_PROBE4(accept_error, e->id, -res, m->backoff_ns, e->rt->seg.rt_id);
	} else {
		m->done = true;
		m->err = res;
	}
}

/* Executor side: a CQE of m's SQE (or of its watch: m marked with
 * MS_WATCH). */
void cbcmn__mshot_cqe(struct cbcmn__exec *e, struct cbcmn__mshot *m, int32_t res, uint32_t flags)
{
	uintptr_t bits = (uintptr_t)m & (MS_WATCH | MS_SEND);
	m = (struct cbcmn__mshot *)((uintptr_t)m & ~bits);
	if (bits & MS_SEND) {
		/* A send done: no wake for the task (which went on after it
		 * was queued) unless it has something to see. */
		if (!send_cqe(e, m, res, true) && !m->closing)
			return;
	} else if (bits & MS_WATCH) {
		/* Its socket is ready, its time has come, or the watch was
		 * cancelled: its one CQE.  The task looks again. */
		m->watch_armed = m->watch_cancel_sent = false;
	} else {
		if (!(flags & IORING_CQE_F_MORE))
			m->armed = false; /* its last: re-armed on demand, or freed */
		if (m->kind == MS_STREAM)
			stream_cqe(e, m, res, flags);
		else
			accept_cqe(e, m, res);
	}
	if (!ms_closed(m))
		ms_event(e, m);
}

static void ms_arm(struct cbcmn__mshot *m)
{
	struct io_uring_sqe *sqe = cbcmn__ring_sqe(m->e);
	if (m->kind == MS_STREAM) {
		io_uring_prep_recv_multishot(sqe, m->fd, NULL, 0, 0);
		ms_sqe_file(sqe, m);
		sqe->flags |= IOSQE_BUFFER_SELECT;
		sqe->buf_group = BUFPOOL_BGID;
		m->nobufs = false;
		turn_used(m);
	} else {
		io_uring_prep_multishot_accept(sqe, m->fd, NULL, NULL, (int)m->accept_flags);
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)m | CBCMN__UD_MSHOT);
	m->armed = true;
	m->cancel_sent = false;
}

/* The calling task, checked: on an executor, the one that owns m (if any). */
static struct cbcmn_task *ms_self(cbcmn_cx *cx, struct cbcmn__mshot *m, int64_t *err)
{
	if (!cx) {
		*err = -EINVAL;
		return NULL;
	}
	struct cbcmn_task *t = (struct cbcmn_task *)cx;
	if (!cbcmn__is_running(t)) {
		*err = -EPERM;
		return NULL;
	}
	if (m && m->e != t->exec) {
		*err = -EXDEV;
		return NULL;
	}
	cbcmn__stack_check(t);
	return t;
}

/* Cancellation of a task about to wait on m, called by the task itself:
 * have the owner end the wait (ms_end()). */
static void ms_on_cancel(struct cbcmn__iwait *iw)
{
	cbcmn__iwait_local_kick(iw);
}

/* The executor's thread died (cbcmn__ring_takeover()), and old is its
 * ring, not yet unmapped: the multishot requests went with it.  What it
 * completed that the thread never reaped is in its CQ (rings without
 * DEFER_TASKRUN post completions while the thread runs): connections
 * accepted, chunks received, taken from their sockets already.  They are
 * queued as if reaped (a stream's buffers are the old pool's, which stays
 * mapped: cbcmn__bufring_retire()).  Then each stream and acceptor ends as
 * its requests did: a waiter wakes, and once what was queued is handed out
 * the next call returns -ECANCELED.  (A completion the kernel kept in its
 * overflow list only the dead thread could flush: docs/IO.md, Limits.) */
void cbcmn__mshot_orphan_all(struct cbcmn__exec *e, const struct io_uring_cqe *cqes, unsigned n)
{
	/* Nothing of theirs is in the kernel any more: no cancel is sent
	 * (to the new ring, which would find nothing) for what comes below. */
	for (struct cbcmn__mshot *m = e->mshots; m; m = m->next) {
		m->armed = m->cancel_sent = m->watch_armed = m->watch_cancel_sent = m->send_armed =
			m->send_cancel_sent = false;
		m->slot = -1; /* the old ring's table (cbcmn__bufring_retire()) */
	}
	for (unsigned i = 0; i < n; i++) {
		const struct io_uring_cqe *c = &cqes[i];
		if ((c->user_data & CBCMN__UD_MASK) != CBCMN__UD_MSHOT || (c->user_data & MS_WATCH))
			continue; /* io.c's, nobody's, or a watch's: nothing to hand out */
		/* Alive: closing waits for a request's last CQE, which comes
		 * after all its others, and this one was never reaped. */
		struct cbcmn__mshot *m = (struct cbcmn__mshot *)(uintptr_t)(
			c->user_data & ~(uint64_t)(CBCMN__UD_MASK | MS_SEND));
		if (c->user_data & MS_SEND)
			send_cqe(e, m, c->res, false); /* what it sent, and no more */
		else if (m->kind == MS_STREAM)
			stream_cqe(e, m, c->res, c->flags);
		else
			accept_cqe(e, m, c->res);
	}
	for (struct cbcmn__mshot *m = e->mshots, *next; m; m = next) {
		next = m->next;
		if (m->kind == MS_STREAM && m->send_bid >= 0)
			send_cqe(e, m, -ECANCELED, false); /* no CQE: it did not happen */
		if (ms_closed(m))
			continue; /* its closer had moved away */
		if (m->kind == MS_STREAM) {
			m->starved = m->turn = false; /* the old pool forgot its lists */
			m->sprev = m->snext = NULL;
		}
		m->nobufs = false;
		m->pause = PAUSE_NONE;
		if (!m->done) {
			m->done = true;
			m->err = -ECANCELED;
		}
		ms_event(e, m);
	}
}

/* Executor side, with the I/O cancellations (iwait.h): wake the cancelled
 * waiter.  A stream being closed waits for its last CQE whatever happens:
 * that wait has no local_end, and is listed nowhere. */
static bool ms_end(struct cbcmn__exec *e, struct cbcmn__iwait *iw)
{
	struct cbcmn__mshot *m = iw->user;
	if (m->waiter == iw) {
		m->waiter = NULL;
		cbcmn__iwait_wake(iw, e);
	}
	return false;
}

/* Block until m's next event: a CQE (its watch's included), a buffer for a
 * starved stream, the end of its executor's ring, or cancellation.  Only
 * the owning executor ends the wait (the cancel flag it is kicked with
 * included), clearing m->waiter as it does.  The task may resume on
 * another executor (t->exec): then it must touch m no more. */
static uint32_t ms_wait(struct cbcmn_task *t, struct cbcmn__mshot *m)
{
	struct cbcmn__iwait iw;
	cbcmn__iwait_init(&iw, t);
	iw.on_cancel = ms_on_cancel;
	iw.local = true;
	iw.local_end = ms_end;
	iw.user = m;
	m->waiter = &iw;
	return cbcmn__iwait_block(&iw);
}

/* Stream m's last SQE ended for want of buffers: may it be armed again?
 * Yes with a buffer free that no starved stream was promised, or one
 * promised to m, or once the pool has grown; otherwise m waits. */
static bool stream_may_rearm(struct cbcmn__exec *e, struct cbcmn__mshot *m)
{
	struct cbcmn__bufpool *p = m->pool;
	if (m->turn || pool_free(p) > p->promised) {
		m->backoff_ns = 0;
		return true;
	}
	if (p->n >= p->max || pool_grow(p, p->n + 1) != 0)
		return false;
	m->backoff_ns = 0;
	m->turn = true; /* one of the new buffers is ours; others may use the rest */
	p->promised++;
	pool_wake(e, p);
	return true;
}

/* What waits in stream m's socket, looked at without taking it: 1 data, 0
 * its end (EOF, or an error, then in m->err), -1 nothing yet.  For a stream
 * the pool cannot serve: a multishot recv picks its buffer before it looks
 * at the socket, so -ENOBUFS says nothing about what is waiting. */
static int stream_peek(struct cbcmn__mshot *m)
{
	char c;
	ssize_t n = recv(m->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0)
		return 1;
	if (n == 0)
		return 0;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return -1;
	m->err = -errno;
	return 0;
}

/* The error a send of m's ended with, reported once. */
static int64_t send_err_take(struct cbcmn__mshot *m)
{
	int64_t err = m->send_err;
	m->send_err = 0;
	return err;
}

/* ms_next() inside: m is busy.  After each wait the task may have been
 * moved: then -EXDEV, m untouched. */
static int64_t ms_next_busy(struct cbcmn_task *t, struct cbcmn__mshot *m, void *arg)
{
	struct ms_item *it = arg;
	/* A task already cancelled: nothing done, nothing charged, as every
	 * I/O call (docs/IO.md, the cancellation rule) and the stream's send.
	 * The chunk the last call returned stays held (its bytes the caller's
	 * still, to send by a task not cancelled, or for the close to give
	 * back), and what is queued stays queued for the stream's next call.
	 * Before, the chunk went back to the pool and a unit was charged
	 * first (session 24). */
	if (cbcmn__task_cancelled(t))
		return CBCMN_ECANCELED;
	/* The chunk the last call returned goes back before any wait: a
	 * stream that waits for a buffer must not hold one. */
	if (m->held >= 0) {
		chunk_put(m->e, m->pool, (uint32_t)m->held);
		m->held = -1;
	}
	if (!(t->rt->cfg.flags & CBCMN_CONFIG_NO_BUDGETS))
		cbcmn__charge(t, CBCMN__B_SYSCALLS, 1);
	for (;;) {
		/* A wait for budget, or one below, may have moved the task. */
		if (t->exec != m->e)
			return -EXDEV;
		/* Cancelled: before anything queued, or a peer that keeps
		 * sending would keep the task from ever seeing it.  What is
		 * queued stays for the close to drop, as unread socket bytes. */
		if (cbcmn__task_cancelled(t))
			return CBCMN_ECANCELED;
		if (m->send_err)
			return send_err_take(m);
		if (m->qlen) {
			*it = ms_pop(m);
			return 1;
		}
		if (m->done)
			return 0;
		if (!m->armed && m->nobufs && !stream_may_rearm(t->exec, m)) {
			/* Starved.  Its end needs no buffer. */
			int what = stream_peek(m);
			if (what == 0) {
				m->done = true;
				continue;
			}
			if (what < 0) {
				/* Nothing yet (it was armed while the pool was
				 * empty): it needs no buffer until something
				 * comes, so it waits for its socket, not in
				 * line.  Data then puts it in line (or arms it,
				 * with a buffer free); its end ends it.  (A
				 * watch still armed ends first.) */
				if (!m->watch_armed)
					ms_watch_socket(m);
				if (ms_wait(t, m) == CBCMN__IW_CANCELLED && t->exec == m->e)
					return CBCMN_ECANCELED;
				continue;
			}
			/* Data: in line for the next buffer that comes back
			 * (pool_wake()), not polling for one. */
			m->starved = true;
			m->sprev = m->pool->starved_tail;
			if (m->sprev)
				m->sprev->snext = m;
			else
				m->pool->starved = m;
			m->pool->starved_tail = m;
			/* A pool that could not grow (out of memory) tries
			 * again after a pause too: the buffers it waits for
			 * may be held by tasks that read nothing for long. */
			if (m->pool->n < m->pool->max && !m->watch_armed)
				ms_watch_time(m, ms_backoff(m));
			uint32_t how = ms_wait(t, m);
			if (t->exec != m->e)
				return -EXDEV;
			if (m->starved)
				starved_remove(m->pool, m); /* a watch, cancelled, or the ring died */
			if (how == CBCMN__IW_CANCELLED)
				return CBCMN_ECANCELED;
			continue;
		}
		if (!m->armed && m->pause != PAUSE_NONE) {
			/* An acceptor backing off after a failed accept: a
			 * timeout watch, then it accepts again.  (A watch
			 * still armed ends first; a cancelled pause is over.) */
			if (!m->watch_armed) {
				if (m->pause == PAUSE_TIMING) {
					m->pause = PAUSE_NONE;
					continue;
				}
				ms_watch_time(m, m->backoff_ns);
				m->pause = PAUSE_TIMING;
			}
			if (ms_wait(t, m) == CBCMN__IW_CANCELLED && t->exec == m->e)
				return CBCMN_ECANCELED;
			continue;
		}
		if (!m->armed)
			ms_arm(m);
		if (ms_wait(t, m) == CBCMN__IW_CANCELLED && t->exec == m->e)
			return CBCMN_ECANCELED;
	}
}

/* The call on m is over, by a return or an unwind: m is free again, and no
 * longer watched (a watch left armed would keep its close waiting).  On
 * m's executor. */
static void ms_release(struct cbcmn__mshot *m)
{
	m->waiter = NULL; /* (of the call, unwound in a wait) */
	m->send_waiting = false;
	ms_watch_cancel(m);
	if (m->starved)
		starved_remove(m->pool, m);
	if (m->turn) {
		/* Woken for a buffer it did not ask for (cancelled, or the
		 * stream ended): the next starved stream gets it. */
		turn_used(m);
		pool_wake(m->e, m->pool);
	}
	m->busy = false;
}

static void ms_release_there(struct cbcmn__exec *e, void *arg)
{
	(void)e;
	ms_release(arg);
}

/* Run fn(m->e, m) on m's executor, for task t: at once if t runs there,
 * else as a message to it (t was moved while it waited, and must touch m
 * no more).  Out of memory for the message: again after a yield (which
 * may even bring t home). */
static void ms_there(struct cbcmn_task *t, struct cbcmn__mshot *m,
		     void (*fn)(struct cbcmn__exec *, void *))
{
	while (t->exec != m->e &&
	       cbcmn__xmsg_send(t->exec, m->e->id, CBCMN__XM_CALL, NULL, fn, m) != 0)
		cbcmn_yield((cbcmn_cx *)t);
	if (t->exec == m->e)
		fn(m->e, m);
}

/* A call on m: fn(t, m, arg), with m busy for the whole call, not only
 * while a CQE is awaited: the task may also wait for budget or for buffers
 * with no waiter on m, and m must not be closed under it.  -EBUSY if a
 * call is under way.
 *
 * Some of those waits do not return: a task cancelled (or given up on by
 * its nursery) while it waits for budget, or about to overflow its stack,
 * is unwound to its landing pad (budget.c, sched.c).  Our own pad catches
 * the unwind on the way, releases m, and passes it on: else m would stay
 * busy for good, and every later call and its close answer -EBUSY. */
typedef int64_t (*ms_busy_fn)(struct cbcmn_task *t, struct cbcmn__mshot *m, void *arg);

static CBCMN__LANDING_PAD int64_t ms_call(struct cbcmn_task *t, struct cbcmn__mshot *m,
					  ms_busy_fn fn, void *arg)
{
	if (m->busy)
		return -EBUSY; /* one task at a time */
	m->busy = true;
	if (m->owner != t->id)
		m->owner = 0; /* handed over: no unwind closes it any more */
	void *jb[5];
	/* volatile: __builtin_setjmp's second return restores none of the
	 * registers they may live in. */
	struct cbcmn_task *volatile vt = t;
	struct cbcmn__mshot *volatile vm = m;
	void **volatile outer = t->landing;
	if (__builtin_expect(__builtin_setjmp(jb) != 0, 0)) {
		vt->landing = outer;
		ms_there(vt, vm, ms_release_there);
		__builtin_longjmp(outer, 1); /* t->unwind_result is already set */
	}
	t->landing = jb;
	int64_t rc = fn(t, m, arg);
	t->landing = outer;
	ms_there(t, m, ms_release_there);
	return rc;
}

/* Wait for the next item, arming as needed.  1 with *it, 0 at the end (then
 * m->err), a send's error (cbcmn_stream_send()), or CBCMN_ECANCELED /
 * -EXDEV / -EBUSY. */
static int64_t ms_next(struct cbcmn_task *t, struct cbcmn__mshot *m, struct ms_item *it)
{
	return ms_call(t, m, ms_next_busy, it);
}

/* A zeroed object of size bytes, aligned for MS_WATCH and MS_SEND
 * (malloc's alignment is 16 in glibc, but 8 under ASan). */
static void *ms_alloc(size_t size)
{
	void *p;
	if (CBCMN__FAULT(CBCMN__F_MALLOC) || posix_memalign(&p, MS_ALIGN, size) != 0)
		return NULL;
	return memset(p, 0, size);
}

static int ms_open(cbcmn_cx *cx, int fd, uint32_t kind, size_t size, struct cbcmn__mshot **out)
{
	int64_t err;
	if (!out || fd < 0)
		return -EINVAL;
	struct cbcmn_task *t = ms_self(cx, NULL, &err);
	if (!t)
		return (int)err;
	struct cbcmn__exec *e = t->exec;
	struct cbcmn__bufpool *p = NULL;
	if (kind == MS_STREAM) {
		int rc = pool_get(e);
		if (rc)
			return rc;
		p = e->ring.pool;
		/* A share for each stream, as far as the limit allows: more
		 * streams than that share what there is.  Out of memory is
		 * an error only while the pool has no buffer at all. */
		uint64_t want = (uint64_t)(p->streams + 1) * p->share;
		if (pool_grow(p, want < p->max ? (uint32_t)want : p->max) != 0 && p->n == 0)
			return -ENOMEM;
	} else if (!t->rt->ring_caps.multishot_accept) {
		return -EOPNOTSUPP;
	}
	struct cbcmn__mshot *m = ms_alloc(size);
	if (!m)
		return -ENOMEM;
	m->e = e;
	m->fd = fd;
	m->slot = kind == MS_STREAM ? fixed_get(e, fd) : -1;
	m->kind = kind;
	m->held = -1;
	m->send_bid = -1;
	m->pool = p;
	m->owner = t->id;
	if (p) {
		p->streams++;
		pool_wake(e, p); /* new buffers: starved streams may use them */
	}
	e->nmshots++; /* keeps the executor from retiring */
	atomic_store_explicit(&e->diag.mshots, e->nmshots, memory_order_relaxed); /* snapshot.c */
	m->next = e->mshots;
	if (m->next)
		m->next->prev = m;
	e->mshots = m;
	*out = m;
	return 0;
}

/* Nothing in the kernel refers to m any more (no SQE, no watch): give back
 * what it holds and free it.  On m's executor. */
static void ms_free(struct cbcmn__mshot *m)
{
	struct cbcmn__exec *e = m->e;
	if (m->held >= 0)
		chunk_put(e, m->pool, (uint32_t)m->held);
	while (m->qlen) {
		struct ms_item it = ms_pop(m);
		if (m->kind == MS_STREAM)
			chunk_put(e, m->pool, it.val);
		else
			close((int)it.val);
	}
	if (m->pool)
		m->pool->streams--;
	fixed_put(e, m);
	e->nmshots--;
	atomic_store_explicit(&e->diag.mshots, e->nmshots, memory_order_relaxed);
	if (m->prev)
		m->prev->next = m->next;
	else
		e->mshots = m->next;
	if (m->next)
		m->next->prev = m->prev;
	free(m->q);
	free(m);
}

/* A closing m whose last CQE has come is freed.  True if it was. */
static bool ms_closed(struct cbcmn__mshot *m)
{
	if (!m->closing || m->armed || m->watch_armed || m->send_armed)
		return false;
	ms_free(m);
	return true;
}

/* On m's executor, for a closer moved away while it waited: the rest of
 * the close happens here, the last CQE freeing m (cbcmn__mshot_cqe()). */
static void ms_close_there(struct cbcmn__exec *e, void *arg)
{
	(void)e;
	struct cbcmn__mshot *m = arg;
	m->closing = true;
	if (m->armed)
		ms_cancel(m);
	ms_watch_cancel(m);
	send_cancel(m);
	ms_closed(m);
}

static int ms_close(cbcmn_cx *cx, struct cbcmn__mshot *m)
{
	int64_t err;
	if (!m)
		return -EINVAL;
	struct cbcmn_task *t = ms_self(cx, m, &err);
	if (!t)
		return (int)err;
	if (m->busy)
		return -EBUSY;
	m->busy = true; /* for good: no call may start on it while it closes */
	if (cbcmn__task_in_halt(t)) {
		/* A drop or fini: a halt never waits (docs/ACTORS.md), and
		 * the wait below parked it (resumed from the slot, or by a
		 * thief elsewhere).  Cancelled as for an unwound owner, the
		 * last CQE frees m; a send it cuts short goes unreported. */
		int rc = m->send_err;
		struct cbcmn__exec *e = m->e;
		bool by_number = m->slot < 0;
		ms_close_there(e, m); /* m may be gone */
		/* A send queued and not submitted names the descriptor by its
		 * number without a fixed-file slot: submitted only after
		 * the program's close(2), it went to the next socket given
		 * that number (review of session 17).  Submitted now, the
		 * kernel holds the file (the wait below had it submitted
		 * before returning).  The epoll backend sends at once. */
		if (by_number && !e->ep && cbcmn__sq_unflushed(&e->ring.u))
			cbcmn__ring_submit(e, false, 0);
		return rc;
	}
	/* Cancel its SQE, its watch and its send, and wait for their last
	 * CQEs; then nothing refers to m.  (A send's bytes the kernel has not
	 * taken yet are dropped, and said: cbcmn_stream_send() of 0 bytes
	 * waits for them first.) */
	while (m->armed || m->watch_armed || m->send_armed) {
		if (m->armed)
			ms_cancel(m);
		ms_watch_cancel(m);
		send_cancel(m);
		struct cbcmn__iwait iw;
		cbcmn__iwait_init(&iw, t);
		iw.on_cancel = cbcmn__iwait_ignore_cancel; /* must see the last CQE */
		iw.local = true;
		m->waiter = &iw; /* cleared by its waker, ms_event() */
		cbcmn__iwait_block(&iw);
		if (t->exec != m->e) {
			ms_there(t, m, ms_close_there);
			return 0;
		}
	}
	/* A send that failed and was not reported yet, the one cut short
	 * above included: the closer is the last to hear of it (as close(2)
	 * reports a write's failure), and the stream goes anyway. */
	int rc = m->send_err;
	ms_free(m);
	return rc;
}

/* ---- ownership: what an unwound task and destroy leave ------------------------ */

/* On e's thread: close each stream and acceptor of e that task id opened
 * and no other task has called (m->owner).  One in a call is not its (a
 * call by another task hands it over, and its own call released it on the
 * way: ms_next()).  Without waiting: its SQE and watch are cancelled, and
 * its last CQE frees it (ms_close_there()). */
static void close_owned_there(struct cbcmn__exec *e, void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg;
	for (struct cbcmn__mshot *m = e->mshots, *next; m; m = next) {
		next = m->next; /* m may be freed below */
		if (m->owner != id || m->busy || m->closing)
			continue;
		m->busy = true; /* for good, as ms_close() */
		ms_close_there(e, m);
	}
}

/* Task t was unwound to its landing pad (sched.c), on its fiber: it cannot
 * close what it opened, so close it here, as an obligation of an ending
 * task is aborted (obligation.c).  On every executor that has any open:
 * an unpinned task may have moved since it opened them (stolen at a
 * checkpoint's yield, or woken elsewhere as its landing pad awaited its
 * nurseries), and only an object's executor touches it, so the others get
 * a message (before, only the executor t landed on was looked at, and
 * what t opened elsewhere stayed open until destroy: never quiescent).
 * An executor with one open cannot retire (e->nmshots), so the message
 * finds its thread; one whose gauge reads 0 has none of t's: t's opens
 * there came before its move, which ordered them before this read. */
void cbcmn__mshot_unwound(struct cbcmn_task *t)
{
	struct cbcmn_runtime *rt = t->rt;
	void *id = (void *)(uintptr_t)t->id;
	for (uint32_t i = 0; i < rt->nexec; i++) {
		struct cbcmn__exec *x = rt->exec[i];
		if (!atomic_load_explicit(&x->diag.mshots, memory_order_relaxed))
			continue;
		/* Out of memory for the message: again after a yield (which
		 * may even bring t there), as ms_there(). */
		while (t->exec != x &&
		       cbcmn__xmsg_send(t->exec, x->id, CBCMN__XM_CALL, NULL, close_owned_there, id) != 0)
			cbcmn_yield((cbcmn_cx *)t);
		if (t->exec == x)
			close_owned_there(x, id);
	}
}

/* cbcmn_runtime_destroy(), once e's thread has ended and its ring (and
 * pool) are gone, so nothing in the kernel refers to them: free the
 * streams and acceptors no task closed (one whose task returned without
 * closing it, or handed it over and nobody did), and close the
 * connections an acceptor accepted that were never taken.  Their buffers
 * went with the pool. */
void cbcmn__mshot_fini(struct cbcmn__exec *e)
{
	while (e->mshots) {
		struct cbcmn__mshot *m = e->mshots;
		e->mshots = m->next;
		while (m->kind == MS_ACCEPT && m->qlen)
			close((int)ms_pop(m).val);
		free(m->q);
		free(m);
	}
	e->nmshots = 0;
	atomic_store_explicit(&e->diag.mshots, 0, memory_order_relaxed); /* snapshot.c */
}

/* ---- receive streams ----------------------------------------------------------- */

int cbcmn_stream_open(cbcmn_cx *cx, int fd, cbcmn_stream **out)
{
	return ms_open(cx, fd, MS_STREAM, sizeof(cbcmn_stream), (struct cbcmn__mshot **)out);
}

int64_t cbcmn_stream_recv(cbcmn_cx *cx, cbcmn_stream *s, const void **data)
{
	int64_t err;
	if (!s || !data)
		return -EINVAL;
	struct cbcmn__mshot *m = &s->ms;
	struct cbcmn_task *t = ms_self(cx, m, &err);
	if (!t)
		return err;
	struct ms_item it;
	int64_t rc = ms_next(t, m, &it); /* -EBUSY before the chunk another task's call holds */
	if (rc == 0)
		return m->err;
	if (rc < 0)
		return rc;
	m->held = (int32_t)it.val;
	m->held_len = it.len;
	m->held_off = it.off;
	*data = chunk_addr(m->pool, it.val, it.off);
	return it.len;
}

struct send_args {
	const char *p;
	size_t len;
	int flags;
};

/* cbcmn_stream_send() inside: m is busy. */
static int64_t send_busy(struct cbcmn_task *t, struct cbcmn__mshot *m, void *arg)
{
	const struct send_args *a = arg;
	/* A task already cancelled: nothing done, nothing charged, the chunk
	 * still held, as every I/O call (io.c's io_check(); docs/IO.md, the
	 * cancellation rule).  Before, the ring's send went out when there
	 * was no send before to wait for, while epoll's cbcmn_send() said
	 * CBCMN_ECANCELED and kept the chunk. */
	if (cbcmn__task_cancelled(t))
		return CBCMN_ECANCELED;
	/* The epoll backend's cbcmn_send() pays for itself. */
	if (!m->e->ep && !(t->rt->cfg.flags & CBCMN_CONFIG_NO_BUDGETS)) {
		cbcmn__charge(t, CBCMN__B_SYSCALLS, 1); /* may move the task */
		if (t->exec != m->e)
			return -EXDEV;
	}
	/* One send at a time: in order, and back-pressure for a sender
	 * faster than its peer.  Cancelled meanwhile (in the charge's
	 * fairness yield, or in this wait, woken by the send's end): not
	 * sent either. */
	for (;;) {
		if (cbcmn__task_cancelled(t))
			return CBCMN_ECANCELED;
		if (m->send_bid < 0)
			break;
		m->send_waiting = true;
		uint32_t how = ms_wait(t, m);
		if (t->exec != m->e)
			return -EXDEV;
		m->send_waiting = false;
		if (how == CBCMN__IW_CANCELLED)
			return CBCMN_ECANCELED;
	}
	if (m->send_err)
		return send_err_take(m);
	if (!a->len)
		return 0;
	const char *base = m->held >= 0 ? chunk_addr(m->pool, (uint32_t)m->held, m->held_off) : NULL;
	if (!base || a->p < base || a->p > base + m->held_len ||
	    a->len > (size_t)(base + m->held_len - a->p))
		return -EINVAL;
	int32_t bid = m->held;
	if (m->e->ep) {
		/* No ring to leave it on: sent now.  The chunk stays held
		 * meanwhile: a wait in cbcmn_send() may unwind the task
		 * (cancelled in a budget wait, a stack overflow), and a held
		 * chunk is what the stream's next call or close gives back. */
		int64_t rc = 0;
		size_t off = 0;
		for (; off < a->len; off += (size_t)rc) {
			/* Part went: a call that never returns (the task
			 * unwound in its budget wait) leaves the rest's loss
			 * to the next call or the close, as one ended below
			 * does (before, a close said 0 of a truncated send:
			 * rvattack23).  m->send_err was 0: taken above. */
			m->send_err = off ? -ECANCELED : 0;
			rc = cbcmn_send((cbcmn_cx *)t, m->fd, a->p + off, a->len - off, a->flags);
			m->send_err = 0;
			if (rc <= 0) {
				rc = rc ? rc : -EIO; /* as send_cqe() */
				break;
			}
		}
		/* Ended after part of it went (cancelled, timed out, a
		 * failure): the ring's send, once taken, is 0 and its failure
		 * (-ECANCELED for one a close cut short) is the next call's:
		 * the same here.  Said now, a cancellation or a timeout read
		 * as "nothing went", and a caller sent those bytes again. */
		if (rc < 0 && off) {
			m->send_err = (int32_t)rc;
			rc = 0;
		}
		/* Cancelled or timed out before a byte went: it did not
		 * happen, and the chunk stays held, the caller's to send again
		 * (by a task not cancelled), as a ring's send cancelled in its
		 * wait for the send before.  Given back, the bytes were lost
		 * (a timeout's too: rvattack23). */
		if (rc == CBCMN_ECANCELED || rc == -ETIMEDOUT)
			return rc;
		/* A wait above may have moved the task (unpinned): the bytes
		 * went all the same, so their result, not -EXDEV (a caller
		 * would send them again).  The chunk stays held: m's to give
		 * back on m's executor, at its next call or close there. */
		if (t->exec != m->e)
			return rc < 0 ? rc : 0;
		m->held = -1;
		chunk_put(m->e, m->pool, (uint32_t)bid);
		return rc < 0 ? rc : 0;
	}
	m->held = -1; /* the send's now */
	m->send_bid = bid;
	m->send_off = (uint32_t)(a->p - buf_addr(m->pool, (uint32_t)bid)); /* from the buffer's start */
	m->send_end = m->send_off + (uint32_t)a->len;
	m->send_flags = a->flags;
	send_arm(m);
	return 0;
}

int64_t cbcmn_stream_send(cbcmn_cx *cx, cbcmn_stream *s, const void *data, size_t len, int flags)
{
	int64_t err;
	if (!s || (len && !data))
		return -EINVAL;
	struct cbcmn__mshot *m = &s->ms;
	struct cbcmn_task *t = ms_self(cx, m, &err);
	if (!t)
		return err;
	struct send_args a = {data, len, flags};
	return ms_call(t, m, send_busy, &a);
}

int cbcmn_stream_close(cbcmn_cx *cx, cbcmn_stream *s)
{
	return ms_close(cx, s ? &s->ms : NULL);
}

/* ---- acceptors ------------------------------------------------------------------ */

int cbcmn_acceptor_open(cbcmn_cx *cx, int fd, int flags, cbcmn_acceptor **out)
{
	int rc = ms_open(cx, fd, MS_ACCEPT, sizeof(cbcmn_acceptor), (struct cbcmn__mshot **)out);
	if (rc == 0)
		(*out)->ms.accept_flags = (uint32_t)flags;
	return rc;
}

int64_t cbcmn_acceptor_next(cbcmn_cx *cx, cbcmn_acceptor *a)
{
	int64_t err;
	if (!a)
		return -EINVAL;
	struct cbcmn_task *t = ms_self(cx, &a->ms, &err);
	if (!t)
		return err;
	struct ms_item it;
	int64_t rc = ms_next(t, &a->ms, &it);
	if (rc == 0)
		return a->ms.err ? a->ms.err : -EINVAL;
	return rc < 0 ? rc : (int64_t)it.val;
}

int cbcmn_acceptor_close(cbcmn_cx *cx, cbcmn_acceptor *a)
{
	return ms_close(cx, a ? &a->ms : NULL);
}
