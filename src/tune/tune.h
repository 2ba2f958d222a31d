/* The tuner: for one operation, the algorithm, protocol and channel count
 * with the least predicted time (tune/model.c) among those the registry
 * supports and NCCL_ALGO / NCCL_PROTO allow (tune/filter.c). Every rank must
 * choose the same, so the choice depends only on what all ranks share: the
 * call's arguments, the topology agreed at init, and rank 0's tuning
 * variables (api/init.c sends them to everyone). The descriptor carries the
 * choice, so a disagreement is still an error on every rank. */
#ifndef CHORUS_TUNE_TUNE_H
#define CHORUS_TUNE_TUNE_H
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#define TUNE_ENV_BYTES 256

/* The tuning variables as rank 0 has them (a plain struct: it travels in
 * the init all-gather). */
struct tuneConfig {
  int64_t smallThreshold;        /* CHORUS_SMALL_THRESHOLD */
  char algo[TUNE_ENV_BYTES];     /* NCCL_ALGO ("" unset) */
  char proto[TUNE_ENV_BYTES];    /* NCCL_PROTO */
  int32_t tooLong;               /* bit 0: NCCL_ALGO, bit 1: NCCL_PROTO did not fit (init fails, never a cut list) */
};
void tuneConfigFromEnv(struct tuneConfig *cfg);

/* What the model needs of the communicator, the same on every rank. */
struct tuneTopo {
  int nranks;
  int nhosts;        /* distinct hosts */
  int localRanks;    /* most ranks on one host */
  int cores;         /* fewest online cores of any rank's host */
  int net;           /* some pair of ranks talks over sockets */
  int machineRanks;  /* most ranks on one machine: hosts on one kernel (namespaces, containers) count together */
  int hostNet;       /* ranks of one host talk over sockets too (NCCL_SHM_DISABLE) */
  int netMbps;       /* the slowest link the ranks' sockets use, Mb/s (its NIC's speed in sysfs, as NCCL's
                      * socket network reads it; 0: unknown) */
  uint64_t cacheBytes; /* the smallest L3 of the ranks' hosts, as topoCacheBytes counts it */
};

/* The collectives NCCL_ALGO / NCCL_PROTO name (NCCL's functions); the
 * others always use their one algorithm. */
enum { tuneFuncCount = 5 };

/* NCCL_ALGO / NCCL_PROTO parsed: per collective, a bit per algorithm and
 * per protocol that may be used. */
struct tuneTable {
  uint64_t id; /* unique per tuneSetup, for the per-thread cache of choices */
  struct tuneConfig cfg;
  struct tuneTopo topo;
  uint32_t algoMask[tuneFuncCount];
  uint32_t protoMask[tuneFuncCount];
  int logChoices; /* NCCL_DEBUG_SUBSYS=TUNING's line per choice: rank 0's alone, as NCCL logs them */
  int plugin;      /* 1: NCCL_TUNER_PLUGIN's plugin has a context for this communicator (pluginCtx) */
  void *pluginCtx;
};

/* Parses cfg's NCCL_ALGO / NCCL_PROTO with NCCL's syntax: ncclInvalidUsage
 * and a WARN naming the bad token when they do not parse. */
ncclResult_t tuneSetup(struct tuneTable *t, const struct tuneConfig *cfg, const struct tuneTopo *topo);
/* Another rank's values (cfg, of rank) against held, rank 0's as tuneSetup
 * parsed them, which hold for the communicator: ncclInvalidUsage, with a
 * WARN naming rank, when they do not parse (NCCL would fail that rank's
 * init: here every rank's fails, each checking every rank's); a WARN when
 * they choose otherwise, on that rank alone (self). */
ncclResult_t tuneConfigAgree(const struct tuneTable *held, const struct tuneConfig *cfg, int rank, int self);

/* NCCL_TUNER_PLUGIN (tune/plugin.c): the first communicator of the process
 * loads the plugin, and each calls its init with the topology (t->topo;
 * minLocal: the fewest ranks on one host). ncclSuccess without a plugin;
 * the plugin's error when its init fails (as NCCL's init fails). The
 * plugin then has its say in every choice of a collective on t. */
ncclResult_t tunePluginInit(struct tuneTable *t, uint64_t commHash, int minLocal);
void tunePluginFinalize(struct tuneTable *t);

struct tuneChoice {
  int algo;  /* enum algoId */
  int proto; /* enum protoId */
  int nch;
  double us; /* predicted time */
};

/* Chooses for coll (enum collType) on count elements of esz bytes.
 * slotBytes bounds one-slot algorithms; maxNch is the communicator's
 * channels; mapped: the call's buffers are, on every rank, in
 * NCCL_WIN_COLL_SYMMETRIC windows (the user's promise, as in NCCL), which
 * local peers are taken to read in place (tuneModelUs; what they cannot map
 * comes through the FIFOs). No choice left (NCCL_ALGO /
 * NCCL_PROTO exclude all): NCCL's
 * "No algorithm/protocol available" WARN and ncclInvalidUsage. */
ncclResult_t tuneChoose(const struct tuneTable *t, int coll, size_t count, size_t esz, int dtype, size_t slotBytes,
                        int maxNch, int mapped, struct tuneChoice *out);

/* The model's time for one choice (tune/model.c), in microseconds; < 0 when
 * the model does not cover it. bytes is the per-rank message; mapped as
 * tuneChoose's (0: the buffers are plain memory, read through the FIFOs). */
double tuneModelUs(const struct tuneTopo *topo, int coll, int algo, int proto, int nch, size_t bytes, int mapped);

#endif
