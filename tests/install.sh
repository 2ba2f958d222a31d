#!/usr/bin/env bash
# An install that runs: `cmake --install` of this build into a fresh prefix,
# then the installed tools start with nothing set (their run path finds
# PREFIX/lib), chorusrun drives an installed perf tool on 2 ranks, and an
# NCCL program links with -lnccl from PREFIX/lib/chorus-nccl (through
# nccl.pc when pkg-config is there) and runs. Where the CUDA toolkit's
# nccl.h is (cuda_include), a program built against it and a library named
# libnccl.so.2 (a stand-in for NCCL, made here) runs on chorus with
# LD_LIBRARY_PATH=PREFIX/lib/chorus-nccl, as a swap for a real NCCL would.
# An NCCL example builds with the installed host-CUDA shim and runs.
set -euo pipefail
src=$1; build=$2; sanitize=${3:-}; cuda_include=${4:-}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
# not the torch package (component python), which goes into the machine's python whatever the prefix
cmake --install "$build" --prefix "$prefix" --component Unspecified >/dev/null
unset LD_LIBRARY_PATH
fail() { echo "install: $*"; exit 1; }
out=$("$prefix/bin/all_reduce_perf" -b 8 -e 1K -f 4 -c 1 2>&1) || fail "installed all_reduce_perf failed: $out"
grep -q "Avg bus bandwidth" <<<"$out" || fail "installed all_reduce_perf printed no summary: $out"
out=$("$prefix/bin/chorus-info" 2>&1) || fail "installed chorus-info failed: $out"
out=$(timeout 60 "$prefix/bin/chorusrun" -n 2 "$prefix/bin/all_reduce_perf" -b 8 -e 64K -f 8 -c 1 2>&1) ||
  fail "chorusrun -n 2 all_reduce_perf failed: $out"
grep -q "Out of bounds values : 0 OK" <<<"$out" || fail "2-rank installed run reported wrong values: $out"
[ -L "$prefix/lib/chorus-nccl/libnccl.so.2" ] || fail "no libnccl.so.2 in lib/chorus-nccl"
[ -f "$prefix/lib/chorus-cuda/libcuda.so.1" ] || fail "no libcuda.so.1 (the shim's driver part) in lib/chorus-cuda"
[ -x "$prefix/bin/chorus-trace" ] || fail "no bin/chorus-trace"
cat > "$prefix/prog.c" <<'C'
#include <nccl.h>
#include <stdio.h>
int main(void) {
  ncclComm_t comms[2];
  float a[2][3] = {{1, 2, 3}, {10, 20, 30}};
  if (ncclCommInitAll(comms, 2, NULL) != ncclSuccess) return 1;
  ncclGroupStart();
  for (int r = 0; r < 2; r++) ncclAllReduce(a[r], a[r], 3, ncclFloat, ncclSum, comms[r], NULL);
  if (ncclGroupEnd() != ncclSuccess) return 1;
  for (int r = 0; r < 2; r++) ncclCommDestroy(comms[r]);
  printf("%g %g %g\n", a[1][0], a[1][1], a[1][2]);
  return 0;
}
C
san=${sanitize:+-fsanitize=$sanitize}
if command -v pkg-config >/dev/null 2>&1; then
  flags=$(PKG_CONFIG_PATH=$prefix/lib/chorus-nccl pkg-config --cflags --libs nccl)
else
  flags="-I$prefix/include -L$prefix/lib/chorus-nccl -Wl,-rpath,$prefix/lib -lnccl"
fi
cc "$prefix/prog.c" $flags $san -o "$prefix/prog" || fail "cannot link with -lnccl ($flags)"
[ "$("$prefix/prog")" = "11 22 33" ] || fail "the -lnccl program gave $("$prefix/prog" 2>&1)"
# Linked statically, the program sees chorus's public API alone: functions
# of its own that share a name with one inside chorus do not clash.
cat > "$prefix/clash.c" <<'C'
#include <nccl.h>
#include <stdio.h>
void logMessage(const char *s) { printf("%s ", s); }
int paramInt(const char *name) { return name[0]; }
int main(void) {
  int v;
  float x = 2;
  ncclComm_t c;
  if (ncclGetVersion(&v) != ncclSuccess || ncclCommInitAll(&c, 1, NULL) != ncclSuccess) return 1;
  if (ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, c, NULL) != ncclSuccess || ncclCommDestroy(c) != ncclSuccess) return 1;
  logMessage("mine");
  printf("%d %g\n", paramInt("*"), x);
  return 0;
}
C
private=$(sed -n 's/^Libs.private: *//p' "$prefix/lib/pkgconfig/chorus.pc")
# shellcheck disable=SC2086
cc "$prefix/clash.c" -I"$prefix/include" "$prefix/lib/libchorus.a" $private $san -o "$prefix/clash" ||
  fail "a program with its own logMessage and paramInt does not link with libchorus.a"
[ "$("$prefix/clash")" = "mine 42 2" ] || fail "the static program gave $("$prefix/clash" 2>&1)"
# An NCCL documentation example, unchanged, through the installed host-CUDA
# shim (pkg-config chorus-hostcuda, or its flags by hand).
if command -v pkg-config >/dev/null 2>&1; then
  flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs chorus-hostcuda)
else
  flags="-I$prefix/include/chorus/host-cuda -I$prefix/include -L$prefix/lib -lchorus-hostcuda -lchorus"
fi
[ -f "$prefix/include/chorus/host-cuda/cuda_runtime.h" ] || fail "no include/chorus/host-cuda/cuda_runtime.h"
cc "$src/examples/nccl/sendrecv_group.c" $flags -Wl,-rpath,$prefix/lib $san -o "$prefix/sendrecv" ||
  fail "cannot build examples/nccl/sendrecv_group.c with the installed shim ($flags)"
out=$("$prefix/sendrecv" 2>&1) || fail "the shim example failed: $out"
grep -q "Success" <<<"$out" || fail "the shim example: $out"
if [ -n "$cuda_include" ] && [ -z "$sanitize" ]; then
  mkdir "$prefix/standin"
  # libchorus.a needs what the installed chorus.pc says a static link needs
  private=$(sed -n 's/^Libs.private: *//p' "$prefix/lib/pkgconfig/chorus.pc")
  cc -shared -Wl,-soname,libnccl.so.2 -Wl,--whole-archive "$build/lib/libchorus.a" -Wl,--no-whole-archive \
    $private -o "$prefix/standin/libnccl.so.2"
  ln -s libnccl.so.2 "$prefix/standin/libnccl.so"
  cc "$src/tests/test_abi.c" -I "$cuda_include" -L "$prefix/standin" -lnccl -o "$prefix/nccl_prog"
  rm -r "$prefix/standin"
  out=$(LD_LIBRARY_PATH=$prefix/lib/chorus-nccl "$prefix/nccl_prog" 2>&1) ||
    fail "a program linked against libnccl.so.2 failed on chorus's: $out"
  grep -q "passed" <<<"$out" || fail "the libnccl.so.2 program: $out"
fi
echo "install: passed"
