#include "api/watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/oob.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"
#include "core/spin.h"
#include "core/wait.h"

/* One rank's answer to a status query. */
struct watchReply {
  uint32_t doneSeq;
  int32_t inCall;
  struct opDesc current;
  struct opDesc lastNoop;
};

size_t watchStatusBytes(void) { return sizeof(struct watchReply); }

void watchStatus(void *arg, void *out, size_t size) {
  struct ncclComm *comm = arg;
  struct watchReply r;
  memset(&r, 0, sizeof r);
  spinLock(&comm->statusLock);
  r.doneSeq = comm->doneSeq;
  r.inCall = comm->inCall || comm->timedOut;
  r.current = comm->current;
  r.lastNoop = comm->lastNoop;
  spinUnlock(&comm->statusLock);
  memcpy(out, &r, size < sizeof r ? size : sizeof r);
}

void watchNumber(struct groupItem *item) {
  struct ncclComm *comm = item->comm;
  struct opDesc *c = &item->desc.check;
  if (c->coll == collSend || c->coll == collRecv)
    c->seq = ++comm->p2pSeq[(c->coll == collRecv ? comm->nranks : 0) + c->root];
  else
    c->seq = ++comm->collSeq;
}

void watchNoop(const struct groupItem *item) {
  struct ncclComm *comm = item->comm;
  const struct opDesc *c = &item->desc.check;
  if (c->coll == collSend || c->coll == collRecv || c->seq <= comm->doneSeq) return;
  spinLock(&comm->statusLock);
  comm->doneSeq = c->seq;
  comm->lastNoop = *c;
  spinUnlock(&comm->statusLock);
}

/* 1 when items[i] is the first of its communicator among those on stream. */
static int firstOfComm(const struct groupItem *items, int i, cudaStream_t stream) {
  return items[i].stream == stream && groupCommLeader(items, i) == i;
}

void watchBegin(const struct groupItem *items, int n, cudaStream_t stream) {
  for (int i = 0; i < n; i++) {
    if (!firstOfComm(items, i, stream)) continue;
    struct ncclComm *comm = items[i].comm;
    spinLock(&comm->statusLock);
    if (comm->inCall++ == 0) comm->current = items[i].desc.check;
    comm->timedOut = 0;
    spinUnlock(&comm->statusLock);
  }
}

void watchRunning(const struct groupItem *items, int n, cudaStream_t stream) {
  for (int i = 0; i < n; i++) {
    if (!firstOfComm(items, i, stream)) continue;
    struct ncclComm *comm = items[i].comm;
    spinLock(&comm->statusLock);
    comm->current = items[i].desc.check;
    spinUnlock(&comm->statusLock);
  }
}

/* The ranks in state `state`, as "rank 3 (host b, pid 4711)" or
 * "ranks 3 (host b, pid 4711), 5 (...) and 2 more", appended to out. */
static void appendRanks(struct ncclComm *comm, char **states, int from, const char *state, char *out, size_t len) {
  int count = 0;
  for (int j = from; j < comm->nranks; j++) count += j != comm->rank && strcmp(states[j], state) == 0;
  size_t n = strlen(out);
  snprintf(out + n, len - n, "%s", count > 1 ? "ranks " : "rank ");
  int shown = 0;
  for (int j = from; j < comm->nranks; j++) {
    if (j == comm->rank || strcmp(states[j], state) != 0) continue;
    n = strlen(out);
    if (shown == 4) {
      snprintf(out + n, len - n, " and %d more", count - shown);
      break;
    }
    snprintf(out + n, len - n, "%s%d (host %s, pid %d)", shown ? ", " : "", j, comm->boot.peers[j].hostname,
             comm->boot.peers[j].pid);
    shown++;
  }
}

/* The singular or plural half of a state "singular|plural". */
static const char *stateForm(char *state, int plural) {
  char *bar = strchr(state, '|');
  if (!bar) return state;
  static _Thread_local char buf[400];
  if (plural) return bar + 1;
  snprintf(buf, sizeof buf, "%.*s", (int)(bar - state), state);
  return buf;
}

