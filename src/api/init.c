/* The communicator entry points: unique id, init (one rank, or several in
 * one process), split, shrink, grow, finalize, destroy, abort, and the queries.
 * Each checks its arguments, then hands an init job to the group (group.c)
 * or the mechanism (comm.c, initjob.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/comm.h"
#include "api/group.h"
#include "api/initjob.h"
#include "api/watch.h"
#include "bootstrap/oob.h"
#include "chorus.h"
#include "core/err.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/param.h"
#include "transport/memshare.h"
#include "transport/transport.h"

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId) {
  if (uniqueId == NULL) {
    WARN("ncclGetUniqueId : uniqueId argument is NULL");
    return ncclInvalidArgument;
  }
  paramReload(); /* NCCL_COMM_ID as it is now (NCCL reads it at each call) */
  struct bootstrapHandle h;
  CHECK(bootstrapGetUniqueId(&h));
  memset(uniqueId, 0, sizeof *uniqueId);
  memcpy(uniqueId->internal, &h, sizeof h);
  return ncclSuccess;
}

static ncclResult_t checkInitArgs(ncclComm_t *comm, int nranks, int rank, const ncclUniqueId *id,
                                  const char *call) {
  if (comm == NULL) {
    WARN("%s : comm argument is NULL", call);
    return ncclInvalidArgument;
  }
  *comm = NULL; /* a call that fails leaves it NULL, as NCCL's do */
  if (nranks >= 1 && nranks <= OPDESC_MAX_RANKS && (rank < 0 || rank >= nranks)) {
    /* The other ranks would wait for one that never comes: the root is told,
     * so that unless this process tries again with a good rank soon (as
     * NCCL allows), they fail within seconds too, naming it. */
    WARN("%s : Invalid rank requested : %d/%d (the root is told)", call, rank, nranks);
    commReportBadRank(id, rank, nranks);
    return ncclInvalidArgument;
  }
  if (nranks < 1) {
    WARN("%s : Invalid rank requested : %d/%d", call, rank, nranks);
    return ncclInvalidArgument;
  }
  if (nranks > OPDESC_MAX_RANKS) {
    WARN("%s : nranks %d is more than chorus supports (%d)", call, nranks, OPDESC_MAX_RANKS);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* A config field that is a flag: unset, 0 or 1. */
static int configFlag(int v) { return v == NCCL_CONFIG_UNDEF_INT || v == 0 || v == 1; }

/* Fields newer than the version the caller's struct says it has are not
 * the caller's: they take their defaults, as NCCL's parseCommConfig does. */
static void configFromVersion(ncclConfig_t *c) {
  const ncclConfig_t d = NCCL_CONFIG_INITIALIZER;
  unsigned v = c->version;
  if (v < NCCL_VERSION(2, 14, 0)) c->blocking = d.blocking;
  if (v < NCCL_VERSION(2, 17, 0)) {
    c->cgaClusterSize = d.cgaClusterSize;
    c->minCTAs = d.minCTAs;
    c->maxCTAs = d.maxCTAs;
    c->netName = d.netName;
  }
  if (v < NCCL_VERSION(2, 25, 0)) c->trafficClass = d.trafficClass;
  if (v < NCCL_VERSION(2, 27, 0)) {
    c->collnetEnable = d.collnetEnable;
    c->CTAPolicy = d.CTAPolicy;
    c->shrinkShare = d.shrinkShare;
    c->nvlsCTAs = d.nvlsCTAs;
  }
  if (v < NCCL_VERSION(2, 28, 0)) {
    c->nChannelsPerNetPeer = d.nChannelsPerNetPeer;
    c->nvlinkCentricSched = d.nvlinkCentricSched;
  }
  if (v < NCCL_VERSION(2, 29, 0)) {
    c->graphUsageMode = d.graphUsageMode;
    c->numRmaCtx = d.numRmaCtx;
  }
  if (v < NCCL_VERSION(2, 30, 0)) c->maxP2pPeers = d.maxP2pPeers;
  if (v < NCCL_VERSION(2, 30, 5)) c->graphStreamOrdering = d.graphStreamOrdering;
}

/* NCCL_COMM_BLOCKING, when 0 or 1, overrides config.blocking (and the
 * default of a call without a config), as NCCL's envConfigOverride. */
static void blockingFromEnv(int *blocking) {
  int64_t env = paramInt(paramCommBlocking);
  if (env == 0 || env == 1) *blocking = (int)env;
}

/* Checks what NCCL's parseCommConfig checks of config (any ncclConfig_t
 * size: the fields past it are unset) and sets *blocking when it says.
 * chorus uses few of the fields, but a value NCCL refuses is refused here
 * too, before anything starts. */
static ncclResult_t configCheck(const ncclConfig_t *config, const char *call, int *blocking,
                                struct commConfig *out) {
  /* As NCCL's parseCommConfig: the caller's struct may be older (smaller)
   * than ours, so only its size's bytes are read, the magic among them. */
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.magic = 0;
  memcpy(&c, config, config->size < sizeof c ? config->size : sizeof c);
  if (c.magic != NCCL_API_MAGIC) {
    WARN("ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  configFromVersion(&c);
  const int undef = NCCL_CONFIG_UNDEF_INT;
  const struct {
    const char *name;
    int value, ok;
  } fields[] = {
      {"blocking (0 or 1)", c.blocking, configFlag(c.blocking)},
      {"cgaClusterSize (>= 0)", c.cgaClusterSize, c.cgaClusterSize == undef || c.cgaClusterSize >= 0},
      {"minCTAs (> 0)", c.minCTAs, c.minCTAs == undef || c.minCTAs > 0},
      {"maxCTAs (> 0)", c.maxCTAs, c.maxCTAs == undef || c.maxCTAs > 0},
      /* NCCL compares the two before it fills in its defaults: a minimum
       * set without a maximum is refused too */
      {"minCTAs (at most maxCTAs, which must be set with it)", c.minCTAs,
       c.minCTAs == undef || (c.maxCTAs != undef && c.minCTAs <= c.maxCTAs)},
      {"splitShare (0 or 1)", c.splitShare, configFlag(c.splitShare)},
      {"collnetEnable (0 or 1)", c.collnetEnable, configFlag(c.collnetEnable)},
      {"CTAPolicy (NCCL_CTA_POLICY_DEFAULT, _EFFICIENCY, _ZERO)", c.CTAPolicy,
       c.CTAPolicy == undef ||
           (c.CTAPolicy >= 0 && !(c.CTAPolicy & ~(NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO)))},
      {"shrinkShare (0 or 1)", c.shrinkShare, configFlag(c.shrinkShare)},
      {"nvlsCTAs (> 0)", c.nvlsCTAs, c.nvlsCTAs == undef || c.nvlsCTAs > 0},
      {"nChannelsPerNetPeer (1 to 64)", c.nChannelsPerNetPeer,
       c.nChannelsPerNetPeer == undef || (c.nChannelsPerNetPeer > 0 && c.nChannelsPerNetPeer <= 64)},
      {"nvlinkCentricSched (0 or 1)", c.nvlinkCentricSched, configFlag(c.nvlinkCentricSched)},
      {"graphUsageMode (0, 1 or 2)", c.graphUsageMode,
       c.graphUsageMode == undef || (c.graphUsageMode >= 0 && c.graphUsageMode <= 2)},
      {"numRmaCtx (>= 0)", c.numRmaCtx, c.numRmaCtx == undef || c.numRmaCtx >= 0},
      {"maxP2pPeers (> 0)", c.maxP2pPeers, c.maxP2pPeers == undef || c.maxP2pPeers > 0},
      {"graphStreamOrdering (0 or 1)", c.graphStreamOrdering, configFlag(c.graphStreamOrdering)},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (!fields[i].ok) {
      WARN("%s : invalid config.%s: %d", call, fields[i].name, fields[i].value);
      return ncclInvalidArgument;
    }
  /* The network named: NCCL fails the init when it has none of that name,
   * and chorus has one, sockets. NCCL_NET, when set, overrides the field
   * (as NCCL's envConfigOverride does; the transport checks it at every
   * init). */
  if (c.netName && !paramStr(paramNet)[0] && !transportNetKnown(c.netName)) {
    WARN("%s : config.netName \"%s\": no such network transport (chorus has Socket only)", call, c.netName);
    return ncclInvalidUsage;
  }
  if (c.blocking != undef) *blocking = c.blocking;
  out->minCTAs = c.minCTAs != undef ? c.minCTAs : 0;
  out->maxCTAs = c.maxCTAs != undef ? c.maxCTAs : 0;
  snprintf(out->name, sizeof out->name, "%s", c.commName ? c.commName : "");
  return ncclSuccess;
}

/* The new communicator's blocking mode and config: config's (checked, see
 * configCheck), with NCCL's defaults (blocking) where it leaves a field
 * unset; a split, shrink or grow without a config (parent) keeps its
 * parent's, as NCCL copies the parent's config then. NCCL_COMM_BLOCKING,
 * NCCL_MIN_CTAS and NCCL_MAX_CTAS override both. */
static ncclResult_t initConfig(const ncclConfig_t *config, const char *call, const struct ncclComm *parent,
                               int *blocking, struct commConfig *out) {
  *blocking = parent && !config ? parent->blocking : 1;
  memset(out, 0, sizeof *out);
  if (parent && !config) *out = parent->config;
  paramReload(); /* the variables that override the config, as they are now (NCCL reads them at each init) */
  if (config) CHECK(configCheck(config, call, blocking, out));
  blockingFromEnv(blocking);
  if (paramInt(paramMinCtas) > 0) out->minCTAs = (int)paramInt(paramMinCtas);
  if (paramInt(paramMaxCtas) > 0) out->maxCTAs = (int)paramInt(paramMaxCtas);
  return ncclSuccess;
}

/* The init calls' bodies: a failure fails the group it was called in
 * (groupNoteError in the NCCL_API functions below), as NCCL's do, so that
 * ncclGroupEnd does not run the group's other inits, which would wait for
 * this rank until the timeout. */
static ncclResult_t initRankCall(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  CHECK(checkInitArgs(comm, nranks, rank, &commId, "ncclCommInitRank"));
  int blocking;
  struct commConfig cfg;
  CHECK(initConfig(NULL, "ncclCommInitRank", NULL, &blocking, &cfg));
  /* Outside a group it sets up in the call even when NCCL_COMM_BLOCKING=0
   * makes it nonblocking for the calls after, as NCCL's (which, unlike
   * ncclCommInitRankConfig, opens no group of its own): done when it
   * returns. */
  struct initJob job = {.comm = comm, .nranks = nranks, .rank = rank, .blocking = blocking, .config = cfg,
                        .id = commId, .func = "ncclCommInitRank",
                        .setup = groupOpen() ? commSetupByMode : commSetupInCall};
  chorusGetDevice(&job.cudaDev); /* the caller's, as NCCL's cudaGetDevice */
  return groupInit(&job);
}

static ncclResult_t initRankConfigCall(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                       ncclConfig_t *config) {
  CHECK(checkInitArgs(comm, nranks, rank, &commId, "ncclCommInitRankConfig"));
  int blocking;
  struct commConfig cfg;
  CHECK(initConfig(config, "ncclCommInitRankConfig", NULL, &blocking, &cfg));
  /* Init completes before returning (or before ncclGroupEnd returns), so
   * nonblocking callers see success. */
  struct initJob job = {.comm = comm, .nranks = nranks, .rank = rank, .blocking = blocking, .config = cfg,
                        .id = commId, .func = "ncclCommInitRankConfig"};
  chorusGetDevice(&job.cudaDev);
  return groupInit(&job);
}

/* NCCL splits the ranks into nId blocks, each meeting at its own id's root
 * (which then link up), so that no root serves thousands of ranks. chorus
 * communicators are smaller (OPDESC_MAX_RANKS): every rank meets at the
 * first id's root, this process ends the roots it runs for the others,
 * and the ranks check at init that they all passed the same ids in the
 * same order (commSetup: a rank that did not fails every rank's init). */
static ncclResult_t initRankScalableCall(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                         ncclUniqueId *commIds, ncclConfig_t *config) {
  static const char call[] = "ncclCommInitRankScalable";
  if (newcomm) *newcomm = NULL; /* a call that fails leaves it NULL, as NCCL's do */
  if (commIds == NULL) {
    WARN("%s : commIds argument is NULL", call);
    return ncclInvalidArgument;
  }
  if (nId < 1 || nId > nranks) {
    WARN("%s : improper usage: nId %d must be between 1 and nranks %d", call, nId, nranks);
    return ncclInvalidArgument;
  }
  CHECK(checkInitArgs(newcomm, nranks, myrank, &commIds[0], call));
  int blocking;
  struct commConfig cfg;
  CHECK(initConfig(config, call, NULL, &blocking, &cfg));
  uint64_t ids = 0;
  if (nId > 1) {
    ids = FNV1A_INIT ^ (uint64_t)nId;
    for (int k = 0; k < nId; k++) ids = fnv1aBytes(ids, commIds[k].internal, sizeof commIds[k].internal);
    ids |= 1; /* never 0, which means one id */
  }
  for (int k = 1; k < nId; k++) {
    if (memcmp(&commIds[k], &commIds[0], sizeof commIds[0]) == 0) continue;
    struct bootstrapHandle h;
    memcpy(&h, commIds[k].internal, sizeof h);
    bootstrapRetireRoot(&h);
  }
  struct initJob job = {.comm = newcomm, .nranks = nranks, .rank = myrank, .blocking = blocking, .config = cfg,
                        .id = commIds[0], .func = call, .ids = ids};
  chorusGetDevice(&job.cudaDev);
  return groupInit(&job);
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  return groupNoteError(initRankCall(comm, nranks, commId, rank));
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
         ncclConfig_t *config) {
  return groupNoteError(initRankConfigCall(comm, nranks, commId, rank, config));
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank, int nId,
         ncclUniqueId *commIds, ncclConfig_t *config) {
  return groupNoteError(initRankScalableCall(newcomm, nranks, myrank, nId, commIds, config));
}

/* The host-CUDA shim's device count where the program has the shim loaded
 * (it exports chorusHostCudaDevices), -1 otherwise: then a device is a label
 * and any number from 0 goes. Never CUDA's own cudaGetDeviceCount, which in a
 * program with the real runtime is not chorus's to call. */
static int shimDeviceCount(void) {
  int (*count)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "chorusHostCudaDevices");
  return count ? count() : -1;
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist) {
  if (comms == NULL) {
    WARN("ncclCommInitAll : comm argument is NULL");
    return ncclInvalidArgument;
  }
  if (ndev < 0) {
    WARN("ncclCommInitAll : invalid ndev %d", ndev);
    return ncclInvalidArgument;
  }
  if (ndev == 0) return ncclSuccess; /* as NCCL: no device, no communicator */
  paramReload(); /* NCCL_MULTI_RANK_GPU_ENABLE as it is now */
  int devices = shimDeviceCount(), shareDevices = paramInt(paramMultiRankGpuEnable) != 0;
  if (devices == 0) { /* NCCL's cudaGetDeviceCount fails first */
    WARN("ncclCommInitAll : no devices (CHORUS_HOST_DEVICES, CUDA_VISIBLE_DEVICES)");
    return ncclUnhandledCudaError;
  }
  for (int i = 0; devlist && i < ndev; i++) {
    if (devlist[i] < 0 || (devices >= 0 && devlist[i] >= devices)) {
      WARN("ncclCommInitAll : invalid device %d at devlist[%d] (totalnDev=%d)", devlist[i], i, devices);
      return ncclInvalidArgument;
    }
    for (int j = 0; j < i && !shareDevices; j++)
      if (devlist[j] == devlist[i]) {
        WARN("ncclCommInitAll : duplicate device %d in devlist (at %d and %d; NCCL_MULTI_RANK_GPU_ENABLE=1 allows it)",
             devlist[i], j, i);
        return ncclInvalidUsage;
      }
  }
  if (!devlist && devices >= 0 && ndev > devices) { /* NCCL's cudaSetDevice(ndev - 1) fails */
    WARN("ncclCommInitAll : %d ranks with no devlist take devices 0 to %d, but there are %d (CHORUS_HOST_DEVICES)", ndev,
         ndev - 1, devices);
    return ncclUnhandledCudaError;
  }
  /* NCCL's default config, NCCL_COMM_BLOCKING over it: with 0 the ranks
   * set up on their threads and the call returns ncclInProgress, as NCCL's
   * group of inits does */
  int blocking;
  struct commConfig cfg;
  CHECK(initConfig(NULL, "ncclCommInitAll", NULL, &blocking, &cfg));
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id));
  struct initJob *jobs = calloc(ndev, sizeof *jobs);
  if (!jobs) return ncclSystemError;
  for (int i = 0; i < ndev; i++)
    jobs[i] = (struct initJob){.comm = &comms[i], .nranks = ndev, .rank = i, .cudaDev = devlist ? devlist[i] : i,
                               .blocking = blocking, .config = cfg, .id = id, .func = "ncclCommInitAll"};
  ncclResult_t res = initJobsRun(jobs, ndev);
  free(jobs);
  return res;
}

/* Where a split's or shrink's new communicator sets up: as NCCL runs the
 * child's init, a job of the parent's group, whose mode is the parent's:
 * in the call under a blocking parent (a nonblocking child is then ready
 * when the call returns), else on the child's thread, the parent saying
 * ncclInProgress until it is done (commPendOnChild), whatever the child's
 * own config asks for the calls after. */
static int childSetup(const struct ncclComm *parent) {
  return parent->blocking ? commSetupInCall : commSetupOnThread;
}

/* What a split or shrink returns: its failure, else ncclSuccess, as NCCL's
 * ncclCommSplit and ncclCommShrink, also when the new communicator still
 * sets up (its parent's ncclCommGetAsyncError says ncclInProgress until it
 * is done; the handle is the caller's at once, where NCCL's stays NULL
 * until then). */
static ncclResult_t childCallResult(ncclResult_t res) { return res == ncclInProgress ? ncclSuccess : res; }

static ncclResult_t commSplitCall(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                   ncclConfig_t *config) {
  if (newcomm == NULL) {
    WARN("ncclCommSplit : newcomm argument is NULL");
    return ncclInvalidArgument;
  }
  *newcomm = NULL; /* a call that fails leaves it NULL, as NCCL's do */
  CHECK(commCheck(comm, "ncclCommSplit"));
  /* Any other color groups ranks, negative ones too: NCCL's docs ask for
   * colors >= 0, but its code takes any, and a refusal on some ranks would
   * leave the others waiting for them */
  int blocking;
  /* A rank that leaves gets no communicator: its config is not read (NCCL
   * parses only the joining ranks'). */
  struct commConfig cfg;
  CHECK(initConfig(color == NCCL_SPLIT_NOCOLOR ? NULL : config, "ncclCommSplit", comm, &blocking, &cfg));
  CHECK(commInitDone(comm, "ncclCommSplit"));
  ncclResult_t async = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  if (async != ncclSuccess) {
    WARN("ncclCommSplit : rank %d: parent communicator has failed (%s)", comm->rank, ncclGetErrorString(async));
    return async;
  }
  if (comm->finalized) { /* its connections to the other ranks are being closed: nothing to split over */
    WARN("ncclCommSplit : rank %d: parent communicator was finalized (ncclCommFinalize): split before finalizing",
         comm->rank);
    return ncclInvalidUsage;
  }
  struct initJob job = {.run = commSplitRun, .comm = newcomm, .cudaDev = comm->cudaDev, .blocking = blocking,
                        .config = cfg, .parent = comm, .color = color, .key = key, .func = "ncclCommSplit",
                        .setup = childSetup(comm)};
  return childCallResult(groupInit(&job));
}

/* In a group, a call that fails its checks fails ncclGroupEnd too, as in NCCL. */
NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
         ncclConfig_t *config) {
  return groupNoteError(commSplitCall(comm, color, key, newcomm, config));
}

static ncclResult_t commShrinkCall(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                    ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  if (newcomm == NULL) {
    WARN("ncclCommShrink : newcomm argument is NULL");
    return ncclInvalidArgument;
  }
  *newcomm = NULL; /* a call that fails leaves it NULL, as NCCL's do */
  CHECK(commCheck(comm, "ncclCommShrink"));
  if (excludeRanksList == NULL || excludeRanksCount <= 0) {
    WARN("ncclCommShrink : excludeRanksList is %s and excludeRanksCount %d (a list of at least one rank is needed)",
         excludeRanksList ? "set" : "NULL", excludeRanksCount);
    return ncclInvalidArgument;
  }
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    WARN("ncclCommShrink : invalid shrinkFlags %d (NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT)", shrinkFlags);
    return ncclInvalidArgument;
  }
  int blocking;
  struct commConfig cfg;
  CHECK(initConfig(config, "ncclCommShrink", comm, &blocking, &cfg));
  CHECK(commInitDone(comm, "ncclCommShrink"));
  char *excluded = calloc((size_t)comm->nranks, 1);
  if (!excluded) return ncclSystemError;
  for (int i = 0; i < excludeRanksCount; i++) {
    int r = excludeRanksList[i];
    if (r < 0 || r >= comm->nranks) {
      WARN("ncclCommShrink : excludeRanksList[%d] = %d is not a rank of this communicator (nranks %d)", i, r,
           comm->nranks);
      free(excluded);
      return ncclInvalidArgument;
    }
    excluded[r] = 1;
  }
  if (excluded[comm->rank]) {
    WARN("ncclCommShrink : rank %d is in excludeRanksList; excluded ranks must not call ncclCommShrink", comm->rank);
    free(excluded);
    return ncclInvalidArgument;
  }
  if (shrinkFlags == NCCL_SHRINK_ABORT) {
    commEndInFlight(comm); /* the parent is used again: the handoff, ncclCommDestroy */
  }
  struct initJob job = {.run = commShrinkRun, .comm = newcomm, .cudaDev = comm->cudaDev, .blocking = blocking,
                        .config = cfg, .parent = comm, .excluded = excluded, .shrinkFlags = shrinkFlags,
                        .func = "ncclCommShrink", .setup = childSetup(comm)};
  return childCallResult(groupInit(&job));
}

