/* Schedules without processes (DESIGN.md invariants 1 and 5): for every
 * algorithm of the registry, every collective it supports and every rank
 * count from 1 to 64, builds the schedules of all ranks in one process over
 * connections that are plain FIFOs in memory, then
 *   - checks the plumbing: each connection is used by one sender and one
 *     receiver, and the bytes the sender posts, slot by slot, are the bytes
 *     the receiver takes, in the same order;
 *   - runs all ranks' schedules at once through the engine (one thread
 *     progresses them all, invariant 2) with small FIFOs (8 slots of
 *     under 1 KiB), descriptors on (so a step that takes another
 *     operation's slot fails), and a 2 s deadline: a schedule that a bounded
 *     FIFO can deadlock fails here in seconds (the first failure ends the run);
 *   - compares every rank's output with a reference computed here, guard
 *     bytes included, and for float AllReduce that every rank holds the
 *     same bits.
 *   test_schedule [LO HI]         rank counts LO..HI (default 1..64)
 *   test_schedule print ALGO COLL NRANKS RANK COUNT   prints one schedule */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "algo/algo.h"
#include "api/comm.h" /* COMM_SCRATCH_BYTES */
#include "engine/engine.h"
#include "transport/transport.h"

#define MAX_RANKS 64
#define FIFO_BYTES 8192 /* 8 slots of 1056 bytes (connFifoBytes: 8 KiB and the headers) */
#define GUARD 64
/* One thread runs every rank: a round that moves nothing is a deadlock, and
 * this is only how long the engine waits before saying so. */
#define TEST_DEADLOCK_NS 2000000000ull

/* The connections of the test: the two ends share memory, as over shared
 * memory, and the transport has nothing to do. */
static const struct transport memTransport = {.name = "test/memory", .p2pName = "test/memory"};

static int failures;
#define FAIL(...)                                  \
  do {                                             \
    fprintf(stderr, "test_schedule: " __VA_ARGS__); \
    fprintf(stderr, "\n");                         \
    failures++;                                    \
  } while (0)

struct world {
  int n, nch;
  struct connTable t[MAX_RANKS];
  int *laneLast[MAX_RANKS];
  char *scratch[MAX_RANKS];
  char *fifos; /* FIFO memory: one per directed connection, untouched (zero) until used */
  size_t fifoBytes;
};

static void worldInit(struct world *w, int n, int nch) {
  memset(w, 0, sizeof *w);
  w->n = n;
  w->nch = nch;
  for (int r = 0; r < n; r++) {
    struct connTable *t = &w->t[r];
    t->nranks = n;
    t->nch = nch;
    size_t nconn = (size_t)n * (nch + 1);
    t->send = calloc(nconn, sizeof(struct conn));
    t->recv = calloc(nconn, sizeof(struct conn));
    for (int p = 0; p < n; p++)
      for (int l = 0; l <= nch; l++) { /* geometry only: memory comes once the schedule says which are used */
        connLayout(connSend(t, p, l), NULL, FIFO_BYTES, p);
        connLayout(connRecv(t, p, l), NULL, FIFO_BYTES, p);
        connSend(t, p, l)->tp = connRecv(t, p, l)->tp = &memTransport;
      }
    w->laneLast[r] = malloc(sizeof(int) * (nch + 2 * n));
    for (int i = 0; i < nch + 2 * n; i++) w->laneLast[r][i] = -1;
    w->scratch[r] = malloc(COMM_SCRATCH_BYTES);
  }
  /* One arena for every case: its pages stay mapped between cases, so that
   * most of the run is not page faults; each case's FIFOs are cleared. */
  static char *arena;
  static size_t arenaBytes;
  w->fifoBytes = (size_t)n * n * (nch + 1) * connFifoBytes(FIFO_BYTES);
  if (w->fifoBytes > arenaBytes) {
    if (arena) munmap(arena, arenaBytes);
    arena = mmap(NULL, w->fifoBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arena == MAP_FAILED) {
      perror("mmap");
      exit(1);
    }
    arenaBytes = w->fifoBytes;
  }
  w->fifos = arena;
}

static void worldFree(struct world *w) {
  for (int r = 0; r < w->n; r++) {
    free(w->t[r].send);
    free(w->t[r].recv);
    free(w->laneLast[r]);
    free(w->scratch[r]);
  }

}

