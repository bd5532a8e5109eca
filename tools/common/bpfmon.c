/* bpfmon.c: open, configure, load and attach bpf/cbcmn.bpf.c one program at
 * a time, and read its maps (bpfmon.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "bpfmon.h"
#include "clock.h"
#include "cbcmn.skel.h"

#define TRACEFS "/sys/kernel/tracing"
#define BPFFS "/sys/fs/bpf"
#define TRACEFS_MAGIC 0x74726163
#define BPF_FS_MAGIC 0xcafe4a11
#define MAX_BINS 4

enum kind { USDT, TP_BTF, RAW_TP, TP, FENTRY, FEXIT };

/* The rows name only the fields they need: the last two (arg, alt) are
 * NULL and false for most. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
/* Each program of cbcmn.bpf.c and what it attaches to.  A RAW_TP or TP
 * entry right after a TP_BTF, FENTRY or FEXIT entry is the fallback of the TP_BTF (or FENTRY/FEXIT)
 * entry just before it: it loads only where that one cannot. */
static const struct spec {
	const char *name;
	enum kind kind;
	const char *cat;  /* tracepoint category, USDT provider */
	const char *what; /* tracepoint or probe name */
	unsigned off_flag;
	/* TP_BTF: the argument the program's layout rests on, checked against
	 * the kernel's btf_trace_<what> (btf_arg_is()); NULL: none. */
	const char *arg;
	/* Another form of the program before it (the same counter, another
	 * kernel's tracepoint or layout): it loads only where no entry before
	 * it in its run (the entries with alt, back to the first without) is
	 * loaded. */
	bool alt;
} specs[] = {
	{"cbcmn_steal", USDT, "cbcmn", "steal", 0},
	{"cbcmn_steal_fail", USDT, "cbcmn", "steal_fail", 0},
	{"cbcmn_doorbell", USDT, "cbcmn", "doorbell", 0},
	{"cbcmn_doorbell_coalesced", USDT, "cbcmn", "doorbell_coalesced", 0},
	{"cbcmn_xmsg", USDT, "cbcmn", "xmsg", 0},
	{"cbcmn_park", USDT, "cbcmn", "park", 0},
	{"cbcmn_lock_contended", USDT, "cbcmn", "lock_contended", 0},
	{"cbcmn_exec_start", USDT, "cbcmn", "exec_start", 0},
	{"cbcmn_exec_stop", USDT, "cbcmn", "exec_stop", 0},
	{"cbcmn_sched_switch", TP_BTF, "sched", "sched_switch", BPFMON_NO_SCHED},
	{"cbcmn_sched_switch_raw", RAW_TP, "sched", "sched_switch", BPFMON_NO_SCHED},
	{"cbcmn_sched_wakeup", TP_BTF, "sched", "sched_wakeup", BPFMON_NO_SCHED},
	{"cbcmn_sched_wakeup_raw", RAW_TP, "sched", "sched_wakeup", BPFMON_NO_SCHED},
	{"cbcmn_sched_wakeup_new", TP_BTF, "sched", "sched_wakeup_new", BPFMON_NO_SCHED},
	{"cbcmn_sched_wakeup_new_raw", RAW_TP, "sched", "sched_wakeup_new", BPFMON_NO_SCHED},
	{"cbcmn_sched_migrate", TP_BTF, "sched", "sched_migrate_task", BPFMON_NO_SCHED},
	{"cbcmn_sched_migrate_raw", RAW_TP, "sched", "sched_migrate_task", BPFMON_NO_SCHED},
	/* io_uring: one run per counter, the tp_btf forms first (their
	 * arguments by kernel version in cbcmn.bpf.c), then the classic
	 * tracepoints, whose records the programs read by field name.
	 * _submit_req is 6.5+, _submit_sqe before. */
	{"cbcmn_io_submit_btf", TP_BTF, "io_uring", "io_uring_submit_req", BPFMON_NO_IO_URING, "0:*io_kiocb"},
	{"cbcmn_io_submit_sqe_btf", TP_BTF, "io_uring", "io_uring_submit_sqe", BPFMON_NO_IO_URING, "0:*io_kiocb", true},
	{"cbcmn_io_submit", TP, "io_uring", "io_uring_submit_req", BPFMON_NO_IO_URING, NULL, true},
	{"cbcmn_io_submit_sqe", TP, "io_uring", "io_uring_submit_sqe", BPFMON_NO_IO_URING, NULL, true},
	/* (ctx, req, cqe) 6.13+; (ctx, req, user_data, res, ...) 5.18-6.12 */
	{"cbcmn_io_complete_btf", TP_BTF, "io_uring", "io_uring_complete", BPFMON_NO_IO_URING, "2:*io_uring_cqe"},
	{"cbcmn_io_complete_btf_res", TP_BTF, "io_uring", "io_uring_complete", BPFMON_NO_IO_URING, "3:int", true},
	{"cbcmn_io_complete", TP, "io_uring", "io_uring_complete", BPFMON_NO_IO_URING, NULL, true},
	{"cbcmn_io_cqring_wait_btf", TP_BTF, "io_uring", "io_uring_cqring_wait", BPFMON_NO_IO_URING},
	{"cbcmn_io_cqring_wait", TP, "io_uring", "io_uring_cqring_wait", BPFMON_NO_IO_URING, NULL, true},
	/* (req, rw) 5.19+; (ctx, rw, req, ...) on 5.15: the tracepoint there */
	{"cbcmn_io_async_work_btf", TP_BTF, "io_uring", "io_uring_queue_async_work", BPFMON_NO_IO_URING, "0:*io_kiocb"},
	{"cbcmn_io_async_work", TP, "io_uring", "io_uring_queue_async_work", BPFMON_NO_IO_URING, NULL, true},
	{"cbcmn_io_cqe_overflow_btf", TP_BTF, "io_uring", "io_uring_cqe_overflow", BPFMON_NO_IO_URING},
	{"cbcmn_io_cqe_overflow", TP, "io_uring", "io_uring_cqe_overflow", BPFMON_NO_IO_URING, NULL, true},
	{"cbcmn_futex_wait_entry", FENTRY, "", "futex_wait", BPFMON_NO_FUTEX},
	{"cbcmn_futex_enter", TP, "syscalls", "sys_enter_futex", BPFMON_NO_FUTEX},
	{"cbcmn_futex_wait_exit", FEXIT, "", "futex_wait", BPFMON_NO_FUTEX},
	{"cbcmn_futex_exit", TP, "syscalls", "sys_exit_futex", BPFMON_NO_FUTEX},
};
#pragma GCC diagnostic pop
#define NSPECS (sizeof(specs) / sizeof(specs[0]))

