/* What the bootstrap reads off the network before it trusts a peer, and the
 * checks each message passes first: every field that is used as an index,
 * a length or a string is bounded here (fuzz/fuzz_hello.c feeds them
 * arbitrary bytes). */
#ifndef CHORUS_BOOTSTRAP_WIRE_H
#define CHORUS_BOOTSTRAP_WIRE_H
#include <stdint.h>

#include "bootstrap/bootstrap.h"

#define BOOTSTRAP_MAX_RANKS (1 << 20)

/* A rank to the root: who it is, and its table entry. */
struct rootHello {
  uint64_t secret;
  int32_t rank, nranks;
  struct bootstrapPeerInfo info;
};
/* A rank to a higher one, opening their mesh connection. */
struct meshHello {
  uint64_t secret;
  int32_t rank, pad;
};

/* 1 when the root should take h: the secret matches, nranks agrees with
 * earlier ranks' (0: none yet) and rank is new (fds: the ranks seen, -1 for
 * missing, or NULL). Terminates its strings. WARNs why not otherwise. */
int wireRootHelloValid(struct rootHello *h, uint64_t secret, int nranks, const int *fds);
/* The root's table: rank i in slot i, addresses of a known family, strings
 * terminated. ncclRemoteError (WARN) when it is not. */
ncclResult_t wirePeerTableCheck(struct bootstrapPeerInfo *peers, int nranks);
/* 1 when h opens a mesh connection this rank expects: the secret, and a
 * higher rank that has not connected yet. */
int wireMeshHelloValid(const struct meshHello *h, uint64_t secret, int myRank, int nranks, const int *peerFd);

#endif
