/* The perf driver: nccl-tests' flags, launch modes, timing method, data
 * check and v2.13-2.19 output format, on chorus. */
#define _GNU_SOURCE
#include "common.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "perf_colls.h"
#include "values.h"
#ifdef CHORUS_PERF_MPI
#include <mpi.h>
#endif

#define PERF_VERSION "2.19.6"

static const char *typeNames[ncclNumTypes] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                              "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
static const char *opNames[] = {"sum", "prod", "max", "min", "avg", "mulsum"};

struct options {
  int nThreads, nGpus, iters, aggIters, warmup, cycles, check, op, type, root, blocking, streamNull, timeout,
      cputime, average, parallelInit;
  size_t minBytes, maxBytes, stepBytes, stepFactor;
  const char *json;
  int timestamps; /* -S */
  int localRegister; /* -R: buffers from ncclMemAlloc, registered with ncclCommRegister (1) or as
                      * NCCL_WIN_COLL_SYMMETRIC windows (2) */
  int unalign;       /* -u: buffers start this many elements past their alignment */
  int perIter;       /* -I: each iteration timed, and its spread reported */
  int perIterSkip;   /* -K: leading iterations left out of -I's figures */
};
static struct options opt = {1, 1, 20, 1, 1, 1, 1, ncclSum, ncclFloat, 0, 0, 0, 0, 0, 1, 0,
                             32 << 20, 32 << 20, 1 << 20, 1, NULL, 0, 0, 0, 0, 0};

static const struct testColl *coll;
static int refused; /* coll->setup refused the run (set by thread 0 of each process) */
static int nProcs = 1, proc = 0, totalRanks = 1;
static ncclUniqueId commId;
static int isMain; /* process 0 prints */
static int localRank;       /* this process's place among those on its host */
static int deviceBase = -1; /* NCCL_TESTS_DEVICE: the first device of this process */
static char hostName[64];

/* A rank's device, as nccl-tests numbers them: after the devices of the
 * processes before it on its host, or from NCCL_TESTS_DEVICE. */
static int rankDevice(int thread, int g) {
  if (deviceBase >= 0) return deviceBase + thread * opt.nGpus + g;
  return (localRank * opt.nThreads + thread) * opt.nGpus + g;
}

/* What each rank tells process 0 for the "# Using devices" lines (gathered
 * over the communicator itself, in every launch mode). */
struct deviceInfo {
  int rank, group, pid, device;
  char host[64];
};
#define DEVICE_NAME "host memory (chorus)"
static FILE *jsonOut;
static int jsonRows;
static int mainArgc; /* the command line as given, for the JSON file's "args" */
static char **mainArgv;
extern char **environ;

/* s as a JSON string: quoted, with quotes, backslashes and control
 * characters escaped. */
