/* pidns.h: thread ids between pid namespaces.  A runtime publishes its
 * threads' ids as it sees them (gettid() in its own, innermost pid
 * namespace: the stats segment, cbcmn:exec_start's argument); the tools
 * show them as /proc here shows them, which for a process in a container
 * is another number. */
#ifndef CBCMN_TOOLS_PIDNS_H
#define CBCMN_TOOLS_PIDNS_H

#include <stdint.h>
#include <sys/types.h>

/* Thread inner of process pid, where inner is the id in the process's own
 * pid namespace, as /proc here numbers it (the NSpid line of each
 * /proc/pid/task/N/status: its first number is ours, its last the
 * process's own).  The same number when both are one namespace; inner
 * itself when no thread of pid has it (gone, or not readable); 0 for 0.
 * Reads every thread's status: call it when the id changed, not per
 * sample. */
int32_t pidns_view_tid(pid_t pid, int32_t inner);

#endif /* CBCMN_TOOLS_PIDNS_H */
