#!/bin/sh
# phase-time.sh NAME CMD [ARG...]: run CMD, then print how long it took
# ("=== phase NAME: Ns"), so that make test's log shows where its
# 20 minutes go.  Exits with CMD's status.
name=$1
shift
start=$(date +%s)
"$@"
rc=$?
echo "=== phase $name: $(($(date +%s) - start))s${rc:+ (exit $rc)}" | sed 's/ (exit 0)$//'
exit $rc
