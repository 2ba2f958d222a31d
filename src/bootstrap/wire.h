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
  uint32_t flags; /* WIRE_HELLO_DISAGREES */
  uint32_t tid;   /* the init's calling thread's: a good hello retries a bad rank only from the thread that asked for it */
  struct bootstrapPeerInfo info;
};
/* The hello only reports that its process was handed this rendezvous and
 * will not join it (bootstrapReportDisagreement): the root refuses every
 * rank. A flag, not a rank value, so that no rank a user asks for can be
 * taken for it. */
#define WIRE_HELLO_DISAGREES 0x1u
/* A rank to a higher one, opening their mesh connection. */
struct meshHello {
  uint64_t secret;
  int32_t rank, pad;
};

/* 1 when h is a hello the root can read: the secret matches, nranks is in
 * range, the address family known; the rank may be outside 0..nranks-1
 * (a rank that reports it asked for one: the root refuses everyone). Terminates its strings.
 * WARNs why not otherwise (whether it agrees with the other ranks' hellos
 * is the root's question, answered with a refusal below). */
int wireRootHelloValid(struct rootHello *h, uint64_t secret);
/* The root's refusal, sent in place of the table (as many bytes as the
 * table the rank expects) when ranks disagree about the rendezvous: the
 * first int is WIRE_REFUSED (where the table has rank 0), and a text saying
 * who disagrees follows from byte 8. */
#define WIRE_REFUSED (-1)
#define WIRE_FRAME_TEXT_OFFSET 8
/* While ranks are missing the root sends each rank that has checked in a
 * progress frame now and then, ahead of the table: WIRE_PROGRESS where the
 * table has rank 0, then a text (who is missing) from byte 8, in
 * WIRE_PROGRESS_BYTES in all. */
#define WIRE_PROGRESS (-2)
#define WIRE_PROGRESS_BYTES 512
/* The root's first word to a rank whose hello it took, before anything
 * else (a bare int): a rank that hears nothing within WIRE_CHECKIN_NS of
 * its hello is talking to something that is not a chorus root (a program
 * that holds NCCL_COMM_ID's port, where rank 0 then could not listen).
 * Shorter than the root's first progress frame (5 s), so that the check-in
 * alone says "a root is here". */
#define WIRE_CHECKED_IN (-3)
#define WIRE_CHECKIN_NS 3000000000ull
/* Writes the first len bytes of a frame of mark (WIRE_REFUSED,
 * WIRE_PROGRESS) into buf. */
void wireFrameFill(char *buf, size_t len, int32_t mark, const char *text);
/* 1 when the len bytes at table are a frame of mark; its text, terminated,
 * into text. */
int wireFrameRead(const void *table, size_t len, int32_t mark, char *text, size_t textLen);
/* The root's table: rank i in slot i, addresses of a known family, strings
 * terminated. ncclRemoteError (WARN) when it is not. */
ncclResult_t wirePeerTableCheck(struct bootstrapPeerInfo *peers, int nranks);
/* 1 when h opens a mesh connection this rank expects: the secret, and a
 * higher rank that has not connected yet. */
int wireMeshHelloValid(const struct meshHello *h, uint64_t secret, int myRank, int nranks, const int *peerFd);

#endif
