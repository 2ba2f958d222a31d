/* One-sided operations, called as NCCL's guide shows (windows registered
 * by every rank in the same order, ncclPutSignal / ncclSignal /
 * ncclWaitSignal):
 *   pingpong - 2 ranks pass a buffer back and forth 50 times (rank 0 waits
 *              then puts, rank 1 puts then waits), 7 B to 300 KB (several
 *              frames), guard bytes around the windows.
 *   alltoall - 1 to 5 ranks: each puts its block into every rank's window
 *              (itself too) in a group, then waits for a signal from each;
 *              then the signal barrier of NCCL's guide, twice.
 *   passive  - the target makes no call while the data lands: rank 0 spins
 *              on its window until rank 1's bytes are there, then its
 *              ncclWaitSignal returns at once. (That read races with the
 *              write on purpose, as a user's polling would: not for TSan.)
 *   dead     - the peer exits without signalling: ncclWaitSignal fails
 *              within 2 s naming it.
 *   unregistered - a put that comes before the target registers its
 *              window is kept: the target's wait times out saying so, and
 *              once it registers, the data lands and the signal counts.
 *   streams  - calls on streams run in the stream's order, not when made:
 *              each rank waits on one stream and puts on another (which
 *              would deadlock if the wait ran at its call); a put reads
 *              its buffer when it runs, after a host function of its
 *              stream filled it; a group's wait and put on one stream
 *              (puts go first); a wait that times out on a stream fails
 *              that stream's synchronize and the communicator.
 *   asymmetric - windows of different sizes (NCCL 2.30): a write past the
 *              writer's own window's end lands in the target's larger one;
 *              one past the target's end is refused whole and fails the
 *              target's wait.
 *   threads  - 3 ranks driven by one thread (ncclCommInitAll).
 *   args     - bad arguments: ncclInvalidArgument, nothing sent.
 *   test_rma <case> */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

/* A wait that misses a signal fails within 3 s (the tests' checks are quick). */
static ncclComm_t initComm(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm = NULL;
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) return NULL;
  if (chorusCommSetTimeout(comm, 3000) != ncclSuccess) return NULL;
  return comm;
}

static unsigned char pattern(int from, int iter, size_t i) { return (unsigned char)(from * 31 + iter * 7 + i * 13); }