/* The verifier's log of a program that failed to load: its tail holds the
 * reason (6.4+ kernels keep the end of the log when it does not fit). */
#define LOG_LEN 4096

/* An executor found by its thread name before exec_start told us. */
struct ident {
	__u32 tid;
	__s32 cpu;
};

struct bpfmon {
	struct cbcmn_bpf *skel;
	pid_t pid;
	struct bpfmon_prog progs[NSPECS];
	char targets[NSPECS][80];
	char reasons[NSPECS][160];
	int refused[NSPECS];      /* the load error of a program the kernel refused, 0 none */
	struct bpf_link *links[NSPECS][MAX_BINS];
	struct ident ident[CBCMN_BPF_MAX_SHARDS];
	bool switch_on;           /* a sched_switch program is attached: the records move */
	char pin_dir[PATH_MAX];
};

static bool verbose;
/* The program libbpf last said it failed to load ("prog 'NAME': failed to
 * load"): how a refusal without a verifier log (EPERM) is pinned on one. */
static char refused_name[64];

static int print_libbpf(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[256], name[64];
	va_list cp;
	va_copy(cp, ap);
	vsnprintf(line, sizeof(line), fmt, cp);
	va_end(cp);
	const char *at = strstr(line, "prog '");
	if (level == LIBBPF_WARN && at && sscanf(at, "prog '%63[^']'", name) == 1 &&
	    strstr(at, "': failed to load"))
		snprintf(refused_name, sizeof(refused_name), "%s", name);
	if (!verbose)
		return 0; /* missing probes and refused programs: bpfmon_progs() */
	return vfprintf(stderr, fmt, ap);
}

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	if (errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* Effective capability bit cap of this process (from /proc/self/status). */
static bool has_cap(int cap)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long long eff = 0;
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	fclose(f);
	return eff >> cap & 1;
}

static bool fs_is(const char *path, long magic)
{
	struct statfs sf;
	return statfs(path, &sf) == 0 && sf.f_type == magic;
}

static int mount_fs(const char *path, const char *type, long magic)
{
	if (fs_is(path, magic))
		return 0;
	if (mount("nodev", path, type, 0, NULL) && errno != EBUSY)
		return -errno;
	return 0;
}

static bool tracepoint_exists(const char *cat, const char *name)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), TRACEFS "/events/%s/%s/id", cat, name);
	return access(p, F_OK) == 0;
}

/* tp_btf needs the tracepoint's btf_trace_<name> typedef in vmlinux BTF. */
static bool btf_tracepoint_exists(const struct btf *vmlinux, const char *name)
{
	char t[128];
	snprintf(t, sizeof(t), "btf_trace_%s", name);
	return vmlinux && btf__find_by_name_kind(vmlinux, t, BTF_KIND_TYPEDEF) > 0;
}

