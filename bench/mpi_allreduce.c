/* The peer side of bench/compare_allreduce: MPI_Allreduce (float, sum,
 * out-of-place) timed exactly as allreduce_sweep times chorus, same output. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  size_t minB = argc > 1 ? strtoull(argv[1], NULL, 0) : 8, maxB = argc > 2 ? strtoull(argv[2], NULL, 0) : 128 << 20;
  size_t factor = argc > 3 ? strtoull(argv[3], NULL, 0) : 2;
  float *send = aligned_alloc(4096, (maxB + 4095) / 4096 * 4096), *recv = aligned_alloc(4096, (maxB + 4095) / 4096 * 4096);
  for (size_t i = 0; i < maxB / 4; i++) send[i] = (float)(i % 7), recv[i] = 0;
  /* Let the scheduler spread the ranks over the cores before timing (as
   * allreduce_sweep does too). */
  for (int i = 0; i < 50000; i++) MPI_Allreduce(send, recv, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    printf("# Open MPI MPI_Allreduce: %d ranks, float sum, out-of-place\n", n);
    printf("#%12s %12s %8s %6s %10s %8s %8s\n", "size(B)", "count", "type", "redop", "time(us)", "algbw", "busbw");
  }
  for (size_t b = minB; b <= maxB; b *= factor) {
    int count = (int)(b / 4);
    int iters = (int)(2e9 / (b + 200000.0));
    if (iters < 5) iters = 5;
    if (iters > 20000) iters = 20000;
    for (int i = 0; i < 5; i++) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = (MPI_Wtime() - t0) / iters;
    for (int i = 0; i < count; i++)
      if (recv[i] != n * (float)(i % 7)) {
        fprintf(stderr, "MPI_Allreduce gave a wrong element at %d\n", i);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    if (rank == 0) {
      double alg = b / 1e9 / t, bus = alg * 2.0 * (n - 1) / n;
      printf(" %12zu %12d %8s %6s %10.2f %8.2f %8.2f\n", b, count, "float", "sum", t * 1e6, alg, bus);
      fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
