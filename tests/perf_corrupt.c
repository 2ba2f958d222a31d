/* LD_PRELOAD'ed into a perf tool by tests/perf_tools.sh: after each
 * AllReduce on rank PERF_CORRUPT_RANK that completed before it returned
 * (the tools' -y 1), the first float of the output is one more than chorus
 * wrote, so that the tool's check has exactly one wrong element to count
 * per call. Reaches chorus through NCCL's pncclAllReduce name. */
#include <stdlib.h>

#include "nccl.h"

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t res = pncclAllReduce(send, recv, count, type, op, comm, stream);
  const char *who = getenv("PERF_CORRUPT_RANK");
  int rank = -1;
  ncclCommUserRank(comm, &rank);
  if (res == ncclSuccess && who && atoi(who) == rank && count > 0 && type == ncclFloat) ((float *)recv)[0] += 1.0f;
  return res;
}
