/* chorus-only extensions to the NCCL API. */
#ifndef CHORUS_H_
#define CHORUS_H_

#include "nccl.h"

#define CHORUS_MAJOR 0
#define CHORUS_MINOR 1
#define CHORUS_PATCH 0
#define CHORUS_VERSION_CODE (CHORUS_MAJOR * 10000 + CHORUS_MINOR * 100 + CHORUS_PATCH)

#if defined(__GNUC__)
#define CHORUS_EXPORT __attribute__((visibility("default")))
#else
#define CHORUS_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* chorus's own version (CHORUS_VERSION_CODE), as opposed to the NCCL API level. */
CHORUS_EXPORT ncclResult_t chorusGetVersion(int *version);

/* Asynchronous streams: operations issued on such a stream return at once and
 * run in issue order on a background thread, so communication overlaps
 * computation. A NULL stream means "return when complete". */
CHORUS_EXPORT ncclResult_t chorusStreamCreate(cudaStream_t *stream);
/* flags: 0 as chorusStreamCreate (a stream independent of the NULL stream,
 * as CUDA's cudaStreamNonBlocking), or CHORUS_STREAM_BLOCKING: work issued
 * on the NULL stream (or cudaStreamLegacy) first waits for everything issued
 * before it on such streams of its device, as CUDA's legacy default stream
 * waits for streams made by cudaStreamCreate. So a program written for CUDA
 * that copies a result out on the default stream right after an NCCL call
 * on its own stream reads the finished result (the host-CUDA shim's
 * cudaStreamCreate makes these). A stream belongs to the device that was
 * the creating thread's (chorusSetDevice); an NCCL call's device is its
 * communicator's, a host call's (copies, synchronize) the calling thread's. */
#define CHORUS_STREAM_BLOCKING 0x1u
CHORUS_EXPORT ncclResult_t chorusStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
/* Waits until everything issued on the stream has completed; returns the
 * first error any of it met (and clears it). On the NULL stream: waits for
 * the calling thread's device's CHORUS_STREAM_BLOCKING streams, and returns
 * the first error one of them holds (which stays with it until that stream
 * is synchronized). */
CHORUS_EXPORT ncclResult_t chorusStreamSynchronize(cudaStream_t stream);
/* ncclSuccess when the stream is idle, ncclInProgress while work is pending,
 * or the error the stream's work met. On the NULL stream: ncclInProgress
 * while a CHORUS_STREAM_BLOCKING stream of the thread's device has work
 * pending. */
CHORUS_EXPORT ncclResult_t chorusStreamQuery(cudaStream_t stream);
/* Waits for every stream of the calling thread's device (as
 * cudaDeviceSynchronize); returns the first error one of them holds, which
 * stays with it until that stream is synchronized. */
CHORUS_EXPORT ncclResult_t chorusDeviceSynchronize(void);
/* Synchronizes, then frees the stream. */
CHORUS_EXPORT ncclResult_t chorusStreamDestroy(cudaStream_t stream);

/* Host functions (as cudaLaunchHostFunc): fn(userData, status) runs once
 * everything issued on the stream before it has finished, in stream order,
 * on whichever thread runs the stream's work (its background thread, or a
 * caller synchronizing it). status is ncclSuccess, or the first error that
 * work met since the last chorusStreamSynchronize (work behind a failure
 * fails at once with that error). fn must return without waiting for the
 * same stream (chorusStreamSynchronize and chorusEventSynchronize refuse
 * it: ncclInvalidUsage). On the NULL stream fn runs before this returns
 * (after the CHORUS_STREAM_BLOCKING streams' earlier work). */
typedef void (*chorusHostFn_t)(void *userData, ncclResult_t status);
CHORUS_EXPORT ncclResult_t chorusLaunchHostFunc(cudaStream_t stream, chorusHostFn_t fn, void *userData);

/* Events (as CUDA's): a point in a stream's order. Record marks the point
 * after everything issued on the stream so far (recording again moves it);
 * Query returns ncclSuccess once the stream has passed it, ncclInProgress
 * before; Synchronize returns once it has, running the stream's queued work
 * on the calling thread up to that point, so waiting for one operation costs
 * no thread switch. Errors come from the operations' own results, host
 * functions or chorusStreamSynchronize. An event may outlive its stream. */
