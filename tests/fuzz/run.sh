#!/usr/bin/env bash
# Run libFuzzer targets of build/fuzz on their corpora (docs/FUZZ.md).
#   tests/fuzz/run.sh [-t SECONDS] [-j JOBS] [-s] [TARGET ...]
#                     (default: every target, 15 s, one at a time)
# Each target runs for SECONDS on tests/fuzz/corpus/NAME (read only) plus
# build/fuzz/work/NAME, where what it finds new is kept between runs; -j
# runs that many targets at once.  -s (the smoke run of make test) starts
# from the corpus alone, in a work directory emptied first: its time does
# not grow with what earlier runs found.  A crash, a leak, a timeout (a hang) or a
# broken contract stops that target and fails the run; the input is in
# build/fuzz/crashes/NAME-*, the log in build/fuzz/logs/NAME.log.  Prints
# "fuzz: N passed, N failed" last.
set -u
cd "$(dirname "$0")/../.."
secs=15
jobs=1
smoke=false
while getopts "t:j:s" o; do
	case $o in
	t) secs=$OPTARG ;;
	j) jobs=$OPTARG ;;
	s) smoke=true ;;
	*) echo "usage: $0 [-t SECONDS] [-j JOBS] [-s] [TARGET ...]" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ $# -eq 0 ]; then
	set -- $(cd build/fuzz 2>/dev/null && ls fuzz_* 2>/dev/null | grep -v '\.d$')
fi
if [ $# -eq 0 ]; then
	echo "fuzz: no target in build/fuzz: run make fuzz" >&2
	exit 1
fi
# The sanitizers as the suites run them; leaks are findings too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allow_user_segv_handler=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p build/fuzz/crashes build/fuzz/logs

# One target; its verdict (one line, "ok ..." or "FAILED ...") in NAME.result.
run_one() {
	local name=${1#fuzz_}
	local bin=build/fuzz/fuzz_$name seeds=tests/fuzz/corpus/$name
	local work=build/fuzz/work/$name log=build/fuzz/logs/$name.log
	local result=build/fuzz/logs/$name.result
	if $smoke; then
		work=build/fuzz/smoke/$name
		rm -rf "$work"
	fi
	mkdir -p "$work"
	if [ ! -x "$bin" ]; then
		echo "FAILED: $bin is not built (make fuzz)" >"$result"
		return
	fi
	local dict=()
	[ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
	# -timeout: one input taking this long is a hang.  -rss_limit_mb:
	# the allocations of one input are bounded too.  The corpus dirs:
	# new inputs go to the first, the seeds are only read.
	local start=$SECONDS
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=131072 \
		-print_final_stats=1 -artifact_prefix="build/fuzz/crashes/$name-" "${dict[@]}" \
		"$work" "$seeds" >"$log" 2>&1
	local rc=$?
	local runs
	runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{print $2 + 0}')
	if [ $rc -eq 0 ]; then
		echo "ok, ${runs:-0} inputs in $((SECONDS - start))s" >"$result"
	else
		echo "FAILED (status $rc) after $((SECONDS - start))s; log $log" >"$result"
	fi
}

names=()
for t in "$@"; do
	name=${t#fuzz_}
	names+=("$name")
	rm -f "build/fuzz/logs/$name.result"
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	run_one "$name" &
done
wait

failed=()
passed=0
for name in "${names[@]}"; do
	verdict=$(cat "build/fuzz/logs/$name.result" 2>/dev/null || echo "FAILED: no verdict")
	echo "=== fuzz_$name: $verdict"
	case $verdict in
	ok*) passed=$((passed + 1)) ;;
	*)
		failed+=("fuzz_$name")
		grep -E 'ERROR|contract broken|SUMMARY|Test unit written|runtime error' \
			"build/fuzz/logs/$name.log" 2>/dev/null | head -20
		echo "    Replay: build/fuzz/fuzz_$name build/fuzz/crashes/$name-<file>.  Fix the parser,"
		echo "    add the input to the parser's cmocka suite as a regression test and copy it"
		echo "    into tests/fuzz/corpus/$name/ (docs/FUZZ.md)."
		;;
	esac
done
echo "fuzz: ${passed} passed, ${#failed[@]} failed"
if [ ${#failed[@]} -ne 0 ]; then
	echo "failed: ${failed[*]}"
	exit 1
fi
