/* Parameters and logs: environment over NCCL_CONF_FILE, NCCL_DEBUG=INFO
 * lines in NCCL's shape in NCCL_DEBUG_FILE (%h, %p), and a rendezvous that
 * strangers on the root's port cannot break. Linked statically to read the
 * parameter table directly. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/comm.h" /* a communicator's channels */
#include "bootstrap/bootstrap.h"
#include "core/param.h"
#include "harness.h"

static char logDir[64];

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float x = 1, y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
  EXPECT(y == n, "allreduce gave %g", y);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* Variables set in a child forked after ncclGetUniqueId count: each
 * communicator's creation reads the environment again. Rank 0's AllReduce,
 * which rank 1 never joins, fails within the child's 2 s CHORUS_TIMEOUT,
 * not the parent's. */
static volatile int *timedOut; /* shared with the forked ranks */
static int childSetsTimeout(int rank, int n, ncclUniqueId id, void *arg) {
  setenv("CHORUS_TIMEOUT", "2", 1);
  setenv("NCCL_MAX_NCHANNELS", "2", 1);
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  EXPECT(paramInt(paramTimeout) == 2 && paramInt(paramMaxNChannels) == 2,
         "rank %d: CHORUS_TIMEOUT %lld, NCCL_MAX_NCHANNELS %lld after init", rank, (long long)paramInt(paramTimeout),
         (long long)paramInt(paramMaxNChannels));
  if (rank == 0) {
    float x = 1;
    double t0 = nowSec();
    ncclResult_t res = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL);
    double took = nowSec() - t0;
    *timedOut = 1;
    EXPECT(res == ncclTimeout && took < 4.5, "a lone AllReduce: %s after %.1f s (CHORUS_TIMEOUT=2 in the child)",
           ncclGetErrorString(res), took);
    ncclCommAbort(comm);
  } else {
    for (int i = 0; i < 1000 && !*timedOut; i++) usleep(10000);
    ncclCommAbort(comm);
  }
  return 0;
}

/* config.minCTAs / maxCTAs bound the channels as NCCL_MIN_NCHANNELS /
 * NCCL_MAX_NCHANNELS do (the tighter of each pair counts), and
 * NCCL_MIN_CTAS / NCCL_MAX_CTAS override the config, as NCCL's (before, the
 * config's were checked and ignored). The ranks inherit NCCL_MAX_NCHANNELS=3. */
static int ctaLimits(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t parent, c;
  NCCLCHECK(ncclCommInitRank(&parent, n, id, rank));
  EXPECT(parent->nch == 3, "NCCL_MAX_NCHANNELS=3 gave %d channels", parent->nch);
  const struct {
    int minCTAs, maxCTAs;
    const char *envMax, *envMin;
    int want;
  } cases[] = {{0, 1, NULL, NULL, 1}, {4, 8, NULL, NULL, 4}, {0, 1, "2", NULL, 2}, {0, 8, NULL, NULL, 3},
               {0, 0, NULL, "5", 5}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    if (cases[k].minCTAs) cfg.minCTAs = cases[k].minCTAs;
    if (cases[k].maxCTAs) cfg.maxCTAs = cases[k].maxCTAs;
    if (cases[k].envMax) setenv("NCCL_MAX_CTAS", cases[k].envMax, 1);
    if (cases[k].envMin) setenv("NCCL_MIN_CTAS", cases[k].envMin, 1);
    NCCLCHECK(ncclCommSplit(parent, 0, rank, &c, &cfg));
    unsetenv("NCCL_MAX_CTAS");
    unsetenv("NCCL_MIN_CTAS");
    EXPECT(c->nch == cases[k].want, "case %zu: %d channels, expected %d", k, c->nch, cases[k].want);
    static float x[100000], y[100000];
    for (int i = 0; i < 100000; i++) x[i] = (float)(i % 9);
    NCCLCHECK(ncclAllReduce(x, y, 100000, ncclFloat, ncclSum, c, NULL));
    for (int i = 0; i < 100000; i++) EXPECT(y[i] == (float)(n * (i % 9)), "case %zu: y[%d] = %g", k, i, y[i]);
    NCCLCHECK(ncclCommDestroy(c));
  }
  NCCLCHECK(ncclCommDestroy(parent));
  return 0;
}

/* NCCL_MIN_NRINGS / NCCL_MAX_NRINGS, the channel variables' old names,
 * which NCCL still reads, bound the channels where the new names are unset;
 * the new ones win where both are. */