static void jsonString(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

/* Now as nccl-tests stamps its rows (-S) and its JSON file: local time, to
 * the second. */
#define STAMP_FORMAT "%Y-%m-%d %H:%M:%S"
static void stampNowLocal(char *buf, size_t len) {
  time_t now = time(NULL);
  strftime(buf, len, STAMP_FORMAT, localtime(&now));
}

static void jsonNow(FILE *f) {
  char stamp[32];
  stampNowLocal(stamp, sizeof stamp);
  jsonString(f, stamp);
}

/* ---- values: exact in every datatype, so any reduction order gives the same bits ---- */
/* Each thread sets these the same way (same sequence of checks). */
static _Thread_local int curType, curOp, curRep;
static double inputValue(int r, size_t j) {
  uint64_t h = (uint64_t)(j * 2654435761u) ^ ((uint64_t)(r + 1) * 40503u) ^ ((uint64_t)curRep * 977u);
  h ^= h >> 13;
  int fp8 = curType == ncclFloat8e4m3 || curType == ncclFloat8e5m2;
  int isUnsigned = curType == ncclUint8 || curType == ncclUint32 || curType == ncclUint64;
  if (curOp == ncclProd) return (h % 3 == 0) ? 2 : 1;
  int span = fp8 ? 2 : 4;
  double v = (double)(h % span);
  if (!isUnsigned && (h >> 8) % 2) v = -v;
  return v;
}

static double premulScalar(int r) { return r % 2 ? 2.0 : 1.0; }

/* Integer results wrap around as the type does (a product of many 2s
 * overflows int8); the values used are integers well inside int64. */
static double wrapToType(int t, double v) {
  uint64_t u = (uint64_t)(int64_t)v;
  switch (t) {
    case ncclInt8: return (int8_t)(uint8_t)u;
    case ncclUint8: return (uint8_t)u;
    case ncclInt32: return (int32_t)(uint32_t)u;
    case ncclUint32: return (uint32_t)u;
    default: return v;
  }
}

double perfReduce(int n, size_t j, int op, double (*in)(int, size_t)) {
  double acc = 0;
  for (int r = 0; r < n; r++) {
    double v = in(r, j) * (op == PERF_OP_MULSUM ? premulScalar(r) : 1);
    if (r == 0) acc = v;
    else if (op == ncclProd) acc *= v;
    else if (op == ncclMax) acc = v > acc ? v : acc;
    else if (op == ncclMin) acc = v < acc ? v : acc;
    else acc += v;
  }
  if (op == ncclAvg) acc = curType >= ncclFloat16 ? acc / n : trunc(acc / n);
  return wrapToType(curType, acc);
}

/* Avg on floating types is not exact: allow 2 units in the last place. */
static int matches(int t, int op, double got, double want) {
  if (got == want) return 1;
  if (op != ncclAvg || t < ncclFloat16) return 0;
  static const int mant[] = {0, 0, 0, 0, 0, 0, 10, 23, 52, 7, 3, 2};
  double ulp = ldexp(fabs(want) > 1e-300 ? fabs(want) : 1, -mant[t]);
  return fabs(got - want) <= 2 * ulp + 1e-300;
}

/* ---- one thread drives nGpus ranks ---- */
struct threadState {
  int thread;
  int firstRank; /* global rank of its first comm */
  ncclComm_t *comms;
  cudaStream_t *streams;
  char **sendBufs, **recvBufs;
  void **sendRegs, **recvRegs; /* -R: the registration handles */
  ncclRedOp_t *ops;
  double time;
  int64_t wrong;
  int errors;
  int slow; /* the average busbw fell short of NCCL_TESTS_MIN_BW (thread 0 of process 0) */
  double bwSum;
  int bwCount;
};

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CK(call)                                                                                        \
  do {                                                                                                  \
    ncclResult_t r_ = (call);                                                                           \
    if (r_ != ncclSuccess) {                                                                            \
      char h_[64] = "";                                                                                 \
      gethostname(h_, sizeof h_ - 1);                                                                   \
      /* On stdout, and nccl-tests' exit status: testTimeout 4, testNcclError 3 */                    \
      int timedOut_ = r_ == ncclTimeout && opt.timeout > 0; /* -T's, worded as nccl-tests' */          \
      if (timedOut_)                                                                                    \
        printf("%s: Test timeout (%ds) %s:%d\n", h_, opt.timeout, __FILE__, __LINE__);                \
      else                                                                                              \
        printf("%s: Test NCCL failure %s:%d '%s / %s'\n", h_, __FILE__, __LINE__, /* and why, as */    \
               ncclGetErrorString(r_), ncclGetLastError(NULL)); /* nccl-tests from 2.13 */                      \
      fflush(stdout);                                                                                   \
      exit(timedOut_ ? 4 : 3);                                                                          \
    }                                                                                                   \
  } while (0)

static void syncAll(struct threadState *ts) {
  for (int g = 0; g < opt.nGpus; g++) CK(chorusStreamSynchronize(ts->streams[g]));
}

/* What the tools exchange among themselves (times, error counts, who runs
 * where) goes over Send/Recv through rank 0, which NCCL_ALGO and
 * NCCL_PROTO do not restrict: a run with NCCL_ALGO=Tree, or one naming a
 * Broadcast-only algorithm, must still time its collective (nccl-tests
 * does this over MPI). Every rank's `bytes` at `mine[g]` reach rank 0's
 * `all` (rank r's at all + r * bytes) when gather; with scatter, rank 0's
 * all[0] goes back to everyone's `mine[g]`. */
static void exchangeAtRoot(struct threadState *ts, void *mine, void *all, size_t bytes, int scatter) {
  CK(ncclGroupStart());
  for (int g = 0; g < opt.nGpus; g++) {
    int rank = ts->firstRank + g;
    char *m = (char *)mine + (size_t)g * bytes;
    if (rank != 0) {
      CK(scatter ? ncclRecv(m, bytes, ncclChar, 0, ts->comms[g], NULL)
                 : ncclSend(m, bytes, ncclChar, 0, ts->comms[g], NULL));
      continue;
    }
    if (!scatter) memcpy(all, m, bytes);
    else memcpy(m, all, bytes);
    for (int r = 1; r < totalRanks; r++) {
      char *a = (char *)all + (scatter ? 0 : (size_t)r * bytes);
      CK(scatter ? ncclSend(a, bytes, ncclChar, r, ts->comms[g], NULL)
                 : ncclRecv(a, bytes, ncclChar, r, ts->comms[g], NULL));
    }
  }
  CK(ncclGroupEnd());
}

/* A value combined over all ranks (Sum, Min or Max): v is each of this
 * thread's ranks' value, or with perThread the thread's own (a count or
 * a time for all of its -g ranks), which a Sum takes once. */
static double combine(struct threadState *ts, double v, ncclRedOp_t op, int perThread) {
  double *mine = malloc(sizeof(double) * opt.nGpus), *all = malloc(sizeof(double) * totalRanks);
  if (!mine || !all) {
    fprintf(stderr, "%s: out of memory\n", coll->name);
    exit(2);
  }
  for (int g = 0; g < opt.nGpus; g++) mine[g] = perThread && op == ncclSum && g > 0 ? 0 : v;
  exchangeAtRoot(ts, mine, all, sizeof(double), 0);
  if (ts->firstRank == 0) { /* rank 0 is this thread's first */
    double r = all[0];
    for (int i = 1; i < totalRanks; i++)
      r = op == ncclMin ? (all[i] < r ? all[i] : r) : op == ncclMax ? (all[i] > r ? all[i] : r) : r + all[i];
    all[0] = r;
  }
  exchangeAtRoot(ts, mine, all, sizeof(double), 1);
  double r = mine[0];
  free(mine);
  free(all);
  return r;
}

static void barrier(struct threadState *ts) { combine(ts, 0, ncclSum, 0); }

static void runOnce(struct threadState *ts, size_t pc, int type, int root, int inPlace, size_t sendOff,
                    size_t recvOff) {
  size_t esz = typeSize(type), shift = (size_t)opt.unalign * esz;
  /* Grouped only with several ranks per thread, as nccl-tests does; a tool
   * made of dependent steps, one group per step. */
  int steps = opt.nGpus > 1 && coll->steps ? coll->steps(totalRanks) : 1;
  for (int k = 0; k < steps; k++) {
    if (opt.nGpus > 1) CK(ncclGroupStart());
    for (int g = 0; g < opt.nGpus; g++) {
      int rank = ts->firstRank + g;
      char *send = ts->sendBufs[g] + shift, *recv = ts->recvBufs[g] + shift; /* -u */
      if (inPlace) {
        if (sendOff) send = recv + (size_t)rank * sendOff * esz; /* AllGather: sendbuff inside recvbuff */
        else if (recvOff) recv = send + (size_t)rank * recvOff * esz; /* ReduceScatter */
        else send = recv;
      }
      if (steps > 1) CK(coll->runStep(send, recv, pc, type, rank, totalRanks, ts->comms[g], ts->streams[g], k));
      else CK(coll->run(send, recv, pc, type, ts->ops[g], root, rank, totalRanks, ts->comms[g], ts->streams[g]));
    }
    if (opt.nGpus > 1) CK(ncclGroupEnd());
  }
}

static void makeOps(struct threadState *ts, int type, int op) {
  for (int g = 0; g < opt.nGpus; g++) {
    ts->ops[g] = (ncclRedOp_t)op;
    if (op == PERF_OP_MULSUM) {
      char scalar[8];
      putValue(type, scalar, 0, premulScalar(ts->firstRank + g));
      CK(ncclRedOpCreatePreMulSum(&ts->ops[g], scalar, type, ncclScalarHostImmediate, ts->comms[g]));
    }
  }
}

static void freeOps(struct threadState *ts, int op) {
  if (op != PERF_OP_MULSUM) return;
  for (int g = 0; g < opt.nGpus; g++) CK(ncclRedOpDestroy(ts->ops[g], ts->comms[g]));
}

/* Fills inputs, runs once, counts wrong elements on this thread's ranks. */
static int64_t checkOnce(struct threadState *ts, size_t sc, size_t rc, size_t pc, int type, int op, int root,
                         int inPlace, size_t sendOff, size_t recvOff) {
  size_t esz = typeSize(type), shift = (size_t)opt.unalign * esz;
  curType = type;
  curOp = op;
  curRep++;
  for (int g = 0; g < opt.nGpus; g++) {
    int rank = ts->firstRank + g;
    char *send = ts->sendBufs[g] + shift, *recv = ts->recvBufs[g] + shift;
    memset(recv, 0, rc * esz);
    size_t n = sc;
    if (inPlace && sendOff) send = recv + (size_t)rank * sendOff * esz;
    else if (inPlace && !recvOff) send = recv;
    for (size_t i = 0; i < n; i++) putValue(type, send, i, inputValue(rank, i));
  }
  runOnce(ts, pc, type, root, inPlace, sendOff, recvOff);
  syncAll(ts);
  int64_t wrong = 0;
  for (int g = 0; g < opt.nGpus; g++) {
    int rank = ts->firstRank + g;
    const char *recv = ts->recvBufs[g] + shift;
    if (inPlace && recvOff) recv = ts->sendBufs[g] + shift + (size_t)rank * recvOff * esz;
    for (size_t i = 0; i < rc; i++) {
      double want = coll->expected(rank, totalRanks, i, pc, root, op, inputValue);
      if (isnan(want)) continue;
      if (!matches(type, op, getValue(type, recv, i), want)) {
        if (getenv("CHORUS_PERF_DEBUG") && wrong < 8)
          fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", rank, i, getValue(type, recv, i), want);
        wrong++;
      }
    }
  }
  return wrong;
}

/* v in width characters as nccl-tests writes its figures: 2 decimals,
 * fewer where they do not fit, else an exponent. */
static void fmtFigure(char *buf, double v, int width) {
  if (snprintf(buf, (size_t)width + 1, "%*.2f", width, v) <= width) return;
  if (snprintf(buf, (size_t)width + 1, "%*.1f", width, v) <= width) return;
  if (snprintf(buf, (size_t)width + 1, "%*.0f", width, v) <= width) return;
  snprintf(buf, (size_t)width + 1, width >= 7 ? "%*.1e" : "%*.0e", width, v);
}

/* -I: one cell's iterations, each the slowest rank's time (s). */
struct iterStats {
  double min, max, avg, p50, p95, p99, stdev;
  double *times;     /* every iteration's, -K's skipped ones included */
  double *perProcess; /* [nProcs][iters]: each process's slowest rank, when there are several processes */
};

static int cmpDouble(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The figures over times[0..n): percentiles by nearest rank, as nccl-tests. */
static void iterStatsCompute(struct iterStats *st, const double *times, int n) {
  double *sorted = malloc(sizeof(double) * (size_t)n);
  if (!sorted) exit(2);
  memcpy(sorted, times, sizeof(double) * (size_t)n);
  qsort(sorted, (size_t)n, sizeof(double), cmpDouble);
  int i95 = (n * 95 + 99) / 100 - 1, i99 = (n * 99 + 99) / 100 - 1;
  st->min = sorted[0];
  st->max = sorted[n - 1];
  st->p50 = sorted[n / 2];
  st->p95 = sorted[i95 < n - 1 ? i95 : n - 1];
  st->p99 = sorted[i99 < n - 1 ? i99 : n - 1];
  double sum = 0, var = 0;
  for (int i = 0; i < n; i++) sum += sorted[i];
  st->avg = sum / n;
  for (int i = 0; i < n; i++) var += (sorted[i] - st->avg) * (sorted[i] - st->avg);
  st->stdev = sqrt(var / n);
  free(sorted);
}

static double iterCvPct(const struct iterStats *st) { return st->avg > 0 ? st->stdev / st->avg * 100.0 : 0.0; }

/* -I: the clock read where the stream reaches this point, as nccl-tests
 * records a CUDA event there (on the NULL stream: now). */
static void stampNow(void *at, ncclResult_t status) {
  (void)status;
  *(double *)at = nowSec();
}

/* Stamp k of each of the thread's ranks (nStamps each) in its stream. */
static void stampStreams(struct threadState *ts, double *stamps, int nStamps, int k) {
  for (int g = 0; g < opt.nGpus; g++)
    CK(chorusLaunchHostFunc(ts->streams[g], stampNow, &stamps[(size_t)g * (size_t)nStamps + (size_t)k]));
}

/* -I: every rank's iteration times (from its stamps) reach rank 0, which
 * keeps each process's slowest rank per iteration and, over those, the
 * slowest, and computes the figures into *st (rank 0's thread only). */
static void iterGather(struct threadState *ts, const double *stamps, int nStamps, int paired, struct iterStats *st) {
  int n = opt.iters, G = opt.nGpus;
  double *mine = malloc(sizeof(double) * (size_t)G * (size_t)n);
  double *all = ts->firstRank == 0 ? malloc(sizeof(double) * (size_t)totalRanks * (size_t)n) : NULL;
  if (!mine || (ts->firstRank == 0 && !all)) {
    fprintf(stderr, "%s: out of memory\n", coll->name);
    exit(2);
  }
  for (int g = 0; g < G; g++)
    for (int i = 0; i < n; i++) {
      const double *r = stamps + (size_t)g * (size_t)nStamps;
      double sec = paired ? r[2 * i + 1] - r[2 * i] : r[i + 1] - r[i];
      mine[(size_t)g * n + i] = sec / opt.aggIters;
    }
  exchangeAtRoot(ts, mine, all, sizeof(double) * (size_t)n, 0);
  free(mine);
  if (!all) return;
  int perProc = totalRanks / nProcs;
  st->times = calloc((size_t)n, sizeof(double));
  st->perProcess = nProcs > 1 ? calloc((size_t)nProcs * (size_t)n, sizeof(double)) : NULL;
  if (!st->times || (nProcs > 1 && !st->perProcess)) exit(2);
  for (int p = 0; p < nProcs; p++)
    for (int i = 0; i < n; i++) {
      double m = 0;
      for (int r = p * perProc; r < (p + 1) * perProc; r++) m = fmax(m, all[(size_t)r * n + i]);
      if (st->perProcess) st->perProcess[(size_t)p * n + i] = m;
      st->times[i] = fmax(st->times[i], m);
    }
  free(all);
  iterStatsCompute(st, st->times + opt.perIterSkip, n - opt.perIterSkip);
}

/* Times one (size, type, op, root, in-place) cell; returns seconds per op.
 * With -I, st gets each iteration's time (on rank 0's thread). */
static double timeCell(struct threadState *ts, size_t pc, int type, int root, int inPlace, size_t sendOff,
                       size_t recvOff, struct iterStats *st) {
  runOnce(ts, pc, type, root, inPlace, sendOff, recvOff);
  syncAll(ts);
  barrier(ts);
  /* -I: a stamp before each iteration and one after the last; with -z 3,
   * whose barriers the time leaves out, a pair around each iteration. */
  int paired = opt.blocking == 3, nStamps = paired ? 2 * opt.iters : opt.iters + 1;
  double *stamps = opt.perIter ? calloc((size_t)opt.nGpus * (size_t)nStamps, sizeof(double)) : NULL;
  if (opt.perIter && !stamps) exit(2);
  double t0 = nowSec(), cpu = 0, excluded = 0;
  for (int it = 0; it < opt.iters; it++) {
    /* The clock per iteration only for -C 1 or -I 1: reading it costs as
     * much as a tenth of an 8-byte call here, which the wall time would
     * then count. */
    double c0 = opt.cputime ? nowSec() : 0;
    if (stamps) stampStreams(ts, stamps, nStamps, paired ? 2 * it : it);
    if (opt.aggIters > 1) CK(ncclGroupStart());
    for (int a = 0; a < opt.aggIters; a++) runOnce(ts, pc, type, root, inPlace, sendOff, recvOff);
    if (opt.aggIters > 1) CK(ncclGroupEnd());
    if (opt.cputime) cpu += nowSec() - c0;
    if (opt.blocking) { /* -z 1: complete, then a barrier; 2: complete; 3: a barrier the time leaves out */
      syncAll(ts);
      if (stamps && paired) stampStreams(ts, stamps, nStamps, 2 * it + 1);
      if (opt.blocking == 1) barrier(ts);
      if (opt.blocking == 3) {
        double b0 = nowSec();
        barrier(ts);
        excluded += nowSec() - b0;
      }
    }
  }
  if (stamps && !paired) stampStreams(ts, stamps, nStamps, opt.iters);
  syncAll(ts);
  double sec = (opt.cputime ? cpu : nowSec() - t0 - excluded) / ((double)opt.iters * opt.aggIters);
  if (stamps) { /* after the clock: the report's work is not the collective's time, as nccl-tests */
    iterGather(ts, stamps, nStamps, paired, st);
    free(stamps);
  }
  /* -a: 0 rank 0, 1 average, 2 min, 3 max across ranks */
  if (opt.average == 2) return combine(ts, sec, ncclMin, 0);
  if (opt.average == 3) return combine(ts, sec, ncclMax, 0);
  if (opt.average == 0) return combine(ts, ts->firstRank == 0 ? sec : 0, ncclSum, 1);
  return combine(ts, sec, ncclSum, 0) / totalRanks;
}

/* -I's figures of one cell, as nccl-tests' JSON gives them (µs). */
static void jsonIterStats(const char *key, const struct iterStats *st) {
  fprintf(jsonOut, ", \"%s\": {\"skipped_iterations\": %d, \"min_us\": %g, \"max_us\": %g, \"avg_us\": %g, "
                   "\"p50_us\": %g, \"p95_us\": %g, \"p99_us\": %g, \"stdev_us\": %g, \"cv_pct\": %g, \"times_us\": [",
          key, opt.perIterSkip, st->min * 1e6, st->max * 1e6, st->avg * 1e6, st->p50 * 1e6, st->p95 * 1e6,
          st->p99 * 1e6, st->stdev * 1e6, iterCvPct(st));
  for (int i = 0; i < opt.iters; i++) fprintf(jsonOut, "%s%g", i ? ", " : "", st->times[i] * 1e6);
  fprintf(jsonOut, "]");
  if (st->perProcess) {
    fprintf(jsonOut, ", \"per_process_max_times_us\": [");
    for (int p = 0; p < nProcs; p++) {
      fprintf(jsonOut, "%s[", p ? ", " : "");
      for (int i = 0; i < opt.iters; i++) fprintf(jsonOut, "%s%g", i ? ", " : "", st->perProcess[(size_t)p * opt.iters + i] * 1e6);
      fprintf(jsonOut, "]");
    }
    fprintf(jsonOut, "]");
  }
  fprintf(jsonOut, "}");
}

static void jsonRow(size_t bytes, size_t count, const char *type, const char *op, int root, double t[2], double alg[2],
                    double bus[2], int64_t wrong[2], const struct iterStats st[2]) {
  if (!jsonOut) return;
  fprintf(jsonOut, "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d",
          jsonRows++ ? "," : "", bytes, count, type, op, root);
  for (int k = 0; k < 2; k++) {
    fprintf(jsonOut, ", \"%s\": {\"%s\": %g, \"alg_bw\": %g, \"bus_bw\": %g, \"nwrong\": ", k ? "in_place" : "out_of_place",
            opt.cputime ? "cpu_time" : "time", t[k], alg[k], bus[k]);
    if (wrong[k] < 0) fprintf(jsonOut, "null}");
    else fprintf(jsonOut, "%lld}", (long long)wrong[k]);
    if (opt.perIter) jsonIterStats(k ? "in_place_per_iter" : "out_of_place_per_iter", &st[k]);
  }
  fprintf(jsonOut, ", \"actual_iterations\": %d, \"experiment_name\": \"\"}", opt.iters);
}

/* The redop column: nccl-tests' op name where the collective reduces,
 * "none" where it does not, and nothing for hypercube (which passes ""). */
static const char *opColumn(int op) {
  if (coll->reduction || coll == &sendRecvColl) return opNames[op];
  return coll == &hypercubeColl ? "" : "none";
}

static void runSize(struct threadState *ts, size_t bytes, int type, int op, int root) {
  size_t esz = typeSize(type), count = bytes / esz;
  perfCollsSetEltSize(esz);
  size_t sc, rc, pc, so, ro;
  coll->getCounts(count, totalRanks, &sc, &rc, &pc, &so, &ro);
  double t[2], alg[2], bus[2];
  int64_t wrong[2];
  struct iterStats st[2] = {{0}};
  for (int inPlace = 0; inPlace < 2; inPlace++) {
    double sec = timeCell(ts, pc, type, root, inPlace, so, ro, &st[inPlace]);
    coll->getBw(pc, esz, sec, totalRanks, &alg[inPlace], &bus[inPlace]);
    if (coll->summary && isMain && ts->thread == 0) coll->summary(pc, esz, sec, totalRanks);
    t[inPlace] = sec * 1e6;
    wrong[inPlace] = -1;
    /* nccl-tests leaves AlltoAll's and AlltoAllv's in-place results unchecked (N/A) */
    if (opt.check && !(inPlace && (coll == &alltoallColl || coll == &alltoallvColl))) {
      int64_t w = 0;
      for (int c = 0; c < opt.check && w == 0; c++) w = checkOnce(ts, sc, rc, pc, type, op, root, inPlace, so, ro);
      wrong[inPlace] = (int64_t)combine(ts, (double)w, ncclSum, 1); /* w: the thread's ranks' together */
      if (wrong[inPlace]) ts->errors++;
    }
    ts->bwSum += bus[inPlace];
    ts->bwCount++;
  }
  if (isMain && ts->thread == 0) {
    size_t size = (sc > rc ? sc : rc) * esz;
    char rootStr[16];
    sprintf(rootStr, "%6i", coll->rooted ? root : -1);
    printf("%12zu  %12zu  %8s  %6s  %6s", size, pc, typeNames[type], opColumn(op), rootStr);
    for (int k = 0; k < 2; k++) {
      char tb[16], ab[16], bb[16];
      fmtFigure(tb, t[k], 7);
      fmtFigure(ab, alg[k], 6);
      fmtFigure(bb, bus[k], 6);
      if (wrong[k] < 0) printf("  %7s  %6s  %6s    N/A", tb, ab, bb);
      else printf("  %7s  %6s  %6s  %6g", tb, ab, bb, (double)wrong[k]);
      if (opt.perIter) { /* i_min, i_max, i_p99, i_cv% */
        char mn[16], mx[16], p99[16], cv[16];
        fmtFigure(mn, st[k].min * 1e6, 7);
        fmtFigure(mx, st[k].max * 1e6, 7);
        fmtFigure(p99, st[k].p99 * 1e6, 7);
        fmtFigure(cv, iterCvPct(&st[k]), 7);
        printf("  %7s  %7s  %7s  %7s", mn, mx, p99, cv);
      }
    }
    if (opt.timestamps) {
      char stamp[32];
      stampNowLocal(stamp, sizeof stamp);
      printf("%21s", stamp);
    }
    printf("\n");
    fflush(stdout);
    jsonRow(size, pc, typeNames[type], opColumn(op), coll->rooted ? root : -1, t, alg, bus, wrong, st);
  }
  for (int k = 0; k < 2; k++) {
    free(st[k].times);
    free(st[k].perProcess);
  }
}

/* The sweep's next size, as nccl-tests steps (times -f, else plus -i);
 * after 0 a factor goes on from 1. SIZE_MAX when it would wrap, which ends
 * the sweep (no maxBytes is that large: parseSize). */
static size_t nextSize(size_t s) {
  size_t next;
  if (opt.stepFactor > 1) {
    if (s == 0) return 1;
    if (__builtin_mul_overflow(s, opt.stepFactor, &next)) return SIZE_MAX;
  } else if (__builtin_add_overflow(s, opt.stepBytes, &next)) {
    return SIZE_MAX;
  }
  return next;
}

/* Process 0, once every rank's device is known: the device lines, the
 * table's header, and the JSON file's start (with the devices). */
static void printDevices(const struct deviceInfo *all) {
  printf("#\n# Using devices\n");
  for (int r = 0; r < totalRanks; r++)
    printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [0000:%02x:00] %s\n", all[r].rank, all[r].group, all[r].pid,
           all[r].host, all[r].device, all[r].device & 0xff, DEVICE_NAME);
  printf("#\n");
  const char *time = opt.cputime ? "cputime" : "time"; /* -C: what is timed is the enqueue, as nccl-tests says */
  /* -S: a timestamp column, labelled as nccl-tests labels it */
  const char *stampLabel = opt.timestamps ? "timestamp" : "", *stampFormat = opt.timestamps ? STAMP_FORMAT : "";
  int stampWidth = opt.timestamps ? 19 : 0;
  if (opt.perIter) {
    printf("# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                                in-place "
           "(+ per-iteration)\n", "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %*s\n",
           "size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%",
           time, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", stampWidth, stampLabel);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %*s\n",
           "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", "(us)", "(GB/s)",
           "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", stampWidth, stampFormat);
  } else {
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "",
           "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size", "count", "type", "redop",
           "root", time, "algbw", "busbw", "#wrong", time, "algbw", "busbw", "#wrong", stampWidth, stampLabel);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", stampWidth, stampFormat);
  }
  fflush(stdout);
  if (!opt.json) return;
  char path[1024];
  snprintf(path, sizeof path, "%s", opt.json);
  for (int k = 0; !(jsonOut = fopen(path, "wx")) && k < 100; k++) snprintf(path, sizeof path, "%s.%d", opt.json, k);
  if (!jsonOut) {
    fprintf(stderr, "%s: cannot write JSON output to %s: %s\n", coll->name, opt.json, strerror(errno));
    return;
  }
  printf("# Writing JSON output to %s\n", path);
  int ver;
  ncclGetVersion(&ver);
  /* nccl-tests' preamble: when, the command line, the environment. */
  fprintf(jsonOut, "{\n  \"version\": 3,\n  \"start_time\": ");
  jsonNow(jsonOut);
  fprintf(jsonOut, ",\n  \"args\": [");
  for (int i = 0; i < mainArgc; i++) {
    if (i) fprintf(jsonOut, ", ");
    jsonString(jsonOut, mainArgv[i]);
  }
  fprintf(jsonOut, "],\n  \"env\": [");
  for (char **e = environ; e && *e; e++) {
    if (e != environ) fprintf(jsonOut, ", ");
    jsonString(jsonOut, *e);
  }
  fprintf(jsonOut, "],\n  \"nccl_version\": %d,\n  \"collective\": \"%s\",\n", ver, coll->name);
  fprintf(jsonOut, "  \"config\": {\"nthreads\": %d, \"ngpus\": %d, \"nranks\": %d, \"minimum_bytes\": %zu, "
                   "\"maximum_bytes\": %zu, \"%s\": %zu, \"warmup_iters\": %d, \"iterations\": %d, "
                   "\"aggregated_iterations\": %d, \"validation\": %d, \"graph\": 0, \"blocking_collectives\": %d, "
                   "\"per_iter_timing\": %s, \"per_iter_skip\": %d, \"parallel_init\": %s, \"unalign\": %d, \"devices\": [",
          opt.nThreads, opt.nGpus, totalRanks, opt.minBytes, opt.maxBytes,
          opt.stepFactor > 1 ? "step_factor" : "step_bytes", opt.stepFactor > 1 ? opt.stepFactor : opt.stepBytes,
          opt.warmup, opt.iters, opt.aggIters, opt.check, opt.blocking, opt.perIter ? "true" : "false", opt.perIterSkip,
          opt.parallelInit ? "true" : "false", opt.unalign);
  for (int r = 0; r < totalRanks; r++)
    fprintf(jsonOut, "%s{\"rank\": %d, \"group\": %d, \"pid\": %d, \"hostname\": \"%s\", \"device\": %d, "
                     "\"device_hex\": \"0000:%02x:00\", \"device_info\": \"%s\"}",
            r ? ", " : "", all[r].rank, all[r].group, all[r].pid, all[r].host, all[r].device, all[r].device & 0xff,
            DEVICE_NAME);
  fprintf(jsonOut, "]},\n  \"results\": [");
}

