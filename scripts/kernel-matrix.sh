#!/usr/bin/env bash
# kernel-matrix.sh: run one command under other kernels (Debian's own 6.1
# and 6.12) in QEMU, with the host's root filesystem shared read-only over
# 9p, virtme-style.  docs/OBSERVABILITY.md ("Kernel matrix") says why and
# what was measured.
#
# Usage: scripts/kernel-matrix.sh [--kernel 6.1|6.12|all|VERSION] [--mem 2G]
#                                 [--timeout SECONDS] [--accel tcg|tcg,OPTS|kvm]
#                                 [--noapic] [--append 'KERNEL ARGS'] -- CMD...
#
# For each kernel: download the newest Debian package of that series
# (apt-get download, cached in $KM_CACHE, default build/kernels; nothing is
# fetched again once there), extract it, build a busybox initramfs that
# loads the 9p/virtio modules in dependency order, boot it (-smp 2), and
# run CMD in the current directory as root with the host's ulimit -n and
# ulimit -l.  In the guest: the host's / read-only, /proc, /sys, /dev
# (+ /dev/fd, /dev/pts, /dev/shm), tracefs, debugfs, bpffs, cgroup2, a
# tmpfs on /tmp, /run, /var/tmp and $HOME (= /tmp/home), loopback up.  CMD
# must not write elsewhere (build/ is read-only in the guest), and the
# current directory must not be under /tmp, /run or /var/tmp.
#
# Acceleration: TCG by default (this host's nested KVM cannot run these
# guests), single-threaded (-accel tcg,thread=single, KM_TCG_THREAD): with
# thread=multi 6.12's guest oopsed (int3 in ttwu_do_activate while a
# tracepoint was being patched, text_poke's int3 seen by the other vCPU:
# cross-modified code under multi-threaded TCG); --accel tcg,thread=multi
# asks for it anyway, --accel kvm (-cpu host) where KVM works.  Under TCG
# the command gets CBCMN_TEST_SLOW=8 (KM_TCG_SLOW; a CBCMN_TEST_SLOW of the
# caller wins, kvm gets 1): the tests' hang bounds and watchdogs are that
# many times longer (tests/helpers.h), since a program start or a 9p file
# read takes 100-500 times longer there (copying the checkout's 4 000
# files over 9p: 60-100 s); what they assert is the same.
#
# Kernel command line: --noapic adds noapic (KM_NOAPIC=1 the same, for
# make test-kernels): the guest then routes its interrupts through the
# legacy PIC, not the emulated I/O APIC.  For the early-boot panic a slow
# TCG guest can meet on a loaded host ("IO-APIC + timer doesn't work":
# the timer's check interrupt did not arrive within the kernel's busy
# wait, the 6.1 guest once); it changes no system call and nothing the
# tests look at.  --append adds any other arguments (repeatable).
#
# Exit status: CMD's (the last failing kernel's with several); 77 when a
# guest could not be had at all (no qemu, no busybox, the download refused):
# a skip, with the reason printed, never a pass; 124 when a run outlasted
# --timeout (default 900 s) and was killed.  Each run ends with a line
#   kernel-matrix: KERNEL: exit N in S s (boot B s)
set -u

# The cache: the checkout's build/kernels, wherever the command runs from.
KM_CACHE=${KM_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/build/kernels}
kernels=6.1
mem=2G
tmo=900
accel=${KM_ACCEL:-tcg}
# Added to the guest kernel's command line (see the header).
kargs=
[ "${KM_NOAPIC:-0}" = 1 ] && kargs=" noapic"
# CBCMN_TEST_SLOW under TCG, and TCG's threading (see the header).
KM_TCG_SLOW=${KM_TCG_SLOW:-8}
KM_TCG_THREAD=${KM_TCG_THREAD:-single}
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernels=$2; shift 2 ;;
	--mem) mem=$2; shift 2 ;;
	--timeout) tmo=$2; shift 2 ;;
	--accel) accel=$2; shift 2 ;;
	--noapic) kargs="$kargs noapic"; shift ;;
	--append) kargs="$kargs $2"; shift 2 ;;
	--) shift; break ;;
	-h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;/^set -u/d'; exit 0 ;;
	*) echo "kernel-matrix: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
