/* Launching: a group's items (or one call's) become schedules, built by
 * the tuner's chosen algorithm and protocol, and run: inline for the NULL
 * stream, queued on a stream's worker otherwise. */
#include "api/launch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/watch.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/observe.h"
#include "core/param.h"
#include "engine/engine.h"
#include "engine/stream.h"
#include "transport/memshare.h"

/* The NULL stream's schedule, reused so blocking calls do not allocate;
 * freed when its thread exits. */
static _Thread_local struct schedule inlineSched;

/* What the NULL stream's schedule was last built for, when it can run again
 * as it is: a call that repeats the last one (a training step's, a
 * benchmark's loop) skips the build, a quarter of a 2-rank 8-byte
 * AllReduce's instructions. Everything a build reads is in it, but the
 * call's number and id, which the reuse rewrites. */
struct inlineKey {
  uint64_t comm; /* its serial; 0: nothing reusable */
  struct collDesc desc;
  struct tuneChoice plan;
};
static _Thread_local struct inlineKey inlineKey;
static uint64_t buildGeneration;
static pthread_key_t inlineSchedKey;
static pthread_once_t inlineSchedOnce = PTHREAD_ONCE_INIT;
static void inlineSchedFree(void *unused) {
  (void)unused;
  scheduleFree(&inlineSched);
}
static void inlineSchedKeyCreate(void) { pthread_key_create(&inlineSchedKey, inlineSchedFree); }
static void inlineSchedInUse(void) {
  pthread_once(&inlineSchedOnce, inlineSchedKeyCreate);
  if (pthread_getspecific(inlineSchedKey) == NULL) pthread_setspecific(inlineSchedKey, &inlineSchedKey);
}

/* CHORUS_DUMP_SCHEDULE, read once (every launch asks). */
static int dumpSchedules(void) {
  static int value = -1;
  int v = __atomic_load_n(&value, __ATOMIC_RELAXED);
  if (v < 0) __atomic_store_n(&value, v = paramInt(paramDumpSchedule) != 0, __ATOMIC_RELAXED);
  return v;
}

/* Builds are in two passes, the collectives first, then Send/Recv: a rooted
 * collective's agreement (and Gather's, Scatter's and a one-hop
 * Broadcast's data) use the point-to-point connections, in order with the
 * group's sends and receives, and NCCL lets ranks place their Send/Recv
 * anywhere around the collectives of a group (only the order of the
 * collectives, and of the sends to one peer, must agree). */
static int buildPass(const struct groupItem *it) {
  return it->desc.coll == collSend || it->desc.coll == collRecv;
}

/* 1 when an operation's buffers are memory local peers can map
 * (ncclMemAlloc's): the families whose sends are references only there
 * (algoMappedSends) then use them. */
static int buffersMapped(const struct collDesc *d) {
  struct shareRegion r;
  return shareFind(d->sendbuff, 1, &r) && shareFind(d->recvbuff, 1, &r);
}

/* 1 for a reduction in place: it writes its results where it read this
 * rank's input, lines the reduction has just brought into the cache, so
 * stores past the cache (CHORUS_NT_STORES) save no read there and only
 * evict them. 2 ranks, 64-128 MiB, CHORUS_NT_STORES=0 against the default
 * (3 alternated runs of all_reduce_perf and reduce_scatter_perf -y 1): in
 * place AllReduce 4.8 -> 5.7-6.8 GB/s busbw, ReduceScatter 3.2-3.5 ->
 * 4.9-5.6; out of place the streaming stores still win (AllReduce 4.4-4.9
 * -> 5.0-5.3). 4 ranks, 16 MiB in place: 2.9-3.1 -> 3.7-3.9. */
static int reducesInPlace(const struct collDesc *d, int rank) {
  switch (d->coll) {
    case collAllReduce:
    case collReduce: return d->sendbuff == d->recvbuff;
    case collReduceScatter:
      return (const char *)d->recvbuff == (const char *)d->sendbuff + (size_t)rank * d->count * dtypeSize(d->dtype);
    default: return 0;
  }
}

/* An item's size as nccl-tests counts it (trace/stats.h). */
static uint64_t itemBytes(const struct groupItem *it) {
  return statsOpBytes(it->desc.coll, it->desc.count, it->desc.dtype, it->comm->nranks);
}

