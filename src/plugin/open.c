#define _GNU_SOURCE
#include "plugin/open.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"

/* NCCL's debug subsystem bits, as plugins pass them, in chorus's. */
static unsigned subsysFromNccl(unsigned long flags) {
  static const struct {
    unsigned long nccl;
    unsigned ours;
  } map[] = {{1, subsysInit}, {2, subsysColl},   {4, subsysP2p},      {8, subsysShm},          {16, subsysNet},
             {64, subsysTuning}, {128, subsysEnv}, {256, subsysAlloc}, {4096, subsysBootstrap}, {16384, subsysProfile}};
  unsigned out = 0;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (flags & map[i].nccl) out |= map[i].ours;
  return out ? out : subsysProfile;
}

void pluginLog(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (level < logVersion || level > logTrace) return;
  logMessage(level, subsysFromNccl(flags), file ? file : "plugin", file ? file : "plugin", line, "%s", msg);
}

static void *tryOpen(const char *tag, unsigned subsys, const char *name, int quiet) {
  int isStatic = strcasecmp(name, "STATIC_PLUGIN") == 0;
  void *h = dlopen(isStatic ? NULL : name, RTLD_NOW | RTLD_LOCAL);
  const char *why = h ? NULL : dlerror();
  if (why && !quiet) INFO(subsys, "%s/Plugin: %s: %s", tag, name, why);
  return h;
}

void *pluginOpen(const char *kind, const char *tag, unsigned subsys, const char *name, char *used, size_t usedLen) {
  char lib[512];
  if (!name[0]) {
    snprintf(lib, sizeof lib, "libnccl-%s.so", kind);
    snprintf(used, usedLen, "%s", lib);
    return tryOpen(tag, subsys, lib, 1); /* none is the usual case */
  }
  snprintf(used, usedLen, "%s", name);
  void *h = tryOpen(tag, subsys, name, 0);
  if (h) return h;
  size_t n = strlen(name);
  int isFile = strncmp(name, "lib", 3) == 0 && n >= 3 && strcmp(name + n - 3, ".so") == 0;
  if (strchr(name, '/') || isFile) return NULL;
  snprintf(lib, sizeof lib, "libnccl-%s-%s.so", kind, name);
  snprintf(used, usedLen, "%s", lib);
  return tryOpen(tag, subsys, lib, 0);
}

void *pluginLoadNewest(const char *kind, const char *tag, unsigned subsys, const char *name, const char *symbol,
                       int newest, int oldest, const char *without, int *version, const void **table, char *used,
                       size_t usedLen) {
  *version = 0;
  *table = NULL;
  snprintf(used, usedLen, "%s", name);
  if (strcasecmp(name, "none") == 0) return NULL;
  void *h = pluginOpen(kind, tag, subsys, name, used, usedLen);
  if (!h) {
    if (name[0]) WARN("%s/Plugin: could not load NCCL_%s_PLUGIN=%s: continuing %s", tag, tag, name, without);
    else INFO(subsys, "%s/Plugin: Could not find: %s", tag, used);
    return NULL;
  }
  for (int v = newest; v >= oldest && !*table; v--) {
    char sym[128];
    snprintf(sym, sizeof sym, "%s_v%d", symbol, v);
    if ((*table = dlsym(h, sym))) *version = v;
  }
  if (*table) return h;
  WARN("%s/Plugin: %s exports no %s_v%d .. _v%d: continuing %s", tag, used, symbol, newest, oldest, without);
  dlclose(h);
  return NULL;
}