[ $# -gt 0 ] || { echo "kernel-matrix: no command (usage: $0 [--kernel K] -- CMD...)" >&2; exit 2; }
[ "$kernels" = all ] && kernels="6.1 6.12"
# The guest has its own tmpfs there: the host's files under them are hidden.
case $PWD/ in
/tmp/*|/run/*|/var/tmp/*|/proc/*|/sys/*|/dev/*)
	echo "kernel-matrix: $PWD is not visible in the guest (a tmpfs of its own there): run from elsewhere" >&2
	exit 2 ;;
esac

skip() { echo "kernel-matrix: SKIP: $*" >&2; exit 77; }
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not installed (Debian: qemu-system-x86)"
BUSYBOX=$(command -v busybox) || skip "busybox is not installed (Debian: busybox-static)"
file -L "$BUSYBOX" 2>/dev/null | grep -q 'statically linked' || skip "$BUSYBOX is not static (Debian: busybox-static)"
[ "$(id -u)" = 0 ] || skip "needs root (the shared root and the guest's files are read as root)"
for t in apt-cache apt-get dpkg-deb xz; do
	command -v $t >/dev/null || skip "$t is missing"
done
mkdir -p "$KM_CACHE" || skip "cannot create the cache $KM_CACHE"
KM_CACHE=$(cd "$KM_CACHE" && pwd)

# The newest package of a series: 6.1 is Debian 12's own (6.1.0-N-amd64),
# 6.12 the backport to Debian 12 (6.12.N+deb12-amd64); anything else is an
# exact version (a package linux-image-VERSION).
package_of() {
	local re
	case $1 in
	6.1) re='^linux-image-6\.1\.0-[0-9]+-amd64$' ;;
	6.12) re='^linux-image-6\.12\.[0-9]+\+deb12-amd64$' ;;
	*) echo "linux-image-$1"; return ;;
	esac
	apt-cache search --names-only "^linux-image-$1" 2>/dev/null | cut -d' ' -f1 |
		grep -E "$re" | sort -V | tail -1
}

# Download and extract once; prints the version directory.
fetch_kernel() {
	local pkg=$1 ver=${1#linux-image-} deb
	local dir=$KM_CACHE/x/$ver
	if [ ! -f "$dir/.done" ]; then
		deb=$(ls "$KM_CACHE/${pkg}_"*.deb 2>/dev/null | tail -1)
		if [ -z "$deb" ]; then
			(cd "$KM_CACHE" && apt-get download "$pkg" >&2) || return 1
			deb=$(ls "$KM_CACHE/${pkg}_"*.deb 2>/dev/null | tail -1)
			[ -n "$deb" ] || return 1
		fi
		rm -rf "$dir" && mkdir -p "$dir" && dpkg-deb -x "$deb" "$dir" || return 1
		touch "$dir/.done"
	fi
	echo "$dir"
}

# A module's .ko path in the extracted tree, by name (- and _ are one).
mod_path() {
	local name=${2//-/_} f
	for f in $(find "$1/lib/modules" -name '*.ko*' 2>/dev/null); do
		local b=${f##*/}; b=${b%%.ko*}
		[ "${b//-/_}" = "$name" ] && { echo "$f"; return 0; }
	done
	return 1
}

