#define _GNU_SOURCE
#include "harness.h"

#include "bootstrap/bootstrap.h"
#include "chorus.h"

#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int fileLinesWith(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[2048];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

void faultTime(const char *fault, ncclResult_t res, double ms) {
  static const char *names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                "ncclRemoteError",   "ncclInProgress",         "ncclTimeout"};
  fprintf(stderr, "fault-time: %s | %s | %.1f\n", fault, (unsigned)res < 9 ? names[res] : "?", ms);
}

/* With CHORUS_TEST_COMM_ID=1 (make tsan) the id names a rendezvous that rank
 * 0 hosts, the way NCCL_COMM_ID does, so the parent runs no root thread:
 * ThreadSanitizer cannot follow children forked from a threaded process. */
int testFreePort(struct sockaddr_in *a) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof *a;
  int bad = s < 0 || bind(s, (struct sockaddr *)a, sizeof *a) < 0 || getsockname(s, (struct sockaddr *)a, &len) < 0;
  if (s >= 0) close(s);
  return bad;
}

static int fixedCommId(ncclUniqueId *id) {
  struct sockaddr_in a;
  if (testFreePort(&a) != 0) return 1;
  /* Layout of chorus's id: 64-bit secret (the NCCL_COMM_ID one), then the address. */
  uint64_t secret = 0x0280028002800280ull;
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &secret, sizeof secret);
  memcpy(id->internal + sizeof secret, &a, sizeof a);
  return 0;
}

/* With CHORUS_TEST_LAUNCHED=1 a launcher started every rank (tests/netns.sh
 * runs them on several "hosts"): this process runs only its own rank, from
 * CHORUS_RANK/CHORUS_NRANKS (or another launcher's variables), meeting the
 * others at NCCL_COMM_ID. */
int testCommId(ncclUniqueId *id) {
  const char *fixed = getenv("CHORUS_TEST_COMM_ID");
  if (fixed && *fixed == '1' ? fixedCommId(id) != 0 : ncclGetUniqueId(id) != ncclSuccess) {
    fprintf(stderr, "ncclGetUniqueId failed\n");
    return 1;
  }
  return 0;
}

int idRootGone(const ncclUniqueId *id, double waitSec) {
  struct bootstrapHandle h;
  memcpy(&h, id->internal, sizeof h);
  double t0 = nowSec();
  for (;;) {
    int fd = socket(h.addr.sa.sa_family, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    socklen_t len = h.addr.sa.sa_family == AF_INET ? sizeof h.addr.sin : sizeof h.addr.sin6;
    int refused = connect(fd, &h.addr.sa, len) != 0;
    close(fd);
    if (refused || nowSec() - t0 >= waitSec) return refused;
    usleep(10000);
  }
}

/* A test's own deadline, cut to CHORUS_TEST_DEADLINE (tests/deadlines.cmake
 * sets it a few times the test's normal time). */
static int testDeadline(int deadlineSec) {
  const char *e = getenv("CHORUS_TEST_DEADLINE");
  int cap = e ? atoi(e) : 0;
  return cap > 0 && cap < deadlineSec ? cap : deadlineSec;
}

static int runLaunchedRank(int nranks, rankFn fn, void *arg, int deadlineSec) {
  int rank, n;
  ncclUniqueId id;
  if (chorusEnvRank(&rank, &n) != ncclSuccess || n != nranks || !getenv("NCCL_COMM_ID")) {
    fprintf(stderr, "CHORUS_TEST_LAUNCHED=1 needs CHORUS_RANK, CHORUS_NRANKS=%d and NCCL_COMM_ID\n", nranks);
    return 1;
  }
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  alarm(testDeadline(deadlineSec));
  int rc = fn(rank, n, id, arg);
  if (rc) fprintf(stderr, "rank %d failed\n", rank);
  return rc ? 1 : 0;
}

int testLaunched(void) {
  const char *launched = getenv("CHORUS_TEST_LAUNCHED");
  return launched && *launched == '1';
}

int pinToCpu(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof one, &one);
}

int runRanks(int nranks, rankFn fn, void *arg, int deadlineSec) {
  if (testLaunched()) return runLaunchedRank(nranks, fn, arg, deadlineSec);
  ncclUniqueId id;
  if (testCommId(&id) != 0) return nranks;
  return runRanksWithId(nranks, id, fn, arg, deadlineSec);
}

