#define _GNU_SOURCE
#include "bootstrap/bootstrap.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <unistd.h>

#include "bootstrap/acceptor.h"
#include "core/forkclose.h"
#include "bootstrap/oob.h"
#include "bootstrap/pidwatch.h"
#include "bootstrap/wire.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/machine.h"
#include "core/param.h"

static const uint64_t goodbyeMagic = 0x6579622d73756f72ull; /* "rous-bye" */
static const char rootLeaveNotice = 'L'; /* a rank gives up on the rendezvous before the root replied */


uint64_t bootstrapHostHash(void) {
  const char *id = paramStr(paramHostId);
  uint64_t h = FNV1A_INIT;
  if (id[0]) return fnv1a(h, id);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  return machineBootHash(fnv1a(h, host));
}

/* ---- root: collects every rank's info, then sends everyone the table ---- */

struct rootArgs {
  int listenFd;
  uint64_t secret;
  int nranks;   /* 0: learned from the first hello */
  int *started; /* set once the thread runs; spawnRoot's, touched once */
  struct acceptor *acc; /* allocated by spawnRoot, not by the new thread */
  int slot;             /* its entry in rootsRunning, -1: none */
};

/* The roots this process runs, by secret, so that one whose id nobody will
 * use (ncclCommInitRankScalable's ids after the first) can be told to end
 * quietly instead of waiting out the timeout (bootstrapRetireRoot). Static
 * memory: a root thread touches no allocator before a rank calls in. */
#define ROOTS_TRACKED 64
static struct {
  uint64_t secret; /* 0: free */
  int retire;
  int refuse;        /* bootstrapRefuseRoot: why is set */
  int stop;          /* bootstrapStopRoot: close the port now */
  int refusing;      /* the root refuses every rank (it keeps its port for the late ones) */
  int listenFd;      /* open while the root listens, else -1 (rootCloseListener) */
  union sockAddr addr; /* where it listens */
  char why[200];
} rootsRunning[ROOTS_TRACKED];
static pthread_mutex_t rootsLock = PTHREAD_MUTEX_INITIALIZER;

/* A process forked while a root of its parent listens (ranks forked after
 * ncclGetUniqueId) gets a copy of the listening socket but not the thread
 * that accepts on it: closed there, or the port would stay open after the
 * parent's root has closed it, and a rank trying that id again would wait
 * on it (seconds, then a misleading timeout) instead of finding it closed
 * at once. The lock, held across the fork, keeps each listenFd open in the
 * parent while it is tracked. (Only the listener: connections the root accepted before the fork stay
 * open in the child too, which matters only to a launcher forking ranks
 * one at a time during the rendezvous, whose ranks then see no EOF from a
 * root that died: they fail at their timeout.) */
static void rootsForkPrepare(void) { pthread_mutex_lock(&rootsLock); }
static void rootsForkParent(void) { pthread_mutex_unlock(&rootsLock); }
static void rootsForkChild(void) {
  for (int i = 0; i < ROOTS_TRACKED; i++)
    if (rootsRunning[i].secret != 0) {
      if (rootsRunning[i].listenFd >= 0) close(rootsRunning[i].listenFd);
      rootsRunning[i].secret = 0; /* no thread of this process serves it */
      rootsRunning[i].listenFd = -1;
    }
  pthread_mutex_unlock(&rootsLock);
}
static void rootsAtfork(void) { pthread_atfork(rootsForkPrepare, rootsForkParent, rootsForkChild); }
static pthread_once_t rootsAtforkOnce = PTHREAD_ONCE_INIT;

/* The root stops listening: untracked and closed under the lock, so that a
 * fork sees it either open and tracked or closed. */
static void rootCloseListener(int slot, int fd) {
  pthread_mutex_lock(&rootsLock);
  if (slot >= 0) rootsRunning[slot].listenFd = -1;
  close(fd);
  pthread_mutex_unlock(&rootsLock);
}

/* The last roots of this process that failed on their own (accept failing:
 * out of file descriptors, say), by secret: a rank of the same process sees
 * only a closed or refused connection, and says the root's reason instead. */
#define ROOTS_FAILED 8
static struct {
  uint64_t secret;
  char why[200];
} rootsFailed[ROOTS_FAILED];
static int rootsFailedNext;

static int rootTrack(uint64_t secret, int listenFd, const union sockAddr *addr) {
  pthread_once(&rootsAtforkOnce, rootsAtfork);
  pthread_mutex_lock(&rootsLock);
  int slot = -1;
  for (int i = 0; i < ROOTS_TRACKED && slot < 0; i++)
    if (rootsRunning[i].secret == 0) {
      rootsRunning[i].secret = secret;
      rootsRunning[i].retire = 0;
      rootsRunning[i].refuse = 0;
      rootsRunning[i].stop = 0;
      rootsRunning[i].refusing = 0;
      rootsRunning[i].listenFd = listenFd;
      rootsRunning[i].addr = *addr;
      slot = i;
    }
  for (int i = 0; i < ROOTS_FAILED; i++) /* NCCL_COMM_ID's secret is the same for every root of its address */
    if (rootsFailed[i].secret == secret) rootsFailed[i].secret = 0;
  pthread_mutex_unlock(&rootsLock);
  return slot;
}

static void rootUntrack(int slot) {
  if (slot < 0) return;
  pthread_mutex_lock(&rootsLock);
  rootsRunning[slot].secret = 0;
  pthread_mutex_unlock(&rootsLock);
}

static void rootFailed(uint64_t secret, const char *why) {
  pthread_mutex_lock(&rootsLock);
  rootsFailed[rootsFailedNext].secret = secret;
  snprintf(rootsFailed[rootsFailedNext].why, sizeof rootsFailed[0].why, "%s", why[0] ? why : "unknown error");
  rootsFailedNext = (rootsFailedNext + 1) % ROOTS_FAILED;
  pthread_mutex_unlock(&rootsLock);
}

/* When h's root ran in this process and failed on its own: a WARN with
 * its reason and ncclSystemError, else res (what this rank saw of it). */
static ncclResult_t rootFailureOf(const struct bootstrapHandle *h, int rank, int nranks, ncclResult_t res) {
  char why[sizeof rootsFailed[0].why] = "";
  pthread_mutex_lock(&rootsLock);
  for (int i = 0; i < ROOTS_FAILED && !why[0]; i++)
    if (h->secret && rootsFailed[i].secret == h->secret) snprintf(why, sizeof why, "%s", rootsFailed[i].why);
  pthread_mutex_unlock(&rootsLock);
  if (!why[0]) return res;
  WARN("Bootstrap : rank %d of %d: the root of this unique id, in this process, failed: %s", rank, nranks, why);
  return ncclSystemError;
}

static int rootRetired(int slot) { return slot >= 0 && __atomic_load_n(&rootsRunning[slot].retire, __ATOMIC_ACQUIRE); }

/* 1, with why, when the process asked the root to refuse its rendezvous. */
static int rootRefused(int slot, char *why, size_t len) {
  if (slot < 0 || !__atomic_load_n(&rootsRunning[slot].refuse, __ATOMIC_ACQUIRE)) return 0;
  pthread_mutex_lock(&rootsLock);
  snprintf(why, len, "%s", rootsRunning[slot].why);
  pthread_mutex_unlock(&rootsLock);
  return 1;
}

