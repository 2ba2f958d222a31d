/* NCCL_DEBUG_FILE and NCCL_DEBUG_SUBSYS as NCCL handles them, and
 * ncclGetLastError on a communicator that is gone:
 *  - without %p every process writes the one file: a parent that logged,
 *    then forked ranks that log, then logged again loses no line, and no
 *    line is written over another (a child that reopened the file truncated
 *    it, and wrote at offsets the others had passed);
 *  - "%%" in the pattern is a "%";
 *  - NCCL_DEBUG and NCCL_DEBUG_SUBSYS with blanks around their names, and a
 *    subsystem name that is none: the default subsystems and a WARN that
 *    names it;
 *  - a fork while another thread writes a line: the child's first line
 *    does not wait forever for the parent's log lock;
 *  - ncclGetLastError(comm) after ncclCommAbort(comm) (NCCL ignores comm,
 *    so a program may pass the handle it just freed): the process's last
 *    error, never a read of freed memory (run under valgrind as
 *    memcheck_logfile). */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* A thread that logs without pause (WARNs of a bad call), as a bootstrap
 * root does when strangers call, until *stop. */
static void *warnLoop(void *arg) {
  volatile int *stop = arg;
  while (!*stop) ncclGetUniqueId(NULL);
  return NULL;
}

/* Forks 50 children while another thread logs: each child logs at once
 * and exits; one that has not within 5 s inherited a log lock held. */
static int forkWhileLogging(void) {
  volatile int stop = 0;
  pthread_t t;
  if (pthread_create(&t, NULL, warnLoop, (void *)&stop) != 0) return 1;
  int failed = 0;
  for (int k = 0; k < 50 && !failed; k++) {
    pid_t pid = fork();
    if (pid == 0) {
      ncclGetUniqueId(NULL); /* a WARN: the log lock */
      _exit(0);
    }
    int status = -1;
    double t0 = nowSec();
    while (waitpid(pid, &status, WNOHANG) == 0 && nowSec() - t0 < 5) usleep(1000);
    if (status != 0) {
      fprintf(stderr, "fork %d: the child, logging, did not exit within 5 s (a log lock held across the fork)\n", k);
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      failed = 1;
    }
  }
  stop = 1;
  pthread_join(t, NULL);
  return failed;
}

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x = 1, y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
  EXPECT(y == n, "rank %d: allreduce gave %g", rank, y);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* Every line of path starts with "host:" (a log line's head) or is NCCL's
 * version line: none was cut or written into another. */
static int wholeLines(const char *path, const char *host) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[4096], head[80];
  snprintf(head, sizeof head, "%s:", host);
  int bad = 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, head, strlen(head)) != 0 && strncmp(line, "NCCL version", 12) != 0) {
      fprintf(stderr, "%s: a broken line: %s", path, line);
      bad++;
    }
  fclose(f);
  return bad;
}

int main(void) {
  char dir[64];
  if (tempDir(dir, "logfile") != 0) return 1;
  char path[256], host[64] = "";
  gethostname(host, sizeof host - 1);
  char *dot = strchr(host, '.');
  if (dot) *dot = 0;
  int failed = 0;

  /* One file for all: logged before the fork, by the ranks, and after. */
  snprintf(path, sizeof path, "%s/all.log", dir);
  setenv("NCCL_DEBUG", " INFO ", 1);
  setenv("NCCL_DEBUG_SUBSYS", " INIT , ENV", 1);
  setenv("NCCL_DEBUG_FILE", path, 1);
  ncclResetDebugInit();
  EXPECT(ncclGetUniqueId(NULL) == ncclInvalidArgument, "ncclGetUniqueId(NULL) succeeded");
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  failed += runRanksWithId(2, id, rankMain, NULL, 60);
  EXPECT(ncclGetVersion(NULL) == ncclInvalidArgument, "ncclGetVersion(NULL) succeeded");
  EXPECT(fileLinesWith(path, "uniqueId argument is NULL") == 1, "%s: the parent's WARN before the fork is gone", path);
  EXPECT(fileLinesWith(path, "version argument is NULL") == 1, "%s: the parent's WARN after the fork is not there",
         path);
  EXPECT(fileLinesWith(path, "Init COMPLETE") == 2, "%s has %d 'Init COMPLETE' lines, not one per rank", path,
         fileLinesWith(path, "Init COMPLETE"));
  EXPECT(wholeLines(path, host) == 0, "%s has lines cut or written into", path);

  /* "%%" is a "%"; a subsystem that is none: the default ones, and a WARN. */
  char pattern[256];
  snprintf(pattern, sizeof pattern, "%s/100%%%%.log", dir);
  snprintf(path, sizeof path, "%s/100%%.log", dir);
  setenv("NCCL_DEBUG_FILE", pattern, 1);
  setenv("NCCL_DEBUG_SUBSYS", "INIT,FOO", 1);
  ncclResetDebugInit();
  NCCLCHECK(ncclGetUniqueId(&id));
  failed += runRanksWithId(2, id, rankMain, NULL, 60);
  EXPECT(fileLinesWith(path, "NCCL_DEBUG_SUBSYS=INIT,FOO: 'FOO' is no subsystem") >= 1,
         "%s does not say that FOO is no subsystem", path);
  EXPECT(fileLinesWith(path, "Init COMPLETE") == 2, "%s: with the default subsystems, %d 'Init COMPLETE' lines", path,
         fileLinesWith(path, "Init COMPLETE"));

  /* A fork while another thread writes a line. */
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", "/dev/null", 1);
  ncclResetDebugInit();
  failed += forkWhileLogging();

  /* The handle of an aborted communicator. */
  setenv("NCCL_DEBUG", "WARN", 1);
  ncclResetDebugInit();
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitAll(&comm, 1, NULL));
  EXPECT(ncclAllReduce(NULL, NULL, 1, ncclFloat, ncclSum, comm, NULL) == ncclInvalidArgument, "a NULL buffer passed");
  NCCLCHECK(ncclCommAbort(comm));
  const char *err = ncclGetLastError(comm);
  EXPECT(err && strstr(err, "sendbuff"), "after the abort, ncclGetLastError gave '%s'", err ? err : "(null)");
  printf("test_logfile: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