static int pingpong(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = initComm(rank, n, id);
  EXPECT(comm, "rank %d: init", rank);
  static const size_t sizes[] = {7, 4096, 65536, 300001};
  enum { ITERS = 50 };
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t bytes = sizes[k];
    unsigned char *send = guardAlloc(bytes), *win = guardAlloc(bytes);
    memset(win, 0, bytes);
    ncclWindow_t w;
    NCCLCHECK(ncclCommWindowRegister(comm, win, bytes, &w, NCCL_WIN_COLL_SYMMETRIC));
    int peer = 1 - rank;
    ncclWaitSignalDesc_t desc = {.opCnt = 1, .peer = peer, .sigIdx = 0, .ctx = 0};
    for (int it = 0; it < ITERS; it++) {
      for (size_t i = 0; i < bytes; i++) send[i] = pattern(rank, it, i);
      if (rank == 0) {
        if (it > 0) NCCLCHECK(ncclWaitSignal(1, &desc, comm, NULL));
        if (it > 0)
          for (size_t i = 0; i < bytes; i++)
            EXPECT(win[i] == pattern(peer, it - 1, i), "rank 0: %zu bytes, round %d, byte %zu is %u", bytes, it, i,
                   win[i]);
        NCCLCHECK(ncclPutSignal(send, bytes, ncclUint8, peer, w, 0, 0, 0, 0, comm, NULL));
      } else {
        NCCLCHECK(ncclWaitSignal(1, &desc, comm, NULL));
        for (size_t i = 0; i < bytes; i++)
          EXPECT(win[i] == pattern(peer, it, i), "rank 1: %zu bytes, round %d, byte %zu is %u", bytes, it, i, win[i]);
        NCCLCHECK(ncclPutSignal(send, bytes, ncclUint8, peer, w, 0, 0, 0, 0, comm, NULL));
      }
    }
    if (rank == 0) NCCLCHECK(ncclWaitSignal(1, &desc, comm, NULL)); /* the last round's answer */
    EXPECT(!guardCheck(send) && !guardCheck(win), "rank %d: guard bytes", rank);
    NCCLCHECK(ncclCommWindowDeregister(comm, w));
    guardFree(send);
    guardFree(win);
  }
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int alltoall(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = initComm(rank, n, id);
  EXPECT(comm, "rank %d: init", rank);
  enum { COUNT = 1001 };
  int *send = guardAlloc(sizeof(int) * COUNT * n), *recv = guardAlloc(sizeof(int) * COUNT * n);
  for (int i = 0; i < COUNT * n; i++) recv[i] = -1;
  ncclWindow_t w;
  NCCLCHECK(ncclCommWindowRegister(comm, recv, sizeof(int) * COUNT * n, &w, NCCL_WIN_COLL_SYMMETRIC));
  ncclWaitSignalDesc_t descs[8];
  for (int r = 0; r < n; r++) descs[r] = (ncclWaitSignalDesc_t){1, r, 0, 0};
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) {
    /* a block per peer: the group's puts read their buffers at its end */
    for (int i = 0; i < COUNT; i++) send[r * COUNT + i] = rank * 100000 + r * 1000 + i;
    NCCLCHECK(ncclPutSignal(send + r * COUNT, COUNT, ncclInt32, r, w, (size_t)rank * COUNT * sizeof(int), 0, 0, 0,
                            comm, NULL));
  }
  NCCLCHECK(ncclGroupEnd());
  NCCLCHECK(ncclWaitSignal(n, descs, comm, NULL));
  for (int r = 0; r < n; r++)
    for (int i = 0; i < COUNT; i++)
      EXPECT(recv[r * COUNT + i] == r * 100000 + rank * 1000 + i, "rank %d: block %d element %d is %d", rank, r, i,
             recv[r * COUNT + i]);
  EXPECT(!guardCheck(send) && !guardCheck(recv), "rank %d: guard bytes", rank);
  for (int round = 0; round < 2; round++) { /* NCCL's signal barrier */
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < n; r++) NCCLCHECK(ncclSignal(r, 0, 0, 0, comm, NULL));
    NCCLCHECK(ncclGroupEnd());
    NCCLCHECK(ncclWaitSignal(n, descs, comm, NULL));
  }
  NCCLCHECK(ncclCommWindowDeregister(comm, w));
  NCCLCHECK(ncclCommDestroy(comm));
  guardFree(send);
  guardFree(recv);
  return 0;
}

static int passive(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = initComm(rank, n, id);
  EXPECT(comm, "rank %d: init", rank);
  enum { BYTES = 200000 };
  volatile unsigned char *win = guardAlloc(BYTES);
  memset((void *)win, 0, BYTES);
  ncclWindow_t w;
  NCCLCHECK(ncclCommWindowRegister(comm, (void *)win, BYTES, &w, NCCL_WIN_DEFAULT));
  ncclWaitSignalDesc_t desc = {1, 1, 0, 0};
  if (rank == 1) {
    unsigned char *src = guardAlloc(BYTES);
    memset(src, 0x5a, BYTES);
    NCCLCHECK(ncclPutSignal(src, BYTES, ncclUint8, 0, w, 0, 0, 0, 0, comm, NULL));
    guardFree(src);
  } else {
    double t0 = nowSec();
    while (win[BYTES - 1] != 0x5a || win[0] != 0x5a) { /* no chorus call: the data comes by itself */
      EXPECT(nowSec() - t0 < 5, "rank 0: the put never landed without a call");
      usleep(100);
    }
    t0 = nowSec();
    NCCLCHECK(ncclWaitSignal(1, &desc, comm, NULL));
    EXPECT(nowSec() - t0 < 0.5, "rank 0: the signal came %.2f s after the data", nowSec() - t0);
  }
  NCCLCHECK(ncclCommWindowDeregister(comm, w));
  NCCLCHECK(ncclCommDestroy(comm));
  guardFree((void *)win);
  return 0;
}

static int dead(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = initComm(rank, n, id);
  EXPECT(comm, "rank %d: init", rank);
  if (rank == 1) _exit(0); /* gone, no signal, no goodbye */
  ncclWaitSignalDesc_t desc = {1, 1, 0, 0};
  double t0 = nowSec();
  ncclResult_t res = ncclWaitSignal(1, &desc, comm, NULL);
  EXPECT(res != ncclSuccess && nowSec() - t0 < 2.0, "rank 0: waiting on a dead peer gave %s after %.2f s",
         ncclGetErrorString(res), nowSec() - t0);
  const char *err = ncclGetLastError(comm);
  EXPECT(strstr(err, "rank 1"), "rank 0: last error '%s' does not name rank 1", err);
  ncclCommAbort(comm);
  return 0;
}

