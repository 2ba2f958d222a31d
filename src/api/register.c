/* Buffer registration: optional in NCCL, and chorus's data path needs none
 * (it copies through its FIFOs, or maps ncclMemAlloc's memory whether it is
 * registered or not), so a registration only records the range, in the
 * communicator's list, so that deregistration can be checked: a handle is
 * looked up there, never read through, so a wrong or stale one is an
 * error, not a crash. As NCCL's cache, a range inside one registered
 * already (both taken to whole pages) gets that registration's handle and
 * one more reference: each registration is undone by its own deregister. */
#include <stdint.h>
#include <stdlib.h>

#include "api/api.h"
#include "api/comm.h"
#include "core/err.h"
#include "core/log.h"

struct regHandle {
  uintptr_t beg, end; /* whole pages */
  int refs;           /* registrations it stands for */
  struct regHandle *next;
};

#define REG_PAGE ((uintptr_t)4096)

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
  uintptr_t beg = (uintptr_t)buff & ~(REG_PAGE - 1), end = ((uintptr_t)buff + size + REG_PAGE - 1) & ~(REG_PAGE - 1);
  pthread_mutex_lock(&comm->winLock);
  struct regHandle *h = comm->regs;
  while (h && !(h->beg <= beg && end <= h->end)) h = h->next;
  if (h) {
    h->refs++;
  } else if ((h = malloc(sizeof *h)) != NULL) {
    *h = (struct regHandle){beg, end, 1, comm->regs};
    comm->regs = h;
  }
  pthread_mutex_unlock(&comm->winLock);
  if (!h) return ncclSystemError;
  *handle = h;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle) {
  CHECK(commCheck(comm, "ncclCommDeregister"));
  if (handle == NULL) return ncclSuccess; /* what NCCL's register hands back when it registers nothing */
  struct regHandle *found = NULL;
  int last = 0; /* its last reference went */
  pthread_mutex_lock(&comm->winLock);
  for (struct regHandle **p = &comm->regs; *p; p = &(*p)->next)
    if (*p == handle) {
      found = *p;
      if ((last = --found->refs == 0)) *p = found->next;
      break;
    }
  pthread_mutex_unlock(&comm->winLock);
  if (found == NULL) {
    WARN("ncclCommDeregister : Could not find handle %p (not registered with this communicator, or deregistered)",
         handle);
    return ncclInvalidUsage;
  }
  if (last) free(found);
  return ncclSuccess;
}

void registerFreeAll(struct ncclComm *comm) {
  while (comm->regs) {
    struct regHandle *h = comm->regs;
    comm->regs = h->next;
    free(h);
  }
}
