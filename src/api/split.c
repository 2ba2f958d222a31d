/* ncclCommSplit: the parent's ranks agree, over the parent's bootstrap, on
 * who goes with whom (color) and in which order (key); the first rank of
 * each new communicator starts its rendezvous and hands the id to the
 * others. Inside a group the split runs at ncclGroupEnd, concurrently with
 * the other ranks of this process, as NCCL allows. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/initjob.h"
#include "core/err.h"
#include "core/log.h"

struct splitEntry {
  int color, key, rank;
};

static int byKeyThenRank(const void *a, const void *b) {
  const struct splitEntry *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank - y->rank;
}

ncclResult_t commSplitRun(struct initJob *j) {
  struct ncclComm *parent = j->parent;
  int n = parent->nranks, me = parent->rank;
  struct splitEntry *all = calloc(n, sizeof *all), *members = calloc(n, sizeof *members);
  ncclResult_t res = ncclSuccess;
  if (!all || !members) {
    res = ncclSystemError;
    goto out;
  }
  all[me] = (struct splitEntry){j->color, j->key, me};
  CHECKGOTO(bootstrapAllGather(&parent->boot, all, sizeof *all), res, out);
  *j->comm = NULL;
  if (j->color == NCCL_SPLIT_NOCOLOR) goto out;
  int m = 0;
  for (int i = 0; i < n; i++)
    if (all[i].color == j->color) members[m++] = all[i];
  qsort(members, m, sizeof *members, byKeyThenRank);
  int newRank = 0;
  while (members[newRank].rank != me) newRank++;
  struct bootstrapHandle h;
  if (newRank == 0) {
    CHECKGOTO(bootstrapNewRoot(&h), res, out);
    for (int i = 1; i < m; i++) CHECKGOTO(bootstrapSend(&parent->boot, members[i].rank, &h, sizeof h), res, out);
  } else {
    CHECKGOTO(bootstrapRecv(&parent->boot, members[0].rank, &h, sizeof h), res, out);
  }
  memset(&j->id, 0, sizeof j->id);
  memcpy(j->id.internal, &h, sizeof h);
  j->nranks = m;
  j->rank = newRank;
  INFO(subsysInit, "ncclCommSplit : rank %d (color %d key %d) becomes rank %d of %d", me, j->color, j->key, newRank, m);
  struct commOrigin origin = {"ncclCommSplit", parent, j->color, j->key, 0, &j->config,
                              __atomic_add_fetch(&parent->childCount, 1, __ATOMIC_RELAXED), j->setup};
  int dev = parent->cudaDev;
  res = commInitChild(j, m, newRank, dev, &origin);
out:
  free(all);
  free(members);
  return res;
}
