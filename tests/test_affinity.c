/* Helper threads follow the rank's CPU affinity: each rank pins itself to
 * one CPU before init, then runs over TCP with socket helper threads
 * (NCCL_SOCKET_NTHREADS), a stream (its worker thread) and the flight
 * recorder (its dump thread); every thread of the process must then be
 * allowed exactly that CPU, as NCCL's proxy threads are bound to the
 * rank's CPU set.
 *   test_affinity NRANKS
 * And chorus counts the CPUs the ranks' masks name together against the
 * ranks to tell whether each has a core (waits, auto single copy):
 *   test_affinity shared NRANKS - every rank pinned to the same CPU: each
 *              logs that its waits yield after a few spins;
 *   test_affinity apart NRANKS - each pinned to a CPU of its own (where
 *              there are as many): none does. */
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

/* The CPUs a thread of this process may run on, from /proc: "3" or "0-1". */
static int threadCpus(const char *tid, char *out, size_t len) {
  char path[320], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
  FILE *f = fopen(path, "r");
  if (!f) return -1; /* the thread has ended */
  out[0] = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "Cpus_allowed_list: %63s", out) == 1) break;
  fclose(f);
  (void)len;
  return out[0] ? 0 : -1;
}

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  cpu_set_t all;
  EXPECT(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity");
  int cpus[CPU_SETSIZE], ncpu = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &all)) cpus[ncpu++] = c;
  int mine = cpus[rank % ncpu];
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(mine, &one);
  EXPECT(sched_setaffinity(0, sizeof one, &one) == 0, "pin rank %d to CPU %d", rank, mine);

  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  cudaStream_t st;
  NCCLCHECK(chorusStreamCreate(&st));
  enum { COUNT = 1 << 20 };
  float *a = guardAlloc(sizeof(float) * COUNT);
  for (int i = 0; i < COUNT; i++) a[i] = (float)(rank + 1);
  NCCLCHECK(ncclAllReduce(a, a, COUNT, ncclFloat32, ncclSum, comm, st));
  NCCLCHECK(chorusStreamSynchronize(st));
  EXPECT(a[COUNT - 1] == (float)(n * (n + 1) / 2), "sum %g", (double)a[COUNT - 1]);

  char want[16], got[64];
  snprintf(want, sizeof want, "%d", mine);
  DIR *d = opendir("/proc/self/task");
  EXPECT(d != NULL, "no /proc/self/task");
  struct dirent *de;
  int threads = 0, bad = 0;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.' || threadCpus(de->d_name, got, sizeof got)) continue;
    threads++;
    if (strcmp(got, want)) {
      fprintf(stderr, "rank %d: thread %s may run on CPUs %s, the rank only on %s\n", rank, de->d_name, got, want);
      bad = 1;
    }
  }
  closedir(d);
  /* The rank's own, the stream's worker, the recorder's dump thread, the
   * bootstrap's and the socket helpers: more than two in any case. */
  EXPECT(threads > 2, "only %d threads", threads);
  EXPECT(!bad, "threads outside the rank's CPU set");
  NCCLCHECK(chorusStreamDestroy(st));
  NCCLCHECK(ncclCommDestroy(comm));
  EXPECT(guardCheck(a) == 0, "guards");
  guardFree(a);
  if (rank == 0) printf("test_affinity: %d ranks, %d threads each on the rank's own CPU\n", n, threads);
  return 0;
}

static char logDir[64];

/* Pins this rank to one CPU (the first it may run on, or its own), then
 * looks in its log for what init said about the cores. */
static int coresRank(int rank, int n, ncclUniqueId id, void *arg) {
  int apart = *(const int *)arg;
  cpu_set_t all, one;
  EXPECT(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity");
  int cpu = -1;
  for (int c = 0, k = 0; c < CPU_SETSIZE && cpu < 0; c++)
    if (CPU_ISSET(c, &all) && (!apart || k++ == rank)) cpu = c;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  EXPECT(sched_setaffinity(0, sizeof one, &one) == 0, "pin rank %d to CPU %d", rank, cpu);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  char path[128];
  snprintf(path, sizeof path, "%s/log.%d", logDir, (int)getpid());
  int yields = fileLinesWith(path, "waits yield after a few spins");
  EXPECT(yields >= 0, "rank %d: no log %s", rank, path);
  yields = yields > 0;
  unlink(path);
  EXPECT(yields == !apart, "rank %d on CPU %d (%s): init %s that its waits yield after a few spins", rank, cpu,
         apart ? "each rank its own" : "every rank the same", yields ? "said" : "did not say");
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 2 && (!strcmp(argv[1], "shared") || !strcmp(argv[1], "apart"))) {
    int n = atoi(argv[2]), apart = !strcmp(argv[1], "apart");
    cpu_set_t all;
    if (apart && (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < n)) {
      printf("test_affinity apart: fewer CPUs than %d ranks here: nothing to check\n", n);
      return 0;
    }
    if (logPerProcess(logDir, "affinity", "INIT")) return 1;
    int failed = runRanks(n, coresRank, &apart, 60);
    char path[128];
    snprintf(path, sizeof path, "%s/log.%d", logDir, (int)getpid());
    unlink(path);
    rmdir(logDir);
    return failed ? 1 : 0;
  }
  int n = argc > 1 ? atoi(argv[1]) : 2;
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("NCCL_SOCKET_NTHREADS", "2", 1);
  setenv("NCCL_NSOCKS_PERTHREAD", "2", 1);
  return runRanks(n, rankMain, NULL, 60) ? 1 : 0;
}
