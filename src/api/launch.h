/* Launching group items (launch.c). */
#ifndef CHORUS_API_LAUNCH_H
#define CHORUS_API_LAUNCH_H
#include "api/group.h"

/* Builds and runs (NULL stream) or queues (other streams) n items, numbering
 * them first; returns the first error. */
ncclResult_t launchItems(struct groupItem *items, int n);

/* A stream whose operations of a group moved to another's launch
 * (streamjoin.c): the launch waits for other's earlier work, and other's
 * later work waits for the launch. */
struct streamJoin {
  cudaStream_t other, launch;
  uint64_t pos; /* launch NULL: the point of other the caller waits for */
  int marked;   /* pos is taken (and holds other) */
};
/* Gives every item the stream of its communicator's first item and returns
 * the joins that takes (*joins: malloc'd, NULL when none). */
int streamJoinPlan(struct groupItem *items, int n, struct streamJoin **joins);
/* Before the launches are queued: each launch stream waits for its others'
 * work issued so far; for the NULL stream, whose part the caller runs, the
 * point is only marked here: */
ncclResult_t streamJoinBefore(struct streamJoin *joins, int nj);
/* ... and waited for by the caller once the group's stream parts are
 * queued, right before it runs the NULL stream's part (waiting earlier
 * could wait for work that needs a peer's part of this very group, when
 * one thread drives several ranks). */
ncclResult_t streamJoinCaller(struct streamJoin *joins, int nj);
/* After: each other stream waits for its launch (the caller, when other is
 * the NULL stream, whose work is done when the call returns); marks not
 * waited for are let go. */
ncclResult_t streamJoinAfter(struct streamJoin *joins, int nj);

/* A communicator's launches run in issue order across streams
 * (streamjoin.c): before a launch on stream, commOrderWait makes it wait for
 * the communicator's last launch on another stream (the caller waits now
 * when stream is NULL; call names the caller in an error); after it,
 * commOrderNote records where it ends (pos, from streamEnqueue; the NULL
 * stream's is done on return; commFree lets go of the stream held). */
ncclResult_t commOrderWait(struct ncclComm *comm, cudaStream_t stream, const char *call);
void commOrderNote(struct ncclComm *comm, cudaStream_t stream, uint64_t pos);

#endif
