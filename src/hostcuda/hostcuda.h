/* The host-CUDA shim's internals (include/chorus/host-cuda/cuda_runtime.h):
 * built on chorus's public API only, into libchorus-hostcuda. */
#ifndef CHORUS_HOSTCUDA_H
#define CHORUS_HOSTCUDA_H
#include "cuda_runtime.h"
#include "chorus.h"

/* Makes error this thread's last error (unless it is cudaSuccess) and
 * returns it: every shim function returns through it. */
cudaError_t hcReturn(cudaError_t error);

/* What a chorus stream call's result means to a CUDA caller: a handle
 * chorus does not know (ncclInvalidArgument) is an invalid resource handle,
 * pending work is "not ready", any other failure is the failure of work on
 * the stream. */
cudaError_t hcStreamError(ncclResult_t res);

#endif
