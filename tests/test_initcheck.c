/* Inconsistent init ends on every process at once: two processes claiming
 * the same rank, or ranks that disagree on nranks, get ncclInvalidUsage
 * from ncclCommInitRank, each with the root's explanation naming the ranks,
 * hosts and pids (in ncclGetLastError), instead of one of them failing and
 * the others waiting for the timeout. CHORUS_TIMEOUT is 3 s here: a rank
 * left waiting gets ncclTimeout, which fails the test. A rendezvous that
 * cannot complete (ranks that never come) times out on every rank that came,
 * each saying which ranks the root still waited for. */
#include <dirent.h>
#include <regex.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

struct claim {
  int nranks, rank;
};
struct initCase {
  const char *name;
  int procs;
  struct claim claims[4];
  const char *expect; /* in every process's last error */
  ncclResult_t want;  /* ncclInvalidUsage, or ncclTimeout where a rank never comes */
};

static int claimInit(int proc, int procs, ncclUniqueId id, void *arg) {
  const struct initCase *c = arg;
  struct claim me = c->claims[proc];
  ncclComm_t comm = NULL;
  double t0 = nowSec();
  ncclResult_t res = ncclCommInitRank(&comm, me.nranks, id, me.rank);
  double ms = (nowSec() - t0) * 1e3;
  const char *why = ncclGetLastError(NULL);
  fprintf(stderr, "%s: process %d (rank %d of %d): %s after %.0f ms: %s\n", c->name, proc, me.rank, me.nranks,
          ncclGetErrorString(res), ms, why);
  EXPECT(res == c->want, "%s: process %d got %s", c->name, proc, ncclGetErrorString(res));
  EXPECT(strstr(why, c->expect) != NULL, "%s: process %d's last error lacks \"%s\": %s", c->name, proc, c->expect,
         why);
  EXPECT(c->want != ncclInvalidUsage || strstr(why, " pid ") != NULL, "%s: process %d: no pid named: %s", c->name,
         proc, why);
  faultTime(c->name, res, ms);
  return 0;
}

/* The ranks' WARN lines have NCCL's shape, with the source file named
 * relative to src/ (no build path): host:pid:tid [rank] file:line NCCL WARN. */
static int warnLinesLikeNccl(const char *dir) {
  regex_t re;
  regcomp(&re, "^[^ :]+:[0-9]+:[0-9]+ \\[[0-9]+\\] bootstrap/bootstrap\\.c:[0-9]+ NCCL WARN Bootstrap : rank ",
          REG_EXTENDED | REG_NOSUB);
  int found = 0, bad = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    char path[600], line[1200];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = e->d_name[0] == '.' ? NULL : fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
      if (!strstr(line, "NCCL WARN")) continue;
      if (strstr(line, "/src/")) bad++;
      found += regexec(&re, line, 0, NULL, 0) == 0;
    }
    if (f) fclose(f);
    if (f) unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
  regfree(&re);
  if (!found || bad) fprintf(stderr, "WARN lines: %d in NCCL's shape, %d naming a build path\n", found, bad);
  return !found || bad;
}

int main(void) {
  setenv("CHORUS_TIMEOUT", "3", 1); /* a rank left waiting fails in seconds */
  char logDir[] = "/tmp/chorus-initcheck-XXXXXX", logPattern[64];
  if (!mkdtemp(logDir)) return 1;
  snprintf(logPattern, sizeof logPattern, "%s/log.%%p", logDir);
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", logPattern, 1);
  static const struct initCase cases[] = {
      {"duplicate-rank", 3, {{3, 0}, {3, 1}, {3, 1}}, "rank 1 was claimed by host", ncclInvalidUsage},
      {"duplicate-rank0", 2, {{2, 0}, {2, 0}}, "rank 0 was claimed by host", ncclInvalidUsage},
      {"nranks-disagree", 2, {{2, 0}, {3, 1}}, "says nranks is", ncclInvalidUsage},
      {"nranks-disagree-3", 3, {{3, 0}, {3, 2}, {4, 1}}, "says nranks is", ncclInvalidUsage},
      /* ranks 1 and 3 of 4 never come: the timeout names them (the root said
       * whom it waits for, twice within the 3 s timeout) */
      {"missing-ranks", 2, {{4, 0}, {4, 2}}, "was still waiting for ranks 1, 3 (of 4; 2 checked in)",
       ncclTimeout},
  };
  /* With a fixed NCCL_COMM_ID (make tsan) rank 0 hosts the root, and a second
   * rank 0 cannot listen on its port: that one fails at once with "Address
   * already in use", but the other is left waiting, so that case is run only
   * with ncclGetUniqueId's root. */
  const char *fixed = getenv("CHORUS_TEST_COMM_ID");
  int fixedId = fixed && *fixed == '1';
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (fixedId && cases[i].claims[1].rank == 0) continue;
    ncclUniqueId id;
    if (testCommId(&id) != 0) return 1;
    int f = runRanksWithId(cases[i].procs, id, claimInit, (void *)&cases[i], 15);
    printf("initcheck %s: %s\n", cases[i].name, f ? "FAILED" : "passed");
    failed += f;
  }
  int logsBad = warnLinesLikeNccl(logDir);
  printf("initcheck log lines: %s\n", logsBad ? "FAILED" : "passed");
  failed += logsBad;
  printf("test_initcheck: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
