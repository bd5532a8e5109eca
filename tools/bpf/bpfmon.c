/* bpfmon.c: open, configure, load and attach bpf/cbcmn.bpf.c one program at
 * a time, and read its maps (bpfmon.h). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <gelf.h>
#include <libelf.h>

#include "bpf/bpfmon.h"
#include "bpf/pidns.h"
#include "cbcmn.h"
#include "util/clock.h"
#include "cbcmn.skel.h"
#include "cbcmn_pidns.skel.h"
#include "cbcmn.h"

/* The reader's copies must keep the kernel's line padding. */
_Static_assert(sizeof(struct cbcmn_bpf_shard) % CBCMN_BPF_LINE == 0, "shard value not padded");
_Static_assert(sizeof(struct cbcmn_bpf_sched) % CBCMN_BPF_LINE == 0, "sched value not padded");
_Static_assert(CBCMN_BPF_MAX_SHARDS >= CBCMN_MAX_EXECUTORS, "shards beyond the maps");

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
	{"cbcmn_actor_migrate", USDT, "cbcmn", "actor_migrate", 0},
	{"cbcmn_sup_restart", USDT, "cbcmn", "sup_restart", 0},
	{"cbcmn_actor_backpressure", USDT, "cbcmn", "actor_backpressure", 0},
	{"cbcmn_sched_switch", TP_BTF, "sched", "sched_switch", BPFMON_NO_SCHED},
	{"cbcmn_sched_switch_raw", RAW_TP, "sched", "sched_switch", BPFMON_NO_SCHED},
	{"cbcmn_sched_exit", TP_BTF, "sched", "sched_process_exit", BPFMON_NO_SCHED},
	{"cbcmn_sched_exit_raw", RAW_TP, "sched", "sched_process_exit", BPFMON_NO_SCHED},
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

/* The maps read through a read-only mapping (BPF_F_MMAPABLE): a copy
 * instead of a system call per value. */
enum { MM_SHARDS, MM_SQE_OPS, MM_LOCK_HIST, MM_HISTS, NMM };

struct bpfmon {
	struct cbcmn_bpf *skel;
	pid_t pid;
	uint32_t runtime;         /* the runtime watched (its id), 0 every one */
	int pidfd;                /* the target; -1 if pidfd_open failed */
	int stop_fd;              /* eventfd: bpfmon_close stops the watcher */
	pthread_t watcher;
	bool watching;
	/* links: the watcher thread detaches them when the target exits */
	pthread_mutex_t link_lock;
	_Atomic bool detached;
	const void *mm[NMM];
	size_t mm_len[NMM];
	struct bpfmon_prog progs[NSPECS];
	char targets[NSPECS][80];
	char reasons[NSPECS][160];
	int refused[NSPECS];      /* the load error of a program the kernel refused, 0 none */
	struct bpf_link *links[NSPECS][MAX_BINS];
	struct ident ident[CBCMN_BPF_MAX_SHARDS];
	bool pinned_dir;          /* pin_dir is ours to remove */
	bool switch_on;           /* a sched_switch program is attached: the records move */
	bool no_sched_info;       /* task_struct has no sched_info: no run-queue figures */
	bool by_fd;               /* bpf cookies: binaries attached through /proc/self/fd */
	/* The tool in a pid namespace of its own (not the kernel's view):
	 * the programs know the target by the kernel's ids, the tool by its
	 * namespace's; xl maps one to the other (xlat_load). */
	bool ns_mode;
	bool xl_fresh;            /* xl was loaded during this call: no second try */
	__u32 ktgid;              /* the target's kernel tgid */
	struct xlat {
		__u32 ktid, vtid;
	} *xl;
	size_t nxl;
	/* cbcmn:steal_fail off (BPFMON_STEAL_FAIL not given): failed probes
	 * from the runtime's own counters (fails_read) */
	bool fails_from_runtime;
	cbcmn_watch *w;           /* the runtime read, NULL none yet */
	cbcmn_executor_stats *per; /* CBCMN_BPF_MAX_SHARDS, for fails_read */
	uint64_t fails_base[CBCMN_BPF_MAX_SHARDS]; /* its count when we began to follow it */
	uint64_t fails_done[CBCMN_BPF_MAX_SHARDS]; /* of the runtimes that ended since attach */
	uint64_t fails_last[CBCMN_BPF_MAX_SHARDS]; /* the last count read since the base */
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

/* This process's effective capabilities, from capget(2) (the kernel's
 * answer, not a uid: root without capabilities has none, a non-root user
 * may hold CAP_BPF).  0 when they cannot be read. */
static uint64_t effective_caps(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d))
		return 0;
	return (uint64_t)d[1].effective << 32 | d[0].effective;
}

/* What the BPF view needs and this process or kernel lacks, as one line
 * in err: CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON (5.8+) to load
 * tracing programs and attach them to tracepoints; a kernel locked down
 * for confidentiality refuses the reads of kernel memory the programs
 * make.  The USDT probes need CAP_SYS_ADMIN on most kernels
 * (bpfmon_uprobe_caps_why):
 * without it the view is the tracepoints' alone, said per program.
 * Returns 0 or -EPERM. */
static int check_privileges(char *err, size_t errlen)
{
	uint64_t caps = effective_caps();
	bool admin = caps >> CAP_SYS_ADMIN & 1, bpf = caps >> CAP_BPF & 1,
	     perfmon = caps >> CAP_PERFMON & 1;
	if (!admin && !(bpf && perfmon))
		return fail(err, errlen, -EPERM,
			    "loading eBPF programs needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): "
			    "this process (uid %d) lacks %s%s%s", (int)geteuid(),
			    bpf ? "" : "CAP_BPF", !bpf && !perfmon ? " and " : "",
			    perfmon ? "" : "CAP_PERFMON");
	char buf[128] = "";
	int fd = open("/sys/kernel/security/lockdown", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = 0;
		close(fd);
	}
	if (strstr(buf, "[confidentiality]"))
		return fail(err, errlen, -EPERM,
			    "the kernel is locked down (confidentiality): eBPF may not read kernel memory");
	return 0;
}

/* Does this kernel's uprobe PMU ask for CAP_SYS_ADMIN?  The fix for
 * CVE-2025-38466 (Linux 6.16; 6.15.7, 6.12.39, 6.6.99, 6.1.146, 5.15.189,
 * 5.10.240) made it so again, where CAP_PERFMON had sufficed since 5.8
 * (before 5.8 there was no CAP_PERFMON: CAP_SYS_ADMIN).  The upstream
 * version is release's, or the one a distribution names in version
 * ("... Debian 6.1.158-1 (...)"): Debian's release says 6.1.0 whatever
 * its update.  1 yes, 0 no, -1 not known (a distribution's X.Y.0 that
 * may carry the fix backported). */
static int uprobe_needs_sys_admin(const char *release, const char *version)
{
	static const int fixed[][3] = {{6, 15, 7}, {6, 12, 39}, {6, 6, 99}, {6, 1, 146},
				       {5, 15, 189}, {5, 10, 240}};
	int a = 0, b = 0, c = 0;
	const char *deb = version ? strstr(version, "Debian ") : NULL;
	bool named = deb && sscanf(deb + 7, "%d.%d.%d", &a, &b, &c) == 3;
	if (!named && sscanf(release ? release : "", "%d.%d.%d", &a, &b, &c) < 2)
		return -1;
	if (a > 6 || (a == 6 && b >= 16))
		return 1;
	if (a < 5 || (a == 5 && b < 8))
		return 1;
	/* X.Y.0-N-flavour (Debian's release, Ubuntu's, RHEL's 5.14.0-N): a
	 * distribution's numbering, which says nothing of its backports. */
	if (!named && c == 0 && strchr(release, '-'))
		return -1;
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (a == fixed[i][0] && b == fixed[i][1])
			return c >= fixed[i][2];
	return 0; /* a branch that ended before the fix */
}

