/* Loading a profiler plugin and speaking its version (plugin/profiler.h).
 * The plugin is looked for as NCCL looks (plugin/open.c): NCCL_PROFILER_PLUGIN
 * as given (a path or a library name), then as libnccl-profiler-<name>.so;
 * unset, as libnccl-profiler.so; "none" loads nothing; STATIC_PLUGIN looks
 * in the program itself. The newest table it exports is used:
 * ncclProfiler_v6, then v5, v4, v3, v2, v1 (whose descriptors are
 * translated, as NCCL's adapters do). */
#define _GNU_SOURCE
#include "plugin/profiler.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/observe.h"
#include "core/param.h"
#include "plugin/open.h"
#include "plugin/profiler_abi.h"

static pthread_mutex_t loadLock = PTHREAD_MUTEX_INITIALIZER;
static int loadRefs;          /* communicators holding the plugin */
static void *pluginLib;
static int pluginVersion;     /* 6 to 1; 0: none loaded */
static const struct profPluginV6 *pluginV6; /* v6 and v5 */
static const struct profPluginV4 *pluginV4;
static const struct profPluginV3 *pluginV3;
static const struct profPluginV2 *pluginV2;
static const struct profPluginV1 *pluginV1;
/* Versions 3, 2 and 1 differ in their descriptors only: the other members
 * of the table, one expression whichever is loaded. */
#define OLD_TABLE(member) (pluginVersion == 3 ? pluginV3->member : pluginVersion == 2 ? pluginV2->member : pluginV1->member)
int profilerPluginLoaded;     /* read without the lock on every hook (trace/profile.h's profActive) */
static int activationMask;    /* the plugin sets and may change it (NCCL's eActivationMask) */
static pid_t loadPid;
static int loadGen; /* plugin loads so far: a thread's GroupApi handle from an earlier one is stale */

/* Under loadLock: the first communicator loads. */
static void pluginLoad(void) {
  char used[512];
  const void *t;
  void *h = pluginLoadNewest("profiler", "PROFILER", subsysInit, paramStr(paramProfilerPlugin), "ncclProfiler", 6, 1,
                             "without a profiler", &pluginVersion, &t, used, sizeof used);
  if (!h) return;
  if (pluginVersion >= 5) pluginV6 = t; /* version 5's table is version 6's */
  else if (pluginVersion == 4) pluginV4 = t;
  else if (pluginVersion == 3) pluginV3 = t;
  else if (pluginVersion == 2) pluginV2 = t;
  else pluginV1 = t;
  pluginLib = h;
  loadPid = getpid();
  __atomic_add_fetch(&loadGen, 1, __ATOMIC_RELAXED);
  const char *pname = pluginVersion >= 5 ? pluginV6->name : pluginVersion == 4 ? pluginV4->name : OLD_TABLE(name);
  INFO(subsysInit, "PROFILER/Plugin: Loaded %s (v%d) from %s", pname ? pname : "(unnamed)", pluginVersion, used);
  __atomic_store_n(&profilerPluginLoaded, 1, __ATOMIC_RELEASE);
  observeBegin();
}

static void pluginUnload(void) {
  if (profilerPluginLoaded) observeEnd();
  __atomic_store_n(&profilerPluginLoaded, 0, __ATOMIC_RELEASE);
  if (pluginLib) dlclose(pluginLib);
  pluginLib = NULL;
  pluginV6 = NULL;
  pluginV4 = NULL;
  pluginV3 = NULL;
  pluginV2 = NULL;
  pluginV1 = NULL;
  pluginVersion = 0;
}

