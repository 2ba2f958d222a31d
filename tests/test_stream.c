/* Asynchronous streams: calls return at once and run in order in the
 * background; synchronize waits; query reports progress. Host functions run
 * in stream order with the status of the work before them; events mark
 * points in the order. Also the one-thread-many-ranks pattern with one
 * stream per rank and no group. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

#define N_OPS 16
#define COUNT (1 << 18)

static volatile int *failedFlag; /* shared across the forked ranks */

struct hostNote {
  int calls, order;
  ncclResult_t status;
  cudaStream_t self; /* to try waiting for it from inside */
  chorusEvent_t selfEvent;
  ncclResult_t insideSync, insideEvent;
};
static int hostOrder;
static void noteHost(void *arg, ncclResult_t status) {
  struct hostNote *h = arg;
  h->calls++;
  h->order = ++hostOrder;
  h->status = status;
  if (h->self) {
    h->insideSync = chorusStreamSynchronize(h->self);
    h->insideEvent = chorusEventSynchronize(h->selfEvent);
  }
}

/* Host functions and events on a stream; last, a failure on it. */
static int hostAndEvents(int rank, int n, ncclComm_t comm, cudaStream_t st) {
  const int count = 1 << 20;
  float *a = guardAlloc(count * sizeof(float)), *b = guardAlloc(count * sizeof(float));
  for (int i = 0; i < count; i++) a[i] = b[i] = (float)(rank + 1);
  struct hostNote h1 = {0}, h2 = {0}, h0 = {0};
  chorusEvent_t e1, e2, e3;
  NCCLCHECK(chorusEventCreate(&e1));
  NCCLCHECK(chorusEventCreate(&e2));
  NCCLCHECK(chorusEventCreate(&e3));
  EXPECT(chorusEventQuery(e1) == ncclSuccess, "an event never recorded is complete");
  NCCLCHECK(ncclAllReduce(a, a, count, ncclFloat, ncclSum, comm, st));
  NCCLCHECK(chorusLaunchHostFunc(st, noteHost, &h1));
  NCCLCHECK(chorusEventRecord(e1, st));
  NCCLCHECK(ncclAllReduce(b, b, count, ncclFloat, ncclMax, comm, st));
  h2.self = st;
  h2.selfEvent = e2;
  NCCLCHECK(chorusLaunchHostFunc(st, noteHost, &h2));
  NCCLCHECK(chorusEventRecord(e2, st));
  ncclResult_t q = chorusEventQuery(e2);
  EXPECT(q == ncclInProgress || q == ncclSuccess, "query returned %s", ncclGetErrorString(q));
  NCCLCHECK(chorusEventSynchronize(e1));
  EXPECT(chorusEventQuery(e1) == ncclSuccess, "query after synchronize");
  EXPECT(h1.calls == 1 && h1.status == ncclSuccess, "host function 1: %d calls, %s", h1.calls,
         ncclGetErrorString(h1.status));
  float want = (float)(n * (n + 1) / 2);
  for (int i = 0; i < count; i++) EXPECT(a[i] == want, "element %d after the event: %g, want %g", i, a[i], want);
  NCCLCHECK(chorusEventSynchronize(e2));
  EXPECT(h2.calls == 1 && h2.order == h1.order + 1, "host function 2: %d calls, order %d after %d", h2.calls, h2.order,
         h1.order);
  EXPECT(h2.insideSync == ncclInvalidUsage && h2.insideEvent == ncclInvalidUsage,
         "waiting for the stream from its own host function: %s / %s", ncclGetErrorString(h2.insideSync),
         ncclGetErrorString(h2.insideEvent));
  for (int i = 0; i < count; i++) EXPECT(b[i] == (float)n, "element %d of the max: %g", i, b[i]);
  EXPECT(!guardCheck(a) && !guardCheck(b), "guard bytes");
  /* The NULL stream: the function runs at once. */
  NCCLCHECK(chorusLaunchHostFunc(NULL, noteHost, &h0));
  EXPECT(h0.calls == 1 && h0.status == ncclSuccess, "NULL-stream host function: %d calls", h0.calls);
  NCCLCHECK(chorusEventRecord(e3, NULL));
  NCCLCHECK(chorusEventSynchronize(e3));
  /* An event outlives its stream. */
  cudaStream_t st2;
  NCCLCHECK(chorusStreamCreate(&st2));
  NCCLCHECK(ncclAllReduce(a, a, 16, ncclFloat, ncclSum, comm, st2));
  NCCLCHECK(chorusEventRecord(e3, st2));
  NCCLCHECK(chorusStreamDestroy(st2));
  EXPECT(chorusEventQuery(e3) == ncclSuccess, "event of a destroyed stream");
  NCCLCHECK(chorusEventSynchronize(e3));
  /* Bad arguments change nothing. */
  static uint64_t fake[16];
  EXPECT(chorusEventCreate(NULL) == ncclInvalidArgument, "NULL event pointer");
  EXPECT(chorusEventRecord(e1, (cudaStream_t)fake) == ncclInvalidArgument, "bogus stream accepted");
  EXPECT(chorusEventQuery(e1) == ncclSuccess, "a refused record moved the event");
  EXPECT(chorusEventQuery((chorusEvent_t)fake) == ncclInvalidArgument, "bogus event accepted");
  EXPECT(chorusLaunchHostFunc(st, NULL, NULL) == ncclInvalidArgument, "NULL host function accepted");
  EXPECT(chorusLaunchHostFunc((cudaStream_t)fake, noteHost, &h0) == ncclInvalidArgument, "bogus stream accepted");
  /* A failure: rank 0 alone calls, with a short timeout. The host
   * functions behind it get the error; so does synchronize. */
  if (rank == 0 && n > 1) {
    struct hostNote f1 = {0}, f2 = {0};
    NCCLCHECK(chorusCommSetTimeout(comm, 400));
    NCCLCHECK(ncclAllReduce(a, a, 16, ncclFloat, ncclSum, comm, st));
    NCCLCHECK(chorusLaunchHostFunc(st, noteHost, &f1));
    NCCLCHECK(ncclAllReduce(a, a, 16, ncclFloat, ncclSum, comm, st));
    NCCLCHECK(chorusLaunchHostFunc(st, noteHost, &f2));
    NCCLCHECK(chorusEventRecord(e1, st));
    NCCLCHECK(chorusEventSynchronize(e1));
    EXPECT(f1.calls == 1 && f1.status == ncclTimeout, "host function after the failure: %d calls, %s", f1.calls,
           ncclGetErrorString(f1.status));
    EXPECT(f2.calls == 1 && f2.status == ncclTimeout, "host function behind it: %s", ncclGetErrorString(f2.status));
    EXPECT(chorusStreamSynchronize(st) == ncclTimeout, "synchronize after the failure");
    EXPECT(chorusStreamSynchronize(st) == ncclSuccess, "synchronize clears the error");
    *failedFlag = 1;
  }
  for (int i = 0; i < 5000 && n > 1 && !*failedFlag; i++) usleep(1000);
  for (chorusEvent_t *e = (chorusEvent_t[]){e1, e2, e3}, *end = e + 3; e < end; e++) NCCLCHECK(chorusEventDestroy(*e));
  guardFree(a);
  guardFree(b);
  return 0;
}