void bootstrapRefuseRoot(const struct bootstrapHandle *h, const char *why) {
  if (!(h->flags & BOOTSTRAP_ROOT_UP)) return;
  pthread_mutex_lock(&rootsLock);
  for (int i = 0; i < ROOTS_TRACKED; i++)
    if (rootsRunning[i].secret == h->secret) {
      snprintf(rootsRunning[i].why, sizeof rootsRunning[i].why, "%s", why);
      __atomic_store_n(&rootsRunning[i].refuse, 1, __ATOMIC_RELEASE);
    }
  pthread_mutex_unlock(&rootsLock);
}

/* 1 when the process asked the root to close its port (bootstrapStopRoot)
 * and not to refuse its rendezvous: a refusing root keeps its port to
 * refuse the ranks that come late. The refusal, asked first, is seen with
 * the stop. */
static int rootStopWanted(int slot) {
  return slot >= 0 && __atomic_load_n(&rootsRunning[slot].stop, __ATOMIC_ACQUIRE) &&
         !__atomic_load_n(&rootsRunning[slot].refuse, __ATOMIC_ACQUIRE);
}

static int sameAddr(const union sockAddr *a, const union sockAddr *b) {
  if (a->sa.sa_family != b->sa.sa_family) return 0;
  if (a->sa.sa_family == AF_INET)
    return a->sin.sin_port == b->sin.sin_port && a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
  return a->sin6.sin6_port == b->sin6.sin6_port && memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, 16) == 0;
}

/* Under rootsLock: 1 when slot i is the root of h's rendezvous. */
static int rootOfHandle(int i, const struct bootstrapHandle *h) {
  return rootsRunning[i].secret == h->secret && sameAddr(&rootsRunning[i].addr, &h->addr);
}

/* How long bootstrapStopRoot waits for the port to close: the root sees
 * the request within a millisecond, between two rounds of its wait; an
 * abort must return within a second. */
#define ROOT_STOP_WAIT_NS 500000000ull

void bootstrapStopRoot(const struct bootstrapHandle *h) {
  pthread_mutex_lock(&rootsLock);
  for (int i = 0; i < ROOTS_TRACKED; i++)
    if (rootOfHandle(i, h)) __atomic_store_n(&rootsRunning[i].stop, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rootsLock);
  struct waitState w; /* bounded below, quietly: the caller has failed already, and says why */
  waitBegin(&w, NULL, NULL, NULL, "the root to close its port");
  w.timeoutNs = 0;
  uint64_t until = clockNs() + ROOT_STOP_WAIT_NS;
  for (;;) {
    int open = 0;
    pthread_mutex_lock(&rootsLock);
    for (int i = 0; i < ROOTS_TRACKED; i++)
      open += rootOfHandle(i, h) && rootsRunning[i].listenFd >= 0 &&
              !__atomic_load_n(&rootsRunning[i].refusing, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&rootsLock);
    if (!open) return;
    if (clockNs() >= until) {
      INFO(subsysBootstrap, "Bootstrap : the root of this rendezvous has not closed its port within %.1f s",
           (double)ROOT_STOP_WAIT_NS / 1e9);
      return;
    }
    waitPause(&w);
  }
}

void bootstrapRetireRoot(const struct bootstrapHandle *h) {
  if (!(h->flags & BOOTSTRAP_ROOT_UP)) return; /* NCCL_COMM_ID's: rank 0 starts it, for the one id used */
  pthread_mutex_lock(&rootsLock);
  for (int i = 0; i < ROOTS_TRACKED; i++)
    if (rootsRunning[i].secret == h->secret) __atomic_store_n(&rootsRunning[i].retire, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rootsLock);
}

/* The root's sends other than the table: a rank that does not read within
 * a second is given up on (its own wait ends it). */
static ncclResult_t rootSend(int fd, const void *buf, size_t len) {
  struct waitState w;
  waitBegin(&w, NULL, NULL, NULL, "bootstrap root refusal or progress");
  w.timeoutNs = 1000000000ull;
  return sockSendAll(fd, buf, len, &w);
}

/* Sends fd the refusal in place of the table of nranks entries it expects
 * (wire.h). */
static void rootSendRefusal(int fd, int nranks, const char *text) {
  size_t total = sizeof(struct bootstrapPeerInfo) * (size_t)nranks;
  char buf[4096];
  for (size_t off = 0; off < total;) {
    size_t n = total - off < sizeof buf ? total - off : sizeof buf;
    if (off == 0) wireFrameFill(buf, n, WIRE_REFUSED, text);
    else memset(buf, 0, n);
    if (rootSend(fd, buf, n) != ncclSuccess) return;
    off += n;
  }
}

/* Closes a connection whose last bytes the peer must still read: a close
 * with unread bytes of the peer's queued here sends a reset, which can
 * make the peer's kernel drop what it had not yet read (a refusal's text:
 * test_grow clash saw "closed the connection without a word" under load
 * now and then). So: end the sending side, read away what came, close. */
static void rootCloseAfterSend(int fd) {
  shutdown(fd, SHUT_WR);
  char sink[4096];
  while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
  close(fd);
}

/* Tells every rank checked in (fds) which ranks the root still waits for,
 * and logs it at INFO. */
static void rootSendProgress(int listenFd, const int *fds, int nranks, int got) {
  char text[WIRE_PROGRESS_BYTES - WIRE_FRAME_TEXT_OFFSET - 1], addr[80];
  union sockAddr me;
  socklen_t len = sizeof me;
  if (getsockname(listenFd, &me.sa, &len) != 0) me.sa.sa_family = AF_UNSPEC;
  size_t o = (size_t)snprintf(text, sizeof text, "still waiting for rank%s", nranks - got > 1 ? "s" : "");
  int listed = 0;
  for (int i = 0; i < nranks && o < sizeof text; i++) {
    if (fds[i] >= 0) continue;
    if (listed++ == 16) {
      o += (size_t)snprintf(text + o, sizeof text - o, ", ...");
      break;
    }
    o += (size_t)snprintf(text + o, sizeof text - o, "%s %d", listed > 1 ? "," : "", i);
  }
  if (o < sizeof text) snprintf(text + o, sizeof text - o, " (of %d; %d checked in)", nranks, got);
  INFO(subsysBootstrap | subsysInit, "Bootstrap : root %s: %s",
       me.sa.sa_family == AF_UNSPEC ? "?" : sockAddrStr(&me, addr, sizeof addr), text);
  char frame[WIRE_PROGRESS_BYTES];
  wireFrameFill(frame, sizeof frame, WIRE_PROGRESS, text);
  for (int i = 0; i < nranks; i++)
    if (fds[i] >= 0) (void)rootSend(fds[i], frame, sizeof frame); /* a failure fails its reply later */
}

/* How often the root says whom it waits for: every 5 s, or twice within a
 * shorter timeout, so that a rank that gives up knows. */
static uint64_t rootProgressInterval(uint64_t timeoutNs) {
  uint64_t every = 5000000000ull;
  return timeoutNs && timeoutNs / 2 < every ? timeoutNs / 2 : every;
}

/* 1, with why, when h disagrees with the hellos taken so far (nranks: theirs,
 * fds/infos: the ranks seen): another nranks, or a rank already claimed. */
