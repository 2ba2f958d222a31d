#define _GNU_SOURCE
#include "core/param.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

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

/* What the environment said at one reading. Every communicator's creation
 * reads it again (paramReload), so a variable set after an earlier NCCL
 * call (in a child forked after ncclGetUniqueId, say) is seen; readers get
 * an immutable snapshot, and a snapshot that is replaced is kept (strings
 * from it may still be in use), which costs memory only when the
 * environment really changed. */
struct paramValues {
  char *str[paramCount];
  int64_t num[paramCount];
  char set[paramCount];
  char *bad[paramCount];
  struct paramValues *older;
};

static struct paramValues *current;
static pthread_mutex_t reloadLock = PTHREAD_MUTEX_INITIALIZER;

static void (*sourceLoader)(void);
static pthread_once_t sourceOnce = PTHREAD_ONCE_INIT;
static const char *(*source)(const char *name); /* NULL: getenv */

/* A fork while another thread reads (an environment plugin's getEnv may
 * take a while) must not leave the child's lock held: its first
 * communicator would wait forever. Every fork takes it first, as the log's
 * locks. */
static void reloadForkPrepare(void) { pthread_mutex_lock(&reloadLock); }
static void reloadForkRelease(void) { pthread_mutex_unlock(&reloadLock); }
__attribute__((constructor)) static void reloadForkRegister(void) {
  pthread_atfork(reloadForkPrepare, reloadForkRelease, reloadForkRelease);
}

void paramSetSourceLoader(void (*loader)(void)) { sourceLoader = loader; }

void paramSetSource(const char *(*get)(const char *name)) { __atomic_store_n(&source, get, __ATOMIC_RELEASE); }

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

static struct paramValues *paramRead(void) {
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
  struct paramValues *p = calloc(1, sizeof *p);
  if (p == NULL) abort(); /* at start-up, with no way to report it */
  const char *(*get)(const char *) = __atomic_load_n(&source, __ATOMIC_ACQUIRE);
  for (int i = 0; i < paramCount; i++) {
    /* NCCL_ENV_PLUGIN names the source: never asked of it, as NCCL reads it */
    const char *v = get && i != paramEnvPlugin ? get(paramTable[i].env) : getenv(paramTable[i].env);
    int fromEnv = v && v[0];
    if (!fromEnv) v = paramTable[i].def;
    p->set[i] = (char)fromEnv;
    p->str[i] = strdup(v);
    if (!paramTable[i].isStr) {
      char *end;
      errno = 0;
      long long x = strtoll(v, &end, 0);
      if (errno || end == v || *end) {
        /* Not logged here (the logger itself reads parameters): logParams does. */
        x = strtoll(paramTable[i].def, NULL, 0);
        p->bad[i] = p->str[i];
        p->str[i] = strdup(paramTable[i].def);
      }
      p->num[i] = x;
    }
  }
  return p;
}

static void paramFree(struct paramValues *p) {
  for (int i = 0; i < paramCount; i++) {
    free(p->str[i]);
    free(p->bad[i]);
  }
  free(p);
}

static int paramSame(const struct paramValues *a, const struct paramValues *b) {
  for (int i = 0; i < paramCount; i++)
    if (a->set[i] != b->set[i] || strcmp(a->str[i], b->str[i]) != 0 || (a->bad[i] == NULL) != (b->bad[i] == NULL))
      return 0;
  return 1;
}

/* Whether the log's own variables differ between two readings. */
static int logParamsDiffer(const struct paramValues *a, const struct paramValues *b) {
  static const enum paramId ids[] = {paramDebug, paramDebugSubsys, paramDebugFile};
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
    if (strcmp(a->str[ids[i]], b->str[ids[i]]) != 0) return 1;
  return 0;
}

/* One reading, kept unless it is the same as the last. */
static void readAgain(void) {
  pthread_mutex_lock(&reloadLock);
  struct paramValues *fresh = paramRead(), *old = current;
  if (old && paramSame(old, fresh)) {
    paramFree(fresh);
  } else {
    fresh->older = old;
    __atomic_store_n(&current, fresh, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&reloadLock);
}

/* Once per process. The reading through the source, and the log's restart,
 * are done here, so that every thread that waited for the once finds both
 * done; the restart compares with the plain environment's reading (another
 * thread's reading may have gone through the source meanwhile). Snapshots
 * are never freed, so the plain one can be held. */
static void loadSource(void) {
  const struct paramValues *plain = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
  if (sourceLoader) sourceLoader();
  if (!__atomic_load_n(&source, __ATOMIC_ACQUIRE)) return;
  readAgain();
  if (logParamsDiffer(plain, __atomic_load_n(&current, __ATOMIC_ACQUIRE))) logResetInit();
}

void paramReload(void) {
  /* The first reading is the environment's as it is, which the source's
   * loader logs with; a second one asks the source it installed. */
  if (!__atomic_load_n(&current, __ATOMIC_ACQUIRE)) readAgain();
  pthread_once(&sourceOnce, loadSource);
  readAgain();
}

static const struct paramValues *values(void) {
  const struct paramValues *p = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
  if (p) return p;
  pthread_mutex_lock(&reloadLock);
  int first = current == NULL;
  pthread_mutex_unlock(&reloadLock);
  if (first) paramReload();
  return __atomic_load_n(&current, __ATOMIC_ACQUIRE);
}

int64_t paramInt(enum paramId id) { return values()->num[id]; }

const char *paramStr(enum paramId id) { return values()->str[id]; }

const char *paramName(enum paramId id) { return paramTable[id].env; }
const char *paramDefault(enum paramId id) { return paramTable[id].def; }

int paramFromEnv(enum paramId id) { return values()->set[id]; }

const char *paramRejected(enum paramId id) { return values()->bad[id]; }

int paramHidden(enum paramId id) { return paramTable[id].isStr == 2; }

int paramIsNumber(enum paramId id) { return paramTable[id].isStr == 0; }

void paramPrintAll(FILE *out) {
  const struct paramValues *p = values();
  for (int i = 0; i < paramCount; i++)
    fprintf(out, "%-28s = %-12s (default %s) %s\n", paramTable[i].env,
            paramHidden((enum paramId)i) && p->set[i] ? "(set)" : p->str[i], paramTable[i].def[0] ? paramTable[i].def : "unset", paramTable[i].doc);
}
