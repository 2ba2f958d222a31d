/* Group calls and launching: every collective or point-to-point call is
 * recorded as a group item; ncclGroupEnd (or the call itself outside a
 * group) turns items into schedules and runs them, inline for the NULL
 * stream or on the stream's worker. */
#ifndef CHORUS_API_GROUP_H
#define CHORUS_API_GROUP_H
#include "algo/algo.h"
#include "api/comm.h"
#include "api/initjob.h"
#include "tune/tune.h"

struct groupItem {
  struct ncclComm *comm;
  cudaStream_t stream;
  struct collDesc desc;
  struct tuneChoice plan; /* the tuner's, chosen when the call was checked */
  uint64_t opId;          /* the communicator's call number (opCount in the COLL log line) */
  struct profCall prof;   /* its profiler API events (trace/profile.h) */
  uint64_t flightId;      /* its flight recorder entry (trace/flight.h; 0: none) */
};

/* The first item on items[i]'s stream that has items[i]'s communicator: i
 * itself when it is the first (what watch, flight and profiler events do
 * once per communicator of a launch). */
static inline int groupCommLeader(const struct groupItem *items, int i) {
  for (int j = 0; j < i; j++)
    if (items[j].stream == items[i].stream && items[j].comm == items[i].comm) return j;
  return i;
}

/* 1 inside ncclGroupStart .. ncclGroupEnd on this thread. */
int groupOpen(void);
/* Records (in a group) or runs (outside one) a checked init. */
ncclResult_t groupInit(const struct initJob *job);

/* Records (in a group) or runs (outside one) an already-checked call; run
 * at once, the item itself is launched (and numbered). */
ncclResult_t groupEnqueue(struct groupItem *item);
/* A checked call that is not a collective (the one-sided calls, rma.c):
 * issue hands it to its stream (or runs it, on the NULL stream) and takes
 * arg over; drop frees arg unissued. Outside a group groupDefer issues it
 * at once. Inside one it is held, and at the group's end the early ones
 * (writes, which wait for nothing) are issued before the group's
 * collectives and the others (waits for signals) after them: ranks whose
 * groups hold both then cannot wait for each other in a circle. */
struct groupLater {
  struct ncclComm *comm;
  int early;
  ncclResult_t (*issue)(void *arg);
  void (*drop)(void *arg);
  void *arg;
};
ncclResult_t groupDefer(const struct groupLater *later);
/* Inside a group, a call that failed its checks fails ncclGroupEnd too, and
 * the whole group is dropped (as NCCL does). Returns res. */
ncclResult_t groupNoteError(ncclResult_t res);
/* A failure NCCL finds only at ncclGroupEnd: inside a group it is noted as
 * groupNoteError's and the call returns ncclSuccess; outside, res. */
ncclResult_t groupFailsAtEnd(ncclResult_t res);

#endif
