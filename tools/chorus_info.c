/* chorus-info: what this build is, which parameters are in effect, and
 * what the tuner would choose.
 *   chorus-info [--params]
 *   chorus-info --tune [NRANKS [HOSTS]]   the cost model's table: for each
 *       collective and size, the predicted time of every algorithm/protocol
 *       and the tuner's choice (NCCL_ALGO / NCCL_PROTO / CHORUS_* as set) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo/algo.h"
#include "api/comm.h"
#include "chorus.h"
#include "core/param.h"
#include "reduce/reduce.h"
#include "transport/conn.h"
#include "tune/tune.h"

static int printTune(int nranks, int hosts) {
  if (nranks < 1 || hosts < 1 || hosts > nranks) {
    fprintf(stderr, "chorus-info --tune: need 1 <= HOSTS <= NRANKS\n");
    return 2;
  }
  struct tuneTopo topo = {nranks, hosts, (nranks + hosts - 1) / hosts, (int)sysconf(_SC_NPROCESSORS_ONLN), hosts > 1};
  struct tuneConfig cfg;
  tuneConfigFromEnv(&cfg);
  struct tuneTable t;
  if (tuneSetup(&t, &cfg, &topo) != ncclSuccess) return 1;
  struct conn geometry; /* the FIFO slots NCCL_BUFFSIZE gives */
  int64_t buff = paramInt(paramBuffSize);
  connLayout(&geometry, NULL, (size_t)(buff < 65536 ? 65536 : buff), 0);
  size_t slot = geometry.slotBytes < COMM_SCRATCH_BYTES ? geometry.slotBytes : COMM_SCRATCH_BYTES;
  int nch = (int)(paramInt(paramMaxNChannels) > 0 ? paramInt(paramMaxNChannels) : 2);
  printf("# %d rank(s) on %d host(s), at most %d per host, %d core(s); times in us predicted by the model\n", nranks,
         hosts, topo.localRanks, topo.cores);
  for (int coll = 0; coll < tuneFuncCount; coll++) {
    int cand[algoCount * protoCount][2], nc = 0;
    for (int a = 0; a < algoCount; a++)
      for (int p = 0; p < protoCount; p++)
        if (algoSupports(a, coll, nranks) && tuneModelUs(&topo, coll, a, p, 1, 8) >= 0) {
          cand[nc][0] = a;
          cand[nc++][1] = p;
        }
    printf("\n# %s\n# %12s", collName(coll), "bytes");
    for (int k = 0; k < nc; k++) {
      char name[64];
      snprintf(name, sizeof name, "%s/%s", algoName(cand[k][0]), protoName(cand[k][1]));
      printf(" %16s", name);
    }
    printf("   choice\n");
    for (size_t bytes = 8; bytes <= ((size_t)256 << 20); bytes *= 4) {
      size_t count = bytes / 4; /* float */
      printf("  %12zu", bytes);
      for (int k = 0; k < nc; k++) printf(" %16.2f", tuneModelUs(&topo, coll, cand[k][0], cand[k][1], 1, bytes));
      struct tuneChoice c;
      if (tuneChoose(&t, coll, count, 4, ncclFloat, slot, nch, &c) == ncclSuccess)
        printf("   %s/%s %d ch %.2f\n", algoName(c.algo), protoName(c.proto), c.nch, c.us);
      else
        printf("   none\n");
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  int v, c;
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: chorus-info [--params | --tune [NRANKS [HOSTS]]]\n");
    return 0;
  }
  ncclGetVersion(&v);
  chorusGetVersion(&c);
  printf("chorus %d.%d.%d, NCCL API %d\n", c / 10000, c / 100 % 100, c % 100, v);
  if (argc > 1 && strcmp(argv[1], "--params") == 0) paramPrintAll(stdout);
  if (argc > 1 && strcmp(argv[1], "--tune") == 0)
    return printTune(argc > 2 ? atoi(argv[2]) : 2, argc > 3 ? atoi(argv[3]) : 1);
  return 0;
}
