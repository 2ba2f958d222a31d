/* Every entry point rejects bad input with ncclInvalidArgument or
 * ncclInvalidUsage, a WARN naming the argument (ncclGetLastError), and no
 * change to any buffer. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

static int expectErr(ncclResult_t got, ncclResult_t want, const char *word, const char *what) {
  if (got != want) {
    fprintf(stderr, "%s: returned '%s', expected '%s'\n", what, ncclGetErrorString(got), ncclGetErrorString(want));
    return 1;
  }
  const char *last = ncclGetLastError(NULL);
  if (word && strstr(last, word) == NULL) {
    fprintf(stderr, "%s: last error '%s' does not name '%s'\n", what, last, word);
    return 1;
  }
  return 0;
}
#define BAD(call, want, word) failed += expectErr((call), (want), (word), #call)

/* Every collective and point-to-point entry point, called with one
 * argument wrong at a time: the exact error, a WARN naming the argument,
 * and no byte of any buffer (guard bytes included) changed. */
enum entry { eAllReduce, eBroadcast, eBcast, eReduce, eAllGather, eReduceScatter, eAlltoAll, eGather, eScatter,
             eSend, eRecv, eSendTag, eRecvTag, eEntries };
static const char *entryName[eEntries] = {"AllReduce", "Broadcast", "Bcast", "Reduce", "AllGather", "ReduceScatter",
                                          "AlltoAll", "Gather", "Scatter", "Send", "Recv", "chorusSendTag",
                                          "chorusRecvTag"};
struct callSpec {
  const void *send;
  void *recv;
  size_t count;
  int dtype, op, root; /* root: the peer for point-to-point */
  ncclComm_t comm;
  cudaStream_t stream;
};
static ncclResult_t callEntry(int e, const struct callSpec *c) {
  ncclDataType_t t = (ncclDataType_t)c->dtype;
  ncclRedOp_t op = (ncclRedOp_t)c->op;
  switch (e) {
    case eAllReduce: return ncclAllReduce(c->send, c->recv, c->count, t, op, c->comm, c->stream);
    case eBroadcast: return ncclBroadcast(c->send, c->recv, c->count, t, c->root, c->comm, c->stream);
    case eBcast: return ncclBcast(c->recv, c->count, t, c->root, c->comm, c->stream);
    case eReduce: return ncclReduce(c->send, c->recv, c->count, t, op, c->root, c->comm, c->stream);
    case eAllGather: return ncclAllGather(c->send, c->recv, c->count, t, c->comm, c->stream);
    case eReduceScatter: return ncclReduceScatter(c->send, c->recv, c->count, t, op, c->comm, c->stream);
    case eAlltoAll: return ncclAlltoAll(c->send, c->recv, c->count, t, c->comm, c->stream);
    case eGather: return ncclGather(c->send, c->recv, c->count, t, c->root, c->comm, c->stream);
    case eScatter: return ncclScatter(c->send, c->recv, c->count, t, c->root, c->comm, c->stream);
    case eSend: return ncclSend(c->send, c->count, t, c->root, c->comm, c->stream);
    case eRecv: return ncclRecv(c->recv, c->count, t, c->root, c->comm, c->stream);
    case eSendTag: return chorusSendTag(c->send, c->count, t, c->root, 5, c->comm, c->stream);
    default: return chorusRecvTag(c->recv, c->count, t, c->root, 5, c->comm, c->stream);
  }
}
static int reduces(int e) { return e == eAllReduce || e == eReduce || e == eReduceScatter; }
static int rooted(int e) { return e == eBroadcast || e == eBcast || e == eReduce || e == eGather || e == eScatter; }
/* A refusal is an argument check: it returns at once. A call that should
 * have been refused and runs instead (a giant count, say) fails the test
 * within seconds rather than at its deadline. */
static const char *pendingCall;
static void refusalTookTooLong(int sig) {
  (void)sig;
  static const char msg[] = "a call that should have been refused did not return within 2 s: ";
  if (write(2, msg, sizeof msg - 1) < 0 || write(2, pendingCall, strlen(pendingCall)) < 0 || write(2, "\n", 1) < 0) {
  }
  _exit(1);
}
static ncclResult_t refusedWithin2s(int e, const struct callSpec *c, const char *what);

static int p2p(int e) { return e >= eSend; }
static int readsSend(int e) { return e != eRecv && e != eRecvTag && e != eBcast; }
static int writesRecv(int e) { return e != eSend && e != eSendTag; }

