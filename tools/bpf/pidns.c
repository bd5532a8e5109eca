/* pidns.c: thread ids between pid namespaces (pidns.h). */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/pidns.h"

/* The first and last numbers of the NSpid line of a status file: the id
 * in /proc's namespace and in the task's own; 0 when there is none. */
static void nspid(const char *path, long *first, long *last)
{
	char line[256];
	FILE *f = fopen(path, "r");
	*first = *last = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6))
			continue;
		char *at = line + 6, *end;
		for (long v; (v = strtol(at, &end, 10)), end != at; at = end) {
			if (!*first)
				*first = v;
			*last = v;
		}
		break;
	}
	fclose(f);
}

int32_t pidns_view_tid(pid_t pid, int32_t inner)
{
	char path[96];
	long first, last;
	if (inner <= 0)
		return inner;
	/* The common case first: one namespace, the same number. */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)inner);
	nspid(path, &first, &last);
	if (first == inner && last == inner)
		return inner;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	struct dirent *de;
	int32_t view = inner;
	while (d && (de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.24s/status", (int)pid, de->d_name);
		nspid(path, &first, &last);
		if (last == inner) {
			view = (int32_t)first;
			break;
		}
	}
	if (d)
		closedir(d);
	return view;
}
