/* Nonblocking communicators (config.blocking = 0): init returns
 * ncclInProgress at once, ncclCommGetAsyncError reports progress, using
 * the communicator early is refused, and a watchdog can abort an init whose
 * peers never come. Inits in a group against a watchdog's abort, beside
 * other calls, and a split whose parent goes meanwhile (groupInits). */
#include <pthread.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static ncclResult_t initNonblocking(ncclComm_t *comm, int n, ncclUniqueId id, int rank) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  return ncclCommInitRankConfig(comm, n, id, rank, &cfg);
}

/* comm's state once it stops saying ncclInProgress, as NCCL's docs poll
 * it, looking every 0.1 ms so that the threads it waits for get the cores
 * (under valgrind they run one at a time, and a poll that never sleeps
 * held them off for minutes); a failed look's result; ncclInProgress
 * still after 20 s. */
static ncclResult_t pollDone(ncclComm_t comm) {
  ncclResult_t state, r;
  double end = nowSec() + 20;
  while ((r = ncclCommGetAsyncError(comm, &state)) == ncclSuccess && state == ncclInProgress && nowSec() < end)
    usleep(100);
  return r == ncclSuccess ? state : r;
}

/* Polls a nonblocking init until it is done: 0, else 1 (said). */
static int waitReady(ncclComm_t comm) {
  ncclResult_t state = pollDone(comm);
  EXPECT(state == ncclSuccess, "init ended with %s", ncclGetErrorString(state));
  return 0;
}

/* A nonblocking communicator made and polled until ready: 0, else 1 (said). */
static int startNonblocking(ncclComm_t *comm, int n, ncclUniqueId id, int rank) {
  ncclResult_t r = initNonblocking(comm, n, id, rank);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "nonblocking init: %s", ncclGetErrorString(r));
  return waitReady(*comm);
}

/* The last rank joins only once rank 0 has made its calls on the
 * initializing communicator (the gate is a page the ranks share), so
 * those calls meet an init in progress however slow the machine: a fixed
 * wait here was outrun under valgrind on a loaded machine. */
static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  int *gate = arg;
  if (n > 1 && rank == n - 1) {
    double end = nowSec() + 30;
    while (!__atomic_load_n(gate, __ATOMIC_ACQUIRE) && nowSec() < end) usleep(1000);
    EXPECT(__atomic_load_n(gate, __ATOMIC_ACQUIRE), "rank 0 never opened the gate");
  }
  ncclComm_t comm = NULL;
  ncclResult_t res = initNonblocking(&comm, n, id, rank);
  EXPECT(res == ncclInProgress || res == ncclSuccess, "init returned %s", ncclGetErrorString(res));
  EXPECT(comm != NULL, "no communicator handle while in progress");
  ncclResult_t state;
  NCCLCHECK(ncclCommGetAsyncError(comm, &state));
  float x = 1, y = 0;
  if (rank == 0 && n > 1) {
    EXPECT(state == ncclInProgress, "init without the last rank ended with %s", ncclGetErrorString(state));
    res = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL);
    EXPECT(res == ncclInvalidArgument, "collective on an initializing communicator returned %s", ncclGetErrorString(res));
    /* and what NCCL's ncclCommEnsureReady guards */
    ncclRedOp_t op;
    float scale = 2;
    ncclWindow_t win;
    uint64_t stat;
    char buf[64];
    EXPECT(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat, ncclScalarHostImmediate, comm) == ncclInvalidArgument,
           "ncclRedOpCreatePreMulSum on an initializing communicator");
    EXPECT(ncclCommWindowRegister(comm, buf, sizeof buf, &win, 0) == ncclInvalidArgument,
           "ncclCommWindowRegister on an initializing communicator");
    EXPECT(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &stat) == ncclInvalidArgument,
           "ncclCommMemStats on an initializing communicator");
    EXPECT(ncclCommResume(comm) == ncclInvalidArgument, "ncclCommResume on an initializing communicator");
    __atomic_store_n(gate, 1, __ATOMIC_RELEASE);
  }
  if (waitReady(comm)) return 1;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
  EXPECT(y == n, "allreduce gave %g", y);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* Rank 1 never comes: the watchdog aborts rank 0's init. */
