/* Schedule builders: each turns one operation into tasks of primitive steps
 * over the communicator's connections. None of them moves a byte. */
#ifndef CHORUS_ALGO_ALGO_H
#define CHORUS_ALGO_ALGO_H
#include "engine/desc.h"
#include "engine/schedule.h"


struct collDesc {
  int coll;
  const void *sendbuff;
  void *recvbuff;
  size_t count; /* per-rank count for AllGather / ReduceScatter */
  int dtype;
  struct redOp red;
  int root; /* root for rooted collectives, peer for send/recv */
  struct opDesc check; /* what the first slot on each connection carries */
};

/* What a builder needs of the communicator. laneLast[] holds, for the
 * schedule being built, the last task on each lane (-1: none): lanes
 * 0..nch-1 are collective channels, then nranks send lanes, then nranks
 * receive lanes. */
struct algoCtx {
  int rank, nranks;
  struct connTable *conns;
  struct bootstrap *boot;
  volatile int *abortFlag;
  char *scratch; /* COMM_SCRATCH_BYTES, for in-place one-hop (tune keeps it below) */
  int *laneLast;
};

/* Builds the schedule of one operation with the given algorithm over nch
 * channels. Returns ncclSystemError when out of memory. */
ncclResult_t algoBuild(struct schedule *s, struct algoCtx *ctx, const struct collDesc *d, int algo, int nch);

#endif
