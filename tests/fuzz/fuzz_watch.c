/* fuzz_watch: the statistics-segment reader (lib/watch.c cbcmn_watch_open
 * and cbcmn_watch_read), which maps another process's memory and must not
 * trust a byte of it.
 *
 * Input: one byte of flags, two bytes (little endian) saying where the
 * segment ends, then the segment's bytes, and after them bytes the target
 * writes over the segment's start once the reader has opened it, as a
 * hostile or buggy process rewrites its segment under a watcher.  The
 * target makes a memfd named as a runtime's ("cbcmn-stats") holding the
 * segment and watches itself, as cbcmn-top watches a process.  Flags: bit
 * 0 keeps the pid field as given (else it is set to ours, which the reader
 * requires); bit 1 leaves the memfd unsealed, bit 2 seals shrinking only.
 * Checked besides memory safety (a read past the mapping is a SIGSEGV or
 * SIGBUS): the documented errors only, and statistics that describe the
 * executors the segment had when it was opened, whatever it says later.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "cbcmn.h"
#include "statseg.h"

static cbcmn_executor_stats per[CBCMN_MAX_EXECUTORS];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	unsigned flags = data[0];
	size_t len = (size_t)(data[1] | data[2] << 8);
	data += 3;
	size -= 3;
	if (len > size)
		len = size;
	const uint8_t *later = data + len;
	size_t later_len = size - len;
	int fd = memfd_create(CBCMN__SEG_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		abort();
	char *seg = malloc(len ? len : 1);
	if (!seg)
		abort();
	memcpy(seg, data, len);
	struct cbcmn__seg_hdr h = {0};
	if (len >= sizeof(h)) {
		memcpy(&h, seg, sizeof(h));
		if (!(flags & 1)) {
			h.pid = (int32_t)getpid();
			memcpy(seg + offsetof(struct cbcmn__seg_hdr, pid), &h.pid, sizeof(h.pid));
		}
	}
	if (len && write(fd, seg, len) != (ssize_t)len)
		abort();
	free(seg);
	if (!(flags & 2))
		fcntl(fd, F_ADD_SEALS, flags & 4 ? F_SEAL_SHRINK : CBCMN__SEG_SEALS);

	cbcmn_watch *w = (cbcmn_watch *)&w;
	int rc = cbcmn_watch_open((int32_t)getpid(), 0, &w);
	if (rc) {
		FUZZ_CHECK(rc == -ENOENT || rc == -EPROTO || rc == -ENOMEM || rc == -EMFILE, "rc %d", rc);
		FUZZ_CHECK(w == NULL, "*out set on an error");
	} else {
		cbcmn_stats st;
		FUZZ_CHECK(len >= sizeof(h), "a segment of %zu bytes accepted", len);
		FUZZ_CHECK(!(flags & 6), "an unsealed segment accepted");
		for (int round = 0; round < 2; round++) {
			rc = cbcmn_watch_read(w, &st, per, CBCMN_MAX_EXECUTORS);
			FUZZ_CHECK(rc == 0 || rc == -ESRCH, "read: %d", rc);
			/* nexec, less the spare's slot while the header (live,
			 * rewritten below) marks one (watch.c). */
			FUZZ_CHECK((st.executors == h.nexec || st.executors + 1 == h.nexec) &&
					   h.nexec >= 1 && h.nexec <= CBCMN_MAX_EXECUTORS,
				   "%u executors, the header said %u", st.executors, h.nexec);
			FUZZ_CHECK(st.pid == h.pid, "pid %d", (int)st.pid);
			FUZZ_CHECK(st.tasks_live <= st.tasks_spawned, "live %llu of %llu",
				   (unsigned long long)st.tasks_live,
				   (unsigned long long)st.tasks_spawned);
			/* The sealed size stays; the bytes do not. */
			if (round == 0 && later_len)
				(void)!pwrite(fd, later, later_len < len ? later_len : len, 0);
		}
		cbcmn_watch_close(w);
	}
	close(fd);
	return 0;
}
