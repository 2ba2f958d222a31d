/* NCCL's tuner plugin (NCCL_TUNER_PLUGIN) against the test plugin
 * (tuner_plugin.c, which writes what it is told to a file).
 *   test_tunerplugin PLUGIN VERSION    the tuner alone (no processes): the
 *       table the plugin gets (NCCL's shape, the model's times, what chorus
 *       lacks ignored, NCCL's byte counts), the choice it steers, entries
 *       chorus cannot run left out, its channels, a plugin that leaves
 *       nothing or fails, init and finalize
 *   test_tunerplugin PLUGIN VERSION N ranks
 *       N forked ranks with the plugin: every collective exact, each rank's
 *       plugin initialised and finalised once
 *   test_tunerplugin PLUGIN VERSION N differ
 *       only rank 0 loads the plugin, so the ranks choose differently for a
 *       small AllReduce: every rank's call fails (the descriptor carries the
 *       choice), none returns success
 *   test_tunerplugin PLUGIN VERSION N failinit
 *       the plugin's init fails on rank 1: that rank's init fails with it,
 *       and no rank's init succeeds */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/desc.h"
#include "harness.h"
#include "tune/tune.h"

static const char *plugin, *mode;
static int version;
static char logPath[256];

/* The lines of the plugin's log written by this process that hold what:
 * how many, and the last in out (when out is given). */
static int scanLog(const char *what, char *out, size_t len) {
  FILE *f = fopen(logPath, "r");
  if (!f) return 0;
  char line[1024], mine[32];
  snprintf(mine, sizeof mine, "pid %d ", (int)getpid());
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, mine, strlen(mine)) == 0 && strstr(line, what)) {
      if (out) snprintf(out, len, "%s", line);
      n++;
    }
  fclose(f);
  return n;
}
static int lastLine(const char *what, char *out, size_t len) { return scanLog(what, out, len) > 0; }
static int countLines(const char *what) { return scanLog(what, NULL, 0); }

static ncclResult_t chooseOn(const struct tuneTable *t, int coll, size_t count, int maxNch, int mapped,
                             struct tuneChoice *c) {
  return tuneChoose(t, coll, count, sizeof(float), ncclFloat, 65536, maxNch, mapped, c);
}
static ncclResult_t choose(const struct tuneTable *t, int coll, size_t count, struct tuneChoice *c) {
  return chooseOn(t, coll, count, 4, 0, c);
}

static int sameChoice(const struct tuneChoice *a, const struct tuneChoice *b) {
  return a->algo == b->algo && a->proto == b->proto && a->nch == b->nch;
}