/* In a group, a call that fails its checks fails ncclGroupEnd too, as in NCCL. */
NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
         ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  return groupNoteError(commShrinkCall(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags));
}

/* A grow's parent has finished its init and has not failed. */
static ncclResult_t growParentUp(struct ncclComm *comm, const char *call) {
  ncclResult_t async = commChildPending(comm, NULL) == ncclInProgress ? ncclInProgress /* a split of it still sets up */
                                                                 : __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  if (async == ncclSuccess) return ncclSuccess;
  WARN("%s : rank %d: parent communicator is %s", call, comm->rank,
       async == ncclInProgress ? "still initializing" : "in error");
  return async == ncclInProgress ? ncclInvalidUsage : async;
}

/* The id new ranks join a grow with: a fresh root in this process (the
 * coordinator's), with a random secret. A second call replaces the first
 * id, whose root ends if nobody came to it; ncclCommDestroy ends an unused
 * one. */
NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId *uniqueId) {
  CHECK(commCheck(comm, "ncclCommGetUniqueId"));
  if (uniqueId == NULL) {
    WARN("ncclCommGetUniqueId : uniqueId argument is NULL");
    return ncclInvalidArgument;
  }
  CHECK(growParentUp(comm, "ncclCommGetUniqueId"));
  struct bootstrapHandle h;
  CHECK(bootstrapNewRoot(&h));
  if (comm->growIdMade) bootstrapRetireRoot(&comm->growId);
  comm->growId = h;
  comm->growIdMade = 1;
  memset(uniqueId, 0, sizeof *uniqueId);
  memcpy(uniqueId->internal, &h, sizeof h);
  INFO(subsysInit, "ncclCommGetUniqueId : rank %d made the id to grow comm %p", comm->rank, (void *)comm);
  return ncclSuccess;
}

