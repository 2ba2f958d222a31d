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
#include "api/group.h"
#include "bootstrap/oob.h"
#include "core/err.h"
#include "core/log.h"
#include "core/wait.h"

struct shrinkHandoff {
  struct bootstrapHandle h;
  uint64_t digest; /* of the exclude list: survivors must agree on it */
  int32_t nranks;
};

static uint64_t excludeDigest(const char *excluded, int n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < n; i++) h = (h ^ (unsigned char)(excluded[i] ? 1 : 0)) * 0x100000001b3ull;
  return h;
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
   * excluded ranks may well be dead. */
  struct waitState w;
  waitBegin(&w, NULL, NULL, NULL, "ncclCommShrink handoff");
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
    if (hand.digest != digest || hand.nranks != m) {
      WARN("ncclCommShrink : rank %d excludes other ranks than rank %d does (%d vs %d survivors)", me, leader, m,
           hand.nranks);
      return ncclInvalidArgument;
    }
  }
  memset(&j->id, 0, sizeof j->id);
  memcpy(j->id.internal, &hand.h, sizeof hand.h);
  j->nranks = m;
  j->rank = newRank;
  INFO(subsysInit, "ncclCommShrink : rank %d becomes rank %d of %d", me, newRank, m);
  return commInit(j->comm, m, &j->id, newRank, parent->cudaDev, j->blocking);
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
         ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  CHECK(commCheck(comm, "ncclCommShrink"));
  if (newcomm == NULL) {
    WARN("ncclCommShrink : newcomm argument is NULL");
    return ncclInvalidArgument;
  }
  if (excludeRanksList == NULL || excludeRanksCount <= 0) {
    WARN("ncclCommShrink : excludeRanksList is %s and excludeRanksCount %d (a list of at least one rank is needed)",
         excludeRanksList ? "set" : "NULL", excludeRanksCount);
    return ncclInvalidArgument;
  }
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    WARN("ncclCommShrink : invalid shrinkFlags %d (NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT)", shrinkFlags);
    return ncclInvalidArgument;
  }
  if (config && config->magic != NCCL_API_MAGIC) {
    WARN("ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  if (__atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE) == ncclInProgress) {
    WARN("ncclCommShrink : rank %d: the communicator is still initializing", comm->rank);
    return ncclInvalidArgument;
  }
  char *excluded = calloc((size_t)comm->nranks, 1);
  if (!excluded) return ncclSystemError;
  for (int i = 0; i < excludeRanksCount; i++) {
    int r = excludeRanksList[i];
    if (r < 0 || r >= comm->nranks) {
      WARN("ncclCommShrink : excludeRanksList[%d] = %d is not a rank of this communicator (nranks %d)", i, r,
           comm->nranks);
      free(excluded);
      return ncclInvalidArgument;
    }
    excluded[r] = 1;
  }
  if (excluded[comm->rank]) {
    WARN("ncclCommShrink : rank %d is in excludeRanksList; excluded ranks must not call ncclCommShrink", comm->rank);
    free(excluded);
    return ncclInvalidArgument;
  }
  if (shrinkFlags == NCCL_SHRINK_ABORT) {
    /* End what still runs on the parent, then let it be used again (for
     * the handoff, and for ncclCommDestroy). */
    __atomic_store_n(&comm->abortFlag, 1, __ATOMIC_RELEASE);
    commWaitIdle(comm);
    __atomic_store_n(&comm->abortFlag, 0, __ATOMIC_RELEASE);
  }
  int blocking = comm->blocking;
  if (config && config->size >= offsetof(ncclConfig_t, cgaClusterSize) && config->blocking != NCCL_CONFIG_UNDEF_INT)
    blocking = config->blocking != 0;
  *newcomm = NULL;
  struct initJob job = {newcomm, 0, 0, comm->cudaDev, blocking, {{0}}, ncclSuccess, comm, 0, 0, excluded, shrinkFlags};
  return groupInit(&job);
}
