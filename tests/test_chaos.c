/* Faults at more places, each ending in an error within its bound on every
 * surviving rank (a hang fails the harness deadline):
 *   killinit    - a rank SIGKILLs itself at a random moment of init: the
 *                 others' init fails (CHORUS_TIMEOUT=3: within 4 s), or
 *                 when init was over, their calls fail within 2 s
 *   killcheckedin - a rank dies after checking in at the root, before the
 *                 others meet: their init fails within 2 s naming it
 *   killgroup   - a rank dies inside a group of collectives and sends: the
 *                 others' ncclGroupEnd returns ncclRemoteError within 2 s
 *   killdestroy - a rank dies during ncclCommDestroy: the others' destroy
 *                 returns within 1 s
 *   asyncdead   - a rank dies while the others are in no call:
 *                 ncclCommGetAsyncError says ncclRemoteError within 2 s
 *   abortgroup  - ncclCommAbort from a second thread while ncclGroupEnd
 *                 waits for a peer that never comes: returns within 1 s
 *   abortdead   - ncclCommAbort after a peer died: returns within 1 s
 *   streamtimeout - 600 calls on a stream behind one that times out all
 *                 fail within 1.5 s (CHORUS_TIMEOUT=1), not one by one
 *   flood       - 300 connections at the root (silent ones, garbage, a
 *                 hello with the secret but absurd sizes) held open while
 *                 4 ranks meet there: init and an AllReduce within 1 s
 *   test_chaos <case> [repeats]      Prints "<case> rank R: <ms> ms". */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/wire.h"
#include "chorus.h"
#include "harness.h"

static volatile double *shared; /* [0]: when the fault happened; [1]: random delay; [2]: flood done; [3]: a pid;
                                  * [4]: ranks that have seen the fault (asyncdead) */
static const char *which;

static int report(int rank, double ms, double bound, const char *what, ncclResult_t res) {
  fprintf(stderr, "%s rank %d: %.1f ms\n", which, rank, ms);
  faultTime(what, res, ms);
  EXPECT(ms < bound * 1e3, "rank %d: %s took %.0f ms (bound %.0f s)", rank, what, ms, bound);
  return 0;
}

static void *killer(void *arg) {
  usleep((useconds_t)(shared[1] * 1e6));
  shared[0] = nowSec();
  raise(SIGKILL);
  return arg;
}

static int killInitRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  if (rank == n - 1) { /* dies somewhere inside init, or just after */
    pthread_t t;
    pthread_create(&t, NULL, killer, NULL);
    ncclCommInitRank(&comm, n, id, rank);
    for (;;) pause();
  }
  double t0 = nowSec();
  ncclResult_t res = ncclCommInitRank(&comm, n, id, rank);
  if (res != ncclSuccess) /* a timeout when it died before reaching the root */
    return report(rank, (nowSec() - t0) * 1e3, 4.0, "kill -9 during init (CHORUS_TIMEOUT=3)", res);
  /* Init was over before the death: the next calls fail once it happens. */
  float x = 1;
  while (res == ncclSuccess && nowSec() < t0 + 10) res = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL);
  EXPECT(res == ncclRemoteError, "rank %d: AllReduce after the death got %s", rank, ncclGetErrorString(res));
  ncclCommAbort(comm);
  return report(rank, (nowSec() - shared[0]) * 1e3, 2.0, "kill -9 just after init: the next call", res);
}

/* Rank 1 of 3 checks in at the root, which waits for rank 2 (late), and
 * dies there; once rank 2 comes the others meet at the mesh, where rank 1
 * never shows: they must find it gone (its listener refuses) and name it,
 * not wait out CHORUS_TIMEOUT (20 s here) for it. */
