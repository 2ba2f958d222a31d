/* ncclCommShrink: a communicator of the parent's ranks minus the excluded
 * ones (typically dead), in the parent's order. The first survivor starts a
 * fresh rendezvous and hands its id, with a digest of the exclude list, to
 * the other survivors over the parent's bootstrap mesh; only the survivors
 * take part, so dead ranks cannot hold it up. NCCL_SHRINK_ABORT first ends
 * what is still running on the parent (as ncclCommAbort would, but the
 * parent stays usable for ncclCommDestroy). */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/initjob.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/oob.h"
#include "core/err.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/wait.h"

struct shrinkHandoff {
  struct bootstrapHandle h;
  uint64_t digest; /* of the exclude list: survivors must agree on it */
  int32_t nranks;
};

static uint64_t excludeDigest(const char *excluded, int n) { /* entries 0 or 1 (ncclCommShrink) */
  return fnv1aBytes(FNV1A_INIT, excluded, (size_t)n);
}

ncclResult_t commShrinkRun(struct initJob *j) {
  struct ncclComm *parent = j->parent;
  struct bootstrap *b = &parent->boot;
  int n = parent->nranks, me = parent->rank, leader = -1, newRank = 0, m = 0;
  for (int i = 0; i < n; i++) {
    if (j->excluded[i]) continue;
    if (leader < 0) leader = i;
    if (i == me) newRank = m;
    m++;
  }
  uint64_t digest = excludeDigest(j->excluded, n);
  /* Only the peer each message goes to or comes from matters: the
   * excluded ranks may well be dead, so no bootstrapLiveness, which
   * fails for any gone peer (oobRecvData and oobSendData look at theirs).
   * ncclCommAbort of the parent from another thread ends the wait (it
   * waits for this job: initJobParentDone). */
  struct waitState w;
  waitBegin(&w, &parent->abortFlag, NULL, NULL, "ncclCommShrink handoff");
  struct shrinkHandoff hand;
  memset(&hand, 0, sizeof hand);
  if (!b->oob) return ncclInternalError;
  if (me == leader) {
    CHECK(bootstrapNewRoot(&hand.h));
    hand.digest = digest;
    hand.nranks = m;
    for (int i = leader + 1; i < n; i++)
      if (!j->excluded[i]) CHECK(oobSendData(b, i, &hand, sizeof hand, &w));
  } else {
    CHECK(oobRecvData(b, leader, &hand, sizeof hand, &w));
  }
  memset(&j->id, 0, sizeof j->id);
  memcpy(j->id.internal, &hand.h, sizeof hand.h);
  if (hand.digest != digest || hand.nranks != m) { /* the leader's own always agree */
    WARN("ncclCommShrink : rank %d excludes other ranks than rank %d does (%d vs %d survivors)", me, leader, m,
         hand.nranks);
    /* The others are in the new rendezvous by now: its root refuses them. */
    commReportDisagreement(&j->id, hand.nranks);
    return ncclInvalidArgument;
  }
  j->nranks = m;
  j->rank = newRank;
  INFO(subsysInit, "ncclCommShrink : rank %d becomes rank %d of %d", me, newRank, m);
  struct commOrigin origin = {"ncclCommShrink", parent, 0, me, 0, &j->config};
  __atomic_fetch_add(&parent->childCount, 1, __ATOMIC_RELAXED);
  int dev = parent->cudaDev;
  initJobParentDone(j);
  return commInit(j->comm, m, &j->id, newRank, dev, j->blocking, &origin);
}
