/* Group calls and launching: every collective or point-to-point call is
 * recorded as a group item; ncclGroupEnd (or the call itself outside a
 * group) turns items into schedules and runs them, inline for the NULL
 * stream or on the stream's worker. */
#ifndef CHORUS_API_GROUP_H
#define CHORUS_API_GROUP_H
#include "algo/algo.h"
#include "api/comm.h"

struct groupItem {
  struct ncclComm *comm;
  cudaStream_t stream;
  struct collDesc desc;
  struct tuneChoice plan; /* the tuner's, chosen when the call was checked */
};

/* A communicator to create: ncclCommInitRank inside a group only records it
 * (as NCCL does), so that one thread can create several ranks; ncclGroupEnd
 * runs all recorded inits concurrently. */
struct initJob {
  ncclComm_t *comm;
  int nranks, rank, cudaDev, blocking;
  ncclUniqueId id;
  ncclResult_t res;
  /* ncclCommSplit: a split of parent (nranks, rank and id are worked out
   * with the parent's other ranks) */
  struct ncclComm *parent;
  int color, key;
  /* ncclCommShrink: the parent's ranks that stay out (nranks bytes, owned
   * by the job: groupInit and ncclGroupEnd free it) */
  char *excluded;
  int shrinkFlags;
};
/* The shrink itself, on the init thread (shrink.c). */
ncclResult_t commShrinkRun(struct initJob *job);
/* The split itself, on the init thread (split.c). */
ncclResult_t commSplitRun(struct initJob *job);
/* Runs inits concurrently, one thread each (init.c). */
ncclResult_t initJobsRun(struct initJob *jobs, int n);
/* Records (in a group) or runs (outside one) a checked init. */
ncclResult_t groupInit(const struct initJob *job);

/* Records (in a group) or runs (outside one) an already-checked call. */
ncclResult_t groupEnqueue(const struct groupItem *item);
/* Inside a group, a call that failed its checks fails ncclGroupEnd too, and
 * the whole group is dropped (as NCCL does). Returns res. */
ncclResult_t groupNoteError(ncclResult_t res);

#endif
