#include "engine/desc.h"

#include <stdio.h>

#include "reduce/reduce.h"

const char *collName(int coll) {
  static const char *names[collTypeCount] = {"AllReduce", "Broadcast", "Reduce",   "AllGather", "ReduceScatter",
                                             "Send",      "Recv",      "AlltoAll", "Gather",    "Scatter"};
  return coll >= 0 && coll < collTypeCount ? names[coll] : "Unknown";
}

const char *algoName(int algo) {
  static const char *names[algoCount] = {"Local", "Ring", "OneHop", "Chain", "P2p", "Pairwise", "Tree", "RecDoubling",
                                         "Rabenseifner"};
  return algo >= 0 && algo < algoCount ? names[algo] : "Unknown";
}

const char *protoName(int proto) {
  static const char *names[protoCount] = {"Simple", "LL"};
  return proto >= 0 && proto < protoCount ? names[proto] : "Unknown";
}

int collRooted(int coll) {
  return coll == collBroadcast || coll == collReduce || coll == collGather || coll == collScatter;
}

int descMatch(const struct opDesc *mine, const struct opDesc *theirs) {
  if (mine->seq != theirs->seq) return 0;
  if (mine->coll == collRecv || mine->coll == collSend) {
    /* bytes, as NCCL and gloo match a send with its receive (NCCL's docs
     * ask for the same type and count; its code and programs that send
     * one type and receive another of the same size take bytes) */
    int other = mine->coll == collRecv ? collSend : collRecv;
    return mine->count * dtypeSize(mine->dtype) == theirs->count * dtypeSize(theirs->dtype) &&
           theirs->coll == other && theirs->root == mine->rank && mine->root == theirs->rank &&
           theirs->tag == mine->tag;
  }
  if (mine->count != theirs->count || mine->dtype != theirs->dtype) return 0;
  if (mine->coll != theirs->coll || mine->op != theirs->op) return 0;
  if (collRooted(mine->coll) && mine->root != theirs->root) return 0;
  return descSamePlan(mine, theirs);
}

int descSamePlan(const struct opDesc *mine, const struct opDesc *theirs) {
  int p2p = mine->coll == collRecv || mine->coll == collSend;
  return p2p || (mine->algo == theirs->algo && mine->proto == theirs->proto && mine->nch == theirs->nch);
}

const char *descOpName(int op) {
  static const char *names[] = {"sum", "prod", "max", "min", "avg"};
  static const char *bitwise[] = {"band", "bor", "bxor"};
  if (op < 5) return names[op];
  if (op >= OPDESC_BAND && op < OPDESC_BAND + 3) return bitwise[op - OPDESC_BAND];
  return op == OPDESC_USER_OP ? "user op" : "";
}

const char *descStr(const struct opDesc *d, char *buf, size_t len) {
  const char *name = d->coll < collTypeCount ? collName(d->coll) : "?";
  int n = snprintf(buf, len, "%s #%u (count=%llu, %s", name, d->seq, (unsigned long long)d->count,
                   dtypeName(d->dtype));
  if (n < 0 || (size_t)n >= len) return buf;
  int p2p = d->coll == collSend || d->coll == collRecv;
  if (!p2p && d->op != OPDESC_NO_OP) n += snprintf(buf + n, len - (size_t)n, ", %s", descOpName(d->op));
  if ((size_t)n >= len) return buf;
  if (p2p) {
    n += snprintf(buf + n, len - (size_t)n, ", %s rank %d", d->coll == collSend ? "to" : "from", d->root);
    if (d->tag && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, ", tag %u", d->tag);
  } else if (collRooted(d->coll))
    n += snprintf(buf + n, len - (size_t)n, ", root %d", d->root);
  if ((size_t)n < len) snprintf(buf + n, len - (size_t)n, ")");
  return buf;
}
