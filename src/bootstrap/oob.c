#define _GNU_SOURCE
#include "bootstrap/oob.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/wait.h"

#define OOB_MAGIC 0x424f4843u /* "CHOB" */

enum oobType { oobData = 1, oobGoodbye, oobQuery, oobStatus, oobFault, oobRma, oobTypeEnd };

struct oobHeader {
  uint32_t magic;
  uint16_t type, pad;
  uint32_t len; /* payload bytes that follow */
  uint32_t id;  /* query id (oobQuery, oobStatus); why (oobGoodbye: enum oobDeparture) */
};

struct oobMsg {
  struct oobMsg *next;
  uint32_t len;
  char data[];
};

struct oobPeer {
  pthread_mutex_t sendLock; /* the application thread and the monitor both write */
  /* The monitor's reading state. */
  struct oobHeader hdr;
  size_t got; /* bytes of header, then of payload, read so far */
  struct oobMsg *msg; /* the payload being read */
  int closed; /* no longer polled */
  uint64_t exitedNs; /* when its process was seen to have exited (bootstrap pidFd); 0: not */
  int gone, departed; /* atomics: read by any thread */
  struct oobMsg *inHead, *inTail; /* data messages, under oob.lock */
};

struct oob {
  struct bootstrap *b;
  pthread_t thread;
  int efd, stop;
  oobStatusFn statusFn;
  oobRmaFn rmaFn;
  void *statusArg; /* both functions' */
  size_t statusBytes;
  pthread_mutex_t lock; /* inboxes, replies, fault */
  struct oobPeer *peers;
  uint32_t queryId;
  char *replies, *answered;
  int trouble; /* atomic: a peer went away or reported a fault (cheap to poll) */
  ncclResult_t faultCode;
  int faultFrom;
  char faultText[OOB_MAX_FAULT];
};

/* The one wait's sleep while a frame waits for room: poll() on the socket. */
static void frameBlock(void *arg, uint64_t ns) {
  struct pollfd pf = {*(const int *)arg, POLLOUT, 0};
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  ppoll(&pf, 1, &ts, NULL);
}

/* Writes one whole frame or gives up at the deadline. A frame cut short
 * would leave the stream unreadable: then the connection is shut down, and
 * the peer sees this rank as failed. */
static ncclResult_t frameSend(struct oob *o, int peer, int type, uint32_t id, const void *data, size_t len,
                              uint64_t waitNs, volatile int *abortFlag) {
  struct oobPeer *p = &o->peers[peer];
  int fd = o->b->peerFd[peer];
  if (fd < 0 || __atomic_load_n(&p->gone, __ATOMIC_ACQUIRE)) return ncclRemoteError;
  struct oobHeader h = {OOB_MAGIC, (uint16_t)type, 0, (uint32_t)len, id};
  ncclResult_t res = ncclSuccess;
  size_t done = 0, total = sizeof h + len;
  uint64_t deadline = clockNs() + waitNs;
  struct waitState w; /* the deadline is this function's, checked below: the wait has none */
  waitBegin(&w, abortFlag, NULL, NULL, "an out-of-band frame");
  w.timeoutNs = 0;
  waitSetBlock(&w, frameBlock, &fd);
  pthread_mutex_lock(&p->sendLock);
  while (done < total) {
    struct iovec iov[2];
    int n = 0;
    if (done < sizeof h) iov[n++] = (struct iovec){(char *)&h + done, sizeof h - done};
    size_t dOff = done > sizeof h ? done - sizeof h : 0;
    if (len > dOff) iov[n++] = (struct iovec){(char *)data + dOff, len - dOff};
    struct msghdr m = {0};
    m.msg_iov = iov;
    m.msg_iovlen = (size_t)n;
    ssize_t r = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      done += (size_t)r;
      waitProgress(&w);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && clockNs() < deadline) {
      w.blockNow = 1; /* room on the socket ends the sleep */
      if (waitPause(&w) == ncclSuccess) continue; /* else aborted */
    }
    res = ncclRemoteError;
    break;
  }
  if (res != ncclSuccess && done > 0) shutdown(fd, SHUT_RDWR);
  pthread_mutex_unlock(&p->sendLock);
  return res;
}

