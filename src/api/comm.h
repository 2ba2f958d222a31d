/* The communicator: one rank's view of a group of ranks. It owns its
 * bootstrap connections, shared memory, connection table and schedule
 * scratch (DESIGN.md invariant 6). */
#ifndef CHORUS_API_COMM_H
#define CHORUS_API_COMM_H
#include <pthread.h>
#include <stdint.h>

#include "bootstrap/bootstrap.h"
#include "engine/desc.h"
#include "trace/flight.h"
#include "trace/profile.h"
#include "trace/stats.h"
#include "trace/timeline.h"
#include "topo/topo.h"
#include "reduce/reduce.h"
#include "transport/conn.h"
#include "transport/transport.h"
#include "tune/tune.h"

#define COMM_MAGIC 0x0280028002800280ull /* as NCCL: nickel is element 28 */
#define COMM_MAX_CHANNELS 64
/* User reduction ops a communicator holds at once (NCCL grows its table
 * without a bound; handles carry 20 bits of index here, see redop.c). */
#define COMM_MAX_USER_OPS (1 << 20)
#define COMM_SCRATCH_BYTES (64 * 1024)

struct userRedOp {
  int used;
  int dtype;
  struct redOp red;
};

/* What a communicator's config asks beyond blocking (a split, shrink or
 * grow without a config: its parent's), with NCCL_MIN_CTAS / NCCL_MAX_CTAS
 * over it, as NCCL's envConfigOverride. */
struct commConfig {
  int minCTAs, maxCTAs; /* channels, fewest and most (channelCount); 0: unset */
  char name[256];       /* config.commName, for the profiler; "": none */
};

/* Which call made a communicator, for NCCL's Init START / Init COMPLETE
 * lines: a split's parent, color and key too. */
struct commOrigin {
  const char *func; /* "ncclCommInitRank", "ncclCommInitAll", "ncclCommSplit", ... */
  struct ncclComm *parent; /* its address only, for the logs: it may be freed while this one initializes */
  int color, key;
  uint64_t ids; /* a hash of ncclCommInitRankScalable's nId ids, which every rank must pass alike; 0: one id */
  const struct commConfig *config; /* NULL: nothing set */
  int childCount; /* the parent's count of children, this one included (the logs: the parent may be gone by then) */
  int setup;      /* where its rendezvous runs (commSetupWhere) */
};

/* Where a communicator's rendezvous runs: as its blocking mode says (in
 * the call when blocking, on a thread of its own, ncclInProgress, when
 * not), or as the call that makes it says, whatever the communicator's
 * mode is for the calls after: NCCL's plain ncclCommInitRank sets up in
 * the call even under NCCL_COMM_BLOCKING=0, and a split or shrink sets up
 * as its parent's mode says (NCCL runs the child's init as a job of the
 * parent's group). */
enum commSetupWhere { commSetupByMode = 0, commSetupInCall, commSetupOnThread };

