/* Send/Recv: ring shifts and all-to-all inside groups (self included),
 * ping-pong outside groups, messages larger than a FIFO, every datatype;
 * groups that mix a ring shift with rooted collectives (whose agreement and
 * Gather/Scatter data share the point-to-point connections), the calls in
 * another order on odd ranks than on even ones, as NCCL allows; forty sends
 * to one peer in one group while the receivers come late.
 *   test_p2p <nranks> [manyconns] */
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "values.h"

static double val(int from, int to, size_t i) { return (double)((from * 5 + to * 3 + i) % 4); }

static int checkBuf(int t, const void *buf, size_t count, int from, int to, const char *what) {
  for (size_t i = 0; i < count; i++)
    EXPECT(getValue(t, buf, i) == val(from, to, i), "%s: element %zu from %d to %d: got %g want %g", what, i, from, to,
           getValue(t, buf, i), val(from, to, i));
  return 0;
}

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  static const size_t counts[] = {0, 1, 1001, (3 << 20) + 5};
  for (int ci = 0; ci < 4; ci++)
    for (int t = 0; t < ncclNumTypes; t++) {
      size_t count = counts[ci], esz = typeSize(t);
      if (ci == 3 && t != ncclFloat32 && t != ncclUint8) continue;
      /* Ring shift in a group. */
      int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
      void *s = guardAlloc(count * esz), *r = guardAlloc(count * esz);
      for (size_t i = 0; i < count; i++) putValue(t, s, i, val(rank, next, i));
      NCCLCHECK(ncclGroupStart());
      NCCLCHECK(ncclSend(s, count, t, next, comm, NULL));
      NCCLCHECK(ncclRecv(r, count, t, prev, comm, NULL));
      NCCLCHECK(ncclGroupEnd());
      if (checkBuf(t, r, count, prev, rank, "ring shift")) return 1;
      EXPECT(!guardCheck(s) && !guardCheck(r), "guard bytes around ring-shift buffers");
      guardFree(s);
      guardFree(r);
      if (ci == 3) continue;
      /* All-to-all, self included. */
      char *sa = guardAlloc(count * esz * n), *ra = guardAlloc(count * esz * n);
      for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++) putValue(t, sa + p * count * esz, i, val(rank, p, i));
      NCCLCHECK(ncclGroupStart());
      for (int p = 0; p < n; p++) {
        NCCLCHECK(ncclSend(sa + p * count * esz, count, t, p, comm, NULL));
        NCCLCHECK(ncclRecv(ra + p * count * esz, count, t, p, comm, NULL));
      }
      NCCLCHECK(ncclGroupEnd());
      for (int p = 0; p < n; p++)
        if (checkBuf(t, ra + p * count * esz, count, p, rank, "all-to-all")) return 1;
      EXPECT(!guardCheck(sa) && !guardCheck(ra), "guard bytes around all-to-all buffers");
      guardFree(sa);
      guardFree(ra);
    }
  /* Ping-pong without groups, larger than the FIFO: even ranks send first. */
  if (n >= 2 && rank < n / 2 * 2) {
    size_t count = (5 << 20) + 1;
    int peer = rank ^ 1;
    float *s = guardAlloc(count * 4), *r = guardAlloc(count * 4);
    for (size_t i = 0; i < count; i++) s[i] = (float)val(rank, peer, i);
    if (rank % 2 == 0) {
      NCCLCHECK(ncclSend(s, count, ncclFloat, peer, comm, NULL));
      NCCLCHECK(ncclRecv(r, count, ncclFloat, peer, comm, NULL));
    } else {
      NCCLCHECK(ncclRecv(r, count, ncclFloat, peer, comm, NULL));
      NCCLCHECK(ncclSend(s, count, ncclFloat, peer, comm, NULL));
    }
    if (checkBuf(ncclFloat, r, count, peer, rank, "ping-pong")) return 1;
    guardFree(s);
    guardFree(r);
  }
  /* Groups of a ring shift and rooted collectives, in either order. */
  for (int k = 0; k < 4; k++) {
    int next = (rank + 1) % n, prev = (rank - 1 + n) % n, root = k % n;
    enum { C = 37 };
    float *s = guardAlloc(C * 4), *r = guardAlloc(C * 4), *in = guardAlloc(C * n * 4), *out = guardAlloc(C * n * 4);
    for (int i = 0; i < C; i++) s[i] = (float)val(rank, next, (size_t)i);
    for (int i = 0; i < C * n; i++) in[i] = (float)(rank * 1000 + i);
    NCCLCHECK(ncclGroupStart());
    for (int part = 0; part < 2; part++) {
      if ((part == 0) == (rank % 2 == 0)) { /* even ranks: p2p first; odd ranks: the collective first */
        NCCLCHECK(ncclSend(s, C, ncclFloat, next, comm, NULL));
        NCCLCHECK(ncclRecv(r, C, ncclFloat, prev, comm, NULL));
      } else if (k == 0) NCCLCHECK(ncclBroadcast(in, out, C, ncclFloat, root, comm, NULL));
      else if (k == 1) NCCLCHECK(ncclReduce(in, out, C, ncclFloat, ncclSum, root, comm, NULL));
      else if (k == 2) NCCLCHECK(ncclScatter(in, out, C, ncclFloat, root, comm, NULL));
      else NCCLCHECK(ncclGather(in, out, C, ncclFloat, root, comm, NULL));
    }
    NCCLCHECK(ncclGroupEnd());
    if (checkBuf(ncclFloat, r, C, prev, rank, "ring shift grouped with a rooted collective")) return 1;
    for (int i = 0; i < C; i++) {
      float want = k == 0 ? (float)(root * 1000 + i) : k == 2 ? (float)(root * 1000 + rank * C + i) : 0;
      if (k == 1) {
        want = 0;
        for (int q = 0; q < n; q++) want += (float)(q * 1000 + i);
      }
      if (k == 3) want = (float)((i / C) * 1000 + i % C); /* root's block 0, from rank 0 */
      if ((k == 1 || k == 3) && rank != root) break;
      EXPECT(out[i] == want, "collective %d grouped with a ring shift: rank %d out[%d] = %g, want %g", k, rank, i,
             out[i], want);
    }
    EXPECT(!guardCheck(s) && !guardCheck(r) && !guardCheck(in) && !guardCheck(out), "guard bytes (mixed group)");
    guardFree(s);
    guardFree(r);
    guardFree(in);
    guardFree(out);
  }
  /* Many sends to one peer in one group, the receivers late: each send's
   * first slot carries a descriptor, and over sockets a sender holds up to
   * a FIFO of slots it has not yet handed to the kernel (the socket
   * transport's queue of pieces once overflowed here: the receiver saw a
   * later send's descriptor, a false mismatch, or sendmsg failed). */
  {
    enum { NMSG = 40, C = 25000 };
    int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
    float *s = guardAlloc((size_t)NMSG * C * 4), *r = guardAlloc((size_t)NMSG * C * 4);
    for (size_t i = 0; i < (size_t)NMSG * C; i++) s[i] = (float)((size_t)rank * 7 + i % 1000003);
    if (rank % 2 == 1) usleep(300000);
    NCCLCHECK(ncclGroupStart());
    for (int m = 0; m < NMSG; m++) {
      NCCLCHECK(ncclSend(s + (size_t)m * C, C, ncclFloat, next, comm, NULL));
      NCCLCHECK(ncclRecv(r + (size_t)m * C, C, ncclFloat, prev, comm, NULL));
    }
    NCCLCHECK(ncclGroupEnd());
    for (size_t i = 0; i < (size_t)NMSG * C; i++)
      EXPECT(r[i] == (float)((size_t)prev * 7 + i % 1000003), "many sends to one peer: element %zu from %d: got %g", i,
             prev, r[i]);
    EXPECT(!guardCheck(s) && !guardCheck(r), "guard bytes around the many sends' buffers");
    guardFree(s);
    guardFree(r);
  }
  /* A send of one type received as another of the same size in bytes
   * (4 floats as 4 int32, then as 16 int8): the bytes arrive, as NCCL and
   * gloo match them (a mismatch before: NCCL's docs ask for the same type,
   * its code takes bytes). */
  {
    enum { C = 1001 };
    int next = (rank + 1) % n, prev = (rank - 1 + n) % n;
    float *s = guardAlloc(C * 4);
    int32_t *r = guardAlloc(C * 4);
    for (int i = 0; i < C; i++) s[i] = (float)(rank * 10000 + i) + 0.5f;
    for (int as8 = 0; as8 < 2; as8++) {
      memset(r, 0, C * 4);
      NCCLCHECK(ncclGroupStart());
      NCCLCHECK(ncclSend(s, C, ncclFloat, next, comm, NULL));
      NCCLCHECK(as8 ? ncclRecv(r, 4 * C, ncclInt8, prev, comm, NULL) : ncclRecv(r, C, ncclInt32, prev, comm, NULL));
      NCCLCHECK(ncclGroupEnd());
      for (int i = 0; i < C; i++) {
        float want = (float)(prev * 10000 + i) + 0.5f, got;
        memcpy(&got, &r[i], 4);
        EXPECT(got == want, "a float send received as %s: element %d from %d is %g", as8 ? "int8" : "int32", i, prev,
               got);
      }
    }
    EXPECT(!guardCheck(s) && !guardCheck(r), "guard bytes around the retyped send's buffers");
    guardFree(s);
    guardFree(r);
  }
  /* A send to self outside a group has no matching receive. */
  float x = 1;
  ncclResult_t res = ncclSend(&x, 1, ncclFloat, rank, comm, NULL);
  EXPECT(res == ncclInvalidUsage, "self send without recv returned %s", ncclGetErrorString(res));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* One group of a 64 MiB AllReduce and a 4 MiB Send/Recv with every peer:
 * with NCCL_MIN_NCHANNELS=64 on sockets, a run of more than 256
 * connections (the engine once drove only the first 256: the last sends'
 * bytes stayed queued, and every rank timed out). */