static int rootDisagrees(const struct rootHello *h, int nranks, const int *fds, const struct bootstrapPeerInfo *infos,
                         char *why, size_t len) {
  if (h->info.listenAddr.sa.sa_family == AF_UNSPEC) { /* rootHelloFill found no interface */
    snprintf(why, len, "host %s pid %d (rank %d of %d) found no network interface to use (NCCL_SOCKET_IFNAME or "
             "NCCL_SOCKET_FAMILY there?)", h->info.hostname, h->info.pid, h->rank, h->nranks);
    return 1;
  }
  if (!fds) { /* none seen yet; with NCCL_COMM_ID rank 0 started the root with its nranks */
    if (!nranks || h->nranks == nranks) return 0;
    snprintf(why, len, "host %s pid %d (rank %d) says nranks is %d, but rank 0, which hosts the root, said %d",
             h->info.hostname, h->info.pid, h->rank, h->nranks, nranks);
    return 1;
  }
  if (h->nranks != nranks) {
    int j = 0;
    while (j < nranks && fds[j] < 0) j++;
    snprintf(why, len, "host %s pid %d (rank %d) says nranks is %d, but host %s pid %d (rank %d) said %d",
             h->info.hostname, h->info.pid, h->rank, h->nranks, j < nranks ? infos[j].hostname : "?",
             j < nranks ? infos[j].pid : 0, j, nranks);
    return 1;
  }
  if (fds[h->rank] >= 0) {
    snprintf(why, len, "rank %d was claimed by host %s pid %d and host %s pid %d", h->rank,
             infos[h->rank].hostname, infos[h->rank].pid, h->info.hostname, h->info.pid);
    return 1;
  }
  return 0;
}

/* After a refusal the root stays this long (or the stall timeout, if
 * shorter) to refuse the ranks that call in late, so that they too fail at
 * once rather than wait for a root that is gone. */
#define ROOT_REFUSING_NS 10000000000ull

/* From now on every rank is refused with why: those checked in at once,
 * those that come for a grace period (then the port closes, and a rank
 * that comes later finds it refused: BOOTSTRAP_ROOT_UP). */
static void rootRefuseAll(int *fds, int nranks, const char *why, const struct waitState *w, uint64_t *refusingUntil) {
  REPORT("Bootstrap : root: %s; refusing the rendezvous to every rank", why);
  for (int i = 0; fds && i < nranks; i++)
    if (fds[i] >= 0) {
      rootSendRefusal(fds[i], nranks, why);
      rootCloseAfterSend(fds[i]);
      fds[i] = -1;
    }
  uint64_t grace = w->timeoutNs && w->timeoutNs < ROOT_REFUSING_NS ? w->timeoutNs : ROOT_REFUSING_NS;
  *refusingUntil = clockNs() + grace;
}

/* A rank outside 0..nranks-1 was asked for (bootstrapReportBadRank): its
 * process got ncclInvalidArgument and may try again with a good rank, as
 * NCCL allows; if it has not within this long (at most half the timeout,
 * so that the others hear why before they give up), every rank is
 * refused, naming it. */
#define ROOT_BAD_RANK_GRACE_NS 2000000000ull

struct rootBadRank {
  char why[200]; /* empty: none pending */
  char hostname[sizeof(((struct bootstrapPeerInfo *)0)->hostname)];
  int pid;
  uint32_t tid;
  uint64_t until;
};

static int rootHelloBadRank(const struct rootHello *h) { return h->rank < 0 || h->rank >= h->nranks; }

static void rootBadRankNoted(struct rootBadRank *bad, const struct rootHello *h, uint64_t timeoutNs) {
  if (bad->why[0]) return; /* the first one is named */
  snprintf(bad->why, sizeof bad->why, "host %s pid %d asked for rank %d of %d (ranks are 0 to %d)", h->info.hostname,
           h->info.pid, h->rank, h->nranks, h->nranks - 1);
  snprintf(bad->hostname, sizeof bad->hostname, "%s", h->info.hostname);
  bad->pid = h->info.pid;
  bad->tid = h->tid;
  uint64_t grace = timeoutNs && timeoutNs / 2 < ROOT_BAD_RANK_GRACE_NS ? timeoutNs / 2 : ROOT_BAD_RANK_GRACE_NS;
  bad->until = clockNs() + grace;
}

/* A good hello from the thread that asked for a bad rank: it tried again.
 * Not another thread of its process: there each thread may be a rank of its
 * own (ncclCommInitRank from a thread per rank), whose good hellos say
 * nothing of the bad one. */
static void rootBadRankRetried(struct rootBadRank *bad, const struct rootHello *h) {
  if (bad->why[0] && h->info.pid == bad->pid && h->tid == bad->tid && strcmp(h->info.hostname, bad->hostname) == 0)
    bad->why[0] = 0;
}

/* The root's WARNs are REPORTs: each rank says what came of its
 * rendezvous, and ncclGetLastError in the root's process keeps that. */