static int everyArgument(int rank, int n, ncclComm_t comm) {
  int failed = 0;
  size_t bytes = 64 * sizeof(float) * (size_t)n;
  unsigned char *send = guardAlloc(bytes), *recv = guardAlloc(bytes), *before = malloc(bytes);
  memset(send, 0x11, bytes);
  memset(recv, 0x22, bytes);
  memcpy(before, recv, bytes);
  static uint64_t fake[16];
  for (int e = 0; e < eEntries; e++) {
    /* the good call's arguments: root/peer 0 (this rank is a valid peer only with a matching receive) */
    struct callSpec good = {send, recv, 8, ncclFloat, ncclSum, 0, comm, NULL};
    struct {
      struct callSpec c;
      ncclResult_t want;
      const char *word;
      int applies;
    } cases[] = {
        {{send, recv, 8, ncclFloat, ncclSum, 0, NULL, NULL}, ncclInvalidArgument, "comm", 1},
        {{send, recv, 8, -1, ncclSum, 0, comm, NULL}, ncclInvalidArgument, "type", 1},
        {{send, recv, 8, ncclNumTypes, ncclSum, 0, comm, NULL}, ncclInvalidArgument, "type", 1},
        {{send, recv, 8, ncclFloat, -1, 0, comm, NULL}, ncclInvalidArgument, "operation", reduces(e)},
        {{send, recv, 8, ncclFloat, ncclNumOps, 0, comm, NULL}, ncclInvalidArgument, "unknown to this communicator",
         reduces(e)},
        {{send, recv, 8, ncclFloat, ncclSum, -1, comm, NULL}, ncclInvalidArgument, p2p(e) ? "peer" : "root",
         rooted(e) || p2p(e)},
        {{send, recv, 8, ncclFloat, ncclSum, n, comm, NULL}, ncclInvalidArgument, p2p(e) ? "peer" : "root",
         rooted(e) || p2p(e)},
        {{NULL, recv, 8, ncclFloat, ncclSum, 0, comm, NULL}, ncclInvalidArgument, "sendbuff",
         readsSend(e) && !((e == eBroadcast || e == eScatter) && rank != 0)},
        {{send, NULL, 8, ncclFloat, ncclSum, 0, comm, NULL}, ncclInvalidArgument, e == eBcast ? "buff" : "recvbuff",
         writesRecv(e) && !((e == eReduce || e == eGather) && rank != 0)},
        {{send, recv, 8, ncclFloat, ncclSum, 0, comm, (cudaStream_t)fake}, ncclInvalidArgument, "stream", 1},
        {{send, recv, SIZE_MAX / 2, ncclFloat, ncclSum, 0, comm, NULL}, ncclInvalidArgument, "too large", 1},
        /* fits one buffer, but not nranks of them (AllGather's output, ReduceScatter's input) */
        {{send, recv, SIZE_MAX / sizeof(float) / (size_t)n + 1, ncclFloat, ncclSum, 0, comm, NULL},
         ncclInvalidArgument, "too large", n > 1},
    };
    (void)good;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      if (!cases[k].applies) continue;
      char what[96];
      snprintf(what, sizeof what, "%s case %zu (rank %d)", entryName[e], k, rank);
      failed += expectErr(refusedWithin2s(e, &cases[k].c, what), cases[k].want, cases[k].word, what);
      if (memcmp(recv, before, bytes) != 0 || guardCheck(recv) || guardCheck(send)) {
        fprintf(stderr, "%s: a refused call changed a buffer\n", what);
        failed++;
        memcpy(recv, before, bytes);
      }
    }
  }
  /* Refusals on one rank only leave the operations' numbering alone: the
   * next call still matches the other ranks' (mismatch detection is on). */
  if (rank == 0) {
    failed += expectErr(ncclAllReduce(send, recv, 8, ncclFloat, ncclSum, comm, (cudaStream_t)fake),
                        ncclInvalidArgument, "stream", "a refused call on rank 0 alone");
    failed += expectErr(ncclSend(send, 8, ncclFloat, n - 1, comm, (cudaStream_t)fake), ncclInvalidArgument,
                        "stream", "a refused send on rank 0 alone");
  }
  float one = 1, sum = 0;
  NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL));
  EXPECT(sum == n, "all_reduce after one-sided refusals: %g", sum);
  if (n > 1 && (rank == 0 || rank == n - 1)) {
    float v = (float)rank, got = -1;
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclSend(&v, 1, ncclFloat, n - 1 - rank, comm, NULL));
    NCCLCHECK(ncclRecv(&got, 1, ncclFloat, n - 1 - rank, comm, NULL));
    NCCLCHECK(ncclGroupEnd());
    EXPECT(got == (float)(n - 1 - rank), "send/recv after one-sided refusals: %g", got);
  }
  /* A lone send to self (or receive from self) cannot complete. */
  failed += expectErr(ncclSend(send, 8, ncclFloat, rank, comm, NULL), ncclInvalidUsage, "send to self",
                      "send to self without a receive");
  failed += expectErr(ncclRecv(recv, 8, ncclFloat, rank, comm, NULL), ncclInvalidUsage, "receive from self",
                      "receive from self without a send");
  if (memcmp(recv, before, bytes) != 0) {
    fprintf(stderr, "a refused self receive changed the buffer\n");
    failed++;
  }
  /* and with its match in a group it works */
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(send, 8, ncclFloat, rank, comm, NULL));
  NCCLCHECK(ncclRecv(recv, 8, ncclFloat, rank, comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  EXPECT(memcmp(recv, send, 8 * sizeof(float)) == 0, "send to self in a group");
  guardFree(send);
  guardFree(recv);
  free(before);
  return failed;
}

static ncclResult_t refusedWithin2s(int e, const struct callSpec *c, const char *what) {
  pendingCall = what;
  void (*old)(int) = signal(SIGALRM, refusalTookTooLong);
  unsigned left = alarm(2); /* the harness's own alarm, restored below */
  ncclResult_t r = callEntry(e, c);
  alarm(left);
  signal(SIGALRM, old);
  return r;
}

/* Each config value NCCL's parseCommConfig refuses, for ncclCommSplit of
 * parent (every rank passes the same one) or, without a parent, for
 * ncclCommInitRankConfig of a 1-rank communicator: ncclInvalidArgument
 * naming the field, and no communicator. */
static int badConfigs(ncclComm_t parent, ncclUniqueId id) {
  int failed = 0;
  static const struct {
    size_t at;
    int value;
    const char *name;
  } cases[] = {
      {offsetof(ncclConfig_t, blocking), 5, "blocking"},
      {offsetof(ncclConfig_t, cgaClusterSize), -3, "cgaClusterSize"},
      {offsetof(ncclConfig_t, minCTAs), 0, "minCTAs"},
      {offsetof(ncclConfig_t, maxCTAs), 0, "maxCTAs"},
      {offsetof(ncclConfig_t, splitShare), 2, "splitShare"},
      {offsetof(ncclConfig_t, collnetEnable), 3, "collnetEnable"},
      {offsetof(ncclConfig_t, CTAPolicy), 99, "CTAPolicy"},
      {offsetof(ncclConfig_t, shrinkShare), 7, "shrinkShare"},
      {offsetof(ncclConfig_t, nvlsCTAs), 0, "nvlsCTAs"},
      {offsetof(ncclConfig_t, nChannelsPerNetPeer), 65, "nChannelsPerNetPeer"},
      {offsetof(ncclConfig_t, nvlinkCentricSched), 2, "nvlinkCentricSched"},
      {offsetof(ncclConfig_t, graphUsageMode), 3, "graphUsageMode"},
      {offsetof(ncclConfig_t, numRmaCtx), -1, "numRmaCtx"},
      {offsetof(ncclConfig_t, maxP2pPeers), 0, "maxP2pPeers"},
      {offsetof(ncclConfig_t, graphStreamOrdering), 2, "graphStreamOrdering"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    memcpy((char *)&cfg + cases[k].at, &cases[k].value, sizeof(int));
    ncclComm_t made = (ncclComm_t)&cfg; /* must come back NULL */
    if (parent) BAD(ncclCommSplit(parent, 0, 0, &made, &cfg), ncclInvalidArgument, cases[k].name);
    else BAD(ncclCommInitRankConfig(&made, 1, id, 0, &cfg), ncclInvalidArgument, cases[k].name);
    EXPECT(made == NULL || made == (ncclComm_t)&cfg, "a communicator was made with config.%s = %d", cases[k].name,
           cases[k].value);
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.minCTAs = 8;
  cfg.maxCTAs = 2;
  ncclComm_t made = NULL;
  if (parent) BAD(ncclCommSplit(parent, 0, 0, &made, &cfg), ncclInvalidArgument, "maxCTAs");
  else BAD(ncclCommInitRankConfig(&made, 1, id, 0, &cfg), ncclInvalidArgument, "maxCTAs");
  /* NCCL compares them before filling in its defaults: a minimum without a
   * maximum is refused too (chorus had taken it) */
  cfg.maxCTAs = NCCL_CONFIG_UNDEF_INT;
  if (parent) BAD(ncclCommSplit(parent, 0, 0, &made, &cfg), ncclInvalidArgument, "minCTAs");
  else BAD(ncclCommInitRankConfig(&made, 1, id, 0, &cfg), ncclInvalidArgument, "minCTAs");
  /* A network chorus lacks, by config.netName (NCCL_NET unset here): NCCL's
   * ncclInvalidUsage for a network it cannot find. */
  ncclConfig_t net = NCCL_CONFIG_INITIALIZER;
  net.netName = "IB";
  made = NULL;
  if (parent) BAD(ncclCommSplit(parent, 0, 0, &made, &net), ncclInvalidUsage, "config.netName \"IB\"");
  else BAD(ncclCommInitRankConfig(&made, 1, id, 0, &net), ncclInvalidUsage, "config.netName \"IB\"");
  EXPECT(made == NULL, "a communicator was made with config.netName IB");
  return failed;
}

/* A user op belongs to the communicator that made it: another's op (the
 * same index in its own table) is refused, not used with the other's
 * scalar, as NCCL's mangled handles are; and a communicator holds more
 * than a thousand at once (NCCL's table grows), each its own. */
static int userOpsOfTwo(ncclComm_t comm, int n) {
  int failed = 0;
  ncclComm_t other;
  NCCLCHECK(ncclCommSplit(comm, 0, 0, &other, NULL));
  float two = 2, ten = 10, x = 1, y = -7;
  ncclRedOp_t mine, theirs;
  NCCLCHECK(ncclRedOpCreatePreMulSum(&mine, &two, ncclFloat, ncclScalarHostImmediate, comm));
  NCCLCHECK(ncclRedOpCreatePreMulSum(&theirs, &ten, ncclFloat, ncclScalarHostImmediate, other));
  BAD(ncclAllReduce(&x, &y, 1, ncclFloat, theirs, comm, NULL), ncclInvalidArgument, "unknown to this communicator");
  BAD(ncclAllReduce(&x, &y, 1, ncclFloat, mine, other, NULL), ncclInvalidArgument, "unknown to this communicator");
  BAD(ncclRedOpDestroy(theirs, comm), ncclInvalidArgument, "unknown");
  EXPECT(y == -7, "a refused op wrote %g", y);
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, theirs, other, NULL));
  EXPECT(y == 10 * n, "the other communicator's op gave %g, want %d", y, 10 * n);
  enum { many = 1100 };
  static ncclRedOp_t ops[many];
  static float scalars[many];
  for (int i = 0; i < many; i++) {
    scalars[i] = (float)(i % 50);
    NCCLCHECK(ncclRedOpCreatePreMulSum(&ops[i], &scalars[i], ncclFloat, ncclScalarHostImmediate, comm));
  }
  for (int i = 0; i < many; i += many - 1) {
    NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ops[i], comm, NULL));
    EXPECT(y == scalars[i] * n, "op %d of %d gave %g, want %g", i, many, y, scalars[i] * n);
  }
  for (int i = 0; i < many; i++) NCCLCHECK(ncclRedOpDestroy(ops[i], comm));
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, mine, comm, NULL));
  EXPECT(y == 2 * n, "the first op after a thousand others came and went gave %g", y);
  NCCLCHECK(ncclRedOpDestroy(mine, comm));
  NCCLCHECK(ncclRedOpDestroy(theirs, other));
  NCCLCHECK(ncclCommDestroy(other));
  return failed;
}