/* Is argument n of tracepoint tp, as this kernel declares it (btf_trace_<tp>:
 * a pointer to a function whose first parameter is the tracepoint's data,
 * then its arguments), of the type arg says: "N:*NAME" a pointer to
 * struct NAME, "N:int" a signed 4-byte integer (5.15's io_uring_complete
 * has an unsigned cflags where 6.1's has res)?  A tp_btf program reads its
 * arguments as it declares them, and the verifier does not compare that
 * with the tracepoint's: a layout from another kernel verifies and reads
 * the wrong thing (io_uring_complete's res before 6.13). */
static bool btf_arg_is(const struct btf *vmlinux, const char *tp, const char *arg)
{
	char t[128], *rest;
	snprintf(t, sizeof(t), "btf_trace_%s", tp);
	int id = vmlinux ? btf__find_by_name_kind(vmlinux, t, BTF_KIND_TYPEDEF) : -1;
	if (id <= 0)
		return false;
	const struct btf_type *ty = btf__type_by_id(vmlinux, btf__resolve_type(vmlinux, id));
	if (!ty || !btf_is_ptr(ty) || !(ty = btf__type_by_id(vmlinux, ty->type)) || !btf_is_func_proto(ty))
		return false;
	unsigned long n = strtoul(arg, &rest, 10);
	if (*rest++ != ':' || n + 1 >= btf_vlen(ty))
		return false;
	int at = btf__resolve_type(vmlinux, btf_params(ty)[n + 1].type);
	const struct btf_type *a = at > 0 ? btf__type_by_id(vmlinux, at) : NULL;
	if (!a)
		return false;
	if (!strcmp(rest, "int"))
		return btf_is_int(a) && a->size == 4 && (btf_int_encoding(a) & BTF_INT_SIGNED);
	if (*rest != '*' || !btf_is_ptr(a))
		return false;
	at = btf__resolve_type(vmlinux, a->type);
	a = at > 0 ? btf__type_by_id(vmlinux, at) : NULL;
	return a && btf_is_struct(a) && !strcmp(btf__name_by_offset(vmlinux, a->name_off), rest + 1);
}

/* Is an entry before i in its run of alternatives loading (spec.alt)? */
static bool alt_chosen(size_t i, const bool *chosen)
{
	for (size_t j = i; j > 0 && specs[j].alt; j--)
		if (chosen[j - 1])
			return true;
	return false;
}

/* The binaries of pid that may hold the cbcmn probes: its executable (the
 * library linked statically) and every libcbcmn.so it maps.  Returns how
 * many were written to bins. */
static int probe_binaries(pid_t pid, char bins[MAX_BINS][PATH_MAX])
{
	char p[64], line[PATH_MAX + 256];
	int n = 0;
	snprintf(p, sizeof(p), "/proc/%d/exe", pid);
	ssize_t len = readlink(p, bins[0], PATH_MAX - 1);
	if (len > 0) {
		bins[0][len] = 0;
		n = 1;
	}
	snprintf(p, sizeof(p), "/proc/%d/maps", pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return n;
	while (n < MAX_BINS && fgets(line, sizeof(line), f)) {
		char *path = strchr(line, '/');
		if (!path || !strstr(path, "libcbcmn"))
			continue;
		path[strcspn(path, "\n")] = 0;
		bool seen = false;
		for (int i = 0; i < n; i++)
			seen |= strcmp(bins[i], path) == 0;
		if (!seen)
			snprintf(bins[n++], PATH_MAX, "%s", path);
	}
	fclose(f);
	return n;
}

/* The CPU a thread is pinned to: its affinity mask has one CPU; else -1. */
static int pinned_cpu(pid_t tid)
{
	cpu_set_t set;
	if (sched_getaffinity(tid, sizeof(set), &set) || CPU_COUNT(&set) != 1)
		return -1;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			return c;
	return -1;
}

/* Thread tid's se.sum_exec_runtime, the kernel's own count of its time
 * on a CPU (/proc's schedstat, first field; for a thread on a CPU now, as
 * of the last tick), ns; UINT64_MAX when it cannot be read. */
static uint64_t sched_sum(pid_t pid, __u32 tid)
{
	char path[64], buf[96];
	snprintf(path, sizeof(path), "/proc/%d/task/%u/schedstat", (int)pid, tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return UINT64_MAX;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return UINT64_MAX;
	buf[n] = 0;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 10);
	/* 0: schedstat without the figure (no CONFIG_SCHED_INFO figures
	 * before 5.14 with delay accounting off): unknown, as a thread that
	 * runs this has run. */
	return errno || end == buf || !v ? UINT64_MAX : (uint64_t)v;
}

/* Executors already running: threads named "cbcmn-exec-N".  Only adds
 * threads the map does not know (exec_start may have beaten us).  Their
 * thread and CPU go to m->ident (bpfmon_read reports them where the shard
 * has none from exec_start) and, before the programs are attached
 * (attached: false), into the shards map too, for readers of a pinned map:
 * once attached, rewriting a shard's value could lose a concurrent add. */
static void scan_executors(struct bpfmon *m, bool attached)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "/proc/%d/task", m->pid);
	DIR *d = opendir(p);
	struct dirent *de;
	if (!d)
		return;
	int fd = bpf_map__fd(m->skel->maps.threads);
	int fs = bpf_map__fd(m->skel->maps.shards);
	while ((de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		char comm[32] = "";
		snprintf(p, sizeof(p), "/proc/%d/task/%s/comm", m->pid, de->d_name);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = 0;
		fclose(f);
		unsigned id;
		if (sscanf(comm, "cbcmn-exec-%u", &id) != 1 || id >= CBCMN_BPF_MAX_SHARDS)
			continue;
		__u32 tid = (__u32)atoi(de->d_name);
		/* Counting starts here: the time on a CPU from the kernel's
		 * own sum, so the switches before attach need not be seen. */
		struct cbcmn_bpf_thread th = {.shard = id, .last_sum = sched_sum(m->pid, tid)};
		th.last_ts = mono_ns();
		bpf_map_update_elem(fd, &tid, &th, BPF_NOEXIST);
		m->ident[id].tid = tid;
		m->ident[id].cpu = pinned_cpu((pid_t)tid);
		struct cbcmn_bpf_shard sh;
		if (!attached && !bpf_map_lookup_elem(fs, &id, &sh) && !sh.tid) {
			sh.tid = tid;
			sh.cpu = m->ident[id].cpu;
			bpf_map_update_elem(fs, &id, &sh, BPF_EXIST);
		}
	}
	closedir(d);
}

