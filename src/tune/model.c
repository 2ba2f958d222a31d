/* The cost model: time = latency + bytes / bandwidth per algorithm and
 * protocol, with per-hop constants for each kind of link, as NCCL's
 * tuning.cc does for its algorithms. The constants come from
 * bench/tune_check on the 2-core x86-64 development host (every forced
 * NCCL_ALGO x NCCL_PROTO against the default, 2 and 4 ranks; see the
 * README, "Tuning"): a hop through shared memory and over loopback TCP,
 * the rates at which one core copies and reduces through the FIFOs, and
 * what more ranks than cores cost: a scheduling round per hop, and each
 * rank's bytes moved at a share of a core. Over sockets a message costs
 * its two ranks about a hop's worth of CPU (system calls, the kernel's TCP
 * work, a wake-up), so where hosts share a machine's cores (namespaces,
 * containers) a step that every rank takes at once lasts a hop per rank
 * that each core runs (bench/tune_net, 8 ranks on 4 namespaces of 2
 * cores: a ring step 64 us, a round of recursive doubling 65, a tree level,
 * where few ranks move at once, 17). */
#include "algo/algo.h"
#include "engine/desc.h"
#include "topo/topo.h"
#include "tune/tune.h"

/* Microseconds per hop and bytes per microsecond (= MB/s). An LL hop over
 * shared memory moves one cache line less (no tail counter), but a large
 * LL slot is slower: the receiver polls the line the sender is filling.
 * Where each rank has a core, LL moves a message whose steps stay below
 * LL_FAST_BYTES as fast as Simple, and its receiver takes each line as the
 * sender writes it (struct link's stream); elsewhere, and where ranks
 * share cores, it is LL_BYTE_FACTOR slower. bench/tune_check -n 2,
 * 2026-12-05: LL 5-30% faster than Simple for every collective at 1-4 KiB
 * and all but Broadcast at 8 KiB, 2x slower at 128 KiB. But a Simple step
 * of LL_FAST_BYTES or more may carry a reference to ncclMemAlloc's memory,
 * read in place (the engine's ENGINE_REF_MIN; -R 1: an AllGather of 2 x 4
 * KiB by Ring/Simple 0.64 us, by OneHop/LL 1.04), which the model cannot
 * see: there the old factor keeps Simple. 4 ranks on 2 cores: LL as often
 * ahead as behind. */
#define SHM_HOP_US 0.25
#define SHM_LL_HOP_US 0.20
#define LL_BYTE_FACTOR 1.3
#define LL_FAST_BYTES 4096
#define NET_HOP_US 15.0
#define OVERSUB_HOP_US 1.5 /* per extra rank a core runs */
#define SHM_COPY_BPUS 6000.0
#define SHM_REDUCE_BPUS 3500.0
#define NET_BPUS 1000.0
/* Over sockets each message is system calls and a wake-up on both sides:
 * OneHop's n-1 messages each way cost more than its one hop (measured by
 * bench/tune_net, 8 ranks on 4 namespaces: OneHop 2 ms at 8 B-8 KiB, the
 * slowest; recursive doubling 0.9-1.0 ms). */
#define NET_MSG_US 10.0
/* A ring step, beyond the hop: the engine checks the descriptor, waits for
 * room and the peer's slot, and cuts the step into slots. */
#define RING_STEP_US 0.35
/* A tree level costs twice a ring step (two tasks per rank, pieces), and
 * an inner node moves its two children's data through one core. */
#define TREE_LEVEL_FACTOR 2.0
#define TREE_COPY_PASSES 4.0
/* Recursive doubling among hosts sends the whole message each round, the
 * rounds one after another: at 128 KiB it took 3.7x Rabenseifner's time for
 * 1.3x its bytes per host, at 32 KiB the same as Tree and Rabenseifner
 * (the same runs, /tmp/tn2/ab2.sh). */
#define RD_NET_FACTOR 2.0

struct link {
  double hop, copy, reduce;
  double local; /* a hop between two ranks of one host (hop where hosts are one rank or all is sockets) */
  double share; /* ranks per core when a host has more ranks than cores, else 1 */
  double busy;  /* over sockets, ranks per core when their machine has more ranks than cores, else 1 */
  int stream;   /* LL with a core per rank: a receiver takes each line as it is written */
};

