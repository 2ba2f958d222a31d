/* Profiler plugins (NCCL_PROFILER_PLUGIN): chorus reports its operations to
 * a plugin built for NCCL, through NCCL's versioned interface
 * (plugin/profiler.h), in NCCL's event hierarchy:
 *   GroupApi   ncclGroupStart .. ncclGroupEnd, or one call outside a group
 *     CollApi / P2pApi   each call (stopped when the call returns)
 *     KernelLaunch       each launch onto a stream
 *   Group      each launch of a group's operations (stopped once enqueued)
 *     Coll / P2p         each operation of it (stopped once enqueued)
 *       ProxyOp          one task's transfers to one peer in one direction
 *         ProxyStep      one FIFO slot of them, with its wait states
 * Every function is a no-op (a load and a branch) when no plugin is loaded
 * or its activation mask wants nothing of that kind. */
#ifndef CHORUS_TRACE_PROFILE_H
#define CHORUS_TRACE_PROFILE_H
#include <stddef.h>
#include <stdint.h>

#include "core/observe.h"
#include "plugin/profiler.h"

struct traceComm;

/* A communicator's view of the plugin. */
struct profComm {
  void *ctx;            /* the plugin's context for it (NULL: not profiled) */
  uint64_t seq[16];     /* operations launched per function, NCCL's seqNumber */
};

/* 1 while a plugin is loaded: the hooks' callers skip them otherwise. */
static inline int profActive(void) { return OBSERVED(__atomic_load_n(&profilerPluginLoaded, __ATOMIC_ACQUIRE) != 0); }

/* At a communicator's init (it loads the plugin the first time) and at its
 * destroy or abort (the last one unloads it). */
void profCommInit(struct profComm *p, uint64_t commHash, const char *commName, int nNodes, int nranks, int rank);
void profCommFinalize(struct profComm *p);

/* What an operation carries from its call to its launch. */
struct profCall {
  void *ctx;      /* NULL: nothing is wanted of it */
  void *groupApi; /* the thread's GroupApi event when it was called */
  void *callApi;  /* its CollApi or P2pApi event */
};

/* A checked call (func "AllReduce", "Send", ...; dtype ncclDataType_t) at
 * group depth depth (1 outside a group): opens the thread's GroupApi event
 * when none is, and the call's own event, which ends when the call returns
 * (profApiCallEnd). */
void profApiCall(const struct profComm *p, struct profCall *out, int depth, int p2p, const char *func, size_t count,
                 int dtype, int root, void *stream);
void profApiCallEnd(const struct profCall *call);
/* The outermost ncclGroupEnd (or a call outside a group) starts launching,
 * and has returned: the thread's GroupApi event ends. Inline: with no
 * plugin, a load and a branch. */
void profApiGroupEndBeginLoaded(void);
void profApiGroupEndDoneLoaded(void);
static inline void profApiGroupEndBegin(void) {
  if (profActive()) profApiGroupEndBeginLoaded();
}
static inline void profApiGroupEndDone(void) {
  if (profActive()) profApiGroupEndDoneLoaded();
}

/* One launch: its Group event (NULL when nothing wants it), one Coll or P2p
 * event per operation (seq from the communicator's count per function),
 * and its KernelLaunch event around the hand-off to a stream. */
void *profGroupStart(const struct profCall *any);
struct profOp {
  int p2p;
  const char *func;
  const void *sendBuff;
  void *recvBuff;
  size_t count;
  int root; /* the peer for Send/Recv */
  int dtype;
  int nChannels;
  const char *algo, *proto;
  int rank;
};
void *profOpStart(struct profComm *p, int funcIndex, const struct profCall *call, void *group,
                  const struct profOp *op);
void *profKernelLaunchStart(const struct profCall *call, void *stream);
/* Ends any event above (NULL: none). */
void profStop(void *handle);

/* NCCL's KernelCh event: one per channel of an operation, open from the
 * first of that channel's tasks to start until the last one ends (the
 * tasks of a schedule run on one thread). */
struct profKernelCh {
  void *handle;
  int tasks;   /* the channel's tasks not done yet */
  int started; /* the event was started (or was not wanted) */
};

/* Send steps handed to a transport that sends them later (sockets), at
 * most this many per task: each ends when its slot has left. */
#define PROF_FLYING 16

/* Step-level events of one task of the engine (struct task points to one
 * of its schedule's; engine/schedule.h): dir 0 sends, 1 receives. */
struct profTask {
  void *ctx, *parent; /* NULL ctx: the task is not profiled */
  void *op[2];        /* the open ProxyOp per direction */
  void *step[2];      /* its open ProxyStep */
  int opPeer[2];
  int stepNo[2];
  uint8_t waited[2];  /* the open step's wait state was recorded */
  uint8_t begun;
  /* Posted send steps not yet sent, oldest first: key and slot say when
   * (profFlyingHead); opEnd, a ProxyOp that ends with that step. */
  struct {
    void *step, *opEnd;
    const void *key;
    uint64_t slot;
  } fly[PROF_FLYING];
  uint8_t flyHead, flyCount;
  int channel;                /* 0..nChannels-1 of its operation */
  struct profKernelCh *kch;   /* its channel's KernelCh event (NULL: none, or this task is done) */
  /* CHORUS_TRACE_LEVEL=steps (trace/timeline.h; NULL trace: not traced). */
  const struct traceComm *trace;
  uint32_t traceSeq;
  uint64_t stepStartNs, blockedNs, waitNs;
};
/* Whether launches should wire tasks to their Coll / P2p events (a plugin
 * wants ProxyOp, ProxyStep or KernelCh events). */
int profWantsSteps(void);
/* The task starts running (its channel's KernelCh event opens at the first). */
void profTaskBegin(struct profTask *t);
/* Opens dir's ProxyOp to peer (closing one to another peer first) for
 * nSteps slots of chunk bytes on channel, and its next ProxyStep. */
void profStepBegin(struct profTask *t, int dir, int rank, int channel, int peer, int nSteps, int chunk);
/* The open step of dir waits: a receive for the peer's data, a send for
 * room in the peer's FIFO (recorded once per step). */
void profStepWait(struct profTask *t, int dir);
/* The open step of dir moved bytes: it ends. */
void profStepEnd(struct profTask *t, int dir, size_t bytes);
/* The open send step handed bytes to a transport that sends them later:
 * it ends once its slot has left, when the caller says so (profFlyingDone)
 * after the transport's count of sent slots on the connection key reached
 * slot. */
void profStepPosted(struct profTask *t, size_t bytes, const void *key, uint64_t slot);
/* The oldest posted step not yet sent: 1 and its key and slot, or 0. */
static inline int profFlyingHead(const struct profTask *t, const void **key, uint64_t *slot) {
  if (!t->flyCount) return 0;
  *key = t->fly[t->flyHead].key;
  *slot = t->fly[t->flyHead].slot;
  return 1;
}
/* That step's slot has left: it ends (and its ProxyOp, if it was the last). */
void profFlyingDone(struct profTask *t);
/* The task is done: its open events end, except posted send steps not yet
 * sent (and their ProxyOp), which end with profFlyingDone; its KernelCh
 * event passes to the channel's next task or ends. flush (the run is over,
 * or failed): those end too. */
void profTaskEnd(struct profTask *t, int flush);

#endif
