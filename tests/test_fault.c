/* Faults end in errors, never hangs:
 *   kill     - a rank SIGKILLs itself mid-run; every survivor's call returns
 *              ncclRemoteError within 2 s, naming the dead rank; later calls too.
 *   abort    - ncclCommAbort from a second thread ends a blocked call within 100 ms.
 *   peerabort- a peer that calls ncclCommAbort is gone for the others (ncclRemoteError).
 *   timeout  - a rank that never shows up makes the others return ncclTimeout
 *              after CHORUS_TIMEOUT.
 *   skip     - a rank skips a collective: the others' timeout names it, "last
 *              completed #1 and is in no call" (asked out of band).
 *   stop     - the same with the rank SIGSTOPped: "does not answer".
 *   commtimeout - skip, with chorusCommSetTimeout(700 ms) and CHORUS_TIMEOUT
 *              at its default: the communicator's own timeout holds.
 *   destroyed / finalized - a rank destroys (finalizes) its communicator
 *              while the others wait for it in a collective, and in a large
 *              send: they fail within 1 s, naming it (CHORUS_TIMEOUT 600).
 *   shm      - nothing is left in /dev/shm after a SIGKILL.
 *   busy     - a receiver busy (outside chorus) for longer than half of
 *              CHORUS_TIMEOUT, with its communicator's own timeout longer
 *              still: a 64 MiB Send to it succeeds with the right data (over
 *              sockets the kernel must not give up on a full window).
 *   leftdiag - a rank destroys its communicator and exits, another skips a
 *              Recv's peer: the timeout's diagnosis says the first
 *              "destroyed its communicator", the second is in no call.
 *   linkbreak- over sockets, rank 0's data connection to rank 1 breaks (shut
 *              down under the library) while both live: every rank fails
 *              within 2 s, and rank 2 learns which connection broke, not
 *              that rank 0 or 1 left.
 *   forkchild- a rank forks a child after init (a DataLoader worker) and is
 *              SIGKILLed while the child lives on: the child holds none of
 *              its sockets, and the survivors fail within 2 s naming it
 *              (CHORUS_TIMEOUT 5, which they waited out before).
 *   heldsockets - the same with a child forked by the raw system call (no
 *              fork handlers run), which keeps the rank's sockets open:
 *              its peers on the host see its pid exit instead (by pidfd,
 *              and by kill(pid, 0) where pidfd_open fails).
 *   test_fault <case> */
#define _GNU_SOURCE
#include <dirent.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* tcp_info with tcpi_bytes_acked (glibc's is older) */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

static double *shared; /* [0]: when the victim died */

static int killRank(int rank, int n, ncclUniqueId id, void *arg) {
  int victim = n / 2;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t count = 1 << 20;
  float *buf = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) buf[i] = 1;
  for (int iter = 0;; iter++) {
    if (rank == victim && iter == 20) {
      shared[0] = nowSec();
      raise(SIGKILL);
    }
    double t0 = nowSec();
    ncclResult_t res = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, NULL);
    if (res == ncclSuccess) continue;
    double t = nowSec(), sinceDeath = t - shared[0];
    EXPECT(res == ncclRemoteError, "rank %d: got %s", rank, ncclGetErrorString(res));
    EXPECT(shared[0] > 0 && sinceDeath < 2.0, "rank %d: error %.3f s after the death (call began %.3f s before)", rank,
           sinceDeath, t - t0);
    char want[32];
    snprintf(want, sizeof want, "rank %d", victim);
    EXPECT(strstr(ncclGetLastError(comm), want) != NULL, "last error '%s' does not name %s", ncclGetLastError(comm), want);
    /* ... and only it as gone: survivors that aborted when they learnt of
     * it are not blamed (a slower survivor learns from their relay). */
    const char *err = ncclGetLastError(comm), *gone = strstr(err, "reported: ");
    gone = gone ? gone + strlen("reported: ") : err;
    const char *end = strstr(gone, " exited");
    int named = 0;
    for (const char *p = strstr(gone, "rank "); p && (!end || p < end); p = strstr(p + 5, "rank ")) named++;
    EXPECT(named == 1, "rank %d: last error '%s' names %d ranks as gone, not rank %d alone", rank, err, named, victim);
    ncclResult_t async;
    NCCLCHECK(ncclCommGetAsyncError(comm, &async));
    EXPECT(async == ncclRemoteError, "async error %s", ncclGetErrorString(async));
    res = ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, comm, NULL);
    EXPECT(res == ncclRemoteError, "later call returned %s", ncclGetErrorString(res));
    fprintf(stderr, "rank %d: ncclRemoteError %.0f ms after rank %d died\n", rank, sinceDeath * 1e3, victim);
    faultTime("kill -9 of a rank inside a collective", res, sinceDeath * 1e3);
    NCCLCHECK(ncclCommAbort(comm));
    free(buf);
    return 0;
  }
}

