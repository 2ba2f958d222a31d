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
 *              there are as many): none does.
 * And a rank whose CPU something else runs on moves off it (waits time
 * their first yield):
 *   test_affinity together - 2 ranks made to share one CPU after init,
 *              with the machine's CPUs their mask, then call 8-byte
 *              AllReduces: where they ran on one CPU for 200 calls in a
 *              row, at least one logs that it moved (a kernel that parts
 *              them by itself leaves nothing to check), and every mask is
 *              as it was.
 * And init places the ranks of a machine a CPU each (forked ranks start
 * on their parent's):
 *   test_affinity placed - 2 ranks start on one CPU with the machine's
 *              CPUs their mask; each logs the CPU init put it on, the two
 *              differ, and every mask is as it was. */
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
  EXPECT(pinToCpu(mine) == 0, "pin rank %d to CPU %d", rank, mine);

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
  cpu_set_t all;
  EXPECT(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity");
  int cpu = -1;
  for (int c = 0, k = 0; c < CPU_SETSIZE && cpu < 0; c++)
    if (CPU_ISSET(c, &all) && (!apart || k++ == rank)) cpu = c;
  EXPECT(pinToCpu(cpu) == 0, "pin rank %d to CPU %d", rank, cpu);
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

/* Shared by the 2 ranks: where each runs now, and the most calls in a row
 * each made while the other was last seen on its CPU. */
static volatile int *cpuNow, *longestTogether;

static int togetherRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  cpu_set_t all;
  EXPECT(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity");
  int cpu = 0, placedOnly = arg != NULL;
  while (!CPU_ISSET(cpu, &all)) cpu++;
  ncclComm_t comm;
  /* Onto the first CPU, then the whole mask back: the rank stays where it
   * is, and init sees a CPU per rank. Before init it places them apart
   * (placed), after it nothing does but the waits (together). */
  if (placedOnly) {
    EXPECT(pinToCpu(cpu) == 0 && sched_setaffinity(0, sizeof all, &all) == 0, "pin and unpin rank %d", rank);
    NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
    cpu_set_t after;
    EXPECT(sched_getaffinity(0, sizeof after, &after) == 0 && CPU_EQUAL(&after, &all),
           "rank %d: init changed its CPU affinity (%d CPUs, was %d)", rank, CPU_COUNT(&after), CPU_COUNT(&all));
    NCCLCHECK(ncclCommDestroy(comm));
    return 0;
  }
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  EXPECT(pinToCpu(cpu) == 0, "pin rank %d to CPU %d", rank, cpu);
  EXPECT(sched_setaffinity(0, sizeof all, &all) == 0, "unpin rank %d", rank);
  float in[2] = {(float)rank, 1.0f}, out[2];
  int run = 0, longest = 0;
  for (int i = 0; i < 2000; i++) {
    int now = sched_getcpu();
    cpuNow[rank] = now;
    run = cpuNow[1 - rank] == now ? run + 1 : 0;
    if (run > longest) longest = run;
    NCCLCHECK(ncclAllReduce(in, out, 2, ncclFloat32, ncclSum, comm, NULL));
    EXPECT(out[0] == (float)(n * (n - 1) / 2) && out[1] == (float)n, "call %d: %g %g", i, (double)out[0],
           (double)out[1]);
  }
  longestTogether[rank] = longest;
  cpu_set_t after;
  EXPECT(sched_getaffinity(0, sizeof after, &after) == 0 && CPU_EQUAL(&after, &all),
         "rank %d: its CPU affinity changed (%d CPUs, was %d)", rank, CPU_COUNT(&after), CPU_COUNT(&all));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* Lines with needle in the logs of logDir's every process. */
static int logsLinesWith(const char *needle) {
  DIR *d = opendir(logDir);
  if (!d) return -1;
  struct dirent *de;
  int lines = 0;
  char path[384];
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "log.", 4)) continue;
    snprintf(path, sizeof path, "%s/%s", logDir, de->d_name);
    int k = fileLinesWith(path, needle);
    if (k > 0) lines += k;
  }
  closedir(d);
  return lines;
}

/* The CPUs the ranks' "starts on CPU c" lines name, as a bitmask (-1: no log). */
static long placedCpus(int *lines) {
  DIR *d = opendir(logDir);
  if (!d) return -1;
  long mask = 0;
  *lines = 0;
  struct dirent *de;
  char path[384], line[512];
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "log.", 4)) continue;
    snprintf(path, sizeof path, "%s/%s", logDir, de->d_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
      const char *at = strstr(line, "starts on CPU ");
      int c;
      if (at && sscanf(at, "starts on CPU %d", &c) == 1 && c >= 0 && c < 62) {
        mask |= 1L << c;
        ++*lines;
      }
    }
    if (f) fclose(f);
  }
  closedir(d);
  return mask;
}

static int placed(void) {
  cpu_set_t all;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2 || CPU_COUNT(&all) < online ||
      testLaunched()) {
    printf("test_affinity placed: one CPU, a mask short of the CPUs online, or a launcher's ranks: nothing to check\n");
    return 0;
  }
  if (logPerProcess(logDir, "affinity", "INIT")) return 1;
  int failed = runRanks(2, togetherRank, (void *)1, 60), lines = 0;
  long cpus = placedCpus(&lines);
  printf("test_affinity placed: %d rank(s) logged where init put them, CPUs mask 0x%lx\n", lines, cpus);
  if (!failed && (lines != 2 || __builtin_popcountl(cpus) != 2)) {
    fprintf(stderr, "test_affinity placed: 2 ranks that started on one CPU were not placed on two (%d lines, CPUs 0x%lx)\n",
            lines, cpus);
    failed = 1;
  }
  return failed ? 1 : 0;
}

static int together(void) {
  cpu_set_t all;
  if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2 || testLaunched()) {
    printf("test_affinity together: one CPU here, or ranks started by a launcher: nothing to check\n");
    return 0;
  }
  volatile int *page = mmap(NULL, 4 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return 1;
  cpuNow = page;
  longestTogether = page + 2;
  cpuNow[0] = cpuNow[1] = -1;
  if (logPerProcess(logDir, "affinity", "INIT")) return 1;
  int failed = runRanks(2, togetherRank, NULL, 60);
  int moves = logsLinesWith("moved to CPU");
  int longest = longestTogether[0] > longestTogether[1] ? longestTogether[0] : longestTogether[1];
  printf("test_affinity together: at most %d calls in a row on one CPU; %d rank(s) logged a move\n", longest, moves);
  /* 200 calls in a row together: the ranks shared a CPU (the kernel may
   * part them before the calls on its own, or move one back meanwhile). */
  if (!failed && moves <= 0 && longest >= 200) {
    fprintf(stderr, "test_affinity together: 2 ranks shared a CPU for %d calls in a row and neither moved off it\n",
            longest);
    failed = 1;
  }
  return failed ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "together")) return together();
  if (argc > 1 && !strcmp(argv[1], "placed")) return placed();
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
