/* Transports are a table of functions (DESIGN.md invariant 5). Each one
 * connects this rank to some of its peers and fills those entries of the
 * connection table with FIFOs of slots (transport/conn.h); the protocols
 * and the engine reach a connection's transport only through c->tp, so a
 * new transport (CUDA IPC, libfabric) is one file plus an entry in
 * transportTable. For each peer the first transport in the table that can
 * connect it does. */
#ifndef CHORUS_TRANSPORT_TRANSPORT_H
#define CHORUS_TRANSPORT_TRANSPORT_H
#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/bootstrap.h"
#include "transport/conn.h"

struct transport {
  const char *name;    /* NCCL's name in logs for ring connections: "SHM/direct/direct", "NET/Socket/0" */
  const char *p2pName; /* and for point-to-point ones: "P2P/SHM" */
  /* 1 when it connects this rank to peer. Both ends must answer alike, so
   * it reads only what every rank knows of both (bootstrap peer info). */
  int (*canConnect)(const struct bootstrap *b, int peer);
  /* Collective: every rank calls every transport's setup, in table order,
   * even with no peer for it (some exchange addresses through b). mine[p]
   * is 1 for the peers it connects; it fills their connections in t
   * (c->tp set) and keeps what it owns in *state, for close. */
  ncclResult_t (*setup)(void **state, struct bootstrap *b, struct connTable *t, size_t buffSize,
                        const unsigned char *mine);
  void (*close)(void *state); /* state may be NULL (setup failed early) */
  /* Before a goodbye (destroy, finalize): waits until every byte this rank
   * has sent is on its peer's host, or the peer is gone or has said
   * goodbye itself, or timeoutNs has passed, so that the goodbye, on
   * another connection, never overtakes the data the peer still reads.
   * NULL where a published slot is at once the peer's (shared memory). */
  void (*drain)(void *state, struct bootstrap *b, uint64_t timeoutNs);

  /* Per connection; NULL where the transport has nothing to do: the peer
   * reads and writes the FIFO itself (shared memory, self). */
  /* Moves what it can without blocking; an error sticks (and is named in a
   * WARN once). */
  ncclResult_t (*progress)(struct conn *c);
  /* The sender published its slot at step - 1 holding bytes bytes. */
  void (*posted)(struct conn *c, size_t bytes);
  /* Publishes the next slot with bytes read from data, not from the slot
   * (the protocol fills no slot: one copy saved); data may change once it
   * returns. */
  void (*postFrom)(struct conn *c, const void *data, size_t bytes);
  /* 1 while a sender holds published slots the transport has not sent. */
  int (*pending)(const struct conn *c);
  /* A sender's slots sent so far (they have left this rank); NULL where a
   * published slot is at once the peer's (c->step). For the profiler. */
  uint64_t (*sent)(const struct conn *c);
  /* Bytes moved so far (progress for the one wait; helper threads add to it). */
  uint64_t (*moved)(const struct conn *c);
  /* A step waits on c for data: an error when none can come (the peer
   * closed), else ncclSuccess. */
  ncclResult_t (*stalled)(struct conn *c);
  /* The descriptors to sleep on until c can go on (at most max); returns
   * how many. */
  int (*pollFds)(const struct conn *c, struct pollfd *fds, int max);
  /* 1 when poll() on those wakes as soon as c can go on; 0 when threads of
   * the transport's own move bytes without waking it (then the wait keeps
   * yielding). */
  int (*pollWakes)(const struct conn *c);

  /* Single copy: the receiver reads data where the sender holds it. NULL
   * where it cannot (then slots always carry the data). */
  /* Sender: 1 with *key set when the receiver can read the bytes at data
   * where they lie: memory local peers map (ncclMemAlloc's, handed over
   * once, *key naming it), or, with anyMemory, any memory where the
   * receiver can read this process's (CMA, one process; *key 0). */
  int (*shareRef)(struct conn *c, const void *data, size_t bytes, int anyMemory, uint64_t *key);
  /* Receiver: where the sender's bytes at addr (with its key) lie in this
   * process (a mapping of the sender's memory, or addr itself in one
   * process), or NULL: then readPeer copies them. Shared memory is mapped
   * to be written too: a rank may write a result into a peer's memory
   * where the peer asked for it (proto.h: recvResultAt). */
  void *(*mapPeer)(struct conn *c, uint64_t addr, uint64_t key, size_t bytes);
  /* Receiver: copies bytes at addr in the sender's memory into dst. An
   * error (the sender is gone, or its memory is) says so in a WARN. A wait
   * inside (for a part the sender copies, shm's offers) gives up after
   * timeoutNs without progress: the operation's communicator's timeout
   * (0: CHORUS_TIMEOUT's). */
  ncclResult_t (*readPeer)(struct conn *c, void *dst, uint64_t addr, uint64_t key, size_t bytes, uint64_t timeoutNs);
  /* Sender, waiting while its receiver reads what its reference slots
   * point to: does part of that copy if the receiver offered one (NULL:
   * never). 1 when it copied something; never blocks longer than the copy. */
  int (*assist)(struct conn *c);
};

extern const struct transport selfTransport, shmTransport, netTransport;
/* In the order they are tried for each peer. */
extern const struct transport *const transportTable[];
#define TRANSPORT_COUNT 3

/* The index in transportTable of the transport that connects peer. */
int transportFor(const struct bootstrap *b, int peer);
/* Sets up every transport (all ranks call it); state[TRANSPORT_COUNT]. */
ncclResult_t transportSetupAll(void **state, struct bootstrap *b, struct connTable *t, size_t buffSize);
void transportCloseAll(void **state);
/* Every transport's drain (see struct transport). */
void transportDrainAll(void **state, struct bootstrap *b, uint64_t timeoutNs);
/* 1 when name is a network chorus has, as NCCL_NET and config.netName name
 * one: "Socket", in any case (net.c). */
int transportNetKnown(const char *name);

#endif
