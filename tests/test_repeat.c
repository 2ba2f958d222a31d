/* A blocking call that repeats the last one on its thread runs the schedule
 * built for it again (api/launch.c, inlineReuse). Each case runs on forked
 * ranks:
 *   calls    - every kind of call, each made three times in a row with new
 *              data in the same buffers, then with the buffers swapped, with
 *              one more element, and as at first, every result checked: a
 *              reused schedule moves the new data, whole, every time, and
 *              only the same call reuses one; and the calls keep their
 *              numbers (CHORUS_CHECK compares them on every call).
 *   calls5   - the same on 5 ranks (run with algorithms that stage partial
 *              sums, whose staging memory a reused schedule keeps bound).
 *   newcomm  - the same call on a communicator created after the first was
 *              destroyed (its memory may come back at the same address).
 *   timeout  - a call repeated after chorusCommSetTimeout gets the new
 *              timeout: with a peer that never comes it fails within 2 s.
 *   mismatch - after three equal calls one rank calls another count: every
 *              rank gets ncclInvalidUsage within 2 s.
 *   test_repeat <case> */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

/* Element i of rank r's input in round k. */
static float in(int r, int k, size_t i) { return (float)((r + 1) * 1000 + k * 7 + (int)(i % 101)); }

static void fill(float *p, int r, int k, size_t from, size_t count) {
  for (size_t i = 0; i < count; i++) p[i] = in(r, k, from + i);
}

/* 0 when p[i] == want(i) for i < count. */
#define CHECK_ALL(p, count, want, what)                                                                      \
  do {                                                                                                       \
    for (size_t i_ = 0; i_ < (count); i_++) {                                                                \
      size_t i = i_;                                                                                         \
      float w_ = (want);                                                                                     \
      EXPECT((p)[i] == w_, "rank %d round %d: %s element %zu is %g, expected %g", rank, k, what, i, (p)[i], w_); \
    }                                                                                                        \
  } while (0)

/* One kind of call at `count` elements per rank, round k: fills the inputs,
 * calls, checks the outputs against values computed here. */
static int oneCall(int kind, int rank, int n, int k, size_t count, float *a, float *b, ncclComm_t comm) {
  switch (kind) {
    case 0: /* AllReduce, out of place */
      fill(a, rank, k, 0, count);
      NCCLCHECK(ncclAllReduce(a, b, count, ncclFloat, ncclSum, comm, NULL));
      {
        float base = 0;
        for (int r = 0; r < n; r++) base += (float)((r + 1) * 1000 + k * 7);
        CHECK_ALL(b, count, base + (float)(n * (int)(i % 101)), "AllReduce");
      }
      return 0;
    case 1: /* AllReduce, in place, max */
      fill(a, rank, k, 0, count);
      NCCLCHECK(ncclAllReduce(a, a, count, ncclFloat, ncclMax, comm, NULL));
      CHECK_ALL(a, count, in(n - 1, k, i), "AllReduce in place");
      return 0;
    case 2: /* Broadcast from the last rank */
      if (rank == n - 1) fill(a, rank, k, 0, count);
      NCCLCHECK(ncclBroadcast(a, b, count, ncclFloat, n - 1, comm, NULL));
      CHECK_ALL(b, count, in(n - 1, k, i), "Broadcast");
      return 0;
    case 3: /* AllGather */
      fill(a, rank, k, 0, count);
      NCCLCHECK(ncclAllGather(a, b, count, ncclFloat, comm, NULL));
      CHECK_ALL(b, count * n, in((int)(i / count), k, i % count), "AllGather");
      return 0;
    case 4: /* ReduceScatter */
      fill(a, rank, k, 0, count * n);
      NCCLCHECK(ncclReduceScatter(a, b, count, ncclFloat, ncclSum, comm, NULL));
      {
        float base = 0;
        for (int r = 0; r < n; r++) base += (float)((r + 1) * 1000 + k * 7);
        CHECK_ALL(b, count, base + (float)(n * (int)((rank * count + i) % 101)), "ReduceScatter");
      }
      return 0;
    case 5: /* Reduce to rank 0 */
      fill(a, rank, k, 0, count);
      NCCLCHECK(ncclReduce(a, b, count, ncclFloat, ncclMin, 0, comm, NULL));
      if (rank == 0) CHECK_ALL(b, count, in(0, k, i), "Reduce");
      return 0;
    case 6: /* a ring of Send/Recv */
      fill(a, rank, k, 0, count);
      NCCLCHECK(ncclGroupStart());
      NCCLCHECK(ncclSend(a, count, ncclFloat, (rank + 1) % n, comm, NULL));
      NCCLCHECK(ncclRecv(b, count, ncclFloat, (rank + n - 1) % n, comm, NULL));
      NCCLCHECK(ncclGroupEnd());
      CHECK_ALL(b, count, in((rank + n - 1) % n, k, i), "Recv");
      return 0;
    default: /* AlltoAll: block p of the output is rank p's block `rank` */
      fill(a, rank, k, 0, count * n);
      NCCLCHECK(ncclAlltoAll(a, b, count, ncclFloat, comm, NULL));
      CHECK_ALL(b, count * n, in((int)(i / count), k, (size_t)rank * count + i % count), "AlltoAll");
      return 0;
  }
}
#define KINDS 8

