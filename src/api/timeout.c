/* Per-communicator timeouts (chorusCommSetTimeout): a framework that gives
 * each group of ranks its own timeout (torch.distributed's process groups)
 * sets it here instead of the process-wide CHORUS_TIMEOUT. */
#include "api/api.h"
#include "api/comm.h"
#include "chorus.h"
#include "core/err.h"
#include "core/log.h"
#include "core/wait.h"

uint64_t commTimeoutNs(const struct ncclComm *comm) {
  int64_t ms = __atomic_load_n(&comm->timeoutMs, __ATOMIC_RELAXED);
  return ms > 0 ? (uint64_t)ms * 1000000ull : waitDefaultTimeoutNs();
}

ncclResult_t chorusCommSetTimeout(ncclComm_t comm, int64_t timeoutMs) {
  CHECK(commCheck(comm, "chorusCommSetTimeout"));
  if (timeoutMs < 0) {
    WARN("chorusCommSetTimeout : invalid timeoutMs %lld (must be >= 0)", (long long)timeoutMs);
    return ncclInvalidArgument;
  }
  __atomic_store_n(&comm->timeoutMs, timeoutMs, __ATOMIC_RELAXED);
  INFO(subsysInit, "rank %d: timeout %lld ms", comm->rank, (long long)timeoutMs);
  return ncclSuccess;
}
