/* One-sided operations (NCCL 2.29): ncclPutSignal writes into a peer's
 * window and then raises a signal there, ncclSignal raises one alone, and
 * ncclWaitSignal waits for signals from given peers. The target takes no
 * part: the writes travel as frames on the bootstrap mesh, and the
 * target's monitor thread (bootstrap/oob.h) copies them into the window
 * and counts the signal whatever the target's own thread is doing; frames
 * from one peer arrive in order, so a signal comes after its data and
 * after every earlier write from that peer, as NCCL promises.
 *
 * A call is queued on its stream as a collective is, and runs in the
 * stream's order on its worker (on the NULL stream, when it is made); in a
 * group, at the group's end (api/group.h: writes first, waits last). NCCL's
 * sigIdx, ctx and flags must be 0 for now; so here. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/comm.h"
#include "api/group.h"
#include "api/launch.h"
#include "api/rma.h"
#include "bootstrap/oob.h"
#include "core/err.h"
#include "core/log.h"
#include "core/wait.h"
#include "engine/stream.h"
#include "reduce/reduce.h"

/* What leads each frame's payload. */
struct rmaHeader {
  uint32_t window; /* its number (window.c) */
  uint32_t signal; /* 1 on an operation's last frame */
  uint64_t offset; /* in the window */
  uint64_t end;    /* where the whole operation ends in the window: one that goes past the target's window is
                    * refused whole, each of its frames alike */
};
#define RMA_CHUNK (OOB_MAX_PAYLOAD - sizeof(struct rmaHeader))

/* A write that came before its window was registered here, kept until it
 * is (with the peer's later writes behind it, so that signals still come
 * in order). */
struct rmaEarly {
  struct rmaEarly *next;
  struct rmaHeader h;
  size_t bytes;
  char data[];
};

/* With comm->winLock held. */
static void rmaFault(struct ncclComm *comm, const char *fmt, int peer, uint32_t window, uint64_t off, size_t bytes) {
  if (comm->rmaFaulted) return;
  snprintf(comm->rmaFault, sizeof comm->rmaFault, fmt, peer, window, (unsigned long long)off, bytes);
  __atomic_store_n(&comm->rmaFaulted, 1, __ATOMIC_RELEASE);
}

/* Applies one write from rank peer, with comm->winLock held. */
static void rmaApply(struct ncclComm *comm, int peer, const struct rmaHeader *h, const void *data, size_t bytes) {
  if (bytes) {
    int res = windowWrite(comm, h->window, h->offset, h->end, data, bytes);
    if (res == -1)
      rmaFault(comm, "rank %d wrote to window #%u, which this rank has deregistered [offset %llu, %zu bytes]", peer,
               h->window, h->offset, bytes);
    else if (res == -2)
      rmaFault(comm, "rank %d wrote past the end of window #%u (offset %llu, %zu bytes)", peer, h->window,
               h->offset, bytes);
  }
  /* The data is in place before the signal counts. */
  if (h->signal) __atomic_fetch_add(&comm->sigGot[peer], 1, __ATOMIC_RELEASE);
}

/* A write from rank peer: applied, or kept while its window (or an earlier
 * write of the same peer) waits for this rank to register. */
static void rmaReceive(struct ncclComm *comm, int peer, const struct rmaHeader *h, const void *data, size_t bytes) {
  pthread_mutex_lock(&comm->winLock);
  struct rmaEarly **q = &comm->rmaEarly[peer];
  if (*q || (bytes && h->window >= comm->winNext)) {
    struct rmaEarly *e = malloc(sizeof *e + bytes);
    if (!e) {
      rmaFault(comm, "rank %d wrote to window #%u before this rank registered it, and there was no memory to keep "
               "the write [offset %llu, %zu bytes]", peer, h->window, h->offset, bytes);
    } else {
      e->next = NULL;
      e->h = *h;
      e->bytes = bytes;
      if (bytes) memcpy(e->data, data, bytes);
      while (*q) q = &(*q)->next;
      *q = e;
    }
  } else {
    rmaApply(comm, peer, h, data, bytes);
  }
  pthread_mutex_unlock(&comm->winLock);
}

void rmaDrainLocked(struct ncclComm *comm) {
  for (int p = 0; p < comm->nranks; p++) {
    struct rmaEarly *e;
    while ((e = comm->rmaEarly[p]) && (e->bytes == 0 || e->h.window < comm->winNext)) {
      comm->rmaEarly[p] = e->next;
      rmaApply(comm, p, &e->h, e->data, e->bytes);
      free(e);
    }
  }
}

void rmaFreeEarly(struct ncclComm *comm) {
  for (int p = 0; comm->rmaEarly && p < comm->nranks; p++)
    while (comm->rmaEarly[p]) {
      struct rmaEarly *e = comm->rmaEarly[p];
      comm->rmaEarly[p] = e->next;
      free(e);
    }
}

