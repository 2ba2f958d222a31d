/* Memory-bandwidth probe: what one and two threads can copy (memcpy) and
 * reduce (c = a + b, float) over buffers far larger than the caches. The
 * physical limit the comparison tables are read against.
 *   membw [MiB per buffer] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t bytes;
static int mode; /* 0 copy, 1 reduce */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
  (void)arg;
  float *a = aligned_alloc(4096, bytes), *b = aligned_alloc(4096, bytes), *c = aligned_alloc(4096, bytes);
  size_t n = bytes / 4;
  for (size_t i = 0; i < n; i++) a[i] = (float)i, b[i] = 1, c[i] = 0;
  double *best = malloc(sizeof(double));
  *best = 0;
  for (int rep = 0; rep < 5; rep++) {
    double t0 = now();
    if (mode == 0) memcpy(c, a, bytes);
    else
      for (size_t i = 0; i < n; i++) c[i] = a[i] + b[i];
    double gbs = bytes / 1e9 / (now() - t0);
    if (gbs > *best) *best = gbs;
  }
  if (c[n / 2] < 0) puts(""); /* keep the work */
  free(a);
  free(b);
  free(c);
  return best;
}

static double measure(int threads) {
  pthread_t t[2];
  double total = 0;
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
  for (int i = 0; i < threads; i++) {
    void *r;
    pthread_join(t[i], &r);
    total += *(double *)r;
    free(r);
  }
  return total;
}

int main(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || atoi(argv[1]) <= 0)) {
    int asked = argv[1][0] == '-';
    fprintf(asked ? stdout : stderr,
            "usage: %s [MiB]\nCopy and float-sum bandwidth of 1 and 2 threads over buffers of MiB (default 256),\n"
            "best of 5, in GB/s of output.\n", argv[0]);
    return asked ? 0 : 2;
  }
  bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 256) << 20;
  printf("# memory bandwidth probe, %zu MiB buffers, best of 5, GB/s of output\n", bytes >> 20);
  for (mode = 0; mode < 2; mode++)
    for (int th = 1; th <= 2; th++)
      printf("%-8s %d thread%s  %6.2f GB/s\n", mode ? "reduce" : "copy", th, th > 1 ? "s" : " ", measure(th));
  return 0;
}