# Modules named by their .modinfo "depends=", deepest first, each once:
# the package has no modules.dep (depmod runs at install) and no kmod.
# Built-in ones (modules.builtin) need nothing.
resolve_mods() {
	local root=$1 stage=$2; shift 2
	local m
	for m in "$@"; do
		m=${m//-/_}
		case " $ORDER " in *" $m "*) continue ;; esac
		if grep -q "/${m}.ko\$\|/${m//_/-}.ko\$" "$root"/lib/modules/*/modules.builtin; then
			continue
		fi
		local f
		f=$(mod_path "$root" "$m") || { echo "kernel-matrix: module $m not in the package" >&2; return 1; }
		case $f in
		*.xz) xz -dc "$f" > "$stage/$m.ko" ;;
		*.zst) zstd -qdc "$f" > "$stage/$m.ko" ;;
		*) cp "$f" "$stage/$m.ko" ;;
		esac || return 1
		local deps
		deps=$(tr '\0' '\n' < "$stage/$m.ko" | sed -n 's/^depends=//p' | head -1 | tr ',' ' ')
		resolve_mods "$root" "$stage" $deps || return 1
		ORDER="$ORDER $m"
	done
}

write_init() {
	cat > "$1" <<'EOF'
#!/bin/busybox sh
# The guest's PID 1: load 9p, mount the host's root, run /km/cmd, power off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do
	insmod /mod/$m.ko || echo "kernel-matrix: insmod $m failed"
done
R=/newroot
mkdir -p $R /km
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot $R ||
	{ echo "kernel-matrix: cannot mount the host root"; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 km /km ||
	{ echo "kernel-matrix: cannot mount the run dir"; poweroff -f; }
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
ln -sf /proc/self/fd $R/dev/fd
ln -sf /proc/self/fd/0 $R/dev/stdin
ln -sf /proc/self/fd/1 $R/dev/stdout
ln -sf /proc/self/fd/2 $R/dev/stderr
mount -t tmpfs -o mode=1777 shm $R/dev/shm
mount -t tracefs tracefs $R/sys/kernel/tracing
mount -t debugfs debugfs $R/sys/kernel/debug
mount -t bpf bpf $R/sys/fs/bpf
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup
for d in tmp run var/tmp; do mount -t tmpfs -o mode=1777 tmp $R/$d; done
mkdir -p $R/run/km && mount --bind /km $R/run/km
ip link set lo up
echo "kernel-matrix: booted $(uname -r) in $(cut -d' ' -f1 /proc/uptime) s"
# bash: the command line is quoted with printf %q, which dash cannot read.
chroot $R /bin/bash /run/km/cmd
rc=$?
echo $rc > /km/status
sync
echo "kernel-matrix: exit $rc"
poweroff -f
EOF
	chmod +x "$1"
}

run_kernel() {
	local series=$1 pkg dir ver kimg
	shift
	pkg=$(package_of "$series")
	[ -n "$pkg" ] || { echo "kernel-matrix: SKIP: no Debian package for kernel $series (apt-get update?)" >&2; return 77; }
	dir=$(fetch_kernel "$pkg") || { echo "kernel-matrix: SKIP: cannot download or extract $pkg" >&2; return 77; }
	ver=${pkg#linux-image-}
	kimg=$dir/boot/vmlinuz-$ver
	[ -r "$kimg" ] || { echo "kernel-matrix: SKIP: $pkg has no boot/vmlinuz-$ver" >&2; return 77; }

	# The initramfs: busybox, the modules in order, init.  Built once per
	# kernel (the init is small enough to rebuild every time).
	local irfs=$KM_CACHE/initramfs-$ver.cpio.gz stage=$KM_CACHE/stage-$ver
	if [ ! -f "$irfs" ] || [ "$0" -nt "$irfs" ]; then
		rm -rf "$stage" && mkdir -p "$stage"/{bin,mod,proc,sys,dev,newroot}
		cp "$BUSYBOX" "$stage/bin/busybox"
		ORDER=
		resolve_mods "$dir" "$stage/mod" 9p 9pnet_virtio virtio_pci ||
			{ echo "kernel-matrix: SKIP: cannot resolve the 9p modules of $ver" >&2; return 77; }
		# Optional: overlayfs, for the tests that need a filesystem with
		# a flush method (test_iocancel); without it they skip.
		resolve_mods "$dir" "$stage/mod" overlay ||
			echo "kernel-matrix: $ver: no overlay module: the overlayfs tests will skip" >&2
		echo "$ORDER" > "$stage/modules.order"
		write_init "$stage/init"
		(cd "$stage" && find . | "$BUSYBOX" cpio -o -H newc 2>/dev/null | gzip -1) > "$irfs.tmp" && mv "$irfs.tmp" "$irfs"
	fi

	local acc slow=${CBCMN_TEST_SLOW:-$KM_TCG_SLOW}
	case $accel in
	kvm) acc=(-accel kvm -cpu host); slow=${CBCMN_TEST_SLOW:-1} ;;
	tcg) acc=(-accel "tcg,thread=$KM_TCG_THREAD" -cpu max) ;;
	tcg,*) acc=(-accel "$accel" -cpu max) ;;
	*) echo "kernel-matrix: --accel $accel: tcg, tcg,OPTIONS or kvm" >&2; return 2 ;;
	esac
	local run
	run=$(mktemp -d "${TMPDIR:-/tmp}/kernel-matrix.XXXXXX")
	{
		echo "ulimit -n $(ulimit -n) 2>/dev/null; ulimit -l $(ulimit -l) 2>/dev/null"
		printf 'export PATH=%q HOME=/tmp/home TERM=%q KM_KERNEL=%q CBCMN_TEST_SLOW=%q\n' \
			"$PATH" "${TERM:-dumb}" "$ver" "$slow"
		echo "mkdir -p /tmp/home"
		printf 'cd %q || exit 1\n' "$PWD"
		printf '%q ' "$@"; echo
	} > "$run/cmd"
	local t0=$SECONDS
	echo "kernel-matrix: $ver ($accel, -smp 2, $mem${kargs:+,$kargs}): $*"
	timeout -k 10 "$tmo" qemu-system-x86_64 "${acc[@]}" -smp 2 -m "$mem" \
		-display none -no-reboot -nodefaults -serial stdio \
		-kernel "$kimg" -initrd "$irfs" \
		-append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init$kargs" \
		-fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
		-device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
		-fsdev local,id=km,path="$run",security_model=none \
		-device virtio-9p-pci,fsdev=km,mount_tag=km \
		-device virtio-rng-pci </dev/null | tee "$run/console" | sed -u 's/\r$//'
	local qrc=${PIPESTATUS[0]} rc boot
	boot=$(sed -n 's/.*kernel-matrix: booted .* in \([0-9.]*\) s.*/\1/p' "$run/console" | tr -d '\r' | head -1)
	if [ -f "$run/status" ]; then
		rc=$(cat "$run/status")
	elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
		rc=124
		echo "kernel-matrix: $ver: killed after $tmo s"
	else
		rc=1
		echo "kernel-matrix: $ver: the guest ended without a status (qemu exit $qrc)"
	fi
	echo "kernel-matrix: $ver: exit $rc in $((SECONDS - t0)) s (boot ${boot:-?} s)"
	rm -rf "$run"
	return "$rc"
}

failed=0
skipped=0
for k in $kernels; do
	run_kernel "$k" "$@"
	rc=$?
	if [ $rc = 77 ]; then
		skipped=1
	elif [ $rc != 0 ]; then
		failed=$rc
	fi
done
# A failure wins; else a kernel that could not be had makes the whole a
# skip (77), not a pass.
[ $failed != 0 ] && exit $failed
[ $skipped != 0 ] && exit 77
exit 0