/* Over sockets, the share of a step's hop its ranks pay when a fraction f
 * of them move at once: only those compete for the machine's cores (a
 * small message leaves most blocks of a ring or segments of Rabenseifner
 * empty, and a step with nothing to move sends nothing; bench/tune_net:
 * a ring AllReduce of 8 B, one block, 160 us, of 512 B, eight, 750). */
static double busyAt(const struct link *l, double f) {
  double b = l->busy * f;
  return b > 1 ? b : 1;
}

/* A hop between two ranks of one host when a fraction f of the ranks move
 * at once: over shared memory l.local already counts the ranks waiting for
 * the cores; where a host's ranks talk over sockets (NCCL_SHM_DISABLE) it is
 * a socket hop, and those compete for the cores as any other. */
static double localHop(const struct link *l, const struct tuneTopo *t, double f) {
  return t->hostNet ? l->local * busyAt(l, f) : l->local;
}

/* Blocks of a message cut into n, each a multiple of 64 bytes
 * (channelPart), that hold something. */
static double blocksUsed(size_t bytes, int n) {
  size_t per = (bytes + n - 1) / n;
  per = (per + 63) / 64 * 64;
  return per ? (double)((bytes + per - 1) / per) : 0;
}

/* The largest step of a Simple schedule of coll over n ranks (a ring
 * AllReduce's block; the others move the whole message, or each rank's). */
static double stepBytes(int coll, double n, double b) { return coll == collAllReduce ? b / n : b; }

static struct link linkOf(const struct tuneTopo *t, int coll, int proto, size_t bytes) {
  struct link l = {proto == protoLL ? SHM_LL_HOP_US : SHM_HOP_US, SHM_COPY_BPUS, SHM_REDUCE_BPUS, 0, 1.0, 1.0, 0};
  int shared = t->localRanks > t->cores && t->cores > 0;
  if (proto == protoLL) {
    l.stream = !shared && !t->net && stepBytes(coll, t->nranks, (double)bytes) < LL_FAST_BYTES;
    l.copy /= l.stream ? 1.0 : LL_BYTE_FACTOR;
    l.reduce /= l.stream ? 1.0 : LL_BYTE_FACTOR;
  }
  if (shared) {
    l.hop += OVERSUB_HOP_US * (double)(t->localRanks - t->cores);
    l.share = (double)t->localRanks / t->cores;
  }
  l.local = l.hop;
  if (t->net) { /* over sockets every protocol is the transport's framing */
    l.hop = NET_HOP_US;
    if (t->nhosts == 1 || t->localRanks == 1 || t->hostNet) l.local = l.hop;
    else if (t->machineRanks > t->cores && t->cores > 0) /* the peer a shared-memory hop wakes waits its turn */
      l.local += OVERSUB_HOP_US * (double)(t->machineRanks - t->cores);
    l.copy = l.reduce = NET_BPUS; /* what a socket moves: a core's work, or the link's speed */
    if (t->netMbps > 0 && t->netMbps / 8.0 < l.copy) l.copy = l.reduce = t->netMbps / 8.0;
    if (t->machineRanks > t->cores && t->cores > 0) l.busy = (double)t->machineRanks / t->cores;
  }
  l.copy /= l.share;
  l.reduce /= l.share;
  return l;
}

/* Two ranks of one host, through the FIFOs. AllReduce: the ring (and
 * Rabenseifner, which is the ring for two) halves the work only where each
 * reads its peer's buffer where it lies and writes both outputs (ncclMemAlloc's memory,
 * algoMappedSends: the ring's per-byte term). Through the FIFOs each rank
 * still copies out its half, reduces, and copies the peer's result in,
 * bytes for bytes what recursive doubling's one exchange moves, in two
 * steps where that takes one: bench/tune_check -n 2, 2026-12-05, plain
 * buffers, recursive doubling against Ring/Simple: 8 KiB 1.84 against 2.46
 * us, 32 KiB 3.84 against 5.39, 128 KiB 13.5 against 14.9, 1 MiB 107
 * against 116, from 2 MiB within 3% either way. From 128 KiB, where
 * plain buffers gain at most 10%, the ring stays, for what it gains where
 * the memory is mapped after all (-R 1, no window: 1.2-1.4x). Which
 * memory a call's buffers are is each rank's own knowledge, which the
 * choice may not depend on, unless every rank is known to use the same:
 * symmetric windows (mapped). */