static void markGone(struct oob *o, int peer, const char *why) {
  struct oobPeer *p = &o->peers[peer];
  p->closed = 1;
  if (__atomic_load_n(&p->departed, __ATOMIC_ACQUIRE)) return;
  if (why) WARN("Bootstrap : rank %d got %s from rank %d; treating it as failed", o->b->rank, why, peer);
  __atomic_store_n(&p->gone, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&o->trouble, 1, __ATOMIC_RELEASE);
}

/* A complete frame from peer (its payload in p->msg, owned here). */
static void frameHandle(struct oob *o, int peer) {
  struct oobPeer *p = &o->peers[peer];
  struct oobMsg *m = p->msg;
  p->msg = NULL;
  switch (p->hdr.type) {
    case oobData:
      pthread_mutex_lock(&o->lock);
      m->next = NULL;
      if (p->inTail) p->inTail->next = m;
      else p->inHead = m;
      p->inTail = m;
      pthread_mutex_unlock(&o->lock);
      return;
    case oobGoodbye:
      /* The reason rides in the id; a destroy after a finalize keeps "finalized". */
      if (!__atomic_load_n(&p->departed, __ATOMIC_ACQUIRE))
        __atomic_store_n(&p->departed, p->hdr.id == oobFinalized ? oobFinalized : oobDestroyed, __ATOMIC_RELEASE);
      break;
    case oobQuery: {
      char buf[OOB_MAX_STATUS];
      memset(buf, 0, sizeof buf);
      if (o->statusFn) o->statusFn(o->statusArg, buf, o->statusBytes);
      frameSend(o, peer, oobStatus, p->hdr.id, buf, o->statusBytes, 200000000ull, NULL);
      break;
    }
    case oobStatus:
      pthread_mutex_lock(&o->lock);
      if (p->hdr.id == o->queryId && p->hdr.len == o->statusBytes) {
        memcpy(o->replies + (size_t)peer * o->statusBytes, m->data, o->statusBytes);
        o->answered[peer] = 1;
      }
      pthread_mutex_unlock(&o->lock);
      break;
    case oobRma:
      if (o->rmaFn) o->rmaFn(o->statusArg, peer, m->data, p->hdr.len);
      break;
    case oobFault:
      pthread_mutex_lock(&o->lock);
      if (o->faultCode == ncclSuccess && p->hdr.len > sizeof(int32_t)) {
        int32_t code;
        memcpy(&code, m->data, sizeof code);
        size_t n = p->hdr.len - sizeof code;
        if (n >= sizeof o->faultText) n = sizeof o->faultText - 1;
        memcpy(o->faultText, m->data + sizeof code, n);
        o->faultText[n] = 0;
        o->faultFrom = peer;
        __atomic_store_n(&o->trouble, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&o->faultCode, code > ncclSuccess && code < ncclNumResults ? (ncclResult_t)code : ncclInvalidUsage,
                         __ATOMIC_RELEASE);
      }
      pthread_mutex_unlock(&o->lock);
      break;
  }
  free(m);
}

