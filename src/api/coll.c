/* Collective and point-to-point entry points: check every argument, then
 * hand a group item to group.c. Bad input changes nothing. */
#include <stdint.h>
#include <string.h>

#include "api/api.h"
#include "chorus.h"
#include "api/group.h"
#include "api/rma.h"
#include "api/watch.h"
#include "core/err.h"
#include "core/log.h"
#include "engine/stream.h"

struct callArgs {
  int coll;
  const void *sendbuff;
  void *recvbuff;
  size_t count;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int root;
  ncclComm_t comm;
  cudaStream_t stream;
  int tag; /* Send/Recv */
};

static int isReduction(int coll) {
  return coll == collAllReduce || coll == collReduce || coll == collReduceScatter;
}

/* The bytes a collective's call reads at sendbuff and writes at recvbuff,
 * for bytes per count (AllGather's output and ReduceScatter's input are
 * nranks blocks). */
static void bufferBytes(const struct callArgs *a, size_t bytes, int nranks, size_t *sendBytes, size_t *recvBytes) {
  *sendBytes = *recvBytes = bytes;
  if (a->coll == collAllGather || a->coll == collGather) *recvBytes *= (size_t)nranks;
  if (a->coll == collReduceScatter || a->coll == collScatter) *sendBytes *= (size_t)nranks;
  if (a->coll == collAlltoAll) *sendBytes = *recvBytes = bytes * (size_t)nranks;
}

/* 1 when the call's send and receive buffers overlap other than as the
 * same buffer or the in-place layout NCCL documents (AllGather and Gather:
 * sendbuff at recvbuff + rank * count; ReduceScatter and Scatter the other
 * way round): no rank could then get the right data. Only where this rank
 * reads sendbuff and writes recvbuff. */
static int overlapsBadly(const struct callArgs *a, size_t bytes, int nranks, int rank) {
  if (a->coll == collSend || a->coll == collRecv) return 0;
  int root = a->root == rank;
  if ((a->coll == collBroadcast || a->coll == collReduce || a->coll == collGather || a->coll == collScatter) && !root)
    return 0;
  uintptr_t s = (uintptr_t)a->sendbuff, r = (uintptr_t)a->recvbuff, mine = (uintptr_t)rank * bytes;
  size_t sendBytes, recvBytes;
  bufferBytes(a, bytes, nranks, &sendBytes, &recvBytes);
  if (s + sendBytes <= r || r + recvBytes <= s || s == r) return 0;
  if ((a->coll == collAllGather || a->coll == collGather) && s == r + mine) return 0;
  if ((a->coll == collReduceScatter || a->coll == collScatter) && r == s + mine) return 0;
  return 1;
}

/* The tuner's "mapped" (tune.h): only 2 ranks' AllReduce, AllGather and
 * ReduceScatter choices depend on it (tune/model.c). */
static int buffersSymmetric(const struct callArgs *a, size_t esz) {
  struct ncclComm *comm = a->comm;
  if (comm->nranks != 2 || (a->coll != collAllReduce && a->coll != collAllGather && a->coll != collReduceScatter))
    return 0;
  size_t sendBytes, recvBytes;
  bufferBytes(a, a->count * esz, comm->nranks, &sendBytes, &recvBytes);
  return windowsSymmetricMapped(comm, a->sendbuff, sendBytes, a->recvbuff, recvBytes);
}

/* The operator as descriptors carry it: ranks that reduce with different
 * kinds must not match (a bitwise kind is its own code; PreMulSums, whose
 * scalars may differ by rank, share one). */
static uint8_t descOpOf(const struct callArgs *a, const struct redOp *red) {
  if (!isReduction(a->coll)) return OPDESC_NO_OP;
  if ((int)a->op < (int)ncclNumOps) return (uint8_t)a->op;
  if (red->kind >= redBand && red->kind <= redBxor) return (uint8_t)(OPDESC_BAND + (red->kind - redBand));
  return OPDESC_USER_OP;
}

