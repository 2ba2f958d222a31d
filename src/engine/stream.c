#include "engine/stream.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "core/clock.h"
#include "core/device.h"
#include "core/err.h"
#include "core/log.h"

#define STREAM_MAGIC 0x73747265616d2121ull
/* A forked child's copy of a stream its parent had made: its worker is
 * the parent's thread, which the child does not have, and its queue the
 * parent's work (streamForkChild). */
#define STREAM_INHERITED 0x696e686572697421ull
/* The worker starts queued work only once the caller has stopped issuing for
 * STREAM_QUIET_NS (or the oldest item has waited STREAM_MAX_DELAY_NS): a
 * caller that issues a burst and then synchronizes (the common pattern) runs
 * the work itself on its own core, instead of two threads per rank competing
 * for the cores; work nobody waits for still starts soon after.
 *
 * Issuing makes no system call: arming a timer per call (as this did with a
 * timerfd) cost a 1-rank 8-byte all_reduce through torch.distributed 13 of
 * its 19 us here, most of it not in the call itself but in everything after
 * it running slower (in a virtual machine, programming the timer exits to
 * the hypervisor). Instead, a worker whose stream was used in the last
 * STREAM_HOT_NS looks at the queue every STREAM_POLL_NS by itself (a timed
 * wait on its own core); only one that has gone to sleep for good after an
 * idle spell is woken, by the call that ends the spell. So work nobody waits
 * for starts within STREAM_MAX_DELAY_NS + STREAM_POLL_NS. */
#define STREAM_QUIET_NS 100000ull
#define STREAM_MAX_DELAY_NS 1000000ull
#define STREAM_POLL_NS 500000ull
#define STREAM_HOT_NS 50000000ull
/* While a caller runs the queue itself (it waits for the stream), the
 * worker has nothing to do but look whether it still does: it looks after
 * STREAM_POLL_NS, then twice as long each time, up to this; a wait that
 * lasted that long wakes it as it ends. Looking every STREAM_POLL_NS made
 * each 64 MiB AllReduce of 4 ranks on the 2 cores 15% slower on a stream
 * than on the NULL stream (all_reduce_perf -y 0: 33-36 ms, -y 1: 29-31;
 * the cycles of its reduction and copies up 7%: every look preempts a rank
 * that works); with the longer looks, -y 0 went from 36-41.5 ms to
 * 31.6-34.8 (4 alternated runs). */
#define STREAM_SYNC_POLL_MAX_NS 16000000ull
/* At most STREAM_MAX_PENDING (stream.h) items queued: a caller that issues
 * more (a timing loop of 100000 calls, say) runs the oldest ones itself
 * first, as a CUDA launch blocks on a full queue, so the queue's memory
 * stays bounded. */

struct CUstream_st {
  uint64_t magic;
  pthread_mutex_t lock;
  pthread_cond_t workerWake; /* signalled only while workerAsleep */
  int workerAsleep; /* the worker waits without a deadline: issuing must wake it */
  pthread_cond_t itemDone; /* a synchronizing caller waits here for the worker's item */
  struct streamWork *head, *tail;
  int pending; /* queued or running */
  int running; /* someone (worker or a synchronizing caller) runs the head */
  int syncing; /* callers waiting for the stream: they run the queue */
  /* Items ever enqueued and ever finished: a point in the stream's order is
   * a value of issued, passed once completed reaches it (events). */
  uint64_t issued, completed;
  uint64_t lastEnqueueNs;
  uint64_t syncPollNs; /* how long the worker sleeps while a caller runs the queue (0: none does) */
  int stop;
  int refs; /* chorusStreamCreate's, plus one per event recorded on the stream (and per waiter of streamsWait) */
  ncclResult_t error; /* first error since the last synchronize */
  int blocking;       /* CHORUS_STREAM_BLOCKING: NULL-stream work of its device waits for it */
  int device;         /* the creating thread's device (core/device.h) */
  pthread_t thread;
  struct CUstream_st *liveNext, *livePrev; /* every live stream of the process (liveLock) */
};

/* Every stream not yet destroyed, for the NULL stream's waits and
 * chorusDeviceSynchronize; blockingPending counts the items queued or
 * running on blocking streams, so NULL-stream work pays one atomic load
 * when there is nothing to wait for. */
static pthread_mutex_t liveLock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t liveHead;
static int blockingPending;

/* The stream whose item this thread is running, if any: waiting for that
 * stream from inside its own item (a host function) would wait forever. */
static _Thread_local cudaStream_t runningStream;

