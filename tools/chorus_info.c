/* chorus-info: what this build is, which parameters are in effect, and
 * what the tuner would choose.
 *   chorus-info [--params]
 *   chorus-info --tune [NRANKS [HOSTS [MACHINES [LINK_MBPS]]]]   the cost
 *       model's table: for each collective and size, the predicted time of
 *       every algorithm/protocol and the tuner's choice (NCCL_ALGO /
 *       NCCL_PROTO / CHORUS_* as set); MACHINES (default HOSTS): how many
 *       machines the hosts run on, each with this one's cores (hosts that
 *       are network namespaces or containers of one machine share its
 *       cores); LINK_MBPS: the hosts' link speed in Mb/s (default unknown,
 *       as for an interface whose speed sysfs does not give); the choice is
 *       after NCCL_TUNER_PLUGIN's plugin where one is set
 *   chorus-info --topo   under a launcher (chorusrun, mpirun, srun,
 *       torchrun): how each pair of ranks is connected and what each rank
 *       sees of its host, printed by rank 0 (nvidia-smi topo -m's shape) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo/algo.h"
#include "api/comm.h"
#include "chorus.h"
#include "core/log.h"
#include "core/param.h"
#include "reduce/reduce.h"
#include "topo/topo.h"
#include "transport/conn.h"
#include "transport/transport.h"
#include "tune/tune.h"

static int printTune(int nranks, int hosts, int machines, int linkMbps) {
  if (nranks < 1 || hosts < 1 || hosts > nranks || machines < 1 || machines > hosts) {
    fprintf(stderr, "chorus-info --tune: need 1 <= MACHINES <= HOSTS <= NRANKS\n");
    return 2;
  }
  struct topoRank here; /* this machine's L3 */
  topoDiscover(&here, 0);
  struct tuneTopo topo = {nranks, hosts, (nranks + hosts - 1) / hosts, (int)sysconf(_SC_NPROCESSORS_ONLN), hosts > 1,
                          (nranks + machines - 1) / machines, 0, linkMbps, topoCacheBytes(here.l3KiB)};
  struct tuneConfig cfg;
  tuneConfigFromEnv(&cfg);
  struct tuneTable t;
  if (tuneSetup(&t, &cfg, &topo) != ncclSuccess) { /* said whatever NCCL_DEBUG is */
    fprintf(stderr, "chorus-info --tune: %s\n", logThreadLastError());
    return 1;
  }
  /* A tuner plugin has its say in the choice column, as in a communicator
   * (the fewest ranks on a host: the ranks spread evenly). */
  if (tunePluginInit(&t, 0, nranks / hosts) != ncclSuccess) {
    fprintf(stderr, "chorus-info --tune: %s\n", logThreadLastError());
    return 1;
  }
  struct conn geometry; /* the FIFO slots NCCL_BUFFSIZE gives */
  int64_t buff = paramInt(paramBuffSize);
  if (buff > COMM_MAX_BUFFSIZE) buff = strtoll(paramDefault(paramBuffSize), NULL, 10); /* as a communicator does */
  connLayout(&geometry, NULL, (size_t)(buff < 65536 ? 65536 : buff), 0);
  size_t slot = geometry.slotBytes < COMM_SCRATCH_BYTES ? geometry.slotBytes : COMM_SCRATCH_BYTES;
  int nch = (int)(paramInt(paramMaxNChannels) > 0 ? paramInt(paramMaxNChannels) : 2);
  printf("# %d rank(s) on %d host(s), at most %d per host, %d core(s)", nranks, hosts, topo.localRanks, topo.cores);
  if (machines < hosts) printf(" per machine, %d machine(s)", machines);
  if (hosts > 1 && linkMbps > 0) printf(", %d Mb/s links", linkMbps);
  printf("; times in us predicted by the model\n");
  if (t.plugin) printf("# choices after the tuner plugin NCCL_TUNER_PLUGIN=%s\n", paramStr(paramTunerPlugin));
  for (int coll = 0; coll < tuneFuncCount; coll++) {
    int cand[algoCount * protoCount][2], nc = 0;
    for (int a = 0; a < algoCount; a++)
      for (int p = 0; p < protoCount; p++)
        if (algoSupports(a, coll, nranks) && tuneModelUs(&topo, coll, a, p, 1, 8, 0) >= 0) {
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
      for (int k = 0; k < nc; k++) printf(" %16.2f", tuneModelUs(&topo, coll, cand[k][0], cand[k][1], 1, bytes, 0));
      struct tuneChoice c;
      if (tuneChoose(&t, coll, count, 4, ncclFloat, slot, nch, 0, &c) == ncclSuccess)
        printf("   %s/%s %d ch %.2f\n", algoName(c.algo), protoName(c.proto), c.nch, c.us);
      else
        printf("   none\n");
    }
  }
  tunePluginFinalize(&t);
  return 0;
}

/* How ranks a and b are connected: SELF, SHM (with the NUMA distance of
 * their nodes when the host has several) or NET (the interface). */
static void linkStr(const struct topoRank *t, const unsigned char *via, int n, int a, int b, char *out, size_t len) {
  const struct transport *tp = transportTable[via[a * n + b] % TRANSPORT_COUNT];
  if (tp == &selfTransport) {
    snprintf(out, len, "SELF");
  } else if (tp == &netTransport) {
    snprintf(out, len, "NET/%s", t[a].ifname);
  } else if (t[a].numaNodes > 1 && t[a].numa >= 0 && t[b].numa >= 0 && t[a].numa < TOPO_MAX_NUMA &&
             t[b].numa < TOPO_MAX_NUMA) {
    snprintf(out, len, "SHM/%d", t[a].numaDistance[t[a].numa][t[b].numa]);
  } else {
    snprintf(out, len, "SHM");
  }
}

