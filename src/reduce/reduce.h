/* Element kernels: every datatype × reduction, vectorized (AVX-512, AVX2 or
 * portable, picked at run time through target_clones). */
#ifndef CHORUS_REDUCE_REDUCE_H
#define CHORUS_REDUCE_REDUCE_H
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* What the kernels do, after ncclAvg and user ops are lowered (as NCCL's
 * hostToDevRedOp does): integer avg is sum then divide by nranks, float avg
 * and PreMulSum multiply each input by a scalar, then sum. The bitwise ones
 * (chorusRedOpCreateBitwise, gloo's BAND/BOR/BXOR) take integer types only. */
enum redKind { redSum, redProd, redMax, redMin, redPreMulSum, redSumPostDiv, redBand, redBor, redBxor, redKindCount };

struct redOp {
  int dtype;      /* ncclDataType_t */
  int kind;       /* enum redKind */
  double scaleF;  /* PreMulSum scalar for float types */
  int64_t scaleI; /* PreMulSum scalar for integer types */
  int64_t divisor; /* SumPostDiv */
  /* Float avg: its sums of finite values stay finite, saturating at the
   * type's largest value (an average of finite inputs is never past it;
   * only the rounding of the scaled inputs can carry a sum there). */
  int finite;
  /* PreMulSum's scalar where the caller keeps it (ncclScalarDevice), read
   * into scaleF and scaleI when the operation starts running, as NCCL's
   * kernels read it; NULL when the scale fields hold it already. */
  const void *scaleAt;
};

extern const unsigned char dtypeSizes[ncclNumTypes];
/* Bytes per element; 0 for a type out of range. Inline: every step asks. */
static inline size_t dtypeSize(int dtype) {
  return (dtype >= 0 && dtype < ncclNumTypes) ? dtypeSizes[dtype] : 0;
}
const char *dtypeName(int dtype);
int dtypeIsFloat(int dtype);

/* Flags: REDUCE_PRE multiplies the input by the PreMulSum scalar first;
 * REDUCE_POST applies the final division (SumPostDiv) to the result. */
#define REDUCE_PRE 1
#define REDUCE_POST 2

/* dst = in, with the flags applied. */
void reduceCopy(const struct redOp *op, void *dst, const void *in, size_t n, int flags);
/* 1 when reduceCopy with these flags is a plain copy (no PreMulSum scalar
 * to apply, no division), so that the input may be sent as it is. */
static inline int reduceCopyIsPlain(const struct redOp *op, int flags) {
  return !((flags & REDUCE_PRE) && op->kind == redPreMulSum) && !((flags & REDUCE_POST) && op->kind == redSumPostDiv);
}
/* dst = acc OP in, with the flags applied (PRE to in only). dst may alias
 * acc or in. */
void reduceTwo(const struct redOp *op, void *dst, const void *acc, const void *in, size_t n, int flags);
/* memcpy with stores that go past the cache (non-temporal), for output
 * nothing reads again soon: a large operation's result would otherwise
 * evict the FIFOs and inputs, and cost a read of every line it writes.
 * memcpy where the CPU has no such stores. */
void copyStreaming(void *dst, const void *src, size_t bytes);
/* reduceTwo with the result stored past the cache (bitwise the same result);
 * dst may alias acc or in. */
void reduceTwoStreaming(const struct redOp *op, void *dst, const void *acc, const void *in, size_t n, int flags);
/* reduceTwo into two outputs at once (bitwise the same result in both),
 * each stored once, past the cache with stream: a result a peer needs too
 * goes straight into its memory, not through a second pass that reads
 * dst again. dst and dst2 may alias acc or in. */
void reduceTwoBoth(const struct redOp *op, void *dst, void *dst2, const void *acc, const void *in, size_t n, int flags,
                   int stream);
/* reduceTwoBoth where the second output is a FIFO slot a peer reads next,
 * stored past the cache only if slotStream says so (the protocol's
 * choice), whatever stream says of dst. */
void reduceTwoAndSlot(const struct redOp *op, void *dst, void *slot, const void *acc, const void *in, size_t n,
                      int flags, int stream, int slotStream);

#endif
