/* chorus: the NCCL API on host memory.
 * Names, enum values and struct layouts follow NCCL 2.30 so that NCCL
 * programs compile against this header unchanged. */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(CUDART_VERSION) || defined(__CUDA_RUNTIME_H__)
#include <cuda_runtime.h>
/* As NCCL's nccl.h: programs use __half and __nv_bfloat16 from it. */
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#else
/* No CUDA here: the same opaque type CUDA uses, so code written for NCCL
 * (passing 0/NULL or a chorus stream) compiles unchanged. */
typedef struct CUstream_st *cudaStream_t;
#endif

/* Types, enum values and struct layouts are NCCL 2.30's. The version is the
 * newest NCCL API level whose functions chorus implements in full: 2.19
 * (of later releases' functions some are here: ncclCommShrink,
 * ncclGroupSimulateEnd, ncclCommInitRankScalable, ncclCommRevoke, ncclCommGrow, windows,
 * ncclAlltoAll, ncclGather, ncclScatter, the one-sided calls), so
 * code that tests NCCL_VERSION_CODE before calling newer functions keeps
 * compiling. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 19
#define NCCL_PATCH 3
#define NCCL_SUFFIX ""
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8,
  ncclNumResults = 9
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f
#define NCCL_API_MAGIC 0xcafebeef
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
/* Window registration flags (ncclCommWindowRegister) */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_STRICT_ORDERING 0x02
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096
/* ncclCommSuspend flags */
#define NCCL_SUSPEND_MEM 0x01
/* ncclCommMemStats statistics (GPU memory: chorus allocates none) */
typedef enum {
  ncclStatGpuMemSuspend = 0,
  ncclStatGpuMemSuspended = 1,
  ncclStatGpuMemPersist = 2,
  ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;
/* ncclCommRevoke flags */
#define NCCL_REVOKE_DEFAULT 0x00

typedef struct ncclConfig_v23000 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  int graphUsageMode;
  int numRmaCtx;
  int maxP2pPeers;
  int graphStreamOrdering;
} ncclConfig_t;

/* The version a config carries says which of its fields the caller knows
 * (NCCL ignores the newer ones): this layout's, 2.30.5, not the API level
 * of NCCL_VERSION_CODE. */
#define NCCL_CONFIG_INITIALIZER                                                        \
  {                                                                                    \
    sizeof(ncclConfig_t), NCCL_API_MAGIC, NCCL_VERSION(2, 30, 5),                      \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT            \
  }

typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;
#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Every function has a p-prefixed twin (PMPI-style profiling alias). */
#define CHORUS_DECL(ret, name, args) ret name args; ret p##name args

CHORUS_DECL(ncclResult_t, ncclMemAlloc, (void **ptr, size_t size));
CHORUS_DECL(ncclResult_t, ncclMemFree, (void *ptr));
CHORUS_DECL(ncclResult_t, ncclGetVersion, (int *version));
CHORUS_DECL(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId));
CHORUS_DECL(ncclResult_t, ncclCommInitRankConfig,
            (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config));
CHORUS_DECL(ncclResult_t, ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank));
CHORUS_DECL(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int *devlist));
CHORUS_DECL(ncclResult_t, ncclCommInitRankScalable,
            (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds, ncclConfig_t *config));
CHORUS_DECL(ncclResult_t, ncclCommFinalize, (ncclComm_t comm));
CHORUS_DECL(ncclResult_t, ncclCommDestroy, (ncclComm_t comm));
CHORUS_DECL(ncclResult_t, ncclCommAbort, (ncclComm_t comm));
CHORUS_DECL(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags));
CHORUS_DECL(ncclResult_t, ncclCommSuspend, (ncclComm_t comm, int flags));
CHORUS_DECL(ncclResult_t, ncclCommResume, (ncclComm_t comm));
CHORUS_DECL(ncclResult_t, ncclCommMemStats, (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value));
CHORUS_DECL(ncclResult_t, ncclCommSplit,
            (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config));
CHORUS_DECL(ncclResult_t, ncclCommShrink,
            (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
             ncclConfig_t *config, int shrinkFlags));
CHORUS_DECL(ncclResult_t, ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId * uniqueId));
CHORUS_DECL(ncclResult_t, ncclCommGrow,
            (ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm,
             ncclConfig_t *config));
CHORUS_DECL(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void *buff, size_t size, void **handle));
CHORUS_DECL(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void *handle));
/* Windows: registered by every rank in the same order (the k-th is the same
 * window on every rank); the one-sided calls below write into them. */
CHORUS_DECL(ncclResult_t, ncclCommWindowRegister,
            (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags));