struct abortArg {
  ncclComm_t comm;
  double when;
};
static void *aborter(void *p) {
  struct abortArg *a = p;
  usleep(300000);
  a->when = nowSec();
  ncclCommAbort(a->comm);
  return NULL;
}

static int abortRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (rank == 1) { /* never joins the collective; leaves after rank 0 has aborted */
    usleep(1500000);
    NCCLCHECK(ncclCommDestroy(comm));
    return 0;
  }
  struct abortArg a = {comm, 0};
  pthread_t t;
  pthread_create(&t, NULL, aborter, &a);
  float x = 1, y;
  ncclResult_t res = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL);
  double end = nowSec();
  pthread_join(t, NULL);
  EXPECT(res != ncclSuccess, "aborted call succeeded");
  EXPECT(end - a.when < 0.1, "call returned %.0f ms after the abort", (end - a.when) * 1e3);
  fprintf(stderr, "rank 0: call returned %s %.1f ms after ncclCommAbort\n", ncclGetErrorString(res), (end - a.when) * 1e3);
  faultTime("ncclCommAbort from a second thread during a collective", res, (end - a.when) * 1e3);
  return 0;
}

static int timeoutRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (rank == n - 1) { /* stalls without calling */
    usleep(3500000);
    NCCLCHECK(ncclCommAbort(comm));
    return 0;
  }
  float x = 1, y;
  double t0 = nowSec();
  ncclResult_t res = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL);
  double t = nowSec() - t0;
  EXPECT(res == ncclTimeout, "got %s", ncclGetErrorString(res));
  EXPECT(t >= 0.7 && t < 1.25, "timed out after %.2f s with CHORUS_TIMEOUT=1", t);
  faultTime("a rank never calls the collective (CHORUS_TIMEOUT=1)", res, t * 1e3);
  /* Stay until the stalled rank is back: an early abort here would make the
   * other waiting ranks see this one gone (ncclRemoteError) before their own
   * timeout. */
  usleep((useconds_t)((3.5 - t) * 1e6));
  NCCLCHECK(ncclCommAbort(comm));
  return 0;
}

/* A rank that skips a collective (busy elsewhere) or is stopped (SIGSTOP):
 * the others time out, and their WARN names it and where it is. */
static int commTimeout; /* commtimeout: the communicator's own 700 ms */