static void *abortFromThread(void *comm) {
  ncclCommAbort(*(ncclComm_t *)comm);
  return NULL;
}

/* A communicator destroyed or aborted (by the group's thread or another)
 * while an open group holds a call on it: ncclGroupEnd fails and none of
 * the group's calls run, the parent's beside it included (before, the group
 * read the freed communicator: ncclInternalError "cannot build it for 0
 * ranks", and ASan's heap-use-after-free). Finalize while the group holds a
 * call is refused and the group then runs. Each case on a child of the
 * parent, every rank alike. */
static int endedInGroup(int rank, int n, ncclUniqueId id, void *arg) {
  volatile int *queued = arg; /* shared by the ranks: so many have queued their calls */
  int failed = 0;
  ncclComm_t parent, child;
  NCCLCHECK(ncclCommInitRank(&parent, n, id, rank));
  float send[16], recv[16];
  for (int i = 0; i < 16; i++) send[i] = 1;
  for (int how = 0; how < 3; how++) {
    NCCLCHECK(ncclCommSplit(parent, 0, rank, &child, NULL));
    for (int i = 0; i < 16; i++) recv[i] = -7;
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclAllReduce(send, recv, 8, ncclFloat, ncclSum, parent, NULL));
    NCCLCHECK(ncclAllReduce(send, recv + 8, 8, ncclFloat, ncclSum, child, NULL));
    /* Every rank's calls are queued before any rank ends the child (which
     * a peer's next call would see, and fail on, at once). */
    __atomic_add_fetch(queued, 1, __ATOMIC_SEQ_CST);
    for (int k = 0; k < 30000 && __atomic_load_n(queued, __ATOMIC_SEQ_CST) < n * (how + 1); k++) usleep(100);
    if (how == 0) NCCLCHECK(ncclCommDestroy(child));
    if (how == 1) NCCLCHECK(ncclCommAbort(child));
    pthread_t t;
    if (how == 2 && (pthread_create(&t, NULL, abortFromThread, &child) != 0 || pthread_join(t, NULL) != 0)) return 1;
    BAD(ncclGroupEnd(), ncclInvalidUsage, "destroyed or aborted while the group held its calls");
    for (int i = 0; i < 16; i++)
      EXPECT(recv[i] == -7, "case %d: recv[%d] = %g: a call of the failed group ran", how, i, recv[i]);
  }
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(send, recv, 16, ncclFloat, ncclSum, parent, NULL));
  BAD(ncclCommFinalize(parent), ncclInvalidUsage, "open group");
  NCCLCHECK(ncclGroupEnd());
  for (int i = 0; i < 16; i++) EXPECT(recv[i] == n, "recv[%d] = %g after the group", i, recv[i]);
  NCCLCHECK(ncclCommFinalize(parent));
  NCCLCHECK(ncclCommDestroy(parent));
  return failed;
}

