/* The communicator's life as a mechanism (comm.h): create one rank
 * (rendezvous, agreement, transports), wait until no call runs on it, free
 * it. The entry points that check the user's arguments are in init.c. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "api/comm.h"

#include "algo/algo.h"
#include "api/rma.h"
#include "api/watch.h"
#include "bootstrap/oob.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/param.h"
#include "core/spin.h"
#include "core/wait.h"
#include "engine/stream.h"
#include "transport/transport.h"
#include "tune/tune.h"
#include "chorus.h"

_Static_assert(sizeof(struct bootstrapHandle) <= NCCL_UNIQUE_ID_BYTES, "handle must fit in ncclUniqueId");

static pthread_once_t versionOnce = PTHREAD_ONCE_INIT;
/* NCCL's version line, chorus's version where NCCL names its CUDA: a line of
 * its own at NCCL_DEBUG=VERSION or WARN, an INFO line above. */
static void printVersion(void) {
  int level = logLevelNow();
  if (level == logVersion || level == logWarn)
    CHORUS_LOG(logVersion, subsysAll, "NCCL version %d.%d.%d+chorus-%d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
               CHORUS_MAJOR, CHORUS_MINOR, CHORUS_PATCH);
  else
    INFO(subsysAll, "NCCL version %d.%d.%d+chorus-%d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, CHORUS_MAJOR,
         CHORUS_MINOR, CHORUS_PATCH);
}
void commLogVersion(int rank) {
  /* Once per process, as NCCL: every rank's at INFO, rank 0's below */
  if (logLevelNow() > logWarn || rank == 0) pthread_once(&versionOnce, printVersion);
}


void commWaitIdle(struct ncclComm *comm) {
  struct waitState w;
  waitBegin(&w, NULL, NULL, NULL, "waiting for calls in flight");
  while (__atomic_load_n(&comm->busy, __ATOMIC_ACQUIRE) > 0)
    if (waitPause(&w) != ncclSuccess) break;
}

void commEndInFlight(struct ncclComm *comm) {
  __atomic_store_n(&comm->abortFlag, 1, __ATOMIC_RELEASE);
  commWaitIdle(comm);
  __atomic_store_n(&comm->abortFlag, 0, __ATOMIC_RELEASE);
}

/* The refusal of a call while a nonblocking init runs: its own, or
 * (child) that of a split or shrink of it. */
static ncclResult_t initRunning(const struct ncclComm *comm, const char *name, int child) {
  WARN("%s : rank %d: Attempt to use communicator before the previous operation returned ncclSuccess: %s (poll "
       "ncclCommGetAsyncError on it until it says ncclSuccess, or ncclCommAbort it)",
       name, comm->rank,
       child ? "a nonblocking ncclCommSplit or ncclCommShrink of it is still setting up the new communicator"
             : "it is still initializing");
  return ncclInvalidArgument;
}

/* Lets go of a list of pending children, taken off their parent: each
 * pendNext is read before its child is unpinned (and may be freed). */
static void commUnpinPending(struct ncclComm *c) {
  while (c) {
    struct ncclComm *next = c->pendNext;
    commPin(c, 0);
    c = next;
  }
}

void commPendOnChild(struct ncclComm *parent, struct ncclComm *child) {
  commPin(child, 1); /* readable until the parent has seen it done */
  spinLock(&parent->pendLock);
  int attach = !parent->freeing; /* else its free has passed: nobody would unpin the child */
  if (attach) { /* last, so that the list is in the order the children started setting up */
    struct ncclComm **at = &parent->pendingChild;
    while (*at) at = &(*at)->pendNext;
    child->pendNext = NULL;
    *at = child;
  }
  spinUnlock(&parent->pendLock);
  if (!attach) commPin(child, 0);
}

void commJobBegin(struct ncclComm *parent) {
  __atomic_add_fetch(&parent->busy, 1, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&parent->jobsRunning, 1, __ATOMIC_ACQ_REL);
}

void commJobEnd(struct ncclComm *parent, ncclResult_t res, const char *func, const char *why) {
  if (res != ncclSuccess && res != ncclInProgress) {
    spinLock(&parent->pendLock);
    int first = __atomic_load_n(&parent->jobResult, __ATOMIC_RELAXED) == ncclSuccess;
    if (first) __atomic_store_n(&parent->jobResult, res, __ATOMIC_RELEASE);
    spinUnlock(&parent->pendLock);
    if (first) {
      char text[sizeof parent->failText];
      snprintf(text, sizeof text, "%s of it failed: %.400s", func, why && why[0] ? why : ncclGetErrorString(res));
      commSetFailText(parent, text);
    }
  }
  __atomic_sub_fetch(&parent->jobsRunning, 1, __ATOMIC_ACQ_REL);
  __atomic_sub_fetch(&parent->busy, 1, __ATOMIC_SEQ_CST); /* last: an abort waiting for it may free parent now */
}

ncclResult_t commChildPending(struct ncclComm *comm, int *settled) {
  if (settled) *settled = 0;
  if (__atomic_load_n(&comm->jobsRunning, __ATOMIC_ACQUIRE)) return ncclInProgress;
  if (!__atomic_load_n(&comm->pendingChild, __ATOMIC_ACQUIRE) &&
      __atomic_load_n(&comm->jobResult, __ATOMIC_ACQUIRE) == ncclSuccess)
    return ncclSuccess;
  spinLock(&comm->pendLock); /* the children stay pinned while they pend: only their reader unpins them */
  struct ncclComm *first = comm->pendingChild;
  ncclResult_t jobRes = __atomic_load_n(&comm->jobResult, __ATOMIC_RELAXED); /* a job that failed before it made a child */
  if (!first && jobRes == ncclSuccess) {
    spinUnlock(&comm->pendLock);
    return ncclSuccess; /* another thread saw them done first */
  }
  /* An aborted child (its handle is the caller's at once in chorus) ends
   * its part of the wait: it was the caller's to end. */
  int seen = jobRes != ncclSuccess; /* children not gone (and failed jobs), whose outcome counts */
  struct ncclComm *failed = NULL; /* the first of them that failed */
  for (struct ncclComm *c = first; c; c = c->pendNext) {
    if (commGone(c)) continue;
    if (__atomic_load_n(&c->asyncError, __ATOMIC_ACQUIRE) == ncclInProgress) {
      spinUnlock(&comm->pendLock);
      return ncclInProgress;
    }
    seen++;
    if (!failed && __atomic_load_n(&c->setupResult, __ATOMIC_ACQUIRE) != ncclSuccess) failed = c;
  }
  if (jobRes != ncclSuccess) failed = NULL; /* the job's failure, whose text commJobEnd set, explains */
  ncclResult_t res = failed ? __atomic_load_n(&failed->setupResult, __ATOMIC_ACQUIRE) : jobRes;
  __atomic_store_n(&comm->jobResult, ncclSuccess, __ATOMIC_RELAXED);
  if (failed) {
    char why[sizeof comm->failText], text[sizeof comm->failText];
    commCopyFailText(failed, why, sizeof why);
    snprintf(text, sizeof text, "the new communicator of a split or shrink failed to set up: %.400s",
             why[0] ? why : ncclGetErrorString(res));
    commSetFailText(comm, text);
  }
  /* NCCL sets a nonblocking parent's state to its jobs' outcome, whatever
   * it was: a failed parent that a shrink (NCCL_SHRINK_ABORT) replaced
   * says ncclSuccess once the child is ready */
  if (seen) {
    __atomic_store_n(&comm->asyncError, res, __ATOMIC_RELEASE);
    if (res == ncclSuccess) commSetFailText(comm, ""); /* a replaced failure's text goes with it */
  } else {
    res = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  }
  comm->pendingChild = NULL;
  spinUnlock(&comm->pendLock);
  commUnpinPending(first);
  if (settled) *settled = seen > 0;
  return res;
}

