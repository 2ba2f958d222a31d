#define _GNU_SOURCE
#include "engine/engine.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bootstrap/oob.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/log.h"
#include "core/wait.h"
#include "trace/timeline.h"
#include "proto/proto.h"
#include "transport/transport.h"

/* The slot st is about to take does not belong to the operation this rank
 * runs: say who called what, tell every rank (the ones still waiting fail
 * too, not hang), and use nothing of the slot. */
static int stepMismatch(struct task *t, struct step *st, const struct opDesc *d) {
  char mine[160], theirs[160], text[512];
  int peer = st->recv->peer;
  descStr(&t->desc, mine, sizeof mine);
  if (d) descStr(d, theirs, sizeof theirs);
  struct opDesc samePlan;
  if (d) { /* the same call but another plan: say so, it is a tuning disagreement */
    samePlan = *d;
    samePlan.algo = t->desc.algo;
    samePlan.proto = t->desc.proto;
    samePlan.nch = t->desc.nch;
  }
  if (d && (st->check & CHECK_RECV_DESC) && t->off == 0 && !descSamePlan(&t->desc, d) &&
      descMatch(&t->desc, &samePlan))
    snprintf(text, sizeof text, "rank %d chose %s/%s over %u channel(s) for %s but rank %d chose %s/%s over %u "
             "(their tuning differs, or symmetric windows hold some ranks' buffers and not the others')",
             t->rank, algoName(t->desc.algo), protoName(t->desc.proto), t->desc.nch, mine,
             peer, algoName(d->algo), protoName(d->proto), d->nch);
  else if (d && (st->check & CHECK_RECV_DESC) && t->off == 0) {
    /* The same call under another number: one rank made a call the other
     * did not (NCCL drops a count-0 collective at once; chorus numbers it,
     * so that one rank's 0 against another's count fails, not hangs) */
    struct opDesc renumbered = samePlan;
    renumbered.seq = t->desc.seq;
    int onlyNumber = descMatch(&t->desc, &renumbered);
    snprintf(text, sizeof text, "rank %d called %s but rank %d called %s%s", t->rank, mine, peer, theirs,
             onlyNumber ? ": the same call under another number, so one of them made a call on this communicator "
                          "that the other did not (a count-0 collective counts too)"
                        : "");
  }
  else if (d)
    snprintf(text, sizeof text, "rank %d called %s but rank %d started %s with less data for it "
             "(a smaller count or another operation)", t->rank, mine, peer, theirs);
  else
    snprintf(text, sizeof text, "rank %d called %s but rank %d still sends data of an earlier operation "
             "(it called that one with a larger count or another operation)", t->rank, mine, peer);
  WARN("Mismatched operation: %s (CHORUS_CHECK=0 turns this check off)", text);
  if (t->boot && t->boot->oob) { /* the ranks that learn it from this one read what it is, too */
    char relayed[sizeof text + 32];
    snprintf(relayed, sizeof relayed, "Mismatched operation: %s", text);
    oobBroadcastFault(t->boot, ncclInvalidUsage, relayed);
  }
  return -(int)ncclInvalidUsage;
}

/* Profiler: the slots of t's steps from st on that go to (dir 0) or come
 * from (dir 1) peer, back to back: a ProxyOp's nSteps. */
static int profSlotsAhead(const struct task *t, const struct step *st, int dir, int peer) {
  const struct step *end = st - t->cur + t->nsteps;
  int n = 0;
  for (; st < end; st++) {
    const struct conn *c = dir ? st->recv : st->send;
    if (!c) continue;
    if (c->peer != peer) break;
    n += (int)((st->bytes + c->slotBytes - 1) / c->slotBytes);
  }
  return n;
}

/* Profiler: the slot st is about to move opens a ProxyStep on each of its
 * connections (and a ProxyOp where the peer changes). */
static void profSlotBegin(struct task *t, const struct step *st) {
  for (int dir = 0; dir < 2; dir++) {
    const struct conn *c = dir ? st->recv : st->send;
    if (!c || t->prof->step[dir]) continue;
    int fresh = !t->prof->op[dir] || t->prof->opPeer[dir] != c->peer;
    profStepBegin(t->prof, dir, t->rank, t->prof->channel, c->peer, fresh ? profSlotsAhead(t, st, dir, c->peer) : 0,
                  (int)c->slotBytes);
  }
}

/* CHORUS_TRACE_LEVEL=steps: what a step does, for the timeline. */
static const char *traceKind(int type) {
  static const char *const kinds[stepTypeCount] = {
      [stepSend] = "send",          [stepRecv] = "recv",
      [stepCopy] = "copy",          [stepCopySend] = "copy-send",
      [stepRecvCopySend] = "recv-copy-send", [stepRecvReduceSend] = "recv-reduce-send",
      [stepRecvReduceCopy] = "recv-reduce",   [stepRecvReduceCopySend] = "recv-reduce-copy-send",
      [stepRecvAcc] = "recv-reduce",          [stepLocalAcc] = "reduce"};
  return type >= 0 && type < stepTypeCount ? kinds[type] : "step";
}