struct ncclComm {
  uint64_t startMagic;
  uint64_t serial; /* unique in the process, never reused (a freed communicator's address may be) */
  int rank, nranks, cudaDev;
  int nch; /* collective channels */
  int blocking;
  struct commConfig config;
  struct bootstrap boot;
  void *transports[TRANSPORT_COUNT]; /* each transport's state (transport.h) */
  struct connTable conns;
  size_t slotBytes;
  volatile int abortFlag;
  ncclResult_t asyncError; /* sticky once a collective failed */
  char failText[512];      /* the WARN that explained it */
  int finalized;
  int revoked; /* ncclCommRevoke: only destroy, split and shrink from now on */
  /* This process is a forked child of the one that made it (set by the
   * fork, errors.c): its threads and connections are the parent's, so
   * every call but destroy and abort (which forget it) is refused. */
  int inherited;
  int suspended; /* ncclCommSuspend until ncclCommResume: operations refused */
  int64_t timeoutMs; /* chorusCommSetTimeout; 0: CHORUS_TIMEOUT */
  int busy;     /* calls in flight, so abort waits before freeing */
  uint32_t callerTid; /* the thread that called the init (bootstrapPeerInfo.callerTid) */
  /* The stream of the last launch and the point after it (held; NULL: the
   * NULL stream's, done), which the next launch on another stream waits
   * for (commOrderWait). */
  cudaStream_t orderStream;
  uint64_t orderPos;
  int streamsUnordered; /* chorusCommSetStreamOrder(comm, 0) */
  /* Who keeps the memory: 1 for the owner until ncclCommDestroy or
   * ncclCommAbort, plus 2 for each call an open group holds (group.c),
   * plus COMM_PIN for each pin (commPin). Whoever takes it to 0 frees it,
   * so a communicator destroyed or aborted while a group (any thread's)
   * holds its calls stays readable until that group ends, and the group
   * then fails instead of running them. */
  uint64_t holds;
  uint64_t opCount;
  /* What this rank is doing, for mismatch checks and for other ranks'
   * timeout diagnosis (watch.h). */
  int check;          /* CHORUS_CHECK, as rank 0 has it */
  struct tuneTable tune; /* the tuning variables as rank 0 has them, and the topology */
  uint32_t collSeq;   /* collective calls made; the next is collSeq + 1 */
  uint32_t *p2pSeq;   /* [2 * nranks]: sends to, then receives from, each peer */
  int statusLock;     /* a spinlock (core/spin.h): taken twice on every call, held for a few stores */
  uint32_t doneSeq;   /* last collective completed */
  int inCall;         /* launches running */
  struct opDesc current; /* the operation last started */
  struct opDesc lastNoop; /* the last count-0 collective (done at once, seen by no peer) */
  int timedOut;       /* the last launch timed out: still "waits" there, for the others' diagnosis */
  uint64_t probedNs;  /* when a stalled wait last asked the peers what they called (watchProbe) */
  int *laneLast;   /* for the schedule being built (see algoCtx) */
  int *hostOf;     /* each rank's host, numbered in order of their first rank */
  int nhosts;
  int *ringOrder, *ringPos; /* the rings' order (algoRingOrder) and each rank's place; NULL: rank order */
  int *hostFirst;           /* each host's first rank (algoHostFirst) */
  uint64_t ntStoreBytes; /* operations this large (bytes, as nccl-tests counts) write their output past the cache; 0: none */
  uint64_t singleCopyBytes;    /* from this size local peers read a collective's sends where they are; 0: never */
  uint64_t singleCopyBelow;    /* ...up to below this size (0: no bound), Send/Recv's too */
  uint64_t singleCopyP2pBytes; /* the same for Send/Recv and the collectives made of them (AlltoAll, Gather, Scatter) */
  int mappedRefs; /* local peers read sends from memory they map (ncclMemAlloc's) where they are, at any size */
  struct topoRank *topo;    /* [nranks]: what each rank sees of its host (topo/topo.h) */
  uint64_t laneGen; /* schedule build that laneLast belongs to */
  char *scratch;
  struct userRedOp *userOps; /* [userOpsCap], grown as ops are created */
  int nUserOps, userOpsCap;
  uint32_t opMangle; /* mixed into this communicator's user op handles (redop.c) */
  ncclUniqueId initId;
  struct commOrigin origin;
  uint64_t commHash; /* NCCL's commId in the logs: a hash of the unique id */
  int childCount;    /* communicators split off this one */
  uint32_t *shrinkWith; /* [nranks]: ncclCommShrinks begun on it with each rank kept (shrink.c); NULL: none */
  /* Windows (window.c) and one-sided signals (rma.c). */
  pthread_mutex_t winLock;            /* the windows, against the monitor's one-sided writes; registrations */
  struct ncclWindow_vidmem *windows; /* live, newest first */
  struct regHandle *regs;             /* ncclCommRegister's live handles, newest first (register.c) */
  uint32_t winNext;                   /* the next window's number: ranks register in the same order */
  uint64_t *sigGot, *sigTaken;        /* [nranks] signals from each rank: arrived, waited for */
  struct rmaEarly **rmaEarly;         /* [nranks] writes kept until their window is registered */
  int rmaFaulted;                     /* a one-sided write could not be applied: rmaFault says why */
  char rmaFault[256];
  struct bootstrapHandle growId; /* ncclCommGetUniqueId's, while no grow has used it */
  int growIdMade;
  uint64_t createdNs; /* when its init call began (Init timings) */
  pthread_t initThread; /* nonblocking init */
  int initThreadRunning;
  ncclResult_t setupResult; /* that thread's, once it has ended (a parent's commChildPending reads it) */
  /* The splits and shrinks of this communicator whose new ones still set
   * up on their threads (each pinned: commPin), a list through their
   * pendNext (a group may hold several of one parent); NULL: none. As in
   * NCCL, whose parent runs a child's init as its own job, the parent
   * says ncclInProgress until they are set up, then their outcome. Under
   * pendLock (a spinlock), as is freeing (commFree has begun: no child
   * pends on it any more) and the children's pendNext. */
  struct ncclComm *pendingChild, *pendNext;
  int pendLock, freeing;
  /* Splits and shrinks of this nonblocking communicator whose whole job
   * (the agreement over this communicator, then the new one's init) still
   * runs on a thread of their own (initJobsStart), as NCCL runs a child's
   * init as a job of the parent: it says ncclInProgress meanwhile. Each
   * such job also counts in busy. jobResult: the first of them that failed
   * (ncclSuccess: none), set under pendLock before its job stops counting,
   * and taken as this communicator's state by commChildPending once none
   * runs. */
  int jobsRunning;
  ncclResult_t jobResult;
  struct profComm prof; /* its profiler plugin context (NCCL_PROFILER_PLUGIN) */
  struct flightRecorder flight; /* its last operations (CHORUS_FLIGHT_RECORDER) */
  struct commStats stats;       /* CHORUS_STATS */
  struct traceComm trace;       /* CHORUS_TRACE */
  uint64_t endMagic;
};