static ncclResult_t buildItem(struct schedule *s, const struct groupItem *it, uint64_t gen) {
  struct ncclComm *comm = it->comm;
  if (comm->laneGen != gen) {
    for (int i = 0; i < comm->nch + 2 * comm->nranks; i++) comm->laneLast[i] = -1;
    comm->laneGen = gen;
  }
  const struct tuneChoice c = it->plan;
  struct algoCtx ctx = {comm->rank, comm->nranks, &comm->conns, &comm->boot, &comm->abortFlag, comm->scratch,
                        comm->laneLast, comm->check, comm->hostOf, comm->nhosts, comm->ringOrder, comm->ringPos,
                        comm->hostFirst};
  int firstTask = s->ntasks;
  uint64_t timeoutNs = commTimeoutNs(comm);
  if (timeoutNs && (s->timeoutNs == 0 || timeoutNs < s->timeoutNs)) s->timeoutNs = timeoutNs;
  s->proto = c.proto; /* the tasks and steps added from here on carry these */
  s->opId = it->opId;
  ncclResult_t res = algoBuild(s, &ctx, &it->desc, c.algo, c.nch);
  uint64_t opBytes = itemBytes(it);
  if (res == ncclSuccess && comm->ntStoreBytes && opBytes >= comm->ntStoreBytes && !reducesInPlace(&it->desc, comm->rank))
    for (int k = firstTask; k < s->ntasks; k++) s->tasks[k].streamOut = 1;
  uint64_t singleCopy = c.algo == algoP2p || c.algo == algoPairwise ? comm->singleCopyP2pBytes : comm->singleCopyBytes;
  int inWindow = singleCopy && opBytes >= singleCopy && (!comm->singleCopyBelow || opBytes < comm->singleCopyBelow);
  int refs = inWindow ? refsAny : comm->mappedRefs ? refsMapped : refsNone;
  if (refs != refsNone && !algoStableSends(c.algo, it->desc.coll))
    refs = comm->mappedRefs && algoMappedSends(c.algo, &it->desc, comm->nranks) && buffersMapped(&it->desc)
               ? refsMapped
               : refsNone;
  if (res == ncclSuccess && refs != refsNone)
    for (int k = firstTask; k < s->ntasks; k++) s->tasks[k].sendRefs = refs;
  if (res == ncclSuccess && comm->check) {
    struct opDesc check = it->desc.check;
    if (check.coll != collSend && check.coll != collRecv) {
      check.algo = (uint8_t)c.algo;
      check.proto = (uint8_t)c.proto;
      check.nch = (uint8_t)c.nch;
    }
    scheduleMarkOp(s, firstTask, &check);
  }
  if (res != ncclSuccess) WARN("%s : rank %d: out of memory building the schedule", collName(it->desc.coll), comm->rank);
  return res;
}

/* Builds the items on stream into s (a new build generation), in the two
 * passes of buildPass. */
static ncclResult_t buildItems(struct schedule *s, const struct groupItem *items, int n, cudaStream_t stream) {
  uint64_t gen = __atomic_add_fetch(&buildGeneration, 1, __ATOMIC_RELAXED);
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++)
      if (items[i].stream == stream && buildPass(&items[i]) == pass) CHECK(buildItem(s, &items[i], gen));
  scheduleHoldRefs(s);
  return ncclSuccess;
}

/* NCCL's names of the algorithms and protocols, as profiler events carry them. */
static const char *const profAlgoNames[algoCount] = {
    [algoLocal] = "LOCAL", [algoRing] = "RING", [algoOneHop] = "ONEHOP", [algoChain] = "CHAIN", [algoP2p] = "P2P",
    [algoPairwise] = "PAIRWISE", [algoTree] = "TREE", [algoRecDoubling] = "RECDOUBLING",
    [algoRabenseifner] = "RABENSEIFNER"};
static const char *const profProtoNames[protoCount] = {[protoSimple] = "SIMPLE", [protoLL] = "LL"};

/* The profiler's events of one launch (the items on stream, built into s):
 * its Group event and each operation's Coll or P2p event, which end once
 * the launch is enqueued, as NCCL's do; the tasks of each operation carry
 * its event for their ProxyOp and ProxyStep events. Returns the first
 * item's profiler call (for the KernelLaunch event). */
