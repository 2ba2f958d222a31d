/* Trees, after NCCL's double binary tree: AllReduce reduces up a binary
 * tree and broadcasts the result down it, piece by piece so that the two
 * phases and the tree's levels overlap; channel ch uses tree ch % 2, and the
 * second tree is the first with positions mirrored (even counts) or shifted
 * by one (odd), so that the first tree's leaves are the second's inner
 * nodes and both carry half the data. Broadcast and Reduce use the first
 * tree with its root at the call's root. The result is reduced once, at the
 * root, in one order, so every rank gets the same bits.
 *
 * The binary tree over positions 0..m-1: position 0 is the root and has one
 * child, the largest power of two below m; position p > 0 with lowest set
 * bit b has children p - b/2 and p + b/2 (or p + b/4, ..., the first one
 * below m) and its parent is whichever of p - b and p + b has lowest set
 * bit 2b (p - b when the other is past the end).
 *
 * On one host the tree's nodes are the ranks. Across hosts, as in NCCL, the
 * binary trees span the hosts and the ranks of each host form a chain: the
 * chain's head (the call's root on the root's host) links to the heads of
 * the parent and child hosts, so a head has up to three children (two
 * hosts and the next rank of its chain) and only heads cross hosts. The
 * second tree (AllReduce's) runs each host's chain the other way round, the
 * root's too, so no link carries both trees' halves the same way. */
#include "algo/build.h"

/* The most ranks whose trees chain each host (beyond, they span ranks). */
#define TREE_MAX_CHAINED 1024

static int treeSupports(int coll, int nranks) {
  return nranks >= 2 && (coll == collAllReduce || coll == collBroadcast || coll == collReduce);
}

static int lowBit(int p) { return p & -p; }

/* The largest power of two below n: the root's one child. */
static int treeTop(int n) {
  int top = 1;
  while (top * 2 < n) top *= 2;
  return top;
}

/* Parent position of p (-1 for the root). */
static int treeParent(int p, int n) {
  if (p == 0) return -1;
  if (p == treeTop(n)) return 0;
  int b = lowBit(p), up = ((p / (2 * b)) & 1) ? p - b : p + b;
  return up >= n ? p - b : up;
}

/* Children positions of p (up to 2), in a fixed order; returns how many. */
static int treeChildren(int p, int n, int *kids) {
  int k = 0;
  for (int q = 1; q < n && k < 2; q++)
    if (treeParent(q, n) == p) kids[k++] = q;
  return k;
}

/* The rank at position p of tree t, and back. */
static int treeRank(int t, int p, int n, int root) {
  if (t == 1) p = n % 2 == 0 ? n - 1 - p : (p + 1) % n;
  return (p + root) % n;
}
static int treePos(int t, int rank, int n, int root) {
  int p = ((rank - root) % n + n) % n;
  if (t == 1) p = n % 2 == 0 ? n - 1 - p : (p + n - 1) % n;
  return p;
}

#define TREE_MAX_KIDS 3

struct treeNode {
  int parent;              /* rank, -1 at the root */
  int kids[TREE_MAX_KIDS]; /* ranks */
  int nkids;
};

/* The chain of host h in tree t: its ranks in rank order, from the root
 * when the root is on it, reversed in the second tree (AllReduce's, whose
 * root need not head it). Returns its length. */
static int hostChain(const struct algoCtx *c, int h, int t, int root, int *chain) {
  int m = 0, start = 0;
  for (int r = 0; r < c->nranks; r++)
    if (c->hostOf[r] == h) {
      if (r == root) start = m;
      chain[m++] = r;
    }
  int rot[TREE_MAX_CHAINED];
  for (int k = 0; k < m; k++) rot[k] = chain[(start + k) % m];
  for (int k = 0; k < m; k++) chain[k] = t == 1 ? rot[m - 1 - k] : rot[k];
  return m;
}

