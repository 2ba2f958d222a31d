/* Loading a profiler plugin and speaking its version (profile.h). The
 * plugin is looked for as NCCL looks: NCCL_PROFILER_PLUGIN as given (a path
 * or a library name), then as libnccl-profiler-<name>.so; unset, as
 * libnccl-profiler.so; "none" loads nothing; STATIC_PLUGIN looks in the
 * program itself. The newest table it exports is used: ncclProfiler_v6,
 * then v5, v4, v3, v2, v1 (whose descriptors are translated, as NCCL's
 * adapters do). */
#define _GNU_SOURCE
#include "profile/profile.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"
#include "plugin/open.h"
#include "profile/abi.h"

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
int profPluginLoaded;         /* read without the lock on every hook (profActive) */
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
  __atomic_store_n(&profPluginLoaded, 1, __ATOMIC_RELEASE);
  observeBegin();
}

static void pluginUnload(void) {
  if (profPluginLoaded) observeEnd();
  __atomic_store_n(&profPluginLoaded, 0, __ATOMIC_RELEASE);
  if (pluginLib) dlclose(pluginLib);
  pluginLib = NULL;
  pluginV6 = NULL;
  pluginV4 = NULL;
  pluginV3 = NULL;
  pluginV2 = NULL;
  pluginV1 = NULL;
  pluginVersion = 0;
}

void profCommInit(struct profComm *p, uint64_t commHash, const char *commName, int nNodes, int nranks, int rank) {
  memset(p, 0, sizeof *p);
  pthread_mutex_lock(&loadLock);
  if (loadRefs == 0) pluginLoad();
  if (pluginVersion) {
    loadRefs++;
    ncclResult_t res =
        pluginVersion >= 5   ? pluginV6->init(&p->ctx, commHash, &activationMask, commName, nNodes, nranks, rank, pluginLog)
        : pluginVersion == 4 ? pluginV4->init(&p->ctx, &activationMask, commName, commHash, nNodes, nranks, rank, pluginLog)
                             : OLD_TABLE(init)(&p->ctx, &activationMask);
    if (res != ncclSuccess) {
      INFO(subsysInit, "PROFILER/Plugin: init failed with error %d: rank %d continues without a profiler", (int)res, rank);
      p->ctx = NULL;
      if (--loadRefs == 0) pluginUnload();
    } else {
      INFO(subsysInit, "PROFILER/Plugin: enabled events mask 0x%x", (unsigned)__atomic_load_n(&activationMask, __ATOMIC_RELAXED));
    }
  }
  pthread_mutex_unlock(&loadLock);
}

void profCommFinalize(struct profComm *p) {
  pthread_mutex_lock(&loadLock);
  if (p->ctx && pluginVersion) {
    if (pluginVersion >= 5) pluginV6->finalize(p->ctx);
    else if (pluginVersion == 4) pluginV4->finalize(p->ctx);
    else OLD_TABLE(finalize)(p->ctx);
    p->ctx = NULL;
    if (--loadRefs == 0) pluginUnload();
  }
  pthread_mutex_unlock(&loadLock);
}