static const struct profCall *profLaunch(struct schedule *s, const struct groupItem *items, int n,
                                         cudaStream_t stream) {
  const struct profCall *any = NULL;
  for (int i = 0; i < n && !any; i++)
    if (items[i].stream == stream && items[i].prof.ctx) any = &items[i].prof;
  if (!any) return NULL;
  /* One Group event per communicator, in its own context, as NCCL has one
   * per plan: item i's is groups[i] (shared with earlier items of its comm). */
  void **groups = calloc((size_t)n, sizeof *groups);
  if (!groups) return any;
  int steps = profWantsSteps() && scheduleProfiled(s) == 0;
  for (int i = 0; i < n; i++) {
    const struct groupItem *it = &items[i];
    if (it->stream != stream || !it->prof.ctx) continue;
    int j = groupCommLeader(items, i);
    void *group = groups[i] = j < i && groups[j] ? groups[j] : profGroupStart(&it->prof);
    const struct collDesc *d = &it->desc;
    /* The channels its tasks use, numbered 0..nChannels-1 in the events
     * (a plugin looks each channel's KernelCh event up by that number, and
     * counts them to see the operation done). */
    struct task *lastOn[COMM_MAX_CHANNELS + 1] = {0};
    int dense[COMM_MAX_CHANNELS + 1], nch = 0;
    for (int k = 0; k < s->ntasks; k++) {
      struct task *t = &s->tasks[k];
      if (t->opId != it->opId || t->boot != &it->comm->boot || t->channel > COMM_MAX_CHANNELS) continue;
      nch += lastOn[t->channel] == NULL;
      lastOn[t->channel] = t;
    }
    for (int ch = 0, next = 0; ch <= COMM_MAX_CHANNELS; ch++) dense[ch] = lastOn[ch] ? next++ : -1;
    struct profOp op = {d->coll == collSend || d->coll == collRecv,
                        collName(d->coll),
                        d->sendbuff,
                        d->recvbuff,
                        d->count,
                        d->root,
                        d->dtype,
                        nch,
                        it->plan.algo >= 0 && it->plan.algo < algoCount ? profAlgoNames[it->plan.algo] : "Unknown",
                        it->plan.proto >= 0 && it->plan.proto < protoCount ? profProtoNames[it->plan.proto] : "Unknown",
                        it->comm->rank};
    void *ev = profOpStart(&it->comm->prof, d->coll, &it->prof, group, &op);
    struct profKernelCh *slot[COMM_MAX_CHANNELS + 1] = {0};
    for (int k = 0; ev && steps && k < s->ntasks; k++) {
      struct task *t = &s->tasks[k];
      if (t->opId != it->opId || t->boot != &it->comm->boot || t->channel > COMM_MAX_CHANNELS) continue;
      t->prof->ctx = it->prof.ctx;
      t->prof->parent = ev;
      t->prof->channel = dense[t->channel];
      if (!slot[t->channel]) slot[t->channel] = scheduleKernelCh(s);
      slot[t->channel]->tasks++;
      t->prof->kch = slot[t->channel];
    }
    profStop(ev);
  }
  for (int i = 0; i < n; i++) { /* each Group once, after its operations */
    int first = groups[i] != NULL;
    for (int j = 0; first && j < i; j++) first = groups[j] != groups[i];
    if (first) profStop(groups[i]);
  }
  free(groups);
  return any;
}

/* The flight recorder: the items are queued (those on the NULL stream, which
 * the caller runs at once, start running), those on stream start running,
 * or end with res (skipped: not run, an earlier failure on the stream). A
 * failure dumps each communicator's record once. */
static void flightItemsQueued(struct groupItem *items, int n, uint64_t now) {
  for (int i = 0; i < n; i++) {
    const struct tuneChoice *c = &items[i].plan;
    items[i].flightId = flightQueued(&items[i].comm->flight, &items[i].desc.check, c->algo, c->proto, c->nch,
                                     items[i].stream == NULL, now);
  }
}

static void flightItemsRunning(const struct groupItem *items, int n, cudaStream_t stream, uint64_t now) {
  for (int i = 0; i < n; i++)
    if (items[i].stream == stream) flightRunning(&items[i].comm->flight, items[i].flightId, now);
}

static void flightItemsEnded(const struct groupItem *items, int n, cudaStream_t stream, ncclResult_t res, int skipped,
                             uint64_t now) {
  for (int i = 0; i < n; i++) {
    if (items[i].stream != stream) continue;
    struct flightRecorder *f = &items[i].comm->flight;
    if (flightEnded(f, items[i].flightId, res, skipped, now) && groupCommLeader(items, i) == i)
      flightFailureDump(f, res);
  }
}