static void setScale(void *arg, ncclResult_t status) {
  (void)status;
  *(float *)arg = 3;
}

/* A PreMulSum scalar in "device" memory (ncclScalarDevice) is read when the
 * operation runs, as NCCL's kernels read it: a caller may change it between
 * calls (also with the same arguments, whose schedule is reused) or on the
 * stream before a call. An immediate one is read when the operator is made. */
static int deviceScalar(int rank, int n, ncclComm_t comm, cudaStream_t st) {
  enum { count = 1003 };
  float *x = guardAlloc(count * sizeof(float)), *y = guardAlloc(count * sizeof(float));
  float *rs = guardAlloc(count * n * sizeof(float));
  float scale = 1, immediate = 2;
  ncclRedOp_t dev, imm;
  NCCLCHECK(ncclRedOpCreatePreMulSum(&dev, &scale, ncclFloat, ncclScalarDevice, comm));
  NCCLCHECK(ncclRedOpCreatePreMulSum(&imm, &immediate, ncclFloat, ncclScalarHostImmediate, comm));
  immediate = 7; /* too late: it was read */
  for (int i = 0; i < count; i++) x[i] = (float)(i % 5 + 1);
  for (int round = 0; round < 3; round++) {
    scale = (float)(rank + round + 1); /* ranks' scalars differ, as PreMulSum allows */
    NCCLCHECK(ncclAllReduce(x, y, count, ncclFloat, dev, comm, NULL));
    float factor = (float)(n * (n + 1) / 2 + n * round);
    for (int i = 0; i < count; i++)
      EXPECT(y[i] == factor * x[i], "device scalar, round %d: element %d got %g want %g", round, i, y[i], factor * x[i]);
  }
  NCCLCHECK(ncclAllReduce(x, y, count, ncclFloat, imm, comm, NULL));
  for (int i = 0; i < count; i++)
    EXPECT(y[i] == 2.0f * n * x[i], "immediate scalar: element %d got %g want %g", i, y[i], 2.0f * n * x[i]);
  /* On a stream: a host function ahead of the calls sets it to 3 after the
   * caller set it to 5; the calls must see 3. */
  scale = 5;
  for (int i = 0; i < count * n; i++) rs[i] = (float)(i % 7);
  NCCLCHECK(chorusLaunchHostFunc(st, setScale, &scale));
  NCCLCHECK(ncclReduceScatter(rs, y, count, ncclFloat, dev, comm, st));
  NCCLCHECK(ncclReduce(x, x, count, ncclFloat, dev, n - 1, comm, st));
  NCCLCHECK(chorusStreamSynchronize(st));
  for (int i = 0; i < count; i++) {
    float want = 3.0f * n * (float)((rank * count + i) % 7);
    EXPECT(y[i] == want, "device scalar set on the stream, ReduceScatter: element %d got %g want %g", i, y[i], want);
    want = rank == n - 1 ? 3.0f * n * (float)(i % 5 + 1) : (float)(i % 5 + 1);
    EXPECT(x[i] == want, "device scalar set on the stream, Reduce: element %d got %g want %g", i, x[i], want);
  }
  EXPECT(!guardCheck(x) && !guardCheck(y) && !guardCheck(rs), "guard bytes");
  NCCLCHECK(ncclRedOpDestroy(dev, comm));
  NCCLCHECK(ncclRedOpDestroy(imm, comm));
  guardFree(x);
  guardFree(y);
  guardFree(rs);
  return 0;
}

