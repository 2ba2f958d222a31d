/* Communicator life cycle: unique id, init (one rank, or several in one
 * process), finalize, destroy, abort, and the queries. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "algo/algo.h"
#include "api/api.h"
#include "api/comm.h"
#include "api/group.h"
#include "api/watch.h"
#include "bootstrap/oob.h"
#include "chorus.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/param.h"
#include "core/wait.h"

_Static_assert(sizeof(struct bootstrapHandle) <= NCCL_UNIQUE_ID_BYTES, "handle must fit in ncclUniqueId");

ncclResult_t commCheck(const struct ncclComm *comm, const char *call) {
  if (comm == NULL) {
    WARN("%s : comm argument is NULL", call);
    return ncclInvalidArgument;
  }
  if (comm->startMagic != COMM_MAGIC || comm->endMagic != COMM_MAGIC) {
    WARN("%s : comm %p is corrupted or has been destroyed", call, (const void *)comm);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetVersion, int *version) {
  if (version == NULL) {
    WARN("ncclGetVersion : version argument is NULL");
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t chorusGetVersion(int *version) {
  if (version == NULL) {
    WARN("chorusGetVersion : version argument is NULL");
    return ncclInvalidArgument;
  }
  *version = CHORUS_VERSION_CODE;
  return ncclSuccess;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "timeout";
    default: return "unknown result code";
  }
}

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm) {
  /* NCCL gives the process's last WARN, whatever comm is. A communicator
   * that has failed gives the WARN that explained its failure instead, so
   * that a process with several communicators and threads (a framework's
   * process groups) gets its own. */
  if (comm && comm->startMagic == COMM_MAGIC && comm->endMagic == COMM_MAGIC &&
      __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE) != ncclSuccess && comm->failText[0])
    return comm->failText;
  return logLastError();
}

static pthread_once_t versionOnce = PTHREAD_ONCE_INIT;
static void printVersion(void) {
  CHORUS_LOG(logVersion, subsysInit, "NCCL version %d.%d.%d+chorus%d.%d.%d (host memory)", NCCL_MAJOR, NCCL_MINOR,
             NCCL_PATCH, CHORUS_MAJOR, CHORUS_MINOR, CHORUS_PATCH);
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId) {
  if (uniqueId == NULL) {
    WARN("ncclGetUniqueId : uniqueId argument is NULL");
    return ncclInvalidArgument;
  }
  pthread_once(&versionOnce, printVersion);
  struct bootstrapHandle h;
  CHECK(bootstrapGetUniqueId(&h));
  memset(uniqueId, 0, sizeof *uniqueId);
  memcpy(uniqueId->internal, &h, sizeof h);
  return ncclSuccess;
}

void commWaitIdle(struct ncclComm *comm) {
  struct waitState w;
  waitBegin(&w, NULL, NULL, NULL, "waiting for calls in flight");
  while (__atomic_load_n(&comm->busy, __ATOMIC_ACQUIRE) > 0)
    if (waitPause(&w) != ncclSuccess) break;
}

static void commFree(struct ncclComm *comm, int graceful) {
  if (comm->initThreadRunning) { /* abort has set the flag, so it ends soon */
    pthread_join(comm->initThread, NULL);
    comm->initThreadRunning = 0;
  }
  bootstrapClose(&comm->boot, graceful);
  transportCloseAll(comm->transports);
  free(comm->conns.send);
  free(comm->conns.recv);
  free(comm->laneLast);
  free(comm->scratch);
  free(comm->userOps);
  free(comm->p2pSeq);
  pthread_mutex_destroy(&comm->statusLock);
  comm->startMagic = comm->endMagic = 0;
  free(comm);
}

static int channelCount(void) {
  int64_t lo = paramInt(paramMinNChannels), hi = paramInt(paramMaxNChannels);
  int64_t n = hi > 0 ? hi : 2; /* two channels by default */
  if (lo > 0 && n < lo) n = lo;
  if (n < 1) n = 1;
  if (n > COMM_MAX_CHANNELS) n = COMM_MAX_CHANNELS;
  return (int)n;
}

