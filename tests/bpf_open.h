/* bpf_open.h: the eBPF suites' monitor of their own process, or the reason
 * there is none (each test then skips with it).  Include after helpers.h
 * and bpf/bpfmon.h. */
#ifndef CBCMN_TEST_BPF_OPEN_H
#define CBCMN_TEST_BPF_OPEN_H

#include <string.h>
#include <unistd.h>

/* bpfmon_open() of this process with flags, kept only if each of the n
 * programs named in needed attached; else NULL and why (len bytes). */
static inline struct bpfmon *t_bpfmon_self(unsigned flags, const char *const *needed, size_t n,
					   char *why, size_t len)
{
	struct bpfmon *m;
	if (bpfmon_open(&m, getpid(), flags, why, len))
		return NULL;
	const struct bpfmon_prog *p;
	unsigned np = bpfmon_progs(m, &p);
	for (unsigned i = 0; i < np; i++)
		for (size_t k = 0; k < n; k++)
			if (!strcmp(p[i].name, needed[k]) && p[i].state != BPFMON_ATTACHED) {
				snprintf(why, len, "%s did not attach (%s)", p[i].target,
					 strerror(-p[i].err));
				bpfmon_close(m);
				return NULL;
			}
	return m;
}

#endif
