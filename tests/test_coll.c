/* Every collective × datatype × op × in-place/out-of-place × count, on
 * forked processes (one per rank) or on ncclCommInitAll ranks driven from
 * one thread with group calls; results checked against an independent
 * reference, with guard bytes around every buffer.
 * "bounds" runs the counts on the algorithms' edges instead (see boundCounts).
 *   test_coll <nranks> [fork|threads] [quick|full|bounds] [groupinit] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "harness.h"
#include "values.h"

enum { AR, BC, RED, AG, RS, NCOLL };
static const char *collNames[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter"};
#define OP_PREMUL 5
#define OP_BAND 6 /* chorusRedOpCreateBitwise's, for integer types */
#define OP_BOR 7
#define OP_BXOR 8
#define NOPS 9
static const char *opNames[] = {"sum", "prod", "max", "min", "avg", "premulsum", "band", "bor", "bxor"};
static int isBitwise(int op) { return op >= OP_BAND && op <= OP_BXOR; }

struct testCase {
  int coll, dtype, op, inplace, root;
  size_t count;
};

struct rankState {
  void *send, *recv; /* what is passed to the call */
  void *sendAlloc, *recvAlloc;
  ncclRedOp_t op;
};

static double inputVal(const struct testCase *c, int rank, size_t i) {
  if (c->op == ncclProd) return ((rank + i) % 3 == 0) ? 2 : 1;
  if (isBitwise(c->op)) return (double)((rank * 37 + i * 11 + 5) % 128); /* every bit of int8's 7 */
  int maxv = typeIsFp8(c->dtype) ? 2 : 4;
  return (double)((rank * 7 + i * 3 + 1) % maxv);
}

/* PreMulSum scalars differ per rank, as in nccl-tests: 1 on even ranks, 2 on odd. */
static double premulScalar(int rank) { return rank % 2 ? 2.0 : 1.0; }

