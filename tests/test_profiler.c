/* Profiler plugins (NCCL_PROFILER_PLUGIN): ranks load tests/profiler_plugin.c
 * through NCCL's search rules, run bare collectives, a group of sends and
 * receives, a call on a stream and a large AllReduce, and destroy their
 * communicator; then the logs the plugin wrote are checked against the
 * calls made: one init and one finalize per rank with the same comm hash,
 * every event started once and stopped once, NCCL's hierarchy (GroupApi >
 * CollApi > Coll > ProxyOp > ProxyStep, P2pApi > P2p), the Coll fields
 * (per-function sequence numbers, count, datatype, root, algorithm,
 * protocol, channels), each ProxyOp's step count, and each step's states.
 *   test_profiler NRANKS PLUGIN [v4|v3|v2|v1|absent|sockets]
 * PLUGIN is what NCCL_PROFILER_PLUGIN is set to: a path, or NCCL's short
 * name (found through LD_LIBRARY_PATH as libnccl-profiler-NAME.so); v4: a
 * version 4 plugin (no API events); v3, v2, v1: those versions (v1's
 * numbers are turned back into names by the plugin); absent: no such
 * plugin, and the ranks run without one; sockets: over TCP
 * (NCCL_SHM_DISABLE=1), with, last, a large send from rank 0 to rank 1
 * that rank 1 receives LATE_MS late: send steps end when their slot has
 * left, so some must last about that long after SendWait. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

#define BIG (300 * 1000) /* floats: many slots per step */
#define LATE (16 << 20)   /* floats: more than the FIFO and the sockets' buffers hold */
#define LATE_MS 400

static int64_t *lateStart; /* shared by the ranks: when rank 0 began its late send (us) */

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  int late = arg != NULL && n >= 2;
  ncclComm_t comm;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = "profiled"; /* handed to the plugin's init (version 4 on) */
  NCCLCHECK(ncclCommInitRankConfig(&comm, n, id, rank, &cfg));
  float *a = guardAlloc(sizeof(float) * BIG), *b = guardAlloc(sizeof(float) * BIG);
  int *s = guardAlloc(sizeof(int) * 300), *r = guardAlloc(sizeof(int) * 300);
  for (int i = 0; i < BIG; i++) a[i] = (float)(rank + i % 7);
  for (int i = 0; i < 300; i++) s[i] = rank * 1000 + i;
  NCCLCHECK(ncclAllReduce(a, b, 1000, ncclFloat32, ncclSum, comm, NULL));
  NCCLCHECK(ncclBroadcast(a, b, 77, ncclFloat32, 1 % n, comm, NULL));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(s, 300, ncclInt32, (rank + 1) % n, comm, NULL));
  NCCLCHECK(ncclRecv(r, 300, ncclInt32, (rank + n - 1) % n, comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int i = 0; i < 300; i++) EXPECT(r[i] == ((rank + n - 1) % n) * 1000 + i, "recv[%d] = %d", i, r[i]);
  cudaStream_t st;
  NCCLCHECK(chorusStreamCreate(&st));
  NCCLCHECK(ncclAllReduce(a, b, 1000, ncclFloat32, ncclMax, comm, st));
  NCCLCHECK(chorusStreamSynchronize(st));
  NCCLCHECK(chorusStreamDestroy(st));
  NCCLCHECK(ncclAllReduce(a, b, BIG, ncclFloat32, ncclSum, comm, NULL));
  for (int i = 0; i < BIG; i += 997)
    EXPECT(b[i] == (float)(n * (i % 7) + n * (n - 1) / 2), "b[%d] = %g", i, (double)b[i]);
  if (late && rank < 2) {
    float *big = malloc(sizeof(float) * LATE);
    EXPECT(big != NULL, "out of memory");
    for (int i = 0; i < LATE; i++) big[i] = rank ? -1.0f : (float)(i % 1000);
    /* Late from when rank 0 calls, whenever its AllReduce ended (a
     * loaded machine may hold it up after rank 1's ended). */
    if (rank == 0) __atomic_store_n(lateStart, (int64_t)(nowSec() * 1e6), __ATOMIC_RELEASE);
    if (rank == 1) {
      int64_t t0;
      while ((t0 = __atomic_load_n(lateStart, __ATOMIC_ACQUIRE)) == 0) usleep(1000);
      while (nowSec() * 1e6 < (double)(t0 + LATE_MS * 1000)) usleep(5000);
    }
    NCCLCHECK(rank ? ncclRecv(big, LATE, ncclFloat32, 0, comm, NULL) : ncclSend(big, LATE, ncclFloat32, 1, comm, NULL));
    for (int i = 0; i < LATE; i += 4099) EXPECT(big[i] == (float)(i % 1000), "late[%d] = %g", i, (double)big[i]);
    free(big);
  }
  EXPECT(guardCheck(a) == 0 && guardCheck(b) == 0 && guardCheck(s) == 0 && guardCheck(r) == 0, "guards");
  NCCLCHECK(ncclCommDestroy(comm));
  guardFree(a);
  guardFree(b);
  guardFree(s);
  guardFree(r);
  return 0;
}