/* The parent's ranks pass comm, rank -1 and (the coordinator only) the id;
 * the new ranks pass no comm, their rank, and the id (grow.c). */
static ncclResult_t commGrowCall(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                                  ncclComm_t *newcomm, ncclConfig_t *config) {
  static const char call[] = "ncclCommGrow";
  if (comm == NULL) { /* a new rank */
    if (newcomm) *newcomm = NULL; /* a call that fails leaves it NULL, as NCCL's do */
    if (uniqueId == NULL) {
      WARN("%s : a new rank (comm NULL) needs the uniqueId the coordinator got from ncclCommGetUniqueId", call);
      return ncclInvalidArgument;
    }
    CHECK(checkInitArgs(newcomm, nRanks, rank, uniqueId, call));
    int blocking;
    struct commConfig cfg;
    CHECK(initConfig(config, call, NULL, &blocking, &cfg));
    struct initJob job = {.comm = newcomm, .nranks = nRanks, .rank = rank, .blocking = blocking, .config = cfg,
                          .id = *uniqueId, .func = call};
    chorusGetDevice(&job.cudaDev);
    return groupInit(&job);
  }
  if (newcomm) *newcomm = NULL; /* a call that fails leaves it NULL, as NCCL's do */
  CHECK(commCheck(comm, call));
  if (newcomm == NULL) {
    WARN("%s : newcomm argument is NULL", call);
    return ncclInvalidArgument;
  }
  if (rank != -1) {
    WARN("%s : rank %d of the parent passed rank %d: the parent's ranks pass -1 (they keep their ranks)", call,
         comm->rank, rank);
    return ncclInvalidArgument;
  }
  if (nRanks <= comm->nranks || nRanks > OPDESC_MAX_RANKS) {
    WARN("%s : nRanks %d must be more than the parent's %d ranks (and at most %d)", call, nRanks, comm->nranks,
         OPDESC_MAX_RANKS);
    return ncclInvalidArgument;
  }
  int blocking;
  struct commConfig cfg;
  CHECK(initConfig(config, call, comm, &blocking, &cfg));
  CHECK(growParentUp(comm, call));
  struct initJob job = {.run = commGrowRun, .comm = newcomm, .nranks = nRanks, .rank = comm->rank,
                        .cudaDev = comm->cudaDev, .blocking = blocking, .config = cfg, .parent = comm, .func = call};
  if (uniqueId) job.id = *uniqueId;
  return groupInit(&job);
}

