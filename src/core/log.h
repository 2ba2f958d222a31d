/* NCCL-shaped logging: "host:pid:tid [rank] NCCL INFO ...", levels and
 * subsystems from NCCL_DEBUG / NCCL_DEBUG_SUBSYS, output to NCCL_DEBUG_FILE. */
#ifndef CHORUS_CORE_LOG_H
#define CHORUS_CORE_LOG_H
#include <stddef.h>
#include <stdint.h>

enum logLevel { logNone = 0, logVersion = 1, logWarn = 2, logInfo = 3, logAbort = 4, logTrace = 5 };
enum logSubsys {
  subsysInit = 1 << 0,
  subsysColl = 1 << 1,
  subsysP2p = 1 << 2,
  subsysShm = 1 << 3,
  subsysNet = 1 << 4,
  subsysBootstrap = 1 << 5,
  subsysEnv = 1 << 6,
  subsysAlloc = 1 << 7,
  subsysTuning = 1 << 8,
  subsysProfile = 1 << 9,
  /* NCCL's others, which chorus logs nothing under: accepted, as NCCL does */
  subsysGraph = 1 << 10,
  subsysAllocHost = 1 << 11,
  subsysCall = 1 << 12,
  subsysProxy = 1 << 13,
  subsysNvls = 1 << 14,
  subsysReg = 1 << 15,
  subsysRas = 1 << 16,
  subsysDestroy = 1 << 17,
  subsysAll = ~0
};

extern int logLevelCached; /* -1 until the first call reads NCCL_DEBUG */
/* Lines as NCCL writes them: "host:pid:tid [rank] NCCL INFO msg",
 * "host:pid:tid [rank] file:line NCCL WARN msg", "host:pid:tid [rank] ms
 * func:line NCCL TRACE msg", and a VERSION line alone; [rank] is the
 * thread's communicator rank (NCCL's is the thread's CUDA device), 0 on a
 * thread with none. */
void logMessage(int level, unsigned subsys, const char *file, const char *func, int line, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Once per process: a WARN for each variable whose value was rejected (and
 * the default used), an ENV line for each one set ("NCCL_BUFFSIZE set by
 * environment to 65536.", as NCCL logs them). */
void logParams(void);
/* A WARN-level line that is a report, not an error: ncclGetLastError and
 * the thread's last WARN keep what they said (a flight recorder's dump
 * follows the WARN that explains a failure). */
void logReport(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define REPORT(...) logReport(__FILE__, __LINE__, __VA_ARGS__)
/* ncclResetDebugInit: the next line reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and
 * NCCL_DEBUG_FILE again (as the parameters hold them: paramReload first). */
void logResetInit(void);
/* NCCL_DEBUG's level (logging started if it was not). */
int logLevelNow(void);
/* The rank shown in brackets on this thread's log lines (-1: none). */
void logSetRank(int rank);
/* The rank this thread's lines show (-1: none, shown as 0). */
int logGetRank(void);
/* Text of the last WARN (ncclGetLastError). */
const char *logLastError(void);
/* A copy of this thread's last WARN since logStartThreadErrors (the
 * process's, if it has none): what a communicator keeps as the explanation
 * of its failure. */
void logCopyLastError(char *buf, size_t len);
/* This thread's own last WARN since logStartThreadErrors ("" if none). */
const char *logThreadLastError(void);
/* Makes msg the last error of this thread and of the process, as a WARN
 * would, without logging it again (a WARN other threads logged already). */
void logSetLastError(const char *msg);
/* Forgets this thread's earlier WARNs (a launch starts). */
void logStartThreadErrors(void);

#define CHORUS_LOG(level, subsys, ...)                                 \
  do {                                                                 \
    if (logLevelCached < 0 || logLevelCached >= (level))               \
      logMessage((level), (subsys), __FILE__, __func__, __LINE__, __VA_ARGS__); \
  } while (0)
/* WARN always records the text for ncclGetLastError, so it always calls in. */
#define WARN(...) logMessage(logWarn, subsysAll, __FILE__, __func__, __LINE__, __VA_ARGS__)
#define INFO(subsys, ...) CHORUS_LOG(logInfo, (subsys), __VA_ARGS__)
#define TRACE(subsys, ...) CHORUS_LOG(logTrace, (subsys), __VA_ARGS__)

#endif
