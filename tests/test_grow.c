/* ncclCommGetUniqueId + ncclCommGrow, called as NCCL's guide shows: the
 * parent's ranks pass the parent and rank -1 (the coordinator also the id
 * it made), the new ranks no communicator, their rank and the id, which
 * reaches them out of band (here shared memory, as MPI would carry it).
 *   basic       - 3 ranks grow to 5 (coordinator rank 1), 1 to 2, 2 to 7:
 *                 the parent's ranks keep their numbers, AllReduce and
 *                 AllGather on the new communicator are right, the parent
 *                 still works, and both are destroyed.
 *   nonblocking - config.blocking = 0 on every rank: ncclInProgress, then
 *                 success through ncclCommGetAsyncError.
 *   noid        - the coordinator makes the id but passes NULL: every
 *                 parent rank fails with ncclInvalidUsage saying so, and
 *                 the new ranks are refused at the root, all within 2 s.
 *   size        - the parent's ranks ask for different sizes: the same.
 *   clash       - a new rank claims a parent's rank: every rank fails
 *                 within 2 s (the root refuses the second claim).
 *   group       - one thread drives a 2-rank parent and 2 new ranks in one
 *                 ncclGroupStart/End (as ncclCommInitAll's users do).
 *   args        - bad arguments: ncclInvalidArgument at once, nothing
 *                 changed; an unused id's root ends when replaced or when
 *                 the communicator is destroyed.
 *   test_grow <case> */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

struct shared {
  ncclUniqueId growId;
  int published;
  int newRanksDone; /* the fault cases' parent ranks stay until then, as a
                       coordinator's process does (its root refuses) */
};
static struct shared *sh;

enum fault { none, noId, sizes, clash };
struct plan {
  int parentRanks, total, coord, blocking;
  enum fault fault;
};

static int waitComm(ncclComm_t comm, ncclResult_t *res, double t0) {
  while (*res == ncclInProgress && nowSec() - t0 < 10) NCCLCHECK(ncclCommGetAsyncError(comm, res));
  return 0;
}

