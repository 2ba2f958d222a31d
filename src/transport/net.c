#define _GNU_SOURCE
#include "transport/net.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <linux/sockios.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bootstrap/acceptor.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/forkclose.h"
#include "core/log.h"
#include "core/param.h"
#include "core/wait.h"
#include "transport/transport.h"

#define NET(c) ((struct netConn *)(c)->tpConn)

/* What each rank tells the others about its socket transport. */
struct netInfo {
  union sockAddr addr;
  struct netCut cut;
  int32_t listening;
};

/* The first bytes on every transport socket: whose it is and where it goes. */
struct netHello {
  uint64_t secret, nonce;
  int32_t rank, lane, sock, pad;
};

/* NCCL's defaults when unset: the calling thread drives one control socket
 * per connection, no helpers. At most 16 helpers and 64 data sockets, as
 * NCCL, which says so (net_socket.cc) where a rank uses the network (say). */
static struct netCut netLocalCut(int say) {
  struct netCut cut;
  int64_t threads = paramInt(paramSocketNThreads), socks = paramInt(paramNSocksPerThread);
  if (threads < 0) threads = 0;
  if (threads > 16) {
    if (say) WARN("NET/Socket : NCCL_SOCKET_NTHREADS is greater than the maximum allowed, setting to 16");
    threads = 16;
  }
  if (socks < 0) socks = threads > 0 ? 1 : 0;
  int64_t drivers = threads > 0 ? threads : 1; /* with no helpers the caller drives them */
  int64_t ndata = socks * drivers;
  if (ndata > NET_MAX_SOCKS - 1) { /* as NCCL: whole sockets per thread */
    socks = (NET_MAX_SOCKS - 1) / drivers;
    ndata = socks * drivers;
    if (say)
      WARN("NET/Socket : the total number of sockets is greater than the maximum allowed, setting "
           "NCCL_NSOCKS_PERTHREAD to %lld",
           (long long)socks);
  }
  cut.ndata = (int32_t)ndata;
  int64_t inl = paramInt(paramSocketInline), task = paramInt(paramSocketMinTaskSize);
  cut.inlineBytes = (uint32_t)(inl < 0 ? 0 : inl > (1 << 20) ? (1 << 20) : inl);
  cut.minTask = (uint32_t)(task < 4096 ? 4096 : task > (1 << 24) ? (1 << 24) : task);
  return cut;
}

static ncclResult_t netFail(struct conn *c, const char *what, int err) {
  struct netConn *n = NET(c);
  ncclResult_t ok = ncclSuccess;
  /* Once, from whichever thread saw it first (a helper or the caller). */
  if (__atomic_compare_exchange_n(&n->err, &ok, ncclRemoteError, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    WARN("NET/Socket : rank %d lost its connection %s rank %d (host %s, lane %d) while %s: %s", n->rank,
         n->isSend ? "to" : "from", c->peer, n->peerHost, n->lane, what,
         err ? strerror(err) : "closed by the peer");
  }
  return ncclRemoteError;
}

/* Every transport socket, once connected: CHORUS_SOCKET_BUFSIZE's kernel
 * buffers when set (tests make them small, so that every large message
 * meets short writes and reads). No TCP_USER_TIMEOUT: Linux counts the
 * zero-window probes to a receiver that is alive but busy (computing,
 * checkpointing) against it, so it broke a connection to a rank that would
 * have read on time; a link that goes silent is the stall timeout's, which
 * honours the communicator's own timeout and asks the peers who is stuck. */
static void sockTune(int fd) {
  int64_t b = paramInt(paramSocketBufSize);
  if (b <= 0) return;
  int v = b > 0x7fffffff ? 0x7fffffff : (int)b;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
}

/* A receiving control socket acknowledges in delayed mode: it carries no
 * data back, so each small message would otherwise cost a bare ACK segment,
 * as much kernel work on both hosts as the message itself; delayed, the
 * kernel still acknowledges every second full segment of bulk data at once.
 * The kernel leaves the mode after a delayed ACK times out (an idle
 * socket), so the reader sets it again every 64 reads. 2 ranks on 2 network
 * namespaces, 8 B AllReduce 11-14 -> 9.4-10 us; 128 KiB 94-187 -> 56-64 us. */
static void sockDelayAcks(int fd) {
  int zero = 0;
  setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &zero, sizeof zero);
}

static void sockPush(struct netSock *k, char *ptr, uint32_t len, uint64_t step) {
  struct netTask *t = &k->q[k->qtail % k->qcap];
  t->ptr = ptr;
  t->len = len;
  t->step = step;
  __atomic_store_n(&k->qtail, k->qtail + 1, __ATOMIC_SEQ_CST);
  if (k->helper && __atomic_load_n(&k->helper->sleeping, __ATOMIC_SEQ_CST)) {
    uint64_t one = 1;
    if (write(k->helper->efd, &one, sizeof one) < 0) { /* the counter is full: it is awake anyway */
    }
  }
}

