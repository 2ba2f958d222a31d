#include "bootstrap/wire.h"

#include <sys/socket.h>

#include "core/log.h"

static void terminate(struct bootstrapPeerInfo *p) { p->hostname[sizeof p->hostname - 1] = 0; }

int wireRootHelloValid(struct rootHello *h, uint64_t secret, int nranks, const int *fds) {
  if (h->secret != secret) {
    WARN("Bootstrap : root dropped a connection that did not present the secret");
    return 0;
  }
  if (h->nranks <= 0 || h->nranks > BOOTSTRAP_MAX_RANKS || (nranks && h->nranks != nranks) || h->rank < 0 ||
      h->rank >= h->nranks || (fds && fds[h->rank] >= 0) || h->info.rank != h->rank) {
    WARN("Bootstrap : root got rank %d of %d, expected a new rank of %d", h->rank, h->nranks, nranks);
    return 0;
  }
  int family = h->info.listenAddr.sa.sa_family;
  if (family != AF_INET && family != AF_INET6) {
    WARN("Bootstrap : root got rank %d with an address of unknown family %d", h->rank, family);
    return 0;
  }
  terminate(&h->info);
  return 1;
}

ncclResult_t wirePeerTableCheck(struct bootstrapPeerInfo *peers, int nranks) {
  for (int i = 0; i < nranks; i++) {
    int family = peers[i].listenAddr.sa.sa_family;
    if (peers[i].rank != i || (family != AF_INET && family != AF_INET6)) {
      WARN("Bootstrap : inconsistent rank table from the root (slot %d holds rank %d, address family %d)", i,
           peers[i].rank, family);
      return ncclRemoteError;
    }
    terminate(&peers[i]);
  }
  return ncclSuccess;
}

int wireMeshHelloValid(const struct meshHello *h, uint64_t secret, int myRank, int nranks, const int *peerFd) {
  return h->secret == secret && h->rank > myRank && h->rank < nranks && peerFd[h->rank] < 0;
}