/* Reads what peer sent, frame by frame, without blocking. */
static void peerRead(struct oob *o, int peer) {
  struct oobPeer *p = &o->peers[peer];
  int fd = o->b->peerFd[peer];
  for (;;) {
    char *dst;
    size_t want;
    if (p->got < sizeof p->hdr) {
      dst = (char *)&p->hdr + p->got;
      want = sizeof p->hdr - p->got;
    } else {
      dst = p->msg->data + (p->got - sizeof p->hdr);
      want = p->hdr.len - (p->got - sizeof p->hdr);
    }
    ssize_t r = want ? recv(fd, dst, want, MSG_DONTWAIT) : 0;
    if (want && r == 0) {
      markGone(o, peer, NULL); /* EOF: a failure unless it said goodbye */
      return;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) markGone(o, peer, NULL);
      return;
    }
    p->got += (size_t)r;
    if (p->got == sizeof p->hdr && !p->msg) {
      if (p->hdr.magic != OOB_MAGIC || p->hdr.type == 0 || p->hdr.type >= oobTypeEnd ||
          p->hdr.len > OOB_MAX_PAYLOAD) {
        markGone(o, peer, "a malformed message");
        return;
      }
      p->msg = malloc(sizeof *p->msg + p->hdr.len);
      if (!p->msg) {
        markGone(o, peer, "a message it had no memory for");
        return;
      }
      p->msg->len = p->hdr.len;
    }
    if (p->got == sizeof p->hdr + p->hdr.len) {
      frameHandle(o, peer);
      p->got = 0;
    }
  }
}

/* A local peer's process has exited (its pidfd, or kill(pid, 0) every
 * OOB_KILL_CHECK_NS), while another process may hold its connection open
 * (bootstrap.h, pidFd): it is gone once what it sent before has been read,
 * this long after, unless that was a goodbye. (Its bytes are in this
 * rank's socket by then, but the pidfd and the socket are polled apart.) */
#define OOB_EXIT_GRACE_NS 100000000ull
#define OOB_KILL_CHECK_NS 200000000ull

/* Peers whose exit was seen OOB_EXIT_GRACE_NS ago: read what came, then
 * gone unless they said goodbye. Returns the poll timeout, in ms, until the
 * next one is due (at most ms). */
static int exitsDue(struct oob *o, int ms) {
  uint64_t now = clockNs();
  for (int i = 0; i < o->b->nranks; i++) {
    struct oobPeer *p = &o->peers[i];
    if (!p->exitedNs || p->closed) continue;
    if (now - p->exitedNs < OOB_EXIT_GRACE_NS) {
      int left = (int)((OOB_EXIT_GRACE_NS - (now - p->exitedNs)) / 1000000ull) + 1;
      if (left < ms) ms = left;
      continue;
    }
    peerRead(o, i);
    if (p->closed) continue;
    INFO(subsysBootstrap, "Bootstrap : rank %d's process (pid %d) has exited", i, o->b->peers[i].pid);
    markGone(o, i, NULL);
  }
  return ms;
}

static void *monitorMain(void *arg) {
  struct oob *o = arg;
  struct bootstrap *b = o->b;
  /* a socket and a pidfd per peer, and the eventfd */
  struct pollfd *fds = malloc(sizeof *fds * (size_t)(2 * b->nranks + 1));
  int *who = malloc(sizeof *who * (size_t)(2 * b->nranks + 1));
  if (!fds || !who) {
    free(fds);
    free(who);
    return NULL;
  }
  uint64_t nextKillCheckNs = 0;
  while (!__atomic_load_n(&o->stop, __ATOMIC_ACQUIRE)) {
    int nf = 0, kills = 0, ms = exitsDue(o, 1000);
    for (int i = 0; i < b->nranks; i++) {
      if (b->peerFd[i] < 0 || o->peers[i].closed) continue;
      fds[nf] = (struct pollfd){b->peerFd[i], POLLIN | POLLRDHUP, 0};
      who[nf++] = i;
      int pidFd = b->pidFd ? b->pidFd[i] : -1;
      if (o->peers[i].exitedNs) continue;
      if (pidFd >= 0) {
        fds[nf] = (struct pollfd){pidFd, POLLIN, 0};
        who[nf++] = b->nranks + i;
      }
      kills += pidFd == BOOTSTRAP_PID_KILL;
    }
    if (kills && clockNs() >= nextKillCheckNs) {
      for (int i = 0; i < b->nranks; i++)
        if (b->pidFd[i] == BOOTSTRAP_PID_KILL && !o->peers[i].closed && !o->peers[i].exitedNs &&
            bootstrapPeerExited(b, i))
          o->peers[i].exitedNs = clockNs();
      nextKillCheckNs = clockNs() + OOB_KILL_CHECK_NS;
    }
    if (kills && ms > (int)(OOB_KILL_CHECK_NS / 1000000ull)) ms = (int)(OOB_KILL_CHECK_NS / 1000000ull);
    fds[nf] = (struct pollfd){o->efd, POLLIN, 0};
    who[nf++] = -1;
    if (poll(fds, (nfds_t)nf, ms) <= 0) continue;
    for (int k = 0; k < nf; k++) {
      if (!fds[k].revents) continue;
      if (who[k] >= b->nranks) { /* a local peer's process has exited */
        o->peers[who[k] - b->nranks].exitedNs = clockNs();
        continue;
      }
      if (who[k] < 0) {
        uint64_t v;
        if (read(o->efd, &v, sizeof v) < 0) { /* drained already */
        }
        continue;
      }
      peerRead(o, who[k]);
    }
  }
  free(fds);
  free(who);
  return NULL;
}

