/* A group's operations on one communicator run as one launch, whatever
 * streams the caller gave them, as NCCL's plan does (ncclLaunchPrepare):
 * the launch runs on the stream of the communicator's first operation in
 * the group, after the work issued before on the others, and the others'
 * later work waits for it. Run as separate parts on their streams, one
 * rank could run the group's second AllReduce while its peer ran the first:
 * a mismatch under CHORUS_CHECK, or a stall without it. */
#include <stdlib.h>

#include "api/launch.h"
#include "chorus.h"
#include "core/err.h"
#include "core/log.h"
#include "engine/stream.h"

struct streamPoint {
  cudaStream_t stream;
  uint64_t pos;
};

/* On the stream it was queued on: waits until another stream has passed a
 * point (running that stream's work itself if need be, as a synchronizing
 * caller would). */
static void waitPoint(void *arg, ncclResult_t status) {
  (void)status; /* a failure before it on this stream does not end the other's work */
  struct streamPoint *p = arg;
  streamWaitFor(p->stream, p->pos, "ncclGroupEnd");
  streamRelease(p->stream);
  free(p);
}

/* waiter's later work waits for stream to pass pos; takes over a hold of
 * stream (streamMark's or streamHold's), which it lets go. */
static ncclResult_t waitAt(cudaStream_t waiter, cudaStream_t stream, uint64_t pos) {
  struct streamPoint *p = malloc(sizeof *p);
  ncclResult_t res = p ? ncclSuccess : ncclSystemError;
  if (p) {
    *p = (struct streamPoint){stream, pos};
    if (waiter == NULL) waitPoint(p, ncclSuccess);
    else if ((res = chorusLaunchHostFunc(waiter, waitPoint, p)) != ncclSuccess) free(p);
  }
  if (res != ncclSuccess) streamRelease(stream);
  return res;
}

/* waiter's later work (NULL: the caller, now) waits for what has been
 * issued on stream so far. */
static ncclResult_t waitFor(cudaStream_t waiter, cudaStream_t stream) {
  if (stream == NULL || waiter == stream) return ncclSuccess; /* NULL-stream work is done when issued */
  return waitAt(waiter, stream, streamMark(stream));
}

int streamJoinPlan(struct groupItem *items, int n, struct streamJoin **joins) {
  *joins = NULL;
  int nj = 0, cap = 0;
  for (int i = 1; i < n; i++) {
    int first = 0;
    while (items[first].comm != items[i].comm) first++;
    cudaStream_t launch = items[first].stream, other = items[i].stream;
    if (other == launch) continue;
    items[i].stream = launch;
    int known = 0;
    for (int k = 0; k < nj && !known; k++) known = (*joins)[k].other == other && (*joins)[k].launch == launch;
    if (known) continue;
    if (nj == cap) {
      struct streamJoin *grown = realloc(*joins, sizeof **joins * (size_t)(cap = cap ? 2 * cap : 4));
      if (!grown) { /* the group still runs as one launch; only the waits between streams are lost */
        WARN("ncclGroupEnd : out of memory joining the streams of a communicator's operations");
        return nj;
      }
      *joins = grown;
    }
    (*joins)[nj++] = (struct streamJoin){other, launch, 0, 0};
  }
  return nj;
}

ncclResult_t streamJoinBefore(struct streamJoin *joins, int nj) {
  for (int k = 0; k < nj; k++) {
    struct streamJoin *j = &joins[k];
    if (j->launch) {
      CHECK(waitFor(j->launch, j->other));
    } else if (j->other) {
      j->pos = streamMark(j->other);
      j->marked = 1;
    }
  }
  return ncclSuccess;
}

ncclResult_t streamJoinCaller(struct streamJoin *joins, int nj) {
  ncclResult_t first = ncclSuccess;
  for (int k = 0; k < nj; k++) {
    struct streamJoin *j = &joins[k];
    if (!j->marked) continue;
    ncclResult_t res = streamWaitFor(j->other, j->pos, "ncclGroupEnd");
    if (first == ncclSuccess) first = res;
    streamRelease(j->other);
    j->marked = 0;
  }
  return first;
}

ncclResult_t streamJoinAfter(struct streamJoin *joins, int nj) {
  ncclResult_t first = ncclSuccess;
  for (int k = 0; k < nj; k++) {
    struct streamJoin *j = &joins[k];
    if (j->marked) { /* the launch failed before the caller waited */
      streamRelease(j->other);
      j->marked = 0;
    }
    ncclResult_t res = waitFor(j->other, j->launch);
    if (first == ncclSuccess) first = res;
  }
  return first;
}

/* One communicator's launches run in the order they were issued, whatever
 * their streams, as NCCL's do (each launch waits for the communicator's
 * previous one, through its device stream): two calls on two streams would
 * otherwise run at once on the same connections, each rank's in its own
 * order (a mismatch under CHORUS_CHECK, wrong data without it). */
ncclResult_t commOrderWait(struct ncclComm *comm, cudaStream_t stream, const char *call) {
  cudaStream_t last = comm->orderStream;
  if (last == NULL || last == stream || comm->streamsUnordered) return ncclSuccess; /* in order already (NULL: done) */
  uint64_t pos = comm->orderPos;
  if (stream == NULL) { /* the caller runs the launch: it waits now (not at all where it is past: a host function of last's own may call) */
    ncclResult_t res = streamPassed(last, pos) ? ncclSuccess : streamWaitFor(last, pos, call);
    if (res == ncclSuccess) commOrderNote(comm, NULL, 0);
    return res;
  }
  if (streamPassed(last, pos)) return ncclSuccess;
  streamHold(last);
  return waitAt(stream, last, pos);
}

void commOrderNote(struct ncclComm *comm, cudaStream_t stream, uint64_t pos) {
  cudaStream_t last = comm->orderStream;
  if (stream != last) {
    if (stream) streamHold(stream);
    if (last) streamRelease(last);
    comm->orderStream = stream;
  }
  comm->orderPos = pos;
}

ncclResult_t chorusCommSetStreamOrder(ncclComm_t comm, int ordered) {
  CHECK(commCheck(comm, "chorusCommSetStreamOrder"));
  if (ordered != 0 && ordered != 1) {
    WARN("chorusCommSetStreamOrder : invalid ordered %d (must be 0 or 1)", ordered);
    return ncclInvalidArgument;
  }
  comm->streamsUnordered = !ordered;
  return ncclSuccess;
}