/* A traced step is blocked (from now, unless it was already). */
static void traceBlocked(struct task *t) {
  if (!t->prof->blockedNs) t->prof->blockedNs = clockNs();
}

/* A traced step moved a slot; when that was its last, it goes to the timeline. */
static void traceMoved(struct task *t, const struct step *st) {
  uint64_t now = clockNs();
  if (t->prof->blockedNs) t->prof->waitNs += now - t->prof->blockedNs;
  t->prof->blockedNs = 0;
  if (t->off != st->bytes) return;
  const struct conn *c = st->send ? st->send : st->recv;
  traceStep(t->prof->trace, t->prof->traceSeq, t->what, t->lane, traceKind(st->type), c ? c->peer : -1,
            st->bytes, t->prof->stepStartNs, now, t->prof->waitNs);
  t->prof->stepStartNs = 0;
  t->prof->waitNs = 0;
}

/* A plain copy into the operation's output: past the cache for a large
 * operation (its output is not read again soon), else memcpy. */
static void copyOut(const struct task *t, void *dst, const void *src, size_t nb) {
  if (dst == src) return;
  if (t->streamOut) copyStreaming(dst, src, nb);
  else memcpy(dst, src, nb);
}

/* A reduction whose result is the operation's output, past the cache when
 * the operation is large (copyOut's rule). */
static void reduceOut(const struct task *t, void *dst, const void *acc, const void *in, size_t n, int flags) {
  if (t->streamOut) reduceTwoStreaming(&t->red, dst, acc, in, n, flags);
  else reduceTwo(&t->red, dst, acc, in, n, flags);
}

/* Whether st's next slot, nb bytes written here (not by sendPostFrom), goes
 * past the cache: the protocol's choice. */
static int slotStreams(const struct step *st, size_t nb) {
  return st->sp->slotStream && st->sp->slotStream(st->send, nb);
}

/* Single copy: the smallest slot worth a reference (below it, copying is
 * cheaper than the receiver's system call). */
#define ENGINE_REF_MIN 4096

/* Posts nb bytes at data on st's send connection: as a reference when the
 * task's sends may be (t->sendRefs) and the receiver can read them there,
 * else as a copy. result: where the receiver's result of them lands on
 * this rank (a stepSend's dst), which it may write itself; or NULL. */
static void postData(struct task *t, struct step *st, const char *data, char *result, size_t nb) {
  if (t->sendRefs && nb >= ENGINE_REF_MIN && st->sp->sendPostRef &&
      st->sp->sendPostRef(st->send, data, result, nb, t->sendRefs == refsAny)) {
    t->refsPosted = 1;
    return;
  }
  st->sp->sendPostFrom(st->send, data, nb);
}

/* A step that cannot go on: says why, and tells the other ranks (those
 * that wait on this one learn it from the relay instead of a timeout).
 * Returns minus code, as stepAdvance does. */
static int stepFault(struct task *t, ncclResult_t code, const char *text) {
  WARN("%s", text);
  if (t->boot && t->boot->oob) oobBroadcastFault(t->boot, code, text);
  return -(int)code;
}

/* A reference slot where this rank's step expects something else: the
 * peer called another operation (or a larger count) without CHORUS_CHECK. */
static int stepRefMismatch(struct task *t, struct step *st, size_t ref, size_t nb) {
  char text[320];
  snprintf(text, sizeof text, "Mismatched operation: rank %d expected %zu bytes for %s (step %d) but rank %d sent "
           "a reference to %zu bytes of another operation's data", t->rank, nb, t->what, t->cur, st->recv->peer, ref);
  return stepFault(t, ncclInvalidUsage, text);
}

/* A slot that says the sender wrote its data into this rank's memory
 * where this step does not expect it: the peer runs another operation. */
static int stepWrittenMismatch(struct task *t, struct step *st, uint64_t written) {
  char text[320];
  snprintf(text, sizeof text, "Mismatched operation: rank %d wrote data into rank %d's memory at %#llx, where %s "
           "(step %d) expects none", st->recv->peer, t->rank, (unsigned long long)written, t->what, t->cur);
  return stepFault(t, ncclInvalidUsage, text);
}

/* Reads the reference slot's nb bytes into dst. A peer that is gone is
 * named by the caller (ncclRemoteError: drivenBroken); any other failure
 * (its memory, or the kernel's permission, went away after setup) fails
 * every rank. A wait inside (for a part the sender copies) lasts at most
 * timeoutNs, the schedule's (0: CHORUS_TIMEOUT's). */
