#!/usr/bin/env bash
# hog.sh: keep every CPU busy, to check that tests hold on a loaded machine.
#
#   scripts/hog.sh                  one busy loop per online CPU until Ctrl-C
#   scripts/hog.sh -- CMD [ARG...]  the same while CMD runs; exits with CMD's status
#   scripts/hog.sh -n N ...         N busy loops instead of one per CPU
#
# The loops run at the caller's priority, so they compete with the tests
# for every CPU, as another build or a neighbour's job would.  They end
# with this script: killed on exit by their process ids, and each also
# stops on its own within a fraction of a second once this script is gone
# (a SIGKILL of the script leaves nothing spinning).
set -u

n=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)
while [ $# -gt 0 ]; do
	case $1 in
	-n) n=$2; shift 2 ;;
	--) shift; break ;;
	-h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "hog.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
case $n in
''|*[!0-9]*|0) echo "hog.sh: -n wants a positive count, not '$n'" >&2; exit 2 ;;
esac

me=$$
pids=()
stop() {
	[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null
	pids=()
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for ((k = 0; k < n; k++)); do
	# Pure shell arithmetic: no system calls but the liveness check
	# every ~0.1 s, which is what ends an orphaned loop.
	( trap - EXIT INT TERM
	  while kill -0 "$me" 2>/dev/null; do
		for ((i = 0; i < 100000; i++)); do :; done
	  done ) &
	pids+=($!)
done
echo "hog.sh: $n busy loops (pids ${pids[*]})" >&2

if [ $# -eq 0 ]; then
	wait
	exit 0
fi
"$@"
rc=$?
exit $rc
