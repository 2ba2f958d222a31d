#!/usr/bin/env bash
# The build tree's programs never look in the current directory for a
# library: a libnccl-profiler.so there (NCCL_PROFILER_PLUGIN unset, so the
# default name is dlopen'ed) is not loaded. Until 2026-12-06 CMake's padded
# run path ("::::") held empty entries, which the loader reads as ".", and
# whatever that file was ran in every rank.
set -uo pipefail
bin=$1 plugins=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$plugins/libnccl-profiler-chorustest6.so" "$dir/libnccl-profiler.so"
cd "$dir" || exit 1
out=$(env -u NCCL_PROFILER_PLUGIN NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT \
  "$bin/chorusrun" -n 2 "$bin/all_reduce_perf" -b 8 -e 8 -n 2 -w 1 2>&1) || { echo "the run failed: $out"; exit 1; }
grep -q "PROFILER/Plugin: Could not find: libnccl-profiler.so" <<<"$out" ||
  { echo "no sign the default plugin name was looked for: $out"; exit 1; }
if grep -q "PROFILER/Plugin: Loaded" <<<"$out"; then
  echo "a libnccl-profiler.so in the current directory was loaded:"
  grep "PROFILER/Plugin" <<<"$out"
  exit 1
fi
echo "runpath: passed"