/* Queues slot `step`'s data on the sockets as the sender's cut says; returns
 * the number of pieces. */
static uint32_t cutSlot(struct netConn *n, uint64_t step, char *slot, uint32_t size) {
  if (n->cut.ndata == 0 || size <= n->cut.inlineBytes) {
    sockPush(&n->socks[0], slot, size, step);
    return 1;
  }
  uint32_t nd = (uint32_t)n->cut.ndata;
  uint32_t task = (size + nd - 1) / nd;
  if (task < n->cut.minTask) task = n->cut.minTask;
  uint32_t pieces = 0;
  for (uint32_t off = 0; off < size; off += task, pieces++) {
    struct netSock *k = &n->socks[1 + n->rr];
    n->rr = (n->rr + 1) % nd;
    sockPush(k, slot + off, size - off < task ? size - off : task, step);
  }
  return pieces;
}

static void pieceDone(struct conn *c, struct netSock *k) {
  struct netTask *t = &k->q[k->qhead % k->qcap];
  __atomic_fetch_sub(&NET(c)->pending[t->step % c->nslots], 1, __ATOMIC_RELEASE);
  __atomic_store_n(&k->qhead, k->qhead + 1, __ATOMIC_RELEASE);
  k->off = 0;
}

/* Writes as many queued pieces as the socket takes, several per call. */
static ncclResult_t sockSend(struct conn *c, struct netSock *k) {
  uint64_t tail;
  while (k->qhead < (tail = __atomic_load_n(&k->qtail, __ATOMIC_ACQUIRE))) {
    struct iovec iov[16];
    int niov = 0;
    for (uint64_t i = k->qhead; i < tail && niov < 16; i++, niov++) {
      struct netTask *t = &k->q[i % k->qcap];
      size_t skip = i == k->qhead ? k->off : 0;
      iov[niov].iov_base = t->ptr + skip;
      iov[niov].iov_len = t->len - skip;
    }
    struct msghdr m = {0};
    m.msg_iov = iov;
    m.msg_iovlen = (size_t)niov;
    ssize_t r = sendmsg(k->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
      if (errno == EINTR) continue;
      return netFail(c, "sending", errno);
    }
    size_t left = (size_t)r;
    __atomic_fetch_add(&NET(c)->bytes, left, __ATOMIC_RELAXED);
    while (left > 0) {
      struct netTask *t = &k->q[k->qhead % k->qcap];
      size_t rest = t->len - k->off;
      if (left < rest) {
        k->off += left;
        left = 0;
      } else {
        left -= rest;
        pieceDone(c, k);
      }
    }
  }
  return ncclSuccess;
}

