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
#include <sys/un.h>
#include <unistd.h>

#include "bootstrap/acceptor.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/param.h"
#include "core/wait.h"
#include "transport/cma.h"
#include "transport/memshare.h"

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
  int err = cmaRead((pid_t)info->pid, &got, info->cookieAddr, sizeof got);
  if (!err && got == info->cookie) return connReadCma;
  INFO(subsysShm, "SHM : cannot read local rank %d's memory (pid %lld) with CMA: %s; its data comes through the FIFOs",
       peer, (long long)info->pid, err ? strerror(err) : "it reads back something else");
  return connReadNone;
}

/* A single-copy read of bytes at addr in the sender's process into dst.
 * The kernel's copy runs at about half memcpy's rate for one thread, and
 * two threads copying halves move twice as much (two processes on the
 * 2-core development VM, 32-256 MiB: 5.5 GB/s read by one, 10.6 with the
 * other process writing the second half at once; a scratch program,
 * 2026-12-05). So a large read offers its second half to the sender
 * (connCtrl's offer), which takes it if it is waiting on this connection
 * (a Broadcast's root, a Send's sender: shmAssist) and writes it into dst
 * while this rank reads the first half; a half nobody took by then this
 * rank reads itself. CHORUS_CMA_SPLIT: -1 (auto) offers reads of 64 KiB or
 * more where the ranks have a core each (waitCoresShared), 1 reads of 8
 * KiB or more always (tests), 0 never. The wait for the sender's half
 * gives up after timeoutNs without it (0: CHORUS_TIMEOUT's). */
