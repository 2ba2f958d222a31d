/* NCCL's tuner plugin interface (ext-tuner, NCCL 2.30: ncclTuner_v6 back
 * to v2), declared from its documented layout: what a plugin built against
 * NCCL's tuner.h finds when chorus loads it. */
#ifndef CHORUS_PLUGIN_TUNER_ABI_H
#define CHORUS_PLUGIN_TUNER_ABI_H
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* The cost table's shape and indices, NCCL's NCCL_ALGO_* / NCCL_PROTO_*. */
enum { tuneAbiAlgos = 7, tuneAbiProtos = 3 };
enum { tuneAbiAlgoTree = 0, tuneAbiAlgoRing = 1 };
enum { tuneAbiProtoLL = 0, tuneAbiProtoLL128 = 1, tuneAbiProtoSimple = 2 };
#define TUNE_ABI_IGNORE (-1.0f) /* NCCL_ALGO_PROTO_IGNORE: not available */

/* ncclFunc_t's numbers for the collectives a tuner is asked about. */
enum { tuneAbiFuncBroadcast = 0, tuneAbiFuncReduce = 1, tuneAbiFuncAllGather = 2, tuneAbiFuncReduceScatter = 3,
       tuneAbiFuncAllReduce = 4 };

typedef void (*tuneAbiLogger)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);

/* ncclNvlDomainInfo_v5_t (also v6's) */
struct tuneAbiNvlDomains {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
};

/* ncclTunerConstants_v5_t (also v6's): NCCL's model constants, which a
 * plugin may read and change at init. */
struct tuneAbiConstants {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
};

/* ncclTuner_v6_t; v5's is its first four members. */
struct tuneAbiV6 {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes, tuneAbiLogger logFunction,
                       struct tuneAbiNvlDomains *nvlDomainInfo, struct tuneAbiConstants *constants);
  ncclResult_t (*getCollInfo)(void *ctx, int collType, size_t nBytes, int numPipeOps, float **collCostTable,
                              int numAlgo, int numProto, int regBuff, int *nChannels);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*getChunkSize)(void *ctx, int collType, size_t nBytes, int algo, int proto, int nChannels,
                               size_t *chunkSize);
};

/* ncclTuner_v4_t; v3's getCollInfo lacks regBuff. */
struct tuneAbiV4 {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, tuneAbiLogger logFunction, void **ctx);
  ncclResult_t (*getCollInfo)(void *ctx, int collType, size_t nBytes, int numPipeOps, float **collCostTable,
                              int numAlgo, int numProto, int regBuff, int *nChannels);
  ncclResult_t (*destroy)(void *ctx);
};
struct tuneAbiV3 {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, tuneAbiLogger logFunction, void **ctx);
  ncclResult_t (*getCollInfo)(void *ctx, int collType, size_t nBytes, int numPipeOps, float **collCostTable,
                              int numAlgo, int numProto, int *nChannels);
  ncclResult_t (*destroy)(void *ctx);
};

/* ncclTuner_v2_t: it names an algorithm and protocol instead of costing. */
struct tuneAbiV2 {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, tuneAbiLogger logFunction, void **ctx);
  ncclResult_t (*getCollInfo)(void *ctx, int collType, size_t nBytes, int collNetSupport, int nvlsSupport,
                              int numPipeOps, int *algorithm, int *protocol, int *nChannels);
  ncclResult_t (*destroy)(void *ctx);
};

#endif
