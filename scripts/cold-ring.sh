#!/bin/sh
# cold-ring.sh [--base DIR] [--mode pinned|default] [--ll SIZE] [--align]
# [N [H1 H2]]: the data
# cache lines a hop of the fiber actor ring misses (docs/BENCHMARKS.md,
# "Nineteenth session, the cold hop's lines").  Builds scripts/cold-ring.c
# against this tree's build/lib/libcbcmn.a (run `make` first) with the
# project's flags, runs it under cachegrind (a 4 MiB LL, the host's D1) at
# H1 and H2 hops (default 10 000 actors, 50 000 and 250 000 hops, pinned)
# and prints D1 and LL data misses a hop: (misses at H2 - misses at H1) /
# (H2 - H1), so that the spawns, the start and the stop cancel.  The counts
# are deterministic whatever the host's load; a run of 250 000 hops takes
# a few minutes.  With --base DIR, the same program is also linked against
# DIR's build (another worktree, built) and both are printed.
# --ll SIZE: the LL's bytes (16 ways; default 4194304; the host's L3 is
# 33554432).  --align: the actors receive into a 64-byte-aligned message
# (one line, where the program's own frame otherwise puts it across two).
# CBCMN_BACKEND=epoll: under valgrind the io_uring backend hangs.
# COLD_RING_KEEP=DIR keeps the cachegrind files there (cg_annotate them).
set -e
base= mode=pinned ll=4194304 align=
while [ $# -gt 0 ]; do
	case $1 in
	--base) base=${2:?--base needs a directory}; shift 2 ;;
	--mode) mode=${2:?--mode needs pinned or default}; shift 2 ;;
	--ll) ll=${2:?--ll needs a size in bytes}; shift 2 ;;
	--align) align=-DCOLD_RING_MSG_ALIGN=64; shift ;;
	--*) echo "usage: $0 [--base DIR] [--mode pinned|default] [--ll SIZE] [--align] [N [H1 H2]]" >&2; exit 2 ;;
	*) break ;;
	esac
done
n=${1:-10000} h1=${2:-50000} h2=${3:-250000}
case $mode in pinned|default) ;; *) echo "$0: --mode pinned or default" >&2; exit 2 ;; esac
case $n$h1$h2$ll in *[!0-9]*) echo "$0: N, H1, H2 and the LL's size are counts" >&2; exit 2 ;; esac
[ "$h2" -gt "$h1" ] || { echo "$0: H2 must exceed H1" >&2; exit 2; }
[ -z "$base" ] || base=$(cd "$base" && pwd) || exit 2
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${COLD_RING_KEEP:-$(mktemp -d /tmp/cold-ring.XXXXXX)}
mkdir -p "$dir"
[ -n "$COLD_RING_KEEP" ] || trap 'rm -rf "$dir"' EXIT

# misses TREE NAME: build against TREE, print "NAME D1 x LL y" a hop.
misses() {
	lib=$1/build/lib/libcbcmn.a
	[ -f "$lib" ] || { echo "$0: no $lib: run make there" >&2; exit 1; }
	gcc -std=gnu11 -O2 -g -D_GNU_SOURCE -Wall -Wextra -Werror -I"$1/lib/include" $align \
		"$here/scripts/cold-ring.c" "$lib" -luring -lnuma -lpthread -o "$dir/ring.$2"
	for h in "$h1" "$h2"; do
		CBCMN_BACKEND=epoll valgrind --tool=cachegrind --cache-sim=yes --LL="$ll",16,64 \
			--cachegrind-out-file="$dir/cg.$2.$h" "$dir/ring.$2" "$n" "$h" "$mode" \
			> "$dir/log.$2.$h" 2>&1 || { cat "$dir/log.$2.$h" >&2; exit 1; }
	done
	# "D1  misses: 2,130,183 (...)" and "LLd misses: ...": data misses only.
	awk -v name="$2" -v hops=$((h2 - h1)) '
		/D1  misses:/ { gsub(",", "", $4); d1[FILENAME] = $4 }
		/LLd misses:/ { gsub(",", "", $4); ll[FILENAME] = $4 }
		END { printf "%s D1 %.2f LL %.2f misses a hop\n", name,
			(d1[ARGV[2]] - d1[ARGV[1]]) / hops, (ll[ARGV[2]] - ll[ARGV[1]]) / hops }
	' "$dir/log.$2.$h1" "$dir/log.$2.$h2"
}

echo "cold-ring: $n actors, $mode, $h1 and $h2 hops, LL $ll${align:+, message aligned}"
[ -z "$base" ] || misses "$base" base
misses "$here" this