static int watchdogMain(int rank, int n, ncclUniqueId id, void *arg) {
  if (rank == 1) {
    usleep(2000000);
    return 0;
  }
  ncclComm_t comm = NULL;
  ncclResult_t res = initNonblocking(&comm, n, id, rank);
  EXPECT(res == ncclInProgress, "init returned %s", ncclGetErrorString(res));
  usleep(300000);
  ncclResult_t state;
  NCCLCHECK(ncclCommGetAsyncError(comm, &state));
  EXPECT(state == ncclInProgress, "init without its peer ended with %s", ncclGetErrorString(state));
  /* What NCCL refuses while init runs (its ncclCommEnsureReady) is refused
   * at once, not waited out: destroy, finalize, the queries, a split. */
  double t0 = nowSec();
  int v = -1;
  ncclComm_t child = NULL;
  EXPECT(ncclCommDestroy(comm) == ncclInvalidArgument, "ncclCommDestroy of an initializing communicator");
  EXPECT(ncclCommFinalize(comm) == ncclInvalidArgument, "ncclCommFinalize of an initializing communicator");
  EXPECT(ncclCommCount(comm, &v) == ncclInvalidArgument && v == -1, "ncclCommCount of an initializing communicator");
  EXPECT(ncclCommUserRank(comm, &v) == ncclInvalidArgument, "ncclCommUserRank of an initializing communicator");
  EXPECT(ncclCommSplit(comm, 0, 0, &child, NULL) == ncclInvalidArgument, "ncclCommSplit of an initializing one");
  EXPECT(strstr(ncclGetLastError(comm), "still initializing") != NULL, "last error: %s", ncclGetLastError(comm));
  EXPECT(nowSec() - t0 < 1.0 * testTimeScale(), "refusing calls during init took %.2f s", nowSec() - t0);
  t0 = nowSec();
  NCCLCHECK(ncclCommAbort(comm));
  double took = nowSec() - t0;
  EXPECT(took < 1.0 * testTimeScale(), "ncclCommAbort of a stuck init took %.2f s", took);
  return 0;
}

/* Uses up an id that a refused init left unused: its root's thread, which
 * runs until a rendezvous ends it, must not be running when this process
 * forks the ranks of a later test (ThreadSanitizer then sees the children
 * reuse its thread id). */
static void useId(ncclUniqueId id) {
  ncclComm_t c = NULL;
  if (ncclCommInitRank(&c, 1, id, 0) == ncclSuccess) ncclCommDestroy(c);
}

/* Calls on blocking and nonblocking communicators share a group, as in
 * NCCL (its ncclGroupCommJoin checks nothing; the group takes the last
 * one's mode): both run (they were refused with ncclInvalidArgument). An
 * init, split or shrink is held to the group's mode so far (NCCL's
 * ncclAsyncLaunch): a nonblocking init after a call on a blocking
 * communicator fails, so does the group, and nothing of it runs. */
static int mixedGroup(void) {
  ncclUniqueId a, b, c;
  ncclComm_t blocking, nonblocking, late = NULL;
  NCCLCHECK(ncclGetUniqueId(&a));
  NCCLCHECK(ncclGetUniqueId(&b));
  NCCLCHECK(ncclGetUniqueId(&c));
  NCCLCHECK(ncclCommInitRank(&blocking, 1, a, 0));
  ncclResult_t r = initNonblocking(&nonblocking, 1, b, 0);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "nonblocking init: %s", ncclGetErrorString(r));
  r = pollDone(nonblocking);
  for (int order = 0; order < 2; order++) {
    int x = 5, y = 0, z = 0;
    NCCLCHECK(ncclGroupStart());
    ncclResult_t first = ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, order ? nonblocking : blocking, NULL);
    ncclResult_t second = ncclAllReduce(&x, &z, 1, ncclInt, ncclSum, order ? blocking : nonblocking, NULL);
    r = ncclGroupEnd(); /* before any check: a failed one must not leave the group open */
    EXPECT(first == ncclSuccess && second == ncclSuccess, "the calls of a mixed group (order %d): %s, %s", order,
           ncclGetErrorString(first), ncclGetErrorString(second));
    EXPECT(r == ncclSuccess || r == ncclInProgress, "ncclGroupEnd of a mixed group: %s", ncclGetErrorString(r));
    r = pollDone(nonblocking);
    EXPECT(r == ncclSuccess && y == 5 && z == 5, "a mixed group (order %d): %s, %d %d", order, ncclGetErrorString(r),
           y, z);
  }
  int x = 5, y = 0;
  NCCLCHECK(ncclGroupStart());
  ncclResult_t call = ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, blocking, NULL);
  r = initNonblocking(&late, 1, c, 0);
  char last[512];
  snprintf(last, sizeof last, "%s", ncclGetLastError(NULL));
  ncclResult_t end = ncclGroupEnd(); /* before any check: a failed one must not leave the group open */
  if (late && r != ncclInvalidArgument) ncclCommAbort(late);
  if (!late) useId(c);
  EXPECT(call == ncclSuccess, "the AllReduce: %s", ncclGetErrorString(call));
  EXPECT(r == ncclInvalidArgument, "a nonblocking init joining a blocking group: %s", ncclGetErrorString(r));
  EXPECT(strstr(last, "Blocking and nonblocking") != NULL, "last error: %s", last);
  EXPECT(end == ncclInvalidArgument && y == 0, "ncclGroupEnd of that group: %s, %d", ncclGetErrorString(end), y);
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, blocking, NULL));
  NCCLCHECK(ncclGroupEnd());
  EXPECT(y == 5, "the group after a failed one: %d", y);
  NCCLCHECK(ncclCommDestroy(blocking));
  NCCLCHECK(ncclCommDestroy(nonblocking));
  return 0;
}

