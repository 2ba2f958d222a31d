/* What the schedule builders of src/algo/ share: tasks on lanes, cutting a
 * buffer between channels and into pieces that fit the FIFOs. Internal to
 * the algo layer. */
#ifndef CHORUS_ALGO_BUILD_H
#define CHORUS_ALGO_BUILD_H
#include "algo/algo.h"
#include "core/err.h"

#define ADD(s, ...)                                                     \
  do {                                                                  \
    if (scheduleAddStep((s), __VA_ARGS__) < 0) return ncclSystemError; \
  } while (0)

static inline int mod(int a, int n) { return ((a % n) + n) % n; }

/* The rank at ring position pos (any integer: taken mod n), and a rank's
 * position: the communicator's ring order (algoCtx.ringOrder). */
static inline int ringRank(const struct algoCtx *c, int pos) {
  int p = mod(pos, c->nranks);
  return c->ringOrder ? c->ringOrder[p] : p;
}
static inline int ringPosOf(const struct algoCtx *c, int rank) { return c->ringPos ? c->ringPos[rank] : rank; }

/* Starts a task on a collective lane (channel), after the lane's previous task. */
ncclResult_t laneTask(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int lane);
/* One send (send = 1) or receive of bytes at buf on the point-to-point lane of peer. */
ncclResult_t p2pTask(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int send, int peer,
                     const void *buf, size_t bytes);

/* Channel ch's share [*off, *off + *cnt) of count elements, cut on 64-byte
 * boundaries so that channels never share a cache line. */
void channelPart(size_t count, size_t esz, int nch, int ch, size_t *off, size_t *cnt);
/* The largest piece (elements) a step may carry when a rank sends its first
 * piece of every loop before it receives anything: half of the peer's
 * FIFO, or all ranks would wait on full FIFOs forever. */
size_t pieceElems(const struct algoCtx *c, size_t esz);

/* A builder for elements [off, off + cnt) of channel ch. */
typedef ncclResult_t (*pieceFn)(struct schedule *, struct algoCtx *, const struct collDesc *, int ch, size_t off,
                                size_t cnt);
/* Runs fn over each channel's share of d->count, in pieces of at most loop
 * elements (0: one piece per channel). */
ncclResult_t perChannel(pieceFn fn, struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch,
                        size_t loop);

/* Up to this many ranks the agreement is one round: every rank sends a
 * token to every other and receives one from each. */
#define AGREE_RADIX 8

/* What one rank's tokens carry instead of nothing (one round only): its
 * bytes at src, which every other rank receives at dst. */
struct agreeData {
  int from;
  const void *src;
  void *dst;
  size_t bytes;
};

/* The agreement every rank of a rooted collective takes part in under
 * CHORUS_CHECK (agree.c), built before the operation's own tasks, or by a
 * family that folds its data into it (algoFamily.agrees; data non-NULL).
 * ncclInternalError for data with more than AGREE_RADIX ranks. */
ncclResult_t agreeBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d,
                        const struct agreeData *data);

#endif
