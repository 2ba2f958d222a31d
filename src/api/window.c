/* Memory windows (NCCL 2.27's symmetric registration, ncclWinGetUserPtr of
 * 2.30): NCCL's symmetric kernels and one-sided calls use them. chorus's
 * collectives copy through their FIFOs and need none; one-sided writes
 * (rma.c) land in them. A window records the range and a number: NCCL's
 * registration is collective, so every rank registers its windows in the
 * same order and the k-th window is the same on all of them, which is how
 * a write names the peer's window. Nothing is exchanged at registration:
 * one thread may register the windows of several ranks in a group, which
 * an exchange here would deadlock. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/comm.h"
#include "api/rma.h"
#include "core/err.h"
#include "core/log.h"

#define WIN_FLAGS_KNOWN (NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING)

struct ncclWindow_vidmem {
  void *buff;
  size_t size;
  int flags;
  uint32_t number; /* the comm's k-th window */
  struct ncclWindow_vidmem *next;
};

/* 1 when win is a live window of comm: looked up in its list, never read
 * through, so that a wrong or freed handle is an error, not a crash. */
static int windowOf(struct ncclComm *comm, ncclWindow_t win) {
  int found = 0;
  pthread_mutex_lock(&comm->winLock);
  for (struct ncclWindow_vidmem *w = comm->windows; w && !found; w = w->next) found = w == win;
  pthread_mutex_unlock(&comm->winLock);
  return found;
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
         int winFlags) {
  CHECK(commCheck(comm, "ncclCommWindowRegister"));
  CHECK(commInitDone(comm, "ncclCommWindowRegister")); /* as NCCL's ncclCommEnsureReady */
  if (win == NULL) {
    WARN("ncclCommWindowRegister : win argument is NULL");
    return ncclInvalidArgument;
  }
  if (buff == NULL || size == 0) { /* both ncclInvalidArgument in NCCL */
    WARN("ncclCommWindowRegister : buff %p with size %zu: a window needs a buffer and a size", buff, size);
    return ncclInvalidArgument;
  }
  if (winFlags & ~WIN_FLAGS_KNOWN) {
    WARN("ncclCommWindowRegister : unknown winFlags 0x%x (NCCL_WIN_DEFAULT, NCCL_WIN_COLL_SYMMETRIC, "
         "NCCL_WIN_STRICT_ORDERING)", (unsigned)winFlags);
    return ncclInvalidArgument;
  }
  struct ncclWindow_vidmem *w = malloc(sizeof *w);
  if (!w) return ncclSystemError;
  pthread_mutex_lock(&comm->winLock);
  *w = (struct ncclWindow_vidmem){buff, size, winFlags, comm->winNext++, comm->windows};
  comm->windows = w;
  rmaDrainLocked(comm); /* writes that came before this rank registered it */
  pthread_mutex_unlock(&comm->winLock);
  *win = w;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  CHECK(commCheck(comm, "ncclCommWindowDeregister"));
  if (win == NULL) return ncclSuccess; /* as NCCL: nothing was registered */
  int found = 0;
  pthread_mutex_lock(&comm->winLock); /* no one-sided write is copying into it */
  for (struct ncclWindow_vidmem **p = &comm->windows; *p; p = &(*p)->next)
    if (*p == win) {
      *p = win->next;
      found = 1;
      break;
    }
  pthread_mutex_unlock(&comm->winLock);
  if (!found) {
    WARN("ncclCommWindowDeregister : window %p is not registered with this communicator (or was deregistered)",
         (void *)win);
    return ncclInvalidArgument;
  }
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

ncclResult_t windowNumber(struct ncclComm *comm, ncclWindow_t win, const char *call, uint32_t *number,
                          size_t *size) {
  if (!windowOf(comm, win)) {
    WARN("%s : window %p is not registered with this communicator", call, (void *)win);
    return ncclInvalidArgument;
  }
  *number = win->number;
  *size = win->size;
  return ncclSuccess;
}

static int inSymmetricWindow(const struct ncclComm *comm, const void *p, size_t bytes) {
  uintptr_t at = (uintptr_t)p;
  for (const struct ncclWindow_vidmem *w = comm->windows; w; w = w->next) {
    uintptr_t base = (uintptr_t)w->buff;
    if ((w->flags & NCCL_WIN_COLL_SYMMETRIC) && at >= base && at - base <= w->size && bytes <= w->size - (at - base))
      return 1;
  }
  return 0;
}

int windowsSymmetricMapped(struct ncclComm *comm, const void *a, size_t aBytes, const void *b, size_t bBytes) {
  /* Most communicators have no windows: no lock on every call for them. */
  if (__atomic_load_n(&comm->windows, __ATOMIC_RELAXED) == NULL) return 0;
  /* The windows alone decide, which every rank registered alike: not
   * whether this rank's memory is shared (ncclMemAlloc gives plain memory
   * past its descriptor budget, and a window may hold plain memory), which
   * only this rank knows. Memory a peer cannot map comes through the FIFOs
   * (proto.h, sendPostRef). */
  pthread_mutex_lock(&comm->winLock);
  int found = inSymmetricWindow(comm, a, aBytes) && inSymmetricWindow(comm, b, bBytes);
  pthread_mutex_unlock(&comm->winLock);
  return found;
}

int windowWrite(struct ncclComm *comm, uint32_t number, uint64_t off, uint64_t end, const void *data, size_t bytes) {
  int res = -1;
  for (struct ncclWindow_vidmem *w = comm->windows; w; w = w->next) {
    if (w->number != number) continue;
    res = end > w->size || off > w->size || bytes > w->size - off ? -2 : 0;
    if (res == 0 && bytes) memcpy((char *)w->buff + off, data, bytes);
    break;
  }
  return res;
}

void windowFreeAll(struct ncclComm *comm) {
  while (comm->windows) {
    struct ncclWindow_vidmem *w = comm->windows;
    comm->windows = w->next;
    free(w);
  }
}
