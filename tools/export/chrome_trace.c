/* chrome_trace.c: trace events as Chrome JSON (chrome_trace.h). */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "export/chrome_trace.h"
#include "util/json.h"
#include "util/uring_ops.h"

int ct_open(struct ct_writer *w, const char *path, uint64_t t0_ns, uint64_t limit, char *err,
	    size_t errlen)
{
	memset(w, 0, sizeof(*w));
	if (!(w->f = fopen(path, "w"))) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	/* SIGXFSZ's default action would end us at the first write past
	 * ulimit -f, the trace cut and nothing said (chrome_trace.h). */
	signal(SIGXFSZ, SIG_IGN);
	w->pid = (int)getpid();
	w->t0_ns = t0_ns;
	w->limit = limit;
	/* Microseconds, as the format wants; ns precision shown. */
	fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", w->f);
	return 0;
}

/* Executor i's track.  Not i: viewers take tid 0 for something else
 * (Linux's idle "swapper": Perfetto's JSON importer merged a tid 0 into
 * tid 1 until mid-2025, Tracy shows it as a crashed thread). */
static unsigned tid(uint32_t exec)
{
	return exec + 1;
}

static void sep(struct ct_writer *w)
{
	if (w->any)
		fputs(",\n", w->f);
	w->any = true;
}

void ct_track(struct ct_writer *w, uint32_t exec)
{
	sep(w);
	fprintf(w->f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%u,"
		      "\"args\":{\"name\":\"executor %u\"}}",
		w->pid, tid(exec), exec);
	sep(w);
	fprintf(w->f, "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%u,"
		      "\"args\":{\"sort_index\":%u}}",
		w->pid, tid(exec), exec);
}

void ct_names(struct ct_writer *w, const char *process, uint32_t n)
{
	sep(w);
	fprintf(w->f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":", w->pid);
	jw_quote(w->f, process);
	fputs("}}", w->f);
	for (uint32_t i = 0; i < n; i++)
		ct_track(w, i);
}

/* ns since t0, which the format reads as microseconds: printed from
 * integers ("%llu.%03llu"), so that a slice's start plus its duration is
 * exactly its end, and slices that did not overlap in ns do not once
 * printed. */
struct us {
	unsigned long long i, f;
};

static struct us us(uint64_t ns)
{
	return (struct us){ns / 1000, ns % 1000};
}

static uint64_t rel(const struct ct_writer *w, uint64_t ns)
{
	return ns > w->t0_ns ? ns - w->t0_ns : 0;
}

/* The events by phase, on executor exec's track; args: a JSON object's
 * members without braces, or NULL.  Counted against the limit by their
 * callers. */
static void slice(struct ct_writer *w, uint32_t exec, const char *name, const char *cat,
		  uint64_t ts_ns, uint64_t dur_ns, const char *args)
{
	uint64_t b = rel(w, ts_ns), d = rel(w, ts_ns + dur_ns) - b;
	sep(w);
	fprintf(w->f, "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%u,"
		      "\"ts\":%llu.%03llu,\"dur\":%llu.%03llu,\"args\":{%s}}",
		name, cat, w->pid, tid(exec), us(b).i, us(b).f, us(d).i, us(d).f, args ? args : "");
}

static void instant(struct ct_writer *w, uint32_t exec, const char *name, const char *cat,
		    uint64_t ts_ns, const char *args)
{
	struct us t = us(rel(w, ts_ns));
	sep(w);
	fprintf(w->f, "{\"ph\":\"i\",\"s\":\"t\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,"
		      "\"tid\":%u,\"ts\":%llu.%03llu,\"args\":{%s}}",
		name, cat, w->pid, tid(exec), t.i, t.f, args ? args : "");
}

/* An arrow from victim's track to thief's: the start binds to the
 * victim's slice under way, the end to the thief's (for a task, the next
 * slice: the task it took). */