/* Where conn c sits: rank r's table, send or receive side, peer p, lane l. */
static int connWhere(struct world *w, const struct conn *c, int *r, int *send, int *p, int *l) {
  for (int k = 0; k < w->n; k++) {
    struct connTable *t = &w->t[k];
    size_t nconn = (size_t)w->n * (w->nch + 1);
    for (int s = 0; s < 2; s++) {
      const struct conn *base = s ? t->send : t->recv;
      if (c >= base && c < base + nconn) {
        size_t i = (size_t)(c - base);
        *r = k;
        *send = s;
        *p = (int)(i / (w->nch + 1));
        *l = (int)(i % (w->nch + 1));
        return 1;
      }
    }
  }
  return 0;
}

/* Gives both ends of every connection the schedule uses one FIFO. */
static int worldConnect(struct world *w, struct schedule *s) {
  for (int i = 0; i < s->nsteps; i++) {
    struct conn *ends[2] = {s->steps[i].recv, s->steps[i].send};
    for (int e = 0; e < 2; e++) {
      struct conn *c = ends[e];
      if (!c || c->ctrl) continue;
      int r = 0, send = 0, p = 0, l = 0;
      if (!connWhere(w, c, &r, &send, &p, &l)) {
        FAIL("a step uses a connection outside the communicator");
        return -1;
      }
      struct conn *snd = send ? c : connSend(&w->t[p], r, l), *rcv = send ? connRecv(&w->t[p], r, l) : c;
      int from = send ? r : p, to = send ? p : r;
      char *mem = w->fifos + (size_t)((from * w->n + to) * (w->nch + 1) + l) * connFifoBytes(FIFO_BYTES);
      connLayout(snd, mem, FIFO_BYTES, to);
      connLayout(rcv, mem, FIFO_BYTES, from);
      memset(snd->ctrl, 0, sizeof *snd->ctrl); /* counters and descriptor marks of an earlier case */
      for (uint32_t k = 0; k < snd->nslots; k++) memset(connSlotHdr(snd, k), 0, CONN_SLOT_HDR);
      snd->tp = rcv->tp = &memTransport;
    }
  }
  return 0;
}

/* The id of the directed connection from rank a to rank b on lane l. */
static int pairId(const struct world *w, int a, int b, int l) { return (a * w->n + b) * (w->nch + 1) + l; }

/* Every connection: the sender's slots (each step cut at slotBytes) are the
 * receiver's, in order, and no receive lacks its sender. The steps of one
 * connection run in the order they appear in the schedule (tasks of a lane
 * run in order; a task's steps too). */
static int checkPlumbing(struct world *w, struct schedule *s, const char *what) {
  int npairs = w->n * w->n * (w->nch + 1);
  int *next[2], *first[2], *last[2]; /* per side: linked lists of step indices, per connection */
  for (int k = 0; k < 2; k++) {
    next[k] = malloc(sizeof(int) * (s->nsteps + 1));
    first[k] = malloc(sizeof(int) * npairs);
    last[k] = malloc(sizeof(int) * npairs);
    for (int i = 0; i < npairs; i++) first[k][i] = last[k][i] = -1;
  }
  for (int i = 0; i < s->nsteps; i++) {
    struct conn *ends[2] = {s->steps[i].send, s->steps[i].recv};
    for (int k = 0; k < 2; k++) {
      next[k][i] = -1;
      int r = 0, send = 0, p = 0, l = 0;
      if (!ends[k] || !connWhere(w, ends[k], &r, &send, &p, &l)) continue;
      int id = k == 0 ? pairId(w, r, p, l) : pairId(w, p, r, l);
      if (last[k][id] < 0) first[k][id] = i;
      else next[k][last[k][id]] = i;
      last[k][id] = i;
    }
  }
  int rc = 0;
  for (int id = 0; id < npairs && rc == 0; id++) {
    int a = id / (w->nch + 1) / w->n, b = id / (w->nch + 1) % w->n, l = id % (w->nch + 1);
    int js = first[0][id], jr = first[1][id];
    size_t leftS = js >= 0 ? s->steps[js].bytes : 0, leftR = jr >= 0 ? s->steps[jr].bytes : 0;
    size_t slot = connSend(&w->t[a], b, l)->slotBytes, sent = 0, taken = 0;
    while (js >= 0 && jr >= 0) {
      size_t x = leftS < slot ? leftS : slot, y = leftR < slot ? leftR : slot;
      if (x != y) {
        FAIL("%s: rank %d sends a %zu-byte slot to rank %d (lane %d) where it takes %zu", what, a, x, b, l, y);
        rc = -1;
        break;
      }
      sent += x;
      taken += y;
      leftS -= x;
      leftR -= y;
      if (leftS == 0 && (js = next[0][js]) >= 0) leftS = s->steps[js].bytes;
      if (leftR == 0 && (jr = next[1][jr]) >= 0) leftR = s->steps[jr].bytes;
    }
    if (rc == 0 && (js >= 0 || jr >= 0)) {
      for (; js >= 0; js = next[0][js]) sent += s->steps[js].bytes;
      for (; jr >= 0; jr = next[1][jr]) taken += s->steps[jr].bytes;
      FAIL("%s: rank %d sends %zu bytes to rank %d (lane %d), which takes %zu", what, a, sent, b, l, taken);
      rc = -1;
    }
  }
  for (int k = 0; k < 2; k++) {
    free(next[k]);
    free(first[k]);
    free(last[k]);
  }
  return rc;
}