static int stepReadRef(struct task *t, struct step *st, void *dst, size_t nb, uint64_t timeoutNs) {
  const void *mapped = st->rp->recvMapped(st->recv, nb);
  if (mapped) { /* in this process's memory: a plain copy */
    copyOut(t, dst, mapped, nb);
    return 0;
  }
  ncclResult_t r = st->rp->recvRead(st->recv, dst, nb, timeoutNs);
  if (r == ncclSuccess || r == ncclRemoteError) return -(int)r;
  /* The peer, alive, never wrote its part, or this communicator was
   * aborted (the wait and the transport said which): a stalled operation's
   * end (a timeout asks every rank what it does, api/watch.c), not a fault
   * to relay. */
  if (r == ncclTimeout || r == ncclInvalidUsage) return -(int)r;
  char text[320];
  /* The peer may have failed first and let its memory go (it relays why
   * before it does): that is the error to give, not this read's. Its frame
   * may still be on the way to the monitor: look for up to 100 ms, paced by
   * the one wait (bounded here, silently, as drivenBroken's settling). */
  if (t->boot) {
    struct waitState w;
    waitBegin(&w, NULL, NULL, NULL, "a fault the peer relayed");
    w.timeoutNs = 0;
    for (uint64_t t0 = clockNs(); clockNs() - t0 < 100000000ull && waitPause(&w) == ncclSuccess;) {
      ncclResult_t relayed = bootstrapLiveness(t->boot);
      if (relayed != ncclSuccess) return -(int)relayed;
    }
  }
  snprintf(text, sizeof text, "%s: rank %d could not read rank %d's buffer (single copy; CHORUS_SINGLE_COPY=0 "
           "turns it off)", t->what, t->rank, st->recv->peer);
  return stepFault(t, r, text);
}

/* In stepAdvance: a failed read of the peer's memory fails the step. */
#define CHECK_STEP(call)         \
  do {                           \
    int stepRes_ = (call);       \
    if (stepRes_) return stepRes_; \
  } while (0)

/* Moves one slot's worth of a step if the FIFOs allow it.
 * Returns 1 when it moved data, 0 when blocked, or minus an error:
 * ncclInvalidUsage when the slot belongs to another operation
 * (CHORUS_CHECK), the transport's when reading the peer's memory failed
 * (waiting at most timeoutNs, the schedule's, for any part of it). */