/* Reads into queued pieces as far as bytes have arrived. */
static ncclResult_t sockRecv(struct conn *c, struct netSock *k) {
  struct netConn *n = NET(c);
  while (k->qhead < __atomic_load_n(&k->qtail, __ATOMIC_ACQUIRE)) {
    struct netTask *t = &k->q[k->qhead % k->qcap];
    if (k == &n->socks[0] && n->stageTail > n->stageHead) { /* read ahead with the header */
      size_t take = n->stageTail - n->stageHead;
      if (take > t->len - k->off) take = t->len - k->off;
      memcpy(t->ptr + k->off, n->stage + n->stageHead, take);
      n->stageHead += (uint32_t)take;
      k->off += take;
      if (k->off == t->len) pieceDone(c, k);
      continue;
    }
    ssize_t r = recv(k->fd, t->ptr + k->off, t->len - k->off, MSG_DONTWAIT);
    if (r > 0) {
      k->off += (size_t)r;
      __atomic_fetch_add(&NET(c)->bytes, (size_t)r, __ATOMIC_RELAXED);
      if (k->off == t->len) pieceDone(c, k);
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (r < 0 && errno == EINTR) continue;
    return netFail(c, "receiving", r == 0 ? 0 : errno);
  }
  return ncclSuccess;
}

/* Reads the next size header off the control socket: 1 when complete.
 * Reads up to a stage-full at once; what follows the header is used by the
 * next pieces on that socket. */
static int readHeader(struct conn *c, uint32_t *size, struct connDesc *desc, ncclResult_t *res) {
  struct netConn *n = NET(c);
  size_t need = sizeof *size;
  for (;;) {
    if (n->stageTail - n->stageHead >= sizeof *size) {
      uint32_t h;
      memcpy(&h, n->stage + n->stageHead, sizeof h);
      need = sizeof h + (h & NET_HDR_DESC ? sizeof desc->body : 0);
      if (n->stageTail - n->stageHead >= need) break;
    }
    if (n->stageHead > 0) {
      memmove(n->stage, n->stage + n->stageHead, n->stageTail - n->stageHead);
      n->stageTail -= n->stageHead;
      n->stageHead = 0;
    }
    if (n->stageDry) return 0; /* it had no more a moment ago: another system call would find nothing */
    size_t room = sizeof n->stage - n->stageTail;
    ssize_t r = recv(n->socks[0].fd, n->stage + n->stageTail, room, MSG_DONTWAIT);
    if (r > 0) {
      n->stageTail += (uint32_t)r;
      n->stageDry = (size_t)r < room;
      if ((n->headerReads++ & 63) == 0) sockDelayAcks(n->socks[0].fd);
      __atomic_fetch_add(&n->bytes, (size_t)r, __ATOMIC_RELAXED);
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && n->stageTail == n->stageHead) {
      n->eof = 1; /* a clean end, unless something still needs data */
      return 0;
    }
    *res = netFail(c, "receiving", r == 0 ? 0 : errno);
    return 0;
  }
  memcpy(size, n->stage + n->stageHead, sizeof *size);
  desc->mark = 0;
  if (*size & NET_HDR_DESC) {
    memcpy(desc->body, n->stage + n->stageHead + sizeof *size, sizeof desc->body);
    desc->mark = 1;
  }
  *size &= ~NET_HDR_DESC;
  n->stageHead += (uint32_t)need;
  return 1;
}

/* Slots whose pieces have all moved, in order, are done: publish them
 * (a sender frees them for reuse: head; a receiver hands them over: tail). */
static void slotsComplete(struct conn *c, uint64_t *counter) {
  struct netConn *n = NET(c);
  uint64_t done = n->done;
  while (done < n->queued && __atomic_load_n(&n->pending[done % c->nslots], __ATOMIC_ACQUIRE) == 0) done++;
  if (done != n->done) {
    n->done = done;
    __atomic_store_n(counter, done, __ATOMIC_RELEASE);
  }
}

static ncclResult_t sendProgress(struct conn *c) {
  struct netConn *n = NET(c);
  while (n->queued < c->step) {
    uint64_t step = n->queued++;
    uint32_t k = (uint32_t)(step % c->nslots);
    struct connDesc *d = connSlotHdr(c, k);
    int withDesc = d->mark == step + 1;
    n->hdrs[k] = n->sizes[k] | (withDesc ? NET_HDR_DESC : 0);
    sockPush(&n->socks[0], (char *)&n->hdrs[k], sizeof n->hdrs[k], step);
    if (withDesc) sockPush(&n->socks[0], (char *)d->body, sizeof d->body, step);
    char *data = n->refs[k] ? (char *)n->refs[k] : connSlotData(c, k);
    /* The header (and descriptor) pieces hold the count above zero while
     * helpers may already finish the data pieces. */
    __atomic_store_n(&n->pending[k], 1u + (uint32_t)withDesc, __ATOMIC_RELAXED);
    uint32_t pieces = cutSlot(n, step, data, n->sizes[k]);
    __atomic_fetch_add(&n->pending[k], pieces, __ATOMIC_ACQ_REL);
  }
  for (int i = 0; i < n->nsocks; i++)
    if (!n->socks[i].helper && n->socks[i].qhead < n->socks[i].qtail) CHECK(sockSend(c, &n->socks[i]));
  slotsComplete(c, &c->ctrl->head);
  return ncclSuccess;
}

static ncclResult_t recvProgress(struct conn *c) {
  struct netConn *n = NET(c);
  uint64_t head = __atomic_load_n(&c->ctrl->head, __ATOMIC_ACQUIRE);
  ncclResult_t res = ncclSuccess;
  n->stageDry = 0;
  for (;;) {
    /* The control socket carries headers and inline data in order: finish
     * what is queued on it before reading the next header. */
    CHECK(sockRecv(c, &n->socks[0]));
    if (n->socks[0].qhead < n->socks[0].qtail || n->queued - head >= c->nslots || n->eof) break;
    uint32_t size;
    struct connDesc desc;
    if (!readHeader(c, &size, &desc, &res)) break;
    if (size == 0 || size > c->slotBytes) {
      WARN("NET/Socket : rank %d got a %u-byte piece from rank %d (host %s) for %u-byte slots: the ranks "
           "disagree on NCCL_BUFFSIZE or the stream is corrupt",
           n->rank, size, c->peer, n->peerHost, c->slotBytes);
      __atomic_store_n(&n->err, ncclRemoteError, __ATOMIC_RELEASE);
      return ncclRemoteError;
    }
    uint64_t step = n->queued++;
    uint32_t k = (uint32_t)(step % c->nslots);
    n->sizes[k] = size;
    if (desc.mark) {
      memcpy(connSlotHdr(c, k)->body, desc.body, sizeof desc.body);
      connSlotHdr(c, k)->mark = step + 1;
    }
    __atomic_store_n(&n->pending[k], 1, __ATOMIC_RELAXED); /* held until every piece is queued */
    uint32_t pieces = cutSlot(n, step, connSlotData(c, k), size);
    __atomic_fetch_add(&n->pending[k], pieces - 1, __ATOMIC_ACQ_REL);
  }
  CHECK(res);
  for (int i = 1; i < n->nsocks; i++)
    if (!n->socks[i].helper && n->socks[i].qhead < n->socks[i].qtail) CHECK(sockRecv(c, &n->socks[i]));
  slotsComplete(c, &c->ctrl->tail);
  return ncclSuccess;
}

static ncclResult_t netProgress(struct conn *c) {
  ncclResult_t err = __atomic_load_n(&NET(c)->err, __ATOMIC_ACQUIRE);
  if (err != ncclSuccess) return err;
  return NET(c)->isSend ? sendProgress(c) : recvProgress(c);
}

static void netPostFrom(struct conn *c, const void *src, size_t bytes) {
  const char *data = src;
  struct netConn *n = NET(c);
  uint32_t k = (uint32_t)(c->step % c->nslots);
  if (n->helped && n->cut.ndata > 0 && bytes > n->cut.inlineBytes) {
    /* Its pieces go to helpers, which may read them at any time: copy. */
    memcpy(connSlotData(c, k), data, bytes);
    n->sizes[k] = (uint32_t)bytes;
    __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
    netProgress(c);
    return;
  }
  n->sizes[k] = (uint32_t)bytes;
  n->refs[k] = data;
  __atomic_store_n(&c->ctrl->tail, ++c->step, __ATOMIC_RELEASE);
  netProgress(c);
  n->refs[k] = NULL;
  /* What the kernel has not taken yet moves into the slot, at the same offset. */
  char *slot = connSlotData(c, k);
  for (int i = 0; i < n->nsocks; i++) {
    struct netSock *q = &n->socks[i];
    if (q->helper) continue; /* nothing of this slot went there */
    for (uint64_t j = q->qhead; j < q->qtail; j++) {
      struct netTask *t = &q->q[j % q->qcap];
      if (t->ptr < data || t->ptr >= data + bytes) continue;
      size_t at = (size_t)(t->ptr - data), skip = j == q->qhead ? q->off : 0;
      memcpy(slot + at + skip, t->ptr + skip, t->len - skip);
      t->ptr = slot + at;
    }
  }
}

static ncclResult_t netCheckNeeded(struct conn *c) {
  struct netConn *n = NET(c);
  ncclResult_t err = __atomic_load_n(&n->err, __ATOMIC_ACQUIRE);
  if (err != ncclSuccess || !n->eof || n->queued > c->step) return err;
  return netFail(c, "waiting for data", 0);
}

static int netPollFds(const struct conn *c, struct pollfd *fds, int max) {
  const struct netConn *n = NET(c);
  int nf = 0;
  for (int i = 0; i < n->nsocks && nf < max; i++) {
    const struct netSock *k = &n->socks[i];
    if (k->helper) continue;
    int busy = k->qhead < k->qtail;
    if (n->isSend) {
      if (busy) fds[nf++] = (struct pollfd){k->fd, POLLOUT, 0};
    } else if (busy || (i == 0 && !n->eof)) {
      fds[nf++] = (struct pollfd){k->fd, POLLIN, 0};
    }
  }
  return nf;
}

/* ---- helper threads ---- */

static void *helperMain(void *arg) {
  struct netHelper *h = arg;
  struct pollfd *fds = malloc(sizeof *fds * (size_t)(h->nsocks + 1));
  if (!fds) return NULL;
  while (!__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) {
    int moved = 0;
    for (int i = 0; i < h->nsocks; i++) {
      struct netSock *k = h->socks[i];
      struct conn *c = h->conns[i];
      if (__atomic_load_n(&NET(c)->err, __ATOMIC_ACQUIRE) != ncclSuccess) continue;
      uint64_t head = k->qhead;
      size_t off = k->off;
      if (head == __atomic_load_n(&k->qtail, __ATOMIC_ACQUIRE)) continue;
      if (NET(c)->isSend) sockSend(c, k);
      else sockRecv(c, k);
      moved |= k->qhead != head || k->off != off;
    }
    if (moved) continue;
    /* Nothing moved: sleep until a socket is ready or new pieces come. The
     * queues are looked at again after saying so (the caller looks at
     * sleeping after queueing), so no wake-up is lost. */
    __atomic_store_n(&h->sleeping, 1, __ATOMIC_SEQ_CST);
    int nf = 0;
    for (int i = 0; i < h->nsocks; i++) {
      struct netSock *k = h->socks[i];
      if (k->qhead == __atomic_load_n(&k->qtail, __ATOMIC_SEQ_CST) ||
          __atomic_load_n(&NET(h->conns[i])->err, __ATOMIC_ACQUIRE) != ncclSuccess)
        continue;
      fds[nf++] = (struct pollfd){k->fd, NET(h->conns[i])->isSend ? POLLOUT : POLLIN, 0};
    }
    fds[nf++] = (struct pollfd){h->efd, POLLIN, 0};
    poll(fds, (nfds_t)nf, 100);
    __atomic_store_n(&h->sleeping, 0, __ATOMIC_SEQ_CST);
    if (fds[nf - 1].revents & POLLIN) {
      uint64_t v;
      if (read(h->efd, &v, sizeof v) < 0) { /* nothing to drain */
      }
    }
  }
  free(fds);
  return NULL;
}

static ncclResult_t helperAdd(struct netHelper *h, struct conn *c, struct netSock *k) {
  if (h->nsocks == h->cap) {
    int cap = h->cap ? 2 * h->cap : 16;
    struct conn **cs = realloc(h->conns, sizeof *cs * (size_t)cap);
    if (cs) h->conns = cs;
    struct netSock **ks = realloc(h->socks, sizeof *ks * (size_t)cap);
    if (ks) h->socks = ks;
    if (!cs || !ks) return ncclSystemError;
    h->cap = cap;
  }
  h->conns[h->nsocks] = c;
  h->socks[h->nsocks++] = k;
  k->helper = h;
  return ncclSuccess;
}

/* NCCL_SOCKET_NTHREADS helpers per communicator, each owning a share of the
 * data sockets of every connection. */
static ncclResult_t helpersStart(struct netState *s) {
  int64_t nt = paramInt(paramSocketNThreads);
  if (nt > 16) nt = 16;
  int ndata = 0;
  for (int i = 0; i < s->nconns; i++) ndata += NET(s->conns[i])->cut.ndata;
  if (nt <= 0 || ndata == 0) return ncclSuccess;
  s->helpers = calloc((size_t)nt, sizeof *s->helpers);
  if (!s->helpers) return ncclSystemError;
  s->helperSlots = (int)nt;
  for (int t = 0; t < nt; t++) s->helpers[t].efd = -1;
  for (int t = 0; t < nt; t++) {
    s->helpers[t].efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->helpers[t].efd < 0) {
      WARN("Call to eventfd failed: %s", strerror(errno));
      return ncclSystemError;
    }
  }
  int next = 0;
  for (int i = 0; i < s->nconns; i++) {
    struct netConn *n = NET(s->conns[i]);
    for (int k = 1; k < n->nsocks; k++, next = (next + 1) % (int)nt)
      CHECK(helperAdd(&s->helpers[next], s->conns[i], &n->socks[k]));
    n->helped = n->nsocks > 1;
  }
  for (int t = 0; t < nt; t++) {
    int err = pthread_create(&s->helpers[t].thread, NULL, helperMain, &s->helpers[t]);
    if (err) {
      WARN("NET/Socket : cannot start a helper thread: %s", strerror(err));
      return ncclSystemError;
    }
    s->nhelpers = t + 1;
  }
  INFO(subsysNet | subsysInit, "NET/Socket : %d helper thread(s) for %d data socket(s)", s->nhelpers, ndata);
  return ncclSuccess;
}

