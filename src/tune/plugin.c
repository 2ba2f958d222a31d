/* NCCL's tuner plugin (NCCL_TUNER_PLUGIN), looked for as NCCL looks
 * (core/plugin.h); the newest table it exports is used: ncclTunerPlugin_v6,
 * then v5, v4, v3, v2. One plugin per process, loaded by the first
 * communicator, unloaded with the last; each communicator has its own
 * context (init, finalize). Per collective the plugin gets NCCL's cost
 * table (tunePluginAdjust). What chorus does not pass on: NCCL's model
 * constants (v5, v6: a plugin reads zeros, and what it writes there changes
 * nothing, as chorus's model has other terms) and getChunkSize (v6: the
 * FIFO's slots set chorus's chunks). */
#include "tune/plugin.h"

#include <dlfcn.h>
#include <float.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "core/err.h"
#include "core/log.h"
#include "core/param.h"
#include "core/plugin.h"
#include "reduce/reduce.h"
#include "tune/abi.h"

static pthread_mutex_t loadLock = PTHREAD_MUTEX_INITIALIZER;
static int loadRefs; /* communicators holding the plugin */
static void *pluginLib;
static int pluginVersion; /* 6 to 2; 0: none loaded */
static const struct tuneAbiV6 *pluginV6; /* v6 and v5 */
static const struct tuneAbiV4 *pluginV4;
static const struct tuneAbiV3 *pluginV3;
static const struct tuneAbiV2 *pluginV2;
static char pluginUsed[512];

static const char *loadedName(void) {
  const char *n = pluginVersion >= 5 ? pluginV6->name
                  : pluginVersion == 4 ? pluginV4->name
                  : pluginVersion == 3 ? pluginV3->name
                                       : pluginV2->name;
  return n ? n : "(unnamed)";
}

/* Under loadLock: the first communicator loads. */
static void pluginLoad(void) {
  const char *name = paramStr(paramTunerPlugin);
  if (strcasecmp(name, "none") == 0) return;
  void *h = pluginOpen("tuner", "TUNER", subsysInit | subsysTuning, name, pluginUsed, sizeof pluginUsed);
  if (!h) {
    if (name[0]) WARN("TUNER/Plugin: could not load NCCL_TUNER_PLUGIN=%s: continuing with chorus's tuner", name);
    return;
  }
  const void *t;
  if ((t = dlsym(h, "ncclTunerPlugin_v6"))) pluginVersion = 6, pluginV6 = t;
  else if ((t = dlsym(h, "ncclTunerPlugin_v5"))) pluginVersion = 5, pluginV6 = t;
  else if ((t = dlsym(h, "ncclTunerPlugin_v4"))) pluginVersion = 4, pluginV4 = t;
  else if ((t = dlsym(h, "ncclTunerPlugin_v3"))) pluginVersion = 3, pluginV3 = t;
  else if ((t = dlsym(h, "ncclTunerPlugin_v2"))) pluginVersion = 2, pluginV2 = t;
  if (!pluginVersion) {
    WARN("TUNER/Plugin: %s exports no ncclTunerPlugin_v6 .. _v2: continuing with chorus's tuner", pluginUsed);
    dlclose(h);
    return;
  }
  pluginLib = h;
  INFO(subsysInit | subsysTuning, "TUNER/Plugin: Using %s (v%d) from %s", loadedName(), pluginVersion, pluginUsed);
}

static void pluginUnload(void) {
  INFO(subsysTuning, "TUNER/Plugin: Closing tuner: '%s'", loadedName());
  dlclose(pluginLib);
  pluginLib = NULL;
  pluginV6 = NULL;
  pluginV4 = NULL;
  pluginV3 = NULL;
  pluginV2 = NULL;
  pluginVersion = 0;
}