int profilerPluginInit(void **ctx, uint64_t commHash, const char *commName, int nNodes, int nranks, int rank) {
  *ctx = NULL;
  pthread_mutex_lock(&loadLock);
  if (loadRefs == 0) pluginLoad();
  if (pluginVersion) {
    loadRefs++;
    ncclResult_t res =
        pluginVersion >= 5   ? pluginV6->init(ctx, commHash, &activationMask, commName, nNodes, nranks, rank, pluginLog)
        : pluginVersion == 4 ? pluginV4->init(ctx, &activationMask, commName, commHash, nNodes, nranks, rank, pluginLog)
                             : OLD_TABLE(init)(ctx, &activationMask);
    if (res != ncclSuccess) {
      INFO(subsysInit, "PROFILER/Plugin: init failed with error %d: rank %d continues without a profiler", (int)res, rank);
      *ctx = NULL;
      if (--loadRefs == 0) pluginUnload();
    } else {
      INFO(subsysInit, "PROFILER/Plugin: enabled events mask 0x%x", (unsigned)__atomic_load_n(&activationMask, __ATOMIC_RELAXED));
    }
  }
  pthread_mutex_unlock(&loadLock);
  return *ctx != NULL;
}

void profilerPluginFinalize(void *ctx) {
  pthread_mutex_lock(&loadLock);
  if (ctx && pluginVersion) {
    if (pluginVersion >= 5) pluginV6->finalize(ctx);
    else if (pluginVersion == 4) pluginV4->finalize(ctx);
    else OLD_TABLE(finalize)(ctx);
    if (--loadRefs == 0) pluginUnload();
  }
  pthread_mutex_unlock(&loadLock);
}

int profilerPluginGen(void) { return __atomic_load_n(&loadGen, __ATOMIC_RELAXED); }

pid_t profilerPluginPid(void) { return loadPid; }

int profilerPluginMask(void) {
  return __atomic_load_n(&profilerPluginLoaded, __ATOMIC_ACQUIRE) ? __atomic_load_n(&activationMask, __ATOMIC_RELAXED) : 0;
}

/* Versions 4, 3 and 2 share most of their descriptor: a filler per version
 * copies what they have from version 6's (NCH: the collective's channel
 * field, nChannels in 4, nMaxChannels before; KERNELCH: what a KernelCh
 * event gets, which version 2 does not know; Coll and P2p hang off the
 * Group, as before version 5). 0 for an event the version does not know. */
#define OLD_DESCR_FILLER(NAME, T, NCH, KERNELCH)                  \
  static int NAME(T *o, const struct profDescrV6 *d) {           \
    memset(o, 0, sizeof *o);                                      \
    o->type = (uint8_t)d->type;                                   \
    o->parentObj = d->parentObj;                                  \
    o->rank = d->rank;                                            \
    switch (d->type) {                                            \
      case profGroup: return 1;                                   \
      case profColl:                                              \
        o->coll.seqNumber = d->coll.seqNumber;                    \
        o->coll.func = d->coll.func;                              \
        o->coll.sendBuff = d->coll.sendBuff;                      \
        o->coll.recvBuff = d->coll.recvBuff;                      \
        o->coll.count = d->coll.count;                            \
        o->coll.root = d->coll.root;                              \
        o->coll.datatype = d->coll.datatype;                      \
        o->coll.NCH = d->coll.nChannels;                          \
        o->coll.nWarps = d->coll.nWarps;                          \
        o->coll.algo = d->coll.algo;                              \
        o->coll.proto = d->coll.proto;                            \
        o->parentObj = d->coll.parentGroup;                       \
        return 1;                                                 \
      case profP2p:                                               \
        o->p2p.func = d->p2p.func;                                \
        o->p2p.buff = d->p2p.buff;                                \
        o->p2p.datatype = d->p2p.datatype;                        \
        o->p2p.count = d->p2p.count;                              \
        o->p2p.peer = d->p2p.peer;                                \
        o->parentObj = d->p2p.parentGroup;                        \
        return 1;                                                 \
      case profProxyOp:                                           \
        o->proxyOp.pid = d->proxyOp.pid;                          \
        o->proxyOp.channelId = d->proxyOp.channelId;              \
        o->proxyOp.peer = d->proxyOp.peer;                        \
        o->proxyOp.nSteps = d->proxyOp.nSteps;                    \
        o->proxyOp.chunkSize = d->proxyOp.chunkSize;              \
        o->proxyOp.isSend = d->proxyOp.isSend;                    \
        return 1;                                                 \
      case profProxyStep: o->proxyStep.step = d->proxyStep.step; return 1; \
      case profKernelCh: KERNELCH;                                \
      default: return 0;                                          \
    }                                                             \
  }