/* CHORUS_STATS: the items on stream ran for ns. */
static void statsItemsEnded(const struct groupItem *items, int n, cudaStream_t stream, ncclResult_t res, uint64_t ns) {
  if (res != ncclSuccess) return;
  for (int i = 0; i < n; i++)
    if (items[i].stream == stream) statsEnded(&items[i].comm->stats, items[i].desc.coll, itemBytes(&items[i]), ns);
}

/* CHORUS_TRACE: the operations of items on stream ran from startNs to endNs. */
static void traceEnded(const struct groupItem *items, int n, cudaStream_t stream, ncclResult_t res, uint64_t startNs,
                       uint64_t endNs) {
  for (int i = 0; i < n; i++) {
    const struct groupItem *it = &items[i];
    if (it->stream != stream || !it->comm->trace.file) continue;
    const struct collDesc *d = &it->desc;
    int p2p = d->coll == collSend || d->coll == collRecv;
    struct traceOpInfo op = {collName(d->coll),
                             d->check.seq,
                             d->count,
                             itemBytes(it),
                             dtypeName(d->dtype),
                             p2p || d->check.op == OPDESC_NO_OP ? NULL : descOpName(d->check.op),
                             p2p || collRooted(d->coll) ? d->root : -1,
                             p2p,
                             algoName(it->plan.algo),
                             protoName(it->plan.proto),
                             it->plan.nch,
                             res == ncclSuccess ? "success" : ncclGetErrorString(res)};
    traceOp(&it->comm->trace, &op, startNs, endNs);
  }
}

/* CHORUS_TRACE_LEVEL=steps: each task of the items on stream times its steps. */
static void traceWire(struct schedule *s, const struct groupItem *items, int n, cudaStream_t stream) {
  for (int i = 0; i < n && scheduleProfiled(s) == 0; i++) {
    const struct groupItem *it = &items[i];
    if (it->stream != stream || it->comm->trace.level < 2) continue;
    for (int k = 0; k < s->ntasks; k++) {
      struct task *t = &s->tasks[k];
      if (t->opId != it->opId || t->boot != &it->comm->boot) continue;
      t->prof->trace = &it->comm->trace;
      t->prof->traceSeq = it->desc.check.seq;
    }
  }
}

/* The clock of a launch's start and end: the fine one when the stats or
 * the trace time it; else, at the start, the coarse one for the flight
 * recorder (its ms are enough: the fine clock costs 25 ns a reading here),
 * and nothing at the end (the recorder reads the clock itself when an
 * operation fails; a done one shows no duration). 0: not read. */
static uint64_t launchClock(int start) {
  if (statsActive() || traceActive()) return clockNs();
  return start && flightActive() ? clockCoarseNs() : 0;
}

/* Everything that watches a launch end: the flight recorder, the stats, the
 * trace. Callers call it (and launchClock) only when observeAny(): with
 * nothing on, a launch reads one word for all of them. */
static void launchEnded(const struct groupItem *items, int n, cudaStream_t stream, ncclResult_t res, int skipped,
                        uint64_t startNs, uint64_t endNs) {
  if (flightActive()) flightItemsEnded(items, n, stream, res, skipped, endNs);
  if (skipped) return;
  if (statsActive()) statsItemsEnded(items, n, stream, res, endNs - startNs);
  if (traceActive()) traceEnded(items, n, stream, res, startNs, endNs);
}

/* Sends to self must be matched by receives from self in the same launch,
 * or the send would wait forever. */
static ncclResult_t checkSelfP2p(const struct groupItem *items, int n) {
  for (int i = 0; i < n; i++) {
    const struct groupItem *a = &items[i];
    if ((a->desc.coll != collSend && a->desc.coll != collRecv) || a->desc.root != a->comm->rank) continue;
    int balance = 0;
    for (int j = 0; j < n; j++) {
      const struct groupItem *b = &items[j];
      if (b->comm != a->comm || b->desc.root != a->comm->rank) continue;
      if (b->desc.coll == collSend) balance++;
      if (b->desc.coll == collRecv) balance--;
    }
    if (balance != 0) {
      WARN("%s : rank %d: trying to %s self without a matching %s", collName(a->desc.coll), a->comm->rank,
           balance > 0 ? "send to" : "receive from", balance > 0 ? "recv" : "send");
      return ncclInvalidUsage;
    }
  }
  return ncclSuccess;
}

/* A failure is sticky on every communicator of the launch (NCCL reports
 * errors inside a group for the whole group). */
