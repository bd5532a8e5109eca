/* top_ui.h: cbcmn-top's interactive screen (ncurses): the shard table,
 * sparklines, warnings, the detail, topology and help views, and the keys
 * (docs/TOP.md). */
#ifndef CBCMN_TOOLS_TOP_UI_H
#define CBCMN_TOOLS_TOP_UI_H

#include <signal.h>
#include <stdbool.h>

#include "top/top_model.h"

struct top_ui_opts {
	double delay_s; /* between samples */
	bool color;     /* colours (else attributes only) */
};

/* Take over the terminal and run until `q` or *stop; sample m every
 * delay_s (not while paused).  The terminal is restored on return.
 * Returns 0, or a negative errno: -ENOTTY when the screen cannot be set up
 * (not a terminal, or one terminfo does not know), another when sampling
 * fails other than by the target's end. */
int top_ui_run(struct top_model *m, const struct top_ui_opts *o, volatile sig_atomic_t *stop);

/* From a fatal signal's handler: put the terminal back as it was before
 * top_ui_run (leave the alternate screen, show the cursor, restore the
 * tty modes).  Async-signal-safe; does nothing when the screen is not up. */
void top_ui_crash_restore(void);

#endif
