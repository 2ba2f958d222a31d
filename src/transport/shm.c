#define _GNU_SOURCE
#include "transport/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/param.h"

static int shmCanConnect(const struct bootstrap *b, int peer) {
  const struct bootstrapPeerInfo *me = &b->peers[b->rank], *them = &b->peers[peer];
  return !me->shmDisable && !them->shmDisable && them->hostHash == me->hostHash;
}

/* The first page of each rank's segment says how a local peer can read
 * this rank's memory: its process and the address and value of a cookie
 * there. A peer that reads the cookie back with process_vm_readv (or finds
 * the same cookie as its own: a thread of the same process) may read this
 * rank's buffers where they are. */
#define SHM_INFO_BYTES 4096
struct shmRankInfo {
  int64_t pid;
  uint64_t cookieAddr;
  uint64_t cookie;
};

/* The cookie of this process, made again after a fork (a child is another
 * process with the same memory, so it must not pass for its parent). */
static uint64_t shmCookie;
static pid_t shmCookiePid;
static pthread_mutex_t shmCookieLock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t shmProcessCookie(void) {
  pthread_mutex_lock(&shmCookieLock);
  if (shmCookiePid != getpid()) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = 0;
    v ^= (uint64_t)clockNs() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    shmCookie = v | 1; /* never 0, which a fresh segment holds */
    shmCookiePid = getpid();
  }
  uint64_t v = shmCookie;
  pthread_mutex_unlock(&shmCookieLock);
  return v;
}

/* How this rank can read the memory of the peer whose segment starts with
 * info: directly (one process), with CMA, or not at all (CHORUS_SINGLE_COPY=0,
 * or the kernel or a seccomp filter refuses, as containers often do). */
static int shmReadMode(const struct shmRankInfo *info, int peer) {
  if (paramInt(paramSingleCopy) == 0) return connReadNone;
  uint64_t mine = shmProcessCookie();
  if (info->pid == getpid() && info->cookie == mine) return connReadDirect;
  uint64_t got = 0;
  struct iovec local = {&got, sizeof got}, remote = {(void *)(uintptr_t)info->cookieAddr, sizeof got};
  ssize_t n = process_vm_readv((pid_t)info->pid, &local, 1, &remote, 1, 0);
  if (n == (ssize_t)sizeof got && got == info->cookie) return connReadCma;
  INFO(subsysShm, "SHM : cannot read local rank %d's memory (pid %lld) with CMA: %s; its data comes through the FIFOs",
       peer, (long long)info->pid, n < 0 ? strerror(errno) : "it reads back something else");
  return connReadNone;
}

static int shmPeerReads(const struct conn *c) {
  return __atomic_load_n(&c->ctrl->readMode, __ATOMIC_RELAXED) != connReadNone;
}

static ncclResult_t shmReadPeer(struct conn *c, void *dst, uint64_t addr, size_t bytes) {
  if (c->ctrl->readMode == connReadDirect) {
    memcpy(dst, (const void *)(uintptr_t)addr, bytes);
    return ncclSuccess;
  }
  size_t done = 0;
  while (done < bytes) { /* the kernel may stop short (at a page it cannot reach yet) */
    struct iovec local = {(char *)dst + done, bytes - done}, remote = {(void *)(uintptr_t)(addr + done), bytes - done};
    ssize_t n = process_vm_readv(c->ctrl->readPid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      int err = n < 0 ? errno : EFAULT;
      WARN("SHM : reading %zu bytes of rank %d's buffer (pid %d) failed: %s", bytes, c->peer, c->ctrl->readPid,
           strerror(err));
      return err == ESRCH ? ncclRemoteError : ncclSystemError;
    }
    done += (size_t)n;
  }
  return ncclSuccess;
}

static socklen_t udsName(struct sockaddr_un *a, uint64_t nonce, int rank) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  /* Abstract namespace (leading NUL): no file is ever created. */
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "chorus-%016llx-%d", (unsigned long long)nonce, rank);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* A one-byte message with room for one file descriptor (SCM_RIGHTS). */
struct fdMsg {
  char byte;
  struct iovec iov;
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr msg;
};

static void fdMsgInit(struct fdMsg *m) {
  memset(m, 0, sizeof *m);
  m->iov = (struct iovec){&m->byte, 1};
  m->msg.msg_iov = &m->iov;
  m->msg.msg_iovlen = 1;
  m->msg.msg_control = m->u.buf;
  m->msg.msg_controllen = sizeof m->u.buf;
}