/* A host function that writes a value late: work queued behind it on its
 * stream sees the value only if it waits for it. */
struct lateWrite {
  int *where, value;
};
static void writeLate(void *arg, ncclResult_t status) {
  (void)status;
  struct lateWrite *w = arg;
  usleep(30000);
  *w->where = w->value;
}
static void copyInt(void *arg, ncclResult_t status) {
  (void)status;
  int **p = arg;
  *p[1] = *p[0];
}

/* One group, one communicator, operations on two streams (or a stream and
 * the NULL stream): NCCL runs them as one launch, after the work issued
 * before on either stream, and the streams' later work after it. Issued in
 * the same order on every rank, both operations run (they used to run as
 * two parts, one per stream, so one rank could run the second while its
 * peer ran the first: a mismatch). */
static int groupAcrossStreams(int rank, int n, ncclComm_t comm, cudaStream_t st) {
  cudaStream_t st2;
  NCCLCHECK(chorusStreamCreate(&st2));
  for (int iter = 0; iter < 16; iter++) {
    /* which streams the two operations go to (both streams, or one and the
     * NULL stream), each pair issued in both orders */
    int pair = iter / 2 % 4;
    cudaStream_t first = pair == 0 ? st : pair == 1 ? st2 : pair == 2 ? NULL : st;
    cudaStream_t second = pair == 0 ? st2 : pair == 1 ? st : pair == 2 ? st2 : NULL;
    int a = -1, sum = 0, b = -1, max = 0, seenSum = -1, seenMax = -1;
    /* each operation's input is written late by earlier work on its stream */
    struct lateWrite wa = {&a, rank + iter}, wb = {&b, 10 * rank + iter};
    if (first) NCCLCHECK(chorusLaunchHostFunc(first, writeLate, &wa));
    else a = rank + iter;
    if (second) NCCLCHECK(chorusLaunchHostFunc(second, writeLate, &wb));
    else b = 10 * rank + iter;
    NCCLCHECK(ncclGroupStart());
    if (iter % 2 == 0) {
      NCCLCHECK(ncclAllReduce(&a, &sum, 1, ncclInt, ncclSum, comm, first));
      NCCLCHECK(ncclAllReduce(&b, &max, 1, ncclInt, ncclMax, comm, second));
    } else { /* the same calls the other way round on every rank */
      NCCLCHECK(ncclAllReduce(&b, &max, 1, ncclInt, ncclMax, comm, second));
      NCCLCHECK(ncclAllReduce(&a, &sum, 1, ncclInt, ncclSum, comm, first));
    }
    NCCLCHECK(ncclGroupEnd());
    /* later work on either stream sees both results */
    int *copySum[2] = {&sum, &seenSum}, *copyMax[2] = {&max, &seenMax};
    NCCLCHECK(chorusLaunchHostFunc(first ? first : second, copyInt, copySum));
    NCCLCHECK(chorusLaunchHostFunc(second ? second : first, copyInt, copyMax));
    if (!first || !second) { /* the NULL stream's operation is done when the group returns */
      int *done = first ? &max : &sum, want = first ? 10 * (n - 1) + iter : n * (n - 1) / 2 + n * iter;
      EXPECT(*done == want, "iter %d: NULL-stream operation of the group got %d want %d on return", iter, *done, want);
    }
    NCCLCHECK(chorusStreamSynchronize(st));
    NCCLCHECK(chorusStreamSynchronize(st2));
    EXPECT(sum == n * (n - 1) / 2 + n * iter, "iter %d: sum %d want %d", iter, sum, n * (n - 1) / 2 + n * iter);
    EXPECT(max == 10 * (n - 1) + iter, "iter %d: max %d want %d", iter, max, 10 * (n - 1) + iter);
    EXPECT(seenSum == sum && seenMax == max, "iter %d: later stream work saw %d %d, not the results %d %d", iter,
           seenSum, seenMax, sum, max);
  }
  NCCLCHECK(chorusStreamDestroy(st2));
  return 0;
}

