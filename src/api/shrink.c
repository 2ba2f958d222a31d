/* ncclCommShrink: a communicator of the parent's ranks minus the excluded
 * ones (typically dead), in the parent's order. Only the survivors take
 * part, over the parent's bootstrap mesh, so dead ranks cannot hold it up:
 *   1. each survivor sends a digest of its exclude list to every rank it
 *      keeps and waits for each of theirs. A digest other than its own is a
 *      disagreement. (One from a rank it excludes, which keeps it, may be
 *      that rank's next shrink, so it is left for this rank's next; only a
 *      survivor whose shrink failed refuses such lists for a moment.) A survivor
 *      that fails tells every rank it keeps why, so that they fail at once
 *      too, each naming a rank, instead of waiting for ranks that will not
 *      come (until 2026-12-06 survivors that disagreed on the first survivor
 *      waited for it until their timeout);
 *   2. once every rank it keeps has sent the same list, the first survivor
 *      starts a fresh rendezvous and hands its id to the others.
 * No survivor joins the new rendezvous before every rank it keeps has sent
 * it the same list, so none gets a communicator that one of its members
 * did not ask for. Each message carries the number of the shrinks on this
 * parent that the sender and its receiver both took part in (each pair's
 * own count: a shrink leaves out the ranks it excludes, which do not call
 * it, so a count of all would differ between ranks that made different
 * subsets, as torch's new_group does): what a failed shrink left unread is
 * dropped by the next.
 * NCCL_SHRINK_ABORT first ends what is still running on the parent (as
 * ncclCommAbort would, but the parent stays usable for ncclCommDestroy). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/initjob.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/oob.h"
#include "core/clock.h"
#include "core/err.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/wait.h"

#define SHRINK_MAGIC 0x4b524853u /* "SHRK" */

enum shrinkKind { shrinkDigest = 1, shrinkHandoff, shrinkFail };

/* Every message of the handoff (all of one size, which is how oobPeekData
 * tells them from another call's). */
struct shrinkMsg {
  uint32_t magic;
  uint32_t kind;
  uint32_t call;   /* the pair's shrink on this parent (shrinkWith); a refusal's: the one it answers */
  int32_t nranks;  /* the survivors in the sender's list */
  int32_t first;   /* its first survivor (who hands the rendezvous out) */
  int32_t code;    /* shrinkFail: the error */
  int32_t origin;  /* shrinkFail: the rank that found it */
  int32_t pad;
  uint64_t digest;          /* of the sender's exclude list */
  struct bootstrapHandle h; /* shrinkHandoff: the new rendezvous */
  char why[320];            /* shrinkFail: what origin found */
};

struct shrinkState {
  struct bootstrap *b;
  const char *excluded; /* [n] */
  int n, me, leader, m;
  uint32_t *call; /* [n]: this shrink's number with rank i (with[i] + 1 before it counts) */
  uint32_t *with; /* [n]: the parent's shrinkWith */
  uint64_t digest;
  char *need; /* [n]: the digest of rank i, which this rank keeps, has not come */
  int handed; /* a follower has the leader's handoff */
  int rootMade; /* the leader started the rendezvous */
  struct bootstrapHandle hand;
  ncclResult_t code; /* the failure, once there is one */
  ncclResult_t told; /* what the ranks it keeps get for it */
  int origin;        /* the rank that found it */
  char why[320];
};

static uint64_t excludeDigest(const char *excluded, int n) { /* entries 0 or 1 (ncclCommShrink) */
  return fnv1aBytes(FNV1A_INIT, excluded, (size_t)n);
}

static const char *peerName(const struct shrinkState *s, int p, char *buf, size_t len) {
  return bootstrapDescribePeer(s->b, p, buf, len);
}

/* 1 while this rank waits for something from rank p. */
static int shrinkAwaits(const struct shrinkState *s, int p) {
  return s->need[p] || (p == s->leader && s->me != s->leader && !s->handed);
}

