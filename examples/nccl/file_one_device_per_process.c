/* One device per process without MPI: rank 0 writes the unique id to a
 * file the others read (any way of handing the id over works), then every
 * rank runs AllGather, Broadcast and ReduceScatter on its own stream.
 * Run as N processes: file_one_device_per_process RANK NRANKS IDFILE. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_runtime.h"
#include "nccl.h"
#include "checks.h"

static void writeId(const char *path, const ncclUniqueId *id) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (f == NULL || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
    printf("Failed: cannot write the unique id to %s\n", path);
    exit(EXIT_FAILURE);
  }
}

/* Waits up to a minute for rank 0's file. */
static void readId(const char *path, ncclUniqueId *id) {
  for (int tries = 0; tries < 60000; tries++) {
    FILE *f = fopen(path, "rb");
    if (f != NULL) {
      size_t n = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (n == 1) return;
    }
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  printf("Failed: no unique id in %s after 60 s\n", path);
  exit(EXIT_FAILURE);
}

int main(int argc, char *argv[]) {
  if (argc != 4) {
    printf("usage: %s RANK NRANKS IDFILE\n", argv[0]);
    return EXIT_FAILURE;
  }
  int rank = atoi(argv[1]), nranks = atoi(argv[2]);
  size_t count = 100003; /* per rank */
  int nDevices;
  CUDACHECK(cudaGetDeviceCount(&nDevices));
  CUDACHECK(cudaSetDevice(rank % nDevices));

  ncclUniqueId id;
  if (rank == 0) {
    NCCLCHECK(ncclGetUniqueId(&id));
    writeId(argv[3], &id);
  } else {
    readId(argv[3], &id);
  }

  float *send, *gathered, *reduced;
  cudaStream_t stream;
  CUDACHECK(cudaMalloc((void **)&send, count * nranks * sizeof(float)));
  CUDACHECK(cudaMalloc((void **)&gathered, count * nranks * sizeof(float)));
  CUDACHECK(cudaMalloc((void **)&reduced, count * sizeof(float)));
  CUDACHECK(cudaStreamCreate(&stream));
  float *host = (float *)malloc(count * nranks * sizeof(float));
  for (size_t j = 0; j < count * nranks; j++) host[j] = (float)(rank * 1000 + (int)(j % 997));
  CUDACHECK(cudaMemcpy(send, host, count * nranks * sizeof(float), cudaMemcpyHostToDevice));

  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, nranks, id, rank));

  /* Everyone's first count values, in rank order. */
  NCCLCHECK(ncclAllGather(send, gathered, count, ncclFloat, comm, stream));
  /* Then rank 0's first count values replace everyone's, in place. */
  NCCLCHECK(ncclBroadcast(send, send, count, ncclFloat, 0, comm, stream));
  /* Block r of the sum over ranks of send (after the broadcast). */
  NCCLCHECK(ncclReduceScatter(send, reduced, count, ncclFloat, ncclSum, comm, stream));
  CUDACHECK(cudaStreamSynchronize(stream));

  float *out = (float *)malloc(count * nranks * sizeof(float));
  CUDACHECK(cudaMemcpy(out, gathered, count * nranks * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < nranks; r++)
    for (size_t j = 0; j < count; j++)
      EXPECT_VALUE(out[r * count + j], (float)(r * 1000 + (int)(j % 997)), "gathered", r * count + j);
  CUDACHECK(cudaMemcpy(out, reduced, count * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t j = 0; j < count; j++) {
    size_t k = rank * count + j; /* the element of send this rank's block sums */
    /* Rank 0's block 0 came from the broadcast on every rank; other blocks
     * are each rank's own values. */
    float want = rank == 0 ? (float)nranks * (float)(int)(j % 997)
                           : (float)(nranks * (nranks - 1) / 2 * 1000) + (float)nranks * (float)(int)(k % 997);
    EXPECT_VALUE(out[j], want, "reduced", j);
  }

  NCCLCHECK(ncclCommDestroy(comm));
  CUDACHECK(cudaStreamDestroy(stream));
  CUDACHECK(cudaFree(send));
  CUDACHECK(cudaFree(gathered));
  CUDACHECK(cudaFree(reduced));
  free(host);
  free(out);
  printf("[Rank %d] Success \n", rank);
  return 0;
}
