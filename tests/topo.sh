#!/usr/bin/env bash
# Topology (src/topo, chorus-info --topo, NCCL_TOPO_DUMP_FILE): on one host
# the matrix has SELF on its diagonal and SHM elsewhere, SHM turned off
# makes every pair NET over the interface the sockets use, each rank has
# its host, NUMA node and CPUs; the INFO log has a Topology line per rank;
# the dump is XML with the host and every rank. (tests/netns.sh checks NET
# between namespaces.)
set -euo pipefail
bin=$1
dir=$(mktemp -d /tmp/chorus-topo-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "topo: $*"; cat "$dir/out" 2>/dev/null; exit 1; }
"$bin/chorusrun" -n 3 "$bin/chorus-info" --topo >"$dir/out" 2>&1 || fail "chorus-info --topo failed"
for r in 0 1 2; do
  row=$(grep "^rank$r " "$dir/out") || fail "no row for rank $r"
  set -- $row
  for b in 0 1 2; do
    cell=${*:$((b + 2)):1}
    want=$([ $b = $r ] && echo SELF || echo SHM)
    [ "$cell" = "$want" ] || fail "rank $r -> rank $b is '$cell', not $want"
  done
  [ "$(echo "$row" | awk '{ print $5 }')" = "$(hostname -s)" ] || fail "rank $r's host"
  echo "$row" | awk '{ exit !($6 ~ /^-?[0-9]+$/ && $7 ~ /^[0-9]/) }' || fail "rank $r's NUMA node or CPUs"
done
grep -q "^# host $(hostname -s) (hwloc\|^# host $(hostname -s) (sysfs" "$dir/out" || fail "no host line"
NCCL_SHM_DISABLE=1 "$bin/chorusrun" -n 2 "$bin/chorus-info" --topo >"$dir/out" 2>&1 || fail "--topo without SHM failed"
grep -q "^rank0 *SELF *NET/" "$dir/out" || fail "rank 0 -> rank 1 is not NET without SHM"
# NCCL turns shared memory off for 1 alone (shm.cc compares with 1)
NCCL_SHM_DISABLE=2 "$bin/chorusrun" -n 2 "$bin/chorus-info" --topo >"$dir/out" 2>&1 || fail "--topo with NCCL_SHM_DISABLE=2 failed"
grep -q "^rank0 *SELF *SHM" "$dir/out" || fail "NCCL_SHM_DISABLE=2 turned shared memory off"
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT NCCL_TOPO_DUMP_FILE="$dir/topo.xml" \
  "$bin/chorusrun" -n 2 "$bin/all_reduce_perf" -b 8 -e 8 -n 1 >"$dir/out" 2>&1 || fail "the dump run failed"
for r in 0 1; do
  grep -q "\[$r\] NCCL INFO Topology: host .* (hwloc\|sysfs): [0-9]* package.*; rank $r: NUMA -\?[0-9]*, CPUs " "$dir/out" ||
    fail "no Topology line for rank $r"
done
python3 - "$dir/topo.xml" <<'PY' || fail "the dump"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
hosts = root.findall("host")
assert root.tag == "system" and len(hosts) == 1, "one host"
ranks = sorted(int(r.get("id")) for r in root.iter("rank"))
assert ranks == [0, 1], ranks
assert int(hosts[0].get("pus")) >= 1 and hosts[0].findall("cpu"), "CPUs"
PY
echo "topo: matrix, log lines and dump as expected"
