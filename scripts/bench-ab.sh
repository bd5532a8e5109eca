#!/bin/sh
# bench-ab.sh [-r ROUNDS] BASE NEW [cbcmn-bench arguments...]
#
# Two builds of cbcmn-bench alternated round by round in one run, the way
# docs/BENCHMARKS.md compares a branch with main on a shared, noisy host:
# BASE and NEW are trees built with `make all bench-build` (their
# build/bin/cbcmn-bench is run) or cbcmn-bench binaries.  Each round runs
# BASE then NEW with the same arguments (default: actors --workers 2
# --reps 3); every figure line is printed as it comes, prefixed with the
# round and the side, and at the end one line per figure:
#   NAME METRIC base MEDIAN new MEDIAN ratio R paired P lower K/N
# R is the ratio of the medians (new / base), P the median of the rounds'
# own ratios, K/N the rounds where NEW read lower.  Quote ratios, not the
# figures: only rounds of one run share a host's weather.
#
# EXAMPLES
#   git worktree add --detach /tmp/base main && make -C /tmp/base all bench-build
#   scripts/bench-ab.sh -r 6 /tmp/base . actors --workers 2 --reps 3
#   scripts/bench-ab.sh -r 4 /tmp/base . actors --ring 10 --actors 10
set -eu
rounds=4
if [ "${1:-}" = "-r" ]; then
	rounds=${2:?-r needs a count}
	shift 2
fi
case $rounds in '' | *[!0-9]* | 0)
	echo "bench-ab.sh: -r wants a count of rounds above 0, not '$rounds'" >&2
	exit 2 ;;
esac
if [ $# -lt 2 ]; then
	echo "usage: bench-ab.sh [-r ROUNDS] BASE NEW [cbcmn-bench arguments...]" >&2
	exit 2
fi
bin() {
	if [ -d "$1" ]; then
		echo "$1/build/bin/cbcmn-bench"
	else
		echo "$1"
	fi
}
base=$(bin "$1") new=$(bin "$2")
shift 2
for b in "$base" "$new"; do
	[ -x "$b" ] || { echo "bench-ab.sh: $b is not an executable cbcmn-bench (build it: make all bench-build)" >&2; exit 2; }
done
[ $# -gt 0 ] || set -- actors --workers 2 --reps 3

out=$(mktemp /tmp/bench-ab.XXXXXX)
trap 'rm -f "$out"' EXIT
r=1
while [ "$r" -le "$rounds" ]; do
	for side in base new; do
		if [ $side = base ]; then b=$base; else b=$new; fi
		echo "# round $r $side, load $(cut -d' ' -f1 /proc/loadavg)" >&2
		"$b" "$@" 2>/dev/null | awk -v r="$r" -v s="$side" 'NF == 3 { print r, s, $0 }' | tee -a "$out"
	done
	r=$((r + 1))
done

# Medians per side, and the rounds' own ratios (a round missing a side's
# figure, a run that failed, counts in neither).
sort -k3,3 -k4,4 -k1,1n "$out" | awk '
function median(a, n,    i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function flush(    nb, nn, np, lower, i, bv, nv, pr, mb, mn) {
	if (key == "") return
	nb = nn = np = lower = 0
	for (i in b) { bv[++nb] = b[i] }
	for (i in n) { nv[++nn] = n[i] }
	for (i in b) if ((i in n) && b[i] > 0) { pr[++np] = n[i] / b[i]; if (n[i] < b[i]) lower++ }
	if (nb && nn) {
		mb = median(bv, nb); mn = median(nv, nn)
		printf "%s base %g new %g ratio %.3f paired %.3f lower %d/%d\n", key, mb, mn,
		       (mb > 0 ? mn / mb : 0), (np ? median(pr, np) : 0), lower, np
	}
	delete b; delete n
}
{
	k = $3 " " $4
	if (k != key) { flush(); key = k }
	if ($2 == "base") b[$1] = $5; else n[$1] = $5
}
END { flush() }'
