/* libFuzzer target: the socket transport's receive path (transport/net.c):
 * size headers (with or without an operation descriptor), inline data and
 * pieces over data sockets, cut as the sender said at setup, in whatever
 * byte stream a broken or hostile peer sends. Every outcome must be data
 * in slots no larger than a slot, or the connection marked broken. */
#define _GNU_SOURCE
#include "../src/transport/net.c"

#include <fcntl.h>

/* A transport socket's hello, checked against a 4-rank communicator with
 * 3 lanes where every peer is on another host. */
static int fuzzHello(const uint8_t *data, size_t size) {
  struct netHello h;
  if (size < sizeof h) return 0;
  memcpy(&h, data, sizeof h);
  struct bootstrapPeerInfo peers[4];
  memset(peers, 0, sizeof peers);
  struct bootstrap b;
  memset(&b, 0, sizeof b);
  b.rank = 1;
  b.nranks = 4;
  b.secret = 42;
  b.peers = peers;
  for (int i = 0; i < 4; i++) peers[i].hostHash = (uint64_t)i + 1;
  peers[0].nonce = 7;
  struct netInfo info[4];
  memset(info, 0, sizeof info);
  for (int i = 0; i < 4; i++) info[i].cut.ndata = i;
  struct connTable t = {4, 2, calloc(12, sizeof(struct conn)), calloc(12, sizeof(struct conn))};
  struct netConn *ncs = calloc(12, sizeof *ncs);
  for (int i = 0; i < 12; i++) {
    t.recv[i].tpConn = &ncs[i];
    for (int k = 0; k < NET_MAX_SOCKS; k++) ncs[i].socks[k].fd = k == 1 ? 9 : -1; /* socket 1 taken */
  }
  if ((h.secret & 1) == 0) h.secret = 42; /* reach the range checks often */
  if ((h.nonce & 1) == 0) h.nonce = 7;
  unsigned char mine[4] = {1, 0, 1, 1}; /* everyone but itself */
  struct netState s = {0};
  s.mine = mine;
  struct netConn *n = helloConn(&s, &b, &t, info, &h);
  if (n && (h.rank == 1 || h.sock == 1 || h.sock > info[h.rank].cut.ndata || n->socks[h.sock].fd >= 0)) abort();
  free(t.send);
  free(t.recv);
  free(ncs);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 1 && data[0] == 0xff) return fuzzHello(data + 1, size - 1);
  if (size < 4 || size > 60000) return 0;
  /* Setup from the first bytes: data sockets, inline limit, piece size. */
  struct netCut cut = {data[0] % 4, (uint32_t)data[1] * 8, 4096u << (data[2] % 3)};
  int closeAfter = data[3] & 1;
  data += 4;
  size -= 4;
  struct bootstrap b;
  memset(&b, 0, sizeof b);
  b.rank = 0;
  b.nranks = 2;
  struct bootstrapPeerInfo peers[2];
  memset(peers, 0, sizeof peers);
  b.peers = peers;
  struct netState *s = calloc(1, sizeof *s); /* netClose frees it */
  size_t buffSize = 64 * 1024;
  s->memBytes = CONN_CTRL_BYTES + buffSize;
  s->conns = calloc(1, sizeof *s->conns);
  s->mem = calloc(1, sizeof *s->mem);
  s->listenFd = -1;
  s->forkLink.closeFds = netCloseSockets; /* as netSetup's state: netClose closes its sockets through it */
  struct conn c;
  memset(&c, 0, sizeof c);
  if (netConnAlloc(s, &c, 1, 0, 0, &cut, &b, buffSize) != ncclSuccess) abort();
  int writers[NET_MAX_SOCKS];
  for (int i = 0; i < NET(&c)->nsocks; i++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    NET(&c)->socks[i].fd = sv[0];
    writers[i] = sv[1];
  }
  /* The stream goes to the control socket, except that every 7th byte goes
   * round-robin to the data sockets: pieces arrive wherever they do. */
  for (size_t i = 0; i < size; i++) {
    int k = NET(&c)->nsocks > 1 && i % 7 == 6 ? 1 + (int)(i / 7) % (NET(&c)->nsocks - 1) : 0;
    if (write(writers[k], data + i, 1) != 1) break;
  }
  for (int i = 0; closeAfter && i < NET(&c)->nsocks; i++) shutdown(writers[i], SHUT_WR);
  for (int round = 0; round < 64; round++) {
    if (netProgress(&c) != ncclSuccess) break;
    /* The engine's side: take every slot that arrived. */
    while (__atomic_load_n(&c.ctrl->tail, __ATOMIC_ACQUIRE) > c.step) {
      uint32_t k = (uint32_t)(c.step % c.nslots);
      if (NET(&c)->sizes[k] > c.slotBytes) abort();
      volatile uint64_t mark = connSlotHdr(&c, k)->mark; /* the header the transport filled */
      (void)mark;
      __atomic_store_n(&c.ctrl->head, ++c.step, __ATOMIC_RELEASE);
    }
  }
  netCheckNeeded(&c);
  for (int i = 0; i < NET(&c)->nsocks; i++) close(writers[i]);
  netClose(s);
  return 0;
}