static int maskNow(void) {
  return __atomic_load_n(&profPluginLoaded, __ATOMIC_ACQUIRE) ? __atomic_load_n(&activationMask, __ATOMIC_RELAXED) : 0;
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

/* NCCL's names for what events carry. */
static const char *dtypeNcclName(int dtype) {
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
    if (strcmp(dt, dtypeNcclName(i)) == 0) return (uint8_t)i;
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

/* Starts an event described in version 6's terms, translated for older
 * plugins (which know no API events: those are not sent to them). */
static void *startEvent(void *ctx, struct profDescrV6 *d) {
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

static void recordStateArgs(void *h, int state, union profStateArgs *a) {
  if (!h || !__atomic_load_n(&profPluginLoaded, __ATOMIC_ACQUIRE)) return;
  if (pluginVersion >= 5) pluginV6->recordEventState(h, state, a);
  else if (pluginVersion == 4) pluginV4->recordEventState(h, state, a);
  else if (knownToV3(state)) {
    union profStateArgsV3 v3;
    memset(&v3, 0, sizeof v3);
    OLD_TABLE(recordEventState)(h, state, &v3);
  }
}

static void recordState(void *h, int state, size_t transSize) {
  union profStateArgs a;
  memset(&a, 0, sizeof a);
  a.proxyStep.transSize = transSize;
  recordStateArgs(h, state, &a);
}

void profStop(void *h) {
  if (!h || !__atomic_load_n(&profPluginLoaded, __ATOMIC_ACQUIRE)) return;
  if (pluginVersion >= 5) pluginV6->stopEvent(h);
  else if (pluginVersion == 4) pluginV4->stopEvent(h);
  else OLD_TABLE(stopEvent)(h);
}

/* The API events of this thread: the open GroupApi event, the group depth
 * it opened at, and where it is between ncclGroupStart and ncclGroupEnd. */
static _Thread_local struct {
  void *groupApi;
  void *ctx;
  int startStopped;
  int gen; /* the plugin load it belongs to */
} api;

/* An event starts when the mask asks for it or for an event below it, as
 * NCCL enables them (src/plugin/profiler.cc): a plugin that asks only for
 * KernelCh still gets the GroupApi, CollApi, Group and Coll events its
 * KernelCh events hang from. */
#define PROF_BELOW_TASK (profProxyOp | profProxyStep | profKernelCh | profNetPlugin)
#define PROF_TASK_EVENTS (profGroup | profColl | profP2p | PROF_BELOW_TASK)
#define PROF_API_EVENTS (profGroupApi | profCollApi | profP2pApi | profKernelLaunch | PROF_TASK_EVENTS)

void profApiCall(const struct profComm *p, struct profCall *out, int depth, int p2p, const char *func, size_t count,
                 int dtype, int root, void *stream) {
  memset(out, 0, sizeof *out);
  int mask = maskNow();
  if (!p->ctx || !(mask & PROF_API_EVENTS)) return;
  out->ctx = p->ctx;
  if (api.groupApi && api.gen != __atomic_load_n(&loadGen, __ATOMIC_RELAXED)) api.groupApi = NULL;
  if (!api.groupApi) {
    struct profDescrV6 d;
    memset(&d, 0, sizeof d);
    d.type = profGroupApi;
    d.groupApi.groupDepth = depth;
    api.groupApi = startEvent(p->ctx, &d);
    api.ctx = p->ctx;
    api.gen = __atomic_load_n(&loadGen, __ATOMIC_RELAXED);
    api.startStopped = 0;
  }
  if (api.groupApi && !api.startStopped) { /* ncclGroupStart has returned (or the call's implicit one) */
    recordState(api.groupApi, profStateGroupStartApiStop, 0);
    api.startStopped = 1;
  }
  out->groupApi = api.groupApi;
  struct profDescrV6 d;
  memset(&d, 0, sizeof d);
  d.parentObj = api.groupApi;
  if (p2p) {
    d.type = profP2pApi;
    d.p2pApi.func = func;
    d.p2pApi.count = count;
    d.p2pApi.datatype = dtypeNcclName(dtype);
    d.p2pApi.stream = stream;
  } else {
    d.type = profCollApi;
    d.collApi.func = func;
    d.collApi.count = count;
    d.collApi.datatype = dtypeNcclName(dtype);
    d.collApi.root = root;
    d.collApi.stream = stream;
  }
  int callMask = (p2p ? profP2pApi | profP2p : profCollApi | profColl) | PROF_BELOW_TASK;
  if (api.groupApi && (mask & callMask)) out->callApi = startEvent(p->ctx, &d);
}

void profApiCallEnd(const struct profCall *call) { profStop(call->callApi); }

void profApiGroupEndBeginLoaded(void) {
  if (api.groupApi) recordState(api.groupApi, profStateGroupEndApiStart, 0);
}

void profApiGroupEndDoneLoaded(void) {
  /* Called only with a plugin loaded: no thread-local read (a call, in a
   * shared library) on every launch; a handle left by an unloaded plugin is
   * dropped at the next call (loadGen). */
  if (api.groupApi) profStop(api.groupApi);
  api.groupApi = NULL;
  api.ctx = NULL;
}

void *profGroupStart(const struct profCall *any) {
  if (!any->ctx || !(maskNow() & PROF_TASK_EVENTS)) return NULL;
  struct profDescrV6 d;
  memset(&d, 0, sizeof d);
  d.type = profGroup; /* no parent, as NCCL sends it */
  return startEvent(any->ctx, &d);
}

void *profOpStart(struct profComm *p, int funcIndex, const struct profCall *call, void *group,
                  const struct profOp *op) {
  uint64_t seq = funcIndex >= 0 && funcIndex < 16 ? p->seq[funcIndex]++ : 0;
  int mask = maskNow();
  int wanted = (op->p2p ? profP2p : profColl) | PROF_BELOW_TASK;
  if (!call->ctx || !(mask & wanted)) return NULL;
  struct profDescrV6 d;
  memset(&d, 0, sizeof d);
  d.parentObj = call->callApi;
  d.rank = op->rank;
  if (op->p2p) {
    d.type = profP2p;
    d.p2p.func = op->func;
    d.p2p.buff = op->recvBuff ? op->recvBuff : (void *)op->sendBuff;
    d.p2p.datatype = dtypeNcclName(op->dtype);
    d.p2p.count = op->count;
    d.p2p.peer = op->root;
    d.p2p.nChannels = (uint8_t)op->nChannels;
    d.p2p.parentGroup = group;
  } else {
    d.type = profColl;
    d.coll.seqNumber = seq;
    d.coll.func = op->func;
    d.coll.sendBuff = op->sendBuff;
    d.coll.recvBuff = op->recvBuff;
    d.coll.count = op->count;
    d.coll.root = op->root;
    d.coll.datatype = dtypeNcclName(op->dtype);
    d.coll.nChannels = (uint8_t)op->nChannels;
    d.coll.algo = op->algo;
    d.coll.proto = op->proto;
    d.coll.parentGroup = group;
  }
  return startEvent(call->ctx, &d);
}

void *profKernelLaunchStart(const struct profCall *call, void *stream) {
  if (!call->ctx || !call->groupApi || !(maskNow() & profKernelLaunch)) return NULL;
  struct profDescrV6 d;
  memset(&d, 0, sizeof d);
  d.type = profKernelLaunch;
  d.parentObj = call->groupApi;
  d.kernelLaunch.stream = stream;
  return startEvent(call->ctx, &d);
}

int profWantsSteps(void) { return (maskNow() & (profProxyOp | profProxyStep | profKernelCh)) != 0; }

void profTaskBegin(struct profTask *t) {
  t->begun = 1;
  struct profKernelCh *k = t->kch;
  if (!k || k->started) return;
  k->started = 1;
  if (!(maskNow() & profKernelCh)) return;
  struct profDescrV6 d;
  memset(&d, 0, sizeof d);
  d.type = profKernelCh;
  d.parentObj = t->parent;
  d.kernelCh.channelId = (uint8_t)t->channel;
  d.kernelCh.pTimer = clockNs(); /* NCCL's is the GPU's global timer, in ns too */
  k->handle = startEvent(t->ctx, &d);
}

/* dir's ProxyOp is over: it ends now, or after the last of its posted
 * steps when some are still being sent. */
static void opFinish(struct profTask *t, int dir) {
  profStop(t->step[dir]);
  t->step[dir] = NULL;
  if (!t->op[dir]) return;
  int last = (t->flyHead + t->flyCount + PROF_FLYING - 1) % PROF_FLYING;
  if (dir == 0 && t->flyCount && !t->fly[last].opEnd) t->fly[last].opEnd = t->op[dir];
  else profStop(t->op[dir]);
  t->op[dir] = NULL;
}

void profFlyingDone(struct profTask *t) {
  if (!t->flyCount) return;
  int i = t->flyHead;
  /* The slot has left this rank: NCCL's send step ends when the network
   * says so, after SendWait. */
  profStop(t->fly[i].step);
  profStop(t->fly[i].opEnd);
  memset(&t->fly[i], 0, sizeof t->fly[i]);
  t->flyHead = (uint8_t)((i + 1) % PROF_FLYING);
  t->flyCount--;
}

void profStepBegin(struct profTask *t, int dir, int rank, int channel, int peer, int nSteps, int chunk) {
  int mask = maskNow();
  if (t->op[dir] && t->opPeer[dir] != peer) opFinish(t, dir);
  if (!t->op[dir]) {
    struct profDescrV6 d;
    memset(&d, 0, sizeof d);
    d.type = profProxyOp;
    d.parentObj = t->parent;
    d.rank = rank;
    d.proxyOp.pid = loadPid;
    d.proxyOp.channelId = (uint8_t)channel;
    d.proxyOp.peer = peer;
    d.proxyOp.nSteps = nSteps;
    d.proxyOp.chunkSize = chunk;
    d.proxyOp.isSend = dir == 0;
    t->op[dir] = (mask & (profProxyOp | profProxyStep)) ? startEvent(t->ctx, &d) : NULL;
    t->opPeer[dir] = peer;
    t->stepNo[dir] = 0;
    if (t->op[dir]) recordState(t->op[dir], profStateProxyOpInProgress, 0);
  }
  if (!t->step[dir] && t->op[dir] && (mask & profProxyStep)) {
    struct profDescrV6 d;
    memset(&d, 0, sizeof d);
    d.type = profProxyStep;
    d.parentObj = t->op[dir];
    d.rank = rank;
    d.proxyStep.step = t->stepNo[dir];
    t->step[dir] = startEvent(t->ctx, &d);
    t->waited[dir] = 0;
    /* A send step first waits for its data (NCCL: the GPU's), a receive
     * for the peer's (NCCL: once the network receive is posted). */
    if (t->step[dir]) recordState(t->step[dir], dir ? profStateStepRecvWait : profStateStepSendGpuWait, 0);
  }
}

/* The states every step goes through, as NCCL's network proxy records
 * them (plugins such as NCCL's example build their intervals from one to
 * the next): a send's SendPeerWait before it is handed over, even when
 * there was room at once; a receive's RecvFlushWait, with its bytes, once
 * they are there. */
static void sendPeerWait(struct profTask *t) {
  if (!t->waited[0]) recordState(t->step[0], profStateStepSendPeerWait, 0);
  t->waited[0] = 1;
}

void profStepWait(struct profTask *t, int dir) {
  if (t->step[dir] && dir == 0) sendPeerWait(t); /* a receive has been in RecvWait since it began */
}

void profStepEnd(struct profTask *t, int dir, size_t bytes) {
  if (t->step[dir]) {
    /* Send: handed to the transport; receive: arrived and used. */
    if (dir) recordState(t->step[dir], profStateStepRecvFlushWait, bytes);
    else sendPeerWait(t);
    recordState(t->step[dir], dir ? profStateStepRecvGpuWait : profStateStepSendWait, bytes);
    profStop(t->step[dir]);
    t->step[dir] = NULL;
  }
  t->stepNo[dir]++;
}

void profStepPosted(struct profTask *t, size_t bytes, const void *key, uint64_t slot) {
  if (!t->step[0]) {
    t->stepNo[0]++;
    return;
  }
  sendPeerWait(t);
  recordState(t->step[0], profStateStepSendWait, bytes);
  if (t->flyCount == PROF_FLYING) profFlyingDone(t); /* the oldest ends early rather than never */
  int i = (t->flyHead + t->flyCount) % PROF_FLYING;
  t->fly[i].step = t->step[0];
  t->fly[i].opEnd = NULL;
  t->fly[i].key = key;
  t->fly[i].slot = slot;
  t->flyCount++;
  t->step[0] = NULL;
  t->stepNo[0]++;
}

void profTaskEnd(struct profTask *t, int flush) {
  for (int dir = 0; dir < 2; dir++) opFinish(t, dir);
  while (flush && t->flyCount) profFlyingDone(t);
  struct profKernelCh *k = t->kch;
  t->kch = NULL; /* counted once, however often the task is ended */
  if (!k || --k->tasks > 0 || !k->handle) return;
  union profStateArgs a;
  memset(&a, 0, sizeof a);
  a.kernelCh.pTimer = clockNs();
  recordStateArgs(k->handle, profStateKernelChStop, &a);
  profStop(k->handle);
  k->handle = NULL;
}
