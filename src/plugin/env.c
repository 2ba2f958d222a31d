/* NCCL's environment plugins (NCCL_ENV_PLUGIN): a library that answers for
 * the environment, loaded by NCCL's names and versions (ncclEnvPlugin_v2,
 * then _v1) at the first reading of the parameters. From then on every
 * NCCL_* / CHORUS_* variable chorus reads is the plugin's getEnv's answer
 * (core/param.c asks it; the conf files are applied to the environment
 * before, as NCCL does). NCCL_ENV_PLUGIN itself is read from the
 * environment: a path or a name (libnccl-env-NAME.so), "none", or unset
 * (libnccl-env.so where the loader finds one). A plugin that cannot be
 * loaded, or whose init fails, leaves the environment as it is, as NCCL
 * falls back to its internal plugin. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

#include "core/log.h"
#include "core/param.h"
#include "nccl.h"
#include "plugin/env_abi.h"
#include "plugin/open.h"

static ncclResult_t (*pluginFinalize)(void);
static const char *pluginName;

/* At exit, as NCCL finalizes it: nothing asks the plugin after this. */
static void envPluginFinalize(void) {
  paramSetSource(NULL);
  if (pluginFinalize) pluginFinalize();
  INFO(subsysEnv, "ENV/Plugin: Closing env plugin %s", pluginName);
}

/* core/param.c's source loader: runs once, at the first reading. */
static void envPluginLoad(void) {
  const char *name = paramStr(paramEnvPlugin); /* the environment's: the first reading's, never the plugin's */
  char used[512];
  const void *t;
  int version;
  void *lib = pluginLoadNewest("env", "ENV", subsysInit | subsysEnv, name, "ncclEnvPlugin", 2, 1,
                               "with the environment as it is", &version, &t, used, sizeof used);
  if (!lib) return;
  /* The versions differ in init's arguments alone. */
  const struct envAbiV2 *v2 = version == 2 ? t : NULL;
  const struct envAbiV1 *v1 = version == 1 ? t : NULL;
  pluginName = v2 ? v2->name : v1->name;
  if (!pluginName) pluginName = "(unnamed)";
  const char *(*getEnv)(const char *) = v2 ? v2->getEnv : v1->getEnv;
  if (!getEnv || !(v2 ? v2->init != NULL : v1->init != NULL)) {
    WARN("ENV/Plugin: %s (v%d) from %s has no %s: continuing with the environment as it is", pluginName, version,
         used, getEnv ? "init" : "getEnv");
    dlclose(lib);
    return;
  }
  ncclResult_t res = v2 ? v2->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX, pluginLog)
                        : v1->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX);
  if (res != ncclSuccess) {
    WARN("ENV/Plugin: %s (v%d) from %s: init failed with error %d: continuing with the environment as it is",
         pluginName, version, used, (int)res);
    dlclose(lib);
    return;
  }
  INFO(subsysInit | subsysEnv, "ENV/Plugin: Using %s (v%d) from %s", pluginName, version, used);
  pluginFinalize = v2 ? v2->finalize : v1->finalize;
  atexit(envPluginFinalize); /* the library stays open: a thread still running at exit may read */
  paramSetSource(getEnv);
}

/* Global so that the build can pull it from the plain archive (CMakeLists.txt). */
__attribute__((constructor)) void envPluginRegister(void);
void envPluginRegister(void) { paramSetSourceLoader(envPluginLoad); }
