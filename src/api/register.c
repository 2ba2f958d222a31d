/* Buffer registration: optional in NCCL, and chorus's data path needs none
 * (it copies through its FIFOs), so a registration only records the range
 * so that deregistration can be checked. */
#include <stdlib.h>

#include "api/api.h"
#include "api/comm.h"
#include "core/err.h"
#include "core/log.h"

#define REG_MAGIC 0x7265676973746572ull

struct regHandle {
  uint64_t magic;
  struct ncclComm *comm;
  void *buff;
  size_t size;
};

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size, void **handle) {
  CHECK(commCheck(comm, "ncclCommRegister"));
  if (handle == NULL) {
    WARN("ncclCommRegister : handle argument is NULL");
    return ncclInvalidArgument;
  }
  if (buff == NULL && size > 0) {
    WARN("ncclCommRegister : buff argument is NULL with size %zu", size);
    return ncclInvalidArgument;
  }
  struct regHandle *h = malloc(sizeof *h);
  if (!h) return ncclSystemError;
  *h = (struct regHandle){REG_MAGIC, comm, buff, size};
  *handle = h;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle) {
  CHECK(commCheck(comm, "ncclCommDeregister"));
  struct regHandle *h = handle;
  if (h == NULL || h->magic != REG_MAGIC || h->comm != comm) {
    WARN("ncclCommDeregister : Could not find handle %p", handle);
    return ncclInvalidUsage;
  }
  h->magic = 0;
  free(h);
  return ncclSuccess;
}
