/* The collective tables of the perf tools: counts, expected values and
 * bandwidth factors as nccl-tests defines them (doc/PERFORMANCE.md). */
#include <math.h>

#include "common.h"
#include "perf_colls.h"

/* Per-rank count rounded down to 16 bytes, as nccl-tests does. */
static size_t base(size_t count, int n, size_t esz) { return (count / n) & ~(16 / esz - 1); }

/* all_reduce */
static void arCounts(size_t count, int n, size_t *s, size_t *r, size_t *p, size_t *so, size_t *ro) {
  *s = *r = *p = count;
  *so = *ro = 0;
}
static double arExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return perfReduce(n, i, op, in);
}
static void arBw(size_t pc, size_t esz, double sec, int n, double *alg, double *bus) {
  *alg = (double)(pc * esz) / 1e9 / sec;
  *bus = *alg * 2.0 * (n - 1) / n;
}
static ncclResult_t arRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  return ncclAllReduce(s, r, c, t, op, comm, st);
}
const struct testColl allReduceColl = {"all_reduce_perf", 1, 0, arCounts, arExpected, arBw, arRun, NULL, NULL};

/* all_gather: the per-rank size is the sweep size / n (16-byte aligned) */
static _Thread_local size_t perfEltSize; /* set by each driver thread before it asks for counts */
void perfCollsSetEltSize(size_t esz) { perfEltSize = esz; }

static void agCounts(size_t count, int n, size_t *s, size_t *r, size_t *p, size_t *so, size_t *ro) {
  size_t b = base(count, n, perfEltSize);
  *s = b;
  *r = b * n;
  *p = b;
  *so = b; /* in place: sendbuff = recvbuff + rank * b */
  *ro = 0;
}
static double agExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return in((int)(i / pc), i % pc);
}
static void agBw(size_t pc, size_t esz, double sec, int n, double *alg, double *bus) {
  *alg = (double)(pc * esz * n) / 1e9 / sec;
  *bus = *alg * (double)(n - 1) / n;
}
static ncclResult_t agRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  return ncclAllGather(s, r, c, t, comm, st);
}
const struct testColl allGatherColl = {"all_gather_perf", 0, 0, agCounts, agExpected, agBw, agRun, NULL, NULL};

/* reduce_scatter */
static void rsCounts(size_t count, int n, size_t *s, size_t *r, size_t *p, size_t *so, size_t *ro) {
  size_t b = base(count, n, perfEltSize);
  *s = b * n;
  *r = b;
  *p = b;
  *so = 0;
  *ro = b; /* in place: recvbuff = sendbuff + rank * b */
}
static double rsExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return perfReduce(n, rank * pc + i, op, in);
}
static ncclResult_t rsRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  return ncclReduceScatter(s, r, c, t, op, comm, st);
}
const struct testColl reduceScatterColl = {"reduce_scatter_perf", 1, 0, rsCounts, rsExpected, agBw, rsRun, NULL, NULL};

/* broadcast */
static double bcExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return in(root, i);
}
static void oneBw(size_t pc, size_t esz, double sec, int n, double *alg, double *bus) {
  *alg = (double)(pc * esz) / 1e9 / sec;
  *bus = *alg;
}
static ncclResult_t bcRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  return ncclBroadcast(s, r, c, t, root, comm, st);
}
const struct testColl broadcastColl = {"broadcast_perf", 0, 1, arCounts, bcExpected, oneBw, bcRun, NULL, NULL};

/* reduce */
static double rdExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return rank == root ? perfReduce(n, i, op, in) : NAN;
}
static ncclResult_t rdRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  return ncclReduce(s, r, c, t, op, root, comm, st);
}
const struct testColl reduceColl = {"reduce_perf", 1, 1, arCounts, rdExpected, oneBw, rdRun, NULL, NULL};