#define PAIR_FIFO_MAX_BYTES (128u << 10)
static int pairThroughFifos(const struct tuneTopo *t, int coll, size_t bytes, int mapped) {
  return t->nranks == 2 && !t->net && !mapped && bytes < PAIR_FIFO_MAX_BYTES;
}

/* Where ranks share cores, the copies of OneHop and recursive doubling,
 * whose rounds pair ranks, queue for the cores a second time (their bytes
 * at a share of a share: every rank's part waits for all of them, or for
 * its round's partner), except where measured otherwise:
 * - AllReduce: its bytes, copied and reduced in each round (recursive
 *   doubling) or from each peer (OneHop), already outweigh the ring's,
 *   which reduces 2 (n - 1) / n of them. bench/tune_check -n 4 -i 1000, 4
 *   ranks on 2 cores, 2026-12-06, two runs: AllReduce 8 KiB RecDoubling
 *   5.1-6.9 us, OneHop 7.1-7.5, Ring 9.3-10.2 (the model, charging both
 *   twice, picked Ring: 1.4x the best); 2 KiB OneHop 3.6-3.9, RecDoubling
 *   3.2-4.2, Ring 7.1-7.4; 32 KiB all three 15-18; 128 KiB-32 MiB
 *   recursive doubling 1.2-1.6x the ring's time (-i 20), below the 2.1x
 *   the model still gives it.
 * - AllGather while its output stays in the cache (below the size from
 *   which the engine writes outputs past it, CHORUS_NT_STORES' default:
 *   twice the L3 over the host's ranks): recursive doubling's later rounds
 *   pair ranks placed on one core (init places rank i on CPU i mod
 *   cores), which exchange through its cache. bench/tune_check, -r 5 -i
 *   300 and -r 3 -i 100, 2026-12-06: 4 ranks on 2 cores, 32 KiB-8 MiB,
 *   5.6-1341 us against the ring's 7.7-1383 (1.03-1.37x faster), 32 MiB
 *   1.12-1.2x the ring's time; 8 ranks, 64 KiB-2 MiB 1.0-1.3x faster, 8
 *   MiB 1.5x the ring's time. The model, charging it twice, had picked the
 *   ring from 32 KiB.
 * ReduceScatter, and AllGather past the cache, pay a quarter more, not the
 * share again: recursive halving moves the ring's bytes in fewer steps,
 * measured 0.85x the ring's time at 32 KiB and 1.2-1.3x from 512 KiB on 4
 * ranks, 0.7-0.9x at 8-64 KiB, even at 128-256 KiB and 1.2-1.8x from 512
 * KiB on 8; the full share (2x and 4x) put the crossing at 14 and 13 KiB. */
#define PAIR_SHARED_BYTE_FACTOR 1.25
static double pairQueue(const struct link *l, const struct tuneTopo *t, int coll, size_t bytes) {
  if (l->share <= 1 || coll == collAllReduce) return 1;
  double output = (double)bytes * t->nranks; /* AllGather's, of a rank's block */
  if (coll == collAllGather && output < (double)topoPastCacheBytes(t->cacheBytes, t->localRanks)) return 1;
  return PAIR_SHARED_BYTE_FACTOR;
}

/* floor(log2(n)) for n >= 1. */
static int log2Floor(int n) {
  int k = 0;
  while ((2 << k) <= n) k++;
  return k;
}