static int isRooted(int coll) {
  return coll == collBroadcast || coll == collReduce || coll == collGather || coll == collScatter;
}
static int reduces(int coll) { return coll == collAllReduce || coll == collReduce || coll == collReduceScatter; }

/* Element counts of each rank's input and output. */
static void bufferCounts(int coll, size_t count, int n, int rank, int root, size_t *in, size_t *out) {
  *in = *out = count;
  switch (coll) {
    case collAllGather: *out = count * n; break;
    case collReduceScatter: *in = count * n; break;
    case collAlltoAll: *in = *out = count * n; break;
    case collGather: *out = rank == root ? count * n : 0; break;
    case collScatter: *in = rank == root ? count * n : 0; break;
    case collBroadcast: *in = rank == root ? count : 0; break;
    case collReduce: *out = rank == root ? count : 0; break;
    default: break;
  }
}

static int32_t inputValue(int rank, size_t i) { return (int32_t)((i * 7 + 3) % 1009) * (rank + 1) - rank; }

/* What rank `rank` must hold at out[i]; reductions are PreMulSum's, each
 * input times scale (1: a plain sum). */
static int32_t expected(int coll, size_t count, int n, int rank, int root, size_t i, int scale) {
  int64_t sum = 0;
  switch (coll) {
    case collAllReduce:
    case collReduce:
      for (int r = 0; r < n; r++) sum += inputValue(r, i);
      return (int32_t)(sum * scale);
    case collReduceScatter:
      for (int r = 0; r < n; r++) sum += inputValue(r, (size_t)rank * count + i);
      return (int32_t)(sum * scale);
    case collBroadcast: return inputValue(root, i);
    case collAllGather:
    case collGather: return inputValue((int)(i / count), i % count);
    case collScatter: return inputValue(root, (size_t)rank * count + i);
    case collAlltoAll: return inputValue((int)(i / count), (size_t)rank * count + i % count);
    default: return 0;
  }
}

static char *guarded(size_t bytes) {
  char *p = malloc(bytes + 2 * GUARD);
  memset(p, 0xa5, bytes + 2 * GUARD);
  return p + GUARD;
}
static int guardsIntact(const char *p, size_t bytes) {
  for (int i = 0; i < GUARD; i++)
    if ((unsigned char)p[-1 - i] != 0xa5 || (unsigned char)p[bytes + i] != 0xa5) return 0;
  return 1;
}

/* One rank's buffers: in place (NCCL's layouts: the input is the output,
 * or the rank's block of it) one allocation holds both. */
struct rankBufs {
  char *mem[2];     /* allocations (guarded); mem[1] NULL in place */
  size_t bytes[2];
  char *in, *out;
  size_t inN, outN; /* elements read and written */
};