/* Asks every rank what it is doing and says, in one WARN, who is not where
 * this rank is: the out-of-band mesh answers even when the data path is
 * stuck, and ranks busy outside chorus answer through their monitor. */
static void diagnoseTimeout(struct ncclComm *comm) {
  int nranks = comm->nranks, me = comm->rank;
  if (!comm->boot.oob) return;
  /* Another rank timed out first and sent what it found: that is this
   * rank's error too (said again: the engine's own WARNs came after it),
   * not a diagnosis of its own. */
  char relayed[OOB_MAX_FAULT], who[128];
  int from;
  if (oobPendingFault(&comm->boot, relayed, sizeof relayed, &from) != ncclSuccess) {
    WARN("%s reported: %s", bootstrapDescribePeer(&comm->boot, from, who, sizeof who), relayed);
    return;
  }
  struct watchReply *rep = calloc((size_t)nranks, sizeof *rep);
  char *answered = calloc((size_t)nranks, 1);
  char **states = calloc((size_t)nranks, sizeof *states);
  char *text = malloc(4096);
  for (int i = 0; states && i < nranks; i++) states[i] = malloc(400);
  int ok = rep && answered && states && text;
  for (int i = 0; ok && i < nranks; i++) ok = states[i] != NULL;
  if (ok) {
    uint64_t timeoutNs = commTimeoutNs(comm);
    oobQueryStatus(&comm->boot, rep, answered, (int)(waitDiagnosisNs(timeoutNs) / 1000000ull));
    char d[160];
    /* States read "rank 3 ... <singular>" / "ranks 3, 5 ... <plural>": both forms, split by '|'. */
    for (int i = 0; i < nranks; i++) {
      if (!answered[i]) {
        /* A rank that said goodbye (its monitor stopped then) is no frozen one. */
        int left = bootstrapPeerDeparted(&comm->boot, i);
        snprintf(states[i], 400, "%s",
                 left == oobFinalized ? "finalized its communicator|finalized their communicators"
                 : left               ? "destroyed its communicator|destroyed their communicators"
                 : oobPeerGone(&comm->boot, i) ? "has exited|have exited"
                                               : "does not answer (stopped or frozen?)|do not answer (stopped or frozen?)");
      }
      else if (rep[i].inCall) {
        descStr(&rep[i].current, d, sizeof d);
        snprintf(states[i], 400, "waits in %s|wait in %s", d, d);
      } else
        snprintf(states[i], 400, "last completed #%u and is in no call|last completed #%u and are in no call",
                 rep[i].doneSeq, rep[i].doneSeq);
    }
    int len = snprintf(text, 4096, "%s timed out after %.3g s on rank %d: ", descStr(&rep[me].current, d, sizeof d),
                       (double)timeoutNs / 1e9, me);
    int listed = 0, same = 0, sameRank = -1;
    for (int i = 0; i < nranks; i++) {
      if (i == me) continue;
      if (strcmp(states[i], states[me]) == 0) {
        same++;
        sameRank = i;
        continue;
      }
      int firstOfState = 1, count = 0;
      for (int j = 0; j < nranks; j++) {
        if (j == me || strcmp(states[j], states[i]) != 0) continue;
        if (j < i) firstOfState = 0;
        count++;
      }
      if (!firstOfState) continue;
      appendRanks(comm, states, i, states[i], text, 4096);
      len = (int)strlen(text);
      snprintf(text + len, 4096 - (size_t)len, " %s; ", stateForm(states[i], count > 1));
      listed++;
    }
    len = (int)strlen(text);
    if (same > 1) {
      snprintf(text + len, 4096 - (size_t)len, "%s %s", listed ? "all others" : "all others also",
               stateForm(states[me], 1));
    } else if (same == 1) { /* one rank, named: with 2 ranks, the one at fault */
      appendRanks(comm, states, sameRank, states[me], text, 4096);
      len = (int)strlen(text);
      snprintf(text + len, 4096 - (size_t)len, " %s%s", listed ? "" : "also ", stateForm(states[me], 0));
    } else if (len >= 2) {
      text[len - 2] = 0;
    }
    WARN("%s", text);
    /* The ranks still waiting in this operation wait for this one too, which
     * now gives up: they fail at once with what it found (the rank at
     * fault), not later with "rank <this one> exited, aborted or lost its
     * connection" when it leaves (they do not diagnose again: above). */
    oobBroadcastFault(&comm->boot, ncclTimeout, text);
  }
  for (int i = 0; states && i < nranks; i++) free(states[i]);
  free(states);
  free(rep);
  free(answered);
  free(text);
}