static void *rootThread(void *argp) {
  /* argp is freed only at the end: the thread touches no allocator until a
   * rank calls in, so a process may fork right after ncclGetUniqueId. */
  struct rootArgs a = *(struct rootArgs *)argp;
  __atomic_store_n(a.started, 1, __ATOMIC_RELEASE);
  int nranks = a.nranks, got = 0;
  int *fds = NULL;
  struct bootstrapPeerInfo *infos = NULL;
  struct waitState w;
  waitBegin(&w, NULL, NULL, NULL, "bootstrap root waiting for ranks");
  /* The ranks, with the same timeout, give up first and hear why (above),
   * rather than see the root close their connections. */
  const uint64_t ranksTimeoutNs = w.timeoutNs;
  if (w.timeoutNs) w.timeoutNs += 2000000000ull;
  struct acceptor *acc = a.acc;
  acceptorInit(acc, a.listenFd, sizeof(struct rootHello));
  char refusal[400] = ""; /* set once ranks disagreed: every rank is refused */
  struct rootBadRank bad = {.why = ""};
  uint64_t refusingUntil = 0, nextProgressNs = 0;
  int retired = 0, listening = 1;
  while (refusal[0] ? clockNs() < refusingUntil : nranks == 0 || got < nranks) {
    int fd = -1, progressed = 0;
    struct rootHello hello;
    /* The process's rank 0 has failed or was aborted (bootstrapStopRoot):
     * the port closes now, so that it may try again on the same address at
     * once. The ranks checked in are left to their own timeouts or leave
     * notices, as they would be with the port open. */
    if (listening && !refusal[0] && rootStopWanted(a.slot)) {
      INFO(subsysBootstrap, "Bootstrap : root: its process's rank 0 gave up on the rendezvous; closing the port");
      rootCloseListener(a.slot, a.listenFd);
      acceptorClose(acc);
      listening = 0;
    }
    if (!refusal[0] && rootRefused(a.slot, refusal, sizeof refusal)) rootRefuseAll(fds, nranks, refusal, &w, &refusingUntil);
    if (!refusal[0] && bad.why[0] && clockNs() >= bad.until) {
      snprintf(refusal, sizeof refusal, "%s", bad.why);
      rootRefuseAll(fds, nranks, refusal, &w, &refusingUntil);
    }
    if (refusal[0] && a.slot >= 0) __atomic_store_n(&rootsRunning[a.slot].refusing, 1, __ATOMIC_RELEASE);
    if (refusal[0] && !listening) break; /* those checked in were told; nobody else can come */
    if (!listening && got == 0) break;   /* stopped before anyone checked in: nobody is left to serve */
    if (listening && acceptorPoll(acc, &fd, &hello, &progressed) != ncclSuccess) {
      rootFailed(a.secret, logThreadLastError()); /* before the listener closes: its ranks look here */
      break;
    }
    if (fd < 0) {
      if (got == 0 && rootRetired(a.slot)) { /* its id is not used: nobody comes */
        retired = 1;
        break;
      }
      if (progressed) waitProgress(&w);
      else if (waitPause(&w) != ncclSuccess) break;
      if (fds && !refusal[0] && clockNs() >= nextProgressNs) {
        rootSendProgress(listening ? a.listenFd : -1, fds, nranks, got);
        nextProgressNs = clockNs() + rootProgressInterval(w.timeoutNs);
      }
      /* When every rank that checked in has said it leaves (its init was
       * aborted or failed: rootLeaveNotice), nobody waits for this
       * rendezvous any more: end, rather than hold a thread and sockets
       * until the timeout. A connection that merely closes is not taken
       * for a notice. */
      int waiting = 0;
      for (int i = 0; fds && !refusal[0] && !progressed && i < nranks; i++) {
        char c = 0;
        waiting += fds[i] >= 0 && !(recv(fds[i], &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1 && c == rootLeaveNotice);
      }
      if (fds && !refusal[0] && !progressed && waiting == 0) {
        REPORT("Bootstrap : root: the %d rank(s) that checked in have all left; giving up", got);
        break;
      }
      continue;
    }
    waitProgress(&w);
    if (!wireRootHelloValid(&hello, a.secret)) {
      close(fd);
      continue;
    }
    if (hello.flags & WIRE_HELLO_DISAGREES) { /* a report: nothing answers it */
      if (!refusal[0]) {
        snprintf(refusal, sizeof refusal, "host %s pid %d, which was handed this rendezvous, will not join it (it does "
                 "not agree with the other ranks on who takes part, or failed first: see its log)", hello.info.hostname,
                 hello.info.pid);
        rootRefuseAll(fds, nranks, refusal, &w, &refusingUntil);
      }
      close(fd);
      continue;
    }
    if (rootHelloBadRank(&hello)) { /* a report: nothing answers it */
      if (!refusal[0]) rootBadRankNoted(&bad, &hello, ranksTimeoutNs);
      close(fd);
      continue;
    }
    rootBadRankRetried(&bad, &hello);
    if (!refusal[0] && rootDisagrees(&hello, nranks, fds, infos, refusal, sizeof refusal))
      rootRefuseAll(fds, nranks, refusal, &w, &refusingUntil);
    if (refusal[0]) {
      rootSendRefusal(fd, hello.nranks, refusal);
      rootCloseAfterSend(fd);
      continue;
    }
    if (fds == NULL) {
      nranks = hello.nranks;
      fds = malloc(sizeof(int) * nranks);
      infos = calloc(nranks, sizeof *infos);
      if (!fds || !infos) break;
      for (int i = 0; i < nranks; i++) fds[i] = -1;
    }
    int32_t checkedIn = WIRE_CHECKED_IN;
    (void)rootSend(fd, &checkedIn, sizeof checkedIn); /* a failure fails its reply later */
    fds[hello.rank] = fd;
    infos[hello.rank] = hello.info;
    if (got++ == 0) nextProgressNs = clockNs() + rootProgressInterval(w.timeoutNs);
  }
  /* Closed before any rank hears back: once a communicator exists, a rank
   * that tries its id again finds the port closed and fails at once (see
   * BOOTSTRAP_ROOT_UP), in this process and in children forked after, which
   * would otherwise inherit the open port and wait on it. */
  if (listening) rootCloseListener(a.slot, a.listenFd);
  if (refusal[0]) {
    /* every rank that called in was told */
  } else if (retired) {
    INFO(subsysBootstrap, "Bootstrap : root of an unused unique id ends (ncclCommInitRankScalable)");
  } else if (!listening && got == 0) {
    INFO(subsysBootstrap, "Bootstrap : root ends: its process's rank 0 gave up before any rank checked in");
  } else if (nranks > 0 && got == nranks) {
    for (int i = 0; i < nranks; i++) {
      struct waitState ws;
      waitBegin(&ws, NULL, NULL, NULL, "bootstrap root reply");
      if (sockSendAll(fds[i], infos, sizeof *infos * nranks, &ws) != ncclSuccess)
        REPORT("Bootstrap : root could not reach rank %d", i);
    }
  } else {
    REPORT("Bootstrap : root gave up with %d of %d ranks checked in", got, nranks);
  }
  for (int i = 0; fds && i < nranks; i++)
    if (fds[i] >= 0) close(fds[i]);
  acceptorClose(acc);
  free(acc);
  free(fds);
  free(infos);
  free(argp);
  rootUntrack(a.slot);
  return NULL;
}

static ncclResult_t spawnRoot(int listenFd, const union sockAddr *addr, uint64_t secret, int nranks) {
  struct rootArgs *a = malloc(sizeof *a);
  struct acceptor *acc = malloc(sizeof *acc);
  if (!a || !acc) {
    free(a);
    free(acc);
    close(listenFd);
    return ncclSystemError;
  }
  int started = 0;
  a->listenFd = listenFd;
  a->secret = secret;
  a->nranks = nranks;
  a->started = &started;
  a->acc = acc;
  a->slot = rootTrack(secret, listenFd, addr);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&t, &attr, rootThread, a);
  pthread_attr_destroy(&attr);
  if (err) {
    rootCloseListener(a->slot, listenFd);
    rootUntrack(a->slot);
    free(a);
    free(acc);
    WARN("Bootstrap : cannot start the root thread: %s", strerror(err));
    return ncclSystemError;
  }
  /* Return only once the thread is running: thread start-up allocates, and
   * a fork during it (common right after ncclGetUniqueId) could inherit a
   * locked allocator. */
  struct waitState w;
  waitBegin(&w, NULL, NULL, NULL, "bootstrap root start");
  while (!__atomic_load_n(&started, __ATOMIC_ACQUIRE)) CHECK(waitPause(&w));
  return ncclSuccess;
}

/* A 64-bit secret from the shared text (never 0 nor the well-known one). */
static uint64_t secretFromText(const char *text) {
  uint64_t h = fnv1a(FNV1A_INIT, text);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h == 0 || h == BOOTSTRAP_COMM_ID_SECRET ? h ^ 0x5a5aull : h;
}

ncclResult_t bootstrapEnvHandle(const char *addr, struct bootstrapHandle *h) {
  memset(h, 0, sizeof *h);
  CHECK(sockAddrParse(addr, &h->addr));
  const char *text = paramStr(paramSecret), *file = paramStr(paramSecretFile);
  char line[4096] = "";
  if (!text[0] && file[0]) {
    FILE *f = fopen(file, "r");
    int readable = f && fgets(line, sizeof line, f);
    int err = errno;
    if (f) fclose(f);
    line[strcspn(line, "\r\n")] = 0;
    if (!readable || !line[0]) {
      WARN("CHORUS_SECRET_FILE=%s: %s", file, !f ? strerror(err) : "its first line is empty");
      return ncclInvalidArgument;
    }
    text = line;
  }
  if (text[0]) {
    h->secret = secretFromText(text);
    return ncclSuccess;
  }
  h->secret = BOOTSTRAP_COMM_ID_SECRET;
  static int said;
  if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
    INFO(subsysBootstrap | subsysInit,
         "Bootstrap : the rendezvous at %s uses the well-known secret: any process that reaches it can join; set "
         "CHORUS_SECRET or CHORUS_SECRET_FILE on every rank (chorusrun sets one per job)",
         addr);
  return ncclSuccess;
}

ncclResult_t bootstrapGetUniqueId(struct bootstrapHandle *h) {
  const char *commId = paramStr(paramCommId);
  if (commId[0]) return bootstrapEnvHandle(commId, h);
  return bootstrapNewRoot(h);
}