static int skipRank(int rank, int n, ncclUniqueId id, void *arg) {
  int stop = arg != NULL;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (commTimeout) {
    EXPECT(chorusCommSetTimeout(comm, -1) == ncclInvalidArgument, "a negative timeout was accepted");
    NCCLCHECK(chorusCommSetTimeout(comm, 700));
  }
  float x = 1, y;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL)); /* #1, together */
  if (rank == n - 1) {
    shared[1] = getpid();
    if (stop) raise(SIGSTOP); /* rank 0 sends SIGCONT once it has its diagnosis */
    else usleep(3000000);   /* in no call */
    NCCLCHECK(ncclCommAbort(comm));
    return 0;
  }
  double t0 = nowSec();
  ncclResult_t res = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL); /* #2 */
  double t = nowSec() - t0;
  EXPECT(res == ncclTimeout, "rank %d got %s", rank, ncclGetErrorString(res));
  if (commTimeout) EXPECT(t >= 0.45 && t < 0.9, "rank %d: timed out after %.2f s with a 700 ms timeout", rank, t);
  else EXPECT(t >= 0.7 && t < 1.25, "rank %d: timed out after %.2f s with CHORUS_TIMEOUT=1", rank, t);
  const char *err = ncclGetLastError(comm);
  fprintf(stderr, "rank %d: %s after %.2f s: %s\n", rank, ncclGetErrorString(res), t, err);
  faultTime(stop ? "SIGSTOP of a rank (CHORUS_TIMEOUT=1)"
                 : commTimeout ? "a rank skips a collective (chorusCommSetTimeout 700 ms)"
                               : "a rank skips a collective (CHORUS_TIMEOUT=1)", res, t * 1e3);
  char want[64];
  snprintf(want, sizeof want, "rank %d (host", n - 1);
  EXPECT(strstr(err, commTimeout ? "AllReduce #2 (count=1, float, sum) timed out after 0.7 s"
                                  : "AllReduce #2 (count=1, float, sum) timed out after 1 s") && strstr(err, want) &&
             strstr(err, stop ? "does not answer" : "last completed #1 and is in no call"),
         "rank %d: last error '%s'", rank, err);
  if (n > 2) EXPECT(strstr(err, "all others wait in AllReduce #2"), "rank %d: last error '%s'", rank, err);
  /* Stay until the others have their diagnosis too: an abort now would look
   * like a dead rank to them. */
  usleep(1500000);
  if (stop && rank == 0) kill((pid_t)shared[1], SIGCONT);
  usleep(500000);
  NCCLCHECK(ncclCommAbort(comm));
  return 0;
}

/* A rank that aborts (and stays alive) is gone for its peers: their calls
 * end with ncclRemoteError naming it, not a wait for the timeout. */
static int peerAbortRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (rank == 1) {
    usleep(200000);
    shared[0] = nowSec();
    NCCLCHECK(ncclCommAbort(comm));
    usleep(3000000);
    return 0;
  }
  float x = 1, y;
  ncclResult_t res = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL);
  double after = nowSec() - shared[0];
  EXPECT(res == ncclRemoteError, "rank %d got %s", rank, ncclGetErrorString(res));
  EXPECT(after < 2.0, "rank %d: error %.2f s after the abort", rank, after);
  faultTime("a peer calls ncclCommAbort (and lives on)", res, after * 1e3);
  EXPECT(strstr(ncclGetLastError(comm), "rank 1") != NULL, "last error '%s'", ncclGetLastError(comm));
  NCCLCHECK(ncclCommAbort(comm));
  return 0;
}

/* A rank leaves (destroy or finalize) while the others wait for it. */
static int p2pDepart;
/* The others call only once the leaver has gone (destroyed, exited, its
 * connections closed): it said goodbye, so they still say it destroyed its
 * communicator, not that it died. */
static int lateDepart;