const char *bpfmon_uprobe_denied_why(int err, bool sys_admin, const char *release,
				     const char *version)
{
	if ((err != -EACCES && err != -EPERM) || sys_admin)
		return "";
	switch (uprobe_needs_sys_admin(release, version)) {
	case 1:
		return " (uprobes need CAP_SYS_ADMIN on this kernel: this process lacks it)";
	case -1:
		return " (perhaps for want of CAP_SYS_ADMIN, which this process lacks: uprobes need it "
		       "on kernels with the fix for CVE-2025-38466)";
	default:
		return ""; /* CAP_PERFMON suffices here: something else refused */
	}
}

/* Why a uprobe (every USDT probe is one) could not be made, for this
 * process on this kernel: "" when CAP_SYS_ADMIN is not the cause. */
const char *bpfmon_uprobe_caps_why(int err)
{
	struct utsname u;
	if (uname(&u))
		return "";
	return bpfmon_uprobe_denied_why(err, effective_caps() >> CAP_SYS_ADMIN & 1, u.release, u.version);
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

/* Has struct sname a member mname in this kernel? */
static bool btf_has_member(const struct btf *vmlinux, const char *sname, const char *mname)
{
	int id = vmlinux ? btf__find_by_name_kind(vmlinux, sname, BTF_KIND_STRUCT) : -1;
	const struct btf_type *t = id > 0 ? btf__type_by_id(vmlinux, id) : NULL;
	for (unsigned i = 0; t && i < btf_vlen(t); i++)
		if (!strcmp(btf__name_by_offset(vmlinux, btf_members(t)[i].name_off), mname))
			return true;
	return false;
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
 * library linked statically), every libcbcmn.so it maps, and any other
 * file it maps executable that carries cbcmn probes (a plugin with the
 * library linked in; the program, run as "ld.so PROGRAM").  Each as a path
 * that reaches the target's file from here, whatever mount namespace it
 * runs in: the path it has there (what /proc/PID/exe and /proc/PID/maps
 * say) under /proc/PID/root, the target's root as this process sees it.
 * A container's binary, or one on a tmpfs mounted only in the target's
 * namespace, has no such path in ours.  libbpf reads the ELF notes through
 * that path, the kernel places the uprobes on the inode it resolves to,
 * and libbpf knows the prefix when it matches the path with the maps
 * (usdt.c, parse_vma_segs).  An executable whose path does not lead back
 * to it (deleted, replaced, or the target chrooted) is reached through
 * /proc/PID/exe itself; a library through its path as is when that is
 * the file mapped (a chrooted target's, which maps names from our root),
 * else, deleted or replaced on disk since, through /proc/PID/map_files.
 * Each file once (by device and inode).  Returns
 * how many were written to bins.
 *
 * With fds (not NULL), each binary is opened here and checked to be the
 * file found (by device and inode), and its path is /proc/self/fd/N,
 * which names that file and no other until the caller closes fds[i]:
 * a path under /proc/PID/root could be renamed over between our check
 * and the opens that libbpf and the kernel make later.  libbpf matches
 * such a path with the target's maps only without bpf cookies (usdt.c),
 * so fds only where the kernel has them. */
static bool has_cbcmn_probes(const char *path);

/* Pin bins[i] (fds: see probe_binaries()): false if the file is no longer
 * the one checked (st). */
static bool pin_binary(char bin[PATH_MAX], const struct stat *st, int *fd)
{
	struct stat now;
	int f = open(bin, O_RDONLY | O_CLOEXEC);
	if (f < 0 || fstat(f, &now) || now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
		if (f >= 0)
			close(f);
		return false;
	}
	*fd = f;
	snprintf(bin, PATH_MAX, "/proc/self/fd/%d", f);
	return true;
}

static void close_binaries(int *fds, int n)
{
	for (int i = 0; fds && i < n; i++)
		close(fds[i]);
}

static int probe_binaries(pid_t pid, char bins[MAX_BINS][PATH_MAX], int *fds)
{
	/* path: room for "/proc/PID/root" in front within PATH_MAX */
	char p[64], line[PATH_MAX + 256], path[PATH_MAX - 24];
	struct stat st, seen[MAX_BINS];
	int n = 0;
	snprintf(p, sizeof(p), "/proc/%d/exe", pid);
	ssize_t len = readlink(p, path, sizeof(path) - 1);
	if (len > 0 && !stat(p, &seen[0])) {
		path[len] = 0;
		snprintf(bins[0], PATH_MAX, "/proc/%d/root%s", pid, path);
		if (path[0] != '/' || stat(bins[0], &st) || st.st_dev != seen[0].st_dev ||
		    st.st_ino != seen[0].st_ino)
			snprintf(bins[0], PATH_MAX, "%s", p);
		n = !fds || pin_binary(bins[0], &seen[0], &fds[0]);
	}
	snprintf(p, sizeof(p), "/proc/%d/maps", pid);
	FILE *f = fopen(p, "r");
	if (!f)
		return n;
	while (n < MAX_BINS && fgets(line, sizeof(line), f)) {
		char *at = strchr(line, '/'), perms[8] = "";
		/* A libcbcmn, or any other file mapped executable: the
		 * library linked into a plugin, or the program itself when
		 * the dynamic loader is the executable (ld.so PROGRAM).  The
		 * latter only with cbcmn probes in it (below). */
		bool named = at && strstr(at, "libcbcmn");
		if (!at || sscanf(line, "%*s %7s", perms) != 1 || (!named && perms[2] != 'x'))
			continue;
		at[strcspn(at, "\n")] = 0;
		/* The mapping's inode (5th field): the file found must be it.
		 * maps gives a path as our root sees it when we can reach the
		 * file (a chrooted target: not its own path), else from its
		 * namespace's root: under /proc/PID/root first, then as is. */
		unsigned long long ino = 0;
		if (sscanf(line, "%*s %*s %*s %*s %llu", &ino) != 1)
			continue;
		char full[PATH_MAX];
		snprintf(full, sizeof(full), "/proc/%d/root%.*s", pid, (int)sizeof(path) - 1, at);
		if (stat(full, &st) || st.st_ino != ino) {
			snprintf(full, sizeof(full), "%.*s", (int)sizeof(path) - 1, at);
			/* Neither leads to it: the file was deleted or replaced
			 * since it was mapped (maps says "(deleted)"; a rebuild
			 * or an upgrade renames a new file over it).  The kernel
			 * still reaches the mapped inode through map_files (the
			 * first field is its name there); libbpf needs no more
			 * than a path where the bpf cookie is supported. */
			if (stat(full, &st) || st.st_ino != ino) {
				snprintf(full, sizeof(full), "/proc/%d/map_files/%.*s", pid,
					 (int)strcspn(line, " "), line);
				if (stat(full, &st) || st.st_ino != ino)
					continue; /* gone since */
			}
		}
		bool dup = false;
		for (int i = 0; i < n; i++)
			dup |= st.st_dev == seen[i].st_dev && st.st_ino == seen[i].st_ino;
		if (!dup && (named || has_cbcmn_probes(full))) {
			seen[n] = st;
			memcpy(bins[n], full, sizeof(full));
			n += !fds || pin_binary(bins[n], &st, &fds[n]);
		}
	}
	fclose(f);
	return n;
}

/* Does the ELF file at path carry a USDT note of provider "cbcmn"?  A note
 * in .note.stapsdt is three addresses (the probe, the base, the
 * semaphore) and then "provider\0name\0args". */
static bool has_cbcmn_probes(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	bool found = false;
	elf_version(EV_CURRENT);
	Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	size_t shstrndx;
	if (e && !elf_getshdrstrndx(e, &shstrndx)) {
		Elf_Scn *scn = NULL;
		while (!found && (scn = elf_nextscn(e, scn))) {
			GElf_Shdr sh;
			const char *name;
			if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE ||
			    !(name = elf_strptr(e, shstrndx, sh.sh_name)) || strcmp(name, ".note.stapsdt"))
				continue;
			Elf_Data *d = elf_getdata(scn, NULL);
			size_t off = 0, name_off, desc_off, addrs = 3 * (gelf_getclass(e) == ELFCLASS32 ? 4 : 8);
			GElf_Nhdr nh;
			while (d && !found && (off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0)
				found = nh.n_type == 3 && nh.n_descsz > addrs + 6 &&
					!memcmp((const char *)d->d_buf + desc_off + addrs, "cbcmn", 6);
		}
	}
	elf_end(e);
	close(fd);
	return found;
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

/* Does this process see the kernel's ids in /proc: its pid namespace is
 * the initial one (whose inode is fixed, PROC_PID_INIT_INO) and /proc is
 * that namespace's?  Then a pid from the user is task_struct::tgid. */
#define PROC_PID_INIT_INO 0xEFFFFFFCu
static bool kernel_view(void)
{
	struct stat st;
	char self[32] = "";
	if (stat("/proc/self/ns/pid", &st) || st.st_ino != PROC_PID_INIT_INO)
		return false;
	ssize_t n = readlink("/proc/self", self, sizeof(self) - 1);
	return n > 0 && atoi(self) == getpid();
}

/* Run bpf/cbcmn_pidns.bpf.c's task iterator: the kernel's ids of the
 * target's threads, with their numbers in this process's pid namespace,
 * into m->xl; m->ktgid.  Returns 0, -ESRCH (no task of that number here),
 * or another negative errno. */
static int xlat_load(struct bpfmon *m)
{
	struct stat st;
	if (stat("/proc/self/ns/pid", &st))
		return -errno;
	struct cbcmn_pidns_bpf *sk = cbcmn_pidns_bpf__open();
	if (!sk)
		return -errno;
	int rc = 0, fd = -1;
	struct bpf_link *l = NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	sk->rodata->ns_ino = st.st_ino;
	if ((rc = cbcmn_pidns_bpf__load(sk)))
		goto out;
	if (!(l = bpf_program__attach_iter(sk->progs.cbcmn_pidns_task, NULL)) ||
	    (fd = bpf_iter_create(bpf_link__fd(l))) < 0) {
		rc = -errno;
		goto out;
	}
	for (ssize_t n = 1; n > 0; len += (size_t)n) {
		if (cap - len < 4096) {
			char *nb = realloc(buf, cap = cap ? 2 * cap : 1 << 16);
			if (!nb) {
				rc = -ENOMEM;
				goto out;
			}
			buf = nb;
		}
		if ((n = read(fd, buf + len, cap - len - 1)) < 0) {
			rc = -errno;
			goto out;
		}
	}
	buf[len] = 0;
	/* The target's leader is the task whose number here is the pid we
	 * were given and whose kernel tid is its tgid. */
	unsigned tg, t, v;
	m->ktgid = 0;
	for (char *at = buf; sscanf(at, "%u %u %u", &tg, &t, &v) == 3; at = strchr(at, '\n') + 1)
		if (v == (unsigned)m->pid && t == tg)
			m->ktgid = tg;
	size_t k = 0;
	for (char *at = buf; sscanf(at, "%u %u %u", &tg, &t, &v) == 3; at = strchr(at, '\n') + 1)
		k += tg == m->ktgid;
	struct xlat *xl = calloc(k ? k : 1, sizeof(*xl));
	if (!xl) {
		rc = -ENOMEM;
		goto out;
	}
	k = 0;
	for (char *at = buf; sscanf(at, "%u %u %u", &tg, &t, &v) == 3; at = strchr(at, '\n') + 1)
		if (tg == m->ktgid)
			xl[k++] = (struct xlat){t, v};
	free(m->xl);
	m->xl = xl;
	m->nxl = k;
	m->xl_fresh = true;
	rc = m->ktgid ? 0 : -ESRCH;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	bpf_link__destroy(l);
	cbcmn_pidns_bpf__destroy(sk);
	return rc;
}

/* Thread id tid from the kernel's view to ours (to_view) or back; the
 * same number outside ns_mode; 0 when the thread is not known (gone). */
static __u32 xlat(struct bpfmon *m, __u32 tid, bool to_view)
{
	if (!m->ns_mode || !tid)
		return tid;
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < m->nxl; i++)
			if ((to_view ? m->xl[i].ktid : m->xl[i].vtid) == tid)
				return to_view ? m->xl[i].vtid : m->xl[i].ktid;
		/* A thread born since: look again, once per read. */
		if (m->xl_fresh || xlat_load(m) == -ENOMEM)
			break;
	}
	return 0;
}

/* Executor id's thread is tid (pinned to cpu, -1 none): into the threads
 * map unless exec_start beat us, and into the shards map before attach. */
static void note_executor(struct bpfmon *m, __u32 id, __u32 vtid, __s32 cpu, bool attached)
{
	int fd = bpf_map__fd(m->skel->maps.threads);
	int fs = bpf_map__fd(m->skel->maps.shards);
	/* vtid as /proc here numbers it; the programs know the kernel's. */
	__u32 tid = xlat(m, vtid, false);
	if (!tid)
		return; /* born and gone while we looked */
	/* Counting starts here: the time on a CPU from the kernel's own
	 * sum, so the switches before attach need not be seen. */
	struct cbcmn_bpf_thread th = {.shard = id, .last_sum = sched_sum(m->pid, vtid)};
	th.last_ts = mono_ns();
	bpf_map_update_elem(fd, &tid, &th, BPF_NOEXIST);
	m->ident[id].tid = tid;
	m->ident[id].cpu = cpu;
	struct cbcmn_bpf_shard sh;
	if (!attached && !bpf_map_lookup_elem(fs, &id, &sh) && !sh.tid) {
		sh.tid = tid;
		sh.cpu = cpu;
		bpf_map_update_elem(fs, &id, &sh, BPF_EXIST);
	}
}

/* The runtime watched: the oldest alive, or the one of id m->runtime
 * (bpfmon_open_runtime()).  0 or -ENOENT. */
static int watch_runtime(struct bpfmon *m, cbcmn_watch **w)
{
	for (uint32_t idx = 0;; idx++) {
		cbcmn_stats st;
		if (cbcmn_watch_open(m->pid, idx, w))
			return -ENOENT;
		if (!m->runtime || (!cbcmn_watch_read(*w, &st, NULL, 0) && st.runtime_id == m->runtime))
			return 0;
		cbcmn_watch_close(*w);
		*w = NULL;
	}
}

/* One runtime's executors, from its statistics segment (the thread names
 * do not say which runtime a thread is of).  Returns false if the process
 * has no runtime with that id. */
static bool scan_runtime(struct bpfmon *m, bool attached)
{
	cbcmn_watch *w;
	cbcmn_stats st;
	if (watch_runtime(m, &w))
		return false;
	cbcmn_executor_stats *per = NULL;
	if (!cbcmn_watch_read(w, &st, NULL, 0) &&
	    (per = calloc(st.executors ? st.executors : 1, sizeof(*per))) &&
	    !cbcmn_watch_read(w, &st, per, st.executors))
		for (uint32_t i = 0; i < st.executors && i < CBCMN_BPF_MAX_SHARDS; i++)
			if (per[i].tid > 0) /* the runtime's own gettid(): ours here */
				note_executor(m, i, (__u32)pidns_view_tid(m->pid, per[i].tid),
					      per[i].cpu, attached);
	free(per);
	cbcmn_watch_close(w);
	return true;
}

/* Executors already running: threads named "cbcmn-exec-N" (or, for one
 * runtime, those its segment names).  Only adds threads the map does not
 * know (exec_start may have beaten us).  Their identity goes into
 * m->ident (bpfmon_read fills it in for a shard whose value has none from
 * exec_start) and, before the programs are attached (attached: false),
 * into the shards map too, for readers of a pinned map: once attached,
 * rewriting a shard's value could lose a concurrent add. */
static void scan_executors(struct bpfmon *m, bool attached)
{
	char p[PATH_MAX];
	if (m->runtime) {
		scan_runtime(m, attached);
		return;
	}
	snprintf(p, sizeof(p), "/proc/%d/task", m->pid);
	DIR *d = opendir(p);
	struct dirent *de;
	if (!d)
		return;
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
		note_executor(m, id, (__u32)atoi(de->d_name), pinned_cpu((pid_t)atoi(de->d_name)), attached);
	}
	closedir(d);
}

