/* libFuzzer target: the checks every bootstrap message passes before it is
 * trusted (bootstrap/wire.c): a rank's hello to the root, the root's table
 * of ranks, a mesh hello. Whatever they accept is then printed, as the logs
 * do, so an unterminated string or a wild index shows up under ASan. */
#include <stdio.h>
#include <string.h>

#include "bootstrap/wire.h"
#include "bootstrap/socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int which = data[0] % 3;
  data++;
  size--;
  char sink[256], addr[80];
  if (which == 0) {
    struct rootHello h;
    if (size < sizeof h) return 0;
    memcpy(&h, data, sizeof h);
    if (wireRootHelloValid(&h, h.secret))
      snprintf(sink, sizeof sink, "%d %s %s", h.rank, h.info.hostname, sockAddrStr(&h.info.listenAddr, addr, sizeof addr));
  } else if (which == 1) {
    int n = (int)(size / sizeof(struct bootstrapPeerInfo));
    if (n == 0) return 0;
    struct bootstrapPeerInfo *peers = malloc(sizeof *peers * (size_t)n);
    memcpy(peers, data, sizeof *peers * (size_t)n);
    char refusal[128];
    if (wireFrameRead(peers, sizeof *peers * (size_t)n, WIRE_REFUSED, refusal, sizeof refusal))
      snprintf(sink, sizeof sink, "%s", refusal);
    else if (wirePeerTableCheck(peers, n) == ncclSuccess)
      for (int i = 0; i < n; i++)
        snprintf(sink, sizeof sink, "%s %s", peers[i].hostname, sockAddrStr(&peers[i].listenAddr, addr, sizeof addr));
    free(peers);
  } else {
    struct meshHello h;
    if (size < sizeof h) return 0;
    memcpy(&h, data, sizeof h);
    int fds[8] = {-1, -1, -1, 5, -1, -1, -1, -1};
    if (wireMeshHelloValid(&h, h.secret, 2, 8, fds) && fds[h.rank] != -1) abort();
  }
  return 0;
}