/* Separate calls on one communicator, on two streams and the NULL stream,
 * run in the order they were issued, as NCCL's do (each launch waits for
 * the communicator's last one). Each rank holds up a different stream's
 * earlier work (a late host function), so calls that ran as their streams
 * allowed would run in different orders on the ranks: a mismatch, or
 * another call's values without CHORUS_CHECK (each call reduces with its
 * own operation). */
static void sleepLate(void *arg, ncclResult_t status) {
  (void)status;
  usleep(*(const int *)arg);
}
/* A host function that makes a NULL-stream call on the communicator whose
 * last launch was on the host function's own stream, done by then. */
struct inHost {
  ncclComm_t comm;
  int x, y;
  ncclResult_t res;
};
static void allReduceInHost(void *arg, ncclResult_t status) {
  (void)status;
  struct inHost *h = arg;
  h->res = ncclAllReduce(&h->x, &h->y, 1, ncclInt, ncclSum, h->comm, NULL);
}

static int callsAcrossStreams(int rank, int n, ncclComm_t comm, cudaStream_t st) {
  cudaStream_t st2;
  NCCLCHECK(chorusStreamCreate(&st2));
  static const int delayUs = 20000;
  for (int iter = 0; iter < 6; iter++) {
    int a = rank + iter, b = 10 * rank + iter, c = 100 * rank + iter, sum = -1, max = -1, min = -1;
    cudaStream_t late = (rank + iter) % 2 ? st : st2, third = iter % 2 ? NULL : st2;
    NCCLCHECK(chorusLaunchHostFunc(late, sleepLate, (void *)&delayUs));
    NCCLCHECK(ncclAllReduce(&a, &sum, 1, ncclInt, ncclSum, comm, st));
    NCCLCHECK(ncclAllReduce(&b, &max, 1, ncclInt, ncclMax, comm, st2));
    NCCLCHECK(ncclAllReduce(&c, &min, 1, ncclInt, ncclMin, comm, third));
    if (!third) /* the NULL stream's call waited for both */
      EXPECT(min == iter && sum == n * (n - 1) / 2 + n * iter && max == 10 * (n - 1) + iter,
             "iter %d: on return of the NULL-stream call: min %d sum %d max %d", iter, min, sum, max);
    NCCLCHECK(chorusStreamSynchronize(st));
    NCCLCHECK(chorusStreamSynchronize(st2));
    EXPECT(sum == n * (n - 1) / 2 + n * iter, "iter %d: sum %d want %d", iter, sum, n * (n - 1) / 2 + n * iter);
    EXPECT(max == 10 * (n - 1) + iter, "iter %d: max %d want %d", iter, max, 10 * (n - 1) + iter);
    EXPECT(min == iter, "iter %d: min %d want %d", iter, min, iter);
  }
  /* The order's wait is not the host function's own: its stream's launch
   * before it is done. */
  int a = rank, sum = -1;
  struct inHost h = {comm, rank + 1, -1, ncclInternalError};
  NCCLCHECK(ncclAllReduce(&a, &sum, 1, ncclInt, ncclSum, comm, st));
  NCCLCHECK(chorusLaunchHostFunc(st, allReduceInHost, &h));
  NCCLCHECK(chorusStreamSynchronize(st));
  EXPECT(h.res == ncclSuccess && h.y == n * (n + 1) / 2 && sum == n * (n - 1) / 2,
         "a NULL-stream call in a host function after the stream's launch: %s, %d, %d", ncclGetErrorString(h.res), h.y,
         sum);
  /* Unordered (chorusCommSetStreamOrder 0), a receive on one stream does
   * not hold back a send issued after it on another: every rank receives
   * from the one before it first, then sends to the one after it (in
   * order, each send would wait for its rank's receive, which waits for
   * the send of the rank before: a cycle). */
  EXPECT(chorusCommSetStreamOrder(comm, 2) == ncclInvalidArgument, "chorusCommSetStreamOrder(comm, 2) accepted");
  EXPECT(chorusCommSetStreamOrder(NULL, 0) == ncclInvalidArgument, "chorusCommSetStreamOrder(NULL, 0) accepted");
  if (n > 1) {
    NCCLCHECK(chorusCommSetStreamOrder(comm, 0));
    NCCLCHECK(chorusCommSetTimeout(comm, 5000)); /* a cycle fails in seconds */
    int out = 1000 + rank, in = -1;
    NCCLCHECK(ncclRecv(&in, 1, ncclInt, (rank + n - 1) % n, comm, st2));
    NCCLCHECK(ncclSend(&out, 1, ncclInt, (rank + 1) % n, comm, st));
    NCCLCHECK(chorusStreamSynchronize(st));
    NCCLCHECK(chorusStreamSynchronize(st2));
    EXPECT(in == 1000 + (rank + n - 1) % n, "unordered: received %d want %d", in, 1000 + (rank + n - 1) % n);
    NCCLCHECK(chorusCommSetStreamOrder(comm, 1));
    NCCLCHECK(chorusCommSetTimeout(comm, 0));
  }
  NCCLCHECK(chorusStreamDestroy(st2));
  return 0;
}

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  cudaStream_t st;
  NCCLCHECK(chorusStreamCreate(&st));
  float *buf[N_OPS];
  for (int k = 0; k < N_OPS; k++) {
    buf[k] = guardAlloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++) buf[k][i] = (float)(rank + k + i % 3);
  }
  double t0 = nowSec();
  for (int k = 0; k < N_OPS; k++) NCCLCHECK(ncclAllReduce(buf[k], buf[k], COUNT, ncclFloat, ncclSum, comm, st));
  double issue = nowSec() - t0;
  ncclResult_t q = chorusStreamQuery(st);
  EXPECT(q == ncclInProgress || q == ncclSuccess, "query returned %s", ncclGetErrorString(q));
  NCCLCHECK(chorusStreamSynchronize(st));
  EXPECT(chorusStreamQuery(st) == ncclSuccess, "query after synchronize");
  for (int k = 0; k < N_OPS; k++) {
    for (int i = 0; i < COUNT; i++) {
      float want = (float)(n * (n - 1) / 2 + n * (k + i % 3));
      EXPECT(buf[k][i] == want, "op %d element %d: got %g want %g", k, i, buf[k][i], want);
    }
    EXPECT(!guardCheck(buf[k]), "guard bytes");
    guardFree(buf[k]);
  }
  /* A group on a stream, then a NULL-stream call: order is kept. */
  int a = rank, b = 0;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(&a, &b, 1, ncclInt, ncclSum, comm, st));
  NCCLCHECK(ncclGroupEnd());
  NCCLCHECK(chorusStreamSynchronize(st));
  EXPECT(b == n * (n - 1) / 2, "grouped stream allreduce got %d", b);
  /* CUDA's cudaStreamLegacy and cudaStreamPerThread handles act as NULL:
   * the call is complete when it returns. */
  for (uintptr_t h = 1; h <= 2; h++) {
    cudaStream_t special = (cudaStream_t)h;
    int x = rank + (int)h, y = -1;
    NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, comm, special));
    EXPECT(y == n * (n - 1) / 2 + n * (int)h, "allreduce on stream handle %d got %d", (int)h, y);
    struct hostNote hn = {0};
    NCCLCHECK(chorusLaunchHostFunc(special, noteHost, &hn));
    EXPECT(hn.calls == 1, "host function on stream handle %d did not run at once", (int)h);
    NCCLCHECK(chorusStreamSynchronize(special));
    NCCLCHECK(chorusStreamQuery(special));
    chorusEvent_t ev;
    NCCLCHECK(chorusEventCreate(&ev));
    NCCLCHECK(chorusEventRecord(ev, special));
    NCCLCHECK(chorusEventSynchronize(ev));
    NCCLCHECK(chorusEventDestroy(ev));
    EXPECT(chorusStreamDestroy(special) == ncclInvalidArgument, "destroying stream handle %d", (int)h);
  }
  if (deviceScalar(rank, n, comm, st)) return 1;
  if (groupAcrossStreams(rank, n, comm, st)) return 1;
  if (callsAcrossStreams(rank, n, comm, st)) return 1;
  if (hostAndEvents(rank, n, comm, st)) return 1;
  NCCLCHECK(chorusStreamDestroy(st));
  NCCLCHECK(n > 1 ? ncclCommAbort(comm) : ncclCommDestroy(comm)); /* rank 0's has failed */
  fprintf(stderr, "rank %d: issued %d ops in %.1f us\n", rank, N_OPS, issue * 1e6);
  return 0;
}