static int stepAdvance(struct task *t, struct step *st, uint64_t timeoutNs) {
  size_t off = t->off, esz = dtypeSize(t->red.dtype);
  const char *slotIn = NULL;
  char *slotOut = NULL;
  uint32_t limit = st->recv ? st->recv->slotBytes : st->send ? st->send->slotBytes : 0;
  size_t nb = st->bytes - off;
  if (limit && nb > limit) nb = limit;
  if (t->prof && t->prof->ctx) profSlotBegin(t, st);
  if (st->recv && !(slotIn = st->rp->recvSlot(st->recv))) {
    struct opDesc other; /* the peer posted this operation's first slot with another protocol */
    if (t->check && (st->check & CHECK_RECV_DESC) && off == 0 && st->rp->foreign(st->recv, &other))
      return stepMismatch(t, st, &other);
    if (t->prof && t->prof->ctx) profStepWait(t->prof, 1);
    return 0;
  }
  if (st->send && !(slotOut = st->sp->sendSlot(st->send))) {
    if (t->prof && t->prof->ctx) profStepWait(t->prof, 0);
    return 0;
  }
  if (t->check) {
    if (st->recv) {
      struct opDesc other;
      int has = st->rp->descGet(st->recv, &other), want = (st->check & CHECK_RECV_DESC) && off == 0;
      if ((has || want) && (!has || !want || !descMatch(&t->desc, &other)))
        return stepMismatch(t, st, has ? &other : NULL);
    }
    if ((st->check & CHECK_SEND_DESC) && off == 0) st->sp->descPut(st->send, &t->desc);
  }
  size_t ref = st->recv && st->rp->recvRef ? st->rp->recvRef(st->recv) : 0; /* the slot refers to the sender's data */
  if (ref && ref != nb) return stepRefMismatch(t, st, ref, nb);
  /* ...or says the sender wrote the data into this rank's output itself */
  uint64_t written = ref ? st->rp->recvWritten(st->recv) : 0;
  if (written && (st->type != stepRecv || st->flags || !st->dst || written != (uintptr_t)(st->dst + off)))
    return stepWrittenMismatch(t, st, written);
  /* The sender wants its result here back where it points (stepSend's dst):
   * write it there too, at once, instead of sending it. */
  uint64_t resultTheirs = 0;
  void *resultAt = ref && !written && st->type == stepRecvReduceCopySend && st->send->peer == st->recv->peer &&
                           st->sp->sendPostWritten
                       ? st->rp->recvResultAt(st->recv, nb, &resultTheirs)
                       : NULL;
  if (ref && !written && (st->flags || (st->type != stepRecv && st->type != stepRecvCopySend))) {
    /* A reduction from the sender's data where it lies: only from memory
     * this process maps (algoMappedSends), read like a slot. */
    if (!(slotIn = st->rp->recvMapped(st->recv, nb))) {
      char text[320];
      snprintf(text, sizeof text, "%s: rank %d cannot reduce from rank %d's data in place (step %d): it is not "
               "ncclMemAlloc memory this rank maps (a mismatched operation, or the mapping failed; "
               "CHORUS_SINGLE_COPY=0 turns reading in place off)", t->what, t->rank, st->recv->peer, t->cur);
      return stepFault(t, ncclInvalidUsage, text);
    }
    ref = 0;
  }
  size_t n = nb / esz;
  const char *src = st->src ? st->src + off : NULL;
  char *dst = st->dst ? st->dst + off : NULL;
  const struct redOp *op = &t->red;
  /* Whatever goes to the next rank is written and posted first, so the next
   * hop starts while this rank makes its local copy (but a reduction over
   * shared memory writes both from one pass, below). */
  int posted = 1;
  switch (st->type) {
    case stepSend:
      if (st->flags && !reduceCopyIsPlain(op, st->flags)) {
        reduceCopy(op, slotOut, src, n, st->flags);
        posted = 0;
      } else {
        postData(t, st, src, dst, nb);
      }
      break;
    case stepRecv:
      if (!dst) break; /* a token (the agreement's): its descriptor, checked above, is all it carries */
      if (written) break; /* the sender wrote it here */
      if (ref) CHECK_STEP(stepReadRef(t, st, dst, nb, timeoutNs));
      else if (st->flags) reduceCopy(op, dst, slotIn, n, st->flags);
      else copyOut(t, dst, slotIn, nb);
      break;
    case stepCopy:
      if (st->flags) reduceCopy(op, dst, src, n, st->flags);
      else copyOut(t, dst, src, nb);
      break;
    case stepCopySend:
      postData(t, st, src, NULL, nb);
      copyOut(t, dst, src, nb);
      break;
    case stepRecvCopySend:
      if (ref) { /* read where the sender has it, then pass on from here */
        CHECK_STEP(stepReadRef(t, st, dst, nb, timeoutNs));
        postData(t, st, dst, NULL, nb);
      } else if (st->sp->sendReadsSource(st->send)) { /* one copy: the transport reads dst */
        memcpy(dst, slotIn, nb);
        st->sp->sendPostFrom(st->send, dst, nb);
      } else {
        if (slotStreams(st, nb)) copyStreaming(slotOut, slotIn, nb);
        else memcpy(slotOut, slotIn, nb);
        st->sp->sendPost(st->send, nb);
        copyOut(t, dst, slotIn, nb);
      }
      break;
    case stepRecvReduceSend:
      if (slotStreams(st, nb)) reduceTwoStreaming(op, slotOut, slotIn, src, n, st->flags);
      else reduceTwo(op, slotOut, slotIn, src, n, st->flags);
      posted = 0;
      break;
    case stepRecvReduceCopy: reduceOut(t, dst, slotIn, src, n, st->flags); break;
    case stepRecvReduceCopySend:
      if (resultAt) { /* into the sender's output too: it copies nothing */
        reduceTwoBoth(op, dst, resultAt, slotIn, src, n, st->flags, t->streamOut);
        st->sp->sendPostWritten(st->send, resultTheirs, nb);
      } else if (t->sendRefs) { /* the result, written once, may be read where it lies */
        reduceOut(t, dst, slotIn, src, n, st->flags);
        postData(t, st, dst, NULL, nb);
      } else if (st->sp->sendReadsSource(st->send)) { /* one pass: the transport reads dst */
        reduceTwo(op, dst, slotIn, src, n, st->flags);
        st->sp->sendPostFrom(st->send, dst, nb);
      } else {
        /* Both outputs from one pass (a block at a time through L1), not
         * the slot and then a copy of it: 2 ranks, 2-4 MiB, 5-15% faster */
        reduceTwoAndSlot(op, dst, slotOut, slotIn, src, n, st->flags, t->streamOut, slotStreams(st, nb));
        st->sp->sendPost(st->send, nb);
      }
      break;
    case stepRecvAcc: reduceTwo(op, dst, dst, slotIn, n, st->flags); break;
    case stepLocalAcc: reduceTwo(op, dst, dst, src, n, st->flags); break;
  }
  if (st->recv) st->rp->recvDone(st->recv, nb);
  if (!posted) st->sp->sendPost(st->send, nb);
  t->off = off + nb;
  if (t->prof && t->prof->ctx) {
    if (st->send && st->send->tp->sent) profStepPosted(t->prof, nb, st->send, st->send->step);
    else if (st->send) profStepEnd(t->prof, 0, nb);
    if (st->recv) profStepEnd(t->prof, 1, nb);
  }
  return 1;
}

