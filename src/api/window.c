/* Memory windows (NCCL 2.27's symmetric registration, ncclWinGetUserPtr of
 * 2.30): NCCL's symmetric kernels and one-sided calls use them; chorus's
 * data path copies through its FIFOs and needs none, so a window records
 * the range, checked on deregistration and given back by
 * ncclWinGetUserPtr. Local to the rank: NCCL's call is collective, but one
 * thread may register the windows of several ranks in a group, which an
 * exchange here would deadlock. */
#include <stdlib.h>

#include "api/api.h"
#include "api/comm.h"
#include "core/err.h"
#include "core/log.h"

#define WIN_MAGIC 0x77696e646f77ull
#define WIN_FLAGS_KNOWN (NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING)

struct ncclWindow_vidmem {
  uint64_t magic;
  struct ncclComm *comm;
  void *buff;
  size_t size;
  int flags;
};

/* 1 when win is a live window of comm. */
static int windowOf(const struct ncclComm *comm, ncclWindow_t win) {
  return win != NULL && win->magic == WIN_MAGIC && win->comm == comm;
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
         int winFlags) {
  CHECK(commCheck(comm, "ncclCommWindowRegister"));
  if (win == NULL) {
    WARN("ncclCommWindowRegister : win argument is NULL");
    return ncclInvalidArgument;
  }
  if (buff == NULL && size > 0) {
    WARN("ncclCommWindowRegister : buff argument is NULL with size %zu", size);
    return ncclInvalidArgument;
  }
  if (winFlags & ~WIN_FLAGS_KNOWN) {
    WARN("ncclCommWindowRegister : unknown winFlags 0x%x (NCCL_WIN_DEFAULT, NCCL_WIN_COLL_SYMMETRIC, "
         "NCCL_WIN_STRICT_ORDERING)", (unsigned)winFlags);
    return ncclInvalidArgument;
  }
  struct ncclWindow_vidmem *w = malloc(sizeof *w);
  if (!w) return ncclSystemError;
  *w = (struct ncclWindow_vidmem){WIN_MAGIC, comm, buff, size, winFlags};
  *win = w;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  CHECK(commCheck(comm, "ncclCommWindowDeregister"));
  if (!windowOf(comm, win)) {
    WARN("ncclCommWindowDeregister : window %p is not registered with this communicator", (void *)win);
    return ncclInvalidArgument;
  }
  win->magic = 0;
  free(win);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void **outUserPtr) {
  CHECK(commCheck(comm, "ncclWinGetUserPtr"));
  if (outUserPtr == NULL) {
    WARN("ncclWinGetUserPtr : outUserPtr argument is NULL");
    return ncclInvalidArgument;
  }
  if (!windowOf(comm, win)) {
    WARN("ncclWinGetUserPtr : window %p is not registered with this communicator", (void *)win);
    return ncclInvalidArgument;
  }
  *outUserPtr = win->buff;
  return ncclSuccess;
}
