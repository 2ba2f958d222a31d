/* One device per process, MPI as the launcher: rank 0 makes the unique id,
 * MPI broadcasts it, each process picks its device from its rank on the
 * host (NCCL's documentation, "Example 2: One Device per Process or
 * Thread"). Run with mpirun -np N. */
#include "cuda_runtime.h"
#include "nccl.h"
#include "checks.h"
#include "mpi_local_rank.h"

int main(int argc, char *argv[]) {
  int size = 1024 * 1024 + 5;
  int myRank, nRanks, localRank = 0;

  MPICHECK(MPI_Init(&argc, &argv));
  MPICHECK(MPI_Comm_rank(MPI_COMM_WORLD, &myRank));
  MPICHECK(MPI_Comm_size(MPI_COMM_WORLD, &nRanks));

  /* The local rank: how many lower ranks share this host. */
  localRank = localRankOf(myRank, nRanks);

  ncclUniqueId id;
  ncclComm_t comm;
  float *sendbuff, *recvbuff;
  cudaStream_t s;

  if (myRank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPICHECK(MPI_Bcast((void *)&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));

  CUDACHECK(cudaSetDevice(localRank));
  CUDACHECK(cudaMalloc((void **)&sendbuff, size * sizeof(float)));
  CUDACHECK(cudaMalloc((void **)&recvbuff, size * sizeof(float)));
  CUDACHECK(cudaStreamCreate(&s));
  float *host = (float *)malloc(size * sizeof(float));
  for (int j = 0; j < size; j++) host[j] = (float)(myRank + 1) * (float)(1 + j % 5);
  CUDACHECK(cudaMemcpyAsync(sendbuff, host, size * sizeof(float), cudaMemcpyHostToDevice, s));
  CUDACHECK(cudaMemsetAsync(recvbuff, 0, size * sizeof(float), s));

  NCCLCHECK(ncclCommInitRank(&comm, nRanks, id, myRank));
  NCCLCHECK(ncclAllReduce((const void *)sendbuff, (void *)recvbuff, size, ncclFloat, ncclSum, comm, s));

  /* The copy back is on the default stream, which waits for s. */
  CUDACHECK(cudaMemcpy(host, recvbuff, size * sizeof(float), cudaMemcpyDeviceToHost));
  float ranksSum = (float)nRanks * (float)(nRanks + 1) / 2;
  for (int j = 0; j < size; j++) EXPECT_VALUE(host[j], ranksSum * (float)(1 + j % 5), "recvbuff", j);
  CUDACHECK(cudaStreamSynchronize(s));

  CUDACHECK(cudaFree(sendbuff));
  CUDACHECK(cudaFree(recvbuff));
  CUDACHECK(cudaStreamDestroy(s));
  free(host);
  ncclCommDestroy(comm);
  MPICHECK(MPI_Finalize());

  printf("[MPI Rank %d] Success \n", myRank);
  return 0;
}