/* Profiler: the posted send steps whose slots have left (the transport
 * sent them) end, in every task of a profiled run. */
static void profPollSent(struct schedule *s) {
  for (int i = 0; i < s->ntasks; i++) {
    struct profTask *p = s->tasks[i].prof;
    const void *key;
    uint64_t slot;
    while (profFlyingHead(p, &key, &slot)) {
      const struct conn *c = key;
      if (c->tp->sent(c) < slot) break;
      profFlyingDone(p);
    }
  }
}

/* A send connection of t whose receiver still reads data t's reference
 * slots point to, or NULL. */
static const struct conn *taskRefsHeld(const struct schedule *s, const struct task *t) {
  if (!t->refsPosted) return NULL;
  for (int k = 0; k < t->nsteps; k++) {
    const struct step *st = &s->steps[t->firstStep + k];
    if (st->send && st->sp->refsHeld && st->sp->refsHeld(st->send)) return st->send;
  }
  return NULL;
}

/* A rank that waits while its receivers read what its reference slots point
 * to does part of their copies where they offer it (the transport's
 * assist): 1 when it copied something. */
static int assistReaders(const struct schedule *s) {
  int moved = 0;
  for (int i = 0; i < s->ntasks; i++) {
    const struct task *t = &s->tasks[i];
    for (int k = 0; t->refsPosted && k < t->nsteps; k++) {
      const struct step *st = &s->steps[t->firstStep + k];
      if (st->send && st->send->tp->assist && st->sp->refsHeld && st->sp->refsHeld(st->send))
        moved |= st->send->tp->assist(st->send);
    }
  }
  return moved;
}

/* Runs a task as far as the FIFOs allow. Returns 1 if anything moved, or
 * minus the error of a step that failed (stepAdvance). */
static int taskProgress(struct schedule *s, struct task *t) {
  int moved = 0;
  if (t->prof && t->prof->ctx && !t->prof->begun) profTaskBegin(t->prof);
  while (t->cur < t->nsteps) {
    struct step *st = &s->steps[t->firstStep + t->cur];
    if (t->prof && t->prof->trace && !t->prof->stepStartNs) t->prof->stepStartNs = clockNs();
    int r = stepAdvance(t, st, s->timeoutNs);
    if (r < 0) return r;
    if (!r) {
      if (t->prof && t->prof->trace) traceBlocked(t);
      break;
    }
    moved = 1;
    if (t->prof && t->prof->trace) traceMoved(t, st);
    if (t->off == st->bytes) {
      t->cur++;
      t->off = 0;
    }
  }
  if (t->cur == t->nsteps) {
    if (t->refsBeforeDone && taskRefsHeld(s, t)) return moved; /* a later operation may write what they point to */
    t->done = 1;
    if (t->prof && t->prof->ctx) profTaskEnd(t->prof, 0);
  }
  return moved;
}

/* The connection a stalled task's current step waits on (for data to
 * arrive, or for room in the peer's FIFO), or NULL. */
static struct conn *stalledOn(struct schedule *s, struct task *t) {
  if (t->done || t->cur >= t->nsteps) return NULL;
  if ((t->dep >= 0 && !s->tasks[t->dep].done) || (t->dep2 >= 0 && !s->tasks[t->dep2].done)) return NULL;
  struct step *st = &s->steps[t->firstStep + t->cur];
  if (st->recv && !st->rp->recvSlot(st->recv)) return st->recv;
  if (st->send && !st->sp->sendSlot(st->send)) return st->send;
  return NULL;
}

/* What a fault's text calls t's operation: its descriptor (AllReduce #2
 * (count=...)), or its name where it has none. */
static void taskOpName(const struct task *t, char *op, size_t len) {
  if (t->desc.seq) descStr(&t->desc, op, len);
  else snprintf(op, len, "%s", t->what);
}

/* A step that waits for a peer which has destroyed or finalized its
 * communicator would wait forever: fail now, naming it. The peer said so
 * after publishing its last slot, so a step that still waits once that is
 * known has nothing more coming; except over a transport that moves the
 * bytes itself (sockets), where what the peer published may still be on
 * its way when the goodbye, on another connection, has come: there the
 * wait ends only when a second look, a liveness check later, finds that
 * nothing more arrived. */
/* The error of t's wait for a peer that has left (why: oobFinalized or
 * oobDestroyed), told to the ranks that wait on this one. */
static ncclResult_t departedFault(const struct task *t, int peerRank, int why) {
  char peer[128], op[160], text[400];
  taskOpName(t, op, sizeof op);
  snprintf(text, sizeof text, "%s %s its communicator while rank %d waited for it in %s",
           bootstrapDescribePeer(t->boot, peerRank, peer, sizeof peer),
           why == oobFinalized ? "finalized" : "destroyed", t->rank, op);
  WARN("%s", text);
  if (t->boot->oob) oobBroadcastFault(t->boot, ncclRemoteError, text);
  return ncclRemoteError;
}

