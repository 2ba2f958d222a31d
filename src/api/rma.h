/* One-sided operations (rma.c) and the windows they write into (window.c). */
#ifndef CHORUS_API_RMA_H
#define CHORUS_API_RMA_H
#include <stddef.h>
#include <stdint.h>

#include "api/comm.h"

/* The monitor's oobRmaFn: applies a write (and its signal) peer sent. */
void rmaDeliver(void *comm, int peer, const void *payload, size_t size);

/* Applies the writes that came before their windows were registered and
 * whose windows now are (ncclCommWindowRegister, with comm->winLock held). */
void rmaDrainLocked(struct ncclComm *comm);
/* Frees the writes still kept (ncclCommDestroy). */
void rmaFreeEarly(struct ncclComm *comm);

/* win's number (the same on every rank that registered it in the same
 * order) and size, when win is a live window of comm; else a WARN naming
 * call, and ncclInvalidArgument. */
ncclResult_t windowNumber(struct ncclComm *comm, ncclWindow_t win, const char *call, uint32_t *number,
                          size_t *size);
/* Copies bytes into comm's window number at off, a frame of a write that
 * ends at end (comm->winLock held); 0, or -1 when comm has no such window,
 * -2 when it ends before end or off + bytes (nothing copied). */
int windowWrite(struct ncclComm *comm, uint32_t number, uint64_t off, uint64_t end, const void *data, size_t bytes);
/* 1 when [a, a + aBytes) and [b, b + bBytes) each lie in an
 * NCCL_WIN_COLL_SYMMETRIC window of comm: then, by that flag's promise,
 * every rank's buffers of the call do (the tuner's "mapped", the same on
 * every rank). */
int windowsSymmetricMapped(struct ncclComm *comm, const void *a, size_t aBytes, const void *b, size_t bBytes);
/* Frees the windows left registered (ncclCommDestroy, ncclCommAbort). */
void windowFreeAll(struct ncclComm *comm);

#endif
