/* The first reading of the parameters from many threads at once, as a
 * process whose threads each start a communicator: every thread returns
 * with the environment plugin's values in force, the log's included
 * (tests/envplugin.sh runs it with the plugin's NCCL_DEBUG=INFO and looks
 * for INFO lines). test_envthreads NTHREADS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "nccl.h"

static pthread_barrier_t start;

static void *firstCall(void *arg) {
  (void)arg;
  ncclUniqueId id;
  pthread_barrier_wait(&start);
  return ncclGetUniqueId(&id) == ncclSuccess ? NULL : (void *)1;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 8;
  if (n < 1 || n > 64) return 2;
  pthread_t t[64];
  pthread_barrier_init(&start, NULL, (unsigned)n);
  for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, firstCall, NULL);
  int failed = 0;
  for (int i = 0; i < n; i++) {
    void *r;
    pthread_join(t[i], &r);
    failed |= r != NULL;
  }
  ncclUniqueId id;
  ncclComm_t comm;
  if (failed || ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess ||
      ncclCommDestroy(comm) != ncclSuccess) {
    fprintf(stderr, "test_envthreads: a call failed\n");
    return 1;
  }
  printf("test_envthreads: %d threads\n", n);
  return 0;
}
