/* Mismatched operations end in ncclInvalidUsage on every rank, never a hang
 * or an overrun (CHORUS_CHECK, on by default). One rank calls something else
 * than the others; each case runs on 3 ranks:
 *   count dtype op bitwise root coll p2p tag every    test_mismatch <case>
 * (bitwise: chorusRedOpCreateBitwise's BAND, and BOR on the odd rank)
 * (every: each collective and Send/Recv, by count and by datatype)
 * (tag: a ring of chorusSendTag/chorusRecvTag, one receive with another tag)
 * (roots: Broadcast, Reduce, Gather and Scatter with the last rank's root
 * another, on 2, 3 and 5 ranks)
 * (zeros: each collective and Send/Recv with the last rank's count 0, a
 * no-op it passes at once: the others fail in that call, it in its next)
 * Each rank's mismatched collective fails within 2 s, in that call, with a
 * WARN that names both calls; of mismatched Send/Recv (p2p, tag) a rank
 * whose part ended before anyone noticed succeeds and then its next call
 * fails. Guard bytes around every buffer stay intact. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

static volatile int *arrived; /* a barrier across the forked ranks */

static void barrier(int n, int round) {
  __atomic_add_fetch(&arrived[0], 1, __ATOMIC_SEQ_CST);
  for (int i = 0; i < 10000 && __atomic_load_n(&arrived[0], __ATOMIC_SEQ_CST) < n * round; i++) usleep(1000);
}

#define COUNT 1000
static const char *which;

/* The call that rank `odd` makes differently. */
static ncclResult_t oddCall(int rank, int n, float *in, float *out, ncclComm_t comm) {
  int odd = rank == n - 1;
  if (strcmp(which, "count") == 0) return ncclAllReduce(in, out, odd ? COUNT - 1 : COUNT, ncclFloat, ncclSum, comm, NULL);
  if (strcmp(which, "dtype") == 0) return ncclAllReduce(in, out, COUNT, odd ? ncclInt32 : ncclFloat, ncclSum, comm, NULL);
  if (strcmp(which, "op") == 0) return ncclAllReduce(in, out, COUNT, ncclFloat, odd ? ncclMax : ncclSum, comm, NULL);
  if (strcmp(which, "bitwise") == 0) {
    ncclRedOp_t op;
    NCCLCHECK(chorusRedOpCreateBitwise(&op, odd ? chorusBor : chorusBand, ncclInt32, comm));
    ncclResult_t res = ncclAllReduce(in, out, COUNT, ncclInt32, op, comm, NULL);
    NCCLCHECK(ncclRedOpDestroy(op, comm));
    return res;
  }
  if (strcmp(which, "root") == 0) return ncclBroadcast(in, out, COUNT, ncclFloat, odd ? 1 : 0, comm, NULL);
  if (strcmp(which, "skipped") == 0) { /* a count-0 call only this rank makes (NCCL drops it; chorus numbers it) */
    if (odd) NCCLCHECK(ncclAllReduce(in, out, 0, ncclFloat, ncclSum, comm, NULL));
    return ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comm, NULL);
  }
  if (strcmp(which, "coll") == 0) {
    if (odd) return ncclReduce(in, out, COUNT, ncclFloat, ncclSum, 0, comm, NULL);
    return ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comm, NULL);
  }
  if (strcmp(which, "tag") == 0) {
    ncclGroupStart();
    chorusSendTag(in, COUNT, ncclFloat, (rank + 1) % n, 7, comm, NULL);
    chorusRecvTag(out, COUNT, ncclFloat, (rank + n - 1) % n, rank == 0 ? 8 : 7, comm, NULL);
    return ncclGroupEnd();
  }
  /* p2p: a ring of sends, the last rank receives one element less */
  ncclGroupStart();
  ncclSend(in, COUNT, ncclFloat, (rank + 1) % n, comm, NULL);
  ncclRecv(out, rank == 0 ? COUNT - 1 : COUNT, ncclFloat, (rank + n - 1) % n, comm, NULL);
  return ncclGroupEnd();
}