static void rankBufsInit(struct rankBufs *b, int coll, size_t count, int n, int r, int root, int inPlace) {
  memset(b, 0, sizeof *b);
  bufferCounts(coll, count, n, r, root, &b->inN, &b->outN);
  if (!inPlace) {
    b->bytes[0] = b->inN * 4;
    b->bytes[1] = b->outN * 4;
    b->in = b->mem[0] = guarded(b->bytes[0]);
    b->out = b->mem[1] = guarded(b->bytes[1]);
  } else {
    size_t big = b->inN > b->outN ? b->inN : b->outN;
    if (big < count) big = count;
    b->bytes[0] = big * 4;
    b->in = b->out = b->mem[0] = guarded(b->bytes[0]);
    int isRoot = r == root;
    if (coll == collAllGather || (coll == collGather && isRoot)) b->in = b->mem[0] + (size_t)r * count * 4;
    if (coll == collReduceScatter || (coll == collScatter && isRoot)) b->out = b->mem[0] + (size_t)r * count * 4;
  }
  for (size_t i = 0; i < b->inN; i++) ((int32_t *)b->in)[i] = inputValue(r, i);
  if (!inPlace) memset(b->out, 0xee, b->bytes[1]);
}

static void rankBufsFree(struct rankBufs *b) {
  for (int k = 0; k < 2; k++)
    if (b->mem[k]) free(b->mem[k] - GUARD);
}

/* Builds and runs one operation on n ranks; 0 when every check passed.
 * oddRoot: the last rank calls a rooted collective with another root, and
 * the run must fail as a mismatch with no rank's part finished (CHORUS_CHECK's
 * agreement: every rank an error, none done with wrong data). */
