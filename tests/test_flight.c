/* The flight recorder (CHORUS_FLIGHT_RECORDER, trace/flight.h): 3 ranks run 6
 * AllReduces and a Send/Recv ring with a recorder of 4, then rank 2 stays
 * away from the 7th AllReduce. Ranks 0 and 1 time out (CHORUS_TIMEOUT=2;
 * the later of them may see the other's abort first) and dump; rank 2
 * dumps on SIGUSR1. Each rank's file must hold the last 4
 * operations, oldest first, in the states they were in: done, and the 7th
 * failed on ranks 0 and 1; done on rank 2, whose last are the Send and
 * the Recv. And first: a SIGUSR1 while a communicator is still in its
 * rendezvous dumps an empty record (and crashes nothing). */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char dir[64];

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = (float)rank;
  for (int k = 0; k < 6; k++) NCCLCHECK(ncclAllReduce(x, x, 64, ncclFloat32, ncclSum, comm, NULL));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(x, 8, ncclFloat32, (rank + 1) % n, comm, NULL));
  NCCLCHECK(ncclRecv(x + 8, 8, ncclFloat32, (rank + n - 1) % n, comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  if (rank == 2) {
    sleep(4); /* the others time out meanwhile */
    raise(SIGUSR1);
    usleep(300 * 1000); /* the recorder's thread writes the dump */
  } else {
    ncclResult_t res = ncclAllReduce(x, x, 64, ncclFloat32, ncclSum, comm, NULL);
    /* A timeout, or the other one's abort after its own timeout. */
    EXPECT(res == ncclTimeout || res == ncclRemoteError, "the 7th AllReduce returned %s", ncclGetErrorString(res));
  }
  ncclCommAbort(comm);
  return 0;
}

static int checkFile(int rank) {
  char path[128], line[1024];
  snprintf(path, sizeof path, "%s/fr.%d", dir, rank);
  FILE *f = fopen(path, "r");
  EXPECT(f != NULL, "rank %d wrote no dump (%s)", rank, path);
  int lines = 0, head = 0;
  char entry[8][1024];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "Flight recorder of rank ", 24) == 0) {
      head++;
      char want[64];
      snprintf(want, sizeof want, "rank %d of 3", rank);
      EXPECT(strstr(line, want), "header: %s", line);
      EXPECT(strstr(line, rank == 2 ? "on SIGUSR1" : "on a failed operation ("), "why: %s", line);
      EXPECT(strstr(line, rank == 2 ? "the last 4 of 8 operations" : "the last 4 of 9 operations"), "count: %s", line);
    } else if (lines < 8) {
      snprintf(entry[lines++], sizeof entry[0], "%s", line);
    }
  }
  fclose(f);
  EXPECT(head == 1 && lines == 4, "rank %d: %d dumps, %d entries", rank, head, lines);
  /* Oldest first: rank 2's 8 operations end with AllReduces #5 and #6, the
   * Send and the Recv; the others' 9 with #6, the Send, the Recv and #7. */
  const char *want[2][4] = {{"AllReduce #5 ", "AllReduce #6 ", NULL, NULL},
                            {"AllReduce #6 ", NULL, NULL, "AllReduce #7 "}};
  const char *const *w = want[rank != 2];
  for (int i = 0; i < 4; i++) {
    if (w[i]) EXPECT(strstr(entry[i], w[i]), "rank %d entry %d: %s (want %s)", rank, i, entry[i], w[i]);
    int last = i == 3 && rank != 2;
    EXPECT(strstr(entry[i], last ? ": failed (" : ": done"), "rank %d entry %d state: %s", rank, i, entry[i]);
    /* Every entry says when it was queued; a failed one how long it ran. */
    EXPECT(strstr(entry[i], "queued at ") && (!last || strstr(entry[i], ", ran ")), "rank %d entry %d times: %s", rank,
           i, entry[i]);
    /* ...counted from the communicator's creation (an operation right after
     * it read 18446744073.7 s when the coarse clock lagged the fine one) */
    double at = atof(strstr(entry[i], "queued at ") + 10);
    EXPECT(at >= 0 && at < 600, "rank %d entry %d queued at %g s: %s", rank, i, at, entry[i]);
  }
  int p2p = rank == 2 ? 2 : 1; /* where the Send and the Recv sit */
  EXPECT(strstr(entry[p2p], "Send #1 ") || strstr(entry[p2p], "Recv #1 "), "rank %d entry %d: %s", rank, p2p,
         entry[p2p]);
  EXPECT(strstr(entry[p2p + 1], "Send #1 ") || strstr(entry[p2p + 1], "Recv #1 "), "rank %d entry %d: %s", rank,
         p2p + 1, entry[p2p + 1]);
  EXPECT(strstr(entry[0], "via ") && strstr(entry[0], "channel(s)"), "an AllReduce names its algorithm: %s", entry[0]);
  return 0;
}