/* Small values are never read through (CUDA's special handles among them). */
static int streamValid(cudaStream_t s) { return (uintptr_t)s >= 4096 && s->magic == STREAM_MAGIC; }
static int streamInherited(cudaStream_t s) { return (uintptr_t)s >= 4096 && s->magic == STREAM_INHERITED; }

ncclResult_t streamOwned(cudaStream_t s, const char *call) {
  if (!streamInherited(s)) return ncclSuccess;
  WARN("%s : stream %p was made before this process forked: a stream works only in the process that made it (its "
       "thread and its queued work are the parent's; CUDA refuses a forked child every call): make one here",
       call, (void *)s);
  return ncclInvalidUsage;
}

ncclResult_t streamCheck(cudaStream_t s, const char *call) {
  CHECK(streamOwned(s, call));
  if (!streamValid(s)) {
    WARN("%s : stream %p was not created by chorusStreamCreate (or was destroyed)", call, (void *)s);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* A forked child waits for none of its parent's streams and runs none of
 * their work: had it drained them (a NULL-stream call waits for blocking
 * streams, chorusDeviceSynchronize for all), it would have run the
 * parent's queued collectives in the parent's place, or waited forever
 * for a worker it does not have. */
static void streamForkPrepare(void) { pthread_mutex_lock(&liveLock); }
static void streamForkParent(void) { pthread_mutex_unlock(&liveLock); }
static void streamForkChild(void) {
  for (cudaStream_t s = liveHead; s; s = s->liveNext) s->magic = STREAM_INHERITED;
  liveHead = NULL;
  blockingPending = 0;
  pthread_mutex_unlock(&liveLock);
}
static pthread_once_t streamForkOnce = PTHREAD_ONCE_INIT;
static void streamForkRegister(void) { pthread_atfork(streamForkPrepare, streamForkParent, streamForkChild); }

/* Wakes the worker (called with the lock held): always when now, otherwise
 * only if it sleeps without a deadline (a worker in a timed wait looks
 * again by itself). */
static void streamWakeWorker(cudaStream_t s, int now) {
  if (!s->workerAsleep && !now) return;
  s->workerAsleep = 0;
  pthread_cond_signal(&s->workerWake);
}

/* The worker's sleep: drops the lock until untilNs (0: until woken). */
static void streamSleep(cudaStream_t s, uint64_t untilNs) {
  if (untilNs == 0) {
    s->workerAsleep = 1;
    while (s->workerAsleep) pthread_cond_wait(&s->workerWake, &s->lock);
    return;
  }
  struct timespec at = {(time_t)(untilNs / 1000000000ull), (long)(untilNs % 1000000000ull)};
  pthread_cond_timedwait(&s->workerWake, &s->lock, &at);
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
  if (s->blocking) __atomic_fetch_sub(&blockingPending, 1, __ATOMIC_RELEASE);
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
  /* Rare: a wait for less than all; or a long wait, after which the
   * worker, looking only now and then, should look at once */
  if (--s->syncing == 0 && (s->head || s->syncPollNs > STREAM_POLL_NS)) streamWakeWorker(s, 1);
}

/* The worker runs queued work in the background (see STREAM_QUIET_NS);
 * while a caller waits for the stream the caller runs it instead. Waiting
 * for peers happens inside the items, through the one wait. */
static void *streamWorker(void *arg) {
  cudaStream_t s = arg;
  prctl(PR_SET_TIMERSLACK, 1000UL); /* wake on time: the delay is short */
  pthread_mutex_lock(&s->lock);
  while (!(s->stop && s->head == NULL)) {
    uint64_t now = clockNs();
    if (!s->syncing) s->syncPollNs = 0;
    if (s->head && !s->syncing && !s->running) {
      uint64_t due = s->lastEnqueueNs + STREAM_QUIET_NS;
      if (due > s->head->enqueuedNs + STREAM_MAX_DELAY_NS) due = s->head->enqueuedNs + STREAM_MAX_DELAY_NS;
      if (s->head->urgent) due = now;
      if (now >= due || s->stop) streamRunOne(s);
      else streamSleep(s, due);
    } else if (s->syncing && !s->stop) {
      /* A caller runs the queue: look less and less often (see STREAM_SYNC_POLL_MAX_NS) */
      s->syncPollNs = s->syncPollNs ? s->syncPollNs * 2 : STREAM_POLL_NS;
      if (s->syncPollNs > STREAM_SYNC_POLL_MAX_NS) s->syncPollNs = STREAM_SYNC_POLL_MAX_NS;
      streamSleep(s, now + s->syncPollNs);
    } else if (s->head || s->stop || now - s->lastEnqueueNs < STREAM_HOT_NS) {
      streamSleep(s, now + STREAM_POLL_NS); /* a caller runs the head, or more may come soon */
    } else {
      streamSleep(s, 0);
    }
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

uint64_t streamEnqueue(cudaStream_t s, struct streamWork *w) {
  w->next = NULL;
  w->enqueuedNs = clockNs();
  pthread_mutex_lock(&s->lock);
  s->lastEnqueueNs = w->enqueuedNs;
  if (s->tail) s->tail->next = w;
  else s->head = w;
  s->tail = w;
  s->pending++;
  s->issued++;
  if (s->blocking) __atomic_fetch_add(&blockingPending, 1, __ATOMIC_RELAXED);
  streamWakeWorker(s, w->urgent); /* else only after an idle spell: otherwise it polls */
  uint64_t after = s->issued;
  if (s->pending > STREAM_MAX_PENDING) streamDrain(s, s->issued - STREAM_MAX_PENDING / 2);
  pthread_mutex_unlock(&s->lock);
  return after;
}

uint64_t streamMark(cudaStream_t s) {
  pthread_mutex_lock(&s->lock);
  uint64_t pos = s->issued;
  s->refs++;
  pthread_mutex_unlock(&s->lock);
  return pos;
}

void streamHold(cudaStream_t s) {
  pthread_mutex_lock(&s->lock);
  s->refs++;
  pthread_mutex_unlock(&s->lock);
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
  CHECK(streamOwned(s, call));
  CHECK(checkNotInside(s, call));
  pthread_mutex_lock(&s->lock);
  streamDrain(s, pos);
  pthread_mutex_unlock(&s->lock);
  return ncclSuccess;
}

static void streamFree(cudaStream_t s) {
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->workerWake);
  pthread_cond_destroy(&s->itemDone);
  free(s);
}

void streamRelease(cudaStream_t s) {
  if (streamInherited(s)) return; /* its lock may be held by a parent's thread: the child leaves it be */
  pthread_mutex_lock(&s->lock);
  int last = --s->refs == 0;
  pthread_mutex_unlock(&s->lock);
  if (last) streamFree(s);
}

ncclResult_t chorusStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  if (stream == NULL) {
    WARN("chorusStreamCreate : stream argument is NULL");
    return ncclInvalidArgument;
  }
  if (flags & ~CHORUS_STREAM_BLOCKING) {
    WARN("chorusStreamCreateWithFlags : flags 0x%x has bits other than CHORUS_STREAM_BLOCKING (0x%x)", flags,
         CHORUS_STREAM_BLOCKING);
    return ncclInvalidArgument;
  }
  pthread_once(&streamForkOnce, streamForkRegister);
  cudaStream_t s = calloc(1, sizeof *s);
  if (!s) return ncclSystemError;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->itemDone, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* deadlines are clockNs() times */
  pthread_cond_init(&s->workerWake, &attr);
  pthread_condattr_destroy(&attr);
  s->magic = STREAM_MAGIC;
  s->refs = 1;
  s->blocking = (flags & CHORUS_STREAM_BLOCKING) != 0;
  s->device = deviceCurrent();
  s->lastEnqueueNs = clockNs() - STREAM_HOT_NS; /* idle: the worker sleeps until the first item */
  if (pthread_create(&s->thread, NULL, streamWorker, s) != 0) {
    WARN("chorusStreamCreate : cannot start the stream's thread");
    streamFree(s);
    return ncclSystemError;
  }
  pthread_mutex_lock(&liveLock);
  s->liveNext = liveHead;
  if (liveHead) liveHead->livePrev = s;
  liveHead = s;
  pthread_mutex_unlock(&liveLock);
  *stream = s;
  return ncclSuccess;
}

ncclResult_t chorusStreamCreate(cudaStream_t *stream) { return chorusStreamCreateWithFlags(stream, 0); }

/* Waits for the work issued so far on device's live streams (blocking ones
 * only, unless all), running it on this thread where nobody else does;
 * returns the first error one of them holds, without clearing it (it is
 * that stream's to report). A stream whose host function this thread is
 * running is passed over: its earlier work is done. Other devices' streams
 * are not waited for (in a thread-per-device program they may be waiting
 * for this very thread). */
static int streamOfWait(cudaStream_t s, int all, int device) { return s->device == device && (all || s->blocking); }

static ncclResult_t streamsWait(int all, int device) {
  pthread_mutex_lock(&liveLock);
  int n = 0;
  for (cudaStream_t s = liveHead; s; s = s->liveNext) n += streamOfWait(s, all, device);
  cudaStream_t *held = n ? malloc(n * sizeof *held) : NULL;
  if (n > 0 && held == NULL) {
    pthread_mutex_unlock(&liveLock);
    return ncclSystemError;
  }
  n = 0;
  for (cudaStream_t s = liveHead; s; s = s->liveNext) {
    if (!streamOfWait(s, all, device)) continue;
    pthread_mutex_lock(&s->lock);
    s->refs++; /* a destroy meanwhile leaves its memory to us */
    pthread_mutex_unlock(&s->lock);
    held[n++] = s;
  }
  pthread_mutex_unlock(&liveLock);
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < n; i++) {
    cudaStream_t s = held[i];
    pthread_mutex_lock(&s->lock);
    if (runningStream != s) streamDrain(s, s->issued);
    if (res == ncclSuccess) res = s->error;
    pthread_mutex_unlock(&s->lock);
    streamRelease(s);
  }
  free(held);
  return res;
}

void streamLegacyWait(int device) {
  if (__atomic_load_n(&blockingPending, __ATOMIC_ACQUIRE) > 0) (void)streamsWait(0, device);
}

ncclResult_t chorusDeviceSynchronize(void) { return streamsWait(1, deviceCurrent()); }

/* The NULL stream's state on device: in progress while one of its blocking
 * streams has work pending, else the first error one of them holds. */
static ncclResult_t legacyQuery(int device) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&liveLock);
  for (cudaStream_t s = liveHead; s && res == ncclSuccess; s = s->liveNext) {
    if (!streamOfWait(s, 0, device)) continue;
    if (__atomic_load_n(&s->pending, __ATOMIC_ACQUIRE) > 0) {
      res = ncclInProgress;
      break;
    }
    pthread_mutex_lock(&s->lock);
    res = s->error;
    pthread_mutex_unlock(&s->lock);
  }
  pthread_mutex_unlock(&liveLock);
  return res;
}