static int pin_maps(struct bpfmon *m, char *err, size_t errlen)
{
	int rc = mount_fs(BPFFS, "bpf", BPF_FS_MAGIC);
	if (rc)
		return fail(err, errlen, rc, "cannot mount bpffs at " BPFFS ": %s", strerror(-rc));
	snprintf(m->pin_dir, sizeof(m->pin_dir), BPFFS "/cbcmn");
	mkdir(m->pin_dir, 0755);
	snprintf(m->pin_dir, sizeof(m->pin_dir), BPFFS "/cbcmn/%d", m->pid);
	if (mkdir(m->pin_dir, 0755) && errno != EEXIST)
		return fail(err, errlen, -errno, "mkdir %s: %s", m->pin_dir, strerror(errno));
	struct bpf_map *map;
	bpf_object__for_each_map(map, m->skel->obj) {
		if (!strchr(bpf_map__name(map), '.') && strncmp(bpf_map__name(map), "__bpf_usdt", 10)) {
			char p[PATH_MAX + 64];
			snprintf(p, sizeof(p), "%s/%s", m->pin_dir, bpf_map__name(map));
			if ((rc = bpf_map__pin(map, p)))
				return fail(err, errlen, rc, "pin %s: %s", p, strerror(-rc));
		}
	}
	return 0;
}

static void unpin_maps(struct bpfmon *m)
{
	if (!m->pin_dir[0])
		return;
	struct bpf_map *map;
	bpf_object__for_each_map(map, m->skel->obj)
		if (bpf_map__is_pinned(map))
			bpf_map__unpin(map, NULL);
	rmdir(m->pin_dir);
}

static void attach_all(struct bpfmon *m)
{
	char bins[MAX_BINS][PATH_MAX];
	int nbins = probe_binaries(m->pid, bins);
	for (size_t i = 0; i < NSPECS; i++) {
		struct bpfmon_prog *pr = &m->progs[i];
		struct bpf_program *prog = bpf_object__find_program_by_name(m->skel->obj, specs[i].name);
		if (pr->state != BPFMON_ATTACHED || !prog)
			continue;
		if (specs[i].kind == USDT) {
			int last = -ENOENT;
			for (int b = 0; b < nbins; b++) {
				struct bpf_link *l = bpf_program__attach_usdt(prog, m->pid, bins[b],
									      specs[i].cat, specs[i].what, NULL);
				if (l)
					m->links[i][pr->links++] = l;
				else
					last = -errno;
			}
			if (!pr->links) {
				pr->state = last == -ENOENT ? BPFMON_MISSING : BPFMON_FAILED;
				pr->err = last;
				snprintf(m->reasons[i], sizeof(m->reasons[i]), "%s%s",
					 last == -ENOENT ? "not in the target" : "attach: ",
					 last == -ENOENT ? "" : strerror(-last));
			}
			continue;
		}
		struct bpf_link *l = bpf_program__attach(prog);
		if (!l) {
			pr->state = BPFMON_FAILED;
			pr->err = -errno;
			snprintf(m->reasons[i], sizeof(m->reasons[i]), "attach: %s", strerror(errno));
			continue;
		}
		m->links[i][0] = l;
		pr->links = 1;
	}
}

