/* Asynchronous streams: a worker thread per stream runs queued schedules in
 * issue order (chorusStreamCreate and friends in chorus.h). */
#ifndef CHORUS_ENGINE_STREAM_H
#define CHORUS_ENGINE_STREAM_H
#include "engine/schedule.h"
#include "nccl.h"

struct streamWork {
  struct streamWork *next;
  struct schedule sched;
  /* Called on the worker after the schedule ran; frees the work. */
  void (*done)(struct streamWork *w, ncclResult_t res);
  uint64_t enqueuedNs; /* set by streamEnqueue */
  int skipped;         /* not run: work before it on the stream failed */
};

/* 1 when stream was made by chorusStreamCreate and not destroyed. */
int streamValid(cudaStream_t stream);
void streamEnqueue(cudaStream_t stream, struct streamWork *w);

#endif