#define WATCH_PROBE_INTERVAL_NS 1000000000ull
#define WATCH_PROBE_WAIT_MS 20 /* the peers' monitors answer within a millisecond or two */

ncclResult_t watchProbe(void *arg) {
  struct ncclComm *comm = arg;
  if (!comm->check || !comm->boot.oob || comm->nranks < 2) return ncclSuccess;
  uint64_t now = clockNs(), last = __atomic_load_n(&comm->probedNs, __ATOMIC_ACQUIRE);
  if (now - last < WATCH_PROBE_INTERVAL_NS ||
      !__atomic_compare_exchange_n(&comm->probedNs, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return ncclSuccess; /* asked lately, or another thread asks now */
  struct watchReply mine;
  watchStatus(comm, &mine, sizeof mine);
  int coll = mine.current.coll != collSend && mine.current.coll != collRecv;
  if (!mine.inCall || !coll || mine.current.seq == 0) return ncclSuccess;
  struct watchReply *rep = calloc((size_t)comm->nranks, sizeof *rep);
  char *answered = calloc((size_t)comm->nranks, 1);
  ncclResult_t res = ncclSuccess;
  if (rep && answered) {
    oobQueryStatus(&comm->boot, rep, answered, WATCH_PROBE_WAIT_MS);
    for (int i = 0; i < comm->nranks && res == ncclSuccess; i++) {
      /* The peer's call under this number: the one it is in, or a count-0
       * one it passed at once (its part in this one's data path is none,
       * so nothing else would ever tell). */
      const struct opDesc *t = rep[i].inCall && rep[i].current.seq == mine.current.seq ? &rep[i].current
                                                                                       : &rep[i].lastNoop;
      if (i == comm->rank || !answered[i] || t->seq != mine.current.seq || t->coll == collSend ||
          t->coll == collRecv || descMatch(&mine.current, t))
        continue;
      char a[160], b[160], text[400];
      snprintf(text, sizeof text, "Mismatched operation: rank %d called %s but rank %d called %s", comm->rank,
               descStr(&mine.current, a, sizeof a), i, descStr(t, b, sizeof b));
      WARN("%s (CHORUS_CHECK=0 turns this check off)", text);
      oobBroadcastFault(&comm->boot, ncclInvalidUsage, text);
      res = ncclInvalidUsage;
    }
  }
  free(rep);
  free(answered);
  return res;
}

void watchEnd(const struct groupItem *items, int n, cudaStream_t stream, ncclResult_t res, int ran) {
  for (int i = 0; i < n; i++) {
    if (!firstOfComm(items, i, stream)) continue;
    struct ncclComm *comm = items[i].comm;
    if (res == ncclTimeout && ran) diagnoseTimeout(comm);
    uint32_t done = 0;
    for (int j = i; j < n; j++)
      if (items[j].stream == stream && items[j].comm == comm && items[j].desc.coll != collSend &&
          items[j].desc.coll != collRecv && items[j].desc.check.seq > done)
        done = items[j].desc.check.seq;
    spinLock(&comm->statusLock);
    comm->inCall--;
    comm->timedOut = res == ncclTimeout;
    if (res == ncclSuccess && done > comm->doneSeq) comm->doneSeq = done;
    spinUnlock(&comm->statusLock);
  }
}

ncclResult_t watchAsyncError(struct ncclComm *comm) {
  ncclResult_t cur = __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
  if (cur != ncclSuccess || !oobTrouble(&comm->boot)) return cur;
  ncclResult_t live = bootstrapLiveness(&comm->boot);
  if (live != ncclSuccess) {
    if (__atomic_compare_exchange_n(&comm->asyncError, &cur, live, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      commSetFailText(comm, NULL);
  }
  return __atomic_load_n(&comm->asyncError, __ATOMIC_ACQUIRE);
}
