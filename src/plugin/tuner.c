#include "plugin/tuner.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "core/log.h"
#include "core/param.h"
#include "plugin/open.h"

static pthread_mutex_t loadLock = PTHREAD_MUTEX_INITIALIZER;
static int loadRefs; /* contexts holding the plugin */
static void *pluginLib;
static int pluginVersion; /* 6 to 2; 0: none loaded */
static const struct tuneAbiV6 *pluginV6; /* v6 and v5 */
static const struct tuneAbiV4 *pluginV4;
static const struct tuneAbiV3 *pluginV3;
static const struct tuneAbiV2 *pluginV2;
static char pluginUsed[512];

const char *tunerPluginName(void) {
  const char *n = pluginVersion >= 5   ? pluginV6->name
                  : pluginVersion == 4 ? pluginV4->name
                  : pluginVersion == 3 ? pluginV3->name
                  : pluginVersion == 2 ? pluginV2->name
                                       : NULL;
  return n ? n : "(unnamed)";
}

/* Under loadLock: the first context loads. */
static void pluginLoad(void) {
  const void *t;
  pluginLib = pluginLoadNewest("tuner", "TUNER", subsysInit | subsysTuning, paramStr(paramTunerPlugin),
                               "ncclTunerPlugin", 6, 2, "with chorus's tuner", &pluginVersion, &t, pluginUsed,
                               sizeof pluginUsed);
  if (!pluginLib) return;
  if (pluginVersion >= 5) pluginV6 = t; /* version 5's table is version 6's first members */
  else if (pluginVersion == 4) pluginV4 = t;
  else if (pluginVersion == 3) pluginV3 = t;
  else pluginV2 = t;
  INFO(subsysInit | subsysTuning, "TUNER/Plugin: Using %s (v%d) from %s", tunerPluginName(), pluginVersion,
       pluginUsed);
}

static void pluginUnload(void) {
  INFO(subsysTuning, "TUNER/Plugin: Closing tuner: '%s'", tunerPluginName());
  dlclose(pluginLib);
  pluginLib = NULL;
  pluginV6 = NULL;
  pluginV4 = NULL;
  pluginV3 = NULL;
  pluginV2 = NULL;
  pluginVersion = 0;
}

/* A plugin's result as a call's: ncclInProgress or a value outside
 * ncclResult_t would say something untrue of the call. */
static ncclResult_t callResult(ncclResult_t res) {
  return res < ncclUnhandledCudaError || res >= ncclNumResults || res == ncclInProgress ? ncclInternalError : res;
}

ncclResult_t tunerPluginInit(void **ctx, int *loaded, uint64_t commId, size_t nRanks, size_t nNodes, int minLocal,
                             int maxLocal) {
  *ctx = NULL;
  *loaded = 0;
  pthread_mutex_lock(&loadLock);
  if (loadRefs == 0 && !pluginVersion) pluginLoad();
  ncclResult_t res = ncclSuccess;
  if (pluginVersion) {
    if (pluginVersion >= 5) {
      struct tuneAbiNvlDomains domains = {(int)nNodes, minLocal, maxLocal};
      struct tuneAbiConstants constants;
      memset(&constants, 0, sizeof constants);
      res = pluginV6->init(ctx, commId, nRanks, nNodes, pluginLog, &domains, &constants);
    } else {
      res = pluginVersion == 4   ? pluginV4->init(nRanks, nNodes, pluginLog, ctx)
            : pluginVersion == 3 ? pluginV3->init(nRanks, nNodes, pluginLog, ctx)
                                 : pluginV2->init(nRanks, nNodes, pluginLog, ctx);
    }
    if (res == ncclSuccess) {
      *loaded = 1;
      loadRefs++;
    } else {
      WARN("TUNER/Plugin: %s's init failed with %s (%d)", tunerPluginName(), ncclGetErrorString(res), (int)res);
      res = callResult(res);
      if (loadRefs == 0) pluginUnload();
    }
  }
  pthread_mutex_unlock(&loadLock);
  return res;
}

void tunerPluginFinalize(void *ctx) {
  pthread_mutex_lock(&loadLock);
  if (pluginVersion >= 5) pluginV6->finalize(ctx);
  else if (pluginVersion == 4) pluginV4->destroy(ctx);
  else if (pluginVersion == 3) pluginV3->destroy(ctx);
  else pluginV2->destroy(ctx);
  if (--loadRefs == 0) pluginUnload();
  pthread_mutex_unlock(&loadLock);
}

/* A version 2 plugin names its pick; NCCL's adapter makes that entry free. */
static ncclResult_t askV2(void *ctx, int func, size_t nBytes, float table[][tuneAbiProtos], int *nChannels) {
  int algo = -1, proto = -1;
  ncclResult_t res = pluginV2->getCollInfo(ctx, func, nBytes, 0, 0, 1, &algo, &proto, nChannels);
  if (res == ncclSuccess && algo >= 0 && algo < tuneAbiAlgos && proto >= 0 && proto < tuneAbiProtos &&
      table[algo][proto] != TUNE_ABI_IGNORE)
    table[algo][proto] = 0.0f;
  return res;
}

/* Read without the lock: a caller holds a context, so the plugin stays. */
ncclResult_t tunerPluginGetCollInfo(void *ctx, int func, size_t nBytes, float table[][tuneAbiProtos], int regBuff,
                                    int *nChannels) {
  float **arg = (float **)(void *)table; /* NCCL passes its 2-D array so */
  ncclResult_t res =
      pluginVersion >= 5   ? pluginV6->getCollInfo(ctx, func, nBytes, 1, arg, tuneAbiAlgos, tuneAbiProtos, regBuff, nChannels)
      : pluginVersion == 4 ? pluginV4->getCollInfo(ctx, func, nBytes, 1, arg, tuneAbiAlgos, tuneAbiProtos, regBuff, nChannels)
      : pluginVersion == 3 ? pluginV3->getCollInfo(ctx, func, nBytes, 1, arg, tuneAbiAlgos, tuneAbiProtos, nChannels)
                           : askV2(ctx, func, nBytes, table, nChannels);
  if (res == ncclSuccess) return ncclSuccess;
  WARN("TUNER/Plugin: %s's getCollInfo failed with %s (%d) for %zu bytes", tunerPluginName(), ncclGetErrorString(res),
       (int)res, nBytes);
  return callResult(res);
}
