#include "engine/stream.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

#include "chorus.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"

#define STREAM_MAGIC 0x73747265616d2121ull
/* The worker starts queued work only once the caller has stopped issuing for
 * STREAM_QUIET_NS (or the oldest item has waited STREAM_MAX_DELAY_NS): a
 * caller that issues a burst and then synchronizes (the common pattern) runs
 * the work itself on its own core, instead of two threads per rank competing
 * for the cores; work nobody waits for still starts within the delay. */
#define STREAM_QUIET_NS 100000ull
#define STREAM_MAX_DELAY_NS 1000000ull
/* At most this many items queued: a caller that issues more (a timing loop
 * of 100000 calls, say) runs the oldest ones itself first, as a CUDA launch
 * blocks on a full queue, so the queue's memory stays bounded. */
#define STREAM_MAX_PENDING 512

struct CUstream_st {
  uint64_t magic;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  pthread_cond_t itemDone; /* a synchronizing caller waits here for the worker's item */
  struct streamWork *head, *tail;
  int pending; /* queued or running */
  int running; /* someone (worker or a synchronizing caller) runs the head */
  int syncing; /* callers inside chorusStreamSynchronize: they run the queue */
  uint64_t lastEnqueueNs;
  int stop;
  ncclResult_t error; /* first error since the last synchronize */
  pthread_t thread;
};

int streamValid(cudaStream_t s) { return s != NULL && s->magic == STREAM_MAGIC; }

/* Runs the queue's head if nobody else is running one (called with the
 * lock held; returns with it held). Work runs one item at a time, in issue
 * order, by whichever thread takes it. Returns 1 if it ran something. */
static int streamRunOne(cudaStream_t s) {
  if (s->running || s->head == NULL) return 0;
  struct streamWork *w = s->head;
  s->head = w->next;
  if (s->head == NULL) s->tail = NULL;
  s->running = 1;
  /* After a failure the work behind it fails at once with the same error
   * (as a CUDA stream's does) rather than wait out a timeout each; the
   * caller learns it from chorusStreamSynchronize, or from its next call on
   * the failed communicator. */
  ncclResult_t failed = s->error;
  pthread_mutex_unlock(&s->lock);
  w->skipped = failed != ncclSuccess;
  ncclResult_t res = w->skipped ? failed : engineRun(&w->sched);
  w->done(w, res);
  pthread_mutex_lock(&s->lock);
  s->running = 0;
  if (s->syncing) pthread_cond_broadcast(&s->itemDone);
  if (res != ncclSuccess && s->error == ncclSuccess) s->error = res;
  __atomic_store_n(&s->pending, s->pending - 1, __ATOMIC_RELEASE);
  return 1;
}

/* Runs queued work on the calling thread until at most `left` items are
 * pending (called with the lock held). While the worker finishes an item it
 * had started, the caller sleeps on a condition variable rather than take
 * the core that item needs. Every item fails by itself within
 * CHORUS_TIMEOUT (its waits go through the one wait), so this ends. */
static void streamDrain(cudaStream_t s, int left) {
  s->syncing++;
  for (;;) {
    int ran = streamRunOne(s);
    if (s->pending <= left) break;
    if (!ran && s->running) pthread_cond_wait(&s->itemDone, &s->lock);
  }
  if (--s->syncing == 0 && s->head) pthread_cond_signal(&s->cond);
}

/* The worker runs queued work in the background (see STREAM_QUIET_NS);
 * while a caller is in chorusStreamSynchronize the caller runs it instead. The worker sleeps on a condition variable while there is
 * nothing it may run; waiting for peers happens inside engineRun, through the
 * one wait. */
