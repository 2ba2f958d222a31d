/* The shim's errors: CUDA's names and texts, and the per-thread last error. */
#include <stddef.h>

#include "hostcuda/hostcuda.h"

static _Thread_local cudaError_t lastError = cudaSuccess;

cudaError_t hcReturn(cudaError_t error) {
  if (error != cudaSuccess) lastError = error;
  return error;
}

cudaError_t hcStreamError(ncclResult_t res) {
  switch (res) {
  case ncclSuccess: return cudaSuccess;
  case ncclInProgress: return cudaErrorNotReady;
  case ncclInvalidArgument: return hcReturn(cudaErrorInvalidResourceHandle);
  default: return hcReturn(cudaErrorLaunchFailure);
  }
}

static const struct {
  cudaError_t code;
  const char *name, *text;
} errorTable[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorNoDevice, "cudaErrorNoDevice",
     "no CUDA-capable device is detected (CHORUS_HOST_DEVICES or CUDA_VISIBLE_DEVICES names none)"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure",
     "unspecified launch failure: an NCCL operation on the stream failed (ncclGetLastError and "
     "ncclCommGetAsyncError say why)"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

static int errorIndex(cudaError_t error) {
  for (size_t i = 0; i < sizeof errorTable / sizeof errorTable[0]; i++)
    if (errorTable[i].code == error) return (int)i;
  return -1;
}

const char *cudaGetErrorString(cudaError_t error) {
  int i = errorIndex(error);
  return i < 0 ? "unrecognized error code" : errorTable[i].text;
}

const char *cudaGetErrorName(cudaError_t error) {
  int i = errorIndex(error);
  return i < 0 ? "unrecognized error code" : errorTable[i].name; /* as CUDA's, name and string alike */
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = lastError;
  lastError = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return lastError; }