/* CBCMN_BPF_REJECT=NAME[,NAME...], a debugging aid (docs/OBSERVABILITY.md):
 * the named programs are loaded as socket filters, a type whose verifier
 * refuses their tracing helpers, to see what the tools do when the kernel
 * rejects a program.  Unset, nothing changes. */
static bool reject_wanted(const char *name)
{
	const char *env = getenv("CBCMN_BPF_REJECT");
	size_t n = strlen(name);
	for (const char *at = env; at && *at; at += strcspn(at, ",") + (at[strcspn(at, ",")] != 0))
		if (strcspn(at, ",") == n && !strncmp(at, name, n))
			return true;
	return false;
}

/* CBCMN_BPF_MISS_SWITCHES=N, a test aid (docs/OBSERVABILITY.md):
 * sched_switch ignores every Nth switch of each executor thread, as the
 * kernel itself does with some.  Unset or not a number: 0, none. */
static __u32 miss_switches(void)
{
	const char *env = getenv("CBCMN_BPF_MISS_SWITCHES");
	char *end;
	unsigned long n = env ? strtoul(env, &end, 10) : 0;
	return env && *env && !*end && n < UINT32_MAX ? (__u32)n : 0;
}

/* Decide, program by program, what loads: a missing tracepoint, a flag, or
 * an earlier refusal turns a program off instead of failing the object.
 * Each program that loads gets logs[i] for the verifier's log, which the
 * kernel fills only if it refuses it. */
static void configure(struct bpfmon *m, unsigned flags, const struct btf *vmlinux,
		      char (*logs)[LOG_LEN])
{
	bool btf_done[NSPECS] = {false};
	bool no_fentry = false; /* fentry and fexit go together */
	for (size_t i = 0; i < NSPECS; i++)
		no_fentry |= m->refused[i] && (specs[i].kind == FENTRY || specs[i].kind == FEXIT);
	memset(m->progs, 0, sizeof(m->progs));
	for (size_t i = 0; i < NSPECS; i++) {
		const struct spec *s = &specs[i];
		struct bpfmon_prog *pr = &m->progs[i];
		struct bpf_program *prog = bpf_object__find_program_by_name(m->skel->obj, s->name);
		pr->name = s->name;
		pr->target = m->targets[i];
		pr->reason = m->reasons[i];
		snprintf(m->targets[i], sizeof(m->targets[i]), "%s %s%s%s",
			 s->kind == USDT ? "usdt" : s->kind == TP_BTF ? "tp_btf" :
			 s->kind == RAW_TP ? "raw_tp" : s->kind == FENTRY ? "fentry" :
			 s->kind == FEXIT ? "fexit" : "tracepoint",
			 s->kind == USDT || s->kind == TP ? s->cat : "",
			 s->kind == USDT || s->kind == TP ? ":" : "", s->what);
		bool on = true;
		if (flags & s->off_flag) {
			pr->state = BPFMON_OFF;
			on = false;
		} else if (m->refused[i]) {
			pr->state = BPFMON_FAILED; /* reason set when it was refused */
			pr->err = m->refused[i];
			on = false;
		} else if (s->alt && alt_chosen(i, btf_done)) {
			pr->state = BPFMON_OFF; /* another form of it loads */
			on = false;
		} else if (s->kind == TP_BTF) {
			on = btf_tracepoint_exists(vmlinux, s->what);
			if (on && s->arg && !btf_arg_is(vmlinux, s->what, s->arg)) {
				on = false;
				snprintf(m->reasons[i], sizeof(m->reasons[i]),
					 "argument %s differs in this kernel", s->arg);
			}
			btf_done[i] = on;
			if (!on)
				pr->state = BPFMON_OFF; /* the raw_tp entry next tries */
		} else if (s->kind == RAW_TP) {
			if (i > 0 && btf_done[i - 1]) {
				pr->state = BPFMON_OFF;
				on = false;
			} else if (!(on = tracepoint_exists(s->cat, s->what))) {
				pr->state = BPFMON_MISSING;
				pr->err = -ENOENT;
			}
		} else if (s->kind == FENTRY || s->kind == FEXIT) {
			on = !no_fentry && vmlinux &&
			     btf__find_by_name_kind(vmlinux, s->what, BTF_KIND_FUNC) > 0;
			btf_done[i] = on;
			if (!on)
				pr->state = BPFMON_OFF; /* the fallback entry next tries */
		} else if (s->kind == TP && i > 0 && btf_done[i - 1]) {
			pr->state = BPFMON_OFF;
			on = false;
		} else if (s->kind == TP && (s->off_flag & BPFMON_NO_FUTEX) &&
			   !(flags & BPFMON_FUTEX_TP)) {
			pr->state = BPFMON_OFF; /* opt-in: BPFMON_FUTEX_TP */
			on = false;
		} else if (s->kind == TP && !(on = tracepoint_exists(s->cat, s->what))) {
			pr->state = BPFMON_MISSING;
			pr->err = -ENOENT;
		}
		if (pr->state == BPFMON_MISSING)
			snprintf(m->reasons[i], sizeof(m->reasons[i]), "%s",
				 s->kind == USDT ? "not in the target" : "not in this kernel");
		btf_done[i] |= on && s->alt; /* a run's later forms see it */
		if (!prog)
			continue;
		bpf_program__set_autoload(prog, on);
		logs[i][0] = 0;
		if (on) {
			bpf_program__set_log_buf(prog, logs[i], LOG_LEN);
			if (reject_wanted(s->name))
				bpf_program__set_type(prog, BPF_PROG_TYPE_SOCKET_FILTER);
		}
	}
}

