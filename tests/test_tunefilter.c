/* NCCL_ALGO / NCCL_PROTO parsed as NCCL 2.30's parseList reads them (no
 * processes): for each value, whether init accepts it and what each
 * collective may then use. Empty fields between separators are skipped as
 * NCCL's strtok skips them, "^" alone excludes nothing, a list of no names
 * allows nothing, and a value too long to travel fails instead of being
 * cut. Until 2026-12-06 ":tree" was silently ignored (a prefix of no
 * collective), "^", "allreduce::tree", "allreduce:tree:ring" and "ring:"
 * failed init, and a value past 255 characters was cut. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "engine/desc.h"
#include "tune/tune.h"

#define B(x) (1u << (x))
#define RING (B(algoRing) | B(algoChain))
#define TREE B(algoTree)
#define ALL_ALGOS (B(algoCount) - 1)
#define ALL_PROTOS (B(protoCount) - 1)

struct algoCase {
  const char *value;
  int ok;
  uint32_t allReduce, allGather; /* algoMask of each when ok */
};

static const struct algoCase algoCases[] = {
    {"tree", 1, TREE, TREE},
    {"Ring,Tree", 1, RING | TREE, RING | TREE},
    {"^tree", 1, ALL_ALGOS & ~TREE, ALL_ALGOS & ~TREE},
    {":tree", 1, TREE, TREE},
    {"ring:", 1, RING, RING},
    {"allreduce::tree", 1, TREE, ALL_ALGOS},
    {"allreduce:tree:ring", 1, TREE, ALL_ALGOS},
    {"^", 1, ALL_ALGOS, ALL_ALGOS},
    {"allreduce:^", 1, ALL_ALGOS, ALL_ALGOS},
    {",", 1, 0, 0},
    {"allreduce:,", 1, 0, ALL_ALGOS},
    {"tree,", 1, TREE, TREE},
    {";;tree", 0, 0, 0}, /* NCCL: the first entry is not at the start, so it needs a prefix */
    {"ring;allreduce:tree", 1, TREE, RING},
    {"ring;allgather:^ring;allreduce:tree", 1, TREE, ALL_ALGOS & ~RING},
    {"allreduce:tree;ring", 0, 0, 0},
    {"Rnig", 0, 0, 0},
    {"allreduc:tree", 0, 0, 0},
    {"::", 1, ALL_ALGOS, ALL_ALGOS},
    {" tree , ring ", 1, RING | TREE, RING | TREE},
    {"tree, ,ring", 1, RING | TREE, RING | TREE},
    {"allreduce,allgather:tree", 1, TREE, TREE},
};

static int check(const char *algo, const char *proto, int wantOk, uint32_t wantAr, uint32_t wantAg, int protoCase,
                 const char *what) {
  struct tuneConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.smallThreshold = 65536;
  snprintf(cfg.algo, sizeof cfg.algo, "%s", algo);
  snprintf(cfg.proto, sizeof cfg.proto, "%s", proto);
  struct tuneTopo topo = {.nranks = 4, .nhosts = 1, .localRanks = 4, .cores = 4, .machineRanks = 4};
  struct tuneTable t;
  ncclResult_t res = tuneSetup(&t, &cfg, &topo);
  const uint32_t *masks = protoCase ? t.protoMask : t.algoMask;
  if ((res == ncclSuccess) != wantOk || (wantOk && (masks[collAllReduce] != wantAr || masks[collAllGather] != wantAg))) {
    fprintf(stderr, "%s=\"%s\": %s, AllReduce 0x%x AllGather 0x%x; want %s, 0x%x 0x%x\n", what, protoCase ? proto : algo,
            res == ncclSuccess ? "accepted" : "refused", res == ncclSuccess ? masks[collAllReduce] : 0,
            res == ncclSuccess ? masks[collAllGather] : 0, wantOk ? "accepted" : "refused", wantAr, wantAg);
    return 1;
  }
  return 0;
}

int main(void) {
  int failed = 0;
  /* set before anything reads the parameters (they are read once) */
  char longList[400] = "";
  while (strlen(longList) < 300) strcat(longList, "tree,");
  strcat(longList, "ring");
  setenv("NCCL_ALGO", longList, 1);
  for (size_t i = 0; i < sizeof algoCases / sizeof algoCases[0]; i++) {
    const struct algoCase *c = &algoCases[i];
    failed += check(c->value, "", c->ok, c->allReduce, c->allGather, 0, "NCCL_ALGO");
  }
  failed += check("", ":LL", 1, B(protoLL), B(protoLL), 1, "NCCL_PROTO");
  failed += check("", "^", 1, ALL_PROTOS, ALL_PROTOS, 1, "NCCL_PROTO");
  failed += check("", "allgather:simple:ll", 1, ALL_PROTOS, B(protoSimple), 1, "NCCL_PROTO");
  failed += check("", "LL128", 1, 0, 0, 1, "NCCL_PROTO"); /* NCCL's name, no protocol here: the call fails */
  /* Too long to travel to the other ranks: refused, not cut (here a cut
   * after "tree," would drop the ring). */
  struct tuneConfig cfg;
  struct tuneTopo topo = {.nranks = 4, .nhosts = 1, .localRanks = 4, .cores = 4, .machineRanks = 4};
  struct tuneTable t;
  tuneConfigFromEnv(&cfg);
  if (tuneSetup(&t, &cfg, &topo) != ncclInvalidUsage) {
    fprintf(stderr, "a %zu-character NCCL_ALGO was not refused\n", strlen(longList));
    failed++;
  }
  /* Another rank's values against rank 0's (tuneConfigAgree): one that
   * does not parse fails; the same choices spelled otherwise draw no WARN,
   * other choices do, on their own rank alone. */
  struct tuneConfig zero = {.smallThreshold = 16384}, other = zero;
  snprintf(zero.algo, sizeof zero.algo, "Ring,Tree");
  struct tuneTable held;
  if (tuneSetup(&held, &zero, &topo) != ncclSuccess) {
    fprintf(stderr, "rank 0's NCCL_ALGO '%s' was refused\n", zero.algo);
    failed++;
  }
  const struct {
    const char *algo;
    int self;
    ncclResult_t want;
    int warns;
  } agree[] = {{"tree , RING", 1, ncclSuccess, 0}, {"ring", 1, ncclSuccess, 1}, {"ring", 0, ncclSuccess, 0},
               {"Rnig", 0, ncclInvalidUsage, 1}};
  for (size_t i = 0; i < sizeof agree / sizeof agree[0]; i++) {
    snprintf(other.algo, sizeof other.algo, "%s", agree[i].algo);
    logSetLastError("");
    ncclResult_t res = tuneConfigAgree(&held, &other, 1, agree[i].self);
    int warned = logLastError()[0] != 0;
    if (res != agree[i].want || warned != agree[i].warns) {
      fprintf(stderr, "rank 1's NCCL_ALGO '%s' against rank 0's '%s' (self %d): %d and %s WARN, expected %d and %s\n",
              agree[i].algo, zero.algo, agree[i].self, res, warned ? "a" : "no", agree[i].want,
              agree[i].warns ? "a" : "no");
      failed++;
    }
  }
  printf("tunefilter: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