/* LeakSanitizer's entry point, present in ASan builds only. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

/* Kills and reaps the ranks still running (pid > 0), and frees pids. */
static void killRanks(pid_t *pids, int nranks) {
  for (int r = 0; r < nranks; r++)
    if (pids[r] > 0) kill(pids[r], SIGKILL);
  for (int r = 0; r < nranks; r++)
    if (pids[r] > 0) waitpid(pids[r], NULL, 0);
  free(pids);
}

int runRanksWithId(int nranks, ncclUniqueId id, rankFn fn, void *arg, int deadlineSec) {
  deadlineSec = testDeadline(deadlineSec);
  fflush(NULL);
  pid_t *pids = calloc(nranks, sizeof *pids);
  /* Children start only once all are forked: no rank reaches the root
   * thread (which allocates) while the parent is still forking, since a fork
   * taken while another thread holds an allocator lock can deadlock (ASan). */
  int gate[2];
  if (pipe(gate) != 0) return nranks;
  for (int r = 0; r < nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      free(pids); /* the parent's bookkeeping (LeakSanitizer checks each rank) */
      close(gate[1]);
      char c;
      while (read(gate[0], &c, 1) > 0) {
      }
      close(gate[0]);
      alarm(deadlineSec + 5); /* never outlive the harness */
      int rc = fn(r, nranks, id, arg);
      fflush(NULL);
      /* Under ASan, each rank's heap is checked for leaks before it goes
       * (_exit skips LeakSanitizer's own check at exit). */
      if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check() && rc == 0) rc = 1;
      _exit(rc ? 1 : 0);
    }
  }
  close(gate[0]);
  close(gate[1]);
  int failed = 0, left = nranks;
  double end = nowSec() + deadlineSec;
  while (left > 0) {
    int status, reaped = 0;
    /* Only this run's ranks: the caller may have other children. */
    for (int r = 0; r < nranks; r++) {
      if (pids[r] <= 0 || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      pids[r] = 0;
      left--;
      reaped = 1;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        failed++;
        if (WIFSIGNALED(status)) fprintf(stderr, "rank %d died with signal %d\n", r, WTERMSIG(status));
        else fprintf(stderr, "rank %d exited with %d\n", r, WEXITSTATUS(status));
      }
      /* A rank that failed a check (it exits 1; fault tests kill theirs with
       * signals) ends the run: the others may wait for it, and the test
       * should fail now, not at its deadline. */
      if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && left > 0) {
        fprintf(stderr, "rank %d failed: stopping the other %d rank(s)\n", r, left);
        killRanks(pids, nranks);
        return failed + left;
      }
    }
    if (reaped) continue;
    if (nowSec() > end) {
      fprintf(stderr, "deadline of %d s passed: killing %d rank(s)\n", deadlineSec, left);
      killRanks(pids, nranks);
      return failed + left;
    }
    usleep(2000);
  }
  free(pids);
  return failed;
}

#define GUARD 64
static const unsigned char guardByte = 0xa5;

/* The header holds the size, with GUARD_MEMALLOC set for ncclMemAlloc's. */
#define GUARD_MEMALLOC ((size_t)1 << 63)

static void *guardLay(unsigned char *p, size_t bytes, size_t header) {
  if (!p) return NULL;
  memcpy(p, &header, sizeof header);
  memset(p + sizeof header, guardByte, GUARD);
  memset(p + sizeof header + GUARD + bytes, guardByte, GUARD);
  return p + sizeof header + GUARD;
}

void *guardAlloc(size_t bytes) { return guardLay(malloc(bytes + 2 * GUARD + sizeof(size_t)), bytes, bytes); }

void *guardMemAlloc(size_t bytes) {
  void *p = NULL;
  if (ncclMemAlloc(&p, bytes + 2 * GUARD + sizeof(size_t)) != ncclSuccess) return NULL;
  return guardLay(p, bytes, bytes | GUARD_MEMALLOC);
}

int guardCheck(void *q) {
  unsigned char *p = (unsigned char *)q - GUARD - sizeof(size_t);
  size_t bytes;
  memcpy(&bytes, p, sizeof bytes);
  bytes &= ~GUARD_MEMALLOC;
  for (int i = 0; i < GUARD; i++)
    if (p[sizeof bytes + i] != guardByte || p[sizeof bytes + GUARD + bytes + i] != guardByte) return 1;
  return 0;
}