static void *streamWorker(void *arg) {
  cudaStream_t s = arg;
  prctl(PR_SET_TIMERSLACK, 1000UL); /* wake on time: the delay is short */
  pthread_mutex_lock(&s->lock);
  while (!(s->stop && s->head == NULL)) {
    if (s->syncing || s->running || s->head == NULL) {
      pthread_cond_wait(&s->cond, &s->lock);
      continue;
    }
    uint64_t due = s->lastEnqueueNs + STREAM_QUIET_NS, now = clockNs();
    if (due > s->head->enqueuedNs + STREAM_MAX_DELAY_NS) due = s->head->enqueuedNs + STREAM_MAX_DELAY_NS;
    if (now < due && !s->stop) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      uint64_t ns = (uint64_t)ts.tv_nsec + (due - now);
      ts.tv_sec += (time_t)(ns / 1000000000ull);
      ts.tv_nsec = (long)(ns % 1000000000ull);
      pthread_cond_timedwait(&s->cond, &s->lock, &ts);
      continue;
    }
    streamRunOne(s);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

void streamEnqueue(cudaStream_t s, struct streamWork *w) {
  w->next = NULL;
  w->enqueuedNs = clockNs();
  pthread_mutex_lock(&s->lock);
  s->lastEnqueueNs = w->enqueuedNs;
  int wasEmpty = s->head == NULL;
  if (s->tail) s->tail->next = w;
  else s->head = w;
  s->tail = w;
  s->pending++;
  /* Behind another item the worker is already on its way (it wakes for the
   * head's start time or after running it): no wake-up call needed. */
  if (wasEmpty) pthread_cond_signal(&s->cond);
  if (s->pending > STREAM_MAX_PENDING) streamDrain(s, STREAM_MAX_PENDING / 2);
  pthread_mutex_unlock(&s->lock);
}

ncclResult_t chorusStreamCreate(cudaStream_t *stream) {
  if (stream == NULL) {
    WARN("chorusStreamCreate : stream argument is NULL");
    return ncclInvalidArgument;
  }
  cudaStream_t s = calloc(1, sizeof *s);
  if (!s) return ncclSystemError;
  pthread_mutex_init(&s->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cond, &ca);
  pthread_cond_init(&s->itemDone, NULL);
  pthread_condattr_destroy(&ca);
  s->magic = STREAM_MAGIC;
  if (pthread_create(&s->thread, NULL, streamWorker, s) != 0) {
    WARN("chorusStreamCreate : cannot start the stream's thread");
    free(s);
    return ncclSystemError;
  }
  *stream = s;
  return ncclSuccess;
}

static ncclResult_t checkStream(cudaStream_t s, const char *call) {
  if (!streamValid(s)) {
    WARN("%s : stream %p was not created by chorusStreamCreate (or was destroyed)", call, (void *)s);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t chorusStreamQuery(cudaStream_t s) {
  if (s == NULL) return ncclSuccess; /* the NULL stream is always complete */
  ncclResult_t res = checkStream(s, "chorusStreamQuery");
  if (res != ncclSuccess) return res;
  if (__atomic_load_n(&s->pending, __ATOMIC_ACQUIRE) > 0) return ncclInProgress;
  pthread_mutex_lock(&s->lock);
  res = s->error;
  pthread_mutex_unlock(&s->lock);
  return res;
}

ncclResult_t chorusStreamSynchronize(cudaStream_t s) {
  if (s == NULL) return ncclSuccess;
  ncclResult_t res = checkStream(s, "chorusStreamSynchronize");
  if (res != ncclSuccess) return res;
  /* The caller runs queued work itself rather than wait for the worker to
   * wake up (the difference is most of a small operation's latency). */
  pthread_mutex_lock(&s->lock);
  streamDrain(s, 0);
  res = s->error;
  s->error = ncclSuccess;
  pthread_mutex_unlock(&s->lock);
  return res;
}

ncclResult_t chorusStreamDestroy(cudaStream_t s) {
  ncclResult_t res = checkStream(s, "chorusStreamDestroy");
  if (res != ncclSuccess) return res;
  res = chorusStreamSynchronize(s);
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  s->magic = 0;
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  pthread_cond_destroy(&s->itemDone);
  free(s);
  return res;
}