static int callsRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  static const size_t counts[] = {2, 301, 70001}; /* one-hop and LL; small Simple; ring and pipelines */
  size_t most = 70002 * (size_t)n; /* the largest count, and one more */
  float *a = guardAlloc(most * sizeof(float)), *b = guardAlloc(most * sizeof(float));
  for (int kind = 0; kind < KINDS; kind++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      for (int k = 0; k < 6; k++) {
        /* rounds 0-2 the same call; 3 the same with the buffers swapped; 4
         * one more element; 5 the first again */
        size_t count = k == 4 ? counts[c] + 1 : counts[c];
        if (oneCall(kind, rank, n, k, count, k == 3 ? b : a, k == 3 ? a : b, comm)) return 1;
      }
  EXPECT(guardCheck(a) == 0 && guardCheck(b) == 0, "rank %d: guard bytes", rank);
  guardFree(a);
  guardFree(b);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static struct {
  volatile int ready;
  ncclUniqueId id;
} *second; /* shared: rank 0's id for the second communicator */

static int newcommRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  float a[64], b[64];
  for (int round = 0; round < 2; round++) {
    /* The second communicator numbers the ranks in reverse: other peers
     * sit behind each connection, and its memory is likely the first's. */
    int me = round == 0 ? rank : n - 1 - rank;
    if (round == 1) {
      if (rank == 0) {
        NCCLCHECK(ncclGetUniqueId(&second->id));
        __atomic_store_n(&second->ready, 1, __ATOMIC_RELEASE);
      }
      for (int i = 0; i < 10000 && !__atomic_load_n(&second->ready, __ATOMIC_ACQUIRE); i++) usleep(1000);
      id = second->id;
    }
    ncclComm_t comm;
    NCCLCHECK(ncclCommInitRank(&comm, n, id, me));
    for (int k = 0; k < 3; k++) {
      fill(a, me, k, 0, 64);
      NCCLCHECK(ncclBroadcast(a, b, 64, ncclFloat, 0, comm, NULL));
      CHECK_ALL(b, (size_t)64, in(0, k, i), "Broadcast");
    }
    NCCLCHECK(ncclCommDestroy(comm));
  }
  return 0;
}

static int timeoutRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x = 1, y;
  for (int k = 0; k < 3; k++) NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
  if (rank == 1) { /* never comes to the fourth */
    sleep(6);
    NCCLCHECK(ncclCommAbort(comm));
    return 0;
  }
  NCCLCHECK(chorusCommSetTimeout(comm, 500));
  double t0 = nowSec();
  ncclResult_t res = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL);
  double t = nowSec() - t0;
  EXPECT(res == ncclTimeout, "rank %d: the call with a missing peer returned %s", rank, ncclGetErrorString(res));
  EXPECT(t < 2.0, "rank %d: the 500 ms timeout came after %.2f s", rank, t);
  NCCLCHECK(ncclCommAbort(comm));
  return 0;
}

static int mismatchRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float a[300], b[300];
  for (int k = 0; k < 3; k++) {
    fill(a, rank, k, 0, 300);
    NCCLCHECK(ncclAllReduce(a, b, 300, ncclFloat, ncclSum, comm, NULL));
  }
  double t0 = nowSec();
  ncclResult_t res = ncclAllReduce(a, b, rank == n - 1 ? 299 : 300, ncclFloat, ncclSum, comm, NULL);
  double t = nowSec() - t0;
  EXPECT(res == ncclInvalidUsage, "rank %d: the mismatched call returned %s", rank, ncclGetErrorString(res));
  EXPECT(t < 2.0, "rank %d: the error took %.2f s", rank, t);
  EXPECT(strstr(ncclGetLastError(comm), "#4"), "rank %d: the error '%s' does not name call #4", rank,
         ncclGetLastError(comm));
  NCCLCHECK(ncclCommAbort(comm));
  return 0;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  setenv("CHORUS_TIMEOUT", "10", 1);
  int failed;
  if (!strcmp(c, "calls")) failed = runRanks(3, callsRank, NULL, 120) + runRanks(2, callsRank, NULL, 120);
  else if (!strcmp(c, "calls5")) failed = runRanks(5, callsRank, NULL, 120);
  else if (!strcmp(c, "newcomm")) {
    second = mmap(NULL, sizeof *second, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (second == MAP_FAILED) return 1;
    failed = runRanks(3, newcommRank, NULL, 60);
  }
  else if (!strcmp(c, "timeout")) failed = runRanks(2, timeoutRank, NULL, 60);
  else if (!strcmp(c, "mismatch")) failed = runRanks(3, mismatchRank, NULL, 60);
  else {
    fprintf(stderr, "usage: test_repeat calls|calls5|newcomm|timeout|mismatch\n");
    return 2;
  }
  printf("test_repeat %s: %s\n", c, failed ? "FAILED" : "passed");
  return failed != 0;
}
