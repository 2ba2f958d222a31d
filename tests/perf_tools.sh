#!/usr/bin/env bash
# The perf tools in their launch modes (chorusrun processes; -t threads and
# -g ranks per thread in one process), with validation on: every run must
# exit 0, report 0 wrong elements, and its rows must parse with the regular
# expression nccl-tests log parsers use for the v2.13-2.19 row format (its
# redop optional: hypercube's is empty, as nccl-tests passes "").
set -uo pipefail
bin=$1
corrupt=${2:-} # a preloaded AllReduce that spoils element 0 on rank $PERF_CORRUPT_RANK (tests/perf_corrupt.c)
row='^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +([a-z]+ +)?-?[0-9]+( +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9]+|N/A)){2}$'
fail=0
run() {
  local out
  out=$(timeout 120 "$@" 2>&1)
  local rc=$?
  local rows=$(grep -cE "$row" <<<"$out")
  if [ $rc -ne 0 ] || [ "$rows" -eq 0 ] || ! grep -q '^# Out of bounds values : 0 OK$' <<<"$out" ||
     ! grep -qE '^# Avg bus bandwidth    : [0-9.e+-]+ ?$' <<<"$out" ||
     grep -qvE '^#|^$|ignoring$|^invalid (op|type) .*, defaulting to' <<<"$(grep -vE "$row" <<<"$out")"; then
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
# Several ranks per thread: each dependent step grouped on its own.
run "$bin/hypercube_perf" -g 4 -b 8 -e 64K -f 8 -n 2
run "$bin/chorusrun" -n 2 "$bin/hypercube_perf" -g 2 -b 64 -e 64K -f 32 -n 2
# A forced algorithm that runs only AllReduce (and Broadcast/Reduce): the
# tools' own exchanges must not need another collective.
for a in Tree OneHop Rabenseifner; do
  run env NCCL_ALGO=$a "$bin/chorusrun" -n 3 "$bin/all_reduce_perf" -b 8 -e 8K -f 32 -n 2 -w 1
done
run env NCCL_ALGO=Tree "$bin/broadcast_perf" -t 2 -g 2 -b 8 -e 4K -f 64 -n 2 -w 1
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
check() { # check WHAT COMMAND...: the command must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fail=1; fi
}
# A device line per rank, gathered in every launch mode, as nccl-tests
# prints them; each rank's device is its communicator's (NCCL's Init lines).
devline='^#  Rank +([0-9]+) Group +0 Pid +[0-9]+ on +[^ ]+ device +([0-9]+) \[0000:[0-9a-f]{2}:00\] .+$'
devices_ok() { # devices_ok NRANKS COMMAND...
  local n=$1
  shift
  local out
  out=$(export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT; "$@" -b 8 -e 8 -n 1 2>&1) || return 1
  [ "$(grep -cE "$devline" <<<"$out")" -eq "$n" ] || { echo "$out" | grep "Rank"; return 1; }
  for ((r = 0; r < n; r++)); do
    local dev
    dev=$(grep -E "$devline" <<<"$out" | sed -nE "s/^#  Rank +$r Group .* device +([0-9]+) .*/\1/p")
    grep -qE "rank $r nranks $n cudaDev $dev nvmlDev $dev .* - Init COMPLETE" <<<"$out" ||
      { echo "rank $r: header says device '$dev', the log says: $(grep -E "rank $r nranks $n .*Init COMPLETE" <<<"$out")"; return 1; }
  done
}
check "device lines, chorusrun -n 3" devices_ok 3 "$bin/chorusrun" -n 3 "$bin/all_reduce_perf"
check "device lines, -t 2 -g 2" devices_ok 4 "$bin/all_reduce_perf" -t 2 -g 2
torchrun2() { # two processes with torchrun's variables only: torchrun2 PROGRAM ARGS...
  local port=$((20000 + RANDOM % 20000)) d
  d=$(mktemp -d)
  for r in 0 1; do
    timeout 60 env -u CHORUS_RANK -u CHORUS_NRANKS -u NCCL_COMM_ID RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" >"$d/$r" 2>&1 &
  done
  wait
  cat "$d/0" "$d/1"
  rm -rf "$d"
}
check "device lines, torchrun's variables" devices_ok 2 torchrun2 "$bin/all_reduce_perf"
pmi2() { # two processes with PMI's variables and NCCL_COMM_ID (another MPI's launcher, say): pmi2 PROGRAM ARGS...
  local port=$((20000 + RANDOM % 20000)) d
  d=$(mktemp -d)
  for r in 0 1; do
    timeout 60 env -u CHORUS_RANK -u CHORUS_NRANKS -u RANK -u WORLD_SIZE PMI_RANK=$r PMI_SIZE=2 \
      NCCL_COMM_ID=127.0.0.1:$port "$@" >"$d/$r" 2>&1 &
  done
  wait
  cat "$d/0" "$d/1"
  rm -rf "$d"
}
check "device lines, PMI's variables" devices_ok 2 pmi2 "$bin/all_reduce_perf"
if command -v mpirun >/dev/null && grep -q libmpi <<<"$(ldd "$bin/all_reduce_perf")"; then
  mpi2() { timeout 60 mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp -np 2 "$@"; }
  check "device lines, mpirun -np 2" devices_ok 2 mpi2 "$bin/all_reduce_perf"
fi
# -J writes JSON whose numbers are numbers.
json=$(mktemp -u /tmp/chorus-perf-XXXXXX.json)
json_ok() {
  "$bin/chorusrun" -n 2 "$bin/broadcast_perf" -b 8 -e 64 -f 8 -n 1 -r 1 -J "$json" >/dev/null 2>&1 &&
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
r = d["results"]
assert r and all(isinstance(x["root"], int) and x["root"] == 1 for x in r), r
assert all(isinstance(x[k]["nwrong"], int) for x in r for k in ("out_of_place", "in_place")), r
assert d["out_of_bounds"]["okay"] is True and len(d["config"]["devices"]) == 2, d
assert d["args"][-2:] == ["-J", sys.argv[1]] and d["errors"] == [] and d["start_time"] <= d["end_time"], d
assert any(e.startswith("CHORUS_RANK=") for e in d["env"]), d["env"]' "$json"
}
check "-J output" json_ok
rm -f "$json"*
# Misuse: an unknown flag is named, an allocation that fails says its size.
bad_flag() {
  local out
  out=$("$bin/all_reduce_perf" -q 3 2>&1)
  [ $? -eq 2 ] && grep -q "invalid option '-q'" <<<"$out"
}
check "unknown flag named" bad_flag
no_memory() {
  local out
  out=$(sh -c 'ulimit -v 4000000; exec "$0" -b 8 -e 16G -n 1' "$bin/all_reduce_perf" 2>&1)
  [ $? -eq 2 ] && grep -q "cannot allocate 17179873280 bytes for its send buffer" <<<"$out"
}
check "allocation failure said" no_memory
# nccl-tests' wording: -C names the column cputime, -p says parallel init,
# -T's expiry says "Test timeout".
preamble() {
  local out
  out=$("$bin/all_reduce_perf" -g 2 -b 8 -e 8 -n 1 -w 1 -C 1 -p 1 2>&1)
  grep -qE '^# +size +count +type +redop +root +cputime +algbw' <<<"$out" &&
    grep -q '^# Parallel Init Enabled: threads call into NcclInitRank concurrently' <<<"$out"
}
check "-C and -p wording" preamble
test_timeout() {
  local out
  out=$(timeout 30 "$bin/chorusrun" -n 2 sh -c 'if [ "$CHORUS_RANK" = 1 ]; then kill -STOP $$; fi; exec "$0" -b 8 -e 8 -n 1 -w 1 -T 2' \
    "$bin/all_reduce_perf" 2>/dev/null)
  local rc=$?
  grep -qE 'Test timeout \(2s\) .*common\.c:[0-9]+' <<<"$out" && [ $rc = 4 ] || { echo "rc $rc: $out" | tail -3; return 1; }
}
check "-T expiry worded as nccl-tests, on stdout, exit status 4 (testTimeout)" test_timeout
# An NCCL error: "Test NCCL failure" on stdout, exit status 3 (testNcclError).
nccl_failure() {
  local out
  out=$(timeout 30 "$bin/broadcast_perf" -g 3 -r 3 -b 8 -e 8 -n 1 -w 1 2>/dev/null)
  local rc=$?
  grep -qE "Test NCCL failure .*common\.c:[0-9]+ 'invalid argument" <<<"$out" && [ $rc = 3 ] ||
    { echo "rc $rc: $out" | tail -3; return 1; }
}
check "an NCCL error as nccl-tests: stdout, exit status 3" nccl_failure
# One process with -g ranks asks for no launcher, so nothing is warned.
quiet_g() { ! grep -q "NCCL WARN" <<<"$(NCCL_DEBUG=WARN "$bin/all_reduce_perf" -g 2 -b 8 -e 8 -n 1 2>&1)"; }
check "no WARN in -g mode" quiet_g
# Sizes and counts as nccl-tests has them: each buffer at most maxBytes
# (AllGather's output is the size; 4 ranks of 128 MiB fit in 3 GB of
# address space), -b 0 runs the size 0 and steps on, the error count is
# the job's wrong elements (not times -g), and -a 0 is rank 0's time.
ag_memory() { sh -c 'ulimit -v 3000000; exec "$0" -g 4 -b 128M -e 128M -n 1 -w 0 -c 0' "$bin/all_gather_perf" >/dev/null 2>&1; }
check "all_gather buffers of maxBytes" ag_memory
zero_start() {
  local sizes
  sizes=$("$bin/all_reduce_perf" -g 2 -b 0 -e 512 -i 256 -n 1 -w 0 | grep -E "$row" | awk '{ printf "%s ", $1 }')
  [ "$sizes" = "0 256 512 " ] || { echo "sizes: $sizes"; return 1; }
}
check "-b 0 steps from 0" zero_start
refused() { # refused ARGS...: exit status 255 and a message naming what
  local out
  out=$("$bin/all_reduce_perf" "$@" 2>&1)
  [ $? -eq 255 ] && grep -q "^invalid" <<<"$out" || { echo "$*: $out"; return 1; }
}
for args in "-a 7" "-z 4" "-y 2" "-f -2" "-N -1" "-w x" "-b 1e30" "-e 17179869184G"; do
  # shellcheck disable=SC2086
  check "refused: $args" refused $args
done
min_bw() {
  local out j
  j=$(mktemp -u /tmp/chorus-perf-XXXXXX.json)
  out=$(NCCL_TESTS_MIN_BW=1e9 "$bin/all_reduce_perf" -b 8 -e 8 -n 1 -J "$j" 2>&1)
  local rc=$?
  python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["average_bus_bandwidth"]["okay"] is False' "$j" &&
    rm -f "$j"* && [ $rc -eq 1 ] && grep -qE '^# Avg bus bandwidth    : [0-9.e+-]+ FAILED$' <<<"$out" &&
     grep -qE '^# Avg bus bandwidth    : [0-9.e+-]+ OK$' <<<"$(NCCL_TESTS_MIN_BW=1e-12 "$bin/all_reduce_perf" -g 2 -b 8 -e 8 -n 1)"
}
check "NCCL_TESTS_MIN_BW" min_bw
# nccl-tests' details (until 2026-12-06 each differed): the last line is
# the library's last error or empty, after the '#' that closes the footer;
# -S labels its column "timestamp"; AlltoAll's in-place #wrong is N/A (not
# checked); sendrecv's JSON rows name the -o op as its table does.
nccl_tests_shape() {
  local out j ends
  out=$("$bin/all_reduce_perf" -g 2 -b 8 -e 8 -n 1 -w 0 -S 1 2>&1; echo .) # the dot keeps the last empty line
  ends=$(tail -n 4 <<<"$out" | tr '\n' '|')
  [ "$ends" = "# Collective test concluded: all_reduce_perf|#||.|" ] || { echo "footer ends: $ends"; return 1; }
  grep -qE '^# +size +count .*#wrong +timestamp$' <<<"$out" || { echo "no timestamp label: $out"; return 1; }
  out=$("$bin/alltoall_perf" -g 2 -b 64 -e 64 -n 1 -w 0 2>&1)
  grep -E "$row" <<<"$out" | grep -qE ' [0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +N/A$' || { echo "alltoall: $out"; return 1; }
  j=$(mktemp -u /tmp/chorus-perf-XXXXXX.json)
  "$bin/sendrecv_perf" -g 2 -b 8 -e 8 -n 1 -w 0 -o prod -J "$j" >/dev/null 2>&1
  python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["results"][0]["redop"] == "prod"' "$j" ||
    { rm -f "$j"*; echo "sendrecv's JSON redop is not prod"; return 1; }
  rm -f "$j"*
}
check "nccl-tests' footer, -S, alltoall and sendrecv details" nccl_tests_shape
if [ -n "$corrupt" ]; then
  wrong_g() { # rank 1's in-place input is spoiled inside the group: element 0 wrong on all 4 ranks
    local out
    out=$(PERF_CORRUPT_RANK=1 LD_PRELOAD=$corrupt "$bin/all_reduce_perf" -g 4 -b 8 -e 8 -y 1 -n 1 -w 0 2>&1)
    [ $? -eq 1 ] && [ "$(grep -E "$row" <<<"$out" | awk '{ print $13 }')" = 4 ] &&
      grep -q '^# Out of bounds values : 1 FAILED$' <<<"$out" || { echo "$out" | tail -4; return 1; }
  }
  check "#wrong with -g 4" wrong_g
  footer() { # the failing rank is not the printing one: the footer must still come out, every time
    for i in 1 2 3; do
      local out
      out=$(PERF_CORRUPT_RANK=1 "$bin/chorusrun" -n 2 env LD_PRELOAD="$corrupt" "$bin/all_reduce_perf" -b 8 -e 8 -y 1 \
        -n 1 -w 0 2>&1)
      [ $? -ne 0 ] && grep -qE '^# Out of bounds values : [1-9][0-9]* FAILED$' <<<"$out" &&
        grep -q '^# Avg bus bandwidth' <<<"$out" || { echo "run $i: $out" | tail -4; return 1; }
    done
  }
  check "footer when another rank fails" footer
fi
# hypercube on 3 ranks, as nccl-tests: the header, "skipping" from every
# process, the footer with a nan average, exit 0.
hypercube_skips() {
  local out
  out=$(timeout 60 "$bin/chorusrun" -n 3 "$bin/hypercube_perf" -b 1K -e 1K -n 1 -w 1 2>&1) &&
    [ "$(grep -c '^nRanks 3 is not a power of 2, skipping$' <<<"$out")" = 3 ] && grep -q '#wrong' <<<"$out" &&
    grep -q '^# Avg bus bandwidth    : nan' <<<"$out" || { echo "$out" | tail -5; return 1; }
}
check "hypercube on 3 ranks skips as nccl-tests" hypercube_skips
# -N repeats each type's lines before the next type (nccl-tests' TimeTest).
cycles_per_type() {
  local types
  types=$(timeout 60 "$bin/all_reduce_perf" -g 2 -b 64 -e 128 -f 2 -N 2 -d all -n 1 -w 1 2>&1 | grep -E "$row" |
    awk '{print $3}' | head -5 | tr '\n' ' ')
  [ "$types" = "int8 int8 int8 int8 uint8 " ] || { echo "types in order: $types"; return 1; }
}
check "-N repeats within each type" cycles_per_type
# -u (nccl-tests 2.19): every buffer starts that many elements past its
# alignment (NCCL's COLL lines give the addresses), and every type and op
# still checks out; 3 ranks so that the rings split unaligned blocks.
unaligned() {
  local out addrs
  out=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL timeout 60 "$bin/all_reduce_perf" -b 64 -e 64 -n 1 -w 0 -c 0 -d double \
    -u 3 2>&1)
  addrs=$(grep -oE '(send|recv)buff 0x[0-9a-f]+' <<<"$out" | awk '{print $2}' | sort -u)
  [ -n "$addrs" ] || { echo "no COLL lines: $out" | tail -5; return 1; }
  for a in $addrs; do [ $((a % 4096)) -eq 24 ] || { echo "$a is not 3 doubles past a page"; return 1; }; done
}
check "-u shifts the buffers" unaligned
run "$bin/chorusrun" -n 3 "$bin/all_reduce_perf" -b 8 -e 64K -f 32 -n 1 -w 1 -d all -o all -u 1
run "$bin/all_gather_perf" -g 3 -b 3 -e 3K -f 32 -n 1 -w 0 -d all -u 5
run "$bin/chorusrun" -n 3 "$bin/reduce_scatter_perf" -b 12 -e 12K -f 32 -n 1 -w 0 -d all -o sum -u 7
# -I and -K (nccl-tests 2.19): four more columns per cell (i_min, i_max,
# i_p99, i_cv%), and in the JSON every iteration's time, the slowest
# rank's, with each process's row; min <= p50 <= max, -K's iterations left
# out of the figures; -z 3 times each iteration between its own stamps.
per_iter() {
  local out j rows
  j=$(mktemp -u /tmp/chorus-perf-XXXXXX.json)
  out=$(timeout 60 "$bin/chorusrun" -n 2 "$bin/all_reduce_perf" -b 8 -e 64K -f 64 -n 6 -w 1 -I 1 -K 2 -z "$1" \
    -J "$j" 2>&1)
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float +sum +-1( +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+( +[0-9.]+){4}){2}$' <<<"$out")
  [ "$rows" = 3 ] && grep -qE '^# +size +count .* i_min +i_max +i_p99 +i_cv% +time .* i_cv% *$' <<<"$out" &&
    grep -q '^# Per-Iteration Report: .*; summary skips first 2 iterations $' <<<"$out" ||
    { rm -f "$j"*; echo "rows $rows: $out"; return 1; }
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["config"]["per_iter_timing"] is True and d["config"]["per_iter_skip"] == 2, d["config"]
for r in d["results"]:
    assert r["actual_iterations"] == 6 and r["experiment_name"] == "", r
    for k in ("out_of_place", "in_place"):
        p = r[k + "_per_iter"]
        t, rows = p["times_us"], p["per_process_max_times_us"]
        assert len(t) == 6 and len(rows) == 2 and all(len(x) == 6 for x in rows), p
        assert all(abs(t[i] - max(x[i] for x in rows)) < 1e-3 for i in range(6)), p
        kept = sorted(t[2:])
        assert p["skipped_iterations"] == 2 and abs(p["min_us"] - kept[0]) < 1e-3 and abs(p["max_us"] - kept[-1]) < 1e-3, p
        assert abs(p["p50_us"] - kept[2]) < 1e-3 and p["min_us"] <= p["avg_us"] <= p["max_us"] and p["min_us"] > 0, p' "$j" ||
    { rm -f "$j"*; return 1; }
  rm -f "$j"*
}
check "-I 1 -K 2 per-iteration report" per_iter 0
check "-I 1 -K 2 per-iteration report, -z 3" per_iter 3
# Values nccl-tests refuses are said and dropped, the run goes on.
per_iter_refused() {
  local out
  out=$("$bin/all_reduce_perf" -b 8 -e 8 -n 2 -w 0 -I 2 -K 1 2>&1) &&
    grep -q '^per-iteration timing (-I) only supports 0=off or 1=on. Disabling.$' <<<"$out" &&
    grep -q '^per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.$' <<<"$out" &&
    grep -qE "$row" <<<"$out" || { echo "$out"; return 1; }
  out=$("$bin/all_reduce_perf" -b 8 -e 8 -n 2 -w 0 -I 1 -K 2 2>&1) &&
    grep -q '^per-iteration skip (-K) must be between 0 and 1. Disabling.$' <<<"$out" || { echo "$out"; return 1; }
}
check "-I and -K values refused as nccl-tests" per_iter_refused
# alltoallv (nccl-tests 2.18.5 on): the generated pattern at spread 1 (the
# default), 0.5 and 0 in both launch modes, every type; traffic matrix
# files: non-uniform with zeros, blank lines and values that round down to
# 16 bytes, scaled, a 4x4 one on 3 ranks (its corner) and on 4.
a2av=$(mktemp -d /tmp/chorus-a2av-XXXXXX)
printf '0 100 4000\n250 0 0\n\n 33.9  1024 16\n' >"$a2av/m3"
printf '16 32 48 64\n0 0 0 0\n800 0 8 1600\n1 2 3 4\n' >"$a2av/m4"
for s in 1 0.5 0; do
  run env NCCL_TESTS_ALLTOALLV_SPREAD=$s "$bin/chorusrun" -n 3 "$bin/alltoallv_perf" -b 8 -e 64K -f 8 -n 1 -w 1 -d all
  run env NCCL_TESTS_ALLTOALLV_SPREAD=$s "$bin/alltoallv_perf" -t 2 -g 2 -b 1K -e 256K -f 16 -n 1 -w 1 -d all