/* Settings every rank must agree on; rank 0's win. */
struct commAgreement {
  int version;
  int nch;
  int check; /* CHORUS_CHECK */
  int64_t buffSize;
  int cores; /* online cores of the rank's host (the tuner takes the fewest) */
  struct tuneConfig tune;
};

/* The topology the tuner's model reads, the same on every rank. */
static struct tuneTopo tuneTopoOf(const struct bootstrap *b, const struct commAgreement *agree) {
  struct tuneTopo t = {b->nranks, 0, 0, 0, 0};
  for (int i = 0; i < b->nranks; i++) {
    int same = 0, first = 1;
    for (int j = 0; j < b->nranks; j++)
      if (b->peers[j].hostHash == b->peers[i].hostHash) {
        same++;
        if (j < i) first = 0;
      }
    t.nhosts += first;
    if (same > t.localRanks) t.localRanks = same;
    if (t.cores == 0 || (agree[i].cores > 0 && agree[i].cores < t.cores)) t.cores = agree[i].cores;
    if (transportTable[transportFor(b, i)] == &netTransport) t.net = 1;
  }
  return t;
}

/* NCCL's init lines: each channel's ring, then the transport to each peer. */
static void logTopology(struct ncclComm *comm) {
  char line[512];
  int n = comm->nranks, next = (comm->rank + 1) % n;
  for (int c = 0; c < comm->nch; c++) {
    int o = 0;
    for (int i = 0; i < n && o < (int)sizeof line - 16; i++) o += snprintf(line + o, sizeof line - o, " %d", i);
    INFO(subsysInit, "Channel %02d/%02d :%s", c, comm->nch, line);
  }
  for (int c = 0; c < comm->nch && n > 1; c++)
    INFO(subsysInit, "Channel %02d/0 : %d[%d] -> %d[%d] via %s", c, comm->rank,
         comm->boot.peers[comm->rank].cudaDev, next, comm->boot.peers[next].cudaDev,
         transportTable[transportFor(&comm->boot, next)]->name);
  for (int p = 0; p < n; p++)
    if (p != comm->rank)
      INFO(subsysP2p, "Channel %02d/1 : %d[%d] -> %d[%d] via %s (host %s pid %d)", comm->nch, comm->rank,
           comm->boot.peers[comm->rank].cudaDev, p, comm->boot.peers[p].cudaDev,
           transportTable[transportFor(&comm->boot, p)]->p2pName, comm->boot.peers[p].hostname,
           comm->boot.peers[p].pid);
  INFO(subsysInit, "Connected all rings, %d channel(s), %zu-byte FIFO slots", comm->nch, comm->slotBytes);
}

static struct ncclComm *commAlloc(int nranks, const ncclUniqueId *id, int rank, int cudaDev, int blocking) {
  struct ncclComm *comm = calloc(1, sizeof *comm);
  if (!comm) return NULL;
  comm->startMagic = comm->endMagic = COMM_MAGIC;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->cudaDev = cudaDev;
  comm->blocking = blocking;
  comm->boot.listenFd = -1;
  comm->initId = *id;
  pthread_mutex_init(&comm->statusLock, NULL);
  return comm;
}

/* Everything that needs the other ranks: rendezvous, agreement, shared
 * memory. On failure the communicator is left for commFree. */