static int unregistered(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = initComm(rank, n, id);
  EXPECT(comm, "rank %d: init", rank);
  int buf[4] = {1, 2, 3, 4}, win[4] = {0};
  ncclWindow_t w = NULL;
  if (rank == 1) {
    NCCLCHECK(ncclCommWindowRegister(comm, win, sizeof win, &w, NCCL_WIN_DEFAULT));
    NCCLCHECK(ncclPutSignal(buf, 4, ncclInt32, 0, w, 0, 0, 0, 0, comm, NULL));
  } else {
    /* The write comes before this rank registers its window: it waits,
     * and a wait for its signal says why when it times out. */
    NCCLCHECK(chorusCommSetTimeout(comm, 1000));
    ncclWaitSignalDesc_t desc = {1, 1, 0, 0};
    double t0 = nowSec();
    ncclResult_t res = ncclWaitSignal(1, &desc, comm, NULL);
    EXPECT(res == ncclTimeout && nowSec() - t0 < 2.0, "rank 0: a write to no window yet gave %s after %.2f s",
           ncclGetErrorString(res), nowSec() - t0);
    const char *err = ncclGetLastError(comm);
    EXPECT(strstr(err, "waits for this rank to register"), "rank 0: last error '%s'", err);
    EXPECT(win[0] == 0, "rank 0: memory it never registered changed");
    NCCLCHECK(ncclCommWindowRegister(comm, win, sizeof win, &w, NCCL_WIN_DEFAULT)); /* now it lands */
    NCCLCHECK(ncclWaitSignal(1, &desc, comm, NULL));
    EXPECT(win[0] == 1 && win[3] == 4, "rank 0: the kept write landed as %d %d", win[0], win[3]);
  }
  float one = 1, sum = 0; /* rank 1 stays until rank 0 is done */
  NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL));
  NCCLCHECK(ncclCommWindowDeregister(comm, w));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* Windows of different sizes, as NCCL 2.30 allows: window #0 holds 64
 * bytes on rank 0 and 256 on rank 1, window #1 64 bytes and 128 KiB.
 *   1. Rank 0 writes 128 bytes at offset 64 of rank 1's #0 (past the end of
 *      its own): they land.
 *   2. Rank 1 writes 16 bytes at offset 60 of rank 0's #0, past its end:
 *      rank 0 refuses them, and its wait, for the last peer it names,
 *      fails naming rank 1 (the fault comes with the signal it takes).
 *   3. Rank 0 writes 192 KiB (several frames) into rank 1's #1: refused
 *      whole, not its first 128 KiB alone; rank 1's wait fails. */