/* One event as the plugin saw it. */
#define MAX_EVENTS 200000
struct ev {
  long id, parent;
  char type[16];
  char fields[256];
  int started, stopped, states, lastState, children, kernelChs;
  int seq[4];          /* its first states, in order */
  size_t flushBytes;   /* a receive step's RecvFlushWait transSize */
  unsigned long long sendWaitNs, stopNs;
  unsigned long long kchMask;
};
static struct ev *evs;
static int nev;

static struct ev *find(long id) {
  for (int i = nev - 1; i >= 0; i--)
    if (evs[i].id == id) return &evs[i];
  return NULL;
}

/* A field "name=value" of an event line, as a string ("" when absent). */
static const char *field(const struct ev *e, const char *name, char *buf, size_t len) {
  char key[64];
  snprintf(key, sizeof key, " %s=", name);
  const char *p = strstr(e->fields, key);
  buf[0] = 0;
  if (!p) return buf;
  p += strlen(key);
  size_t k = strcspn(p, " \n");
  snprintf(buf, len, "%.*s", (int)(k < len - 1 ? k : len - 1), p);
  return buf;
}
static long ifield(const struct ev *e, const char *name) {
  char b[64];
  return atol(field(e, name, b, sizeof b));
}

#define CHECKF(cond, ...)                                                         \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "%s: check failed: %s: ", file, #cond);                    \
      fprintf(stderr, __VA_ARGS__);                                               \
      fprintf(stderr, "\n");                                                      \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

/* Checks one communicator's log; *rank and *hash say whose it is. */
/* version: the plugin's. Below 5: no API events, Coll hangs off Group;
 * below 4: told nothing at init, no channel counts for P2p, no KernelCh
 * timer or KernelChStop; below 3: no KernelCh events at all. */
/* kchOnly: the plugin asked for KernelCh events alone (mask 64), so it must
 * get them and the events above them, as NCCL enables those, and nothing
 * below a Coll or P2p but them. */
static int kchOnly;