static int rankMain(int rank, int n, ncclUniqueId id, void *arg) {
  int failed = 0;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  float send[16], recv[16];
  for (int i = 0; i < 16; i++) send[i] = 1, recv[i] = -7;
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, ncclSum, NULL, NULL), ncclInvalidArgument, "comm");
  BAD(ncclAllReduce(NULL, recv, 16, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument, "sendbuff");
  BAD(ncclAllReduce(send, NULL, 16, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument, "recvbuff");
  BAD(ncclAllReduce(send, recv, 16, (ncclDataType_t)12, ncclSum, comm, NULL), ncclInvalidArgument, "type");
  BAD(ncclAllReduce(send, recv, 16, (ncclDataType_t)-1, ncclSum, comm, NULL), ncclInvalidArgument, "type");
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, (ncclRedOp_t)5, comm, NULL), ncclInvalidArgument, "operation");
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, (ncclRedOp_t)-1, comm, NULL), ncclInvalidArgument, "operation");
  BAD(ncclReduce(send, recv, 16, ncclFloat, ncclSum, n, comm, NULL), ncclInvalidArgument, "root");
  BAD(ncclReduce(send, recv, 16, ncclFloat, ncclSum, -1, comm, NULL), ncclInvalidArgument, "root");
  BAD(ncclBroadcast(send, recv, 16, ncclFloat, n, comm, NULL), ncclInvalidArgument, "root");
  BAD(ncclBcast(recv, 16, ncclFloat, -2, comm, NULL), ncclInvalidArgument, "root");
  BAD(ncclSend(send, 16, ncclFloat, n, comm, NULL), ncclInvalidArgument, "peer");
  BAD(ncclRecv(recv, 16, ncclFloat, -1, comm, NULL), ncclInvalidArgument, "peer");
  BAD(ncclAllGather(send, NULL, 1, ncclFloat, comm, NULL), ncclInvalidArgument, "recvbuff");
  BAD(ncclReduceScatter(NULL, recv, 1, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument, "sendbuff");
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, ncclSum, comm, (cudaStream_t)send), ncclInvalidArgument, "stream");
  /* Buffers that overlap other than as one buffer or the in-place layout
   * (before: success, with wrong data on some ranks). */
  BAD(ncclAllReduce(send, send + 1, 8, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument, "overlap");
  BAD(ncclAllGather(send + 1, send, 2, ncclFloat, comm, NULL), ncclInvalidArgument, "overlap");
  if (n > 1) { /* the input inside the output past its first block */
    BAD(ncclAllGather(send + 3, send, 2, ncclFloat, comm, NULL), ncclInvalidArgument, "overlap");
  }
  BAD(ncclReduceScatter(send, send + 1, 2, ncclFloat, ncclSum, comm, NULL), ncclInvalidArgument, "overlap");
  BAD(ncclAlltoAll(send + 1, send, 2, ncclFloat, comm, NULL), ncclInvalidArgument, "overlap");
  BAD(ncclBroadcast(send, send + 2, 4, ncclFloat, rank, comm, NULL), ncclInvalidArgument, "overlap");
  /* A user op made for float cannot be used with double, nor after destroy. */
  ncclRedOp_t op;
  float two = 2;
  NCCLCHECK(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, comm));
  BAD(ncclAllReduce(send, recv, 2, ncclDouble, op, comm, NULL), ncclInvalidArgument, "created for");
  /* the one after the last created is unknown, whatever its type */
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, (ncclRedOp_t)(op + 1), comm, NULL), ncclInvalidArgument,
      "unknown to this communicator");
  BAD(ncclAllReduce(send, recv, 16, ncclInt8, (ncclRedOp_t)(op + 1), comm, NULL), ncclInvalidArgument,
      "unknown to this communicator");
  NCCLCHECK(ncclRedOpDestroy(op, comm));
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, op, comm, NULL), ncclInvalidArgument, "operation");
  BAD(ncclRedOpDestroy(op, comm), ncclInvalidArgument, "unknown");
  BAD(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "builtin");
  BAD(ncclRedOpCreatePreMulSum(NULL, &two, ncclFloat, ncclScalarHostImmediate, comm), ncclInvalidArgument, "op");
  BAD(ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat, ncclScalarHostImmediate, comm), ncclInvalidArgument, "scalar");
  /* Bitwise operators: integer types only, a known kind, and like any user
   * op only with the datatype they were made for. */
  BAD(chorusRedOpCreateBitwise(NULL, chorusBand, ncclInt32, comm), ncclInvalidArgument, "op");
  BAD(chorusRedOpCreateBitwise(&op, (chorusBitwiseOp_t)3, ncclInt32, comm), ncclInvalidArgument, "kind");
  BAD(chorusRedOpCreateBitwise(&op, (chorusBitwiseOp_t)-1, ncclInt32, comm), ncclInvalidArgument, "kind");
  BAD(chorusRedOpCreateBitwise(&op, chorusBxor, ncclFloat, comm), ncclInvalidArgument, "integer");
  BAD(chorusRedOpCreateBitwise(&op, chorusBor, ncclBfloat16, comm), ncclInvalidArgument, "integer");
  BAD(chorusRedOpCreateBitwise(&op, chorusBor, ncclNumTypes, comm), ncclInvalidArgument, "datatype");
  BAD(chorusRedOpCreateBitwise(&op, chorusBand, ncclInt32, NULL), ncclInvalidArgument, "comm");
  NCCLCHECK(chorusRedOpCreateBitwise(&op, chorusBand, ncclInt32, comm));
  BAD(ncclAllReduce(send, recv, 2, ncclInt64, op, comm, NULL), ncclInvalidArgument, "created for");
  BAD(ncclAllReduce(send, recv, 2, ncclFloat, op, comm, NULL), ncclInvalidArgument, "created for");
  NCCLCHECK(ncclRedOpDestroy(op, comm));
  BAD(ncclAllReduce(send, recv, 2, ncclInt32, op, comm, NULL), ncclInvalidArgument, "operation");
  /* Nothing above touched the output. */
  for (int i = 0; i < 16; i++) EXPECT(recv[i] == -7, "recv[%d] changed to %g by a rejected call", i, recv[i]);
  /* Zero counts with NULL buffers: a collective is a no-op; a send or
   * receive of 0 still meets its peer's (NCCL synchronizes on them too). */
  NCCLCHECK(ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, comm, NULL));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(NULL, 0, ncclFloat, (rank + 1) % n, comm, NULL));
  NCCLCHECK(ncclRecv(NULL, 0, ncclFloat, (rank + n - 1) % n, comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  /* A bad call inside a group fails ncclGroupEnd and the group is dropped. */
  NCCLCHECK(ncclGroupStart());
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, (ncclRedOp_t)99, comm, NULL), ncclInvalidArgument, "operation");
  BAD(ncclGroupEnd(), ncclInvalidArgument, NULL);
  BAD(ncclGroupEnd(), ncclInvalidUsage, "not in a group");
  /* So does a split's, shrink's or grow's, as in NCCL: the AllReduce beside it never runs. */
  int exclude = rank;
  ncclComm_t none = NULL;
  for (int k = 0; k < 3; k++) {
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclAllReduce(send, recv, 16, ncclFloat, ncclSum, comm, NULL));
    if (k == 0) BAD(ncclCommSplit(comm, 0, 0, NULL, NULL), ncclInvalidArgument, "newcomm");
    if (k == 1) BAD(ncclCommShrink(comm, &exclude, 1, &none, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument, NULL);
    if (k == 2) BAD(ncclCommGrow(comm, n + 1, NULL, 0, &none, NULL), ncclInvalidArgument, "pass -1");
    BAD(ncclGroupEnd(), ncclInvalidArgument, NULL);
    for (int i = 0; i < 16; i++) EXPECT(recv[i] == -7, "call %d: recv[%d] changed to %g by a dropped group", k, i, recv[i]);
  }
  /* Registration is optional; handles are checked. */
  void *h = NULL;
  NCCLCHECK(ncclCommRegister(comm, send, sizeof send, &h));
  NCCLCHECK(ncclCommDeregister(comm, h));
  /* A handle is looked up, never read: a stale, foreign or wild one is an
   * error, not a crash; NULL (NCCL's register gives it when it registers
   * nothing) is fine. One handle stays registered: destroy frees it. */
  BAD(ncclCommDeregister(comm, h), ncclInvalidUsage, "Could not find handle");
  BAD(ncclCommDeregister(comm, recv), ncclInvalidUsage, "Could not find handle");
  BAD(ncclCommDeregister(comm, (void *)(uintptr_t)0x1234), ncclInvalidUsage, "Could not find handle");
  NCCLCHECK(ncclCommDeregister(comm, NULL));
  /* As NCCL's cache: a range inside a registered one (whole pages) gets its
   * handle and a reference more; each deregister undoes one. */
  char *pages = aligned_alloc(4096, 3 * 4096);
  EXPECT(pages != NULL, "3 pages");
  void *h1 = NULL, *h2 = NULL, *h3 = NULL, *h4 = NULL;
  NCCLCHECK(ncclCommRegister(comm, pages, 2 * 4096, &h1));
  NCCLCHECK(ncclCommRegister(comm, pages, 2 * 4096, &h2));
  NCCLCHECK(ncclCommRegister(comm, pages + 100, 4000, &h3));
  NCCLCHECK(ncclCommRegister(comm, pages + 4096, 4097, &h4)); /* reaches the third page */
  EXPECT(h1 == h2 && h1 == h3 && h4 != h1, "handles %p %p %p %p", h1, h2, h3, h4);
  for (int k = 0; k < 3; k++) NCCLCHECK(ncclCommDeregister(comm, h1));
  BAD(ncclCommDeregister(comm, h1), ncclInvalidUsage, "Could not find handle");
  NCCLCHECK(ncclCommDeregister(comm, h4));
  free(pages);
  NCCLCHECK(ncclCommRegister(comm, recv, sizeof recv, &h));
  BAD(ncclCommRegister(comm, send, 16, NULL), ncclInvalidArgument, "handle");
  /* Windows: recorded, given back, checked. */
  ncclWindow_t win = NULL;
  void *user = NULL;
  NCCLCHECK(ncclCommWindowRegister(comm, send, sizeof send, &win, NCCL_WIN_COLL_SYMMETRIC));
  NCCLCHECK(ncclWinGetUserPtr(comm, win, &user));
  EXPECT(user == (void *)send, "ncclWinGetUserPtr gave %p, registered %p", user, (void *)send);
  BAD(ncclWinGetUserPtr(comm, win, NULL), ncclInvalidArgument, "outUserPtr");
  NCCLCHECK(ncclCommWindowDeregister(comm, win));
  BAD(ncclCommWindowDeregister(comm, win), ncclInvalidArgument, "not registered");
  BAD(ncclWinGetUserPtr(comm, win, &user), ncclInvalidArgument, "not registered");
  BAD(ncclCommWindowDeregister(comm, (ncclWindow_t)(void *)recv), ncclInvalidArgument, "not registered");
  BAD(ncclCommWindowDeregister(comm, (ncclWindow_t)(uintptr_t)0x1234), ncclInvalidArgument, "not registered");
  NCCLCHECK(ncclCommWindowDeregister(comm, NULL));
  BAD(ncclWinGetUserPtr(comm, NULL, &user), ncclInvalidArgument, "not registered");
  BAD(ncclCommWindowRegister(comm, send, sizeof send, NULL, 0), ncclInvalidArgument, "win");
  BAD(ncclCommWindowRegister(comm, send, sizeof send, &win, 0x40), ncclInvalidArgument, "winFlags");
  BAD(ncclCommWindowRegister(comm, NULL, 64, &win, 0), ncclInvalidArgument, "buff");
  BAD(ncclCommWindowRegister(comm, send, 0, &win, 0), ncclInvalidArgument, "size");
  /* Queries. */
  int v;
  BAD(ncclCommCount(NULL, &v), ncclInvalidArgument, "comm");
  BAD(ncclCommCount(comm, NULL), ncclInvalidArgument, "NULL");
  BAD(ncclCommUserRank(comm, NULL), ncclInvalidArgument, "NULL");
  BAD(ncclCommCuDevice(NULL, &v), ncclInvalidArgument, "comm");
  ncclResult_t async;
  BAD(ncclCommGetAsyncError(comm, NULL), ncclInvalidArgument, "asyncError");
  NCCLCHECK(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == ncclSuccess, "async error %d", async);
  failed += everyArgument(rank, n, comm);
  failed += badConfigs(comm, id);
  failed += userOpsOfTwo(comm, n);
  /* The communicator still works after all the rejected calls. */
  NCCLCHECK(ncclAllReduce(send, recv, 16, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < 16; i++) EXPECT(recv[i] == n, "recv[%d] = %g after the good call", i, recv[i]);
  NCCLCHECK(ncclCommFinalize(comm));
  BAD(ncclCommFinalize(comm), ncclInvalidArgument, "finalized");
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage, "finalized");
  /* Nor is it split (until 2026-12-06 the split was taken, and failed
   * later with each rank saying the other had left). */
  ncclComm_t child = (ncclComm_t)send;
  BAD(ncclCommSplit(comm, 0, rank, &child, NULL), ncclInvalidUsage, "finalized");
  EXPECT(child == NULL, "a refused split left the handle %p", (void *)child);
  NCCLCHECK(ncclCommDestroy(comm));
  return failed;
}