static struct treeNode treeNodeOf(const struct algoCtx *c, int t, int rank, int root) {
  struct treeNode x = {-1, {-1, -1, -1}, 0};
  int n = c->nranks, kp[2];
  if (!c->hostOf || c->nhosts <= 1 || c->nhosts == n || n > TREE_MAX_CHAINED) { /* a tree of ranks */
    int p = treePos(t, rank, n, root), up = treeParent(p, n);
    x.parent = up < 0 ? -1 : treeRank(t, up, n, root);
    x.nkids = treeChildren(p, n, kp);
    for (int i = 0; i < x.nkids; i++) x.kids[i] = treeRank(t, kp[i], n, root);
    return x;
  }
  int nh = c->nhosts, h = c->hostOf[rank], rh = c->hostOf[root];
  int chain[TREE_MAX_CHAINED], other[TREE_MAX_CHAINED];
  int m = hostChain(c, h, t, root, chain), k = 0;
  while (chain[k] != rank) k++;
  if (k > 0) x.parent = chain[k - 1];
  if (k == 0) { /* the head: the host tree's links */
    int hp = treePos(t, h, nh, rh), up = treeParent(hp, nh);
    if (up >= 0) {
      hostChain(c, treeRank(t, up, nh, rh), t, root, other);
      x.parent = other[0];
    }
    int nk = treeChildren(hp, nh, kp);
    for (int i = 0; i < nk; i++) {
      hostChain(c, treeRank(t, kp[i], nh, rh), t, root, other);
      x.kids[x.nkids++] = other[0];
    }
  }
  if (k + 1 < m) x.kids[x.nkids++] = chain[k + 1];
  return x;
}

void algoTreeLinks(const struct algoCtx *c, int ch, int *parent, int kids[3]) {
  struct treeNode x = treeNodeOf(c, ch % 2, c->rank, 0);
  *parent = x.parent;
  for (int i = 0; i < 3; i++) kids[i] = i < x.nkids ? x.kids[i] : -1;
}

/* Up the tree: the partial sums of [off, off+cnt) flow to the root, which
 * keeps the result in dst (and for AllReduce sends it down at once). */
static ncclResult_t treeUp(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                           const struct treeNode *x, size_t off, size_t cnt, int down, char *acc) {
  size_t esz = dtypeSize(d->dtype), bytes = cnt * esz;
  const char *src = (const char *)d->sendbuff + off * esz;
  /* Where a node with two children adds up: the output, or (Reduce on a
   * rank that is not the root, whose recvbuff is not to be touched) acc. */
  char *dst = acc ? acc : (char *)d->recvbuff + off * esz;
  struct conn *toParent = x->parent >= 0 ? connSend(c->conns, x->parent, ch) : NULL;
  if (x->nkids == 0) { /* a leaf */
    ADD(s, stepSend, REDUCE_PRE, NULL, toParent, src, NULL, bytes);
    return ncclSuccess;
  }
  struct conn *k0 = connRecv(c->conns, x->kids[0], ch);
  if (x->nkids > 1) { /* several children: their sums and mine gather in dst, the last one's goes on */
    ADD(s, stepRecvReduceCopy, REDUCE_PRE, k0, NULL, src, dst, bytes);
    for (int i = 1; i < x->nkids - 1; i++) ADD(s, stepRecvAcc, 0, connRecv(c->conns, x->kids[i], ch), NULL, NULL, dst, bytes);
    struct conn *kl = connRecv(c->conns, x->kids[x->nkids - 1], ch);
    if (toParent) ADD(s, stepRecvReduceSend, 0, kl, toParent, dst, NULL, bytes);
    else ADD(s, stepRecvAcc, REDUCE_POST, kl, NULL, NULL, dst, bytes);
    for (int i = 0; !toParent && down && i < x->nkids; i++)
      ADD(s, stepSend, 0, NULL, connSend(c->conns, x->kids[i], ch), dst, NULL, bytes);
    return ncclSuccess;
  }
  if (toParent) ADD(s, stepRecvReduceSend, REDUCE_PRE, k0, toParent, src, NULL, bytes);
  else if (down) /* the root's one child: the result goes straight back down */
    ADD(s, stepRecvReduceCopySend, REDUCE_PRE | REDUCE_POST, k0, connSend(c->conns, x->kids[0], ch), src, dst, bytes);
  else ADD(s, stepRecvReduceCopy, REDUCE_PRE | REDUCE_POST, k0, NULL, src, dst, bytes);
  return ncclSuccess;
}

