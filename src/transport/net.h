/* The socket transport (NCCL's "NET/Socket"): ranks on different hosts, or
 * on one host with NCCL_SHM_DISABLE=1, connect over TCP. It plugs under the
 * same FIFO of slots as shared memory (DESIGN.md invariant 5), behind the
 * transport table as netTransport: each side of a connection has its own
 * FIFO in private memory; its progress function sends the slots the
 * protocol posted and receives into the slots it released, with
 * nonblocking I/O only, from whichever thread runs the operation. This
 * header is the transport's own (its state's layout).
 *
 * Wire format, per slot: a 4-byte size on the connection's first socket
 * (the control socket; NET_HDR_DESC set: the slot's 24-byte operation
 * descriptor follows, see conn.h), followed there by the data when it is at most
 * NCCL_SOCKET_INLINE bytes or the connection has no data sockets; larger
 * data goes over the data sockets in pieces of at least
 * NCCL_SOCKET_MIN_TASKSIZE bytes, assigned round-robin. The receiver cuts
 * with the sender's settings, which it learns at setup. Both ends must have
 * the same byte order (x86-64 and AArch64 Linux are both little-endian). */
#ifndef CHORUS_TRANSPORT_NET_H
#define CHORUS_TRANSPORT_NET_H
#include "core/forkclose.h"
#include <poll.h>
#include <pthread.h>
#include <stdint.h>

#include "bootstrap/bootstrap.h"
#include "transport/conn.h"

#define NET_MAX_SOCKS 65 /* one control socket and up to 64 data sockets */
#define NET_HDR_DESC 0x80000000u

/* A piece of a slot on one socket. */
struct netTask {
  char *ptr;
  uint32_t len;
  uint64_t step; /* the slot it belongs to */
};

/* One TCP socket and the pieces queued on it, in wire order. A data socket
 * may belong to a helper thread: then the thread running the operation
 * only appends pieces (qtail) and the helper moves them (qhead, off). */
struct netSock {
  int fd;
  struct netTask *q;
  uint32_t qcap;
  uint64_t qhead, qtail;
  size_t off; /* bytes of q[qhead] already moved */
  struct netHelper *helper; /* NULL: driven by the operation's thread */
};

/* A helper thread (NCCL_SOCKET_NTHREADS): moves the pieces of the data
 * sockets it owns, sleeping in poll() on them and on an eventfd that the
 * operation's thread writes when it queues work while the helper sleeps. */
struct netHelper {
  pthread_t thread;
  int efd;
  int stop;
  int sleeping;
  int nsocks, cap;
  struct conn **conns;
  struct netSock **socks;
};

/* Settings a sender cuts slots with; the receiver cuts the same way. */
struct netCut {
  int32_t ndata;   /* data sockets besides the control socket */
  uint32_t inlineBytes;
  uint32_t minTask;
};

struct netConn {
  int isSend, lane;
  const char *peerHost;
  struct netCut cut;
  int nsocks; /* 1 + cut.ndata */
  int helped; /* its data sockets belong to helper threads */
  struct netSock socks[NET_MAX_SOCKS];
  uint32_t rr;        /* next data socket */
  uint64_t queued;    /* slots cut into pieces */
  uint64_t done;      /* slots entirely sent (sender) or received (receiver) */
  uint32_t pending[CONN_MAX_SLOTS]; /* pieces outstanding per slot */
  uint32_t sizes[CONN_MAX_SLOTS];   /* bytes per slot */
  uint32_t hdrs[CONN_MAX_SLOTS];    /* sender: the size header on the wire */
  const char *refs[CONN_MAX_SLOTS]; /* sender: where a slot's bytes are, when not in the slot */
  /* Receiver: bytes read off the control socket ahead of need, so that a
   * small message and its header arrive in one system call. */
  uint32_t stageHead, stageTail;
  int stageDry;
  uint32_t headerReads; /* reads of the control socket (delayed ACKs are set again every 64) */ /* within one progress call: the last read came short, the socket has no more yet */
  char stage[512];
  uint64_t bytes;   /* moved so far: progress for the one wait */
  int eof;          /* receiver: the peer closed between messages */
  ncclResult_t err; /* sticky: the connection broke */
  int rank;         /* own rank, for messages */
};

struct netState {
  int nhelpers;      /* running */
  int helperSlots;   /* allocated */
  struct netHelper *helpers;
  int nconns;
  struct conn **conns; /* every socket connection, send and receive */
  char **mem;          /* FIFO memory of each */
  size_t memBytes;
  int listenFd;
  unsigned char *mine; /* [nranks]: the peers it connects */
  struct forkClose forkLink; /* its sockets, which a forked child closes */
};

#endif