static int departRank(int rank, int n, ncclUniqueId id, void *arg) {
  int finalize = arg != NULL;
  if (rank == 0) __atomic_store_n((long *)&shared[4], 0, __ATOMIC_SEQ_CST); /* (before any error: #1 is together) */
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x = 1, y;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL)); /* #1, together */
  int leaver = n - 1;
  if (rank == leaver) {
    if (!lateDepart) usleep(200000); /* the others are waiting by now */
    shared[0] = nowSec();
    if (finalize) {
      NCCLCHECK(ncclCommFinalize(comm));
      usleep(1500000);
    }
    NCCLCHECK(ncclCommDestroy(comm));
    return 0;
  }
  /* p2p: a send of 16 MiB to the leaver, more than its FIFO holds */
  size_t count = 4 << 20;
  float *big = calloc(count, sizeof(float));
  if (lateDepart) usleep(300000);
  double t0 = nowSec();
  ncclResult_t res = p2pDepart ? ncclSend(big, count, ncclFloat, leaver, comm, NULL)
                               : ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL);
  double after = nowSec() - shared[0];
  free(big);
  EXPECT(res == ncclRemoteError, "rank %d got %s after %.2f s", rank, ncclGetErrorString(res), nowSec() - t0);
  EXPECT(after < 1.0, "rank %d: the error came %.2f s after rank %d left", rank, after, leaver);
  const char *err = ncclGetLastError(comm);
  char want[160];
  snprintf(want, sizeof want, "rank %d (host", leaver);
  EXPECT(strstr(err, want) && strstr(err, finalize ? "finalized its communicator" : "destroyed its communicator"),
         "rank %d: last error '%s'", rank, err);
  /* in a ring, a rank that waited on another (which saw the leaver) gets that rank's report */
  snprintf(want, sizeof want, "waited for it in %s", p2pDepart ? "Send #1" : "AllReduce #2");
  EXPECT(strstr(err, want), "rank %d: last error '%s' does not say '%s'", rank, err, want);
  fprintf(stderr, "rank %d: %.0f ms after the peer left: %s\n", rank, after * 1e3, err);
  faultTime(finalize ? "a peer finalizes while others wait for it" : "a peer destroys while others wait for it", res,
            after * 1e3);
  /* Every waiter has its error before any exits: a waiter that learns late
   * (descheduled) would otherwise rightly name the first one that exited. */
  long *told = (long *)&shared[4];
  __atomic_add_fetch(told, 1, __ATOMIC_SEQ_CST);
  for (double t1 = nowSec(); __atomic_load_n(told, __ATOMIC_SEQ_CST) < n - 1 && nowSec() - t1 < 10;) usleep(1000);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int busyRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  NCCLCHECK(chorusCommSetTimeout(comm, 20000)); /* as torch's group timeout does */
  size_t count = 16 << 20;
  float *buf = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) buf[i] = rank == 0 ? (float)(i % 1000) : -1;
  double t0 = nowSec();
  ncclResult_t res;
  if (rank == 0) res = ncclSend(buf, count, ncclFloat, 1, comm, NULL);
  else {
    usleep(2500000); /* CHORUS_TIMEOUT is 2 */
    res = ncclRecv(buf, count, ncclFloat, 0, comm, NULL);
  }
  EXPECT(res == ncclSuccess, "rank %d: %s after %.2f s: %s", rank, ncclGetErrorString(res), nowSec() - t0,
         ncclGetLastError(comm));
  for (size_t i = 0; rank == 1 && res == ncclSuccess && i < count; i++)
    if (buf[i] != (float)(i % 1000)) {
      EXPECT(0, "element %zu: %g", i, buf[i]);
      break;
    }
  free(buf);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int leftDiagRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x = 1, y;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL)); /* #1, together */
  if (rank == 2) {
    NCCLCHECK(ncclCommDestroy(comm));
    return 0;
  }
  if (rank == 1) { /* in no call until rank 0 has its diagnosis */
    usleep(2500000);
    NCCLCHECK(ncclCommAbort(comm));
    return 0;
  }
  usleep(300000); /* rank 2 is gone by now */
  ncclResult_t res = ncclRecv(&y, 1, ncclFloat, 1, comm, NULL);
  const char *err = ncclGetLastError(comm);
  EXPECT(res == ncclTimeout, "got %s", ncclGetErrorString(res));
  EXPECT(strstr(err, "rank 1 (host") && strstr(err, "is in no call") && strstr(err, "rank 2 (host") &&
             strstr(err, "destroyed its communicator") && !strstr(err, "does not answer"),
         "last error '%s'", err);
  NCCLCHECK(ncclCommAbort(comm));
  return 0;
}