static int mismatchRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float *in = guardAlloc(COUNT * sizeof(float)), *out = guardAlloc(COUNT * sizeof(float));
  for (int i = 0; i < COUNT; i++) in[i] = (float)(rank + 1);
  /* A zero-count call is a no-op that every rank makes: it keeps its number (#1), as in NCCL. */
  NCCLCHECK(ncclAllReduce(in, out, 0, ncclFloat, ncclSum, comm, NULL));
  NCCLCHECK(ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comm, NULL)); /* all agree on #2 */
  EXPECT(out[0] == n * (n + 1) / 2, "warm-up result %g", out[0]);
  double t0 = nowSec();
  ncclResult_t res = oddCall(rank, n, in, out, comm);
  double t = nowSec() - t0;
  int p2p = strcmp(which, "tag") == 0 || strcmp(which, "p2p") == 0;
  EXPECT(p2p || res != ncclSuccess, "rank %d: the mismatched collective succeeded", rank);
  if (res == ncclSuccess) { /* a send was done before anyone saw the mismatch: the next call says so */
    t0 = nowSec();
    res = ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comm, NULL);
    t = nowSec() - t0;
  }
  EXPECT(res == ncclInvalidUsage, "rank %d: got %s", rank, ncclGetErrorString(res));
  EXPECT(t < 2.0, "rank %d: the error took %.2f s", rank, t);
  const char *err = ncclGetLastError(comm);
  EXPECT(strstr(err, "called") != NULL && strstr(err, "but rank") != NULL, "rank %d: last error '%s'", rank, err);
  if (strcmp(which, "count") == 0 || strcmp(which, "dtype") == 0 || strcmp(which, "op") == 0 ||
      strcmp(which, "bitwise") == 0)
    EXPECT(strstr(err, "AllReduce #3 ("), "rank %d: last error '%s' does not name AllReduce #3", rank, err);
  if (strcmp(which, "bitwise") == 0)
    EXPECT(strstr(err, "int32, band)") && strstr(err, "int32, bor)"), "rank %d: last error '%s' names not both", rank,
           err);
  if (strcmp(which, "tag") == 0)
    EXPECT(strstr(err, "tag 7") && strstr(err, "tag 8"), "rank %d: last error '%s' names not both tags", rank, err);
  if (strcmp(which, "skipped") == 0)
    EXPECT(strstr(err, "the same call under another number") && strstr(err, "count-0"),
           "rank %d: last error '%s' does not say the calls differ only in their numbers", rank, err);
  EXPECT(guardCheck(in) == 0 && guardCheck(out) == 0, "rank %d: guard bytes overwritten", rank);
  fprintf(stderr, "rank %d: %s after %.0f ms: %s\n", rank, ncclGetErrorString(res), t * 1e3, err);
  char fault[64];
  snprintf(fault, sizeof fault, "mismatched %s on one rank", which);
  faultTime(fault, res, t * 1e3);
  /* Later calls fail at once. */
  res = ncclAllReduce(in, out, COUNT, ncclFloat, ncclSum, comm, NULL);
  EXPECT(res == ncclInvalidUsage, "rank %d: a later call got %s", rank, ncclGetErrorString(res));
  barrier(n, 1); /* nobody aborts (and looks dead) before everyone has seen the mismatch */
  NCCLCHECK(ncclCommAbort(comm));
  guardFree(in);
  guardFree(out);
  return 0;
}

/* Every collective, and Send/Recv, with the last rank's count or datatype
 * different: each on a communicator split off for it (a mismatch fails the
 * communicator), every rank must end with ncclInvalidUsage naming both calls. */
enum { mAllReduce, mBroadcast, mReduce, mAllGather, mReduceScatter, mAlltoAll, mGather, mScatter, mSendRecv, mColls };
static const char *mName[mColls] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                    "AlltoAll", "Gather", "Scatter", "Send/Recv"};
static ncclResult_t mCallCount(int coll, size_t cnt, ncclDataType_t t, float *in, float *out, int rank, int n,
                               ncclComm_t c) {
  switch (coll) {
    case mAllReduce: return ncclAllReduce(in, out, cnt, t, ncclSum, c, NULL);
    case mBroadcast: return ncclBroadcast(in, out, cnt, t, 0, c, NULL);
    case mReduce: return ncclReduce(in, out, cnt, t, ncclSum, 0, c, NULL);
    case mAllGather: return ncclAllGather(in, out, cnt, t, c, NULL);
    case mReduceScatter: return ncclReduceScatter(in, out, cnt, t, ncclSum, c, NULL);
    case mAlltoAll: return ncclAlltoAll(in, out, cnt, t, c, NULL);
    case mGather: return ncclGather(in, out, cnt, t, 0, c, NULL);
    case mScatter: return ncclScatter(in, out, cnt, t, 0, c, NULL);
    default:
      ncclGroupStart();
      ncclSend(in, cnt, t, (rank + 1) % n, c, NULL);
      ncclRecv(out, 40, ncclFloat, (rank + n - 1) % n, c, NULL);
      return ncclGroupEnd();
  }
}
static ncclResult_t mCall(int coll, int odd, int byDtype, float *in, float *out, int rank, int n, ncclComm_t c) {
  /* a collective's type must be the same (int32 is float's size); a send
   * and its receive match by bytes, so there a type of another size */
  ncclDataType_t other = coll == mSendRecv ? ncclFloat16 : ncclInt32;
  return mCallCount(coll, odd && !byDtype ? 37 : 40, odd && byDtype ? other : ncclFloat, in, out, rank, n, c);
}

