/* The nccl-tests-compatible perf driver: each *_perf tool is a small table
 * of functions (counts, expected values, bandwidth factor, run), as in
 * nccl-tests; common.c owns flags, ranks, timing, checking and output. */
#ifndef CHORUS_PERF_COMMON_H
#define CHORUS_PERF_COMMON_H
#include <stddef.h>

#include "chorus.h"

struct testColl {
  const char *name;  /* e.g. "all_reduce_perf" */
  int reduction;     /* takes an op (loops -o) */
  int rooted;        /* takes a root (loops -r -1) */
  /* Counts in elements for a sweep size of count elements. */
  void (*getCounts)(size_t count, int nranks, size_t *sendCount, size_t *recvCount, size_t *paramCount,
                    size_t *sendInplaceOffset, size_t *recvInplaceOffset);
  /* Expected value of output element i on rank, given each rank's input
   * input(r, j); NAN when the element is not written (Reduce non-root). */
  double (*expected)(int rank, int nranks, size_t i, size_t paramCount, int root, int op,
                     double (*input)(int r, size_t j));
  /* algbw bytes and bus factor. */
  void (*getBw)(size_t paramCount, size_t eltSize, double sec, int nranks, double *algBw, double *busBw);
  ncclResult_t (*run)(const void *sendbuff, void *recvbuff, size_t paramCount, ncclDataType_t type, ncclRedOp_t op,
                      int root, int rank, int nranks, ncclComm_t comm, cudaStream_t stream);
  /* A tool made of dependent steps (hypercube): how many, and step k of
   * run alone. With several ranks per thread each step is grouped across
   * them and ends before the next begins (one group around all of run's
   * steps would let a step send what an earlier one has not received
   * yet). NULL: run is one step. */
  int (*steps)(int nranks);
  ncclResult_t (*runStep)(const void *sendbuff, void *recvbuff, size_t paramCount, ncclDataType_t type, int rank,
                          int nranks, ncclComm_t comm, cudaStream_t stream, int step);
  /* A tool with settings of its own (alltoallv's traffic pattern, from
   * the environment or a file): read once per process, by one thread,
   * before any size runs; nonzero refuses the run, after saying why on
   * stdout where print. NULL: nothing to read. */
  int (*setup)(int nranks, size_t minBytes, size_t maxBytes, int print);
  /* Lines of its own after each cell is timed, from the printing thread
   * (alltoallv's per-rank figures). NULL: none. */
  void (*summary)(size_t paramCount, size_t eltSize, double sec, int nranks);
};

/* Runs the tool; returns the process exit status. */
int perfMain(int argc, char **argv, const struct testColl *coll);

/* Reduction of a column of inputs in rank order, with avg and premulsum as
 * the tools generate them (premulsum scalar: 1 on even ranks, 2 on odd). */
double perfReduce(int nranks, size_t j, int op, double (*input)(int r, size_t j));
#define PERF_OP_MULSUM 5

#endif