/* Start time of process pid (/proc/PID/stat field 22, clock ticks since
 * boot): with the pid, who a process is.  0 if it is gone. */
static uint64_t proc_start(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* After the command name's closing parenthesis (which may hold
	 * spaces and parentheses itself), field 3 on. */
	const char *at = strrchr(buf, ')');
	unsigned long long v = 0;
	for (int field = 3; at && field <= 22; field++) {
		at = strchr(at + 1, ' ');
		if (at && field == 22 && sscanf(at + 1, "%llu", &v) != 1)
			v = 0;
	}
	return v;
}

/* Remove the pins of directory dir and the directory. */
static void remove_pins(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[PATH_MAX + 300];
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		unlink(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* Who pinned dir: 1 a loader that is running (o says which), 0 one that is
 * gone, -1 unknown: no pin_owner (a bpfmon before it, whose loader may
 * well be running, or a directory being made this instant). */
static int pin_owner_alive(const char *dir, struct cbcmn_bpf_owner *o)
{
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/pin_owner", dir);
	int fd = bpf_obj_get(p);
	__u32 k = 0;
	memset(o, 0, sizeof(*o));
	if (fd < 0)
		return -1;
	int rc = bpf_map_lookup_elem(fd, &k, o);
	close(fd);
	if (rc || !o->tool_pid || !o->tool_start)
		return -1;
	return proc_start((pid_t)o->tool_pid) == o->tool_start;
}

/* Pins left under BPFFS/cbcmn by loaders that are gone (killed: SIGKILL
 * runs no cleanup) go; ours (the target's directory) may not be taken from
 * a live loader: -EBUSY. */
static int sweep_pins(struct bpfmon *m, char *err, size_t errlen)
{
	DIR *d = opendir(BPFFS "/cbcmn");
	struct dirent *de;
	char dir[PATH_MAX];
	int rc = 0;
	while (d && (de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		snprintf(dir, sizeof(dir), BPFFS "/cbcmn/%s", de->d_name);
		struct cbcmn_bpf_owner o;
		pid_t target = (pid_t)atoi(de->d_name);
		int alive = pin_owner_alive(dir, &o);
		/* Without an owner, only a dead target's pins are surely stale. */
		if (!alive || (alive < 0 && kill(target, 0) && errno == ESRCH))
			remove_pins(dir);
		else if (target == m->pid && alive > 0)
			rc = fail(err, errlen, -EBUSY,
				  "the maps of process %d are pinned at %s by process %u, which is running",
				  (int)m->pid, dir, o.tool_pid);
		else if (target == m->pid)
			rc = fail(err, errlen, -EBUSY,
				  "the maps of process %d are pinned at %s by a loader that did not say who it is: "
				  "remove the directory if none is running",
				  (int)m->pid, dir);
	}
	if (d)
		closedir(d);
	return rc;
}

/* The pins under BPFFS/cbcmn change only under an exclusive flock(2) of
 * that directory, held by one loader at a time from its sweep to its
 * last pin (and while it removes them): two loaders started at once on
 * one process are one that pins and one told -EBUSY who holds them, and
 * a sweep never removes pins another loader is making or the directory
 * it has just made again.  The kernel drops the lock of a loader that is
 * killed; one that is stopped (^Z) while it holds it would block every
 * other, so a loader waits PINS_LOCK_WAIT_MS at most, then -EBUSY.
 * Returns the locked descriptor, or a negative errno. */
#define PINS_LOCK_WAIT_MS 5000
static int pins_lock(void)
{
	mkdir(BPFFS "/cbcmn", 0755);
	int fd = open(BPFFS "/cbcmn", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (int waited = 0; flock(fd, LOCK_EX | LOCK_NB); waited += 10) {
		if ((errno != EWOULDBLOCK && errno != EINTR) || waited >= PINS_LOCK_WAIT_MS) {
			int rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
			close(fd);
			return rc;
		}
		nanosleep(&(struct timespec){0, 10 * 1000000}, NULL);
	}
	return fd;
}

static void pins_unlock(int fd)
{
	if (fd >= 0)
		close(fd); /* the last descriptor of the open file: the lock goes */
}

/* CBCMN_BPF_PIN_PAUSE_MS=N, a test aid (docs/OBSERVABILITY.md): pause N
 * ms between the sweep and the making of the directory, where two
 * loaders without the lock raced.  Unset: none. */
static void pin_pause(void)
{
	const char *env = getenv("CBCMN_BPF_PIN_PAUSE_MS");
	long ms = env ? atol(env) : 0;
	if (ms > 0 && ms < 10000)
		nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000}, NULL);
}

static int pin_maps_locked(struct bpfmon *m, char *err, size_t errlen)
{
	int rc = sweep_pins(m, err, errlen);
	if (rc)
		return rc;
	pin_pause();
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), BPFFS "/cbcmn/%d", m->pid);
	/* Made since the sweep under our lock: by a loader that does not
	 * take it (a cbcmn tool from before it). */
	if (mkdir(dir, 0755)) {
		int e = errno;
		if (e == EEXIST)
			return fail(err, errlen, -EBUSY,
				    "the maps of process %d are being pinned at %s by another loader",
				    (int)m->pid, dir);
		return fail(err, errlen, -e, "mkdir %s: %s", dir, strerror(e));
	}
	snprintf(m->pin_dir, sizeof(m->pin_dir), "%s", dir);
	m->pinned_dir = true;
	/* Who we are, first: a directory without it is swept as stale. */
	struct cbcmn_bpf_owner o = {.tool_pid = (__u32)getpid(), .target_pid = (__u32)m->pid,
				    .tool_start = proc_start(getpid())};
	__u32 k = 0;
	if (bpf_map_update_elem(bpf_map__fd(m->skel->maps.pin_owner), &k, &o, BPF_ANY))
		return fail(err, errlen, -errno, "pin_owner: %s", strerror(errno));
	char p[PATH_MAX + 64];
	snprintf(p, sizeof(p), "%s/pin_owner", m->pin_dir);
	if ((rc = bpf_map__pin(m->skel->maps.pin_owner, p)))
		return fail(err, errlen, rc, "pin %s: %s", p, strerror(-rc));
	struct bpf_map *map;
	bpf_object__for_each_map(map, m->skel->obj) {
		if (!strchr(bpf_map__name(map), '.') && strncmp(bpf_map__name(map), "__bpf_usdt", 10) &&
		    !bpf_map__is_pinned(map)) {
			snprintf(p, sizeof(p), "%s/%s", m->pin_dir, bpf_map__name(map));
			if ((rc = bpf_map__pin(map, p)))
				return fail(err, errlen, rc, "pin %s: %s", p, strerror(-rc));
		}
	}
	return 0;
}