CHORUS_DECL(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));
CHORUS_DECL(ncclResult_t, ncclWinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void **outUserPtr));
CHORUS_DECL(const char *, ncclGetErrorString, (ncclResult_t result));
CHORUS_DECL(const char *, ncclGetLastError, (ncclComm_t comm));
/* Deprecated in NCCL: logging restarts from NCCL_DEBUG* as they are now. */
CHORUS_DECL(void, ncclResetDebugInit, (void));
CHORUS_DECL(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError));
CHORUS_DECL(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int *count));
CHORUS_DECL(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device));
CHORUS_DECL(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int *rank));

/* NCCL 2.30's parameter API: every NCCL_* and CHORUS_* variable chorus reads. */
typedef struct ncclParamHandle *ncclParamHandle_t;
CHORUS_DECL(ncclResult_t, ncclParamBind, (ncclParamHandle_t * out, const char *key));
CHORUS_DECL(ncclResult_t, ncclParamGetI8, (ncclParamHandle_t h, int8_t *out));
CHORUS_DECL(ncclResult_t, ncclParamGetI16, (ncclParamHandle_t h, int16_t *out));
CHORUS_DECL(ncclResult_t, ncclParamGetI32, (ncclParamHandle_t h, int32_t *out));
CHORUS_DECL(ncclResult_t, ncclParamGetI64, (ncclParamHandle_t h, int64_t *out));
CHORUS_DECL(ncclResult_t, ncclParamGetU8, (ncclParamHandle_t h, uint8_t *out));
CHORUS_DECL(ncclResult_t, ncclParamGetU16, (ncclParamHandle_t h, uint16_t *out));
CHORUS_DECL(ncclResult_t, ncclParamGetU32, (ncclParamHandle_t h, uint32_t *out));
CHORUS_DECL(ncclResult_t, ncclParamGetU64, (ncclParamHandle_t h, uint64_t *out));
CHORUS_DECL(ncclResult_t, ncclParamGetStr, (ncclParamHandle_t h, const char **out));
CHORUS_DECL(ncclResult_t, ncclParamGet, (ncclParamHandle_t h, void *out, int maxLen, int *len));
CHORUS_DECL(ncclResult_t, ncclParamGetParameter, (const char *key, const char **value, int *valueLen));
CHORUS_DECL(ncclResult_t, ncclParamGetAllParameterKeys, (const char ***table, int *tableLen));
CHORUS_DECL(void, ncclParamDumpAll, (void));

CHORUS_DECL(ncclResult_t, ncclRedOpCreatePreMulSum,
            (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
             ncclComm_t comm));
CHORUS_DECL(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm));

CHORUS_DECL(ncclResult_t, ncclReduce,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             int root, ncclComm_t comm, cudaStream_t stream));
CHORUS_DECL(ncclResult_t, ncclBcast,
            (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
             cudaStream_t stream));
CHORUS_DECL(ncclResult_t, ncclBroadcast,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
             ncclComm_t comm, cudaStream_t stream));
CHORUS_DECL(ncclResult_t, ncclAllReduce,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
             ncclComm_t comm, cudaStream_t stream));
CHORUS_DECL(ncclResult_t, ncclReduceScatter,
            (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream));
CHORUS_DECL(ncclResult_t, ncclAllGather,
            (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
             ncclComm_t comm, cudaStream_t stream));
/* Block p of sendbuff goes to rank p; block p of recvbuff comes from rank p. */
CHORUS_DECL(ncclResult_t, ncclAlltoAll,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
             cudaStream_t stream));
/* In place on the root: sendbuff == recvbuff + root * count. */
CHORUS_DECL(ncclResult_t, ncclGather,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
             ncclComm_t comm, cudaStream_t stream));
/* In place on the root: recvbuff == sendbuff + root * count. */
CHORUS_DECL(ncclResult_t, ncclScatter,
            (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
             ncclComm_t comm, cudaStream_t stream));
CHORUS_DECL(ncclResult_t, ncclSend,
            (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
             cudaStream_t stream));
CHORUS_DECL(ncclResult_t, ncclRecv,
            (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
             cudaStream_t stream));

/* One-sided (NCCL 2.29): a write into peer's window (registered by every
 * rank, in the same order), then a signal there; sigIdx, ctx and flags 0. */
CHORUS_DECL(ncclResult_t, ncclPutSignal,
            (const void *localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin,
             size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream));
CHORUS_DECL(ncclResult_t, ncclSignal,
            (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream));
/* How many signals to wait for from peer (on sigIdx and ctx). */
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;
CHORUS_DECL(ncclResult_t, ncclWaitSignal,
            (int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm, cudaStream_t stream));

CHORUS_DECL(ncclResult_t, ncclGroupStart, (void));
CHORUS_DECL(ncclResult_t, ncclGroupEnd, (void));
CHORUS_DECL(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo));

#ifdef __cplusplus
}
#endif
#endif /* NCCL_H_ */