ncclResult_t tunePluginInit(struct tuneTable *t, uint64_t commHash, int minLocal) {
  t->plugin = 0;
  t->pluginCtx = NULL;
  pthread_mutex_lock(&loadLock);
  if (loadRefs == 0 && !pluginVersion) pluginLoad();
  ncclResult_t res = ncclSuccess;
  if (pluginVersion) {
    size_t nranks = (size_t)t->topo.nranks, nnodes = (size_t)t->topo.nhosts;
    if (pluginVersion >= 5) {
      struct tuneAbiNvlDomains domains = {t->topo.nhosts, minLocal, t->topo.localRanks};
      struct tuneAbiConstants constants;
      memset(&constants, 0, sizeof constants);
      res = pluginV6->init(&t->pluginCtx, commHash, nranks, nnodes, pluginLog, &domains, &constants);
    } else {
      res = pluginVersion == 4   ? pluginV4->init(nranks, nnodes, pluginLog, &t->pluginCtx)
            : pluginVersion == 3 ? pluginV3->init(nranks, nnodes, pluginLog, &t->pluginCtx)
                                 : pluginV2->init(nranks, nnodes, pluginLog, &t->pluginCtx);
    }
    if (res == ncclSuccess) {
      t->plugin = 1;
      loadRefs++;
    } else {
      /* As NCCL, whose init fails with the plugin's */
      WARN("TUNER/Plugin: %s's init failed with %s (%d)", loadedName(), ncclGetErrorString(res), (int)res);
      if (res < ncclUnhandledCudaError || res >= ncclNumResults || res == ncclInProgress) res = ncclInternalError;
      if (loadRefs == 0) pluginUnload();
    }
  }
  pthread_mutex_unlock(&loadLock);
  return res;
}

void tunePluginFinalize(struct tuneTable *t) {
  if (!t->plugin) return;
  pthread_mutex_lock(&loadLock);
  if (pluginVersion >= 5) pluginV6->finalize(t->pluginCtx);
  else if (pluginVersion == 4) pluginV4->destroy(t->pluginCtx);
  else if (pluginVersion == 3) pluginV3->destroy(t->pluginCtx);
  else pluginV2->destroy(t->pluginCtx);
  t->plugin = 0;
  t->pluginCtx = NULL;
  if (--loadRefs == 0) pluginUnload();
  pthread_mutex_unlock(&loadLock);
}

static int abiFunc(int coll) {
  switch (coll) {
    case collBroadcast: return tuneAbiFuncBroadcast;
    case collReduce: return tuneAbiFuncReduce;
    case collAllGather: return tuneAbiFuncAllGather;
    case collReduceScatter: return tuneAbiFuncReduceScatter;
    case collAllReduce: return tuneAbiFuncAllReduce;
    default: return -1;
  }
}

/* NCCL's column for a chorus algorithm: its Ring runs chorus's ring and
 * chain (as NCCL_ALGO=Ring allows both), its Tree the trees; -1: none. */
static int abiAlgo(int algo) {
  return algo == algoTree ? tuneAbiAlgoTree : algo == algoRing || algo == algoChain ? tuneAbiAlgoRing : -1;
}
static int abiProto(int proto) { return proto == protoLL ? tuneAbiProtoLL : tuneAbiProtoSimple; }

/* A version 2 plugin names its pick; NCCL's adapter makes that entry free. */
static ncclResult_t askV2(const struct tuneTable *t, int func, size_t bytes, float table[][tuneAbiProtos],
                          int *nChannels) {
  int algo = -1, proto = -1;
  ncclResult_t res = pluginV2->getCollInfo(t->pluginCtx, func, bytes, 0, 0, 1, &algo, &proto, nChannels);
  if (res == ncclSuccess && algo >= 0 && algo < tuneAbiAlgos && proto >= 0 && proto < tuneAbiProtos &&
      table[algo][proto] != TUNE_ABI_IGNORE)
    table[algo][proto] = 0.0f;
  return res;
}