static int pin_maps(struct bpfmon *m, char *err, size_t errlen)
{
	int rc = mount_fs(BPFFS, "bpf", BPF_FS_MAGIC);
	if (rc)
		return fail(err, errlen, rc, "cannot mount bpffs at " BPFFS ": %s", strerror(-rc));
	int lock = pins_lock();
	if (lock == -EBUSY)
		return fail(err, errlen, lock,
			    "another loader has held the lock of " BPFFS "/cbcmn for %d s (stopped?)",
			    PINS_LOCK_WAIT_MS / 1000);
	if (lock < 0)
		return fail(err, errlen, lock, "cannot lock " BPFFS "/cbcmn: %s", strerror(-lock));
	rc = pin_maps_locked(m, err, errlen);
	pins_unlock(lock);
	return rc;
}

static void unpin_maps(struct bpfmon *m)
{
	if (!m->pinned_dir)
		return;
	int lock = pins_lock(); /* not fatal: the pins still go */
	struct bpf_map *map;
	/* pin_owner last: a directory is never seen without it while its
	 * maps are pinned. */
	bpf_object__for_each_map(map, m->skel->obj)
		if (bpf_map__is_pinned(map) && map != m->skel->maps.pin_owner)
			bpf_map__unpin(map, NULL);
	if (bpf_map__is_pinned(m->skel->maps.pin_owner))
		bpf_map__unpin(m->skel->maps.pin_owner, NULL);
	rmdir(m->pin_dir);
	pins_unlock(lock);
}

