/* NCCL_TUNER_PLUGIN inside the tuner: each communicator's context, and per
 * collective NCCL's cost table filled from chorus's model, handed to the
 * plugin (plugin/tuner.h), and the choice it leaves (tunePluginAdjust).
 * What chorus does not pass on: NCCL's model constants (v5, v6: a plugin
 * reads zeros, and what it writes there changes nothing, as chorus's model
 * has other terms) and getChunkSize (v6: the FIFO's slots set chorus's
 * chunks). */
#include "tune/plugin.h"

#include <float.h>

#include "core/err.h"
#include "core/log.h"
#include "plugin/tuner.h"
#include "reduce/reduce.h"

ncclResult_t tunePluginInit(struct tuneTable *t, uint64_t commHash, int minLocal) {
  t->plugin = 0;
  t->pluginCtx = NULL;
  return tunerPluginInit(&t->pluginCtx, &t->plugin, commHash, (size_t)t->topo.nranks, (size_t)t->topo.nhosts,
                         minLocal, t->topo.localRanks);
}

void tunePluginFinalize(struct tuneTable *t) {
  if (!t->plugin) return;
  tunerPluginFinalize(t->pluginCtx);
  t->plugin = 0;
  t->pluginCtx = NULL;
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
  CHECK(tunerPluginGetCollInfo(t->pluginCtx, func, ncclBytes, table, regBuff, &nChannels)); /* as NCCL: the call fails */
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
         collName(coll), dtypeName(dtype), ncclBytes, t->topo.nranks, tunerPluginName());
    return t->cfg.algo[0] || t->cfg.proto[0] ? ncclInvalidUsage : ncclInternalError;
  }
  if (nChannels > 0 && (pick.algo == algoRing || pick.algo == algoChain || pick.algo == algoTree))
    pick.nch = nChannels < maxNch ? nChannels : maxNch;
  *best = pick;
  return ncclSuccess;
}
