/* The shim's memory: host memory, remembered so that a free of something
 * else is an error rather than heap corruption; copies and fills, at once
 * on the default stream (after the blocking streams' earlier work, as
 * CUDA's legacy stream) or in order on a stream, where copies to and from
 * pageable memory (what the shim did not allocate) behave as CUDA's: the
 * source is taken at the call, the destination written before it returns. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hostcuda/hostcuda.h"

#define ALIGNMENT 256 /* cudaMalloc's guarantee */
#define BUCKETS 4096

enum family { deviceMemory, hostMemory, anyMemory /* a lookup of either */ };

struct allocation {
  struct allocation *next;
  void *ptr;
  enum family family;
  int device; /* current when it was allocated: its streams finish before it is freed */
};

static pthread_mutex_t tableLock = PTHREAD_MUTEX_INITIALIZER;
static struct allocation *table[BUCKETS];

static size_t bucketOf(const void *p) { return ((uintptr_t)p / ALIGNMENT) % BUCKETS; }

static cudaError_t allocate(void **ptr, size_t size, enum family family) {
  if (ptr == NULL) return hcReturn(cudaErrorInvalidValue);
  *ptr = NULL;
  if (size == 0) return cudaSuccess; /* as CUDA: nothing allocated, NULL returned */
  struct allocation *a = malloc(sizeof *a);
  void *p = NULL;
  if (a == NULL || posix_memalign(&p, ALIGNMENT, size) != 0) {
    free(a);
    return hcReturn(cudaErrorMemoryAllocation);
  }
  a->ptr = p;
  a->family = family;
  chorusGetDevice(&a->device);
  pthread_mutex_lock(&tableLock);
  a->next = table[bucketOf(p)];
  table[bucketOf(p)] = a;
  pthread_mutex_unlock(&tableLock);
  *ptr = p;
  return cudaSuccess;
}

/* Where the table holds p's allocation of that family (*link NULL: none);
 * the caller holds tableLock. */
static struct allocation **linkOf(const void *p, enum family family) {
  struct allocation **link = &table[bucketOf(p)];
  while (*link && !((*link)->ptr == p && (family == anyMemory || (*link)->family == family))) link = &(*link)->next;
  return link;
}

/* Frees p after the streams of the device it was allocated on have
 * finished their work, whichever device is current (cudaFree synchronizes
 * the pointer's device in CUDA too: an operation still using p must finish
 * first; before, a fill queued on another device's stream wrote into freed
 * memory). */
static cudaError_t release(void *p, enum family family) {
  if (p == NULL) return cudaSuccess;
  pthread_mutex_lock(&tableLock);
  struct allocation *a = *linkOf(p, family);
  int device = a ? a->device : -1;
  pthread_mutex_unlock(&tableLock);
  if (a == NULL) return hcReturn(cudaErrorInvalidValue);
  int current = device;
  chorusGetDevice(&current);
  if (current != device) chorusSetDevice(device);
  (void)chorusDeviceSynchronize(); /* its errors stay with their streams */
  if (current != device) chorusSetDevice(current);
  pthread_mutex_lock(&tableLock);
  struct allocation **link = linkOf(p, family);
  a = *link;
  if (a) *link = a->next;
  pthread_mutex_unlock(&tableLock);
  if (a == NULL) return hcReturn(cudaErrorInvalidValue); /* freed meanwhile by another thread */
  free(a->ptr);
  free(a);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) { return allocate(devPtr, size, deviceMemory); }

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
  if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost) return hcReturn(cudaErrorInvalidValue);
  return allocate(devPtr, size, deviceMemory);
}

cudaError_t cudaFree(void *devPtr) { return release(devPtr, deviceMemory); }

cudaError_t cudaMallocHost(void **ptr, size_t size) { return allocate(ptr, size, hostMemory); }

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
  if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
    return hcReturn(cudaErrorInvalidValue);
  return allocate(ptr, size, hostMemory);
}

cudaError_t cudaFreeHost(void *ptr) { return release(ptr, hostMemory); }

