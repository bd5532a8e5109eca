/* uring_ops.h: io_uring opcode names, for the tools' output. */
#ifndef CBCMN_TOOLS_URING_OPS_H
#define CBCMN_TOOLS_URING_OPS_H

#include <stddef.h>

/* IORING_OP_* op's name ("READ", "SENDMSG", ...), or "OP<n>" for one
 * newer than this table, into buf. */
void uring_op_name(unsigned op, char *buf, size_t len);

#endif
