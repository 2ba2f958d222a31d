/* The floor under a 2-rank 8-byte AllReduce on this machine: two forked
 * processes, each writing a counter into a cache line of its own in shared
 * memory and spinning until the other's counter catches up: one exchange
 * is what any 2-rank AllReduce must do at least (each rank's value reaches
 * the other), with no library around it. Prints the median time per
 * exchange of 5 runs.
 *   lineping [exchanges per run] */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double nowSec(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static int byValue(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 2000000;
  enum { runs = 5 };
  /* Two counters 128 bytes apart (adjacent lines may be fetched in pairs),
   * and the runs' times for the parent. */
  char *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return 1;
  double *times = (double *)(shared + 1024);
  for (int r = 0; r < 2; r++) {
    if (fork() != 0) continue;
    volatile long *mine = (volatile long *)(shared + 128 * r), *theirs = (volatile long *)(shared + 128 * (1 - r));
    for (int k = 0; k < runs; k++) {
      double t0 = nowSec();
      for (long i = 1; i <= iters; i++) {
        long want = k * iters + i;
        *mine = want;
        while (*theirs < want) relax();
      }
      if (r == 0) times[k] = (nowSec() - t0) / iters;
    }
    _exit(0);
  }
  while (wait(NULL) > 0) {
  }
  qsort(times, runs, sizeof *times, byValue);
  printf("# lineping: one exchange of a cache line between 2 processes: %.3f us (median of %d runs of %ld)\n",
         times[runs / 2] * 1e6, runs, iters);
  return 0;
}
