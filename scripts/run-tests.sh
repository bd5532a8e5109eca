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
passed=0
for t in "$@"; do
	echo "=== $dir/$t${CBCMN_BACKEND:+ (CBCMN_BACKEND=$CBCMN_BACKEND)}"
	start=$(date +%s)
	timeout "$T_SUITE_TIMEOUT" "$dir/$t"
	rc=$?
	if [ $rc -eq 0 ]; then
		passed=$((passed + 1))
	else
		failed+=("$t")
		[ $rc -eq 124 ] && echo "=== $t: killed after $T_SUITE_TIMEOUT s"
	fi
	echo "=== $t: $(( $(date +%s) - start ))s"
done
echo "suites in $dir${CBCMN_BACKEND:+ on $CBCMN_BACKEND}: $passed passed, ${#failed[@]} failed"
if [ ${#failed[@]} -ne 0 ]; then
	echo "failed: ${failed[*]}"
	exit 1
fi