static void steal_flow(struct ct_writer *w, uint32_t thief, uint32_t victim, uint64_t ts_ns,
		       const char *args)
{
	uint64_t id = ++w->flows;
	struct us t = us(rel(w, ts_ns));
	sep(w);
	fprintf(w->f, "{\"ph\":\"s\",\"name\":\"steal\",\"cat\":\"steal\",\"id\":%llu,\"pid\":%d,"
		      "\"tid\":%u,\"ts\":%llu.%03llu,\"args\":{%s}}",
		(unsigned long long)id, w->pid, tid(victim), t.i, t.f, args ? args : "");
	sep(w);
	fprintf(w->f, "{\"ph\":\"f\",\"name\":\"steal\",\"cat\":\"steal\",\"id\":%llu,\"pid\":%d,"
		      "\"tid\":%u,\"ts\":%llu.%03llu}",
		(unsigned long long)id, w->pid, tid(thief), t.i, t.f);
}

/* An actor message's arrow (the flow's id: its receiver and number in
 * that mailbox, mixed to 53 bits, which a viewer in JavaScript holds
 * exactly): the start, at the send, binds to the sender's slice; the end,
 * at the receive, to the receiver's slice under way ("bp":"e"), in which
 * the receive returned.  Each end is written from its own record, which
 * may come first or alone (the other lost, or the message never taken). */
