#include "tune/tune.h"

#include <stdio.h>
#include <string.h>

#include "algo/algo.h"
#include "core/err.h"
#include "core/log.h"
#include "core/param.h"
#include "reduce/reduce.h"
#include "tune/plugin.h"

/* Channels pay off once each carries enough bytes to amortize a pass over
 * its FIFO; below that one channel has the least overhead. */
#define TUNE_BYTES_PER_CHANNEL (1u << 20)

void tuneConfigFromEnv(struct tuneConfig *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->smallThreshold = paramInt(paramLLThreshold);
  if (snprintf(cfg->algo, sizeof cfg->algo, "%s", paramStr(paramAlgo)) >= (int)sizeof cfg->algo) cfg->tooLong |= 1;
  if (snprintf(cfg->proto, sizeof cfg->proto, "%s", paramStr(paramProto)) >= (int)sizeof cfg->proto) cfg->tooLong |= 2;
}

static int usesChannels(int algo) { return algo == algoRing || algo == algoChain || algo == algoTree; }

/* Channels for algo on bytes, at most maxNch. Within a host one thread
 * drives all of a rank's channels, so more of them add no parallelism, only
 * FIFOs to pass through, which below 16 MiB also push the message out of
 * the cache: a ring AllReduce there takes one channel (bench/env_ab
 * all_reduce_perf, one channel against two, 2026-12-04, medians of 5 runs,
 * busbw GB/s: 2 ranks 2 MiB 12.2 -> 16.4, 4 MiB 11.1 -> 14.5, 8 MiB 8.2 ->
 * 9.6; 4 ranks 1 MiB 5.4 -> 7.0, 4 MiB 3.4 -> 4.3; at 16-128 MiB within
 * the noise either way,
 * so those keep the rule). Over sockets (other hosts, or NCCL_SHM_DISABLE)
 * each channel has sockets of its own. As in NCCL, NCCL_MIN_NCHANNELS only
 * sets how many channels the communicator has (maxNch), not what an
 * operation takes. */
#define TUNE_LOCAL_RING_ONE_CHANNEL_BYTES (16u << 20)
static int channelsFor(const struct tuneTable *t, int coll, int algo, size_t bytes, int maxNch) {
  if (!usesChannels(algo)) return 1;
  size_t want = bytes / TUNE_BYTES_PER_CHANNEL;
  if (algo == algoRing && coll == collAllReduce && !t->topo.net && bytes < TUNE_LOCAL_RING_ONE_CHANNEL_BYTES)
    want = 1;
  if (algo == algoTree && coll == collAllReduce && want < 2) want = 2; /* both trees */
  return want < 1 ? 1 : want > (size_t)maxNch ? maxNch : (int)want;
}

/* Whether algo can carry this message at all (beyond what the registry says). */
static int fits(const struct tuneTable *t, int algo, size_t bytes, size_t slotBytes) {
  if (algo != algoOneHop) return 1;
  return t->cfg.smallThreshold >= 0 && bytes <= (size_t)t->cfg.smallThreshold && bytes <= slotBytes;
}

/* The last choice per collective, per thread: a loop of same-sized calls
 * (a benchmark, DDP's buckets) asks the model once. */
struct tuneCached {
  uint64_t table;
  size_t bytes, slotBytes;
  int maxNch, mapped;
  struct tuneChoice choice;
};
static _Thread_local struct tuneCached tuneCache[collTypeCount];

static ncclResult_t tuneSearch(const struct tuneTable *t, int coll, size_t count, size_t esz, int dtype,
                               size_t slotBytes, int maxNch, int mapped, struct tuneChoice *out);

ncclResult_t tuneChoose(const struct tuneTable *t, int coll, size_t count, size_t esz, int dtype, size_t slotBytes,
                        int maxNch, int mapped, struct tuneChoice *out) {
  struct tuneCached *k = coll >= 0 && coll < collTypeCount ? &tuneCache[coll] : NULL;
  size_t bytes = count * esz;
  /* A plugin is asked every time, as NCCL asks it per collective. */
  if (k && !t->plugin && k->table == t->id && k->bytes == bytes && k->slotBytes == slotBytes && k->maxNch == maxNch &&
      k->mapped == mapped) {
    *out = k->choice;
  } else {
    CHECK(tuneSearch(t, coll, count, esz, dtype, slotBytes, maxNch, mapped, out));
    if (k) *k = (struct tuneCached){t->id, bytes, slotBytes, maxNch, mapped, *out};
  }
  /* NCCL counts AllGather's and ReduceScatter's bytes over all ranks. */
  size_t logBytes = coll == collAllGather || coll == collReduceScatter ? bytes * (size_t)t->topo.nranks : bytes;
  if (t->logChoices)
    INFO(subsysTuning, "%s: %zu Bytes -> Algo %s proto %s channel{Lo..Hi}={0..%d}", collName(coll), logBytes,
         algoName(out->algo), protoName(out->proto), out->nch - 1);
  return ncclSuccess;
}

static ncclResult_t tuneSearch(const struct tuneTable *t, int coll, size_t count, size_t esz, int dtype,
                               size_t slotBytes, int maxNch, int mapped, struct tuneChoice *out) {
  size_t bytes = count * esz;
  int n = t->topo.nranks;
  struct tuneChoice best = {-1, protoSimple, 1, -1};
  if (coll == collSend || coll == collRecv) best.algo = algoP2p;
  else if (coll == collAlltoAll || coll == collGather || coll == collScatter) best.algo = algoPairwise;
  else if (n == 1) best.algo = algoLocal; /* as NCCL: one rank copies, whatever NCCL_ALGO says */
  if (best.algo >= 0) {
    best.us = tuneModelUs(&t->topo, coll, best.algo, best.proto, 1, bytes, mapped);
    *out = best;
    return ncclSuccess;
  }
  double costs[algoCount][protoCount];
  int nch[algoCount];
  for (int a = 0; a < algoCount; a++) {
    nch[a] = channelsFor(t, coll, a, bytes, maxNch);
    int possible = (t->algoMask[coll] & (1u << a)) && algoSupports(a, coll, n) && fits(t, a, bytes, slotBytes);
    for (int p = 0; p < protoCount; p++) {
      double us = possible && (t->protoMask[coll] & (1u << p)) ? tuneModelUs(&t->topo, coll, a, p, nch[a], bytes, mapped)
                                                               : -1;
      costs[a][p] = us;
      if (us >= 0 && (best.algo < 0 || us < best.us)) best = (struct tuneChoice){a, p, nch[a], us};
    }
  }
  if (best.algo >= 0 && t->plugin) CHECK(tunePluginAdjust(t, coll, bytes, dtype, costs, nch, maxNch, mapped, &best));
  if (best.algo < 0) {
    int oneHopTooBig = (t->algoMask[coll] & (1u << algoOneHop)) && !fits(t, algoOneHop, bytes, slotBytes);
    WARN("No algorithm/protocol available for function %s with datatype %s (%zu bytes on %d ranks). NCCL_ALGO was set "
         "to %s and NCCL_PROTO to %s.%s",
         collName(coll), dtypeName(dtype), bytes, n, t->cfg.algo[0] ? t->cfg.algo : "(unset)",
         t->cfg.proto[0] ? t->cfg.proto : "(unset)",
         oneHopTooBig ? " OneHop carries messages up to CHORUS_SMALL_THRESHOLD bytes and one FIFO slot only." : "");
    return t->cfg.algo[0] || t->cfg.proto[0] ? ncclInvalidUsage : ncclInternalError;
  }
  *out = best;
  return ncclSuccess;
}