/* 1 while a split or shrink of comm still runs its job or sets its child
 * up: two loads when none does (every call asks). */
static int childSettingUp(struct ncclComm *comm) {
  return (__atomic_load_n(&comm->pendingChild, __ATOMIC_RELAXED) || __atomic_load_n(&comm->jobsRunning, __ATOMIC_RELAXED)) &&
         commChildPending(comm, NULL) == ncclInProgress;
}

ncclResult_t commInitDone(struct ncclComm *comm, const char *name) {
  if (childSettingUp(comm)) return initRunning(comm, name, 1);
  if (__atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE) != ncclInProgress) return ncclSuccess;
  return initRunning(comm, name, 0);
}

ncclResult_t commReady(struct ncclComm *comm, const char *name) {
  if (__atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE)) {
    WARN("%s : rank %d: communicator was revoked (ncclCommRevoke): destroy, split or shrink it", name, comm->rank);
    return ncclInvalidUsage;
  }
  if (__atomic_load_n(&comm->suspended, __ATOMIC_ACQUIRE)) {
    WARN("%s : rank %d: communicator is suspended (ncclCommSuspend): ncclCommResume it first", name, comm->rank);
    return ncclInvalidUsage;
  }
  if (childSettingUp(comm)) return initRunning(comm, name, 1);
  ncclResult_t async = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  /* A peer that died or reported a fault since the last call: its WARN is
   * the one that explains, so return without another. */
  if (async == ncclSuccess && (async = watchAsyncError(comm)) != ncclSuccess) return async;
  if (async == ncclInProgress) return initRunning(comm, name, 0);
  if (async != ncclSuccess) {
    char why[sizeof comm->failText];
    commCopyFailText(comm, why, sizeof why);
    WARN("%s : rank %d: communicator has failed earlier (%s: %s); abort and re-create it", name, comm->rank,
         ncclGetErrorString(async), why);
    return async;
  }
  if (comm->finalized) {
    WARN("%s : rank %d: communicator was finalized", name, comm->rank);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

void commFree(struct ncclComm *comm, int graceful) {
  if (comm->initThreadRunning) { /* abort has set the flag, so it ends soon */
    pthread_join(comm->initThread, NULL);
    comm->initThreadRunning = 0;
  }
  spinLock(&comm->pendLock);
  comm->freeing = 1;
  struct ncclComm *children = comm->pendingChild;
  comm->pendingChild = NULL;
  spinUnlock(&comm->pendLock);
  commUnpinPending(children);
  if (comm->growIdMade) bootstrapRetireRoot(&comm->growId); /* no grow will use it */
  profCommFinalize(&comm->prof);
  tunePluginFinalize(&comm->tune);
  flightFree(&comm->flight);
  statsReport(&comm->stats);
  traceCommClose(&comm->trace);
  /* What this rank sent reaches its peers before its goodbye can (a
   * finalized one has waited already; a failed one has nothing its peers
   * still wait for). */
  if (graceful && !comm->finalized && __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE) == ncclSuccess)
    transportDrainAll(comm->transports, &comm->boot, commTimeoutNs(comm));
  bootstrapClose(&comm->boot, graceful);
  transportCloseAll(comm->transports);
  free(comm->conns.send);
  free(comm->conns.recv);
  free(comm->laneLast);
  free(comm->hostOf);
  free(comm->hostFirst);
  free(comm->ringOrder);
  free(comm->topo);
  free(comm->ringPos);
  free(comm->scratch);
  free(comm->userOps);
  free(comm->p2pSeq);
  free(comm->shrinkWith);
  if (comm->orderStream) streamRelease(comm->orderStream); /* the last launch's (commOrderNote's hold) */
  windowFreeAll(comm); /* the monitor, which writes into windows, has stopped */
  registerFreeAll(comm);
  rmaFreeEarly(comm);
  free(comm->rmaEarly);
  free(comm->sigGot);
  free(comm->sigTaken);
  pthread_mutex_destroy(&comm->winLock);
  commLiveRemove(comm);
  comm->startMagic = comm->endMagic = 0;
  if (__atomic_sub_fetch(&comm->holds, 1, __ATOMIC_ACQ_REL) == 0) free(comm);
}

void commGroupHold(struct ncclComm *comm, int hold) {
  if (hold) __atomic_add_fetch(&comm->holds, 2, __ATOMIC_ACQ_REL);
  else if (__atomic_sub_fetch(&comm->holds, 2, __ATOMIC_ACQ_REL) == 0) free(comm);
}

void commPin(struct ncclComm *comm, int pin) {
  if (pin) __atomic_add_fetch(&comm->holds, COMM_PIN, __ATOMIC_ACQ_REL);
  else if (__atomic_sub_fetch(&comm->holds, COMM_PIN, __ATOMIC_ACQ_REL) == 0) free(comm);
}

int commGone(const struct ncclComm *comm) { return !(__atomic_load_n(&comm->holds, __ATOMIC_ACQUIRE) & 1); }

int commGroupHeld(const struct ncclComm *comm) {
  return (__atomic_load_n(&comm->holds, __ATOMIC_ACQUIRE) & (COMM_PIN - 2)) != 0; /* the groups' holds, not pins */
}

