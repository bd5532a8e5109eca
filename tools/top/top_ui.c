/* top_ui.c: cbcmn-top's interactive screen (top_ui.h).
 *
 * Every frame is drawn whole from the model into ncurses' virtual screen
 * and clipped to the terminal's size of the moment, so a resize (KEY_RESIZE)
 * needs nothing but a redraw.  Views: the shard table (with sparklines and
 * warnings), one shard's detail, the topology and the help; each of the
 * last three is a list of lines that scrolls. */
#include <errno.h>
#include <langinfo.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <curses.h>
#include <term.h>

#include "util/clock.h"
#include "top/top_out.h"
#include "top/top_ui.h"

enum view { V_MAIN, V_DETAIL, V_TOPO, V_HELP };

enum { C_RUN = 1, C_SEARCH, C_PARK, C_STOP, C_BAR, C_WARN };

#define MAX_LINES 512 /* of a scrolling view */
#define LINE_LEN 256

struct ui {
	struct top_model *m;
	const struct top_ui_opts *o;
	enum view view, under_help;
	int sort;
	bool invert, paused, editing, utf8, color;
	uint32_t sel;            /* the selected shard's id */
	int first;               /* main view: first row shown */
	int scroll;              /* other views: first line shown */
	char filter[32], edit[32];
	uint32_t *order;         /* shards shown, in order */
	uint32_t norder, order_cap;
	unsigned *warn_idx;      /* warnings shown (model indexes) */
	unsigned warn_cap;
	char (*text)[LINE_LEN]; /* a scrolling view's text */
	int ntext;
};

/* ---- crash restore ----------------------------------------------------------- */

static struct termios saved_tty;
static volatile sig_atomic_t screen_up;
static char restore_seq[128];
static size_t restore_len;

static void add_cap(const char *cap)
{
	char *s = tigetstr(cap);
	if (!s || s == (char *)-1)
		return;
	size_t n = strlen(s);
	if (restore_len + n < sizeof(restore_seq)) {
		memcpy(restore_seq + restore_len, s, n);
		restore_len += n;
	}
}

void top_ui_crash_restore(void)
{
	if (!screen_up)
		return;
	screen_up = 0;
	ssize_t rc = write(STDOUT_FILENO, restore_seq, restore_len);
	(void)rc;
	tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
}

/* ---- drawing helpers --------------------------------------------------------- */

/* Text at (y, x), cut at the right edge; returns the columns used.  Only
 * ASCII goes through here, so bytes are columns. */
static int put(int y, int x, const char *s)
{
	if (y < 0 || y >= LINES || x >= COLS)
		return 0;
	int n = (int)strlen(s);
	if (n > COLS - x)
		n = COLS - x;
	mvaddnstr(y, x, s, n);
	return n;
}