done
run env NCCL_TESTS_ALLTOALLV_MATRIX_FILE="$a2av/m3" "$bin/chorusrun" -n 3 "$bin/alltoallv_perf" -b 4K -e 4K -n 1 -d all
run env NCCL_TESTS_ALLTOALLV_MATRIX_FILE="$a2av/m4" "$bin/chorusrun" -n 3 "$bin/alltoallv_perf" -b 2K -e 2K -n 1 -d all
run env NCCL_TESTS_ALLTOALLV_MATRIX_FILE="$a2av/m4" NCCL_TESTS_ALLTOALLV_MATRIX_SCALE=2 "$bin/alltoallv_perf" -t 2 -g 2 \
  -b 8K -e 8K -n 1 -d all
# A row's size is the most any rank sends or receives, its count the
# per-peer count of the sweep (0 with a matrix); the summary gives each
# rank's bytes: m3's rows as 16-byte blocks are 0 96 4000 | 240 0 0 |
# 32 1024 16; 1000 bytes of float on 4 ranks are 60 per peer, 960 a rank,
# spread 0.5 over distances 0-3: 112 192 272 352.
a2av_sizes() {
  local out
  out=$(NCCL_TESTS_ALLTOALLV_MATRIX_FILE="$a2av/m3" NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY=1 timeout 60 \
    "$bin/alltoallv_perf" -g 3 -b 4K -e 4K -n 1 -w 0 2>&1) || { echo "$out"; return 1; }
  grep -qE '^ +4096 +0 +float +none +-1 ' <<<"$out" &&
    [ "$(grep -c '^# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=matrix nranks=3 matrix_dim=3 scale=1.000 time_usec=' \
      <<<"$out")" = 2 ] &&
    [ "$(grep -oE '^#   rank=[0-9] send_bytes=[0-9]+ recv_bytes=[0-9]+' <<<"$out" | sort -u | tr '\n' '|')" = \
      "#   rank=0 send_bytes=4096 recv_bytes=272|#   rank=1 send_bytes=240 recv_bytes=1120|#   rank=2 send_bytes=1072 recv_bytes=4016|" ] ||
    { echo "$out"; return 1; }
  out=$(NCCL_TESTS_ALLTOALLV_SPREAD=0.5 NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY=1 timeout 60 "$bin/alltoallv_perf" -g 4 \
    -b 1000 -e 1000 -n 1 -w 0 2>&1) || { echo "$out"; return 1; }
  grep -qE '^ +928 +60 +float +none +-1 ' <<<"$out" &&
    grep -q '^# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=generated nranks=4 total_bytes=960 spread=0.500 ' <<<"$out" &&
    [ "$(grep -c '^#   rank=[0-3] send_bytes=928 recv_bytes=928 ' <<<"$out")" = 8 ] || { echo "$out"; return 1; }
}
check "alltoallv sizes, counts and NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY" a2av_sizes
# The check reads each block where its source sent it from: rank 2 alone
# reads a matrix whose rank 0 row puts 16 more bytes before rank 2's
# block (every block's size the same in both), and finds it wrong.
a2av_wrong() {
  local out
  printf '16 32 48\n64 0 16\n32 16 0\n' >"$a2av/a"
  printf '16 48 48\n64 0 16\n32 16 0\n' >"$a2av/b"
  out=$(A2AV="$a2av" timeout 60 "$bin/chorusrun" -n 3 sh -c \
    'if [ "$CHORUS_RANK" = 2 ]; then f=b; else f=a; fi; NCCL_TESTS_ALLTOALLV_MATRIX_FILE=$A2AV/$f exec "$0" -b 1K -e 1K -n 1 -w 0' \
    "$bin/alltoallv_perf" 2>&1)
  [ $? = 1 ] && grep -qE '^ +112 +0 +float +none +-1 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[1-9][0-9]* ' <<<"$out" &&
    grep -q '^# Out of bounds values : 1 FAILED$' <<<"$out" || { echo "$out" | tail -8; return 1; }
}
check "alltoallv's check finds a block read from the wrong offset" a2av_wrong
# Traffic matrices nccl-tests refuses, with its messages: no row and no
# footer, " .. Test failure" from each process, exit status 1
# (testInternalError); under chorusrun every rank stops, after rank 0 says why.
a2av_refused() { # a2av_refused FILE-CONTENT MESSAGE COMMAND...: FILE-CONTENT a printf format, or none
  local out
  if [ "$1" != none ]; then printf "$1" >"$a2av/bad"; else rm -f "$a2av/bad"; fi
  out=$(NCCL_TESTS_ALLTOALLV_MATRIX_FILE="$a2av/bad" timeout 60 "${@:3}" -n 1 -w 0 2>/dev/null)
  local rc=$?
  [ $rc = 1 ] && grep -qxF -- "$2" <<<"$out" && ! grep -qE "$row|Out of bounds" <<<"$out" &&
    grep -qE '^ \.\. [^ ]+ pid [0-9]+: Test failure .*common\.c:[0-9]+$' <<<"$out" || { echo "rc $rc: $out" | tail -4; return 1; }
}
f="$a2av/bad"
while IFS='|' read -r content msg; do
  check "alltoallv refuses: $msg" a2av_refused "$content" "${msg//FILE/$f}" "$bin/alltoallv_perf" -g 3 -b 4K -e 4K
