#define _GNU_SOURCE
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "core/clock.h"
#include "core/param.h"
#include "core/pathfmt.h"

int logLevelCached = -1;
static unsigned logSubsysMask;
static FILE *logFile;
static int logFilePid; /* with %p in NCCL_DEBUG_FILE, the process that opened logFile: a forked child opens its own */
static char logHost[64];
static pthread_mutex_t logInitLock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t logLock = PTHREAD_MUTEX_INITIALIZER;
static char lastError[1024];
static _Thread_local int logRank = -1;

static const struct {
  const char *name;
  unsigned bit;
} subsysNames[] = {{"INIT", subsysInit},   {"COLL", subsysColl},           {"P2P", subsysP2p},
                   {"SHM", subsysShm},     {"NET", subsysNet},             {"BOOTSTRAP", subsysBootstrap},
                   {"ENV", subsysEnv},     {"ALLOC", subsysAlloc},         {"TUNING", subsysTuning},
                   {"PROFILE", subsysProfile}, {"GRAPH", subsysGraph},     {"ALLOC_HOST", subsysAllocHost},
                   {"CALL", subsysCall},   {"PROXY", subsysProxy},         {"NVLS", subsysNvls},
                   {"REG", subsysReg},     {"RAS", subsysRas},             {"DESTROY", subsysDestroy},
                   {"ALL", subsysAll}};

static char subsysUnknown[64]; /* a name NCCL_DEBUG_SUBSYS had that is none (logParams says so) */

/* s without the blanks around it, into buf. */
static char *trimInto(char *buf, size_t len, const char *s) {
  while (*s == ' ' || *s == '	') s++;
  snprintf(buf, len, "%s", s);
  size_t n = strlen(buf);
  while (n > 0 && (buf[n - 1] == ' ' || buf[n - 1] == '	')) buf[--n] = 0;
  return buf;
}

/* NCCL_DEBUG_SUBSYS as NCCL 2.30 parses it: names separated by commas,
 * blanks around them ignored, a leading ^ inverting the whole list; a name
 * that is none makes it the default. */
