/* chorus's host-CUDA shim: nccl.h as NCCL's behaves, which includes
 * cuda_runtime.h, cuda_fp16.h and cuda_bf16.h itself, so a program that
 * includes nccl.h alone has cudaStream_t, cudaMalloc, __half and
 * __nv_bfloat16 (and what CUDA's runtime header brings in, memcpy among
 * it). Found first where this directory precedes chorus's include
 * directory on the path, as `pkg-config --cflags chorus-hostcuda` puts it;
 * the API itself is chorus's nccl.h, next on the path. */
#ifndef CHORUS_HOST_CUDA_NCCL_H
#define CHORUS_HOST_CUDA_NCCL_H
#include "cuda_runtime.h"
#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include_next <nccl.h>
#endif