static int channelCount(const struct commConfig *cfg) {
  int64_t lo = paramInt(paramMinNChannels), hi = paramInt(paramMaxNChannels);
  /* NCCL's old names, which it still reads where the new ones are unset */
  if (lo == -2) lo = paramInt(paramMinNRings);
  if (hi == -2) hi = paramInt(paramMaxNRings);
  /* config.minCTAs / maxCTAs (NCCL_MIN_CTAS / NCCL_MAX_CTAS): the tighter of each pair, as NCCL;
   * -2 is unset, and a maximum set below 1 is 1, as in NCCL */
  if (cfg->maxCTAs > 0 && (hi == -2 || cfg->maxCTAs < hi)) hi = cfg->maxCTAs;
  if (cfg->minCTAs > lo) lo = cfg->minCTAs;
  int64_t n = hi != -2 ? hi : 2; /* two channels by default */
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
  int trace; /* the rank wants a timeline: every rank measures its clock offset to rank 0 */
  int ringByHost; /* CHORUS_RING_ORDER=host: rings visit a host's ranks together */
  struct topoRank topo; /* what the rank sees of its host (one exchange with the rest) */
  struct tuneConfig tune;
  uint64_t ids; /* commOrigin.ids */
  char unknownNet[32]; /* NCCL_NET as this rank has it, when it names no network chorus has */
};

/* The topology the tuner's model reads, the same on every rank. */
static struct tuneTopo tuneTopoOf(const struct bootstrap *b, const struct commAgreement *agree) {
  struct tuneTopo t = {b->nranks, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < b->nranks; i++) {
    int same = 0, first = 1, machine = 0;
    for (int j = 0; j < b->nranks; j++) {
      if (b->peers[j].hostHash == b->peers[i].hostHash) {
        same++;
        if (j < i) first = 0;
      }
      machine += agree[i].topo.kernel && agree[j].topo.kernel == agree[i].topo.kernel;
    }
    t.nhosts += first;
    if (same > t.localRanks) t.localRanks = same;
    if (same > t.machineRanks) t.machineRanks = same;
    if (machine > t.machineRanks) t.machineRanks = machine;
    if (t.cores == 0 || (agree[i].cores > 0 && agree[i].cores < t.cores)) t.cores = agree[i].cores;
    uint64_t cache = topoCacheBytes(agree[i].topo.l3KiB);
    if (t.cacheBytes == 0 || cache < t.cacheBytes) t.cacheBytes = cache;
    if (transportTable[transportFor(b, i)] == &netTransport) t.net = 1;
    if (same > 1 && b->peers[i].shmDisable) t.hostNet = 1;
    const struct topoRank *r = &agree[i].topo;
    for (int k = 0; k < r->nnics && k < TOPO_MAX_NICS; k++)
      if (r->nics[k].speedMbps > 0 && strcmp(r->nics[k].name, r->ifname) == 0 &&
          (t.netMbps == 0 || r->nics[k].speedMbps < t.netMbps))
        t.netMbps = r->nics[k].speedMbps;
  }
  return t;
}

long commBusId(int cudaDev) { return (long)cudaDev << 12; }

/* NCCL's init lines: on rank 0 each channel's ring (ranks as wide as the
 * largest), on every rank its trees and the transport to each peer. */
static void logTopology(struct ncclComm *comm) {
  char line[1024];
  int n = comm->nranks;
  int me = comm->ringPos ? comm->ringPos[comm->rank] : comm->rank;
  int next = comm->ringOrder ? comm->ringOrder[(me + 1) % n] : (comm->rank + 1) % n;
  int width = snprintf(NULL, 0, "%d", n - 1);
  for (int c = 0; c < comm->nch && comm->rank == 0; c++) {
    int o = 0;
    for (int i = 0; i < n && o < (int)sizeof line - 16; i++)
      o += snprintf(line + o, sizeof line - o, " %*d", width, comm->ringOrder ? comm->ringOrder[i] : i);
    INFO(subsysInit, "Channel %02d/%02d :%s", c, comm->nch, line);
  }
  struct algoCtx ctx = {comm->rank, n, NULL, NULL, NULL, NULL, NULL, 0, comm->hostOf, comm->nhosts,
                        comm->ringOrder, comm->ringPos, comm->hostFirst};
  int o = 0;
  for (int c = 0; c < comm->nch && o < (int)sizeof line - 64; c++) {
    int up, kids[3];
    algoTreeLinks(&ctx, c, &up, kids);
    o += snprintf(line + o, sizeof line - o, " [%d] %d/%d/%d->%d->%d", c, kids[0], kids[1], kids[2], comm->rank, up);
  }
  INFO(subsysInit, "Trees%s", o ? line : "");
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
  INFO(subsysInit, "Connected all rings, use ring PXN 0 GDR 0");
  INFO(subsysInit, "Connected all trees");
  INFO(subsysInit, "%d coll channels, 0 collnet channels, 0 nvls channels, %d p2p channels, 1 p2p channels per peer",
       comm->nch, 1);
  INFO(subsysInit, "chorus : %zu-byte FIFO slots per connection and channel", comm->slotBytes);
}

/* Ranks of this rank's host. */
static int commLocalRanks(const struct ncclComm *comm) {
  int local = 0;
  for (int i = 0; i < comm->nranks; i++) local += comm->hostOf[i] == comm->hostOf[comm->rank];
  return local ? local : 1;
}

/* The ranks on this rank's machine: of every host that runs on the same
 * kernel (network namespaces or containers of one machine, each a host of
 * its own, whose ranks share its CPUs all the same). */
static int commMachineRanks(const struct ncclComm *comm) {
  uint64_t kernel = comm->topo[comm->rank].kernel;
  int n = 0;
  for (int i = 0; i < comm->nranks; i++) n += kernel && comm->topo[i].kernel == kernel;
  return n;
}

/* The ranks that share this rank's CPUs: its host's, or its machine's
 * when more. */
static int commCoreRanks(const struct ncclComm *comm) {
  int local = commLocalRanks(comm), machine = commMachineRanks(comm);
  return machine > local ? machine : local;
}

/* 1 when rank i runs on this rank's CPUs: on its machine (the same
 * kernel) where that is known, else on its host. */
static int commSharesCpusWith(const struct ncclComm *comm, int i) {
  const struct topoRank *me = &comm->topo[comm->rank];
  return me->kernel ? comm->topo[i].kernel == me->kernel : comm->hostOf[i] == comm->hostOf[comm->rank];
}