static int tunerAlone(void) {
  struct tuneConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.smallThreshold = 65536;
  struct tuneTopo topo = {.nranks = 4, .nhosts = 1, .localRanks = 4, .cores = 4, .machineRanks = 4};
  struct tuneTable plain, t;
  NCCLCHECK(tuneSetup(&plain, &cfg, &topo));
  NCCLCHECK(tuneSetup(&t, &cfg, &topo));
  NCCLCHECK(tunePluginInit(&t, 0x1234, 4));
  EXPECT(t.plugin == 1, "no plugin from NCCL_TUNER_PLUGIN=%s", plugin);
  char line[1024];
  EXPECT(lastLine("init", line, sizeof line) && strstr(line, "init nRanks 4 nNodes 1"), "init: %s", line);
  if (version >= 5) EXPECT(lastLine("domains", line, sizeof line) && strstr(line, "domains 1 4 4 commId set"), "%s", line);
  struct tuneChoice c, p;

  /* A small AllReduce: the plugin makes Ring/Simple free on 2 channels. */
  NCCLCHECK(choose(&plain, collAllReduce, 2, &p));
  EXPECT(p.algo != algoRing || p.proto != protoSimple, "the model picked Ring/Simple already: the case proves nothing");
  NCCLCHECK(choose(&t, collAllReduce, 2, &c));
  EXPECT(c.algo == algoRing && c.proto == protoSimple && c.nch == 2 && c.us == 0.0,
         "8-byte AllReduce with the plugin: %s/%s on %d channels, %.3f us", algoName(c.algo), protoName(c.proto), c.nch,
         c.us);
  if (version >= 3) {
    EXPECT(lastLine("call func 4 bytes 8 ", line, sizeof line), "no call for the 8-byte AllReduce");
    EXPECT(strstr(line, "pipe 1 algos 7 protos 3"), "the table's shape: %s", line);
    EXPECT(strstr(line, version == 3 ? "reg -1" : "reg 0"), "regBuff: %s", line);
    double tree[3], ring[3], others;
    const char *at = strstr(line, "tree ");
    EXPECT(at && sscanf(at, "tree %lf %lf %lf ring %lf %lf %lf others %lf", &tree[0], &tree[1], &tree[2], &ring[0],
                        &ring[1], &ring[2], &others) == 7, "unparsed: %s", line);
    EXPECT(tree[1] == -1 && ring[1] == -1 && others == -6, "LL128 and the algorithms chorus lacks are not ignored: %s",
           line);
    double model = tuneModelUs(&topo, collAllReduce, algoRing, protoSimple, 1, 8, 0);
    EXPECT((float)ring[2] == (float)model, "Ring/Simple costs %g in the table, %g in the model", ring[2], model);
    model = tuneModelUs(&topo, collAllReduce, algoRing, protoLL, 1, 8, 0);
    EXPECT((float)ring[0] == (float)model, "Ring/LL costs %g in the table, %g in the model", ring[0], model);
  }
  /* Its channels, at most the communicator's. */
  NCCLCHECK(chooseOn(&t, collAllReduce, 2, 1, 0, &c));
  EXPECT(c.algo == algoRing && c.nch == 1, "8-byte AllReduce on a 1-channel communicator: %s on %d channels",
         algoName(c.algo), c.nch);
  if (version >= 4) { /* buffers in symmetric windows are NCCL's registered ones */
    NCCLCHECK(chooseOn(&t, collAllReduce, 2, 4, 1, &c));
    EXPECT(lastLine("call func 4 bytes 8 ", line, sizeof line) && strstr(line, "reg 1"), "regBuff of mapped buffers: %s",
           line);
  }
  /* Past 4 KiB the plugin leaves the table: the model's choice stands. */
  NCCLCHECK(choose(&plain, collAllReduce, 1 << 18, &p));
  NCCLCHECK(choose(&t, collAllReduce, 1 << 18, &c));
  EXPECT(sameChoice(&p, &c), "1 MiB AllReduce: %s/%s/%d with the plugin, %s/%s/%d without", algoName(c.algo),
         protoName(c.proto), c.nch, algoName(p.algo), protoName(p.proto), p.nch);
  /* Asked every time, as NCCL asks per collective (no cache in between). */
  int calls = countLines("call func 4 bytes 1048576 ");
  NCCLCHECK(choose(&t, collAllReduce, 1 << 18, &c));
  EXPECT(countLines("call func 4 bytes 1048576 ") == calls + 1, "the plugin was not asked again");
  if (version >= 3) {
    /* Broadcast: a free NVLS entry, which chorus cannot run, changes nothing. */
    NCCLCHECK(choose(&plain, collBroadcast, 100, &p));
    NCCLCHECK(choose(&t, collBroadcast, 100, &c));
    EXPECT(sameChoice(&p, &c), "Broadcast: %s/%s with the plugin's NVLS, %s/%s without", algoName(c.algo),
           protoName(c.proto), algoName(p.algo), protoName(p.proto));
    /* Reduce: with Ring excluded, neither the ring nor the chain runs. */
    for (size_t count = 16; count <= (1u << 22); count *= 64) {
      NCCLCHECK(choose(&t, collReduce, count, &c));
      EXPECT(c.algo != algoRing && c.algo != algoChain, "Reduce of %zu floats: %s though the plugin excluded Ring",
             count, algoName(c.algo));
    }
    /* AllGather: NCCL's byte count is the output's. */
    NCCLCHECK(choose(&t, collAllGather, 1000, &c));
    EXPECT(lastLine("call func 2 bytes 16000 ", line, sizeof line), "AllGather of 4 x 1000 floats not asked as 16000 bytes");
    /* Entries that cost the same: the first in NCCL's order wins (Tree
     * before Ring, LL before Simple), as in NCCL's topoGetAlgoInfo. */
    setenv("CHORUS_TEST_TUNER_TIE", "1", 1);
    for (size_t count = 2; count <= (1u << 22); count *= 256) {
      NCCLCHECK(choose(&t, collAllReduce, count, &c));
      char want[32];
      snprintf(want, sizeof want, "call func 4 bytes %zu ", count * 4);
      double e[6] = {-1, -1, -1, -1, -1, -1};
      const char *at = lastLine(want, line, sizeof line) ? strstr(line, "tree ") : NULL;
      EXPECT(at && sscanf(at, "tree %lf %*f %lf ring %lf %*f %lf", &e[0], &e[1], &e[2], &e[3]) == 4, "unparsed: %s", line);
      static const int algos[4] = {algoTree, algoTree, algoRing, algoRing}, protos[4] = {protoLL, protoSimple, protoLL,
                                                                                         protoSimple};
      int first = 0;
      while (first < 4 && e[first] < 0) first++;
      EXPECT(first < 4 && c.algo == algos[first] && c.proto == protos[first],
             "AllReduce of %zu floats, every entry free: %s/%s, NCCL's first is entry %d", count, algoName(c.algo),
             protoName(c.proto), first);
    }
    unsetenv("CHORUS_TEST_TUNER_TIE");
    /* A plugin that excludes all it sees leaves chorus's own algorithms,
     * which it cannot name; where there are none, nothing runs. */
    setenv("CHORUS_TEST_TUNER_NONE", "1", 1);
    int ownInsteadOfRing = 0;
    ncclResult_t r;
    static const int colls[2] = {collAllReduce, collAllGather};
    for (int k = 0; k < 2; k++)
      for (size_t count = 256; count <= (1u << 22); count *= 4) {
        int coll = colls[k];
        NCCLCHECK(choose(&plain, coll, count, &p));
        r = choose(&t, coll, count, &c);
        EXPECT(r != ncclSuccess || (c.algo != algoRing && c.algo != algoChain && c.algo != algoTree),
               "%s of %zu floats the plugin excluded Ring and Tree for: %s", collName(coll), count, algoName(c.algo));
        ownInsteadOfRing |= r == ncclSuccess && p.algo == algoRing;
      }
    EXPECT(ownInsteadOfRing, "no size where the model's Ring gave way to chorus's own algorithm");
    r = choose(&t, collReduce, 1 << 22, &c);
    unsetenv("CHORUS_TEST_TUNER_NONE");
    EXPECT(r == ncclInternalError, "a 16 MiB Reduce the plugin left nothing for: %s, %s", ncclGetErrorString(r),
           r == ncclSuccess ? algoName(c.algo) : "");
    setenv("CHORUS_TEST_TUNER_FAIL_CALL", "1", 1);
    r = choose(&t, collReduceScatter, 1000, &c);
    unsetenv("CHORUS_TEST_TUNER_FAIL_CALL");
    EXPECT(r == ncclInternalError, "a failing getCollInfo: %s", ncclGetErrorString(r));
    setenv("CHORUS_TEST_TUNER_FAIL_CALL", "inprogress", 1); /* not a result a call may give for it */
    r = choose(&t, collReduceScatter, 1000, &c);
    unsetenv("CHORUS_TEST_TUNER_FAIL_CALL");
    EXPECT(r == ncclInternalError, "a getCollInfo that says ncclInProgress: %s", ncclGetErrorString(r));
  }
  /* Send/Recv and AlltoAll are not the plugin's (NCCL asks for collectives). */
  calls = countLines("call ");
  NCCLCHECK(choose(&t, collAlltoAll, 1000, &c));
  NCCLCHECK(choose(&t, collSend, 1000, &c));
  EXPECT(countLines("call ") == calls, "the plugin was asked about AlltoAll or Send");
  /* A second communicator shares the library: it outlives the first. */
  struct tuneTable second;
  NCCLCHECK(tuneSetup(&second, &cfg, &topo));
  NCCLCHECK(tunePluginInit(&second, 0x5678, 4));
  EXPECT(countLines("init nRanks") == 2, "the second communicator's init: %d inits", countLines("init nRanks"));
  tunePluginFinalize(&t);
  EXPECT(t.plugin == 0 && lastLine("finalize", line, sizeof line) && strstr(line, "finalize ok"), "finalize: %s", line);
  NCCLCHECK(choose(&second, collAllReduce, 2, &c));
  EXPECT(c.algo == algoRing && c.proto == protoSimple, "the second communicator's plugin after the first's finalize");
  tunePluginFinalize(&second);
  EXPECT(countLines("finalize ok") == 2, "finalized %d times", countLines("finalize ok"));
  NCCLCHECK(choose(&t, collAllReduce, 2, &c));
  NCCLCHECK(choose(&plain, collAllReduce, 2, &p));
  EXPECT(sameChoice(&p, &c), "after finalize the plugin still chose");
  /* A failing init fails, as NCCL's init does. */
  setenv("CHORUS_TEST_TUNER_FAIL_INIT", "1", 1);
  struct tuneTable failing;
  NCCLCHECK(tuneSetup(&failing, &cfg, &topo));
  ncclResult_t r = tunePluginInit(&failing, 0x1234, 4);
  unsetenv("CHORUS_TEST_TUNER_FAIL_INIT");
  EXPECT(r == ncclSystemError && failing.plugin == 0, "a failing init: %s", ncclGetErrorString(r));
  return 0;
}

