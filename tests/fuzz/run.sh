#!/usr/bin/env bash
# Run libFuzzer targets of build/fuzz on their corpora (docs/FUZZ.md).
#   tests/fuzz/run.sh [-t SECONDS] [-j JOBS] [TARGET ...]   (default: every target, 15 s)
# Each target runs for SECONDS on tests/fuzz/corpus/NAME (read only) plus
# build/fuzz/work/NAME, where what it finds new is kept between runs.  A
# crash, a leak, a timeout (a hang) or a broken contract stops that target
# and fails the run; the input is in build/fuzz/crashes/NAME-*, the log in
# build/fuzz/logs/NAME.log.  Prints "N passed, N failed" last.
set -u
cd "$(dirname "$0")/../.."
secs=15
jobs=1
while getopts "t:j:" o; do
	case $o in
	t) secs=$OPTARG ;;
	j) jobs=$OPTARG ;;
	*) echo "usage: $0 [-t SECONDS] [-j JOBS] [TARGET ...]" >&2; exit 2 ;;
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

failed=()
passed=0
for t in "$@"; do
	name=${t#fuzz_}
	bin=build/fuzz/fuzz_$name
	seeds=tests/fuzz/corpus/$name
	work=build/fuzz/work/$name
	log=build/fuzz/logs/$name.log
	mkdir -p "$work" build/fuzz/crashes build/fuzz/logs
	if [ ! -x "$bin" ]; then
		echo "=== fuzz_$name: $bin is not built (make fuzz)"
		failed+=("fuzz_$name")
		continue
	fi
	dict=()
	[ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
	# -timeout: one input taking this long is a hang.  -rss_limit_mb:
	# the allocations of one input are bounded too.  The corpus dirs:
	# new inputs go to the first, the seeds are only read.
	par=()
	[ "$jobs" -gt 1 ] && par=(-jobs="$jobs" -workers="$jobs")
	start=$(date +%s)
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=131072 \
		"${par[@]}" -print_final_stats=1 \
		-artifact_prefix="build/fuzz/crashes/$name-" "${dict[@]}" \
		"$work" "$seeds" >"$log" 2>&1
	rc=$?
	# -jobs writes each job's output to fuzz-N.log in the cwd.
	if [ "$jobs" -gt 1 ]; then
		cat fuzz-*.log >>"$log" 2>/dev/null
		rm -f fuzz-*.log
	fi
	runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
		echo "=== fuzz_$name: ok, $runs inputs in $(( $(date +%s) - start ))s"
	else
		failed+=("fuzz_$name")
		echo "=== fuzz_$name: FAILED (status $rc) after $(( $(date +%s) - start ))s; log $log:"
		grep -E 'ERROR|contract broken|SUMMARY|Test unit written|runtime error|==[0-9]+==' "$log" | head -20
		echo "    Reproduce: $bin build/fuzz/crashes/$name-<file>.  Fix the parser, add the"
		echo "    input to the parser's cmocka suite as a regression test and copy it"
		echo "    into $seeds/ (docs/FUZZ.md)."
	fi
done
echo "fuzz: ${passed} passed, ${#failed[@]} failed"
if [ ${#failed[@]} -ne 0 ]; then
	echo "failed: ${failed[*]}"
	exit 1
fi