/* After a failed load: which program the kernel refused.  The one with a
 * verifier log (the kernel writes it only on a refusal), else the one
 * libbpf named ("failed to load", e.g. EPERM without a log); -1 if the
 * failure was no program's (maps, BTF). */
static int refused_prog(const struct bpfmon *m, char (*logs)[LOG_LEN])
{
	for (size_t i = 0; i < NSPECS; i++)
		if (logs[i][0] && !m->refused[i])
			return (int)i;
	for (size_t i = 0; i < NSPECS; i++)
		if (!m->refused[i] && !strcmp(specs[i].name, refused_name))
			return (int)i;
	return -1;
}

/* The verifier's reason: the last line of its log that is not one of its
 * statistics; or, without a log, the error. */
static void refusal_reason(char *out, size_t len, const char *log, int rc)
{
	const char *why = NULL;
	int n = 0;
	for (const char *l = log; *l;) {
		int k = (int)strcspn(l, "\n");
		if (k && strncmp(l, "processed ", 10) && strncmp(l, "verification time", 17) &&
		    strncmp(l, "stack depth", 11)) {
			why = l;
			n = k;
		}
		l += k + (l[k] != 0);
	}
	if (why)
		snprintf(out, len, "rejected by the verifier: %.*s", n, why);
	else
		snprintf(out, len, "refused at load: %s", strerror(-rc));
}

int bpfmon_open(struct bpfmon **out, pid_t pid, unsigned flags, char *err, size_t errlen)
{
	struct bpfmon *m = NULL;
	struct btf *vmlinux = NULL;
	char p[64];
	int rc;

	if (!out || pid <= 0)
		return fail(err, errlen, -EINVAL, "bad process id %d", (int)pid);
	*out = NULL;
	snprintf(p, sizeof(p), "/proc/%d", pid);
	if (access(p, F_OK))
		return fail(err, errlen, -ESRCH, "no such process: %d", (int)pid);
	/* CAP_SYS_ADMIN = 21, CAP_PERFMON = 38, CAP_BPF = 39 */
	if (!has_cap(21) && !(has_cap(38) && has_cap(39)))
		return fail(err, errlen, -EPERM,
			    "loading eBPF programs needs CAP_BPF and CAP_PERFMON (or root)");
	if (access("/sys/kernel/btf/vmlinux", R_OK))
		return fail(err, errlen, -ENOENT,
			    "/sys/kernel/btf/vmlinux is missing: the kernel has no BTF (CONFIG_DEBUG_INFO_BTF)");
	if ((rc = mount_fs(TRACEFS, "tracefs", TRACEFS_MAGIC)))
		return fail(err, errlen, rc, "cannot mount tracefs at " TRACEFS ": %s", strerror(-rc));

	verbose = flags & BPFMON_VERBOSE;
	libbpf_set_print(print_libbpf);

	if (!(m = calloc(1, sizeof(*m))))
		return fail(err, errlen, -ENOMEM, "out of memory");
	m->pid = pid;
	vmlinux = btf__load_vmlinux_btf();
	/* Load; when the kernel refuses one program (the verifier rejects it,
	 * or fentry is not permitted), open the object again without it (its
	 * fallback, if it has one, takes its place) and report it FAILED: one
	 * program less, not a monitor less.  Each round turns one more off. */
	char (*logs)[LOG_LEN] = calloc(NSPECS, LOG_LEN);
	if (!logs) {
		rc = fail(err, errlen, -ENOMEM, "out of memory");
		goto cleanup;
	}
	for (size_t round = 0;; round++) {
		if (!(m->skel = cbcmn_bpf__open())) {
			rc = fail(err, errlen, -errno, "cannot open the BPF object: %s", strerror(errno));
			break;
		}
		m->skel->rodata->targ_tgid = (__u32)pid;
		m->skel->rodata->miss_switch_every = miss_switches();
		configure(m, flags, vmlinux, logs);
		refused_name[0] = 0;
		if (!(rc = cbcmn_bpf__load(m->skel)))
			break;
		int bad = refused_prog(m, logs);
		if (bad < 0 || round >= NSPECS) {
			rc = fail(err, errlen, rc, "cannot load the BPF programs: %s%s", strerror(-rc),
				  verbose ? "" : " (-v shows the verifier's log)");
			break;
		}
		m->refused[bad] = rc;
		refusal_reason(m->reasons[bad], sizeof(m->reasons[bad]), logs[bad], rc);
		cbcmn_bpf__destroy(m->skel);
		m->skel = NULL;
	}
	free(logs);
	if (rc)
		goto cleanup;
	if ((flags & BPFMON_PIN) && (rc = pin_maps(m, err, errlen)))
		goto cleanup;

	/* Executors that started before us, then attach, then those that
	 * started in between (exec_start covers the ones after). */
	scan_executors(m, false);
	attach_all(m);
	scan_executors(m, true);
	for (size_t i = 0; i < NSPECS; i++)
		m->switch_on |= m->progs[i].state == BPFMON_ATTACHED &&
				!strncmp(specs[i].name, "cbcmn_sched_switch", 18);
	btf__free(vmlinux);
	*out = m;
	return 0;

cleanup:
	btf__free(vmlinux);
	bpfmon_close(m);
	return rc;
}

