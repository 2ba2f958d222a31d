/* NCCL's profiler plugin ABI (its plugins/profiler README and headers,
 * versions 1 to 6), written out here so that a plugin built against NCCL's
 * own headers loads into chorus unchanged. Only the layout matters: field
 * order, types and sizes are NCCL's; the comments are ours. Only the loader
 * (plugin/profiler.c), the events built for it (trace/profile.c) and the
 * test plugin include this file. */
#ifndef CHORUS_PLUGIN_PROFILER_ABI_H
#define CHORUS_PLUGIN_PROFILER_ABI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "nccl.h"

/* Event types: the activation mask is a set of these bits. */
enum {
  profGroup = 1 << 0,        /* a launch of a group's operations */
  profColl = 1 << 1,         /* one collective of that launch */
  profP2p = 1 << 2,          /* one send or receive of that launch */
  profProxyOp = 1 << 3,      /* one channel's transfers to or from one peer */
  profProxyStep = 1 << 4,    /* one slot of those */
  profProxyCtrl = 1 << 5,    /* the progress thread's states */
  profKernelCh = 1 << 6,     /* a kernel's channel: in chorus, an operation's tasks on one channel */
  profNetPlugin = 1 << 7,    /* events a network plugin defines */
  profGroupApi = 1 << 8,     /* ncclGroupStart .. ncclGroupEnd, or one bare call */
  profCollApi = 1 << 9,      /* the collective call itself */
  profP2pApi = 1 << 10,      /* the send or receive call itself */
  profKernelLaunch = 1 << 11, /* the launch onto a stream */
};

/* States recorded on events (recordEventState). */
enum {
  profStateProxyOpInProgress = 19,
  profStateStepSendGpuWait = 8,   /* a send step waits for its data to be ready */
  profStateStepSendPeerWait = 20, /* ... for room in the peer's FIFO */
  profStateStepSendWait = 9,      /* ... for the transport to move it */
  profStateStepRecvWait = 10,     /* a receive step waits for the peer's data */
  profStateStepRecvFlushWait = 11,
  profStateStepRecvGpuWait = 12,  /* ... for the consumer to use what arrived */
  profStateGroupStartApiStop = 23,
  profStateGroupEndApiStart = 24,
  profStateKernelChStop = 22,
};

typedef void (*profLogFn)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);

/* The descriptor of version 6 (version 5 has the same layout up to
 * netPlugin: its union is smaller, and chorus never fills the larger
 * copy-engine members). */
struct profDescrV6 {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      bool graphCaptured;
      int groupDepth;
    } groupApi;
    struct {
      const char *func;
      size_t count;
      const char *datatype;
      int root;
      void *stream;
      bool graphCaptured;
    } collApi;
    struct {
      const char *func;
      size_t count;
      const char *datatype;
      void *stream;
      bool graphCaptured;
    } p2pApi;
    struct {
      void *stream;
    } kernelLaunch;
    struct {
      uint64_t seqNumber;
      const char *func;
      void const *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
      void *parentGroup;
    } coll;
    struct {
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void *parentGroup;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void *data;
    } netPlugin;
    /* Version 6's copy-engine descriptors, never sent: room only. */
    struct {
      uint64_t a[6];
      const char *b[2];
      bool c;
      uint32_t d[3];
      void *e;
    } ceRoom;
  };
};

/* Version 4: no API events, a one-byte type, and Coll / P2p hang directly
 * off the Group event. */
struct profDescrV4 {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char *func;
      void const *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void *data;
    } netPlugin;
  };
};

/* Version 3: as version 4, with the communicator's name and hash in Coll
 * and P2p, and no KernelCh timer. */
struct profDescrV3 {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char *func;
      void const *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
    } kernelCh;
    struct {
      int64_t id;
      void *data;
    } netPlugin;
  };
};

/* Version 2: as version 3, with the bytes a collective moves
 * (trafficBytes, never filled: NCCL's adapter sends 0 too) and no KernelCh
 * or NetPlugin events. */
struct profDescrV2 {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char *func;
      void const *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      size_t trafficBytes;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
  };
};

/* Version 1: as version 2, with numbers where later versions have names:
 * func an ncclFunc_t, datatype an ncclDataType_t, algo an NCCL_ALGO_* and
 * proto an NCCL_PROTO_* (profV1Func and the others below); op, isCollnet
 * and isNvls as NCCL's adapter fills them (0). */
struct profDescrV1 {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      uint8_t func;
      void const *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      uint8_t datatype;
      uint32_t op;
      size_t trafficBytes;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      uint8_t algo;
      uint8_t proto;
      int isCollnet;
      int isNvls;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      uint8_t func;
      void *buff;
      uint8_t datatype;
      size_t count;
      int peer;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
  };
};

/* NCCL's numbers for version 1's fields (its ncclFunc_t, NCCL_ALGO_* and
 * NCCL_PROTO_*; datatypes are ncclDataType_t). */
enum {
  profV1FuncBroadcast = 0,
  profV1FuncReduce = 1,
  profV1FuncAllGather = 2,
  profV1FuncReduceScatter = 3,
  profV1FuncAllReduce = 4,
  profV1FuncSendRecv = 5,
  profV1FuncSend = 6,
  profV1FuncRecv = 7,
  profV1FuncAlltoAll = 8,
  profV1FuncScatter = 9,
  profV1FuncGather = 10,
};
enum { profV1AlgoTree = 0, profV1AlgoRing = 1, profV1AlgoPat = 6 };
enum { profV1ProtoLL = 0, profV1ProtoLL128 = 1, profV1ProtoSimple = 2 };

/* State arguments of versions 1 to 3. */
union profStateArgsV3 {
  struct {
    size_t transSize;
    int steps;
  } proxyOp;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
};

/* State arguments: the same in versions 4 to 6. */
union profStateArgs {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void *data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
};

/* The exported tables: "ncclProfiler_v6" and "ncclProfiler_v5" share this
 * shape (their descriptors differ as above); "ncclProfiler_v4" takes the
 * comm hash after the name in init; "ncclProfiler_v3"'s init (and v2's and
 * v1's) takes only the mask. */
struct profPluginV6 {
  const char *name;
  ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask, const char *commName, int nNodes,
                       int nranks, int rank, profLogFn logfn);
  ncclResult_t (*startEvent)(void *context, void **eHandle, struct profDescrV6 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, union profStateArgs *eStateArgs);
  ncclResult_t (*finalize)(void *context);
};

struct profPluginV3 {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask);
  ncclResult_t (*startEvent)(void *context, void **eHandle, struct profDescrV3 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, union profStateArgsV3 *eStateArgs);
  ncclResult_t (*finalize)(void *context);
};

/* Versions 2 and 1: version 3's table with their own descriptors. */
struct profPluginV2 {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask);
  ncclResult_t (*startEvent)(void *context, void **eHandle, struct profDescrV2 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, union profStateArgsV3 *eStateArgs);
  ncclResult_t (*finalize)(void *context);
};

struct profPluginV1 {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask);
  ncclResult_t (*startEvent)(void *context, void **eHandle, struct profDescrV1 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, union profStateArgsV3 *eStateArgs);
  ncclResult_t (*finalize)(void *context);
};

struct profPluginV4 {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask, const char *commName, uint64_t commHash, int nNodes,
                       int nranks, int rank, profLogFn logfn);
  ncclResult_t (*startEvent)(void *context, void **eHandle, struct profDescrV4 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, union profStateArgs *eStateArgs);
  ncclResult_t (*finalize)(void *context);
};

#endif