static int runCase(int algo, int proto, int coll, int n, size_t count, int inPlace, int nch, int printRank,
                   int oddRoot, int perHost) {
  char what[200];
  snprintf(what, sizeof what, "%s/%s %s, %d ranks, count %zu%s, %d channel(s)%s%s", algoName(algo), protoName(proto),
           collName(coll), n, count, inPlace ? " in place" : "", nch, oddRoot ? ", the last rank's root another" : "",
           perHost > 0 ? ", hosts of consecutive ranks" : perHost < 0 ? ", hosts of interleaved ranks" : "");
  /* perHost > 0: ranks r / perHost share a host; < 0: ranks r % -perHost do */
  int hostOf[MAX_RANKS], hostFirst[MAX_RANKS], nhosts = 1;
  for (int r = 0; r < n && perHost; r++) {
    hostOf[r] = perHost > 0 ? r / perHost : r % -perHost;
    if (hostOf[r] + 1 > nhosts) nhosts = hostOf[r] + 1;
  }
  if (perHost) algoHostFirst(hostOf, n, nhosts, hostFirst);
  /* Across hosts the reductions are PreMulSum's (x3): the algorithms that
   * go host by host scale each input once, wherever it is first sent or
   * reduced, and that is checked there. */
  int scale = perHost ? 3 : 1;
  int root = isRooted(coll) ? n / 3 : -1;
  int firstTask[MAX_RANKS + 1];
  struct world w;
  worldInit(&w, n, nch);
  struct schedule s = {0};
  static struct rankBufs bufs[MAX_RANKS];
  int rc = 0;
  for (int r = 0; r < n; r++) rankBufsInit(&bufs[r], coll, count, n, r, oddRoot && r == n - 1 ? (root + 1) % n : root, inPlace);
  int order[MAX_RANKS], pos[MAX_RANKS]; /* host-aware rings where ranks sit on hosts, as the communicator makes them */
  if (perHost) algoRingOrder(hostOf, n, order, pos);
  for (int r = 0; r < n && rc == 0; r++) {
    struct algoCtx ctx = {r, n, &w.t[r], NULL, NULL, w.scratch[r], w.laneLast[r], 1, perHost ? hostOf : NULL, nhosts,
                          perHost ? order : NULL, perHost ? pos : NULL, perHost ? hostFirst : NULL};
    if (oddRoot && r == n - 1) root = (root + 1) % n;
    struct collDesc d = {0};
    d.coll = coll;
    d.sendbuff = bufs[r].in;
    d.recvbuff = bufs[r].out;
    d.count = count;
    d.dtype = ncclInt32;
    d.red.dtype = ncclInt32;
    d.red.kind = scale > 1 ? redPreMulSum : redSum;
    d.red.scaleI = scale;
    d.root = root;
    d.check.count = count;
    d.check.seq = 1;
    d.check.coll = (uint8_t)coll;
    d.check.dtype = ncclInt32;
    d.check.op = !reduces(coll) ? OPDESC_NO_OP : scale > 1 ? OPDESC_USER_OP : ncclSum;
    d.check.algo = (uint8_t)algo;
    d.check.proto = (uint8_t)proto;
    d.check.nch = (uint8_t)nch;
    d.check.root = root;
    d.check.rank = (uint32_t)r;
    int first = firstTask[r] = s.ntasks;
    s.proto = proto;
    if (algoBuild(&s, &ctx, &d, algo, nch) != ncclSuccess) {
      FAIL("%s: rank %d: the build failed", what, r);
      rc = -1;
      break;
    }
    scheduleMarkOp(&s, first, &d.check);
    if (r == printRank) {
      struct schedule one = s;
      one.tasks += first;
      one.ntasks -= first;
      schedulePrint(&one, stdout);
    }
  }
  firstTask[n] = s.ntasks;
  if (rc == 0 && !oddRoot) rc = checkPlumbing(&w, &s, what);
  if (rc == 0) rc = worldConnect(&w, &s);
  if (rc == 0 && oddRoot) {
    s.timeoutNs = TEST_DEADLOCK_NS;
    ncclResult_t res = engineRun(&s);
    if (res != ncclInvalidUsage) {
      FAIL("%s: the run ended in %s, not a mismatch", what, ncclGetErrorString(res));
      rc = -1;
    }
    for (int r = 0; r < n && rc == 0; r++) {
      int done = 1;
      for (int i = firstTask[r]; i < firstTask[r + 1]; i++) done &= s.tasks[i].done;
      if (done) {
        FAIL("%s: rank %d finished its part (it would return success)", what, r);
        rc = -1;
      }
    }
  } else if (rc == 0) {
    s.timeoutNs = TEST_DEADLOCK_NS;
    ncclResult_t res = engineRun(&s);
    if (res != ncclSuccess) {
      FAIL("%s: the run ended in %s (a deadlock on bounded FIFOs, or a step took another's slot)", what,
           ncclGetErrorString(res));
      rc = -1;
    }
  }
  for (int r = 0; r < n && rc == 0 && !oddRoot; r++) {
    const int32_t *o = (const int32_t *)bufs[r].out;
    for (size_t i = 0; i < bufs[r].outN && rc == 0; i++) {
      int32_t want = expected(coll, count, n, r, root, i, scale);
      if (o[i] != want) {
        FAIL("%s: rank %d out[%zu] = %d, want %d", what, r, i, o[i], want);
        rc = -1;
      }
    }
    for (int k = 0; k < 2 && rc == 0; k++)
      if (bufs[r].mem[k] && !guardsIntact(bufs[r].mem[k], bufs[r].bytes[k])) {
        FAIL("%s: rank %d: guard bytes around its %s overwritten", what, r, k ? "output" : "input");
        rc = -1;
      }
  }
  for (int r = 0; r < n; r++) rankBufsFree(&bufs[r]);
  scheduleFree(&s);
  worldFree(&w);
  return rc;
}

/* A descriptor that differs only in its algorithm or channels does not match. */
static void checkDescPlan(void) {
  struct opDesc a = {0};
  a.count = 8;
  a.seq = 3;
  a.coll = collAllReduce;
  a.dtype = ncclFloat;
  a.op = ncclSum;
  a.algo = algoRing;
  a.nch = 2;
  a.root = -1;
  struct opDesc b = a;
  if (!descMatch(&a, &b)) FAIL("identical descriptors do not match");
  b.algo = algoOneHop;
  if (descMatch(&a, &b)) FAIL("descriptors with different algorithms match");
  b = a;
  b.nch = 1;
  if (descMatch(&a, &b)) FAIL("descriptors with different channel counts match");
  b = a;
  b.proto = protoLL;
  if (descMatch(&a, &b)) FAIL("descriptors with different protocols match");
}

/* A one-hop Broadcast under CHORUS_CHECK is the agreement alone, the
 * root's data in its tokens: every rank sends n-1 messages and receives n-1
 * (the root's out-of-place copy aside), 2 to 8 ranks; without the check the
 * root sends n-1 and every other rank receives 1. */