static int checkColls(int rank, int n, ncclComm_t comm) {
  static const size_t counts[] = {2, 1000, 300000};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    size_t count = counts[k];
    float *in = guardAlloc(count * n * sizeof *in), *out = guardAlloc(count * n * sizeof *out);
    for (size_t i = 0; i < count * n; i++) in[i] = (float)((i * 7 + (size_t)rank) % 13);
    NCCLCHECK(ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, NULL));
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < n; r++) want += (float)((i * 7 + (size_t)r) % 13);
      EXPECT(out[i] == want, "rank %d AllReduce of %zu: out[%zu] = %g, want %g", rank, count, i, out[i], want);
    }
    NCCLCHECK(ncclBroadcast(in, out, count, ncclFloat, n - 1, comm, NULL));
    for (size_t i = 0; i < count; i++)
      EXPECT(out[i] == (float)((i * 7 + (size_t)(n - 1)) % 13), "rank %d Broadcast of %zu: out[%zu] = %g", rank, count,
             i, out[i]);
    NCCLCHECK(ncclReduce(in, out, count, ncclFloat, ncclMax, 0, comm, NULL));
    for (size_t i = 0; rank == 0 && i < count; i++) {
      float want = 0;
      for (int r = 0; r < n; r++) want = (float)((i * 7 + (size_t)r) % 13) > want ? (float)((i * 7 + (size_t)r) % 13) : want;
      EXPECT(out[i] == want, "Reduce of %zu: out[%zu] = %g, want %g", count, i, out[i], want);
    }
    NCCLCHECK(ncclAllGather(in, out, count, ncclFloat, comm, NULL));
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++)
        EXPECT(out[r * count + i] == (float)((i * 7 + (size_t)r) % 13), "rank %d AllGather of %zu: block %d [%zu] = %g",
               rank, count, r, i, out[r * count + i]);
    NCCLCHECK(ncclReduceScatter(in, out, count, ncclFloat, ncclSum, comm, NULL));
    for (size_t i = 0; i < count; i++) {
      float want = 0;
      for (int r = 0; r < n; r++) want += (float)((((size_t)rank * count + i) * 7 + (size_t)r) % 13);
      EXPECT(out[i] == want, "rank %d ReduceScatter of %zu: out[%zu] = %g, want %g", rank, count, i, out[i], want);
    }
    guardFree(in);
    guardFree(out);
  }
  return 0;
}

