/* Asynchronous streams: a worker thread per stream runs queued items in
 * issue order (chorusStreamCreate and friends in chorus.h): schedules, host
 * functions (chorusLaunchHostFunc); events mark points in that order. */
#ifndef CHORUS_ENGINE_STREAM_H
#define CHORUS_ENGINE_STREAM_H
#include <stdint.h>

#include "nccl.h"

struct streamWork {
  struct streamWork *next;
  /* Runs the item on whichever thread runs the stream. status is the first
   * error the stream's earlier work met since the last synchronize
   * (ncclSuccess if none); an item that fails returns its error, which then
   * becomes the status of the items behind it. */
  ncclResult_t (*run)(struct streamWork *w, ncclResult_t status);
  /* Called after run with its result; may free the item. */
  void (*done)(struct streamWork *w, ncclResult_t res);
  uint64_t enqueuedNs; /* set by streamEnqueue */
  int skipped;         /* run saw a failed status (work before it failed) */
  /* Start it at once rather than after the caller's quiet spell: a group
   * that spans several streams of one thread (one thread driving several
   * ranks) has parts that wait for each other, and the caller can run only
   * one stream's at a time. */
  int urgent;
};

/* The most items a stream holds queued or running (streamEnqueue runs the
 * oldest itself beyond): what a caller keeps of finished items to reuse
 * need not be more. */
#define STREAM_MAX_PENDING 512

/* CUDA's special handles, cudaStreamLegacy ((cudaStream_t)0x1) and
 * cudaStreamPerThread ((cudaStream_t)0x2), name a device's default stream;
 * on the host they mean what NULL does (the call is done when it returns),
 * so code written for CUDA passes them unchanged. Every public function that
 * takes a stream resolves it first. */
static inline cudaStream_t streamResolve(cudaStream_t stream) {
  return (uintptr_t)stream <= 2 ? NULL : stream;
}

/* Work on the NULL stream calls this first: it waits for the work issued
 * so far on device's CHORUS_STREAM_BLOCKING streams (one atomic load when
 * no blocking stream has work), as CUDA's legacy default stream does. */
void streamLegacyWait(int device);

/* ncclSuccess when stream (not NULL) was made by chorusStreamCreate, in
 * this process, and not destroyed; else a WARN naming call, and
 * ncclInvalidArgument (not a stream) or ncclInvalidUsage (a stream this
 * process inherited at a fork: only chorusStreamDestroy, which forgets
 * it, takes one). */
ncclResult_t streamCheck(cudaStream_t stream, const char *call);
/* ncclSuccess unless this process inherited stream at a fork (then as
 * streamCheck): for a stream that may have been destroyed since (an
 * event's). */
ncclResult_t streamOwned(cudaStream_t stream, const char *call);
/* Queues w; returns the point in the stream's order right after it (w may
 * have run, and been freed by its done, by the time this returns). */
uint64_t streamEnqueue(cudaStream_t stream, struct streamWork *w);

/* Events (event.c) hold a stream and a point in its order. streamMark
 * returns the point after everything issued so far and holds the stream
 * (its memory outlives chorusStreamDestroy) until streamRelease. */
uint64_t streamMark(cudaStream_t stream);
/* Holds the stream, as streamMark does, for a point already known. */
void streamHold(cudaStream_t stream);
void streamRelease(cudaStream_t stream);
/* 1 once the stream has finished everything before pos. */
int streamPassed(cudaStream_t stream, uint64_t pos);
/* Runs the stream's work on the calling thread until it has passed pos
 * (ncclInvalidUsage, with a WARN naming call, from inside one of the
 * stream's own host functions). */
ncclResult_t streamWaitFor(cudaStream_t stream, uint64_t pos, const char *call);

#endif