/* 1 when comm is nonblocking: a nonblocking init may then join a group
 * after a call on it (NCCL holds an init to the group's mode, which the
 * last call's communicator set); -1 when the call fails. */
static int isNonblocking(ncclComm_t comm) {
  ncclUniqueId id;
  ncclComm_t probe = NULL;
  int x = 1, y = 0;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclGroupStart() != ncclSuccess) return -1;
  ncclResult_t call = ncclAllReduce(&x, &y, 0, ncclInt, ncclSum, comm, NULL); /* joins, waits for nobody */
  ncclResult_t joined = initNonblocking(&probe, 1, id, 0);
  ncclResult_t end = ncclGroupEnd();
  if (probe && !waitReady(probe)) ncclCommDestroy(probe);
  if (!probe) useId(id);
  if (call != ncclSuccess) return -1;
  return joined == ncclSuccess && (end == ncclSuccess || end == ncclInProgress);
}

/* A split of a nonblocking communicator without a config is nonblocking
 * (NCCL copies the parent's config); with a config that leaves blocking
 * unset it is blocking (NCCL's default); a rank that leaves
 * (NCCL_SPLIT_NOCOLOR) gets no communicator, so its config is not read
 * (before: the first inherited the parent's mode, the last was refused).
 * Every split returns ncclSuccess, as NCCL's; the parent's mode says
 * where the new one sets up (nonblocking: on its thread, the parent saying
 * ncclInProgress until it is done, polled as NCCL's docs poll it). */
static int splitBlocking(void) {
  ncclUniqueId b;
  ncclComm_t parent, inherited = NULL, fresh = NULL, none = NULL;
  NCCLCHECK(ncclGetUniqueId(&b));
  ncclResult_t r = initNonblocking(&parent, 1, b, 0);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "nonblocking init: %s", ncclGetErrorString(r));
  if (waitReady(parent)) return 1;
  r = ncclCommSplit(parent, 0, 0, &inherited, NULL);
  EXPECT(r == ncclSuccess, "split without a config: %s", ncclGetErrorString(r));
  if (waitReady(parent)) return 1;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "named";
  r = ncclCommSplit(parent, 0, 0, &fresh, &cfg);
  EXPECT(r == ncclSuccess, "split with a config leaving blocking unset returned %s", ncclGetErrorString(r));
  if (waitReady(parent)) return 1;
  ncclConfig_t garbage;
  memset(&garbage, 0x5a, sizeof garbage);
  r = ncclCommSplit(parent, NCCL_SPLIT_NOCOLOR, 0, &none, &garbage);
  EXPECT(r == ncclSuccess && none == NULL, "NCCL_SPLIT_NOCOLOR with an unread config: %s", ncclGetErrorString(r));
  EXPECT(isNonblocking(inherited) == 1, "the split without a config is blocking");
  EXPECT(isNonblocking(fresh) == 0, "the split with a config is nonblocking");
  NCCLCHECK(ncclCommDestroy(fresh));
  NCCLCHECK(ncclCommDestroy(inherited));
  NCCLCHECK(ncclCommDestroy(parent));
  return 0;
}

/* NCCL's nonblocking split, as its docs use it: ncclSuccess, then the
 * PARENT is polled until it stops saying ncclInProgress, and the new
 * communicator is ready (its init is a job of the parent's group). It had
 * said ncclSuccess at once while the child still set up, whose first call
 * then failed "still initializing" (seen every time by a probe). Five
 * rounds each of a split and a shrink, as with NCCL. Under a blocking
 * parent a nonblocking child is ready when the call returns. */
static int childOfParent(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER, blockingCfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  blockingCfg.blocking = 1;
  ncclComm_t parent = NULL, blockingParent = NULL, child = NULL;
  ncclResult_t r, state;
  if (startNonblocking(&parent, n, id, rank)) return 1;
  for (int round = 0; round < 6; round++) {
    /* the last round a shrink, which the last rank sits out */
    int shrink = round == 5, exclude = n - 1, count = -1, m = n - shrink;
    if (shrink && rank == exclude) break;
    r = shrink ? ncclCommShrink(parent, &exclude, 1, &child, &cfg, NCCL_SHRINK_DEFAULT)
               : ncclCommSplit(parent, 0, rank, &child, round == 4 ? &blockingCfg : &cfg);
    EXPECT(r == ncclSuccess, "round %d: %s returned %s", round, shrink ? "shrink" : "split", ncclGetErrorString(r));
    state = pollDone(parent);
    EXPECT(state == ncclSuccess, "round %d: the parent says %s", round, ncclGetErrorString(state));
    r = ncclCommCount(child, &count);
    EXPECT(r == ncclSuccess && count == m, "round %d: ncclCommCount of the child: %s, %d", round, ncclGetErrorString(r),
           count);
    int x = rank + 1, y = 0;
    NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, child, NULL));
    state = pollDone(child);
    EXPECT(y == m * (m + 1) / 2, "round %d: the child's AllReduce gave %d", round, y);
    if (round == 4) blockingParent = child; /* blocking: for the last check */
    else NCCLCHECK(ncclCommDestroy(child));
  }
  if (blockingParent) { /* a blocking parent sets a nonblocking child up in the call */
    r = ncclCommSplit(blockingParent, 0, rank, &child, &cfg);
    EXPECT(r == ncclSuccess, "split of a blocking parent: %s", ncclGetErrorString(r));
    NCCLCHECK(ncclCommGetAsyncError(child, &state));
    EXPECT(state == ncclSuccess, "the nonblocking child of a blocking parent says %s", ncclGetErrorString(state));
    NCCLCHECK(ncclCommDestroy(child));
    NCCLCHECK(ncclCommDestroy(blockingParent));
  }
  NCCLCHECK(ncclCommDestroy(parent));
  return 0;
}

