/* One rank of a job that does what the plainest NCCL program does: init,
 * one AllReduce of COUNT floats (argv[1]), a check of the result, destroy
 * (or, with argv[2] "finalize", finalize first). Launched by tests/netns.sh
 * ("drain") on hosts whose link is slow, where the last bytes a rank sent
 * were still on their way when it said goodbye: every rank must succeed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"
#include "nccl.h"

int main(int argc, char **argv) {
  size_t count = argc > 1 ? strtoull(argv[1], NULL, 0) : 1 << 20;
  int finalize = argc > 2 && !strcmp(argv[2], "finalize");
  ncclComm_t comm;
  if (chorusCommInitFromEnv(&comm) != ncclSuccess) return 2;
  int rank, n;
  ncclCommUserRank(comm, &rank);
  ncclCommCount(comm, &n);
  float *buf = malloc(count * sizeof(float));
  if (!buf) return 2;
  for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1 + i % 7);
  ncclResult_t res = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, NULL);
  if (res != ncclSuccess) {
    printf("rank %d: AllReduce failed: %s: %s\n", rank, ncclGetErrorString(res), ncclGetLastError(comm));
    return 1;
  }
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += buf[i] != (float)(n * (n + 1) / 2 + n * (int)(i % 7));
  if (finalize && (res = ncclCommFinalize(comm)) != ncclSuccess) printf("rank %d: finalize: %s\n", rank, ncclGetErrorString(res));
  ncclCommDestroy(comm);
  printf("rank %d: AllReduce of %zu floats, %zu wrong\n", rank, count, wrong);
  free(buf);
  return wrong || res != ncclSuccess ? 1 : 0;
}