/* The monitor's state for b, without its thread (fuzz/fuzz_oob.c drives
 * peerRead itself). */
static struct oob *oobAlloc(struct bootstrap *b, oobStatusFn status, oobRmaFn rma, void *arg, size_t statusBytes) {
  struct oob *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->b = b;
  o->statusFn = status;
  o->rmaFn = rma;
  o->statusArg = arg;
  o->statusBytes = statusBytes;
  o->peers = calloc((size_t)b->nranks, sizeof *o->peers);
  o->replies = calloc((size_t)b->nranks, statusBytes ? statusBytes : 1);
  o->answered = calloc((size_t)b->nranks, 1);
  o->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!o->peers || !o->replies || !o->answered || o->efd < 0) {
    if (o->efd >= 0) close(o->efd);
    free(o->peers);
    free(o->replies);
    free(o->answered);
    free(o);
    return NULL;
  }
  pthread_mutex_init(&o->lock, NULL);
  for (int i = 0; i < b->nranks; i++) {
    pthread_mutex_init(&o->peers[i].sendLock, NULL);
    o->peers[i].departed = b->departed[i];
  }
  return o;
}

static void oobFree(struct oob *o) {
  for (int i = 0; i < o->b->nranks; i++) {
    struct oobPeer *p = &o->peers[i];
    o->b->departed[i] = (char)p->departed;
    while (p->inHead) {
      struct oobMsg *m = p->inHead;
      p->inHead = m->next;
      free(m);
    }
    free(p->msg);
    pthread_mutex_destroy(&p->sendLock);
  }
  pthread_mutex_destroy(&o->lock);
  close(o->efd);
  free(o->peers);
  free(o->replies);
  free(o->answered);
  free(o);
}

ncclResult_t oobStart(struct bootstrap *b, oobStatusFn status, oobRmaFn rma, void *arg, size_t statusBytes) {
  if (statusBytes > OOB_MAX_STATUS) return ncclInternalError;
  errno = 0;
  struct oob *o = oobAlloc(b, status, rma, arg, statusBytes);
  if (!o) {
    WARN("Bootstrap : cannot set up the monitor: %s", errno ? strerror(errno) : "out of memory");
    return ncclSystemError;
  }
  int err = pthread_create(&o->thread, NULL, monitorMain, o);
  if (err) {
    WARN("Bootstrap : cannot start the monitor thread: %s", strerror(err));
    oobFree(o);
    return ncclSystemError;
  }
  b->oob = o;
  return ncclSuccess;
}

void oobStop(struct bootstrap *b, int graceful) {
  struct oob *o = b->oob;
  if (!o) return;
  __atomic_store_n(&o->stop, 1, __ATOMIC_RELEASE);
  uint64_t one = 1;
  if (write(o->efd, &one, sizeof one) < 0) { /* it wakes within a second anyway */
  }
  pthread_join(o->thread, NULL);
  if (graceful) oobSayGoodbye(b, oobDestroyed);
  oobFree(o);
  b->oob = NULL;
}

