/* NCCL_ALGO and NCCL_PROTO, with NCCL's syntax (2.24 and later):
 *   list                 every collective: "Ring", "tree,ring", "^tree"
 *   func:list;func:list  per collective: "allreduce:tree;broadcast:ring"
 * Names are case-insensitive; a list that starts with ^ excludes; later
 * items override earlier ones for the collectives they name. Empty fields
 * are skipped as NCCL's strtok skips them (":tree" is "tree", "ring:" is
 * "ring", "allreduce::tree" is "allreduce:tree", a field after the list is
 * ignored), "^" alone excludes nothing, and a list of no names ("," or
 * "allreduce:,") allows nothing. Beyond NCCL, blanks around names are
 * trimmed and a prefix may name several collectives ("allreduce,broadcast:
 * ring"). Every name
 * NCCL knows is accepted, also those chorus has no algorithm for (NVLS,
 * CollNet...): a request that leaves a collective nothing fails at the call
 * with NCCL's "No algorithm/protocol available", never silently. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "engine/desc.h"
#include "tune/tune.h"

struct tuneName {
  const char *name;
  uint32_t mask;
};

#define BIT(x) (1u << (x))
/* Ring is how NCCL runs Broadcast and Reduce too: chorus's chains. */
static const struct tuneName algoNames[] = {
    {"Ring", BIT(algoRing) | BIT(algoChain)}, {"Tree", BIT(algoTree)}, {"CollNetDirect", 0}, {"CollNetChain", 0}, {"NVLS", 0},
    {"NVLSTree", 0}, {"PAT", 0}, {"OneHop", BIT(algoOneHop)}, {"Chain", BIT(algoChain)},
    {"RecDoubling", BIT(algoRecDoubling)}, {"Rabenseifner", BIT(algoRabenseifner)}, {NULL, 0}};
static const struct tuneName protoNames[] = {{"LL", BIT(protoLL)}, {"LL128", 0}, {"Simple", BIT(protoSimple)}, {NULL, 0}};

static void trim(char **s) {
  while (**s == ' ' || **s == '\t') (*s)++;
  size_t n = strlen(*s);
  while (n > 0 && ((*s)[n - 1] == ' ' || (*s)[n - 1] == '\t')) (*s)[--n] = 0;
}

/* The collective named (enum collType: the tuned ones are 0..tuneFuncCount-1), or -1. */
static int funcByName(const char *name) {
  for (int c = 0; c < tuneFuncCount; c++)
    if (strcasecmp(collName(c), name) == 0) return c;
  return -1;
}

/* A list of names ("^a,b"): the mask it leaves, or 0 with a WARN. */
static int parseList(const char *var, const char *value, char *list, const struct tuneName *names, uint32_t all,
                     uint32_t *mask) {
  trim(&list);
  int exclude = list[0] == '^';
  if (exclude) list++;
  uint32_t listed = 0;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    trim(&tok);
    if (!tok[0]) continue;
    int k = 0;
    while (names[k].name && strcasecmp(names[k].name, tok) != 0) k++;
    if (!names[k].name) {
      WARN("%s=\"%s\": unknown name \"%s\"", var, value, tok);
      return -1;
    }
    listed |= names[k].mask;
  }
  *mask = exclude ? all & ~listed : listed;
  return 0;
}