static int rankMain(int rank, int n, ncclUniqueId id) {
  ncclComm_t comm;
  ncclResult_t res = ncclCommInitRank(&comm, n, id, rank);
  if (strcmp(mode, "failinit") == 0) {
    EXPECT(res != ncclSuccess, "rank %d's init succeeded though rank 1's plugin failed its init", rank);
    if (rank == 1) EXPECT(res == ncclSystemError, "rank 1's init: %s", ncclGetErrorString(res));
    return 0;
  }
  NCCLCHECK(res);
  if (strcmp(mode, "differ") == 0) {
    float x[2] = {1, 2}, y[2];
    res = ncclAllReduce(x, y, 2, ncclFloat, ncclSum, comm, NULL);
    EXPECT(res != ncclSuccess, "rank %d: an AllReduce whose ranks chose differently succeeded", rank);
    ncclCommAbort(comm);
    return 0;
  }
  if (checkColls(rank, n, comm)) return 1;
  NCCLCHECK(ncclCommDestroy(comm));
  char line[1024];
  EXPECT(countLines("init nRanks") == 1 && lastLine("init nRanks", line, sizeof line), "rank %d: no init", rank);
  char want[64];
  snprintf(want, sizeof want, "init nRanks %d nNodes 1", n);
  EXPECT(strstr(line, want), "rank %d: %s", rank, line);
  EXPECT(countLines("finalize ok") == 1, "rank %d: finalized %d times", rank, countLines("finalize ok"));
  EXPECT(countLines("call func 4 bytes 8 ") >= 1, "rank %d: the plugin was not asked about the 8-byte AllReduce", rank);
  return 0;
}