ncclResult_t chorusStreamQuery(cudaStream_t s) {
  s = streamResolve(s);
  if (s == NULL) return legacyQuery(deviceCurrent());
  ncclResult_t res = streamCheck(s, "chorusStreamQuery");
  if (res != ncclSuccess) return res;
  if (__atomic_load_n(&s->pending, __ATOMIC_ACQUIRE) > 0) return ncclInProgress;
  pthread_mutex_lock(&s->lock);
  res = s->error;
  pthread_mutex_unlock(&s->lock);
  return res;
}

ncclResult_t chorusStreamSynchronize(cudaStream_t s) {
  s = streamResolve(s);
  if (s == NULL) return streamsWait(0, deviceCurrent());
  CHECK(streamCheck(s, "chorusStreamSynchronize"));
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
  if (streamInherited(s)) {
    INFO(subsysInit, "chorusStreamDestroy : stream %p was made before this process forked: forgotten here, left "
         "to the process that made it", (void *)s);
    return ncclSuccess;
  }
  CHECK(streamCheck(s, "chorusStreamDestroy"));
  CHECK(checkNotInside(s, "chorusStreamDestroy"));
  ncclResult_t res = chorusStreamSynchronize(s);
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  streamWakeWorker(s, 1);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  /* Unlinked only now: until its work is done, the device's waits
   * (chorusDeviceSynchronize, the NULL stream) must still see it. */
  pthread_mutex_lock(&liveLock);
  if (s->livePrev) s->livePrev->liveNext = s->liveNext;
  else liveHead = s->liveNext;
  if (s->liveNext) s->liveNext->livePrev = s->livePrev;
  pthread_mutex_unlock(&liveLock);
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
  s = streamResolve(s);
  if (s == NULL) { /* everything issued on the NULL stream has completed */
    streamLegacyWait(deviceCurrent());
    fn(userData, ncclSuccess);
    return ncclSuccess;
  }
  CHECK(streamCheck(s, "chorusLaunchHostFunc"));
  struct hostFunc *h = malloc(sizeof *h);
  if (!h) return ncclSystemError;
  /* Every field set: a stray `urgent` would wake the worker to race the
   * caller for each host function (it did, costing torch's every call). */
  *h = (struct hostFunc){.work = {.run = hostFuncRun, .done = hostFuncDone}, .fn = fn, .userData = userData};
  streamEnqueue(s, &h->work);
  return ncclSuccess;
}
