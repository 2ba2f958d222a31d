/* The agreement of a rooted collective (CHORUS_CHECK). Broadcast, Reduce,
 * Gather and Scatter leave ranks that only send or only receive, so ranks
 * that disagree on the root (or count, type, operation) could all finish
 * without anyone reading a mismatched slot, or all wait for data nobody
 * sends. So every rank also takes part in a dissemination exchange of
 * tokens on the point-to-point lanes, of radix AGREE_RADIX: in round j
 * (distance unit u = AGREE_RADIX^j) it sends a token to rank + m*u and
 * receives one from rank - m*u for m = 1 .. AGREE_RADIX-1, each round's
 * sends after all of the previous round's receives. A token's slot carries
 * the descriptor, which the receiver compares with its own, so a rank
 * finishes only when every rank's descriptor matched along a chain of such
 * comparisons to its own: either all ranks agree, or none finishes (the one
 * that sees the mismatch tells the others). Up to AGREE_RADIX ranks that is
 * one round with no waiting between sends and receives, which matters when
 * ranks share cores. The data moves on the channel lanes meanwhile; on a
 * lane both use (Gather, Scatter) it follows the tokens. With one round
 * (n <= AGREE_RADIX) one rank's tokens can carry the data itself (a
 * one-hop Broadcast's: agreeData), so that the operation is the agreement
 * and nothing more. */
#include "algo/build.h"

static const uint64_t token; /* what a token carries: nothing but its slot's descriptor */

ncclResult_t agreeBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d,
                        const struct agreeData *data) {
  int n = c->nranks, r = c->rank, lastRecv = -1;
  int carry = data != NULL; /* a count of 0 is never built (coll.c), so a carrying token has bytes */
  if (carry && n > AGREE_RADIX) return ncclInternalError; /* a second round would pass it on: not built */
  for (long unit = 1; unit < n; unit *= AGREE_RADIX) {
    int roundAfter = lastRecv; /* this round's sends wait for all of the last round's receives */
    for (int m = 1; m < AGREE_RADIX && m * unit < n; m++) {
      int to = mod(r + (int)(m * unit), n);
      if (carry && r == data->from)
        CHECK(p2pTask(s, c, d, 1, to, data->src, data->bytes));
      else
        CHECK(p2pTask(s, c, d, 1, to, &token, sizeof token));
      s->tasks[s->ntasks - 1].dep2 = roundAfter;
    }
    /* Before a further round, receives one after another, so that the
     * last one done means all are; the last round's in any order (the
     * operation ends when all are done). */
    int more = unit * AGREE_RADIX < n;
    for (int m = 1; m < AGREE_RADIX && m * unit < n; m++) {
      int from = mod(r - (int)(m * unit), n);
      if (carry && from == data->from)
        CHECK(p2pTask(s, c, d, 0, from, data->dst, data->bytes));
      else
        CHECK(p2pTask(s, c, d, 0, from, NULL, sizeof token)); /* no destination: only its descriptor counts */
      if (more) s->tasks[s->ntasks - 1].dep2 = lastRecv;
      lastRecv = s->ntasks - 1;
    }
  }
  return ncclSuccess;
}
