#include "engine/stream.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"

#define STREAM_MAGIC 0x73747265616d2121ull
/* The worker starts queued work only once the caller has stopped issuing for
 * STREAM_QUIET_NS (or the oldest item has waited STREAM_MAX_DELAY_NS): a
 * caller that issues a burst and then synchronizes (the common pattern) runs
 * the work itself on its own core, instead of two threads per rank competing
 * for the cores; work nobody waits for still starts within the delay. The
 * worker sleeps on a timer that whoever makes the queue non-empty sets to
 * that time: a caller that issues and synchronizes one call at a time never
 * wakes the worker (a wake-up per call cost a 2-rank 8-byte operation issued
 * through torch.distributed three quarters of its time). */
#define STREAM_QUIET_NS 100000ull
#define STREAM_MAX_DELAY_NS 1000000ull
/* At most STREAM_MAX_PENDING (stream.h) items queued: a caller that issues
 * more (a timing loop of 100000 calls, say) runs the oldest ones itself
 * first, as a CUDA launch blocks on a full queue, so the queue's memory
 * stays bounded. */

struct CUstream_st {
  uint64_t magic;
  pthread_mutex_t lock;
  int timerFd;   /* the worker sleeps in read() on it (see STREAM_QUIET_NS) */
  uint64_t armedNs; /* when it fires (0: not armed) */
  pthread_cond_t itemDone; /* a synchronizing caller waits here for the worker's item */
  struct streamWork *head, *tail;
  int pending; /* queued or running */
  int running; /* someone (worker or a synchronizing caller) runs the head */
  int syncing; /* callers waiting for the stream: they run the queue */
  /* Items ever enqueued and ever finished: a point in the stream's order is
   * a value of issued, passed once completed reaches it (events). */
  uint64_t issued, completed;
  uint64_t lastEnqueueNs;
  int stop;
  int refs; /* chorusStreamCreate's, plus one per event recorded on the stream */
  ncclResult_t error; /* first error since the last synchronize */
  pthread_t thread;
};

/* The stream whose item this thread is running, if any: waiting for that
 * stream from inside its own item (a host function) would wait forever. */
static _Thread_local cudaStream_t runningStream;

int streamValid(cudaStream_t s) { return s != NULL && s->magic == STREAM_MAGIC; }

/* Sets the worker's timer to atNs (at once if that has passed). Called with
 * the lock held. */
static void streamSetTimer(cudaStream_t s, uint64_t atNs) {
  if (atNs == 0) atNs = 1; /* 0 would disarm the timer */
  struct itimerspec it = {{0, 0}, {(time_t)(atNs / 1000000000ull), (long)(atNs % 1000000000ull)}};
  timerfd_settime(s->timerFd, TFD_TIMER_ABSTIME, &it, NULL);
  s->armedNs = atNs;
}

/* The same, unless the worker is due to wake earlier anyway. */
static void streamWakeAt(cudaStream_t s, uint64_t atNs) {
  if (!s->armedNs || s->armedNs > atNs) streamSetTimer(s, atNs);
}

/* The worker's sleep: drops the lock until the timer fires. */
static void streamSleep(cudaStream_t s) {
  pthread_mutex_unlock(&s->lock);
  uint64_t expirations;
  ssize_t n = read(s->timerFd, &expirations, sizeof expirations);
  (void)n; /* EINTR: a spurious wake-up, the loop looks again */
  pthread_mutex_lock(&s->lock);
  if (s->armedNs && s->armedNs <= clockNs()) s->armedNs = 0;
}

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
  ncclResult_t status = s->error;
  pthread_mutex_unlock(&s->lock);
  cudaStream_t outer = runningStream;
  runningStream = s;
  w->skipped = status != ncclSuccess;
  ncclResult_t res = w->run(w, status);
  w->done(w, res);
  runningStream = outer;
  pthread_mutex_lock(&s->lock);
  s->running = 0;
  s->completed++;
  if (s->syncing) pthread_cond_broadcast(&s->itemDone);
  if (res != ncclSuccess && s->error == ncclSuccess) s->error = res;
  __atomic_store_n(&s->pending, s->pending - 1, __ATOMIC_RELEASE);
  return 1;
}

/* Runs queued work on the calling thread until the stream has finished
 * `target` items (called with the lock held). While the worker finishes an
 * item it had started, the caller sleeps on a condition variable rather than
 * take the core that item needs. Every item fails by itself within
 * CHORUS_TIMEOUT (its waits go through the one wait), so this ends. */
static void streamDrain(cudaStream_t s, uint64_t target) {
  s->syncing++;
  while (s->completed < target) {
    int ran = streamRunOne(s);
    if (!ran && s->running) pthread_cond_wait(&s->itemDone, &s->lock);
    else if (!ran) break; /* nothing left: target was past what was issued */
  }
  if (--s->syncing == 0 && s->head) streamWakeAt(s, 0);
}

/* The worker runs queued work in the background (see STREAM_QUIET_NS);
 * while a caller waits for the stream the caller runs it instead. The
 * worker sleeps on its timer while there is nothing it may run; waiting for
 * peers happens inside the items, through the one wait. */
