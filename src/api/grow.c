/* ncclCommGrow on the parent's ranks: they learn the id over the parent's
 * bootstrap from the one rank that passes it (the coordinator, which made
 * it with ncclCommGetUniqueId and handed it to the new ranks out of band),
 * check that they all ask for the same size, and meet the new ranks at the
 * id's root keeping their numbers. The root itself refuses a new rank that
 * claims a taken number or another size. When the parent's ranks disagree
 * they all fail, and the coordinator's root refuses the new ranks waiting
 * there, so that nobody waits out the timeout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/initjob.h"
#include "core/err.h"
#include "core/log.h"

struct growEntry {
  int32_t nranks;
  int32_t passed; /* this rank passed a unique id (the coordinator) */
  int32_t made;   /* it made one with ncclCommGetUniqueId */
  int32_t pad;
  struct bootstrapHandle id; /* the one it passed */
};

static int growIdPassed(const ncclUniqueId *id) {
  static const ncclUniqueId none;
  return memcmp(id, &none, sizeof none) != 0;
}

/* What the parent's ranks disagree on (every rank reads the same table, so
 * they all say the same), or "" when they agree; *coord: the coordinator. */
static void growDisagreement(const struct growEntry *all, int n, int *coord, char *why, size_t len) {
  why[0] = 0;
  int c = 0;
  while (c < n && !all[c].passed) c++;
  *coord = c;
  if (c == n) {
    int maker = 0;
    while (maker < n && !all[maker].made) maker++;
    if (maker < n)
      snprintf(why, len, "rank %d made a unique id with ncclCommGetUniqueId but no rank of the parent passed one "
               "(the coordinator passes it, the others NULL)", maker);
    else
      snprintf(why, len, "no rank of the parent passed a unique id (the coordinator passes the one "
               "ncclCommGetUniqueId gave it, the others NULL)");
    return;
  }
  for (int i = c + 1; i < n; i++)
    if (all[i].passed && memcmp(&all[i].id, &all[c].id, sizeof all[c].id) != 0) {
      snprintf(why, len, "ranks %d and %d of the parent passed different unique ids (only the coordinator passes "
               "one)", c, i);
      return;
    }
  for (int i = 0; i < n; i++)
    if (all[i].nranks != all[c].nranks) {
      snprintf(why, len, "rank %d of the parent asks for %d ranks, rank %d for %d", i, all[i].nranks, c,
               all[c].nranks);
      return;
    }
}

ncclResult_t commGrowRun(struct initJob *j) {
  struct ncclComm *parent = j->parent;
  int n = parent->nranks, me = parent->rank;
  struct growEntry *all = calloc(n, sizeof *all);
  if (!all) return ncclSystemError;
  all[me].nranks = j->nranks;
  all[me].passed = growIdPassed(&j->id);
  all[me].made = parent->growIdMade;
  if (all[me].passed) memcpy(&all[me].id, j->id.internal, sizeof all[me].id);
  ncclResult_t res = bootstrapAllGather(&parent->boot, all, sizeof *all);
  if (res != ncclSuccess) {
    free(all);
    return res;
  }
  int coord;
  char why[200];
  growDisagreement(all, n, &coord, why, sizeof why);
  struct bootstrapHandle id;
  if (!why[0]) id = all[coord].id;
  free(all);
  if (why[0]) {
    WARN("ncclCommGrow : %s", why);
    /* New ranks may wait at the root of either id this rank knows. */
    char told[240];
    snprintf(told, sizeof told, "ncclCommGrow: the parent's ranks disagree: %s", why);
    if (parent->growIdMade) bootstrapRefuseRoot(&parent->growId, told);
    struct bootstrapHandle mine;
    memcpy(&mine, j->id.internal, sizeof mine);
    if (growIdPassed(&j->id)) bootstrapRefuseRoot(&mine, told);
    return ncclInvalidUsage;
  }
  if (parent->growIdMade && memcmp(&parent->growId, &id, sizeof id) == 0) parent->growIdMade = 0; /* used */
  memset(&j->id, 0, sizeof j->id);
  memcpy(j->id.internal, &id, sizeof id);
  INFO(subsysInit, "ncclCommGrow : rank %d of %d keeps its rank in a communicator of %d (rank %d coordinates)", me, n,
       j->nranks, coord);
  struct commOrigin origin = {"ncclCommGrow", parent, 0, me, 0, &j->config,
                              __atomic_add_fetch(&parent->childCount, 1, __ATOMIC_RELAXED), j->setup};
  int dev = parent->cudaDev;
  initJobParentDone(j);
  return commInit(j->comm, j->nranks, &j->id, me, dev, j->blocking, &origin);
}
