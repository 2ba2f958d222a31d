/* Single copy within a host (CHORUS_SINGLE_COPY): receivers read large
 * sends where the sender holds them (process_vm_readv between processes).
 *   mixed    - one of 4 ranks may not use CMA (a seccomp filter makes
 *              process_vm_readv fail, as in many containers): it reads
 *              through the FIFOs, says so in its log, and every rank's
 *              AllGather, Broadcast, Send/Recv and AlltoAll is right.
 *   held     - a send returns only once its receiver has read the data:
 *              the receiver comes 300 ms late and the sender overwrites
 *              its buffer as soon as its call returns; and a Broadcast
 *              grouped after another (one channel), whose root writes
 *              over the buffer the peers read for the first, waits
 *              until they have read it.
 *   revoked  - the filter comes after ncclCommInitRank: the reads fail, and
 *              every rank's AllGather fails within 2 s (not at the
 *              timeout), with a text that says which rank could not read
 *              whose buffer. This also proves that the reads are used.
 *   deadreader - the receiver of a send that fits the FIFO dies before
 *              it reads, or destroys its communicator: the sender's call
 *              fails within 2 s, naming it.
 *   off      - CHORUS_SINGLE_COPY=0 on one rank only: all still right.
 *   nowrite  - with CHORUS_CMA_SPLIT=1 (readers offer senders half of each
 *              read), rank 0 may read its peers' memory but not write it
 *              (its filter fails process_vm_writev only): its first
 *              write fails, it says so in its log and takes no more offers,
 *              and every rank's results are right.
 *   deadsender - with CHORUS_CMA_SPLIT=1, the root of a stream of 4 MiB
 *              Broadcasts dies (SIGKILL) while its peer reads: the peer's
 *              call fails within 2 s, naming it, whether the root died
 *              writing a half or waiting.
 *   claimdeath - with CHORUS_CMA_SPLIT=1, the root of 4 MiB Broadcasts
 *              dies the moment it writes a half it took from its reader's
 *              offer (a filter kills it in process_vm_writev): the reader,
 *              waiting for that half, fails within 2 s, naming it.
 *   stuckwriter - with CHORUS_CMA_SPLIT=1, the root of 4 MiB Broadcasts
 *              stops for good in the write of a half it took (alive, as a
 *              stopped or swapped-out process): the reader, whose
 *              communicator's timeout is 1 s (CHORUS_TIMEOUT 5 s), fails
 *              with ncclTimeout within 3 s, naming it.
 *   stuckabort - the same, the reader's timeout CHORUS_TIMEOUT's: a second
 *              thread's ncclCommAbort ends its wait within 1 s.
 *   autopair - CHORUS_SINGLE_COPY unset, 2 ranks: with CMA refused to
 *              rank 1 after init, a 32 KiB and a 512 KiB Broadcast from
 *              rank 0, and AllGather, work: below CHORUS_NT_STORES's size
 *              (and below 1 MiB where ranks share cores) the FIFOs carry
 *              them.
 *   auto     - CHORUS_SINGLE_COPY unset (CHORUS_NT_STORES small): with CMA
 *              refused after init, a Send/Recv still works (auto leaves
 *              point-to-point to the FIFOs) and an AllGather fails (it read
 *              the peer's buffer), where the host has a core per rank.
 *   autoshared - CHORUS_SINGLE_COPY unset, 3 ranks pinned to one CPU
 *              (they share cores), CHORUS_NT_STORES 4194312 bytes: with
 *              CMA refused to rank 1 after init, an AllGather and a
 *              Broadcast from rank 0 of 768 KiB and of exactly the NT size
 *              work (the FIFOs: below 1 MiB, and from the NT size on), and
 *              an AllGather of 1.5 MiB, or a Broadcast of exactly 1 MiB,
 *              fails (it read the peer's buffer), on every rank.
 *   test_singlecopy <case> */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

static char logDir[64];
static double *shared; /* [0]: when the victim died; [1 + rank]: the rank's pid (mixed) */

