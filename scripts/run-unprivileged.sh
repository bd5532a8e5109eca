#!/usr/bin/env bash
# Run release suites as a user without privilege, with a distribution's
# default limits: what a developer who is not root meets.
#
#   scripts/run-unprivileged.sh [BUILD_DIR [SUITE ...]]
#
# BUILD_DIR defaults to build (its tests/, bin/, lib/ must be built); no
# SUITE: every test_* of BUILD_DIR/tests.  As root, the suites run as
# UNPRIV_USER (nobody), group UNPRIV_GROUP (its own: nogroup), no supplementary
# groups, no capabilities (setpriv: a uid change from 0 drops them all),
# a fresh environment (HOME is that user's, /nonexistent for nobody) and
# the limits of a Debian 12 login: RLIMIT_MEMLOCK 8192 KiB (soft and
# hard), RLIMIT_NOFILE soft 1024 (hard: this machine's, at most 524288,
# systemd's default).  They run from a fresh directory under /tmp owned
# by that user, holding a copy of the checkout (without build/ and .git/:
# suites find fixtures and scripts above their binary) and of the
# build's tests/, bin/ and lib/ (a checkout in /root, mode 700, is out of
# its reach, and a user's build directory is its own); it is removed at
# the end, or at once on ^C or SIGTERM, which end the suite running
# (UNPRIV_TMP: another place than /tmp; one the user cannot
# execute from, mounted noexec, is a skip that says so).  Not root: the
# suites run as the current user with the same limits (a hard limit lower
# than these, which only root could raise, is kept).
#
# Suites that need root (the BPF view) must skip saying why; any failure
# fails this script (exit 1).  docs/STATUS.md "Unprivileged users".
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
build=${1:-build}
[ $# -gt 0 ] && shift
case $build in /*) ;; *) build=$src/$build ;; esac
user=${UNPRIV_USER:-nobody}
group=${UNPRIV_GROUP:-$(id -gn "$user" 2>/dev/null)} # nogroup on Debian, nobody on Fedora
memlock_kib=8192
nofile_soft=1024
nofile_hard=$(ulimit -Hn)
[ "$nofile_hard" = unlimited ] || [ "$nofile_hard" -gt 524288 ] && nofile_hard=524288
[ "$nofile_hard" -lt "$nofile_soft" ] && nofile_soft=$nofile_hard # a soft limit is at most the hard

if [ ! -d "$build/tests" ]; then
	echo "run-unprivileged: $build/tests is not built (make tests)" >&2
	exit 1
fi
if [ $# -eq 0 ]; then
	set -- $(cd "$build/tests" && ls test_* 2>/dev/null | grep -v '\.d$')
fi

# Without -H or -S, bash's ulimit sets both limits (in whichever order works).
limits="ulimit -l $memlock_kib && ulimit -n $nofile_hard && ulimit -S -n $nofile_soft"

if [ "$(id -u)" -ne 0 ]; then
	# A user that is not root cannot raise a hard limit: where its own is
	# lower (64 KiB of RLIMIT_MEMLOCK on older distributions and in
	# containers), the suites run under that one.
	memlock_hard=$(ulimit -Hl)
	if [ "$memlock_hard" != unlimited ] && [ "$memlock_hard" -lt "$memlock_kib" ]; then
		memlock_kib=$memlock_hard
		limits="ulimit -l $memlock_kib && ulimit -n $nofile_hard && ulimit -S -n $nofile_soft"
	fi
	echo "=== run-unprivileged: not root: as $(id -un 2>/dev/null) itself, memlock ${memlock_kib} KiB, nofile $nofile_soft/$nofile_hard"
	exec bash -c "$limits && exec \"\$0\" \"\$@\"" "$here/run-tests.sh" "$build/tests" "$@"
fi

if ! getent passwd "$user" >/dev/null || [ -z "$group" ] || ! getent group "$group" >/dev/null; then
	echo "run-unprivileged: no user $user or group $group here (UNPRIV_USER, UNPRIV_GROUP)" >&2
	exit 1
fi
command -v setpriv >/dev/null || { echo "run-unprivileged: setpriv (util-linux) is missing" >&2; exit 1; }

dir=$(mktemp -d "${UNPRIV_TMP:-/tmp}/cbcmn-unpriv.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM # through the EXIT trap
# The checkout (suites find fixtures and scripts above their binary), then
# the build's binaries at the same place under it.
tar -C "$src" --exclude=./build --exclude=./.git -cf - . | tar -C "$dir" -xf - || exit 1
rel=${build#$src/}
case $rel in /*) rel=build ;; esac # a build outside the checkout lands in build/
mkdir -p "$dir/$rel"
for d in tests bin lib examples; do
	[ -d "$build/$d" ] && cp -a "$build/$d" "$dir/$rel/"
done
find "$dir/$rel" -name '*.d' -delete
chown -R "$user:$group" "$dir"
chmod 755 "$dir"

# A /tmp mounted noexec (UNPRIV_TMP picks another place): nothing can run.
cp /bin/true "$dir/.exec-probe" && chown "$user:$group" "$dir/.exec-probe"
if ! setpriv --reuid="$user" --regid="$group" --clear-groups --reset-env "$dir/.exec-probe"; then
	echo "=== run-unprivileged: SKIPPED: $user cannot execute from $dir (mounted noexec? set UNPRIV_TMP)"
	exit 0
fi
echo "=== run-unprivileged: as $user:$group (no capabilities), memlock ${memlock_kib} KiB, nofile $nofile_soft/$nofile_hard, from $dir"
cd "$dir" || exit 1
# The per-suite timeout survives --reset-env only if passed again.  In
# the background, waited for: a ^C or a TERM reaches only this shell (each
# suite runs under run-tests.sh's timeout, in a process group of its own
# that a terminal does not signal, and a trap waits for a foreground job
# to end), and the trap ends run-tests.sh (it becomes its pid: the execs)
# and the timeout it waits on, which passes the signal on to the suite.
bash -c "$limits && exec setpriv --reuid=\"$user\" --regid=\"$group\" --clear-groups --reset-env \
	env T_SUITE_TIMEOUT=\"${T_SUITE_TIMEOUT:-600}\" T_LANES=\"${T_LANES:-1}\" scripts/run-tests.sh $rel/tests $*" &
inner=$!
stop_suites() {
	kill -STOP "$inner" 2>/dev/null # no next suite meanwhile
	local kids
	kids=$(pgrep -P "$inner")
	[ -n "$kids" ] && kill -TERM $kids 2>/dev/null
	kill -TERM "$inner" 2>/dev/null
	kill -CONT "$inner" 2>/dev/null
	wait "$inner"
}
trap 'stop_suites; exit 130' INT TERM # through the EXIT trap
wait "$inner"
