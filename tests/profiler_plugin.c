/* A profiler plugin for the tests (NCCL's plugin interface, version
 * PLUGIN_VERSION: 6 to 1): it writes every call it gets to
 * $CHORUS_TEST_PROFILE_DIR/prof.<pid>.<n>.log, one file per communicator,
 * one line per call, for test_profiler to check:
 *   init RANK NRANKS NNODES HASH          (versions 3 to 1 are told none of them: -1 -1 -1 0)
 *   start ID TYPE PARENT RANK fields...   (PARENT: the parent's ID, 0: none, -1: not ours)
 *   state ID STATE TRANSSIZE t=NS          (NS: CLOCK_MONOTONIC nanoseconds)
 *   stop ID t=NS
 *   finalize
 * The activation mask comes from CHORUS_TEST_PROFILE_MASK (default: every
 * event chorus can send). Version 1's numbers are written as the names
 * later versions carry, from NCCL's enums as written here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plugin/profiler_abi.h"

#ifndef PLUGIN_VERSION
#define PLUGIN_VERSION 6
#endif

#define EVENT_MAGIC 0x50524f46u
#define TABLE_NAME_(v) ncclProfiler_v##v
#define TABLE_NAME(v) TABLE_NAME_(v)

struct context {
  FILE *out;
  pthread_mutex_t lock;
};

struct event {
  uint64_t type; /* first, as NCCL's example plugin keeps it */
  unsigned magic;
  long id;
  struct context *ctx;
};

static long nextId = 1;
static int nextFile;

static long parentId(const void *parent) {
  if (!parent) return 0;
  const struct event *e = parent;
  return e->magic == EVENT_MAGIC ? e->id : -1;
}

static ncclResult_t openContext(void **context, int *mask, uint64_t hash, int nNodes, int nranks, int rank,
                               const char *name) {
  const char *dir = getenv("CHORUS_TEST_PROFILE_DIR");
  const char *m = getenv("CHORUS_TEST_PROFILE_MASK");
  *mask = m ? (int)strtol(m, NULL, 0) : 0xfff; /* Group .. KernelLaunch */
  struct context *c = calloc(1, sizeof *c);
  if (!c || !dir) return ncclInternalError;
  char path[4096];
  snprintf(path, sizeof path, "%s/prof.%d.%d.log", dir, (int)getpid(), __atomic_fetch_add(&nextFile, 1, __ATOMIC_RELAXED));
  c->out = fopen(path, "w");
  if (!c->out) return ncclSystemError;
  pthread_mutex_init(&c->lock, NULL);
  fprintf(c->out, "init %d %d %d %llu %s\n", rank, nranks, nNodes, (unsigned long long)hash, name ? name : "(null)");
  fflush(c->out);
  *context = c;
  return ncclSuccess;
}

static struct event *newEvent(struct context *c, uint64_t type) {
  struct event *e = calloc(1, sizeof *e); /* never freed: later events name it as their parent */
  e->type = type;
  e->magic = EVENT_MAGIC;
  e->id = __atomic_fetch_add(&nextId, 1, __ATOMIC_RELAXED);
  e->ctx = c;
  return e;
}

#define LINE(c, ...)                 \
  do {                               \
    pthread_mutex_lock(&(c)->lock);  \
    fprintf((c)->out, __VA_ARGS__);  \
    fflush((c)->out);                \
    pthread_mutex_unlock(&(c)->lock); \
  } while (0)

#if PLUGIN_VERSION >= 5
typedef struct profDescrV6 descr_t;
#elif PLUGIN_VERSION == 4
typedef struct profDescrV4 descr_t;
#elif PLUGIN_VERSION == 3
typedef struct profDescrV3 descr_t;
#elif PLUGIN_VERSION == 2
typedef struct profDescrV2 descr_t;
#else
typedef struct profDescrV1 descr_t;
#endif

static unsigned long long nowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static inline const char *str(const char *s) { return s ? s : "-"; }

