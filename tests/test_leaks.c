/* Nothing leaks: after ncclCommDestroy or ncclCommAbort (including an abort
 * of an init whose peers never came, and a communicator whose collective
 * failed), the process has the threads, file descriptors and memory
 * mappings it had before (and running out of descriptors part way through
 * an init fails it at once); the heap is checked by LeakSanitizer at exit in
 * `make asan` builds. One process drives every rank (ncclCommInitAll and
 * ncclCommInitRank on threads), so all of it is visible here. Run it with
 * NCCL_SHM_DISABLE=1 too (sockets instead of shared memory). glibc keeps
 * the stacks of ended threads and per-thread malloc arenas mapped for
 * reuse, as many as threads ran at once: ctest turns both caches off
 * (GLIBC_TUNABLES) so that the mapping count means ours. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

#define N 3

static int countDir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static int countMaps(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return 0; /* the sanitizer's allocator maps memory as it goes; LeakSanitizer checks the heap at exit */
#endif
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  int n = 0, c;
  while ((c = fgetc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

struct snapshot {
  int threads, fds, maps;
};

static void saveMaps(const char *path) {
  if (!getenv("CHORUS_TEST_SHOW_MAPS")) return;
  char cmd[256];
  snprintf(cmd, sizeof cmd, "cp /proc/%d/maps %s", (int)getpid(), path);
  if (system(cmd) != 0) perror("system");
}

static void *nothing(void *p) { return p; }

static struct snapshot take(void) {
  /* A detached thread that ended (the bootstrap root) leaves its stack on
   * glibc's list until the next thread starts: start and join one. */
  pthread_t t;
  if (pthread_create(&t, NULL, nothing, NULL) == 0) pthread_join(t, NULL);
  struct snapshot s = {countDir("/proc/self/task"), countDir("/proc/self/fd"), countMaps()};
  return s;
}

/* Threads that end on their own (the bootstrap root) take a moment. */
static int sameAsBefore(struct snapshot before, const char *what) {
  struct snapshot now = take();
  for (int i = 0; i < 200 && (now.threads != before.threads || now.fds != before.fds || now.maps != before.maps); i++) {
    usleep(10000);
    now = take();
  }
  if (now.threads == before.threads && now.fds == before.fds && now.maps == before.maps) return 1;
  fprintf(stderr, "after %s: threads %d -> %d, fds %d -> %d, mappings %d -> %d\n", what, before.threads, now.threads,
          before.fds, now.fds, before.maps, now.maps);
  saveMaps("/tmp/chorus-maps-after");
  return 0;
}

static int runAll(int abortThem) {
  ncclComm_t comms[N];
  NCCLCHECK(ncclCommInitAll(comms, N, NULL));
  float x[N][64], y[N][64];
  for (int r = 0; r < N; r++)
    for (int i = 0; i < 64; i++) x[r][i] = (float)r;
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < N; r++) NCCLCHECK(ncclAllReduce(x[r], y[r], 64, ncclFloat, ncclSum, comms[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  EXPECT(y[N - 1][63] == N * (N - 1) / 2, "AllReduce gave %g", y[N - 1][63]);
  /* A stream (a worker thread) too. */
  cudaStream_t s;
  NCCLCHECK(chorusStreamCreate(&s));
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < N; r++) NCCLCHECK(ncclBroadcast(x[r], y[r], 64, ncclFloat, 1, comms[r], s));
  NCCLCHECK(ncclGroupEnd());
  NCCLCHECK(chorusStreamSynchronize(s));
  NCCLCHECK(chorusStreamDestroy(s));
  for (int r = 0; r < N; r++) NCCLCHECK(abortThem ? ncclCommAbort(comms[r]) : ncclCommDestroy(comms[r]));
  return 0;
}

/* An init that waits for a rank that never comes, aborted by a watchdog. */
static int abortedInit(void) {
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm;
  ncclResult_t res = ncclCommInitRankConfig(&comm, 2, id, 0, &cfg);
  EXPECT(res == ncclInProgress, "init returned %s", ncclGetErrorString(res));
  usleep(100000);
  NCCLCHECK(ncclCommAbort(comm));
  return 0;
}

/* Ranks on threads; rank N-1 aborts right after init, so the others'
 * collective fails (a dead peer), then they destroy. */
struct failArg {
  ncclUniqueId id;
  int rank;
  int rc;
};
static void *failRank(void *p) {
  struct failArg *a = p;
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, N, a->id, a->rank) != ncclSuccess) {
    a->rc = 1;
    return NULL;
  }
  if (a->rank == N - 1) {
    ncclCommAbort(comm);
    return NULL;
  }
  float v = 1;
  ncclResult_t res = ncclAllReduce(&v, &v, 1, ncclFloat, ncclSum, comm, NULL);
  if (res != ncclRemoteError) {
    fprintf(stderr, "rank %d: expected ncclRemoteError, got %s\n", a->rank, ncclGetErrorString(res));
    a->rc = 1;
  }
  ncclCommDestroy(comm);
  return NULL;
}
static int failedCollective(void) {
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  pthread_t t[N];
  struct failArg a[N];
  for (int r = 0; r < N; r++) {
    a[r] = (struct failArg){id, r, 0};
    pthread_create(&t[r], NULL, failRank, &a[r]);
  }
  int rc = 0;
  for (int r = 0; r < N; r++) {
    pthread_join(t[r], NULL);
    rc |= a[r].rc;
  }
  return rc;
}

/* Out of file descriptors part way through ncclCommInitAll (the root's
 * accept, a rank's socket, a shared-memory segment's descriptor, at each
 * limit another): every call fails at once with ncclSystemError and says
 * why, none waits for the timeout (a rank whose root or peer in this process
 * failed once waited for it), and with the limit back a communicator is
 * made. In a child per limit, forked before this process has threads. */
static int outOfDescriptors(void) {
  int failed = 0;
  for (int extra = 10; extra <= 80; extra += 7) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(30);
      struct rlimit old, rl;
      getrlimit(RLIMIT_NOFILE, &old);
      rl = old; /* the soft limit only: a hard one lowered cannot be raised again without privilege */
      rl.rlim_cur = (rlim_t)(countDir("/proc/self/fd") + extra);
      if (rl.rlim_cur > old.rlim_cur) rl.rlim_cur = old.rlim_cur;
      setrlimit(RLIMIT_NOFILE, &rl);
      ncclComm_t comms[2 * 100];
      int made = 0;
      ncclResult_t res = ncclSuccess;
      while (made < 100 && (res = ncclCommInitAll(comms + 2 * made, 2, NULL)) == ncclSuccess) made++;
      const char *why = ncclGetLastError(NULL);
      int bad = res != ncclSystemError || !strstr(why, "Too many open files");
      if (bad) fprintf(stderr, "test_leaks: %d descriptors to spare: communicator %d: %s: %s\n", extra, made,
                       ncclGetErrorString(res), why);
      for (int i = 0; i < 2 * made; i++) bad |= ncclCommDestroy(comms[i]) != ncclSuccess;
      setrlimit(RLIMIT_NOFILE, &old);
      bad |= ncclCommInitAll(comms, 2, NULL) != ncclSuccess;
      bad |= ncclCommDestroy(comms[0]) != ncclSuccess || ncclCommDestroy(comms[1]) != ncclSuccess;
      fflush(stderr);
      _exit(bad);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "test_leaks: out of descriptors (%d to spare) FAILED (%s %d)\n", extra,
              WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      failed++;
    }
  }
  return failed;
}

int main(void) {
  int failed = 0;
  failed += outOfDescriptors(); /* first: it forks */
  /* Every scenario once first: what the process keeps for good (the log,
   * this thread's caches, malloc's per-thread arenas) is made then. */
  failed += runAll(0) + abortedInit() + failedCollective();
  struct snapshot before = take();
  for (int i = 0; i < 200 && before.threads > 1; i++) { /* threads that end on their own */
    usleep(10000);
    before = take();
  }
  saveMaps("/tmp/chorus-maps-before");
  for (int i = 0; i < 3; i++) failed += runAll(0);
  failed += !sameAsBefore(before, "ncclCommDestroy");
  for (int i = 0; i < 3; i++) failed += runAll(1);
  failed += !sameAsBefore(before, "ncclCommAbort");
  failed += abortedInit();
  failed += !sameAsBefore(before, "aborting an init");
  for (int i = 0; i < 3; i++) failed += failedCollective();
  failed += !sameAsBefore(before, "a failed collective and ncclCommDestroy");
  printf("test_leaks: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
