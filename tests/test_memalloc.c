/* Memory from ncclMemAlloc, which local peers map and read where it lies
 * (one copy, without the kernel's CMA):
 *   nocma N  - N ranks whose kernel refuses CMA (a seccomp filter, as in
 *              many containers), buffers from ncclMemAlloc, CHORUS_SINGLE_COPY
 *              unset: AllGather (out of and in place), Broadcast, Send/Recv,
 *              AlltoAll, Gather, Scatter, AllReduce (sum, avg, PreMulSum,
 *              max; int32 avg) and ReduceScatter are right, guard bytes
 *              intact, and each log says it mapped its peers' memory (so
 *              the data was read in place: the FIFOs would not need that)
 *              and, with 2 ranks, that it wrote AllReduce results into its
 *              peer's output (memalloc_nocma2_nt: with stores past the
 *              cache, CHORUS_NT_STORES=1).
 *   reuse    - buffers freed and allocated again (often at the same
 *              address), and plain memory put where a freed one was: every
 *              result is right (a peer's mapping of freed memory is never
 *              taken for what lies there now), and in the end each rank maps
 *              its own buffer and at most one of each peer's (the one it
 *              read), nothing freed.
 *   fork     - memory allocated before fork: each child's is its own (the
 *              ranks write different data into "the same" buffer and
 *              AllGather it), and the parent's is as it left it.
 *   threads  - one process driving N ranks (ncclCommInitAll; 2 to 8):
 *              AllGather, Broadcast, AllReduce.
 *   refused  - a rank that cannot map its peer's memory (its address space
 *              is too small) reads it with CMA, says so once, and its peer
 *              hands it no more (it then works without CMA): every result
 *              right.
 *   off      - CHORUS_SINGLE_COPY=0: right, and nothing mapped.
 *   small    - AllReduce, ReduceScatter and AllGather of 4 KB-48 KB of ncclMemAlloc's
 *              memory, out of and in place (the sizes where recursive
 *              doubling and one-hop run; ctest also forces each, with
 *              NCCL_PROTO=Simple, whose slots may be references: then each
 *              AllReduce out of place of 4 KB or more must read its peers'
 *              input in place), with CMA refused: right, guard bytes
 *              intact, peers' memory read in place; with 2 ranks the same AllReduce on symmetric
 *              windows (NCCL_WIN_COLL_SYMMETRIC) is right too, and the
 *              tuner, which may count on every rank's buffers being
 *              mapped only there, chose the ring there and not elsewhere
 *              (not where the buffers lie past the end of windows).
 *   asymmetric - 2 ranks, only rank 0's buffers in symmetric windows (a
 *              broken promise): the AllReduce fails on both ranks, saying
 *              they chose differently, never a wrong result.
 *   test_memalloc <case> [ranks] */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "harness.h"

static char logDir[64];

static float value(int rank, int salt, size_t i) { return (float)(rank * 100003 + salt * 7919 + (int)(i % 99991)); }

static float *filledMem(int rank, int salt, size_t count) {
  float *p = guardMemAlloc(count * sizeof(float));
  for (size_t i = 0; p && i < count; i++) p[i] = value(rank, salt, i);
  return p;
}

/* 0 when p[i] == value(rank, salt, from + i) for i < count. */
static int checkFrom(const float *p, int rank, int salt, size_t from, size_t count, const char *what, int me) {
  for (size_t i = 0; i < count; i++)
    if (p[i] != value(rank, salt, from + i)) {
      fprintf(stderr, "rank %d: %s: element %zu is %g, expected %g (rank %d's)\n", me, what, i, p[i],
              value(rank, salt, from + i), rank);
      return 1;
    }
  return 0;
}

/* How many lines of this process's log (NCCL_DEBUG_FILE) hold text. */
static int logLines(const char *text) {
  char path[128];
  snprintf(path, sizeof path, "%s/log.%d", logDir, (int)getpid());
  int n = fileLinesWith(path, text);
  return n < 0 ? 0 : n;
}

/* AllGather (out of and in place) and Broadcast of ncclMemAlloc buffers
 * holding salt's data, checked element by element, guard bytes too. */