void oobSayGoodbye(struct bootstrap *b, enum oobDeparture why) {
  for (int i = 0; i < b->nranks; i++)
    if (b->peerFd[i] >= 0) frameSend(b->oob, i, oobGoodbye, (uint32_t)why, NULL, 0, 100000000ull, NULL);
}

ncclResult_t oobSendData(struct bootstrap *b, int peer, const void *data, size_t size, struct waitState *w) {
  if (size > OOB_MAX_PAYLOAD) {
    WARN("Bootstrap : message of %zu bytes is too large (at most %d after init)", size, OOB_MAX_PAYLOAD);
    return ncclInternalError;
  }
  uint64_t wait = w->timeoutNs ? w->timeoutNs : UINT64_MAX / 4;
  ncclResult_t res = frameSend(b->oob, peer, oobData, 0, data, size, wait, w->abortFlag);
  if (res != ncclSuccess) {
    if (w->abortFlag && __atomic_load_n(w->abortFlag, __ATOMIC_ACQUIRE)) return ncclInvalidUsage;
    ncclResult_t live = w->liveness ? w->liveness(w->livenessArg) : ncclSuccess;
    if (live != ncclSuccess) return live;
    WARN("Bootstrap : rank %d could not send to rank %d", b->rank, peer);
  }
  return res;
}

ncclResult_t oobSendRma(struct bootstrap *b, int peer, const void *payload, size_t size, struct waitState *w) {
  uint64_t wait = w->timeoutNs ? w->timeoutNs : UINT64_MAX / 4;
  ncclResult_t res = frameSend(b->oob, peer, oobRma, 0, payload, size, wait, w->abortFlag);
  if (res != ncclSuccess) {
    if (w->abortFlag && __atomic_load_n(w->abortFlag, __ATOMIC_ACQUIRE)) return ncclInvalidUsage;
    WARN("Bootstrap : rank %d could not write to rank %d (one-sided): %s", b->rank, peer,
         oobPeerGone(b, peer) ? "it is gone" : "no room within the timeout");
  }
  return res;
}

/* The oldest message from peer, taken off its queue (the caller frees it), or NULL. */
static struct oobMsg *oobTakeHead(struct oob *o, struct oobPeer *p) {
  pthread_mutex_lock(&o->lock);
  struct oobMsg *m = p->inHead;
  if (m) {
    p->inHead = m->next;
    if (!p->inHead) p->inTail = NULL;
  }
  pthread_mutex_unlock(&o->lock);
  return m;
}

ncclResult_t oobRecvData(struct bootstrap *b, int peer, void *data, size_t size, struct waitState *w) {
  struct oob *o = b->oob;
  struct oobPeer *p = &o->peers[peer];
  for (;;) {
    struct oobMsg *m = oobTakeHead(o, p);
    if (m) {
      ncclResult_t res = ncclSuccess;
      if (m->len != size) {
        WARN("Bootstrap : rank %d expected %zu bytes from rank %d and got %u: the ranks are not in the same call",
             b->rank, size, peer, m->len);
        res = ncclInvalidUsage;
      } else {
        memcpy(data, m->data, size);
      }
      free(m);
      return res;
    }
    if (__atomic_load_n(&p->gone, __ATOMIC_ACQUIRE) || __atomic_load_n(&p->departed, __ATOMIC_ACQUIRE)) {
      ncclResult_t live = w->liveness ? w->liveness(w->livenessArg) : ncclSuccess;
      if (live != ncclSuccess) return live;
      WARN("Bootstrap : rank %d waits for a message from rank %d, which has left", b->rank, peer);
      return ncclRemoteError;
    }
    CHECK(waitPause(w));
  }
}