static ncclResult_t departedPeers(struct schedule *s) {
  for (int i = 0; i < s->ntasks; i++) {
    struct task *t = &s->tasks[i];
    if (!t->boot) continue;
    /* Its steps done, a task may wait for a receiver to read what it was
     * pointed to: one that left never will (the departure is looked at
     * first: a reader releases before it says goodbye). */
    const struct conn *reader = t->cur >= t->nsteps && t->refsPosted ? taskRefsHeld(s, t) : NULL;
    if (reader) {
      int why = bootstrapPeerDeparted(t->boot, reader->peer);
      if (why && taskRefsHeld(s, t) == reader) return departedFault(t, reader->peer, why);
      continue;
    }
    struct conn *c = stalledOn(s, t);
    int why = c ? bootstrapPeerDeparted(t->boot, c->peer) : 0;
    if (!why || stalledOn(s, t) != c) continue;
    if (c->tp->progress) {
      uint64_t before = c->tp->moved(c);
      /* An error: the peer closed the connection, after all it sent. */
      if (c->tp->progress(c) == ncclSuccess) {
        if (c->tp->moved(c) != before || stalledOn(s, t) != c) continue; /* still arriving */
        if (t->departMoved != before + 1) {
          t->departMoved = before + 1;
          continue;
        }
      }
    }
    return departedFault(t, c->peer, why); /* the ranks that wait on this one, not on the one that left, learn why */
  }
  return ncclSuccess;
}

/* Liveness of everything a schedule depends on: each task's abort flag and
 * peers. Tasks of one communicator share both, so check each once. */
static ncclResult_t scheduleLiveness(void *arg) {
  struct schedule *s = arg;
  struct bootstrap *last = NULL;
  for (int i = 0; i < s->ntasks; i++) {
    struct task *t = &s->tasks[i];
    /* A done task that posted references waits on its readers too. */
    if ((t->done && !t->refsPosted) || t->boot == last) continue;
    last = t->boot;
    if (t->abortFlag && __atomic_load_n(t->abortFlag, __ATOMIC_ACQUIRE)) {
      WARN("%s on rank %d: ended by ncclCommAbort or ncclCommRevoke of its communicator", t->what, t->rank);
      return ncclInvalidUsage;
    }
    if (t->boot) {
      ncclResult_t res = bootstrapLiveness(t->boot);
      if (res != ncclSuccess) {
        INFO(subsysColl, "%s on rank %d failed: a peer is gone", t->what, t->rank);
        return res;
      }
    }
  }
  return departedPeers(s);
}

/* The connections of one run whose transport moves bytes itself (sockets):
 * they need the running thread to drive them while it waits, and before it
 * returns (a posted slot not yet handed to the kernel would otherwise wait
 * for the next call). */
struct engineDriven {
  int n;
  int quiet; /* some connection's transport moves bytes without waking poll() */
  struct conn **c; /* the schedule's room for them: every one (a connection left out was never sent on) */
};

static void drivenAdd(struct engineDriven *ed, struct conn *c) {
  if (!c || !c->tp->progress) return;
  for (int i = 0; i < ed->n; i++)
    if (ed->c[i] == c) return;
  ed->c[ed->n++] = c;
  ed->quiet |= !c->tp->pollWakes(c);
}

/* -1 when out of memory for the list. */
static int drivenCollect(struct schedule *s, struct engineDriven *ed) {
  ed->n = 0;
  ed->quiet = 0;
  if (!(ed->c = scheduleConnRoom(s))) return -1;
  for (int i = 0; i < s->nsteps; i++) {
    drivenAdd(ed, s->steps[i].recv);
    drivenAdd(ed, s->steps[i].send);
  }
  return 0;
}

/* Progress on every driven connection (with sendersOnly, on those that
 * still hold slots to send: once every task is done, nothing of this run is
 * left to receive, and a receive that finds nothing is a system call);
 * *busy says whether a sender still holds slots its transport has not sent,
 * *moved whether any bytes moved (a slow link is no stall). */
static ncclResult_t drivenPump(struct engineDriven *ed, int sendersOnly, int *busy, int *moved,
                               struct conn **failed) {
  *busy = 0;
  for (int i = 0; i < ed->n; i++) {
    struct conn *c = ed->c[i];
    if (sendersOnly && !c->tp->pending(c)) continue;
    uint64_t before = c->tp->moved(c);
    ncclResult_t res = c->tp->progress(c);
    if (res != ncclSuccess) {
      *failed = c;
      return res;
    }
    if (c->tp->moved(c) != before) *moved = 1;
    if (c->tp->pending(c)) *busy = 1;
  }
  return ncclSuccess;
}

