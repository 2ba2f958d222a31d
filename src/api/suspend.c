/* ncclCommSuspend / ncclCommResume / ncclCommMemStats (NCCL 2.29-2.30):
 * NCCL frees a suspended communicator's dynamic GPU memory and refuses its
 * operations until it is resumed. chorus holds no GPU memory (its FIFOs
 * are host memory shared with the peers, which stay mapped), so a
 * suspension releases nothing; it waits for what is in flight and makes
 * every operation ncclInvalidUsage until ncclCommResume, and the memory
 * statistics say what is true: no GPU memory. */
#include "api/api.h"
#include "api/comm.h"
#include "core/err.h"
#include "core/log.h"

NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
  CHECK(commCheck(comm, "ncclCommSuspend"));
  /* As NCCL's: only NCCL_SUSPEND_MEM does anything (any value with it
   * suspends, -1 too), and flags without it are a successful no-op. */
  if (!(flags & NCCL_SUSPEND_MEM)) return ncclSuccess;
  CHECK(commInitDone(comm, "ncclCommSuspend"));
  if (__atomic_load_n(&comm->suspended, __ATOMIC_ACQUIRE)) {
    WARN("ncclCommSuspend : rank %d: the communicator is already suspended", comm->rank);
    return ncclInvalidUsage;
  }
  commWaitIdle(comm);
  __atomic_store_n(&comm->suspended, 1, __ATOMIC_RELEASE);
  INFO(subsysInit, "comm %p rank %d suspended (no GPU memory to release)", (void *)comm, comm->rank);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
  CHECK(commCheck(comm, "ncclCommResume"));
  CHECK(commInitDone(comm, "ncclCommResume")); /* as NCCL's ncclCommEnsureReady */
  if (!__atomic_load_n(&comm->suspended, __ATOMIC_ACQUIRE)) {
    WARN("ncclCommResume : rank %d: the communicator is not suspended", comm->rank);
    return ncclInvalidUsage;
  }
  __atomic_store_n(&comm->suspended, 0, __ATOMIC_RELEASE);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value) {
  CHECK(commCheck(comm, "ncclCommMemStats"));
  CHECK(commInitDone(comm, "ncclCommMemStats")); /* as NCCL's ncclCommEnsureReady */
  if (value == NULL) {
    WARN("ncclCommMemStats : value argument is NULL");
    return ncclInvalidArgument;
  }
  switch (stat) {
    case ncclStatGpuMemSuspended: *value = (uint64_t)__atomic_load_n(&comm->suspended, __ATOMIC_ACQUIRE); break;
    case ncclStatGpuMemSuspend: /* bytes of GPU memory: chorus allocates none */
    case ncclStatGpuMemPersist:
    case ncclStatGpuMemTotal: *value = 0; break;
    default:
      WARN("ncclCommMemStats : invalid stat %d", (int)stat);
      return ncclInvalidArgument;
  }
  return ncclSuccess;
}
