/* Init jobs: communicators to create (ncclCommInitRank, ncclCommSplit,
 * ncclCommShrink, ncclCommInitAll), run together on threads of their own so
 * that ranks driven by one thread meet at the rendezvous. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/comm.h"
#include "api/initjob.h"
#include "core/err.h"
#include "core/log.h"
#include "core/wait.h"

void initJobParentDone(struct initJob *j) {
  if (j->parentHeld) {
    j->parentHeld = 0;
    __atomic_add_fetch(&j->parent->busy, -1, __ATOMIC_ACQ_REL);
  }
  __atomic_store_n(&j->parentDone, 1, __ATOMIC_RELEASE);
}

/* Waits until the job before j on its parent is done with the parent
 * (j->after). Bounded by that job: its own waits end at its timeout or
 * its parent's abort, and its thread marks it done on every path. j holds
 * the parent (busy) meanwhile, so that an ncclCommAbort or ncclCommDestroy
 * of it from another thread waits for j too, rather than close the
 * parent's bootstrap under it; an abort ends the wait, and the job. */
static ncclResult_t initJobAwaitTurn(struct initJob *j) {
  if (!j->after) return ncclSuccess;
  struct waitState w;
  waitBegin(&w, &j->parent->abortFlag, NULL, NULL, "an earlier split or shrink of the same parent in this group");
  w.timeoutNs = 0;
  while (!__atomic_load_n(&j->after->parentDone, __ATOMIC_ACQUIRE)) CHECK(waitPause(&w));
  if (!__atomic_load_n(&j->parent->abortFlag, __ATOMIC_ACQUIRE)) return ncclSuccess;
  WARN("%s : rank %d: its parent was aborted while an earlier split or shrink of it in this group ran", j->func,
       j->parent->rank);
  return ncclInvalidUsage;
}

ncclResult_t commInitChild(struct initJob *j, int nranks, int rank, int dev, const struct commOrigin *origin) {
  struct ncclComm *parent = j->parent;
  commPin(parent, 1); /* readable below, even if aborted meanwhile (then no child pends on it) */
  initJobParentDone(j);
  ncclResult_t res = commInit(j->comm, nranks, &j->id, rank, dev, j->blocking, origin);
  if (res == ncclInProgress) commPendOnChild(parent, *j->comm);
  commPin(parent, 0);
  return res;
}

static void *initJobThread(void *p) {
  struct initJob *j = p;
  struct commOrigin origin = {j->func, NULL, 0, 0, j->ids, &j->config, 0, j->setup};
  j->res = initJobAwaitTurn(j); /* the parent is held already (initJobsRun) */
  if (j->res == ncclSuccess)
    j->res = j->run    ? j->run(j)
             : j->made ? commInitSetup(j->made)
                       : commInit(j->comm, j->nranks, &j->id, j->rank, j->cudaDev, j->blocking, &origin);
  initJobParentDone(j);
  if (j->res != ncclSuccess && j->res != ncclInProgress) snprintf(j->why, sizeof j->why, "%s", logThreadLastError());
  return NULL;
}

/* Of failed inits run together, the one that explains the others: a rank
 * whose own system call failed (or chorus itself), before one refused
 * because another rank failed (ncclInvalidUsage) or one that saw another
 * rank go away (ncclRemoteError); the first of the most telling kind. */
static int initJobsCause(const struct initJob *jobs, int started) {
  int best = -1, bestWeight = 0;
  for (int i = 0; i < started; i++) {
    ncclResult_t r = jobs[i].res;
    if (r == ncclSuccess || r == ncclInProgress) continue;
    int weight = r == ncclSystemError || r == ncclInternalError ? 3 : r == ncclRemoteError ? 1 : 2;
    if (weight > bestWeight) {
      best = i;
      bestWeight = weight;
    }
  }
  return best;
}

void initJobsUndo(struct initJob *jobs, int n, int started, ncclResult_t res, const char *why) {
  for (int i = 0; i < n; i++) {
    struct initJob *j = &jobs[i];
    if (j->made) {
      int failed = i < started && j->res != ncclSuccess && j->res != ncclInProgress;
      if (!commGone(j->made)) commInitAbandon(j->made, failed ? j->res : res, failed && j->why[0] ? j->why : why);
    } else if (i < started && j->comm && *j->comm) {
      commFree(*j->comm, 0);
      *j->comm = NULL;
    }
  }
}

/* Ranks of one communicator in one process must rendezvous at the same
 * time, so each init runs on its own thread; returns the error that
 * explains the others (initJobsCause), whose WARN becomes the last error,
 * and on error no communicator is left working (initJobsUndo). */
