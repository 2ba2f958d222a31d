#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -fsanitize=fuzzer,address,undefined)
# and runs each for a fixed number of executions (CI: ctest "fuzz") or for a
# while (bench/fuzz):
#   fuzz/run.sh [-runs N | -max_total_time S] [BUILD_DIR]
# Exit 77 (ctest: skipped) when clang or its libFuzzer runtime
# (libclang-rt-14-dev) is missing; .ci/run installs both.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=(-runs=20000)
if [ $# -ge 2 ] && [ "${1#-}" != "$1" ]; then limit=("$1=$2"); shift 2; fi
out=${1:-build/fuzz}
cc=$(command -v clang || command -v clang-14 || true)
if [ -z "$cc" ]; then echo "fuzz: no clang here: skipped"; exit 77; fi
mkdir -p "$out/obj"
probe=$out/probe.c
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' >"$probe"
if ! "$cc" -fsanitize=fuzzer "$probe" -o "$out/probe" 2>/dev/null; then
  echo "fuzz: clang has no libFuzzer runtime (libclang-rt-14-dev): skipped"; exit 77
fi
flags=(-g -O1 -std=gnu11 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -DCHORUS_NO_CLONES -Isrc -Iinclude -w)
# The layers the parsers live in (the reduction kernels need clang >= 15's
# _Float16), into one archive; a target that includes a source file defines
# all of its symbols itself, so the linker never takes that one.
objs=() pids=()
for f in $(find src/bootstrap src/core src/topo src/transport -name '*.c' | sort); do
  o=$out/obj/$(echo "${f#src/}" | tr / _).o
  if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ -n "$(find src include -name '*.h' -newer "$o" | head -1)" ]; then
    "$cc" "${flags[@]}" -c "$f" -o "$o" &
    pids+=($!)
  fi
  objs+=("$o")
done
for p in "${pids[@]}"; do wait "$p"; done
rm -f "$out/libchorus-fuzz.a"
ar rcs "$out/libchorus-fuzz.a" "${objs[@]}"
status=0
for t in fuzz/fuzz_*.c; do
  name=$(basename "$t" .c)
  "$cc" "${flags[@]}" -fsanitize=fuzzer "$t" "$out/libchorus-fuzz.a" -lpthread -lm -o "$out/$name"
  corpus=$out/corpus/$name
  mkdir -p "$corpus"
  [ -d "fuzz/corpus/$name" ] && cp -n fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  echo "== $name ${limit[*]}"
  if ! NCCL_DEBUG=NONE "$out/$name" "${limit[@]}" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$out/$name-" "$corpus" >"$out/$name.log" 2>&1; then
    echo "FAILED: $name (log: $out/$name.log)"; tail -40 "$out/$name.log"; status=1
  else
    tail -1 "$out/$name.log"
  fi
done
exit $status
