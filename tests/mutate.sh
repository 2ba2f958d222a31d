#!/usr/bin/env bash
# Mutation testing: plants each mutant of tests/mutants.txt (one small,
# realistic bug at a time) in a copy of the tree, rebuilds, runs the C suite
# against it and says whether a failing check killed it, and how fast.
#
#   tests/mutate.sh [-t SECONDS] [-k SECONDS] [-d DIR] [-f LIST] [-l] [PATTERN...]
#     -t  per-test deadline of the runs (default 20): a mutant that makes a
#         test hang costs this much, not the suite's normal limits; and
#         CHORUS_TIMEOUT is 5 (unless set) so that a deadlock fails a call
#     -k  a kill counts when the failing test failed within this (default 10)
#     -d  work directory (default /tmp/chorus-mutate); reused between runs
#     -f  the mutant list (default tests/mutants.txt)
#     -l  list the mutants and check that each still applies, run nothing
#     PATTERN  only the mutants whose name contains one of these
#
# Every test takes part except the torch suite, the namespace tests (they
# need privileges), fuzz (not a check of behaviour), mutants_apply (a
# planted mutant's lines are gone, so it fails for every one), the memcheck runs
# (the same suites again, slower under valgrind), and any test whose
# unmutated run takes more than half the deadline or runs into it (named at
# the start).
# Quick tests run first (under 1.5 s unmutated), then those under 5 s, then
# the others, each batch stopping at the first failure. A mutant is "killed"
# when a test fails by a check (its exit status or a signal) within -k
# seconds, "slow" when the quickest such test took longer, "timeout" when
# only deadlines caught it, "survived" when everything passed. Exit status
# 0 only when every mutant was killed.
#
# The list format (tests/mutants.txt): a mutant starts with "== name: what
# it models", then the file, then the lines it replaces ("-" lines, which
# must occur exactly once in the file) and their replacement ("+" lines).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deadline=20 killWithin=10 work=/tmp/chorus-mutate listOnly=0 list=$root/tests/mutants.txt
while getopts "t:k:d:f:lh" o; do
  case $o in
    t) deadline=$OPTARG ;;
    k) killWithin=$OPTARG ;;
    d) work=$OPTARG ;;
    f) list=$(cd "$(dirname "$OPTARG")" && pwd)/$(basename "$OPTARG") ;;
    l) listOnly=1 ;;
    *) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
patterns=("$@")

# The mutant list as NUL-free records, via python3 (exact, multi-line
# replacement): apply NAME FILE, or list.
mutantTool() {
  python3 - "$list" "$@" <<'PY'
import sys
path, cmd = sys.argv[1], sys.argv[2]
mutants, cur = [], None
for n, line in enumerate(open(path).read().split("\n"), 1):
    if line.startswith("== "):
        name, _, what = line[3:].partition(":")
        cur = {"name": name.strip(), "what": what.strip(), "file": None, "old": [], "new": [], "line": n}
        mutants.append(cur)
    elif cur is None or line.startswith("#") or (not line.strip() and cur["file"] is None):
        continue
    elif cur["file"] is None:
        cur["file"] = line.strip()
    elif line.startswith("-"):
        cur["old"].append(line[1:])
    elif line.startswith("+"):
        cur["new"].append(line[1:])
    elif line.strip():
        sys.exit(f"{path}:{n}: expected a '-' or '+' line in mutant {cur['name']}")
names = [m["name"] for m in mutants]
dups = {x for x in names if names.count(x) > 1}
if dups:
    sys.exit(f"{path}: duplicate mutant names: {sorted(dups)}")
def check(m, tree):
    if not m["file"] or not m["old"]:
        return "has no file or no '-' lines"
    try:
        text = open(f"{tree}/{m['file']}").read()
    except OSError as e:
        return f"{m['file']}: {e.strerror}"
    k = text.count("\n".join(m["old"]))
    return None if k == 1 else f"its '-' lines occur {k} times in {m['file']} (must be once)"
if cmd == "list":  # name<TAB>file<TAB>what, or exit 1 naming the stale ones
    tree, bad = sys.argv[3], 0
    for m in mutants:
        err = check(m, tree)
        if err:
            print(f"{path}:{m['line']}: mutant {m['name']} {err}", file=sys.stderr)
            bad = 1
        print(f"{m['name']}\t{m['file']}\t{m['what']}")
    sys.exit(bad)
if cmd == "apply":
    tree, name = sys.argv[3], sys.argv[4]
    m = next(x for x in mutants if x["name"] == name)
    p = f"{tree}/{m['file']}"
    text = open(p).read()
    open(p, "w").write(text.replace("\n".join(m["old"]), "\n".join(m["new"]), 1))
PY
}