/* Two splits of a nonblocking parent in one group: they agree in the
 * order called (they crossed, and failed), both set up on their threads,
 * and the parent says ncclInProgress until both are ready. */
static int childrenOfParent(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t parent = NULL, whole = NULL, half = NULL;
  ncclResult_t r, state;
  if (startNonblocking(&parent, n, id, rank)) return 1;
  NCCLCHECK(ncclGroupStart());
  ncclResult_t a = ncclCommSplit(parent, 0, rank, &whole, &cfg);
  ncclResult_t b = ncclCommSplit(parent, rank % 2, -rank, &half, &cfg);
  r = ncclGroupEnd(); /* before any check: a failed one must not leave the group open */
  EXPECT(a == ncclSuccess && b == ncclSuccess && (r == ncclSuccess || r == ncclInProgress),
         "two splits in a group: %s, %s, ncclGroupEnd %s", ncclGetErrorString(a), ncclGetErrorString(b),
         ncclGetErrorString(r));
  state = pollDone(parent);
  EXPECT(state == ncclSuccess, "the parent of two splits says %s", ncclGetErrorString(state));
  int wholeCount = -1, halfCount = -1, halfRank = -1, same = 0, higher = 0;
  for (int q = 0; q < n; q++)
    if (q % 2 == rank % 2) same++, higher += q > rank;
  r = ncclCommCount(whole, &wholeCount);
  EXPECT(r == ncclSuccess && wholeCount == n, "the first child: %s, %d ranks", ncclGetErrorString(r), wholeCount);
  r = ncclCommCount(half, &halfCount);
  EXPECT(r == ncclSuccess && halfCount == same, "the second child: %s, %d ranks", ncclGetErrorString(r), halfCount);
  NCCLCHECK(ncclCommUserRank(half, &halfRank));
  EXPECT(halfRank == higher, "the second child's rank %d, expected %d", halfRank, higher);
  int x = rank + 1, y = 0, z = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, whole, NULL));
  NCCLCHECK(ncclAllReduce(&x, &z, 1, ncclInt, ncclSum, half, NULL));
  if (waitReady(whole) || waitReady(half)) return 1;
  int want = 0;
  for (int q = rank % 2; q < n; q += 2) want += q + 1;
  EXPECT(y == n * (n + 1) / 2 && z == want, "the children's AllReduce gave %d and %d", y, z);
  NCCLCHECK(ncclCommDestroy(whole));
  NCCLCHECK(ncclCommDestroy(half));
  NCCLCHECK(ncclCommDestroy(parent));
  return 0;
}

/* NCCL_COMM_BLOCKING overrides config.blocking, and the default of a call
 * without a config, as NCCL's envConfigOverride: 0 makes ncclCommInitRank's
 * communicator nonblocking for the calls after, while the call itself, as
 * NCCL's (no group of its own), sets up before it returns; 1 makes a
 * config asking for a nonblocking one return ncclSuccess, done. */
static int blockingFromEnv(int rank, int n, ncclUniqueId id, void *arg) {
  int nonblocking = *(const int *)arg;
  setenv("NCCL_COMM_BLOCKING", nonblocking ? "0" : "1", 1);
  if (rank == n - 1) usleep(300000); /* the others' init is in progress meanwhile */
  ncclComm_t comm = NULL;
  ncclResult_t res = nonblocking ? ncclCommInitRank(&comm, n, id, rank) : initNonblocking(&comm, n, id, rank);
  if (nonblocking) { /* NCCL's plain ncclCommInitRank sets up in the call all the same (it said ncclInProgress) */
    ncclResult_t now = ncclInProgress;
    if (comm) ncclCommGetAsyncError(comm, &now);
    EXPECT(res == ncclSuccess && now == ncclSuccess, "NCCL_COMM_BLOCKING=0: ncclCommInitRank returned %s, then %s",
           ncclGetErrorString(res), ncclGetErrorString(now));
    EXPECT(isNonblocking(comm) == 1, "NCCL_COMM_BLOCKING=0: the communicator is blocking");
  }
  if (!nonblocking)
    EXPECT(res == ncclSuccess, "NCCL_COMM_BLOCKING=1: a nonblocking config's init returned %s", ncclGetErrorString(res));
  ncclResult_t state = ncclInProgress;
  double end = nowSec() + 20;
  while (comm && state == ncclInProgress && nowSec() < end) {
    NCCLCHECK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclInProgress) usleep(1000);
  }
  EXPECT(state == ncclSuccess, "init ended with %s", ncclGetErrorString(state));
  float x = 1, y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
  EXPECT(y == n, "allreduce gave %g", y);
  NCCLCHECK(ncclCommDestroy(comm));
  unsetenv("NCCL_COMM_BLOCKING");
  return 0;
}

