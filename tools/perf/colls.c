/* The collective tables of the perf tools: counts, expected values and
 * bandwidth factors as nccl-tests defines them (doc/PERFORMANCE.md). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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
const struct testColl allReduceColl = {"all_reduce_perf", 1, 0, arCounts, arExpected, arBw, arRun,
                                       NULL, NULL, NULL, NULL};

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
const struct testColl allGatherColl = {"all_gather_perf", 0, 0, agCounts, agExpected, agBw, agRun,
                                       NULL, NULL, NULL, NULL};

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
const struct testColl reduceScatterColl = {"reduce_scatter_perf", 1, 0, rsCounts, rsExpected, agBw, rsRun,
                                           NULL, NULL, NULL, NULL};

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
const struct testColl broadcastColl = {"broadcast_perf", 0, 1, arCounts, bcExpected, oneBw, bcRun,
                                       NULL, NULL, NULL, NULL};

/* reduce */
static double rdExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return rank == root ? perfReduce(n, i, op, in) : NAN;
}
static ncclResult_t rdRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  return ncclReduce(s, r, c, t, op, root, comm, st);
}
const struct testColl reduceColl = {"reduce_perf", 1, 1, arCounts, rdExpected, oneBw, rdRun, NULL, NULL, NULL, NULL};

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
const struct testColl sendRecvColl = {"sendrecv_perf", 0, 0, arCounts, srExpected, oneBw, srRun,
                                      NULL, NULL, NULL, NULL};

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
const struct testColl hypercubeColl = {"hypercube_perf", 0, 0, agCounts, agExpected, hcBw, hcRun,
                                       hcSteps, hcStep, NULL, NULL};

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
const struct testColl alltoallColl = {"alltoall_perf", 0, 0, a2aCounts, a2aExpected, agBw, a2aRun,
                                      NULL, NULL, NULL, NULL};

/* gather: every rank's block lands on the root at rank * count */
static double gaExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return rank == root ? in((int)(i / pc), i % pc) : NAN;
}
static ncclResult_t gaRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  return ncclGather(s, r, c, t, root, comm, st);
}
const struct testColl gatherColl = {"gather_perf", 0, 1, agCounts, gaExpected, agBw, gaRun, NULL, NULL, NULL, NULL};

/* scatter: the root's block p lands on rank p */
static double scExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  return in(root, rank * pc + i);
}
static ncclResult_t scRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                          int n, ncclComm_t comm, cudaStream_t st) {
  return ncclScatter(s, r, c, t, root, comm, st);
}
const struct testColl scatterColl = {"scatter_perf", 0, 1, rsCounts, scExpected, agBw, scRun, NULL, NULL, NULL, NULL};

/* alltoallv (nccl-tests 2.18.5 on): rank i sends bytes(i, j) to rank j,
 * its blocks one after another in j's order, and receives its blocks
 * likewise in the source's order. bytes comes from a traffic matrix file
 * (NCCL_TESTS_ALLTOALLV_MATRIX_FILE, times NCCL_TESTS_ALLTOALLV_MATRIX_SCALE)
 * or, without one, from the sweep size: each rank sends the same total,
 * spread over its peers by distance (NCCL_TESTS_ALLTOALLV_SPREAD, 0
 * uniform to 1 in proportion to (j - i) mod n). Every block is rounded
 * down to 16 bytes. Read by a2avSetup before any size runs, then only
 * read. */
static struct {
  const char *file; /* NULL: the generated pattern */
  size_t *matrix;   /* dim x dim, bytes */
  int dim;
  double scale, spread;
  int summary; /* NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY */
} a2av = {NULL, NULL, 0, 1.0, 1.0, 0};

/* Block i -> j in bytes; total: what each rank sends in the generated
 * pattern (the sweep's per-rank count times n). */
static size_t a2avBytes(int i, int j, int n, size_t total) {
  if (a2av.file) return a2av.matrix[(size_t)i * a2av.dim + j];
  if (n == 1) return total & ~(size_t)15;
  double uniform = (double)total / n, sumDist = (double)n * (n - 1) / 2;
  double byDist = (double)((j - i + n) % n) * (double)total / sumDist;
  return (size_t)((1.0 - a2av.spread) * uniform + a2av.spread * byDist) & ~(size_t)15;
}

/* Elements a rank sends (receives) at most, over every rank. */
static void a2avMax(int n, size_t total, size_t esz, size_t *send, size_t *recv) {
  *send = *recv = 0;
  for (int i = 0; i < n; i++) {
    size_t s = 0, r = 0;
    for (int j = 0; j < n; j++) {
      s += a2avBytes(i, j, n, total) / esz;
      r += a2avBytes(j, i, n, total) / esz;
    }
    if (s > *send) *send = s;
    if (r > *recv) *recv = r;
  }
}

/* paramCount: the sweep's per-peer count (the generated pattern spreads n
 * of them from each rank); 0 with a matrix, whose blocks give the sizes. */