static void markFailed(const struct groupItem *items, int n, cudaStream_t stream, ncclResult_t res) {
  if (res == ncclSuccess) return;
  for (int i = 0; i < n; i++)
    if (items[i].stream == stream) {
      ncclResult_t expected = ncclSuccess;
      if (__atomic_compare_exchange_n(&items[i].comm->asyncError, &expected, res, 0, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE))
        commSetFailText(items[i].comm, NULL);
    }
}

static void busyAdd(const struct groupItem *items, int n, cudaStream_t stream, int delta) {
  for (int i = 0; i < n; i++)
    if (items[i].stream == stream) __atomic_add_fetch(&items[i].comm->busy, delta, __ATOMIC_ACQ_REL);
}

struct streamJob {
  struct streamWork work;
  struct schedule sched;
  int n, cap;
  struct groupItem *items;
  uint64_t startedNs; /* when the worker started running it */
  struct streamJob *nextFree;
};

/* Finished jobs are kept (with their schedule's capacity) for the next
 * launch: calls on a stream then allocate nothing, and the caller's thread
 * does not free into the worker's malloc arena or the other way round. As
 * many as a full stream holds and some, so that a timing loop of calls
 * queued back to back allocates nothing either (with 64 kept, malloc and
 * free took a quarter of a 1-rank 8-byte AllReduce). */
#define STREAM_JOB_CACHE (STREAM_MAX_PENDING + 64)
static pthread_mutex_t jobCacheLock = PTHREAD_MUTEX_INITIALIZER;
static struct streamJob *jobCache;
static int jobCacheCount;

static void jobPut(struct streamJob *job);

/* A new job, its schedule's first arrays and room for one item in memory. */
static struct streamJob *jobNew(void) {
  struct streamJob *job = calloc(1, sizeof *job);
  if (!job) return NULL;
  if (!(job->items = calloc(1, sizeof *job->items)) || scheduleReserve(&job->sched) != 0) {
    scheduleFree(&job->sched);
    free(job->items);
    free(job);
    return NULL;
  }
  job->cap = 1;
  return job;
}

/* Jobs are made STREAM_JOB_BATCH at a time, when the cache has none: a
 * timing loop's first calls (nccl-tests' 20 after one warm-up call) then
 * find jobs the warm-up made, instead of each meeting fresh memory. */
#define STREAM_JOB_BATCH 32

static struct streamJob *jobGet(int n) {
  pthread_mutex_lock(&jobCacheLock);
  struct streamJob *job = jobCache;
  if (job) {
    jobCache = job->nextFree;
    jobCacheCount--;
  }
  pthread_mutex_unlock(&jobCacheLock);
  if (!job) {
    if (!(job = jobNew())) return NULL;
    struct streamJob *more;
    for (int i = 1; i < STREAM_JOB_BATCH && (more = jobNew()); i++) jobPut(more);
  }
  if (job->cap < n) {
    struct groupItem *items = realloc(job->items, sizeof *items * n);
    if (!items) {
      scheduleFree(&job->sched);
      free(job->items);
      free(job);
      return NULL;
    }
    job->items = items;
    job->cap = n;
  }
  job->n = 0;
  scheduleReset(&job->sched);
  return job;
}

/* A kept job whose schedule grew past this many steps gives its arrays back
 * (a burst of large operations would otherwise hold them in every kept job). */
#define STREAM_JOB_KEEP_STEPS 4096

static void jobPut(struct streamJob *job) {
  scheduleReset(&job->sched); /* its staging memory goes back to the pool now, for the jobs queued after it */
  if (job->sched.stepCap > STREAM_JOB_KEEP_STEPS) scheduleFree(&job->sched);
  pthread_mutex_lock(&jobCacheLock);
  if (jobCacheCount < STREAM_JOB_CACHE) {
    job->nextFree = jobCache;
    jobCache = job;
    jobCacheCount++;
    job = NULL;
  }
  pthread_mutex_unlock(&jobCacheLock);
  if (job) {
    scheduleFree(&job->sched);
    free(job->items);
    free(job);
  }
}

/* Reads the PreMulSum scalars that live in the caller's memory now that the
 * operations start running. */
static void readScalars(struct schedule *s) {
  for (int k = 0; k < s->ntasks; k++) redOpReadScalar(&s->tasks[k].red);
}

