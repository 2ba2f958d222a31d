/* Reduction operators: built-in ones lowered per datatype, and user
 * operators (PreMulSum, chorus's bitwise ones) owned by a communicator. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/comm.h"
#include "chorus.h"
#include "core/err.h"
#include "core/log.h"
#include "reduce/floatconv.h"

/* Reads a scalar of the given datatype as double and as integer. */
static void readScalar(const void *p, int dtype, double *f, int64_t *i) {
  switch (dtype) {
    case ncclInt8: *i = *(const int8_t *)p; *f = (double)*i; break;
    case ncclUint8: *i = *(const uint8_t *)p; *f = (double)*i; break;
    case ncclInt32: *i = *(const int32_t *)p; *f = (double)*i; break;
    case ncclUint32: *i = *(const uint32_t *)p; *f = (double)*i; break;
    case ncclInt64: *i = *(const int64_t *)p; *f = (double)*i; break;
    case ncclUint64: *i = (int64_t)*(const uint64_t *)p; *f = (double)*(const uint64_t *)p; break;
    case ncclFloat16: *f = halfToFloat(*(const uint16_t *)p); *i = (int64_t)*f; break;
    case ncclFloat32: *f = *(const float *)p; *i = (int64_t)*f; break;
    case ncclFloat64: *f = *(const double *)p; *i = (int64_t)*f; break;
    case ncclBfloat16: *f = bf16ToFloat(*(const uint16_t *)p); *i = (int64_t)*f; break;
    case ncclFloat8e4m3: *f = fp8ToFloat(*(const uint8_t *)p, 1); *i = (int64_t)*f; break;
    case ncclFloat8e5m2: *f = fp8ToFloat(*(const uint8_t *)p, 0); *i = (int64_t)*f; break;
  }
}

/* The table index of a user op handle of comm, or -1 when the handle is
 * none of comm's live ops. Handles are ncclNumOps + (index ^ opMangle), so
 * that one from another communicator (where it may have the same index,
 * NCCL mangles them for the same reason) is refused, not used with the
 * other's scalar. */
static int userOpIndex(const struct ncclComm *comm, ncclRedOp_t op) {
  if ((int)op < ncclNumOps || (int)op - ncclNumOps >= COMM_MAX_USER_OPS) return -1;
  int idx = ((int)op - ncclNumOps) ^ (int)comm->opMangle;
  return idx < comm->nUserOps && comm->userOps[idx].used ? idx : -1;
}

ncclResult_t commLowerOp(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dtype, struct redOp *out,
                         const char *call) {
  memset(out, 0, sizeof *out);
  out->dtype = dtype;
  switch ((int)op) {
    case ncclSum: out->kind = redSum; return ncclSuccess;
    case ncclProd: out->kind = redProd; return ncclSuccess;
    case ncclMax: out->kind = redMax; return ncclSuccess;
    case ncclMin: out->kind = redMin; return ncclSuccess;
    case ncclAvg:
      if (dtypeIsFloat(dtype)) {
        out->kind = redPreMulSum;
        out->scaleF = 1.0 / comm->nranks;
        out->finite = 1;
      } else {
        out->kind = redSumPostDiv;
        out->divisor = comm->nranks;
      }
      return ncclSuccess;
  }
  int idx = userOpIndex(comm, op);
  if (idx < 0) {
    WARN("%s : invalid reduction operation %d (unknown to this communicator)", call, (int)op);
    return ncclInvalidArgument;
  }
  if (comm->userOps[idx].dtype != (int)dtype) {
    WARN("%s : reduction operation %d was created for %s, not %s", call, (int)op,
         dtypeName(comm->userOps[idx].dtype), dtypeName(dtype));
    return ncclInvalidArgument;
  }
  *out = comm->userOps[idx].red;
  return ncclSuccess;
}

/* A free entry of comm's user op table, for an operator of dtype (the
 * table doubles as NCCL's when full); call names the caller in a WARN. */