/* ncclGetLastError read while another thread writes WARNs gives one whole
 * WARN, never "" or a mix of two (it handed out the process's buffer
 * itself: 117259 of 2000000 reads were empty, 2077 mixed). */
static int warnersStop;
static long warnings; /* WARNs the other thread has written */
static void *warner(void *arg) {
  (void)arg;
  int v;
  while (!__atomic_load_n(&warnersStop, __ATOMIC_RELAXED)) {
    ncclCommCount(NULL, &v);
    ncclCommUserRank(NULL, &v);
    __atomic_add_fetch(&warnings, 2, __ATOMIC_RELAXED);
  }
  return NULL;
}
static int lastErrorWhileWarning(void) {
  int v;
  char count[256], userRank[256];
  ncclCommCount(NULL, &v);
  snprintf(count, sizeof count, "%s", ncclGetLastError(NULL));
  ncclCommUserRank(NULL, &v);
  snprintf(userRank, sizeof userRank, "%s", ncclGetLastError(NULL));
  EXPECT(count[0] && userRank[0] && strcmp(count, userRank) != 0, "the two WARNs: '%s', '%s'", count, userRank);
  pthread_t t;
  __atomic_store_n(&warnersStop, 0, __ATOMIC_RELAXED);
  EXPECT(pthread_create(&t, NULL, warner, NULL) == 0, "a thread");
  int torn = 0;
  char seen[256] = "";
  /* Reads for at least 0.5 s and 200000 WARNs of the other thread (a
   * loaded machine runs the two by turns, where a read meets a WARN half
   * written only when the writer was preempted in it), 5 s at most. */
  __atomic_store_n(&warnings, 0, __ATOMIC_RELAXED);
  double t0 = nowSec(), now = t0;
  while (!torn && now < t0 + 5 && (now < t0 + 0.5 || __atomic_load_n(&warnings, __ATOMIC_RELAXED) < 200000)) {
    for (int i = 0; i < 1000 && !torn; i++) {
      snprintf(seen, sizeof seen, "%s", ncclGetLastError(NULL));
      torn = strcmp(seen, count) != 0 && strcmp(seen, userRank) != 0;
    }
    now = nowSec();
  }
  __atomic_store_n(&warnersStop, 1, __ATOMIC_RELAXED);
  pthread_join(t, NULL);
  EXPECT(!torn, "ncclGetLastError while another thread warns: '%s'", seen);
  return 0;
}

/* ncclGetLastError(comm) read by another thread while comm fails gives
 * the whole WARN that failed it or none of it: the text was written after
 * the failure was published, with no lock, so a reader could copy half of
 * it (ThreadSanitizer reports that race on the library before). A group
 * of two Broadcasts with different roots over ncclCommInitAll's two
 * communicators fails both (CHORUS_CHECK). */