/* The CPUs the ranks may run on (they inherit this process's mask): chorus
 * counts their union against the ranks to tell whether each has a core. */
static int usableCpus(void) {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

static float value(int rank, size_t i) { return (float)(rank * 100003 + (int)(i % 99991)); }

static float *filled(int rank, size_t count) {
  float *p = guardAlloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) p[i] = value(rank, i);
  return p;
}

/* 0 when p[i] == value(rank, from + i) for i < count. */
static int checkFrom(const float *p, int rank, size_t from, size_t count, const char *what, int me) {
  for (size_t i = 0; i < count; i++)
    if (p[i] != value(rank, from + i)) {
      fprintf(stderr, "rank %d: %s: element %zu is %g, expected %g (rank %d's)\n", me, what, i, p[i],
              value(rank, from + i), rank);
      return 1;
    }
  return 0;
}

/* Rank me's log (NCCL_DEBUG_FILE, one per process) contains text. */
static int logHas(int me, const char *text) {
  char path[128];
  snprintf(path, sizeof path, "%s/log.%d", logDir, (int)getpid());
  return fileLinesWith(path, text) > 0;
}

/* AllGather (out of and in place), Broadcast, a Send/Recv ring and
 * AlltoAll, at sizes that take single copy, checked element by element. */
static int everyKind(int rank, int n, ncclComm_t comm) {
  size_t count = 300001; /* odd: the last slot is short */
  float *in = filled(rank, count), *out = guardAlloc(count * n * sizeof(float));
  NCCLCHECK(ncclAllGather(in, out, count, ncclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    if (checkFrom(out + (size_t)r * count, r, 0, count, "AllGather", rank)) return 1;
  float *inPlace = guardAlloc(count * n * sizeof(float));
  for (size_t i = 0; i < count; i++) inPlace[(size_t)rank * count + i] = value(rank, i);
  NCCLCHECK(ncclAllGather(inPlace + (size_t)rank * count, inPlace, count, ncclFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    if (checkFrom(inPlace + (size_t)r * count, r, 0, count, "AllGather in place", rank)) return 1;

  size_t bcount = (1 << 18) + 3;
  int root = 2 % n;
  float *b = rank == root ? filled(root, bcount) : guardAlloc(bcount * sizeof(float));
  NCCLCHECK(ncclBroadcast(b, b, bcount, ncclFloat, root, comm, NULL));
  if (checkFrom(b, root, 0, bcount, "Broadcast", rank)) return 1;

  size_t pcount = 180001;
  float *s = filled(rank, pcount), *r = guardAlloc(pcount * sizeof(float));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(s, pcount, ncclFloat, (rank + 1) % n, comm, NULL));
  NCCLCHECK(ncclRecv(r, pcount, ncclFloat, (rank + n - 1) % n, comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  if (checkFrom(r, (rank + n - 1) % n, 0, pcount, "Recv", rank)) return 1;

  size_t acount = 100003;
  float *a = filled(rank, acount * n), *ao = guardAlloc(acount * n * sizeof(float));
  NCCLCHECK(ncclAlltoAll(a, ao, acount, ncclFloat, comm, NULL));
  for (int p = 0; p < n; p++) /* block p came from rank p's block rank */
    if (checkFrom(ao + (size_t)p * acount, p, (size_t)rank * acount, acount, "AlltoAll", rank)) return 1;

  void *bufs[] = {in, out, inPlace, b, s, r, a, ao};
  for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) {
    EXPECT(guardCheck(bufs[k]) == 0, "rank %d: buffer %zu's guard bytes were overwritten", rank, k);
    guardFree(bufs[k]);
  }
  return 0;
}

static int mixedRank(int rank, int n, ncclUniqueId id, void *arg) {
  shared[1 + rank] = getpid();
  if (rank == 1) EXPECT(denyCma() == 0, "seccomp: %s", strerror(errno));
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (everyKind(rank, n, comm)) return 1;
  NCCLCHECK(ncclCommDestroy(comm));
  /* Rank 1 reads nobody's memory; the others read everybody's, rank 1's too. */
  char want[96];
  snprintf(want, sizeof want, "single copy from %d of them", rank == 1 ? 0 : n - 1);
  EXPECT(logHas(rank, want), "rank %d's log does not say '%s'", rank, want);
  if (rank == 1) EXPECT(logHas(rank, "with CMA: Operation not permitted"), "rank 1's log does not say why");
  return 0;
}

static int heldRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t count = 1 << 17; /* 512 KiB: its references fit the FIFO, so the sender posts them all at once */
  float *buf = rank == 0 ? filled(0, count) : guardAlloc(count * sizeof(float));
  if (rank == 0) {
    NCCLCHECK(ncclSend(buf, count, ncclFloat, 1, comm, NULL));
    memset(buf, 0xff, count * sizeof(float)); /* the caller's again */
  } else if (rank == 1) {
    usleep(300000);
    NCCLCHECK(ncclRecv(buf, count, ncclFloat, 0, comm, NULL));
    if (checkFrom(buf, 0, 0, count, "Recv after the sender returned", rank)) return 1;
  }
  EXPECT(guardCheck(buf) == 0, "rank %d: guard bytes", rank);
  guardFree(buf);

  /* Grouped operations on a communicator run in order on each channel (as
   * NCCL's: not across channels, so one channel here). Two Broadcasts from
   * rank 0: the first's data is read where it is (the peers come 50 ms
   * late); the second, out of place, copies x over that very buffer on
   * the root at once, needing nobody, while the peers put x elsewhere.
   * The first's task on the root must end only once they have read it.
   * 128 Ki floats: its references fit the FIFO, so the root posts them
   * all and could go on. */
  float *first = filled(0, count), *x = filled(n + 7, count), *elsewhere = guardAlloc(count * sizeof(float));
  for (int iter = 0; iter < 3; iter++) {
    if (rank == 0) for (size_t i = 0; i < count; i++) first[i] = value(iter, i);
    else usleep(50000);
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclBroadcast(first, first, count, ncclFloat, 0, comm, NULL));
    NCCLCHECK(ncclBroadcast(x, rank == 0 ? first : elsewhere, count, ncclFloat, 0, comm, NULL));
    NCCLCHECK(ncclGroupEnd());
    if (checkFrom(rank == 0 ? first : elsewhere, n + 7, 0, count, "second Broadcast", rank)) return 1;
    if (rank != 0 && checkFrom(first, iter, 0, count, "first Broadcast, overwritten on the root after", rank)) return 1;
  }
  EXPECT(guardCheck(first) == 0 && guardCheck(x) == 0 && guardCheck(elsewhere) == 0, "rank %d: guard bytes", rank);
  guardFree(first);
  guardFree(x);
  guardFree(elsewhere);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int revokedRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t count = 1 << 18;
  float *in = filled(rank, count), *out = guardAlloc(count * n * sizeof(float));
  NCCLCHECK(ncclAllGather(in, out, count, ncclFloat, comm, NULL)); /* every rank reads: it works */
  if (rank == n - 1) EXPECT(denyCma() == 0, "seccomp: %s", strerror(errno));
  NCCLCHECK(ncclAllReduce(in, in, 1, ncclFloat, ncclMax, comm, NULL)); /* the filter is in place */
  double t0 = nowSec();
  ncclResult_t res = ncclAllGather(in, out, count, ncclFloat, comm, NULL);
  double took = nowSec() - t0;
  EXPECT(res != ncclSuccess, "rank %d: the AllGather succeeded though rank %d cannot read", rank, n - 1);
  EXPECT(took < 2.0, "rank %d: the error took %.2f s", rank, took);
  char want[64];
  snprintf(want, sizeof want, "rank %d could not read rank", n - 1);
  EXPECT(strstr(ncclGetLastError(comm), want), "rank %d: last error '%s' does not say '%s'", rank,
         ncclGetLastError(comm), want);
  fprintf(stderr, "rank %d: %s after %.0f ms: %s\n", rank, ncclGetErrorString(res), took * 1e3,
          ncclGetLastError(comm));
  NCCLCHECK(ncclCommAbort(comm));
  guardFree(in);
  guardFree(out);
  return 0;
}

/* Rank me's call, which returned res, failed within 2 s of rank dead's
 * death (shared[0]) with ncclRemoteError and a last error that names it. */
static int failedForDeath(ncclComm_t comm, ncclResult_t res, int me, int dead, const char *call) {
  double sinceDeath = nowSec() - shared[0];
  char name[16];
  snprintf(name, sizeof name, "rank %d", dead);
  EXPECT(res == ncclRemoteError, "rank %d: %s returned %s", me, call, ncclGetErrorString(res));
  EXPECT(shared[0] > 0 && sinceDeath < 2.0, "rank %d: the error came %.2f s after the death", me, sinceDeath);
  EXPECT(strstr(ncclGetLastError(comm), name), "rank %d: last error '%s' does not name %s", me,
         ncclGetLastError(comm), name);
  fprintf(stderr, "rank %d: %s %.0f ms after %s died: %s\n", me, ncclGetErrorString(res), sinceDeath * 1e3, name,
          ncclGetLastError(comm));
  return 0;
}

/* arg: 1 when the reader leaves by ncclCommDestroy instead of dying. */
static int deadReaderRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t count = 1 << 17;
  float *buf = filled(rank, count);
  NCCLCHECK(ncclAllReduce(buf, buf, 1, ncclFloat, ncclMax, comm, NULL));
  if (rank == 1) {
    usleep(300000);
    shared[0] = nowSec();
    if (*(const int *)arg) {
      NCCLCHECK(ncclCommDestroy(comm));
      guardFree(buf);
      return 0;
    }
    raise(SIGKILL);
  }
  ncclResult_t res = ncclSend(buf, count, ncclFloat, 1, comm, NULL);
  if (failedForDeath(comm, res, 0, 1, "the send to a dead rank")) return 1;
  NCCLCHECK(ncclCommAbort(comm));
  guardFree(buf);
  return 0;
}

static int noWriteRank(int rank, int n, ncclUniqueId id, void *arg) {
  shared[1 + rank] = getpid();
  if (rank == 0) EXPECT(denyCmaWrite() == 0, "seccomp: %s", strerror(errno));
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  for (int k = 0; k < 2; k++) /* the second time over connections where rank 0's write failed, no offers */
    if (everyKind(rank, n, comm)) return 1;
  /* Broadcasts from rank 0, which only waits while its peers read, until
   * it has taken an offer (and failed to write it): on a loaded machine it
   * may not run while a peer reads, so look after each (for up to 10 s). */
  const char *said = "with CMA (Operation not permitted): it reads what it reads from here alone";
  size_t count = 1 << 20;
  float *b = rank == 0 ? filled(0, count) : guardAlloc(count * sizeof(float));
  int32_t refused = 0;
  double t0 = nowSec();
  for (int k = 0; !refused && nowSec() - t0 < 10; k++) {
    NCCLCHECK(ncclBroadcast(b, b, count, ncclFloat, 0, comm, NULL));
    if (checkFrom(b, 0, 0, count, "Broadcast from the rank that cannot write", rank)) return 1;
    refused = rank == 0 && logHas(rank, said);
    NCCLCHECK(ncclAllReduce(&refused, &refused, 1, ncclInt32, ncclMax, comm, NULL));
  }
  EXPECT(refused, "rank %d: in 10 s of Broadcasts rank 0 never said that it could not write", rank);
  EXPECT(guardCheck(b) == 0, "rank %d: guard bytes", rank);
  guardFree(b);
  NCCLCHECK(ncclCommDestroy(comm));
  if (rank != 0)
    EXPECT(logHas(rank, "single copy from 2 of them"), "rank %d's log does not say it reads with CMA", rank);
  return 0;
}

/* Rank 0 kills itself 200 ms after it begins its Broadcasts. */
static void *dieSoon(void *arg) {
  (void)arg;
  usleep(200000);
  shared[0] = nowSec();
  raise(SIGKILL);
  return NULL;
}

/* The root of a stream of 4 MiB Broadcasts dies: on a timer (deadsender)
 * or the moment it writes a half it took from its reader's offer
 * (claimdeath: a filter kills it in process_vm_writev). The reader's call
 * fails within 2 s of the death, naming it. */
static int deadRootRank(int rank, int n, ncclUniqueId id, void *arg) {
  int inWrite = *(const int *)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t count = 1 << 20;
  float *buf = filled(0, count);
  NCCLCHECK(ncclAllReduce(buf, buf, 1, ncclFloat, ncclMax, comm, NULL));
  pthread_t killer;
  if (inWrite) {
    if (rank == 0) EXPECT(dieOnCmaWrite() == 0, "seccomp: %s", strerror(errno));
    NCCLCHECK(ncclAllReduce(buf, buf, 1, ncclFloat, ncclMax, comm, NULL)); /* the filter is in place */
    shared[0] = nowSec(); /* the root dies within its first Broadcast's first slots */
  } else if (rank == 0) {
    EXPECT(pthread_create(&killer, NULL, dieSoon, NULL) == 0, "pthread_create");
  }
  ncclResult_t res = ncclSuccess;
  int most = inWrite ? 1000 : 100000;
  for (int k = 0; res == ncclSuccess && k < most; k++) res = ncclBroadcast(buf, buf, count, ncclFloat, 0, comm, NULL);
  EXPECT(rank == 1, "rank 0 is alive after %d Broadcasts: it never took an offer", most);
  if (failedForDeath(comm, res, 1, 0, "the Broadcast from a dead root")) return 1;
  NCCLCHECK(ncclCommAbort(comm));
  guardFree(buf);
  return 0;
}

struct stuckAborter {
  ncclComm_t comm;
  double at; /* when it aborted */
};

/* Aborts the communicator 200 ms after rank 0 stopped (shared[0]), or
 * after 10 s if it never did (the Broadcasts then all succeeded: a failure
 * the caller reports). */
static void *abortWhenStuck(void *p) {
  struct stuckAborter *a = p;
  for (double t0 = nowSec(); shared[0] == 0 && nowSec() - t0 < 10;) usleep(1000);
  usleep(200000);
  a->at = nowSec();
  ncclCommAbort(a->comm);
  return NULL;
}

/* The root of a stream of 4 MiB Broadcasts stops for good writing a half
 * it took from its reader's offer (stuckwriter, stuckabort): the reader's
 * wait for that half ends at its communicator's timeout, or at an abort
 * from another thread, not at CHORUS_TIMEOUT. Rank 1 then kills rank 0. */
static int stuckRootRank(int rank, int n, ncclUniqueId id, void *arg) {
  int abortIt = *(const int *)arg;
  shared[1 + rank] = getpid();
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (rank == 1 && !abortIt) NCCLCHECK(chorusCommSetTimeout(comm, 1000));
  size_t count = 1 << 20;
  float *buf = filled(0, count);
  NCCLCHECK(ncclAllReduce(buf, buf, 1, ncclFloat, ncclMax, comm, NULL));
  if (rank == 0) EXPECT(stallOnCmaWrite(&shared[0]) == 0, "seccomp: %s", strerror(errno));
  NCCLCHECK(ncclAllReduce(buf, buf, 1, ncclFloat, ncclMax, comm, NULL)); /* the filter is in place */
  struct stuckAborter a = {comm, 0};
  pthread_t aborter;
  if (rank == 1 && abortIt) EXPECT(pthread_create(&aborter, NULL, abortWhenStuck, &a) == 0, "pthread_create");
  ncclResult_t res = ncclSuccess;
  for (int k = 0; res == ncclSuccess && k < 1000; k++) res = ncclBroadcast(buf, buf, count, ncclFloat, 0, comm, NULL);
  EXPECT(rank == 1, "rank 0 returned from 1000 Broadcasts: it never took an offer");
  double end = nowSec();
  if (abortIt) {
    pthread_join(aborter, NULL);
    fprintf(stderr, "rank 1: %s %.0f ms after the abort\n", ncclGetErrorString(res), (end - a.at) * 1e3);
    EXPECT(res != ncclSuccess && end - a.at < 1.0, "rank 1: the Broadcast returned %s %.2f s after the abort",
           ncclGetErrorString(res), end - a.at);
  } else {
    double since = end - shared[0];
    fprintf(stderr, "rank 1: %s %.0f ms after rank 0 stopped: %s\n", ncclGetErrorString(res), since * 1e3,
            ncclGetLastError(comm));
    EXPECT(res == ncclTimeout, "rank 1: the Broadcast from a stuck root returned %s", ncclGetErrorString(res));
    EXPECT(shared[0] > 0 && since > 0.9 && since < 3.0, "rank 1: the error came %.2f s after rank 0 stopped", since);
    EXPECT(strstr(ncclGetLastError(comm), "rank 0"), "rank 1: last error '%s' does not name rank 0",
           ncclGetLastError(comm));
    NCCLCHECK(ncclCommAbort(comm));
  }
  kill((pid_t)shared[1], SIGKILL);
  guardFree(buf);
  return 0;
}

static int offRank(int rank, int n, ncclUniqueId id, void *arg) {
  if (rank == 0) setenv("CHORUS_SINGLE_COPY", "0", 1);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (everyKind(rank, n, comm)) return 1;
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int autoRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t count = 1 << 17;
  float *in = filled(rank, count), *out = guardAlloc(count * n * sizeof(float));
  if (rank == 1) EXPECT(denyCma() == 0, "seccomp: %s", strerror(errno));
  NCCLCHECK(ncclAllReduce(in, out, 1, ncclFloat, ncclMax, comm, NULL)); /* the filter is in place */
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(in, count, ncclFloat, 1 - rank, comm, NULL));
  NCCLCHECK(ncclRecv(out, count, ncclFloat, 1 - rank, comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  if (checkFrom(out, 1 - rank, 0, count, "Recv", rank)) return 1;
  ncclResult_t res = ncclAllGather(in, out, count, ncclFloat, comm, NULL);
  if (usableCpus() >= n) {
    EXPECT(res != ncclSuccess, "rank %d: the AllGather succeeded: it did not read the peer's buffer", rank);
    NCCLCHECK(ncclCommAbort(comm));
  } else { /* more ranks than cores: auto reads only from 1 MiB to the NT size, none here (4 KiB) */
    EXPECT(res == ncclSuccess, "rank %d: the AllGather failed: %s", rank, ncclGetLastError(comm));
    NCCLCHECK(ncclCommDestroy(comm));
  }
  guardFree(in);
  guardFree(out);
  return 0;
}

static int autoPairRank(int rank, int n, ncclUniqueId id, void *arg) {
  int gather = *(int *)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t count = 1 << 17; /* 512 KiB */
  float *buf = filled(rank, count), *out = guardAlloc(count * n * sizeof(float));
  if (rank == 1) EXPECT(denyCma() == 0, "seccomp: %s", strerror(errno));
  NCCLCHECK(ncclAllReduce(out, out, 1, ncclFloat, ncclMax, comm, NULL)); /* the filter is in place */
  ncclResult_t res;
  if (gather) {
    NCCLCHECK(ncclAllGather(buf, out, count / 32, ncclFloat, comm, NULL)); /* 32 KiB in all */
    for (int r = 0; r < n; r++)
      if (checkFrom(out + (size_t)r * (count / 32), r, 0, count / 32, "32 KiB AllGather", rank)) return 1;
    res = ncclAllGather(buf, out, count / 2, ncclFloat, comm, NULL);
    for (int r = 0; res == ncclSuccess && r < n; r++)
      if (checkFrom(out + (size_t)r * (count / 2), r, 0, count / 2, "512 KiB AllGather", rank)) return 1;
  } else {
    NCCLCHECK(ncclBroadcast(buf, out, count / 16, ncclFloat, 0, comm, NULL));
    if (checkFrom(out, 0, 0, count / 16, "32 KiB Broadcast", rank)) return 1;
    res = ncclBroadcast(buf, out, count, ncclFloat, 0, comm, NULL);
    if (res == ncclSuccess && checkFrom(out, 0, 0, count, "512 KiB Broadcast", rank)) return 1;
  }
  EXPECT(res == ncclSuccess, "rank %d: the 512 KiB %s failed (it read rank 0's buffer?): %s", rank,
         gather ? "AllGather" : "Broadcast", ncclGetLastError(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  guardFree(buf);
  guardFree(out);
  return 0;
}

/* Rank 1 cannot read its peers' buffers: where ranks share cores, a
 * collective reads them from 1 MiB to below CHORUS_NT_STORES's size
 * (4194312 bytes here), so only the operation in that window fails, on
 * every rank. */
#define SHARED_NT_BYTES 4194312 /* 3 ranks x 349526 floats */
static int autoSharedRank(int rank, int n, ncclUniqueId id, void *arg) {
  int gather = *(int *)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  /* Floats per rank (AllGather) or in all (Broadcast): 768 KiB in all, the
   * NT size exactly, then in the window 1.5 MiB (AllGather) or exactly 1
   * MiB (Broadcast). */
  const size_t gathers[] = {65536, SHARED_NT_BYTES / 12, 131072}, bcasts[] = {196608, SHARED_NT_BYTES / 4, 262144};
  const size_t *counts = gather ? gathers : bcasts;
  size_t most = SHARED_NT_BYTES / 4;
  float *buf = filled(rank, most), *out = guardAlloc(most * sizeof(float));
  if (rank == 1) EXPECT(denyCma() == 0, "seccomp: %s", strerror(errno));
  NCCLCHECK(ncclAllReduce(out, out, 1, ncclFloat, ncclMax, comm, NULL)); /* the filter is in place */
  ncclResult_t res = ncclSuccess;
  for (int k = 0; k < 3; k++) {
    size_t c = counts[k];
    res = gather ? ncclAllGather(buf, out, c, ncclFloat, comm, NULL) : ncclBroadcast(buf, out, c, ncclFloat, 0, comm, NULL);
    if (k == 2) break;
    EXPECT(res == ncclSuccess, "rank %d: the %zu-byte %s failed: %s", rank, c * sizeof(float) * (gather ? n : 1),
           gather ? "AllGather" : "Broadcast", ncclGetLastError(comm));
    for (int r = 0; r < (gather ? n : 1); r++)
      if (checkFrom(out + (size_t)r * c, r, 0, c, gather ? "AllGather" : "Broadcast", rank)) return 1;
  }
  EXPECT(res != ncclSuccess, "rank %d: the %s %s succeeded: rank 1 did not read its peer's buffer", rank,
         gather ? "1.5 MiB" : "1 MiB", gather ? "AllGather" : "Broadcast");
  NCCLCHECK(ncclCommAbort(comm));
  EXPECT(guardCheck(buf) == 0 && guardCheck(out) == 0, "rank %d: guard bytes overwritten", rank);
  guardFree(buf);
  guardFree(out);
  return 0;
}

/* Removes the logs of logPerProcess: the ranks' (their pids in shared[1 +
 * rank]) and this process's, and their directory. */
static void removeLogs(int nranks) {
  char path[128];
  for (int r = 0; r <= nranks; r++) {
    snprintf(path, sizeof path, "%s/log.%d", logDir, r < nranks ? (int)shared[1 + r] : (int)getpid());
    unlink(path);
  }
  rmdir(logDir);
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  /* Every size here takes single copy, unless a case says otherwise. */
  setenv("CHORUS_SINGLE_COPY", "1", 1);
  setenv("CHORUS_TIMEOUT", "5", 1); /* an error that comes from the timeout is too late (each must come in 2 s) */
  shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 1;
  int failed;
  if (!strcmp(c, "mixed")) {
    /* Logging starts with the first call (the parent's unique id). */
    if (logPerProcess(logDir, "singlecopy", "SHM")) return 1;
    failed = runRanks(4, mixedRank, NULL, 60);
    removeLogs(4);
  } else if (!strcmp(c, "held")) {
    setenv("NCCL_MAX_NCHANNELS", "1", 1);
    failed = runRanks(3, heldRank, NULL, 60);
  } else if (!strcmp(c, "revoked")) {
    failed = runRanks(3, revokedRank, NULL, 60);
  } else if (!strcmp(c, "deadreader")) {
    int leaves = 0;
    failed = runRanks(2, deadReaderRank, &leaves, 60) != 1; /* the victim counts as failed (killed) */
    leaves = 1; /* the reader destroys its communicator instead */
    failed |= runRanks(2, deadReaderRank, &leaves, 60) != 0;
  } else if (!strcmp(c, "nowrite")) {
    setenv("CHORUS_CMA_SPLIT", "1", 1);
    if (logPerProcess(logDir, "singlecopy", "SHM")) return 1;
    failed = runRanks(3, noWriteRank, NULL, 60);
    removeLogs(3);
  } else if (!strcmp(c, "deadsender")) {
    setenv("CHORUS_CMA_SPLIT", "1", 1);
    int inWrite = 0;
    failed = runRanks(2, deadRootRank, &inWrite, 60) != 1; /* the victim counts as failed (killed) */
  } else if (!strcmp(c, "claimdeath")) {
    setenv("CHORUS_CMA_SPLIT", "1", 1);
    int inWrite = 1;
    failed = runRanks(2, deadRootRank, &inWrite, 60) != 1;
  } else if (!strcmp(c, "stuckwriter") || !strcmp(c, "stuckabort")) {
    setenv("CHORUS_CMA_SPLIT", "1", 1);
    int abortIt = !strcmp(c, "stuckabort");
    failed = runRanks(2, stuckRootRank, &abortIt, 60) != 1; /* rank 0 counts as failed (killed) */
  } else if (!strcmp(c, "autopair")) {
    unsetenv("CHORUS_SINGLE_COPY");
    int gather = 0;
    failed = runRanks(2, autoPairRank, &gather, 60);
    gather = 1;
    failed |= runRanks(2, autoPairRank, &gather, 60);
  } else if (!strcmp(c, "auto")) {
    unsetenv("CHORUS_SINGLE_COPY");
    setenv("CHORUS_NT_STORES", "4096", 1);
    failed = runRanks(2, autoRank, NULL, 60);
  } else if (!strcmp(c, "autoshared")) {
    unsetenv("CHORUS_SINGLE_COPY");
    setenv("CHORUS_NT_STORES", "4194312", 1); /* SHARED_NT_BYTES */
    if (pinToCpu(sched_getcpu() < 0 ? 0 : sched_getcpu()) != 0) { /* the ranks inherit it: 3 ranks on one CPU */
      perror("pinToCpu");
      return 1;
    }
    int gather = 1;
    failed = runRanks(3, autoSharedRank, &gather, 60);
    gather = 0;
    failed |= runRanks(3, autoSharedRank, &gather, 60);
  } else if (!strcmp(c, "off")) {
    failed = runRanks(3, offRank, NULL, 60);
  } else {
    fprintf(stderr, "usage: test_singlecopy mixed|held|revoked|deadreader|nowrite|deadsender|claimdeath|stuckwriter|stuckabort|off|auto|autopair|autoshared\n");
    return 2;
  }
  printf("test_singlecopy %s: %s\n", c, failed ? "FAILED" : "passed");
  return failed != 0;
}
