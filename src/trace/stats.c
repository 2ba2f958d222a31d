#include "trace/stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/param.h"
#include "core/spin.h"
#include "engine/desc.h"
#include "reduce/reduce.h"

int statsCommsOn; /* communicators counting (statsActive) */

void statsInit(struct commStats *s, int rank, int nranks, uint64_t commHash) {
  s->rank = rank;
  s->nranks = nranks;
  s->commHash = commHash;
  s->b = paramInt(paramStats) > 0 ? calloc(collTypeCount * STATS_SIZES, sizeof *s->b) : NULL;
  if (!s->b) return;
  __atomic_add_fetch(&statsCommsOn, 1, __ATOMIC_RELAXED);
  observeBegin();
}

/* The size class of bytes: 0 for 0, else 1 + its highest bit. */
static int sizeClass(uint64_t bytes) {
  int c = bytes ? 64 - __builtin_clzll(bytes) : 0;
  return c < STATS_SIZES ? c : STATS_SIZES - 1;
}

/* Quarter octaves: the highest bit and the two below it. */
static int timeClass(uint64_t ns) {
  if (ns < 4) return (int)ns;
  int msb = 63 - __builtin_clzll(ns);
  int c = msb * 4 + (int)((ns >> (msb - 2)) & 3);
  return c < STATS_TIMES ? c : STATS_TIMES - 1;
}

/* The middle of a time class, in ns. */
static double timeOfClass(int c) {
  if (c < 4) return c;
  int msb = c / 4, q = c % 4;
  double lo = (double)(1ull << msb) * (1.0 + q / 4.0);
  return lo * (1.0 + 1.0 / (8.0 + 2.0 * q)); /* halfway to the next quarter */
}

/* What nccl-tests calls the size of an operation, and its busbw factor. */
uint64_t statsOpBytes(int coll, size_t count, int dtype, int nranks) {
  uint64_t b = (uint64_t)count * dtypeSize(dtype);
  switch (coll) {
    case collAllGather: case collReduceScatter: case collAlltoAll: case collGather: case collScatter: return b * (uint64_t)nranks;
    default: return b;
  }
}

static double busFactor(int coll, int n) {
  switch (coll) {
    case collAllReduce: return 2.0 * (n - 1) / n;
    case collAllGather: case collReduceScatter: case collAlltoAll: case collGather: case collScatter:
      return (double)(n - 1) / n;
    default: return 1.0;
  }
}

void statsEnded(struct commStats *s, int coll, uint64_t bytes, uint64_t ns) {
  if (!s->b) return;
  int k = coll * STATS_SIZES + sizeClass(bytes);
  spinLock(&s->lock);
  struct statsBucket *b = s->b[k];
  if (b || (b = s->b[k] = calloc(1, sizeof *b))) {
    b->calls++;
    b->bytes += bytes;
    b->sumNs += ns;
    b->times[timeClass(ns)]++;
  }
  spinUnlock(&s->lock);
}

static double percentile(const struct statsBucket *b, double p) {
  uint64_t want = (uint64_t)(p * (double)b->calls + 0.5), seen = 0;
  if (want < 1) want = 1;
  for (int c = 0; c < STATS_TIMES; c++)
    if ((seen += b->times[c]) >= want) return timeOfClass(c);
  return timeOfClass(STATS_TIMES - 1);
}

static void sizeStr(uint64_t bytes, char *out, size_t len) {
  if (bytes < 1024) snprintf(out, len, "%llu B", (unsigned long long)bytes);
  else if (bytes < 1024 * 1024) snprintf(out, len, "%.4g KiB", (double)bytes / 1024);
  else if (bytes < 1024ull * 1024 * 1024) snprintf(out, len, "%.4g MiB", (double)bytes / 1048576);
  else snprintf(out, len, "%.4g GiB", (double)bytes / 1073741824.0);
}

void statsReport(struct commStats *s) {
  if (!s->b) return;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  int any = 0;
  for (int k = 0; k < collTypeCount * STATS_SIZES; k++) {
    const struct statsBucket *b = s->b[k];
    if (!b) continue;
    if (!any++)
      fprintf(stderr,
              "chorus stats: rank %d of %d (commId 0x%llx, host %s, pid %d): per collective and size, calls, bytes, "
              "run time p50/p90/p99 and mean, busbw from the mean\n",
              s->rank, s->nranks, (unsigned long long)s->commHash, host, (int)getpid());
    int coll = k / STATS_SIZES;
    double mean = (double)b->sumNs / (double)b->calls, avgBytes = (double)b->bytes / (double)b->calls;
    char size[32], total[32];
    sizeStr((uint64_t)avgBytes, size, sizeof size);
    sizeStr(b->bytes, total, sizeof total);
    double busbw = mean > 0 ? avgBytes / mean * busFactor(coll, s->nranks) : 0; /* bytes per ns = GB/s */
    fprintf(stderr,
            "chorus stats: rank %d %-13s %10s  calls %8llu  bytes %10s  us p50 %9.2f p90 %9.2f p99 %9.2f mean %9.2f  "
            "busbw %9.4g GB/s\n",
            s->rank, collName(coll), size, (unsigned long long)b->calls, total, percentile(b, 0.5) / 1e3,
            percentile(b, 0.9) / 1e3, percentile(b, 0.99) / 1e3, mean / 1e3, busbw);
  }
  for (int k = 0; k < collTypeCount * STATS_SIZES; k++) free(s->b[k]);
  free(s->b);
  s->b = NULL;
  __atomic_sub_fetch(&statsCommsOn, 1, __ATOMIC_RELAXED);
  observeEnd();
}