/* sendrecv: send to rank+1, receive from rank-1 */
static double srExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return in((rank - 1 + n) % n, i);
}
static ncclResult_t srRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  ncclResult_t res;
  if ((res = ncclGroupStart()) != ncclSuccess) return res;
  if ((res = ncclSend(s, c, t, (rank + 1) % n, comm, st)) != ncclSuccess) return res;
  if ((res = ncclRecv(r, c, t, (rank - 1 + n) % n, comm, st)) != ncclSuccess) return res;
  return ncclGroupEnd();
}
const struct testColl sendRecvColl = {"sendrecv_perf", 0, 0, arCounts, srExpected, oneBw, srRun, NULL, NULL};

/* hypercube: an all-gather made of send/recv over masks 1, 2, 4, ... */
/* Step 0: out of place, our own block into place first, in stream order
 * (a send to self), since earlier calls on the stream may still use out;
 * step k: the exchange over mask 1 << (k - 1). */
static int hcSteps(int n) {
  int k = 1;
  while ((1 << (k - 1)) < n) k++;
  return k;
}
static ncclResult_t hcStep(const void *s, void *r, size_t c, ncclDataType_t t, int rank, int n, ncclComm_t comm,
                           cudaStream_t st, int step) {
  size_t esz = perfEltSize;
  char *out = r;
  ncclResult_t res;
  if (step == 0 && (const char *)s == out + rank * c * esz) return ncclSuccess; /* in place */
  int mask = step ? 1 << (step - 1) : 0, peer = rank ^ mask;
  const char *from = step ? out + (rank & ~(mask - 1)) * c * esz : s;
  char *to = out + (step ? peer & ~(mask - 1) : rank) * c * esz;
  size_t count = c * (step ? (size_t)mask : 1);
  if ((res = ncclGroupStart()) != ncclSuccess) return res;
  if ((res = ncclSend(from, count, t, peer, comm, st)) != ncclSuccess) return res;
  if ((res = ncclRecv(to, count, t, peer, comm, st)) != ncclSuccess) return res;
  return ncclGroupEnd();
}
static ncclResult_t hcRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  ncclResult_t res = ncclSuccess;
  for (int k = 0; k < hcSteps(n) && res == ncclSuccess; k++) res = hcStep(s, r, c, t, rank, n, comm, st, k);
  return res;
}
static void hcBw(size_t pc, size_t esz, double sec, int n, double *alg, double *bus) {
  *alg = (double)(pc * esz * (n - 1)) / 1e9 / sec;
  *bus = *alg;
}
const struct testColl hypercubeColl = {"hypercube_perf", 0, 0, agCounts, agExpected, hcBw, hcRun, hcSteps, hcStep};

/* alltoall: block p of every send buffer goes to rank p */
static void a2aCounts(size_t count, int n, size_t *s, size_t *r, size_t *p, size_t *so, size_t *ro) {
  size_t b = base(count, n, perfEltSize);
  *s = *r = b * n;
  *p = b;
  *so = *ro = 0;
}
static double a2aExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return in((int)(i / pc), rank * pc + i % pc);
}
static ncclResult_t a2aRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                           int n, ncclComm_t comm, cudaStream_t st) {
  return ncclAlltoAll(s, r, c, t, comm, st);
}
const struct testColl alltoallColl = {"alltoall_perf", 0, 0, a2aCounts, a2aExpected, agBw, a2aRun, NULL, NULL};

/* gather: every rank's block lands on the root at rank * count */
static double gaExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return rank == root ? in((int)(i / pc), i % pc) : NAN;
}
static ncclResult_t gaRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  return ncclGather(s, r, c, t, root, comm, st);
}
const struct testColl gatherColl = {"gather_perf", 0, 1, agCounts, gaExpected, agBw, gaRun, NULL, NULL};

/* scatter: the root's block p lands on rank p */
static double scExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return in(root, rank * pc + i);
}
static ncclResult_t scRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  return ncclScatter(s, r, c, t, root, comm, st);
}
const struct testColl scatterColl = {"scatter_perf", 0, 1, rsCounts, scExpected, agBw, scRun, NULL, NULL};
