/* rlim.c: raising the soft descriptor limit toward the hard one (rlim.h). */
#include "util/rlim.h"

rlim_t rlim_nofile_up(rlim_t want)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return 0;
	rlim_t to = want < rl.rlim_max ? want : rl.rlim_max;
	/* setrlimit refuses an infinite RLIMIT_NOFILE (past fs.nr_open):
	 * then the soft limit stays where it was. */
	if (to <= rl.rlim_cur || to == RLIM_INFINITY)
		return rl.rlim_cur;
	struct rlimit up = {.rlim_cur = to, .rlim_max = rl.rlim_max};
	return setrlimit(RLIMIT_NOFILE, &up) ? rl.rlim_cur : to;
}
