#include "tune/tune.h"

#include "algo/algo.h"
#include "core/param.h"

/* Channels pay off once each carries enough bytes to amortize a pass over
 * its FIFO; below that one channel has the least overhead. */
#define TUNE_BYTES_PER_CHANNEL (1u << 20)

void tuneConfigFromEnv(struct tuneConfig *cfg) { cfg->smallThreshold = paramInt(paramLLThreshold); }

struct tuneChoice tuneChoose(const struct tuneConfig *cfg, int coll, size_t bytes, int nranks, int maxNch,
                             size_t slotBytes) {
  struct tuneChoice c = {algoRing, 1};
  if (coll == collSend || coll == collRecv) {
    c.algo = algoP2p;
    return c;
  }
  if (coll == collAlltoAll || coll == collGather || coll == collScatter) {
    c.algo = algoPairwise;
    return c;
  }
  if (nranks == 1) {
    c.algo = algoLocal;
    return c;
  }
  if (coll == collBroadcast || coll == collReduce) c.algo = algoChain;
  if (coll == collAllReduce && cfg->smallThreshold >= 0 && bytes <= (size_t)cfg->smallThreshold &&
      bytes <= slotBytes) {
    c.algo = algoOneHop;
    return c;
  }
  size_t want = bytes / TUNE_BYTES_PER_CHANNEL;
  c.nch = want < 1 ? 1 : want > (size_t)maxNch ? maxNch : (int)want;
  return c;
}