ncclResult_t tunePluginAdjust(const struct tuneTable *t, int coll, size_t bytes, int dtype,
                              double costs[algoCount][protoCount], const int nch[algoCount], int maxNch, int regBuff,
                              struct tuneChoice *best) {
  int func = abiFunc(coll);
  if (!t->plugin || func < 0) return ncclSuccess;
  float table[tuneAbiAlgos][tuneAbiProtos];
  int runs[tuneAbiAlgos][tuneAbiProtos]; /* the chorus algorithm behind each entry */
  for (int a = 0; a < tuneAbiAlgos; a++)
    for (int p = 0; p < tuneAbiProtos; p++) table[a][p] = TUNE_ABI_IGNORE, runs[a][p] = -1;
  for (int a = 0; a < algoCount; a++)
    for (int p = 0; p < protoCount; p++) {
      int ca = abiAlgo(a), cp = abiProto(p);
      if (ca < 0 || costs[a][p] < 0) continue;
      if (runs[ca][cp] < 0 || costs[a][p] < costs[runs[ca][cp]][p]) {
        runs[ca][cp] = a;
        table[ca][cp] = (float)costs[a][p];
      }
    }
  /* NCCL counts AllGather's and ReduceScatter's bytes over all ranks. */
  size_t ncclBytes = coll == collAllGather || coll == collReduceScatter ? bytes * (size_t)t->topo.nranks : bytes;
  int nChannels = 0;
  ncclResult_t res;
  if (pluginVersion == 2) {
    res = askV2(t, func, ncclBytes, table, &nChannels);
  } else {
    float **arg = (float **)(void *)table; /* NCCL passes its 2-D array so */
    res = pluginVersion >= 5   ? pluginV6->getCollInfo(t->pluginCtx, func, ncclBytes, 1, arg, tuneAbiAlgos,
                                                       tuneAbiProtos, regBuff, &nChannels)
          : pluginVersion == 4 ? pluginV4->getCollInfo(t->pluginCtx, func, ncclBytes, 1, arg, tuneAbiAlgos,
                                                       tuneAbiProtos, regBuff, &nChannels)
                               : pluginV3->getCollInfo(t->pluginCtx, func, ncclBytes, 1, arg, tuneAbiAlgos,
                                                       tuneAbiProtos, &nChannels);
  }
  if (res != ncclSuccess) { /* as NCCL, whose call then fails with the plugin's error */
    WARN("TUNER/Plugin: %s's getCollInfo failed with %s (%d) for %s of %zu bytes", loadedName(),
         ncclGetErrorString(res), (int)res, collName(coll), ncclBytes);
    return res < ncclUnhandledCudaError || res >= ncclNumResults || res == ncclInProgress ? ncclInternalError : res;
  }
  /* The cheapest: NCCL's entries as the plugin left them, in NCCL's order
   * (Tree before Ring, LL before Simple: the first of equals wins, as in
   * NCCL; those chorus cannot run stay out), then chorus's own algorithms
   * at the model's time, which win only when cheaper. */
  struct tuneChoice pick = {-1, protoSimple, 1, FLT_MAX};
  static const int ncclOrder[protoCount] = {protoLL, protoSimple};
  for (int ca = 0; ca < tuneAbiAlgos; ca++)
    for (int k = 0; k < protoCount; k++) {
      int p = ncclOrder[k], a = runs[ca][abiProto(p)];
      float us = a < 0 ? -1.0f : table[ca][abiProto(p)];
      if (us >= 0 && us < pick.us) pick = (struct tuneChoice){a, p, nch[a], us};
    }
  for (int a = 0; a < algoCount; a++)
    for (int p = 0; p < protoCount; p++)
      if (abiAlgo(a) < 0 && costs[a][p] >= 0 && costs[a][p] < pick.us)
        pick = (struct tuneChoice){a, p, nch[a], costs[a][p]};
  if (pick.algo < 0) {
    WARN("No algorithm/protocol available for function %s with datatype %s (%zu bytes on %d ranks): the tuner "
         "plugin %s left none",
         collName(coll), dtypeName(dtype), ncclBytes, t->topo.nranks, loadedName());
    return t->cfg.algo[0] || t->cfg.proto[0] ? ncclInvalidUsage : ncclInternalError;
  }
  if (nChannels > 0 && (pick.algo == algoRing || pick.algo == algoChain || pick.algo == algoTree))
    pick.nch = nChannels < maxNch ? nChannels : maxNch;
  *best = pick;
  return ncclSuccess;
}
