/* CHORUS_STATS=1 (trace/stats.h): 2 ranks make 10 AllReduces of 1000 floats,
 * 3 AllGathers of 100 int32 per rank and a Broadcast, each rank's stderr
 * going to a file; at destroy each rank must have printed one line per
 * collective and size, with the calls and bytes made (nccl-tests' sizes:
 * an AllGather's is its whole output), ordered times and a busbw. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char dir[64];

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  char path[128];
  snprintf(path, sizeof path, "%s/stats.%d", dir, rank);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT(fd >= 0 && dup2(fd, 2) == 2, "cannot redirect stderr to %s", path);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x[1000];
  int g[200];
  for (int i = 0; i < 1000; i++) x[i] = 1;
  for (int k = 0; k < 10; k++) NCCLCHECK(ncclAllReduce(x, x, 1000, ncclFloat32, ncclSum, comm, NULL));
  for (int k = 0; k < 3; k++) NCCLCHECK(ncclAllGather(g + 100 * rank, g, 100, ncclInt32, comm, NULL));
  NCCLCHECK(ncclBroadcast(x, x, 10, ncclFloat32, 0, comm, NULL));
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

static int checkRank(int rank) {
  char path[128], line[512];
  snprintf(path, sizeof path, "%s/stats.%d", dir, rank);
  FILE *f = fopen(path, "r");
  EXPECT(f != NULL, "no stats file %s", path);
  int head = 0, seen = 0;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "chorus stats: ", 14)) continue;
    if (strstr(line, "per collective and size")) {
      char want[32];
      snprintf(want, sizeof want, "rank %d of 2 ", rank);
      EXPECT(strstr(line, want), "header: %s", line);
      head++;
      continue;
    }
    int r;
    char coll[32];
    unsigned long long calls;
    double p50, p90, p99, mean, bw;
    const char *c = strstr(line, "calls");
    EXPECT(c && sscanf(line, "chorus stats: rank %d %31s", &r, coll) == 2 && sscanf(c, "calls %llu", &calls) == 1,
           "line: %s", line);
    char total[32];
    const char *by = strstr(line, "bytes");
    EXPECT(by && sscanf(by, "bytes %31[^u]", total) == 1, "bytes: %s", line);
    const char *t = strstr(line, "us p50");
    EXPECT(t && sscanf(t, "us p50 %lf p90 %lf p99 %lf mean %lf busbw %lf", &p50, &p90, &p99, &mean, &bw) == 5,
           "times: %s", line);
    EXPECT(r == rank && p50 > 0 && p50 <= p90 && p90 <= p99 && mean > 0 && bw > 0, "values: %s", line);
    if (!strcmp(coll, "AllReduce")) {
      EXPECT(calls == 10 && strstr(line, " 3.906 KiB ") && !strcmp(total, "39.06 KiB  "), "AllReduce: %s", line);
      seen |= 1;
    } else if (!strcmp(coll, "AllGather")) {
      EXPECT(calls == 3 && strstr(line, " 800 B ") && !strcmp(total, "2.344 KiB  "), "AllGather: %s", line);
      seen |= 2;
    } else if (!strcmp(coll, "Broadcast")) {
      EXPECT(calls == 1 && strstr(line, " 40 B "), "Broadcast: %s", line);
      seen |= 4;
    } else {
      EXPECT(0, "a collective not called: %s", line);
    }
  }
  fclose(f);
  EXPECT(head == 1 && seen == 7, "rank %d: %d headers, collectives seen %d", rank, head, seen);
  return 0;
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/chorus-stats-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  setenv("CHORUS_STATS", "1", 1);
  int bad = runRanks(2, rankMain, NULL, 30);
  for (int r = 0; r < 2 && !bad; r++) bad |= checkRank(r);
  for (int r = 0; r < 2; r++) {
    char path[128];
    snprintf(path, sizeof path, "%s/stats.%d", dir, r);
    if (bad) {
      FILE *f = fopen(path, "r");
      char line[512];
      while (f && fgets(line, sizeof line, f)) fputs(line, stderr);
      if (f) fclose(f);
    }
    unlink(path);
  }
  rmdir(dir);
  if (bad) return 1;
  printf("CHORUS_STATS: each rank's table has the calls and bytes it made\n");
  return 0;
}
