#include "api/group.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/launch.h"
#include "core/err.h"
#include "core/log.h"

/* Group state is per thread, as in NCCL. */
static _Thread_local int groupDepth;
static _Thread_local struct groupItem *groupItems;
static _Thread_local struct ncclComm **groupHeld; /* each item's communicator, which the group holds (commGroupHold) */
static _Thread_local int groupCount, groupCap;
static _Thread_local ncclResult_t groupError;
static _Thread_local struct initJob *groupInits;
static _Thread_local int groupInitCount, groupInitCap;
static _Thread_local struct groupLater *groupLaters;
static _Thread_local int groupLaterCount, groupLaterCap;
static _Thread_local int groupBlocking = -1; /* the group's communicators' (config.blocking); -1: none yet */

/* The per-thread buffers above are freed when their thread exits. */
static pthread_key_t threadCacheKey;
static pthread_once_t threadCacheOnce = PTHREAD_ONCE_INIT;
static void threadCacheFree(void *unused) {
  (void)unused;
  free(groupItems);
  free(groupHeld);
  free(groupInits);
  free(groupLaters);
  groupItems = NULL;
  groupHeld = NULL;
  groupInits = NULL;
  groupLaters = NULL;
  groupCap = groupInitCap = groupLaterCap = 0;
}
static void threadCacheKeyCreate(void) { pthread_key_create(&threadCacheKey, threadCacheFree); }
/* Called before a thread first allocates any of them. */
static void threadCacheInUse(void) {
  pthread_once(&threadCacheOnce, threadCacheKeyCreate);
  if (pthread_getspecific(threadCacheKey) == NULL) pthread_setspecific(threadCacheKey, &threadCacheKey);
}

/* Room for one more element in a per-thread array of *cap elements of
 * size bytes that holds count: 1, or 0 when out of memory (the array is
 * unchanged). */
static int groupRoom(void **array, int *cap, int count, size_t size) {
  if (count < *cap) return 1;
  if (*cap == 0) threadCacheInUse();
  int more = *cap ? 2 * *cap : 8;
  void *grown = realloc(*array, size * (size_t)more);
  if (!grown) return 0;
  *array = grown;
  *cap = more;
  return 1;
}

/* A group's inits (and splits, shrinks and grows, by their parent's mode)
 * are all blocking or all nonblocking, as NCCL's ncclAsyncLaunch requires
 * of its jobs: a job whose mode differs from the group's so far fails. A
 * call on a communicator joins without that check (groupJoinCall). */
static ncclResult_t groupJoin(int blocking) {
  if (groupBlocking == -1) groupBlocking = blocking;
  if (groupBlocking == blocking) return ncclSuccess;
  WARN("Blocking and nonblocking communicators are not allowed in the same group.");
  return groupNoteError(ncclInvalidArgument);
}

/* A collective's, a point-to-point's or a one-sided call's communicator
 * joins the group: NCCL's ncclGroupCommJoin checks nothing and sets the
 * group's mode to its communicator's, so calls on blocking and nonblocking
 * communicators share a group (all run at ncclGroupEnd), and an init that
 * joins after them is held to the last one's mode. */
static void groupJoinCall(int blocking) { groupBlocking = blocking; }

ncclResult_t groupEnqueue(struct groupItem *item) {
  const struct collDesc *d = &item->desc;
  /* The call's own profiler event ends as it returns (a call outside a
   * group is its own group, as in NCCL). */
  if (item->comm->prof.ctx && d->count > 0) { /* a no-op has no events */
    profApiCall(&item->comm->prof, &item->prof, groupDepth ? groupDepth : 1, d->coll == collSend || d->coll == collRecv,
                collName(d->coll), d->count, d->dtype, d->root, (void *)item->stream);
    profApiCallEnd(&item->prof);
  }
  if (groupDepth == 0) {
    if (d->count == 0) return launchItems(item, 1); /* a no-op: numbered, no events */
    profApiGroupEndBegin();
    ncclResult_t res = launchItems(item, 1);
    profApiGroupEndDone();
    return res;
  }
  if (groupCount == groupCap) {
    if (groupCap == 0) threadCacheInUse();
    int cap = groupCap ? 2 * groupCap : 16;
    struct groupItem *g = realloc(groupItems, sizeof *g * cap);
    if (g) groupItems = g;
    struct ncclComm **h = g ? realloc(groupHeld, sizeof *h * cap) : NULL;
    if (h) groupHeld = h;
    if (!g || !h) {
      groupError = ncclSystemError;
      return ncclSystemError;
    }
    groupCap = cap;
  }
  groupJoinCall(item->comm->blocking);
  commGroupHold(item->comm, 1);
  groupHeld[groupCount] = item->comm;
  groupItems[groupCount++] = *item;
  return ncclSuccess;
}