unsigned bpfmon_progs(const struct bpfmon *m, const struct bpfmon_prog **progs)
{
	*progs = m->progs;
	return NSPECS;
}

/* Shard i's counters into o->c, and what its thread was on and off a CPU
 * since its last switch seen (o->oncpu_now_ns, o->offcpu_now_ns), as of
 * o->read_ns.  sched_switch keeps in the threads map the thread's last
 * switch and its se.sum_exec_runtime then (no entry: it left its loop),
 * and adds the period before it to the sums inside two bumps of the
 * record's seq.  The counters and the thread's sum now (/proc) are read
 * between two reads of the record, again if a switch moved it meanwhile:
 * a period is never counted twice, nor left out of both.  Three lookups
 * and a /proc read more per shard. */
static int read_shard(struct bpfmon *m, int fs, __u32 i, struct bpfmon_shard *o)
{
	if (bpf_map_lookup_elem(fs, &i, &o->c))
		return -errno;
	if (!o->c.tid && i < CBCMN_BPF_MAX_SHARDS && m->ident[i].tid) {
		o->c.tid = m->ident[i].tid;
		o->c.cpu = m->ident[i].cpu;
	}
	o->oncpu_now_ns = o->offcpu_now_ns = 0;
	o->partial = false;
	o->read_ns = mono_ns();
	if (!m->switch_on || !o->c.tid || i >= CBCMN_BPF_MAX_SHARDS)
		return 0; /* without sched_switch the sums stay at 0 */
	int ft = bpf_map__fd(m->skel->maps.threads);
	__u32 tid = o->c.tid, keep_tid = o->c.tid;
	__s32 keep_cpu = o->c.cpu;
	for (int tries = 0; tries < 8; tries++) {
		struct cbcmn_bpf_thread a, b;
		if (bpf_map_lookup_elem(ft, &tid, &a))
			return errno == ENOENT ? 0 : -errno;
		if (bpf_map_lookup_elem(fs, &i, &o->c))
			return -errno;
		if (!o->c.tid) {
			o->c.tid = keep_tid;
			o->c.cpu = keep_cpu;
		}
		uint64_t sum = sched_sum(m->pid, tid), now = mono_ns();
		if (bpf_map_lookup_elem(ft, &tid, &b))
			return errno == ENOENT ? 0 : -errno;
		if (b.shard != i)
			return 0; /* its thread id went to another shard's thread */
		/* All three: the kernel copies a value with no lock, and a copy
		 * may straddle a whole switch. */
		if ((a.seq & 1) || a.seq != b.seq || a.last_ts != b.last_ts || a.last_sum != b.last_sum)
			continue;
		o->read_ns = now;
		o->partial = sum == UINT64_MAX || b.last_sum > sum || !b.last_ts || b.last_ts > now;
		if (o->partial)
			return 0; /* exiting, or no base to count from */
		o->oncpu_now_ns = sum - b.last_sum;
		uint64_t span = now - b.last_ts;
		o->offcpu_now_ns = span > o->oncpu_now_ns ? span - o->oncpu_now_ns : 0;
		return 0;
	}
	o->partial = true; /* switching all the time: what is since the last is little */
	return 0;
}

