/* errtail.h: the last lines a child process wrote on a pipe (its stderr),
 * read by a thread of their own so that the child never blocks on a full
 * pipe whatever the reader's main loop is doing (a curses screen that must
 * not be written over, a batch loop asleep between snapshots).
 *
 * The lines are kept in a ring of ERRTAIL_LINES, each cut to
 * ERRTAIL_LINE_MAX bytes; older lines are counted, not kept.  A carriage
 * return not followed by a newline starts the line over, as on a
 * terminal (a progress report keeps its last state; CRLF ends a line).
 * Printed lines are safe on a terminal: control bytes (escape sequences,
 * NULs) and bytes that are not well-formed UTF-8 become '?'.
 *
 * errtail_open, errtail_print and errtail_close are called by one thread
 * (the owner); the reading thread is internal.
 */
#ifndef CBCMN_TOOLS_ERRTAIL_H
#define CBCMN_TOOLS_ERRTAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define ERRTAIL_LINES 20
#define ERRTAIL_LINE_MAX 512

struct errtail;

/* Start reading fd (the read end of the pipe; errtail owns it from here,
 * success or not).  What is read is also written to copy_fd as it comes
 * (-1: nowhere; a failed write is ignored: the ring still has it).
 * Returns 0 or a negative errno. */
int errtail_open(struct errtail **out, int fd, int copy_fd);

/* Wait up to wait_ms for the end of the stream (every writer gone: the
 * child dead, and whatever it forked that kept the pipe), then stop
 * reading.  A line the stream ended without a newline is kept.  Further
 * calls do nothing.  (A process that inherited the pipe and lives on can
 * hold it open for ever: hence the bound.) */
void errtail_stop(struct errtail *t, unsigned wait_ms);

/* Print to f the complete lines kept and not printed before, oldest
 * first, each as prefix + line + '\n'; if lines were dropped since the
 * last print (more came than the ring holds), first prefix + a line
 * saying how many.  A line still being written waits for its newline or
 * for errtail_stop.  Returns the number of lines of the child printed. */
size_t errtail_print(struct errtail *t, FILE *f, const char *prefix);

/* Complete lines not printed yet, dropped ones included. */
size_t errtail_pending(struct errtail *t);

/* Stop (without waiting) and free.  t may be NULL. */
void errtail_close(struct errtail *t);

#endif
