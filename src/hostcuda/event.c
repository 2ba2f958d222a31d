/* The shim's events: each record is a chorus event plus the time its
 * stream reached it (a host function issued just before the event's point
 * stamps it). A record lives as long as the event or a stream waiting for
 * it (cudaStreamWaitEvent) holds it, so recording again, or destroying the
 * event, never disturbs a wait already issued. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "hostcuda/hostcuda.h"

#define EVENT_MAGIC 0x6375646145767421ull

struct record {
  int refs;
  chorusEvent_t point;
  uint64_t reachedNs; /* written by the stamp before the point is passed */
  int status;         /* ncclResult_t of the stream's work before the point (the stamp's), with reachedNs */
};

struct CUevent_st {
  uint64_t magic;
  unsigned flags;
  pthread_mutex_t lock;
  struct record *last; /* NULL until recorded */
};

static uint64_t nowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void recordUnref(struct record *r) {
  if (r == NULL || __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  chorusEventDestroy(r->point);
  free(r);
}

static void recordStamp(void *arg, ncclResult_t status) {
  struct record *r = arg;
  __atomic_store_n(&r->status, (int)status, __ATOMIC_RELEASE);
  __atomic_store_n(&r->reachedNs, nowNs(), __ATOMIC_RELEASE);
  recordUnref(r);
}

static int validEvent(cudaEvent_t e) { return e != NULL && e->magic == EVENT_MAGIC; }

/* The event's latest record, held for the caller (NULL: never recorded). */
static struct record *lastRecord(cudaEvent_t e) {
  pthread_mutex_lock(&e->lock);
  struct record *r = e->last;
  if (r) __atomic_add_fetch(&r->refs, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&e->lock);
  return r;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  unsigned known = cudaEventBlockingSync | cudaEventDisableTiming;
  if (event == NULL || (flags & ~known)) return hcReturn(cudaErrorInvalidValue);
  cudaEvent_t e = calloc(1, sizeof *e);
  if (e == NULL) return hcReturn(cudaErrorMemoryAllocation);
  e->magic = EVENT_MAGIC;
  e->flags = flags;
  pthread_mutex_init(&e->lock, NULL);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!validEvent(event)) return hcReturn(cudaErrorInvalidResourceHandle);
  struct record *r = calloc(1, sizeof *r);
  if (r == NULL) return hcReturn(cudaErrorMemoryAllocation);
  if (chorusEventCreate(&r->point) != ncclSuccess) {
    free(r);
    return hcReturn(cudaErrorMemoryAllocation);
  }
  r->refs = 2; /* the event's and the stamp's */
  ncclResult_t res = chorusLaunchHostFunc(stream, recordStamp, r);
  if (res != ncclSuccess) {
    chorusEventDestroy(r->point);
    free(r);
    return hcStreamError(res);
  }
  chorusEventRecord(r->point, stream); /* the stream was accepted just above */
  pthread_mutex_lock(&event->lock);
  struct record *old = event->last;
  event->last = r;
  pthread_mutex_unlock(&event->lock);
  recordUnref(old);
  return cudaSuccess;
}

/* What waiting for r's point gave (res), or once it was passed, the
 * failure of the stream's work before it: an event recorded after a failed
 * NCCL call reports it, as CUDA's after a failed kernel (before, success). */
static cudaError_t recordResult(struct record *r, ncclResult_t res) {
  if (res == ncclSuccess) res = (ncclResult_t)__atomic_load_n(&r->status, __ATOMIC_ACQUIRE);
  return hcStreamError(res);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!validEvent(event)) return hcReturn(cudaErrorInvalidResourceHandle);
  struct record *r = lastRecord(event);
  if (r == NULL) return cudaSuccess; /* as CUDA: an event never recorded has nothing to wait for */
  cudaError_t e = recordResult(r, chorusEventQuery(r->point));
  recordUnref(r);
  return e;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!validEvent(event)) return hcReturn(cudaErrorInvalidResourceHandle);
  struct record *r = lastRecord(event);
  if (r == NULL) return cudaSuccess;
  cudaError_t e = recordResult(r, chorusEventSynchronize(r->point));
  recordUnref(r);
  return e;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == NULL) return hcReturn(cudaErrorInvalidValue);
  if (!validEvent(start) || !validEvent(end)) return hcReturn(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return hcReturn(cudaErrorInvalidResourceHandle);
  struct record *a = lastRecord(start), *b = lastRecord(end);
  cudaError_t e = cudaSuccess;
  if (a == NULL || b == NULL) e = hcReturn(cudaErrorInvalidResourceHandle);
  else if (chorusEventQuery(a->point) != ncclSuccess || chorusEventQuery(b->point) != ncclSuccess)
    e = hcReturn(cudaErrorNotReady);
  else
    *ms = (float)((double)((int64_t)(__atomic_load_n(&b->reachedNs, __ATOMIC_ACQUIRE) -
                                     __atomic_load_n(&a->reachedNs, __ATOMIC_ACQUIRE))) / 1e6);
  recordUnref(a);
  recordUnref(b);
  return e;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!validEvent(event)) return hcReturn(cudaErrorInvalidResourceHandle);
  event->magic = 0;
  recordUnref(event->last);
  pthread_mutex_destroy(&event->lock);
  free(event);
  return cudaSuccess;
}

/* The stream's later work waits for the event's latest record, as it was
 * when this was called. */
static void waitRecord(void *arg, ncclResult_t status) {
  (void)status;
  struct record *r = arg;
  if (chorusEventQuery(r->point) != ncclSuccess) chorusEventSynchronize(r->point);
  recordUnref(r);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (!validEvent(event)) return hcReturn(cudaErrorInvalidResourceHandle);
  if (flags != 0) return hcReturn(cudaErrorInvalidValue);
  struct record *r = lastRecord(event);
  if (r == NULL) return cudaSuccess;
  ncclResult_t res = chorusLaunchHostFunc(stream, waitRecord, r);
  if (res != ncclSuccess) recordUnref(r);
  return hcStreamError(res);
}
