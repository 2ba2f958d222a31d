/* What every entry point shares and that calls nothing else of the api
 * layer: versions, error strings, the last error, the check that a
 * communicator handle is one, and the set of live communicators. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/comm.h"
#include "chorus.h"
#include "core/log.h"
#include "core/param.h"

static int commIsOne(const struct ncclComm *comm) {
  return comm->startMagic == COMM_MAGIC && comm->endMagic == COMM_MAGIC;
}

ncclResult_t commCheck(const struct ncclComm *comm, const char *call) {
  if (comm == NULL) {
    WARN("%s : comm argument is NULL", call);
    return ncclInvalidArgument;
  }
  if (!commIsOne(comm)) {
    WARN("%s : comm %p is corrupted or has been destroyed", call, (const void *)comm);
    return ncclInvalidArgument;
  }
  if (comm->inherited) {
    WARN("%s : comm %p (rank %d of %d) was made before this process forked: a communicator works only in the "
         "process that made it, whose threads and connections it uses (CUDA refuses a forked child every call); "
         "make a new one here", call, (const void *)comm, comm->rank, comm->nranks);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

int commForget(const struct ncclComm *comm, const char *call) {
  if (!comm || !commIsOne(comm) || !comm->inherited) return 0;
  INFO(subsysInit, "%s : comm %p (rank %d of %d) was made before this process forked: forgotten here, left to the "
       "process that made it", call, (const void *)comm, comm->rank, comm->nranks);
  return 1;
}

NCCL_API(ncclResult_t, ncclGetVersion, int *version) {
  if (version == NULL) {
    WARN("ncclGetVersion : version argument is NULL");
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t chorusGetVersion(int *version) {
  if (version == NULL) {
    WARN("chorusGetVersion : version argument is NULL");
    return ncclInvalidArgument;
  }
  *version = CHORUS_VERSION_CODE;
  return ncclSuccess;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "timeout";
    default: return "unknown result code";
  }
}

/* The communicators not yet freed, so that a call that takes any pointer
 * (ncclGetLastError, which NCCL lets take a destroyed one) reads only
 * those. Added at allocation, removed before the free; a process has few. */
static pthread_mutex_t liveLock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm **live;
static int nlive, liveCap;

/* A fork while another thread holds liveLock (reading a failure's text)
 * must not leave the child's copy held: every fork takes it first. The
 * child's copies of the communicators are inherited (commCheck): run
 * there, a call would run the parent's queued work or share its FIFOs
 * (a forked child's AllReduce once took the parent's place, which then
 * returned success with wrong data) or wait for threads the child does
 * not have. */
static void liveForkPrepare(void) { pthread_mutex_lock(&liveLock); }
static void liveForkParent(void) { pthread_mutex_unlock(&liveLock); }
static void liveForkChild(void) {
  for (int i = 0; i < nlive; i++) live[i]->inherited = 1;
  nlive = 0; /* not this process's to free */
  pthread_mutex_unlock(&liveLock);
}
static pthread_once_t liveForkOnce = PTHREAD_ONCE_INIT;
static void liveForkRegister(void) { pthread_atfork(liveForkPrepare, liveForkParent, liveForkChild); }
static void liveTake(void) {
  pthread_once(&liveForkOnce, liveForkRegister);
  pthread_mutex_lock(&liveLock);
}

int commLiveAdd(struct ncclComm *comm) {
  liveTake();
  int ok = 1;
  if (nlive == liveCap) {
    int cap = liveCap ? 2 * liveCap : 16;
    struct ncclComm **l = realloc(live, sizeof *l * (size_t)cap);
    if (l) {
      live = l;
      liveCap = cap;
    } else {
      ok = 0;
    }
  }
  if (ok) live[nlive++] = comm;
  pthread_mutex_unlock(&liveLock);
  return ok;
}

void commLiveRemove(struct ncclComm *comm) {
  liveTake();
  for (int i = 0; i < nlive; i++)
    if (live[i] == comm) {
      live[i] = live[--nlive];
      break;
    }
  pthread_mutex_unlock(&liveLock);
}

void commSetFailText(struct ncclComm *comm, const char *text) {
  char warn[sizeof comm->failText];
  if (!text) { /* copied first: the log's lock is not taken under liveLock */
    logCopyLastError(warn, sizeof warn);
    text = warn;
  }
  liveTake();
  snprintf(comm->failText, sizeof comm->failText, "%s", text);
  pthread_mutex_unlock(&liveLock);
}

void commCopyFailText(const struct ncclComm *comm, char *buf, size_t len) {
  liveTake();
  snprintf(buf, len, "%s", comm->failText);
  pthread_mutex_unlock(&liveLock);
}

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm) {
  /* NCCL gives the process's last WARN, whatever comm is. A communicator
   * that has failed gives the WARN that explained its failure instead, so
   * that a process with several communicators and threads (a framework's
   * process groups) gets its own: copied here, since the caller may free
   * the communicator while it reads the text. */
  static _Thread_local char text[sizeof comm->failText];
  int found = 0;
  liveTake();
  for (int i = 0; comm && i < nlive && !found; i++)
    if (live[i] == comm && __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE) != ncclSuccess && comm->failText[0]) {
      snprintf(text, sizeof text, "%s", comm->failText);
      found = 1;
    }
  pthread_mutex_unlock(&liveLock);
  return found ? text : logLastError();
}

/* NCCL's deprecated (and Linux-only) reset of its logging: the next line
 * reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE from the
 * environment as it is then. */
NCCL_API(void, ncclResetDebugInit, void) {
  paramReload();
  logResetInit();
}