/* A mismatched call (what) on communicator c ended as it must: with
 * ncclInvalidUsage within 2 s, a last error that says why, and the guard
 * bytes intact. */
static int expectMismatch(ncclResult_t res, double t, ncclComm_t c, float *in, float *out, const char *what,
                          int rank) {
  const char *err = ncclGetLastError(c);
  EXPECT(res == ncclInvalidUsage, "%s, rank %d: got %s (%s)", what, rank, ncclGetErrorString(res), err);
  EXPECT(t < 2.0, "%s: the error took %.2f s", what, t);
  EXPECT(strstr(err, "Mismatched operation") || strstr(err, "reported"), "%s: rank %d's error '%s'", what, rank, err);
  EXPECT(!guardCheck(in) && !guardCheck(out), "%s: guard bytes", what);
  return 0;
}

/* One mismatched call of a case list, made on a communicator split off for
 * it: the case fills res (the call's result) and what (its name), and
 * returns nonzero when one of its own checks failed. */
struct mismatchCall {
  int k, rank, n;
  float *in, *out;
  ncclComm_t c;
  ncclResult_t res;
  char what[64];
};
typedef int (*mismatchCase)(struct mismatchCall *m);

/* Runs cases 0..ncases-1 of call, each on its own split of a fresh
 * communicator, with buffers of elems floats: every rank's call must end as
 * expectMismatch says, and everyone has seen it before anyone leaves (leaving
 * looks like a death). */
static int splitCases(int rank, int n, ncclUniqueId id, size_t elems, int ncases, mismatchCase call) {
  ncclComm_t parent;
  NCCLCHECK(ncclCommInitRank(&parent, n, id, rank));
  float *in = guardAlloc(elems * sizeof(float)), *out = guardAlloc(elems * sizeof(float));
  for (size_t i = 0; i < elems; i++) in[i] = 1;
  for (int k = 0; k < ncases; k++) {
    struct mismatchCall m = {k, rank, n, in, out, NULL, ncclSuccess, ""};
    NCCLCHECK(ncclCommSplit(parent, 0, rank, &m.c, NULL));
    double t0 = nowSec();
    if (call(&m) || expectMismatch(m.res, nowSec() - t0, m.c, in, out, m.what, rank)) return 1;
    NCCLCHECK(ncclAllReduce(in, out, 1, ncclFloat, ncclSum, parent, NULL));
    NCCLCHECK(ncclCommAbort(m.c));
  }
  NCCLCHECK(ncclCommDestroy(parent));
  guardFree(in);
  guardFree(out);
  return 0;
}

/* Case k: collective k / 2 with the last rank's count (k even) or datatype
 * (k odd) another than the others'. */
static int everyCase(struct mismatchCall *m) {
  int coll = m->k / 2, byDtype = m->k % 2;
  m->res = mCall(coll, m->rank == m->n - 1, byDtype, m->in, m->out, m->rank, m->n, m->c);
  EXPECT(coll == mSendRecv || m->res != ncclSuccess, "%s by %s, rank %d: the mismatched call succeeded", mName[coll],
         byDtype ? "datatype" : "count", m->rank);
  if (m->res == ncclSuccess) /* a send was done before anyone saw it: the next call says so */
    m->res = ncclAllReduce(m->in, m->out, 1, ncclFloat, ncclSum, m->c, NULL);
  snprintf(m->what, sizeof m->what, "%s by %s", mName[coll], byDtype ? "datatype" : "count");
  return 0;
}

static int everyRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  return splitCases(rank, n, id, 40 * (size_t)n, 2 * mColls, everyCase);
}

