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
/* Waits until everything issued on the stream has completed; returns the
 * first error any of it met (and clears it). */
CHORUS_EXPORT ncclResult_t chorusStreamSynchronize(cudaStream_t stream);
/* ncclSuccess when the stream is idle, ncclInProgress while work is pending,
 * or the error the stream's work met. */
CHORUS_EXPORT ncclResult_t chorusStreamQuery(cudaStream_t stream);
/* Synchronizes, then frees the stream. */
CHORUS_EXPORT ncclResult_t chorusStreamDestroy(cudaStream_t stream);

/* Creates this process's rank of a communicator from a launcher's
 * environment: rank and size from CHORUS_RANK/CHORUS_NRANKS (chorusrun),
 * RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/SIZE (Open MPI),
 * PMI_RANK/PMI_SIZE (MPICH) or SLURM_PROCID/SLURM_NTASKS (Slurm); the
 * rendezvous at NCCL_COMM_ID or MASTER_ADDR:MASTER_PORT, hosted by rank 0. */
CHORUS_EXPORT ncclResult_t chorusCommInitFromEnv(ncclComm_t *comm);
/* The rank and size chorusCommInitFromEnv would use (ncclInvalidUsage when
 * no launcher set them). */
CHORUS_EXPORT ncclResult_t chorusEnvRank(int *rank, int *nranks);

#ifdef __cplusplus
}
#endif
#endif /* CHORUS_H_ */