ncclResult_t bootstrapNewRoot(struct bootstrapHandle *h) {
  memset(h, 0, sizeof *h);
  char ifname[64];
  CHECK(sockPickAddr(NULL, &h->addr, ifname, sizeof ifname));
  h->flags = BOOTSTRAP_ROOT_UP;
  if (getrandom(&h->secret, sizeof h->secret, 0) != sizeof h->secret) {
    WARN("Call to getrandom failed: %s", strerror(errno));
    return ncclSystemError;
  }
  int fd;
  CHECK(sockListen(&h->addr, &fd));
  char buf[80];
  INFO(subsysBootstrap, "Bootstrap : root listening on %s (%s)", sockAddrStr(&h->addr, buf, sizeof buf), ifname);
  return spawnRoot(fd, &h->addr, h->secret, 0);
}

ncclResult_t bootstrapStartRoot(const struct bootstrapHandle *h, int nranks) {
  union sockAddr addr = h->addr;
  int fd;
  CHECK(sockListen(&addr, &fd));
  return spawnRoot(fd, &addr, h->secret, nranks);
}

/* ---- ranks ---- */

/* A process forked while a bootstrap lives closes its copies of the
 * bootstrap's descriptors (core/forkclose.h): kept open there, they held
 * the mesh connections up after the parent died, and its peers waited out
 * their timeout for a rank that was gone, calling it "stopped or frozen".
 * Closes b's descriptors, marking them closed. */
static void bootCloseFds(struct forkClose *f) {
  struct bootstrap *b = (struct bootstrap *)((char *)f - offsetof(struct bootstrap, forkLink));
  for (int i = 0; b->peerFd && i < b->nranks; i++) {
    if (b->peerFd[i] >= 0) close(b->peerFd[i]);
    b->peerFd[i] = -1;
  }
  if (b->listenFd >= 0) close(b->listenFd);
  b->listenFd = -1;
  for (int i = 0; b->pidFd && i < b->nranks; i++) {
    if (b->pidFd[i] >= 0) pidWatchReleaseLocked(b->pidFd[i]); /* shared with other communicators */
    b->pidFd[i] = -1;
  }
}

/* Once every peer has connected, nobody needs the listener: one
 * descriptor fewer per communicator. */
static void bootCloseListener(void *arg) {
  struct bootstrap *b = arg;
  if (b->listenFd >= 0) close(b->listenFd);
  b->listenFd = -1;
}

/* Rank j, which checked in at the root (so its listener was up), refuses
 * connections now: it is gone (killed during init, or it gave up). */
static ncclResult_t meshPeerGone(const struct bootstrap *b, int j) {
  char addr[80];
  if (sockIsLoopback(&b->peers[j].listenAddr) && b->peers[j].hostHash != b->peers[b->rank].hostHash) {
    WARN("Bootstrap : rank %d of %d (host %s) cannot reach rank %d (host %s, pid %d): it listens on %s, a loopback "
         "address, which only its own host reaches (NCCL_SOCKET_IFNAME picks lo on that host?)",
         b->rank, b->nranks, b->peers[b->rank].hostname, j, b->peers[j].hostname, b->peers[j].pid,
         sockAddrStr(&b->peers[j].listenAddr, addr, sizeof addr));
    return ncclInvalidUsage;
  }
  WARN("Bootstrap : rank %d of %d: rank %d (host %s, pid %d) is gone: it checked in at the root, but %s refuses "
       "connections now (it died during init, or failed it: see its log)",
       b->rank, b->nranks, j, b->peers[j].hostname, b->peers[j].pid, sockAddrStr(&b->peers[j].listenAddr, addr,
                                                                                   sizeof addr));
  return ncclRemoteError;
}

/* Rank j checked in at the root with an address this rank cannot reach:
 * its interface (NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY on its host) is
 * one no route from here leads to. err: the last attempt's. */
static ncclResult_t meshPeerUnreachable(const struct bootstrap *b, int j, int err, ncclResult_t res) {
  char addr[80];
  WARN("Bootstrap : rank %d of %d (host %s) cannot reach rank %d (host %s, pid %d) at %s, the address it listens on: "
       "%s (rank %d's interface, from NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY on its host, is none this host reaches?)",
       b->rank, b->nranks, b->peers[b->rank].hostname, j, b->peers[j].hostname, b->peers[j].pid,
       sockAddrStr(&b->peers[j].listenAddr, addr, sizeof addr), err == ETIMEDOUT ? "no answer" : strerror(err), j);
  return res;
}

/* The mesh's liveness check while this rank waits for higher ranks to
 * connect: at most every half second, one that has not come yet and whose
 * listener refuses a probe is gone. (A probe that connects is closed
 * before its hello, which the peer drops silently.) */
struct meshWatch {
  const struct bootstrap *b;
  uint64_t nextProbeNs;
};

static ncclResult_t meshLiveness(void *arg) {
  struct meshWatch *m = arg;
  uint64_t now = clockNs();
  if (now < m->nextProbeNs) return ncclSuccess;
  m->nextProbeNs = now + 500000000ull;
  for (int j = m->b->rank + 1; j < m->b->nranks; j++)
    if (m->b->peerFd[j] < 0 && sockRefused(&m->b->peers[j].listenAddr, 100)) return meshPeerGone(m->b, j);
  return ncclSuccess;
}

static ncclResult_t meshConnect(struct bootstrap *b) {
  struct waitState w;
  struct meshWatch watch = {b, 0};
  waitBegin(&w, b->abortFlag, meshLiveness, &watch, "bootstrap mesh");
  /* Connect to every lower rank (they listen already: the root replied only
   * after all had checked in, so a refusal means the rank is gone), then
   * accept every higher one. */
  for (int j = 0; j < b->rank; j++) {
    ncclResult_t res = sockConnect(&b->peers[j].listenAddr, &b->peerFd[j], &w, 1);
    if (res == ncclRemoteError && errno == ECONNREFUSED) return meshPeerGone(b, j);
    if ((res == ncclRemoteError && (errno == EHOSTUNREACH || errno == ENETUNREACH)) || res == ncclTimeout)
      return meshPeerUnreachable(b, j, errno, res);
    CHECK(res);
    struct meshHello hello = {b->secret, b->rank, 0};
    CHECK(sockSendAll(b->peerFd[j], &hello, sizeof hello, &w));
  }
  int missing = b->nranks - 1 - b->rank;
  struct acceptor *acc = missing > 0 ? malloc(sizeof *acc) : NULL;
  if (missing > 0 && !acc) return ncclSystemError;
  if (acc) acceptorInit(acc, b->listenFd, sizeof(struct meshHello));
  ncclResult_t res = ncclSuccess;
  while (missing > 0) {
    int fd;
    struct meshHello hello;
    CHECKGOTO(acceptorNext(acc, &fd, &hello, &w), res, out);
    if (!wireMeshHelloValid(&hello, b->secret, b->rank, b->nranks, b->peerFd)) {
      WARN("Bootstrap : rank %d dropped a connection without the communicator's secret", b->rank);
      close(fd);
      continue;
    }
    b->peerFd[hello.rank] = fd;
    missing--;
  }
out:
  if (acc) acceptorClose(acc);
  free(acc);
  return res;
}

/* Every peer that is another process in this rank's pid namespace (its
 * pid means the same here: machinePidNamespace) is watched through its pid
 * as well as its connection, which another process may hold open (one
 * forked without the fork handlers, or handed its sockets): with a pidfd,
 * readable once the process has exited (a zombie included) and immune to
 * the pid's reuse; with kill(pid, 0) where the kernel has none (before
 * Linux 5.3, seccomp, no descriptors left), which does not see a zombie.
 * Every peer is alive now: it connected. */