/* The parent of a nonblocking split is destroyed as soon as the split
 * returns (its part is done then), while the child still initializes: the
 * child's Init COMPLETE line (NCCL_DEBUG=INFO, set for this test) once read
 * the freed parent (ASan's heap-use-after-free in the faults suite). */
static int splitParentGone(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t parent = NULL, child = NULL;
  NCCLCHECK(ncclCommInitRank(&parent, n, id, rank));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  if (rank == 1) usleep(20000); /* rank 0's child completes after its parent is gone */
  ncclResult_t res = ncclCommSplit(parent, 0, rank, &child, &cfg);
  EXPECT(res == ncclSuccess || res == ncclInProgress, "split returned %s", ncclGetErrorString(res));
  NCCLCHECK(ncclCommDestroy(parent));
  if (waitReady(child)) return 1;
  int x = rank + 1, y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, child, NULL));
  EXPECT(y == n * (n + 1) / 2, "child allreduce gave %d", y);
  NCCLCHECK(ncclCommDestroy(child));
  return 0;
}

/* Inits made in a group (their handles given at the call) and the rest of
 * the group, against a watchdog and the user (fixed 2026-12-06, from a
 * review): an abort from another thread while ncclGroupEnd sets a blocking
 * one up ends the setup, which had gone on in the freed communicator; a
 * nonblocking init in a group with calls on another communicator no longer
 * drops those calls; a split whose parent is destroyed while the group
 * holds it fails the group, where it had read the freed parent. */
struct abortLater {
  ncclComm_t comm;
  int ms;
};
static void *abortAfter(void *arg) {
  struct abortLater *a = arg;
  usleep(a->ms * 1000);
  ncclCommAbort(a->comm);
  return NULL;
}
static int groupInits(void) {
  setenv("CHORUS_TIMEOUT", "5", 1); /* a regression fails here in seconds, not at the default timeout */
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t lone = NULL;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclCommInitRank(&lone, 2, id, 0)); /* rank 1 never comes */
  struct abortLater a = {lone, 300};
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, abortAfter, &a) == 0, "a thread");
  double t0 = nowSec();
  ncclResult_t r = ncclGroupEnd();
  double took = nowSec() - t0;
  pthread_join(t, NULL);
  EXPECT(r != ncclSuccess && took < 5 * testTimeScale(), "a group whose init was aborted by a watchdog ended %s after %.2f s",
         ncclGetErrorString(r), took);

  ncclUniqueId old, fresh;
  NCCLCHECK(ncclGetUniqueId(&old));
  NCCLCHECK(ncclGetUniqueId(&fresh));
  ncclComm_t ready = NULL, made = NULL;
  r = initNonblocking(&ready, 1, old, 0);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "nonblocking init: %s", ncclGetErrorString(r));
  if (waitReady(ready)) return 1;
  int x = 7, y = 0;
  NCCLCHECK(ncclGroupStart());
  ncclResult_t init = initNonblocking(&made, 1, fresh, 0);
  ncclResult_t call = ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, ready, NULL);
  r = ncclGroupEnd(); /* before any check: a failed one must not leave the group open */
  /* NCCL's call says the new communicator's state, which is ncclInProgress
   * only from the outermost ncclGroupEnd on (it said ncclInProgress) */
  EXPECT(init == ncclSuccess && made != NULL, "nonblocking init in a group: %s, %p", ncclGetErrorString(init),
         (void *)made);
  EXPECT(call == ncclSuccess, "the AllReduce in that group: %s", ncclGetErrorString(call));
  EXPECT(r == ncclSuccess || r == ncclInProgress, "the group: %s", ncclGetErrorString(r));
  if (waitReady(ready) || waitReady(made)) return 1;
  EXPECT(y == 7, "the AllReduce grouped with a nonblocking init gave %d", y);
  NCCLCHECK(ncclCommDestroy(ready));
  NCCLCHECK(ncclCommDestroy(made));

  ncclComm_t pair[2], child[2] = {NULL, NULL};
  NCCLCHECK(ncclCommInitAll(pair, 2, NULL));
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < 2; i++) NCCLCHECK(ncclCommSplit(pair[i], 0, i, &child[i], NULL));
  NCCLCHECK(ncclCommDestroy(pair[0]));
  r = ncclGroupEnd();
  EXPECT(r == ncclInvalidUsage && child[0] == NULL && child[1] == NULL,
         "a split group whose parent was destroyed meanwhile: %s, %p %p", ncclGetErrorString(r), (void *)child[0],
         (void *)child[1]);
  NCCLCHECK(ncclCommDestroy(pair[1]));
  unsetenv("CHORUS_TIMEOUT");
  return 0;
}

