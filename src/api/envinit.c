/* chorusCommInitFromEnv: a communicator from what a launcher put in the
 * environment (chorusrun, torchrun, Open MPI, MPICH/PMI, Slurm), the way
 * torch.distributed's env:// rendezvous works. Rank 0 hosts the root at the
 * rendezvous address; every rank derives the same id from it. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/comm.h"
#include "bootstrap/bootstrap.h"
#include "chorus.h"
#include "core/err.h"
#include "core/log.h"
#include "core/param.h"

/* First variable of the list that is set and parses as an integer >= 0. */
static int envInt(const char *const *names, int *out, const char **which) {
  for (; *names; names++) {
    const char *v = getenv(*names);
    if (!v || !*v) continue;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 1 << 24) continue;
    *out = (int)x;
    *which = *names;
    return 1;
  }
  return 0;
}

/* The launcher's rank and size; no launcher is a WARN only when loud (for
 * chorusCommInitFromEnv, which needs one; chorusEnvRank is a question, and
 * the perf tools ask it to learn whether they run alone). */
static ncclResult_t envRank(int *rank, int *nranks, int loud) {
  static const char *const rankVars[] = {"CHORUS_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                         "SLURM_PROCID", NULL};
  static const char *const sizeVars[] = {"CHORUS_NRANKS", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                         "SLURM_NTASKS", NULL};
  const char *rv = NULL, *sv = NULL;
  if (rank == NULL || nranks == NULL) {
    WARN("chorusEnvRank : %s argument is NULL", rank == NULL ? "rank" : "nranks");
    return ncclInvalidArgument;
  }
  if (!envInt(rankVars, rank, &rv) || !envInt(sizeVars, nranks, &sv)) {
    if (!loud) return ncclInvalidUsage;
    WARN("chorusCommInitFromEnv : no launcher environment: set CHORUS_RANK/CHORUS_NRANKS (chorusrun), "
         "RANK/WORLD_SIZE (torchrun), or run under mpirun or srun");
    return ncclInvalidUsage;
  }
  if (*rank >= *nranks) {
    WARN("chorusCommInitFromEnv : %s=%d is not below %s=%d", rv, *rank, sv, *nranks);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

CHORUS_EXPORT ncclResult_t chorusEnvRank(int *rank, int *nranks) { return envRank(rank, nranks, 0); }

CHORUS_EXPORT ncclResult_t chorusCommInitFromEnv(ncclComm_t *comm) {
  if (comm == NULL) {
    WARN("chorusCommInitFromEnv : comm argument is NULL");
    return ncclInvalidArgument;
  }
  int rank, nranks;
  CHECK(envRank(&rank, &nranks, 1));
  /* The rendezvous address: NCCL_COMM_ID, else torchrun's MASTER_ADDR/PORT. */
  char addr[300];
  const char *commId = paramStr(paramCommId);
  const char *host = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  if (commId[0]) {
    snprintf(addr, sizeof addr, "%s", commId);
  } else if (host && *host && port && *port) {
    snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
  } else {
    WARN("chorusCommInitFromEnv : no rendezvous address: set NCCL_COMM_ID=host:port or MASTER_ADDR and MASTER_PORT");
    return ncclInvalidUsage;
  }
  struct bootstrapHandle h;
  CHECK(bootstrapEnvHandle(addr, &h));
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  memcpy(id.internal, &h, sizeof h);
  INFO(subsysInit, "chorusCommInitFromEnv : rank %d of %d, rendezvous at %s", rank, nranks, addr);
  return ncclCommInitRank(comm, nranks, id, rank);
}
