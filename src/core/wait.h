/* The one wait (DESIGN.md invariant 3). Every loop in chorus that waits for
 * something calls waitPause() each time a round made no progress. It spins
 * briefly, then yields, then sleeps, and on every slow round checks the
 * abort flag, the stall deadline (CHORUS_TIMEOUT) and peer liveness.
 *
 * It lives in core, not engine, because the bootstrap and the transports
 * wait too and may only call downward. */
#ifndef CHORUS_CORE_WAIT_H
#define CHORUS_CORE_WAIT_H
#include <stdint.h>

#include "nccl.h"

/* Returns ncclSuccess while every peer is alive, else an error (after a WARN
 * that names the rank). */
typedef ncclResult_t (*waitLivenessFn)(void *arg);

struct waitState {
  uint32_t rounds;          /* consecutive rounds without progress */
  uint64_t stallStartNs;    /* when the current stall began */
  uint64_t nextCheckNs;     /* next liveness check */
  uint64_t timeoutNs;       /* 0: no deadline */
  volatile int *abortFlag;  /* may be NULL */
  waitLivenessFn liveness;  /* may be NULL */
  void *livenessArg;
  const char *what; /* what is being waited for, for the timeout message */
  void (*block)(void *arg, uint64_t ns); /* sleeps up to ns; NULL: nanosleep */
  void *blockArg;
  int blockNow; /* set per round: block() wakes when the awaited thing happens, so skip yielding */
};

/* CHORUS_TIMEOUT in nanoseconds (0: none), what waitBegin sets. */
uint64_t waitDefaultTimeoutNs(void);
/* Of a timeout, the part a timed-out operation spends asking the other
 * ranks what they do (a twentieth of it, from 10 to 100 ms): its
 * wait gives up that much earlier, so that the error comes at the timeout,
 * not after it, while a rank that arrives late but within the timeout
 * (torch's meaning of it) is still waited for. */
uint64_t waitDiagnosisNs(uint64_t timeoutNs);

void waitBegin(struct waitState *w, volatile int *abortFlag, waitLivenessFn liveness, void *arg,
               const char *what);
/* From now on every wait of this process spins only a few rounds before it
 * yields, and one that can sleep until woken yields a little while first: a
 * communicator found more ranks on its machine than cores. */
void waitSharedCores(void);
/* Moves the calling thread onto the slot-th CPU (modulo their number) of
 * its affinity mask, where that mask names every CPU online (nobody pinned
 * it), and gives the mask back at once: only where it runs changes, and
 * the kernel may move it again. Returns the CPU it runs on after, or -1
 * where it did not try. */
int waitPlaceOn(int slot);
/* 1 once waitSharedCores was called: ranks of this process's machine wait
 * for each other's cores (what else would use a second core is off). */
int waitCoresShared(void);
/* Sleeps through fn instead of nanosleep, e.g. in poll() on sockets, so
 * that the sleep ends as soon as there is something to do. */
static inline void waitSetBlock(struct waitState *w, void (*fn)(void *, uint64_t), void *arg) {
  w->block = fn;
  w->blockArg = arg;
}
/* 1 while the wait is still in its first, spinning rounds: the stall's
 * clock starts after them, so a round that sleeps should not come yet. */
int waitSpinning(const struct waitState *w);
/* Call after a round that made progress. */
static inline void waitProgress(struct waitState *w) { w->rounds = 0; }
/* Call after a round without progress. ncclSuccess means "try again";
 * anything else ends the wait: ncclInvalidUsage when the communicator was
 * aborted, ncclTimeout past timeoutNs, or the liveness callback's error. */
ncclResult_t waitPause(struct waitState *w);

#endif