static int shmReadCma(struct shmState *s, struct conn *c, void *dst, uint64_t addr, size_t bytes,
                      uint64_t timeoutNs, ncclResult_t *waited) {
  struct connCtrl *k = c->ctrl;
  pid_t pid = k->readPid;
  size_t half = bytes / 2 & ~(size_t)4095; /* whole pages to the first half */
  if (!s->offerMin || bytes < s->offerMin || !half || __atomic_load_n(&k->offerRefused, __ATOMIC_ACQUIRE))
    return cmaRead(pid, dst, addr, bytes);
  uint64_t job = k->offered + 1; /* only this rank raises offered, and only this rank's one thread (the engine's) */
  k->offerDst = (uintptr_t)dst + half;
  k->offerSrc = addr + half;
  k->offerBytes = bytes - half;
  __atomic_store_n(&k->offered, job, __ATOMIC_RELEASE);
  int err = cmaRead(pid, dst, addr, half);
  uint64_t before = job - 1; /* the second half is this rank's if the sender has not taken it */
  int readSecond = __atomic_compare_exchange_n(&k->offerClaimed, &before, job, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (!readSecond) {
    /* The sender is copying it, a system call of microseconds, unless it
     * died (the bootstrap's liveness names it) or stopped; ncclCommAbort
     * ends the wait too. A sender stopped in the middle of its write may
     * still write that half once it runs again, into a buffer whose
     * operation has failed. */
    struct waitState w;
    waitBegin(&w, s->boot->abortFlag, bootstrapLiveness, s->boot, "the sender's half of a single-copy read");
    if (timeoutNs) w.timeoutNs = timeoutNs; /* the communicator's, as the engine's own wait */
    while (__atomic_load_n(&k->offerDone, __ATOMIC_ACQUIRE) != job) {
      ncclResult_t r = waitPause(&w);
      if (r != ncclSuccess) {
        *waited = r;
        return EINTR;
      }
    }
    /* The sender's write failed (it says why, and offers no more): read it here. */
    readSecond = __atomic_load_n(&k->offerErr, __ATOMIC_RELAXED) != 0;
  }
  if (readSecond && !err) err = cmaRead(pid, (char *)dst + half, addr + half, bytes - half);
  return err;
}

/* The sender's part of the offer (shmReadCma): on a connection its receiver
 * reads with CMA, the half it offered, written into the receiver's memory
 * (the receiver's process as setup saw it, not as the offer says). */
static int shmAssist(struct conn *c) {
  struct connCtrl *k = c->ctrl;
  struct shmPeer *q = c->tpConn;
  uint64_t job = __atomic_load_n(&k->offered, __ATOMIC_ACQUIRE), before = job - 1;
  /* A peer whose cookie this rank could not read back at setup it does not
   * write either: the reader reads its halves itself. */
  if (job == 0 || !q->cma || __atomic_load_n(&k->offerClaimed, __ATOMIC_RELAXED) != before ||
      !__atomic_compare_exchange_n(&k->offerClaimed, &before, job, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return 0;
  const struct shmRankInfo *info = q->s->segs[q->rank];
  int err = cmaWrite((pid_t)info->pid, k->offerDst, (const void *)(uintptr_t)k->offerSrc, (size_t)k->offerBytes);
  if (err) {
    INFO(subsysShm, "SHM : cannot write local rank %d's memory with CMA (%s): it reads what it reads from here alone",
         q->rank, strerror(err));
    __atomic_store_n(&k->offerRefused, 1, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&k->offerErr, err, __ATOMIC_RELAXED);
  __atomic_store_n(&k->offerDone, job, __ATOMIC_RELEASE);
  return 1;
}

static ncclResult_t shmReadPeer(struct conn *c, void *dst, uint64_t addr, uint64_t key, size_t bytes,
                                uint64_t timeoutNs) {
  if (c->ctrl->readMode == connReadDirect) {
    memcpy(dst, (const void *)(uintptr_t)addr, bytes);
    return ncclSuccess;
  }
  if (c->ctrl->readMode != connReadCma) { /* a reference to memory it handed over, which could not be mapped */
    WARN("SHM : rank %d's memory #%llu (ncclMemAlloc) could not be mapped here, and CMA is not available",
         c->peer, (unsigned long long)key);
    return ncclSystemError;
  }
  ncclResult_t waited = ncclSuccess;
  int err = shmReadCma(((struct shmPeer *)c->tpConn)->s, c, dst, addr, bytes, timeoutNs, &waited);
  if (waited != ncclSuccess) { /* the wait said why (a WARN) */
    WARN("SHM : rank %d's half of reading %zu bytes of its buffer did not come", c->peer, bytes);
    return waited;
  }
  if (err) {
    WARN("SHM : reading %zu bytes of rank %d's buffer (pid %d) failed: %s", bytes, c->peer, c->ctrl->readPid,
         strerror(err));
    return err == ESRCH ? ncclRemoteError : ncclSystemError;
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

/* Sends len bytes of data with descriptor fd (SCM_RIGHTS; none if -1) as
 * one message; returns what sendmsg returns. */
static ssize_t sendWithFd(int sock, const void *data, size_t len, int fd, int flags) {
  struct iovec iov = {(void *)data, len};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    memset(&u, 0, sizeof u); /* the header's padding goes out too */
    msg.msg_control = u.buf;
    msg.msg_controllen = sizeof u.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  return sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
}

/* Receives one message of up to len bytes without waiting, with the
 * descriptor it carries in *fd (-1: none); returns what recvmsg returns.
 * *lost (unless NULL): a descriptor was sent but the kernel dropped it
 * (MSG_CTRUNC: this process has no descriptor left). */
static ssize_t recvWithFd(int sock, void *buf, size_t len, int *fd, int *lost) {
  struct iovec iov = {buf, len};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
  *fd = -1;
  if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(c), sizeof(int));
  if (lost) *lost = n > 0 && (msg.msg_flags & MSG_CTRUNC) && *fd < 0;
  return n;
}

static ncclResult_t sendFd(int sock, int fd) {
  char byte = 0;
  if (sendWithFd(sock, &byte, 1, fd, 0) != 1) { /* the peer went away */
    WARN("SHM : cannot pass the segment to a local peer: %s", strerror(errno));
    return ncclRemoteError;
  }
  return ncclSuccess;
}

/* 1: got it (*fd set); 0: not yet; -1: the peer closed without it; -2: it came, but
 * this process could not take the descriptor (out of them: EMFILE). */
static int tryRecvFd(int sock, int *fd) {
  char byte;
  int lost = 0;
  ssize_t n = recvWithFd(sock, &byte, 1, fd, &lost);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  if (n == 1 && lost) return -2;
  if (n != 1 || *fd < 0) {
    if (*fd >= 0) close(*fd);
    return -1;
  }
  return 1;
}

/* Memory of ncclMemAlloc's (transport/memshare.h) between local ranks.
 * The sender hands a piece over with a note on its socket to the peer
 * (the descriptor rides along) before the first slot that refers to it,
 * counts the note in the peer's receiving control block, and the receiver,
 * given a reference it does not map yet, reads the notes the count says
 * have come (they are in its socket: sent before the slot was posted).
 * Freed memory is taken back with another note, read with the next ones. */
enum { shmNoteShare = 1, shmNoteForget = 2 };
struct shmNote {
  int32_t from, kind;
  uint64_t id, base, bytes;
};

/* The live states, so that freed memory is taken back from every peer
 * that was given it. */
static pthread_mutex_t shmLiveLock = PTHREAD_MUTEX_INITIALIZER;
static struct shmState *shmLiveStates;

/* Sends note (with fd, unless -1) to q without blocking; 1 when sent. */
static int shmSendNote(struct shmPeer *q, const struct shmNote *note, int fd) {
  if (q->chan < 0 || sendWithFd(q->chan, note, sizeof *note, fd, MSG_DONTWAIT) != (ssize_t)sizeof *note) return 0;
  __atomic_add_fetch(q->sentNotes, 1, __ATOMIC_RELEASE);
  return 1;
}

static void shmForget(uint64_t id) {
  pthread_mutex_lock(&shmLiveLock);
  for (struct shmState *s = shmLiveStates; s; s = s->next) {
    pthread_mutex_lock(&s->lock);
    for (int p = 0; p < s->nranks; p++) {
      struct shmPeer *q = &s->peers[p];
      for (int i = 0; i < q->ntold; i++)
        if (q->told[i] == id) {
          struct shmNote note = {s->me, shmNoteForget, id, 0, 0};
          shmSendNote(q, &note, -1); /* if it cannot go, the peer keeps a mapping nobody refers to */
          q->told[i] = q->told[--q->ntold];
          break;
        }
    }
    pthread_mutex_unlock(&s->lock);
  }
  pthread_mutex_unlock(&shmLiveLock);
}

/* A forked child has none of its parent's communicators: it must neither
 * wait on a lock a parent's thread held at the fork nor send notes on the
 * parent's sockets, and it closes its copies of them (only closes). */
static void shmLivePrepare(void) { pthread_mutex_lock(&shmLiveLock); }
static void shmLiveParent(void) { pthread_mutex_unlock(&shmLiveLock); }
static void shmLiveChild(void) {
  for (struct shmState *s = shmLiveStates; s; s = s->next) {
    for (int p = 0; p < s->nranks; p++)
      if (s->peers[p].chan >= 0) {
        close(s->peers[p].chan);
        s->peers[p].chan = -1;
      }
  }
  shmLiveStates = NULL;
  pthread_mutex_init(&shmLiveLock, NULL);
}
static pthread_once_t shmAtforkOnce = PTHREAD_ONCE_INIT;
static void shmAtfork(void) { pthread_atfork(shmLivePrepare, shmLiveParent, shmLiveChild); }

static void shmLive(struct shmState *s, int live) {
  pthread_once(&shmAtforkOnce, shmAtfork);
  pthread_mutex_lock(&shmLiveLock);
  struct shmState **at = &shmLiveStates;
  while (*at && *at != s) at = &(*at)->next;
  if (live && !*at) {
    s->next = shmLiveStates;
    shmLiveStates = s;
  } else if (!live && *at) {
    *at = s->next;
  }
  pthread_mutex_unlock(&shmLiveLock);
  if (live) shareSetForgetHook(shmForget);
}

/* Under s->lock: 1 when q has (been given) this process's memory r. */
static int shmTold(struct shmPeer *q, const struct shareRegion *r) {
  for (int i = 0; i < q->ntold; i++)
    if (q->told[i] == r->id) return 1;
  if (q->ntold == q->capTold) {
    int cap = q->capTold ? 2 * q->capTold : 8;
    uint64_t *grown = realloc(q->told, sizeof *grown * (size_t)cap);
    if (!grown) return 0;
    q->told = grown;
    q->capTold = cap;
  }
  int fd = shareDupFd(r->id);
  if (fd < 0) return 0; /* freed meanwhile */
  struct shmNote note = {q->s->me, shmNoteShare, r->id, r->base, r->bytes};
  int sent = shmSendNote(q, &note, fd);
  close(fd);
  if (sent) q->told[q->ntold++] = r->id;
  return sent;
}

static int shmShareRef(struct conn *c, const void *data, size_t bytes, int anyMemory, uint64_t *key) {
  uint32_t mode = __atomic_load_n(&c->ctrl->readMode, __ATOMIC_RELAXED);
  struct shareRegion r;
  *key = 0;
  /* One process: every byte is the receiver's to read, at memory speed
   * where it is ncclMemAlloc's (elsewhere only when the task says so). */
  if (mode == connReadDirect) return anyMemory || shareFind(data, bytes, &r);
  struct shmPeer *q = c->tpConn;
  if (q && !__atomic_load_n(q->refused, __ATOMIC_ACQUIRE) && shareFind(data, bytes, &r)) {
    pthread_mutex_lock(&q->s->lock);
    int told = shmTold(q, &r);
    pthread_mutex_unlock(&q->s->lock);
    if (told) {
      *key = r.id;
      return 1;
    }
  }
  return anyMemory && mode == connReadCma;
}

/* Under s->lock: drops q's mapping of id (if any). */
static void shmUnmap(struct shmPeer *q, uint64_t id) {
  for (int i = 0; i < q->nmaps; i++)
    if (q->maps[i].id == id) {
      INFO(subsysShm, "SHM : unmapped local rank %d's memory #%llu (freed)", q->rank, (unsigned long long)id);
      munmap(q->maps[i].local, q->maps[i].bytes);
      q->maps[i] = q->maps[--q->nmaps];
      return;
    }
}

/* Under s->lock: this rank could not map memory q handed over: q posts
 * no more references to such memory here (its data comes through the
 * FIFOs from then on; the operation that meets the failure fails). */
static void shmRefuse(struct shmPeer *q, const struct shmNote *note, const char *why) {
  INFO(subsysShm, "SHM : cannot map %llu bytes of local rank %d's memory #%llu: %s; its ncclMemAlloc memory comes "
       "through the FIFOs from now on", (unsigned long long)note->bytes, q->rank, (unsigned long long)note->id, why);
  __atomic_store_n(q->refuse, 1, __ATOMIC_RELEASE);
}

/* Under s->lock: takes in one note (with its descriptor, if any). */
static void shmTakeNote(struct shmState *s, const struct shmNote *note, int fd) {
  if (note->from < 0 || note->from >= s->nranks || note->from == s->me) return;
  struct shmPeer *q = &s->peers[note->from];
  q->drained++;
  shmUnmap(q, note->id);
  if (note->kind != shmNoteShare) return;
  if (fd < 0) {
    shmRefuse(q, note, "its descriptor did not come (this process's descriptors ran out?)");
    return;
  }
  if (q->nmaps == q->capMaps) {
    int cap = q->capMaps ? 2 * q->capMaps : 8;
    struct shmMap *grown = realloc(q->maps, sizeof *grown * (size_t)cap);
    if (!grown) {
      shmRefuse(q, note, "out of memory");
      return;
    }
    q->maps = grown;
    q->capMaps = cap;
  }
  /* Writable: a peer's result may be written here, where it asked (mapPeer) */
  void *local = mmap(NULL, note->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (local == MAP_FAILED) {
    shmRefuse(q, note, strerror(errno));
    return;
  }
  q->maps[q->nmaps++] = (struct shmMap){note->id, note->base, note->bytes, local};
  INFO(subsysShm, "SHM : mapped %llu bytes of local rank %d's memory #%llu (ncclMemAlloc): read in place",
       (unsigned long long)note->bytes, note->from, (unsigned long long)note->id);
}

/* Under s->lock: reads every note that has come from local peers. */
static void shmDrainNotes(struct shmState *s) {
  for (int p = 0; p < s->nranks; p++)
    while (s->peers[p].chan >= 0) {
      struct shmNote note;
      int fd;
      ssize_t n = recvWithFd(s->peers[p].chan, &note, sizeof note, &fd, NULL);
      if (n <= 0) break;
      if (n == (ssize_t)sizeof note) shmTakeNote(s, &note, fd);
      if (fd >= 0) close(fd);
    }
}

static void *shmMapPeer(struct conn *c, uint64_t addr, uint64_t key, size_t bytes) {
  if (key == 0)
    return __atomic_load_n(&c->ctrl->readMode, __ATOMIC_RELAXED) == connReadDirect ? (void *)(uintptr_t)addr : NULL;
  struct shmPeer *q = c->tpConn;
  void *at = NULL;
  pthread_mutex_lock(&q->s->lock);
  if (__atomic_load_n(q->notes, __ATOMIC_ACQUIRE) > q->drained) shmDrainNotes(q->s);
  for (int i = 0; i < q->nmaps && !at; i++) {
    const struct shmMap *m = &q->maps[i];
    if (m->id == key && addr >= m->base && addr - m->base <= m->bytes && bytes <= m->bytes - (addr - m->base))
      at = m->local + (addr - m->base);
  }
  pthread_mutex_unlock(&q->s->lock);
  return at;
}

/* Who may take this rank's segment. Its setup socket's name is public (any
 * process on the host lists it in /proc/net/unix), so a connection gets the
 * segment only once it has shown that it is the local peer it claims to be:
 * its process runs as this process's user and, where pids can be compared,
 * is that peer's process (SO_PEERCRED, set by the kernel at connect), and
 * its first message carries the token this rank gave the communicator's
 * ranks over the bootstrap (a random 128 bits nobody else has seen: it
 * rules out another process of the same user, a reused pid or a thread of
 * a peer's process that is not chorus's). Ranks of one host (the same
 * hostname and boot id, or NCCL_HOSTID) may live in different pid
 * namespaces (containers that share a network namespace), where the pid
 * SO_PEERCRED reports is not the one the peer reported: only pids of one
 * namespace are compared (bootstrapPidComparable, from what each rank said
 * at the rendezvous). */
struct shmSetupInfo {
  uint64_t token[2]; /* what a peer sends this rank to be handed its segment */
};
struct shmHello {
  int32_t rank; /* the connecting rank */
  uint32_t zero;
  uint64_t token[2]; /* the token of the rank it connects to */
};

static void shmSetupInfoMine(struct shmSetupInfo *mine) {
  memset(mine, 0, sizeof *mine);
  if (getrandom(mine->token, sizeof mine->token, 0) != (ssize_t)sizeof mine->token) {
    /* No entropy from the kernel (a seccomp filter?): still unknown outside the communicator, if weaker. */
    mine->token[0] = (uint64_t)clockNs() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32 ^ (uintptr_t)mine;
    mine->token[1] = (uint64_t)clockNs() * 0xbf58476d1ce4e5b9ull ^ shmProcessCookie();
  }
}

/* NULL when the process at the other end of the Unix socket fd may be
 * local rank peer, else why not (into why). */
static const char *shmCredRefusal(int fd, const struct bootstrap *b, int peer,
                                  struct ucred *uc, char *why, size_t len) {
  socklen_t ulen = sizeof *uc;
  memset(uc, 0, sizeof *uc);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, uc, &ulen) != 0) {
    snprintf(why, len, "its credentials cannot be read: %s", strerror(errno));
    return why;
  }
  if (uc->uid != geteuid()) {
    snprintf(why, len, "it runs as uid %u, this rank as uid %u", (unsigned)uc->uid, (unsigned)geteuid());
    return why;
  }
  if (peer >= 0 && bootstrapPidComparable(b, peer) && uc->pid != (pid_t)b->peers[peer].pid) {
    snprintf(why, len, "it is pid %d, and rank %d is pid %d", (int)uc->pid, peer, b->peers[peer].pid);
    return why;
  }
  return NULL;
}

/* NULL when the connection fd, whose hello is h, is local rank h->rank's,
 * which this rank has yet to serve; else why not. */
static const char *shmHelloRefusal(int fd, const struct shmHello *h, const struct bootstrap *b,
                                   const struct shmSetupInfo *infos, const unsigned char *mine,
                                   const unsigned char *served, struct ucred *uc, char *why, size_t len) {
  int peer = h->rank >= 0 && h->rank < b->nranks && h->rank != b->rank && mine[h->rank] ? h->rank : -1;
  if (shmCredRefusal(fd, b, peer, uc, why, len)) return why;
  uint64_t diff = (h->token[0] ^ infos[b->rank].token[0]) | (h->token[1] ^ infos[b->rank].token[1]);
  if (diff) return "it does not have this communicator's token";
  if (peer < 0) {
    snprintf(why, len, "it claims rank %d, which is not a local peer of this rank", h->rank);
    return why;
  }
  if (served[peer]) {
    snprintf(why, len, "local rank %d has connected already", peer);
    return why;
  }
  return NULL;
}

/* The first refusal of a setup is a WARN, the rest INFO. */
#define SHM_REFUSED "SHM : rank %d refused a connection to its setup socket from pid %d (uid %u): %s; it was given nothing"
static void shmRefuseConn(int *refusals, int me, const struct ucred *uc, const char *why) {
  if ((*refusals)++ == 0) WARN(SHM_REFUSED " (more at INFO)", me, (int)uc->pid, (unsigned)uc->uid, why);
  else INFO(subsysShm, SHM_REFUSED, me, (int)uc->pid, (unsigned)uc->uid, why);
}

/* connect() without waiting: 1 connected, 0 not yet (the listener's queue
 * is full), -1 failed (errno). */
static int shmTryConnect(int sock, const struct sockaddr_un *a, socklen_t len) {
  if (connect(sock, (const struct sockaddr *)a, len) == 0 || errno == EISCONN) return 1;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINPROGRESS || errno == EALREADY || errno == EINTR ? 0
                                                                                                                : -1;
}

/* What a local peer's setup with this rank had come to (shmSetup). */
enum { shmConnecting = 1, shmSayingHello, shmReceiving, shmReceived };

/* The timeout's WARN says which local peers the setup still waited for. */
static void shmSetupStalled(const struct bootstrap *b, const unsigned char *mine, const unsigned char *phase,
                            const unsigned char *served) {
  for (int p = 0; p < b->nranks; p++) {
    if (!mine[p]) continue;
    char who[160];
    bootstrapDescribePeer(b, p, who, sizeof who);
    if (phase[p] == shmConnecting || phase[p] == shmSayingHello)
      WARN("SHM : rank %d: local %s did not take a connection to its setup socket (its queue stayed full)", b->rank,
           who);
    else if (phase[p] == shmReceiving)
      WARN("SHM : rank %d: local %s did not hand over its segment", b->rank, who);
    if (!served[p]) WARN("SHM : rank %d: local %s did not connect to this rank's setup socket", b->rank, who);
  }
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

  s->me = me;
  s->boot = b;
  pthread_mutex_init(&s->lock, NULL);
  s->peers = calloc(n, sizeof *s->peers);
  if (!s->peers) return ncclSystemError;
  for (int p = 0; p < n; p++) s->peers[p] = (struct shmPeer){.s = s, .rank = p, .chan = -1};

  int memfd = memfd_create("chorus-fifo", MFD_CLOEXEC);
  SYSCHECK(memfd, "memfd_create");
  ncclResult_t res = ncclSuccess;
  int listenFd = -1, *peerSock = NULL, *spare = NULL;
  unsigned char *phase = NULL, *served = NULL;
  struct shmSetupInfo *infos = NULL;
  struct acceptor *acc = NULL;
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
  spare = malloc(sizeof(int) * n);
  phase = calloc(n, 1);
  served = calloc(n, 1);
  infos = calloc(n, sizeof *infos);
  if (!peerSock || !spare || !phase || !served || !infos) {
    res = ncclSystemError;
    goto out;
  }
  for (int p = 0; p < n; p++) peerSock[p] = spare[p] = -1;

  uint64_t nonce = b->peers[0].nonce;
  struct sockaddr_un addr;
  if (nlocal > 1) {
    listenFd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    socklen_t len = udsName(&addr, nonce, me);
    if (listenFd < 0 || bind(listenFd, (struct sockaddr *)&addr, len) < 0 || listen(listenFd, n) < 0) {
      WARN("SHM : cannot listen on a Unix socket: %s", strerror(errno));
      res = ncclSystemError;
      goto out;
    }
    /* Strangers that connect and stay silent, or flood it, hold up nobody. */
    acc = malloc(sizeof *acc);
    if (!acc) {
      res = ncclSystemError;
      goto out;
    }
    acceptorInit(acc, listenFd, sizeof(struct shmHello));
  }
  /* Everyone listens before anyone connects: the all-gather that hands out
   * each rank's token and pid namespace is the barrier. */
  shmSetupInfoMine(&infos[me]);
  CHECKGOTO(bootstrapAllGather(b, infos, sizeof *infos), res, out);
  int toReceive = 0, toServe = nlocal - 1, toHangUp = 0, refusals = 0;
  for (int p = 0; p < n; p++) {
    if (!mine[p]) continue;
    peerSock[p] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (peerSock[p] < 0) {
      WARN("SHM : cannot open a Unix socket: %s", strerror(errno));
      res = ncclSystemError;
      goto out;
    }
    phase[p] = shmConnecting;
    toReceive++;
  }
  /* Nothing here waits on one socket: a listener whose queue strangers
   * filled is tried again each round, and the one wait bounds it all. */
  struct waitState w;
  waitBegin(&w, b->abortFlag, bootstrapLiveness, b, "shared-memory setup");
  while (toReceive > 0 || toServe > 0 || toHangUp > 0) {
    int progressed = 0;
    /* A higher peer's connection to this rank is closed here only once the
     * peer has closed its end, after reading this rank's segment: closed
     * earlier, anything unread in it would reset the connection, and the
     * segment in the peer's queue would be lost with it (a Unix socket's
     * reset discards what was queued). */
    for (int p = 0; p < n; p++) {
      if (spare[p] < 0) continue;
      char byte;
      ssize_t got = recv(spare[p], &byte, 1, MSG_DONTWAIT);
      if (got > 0 || (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) continue;
      close(spare[p]);
      spare[p] = -1;
      toHangUp--;
      progressed = 1;
    }
    for (int p = 0; p < n; p++) {
      if (phase[p] == shmConnecting) {
        socklen_t len = udsName(&addr, nonce, p);
        int r = shmTryConnect(peerSock[p], &addr, len);
        if (r < 0) {
          /* It listened before the all-gather: now it is gone (the WARN names it). */
          int err = errno;
          res = bootstrapLiveness(b);
          WARN("SHM : rank %d cannot reach local rank %d over a Unix socket: %s", me, p, strerror(err));
          if (res == ncclSuccess) res = ncclRemoteError;
          goto out;
        }
        if (r == 0) continue; /* its queue is full: next round */
        struct ucred uc;
        char why[160];
        if (shmCredRefusal(peerSock[p], b, p, &uc, why, sizeof why)) {
          WARN("SHM : rank %d will not use the setup socket of local rank %d, held by pid %d: %s%s", me, p,
               (int)uc.pid, why, uc.uid != geteuid() ? " (ranks of one host that run as different users need "
                                                       "NCCL_SHM_DISABLE=1)" : "");
          res = ncclSystemError;
          goto out;
        }
        phase[p] = shmSayingHello;
        progressed = 1;
      }
      if (phase[p] == shmSayingHello) {
        struct shmHello h = {me, 0, {infos[p].token[0], infos[p].token[1]}};
        ssize_t sent = sendWithFd(peerSock[p], &h, sizeof h, -1, MSG_DONTWAIT);
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (sent != (ssize_t)sizeof h) {
          int err = sent < 0 ? errno : EPIPE;
          res = bootstrapLiveness(b);
          WARN("SHM : rank %d cannot introduce itself to local rank %d over a Unix socket: %s", me, p,
               strerror(err));
          if (res == ncclSuccess) res = ncclRemoteError;
          goto out;
        }
        phase[p] = shmReceiving;
        progressed = 1;
      }
      if (phase[p] != shmReceiving) continue;
      int fd, r = tryRecvFd(peerSock[p], &fd);
      if (r == 0) continue;
      if (me < p) { /* kept: the pair's notes go both ways on the lower rank's connection */
        s->peers[p].chan = peerSock[p];
      } else { /* read: its close tells the lower peer it may close its end (spare) */
        close(peerSock[p]);
      }
      peerSock[p] = -1;
      phase[p] = shmReceived;
      if (r == -2) {
        WARN("SHM : local rank %d's segment came, but this process could not take its descriptor (%s)", p,
             strerror(EMFILE));
        res = ncclSystemError;
        goto out;
      }
      if (r < 0) { /* it closed without handing it over: gone, or it refused this rank (its WARN says why) */
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
    /* Connections whose hello has come: a local peer's gets the segment,
     * anyone else's is closed, uncounted (not progress either: strangers
     * cannot hold the setup past its timeout). A few per round. */
    for (int k = 0; k < 64 && toServe > 0; k++) {
      int c, moved;
      struct shmHello h;
      CHECKGOTO(acceptorPoll(acc, &c, &h, &moved), res, out); /* EMFILE, say: waiting would not help */
      if (c < 0) break;
      struct ucred uc;
      char why[160];
      const char *refusal = shmHelloRefusal(c, &h, b, infos, mine, served, &uc, why, sizeof why);
      if (refusal) {
        shmRefuseConn(&refusals, me, &uc, refusal);
        close(c);
        continue;
      }
      res = sendFd(c, memfd);
      if (res != ncclSuccess) {
        close(c);
        goto out;
      }
      if (h.rank < me) {
        s->peers[h.rank].chan = c; /* the pair's notes (above) */
      } else {
        spare[h.rank] = c; /* closed once the peer has read the segment and hung up (above) */
        toHangUp++;
      }
      served[h.rank] = 1;
      toServe--;
      progressed = 1;
    }
    if (progressed) {
      waitProgress(&w);
    } else if ((res = waitPause(&w)) != ncclSuccess) {
      if (res == ncclTimeout) shmSetupStalled(b, mine, phase, served);
      goto out;
    }
  }
  for (int p = 0; p < n; p++) {
    if (!mine[p]) continue;
    char *conns[2] = {(char *)s->segs[p] + SHM_INFO_BYTES, (char *)s->segs[me] + SHM_INFO_BYTES};
    for (int l = 0; l < lanes; l++) {
      /* I send into the peer's segment at my index; I receive in mine at theirs. */
      connLayout(connSend(t, p, l), conns[0] + s->connBytes * (size_t)(me * lanes + l), buffSize, p);
      connLayout(connRecv(t, p, l), conns[1] + s->connBytes * (size_t)(p * lanes + l), buffSize, p);
      connSend(t, p, l)->tp = connRecv(t, p, l)->tp = &shmTransport;
      connSend(t, p, l)->tpConn = connRecv(t, p, l)->tpConn = &s->peers[p];
    }
    s->peers[p].sentNotes = &connSend(t, p, 0)->ctrl->notes;
    s->peers[p].notes = &connRecv(t, p, 0)->ctrl->notes;
    s->peers[p].refused = &connSend(t, p, 0)->ctrl->mapRefused;
    s->peers[p].refuse = &connRecv(t, p, 0)->ctrl->mapRefused;
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
    s->peers[p].cma = mode == connReadCma;
    singleCopy += mode != connReadNone;
    for (int l = 0; l < lanes; l++) {
      struct connCtrl *ctrl = connRecv(t, p, l)->ctrl;
      ctrl->readPid = (int32_t)theirs->pid;
      __atomic_store_n(&ctrl->readMode, (uint32_t)mode, __ATOMIC_RELEASE);
    }
  }
  int64_t split = paramInt(paramCmaSplit); /* shmReadCma */
  s->offerMin = split > 0 ? 8192 : split < 0 && !waitCoresShared() ? 65536 : 0;
  INFO(subsysShm, "SHM : segment of %zu bytes per rank, %d local ranks, single copy from %d of them", s->segBytes,
       nlocal, singleCopy);
  shmLive(s, 1);
out:
  if (peerSock)
    for (int p = 0; p < n; p++)
      if (peerSock[p] >= 0) close(peerSock[p]);
  free(peerSock);
  if (spare)
    for (int p = 0; p < n; p++)
      if (spare[p] >= 0) close(spare[p]);
  free(spare);
  free(phase);
  free(served);
  free(infos);
  if (acc) { /* strangers still waiting to be read */
    acceptorClose(acc);
    free(acc);
  }
  if (listenFd >= 0) close(listenFd);
  close(memfd);
  return res;
}

static void shmClose(void *state) {
  struct shmState *s = state;
  if (!s) return;
  shmLive(s, 0);
  for (int p = 0; s->segs && p < s->nranks; p++)
    if (s->segs[p]) munmap(s->segs[p], s->segBytes);
  for (int p = 0; s->peers && p < s->nranks; p++) {
    struct shmPeer *q = &s->peers[p];
    if (q->chan >= 0) close(q->chan);
    for (int i = 0; i < q->nmaps; i++) munmap(q->maps[i].local, q->maps[i].bytes);
    free(q->maps);
    free(q->told);
  }
  if (s->peers) pthread_mutex_destroy(&s->lock);
  free(s->peers);
  free(s->segs);
  free(s);
}

const struct transport shmTransport = {
    .name = "SHM/direct/direct",
    .p2pName = "P2P/SHM",
    .canConnect = shmCanConnect,
    .setup = shmSetup,
    .close = shmClose,
    .shareRef = shmShareRef,
    .mapPeer = shmMapPeer,
    .readPeer = shmReadPeer,
    .assist = shmAssist,
};
