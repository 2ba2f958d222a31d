#define _GNU_SOURCE
#include "harness.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int runRanks(int nranks, rankFn fn, void *arg, int deadlineSec) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    fprintf(stderr, "ncclGetUniqueId failed\n");
    return nranks;
  }
  return runRanksWithId(nranks, id, fn, arg, deadlineSec);
}

int runRanksWithId(int nranks, ncclUniqueId id, rankFn fn, void *arg, int deadlineSec) {
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
      close(gate[1]);
      char c;
      while (read(gate[0], &c, 1) > 0) {
      }
      close(gate[0]);
      alarm(deadlineSec + 5); /* never outlive the harness */
      int rc = fn(r, nranks, id, arg);
      fflush(NULL);
      _exit(rc ? 1 : 0);
    }
  }
  close(gate[0]);
  close(gate[1]);
  int failed = 0, left = nranks;
  double end = nowSec() + deadlineSec;
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      left--;
      for (int r = 0; r < nranks; r++)
        if (pids[r] == p) {
          pids[r] = 0;
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            failed++;
            if (WIFSIGNALED(status)) fprintf(stderr, "rank %d died with signal %d\n", r, WTERMSIG(status));
            else fprintf(stderr, "rank %d exited with %d\n", r, WEXITSTATUS(status));
          }
        }
      continue;
    }
    if (nowSec() > end) {
      fprintf(stderr, "deadline of %d s passed: killing %d rank(s)\n", deadlineSec, left);
      for (int r = 0; r < nranks; r++)
        if (pids[r] > 0) kill(pids[r], SIGKILL);
      while (waitpid(-1, NULL, 0) > 0) {
      }
      free(pids);
      return failed + left;
    }
    usleep(2000);
  }
  free(pids);
  return failed;
}

#define GUARD 64
static const unsigned char guardByte = 0xa5;

void *guardAlloc(size_t bytes) {
  unsigned char *p = malloc(bytes + 2 * GUARD + sizeof(size_t));
  memcpy(p, &bytes, sizeof bytes);
  memset(p + sizeof bytes, guardByte, GUARD);
  memset(p + sizeof bytes + GUARD + bytes, guardByte, GUARD);
  return p + sizeof bytes + GUARD;
}

int guardCheck(void *q) {
  unsigned char *p = (unsigned char *)q - GUARD - sizeof(size_t);
  size_t bytes;
  memcpy(&bytes, p, sizeof bytes);
  for (int i = 0; i < GUARD; i++)
    if (p[sizeof bytes + i] != guardByte || p[sizeof bytes + GUARD + bytes + i] != guardByte) return 1;
  return 0;
}

void guardFree(void *q) {
  if (q) free((unsigned char *)q - GUARD - sizeof(size_t));
}