static void a2avCounts(size_t count, int n, size_t *s, size_t *r, size_t *p, size_t *so, size_t *ro) {
  *p = a2av.file ? 0 : base(count, n, perfEltSize);
  a2avMax(n, *p * n * perfEltSize, perfEltSize, s, r);
  *so = *ro = 0;
}

/* Output element i of rank: the blocks from sources 0, 1, ... lie one
 * after another; the one that holds i comes from its source's input,
 * from where that source's block for this rank starts (after its blocks
 * for ranks below). Past the last block 0: the zeroed buffer, which
 * nothing may write. */
static double a2avExpected(int rank, int n, size_t i, size_t pc, int root, int op, double (*in)(int, size_t)) {
  size_t esz = perfEltSize, total = pc * n * esz;
  for (int src = 0; src < n; src++) {
    size_t c = a2avBytes(src, rank, n, total) / esz;
    if (i >= c) {
      i -= c;
      continue;
    }
    size_t at = 0;
    for (int k = 0; k < rank; k++) at += a2avBytes(src, k, n, total) / esz;
    return in(src, at + i);
  }
  return 0;
}

/* algbw from the rank that sends or receives the most, busbw as AlltoAll's. */
static void a2avBw(size_t pc, size_t esz, double sec, int n, double *alg, double *bus) {
  size_t s, r;
  a2avMax(n, pc * n * esz, esz, &s, &r);
  *alg = (double)((s > r ? s : r) * esz) / 1e9 / sec;
  *bus = *alg * ((double)(n - 1) / n);
}

/* A Send and a Recv per peer with a block, in one group. */
static ncclResult_t a2avRun(const void *s, void *r, size_t c, ncclDataType_t t, ncclRedOp_t op, int root, int rank,
                            int n, ncclComm_t comm, cudaStream_t st) {
  size_t esz = perfEltSize, total = c * n * esz;
  const char *from = s;
  char *to = r;
  ncclResult_t res;
  if ((res = ncclGroupStart()) != ncclSuccess) return res;
  for (int peer = 0; peer < n; peer++) {
    size_t sc = a2avBytes(rank, peer, n, total) / esz, rc = a2avBytes(peer, rank, n, total) / esz;
    if (sc && (res = ncclSend(from, sc, t, peer, comm, st)) != ncclSuccess) return res;
    if (rc && (res = ncclRecv(to, rc, t, peer, comm, st)) != ncclSuccess) return res;
    from += sc * esz;
    to += rc * esz;
  }
  return ncclGroupEnd();
}

/* A variable holding a number, as nccl-tests reads it: anything else
 * (and NaN, which no range holds) leaves *v as it was. */
static void envNumber(const char *name, double *v) {
  const char *s = getenv(name);
  if (!s) return;
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (errno != ERANGE && end != s && !*end && !isnan(x)) *v = x;
}

#define A2AV_SAY(...)                  \
  do {                                 \
    if (print) printf(__VA_ARGS__);    \
  } while (0)

/* The matrix file: rows of numbers (bytes) separated by white space, one
 * row a line, as many rows as columns; each value times the scale,
 * rounded down to 16. Says what is wrong as nccl-tests does; 0 if none. */