/* SIGUSR1 while a communicator waits in its rendezvous (its peer never
 * comes): the dump must come (an empty record) and nothing may crash; the
 * init then times out. Run in a child so that a crash is seen. */
static void *raiseLater(void *arg) {
  (void)arg;
  usleep(300 * 1000);
  kill(getpid(), SIGUSR1);
  return NULL;
}

static int dumpDuringInit(void) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("CHORUS_TIMEOUT", "2", 1);
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) _exit(3);
    pthread_t t;
    pthread_create(&t, NULL, raiseLater, NULL);
    ncclComm_t comm;
    ncclResult_t res = ncclCommInitRank(&comm, 2, id, 0);
    pthread_join(t, NULL);
    _exit(res == ncclSuccess ? 4 : 0);
  }
  int status;
  waitpid(pid, &status, 0);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "SIGUSR1 during init: the child %s %d",
         WIFSIGNALED(status) ? "died of signal" : "exited with", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  char path[128], line[1024];
  snprintf(path, sizeof path, "%s/fr.0", dir);
  FILE *f = fopen(path, "r");
  EXPECT(f != NULL, "no dump on SIGUSR1 during init");
  int ok = fgets(line, sizeof line, f) && strstr(line, "on SIGUSR1: the last 0 of 0 operations");
  fclose(f);
  unlink(path);
  EXPECT(ok, "the dump during init: %s", line);
  return 0;
}

/* The dumps in the ranks' logs (NCCL_DEBUG_FILE log.%p) show the rank
 * they are of in the line's head, whatever thread wrote them: "[1] ...
 * Flight recorder of rank 1". Removes the logs. */
static int checkLogs(void) {
  DIR *d = opendir(dir);
  int dumps = 0, failed = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strncmp(e->d_name, "log.", 4) != 0) continue;
    char path[512], line[2048];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
      const char *at = strstr(line, "Flight recorder of rank ");
      if (!at) continue;
      char head[32];
      snprintf(head, sizeof head, " [%d] ", atoi(at + 24));
      const char *h = strstr(line, head);
      EXPECT(h && h < at, "a dump's line shows another rank: %s", line);
      dumps++;
    }
    if (f) fclose(f);
    unlink(path);
  }
  if (d) closedir(d);
  EXPECT(dumps >= 3, "%d dumps in the ranks' logs, not one per rank", dumps);
  return failed;
}

int main(void) {
  if (tempDir(dir, "fr") != 0) return 1;
  char pattern[128];
  snprintf(pattern, sizeof pattern, "%s/fr.%%r", dir);
  setenv("CHORUS_FLIGHT_RECORDER", "4", 1);
  setenv("CHORUS_FLIGHT_RECORDER_FILE", pattern, 1);
  if (dumpDuringInit()) return 1;
  setenv("CHORUS_TIMEOUT", "2", 1);
  char logs[128];
  snprintf(logs, sizeof logs, "%s/log.%%p", dir);
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", logs, 1);
  ncclResetDebugInit();
  int failed = runRanks(3, rankMain, NULL, 30);
  int bad = failed;
  for (int r = 0; r < 3 && !failed; r++) bad |= checkFile(r);
  bad |= checkLogs();
  if (bad) return 1;
  printf("flight recorder: timed-out ranks and a SIGUSR1 dump show each rank's last 4 operations\n");
  return 0;
}
