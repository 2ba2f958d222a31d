/* Inconsistent init ends on every process at once: two processes claiming
 * the same rank, or ranks that disagree on nranks, get ncclInvalidUsage
 * from ncclCommInitRank, each with the root's explanation naming the ranks,
 * hosts and pids (in ncclGetLastError), instead of one of them failing and
 * the others waiting for the timeout. CHORUS_TIMEOUT is 3 s here: a rank
 * left waiting gets ncclTimeout, which fails the test. A rendezvous that
 * cannot complete (ranks that never come) times out on every rank that came,
 * each saying which ranks the root still waited for. A unique id used for a
 * second communicator is refused at once on every rank. A thread that
 * asked for a rank past nranks may try again with a good one; the other
 * ranks of its process are refused with the rest. Rank 0 may
 * retry a failed or aborted init on NCCL_COMM_ID's port at once. */
#include <dirent.h>
#include <pthread.h>
#include <regex.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

struct claim {
  int nranks, rank;
};
struct initCase {
  const char *name;
  int procs;
  struct claim claims[4];
  const char *expect; /* in every process's last error */
  ncclResult_t want;  /* ncclInvalidUsage, or ncclTimeout where a rank never comes */
  int reuse; /* the id makes a communicator first, then this init is its second use: 1 with the id's root in this
               process, 2 with it in another (which leaves its port closed), 3 as 1 but both uses in the same
               children, forked while the root listened (their copies of its socket must not keep it open) */
  int refuseMs; /* a refusal comes within this (0: 1000) */
};

/* An id whose root is another process (its child), which lives until
 * killed. */
static int idElsewhere(ncclUniqueId *id, pid_t *holder) {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  *holder = fork();
  if (*holder == 0) {
    ncclUniqueId mine;
    if (ncclGetUniqueId(&mine) != ncclSuccess || write(fds[1], &mine, sizeof mine) != sizeof mine) _exit(1);
    for (;;) pause();
  }
  close(fds[1]);
  ssize_t got = read(fds[0], id, sizeof *id);
  close(fds[0]);
  return got == sizeof *id ? 0 : 1;
}

/* NCCL_COMM_ID names a port another program holds: rank 0 cannot listen
 * there and fails at once; rank 1 reaches the program, hears nothing back
 * and says so within WIRE_CHECKIN_NS (3 s), not at its 8 s timeout. */
static int portTaken(int proc, int procs, ncclUniqueId unused, void *arg) {
  (void)unused;
  setenv("NCCL_COMM_ID", arg, 1);
  setenv("CHORUS_TIMEOUT", "8", 1);
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t comm;
  double t0 = nowSec();
  ncclResult_t res = ncclCommInitRank(&comm, procs, id, proc);
  double s = nowSec() - t0;
  const char *why = ncclGetLastError(NULL);
  fprintf(stderr, "port-taken: rank %d: %s after %.1f s: %s\n", proc, ncclGetErrorString(res), s, why);
  EXPECT(res != ncclSuccess, "rank %d joined a stranger", proc);
  const char *expect = proc == 0 ? "Address already in use" : "is not a chorus root";
  EXPECT(strstr(why, expect) != NULL, "rank %d's error lacks \"%s\"", proc, expect);
  EXPECT(s < (proc == 0 ? 1.0 : 6.0), "rank %d took %.1f s", proc, s);
  return 0;
}

/* A job with a CHORUS_SECRET on NCCL_COMM_ID's port, and a stranger that
 * comes first with the well-known secret, claiming rank 1: the root refuses
 * the stranger (and WARNs), the job completes undelayed: rank 1 within a
 * second of its arrival. */