ncclResult_t initJobsRun(struct initJob *jobs, int n) {
  if (n <= 0) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  int started = 0, inProgress = 0;
  for (int i = 0; i < n; i++) {
    struct initJob *j = &jobs[i];
    if (j->comm) *j->comm = NULL;
    j->parentDone = 0;
    j->after = NULL;
    for (int k = i - 1; j->run && j->parent && k >= 0 && !j->after; k--)
      if (jobs[k].run && jobs[k].parent == j->parent) j->after = &jobs[k];
    if (j->run && j->parent) { /* held from before its thread starts: see initJobParentDone */
      __atomic_add_fetch(&j->parent->busy, 1, __ATOMIC_ACQ_REL);
      j->parentHeld = 1;
    }
  }
  if (n == 1) {
    initJobThread(&jobs[0]);
    started = 1;
  } else {
    pthread_t *th = calloc((size_t)n, sizeof *th);
    if (!th) res = ncclSystemError;
    for (int i = 0; th && i < n; i++) {
      if (pthread_create(&th[i], NULL, initJobThread, &jobs[i]) != 0) {
        WARN("ncclCommInitRank : cannot start an init thread: %s", strerror(errno));
        res = ncclSystemError;
        break;
      }
      started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
  }
  for (int i = started; i < n; i++) initJobParentDone(&jobs[i]); /* never ran: let go of their parents */
  /* ncclInProgress: a nonblocking communicator still joining. */
  for (int i = 0; i < started; i++)
    if (jobs[i].res == ncclInProgress) inProgress = 1;
  int cause = res == ncclSuccess ? initJobsCause(jobs, started) : -1;
  if (cause >= 0) {
    res = jobs[cause].res;
    if (jobs[cause].why[0]) logSetLastError(jobs[cause].why); /* what ncclGetLastError says */
  }
  if (res != ncclSuccess) initJobsUndo(jobs, n, started, res, logThreadLastError());
  else
    for (int i = 0; i < n; i++)
      if (jobs[i].made) commInitPublish(jobs[i].made);
  return res == ncclSuccess && inProgress ? ncclInProgress : res;
}

/* A split or shrink of a nonblocking parent: its whole job, the agreement
 * over the parent included, may run after the call returns (as NCCL's,
 * whose ncclGroupEnd launches it on a thread and returns). */
static int initJobDetachable(const struct initJob *j) {
  return j->run && j->parent && j->setup == commSetupOnThread;
}

/* Jobs that run on a thread of their own after the call (initJobsStart),
 * which frees them. */
struct initBatch {
  int n;
  struct initJob *jobs;
  ncclComm_t *made;     /* [n] where the jobs put their communicators */
  ncclComm_t **handles; /* [n] the callers' pointers, given them when the jobs are done */
};

static void *initBatchThread(void *p) {
  struct initBatch *b = p;
  ncclResult_t res = initJobsRun(b->jobs, b->n);
  const char *why = logThreadLastError();
  for (int i = 0; i < b->n; i++) {
    /* Only a communicator is handed over: the caller's NULL (set at the
     * call) is never rewritten, so a caller that reads it early reads what
     * it read then. */
    if (b->made[i] && b->handles[i]) __atomic_store_n(b->handles[i], b->made[i], __ATOMIC_RELEASE);
    free(b->jobs[i].excluded);
    commJobEnd(b->jobs[i].parent, res, b->jobs[i].func, why);
  }
  free(b);
  return NULL;
}

ncclResult_t initJobsStart(struct initJob *jobs, int n) {
  int detach = n > 0;
  for (int i = 0; i < n; i++) detach &= initJobDetachable(&jobs[i]);
  /* one block: the batch, its jobs, where they put their communicators, the callers' pointers */
  struct initBatch *b = detach ? calloc(1, sizeof *b + (size_t)n * (sizeof *jobs + sizeof(ncclComm_t) +
                                                                     sizeof(ncclComm_t *)))
                               : NULL;
  if (!b) return initJobsRun(jobs, n);
  b->n = n;
  b->jobs = (struct initJob *)(b + 1);
  b->made = (ncclComm_t *)(b->jobs + n);
  b->handles = (ncclComm_t **)(b->made + n);
  for (int i = 0; i < n; i++) {
    b->jobs[i] = jobs[i];
    b->jobs[i].comm = &b->made[i];
    b->handles[i] = jobs[i].comm;
    jobs[i].excluded = NULL; /* the batch's now */
    if (jobs[i].comm) *jobs[i].comm = NULL; /* until the job makes it, as NCCL's */
    commJobBegin(jobs[i].parent);
  }
  pthread_attr_t attr;
  pthread_t th;
  int started = pthread_attr_init(&attr) == 0;
  if (started) {
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&th, &attr, initBatchThread, b) == 0;
    pthread_attr_destroy(&attr);
  }
  if (!started) { /* run here then, as a blocking parent's would */
    for (int i = 0; i < n; i++) jobs[i].excluded = b->jobs[i].excluded;
    for (int i = 0; i < n; i++) commJobEnd(jobs[i].parent, ncclSuccess, NULL, NULL);
    free(b);
    return initJobsRun(jobs, n);
  }
  return ncclInProgress;
}