/* The sockets this process holds (mesh, transport, listeners). */
static int countSockets(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    char path[300], link[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, link, sizeof link - 1);
    n += len > 7 && strncmp(link, "socket:", 7) == 0;
  }
  if (d) closedir(d);
  return n;
}

/* forkchild: shared[2] the child's pid, shared[3] 1 + the sockets of its
 * parent's communicator the child still holds (0: not counted yet).
 * heldsockets (arg not NULL): the child comes from the raw fork system
 * call, which runs no fork handlers: it holds them all. */
static int noPidfd; /* heldsockets: pidfd_open fails (ENOSYS) in every rank */

static int forkChildRank(int rank, int n, ncclUniqueId id, void *arg) {
  int raw = arg != NULL;
  int victim = n - 1, before = countSockets();
  EXPECT(!noPidfd || denyPidfd() == 0, "cannot deny pidfd_open");
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x = 1, y;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL)); /* #1: every connection up */
  if (rank == victim) {
    pid_t child = raw ? (pid_t)syscall(SYS_fork) : fork();
    if (child == 0) { /* lives on after its parent, up to 6 s: rank 0 ends it */
      shared[3] = raw ? 1 : 1 + countSockets() - before; /* (no allocation after a raw fork) */
      for (int i = 0; i < 60; i++) usleep(100000);
      _exit(0);
    }
    shared[2] = child;
    while (shared[3] == 0) usleep(1000);
    usleep(100000); /* the others wait in #2 */
    shared[0] = nowSec();
    raise(SIGKILL);
  }
  ncclResult_t res = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL); /* #2 */
  double after = nowSec() - shared[0];
  const char *err = ncclGetLastError(comm);
  char want[32];
  snprintf(want, sizeof want, "rank %d (host", victim);
  EXPECT(res == ncclRemoteError && after < 2.0 && strstr(err, want),
         "rank %d: %s %.2f s after rank %d died (its forked child alive): %s", rank, ncclGetErrorString(res), after,
         victim, err);
  fprintf(stderr, "rank %d: %.0f ms after the death: %s\n", rank, after * 1e3, err);
  faultTime(raw ? "kill -9 of a rank whose child holds its sockets" : "kill -9 of a rank whose forked child lives on",
            res, after * 1e3);
  if (rank == 0) {
    EXPECT(shared[3] == 1, "the forked child held %d of its parent's communicator's sockets", (int)shared[3] - 1);
    kill((pid_t)shared[2], SIGKILL);
  }
  NCCLCHECK(ncclCommAbort(comm));
  return 0;
}

/* Rank 0's socket that has sent the most: its data connection to the next
 * rank of the ring (the bootstrap's connections carry little). */
static int busiestSocket(void) {
  int best = -1;
  unsigned long long most = 0;
  for (int fd = 3; fd < 1024; fd++) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) continue;
    if (ti.tcpi_bytes_acked > most) {
      most = ti.tcpi_bytes_acked;
      best = fd;
    }
  }
  return most > (8u << 20) ? best : -1;
}

static int linkBreakRank(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  size_t count = 1 << 20;
  float *buf = malloc(count * sizeof(float));
  for (size_t i = 0; i < count; i++) buf[i] = 1;
  ncclResult_t res = ncclSuccess;
  for (int iter = 0; iter < 1000 && res == ncclSuccess; iter++) {
    if (rank == 0 && iter == 10) {
      int fd = busiestSocket();
      EXPECT(fd >= 0, "no data socket found");
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
      shared[0] = nowSec();
    }
    res = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, NULL);
  }
  double after = nowSec() - shared[0];
  const char *err = ncclGetLastError(comm);
  EXPECT(res == ncclRemoteError, "rank %d got %s", rank, ncclGetErrorString(res));
  EXPECT(after < 2.0, "rank %d: error %.2f s after the break", rank, after);
  EXPECT(strstr(err, "lost its connection") && !strstr(err, "exited"), "rank %d: last error '%s'", rank, err);
  fprintf(stderr, "rank %d: %.0f ms after the break: %s\n", rank, after * 1e3, err);
  faultTime("a data connection breaks, both ends alive (sockets)", res, after * 1e3);
  usleep(1000000); /* alive until every rank has its error */
  NCCLCHECK(ncclCommAbort(comm));
  free(buf);
  return 0;
}

