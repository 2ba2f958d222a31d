/* CHORUS_STATS=1: each communicator counts, per collective and per message
 * size (powers of two, as nccl-tests' sizes), its calls, bytes and run
 * times (a histogram in quarter octaves), and at destroy or abort each rank
 * prints one line per collective and size: calls, bytes, time percentiles
 * and busbw (nccl-tests' factors) to stderr. */
#ifndef CHORUS_TRACE_STATS_H
#define CHORUS_TRACE_STATS_H
#include <stddef.h>
#include <stdint.h>

#include "core/observe.h"

#define STATS_SIZES 48 /* message sizes 0, 1, 2-3, 4-7, ... */
#define STATS_TIMES 160 /* quarter octaves of nanoseconds */

struct statsBucket {
  uint64_t calls, bytes, sumNs;
  uint32_t times[STATS_TIMES];
};

struct commStats {
  struct statsBucket **b; /* [collTypeCount * STATS_SIZES], each made at its first call (NULL: off) */
  int lock;               /* a spinlock (core/spin.h): streams' workers and the caller end launches at once */
  int rank, nranks;       /* whose counts they are, for the report */
  uint64_t commHash;
};

/* What nccl-tests calls an operation's size (an AllGather's: its whole
 * output): the call coll (engine/desc.h) of count elements of dtype. */
uint64_t statsOpBytes(int coll, size_t count, int dtype, int nranks);

/* 1 while any communicator counts: launches skip statsEnded otherwise. */
extern int statsCommsOn;
static inline int statsActive(void) { return OBSERVED(__atomic_load_n(&statsCommsOn, __ATOMIC_RELAXED) != 0); }

void statsInit(struct commStats *s, int rank, int nranks, uint64_t commHash);
/* Prints (when on) and frees. */
void statsReport(struct commStats *s);
/* An operation coll of bytes (statsOpBytes) ran for ns and succeeded (a
 * group's operations share their launch's time). */
void statsEnded(struct commStats *s, int coll, uint64_t bytes, uint64_t ns);

#endif