static int legacyRings(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  setenv("NCCL_CONF_FILE", "/dev/null", 1); /* (the parent's file and environment set NCCL_MAX_NCHANNELS) */
  unsetenv("NCCL_MAX_NCHANNELS");
  ncclComm_t parent, c;
  NCCLCHECK(ncclCommInitRank(&parent, n, id, rank));
  const struct {
    const char *minRings, *maxRings, *maxChannels;
    int want;
  } cases[] = {{NULL, "1", NULL, 1}, {"4", NULL, NULL, 4}, {NULL, "1", "3", 3}, {NULL, NULL, NULL, 2}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const char *names[] = {"NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS", "NCCL_MAX_NCHANNELS"};
    const char *values[] = {cases[k].minRings, cases[k].maxRings, cases[k].maxChannels};
    for (int v = 0; v < 3; v++)
      if (values[v]) setenv(names[v], values[v], 1);
      else unsetenv(names[v]);
    NCCLCHECK(ncclCommSplit(parent, 0, rank, &c, NULL));
    EXPECT(c->nch == cases[k].want, "case %zu: %d channels, expected %d", k, c->nch, cases[k].want);
    float x = 1, y = 0;
    NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, c, NULL));
    EXPECT(y == n, "case %zu: AllReduce gave %g", k, y);
    NCCLCHECK(ncclCommDestroy(c));
  }
  NCCLCHECK(ncclCommDestroy(parent));
  return 0;
}

/* NCCL_NET naming a network chorus lacks fails the init, as NCCL's, on a
 * host whose ranks need no network too; set on one rank only (arg: which,
 * -1: every rank), every rank fails saying whose it is. */
static int unknownNet(int rank, int n, ncclUniqueId id, void *arg) {
  int bad = *(int *)arg;
  if (bad < 0 || bad == rank) setenv("NCCL_NET", "bogusnet", 1);
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRank(&comm, n, id, rank);
  EXPECT(res == ncclInvalidUsage, "rank %d: init with NCCL_NET=bogusnet on rank %d: %s", rank, bad,
         ncclGetErrorString(res));
  EXPECT(comm == NULL, "rank %d: a failed init left a communicator", rank);
  char want[160];
  snprintf(want, sizeof want, "NCCL_NET=bogusnet : no such network transport (chorus has Socket only), on rank %d",
           bad < 0 ? 0 : bad);
  EXPECT(strstr(ncclGetLastError(NULL), want) != NULL, "rank %d: the last error does not say '%s': '%s'", rank, want,
         ncclGetLastError(NULL));
  return 0;
}

/* NCCL_SOCKET_IFNAME matching no interface on one rank (arg: which): that
 * rank says so, and the others fail at once naming it, not at the timeout
 * (20 s here) waiting for it. */
static int badInterface(int rank, int n, ncclUniqueId id, void *arg) {
  int bad = *(int *)arg;
  setenv("CHORUS_TIMEOUT", "20", 1);
  if (rank == bad) setenv("NCCL_SOCKET_IFNAME", "bogus0", 1);
  ncclComm_t comm = NULL;
  double t0 = nowSec();
  ncclResult_t res = ncclCommInitRank(&comm, n, id, rank);
  double took = nowSec() - t0;
  EXPECT(res != ncclSuccess && comm == NULL, "rank %d: init with a bad NCCL_SOCKET_IFNAME on rank %d: %s", rank, bad,
         ncclGetErrorString(res));
  EXPECT(took < 5, "rank %d: the init failed after %.1f s", rank, took);
  char want[160];
  if (rank == bad) snprintf(want, sizeof want, "no socket interface found matching NCCL_SOCKET_IFNAME=bogus0");
  else snprintf(want, sizeof want, "(rank %d of %d) found no network interface to use", bad, n);
  EXPECT(strstr(ncclGetLastError(NULL), want) != NULL, "rank %d: the last error does not say '%s': '%s'", rank, want,
         ncclGetLastError(NULL));
  return 0;
}

/* NCCL_SOCKET_IFNAME entries are prefix[:port] in NCCL (the port is for
 * InfiniBand): lo:1 and =lo:0 pick lo, and the ranks work over it (arg: the
 * value every rank sets). */