static double reduced(const struct testCase *c, int nranks, size_t i) {
  double acc = inputVal(c, 0, i) * (c->op == OP_PREMUL ? premulScalar(0) : 1);
  for (int r = 1; r < nranks; r++) {
    double v = inputVal(c, r, i) * (c->op == OP_PREMUL ? premulScalar(r) : 1);
    switch (c->op) {
      case OP_BAND: acc = (double)((int64_t)acc & (int64_t)v); break;
      case OP_BOR: acc = (double)((int64_t)acc | (int64_t)v); break;
      case OP_BXOR: acc = (double)((int64_t)acc ^ (int64_t)v); break;
      case ncclProd: acc *= v; break;
      case ncclMax: acc = v > acc ? v : acc; break;
      case ncclMin: acc = v < acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  if (c->op == ncclAvg) acc = typeIsFloat(c->dtype) ? acc / nranks : (double)((int64_t)acc / nranks);
  return acc;
}

static int isReduction(int coll) { return coll == AR || coll == RED || coll == RS; }

static size_t sendCount(const struct testCase *c, int n) { return c->coll == RS ? c->count * n : c->count; }
static size_t recvCount(const struct testCase *c, int n) { return c->coll == AG ? c->count * n : c->count; }

static int prepare(const struct testCase *c, int rank, int n, ncclComm_t comm, struct rankState *s) {
  size_t esz = typeSize(c->dtype), sc = sendCount(c, n), rc = recvCount(c, n);
  memset(s, 0, sizeof *s);
  s->recvAlloc = guardAlloc(rc * esz);
  memset(s->recvAlloc, 0x5c, rc * esz); /* sentinel: must be overwritten (or kept on Reduce non-roots) */
  if (c->inplace) {
    s->recv = s->recvAlloc;
    if (c->coll == AG) s->send = (char *)s->recv + rank * c->count * esz;
    else if (c->coll == RS) {
      /* In place: recvbuff = sendbuff + rank*recvcount, so the send buffer is the big one. */
      guardFree(s->recvAlloc);
      s->recvAlloc = NULL;
      s->sendAlloc = guardAlloc(sc * esz);
      s->send = s->sendAlloc;
      s->recv = (char *)s->send + rank * c->count * esz;
    } else s->send = s->recv;
  } else {
    s->sendAlloc = guardAlloc(sc * esz);
    s->send = s->sendAlloc;
    s->recv = s->recvAlloc;
  }
  /* Fill the input where the call reads it. */
  if (c->coll == RS) {
    for (size_t i = 0; i < sc; i++) putValue(c->dtype, s->send, i, inputVal(c, rank, i));
  } else {
    for (size_t i = 0; i < c->count; i++) putValue(c->dtype, s->send, i, inputVal(c, rank, i));
  }
  s->op = (ncclRedOp_t)c->op;
  if (c->op == OP_PREMUL) {
    char scalar[8];
    putValue(c->dtype, scalar, 0, premulScalar(rank));
    NCCLCHECK(ncclRedOpCreatePreMulSum(&s->op, scalar, c->dtype, ncclScalarHostImmediate, comm));
  }
  if (isBitwise(c->op)) NCCLCHECK(chorusRedOpCreateBitwise(&s->op, (chorusBitwiseOp_t)(c->op - OP_BAND), c->dtype, comm));
  return 0;
}

static ncclResult_t issue(const struct testCase *c, ncclComm_t comm, struct rankState *s) {
  switch (c->coll) {
    case AR: return ncclAllReduce(s->send, s->recv, c->count, c->dtype, s->op, comm, NULL);
    case BC: return ncclBroadcast(s->send, s->recv, c->count, c->dtype, c->root, comm, NULL);
    case RED: return ncclReduce(s->send, s->recv, c->count, c->dtype, s->op, c->root, comm, NULL);
    case AG: return ncclAllGather(s->send, s->recv, c->count, c->dtype, comm, NULL);
    default: return ncclReduceScatter(s->send, s->recv, c->count, c->dtype, s->op, comm, NULL);
  }
}

static double tolerance(const struct testCase *c) {
  if (c->op != ncclAvg || !typeIsFloat(c->dtype)) return 0;
  switch (c->dtype) {
    case ncclFloat32: return 1e-5;
    case ncclFloat64: return 1e-12;
    case ncclFloat16: return 5e-3;
    case ncclBfloat16: return 3e-2;
    default: return 0.3;
  }
}

static int check(const struct testCase *c, int rank, int n, ncclComm_t comm, struct rankState *s) {
  size_t rc = recvCount(c, n);
  double tol = tolerance(c);
  int bad = 0;
  size_t firstBad = 0;
  double got = 0, want = 0;
  int checkOutput = !(c->coll == RED && rank != c->root);
  for (size_t i = 0; i < rc; i++) {
    double w;
    if (c->coll == BC) w = inputVal(c, c->root, i);
    else if (c->coll == AG) w = inputVal(c, (int)(i / c->count), i % c->count);
    else if (c->coll == RS) w = reduced(c, n, rank * c->count + i);
    else w = reduced(c, n, i);
    double g;
    if (!checkOutput) {
      /* A Reduce non-root's recvbuff is not written (sentinel stays) unless in place. */
      if (c->inplace) break;
      unsigned char b = ((unsigned char *)s->recv)[i * typeSize(c->dtype)];
      if (b != 0x5c) {
        bad++;
        firstBad = i;
      }
      continue;
    }
    g = getValue(c->dtype, s->recv, i);
    int ok = tol == 0 ? g == w : (g - w <= tol * (1 + (w < 0 ? -w : w)) && w - g <= tol * (1 + (w < 0 ? -w : w)));
    if (!ok) {
      if (!bad) {
        firstBad = i;
        got = g;
        want = w;
      }
      bad++;
    }
  }
  int guards = (s->sendAlloc && guardCheck(s->sendAlloc)) || (s->recvAlloc && guardCheck(s->recvAlloc));
  if (c->op == OP_PREMUL || isBitwise(c->op)) NCCLCHECK(ncclRedOpDestroy(s->op, comm));
  guardFree(s->sendAlloc);
  guardFree(s->recvAlloc);
  if (bad || guards) {
    fprintf(stderr,
            "rank %d/%d: %s %s %s count %zu root %d %s: %d wrong (first at %zu: got %g want %g)%s\n", rank, n,
            collNames[c->coll], opNames[c->op], "", c->count, c->root, c->inplace ? "in-place" : "out-of-place",
            bad, firstBad, got, want, guards ? " GUARD BYTES OVERWRITTEN" : "");
    return 1;
  }
  return 0;
}

struct config {
  int quick, bounds;
};

/* Calls fn for every test case, in the same order on every rank. */
typedef int (*caseFn)(const struct testCase *c, void *arg);
static int forEachCase(int n, int quick, caseFn fn, void *arg) {
  static const size_t counts[] = {0, 1, 7, 1001, 70001};
  int ncounts = quick ? 4 : 5;
  for (int ci = 0; ci < ncounts; ci++)
    for (int coll = 0; coll < NCOLL; coll++)
      for (int t = 0; t < ncclNumTypes; t++)
        for (int op = 0; op < (isReduction(coll) ? NOPS : 1); op++)
          for (int inplace = 0; inplace < 2; inplace++) {
            if (isBitwise(op) && typeIsFloat(t)) continue; /* bitwise: integers only */
            struct testCase c = {coll, t, op, inplace, (int)((counts[ci] + coll + t) % n), counts[ci]};
            if (fn(&c, arg)) return 1;
          }
  /* Large messages: several slots, several channels. */
  for (int coll = 0; coll < NCOLL; coll++)
    for (int inplace = 0; inplace < 2; inplace++) {
      struct testCase c = {coll, ncclFloat32, ncclSum, inplace, n - 1, (1 << 20) + 3};
      if (fn(&c, arg)) return 1;
    }
  return 0;
}

/* Counts on the algorithms' edges of one collective, for a FIFO of
 * NCCL_BUFFSIZE bytes (the slot geometry mirrors transport/conn.c; if it
 * drifts these counts still test correctness, only less sharply), each -1,
 * exact and +1: multiples of nranks x the 64-byte alignment a ring block
 * is cut at, a FIFO slot, a ring piece (half the peer's FIFO), a pipeline
 * loop (AllReduce: nranks pieces; AllGather, ReduceScatter: one piece;
 * the chains: a slot), the one-hop AllReduce's limit; then one odd count
 * of more than two loops and, for float32 up to 8 ranks, one of two
 * channels. */
static int boundCounts(int coll, int n, size_t esz, size_t *out, int max) {
  const char *e = getenv("NCCL_BUFFSIZE");
  size_t buff = e ? strtoull(e, NULL, 0) : 4194304;
  size_t nslots = buff / (128 * 1024);
  nslots = nslots < 8 ? 8 : nslots > 64 ? 64 : nslots;
  size_t slot = (((buff / nslots) & ~(size_t)63) - 32) / esz;
  size_t piece = nslots * slot * esz / 2 / 64 * 64 / esz, align = 64 / esz;
  size_t loop = coll == AR ? piece * n : coll == AG || coll == RS ? piece : slot;
  e = getenv("CHORUS_SMALL_THRESHOLD");
  size_t small = coll == AR ? (e ? strtoull(e, NULL, 0) : 16384) / esz : 1;
  size_t centres[] = {1, (size_t)n, align * n, 3 * align * n, slot, piece, loop, small};
  size_t once[] = {2 * loop + align + 1, esz == 4 && n <= 8 ? (2u << 20) / esz + 1 : 0};
  int k = 0;
  out[k++] = 0;
  for (size_t i = 0; i < sizeof centres / sizeof centres[0] + sizeof once / sizeof once[0]; i++)
    for (int d = -1; d <= 1; d++) {
      int single = i >= sizeof centres / sizeof centres[0];
      if (single && d != 0) continue;
      size_t c = single ? once[i - sizeof centres / sizeof centres[0]] : centres[i] + (size_t)d;
      int dup = c == 0;
      for (int j = 0; j < k; j++) dup |= out[j] == c;
      if (!dup && k < max) out[k++] = c;
    }
  return k;
}

/* Every collective at its edge counts, for one type per element size (and
 * bfloat16 for rounding; past 8 ranks, in threads mode on one process, the
 * 2- and 4-byte ones), sum in and out of place, and avg and premulsum on
 * AllReduce and ReduceScatter. */
static int forEachBoundCase(int n, caseFn fn, void *arg) {
  static const int types[] = {ncclInt8, ncclBfloat16, ncclFloat32, ncclFloat64};
  size_t lo = n > 8 ? 1 : 0, hi = n > 8 ? 3 : sizeof types / sizeof types[0];
  for (size_t ti = lo; ti < hi; ti++)
    for (int coll = 0; coll < NCOLL; coll++) {
      size_t counts[64];
      int nc = boundCounts(coll, n, typeSize(types[ti]), counts, 64);
      for (int ci = 0; ci < nc; ci++)
        for (int inplace = 0; inplace < 2; inplace++) {
          int ops[] = {ncclSum, ncclAvg, OP_PREMUL};
          int nops = coll == AR || coll == RS ? 3 : 1;
          for (int oi = 0; oi < nops; oi++) {
            struct testCase c = {coll, types[ti], ops[oi], inplace, (int)((counts[ci] + coll) % n), counts[ci]};
            if (fn(&c, arg)) return 1;
          }
        }
    }
  return 0;
}

struct forkArg {
  int rank, n;
  ncclComm_t comm;
};

static int forkCase(const struct testCase *c, void *argp) {
  struct forkArg *a = argp;
  struct rankState s;
  if (prepare(c, a->rank, a->n, a->comm, &s)) return 1;
  ncclResult_t res = issue(c, a->comm, &s);
  if (res != ncclSuccess) {
    fprintf(stderr, "rank %d: %s failed: %s\n", a->rank, collNames[c->coll], ncclGetErrorString(res));
    return 1;
  }
  return check(c, a->rank, a->n, a->comm, &s);
}

/* Avg at the top of fp16's range, on 3 ranks: each input times 1/3,
 * rounded to fp16, is 21840, and three of them 65520, which rounds to inf;
 * the sum of an average saturates instead, to 65504, the average (NCCL,
 * whose 1/3 is fp16's 0.33325, gets 65472). Every reducing collective,
 * exact. */
static int avgAtHalfMax(int rank, ncclComm_t comm) {
  enum { n = 3 };
  uint16_t in[n], out[n];
  for (int i = 0; i < n; i++) in[i] = 0x7bff; /* 65504 */
  const uint16_t want = 0x7bff;
  memset(out, 0, sizeof out);
  NCCLCHECK(ncclAllReduce(in, out, n, ncclFloat16, ncclAvg, comm, NULL));
  for (int i = 0; i < n; i++) EXPECT(out[i] == want, "rank %d: fp16 AllReduce avg [%d] %#x, want %#x", rank, i, out[i], want);
  out[0] = 0;
  NCCLCHECK(ncclReduceScatter(in, out, 1, ncclFloat16, ncclAvg, comm, NULL));
  EXPECT(out[0] == want, "rank %d: fp16 ReduceScatter avg %#x, want %#x", rank, out[0], want);
  out[0] = 0;
  NCCLCHECK(ncclReduce(in, out, 1, ncclFloat16, ncclAvg, 1, comm, NULL));
  EXPECT(rank != 1 || out[0] == want, "rank 1: fp16 Reduce avg %#x, want %#x", out[0], want);
  return 0;
}

static int forkRank(int rank, int n, ncclUniqueId id, void *arg) {
  struct config *cfg = arg;
  struct forkArg a = {rank, n, NULL};
  NCCLCHECK(ncclCommInitRank(&a.comm, n, id, rank));
  int rc = cfg->bounds ? forEachBoundCase(n, forkCase, &a) : forEachCase(n, cfg->quick, forkCase, &a);
  if (!rc && !cfg->bounds && n == 3) rc = avgAtHalfMax(rank, a.comm);
  NCCLCHECK(ncclCommDestroy(a.comm));
  return rc;
}

struct threadArg {
  int n;
  ncclComm_t *comms;
  struct rankState *states;
};

static int threadCase(const struct testCase *c, void *argp) {
  struct threadArg *a = argp;
  for (int r = 0; r < a->n; r++)
    if (prepare(c, r, a->n, a->comms[r], &a->states[r])) return 1;
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < a->n; r++) NCCLCHECK(issue(c, a->comms[r], &a->states[r]));
  NCCLCHECK(ncclGroupEnd());
  int rc = 0;
  for (int r = 0; r < a->n; r++) rc |= check(c, r, a->n, a->comms[r], &a->states[r]);
  return rc;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  int threads = argc > 2 && strcmp(argv[2], "threads") == 0;
  struct config cfg = {argc > 3 && strcmp(argv[3], "quick") == 0, argc > 3 && strcmp(argv[3], "bounds") == 0};
  double t0 = nowSec();
  int failed;
  if (threads) {
    struct threadArg a = {n, calloc(n, sizeof(ncclComm_t)), calloc(n, sizeof(struct rankState))};
    if (argc > 4 && strcmp(argv[4], "groupinit") == 0) {
      /* NCCL's "several devices per thread" init: InitRank calls in a group. */
      ncclUniqueId id;
      NCCLCHECK(ncclGetUniqueId(&id));
      NCCLCHECK(ncclGroupStart());
      for (int r = 0; r < n; r++) NCCLCHECK(ncclCommInitRank(&a.comms[r], n, id, r));
      NCCLCHECK(ncclGroupEnd());
      for (int r = 0; r < n; r++) EXPECT(a.comms[r] != NULL, "comm %d not created by ncclGroupEnd", r);
    } else {
      NCCLCHECK(ncclCommInitAll(a.comms, n, NULL));
    }
    for (int r = 0; r < n; r++) {
      int dev = -1, rank = -1, count = -1;
      NCCLCHECK(ncclCommCuDevice(a.comms[r], &dev));
      NCCLCHECK(ncclCommUserRank(a.comms[r], &rank));
      NCCLCHECK(ncclCommCount(a.comms[r], &count));
      EXPECT((dev == r || argc > 4) && rank == r && count == n, "rank %d: dev %d rank %d count %d", r, dev, rank, count);
    }
    failed = cfg.bounds ? forEachBoundCase(n, threadCase, &a) : forEachCase(n, cfg.quick, threadCase, &a);
    for (int r = 0; r < n; r++) NCCLCHECK(ncclCommDestroy(a.comms[r]));
    free(a.comms);
    free(a.states);
  } else {
    failed = runRanks(n, forkRank, &cfg, 300);
  }
  printf("test_coll %d ranks (%s): %s in %.1f s\n", n, threads ? "threads" : "processes", failed ? "FAILED" : "passed",
         nowSec() - t0);
  return failed ? 1 : 0;
}
