/* Shared-memory transport between ranks on one host (processes or threads),
 * behind the transport table as shmTransport:
 * each rank's receive FIFOs live in one memfd segment, handed to local peers
 * over an abstract Unix socket (SCM_RIGHTS). Nothing is ever created in
 * /dev/shm, so nothing can be left there, SIGKILL included. */
#ifndef CHORUS_TRANSPORT_SHM_H
#define CHORUS_TRANSPORT_SHM_H
#include "bootstrap/bootstrap.h"
#include "transport/conn.h"
#include "transport/transport.h"

struct shmState {
  int nranks;
  void **segs;      /* mapping of each rank's segment (NULL: not local) */
  size_t segBytes;
  size_t connBytes;
};

#endif
