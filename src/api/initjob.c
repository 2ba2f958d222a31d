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

static void *initJobThread(void *p) {
  struct initJob *j = p;
  struct commOrigin origin = {j->func, NULL, 0, 0, j->ids};
  j->res = j->run ? j->run(j) : commInit(j->comm, j->nranks, &j->id, j->rank, j->cudaDev, j->blocking, &origin);
  return NULL;
}

/* Ranks of one communicator in one process must rendezvous at the same
 * time, so each init runs on its own thread; returns the first error, and
 * on error no communicator is left behind. */
ncclResult_t initJobsRun(struct initJob *jobs, int n) {
  if (n == 1) {
    initJobThread(&jobs[0]);
    return jobs[0].res;
  }
  pthread_t *th = calloc(n, sizeof *th);
  if (!th) return ncclSystemError;
  ncclResult_t res = ncclSuccess;
  int started = 0, inProgress = 0;
  for (int i = 0; i < n; i++) {
    *jobs[i].comm = NULL;
    if (pthread_create(&th[i], NULL, initJobThread, &jobs[i]) != 0) {
      WARN("ncclCommInitRank : cannot start an init thread: %s", strerror(errno));
      res = ncclSystemError;
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++) {
    pthread_join(th[i], NULL);
    /* ncclInProgress: a nonblocking communicator still joining. */
    if (jobs[i].res == ncclInProgress) inProgress = 1;
    else if (jobs[i].res != ncclSuccess && res == ncclSuccess) res = jobs[i].res;
  }
  if (res != ncclSuccess)
    for (int i = 0; i < started; i++)
      if (*jobs[i].comm) {
        commFree(*jobs[i].comm, 0);
        *jobs[i].comm = NULL;
      }
  free(th);
  return res == ncclSuccess && inProgress ? ncclInProgress : res;
}