/* The failure, said already (a WARN); the first one counts. */
static void shrinkFailedSaid(struct shrinkState *s, ncclResult_t code, int origin, const char *why) {
  if (s->code != ncclSuccess) return;
  s->code = s->told = code;
  s->origin = origin;
  snprintf(s->why, sizeof s->why, "%s", why);
}

/* The failure, WARNed here; the first one counts. */
static void shrinkFailed(struct shrinkState *s, ncclResult_t code, int origin, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void shrinkFailed(struct shrinkState *s, ncclResult_t code, int origin, const char *fmt, ...) {
  if (s->code != ncclSuccess) return;
  char why[sizeof s->why];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  WARN("%s", why);
  shrinkFailedSaid(s, code, origin, why);
}

/* The wait's liveness check: only the ranks this one still waits for (the
 * excluded may well be dead, so not bootstrapLiveness). */
static ncclResult_t shrinkLiveness(void *arg) {
  struct shrinkState *s = arg;
  struct shrinkMsg msg;
  char name[128];
  for (int p = 0; p < s->n; p++) {
    if (p == s->me || !shrinkAwaits(s, p) || oobPeekData(s->b, p, &msg, sizeof msg) != 0) continue;
    int departed = oobPeerDeparted(s->b, p);
    if (!departed && !oobPeerGone(s->b, p)) continue;
    WARN("ncclCommShrink : rank %d: %s, which it keeps, %s before it did its part of the shrink", s->me,
         peerName(s, p, name, sizeof name),
         departed == oobFinalized ? "finalized its communicator"
         : departed               ? "destroyed its communicator"
                                  : "is gone (it exited, aborted or lost its connection)");
    return ncclRemoteError;
  }
  return ncclSuccess;
}

/* A message of this shrink to rank p. */
static void shrinkMsgFill(const struct shrinkState *s, struct shrinkMsg *msg, int kind, int p) {
  memset(msg, 0, sizeof *msg);
  msg->magic = SHRINK_MAGIC;
  msg->kind = (uint32_t)kind;
  msg->call = s->call[p];
  msg->nranks = s->m;
  msg->first = s->leader;
  msg->digest = s->digest;
}

/* Tells rank p that the shrink (its number call) failed: code, and why as
 * origin said. Best effort, briefly: a rank that is gone needs no word. */
static void shrinkTell(const struct shrinkState *s, int p, uint32_t call, ncclResult_t code, int origin,
                       const char *why) {
  if (oobPeerGone(s->b, p) || oobPeerDeparted(s->b, p)) return;
  struct shrinkMsg msg;
  shrinkMsgFill(s, &msg, shrinkFail, p);
  msg.call = call;
  msg.code = (int32_t)code;
  msg.origin = origin;
  snprintf(msg.why, sizeof msg.why, "%s", why);
  struct waitState w;
  waitBegin(&w, NULL, NULL, NULL, "ncclCommShrink failure notice");
  w.timeoutNs = 100000000ull;
  (void)oobSendData(s->b, p, &msg, sizeof msg, &w);
}

/* One message from rank p (taken off its queue), of this shrink. */
static void shrinkTake(struct shrinkState *s, int p, const struct shrinkMsg *msg) {
  char name[128], oname[128];
  int kept = !s->excluded[p];
  switch (msg->kind) {
    case shrinkDigest:
      if (!kept) { /* it keeps this rank, which excludes it: it waits for this rank */
        char why[320];
        snprintf(why, sizeof why, "ncclCommShrink : rank %d excludes rank %d, which keeps it: their exclude lists "
                 "differ (rank %d keeps %d ranks, the first rank %d; rank %d keeps %d, the first rank %d)",
                 s->me, p, s->me, s->m, s->leader, p, msg->nranks, msg->first);
        INFO(subsysInit, "%s: refused", why);
        shrinkTell(s, p, msg->call, ncclInvalidUsage, s->me, why);
        s->with[p] = msg->call; /* it counted this shrink with this rank: so does this rank */
      } else if (!s->need[p]) {
        shrinkFailed(s, ncclInvalidUsage, s->me, "ncclCommShrink : rank %d got a second exclude list from %s",
                     s->me, peerName(s, p, name, sizeof name));
      } else if (msg->digest != s->digest || msg->nranks != s->m) {
        shrinkFailed(s, ncclInvalidUsage, s->me,
                     "ncclCommShrink : rank %d and %s exclude different ranks (rank %d keeps %d ranks, the first "
                     "rank %d; rank %d keeps %d, the first rank %d): every survivor must pass the same list",
                     s->me, peerName(s, p, name, sizeof name), s->me, s->m, s->leader, p, msg->nranks, msg->first);
      } else {
        s->need[p] = 0;
      }
      break;
    case shrinkHandoff: /* sent only once all of the leader's ranks agree, so by the leader this rank expects */
      if (kept && p == s->leader && !s->need[p] && !s->handed) {
        s->hand = msg->h;
        s->handed = 1;
      } else {
        shrinkFailed(s, ncclInternalError, s->me, "ncclCommShrink : rank %d got a rendezvous it did not expect from %s",
                     s->me, peerName(s, p, name, sizeof name));
      }
      break;
    case shrinkFail:
      /* From a rank this one excludes: it was refused by this rank, or gave
       * up; this rank does not wait for it either way. */
      if (kept) {
        int origin = msg->origin >= 0 && msg->origin < s->n ? msg->origin : p;
        char why[sizeof msg->why];
        snprintf(why, sizeof why, "%s", msg->why);
        WARN("ncclCommShrink : rank %d: %s reported: %s", s->me, peerName(s, origin, oname, sizeof oname), why);
        shrinkFailedSaid(s, msg->code > ncclSuccess && msg->code < ncclNumResults ? (ncclResult_t)msg->code
                                                                                  : ncclInvalidUsage,
                         origin, why); /* passed on as it came */
      }
      break;
    default:
      shrinkFailed(s, ncclInternalError, s->me, "ncclCommShrink : rank %d got a message of unknown kind %u from %s",
                   s->me, msg->kind, peerName(s, p, name, sizeof name));
  }
}

/* Reads what has come from each rank; 1 when something was taken. */
static int shrinkRead(struct shrinkState *s) {
  int moved = 0;
  char name[128];
  for (int p = 0; p < s->n && s->code == ncclSuccess; p++) {
    if (p == s->me) continue;
    struct shrinkMsg msg;
    int got;
    while (s->code == ncclSuccess && (got = oobPeekData(s->b, p, &msg, sizeof msg)) != 0) {
      if (got < 0 || msg.magic != SHRINK_MAGIC) { /* another call's: left for it */
        if (shrinkAwaits(s, p))
          shrinkFailed(s, ncclInvalidUsage, s->me,
                       "ncclCommShrink : rank %d: %s, which it keeps, sent a message of another call: the ranks are "
                       "not all in ncclCommShrink",
                       s->me, peerName(s, p, name, sizeof name));
        break;
      }
      /* Its next shrink's, left for this rank's next: one past this rank's
       * count with it, or its number now from a rank this one excludes (which
       * keeps this rank: its next shrink with it, or lists that differ; which
       * of the two cannot be told here, so no refusal: a rank that keeps
       * this one and is kept by none that agree with it waits for its
       * timeout, naming this rank) */
      if (msg.call > s->call[p] || (msg.call == s->call[p] && s->excluded[p])) {
        if (shrinkAwaits(s, p)) {
          shrinkFailed(s, ncclInvalidUsage, s->me,
                       "ncclCommShrink : rank %d: %s began their ncclCommShrink #%u together on this communicator "
                       "while this rank waited for its part of #%u (did it skip a shrink that kept both?)",
                       s->me, peerName(s, p, name, sizeof name), msg.call, s->call[p]);
          shrinkTell(s, p, msg.call, s->code, s->me, s->why);
        }
        break;
      }
      oobDropData(s->b, p);
      moved = 1;
      if (msg.call == s->call[p]) shrinkTake(s, p, &msg); /* else left by an earlier shrink that failed */
    }
  }
  return moved;
}

/* How long a rank whose shrink failed stays to refuse the ranks that keep
 * it (it excludes them), whose lists may come after it failed: they wait
 * for it, and would wait for their timeout otherwise. */
#define SHRINK_LINGER_NS 200000000ull

/* After a failure: refuses what comes from ranks this one excludes, until
 * each of them has sent something of this shrink, is gone, or the time is
 * up. (The ranks it keeps were told.) */
static void shrinkLinger(struct shrinkState *s) {
  char *heard = calloc((size_t)s->n, 1);
  if (!heard) return;
  struct waitState w;
  waitBegin(&w, s->b->abortFlag, NULL, NULL, "ncclCommShrink refusals");
  w.timeoutNs = 0; /* bounded below */
  for (uint64_t until = clockNs() + SHRINK_LINGER_NS; clockNs() < until;) {
    int waiting = 0, moved = 0;
    for (int p = 0; p < s->n; p++) {
      if (p == s->me || !s->excluded[p] || heard[p]) continue;
      struct shrinkMsg msg;
      int got;
      while (!heard[p] && (got = oobPeekData(s->b, p, &msg, sizeof msg)) == 1 && msg.magic == SHRINK_MAGIC &&
             msg.call <= s->call[p]) {
        oobDropData(s->b, p);
        moved = 1;
        if (msg.call < s->call[p]) continue;
        heard[p] = 1;
        if (msg.kind == shrinkDigest) shrinkTake(s, p, &msg); /* the refusal */
      }
      if (got != 0) heard[p] = 1; /* another call's, or this rank's next shrink's: not waiting for this one */
      if (!heard[p] && (oobPeerGone(s->b, p) || oobPeerDeparted(s->b, p))) heard[p] = 1;
      waiting += !heard[p];
    }
    if (!waiting) break;
    if (moved) waitProgress(&w);
    else if (waitPause(&w) != ncclSuccess) break; /* aborted */
  }
  free(heard);
}

/* The leader: a fresh rendezvous, handed to the ranks it keeps. */
static void shrinkHandOut(struct shrinkState *s, struct waitState *w) {
  ncclResult_t res = bootstrapNewRoot(&s->hand);
  if (res != ncclSuccess) {
    shrinkFailed(s, res, s->me, "ncclCommShrink : rank %d could not start the new rendezvous: %s", s->me,
                 logThreadLastError());
    return;
  }
  s->rootMade = 1;
  struct shrinkMsg msg;
  for (int p = s->leader + 1; p < s->n && s->code == ncclSuccess; p++) {
    if (s->excluded[p]) continue;
    shrinkMsgFill(s, &msg, shrinkHandoff, p);
    msg.h = s->hand;
    res = oobSendData(s->b, p, &msg, sizeof msg, w);
    if (res != ncclSuccess) shrinkFailedSaid(s, res, s->me, logThreadLastError());
  }
}

/* A wait that ended in an error (abort, timeout, a gone peer) as the
 * failure, said to the others. */
static void shrinkWaitFailed(struct shrinkState *s, ncclResult_t res) {
  char name[128], more[32] = "";
  if (res == ncclInvalidUsage && s->b->abortFlag && __atomic_load_n(s->b->abortFlag, __ATOMIC_ACQUIRE)) {
    char why[128]; /* the wait said it; for the others this rank has left */
    snprintf(why, sizeof why, "ncclCommShrink : rank %d: its shrink was ended by ncclCommAbort or ncclCommRevoke",
             s->me);
    shrinkFailedSaid(s, res, s->me, why);
    s->told = ncclRemoteError;
    return;
  }
  if (res != ncclTimeout) { /* the liveness check said why */
    shrinkFailedSaid(s, res, s->me, logThreadLastError());
    return;
  }
  int first = -1, waiting = 0;
  for (int p = 0; p < s->n; p++)
    if (p != s->me && shrinkAwaits(s, p) && waiting++ == 0) first = p;
  if (waiting > 1) snprintf(more, sizeof more, " and %d more", waiting - 1);
  shrinkFailed(s, ncclTimeout, s->me,
               "ncclCommShrink : rank %d gave up waiting for %s%s, which it keeps: not in ncclCommShrink, or stuck?",
               s->me, first >= 0 ? peerName(s, first, name, sizeof name) : "nobody", more);
}

ncclResult_t commShrinkRun(struct initJob *j) {
  struct ncclComm *parent = j->parent;
  struct bootstrap *b = &parent->boot;
  if (!b->oob) return ncclInternalError;
  int n = parent->nranks, me = parent->rank, newRank = 0;
  struct shrinkState s = {.b = b, .excluded = j->excluded, .n = n, .me = me, .leader = -1};
  if (!parent->shrinkWith) parent->shrinkWith = calloc((size_t)n, sizeof *parent->shrinkWith);
  s.with = parent->shrinkWith;
  s.need = calloc((size_t)n, 1);
  s.call = calloc((size_t)n, sizeof *s.call);
  if (!s.need || !s.call || !s.with) {
    free(s.need);
    free(s.call);
    return ncclSystemError;
  }
  for (int i = 0; i < n; i++) {
    if (j->excluded[i]) continue;
    if (s.leader < 0) s.leader = i;
    if (i == me) newRank = s.m;
    s.need[i] = i != me;
    s.m++;
  }
  s.digest = excludeDigest(j->excluded, n);
  for (int p = 0; p < n; p++) { /* counted with the ranks it keeps; an excluded one counts if it keeps this one */
    s.call[p] = s.with[p] + 1;
    if (p != me && !j->excluded[p]) s.with[p] = s.call[p];
  }
  /* ncclCommAbort of the parent from another thread ends the wait (and
   * waits for this job: initJobParentDone). */
  struct waitState w;
  waitBegin(&w, &parent->abortFlag, shrinkLiveness, &s, "ncclCommShrink handoff");
  struct shrinkMsg msg;
  for (int p = 0; p < n && s.code == ncclSuccess; p++) {
    if (p == me || j->excluded[p]) continue;
    shrinkMsgFill(&s, &msg, shrinkDigest, p);
    ncclResult_t res = oobSendData(b, p, &msg, sizeof msg, &w);
    if (res != ncclSuccess) shrinkWaitFailed(&s, res);
  }
  while (s.code == ncclSuccess) {
    int moved = shrinkRead(&s);
    if (s.code != ncclSuccess) break;
    int agreed = 1;
    for (int p = 0; p < n && agreed; p++) agreed = !s.need[p];
    if (agreed && me == s.leader) {
      shrinkHandOut(&s, &w);
      break;
    }
    if (agreed && s.handed) break;
    if (moved) {
      waitProgress(&w);
      continue;
    }
    ncclResult_t res = waitPause(&w);
    if (res != ncclSuccess) shrinkWaitFailed(&s, res);
  }
  if (s.code != ncclSuccess) {
    for (int p = 0; p < n; p++)
      if (p != me && !j->excluded[p]) shrinkTell(&s, p, s.call[p], s.told, s.origin, s.why);
    if (!__atomic_load_n(&parent->abortFlag, __ATOMIC_ACQUIRE)) shrinkLinger(&s);
    /* Ranks that went on to the new rendezvous (its leader handed it out:
     * they all agreed, and this rank failed after) are refused there at
     * once rather than wait for this one. */
    if (s.rootMade) bootstrapRefuseRoot(&s.hand, s.why);
    if (s.handed) {
      ncclUniqueId id;
      memset(&id, 0, sizeof id);
      memcpy(id.internal, &s.hand, sizeof s.hand);
      commReportDisagreement(&id, s.m);
    }
    free(s.need);
    free(s.call);
    return s.code;
  }
  free(s.need);
  free(s.call);
  memset(&j->id, 0, sizeof j->id);
  memcpy(j->id.internal, &s.hand, sizeof s.hand);
  j->nranks = s.m;
  j->rank = newRank;
  INFO(subsysInit, "ncclCommShrink : rank %d becomes rank %d of %d", me, newRank, s.m);
  struct commOrigin origin = {"ncclCommShrink", parent, 0, me, 0, &j->config,
                              __atomic_add_fetch(&parent->childCount, 1, __ATOMIC_RELAXED), j->setup};
  int dev = parent->cudaDev;
  return commInitChild(j, s.m, newRank, dev, &origin);
}
