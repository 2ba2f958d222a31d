/* One process, one thread, several devices: ncclCommInitAll makes a
 * communicator per device, and one group launches an AllReduce on each
 * (NCCL's documentation, "Example 1: Single Process, Single Thread,
 * Multiple Devices"). */
#include "cuda_runtime.h"
#include "nccl.h"
#include "checks.h"

int main(int argc, char *argv[]) {
  ncclComm_t comms[4];
  int nDev = 4;
  int size = 1024 * 1024 + 3; /* floats: 4 MiB, not a multiple of anything */
  int devs[4] = {0, 1, 2, 3};
  (void)argc;
  (void)argv;

  float **sendbuff = (float **)malloc(nDev * sizeof(float *));
  float **recvbuff = (float **)malloc(nDev * sizeof(float *));
  cudaStream_t *s = (cudaStream_t *)malloc(sizeof(cudaStream_t) * nDev);
  float *host = (float *)malloc(size * sizeof(float));

  /* Buffers and a stream on each device; device i sends i+1 everywhere. */
  for (int i = 0; i < nDev; ++i) {
    CUDACHECK(cudaSetDevice(i));
    CUDACHECK(cudaMalloc((void **)sendbuff + i, size * sizeof(float)));
    CUDACHECK(cudaMalloc((void **)recvbuff + i, size * sizeof(float)));
    for (int j = 0; j < size; j++) host[j] = (float)(i + 1) + (float)(j % 7);
    CUDACHECK(cudaMemcpy(sendbuff[i], host, size * sizeof(float), cudaMemcpyHostToDevice));
    CUDACHECK(cudaMemset(recvbuff[i], 0, size * sizeof(float)));
    CUDACHECK(cudaStreamCreate(s + i));
  }

  NCCLCHECK(ncclCommInitAll(comms, nDev, devs));

  /* A group: the calls of all devices become one launch, so a single thread
   * driving several devices does not wait on itself. */
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < nDev; ++i)
    NCCLCHECK(ncclAllReduce((const void *)sendbuff[i], (void *)recvbuff[i], size, ncclFloat, ncclSum, comms[i], s[i]));
  NCCLCHECK(ncclGroupEnd());

  for (int i = 0; i < nDev; ++i) {
    CUDACHECK(cudaSetDevice(i));
    CUDACHECK(cudaStreamSynchronize(s[i]));
  }

  for (int i = 0; i < nDev; ++i) {
    CUDACHECK(cudaMemcpy(host, recvbuff[i], size * sizeof(float), cudaMemcpyDeviceToHost));
    for (int j = 0; j < size; j++) EXPECT_VALUE(host[j], 10.0f + 4.0f * (float)(j % 7), "recvbuff", j);
  }

  for (int i = 0; i < nDev; ++i) {
    CUDACHECK(cudaSetDevice(i));
    CUDACHECK(cudaFree(sendbuff[i]));
    CUDACHECK(cudaFree(recvbuff[i]));
    CUDACHECK(cudaStreamDestroy(s[i]));
  }
  for (int i = 0; i < nDev; ++i) ncclCommDestroy(comms[i]);
  free(sendbuff);
  free(recvbuff);
  free(s);
  free(host);

  printf("Success \n");
  return 0;
}
