/* Mismatch detection (CHORUS_CHECK, on by default): every operation has a
 * descriptor, and the first slot it sends on each connection carries it
 * (transport/conn.h, struct connDesc). The receiver compares it with its
 * own before it uses a byte of that slot, so ranks that disagree on the
 * operation, its count, datatype, reduction or root fail with
 * ncclInvalidUsage instead of hanging or mixing up data. A slot that starts
 * an operation where the receiver expects more of the current one (or the
 * other way round) is caught the same way. */
#ifndef CHORUS_ENGINE_DESC_H
#define CHORUS_ENGINE_DESC_H
#include <stddef.h>
#include <stdint.h>

/* The operations (the vocabulary of descriptors and messages). */
enum collType {
  collAllReduce,
  collBroadcast,
  collReduce,
  collAllGather,
  collReduceScatter,
  collSend,
  collRecv,
  collAlltoAll,
  collGather,
  collScatter,
  collTypeCount
};
const char *collName(int coll);
/* 1 for the collectives with a root (Broadcast, Reduce, Gather, Scatter). */
int collRooted(int coll);

/* The algorithms (built in src/algo/) and protocols (src/proto/), named
 * here because descriptors carry them. */
enum algoId { algoLocal, algoRing, algoOneHop, algoChain, algoP2p, algoPairwise, algoTree, algoRecDoubling,
              algoRabenseifner, algoCount };
const char *algoName(int algo);
enum protoId { protoSimple, protoLL, protoCount };
const char *protoName(int proto);

struct opDesc {
  uint64_t count;
  uint32_t seq;  /* collectives: the communicator's call number (from 1); Send/Recv: per peer and direction */
  uint8_t coll;  /* enum collType */
  uint8_t dtype; /* ncclDataType_t */
  union {
    struct {
      uint8_t op;        /* ncclRedOp_t for built-in ones, OPDESC_USER_OP for PreMulSum's, OPDESC_BAND.. for bitwise ones */
      uint8_t algo : 5;  /* collectives: the tuner's algorithm (enum algoId) and protocol */
      uint8_t proto : 3; /* (enum protoId), so ranks that chose differently fail, not mix up data */
    };
    uint16_t tag; /* Send/Recv: the tag's low 16 bits (chorusSendTag / chorusRecvTag) */
  };
  int32_t root;       /* root; the peer for Send/Recv; -1 when neither */
  uint32_t rank : 24; /* the rank that made the call (init refuses more ranks than this holds) */
  uint32_t nch : 8;   /* collectives: the channels the tuner chose */
};
_Static_assert(sizeof(struct opDesc) == 24, "struct connDesc carries 24 bytes");
#define OPDESC_USER_OP 255
#define OPDESC_NO_OP 254 /* not a reduction */
#define OPDESC_BAND 251  /* chorusRedOpCreateBitwise's: BAND, BOR (252), BXOR (253) */
#define OPDESC_MAX_RANKS (1 << 24)

/* Step flags (struct step.check): the first slot of this step, on its
 * connection, is the operation's first there. */
#define CHECK_SEND_DESC 1
#define CHECK_RECV_DESC 2

/* 1 when what the receiver called (mine) and what the sender called
 * (theirs) belong together. */
int descMatch(const struct opDesc *mine, const struct opDesc *theirs);
/* 1 when both chose the same algorithm, protocol and channels (always for Send/Recv). */
int descSamePlan(const struct opDesc *mine, const struct opDesc *theirs);
/* A descriptor's op: "sum", "prod", "max", "min", "avg", "user op"; "" for none. */
const char *descOpName(int op);
/* "AllReduce #42 (count=1000, float, sum)", "Send #3 (count=8, int32, to rank 2)",
 * "Recv #1 (count=8, int32, from rank 0, tag 7)" */
const char *descStr(const struct opDesc *d, char *buf, size_t len);

#endif