/* Creates one rank of a communicator (init.c); blocks until all its ranks
 * have joined. */
ncclResult_t commInit(struct ncclComm **out, int nranks, const ncclUniqueId *id, int rank, int cudaDev,
                      int blocking, const struct commOrigin *origin);

/* The same in steps, for ncclCommInitRank inside a group: as NCCL's, the
 * handle is the caller's at the call (commInitMake: *out set, the
 * communicator ncclInProgress), and the rendezvous runs at ncclGroupEnd
 * (commInitSetup: blocking, its result, which the communicator says only
 * once the group has its outcome, commInitPublish; else ncclInProgress and
 * a thread, whose result it says at once). A communicator whose group
 * failed is left failed, for the caller to destroy or abort
 * (commInitAbandon: its rendezvous, if still running, ends; res and why
 * are what calls on it then say). ncclCommAbort from another thread
 * meanwhile waits for the setup, or the abandon, to end. */
ncclResult_t commInitMake(struct ncclComm **out, int nranks, const ncclUniqueId *id, int rank, int cudaDev,
                          int blocking, const struct commOrigin *origin);
ncclResult_t commInitSetup(struct ncclComm *comm);
void commInitPublish(struct ncclComm *comm);
void commInitAbandon(struct ncclComm *comm, ncclResult_t res, const char *why);

/* NCCL's bus id of a device, for the logs (what the host-CUDA shim's
 * devices show too: device d on bus d, "0000:0d:00.0"). */
long commBusId(int cudaDev);
/* An init that asked for a rank outside 0..nranks-1 of id: the root is
 * told, so that every rank of the rendezvous fails within seconds, not at
 * its timeout (bootstrap.h). */
void commReportBadRank(const ncclUniqueId *id, int rank, int nranks);
/* A process handed the rendezvous at id (of nranks) that will not join it
 * tells its root, which refuses every rank at once (bootstrap.h). */
void commReportDisagreement(const ncclUniqueId *id, int nranks);
/* NCCL's version line (NCCL_DEBUG=VERSION or more), once per process, when
 * a communicator of rank's is made from a unique id (not a parent's child):
 * at VERSION and WARN by rank 0 alone, as NCCL's ncclCommInitRankDev. */
void commLogVersion(int rank);
/* Frees a communicator and everything it owns; graceful says goodbye to
 * the peers first (destroy), else they see it as gone (abort, failure). */
void commFree(struct ncclComm *comm, int graceful);
/* A group holds (1) or lets go of (0) one call on comm; letting go of the
 * last hold of a communicator already freed frees its memory. */
void commGroupHold(struct ncclComm *comm, int hold);
/* Pins (1) or unpins (0) comm's memory for a reader that is not a group
 * (a nonblocking split's parent reading its child's state, commInitChild
 * its parent's), without counting as a group's hold (commGroupHeld). */
