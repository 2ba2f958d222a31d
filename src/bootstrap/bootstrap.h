/* Unique id, rendezvous through a root thread, then a mesh of TCP
 * connections between the ranks for out-of-band all-gather, send/recv and
 * barrier; the same connections tell whether a peer is still alive. */
#ifndef CHORUS_BOOTSTRAP_BOOTSTRAP_H
#define CHORUS_BOOTSTRAP_BOOTSTRAP_H
#include "core/forkclose.h"
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/socket.h"
#include "nccl.h"

/* Fixed secret used with NCCL_COMM_ID, where every rank derives the same id. */
#define BOOTSTRAP_COMM_ID_SECRET 0x0280028002800280ull

/* What ncclUniqueId carries (the rest of its 128 bytes is zero). */
struct bootstrapHandle {
  uint64_t secret;
  union sockAddr addr;
  uint32_t flags; /* BOOTSTRAP_ROOT_UP */
};
/* The root was listening before the id existed (ncclGetUniqueId's, not
 * NCCL_COMM_ID's): a refused connection means its rendezvous has ended. */
#define BOOTSTRAP_ROOT_UP 0x1u

/* What each rank tells the others at rendezvous. */
struct bootstrapPeerInfo {
  int rank;
  int pid;
  int cudaDev;
  int shmDisable; /* NCCL_SHM_DISABLE: either side's 1 keeps a pair off shared memory */
  uint64_t nonce;    /* random per rank; rank 0's names the communicator */
  uint64_t hostHash; /* hostname + boot id, or NCCL_HOSTID */
  uint64_t pidNs;    /* machinePidNamespace(): ranks with the same one (not 0) watch each other's pid */
  uint32_t callerTid; /* the thread that called the init (not its setup thread): the root's hello says it */
  uint32_t pad;
  char hostname[64];
  union sockAddr listenAddr;
};

#define BOOTSTRAP_PID_KILL (-2)

struct bootstrap {
  int rank, nranks;
  uint64_t secret;
  int listenFd;
  int *peerFd;      /* mesh connection to each rank, -1 for self */
  struct forkClose forkLink; /* its descriptors, which a forked child closes */
  /* Per peer: a peer in this rank's pid namespace (another process) is
   * watched through its pid too, so that its death is seen even while
   * another process holds its sockets: a pidfd (readable once it has
   * exited), or BOOTSTRAP_PID_KILL where the kernel gave none (kill(pid, 0)
   * says); -1: not watched. */
  int *pidFd;
  char *departed;   /* peer said goodbye: its EOF is no failure */
  struct bootstrapPeerInfo *peers;
  volatile int *abortFlag;
  const int64_t *timeoutMs; /* the communicator's timeout in ms for sends and receives; NULL or 0: CHORUS_TIMEOUT */
  char ifname[64]; /* the interface this rank listens on */
  struct oob *oob;  /* the monitor, once the communicator is up (oob.h) */
  /* Looked at by bootstrapLiveness once no peer is gone (a stalled wait's
   * periodic check): the communicator's own check of its peers' calls
   * (api/watch.c); NULL: none. */
  ncclResult_t (*stallProbe)(void *arg);
  void *stallProbeArg;
  /* Set by ncclCommRevoke: the faults peers report (a timeout, a mismatch)
   * concern the operations the revoke ended, so bootstrapLiveness no longer
   * fails the split or shrink that follows for them; peers that are gone
   * still count. */
  int faultsEnded;
};

/* Fills a handle for ncclGetUniqueId: NCCL_COMM_ID, or a fresh root thread
 * listening on this host with a random secret. */
ncclResult_t bootstrapGetUniqueId(struct bootstrapHandle *h);
/* A fresh root thread with a random secret, whatever NCCL_COMM_ID says
 * (communicators made by splitting another need their own). */
ncclResult_t bootstrapNewRoot(struct bootstrapHandle *h);
/* A handle every rank derives alike from the environment (NCCL_COMM_ID's
 * or MASTER_ADDR/MASTER_PORT's addr): rank 0 hosts its root, and its
 * secret comes from CHORUS_SECRET or CHORUS_SECRET_FILE (else the
 * well-known BOOTSTRAP_COMM_ID_SECRET, said once at INFO: anyone who
 * reaches the port can join then). */
