/* One-sided operations (NCCL 2.29): ncclPutSignal writes into a peer's
 * window and then raises a signal there, ncclSignal raises one alone, and
 * ncclWaitSignal waits for signals from given peers. The target takes no
 * part: the writes travel as frames on the bootstrap mesh, and the
 * target's monitor thread (bootstrap/oob.h) copies them into the window
 * and counts the signal whatever the target's own thread is doing; frames
 * from one peer arrive in order, so a signal comes after its data and
 * after every earlier write from that peer, as NCCL promises.
 *
 * On the host a call runs when it is made: after what its stream holds
 * has finished (its order on the stream), and inside a group too (a write
 * needs nothing from its target, so it cannot wait on another call of the
 * group). NCCL's sigIdx, ctx and flags must be 0 for now; so here. */
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/comm.h"
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
    int res = windowWrite(comm, h->window, h->offset, data, bytes);
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

/* The communicator takes operations; then the call's place on stream: it
 * runs after what the stream holds. */
static ncclResult_t rmaBegin(struct ncclComm *comm, const char *call, cudaStream_t stream) {
  CHECK(commReady(comm, call));
  stream = streamResolve(stream);
  if (stream && !streamValid(stream)) {
    WARN("%s : stream %p is not a stream (chorusStreamCreate)", call, (void *)stream);
    return ncclInvalidArgument;
  }
  if (!stream) {
    streamLegacyWait(comm->cudaDev);
    return ncclSuccess;
  }
  uint64_t pos = streamMark(stream);
  ncclResult_t res = streamWaitFor(stream, pos, call);
  streamRelease(stream);
  return res;
}

/* Sends one operation: bytes at data (none for a signal alone) into peer's
 * window at offset, the signal on the last frame. */
static ncclResult_t rmaSend(struct ncclComm *comm, const char *call, int peer, uint32_t window, uint64_t offset,
                            const void *data, size_t bytes) {
  struct rmaHeader h = {window, 0, offset};
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

NCCL_API(ncclResult_t, ncclPutSignal, const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream) {
  static const char call[] = "ncclPutSignal";
  CHECK(commCheck(comm, call));
  if ((int)datatype < 0 || datatype >= ncclNumTypes) {
    WARN("%s : invalid type %d", call, (int)datatype);
    return ncclInvalidArgument;
  }
  size_t bytes = count * dtypeSize(datatype);
  if (localbuff == NULL && count > 0) {
    WARN("%s : localbuff argument is NULL with count %zu", call, count);
    return ncclInvalidArgument;
  }
  uint32_t window;
  size_t size;
  CHECK(windowNumber(comm, peerWin, call, &window, &size));
  /* Windows are symmetric (NCCL_WIN_COLL_SYMMETRIC): the peer's is as large as this rank's. */
  if (peerWinOffset > size || bytes > size - peerWinOffset) {
    WARN("%s : %zu bytes at offset %zu go past the end of the window (%zu bytes)", call, bytes, peerWinOffset, size);
    return ncclInvalidArgument;
  }
  CHECK(rmaCheckTarget(comm, call, peer, sigIdx, ctx, flags));
  CHECK(rmaBegin(comm, call, stream));
  return rmaSend(comm, call, peer, window, peerWinOffset, localbuff, bytes);
}

NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream) {
  static const char call[] = "ncclSignal";
  CHECK(commCheck(comm, call));
  CHECK(rmaCheckTarget(comm, call, peer, sigIdx, ctx, flags));
  CHECK(rmaBegin(comm, call, stream));
  return rmaSend(comm, call, peer, 0, 0, NULL, 0);
}

/* The peers whose signals ncclWaitSignal still waits for, for its timeout. */
static void owedPeers(const struct ncclComm *comm, const uint64_t *want, char *out, size_t len) {
  size_t o = 0;
  out[0] = 0;
  for (int p = 0; p < comm->nranks && o < len; p++) {
    uint64_t got = __atomic_load_n(&comm->sigGot[p], __ATOMIC_ACQUIRE) - comm->sigTaken[p];
    if (got < want[p])
      o += (size_t)snprintf(out + o, len - o, "%s%d (%llu of %llu)", o ? ", " : "", p, (unsigned long long)got,
                            (unsigned long long)want[p]);
  }
}

NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
         cudaStream_t stream) {
  static const char call[] = "ncclWaitSignal";
  CHECK(commCheck(comm, call));
  if (nDesc < 0 || (nDesc > 0 && signalDescs == NULL)) {
    WARN("%s : nDesc %d with signalDescs %p", call, nDesc, (void *)signalDescs);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < nDesc; i++) {
    const ncclWaitSignalDesc_t *d = &signalDescs[i];
    CHECK(rmaCheckTarget(comm, call, d->peer, d->sigIdx, d->ctx, 0));
    if (d->opCnt < 0) {
      WARN("%s : signalDescs[%d].opCnt is %d", call, i, d->opCnt);
      return ncclInvalidArgument;
    }
  }
  CHECK(rmaBegin(comm, call, stream));
  uint64_t *want = calloc((size_t)comm->nranks, sizeof *want);
  if (!want) return ncclSystemError;
  for (int i = 0; i < nDesc; i++) want[signalDescs[i].peer] += (uint64_t)signalDescs[i].opCnt;
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
    if (__atomic_load_n(&comm->sigGot[p], __ATOMIC_ACQUIRE) - comm->sigTaken[p] >= want[p]) {
      p++;
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
      owedPeers(comm, want, owed, sizeof owed);
      pthread_mutex_lock(&comm->winLock);
      const struct rmaEarly *e = comm->rmaEarly[p];
      if (e)
        WARN("%s : rank %d timed out waiting for signals from rank %s; rank %d's write to window #%u waits for this "
             "rank to register that window", call, comm->rank, owed, p, e->h.window);
      else
        WARN("%s : rank %d timed out waiting for signals from rank %s", call, comm->rank, owed);
      pthread_mutex_unlock(&comm->winLock);
    }
  }
  if (res == ncclSuccess)
    for (int p = 0; p < comm->nranks; p++) comm->sigTaken[p] += want[p];
  free(want);
  return res;
}