/* NCCL_COMM_BLOCKING=0 makes ncclCommInitAll's communicators nonblocking,
 * as NCCL's (its ranks' inits read the variable; chorus's were blocking
 * whatever it said): the call returns ncclSuccess or ncclInProgress, the
 * communicators come to ncclSuccess and work. */
static int initAllFromEnv(void) {
  setenv("NCCL_COMM_BLOCKING", "0", 1);
  ncclComm_t comms[2] = {NULL, NULL};
  ncclResult_t r = ncclCommInitAll(comms, 2, NULL);
  unsetenv("NCCL_COMM_BLOCKING");
  EXPECT(r == ncclSuccess || r == ncclInProgress, "ncclCommInitAll: %s", ncclGetErrorString(r));
  for (int i = 0; i < 2; i++)
    if (waitReady(comms[i])) return 1;
  float x[2] = {1, 2};
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < 2; i++) NCCLCHECK(ncclAllReduce(&x[i], &x[i], 1, ncclFloat, ncclSum, comms[i], NULL));
  r = ncclGroupEnd();
  EXPECT(r == ncclSuccess || r == ncclInProgress, "their AllReduce: %s", ncclGetErrorString(r));
  for (int i = 0; i < 2; i++)
    if (waitReady(comms[i])) return 1;
  EXPECT(x[0] == 3 && x[1] == 3, "their AllReduce gave %g %g", x[0], x[1]);
  EXPECT(isNonblocking(comms[0]) == 1, "NCCL_COMM_BLOCKING=0: ncclCommInitAll's communicator is blocking");
  for (int i = 0; i < 2; i++) NCCLCHECK(ncclCommDestroy(comms[i]));
  return 0;
}

/* From a review of the parent's pending state: a child polled until ready
 * (not its parent, which chorus allows once the handle is there: the job
 * gives it once the ranks have agreed, before the new communicator is set
 * up) could not be finalized, "calls queued in an open group", as the
 * parent's reference to it counted as a group's hold; and a grow in a group
 * was held to its parent's mode, where NCCL launches it on the new
 * communicator (blocking parents, nonblocking grows: refused). */
static int childPolled(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t parent = NULL, child = NULL;
  ncclResult_t r;
  if (startNonblocking(&parent, n, id, rank)) return 1;
  NCCLCHECK(ncclCommSplit(parent, 0, rank, &child, &cfg));
  for (double end = nowSec() + 20; !__atomic_load_n(&child, __ATOMIC_ACQUIRE) && nowSec() < end;) usleep(1000);
  EXPECT(__atomic_load_n(&child, __ATOMIC_ACQUIRE) != NULL, "the split's job never gave the new communicator");
  if (waitReady(child)) return 1;
  r = ncclCommFinalize(child);
  EXPECT(r == ncclSuccess || r == ncclInProgress, "ncclCommFinalize of a child polled itself: %s: %s",
         ncclGetErrorString(r), ncclGetLastError(NULL));
  if (waitReady(child)) return 1;
  NCCLCHECK(ncclCommDestroy(child));
  NCCLCHECK(ncclCommDestroy(parent));
  return 0;
}
static int growInGroup(void) {
  ncclComm_t parent[2], grown[3] = {NULL, NULL, NULL};
  NCCLCHECK(ncclCommInitAll(parent, 2, NULL));
  ncclUniqueId id;
  NCCLCHECK(ncclCommGetUniqueId(parent[1], &id));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r[3];
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < 2; i++) r[i] = ncclCommGrow(parent[i], 3, i == 1 ? &id : NULL, -1, &grown[i], &cfg);
  r[2] = ncclCommGrow(NULL, 3, &id, 2, &grown[2], &cfg);
  ncclResult_t end = ncclGroupEnd();
  for (int i = 0; i < 3; i++)
    EXPECT(r[i] == ncclSuccess || r[i] == ncclInProgress, "grow %d in a group: %s", i, ncclGetErrorString(r[i]));
  EXPECT(end == ncclSuccess || end == ncclInProgress, "the group of grows: %s: %s", ncclGetErrorString(end),
         ncclGetLastError(NULL));
  for (int i = 0; i < 3; i++)
    if (grown[i] && waitReady(grown[i])) return 1;
  int x[3] = {1, 2, 3};
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < 3; i++) NCCLCHECK(ncclAllReduce(&x[i], &x[i], 1, ncclInt, ncclSum, grown[i], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int i = 0; i < 3; i++)
    if (waitReady(grown[i])) return 1;
  EXPECT(x[0] == 6 && x[1] == 6 && x[2] == 6, "the grown communicator's AllReduce gave %d %d %d", x[0], x[1], x[2]);
  for (int i = 0; i < 3; i++) NCCLCHECK(ncclCommDestroy(grown[i]));
  for (int i = 0; i < 2; i++) NCCLCHECK(ncclCommDestroy(parent[i]));
  return 0;
}

