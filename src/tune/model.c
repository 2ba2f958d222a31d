/* The cost model: time = latency + bytes / bandwidth per algorithm and
 * protocol, with per-hop constants for each kind of link, as NCCL's
 * tuning.cc does for its algorithms. The constants were measured on a
 * 2-core x86-64 host with bench/tune_check (see the README, "Tuning"): a
 * hop through shared memory, a hop over loopback TCP, and the rates at
 * which one core copies and reduces through the FIFOs. When a host has
 * more ranks than cores, ranks take turns on them and every hop costs a
 * scheduling round. */
#include "algo/algo.h"
#include "engine/desc.h"
#include "tune/tune.h"

/* Microseconds per hop and bytes per microsecond (= MB/s). An LL hop
 * over shared memory moves one cache line less (no tail counter). */
#define SHM_HOP_US 0.25
#define SHM_LL_HOP_US 0.15
#define NET_HOP_US 15.0
#define OVERSUB_HOP_US 1.5 /* per extra rank a core runs */
#define SHM_COPY_BPUS 6000.0
#define SHM_REDUCE_BPUS 3500.0
#define NET_BPUS 1000.0
/* A ring step, beyond the hop: the engine checks the descriptor, waits for
 * room and the peer's slot, and cuts the step into slots. */
#define RING_STEP_US 0.35

struct link {
  double hop, copy, reduce;
};

static struct link linkOf(const struct tuneTopo *t, int proto) {
  struct link l = {proto == protoLL ? SHM_LL_HOP_US : SHM_HOP_US, SHM_COPY_BPUS, SHM_REDUCE_BPUS};
  if (t->localRanks > t->cores && t->cores > 0) l.hop += OVERSUB_HOP_US * (double)(t->localRanks - t->cores);
  if (t->net) { /* over sockets every protocol is the transport's framing */
    l.hop = NET_HOP_US;
    l.copy = l.reduce = NET_BPUS;
  }
  return l;
}

double tuneModelUs(const struct tuneTopo *topo, int coll, int algo, int proto, int nch, size_t bytes) {
  (void)nch;
  struct link l = linkOf(topo, proto);
  double n = topo->nranks, b = (double)bytes;
  switch (algo) {
    case algoLocal: return b / SHM_COPY_BPUS;
    case algoOneHop: /* one hop; each rank posts its input n-1 times and reduces n inputs */
      return l.hop + (n - 1) * b / l.copy + (n - 1) * b / l.reduce;
    case algoRing:
      if (coll == collAllReduce) return 2 * (n - 1) * (l.hop + RING_STEP_US) + 2 * (n - 1) / n * b / l.reduce;
      return (n - 1) * (l.hop + RING_STEP_US) + (n - 1) * b / (coll == collReduceScatter ? l.reduce : l.copy);
    case algoChain: /* pipelined: the whole message once, plus filling the chain */
      return (n - 1) * (l.hop + RING_STEP_US) + b / (coll == collReduce ? l.reduce : l.copy);
    case algoTree: { /* log2(n) levels; an inner node takes in and sends out two children's worth;
                      * AllReduce goes up and down, its two trees each carrying half */
      double depth = 0;
      while ((1 << (int)depth) < topo->nranks) depth++;
      if (coll == collAllReduce) return 2 * depth * (l.hop + RING_STEP_US) + b / l.reduce + 2 * b / l.copy;
      return depth * (l.hop + RING_STEP_US) + 2 * b / (coll == collReduce ? l.reduce : l.copy);
    }
    case algoP2p: return l.hop + b / l.copy;
    case algoPairwise: /* every pair at once: each rank posts n-1 blocks */
      return l.hop + (n - 1) * b / l.copy;
    default: return -1;
  }
}