static ncclResult_t parseVar(const char *var, const char *value, const struct tuneName *names, uint32_t all,
                             uint32_t *masks) {
  for (int c = 0; c < tuneFuncCount; c++) masks[c] = all;
  if (!value[0]) return ncclSuccess;
  char buf[TUNE_ENV_BYTES];
  snprintf(buf, sizeof buf, "%s", value);
  for (char *save = NULL, *item = strtok_r(buf, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
    /* The item's first two fields between colons, empty ones skipped: one
     * is a list for every collective, two a prefix and its list. */
    char *fields = NULL, *first = strtok_r(item, ":", &fields), *second = strtok_r(NULL, ":", &fields);
    if (!first) continue; /* colons only */
    if (!second && item != buf) { /* as NCCL: it would undo every entry before it */
      WARN("All entries except the first must have a prefix: \"%s\" (%s)", value, var);
      return ncclInvalidUsage;
    }
    uint32_t funcs = BIT(tuneFuncCount) - 1, mask;
    char *list = second ? second : first;
    if (second) {
      funcs = 0;
      for (char *s2 = NULL, *f = strtok_r(first, ",", &s2); f; f = strtok_r(NULL, ",", &s2)) {
        trim(&f);
        int c = funcByName(f);
        if (c < 0) {
          WARN("%s=\"%s\": unknown collective \"%s\" (Broadcast, Reduce, AllGather, ReduceScatter, AllReduce)", var,
               value, f);
          return ncclInvalidUsage;
        }
        funcs |= BIT(c);
      }
    }
    if (parseList(var, value, list, names, all, &mask) != 0) return ncclInvalidUsage;
    for (int c = 0; c < tuneFuncCount; c++)
      if (funcs & BIT(c)) masks[c] = mask;
  }
  return ncclSuccess;
}

/* Parses cfg (rank's values) into t's masks. */
static ncclResult_t parseConfig(struct tuneTable *t, const struct tuneConfig *cfg, int rank) {
  for (int v = 0; v < 2; v++)
    if (cfg->tooLong & (1 << v)) {
      WARN("%s (rank %d's%s) is longer than %d characters", v ? "NCCL_PROTO" : "NCCL_ALGO", rank,
           rank == 0 ? ", which holds for the communicator" : "", TUNE_ENV_BYTES - 1);
      return ncclInvalidUsage;
    }
  ncclResult_t res = parseVar("NCCL_ALGO", cfg->algo, algoNames, BIT(algoCount) - 1, t->algoMask);
  if (res == ncclSuccess) res = parseVar("NCCL_PROTO", cfg->proto, protoNames, BIT(protoCount) - 1, t->protoMask);
  return res;
}

ncclResult_t tuneSetup(struct tuneTable *t, const struct tuneConfig *cfg, const struct tuneTopo *topo) {
  static uint64_t ids;
  memset(t, 0, sizeof *t);
  t->id = __atomic_add_fetch(&ids, 1, __ATOMIC_RELAXED);
  t->cfg = *cfg;
  t->topo = *topo;
  return parseConfig(t, cfg, 0);
}

ncclResult_t tuneConfigAgree(const struct tuneTable *held, const struct tuneConfig *cfg, int rank, int self) {
  const struct tuneConfig *rank0 = &held->cfg;
  if (!strcmp(cfg->algo, rank0->algo) && !strcmp(cfg->proto, rank0->proto) && cfg->tooLong == rank0->tooLong &&
      cfg->smallThreshold == rank0->smallThreshold)
    return ncclSuccess;
  struct tuneTable mine;
  memset(&mine, 0, sizeof mine);
  if (parseConfig(&mine, cfg, rank) != ncclSuccess) {
    WARN("rank %d's NCCL_ALGO \"%s\" / NCCL_PROTO \"%s\" do not parse: every rank's init fails, as that rank's would "
         "in NCCL (rank 0's values hold for the communicator, and each rank's must be valid)",
         rank, cfg->algo, cfg->proto);
    return ncclInvalidUsage;
  }
  /* The same choices spelled otherwise ("ring" for "Ring") differ in nothing */
  int same = cfg->smallThreshold == rank0->smallThreshold &&
             !memcmp(held->algoMask, mine.algoMask, sizeof mine.algoMask) &&
             !memcmp(held->protoMask, mine.protoMask, sizeof mine.protoMask);
  if (self && !same)
    WARN("NCCL_ALGO \"%s\", NCCL_PROTO \"%s\" and CHORUS_SMALL_THRESHOLD %lld of this rank (%d) differ from rank "
         "0's (\"%s\", \"%s\", %lld), which hold for the communicator", cfg->algo, cfg->proto,
         (long long)cfg->smallThreshold, rank, rank0->algo, rank0->proto, (long long)rank0->smallThreshold);
  return ncclSuccess;
}