/* Case k: collective k (or Send/Recv) with the last rank's count 0. Its
 * call is a no-op, done at once, as in NCCL; the others' wait for its part
 * ends within 2 s (a look at what it last called, or its descriptor of 0),
 * never at the timeout, and the last rank's next call fails too. */
static int zerosCase(struct mismatchCall *m) {
  int odd = m->rank == m->n - 1;
  m->res = mCallCount(m->k, odd ? 0 : 40, ncclFloat, m->in, m->out, m->rank, m->n, m->c);
  EXPECT(odd || m->k == mSendRecv || m->res != ncclSuccess, "%s, rank %d: the call against a count of 0 succeeded",
         mName[m->k], m->rank);
  if (m->res == ncclSuccess) m->res = ncclAllReduce(m->in, m->out, 1, ncclFloat, ncclSum, m->c, NULL);
  snprintf(m->what, sizeof m->what, "%s against a count of 0", mName[m->k]);
  return 0;
}

static int zerosRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  return splitCases(rank, n, id, 40 * (size_t)n, mColls, zerosCase);
}

/* Each rooted collective with the last rank's root another than the
 * others': every rank's call fails (none may finish, none may wait for data
 * nobody sends). */
static int rootsCase(struct mismatchCall *m) {
  static const int colls[] = {mBroadcast, mReduce, mGather, mScatter};
  int root = m->rank == m->n - 1 ? 1 : 0;
  switch (colls[m->k]) {
    case mBroadcast: m->res = ncclBroadcast(m->in, m->out, 40, ncclFloat, root, m->c, NULL); break;
    case mReduce: m->res = ncclReduce(m->in, m->out, 40, ncclFloat, ncclSum, root, m->c, NULL); break;
    case mGather: m->res = ncclGather(m->in, m->out, 40, ncclFloat, root, m->c, NULL); break;
    default: m->res = ncclScatter(m->in, m->out, 40, ncclFloat, root, m->c, NULL); break;
  }
  snprintf(m->what, sizeof m->what, "%s with root %d of %d ranks", mName[colls[m->k]], root, m->n);
  return 0;
}

static int rootsRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  return splitCases(rank, n, id, 40 * (size_t)n, 4, rootsCase);
}

/* Different collectives under one number (the last rank calls Broadcast
 * #1, the others AllReduce #1; then ReduceScatter against AllGather with
 * the same count): their data paths never meet, so no descriptor reaches
 * the other side; the stalled ranks' look at their peers' calls fails
 * every rank within 2 s (it waited out CHORUS_TIMEOUT, 20 s here). */
static int kindsCase(struct mismatchCall *m) {
  int odd = m->rank == m->n - 1;
  if (m->k == 0)
    m->res = odd ? ncclBroadcast(m->in, m->out, 1000, ncclFloat, 0, m->c, NULL)
                 : ncclAllReduce(m->in, m->out, 1000, ncclFloat, ncclSum, m->c, NULL);
  else
    m->res = odd ? ncclAllGather(m->in, m->out, 1000, ncclFloat, m->c, NULL)
                 : ncclReduceScatter(m->in, m->out, 1000, ncclFloat, ncclSum, m->c, NULL);
  snprintf(m->what, sizeof m->what, "%s", m->k ? "ReduceScatter against AllGather" : "AllReduce against Broadcast");
  return 0;
}

static int kindsRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  return splitCases(rank, n, id, 1000 * (size_t)n, 2, kindsCase);
}

int main(int argc, char **argv) {
  which = argc > 1 ? argv[1] : "count";
  arrived = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  setenv("CHORUS_TIMEOUT", "20", 0); /* a hang fails the deadline, not the check */
  int failed;
  if (strcmp(which, "every") == 0) failed = runRanks(3, everyRank, NULL, 60) + runRanks(2, everyRank, NULL, 60);
  else if (strcmp(which, "roots") == 0)
    failed = runRanks(2, rootsRank, NULL, 60) + runRanks(3, rootsRank, NULL, 60) + runRanks(5, rootsRank, NULL, 60);
  else if (strcmp(which, "kinds") == 0) failed = runRanks(2, kindsRank, NULL, 60) + runRanks(4, kindsRank, NULL, 60);
  else if (strcmp(which, "zeros") == 0) failed = runRanks(3, zerosRank, NULL, 60) + runRanks(2, zerosRank, NULL, 60);
  else failed = runRanks(3, mismatchRank, NULL, 30);
  printf("test_mismatch %s: %s\n", which, failed ? "FAILED" : "passed");
  return failed != 0;
}