typedef struct chorusEvent_st *chorusEvent_t;
CHORUS_EXPORT ncclResult_t chorusEventCreate(chorusEvent_t *event);
CHORUS_EXPORT ncclResult_t chorusEventRecord(chorusEvent_t event, cudaStream_t stream);
CHORUS_EXPORT ncclResult_t chorusEventQuery(chorusEvent_t event);
CHORUS_EXPORT ncclResult_t chorusEventSynchronize(chorusEvent_t event);
CHORUS_EXPORT ncclResult_t chorusEventDestroy(chorusEvent_t event);

/* ncclSend / ncclRecv with a tag (as MPI's and torch.distributed's).
 * Messages between two ranks still match in the order they were issued: a
 * tag never reorders them. With CHORUS_CHECK=1 a receive whose tag differs
 * from that of the send it meets fails on both ranks with ncclInvalidUsage,
 * naming both calls (tags compare modulo 65536). ncclSend and ncclRecv are
 * tag 0. */
CHORUS_EXPORT ncclResult_t chorusSendTag(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                         int tag, ncclComm_t comm, cudaStream_t stream);
CHORUS_EXPORT ncclResult_t chorusRecvTag(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, int tag,
                                         ncclComm_t comm, cudaStream_t stream);

/* Bitwise reductions (gloo's and torch.distributed's BAND, BOR and BXOR,
 * which NCCL lacks), for the integer types (ncclInt8 to ncclUint64;
 * ncclInvalidArgument for the float ones): the operator is comm's, like
 * ncclRedOpCreatePreMulSum's, is passed wherever an ncclRedOp_t goes
 * (AllReduce, Reduce, ReduceScatter) with the datatype it was made for,
 * and is freed with ncclRedOpDestroy. Ranks must reduce with the same
 * kind: with CHORUS_CHECK=1 ranks that do not fail with ncclInvalidUsage. */
typedef enum { chorusBand = 0, chorusBor = 1, chorusBxor = 2 } chorusBitwiseOp_t;
CHORUS_EXPORT ncclResult_t chorusRedOpCreateBitwise(ncclRedOp_t *op, chorusBitwiseOp_t kind, ncclDataType_t datatype,
                                                    ncclComm_t comm);

/* The calling thread's device, as CUDA's current device is: a number, 0
 * until set. ncclCommInitRank and ncclCommInitRankConfig give the
 * communicator the caller's (its cudaDev: ncclCommCuDevice, the logs), as
 * NCCL takes cudaGetDevice's; the host-CUDA shim's cudaSetDevice sets it.
 * device must be >= 0. */
CHORUS_EXPORT ncclResult_t chorusSetDevice(int device);
CHORUS_EXPORT ncclResult_t chorusGetDevice(int *device);

/* How long a call on comm may go without progress before it returns
 * ncclTimeout (and asks every rank what it is doing, see README "When
 * things go wrong"), in milliseconds, instead of CHORUS_TIMEOUT; 0 goes back
 * to CHORUS_TIMEOUT. Takes effect for calls issued afterwards; may be
 * called while a nonblocking init is still in progress. */
CHORUS_EXPORT ncclResult_t chorusCommSetTimeout(ncclComm_t comm, int64_t timeoutMs);

/* Whether comm's launches on different streams run in the order they were
 * issued (ordered 1, the default, as NCCL's do: a call on another stream
 * than the last one's waits for it) or each stream's only among
 * themselves (0). Unordered, the caller keeps calls that may run at once
 * apart: sends on one stream and receives on another, say, as the torch
 * backend's point-to-point communicator does, so that a receive issued
 * before a send does not hold the send back. */
CHORUS_EXPORT ncclResult_t chorusCommSetStreamOrder(ncclComm_t comm, int ordered);

/* Creates this process's rank of a communicator from a launcher's
 * environment: rank and size from CHORUS_RANK/CHORUS_NRANKS (chorusrun),
 * RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/SIZE (Open MPI),
 * PMI_RANK/PMI_SIZE (MPICH) or SLURM_PROCID/SLURM_NTASKS (Slurm); the
 * rendezvous at NCCL_COMM_ID or MASTER_ADDR:MASTER_PORT, hosted by rank 0. */
CHORUS_EXPORT ncclResult_t chorusCommInitFromEnv(ncclComm_t *comm);
/* The rank and size chorusCommInitFromEnv would use (ncclInvalidUsage when
 * no launcher set them, without a WARN: a program may ask to learn whether
 * it runs alone; a rank not below the size is a WARN). */
CHORUS_EXPORT ncclResult_t chorusEnvRank(int *rank, int *nranks);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_H_ */