static int execRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  char hex[2 * NCCL_UNIQUE_ID_BYTES + 1], r[16], nr[16], v[16];
  idToHex(&id, hex);
  snprintf(r, sizeof r, "%d", rank);
  snprintf(nr, sizeof nr, "%d", n);
  snprintf(v, sizeof v, "%d", version);
  if (strcmp(mode, "differ") == 0 && rank != 0) setenv("NCCL_TUNER_PLUGIN", "none", 1);
  if (strcmp(mode, "failinit") == 0 && rank == 1) setenv("CHORUS_TEST_TUNER_FAIL_INIT", "1", 1);
  execl("/proc/self/exe", "test_tunerplugin", plugin, v, "rank", r, nr, hex, mode, (char *)NULL);
  perror("exec");
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PLUGIN VERSION [N MODE]\n", argv[0]);
    return 2;
  }
  plugin = argv[1];
  version = atoi(argv[2]);
  setenv("NCCL_TUNER_PLUGIN", plugin, 0);
  if (!getenv("CHORUS_TEST_TUNER_LOG")) {
    snprintf(logPath, sizeof logPath, "/tmp/chorus-tuner-test-%d.log", (int)getpid());
    setenv("CHORUS_TEST_TUNER_LOG", logPath, 1);
  } else {
    snprintf(logPath, sizeof logPath, "%s", getenv("CHORUS_TEST_TUNER_LOG"));
  }
  if (argc == 8 && strcmp(argv[3], "rank") == 0) {
    ncclUniqueId id;
    if (idFromHex(argv[6], &id)) return 2;
    mode = argv[7];
    return rankMain(atoi(argv[4]), atoi(argv[5]), id);
  }
  int failed, n = argc >= 5 ? atoi(argv[3]) : 0;
  if (argc >= 5) {
    mode = argv[4];
    if (n < 2 || (strcmp(mode, "ranks") && strcmp(mode, "differ") && strcmp(mode, "failinit"))) {
      fprintf(stderr, "usage: %s PLUGIN VERSION [N ranks|differ|failinit], N at least 2\n", argv[0]);
      return 2;
    }
    failed = runRanks(n, execRank, NULL, 60);
  } else {
    failed = tunerAlone();
  }
  unlink(logPath);
  printf("test_tunerplugin %s: %s\n", argc >= 5 ? mode : "alone", failed ? "FAILED" : "passed");
  return failed != 0;
}