void rmaDeliver(void *arg, int peer, const void *payload, size_t size) {
  struct ncclComm *comm = arg;
  struct rmaHeader h;
  if (size < sizeof h) {
    pthread_mutex_lock(&comm->winLock);
    rmaFault(comm, "rank %d sent a one-sided write too short to read (window #%u, offset %llu, %zu bytes)", peer, 0,
             0, size);
    pthread_mutex_unlock(&comm->winLock);
    return;
  }
  memcpy(&h, payload, sizeof h);
  rmaReceive(comm, peer, &h, (const char *)payload + sizeof h, size - sizeof h);
}

/* What each one-sided call (and each descriptor of a wait) names: a peer,
 * and sigIdx, ctx and flags, which NCCL 2.30 takes only as 0. */
static ncclResult_t rmaCheckTarget(const struct ncclComm *comm, const char *call, int peer, int sigIdx, int ctx,
                                   unsigned int flags) {
  logSetRank(comm->rank);
  if (peer < 0 || peer >= comm->nranks) {
    WARN("%s : invalid peer %d (nranks %d)", call, peer, comm->nranks);
    return ncclInvalidArgument;
  }
  if (sigIdx != 0 || ctx != 0 || flags != 0) {
    WARN("%s : sigIdx %d, ctx %d and flags 0x%x must be 0 (NCCL 2.30 takes no others)", call, sigIdx, ctx, flags);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Sends one operation: bytes at data (none for a signal alone) into peer's
 * window at offset, the signal on the last frame. */
static ncclResult_t rmaSend(struct ncclComm *comm, const char *call, int peer, uint32_t window, uint64_t offset,
                            const void *data, size_t bytes) {
  struct rmaHeader h = {window, 0, offset, offset + bytes};
  if (peer == comm->rank) { /* no frame to oneself: the monitor would never see it */
    h.signal = 1;
    rmaReceive(comm, peer, &h, data, bytes);
    return ncclSuccess;
  }
  char *frame = malloc(sizeof h + (bytes < RMA_CHUNK ? bytes : RMA_CHUNK));
  if (!frame) return ncclSystemError;
  struct waitState w;
  waitBegin(&w, &comm->abortFlag, NULL, NULL, call);
  ncclResult_t res = ncclSuccess;
  size_t done = 0;
  do {
    size_t n = bytes - done < RMA_CHUNK ? bytes - done : RMA_CHUNK;
    h.offset = offset + done;
    h.signal = done + n == bytes;
    memcpy(frame, &h, sizeof h);
    if (n) memcpy(frame + sizeof h, (const char *)data + done, n);
    res = oobSendRma(&comm->boot, peer, frame, sizeof h + n, &w);
    done += n;
  } while (res == ncclSuccess && done < bytes);
  free(frame);
  if (res != ncclSuccess) WARN("%s : rank %d could not write to rank %d", call, comm->rank, peer);
  return res;
}

/* The peers whose signals ncclWaitSignal still waits for, for its timeout
 * (with comm->winLock held: waits on other streams take signals). */
static void owedPeers(const struct ncclComm *comm, const uint64_t *want, char *out, size_t len) {
  size_t o = 0;
  out[0] = 0;
  for (int p = 0; p < comm->nranks && o < len; p++) {
    uint64_t got = __atomic_load_n(&comm->sigGot[p], __ATOMIC_ACQUIRE) - comm->sigTaken[p];
    if (want[p])
      o += (size_t)snprintf(out + o, len - o, "%s%d (%llu of %llu)", o ? ", " : "", p, (unsigned long long)got,
                            (unsigned long long)want[p]);
  }
}

/* Takes want signals from peer if that many have arrived and are not yet
 * taken: under winLock, as waits on several streams may run at once. */
static int rmaTakeSignals(struct ncclComm *comm, int peer, uint64_t want) {
  pthread_mutex_lock(&comm->winLock);
  int ok = __atomic_load_n(&comm->sigGot[peer], __ATOMIC_ACQUIRE) - comm->sigTaken[peer] >= want;
  if (ok) comm->sigTaken[peer] += want;
  pthread_mutex_unlock(&comm->winLock);
  return ok;
}

/* Waits until want[p] signals from each rank p have come, and takes them.
 * A peer's signals are taken as soon as all it owes have come, so a wait
 * that fails has taken some. */
static ncclResult_t rmaWaitSignals(struct ncclComm *comm, const char *call, uint64_t *want) {
  ncclResult_t res = ncclSuccess;
  struct waitState w;
  waitBegin(&w, &comm->abortFlag, NULL, NULL, call);
  int64_t ms = __atomic_load_n(&comm->timeoutMs, __ATOMIC_RELAXED);
  if (ms > 0) w.timeoutNs = (uint64_t)ms * 1000000ull;
  for (int p = 0; res == ncclSuccess && p < comm->nranks;) {
    if (__atomic_load_n(&comm->rmaFaulted, __ATOMIC_ACQUIRE)) {
      WARN("%s : rank %d: %s", call, comm->rank, comm->rmaFault);
      res = ncclInvalidUsage;
      break;
    }
    if (want[p] == 0 || rmaTakeSignals(comm, p, want[p])) {
      want[p++] = 0;
      waitProgress(&w);
      continue;
    }
    if (oobPeerGone(&comm->boot, p) || oobPeerDeparted(&comm->boot, p)) {
      WARN("%s : rank %d waits for %llu signal(s) from rank %d (host %s, pid %d), which is gone", call, comm->rank,
           (unsigned long long)want[p], p, comm->boot.peers[p].hostname, comm->boot.peers[p].pid);
      res = ncclRemoteError;
      break;
    }
    res = waitPause(&w);
    if (res == ncclTimeout) {
      char owed[200];
      pthread_mutex_lock(&comm->winLock);
      owedPeers(comm, want, owed, sizeof owed);
      const struct rmaEarly *e = comm->rmaEarly[p];
      if (e)
        WARN("%s : rank %d timed out waiting for signals from rank %s; rank %d's write to window #%u waits for this "
             "rank to register that window", call, comm->rank, owed, p, e->h.window);
      else
        WARN("%s : rank %d timed out waiting for signals from rank %s", call, comm->rank, owed);
      pthread_mutex_unlock(&comm->winLock);
    }
  }
  /* A refused write counts its signal after its fault: one that came with
   * the last signal taken fails this wait too. */
  if (res == ncclSuccess && __atomic_load_n(&comm->rmaFaulted, __ATOMIC_ACQUIRE)) {
    WARN("%s : rank %d: %s", call, comm->rank, comm->rmaFault);
    res = ncclInvalidUsage;
  }
  return res;
}

/* One checked call, as it goes to its stream: a write (put or signal) or
 * a wait for signals (want set). */
struct rmaCall {
  struct streamWork work;
  struct ncclComm *comm;
  cudaStream_t stream;
  const char *call;
  int peer;
  uint32_t window;
  uint64_t offset;
  const void *data; /* read when the call runs, as a kernel would */
  size_t bytes;
  uint64_t *want; /* a wait: the signals owed by each rank */
};

static ncclResult_t rmaRun(struct rmaCall *c) {
  if (c->want) return rmaWaitSignals(c->comm, c->call, c->want);
  return rmaSend(c->comm, c->call, c->peer, c->window, c->offset, c->data, c->bytes);
}

static void rmaFree(void *arg) {
  struct rmaCall *c = arg;
  free(c->want);
  free(c);
}

static ncclResult_t rmaWorkRun(struct streamWork *w, ncclResult_t status) {
  logStartThreadErrors();
  return status != ncclSuccess ? status : rmaRun((struct rmaCall *)w);
}

/* A failure on the stream is the communicator's too, as a collective's is
 * (ncclCommGetAsyncError). */
static void rmaWorkDone(struct streamWork *w, ncclResult_t res) {
  struct rmaCall *c = (struct rmaCall *)w;
  ncclResult_t none = ncclSuccess;
  if (res != ncclSuccess &&
      __atomic_compare_exchange_n(&c->comm->asyncError, &none, res, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    commSetFailText(c->comm, NULL);
  __atomic_add_fetch(&c->comm->busy, -1, __ATOMIC_ACQ_REL);
  rmaFree(c);
}

/* Hands a call to its stream, which runs it after what it holds; on the
 * NULL stream it runs now. */
static ncclResult_t rmaIssue(void *arg) {
  struct rmaCall *c = arg;
  struct ncclComm *comm = c->comm;
  cudaStream_t stream = c->stream;
  ncclResult_t res = commOrderWait(comm, stream, c->call); /* after the communicator's earlier launches */
  if (res != ncclSuccess || !stream) {
    if (res == ncclSuccess) {
      streamLegacyWait(comm->cudaDev);
      res = rmaRun(c);
    }
    rmaFree(c);
    return res;
  }
  c->work = (struct streamWork){.run = rmaWorkRun, .done = rmaWorkDone};
  __atomic_add_fetch(&comm->busy, 1, __ATOMIC_ACQ_REL);
  commOrderNote(comm, stream, streamEnqueue(stream, &c->work)); /* c may be gone */
  return ncclSuccess;
}

/* The communicator takes operations and stream is a stream; then c, filled
 * in by the caller, is issued (in a group, at its end). */
static ncclResult_t rmaSubmit(struct ncclComm *comm, const char *call, cudaStream_t stream, struct rmaCall *c) {
  ncclResult_t res = commReady(comm, call);
  stream = streamResolve(stream);
  if (res == ncclSuccess && stream) res = streamCheck(stream, call);
  if (res != ncclSuccess) {
    rmaFree(c);
    return res;
  }
  c->comm = comm;
  c->stream = stream;
  c->call = call;
  struct groupLater later = {comm, c->want == NULL, rmaIssue, rmaFree, c};
  return groupDefer(&later);
}

static ncclResult_t rmaWrite(struct ncclComm *comm, const char *call, cudaStream_t stream, int peer,
                             uint32_t window, uint64_t offset, const void *data, size_t bytes) {
  struct rmaCall *c = calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  c->peer = peer;
  c->window = window;
  c->offset = offset;
  c->data = data;
  c->bytes = bytes;
  return rmaSubmit(comm, call, stream, c);
}

/* Each call's checks, which fail it (and its group) before anything is issued. */
static ncclResult_t putSignal(const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
                              ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                              ncclComm_t comm, cudaStream_t stream) {
  static const char call[] = "ncclPutSignal";
  CHECK(commCheck(comm, call));
  if ((int)datatype < 0 || datatype >= ncclNumTypes) {
    WARN("%s : invalid type %d", call, (int)datatype);
    return ncclInvalidArgument;
  }
  size_t bytes;
  if (__builtin_mul_overflow(count, dtypeSize(datatype), &bytes)) {
    WARN("%s : count %zu is too large", call, count);
    return ncclInvalidArgument;
  }
  if (localbuff == NULL) { /* even with count 0, as NCCL's */
    WARN("%s : localbuff argument is NULL", call);
    return ncclInvalidArgument;
  }
  uint32_t window;
  size_t size;
  CHECK(windowNumber(comm, peerWin, call, &window, &size));
  /* The peer's window may be larger than this rank's (NCCL 2.30 sizes each
   * rank's window apart): the target bounds the write by its own (rmaApply)
   * and its wait fails naming this rank. Here only what no window holds, and
   * a write to this rank's own window, which is the target's. */
  if (bytes > SIZE_MAX - peerWinOffset ||
      (peer == comm->rank && (peerWinOffset > size || bytes > size - peerWinOffset))) {
    WARN("%s : %zu bytes at offset %zu go past the end of %s window", call, bytes, peerWinOffset,
         peer == comm->rank ? "the" : "any");
    return ncclInvalidArgument;
  }
  CHECK(rmaCheckTarget(comm, call, peer, sigIdx, ctx, flags));
  return rmaWrite(comm, call, stream, peer, window, peerWinOffset, localbuff, bytes);
}

NCCL_API(ncclResult_t, ncclPutSignal, const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream) {
  return groupNoteError(
      putSignal(localbuff, count, datatype, peer, peerWin, peerWinOffset, sigIdx, ctx, flags, comm, stream));
}

static ncclResult_t signalOnly(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                               cudaStream_t stream) {
  static const char call[] = "ncclSignal";
  CHECK(commCheck(comm, call));
  CHECK(rmaCheckTarget(comm, call, peer, sigIdx, ctx, flags));
  return rmaWrite(comm, call, stream, peer, 0, 0, NULL, 0);
}

NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream) {
  return groupNoteError(signalOnly(peer, sigIdx, ctx, flags, comm, stream));
}

static ncclResult_t waitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm, cudaStream_t stream) {
  static const char call[] = "ncclWaitSignal";
  CHECK(commCheck(comm, call));
  if (nDesc <= 0 || signalDescs == NULL) { /* nothing to wait for is a misuse, as in NCCL */
    WARN("%s : nDesc %d with signalDescs %p (at least one descriptor)", call, nDesc, (void *)signalDescs);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < nDesc; i++) {
    const ncclWaitSignalDesc_t *d = &signalDescs[i];
    CHECK(rmaCheckTarget(comm, call, d->peer, d->sigIdx, d->ctx, 0));
    if (d->opCnt <= 0) {
      WARN("%s : signalDescs[%d].opCnt is %d", call, i, d->opCnt);
      return ncclInvalidArgument;
    }
  }
  struct rmaCall *c = calloc(1, sizeof *c);
  uint64_t *want = c ? calloc((size_t)comm->nranks, sizeof *want) : NULL;
  if (!want) {
    free(c);
    return ncclSystemError;
  }
  for (int i = 0; i < nDesc; i++) want[signalDescs[i].peer] += (uint64_t)signalDescs[i].opCnt;
  c->want = want;
  return rmaSubmit(comm, call, stream, c);
}

NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
         cudaStream_t stream) {
  return groupNoteError(waitSignal(nDesc, signalDescs, comm, stream));
}