static void helpersStop(struct netState *s) {
  for (int t = 0; t < s->nhelpers; t++) {
    __atomic_store_n(&s->helpers[t].stop, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (write(s->helpers[t].efd, &one, sizeof one) < 0) { /* it wakes within 100 ms anyway */
    }
    pthread_join(s->helpers[t].thread, NULL);
  }
  s->nhelpers = 0;
  for (int i = 0; s->helpers && s->conns && i < s->nconns; i++) {
    struct netConn *n = NET(s->conns[i]);
    for (int k = 0; n && k < n->nsocks; k++) n->socks[k].helper = NULL;
  }
  for (int t = 0; t < s->helperSlots; t++) {
    if (s->helpers[t].efd >= 0) close(s->helpers[t].efd);
    free(s->helpers[t].conns);
    free(s->helpers[t].socks);
  }
  free(s->helpers);
  s->helpers = NULL;
  s->helperSlots = 0;
}

/* ---- a forked child ---- */

/* A process forked while a state lives closes its copies of the state's
 * sockets, as with the bootstrap's mesh (core/forkclose.h): a child that
 * kept them held the connections up after its parent died. Closes s's
 * sockets, marking them closed. */
static void netCloseSockets(struct forkClose *f) {
  struct netState *s = (struct netState *)((char *)f - offsetof(struct netState, forkLink));
  for (int i = 0; s->conns && i < s->nconns; i++) {
    struct netConn *n = NET(s->conns[i]);
    for (int k = 0; n && k < n->nsocks; k++)
      if (n->socks[k].fd >= 0) {
        close(n->socks[k].fd);
        n->socks[k].fd = -1;
      }
  }
  if (s->listenFd >= 0) close(s->listenFd);
  s->listenFd = -1;
}

/* ---- setup ---- */

static ncclResult_t netConnAlloc(struct netState *s, struct conn *c, int peer, int isSend, int lane,
                                 const struct netCut *cut, const struct bootstrap *b, size_t buffSize) {
  char *mem = mmap(NULL, s->memBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    WARN("Call to mmap failed: %s (%zu bytes)", strerror(errno), s->memBytes);
    return ncclSystemError;
  }
  struct netConn *n = calloc(1, sizeof *n);
  if (!n) {
    munmap(mem, s->memBytes);
    return ncclSystemError;
  }
  s->mem[s->nconns] = mem;
  s->conns[s->nconns++] = c;
  connLayout(c, mem, buffSize, peer);
  connPrefault(c);
  c->tp = &netTransport;
  c->tpConn = n;
  n->isSend = isSend;
  n->lane = lane;
  n->rank = b->rank;
  n->peerHost = b->peers[peer].hostname;
  n->cut = *cut;
  n->nsocks = 1 + cut->ndata;
  for (int i = 0; i < n->nsocks; i++) n->socks[i].fd = -1;
  /* A sender holds at most a FIFO of slots not yet handed to the kernel,
   * each at most three pieces on the control socket (its header, the
   * operation's descriptor, its data where no data socket takes it) and one
   * on each data socket (cutSlot deals at most a piece to each). */
  for (int i = 0; i < n->nsocks; i++) {
    n->socks[i].qcap = (i == 0 ? 3 : 1) * c->nslots + 2;
    n->socks[i].q = calloc(n->socks[i].qcap, sizeof(struct netTask));
    if (!n->socks[i].q) return ncclSystemError;
  }
  return ncclSuccess;
}

/* The receiving side a transport socket's hello names, or NULL when it is
 * not one this rank waits for (wrong secret or communicator, a rank, lane
 * or socket out of range, one already connected). */
static struct netConn *helloConn(const struct netState *s, const struct bootstrap *b, struct connTable *t, const struct netInfo *info,
                                 const struct netHello *h) {
  int lanes = t->nch + 1;
  if (h->secret != b->secret || h->nonce != b->peers[0].nonce || h->rank < 0 || h->rank >= b->nranks ||
      !s->mine[h->rank] || h->lane < 0 || h->lane >= lanes || h->sock < 0 || h->sock > info[h->rank].cut.ndata)
    return NULL;
  struct netConn *n = NET(connRecv(t, h->rank, h->lane));
  return n && n->socks[h->sock].fd < 0 ? n : NULL;
}

static ncclResult_t netAcceptAll(struct netState *s, struct bootstrap *b, struct connTable *t,
                                 const struct netInfo *info, int expected) {
  struct acceptor *acc = malloc(sizeof *acc);
  if (!acc) return ncclSystemError;
  acceptorInit(acc, s->listenFd, sizeof(struct netHello));
  struct waitState w;
  waitBegin(&w, b->abortFlag, bootstrapLiveness, b, "socket transport setup");
  ncclResult_t res = ncclSuccess;
  while (expected > 0) {
    int fd;
    struct netHello h;
    CHECKGOTO(acceptorNext(acc, &fd, &h, &w), res, out);
    struct netConn *n = helloConn(s, b, t, info, &h);
    if (!n) {
      WARN("NET/Socket : rank %d dropped a connection that is not one of this communicator's", b->rank);
      close(fd);
      continue;
    }
    n->socks[h.sock].fd = fd;
    sockTune(fd);
    expected--;
  }
out:
  acceptorClose(acc);
  free(acc);
  return res;
}

int transportNetKnown(const char *name) { return strcasecmp(name, "Socket") == 0; }

static ncclResult_t netSetup(void **state, struct bootstrap *b, struct connTable *t, size_t buffSize,
                             const unsigned char *mine) {
  int me = b->rank, n = b->nranks, lanes = t->nch + 1;
  struct netState *s = calloc(1, sizeof *s);
  if (!s || !(s->mine = malloc((size_t)n))) {
    free(s);
    return ncclSystemError;
  }
  s->forkLink.closeFds = netCloseSockets; /* listed once set up; netClose closes through it either way */
  *state = s;
  s->listenFd = -1;
  memcpy(s->mine, mine, (size_t)n);
  int nremote = 0;
  for (int p = 0; p < n; p++) nremote += mine[p];

  struct netInfo *info = calloc(n, sizeof *info);
  if (!info) return ncclSystemError;
  ncclResult_t res = ncclSuccess;
  info[me].cut = netLocalCut(nremote > 0);
  if (nremote > 0) {
    INFO(subsysNet | subsysInit, "NET/IB : InfiniBand is not supported%s; using sockets",
         paramInt(paramIbDisable) ? " (NCCL_IB_DISABLE=1)" : "");
    char ip[80];
    sockAddrStr(&b->peers[me].listenAddr, ip, sizeof ip);
    char *colon = strrchr(ip, ':');
    if (colon) *colon = 0;
    INFO(subsysNet | subsysInit, "NET/Socket : Using [0]%s:%s<0>", b->ifname, ip);
    INFO(subsysNet | subsysInit, "Using network Socket");
    /* Listen where the bootstrap listens: the interface NCCL_SOCKET_IFNAME picked. */
    info[me].addr = b->peers[me].listenAddr;
    if (info[me].addr.sa.sa_family == AF_INET6) info[me].addr.sin6.sin6_port = 0;
    else info[me].addr.sin.sin_port = 0;
    CHECKGOTO(sockListen(&info[me].addr, &s->listenFd), res, out);
    info[me].listening = 1;
  }
  CHECKGOTO(bootstrapAllGather(b, info, sizeof *info), res, out);
  if (nremote == 0) goto out;
  for (int p = 0; p < n; p++) { /* what peers say bounds arrays here: check it */
    const struct netCut *c = &info[p].cut;
    if (mine[p] && (c->ndata < 0 || c->ndata > NET_MAX_SOCKS - 1 || c->minTask < 4096 ||
                            c->inlineBytes > (1u << 20))) {
      WARN("NET/Socket : rank %d announced %d data sockets, %u-byte pieces, %u inline bytes: out of range", p,
           (int)c->ndata, c->minTask, c->inlineBytes);
      res = ncclRemoteError;
      goto out;
    }
  }

  s->memBytes = connFifoBytes(buffSize);
  size_t maxConns = (size_t)2 * nremote * lanes;
  s->conns = calloc(maxConns, sizeof *s->conns);
  s->mem = calloc(maxConns, sizeof *s->mem);
  if (!s->conns || !s->mem) {
    res = ncclSystemError;
    goto out;
  }
  int expected = 0;
  for (int p = 0; p < n; p++) {
    if (!mine[p]) continue;
    if (!info[p].listening) {
      WARN("NET/Socket : rank %d needs sockets to reach rank %d, which does not listen (NCCL_SHM_DISABLE "
           "differs between the ranks?)", me, p);
      res = ncclInvalidUsage;
      goto out;
    }
    for (int l = 0; l < lanes; l++) {
      CHECKGOTO(netConnAlloc(s, connSend(t, p, l), p, 1, l, &info[me].cut, b, buffSize), res, out);
      CHECKGOTO(netConnAlloc(s, connRecv(t, p, l), p, 0, l, &info[p].cut, b, buffSize), res, out);
      expected += 1 + info[p].cut.ndata;
    }
  }
  /* Every rank listens before the all-gather returns, so connecting first
   * and accepting after cannot deadlock: the kernel queues the connections. */
  struct waitState w;
  waitBegin(&w, b->abortFlag, bootstrapLiveness, b, "socket transport connect");
  for (int p = 0; p < n; p++) {
    if (!mine[p]) continue;
    for (int l = 0; l < lanes; l++) {
      struct netConn *nc = NET(connSend(t, p, l));
      for (int i = 0; i < nc->nsocks; i++) {
        res = sockConnect(&info[p].addr, &nc->socks[i].fd, &w, 1); /* it listens already */
        int err = errno;
        if ((res == ncclRemoteError && err != 0) || res == ncclTimeout) { /* not a gone peer the wait has named */
          char addr[80], peer[128];
          WARN("NET/Socket : rank %d (host %s) cannot connect to %s at %s, the address it listens on: %s (%s)", me,
               b->peers[me].hostname, bootstrapDescribePeer(b, p, peer, sizeof peer),
               sockAddrStr(&info[p].addr, addr, sizeof addr), err == ETIMEDOUT || err == 0 ? "no answer" : strerror(err),
               err == ECONNREFUSED && sockIsLoopback(&info[p].addr)
                   ? "a loopback address, which only its own host reaches: NCCL_SOCKET_IFNAME picks lo there?"
               : err == ECONNREFUSED ? "it has closed it: failed or gone"
                                     : "its interface, from NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY on its host, is "
                                       "none this host reaches?");
        }
        if (res != ncclSuccess) goto out;
        sockTune(nc->socks[i].fd);
        struct netHello h = {b->secret, b->peers[0].nonce, me, l, i, 0};
        CHECKGOTO(sockSendAll(nc->socks[i].fd, &h, sizeof h, &w), res, out);
      }
    }
  }
  CHECKGOTO(netAcceptAll(s, b, t, info, expected), res, out);
  CHECKGOTO(helpersStart(s), res, out);
  forkCloseAdd(&s->forkLink);
  char buf[80];
  INFO(subsysNet, "NET/Socket : %d remote peer(s), %d lane(s), %d socket(s) per connection, listening on %s",
       nremote, lanes, 1 + info[me].cut.ndata, sockAddrStr(&info[me].addr, buf, sizeof buf));
out:
  free(info);
  return res;
}

static void netClose(void *state) {
  struct netState *s = state;
  if (!s) return;
  helpersStop(s);
  forkCloseRemove(&s->forkLink);
  for (int i = 0; i < s->nconns; i++) {
    struct netConn *n = NET(s->conns[i]);
    for (int k = 0; n && k < n->nsocks; k++) free(n->socks[k].q);
    free(n);
    s->conns[i]->tpConn = NULL;
    munmap(s->mem[i], s->memBytes);
  }
  free(s->conns);
  free(s->mem);
  s->conns = NULL;
  s->mem = NULL;
  s->nconns = 0;
  free(s->mine);
  free(s);
}

/* Bytes the kernel holds for a socket that the peer's host has not yet
 * acknowledged (0 when it cannot say: a broken socket sends nothing more). */
static int unacked(int fd) {
  int n = 0;
  return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : 0;
}

/* Destroy and finalize say goodbye on the bootstrap's connection, which
 * may reach the peer before the last bytes on these (a slow or lossy link:
 * a ring AllReduce's last step still queued when its sender returned and
 * destroyed, and the peer failed at the goodbye with the data on its way).
 * Waits until the peers' hosts have acknowledged every byte, while that
 * goes on: bytes a peer will never read (a send nobody received, which
 * fills its window) stop it after 5 s without progress. What comes in is
 * left alone: a peer's send to this rank must fail, not vanish. */
#define NET_DRAIN_STALL_NS 5000000000ull
static void netDrain(void *state, struct bootstrap *b, uint64_t timeoutNs) {
  struct netState *s = state;
  struct waitState w;
  waitBegin(&w, NULL, NULL, NULL, "sent bytes to reach the peers");
  w.timeoutNs = 0; /* bounded below, quietly: the goodbye follows either way */
  uint64_t t0 = clockNs(), moved = t0, least = UINT64_MAX;
  for (;;) {
    uint64_t left = 0;
    for (int i = 0; i < s->nconns; i++) {
      struct netConn *n = NET(s->conns[i]);
      if (!n || !n->isSend || n->err != ncclSuccess || bootstrapPeerDeparted(b, s->conns[i]->peer)) continue;
      for (int k = 0; k < n->nsocks; k++)
        if (n->socks[k].fd >= 0) left += (uint64_t)unacked(n->socks[k].fd);
    }
    if (!left || bootstrapGoneCount(b) > 0) return; /* a failed job's destroy waits for nothing */
    uint64_t now = clockNs();
    if (left < least) {
      least = left;
      moved = now;
    }
    if ((timeoutNs && now - t0 > timeoutNs) || now - moved > NET_DRAIN_STALL_NS) {
      INFO(subsysNet, "NET/Socket : gave up after %.3g s on %llu bytes the peers have not received",
           (double)(now - t0) / 1e9, (unsigned long long)left);
      return;
    }
    waitPause(&w);
  }
}

/* The sender published a slot: its size for the header, and on the wire at once. */
static void netPosted(struct conn *c, size_t bytes) {
  NET(c)->sizes[(c->step - 1) % c->nslots] = (uint32_t)bytes;
  netProgress(c);
}

static int netPending(const struct conn *c) { return NET(c)->isSend && NET(c)->done < c->step; }

/* Slots whose every byte the kernel has taken: the sender's done count. */
static uint64_t netSent(const struct conn *c) { return NET(c)->done; }

static uint64_t netMoved(const struct conn *c) { return __atomic_load_n(&NET(c)->bytes, __ATOMIC_RELAXED); }

static int netPollWakes(const struct conn *c) { return !NET(c)->helped; }

static int netCanConnect(const struct bootstrap *b, int peer) {
  (void)b;
  (void)peer;
  return 1; /* every rank listens: the network reaches everyone */
}

const struct transport netTransport = {
    .name = "NET/Socket/0",
    .p2pName = "NET/Socket/0",
    .canConnect = netCanConnect,
    .setup = netSetup,
    .close = netClose,
    .drain = netDrain,
    .progress = netProgress,
    .posted = netPosted,
    .postFrom = netPostFrom,
    .pending = netPending,
    .sent = netSent,
    .moved = netMoved,
    .stalled = netCheckNeeded,
    .pollFds = netPollFds,
    .pollWakes = netPollWakes,
};
