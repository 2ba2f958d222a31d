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
"$dir/t"