static int asymmetric(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = initComm(rank, n, id);
  EXPECT(comm, "rank %d: init", rank);
  size_t size0 = rank == 0 ? 64 : 256, size1 = rank == 0 ? 64 : 128 << 10, big = 192 << 10;
  unsigned char *win0 = calloc(size0 + 64, 1), *win1 = calloc(size1 + 64, 1), *src = malloc(big);
  for (size_t i = 0; i < big; i++) src[i] = pattern(rank, 1, i);
  ncclWindow_t w0, w1;
  NCCLCHECK(ncclCommWindowRegister(comm, win0, size0, &w0, NCCL_WIN_COLL_SYMMETRIC));
  NCCLCHECK(ncclCommWindowRegister(comm, win1, size1, &w1, NCCL_WIN_COLL_SYMMETRIC));
  ncclWaitSignalDesc_t desc = {1, 1 - rank, 0, 0};
  float one = 1, sum = 0;
  if (rank == 0) {
    NCCLCHECK(ncclPutSignal(src, 128, ncclUint8, 1, w0, 64, 0, 0, 0, comm, NULL));
    NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL)); /* 1 checked */
    ncclResult_t res = ncclWaitSignal(1, &desc, comm, NULL);
    const char *err = ncclGetLastError(comm);
    EXPECT(res == ncclInvalidUsage && strstr(err, "rank 1 wrote past the end of window #0"),
           "rank 0: the wait for a write past its window's end gave %s: '%s'", ncclGetErrorString(res), err);
    for (size_t i = 0; i < size0 + 64; i++) EXPECT(win0[i] == 0, "rank 0: byte %zu of its window was written", i);
    NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL)); /* 2 checked */
    NCCLCHECK(ncclPutSignal(src, big, ncclUint8, 1, w1, 0, 0, 0, 0, comm, NULL));
  } else {
    NCCLCHECK(ncclWaitSignal(1, &desc, comm, NULL));
    for (size_t i = 0; i < size0 + 64; i++) {
      unsigned char want = i >= 64 && i < 192 ? pattern(0, 1, i - 64) : 0;
      EXPECT(win0[i] == want, "rank 1: byte %zu of its window is %d, expected %d", i, win0[i], want);
    }
    NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL)); /* 1 checked */
    NCCLCHECK(ncclPutSignal(src, 16, ncclUint8, 0, w0, 60, 0, 0, 0, comm, NULL)); /* past rank 0's end */
    NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL)); /* 2 checked */
    ncclResult_t res = ncclWaitSignal(1, &desc, comm, NULL);
    const char *err = ncclGetLastError(comm);
    EXPECT(res == ncclInvalidUsage && strstr(err, "rank 0 wrote past the end of window #1"),
           "rank 1: the wait for a write past its window's end gave %s: '%s'", ncclGetErrorString(res), err);
    for (size_t i = 0; i < size1 + 64; i++)
      if (win1[i] != 0) {
        EXPECT(0, "rank 1: byte %zu of window #1 was written: a write past its end landed in part", i);
        break;
      }
  }
  ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL); /* rank 0 stays until rank 1 is done */
  ncclCommWindowDeregister(comm, w0);
  ncclCommWindowDeregister(comm, w1);
  ncclCommAbort(comm);
  free(win0);
  free(win1);
  free(src);
  return 0;
}

struct fill {
  unsigned char *buf;
  size_t bytes;
  int from, iter;
};

/* A host function: fills the send buffer as the stream reaches it. */
static void fillLater(void *arg, ncclResult_t status) {
  struct fill *f = arg;
  usleep(20000); /* the put queued behind this must wait for it */
  if (status == ncclSuccess)
    for (size_t i = 0; i < f->bytes; i++) f->buf[i] = pattern(f->from, f->iter, i);
}

static int streams(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = initComm(rank, n, id);
  EXPECT(comm, "rank %d: init", rank);
  enum { BYTES = 5003 };
  int peer = 1 - rank;
  unsigned char *send = guardAlloc(BYTES), *win = guardAlloc(BYTES);
  memset(win, 0, BYTES);
  memset(send, 0, BYTES);
  ncclWindow_t w;
  NCCLCHECK(ncclCommWindowRegister(comm, win, BYTES, &w, NCCL_WIN_COLL_SYMMETRIC));
  cudaStream_t s1, s2;
  NCCLCHECK(chorusStreamCreate(&s1));
  NCCLCHECK(chorusStreamCreate(&s2));
  ncclWaitSignalDesc_t desc = {.opCnt = 1, .peer = peer, .sigIdx = 0, .ctx = 0};
  /* Round 0: both ranks put on s2, then wait on s1: the wait runs after
   * the put (a communicator's launches keep their order across streams, as
   * NCCL's do; the other way round, each rank's put would wait for its own
   * wait, there and here). Round 1: a group holds a wait and then a put,
   * both on s1. */
  for (int round = 0; round < 2; round++) {
    struct fill f = {send, BYTES, rank, round};
    cudaStream_t putOn = round == 0 ? s2 : s1;
    if (round == 1) NCCLCHECK(ncclGroupStart());
    if (round == 1) NCCLCHECK(ncclWaitSignal(1, &desc, comm, s1));
    NCCLCHECK(chorusLaunchHostFunc(putOn, fillLater, &f));
    NCCLCHECK(ncclPutSignal(send, BYTES, ncclUint8, peer, w, 0, 0, 0, 0, comm, putOn));
    if (round == 0) NCCLCHECK(ncclWaitSignal(1, &desc, comm, s1));
    if (round == 1) NCCLCHECK(ncclGroupEnd());
    NCCLCHECK(chorusStreamSynchronize(s1));
    NCCLCHECK(chorusStreamSynchronize(s2));
    for (size_t i = 0; i < BYTES; i++)
      EXPECT(win[i] == pattern(peer, round, i), "rank %d round %d: byte %zu is %u", rank, round, i, win[i]);
    /* neither rank puts again before the other has checked its window */
    NCCLCHECK(ncclSignal(peer, 0, 0, 0, comm, s1));
    NCCLCHECK(ncclWaitSignal(1, &desc, comm, s1));
    NCCLCHECK(chorusStreamSynchronize(s1));
  }
  EXPECT(!guardCheck(send) && !guardCheck(win), "rank %d: guard bytes", rank);
  /* A wait for a signal nobody sends returns at its call and fails its
   * stream at the timeout (3 s); the communicator reports it too. */
  double t0 = nowSec();
  NCCLCHECK(ncclWaitSignal(1, &desc, comm, s2));
  EXPECT(nowSec() - t0 < 1, "rank %d: ncclWaitSignal on a stream blocked its caller", rank);
  ncclResult_t res = chorusStreamSynchronize(s2);
  /* the rank whose wait ends first aborts; the other may see it go first */
  EXPECT(res == ncclTimeout || res == ncclRemoteError, "rank %d: the stream of a wait that timed out says %s", rank,
         ncclGetErrorString(res));
  ncclResult_t async = ncclSuccess;
  NCCLCHECK(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == res, "rank %d: ncclCommGetAsyncError says %s", rank, ncclGetErrorString(async));
  NCCLCHECK(chorusStreamDestroy(s1));
  chorusStreamDestroy(s2);
  NCCLCHECK(ncclCommAbort(comm));
  guardFree(send);
  guardFree(win);
  return 0;
}

