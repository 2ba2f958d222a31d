/* Several devices per process, MPI between processes: each process makes a
 * communicator rank for each of its devices inside one group, and launches
 * their AllReduces in one group (NCCL's documentation, "Example 3: Multiple
 * Devices per Thread"). Run with mpirun -np N; each process drives 2. */
#include "cuda_runtime.h"
#include "nccl.h"
#include "checks.h"
#include "mpi_local_rank.h"

int main(int argc, char *argv[]) {
  int size = 256 * 1024 + 1;
  int myRank, nRanks, localRank = 0;
  int nDev = 2;

  MPICHECK(MPI_Init(&argc, &argv));
  MPICHECK(MPI_Comm_rank(MPI_COMM_WORLD, &myRank));
  MPICHECK(MPI_Comm_size(MPI_COMM_WORLD, &nRanks));

  localRank = localRankOf(myRank, nRanks);

  float **sendbuff = (float **)malloc(nDev * sizeof(float *));
  float **recvbuff = (float **)malloc(nDev * sizeof(float *));
  cudaStream_t *s = (cudaStream_t *)malloc(sizeof(cudaStream_t) * nDev);
  float *host = (float *)malloc(size * sizeof(float));

  for (int i = 0; i < nDev; ++i) {
    CUDACHECK(cudaSetDevice(localRank * nDev + i));
    CUDACHECK(cudaMalloc((void **)sendbuff + i, size * sizeof(float)));
    CUDACHECK(cudaMalloc((void **)recvbuff + i, size * sizeof(float)));
    for (int j = 0; j < size; j++) host[j] = (float)(myRank * nDev + i) - (float)(j % 3);
    CUDACHECK(cudaMemcpy(sendbuff[i], host, size * sizeof(float), cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemset(recvbuff[i], 0, size * sizeof(float)));
    CUDACHECK(cudaStreamCreate(s + i));
  }

  ncclUniqueId id;
  ncclComm_t comms[nDev];
  if (myRank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPICHECK(MPI_Bcast((void *)&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));

  /* One communicator rank per device; a group, since this thread is every
   * one of them. */
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < nDev; i++) {
    CUDACHECK(cudaSetDevice(localRank * nDev + i));
    NCCLCHECK(ncclCommInitRank(comms + i, nRanks * nDev, id, myRank * nDev + i));
  }
  NCCLCHECK(ncclGroupEnd());

  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < nDev; i++)
    NCCLCHECK(ncclAllReduce((const void *)sendbuff[i], (void *)recvbuff[i], size, ncclFloat, ncclSum, comms[i], s[i]));
  NCCLCHECK(ncclGroupEnd());

  for (int i = 0; i < nDev; i++) CUDACHECK(cudaStreamSynchronize(s[i]));

  int total = nRanks * nDev;
  for (int i = 0; i < nDev; i++) {
    CUDACHECK(cudaMemcpy(host, recvbuff[i], size * sizeof(float), cudaMemcpyDeviceToHost));
    for (int j = 0; j < size; j++)
      EXPECT_VALUE(host[j], (float)(total * (total - 1) / 2) - (float)(total * (j % 3)), "recvbuff", j);
  }

  for (int i = 0; i < nDev; i++) {
    CUDACHECK(cudaFree(sendbuff[i]));
    CUDACHECK(cudaFree(recvbuff[i]));
    CUDACHECK(cudaStreamDestroy(s[i]));
  }
  for (int i = 0; i < nDev; i++) ncclCommDestroy(comms[i]);
  free(sendbuff);
  free(recvbuff);
  free(s);
  free(host);
  MPICHECK(MPI_Finalize());

  printf("[MPI Rank %d] Success \n", myRank);
  return 0;
}
