/* ncclCommSuspend / ncclCommResume / ncclCommMemStats on 2 ranks: a
 * suspended communicator refuses operations (ncclInvalidUsage, saying so)
 * and works again, results checked, once resumed; the statistics say it is
 * suspended and that chorus holds no GPU memory; misuse is refused; as in
 * NCCL, only the NCCL_SUSPEND_MEM bit of the flags does anything. A call
 * an open group holds on a communicator suspended or revoked before
 * ncclGroupEnd does not run, nor does the rest of the group. */
#include <string.h>

#include "harness.h"

static int allReduceWorks(ncclComm_t comm, int rank, int n) {
  double x = rank + 1, sum = 0;
  NCCLCHECK(ncclAllReduce(&x, &sum, 1, ncclDouble, ncclSum, comm, NULL));
  EXPECT(sum == n * (n + 1) / 2.0, "rank %d: AllReduce gave %g", rank, sum);
  return 0;
}

static int suspendRank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  NCCLCHECK(ncclCommInitRank(&comm, n, id, rank));
  if (allReduceWorks(comm, rank, n)) return 1;
  uint64_t v = 99;
  NCCLCHECK(ncclCommMemStats(comm, ncclStatGpuMemTotal, &v));
  EXPECT(v == 0, "rank %d: GPU memory total %llu", rank, (unsigned long long)v);
  NCCLCHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v));
  EXPECT(v == 0, "rank %d: suspended before ncclCommSuspend", rank);

  NCCLCHECK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  NCCLCHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v));
  EXPECT(v == 1, "rank %d: not suspended after ncclCommSuspend", rank);
  float a = 1, b = 0;
  ncclResult_t r = ncclAllReduce(&a, &b, 1, ncclFloat, ncclSum, comm, NULL);
  EXPECT(r == ncclInvalidUsage && b == 0, "rank %d: AllReduce while suspended gave %s", rank, ncclGetErrorString(r));
  EXPECT(strstr(ncclGetLastError(comm), "suspended"), "rank %d: last error '%s'", rank, ncclGetLastError(comm));
  EXPECT(ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclInvalidUsage, "rank %d: suspended twice", rank);
  NCCLCHECK(ncclCommSuspend(comm, 0)); /* NCCL's no-op: no NCCL_SUSPEND_MEM */

  NCCLCHECK(ncclCommResume(comm));
  NCCLCHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v));
  EXPECT(v == 0, "rank %d: still suspended after ncclCommResume", rank);
  if (allReduceWorks(comm, rank, n)) return 1;
  /* Suspended while an open group holds a call: the group runs none of
   * them (until 2026-12-06 the held AllReduce ran). */
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(&a, &b, 1, ncclFloat, ncclSum, comm, NULL));
  NCCLCHECK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  r = ncclGroupEnd();
  EXPECT(r == ncclInvalidUsage && b == 0, "rank %d: a group held across a suspend gave %s, %g", rank,
         ncclGetErrorString(r), b);
  EXPECT(strstr(ncclGetLastError(comm), "suspended (ncclCommSuspend) while the group held its calls"),
         "rank %d: last error '%s'", rank, ncclGetLastError(comm));
  NCCLCHECK(ncclCommResume(comm));
  if (allReduceWorks(comm, rank, n)) return 1;
  EXPECT(ncclCommResume(comm) == ncclInvalidUsage, "rank %d: resumed a communicator not suspended", rank);
  NCCLCHECK(ncclCommSuspend(comm, 0x10)); /* no NCCL_SUSPEND_MEM: a no-op, as in NCCL */
  NCCLCHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v));
  EXPECT(v == 0, "rank %d: flags 0x10 suspended the communicator", rank);
  NCCLCHECK(ncclCommSuspend(comm, -1)); /* has NCCL_SUSPEND_MEM */
  NCCLCHECK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v));
  EXPECT(v == 1, "rank %d: flags -1 did not suspend", rank);
  NCCLCHECK(ncclCommResume(comm));
  EXPECT(ncclCommMemStats(comm, (ncclCommMemStat_t)7, &v) == ncclInvalidArgument, "rank %d: stat 7 taken", rank);
  EXPECT(ncclCommMemStats(comm, ncclStatGpuMemTotal, NULL) == ncclInvalidArgument, "rank %d: NULL value", rank);
  if (allReduceWorks(comm, rank, n)) return 1; /* the refusals changed nothing */
  NCCLCHECK(ncclCommDestroy(comm));
  return 0;
}

/* Revoked while an open group holds calls on it: the group runs none of
 * them (until 2026-12-06 the held AllReduce ran on the revoked
 * communicator, or waited for its peer until the timeout). */
static int revokedInGroup(void) {
  ncclComm_t c[2];
  NCCLCHECK(ncclCommInitAll(c, 2, NULL));
  float s[2] = {1, 2}, r[2] = {0, 0};
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < 2; i++) NCCLCHECK(ncclAllReduce(&s[i], &r[i], 1, ncclFloat, ncclSum, c[i], NULL));
  for (int i = 0; i < 2; i++) NCCLCHECK(ncclCommRevoke(c[i], NCCL_REVOKE_DEFAULT));
  ncclResult_t res = ncclGroupEnd();
  EXPECT(res == ncclInvalidUsage && r[0] == 0 && r[1] == 0, "a group held across a revoke gave %s, %g %g",
         ncclGetErrorString(res), r[0], r[1]);
  EXPECT(strstr(ncclGetLastError(NULL), "revoked (ncclCommRevoke) while the group held its calls"), "last error '%s'",
         ncclGetLastError(NULL));
  for (int i = 0; i < 2; i++) NCCLCHECK(ncclCommDestroy(c[i]));
  return 0;
}

int main(void) {
  int failed = runRanks(2, suspendRank, NULL, 30);
  failed += revokedInGroup();
  printf("test_suspend: %s\n", failed ? "FAILED" : "passed");
  return failed != 0;
}