/* The CPUs those ranks may run on, together: the union of their affinity
 * masks (ranks pinned to a core each, as mpirun --bind-to core pins them,
 * have as many as ranks; ranks all started under `taskset -c 0` one), or
 * the machine's PUs where a rank's mask is not known whole. */
static int commCoreCpus(const struct ncclComm *comm) {
  const struct topoRank *me = &comm->topo[comm->rank];
  uint64_t set[TOPO_CPU_WORDS] = {0};
  for (int i = 0; i < comm->nranks; i++) {
    const struct topoRank *t = &comm->topo[i];
    if (!commSharesCpusWith(comm, i)) continue;
    if (t->ncpus <= 0 || topoCpuListAdd(t->cpus, set) != t->ncpus) return me->pus;
  }
  int n = 0;
  for (int w = 0; w < TOPO_CPU_WORDS; w++) n += __builtin_popcountll(set[w]);
  return n;
}

/* 1 when they are more than their CPUs. Hosts on one machine that spin as
 * if each had the CPUs to itself took the cores their peers needed: 8
 * ranks on 4 namespaces of this 2-core machine, each spinning 50 rounds of
 * recv() before it slept, 8-byte AllReduce 630 us, yielding after 2 rounds
 * 180 us. The one measure of "a core per rank" (the waits' spinning, auto
 * single copy, shm's offers: waitCoresShared). */
static int commSharesCores(const struct ncclComm *comm) {
  int cpus = commCoreCpus(comm);
  return cpus > 0 && commCoreRanks(comm) > cpus;
}

/* Forked ranks start on their parent's CPU and can stay together there for
 * tens of milliseconds (this VM's kernel wakes a task where it slept), each
 * copying or spinning in the other's time slice: 2 ranks, AllGather 4 MiB,
 * the first 10-12 calls took 700-1300 us against 300-330 after (a step
 * trace, CHORUS_TRACE_LEVEL=steps). So the thread that makes the
 * communicator starts where its rank's place among the ranks sharing its
 * CPUs says (rank i of them on their CPU i, modulo the CPUs), where its
 * mask is every CPU (nobody pinned it) and no other rank of the
 * communicator is a thread of its process (ncclCommInitAll). The mask is
 * given back at once; waits move a thread that still meets another on its
 * CPU (core/wait.c). Once per process, for its first communicator: a
 * later one (a split, a torch subgroup) numbers a subset of the machine's
 * ranks, whose places would fall on CPUs other ranks were given. */
static void commPlaceThread(const struct ncclComm *comm) {
  static int placedOnce;
  if (__atomic_exchange_n(&placedOnce, 1, __ATOMIC_RELAXED)) return;
  int slot = 0, sharing = 0;
  for (int i = 0; i < comm->nranks; i++) {
    if (!commSharesCpusWith(comm, i)) continue;
    if (i != comm->rank && comm->hostOf[i] == comm->hostOf[comm->rank] &&
        comm->boot.peers[i].pid == comm->boot.peers[comm->rank].pid)
      return; /* ranks as threads of one process: placing one thread for each would move this one around */
    sharing++;
    slot += i < comm->rank;
  }
  if (sharing < 2) return;
  int cpu = waitPlaceOn(slot);
  if (cpu >= 0) INFO(subsysInit, "chorus : rank %d starts on CPU %d (%d of the %d ranks that share this machine's CPUs)",
                     comm->rank, cpu, slot, sharing);
}

/* CHORUS_NT_STORES: from what size an operation's output goes past the
 * cache. Auto: when the outputs of the host's ranks together would fill
 * the L3 twice over, keeping them cached only evicts the FIFOs and the
 * inputs still to be read, and every line written costs a read first.
 * The L3 counts at most 32 MiB (topoCacheBytes): this machine says 480
 * MiB, and behaves as 32: 2 ranks, AllReduce 32 MiB +8%, 64 MiB +27%, 256
 * MiB +22%, 16 MiB -9% with them; 4 ranks, 16 MiB +17%, 8 MiB even. A
 * local choice: ranks need not agree. */
static uint64_t commNtStoreBytes(const struct ncclComm *comm) {
  int64_t v = paramInt(paramNtStores);
  if (v >= 0) return (uint64_t)v;
  return topoPastCacheBytes(topoCacheBytes(comm->topo[comm->rank].l3KiB), commLocalRanks(comm));
}

/* CHORUS_SINGLE_COPY: from what size an operation's sends (where its
 * algorithm allows, algoStableSends) are read by local receivers in the
 * sender's buffer (one copy, with CMA) instead of through the FIFOs (two).
 * Set, it holds for every operation; auto (-1), for collectives only
 * (AllGather, Broadcast). While each of the host's ranks has a core to
 * itself, from where the NT stores start: there the FIFO's two
 * copies leave the cache (2 ranks on 2 cores, AllGather 256 MiB 2.6 ->
 * 4.1 GB/s busbw, Broadcast 3.1 -> 4.6). Below it the FIFO's copies stay
 * in the cache, where a copy runs at 2-4x the kernel's behind
 * process_vm_readv (a scratch program, 2026-12-06: 512 KiB 48 against 13
 * GB/s, 4 MiB 31 against 11, 64 MiB 11 against 6), and run on both cores at
 * once. From 2026-12-05 to -06 two ranks read each other from 64 KiB,
 * measured faster then (AllGather 64 KiB-1 MiB busbw out of place / in
 * place 6.5-8.4 / 7.1-10.3 -> 10.9-16.6 / 12.8-24.0); since the FIFOs fault
 * their pages in once (connPopulate) they are the faster: 7 alternated runs
 * of `chorusrun -n 2 all_gather_perf -b 32K -e 16M -f 2 -n 50 -w 10 -c 0
 * -y 1` (and broadcast_perf) against CHORUS_SINGLE_COPY=0, 2026-12-06,
 * medians of the FIFO's time over single copy's, out of place / in place:
 * AllGather 64 KiB-2 MiB 0.61-0.91 / 0.48-0.79, 4 MiB 1.12 / 0.99, 8-16
 * MiB 0.78-0.87 / 0.73; Broadcast 512 KiB-16 MiB 0.79-0.99 / 0.54-0.88,
 * 64-256 KiB 0.99-1.30 / 0.83-1.16. Send/Recv stays with the FIFOs: both
 * directions at once lost (5.9 -> 2.2).
 * Where ranks share cores, one copy wins in a window: from
 * SHARED_SINGLE_COPY_MIN (at 128 KiB the FIFO is faster, 256-512 KiB a
 * draw) to below CHORUS_NT_STORES's size, from where the FIFO's copies
 * write past the cache and single copy loses (4 ranks on 2 cores,
 * Broadcast 16-256 MiB 4.4 -> 2.4-3.0 GB/s). Out-of-place times, 3
 * alternated runs of `-y 1` against the FIFO, 2026-12-06: 3 ranks on 2
 * cores, AllGather 1 MiB 200-212 -> 152-180 us, 4 MiB 840-874 -> 708-769,
 * 16 MiB 3841-4256 -> 3366-3515, 64 MiB 17.0-18.2 -> 20.6-22.4 ms; 4 ranks,
 * AllGather 1 MiB 230-241 -> 189-207, 4 MiB 902-956 -> 821-841 (in place
 * 730-780 -> 665-681), Broadcast 1 MiB 242-308 -> 177-219, 4 MiB 1027-1278
 * -> 749-919, 64 MiB 17.5-22.6 -> 24.5-26.1 ms; 8 ranks, AllGather 4 MiB
 * 2040-2411 -> 1788-2094, 16 MiB 8231-8385 -> 8809-10166 (their NT size is
 * 8 MiB); 2 ranks on one CPU, AllGather 1 MiB 215-232 -> 173-207, in place
 * 4 MiB 625-679 -> 489-529, Broadcast in place 4 MiB 637-725 -> 491-514.
 * A local choice: a receiver reads what it is given.
 * Memory of ncclMemAlloc's, which local peers map, is read where it lies at
 * any size (unless CHORUS_SINGLE_COPY=0): a plain copy at memory speed, the
 * FIFO's two copies made one. */