/* A nonblocking parent whose rank 2 is gone: the survivors shrink it with
 * NCCL_SHRINK_ABORT and poll the parent, as NCCL's docs do; the poll ends on
 * the shrink's outcome, ncclSuccess, as NCCL sets a nonblocking parent's
 * state from its job's (it ended on the dead rank's error, which reads as a
 * failed shrink), and the child works. */
static int shrinkDeadParent(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  setenv("CHORUS_TIMEOUT", "10", 1);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t parent = NULL, child = NULL;
  ncclResult_t r, state;
  if (startNonblocking(&parent, n, id, rank)) return 1;
  int x = 1, y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, parent, NULL)); /* every rank is past its init (the NULL stream's call returns done) */
  if (rank == n - 1) _exit(0); /* gone without a word */
  r = ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, parent, NULL);
  state = pollDone(parent);
  EXPECT(r != ncclSuccess || state != ncclSuccess, "an AllReduce with a dead rank succeeded");
  int dead = n - 1;
  r = ncclCommShrink(parent, &dead, 1, &child, &cfg, NCCL_SHRINK_ABORT);
  EXPECT(r == ncclSuccess, "the shrink returned %s", ncclGetErrorString(r));
  state = pollDone(parent);
  EXPECT(state == ncclSuccess, "polling the shrunk parent ended on %s", ncclGetErrorString(state));
  if (waitReady(child)) return 1;
  y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, child, NULL));
  if (waitReady(child)) return 1;
  EXPECT(y == n - 1, "the child's AllReduce gave %d", y);
  NCCLCHECK(ncclCommDestroy(child));
  ncclCommAbort(parent);
  return 0;
}

/* One thread drives every rank of nonblocking communicators and splits
 * (then shrinks) them one rank after another, outside any group, as NCCL
 * allows: each call returns at once and the job runs after it (the
 * agreement over the parent had run in the call, which then waited for
 * the ranks this thread had not called yet: a hang until the timeout).
 * The parents are polled, as NCCL's docs poll them; the new handles come
 * with their outcome. One rank leaves the split (NCCL_SPLIT_NOCOLOR). */
static int oneThreadSplits(void) {
  enum { n = 3 };
  setenv("CHORUS_TIMEOUT", "5", 1); /* a regression fails here in seconds */
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t parent[n], child[n], shrunk[n];
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < n; i++) initNonblocking(&parent[i], n, id, i);
  ncclResult_t r = ncclGroupEnd(), state;
  EXPECT(r == ncclSuccess || r == ncclInProgress, "the group of inits: %s", ncclGetErrorString(r));
  for (int i = 0; i < n; i++)
    if (waitReady(parent[i])) return 1;
  double t0 = nowSec();
  for (int i = 0; i < n; i++) {
    r = ncclCommSplit(parent[i], i == 1 ? NCCL_SPLIT_NOCOLOR : 0, n - i, &child[i], NULL);
    EXPECT(r == ncclSuccess, "split of rank %d alone: %s", i, ncclGetErrorString(r));
  }
  double took = nowSec() - t0;
  EXPECT(took < 2 * testTimeScale(), "the splits of one thread's ranks took %.2f s to return", took);
  for (int i = 0; i < n; i++) {
    state = pollDone(parent[i]);
    EXPECT(state == ncclSuccess, "rank %d's parent after its split says %s: %s", i, ncclGetErrorString(state),
           ncclGetLastError(parent[i]));
  }
  EXPECT(child[1] == NULL && child[0] != NULL && child[2] != NULL, "the split's handles: %p %p %p", (void *)child[0],
         (void *)child[1], (void *)child[2]);
  int rank0 = -1, rank2 = -1;
  NCCLCHECK(ncclCommUserRank(child[0], &rank0));
  NCCLCHECK(ncclCommUserRank(child[2], &rank2));
  EXPECT(rank0 == 1 && rank2 == 0, "keys n - i order the new ranks: %d %d", rank0, rank2);
  int x[n] = {1, 2, 3};
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < n; i += 2) NCCLCHECK(ncclAllReduce(&x[i], &x[i], 1, ncclInt, ncclSum, child[i], NULL));
  r = ncclGroupEnd();
  EXPECT(r == ncclSuccess || r == ncclInProgress, "the children's AllReduce: %s", ncclGetErrorString(r));
  for (int i = 0; i < n; i += 2)
    if (waitReady(child[i])) return 1;
  EXPECT(x[0] == 4 && x[2] == 4, "the children's AllReduce gave %d %d", x[0], x[2]);
  int out = n - 1;
  for (int i = 0; i < n - 1; i++) {
    r = ncclCommShrink(parent[i], &out, 1, &shrunk[i], NULL, NCCL_SHRINK_DEFAULT);
    EXPECT(r == ncclSuccess, "shrink of rank %d alone: %s", i, ncclGetErrorString(r));
  }
  for (int i = 0; i < n - 1; i++) {
    state = pollDone(parent[i]);
    EXPECT(state == ncclSuccess && shrunk[i] != NULL, "rank %d's parent after its shrink says %s", i,
           ncclGetErrorString(state));
  }
  int count = -1;
  NCCLCHECK(ncclCommCount(shrunk[1], &count));
  EXPECT(count == n - 1, "the shrunk communicator has %d ranks", count);
  for (int i = 0; i < n - 1; i++) NCCLCHECK(ncclCommDestroy(shrunk[i]));
  for (int i = 0; i < n; i += 2) NCCLCHECK(ncclCommDestroy(child[i]));
  for (int i = 0; i < n; i++) NCCLCHECK(ncclCommDestroy(parent[i]));
  unsetenv("CHORUS_TIMEOUT");
  return 0;
}

