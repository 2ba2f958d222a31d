/* chorus's host-CUDA shim: the part of the CUDA runtime API that NCCL
 * programs call on the host (devices, memory, copies, streams, events,
 * errors), implemented on host memory by libchorus-hostcuda, so an NCCL
 * program runs on chorus unchanged:
 *
 *   cc prog.c $(pkg-config --cflags --libs chorus-hostcuda)
 *
 * Opt-in: this directory is on the include path only when asked for, and
 * the functions live in their own library, never in libchorus, so a real
 * CUDA toolkit is never shadowed. Names and error values are CUDA's; the
 * structures are not CUDA's binary layout (this is a source-level shim).
 *
 * The model: a "device" is a number (one per rank, as NCCL programs pick
 * them); memory is host memory; streams are chorus streams, so NCCL calls on
 * them are asynchronous as on a GPU. A stream belongs to the device current
 * when it was made. Streams from cudaStreamCreate block with their device's
 * default stream as CUDA's legacy default stream does: work on stream 0
 * (cudaMemcpy, cudaMemset, an NCCL call with stream 0) first waits for what
 * was issued on them. cudaFree, cudaFreeHost and cudaDeviceSynchronize wait
 * for every stream of the current device. An NCCL operation that fails on a
 * stream makes cudaStreamSynchronize (and cudaDeviceSynchronize, while the
 * stream holds it) return cudaErrorLaunchFailure (ncclGetLastError and
 * ncclCommGetAsyncError say why); copies still copy.
 *
 * Device count: CHORUS_HOST_DEVICES, else the number of entries of
 * CUDA_VISIBLE_DEVICES, else 8. */
#ifndef CHORUS_HOST_CUDA_RUNTIME_H
#define CHORUS_HOST_CUDA_RUNTIME_H
/* What CUDA's own header defines, so nccl.h and programs that test for a
 * CUDA runtime see one. */
#define __CUDA_RUNTIME_H__
#define CHORUS_HOST_CUDA 1
#ifndef CUDART_VERSION
#define CUDART_VERSION 12000
#endif

#include <stddef.h>

#if defined(__GNUC__)
#define CHORUS_HOSTCUDA_API __attribute__((visibility("default")))
#else
#define CHORUS_HOSTCUDA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorUnknown = 999
} cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02

/* CUDA's calling-convention marks, empty on Linux as in CUDA's headers:
 * host callbacks are written `void CUDART_CB fn(void *)`. */
#ifndef CUDART_CB
#define CUDART_CB
#endif
#ifndef CUDARTAPI
#define CUDARTAPI
#endif

typedef void (CUDART_CB *cudaHostFn_t)(void *userData);
typedef void (CUDART_CB *cudaStreamCallback_t)(cudaStream_t stream, cudaError_t status, void *userData);

/* The fields NCCL programs and nccl-tests read, describing the host. */
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int major, minor;
  int multiProcessorCount;
  int pciBusID, pciDeviceID, pciDomainID;
  int unifiedAddressing;
  int managedMemory;
  int canMapHostMemory;
  int concurrentKernels;
};
typedef struct cudaDeviceProp cudaDeviceProp;

/* Errors: every function returns its error and makes it this thread's last
 * error (cudaGetLastError returns and clears it, cudaPeekAtLastError only
 * returns it). */
CHORUS_HOSTCUDA_API const char *cudaGetErrorString(cudaError_t error);
CHORUS_HOSTCUDA_API const char *cudaGetErrorName(cudaError_t error);
CHORUS_HOSTCUDA_API cudaError_t cudaGetLastError(void);
CHORUS_HOSTCUDA_API cudaError_t cudaPeekAtLastError(void);

/* Devices: the current device is per thread (0 at first). */
CHORUS_HOSTCUDA_API cudaError_t cudaGetDeviceCount(int *count);
CHORUS_HOSTCUDA_API cudaError_t cudaSetDevice(int device);
CHORUS_HOSTCUDA_API cudaError_t cudaGetDevice(int *device);
CHORUS_HOSTCUDA_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
CHORUS_HOSTCUDA_API cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
CHORUS_HOSTCUDA_API cudaError_t cudaDeviceSynchronize(void);
CHORUS_HOSTCUDA_API cudaError_t cudaDeviceReset(void);
CHORUS_HOSTCUDA_API cudaError_t cudaDriverGetVersion(int *version);
CHORUS_HOSTCUDA_API cudaError_t cudaRuntimeGetVersion(int *version);
CHORUS_HOSTCUDA_API cudaError_t cudaMemGetInfo(size_t *free, size_t *total);