#define SHARED_SINGLE_COPY_MIN (1ull << 20)
static void commSingleCopy(struct ncclComm *comm) {
  int64_t v = paramInt(paramSingleCopy);
  comm->mappedRefs = v != 0;
  comm->singleCopyBelow = 0;
  comm->singleCopyP2pBytes = 0;
  if (v >= 0) {
    comm->singleCopyBytes = comm->singleCopyP2pBytes = (uint64_t)v;
    return;
  }
  int cores = commCoreCpus(comm) > 0;
  if (!cores) {
    comm->singleCopyBytes = 0;
  } else if (!commSharesCores(comm)) {
    comm->singleCopyBytes = comm->ntStoreBytes;
  } else {
    /* No window where the FIFO's stores never pass the cache (CHORUS_NT_STORES=0), as with a core each. */
    uint64_t below = comm->ntStoreBytes;
    comm->singleCopyBytes = below > SHARED_SINGLE_COPY_MIN ? SHARED_SINGLE_COPY_MIN : 0;
    comm->singleCopyBelow = below;
  }
}

/* Every rank's view of its host and CPUs (exchanged with the agreement):
 * kept, logged ("Topology:") and, on rank NCCL_TOPO_DUMP_FILE_RANK,
 * written to NCCL_TOPO_DUMP_FILE. */
static ncclResult_t commTopology(struct ncclComm *comm) {
  int n = comm->nranks, rank = comm->rank;
  const struct topoRank *me = &comm->topo[rank];
  char host[400];
  topoHostStr(me, host, sizeof host);
  INFO(subsysInit, "Topology: host %s (%s): %s; rank %d: NUMA %d, CPUs %s", comm->boot.peers[rank].hostname,
       me->source, host, rank, me->numa, me->cpus[0] ? me->cpus : "?");
  const char *dump = paramStr(paramTopoDumpFile);
  if (dump[0] && rank == paramInt(paramTopoDumpFileRank)) {
    const char **names = malloc(sizeof(char *) * (size_t)n);
    if (!names) return ncclSystemError;
    for (int i = 0; i < n; i++) names[i] = comm->boot.peers[i].hostname;
    int err = topoDumpXml(dump, comm->topo, comm->hostOf, names, n);
    free(names);
    if (err) WARN("NCCL_TOPO_DUMP_FILE=%s: %s", dump, strerror(err));
    else INFO(subsysInit, "Topology of %d rank(s) on %d host(s) written to %s", n, comm->nhosts, dump);
  }
  return ncclSuccess;
}

/* What this rank tells the others at rendezvous. */
static void commPeerInfo(int rank, int cudaDev, struct bootstrapPeerInfo *me) {
  memset(me, 0, sizeof *me);
  me->rank = rank;
  me->pid = getpid();
  me->callerTid = (uint32_t)gettid(); /* commSetup's: the init's caller's */
  me->cudaDev = cudaDev;
  me->shmDisable = paramInt(paramShmDisable) == 1; /* as NCCL compares it: 2 or -1 leave shared memory on */
  me->hostHash = bootstrapHostHash();
  gethostname(me->hostname, sizeof me->hostname - 1);
  if (getrandom(&me->nonce, sizeof me->nonce, 0) != sizeof me->nonce) me->nonce = clockNs() ^ (uint64_t)me->pid;
}

void commReportBadRank(const ncclUniqueId *id, int rank, int nranks) {
  struct bootstrapHandle h;
  memcpy(&h, id->internal, sizeof h);
  struct bootstrapPeerInfo me;
  commPeerInfo(rank, 0, &me);
  bootstrapReportBadRank(&h, rank, nranks, &me);
}

void commReportDisagreement(const ncclUniqueId *id, int nranks) {
  struct bootstrapHandle h;
  memcpy(&h, id->internal, sizeof h);
  struct bootstrapPeerInfo me;
  commPeerInfo(-1, 0, &me);
  bootstrapReportDisagreement(&h, nranks, &me);
}

static struct ncclComm *commAlloc(int nranks, const ncclUniqueId *id, int rank, int cudaDev, int blocking,
                                   const struct commOrigin *origin) {
  struct ncclComm *comm = calloc(1, sizeof *comm);
  if (!comm) return NULL;
  comm->startMagic = comm->endMagic = COMM_MAGIC;
  comm->holds = 1;
  static uint64_t serials;
  comm->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
  /* A user op handle of another communicator decodes to no op of this one
   * (short of a 1 in 2^20 chance): the serial's bits, spread. */
  comm->opMangle = (uint32_t)((comm->serial * 0x9e3779b97f4a7c15ull) >> 44) & (COMM_MAX_USER_OPS - 1);
  comm->rank = rank;
  comm->nranks = nranks;
  comm->cudaDev = cudaDev;
  comm->blocking = blocking;
  comm->callerTid = (uint32_t)gettid();
  comm->boot.listenFd = -1;
  comm->initId = *id;
  pthread_mutex_init(&comm->winLock, NULL);
  comm->sigGot = calloc((size_t)nranks, sizeof *comm->sigGot);
  comm->sigTaken = calloc((size_t)nranks, sizeof *comm->sigTaken);
  comm->rmaEarly = calloc((size_t)nranks, sizeof *comm->rmaEarly);
  if (!comm->sigGot || !comm->sigTaken || !comm->rmaEarly || !commLiveAdd(comm)) {
    free(comm->sigGot);
    free(comm->sigTaken);
    free(comm->rmaEarly);
    free(comm);
    return NULL;
  }
  comm->origin = *origin;
  if (origin->config) comm->config = *origin->config;
  comm->origin.config = NULL; /* the caller's */
  comm->commHash = fnv1aBytes(FNV1A_INIT, id->internal, sizeof id->internal);
  return comm;
}