ncclResult_t bootstrapEnvHandle(const char *addr, struct bootstrapHandle *h);
/* The root of h, when this process runs it and no rank has called in yet,
 * ends quietly: nobody will use its id (ncclCommInitRankScalable meets at
 * its first id's root; the others' roots would wait out the timeout). */
void bootstrapRetireRoot(const struct bootstrapHandle *h);
/* The root of h, when this process runs it, refuses its rendezvous with why
 * to every rank checked in and to come, so that they fail at once
 * (ncclCommGrow: the parent's ranks disagreed, and the new ranks wait at
 * the root). */
void bootstrapRefuseRoot(const struct bootstrapHandle *h, const char *why);
/* With NCCL_COMM_ID, rank 0 hosts the root. */
ncclResult_t bootstrapStartRoot(const struct bootstrapHandle *h, int nranks);
/* The root bootstrapStartRoot started for h, when rank 0's init failed or
 * was aborted: it closes its port at once (the ranks checked in are left
 * to their own timeouts), and this returns once it has (at most half a
 * second, through the one wait), so that init may be tried again on the
 * same address straight away. A root that refuses the rendezvous keeps its
 * port a while to refuse late ranks, and is not waited for. */
void bootstrapStopRoot(const struct bootstrapHandle *h);
ncclResult_t bootstrapInit(struct bootstrap *b, const struct bootstrapHandle *h, int rank, int nranks,
                           const struct bootstrapPeerInfo *me, volatile int *abortFlag);
/* A rank that asked for a rank outside 0..nranks-1 tells the root (within
 * a second, best effort). Unless the same process calls in with a good
 * rank within a grace period (it may try again, as NCCL allows), the root
 * then refuses the rendezvous to every rank that comes: they fail with the
 * reason instead of waiting for a rank that never comes. */
void bootstrapReportBadRank(const struct bootstrapHandle *h, int rank, int nranks,
                            const struct bootstrapPeerInfo *me);
/* A process that was handed the rendezvous of h (of nranks) and will not
 * join it (ncclCommShrink: it failed after its leader handed it out) tells
 * its root, which refuses every rank at once, naming it (best effort,
 * within a second). */
void bootstrapReportDisagreement(const struct bootstrapHandle *h, int nranks, const struct bootstrapPeerInfo *me);
/* data holds nranks blocks of size bytes; this rank's block is filled in. */
ncclResult_t bootstrapAllGather(struct bootstrap *b, void *data, size_t size);
ncclResult_t bootstrapSend(struct bootstrap *b, int peer, const void *data, size_t size);
ncclResult_t bootstrapRecv(struct bootstrap *b, int peer, void *data, size_t size);
ncclResult_t bootstrapBarrier(struct bootstrap *b);
/* Collective: how far rank 0's clock (clockNs) is ahead of this rank's,
 * measured over the mesh in rounds round trips per rank, and the bound on
 * that measurement's error (both 0 on rank 0). */
ncclResult_t bootstrapClockOffset(struct bootstrap *b, int rounds, int64_t *offsetNs, uint64_t *errorNs);
/* The liveness check of the one wait: ncclRemoteError, with a WARN naming
 * the rank, host and pid, once a peer has gone without saying goodbye. */
ncclResult_t bootstrapLiveness(void *bootstrap);
/* Nonzero when peer said goodbye: it destroyed (1) or finalized (2) its
 * communicator and will take part in nothing more (enum oobDeparture). */
int bootstrapPeerDeparted(const struct bootstrap *b, int peer);
/* "rank 3 (host b, pid 4711)" into buf. */
const char *bootstrapDescribePeer(const struct bootstrap *b, int peer, char *buf, size_t len);
/* 1 when peer is watched by pid (pidFd) and its process has exited; never
 * blocks. */
int bootstrapPeerExited(const struct bootstrap *b, int peer);
/* 1 when peer's pid, as it reported it at the rendezvous, means the same
 * process here: both said the same pid namespace (machinePidNamespace),
 * known. Only such pids are watched (pidFd) or checked (SO_PEERCRED). */
int bootstrapPidComparable(const struct bootstrap *b, int peer);
/* How many peers are gone (as bootstrapLiveness sees them), quietly. */
int bootstrapGoneCount(struct bootstrap *b);
/* Closes everything; graceful says goodbye first, so peers do not take the
 * closed connections for a failure (ncclCommAbort does not: its peers must
 * see it as gone). */
void bootstrapClose(struct bootstrap *b, int graceful);
uint64_t bootstrapHostHash(void);

#endif
