/* The MPI side of bench/compare: MPI_Allreduce, MPI_Allgather,
 * MPI_Reduce_scatter_block or MPI_Bcast (float, sum), timed like the
 * nccl-tests tools (warm-up, back-to-back iterations, average over ranks)
 * and checked once per size. Built against Open MPI and MPICH.
 *   mpi_coll <allreduce|allgather|reducescatter|broadcast> <minbytes> <maxbytes> <iters> */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc < 5) {
    if (rank == 0) fprintf(stderr, "usage: %s coll minbytes maxbytes iters\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char *coll = argv[1];
  size_t minB = strtoull(argv[2], NULL, 0), maxB = strtoull(argv[3], NULL, 0);
  int iters = atoi(argv[4]);
  size_t cap = maxB * (size_t)n + 4096;
  float *send = aligned_alloc(4096, (cap + 4095) / 4096 * 4096), *recv = aligned_alloc(4096, (cap + 4095) / 4096 * 4096);
  memset(send, 0, cap);
  memset(recv, 0, cap);
  long wrongTotal = 0;
  for (size_t bytes = minB; bytes <= maxB; bytes *= 2) {
    size_t count = bytes / 4, per = (count / n) & ~(size_t)3; /* per-rank count, 16-byte aligned as nccl-tests */
    int ag = !strcmp(coll, "allgather"), rs = !strcmp(coll, "reducescatter"), bc = !strcmp(coll, "broadcast");
    size_t c = (ag || rs) ? per : count;
    if (c == 0) continue;
#define RUN()                                                                                            \
  do {                                                                                                   \
    if (ag) MPI_Allgather(send, (int)c, MPI_FLOAT, recv, (int)c, MPI_FLOAT, MPI_COMM_WORLD);             \
    else if (rs) MPI_Reduce_scatter_block(send, recv, (int)c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);       \
    else if (bc) MPI_Bcast(send, (int)c, MPI_FLOAT, 0, MPI_COMM_WORLD);                                  \
    else MPI_Allreduce(send, recv, (int)c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);                          \
  } while (0)
    for (int w = 0; w < 2; w++) RUN();
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) RUN();
    double t = (MPI_Wtime() - t0) / iters, sum;
    MPI_Allreduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    t = sum / n;
    /* Check: integer-valued inputs, exact in any order. */
    size_t in = rs ? c * n : c;
    for (size_t i = 0; i < in; i++) send[i] = (float)((rank + 1) * ((i % 5) + 1));
    memset(recv, 0, (ag ? c * n : c) * 4);
    RUN();
    long wrong = 0;
    float rsum = (float)(n * (n + 1) / 2);
    if (ag) {
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < c; i++) wrong += recv[r * c + i] != (float)((r + 1) * ((i % 5) + 1));
    } else if (rs) {
      for (size_t i = 0; i < c; i++) wrong += recv[i] != rsum * (float)(((rank * c + i) % 5) + 1);
    } else if (bc) {
      for (size_t i = 0; i < c; i++) wrong += send[i] != (float)((i % 5) + 1);
    } else {
      for (size_t i = 0; i < c; i++) wrong += recv[i] != rsum * (float)((i % 5) + 1);
    }
    long w;
    MPI_Allreduce(&wrong, &w, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    wrongTotal += w;
    double algBytes = (ag || rs) ? (double)c * 4 * n : (double)c * 4;
    double factor = bc ? 1 : (ag || rs) ? (double)(n - 1) / n : 2.0 * (n - 1) / n;
    double alg = algBytes / 1e9 / t;
    if (rank == 0) {
      printf("%12zu  %12zu  %10.2f  %8.3f  %8.3f  %6ld\n", (size_t)algBytes, c, t * 1e6, alg, alg * factor, w);
      fflush(stdout);
    }
  }
  MPI_Finalize();
  return wrongTotal ? 1 : 0;
}