/* The FIFO per connection: rank 0's NCCL_BUFFSIZE, else (unset: 0) NCCL's
 * 4 MiB, and 512 KiB (8 slots of 64 KiB) when every rank has a host of its
 * own, so that every connection is a socket. There smaller slots pipeline
 * a ring step (the next hop starts on the first 64 KiB, not after 128),
 * and a FIFO that stays in the cache is written by recv() and read by the
 * reduction there: 2 ranks on 2 network namespaces, AllReduce medians of 5
 * alternated runs, 4 MiB -> 512 KiB: 256 KiB 172 -> 155 us, 1 MiB 757 ->
 * 536 us, 4 MiB 4223 -> 2513 us, 8 MiB 8936 -> 5637 us. With 2 ranks per
 * host (4 ranks, shared memory inside each) it was 3-25% faster at
 * 64 KiB-1 MiB but 27% slower at 16 MiB, so hosts with several ranks keep
 * 4 MiB. */
static size_t commBuffSize(const struct ncclComm *comm, int64_t rank0) {
  if (rank0 > COMM_MAX_BUFFSIZE)
    WARN("NCCL_BUFFSIZE=%lld (rank 0's) is more than a FIFO can be (%lld): using the default", (long long)rank0,
         COMM_MAX_BUFFSIZE);
  else if (rank0 > 0)
    return rank0 < 64 * 1024 ? 64 * 1024 : (size_t)rank0;
  /* the table's default, not this rank's setting: rank 0's holds */
  int socketsOnly = comm->nhosts > 1 && comm->nhosts == comm->nranks;
  return socketsOnly ? 512 * 1024 : (size_t)strtoll(paramDefault(paramBuffSize), NULL, 10);
}

/* Everything that needs the other ranks: rendezvous, agreement, shared
 * memory. On failure the communicator is left for commFree. */