#if PLUGIN_VERSION == 1
/* NCCL's ncclFunc_t, ncclDataType_t, NCCL_ALGO_* and NCCL_PROTO_* values
 * (nccl_common.h, nccl.h, nccl_tuner.h), back to names. */
static const char *v1Name(unsigned v, const char *const *names, unsigned n) { return v < n ? names[v] : "-"; }
static const char *const funcs[] = {"Broadcast", "Reduce",   "AllGather", "ReduceScatter", "AllReduce", "SendRecv",
                                    "Send",      "Recv",     "AlltoAll",  "Scatter",       "Gather"};
static const char *const dtypes[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",  "ncclUint32",
                                     "ncclInt64",   "ncclUint64",  "ncclFloat16", "ncclFloat32",
                                     "ncclFloat64", "ncclBfloat16"};
static const char *const algos[] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
static const char *const protos[] = {"LL", "LL128", "SIMPLE"};
#define FUNC(x) v1Name((x), funcs, sizeof funcs / sizeof *funcs)
#define DTYPE(x) v1Name((x), dtypes, sizeof dtypes / sizeof *dtypes)
#define ALGO(x) v1Name((x), algos, sizeof algos / sizeof *algos)
#define PROTO(x) v1Name((x), protos, sizeof protos / sizeof *protos)
#else
#define FUNC(x) str(x)
#define DTYPE(x) str(x)
#define ALGO(x) str(x)
#define PROTO(x) str(x)
#endif

static ncclResult_t startEvent(void *context, void **handle, descr_t *d) {
  struct context *c = context;
  struct event *e = newEvent(c, d->type);
  *handle = e;
  long p = parentId(d->parentObj);
  switch (d->type) {
#if PLUGIN_VERSION >= 5
    case profGroupApi: LINE(c, "start %ld GroupApi %ld %d depth=%d\n", e->id, p, d->rank, d->groupApi.groupDepth); break;
    case profCollApi:
      LINE(c, "start %ld CollApi %ld %d func=%s count=%zu dtype=%s root=%d\n", e->id, p, d->rank, str(d->collApi.func),
           d->collApi.count, str(d->collApi.datatype), d->collApi.root);
      break;
    case profP2pApi:
      LINE(c, "start %ld P2pApi %ld %d func=%s count=%zu dtype=%s\n", e->id, p, d->rank, str(d->p2pApi.func),
           d->p2pApi.count, str(d->p2pApi.datatype));
      break;
    case profKernelLaunch: LINE(c, "start %ld KernelLaunch %ld %d\n", e->id, p, d->rank); break;
#endif
    case profGroup: LINE(c, "start %ld Group %ld %d\n", e->id, p, d->rank); break;
    case profColl:
      LINE(c, "start %ld Coll %ld %d seq=%llu func=%s count=%zu dtype=%s root=%d nch=%d algo=%s proto=%s group=%ld\n",
           e->id, p, d->rank, (unsigned long long)d->coll.seqNumber, FUNC(d->coll.func), d->coll.count,
           DTYPE(d->coll.datatype), d->coll.root,
#if PLUGIN_VERSION >= 4
           d->coll.nChannels,
#else
           d->coll.nMaxChannels,
#endif
           ALGO(d->coll.algo), PROTO(d->coll.proto),
#if PLUGIN_VERSION >= 5
           parentId(d->coll.parentGroup)
#else
           p
#endif
      );
      break;
    case profP2p:
      LINE(c, "start %ld P2p %ld %d func=%s count=%zu dtype=%s peer=%d nch=%d\n", e->id, p, d->rank, FUNC(d->p2p.func),
           d->p2p.count, DTYPE(d->p2p.datatype), d->p2p.peer,
#if PLUGIN_VERSION >= 4
           d->p2p.nChannels
#else
           1 /* versions 3 to 1 do not say */
#endif
      );
      break;
    case profProxyOp:
      LINE(c, "start %ld ProxyOp %ld %d pid=%d ch=%d peer=%d nsteps=%d chunk=%d send=%d\n", e->id, p, d->rank,
           (int)d->proxyOp.pid, d->proxyOp.channelId, d->proxyOp.peer, d->proxyOp.nSteps, d->proxyOp.chunkSize,
           d->proxyOp.isSend);
      break;
    case profProxyStep: LINE(c, "start %ld ProxyStep %ld %d step=%d\n", e->id, p, d->rank, d->proxyStep.step); break;
#if PLUGIN_VERSION >= 3
    case profKernelCh:
      LINE(c, "start %ld KernelCh %ld %d ch=%d timer=%llu\n", e->id, p, d->rank, d->kernelCh.channelId,
#if PLUGIN_VERSION >= 4
           (unsigned long long)d->kernelCh.pTimer
#else
           1ull /* version 3 has no timer */
#endif
      );
      break;
#endif
    default: LINE(c, "start %ld Unknown%llu %ld %d\n", e->id, (unsigned long long)d->type, p, d->rank); break;
  }
  return ncclSuccess;
}