#define COMM_PIN (1ull << 32)
void commPin(struct ncclComm *comm, int pin);
/* 1 when comm was destroyed or aborted (only a group still holds it). */
int commGone(const struct ncclComm *comm);
/* 1 while an open group (any thread's) holds calls on comm. */
int commGroupHeld(const struct ncclComm *comm);
/* Blocks (through the one wait) until no call is running on comm. */
void commWaitIdle(struct ncclComm *comm);
/* Ends the calls in flight (they see the abort flag at their next pause
 * and fail), waits for them, and lets the communicator be used again
 * (NCCL_SHRINK_ABORT, ncclCommRevoke). */
void commEndInFlight(struct ncclComm *comm);
/* ncclInvalidArgument with a WARN naming the call when comm is NULL,
 * corrupted or destroyed; ncclInvalidUsage when it is inherited. */
ncclResult_t commCheck(const struct ncclComm *comm, const char *call);
/* 1 when comm is a communicator this process inherited at a fork (and
 * the call, destroy or abort, is to forget it: an INFO line says so). */
int commForget(const struct ncclComm *comm, const char *call);
/* The largest NCCL_BUFFSIZE a FIFO can take: a slot's offsets are 32 bits
 * (transport/conn.c). */
#define COMM_MAX_BUFFSIZE (4ll << 30)

/* The set of communicators not yet freed (errors.c): commLiveAdd returns 0
 * when out of memory. */
int commLiveAdd(struct ncclComm *comm);
/* Sets comm's failText (errors.c) under the lock ncclGetLastError(comm)
 * reads it with, so that a thread reading it as it fails gets all of the
 * text or none; NULL text: this thread's last WARN (logCopyLastError). */
void commSetFailText(struct ncclComm *comm, const char *text);
/* A copy of comm's failText, read under that lock. */
void commCopyFailText(const struct ncclComm *comm, char *buf, size_t len);
void commLiveRemove(struct ncclComm *comm);
/* ncclSuccess when comm takes operations; else why not, in a WARN naming
 * the call: revoked, suspended, failed (a peer's death included), still
 * initializing (ncclInvalidArgument, as NCCL), finalized. */
ncclResult_t commReady(struct ncclComm *comm, const char *name);
/* ncclInvalidArgument, with NCCL's WARN, while a nonblocking init of comm
 * is still running: what may not be called then (NCCL's
 * ncclCommEnsureReady) calls this first. */
ncclResult_t commInitDone(struct ncclComm *comm, const char *name);
/* ncclInProgress while any of comm's pending children sets up; once all
 * are done, their outcome (the first failure in the list, else
 * ncclSuccess), which becomes comm's own state, as NCCL sets a nonblocking
 * parent's state from the child's init job (a failure; or ncclSuccess,
 * which clears the failure of a parent that a shrink with
 * NCCL_SHRINK_ABORT left behind); ncclSuccess when none pends. *settled
 * (when not NULL) is 1 when this call saw the children done (their
 * outcome is what it returns): ncclCommGetAsyncError says that outcome then, even
 * where a liveness check would now say a peer of the parent is gone (the
 * one a shrink left out), so that polling the parent, as NCCL's docs do,
 * ends on the shrink's outcome. */
ncclResult_t commChildPending(struct ncclComm *comm, int *settled);
/* A split or shrink of parent made child, whose setup runs on its thread:
 * parent is pending until it ends (commChildPending). */
void commPendOnChild(struct ncclComm *parent, struct ncclComm *child);
/* A split's or shrink's job on parent starts on a thread of its own
 * (counted in jobsRunning and busy) / has ended with res (a failure, said
 * by why, becomes the parent's state, see commChildPending); after
 * commJobEnd the job may not touch parent, which an abort may free. */
void commJobBegin(struct ncclComm *parent);
void commJobEnd(struct ncclComm *parent, ncclResult_t res, const char *func, const char *why);
/* How long a call on comm may go without progress (chorusCommSetTimeout,
 * else CHORUS_TIMEOUT); 0: forever. */
uint64_t commTimeoutNs(const struct ncclComm *comm);
/* Lowers an ncclRedOp_t for a datatype into what the kernels do. */
ncclResult_t commLowerOp(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dtype, struct redOp *out,
                         const char *call);
/* Frees the registrations nobody deregistered, at destroy (register.c). */
void registerFreeAll(struct ncclComm *comm);
/* Reads a PreMulSum scalar that lives in the caller's memory (redOp.scaleAt)
 * into the operator: called as the operation starts running. */
void redOpReadScalar(struct redOp *red);

#endif
