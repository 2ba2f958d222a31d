/* Every entry point rejects bad input with ncclInvalidArgument or
 * ncclInvalidUsage, a WARN naming the argument (ncclGetLastError), and no
 * change to any buffer. */
#include <string.h>

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
  /* A user op made for float cannot be used with double, nor after destroy. */
  ncclRedOp_t op;
  float two = 2;
  NCCLCHECK(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat, ncclScalarHostImmediate, comm));
  BAD(ncclAllReduce(send, recv, 2, ncclDouble, op, comm, NULL), ncclInvalidArgument, "created for");
  NCCLCHECK(ncclRedOpDestroy(op, comm));
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, op, comm, NULL), ncclInvalidArgument, "operation");
  BAD(ncclRedOpDestroy(op, comm), ncclInvalidArgument, "unknown");
  BAD(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "builtin");
  BAD(ncclRedOpCreatePreMulSum(NULL, &two, ncclFloat, ncclScalarHostImmediate, comm), ncclInvalidArgument, "op");
  BAD(ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat, ncclScalarHostImmediate, comm), ncclInvalidArgument, "scalar");
  /* Nothing above touched the output. */
  for (int i = 0; i < 16; i++) EXPECT(recv[i] == -7, "recv[%d] changed to %g by a rejected call", i, recv[i]);
  /* Zero counts are no-ops, even with NULL buffers. */
  NCCLCHECK(ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, comm, NULL));
  NCCLCHECK(ncclSend(NULL, 0, ncclFloat, (rank + 1) % n, comm, NULL));
  /* A bad call inside a group fails ncclGroupEnd and the group is dropped. */
  NCCLCHECK(ncclGroupStart());
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, (ncclRedOp_t)99, comm, NULL), ncclInvalidArgument, "operation");
  BAD(ncclGroupEnd(), ncclInvalidArgument, NULL);
  BAD(ncclGroupEnd(), ncclInvalidUsage, "not in a group");
  /* Registration is optional; handles are checked. */
  void *h = NULL;
  NCCLCHECK(ncclCommRegister(comm, send, sizeof send, &h));
  NCCLCHECK(ncclCommDeregister(comm, h));
  BAD(ncclCommDeregister(comm, recv), ncclInvalidUsage, "Could not find handle");
  BAD(ncclCommRegister(comm, send, 16, NULL), ncclInvalidArgument, "handle");
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
  /* The communicator still works after all the rejected calls. */
  NCCLCHECK(ncclAllReduce(send, recv, 16, ncclFloat, ncclSum, comm, NULL));
  for (int i = 0; i < 16; i++) EXPECT(recv[i] == n, "recv[%d] = %g after the good call", i, recv[i]);
  NCCLCHECK(ncclCommFinalize(comm));
  BAD(ncclCommFinalize(comm), ncclInvalidArgument, "finalized");
  BAD(ncclAllReduce(send, recv, 16, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage, "finalized");
  NCCLCHECK(ncclCommDestroy(comm));
  return failed;
}

int main(void) {
  int failed = 0;
  ncclUniqueId id;
  ncclComm_t comm;
  int v = 0;
  /* The forked ranks first: the root thread of the unused id below lives
   * on, and ThreadSanitizer cannot follow a fork taken while it runs. */
  for (int n = 1; n <= 3; n++) failed += runRanks(n, rankMain, NULL, 60);
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
  BAD(ncclCommInitAll(NULL, 2, NULL), ncclInvalidArgument, "comm");
  ncclComm_t comms[2];
  BAD(ncclCommInitAll(comms, 0, NULL), ncclInvalidArgument, "ndev");
  int badDev[2] = {0, -1};
  BAD(ncclCommInitAll(comms, 2, badDev), ncclInvalidArgument, "devlist");
  BAD(ncclGroupEnd(), ncclInvalidUsage, "not in a group");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCLCHECK(ncclGroupStart());
  BAD(ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "not supported");
  BAD(ncclGroupEnd(), ncclInvalidUsage, "not in a group");
  NCCLCHECK(ncclCommDestroy(NULL));
  NCCLCHECK(ncclCommAbort(NULL));
  EXPECT(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0, "error string");
  EXPECT(strcmp(ncclGetErrorString(ncclRemoteError), "remote process exited or there was a network error") == 0,
         "error string");
  EXPECT(strcmp(ncclGetErrorString((ncclResult_t)42), "unknown result code") == 0, "error string");
  /* InitAll with a devlist reports those devices, duplicates allowed. */
  int devs[2] = {3, 3};
  NCCLCHECK(ncclCommInitAll(comms, 2, devs));
  NCCLCHECK(ncclCommCuDevice(comms[1], &v));
  EXPECT(v == 3, "cuDevice %d", v);
  NCCLCHECK(ncclCommDestroy(comms[0]));
  NCCLCHECK(ncclCommDestroy(comms[1]));
  printf("test_errors: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
