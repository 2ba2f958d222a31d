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
msg=$(env -u CHORUS_RANK -u RANK "$bin/test_launch" 2>&1)
grep -q "chorusEnvRank" <<<"$msg" || { echo "no error without a launcher: $msg"; exit 1; }
echo "launch: passed"
