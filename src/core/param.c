#define _GNU_SOURCE
#include "core/param.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>


struct paramDesc {
  const char *env;
  int isStr;
  const char *def;
  const char *doc;
};

static const struct paramDesc paramTable[paramCount] = {
#define CHORUS_PARAM_DESC(id, env, isStr, def, doc) {env, isStr, def, doc},
    CHORUS_PARAM_TABLE(CHORUS_PARAM_DESC)
#undef CHORUS_PARAM_DESC
};

static pthread_once_t paramOnce = PTHREAD_ONCE_INIT;
static char *paramStrValue[paramCount];
static int64_t paramIntValue[paramCount];
static char paramSet[paramCount];
static char *paramBad[paramCount];

/* Applies "NAME=value" lines without overriding what is already set, so the
 * environment wins over the files (as NCCL does it). */
static void paramLoadFile(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    if (*s == '#' || *s == '\n' || *s == 0) continue;
    char *eq = strchr(s, '=');
    if (eq == NULL) continue;
    *eq = 0;
    char *val = eq + 1;
    while (*val == ' ' || *val == '\t') val++;
    size_t n = strlen(val);
    while (n > 0 && (val[n - 1] == '\n' || val[n - 1] == '\r' || val[n - 1] == ' ')) val[--n] = 0;
    char *end = eq;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
    if (*s) setenv(s, val, 0);
  }
  fclose(f);
}

static void paramLoad(void) {
  const char *conf = getenv("NCCL_CONF_FILE");
  if (conf && conf[0]) {
    paramLoadFile(conf);
  } else {
    const char *home = getenv("HOME");
    if (home) {
      char path[4096];
      snprintf(path, sizeof path, "%s/.nccl.conf", home);
      paramLoadFile(path);
    }
  }
  paramLoadFile("/etc/nccl.conf");
  for (int i = 0; i < paramCount; i++) {
    const char *v = getenv(paramTable[i].env);
    int fromEnv = v && v[0];
    if (!fromEnv) v = paramTable[i].def;
    paramSet[i] = (char)fromEnv;
    paramStrValue[i] = strdup(v);
    if (!paramTable[i].isStr) {
      char *end;
      errno = 0;
      long long x = strtoll(v, &end, 0);
      if (errno || end == v || *end) {
        /* Not logged here (the logger itself reads parameters): logParams does. */
        x = strtoll(paramTable[i].def, NULL, 0);
        paramBad[i] = paramStrValue[i];
        paramStrValue[i] = strdup(paramTable[i].def);
      }
      paramIntValue[i] = x;
    }
  }
}

int64_t paramInt(enum paramId id) {
  pthread_once(&paramOnce, paramLoad);
  return paramIntValue[id];
}

const char *paramStr(enum paramId id) {
  pthread_once(&paramOnce, paramLoad);
  return paramStrValue[id];
}

const char *paramName(enum paramId id) { return paramTable[id].env; }
const char *paramDefault(enum paramId id) { return paramTable[id].def; }

int paramFromEnv(enum paramId id) {
  pthread_once(&paramOnce, paramLoad);
  return paramSet[id];
}

const char *paramRejected(enum paramId id) {
  pthread_once(&paramOnce, paramLoad);
  return paramBad[id];
}

void paramPrintAll(FILE *out) {
  pthread_once(&paramOnce, paramLoad);
  for (int i = 0; i < paramCount; i++)
    fprintf(out, "%-28s = %-12s (default %s) %s\n", paramTable[i].env, paramStrValue[i],
            paramTable[i].def[0] ? paramTable[i].def : "unset", paramTable[i].doc);
}