static ncclComm_t failing[2];
static int failingDone;
static long failingReads;
static char failingTorn[600];
static void *failTextReader(void *arg) {
  const char *want = arg; /* the first round's text; the rounds' texts are alike */
  while (!__atomic_load_n(&failingDone, __ATOMIC_ACQUIRE)) {
    const char *t = ncclGetLastError(failing[0]);
    failingReads++;
    if (strstr(t, "Mismatched operation") && strcmp(t, want) != 0 && !failingTorn[0])
      snprintf(failingTorn, sizeof failingTorn, "%s", t);
  }
  return NULL;
}
static ncclResult_t failByRoots(void) {
  float b[4] = {0};
  ncclGroupStart();
  ncclBroadcast(b, b, 4, ncclFloat, 0, failing[0], NULL);
  ncclBroadcast(b, b, 4, ncclFloat, 1, failing[1], NULL);
  return ncclGroupEnd();
}
static int failTextWhileFailing(void) {
  char want[600];
  NCCLCHECK(ncclCommInitAll(failing, 2, NULL));
  EXPECT(failByRoots() == ncclInvalidUsage, "mismatched roots: ncclInvalidUsage");
  snprintf(want, sizeof want, "%s", ncclGetLastError(failing[0]));
  EXPECT(strstr(want, "Mismatched operation") != NULL, "the failure's text: '%s'", want);
  ncclCommAbort(failing[0]);
  ncclCommAbort(failing[1]);
  for (int round = 0; round < 60; round++) {
    NCCLCHECK(ncclCommInitAll(failing, 2, NULL));
    pthread_t t;
    __atomic_store_n(&failingDone, 0, __ATOMIC_RELEASE);
    EXPECT(pthread_create(&t, NULL, failTextReader, want) == 0, "a thread");
    ncclResult_t r = failByRoots();
    __atomic_store_n(&failingDone, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    ncclCommAbort(failing[0]);
    ncclCommAbort(failing[1]);
    EXPECT(r == ncclInvalidUsage, "round %d: mismatched roots gave %d", round, (int)r);
    EXPECT(!failingTorn[0], "round %d: ncclGetLastError(comm) while comm failed: '%s'", round, failingTorn);
  }
  EXPECT(failingReads > 0, "the reader read");
  return 0;
}

/* A fork while another thread reads ncclGetLastError leaves the child
 * able to read it too: the live communicators' lock, held by the reader
 * at the fork, stayed held in the child for good (on the build before, a
 * child hung in 3 of 5 runs of a first version of this check, 300 forks).
 * Not under ThreadSanitizer, which cannot follow a fork while another
 * thread runs. */
#if !defined(__SANITIZE_THREAD__)
static int readersStop;
static void *lastErrorReader(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&readersStop, __ATOMIC_RELAXED)) ncclGetLastError(NULL);
  return NULL;
}
#endif
static int forkWhileReading(void) {
#if !defined(__SANITIZE_THREAD__)
  pthread_t t;
  __atomic_store_n(&readersStop, 0, __ATOMIC_RELAXED);
  EXPECT(pthread_create(&t, NULL, lastErrorReader, NULL) == 0, "a thread");
  int hung = 0, bad = 0;
  for (int i = 0; i < 1000 && !hung && !bad; i++) {
    pid_t p = fork();
    if (p == 0) {
      alarm(2);
      ncclComm_t none = (ncclComm_t)1; /* any pointer: NCCL's takes a destroyed one */
      ncclGetLastError(none);
      _exit(0);
    }
    int st = 0;
    if (p < 0 || waitpid(p, &st, 0) != p) bad = 1;
    else if (WIFSIGNALED(st)) hung = 1;
  }
  __atomic_store_n(&readersStop, 1, __ATOMIC_RELAXED);
  pthread_join(t, NULL);
  EXPECT(!bad, "fork and wait");
  EXPECT(!hung, "a child forked while another thread read ncclGetLastError hung in it");
#endif
  return 0;
}