/* A copy or a fill, run now or as a stream's host function. */
struct transfer {
  void *dst;
  const void *src; /* NULL: a fill with value */
  int value;
  size_t count;
  void *staged; /* a copy of pageable source memory, freed once copied */
};

static void transferDo(const struct transfer *t) {
  if (t->src) memmove(t->dst, t->src, t->count);
  else memset(t->dst, t->value, t->count);
}

static void transferRun(void *arg, ncclResult_t status) {
  (void)status; /* like a CUDA stream's copy, it runs whatever came before */
  struct transfer *t = arg;
  transferDo(t);
  free(t->staged);
  free(t);
}

/* 1 when p starts memory the shim allocated (device or page-locked);
 * anything else is pageable host memory to CUDA. */
static int allocated(const void *p) {
  pthread_mutex_lock(&tableLock);
  int found = *linkOf(p, anyMemory) != NULL;
  pthread_mutex_unlock(&tableLock);
  return found;
}

/* Until the stream's work issued so far has run (its errors stay with it);
 * an error only for a stream that is none. */
static ncclResult_t streamReached(cudaStream_t stream) {
  chorusEvent_t point;
  if (chorusEventCreate(&point) != ncclSuccess) return ncclSystemError;
  ncclResult_t res = chorusEventRecord(point, stream);
  if (res == ncclSuccess) (void)chorusEventSynchronize(point);
  chorusEventDestroy(point);
  return res;
}

static cudaError_t transfer(struct transfer t, cudaStream_t stream, enum cudaMemcpyKind kind) {
  if (t.count == 0) return cudaSuccess;
  if (t.dst == NULL) return hcReturn(cudaErrorInvalidValue);
  int onStream = stream != NULL && stream != cudaStreamLegacy;
  if (onStream && t.src && kind == cudaMemcpyDeviceToHost && !allocated(t.dst)) {
    /* Into pageable memory CUDA copies before returning, after the stream's
     * earlier work: the caller may read it at once. */
    ncclResult_t res = streamReached(stream);
    if (res != ncclSuccess) return res == ncclSystemError ? hcReturn(cudaErrorMemoryAllocation) : hcStreamError(res);
    transferDo(&t);
    return cudaSuccess;
  }
  void *staged = NULL;
  if (onStream && t.src && kind == cudaMemcpyHostToDevice && !allocated(t.src)) {
    /* From pageable memory CUDA stages the source before returning: the
     * caller may change it at once. */
    staged = malloc(t.count);
    if (staged == NULL) return hcReturn(cudaErrorMemoryAllocation);
    memcpy(staged, t.src, t.count);
    t.src = staged;
  }
  if (!onStream) {
    /* The default stream: after this device's blocking streams' earlier
     * work. An NCCL failure there is not this copy's (in CUDA it is no CUDA
     * error at all): it stays with its stream, for cudaStreamSynchronize. */
    (void)chorusStreamSynchronize(NULL);
    transferDo(&t);
    return cudaSuccess;
  }
  struct transfer *later = malloc(sizeof *later);
  if (later == NULL) {
    free(staged);
    return hcReturn(cudaErrorMemoryAllocation);
  }
  *later = t;
  later->staged = staged;
  ncclResult_t res = chorusLaunchHostFunc(stream, transferRun, later);
  if (res != ncclSuccess) {
    free(staged);
    free(later);
  }
  return hcStreamError(res);
}

static int validKind(enum cudaMemcpyKind kind) { return kind >= cudaMemcpyHostToHost && kind <= cudaMemcpyDefault; }

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, count, kind, NULL);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (!validKind(kind)) return hcReturn(cudaErrorInvalidMemcpyDirection);
  if (count > 0 && src == NULL) return hcReturn(cudaErrorInvalidValue);
  return transfer((struct transfer){dst, src, 0, count, NULL}, stream, kind);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) { return cudaMemsetAsync(devPtr, value, count, NULL); }

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  return transfer((struct transfer){devPtr, NULL, value & 0xff, count, NULL}, stream, cudaMemcpyDeviceToDevice);
}