static int gatherAndBroadcast(int rank, int n, ncclComm_t comm, int salt, size_t count) {
  float *in = filledMem(rank, salt, count), *out = guardMemAlloc(count * n * sizeof(float));
  EXPECT(in && out, "rank %d: ncclMemAlloc failed", rank);
  NCCLCHECK(ncclAllGather(in, out, count, ncclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    if (checkFrom(out + (size_t)r * count, r, salt, 0, count, "AllGather", rank)) return 1;
  for (size_t i = 0; i < count * n; i++) out[i] = 0;
  for (size_t i = 0; i < count; i++) out[(size_t)rank * count + i] = value(rank, salt + 1, i);
  NCCLCHECK(ncclAllGather(out + (size_t)rank * count, out, count, ncclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    if (checkFrom(out + (size_t)r * count, r, salt + 1, 0, count, "AllGather in place", rank)) return 1;
  int root = (salt + 1) % n;
  if (rank != root) memset(in, 0, count * sizeof(float));
  NCCLCHECK(ncclBroadcast(in, in, count, ncclFloat, root, comm, NULL));
  if (checkFrom(in, root, salt, 0, count, "Broadcast", rank)) return 1;
  EXPECT(guardCheck(in) == 0 && guardCheck(out) == 0, "rank %d: guard bytes were overwritten", rank);
  guardFree(in);
  guardFree(out);
  return 0;
}

/* Send/Recv around the ring, AlltoAll, Gather and Scatter. */
static int pointToPoint(int rank, int n, ncclComm_t comm) {
  size_t pcount = 180001, acount = 50003;
  float *s = filledMem(rank, 3, pcount), *r = guardMemAlloc(pcount * sizeof(float));
  float *a = filledMem(rank, 4, acount * n), *ao = guardMemAlloc(acount * n * sizeof(float));
  EXPECT(s && r && a && ao, "rank %d: ncclMemAlloc failed", rank);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(s, pcount, ncclFloat, (rank + 1) % n, comm, NULL));
  NCCLCHECK(ncclRecv(r, pcount, ncclFloat, (rank + n - 1) % n, comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  if (checkFrom(r, (rank + n - 1) % n, 3, 0, pcount, "Recv", rank)) return 1;
  NCCLCHECK(ncclAlltoAll(a, ao, acount, ncclFloat, comm, NULL));
  for (int p = 0; p < n; p++) /* block p came from rank p's block rank */
    if (checkFrom(ao + (size_t)p * acount, p, 4, (size_t)rank * acount, acount, "AlltoAll", rank)) return 1;
  int root = n - 1;
  NCCLCHECK(ncclGather(a, ao, acount, ncclFloat, root, comm, NULL));
  for (int p = 0; rank == root && p < n; p++)
    if (checkFrom(ao + (size_t)p * acount, p, 4, 0, acount, "Gather", rank)) return 1;
  NCCLCHECK(ncclScatter(a, r, acount, ncclFloat, root, comm, NULL));
  if (checkFrom(r, root, 4, (size_t)rank * acount, acount, "Scatter", rank)) return 1;
  void *bufs[] = {s, r, a, ao};
  for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) {
    EXPECT(guardCheck(bufs[k]) == 0, "rank %d: buffer %zu's guard bytes were overwritten", rank, k);
    guardFree(bufs[k]);
  }
  return 0;
}

/* AllReduce (sum, avg, PreMulSum by 2, max; out of and in place) and
 * ReduceScatter (sum) of ncclMemAlloc buffers, against sums computed here:
 * the ring reduces straight from its peers' memory. The values are small
 * integers, so every float sum is exact whatever the order. */
static int reductions(int rank, int n, ncclComm_t comm) {
  size_t count = 300001;
  float *in = filledMem(rank, 6, count * n), *out = guardMemAlloc(count * n * sizeof(float));
  EXPECT(in && out, "rank %d: ncclMemAlloc failed", rank);
  float two = 2.0f;
  ncclRedOp_t premul;
  NCCLCHECK(ncclRedOpCreatePreMulSum(&premul, &two, ncclFloat, ncclScalarHostImmediate, comm));
  ncclRedOp_t ops[] = {ncclSum, ncclAvg, premul, ncclMax};
  const char *names[] = {"sum", "avg", "PreMulSum", "max"};
  for (int o = 0; o < 4; o++)
    for (int inPlace = 0; inPlace < 2; inPlace++) {
      float *buf = inPlace ? out : in, *res = out;
      for (size_t i = 0; i < count; i++) out[i] = inPlace ? value(rank, 6, i) : -1.0f; /* -1: never a result */
      NCCLCHECK(ncclAllReduce(buf, res, count, ncclFloat, ops[o], comm, NULL));
      /* From the end: the last block a peer wrote here is checked first, so
       * a write that lands after the call returned is seen missing. */
      for (size_t i = count; i-- > 0;) {
        float sum = 0, max = 0;
        for (int r = 0; r < n; r++) {
          sum += value(r, 6, i);
          max = value(r, 6, i) > max ? value(r, 6, i) : max;
        }
        float want = o == 0 ? sum : o == 1 ? sum / n : o == 2 ? 2 * sum : max;
        float err = res[i] > want ? res[i] - want : want - res[i]; /* avg divides once, rounded: 2 ULP */
        EXPECT(o == 1 ? err <= want * 2.4e-7f : res[i] == want, "rank %d: AllReduce %s%s: element %zu is %g, expected %g", rank, names[o],
               inPlace ? " in place" : "", i, res[i], want);
      }
    }
  NCCLCHECK(ncclRedOpDestroy(premul, comm));
  /* Odd ranks' buffers plain memory: the even ones' references offer their
   * results, the odd ones' data comes through the FIFOs; right either way. */
  float *pin = rank % 2 ? guardAlloc(count * sizeof(float)) : in;
  float *pout = rank % 2 ? guardAlloc(count * sizeof(float)) : out;
  EXPECT(pin && pout, "rank %d: out of memory", rank);
  for (size_t i = 0; i < count; i++) pin[i] = value(rank, 9, i), pout[i] = -1.0f;
  NCCLCHECK(ncclAllReduce(pin, pout, count, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = count; i-- > 0;) {
    float want = 0;
    for (int r = 0; r < n; r++) want += value(r, 9, i);
    EXPECT(pout[i] == want, "rank %d: AllReduce with %s buffers: element %zu is %g, expected %g", rank,
           rank % 2 ? "plain" : "ncclMemAlloc", i, pout[i], want);
  }
  if (rank % 2) {
    EXPECT(guardCheck(pin) == 0 && guardCheck(pout) == 0, "rank %d: guard bytes of plain buffers", rank);
    guardFree(pin);
    guardFree(pout);
  }
  /* An integer average divides the sum once, on the rank that reduces a
   * block, whichever rank's memory it writes the result into. */
  int32_t *iin = (int32_t *)in, *iout = (int32_t *)out;
  for (int inPlace = 0; inPlace < 2; inPlace++) {
    int32_t *buf = inPlace ? iout : iin;
    for (size_t i = 0; i < count; i++) buf[i] = (int32_t)(rank * 1000003 + (int)(i % 77777) * 13 - 400000);
    NCCLCHECK(ncclAllReduce(buf, iout, count, ncclInt32, ncclAvg, comm, NULL));
    for (size_t i = 0; i < count; i++) {
      int32_t sum = 0;
      for (int r = 0; r < n; r++) sum += (int32_t)(r * 1000003 + (int)(i % 77777) * 13 - 400000);
      EXPECT(iout[i] == sum / n, "rank %d: int32 AllReduce avg%s: element %zu is %d, expected %d", rank,
             inPlace ? " in place" : "", i, iout[i], sum / n);
    }
  }
  for (size_t i = 0; i < count * n; i++) in[i] = value(rank, 7, i);
  NCCLCHECK(ncclReduceScatter(in, out, count, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < n; r++) want += value(r, 7, (size_t)rank * count + i);
    EXPECT(out[i] == want, "rank %d: ReduceScatter: element %zu is %g, expected %g", rank, i, out[i], want);
  }
  EXPECT(guardCheck(in) == 0 && guardCheck(out) == 0, "rank %d: guard bytes were overwritten", rank);
  guardFree(in);
  guardFree(out);
  return 0;
}

static int nocmaRank(int rank, int n, ncclUniqueId id, void *arg) {
  EXPECT(denyCma() == 0, "seccomp: %s", strerror(errno));
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (gatherAndBroadcast(rank, n, comm, 0, 300001) || pointToPoint(rank, n, comm) || reductions(rank, n, comm))
    return 1;
  NCCLCHECK(ncclCommDestroy(comm));
  EXPECT(logLines("with CMA: Operation not permitted") > 0, "rank %d's log does not say CMA is refused", rank);
  EXPECT(logLines("(ncclMemAlloc): read in place") >= n - 1, "rank %d's log says it mapped %d pieces of its peers' "
         "memory, fewer than its %d peers", rank, logLines("(ncclMemAlloc): read in place"), n - 1);
  /* With two ranks each writes its half of an AllReduce's result into both
   * outputs: the peer copies nothing. */
  EXPECT(n != 2 || logLines("results written straight into rank") > 0, "rank %d's log does not say it wrote "
         "AllReduce results into its peer's memory", rank);
  return 0;
}

/* AllReduce (sum) of count floats of ncclMemAlloc's memory, out of and in
 * place, and ReduceScatter of count floats per rank, out of and in place
 * (with win, AllReduce only, on symmetric windows of both buffers). reads:
 * the out-of-place AllReduce must read its peers' input in place (where a
 * slot may carry a reference: 4096 bytes). */
static int smallReductions(int rank, int n, ncclComm_t comm, size_t count, int win, int reads) {
  float *in = filledMem(rank, 3, count * n), *out = guardMemAlloc(count * n * sizeof(float));
  EXPECT(in && out, "rank %d: ncclMemAlloc failed", rank);
  ncclWindow_t wins[2] = {NULL, NULL};
  if (win) {
    NCCLCHECK(ncclCommWindowRegister(comm, in, count * n * sizeof(float), &wins[0], NCCL_WIN_COLL_SYMMETRIC));
    NCCLCHECK(ncclCommWindowRegister(comm, out, count * n * sizeof(float), &wins[1], NCCL_WIN_COLL_SYMMETRIC));
  }
  for (int inPlace = 0; inPlace < 2; inPlace++) {
    for (size_t i = 0; i < count; i++) out[i] = inPlace ? value(rank, 3, i) : -1.0f;
    int before = logLines("(ncclMemAlloc): read in place");
    NCCLCHECK(ncclAllReduce(inPlace ? out : in, out, count, ncclFloat, ncclSum, comm, NULL));
    EXPECT(!reads || inPlace || count * sizeof(float) < 4096 || logLines("(ncclMemAlloc): read in place") > before,
           "rank %d: AllReduce of %zu out of place did not read its peers' input in place", rank, count);
    for (size_t i = count; i-- > 0;) {
      float want = 0;
      for (int r = 0; r < n; r++) want += value(r, 3, i);
      EXPECT(out[i] == want, "rank %d: AllReduce of %zu%s%s: element %zu is %g, expected %g", rank, count,
             inPlace ? " in place" : "", win ? " on windows" : "", i, out[i], want);
    }
  }
  for (int inPlace = 0; !win && inPlace < 2; inPlace++) {
    for (size_t i = 0; i < count * n; i++) in[i] = value(rank, 5, i);
    for (size_t i = 0; i < count; i++) out[i] = -1.0f;
    float *res = inPlace ? in + (size_t)rank * count : out;
    NCCLCHECK(ncclReduceScatter(in, res, count, ncclFloat, ncclSum, comm, NULL));
    for (size_t i = count; i-- > 0;) {
      float want = 0;
      for (int r = 0; r < n; r++) want += value(r, 5, (size_t)rank * count + i);
      EXPECT(res[i] == want, "rank %d: ReduceScatter of %zu%s: element %zu is %g, expected %g", rank, count,
             inPlace ? " in place" : "", i, res[i], want);
    }
  }
  /* AllGather of count floats per rank, each placement on buffers of its
   * own: a peer's buffer is mapped (and said so) the first time it is read. */
  for (int inPlace = 0; !win && inPlace < 2; inPlace++) {
    float *gin = inPlace ? NULL : filledMem(rank, 8, count), *gout = guardMemAlloc(count * n * sizeof(float));
    EXPECT((inPlace || gin) && gout, "rank %d: ncclMemAlloc failed", rank);
    for (size_t i = 0; i < count * n; i++) gout[i] = -1.0f;
    float *mine = inPlace ? gout + (size_t)rank * count : gin;
    for (size_t i = 0; i < count; i++) mine[i] = value(rank, 8, i);
    int before = logLines("(ncclMemAlloc): read in place");
    NCCLCHECK(ncclAllGather(mine, gout, count, ncclFloat, comm, NULL));
    EXPECT(!reads || count * sizeof(float) < 4096 || logLines("(ncclMemAlloc): read in place") > before,
           "rank %d: AllGather of %zu%s did not read its peers' input in place", rank, count, inPlace ? " in place" : "");
    for (int r = 0; r < n; r++)
      if (checkFrom(gout + (size_t)r * count, r, 8, 0, count, inPlace ? "AllGather in place" : "AllGather", rank))
        return 1;
    EXPECT((!gin || guardCheck(gin) == 0) && guardCheck(gout) == 0, "rank %d: AllGather's guard bytes", rank);
    if (gin) guardFree(gin);
    guardFree(gout);
  }
  for (int k = 0; k < 2; k++)
    if (wins[k]) NCCLCHECK(ncclCommWindowDeregister(comm, wins[k]));
  EXPECT(guardCheck(in) == 0 && guardCheck(out) == 0, "rank %d: guard bytes were overwritten", rank);
  guardFree(in);
  guardFree(out);
  return 0;
}

static const size_t smallCounts[] = {1000, 1025, 4001, 12000}; /* floats: 4 KB to 48 KB */

/* An AllReduce of 12000 floats whose buffers lie past the end of a
 * symmetric window each (64 bytes at the start of its allocation, the
 * buffer 128 bytes in): in no window. */
static int pastWindows(int rank, int n, ncclComm_t comm) {
  size_t count = 12000;
  float *in = filledMem(rank, 3, count + 32), *out = guardMemAlloc((count + 32) * sizeof(float));
  EXPECT(in && out, "rank %d: ncclMemAlloc failed", rank);
  ncclWindow_t wins[2];
  NCCLCHECK(ncclCommWindowRegister(comm, in, 64, &wins[0], NCCL_WIN_COLL_SYMMETRIC));
  NCCLCHECK(ncclCommWindowRegister(comm, out, 64, &wins[1], NCCL_WIN_COLL_SYMMETRIC));
  NCCLCHECK(ncclAllReduce(in + 32, out + 32, count, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int r = 0; r < n; r++) want += value(r, 3, 32 + i);
    EXPECT(out[32 + i] == want, "rank %d: AllReduce past windows: element %zu is %g, expected %g", rank, i,
           out[32 + i], want);
  }
  for (int k = 0; k < 2; k++) NCCLCHECK(ncclCommWindowDeregister(comm, wins[k]));
  EXPECT(guardCheck(in) == 0 && guardCheck(out) == 0, "rank %d: guard bytes were overwritten", rank);
  guardFree(in);
  guardFree(out);
  return 0;
}

/* Forced by ctest (NCCL_ALGO), or "" */
static const char *forcedAlgo(void) { return getenv("NCCL_ALGO") ? getenv("NCCL_ALGO") : ""; }
/* How many of smallCounts run: one-hop carries one FIFO slot (16 KB here). */
static size_t smallCountsRun(void) {
  return sizeof smallCounts / sizeof smallCounts[0] - (strcmp(forcedAlgo(), "OneHop") == 0);
}

static int smallRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  EXPECT(denyCma() == 0, "seccomp: %s", strerror(errno));
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  /* Forced, the algorithm's reads in place are checked call by call (the
   * tuner's choices may be the ring's, which reads in place too). */
  int reads = !strcmp(forcedAlgo(), "OneHop") || (!strcmp(forcedAlgo(), "RecDoubling") && n == 2);
  for (size_t k = 0; k < smallCountsRun(); k++)
    if (smallReductions(rank, n, comm, smallCounts[k], 0, reads)) return 1;
  if (n == 2 && smallCountsRun() == 4 && pastWindows(rank, n, comm)) return 1; /* 48 KB: not one-hop's */
  int ringBefore = logLines("AllReduce: 48000 Bytes -> Algo Ring");
  for (size_t k = 0; n == 2 && k < smallCountsRun(); k++)
    if (smallReductions(rank, n, comm, smallCounts[k], 1, reads)) return 1;
  NCCLCHECK(ncclCommDestroy(comm));
  /* Recursive doubling reads in place between 2 ranks only: with more, its
   * later rounds send partial sums the next round overwrites. */
  int someRead = strcmp(forcedAlgo(), "RecDoubling") != 0 || n == 2;
  EXPECT(!someRead || logLines("(ncclMemAlloc): read in place") >= n - 1, "rank %d's log says it mapped %d pieces of "
         "its peers' memory, fewer than its %d peers", rank, logLines("(ncclMemAlloc): read in place"), n - 1);
  if (n == 2 && !forcedAlgo()[0] && rank == 0) { /* (every rank chooses alike: rank 0 logs, as NCCL's does) */
    EXPECT(ringBefore == 0, "rank %d: the tuner chose the ring for 48000 bytes of buffers not in windows", rank);
    EXPECT(logLines("AllReduce: 48000 Bytes -> Algo Ring") > 0,
           "rank %d: the tuner did not choose the ring for 48000 bytes on symmetric windows", rank);
  }
  EXPECT(rank == 0 || logLines(" Bytes -> Algo ") == 0, "rank %d logged %d TUNING choices: NCCL logs rank 0's alone",
         rank, logLines(" Bytes -> Algo "));
  return 0;
}

static int asymmetricRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t count = 12000;
  float *in = filledMem(rank, 3, count), *out = guardMemAlloc(count * sizeof(float));
  EXPECT(in && out, "rank %d: ncclMemAlloc failed", rank);
  ncclWindow_t wins[2] = {NULL, NULL};
  if (rank == 0) {
    NCCLCHECK(ncclCommWindowRegister(comm, in, count * sizeof(float), &wins[0], NCCL_WIN_COLL_SYMMETRIC));
    NCCLCHECK(ncclCommWindowRegister(comm, out, count * sizeof(float), &wins[1], NCCL_WIN_COLL_SYMMETRIC));
  }
  for (size_t i = 0; i < count; i++) out[i] = -1.0f;
  ncclResult_t res = ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, NULL);
  const char *why = ncclGetLastError(comm);
  EXPECT(res == ncclInvalidUsage && strstr(why, "chose"), "rank %d: AllReduce with only rank 0's buffers in "
         "windows returned %s: %s", rank, ncclGetErrorString(res), why);
  for (size_t i = 0; i < count; i++)
    EXPECT(out[i] == -1.0f || out[i] == value(0, 3, i) + value(1, 3, i), "rank %d: element %zu is %g", rank, i, out[i]);
  for (int k = 0; k < 2; k++)
    if (wins[k]) NCCLCHECK(ncclCommWindowDeregister(comm, wins[k]));
  guardFree(in);
  guardFree(out);
  ncclCommAbort(comm);
  return 0;
}

/* Mappings of ncclMemAlloc's memory (its own and its peers') in this
 * process. */
static int memMappings(void) { return fileLinesWith("/proc/self/maps", "chorus-mem"); }

/* Symmetric windows over ncclMemAlloc's memory where rank 1's came back
 * plain (its descriptor budget, a quarter of RLIMIT_NOFILE, spent on other
 * allocations): the windows are what every rank registered alike, so the
 * ranks still choose alike (the choice once followed whether this rank's
 * memory was shared, and the ranks failed with "chose differently"), and
 * what rank 1's peer cannot map comes through the FIFOs. */
static int fallbackRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  EXPECT(denyCma() == 0, "seccomp: %s", strerror(errno)); /* what cannot be mapped comes through the FIFOs */
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  enum { HOARD = 40 };
  void *hoard[HOARD] = {NULL};
  if (rank == 1) {
    struct rlimit rl;
    EXPECT(getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit: %s", strerror(errno));
    rl.rlim_cur = 128; /* a budget of 32 */
    EXPECT(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
    for (int k = 0; k < HOARD; k++) NCCLCHECK(ncclMemAlloc(&hoard[k], 64));
  }
  /* 8 B to 64 KiB a rank: below 128 KiB, where mapped memory changes the choice */
  size_t counts[] = {2, 250, 1024, 4096, 16384}, most = 16384;
  int mapsBefore = memMappings();
  float *in = filledMem(rank, 5, most * n), *out = guardMemAlloc(most * n * sizeof(float));
  EXPECT(in && out, "rank %d: ncclMemAlloc failed", rank);
  int shared = memMappings() > mapsBefore;
  EXPECT(shared == (rank == 0), "rank %d: its buffers are %s", rank, shared ? "shared memory" : "plain memory");
  ncclWindow_t wins[2];
  NCCLCHECK(ncclCommWindowRegister(comm, in, most * n * sizeof(float), &wins[0], NCCL_WIN_COLL_SYMMETRIC));
  NCCLCHECK(ncclCommWindowRegister(comm, out, most * n * sizeof(float), &wins[1], NCCL_WIN_COLL_SYMMETRIC));
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    size_t count = counts[k];
    ncclResult_t res = ncclAllGather(in, out, count, ncclFloat, comm, NULL);
    EXPECT(res == ncclSuccess, "rank %d: AllGather of %zu: %s: %s", rank, count, ncclGetErrorString(res),
           ncclGetLastError(comm));
    for (int r = 0; r < n; r++)
      if (checkFrom(out + (size_t)r * count, r, 5, 0, count, "AllGather", rank)) return 1;
    res = ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, NULL);
    EXPECT(res == ncclSuccess, "rank %d: AllReduce of %zu: %s: %s", rank, count, ncclGetErrorString(res),
           ncclGetLastError(comm));
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < n; r++) want += value(r, 5, i);
      EXPECT(out[i] == want, "rank %d: AllReduce of %zu: element %zu is %g, expected %g", rank, count, i, out[i],
             want);
    }
    res = ncclReduceScatter(in, out, count, ncclFloat, ncclSum, comm, NULL);
    EXPECT(res == ncclSuccess, "rank %d: ReduceScatter of %zu: %s: %s", rank, count, ncclGetErrorString(res),
           ncclGetLastError(comm));
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < n; r++) want += value(r, 5, (size_t)rank * count + i);
      EXPECT(out[i] == want, "rank %d: ReduceScatter of %zu: element %zu is %g, expected %g", rank, count, i,
             out[i], want);
    }
  }
  for (int k = 0; k < 2; k++) NCCLCHECK(ncclCommWindowDeregister(comm, wins[k]));
  EXPECT(guardCheck(in) == 0 && guardCheck(out) == 0, "rank %d: guard bytes were overwritten", rank);
  guardFree(in);
  guardFree(out);
  for (int k = 0; k < HOARD; k++) ncclMemFree(hoard[k]);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int reuseRank(int rank, int n, ncclUniqueId id, void *arg) {
  EXPECT(denyCma() == 0, "seccomp: %s", strerror(errno));
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t counts[] = {200000, 200000, 70001, 200000, 131072, 200000};
  for (int it = 0; it < 6; it++) /* each frees its buffers: the next ones often land at the same address */
    if (gatherAndBroadcast(rank, n, comm, 10 * it, counts[it])) return 1;
  /* Plain memory where ncclMemAlloc's was: read through the FIFOs (no CMA
   * here), never through the peers' mapping of what was freed. */
  size_t count = 200000, bytes = count * sizeof(float);
  float *shared = NULL;
  NCCLCHECK(ncclMemAlloc((void **)&shared, bytes));
  for (size_t i = 0; i < count; i++) shared[i] = value(rank, 90, i);
  float *out = guardMemAlloc(bytes * n);
  NCCLCHECK(ncclAllGather(shared, out, count, ncclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    if (checkFrom(out + (size_t)r * count, r, 90, 0, count, "AllGather before the free", rank)) return 1;
  NCCLCHECK(ncclMemFree(shared));
  float *plain = mmap(shared, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  EXPECT(plain == shared, "rank %d: cannot map plain memory where the freed buffer was: %s", rank, strerror(errno));
  for (size_t i = 0; i < count; i++) plain[i] = value(rank, 91, i);
  NCCLCHECK(ncclAllGather(plain, out, count, ncclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    if (checkFrom(out + (size_t)r * count, r, 91, 0, count, "AllGather of plain memory where a freed buffer was",
                  rank))
      return 1;
  munmap(plain, bytes);
  guardFree(out);
  /* One buffer left on each rank, read by every peer: the peers' notes of
   * what was freed have been read with the new one's. */
  float *last = filledMem(rank, 95, count), *lastOut = guardAlloc(bytes * n);
  NCCLCHECK(ncclAllGather(last, lastOut, count, ncclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    if (checkFrom(lastOut + (size_t)r * count, r, 95, 0, count, "last AllGather", rank)) return 1;
  int maps = memMappings();
  EXPECT(maps >= 2 && maps <= n, "rank %d maps %d pieces of ncclMemAlloc's memory, expected its own and at most "
         "one of each peer's (%d in all), at least its ring predecessor's", rank, maps, n);
  guardFree(last);
  guardFree(lastOut);
  NCCLCHECK(ncclCommDestroy(comm));
  EXPECT(memMappings() == 0, "rank %d still maps %d pieces of ncclMemAlloc's memory after ncclCommDestroy", rank,
         memMappings());
  return 0;
}

static float *beforeFork; /* ncclMemAlloc's memory of the parent, filled with value(7, 7, i) */
#define FORK_COUNT 100000

static int forkRank(int rank, int n, ncclUniqueId id, void *arg) {
  for (size_t i = 0; i < FORK_COUNT; i++) beforeFork[i] = value(rank, 8, i); /* this child's own copy */
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float *out = guardMemAlloc(FORK_COUNT * n * sizeof(float));
  EXPECT(out, "rank %d: ncclMemAlloc failed", rank);
  for (int it = 0; it < 3; it++) {
    NCCLCHECK(ncclAllGather(beforeFork, out, FORK_COUNT, ncclFloat, comm, NULL));
    for (int r = 0; r < n; r++)
      if (checkFrom(out + (size_t)r * FORK_COUNT, r, 8, 0, FORK_COUNT, "AllGather of memory allocated before fork",
                    rank))
        return 1;
  }
  guardFree(out);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int threadsCase(int N) {
  ncclComm_t comms[8];
  NCCLCHECK(ncclCommInitAll(comms, N, NULL));
  size_t count = 250001;
  float *in[8], *out[8];
  for (int r = 0; r < N; r++) {
    in[r] = filledMem(r, 5, count);
    out[r] = guardMemAlloc(count * N * sizeof(float));
    EXPECT(in[r] && out[r], "ncclMemAlloc failed");
  }
  for (int it = 0; it < 2; it++) {
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < N; r++) NCCLCHECK(ncclAllGather(in[r], out[r], count, ncclFloat, comms[r], NULL));
    NCCLCHECK(ncclGroupEnd());
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < N; r++) NCCLCHECK(ncclBroadcast(in[r], out[r], count, ncclFloat, 1, comms[r], NULL));
    NCCLCHECK(ncclGroupEnd());
    for (int r = 0; r < N; r++) {
      if (checkFrom(out[r], 1, 5, 0, count, "Broadcast (threads)", r)) return 1;
      for (int p = 1; p < N; p++)
        if (checkFrom(out[r] + (size_t)p * count, p, 5, 0, count, "AllGather (threads)", r)) return 1;
    }
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < N; r++) NCCLCHECK(ncclAllReduce(in[r], out[r], count, ncclFloat, ncclSum, comms[r], NULL));
    NCCLCHECK(ncclGroupEnd());
    for (int r = 0; r < N; r++)
      for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int p = 0; p < N; p++) want += value(p, 5, i);
        EXPECT(out[r][i] == want, "rank %d: AllReduce (threads): element %zu is %g, expected %g", r, i, out[r][i],
               want);
      }
  }
  for (int r = 0; r < N; r++) {
    EXPECT(guardCheck(in[r]) == 0 && guardCheck(out[r]) == 0, "rank %d: guard bytes", r);
    guardFree(in[r]);
    guardFree(out[r]);
    NCCLCHECK(ncclCommDestroy(comms[r]));
  }
  /* Two ranks write each other's AllReduce results in place (both ways) */
  EXPECT(N != 2 || logLines("results written straight into rank") >= 2, "the log says the 2 ranks wrote results "
         "into each other's memory %d times, not both ways", logLines("results written straight into rank"));
  return 0;
}

/* This process's address space in bytes (VmSize), or 0. */
static size_t vmSize(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kib = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %zu kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib * 1024;
}

/* Rank 1 cannot map rank 0's 1 GiB allocation (its address space is
 * limited below that): rank 1 reads the first AllGather's data with CMA
 * instead, rank 0 hands it no more memory (the next AllGathers work after
 * rank 1 has lost CMA too), and every result is right. */
static int refusedRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t count = 200000, bytes = count * sizeof(float), big = (size_t)1 << 30;
  float *in = NULL, *out = guardAlloc(bytes * n);
  NCCLCHECK(ncclMemAlloc((void **)&in, rank == 0 ? big : bytes)); /* a sparse memfd: no memory until touched */
  if (rank == 1) {
    struct rlimit rl = {vmSize() + (256 << 20), RLIM_INFINITY};
    EXPECT(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit: %s", strerror(errno));
  }
  for (int it = 0; it < 3; it++) {
    for (size_t i = 0; i < count; i++) in[i] = value(rank, it, i);
    NCCLCHECK(ncclAllGather(in, out, count, ncclFloat, comm, NULL));
    for (int r = 0; r < n; r++)
      if (checkFrom(out + (size_t)r * count, r, it, 0, count, "AllGather with a refused mapping", rank)) return 1;
    /* From now on rank 1 could not read rank 0's memory even with CMA: the
     * data must come through the FIFOs. */
    if (rank == 1 && it == 0) EXPECT(denyCma() == 0, "seccomp: %s", strerror(errno));
  }
  if (rank == 1)
    EXPECT(logLines("its ncclMemAlloc memory comes through the FIFOs from now on") == 1,
           "rank 1's log does not say once that it cannot map rank 0's memory");
  EXPECT(guardCheck(out) == 0, "rank %d: guard bytes", rank);
  guardFree(out);
  NCCLCHECK(ncclMemFree(in));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int offRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (gatherAndBroadcast(rank, n, comm, 0, 300001) || pointToPoint(rank, n, comm) || reductions(rank, n, comm))
    return 1;
  NCCLCHECK(ncclCommDestroy(comm));
  EXPECT(logLines("read in place") == 0, "rank %d mapped its peers' memory with CHORUS_SINGLE_COPY=0", rank);
  return 0;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  int n = argc > 2 ? atoi(argv[2]) : 3;
  setenv("CHORUS_TIMEOUT", "10", 1);
  if (logPerProcess(logDir, "memalloc", "SHM")) return 1;
  int failed;
  if (!strcmp(c, "nocma")) {
    failed = runRanks(n, nocmaRank, NULL, 60);
  } else if (!strcmp(c, "reuse")) {
    failed = runRanks(n, reuseRank, NULL, 60);
  } else if (!strcmp(c, "fork")) {
    failed = ncclMemAlloc((void **)&beforeFork, FORK_COUNT * sizeof(float)) != ncclSuccess;
    for (size_t i = 0; !failed && i < FORK_COUNT; i++) beforeFork[i] = value(7, 7, i);
    if (!failed) failed = runRanks(n, forkRank, NULL, 60);
    for (size_t i = 0; !failed && i < FORK_COUNT; i++)
      if (beforeFork[i] != value(7, 7, i)) {
        fprintf(stderr, "the parent's buffer changed at element %zu: %g (the children's writes reached it)\n", i,
                beforeFork[i]);
        failed = 1;
      }
    if (beforeFork) ncclMemFree(beforeFork);
  } else if (!strcmp(c, "threads") && n >= 2 && n <= 8) {
    failed = threadsCase(n);
  } else if (!strcmp(c, "refused")) {
    /* Plain memory is read with CMA only past these sizes, so that after
     * rank 1 loses CMA nothing but the refused mapping decides the path
     * (2 ranks with a core each read plain AllGather sends from 64 KiB). */
    setenv("CHORUS_SINGLE_COPY", "1073741824", 1);
    failed = runRanks(2, refusedRank, NULL, 60);
  } else if (!strcmp(c, "small")) {
    setenv("NCCL_DEBUG_SUBSYS", "SHM,TUNING", 1);
    failed = runRanks(n, smallRank, NULL, 60);
  } else if (!strcmp(c, "fallback")) {
    failed = runRanks(2, fallbackRank, NULL, 60);
  } else if (!strcmp(c, "asymmetric")) {
    failed = runRanks(2, asymmetricRank, NULL, 60);
  } else if (!strcmp(c, "off")) {
    setenv("CHORUS_SINGLE_COPY", "0", 1);
    failed = runRanks(n, offRank, NULL, 60);
  } else {
    fprintf(stderr, "usage: test_memalloc nocma|reuse|fork|threads|refused|off|small|asymmetric|fallback [ranks]\n");
    return 2;
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", logDir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", logDir);
  printf("test_memalloc %s: %s\n", c, failed ? "FAILED" : "passed");
  return failed != 0;
}