static int printTopo(void) {
  ncclComm_t comm;
  if (chorusCommInitFromEnv(&comm) != ncclSuccess) {
    fprintf(stderr, "chorus-info --topo: run it under a launcher (chorusrun -n N chorus-info --topo, mpirun, srun, "
                    "torchrun): %s\n", ncclGetLastError(NULL));
    return 1;
  }
  int n = comm->nranks, me = comm->rank;
  struct topoRank *t = calloc((size_t)n, sizeof *t);
  unsigned char *via = calloc((size_t)n * (size_t)n, 1); /* via[a * n + b]: the transport a reaches b with */
  if (!t || !via) return 1;
  topoDiscover(&t[me], 1);
  snprintf(t[me].ifname, sizeof t[me].ifname, "%.15s", comm->boot.ifname);
  for (int b = 0; b < n; b++) via[me * n + b] = (unsigned char)transportFor(&comm->boot, b);
  /* Every rank's view and the transports it uses, over the communicator itself. */
  ncclResult_t res = ncclAllGather(&t[me], t, sizeof *t, ncclUint8, comm, NULL);
  if (res == ncclSuccess) res = ncclAllGather(&via[me * n], via, (size_t)n, ncclUint8, comm, NULL);
  if (res == ncclSuccess && me == 0) {
    int w = 8;
    for (int a = 0; a < n; a++) {
      size_t l = strlen(t[a].ifname) + 5;
      if ((int)l > w) w = (int)l;
    }
    printf("# chorus-info --topo: %d rank(s) on %d host(s); SHM/d: shared memory with the NUMA distance d, NET/if: "
           "sockets over interface if\n%-8s", n, comm->nhosts, "");
    for (int b = 0; b < n; b++) {
      char h[16];
      snprintf(h, sizeof h, "rank%d", b);
      printf(" %*s", w, h);
    }
    printf("  %-16s %-5s %-10s %s\n", "host", "NUMA", "CPUs", "NICs");
    for (int a = 0; a < n; a++) {
      char h[16];
      snprintf(h, sizeof h, "rank%d", a);
      printf("%-8s", h);
      for (int b = 0; b < n; b++) {
        char l[40];
        linkStr(t, via, n, a, b, l, sizeof l);
        printf(" %*s", w, l);
      }
      char nics[200] = "";
      size_t o = 0;
      for (int k = 0; k < t[a].nnics && o < sizeof nics - 40; k++)
        o += (size_t)snprintf(nics + o, sizeof nics - o, "%s%s(NUMA %d)", k ? "," : "", t[a].nics[k].name,
                              t[a].nics[k].numa);
      printf("  %-16s %-5d %-10s %s\n", comm->boot.peers[a].hostname, t[a].numa, t[a].cpus, o ? nics : "-");
    }
    for (int h = 0; h < comm->nhosts; h++)
      for (int a = 0; a < n; a++)
        if (comm->hostOf[a] == h) {
          char host[400];
          topoHostStr(&t[a], host, sizeof host);
          printf("# host %s (%s): %s\n", comm->boot.peers[a].hostname, t[a].source, host);
          break;
        }
  }
  free(t);
  free(via);
  ncclCommDestroy(comm);
  return res == ncclSuccess ? 0 : 1;
}

static const char usage[] =
    "usage: chorus-info [--params | --tune [NRANKS [HOSTS [MACHINES [LINK_MBPS]]]] | --topo]\n"
    "  --topo  under a launcher (chorusrun -n 4 chorus-info --topo): how each pair of ranks is\n"
    "          connected (SELF, SHM/NUMA distance, NET/interface) and each rank's host, NUMA node, CPUs, NICs\n";

/* A whole positive number, else -1. */
static int count(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  return *s && !*end && v > 0 && v <= 1 << 20 ? (int)v : -1;
}

/* An argument chorus-info does not take: said, with the usage, exit status 2. */
static int badUsage(const char *what, const char *arg) {
  fprintf(stderr, "chorus-info: %s '%s'\n%s", what, arg, usage);
  return 2;
}

int main(int argc, char **argv) {
  int v, c;
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("%s", usage);
    return 0;
  }
  const char *mode = argc > 1 ? argv[1] : "";
  int most = strcmp(mode, "--tune") == 0 ? 6 : 2; /* --tune takes NRANKS, HOSTS, MACHINES and LINK_MBPS */
  if (mode[0] && strcmp(mode, "--params") != 0 && strcmp(mode, "--tune") != 0 && strcmp(mode, "--topo") != 0)
    return badUsage("unknown option", mode);
  if (argc > most) return badUsage("unexpected argument", argv[most]);
  for (int k = 2; k < argc; k++)
    if (count(argv[k]) < 0)
      return badUsage(k == 2   ? "NRANKS is not a positive number:"
                      : k == 3 ? "HOSTS is not a positive number:"
                      : k == 4 ? "MACHINES is not a positive number:"
                               : "LINK_MBPS is not a positive number:",
                      argv[k]);
  if (strcmp(mode, "--topo") == 0) return printTopo();
  ncclGetVersion(&v);
  chorusGetVersion(&c);
  printf("chorus %d.%d.%d, NCCL API %d\n", c / 10000, c / 100 % 100, c % 100, v);
  if (strcmp(mode, "--params") == 0) paramPrintAll(stdout);
  if (strcmp(mode, "--tune") == 0) {
    int hosts = argc > 3 ? count(argv[3]) : 1;
    return printTune(argc > 2 ? count(argv[2]) : 2, hosts, argc > 4 ? count(argv[4]) : hosts,
                     argc > 5 ? count(argv[5]) : 0);
  }
  return 0;
}
