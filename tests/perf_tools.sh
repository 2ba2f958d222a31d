#!/usr/bin/env bash
# The perf tools in their launch modes (chorusrun processes; -t threads and
# -g ranks per thread in one process), with validation on: every run must
# exit 0, report 0 wrong elements, and its rows must parse with the regular
# expression nccl-tests log parsers use for the v2.13-2.17 row format.
set -uo pipefail
bin=$1
row='^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+ +-?[0-9]+( +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9]+|N/A)){2}$'
fail=0
run() {
  local out
  out=$(timeout 120 "$@" 2>&1)
  local rc=$?
  local rows=$(grep -cE "$row" <<<"$out")
  if [ $rc -ne 0 ] || [ "$rows" -eq 0 ] || ! grep -q '^# Out of bounds values : 0 OK$' <<<"$out" ||
     ! grep -qE '^# Avg bus bandwidth    : [0-9.e+-]+ ?$' <<<"$out" ||
     grep -vE "$row" <<<"$out" | grep -qvE '^#|^$|ignoring$|^invalid (op|type) .*, defaulting to'; then
    echo "FAILED (rc $rc, $rows rows): $*"
    echo "$out" | tail -20
    fail=1
  else
    echo "ok ($rows rows): $*"
  fi
}
for t in all_reduce all_gather broadcast reduce reduce_scatter sendrecv; do
  run "$bin/chorusrun" -n 3 "$bin/${t}_perf" -b 8 -e 64K -f 8 -n 3 -w 1
  run "$bin/${t}_perf" -t 2 -g 2 -b 1K -e 256K -f 16 -n 2 -w 1
done
run "$bin/chorusrun" -n 4 "$bin/hypercube_perf" -b 64 -e 64K -f 32 -n 2
for t in alltoall gather scatter; do
  run "$bin/chorusrun" -n 3 "$bin/${t}_perf" -b 8 -e 256K -f 8 -n 2 -r -1 -d all
  run "$bin/${t}_perf" -t 2 -g 2 -b 1K -e 256K -f 16 -n 2 -w 1
done
run "$bin/all_reduce_perf" -g 3 -b 8 -e 4K -f 8 -n 1 -w 0 -d all -o all
run "$bin/reduce_scatter_perf" -g 2 -b 64 -e 4K -f 8 -n 1 -w 0 -d all -o all
run "$bin/broadcast_perf" -g 3 -b 8 -e 4K -f 8 -n 1 -r -1 -y 1 -z 1
run "$bin/reduce_perf" -g 3 -b 8 -e 4K -f 8 -n 1 -r -1 -o mulsum -m 2
run "$bin/chorusrun" -n 2 "$bin/all_gather_perf" -g 2 -b 8 -e 1M -f 64 -n 2 -a 3 -C 1
# A wrong -d falls back to float with a message, as nccl-tests does.
run "$bin/all_reduce_perf" -g 2 -b 8 -e 8 -d nosuchtype
exit $fail
