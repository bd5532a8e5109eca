/* uring_ops.c: io_uring opcode names (uring_ops.h). */
#include <stdio.h>

#include "util/uring_ops.h"

/* include/uapi/linux/io_uring.h, in order. */
static const char *const op_names[] = {
	"NOP", "READV", "WRITEV", "FSYNC", "READ_FIXED", "WRITE_FIXED", "POLL_ADD",
	"POLL_REMOVE", "SYNC_FILE_RANGE", "SENDMSG", "RECVMSG", "TIMEOUT",
	"TIMEOUT_REMOVE", "ACCEPT", "ASYNC_CANCEL", "LINK_TIMEOUT", "CONNECT",
	"FALLOCATE", "OPENAT", "CLOSE", "FILES_UPDATE", "STATX", "READ", "WRITE",
	"FADVISE", "MADVISE", "SEND", "RECV", "OPENAT2", "EPOLL_CTL", "SPLICE",
	"PROVIDE_BUFFERS", "REMOVE_BUFFERS", "TEE", "SHUTDOWN", "RENAMEAT",
	"UNLINKAT", "MKDIRAT", "SYMLINKAT", "LINKAT", "MSG_RING", "FSETXATTR",
	"SETXATTR", "FGETXATTR", "GETXATTR", "SOCKET", "URING_CMD", "SEND_ZC",
	"SENDMSG_ZC", "READ_MULTISHOT", "WAITID", "FUTEX_WAIT", "FUTEX_WAKE",
	"FUTEX_WAITV", "FIXED_FD_INSTALL", "FTRUNCATE", "BIND", "LISTEN",
};

void uring_op_name(unsigned op, char *buf, size_t len)
{
	if (op < sizeof(op_names) / sizeof(op_names[0]))
		snprintf(buf, len, "%s", op_names[op]);
	else
		snprintf(buf, len, "OP%u", op);
}
