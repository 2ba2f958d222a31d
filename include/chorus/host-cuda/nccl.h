/* chorus's host-CUDA shim: nccl.h as NCCL's behaves, which includes
 * cuda_runtime.h, cuda_fp16.h and cuda_bf16.h itself, so a program that
 * includes nccl.h alone has cudaStream_t, cudaMalloc, __half and
 * __nv_bfloat16 (and memcpy, which CUDA's cuda_fp16.hpp brings in). Not
 * here: cuda_fp8.h, which NCCL's includes in C++. Found first where this directory precedes chorus's include
 * directory on the path, as `pkg-config --cflags chorus-hostcuda` puts it;
 * the API itself is chorus's nccl.h, next on the path. */
#ifndef CHORUS_HOST_CUDA_NCCL_H
#define CHORUS_HOST_CUDA_NCCL_H
#pragma GCC system_header /* include_next is an extension: no -pedantic warning in the user's build */
#include "cuda_runtime.h"
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include_next <nccl.h>
#endif