static ncclResult_t commSetup(struct ncclComm *comm) {
  uint64_t t0 = clockNs();
  int rank = comm->rank, nranks = comm->nranks, cudaDev = comm->cudaDev;
  logSetRank(rank);
  ncclResult_t res;
  struct bootstrapHandle h;
  memcpy(&h, comm->initId.internal, sizeof h);
  if (h.secret == BOOTSTRAP_COMM_ID_SECRET && rank == 0) CHECKGOTO(bootstrapStartRoot(&h, nranks), res, fail);

  struct bootstrapPeerInfo me = {0};
  me.rank = rank;
  me.pid = getpid();
  me.cudaDev = cudaDev;
  me.shmDisable = paramInt(paramShmDisable) != 0;
  me.hostHash = bootstrapHostHash();
  gethostname(me.hostname, sizeof me.hostname - 1);
  if (getrandom(&me.nonce, sizeof me.nonce, 0) != sizeof me.nonce) me.nonce = clockNs() ^ (uint64_t)me.pid;
  CHECKGOTO(bootstrapInit(&comm->boot, &h, rank, nranks, &me, &comm->abortFlag), res, fail);

  struct commAgreement *agree = calloc(nranks, sizeof *agree);
  if (!agree) {
    res = ncclSystemError;
    goto fail;
  }
  agree[rank].version = NCCL_VERSION_CODE;
  agree[rank].nch = channelCount();
  agree[rank].check = paramInt(paramCheck) != 0;
  agree[rank].buffSize = paramInt(paramBuffSize);
  struct tuneConfig myTune;
  tuneConfigFromEnv(&myTune);
  agree[rank].tune = myTune;
  agree[rank].cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  res = bootstrapAllGather(&comm->boot, agree, sizeof *agree);
  struct commAgreement a0 = agree[0];
  struct tuneTopo topo = tuneTopoOf(&comm->boot, agree);
  for (int i = 0; res == ncclSuccess && i < nranks; i++)
    if (agree[i].version != a0.version) {
      WARN("Mismatched NCCL version detected : rank %d has %d, rank 0 has %d", i, agree[i].version, a0.version);
      res = ncclInvalidUsage;
    }
  free(agree);
  if (res != ncclSuccess) goto fail;
  if (a0.buffSize < 64 * 1024) a0.buffSize = 64 * 1024;
  comm->nch = a0.nch;
  comm->check = a0.check;
  /* Rank 0's NCCL_ALGO / NCCL_PROTO on every rank: a bad one fails every rank's init alike. */
  CHECKGOTO(tuneSetup(&comm->tune, &a0.tune, &topo), res, fail);

  comm->conns.nranks = nranks;
  comm->conns.nch = comm->nch;
  size_t nconn = (size_t)nranks * (comm->nch + 1);
  comm->conns.send = calloc(nconn, sizeof(struct conn));
  comm->conns.recv = calloc(nconn, sizeof(struct conn));
  comm->laneLast = malloc(sizeof(int) * (comm->nch + 2 * nranks));
  comm->scratch = malloc(COMM_SCRATCH_BYTES);
  comm->userOps = calloc(COMM_MAX_USER_OPS, sizeof *comm->userOps);
  comm->p2pSeq = calloc(2 * (size_t)nranks, sizeof *comm->p2pSeq);
  if (!comm->p2pSeq || !comm->conns.send || !comm->conns.recv || !comm->laneLast || !comm->scratch || !comm->userOps) {
    res = ncclSystemError;
    goto fail;
  }
  CHECKGOTO(transportSetupAll(comm->transports, &comm->boot, &comm->conns, (size_t)a0.buffSize), res, fail);
  comm->slotBytes = connSend(&comm->conns, rank, 0)->slotBytes;
  /* Everyone has mapped everyone's segment before anyone sends. */
  CHECKGOTO(bootstrapBarrier(&comm->boot), res, fail);
  /* From here on the monitor owns the mesh (peer deaths, status queries, faults). */
  CHECKGOTO(oobStart(&comm->boot, watchStatus, comm, watchStatusBytes()), res, fail);
  logTopology(comm);
  INFO(subsysInit, "comm %p rank %d nranks %d cudaDev %d pid %d - Init COMPLETE (%.3f s)", (void *)comm, rank,
       nranks, cudaDev, (int)getpid(), (double)(clockNs() - t0) / 1e9);
  return ncclSuccess;
fail:
  WARN("ncclCommInitRank : rank %d of %d failed to initialize: %s", rank, nranks, ncclGetErrorString(res));
  return res;
}

static void *commSetupThread(void *arg) {
  struct ncclComm *comm = arg;
  ncclResult_t res = commSetup(comm);
  __atomic_store_n(&comm->asyncError, res, __ATOMIC_RELEASE);
  return NULL;
}

