/* What NCCL's MPI examples do before NCCL: MPI error checks, and the local
 * rank (how many lower ranks share this host, by a hash of the host name),
 * which picks the process's device. */
#ifndef EXAMPLES_NCCL_MPI_LOCAL_RANK_H
#define EXAMPLES_NCCL_MPI_LOCAL_RANK_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mpi.h"

#define MPICHECK(cmd)                                                                      \
  do {                                                                                     \
    int e_ = (cmd);                                                                        \
    if (e_ != MPI_SUCCESS) {                                                               \
      printf("Failed: MPI error %s:%d '%d'\n", __FILE__, __LINE__, e_);                    \
      exit(EXIT_FAILURE);                                                                  \
    }                                                                                      \
  } while (0)

/* A number per host name (DJB2), so ranks can count who shares their host. */
static inline uint64_t getHostHash(const char *string) {
  uint64_t result = 5381;
  for (int c = 0; string[c] != '\0'; c++) result = ((result << 5) + result) + (uint64_t)string[c];
  return result;
}

static inline void getHostName(char *hostname, int maxlen) {
  gethostname(hostname, maxlen);
  hostname[maxlen - 1] = '\0';
  for (int i = 0; i < maxlen; i++)
    if (hostname[i] == '.') {
      hostname[i] = '\0';
      return;
    }
}

/* This rank's place among the ranks on its host. */
static inline int localRankOf(int myRank, int nRanks) {
  uint64_t *hostHashs = (uint64_t *)malloc(sizeof(uint64_t) * nRanks);
  char hostname[1024];
  getHostName(hostname, 1024);
  hostHashs[myRank] = getHostHash(hostname);
  MPICHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, hostHashs, sizeof(uint64_t), MPI_BYTE, MPI_COMM_WORLD));
  int localRank = 0;
  for (int p = 0; p < myRank; p++)
    if (hostHashs[p] == hostHashs[myRank]) localRank++;
  free(hostHashs);
  return localRank;
}
#endif