static void attach_all(struct bpfmon *m)
{
	char bins[MAX_BINS][PATH_MAX];
	int fds[MAX_BINS];
	int nbins = probe_binaries(m->pid, bins, m->by_fd ? fds : NULL);
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
				snprintf(m->reasons[i], sizeof(m->reasons[i]), "%s%s%s",
					 last == -ENOENT ? "not in the target" : "attach: ",
					 last == -ENOENT ? "" : strerror(-last), bpfmon_uprobe_caps_why(last));
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
	/* The uprobes hold their inodes now. */
	close_binaries(m->by_fd ? fds : NULL, nbins);
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
		} else if (!strcmp(s->name, "cbcmn_steal_fail") && !(flags & BPFMON_STEAL_FAIL)) {
			pr->state = BPFMON_OFF; /* opt-in: the runtime counts them (fails_read) */
			on = false;
			snprintf(m->reasons[i], sizeof(m->reasons[i]),
				 "off: failed steals from the runtime's counters (BPFMON_STEAL_FAIL attaches it)");
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

/* Failed steal probes per executor since attach, from the runtime's
 * counters (steal_attempts - steal_successes: one cbcmn:steal_fail each)
 * into out[i].c.steal_fails.  The runtime watched (watch_runtime()) is
 * followed; its count when first read is the base if it was there at attach (what it
 * did before is not ours), 0 if it came later.  When it ends, its last
 * count is kept and the next runtime is followed: the figure never steps
 * back.  Nothing when the process has no runtime (yet). */
static void fails_read(struct bpfmon *m, struct bpfmon_shard *out, uint32_t n, bool at_attach)
{
	for (int round = 0; round < 2; round++) {
		if (!m->w) {
			if (watch_runtime(m, &m->w))
				break;
			memset(m->fails_base, 0, sizeof(m->fails_base));
			memset(m->fails_last, 0, sizeof(m->fails_last));
		}
		cbcmn_stats st;
		memset(m->per, 0, CBCMN_BPF_MAX_SHARDS * sizeof(*m->per));
		int rc = cbcmn_watch_read(m->w, &st, m->per, CBCMN_BPF_MAX_SHARDS);
		for (uint32_t i = 0; i < CBCMN_BPF_MAX_SHARDS; i++) {
			uint64_t f = m->per[i].steal_attempts - m->per[i].steal_successes;
			if (at_attach)
				m->fails_base[i] = f;
			else if (f >= m->fails_base[i])
				m->fails_last[i] = f - m->fails_base[i];
		}
		if (rc == 0)
			break;
		/* It ended (out holds its last figures): keep them, follow the next. */
		for (uint32_t i = 0; i < CBCMN_BPF_MAX_SHARDS; i++) {
			m->fails_done[i] += m->fails_last[i];
			m->fails_last[i] = 0;
		}
		cbcmn_watch_close(m->w);
		m->w = NULL;
		at_attach = false;
	}
	for (uint32_t i = 0; out && i < n && i < CBCMN_BPF_MAX_SHARDS; i++)
		out[i].c.steal_fails = m->fails_done[i] + m->fails_last[i];
}

/* Detach when the target exits, not when the viewer quits: the sched and
 * io_uring programs run for every task of the host while attached.  The
 * thread sleeps in poll() on the target's pidfd and on stop_fd. */
static void *watch_target(void *arg)
{
	struct bpfmon *m = arg;
	struct pollfd p[2] = {{.fd = m->pidfd, .events = POLLIN}, {.fd = m->stop_fd, .events = POLLIN}};
	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (p[1].revents)
			return NULL;
		if (p[0].revents) {
			bpfmon_detach(m);
			return NULL;
		}
	}
}

static void watch_start(struct bpfmon *m)
{
	if (m->pidfd < 0 || (m->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0)
		return;
	/* Every signal stays with the caller's threads: a tool's SIGINT
	 * handler must interrupt its own sleep, not this thread's poll. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	m->watching = pthread_create(&m->watcher, NULL, watch_target, m) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void bpfmon_detach(struct bpfmon *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->link_lock);
	for (size_t i = 0; i < NSPECS; i++)
		for (int b = 0; b < MAX_BINS; b++) {
			bpf_link__destroy(m->links[i][b]);
			m->links[i][b] = NULL;
		}
	/* Release: pairs with bpfmon_detached()'s acquire load. */
	atomic_store_explicit(&m->detached, true, memory_order_release);
	pthread_mutex_unlock(&m->link_lock);
}

bool bpfmon_detached(const struct bpfmon *m)
{
	return atomic_load_explicit(&((struct bpfmon *)m)->detached, memory_order_acquire);
}

/* Has the target exited (its pidfd readable)?  Without a pidfd: kill(0). */
static bool target_gone(const struct bpfmon *m)
{
	if (m->pidfd >= 0) {
		struct pollfd p = {.fd = m->pidfd, .events = POLLIN};
		return poll(&p, 1, 0) > 0;
	}
	return kill(m->pid, 0) && errno == ESRCH;
}

/* The maps read by copy: mapped read only once loaded.  NULL (then each
 * value is looked up) where the kernel refuses. */
static void map_mmaps(struct bpfmon *m)
{
	struct bpf_map *maps[NMM] = {m->skel->maps.shards, m->skel->maps.sqe_ops,
				     m->skel->maps.lock_hist, m->skel->maps.hists};
	long pg = sysconf(_SC_PAGESIZE);
	for (int i = 0; i < NMM; i++) {
		size_t len = (size_t)bpf_map__max_entries(maps[i]) *
			     ((bpf_map__value_size(maps[i]) + 7) & ~7u);
		len = (len + (size_t)pg - 1) / (size_t)pg * (size_t)pg;
		void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, bpf_map__fd(maps[i]), 0);
		if (p != MAP_FAILED) {
			m->mm[i] = p;
			m->mm_len[i] = len;
		}
	}
}