int bpfmon_read(struct bpfmon *m, struct bpfmon_shard *out, uint32_t n)
{
	if (!m || !out || n > CBCMN_BPF_NSLOTS)
		return -EINVAL;
	int fs = bpf_map__fd(m->skel->maps.shards);
	int fo = bpf_map__fd(m->skel->maps.sqe_ops);
	int fl = bpf_map__fd(m->skel->maps.lock_hist);
	int fh = bpf_map__fd(m->skel->maps.hists);
	int seen = 0;
	for (__u32 i = 0; i < n; i++) {
		struct bpfmon_shard *o = &out[i];
		memset(o, 0, sizeof(*o));
		int rc = read_shard(m, fs, i, o);
		if (rc)
			return rc;
		for (__u32 k = 0; k < CBCMN_BPF_MAX_OPS; k++) {
			__u32 key = i * CBCMN_BPF_MAX_OPS + k;
			if (bpf_map_lookup_elem(fo, &key, &o->sqe_ops[k]))
				return -errno;
		}
		for (__u32 k = 0; k < CBCMN_BPF_HIST_SLOTS; k++) {
			__u32 key = i * CBCMN_BPF_HIST_SLOTS + k;
			if (bpf_map_lookup_elem(fl, &key, &o->lock_hist[k]))
				return -errno;
		}
		for (__u32 h = 0; h < CBCMN_BPF_NHISTS; h++)
			for (__u32 k = 0; k < CBCMN_BPF_HIST_SLOTS; k++) {
				__u32 key = (h * CBCMN_BPF_NSLOTS + i) * CBCMN_BPF_HIST_SLOTS + k;
				if (bpf_map_lookup_elem(fh, &key, &o->hist[h][k]))
					return -errno;
			}
		/* Any counter non-zero, or a thread seen: the shard exists. */
		const __u64 *w = (const __u64 *)&o->c;
		bool any = o->c.tid != 0;
		for (size_t k = 0; k < offsetof(struct cbcmn_bpf_shard, tid) / 8; k++)
			any |= w[k] != 0;
		if (any && i < CBCMN_BPF_OUTSIDE)
			seen = (int)i + 1;
	}
	return seen;
}

uint64_t bpfmon_hist_count(const uint64_t *hist)
{
	uint64_t n = 0;
	for (int k = 0; k < CBCMN_BPF_HIST_SLOTS; k++)
		n += hist[k];
	return n;
}

uint64_t bpfmon_hist_pct(const uint64_t *hist, double pct)
{
	uint64_t n = bpfmon_hist_count(hist), seen = 0;
	if (!n)
		return 0;
	/* The rank of the sample wanted, 1-based: ceil(n * pct / 100). */
	double r = n * pct / 100.0;
	uint64_t rank = (uint64_t)r + (r > (uint64_t)r);
	if (rank < 1)
		rank = 1;
	for (int k = 0; k < CBCMN_BPF_HIST_SLOTS; k++) {
		seen += hist[k];
		if (seen >= rank)
			return k ? (2ull << k) - 1 : 1;
	}
	return (2ull << (CBCMN_BPF_HIST_SLOTS - 1)) - 1;
}

int bpfmon_steal_pair(struct bpfmon *m, uint32_t thief, uint32_t victim, struct cbcmn_bpf_pair *out)
{
	if (!m || !out)
		return -EINVAL;
	struct cbcmn_bpf_pair_key k = {.thief = thief, .victim = victim};
	memset(out, 0, sizeof(*out));
	if (bpf_map_lookup_elem(bpf_map__fd(m->skel->maps.steal_pairs), &k, out) && errno != ENOENT)
		return -errno;
	return 0;
}

int bpfmon_cost(const struct bpfmon *m, struct bpfmon_cost *out)
{
	if (!m || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	struct bpf_program *prog;
	bpf_object__for_each_program(prog, m->skel->obj) {
		int fd = bpf_program__fd(prog);
		if (fd < 0)
			continue; /* not loaded: turned off, or refused */
		struct bpf_prog_info info;
		__u32 len = sizeof(info);
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(fd, &info, &len))
			return -errno;
		out->progs++;
		out->runs += info.run_cnt;
		out->run_ns += info.run_time_ns;
	}
	return 0;
}

const char *bpfmon_pin_dir(const struct bpfmon *m)
{
	return m->pin_dir;
}

void bpfmon_close(struct bpfmon *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < NSPECS; i++)
		for (int b = 0; b < MAX_BINS; b++)
			bpf_link__destroy(m->links[i][b]);
	if (m->skel)
		unpin_maps(m);
	cbcmn_bpf__destroy(m->skel);
	free(m);
}
