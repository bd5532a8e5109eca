/* rlim.h: descriptor room for the tools, under a distribution's default
 * RLIMIT_NOFILE (soft 1024: kept low for select()'s FD_SETSIZE, while the
 * hard limit, 524288 under systemd, is the user's to take).  A runtime of
 * N executors holds about 2N descriptors (a ring and an eventfd each), a
 * loopback workload two per connection: more than 1024 for the counts the
 * tools accept. */
#ifndef CBCMN_TOOLS_RLIM_H
#define CBCMN_TOOLS_RLIM_H

#include <sys/resource.h>

/* Raise the soft RLIMIT_NOFILE to want, or as near as the hard limit
 * allows (RLIM_INFINITY: to the hard limit).  Never lowers it.  Returns
 * the soft limit now in force (0 if it cannot be read).  Any thread; the
 * limit is the process's. */
rlim_t rlim_nofile_up(rlim_t want);

#endif