static int manyConnsRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  enum { AR = 16 << 20, P = 1 << 20 };
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float *ar = guardAlloc((size_t)AR * 4), *s = guardAlloc((size_t)P * 4), *r = guardAlloc((size_t)P * (size_t)n * 4);
  for (size_t i = 0; i < AR; i++) ar[i] = (float)(i % 5);
  for (size_t i = 0; i < P; i++) s[i] = (float)val(rank, 0, i);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(ar, ar, AR, ncclFloat, ncclSum, comm, NULL));
  for (int d = 1; d < n; d++) {
    NCCLCHECK(ncclSend(s, P, ncclFloat, (rank + d) % n, comm, NULL));
    NCCLCHECK(ncclRecv(r + (size_t)d * P, P, ncclFloat, (rank - d + n) % n, comm, NULL));
  }
  NCCLCHECK(ncclGroupEnd());
  for (size_t i = 0; i < AR; i++) EXPECT(ar[i] == (float)(i % 5 * n), "AllReduce element %zu: %g", i, ar[i]);
  for (int d = 1; d < n; d++)
    if (checkBuf(ncclFloat, r + (size_t)d * P, P, (rank - d + n) % n, 0, "a receive beside a 64-channel AllReduce"))
      return 1;
  EXPECT(!guardCheck(ar) && !guardCheck(s) && !guardCheck(r), "guard bytes (many connections)");
  guardFree(ar);
  guardFree(s);
  guardFree(r);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  int many = argc > 2 && strcmp(argv[2], "manyconns") == 0;
  int failed = runRanks(n, many ? manyConnsRank : rankMain, NULL, 300);
  printf("test_p2p %d ranks: %s\n", n, failed ? "FAILED" : "passed");
  return failed != 0;
}
