/* CHORUS_STATS=1: each communicator counts, per collective and per message
 * size (powers of two, as nccl-tests' sizes), its calls, bytes and run
 * times (a histogram in quarter octaves), and at destroy or abort each rank
 * prints one line per collective and size: calls, bytes, time percentiles
 * and busbw (nccl-tests' factors) to stderr. */
#ifndef CHORUS_API_STATS_H
#define CHORUS_API_STATS_H
#include <stdint.h>

#include "core/observe.h"
#include "engine/desc.h"
#include "nccl.h"

struct groupItem;
struct ncclComm;

#define STATS_SIZES 48 /* message sizes 0, 1, 2-3, 4-7, ... */
#define STATS_TIMES 160 /* quarter octaves of nanoseconds */

struct statsBucket {
  uint64_t calls, bytes, sumNs;
  uint32_t times[STATS_TIMES];
};

struct commStats {
  struct statsBucket **b; /* [collTypeCount * STATS_SIZES], each made at its first call (NULL: off) */
  int lock;               /* a spinlock (core/spin.h): streams' workers and the caller end launches at once */
};

struct collDesc;
/* What nccl-tests calls an operation's size (an AllGather's: its whole output). */
uint64_t statsOpBytes(const struct collDesc *d, int nranks);

/* 1 while any communicator counts: launches skip statsEnded otherwise. */
extern int statsCommsOn;
static inline int statsActive(void) { return OBSERVED(__atomic_load_n(&statsCommsOn, __ATOMIC_RELAXED) != 0); }

void statsInit(struct ncclComm *comm);
/* Prints (when on) and frees. */
void statsReport(struct ncclComm *comm);
/* The items on stream ended with res after ns of running (a group's
 * operations share their launch's time). */
void statsEnded(const struct groupItem *items, int n, void *stream, ncclResult_t res, uint64_t ns);

#endif