static void checkOneHopBroadcastAlone(void) {
  for (int n = 2; n <= 8; n++)
    for (int check = 0; check < 2; check++) {
      struct world w;
      worldInit(&w, n, 1);
      struct schedule s = {0};
      int32_t in[8], out[8];
      for (int r = 0; r < n; r++) {
        struct algoCtx ctx = {r, n, &w.t[r], NULL, NULL, w.scratch[r], w.laneLast[r], check, NULL, 1, NULL, NULL, NULL};
        struct collDesc d = {0};
        d.coll = collBroadcast;
        d.sendbuff = in;
        d.recvbuff = out;
        d.count = 8;
        d.dtype = d.red.dtype = ncclInt32;
        d.root = 1;
        int first = s.nsteps;
        if (algoBuild(&s, &ctx, &d, algoOneHop, 1) != ncclSuccess) {
          FAIL("OneHop Broadcast, %d ranks: rank %d: the build failed", n, r);
          break;
        }
        int sends = 0, recvs = 0;
        for (int i = first; i < s.nsteps; i++) {
          sends += s.steps[i].send != NULL;
          recvs += s.steps[i].recv != NULL;
        }
        int wantSends = check ? n - 1 : r == 1 ? n - 1 : 0, wantRecvs = check ? n - 1 : r == 1 ? 0 : 1;
        if (sends != wantSends || recvs != wantRecvs)
          FAIL("OneHop Broadcast, %d ranks%s: rank %d sends %d and receives %d messages, not %d and %d", n,
               check ? " (checked)" : "", r, sends, recvs, wantSends, wantRecvs);
      }
      scheduleFree(&s);
      worldFree(&w);
    }
}

/* Ranks whose protocols differ (a sender posting LL, its receiver expecting
 * Simple, and the other way round) fail at once with ncclInvalidUsage: a
 * receiver waiting at an operation's start recognizes the other protocol's
 * descriptor instead of waiting forever. AllReduce on a ring of two (both
 * directions at once) and Broadcast from rank 0 (one direction: only the
 * receiver can tell). */
static void checkProtoMismatch(void) {
  for (int k = 0; k < 2 * protoCount; k++) {
    int lead = k % protoCount, coll = k < protoCount ? collAllReduce : collBroadcast;
    int algo = coll == collAllReduce ? algoRing : algoChain, root = coll == collAllReduce ? -1 : 0;
    struct world w;
    worldInit(&w, 2, 1);
    struct schedule s = {0};
    int32_t in[2][64], out[2][64];
    for (int r = 0; r < 2; r++) {
      int proto = r == 0 ? lead : (lead + 1) % protoCount;
      for (int i = 0; i < 64; i++) in[r][i] = r + 1;
      struct algoCtx ctx = {r, 2, &w.t[r], NULL, NULL, w.scratch[r], w.laneLast[r], 1, NULL, 1, NULL, NULL, NULL};
      struct collDesc d = {0};
      d.coll = coll;
      d.sendbuff = in[r];
      d.recvbuff = out[r];
      d.count = 64;
      d.dtype = d.red.dtype = ncclInt32;
      d.red.kind = redSum;
      d.root = root;
      d.check.count = 64;
      d.check.seq = 1;
      d.check.coll = (uint8_t)coll;
      d.check.dtype = ncclInt32;
      d.check.op = coll == collAllReduce ? ncclSum : OPDESC_NO_OP;
      d.check.algo = (uint8_t)algo;
      d.check.proto = (uint8_t)proto;
      d.check.nch = 1;
      d.check.root = root;
      d.check.rank = (uint32_t)r;
      int first = s.ntasks;
      s.proto = proto;
      algoBuild(&s, &ctx, &d, algo, 1);
      scheduleMarkOp(&s, first, &d.check);
    }
    worldConnect(&w, &s);
    s.timeoutNs = TEST_DEADLOCK_NS;
    ncclResult_t res = engineRun(&s);
    if (res != ncclInvalidUsage)
      FAIL("%s, rank 0 on %s, rank 1 on %s: the run returned %s, not a mismatch", collName(coll), protoName(lead),
           protoName((lead + 1) % protoCount), ncclGetErrorString(res));
    scheduleFree(&s);
    worldFree(&w);
  }
}