/* In a group, a call that fails its checks fails ncclGroupEnd too, as in NCCL. */
NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
         ncclComm_t *newcomm, ncclConfig_t *config) {
  return groupNoteError(commGrowCall(comm, nRanks, uniqueId, rank, newcomm, config));
}

/* Ends what runs on the communicator (as ncclCommAbort would, but the
 * communicator stays, quiescent, for ncclCommDestroy, ncclCommSplit and
 * ncclCommShrink); every later operation on it is ncclInvalidUsage. A
 * failure the aborted calls recorded is cleared (NCCL's state goes back to
 * ncclSuccess), so that a split may follow; a dead peer still shows in
 * ncclCommGetAsyncError. It runs to the end before returning, nonblocking
 * communicators too. */
NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  if (comm == NULL) return ncclSuccess; /* as NCCL, and as destroy and abort */
  CHECK(commCheck(comm, "ncclCommRevoke"));
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    WARN("ncclCommRevoke : invalid revokeFlags %d (must be NCCL_REVOKE_DEFAULT)", revokeFlags);
    return ncclInvalidArgument;
  }
  CHECK(commInitDone(comm, "ncclCommRevoke"));
  if (__atomic_exchange_n(&comm->revoked, 1, __ATOMIC_ACQ_REL)) { /* calls that come from now on are refused */
    WARN("ncclCommRevoke : comm %p rank %d is already revoked", (void *)comm, comm->rank);
    return ncclInvalidArgument;
  }
  __atomic_store_n(&comm->boot.faultsEnded, 1, __ATOMIC_RELEASE); /* reports of those end with them */
  commEndInFlight(comm); /* what the revoke ends */
  __atomic_store_n(&comm->asyncError, ncclSuccess, __ATOMIC_RELEASE); /* what the ended calls recorded */
  commSetFailText(comm, ""); /* and their text: a later failure's is its own */
  INFO(subsysInit, "comm %p rank %d nranks %d - Revoke COMPLETE", (void *)comm, comm->rank, comm->nranks);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess; /* as NCCL, and as destroy and abort */
  CHECK(commCheck(comm, "ncclCommFinalize"));
  CHECK(commInitDone(comm, "ncclCommFinalize"));
  if (__atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE)) { /* ncclInvalidArgument, as NCCL's */
    WARN("ncclCommFinalize : comm %p was revoked (ncclCommRevoke): destroy it", (void *)comm);
    return ncclInvalidArgument;
  }
  if (comm->finalized) {
    WARN("ncclCommFinalize : comm %p is already finalized", (void *)comm);
    return ncclInvalidArgument;
  }
  if (commGroupHeld(comm)) { /* they would run after its goodbye */
    WARN("ncclCommFinalize : comm %p rank %d has calls queued in an open group (ncclGroupStart): end the group "
         "before finalizing", (void *)comm, comm->rank);
    return ncclInvalidUsage;
  }
  commWaitIdle(comm);
  comm->finalized = 1;
  /* Nothing more will come from this rank: a peer still waiting for it (in
   * an operation this rank never called) fails at once, naming it; what it
   * did send reaches the peers first. */
  transportDrainAll(comm->transports, &comm->boot, commTimeoutNs(comm));
  if (comm->boot.oob) oobSayGoodbye(&comm->boot, oobFinalized);
  return comm->asyncError;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;
  if (commForget(comm, "ncclCommDestroy")) return ncclSuccess;
  CHECK(commCheck(comm, "ncclCommDestroy"));
  CHECK(commInitDone(comm, "ncclCommDestroy"));
  int rank = comm->rank, n = comm->nranks, dev = comm->cudaDev;
  commWaitIdle(comm);
  /* A communicator that failed leaves like an aborted one. */
  commFree(comm, comm->asyncError == ncclSuccess);
  INFO(subsysInit, "comm %p rank %d nranks %d cudaDev %d busId %lx - Destroy COMPLETE", (void *)comm, rank, n, dev,
       commBusId(dev));
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;
  if (commForget(comm, "ncclCommAbort")) return ncclSuccess;
  CHECK(commCheck(comm, "ncclCommAbort"));
  /* Calls in flight see the flag at their next pause and return
   * (sequentially consistent: a group's setup counts itself busy, then
   * looks at the flag, commInitSetup). */
  __atomic_store_n(&comm->abortFlag, 1, __ATOMIC_SEQ_CST);
  commWaitIdle(comm);
  int rank = comm->rank, n = comm->nranks, dev = comm->cudaDev;
  INFO(subsysInit, "comm %p rank %d nRanks %d cudaDev %d busId %lx - Abort START", (void *)comm, rank, n, dev,
       commBusId(dev));
  commFree(comm, 0);
  INFO(subsysInit, "comm %p rank %d nranks %d cudaDev %d busId %lx - Abort COMPLETE", (void *)comm, rank, n, dev,
       commBusId(dev));
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError) {
  CHECK(commCheck(comm, "ncclCommGetAsyncError"));
  if (asyncError == NULL) {
    WARN("ncclCommGetAsyncError : asyncError argument is NULL");
    return ncclInvalidArgument;
  }
  int settled;
  ncclResult_t pending = commChildPending(comm, &settled); /* a nonblocking split's parent says how its child is doing */
  *asyncError = pending == ncclInProgress || settled ? pending : watchAsyncError(comm);
  return ncclSuccess;
}