static int a2avReadMatrix(int print) {
  const char *file = a2av.file;
  FILE *f = fopen(file, "rb");
  char *buf = NULL;
  size_t *m = NULL, len = 0, rows = 0, cols = 0, inRow = 0, nvals = 0, cap = 0;
  int bad = 1;
  long pos;
  if (!f) {
    A2AV_SAY("Unable to open alltoallv traffic matrix file %s.\n", file);
    goto out;
  }
  if (fseek(f, 0, SEEK_END) != 0) {
    A2AV_SAY("Unable to seek alltoallv traffic matrix file %s.\n", file);
    goto out;
  }
  if ((pos = ftell(f)) < 0) {
    A2AV_SAY("Unable to tell alltoallv traffic matrix file size %s.\n", file);
    goto out;
  }
  len = (size_t)pos;
  if (fseek(f, 0, SEEK_SET) != 0) {
    A2AV_SAY("Unable to rewind alltoallv traffic matrix file %s.\n", file);
    goto out;
  }
  if (!(buf = malloc(len + 1))) goto out;
  if (fread(buf, 1, len, f) != len) {
    A2AV_SAY("Unable to read alltoallv traffic matrix file %s.\n", file);
    goto out;
  }
  buf[len] = '\0';
  /* A line with values ends a row (so does the file's end); rows and
   * columns count from 0 in the messages. */
  for (char *p = buf;;) {
    if (*p && !isspace((unsigned char)*p)) {
      char *end;
      errno = 0;
      double v = strtod(p, &end);
      long double scaled = (long double)v * a2av.scale;
      if (end == p || errno == ERANGE || (*end && !isspace((unsigned char)*end)) || isnan(scaled)) {
        A2AV_SAY("Invalid alltoallv traffic matrix value at row %zu col %zu in file %s.\n", rows, inRow, file);
        goto out;
      }
      if (v < 0) {
        A2AV_SAY("Invalid alltoallv traffic matrix value at row %zu col %zu in file %s. Value must be non-negative.\n",
                 rows, inRow, file);
        goto out;
      }
      if (scaled > (long double)SIZE_MAX) {
        A2AV_SAY("Invalid alltoallv traffic matrix value at row %zu col %zu in file %s. Value overflow (value=%g "
                 "scale=%g).\n", rows, inRow, file, v, a2av.scale);
        goto out;
      }
      if (nvals == cap) {
        size_t *grown = realloc(m, (cap = cap ? 2 * cap : 64) * sizeof *m);
        if (!grown) goto out;
        m = grown;
      }
      m[nvals++] = (size_t)scaled & ~(size_t)15;
      inRow++;
      p = end;
      continue;
    }
    if ((*p == '\n' || !*p) && inRow) {
      if (rows == 0) cols = inRow;
      else if (inRow != cols) {
        A2AV_SAY("Invalid alltoallv traffic matrix column count in file %s row %zu. Expected %zu columns, got %zu.\n",
                 file, rows, cols, inRow);
        goto out;
      }
      rows++;
      inRow = 0;
    }
    if (!*p) break;
    p++;
  }
  if (rows == 0) A2AV_SAY("Invalid alltoallv traffic matrix, file %s is empty.\n", file);
  else if (rows != cols)
    A2AV_SAY("Invalid alltoallv traffic matrix, file %s must be square (got %zux%zu).\n", file, rows, cols);
  else {
    a2av.matrix = m;
    a2av.dim = (int)rows;
    m = NULL;
    bad = 0;
  }
out:
  if (f) fclose(f);
  free(buf);
  free(m);
  return bad;
}

/* The variables, the matrix, and what nccl-tests refuses with one: more
 * ranks than it has, a sweep (-b must equal -e), or buffers (-e) smaller
 * than the most a rank sends or receives. */
static int a2avSetup(int n, size_t minBytes, size_t maxBytes, int print) {
  const char *s = getenv("NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY");
  a2av.summary = s && atoi(s) != 0;
  envNumber("NCCL_TESTS_ALLTOALLV_SPREAD", &a2av.spread);
  a2av.spread = fmin(fmax(a2av.spread, 0.0), 1.0);
  envNumber("NCCL_TESTS_ALLTOALLV_MATRIX_SCALE", &a2av.scale);
  a2av.scale = fmax(a2av.scale, 0.0);
  a2av.file = getenv("NCCL_TESTS_ALLTOALLV_MATRIX_FILE");
  if (!a2av.file) return 0;
  if (a2avReadMatrix(print)) return 1;
  if (n > a2av.dim) {
    A2AV_SAY("Invalid alltoallv traffic matrix, requested nranks (%d) is larger than matrix size (%d) in file %s.\n", n,
             a2av.dim, a2av.file);
    return 1;
  }
  size_t most, recv;
  a2avMax(n, 0, 1, &most, &recv);
  if (recv > most) most = recv;
  if (maxBytes < most) {
    A2AV_SAY("maxBytes (-e) must be at least %zu bytes as required by traffic matrix file %s (got %zu). Increase -e.\n",
             most, a2av.file, maxBytes);
    return 1;
  }
  if (minBytes != maxBytes) {
    A2AV_SAY("-b and -e options must be set to the same value (e.g., -b 32M -e 32M) when using alltoallv traffic "
             "matrix mode.\n");
    return 1;
  }
  return 0;
}

/* NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: each rank's bytes and bandwidth. */
static void a2avSummary(size_t pc, size_t esz, double sec, int n) {
  if (!a2av.summary) return;
  size_t total = pc * n * esz;
  if (a2av.file)
    printf("# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=matrix nranks=%d matrix_dim=%d scale=%.3f time_usec=%.2f\n", n,
           a2av.dim, a2av.scale, sec * 1e6);
  else
    printf("# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=generated nranks=%d total_bytes=%zu spread=%.3f "
           "time_usec=%.2f\n", n, total, a2av.spread, sec * 1e6);
  for (int r = 0; r < n; r++) {
    size_t s = 0, rc = 0;
    for (int p = 0; p < n; p++) {
      s += a2avBytes(r, p, n, total);
      rc += a2avBytes(p, r, n, total);
    }
    double alg = (double)(s > rc ? s : rc) / 1e9 / sec;
    printf("#   rank=%d send_bytes=%zu recv_bytes=%zu alg_bw=%.2f bus_bw=%.2f\n", r, s, rc, alg,
           alg * ((double)(n - 1) / n));
  }
}
const struct testColl alltoallvColl = {"alltoallv_perf", 0, 0, a2avCounts, a2avExpected, a2avBw, a2avRun,
                                       NULL, NULL, a2avSetup, a2avSummary};