/* Work nobody waits for runs by itself: on a new stream, right after other
 * work, and after the stream has been idle a while (its worker sleeps until
 * woken then). Polls only chorusStreamQuery, which runs nothing. */
static void setFlag(void *arg, ncclResult_t status) {
  (void)status;
  *(volatile int *)arg = 1;
}
static int runsUnwaited(void) {
  cudaStream_t st;
  NCCLCHECK(chorusStreamCreate(&st));
  const int idleMs[] = {0, 0, 120, 0, 300};
  for (int k = 0; k < 5; k++) {
    usleep(idleMs[k] * 1000);
    volatile int flag = 0;
    NCCLCHECK(chorusLaunchHostFunc(st, setFlag, (void *)&flag));
    double t0 = nowSec();
    while (chorusStreamQuery(st) == ncclInProgress && nowSec() - t0 < 2) usleep(100);
    EXPECT(flag == 1, "host function %d (after %d ms idle) did not run within 2 s unwaited", k, idleMs[k]);
  }
  NCCLCHECK(chorusStreamDestroy(st));
  return 0;
}

/* One thread drives all ranks of ncclCommInitAll, one stream each, no group. */
static int threadsMain(int n) {
  ncclComm_t comms[8];
  cudaStream_t streams[8];
  int vals[8], outs[8];
  NCCLCHECK(ncclCommInitAll(comms, n, NULL));
  for (int r = 0; r < n; r++) NCCLCHECK(chorusStreamCreate(&streams[r]));
  for (int iter = 0; iter < 50; iter++) {
    for (int r = 0; r < n; r++) {
      vals[r] = r * iter;
      NCCLCHECK(ncclAllReduce(&vals[r], &outs[r], 1, ncclInt, ncclSum, comms[r], streams[r]));
    }
    for (int r = 0; r < n; r++) NCCLCHECK(chorusStreamSynchronize(streams[r]));
    for (int r = 0; r < n; r++) EXPECT(outs[r] == iter * n * (n - 1) / 2, "iter %d rank %d got %d", iter, r, outs[r]);
  }
  for (int r = 0; r < n; r++) {
    NCCLCHECK(chorusStreamDestroy(streams[r]));
    NCCLCHECK(ncclCommDestroy(comms[r]));
  }
  return 0;
}