static int collByName(const char *name) {
  for (int c = 0; c < collTypeCount; c++)
    if (strcmp(collName(c), name) == 0) return c;
  return -1;
}
static int algoByName(const char *name) {
  for (int a = 0; a < algoCount; a++)
    if (strcmp(algoName(a), name) == 0) return a;
  return -1;
}

/* Host-aware ring order (algoRingOrder): a permutation that keeps each
 * host's ranks together and in rank order, so the ring crosses between hosts
 * once per host; the ring AllGather each rank builds sends to its next on
 * that ring. */
static int checkRingOrder(void) {
  for (int n = 2; n <= 24; n++)
    for (int hosts = 2; hosts <= 4 && hosts <= n; hosts++) {
      int hostOf[MAX_RANKS], order[MAX_RANKS], pos[MAX_RANKS], seen[MAX_RANKS] = {0};
      for (int r = 0; r < n; r++) hostOf[r] = r % hosts; /* interleaved: the worst rank order */
      algoRingOrder(hostOf, n, order, pos);
      int first[MAX_RANKS];
      algoHostFirst(hostOf, n, hosts, first);
      int crossings = 0;
      for (int i = 0; i < n; i++) {
        int r = order[i], next = order[(i + 1) % n];
        if (r < 0 || r >= n || seen[r]++ || pos[r] != i) {
          fprintf(stderr, "ring order of %d ranks on %d hosts is not a permutation at %d\n", n, hosts, i);
          return 1;
        }
        crossings += hostOf[r] != hostOf[next];
        if (hostOf[r] == hostOf[next] && next < r && i + 1 < n) {
          fprintf(stderr, "ring order of %d ranks: host %d's ranks out of order\n", n, hostOf[r]);
          return 1;
        }
      }
      if (crossings != hosts) {
        fprintf(stderr, "ring of %d ranks on %d interleaved hosts crosses %d times, not %d\n", n, hosts, crossings, hosts);
        return 1;
      }
      struct world w;
      worldInit(&w, n, 1);
      for (int r = 0; r < n; r++) {
        struct algoCtx ctx = {r, n, &w.t[r], NULL, NULL, w.scratch[r], w.laneLast[r], 0, hostOf, hosts, order, pos, first};
        struct schedule s = {0};
        struct collDesc d = {0};
        static int32_t in[64], out[64 * MAX_RANKS];
        d.coll = collAllGather;
        d.sendbuff = in;
        d.recvbuff = out;
        d.count = 16;
        d.dtype = d.red.dtype = ncclInt32;
        d.red.kind = redSum;
        if (algoBuild(&s, &ctx, &d, algoRing, 1) != ncclSuccess || s.nsteps == 0 || !s.steps[0].send ||
            s.steps[0].send->peer != order[(pos[r] + 1) % n]) {
          fprintf(stderr, "rank %d of %d (%d hosts): its ring AllGather does not send to its next on the ring\n", r, n,
                  hosts);
          return 1;
        }
        scheduleFree(&s);
      }
      worldFree(&w);
    }
  printf("test_schedule: host-aware rings keep each host's ranks together (2-24 ranks on 2-4 hosts)\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 7 && strcmp(argv[1], "print") == 0) {
    int algo = algoByName(argv[2]), coll = collByName(argv[3]), n = atoi(argv[4]), rank = atoi(argv[5]);
    if (algo < 0 || coll < 0 || n < 1 || n > MAX_RANKS || rank < 0 || rank >= n || !algoSupports(algo, coll, n)) {
      fprintf(stderr, "usage: test_schedule print ALGO COLL NRANKS RANK COUNT (a supported combination)\n");
      return 2;
    }
    return runCase(algo, protoSimple, coll, n, strtoull(argv[6], NULL, 10), 0, 2, rank, 0, 0) != 0;
  }
  int lo = argc == 3 ? atoi(argv[1]) : 1, hi = argc == 3 ? atoi(argv[2]) : MAX_RANKS;
  if (lo < 1 || hi > MAX_RANKS || lo > hi) {
    fprintf(stderr, "usage: test_schedule [LO HI] (1 <= LO <= HI <= %d)\n", MAX_RANKS);
    return 2;
  }
  checkDescPlan();
  checkOneHopBroadcastAlone();
  checkProtoMismatch();
  if (checkRingOrder()) return 1;
  int cases = 0;
  for (int n = lo; n <= hi; n++)
    for (int algo = 0; algo < algoCount; algo++)
      for (int coll = 0; coll < collTypeCount; coll++) {
        if (!algoSupports(algo, coll, n) || coll == collSend || coll == collRecv) continue;
        /* A few elements; odd ones; a ring piece and more (several loops), on small rank counts. */
        size_t counts[] = {1, 13, (size_t)n * 17 + 5, 2600};
        int ncounts = n <= 8 ? 4 : 3;
        for (int k = 0; k < ncounts; k++) {
          if (algo == algoOneHop && counts[k] * 4 > 992) continue; /* the tuner keeps it within a slot */
          int nch = algo == algoRing || algo == algoChain || algo == algoTree ? 1 + (int)(counts[k] % 3) : 1;
          for (int inPlace = 0; inPlace < 2; inPlace++) {
            cases++;
            int proto = (int)((counts[k] + (size_t)inPlace + (size_t)n) % protoCount); /* each protocol in turn */
            if (runCase(algo, proto, coll, n, counts[k], inPlace, nch, -1, 0, 0) != 0) goto out; /* fail fast */
          }
        }
        /* Across hosts: trees (chains inside each host), host-aware rings and chains, and
         * recursive doubling among the hosts' first ranks, 2 and 3 ranks a host, consecutive
         * or interleaved. */
        for (int k = 0;
             (algo == algoTree || algo == algoRing || algo == algoChain || algo == algoRecDoubling) && k < 4 && n >= 4;
             k++) {
          static const int per[4] = {2, 3, -2, -3};
          cases++;
          if (runCase(algo, n % protoCount, coll, n, 2600, 0, 2, -1, 0, per[k]) != 0) goto out;
        }
        if (isRooted(coll) && n > 1) { /* ranks that disagree on the root: every rank fails */
          cases++;
          if (runCase(algo, n % protoCount, coll, n, 13, 0, 1, -1, 1, 0) != 0) goto out;
        }
      }
  /* Send/Recv: a ring of sends, every rank one send and one receive. */
  for (int n = lo; n <= hi; n++) {
    struct world w;
    worldInit(&w, n, 1);
    struct schedule s = {0};
    int32_t *bufs[2 * MAX_RANKS];
    for (int r = 0; r < n; r++) {
      bufs[2 * r] = malloc(100 * 4);
      bufs[2 * r + 1] = calloc(100, 4);
      for (int i = 0; i < 100; i++) bufs[2 * r][i] = inputValue(r, (size_t)i);
      struct algoCtx ctx = {r, n, &w.t[r], NULL, NULL, w.scratch[r], w.laneLast[r], 1, NULL, 1, NULL, NULL, NULL};
      struct collDesc d = {0};
      d.count = 100;
      d.dtype = d.red.dtype = ncclInt32;
      d.coll = collSend;
      d.root = (r + 1) % n;
      d.sendbuff = bufs[2 * r];
      algoBuild(&s, &ctx, &d, algoP2p, 1);
      d.coll = collRecv;
      d.root = (r + n - 1) % n;
      d.sendbuff = NULL;
      d.recvbuff = bufs[2 * r + 1];
      algoBuild(&s, &ctx, &d, algoP2p, 1);
    }
    cases++;
    if (checkPlumbing(&w, &s, "Send/Recv ring") == 0 && worldConnect(&w, &s) == 0) {
      s.timeoutNs = TEST_DEADLOCK_NS;
      if (engineRun(&s) != ncclSuccess) FAIL("Send/Recv ring of %d ranks did not complete", n);
      for (int r = 0; r < n; r++)
        for (int i = 0; i < 100; i++)
          if (bufs[2 * r + 1][i] != inputValue((r + n - 1) % n, (size_t)i)) {
            FAIL("Send/Recv ring of %d ranks: rank %d got %d at %d", n, r, bufs[2 * r + 1][i], i);
            i = 100;
            r = n;
          }
    }
    for (int r = 0; r < 2 * n; r++) free(bufs[r]);
    scheduleFree(&s);
    worldFree(&w);
  }
out:
  printf("%d cases, %d failure(s)\n%s\n", cases, failures, failures ? "FAIL" : "PASS");
  return failures != 0;
}