/* Tells the other ranks that connection c broke in this run (its
 * transport WARNed the details here), naming the operation waiting on it. */
static void relayBrokenConn(struct schedule *s, struct bootstrap *b, ncclResult_t res, const struct conn *c) {
  struct task *t = &s->tasks[0];
  for (int i = 0; i < s->ntasks; i++) {
    struct task *u = &s->tasks[i];
    if (u->done || u->cur >= u->nsteps) continue;
    const struct step *st = &s->steps[u->firstStep + u->cur];
    if (st->recv == c || st->send == c) t = u;
  }
  char peer[128], op[160], text[400];
  taskOpName(t, op, sizeof op);
  snprintf(text, sizeof text, "rank %d lost its connection with %s (%s) in %s", b->rank,
           bootstrapDescribePeer(b, c->peer, peer, sizeof peer), c->tp->name, op);
  oobBroadcastFault(b, res, text);
}

/* A broken connection usually means a dead peer, and the first peer to
 * notice a death may abort and close its own sockets before the dead
 * process's other connections have all closed (a killed process unmaps its
 * memory before its files are closed). So let the bootstrap's view settle,
 * up to 200 ms, until the set of gone ranks holds still for 20 ms: then the
 * last error names them all, the first one included. It waits through the
 * one wait. Where nobody is gone (a link broke, the peer lives), the
 * connection that broke (c, when known) is what the other ranks learn:
 * otherwise they would name this rank, which leaves because of it. */
static ncclResult_t drivenBroken(struct schedule *s, ncclResult_t res, struct conn *c) {
  struct bootstrap *b = s->ntasks ? s->tasks[0].boot : NULL;
  if (b) {
    struct waitState w;
    waitBegin(&w, NULL, NULL, NULL, "the view of gone peers to settle");
    w.timeoutNs = 0; /* bounded here, silently: the WARN that follows is the one that explains */
    uint64_t t0 = clockNs(), stable = t0;
    int last = bootstrapGoneCount(b);
    while (clockNs() - t0 < 200000000ull && (last == 0 || clockNs() - stable < 20000000ull)) {
      if (waitPause(&w) != ncclSuccess) break;
      int now = bootstrapGoneCount(b);
      if (now != last) {
        last = now;
        stable = clockNs();
      }
    }
  }
  ncclResult_t live = scheduleLiveness(s);
  if (live != ncclSuccess) return live;
  if (b && b->oob && c) relayBrokenConn(s, b, res, c);
  return res;
}

/* A stalled step that waits for data no transport can bring any more (the
 * peer closed its end) fails. */
static ncclResult_t drivenCheckStalled(struct schedule *s, struct conn **failed) {
  for (int i = 0; i < s->ntasks; i++) {
    struct task *t = &s->tasks[i];
    if (t->done || t->cur >= t->nsteps) continue;
    struct step *st = &s->steps[t->firstStep + t->cur];
    ncclResult_t res = st->recv && st->recv->tp->stalled ? st->recv->tp->stalled(st->recv) : ncclSuccess;
    if (res != ncclSuccess) {
      *failed = st->recv;
      return res;
    }
  }
  return ncclSuccess;
}

/* 1 when every task that can run waits on a connection whose poll()
 * descriptors wake when it can go on: then the wait sleeps in poll(). */
static int drivenOnlyWait(struct schedule *s) {
  for (int i = 0; i < s->ntasks; i++) {
    struct task *t = &s->tasks[i];
    if (t->done || t->cur >= t->nsteps || (t->dep >= 0 && !s->tasks[t->dep].done) ||
        (t->dep2 >= 0 && !s->tasks[t->dep2].done))
      continue;
    struct step *st = &s->steps[t->firstStep + t->cur];
    struct conn *c = st->recv ? st->recv : st->send;
    if (!c || !c->tp->pollFds || !c->tp->pollWakes(c)) return 0;
  }
  return 1;
}

/* The one wait's sleep, for runs with driven connections: sleep in poll(),
 * so that arriving bytes or room to send end the sleep at once. */
static void drivenBlock(void *arg, uint64_t ns) {
  struct engineDriven *ed = arg;
  struct pollfd fds[64];
  int nf = 0;
  for (int i = 0; i < ed->n && nf < 64; i++)
    if (ed->c[i]->tp->pollFds) nf += ed->c[i]->tp->pollFds(ed->c[i], fds + nf, 64 - nf);
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  ppoll(fds, (nfds_t)nf, &ts, NULL);
}

static ncclResult_t engineRunTasks(struct schedule *s);

/* A send connection of the run whose receiver still reads data this rank's
 * reference slots point to (the operation cannot end before), or NULL. */
static const struct conn *refsHeldBy(const struct schedule *s) {
  for (int i = 0; i < s->ntasks; i++) {
    const struct conn *c = taskRefsHeld(s, &s->tasks[i]);
    if (c) return c;
  }
  return NULL;
}

