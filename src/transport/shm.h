/* Shared-memory transport between ranks on one host (processes or threads),
 * behind the transport table as shmTransport:
 * each rank's receive FIFOs live in one memfd segment, handed to local peers
 * over an abstract Unix socket (SCM_RIGHTS), to a connection only once it
 * has shown it is one (shm.c: user, token, pid). Nothing is ever created in
 * /dev/shm, so nothing can be left there, SIGKILL included. */
#ifndef CHORUS_TRANSPORT_SHM_H
#define CHORUS_TRANSPORT_SHM_H
#include "bootstrap/bootstrap.h"
#include "transport/conn.h"
#include "transport/transport.h"

#include <pthread.h>

/* A local peer's memory of ncclMemAlloc's that this rank maps. */
struct shmMap {
  uint64_t id; /* the peer's name for it (transport/memshare.h) */
  uint64_t base, bytes; /* where it lies in the peer's process */
  char *local;          /* and here */
};

/* What this rank keeps for one local peer: c->tpConn of the connections
 * to and from it. Memory of ncclMemAlloc's is handed over by a note on a
 * Unix socket (the descriptor, SCM_RIGHTS) before the first slot that
 * refers to it, and taken back by another note when it is freed. The two
 * ranks' notes share one socket, both ways: the lower rank's connection
 * to the higher one's setup socket (shmSetup), so that a communicator of
 * n local ranks holds n-1 of them, not twice as many. */
struct shmPeer {
  struct shmState *s;
  int rank;
  int chan;               /* notes to and from the peer (-1: none) */
  int cma;                /* this rank may reach the peer's memory with CMA (its cookie read back) */
  uint64_t *sentNotes;    /* notes sent to it: its receiving control block's count */
  const uint64_t *notes;  /* notes it has sent this rank (in this rank's segment) */
  uint64_t drained;       /* of those, the ones this rank has read */
  const uint32_t *refused; /* set by the peer: it cannot map this rank's memory */
  uint32_t *refuse;        /* set here: this rank cannot map the peer's */
  uint64_t *told;         /* ids of this process's memory handed to it */
  int ntold, capTold;
  struct shmMap *maps;    /* its memory this rank maps */
  int nmaps, capMaps;
};

struct shmState {
  int nranks, me;
  void **segs;      /* mapping of each rank's segment (NULL: not local) */
  size_t segBytes;
  size_t connBytes;
  pthread_mutex_t lock;  /* the peers' notes, told and maps */
  struct shmPeer *peers; /* [nranks] */
  struct shmState *next; /* in the list of live states, for freed memory's notes */
  size_t offerMin;       /* CMA reads from this size offer their second half to the sender (0: none) */
  struct bootstrap *boot; /* the communicator's: its abort flag and peers' liveness end a wait for a sender */
};

#endif