static int strangerAtSecretJob(int proc, int procs, ncclUniqueId unused, void *arg) {
  (void)unused;
  (void)procs;
  int stranger = proc == 2;
  setenv("NCCL_COMM_ID", arg, 1);
  if (stranger) unsetenv("CHORUS_SECRET");
  else setenv("CHORUS_SECRET", "the job's own", 1);
  /* The stranger is there first; rank 0 hosts the root from 0.2 s, rank 1
   * comes at 0.7 s, so the stranger's retries meet the root meanwhile. */
  if (!stranger) usleep(proc == 0 ? 200000 : 700000);
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t comm;
  double t0 = nowSec();
  ncclResult_t res = ncclCommInitRank(&comm, 2, id, stranger ? 1 : proc);
  double s = nowSec() - t0;
  fprintf(stderr, "secret: %s %d: %s after %.2f s: %s\n", stranger ? "stranger" : "rank", proc,
          ncclGetErrorString(res), s, res == ncclSuccess ? "" : ncclGetLastError(NULL));
  if (stranger) {
    EXPECT(res != ncclSuccess, "a stranger with the well-known secret joined the job");
    return 0;
  }
  EXPECT(res == ncclSuccess && s < (proc == 1 ? 1.0 : 2.0), "rank %d: %s after %.2f s", proc, ncclGetErrorString(res), s);
  float x = 1;
  NCCLCHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL));
  EXPECT(x == 2, "allreduce gave %g", x);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* A rank that comes 4 s late, past the 3 s check-in window: the root's
 * check-in keeps the others waiting, as they should, with a timeout of
 * 30 s (arg) and with none ("0": until 2026-12-06 a rank that had checked
 * in gave up 3 s after its hello, the check-in's limit left in place). */
static int lateRank(int proc, int procs, ncclUniqueId id, void *arg) {
  setenv("CHORUS_TIMEOUT", arg, 1);
  if (proc == 1) usleep(4000000);
  ncclComm_t comm;
  ncclResult_t res = ncclCommInitRank(&comm, procs, id, proc);
  EXPECT(res == ncclSuccess, "late-rank: rank %d: %s: %s", proc, ncclGetErrorString(res), ncclGetLastError(NULL));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* The process that asked for a rank past nranks tries again with a good
 * one, as NCCL allows: the rendezvous completes, though its last rank comes
 * after the root's 2 s of grace for a retry. */
/* With arg, the retry is a nonblocking init, whose rendezvous runs on a
 * thread of its own: it is still the retry of the thread that called it
 * (until 2026-12-06 the root took it for another thread's, and refused
 * every rank). */
static int retryRank(int proc, int procs, ncclUniqueId id, void *arg) {
  ncclComm_t comm = NULL;
  if (proc == 2) usleep(2500000);
  if (proc == 1) {
    ncclResult_t res = ncclCommInitRank(&comm, procs, id, procs + 4);
    EXPECT(res == ncclInvalidArgument && comm == NULL, "retry: rank %d of %d gave %s", procs + 4, procs,
           ncclGetErrorString(res));
    usleep(500000); /* the root has the report by now */
  }
  double t0 = nowSec();
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = !(arg && proc == 1);
  ncclResult_t res = ncclCommInitRankConfig(&comm, procs, id, proc, &cfg);
  while (res == ncclInProgress && nowSec() - t0 < 15) {
    usleep(1000);
    ncclCommGetAsyncError(comm, &res);
  }
  EXPECT(res == ncclSuccess, "retry: rank %d: %s after %.2f s: %s", proc, ncclGetErrorString(res), nowSec() - t0,
         ncclGetLastError(NULL));
  int x = proc + 1;
  NCCLCHECK(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, NULL));
  EXPECT(x == procs * (procs + 1) / 2, "retry: rank %d: allreduce gave %d", proc, x);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* One process, a thread per rank: the thread of rank 2 asks for rank 3 of 3
 * first, then ranks 0 and 1 check in from their own threads. Theirs are not
 * a retry of the bad rank (until 2026-12-06 the root took any good hello of
 * the process for one, and ranks 0 and 1 waited for their timeout instead
 * of being refused, naming the bad rank, after the grace). */
struct threadClaim {
  ncclUniqueId id;
  int rank;
  ncclResult_t res;
  double ms;
  char why[512];
};
static void *threadClaimRun(void *arg) {
  struct threadClaim *c = arg;
  if (c->rank < 3) usleep(300000); /* after the bad rank's report */
  ncclComm_t comm = NULL;
  double t0 = nowSec();
  c->res = ncclCommInitRank(&comm, 3, c->id, c->rank);
  c->ms = (nowSec() - t0) * 1e3;
  snprintf(c->why, sizeof c->why, "%s", ncclGetLastError(NULL));
  if (comm) ncclCommDestroy(comm);
  return NULL;
}
static int threadClaims(int proc, int procs, ncclUniqueId id, void *arg) {
  (void)proc, (void)procs, (void)arg;
  struct threadClaim c[3] = {{id, 0, 0, 0, ""}, {id, 1, 0, 0, ""}, {id, 3, 0, 0, ""}};
  pthread_t t[3];
  for (int i = 0; i < 3; i++) EXPECT(pthread_create(&t[i], NULL, threadClaimRun, &c[i]) == 0, "a thread");
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  EXPECT(c[2].res == ncclInvalidArgument, "threads: the bad rank got %s", ncclGetErrorString(c[2].res));
  for (int i = 0; i < 2; i++) {
    fprintf(stderr, "threads: rank %d: %s after %.0f ms: %s\n", i, ncclGetErrorString(c[i].res), c[i].ms, c[i].why);
    EXPECT(c[i].res == ncclInvalidUsage && strstr(c[i].why, "asked for rank 3 of 3") && c[i].ms < 2500,
           "threads: rank %d got %s after %.0f ms: %s", i, ncclGetErrorString(c[i].res), c[i].ms, c[i].why);
  }
  return 0;
}

/* NCCL_COMM_ID: rank 0 fails its init, at its 1 s timeout (blocking) or
 * by ncclCommAbort 20 ms in (nonblocking, as a watchdog would), and tries
 * again on the same address at once, again and again, while rank 1 waits
 * at whichever root is up, for a third rank that never comes (each of
 * rank 0's roots would keep it 2 s past rank 0's timeout). No attempt may
 * find the port taken by the last one's root (until 2026-12-06 most did,
 * "Address already in use": the root kept its port until it saw every rank
 * leave). Then both meet for a communicator of 2 on the same address. */
static volatile int *retryGo; /* shared: 1 once rank 0's attempts are over, 2 once rank 1 has left its own */

static int commIdRetry(int proc, int procs, ncclUniqueId unused, void *arg) {
  (void)unused;
  setenv("NCCL_COMM_ID", arg, 1);
  setenv("CHORUS_TIMEOUT", proc == 0 ? "1" : "30", 1);
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t comm = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  if (proc == 0) {
    for (int i = 0; i < 4; i++) {
      ncclResult_t res = ncclCommInitRank(&comm, procs + 1, id, 0);
      const char *why = ncclGetLastError(NULL);
      EXPECT(res == ncclTimeout && !strstr(why, "Address already in use"), "commid-retry: blocking attempt %d: %s: %s",
             i, ncclGetErrorString(res), why);
    }
    for (int i = 0; i < 10; i++) {
      comm = NULL;
      ncclResult_t res = ncclCommInitRankConfig(&comm, procs + 1, id, 0, &cfg), async = ncclSuccess;
      usleep(20000);
      if (comm) ncclCommGetAsyncError(comm, &async);
      EXPECT(res == ncclInProgress && async == ncclInProgress, "commid-retry: aborted attempt %d: init %s, then %s: %s",
             i, ncclGetErrorString(res), ncclGetErrorString(async), ncclGetLastError(comm));
      double t0 = nowSec();
      NCCLCHECK(ncclCommAbort(comm));
      EXPECT(nowSec() - t0 < 1.0, "commid-retry: ncclCommAbort took %.2f s", nowSec() - t0);
    }
    *retryGo = 1;
    while (*retryGo != 2) usleep(10000);
  } else {
    while (!*retryGo) { /* rank 1 of 3, at whichever root is up, until rank 0 is done */
      ncclResult_t async = ncclInProgress;
      NCCLCHECK(ncclCommInitRankConfig(&comm, procs + 1, id, 1, &cfg) == ncclInProgress ? ncclSuccess : ncclInternalError);
      while (!*retryGo && async == ncclInProgress) {
        usleep(10000);
        ncclCommGetAsyncError(comm, &async);
      }
      NCCLCHECK(ncclCommAbort(comm));
    }
    *retryGo = 2;
  }
  setenv("CHORUS_TIMEOUT", "5", 1);
  NCCLCHECK(ncclCommInitRank(&comm, procs, id, proc));
  int x = proc + 1;
  NCCLCHECK(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, NULL));
  EXPECT(x == 3, "commid-retry: rank %d: allreduce gave %d", proc, x);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int initOnce(int proc, int procs, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, procs, id, proc));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int claimInit(int proc, int procs, ncclUniqueId id, void *arg) {
  const struct initCase *c = arg;
  struct claim me = c->claims[proc];
  ncclComm_t comm = NULL;
  double t0 = nowSec();
  ncclResult_t res = ncclCommInitRank(&comm, me.nranks, id, me.rank);
  double ms = (nowSec() - t0) * 1e3;
  const char *why = ncclGetLastError(NULL);
  fprintf(stderr, "%s: process %d (rank %d of %d): %s after %.0f ms: %s\n", c->name, proc, me.rank, me.nranks,
          ncclGetErrorString(res), ms, why);
  if (me.rank < 0 || me.rank >= me.nranks) { /* the process that asked for it: refused locally */
    EXPECT(res == ncclInvalidArgument && strstr(why, "Invalid rank requested") && ms < 2000,
           "%s: process %d (rank %d of %d): %s after %.0f ms", c->name, proc, me.rank, me.nranks,
           ncclGetErrorString(res), ms);
    return 0;
  }
  EXPECT(res == c->want, "%s: process %d got %s", c->name, proc, ncclGetErrorString(res));
  EXPECT(strstr(why, c->expect) != NULL, "%s: process %d's last error lacks \"%s\": %s", c->name, proc, c->expect,
         why);
  EXPECT(c->want != ncclInvalidUsage || c->reuse || strstr(why, " pid ") != NULL, "%s: process %d: no pid named: %s",
         c->name, proc, why);
  EXPECT(c->want != ncclInvalidUsage || ms < (c->refuseMs ? c->refuseMs : 1000), "%s: process %d took %.0f ms to refuse",
         c->name, proc, ms);
  faultTime(c->name, res, ms);
  return 0;
}

/* The id's first use, then claimInit's, in the same process. */
static int initThenClaim(int proc, int procs, ncclUniqueId id, void *arg) {
  int f = initOnce(proc, procs, id, NULL);
  return f ? f : claimInit(proc, procs, id, arg);
}

/* 1 when a log file in dir has a line with needle. */
static int logsHave(const char *dir, const char *needle) {
  int found = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && !found && (e = readdir(d));) {
    char path[600], line[1200];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = e->d_name[0] == '.' ? NULL : fopen(path, "r");
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return found;
}

/* The ranks' WARN lines have NCCL's shape, with the source file named
 * relative to src/ (no build path): host:pid:tid [rank] file:line NCCL WARN. */
static int warnLinesLikeNccl(const char *dir) {
  regex_t re;
  regcomp(&re, "^[^ :]+:[0-9]+:[0-9]+ \\[[0-9]+\\] bootstrap/bootstrap\\.c:[0-9]+ NCCL WARN Bootstrap : rank ",
          REG_EXTENDED | REG_NOSUB);
  int found = 0, bad = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    char path[600], line[1200];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = e->d_name[0] == '.' ? NULL : fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
      if (!strstr(line, "NCCL WARN")) continue;
      if (strstr(line, "/src/")) bad++;
      found += regexec(&re, line, 0, NULL, 0) == 0;
    }
    if (f) fclose(f);
  }
  if (d) closedir(d);
  regfree(&re);
  if (!found || bad) fprintf(stderr, "WARN lines: %d in NCCL's shape, %d naming a build path\n", found, bad);
  return !found || bad;
}

