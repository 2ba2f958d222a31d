/* An environment plugin for tests/envplugin.sh, built as NCCL's env
 * plugins are (ENV_VERSION 2 or 1: the table it exports). It answers for a
 * variable NAME with $ENVPLUGIN_NAME where that is set (so a test can give
 * chorus values its environment does not have), else with getenv(NAME); it
 * answers "" for a variable named in $ENVPLUGIN_HIDE (one name: set in
 * the environment, unset for chorus). Its init fails where
 * $ENVPLUGIN_FAIL_INIT is set. It writes to $ENVPLUGIN_LOG: at init the
 * version it was told, the logger's presence, each name it is asked for,
 * and finalize. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin/env_abi.h"
#include "plugin_note.h"

#ifndef ENV_VERSION
#define ENV_VERSION 2
#endif

#define note(...) pluginNote("ENVPLUGIN_LOG", ENV_VERSION, __VA_ARGS__)

static ncclResult_t initCommon(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix, int logger) {
  note("init %d.%d.%d suffix '%s' logger %d", major, minor, patch, suffix ? suffix : "(null)", logger);
  return getenv("ENVPLUGIN_FAIL_INIT") ? ncclInvalidUsage : ncclSuccess;
}

static ncclResult_t finalize(void) {
  note("finalize");
  return ncclSuccess;
}

static const char *getEnv(const char *name) {
  note("getEnv %s", name);
  const char *hide = getenv("ENVPLUGIN_HIDE");
  if (hide && strcmp(hide, name) == 0) return NULL;
  char key[256];
  snprintf(key, sizeof key, "ENVPLUGIN_%s", name);
  const char *v = getenv(key);
  return v ? v : getenv(name);
}

#if ENV_VERSION == 2
static ncclResult_t init(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix, envAbiLogger log) {
  if (log) log(3 /* NCCL_LOG_INFO */, 1 /* NCCL_INIT */, __FILE__, __LINE__, "test env plugin: init by its logger");
  return initCommon(major, minor, patch, suffix, log != NULL);
}
const struct envAbiV2 ncclEnvPlugin_v2 = {"chorustest2", init, finalize, getEnv};
#else
static ncclResult_t init(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix) {
  return initCommon(major, minor, patch, suffix, 0);
}
const struct envAbiV1 ncclEnvPlugin_v1 = {"chorustest1", init, finalize, getEnv};
#endif