/* A queued launch starts only on communicators that are still whole: one
 * that failed while it waited (a peer timed out on this very operation and
 * said so) could still complete it from what that peer had sent before it
 * gave up (a small message sits whole in the FIFO), and return success
 * where the peer returned the error. */
static ncclResult_t failedWhileQueued(const struct groupItem *items, int n) {
  for (int i = 0; i < n; i++) {
    if (groupCommLeader(items, i) != i) continue;
    ncclResult_t res = watchAsyncError(items[i].comm);
    if (res == ncclSuccess || res == ncclInProgress) continue;
    char why[sizeof items[i].comm->failText];
    commCopyFailText(items[i].comm, why, sizeof why);
    WARN("%s : rank %d: not started: the communicator failed while the operation waited on its stream (%s: %s)",
         collName(items[i].desc.coll), items[i].comm->rank, ncclGetErrorString(res), why);
    return res;
  }
  return ncclSuccess;
}

static ncclResult_t streamJobRun(struct streamWork *w, ncclResult_t status) {
  struct streamJob *job = (struct streamJob *)w;
  logStartThreadErrors();
  if (status != ncclSuccess) return status;
  if ((status = failedWhileQueued(job->items, job->n)) != ncclSuccess) {
    w->skipped = 1; /* not run: no timeout diagnosis, and its record ends skipped */
    return status;
  }
  watchRunning(job->items, job->n, job->items[0].stream);
  job->startedNs = 0;
  if (observeAny()) {
    job->startedNs = launchClock(1);
    if (flightActive()) flightItemsRunning(job->items, job->n, job->items[0].stream, job->startedNs);
  }
  readScalars(&job->sched);
  return engineRun(&job->sched);
}

static void streamJobDone(struct streamWork *w, ncclResult_t res) {
  struct streamJob *job = (struct streamJob *)w;
  watchEnd(job->items, job->n, job->items[0].stream, res, !w->skipped);
  if (observeAny()) launchEnded(job->items, job->n, job->items[0].stream, res, w->skipped, job->startedNs, launchClock(0));
  markFailed(job->items, job->n, job->items[0].stream, res);
  busyAdd(job->items, job->n, job->items[0].stream, -1);
  jobPut(job);
}

/* Queues the items on stream as one job; *pos: the point after it. */
static ncclResult_t launchStream(const struct groupItem *items, int n, cudaStream_t stream, int urgent,
                                 uint64_t *pos) {
  int m = 0;
  for (int i = 0; i < n; i++) m += items[i].stream == stream;
  struct streamJob *job = jobGet(m);
  if (!job) return ncclSystemError;
  for (int i = 0; i < n; i++)
    if (items[i].stream == stream) job->items[job->n++] = items[i];
  ncclResult_t res = buildItems(&job->sched, job->items, job->n, stream);
  if (res != ncclSuccess) {
    jobPut(job);
    return res;
  }
  if (dumpSchedules()) schedulePrint(&job->sched, stdout);
  int obs = observeAny();
  const struct profCall *prof = obs && profActive() ? profLaunch(&job->sched, job->items, job->n, stream) : NULL;
  if (obs && traceActive()) traceWire(&job->sched, job->items, job->n, stream);
  void *launchEvent = prof ? profKernelLaunchStart(prof, (void *)stream) : NULL;
  job->work.run = streamJobRun;
  job->work.done = streamJobDone;
  job->work.urgent = urgent;
  busyAdd(job->items, job->n, stream, 1);
  watchBegin(job->items, job->n, stream);
  *pos = streamEnqueue(stream, &job->work);
  if (launchEvent) profStop(launchEvent);
  return ncclSuccess;
}

/* 1 when items[i] is the first of the group on its stream (and, with
 * byDevice, of its communicator's device). */
static int firstOfItsStream(const struct groupItem *items, int i, int byDevice) {
  for (int j = 0; j < i; j++)
    if (items[j].stream == items[i].stream && (!byDevice || items[j].comm->cudaDev == items[i].comm->cudaDev))
      return 0;
  return 1;
}

/* 1 when items[i] is the first of the group on its communicator (whose
 * items share one stream by now: streamJoinPlan). */
static int firstOfItsComm(const struct groupItem *items, int i) {
  for (int j = 0; j < i; j++)
    if (items[j].comm == items[i].comm) return 0;
  return 1;
}

/* Each communicator with a part on stream waits for its last launch on
 * another stream, and then (orderNote) ends there. */