/* Copy bytes (a multiple of 8) of a mapped map value, a word at a time: the
 * programs add to the words meanwhile, and each word is read whole. */
static void copy_words(void *dst, const void *src, size_t bytes)
{
	uint64_t *d = dst;
	const uint64_t *w = src;
	for (size_t i = 0; i < bytes / 8; i++)
		d[i] = __atomic_load_n(&w[i], __ATOMIC_RELAXED);
}

/* Value key of map mm (a BPF_F_MMAPABLE ARRAY of values of size bytes, a
 * multiple of 8) into out: from the mapping, else looked up. */
static int map_get(const struct bpfmon *m, int mm, int fd, __u32 key, void *out, size_t size)
{
	if (m->mm[mm]) {
		copy_words(out, (const char *)m->mm[mm] + (size_t)key * size, size);
		return 0;
	}
	return bpf_map_lookup_elem(fd, &key, out) ? -errno : 0;
}

/* Has process pid exited, or is it exiting (a zombie: its executable and
 * maps are gone already, so it looks like no cbcmn program)? */
static bool process_ended(pid_t pid)
{
	char p[64], buf[256];
	if (kill(pid, 0) && errno == ESRCH)
		return true;
	snprintf(p, sizeof(p), "/proc/%d/stat", pid);
	FILE *f = fopen(p, "re");
	if (!f)
		return errno == ENOENT;
	char *rp = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	if (!rp || rp[1] != ' ')
		return false;
	if (rp[2] == 'Z' || rp[2] == 'X')
		return true;
	/* Still running its exit (state R or D): PF_EXITING in the flags,
	 * the 7th field after the name, is set before the process lets go
	 * of its memory and executable, so "no exe" and not yet a zombie
	 * is an exiting process, not a kernel thread. */
	char state;
	int ppid, pgrp, session, tty, tpgid;
	unsigned long fl;
	return sscanf(rp + 2, "%c %d %d %d %d %d %lu", &state, &ppid, &pgrp, &session, &tty,
		      &tpgid, &fl) == 7 &&
	       (fl & 0x4ul /* PF_EXITING */);
}

int bpfmon_open(struct bpfmon **out, pid_t pid, unsigned flags, char *err, size_t errlen)
{
	return bpfmon_open_runtime(out, pid, 0, flags, err, errlen);
}

int bpfmon_open_runtime(struct bpfmon **out, pid_t pid, uint32_t runtime, unsigned flags, char *err,
			size_t errlen)
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
	/* Not a cbcmn program: say so and attach nothing (the sched and
	 * io_uring programs would watch the whole host for a process that
	 * never fires a probe).  Only when its binaries can be read: where
	 * they cannot, the privilege check below says why. */
	char bins[MAX_BINS][PATH_MAX];
	snprintf(p, sizeof(p), "/proc/%d/exe", pid);
	int exe_errno = readlink(p, bins[0], PATH_MAX) < 0 ? errno : 0;
	if (exe_errno == ENOENT && process_ended(pid))
		return fail(err, errlen, -ESRCH, "process %d exited while the programs were attached",
			    (int)pid);
	if (exe_errno == ENOENT)
		return fail(err, errlen, -ENOENT,
			    "process %d has no executable (a kernel thread, or exiting)", (int)pid);
	int nbins = probe_binaries(pid, bins, NULL); /* read only: no attach follows */
	bool cbcmn = false;
	for (int b = 0; b < nbins && !cbcmn; b++)
		cbcmn = has_cbcmn_probes(bins[b]);
	if (nbins && !cbcmn && process_ended(pid))
		return fail(err, errlen, -ESRCH, "process %d exited while the programs were attached",
			    (int)pid);
	if (nbins && !cbcmn) {
		char comm[32] = "?";
		snprintf(p, sizeof(p), "/proc/%d/comm", pid);
		FILE *f = fopen(p, "r");
		if (f) {
			if (!fgets(comm, sizeof(comm), f))
				snprintf(comm, sizeof(comm), "?");
			comm[strcspn(comm, "\n")] = 0;
			fclose(f);
		}
		return fail(err, errlen, -ENOENT,
			    "process %d (%s) is not a cbcmn program: no cbcmn probes in its executable "
			    "or a file it maps", (int)pid, comm);
	}
	if ((rc = check_privileges(err, errlen)))
		return rc;
	/* Privileged, and still not allowed to read it (another user's
	 * process without CAP_SYS_PTRACE, a process made undumpable, an
	 * LSM): its probes cannot be found, so nothing is attached. */
	if (exe_errno) {
		/* The kernel's rule (ptrace_may_access): another user's
		 * process, or one with capabilities we do not hold, needs
		 * CAP_SYS_PTRACE.  Say so when that is what we lack. */
		bool ptrace = effective_caps() >> CAP_SYS_PTRACE & 1;
		return fail(err, errlen, -EACCES,
			    "cannot read process %d's executable (/proc/%d/exe: %s): its probes cannot be found%s",
			    (int)pid, (int)pid, strerror(exe_errno),
			    (exe_errno == EACCES || exe_errno == EPERM) && !ptrace
				    ? " (a process of another user, or with capabilities this one does not hold, "
				      "needs CAP_SYS_PTRACE: this process lacks CAP_SYS_PTRACE)"
				    : "");
	}
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
	m->runtime = runtime;
	m->stop_fd = -1;
	pthread_mutex_init(&m->link_lock, NULL);
	/* The process as it is now: should it exit and its pid be reused
	 * while we load, the pidfd still says it exited. */
	m->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	m->ktgid = (__u32)pid;
	if (!kernel_view()) {
		/* In a pid namespace: the kernel's ids from a task iterator. */
		char self[32] = "";
		if (readlink("/proc/self", self, sizeof(self) - 1) <= 0 || atoi(self) != getpid()) {
			rc = fail(err, errlen, -EINVAL,
				  "/proc is not this pid namespace's (mount one: mount -t proc proc /proc)");
			goto cleanup;
		}
		m->ns_mode = true;
		if ((rc = xlat_load(m))) {
			rc = fail(err, errlen, rc,
				  rc == -ESRCH ? "process %d: the kernel has no task of that number in this pid namespace"
					       : "process %d: finding its kernel ids (this tool runs in a pid namespace): %s",
				  (int)pid, strerror(-rc));
			goto cleanup;
		}
	}
	vmlinux = btf__load_vmlinux_btf();
	/* Run-queue waits come from task_struct::sched_info (cbcmn.bpf.c,
	 * account_sched_counts), which CONFIG_SCHED_INFO adds. */
	m->no_sched_info = vmlinux && !btf_has_member(vmlinux, "task_struct", "sched_info");
	/* bpf_get_attach_cookie() (5.15) reads it from here. */
	m->by_fd = vmlinux && btf_has_member(vmlinux, "bpf_trace_run_ctx", "bpf_cookie");
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
		m->skel->rodata->targ_tgid = m->ktgid; /* the kernel's, as task_struct::tgid */
		m->skel->rodata->targ_rt = runtime;
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
	map_mmaps(m);
	if ((flags & BPFMON_PIN) && (rc = pin_maps(m, err, errlen)))
		goto cleanup;

	/* Executors that started before us, then attach, then those that
	 * started in between (exec_start covers the ones after). */
	scan_executors(m, false);
	attach_all(m);
	m->xl_fresh = false; /* threads born since xlat_load: one more look */
	scan_executors(m, true);
	for (size_t i = 0; i < NSPECS; i++)
		m->switch_on |= m->progs[i].state == BPFMON_ATTACHED &&
				!strncmp(specs[i].name, "cbcmn_sched_switch", 18);
	if (!(flags & BPFMON_STEAL_FAIL)) {
		m->fails_from_runtime = true;
		if (!(m->per = calloc(CBCMN_BPF_MAX_SHARDS, sizeof(*m->per)))) {
			rc = fail(err, errlen, -ENOMEM, "out of memory");
			goto cleanup;
		}
		fails_read(m, NULL, 0, true);
	}
	/* Programs attached for a process that is gone would run for every
	 * task of the host until we close: refuse instead. */
	if (target_gone(m)) {
		rc = fail(err, errlen, -ESRCH, "process %d exited while the programs were attached",
			  (int)pid);
		goto cleanup;
	}
	watch_start(m);
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