static ncclResult_t commSetup(struct ncclComm *comm) {
  uint64_t t0 = clockNs();
  int rank = comm->rank, nranks = comm->nranks, cudaDev = comm->cudaDev;
  paramReload(); /* variables set since the last communicator count */
  logSetRank(rank);
  logParams();
  logStartThreadErrors(); /* the cause of a failure below is this thread's last WARN */
  INFO(subsysInit, "[Rank %d] %s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START",
       rank, comm->origin.func, (void *)comm, rank, nranks, cudaDev, cudaDev, commBusId(cudaDev),
       (unsigned long long)comm->commHash);
  ncclResult_t res;
  int booted = 0, ownRoot = 0;
  struct bootstrapHandle h;
  memcpy(&h, comm->initId.internal, sizeof h);
  if (!(h.flags & BOOTSTRAP_ROOT_UP) && rank == 0) {
    CHECKGOTO(bootstrapStartRoot(&h, nranks), res, fail);
    ownRoot = 1;
  }

  struct bootstrapPeerInfo me;
  commPeerInfo(rank, cudaDev, &me);
  me.callerTid = comm->callerTid; /* this may be a setup thread of its own */
  CHECKGOTO(bootstrapInit(&comm->boot, &h, rank, nranks, &me, &comm->abortFlag), res, fail);
  booted = 1;
  comm->boot.timeoutMs = &comm->timeoutMs;
  uint64_t tBoot = clockNs();

  struct commAgreement *agree = calloc(nranks, sizeof *agree);
  if (!agree) {
    res = ncclSystemError;
    goto fail;
  }
  agree[rank].version = NCCL_VERSION_CODE;
  agree[rank].ids = comm->origin.ids;
  agree[rank].nch = channelCount(&comm->config);
  agree[rank].check = paramInt(paramCheck) != 0;
  /* 0: unset, the default then depends on the hosts (commBuffSize) */
  agree[rank].buffSize = paramFromEnv(paramBuffSize) && !paramRejected(paramBuffSize) ? paramInt(paramBuffSize) : 0;
  struct tuneConfig myTune;
  tuneConfigFromEnv(&myTune);
  agree[rank].tune = myTune;
  agree[rank].cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  agree[rank].trace = traceWanted();
  agree[rank].ringByHost = strcasecmp(paramStr(paramRingOrder), "rank") != 0;
  if (agree[rank].ringByHost && strcasecmp(paramStr(paramRingOrder), "host") != 0)
    WARN("CHORUS_RING_ORDER=%s is neither host nor rank: using host", paramStr(paramRingOrder));
  /* As NCCL, which loads the network NCCL_NET names at every init (a host
   * of its own or not); checked here so that every rank hears whose it is. */
  const char *net = paramStr(paramNet);
  if (net[0] && !transportNetKnown(net)) snprintf(agree[rank].unknownNet, sizeof agree[rank].unknownNet, "%s", net);
  /* hwloc's view where someone reads it (the INFO log, the dump), sysfs's otherwise */
  topoDiscover(&agree[rank].topo, logLevelNow() >= logInfo || paramStr(paramTopoDumpFile)[0]);
  snprintf(agree[rank].topo.ifname, sizeof agree[rank].topo.ifname, "%.15s", comm->boot.ifname);
  res = bootstrapAllGather(&comm->boot, agree, sizeof *agree);
  uint64_t tGather = clockNs();
  struct commAgreement a0 = agree[0];
  struct tuneTopo topo = tuneTopoOf(&comm->boot, agree);
  int anyTrace = 0;
  for (int i = 0; i < nranks; i++) anyTrace |= agree[i].trace;
  for (int i = 0; res == ncclSuccess && i < nranks; i++)
    if (agree[i].version != a0.version) {
      WARN("Mismatched NCCL version detected : rank %d has %d, rank 0 has %d", i, agree[i].version, a0.version);
      res = ncclInvalidUsage;
    } else if (agree[i].unknownNet[0]) {
      WARN("NCCL_NET=%s : no such network transport (chorus has Socket only), on rank %d", agree[i].unknownNet, i);
      res = ncclInvalidUsage;
    } else if (agree[i].ids != a0.ids) {
      WARN("%s : rank %d passed other unique ids than rank 0 (every rank must pass the same nId ids in the same "
           "order)", comm->origin.func, i);
      res = ncclInvalidUsage;
    }
  /* Rank 0's NCCL_ALGO / NCCL_PROTO on every rank: a bad one fails every
   * rank's init alike; another rank's is checked against them, as NCCL's
   * ranks each parse their own. */
  if (res == ncclSuccess) res = tuneSetup(&comm->tune, &a0.tune, &topo);
  for (int i = 1; res == ncclSuccess && i < nranks; i++) res = tuneConfigAgree(&comm->tune, &agree[i].tune, i, i == rank);
  comm->topo = res == ncclSuccess ? calloc((size_t)nranks, sizeof *comm->topo) : NULL;
  for (int i = 0; comm->topo && i < nranks; i++) comm->topo[i] = agree[i].topo;
  if (res == ncclSuccess && !comm->topo) res = ncclSystemError;
  free(agree);
  if (res != ncclSuccess) goto fail;
  comm->nch = a0.nch;
  comm->check = a0.check;
  comm->tune.logChoices = comm->rank == 0;

  comm->conns.nranks = nranks;
  comm->conns.nch = comm->nch;
  size_t nconn = (size_t)nranks * (comm->nch + 1);
  comm->conns.send = calloc(nconn, sizeof(struct conn));
  comm->conns.recv = calloc(nconn, sizeof(struct conn));
  comm->laneLast = malloc(sizeof(int) * (comm->nch + 2 * nranks));
  comm->hostOf = malloc(sizeof(int) * nranks);
  comm->hostFirst = malloc(sizeof(int) * nranks);
  comm->scratch = malloc(COMM_SCRATCH_BYTES);
  comm->p2pSeq = calloc(2 * (size_t)nranks, sizeof *comm->p2pSeq);
  if (!comm->p2pSeq || !comm->conns.send || !comm->conns.recv || !comm->laneLast || !comm->hostOf || !comm->hostFirst ||
      !comm->scratch) {
    res = ncclSystemError;
    goto fail;
  }
  comm->nhosts = 0;
  for (int i = 0; i < nranks; i++) { /* the host of the first rank with the same identity, or a new one */
    int j = 0;
    while (j < i && comm->boot.peers[j].hostHash != comm->boot.peers[i].hostHash) j++;
    comm->hostOf[i] = j < i ? comm->hostOf[j] : comm->nhosts++;
  }
  algoHostFirst(comm->hostOf, nranks, comm->nhosts, comm->hostFirst);
  int minLocal = nranks;
  for (int h = 0; h < comm->nhosts; h++) {
    int on = 0;
    for (int i = 0; i < nranks; i++) on += comm->hostOf[i] == h;
    if (on < minLocal) minLocal = on;
  }
  CHECKGOTO(tunePluginInit(&comm->tune, comm->commHash, minLocal), res, fail);
  CHECKGOTO(commTopology(comm), res, fail);
  comm->ntStoreBytes = commNtStoreBytes(comm);
  commSingleCopy(comm);
  commPlaceThread(comm);
  if (commSharesCores(comm)) {
    waitSharedCores();
    INFO(subsysInit, "chorus : %d ranks on this machine's %d CPUs (%d on this host): waits yield after a few spins",
         commCoreRanks(comm), commCoreCpus(comm), commLocalRanks(comm));
  }
  if (a0.ringByHost && comm->nhosts > 1) { /* rank 0's choice holds: every rank builds the same rings */
    comm->ringOrder = malloc(sizeof(int) * nranks);
    comm->ringPos = malloc(sizeof(int) * nranks);
    if (!comm->ringOrder || !comm->ringPos) {
      res = ncclSystemError;
      goto fail;
    }
    algoRingOrder(comm->hostOf, nranks, comm->ringOrder, comm->ringPos);
  }
  uint64_t tConnect = clockNs();
  CHECKGOTO(transportSetupAll(comm->transports, &comm->boot, &comm->conns, commBuffSize(comm, a0.buffSize)), res, fail);
  comm->slotBytes = connSend(&comm->conns, rank, 0)->slotBytes;
  /* Everyone has mapped everyone's segment before anyone sends. */
  CHECKGOTO(bootstrapBarrier(&comm->boot), res, fail);
  if (anyTrace) { /* timelines on rank 0's clock; collective, so when any rank traces */
    int64_t offset;
    uint64_t error;
    CHECKGOTO(bootstrapClockOffset(&comm->boot, 16, &offset, &error), res, fail);
    traceCommOpen(&comm->trace, rank, nranks, comm->commHash, offset, error);
  }
  /* From here on the monitor owns the mesh (peer deaths, status queries, faults). */
  CHECKGOTO(oobStart(&comm->boot, watchStatus, rmaDeliver, comm, watchStatusBytes()), res, fail);
  comm->boot.stallProbe = watchProbe;
  comm->boot.stallProbeArg = comm;
  uint64_t tConnected = clockNs();
  logTopology(comm);
  if (comm->origin.parent)
    INFO(subsysInit,
         "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx parent %p childCount %d color %d key %d - Init "
         "COMPLETE",
         comm->origin.func, (void *)comm, rank, nranks, cudaDev, cudaDev, commBusId(cudaDev),
         (void *)comm->origin.parent, comm->origin.childCount,
         comm->origin.color, comm->origin.key);
  else
    INFO(subsysInit, "%s comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE",
         comm->origin.func, (void *)comm, rank, nranks, cudaDev, cudaDev, commBusId(cudaDev),
         (unsigned long long)comm->commHash);
  const char *name = comm->config.name[0] ? comm->config.name : NULL; /* config.commName, as NCCL hands it */
  profCommInit(&comm->prof, comm->commHash, name, comm->nhosts, nranks, rank);
  /* NCCL's phases; chorus has no kernels, topology search or graphs. */
  double total = (double)(clockNs() - comm->createdNs) / 1e9, alloc = (double)(t0 - comm->createdNs) / 1e9;
  double boot = (double)(tBoot - t0) / 1e9, gather = (double)(tGather - tBoot) / 1e9;
  double connect = (double)(tConnected - tConnect) / 1e9;
  INFO(subsysInit,
       "Init timings - %s: rank %d nranks %d total %.2f (kernels 0.00, alloc %.2f, bootstrap %.2f, allgathers %.2f, "
       "topo 0.00, graphs 0.00, connections %.2f, rest %.2f)",
       comm->origin.func, rank, nranks, total, alloc, boot, gather, connect, total - alloc - boot - gather - connect);
  return ncclSuccess;
fail: {
    /* The cause stays in what ncclGetLastError says (the root's refusal,
     * the address that could not be reached), not just the result's name. */
    char cause[600];
    snprintf(cause, sizeof cause, "%s", logThreadLastError()); /* not another thread's (nor the parent's) */
    char said[sizeof comm->failText];
    snprintf(said, sizeof said, "%s : rank %d of %d failed to initialize: %s%s%.400s", comm->origin.func, rank, nranks,
             ncclGetErrorString(res), cause[0] ? ": " : "", cause);
    WARN("%s", said);
    /* The communicator's own text (ncclGetLastError of it, and of a parent
     * whose split or shrink made it, commChildPending): its setup may have
     * run on a thread of its own, whose WARN the caller's thread never
     * saw. */
    commSetFailText(comm, said);
    /* A root in this process (ranks driven by its threads) would wait for
     * this rank until the timeout, and the ranks that checked in with it:
     * when this rank failed on its own (a system call), it refuses them now,
     * saying why. Not after an abort or a timeout: the others' own timeouts
     * then say whom they waited for. */
    if (!booted && (res == ncclSystemError || res == ncclInternalError)) {
      char why[200];
      snprintf(why, sizeof why, "rank %d of %d, in the root's process, failed before the rendezvous: %.120s", rank, nranks,
               cause[0] ? cause : ncclGetErrorString(res));
      bootstrapRefuseRoot(&h, why);
    }
    /* NCCL_COMM_ID's root, which this rank started, closes its port before
     * the failure returns: it kept it until it saw every rank leave, and a
     * retry on the same address found it taken. */
    if (ownRoot) bootstrapStopRoot(&h);
  }
  return res;
}

