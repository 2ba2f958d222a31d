/* AllReduce size sweep over N local ranks (one forked process per rank):
 * prints size, time, algbw and busbw per size, as nccl-tests does.
 *   allreduce_sweep [-n ranks] [-b minbytes] [-e maxbytes] [-f factor] [-d float|double|...] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t parseSize(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'G': case 'g': v *= 1 << 30; break;
    case 'M': case 'm': v *= 1 << 20; break;
    case 'K': case 'k': v *= 1 << 10; break;
  }
  return (size_t)v;
}

#define CK(call)                                                                 \
  do {                                                                           \
    ncclResult_t r_ = (call);                                                    \
    if (r_ != ncclSuccess) {                                                     \
      fprintf(stderr, "%s failed: %s\n", #call, ncclGetErrorString(r_));         \
      _exit(1);                                                                  \
    }                                                                            \
  } while (0)

int main(int argc, char **argv) {
  int n = 2, opt;
  size_t minB = 8, maxB = 128 << 20, factor = 2;
  static const char usage[] =
      "usage: %s [-n ranks] [-b min] [-e max] [-f factor]\n"
      "AllReduce (float sum, out of place) latency and bus bandwidth from min to max bytes (K/M/G\n"
      "suffixes), each size factor times the last, on ranks forked processes (default 2, 8 B to 128 MiB, x2).\n";
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf(usage, argv[0]);
      return 0;
    }
  while ((opt = getopt(argc, argv, "n:b:e:f:")) != -1) {
    switch (opt) {
      case 'n': n = atoi(optarg); break;
      case 'b': minB = parseSize(optarg); break;
      case 'e': maxB = parseSize(optarg); break;
      case 'f': factor = (size_t)atoi(optarg); break;
      default: fprintf(stderr, usage, argv[0]); return 2;
    }
  }
  if (factor < 2) factor = 2;
  ncclUniqueId id;
  CK(ncclGetUniqueId(&id));
  /* Rank 0's bus bandwidths, shared with the parent for the average. */
  int nsizes = 0;
  for (size_t b = minB; b <= maxB; b *= factor) nsizes++;
  double *times = mmap(NULL, sizeof(double) * (nsizes + 1), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  printf("# chorus allreduce_sweep: %d ranks, float sum, out-of-place\n", n);
  printf("#%12s %12s %8s %6s %10s %8s %8s\n", "size(B)", "count", "type", "redop", "time(us)", "algbw", "busbw");
  fflush(stdout);
  for (int r = 0; r < n; r++) {
    if (fork() != 0) continue;
    ncclComm_t comm;
    CK(ncclCommInitRank(&comm, n, id, r));
    float *send = aligned_alloc(4096, (maxB + 4095) / 4096 * 4096);
    float *recv = aligned_alloc(4096, (maxB + 4095) / 4096 * 4096);
    for (size_t i = 0; i < maxB / 4; i++) send[i] = (float)(i % 7), recv[i] = 0;
    /* Let the scheduler spread the ranks over the cores before timing (as
     * bench/mpi_allreduce.c does too). */
    for (int i = 0; i < 50000; i++) CK(ncclAllReduce(send, recv, 2, ncclFloat, ncclSum, comm, NULL));
    int k = 0;
    for (size_t b = minB; b <= maxB; b *= factor, k++) {
      size_t count = b / 4;
      int iters = (int)(2e9 / (b + 200000.0));
      if (iters < 5) iters = 5;
      if (iters > 20000) iters = 20000;
      for (int i = 0; i < 5; i++) CK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL));
      double t0 = now();
      for (int i = 0; i < iters; i++) CK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL));
      double t = (now() - t0) / iters;
      if (r == 0) {
        double alg = b / 1e9 / t, bus = alg * 2.0 * (n - 1) / n;
        times[k] = bus;
        printf(" %12zu %12zu %8s %6s %10.3f %8.2f %8.2f\n", b, count, "float", "sum", t * 1e6, alg, bus);
        fflush(stdout);
      }
    }
    CK(ncclCommDestroy(comm));
    _exit(0);
  }
  int failed = 0, status;
  while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  if (failed) {
    fprintf(stderr, "a rank failed\n");
    return 1;
  }
  double sumBus = 0;
  for (int k = 0; k < nsizes; k++) sumBus += times[k];
  printf("# Avg bus bandwidth    : %g\n", sumBus / nsizes);
  return 0;
}