static ncclResult_t stopEvent(void *handle) {
  struct event *e = handle;
  if (!e) return ncclSuccess;
  LINE(e->ctx, "stop %ld t=%llu\n", e->magic == EVENT_MAGIC ? e->id : -1, nowNs());
  return ncclSuccess;
}

#if PLUGIN_VERSION >= 4
typedef union profStateArgs args_t;
#define TRANS(a) ((a)->proxyStep.transSize)
#else
typedef union profStateArgsV3 args_t;
#define TRANS(a) ((a)->proxyOp.transSize)
#endif

static ncclResult_t recordEventState(void *handle, int state, args_t *args) {
  struct event *e = handle;
  if (!e) return ncclSuccess;
  LINE(e->ctx, "state %ld %d %zu t=%llu\n", e->id, state, args ? TRANS(args) : 0, nowNs());
  return ncclSuccess;
}

static ncclResult_t finalize(void *context) {
  struct context *c = context;
  LINE(c, "finalize\n");
  fclose(c->out);
  return ncclSuccess;
}

#if PLUGIN_VERSION >= 5
static ncclResult_t init(void **context, uint64_t commId, int *mask, const char *commName, int nNodes, int nranks,
                         int rank, profLogFn logfn) {
  logfn(3, 1, "test-plugin", __LINE__, "test profiler plugin v%d: init rank %d", PLUGIN_VERSION, rank);
  return openContext(context, mask, commId, nNodes, nranks, rank, commName);
}
__attribute__((visibility("default"))) const struct profPluginV6 TABLE_NAME(PLUGIN_VERSION) = {
    "chorus-test", init, startEvent, stopEvent, recordEventState, finalize};
#elif PLUGIN_VERSION == 4
static ncclResult_t init(void **context, int *mask, const char *commName, uint64_t commHash, int nNodes, int nranks,
                         int rank, profLogFn logfn) {
  logfn(3, 1, "test-plugin", __LINE__, "test profiler plugin v4: init rank %d", rank);
  return openContext(context, mask, commHash, nNodes, nranks, rank, commName);
}
__attribute__((visibility("default"))) const struct profPluginV4 ncclProfiler_v4 = {
    "chorus-test", init, startEvent, stopEvent, recordEventState, finalize};
#else
static ncclResult_t init(void **context, int *mask) { return openContext(context, mask, 0, -1, -1, -1, NULL); }
#define OLD_TABLE_(v) profPluginV##v
#define OLD_TABLE(v) OLD_TABLE_(v)
__attribute__((visibility("default"))) const struct OLD_TABLE(PLUGIN_VERSION) TABLE_NAME(PLUGIN_VERSION) = {
    "chorus-test", init, startEvent, stopEvent, recordEventState, finalize};
#endif