#define KERNELCH_CHANNEL(o, d) \
  o->kernelCh.channelId = d->kernelCh.channelId; \
  return 1
OLD_DESCR_FILLER(fillV4, struct profDescrV4, nChannels, KERNELCH_CHANNEL(o, d))
OLD_DESCR_FILLER(fillV3, struct profDescrV3, nMaxChannels, KERNELCH_CHANNEL(o, d))
OLD_DESCR_FILLER(fillV2, struct profDescrV2, nMaxChannels, return 0)

const char *profilerDtypeName(int dtype) {
  static const char *names[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",  "ncclUint32",
                                "ncclInt64",   "ncclUint64",  "ncclFloat16", "ncclFloat32",
                                "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  return dtype >= 0 && dtype < (int)(sizeof names / sizeof names[0]) ? names[dtype] : "Unknown";
}

/* Version 1's numbers for the names later versions carry (NCCL's
 * ncclFunc_t and NCCL_ALGO_* / NCCL_PROTO_* values). chorus's algorithms
 * that NCCL does not have get PAT, as NCCL's own adapter gives any name it
 * does not know; version 2 and later carry the real name. */
static uint8_t v1Number(const char *name, const char *const *names, const uint8_t *numbers, int n, uint8_t other) {
  for (int i = 0; name && i < n; i++)
    if (strcmp(name, names[i]) == 0) return numbers[i];
  return other;
}

static uint8_t v1Func(const char *f) {
  static const char *const names[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "Send",
                                      "Recv",      "AlltoAll", "Scatter", "Gather"};
  static const uint8_t numbers[] = {profV1FuncBroadcast, profV1FuncReduce,   profV1FuncAllGather, profV1FuncReduceScatter,
                                    profV1FuncAllReduce, profV1FuncSend,     profV1FuncRecv,      profV1FuncAlltoAll,
                                    profV1FuncScatter,   profV1FuncGather};
  return v1Number(f, names, numbers, (int)(sizeof numbers), profV1FuncSendRecv);
}

static uint8_t v1Algo(const char *a) {
  static const char *const names[] = {"TREE", "RING"};
  static const uint8_t numbers[] = {profV1AlgoTree, profV1AlgoRing};
  return v1Number(a, names, numbers, (int)(sizeof numbers), profV1AlgoPat);
}

static uint8_t v1Proto(const char *p) {
  static const char *const names[] = {"LL", "LL128"};
  static const uint8_t numbers[] = {profV1ProtoLL, profV1ProtoLL128};
  return v1Number(p, names, numbers, (int)(sizeof numbers), profV1ProtoSimple);
}

static uint8_t v1Datatype(const char *dt) {
  for (int i = 0; dt && i < ncclNumTypes; i++)
    if (strcmp(dt, profilerDtypeName(i)) == 0) return (uint8_t)i;
  return ncclFloat64; /* what NCCL's adapter gives a name it does not know */
}

/* Version 1: version 2's descriptor with numbers for names. */
static int fillV1(struct profDescrV1 *o, const struct profDescrV6 *d) {
  struct profDescrV2 v2;
  if (!fillV2(&v2, d)) return 0;
  memset(o, 0, sizeof *o);
  o->type = v2.type;
  o->parentObj = v2.parentObj;
  o->rank = v2.rank;
  switch (d->type) {
    case profColl:
      o->coll.seqNumber = v2.coll.seqNumber;
      o->coll.func = v1Func(v2.coll.func);
      o->coll.sendBuff = v2.coll.sendBuff;
      o->coll.recvBuff = v2.coll.recvBuff;
      o->coll.count = v2.coll.count;
      o->coll.root = v2.coll.root;
      o->coll.datatype = v1Datatype(v2.coll.datatype);
      o->coll.nMaxChannels = v2.coll.nMaxChannels;
      o->coll.nWarps = v2.coll.nWarps;
      o->coll.algo = v1Algo(v2.coll.algo);
      o->coll.proto = v1Proto(v2.coll.proto);
      break;
    case profP2p:
      o->p2p.func = v1Func(v2.p2p.func);
      o->p2p.buff = v2.p2p.buff;
      o->p2p.datatype = v1Datatype(v2.p2p.datatype);
      o->p2p.count = v2.p2p.count;
      o->p2p.peer = v2.p2p.peer;
      break;
    case profProxyOp:
      o->proxyOp.pid = v2.proxyOp.pid;
      o->proxyOp.channelId = v2.proxyOp.channelId;
      o->proxyOp.peer = v2.proxyOp.peer;
      o->proxyOp.nSteps = v2.proxyOp.nSteps;
      o->proxyOp.chunkSize = v2.proxyOp.chunkSize;
      o->proxyOp.isSend = v2.proxyOp.isSend;
      break;
    case profProxyStep: o->proxyStep.step = v2.proxyStep.step; break;
    default: break; /* Group: the type and parent only */
  }
  return 1;
}

void *profilerPluginStartEvent(void *ctx, struct profDescrV6 *d) {
  void *h = NULL;
  if (!ctx) return NULL;
  if (pluginVersion >= 5) {
    pluginV6->startEvent(ctx, &h, d);
  } else if (pluginVersion == 4) {
    struct profDescrV4 o;
    if (!fillV4(&o, d)) return NULL;
    if (d->type == profP2p) o.p2p.nChannels = d->p2p.nChannels; /* what version 3 lacks */
    if (d->type == profKernelCh) o.kernelCh.pTimer = d->kernelCh.pTimer;
    pluginV4->startEvent(ctx, &h, &o);
  } else if (pluginVersion == 3) {
    struct profDescrV3 o;
    if (!fillV3(&o, d)) return NULL;
    pluginV3->startEvent(ctx, &h, &o);
  } else if (pluginVersion == 2) {
    struct profDescrV2 o;
    if (!fillV2(&o, d)) return NULL;
    pluginV2->startEvent(ctx, &h, &o);
  } else {
    struct profDescrV1 o;
    if (!fillV1(&o, d)) return NULL;
    pluginV1->startEvent(ctx, &h, &o);
  }
  return h;
}

/* Versions 3 to 1 know the step wait states only (and take no arguments
 * with them), as NCCL's adapters forward. */
static int knownToV3(int state) {
  return state == profStateStepSendGpuWait || state == profStateStepSendWait || state == profStateStepRecvWait ||
         state == profStateStepRecvFlushWait || state == profStateStepRecvGpuWait;
}

void profilerPluginRecordState(void *h, int state, union profStateArgs *a) {
  if (!h || !__atomic_load_n(&profilerPluginLoaded, __ATOMIC_ACQUIRE)) return;
  if (pluginVersion >= 5) pluginV6->recordEventState(h, state, a);
  else if (pluginVersion == 4) pluginV4->recordEventState(h, state, a);
  else if (knownToV3(state)) {
    union profStateArgsV3 v3;
    memset(&v3, 0, sizeof v3);
    OLD_TABLE(recordEventState)(h, state, &v3);
  }
}

void profilerPluginStopEvent(void *h) {
  if (!h || !__atomic_load_n(&profilerPluginLoaded, __ATOMIC_ACQUIRE)) return;
  if (pluginVersion >= 5) pluginV6->stopEvent(h);
  else if (pluginVersion == 4) pluginV4->stopEvent(h);
  else OLD_TABLE(stopEvent)(h);
}