int main(void) {
  int failed = 0;
  ncclUniqueId id;
  ncclComm_t comm;
  int v = 0;
  /* The forked ranks first: the root thread of the unused id below lives
   * on, and ThreadSanitizer cannot follow a fork taken while it runs. */
  for (int n = 1; n <= 3; n++) failed += runRanks(n, rankMain, NULL, 60);
  int *queued = mmap(NULL, sizeof *queued, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT(queued != MAP_FAILED, "mmap");
  for (int n = 1; n <= 3; n += 2) {
    *queued = 0;
    failed += runRanks(n, endedInGroup, queued, 60);
  }
  failed += lastErrorWhileWarning();
  failed += failTextWhileFailing();
  failed += forkWhileReading();
  BAD(ncclGetVersion(NULL), ncclInvalidArgument, "version");
  NCCLCHECK(ncclGetVersion(&v));
  EXPECT(v == NCCL_VERSION_CODE && v == 21903, "version %d", v);
  NCCLCHECK(chorusGetVersion(&v));
  EXPECT(v == CHORUS_VERSION_CODE, "chorus version %d", v);
  EXPECT(NCCL_VERSION(2, 30, 7) == 23007 && NCCL_VERSION(2, 8, 4) == 2804, "NCCL_VERSION formula");
  BAD(ncclGetUniqueId(NULL), ncclInvalidArgument, "uniqueId");
  NCCLCHECK(ncclGetUniqueId(&id));
  BAD(ncclCommInitRank(NULL, 1, id, 0), ncclInvalidArgument, "comm");
  BAD(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument, "rank");
  BAD(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument, "rank");
  BAD(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument, "rank");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  BAD(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInvalidArgument, "NCCL_CONFIG_INITIALIZER");
  ncclConfig_t cfg2 = NCCL_CONFIG_INITIALIZER;
  cfg2.blocking = 3;
  BAD(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg2), ncclInvalidArgument, "blocking");
  failed += badConfigs(NULL, id);
  /* A config of an older NCCL (smaller size): what lies past it is not read. */
  ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
  old.size = offsetof(ncclConfig_t, splitShare);
  old.splitShare = 99;
  old.CTAPolicy = 99;
  /* the bad ranks above were refused here only: this process may try the
   * same id again, as NCCL allows */
  NCCLCHECK(ncclCommInitRankConfig(&comm, 1, id, 0, &old));
  NCCLCHECK(ncclCommDestroy(comm));
  ncclUniqueId fresh;
  /* The network chorus has, by NCCL's name in any case; and a config of a
   * version before netName (2.17) whose field holds a name it lacks. */
  ncclConfig_t sock = NCCL_CONFIG_INITIALIZER;
  sock.netName = "socket";
  NCCLCHECK(ncclGetUniqueId(&fresh));
  NCCLCHECK(ncclCommInitRankConfig(&comm, 1, fresh, 0, &sock));
  NCCLCHECK(ncclCommDestroy(comm));
  /* An init whose arguments are refused fails its group, as NCCL's does:
   * ncclGroupEnd returns the error at once and runs none of the group's
   * inits (the good one would wait for its peer until the timeout). */
  for (int bad = 0; bad < 3; bad++) {
    ncclComm_t pair[2] = {(ncclComm_t)&v, (ncclComm_t)&v};
    ncclUniqueId gid;
    NCCLCHECK(ncclGetUniqueId(&gid));
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclCommInitRank(&pair[0], 2, gid, 0));
    ncclResult_t r = bad == 0   ? ncclCommInitRank(&pair[1], 0, gid, 1)
                     : bad == 1 ? ncclCommInitRankConfig(&pair[1], 2, gid, 1, &cfg2)
                                : ncclCommInitRankScalable(&pair[1], 2, 1, 0, &gid, NULL);
    EXPECT(r == ncclInvalidArgument, "bad init %d in a group returned %s", bad, ncclGetErrorString(r));
    double t0 = nowSec();
    BAD(ncclGroupEnd(), ncclInvalidArgument, NULL);
    EXPECT(nowSec() - t0 < 1, "bad init %d: ncclGroupEnd took %.2f s", bad, nowSec() - t0);
    /* As NCCL's, the good init's handle was the caller's at its call: the
     * failed group leaves that communicator failed, for the caller to
     * destroy (or abort); the refused one's is NULL. */
    EXPECT(pair[1] == NULL, "bad init %d: the refused init left a handle %p", bad, (void *)pair[1]);
    ncclResult_t async = ncclSuccess;
    EXPECT(pair[0] != NULL && pair[0] != (ncclComm_t)&v, "bad init %d: the good init's handle is %p", bad,
           (void *)pair[0]);
    NCCLCHECK(ncclCommGetAsyncError(pair[0], &async));
    EXPECT(async == ncclInvalidArgument, "bad init %d: the good init's communicator says %s", bad,
           ncclGetErrorString(async));
    BAD(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, pair[0], NULL), ncclInvalidArgument, "failed earlier");
    if (bad == 1) NCCLCHECK(ncclCommAbort(pair[0]));
    else NCCLCHECK(ncclCommDestroy(pair[0]));
  }
  /* ncclCommInitRank in a group gives its handle at the call, as NCCL's
   * does, and never writes through the pointer afterwards (until
   * 2026-12-06 it wrote the handle at ncclGroupEnd: NULL until then, and
   * into whatever the pointer had come to mean, a dead stack slot); a
   * nonblocking one says ncclSuccess there, as NCCL's (whose state is
   * ncclInProgress only from ncclGroupEnd on). Both pairs then work. */
  for (int nonblocking = 0; nonblocking < 2; nonblocking++) {
    ncclUniqueId gid;
    NCCLCHECK(ncclGetUniqueId(&gid));
    ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
    nb.blocking = !nonblocking;
    ncclComm_t pair[2];
    ncclComm_t sentinel = (ncclComm_t)&v;
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < 2; r++) {
      ncclComm_t tmp = NULL;
      ncclResult_t res = ncclCommInitRankConfig(&tmp, 2, gid, r, &nb);
      EXPECT(res == ncclSuccess && tmp != NULL,
             "group init %d (nonblocking %d): %s, handle %p", r, nonblocking, ncclGetErrorString(res), (void *)tmp);
      pair[r] = tmp;
      tmp = sentinel;
      ncclComm_t *volatile gone = &tmp; /* the slot the old library wrote at ncclGroupEnd */
      EXPECT(*gone == sentinel, "slot");
    }
    ncclComm_t watch0 = pair[0], watch1 = pair[1];
    ncclResult_t end = ncclGroupEnd();
    EXPECT(end == (nonblocking ? ncclInProgress : ncclSuccess) || (nonblocking && end == ncclSuccess),
           "group of inits (nonblocking %d) ended %s", nonblocking, ncclGetErrorString(end));
    EXPECT(pair[0] == watch0 && pair[1] == watch1, "the handles changed at ncclGroupEnd");
    for (int r = 0; r < 2; r++) {
      ncclResult_t async = ncclInProgress;
      double t0 = nowSec();
      while (async == ncclInProgress && nowSec() - t0 < 20) NCCLCHECK(ncclCommGetAsyncError(pair[r], &async));
      EXPECT(async == ncclSuccess, "group init %d (nonblocking %d) came to %s", r, nonblocking,
             ncclGetErrorString(async));
    }
    int x[2] = {3, 4};
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < 2; r++) NCCLCHECK(ncclAllReduce(&x[r], &x[r], 1, ncclInt32, ncclSum, pair[r], NULL));
    end = ncclGroupEnd();
    EXPECT(end == ncclSuccess || end == ncclInProgress, "the pair's AllReduce: %s", ncclGetErrorString(end));
    for (int r = 0; r < 2; r++) {
      ncclResult_t async = ncclInProgress;
      while (async == ncclInProgress) NCCLCHECK(ncclCommGetAsyncError(pair[r], &async));
      EXPECT(async == ncclSuccess, "after the AllReduce %d: %s", r, ncclGetErrorString(async));
    }
    EXPECT(x[0] == 7 && x[1] == 7, "the pair's AllReduce gave %d %d", x[0], x[1]);
    for (int r = 0; r < 2; r++) NCCLCHECK(ncclCommDestroy(pair[r]));
  }
  sock.netName = "IB";
  sock.version = NCCL_VERSION(2, 16, 0);
  NCCLCHECK(ncclGetUniqueId(&fresh));
  NCCLCHECK(ncclCommInitRankConfig(&comm, 1, fresh, 0, &sock));
  NCCLCHECK(ncclCommDestroy(comm));
  /* A size that leaves the magic out: not initialized by the macro; and a
   * failed init leaves *comm NULL, as NCCL's. */
  ncclConfig_t tiny = NCCL_CONFIG_INITIALIZER;
  tiny.size = sizeof(size_t);
  comm = (ncclComm_t)&tiny;
  BAD(ncclCommInitRankConfig(&comm, 1, fresh, 0, &tiny), ncclInvalidArgument, "NCCL_CONFIG_INITIALIZER");
  EXPECT(comm == NULL, "a failed ncclCommInitRankConfig left *comm %p", (void *)comm);
  comm = (ncclComm_t)&tiny;
  BAD(ncclCommInitRank(&comm, 2, fresh, 5), ncclInvalidArgument, "rank");
  EXPECT(comm == NULL, "a failed ncclCommInitRank left *comm %p", (void *)comm);
  comm = (ncclComm_t)&tiny;
  BAD(ncclCommSplit(NULL, 0, 0, &comm, NULL), ncclInvalidArgument, "comm");
  EXPECT(comm == NULL, "a failed ncclCommSplit left *newcomm %p", (void *)comm);
  comm = (ncclComm_t)&tiny;
  BAD(ncclCommInitRankScalable(&comm, 2, 0, 0, &fresh, NULL), ncclInvalidArgument, "nId");
  EXPECT(comm == NULL, "a failed ncclCommInitRankScalable left *newcomm %p", (void *)comm);
  /* Fields newer than the struct's version are not the caller's (NCCL's
   * parseCommConfig): their values are not checked, the defaults hold. */
  ncclConfig_t early = NCCL_CONFIG_INITIALIZER;
  early.version = NCCL_VERSION(2, 16, 0);
  early.minCTAs = 0;
  early.graphUsageMode = 7;
  NCCLCHECK(ncclGetUniqueId(&fresh));
  NCCLCHECK(ncclCommInitRankConfig(&comm, 1, fresh, 0, &early));
  NCCLCHECK(ncclCommDestroy(comm));
  early.version = 0;
  early.blocking = 2;
  NCCLCHECK(ncclGetUniqueId(&fresh));
  NCCLCHECK(ncclCommInitRankConfig(&comm, 1, fresh, 0, &early));
  NCCLCHECK(ncclCommDestroy(comm));
  early.version = NCCL_VERSION_CODE;
  BAD(ncclCommInitRankConfig(&comm, 1, fresh, 0, &early), ncclInvalidArgument, "blocking");
  BAD(ncclCommInitAll(NULL, 2, NULL), ncclInvalidArgument, "comm");
  ncclComm_t comms[2];
  NCCLCHECK(ncclCommInitAll(comms, 0, NULL)); /* as NCCL: nothing to make */
  BAD(ncclCommInitAll(comms, -1, NULL), ncclInvalidArgument, "ndev");
  int badDev[2] = {0, -1};
  BAD(ncclCommInitAll(comms, 2, badDev), ncclInvalidArgument, "devlist");
  BAD(ncclGroupEnd(), ncclInvalidUsage, "not in a group");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclGroupSimulateEnd(&sim)); /* an empty group: nothing is estimated (NCCL leaves the field) */
  EXPECT(sim.estimatedTime == -1.0f, "an empty group's estimated time %g, not the initializer's -1", sim.estimatedTime);
  BAD(ncclGroupEnd(), ncclInvalidUsage, "not in a group");
  ncclSimInfo_t unset = NCCL_SIM_INFO_INITIALIZER;
  unset.magic = 0;
  NCCLCHECK(ncclGroupStart());
  BAD(ncclGroupSimulateEnd(&unset), ncclInvalidArgument, "NCCL_SIM_INFO_INITIALIZER");
  /* ... and the group is over, as NCCL's (a call after it runs at once) */
  BAD(ncclGroupEnd(), ncclInvalidUsage, "not in a group");
  /* A NULL simInfo is a plain ncclGroupEnd (NCCL's ncclGroupEndInternal(NULL));
   * an init inside a simulated group still makes its communicator. */
  {
    ncclComm_t one = NULL, sim1 = NULL;
    ncclUniqueId uid;
    NCCLCHECK(ncclGetUniqueId(&uid));
    NCCLCHECK(ncclCommInitRank(&one, 1, uid, 0));
    int x = 7, y = 0;
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, one, NULL));
    NCCLCHECK(ncclGroupSimulateEnd(NULL));
    EXPECT(y == 7, "a group ended by ncclGroupSimulateEnd(NULL) did not run: %d", y);
    x = 9;
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, one, NULL));
    BAD(ncclGroupSimulateEnd(&unset), ncclInvalidArgument, "NCCL_SIM_INFO_INITIALIZER");
    EXPECT(y == 7, "a group whose ncclGroupSimulateEnd failed ran: %d", y);
    NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, one, NULL));
    EXPECT(y == 9, "a call after a failed ncclGroupSimulateEnd did not run at once: %d", y);
    NCCLCHECK(ncclGetUniqueId(&uid));
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclCommInitRank(&sim1, 1, uid, 0));
    NCCLCHECK(ncclGroupSimulateEnd(&si));
    int count = 0;
    EXPECT(sim1 != NULL, "an init inside a simulated group made no communicator");
    if (sim1) NCCLCHECK(ncclCommCount(sim1, &count));
    EXPECT(count == 1, "communicator made in a simulated group: count %d", count);
    if (sim1) NCCLCHECK(ncclCommDestroy(sim1));
    NCCLCHECK(ncclCommDestroy(one));
  }
  /* ncclMemFree frees what ncclMemAlloc returned, and refuses anything
   * else (it used to hand it to free(): a crash); with few descriptors the
   * later blocks are plain memory, checked the same way. */
  {
    int stackVar = 0;
    void *heap = malloc(64);
    BAD(ncclMemFree(&stackVar), ncclInvalidArgument, "ncclMemAlloc");
    BAD(ncclMemFree(heap), ncclInvalidArgument, "ncclMemAlloc");
    free(heap);
    struct rlimit was, few;
    getrlimit(RLIMIT_NOFILE, &was);
    few = was;
    few.rlim_cur = 64; /* a quarter of them may hold shared blocks */
    EXPECT(setrlimit(RLIMIT_NOFILE, &few) == 0, "setrlimit: %s", strerror(errno));
    char *blocks[24];
    for (int k = 0; k < 24; k++) {
      NCCLCHECK(ncclMemAlloc((void **)&blocks[k], 65536 + k));
      memset(blocks[k], k, 65536 + k);
    }
    setrlimit(RLIMIT_NOFILE, &was);
    for (int k = 0; k < 24; k += 23) { /* a shared block and a plain one */
      BAD(ncclMemFree(blocks[k] + 16), ncclInvalidArgument, "ncclMemAlloc");
      NCCLCHECK(ncclMemFree(blocks[k]));
      BAD(ncclMemFree(blocks[k]), ncclInvalidArgument, "freed already");
    }
    for (int k = 1; k < 23; k++) NCCLCHECK(ncclMemFree(blocks[k]));
  }
  NCCLCHECK(ncclCommDestroy(NULL));
  NCCLCHECK(ncclCommAbort(NULL));
  NCCLCHECK(ncclCommFinalize(NULL));
  EXPECT(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0, "error string");
  EXPECT(strcmp(ncclGetErrorString(ncclRemoteError), "remote process exited or there was a network error") == 0,
         "error string");
  EXPECT(strcmp(ncclGetErrorString((ncclResult_t)42), "unknown result code") == 0, "error string");
  /* InitAll with a devlist reports those devices; a device twice is
   * NCCL's ncclInvalidUsage (one communicator per device). */
  int dup[3] = {0, 1, 0};
  BAD(ncclCommInitAll(comms, 3, dup), ncclInvalidUsage, "devlist");
  int devs[2] = {5, 3};
  NCCLCHECK(ncclCommInitAll(comms, 2, devs));
  NCCLCHECK(ncclCommCuDevice(comms[0], &v));
  EXPECT(v == 5, "cuDevice %d", v);
  NCCLCHECK(ncclCommCuDevice(comms[1], &v));
  EXPECT(v == 3, "cuDevice %d", v);
  /* A simulated group predicts from the tuner's model and runs nothing; a
   * larger one takes longer; the communicators work afterwards. */
  static float simIn[2][1 << 16], simOut[2][1 << 16];
  float est[2];
  for (int k = 0; k < 2; k++) {
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < 2; r++) {
      for (int i = 0; i < 1 << 16; i++) simOut[r][i] = -1.0f;
      NCCLCHECK(ncclAllReduce(simIn[r], simOut[r], k ? 1 << 16 : 8, ncclFloat, ncclSum, comms[r], NULL));
    }
    NCCLCHECK(ncclGroupSimulateEnd(&si));
    EXPECT(simOut[0][0] == -1.0f && simOut[1][(1 << 16) - 1] == -1.0f, "the simulated group ran");
    est[k] = si.estimatedTime;
  }
  EXPECT(est[0] > 0 && est[1] > est[0], "estimated times %g us (8 floats) and %g us (65536 floats)", est[0], est[1]);
  /* One rank alone simulates a group with a count-0 AllReduce in it: the
   * no-op takes no number there either, so the ranks' next AllReduce
   * still matches (it failed as a mismatch when the no-op took one). */
  ncclSimInfo_t one = NCCL_SIM_INFO_INITIALIZER;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(simIn[0], simOut[0], 0, ncclFloat, ncclSum, comms[0], NULL));
  NCCLCHECK(ncclAllReduce(simIn[0], simOut[0], 8, ncclFloat, ncclSum, comms[0], NULL));
  NCCLCHECK(ncclGroupSimulateEnd(&one));
  for (int r = 0; r < 2; r++) simIn[r][5] = (float)(r + 1);
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < 2; r++) NCCLCHECK(ncclAllReduce(simIn[r], simOut[r], 8, ncclFloat, ncclSum, comms[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  EXPECT(simOut[0][5] == 3.0f && simOut[1][5] == 3.0f, "after a simulated group: %g %g", simOut[0][5], simOut[1][5]);
  NCCLCHECK(ncclCommDestroy(comms[0]));
  NCCLCHECK(ncclCommDestroy(comms[1]));
  printf("test_errors: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