int bootstrapPidComparable(const struct bootstrap *b, int peer) {
  const struct bootstrapPeerInfo *me = &b->peers[b->rank], *q = &b->peers[peer];
  return me->pidNs != 0 && q->pidNs == me->pidNs && q->pid > 0;
}

static void watchLocalPeers(struct bootstrap *b) {
  const struct bootstrapPeerInfo *me = &b->peers[b->rank];
  int fds = 0, kills = 0;
  for (int p = 0; p < b->nranks; p++) {
    const struct bootstrapPeerInfo *q = &b->peers[p];
    if (p == b->rank || !bootstrapPidComparable(b, p) || q->pid == me->pid) continue;
    int fd = pidWatchOpen((pid_t)q->pid);
    b->pidFd[p] = fd >= 0 ? fd : BOOTSTRAP_PID_KILL;
    fds += fd >= 0;
    kills += fd < 0;
  }
  if (fds + kills)
    INFO(subsysBootstrap, "Bootstrap : rank %d watches %d local peer(s) by pid (%d with pidfds, %d with kill)", b->rank,
         fds + kills, fds, kills);
}

/* The root's answer: progress frames (logged), then the table or a
 * refusal, into b->peers. The rank's timeout runs from the start, whatever
 * frames come; when it expires the WARN says whom the root still waited for. */
static ncclResult_t recvRootReply(struct bootstrap *b, int rootFd, const union sockAddr *root, struct waitState *w) {
  size_t tableBytes = sizeof *b->peers * (size_t)b->nranks;
  uint64_t timeoutNs = w->timeoutNs, deadline = timeoutNs ? clockNs() + timeoutNs : 0;
  char progress[WIRE_PROGRESS_BYTES] = "", addr[80];
  ncclResult_t res;
  int checkedIn = 0;
  uint64_t checkInBy = clockNs() + (timeoutNs && timeoutNs < WIRE_CHECKIN_NS ? timeoutNs : WIRE_CHECKIN_NS);
  for (;;) {
    char frame[WIRE_PROGRESS_BYTES];
    int32_t mark;
    uint64_t until = checkedIn ? deadline : checkInBy; /* 0: no timeout (CHORUS_TIMEOUT=0), once checked in */
    w->timeoutNs = until ? (clockNs() < until ? until - clockNs() : 1) : 0;
    if ((res = sockRecvAll(rootFd, &mark, sizeof mark, w)) != ncclSuccess) break;
    checkedIn = 1; /* a root that says anything is one */
    if (mark == WIRE_CHECKED_IN) continue;
    char *rest = (char *)b->peers;
    size_t restBytes = tableBytes;
    if (mark == WIRE_PROGRESS) {
      rest = frame;
      restBytes = sizeof frame;
    }
    memcpy(rest, &mark, sizeof mark);
    if ((res = sockRecvAll(rootFd, rest + sizeof mark, restBytes - sizeof mark, w)) != ncclSuccess) break;
    if (mark != WIRE_PROGRESS) return ncclSuccess;
    wireFrameRead(frame, sizeof frame, WIRE_PROGRESS, progress, sizeof progress);
    INFO(subsysBootstrap | subsysInit, "Bootstrap : rank %d of %d: %s at the root %s", b->rank, b->nranks, progress,
         sockAddrStr(root, addr, sizeof addr));
  }
  if (res == ncclTimeout && !checkedIn && (!timeoutNs || timeoutNs > WIRE_CHECKIN_NS)) {
    WARN("Bootstrap : rank %d of %d: no answer from %s within %.0f s of this rank's hello: what listens there is not a "
         "chorus root, or its process is stopped or frozen (is the port taken by another program? the rank that hosts "
         "the root could not listen then)",
         b->rank, b->nranks, sockAddrStr(root, addr, sizeof addr), (double)WIRE_CHECKIN_NS / 1e9);
    return ncclRemoteError;
  }
  if (res == ncclRemoteError && !checkedIn)
    WARN("Bootstrap : rank %d of %d: the root %s closed the connection without a word: it refused this rank's hello "
         "(is CHORUS_SECRET the same on every rank?)",
         b->rank, b->nranks, sockAddrStr(root, addr, sizeof addr));
  else if (res == ncclRemoteError)
    WARN("Bootstrap : rank %d of %d: the root %s closed the rendezvous without an answer%s%s", b->rank, b->nranks,
         sockAddrStr(root, addr, sizeof addr), progress[0] ? "; it was " : "", progress);
  else if (res == ncclTimeout)
    WARN("Bootstrap : rank %d of %d gave up on the rendezvous after %.0f s: the root %s %s%s", b->rank, b->nranks,
         (double)timeoutNs / 1e9, sockAddrStr(root, addr, sizeof addr), progress[0] ? "was " : "never answered",
         progress);
  return res;
}

/* A rank's hello to the root of h: its table entry, with the address of
 * the interface that reaches the root's network (port 0: to listen on). */
static ncclResult_t rootHelloFill(struct rootHello *hello, const struct bootstrapHandle *h, int rank, int nranks,
                                  const struct bootstrapPeerInfo *me, char *ifname, size_t ifnameLen) {
  *hello = (struct rootHello){.secret = h->secret, .rank = rank, .nranks = nranks, .tid = me->callerTid, .info = *me};
  hello->info.rank = rank;
  hello->info.pidNs = machinePidNamespace();
  ncclResult_t picked = sockPickAddr(&h->addr, &hello->info.listenAddr, ifname, ifnameLen);
  if (picked != ncclSuccess) { /* no interface to listen on: a hello that says so (an address of no family) */
    memset(&hello->info.listenAddr, 0, sizeof hello->info.listenAddr);
    hello->info.listenAddr.sa.sa_family = AF_UNSPEC;
    return picked;
  }
  if (hello->info.listenAddr.sa.sa_family == AF_INET) hello->info.listenAddr.sin.sin_port = 0;
  else hello->info.listenAddr.sin6.sin6_port = 0;
  return ncclSuccess;
}

/* Says hello to the root and waits until it refuses the rendezvous and
 * closes (best effort, within a second: this rank fails anyway). */
static void reportToRoot(const struct bootstrapHandle *h, const struct rootHello *hello) {
  struct waitState w;
  waitBegin(&w, NULL, NULL, NULL, "reporting a bad rank to the root");
  w.timeoutNs = 1000000000ull;
  int fd;
  if (sockConnect(&h->addr, &fd, &w, (h->flags & BOOTSTRAP_ROOT_UP) != 0) != ncclSuccess) return;
  if (sockSendAll(fd, hello, sizeof *hello, &w) == ncclSuccess) {
    char sink[256]; /* until the root has refused the rendezvous and closed */
    while (sockRecvAll(fd, sink, sizeof sink, &w) == ncclSuccess) {
    }
  }
  close(fd);
}