/* Down the tree: the root's dst reaches every rank's dst. At the root
 * itself (Broadcast) the data starts in src. */
static ncclResult_t treeDown(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch,
                             const struct treeNode *x, size_t off, size_t cnt) {
  size_t esz = dtypeSize(d->dtype), bytes = cnt * esz;
  char *dst = (char *)d->recvbuff + off * esz;
  struct conn *fromParent = x->parent >= 0 ? connRecv(c->conns, x->parent, ch) : NULL;
  struct conn *k0 = x->nkids > 0 ? connSend(c->conns, x->kids[0], ch) : NULL;
  if (!fromParent) ADD(s, stepCopySend, 0, NULL, k0, (const char *)d->sendbuff + off * esz, dst, bytes);
  else if (!k0) ADD(s, stepRecv, 0, fromParent, NULL, NULL, dst, bytes);
  else ADD(s, stepRecvCopySend, 0, fromParent, k0, NULL, dst, bytes);
  for (int i = 1; i < x->nkids; i++) ADD(s, stepSend, 0, NULL, connSend(c->conns, x->kids[i], ch), dst, NULL, bytes);
  return ncclSuccess;
}

/* Starts a task on lane ch after the lane's previous operation, without
 * becoming the lane's last: an operation's up and down tasks run at once. */
static int treeTask(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int ch, int after) {
  int t = scheduleAddTask(s, &d->red, after, c->boot, c->abortFlag, c->rank, collName(d->coll));
  if (t >= 0) s->tasks[t].channel = s->tasks[t].lane = ch;
  return t;
}

static ncclResult_t treeBuild(struct schedule *s, struct algoCtx *c, const struct collDesc *d, int nch) {
  int root = d->coll == collAllReduce ? 0 : d->root;
  size_t esz = dtypeSize(d->dtype), piece = pieceElems(c, esz);
  for (int ch = 0; ch < nch; ch++) {
    size_t off, cnt;
    channelPart(d->count, esz, nch, ch, &off, &cnt);
    if (cnt == 0) continue;
    int t = d->coll == collAllReduce ? ch % 2 : 0;
    struct treeNode x = treeNodeOf(c, t, c->rank, root);
    int after = c->laneLast[ch], last = -1;
    int up = d->coll != collBroadcast, down = d->coll != collReduce;
    /* The root of an AllReduce sends down within its up task (the result as it forms). */
    int downTask = down && !(d->coll == collAllReduce && x.parent < 0);
    if (up) {
      char *acc = NULL; /* Reduce: a rank other than the root adds up in a buffer of its own */
      if (d->coll == collReduce && x.parent >= 0 && x.nkids >= 2 && !(acc = scheduleTemp(s, cnt * esz)))
        return ncclSystemError;
      if ((last = treeTask(s, c, d, ch, after)) < 0) return ncclSystemError;
      for (size_t o = off; o < off + cnt; o += piece)
        CHECK(treeUp(s, c, d, ch, &x, o, off + cnt - o < piece ? off + cnt - o : piece, down,
                     acc ? acc + (o - off) * esz : NULL));
    }
    if (downTask) {
      if ((last = treeTask(s, c, d, ch, after)) < 0) return ncclSystemError;
      for (size_t o = off; o < off + cnt; o += piece)
        CHECK(treeDown(s, c, d, ch, &x, o, off + cnt - o < piece ? off + cnt - o : piece));
    }
    /* The down task ends last: its data comes only after this rank's up task sent everything. */
    c->laneLast[ch] = last;
  }
  return ncclSuccess;
}

/* Broadcast sends down what it wrote into the output; the others send sums. */
static int treeStableSends(int coll) { return coll == collBroadcast; }

const struct algoFamily treeAlgo = {.supports = treeSupports, .build = treeBuild, .stableSends = treeStableSends};
