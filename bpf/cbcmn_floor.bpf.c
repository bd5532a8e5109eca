// SPDX-License-Identifier: GPL-2.0
/* cbcmn_floor.bpf.c: an empty program on sched_switch, the tracepoint of
 * cbcmn.bpf.c's one program on every context switch, for cbcmn-bench
 * bpf-overhead: what any program there costs every context switch of the
 * host (the tracepoint's call into BPF), the floor under host_switch_ns
 * that no filter can go below. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/sched_switch")
int BPF_PROG(floor_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return 0;
}

/* An empty uprobe: cbcmn-bench attaches it to a function of its own to
 * time what every USDT hit costs before any program runs (the trap into
 * the kernel and back), which the kernel's run statistics do not count. */
SEC("uprobe")
int floor_uprobe(void *ctx)
{
	return 0;
}
