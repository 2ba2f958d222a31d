/* One device per process, MPI as the launcher: rank 0 makes the unique id,
 * MPI broadcasts it, each process picks its device from its rank on the
 * host (NCCL's documentation, "Example 2: One Device per Process or
 * Thread"). Run with mpirun -np N. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "cuda_runtime.h"
#include "mpi.h"
#include "nccl.h"
#include "checks.h"

#define MPICHECK(cmd)                                                                      \
  do {                                                                                     \
    int e_ = (cmd);                                                                        \
    if (e_ != MPI_SUCCESS) {                                                               \
      printf("Failed: MPI error %s:%d '%d'\n", __FILE__, __LINE__, e_);                    \
      exit(EXIT_FAILURE);                                                                  \
    }                                                                                      \
  } while (0)

/* A number per host name (DJB2), so ranks can count who shares their host. */
static uint64_t getHostHash(const char *string) {
  uint64_t result = 5381;
  for (int c = 0; string[c] != '\0'; c++) result = ((result << 5) + result) + (uint64_t)string[c];
  return result;
}

static void getHostName(char *hostname, int maxlen) {
  gethostname(hostname, maxlen);
  hostname[maxlen - 1] = '\0';
  for (int i = 0; i < maxlen; i++)
    if (hostname[i] == '.') {
      hostname[i] = '\0';
      return;
    }
}

int main(int argc, char *argv[]) {
  int size = 1024 * 1024 + 5;
  int myRank, nRanks, localRank = 0;

  MPICHECK(MPI_Init(&argc, &argv));
  MPICHECK(MPI_Comm_rank(MPI_COMM_WORLD, &myRank));
  MPICHECK(MPI_Comm_size(MPI_COMM_WORLD, &nRanks));

  /* The local rank: how many lower ranks share this host. */
  uint64_t hostHashs[nRanks];
  char hostname[1024];
  getHostName(hostname, 1024);
  hostHashs[myRank] = getHostHash(hostname);
  MPICHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hostHashs, sizeof(uint64_t), MPI_BYTE, MPI_COMM_WORLD));
  for (int p = 0; p < nRanks; p++) {
    if (p == myRank) break;
    if (hostHashs[p] == hostHashs[myRank]) localRank++;
  }

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