listing=$(mutantTool list "$root") || { echo "mutate: fix the list first" >&2; exit 1; }
selected=()
while IFS=$'\t' read -r name file what; do
  keep=$((${#patterns[@]} == 0))
  for p in "${patterns[@]}"; do [[ $name == *"$p"* ]] && keep=1; done
  [ "$keep" = 1 ] && selected+=("$name")
  [ "$listOnly" = 1 ] && [ "$keep" = 1 ] && printf '%-28s %-26s %s\n' "$name" "$file" "$what"
done <<<"$listing"
[ "$listOnly" = 1 ] && { echo "${#selected[@]} mutants"; exit 0; }
[ ${#selected[@]} -gt 0 ] || { echo "mutate: no mutant matches" >&2; exit 2; }

# A copy of the tree as it is now (tracked and untracked files), built once.
src=$work/src build=$work/build
rm -rf "$src" # files deleted from the tree must go from the copy too (the build is kept)
mkdir -p "$src"
# Extracted with fresh times (-m), so that make sees every file that changed.
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$src" -mxf -
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCHORUS_PYTHON3=CHORUS_PYTHON3-NOTFOUND \
  -DCHORUS_DEADLINE_CAP="$deadline" >/dev/null
jobs=$(nproc)
cmake --build "$build" -j"$jobs" >/dev/null

# ctest's summary lines: "  3/95 Test  #5: name ....***Failed    0.52 sec".
# Prints "name seconds status" per test.
# Skipped tests (a missing tool) count as passed.
results() {
  sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.*[ *]*([A-Za-z][^0-9]*[A-Za-z):]) +([0-9.]+) sec.*/\1 \3 \2/p' "$1" |
    tr -s ' ' | sed -e 's/ $//' -e 's/ Skipped$/ Passed/'
}
exclude='^(torch_.*|netns_.*|memcheck_.*|fuzz|mutants_apply)$'
runSuite() { # log, ctest args...
  local log=$1
  shift
  # A deadlock becomes a failed call (ncclTimeout) within seconds, in every
  # test that does not set CHORUS_TIMEOUT itself.
  (cd "$build" && CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-5} ctest -j2 --timeout $((deadline + 10)) "$@") >"$log" 2>&1 || true
}

echo "mutate: unmutated run (deadline ${deadline} s per test)"
runSuite "$work/baseline.log" -E "$exclude"
quick=() medium=() slow=() skipped=() failedBase=()
while read -r name sec status; do
  if awk -v s="$sec" -v d="$deadline" 'BEGIN{exit !(s > d / 2)}'; then skipped+=("$name(${sec}s)")
  elif [ "$status" != Passed ]; then failedBase+=("$name ($status)")
  elif awk -v s="$sec" 'BEGIN{exit !(s < 1.5)}'; then quick+=("$name")
  elif awk -v s="$sec" 'BEGIN{exit !(s < 5)}'; then medium+=("$name")
  else slow+=("$name"); fi
done < <(results "$work/baseline.log")
if [ ${#failedBase[@]} -gt 0 ]; then
  echo "mutate: the unmutated tree fails: ${failedBase[*]} (see $work/baseline.log)" >&2
  exit 1
fi
[ ${#skipped[@]} -eq 0 ] || echo "mutate: too slow for a ${deadline} s deadline, left out: ${skipped[*]}"
echo "mutate: ${#quick[@]} quick tests (under 1.5 s), then ${#medium[@]} under 5 s, then ${#slow[@]} others"
join() { local IFS='|'; echo "^($*)\$"; }

killed=0 total=0 notKilled=()
for name in "${selected[@]}"; do
  total=$((total + 1))
  verdict=""
  file=$(awk -F'\t' -v n="$name" '$1 == n {print $2}' <<<"$listing")
  # The copy's own file, kept to put back (the tree may change meanwhile).
  cp "$src/$file" "$work/pristine"
  restore() { cp "$work/pristine" "$src/$file"; }
  trap restore EXIT # never leave a mutant in the copy
  mutantTool apply "$src" "$name"
  t0=$(date +%s.%N)
  if ! cmake --build "$build" -j"$jobs" >"$work/build.log" 2>&1; then
    echo "BROKEN    $name: does not build (see $work/build.log)"
    notKilled+=("$name(does not build)")
    restore
    continue
  fi
  log=$work/run-${name//\//_}.log
  : >"$log"
  for batch in quick medium slow; do
    declare -n tests=$batch
    [ ${#tests[@]} -gt 0 ] || continue
    runSuite "$log.$batch" --stop-on-failure -R "$(join "${tests[@]}")"
    cat "$log.$batch" >>"$log"
    rm -f "$log.$batch"
    grep -qv ' Passed$' <<<"$(results "$log")" && break
  done
  wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
  # The killer: the quickest test that failed a check; one that ran into its
  # deadline (ctest's Timeout, or the harness's own at the deadline) is not.
  first=$(results "$log" | awk -v d="$deadline" '$3 != "Passed" && $3 !~ /Timeout/ && $2 < d * 0.95' | sort -k2,2g | sed -n 1p)
  timedOut=$(results "$log" | awk -v d="$deadline" '$3 != "Passed" && ($3 ~ /Timeout/ || $2 >= d * 0.95) {print $1; exit}')
  if [ -n "$first" ]; then
    read -r tname tsec tstatus <<<"$first"
    if awk -v s="$tsec" -v k="$killWithin" 'BEGIN{exit !(s <= k)}'; then
      verdict=killed
      killed=$((killed + 1))
    else
      verdict=slow
      notKilled+=("$name(slow)")
    fi
    printf '%-9s %-28s by %s (%s, %s s; %s s with the build)\n' "$verdict" "$name" "$tname" "$tstatus" "$tsec" "$wall"
  elif [ -n "$timedOut" ]; then
    printf '%-9s %-28s only %s hit its deadline\n' timeout "$name" "$timedOut"
    notKilled+=("$name(timeout)")
  else
    printf '%-9s %-28s every test passed\n' SURVIVED "$name"
    notKilled+=("$name(survived)")
  fi
  [ "$verdict" = killed ] && rm -f "$log"
  restore
done
cmake --build "$build" -j"$jobs" >/dev/null 2>&1 || true
echo "mutate: $killed of $total mutants killed by a failing check within ${killWithin} s"
[ ${#notKilled[@]} -eq 0 ] || { echo "mutate: not killed: ${notKilled[*]}"; exit 1; }