double tuneModelUs(const struct tuneTopo *topo, int coll, int algo, int proto, int nch, size_t bytes, int mapped) {
  (void)nch;
  struct link l = linkOf(topo, coll, proto, bytes);
  double n = topo->nranks, b = (double)bytes;
  double hopAll = l.hop * l.busy; /* a hop of a step that every rank takes at once */
  if (pairThroughFifos(topo, coll, bytes, mapped)) {
    if (coll == collAllReduce && (algo == algoRing || algo == algoRabenseifner))
      return 2 * (hopAll + RING_STEP_US) + l.share * (b / l.copy + b / l.reduce);
    /* AllGather and ReduceScatter: the ring and recursive doubling are, for
     * two ranks, what OneHop is, one block each way; each pays the sender's
     * copy into the FIFO as OneHop's posting does, beside the receiver's
     * (bench/tune_check -n 2, 2 x 4 KiB, plain: AllGather Ring/Simple 1.31
     * us, RecDoubling/Simple 1.51, OneHop/Simple 1.21; ReduceScatter 1.54,
     * 1.52, 1.34; the model, charging those two only the receiver's copy,
     * had them ahead) */
    if ((coll == collAllGather || coll == collReduceScatter) && (algo == algoRing || algo == algoRecDoubling))
      return hopAll + RING_STEP_US + l.share * (b / l.copy + b / (coll == collAllGather ? l.copy : l.reduce));
  }
  switch (algo) {
    case algoLocal: return b / SHM_COPY_BPUS;
    case algoOneHop: { /* one hop; each rank posts its input (a block) n-1 times and reduces (or,
                        * AllGather, copies out) n-1, and when ranks share cores all those copies
                        * queue for them (but see pairQueue); a Broadcast's root
                        * alone posts (under CHORUS_CHECK in the agreement's tokens, which the
                        * other algorithms send as well), and no other rank's copies queue with
                        * its posting: 4 ranks on 2 cores, 16 KiB, OneHop 4.1-5.8 us against
                        * Chain's 5.1-6.0, when the model, charging the root's copies twice, put
                        * OneHop at 3x Chain's time (bench/tune_check -n 4, 2026-12-06) */
      if (coll == collBroadcast) return l.hop + (n - 1) * b / l.copy + (topo->net ? (n - 2) * NET_MSG_US : 0);
      double post = (n - 1) * b / l.copy, take = (n - 1) * b / (coll == collAllGather ? l.copy : l.reduce);
      /* Streaming (LL, a core per rank), the peers' posting and this rank's
       * taking overlap (2 ranks, 8 KiB, OneHop/LL: AllReduce 1.75 us against
       * Ring/LL's 2.2, ReduceScatter 1.12 against 1.27, AllGather 1.07
       * against 1.18; bench/tune_check -n 2). */
      double work = l.stream ? (post > take ? post : take) : post + take;
      return hopAll + pairQueue(&l, topo, coll, bytes) * work + (topo->net ? 2 * (n - 2) * NET_MSG_US * l.busy : 0);
    }
    case algoRing: {
      /* AllReduce's blocks are the message's n parts; over sockets a step
       * moves as many blocks at once as hold something, and one that moves
       * a single block across a host's ranks costs a hop within the host
       * (the ring visits a host's ranks together: one hop in localRanks
       * leaves the host) */
      double ringHop = hopAll;
      if (coll == collAllReduce && topo->net) {
        double used = blocksUsed(bytes, topo->nranks), across = used * topo->nhosts / n;
        ringHop = l.hop * busyAt(&l, used / n);
        if (across < 1) ringHop = across * ringHop + (1 - across) * l.local;
      }
      if (coll == collAllReduce) return 2 * (n - 1) * (ringHop + RING_STEP_US) + 2 * (n - 1) / n * b / l.reduce;
      return (n - 1) * (hopAll + RING_STEP_US) + (n - 1) * b / (coll == collReduceScatter ? l.reduce : l.copy);
    }
    case algoChain: /* pipelined: the whole message once, plus filling the chain */
      return (n - 1) * (l.hop + RING_STEP_US) + b / (coll == collReduce ? l.reduce : l.copy);
    case algoTree: { /* log2(n) levels, up and down for AllReduce; across hosts log2(hosts)
                      * levels and a chain of each host's ranks */
      double depth = 0, chain = 0;
      int nodes = topo->nhosts > 1 && topo->nhosts < topo->nranks ? topo->nhosts : topo->nranks;
      while ((1 << (int)depth) < nodes) depth++;
      if (nodes < topo->nranks) chain = topo->localRanks - 1;
      double lat = TREE_LEVEL_FACTOR * (depth * (l.hop + RING_STEP_US) + chain * (l.local + RING_STEP_US));
      if (coll == collAllReduce) return 2 * lat + b / l.reduce + TREE_COPY_PASSES * b / l.copy;
      return lat + (coll == collReduce ? 2 * b / l.reduce : TREE_COPY_PASSES / 2 * b / l.copy);
    }
    case algoRecDoubling: { /* log2 rounds (two more hops when n is no power of two); a round's
                             * partners must run at once, so ranks sharing cores move its
                             * bytes at a share of a share (but see pairQueue) */
      if (coll == collAllReduce && topo->nhosts > 1 && topo->nhosts < topo->nranks) {
        /* host by host (recdouble.c): a hop within each host to its first rank and back (a
         * shared-memory hop, which already counts the ranks waiting for the cores: localHop),
         * and log2(hosts) rounds of those first ranks, one per host, over the hosts' links
         * (bench/tune_net, 8 ranks on 4 namespaces, 2000 calls: the fastest from 8 B to 8 KiB,
         * 51-54 us at 8-128 B against Rabenseifner's 54-62 and Tree's 57-81) */
        double h = topo->nhosts, local = topo->localRanks - 1;
        double rounds = log2Floor(topo->nhosts), fold = (1 << (int)rounds) != topo->nhosts ? 2 : 0;
        return 2 * (localHop(&l, topo, (n - h) / n) + RING_STEP_US) +
               (rounds + fold) * (l.hop * busyAt(&l, h / n) + RING_STEP_US) +
               RD_NET_FACTOR * (rounds + fold) * b / l.copy + l.share * local * b * (1 / SHM_REDUCE_BPUS + 1 / SHM_COPY_BPUS);
      }
      double rounds = log2Floor(topo->nranks), fold = (1 << (int)rounds) != topo->nranks ? 2 : 0;
      double lat = (rounds + fold) * (hopAll + RING_STEP_US);
      if (coll == collAllReduce) return lat + pairQueue(&l, topo, coll, bytes) * (rounds + fold) * (b / l.copy + b / l.reduce);
      return lat + pairQueue(&l, topo, coll, bytes) * (n - 1 + fold) * b / (coll == collReduceScatter ? l.reduce : l.copy);
    }
    case algoRabenseifner: { /* halving then doubling: 2 log2 rounds (two more hops to fold), moving
                              * 2 (p - 1) / p of the message and reducing (p - 1) / p of it */
      double rounds = log2Floor(topo->nranks), p = (double)(1 << (int)rounds), fold = p != n ? 2 : 0;
      double lat = (2 * rounds + fold) * (hopAll + RING_STEP_US);
      if (topo->net) { /* halving round t moves segments to half the ranks, or to every rank that
                        * holds a segment with something in it, whichever is more; doubling
                        * mirrors it; the first rounds pair neighbours: within a host */
        double used = blocksUsed(bytes, (int)p), within = log2Floor(topo->localRanks);
        lat = fold * (l.local + RING_STEP_US);
        for (int t = 1; t <= (int)rounds; t++) {
          double f = used * (1 << t) / p, hop = t <= within && topo->nhosts > 1 ? l.local : l.hop;
          /* a first round within a host moves every rank at once, so even its shared-memory hop
           * pays the cores' share (charged so, the model's order matched bench/tune_net's at
           * 8-128 B; without it Rabenseifner ties recursive doubling there, measured 20% slower) */
          lat += 2 * (hop * busyAt(&l, (f > 1 ? f : 1) / (1 << t)) + RING_STEP_US);
        }
      }
      return lat + l.share * ((p - 1) / p * b * (2 / l.copy + 1 / l.reduce) + fold * b / l.copy);
    }
    case algoP2p: return l.hop + b / l.copy;
    case algoPairwise: /* every pair at once: each rank posts n-1 blocks */
      return l.hop + (n - 1) * b / l.copy;
    default: return -1;
  }
}