int groupOpen(void) { return groupDepth > 0; }

/* The mode an init job joins a group with: a split's or shrink's is its
 * parent's (NCCL launches their jobs on the parent), which says where its
 * setup runs; any other's (a grow's too, launched on the new
 * communicator) its communicator's. */
static int initJobMode(const struct initJob *job) {
  return job->setup == commSetupByMode ? job->blocking : job->setup == commSetupInCall;
}

ncclResult_t groupInit(const struct initJob *job) {
  if (groupDepth == 0) {
    struct initJob j = *job;
    ncclResult_t res = initJobsStart(&j, 1);
    free(j.excluded);
    return res;
  }
  ncclResult_t mixed = groupJoin(initJobMode(job));
  if (mixed != ncclSuccess) {
    free(job->excluded);
    return mixed;
  }
  if (!groupRoom((void **)&groupInits, &groupInitCap, groupInitCount, sizeof *groupInits)) {
    free(job->excluded);
    return groupNoteError(ncclSystemError);
  }
  struct initJob j = *job;
  if (!j.run) {
    /* As NCCL's: the handle is the caller's now (it may read it before
     * ncclGroupEnd, or pass a pointer that is gone by then); the group
     * sets the communicator up. A split, shrink or grow of a parent gives
     * its handle at ncclGroupEnd, as NCCL's do. */
    struct commOrigin origin = {j.func, NULL, 0, 0, j.ids, &j.config, 0, j.setup};
    CHECK(groupNoteError(commInitMake(&j.made, j.nranks, &j.id, j.rank, j.cudaDev, j.blocking, &origin)));
    commGroupHold(j.made, 1);
    *j.comm = j.made;
    j.comm = NULL;
  }
  /* A split's, shrink's or grow's parent is held as a call's communicator
   * is: destroyed or aborted meanwhile, it fails the group (revoked, it does
   * not: groupCommGone); ncclCommFinalize refuses it meanwhile. */
  if (j.parent) commGroupHold(j.parent, 1);
  groupInits[groupInitCount++] = j;
  /* ncclSuccess for a nonblocking one too: NCCL's asks the new
   * communicator's state, which says ncclInProgress only from the
   * outermost ncclGroupEnd on (which itself returns ncclInProgress). */
  return ncclSuccess;
}

ncclResult_t groupDefer(const struct groupLater *later) {
  if (groupDepth == 0) return later->issue(later->arg);
  groupJoinCall(later->comm->blocking);
  ncclResult_t res = ncclSuccess;
  if (!groupRoom((void **)&groupLaters, &groupLaterCap, groupLaterCount, sizeof *groupLaters))
    res = groupNoteError(ncclSystemError);
  if (res != ncclSuccess) {
    later->drop(later->arg);
    return res;
  }
  commGroupHold(later->comm, 1);
  groupLaters[groupLaterCount++] = *later;
  return ncclSuccess;
}

/* Issues the held calls that are early (or not) when run, each once; the
 * first error is kept in *res, and once there is one (or with run 0) the
 * rest are dropped. */
static void groupIssueLaters(int early, int run, ncclResult_t *res) {
  for (int i = 0; i < groupLaterCount; i++) {
    struct groupLater *l = &groupLaters[i];
    if (l->early != early || !l->arg) continue;
    if (run && *res == ncclSuccess) *res = l->issue(l->arg);
    else l->drop(l->arg);
    l->arg = NULL;
  }
}

ncclResult_t groupNoteError(ncclResult_t res) {
  if (res != ncclSuccess && res != ncclInProgress && groupDepth > 0 && groupError == ncclSuccess) groupError = res;
  return res;
}

ncclResult_t groupFailsAtEnd(ncclResult_t res) {
  if (groupDepth == 0) return res;
  groupNoteError(res);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupStart, void) {
  groupDepth++;
  return ncclSuccess;
}