static int killCheckedInRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  if (rank == 1) {
    pthread_t t;
    shared[1] = 0.3;
    pthread_create(&t, NULL, killer, NULL);
    ncclCommInitRank(&comm, n, id, rank); /* checked in, waits for the table */
    for (;;) pause();
  }
  if (rank == 2) usleep(700000);
  ncclResult_t res = ncclCommInitRank(&comm, n, id, rank);
  EXPECT(res == ncclRemoteError, "rank %d: init with rank 1 dead got %s", rank, ncclGetErrorString(res));
  EXPECT(strstr(ncclGetLastError(NULL), "rank 1 (host") != NULL, "rank %d: the error does not name rank 1: %s", rank,
         ncclGetLastError(NULL));
  return report(rank, (nowSec() - shared[0]) * 1e3, 2.0, "kill -9 after checking in (CHORUS_TIMEOUT=20)", res);
}

static int killGroupRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  static float a[4096], b[4096];
  for (int iter = 0;; iter++) {
    if (rank == n - 1 && iter == 3) {
      pthread_t t;
      pthread_create(&t, NULL, killer, NULL); /* dies inside the group below */
    }
    /* A call inside the group may already see the death (the communicator
     * knows it failed); ncclGroupEnd then reports it for the group. */
    ncclResult_t first = ncclSuccess;
    NCCLCHECK(ncclGroupStart());
    for (int k = 0; k < 3; k++) {
      ncclResult_t r = ncclAllReduce(a, b, 4096, ncclFloat, ncclSum, comm, NULL);
      if (first == ncclSuccess) first = r;
    }
    ncclResult_t r1 = ncclSend(a, 1024, ncclFloat, (rank + 1) % n, comm, NULL);
    ncclResult_t r2 = ncclRecv(b, 1024, ncclFloat, (rank + n - 1) % n, comm, NULL);
    if (first == ncclSuccess) first = r1 != ncclSuccess ? r1 : r2;
    ncclResult_t res = ncclGroupEnd();
    EXPECT(first == ncclSuccess || res == first, "rank %d: a call in the group got %s, ncclGroupEnd %s", rank,
           ncclGetErrorString(first), ncclGetErrorString(res));
    if (res == ncclSuccess) continue;
    EXPECT(res == ncclRemoteError, "rank %d: ncclGroupEnd got %s", rank, ncclGetErrorString(res));
    ncclCommAbort(comm);
    return report(rank, (nowSec() - shared[0]) * 1e3, 2.0, "kill -9 inside a group (ncclGroupEnd)", res);
  }
}

static int killDestroyRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x = 1;
  NCCLCHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL));
  if (rank == n - 1) {
    pthread_t t;
    pthread_create(&t, NULL, killer, NULL);
    ncclCommDestroy(comm);
    pause();
  }
  usleep((useconds_t)(shared[1] * 1e6));
  double t0 = nowSec();
  NCCLCHECK(ncclCommDestroy(comm));
  return report(rank, (nowSec() - t0) * 1e3, 1.0, "kill -9 during ncclCommDestroy: the others' destroy", ncclSuccess);
}

static int asyncDeadRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x = 1;
  NCCLCHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL));
  if (rank == n - 1) {
    shared[0] = nowSec();
    raise(SIGKILL);
  }
  ncclResult_t state = ncclSuccess;
  double end = nowSec() + 5;
  while (state == ncclSuccess && nowSec() < end) {
    usleep(1000);
    NCCLCHECK(ncclCommGetAsyncError(comm, &state));
  }
  EXPECT(state == ncclRemoteError, "rank %d: async error %s", rank, ncclGetErrorString(state));
  char want[32];
  snprintf(want, sizeof want, "rank %d", n - 1);
  EXPECT(strstr(ncclGetLastError(comm), want), "rank %d: last error '%s'", rank, ncclGetLastError(comm));
  double ms = (nowSec() - shared[0]) * 1e3;
  /* No survivor aborts (and looks dead itself) before every survivor has
   * seen the death: one that noticed late would name the aborted rank. */
  __atomic_add_fetch((volatile int *)&shared[4], 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n((volatile int *)&shared[4], __ATOMIC_SEQ_CST) < n - 1 && nowSec() < end) usleep(1000);
  ncclCommAbort(comm);
  return report(rank, ms, 2.0, "kill -9 while no call runs: ncclCommGetAsyncError", state);
}

