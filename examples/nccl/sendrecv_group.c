/* Point-to-point inside groups, one thread driving every rank (NCCL's
 * documentation, "Point-to-point communication": sendrecv, one-to-all,
 * all-to-all, neighbor exchange): a ring exchange, a scatter from rank 0
 * and an all-to-all, each a group of ncclSend/ncclRecv on three devices. */
#include "cuda_runtime.h"
#include "nccl.h"
#include "checks.h"

#define NDEV 3
#define COUNT 4099 /* ints per message */

static int value(int from, int to, int j) { return from * 1000000 + to * 10000 + j; }

int main(void) {
  ncclComm_t comms[NDEV];
  cudaStream_t streams[NDEV];
  int *send[NDEV], *recv[NDEV];
  int *host = (int *)malloc(sizeof(int) * COUNT * NDEV);

  NCCLCHECK(ncclCommInitAll(comms, NDEV, NULL));
  for (int r = 0; r < NDEV; r++) {
    CUDACHECK(cudaSetDevice(r));
    CUDACHECK(cudaStreamCreate(&streams[r]));
    CUDACHECK(cudaMalloc((void **)&send[r], sizeof(int) * COUNT * NDEV));
    CUDACHECK(cudaMalloc((void **)&recv[r], sizeof(int) * COUNT * NDEV));
    for (int p = 0; p < NDEV; p++)
      for (int j = 0; j < COUNT; j++) host[p * COUNT + j] = value(r, p, j);
    CUDACHECK(cudaMemcpy(send[r], host, sizeof(int) * COUNT * NDEV, cudaMemcpyHostToDevice));
  }

  /* Ring: each rank sends its block for the next rank and receives from
   * the previous one. */
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < NDEV; r++) {
    int next = (r + 1) % NDEV, prev = (r + NDEV - 1) % NDEV;
    NCCLCHECK(ncclSend(send[r] + next * COUNT, COUNT, ncclInt, next, comms[r], streams[r]));
    NCCLCHECK(ncclRecv(recv[r], COUNT, ncclInt, prev, comms[r], streams[r]));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < NDEV; r++) {
    CUDACHECK(cudaStreamSynchronize(streams[r]));
    CUDACHECK(cudaMemcpy(host, recv[r], sizeof(int) * COUNT, cudaMemcpyDeviceToHost));
    int prev = (r + NDEV - 1) % NDEV;
    for (int j = 0; j < COUNT; j++) EXPECT_VALUE(host[j], value(prev, r, j), "ring", j);
  }

  /* One-to-all: rank 0 sends block p to rank p (itself included). */
  NCCLCHECK(ncclGroupStart());
  for (int p = 0; p < NDEV; p++) NCCLCHECK(ncclSend(send[0] + p * COUNT, COUNT, ncclInt, p, comms[0], streams[0]));
  for (int r = 0; r < NDEV; r++) NCCLCHECK(ncclRecv(recv[r], COUNT, ncclInt, 0, comms[r], streams[r]));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < NDEV; r++) {
    CUDACHECK(cudaStreamSynchronize(streams[r]));
    CUDACHECK(cudaMemcpy(host, recv[r], sizeof(int) * COUNT, cudaMemcpyDeviceToHost));
    for (int j = 0; j < COUNT; j++) EXPECT_VALUE(host[j], value(0, r, j), "scatter", j);
  }

  /* All-to-all: every rank sends block p to rank p and receives block r
   * from everyone into slot p. */
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < NDEV; r++)
    for (int p = 0; p < NDEV; p++) {
      NCCLCHECK(ncclSend(send[r] + p * COUNT, COUNT, ncclInt, p, comms[r], streams[r]));
      NCCLCHECK(ncclRecv(recv[r] + p * COUNT, COUNT, ncclInt, p, comms[r], streams[r]));
    }
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < NDEV; r++) {
    CUDACHECK(cudaStreamSynchronize(streams[r]));
    CUDACHECK(cudaMemcpy(host, recv[r], sizeof(int) * COUNT * NDEV, cudaMemcpyDeviceToHost));
    for (int p = 0; p < NDEV; p++)
      for (int j = 0; j < COUNT; j++) EXPECT_VALUE(host[p * COUNT + j], value(p, r, j), "alltoall", p * COUNT + j);
  }

  for (int r = 0; r < NDEV; r++) {
    CUDACHECK(cudaFree(send[r]));
    CUDACHECK(cudaFree(recv[r]));
    CUDACHECK(cudaStreamDestroy(streams[r]));
    NCCLCHECK(ncclCommDestroy(comms[r]));
  }
  free(host);
  printf("Success \n");
  return 0;
}