static ncclResult_t orderWait(const struct groupItem *items, int n, cudaStream_t stream) {
  for (int i = 0; i < n; i++)
    if (items[i].stream == stream && items[i].comm->orderStream != stream && firstOfItsComm(items, i))
      CHECK(commOrderWait(items[i].comm, stream, collName(items[i].desc.coll)));
  return ncclSuccess;
}
static void orderNote(const struct groupItem *items, int n, cudaStream_t stream, uint64_t pos) {
  for (int i = 0; i < n; i++)
    if (items[i].stream == stream && firstOfItsComm(items, i)) commOrderNote(items[i].comm, stream, pos);
}

/* A launch failed before the parts on the streams from item `from` on (and
 * the NULL stream's) were handed over: their records end, skipped. */
static void launchDropped(const struct groupItem *items, int n, int from, ncclResult_t res) {
  if (!flightActive()) return;
  uint64_t now = launchClock(0);
  for (int i = 0; i < n; i++)
    if (firstOfItsStream(items, i, 0) && (items[i].stream == NULL || i >= from))
      flightItemsEnded(items, n, items[i].stream, res, 1, now);
}

/* 1 when a and b are the same call but for its number (check.seq). */
static int sameCall(const struct collDesc *a, const struct collDesc *b) {
  const struct redOp *ra = &a->red, *rb = &b->red;
  const struct opDesc *ca = &a->check, *cb = &b->check;
  return a->coll == b->coll && a->sendbuff == b->sendbuff && a->recvbuff == b->recvbuff && a->count == b->count &&
         a->dtype == b->dtype && a->root == b->root && ra->dtype == rb->dtype && ra->kind == rb->kind &&
         ra->scaleF == rb->scaleF && ra->scaleI == rb->scaleI && ra->divisor == rb->divisor &&
         ra->scaleAt == rb->scaleAt && ra->finite == rb->finite &&
         ca->count == cb->count && ca->coll == cb->coll && ca->dtype == cb->dtype && ca->op == cb->op &&
         ca->tag == cb->tag && ca->root == cb->root && ca->rank == cb->rank;
}

/* A launch whose NULL-stream schedule may be kept for the next call and
 * reused by it: a single call on the NULL stream, which nobody profiles,
 * traces or prints (those build every call). */
static int inlineReusable(const struct groupItem *items, int n, int obs) {
  return n == 1 && items[0].stream == NULL && !(obs && (profActive() || traceActive())) && !dumpSchedules();
}

/* The NULL stream's part is the call the schedule was last built for: its
 * tasks take this call's number, id and timeout, and it runs again. */
static int inlineReuse(struct schedule *s, const struct groupItem *items, int n, int obs) {
  const struct inlineKey *k = &inlineKey;
  if (!inlineReusable(items, n, obs) || k->comm != items[0].comm->serial || !sameCall(&k->desc, &items[0].desc) ||
      k->plan.algo != items[0].plan.algo || k->plan.proto != items[0].plan.proto || k->plan.nch != items[0].plan.nch)
    return 0;
  uint32_t seq = items[0].desc.check.seq;
  for (int i = 0; i < s->ntasks; i++) {
    struct task *t = &s->tasks[i];
    t->cur = 0;
    t->off = 0;
    t->opId = items[0].opId;
    t->desc.seq = seq;
  }
  s->timeoutNs = commTimeoutNs(items[0].comm);
  return 1;
}

/* After a build of the NULL stream's part: remember what it was built for
 * when it can run again as it is. Its staging memory stays bound until the
 * next build, so only as much as the pool would keep anyway (recursive
 * halving's partial sums, a tree Reduce's, a small in-place AlltoAll's). */
static void inlineRemember(const struct schedule *s, const struct groupItem *items, int n, int obs) {
  if (!inlineReusable(items, n, obs) || !scheduleTempsKept(s)) return;
  inlineKey.comm = items[0].comm->serial;
  inlineKey.desc = items[0].desc;
  inlineKey.plan = items[0].plan;
}

static ncclResult_t launchJoined(struct groupItem *items, int n, struct streamJoin *joins, int nj);

/* Count-0 collectives (no-ops, numbered like the rest) leave the launch:
 * returns how many items are left. A launch of no-ops only marks them
 * done; beside other operations they end with them. A count-0 send or
 * receive stays: it meets its peer's (p2p.c). */