ncclResult_t engineRun(struct schedule *s) {
  ncclResult_t res = engineRunTasks(s);
  if (s->ntasks && s->tasks[0].prof) /* this build is profiled (scheduleProfiled); a failed run leaves events open */
    for (int i = 0; i < s->ntasks; i++)
      if (s->tasks[i].prof->ctx) profTaskEnd(s->tasks[i].prof, 1);
  return res;
}

static ncclResult_t engineRunTasks(struct schedule *s) {
  if (scheduleBindTemps(s) != ncclSuccess) {
    WARN("%s on rank %d: out of memory for staging buffers", s->ntasks ? s->tasks[0].what : "operation",
         s->ntasks ? s->tasks[0].rank : -1);
    return ncclSystemError;
  }
  int remaining = 0;
  for (int i = 0; i < s->ntasks; i++) {
    s->tasks[i].done = s->tasks[i].nsteps == 0;
    s->tasks[i].refsPosted = 0;
    s->tasks[i].departMoved = 0;
    remaining += !s->tasks[i].done;
  }
  /* What a wait's message calls it: the operation (Send, AllReduce, ...), or
   * "grouped operations" when the schedule holds several kinds. */
  const char *label = s->ntasks ? s->tasks[0].what : "operation";
  for (int i = 1; i < s->ntasks; i++)
    if (strcmp(s->tasks[i].what, label) != 0) label = "grouped operations";
  struct waitState w;
  waitBegin(&w, s->ntasks ? s->tasks[0].abortFlag : NULL, scheduleLiveness, s, label);
  if (s->timeoutNs) w.timeoutNs = s->timeoutNs;
  uint64_t diagnosis = waitDiagnosisNs(w.timeoutNs);
  if (w.timeoutNs > diagnosis) w.timeoutNs -= diagnosis; /* then the diagnosis (api/watch.c) */
  struct engineDriven ed;
  if (drivenCollect(s, &ed) != 0) {
    WARN("%s on rank %d: out of memory for its list of connections", label, s->ntasks ? s->tasks[0].rank : -1);
    return ncclSystemError;
  }
  if (ed.n) waitSetBlock(&w, drivenBlock, &ed);
  while (remaining > 0) {
    int moved = 0;
    for (int i = 0; i < s->ntasks; i++) {
      struct task *t = &s->tasks[i];
      if (t->done || (t->dep >= 0 && !s->tasks[t->dep].done) || (t->dep2 >= 0 && !s->tasks[t->dep2].done)) continue;
      int r = taskProgress(s, t);
      if (r == -(int)ncclRemoteError) return drivenBroken(s, ncclRemoteError, NULL); /* name who is gone */
      if (r < 0) return (ncclResult_t)-r;
      moved |= r;
      if (t->done) remaining--;
    }
    int busy;
    if (!moved && ed.n) {
      struct conn *failed = NULL;
      ncclResult_t res = drivenPump(&ed, 0, &busy, &moved, &failed);
      if (res == ncclSuccess && !moved) res = drivenCheckStalled(s, &failed);
      if (res != ncclSuccess) return drivenBroken(s, res, failed);
      w.blockNow = !moved && drivenOnlyWait(s);
    }
    if (ed.n && s->tasks[0].prof) profPollSent(s);
    if (!moved) moved = assistReaders(s);
    if (moved) {
      waitProgress(&w);
    } else {
      ncclResult_t res = waitPause(&w);
      if (res != ncclSuccess) {
        if (res == ncclTimeout)
          for (int i = 0; i < s->ntasks; i++)
            if (!s->tasks[i].done)
              WARN("%s on rank %d stalled at step %d of %d", s->tasks[i].what, s->tasks[i].rank,
                   s->tasks[i].cur, s->tasks[i].nsteps);
        return res;
      }
    }
  }
  for (;;) {
    int busy = 0, moved = 0;
    struct conn *failed = NULL;
    ncclResult_t res = ed.n ? drivenPump(&ed, 1, &busy, &moved, &failed) : ncclSuccess;
    if (res != ncclSuccess) return drivenBroken(s, res, failed);
    if (ed.n && s->tasks[0].prof) profPollSent(s);
    const struct conn *held = refsHeldBy(s);
    if (!busy && !held) return ncclSuccess;
    w.blockNow = !ed.quiet && !held; /* a reader's release wakes no descriptor */
    if (!moved && held) moved = assistReaders(s);
    if (moved) {
      waitProgress(&w);
    } else if ((res = waitPause(&w)) != ncclSuccess) {
      if (res == ncclTimeout && held)
        WARN("%s on rank %d: rank %d has not read the data it was pointed to", s->tasks[0].what, s->tasks[0].rank,
             held->peer);
      return res;
    }
  }
}