static ncclResult_t enqueueCheckArgs(const struct callArgs *a) {
  const char *name = collName(a->coll);
  CHECK(commCheck(a->comm, name));
  struct ncclComm *comm = a->comm;
  logSetRank(comm->rank);
  CHECK(commReady(comm, name));
  if ((int)a->dtype < 0 || a->dtype >= ncclNumTypes) {
    WARN("%s : invalid type %d", name, (int)a->dtype);
    return ncclInvalidArgument;
  }
  cudaStream_t stream = streamResolve(a->stream);
  struct groupItem item = {comm, stream, {0}, {0}, 0, {0}, 0};
  struct collDesc *d = &item.desc;
  d->coll = a->coll;
  d->sendbuff = a->sendbuff;
  d->recvbuff = a->recvbuff;
  d->count = a->count;
  d->dtype = a->dtype;
  d->root = a->root;
  d->red.dtype = a->dtype;
  d->red.kind = redSum;
  if (isReduction(a->coll)) CHECK(commLowerOp(comm, a->op, a->dtype, &d->red, name));
  int rooted = collRooted(a->coll);
  int p2p = a->coll == collSend || a->coll == collRecv;
  if ((rooted || p2p) && (a->root < 0 || a->root >= comm->nranks)) {
    WARN("%s : invalid %s %d (nranks %d)", name, p2p ? "peer" : "root", a->root, comm->nranks);
    return ncclInvalidArgument;
  }
  if (stream != NULL) CHECK(streamCheck(stream, name));
  size_t esz = dtypeSize(a->dtype), total; /* a multiplication, not two divisions (tens of ns a call) */
  if (__builtin_mul_overflow(a->count, esz, &total) || __builtin_mul_overflow(total, (size_t)comm->nranks, &total)) {
    WARN("%s : count %zu is too large", name, a->count);
    return ncclInvalidArgument;
  }
  if (a->count > 0) {
    int nonRoot = comm->rank != a->root;
    int needSend = a->coll != collRecv && !((a->coll == collBroadcast || a->coll == collScatter) && nonRoot);
    int needRecv = a->coll != collSend && !((a->coll == collReduce || a->coll == collGather) && nonRoot);
    if (needSend && a->sendbuff == NULL) {
      WARN("%s : sendbuff argument is NULL with count %zu", name, a->count);
      return ncclInvalidArgument;
    }
    if (needRecv && a->recvbuff == NULL) {
      WARN("%s : recvbuff argument is NULL with count %zu", name, a->count);
      return ncclInvalidArgument;
    }
    if (needSend && needRecv && overlapsBadly(a, a->count * esz, comm->nranks, comm->rank)) {
      WARN("%s : sendbuff %p and recvbuff %p overlap (count %zu) without being the same buffer or the in-place "
           "layout", name, a->sendbuff, a->recvbuff, a->count);
      return ncclInvalidArgument;
    }
  }
  INFO(p2p ? subsysP2p : subsysColl,
       "%s: opCount %llx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p [nranks=%d] stream %p",
       name, (unsigned long long)comm->opCount, a->sendbuff, a->recvbuff, a->count, (int)a->dtype,
       isReduction(a->coll) ? (int)a->op : 0, a->root, (void *)comm, comm->nranks, (void *)stream);
  item.opId = comm->opCount++; /* what NCCL's logs call opCount; every task of the call carries it */
  struct opDesc *c = &d->check;
  c->count = a->count;
  c->coll = (uint8_t)a->coll;
  c->dtype = (uint8_t)a->dtype;
  c->op = descOpOf(a, &d->red);
  if (p2p) c->tag = (uint16_t)a->tag;
  c->root = rooted || p2p ? a->root : -1;
  c->rank = comm->rank;
  /* Count 0: a collective is a no-op, as in NCCL, and keeps its number
   * (every rank calls it), taken where its group launches (a group only
   * simulated takes none). A send or receive to a peer still meets its peer's
   * (a token carries its descriptor, p2p.c), so that one side's 0 against
   * the other's count fails instead of matching the next call's data; to
   * itself it is a no-op (checkSelfP2p pairs the calls). */
  if (a->count == 0 && (!p2p || a->root == comm->rank)) return p2p ? ncclSuccess : groupEnqueue(&item);
  /* Chosen now: a choice NCCL_ALGO / NCCL_PROTO leave impossible changes
   * nothing. NCCL chooses at ncclGroupEnd (enqueue.cc, ncclPrepareTasks), so
   * inside a group the call succeeds and ncclGroupEnd fails; alone, the call
   * fails. */
  size_t smallCap = comm->slotBytes < COMM_SCRATCH_BYTES ? comm->slotBytes : COMM_SCRATCH_BYTES;
  ncclResult_t chosen = tuneChoose(&comm->tune, a->coll, a->count, esz, a->dtype, smallCap, comm->nch,
                                   buffersSymmetric(a, esz), &item.plan);
  if (chosen != ncclSuccess) return groupFailsAtEnd(chosen);
  return groupEnqueue(&item); /* numbered when it launches: a launch refused changes no count */
}

static ncclResult_t enqueueCheck(const struct callArgs *a) { return groupNoteError(enqueueCheckArgs(a)); }

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream, 0};
  return enqueueCheck(&a);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream, 0};
  return enqueueCheck(&a);
}

NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
         cudaStream_t stream) {
  struct callArgs a = {collBroadcast, buff, buff, count, datatype, ncclSum, root, comm, stream, 0};
  return enqueueCheck(&a);
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream, 0};
  return enqueueCheck(&a);
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream, 0};
  return enqueueCheck(&a);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream, 0};
  return enqueueCheck(&a);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collAlltoAll, sendbuff, recvbuff, count, datatype, ncclSum, 0, comm, stream, 0};
  return enqueueCheck(&a);
}

NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collGather, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream, 0};
  return enqueueCheck(&a);
}

NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
         int root, ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collScatter, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream, 0};
  return enqueueCheck(&a);
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collSend, sendbuff, NULL, count, datatype, ncclSum, peer, comm, stream, 0};
  return enqueueCheck(&a);
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collRecv, NULL, recvbuff, count, datatype, ncclSum, peer, comm, stream, 0};
  return enqueueCheck(&a);
}

ncclResult_t chorusSendTag(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, int tag,
                           ncclComm_t comm, cudaStream_t stream) {
  struct callArgs a = {collSend, sendbuff, NULL, count, datatype, ncclSum, peer, comm, stream, tag};
  return enqueueCheck(&a);
}

ncclResult_t chorusRecvTag(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, int tag, ncclComm_t comm,
                           cudaStream_t stream) {
  struct callArgs a = {collRecv, NULL, recvbuff, count, datatype, ncclSum, peer, comm, stream, tag};
  return enqueueCheck(&a);
}