/* A communicator destroyed, aborted, revoked or suspended while the group
 * held its calls (from this thread or another): then none of the group's
 * calls run, as none would had it come before them. A parent that a split,
 * shrink or grow makes a communicator from may be revoked (parent 1): a
 * revoked communicator is there to be split or shrunk, and NCCL refuses
 * revoked communicators their collectives only, in a group or not. */
static ncclResult_t groupCommGone(const struct ncclComm *comm, int parent, const char *call) {
  const char *what = commGone(comm)                                                 ? "destroyed or aborted"
                     : !parent && __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE) ? "revoked (ncclCommRevoke)"
                     : __atomic_load_n(&comm->suspended, __ATOMIC_ACQUIRE)            ? "suspended (ncclCommSuspend)"
                                                                                      : NULL;
  if (!what) return ncclSuccess;
  WARN("%s : comm %p (rank %d) was %s while the group held its calls: none of the group's calls ran", call,
       (void *)comm, comm->rank, what);
  return ncclInvalidUsage;
}

static ncclResult_t groupCommsLive(const char *call) {
  for (int i = 0; i < groupCount; i++) CHECK(groupCommGone(groupHeld[i], 0, call));
  for (int i = 0; i < groupLaterCount; i++) CHECK(groupCommGone(groupLaters[i].comm, 0, call));
  for (int i = 0; i < groupInitCount; i++) {
    if (groupInits[i].made) CHECK(groupCommGone(groupInits[i].made, 0, call));
    if (groupInits[i].parent) CHECK(groupCommGone(groupInits[i].parent, 1, call));
  }
  return ncclSuccess;
}

/* What ncclGroupEnd and ncclGroupSimulateEnd share, as NCCL's
 * ncclGroupEndInternal: the outermost end runs the group's inits, then
 * launches its operations, or with simInfo predicts their time instead
 * (a NULL simInfo is a plain end); whatever happens the group is over. */
static ncclResult_t groupEnd(ncclSimInfo_t *simInfo, const char *call) {
  if (groupDepth == 0) {
    WARN("%s: not in a group call.", call);
    return ncclInvalidUsage;
  }
  if (--groupDepth > 0) return ncclSuccess;
  profApiGroupEndBegin();
  ncclResult_t res = groupError;
  if (res == ncclSuccess && simInfo && simInfo->magic != 0x74685283) {
    WARN("%s : simInfo argument not initialized via NCCL_SIM_INFO_INITIALIZER", call);
    res = ncclInvalidArgument;
  }
  if (res == ncclSuccess) res = groupCommsLive(call);
  if (res == ncclSuccess && groupInitCount > 0) res = initJobsStart(groupInits, groupInitCount);
  else if (res != ncclSuccess) initJobsUndo(groupInits, groupInitCount, 0, res, logThreadLastError()); /* none ran */
  /* Nonblocking inits still joining: the group's other calls run all the same */
  int initsInProgress = res == ncclInProgress;
  if (initsInProgress) res = ncclSuccess;
  int run = !simInfo; /* else nothing runs */
  groupIssueLaters(1, run, &res);
  if (res == ncclSuccess && run) res = launchItems(groupItems, groupCount);
  groupIssueLaters(0, run, &res);
  if (res == ncclSuccess && simInfo && groupCount > 0) {
    /* The tuner's prediction for what the group holds (each call was tuned
     * when it was made); nothing runs. An empty group leaves the caller's
     * value (the initializer's -1), as NCCL's does. */
    double us = 0;
    for (int i = 0; i < groupCount; i++) us += groupItems[i].plan.us > 0 ? groupItems[i].plan.us : 0;
    simInfo->estimatedTime = (float)us;
  }
  profApiGroupEndDone();
  for (int i = 0; i < groupInitCount; i++) {
    free(groupInits[i].excluded);
    if (groupInits[i].made) commGroupHold(groupInits[i].made, 0);
    if (groupInits[i].parent) commGroupHold(groupInits[i].parent, 0);
  }
  for (int i = 0; i < groupCount; i++) commGroupHold(groupHeld[i], 0);
  for (int i = 0; i < groupLaterCount; i++) commGroupHold(groupLaters[i].comm, 0);
  groupCount = 0;
  groupLaterCount = 0;
  groupInitCount = 0;
  groupError = ncclSuccess;
  groupBlocking = -1;
  return res == ncclSuccess && initsInProgress ? ncclInProgress : res;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void) { return groupEnd(NULL, "ncclGroupEnd"); }

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo) {
  return groupEnd(simInfo, "ncclGroupSimulateEnd");
}
