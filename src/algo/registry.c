#include "algo/algo.h"
#include "algo/build.h"

#include "core/log.h"

extern const struct algoFamily localAlgo, ringAlgo, oneHopAlgo, chainAlgo, p2pAlgo, pairwiseAlgo, treeAlgo,
    recDoublingAlgo, rabenseifnerAlgo;

/* Indexed by enum algoId (engine/desc.h). */
static const struct algoFamily *const families[algoCount] = {
    [algoLocal] = &localAlgo, [algoRing] = &ringAlgo, [algoOneHop] = &oneHopAlgo,
    [algoChain] = &chainAlgo, [algoP2p] = &p2pAlgo,   [algoPairwise] = &pairwiseAlgo, [algoTree] = &treeAlgo,
    [algoRecDoubling] = &recDoublingAlgo, [algoRabenseifner] = &rabenseifnerAlgo,
};

const struct algoFamily *algoFamily(int algo) { return algo >= 0 && algo < algoCount ? families[algo] : NULL; }

int algoSupports(int algo, int coll, int nranks) {
  const struct algoFamily *f = algoFamily(algo);
  return f && f->supports(coll, nranks);
}

int algoStableSends(int algo, int coll) {
  const struct algoFamily *f = algoFamily(algo);
  return f && f->stableSends && f->stableSends(coll);
}

int algoMappedSends(int algo, const struct collDesc *d, int nranks) {
  const struct algoFamily *f = algoFamily(algo);
  return f && f->mappedSends && f->mappedSends(d, nranks);
}

ncclResult_t algoBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int algo, int nch) {
  if (!algoSupports(algo, d->coll, c->nranks)) {
    WARN("%s : algorithm %s cannot build it for %d ranks", collName(d->coll), algoName(algo), c->nranks);
    return ncclInternalError;
  }
  const struct algoFamily *f = families[algo];
  int agreesItself = f->agrees && f->agrees(d->coll, c->nranks);
  if (c->check && collRooted(d->coll) && c->nranks > 1 && !agreesItself) CHECK(agreeBuild(s, c, d, NULL));
  return f->build(s, c, d, nch);
}