static int ifnameWithPort(int rank, int n, ncclUniqueId id, void *arg) {
  setenv("NCCL_SOCKET_IFNAME", (const char *)arg, 1);
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRank(&comm, n, id, rank);
  EXPECT(res == ncclSuccess, "rank %d: init with NCCL_SOCKET_IFNAME=%s: %s (%s)", rank, (const char *)arg,
         ncclGetErrorString(res), ncclGetLastError(NULL));
  if (res != ncclSuccess) return 1;
  EXPECT(strcmp(comm->boot.ifname, "lo") == 0, "rank %d: NCCL_SOCKET_IFNAME=%s picked '%s'", rank, (const char *)arg,
         comm->boot.ifname);
  float x = (float)rank, y = -1;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
  EXPECT(y == (float)(n * (n - 1) / 2), "rank %d: AllReduce gave %g", rank, y);
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* NCCL_SOCKET_NTHREADS past 16, or more than 64 data sockets in all, are
 * cut to NCCL's bounds with NCCL's WARN (net_socket.cc) on a rank that uses
 * sockets, and the sockets still work (arg: "threads,socks,warning"). */
static int socketBounds(int rank, int n, ncclUniqueId id, void *arg) {
  char spec[160], *threads = spec, *socks, *warning;
  snprintf(spec, sizeof spec, "%s", (const char *)arg);
  socks = strchr(threads, ',');
  *socks++ = 0;
  warning = strchr(socks, ',');
  *warning++ = 0;
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("NCCL_SOCKET_NTHREADS", threads, 1);
  setenv("NCCL_NSOCKS_PERTHREAD", socks, 1);
  ncclComm_t comm = NULL;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  const char *err = ncclGetLastError(NULL);
  EXPECT(strstr(err, warning) != NULL, "rank %d: NCCL_SOCKET_NTHREADS=%s NCCL_NSOCKS_PERTHREAD=%s: last error '%s'",
         rank, threads, socks, err);
  static float x[1 << 18], y[1 << 18];
  for (int i = 0; i < 1 << 18; i++) x[i] = (float)(rank + i % 7);
  NCCLCHECK(ncclAllReduce(x, y, 1 << 18, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < 1 << 18; i++)
    if (y[i] != (float)(n * (n - 1) / 2 + n * (i % 7))) {
      EXPECT(0, "rank %d: y[%d] = %g", rank, i, y[i]);
      break;
    }
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* A rank given a port where no root listens (a wrong NCCL_COMM_ID) gives
 * up at its timeout saying the address and why, not just that time ran out. */
static int wrongRootPort(void) {
  int failed = 0;
  struct sockaddr_in a;
  EXPECT(testFreePort(&a) == 0, "a free port");
  pid_t child = fork();
  if (child == 0) {
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(a.sin_port));
    setenv("NCCL_COMM_ID", addr, 1);
    setenv("CHORUS_TIMEOUT", "2", 1);
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    double t0 = nowSec();
    ncclResult_t res = ncclGetUniqueId(&id);
    if (res == ncclSuccess) res = ncclCommInitRank(&comm, 2, id, 1);
    const char *why = ncclGetLastError(NULL);
    char want[128];
    snprintf(want, sizeof want, "no root answered at %s (the last attempt: Connection refused)", addr);
    int ok = res == ncclTimeout && strstr(why, want) != NULL && nowSec() - t0 < 5;
    if (!ok) fprintf(stderr, "wrong root port: %s after %.1f s: %s\n", ncclGetErrorString(res), nowSec() - t0, why);
    _exit(ok ? 0 : 1);
  }
  int st = 0;
  EXPECT(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0, "a wrong root port");
  return failed;
}

int main(void) {
  int failed = 0;
  if (tempDir(logDir, "test-env") != 0) return 1;
  char conf[256], logPattern[256];
  snprintf(conf, sizeof conf, "%s/nccl.conf", logDir);
  FILE *f = fopen(conf, "w");
  fprintf(f, "# a comment\nNCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS = INIT,COLL,ENV\nNCCL_MAX_NCHANNELS=5\nNCCL_BUFFSIZE=131072\n");
  fclose(f);
  snprintf(logPattern, sizeof logPattern, "%s/log.%%h.%%p", logDir);
  setenv("NCCL_CONF_FILE", conf, 1);
  setenv("NCCL_MAX_NCHANNELS", "3", 1); /* the environment wins over the file */
  setenv("NCCL_DEBUG_FILE", logPattern, 1);
  setenv("NCCL_SOCKET_INLINE", "12x", 1); /* not a number: a WARN, and the default */
  EXPECT(paramInt(paramSocketInline) == 128, "NCCL_SOCKET_INLINE=12x gave %lld", (long long)paramInt(paramSocketInline));
  EXPECT(paramInt(paramMaxNChannels) == 3, "NCCL_MAX_NCHANNELS = %lld", (long long)paramInt(paramMaxNChannels));
  EXPECT(paramInt(paramBuffSize) == 131072, "NCCL_BUFFSIZE = %lld", (long long)paramInt(paramBuffSize));
  EXPECT(strcmp(paramStr(paramDebug), "INFO") == 0, "NCCL_DEBUG = '%s'", paramStr(paramDebug));
  EXPECT(strcmp(paramStr(paramDebugSubsys), "INIT,COLL,ENV") == 0, "NCCL_DEBUG_SUBSYS = '%s'", paramStr(paramDebugSubsys));

  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  /* Strangers at the root: garbage, a wrong secret, and a silent connection. */
  struct bootstrapHandle h;
  memcpy(&h, id.internal, sizeof h);
  socklen_t len = h.addr.sa.sa_family == AF_INET6 ? sizeof h.addr.sin6 : sizeof h.addr.sin;
  int silent = socket(h.addr.sa.sa_family, SOCK_STREAM, 0);
  EXPECT(connect(silent, &h.addr.sa, len) == 0, "connect to the root");
  for (int k = 0; k < 2; k++) {
    int s = socket(h.addr.sa.sa_family, SOCK_STREAM, 0);
    EXPECT(connect(s, &h.addr.sa, len) == 0, "connect to the root");
    char junk[200];
    memset(junk, k ? 0x41 : 0xff, sizeof junk);
    if (write(s, junk, sizeof junk) < 0) perror("write");
    /* Wait until the root has dealt with it (it logs, then closes): the
     * ranks are forked next, and a fork taken while the root thread holds
     * the log's or the allocator's lock would leave a child stuck on it. */
    shutdown(s, SHUT_WR);
    while (read(s, junk, sizeof junk) > 0) {
    }
    close(s);
  }
  int n = 3;
  /* Our id, with the strangers queued at its root. */
  double t0 = nowSec();
  failed += runRanksWithId(n, id, rankMain, NULL, 60);
  double took = nowSec() - t0;
  close(silent);
  /* The silent connection stays open all along: it must not delay anyone. */
  EXPECT(took < 1.0, "rendezvous with strangers took %.2f s", took);

  char host[64] = "";
  gethostname(host, sizeof host - 1);
  char *dot = strchr(host, '.');
  if (dot) *dot = 0;
  DIR *d = opendir(logDir);
  int logs = 0, ringLogs = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "log.%s.", host);
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", logDir, e->d_name);
    if (fileLinesWith(path, "Init COMPLETE") <= 0) continue; /* the parent's own log holds only the root */
    logs++;
    ringLogs += 0 < fileLinesWith(path, "NCCL INFO Channel 00/03 : 0 1 2"); /* rank 0's only, as NCCL */
    static const char *needles[] = {"NCCL INFO Trees [0] ", "NCCL INFO comm", "nranks 3",
                                    "NCCL INFO AllReduce: opCount 0 sendbuff", "via SHM",
                                    "NCCL INFO NCCL_BUFFSIZE set by environment to 131072.",
                                    "NCCL WARN NCCL_SOCKET_INLINE=12x is not a number: using the default 128"};
    for (size_t i = 0; i < sizeof needles / sizeof *needles; i++)
      if (fileLinesWith(path, needles[i]) <= 0) {
        fprintf(stderr, "%s lacks '%s'\n", path, needles[i]);
        failed++;
      }
  }
  if (d) closedir(d);
  EXPECT(logs == n, "found %d rank logs in %s, expected %d", logs, logDir, n);
  EXPECT(ringLogs == 1, "%d rank logs print the rings, expected rank 0's alone", ringLogs);

  timedOut = mmap(NULL, sizeof *timedOut, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT(timedOut != MAP_FAILED, "mmap");
  ncclUniqueId id2;
  NCCLCHECK(ncclGetUniqueId(&id2));
  EXPECT(paramInt(paramTimeout) != 2, "the parent's CHORUS_TIMEOUT is already 2");
  failed += runRanksWithId(2, id2, childSetsTimeout, NULL, 30);
  ncclUniqueId id3;
  for (int bad = -1; bad < 3; bad++) {
    NCCLCHECK(ncclGetUniqueId(&id3));
    failed += runRanksWithId(bad < 0 ? 2 : 3, id3, unknownNet, &bad, 30);
  }
  for (int bad = 0; bad < 3; bad++) {
    NCCLCHECK(ncclGetUniqueId(&id3));
    failed += runRanksWithId(3, id3, badInterface, &bad, 30);
  }
  const char *withPort[] = {"lo:1", "=lo:0", "bogus0,lo:1"};
  for (size_t k = 0; k < sizeof withPort / sizeof *withPort; k++) {
    NCCLCHECK(ncclGetUniqueId(&id3));
    failed += runRanksWithId(2, id3, ifnameWithPort, (void *)withPort[k], 30);
  }
  const char *bounds[] = {"20,1,NCCL_SOCKET_NTHREADS is greater than the maximum allowed, setting to 16",
                          "3,30,the total number of sockets is greater than the maximum allowed, setting NCCL_NSOCKS_PERTHREAD to 21"};
  for (size_t k = 0; k < sizeof bounds / sizeof *bounds; k++) {
    NCCLCHECK(ncclGetUniqueId(&id3));
    failed += runRanksWithId(2, id3, socketBounds, (void *)bounds[k], 30);
  }
  failed += wrongRootPort();
  NCCLCHECK(ncclGetUniqueId(&id3));
  failed += runRanksWithId(2, id3, ctaLimits, NULL, 30);
  NCCLCHECK(ncclGetUniqueId(&id3));
  failed += runRanksWithId(2, id3, legacyRings, NULL, 30);
  printf("test_env: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
