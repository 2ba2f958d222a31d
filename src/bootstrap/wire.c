#include "bootstrap/wire.h"

#include <string.h>
#include <sys/socket.h>

#include "core/log.h"

static void terminate(struct bootstrapPeerInfo *p) { p->hostname[sizeof p->hostname - 1] = 0; }

int wireRootHelloValid(struct rootHello *h, uint64_t secret) {
  if (h->nranks <= 0 || h->nranks > BOOTSTRAP_MAX_RANKS || h->info.rank != h->rank) {
    WARN("Bootstrap : root got a hello for rank %d of %d", h->rank, h->nranks);
    return 0;
  }
  int family = h->info.listenAddr.sa.sa_family;
  if (family != AF_INET && family != AF_INET6 && family != AF_UNSPEC) { /* AF_UNSPEC: it has no interface */
    WARN("Bootstrap : root got rank %d with an address of unknown family %d", h->rank, family);
    return 0;
  }
  terminate(&h->info);
  if (h->secret != secret) {
    WARN("Bootstrap : root refused host %s pid %d (rank %d of %d): it did not present this rendezvous's secret "
         "(CHORUS_SECRET differs, or is set on one side only)",
         h->info.hostname, h->info.pid, h->rank, h->nranks);
    return 0;
  }
  return 1;
}

void wireFrameFill(char *buf, size_t len, int32_t mark, const char *text) {
  memset(buf, 0, len);
  if (len < sizeof(int32_t)) return;
  memcpy(buf, &mark, sizeof mark);
  if (len > WIRE_FRAME_TEXT_OFFSET + 1) {
    size_t n = strlen(text), room = len - WIRE_FRAME_TEXT_OFFSET - 1;
    memcpy(buf + WIRE_FRAME_TEXT_OFFSET, text, n < room ? n : room);
  }
}

int wireFrameRead(const void *table, size_t len, int32_t mark, char *text, size_t textLen) {
  int32_t got;
  if (len < sizeof got || textLen == 0) return 0;
  memcpy(&got, table, sizeof got);
  if (got != mark) return 0;
  size_t n = len > WIRE_FRAME_TEXT_OFFSET ? len - WIRE_FRAME_TEXT_OFFSET : 0;
  if (n > textLen - 1) n = textLen - 1;
  memcpy(text, (const char *)table + WIRE_FRAME_TEXT_OFFSET, n);
  text[n] = 0;
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