static int checkLog(const char *file, int n, int version, int late, int *rankOut, unsigned long long *hashOut) {
  int v4 = version <= 4, v3 = version <= 3, kch = version >= 3;
  FILE *f = fopen(file, "r");
  CHECKF(f != NULL, "cannot open");
  char line[512];
  int inits = 0, finals = 0, rank = -1, nr = -1, nodes = -1;
  unsigned long long hash = 0;
  char name[64] = "";
  nev = 0;
  while (fgets(line, sizeof line, f)) {
    long id, parent;
    int state, rk;
    char type[16];
    size_t ts;
    if (sscanf(line, "init %d %d %d %llu %63s", &rank, &nr, &nodes, &hash, name) == 5) {
      inits++;
    } else if (strcmp(line, "finalize\n") == 0) {
      finals++;
    } else if (sscanf(line, "start %ld %15s %ld %d", &id, type, &parent, &rk) == 4) {
      CHECKF(nev < MAX_EVENTS, "too many events");
      CHECKF(finals == 0, "an event after finalize: %s", line);
      struct ev *e = &evs[nev++];
      memset(e, 0, sizeof *e);
      e->id = id;
      e->parent = parent;
      snprintf(e->type, sizeof e->type, "%s", type);
      snprintf(e->fields, sizeof e->fields, " %.250s", line);
      e->started = 1;
      struct ev *p = parent > 0 ? find(parent) : NULL;
      CHECKF(parent <= 0 || p, "parent %ld of %s is not an event of this communicator", parent, line);
      if (p && strcmp(type, "KernelCh")) p->children++;
      if (p && !strcmp(type, "KernelCh")) {
        int ch = (int)ifield(e, "ch");
        CHECKF(!(p->kchMask >> (ch & 63) & 1), "two KernelCh events for channel %d of event %ld", ch, parent);
        p->kchMask |= 1ull << (ch & 63);
        p->kernelChs++;
      }
      CHECKF(strcmp(type, "ProxyOp") == 0 || strcmp(type, "ProxyStep") == 0 || strcmp(type, "Coll") == 0 ||
                 strcmp(type, "P2p") == 0 || rk == 0,
             "only task events carry the rank: %s", line);
      CHECKF((strcmp(type, "Coll") && strcmp(type, "P2p") && strcmp(type, "ProxyOp")) || rk == rank || v3,
             "rank %d in %s", rk, line);
    } else if (sscanf(line, "state %ld %d %zu", &id, &state, &ts) == 3) {
      struct ev *e = find(id);
      CHECKF(e && !e->stopped, "state of an event not open: %s", line);
      if (e->states < 4) e->seq[e->states] = state;
      if (state == 11) e->flushBytes = ts;
      e->states++;
      e->lastState = state;
      const char *t = strstr(line, " t=");
      if (state == 9 && t) e->sendWaitNs = strtoull(t + 3, NULL, 10);
    } else if (sscanf(line, "stop %ld", &id) == 1) {
      struct ev *e = find(id);
      CHECKF(e != NULL, "stop of an event never started: %s", line);
      CHECKF(!e->stopped, "event %ld stopped twice", id);
      e->stopped = 1;
      const char *t = strstr(line, " t=");
      e->stopNs = t ? strtoull(t + 3, NULL, 10) : 0;
    } else {
      CHECKF(0, "unexpected line %s", line);
    }
  }
  fclose(f);
  CHECKF(inits == 1 && finals == 1, "%d init and %d finalize", inits, finals);
  CHECKF(!strcmp(name, v3 ? "(null)" : "profiled"), "the plugin's init got commName %s", name);
  if (v3) { /* not told at init: the rank the task events carry */
    for (int i = 0; i < nev && rank < 0; i++)
      if (!strcmp(evs[i].type, "Coll")) sscanf(evs[i].fields, " start %*d %*s %*d %d", &rank);
    nr = n, nodes = 1;
  }
  CHECKF(nr == n && rank >= 0 && rank < n && nodes == 1, "init said rank %d of %d on %d nodes", rank, nr, nodes);
  *rankOut = rank;
  *hashOut = hash;

  /* What each rank called, in order (Coll events), and the point-to-point. */
  const char *funcs[] = {"AllReduce", "Broadcast", "AllReduce", "AllReduce"};
  const long counts[] = {1000, 77, 1000, BIG};
  int ncoll = 0, nsend = 0, nrecv = 0, ngroupApi = 0, nproxyOp = 0, nstep = 0, nlate = 0;
  unsigned long long longestSend = 0; /* the longest a send step lasted after SendWait */
  for (int i = 0; i < nev; i++) {
    struct ev *e = &evs[i];
    char b[64];
    CHECKF(e->stopped, "event %ld (%s) never stopped", e->id, e->type);
    struct ev *p = e->parent > 0 ? find(e->parent) : NULL;
    if (!strcmp(e->type, "GroupApi")) {
      ngroupApi++;
      CHECKF(!v4, "a version 4 plugin got an API event");
      CHECKF(e->children >= 1, "GroupApi %ld has no calls", e->id);
    } else if (!strcmp(e->type, "CollApi") || !strcmp(e->type, "P2pApi")) {
      CHECKF(p && !strcmp(p->type, "GroupApi"), "%s %ld hangs off %s", e->type, e->id, p ? p->type : "nothing");
    } else if (!strcmp(e->type, "Coll")) {
      CHECKF(ncoll < 4, "more Coll events than collectives called");
      CHECKF(!strcmp(field(e, "func", b, sizeof b), funcs[ncoll]), "Coll %d is %s, not %s", ncoll, b, funcs[ncoll]);
      CHECKF(ifield(e, "count") == counts[ncoll], "Coll %d count %ld", ncoll, ifield(e, "count"));
      CHECKF(!strcmp(field(e, "dtype", b, sizeof b), "ncclFloat32"), "Coll %d datatype %s", ncoll, b);
      long seq = ifield(e, "seq");
      CHECKF(seq == (ncoll == 1 ? 0 : ncoll == 0 ? 0 : ncoll - 1), "Coll %d (%s) seqNumber %ld", ncoll, funcs[ncoll], seq);
      if (ncoll == 1) CHECKF(ifield(e, "root") == 1 % n, "Broadcast root %ld", ifield(e, "root"));
      CHECKF(ifield(e, "nch") >= 1, "nChannels %ld", ifield(e, "nch"));
      CHECKF(strcmp(field(e, "algo", b, sizeof b), "-") && strcmp(b, "Unknown"), "algo %s", b);
      CHECKF(!strcmp(field(e, "proto", b, sizeof b), "SIMPLE") || !strcmp(b, "LL"), "proto %s", b);
      struct ev *g = find(ifield(e, "group"));
      CHECKF(g && !strcmp(g->type, "Group"), "Coll's parentGroup is not a Group event");
      if (v4) CHECKF(p == g, "a version 4 Coll hangs off its Group");
      else {
        CHECKF(p && !strcmp(p->type, "CollApi"), "Coll hangs off %s", p ? p->type : "nothing");
        CHECKF(!strcmp(field(p, "func", b, sizeof b), funcs[ncoll]), "CollApi func %s", b);
        CHECKF(ifield(p, "count") == counts[ncoll], "CollApi count");
      }
      if (n > 1 && !kchOnly) CHECKF(e->children >= 1, "Coll %d has no ProxyOp events", ncoll);
      CHECKF(e->kernelChs == (kch ? ifield(e, "nch") : 0), "Coll %d: %d KernelCh events, nChannels %ld", ncoll, e->kernelChs,
             ifield(e, "nch"));
      ncoll++;
    } else if (!strcmp(e->type, "P2p") && late && ifield(e, "count") == LATE) {
      nlate++; /* the late send or receive */
    } else if (!strcmp(e->type, "P2p")) {
      int send = !strcmp(field(e, "func", b, sizeof b), "Send");
      CHECKF(send || !strcmp(b, "Recv"), "P2p func %s", b);
      CHECKF(ifield(e, "peer") == (send ? (rank + 1) % n : (rank + n - 1) % n), "%s peer %ld", b, ifield(e, "peer"));
      CHECKF(ifield(e, "count") == 300 && !strcmp(field(e, "dtype", b, sizeof b), "ncclInt32"), "P2p count/dtype");
      if (!v4) CHECKF(p && !strcmp(p->type, "P2pApi"), "P2p hangs off %s", p ? p->type : "nothing");
      CHECKF(ifield(e, "nch") == 1 && e->kernelChs == kch, "%s: %d KernelCh events, nChannels %ld", b,
             e->kernelChs, ifield(e, "nch"));
      nsend += send;
      nrecv += !send;
    } else if (!strcmp(e->type, "ProxyOp")) {
      nproxyOp++;
      CHECKF(p && (!strcmp(p->type, "Coll") || !strcmp(p->type, "P2p")), "ProxyOp hangs off %s", p ? p->type : "-");
      CHECKF(e->children == ifield(e, "nsteps"), "ProxyOp %ld has %d steps, said %ld", e->id, e->children,
             ifield(e, "nsteps"));
      CHECKF(ifield(e, "peer") >= 0 && ifield(e, "peer") < n && (n == 1 || ifield(e, "peer") != rank), "ProxyOp peer");
      CHECKF(ifield(e, "chunk") > 0, "ProxyOp chunkSize");
    } else if (!strcmp(e->type, "KernelCh")) {
      CHECKF(p && (!strcmp(p->type, "Coll") || !strcmp(p->type, "P2p")), "KernelCh hangs off %s", p ? p->type : "-");
      CHECKF(v3 || (e->lastState == 22 && ifield(e, "timer") > 0), "a KernelCh event without its KernelChStop");
      CHECKF(ifield(e, "ch") < ifield(p, "nch"), "KernelCh channel %ld of nChannels %ld", ifield(e, "ch"),
             ifield(p, "nch"));
    } else if (!strcmp(e->type, "ProxyStep")) {
      nstep++;
      CHECKF(p && !strcmp(p->type, "ProxyOp"), "ProxyStep hangs off %s", p ? p->type : "-");
      int send = ifield(p, "send");
      CHECKF(e->states >= 1 && e->lastState == (send ? 9 : 12), "a %s step's last state is %d", send ? "send" : "recv",
             e->lastState);
      /* Every step in NCCL's network proxy's order, whose intervals
       * plugins build from one state to the next: SendGpuWait, SendPeerWait
       * (which versions 3 to 1 do not know), SendWait; RecvWait,
       * RecvFlushWait with the bytes, RecvGpuWait. */
      if (send && v3)
        CHECKF(e->states == 2 && e->seq[0] == 8 && e->seq[1] == 9, "a send step's states %d %d (%d)", e->seq[0],
               e->seq[1], e->states);
      else if (send)
        CHECKF(e->states == 3 && e->seq[0] == 8 && e->seq[1] == 20 && e->seq[2] == 9, "a send step's states %d %d %d (%d)",
               e->seq[0], e->seq[1], e->seq[2], e->states);
      else
        CHECKF(e->states == 3 && e->seq[0] == 10 && e->seq[1] == 11 && e->seq[2] == 12 && (e->flushBytes > 0 || v3),
               "a receive step's states %d %d %d (%d), RecvFlushWait of %zu bytes", e->seq[0], e->seq[1], e->seq[2],
               e->states, e->flushBytes);
      if (send) CHECKF(e->stopNs >= e->sendWaitNs, "a send step stopped before its SendWait");
      if (send && e->stopNs - e->sendWaitNs > longestSend) longestSend = e->stopNs - e->sendWaitNs;
    }
  }
  CHECKF(ncoll == 4, "%d Coll events, 4 collectives called", ncoll);
  CHECKF((nsend == 1 && nrecv == 1) || n == 1, "%d Send and %d Recv events", nsend, nrecv);
  int bare = 4 + (late && rank < 2); /* the late send or receive is a bare call too */
  if (!v4) CHECKF(ngroupApi == bare + 1, "%d GroupApi events: %d bare calls and one group", ngroupApi, bare);
  if (kchOnly) CHECKF(nproxyOp == 0 && nstep == 0, "%d ProxyOp and %d ProxyStep events, none asked for", nproxyOp, nstep);
  else if (n > 1) CHECKF(nproxyOp >= 2 && nstep > nproxyOp, "%d ProxyOp and %d ProxyStep events", nproxyOp, nstep);
  if (late) CHECKF(nlate == (rank < 2), "%d late P2p events on rank %d", nlate, rank);
  /* Rank 0's last slots wait in its FIFO until rank 1 reads: a step that
   * ended at the hand-off to the socket would last no time at all. */
  if (late && rank == 0)
    CHECKF(longestSend >= LATE_MS * 1000000ull / 2, "the longest send step lasted %.1f ms after SendWait; rank 1 "
           "received %d ms late", (double)longestSend / 1e6, LATE_MS);
  if (late && rank == 0) printf("rank 0: the longest send step lasted %.0f ms after SendWait\n", (double)longestSend / 1e6);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s NRANKS PLUGIN.so [v4|v3|v2|v1|absent|sockets|kernelch]\n", argv[0]);
    return 2;
  }
  const char *mode = argc > 3 ? argv[3] : "";
  int n = atoi(argv[1]), absent = !strcmp(mode, "absent");
  int version = mode[0] == 'v' && mode[1] >= '1' && mode[1] <= '4' && !mode[2] ? mode[1] - '0' : 6;
  int late = !strcmp(mode, "sockets");
  if (late) setenv("NCCL_SHM_DISABLE", "1", 1);
  kchOnly = !strcmp(mode, "kernelch");
  if (kchOnly) setenv("CHORUS_TEST_PROFILE_MASK", "64", 1);
  if (mode[0] && !absent && !late && !kchOnly && version == 6) {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  char dir[64];
  if (tempDir(dir, "prof") != 0) return 1;
  setenv("CHORUS_TEST_PROFILE_DIR", dir, 1);
  setenv("NCCL_PROFILER_PLUGIN", argv[2], 1);
  evs = calloc(MAX_EVENTS, sizeof *evs);
  lateStart = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (lateStart == MAP_FAILED) return 1;
  int failed = runRanks(n, rankMain, late ? (void *)&late : NULL, 60);
  if (failed) {
    fprintf(stderr, "%d rank(s) failed\n", failed);
    return 1;
  }
  DIR *d = opendir(dir);
  struct dirent *de;
  int logs = 0, seen[64] = {0}, bad = 0;
  unsigned long long hash0 = 0;
  while (d && (de = readdir(d))) {
    if (strncmp(de->d_name, "prof.", 5)) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    int rank;
    unsigned long long hash;
    if (checkLog(path, n, version, late, &rank, &hash)) bad = 1;
    else {
      if (logs == 0) hash0 = hash;
      if (hash != hash0 || seen[rank]++) bad = 1, fprintf(stderr, "%s: rank %d, hash %llu\n", path, rank, hash);
    }
    logs++;
  }
  if (d) closedir(d);
  if (absent) {
    if (logs) fprintf(stderr, "%d plugin logs from a plugin that does not exist\n", logs);
    else printf("no plugin %s: the ranks ran without one\n", argv[2]);
    return logs != 0;
  }
  if (logs != n) {
    fprintf(stderr, "%d plugin logs for %d ranks\n", logs, n);
    return 1;
  }
  if (bad) return 1;
  printf("profiler plugin (v%d%s): %d ranks, every event balanced and in NCCL's hierarchy\n", version,
         version == 6 ? "+" : "", n);
  return 0;
}
