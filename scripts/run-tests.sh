#!/usr/bin/env bash
# Run cmocka suites and summarise.  Usage: run-tests.sh DIR [NAME ...]
# With no names, every test_* binary in DIR runs.  Exit status 1 if any failed.
# A suite still running after T_SUITE_TIMEOUT seconds (600) is killed and
# counted failed: each test has its own watchdog, this catches the rest.
# CBCMN_TEST_SLOW=N (an emulated guest, tests/helpers.h) multiplies it.
# CBCMN_BACKEND in the environment (make test: epoll) picks the backend of
# every default runtime; the summary says which.
set -u
dir=$1; shift
T_SUITE_TIMEOUT=${T_SUITE_TIMEOUT:-$((600 * ${CBCMN_TEST_SLOW:-1}))}
if [ $# -eq 0 ]; then
	set -- $(cd "$dir" && ls test_* 2>/dev/null | grep -v '\.d$')
fi
# Sanitizer runtimes: fail loudly, keep going across suites.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allow_user_segv_handler=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

failed=()
declare -A status
passed=0
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
for t in "$@"; do
	echo "=== $dir/$t${CBCMN_BACKEND:+ (CBCMN_BACKEND=$CBCMN_BACKEND)}"
	start=$(date +%s)
	# A copy of the output, so that the summary can say why a suite
	# failed: a log's tail alone shows only the last suite.
	# (timeout signals the suite's whole process group, so nothing it
	# started keeps tee waiting.)
	timeout "$T_SUITE_TIMEOUT" "$dir/$t" 2>&1 | tee "$logs/$t"
	rc=${PIPESTATUS[0]}
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
	else
		failed+=("$t")
		status[$t]=$rc
		[ $rc -eq 124 ] && echo "=== $t: killed after $T_SUITE_TIMEOUT s"
	fi
	echo "=== $t: $(( $(date +%s) - start ))s"
done
echo "suites in $dir${CBCMN_BACKEND:+ on $CBCMN_BACKEND}: $passed passed, ${#failed[@]} failed"
if [ ${#failed[@]} -ne 0 ]; then
	for t in "${failed[@]}"; do
		echo "--- why $t failed (exit status ${status[$t]}; its first reports, the whole output is above):"
		grep -m 30 -E -A3 '\[  (FAILED|ERROR) |\[  ERROR   \]|Sanitizer|runtime error:|killed after|watchdog|Assertion|Segmentation|FATAL' "$logs/$t" || tail -15 "$logs/$t"
	done
	echo "failed: ${failed[*]}"
	exit 1
fi