static void *commSetupThread(void *arg) {
  struct ncclComm *comm = arg;
  ncclResult_t res = commSetup(comm);
  __atomic_store_n(&comm->setupResult, res, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->asyncError, res, __ATOMIC_RELEASE);
  return NULL;
}

ncclResult_t commInitMake(struct ncclComm **out, int nranks, const ncclUniqueId *id, int rank, int cudaDev,
                          int blocking, const struct commOrigin *origin) {
  uint64_t created = clockNs();
  if (!origin || !origin->parent) commLogVersion(rank); /* a child (split, shrink, grow's old ranks) says none, as NCCL */
  struct ncclComm *comm = commAlloc(nranks, id, rank, cudaDev, blocking, origin);
  if (!comm) return ncclSystemError;
  comm->createdNs = created;
  flightInit(&comm->flight, rank, nranks, comm->commHash, created);
  statsInit(&comm->stats, rank, nranks, comm->commHash);
  comm->asyncError = ncclInProgress; /* until commInitSetup */
  *out = comm;
  return ncclSuccess;
}

/* The group's setup of a communicator made at the call, and its undoing,
 * count as calls in flight (busy), so that ncclCommAbort from another
 * thread waits for them (its flag ends a rendezvous) rather than free the
 * communicator under them: counted first, then the flag looked at, both
 * sequentially consistent as abort's store is, so that either the abort
 * sees the call or the call sees the abort. 0: aborted, leave it alone. */
static int commInitEnter(struct ncclComm *comm) {
  __atomic_add_fetch(&comm->busy, 1, __ATOMIC_SEQ_CST);
  if (!__atomic_load_n(&comm->abortFlag, __ATOMIC_SEQ_CST)) return 1;
  __atomic_sub_fetch(&comm->busy, 1, __ATOMIC_SEQ_CST);
  return 0;
}

/* 1 when comm's rendezvous runs on a thread of its own (commSetupWhere). */
static int setupOnThread(const struct ncclComm *comm) {
  return comm->origin.setup == commSetupOnThread || (comm->origin.setup == commSetupByMode && !comm->blocking);
}

ncclResult_t commInitSetup(struct ncclComm *comm) {
  const char *func = comm->origin.func;
  int rank = comm->rank;
  if (!commInitEnter(comm)) {
    WARN("%s : rank %d: the communicator was aborted before its group ended", func, rank);
    return ncclInvalidUsage;
  }
  ncclResult_t res;
  if (setupOnThread(comm)) {
    if (pthread_create(&comm->initThread, NULL, commSetupThread, comm) != 0) {
      WARN("%s : cannot start the init thread", func);
      res = ncclSystemError;
    } else {
      comm->initThreadRunning = 1;
      res = ncclInProgress;
    }
  } else {
    res = commSetup(comm); /* its result is the group's to publish (initJobsRun), once every init is done */
  }
  __atomic_sub_fetch(&comm->busy, 1, __ATOMIC_SEQ_CST);
  return res;
}

void commInitPublish(struct ncclComm *comm) {
  if (!setupOnThread(comm)) __atomic_store_n(&comm->asyncError, ncclSuccess, __ATOMIC_RELEASE);
}

void commInitAbandon(struct ncclComm *comm, ncclResult_t res, const char *why) {
  if (!commInitEnter(comm)) return; /* aborted meanwhile: the abort frees it */
  __atomic_store_n(&comm->abortFlag, 1, __ATOMIC_SEQ_CST); /* a rendezvous still running ends */
  if (comm->initThreadRunning) {
    pthread_join(comm->initThread, NULL);
    comm->initThreadRunning = 0;
  }
  commSetFailText(comm, why);
  __atomic_store_n(&comm->asyncError, res, __ATOMIC_RELEASE);
  __atomic_sub_fetch(&comm->busy, 1, __ATOMIC_SEQ_CST);
}

ncclResult_t commInit(struct ncclComm **out, int nranks, const ncclUniqueId *id, int rank, int cudaDev,
                      int blocking, const struct commOrigin *origin) {
  struct ncclComm *comm;
  CHECK(commInitMake(&comm, nranks, id, rank, cudaDev, blocking, origin));
  /* Blocking, the rendezvous; nonblocking (config.blocking = 0), its thread:
   * the handle is valid at once, ncclCommGetAsyncError says ncclInProgress
   * until it is done, and a watchdog may ncclCommAbort it. */
  ncclResult_t res = commInitSetup(comm);
  if (res != ncclSuccess && res != ncclInProgress) {
    commFree(comm, 0);
    return res;
  }
  commInitPublish(comm); /* alone, its result is its outcome */
  *out = comm;
  return res;
}