static void *streamWorker(void *arg) {
  cudaStream_t s = arg;
  prctl(PR_SET_TIMERSLACK, 1000UL); /* wake on time: the delay is short */
  pthread_mutex_lock(&s->lock);
  while (!(s->stop && s->head == NULL)) {
    if (s->syncing || s->running || s->head == NULL) {
      streamSleep(s); /* whoever ends that state sets the timer */
      continue;
    }
    uint64_t due = s->lastEnqueueNs + STREAM_QUIET_NS, now = clockNs();
    if (due > s->head->enqueuedNs + STREAM_MAX_DELAY_NS) due = s->head->enqueuedNs + STREAM_MAX_DELAY_NS;
    if (now < due && !s->stop) {
      streamWakeAt(s, due);
      streamSleep(s);
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
  s->issued++;
  /* Behind another item the worker is already due (it wakes for the head's
   * start time or after running it): the timer is set only for a new head,
   * and then to its time whatever it was set to before (nothing else waits
   * for it: in a loop of calls that are waited for at once, it never fires). */
  if (wasEmpty && !s->syncing) streamSetTimer(s, w->enqueuedNs + STREAM_QUIET_NS);
  if (s->pending > STREAM_MAX_PENDING) streamDrain(s, s->issued - STREAM_MAX_PENDING / 2);
  pthread_mutex_unlock(&s->lock);
}

uint64_t streamMark(cudaStream_t s) {
  pthread_mutex_lock(&s->lock);
  uint64_t pos = s->issued;
  s->refs++;
  pthread_mutex_unlock(&s->lock);
  return pos;
}

int streamPassed(cudaStream_t s, uint64_t pos) {
  pthread_mutex_lock(&s->lock);
  int passed = s->completed >= pos;
  pthread_mutex_unlock(&s->lock);
  return passed;
}

static ncclResult_t checkNotInside(cudaStream_t s, const char *call) {
  if (runningStream != s) return ncclSuccess;
  WARN("%s : called from a host function running on the same stream, which would wait for itself", call);
  return ncclInvalidUsage;
}

ncclResult_t streamWaitFor(cudaStream_t s, uint64_t pos, const char *call) {
  CHECK(checkNotInside(s, call));
  pthread_mutex_lock(&s->lock);
  streamDrain(s, pos);
  pthread_mutex_unlock(&s->lock);
  return ncclSuccess;
}

static void streamFree(cudaStream_t s) {
  if (s->timerFd >= 0) close(s->timerFd);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->itemDone);
  free(s);
}

void streamRelease(cudaStream_t s) {
  pthread_mutex_lock(&s->lock);
  int last = --s->refs == 0;
  pthread_mutex_unlock(&s->lock);
  if (last) streamFree(s);
}

ncclResult_t chorusStreamCreate(cudaStream_t *stream) {
  if (stream == NULL) {
    WARN("chorusStreamCreate : stream argument is NULL");
    return ncclInvalidArgument;
  }
  cudaStream_t s = calloc(1, sizeof *s);
  if (!s) return ncclSystemError;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->itemDone, NULL);
  s->magic = STREAM_MAGIC;
  s->refs = 1;
  s->timerFd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
  if (s->timerFd < 0) {
    WARN("chorusStreamCreate : cannot create the stream's timer");
    streamFree(s);
    return ncclSystemError;
  }
  if (pthread_create(&s->thread, NULL, streamWorker, s) != 0) {
    WARN("chorusStreamCreate : cannot start the stream's thread");
    streamFree(s);
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
  CHECK(checkStream(s, "chorusStreamSynchronize"));
  CHECK(checkNotInside(s, "chorusStreamSynchronize"));
  /* The caller runs queued work itself rather than wait for the worker to
   * wake up (the difference is most of a small operation's latency). */
  pthread_mutex_lock(&s->lock);
  streamDrain(s, s->issued);
  ncclResult_t res = s->error;
  s->error = ncclSuccess;
  pthread_mutex_unlock(&s->lock);
  return res;
}

ncclResult_t chorusStreamDestroy(cudaStream_t s) {
  CHECK(checkStream(s, "chorusStreamDestroy"));
  CHECK(checkNotInside(s, "chorusStreamDestroy"));
  ncclResult_t res = chorusStreamSynchronize(s);
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  streamWakeAt(s, 0);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  s->magic = 0;
  streamRelease(s); /* events recorded on it may hold it a while longer */
  return res;
}

/* chorusLaunchHostFunc's item. */
struct hostFunc {
  struct streamWork work;
  chorusHostFn_t fn;
  void *userData;
};

static ncclResult_t hostFuncRun(struct streamWork *w, ncclResult_t status) {
  struct hostFunc *h = (struct hostFunc *)w;
  h->fn(h->userData, status);
  return ncclSuccess; /* a host function does not fail the stream */
}

static void hostFuncDone(struct streamWork *w, ncclResult_t res) {
  (void)res;
  free(w);
}

ncclResult_t chorusLaunchHostFunc(cudaStream_t s, chorusHostFn_t fn, void *userData) {
  if (fn == NULL) {
    WARN("chorusLaunchHostFunc : fn argument is NULL");
    return ncclInvalidArgument;
  }
  if (s == NULL) { /* everything issued on the NULL stream has completed */
    fn(userData, ncclSuccess);
    return ncclSuccess;
  }
  CHECK(checkStream(s, "chorusLaunchHostFunc"));
  struct hostFunc *h = malloc(sizeof *h);
  if (!h) return ncclSystemError;
  h->work.run = hostFuncRun;
  h->work.done = hostFuncDone;
  h->fn = fn;
  h->userData = userData;
  streamEnqueue(s, &h->work);
  return ncclSuccess;
}