static int threads(void) {
  enum { N = 3, COUNT = 77 };
  ncclComm_t comms[N];
  NCCLCHECK(ncclCommInitAll(comms, N, NULL));
  double send[N][COUNT], recv[N][COUNT];
  ncclWindow_t w[N];
  for (int r = 0; r < N; r++) NCCLCHECK(ncclCommWindowRegister(comms[r], recv[r], sizeof recv[r], &w[r], 0));
  for (int r = 0; r < N; r++) {
    for (int i = 0; i < COUNT; i++) send[r][i] = r + i / 100.0;
    NCCLCHECK(ncclPutSignal(send[r], COUNT, ncclFloat64, (r + 1) % N, w[r], 0, 0, 0, 0, comms[r], NULL));
  }
  for (int r = 0; r < N; r++) {
    ncclWaitSignalDesc_t desc = {1, (r + N - 1) % N, 0, 0};
    NCCLCHECK(ncclWaitSignal(1, &desc, comms[r], NULL));
    for (int i = 0; i < COUNT; i++)
      EXPECT(recv[r][i] == (r + N - 1) % N + i / 100.0, "rank %d element %d is %g", r, i, recv[r][i]);
  }
  for (int r = 0; r < N; r++) NCCLCHECK(ncclCommWindowDeregister(comms[r], w[r]));
  for (int r = 0; r < N; r++) NCCLCHECK(ncclCommDestroy(comms[r]));
  return 0;
}