ncclResult_t commInit(struct ncclComm **out, int nranks, const ncclUniqueId *id, int rank, int cudaDev,
                      int blocking) {
  pthread_once(&versionOnce, printVersion);
  struct ncclComm *comm = commAlloc(nranks, id, rank, cudaDev, blocking);
  if (!comm) return ncclSystemError;
  if (!blocking) {
    /* Nonblocking (config.blocking = 0): the handle is valid at once, the
     * rendezvous runs on a thread, and ncclCommGetAsyncError says
     * ncclInProgress until it is done; a watchdog may ncclCommAbort it. */
    comm->asyncError = ncclInProgress;
    if (pthread_create(&comm->initThread, NULL, commSetupThread, comm) != 0) {
      WARN("ncclCommInitRankConfig : cannot start the init thread");
      commFree(comm, 0);
      return ncclSystemError;
    }
    comm->initThreadRunning = 1;
    *out = comm;
    return ncclInProgress;
  }
  ncclResult_t res = commSetup(comm);
  if (res != ncclSuccess) {
    commFree(comm, 0);
    return res;
  }
  *out = comm;
  return ncclSuccess;
}

static ncclResult_t checkInitArgs(ncclComm_t *comm, int nranks, int rank, const char *call) {
  if (comm == NULL) {
    WARN("%s : comm argument is NULL", call);
    return ncclInvalidArgument;
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("%s : Invalid rank requested : %d/%d", call, rank, nranks);
    return ncclInvalidArgument;
  }
  if (nranks > OPDESC_MAX_RANKS) {
    WARN("%s : nranks %d is more than chorus supports (%d)", call, nranks, OPDESC_MAX_RANKS);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  CHECK(checkInitArgs(comm, nranks, rank, "ncclCommInitRank"));
  *comm = NULL;
  struct initJob job = {comm, nranks, rank, 0, 1, commId, ncclSuccess, NULL, 0, 0, NULL, 0};
  return groupInit(&job);
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t *config) {
  CHECK(checkInitArgs(comm, nranks, rank, "ncclCommInitRankConfig"));
  int blocking = 1;
  if (config) {
    if (config->magic != NCCL_API_MAGIC) {
      WARN("ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
      return ncclInvalidArgument;
    }
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    memcpy(&c, config, config->size < sizeof c ? config->size : sizeof c);
    if (c.blocking != NCCL_CONFIG_UNDEF_INT) {
      if (c.blocking != 0 && c.blocking != 1) {
        WARN("ncclCommInitRankConfig : config.blocking must be 0 or 1, got %d", c.blocking);
        return ncclInvalidArgument;
      }
      blocking = c.blocking;
    }
    if ((c.minCTAs != NCCL_CONFIG_UNDEF_INT && c.minCTAs <= 0) ||
        (c.maxCTAs != NCCL_CONFIG_UNDEF_INT && c.maxCTAs <= 0) ||
        (c.minCTAs != NCCL_CONFIG_UNDEF_INT && c.maxCTAs != NCCL_CONFIG_UNDEF_INT && c.minCTAs > c.maxCTAs)) {
      WARN("ncclCommInitRankConfig : invalid config.minCTAs %d / maxCTAs %d", c.minCTAs, c.maxCTAs);
      return ncclInvalidArgument;
    }
  }
  *comm = NULL;
  /* Init completes before returning (or before ncclGroupEnd returns), so
   * nonblocking callers see success. */
  struct initJob job = {comm, nranks, rank, 0, blocking, commId, ncclSuccess, NULL, 0, 0, NULL, 0};
  return groupInit(&job);
}

static void *initJobThread(void *p) {
  struct initJob *j = p;
  j->res = j->excluded ? commShrinkRun(j) : j->parent ? commSplitRun(j) : commInit(j->comm, j->nranks, &j->id, j->rank, j->cudaDev, j->blocking);
  return NULL;
}

/* Ranks of one communicator in one process must rendezvous at the same
 * time, so each init runs on its own thread; returns the first error, and
 * on error no communicator is left behind. */
ncclResult_t initJobsRun(struct initJob *jobs, int n) {
  if (n == 1) {
    initJobThread(&jobs[0]);
    return jobs[0].res;
  }
  pthread_t *th = calloc(n, sizeof *th);
  if (!th) return ncclSystemError;
  ncclResult_t res = ncclSuccess;
  int started = 0, inProgress = 0;
  for (int i = 0; i < n; i++) {
    *jobs[i].comm = NULL;
    if (pthread_create(&th[i], NULL, initJobThread, &jobs[i]) != 0) {
      WARN("ncclCommInitRank : cannot start an init thread: %s", strerror(errno));
      res = ncclSystemError;
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    /* ncclInProgress: a nonblocking communicator still joining. */
    if (jobs[i].res == ncclInProgress) inProgress = 1;
    else if (jobs[i].res != ncclSuccess && res == ncclSuccess) res = jobs[i].res;
  }
  if (res != ncclSuccess)
    for (int i = 0; i < started; i++)
      if (*jobs[i].comm) {
        commFree(*jobs[i].comm, 0);
        *jobs[i].comm = NULL;
      }
  free(th);
  return res == ncclSuccess && inProgress ? ncclInProgress : res;
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist) {
  if (comms == NULL) {
    WARN("ncclCommInitAll : comm argument is NULL");
    return ncclInvalidArgument;
  }
  if (ndev < 1) {
    WARN("ncclCommInitAll : invalid ndev %d", ndev);
    return ncclInvalidArgument;
  }
  for (int i = 0; devlist && i < ndev; i++)
    if (devlist[i] < 0) {
      WARN("ncclCommInitAll : invalid device %d at devlist[%d]", devlist[i], i);
      return ncclInvalidArgument;
    }
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  struct initJob *jobs = calloc(ndev, sizeof *jobs);
  if (!jobs) return ncclSystemError;
  for (int i = 0; i < ndev; i++)
    jobs[i] = (struct initJob){&comms[i], ndev, i, devlist ? devlist[i] : i, 1, id, ncclSuccess, NULL, 0, 0, NULL, 0};
  ncclResult_t res = initJobsRun(jobs, ndev);
  free(jobs);
  return res;
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  CHECK(commCheck(comm, "ncclCommFinalize"));
  if (comm->finalized) {
    WARN("ncclCommFinalize : comm %p is already finalized", (void *)comm);
    return ncclInvalidArgument;
  }
  commWaitIdle(comm);
  comm->finalized = 1;
  /* Nothing more will come from this rank: a peer still waiting for it (in
   * an operation this rank never called) fails at once, naming it. */
  if (comm->boot.oob) oobSayGoodbye(&comm->boot, oobFinalized);
  return comm->asyncError;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;
  CHECK(commCheck(comm, "ncclCommDestroy"));
  int rank = comm->rank, n = comm->nranks;
  commWaitIdle(comm);
  /* A communicator that failed leaves like an aborted one. */
  commFree(comm, comm->asyncError == ncclSuccess);
  INFO(subsysInit, "rank %d nranks %d - Destroy COMPLETE", rank, n);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;
  CHECK(commCheck(comm, "ncclCommAbort"));
  /* Calls in flight see the flag at their next pause and return. */
  __atomic_store_n(&comm->abortFlag, 1, __ATOMIC_RELEASE);
  commWaitIdle(comm);
  int rank = comm->rank;
  commFree(comm, 0);
  INFO(subsysInit, "rank %d - Abort COMPLETE", rank);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError) {
  CHECK(commCheck(comm, "ncclCommGetAsyncError"));
  if (asyncError == NULL) {
    WARN("ncclCommGetAsyncError : asyncError argument is NULL");
    return ncclInvalidArgument;
  }
  *asyncError = watchAsyncError(comm);
  return ncclSuccess;
}

#define COMM_QUERY(name, field)                                 \
  NCCL_API(ncclResult_t, name, const ncclComm_t comm, int *out) { \
    CHECK(commCheck(comm, #name));                              \
    if (out == NULL) {                                          \
      WARN(#name " : output argument is NULL");                 \
      return ncclInvalidArgument;                               \
    }                                                           \
    *out = comm->field;                                         \
    return ncclSuccess;                                         \
  }
COMM_QUERY(ncclCommCount, nranks)
COMM_QUERY(ncclCommUserRank, rank)
COMM_QUERY(ncclCommCuDevice, cudaDev)

NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size) {
  if (ptr == NULL) {
    WARN("ncclMemAlloc : ptr argument is NULL");
    return ncclInvalidArgument;
  }
  if (size == 0) {
    *ptr = NULL;
    return ncclSuccess;
  }
  if (posix_memalign(ptr, 4096, size) != 0) {
    WARN("ncclMemAlloc : cannot allocate %zu bytes", size);
    return ncclSystemError;
  }
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr) {
  free(ptr);
  return ncclSuccess;
}
