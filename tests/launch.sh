#!/usr/bin/env bash
# chorusrun + chorusCommInitFromEnv: a clean run, and a failing rank that
# must bring the whole job down quickly with its exit status.
set -uo pipefail
bin=$1
out=$("$bin/chorusrun" -n 3 --tag-output "$bin/test_launch") || { echo "clean run failed: $out"; exit 1; }
for r in 0 1 2; do grep -qx "\[$r\] rank $r of 3: ok" <<<"$out" || { echo "rank $r missing: $out"; exit 1; }; done
start=$(date +%s)
"$bin/chorusrun" -n 3 "$bin/test_launch" fail; rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 3 ] || { echo "chorusrun returned $rc, expected 3"; exit 1; }
[ $took -lt 10 ] || { echo "chorusrun took $took s to stop the job"; exit 1; }
# No launcher environment: a clear error, not a hang.
msg=$(env -u CHORUS_RANK -u RANK NCCL_DEBUG=WARN "$bin/test_launch" 2>&1)
grep -q "no launcher environment: set CHORUS_RANK" <<<"$msg" || { echo "no error without a launcher: $msg"; exit 1; }
# A perf tool run alone asks whether a launcher is there: no WARN for that.
msg=$(env -u CHORUS_RANK -u RANK NCCL_DEBUG=WARN "$bin/all_reduce_perf" -b 8 -e 8 2>&1) || { echo "all_reduce_perf alone failed: $msg"; exit 1; }
! grep -q "NCCL WARN" <<<"$msg" || { echo "all_reduce_perf alone warned: $msg"; exit 1; }
echo "launch: passed"
