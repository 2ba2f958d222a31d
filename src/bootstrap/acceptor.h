/* Accepts connections on a listening socket and reads each one's fixed-size
 * hello without ever waiting on a single connection: strangers that connect
 * and stay silent, send garbage or hang up cannot hold up the others. Each
 * pending connection has HELLO_DEADLINE to send its hello. */
#ifndef CHORUS_BOOTSTRAP_ACCEPTOR_H
#define CHORUS_BOOTSTRAP_ACCEPTOR_H
#include <stddef.h>
#include <stdint.h>

#include "core/wait.h"
#include "nccl.h"

#define ACCEPTOR_MAX_HELLO 256
#define ACCEPTOR_MAX_PENDING 256

struct acceptorConn {
  int fd;
  size_t got;
  uint64_t deadlineNs;
  char buf[ACCEPTOR_MAX_HELLO];
};

struct acceptor {
  int listenFd;
  size_t helloBytes;
  int npending;
  struct acceptorConn pending[ACCEPTOR_MAX_PENDING];
};

void acceptorInit(struct acceptor *a, int listenFd, size_t helloBytes);
/* One round: accepts what is waiting, reads what has arrived, drops
 * connections that hung up or ran out of time. When a hello is complete,
 * *fd gets its connection (owned by the caller) and hello its bytes;
 * otherwise *fd = -1. *progressed says whether anything happened. */
ncclResult_t acceptorPoll(struct acceptor *a, int *fd, void *hello, int *progressed);
/* Polls until a hello is complete, waiting through the one wait w between
 * rounds that moved nothing; *fd then owns the connection. */
ncclResult_t acceptorNext(struct acceptor *a, int *fd, void *hello, struct waitState *w);
/* Closes the pending connections (not the listening socket). */
void acceptorClose(struct acceptor *a);

#endif