struct aborter {
  ncclComm_t comm;
  double at;
};
static void *abortLater(void *p) {
  struct aborter *a = p;
  usleep(200000);
  a->at = nowSec();
  ncclCommAbort(a->comm);
  return NULL;
}

static int abortGroupRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (rank == n - 1) { /* never joins the group; leaves after the others' abort */
    usleep(1500000);
    ncclCommDestroy(comm);
    return 0;
  }
  /* Rank 0 is aborted from a second thread; the others in the group then see
   * it gone (their error is ncclRemoteError, not measured here). */
  struct aborter a = {comm, 0};
  pthread_t t;
  if (rank == 0) pthread_create(&t, NULL, abortLater, &a);
  static float v[1024];
  ncclGroupStart();
  ncclAllReduce(v, v, 1024, ncclFloat, ncclSum, comm, NULL);
  ncclBroadcast(v, v, 16, ncclFloat, 0, comm, NULL);
  ncclResult_t res = ncclGroupEnd();
  double end = nowSec();
  EXPECT(res != ncclSuccess, "rank %d: the group succeeded", rank);
  if (rank != 0) {
    ncclCommAbort(comm);
    return 0;
  }
  pthread_join(t, NULL);
  double ms = (end - a.at) * 1e3;
  return report(rank, ms, 1.0, "ncclCommAbort from a second thread inside a group", res);
}

static int abortDeadRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x = 1;
  NCCLCHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL));
  if (rank == n - 1) raise(SIGKILL);
  usleep(100000);
  double t0 = nowSec();
  NCCLCHECK(ncclCommAbort(comm));
  return report(rank, (nowSec() - t0) * 1e3, 1.0, "ncclCommAbort with a dead peer", ncclSuccess);
}

/* Rank 0 issues 600 AllReduces on a stream (more than a stream holds, so
 * the caller runs some itself) while rank 1 never calls: the first times
 * out (CHORUS_TIMEOUT=1) and every one behind it fails at once, so rank 0
 * learns it within the timeout and a half, not 600 timeouts later. */
static int streamTimeoutRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (rank == 1) { /* stopped: nobody answers rank 0's diagnosis either */
    shared[3] = getpid();
    raise(SIGSTOP);
    usleep(500000);
    ncclCommAbort(comm);
    return 0;
  }
  while (shared[3] == 0) usleep(1000);
  cudaStream_t s;
  NCCLCHECK(chorusStreamCreate(&s));
  float x = 1;
  double t0 = nowSec();
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < 600 && res == ncclSuccess; i++) res = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, s);
  ncclResult_t sync = chorusStreamSynchronize(s);
  double ms = (nowSec() - t0) * 1e3;
  EXPECT(sync == ncclTimeout || res == ncclTimeout, "stream gave %s, the last call %s", ncclGetErrorString(sync),
         ncclGetErrorString(res));
  NCCLCHECK(chorusStreamDestroy(s));
  kill((pid_t)shared[3], SIGCONT);
  ncclCommAbort(comm);
  return report(rank, ms, 1.5, "600 calls queued on a stream behind a timeout (CHORUS_TIMEOUT=1)", ncclTimeout);
}

static int floodRank(int rank, int n, ncclUniqueId id, void *arg) {
  /* Rank 0 may host the root (CHORUS_TEST_COMM_ID=1): it starts at once;
   * the others come once the strangers are all there. */
  for (int i = 0; rank > 0 && i < 5000 && shared[2] == 0; i++) usleep(1000);
  EXPECT(rank == 0 || shared[2] > 0, "rank %d: the strangers never came", rank);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x = 1;
  NCCLCHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL));
  EXPECT(x == n, "AllReduce gave %g", x);
  double ms = (nowSec() - shared[2]) * 1e3;
  NCCLCHECK(ncclCommDestroy(comm));
  return report(rank, ms, 1.0, "300 strangers at the root: init and one AllReduce", ncclSuccess);
}

