/* A program written for NCCL, compiled against the CUDA toolkit's own
 * nccl.h and cuda_runtime.h (never chorus's headers) and linked with
 * libchorus: the calls, constants, struct layouts (ncclConfig_t of an older
 * NCCL, smaller than chorus's) and CUDA's special stream handles
 * (cudaStreamPerThread, cudaStreamLegacy) must work as they would with
 * NCCL. Host buffers stand in for device memory. Built only where a CUDA
 * toolkit with nccl.h is installed (tests/CMakeLists.txt). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h" /* its macros only (EXPECT, NCCLCHECK); its nccl.h is the toolkit's here */

#define NR 3
#define COUNT 1001

static int abiChecks(void) {
  int version = 0;
  NCCLCHECK(ncclGetVersion(&version));
  EXPECT(version >= 21900, "ncclGetVersion gave %d", version);

  ncclComm_t comms[NR];
  NCCLCHECK(ncclCommInitAll(comms, NR, NULL));
  int nranks = 0, rank = -1;
  NCCLCHECK(ncclCommCount(comms[1], &nranks));
  NCCLCHECK(ncclCommUserRank(comms[1], &rank));
  EXPECT(nranks == NR && rank == 1, "count %d rank %d", nranks, rank);

  /* AllReduce on CUDA's special stream handles and NULL, one thread driving all ranks. */
  cudaStream_t streams[NR] = {cudaStreamPerThread, cudaStreamLegacy, NULL};
  float *send[NR], *recv[NR];
  for (int r = 0; r < NR; r++) {
    send[r] = malloc(COUNT * sizeof(float));
    recv[r] = malloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++) send[r][i] = (float)(r + 1) * (float)(i % 7);
  }
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < NR; r++) NCCLCHECK(ncclAllReduce(send[r], recv[r], COUNT, ncclFloat, ncclSum, comms[r], streams[r]));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < NR; r++)
    for (int i = 0; i < COUNT; i++) {
      float want = 6.0f * (float)(i % 7);
      EXPECT(recv[r][i] == want, "allreduce rank %d element %d: %g, want %g", r, i, recv[r][i], want);
    }

  /* A user reduction: PreMulSum with a host scalar (NCCL's enum values). */
  ncclRedOp_t premul[NR];
  double half = 0.5;
  for (int r = 0; r < NR; r++) NCCLCHECK(ncclRedOpCreatePreMulSum(&premul[r], &half, ncclFloat64, ncclScalarHostImmediate, comms[r]));
  double dsend[NR][5], drecv[NR][5];
  for (int r = 0; r < NR; r++)
    for (int i = 0; i < 5; i++) dsend[r][i] = (double)(r + i);
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < NR; r++) NCCLCHECK(ncclAllReduce(dsend[r], drecv[r], 5, ncclFloat64, premul[r], comms[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < NR; r++) {
    for (int i = 0; i < 5; i++) EXPECT(drecv[r][i] == 0.5 * (3 * i + 3), "premulsum rank %d [%d] = %g", r, i, drecv[r][i]);
    NCCLCHECK(ncclRedOpDestroy(premul[r], comms[r]));
  }

  /* Send/Recv around the ring, in one group. */
  int64_t out[NR], in[NR];
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < NR; r++) {
    out[r] = 100 + r;
    NCCLCHECK(ncclSend(&out[r], 1, ncclInt64, (r + 1) % NR, comms[r], cudaStreamPerThread));
    NCCLCHECK(ncclRecv(&in[r], 1, ncclInt64, (r + NR - 1) % NR, comms[r], cudaStreamPerThread));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < NR; r++) EXPECT(in[r] == 100 + (r + NR - 1) % NR, "rank %d received %lld", r, (long long)in[r]);

  /* ncclCommSplit with this NCCL's own (smaller) ncclConfig_t. */
  ncclComm_t sub[NR];
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < NR; r++) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.commName = "abi-split";
    NCCLCHECK(ncclCommSplit(comms[r], r == 1 ? NCCL_SPLIT_NOCOLOR : 0, r, &sub[r], &config));
  }
  NCCLCHECK(ncclGroupEnd());
  EXPECT(sub[1] == NULL, "NCCL_SPLIT_NOCOLOR gave a communicator");
  for (int r = 0; r < NR; r += 2) {
    NCCLCHECK(ncclCommCount(sub[r], &nranks));
    EXPECT(nranks == 2, "split communicator of rank %d has %d ranks", r, nranks);
  }
  int a0 = 5, a2 = 7, b0 = 0, b2 = 0;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(&a0, &b0, 1, ncclInt32, ncclMax, sub[0], NULL));
  NCCLCHECK(ncclAllReduce(&a2, &b2, 1, ncclInt32, ncclMax, sub[2], NULL));
  NCCLCHECK(ncclGroupEnd());
  EXPECT(b0 == 7 && b2 == 7, "max over the split communicator: %d %d", b0, b2);
  NCCLCHECK(ncclCommDestroy(sub[0]));
  NCCLCHECK(ncclCommDestroy(sub[2]));

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
  /* ncclCommInitRankScalable with two ids, all ranks from one thread in a group. */
  ncclUniqueId ids[2];
  NCCLCHECK(ncclGetUniqueId(&ids[0]));
  NCCLCHECK(ncclGetUniqueId(&ids[1]));
  ncclComm_t scal[NR];
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < NR; r++) NCCLCHECK(ncclCommInitRankScalable(&scal[r], NR, r, 2, ids, NULL));
  NCCLCHECK(ncclGroupEnd());
  int sv[NR], sr[NR];
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < NR; r++) {
    sv[r] = 10 * (r + 1);
    NCCLCHECK(ncclAllReduce(&sv[r], &sr[r], 1, ncclInt32, ncclSum, scal[r], NULL));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < NR; r++) {
    EXPECT(sr[r] == 60, "AllReduce over the scalable communicator, rank %d: %d", r, sr[r]);
    NCCLCHECK(ncclCommDestroy(scal[r]));
  }
