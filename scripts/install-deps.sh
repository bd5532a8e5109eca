#!/usr/bin/env bash
# Install every Debian package cbcmn needs (now and for the later layers).
# Idempotent: does nothing when all of them are present.  Used by `make test`,
# by the README's run command and by CI on a fresh machine.
#   scripts/install-deps.sh          install what is missing
#   scripts/install-deps.sh --check  exit 1 if something is missing, install nothing
#   scripts/install-deps.sh --bench  also what `make bench` compares with
#                                    (oneTBB, Go, Erlang/OTP); make test does not need them
set -euo pipefail

PKGS=(
	build-essential make pkg-config
	liburing-dev libbpf-dev bpftool libelf-dev zlib1g-dev
	libnuma-dev numactl
	libcmocka-dev
	libseccomp-dev    # test_backend: io_uring denied as in a container
	clang llvm
	libclang-rt-dev   # libFuzzer and the sanitizer runtimes of clang (make fuzz)
	systemtap-sdt-dev
	libncurses-dev
	libssl-dev openssl   # examples/tls_echo.c and its test's certificate
	wrk               # test_examples loads examples/http_server.c
	gnuplot-nox
	jq
	tmux
	python3
	python3-prometheus-client  # a second parse of the OpenMetrics text (tests/toolrun.h)
	groff-base        # test_man formats every page and wants no warning
	util-linux
)
[ "${1:-}" = "--bench" ] && PKGS+=(libtbb-dev golang-go erlang-base)

missing=()
for p in "${PKGS[@]}"; do
	# dpkg-query prints "install ok installed" only for a fully installed package.
	if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "${1:-}" = "--check" ]; then
	echo "missing packages: ${missing[*]}" >&2
	exit 1
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	else
		echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
		exit 1
	fi
fi

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
