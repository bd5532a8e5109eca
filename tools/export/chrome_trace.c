/* chrome_trace.c: trace events as Chrome JSON (chrome_trace.h). */
#include <errno.h>
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

void ct_names(struct ct_writer *w, const char *process, uint32_t n)
{
	sep(w);
	fprintf(w->f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":", w->pid);
	jw_quote(w->f, process);
	fputs("}}", w->f);
	for (uint32_t i = 0; i < n; i++) {
		sep(w);
		fprintf(w->f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%u,"
			      "\"args\":{\"name\":\"executor %u\"}}",
			w->pid, tid(i), i);
		sep(w);
		fprintf(w->f, "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%u,"
			      "\"args\":{\"sort_index\":%u}}",
			w->pid, tid(i), i);
	}
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

static void one(struct ct_writer *w, const cbcmn_trace_event *e)
{
	FILE *f = w->f;
	int pid = w->pid;
	switch (e->kind) {
	case CBCMN_TRACE_TASK:
	case CBCMN_TRACE_PARK: {
		bool task = e->kind == CBCMN_TRACE_TASK;
		uint64_t b = rel(w, e->ts_ns), d = rel(w, e->ts_ns + e->dur_ns) - b;
		sep(w);
		fprintf(f, "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%u,"
			   "\"ts\":%llu.%03llu,\"dur\":%llu.%03llu,\"args\":{\"%s\":%llu}}",
			task ? "task" : "park", task ? "task" : "park", pid, tid(e->executor), us(b).i, us(b).f,
			us(d).i, us(d).f, task ? "task" : "notified", (unsigned long long)e->arg);
		break;
	}
	case CBCMN_TRACE_STEAL: {
		/* An arrow from the victim's track to the thief's: the start
		 * binds to the victim's slice under way, the end to the
		 * thief's next slice (the task it took). */
		uint64_t id = ++w->flows;
		struct us t = us(rel(w, e->ts_ns));
		sep(w);
		fprintf(f, "{\"ph\":\"s\",\"name\":\"steal\",\"cat\":\"steal\",\"id\":%llu,\"pid\":%d,"
			   "\"tid\":%u,\"ts\":%llu.%03llu,\"args\":{\"thief\":%u,\"victim\":%u,"
			   "\"tasks\":%llu}}",
			(unsigned long long)id, pid, tid(e->peer), t.i, t.f, e->executor, e->peer,
			(unsigned long long)e->arg);
		sep(w);
		fprintf(f, "{\"ph\":\"f\",\"name\":\"steal\",\"cat\":\"steal\",\"id\":%llu,\"pid\":%d,"
			   "\"tid\":%u,\"ts\":%llu.%03llu}",
			(unsigned long long)id, pid, tid(e->executor), t.i, t.f);
		break;
	}
	case CBCMN_TRACE_DOORBELL: {
		struct us t = us(rel(w, e->ts_ns));
		sep(w);
		fprintf(f, "{\"ph\":\"i\",\"s\":\"t\",\"name\":\"doorbell\",\"cat\":\"doorbell\",\"pid\":%d,"
			   "\"tid\":%u,\"ts\":%llu.%03llu,\"args\":{\"target\":%u,\"eventfd\":%llu}}",
			pid, tid(e->executor), t.i, t.f, e->peer, (unsigned long long)e->arg);
		break;
	}
	case CBCMN_TRACE_IO_SUBMIT:
	case CBCMN_TRACE_IO_COMPLETE: {
		bool sub = e->kind == CBCMN_TRACE_IO_SUBMIT;
		struct us t = us(rel(w, e->ts_ns));
		sep(w);
		fprintf(f, "{\"ph\":\"i\",\"s\":\"t\",\"name\":\"%s\",\"cat\":\"io\",\"pid\":%d,"
			   "\"tid\":%u,\"ts\":%llu.%03llu,\"args\":{\"%s\":%llu}}",
			sub ? "io_submit" : "io_complete", pid, tid(e->executor), t.i, t.f,
			sub ? "sqes" : "cqes", (unsigned long long)e->arg);
		break;
	}
	case CBCMN_TRACE_IO: {
		/* An async span (its own row under the process: other tasks
		 * run on the executor meanwhile), begin and end written
		 * together, so neither comes without the other. */
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
	default:
		return; /* a kind from a newer library: not ours to draw */
	}
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
	fprintf(w->f, "\n],\"otherData\":{%s}}\n", otherdata ? otherdata : "");
	int bad = ferror(w->f);
	bad |= fclose(w->f) != 0;
	w->f = NULL;
	return bad ? -EIO : 0;
}