/* Memory: host memory, 256-byte aligned as cudaMalloc's; freeing what was
 * not allocated here (or with the other family's free) is
 * cudaErrorInvalidValue. */
CHORUS_HOSTCUDA_API cudaError_t cudaMalloc(void **devPtr, size_t size);
CHORUS_HOSTCUDA_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
CHORUS_HOSTCUDA_API cudaError_t cudaFree(void *devPtr);
CHORUS_HOSTCUDA_API cudaError_t cudaMallocHost(void **ptr, size_t size);
CHORUS_HOSTCUDA_API cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags);
CHORUS_HOSTCUDA_API cudaError_t cudaFreeHost(void *ptr);
CHORUS_HOSTCUDA_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
CHORUS_HOSTCUDA_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                                cudaStream_t stream);
CHORUS_HOSTCUDA_API cudaError_t cudaMemset(void *devPtr, int value, size_t count);
CHORUS_HOSTCUDA_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);

/* Streams: chorus streams (chorus.h). */
CHORUS_HOSTCUDA_API cudaError_t cudaStreamCreate(cudaStream_t *stream);
CHORUS_HOSTCUDA_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
CHORUS_HOSTCUDA_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority);
CHORUS_HOSTCUDA_API cudaError_t cudaStreamDestroy(cudaStream_t stream);
CHORUS_HOSTCUDA_API cudaError_t cudaStreamSynchronize(cudaStream_t stream);
CHORUS_HOSTCUDA_API cudaError_t cudaStreamQuery(cudaStream_t stream);
CHORUS_HOSTCUDA_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
CHORUS_HOSTCUDA_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData);
CHORUS_HOSTCUDA_API cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                                      void *userData, unsigned int flags);

/* Events: a point in a stream's order and the time the stream reached it
 * (cudaEventElapsedTime, in milliseconds). */
CHORUS_HOSTCUDA_API cudaError_t cudaEventCreate(cudaEvent_t *event);
CHORUS_HOSTCUDA_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
CHORUS_HOSTCUDA_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
CHORUS_HOSTCUDA_API cudaError_t cudaEventQuery(cudaEvent_t event);
CHORUS_HOSTCUDA_API cudaError_t cudaEventSynchronize(cudaEvent_t event);
CHORUS_HOSTCUDA_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
CHORUS_HOSTCUDA_API cudaError_t cudaEventDestroy(cudaEvent_t event);

#ifdef __cplusplus
} /* extern "C" */

/* CUDA's typed overloads, so C++ passes a T** without a cast. */
template <class T> static inline cudaError_t cudaMalloc(T **devPtr, size_t size) {
  return ::cudaMalloc((void **)(void *)devPtr, size);
}
template <class T>
static inline cudaError_t cudaMallocManaged(T **devPtr, size_t size, unsigned int flags = cudaMemAttachGlobal) {
  return ::cudaMallocManaged((void **)(void *)devPtr, size, flags);
}
template <class T> static inline cudaError_t cudaMallocHost(T **ptr, size_t size) {
  return ::cudaMallocHost((void **)(void *)ptr, size);
}
template <class T> static inline cudaError_t cudaHostAlloc(T **ptr, size_t size, unsigned int flags) {
  return ::cudaHostAlloc((void **)(void *)ptr, size, flags);
}
/* CUDA's C++ forms with flags: cudaEventCreate(&e, flags) is
 * cudaEventCreateWithFlags, cudaMallocHost(&p, size, flags) cudaHostAlloc
 * (NCCL's example profiler plugin calls the first). */
static inline cudaError_t cudaEventCreate(cudaEvent_t *event, unsigned int flags) {
  return ::cudaEventCreateWithFlags(event, flags);
}
static inline cudaError_t cudaMallocHost(void **ptr, size_t size, unsigned int flags) {
  return ::cudaHostAlloc(ptr, size, flags);
}
template <class T> static inline cudaError_t cudaMallocHost(T **ptr, size_t size, unsigned int flags) {
  return ::cudaHostAlloc((void **)(void *)ptr, size, flags);
}
#endif

#endif
