/* libFuzzer target: the bootstrap monitor's frame parser (bootstrap/oob.c)
 * reads arbitrary bytes from a peer: any length field, type, partial frame
 * or EOF must end in a handled frame or the peer marked failed, never a
 * crash, an overrun or a hang. Built by fuzz/run.sh. */
#define _GNU_SOURCE
#include "../src/bootstrap/oob.c"

#include <fcntl.h>

static void statusFn(void *arg, void *out, size_t size) {
  (void)arg;
  memset(out, 0x5a, size);
}

/* A one-sided write's payload, as the monitor hands it over: every byte is
 * read, so a length past the frame shows under ASan. */
static volatile unsigned rmaSum;
static void rmaFn(void *arg, int peer, const void *payload, size_t size) {
  (void)arg;
  (void)peer;
  for (size_t i = 0; i < size; i++) rmaSum += ((const unsigned char *)payload)[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 60000) return 0;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  fcntl(sv[0], F_SETFL, O_NONBLOCK);
  fcntl(sv[1], F_SETFL, O_NONBLOCK);
  int sndbuf = 1 << 20;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  struct bootstrap b;
  memset(&b, 0, sizeof b);
  b.rank = 0;
  b.nranks = 2;
  int fds[2] = {-1, sv[0]};
  char departed[2] = {0, 0};
  struct bootstrapPeerInfo peers[2];
  memset(peers, 0, sizeof peers);
  b.peerFd = fds;
  b.departed = departed;
  b.peers = peers;
  struct oob *o = oobAlloc(&b, statusFn, rmaFn, NULL, 40);
  if (!o) abort();
  b.oob = o;
  /* The first byte: whether the peer closes after sending (EOF), and which
   * query id this rank waits for. */
  int closeAfter = data[0] & 1;
  o->queryId = data[0] >> 1;
  ssize_t w = write(sv[1], data + 1, size - 1);
  (void)w;
  if (closeAfter) shutdown(sv[1], SHUT_WR);
  for (int round = 0; round < 4 && !o->peers[1].closed; round++) peerRead(o, 1);
  char text[OOB_MAX_FAULT];
  int from;
  oobPendingFault(&b, text, sizeof text, &from);
  struct waitState ws;
  waitBegin(&ws, NULL, NULL, NULL, "fuzz");
  char msg[64];
  while (o->peers[1].inHead) {
    size_t len = o->peers[1].inHead->len;
    if (oobRecvData(&b, 1, msg, len < sizeof msg ? len : sizeof msg, &ws) != ncclSuccess && len <= sizeof msg) abort();
  }
  oobFree(o);
  close(sv[0]);
  close(sv[1]);
  return 0;
}
