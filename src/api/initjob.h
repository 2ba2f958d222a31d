/* Init jobs (initjob.c): the communicators a call or a group creates. */
#ifndef CHORUS_API_INITJOB_H
#define CHORUS_API_INITJOB_H
#include "api/comm.h"

/* A communicator to create: ncclCommInitRank inside a group only records it
 * (as NCCL does), so that one thread can create several ranks; ncclGroupEnd
 * runs all recorded inits concurrently. */
struct initJob {
  /* what makes the communicator from the parent (split, shrink, grow);
   * NULL: a rendezvous at id as rank of nranks */
  ncclResult_t (*run)(struct initJob *job);
  ncclComm_t *comm; /* where the communicator goes when the job makes it (NULL: made already) */
  /* ncclCommInitRank and the like inside a group: the communicator made at
   * the call, whose handle the caller has (commInitMake); the job sets it
   * up, and a group that fails leaves it failed (initJobsUndo). The group
   * holds it (commGroupHold) until it ends. */
  struct ncclComm *made;
  int nranks, rank, cudaDev, blocking;
  struct commConfig config;
  ncclUniqueId id;
  ncclResult_t res;
  /* ncclCommSplit, ncclCommShrink, ncclCommGrow: a communicator made from
   * parent (what nranks, rank and id are is worked out with the parent's
   * other ranks) */
  struct ncclComm *parent;
  int color, key;
  /* ncclCommShrink: the parent's ranks that stay out (nranks bytes, owned
   * by the job: groupInit and ncclGroupEnd free it) */
  char *excluded;
  int shrinkFlags;
  int parentHeld; /* the job counts in parent->busy (initJobParentDone) */
  /* An earlier job of the same group on the same parent (initJobsRun):
   * this one's agreement over the parent's bootstrap starts once that one
   * is done with the parent (parentDone), so that a group's splits and
   * shrinks of one parent agree in the order they were called, as they
   * would one after the other (run at once, their messages crossed). */
  struct initJob *after;
  int parentDone;
  int setup;      /* where the communicator's rendezvous runs (commSetupWhere) */
  const char *func; /* the call, for the logs (commOrigin) */
  uint64_t ids;     /* ncclCommInitRankScalable's ids, hashed (commOrigin); 0: one id */
  char why[512];    /* the init thread's last WARN when res is an error */
};
/* The job is done with its parent (split, shrink, grow): from initJobsRun
 * on (before its thread starts) until this is called (by its run function
 * before the child's own rendezvous, else when the run returns) it counts
 * in parent->busy, so that ncclCommAbort or ncclCommDestroy of the parent
 * from another thread waits until it no longer reads the parent (an abort
 * ends its waits first). */
void initJobParentDone(struct initJob *job);
/* The shrink itself, on the init thread (shrink.c). */
ncclResult_t commShrinkRun(struct initJob *job);
/* A grow's parent rank, on the init thread (grow.c). */
ncclResult_t commGrowRun(struct initJob *job);
/* The new communicator of a split or shrink (j->comm), rank of nranks at
 * j->id, once its parent's ranks have agreed: done with the parent
 * (initJobParentDone), then commInit; where its setup goes on on its
 * thread (j->setup), the parent is pending on it (commPendOnChild). */
ncclResult_t commInitChild(struct initJob *j, int nranks, int rank, int dev, const struct commOrigin *origin);
/* The split itself, on the init thread (split.c). */
ncclResult_t commSplitRun(struct initJob *job);
/* Runs inits concurrently, one thread each; returns the error that
 * explains the others (see initjob.c), and on error no communicator is
 * left behind. */
ncclResult_t initJobsRun(struct initJob *jobs, int n);
/* What a call or a group's end runs its jobs with: initJobsRun, but where
 * every job is a split or shrink of a nonblocking parent, the jobs run
 * after the call returns ncclInProgress, on a thread of their own, as
 * NCCL's do: the communicators of one thread's ranks then agree however
 * that thread calls them, one by one or in a group. Meanwhile each parent
 * says ncclInProgress (commJobBegin), the new communicator's handle is
 * NULL until the job has made it (then its setup pends the parent:
 * commPendOnChild), and a job that fails fails the parent's state
 * (commJobEnd). The jobs' excluded lists are theirs then (set NULL here). */
ncclResult_t initJobsStart(struct initJob *jobs, int n);
/* After jobs[0..n) failed with res (or their group failed before they ran:
 * started 0), nothing they made is left working: a communicator a job
 * made is freed and its pointer set NULL; one made at the call
 * (job.made) stays, failed with the job's own error, else res and why. */
void initJobsUndo(struct initJob *jobs, int n, int started, ncclResult_t res, const char *why);

#endif