/* One thread drives two ranks. Rank 1 has a receive queued on its stream
 * s1 (from rank 0's first send), then a group in which its communicator's
 * first operation is on the NULL stream and its next on s1: the caller
 * waits for s1's earlier receive only once the group's other parts (rank
 * 0's sends, on s0) are queued; waiting before that waited for a send of
 * this very group (until CHORUS_TIMEOUT). */
static int nullLaunchJoin(void) {
  ncclComm_t c[2];
  cudaStream_t s0, s1;
  NCCLCHECK(ncclCommInitAll(c, 2, NULL));
  NCCLCHECK(chorusStreamCreate(&s0));
  NCCLCHECK(chorusStreamCreate(&s1));
  float x1 = 1, x2 = 2, r1 = 0, r2 = 0, a0 = 1, a1 = 2, b0 = 0, b1 = 0;
  double t0 = nowSec();
  NCCLCHECK(ncclRecv(&r1, 1, ncclFloat, 0, c[1], s1));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(&x1, 1, ncclFloat, 1, c[0], s0));
  NCCLCHECK(ncclSend(&x2, 1, ncclFloat, 1, c[0], s0));
  NCCLCHECK(ncclAllReduce(&a0, &b0, 1, ncclFloat, ncclSum, c[0], s0));
  NCCLCHECK(ncclAllReduce(&a1, &b1, 1, ncclFloat, ncclSum, c[1], NULL));
  NCCLCHECK(ncclRecv(&r2, 1, ncclFloat, 0, c[1], s1));
  NCCLCHECK(ncclGroupEnd());
  NCCLCHECK(chorusStreamSynchronize(s0));
  NCCLCHECK(chorusStreamSynchronize(s1));
  EXPECT(nowSec() - t0 < 2.0, "the group took %.2f s", nowSec() - t0);
  EXPECT(r1 == 1 && r2 == 2 && b0 == 3 && b1 == 3, "got r1 %g r2 %g b0 %g b1 %g", r1, r2, b0, b1);
  NCCLCHECK(chorusStreamDestroy(s0));
  NCCLCHECK(chorusStreamDestroy(s1));
  NCCLCHECK(ncclCommDestroy(c[0]));
  NCCLCHECK(ncclCommDestroy(c[1]));
  return 0;
}