static ncclResult_t userOpNew(struct ncclComm *comm, ncclDataType_t dtype, const char *call, struct userRedOp **out) {
  int idx = 0;
  while (idx < comm->nUserOps && comm->userOps[idx].used) idx++;
  if (idx == COMM_MAX_USER_OPS) {
    WARN("%s : too many reduction operations (%d)", call, COMM_MAX_USER_OPS);
    return ncclInvalidUsage;
  }
  if (idx == comm->userOpsCap) {
    int cap = comm->userOpsCap ? 2 * comm->userOpsCap : 16;
    struct userRedOp *grown = realloc(comm->userOps, sizeof *grown * (size_t)cap);
    if (!grown) {
      WARN("%s : out of memory for %d reduction operations", call, cap);
      return ncclSystemError;
    }
    comm->userOps = grown;
    comm->userOpsCap = cap;
  }
  struct userRedOp *u = &comm->userOps[idx];
  memset(u, 0, sizeof *u);
  u->used = 1;
  u->dtype = dtype;
  u->red.dtype = dtype;
  if (idx == comm->nUserOps) comm->nUserOps++;
  *out = u;
  return ncclSuccess;
}

/* The handle of u, an entry of comm's table (see userOpIndex). */
static ncclRedOp_t userOpHandle(const struct ncclComm *comm, const struct userRedOp *u) {
  return (ncclRedOp_t)(ncclNumOps + ((int)(u - comm->userOps) ^ (int)comm->opMangle));
}

void redOpReadScalar(struct redOp *red) {
  if (red->scaleAt) readScalar(red->scaleAt, red->dtype, &red->scaleF, &red->scaleI);
}

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
         ncclScalarResidence_t residence, ncclComm_t comm) {
  CHECK(commCheck(comm, "ncclRedOpCreatePreMulSum"));
  CHECK(commInitDone(comm, "ncclRedOpCreatePreMulSum")); /* as NCCL's ncclCommEnsureReady */
  if (op == NULL || scalar == NULL) {
    WARN("ncclRedOpCreatePreMulSum : %s argument is NULL", op == NULL ? "op" : "scalar");
    return ncclInvalidArgument;
  }
  if ((int)datatype < 0 || datatype >= ncclNumTypes) {
    WARN("ncclRedOpCreatePreMulSum : invalid datatype %d", (int)datatype);
    return ncclInvalidArgument;
  }
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    WARN("ncclRedOpCreatePreMulSum : invalid residence %d", (int)residence);
    return ncclInvalidArgument;
  }
  struct userRedOp *u;
  CHECK(userOpNew(comm, datatype, "ncclRedOpCreatePreMulSum", &u));
  u->red.kind = redPreMulSum;
  /* An immediate scalar is read now; a "device" one (host memory here too)
   * each time an operation using it starts running, so a caller may update
   * it between calls, or on the stream before one, as NCCL allows. */
  if (residence == ncclScalarDevice) u->red.scaleAt = scalar;
  else readScalar(scalar, datatype, &u->red.scaleF, &u->red.scaleI);
  *op = userOpHandle(comm, u);
  return ncclSuccess;
}

ncclResult_t chorusRedOpCreateBitwise(ncclRedOp_t *op, chorusBitwiseOp_t kind, ncclDataType_t datatype,
                                      ncclComm_t comm) {
  CHECK(commCheck(comm, "chorusRedOpCreateBitwise"));
  CHECK(commInitDone(comm, "chorusRedOpCreateBitwise")); /* as NCCL's ncclCommEnsureReady */
  if (op == NULL) {
    WARN("chorusRedOpCreateBitwise : op argument is NULL");
    return ncclInvalidArgument;
  }
  if ((int)kind < 0 || kind > chorusBxor) {
    WARN("chorusRedOpCreateBitwise : invalid kind %d (chorusBand, chorusBor or chorusBxor)", (int)kind);
    return ncclInvalidArgument;
  }
  if ((int)datatype < 0 || datatype >= ncclNumTypes || dtypeIsFloat(datatype)) {
    WARN("chorusRedOpCreateBitwise : invalid datatype %d (%s): bitwise reductions take integer types", (int)datatype,
         dtypeName(datatype));
    return ncclInvalidArgument;
  }
  struct userRedOp *u;
  CHECK(userOpNew(comm, datatype, "chorusRedOpCreateBitwise", &u));
  u->red.kind = kind == chorusBand ? redBand : kind == chorusBor ? redBor : redBxor;
  *op = userOpHandle(comm, u);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  CHECK(commCheck(comm, "ncclRedOpDestroy"));
  if ((int)op >= 0 && (int)op < ncclNumOps) {
    WARN("ncclRedOpDestroy : operator %d is a NCCL builtin", (int)op);
    return ncclInvalidArgument;
  }
  int idx = userOpIndex(comm, op);
  if (idx < 0) {
    WARN("ncclRedOpDestroy : operator %d is unknown to this communicator", (int)op);
    return ncclInvalidArgument;
  }
  comm->userOps[idx].used = 0;
  return ncclSuccess;
}