/* ---- what is measured ------------------------------------------------------- */

/* The sources of events a figure rests on: one or more programs each (a
 * tp_btf and its raw_tp twin, fentry and its tracepoint fallback). */
enum src {
	SRC_STEAL, SRC_STEAL_FAIL, SRC_DOORBELL, SRC_DB_COAL, SRC_XMSG, SRC_PARK, SRC_LOCK,
	SRC_SWITCH, SRC_SUBMIT, SRC_COMPLETE, SRC_CQWAIT, SRC_ASYNC,
	SRC_OVERFLOW, SRC_FUTEX_IN, SRC_FUTEX_OUT, SRC_MIGRATE, SRC_RESTART, SRC_BACKPRESSURE, NSRC
};

/* A program's source, by what it attaches to (names the specs table may
 * grow with: io_uring_submit_sqe is 6.1's name of io_uring_submit_req). */
static int src_of(const struct spec *sp)
{
	static const struct {
		const char *what;
		int src;
	} by_what[] = {
		{"steal", SRC_STEAL}, {"steal_fail", SRC_STEAL_FAIL}, {"doorbell", SRC_DOORBELL},
		{"doorbell_coalesced", SRC_DB_COAL}, {"xmsg", SRC_XMSG}, {"park", SRC_PARK},
		{"lock_contended", SRC_LOCK}, {"sched_switch", SRC_SWITCH},
		{"io_uring_submit_req", SRC_SUBMIT}, {"io_uring_submit_sqe", SRC_SUBMIT},
		{"io_uring_complete", SRC_COMPLETE}, {"io_uring_cqring_wait", SRC_CQWAIT},
		{"io_uring_queue_async_work", SRC_ASYNC}, {"io_uring_cqe_overflow", SRC_OVERFLOW},
		{"sys_enter_futex", SRC_FUTEX_IN}, {"sys_exit_futex", SRC_FUTEX_OUT},
		{"actor_migrate", SRC_MIGRATE}, {"sup_restart", SRC_RESTART},
		{"actor_backpressure", SRC_BACKPRESSURE},
	};
	if (sp->kind == FENTRY)
		return SRC_FUTEX_IN;
	if (sp->kind == FEXIT)
		return SRC_FUTEX_OUT;
	for (size_t i = 0; i < sizeof(by_what) / sizeof(by_what[0]); i++)
		if (!strcmp(sp->what, by_what[i].what))
			return by_what[i].src;
	return -1;
}

#define B(x) (1u << (x))
#define NEED(f, mask) {offsetof(struct cbcmn_bpf_shard, f), (mask)}
/* Each counter and the sources it needs (docs/OBSERVABILITY.md, "Not
 * measured").  A completion is attributed by the ring its shard's SQEs
 * taught us: the io_uring counters need the submissions too. */
static const struct {
	size_t off;
	unsigned need;
} field_need[] = {
	NEED(steals, B(SRC_STEAL)), NEED(tasks_stolen, B(SRC_STEAL)),
	NEED(steal_fails, B(SRC_STEAL_FAIL)),
	NEED(doorbells_msg_ring, B(SRC_DOORBELL)), NEED(doorbells_eventfd, B(SRC_DOORBELL)),
	NEED(doorbells_recv, B(SRC_DOORBELL)), NEED(doorbells_coalesced, B(SRC_DB_COAL)),
	NEED(xmsgs_sent, B(SRC_XMSG)), NEED(xmsgs_recv, B(SRC_XMSG)),
	NEED(lock_contended, B(SRC_LOCK)), NEED(lock_wait_ns, B(SRC_LOCK)), NEED(parks, B(SRC_PARK)),
	NEED(oncpu_ns, B(SRC_SWITCH)), NEED(offcpu_ns, B(SRC_SWITCH)), NEED(switches, B(SRC_SWITCH)),
	NEED(involuntary, B(SRC_SWITCH)), NEED(migrations, B(SRC_SWITCH)),
	NEED(sqes, B(SRC_SUBMIT)), NEED(msg_ring_sqes, B(SRC_SUBMIT)),
	NEED(cqes, B(SRC_SUBMIT) | B(SRC_COMPLETE)), NEED(cqe_errors, B(SRC_SUBMIT) | B(SRC_COMPLETE)),
	NEED(cqring_waits, B(SRC_SUBMIT) | B(SRC_CQWAIT)),
	NEED(async_work, B(SRC_SUBMIT) | B(SRC_ASYNC)),
	NEED(cqe_overflows, B(SRC_SUBMIT) | B(SRC_OVERFLOW)),
	NEED(runq_waits, B(SRC_SWITCH)), NEED(runq_ns, B(SRC_SWITCH)),
	NEED(futex_waits, B(SRC_FUTEX_IN) | B(SRC_FUTEX_OUT)),
	NEED(futex_wait_ns, B(SRC_FUTEX_IN) | B(SRC_FUTEX_OUT)),
	NEED(doorbell_lat, B(SRC_DOORBELL) | B(SRC_SWITCH)),
	NEED(doorbell_lat_ns, B(SRC_DOORBELL) | B(SRC_SWITCH)),
	NEED(doorbells_running, B(SRC_DOORBELL) | B(SRC_SWITCH)),
	NEED(doorbells_pending, B(SRC_DOORBELL) | B(SRC_SWITCH)),
	NEED(steal_lat, B(SRC_STEAL)), NEED(steal_lat_ns, B(SRC_STEAL)),
	NEED(actor_migrations, B(SRC_MIGRATE)), NEED(actor_restarts, B(SRC_RESTART)),
	NEED(actor_backpressure, B(SRC_BACKPRESSURE)),
};