int oobPeekData(struct bootstrap *b, int peer, void *data, size_t size) {
  struct oob *o = b->oob;
  pthread_mutex_lock(&o->lock);
  const struct oobMsg *m = o->peers[peer].inHead;
  int got = !m ? 0 : m->len == size ? 1 : -1;
  if (got == 1) memcpy(data, m->data, size);
  pthread_mutex_unlock(&o->lock);
  return got;
}

void oobDropData(struct bootstrap *b, int peer) { free(oobTakeHead(b->oob, &b->oob->peers[peer])); }

int oobPeerGone(const struct bootstrap *b, int peer) {
  return __atomic_load_n(&b->oob->peers[peer].gone, __ATOMIC_ACQUIRE);
}

int oobPeerDeparted(const struct bootstrap *b, int peer) {
  return __atomic_load_n(&b->oob->peers[peer].departed, __ATOMIC_ACQUIRE);
}

void oobQueryStatus(struct bootstrap *b, void *replies, char *answered, int waitMs) {
  struct oob *o = b->oob;
  pthread_mutex_lock(&o->lock);
  uint32_t id = ++o->queryId;
  memset(o->answered, 0, (size_t)b->nranks);
  pthread_mutex_unlock(&o->lock);
  for (int i = 0; i < b->nranks; i++)
    if (i != b->rank) frameSend(o, i, oobQuery, id, NULL, 0, 100000000ull, NULL);
  uint64_t deadline = clockNs() + (uint64_t)waitMs * 1000000ull;
  struct waitState w; /* bounded by the deadline above, silently */
  waitBegin(&w, NULL, NULL, NULL, "status answers");
  w.timeoutNs = 0;
  for (;;) {
    int missing = 0;
    pthread_mutex_lock(&o->lock);
    for (int i = 0; i < b->nranks; i++)
      missing += i != b->rank && !o->answered[i] && !__atomic_load_n(&o->peers[i].gone, __ATOMIC_ACQUIRE) &&
                 !__atomic_load_n(&o->peers[i].departed, __ATOMIC_ACQUIRE);
    if (missing == 0 || clockNs() >= deadline) {
      memcpy(answered, o->answered, (size_t)b->nranks);
      memcpy(replies, o->replies, (size_t)b->nranks * o->statusBytes);
      pthread_mutex_unlock(&o->lock);
      break;
    }
    pthread_mutex_unlock(&o->lock);
    waitPause(&w);
  }
  if (o->statusFn) o->statusFn(o->statusArg, (char *)replies + (size_t)b->rank * o->statusBytes, o->statusBytes);
  answered[b->rank] = 1;
}

void oobBroadcastFault(struct bootstrap *b, ncclResult_t code, const char *text) {
  char buf[sizeof(int32_t) + OOB_MAX_FAULT];
  int32_t c = (int32_t)code;
  size_t n = strlen(text);
  if (n > OOB_MAX_FAULT - 1) n = OOB_MAX_FAULT - 1;
  memcpy(buf, &c, sizeof c);
  memcpy(buf + sizeof c, text, n);
  for (int i = 0; i < b->nranks; i++)
    if (i != b->rank) frameSend(b->oob, i, oobFault, 0, buf, sizeof c + n, 100000000ull, NULL);
}

int oobTrouble(const struct bootstrap *b) { return b->oob && __atomic_load_n(&b->oob->trouble, __ATOMIC_ACQUIRE); }

ncclResult_t oobPendingFault(struct bootstrap *b, char *text, size_t len, int *from) {
  struct oob *o = b->oob;
  if (!o || __atomic_load_n(&o->faultCode, __ATOMIC_ACQUIRE) == ncclSuccess) return ncclSuccess;
  pthread_mutex_lock(&o->lock);
  snprintf(text, len, "%s", o->faultText);
  *from = o->faultFrom;
  ncclResult_t code = o->faultCode;
  pthread_mutex_unlock(&o->lock);
  return code;
}