static unsigned parseSubsys(const char *s) {
  char buf[256];
  s = trimInto(buf, sizeof buf, s);
  int invert = *s == '^';
  unsigned mask = 0;
  char *save;
  for (char *tok = strtok_r(buf + invert, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    char name[64];
    trimInto(name, sizeof name, tok);
    size_t i = 0, count = sizeof subsysNames / sizeof subsysNames[0];
    while (i < count && strcasecmp(name, subsysNames[i].name) != 0) i++;
    if (i == count) {
      snprintf(subsysUnknown, sizeof subsysUnknown, "%s", name);
      return subsysInit | subsysBootstrap | subsysEnv;
    }
    mask |= subsysNames[i].bit;
  }
  return invert ? ~mask : mask;
}

/* NCCL_DEBUG_FILE with %p: each process writes its own file. */
static int logFilePerProcess(const char *pattern) {
  for (const char *p = pattern; *p; p++)
    if (p[0] == '%' && p[1]) {
      if (p[1] == 'p') return 1;
      p++; /* %% and %h */
    }
  return 0;
}

/* NCCL_DEBUG_FILE: %h is the host name, %p the pid. */
static FILE *openLogFile(const char *pattern) {
  char path[4096];
  pathExpand(pattern, -1, path, sizeof path);
  FILE *f = fopen(path, "w");
  if (f) setvbuf(f, NULL, _IOLBF, 0);
  return f;
}

static int debugUnknown; /* NCCL_DEBUG named no level (logParams says so) */
static uint64_t logEpochNs; /* TRACE lines give milliseconds since logging started */

static void logInit(void) {
  char lvlBuf[64];
  const char *lvl = trimInto(lvlBuf, sizeof lvlBuf, paramStr(paramDebug));
  int level = logNone;
  if (strcasecmp(lvl, "VERSION") == 0) level = logVersion;
  else if (strcasecmp(lvl, "WARN") == 0) level = logWarn;
  else if (strcasecmp(lvl, "INFO") == 0) level = logInfo;
  else if (strcasecmp(lvl, "ABORT") == 0) level = logAbort;
  else if (strcasecmp(lvl, "TRACE") == 0) level = logTrace;
  else if (lvl[0] && strcasecmp(lvl, "NONE") != 0) debugUnknown = 1;
  subsysUnknown[0] = 0;
  logSubsysMask = parseSubsys(paramStr(paramDebugSubsys));
  logEpochNs = clockNs();
  gethostname(logHost, sizeof logHost);
  logHost[sizeof logHost - 1] = 0;
  char *dot = strchr(logHost, '.');
  if (dot) *dot = 0;
  logFile = stdout;
  const char *file = paramStr(paramDebugFile);
  if (file[0] && level > logVersion) {
    FILE *f = openLogFile(file);
    if (f) logFile = f;
    if (f && logFilePerProcess(file)) logFilePid = getpid();
  }
  __atomic_store_n(&logLevelCached, level, __ATOMIC_RELEASE);
}

/* A fork while another thread writes a line (a bootstrap root's WARN about
 * a stranger, say) must not leave the child's locks held: its first line
 * would wait forever (a rank forked beside its parent's root, at its
 * version line). Every fork takes them first. */
static void logForkPrepare(void) {
  pthread_mutex_lock(&logInitLock);
  pthread_mutex_lock(&logLock);
}
static void logForkRelease(void) {
  pthread_mutex_unlock(&logLock);
  pthread_mutex_unlock(&logInitLock);
}
static pthread_once_t logForkOnce = PTHREAD_ONCE_INIT;
static void logForkRegister(void) { pthread_atfork(logForkPrepare, logForkRelease, logForkRelease); }

/* Starts logging from NCCL_DEBUG* unless it has started (and not been
 * reset since: logResetInit). */
static void logEnsureInit(void) {
  pthread_once(&logForkOnce, logForkRegister);
  if (__atomic_load_n(&logLevelCached, __ATOMIC_ACQUIRE) >= 0) return;
  /* The parameters' first reading loads an environment plugin, which logs:
   * done here, outside the lock that logInit holds while it reads them. */
  (void)paramStr(paramDebug);
  pthread_mutex_lock(&logInitLock);
  if (__atomic_load_n(&logLevelCached, __ATOMIC_ACQUIRE) < 0) logInit();
  pthread_mutex_unlock(&logInitLock);
}

void logResetInit(void) {
  pthread_mutex_lock(&logInitLock);
  pthread_mutex_lock(&logLock); /* no line is being written to the file closed here */
  if (logFile && logFile != stdout && (!logFilePid || logFilePid == getpid())) fclose(logFile);
  logFilePid = 0;
  logFile = stdout;
  debugUnknown = 0;
  __atomic_store_n(&logLevelCached, -1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&logLock);
  pthread_mutex_unlock(&logInitLock);
}

void logSetRank(int rank) { logRank = rank; }

int logGetRank(void) { return logRank; }

int logLevelNow(void) {
  logEnsureInit();
  return logLevelCached;
}

static void logParamsOnce(void) {
  if (debugUnknown) { /* said even though logging is off: that is what went wrong */
    WARN("NCCL_DEBUG=%s is not a level (VERSION, WARN, INFO, ABORT, TRACE): logging stays off", paramStr(paramDebug));
    fprintf(stderr, "%s NCCL WARN NCCL_DEBUG=%s is not a level (VERSION, WARN, INFO, ABORT, TRACE): logging stays off\n",
            logHost, paramStr(paramDebug));
  }
  if (subsysUnknown[0])
    WARN("NCCL_DEBUG_SUBSYS=%s: '%s' is no subsystem (INIT, COLL, P2P, SHM, NET, GRAPH, TUNING, ENV, ALLOC, "
         "ALLOC_HOST, CALL, PROXY, NVLS, BOOTSTRAP, REG, PROFILE, RAS, DESTROY, ALL): using the default %s",
         paramStr(paramDebugSubsys), subsysUnknown, paramDefault(paramDebugSubsys));
  for (int i = 0; i < paramCount; i++) {
    const char *bad = paramRejected((enum paramId)i);
    if (bad) WARN("%s=%s is not a number: using the default %s", paramName((enum paramId)i), bad,
                  paramDefault((enum paramId)i));
    else if (paramFromEnv((enum paramId)i))
      INFO(subsysEnv, "%s set by environment to %s.", paramName((enum paramId)i),
           paramHidden((enum paramId)i) ? "(a value not logged)" : paramStr((enum paramId)i));
  }
}

void logParams(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  logEnsureInit();
  pthread_once(&once, logParamsOnce);
}

/* The process's last WARN, copied under the lock: the buffer itself, read
 * while another thread wrote a WARN into it, read empty or mixed (2
 * threads, one writing WARNs: 117259 empty and 2077 mixed reads of
 * 2000000). */
static void copyProcessLastError(char *buf, size_t len) {
  pthread_mutex_lock(&logLock);
  snprintf(buf, len, "%s", lastError);
  pthread_mutex_unlock(&logLock);
}

/* ncclGetLastError's text: this thread's own copy. */
const char *logLastError(void) {
  static _Thread_local char copy[sizeof lastError];
  copyProcessLastError(copy, sizeof copy);
  return copy;
}

/* The last WARN of this thread: the one that explains what this thread
 * just saw fail (another thread's WARN, a socket helper's about another
 * peer, say, may come in between). */
static _Thread_local char threadLastError[1024];

void logStartThreadErrors(void) { threadLastError[0] = 0; }

const char *logThreadLastError(void) { return threadLastError; }

void logSetLastError(const char *msg) {
  snprintf(threadLastError, sizeof threadLastError, "%s", msg);
  pthread_mutex_lock(&logLock);
  snprintf(lastError, sizeof lastError, "%s", msg);
  pthread_mutex_unlock(&logLock);
}

void logCopyLastError(char *buf, size_t len) {
  if (threadLastError[0]) {
    snprintf(buf, len, "%s", threadLastError);
    return;
  }
  copyProcessLastError(buf, len);
}

/* A source file's name relative to src/ ("bootstrap/bootstrap.c"), as
 * NCCL's logs name theirs: never the build machine's path. */
static const char *sourceName(const char *file) {
  const char *rel = NULL;
  for (const char *p = strstr(file, "src/"); p; p = strstr(p + 1, "src/")) rel = p + 4;
  if (rel) return rel;
  const char *slash = strrchr(file, '/');
  return slash ? slash + 1 : file;
}

static void logEmit(int level, unsigned subsys, const char *file, const char *func, int line, const char *msg,
                    int record);

/* Whether NCCL_DEBUG and NCCL_DEBUG_SUBSYS let a message of level and
 * subsys through (WARN and VERSION lines belong to every subsystem). */
static int logPrinted(int level, unsigned subsys) {
  return logLevelCached >= level && (level == logWarn || level == logVersion || (subsys & logSubsysMask));
}

/* record: a WARN becomes the last error (ncclGetLastError). */
static void logVEmit(int level, unsigned subsys, const char *file, const char *func, int line, int record,
                     const char *fmt, va_list ap) {
  logEnsureInit();
  /* Dropped before it is formatted: NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT
   * formatted every call's COLL line for nothing (0.45 us of a 2-rank
   * 8-byte AllReduce's 0.75). A WARN that records is always formatted
   * (ncclGetLastError). */
  if (!(level == logWarn && record) && !logPrinted(level, subsys)) return;
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  logEmit(level, subsys, file, func, line, msg, record);
}

void logMessage(int level, unsigned subsys, const char *file, const char *func, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  logVEmit(level, subsys, file, func, line, 1, fmt, ap);
  va_end(ap);
}

void logReport(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  logVEmit(logWarn, subsysAll, file, "", line, 0, fmt, ap);
  va_end(ap);
}

static void logEmit(int level, unsigned subsys, const char *file, const char *func, int line, const char *msg,
                    int record) {
  if (level == logWarn && record) logSetLastError(msg);
  if (!logPrinted(level, subsys)) return;
  static const char *names[] = {"", "VERSION", "WARN", "INFO", "ABORT", "TRACE"};
  char head[128];
  snprintf(head, sizeof head, "%s:%d:%d [%d]", logHost, (int)getpid(), (int)syscall(SYS_gettid),
           logRank >= 0 ? logRank : 0);
  pthread_mutex_lock(&logLock);
  /* %p must name this process: a forked child opens its own file. Without
   * %p it keeps the parent's, whose offset all of them share, so that every
   * line lands after the last (reopening it would truncate the others'). */
  if (logFilePid && logFilePid != getpid()) {
    FILE *f = openLogFile(paramStr(paramDebugFile));
    if (f) logFile = f;
    logFilePid = getpid();
  }
  if (level == logWarn)
    fprintf(logFile, "%s %s:%d NCCL WARN %s\n", head, sourceName(file), line, msg);
  else if (level == logVersion)
    fprintf(logFile, "%s\n", msg);
  else if (level == logTrace)
    fprintf(logFile, "%s %f %s:%d NCCL TRACE %s\n", head, (double)(clockNs() - logEpochNs) / 1e6, func, line, msg);
  else
    fprintf(logFile, "%s NCCL %s %s\n", head, names[level], msg);
  fflush(logFile);
  pthread_mutex_unlock(&logLock);
}