static ncclResult_t sendFd(int sock, int fd) {
  struct fdMsg m;
  fdMsgInit(&m);
  struct cmsghdr *c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(sock, &m.msg, MSG_NOSIGNAL) != 1) { /* the peer went away */
    WARN("SHM : cannot pass the segment to a local peer: %s", strerror(errno));
    return ncclRemoteError;
  }
  return ncclSuccess;
}

/* Returns 1 with *fd set, 0 if nothing arrived yet, -1 on error. */
static int tryRecvFd(int sock, int *fd) {
  struct fdMsg m;
  fdMsgInit(&m);
  ssize_t n = recvmsg(sock, &m.msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  struct cmsghdr *c = n == 1 ? CMSG_FIRSTHDR(&m.msg) : NULL;
  if (c == NULL || c->cmsg_type != SCM_RIGHTS) return -1;
  memcpy(fd, CMSG_DATA(c), sizeof(int));
  return 1;
}

static ncclResult_t shmSetup(void **state, struct bootstrap *b, struct connTable *t, size_t buffSize,
                             const unsigned char *mine) {
  int me = b->rank, n = b->nranks, lanes = t->nch + 1;
  struct shmState *s = calloc(1, sizeof *s);
  if (!s) return ncclSystemError;
  *state = s;
  s->nranks = n;
  s->connBytes = connFifoBytes(buffSize);
  s->segBytes = SHM_INFO_BYTES + s->connBytes * lanes * n;
  s->segs = calloc(n, sizeof(void *));
  if (!s->segs) return ncclSystemError;
  int nlocal = 1; /* me and the peers it connects */
  for (int p = 0; p < n; p++) nlocal += mine[p];

  int memfd = memfd_create("chorus-fifo", MFD_CLOEXEC);
  SYSCHECK(memfd, "memfd_create");
  ncclResult_t res = ncclSuccess;
  int listenFd = -1, *peerSock = NULL;
  if (ftruncate(memfd, (off_t)s->segBytes) < 0) {
    WARN("Call to ftruncate failed: %s", strerror(errno));
    res = ncclSystemError;
    goto out;
  }
  s->segs[me] = mmap(NULL, s->segBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (s->segs[me] == MAP_FAILED) {
    s->segs[me] = NULL;
    WARN("Call to mmap failed: %s (%zu bytes)", strerror(errno), s->segBytes);
    res = ncclSystemError;
    goto out;
  }
  static const struct shmRankInfo none;
  struct shmRankInfo *info = s->segs[me];
  *info = none;
  info->pid = getpid();
  info->cookieAddr = (uintptr_t)&shmCookie;
  info->cookie = shmProcessCookie();
  peerSock = malloc(sizeof(int) * n);
  if (!peerSock) {
    res = ncclSystemError;
    goto out;
  }
  for (int p = 0; p < n; p++) peerSock[p] = -1;

  uint64_t nonce = b->peers[0].nonce;
  struct sockaddr_un addr;
  if (nlocal > 1) {
    listenFd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    socklen_t len = udsName(&addr, nonce, me);
    if (listenFd < 0 || bind(listenFd, (struct sockaddr *)&addr, len) < 0 || listen(listenFd, n) < 0) {
      WARN("SHM : cannot listen on a Unix socket: %s", strerror(errno));
      res = ncclSystemError;
      goto out;
    }
  }
  /* Everyone listens before anyone connects. */
  CHECKGOTO(bootstrapBarrier(b), res, out);
  int toReceive = 0, toServe = nlocal - 1;
  for (int p = 0; p < n; p++) {
    if (!mine[p]) continue;
    peerSock[p] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t len = udsName(&addr, nonce, p);
    if (peerSock[p] < 0 || connect(peerSock[p], (struct sockaddr *)&addr, len) < 0) {
      /* It listened before the barrier: now it is gone (the WARN names it). */
      res = peerSock[p] < 0 ? ncclSystemError : bootstrapLiveness(b);
      WARN("SHM : cannot reach local rank %d over a Unix socket: %s", p, strerror(errno));
      if (res == ncclSuccess) res = ncclRemoteError;
      goto out;
    }
    toReceive++;
  }
  struct waitState w;
  waitBegin(&w, b->abortFlag, bootstrapLiveness, b, "shared-memory setup");
  while (toReceive > 0 || toServe > 0) {
    int progressed = 0;
    if (toServe > 0) {
      int c = accept4(listenFd, NULL, NULL, SOCK_CLOEXEC);
      if (c >= 0) {
        res = sendFd(c, memfd);
        close(c);
        if (res != ncclSuccess) goto out;
        toServe--;
        progressed = 1;
      }
    }
    for (int p = 0; p < n; p++) {
      if (peerSock[p] < 0) continue;
      int fd, r = tryRecvFd(peerSock[p], &fd);
      if (r == 0) continue;
      close(peerSock[p]);
      peerSock[p] = -1;
      if (r < 0) { /* it closed without handing it over: gone */
        res = bootstrapLiveness(b);
        WARN("SHM : local rank %d did not hand over its segment", p);
        if (res == ncclSuccess) res = ncclRemoteError;
        goto out;
      }
      s->segs[p] = mmap(NULL, s->segBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (s->segs[p] == MAP_FAILED) {
        s->segs[p] = NULL;
        WARN("Call to mmap failed: %s", strerror(errno));
        res = ncclSystemError;
        goto out;
      }
      toReceive--;
      progressed = 1;
    }
    if (progressed) waitProgress(&w);
    else CHECKGOTO(waitPause(&w), res, out);
  }
  for (int p = 0; p < n; p++) {
    if (!mine[p]) continue;
    char *conns[2] = {(char *)s->segs[p] + SHM_INFO_BYTES, (char *)s->segs[me] + SHM_INFO_BYTES};
    for (int l = 0; l < lanes; l++) {
      /* I send into the peer's segment at my index; I receive in mine at theirs. */
      connLayout(connSend(t, p, l), conns[0] + s->connBytes * (size_t)(me * lanes + l), buffSize, p);
      connLayout(connRecv(t, p, l), conns[1] + s->connBytes * (size_t)(p * lanes + l), buffSize, p);
      connSend(t, p, l)->tp = connRecv(t, p, l)->tp = &shmTransport;
    }
  }
  /* Fault in the control block and each slot's first page on both sides now
   * (each process has its own page tables), so that small messages never
   * pay for a page fault later. Nothing is in flight before the barrier that
   * follows setup, so writing zeros is safe. */
  for (int p = 0; p < n; p++)
    for (int l = 0; mine[p] && l < lanes; l++) {
      connPrefault(connSend(t, p, l));
      connPrefault(connRecv(t, p, l));
    }
  /* How I read each peer's memory, on my receiving ends (in my segment):
   * the senders read it there once the barrier after setup has passed. */
  int singleCopy = 0;
  for (int p = 0; p < n; p++) {
    if (!mine[p]) continue;
    const struct shmRankInfo *theirs = s->segs[p];
    int mode = shmReadMode(theirs, p);
    singleCopy += mode != connReadNone;
    for (int l = 0; l < lanes; l++) {
      struct connCtrl *ctrl = connRecv(t, p, l)->ctrl;
      ctrl->readPid = (int32_t)theirs->pid;
      __atomic_store_n(&ctrl->readMode, (uint32_t)mode, __ATOMIC_RELEASE);
    }
  }
  INFO(subsysShm, "SHM : segment of %zu bytes per rank, %d local ranks, single copy from %d of them", s->segBytes,
       nlocal, singleCopy);
out:
  if (peerSock)
    for (int p = 0; p < n; p++)
      if (peerSock[p] >= 0) close(peerSock[p]);
  free(peerSock);
  if (listenFd >= 0) close(listenFd);
  close(memfd);
  return res;
}

static void shmClose(void *state) {
  struct shmState *s = state;
  if (!s) return;
  for (int p = 0; s->segs && p < s->nranks; p++)
    if (s->segs[p]) munmap(s->segs[p], s->segBytes);
  free(s->segs);
  free(s);
}

const struct transport shmTransport = {
    .name = "SHM/direct/direct",
    .p2pName = "P2P/SHM",
    .canConnect = shmCanConnect,
    .setup = shmSetup,
    .close = shmClose,
    .peerReads = shmPeerReads,
    .readPeer = shmReadPeer,
};
