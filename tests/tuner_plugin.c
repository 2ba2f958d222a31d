/* A tuner plugin for test_tunerplugin, built as NCCL's tuner plugins are
 * (TUNER_VERSION 6 to 2: the table it exports). It writes what it is told
 * to $CHORUS_TEST_TUNER_LOG (a line per call) and:
 *   AllReduce up to 4 KiB: Ring/Simple costs nothing, on 2 channels
 *   Broadcast: NVLS/Simple, which chorus does not have, costs nothing
 *   Reduce: Ring is excluded (every protocol)
 *   any collective: everything excluded, where CHORUS_TEST_TUNER_NONE is set;
 *     every entry free, where CHORUS_TEST_TUNER_TIE is set
 *   ReduceScatter: the call fails, where CHORUS_TEST_TUNER_FAIL_CALL is set
 *     (returning ncclInProgress where it is "inprogress")
 *   init fails where CHORUS_TEST_TUNER_FAIL_INIT is set.
 * Version 2 names Ring/Simple on 2 channels for AllReduce up to 4 KiB and
 * nothing else. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin/tuner_abi.h"
#include "plugin_note.h"

#ifndef TUNER_VERSION
#define TUNER_VERSION 6
#endif

#define note(...) pluginNote("CHORUS_TEST_TUNER_LOG", TUNER_VERSION, __VA_ARGS__)

static int contexts;

static ncclResult_t initCommon(size_t nRanks, size_t nNodes, void **ctx) {
  if (getenv("CHORUS_TEST_TUNER_FAIL_INIT")) return ncclSystemError;
  *ctx = &contexts;
  contexts++;
  note("init nRanks %zu nNodes %zu", nRanks, nNodes);
  return ncclSuccess;
}

static ncclResult_t finalizeCommon(void *ctx) {
  note("finalize %s", ctx == &contexts ? "ok" : "wrong-context");
  contexts--;
  return ncclSuccess;
}

#if TUNER_VERSION >= 3
static ncclResult_t getCollInfoCommon(void *ctx, int collType, size_t nBytes, int numPipeOps, float **collCostTable,
                                      int numAlgo, int numProto, int regBuff, int *nChannels) {
  float(*t)[tuneAbiProtos] = (float(*)[tuneAbiProtos])collCostTable;
  note("call func %d bytes %zu pipe %d algos %d protos %d reg %d ctx %d tree %.9g %.9g %.9g ring %.9g %.9g %.9g others %.9g", collType,
       nBytes, numPipeOps, numAlgo, numProto, regBuff, ctx == &contexts, t[0][0], t[0][1], t[0][2], t[1][0], t[1][1],
       t[1][2], t[2][2] + t[3][2] + t[4][2] + t[5][2] + t[6][2] + t[6][0]);
  if (collType == tuneAbiFuncAllReduce && nBytes <= 4096 && t[tuneAbiAlgoRing][tuneAbiProtoSimple] != TUNE_ABI_IGNORE) {
    t[tuneAbiAlgoRing][tuneAbiProtoSimple] = 0.0f;
    *nChannels = 2;
  }
  if (collType == tuneAbiFuncBroadcast) t[4][tuneAbiProtoSimple] = 0.0f;
  if (collType == tuneAbiFuncReduce)
    for (int p = 0; p < numProto; p++) t[tuneAbiAlgoRing][p] = TUNE_ABI_IGNORE;
  if (getenv("CHORUS_TEST_TUNER_TIE"))
    for (int a = 0; a < numAlgo; a++)
      for (int p = 0; p < numProto; p++)
        if (t[a][p] != TUNE_ABI_IGNORE) t[a][p] = 0.0f;
  if (getenv("CHORUS_TEST_TUNER_NONE"))
    for (int a = 0; a < numAlgo; a++)
      for (int p = 0; p < numProto; p++) t[a][p] = TUNE_ABI_IGNORE;
  const char *fail = getenv("CHORUS_TEST_TUNER_FAIL_CALL");
  if (collType == tuneAbiFuncReduceScatter && fail) return strcmp(fail, "inprogress") ? ncclInternalError : ncclInProgress;
  return ncclSuccess;
}
#endif

#if TUNER_VERSION >= 5
static ncclResult_t init5(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes, tuneAbiLogger logFunction,
                          struct tuneAbiNvlDomains *domains, struct tuneAbiConstants *constants) {
  (void)constants;
  ncclResult_t res = initCommon(nRanks, nNodes, ctx);
  if (res == ncclSuccess) {
    note("domains %d %d %d commId %s", domains->nNvlDomains, domains->minRanksPerNvlDomain,
         domains->maxRanksPerNvlDomain, commId ? "set" : "zero");
    logFunction(3, 64, __FILE__, __LINE__, "chorus test tuner: init for %zu ranks", nRanks); /* INFO, TUNING */
  }
  return res;
}
/* Version 5's table is version 6's without getChunkSize. */
#if TUNER_VERSION == 6
#define TUNER_SYMBOL ncclTunerPlugin_v6
#else
#define TUNER_SYMBOL ncclTunerPlugin_v5
#endif
__attribute__((visibility("default"))) const struct tuneAbiV6 TUNER_SYMBOL = {
    "chorus-test-tuner", init5, getCollInfoCommon, finalizeCommon, NULL};
#else
static ncclResult_t initOld(size_t nRanks, size_t nNodes, tuneAbiLogger logFunction, void **ctx) {
  (void)logFunction;
  return initCommon(nRanks, nNodes, ctx);
}
#if TUNER_VERSION == 4
__attribute__((visibility("default"))) const struct tuneAbiV4 ncclTunerPlugin_v4 = {
    "chorus-test-tuner", initOld, getCollInfoCommon, finalizeCommon};
#elif TUNER_VERSION == 3
static ncclResult_t getCollInfo3(void *ctx, int collType, size_t nBytes, int numPipeOps, float **collCostTable,
                                 int numAlgo, int numProto, int *nChannels) {
  return getCollInfoCommon(ctx, collType, nBytes, numPipeOps, collCostTable, numAlgo, numProto, -1, nChannels);
}
__attribute__((visibility("default"))) const struct tuneAbiV3 ncclTunerPlugin_v3 = {
    "chorus-test-tuner", initOld, getCollInfo3, finalizeCommon};
#else
static ncclResult_t getCollInfo2(void *ctx, int collType, size_t nBytes, int collNetSupport, int nvlsSupport,
                                 int numPipeOps, int *algorithm, int *protocol, int *nChannels) {
  note("call func %d bytes %zu pipe %d collnet %d nvls %d ctx %d", collType, nBytes, numPipeOps, collNetSupport,
       nvlsSupport, ctx == &contexts);
  if (collType == tuneAbiFuncAllReduce && nBytes <= 4096) {
    *algorithm = tuneAbiAlgoRing;
    *protocol = tuneAbiProtoSimple;
    *nChannels = 2;
  }
  return ncclSuccess;
}
__attribute__((visibility("default"))) const struct tuneAbiV2 ncclTunerPlugin_v2 = {
    "chorus-test-tuner", initOld, getCollInfo2, finalizeCommon};
#endif
#endif
