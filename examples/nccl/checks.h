/* Error checks as NCCL's documentation writes them: a failed call prints
 * where and why and ends the program. Shared by the examples here, which
 * are ordinary NCCL programs (cuda_runtime.h, nccl.h, MPI where they say
 * so); they compile against a real CUDA toolkit and NCCL as they are, and
 * run on chorus through its host-CUDA shim (README "Porting an NCCL
 * program"). */
#ifndef EXAMPLES_NCCL_CHECKS_H
#define EXAMPLES_NCCL_CHECKS_H
#include <stdio.h>
#include <stdlib.h>

#define CUDACHECK(cmd)                                                                                    \
  do {                                                                                                    \
    cudaError_t err_ = (cmd);                                                                             \
    if (err_ != cudaSuccess) {                                                                            \
      printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, cudaGetErrorString(err_));            \
      exit(EXIT_FAILURE);                                                                                 \
    }                                                                                                     \
  } while (0)

#define NCCLCHECK(cmd)                                                                                    \
  do {                                                                                                    \
    ncclResult_t res_ = (cmd);                                                                            \
    if (res_ != ncclSuccess) {                                                                            \
      printf("Failed, NCCL error %s:%d '%s'\n", __FILE__, __LINE__, ncclGetErrorString(res_));            \
      exit(EXIT_FAILURE);                                                                                 \
    }                                                                                                     \
  } while (0)

/* A result that is not what the collective should give ends the program. */
#define EXPECT_VALUE(got, want, what, index)                                                              \
  do {                                                                                                    \
    if ((got) != (want)) {                                                                                \
      printf("Failed: %s[%d] is %g, expected %g\n", (what), (int)(index), (double)(got), (double)(want)); \
      exit(EXIT_FAILURE);                                                                                 \
    }                                                                                                     \
  } while (0)
#endif