/* AllReduce and AllGather over comm, every rank contributing by its rank. */
static int checkColls(ncclComm_t comm, int rank, int n) {
  enum { N = 777 };
  float *in = guardAlloc(N * sizeof(float)), *out = guardAlloc((size_t)N * n * sizeof(float));
  for (int i = 0; i < N; i++) in[i] = (float)(rank * 100 + i % 7);
  NCCLCHECK(ncclAllReduce(in, out, N, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < N; i++) {
    float want = (float)(100 * n * (n - 1) / 2 + n * (i % 7));
    EXPECT(out[i] == want, "rank %d of %d: AllReduce element %d is %g, expected %g", rank, n, i, out[i], want);
  }
  NCCLCHECK(ncclAllGather(in, out, N, ncclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    for (int i = 0; i < N; i++)
      EXPECT(out[r * N + i] == (float)(r * 100 + i % 7), "rank %d of %d: AllGather block %d element %d", rank, n, r,
             i);
  EXPECT(!guardCheck(in) && !guardCheck(out), "rank %d: guard bytes", rank);
  guardFree(in);
  guardFree(out);
  return 0;
}

static int expectFailed(ncclResult_t res, int rank, double t0, const char *want) {
  EXPECT(res != ncclSuccess && res != ncclInProgress, "rank %d: the grow succeeded", rank);
  EXPECT(nowSec() - t0 < 2.0, "rank %d: failing took %.2f s", rank, nowSec() - t0);
  const char *err = ncclGetLastError(NULL);
  EXPECT(strstr(err, want), "rank %d: last error '%s' does not say '%s'", rank, err, want);
  return 0;
}

static int growRank(int rank, int total, ncclUniqueId parentId, void *arg) {
  const struct plan *p = arg;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = p->blocking;
  ncclComm_t parent = NULL, grown = NULL;
  ncclResult_t res;
  double t0;
  if (rank < p->parentRanks) {
    NCCLCHECK(ncclCommInitRank(&parent, p->parentRanks, parentId, rank));
    ncclUniqueId id;
    if (rank == p->coord) {
      NCCLCHECK(ncclCommGetUniqueId(parent, &id));
      sh->growId = id;
      __atomic_store_n(&sh->published, 1, __ATOMIC_RELEASE);
    }
    int n = p->fault == sizes && rank == 0 ? total + 1 : total;
    const ncclUniqueId *passed = rank == p->coord && p->fault != noId ? &id : NULL;
    t0 = nowSec();
    res = ncclCommGrow(parent, n, passed, -1, &grown, p->blocking ? NULL : &config);
    if (p->fault == noId || p->fault == sizes) {
      EXPECT(res == ncclInvalidUsage, "rank %d: the grow gave %s", rank, ncclGetErrorString(res));
      if (expectFailed(res, rank, t0, p->fault == noId ? "but no rank of the parent passed one" : "asks for"))
        return 1;
      EXPECT(grown == NULL, "rank %d: a failed grow left a communicator", rank);
      if (checkColls(parent, rank, p->parentRanks)) return 1; /* the parent is untouched */
      while (__atomic_load_n(&sh->newRanksDone, __ATOMIC_ACQUIRE) < total - p->parentRanks && nowSec() - t0 < 5)
        usleep(1000);
      NCCLCHECK(ncclCommDestroy(parent));
      return 0;
    }
  } else {
    t0 = nowSec();
    while (!__atomic_load_n(&sh->published, __ATOMIC_ACQUIRE)) {
      EXPECT(nowSec() - t0 < 10, "rank %d: the grow id was never published", rank);
      usleep(1000);
    }
    ncclUniqueId id = sh->growId;
    int want = p->fault == clash && rank == total - 1 ? 0 : rank;
    t0 = nowSec();
    res = ncclCommGrow(NULL, total, &id, want, &grown, p->blocking ? NULL : &config);
    if (p->fault == noId || p->fault == sizes) {
      if (res == ncclInProgress) waitComm(grown, &res, t0);
      int bad = expectFailed(res, rank, t0, "the parent's ranks disagree");
      __atomic_fetch_add(&sh->newRanksDone, 1, __ATOMIC_RELEASE);
      return bad;
    }
  }
  if (p->fault == clash) {
    if (res == ncclInProgress) waitComm(grown, &res, t0);
    if (expectFailed(res, rank, t0, "was claimed by")) return 1;
    if (!parent) {
      __atomic_fetch_add(&sh->newRanksDone, 1, __ATOMIC_RELEASE);
      return 0;
    }
    /* The root lives in the coordinator's process: it stays until the new
     * ranks have heard the refusal. */
    while (__atomic_load_n(&sh->newRanksDone, __ATOMIC_ACQUIRE) < total - p->parentRanks && nowSec() - t0 < 5)
      usleep(1000);
    NCCLCHECK(ncclCommDestroy(parent));
    return 0;
  }
  if (!p->blocking) {
    EXPECT(res == ncclInProgress || res == ncclSuccess, "rank %d: nonblocking grow gave %s", rank,
           ncclGetErrorString(res));
    if (waitComm(grown, &res, t0)) return 1;
  }
  EXPECT(res == ncclSuccess, "rank %d: the grow gave %s", rank, ncclGetErrorString(res));
  int count = -1, me = -1;
  NCCLCHECK(ncclCommCount(grown, &count));
  NCCLCHECK(ncclCommUserRank(grown, &me));
  EXPECT(count == total && me == rank, "rank %d: the grown communicator has count %d, rank %d", rank, count, me);
  if (checkColls(grown, rank, total)) return 1;
  if (parent) {
    if (checkColls(parent, rank, p->parentRanks)) return 1;
    NCCLCHECK(ncclCommDestroy(parent));
  }
  NCCLCHECK(ncclCommDestroy(grown));
  return 0;
}

static int run(struct plan p) {
  memset(sh, 0, sizeof *sh);
  ncclUniqueId id;
  if (testCommId(&id)) return 1;
  return runRanksWithId(p.total, id, growRank, &p, 60);
}

/* One thread, every rank: the grows meet at ncclGroupEnd. */
static int group(void) {
  enum { P = 2, N = 4 };
  ncclComm_t parent[P], grown[N];
  NCCLCHECK(ncclCommInitAll(parent, P, NULL));
  ncclUniqueId id;
  NCCLCHECK(ncclCommGetUniqueId(parent[1], &id));
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < P; r++) NCCLCHECK(ncclCommGrow(parent[r], N, r == 1 ? &id : NULL, -1, &grown[r], NULL));
  for (int r = P; r < N; r++) NCCLCHECK(ncclCommGrow(NULL, N, &id, r, &grown[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  float in[N][5], out[N][5];
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < N; r++) {
    for (int i = 0; i < 5; i++) in[r][i] = (float)(r * 10 + i);
    NCCLCHECK(ncclAllReduce(in[r], out[r], 5, ncclFloat, ncclSum, grown[r], NULL));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < N; r++) {
    int count = 0, me = -1;
    NCCLCHECK(ncclCommCount(grown[r], &count));
    NCCLCHECK(ncclCommUserRank(grown[r], &me));
    EXPECT(count == N && me == r, "grown communicator %d: count %d rank %d", r, count, me);
    for (int i = 0; i < 5; i++)
      EXPECT(out[r][i] == (float)(60 + 4 * i), "rank %d: element %d is %g", r, i, out[r][i]);
  }
  for (int r = 0; r < P; r++) NCCLCHECK(ncclCommDestroy(parent[r]));
  for (int r = 0; r < N; r++) NCCLCHECK(ncclCommDestroy(grown[r]));
  return 0;
}

/* Bad arguments on a 1-rank communicator, in one process. */
static int args(void) {
  ncclUniqueId id, id2;
  ncclComm_t comm = NULL, grown = NULL;
  NCCLCHECK(ncclGetUniqueId(&id));
  NCCLCHECK(ncclCommInitRank(&comm, 1, id, 0));
  double t0 = nowSec();
  ncclConfig_t unset; /* not from NCCL_CONFIG_INITIALIZER */
  memset(&unset, 0, sizeof unset);
  ncclResult_t r[8] = {
      ncclCommGrow(comm, 1, NULL, -1, &grown, NULL),   /* not larger */
      ncclCommGrow(comm, 2, NULL, 0, &grown, NULL),    /* a parent rank passes a rank */
      ncclCommGrow(comm, 2, NULL, -1, NULL, NULL),     /* no newcomm */
      ncclCommGrow(NULL, 2, NULL, 1, &grown, NULL),    /* a new rank without the id */
      ncclCommGetUniqueId(comm, NULL),                 /* no id */
      ncclCommGetUniqueId(NULL, &id2),                 /* no communicator */
      ncclCommGrow(comm, 2, NULL, -1, &grown, &unset), /* a config never initialized */
      ncclSuccess,
  };
  for (int i = 0; i < 7; i++)
    EXPECT(r[i] == ncclInvalidArgument, "bad call %d gave %s", i, ncclGetErrorString(r[i]));
  EXPECT(grown == NULL && nowSec() - t0 < 1.0, "refusals left a communicator or took %.2f s", nowSec() - t0);
  float x = 3, y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
  EXPECT(y == 3, "the communicator changed: %g", y);
  /* An id replaced by a second one, and one never used, end their roots
   * rather than listen until the timeout. */
  NCCLCHECK(ncclCommGetUniqueId(comm, &id));
  NCCLCHECK(ncclCommGetUniqueId(comm, &id2));
  int replacedGone = idRootGone(&id, 2), newGone = idRootGone(&id2, 0);
  EXPECT(replacedGone && !newGone, "replaced id refuses %d, new id refuses %d", replacedGone, newGone);
  NCCLCHECK(ncclCommDestroy(comm));
  EXPECT(idRootGone(&id2, 2), "the root of an unused id still listens after ncclCommDestroy");
  return 0;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  setenv("CHORUS_TIMEOUT", "10", 1);
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  int failed;
  if (!strcmp(c, "basic"))
    failed = run((struct plan){3, 5, 1, 1, none}) + run((struct plan){1, 2, 0, 1, none}) +
             run((struct plan){2, 7, 0, 1, none});
  else if (!strcmp(c, "nonblocking")) failed = run((struct plan){2, 4, 1, 0, none});
  else if (!strcmp(c, "noid")) failed = run((struct plan){3, 5, 2, 1, noId});
  else if (!strcmp(c, "size")) failed = run((struct plan){3, 5, 1, 1, sizes});
  else if (!strcmp(c, "clash")) failed = run((struct plan){2, 4, 0, 1, clash});
  else if (!strcmp(c, "args")) failed = args();
  else if (!strcmp(c, "group")) failed = group();
  else {
    fprintf(stderr, "usage: test_grow basic|nonblocking|noid|size|clash|group|args\n");
    return 2;
  }
  printf("test_grow %s: %s\n", c, failed ? "FAILED" : "passed");
  return failed != 0;
}
