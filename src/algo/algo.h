/* The algorithm registry (DESIGN.md invariants 1 and 5): one family per
 * file in src/algo/, each saying which collectives and rank counts it
 * supports and building their schedules. A builder turns one operation
 * into tasks of primitive steps over the communicator's connections and
 * moves no byte itself; it reads of a connection only its slot geometry,
 * so a schedule can be built for any rank of any size without a live
 * communicator (tests/test_schedule.c). */
#ifndef CHORUS_ALGO_ALGO_H
#define CHORUS_ALGO_ALGO_H
#include "engine/desc.h"
#include "engine/schedule.h"

struct collDesc {
  int coll;
  const void *sendbuff;
  void *recvbuff;
  size_t count; /* per-rank count for AllGather / ReduceScatter */
  int dtype;
  struct redOp red;
  int root; /* root for rooted collectives, peer for send/recv */
  struct opDesc check; /* what the first slot on each connection carries */
};

/* What a builder needs of the communicator. laneLast[] holds, for the
 * schedule being built, the last task on each lane (-1: none): lanes
 * 0..nch-1 are collective channels, then nranks send lanes, then nranks
 * receive lanes. */
struct algoCtx {
  int rank, nranks;
  struct connTable *conns;
  struct bootstrap *boot;
  volatile int *abortFlag;
  char *scratch; /* COMM_SCRATCH_BYTES, for in-place one-hop (tune keeps it below) */
  int *laneLast;
  int check; /* CHORUS_CHECK: rooted collectives add an agreement of all ranks (agree.c) */
  const int *hostOf; /* each rank's host 0..nhosts-1 (NULL: all on one) */
  int nhosts;
  /* The order rings and chains visit the ranks in: position -> rank and
   * rank -> position (NULL: rank order). algoRingOrder makes it. */
  const int *ringOrder, *ringPos;
  const int *hostFirst; /* each host's first rank (algoHostFirst); NULL where hostOf is */
};

struct algoFamily {
  /* 1 when it builds coll (enum collType) for nranks ranks. */
  int (*supports)(int coll, int nranks);
  /* Builds d over nch channels (1 for the families that use one lane).
   * Returns ncclSystemError when out of memory. */
  ncclResult_t (*build)(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch);
  /* 1 when every send of coll's schedules reads memory that the operation
   * does not write after the send (the caller's input, or output written
   * once, before it is sent on): a receiver may then read the data where
   * it is until the operation ends (single copy). NULL: never. */
  int (*stableSends)(int coll);
  /* 1 when receivers may read d's sends where they lie, and reduce from
   * them, if they map the sender's memory (ncclMemAlloc's): every send
   * that may be a reference reads memory not written again before it is
   * read. NULL: only where stableSends says so. */
  int (*mappedSends)(const struct collDesc *d, int nranks);
  /* 1 when its build of coll for nranks ranks is the CHORUS_CHECK agreement
   * itself, its data in the tokens (algoCtx.check says whether to build
   * one), so none is built before it. NULL: never. */
  int (*agrees)(int coll, int nranks);
};

/* The AllReduce tree of channel ch (tree ch % 2, rooted at rank 0) around
 * c->rank: its parent (-1 at the root) and children (-1 where there are
 * fewer than 3), as NCCL's "Trees" init line shows them. */
void algoTreeLinks(const struct algoCtx *c, int ch, int *parent, int kids[3]);

/* The host-aware ring order of n ranks: all ranks of a host, in rank order,
 * before the next host's (hosts in the order of their first rank), so a
 * ring crosses between hosts once per host, not once per rank. Fills
 * order[pos] = rank and pos[rank]. */
void algoRingOrder(const int *hostOf, int n, int *order, int *pos);

/* first[h] = the first rank of host h, for the nhosts hosts of hostOf
 * (numbered in the order of their first rank). */
void algoHostFirst(const int *hostOf, int n, int nhosts, int *first);

/* The family of an algorithm (enum algoId, named in engine/desc.h), or NULL. */
const struct algoFamily *algoFamily(int algo);
/* 1 when algo builds coll for nranks ranks. */
int algoSupports(int algo, int coll, int nranks);
/* 1 when algo's sends for coll may be read where they are (stableSends). */
int algoStableSends(int algo, int coll);
/* Its mappedSends. */
int algoMappedSends(int algo, const struct collDesc *d, int nranks);
/* Builds the schedule of one operation with the given algorithm over nch
 * channels (with c->check, a rooted collective's agreement first, unless
 * the family folds it into its own build: algoFamily.agrees).
 * ncclInternalError when the algorithm does not support it (the tuner
 * never asks), ncclSystemError when out of memory. */
ncclResult_t algoBuild(struct schedule *s, struct algoCtx *ctx, const struct collDesc *d, int algo, int nch);

#endif