/* The test's parts, each alone with its name as the argument (ctest runs
 * them side by side, so each fails within its own seconds); all without. */
static const char *only;
static int part(const char *name) { return only == NULL || strcmp(only, name) == 0; }

int main(int argc, char **argv) {
  only = argc > 1 ? argv[1] : NULL;
  setenv("CHORUS_TIMEOUT", "3", 1); /* a rank left waiting fails in seconds */
  char logDir[64], logPattern[80];
  if (tempDir(logDir, "initcheck") != 0) return 1;
  snprintf(logPattern, sizeof logPattern, "%s/log.%%p", logDir);
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", logPattern, 1);
  static const struct initCase cases[] = {
      /* the same id for a second communicator: refused at once, not a wait */
      {"reused-id", 3, {{3, 0}, {3, 1}, {3, 2}}, "is not listening: its rendezvous has ended", ncclInvalidUsage, 1, 0},
      {"reused-id-elsewhere", 2, {{2, 0}, {2, 1}}, "is not listening: its rendezvous has ended", ncclInvalidUsage, 2, 0},
      {"reused-id-forked", 2, {{2, 0}, {2, 1}}, "is not listening: its rendezvous has ended", ncclInvalidUsage, 3, 0},
      {"duplicate-rank", 3, {{3, 0}, {3, 1}, {3, 1}}, "rank 1 was claimed by host", ncclInvalidUsage, 0, 0},
      {"duplicate-rank0", 2, {{2, 0}, {2, 0}}, "rank 0 was claimed by host", ncclInvalidUsage, 0, 0},
      {"nranks-disagree", 2, {{2, 0}, {3, 1}}, "says nranks is", ncclInvalidUsage, 0, 0},
      {"nranks-disagree-3", 3, {{3, 0}, {3, 2}, {4, 1}}, "says nranks is", ncclInvalidUsage, 0, 0},
      /* a rank past nranks: its process fails at once and tells the root, which refuses the others when it
       * does not try again within half the timeout (1.5 s) */
      {"rank-out-of-range", 3, {{3, 0}, {3, 3}, {3, 1}}, "asked for rank 3 of 3 (ranks are 0 to 2)", ncclInvalidUsage, 0,
       2500},
      /* rank -2 too (until 2026-12-06 the root took it for ncclCommShrink's report of a disagreement, and
       * refused the others at once saying "does not agree with the other ranks on who takes part") */
      {"rank-minus-two", 3, {{3, 0}, {3, 1}, {3, -2}}, "asked for rank -2 of 3 (ranks are 0 to 2)", ncclInvalidUsage, 0,
       2500},
      /* ranks 1 and 3 of 4 never come: the timeout names them (the root said
       * whom it waits for, twice within the 3 s timeout) */
      {"missing-ranks", 2, {{4, 0}, {4, 2}}, "was still waiting for ranks 1, 3 (of 4; 2 checked in)",
       ncclTimeout, 0, 0},
  };
  /* With a fixed NCCL_COMM_ID (make tsan) rank 0 hosts the root, and a second
   * rank 0 cannot listen on its port: that one fails at once with "Address
   * already in use", but the other is left waiting, so that case is run only
   * with ncclGetUniqueId's root. */
  const char *fixed = getenv("CHORUS_TEST_COMM_ID");
  int fixedId = fixed && *fixed == '1';
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (!part(cases[i].reuse ? "reuse" : "claims")) continue;
    if (fixedId && (cases[i].claims[1].rank == 0 || cases[i].reuse)) continue;
    ncclUniqueId id;
    pid_t holder = 0;
    if (cases[i].reuse == 2 ? idElsewhere(&id, &holder) : testCommId(&id)) return 1;
    int f = cases[i].reuse == 1 || cases[i].reuse == 2 ? runRanksWithId(cases[i].procs, id, initOnce, NULL, 15) : 0;
    f = f ? f : runRanksWithId(cases[i].procs, id, cases[i].reuse == 3 ? initThenClaim : claimInit, (void *)&cases[i], 15);
    if (holder > 0) {
      kill(holder, SIGKILL);
      waitpid(holder, NULL, 0);
    }
    printf("initcheck %s: %s\n", cases[i].name, f ? "FAILED" : "passed");
    failed += f;
    if (failed) return 1; /* fail fast: the first failing case ends the test */
  }
  if (!fixedId && (part("port") || part("secret"))) {
    int stranger = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in at = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof at;
    EXPECT(bind(stranger, (struct sockaddr *)&at, sizeof at) == 0 && listen(stranger, 8) == 0 &&
               getsockname(stranger, (struct sockaddr *)&at, &len) == 0,
           "a listening socket");
    char commId[64];
    snprintf(commId, sizeof commId, "127.0.0.1:%d", ntohs(at.sin_port));
    ncclUniqueId none;
    memset(&none, 0, sizeof none);
    int f = part("port") ? runRanksWithId(2, none, portTaken, commId, 20) : 0;
    close(stranger);
    if (part("port")) printf("initcheck port-taken: %s\n", f ? "FAILED" : "passed");
    failed += f;
    if (failed) return 1; /* fail fast: the first failing case ends the test */
    /* the same free port again (nobody listens now), for the secret's job */
    if (part("secret")) {
      f = runRanksWithId(3, none, strangerAtSecretJob, commId, 20);
      if (!f && !logsHave(logDir, "it did not present this rendezvous's secret")) {
        fprintf(stderr, "no WARN from the root about the stranger\n");
        f = 1;
      }
      printf("initcheck stranger-at-secret-job: %s\n", f ? "FAILED" : "passed");
      failed += f;
      if (failed) return 1;
    }
  }
  if (part("retry")) {
    ncclUniqueId id;
    setenv("CHORUS_TIMEOUT", "8", 1); /* the grace is 2 s, not half of 3 */
    if (testCommId(&id) != 0) return 1;
    int f = runRanksWithId(3, id, retryRank, NULL, 20);
    if (!f && testCommId(&id) == 0) f = runRanksWithId(3, id, retryRank, (void *)"nonblocking", 20);
    setenv("CHORUS_TIMEOUT", "3", 1);
    printf("initcheck bad-rank-retried: %s\n", f ? "FAILED" : "passed");
    failed += f;
    if (failed) return 1; /* fail fast: the first failing case ends the test */
  }
  if (part("threads")) {
    ncclUniqueId id;
    if (testCommId(&id) != 0) return 1;
    int f = runRanksWithId(1, id, threadClaims, NULL, 20);
    printf("initcheck bad-rank-in-threads: %s\n", f ? "FAILED" : "passed");
    failed += f;
    if (failed) return 1; /* fail fast: the first failing case ends the test */
  }
  if (part("commidretry")) {
    struct sockaddr_in at;
    retryGo = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT(retryGo != MAP_FAILED && testFreePort(&at) == 0, "a free port");
    char commId[64];
    snprintf(commId, sizeof commId, "127.0.0.1:%d", ntohs(at.sin_port));
    ncclUniqueId none;
    memset(&none, 0, sizeof none);
    int f = runRanksWithId(2, none, commIdRetry, commId, 20);
    printf("initcheck commid-retry: %s\n", f ? "FAILED" : "passed");
    failed += f;
    if (failed) return 1; /* fail fast: the first failing case ends the test */
  }
  for (int none = 0; none < 2 && !fixedId && part("late"); none++) {
    const char *timeout = none ? "0" : "30";
    ncclUniqueId late;
    setenv("CHORUS_TIMEOUT", timeout, 1); /* the root's own (it lives in this process) */
    if (testCommId(&late) != 0) return 1;
    setenv("CHORUS_TIMEOUT", "3", 1);
    int f = runRanksWithId(2, late, lateRank, (void *)timeout, 20);
    printf("initcheck late-rank (CHORUS_TIMEOUT=%s): %s\n", timeout, f ? "FAILED" : "passed");
    failed += f;
    if (failed) return 1; /* fail fast: the first failing case ends the test */
  }
  /* Addresses that cannot work say why: a host that does not resolve, an
   * address that is not this host's (rank 0 cannot listen there). */
  if (part("addresses")) {
    int f = 0;
    ncclUniqueId id;
    setenv("NCCL_COMM_ID", "no-such-host.invalid:29500", 1);
    ncclResult_t res = ncclGetUniqueId(&id);
    if (res != ncclInvalidArgument || !strstr(ncclGetLastError(NULL), "cannot resolve 'no-such-host.invalid'")) {
      fprintf(stderr, "unresolvable host: %s: %s\n", ncclGetErrorString(res), ncclGetLastError(NULL));
      f = 1;
    }
    setenv("NCCL_COMM_ID", "192.0.2.77:29500", 1); /* TEST-NET-1: on no host */
    ncclComm_t comm;
    res = ncclGetUniqueId(&id);
    if (res == ncclSuccess) res = ncclCommInitRank(&comm, 2, id, 0);
    if (res == ncclSuccess || !strstr(ncclGetLastError(NULL), "cannot listen on 192.0.2.77:29500: Cannot assign")) {
      fprintf(stderr, "foreign address: %s: %s\n", ncclGetErrorString(res), ncclGetLastError(NULL));
      f = 1;
    }
    unsetenv("NCCL_COMM_ID");
    printf("initcheck bad addresses: %s\n", f ? "FAILED" : "passed");
    failed += f;
    if (failed) return 1; /* fail fast: the first failing case ends the test */
  }
  int logsBad = part("claims") ? warnLinesLikeNccl(logDir) : 0;
  printf("initcheck log lines: %s\n", logsBad ? "FAILED" : "passed");
  failed += logsBad;
  printf("test_initcheck: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