/* A rank forks with work queued on a blocking stream. The child's calls on
 * the parent's stream and communicator are refused at once
 * (ncclInvalidUsage, the call named), its destroys forget them, and its own
 * new communicator's NULL-stream call waits for none of the parent's
 * streams: a child once ran the parent's queued AllReduces in its place
 * (the parent then got success with wrong data), or waited forever for the
 * parent's stream thread. The parents' results are right. */
static int forkedRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  cudaStream_t st;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  NCCLCHECK(chorusStreamCreateWithFlags(&st, CHORUS_STREAM_BLOCKING));
  size_t count = 1 << 20;
  float *x = malloc(count * sizeof *x);
  EXPECT(x != NULL, "out of memory");
  for (size_t i = 0; i < count; i++) x[i] = 1;
  for (int k = 0; k < 4; k++) NCCLCHECK(ncclAllReduce(x, x, count, ncclFloat, ncclSum, comm, st));
  pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    float y = 1;
    int bad = 0;
    if (chorusStreamSynchronize(st) != ncclInvalidUsage) bad |= 1;
    if (!strstr(ncclGetLastError(NULL), "chorusStreamSynchronize : stream")) bad |= 2;
    if (chorusStreamQuery(st) != ncclInvalidUsage) bad |= 4;
    if (ncclAllReduce(&y, &y, 1, ncclFloat, ncclSum, comm, NULL) != ncclInvalidUsage) bad |= 8;
    if (!strstr(ncclGetLastError(NULL), "before this process forked")) bad |= 16;
    if (chorusDeviceSynchronize() != ncclSuccess) bad |= 32;
    unsetenv("NCCL_COMM_ID");
    ncclComm_t own;
    if (ncclCommInitAll(&own, 1, NULL) != ncclSuccess ||
        ncclAllReduce(&y, &y, 1, ncclFloat, ncclSum, own, NULL) != ncclSuccess || y != 1 ||
        ncclCommDestroy(own) != ncclSuccess)
      bad |= 64;
    if (ncclCommDestroy(comm) != ncclSuccess || chorusStreamDestroy(st) != ncclSuccess) bad |= 128;
    _exit(bad);
  }
  EXPECT(pid > 0, "fork failed");
  NCCLCHECK(chorusStreamSynchronize(st));
  float want = (float)(n * n * n * n);
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += x[i] != want;
  EXPECT(wrong == 0, "rank %d: %zu of %zu elements wrong (x[0] %g, expected %g)", rank, wrong, count, x[0], want);
  int st0 = 0;
  waitpid(pid, &st0, 0);
  EXPECT(WIFEXITED(st0) && WEXITSTATUS(st0) == 0, "rank %d's forked child: %s %d (bits of the checks it failed)", rank,
         WIFEXITED(st0) ? "exit" : "signal", WIFEXITED(st0) ? WEXITSTATUS(st0) : WTERMSIG(st0));
  NCCLCHECK(ncclAllReduce(x, x, 1, ncclFloat, ncclSum, comm, NULL));
  NCCLCHECK(chorusStreamDestroy(st));
  NCCLCHECK(ncclCommDestroy(comm));
  free(x);
  return 0;
}

