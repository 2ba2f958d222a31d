/* Shared-memory transport between ranks on one host (processes or threads):
 * each rank's receive FIFOs live in one memfd segment, handed to local peers
 * over an abstract Unix socket (SCM_RIGHTS). Nothing is ever created in
 * /dev/shm, so nothing can be left there, SIGKILL included. */
#ifndef CHORUS_TRANSPORT_SHM_H
#define CHORUS_TRANSPORT_SHM_H
#include "bootstrap/bootstrap.h"
#include "transport/conn.h"

struct shmState {
  int nranks;
  void **segs;      /* mapping of each rank's segment (NULL: not local) */
  size_t segBytes;
  size_t connBytes;
};

/* 1 when the shared-memory transport can reach peer. */
int shmCanConnect(const struct bootstrap *b, int peer);
/* Creates this rank's segment, exchanges segments with local peers and
 * fills the connection table for them. */
ncclResult_t shmSetup(struct shmState *s, struct bootstrap *b, struct connTable *t, size_t buffSize);
void shmClose(struct shmState *s);

#endif
