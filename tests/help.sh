#!/usr/bin/env bash
# Every tool answers --help with its usage on stdout and status 0, at once
# and without side effects (no install, build or run): chorusrun,
# chorus-info, chorus-trace, the perf tools, the bench programs and scripts.
set -uo pipefail
src=$1; bin=$2
fail=0
check() { # name, command...
  local name=$1 out rc
  shift
  out=$(timeout 5 "$@" --help 2>/dev/null); rc=$?
  # its status is 0, and it printed a usage line or a few lines of explanation
  if [ $rc -ne 0 ] || { ! grep -qi "usage" <<<"$out" && [ "$(wc -l <<<"$out")" -lt 2 ]; }; then
    echo "help: $name --help: status $rc, output: ${out:0:200}"
    fail=1
  fi
}
for t in chorusrun chorus-info chorus-trace allreduce_sweep membw "$bin"/*_perf; do
  t=$(basename "$t")
  check "$t" "$bin/$t"
done
for s in "$src"/bench/*; do
  [ -f "$s" ] && [ -x "$s" ] || continue
  check "bench/$(basename "$s")" "$s"
done
# chorus-info refuses what it does not take, with the usage and status 2.
for args in "--bogus" "--params extra" "--tune abc" "--tune 4 x" "--tune 4 2 x" "--tune 4 2 1 x" "--tune 4 2 1 1000 9"; do
  # shellcheck disable=SC2086
  out=$(timeout 5 "$bin/chorus-info" $args 2>&1); rc=$?
  if [ $rc -ne 2 ] || ! grep -q "usage" <<<"$out"; then
    echo "help: chorus-info $args: status $rc, output: ${out:0:200}"
    fail=1
  fi
done
# LINK_MBPS reaches the model: over 100 Mb/s links a 128 MiB AllReduce
# across 4 hosts takes longer than over the default (a socket's 1 GB/s),
# and the hosts' links are named in the header.
ringAt() { "$bin/chorus-info" --tune "$@" | awk '/^# AllReduce/ { on = 1 } on && $1 == 134217728 { print $2; exit }'; }
slow=$(ringAt 8 4 4 100) fast=$(ringAt 8 4 4)
if ! awk -v s="$slow" -v f="$fast" 'BEGIN { exit !(s > 5 * f && f > 0) }'; then
  echo "help: chorus-info --tune 8 4 4 100: Ring at 128 MiB predicted '$slow' us, without a speed '$fast'"
  fail=1
fi
# A bad NCCL_ALGO is said whatever NCCL_DEBUG is (until 2026-12-06 only the exit status 1 said it).
msg=$(NCCL_ALGO=bogus NCCL_DEBUG= "$bin/chorus-info" --tune 2 2>&1 >/dev/null)
grep -q 'chorus-info --tune: NCCL_ALGO="bogus": unknown name "bogus"' <<<"$msg" || { echo "help: --tune with NCCL_ALGO=bogus said: $msg"; fail=1; }
grep -q ", 100 Mb/s links" <<<"$("$bin/chorus-info" --tune 8 4 4 100)" || { echo "help: --tune 8 4 4 100: no link speed in the header"; fail=1; }
[ $fail = 0 ] && echo "help: passed"
exit $fail