ncclResult_t bootstrapInit(struct bootstrap *b, const struct bootstrapHandle *h, int rank, int nranks,
                           const struct bootstrapPeerInfo *me, volatile int *abortFlag) {
  memset(b, 0, sizeof *b);
  b->rank = rank;
  b->nranks = nranks;
  b->secret = h->secret;
  b->abortFlag = abortFlag;
  b->listenFd = -1;
  b->peerFd = malloc(sizeof(int) * nranks);
  b->departed = calloc(nranks, 1);
  b->peers = calloc(nranks, sizeof *b->peers);
  b->pidFd = malloc(sizeof(int) * nranks);
  if (!b->peerFd || !b->departed || !b->peers || !b->pidFd) return ncclSystemError;
  for (int i = 0; i < nranks; i++) b->peerFd[i] = b->pidFd[i] = -1;
  b->forkLink.closeFds = bootCloseFds;
  forkCloseAdd(&b->forkLink); /* until bootstrapClose: every descriptor it holds from now on */

  struct rootHello hello;
  ncclResult_t picked = rootHelloFill(&hello, h, rank, nranks, me, b->ifname, sizeof b->ifname);
  if (picked != ncclSuccess) {
    /* No interface to listen on (NCCL_SOCKET_IFNAME matching nothing here):
     * the root is still reached by the kernel's route and told, so that every
     * rank fails at once naming this one instead of waiting for it. */
    reportToRoot(h, &hello);
    return picked;
  }
  char buf[80];
  /* NCCL's line, the address without its port */
  sockAddrStr(&hello.info.listenAddr, buf, sizeof buf);
  char *colon = strrchr(buf, ':');
  if (colon) *colon = 0;
  INFO(subsysBootstrap | subsysInit, "Bootstrap : Using %s:%s<0>", b->ifname, buf);
  CHECK(sockListen(&hello.info.listenAddr, &b->listenFd));

  struct waitState w;
  waitBegin(&w, abortFlag, NULL, NULL, "bootstrap rendezvous with the root");
  int rootFd;
  ncclResult_t connected = sockConnect(&h->addr, &rootFd, &w, (h->flags & BOOTSTRAP_ROOT_UP) != 0);
  if (connected == ncclTimeout) { /* the address and why, not only that time ran out */
    int err = errno;
    WARN("Bootstrap : rank %d of %d: no root answered at %s (the last attempt: %s): is it the address and port "
         "the root's rank uses (NCCL_COMM_ID, MASTER_ADDR:MASTER_PORT), and has that rank started?",
         rank, nranks, sockAddrStr(&h->addr, buf, sizeof buf), strerror(err));
    return connected;
  }
  if (connected == ncclRemoteError && errno == ECONNREFUSED && rootFailureOf(h, rank, nranks, connected) != connected)
    return ncclSystemError;
  if (connected != ncclSuccess) {
    if (connected != ncclRemoteError || errno != ECONNREFUSED) return connected; /* said by sockConnect */
    WARN("Bootstrap : rank %d of %d: the root %s of this unique id is not listening: its rendezvous has ended (a "
         "unique id makes one communicator: call ncclGetUniqueId for each) or the process that made it has exited",
         rank, nranks, sockAddrStr(&h->addr, buf, sizeof buf));
    return ncclInvalidUsage;
  }
  ncclResult_t res;
  CHECKGOTO(sockSendAll(rootFd, &hello, sizeof hello, &w), res, out);
  res = recvRootReply(b, rootFd, &h->addr, &w);
  if (res == ncclRemoteError) res = rootFailureOf(h, rank, nranks, res);
  if (res != ncclSuccess) goto out;
  close(rootFd);
  rootFd = -1;
  char refusal[512];
  if (wireFrameRead(b->peers, sizeof *b->peers * nranks, WIRE_REFUSED, refusal, sizeof refusal)) {
    WARN("Bootstrap : rank %d of %d: the root refused the rendezvous: %s", rank, nranks, refusal);
    return ncclInvalidUsage;
  }
  CHECK(wirePeerTableCheck(b->peers, nranks));
  res = meshConnect(b);
  if (res == ncclSuccess) {
    forkCloseUnder(bootCloseListener, b);
    watchLocalPeers(b);
  }
out:
  if (rootFd >= 0) { /* leaving before the root replied: tell it */
    if (send(rootFd, &rootLeaveNotice, 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* it may be gone already */
    }
    close(rootFd);
  }
  return res;
}

void bootstrapReportBadRank(const struct bootstrapHandle *h, int rank, int nranks,
                            const struct bootstrapPeerInfo *me) {
  struct rootHello hello;
  char ifname[64];
  if (rootHelloFill(&hello, h, rank, nranks, me, ifname, sizeof ifname) != ncclSuccess) return;
  reportToRoot(h, &hello);
}

void bootstrapReportDisagreement(const struct bootstrapHandle *h, int nranks, const struct bootstrapPeerInfo *me) {
  struct rootHello hello;
  char ifname[64];
  if (rootHelloFill(&hello, h, -1, nranks, me, ifname, sizeof ifname) != ncclSuccess) return;
  hello.flags = WIRE_HELLO_DISAGREES;
  reportToRoot(h, &hello);
}

/* A wait of a message to or from peer, within the communicator's timeout
 * (chorusCommSetTimeout's, else CHORUS_TIMEOUT); what names the peer. */
static void bootstrapWaitBegin(struct bootstrap *b, struct waitState *w, char *what, size_t whatSize, const char *verb,
                               int peer) {
  snprintf(what, whatSize, "bootstrap %s rank %d", verb, peer);
  waitBegin(w, b->abortFlag, bootstrapLiveness, b, what);
  int64_t ms = b->timeoutMs ? __atomic_load_n(b->timeoutMs, __ATOMIC_RELAXED) : 0;
  if (ms > 0) w->timeoutNs = (uint64_t)ms * 1000000ull;
}

/* A send or receive on the mesh (before the monitor owns it: the setup)
 * that found the connection closed: the ranks that are gone are named, as
 * the liveness check names them; where none looks gone yet (its close
 * came first), the one this rank talked to. */
static ncclResult_t meshLost(struct bootstrap *b, int peer, const char *verb, ncclResult_t res) {
  if (res != ncclRemoteError) return res; /* a timeout or an abort said what it waited for */
  ncclResult_t named = bootstrapLiveness(b);
  if (named != ncclSuccess) return named;
  char who[128];
  WARN("Bootstrap : rank %d lost its connection to %s during a %s it: that rank exited, aborted or failed its own "
       "init (see its log)",
       b->rank, bootstrapDescribePeer(b, peer, who, sizeof who), verb);
  return res;
}

/* A framed send or receive that timed out: the other ranks are told whom
 * this rank gave up on. They may wait in the same exchange (a split's
 * all-gather) for the same late rank, and would otherwise learn only that
 * this one left, once it failed and exited, and name it instead. */
static ncclResult_t framedWaitEnded(struct bootstrap *b, int peer, const char *verb, ncclResult_t res) {
  if (res != ncclTimeout) return res;
  char who[128], text[256];
  snprintf(text, sizeof text, "rank %d timed out waiting to %s %s", b->rank, verb,
           bootstrapDescribePeer(b, peer, who, sizeof who));
  oobBroadcastFault(b, ncclTimeout, text);
  return res;
}

ncclResult_t bootstrapSend(struct bootstrap *b, int peer, const void *data, size_t size) {
  struct waitState w;
  char what[64];
  bootstrapWaitBegin(b, &w, what, sizeof what, "send to", peer);
  if (b->oob) return framedWaitEnded(b, peer, "send to", oobSendData(b, peer, data, size, &w));
  return meshLost(b, peer, "send to", sockSendAll(b->peerFd[peer], data, size, &w));
}

ncclResult_t bootstrapRecv(struct bootstrap *b, int peer, void *data, size_t size) {
  struct waitState w;
  char what[64];
  bootstrapWaitBegin(b, &w, what, sizeof what, "receive from", peer);
  if (b->oob) return framedWaitEnded(b, peer, "receive from", oobRecvData(b, peer, data, size, &w));
  return meshLost(b, peer, "receive from", sockRecvAll(b->peerFd[peer], data, size, &w));
}

/* Ring exchange over the mesh: at step s, send to rank+s and receive from
 * rank-s; one message in flight per direction keeps socket buffers from
 * filling up on both sides at once. */
ncclResult_t bootstrapAllGather(struct bootstrap *b, void *data, size_t size) {
  char *d = data;
  for (int s = 1; s < b->nranks; s++) {
    int to = (b->rank + s) % b->nranks, from = (b->rank - s + b->nranks) % b->nranks;
    if (b->rank < to) {
      CHECK(bootstrapSend(b, to, d + (size_t)b->rank * size, size));
      CHECK(bootstrapRecv(b, from, d + (size_t)from * size, size));
    } else {
      CHECK(bootstrapRecv(b, from, d + (size_t)from * size, size));
      CHECK(bootstrapSend(b, to, d + (size_t)b->rank * size, size));
    }
  }
  return ncclSuccess;
}

/* NTP's exchange with rank 0, rounds times per rank, one rank after the
 * other: t0 sent, rank 0's clock t1 back, t2 on arrival; the round with the
 * shortest round trip gives the offset t1 - (t0 + t2) / 2, good to half
 * that round trip. */
ncclResult_t bootstrapClockOffset(struct bootstrap *b, int rounds, int64_t *offsetNs, uint64_t *errorNs) {
  *offsetNs = 0;
  *errorNs = 0;
  if (b->rank == 0) {
    for (int r = 1; r < b->nranks; r++)
      for (int k = 0; k < rounds; k++) {
        uint64_t t0, t1;
        CHECK(bootstrapRecv(b, r, &t0, sizeof t0));
        t1 = clockNs();
        CHECK(bootstrapSend(b, r, &t1, sizeof t1));
      }
    return ncclSuccess;
  }
  uint64_t best = UINT64_MAX;
  for (int k = 0; k < rounds; k++) {
    uint64_t t0 = clockNs(), t1;
    CHECK(bootstrapSend(b, 0, &t0, sizeof t0));
    CHECK(bootstrapRecv(b, 0, &t1, sizeof t1));
    uint64_t t2 = clockNs();
    if (t2 - t0 < best) {
      best = t2 - t0;
      *offsetNs = (int64_t)(t1 - t0) - (int64_t)(best / 2);
      *errorNs = best / 2;
    }
  }
  return ncclSuccess;
}

ncclResult_t bootstrapBarrier(struct bootstrap *b) {
  char *tmp = calloc(b->nranks, 1);
  if (!tmp) return ncclSystemError;
  ncclResult_t res = bootstrapAllGather(b, tmp, 1);
  free(tmp);
  return res;
}

int bootstrapPeerExited(const struct bootstrap *b, int i) {
  int fd = b->pidFd ? b->pidFd[i] : -1;
  if (fd >= 0) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return fd == BOOTSTRAP_PID_KILL && kill((pid_t)b->peers[i].pid, 0) != 0 && errno == ESRCH;
}

/* A peer is gone when its end of the mesh connection shut down, or its
 * process exited (whoever still holds its end: what it sent is here by
 * then), without the goodbye that bootstrapClose sends first. All gone
 * peers are named: when one rank dies, others may abort because of it,
 * and the WARN should still show the first. */
static int peerGone(struct bootstrap *b, int i) {
  if (b->oob) return oobPeerGone(b, i); /* the monitor reads the mesh */
  struct pollfd p = {b->peerFd[i], POLLRDHUP, 0};
  int closed = poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
  if (!closed && !bootstrapPeerExited(b, i)) return 0;
  int pending = 0;
  ioctl(b->peerFd[i], FIONREAD, &pending);
  if (pending >= (int)sizeof goodbyeMagic && !(p.revents & POLLERR)) {
    char buf[4096];
    ssize_t n = recv(b->peerFd[i], buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    uint64_t tail;
    if (n >= (ssize_t)sizeof tail) {
      memcpy(&tail, buf + n - sizeof tail, sizeof tail);
      if (tail == goodbyeMagic) {
        b->departed[i] = 1;
        return 0;
      }
    }
  }
  return 1;
}

int bootstrapPeerDeparted(const struct bootstrap *b, int i) {
  return b->oob ? oobPeerDeparted(b, i) : b->departed[i];
}

const char *bootstrapDescribePeer(const struct bootstrap *b, int i, char *buf, size_t len) {
  snprintf(buf, len, "rank %d (host %s, pid %d)", i, b->peers[i].hostname, b->peers[i].pid);
  return buf;
}

int bootstrapGoneCount(struct bootstrap *b) {
  int gone = 0;
  for (int i = 0; i < b->nranks; i++) gone += b->peerFd[i] >= 0 && !bootstrapPeerDeparted(b, i) && peerGone(b, i);
  return gone;
}

/* A fault another rank relayed (oobBroadcastFault), WARNed as its text:
 * ncclSuccess when there is none. */
static ncclResult_t relayedFault(struct bootstrap *b) {
  char text[512], peer[128];
  int from;
  if (__atomic_load_n(&b->faultsEnded, __ATOMIC_ACQUIRE)) return ncclSuccess;
  ncclResult_t fault = oobPendingFault(b, text, sizeof text, &from);
  if (fault != ncclSuccess) WARN("%s reported: %s", bootstrapDescribePeer(b, from, peer, sizeof peer), text);
  return fault;
}

ncclResult_t bootstrapLiveness(void *arg) {
  struct bootstrap *b = arg;
  char names[512], peer[128];
  int len = 0, gone = 0;
  ncclResult_t fault = relayedFault(b);
  if (fault != ncclSuccess) return fault;
  for (int i = 0; i < b->nranks; i++) {
    if (b->peerFd[i] < 0 || bootstrapPeerDeparted(b, i) || !peerGone(b, i)) continue;
    if (len < (int)sizeof names - 100)
      len += snprintf(names + len, sizeof names - len, "%s%s", gone ? ", " : "",
                      bootstrapDescribePeer(b, i, peer, sizeof peer));
    gone++;
  }
  if (!gone) return b->stallProbe ? b->stallProbe(b->stallProbeArg) : ncclSuccess;
  /* A relay read between the first look and the peers' (the monitor reads
   * a peer's relay before its close) says more than the closes. */
  if ((fault = relayedFault(b)) != ncclSuccess) return fault;
  char text[640];
  snprintf(text, sizeof text, "%s exited, aborted or lost %s connection to rank %d", names, gone > 1 ? "their" : "its",
           b->rank);
  WARN("%s", text);
  /* The ranks that learn later (a slower check, or one blocked elsewhere)
   * learn it from this relay: by then the ranks that aborted because of it
   * are gone too, and their own look would name them alongside it. */
  if (b->oob) oobBroadcastFault(b, ncclRemoteError, text);
  return ncclRemoteError;
}

void bootstrapClose(struct bootstrap *b, int graceful) {
  int framed = b->oob != NULL;
  oobStop(b, graceful); /* says goodbye in a frame, when it ran */
  for (int i = 0; graceful && !framed && b->peerFd && i < b->nranks; i++)
    if (b->peerFd[i] >= 0) send(b->peerFd[i], &goodbyeMagic, sizeof goodbyeMagic, MSG_NOSIGNAL | MSG_DONTWAIT);
  forkCloseRemove(&b->forkLink);
  free(b->peerFd);
  free(b->pidFd);
  free(b->departed);
  free(b->peers);
  b->peerFd = NULL;
  b->pidFd = NULL;
  b->departed = NULL;
  b->peers = NULL;
  b->listenFd = -1;
}
