/* The shim's streams are chorus streams: cudaStreamCreate's block with the
 * default stream (CHORUS_STREAM_BLOCKING), cudaStreamNonBlocking's do not. */
#include <stdlib.h>

#include "hostcuda/hostcuda.h"

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  if (stream == NULL || (flags & ~(unsigned)cudaStreamNonBlocking)) return hcReturn(cudaErrorInvalidValue);
  unsigned chorusFlags = (flags & cudaStreamNonBlocking) ? 0 : CHORUS_STREAM_BLOCKING;
  ncclResult_t res = chorusStreamCreateWithFlags(stream, chorusFlags);
  return res == ncclSuccess ? cudaSuccess : hcReturn(cudaErrorMemoryAllocation);
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

/* Priorities order kernels on a GPU; on the host every stream has its own
 * thread, so any priority is accepted. */
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority) {
  (void)priority;
  return cudaStreamCreateWithFlags(stream, flags);
}

static int special(cudaStream_t s) { return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread; }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (special(stream)) return hcReturn(cudaErrorInvalidResourceHandle);
  return hcStreamError(chorusStreamDestroy(stream));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return hcStreamError(chorusStreamSynchronize(stream)); }

cudaError_t cudaStreamQuery(cudaStream_t stream) { return hcStreamError(chorusStreamQuery(stream)); }

struct hostCall {
  cudaHostFn_t fn;
  cudaStreamCallback_t callback;
  cudaStream_t stream;
  void *userData;
};

static void hostCallRun(void *arg, ncclResult_t status) {
  struct hostCall *h = arg;
  if (h->fn) h->fn(h->userData);
  else h->callback(h->stream, status == ncclSuccess ? cudaSuccess : cudaErrorLaunchFailure, h->userData);
  free(h);
}

static cudaError_t launchHostCall(struct hostCall call) {
  struct hostCall *h = malloc(sizeof *h);
  if (h == NULL) return hcReturn(cudaErrorMemoryAllocation);
  *h = call;
  ncclResult_t res = chorusLaunchHostFunc(call.stream, hostCallRun, h);
  if (res != ncclSuccess) free(h);
  return hcStreamError(res);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
  if (fn == NULL) return hcReturn(cudaErrorInvalidValue);
  return launchHostCall((struct hostCall){fn, NULL, stream, userData});
}

cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
                                  unsigned int flags) {
  if (callback == NULL || flags != 0) return hcReturn(cudaErrorInvalidValue);
  return launchHostCall((struct hostCall){NULL, callback, stream, userData});
}