static void putf(int y, int x, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void putf(int y, int x, const char *fmt, ...)
{
	char buf[LINE_LEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	put(y, x, buf);
}

static void bar_line(struct ui *u, int y, const char *text)
{
	attr_t a = u->color ? COLOR_PAIR(C_BAR) : A_REVERSE;
	attron(a);
	mvhline(y, 0, ' ', COLS);
	put(y, 0, text);
	attroff(a);
}

static attr_t state_attr(const struct ui *u, uint32_t state)
{
	if (!u->color)
		return state == CBCMN_EXEC_STOPPED ? A_DIM : 0;
	switch (state) {
	case CBCMN_EXEC_RUNNING:
		return COLOR_PAIR(C_RUN) | A_BOLD;
	case CBCMN_EXEC_SEARCHING:
		return COLOR_PAIR(C_SEARCH);
	case CBCMN_EXEC_PARKED:
		return COLOR_PAIR(C_PARK);
	default:
		return COLOR_PAIR(C_STOP);
	}
}

/* ---- sparklines --------------------------------------------------------------- */

/* The column a sparkline charts: the sort column, or tasks/s when that
 * one does not move (id, cpu, node). */
static int spark_col(const struct ui *u)
{
	return u->sort == TOP_COL_SHARD || u->sort == TOP_COL_CPU || u->sort == TOP_COL_NODE
		       ? TOP_COL_TASKS
		       : u->sort;
}

/* The largest value of column c over the histories of every row. */
static double spark_max(const struct ui *u, int c)
{
	double max = 0;
	for (uint32_t i = 0; i < u->m->nrows; i++)
		for (unsigned h = 0; h < TOP_HISTORY; h++) {
			double v = top_row_past(u->m, &u->m->rows[i], c, h);
			if (!isnan(v) && v > max)
				max = v;
		}
	return max;
}

/* width columns of row r's recent history of c, newest at the right. */
static void spark(const struct ui *u, int y, int x, int width, const struct top_row *r, int c,
		  double max)
{
	static const char *const blocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
					     "\u2585", "\u2586", "\u2587", "\u2588"};
	static const char ascii[] = "_.-:=+*#";
	for (int i = 0; i < width && x + i < COLS; i++) {
		double v = top_row_past(u->m, r, c, (unsigned)(width - 1 - i));
		if (isnan(v)) {
			mvaddch(y, x + i, ' ');
			continue;
		}
		int lvl = max > 0 ? (int)(v / max * 8) : 0;
		lvl = lvl < 0 ? 0 : lvl > 7 ? 7 : lvl;
		if (u->utf8)
			mvaddstr(y, x + i, blocks[lvl]);
		else
			mvaddch(y, x + i, ascii[lvl]);
	}
}

/* ---- the shard table -------------------------------------------------------- */

static double sort_value(const struct top_row *r, int c)
{
	double v = r->v[c];
	return isnan(v) ? -INFINITY : v;
}

static struct ui *sort_ui; /* qsort has no context argument */

static int cmp_rows(const void *a, const void *b)
{
	const struct top_row *x = &sort_ui->m->rows[*(const uint32_t *)a];
	const struct top_row *y = &sort_ui->m->rows[*(const uint32_t *)b];
	double vx = sort_value(x, sort_ui->sort), vy = sort_value(y, sort_ui->sort);
	int d = vx < vy ? -1 : vx > vy ? 1 : 0;
	if (!top_cols[sort_ui->sort].ascending)
		d = -d;
	if (sort_ui->invert)
		d = -d;
	if (!d)
		d = x->shard < y->shard ? -1 : x->shard > y->shard;
	return d;
}

static void build_order(struct ui *u)
{
	struct top_model *m = u->m;
	if (m->nrows > u->order_cap) {
		uint32_t *o = realloc(u->order, m->nrows * sizeof(*o));
		if (!o)
			return; /* keep the old order */
		u->order = o;
		u->order_cap = m->nrows;
	}
	u->norder = 0;
	for (uint32_t i = 0; i < m->nrows; i++)
		if (top_row_matches(&m->rows[i], u->filter))
			u->order[u->norder++] = i;
	sort_ui = u;
	qsort(u->order, u->norder, sizeof(*u->order), cmp_rows);
}

/* The warnings of the shards the filter shows, into u->warn_idx, in the
 * model's order (by shard); returns how many. */
static unsigned warn_order(struct ui *u)
{
	struct top_model *m = u->m;
	if (m->nwarn > u->warn_cap) {
		unsigned *w = realloc(u->warn_idx, m->nwarn * sizeof(*w));
		if (!w)
			return 0; /* none shown this frame, not a crash */
		u->warn_idx = w;
		u->warn_cap = m->nwarn;
	}
	unsigned n = 0;
	for (unsigned i = 0; i < m->nwarn; i++)
		if (m->warn[i].shard < m->nrows && top_row_matches(&m->rows[m->warn[i].shard], u->filter))
			u->warn_idx[n++] = i;
	return n;
}

/* Lines for nw warnings (a title and one each) when avail lines are left
 * below the table's header and the table wants rows: all of them if the
 * rows leave that much, else what the rows leave but at least a third of
 * avail (and 2 lines), always leaving one row; none below 3 lines. */
static int warn_area(int avail, int rows, unsigned nw)
{
	if (!nw || avail < 3)
		return 0;
	int want = (int)nw + 1, least = avail / 3 > 2 ? avail / 3 : 2;
	int n = avail - rows > least ? avail - rows : least; /* "lines" is term.h's */
	n = n < want ? n : want;
	return n < avail ? n : avail - 1;
}

static int sel_index(const struct ui *u)
{
	for (uint32_t i = 0; i < u->norder; i++)
		if (u->order[i] == u->sel)
			return (int)i;
	return -1;
}

/* Which columns fit: drop the lowest priority (the rightmost of equals)
 * until the row fits in width - reserve. */
static int fit_columns(bool *shown, int width, int reserve, int keep)
{
	int total = 0;
	for (int c = 0; c < TOP_NCOLS; c++) {
		shown[c] = true;
		total += top_cols[c].width + 1;
	}
	while (total > width - reserve) {
		int drop = -1;
		for (int c = TOP_NCOLS - 1; c >= 0; c--)
			if (shown[c] && top_cols[c].prio < 9 && c != keep &&
			    (drop < 0 || top_cols[c].prio < top_cols[drop].prio))
				drop = c;
		if (drop < 0)
			break;
		shown[drop] = false;
		total -= top_cols[drop].width + 1;
	}
	return total;
}

static void draw_row(struct ui *u, int y, const struct top_row *r, const bool *shown, bool sel)
{
	char cell[32];
	int x = 0;
	if (sel)
		attron(A_REVERSE);
	mvhline(y, 0, ' ', COLS);
	for (int c = 0; c < TOP_NCOLS; c++) {
		if (!shown[c])
			continue;
		top_fmt(c, r->v[c], cell, sizeof(cell), top_cols[c].width);
		attr_t a = c == TOP_COL_STATE ? state_attr(u, r->state) : 0;
		attron(a);
		x += put(y, x, cell);
		attroff(a);
		x += put(y, x, " ");
	}
	if (sel)
		attroff(A_REVERSE);
}

/* A header line narrower than the screen: cut before the last "  "
 * separated field that does not fit, not in the middle of a figure.
 * Returns where it was cut (the line's length if it fits). */
static size_t fit_fields(const char *line)
{
	size_t n = strlen(line);
	if (COLS <= 0 || n <= (size_t)COLS)
		return n;
	for (size_t at = (size_t)COLS; at > 0; at--)
		if (line[at] == ' ' && line[at - 1] == ' ')
			return at - 1;
	return (size_t)COLS;
}

/* The header.  Without kernel figures the own-cost line has nothing to
 * say: the reason they are off goes on over it if it needs the room. */
static int draw_header(struct ui *u)
{
	char line[LINE_LEN], kline[LINE_LEN];
	struct top_model *m = u->m;
	const char *rest = NULL;
	for (int i = 0; i < TOP_HEADER_LINES; i++) {
		top_header_line(m, i, line, sizeof(line));
		attr_t a = i >= 2 && !m->kernel ? (u->color ? COLOR_PAIR(C_WARN) : A_BOLD) : 0;
		attron(a);
		if (i == 2 && !m->kernel && COLS > 0 && strlen(line) > (size_t)COLS) {
			size_t at = (size_t)COLS;
			while (at > 0 && line[at] != ' ')
				at--;
			at = at ? at : (size_t)COLS;
			mvaddnstr(i, 0, line, (int)at);
			memcpy(kline, line, sizeof(kline));
			rest = kline + at + (kline[at] == ' ');
		} else if (i == 3 && rest) {
			putf(i, 0, "  %s", rest);
		} else {
			mvaddnstr(i, 0, line, (int)fit_fields(line));
		}
		attroff(a);
	}
	return TOP_HEADER_LINES;
}

static void draw_status(struct ui *u, const char *hint)
{
	int y = LINES - 1;
	move(y, 0);
	clrtoeol();
	if (u->editing) {
		putf(y, 0, "filter (shard/cpu/node/state): %s_", u->edit);
		return;
	}
	if (u->m->ended) {
		attr_t a = u->color ? COLOR_PAIR(C_STOP) | A_BOLD : A_BOLD;
		attron(a);
		putf(y, 0, "process %d: its runtime has ended; last figures shown. q quits",
		     (int)u->m->pid);
		attroff(a);
		return;
	}
	put(y, 0, hint);
}

static void draw_main(struct ui *u)
{
	struct top_model *m = u->m;
	bool shown[TOP_NCOLS];
	char line[LINE_LEN];
	build_order(u);
	int y = draw_header(u);
	/* Per-row sparklines when at least 12 columns are left over; else one
	 * in the footer, for the selected shard. */
	int total = fit_columns(shown, COLS, 12, u->sort);
	int spark_w = COLS - total - 1;
	if (spark_w > TOP_HISTORY)
		spark_w = TOP_HISTORY;
	bool per_row = spark_w >= 12;
	if (!per_row)
		total = fit_columns(shown, COLS, 0, u->sort);
	int sc = spark_col(u);
	double max = spark_max(u, sc);

	/* Column header. */
	int x = 0;
	line[0] = 0;
	for (int c = 0; c < TOP_NCOLS; c++)
		if (shown[c])
			x += snprintf(line + x, sizeof(line) - (size_t)x, "%*s ", top_cols[c].width,
				      top_cols[c].head);
	if (per_row)
		snprintf(line + x, sizeof(line) - (size_t)x, "%s history", top_cols[sc].head);
	bar_line(u, y, line);
	/* Underline the sort column's head. */
	x = 0;
	for (int c = 0; c < TOP_NCOLS; c++) {
		if (!shown[c])
			continue;
		if (c == u->sort && x < COLS) {
			attr_t a = (u->color ? COLOR_PAIR(C_BAR) : A_REVERSE) | A_BOLD | A_UNDERLINE;
			attron(a);
			putf(y, x, "%*s", top_cols[c].width, top_cols[c].head);
			attroff(a);
		}
		x += top_cols[c].width + 1;
	}
	y++;

	/* Below the rows: the warnings of the shards shown, the footer
	 * sparkline, the status line. */
	unsigned nw = warn_order(u);
	int avail = LINES - y - 1 - (per_row ? 0 : 1);
	int warn_lines = warn_area(avail, u->norder ? (int)u->norder : 1, nw);
	int room = avail - warn_lines;
	int si = sel_index(u);
	if (si < 0 && u->norder) {
		si = 0;
		u->sel = u->order[0];
	}
	if (room > 0) {
		if (si < u->first)
			u->first = si;
		if (si >= u->first + room)
			u->first = si - room + 1;
		if (u->first > (int)u->norder - room)
			u->first = (int)u->norder - room;
		if (u->first < 0)
			u->first = 0;
	}
	for (int i = 0; i < room && u->first + i < (int)u->norder; i++) {
		const struct top_row *r = &m->rows[u->order[u->first + i]];
		draw_row(u, y + i, r, shown, r->shard == u->sel);
		if (per_row)
			spark(u, y + i, total, spark_w, r, sc, max);
	}
	if (!u->norder && room > 0)
		putf(y, 0, "no shard matches the filter \"%s\" (/ then Enter clears it)", u->filter);
	y += room > 0 ? room : 0;

	if (!per_row && y < LINES - 1) {
		int w = COLS - 24 > TOP_HISTORY ? TOP_HISTORY : COLS - 24;
		if (si >= 0 && w > 0) {
			putf(y, 0, "%-6s shard %-3u", top_cols[sc].head, u->sel);
			spark(u, y, 17, w, &m->rows[u->sel], sc, max);
		}
		y++;
	}
	if (warn_lines && y < LINES - 1) {
		/* A title, then as many as the lines hold; the rest counted. */
		unsigned nshow = (unsigned)warn_lines - 1 < nw ? (unsigned)warn_lines - 1 : nw;
		char of[32] = "", more[48] = "";
		if (nw != m->nwarn)
			snprintf(of, sizeof(of), " of %u, filtered", m->nwarn);
		if (nshow < nw)
			snprintf(more, sizeof(more), ", +%u more: -b lists all", nw - nshow);
		attr_t a = u->color ? COLOR_PAIR(C_WARN) | A_BOLD : A_BOLD;
		attron(a);
		putf(y++, 0, "warnings (%u%s%s):", nw, of, more);
		attroff(a);
		for (unsigned i = 0; i < nshow && y < LINES - 1; i++, y++) {
			const struct top_warning *w = &m->warn[u->warn_idx[i]];
			putf(y, 0, " ! shard %u: %s", w->shard, w->text);
		}
	}
	snprintf(line, sizeof(line), "%ssort %s %s%s%s%s  ? help  q quit", u->paused ? "[PAUSED] " : "",
		 top_cols[u->sort].head, top_cols[u->sort].ascending != u->invert ? "asc" : "desc",
		 u->filter[0] ? "  filter \"" : "", u->filter, u->filter[0] ? "\"" : "");
	draw_status(u, line);
}

/* ---- scrolling views -------------------------------------------------------- */

static void add_line(struct ui *u, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_line(struct ui *u, const char *fmt, ...)
{
	if (u->ntext >= MAX_LINES)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(u->text[u->ntext++], LINE_LEN, fmt, ap);
	va_end(ap);
}

/* A duration in ns, short: "750ns", "12us", "3.1ms", "2.0s". */
static void fmt_ns(uint64_t ns, char *buf, size_t len)
{
	if (!ns)
		snprintf(buf, len, "0");
	else if (ns < 1000)
		snprintf(buf, len, "%lluns", (unsigned long long)ns);
	else if (ns < 1000000)
		snprintf(buf, len, "%lluus", (unsigned long long)(ns / 1000));
	else if (ns < 1000000000)
		snprintf(buf, len, "%.1fms", ns / 1e6);
	else
		snprintf(buf, len, "%.1fs", ns / 1e9);
}

/* A log2 histogram as bars: one line per slot from the lowest to the
 * highest non-empty one.  unit_ns: what one unit of the slots is.  field:
 * the counter of struct cbcmn_bpf_shard whose programs fill it (not
 * measured: said so, not "no samples"). */
static void add_hist(struct ui *u, const char *title, const uint64_t *h, uint64_t unit_ns,
		     size_t field)
{
	uint64_t n = bpfmon_hist_count(h), max = 0;
	int lo = -1, hi = -1;
	char a[16], b[16];
	if (!top_model_measured(u->m, field)) {
		add_line(u, "%s: not measured", title);
		return;
	}
	for (int i = 0; i < CBCMN_BPF_HIST_SLOTS; i++) {
		if (!h[i])
			continue;
		lo = lo < 0 ? i : lo;
		hi = i;
		max = h[i] > max ? h[i] : max;
	}
	if (!n) {
		add_line(u, "%s: no samples", title);
		return;
	}
	fmt_ns(bpfmon_hist_pct(h, 50) * unit_ns, a, sizeof(a));
	fmt_ns(bpfmon_hist_pct(h, 99) * unit_ns, b, sizeof(b));
	add_line(u, "%s: %llu samples, p50 <= %s, p99 <= %s", title, (unsigned long long)n, a, b);
	int barw = COLS - 34;
	barw = barw < 10 ? 10 : barw > 60 ? 60 : barw;
	for (int i = lo; i <= hi; i++) {
		char bar[LINE_LEN];
		int w = (int)((double)h[i] / max * barw + 0.5);
		if (h[i] && !w)
			w = 1;
		/* Bars in ASCII: scrolling lines hold bytes, not cells. */
		memset(bar, '#', (size_t)w);
		bar[w] = 0;
		fmt_ns(i ? (1ull << i) * unit_ns : 0, a, sizeof(a));
		fmt_ns((2ull << i) * unit_ns, b, sizeof(b));
		add_line(u, "  %7s-%-7s %10llu |%s", a, b, (unsigned long long)h[i], bar);
	}
}

/* A kernel counter (field: its offsetof in struct cbcmn_bpf_shard) as text
 * in buf (24 bytes): ns as ms when ms, "-" when not measured, never 0. */
static const char *kcount(const struct top_model *m, size_t field, uint64_t v, bool ms, char *buf)
{
	if (!top_model_measured(m, field))
		return "-";
	if (ms)
		snprintf(buf, 24, "%.1f", v / 1e6);
	else
		snprintf(buf, 24, "%llu", (unsigned long long)v);
	return buf;
}

static void build_detail(struct ui *u)
{
	struct top_model *m = u->m;
	u->ntext = 0;
	if (u->sel >= m->nrows) {
		add_line(u, "no such shard");
		return;
	}
	const struct top_row *r = &m->rows[u->sel];
	const cbcmn_executor_stats *e = r->rt;
	char cell[32];
	add_line(u, "shard %u  cpu %d  node %d  llc %d  thread %d  %s", r->shard, r->cpu, e->node,
		 r->llc, (int)r->tid, top_state_name(r->state));
	add_line(u, "%s", "");
	add_line(u, "this interval:");
	for (int c = TOP_COL_QUEUE; c < TOP_NCOLS; c += 3) {
		char col[3][48];
		for (int i = 0; i < 3; i++) {
			col[i][0] = 0;
			if (c + i >= TOP_NCOLS)
				continue;
			top_fmt(c + i, r->v[c + i], cell, sizeof(cell), 1);
			snprintf(col[i], sizeof(col[i]), "%-7s %7s", top_cols[c + i].head, cell);
		}
		add_line(u, "  %-24s %-24s %s", col[0], col[1], col[2]);
	}
	add_line(u, "%s", "");
	if (r->k) {
		add_line(u, "histograms, since attach:");
		add_hist(u, "doorbell latency", r->k->hist[CBCMN_BPF_HIST_DOORBELL], 1000,
			 offsetof(struct cbcmn_bpf_shard, doorbell_lat));
		add_hist(u, "steal latency", r->k->hist[CBCMN_BPF_HIST_STEAL], 1000,
			 offsetof(struct cbcmn_bpf_shard, steal_lat));
		add_hist(u, "run-queue latency", r->k->hist[CBCMN_BPF_HIST_RUNQ], 1000,
			 offsetof(struct cbcmn_bpf_shard, runq_waits));
		add_hist(u, "contention wait (futex)", r->k->hist[CBCMN_BPF_HIST_FUTEX], 1000,
			 offsetof(struct cbcmn_bpf_shard, futex_waits));
		add_hist(u, "lock wait", r->k->lock_hist, 1, offsetof(struct cbcmn_bpf_shard, lock_contended));
		add_line(u, "%s", "");
	}
	add_line(u, "runtime, since it started:");
	add_line(u, "  tasks run %llu, spawned %llu, inline %llu, local picks %llu, inject %llu",
		 (unsigned long long)e->tasks_run, (unsigned long long)e->spawns,
		 (unsigned long long)e->inline_runs, (unsigned long long)e->local_hits,
		 (unsigned long long)e->inject_hits);
	add_line(u, "  steals %llu of %llu probes, %llu tasks taken, %llu gated; parks %llu, wakes %llu",
		 (unsigned long long)e->steal_successes, (unsigned long long)e->steal_attempts,
		 (unsigned long long)e->tasks_stolen, (unsigned long long)e->steals_gated,
		 (unsigned long long)e->parks, (unsigned long long)e->wakes);
	add_line(u, "  doorbells sent %llu, received %llu, coalesced %llu; lane msgs %llu out, %llu in",
		 (unsigned long long)e->doorbells_sent, (unsigned long long)e->doorbells_recv,
		 (unsigned long long)e->doorbells_coalesced, (unsigned long long)e->xmsgs_sent,
		 (unsigned long long)e->xmsgs_recv);
	add_line(u, "  SQEs %llu, CQEs %llu, enters %llu, back-pressure %llu, fiber I/O %llu",
		 (unsigned long long)e->sqes_submitted, (unsigned long long)e->cqes_reaped,
		 (unsigned long long)e->ring_enters, (unsigned long long)e->ring_msgs_backpressure,
		 (unsigned long long)e->io_ops);
	add_line(u, "  actors: migrations %llu, restarts %llu, mailbox back-pressure %llu, "
		 "depth p99 <= %llu",
		 (unsigned long long)e->actor_migrations, (unsigned long long)e->actor_restarts,
		 (unsigned long long)e->actor_backpressure, (unsigned long long)e->mailbox_depth_p99);
	add_line(u, "%s", "");
	if (!r->k) {
		add_line(u, "kernel figures off: %s", m->kernel_why);
		return;
	}
	const struct cbcmn_bpf_shard *k = &r->k->c;
	char b[5][24];
#define F(f) offsetof(struct cbcmn_bpf_shard, f)
	add_line(u, "kernel, since attach:");
	add_line(u, "  steals %s (%s tasks), failed probes %s; stolen from it %s (%s tasks)",
		 kcount(m, F(steals), k->steals, false, b[0]),
		 kcount(m, F(tasks_stolen), k->tasks_stolen, false, b[1]),
		 kcount(m, F(steal_fails), k->steal_fails, false, b[2]),
		 kcount(m, F(steals), r->out.steals, false, b[3]),
		 kcount(m, F(tasks_stolen), r->out.tasks, false, b[4]));
	add_line(u, "  on-CPU %s ms, off %s ms, preempted %s, migrations %s, CQ overflow %s",
		 kcount(m, F(oncpu_ns), bpfmon_oncpu_ns(r->k), true, b[0]),
		 kcount(m, F(offcpu_ns), bpfmon_offcpu_ns(r->k), true, b[1]),
		 kcount(m, F(involuntary), k->involuntary, false, b[2]),
		 kcount(m, F(migrations), k->migrations, false, b[3]),
		 kcount(m, F(cqe_overflows), k->cqe_overflows, false, b[4]));
	add_line(u, "  doorbells in %s: %s timed, %s found it running, %s merged",
		 kcount(m, F(doorbells_recv), k->doorbells_recv, false, b[0]),
		 kcount(m, F(doorbell_lat), k->doorbell_lat, false, b[1]),
		 kcount(m, F(doorbells_running), k->doorbells_running, false, b[2]),
		 kcount(m, F(doorbells_pending), k->doorbells_pending, false, b[3]));
	add_line(u, "  actors: migrations %s, restarts %s, mailbox back-pressure %s",
		 kcount(m, F(actor_migrations), k->actor_migrations, false, b[0]),
		 kcount(m, F(actor_restarts), k->actor_restarts, false, b[1]),
		 kcount(m, F(actor_backpressure), k->actor_backpressure, false, b[2]));
#undef F
}

/* "12%" of part in whole, "-" without a whole. */
static const char *pct(double part, double whole, char *buf)
{
	if (isnan(part) || isnan(whole) || whole <= 0)
		snprintf(buf, 32, "-");
	else
		snprintf(buf, 32, "%.0f%%", 100 * part / whole);
	return buf;
}

/* A group's steals for the topology: "steals in 120/s (30 from other
 * LLCs), out 80/s (10 to other LLCs)"; false when kernel figures are
 * off. */
static bool group_steals(const struct top_group *g, const char *others, char *buf, size_t len)
{
	char a[16], b[16], c[16], d[16];
	buf[0] = 0;
	if (!g)
		return false;
	top_fmt(TOP_COL_STEALS_IN, g->in_per_s, a, sizeof(a), 1);
	top_fmt(TOP_COL_STEALS_IN, g->in_x_per_s, b, sizeof(b), 1);
	top_fmt(TOP_COL_STEALS_IN, g->out_per_s, c, sizeof(c), 1);
	top_fmt(TOP_COL_STEALS_IN, g->out_x_per_s, d, sizeof(d), 1);
	snprintf(buf, len, "steals in %s/s (%s from other %s), out %s/s (%s to other %s)", a, b,
		 others, c, d, others);
	return true;
}

/* The topology's shard table: a head, then a line per shard (60 columns). */
#define TOPO_ROW "    %-9s %4s %5s %7s %5s %5s %6s %6s"
static void topo_head(struct ui *u)
{
	add_line(u, TOPO_ROW, "shard", "CPU", "STATE", "TASK/s", "BUSY%", "RUNQ", "STL/s", "OUT/s");
}

static void topo_shard(struct ui *u, const struct top_row *r)
{
	static const enum top_col cols[] = {TOP_COL_CPU, TOP_COL_STATE, TOP_COL_TASKS, TOP_COL_BUSY,
					    TOP_COL_QUEUE, TOP_COL_STEALS_IN, TOP_COL_STEALS_OUT};
	char id[16], c[7][16];
	snprintf(id, sizeof(id), "shard %u", r->shard);
	for (int i = 0; i < 7; i++)
		top_fmt(cols[i], r->v[cols[i]], c[i], sizeof(c[i]), 1);
	add_line(u, TOPO_ROW, id, c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
}

static void build_topo(struct ui *u)
{
	struct top_model *m = u->m;
	u->ntext = 0;
	int nn = top_model_nnodes(m), nl = top_model_nllcs(m);
	if (nn < 0) {
		add_line(u, "topology unknown (sysfs could not be read); shards by CPU:");
		nn = nl = 0;
	} else {
		add_line(u, "%d NUMA node%s, %d LLC group%s", nn, nn == 1 ? "" : "s", nl,
			 nl == 1 ? "" : "s");
	}
	char cell[2][32], st[LINE_LEN];
	if (nn > 0 && m->nodes) {
		char a[16], b[16], c[16];
		top_fmt(TOP_COL_STEALS_IN, m->placed_steals_per_s, a, sizeof(a), 1);
		top_fmt(TOP_COL_STEALS_IN, m->cross_llc_per_s, b, sizeof(b), 1);
		top_fmt(TOP_COL_STEALS_IN, m->cross_node_per_s, c, sizeof(c), 1);
		add_line(u, "steals between pinned shards %s/s: cross-LLC %s/s (%s), cross-node %s/s (%s)",
			 a, b, pct(m->cross_llc_per_s, m->placed_steals_per_s, cell[0]), c,
			 pct(m->cross_node_per_s, m->placed_steals_per_s, cell[1]));
	} else if (nn > 0) {
		add_line(u, "steals between groups: kernel figures off (%s)", m->kernel_why);
	}
	bool *done = calloc(m->nrows ? m->nrows : 1, sizeof(*done));
	if (!done)
		return;
	for (int n = 0; n < nn; n++) {
		double tasks = 0;
		for (uint32_t i = 0; i < m->nrows; i++)
			if (m->rows[i].node == n && !isnan(m->rows[i].v[TOP_COL_TASKS]))
				tasks += m->rows[i].v[TOP_COL_TASKS];
		top_fmt(TOP_COL_TASKS, tasks, cell[0], sizeof(cell[0]), 1);
		add_line(u, "%s", "");
		add_line(u, "node %d: %s tasks/s", top_model_node_id(m, n), cell[0]);
		if (group_steals(m->nodes ? &m->nodes[n] : NULL, "nodes", st, sizeof(st)))
			add_line(u, "  %s", st);
		for (int l = 0; l < nl; l++) {
			if (top_model_llc_node(m, l) != n)
				continue;
			char cpus[128];
			top_model_llc_cpus(m, l, cpus, sizeof(cpus));
			add_line(u, "  LLC %d (CPUs %s)", l, cpus);
			if (group_steals(m->llcs ? &m->llcs[l] : NULL, "LLCs", st, sizeof(st)))
				add_line(u, "    %s", st);
			bool head = false;
			for (uint32_t i = 0; i < m->nrows; i++) {
				const struct top_row *r = &m->rows[i];
				if (r->llc != l || !top_row_matches(r, u->filter))
					continue;
				done[i] = true;
				if (!head)
					topo_head(u);
				head = true;
				topo_shard(u, r);
			}
		}
	}
	bool header = false;
	for (uint32_t i = 0; i < m->nrows; i++) {
		const struct top_row *r = &m->rows[i];
		if (done[i] || !top_row_matches(r, u->filter))
			continue;
		if (!header) {
			add_line(u, "%s", "");
			add_line(u, "not placed (unpinned, or a CPU the topology does not list):");
			topo_head(u);
			header = true;
		}
		topo_shard(u, r);
	}
	free(done);
}

static void build_help(struct ui *u)
{
	u->ntext = 0;
	add_line(u, "cbcmn-top keys (docs/TOP.md has the details)");
	add_line(u, "  q            quit (from any view)");
	add_line(u, "  ? h          this help; Esc or ? returns");
	add_line(u, "  space        pause / resume sampling");
	add_line(u, "  s >  <       sort by the next / previous column");
	add_line(u, "  i            invert the sort order");
	add_line(u, "  /            filter: a substring of \"shard=N cpu=C node=D STATE\", or");
	add_line(u, "               a number matching a shard, CPU or node; empty clears");
	add_line(u, "  j k  arrows  select a shard (scroll in other views); PgUp PgDn Home End");
	add_line(u, "  Enter        the selected shard's detail and histograms; Enter/Esc back");
	add_line(u, "  t            topology: shards by NUMA node and LLC; t/Esc back");
	add_line(u, "%s", "");
	add_line(u, "columns (per second over the last interval unless noted):");
	add_line(u, "  ID CPU ND    shard, its pinned CPU, that CPU's NUMA node");
	add_line(u, "  STATE        run(ning), srch (searching), park(ed), stop(ped)");
	add_line(u, "  RUNQ         run-queue depth now;  TASK/s tasks run");
	add_line(u, "  STL/s TKN/s  steals it made (as thief) and tasks it took");
	add_line(u, "  OUT/s        steals from it (as victim)           [kernel]");
	add_line(u, "  OK%%          its steal probes that found work      [kernel]");
	add_line(u, "  DBTX DBRX    doorbells it rang / received");
	add_line(u, "  DBp99        doorbell latency p99, us             [kernel]");
	add_line(u, "  SQE CQE      submissions and completions of its ring");
	add_line(u, "  BUSY%%        share of recent time running tasks (runtime)");
	add_line(u, "  WAITms       futex + runtime lock wait, ms per s  [kernel]");
	add_line(u, "  MIGR         kernel migrations since attach       [kernel]");
	add_line(u, "  ONCPU%%       time its thread was on a CPU         [kernel]");
	add_line(u, "  LOAD         actor wheel load, 1.00 = nominal turn rate");
	add_line(u, "  ACTR ARUN    actors homed there, of them runnable, now");
	add_line(u, "  MBOX         messages in their mailboxes, now");
	add_line(u, "  AMG/s RST/s  actors it migrated away; supervisor restarts");
	add_line(u, "%s", "");
	add_line(u, "The sparkline charts the sort column (tasks/s for ID, CPU, ND).");
}

static void draw_lines(struct ui *u, const char *title)
{
	int room = LINES - 2;
	if (u->scroll > u->ntext - room)
		u->scroll = u->ntext - room;
	if (u->scroll < 0)
		u->scroll = 0;
	char bar[LINE_LEN];
	snprintf(bar, sizeof(bar), "%s  (%s[%d])%s", title, u->m->comm, (int)u->m->pid,
		 u->paused ? "  [PAUSED]" : "");
	bar_line(u, 0, bar);
	for (int i = 0; i < room && u->scroll + i < u->ntext; i++)
		put(1 + i, 0, u->text[u->scroll + i]);
	draw_status(u, u->view == V_DETAIL ? "Enter/Esc back  j/k scroll  q quit"
					   : "Esc back  j/k scroll  q quit");
}

static void draw(struct ui *u)
{
	erase();
	char title[64];
	switch (u->view) {
	case V_MAIN:
		draw_main(u);
		break;
	case V_DETAIL:
		build_detail(u);
		snprintf(title, sizeof(title), "shard %u detail", u->sel);
		draw_lines(u, title);
		break;
	case V_TOPO:
		build_order(u); /* the filter applies */
		build_topo(u);
		draw_lines(u, "topology");
		break;
	case V_HELP:
		build_help(u);
		draw_lines(u, "help");
		break;
	}
	refresh();
}

/* ---- keys ------------------------------------------------------------------- */

static void move_sel(struct ui *u, int by)
{
	build_order(u);
	if (!u->norder)
		return;
	int i = sel_index(u);
	i = i < 0 ? 0 : i + by;
	i = i < 0 ? 0 : i >= (int)u->norder ? (int)u->norder - 1 : i;
	u->sel = u->order[i];
}

static void key_edit(struct ui *u, int ch)
{
	size_t n = strlen(u->edit);
	if (ch == 27) {
		u->editing = false;
	} else if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
		snprintf(u->filter, sizeof(u->filter), "%s", u->edit);
		u->editing = false;
		u->first = 0;
	} else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
		if (n)
			u->edit[n - 1] = 0;
	} else if (ch >= 32 && ch < 127 && n + 1 < sizeof(u->edit)) {
		u->edit[n] = (char)ch;
		u->edit[n + 1] = 0;
	}
}

/* Returns false to quit. */
static bool key(struct ui *u, int ch)
{
	if (u->editing) {
		key_edit(u, ch);
		return true;
	}
	int page = LINES > 6 ? LINES - 6 : 1;
	bool lines_view = u->view != V_MAIN;
	switch (ch) {
	case 'q':
		return false;
	case '?':
	case 'h':
		if (u->view == V_HELP) {
			u->view = u->under_help;
		} else {
			u->under_help = u->view;
			u->view = V_HELP;
			u->scroll = 0;
		}
		break;
	case 27: /* Esc */
		u->view = u->view == V_HELP ? u->under_help : V_MAIN;
		break;
	case '\n':
	case '\r':
	case KEY_ENTER:
		if (u->view == V_MAIN && u->norder) {
			u->view = V_DETAIL;
			u->scroll = 0;
		} else if (u->view == V_DETAIL) {
			u->view = V_MAIN;
		}
		break;
	case 't':
		u->view = u->view == V_TOPO ? V_MAIN : V_TOPO;
		u->scroll = 0;
		break;
	case ' ':
		u->paused = !u->paused;
		break;
	case 's':
	case '>':
		u->sort = (u->sort + 1) % TOP_NCOLS;
		break;
	case '<':
		u->sort = (u->sort + TOP_NCOLS - 1) % TOP_NCOLS;
		break;
	case 'i':
		u->invert = !u->invert;
		break;
	case '/':
		if (u->view == V_MAIN || u->view == V_TOPO) {
			u->editing = true;
			snprintf(u->edit, sizeof(u->edit), "%s", u->filter);
		}
		break;
	case 'j':
	case KEY_DOWN:
		lines_view ? (void)u->scroll++ : move_sel(u, 1);
		break;
	case 'k':
	case KEY_UP:
		lines_view ? (void)u->scroll-- : move_sel(u, -1);
		break;
	case KEY_NPAGE:
		lines_view ? (void)(u->scroll += page) : move_sel(u, page);
		break;
	case KEY_PPAGE:
		lines_view ? (void)(u->scroll -= page) : move_sel(u, -page);
		break;
	case KEY_HOME:
		lines_view ? (void)(u->scroll = 0) : move_sel(u, -(int)u->m->nrows);
		break;
	case KEY_END:
		lines_view ? (void)(u->scroll = MAX_LINES) : move_sel(u, (int)u->m->nrows);
		break;
	case KEY_RESIZE:
		clearok(curscr, TRUE); /* repaint all: nothing of the old size stays */
		break;
	default:
		break;
	}
	return true;
}

/* ---- the loop ------------------------------------------------------------- */

static uint64_t mono_ms(void)
{
	return mono_ns() / 1000000;
}

int top_ui_run(struct top_model *m, const struct top_ui_opts *o, volatile sig_atomic_t *stop)
{
	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
		return -ENOTTY;
	struct ui u = {.m = m, .o = o, .sort = TOP_COL_SHARD};
	u.text = calloc(MAX_LINES, LINE_LEN);
	if (!u.text)
		return -ENOMEM;
	const char *cs = nl_langinfo(CODESET);
	u.utf8 = cs && !strcmp(cs, "UTF-8");

	tcgetattr(STDIN_FILENO, &saved_tty);
	/* Not initscr(): on a terminal terminfo does not know it prints its
	 * own message and exits; newterm() returns NULL. */
	SCREEN *scr = newterm(NULL, stdout, stdin);
	if (!scr) {
		free(u.text);
		return -ENOTTY;
	}
	set_term(scr);
	restore_len = 0;
	add_cap("rmcup"); /* leave the alternate screen */
	add_cap("cnorm"); /* cursor visible */
	add_cap("sgr0");  /* attributes off */
	screen_up = 1;
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
	set_escdelay(25);
	if (o->color && has_colors()) {
		start_color();
		use_default_colors();
		init_pair(C_RUN, COLOR_GREEN, -1);
		init_pair(C_SEARCH, COLOR_YELLOW, -1);
		init_pair(C_PARK, COLOR_CYAN, -1);
		init_pair(C_STOP, COLOR_RED, -1);
		init_pair(C_BAR, COLOR_BLACK, COLOR_CYAN);
		init_pair(C_WARN, COLOR_YELLOW, -1);
	}
	u.color = o->color && has_colors();

	int rc = 0;
	uint64_t delay = (uint64_t)(o->delay_s * 1000);
	uint64_t next = mono_ms() + delay;
	draw(&u);
	while (!*stop) {
		uint64_t now = mono_ms();
		int wait = next > now ? (int)(next - now) : 0;
		timeout(wait > 250 ? 250 : wait); /* *stop is seen within 250 ms */
		int ch = getch();
		if (ch != ERR) {
			if (!key(&u, ch))
				break;
			draw(&u);
			continue;
		}
		if (mono_ms() < next)
			continue;
		next += delay;
		if (mono_ms() > next)
			next = mono_ms() + delay; /* fell behind (suspended): no burst */
		if (!u.paused && !m->ended) {
			int s = top_model_sample(m);
			if (s && s != -ESRCH) {
				rc = s;
				break;
			}
		}
		draw(&u);
	}
	endwin();
	screen_up = 0;
	delscreen(scr);
	free(u.text);
	free(u.order);
	free(u.warn_idx);
	return rc;
}
