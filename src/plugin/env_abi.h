/* NCCL's environment plugin interface (ncclEnv_v2 and v1, NCCL 2.30's
 * plugins/env), declared from its documented layout: what a plugin built
 * against NCCL's env.h finds when chorus loads it. */
#ifndef CHORUS_PLUGIN_ENV_ABI_H
#define CHORUS_PLUGIN_ENV_ABI_H
#include <stdint.h>

#include "nccl.h"

typedef void (*envAbiLogger)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);

/* ncclEnv_v2_t: init gets a logger. */
struct envAbiV2 {
  const char *name;
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch, const char *suffix,
                       envAbiLogger logFunction);
  ncclResult_t (*finalize)(void);
  /* The value of name, or NULL: unset. The string stays valid until the
   * next getEnv of the same name or finalize. */
  const char *(*getEnv)(const char *name);
};

/* ncclEnv_v1_t */
struct envAbiV1 {
  const char *name;
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch, const char *suffix);
  ncclResult_t (*finalize)(void);
  const char *(*getEnv)(const char *name);
};

#endif