static int dropNoops(struct groupItem *items, int n) {
  int kept = 0;
  for (int i = 0; i < n; i++)
    if (items[i].desc.count > 0 || items[i].desc.coll == collSend || items[i].desc.coll == collRecv) {
      if (kept != i) items[kept] = items[i]; /* a large struct: a call alone copies nothing */
      kept++;
    }
  if (kept == 0)
    for (int i = 0; i < n; i++) watchNoop(&items[i]);
  return kept;
}

ncclResult_t launchItems(struct groupItem *items, int n) {
  CHECK(checkSelfP2p(items, n));
  for (int i = 0; i < n; i++) watchNumber(&items[i]);
  if ((n = dropNoops(items, n)) == 0) return ncclSuccess;
  struct streamJoin *joins;
  int nj = n > 1 ? streamJoinPlan(items, n, &joins) : 0;
  if (nj == 0) return launchJoined(items, n, NULL, 0);
  ncclResult_t res = streamJoinBefore(joins, nj);
  if (res == ncclSuccess) res = launchJoined(items, n, joins, nj);
  ncclResult_t after = streamJoinAfter(joins, nj); /* whatever was queued is waited for */
  free(joins);
  return res != ncclSuccess ? res : after;
}

/* launchItems once each communicator's items share one stream. */
static ncclResult_t launchJoined(struct groupItem *items, int n, struct streamJoin *joins, int nj) {
  /* NULL-stream work waits for what was issued before on its device's
   * blocking streams (CUDA's legacy stream), not for this group's own
   * stream work, queued just below. Parts on several streams (the NULL
   * stream counts: the caller runs it) wait for each other: their workers
   * start at once. */
  int lanes = 0;
  for (int i = 0; i < n; i++) {
    lanes += firstOfItsStream(items, i, 0);
    if (items[i].stream == NULL && firstOfItsStream(items, i, 1)) streamLegacyWait(items[i].comm->cudaDev);
  }
  int obs = observeAny();
  uint64_t queuedNs = obs ? launchClock(1) : 0; /* when the NULL stream's part starts, too (after that wait) */
  if (obs && flightActive()) flightItemsQueued(items, n, queuedNs);
  for (int i = 0; i < n; i++)
    if (items[i].stream != NULL && firstOfItsStream(items, i, 0)) {
      uint64_t pos;
      ncclResult_t res = orderWait(items, n, items[i].stream);
      if (res == ncclSuccess) res = launchStream(items, n, items[i].stream, lanes > 1, &pos);
      if (res != ncclSuccess) {
        launchDropped(items, n, i, res);
        return res;
      }
      orderNote(items, n, items[i].stream, pos);
    }
  ncclResult_t joined = streamJoinCaller(joins, nj);
  if (joined == ncclSuccess) joined = orderWait(items, n, NULL); /* the caller runs the NULL stream's part */
  if (joined != ncclSuccess) {
    launchDropped(items, n, n, joined);
    return joined;
  }
  struct schedule *s = &inlineSched;
  if (!inlineReuse(s, items, n, obs)) {
    inlineKey.comm = 0; /* the schedule is about to hold something else */
    if (s->taskCap == 0) inlineSchedInUse();
    scheduleReset(s);
    ncclResult_t built = buildItems(s, items, n, NULL);
    if (built != ncclSuccess) { /* nothing of the NULL stream's runs */
      launchDropped(items, n, n, built);
      return built;
    }
    inlineRemember(s, items, n, obs);
  }
  if (s->ntasks == 0) { /* the NULL stream's part (if any) has nothing to move (count 0, in place on one rank): done */
    if (obs) launchEnded(items, n, NULL, ncclSuccess, 0, queuedNs, launchClock(0));
    return ncclSuccess;
  }
  if (dumpSchedules()) schedulePrint(s, stdout);
  const struct profCall *prof = obs && profActive() ? profLaunch(s, items, n, NULL) : NULL;
  if (obs && traceActive()) traceWire(s, items, n, NULL);
  if (prof) profStop(profKernelLaunchStart(prof, NULL)); /* the caller runs it: launched at once */
  busyAdd(items, n, NULL, 1);
  watchBegin(items, n, NULL);
  logStartThreadErrors();
  readScalars(s);
  ncclResult_t res = engineRun(s);
  watchEnd(items, n, NULL, res, 1);
  if (obs) launchEnded(items, n, NULL, res, 0, queuedNs, launchClock(0));
  markFailed(items, n, NULL, res);
  busyAdd(items, n, NULL, -1);
  return res;
}