#define COMM_QUERY(name, field)                                 \
  NCCL_API(ncclResult_t, name, const ncclComm_t comm, int *out) { \
    CHECK(commCheck(comm, #name));                              \
    CHECK(commInitDone(comm, #name));                           \
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

/* ncclMemAlloc's plain blocks (where no shared memory could be had), so
 * that ncclMemFree knows what it may free: anything else (a pointer into a
 * block, one freed already, malloc's) is refused rather than crash free(). */
struct plainBlock {
  void *ptr;
  struct plainBlock *next;
};
static pthread_mutex_t plainLock = PTHREAD_MUTEX_INITIALIZER;
static struct plainBlock *plainBlocks;

static int plainFree(void *ptr) {
  pthread_mutex_lock(&plainLock);
  struct plainBlock **at = &plainBlocks;
  while (*at && (*at)->ptr != ptr) at = &(*at)->next;
  struct plainBlock *b = *at;
  if (b) *at = b->next;
  pthread_mutex_unlock(&plainLock);
  if (!b) return 0;
  free(b->ptr);
  free(b);
  return 1;
}

NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size) {
  if (ptr == NULL) {
    WARN("ncclMemAlloc : ptr argument is NULL");
    return ncclInvalidArgument;
  }
  if (size == 0) {
    *ptr = NULL;
    return ncclSuccess;
  }
  /* Memory local peers can map, so that they read it where it lies (one
   * copy, transport/memshare.h); plain memory where no memfd can be had. */
  *ptr = shareAlloc(size);
  if (*ptr) return ncclSuccess;
  INFO(subsysInit, "ncclMemAlloc : no shared memory for %zu bytes (%s); plain memory, which peers read through the "
       "FIFOs", size, strerror(errno));
  struct plainBlock *b = malloc(sizeof *b);
  if (!b || posix_memalign(ptr, 4096, size) != 0) {
    free(b);
    *ptr = NULL;
    WARN("ncclMemAlloc : cannot allocate %zu bytes", size);
    return ncclSystemError;
  }
  b->ptr = *ptr;
  pthread_mutex_lock(&plainLock);
  b->next = plainBlocks;
  plainBlocks = b;
  pthread_mutex_unlock(&plainLock);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr) {
  if (ptr == NULL || shareFree(ptr) || plainFree(ptr)) return ncclSuccess;
  WARN("ncclMemFree : ptr %p was not returned by ncclMemAlloc, or was freed already", ptr);
  return ncclInvalidArgument;
}
