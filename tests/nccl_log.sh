#!/usr/bin/env bash
# chorus's NCCL_DEBUG lines against NCCL's: tests/nccl_reference.log is an
# NCCL 2.19 INFO log (written from NCCL's formats). Each pattern below must
# match a line of the reference (so that it is NCCL's format), a line of
# chorus's log, and every chorus line that has its key phrase (no near
# misses); every chorus line has NCCL's prefix; at NCCL_DEBUG=WARN the
# version line stands alone.
#   nccl_log.sh BIN_DIR TESTS_DIR
set -uo pipefail
bin=$1 ref=$2/nccl_reference.log
status=0
log=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,ENV "$bin/chorusrun" -n 3 "$bin/test_launch" 2>&1;
      NCCL_DEBUG=INFO "$bin/test_split" 2>&1 | grep "NCCL INFO")
H='^[^ :]+:[0-9]+:[0-9]+ \[[0-9]+\] NCCL INFO '
P='0x[0-9a-f]+'
# key phrase | pattern (a child's COMPLETE line names its call, as NCCL
# 2.30's init.cc prints its job's funcName: a shrink's says ncclCommShrink)
checks=(
  "NCCL version|${H}NCCL version 2\.[0-9]+\.[0-9]+\+[a-z]+-?[0-9.]+\$"
  "set by environment to|${H}[A-Z_]+ set by environment to .*\.\$"
  "Init START|${H}\[Rank [0-9]+\] ncclComm[A-Za-z]+ comm $P rank [0-9]+ nranks [0-9]+ cudaDev [0-9]+ nvmlDev [0-9]+ busId [0-9a-f]+ commId $P - Init START\$"
  "Channel [0-9][0-9]/[0-9][0-9] :|${H}Channel [0-9]{2}/[0-9]{2} :( [0-9]+)+\$"
  "Trees|${H}Trees( \[[0-9]+\] -?[0-9]+/-?[0-9]+/-?[0-9]+->[0-9]+->-?[0-9]+)+\$"
  "Connected all rings|${H}Connected all rings, use ring PXN [01] GDR [01]\$"
  "Connected all trees|${H}Connected all trees\$"
  "coll channels|${H}[0-9]+ coll channels, [0-9]+ collnet channels, [0-9]+ nvls channels, [0-9]+ p2p channels, [0-9]+ p2p channels per peer\$"
  "commId $P - Init COMPLETE|${H}ncclComm[A-Za-z]+ comm $P rank [0-9]+ nranks [0-9]+ cudaDev [0-9]+ nvmlDev [0-9]+ busId [0-9a-f]+ commId $P - Init COMPLETE\$"
  "childCount|${H}ncclComm(Split|Shrink|Grow) comm $P rank [0-9]+ nranks [0-9]+ cudaDev [0-9]+ nvmlDev [0-9]+ busId [0-9a-f]+ parent $P childCount [0-9]+ color -?[0-9]+ key -?[0-9]+ - Init COMPLETE\$"
  "Init timings|${H}Init timings - ncclComm[A-Za-z]+: rank [0-9]+ nranks [0-9]+ total [0-9.]+ \(kernels [0-9.]+, alloc [0-9.]+, bootstrap [0-9.]+, allgathers [0-9.]+, topo [0-9.]+, graphs [0-9.]+, connections [0-9.]+, rest -?[0-9.]+\)\$"
  "Destroy COMPLETE|${H}comm $P rank [0-9]+ nranks [0-9]+ cudaDev [0-9]+ busId [0-9a-f]+ - Destroy COMPLETE\$"
)
for c in "${checks[@]}"; do
  key=${c%%|*} re=${c#*|}
  grep -Eq "$re" "$ref" || { echo "FAILED: no line of the NCCL reference matches the pattern for '$key': $re"; status=1; }
  grep -Eq "$re" <<<"$log" || { echo "FAILED: no chorus line like NCCL's '$key' (pattern $re)"; status=1; }
  bad=$(grep -E "$key" <<<"$log" | grep -Ev "$re" | head -3)
  [ -z "$bad" ] || { echo "FAILED: chorus lines with '$key' that are not NCCL's shape:"; echo "$bad"; status=1; }
done
bad=$(grep -v '^rank [0-9]* of [0-9]*: ok$' <<<"$log" | grep -Ev '^[^ :]+:[0-9]+:[0-9]+ \[[0-9]+\] NCCL (INFO|WARN) ' |
      grep -v '^test_split' | grep -v 'chorusrun:' | head -3)
[ -z "$bad" ] || { echo "FAILED: lines without NCCL's prefix:"; echo "$bad"; status=1; }
# At NCCL_DEBUG=WARN the version line stands alone, as NCCL prints it.
grep -Eq '^NCCL version 2\.[0-9]+\.[0-9]+\+' "$ref" || { echo "FAILED: the reference has no lone version line"; status=1; }
first=$(NCCL_DEBUG=WARN "$bin/chorusrun" -n 1 "$bin/test_launch" 2>&1 | head -1)
[[ $first =~ ^NCCL\ version\ 2\.[0-9]+\.[0-9]+\+chorus-[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  { echo "FAILED: at NCCL_DEBUG=WARN the first line is '$first'"; status=1; }
[ $status -eq 0 ] && echo "nccl_log: passed"
exit $status
