#!/usr/bin/env bash
# Run cmocka suites and summarise.  Usage: run-tests.sh DIR [NAME ...]
# With no names, every test_* binary in DIR runs.  Exit status 1 if any failed.
# A suite still running after T_SUITE_TIMEOUT seconds (600) is killed and
# counted failed: each test has its own watchdog, this catches the rest.
# CBCMN_TEST_SLOW=N (an emulated guest, tests/helpers.h) multiplies it.
# CBCMN_BACKEND in the environment (make test: epoll) picks the backend of
# every default runtime; the summary says which.
#
# T_LANES=2 (make test, on 2 CPUs or more) runs the suites in two lanes at
# once: the tool suites (they load eBPF programs or run cbcmn-top and
# cbcmn-run beside their target: mostly waiting on the kernel and on the
# tools' intervals) one after another in one lane, every other suite one
# after another in the other.  Suites are written to pass beside a CPU hog
# (scripts/hog.sh), so the other lane is load they already stand.  Each
# suite's output is printed whole when it ends (not live: T_LANES=1 shows
# it as it comes), its name and time around it.  Default: 1 lane.
set -u
dir=$1; shift
T_SUITE_TIMEOUT=${T_SUITE_TIMEOUT:-$((600 * ${CBCMN_TEST_SLOW:-1}))}
lanes=${T_LANES:-1}
if [ $# -eq 0 ]; then
	set -- $(cd "$dir" && ls test_* 2>/dev/null | grep -v '\.d$')
fi
# Sanitizer runtimes: fail loudly, keep going across suites.  ASan's fake
# stacks (detect_stack_use_after_return=1) stay off by default: every
# suite passes with them (a test whose premise is a real stack frame
# skips saying so: T_FAKE_STACKS, tests/helpers.h), but they cost time
# and memory (test_fiber 15 s against 5, its parked fibers 36 KB each
# against 15), and make test must stay within its time.  test_sysstack_uar
# turns them on for itself: the fiber switches and landing pads against
# a frame used after its return.  ASAN_OPTIONS=...=1 runs them all so.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allow_user_segv_handler=1:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

# The tool lane (T_LANES=2): suites that attach eBPF programs or drive the
# tools.  They share the kernel's BPF and perf resources with each other,
# so they never run two at once.  test_experiment (the affinity script,
# cbcmn-run --bpf per run: ~30 s) runs in the other lane, which is a
# third as long: its programs attach to its own targets only.
tool_suites=" test_bpf test_bpfns test_bpfscale test_bpfsched test_bpfactor test_top test_toprecord \
test_run test_cli test_place test_loadtest test_export test_actor_stats "

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# One suite: its output into $logs/$t (and live on stdout with one lane),
# its exit status and seconds beside it.
run_one() {
	local t=$1 start rc
	start=$(date +%s)
	if [ "$lanes" -le 1 ]; then
		echo "=== $dir/$t${CBCMN_BACKEND:+ (CBCMN_BACKEND=$CBCMN_BACKEND)}"
		# A copy of the output, so that the summary can say why a suite
		# failed: a log's tail alone shows only the last suite.
		# (timeout signals the suite's whole process group, so nothing it
		# started keeps tee waiting.)
		timeout "$T_SUITE_TIMEOUT" "$dir/$t" 2>&1 | tee "$logs/$t"
		rc=${PIPESTATUS[0]}
	else
		# In the background and waited for, so that a TERM to the lane
		# (below) reaches the suite through its timeout at once.
		timeout "$T_SUITE_TIMEOUT" "$dir/$t" >"$logs/$t" 2>&1 &
		suite=$!
		wait "$suite"
		rc=$?
	fi
	echo "$rc" >"$logs/$t.rc"
	{
		# One suite's report at a time: the lanes' outputs never interleave.
		flock 9
		if [ "$lanes" -gt 1 ]; then
			echo "=== $dir/$t${CBCMN_BACKEND:+ (CBCMN_BACKEND=$CBCMN_BACKEND)}"
			cat "$logs/$t"
		fi
		[ "$rc" -eq 124 ] && echo "=== $t: killed after $T_SUITE_TIMEOUT s"
		echo "=== $t: $(( $(date +%s) - start ))s"
	} 9>>"$logs/.print"
}

suite=
lane() {
	local t
	[ "$lanes" -gt 1 ] && trap '[ -n "$suite" ] && kill -TERM "$suite" 2>/dev/null; wait; exit 130' INT TERM
	for t in "$@"; do
		run_one "$t"
	done
}

if [ "$lanes" -le 1 ]; then
	lane "$@"
else
	tools=() others=()
	for t in "$@"; do
		case $tool_suites in
		*" $t "*) tools+=("$t") ;;
		*) others+=("$t") ;;
		esac
	done
	lane "${tools[@]}" &
	lanes_pids=($!)
	lane "${others[@]}" &
	lanes_pids+=($!)
	# ^C or TERM (run-unprivileged.sh's stop) ends both lanes, each
	# through its suite's timeout, which passes it on to the suite.  (The
	# shells wait in the wait builtin, so their traps run at once.)
	trap 'kill -TERM "${lanes_pids[@]}" 2>/dev/null; wait; exit 130' INT TERM
	wait "${lanes_pids[@]}"
	trap - INT TERM
fi

failed=()
passed=0
for t in "$@"; do
	rc=$(cat "$logs/$t.rc" 2>/dev/null || echo 1)
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
	else
		failed+=("$t")
	fi
done
echo "suites in $dir${CBCMN_BACKEND:+ on $CBCMN_BACKEND}: $passed passed, ${#failed[@]} failed"
if [ ${#failed[@]} -ne 0 ]; then
	for t in "${failed[@]}"; do
		echo "--- why $t failed (exit status $(cat "$logs/$t.rc" 2>/dev/null || echo '?'); its first reports, the whole output is above):"
		grep -m 30 -E -A3 '\[  (FAILED|ERROR) |\[  ERROR   \]|Sanitizer|runtime error:|killed after|watchdog|Assertion|Segmentation|FATAL' "$logs/$t" || tail -15 "$logs/$t"
	done
	echo "failed: ${failed[*]}"
	exit 1
fi