static void msg_flow(struct ct_writer *w, bool send, uint32_t exec, uint64_t to,
		     uint32_t seq, uint64_t ts_ns, const char *args)
{
	/* splitmix64's finaliser: any change of to or seq changes the id */
	uint64_t z = to ^ ((uint64_t)seq * 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	unsigned long long id = (z & ((1ull << 53) - 1)) | 1;
	struct us t = us(rel(w, ts_ns));
	sep(w);
	fprintf(w->f, "{\"ph\":\"i\",\"s\":\"t\",\"name\":\"%s\",\"cat\":\"actor\",\"pid\":%d,"
		      "\"tid\":%u,\"ts\":%llu.%03llu,\"args\":{%s}}",
		send ? "send" : "receive", w->pid, tid(exec), t.i, t.f, args);
	sep(w);
	fprintf(w->f, "{\"ph\":\"%s,\"name\":\"message\",\"cat\":\"actor\",\"id\":%llu,"
		      "\"pid\":%d,\"tid\":%u,\"ts\":%llu.%03llu}",
		send ? "s\"" : "f\",\"bp\":\"e\"", id, w->pid, tid(exec), t.i, t.f);
}

static void one(struct ct_writer *w, const cbcmn_trace_event *e)
{
	char a[128];
	switch (e->kind) {
	case CBCMN_TRACE_TASK:
	case CBCMN_TRACE_PARK: {
		bool task = e->kind == CBCMN_TRACE_TASK;
		snprintf(a, sizeof(a), "\"%s\":%llu", task ? "task" : "notified",
			 (unsigned long long)e->arg);
		slice(w, e->executor, task ? "task" : "park", task ? "task" : "park", e->ts_ns,
		      e->dur_ns, a);
		break;
	}
	case CBCMN_TRACE_STEAL:
		snprintf(a, sizeof(a), "\"thief\":%u,\"victim\":%u,\"tasks\":%llu", e->executor, e->peer,
			 (unsigned long long)e->arg);
		steal_flow(w, e->executor, e->peer, e->ts_ns, a);
		break;
	case CBCMN_TRACE_DOORBELL:
		snprintf(a, sizeof(a), "\"target\":%u,\"eventfd\":%llu", e->peer,
			 (unsigned long long)e->arg);
		instant(w, e->executor, "doorbell", "doorbell", e->ts_ns, a);
		break;
	case CBCMN_TRACE_IO_SUBMIT:
	case CBCMN_TRACE_IO_COMPLETE: {
		bool sub = e->kind == CBCMN_TRACE_IO_SUBMIT;
		snprintf(a, sizeof(a), "\"%s\":%llu", sub ? "sqes" : "cqes", (unsigned long long)e->arg);
		instant(w, e->executor, sub ? "io_submit" : "io_complete", "io", e->ts_ns, a);
		break;
	}
	case CBCMN_TRACE_IO: {
		/* An async span (its own row under the process: other tasks
		 * run on the executor meanwhile), begin and end written
		 * together, so neither comes without the other. */
		FILE *f = w->f;
		int pid = w->pid;
		char op[24];
		uring_op_name((unsigned)e->arg, op, sizeof(op));
		uint64_t id = ++w->spans;
		struct us b = us(rel(w, e->ts_ns)), x = us(rel(w, e->ts_ns + e->dur_ns));
		sep(w);
		fprintf(f, "{\"ph\":\"b\",\"name\":\"%s\",\"cat\":\"io\",\"id\":%llu,\"pid\":%d,"
			   "\"tid\":%u,\"ts\":%llu.%03llu,\"args\":{\"opcode\":%llu}}",
			op, (unsigned long long)id, pid, tid(e->executor), b.i, b.f, (unsigned long long)e->arg);
		sep(w);
		fprintf(f, "{\"ph\":\"e\",\"name\":\"%s\",\"cat\":\"io\",\"id\":%llu,\"pid\":%d,"
			   "\"tid\":%u,\"ts\":%llu.%03llu}",
			op, (unsigned long long)id, pid, tid(e->executor), x.i, x.f);
		break;
	}
	case CBCMN_TRACE_ACTOR_SEND:
	case CBCMN_TRACE_ACTOR_RECEIVE: {
		bool send = e->kind == CBCMN_TRACE_ACTOR_SEND;
		/* References as hex strings: exact in any viewer. */
		if (send)
			snprintf(a, sizeof(a), "\"to\":\"0x%llx\",\"from\":\"0x%llx\",\"seq\":%u",
				 (unsigned long long)e->arg, (unsigned long long)e->dur_ns, e->peer);
		else
			snprintf(a, sizeof(a), "\"to\":\"0x%llx\",\"type\":%llu,\"seq\":%u",
				 (unsigned long long)e->arg, (unsigned long long)e->dur_ns, e->peer);
		msg_flow(w, send, e->executor, e->arg, e->peer, e->ts_ns, a);
		break;
	}
	default:
		return; /* a kind from a newer library: not ours to draw */
	}
	w->written++;
}

/* Room for one more event under the limit; else it is counted. */
static bool room(struct ct_writer *w)
{
	if (w->written < w->limit)
		return true;
	w->over++;
	return false;
}

void ct_slice(struct ct_writer *w, uint32_t exec, const char *name, const char *cat,
	      uint64_t ts_ns, uint64_t dur_ns, const char *args)
{
	if (room(w)) {
		slice(w, exec, name, cat, ts_ns, dur_ns, args);
		w->written++;
	}
}

void ct_instant(struct ct_writer *w, uint32_t exec, const char *name, const char *cat,
		uint64_t ts_ns, const char *args)
{
	if (room(w)) {
		instant(w, exec, name, cat, ts_ns, args);
		w->written++;
	}
}

void ct_steal(struct ct_writer *w, uint32_t thief, uint32_t victim, uint64_t ts_ns,
	      const char *args)
{
	if (room(w)) {
		steal_flow(w, thief, victim, ts_ns, args);
		w->written++;
	}
}

void ct_counter(struct ct_writer *w, const char *name, uint64_t ts_ns, const char *args)
{
	if (!room(w))
		return;
	struct us t = us(rel(w, ts_ns));
	sep(w);
	fputs("{\"ph\":\"C\",\"name\":", w->f);
	jw_quote(w->f, name);
	fprintf(w->f, ",\"pid\":%d,\"ts\":%llu.%03llu,\"args\":{%s}}", w->pid, t.i, t.f,
		args ? args : "");
	w->written++;
}

void ct_events(struct ct_writer *w, const cbcmn_trace_event *ev, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (w->written >= w->limit) {
			w->over += n - i;
			return;
		}
		one(w, &ev[i]);
	}
}

int ct_close(struct ct_writer *w, const char *otherdata)
{
	if (!w->f)
		return 0;
	/* Time 0 first, for every writer: two traces of one run (the
	 * target's own drain and cbcmn-top --record's) have different time
	 * 0s, and an event is the same in both only at the same ts + t0_ns. */
	fprintf(w->f, "\n],\"otherData\":{\"t0_ns\":%llu%s%s}}\n", (unsigned long long)w->t0_ns,
		otherdata && *otherdata ? "," : "", otherdata ? otherdata : "");
	int bad = ferror(w->f);
	bad |= fclose(w->f) != 0;
	w->f = NULL;
	return bad ? -EIO : 0;
}
