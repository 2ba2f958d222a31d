#!/usr/bin/env bash
# CHORUS_TRACE (src/trace/timeline.h) and tools/chorus-trace: 3 ranks write a
# timeline each at CHORUS_TRACE_LEVEL=steps; each file must be JSON with the
# rank's track, its clock offset, its operations numbered 1, 2, 3, ... in
# time order, and steps inside their operation, one at a time per lane; merge must give one file
# with every rank's track; report must list every collective with all 3
# ranks and a split of its time; a file cut short (a crash) must still load.
set -euo pipefail
bin=$1
dir=$(mktemp -d /tmp/chorus-trace-XXXXXX)
trap 'rm -rf "$dir"' EXIT
CHORUS_TRACE="$dir/t.%r.json" CHORUS_TRACE_LEVEL=steps \
  "$bin/chorusrun" -n 3 "$bin/all_reduce_perf" -b 8 -e 256K -f 64 -n 4 -w 1 -c 1 >"$dir/out" 2>&1 ||
  { cat "$dir/out"; exit 1; }
python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
for r in range(3):
    ev = json.load(open(f"{d}/t.{r}.json"))
    clk = [e for e in ev if e.get("name") == "chorus_clock"]
    assert len(clk) == 1 and clk[0]["args"]["rank"] == r and clk[0]["args"]["nranks"] == 3, clk
    assert all(e["pid"] == r for e in ev), f"rank {r}: an event on another track"
    ops = [e for e in ev if e.get("cat") == "op"]
    # The tool's own exchanges are Send/Recv, numbered per peer; its
    # collectives are the AllReduces it times, numbered 1, 2, 3, ...
    colls = [e for e in ops if e["args"]["op_name"] not in ("Send", "Recv")]
    seqs = [e["args"]["seq"] for e in colls]
    assert seqs and seqs == list(range(1, len(seqs) + 1)), f"rank {r}: operations {seqs}"
    assert all(e["name"].startswith("AllReduce #") for e in colls), colls[0]
    assert all("op" not in e["args"] for e in ops if e not in colls), f"rank {r}: a Send/Recv with a reduction"
    assert all(a["ts"] <= b["ts"] for a, b in zip(ops, ops[1:])), f"rank {r}: operations out of time order"
    assert all(e["args"]["result"] == "success" and e["dur"] >= 0 for e in ops)
    steps = [e for e in ev if e.get("cat") == "step"]
    assert steps, f"rank {r}: no steps"
    key = lambda e: (e["args"]["op_name"], e["args"]["seq"], e["args"].get("peer"))
    span = {key(e): (e["ts"], e["ts"] + e["dur"]) for e in ops}
    for s in steps:
        lo, hi = span[key(s) if s["args"]["op_name"] in ("Send", "Recv") else (s["args"]["op_name"], s["args"]["seq"], None)]
        assert lo - 1 <= s["ts"] and s["ts"] + s["dur"] <= hi + 1, f"rank {r}: step {s} outside its operation {lo}..{hi}"
        assert 0 <= s["args"]["wait_us"] <= s["dur"] + 0.01 and s["args"]["bytes"] > 0, s
    # A lane runs one step at a time: its steps follow each other.
    lanes = {}
    for s in steps:
        lanes.setdefault(s["tid"], []).append(s)
    for tid, ls in lanes.items():
        ls.sort(key=lambda s: s["ts"])
        for a, b in zip(ls, ls[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 0.002, f"rank {r} lane {tid}: {b} starts inside {a}"
print("traces: 3 ranks, operations in order, steps inside them, one at a time per lane")
PY
"$bin/chorus-trace" merge "$dir/all.json" "$dir"/t.[012].json >"$dir/merge.out"
grep -q "rank 2 of 3 (comm 0x" "$dir/merge.out" || { cat "$dir/merge.out"; exit 1; }
python3 -c "
import json, sys
ev = json.load(open('$dir/all.json'))['traceEvents']
assert {e['pid'] for e in ev} == {0, 1, 2}, 'merged tracks'
print('merge: one file, tracks 0, 1, 2')"
"$bin/chorus-trace" report "$dir"/t.[012].json >"$dir/report"
n=$(grep -c '^AllReduce #' "$dir/report" || true)
[ "$n" -ge 3 ] || { cat "$dir/report"; echo "report lists $n AllReduces"; exit 1; }
if awk '/^AllReduce #/ && ($5 != 3 || $0 !~ /rank [012] by/ || $0 !~ /%/) { bad = 1 } END { exit !bad }' "$dir/report"; then
  cat "$dir/report"; echo "a report line without 3 ranks, the last to arrive or the split"; exit 1
fi
grep -q '^stragglers' "$dir/report" || { cat "$dir/report"; exit 1; }
# A file cut short, as a crash leaves it: the last lines gone.
head -n 20 "$dir/t.1.json" >"$dir/cut.json"
"$bin/chorus-trace" report "$dir/cut.json" >/dev/null || { echo "a cut-short file does not load"; exit 1; }
echo "report: $n AllReduces with 3 ranks each, stragglers named; a cut-short file loads"