bool bpfmon_measured(const struct bpfmon *m, size_t field, char *why, size_t whylen)
{
	unsigned need = 0;
	for (size_t i = 0; i < sizeof(field_need) / sizeof(field_need[0]); i++)
		if (field_need[i].off == field)
			need = field_need[i].need;
	if (whylen)
		why[0] = 0;
	/* Without cbcmn:steal_fail (BPFMON_STEAL_FAIL), failed steals come
	 * from the runtime's own counters: measured all the same. */
	if (m->fails_from_runtime)
		need &= ~B(SRC_STEAL_FAIL);
	if (m->no_sched_info && (field == offsetof(struct cbcmn_bpf_shard, runq_waits) ||
				 field == offsetof(struct cbcmn_bpf_shard, runq_ns))) {
		if (whylen)
			snprintf(why, whylen, "task_struct has no sched_info in this kernel (CONFIG_SCHED_INFO off)");
		return false;
	}
	for (int src = 0; src < NSRC; src++) {
		if (!(need & B(src)))
			continue;
		int bad = -1;
		bool on = false;
		for (size_t i = 0; i < NSPECS && !on; i++) {
			if (src_of(&specs[i]) != src)
				continue;
			on = m->progs[i].state == BPFMON_ATTACHED;
			/* The reason of a refusal or an absence before that of a
			 * form turned off because another was tried. */
			if (bad < 0 || (m->progs[bad].state == BPFMON_OFF && m->progs[i].state != BPFMON_OFF))
				bad = (int)i;
		}
		if (on)
			continue;
		if (whylen && bad < 0)
			snprintf(why, whylen, "no program");
		else if (whylen)
			snprintf(why, whylen, "%s: %s", m->progs[bad].target,
				 m->progs[bad].state == BPFMON_OFF ? "turned off" : m->progs[bad].reason);
		return false;
	}
	return true;
}
#undef NEED
#undef B

bool bpfmon_measured_all(const struct bpfmon *m, const size_t *fields, size_t n, char *why,
			 size_t whylen)
{
	for (size_t i = 0; i < n; i++)
		if (!bpfmon_measured(m, fields[i], why, whylen))
			return false;
	return true;
}

const char *bpfmon_fig(bool measured, uint64_t v, char *buf, size_t len)
{
	if (!measured)
		return "-";
	snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
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
static int read_shard_k(struct bpfmon *m, int fs, __u32 i, struct bpfmon_shard *o)
{
	int rc = map_get(m, MM_SHARDS, fs, i, &o->c, sizeof(o->c));
	if (rc)
		return rc;
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
		if ((rc = map_get(m, MM_SHARDS, fs, i, &o->c, sizeof(o->c))))
			return rc;
		if (!o->c.tid) {
			o->c.tid = keep_tid;
			o->c.cpu = keep_cpu;
		}
		uint64_t sum = sched_sum(m->pid, xlat(m, tid, true)), now = mono_ns();
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

/* read_shard_k, with the thread id as this process sees it (xlat). */
static int read_shard(struct bpfmon *m, int fs, __u32 i, struct bpfmon_shard *o)
{
	int rc = read_shard_k(m, fs, i, o);
	if (!rc && m->ns_mode && o->c.tid) {
		__u32 v = xlat(m, o->c.tid, true);
		o->c.tid = v ? v : o->c.tid; /* gone: the kernel's id rather than none */
	}
	return rc;
}

int bpfmon_read(struct bpfmon *m, struct bpfmon_shard *out, uint32_t n)
{
	if (!m || !out || n > CBCMN_BPF_NSLOTS)
		return -EINVAL;
	m->xl_fresh = false; /* one look for threads born since, per read */
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
		for (__u32 k = 0; k < CBCMN_BPF_MAX_OPS; k++)
			if ((rc = map_get(m, MM_SQE_OPS, fo, i * CBCMN_BPF_MAX_OPS + k, &o->sqe_ops[k], 8)))
				return rc;
		for (__u32 k = 0; k < CBCMN_BPF_HIST_SLOTS; k++)
			if ((rc = map_get(m, MM_LOCK_HIST, fl, i * CBCMN_BPF_HIST_SLOTS + k,
					  &o->lock_hist[k], 8)))
				return rc;
		for (__u32 h = 0; h < CBCMN_BPF_NHISTS; h++)
			for (__u32 k = 0; k < CBCMN_BPF_HIST_SLOTS; k++)
				if ((rc = map_get(m, MM_HISTS, fh,
						  (h * CBCMN_BPF_NSLOTS + i) * CBCMN_BPF_HIST_SLOTS + k,
						  &o->hist[h][k], 8)))
					return rc;
		/* Any counter non-zero, or a thread seen: the shard exists. */
		const __u64 *w = (const __u64 *)&o->c;
		bool any = o->c.tid != 0;
		for (size_t k = 0; k < offsetof(struct cbcmn_bpf_shard, tid) / 8; k++)
			any |= w[k] != 0;
		if (any && i < CBCMN_BPF_OUTSIDE)
			seen = (int)i + 1;
	}
	if (m->fails_from_runtime)
		fails_read(m, out, n, false);
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

int bpfmon_steal_pairs(struct bpfmon *m, struct cbcmn_bpf_pair_key *k, struct cbcmn_bpf_pair *v,
		       uint32_t max)
{
	if (!m || (max && (!k || !v)))
		return -EINVAL;
	int fd = bpf_map__fd(m->skel->maps.steal_pairs);
	uint32_t n = 0;
	struct cbcmn_bpf_pair_key at, next;
	/* Records are never deleted: the walk sees each pair once (one added
	 * meanwhile may be missed, and counts at the next read). */
	for (const void *cur = NULL; n < max && !bpf_map_get_next_key(fd, cur, &next); cur = &at) {
		at = next;
		if (bpf_map_lookup_elem(fd, &at, &v[n]))
			continue; /* cannot happen: nothing deletes */
		k[n++] = at;
	}
	return errno == ENOENT || n == max ? (int)n : -errno;
}

int bpfmon_cost(const struct bpfmon *m, struct bpfmon_cost *out)
{
	return bpfmon_cost_of(m, "", out);
}

int bpfmon_cost_of(const struct bpfmon *m, const char *prefix, struct bpfmon_cost *out)
{
	if (!m || !prefix || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	struct bpf_program *prog;
	bpf_object__for_each_program(prog, m->skel->obj) {
		int fd = bpf_program__fd(prog);
		if (fd < 0 || strncmp(bpf_program__name(prog), prefix, strlen(prefix)))
			continue; /* not loaded (turned off, or refused), or not asked for */
		struct bpf_prog_info info;
		__u32 len = sizeof(info);
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(fd, &info, &len))
			return -errno;
		out->progs++;
		out->runs += info.run_cnt;
		out->run_ns += info.run_time_ns;
		for (size_t i = 0; i < NSPECS; i++)
			if (specs[i].kind == USDT && !strcmp(specs[i].name, bpf_program__name(prog)))
				out->usdt_runs += info.run_cnt;
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
	if (m->watching) {
		uint64_t one = 1;
		ssize_t n = write(m->stop_fd, &one, sizeof(one));
		(void)n; /* an eventfd write of 1 cannot fail short of overflow */
		pthread_join(m->watcher, NULL);
	}
	bpfmon_detach(m);
	for (int i = 0; i < NMM; i++)
		if (m->mm[i])
			munmap((void *)m->mm[i], m->mm_len[i]);
	if (m->skel)
		unpin_maps(m);
	cbcmn_bpf__destroy(m->skel);
	cbcmn_watch_close(m->w);
	free(m->per);
	free(m->xl);
	if (m->stop_fd >= 0)
		close(m->stop_fd);
	if (m->pidfd >= 0)
		close(m->pidfd);
	pthread_mutex_destroy(&m->link_lock);
	free(m);
}
