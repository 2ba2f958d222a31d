#!/usr/bin/env bash
# The host-CUDA header from C++: CUDA's C++ overloads (typed cudaMalloc,
# cudaEventCreate with flags, cudaMallocHost with flags) compile and do
# what their C forms do. Until 2026-12-06 cudaEventCreate(&e, flags), which
# NCCL's example profiler plugin calls, did not compile. Skipped without g++.
set -uo pipefail
src=$1 lib=$2
command -v g++ >/dev/null || { echo "hostcuda_cxx: no g++, skipped"; exit 0; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/t.cc" <<'CC'
#include <cstdio>
#include <cstring>
#include "cuda_runtime.h"
#define OK(call) do { if ((call) != cudaSuccess) { std::printf("%s failed\n", #call); return 1; } } while (0)
int main() {
  cudaEvent_t timed, untimed;
  OK(cudaEventCreate(&timed));
  OK(cudaEventCreate(&untimed, cudaEventDisableTiming));
  OK(cudaEventRecord(timed, 0));
  OK(cudaEventRecord(untimed, 0));
  OK(cudaEventSynchronize(untimed));
  float ms;
  if (cudaEventElapsedTime(&ms, untimed, timed) == cudaSuccess) { std::puts("untimed event gave a time"); return 1; }
  int *dev, *host;
  double *pinned;
  OK(cudaMalloc(&dev, 16 * sizeof(int)));
  OK(cudaMallocHost(&host, 16 * sizeof(int), cudaHostAllocDefault));
  OK(cudaMallocHost(&pinned, 4 * sizeof(double)));
  for (int i = 0; i < 16; i++) host[i] = i * 3;
  OK(cudaMemcpy(dev, host, 16 * sizeof(int), cudaMemcpyHostToDevice));
  std::memset(host, 0, 16 * sizeof(int));
  OK(cudaMemcpy(host, dev, 16 * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < 16; i++) if (host[i] != i * 3) { std::puts("copy lost data"); return 1; }
  OK(cudaFree(dev));
  OK(cudaFreeHost(host));
  OK(cudaFreeHost(pinned));
  OK(cudaEventDestroy(timed));
  OK(cudaEventDestroy(untimed));
  std::puts("hostcuda_cxx: passed");
  return 0;
}
CC
g++ -std=c++11 -Wall -Werror -I"$src/include/chorus/host-cuda" -I"$src/include" "$dir/t.cc" -o "$dir/t" \
  -L"$lib" -lchorus-hostcuda -lchorus -Wl,-rpath,"$lib" || { echo "the C++ program did not build"; exit 1; }
"$dir/t" || exit 1

# 16-bit floats from nccl.h alone, as NCCL's nccl.h gives them (cuda_fp16.h,
# cuda_bf16.h), and memcpy from cuda_runtime.h as CUDA's brings it: NCCL's
# own examples (docs/examples/common/src/utils.cc) compile so. Every half
# and bfloat16 goes to float and back unchanged (NaNs stay NaN); floats
# round to nearest even, checked against the compiler's _Float16 (gcc 12
# on x86-64 has it: the check says so where it is missing) and against an
# exact choice between the two neighbours for bfloat16. In C and in C++,
# where doubles and wide integers round once, straight to the nearest.
cat > "$dir/f16.c" <<'CC'
#include <nccl.h>
#include <math.h>
#include <stdio.h>
static unsigned long long rng = 88172645463325252ull;
static float randomFloat(void) { /* xorshift64*: every bit random, ties included */
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  unsigned x = (unsigned)((rng * 2685821657736338717ull) >> 32);
  if (x % 4 == 1) x = (x & ~0x1fffu) | 0x1000u; /* a tie for a normal half */
  if (x % 4 == 2) x = (x & ~0xffffu) | 0x8000u; /* a tie for bfloat16 */
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}
/* bfloat16 nearest to f, ties to even, by exact distances in double */
static unsigned short bf16Reference(float f) {
  unsigned x;
  memcpy(&x, &f, sizeof x);
  unsigned short lo = (unsigned short)(x >> 16), hi = (unsigned short)(lo + 1);
  unsigned a = (unsigned)lo << 16, b = (unsigned)hi << 16;
  float fa, fb;
  memcpy(&fa, &a, sizeof fa);
  memcpy(&fb, &b, sizeof fb);
  double da = fabs((double)f - fa), db = isinf(fb) ? INFINITY : fabs((double)f - fb);
  if (isinf(fb) && (x & 0x7fffffffu) >= 0x7f7f8000u) return hi; /* past the largest bfloat16's halfway point: inf */
  return da < db ? lo : db < da ? hi : (lo & 1) ? hi : lo;
}
int main(void) {
  int bad = 0;
  for (unsigned v = 0; v < 65536; v++) {
    __half h = __ushort_as_half((unsigned short)v);
    float f = __half2float(h);
    unsigned short back = __half_as_ushort(__float2half(f));
    if (isnan(f) ? !isnan(__half2float(__ushort_as_half(back))) : back != v) bad += printf("half %04x -> %g -> %04x\n", v, f, back) > 0;
    __nv_bfloat16 b = __ushort_as_bfloat16((unsigned short)v);
    float g = __bfloat162float(b);
    unsigned short bback = __bfloat16_as_ushort(__float2bfloat16(g));
    if (isnan(g) ? !isnan(__bfloat162float(__ushort_as_bfloat16(bback))) : bback != v) bad += printf("bf16 %04x -> %g -> %04x\n", v, g, bback) > 0;
    if (bad > 5) return 1;
  }
  for (int i = 0; i < 1000000 && bad < 5; i++) {
    float f = randomFloat();
    if (isnan(f)) continue;
    if (i % 2) f = ldexpf(f, -(ilogbf(f) + 10 + i % 20)); /* near the halfs' range: [2^-29, 2^-9) */
    unsigned short got = __bfloat16_as_ushort(__float2bfloat16(f)), want = bf16Reference(f);
    if (got != want) bad += printf("bf16(%a) = %04x, want %04x\n", f, got, want) > 0;
#ifdef __FLT16_MAX__
    _Float16 r = (_Float16)f;
    unsigned short hwant;
    memcpy(&hwant, &r, sizeof hwant);
    if (__half_as_ushort(__float2half(f)) != hwant)
      bad += printf("half(%a) = %04x, want %04x\n", f, __half_as_ushort(__float2half(f)), hwant) > 0;
#else
    if (i == 0) puts("no _Float16 here: half rounding checked by the round trips and edges only");
#endif
  }
  if (__half2float(__float2half(65520.0f)) != INFINITY || __half2float(__float2half(65519.0f)) != 65504.0f ||
      __half2float(__float2half(5.9604644775390625e-8f)) != 5.9604644775390625e-8f)
    bad += puts("half edges") > 0;
  printf("%s\n", bad ? "16-bit floats: FAILED" : "16-bit floats: passed");
  return bad != 0;
}
CC
cat > "$dir/f16.cc" <<'CC'
#include <nccl.h>
#include <cstdio>
#include <cstdlib>
int main() {
  __half h = 1.5f;
  half two = 2.0;
  __nv_bfloat16 b = 3.0f;
  nv_bfloat16 four = 4u;
  __half five = 5L;
  h += two; // 3.5
  b *= four; // 12
  float sum = h + b + five; // host conversions, as CUDA 12's
  int *p = static_cast<int *>(malloc(sizeof(int)));
  memcpy(p, &sum, sizeof(int));
  free(p);
  // From a double straight to the nearest (not through float's nearest,
  // which lands on a tie here and rounds to even, down)
  __half hd = 1.0 + 0x1p-11 + 0x1p-40;
  __nv_bfloat16 bd = 1.0 + 0x1p-8 + 0x1p-40;
  __nv_bfloat16 bi = 16842753; // 2^24 + 2^16 + 1: above the tie between 2^24 + 0 and 2^24 + 2^17
  // doubles below float's range: the smallest bfloat16 of their sign, or 0
  __nv_bfloat16 tiny = 1e-300, negTiny = -1e-300, subnormal = 0x1.8p-133;
  if (float(tiny) != 0.0f || float(negTiny) != 0.0f || float(subnormal) != 0x1p-132f) {
    std::printf("C++ bf16 of tiny doubles: %a %a %a\n", float(tiny), float(negTiny), float(subnormal));
    return 1;
  }
  if (sum != 20.5f || float(hd) != 1.0009765625f || float(bd) != 1.0078125f || float(bi) != 16908288.0f) {
    std::printf("C++ 16-bit floats: sum %g, half(double) %.10g, bf16(double) %.10g, bf16(int) %.10g\n", sum,
                float(hd), float(bd), float(bi));
    return 1;
  }
  return 0;
}
CC
for lang in c cc; do
  comp=gcc
  [ $lang = cc ] && comp=g++
  $comp -O2 -Wall -Werror -I"$src/include/chorus/host-cuda" -I"$src/include" "$dir/f16.$lang" -o "$dir/f16_$lang" -lm ||
    { echo "nccl.h's 16-bit floats did not build ($lang)"; exit 1; }
  "$dir/f16_$lang" || { echo "16-bit floats wrong ($lang)"; exit 1; }
done
echo "hostcuda_cxx: 16-bit floats passed (C and C++)"