/* A nonblocking split whose peer never calls it: the call returns, the
 * parent says ncclInProgress, and ncclCommAbort of the parent (NCCL's way
 * to stop a split) returns at once; without it, the poll ends at the
 * timeout with an error that says what failed. */
static int splitNeverMet(int rank, int n, ncclUniqueId id, void *arg) {
  int abortIt = *(int *)arg;
  setenv("CHORUS_TIMEOUT", "3", 1);
  ncclComm_t parent = NULL, child = NULL;
  ncclResult_t r, state;
  if (startNonblocking(&parent, n, id, rank)) return 1;
  if (rank == 1) { /* never splits; stays until rank 0 is done with it */
    usleep(abortIt ? 1000000 : 5000000);
    ncclCommAbort(parent);
    return 0;
  }
  double t0 = nowSec();
  r = ncclCommSplit(parent, 0, 0, &child, NULL);
  EXPECT(r == ncclSuccess && nowSec() - t0 < 1 * testTimeScale(), "the split returned %s after %.2f s", ncclGetErrorString(r),
         nowSec() - t0);
  usleep(200000);
  NCCLCHECK(ncclCommGetAsyncError(parent, &state));
  EXPECT(state == ncclInProgress && child == NULL, "a split whose peer never came: %s, %p",
         ncclGetErrorString(state), (void *)child);
  if (abortIt) {
    t0 = nowSec();
    NCCLCHECK(ncclCommAbort(parent));
    EXPECT(nowSec() - t0 < 1.5 * testTimeScale(), "aborting the parent of a waiting split took %.2f s", nowSec() - t0);
    EXPECT(child == NULL, "the aborted split gave a communicator");
    return 0;
  }
  state = pollDone(parent);
  const char *why = ncclGetLastError(parent);
  EXPECT(state != ncclSuccess && state != ncclInProgress && child == NULL && strstr(why, "ncclCommSplit"),
         "a split whose peer never came ended %s after %.1f s: %s", ncclGetErrorString(state), nowSec() - t0, why);
  ncclCommAbort(parent);
  return 0;
}

/* test_nonblocking [jobs]: the splits' and shrinks' jobs (oneThreadSplits,
 * splitNeverMet) alone, else the rest: two runs, each short enough for the
 * mutation script's deadline. */
int main(int argc, char **argv) {
  int failed = 0;
  if (argc > 1 && strcmp(argv[1], "jobs") == 0) {
    failed += oneThreadSplits();
    for (int abortIt = 1; abortIt >= 0; abortIt--) failed += runRanks(2, splitNeverMet, &abortIt, 30);
    printf("test_nonblocking jobs: %s\n", failed ? "FAILED" : "passed");
    return failed != 0;
  }
  failed += groupInits();
  for (int nonblocking = 0; nonblocking < 2; nonblocking++)
    failed += runRanks(2, blockingFromEnv, &nonblocking, 30);
  int *gate = mmap(NULL, sizeof *gate, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (gate == MAP_FAILED) return 1;
  for (int n = 1; n <= 4; n += 3) {
    *gate = 0;
    failed += runRanks(n, rankMain, gate, 60);
  }
  munmap(gate, sizeof *gate);
  failed += runRanks(2, watchdogMain, NULL, 30);
  failed += mixedGroup();
  failed += splitBlocking();
  failed += initAllFromEnv();
  failed += runRanks(2, childPolled, NULL, 30);
  failed += growInGroup();
  failed += runRanks(3, shrinkDeadParent, NULL, 60);
  for (int n = 2; n <= 3; n++) failed += runRanks(n, childOfParent, NULL, 60);
  for (int n = 2; n <= 3; n++) failed += runRanks(n, childrenOfParent, NULL, 30);
  failed += runRanks(2, splitParentGone, NULL, 30);
  printf("test_nonblocking: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
