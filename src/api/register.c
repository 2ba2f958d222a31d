/* Buffer registration: optional in NCCL, and chorus's data path needs none
 * (it copies through its FIFOs, or maps ncclMemAlloc's memory whether it is
 * registered or not), so a registration only records the range, in the
 * communicator's list, so that deregistration can be checked: a handle is
 * looked up there, never read through, so a wrong or stale one is an
 * error, not a crash. */
#include <stdlib.h>

#include "api/api.h"
#include "api/comm.h"
#include "core/err.h"
#include "core/log.h"

struct regHandle {
  void *buff;
  size_t size;
  struct regHandle *next;
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
  pthread_mutex_lock(&comm->winLock);
  *h = (struct regHandle){buff, size, comm->regs};
  comm->regs = h;
  pthread_mutex_unlock(&comm->winLock);
  *handle = h;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle) {
  CHECK(commCheck(comm, "ncclCommDeregister"));
  if (handle == NULL) return ncclSuccess; /* what NCCL's register hands back when it registers nothing */
  struct regHandle *found = NULL;
  pthread_mutex_lock(&comm->winLock);
  for (struct regHandle **p = &comm->regs; *p; p = &(*p)->next)
    if (*p == handle) {
      found = *p;
      *p = found->next;
      break;
    }
  pthread_mutex_unlock(&comm->winLock);
  if (found == NULL) {
    WARN("ncclCommDeregister : Could not find handle %p (not registered with this communicator, or deregistered)",
         handle);
    return ncclInvalidUsage;
  }
  free(found);
  return ncclSuccess;
}

void registerFreeAll(struct ncclComm *comm) {
  while (comm->regs) {
    struct regHandle *h = comm->regs;
    comm->regs = h->next;
    free(h);
  }
}
