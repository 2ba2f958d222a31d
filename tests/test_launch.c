/* Run under chorusrun: chorusCommInitFromEnv builds the communicator from
 * the launcher's environment; an AllReduce checks it. With argument "fail",
 * rank 1 exits with status 3 and the others block in a collective: chorusrun
 * must stop them and return 3. With "split", a child communicator whose
 * ranks are reversed runs an AllReduce too. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus.h"
#include "harness.h"

int main(int argc, char **argv) {
  int rank, nranks, r, n;
  ncclComm_t comm;
  NCCLCHECK(chorusCommInitFromEnv(&comm)); /* first: without a launcher its WARN says what to set */
  NCCLCHECK(chorusEnvRank(&rank, &nranks));
  NCCLCHECK(ncclCommUserRank(comm, &r));
  NCCLCHECK(ncclCommCount(comm, &n));
  EXPECT(r == rank && n == nranks, "comm says rank %d of %d, environment %d of %d", r, n, rank, nranks);
  int x = rank + 1, y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, comm, NULL));
  EXPECT(y == n * (n + 1) / 2, "allreduce gave %d", y);
  if (argc > 1 && strcmp(argv[1], "split") == 0) { /* a child whose rank 0 is the last rank: no version line of its own */
    ncclComm_t child;
    NCCLCHECK(ncclCommSplit(comm, 0, n - 1 - rank, &child, NULL));
    NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclInt, ncclSum, child, NULL));
    EXPECT(y == n * (n + 1) / 2, "the child's allreduce gave %d", y);
    NCCLCHECK(ncclCommDestroy(child));
  }
  if (argc > 1 && strcmp(argv[1], "fail") == 0) {
    if (rank == 1) return 3;
    sleep(30); /* chorusrun must not wait for this */
  }
  NCCLCHECK(ncclCommDestroy(comm));
  printf("rank %d of %d: ok\n", rank, n);
  return 0;
}