/* A process that opens 300 connections to the root of id (silent ones,
 * garbage, a hello with the secret but absurd sizes), says when they are
 * all open, and holds them until it is killed. */
static pid_t flooder(ncclUniqueId id) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid != 0) return pid;
  struct bootstrapHandle h;
  memcpy(&h, id.internal, sizeof h);
  socklen_t len = h.addr.sa.sa_family == AF_INET6 ? sizeof h.addr.sin6 : sizeof h.addr.sin;
  double end = nowSec() + 10;
  for (int i = 0; i < 300 && nowSec() < end; i++) {
    int s = socket(h.addr.sa.sa_family, SOCK_STREAM, 0);
    if (s < 0) _exit(1);
    if (connect(s, &h.addr.sa, len) != 0) { /* the root is not up yet */
      close(s);
      usleep(1000);
      i--;
      continue;
    }
    if (i % 3 == 1) {
      char junk[300];
      memset(junk, 0x80 + i % 50, sizeof junk);
      if (write(s, junk, sizeof junk) < 0) perror("write");
    } else if (i % 3 == 2) {
      struct rootHello hello;
      memset(&hello, 0xff, sizeof hello);
      hello.secret = h.secret;
      hello.rank = i;
      hello.nranks = 0x7fffffff;
      if (write(s, &hello, sizeof hello) < 0) perror("write");
    }
  } /* every connection stays open: the process holds them until killed */
  shared[2] = nowSec();
  fprintf(stderr, "flood: 300 strangers at the root\n");
  pause();
  _exit(0);
}

int main(int argc, char **argv) {
  which = argc > 1 ? argv[1] : "killgroup";
  int repeats = argc > 2 ? atoi(argv[2]) : 1;
  srand((unsigned)getpid()); /* other moments each run */
  shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int failed = 0;
  for (int rep = 0; rep < repeats; rep++) {
    shared[0] = 0;
    shared[1] = (rand() % 1000) / 1e5; /* 0 to 10 ms */
    *(volatile int *)&shared[4] = 0;
    if (strcmp(which, "killinit") == 0) {
      setenv("CHORUS_TIMEOUT", "3", 1);
      failed += runRanks(4, killInitRank, NULL, 30) != 1;
    } else if (strcmp(which, "killcheckedin") == 0) {
      setenv("CHORUS_TIMEOUT", "20", 1);
      failed += runRanks(3, killCheckedInRank, NULL, 30) != 1;
    } else if (strcmp(which, "streamtimeout") == 0) {
      setenv("CHORUS_TIMEOUT", "1", 1);
      shared[3] = 0;
      failed += runRanks(2, streamTimeoutRank, NULL, 30);
    } else if (strcmp(which, "killgroup") == 0) {
      failed += runRanks(4, killGroupRank, NULL, 30) != 1;
    } else if (strcmp(which, "killdestroy") == 0) {
      failed += runRanks(3, killDestroyRank, NULL, 30) != 1;
    } else if (strcmp(which, "asyncdead") == 0) {
      failed += runRanks(3, asyncDeadRank, NULL, 30) != 1;
    } else if (strcmp(which, "abortgroup") == 0) {
      failed += runRanks(3, abortGroupRank, NULL, 30);
    } else if (strcmp(which, "abortdead") == 0) {
      failed += runRanks(3, abortDeadRank, NULL, 30) != 1;
    } else if (strcmp(which, "flood") == 0) {
      ncclUniqueId id;
      if (testCommId(&id) != 0) return 1;
      shared[2] = 0;
      pid_t f = flooder(id);
      failed += runRanksWithId(4, id, floodRank, NULL, 30);
      kill(f, SIGKILL);
      waitpid(f, NULL, 0);
    } else {
      fprintf(stderr, "no case %s\n", which);
      return 2;
    }
  }
  printf("test_chaos %s: %s\n", which, failed ? "FAILED" : "passed");
  return failed != 0;
}