done <<'MATRICES'
none|Unable to open alltoallv traffic matrix file FILE.
\n \n|Invalid alltoallv traffic matrix, file FILE is empty.
1 2\n3 4\n5 6\n|Invalid alltoallv traffic matrix, file FILE must be square (got 3x2).
1 2 3\n4 5\n6 7 8\n|Invalid alltoallv traffic matrix column count in file FILE row 1. Expected 3 columns, got 2.
1 2\n3 x4\n|Invalid alltoallv traffic matrix value at row 1 col 1 in file FILE.
1 2,\n3 4\n|Invalid alltoallv traffic matrix value at row 0 col 1 in file FILE.
1 -16\n3 4\n|Invalid alltoallv traffic matrix value at row 0 col 1 in file FILE. Value must be non-negative.
1 1e30\n3 4\n|Invalid alltoallv traffic matrix value at row 0 col 1 in file FILE. Value overflow (value=1e+30 scale=1).
16 16\n16 16\n|Invalid alltoallv traffic matrix, requested nranks (3) is larger than matrix size (2) in file FILE.
MATRICES
check "alltoallv refuses: -e too small" a2av_refused '0 100 4000\n250 0 0\n33.9 1024 16\n' \
  "maxBytes (-e) must be at least 4096 bytes as required by traffic matrix file $f (got 4095). Increase -e." \
  "$bin/alltoallv_perf" -g 3 -b 4095 -e 4095
check "alltoallv refuses: -b and -e differ, chorusrun -n 3" a2av_refused '16 0 0\n0 16 0\n0 0 16\n' \
  "-b and -e options must be set to the same value (e.g., -b 32M -e 32M) when using alltoallv traffic matrix mode." \
  "$bin/chorusrun" -n 3 "$bin/alltoallv_perf" -b 16 -e 32
check "alltoallv refuses: 4 ranks, a 3x3 matrix, -t 2 -g 2" a2av_refused '16 0 0\n0 16 0\n0 0 16\n' \
  "Invalid alltoallv traffic matrix, requested nranks (4) is larger than matrix size (3) in file $f." \
  "$bin/alltoallv_perf" -t 2 -g 2 -b 4K -e 4K
rm -rf "$a2av"
exit $fail
