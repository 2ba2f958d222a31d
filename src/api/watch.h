/* What each rank is doing, kept so that a stuck operation can be explained:
 * every launch records the operation it starts and the last collective it
 * completed; the bootstrap monitor hands that to any rank that asks
 * (oobQueryStatus), and a rank whose operation times out asks them all and
 * names the ranks that are elsewhere. */
#ifndef CHORUS_API_WATCH_H
#define CHORUS_API_WATCH_H
#include "api/group.h"

/* The monitor's status callback (oobStatusFn) and its reply size. */
void watchStatus(void *comm, void *out, size_t size);
size_t watchStatusBytes(void);
/* Gives an operation its number (collectives per communicator, Send/Recv
 * per peer and direction, from 1): when its launch is accepted, so that a
 * refused call changes nothing. */
void watchNumber(struct groupItem *item);
/* A numbered operation with nothing to do (count 0) is done at once. */
void watchNoop(const struct groupItem *item);
/* A launch of items (those on stream) is issued / starts running / ends
 * with res; ran = 0 when it was not run at all (a failure before it on its
 * stream): then a timeout is not diagnosed again. What a rank says it is
 * in (a timeout's diagnosis, the mismatch probe) is the launch that
 * started last, or the one issued when none was outstanding: with three
 * queued on a stream and the first stuck, the first, not the third. */
void watchBegin(const struct groupItem *items, int n, cudaStream_t stream);
void watchRunning(const struct groupItem *items, int n, cudaStream_t stream);
void watchEnd(const struct groupItem *items, int n, cudaStream_t stream, ncclResult_t res, int ran);
/* A stalled wait's periodic look (bootstrap's stallProbe), at most once a
 * second under CHORUS_CHECK: asks the peers what they last called, and
 * when one called another collective under the same number (AllReduce #3
 * here, Broadcast #3 there: paths that never meet, so the data path's own
 * check never sees it), or the same with a count of 0 (a no-op it passed
 * at once), fails at once with ncclInvalidUsage naming both, and tells the
 * others, instead of waiting out the timeout. */
ncclResult_t watchProbe(void *comm);
/* A peer that died or reported a fault while no call ran: makes it the
 * communicator's async error (with the WARN) and returns it. */
ncclResult_t watchAsyncError(struct ncclComm *comm);

#endif
