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
static _Thread_local int groupCount, groupCap;
static _Thread_local ncclResult_t groupError;
static _Thread_local struct initJob *groupInits;
static _Thread_local int groupInitCount, groupInitCap;

/* The per-thread buffers above are freed when their thread exits. */
static pthread_key_t threadCacheKey;
static pthread_once_t threadCacheOnce = PTHREAD_ONCE_INIT;
static void threadCacheFree(void *unused) {
  (void)unused;
  free(groupItems);
  free(groupInits);
  groupItems = NULL;
  groupInits = NULL;
  groupCap = groupInitCap = 0;
}
static void threadCacheKeyCreate(void) { pthread_key_create(&threadCacheKey, threadCacheFree); }
/* Called before a thread first allocates any of them. */
static void threadCacheInUse(void) {
  pthread_once(&threadCacheOnce, threadCacheKeyCreate);
  if (pthread_getspecific(threadCacheKey) == NULL) pthread_setspecific(threadCacheKey, &threadCacheKey);
}

ncclResult_t groupEnqueue(struct groupItem *item) {
  const struct collDesc *d = &item->desc;
  /* The call's own profiler event ends as it returns (a call outside a
   * group is its own group, as in NCCL). */
  if (item->comm->prof.ctx) {
    profApiCall(&item->comm->prof, &item->prof, groupDepth ? groupDepth : 1, d->coll == collSend || d->coll == collRecv,
                collName(d->coll), d->count, d->dtype, d->root, (void *)item->stream);
    profApiCallEnd(&item->prof);
  }
  if (groupDepth == 0) {
    profApiGroupEndBegin();
    ncclResult_t res = launchItems(item, 1);
    profApiGroupEndDone();
    return res;
  }
  if (groupCount == groupCap) {
    if (groupCap == 0) threadCacheInUse();
    int cap = groupCap ? 2 * groupCap : 16;
    struct groupItem *g = realloc(groupItems, sizeof *g * cap);
    if (!g) {
      groupError = ncclSystemError;
      return ncclSystemError;
    }
    groupItems = g;
    groupCap = cap;
  }
  groupItems[groupCount++] = *item;
  return ncclSuccess;
}

ncclResult_t groupInit(const struct initJob *job) {
  if (groupDepth == 0) {
    struct initJob j = *job;
    ncclResult_t res = initJobsRun(&j, 1);
    free(j.excluded);
    return res;
  }
  if (groupInitCount == groupInitCap) {
    if (groupInitCap == 0) threadCacheInUse();
    int cap = groupInitCap ? 2 * groupInitCap : 8;
    struct initJob *g = realloc(groupInits, sizeof *g * cap);
    if (!g) {
      free(job->excluded);
      return groupNoteError(ncclSystemError);
    }
    groupInits = g;
    groupInitCap = cap;
  }
  groupInits[groupInitCount++] = *job;
  return ncclSuccess;
}

ncclResult_t groupNoteError(ncclResult_t res) {
  if (res != ncclSuccess && groupDepth > 0 && groupError == ncclSuccess) groupError = res;
  return res;
}

NCCL_API(ncclResult_t, ncclGroupStart, void) {
  groupDepth++;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void) {
  if (groupDepth == 0) {
    WARN("ncclGroupEnd: not in a group call.");
    return ncclInvalidUsage;
  }
  if (--groupDepth > 0) return ncclSuccess;
  profApiGroupEndBegin();
  ncclResult_t res = groupError;
  if (res == ncclSuccess && groupInitCount > 0) res = initJobsRun(groupInits, groupInitCount);
  if (res == ncclSuccess) res = launchItems(groupItems, groupCount);
  profApiGroupEndDone();
  for (int i = 0; i < groupInitCount; i++) free(groupInits[i].excluded);
  groupCount = 0;
  groupInitCount = 0;
  groupError = ncclSuccess;
  return res;
}

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo) {
  if (simInfo == NULL || simInfo->magic != 0x74685283) {
    WARN("ncclGroupSimulateEnd : simInfo argument not initialized via NCCL_SIM_INFO_INITIALIZER");
    return ncclInvalidArgument;
  }
  if (groupDepth == 0) {
    WARN("ncclGroupSimulateEnd: not in a group call.");
    return ncclInvalidUsage;
  }
  if (--groupDepth > 0) return ncclSuccess;
  /* The tuner's prediction for what the group holds (each call was tuned
   * when it was made); nothing runs, and the group is over. */
  ncclResult_t res = groupError;
  double us = 0;
  for (int i = 0; i < groupCount; i++) us += groupItems[i].plan.us > 0 ? groupItems[i].plan.us : 0;
  if (res == ncclSuccess) simInfo->estimatedTime = (float)us;
  profApiGroupEndBegin();
  profApiGroupEndDone();
  for (int i = 0; i < groupInitCount; i++) free(groupInits[i].excluded);
  groupCount = 0;
  groupInitCount = 0;
  groupError = ncclSuccess;
  return res;
}
