/* What every entry point shares and that calls nothing else of the api
 * layer: versions, error strings, the last error, and the check that a
 * communicator handle is one. */
#include "api/api.h"
#include "api/comm.h"
#include "chorus.h"
#include "core/log.h"
#include "core/param.h"

ncclResult_t commCheck(const struct ncclComm *comm, const char *call) {
  if (comm == NULL) {
    WARN("%s : comm argument is NULL", call);
    return ncclInvalidArgument;
  }
  if (comm->startMagic != COMM_MAGIC || comm->endMagic != COMM_MAGIC) {
    WARN("%s : comm %p is corrupted or has been destroyed", call, (const void *)comm);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
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

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm) {
  /* NCCL gives the process's last WARN, whatever comm is. A communicator
   * that has failed gives the WARN that explained its failure instead, so
   * that a process with several communicators and threads (a framework's
   * process groups) gets its own. */
  if (comm && comm->startMagic == COMM_MAGIC && comm->endMagic == COMM_MAGIC &&
      __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE) != ncclSuccess && comm->failText[0])
    return comm->failText;
  return logLastError();
}

/* NCCL's deprecated (and Linux-only) reset of its logging: the next line
 * reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE from the
 * environment as it is then. */
NCCL_API(void, ncclResetDebugInit, void) {
  paramReload();
  logResetInit();
}