/* A buffer of the sweep's largest size, or a clear end (never a crash on
 * a NULL pointer). With -R, nccl-tests' registration: from ncclMemAlloc
 * (memory that local peers map, so they read it in place), registered with
 * comm (*reg the handle): -R 1 locally, -R 2 as a symmetric window (every
 * rank's buffers are, which the tuner may count on). */
static char *allocBuffer(size_t bytes, const char *what, int rank, ncclComm_t comm, void **reg) {
  size_t rounded = (bytes + 4095) / 4096 * 4096;
  char *p = NULL;
  if (opt.localRegister) {
    if (ncclMemAlloc((void **)&p, bytes) != ncclSuccess) p = NULL;
    ncclWindow_t win = NULL;
    if (p && opt.localRegister == 2) CK(ncclCommWindowRegister(comm, p, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
    else if (p) CK(ncclCommRegister(comm, p, bytes, reg));
    if (win) *reg = win;
  } else {
    p = rounded >= bytes ? aligned_alloc(4096, rounded) : NULL;
  }
  if (p == NULL) {
    fprintf(stderr, "%s: rank %d cannot allocate %zu bytes for its %s buffer (maxBytes %zu, %d ranks): %s\n",
            coll->name, rank, bytes, what, opt.maxBytes, totalRanks, strerror(ENOMEM));
    exit(2);
  }
  memset(p, 0, bytes);
  return p;
}

/* Every rank's device, gathered at rank 0; process 0 prints. */
static void gatherDevices(struct threadState *ts) {
  int G = opt.nGpus;
  struct deviceInfo *mine = calloc(G, sizeof *mine);
  struct deviceInfo *all = calloc((size_t)G * totalRanks, sizeof *all);
  if (!mine || !all) {
    fprintf(stderr, "%s: out of memory\n", coll->name);
    exit(2);
  }
  for (int g = 0; g < G; g++) {
    mine[g] = (struct deviceInfo){ts->firstRank + g, 0, (int)getpid(), rankDevice(ts->thread, g), ""};
    snprintf(mine[g].host, sizeof mine[g].host, "%s", hostName);
  }
  exchangeAtRoot(ts, mine, all, sizeof *mine, 0);
  if (isMain && ts->thread == 0) printDevices(all);
  free(mine);
  free(all);
}

/* Thread 0 of process 0, after the sweep: the error count, the average
 * busbw (checked against NCCL_TESTS_MIN_BW when set: below 0.9 of it
 * fails the run, as nccl-tests does) and the JSON file's end. Every rank
 * counted the same rows, so this thread's counts are the job's. */
static void printFooter(struct threadState *ts) {
  double avgBw = ts->bwCount ? ts->bwSum / ts->bwCount : NAN; /* no line (hypercube skipped): nccl-tests' nan */
  const char *minEnv = getenv("NCCL_TESTS_MIN_BW"), *bwCheck = "";
  if (minEnv && *minEnv) {
    ts->slow = avgBw < 0.9 * strtod(minEnv, NULL);
    bwCheck = ts->slow ? "FAILED" : "OK";
  }
  printf("# %-20s : %d %s\n", "Out of bounds values", ts->errors, ts->errors ? "FAILED" : "OK");
  printf("# %-20s : %g %s\n", "Avg bus bandwidth", avgBw, bwCheck);
  printf("#\n# Collective test concluded: %s\n#\n", coll->name);
  /* The library's last error, the last line as nccl-tests writes it (an
   * empty line if none). */
  const char *lastError = ncclGetLastError(NULL);
  if (lastError && *lastError) printf("# error: %s\n", lastError);
  else printf("\n");
  fflush(stdout);
  if (jsonOut) {
    fprintf(jsonOut, "\n  ],\n  \"out_of_bounds\": {\"count\": %d, \"okay\": %s},\n", ts->errors,
            ts->errors ? "false" : "true");
    char bw[32] = "null"; /* JSON has no nan */
    if (!isnan(avgBw)) snprintf(bw, sizeof bw, "%g", avgBw);
    fprintf(jsonOut, "  \"average_bus_bandwidth\": {\"bandwidth\": %s, \"okay\": %s},\n  \"errors\": [", bw,
            !*bwCheck ? "\"unchecked\"" : ts->slow ? "false" : "true");
    if (lastError && *lastError) jsonString(jsonOut, lastError);
    fprintf(jsonOut, "],\n  \"end_time\": ");
    jsonNow(jsonOut);
    fprintf(jsonOut, "\n}\n");
    fclose(jsonOut);
    jsonOut = NULL;
  }
}

static void *threadMain(void *arg) {
  struct threadState *ts = arg;
  int G = opt.nGpus;
  ts->comms = calloc(G, sizeof *ts->comms);
  ts->streams = calloc(G, sizeof *ts->streams);
  ts->sendBufs = calloc(G, sizeof(char *));
  ts->recvBufs = calloc(G, sizeof(char *));
  ts->sendRegs = calloc(G, sizeof(void *));
  ts->recvRegs = calloc(G, sizeof(void *));
  ts->ops = calloc(G, sizeof *ts->ops);
  CK(ncclGroupStart());
  for (int g = 0; g < G; g++) {
    CK(chorusSetDevice(rankDevice(ts->thread, g))); /* the communicator's device, as cudaSetDevice is to NCCL */
    CK(ncclCommInitRank(&ts->comms[g], totalRanks, commId, ts->firstRank + g));
  }
  CK(ncclGroupEnd());
  /* A size is the larger of the send and receive buffers, as nccl-tests
   * counts it (AllGather: the gathered output, each rank sending a 1/n
   * block of it), so no buffer exceeds maxBytes. */
  size_t bufBytes = opt.maxBytes + 4096 + 8 * (size_t)opt.unalign; /* -u: room for the shift, as nccl-tests */
  if (bufBytes < opt.maxBytes) {
    fprintf(stderr, "%s: maxBytes %zu does not fit in memory\n", coll->name, opt.maxBytes);
    exit(2);
  }
  for (int g = 0; g < G; g++) {
    if (!opt.streamNull) CK(chorusStreamCreate(&ts->streams[g]));
    ts->sendBufs[g] = allocBuffer(bufBytes, "send", ts->firstRank + g, ts->comms[g], &ts->sendRegs[g]);
    ts->recvBufs[g] = allocBuffer(bufBytes, "receive", ts->firstRank + g, ts->comms[g], &ts->recvRegs[g]);
  }
  gatherDevices(ts);
  /* The tool's own settings (alltoallv's traffic pattern), read by one
   * thread per process once the communicators are up, so that a refusal,
   * which process 0 explains, stops every rank together (the barrier also
   * shows the answer to the other threads). A refused run runs no size and
   * prints no footer, as nccl-tests; the explanation follows the table's
   * header, where nccl-tests puts a bad matrix's before it. */
  if (coll->setup) {
    if (ts->thread == 0) refused = coll->setup(totalRanks, opt.minBytes, opt.maxBytes, isMain);
    barrier(ts);
  }
  int t0 = opt.type < 0 ? 0 : opt.type, t1 = opt.type < 0 ? ncclNumTypes - 1 : opt.type;
  int loopOps = coll->reduction || coll == &sendRecvColl;
  int o0 = !loopOps ? 0 : opt.op < 0 ? 0 : opt.op, o1 = !loopOps ? 0 : opt.op < 0 ? PERF_OP_MULSUM : opt.op;
  int r0 = !coll->rooted ? 0 : opt.root < 0 ? 0 : opt.root, r1 = !coll->rooted ? 0 : opt.root < 0 ? totalRanks - 1 : opt.root;
  /* As nccl-tests' TimeTest, for each type, op and root: a warm-up at
   * every size (out of place), then the table's lines, -N times (0: for
   * good, on the first type). hypercube runs only on a power of 2 of
   * ranks, and says so from every thread (the header and footer as ever). */
  int skip = coll == &hypercubeColl && (totalRanks & (totalRanks - 1));
  if (skip) printf("nRanks %d is not a power of 2, skipping\n", totalRanks);
  for (int t = t0; t <= t1 && !skip && !refused; t++)
    for (int o = o0; o <= o1; o++)
      for (int r = r0; r <= r1; r++) {
        makeOps(ts, t, o);
        for (size_t b = opt.minBytes; b <= opt.maxBytes; b = nextSize(b)) {
          size_t sc, rc, pc, so, ro, esz = typeSize(t);
          perfCollsSetEltSize(esz);
          coll->getCounts(b / esz, totalRanks, &sc, &rc, &pc, &so, &ro);
          for (int w = 0; w < opt.warmup; w++) runOnce(ts, pc, t, r, 0, 0, 0);
          syncAll(ts);
          if (opt.stepFactor <= 1 && opt.stepBytes == 0) break;
        }
        for (int cyc = 0; opt.cycles == 0 || cyc < opt.cycles; cyc++)
          for (size_t b = opt.minBytes; b <= opt.maxBytes; b = nextSize(b)) {
            runSize(ts, b, t, o, r);
            if (opt.stepFactor <= 1 && opt.stepBytes == 0) break;
          }
        freeOps(ts, o);
      }
  /* The footer before any rank can leave: a launcher that stops the job
   * when a rank exits with an error (chorusrun, mpirun) would otherwise
   * cut rank 0 off before it, and parsers look for it. */
  if (isMain && ts->thread == 0 && !refused) printFooter(ts);
  if (refused && ts->thread == 0) { /* nccl-tests' testInternalError, from each process */
    printf(" .. %s pid %d: Test failure %s:%d\n", hostName, (int)getpid(), __FILE__, __LINE__);
    if (jsonOut) { /* closed as nccl-tests closes it, with no results */
      fprintf(jsonOut, "\n  ]\n}\n");
      fclose(jsonOut);
      jsonOut = NULL;
    }
    fflush(stdout);
  }
  barrier(ts);
  for (int g = 0; g < G; g++) {
    if (ts->streams[g]) CK(chorusStreamDestroy(ts->streams[g]));
    if (opt.localRegister == 2) {
      CK(ncclCommWindowDeregister(ts->comms[g], (ncclWindow_t)ts->sendRegs[g]));
      CK(ncclCommWindowDeregister(ts->comms[g], (ncclWindow_t)ts->recvRegs[g]));
    } else if (opt.localRegister) {
      CK(ncclCommDeregister(ts->comms[g], ts->sendRegs[g]));
      CK(ncclCommDeregister(ts->comms[g], ts->recvRegs[g]));
    }
    CK(ncclCommDestroy(ts->comms[g]));
    if (opt.localRegister) {
      CK(ncclMemFree(ts->sendBufs[g]));
      CK(ncclMemFree(ts->recvBufs[g]));
    } else {
      free(ts->sendBufs[g]);
      free(ts->recvBufs[g]);
    }
  }
  free(ts->comms);
  free(ts->streams);
  free(ts->sendBufs);
  free(ts->recvBufs);
  free(ts->sendRegs);
  free(ts->recvRegs);
  free(ts->ops);
  return NULL;
}

static size_t parseSize(const char *s, const char *what) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024, end++;
  else if (*end == 'M' || *end == 'm') v *= 1024 * 1024, end++;
  else if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024, end++;
  if (*end || end == s || !(v >= 0) || v >= 0x1p63) { /* 2^63 bytes: past any memory, and no sweep wraps */
    fprintf(stderr, "invalid size specified for '%s'\n", what);
    exit(-1);
  }
  return (size_t)v;
}

/* A whole number from lo to hi for flag -c, else a clear end (atoi would
 * take "-2" or "x" silently). */
static int parseRange(const char *s, int c, long lo, long hi) {
  char *end;
  long v = strtol(s, &end, 0);
  if (end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "invalid value '%s' for -%c (%ld to %ld)\n", s, c, lo, hi);
    exit(-1);
  }
  return (int)v;
}