void guardFree(void *q) {
  if (!q) return;
  unsigned char *p = (unsigned char *)q - GUARD - sizeof(size_t);
  size_t header;
  memcpy(&header, p, sizeof header);
  if (header & GUARD_MEMALLOC) ncclMemFree(p);
  else free(p);
}

enum { tempDirsMax = 4 };
static char tempDirs[tempDirsMax][64];
static pid_t tempDirOwner[tempDirsMax];
static int tempDirCount;

static void tempDirsRemove(void) {
  for (int i = 0; i < tempDirCount; i++) {
    if (tempDirOwner[i] != getpid()) continue;
    if (getenv("CHORUS_TEST_KEEP")) {
      fprintf(stderr, "kept %s (CHORUS_TEST_KEEP)\n", tempDirs[i]);
      continue;
    }
    DIR *d = opendir(tempDirs[i]);
    for (struct dirent *e; d && (e = readdir(d));) {
      char path[600];
      snprintf(path, sizeof path, "%s/%s", tempDirs[i], e->d_name);
      if (e->d_name[0] != '.') unlink(path);
    }
    if (d) closedir(d);
    rmdir(tempDirs[i]);
  }
}

int tempDir(char *dir, const char *name) {
  snprintf(dir, 64, "/tmp/chorus-%s-XXXXXX", name);
  if (tempDirCount == tempDirsMax || !mkdtemp(dir)) return -1;
  if (tempDirCount == 0) atexit(tempDirsRemove);
  tempDirOwner[tempDirCount] = getpid();
  snprintf(tempDirs[tempDirCount++], sizeof tempDirs[0], "%s", dir);
  return 0;
}

int logPerProcess(char *dir, const char *name, const char *subsys) {
  char pattern[128];
  if (tempDir(dir, name) != 0) return -1;
  snprintf(pattern, sizeof pattern, "%s/log.%%p", dir);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", subsys, 1);
  setenv("NCCL_DEBUG_FILE", pattern, 1);
  return 0;
}

/* A seccomp filter that answers the system calls read and write (either
 * may be -1: none) with action: an errno, or the process's death. */
static int denyCalls(long read, long write, uint32_t action) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)read, 1, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)write, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, action),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof f / sizeof f[0], f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return (int)syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
}

int denyCma(void) { return denyCalls(__NR_process_vm_readv, __NR_process_vm_writev, SECCOMP_RET_ERRNO | EPERM); }

int denyPidfd(void) {
#ifdef __NR_pidfd_open
  return denyCalls(__NR_pidfd_open, -1, SECCOMP_RET_ERRNO | ENOSYS);
#else
  return 0;
#endif
}

int denyCmaWrite(void) { return denyCalls(-1, __NR_process_vm_writev, SECCOMP_RET_ERRNO | EPERM); }

int dieOnCmaWrite(void) { return denyCalls(-1, __NR_process_vm_writev, SECCOMP_RET_KILL_PROCESS); }

static volatile double *stalledAt;
static void stallHere(int sig) {
  (void)sig;
  *stalledAt = nowSec(); /* clock_gettime: safe in a handler */
  for (;;) pause();
}

int stallOnCmaWrite(volatile double *at) {
  stalledAt = at;
  struct sigaction sa = {.sa_handler = stallHere};
  if (sigaction(SIGSYS, &sa, NULL) != 0) return -1;
  return denyCalls(-1, __NR_process_vm_writev, SECCOMP_RET_TRAP);
}

void idToHex(const ncclUniqueId *id, char hex[2 * NCCL_UNIQUE_ID_BYTES + 1]) {
  for (size_t i = 0; i < sizeof id->internal; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id->internal[i]);
}

int idFromHex(const char *hex, ncclUniqueId *id) {
  if (strlen(hex) != 2 * sizeof id->internal) return -1;
  for (size_t i = 0; i < sizeof id->internal; i++) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
    id->internal[i] = (char)v;
  }
  return 0;
}

double testTimeScale(void) {
  const char *v = getenv("CHORUS_TEST_TIME_SCALE");
  double scale = v ? atof(v) : 1.0;
  return scale >= 1.0 ? scale : 1.0;
}
