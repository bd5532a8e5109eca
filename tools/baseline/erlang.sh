#!/bin/sh
# cbcmn-baseline-erlang: starts Erlang/OTP with as many schedulers as
# --workers asks (erl +S N:N, as cbcmn's executors; 2 by default) and runs
# the module cbcmn_baseline (tools/baseline/cbcmn_baseline.erl, compiled by
# the Makefile into build/erl/ beside this script's bin/), which parses the
# arguments and prints one line.
here=$(dirname "$(readlink -f "$0")")
w=2
prev=
for a in "$@"; do
	[ "$prev" = --workers ] && w=$a
	prev=$a
done
case $w in
'' | *[!0-9]* | 0*) echo "cbcmn-baseline-erlang: --workers needs a number from 1 to 1024" >&2; exit 2 ;;
esac
[ "$w" -le 1024 ] || { echo "cbcmn-baseline-erlang: --workers needs a number from 1 to 1024" >&2; exit 2; }
# +P: room for skynet's 1 111 111 processes (the default is 262 144)
exec erl +S "$w:$w" +P 4194304 -noshell -noinput -pa "$here/../erl" -run cbcmn_baseline main -extra "$@"