/* Rank 1's AllReduce waits on its stream behind a host function while rank
 * 0's times out: once rank 0 has said so, rank 1's fails too when it
 * starts. It found rank 0's 4 floats whole in its FIFO and returned
 * success (rank 0 returned ncclTimeout). */
static void sleepHost(void *arg, ncclResult_t status) {
  (void)status;
  usleep(*(int *)arg);
}
static int queuedRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  (void)n;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  NCCLCHECK(chorusCommSetTimeout(comm, 1000));
  float x[4] = {(float)rank + 1, (float)rank + 1, (float)rank + 1, (float)rank + 1};
  ncclResult_t res;
  if (rank == 1) {
    cudaStream_t st;
    static int sleepUs = 2500000;
    NCCLCHECK(chorusStreamCreate(&st));
    NCCLCHECK(chorusLaunchHostFunc(st, sleepHost, &sleepUs));
    NCCLCHECK(ncclAllReduce(x, x, 4, ncclFloat, ncclSum, comm, st));
    res = chorusStreamSynchronize(st);
    EXPECT(res != ncclSuccess, "rank 1: the AllReduce rank 0 gave up on succeeded (x[0] %g)", x[0]);
    EXPECT(strstr(ncclGetLastError(comm), "timed out") != NULL, "rank 1's error: %s", ncclGetLastError(comm));
    NCCLCHECK(chorusStreamDestroy(st));
  } else {
    res = ncclAllReduce(x, x, 4, ncclFloat, ncclSum, comm, NULL);
    EXPECT(res == ncclTimeout, "rank 0: %s", ncclGetErrorString(res));
  }
  ncclCommAbort(comm);
  return 0;
}

/* Rank 0 queues three AllReduces on a stream and rank 1 calls none: the
 * timeout names the first, which is the one stuck (it named the third, the
 * last one issued), whether the first started before the others were
 * issued or after. */
static int stuckFirstRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  NCCLCHECK(chorusCommSetTimeout(comm, 1000));
  if (rank == 0) {
    cudaStream_t st;
    float x[3][4] = {{0}};
    NCCLCHECK(chorusStreamCreate(&st));
    for (int k = 0; k < 3; k++) {
      NCCLCHECK(ncclAllReduce(x[k], x[k], 4, ncclFloat, ncclSum, comm, st));
      if (k == 0 && arg) usleep(200000); /* the first runs (the stream's thread starts it) before the others come */
    }
    ncclResult_t res = chorusStreamSynchronize(st);
    const char *why = ncclGetLastError(comm);
    EXPECT(res == ncclTimeout && strstr(why, "AllReduce #1 ") && !strstr(why, "#3"), "rank 0: %s: %s",
           ncclGetErrorString(res), why);
    NCCLCHECK(chorusStreamDestroy(st));
  } else {
    usleep(1500000);
  }
  ncclCommAbort(comm);
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  failedFlag = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int failed = runRanks(n, rankMain, NULL, 120) + threadsMain(n) + runsUnwaited() + (n == 2 ? nullLaunchJoin() : 0);
  if (n == 2) failed += runRanks(2, forkedRank, NULL, 30) + runRanks(2, queuedRank, NULL, 30) +
              runRanks(2, stuckFirstRank, NULL, 30) + runRanks(2, stuckFirstRank, "first started", 30);
  /* Bad stream handles are rejected. */
  static uint64_t fake[16]; /* not a stream, but readable */
  cudaStream_t bogus = (cudaStream_t)fake;
  if (chorusStreamSynchronize(bogus) != ncclInvalidArgument) failed++;
  if (chorusStreamCreate(NULL) != ncclInvalidArgument) failed++;
  printf("test_stream %d ranks: %s\n", n, failed ? "FAILED" : "passed");
  return failed != 0;
}