static void usage(const char *prog) {
  printf("USAGE: %s \n\t[-t,--nthreads <num threads>] \n\t[-g,--ngpus <ranks per thread>] \n\t[-b,--minbytes <min size in bytes>] \n"
         "\t[-e,--maxbytes <max size in bytes>] \n\t[-i,--stepbytes <increment size>] \n\t[-f,--stepfactor <increment factor>] \n"
         "\t[-n,--iters <iteration count>] \n\t[-m,--agg_iters <aggregated iteration count>] \n\t[-w,--warmup_iters <warmup iteration count>] \n"
         "\t[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n"
         "\t[-c,--check <check iteration count>] \n\t[-o,--op <sum/prod/min/max/avg/mulsum/all>] \n"
         "\t[-d,--datatype <nccltype/all>] \n\t[-r,--root <root>] \n\t[-z,--blocking <0/1/2/3>] \n"
         "\t[-y,--stream_null <0/1>] \n\t[-T,--timeout <time in seconds>] \n\t[-C,--report_cputime <0/1>] \n"
         "\t[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n"
         "\t[-R,--local_register <0/1/2> buffers from ncclMemAlloc, registered (local peers read them in place); 2: as symmetric windows] \n"
         "\t[-J,--output_file <file>] \n\t[-S,--report_timestamps <0/1> report timestamps (default 0)] \n"
         "\t[-u,--unalign <index of first element> Misalign source and destination buffers (default: 0)] \n"
         "\t[-I,--per_iter_timing <0/1> per-iteration timing, in stream order (default: 0)] \n"
         "\t[-K,--per_iter_skip <count> exclude leading samples from -I summary stats (default: 0)] \n\t[-h,--help]\n",
         prog);
}