static int args(void) {
  ncclComm_t comms[2], other[1];
  NCCLCHECK(ncclCommInitAll(comms, 2, NULL));
  NCCLCHECK(ncclCommInitAll(other, 1, NULL));
  char buf[64], win[64];
  ncclWindow_t w, wOther;
  NCCLCHECK(ncclCommWindowRegister(comms[0], win, sizeof win, &w, 0));
  NCCLCHECK(ncclCommWindowRegister(other[0], win, sizeof win, &wOther, 0));
  ncclWaitSignalDesc_t bad[] = {{1, 5, 0, 0}, {1, 1, 1, 0}, {1, 1, 0, 1}, {-1, 1, 0, 0}, {0, 1, 0, 0}};
  ncclResult_t r[] = {
      ncclPutSignal(buf, 8, ncclInt8, 2, w, 0, 0, 0, 0, comms[0], NULL),       /* peer out of range */
      ncclPutSignal(buf, 8, ncclInt8, 1, w, 0, 1, 0, 0, comms[0], NULL),       /* sigIdx */
      ncclPutSignal(buf, 8, ncclInt8, 1, w, 0, 0, 1, 0, comms[0], NULL),       /* ctx */
      ncclPutSignal(buf, 8, ncclInt8, 1, w, 0, 0, 0, 1, comms[0], NULL),       /* flags */
      ncclPutSignal(buf, 8, ncclInt8, 1, wOther, 0, 0, 0, 0, comms[0], NULL),  /* another comm's window */
      ncclPutSignal(buf, 8, ncclInt8, 1, NULL, 0, 0, 0, 0, comms[0], NULL),    /* no window */
      ncclPutSignal(buf, 8, ncclInt8, 1, w, SIZE_MAX - 4, 0, 0, 0, comms[0], NULL), /* past any window's end */
      ncclPutSignal(buf, 8, ncclInt8, 0, w, 60, 0, 0, 0, comms[0], NULL),      /* past its own window's end */
      ncclPutSignal(NULL, 8, ncclInt8, 1, w, 0, 0, 0, 0, comms[0], NULL),      /* no buffer */
      ncclPutSignal(buf, 8, (ncclDataType_t)99, 1, w, 0, 0, 0, 0, comms[0], NULL), /* datatype */
      ncclSignal(-1, 0, 0, 0, comms[0], NULL),                                 /* peer */
      ncclWaitSignal(-1, bad, comms[0], NULL),                                 /* nDesc */
      ncclWaitSignal(1, NULL, comms[0], NULL),                                 /* no descriptors */
      ncclWaitSignal(1, &bad[0], comms[0], NULL),                              /* peer out of range */
      ncclWaitSignal(1, &bad[1], comms[0], NULL),                              /* sigIdx */
      ncclWaitSignal(1, &bad[2], comms[0], NULL),                              /* ctx */
      ncclWaitSignal(1, &bad[3], comms[0], NULL),                              /* opCnt */
      ncclWaitSignal(1, &bad[4], comms[0], NULL),                              /* opCnt 0 (NCCL: invalid) */
      ncclWaitSignal(0, bad, comms[0], NULL),                                  /* no descriptor (NCCL: invalid) */
      ncclWaitSignal(0, NULL, comms[0], NULL),                                 /* the same */
      ncclPutSignal(NULL, 0, ncclInt8, 1, w, 0, 0, 0, 0, comms[0], NULL),      /* no buffer, count 0 (NCCL: invalid) */
      ncclPutSignal(buf, SIZE_MAX / 4, ncclInt64, 1, w, 0, 0, 0, 0, comms[0], NULL), /* count * 8 wraps around */
  };
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    EXPECT(r[i] == ncclInvalidArgument, "bad call %zu gave %s", i, ncclGetErrorString(r[i]));
  NCCLCHECK(ncclCommWindowDeregister(comms[0], w));
  NCCLCHECK(ncclCommWindowDeregister(other[0], wOther));
  NCCLCHECK(ncclCommDestroy(comms[0]));
  NCCLCHECK(ncclCommDestroy(comms[1]));
  NCCLCHECK(ncclCommDestroy(other[0]));
  return 0;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  setenv("CHORUS_TIMEOUT", "10", 1);
  int failed;
  if (!strcmp(c, "pingpong")) failed = runRanks(2, pingpong, NULL, 60);
  else if (!strcmp(c, "alltoall")) {
    failed = 0;
    for (int n = 1; n <= 5 && !failed; n++) failed += runRanks(n, alltoall, NULL, 60);
  } else if (!strcmp(c, "passive")) failed = runRanks(2, passive, NULL, 60);
  else if (!strcmp(c, "dead")) failed = runRanks(2, dead, NULL, 60);
  else if (!strcmp(c, "unregistered")) failed = runRanks(2, unregistered, NULL, 60);
  else if (!strcmp(c, "streams")) failed = runRanks(2, streams, NULL, 60);
  else if (!strcmp(c, "asymmetric")) failed = runRanks(2, asymmetric, NULL, 60);
  else if (!strcmp(c, "threads")) failed = threads();
  else if (!strcmp(c, "args")) failed = args();
  else {
    fprintf(stderr, "usage: test_rma pingpong|alltoall|passive|dead|unregistered|streams|asymmetric|threads|args\n");
    return 2;
  }
  printf("test_rma %s: %s\n", c, failed ? "FAILED" : "passed");
  return failed != 0;
}
