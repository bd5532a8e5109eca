#!/usr/bin/env bash
# stress-suite.sh: `make test`'s suites N times in a row under a CPU hog
# (scripts/hog.sh, one busy loop per CPU), with a pass/fail line per run.
#
#   scripts/stress-suite.sh 10                 release, ASan and TSan suites, 10 runs
#   scripts/stress-suite.sh 3 release          only the release suites
#   scripts/stress-suite.sh -n 1024 2 release  under `ulimit -n 1024` too
#   scripts/stress-suite.sh --no-hog 10        the same without the hog
#
# Builds what `make test` builds first (the builds are not under the hog).
# Each run's output goes to build/stress/run-K-MODE.log; the summary line of
# a failed run names the suites that failed.  Exit status 1 if any run
# failed.
set -u
cd "$(dirname "$0")/.."

hog=1
nofile=
while [ $# -gt 0 ]; do
	case $1 in
	--no-hog) hog=0; shift ;;
	-n) nofile=$2; shift 2 ;;
	-h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "stress-suite.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	*) break ;;
	esac
done
runs=${1:-}
case $runs in
''|*[!0-9]*|0) echo "stress-suite.sh: how many runs? (see --help)" >&2; exit 2 ;;
esac
shift
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(release asan tsan)

# The Makefile's own list of TSan suites, so that the two never disagree.
tsan_tests=$(make -s --no-print-directory --eval='print-tsan: ; @echo $(TSAN_TESTS)' print-tsan)

out=build/stress
mkdir -p "$out"
for m in "${modes[@]}"; do
	case $m in
	release) targets=(SAN= all tests) ;;
	asan) targets=(SAN=asan tests) ;;
	tsan) targets=(SAN=tsan $(printf 'build/tsan/tests/%s ' $tsan_tests)) ;;
	*) echo "stress-suite.sh: mode is release, asan or tsan, not '$m'" >&2; exit 2 ;;
	esac
	if ! make --no-print-directory -j2 "${targets[@]}" >"$out/build-$m.log" 2>&1; then
		tail -20 "$out/build-$m.log"
		echo "stress-suite.sh: the $m build failed ($out/build-$m.log)" >&2
		exit 1
	fi
done

wrap=()
[ $hog = 1 ] && wrap=(scripts/hog.sh --)

# The suites of one mode: run-tests.sh's arguments.
suites() {
	case $1 in
	release) echo build/tests ;;
	asan) echo build/asan/tests ;;
	tsan) echo build/tsan/tests $tsan_tests ;;
	esac
}

bad_runs=0
for ((r = 1; r <= runs; r++)); do
	line="run $r/$runs:"
	run_ok=1
	for m in "${modes[@]}"; do
		log=$out/run-$r-$m.log
		start=$(date +%s)
		if ( if [ -n "$nofile" ]; then ulimit -n "$nofile" || exit 1; fi
		     exec "${wrap[@]}" scripts/run-tests.sh $(suites "$m") ) >"$log" 2>&1; then
			line+=" $m ok"
		else
			run_ok=0
			failed=$(sed -n 's/^failed: //p' "$log")
			line+=" $m FAILED (${failed:-see $log})"
		fi
		line+=" $(( $(date +%s) - start ))s;"
	done
	[ $run_ok = 1 ] || bad_runs=$((bad_runs + 1))
	echo "$line"
done
echo "stress-suite: $((runs - bad_runs)) of $runs runs passed$([ $hog = 1 ] && echo ' under the hog'); logs in $out"
[ $bad_runs -eq 0 ]