static void parseArgs(int argc, char **argv) {
  static struct option longOpts[] = {
      {"nthreads", required_argument, 0, 't'},     {"ngpus", required_argument, 0, 'g'},
      {"minbytes", required_argument, 0, 'b'},     {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'},    {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},        {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'}, {"run_cycles", required_argument, 0, 'N'},
      {"parallel_init", required_argument, 0, 'p'}, {"check", required_argument, 0, 'c'},
      {"op", required_argument, 0, 'o'},           {"datatype", required_argument, 0, 'd'},
      {"root", required_argument, 0, 'r'},         {"blocking", required_argument, 0, 'z'},
      {"stream_null", required_argument, 0, 'y'},  {"timeout", required_argument, 0, 'T'},
      {"cudagraph", required_argument, 0, 'G'},    {"report_cputime", required_argument, 0, 'C'},
      {"average", required_argument, 0, 'a'},      {"local_register", required_argument, 0, 'R'},
      {"output_file", required_argument, 0, 'J'},  {"report_timestamps", required_argument, 0, 'S'},
      {"cta_policy", required_argument, 0, 'x'},   {"device_implementation", required_argument, 0, 'D'},
      {"device_cta_count", required_argument, 0, 'V'}, {"memory", required_argument, 0, 'M'},
      {"unalign", required_argument, 0, 'u'},      {"per_iter_timing", required_argument, 0, 'I'},
      {"per_iter_skip", required_argument, 0, 'K'}, {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int c;
  opterr = 0; /* the errors below name the flag */
  while ((c = getopt_long(argc, argv, ":t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:G:C:a:R:J:S:x:D:V:M:u:I:K:h", longOpts,
                          NULL)) != -1) {
    switch (c) {
      case 't': opt.nThreads = atoi(optarg); break;
      case 'g': opt.nGpus = atoi(optarg); break;
      case 'b': opt.minBytes = parseSize(optarg, "minbytes"); break;
      case 'e': opt.maxBytes = parseSize(optarg, "maxbytes"); break;
      case 'i': opt.stepBytes = parseSize(optarg, "stepbytes"); break;
      case 'f': opt.stepFactor = (size_t)parseRange(optarg, c, 0, 1 << 30); break;
      case 'n': opt.iters = atoi(optarg); break;
      case 'm': opt.aggIters = atoi(optarg); break;
      case 'w': opt.warmup = parseRange(optarg, c, 0, INT_MAX); break;
      case 'N': opt.cycles = parseRange(optarg, c, 0, INT_MAX); break;
      case 'p': opt.parallelInit = atoi(optarg); break; /* every thread inits its own ranks anyway */
      case 'c': opt.check = parseRange(optarg, c, 0, INT_MAX); break;
      case 'o':
        opt.op = -2;
        if (!strcmp(optarg, "all")) opt.op = -1;
        for (int k = 0; k < 6; k++)
          if (!strcmp(optarg, opNames[k])) opt.op = k;
        if (opt.op == -2) {
          printf("invalid op %s, defaulting to sum\n", optarg);
          opt.op = ncclSum;
        }
        break;
      case 'd':
        opt.type = -2;
        if (!strcmp(optarg, "all")) opt.type = -1;
        for (int k = 0; k < ncclNumTypes; k++)
          if (!strcmp(optarg, typeNames[k])) opt.type = k;
        if (!strcmp(optarg, "bf16")) opt.type = ncclBfloat16;
        if (opt.type == -2) {
          printf("invalid type %s, defaulting to float\n", optarg);
          opt.type = ncclFloat;
        }
        break;
      case 'r': opt.root = (int)strtol(optarg, NULL, 0); break;
      case 'z': opt.blocking = parseRange(optarg, c, 0, 3); break;
      case 'y': opt.streamNull = parseRange(optarg, c, 0, 1); break;
      case 'T': opt.timeout = atoi(optarg); break;
      case 'G':
        if (atoi(optarg)) printf("Option -G (CUDA graph) not supported, ignoring\n");
        break;
      case 'C': opt.cputime = atoi(optarg); break;
      case 'a': opt.average = parseRange(optarg, c, 0, 3); break;
      case 'R':
        opt.localRegister = parseRange(optarg, c, 0, 2);
        break;
      case 'J': opt.json = optarg; break;
      case 'S': opt.timestamps = atoi(optarg); break;
      case 'u': opt.unalign = parseRange(optarg, c, 0, 1 << 20); break;
      case 'I': opt.perIter = (int)strtol(optarg, NULL, 0); break;
      case 'K': opt.perIterSkip = (int)strtol(optarg, NULL, 0); break;
      case 'x': case 'D': case 'V': case 'M':
        /* nccl-tests' flags for GPU-side features (CTA policy, device kernels, memory report) */
        if (atoi(optarg)) printf("Option -%c not supported on host memory, ignoring\n", c);
        break;
      case 'h': usage(argv[0]); exit(0);
      case ':':
        fprintf(stderr, "%s: option '%s' needs a value\n", coll->name, argv[optind - 1]);
        usage(argv[0]);
        exit(2);
      default:
        if (optopt) fprintf(stderr, "%s: invalid option '-%c'\n", coll->name, optopt);
        else fprintf(stderr, "%s: invalid option '%s'\n", coll->name, argv[optind - 1]);
        usage(argv[0]);
        exit(2);
    }
  }
  if (opt.minBytes > opt.maxBytes) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", opt.minBytes, opt.maxBytes);
    exit(-1);
  }
  if (opt.nThreads < 1 || opt.nGpus < 1 || opt.iters < 1 || opt.aggIters < 1) {
    fprintf(stderr, "invalid -t, -g, -n or -m value\n");
    exit(-1);
  }
  /* -I and -K as nccl-tests takes them: a bad value is said and dropped */
  if (opt.perIter != 0 && opt.perIter != 1) {
    fprintf(stderr, "per-iteration timing (-I) only supports 0=off or 1=on. Disabling.\n");
    opt.perIter = 0;
  }
  if (opt.perIterSkip < 0 || opt.perIterSkip >= opt.iters) {
    fprintf(stderr, "per-iteration skip (-K) must be between 0 and %d. Disabling.\n", opt.iters - 1);
    opt.perIterSkip = 0;
  }
  if (opt.perIterSkip && !opt.perIter) {
    fprintf(stderr, "per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.\n");
    opt.perIterSkip = 0;
  }
}

#ifdef CHORUS_PERF_MPI
static int mpiStarted; /* setupProcesses called MPI_Init (the job's ranks may still come from elsewhere) */
#endif

/* Ranks come from the launcher: mpirun (when built with MPI), chorusrun,
 * torchrun-style variables, PMI or Slurm; none means one process. */
static void setupProcesses(int *argc, char ***argv) {
  int useMpi = 0;
#ifdef CHORUS_PERF_MPI
  useMpi = mpiStarted = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
  if (useMpi) {
    MPI_Init(argc, argv);
    MPI_Comm_size(MPI_COMM_WORLD, &nProcs);
    MPI_Comm_rank(MPI_COMM_WORLD, &proc);
    /* Another MPI's launcher (PMI_SIZE from MPICH's Hydra or Slurm, this
     * build linked with Open MPI) leaves each process a world of its own:
     * the launcher's variables name the job then, not MPI. */
    int envProc, envProcs;
    if (nProcs == 1 && chorusEnvRank(&envProc, &envProcs) == ncclSuccess && envProcs > 1) useMpi = 0;
  }
#endif
  if (!useMpi && chorusEnvRank(&proc, &nProcs) != ncclSuccess) {
    proc = 0;
    nProcs = 1;
  }
  totalRanks = nProcs * opt.nThreads * opt.nGpus;
  isMain = proc == 0;
  gethostname(hostName, sizeof hostName - 1);
  static const char *localRankVars[] = {"CHORUS_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"};
  for (size_t k = 0; k < sizeof localRankVars / sizeof *localRankVars; k++) {
    const char *v = getenv(localRankVars[k]);
    if (v && *v) {
      localRank = atoi(v);
      break;
    }
  }
  const char *base = getenv("NCCL_TESTS_DEVICE");
  if (base && *base) deviceBase = atoi(base);
  if (nProcs == 1 || getenv("NCCL_COMM_ID") || useMpi) {
    if (!useMpi || proc == 0) CK(ncclGetUniqueId(&commId));
#ifdef CHORUS_PERF_MPI
    if (useMpi) MPI_Bcast(&commId, sizeof commId, MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
    return;
  }
  /* torchrun/Slurm style: the rendezvous at MASTER_ADDR:MASTER_PORT. */
  const char *host = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  if (!host || !port) {
    fprintf(stderr, "%d processes but no rendezvous address: set NCCL_COMM_ID or MASTER_ADDR/MASTER_PORT, "
                    "or launch with chorusrun%s\n", nProcs,
#ifdef CHORUS_PERF_MPI
            ""
#else
            " (this build has no MPI support)"
#endif
    );
    exit(2);
  }
  char addr[300];
  snprintf(addr, sizeof addr, "%s:%s", host, port);
  setenv("NCCL_COMM_ID", addr, 1);
  CK(ncclGetUniqueId(&commId));
}

int perfMain(int argc, char **argv, const struct testColl *c) {
  coll = c;
  mainArgc = argc;
  mainArgv = malloc(sizeof(char *) * (size_t)(argc + 1));
  if (mainArgv) memcpy(mainArgv, argv, sizeof(char *) * (size_t)(argc + 1)); /* before getopt permutes argv */
  else mainArgc = 0;
  parseArgs(argc, argv);
  if (opt.timeout > 0) {
    char buf[32];
    snprintf(buf, sizeof buf, "%d", opt.timeout);
    setenv("CHORUS_TIMEOUT", buf, 1);
  }
  setupProcesses(&argc, &argv);
  int ver;
  ncclGetVersion(&ver);
  if (isMain) {
    printf("# nccl-tests version %s nccl-headers=%d nccl-library=%d\n", PERF_VERSION, NCCL_VERSION_CODE, ver);
    printf("# Collective test starting: %s\n", coll->name);
    char step[64];
    if (opt.stepFactor > 1) snprintf(step, sizeof step, "%zu(factor)", opt.stepFactor);
    else snprintf(step, sizeof step, "%zu(bytes)", opt.stepBytes);
    printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %s warmup iters: %d iters: %d agg iters: %d "
           "validation: %d graph: %d unalign: %d\n", opt.nThreads, opt.nGpus, opt.minBytes, opt.maxBytes, step,
           opt.warmup, opt.iters, opt.aggIters, opt.check, 0, opt.unalign);
    if (opt.blocking == 1) printf("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
    if (opt.blocking == 2) printf("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
    if (opt.blocking == 3)
      printf("# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n");
    if (opt.perIter) {
      printf("# Per-Iteration Report: host clock in stream order; i_* uses max over process rows");
      if (opt.perIterSkip) printf("; summary skips first %d iterations", opt.perIterSkip);
      printf(" \n");
    }
    if (opt.parallelInit) printf("# Parallel Init Enabled: threads call into NcclInitRank concurrently \n");
  }
  struct threadState *ts = calloc(opt.nThreads, sizeof *ts);
  pthread_t *th = calloc(opt.nThreads, sizeof *th);
  for (int t = 0; t < opt.nThreads; t++) {
    ts[t].thread = t;
    ts[t].firstRank = (proc * opt.nThreads + t) * opt.nGpus;
    pthread_create(&th[t], NULL, threadMain, &ts[t]);
  }
  int errors = 0;
  double bwSum = 0;
  int bwCount = 0;
  for (int t = 0; t < opt.nThreads; t++) {
    pthread_join(th[t], NULL);
    errors += ts[t].errors;
    bwSum += ts[t].bwSum;
    bwCount += ts[t].bwCount;
  }
  /* Every rank counted the same rows; thread 0's view is the report. */
  errors = ts[0].errors + ts[0].slow + refused;
  free(ts);
  free(th);
  (void)bwSum;
  (void)bwCount;
#ifdef CHORUS_PERF_MPI
  if (mpiStarted) MPI_Finalize();
#endif
  return errors ? 1 : 0;
}
