/* NCCL's profiler events (trace/profile.h): which ones an operation opens
 * and when, in version 6's terms; the plugin behind them, its version and
 * its translation are plugin/profiler.c's. */
#include "trace/profile.h"

#include <string.h>

#include "core/clock.h"
#include "plugin/profiler.h"
#include "plugin/profiler_abi.h"

void profCommInit(struct profComm *p, uint64_t commHash, const char *commName, int nNodes, int nranks, int rank) {
  memset(p, 0, sizeof *p);
  profilerPluginInit(&p->ctx, commHash, commName, nNodes, nranks, rank);
}

void profCommFinalize(struct profComm *p) {
  profilerPluginFinalize(p->ctx);
  p->ctx = NULL;
}

void profStop(void *h) { profilerPluginStopEvent(h); }

static void recordState(void *h, int state, size_t transSize) {
  union profStateArgs a;
  memset(&a, 0, sizeof a);
  a.proxyStep.transSize = transSize;
  profilerPluginRecordState(h, state, &a);
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
 * NCCL enables them (NCCL's src/plugin/profiler.cc): a plugin that asks only for
 * KernelCh still gets the GroupApi, CollApi, Group and Coll events its
 * KernelCh events hang from. */
#define PROF_BELOW_TASK (profProxyOp | profProxyStep | profKernelCh | profNetPlugin)
#define PROF_TASK_EVENTS (profGroup | profColl | profP2p | PROF_BELOW_TASK)
#define PROF_API_EVENTS (profGroupApi | profCollApi | profP2pApi | profKernelLaunch | PROF_TASK_EVENTS)

void profApiCall(const struct profComm *p, struct profCall *out, int depth, int p2p, const char *func, size_t count,
                 int dtype, int root, void *stream) {
  memset(out, 0, sizeof *out);
  int mask = profilerPluginMask();
  if (!p->ctx || !(mask & PROF_API_EVENTS)) return;
  out->ctx = p->ctx;
  if (api.groupApi && api.gen != profilerPluginGen()) api.groupApi = NULL;
  if (!api.groupApi) {
    struct profDescrV6 d;
    memset(&d, 0, sizeof d);
    d.type = profGroupApi;
    d.groupApi.groupDepth = depth;
    api.groupApi = profilerPluginStartEvent(p->ctx, &d);
    api.ctx = p->ctx;
    api.gen = profilerPluginGen();
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
    d.p2pApi.datatype = profilerDtypeName(dtype);
    d.p2pApi.stream = stream;
  } else {
    d.type = profCollApi;
    d.collApi.func = func;
    d.collApi.count = count;
    d.collApi.datatype = profilerDtypeName(dtype);
    d.collApi.root = root;
    d.collApi.stream = stream;
  }
  int callMask = (p2p ? profP2pApi | profP2p : profCollApi | profColl) | PROF_BELOW_TASK;
  if (api.groupApi && (mask & callMask)) out->callApi = profilerPluginStartEvent(p->ctx, &d);
}

void profApiCallEnd(const struct profCall *call) { profStop(call->callApi); }

void profApiGroupEndBeginLoaded(void) {
  if (api.groupApi) recordState(api.groupApi, profStateGroupEndApiStart, 0);
}

void profApiGroupEndDoneLoaded(void) {
  /* Called only with a plugin loaded: no thread-local read (a call, in a
   * shared library) on every launch; a handle left by an unloaded plugin is
   * dropped at the next call (profilerPluginGen). */
  if (api.groupApi) profStop(api.groupApi);
  api.groupApi = NULL;
  api.ctx = NULL;
}

void *profGroupStart(const struct profCall *any) {
  if (!any->ctx || !(profilerPluginMask() & PROF_TASK_EVENTS)) return NULL;
  struct profDescrV6 d;
  memset(&d, 0, sizeof d);
  d.type = profGroup; /* no parent, as NCCL sends it */
  return profilerPluginStartEvent(any->ctx, &d);
}

void *profOpStart(struct profComm *p, int funcIndex, const struct profCall *call, void *group,
                  const struct profOp *op) {
  uint64_t seq = funcIndex >= 0 && funcIndex < 16 ? p->seq[funcIndex]++ : 0;
  int mask = profilerPluginMask();
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
    d.p2p.datatype = profilerDtypeName(op->dtype);
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
    d.coll.datatype = profilerDtypeName(op->dtype);
    d.coll.nChannels = (uint8_t)op->nChannels;
    d.coll.algo = op->algo;
    d.coll.proto = op->proto;
    d.coll.parentGroup = group;
  }
  return profilerPluginStartEvent(call->ctx, &d);
}

void *profKernelLaunchStart(const struct profCall *call, void *stream) {
  if (!call->ctx || !call->groupApi || !(profilerPluginMask() & profKernelLaunch)) return NULL;
  struct profDescrV6 d;
  memset(&d, 0, sizeof d);
  d.type = profKernelLaunch;
  d.parentObj = call->groupApi;
  d.kernelLaunch.stream = stream;
  return profilerPluginStartEvent(call->ctx, &d);
}

int profWantsSteps(void) { return (profilerPluginMask() & (profProxyOp | profProxyStep | profKernelCh)) != 0; }

void profTaskBegin(struct profTask *t) {
  t->begun = 1;
  struct profKernelCh *k = t->kch;
  if (!k || k->started) return;
  k->started = 1;
  if (!(profilerPluginMask() & profKernelCh)) return;
  struct profDescrV6 d;
  memset(&d, 0, sizeof d);
  d.type = profKernelCh;
  d.parentObj = t->parent;
  d.kernelCh.channelId = (uint8_t)t->channel;
  d.kernelCh.pTimer = clockNs(); /* NCCL's is the GPU's global timer, in ns too */
  k->handle = profilerPluginStartEvent(t->ctx, &d);
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
  int mask = profilerPluginMask();
  if (t->op[dir] && t->opPeer[dir] != peer) opFinish(t, dir);
  if (!t->op[dir]) {
    struct profDescrV6 d;
    memset(&d, 0, sizeof d);
    d.type = profProxyOp;
    d.parentObj = t->parent;
    d.rank = rank;
    d.proxyOp.pid = profilerPluginPid();
    d.proxyOp.channelId = (uint8_t)channel;
    d.proxyOp.peer = peer;
    d.proxyOp.nSteps = nSteps;
    d.proxyOp.chunkSize = chunk;
    d.proxyOp.isSend = dir == 0;
    t->op[dir] = (mask & (profProxyOp | profProxyStep)) ? profilerPluginStartEvent(t->ctx, &d) : NULL;
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
    t->step[dir] = profilerPluginStartEvent(t->ctx, &d);
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
  profilerPluginRecordState(k->handle, profStateKernelChStop, &a);
  profStop(k->handle);
  k->handle = NULL;
}
