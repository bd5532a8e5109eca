// SPDX-License-Identifier: GPL-2.0
/* cbcmn_pidns.bpf.c: the kernel's ids of the threads a tool in a pid
 * namespace sees.  cbcmn.bpf.c's programs know a thread by the kernel's
 * (init namespace) ids, task_struct::tgid and ::pid; a tool inside a
 * container knows only its own namespace's numbers, and nothing in /proc
 * there gives the kernel's.  bpfmon runs this task iterator once at attach
 * (and again for a thread it does not know yet): one line per task that
 * has a number in the namespace whose inode is ns_ino, "tgid tid nr" (the
 * kernel's ids, then that number). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

/* The tool's pid namespace: the inode of its /proc/self/ns/pid. */
const volatile __u64 ns_ino = 0;

/* Namespaces nest at most 32 deep (MAX_PID_NS_LEVEL). */
#define MAX_LEVELS 33

SEC("iter/task")
int cbcmn_pidns_task(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	if (!t)
		return 0;
	struct pid *pid = BPF_CORE_READ(t, thread_pid);
	if (!pid)
		return 0;
	unsigned int level = BPF_CORE_READ(pid, level);
	/* pid->numbers[i], i = 0 (the init namespace) .. level (the task's
	 * own): the offset and size from BTF, the index a variable. */
	__u64 base = (__u64)pid + bpf_core_field_offset(struct pid, numbers);
	__u64 size = bpf_core_type_size(struct upid);
	for (__u32 i = 0; i < MAX_LEVELS && i <= level; i++) {
		struct upid u;
		if (bpf_probe_read_kernel(&u, sizeof(u), (void *)(base + i * size)))
			break;
		if (BPF_CORE_READ(u.ns, ns.inum) != ns_ino)
			continue;
		int tgid = BPF_CORE_READ(t, tgid), tid = BPF_CORE_READ(t, pid);
		BPF_SEQ_PRINTF(seq, "%d %d %d\n", tgid, tid, u.nr);
		break;
	}
	return 0;
}