static int countShm(void) {
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "kill";
  shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int failed;
  if (strcmp(which, "kill") == 0) {
    int before = countShm();
    failed = 0;
    for (int n = 2; n <= 4; n++) {
      shared[0] = 0;
      /* The victim counts as failed (killed); every survivor must pass. */
      failed += runRanks(n, killRank, NULL, 30) != 1;
    }
    int after = countShm();
    if (after != before) {
      fprintf(stderr, "/dev/shm had %d entries before and %d after\n", before, after);
      failed++;
    }
  } else if (strcmp(which, "abort") == 0) {
    failed = runRanks(2, abortRank, NULL, 30);
  } else if (strcmp(which, "peerabort") == 0) {
    failed = runRanks(3, peerAbortRank, NULL, 30);
  } else if (strcmp(which, "destroyed") == 0 || strcmp(which, "finalized") == 0) {
    void *finalize = which[0] == 'f' ? shared : NULL;
    failed = runRanks(2, departRank, finalize, 30) + runRanks(4, departRank, finalize, 30);
    p2pDepart = 1;
    failed += runRanks(2, departRank, finalize, 30);
    if (!finalize) { /* a finalized leaver stays (its destroy comes later) */
      p2pDepart = 0;
      lateDepart = 1;
      failed += runRanks(2, departRank, NULL, 30) + runRanks(4, departRank, NULL, 30);
    }
  } else if (strcmp(which, "busy") == 0) {
    setenv("CHORUS_TIMEOUT", "2", 1);
    failed = runRanks(2, busyRank, NULL, 30);
  } else if (strcmp(which, "leftdiag") == 0) {
    setenv("CHORUS_TIMEOUT", "1", 1);
    failed = runRanks(3, leftDiagRank, NULL, 30);
  } else if (strcmp(which, "linkbreak") == 0) {
    setenv("CHORUS_TIMEOUT", "20", 1); /* an error must come from the break, not a stall */
    shared[0] = 1e30;
    failed = runRanks(3, linkBreakRank, NULL, 30);
  } else if (strcmp(which, "forkchild") == 0 || strcmp(which, "heldsockets") == 0) {
    setenv("CHORUS_TIMEOUT", "5", 1); /* a death nobody sees fails in 5 s */
    failed = 0;
    for (int n = 2; n <= 3; n++) {
      shared[0] = 1e30;
      shared[2] = shared[3] = 0;
      /* the victim counts as failed (killed) */
      failed += runRanks(n, forkChildRank, which[0] == 'h' ? shared : NULL, 30) != 1;
    }
    if (which[0] == 'h') { /* watched with kill(pid, 0) */
      noPidfd = 1;
      shared[0] = 1e30;
      shared[2] = shared[3] = 0;
      failed += runRanks(3, forkChildRank, shared, 30) != 1;
    }
  } else if (strcmp(which, "commtimeout") == 0) {
    unsetenv("CHORUS_TIMEOUT");
    commTimeout = 1;
    failed = runRanks(2, skipRank, NULL, 30) + runRanks(4, skipRank, NULL, 30);
  } else if (strcmp(which, "skip") == 0 || strcmp(which, "stop") == 0) {
    setenv("CHORUS_TIMEOUT", "1", 1);
    failed = runRanks(2, skipRank, which[1] == 't' ? shared : NULL, 30);
    failed += runRanks(4, skipRank, which[1] == 't' ? shared : NULL, 30);
  } else {
    setenv("CHORUS_TIMEOUT", "1", 1);
    failed = runRanks(3, timeoutRank, NULL, 30);
  }
  printf("test_fault %s: %s\n", which, failed ? "FAILED" : "passed");
  return failed != 0;
}