#endif

  /* A bad argument is ncclInvalidArgument, with a reason. */
  ncclResult_t bad = ncclAllReduce(send[0], recv[0], COUNT, (ncclDataType_t)99, ncclSum, comms[0], NULL);
  EXPECT(bad == ncclInvalidArgument, "bad datatype gave %s", ncclGetErrorString(bad));
  EXPECT(strlen(ncclGetLastError(comms[0])) > 0, "no last error after a bad datatype");

#ifdef NCCL_WIN_COLL_SYMMETRIC
  /* A window: registered and deregistered on every rank. */
  for (int r = 0; r < NR; r++) {
    ncclWindow_t win = NULL;
    NCCLCHECK(ncclCommWindowRegister(comms[r], send[r], COUNT * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC));
    NCCLCHECK(ncclCommWindowDeregister(comms[r], win));
  }
#endif

#ifdef NCCL_REVOKE_DEFAULT
  /* Revoked: quiescent, refusing operations, still destroyable. */
  for (int r = 0; r < NR; r++) NCCLCHECK(ncclCommRevoke(comms[r], NCCL_REVOKE_DEFAULT));
  bad = ncclAllReduce(send[0], recv[0], COUNT, ncclFloat, ncclSum, comms[0], NULL);
  EXPECT(bad == ncclInvalidUsage, "AllReduce on a revoked communicator gave %s", ncclGetErrorString(bad));
#endif

  for (int r = 0; r < NR; r++) {
    NCCLCHECK(ncclCommDestroy(comms[r]));
    free(send[r]);
    free(recv[r]);
  }
  return 0;
}

int main(void) {
  int failed = abiChecks();
  printf("test_abi (CUDA's nccl.h %d.%d.%d): %s\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, failed ? "FAILED" : "passed");
  return failed != 0;
}
