#include "reduce/reduce.h"

#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "reduce/floatconv.h"

const unsigned char dtypeSizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

const char *dtypeName(int dtype) {
  static const char *names[ncclNumTypes] = {"int8",   "uint8",  "int32",   "uint32",
                                            "int64",  "uint64", "half",    "float",
                                            "double", "bfloat16", "f8e4m3", "f8e5m2"};
  return (dtype >= 0 && dtype < ncclNumTypes) ? names[dtype] : "unknown";
}

int dtypeIsFloat(int dtype) { return dtype >= ncclFloat16; }

/* The ifunc resolvers of target_clones run during relocation, before a
 * sanitizer runtime is ready, so sanitizer builds use the portable path. */
#ifdef CHORUS_NO_CLONES
#define CLONES
#else
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

/* Binary operators on values in the computation type. */
#define OP_SUM(a, b) ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))
/* Max and min as NCCL's (fmaxf, __hmax): a NaN loses to a number, so a NaN
 * on one rank does not win over the others' values (b != b is a NaN test;
 * it folds away for integers). */
#define OP_MAX(a, b) (((b) != (b) || (a) > (b)) ? (a) : (b))
#define OP_MIN(a, b) (((b) != (b) || (a) < (b)) ? (a) : (b))

/* Bitwise reductions, for the integer types only (chorusRedOpCreateBitwise
 * refuses the others): kernels and their cases in native_*'s switch. */
#define BITWISE_KERNELS(NAME, T)                                                                      \
  CLONES static void two_##NAME##_band(T *restrict d, const T *a, const T *b, size_t n) {             \
    for (size_t i = 0; i < n; i++) d[i] = (T)(a[i] & b[i]);                                           \
  }                                                                                                   \
  CLONES static void two_##NAME##_bor(T *restrict d, const T *a, const T *b, size_t n) {              \
    for (size_t i = 0; i < n; i++) d[i] = (T)(a[i] | b[i]);                                           \
  }                                                                                                   \
  CLONES static void two_##NAME##_bxor(T *restrict d, const T *a, const T *b, size_t n) {             \
    for (size_t i = 0; i < n; i++) d[i] = (T)(a[i] ^ b[i]);                                           \
  }
#define BITWISE_CASES(NAME)                                                                           \
  case redBand: two_##NAME##_band(d, a, b, n); break;                                                 \
  case redBor: two_##NAME##_bor(d, a, b, n); break;                                                   \
  case redBxor: two_##NAME##_bxor(d, a, b, n); break;
#define NO_BITWISE_KERNELS(NAME, T)
#define NO_BITWISE_CASES(NAME)

/* Native types: T is the storage type; sums and products are computed in
 * U (the unsigned twin for signed integers) so that overflow wraps, as on
 * the GPU, instead of being undefined. */
/* Integer Avg's division by the rank count, as NCCL's SumPostDiv: by the
 * whole count (in T, 200 ranks would be -56 for int8 and 256 zero),
 * truncating toward zero; floats never take it (Avg premultiplies them). */
#define POST_DIV(T, x, div)                                                                           \
  ((T)0.5 != 0 ? (T)((x) / (T)(div))                                                                  \
   : (T)-1 > (T)0 ? (T)((uint64_t)(x) / (uint64_t)(div))                                              \
                  : (T)((int64_t)(x) / (int64_t)(div)))

#define NATIVE_KERNELS(NAME, T, U, BITWISE)                                                           \
  CLONES static void two_##NAME##_sum(T *restrict d, const T *a, const T *b, size_t n) {             \
    for (size_t i = 0; i < n; i++) d[i] = (T)OP_SUM((U)a[i], (U)b[i]);                                \
  }                                                                                                   \
  CLONES static void two_##NAME##_prod(T *restrict d, const T *a, const T *b, size_t n) {            \
    for (size_t i = 0; i < n; i++) d[i] = (T)OP_PROD((U)a[i], (U)b[i]);                               \
  }                                                                                                   \
  CLONES static void two_##NAME##_max(T *restrict d, const T *a, const T *b, size_t n) {             \
    for (size_t i = 0; i < n; i++) d[i] = OP_MAX(a[i], b[i]);                                         \
  }                                                                                                   \
  CLONES static void two_##NAME##_min(T *restrict d, const T *a, const T *b, size_t n) {             \
    for (size_t i = 0; i < n; i++) d[i] = OP_MIN(a[i], b[i]);                                         \
  }                                                                                                   \
  BITWISE##_KERNELS(NAME, T)                                                                          \
  CLONES static void two_##NAME##_premul(T *restrict d, const T *a, const T *b, size_t n, T s) {     \
    for (size_t i = 0; i < n; i++) d[i] = (T)((U)a[i] + (U)b[i] * (U)s);                              \
  }                                                                                                   \
  CLONES static void one_##NAME##_scale(T *restrict d, const T *a, size_t n, T s) {                  \
    for (size_t i = 0; i < n; i++) d[i] = (T)((U)a[i] * (U)s);                                        \
  }                                                                                                   \
  static void two_##NAME##_div(T *d, const T *a, const T *b, size_t n, int64_t div, int post) {      \
    two_##NAME##_sum(d, a, b, n);                                                                     \
    if (post)                                                                                         \
      for (size_t i = 0; i < n; i++) d[i] = POST_DIV(T, d[i], div);                                   \
  }                                                                                                   \
  static void native_##NAME(const struct redOp *op, void *dst, const void *acc, const void *in,      \
                            size_t n, int post) {                                                     \
    T *d = dst;                                                                                       \
    const T *a = acc, *b = in;                                                                        \
    T sF = (T)(dtypeIsFloat(op->dtype) ? op->scaleF : (double)op->scaleI);                           \
    if (sizeof(T) == 8 && !dtypeIsFloat(op->dtype)) sF = (T)op->scaleI;                               \
    if (a == NULL) { /* copy mode */                                                                  \
      if (op->kind == redPreMulSum) one_##NAME##_scale(d, b, n, sF);                                  \
      else if (d != b) memmove(d, b, n * sizeof(T));                                                  \
      if (post && op->kind == redSumPostDiv)                                                          \
        for (size_t i = 0; i < n; i++) d[i] = POST_DIV(T, d[i], op->divisor);                         \
      return;                                                                                         \
    }                                                                                                 \
    switch (op->kind) {                                                                               \
      case redSum: two_##NAME##_sum(d, a, b, n); break;                                               \
      case redProd: two_##NAME##_prod(d, a, b, n); break;                                             \
      case redMax: two_##NAME##_max(d, a, b, n); break;                                               \
      case redMin: two_##NAME##_min(d, a, b, n); break;                                               \
      case redPreMulSum: two_##NAME##_premul(d, a, b, n, sF); break;                                  \
      case redSumPostDiv: two_##NAME##_div(d, a, b, n, op->divisor, post); break;                     \
      BITWISE##_CASES(NAME)                                                                             \
    }                                                                                                 \
  }

NATIVE_KERNELS(i8, int8_t, uint8_t, BITWISE)
NATIVE_KERNELS(u8, uint8_t, uint8_t, BITWISE)
NATIVE_KERNELS(i32, int32_t, uint32_t, BITWISE)
NATIVE_KERNELS(u32, uint32_t, uint32_t, BITWISE)
NATIVE_KERNELS(i64, int64_t, uint64_t, BITWISE)
NATIVE_KERNELS(u64, uint64_t, uint64_t, BITWISE)
NATIVE_KERNELS(f32, float, float, NO_BITWISE)
NATIVE_KERNELS(f64, double, double, NO_BITWISE)

/* Narrow float types compute in float, one block at a time, and round once
 * per result so every rank rounds the same way. */
typedef float (*loadFn)(const void *p, size_t i);
typedef void (*storeFn)(void *p, size_t i, float v);
static float ldHalf(const void *p, size_t i) { return halfToFloat(((const uint16_t *)p)[i]); }
static void stHalf(void *p, size_t i, float v) { ((uint16_t *)p)[i] = floatToHalf(v); }
static float ldBf16(const void *p, size_t i) { return bf16ToFloat(((const uint16_t *)p)[i]); }
static void stBf16(void *p, size_t i, float v) { ((uint16_t *)p)[i] = floatToBf16(v); }
static float ldE4m3(const void *p, size_t i) { return fp8ToFloat(((const uint8_t *)p)[i], 1); }
static void stE4m3(void *p, size_t i, float v) { ((uint8_t *)p)[i] = floatToFp8(v, 1); }
static float ldE5m2(const void *p, size_t i) { return fp8ToFloat(((const uint8_t *)p)[i], 0); }
static void stE5m2(void *p, size_t i, float v) { ((uint8_t *)p)[i] = floatToFp8(v, 0); }

/* The largest finite value of a 16-bit float type, as a float (fp8's
 * stores saturate on their own: floatToFp8). */
static float narrowMax(int dtype) { return dtype == ncclBfloat16 ? bf16ToFloat(0x7f7f) : 65504.0f; }

static void narrowFloat(const struct redOp *op, void *dst, const void *acc, const void *in, size_t n,
                        int post, loadFn ld, storeFn st) {
  enum { block = 256 };
  float a[block], b[block];
  size_t esz = dtypeSize(op->dtype);
  /* The scalar as a float: a user's PreMulSum scalar is of the type
   * already, and avg's 1/n rounded to the type (as NCCL stores it) would
   * scale every average by the same error: bf16's 1/3 is 0.33398, +0.2%
   * on 3 ranks, where gloo's average is unbiased. Its products, each
   * rounded to nearest, may round up: three fp16 65504s times 1/3 are
   * 21840 each, whose sum (65520) would round to inf, so avg's sums of
   * finite values saturate instead (redOp.finite), to 65504, the average;
   * NCCL's fp16 1/3, 0.33325, rounds them down to 65472. */
  float s = (float)op->scaleF;
  for (size_t base = 0; base < n; base += block) {
    size_t m = n - base < block ? n - base : block;
    const char *inp = (const char *)in + base * esz;
    for (size_t i = 0; i < m; i++) b[i] = ld(inp, i);
    if (op->kind == redPreMulSum) /* round the product as the type would */
      for (size_t i = 0; i < m; i++) {
        char tmp[8];
        st(tmp, 0, b[i] * s);
        b[i] = ld(tmp, 0);
      }
    if (acc == NULL) {
      for (size_t i = 0; i < m; i++) a[i] = b[i];
    } else {
      const char *ap = (const char *)acc + base * esz;
      for (size_t i = 0; i < m; i++) a[i] = ld(ap, i);
      switch (op->kind) {
        case redProd: for (size_t i = 0; i < m; i++) a[i] = OP_PROD(a[i], b[i]); break;
        case redMax: for (size_t i = 0; i < m; i++) a[i] = OP_MAX(a[i], b[i]); break;
        case redMin: for (size_t i = 0; i < m; i++) a[i] = OP_MIN(a[i], b[i]); break;
        default: for (size_t i = 0; i < m; i++) a[i] = OP_SUM(a[i], b[i]); break;
      }
    }
    (void)post; /* float avg is PreMulSum: nothing to do after the sum */
    if (op->finite && esz == 2) {
      float top = narrowMax(op->dtype);
      for (size_t i = 0; i < m; i++)
        if (isfinite(a[i]) && fabsf(a[i]) > top) a[i] = copysignf(top, a[i]);
    }
    char *dp = (char *)dst + base * esz;
    for (size_t i = 0; i < m; i++) st(dp, i, a[i]);
  }
}

static void dispatch(const struct redOp *op, void *dst, const void *acc, const void *in, size_t n,
                     int post) {
  switch (op->dtype) {
    case ncclInt8: native_i8(op, dst, acc, in, n, post); break;
    case ncclUint8: native_u8(op, dst, acc, in, n, post); break;
    case ncclInt32: native_i32(op, dst, acc, in, n, post); break;
    case ncclUint32: native_u32(op, dst, acc, in, n, post); break;
    case ncclInt64: native_i64(op, dst, acc, in, n, post); break;
    case ncclUint64: native_u64(op, dst, acc, in, n, post); break;
    case ncclFloat32: native_f32(op, dst, acc, in, n, post); break;
    case ncclFloat64: native_f64(op, dst, acc, in, n, post); break;
    case ncclFloat16: narrowFloat(op, dst, acc, in, n, post, ldHalf, stHalf); break;
    case ncclBfloat16: narrowFloat(op, dst, acc, in, n, post, ldBf16, stBf16); break;
    case ncclFloat8e4m3: narrowFloat(op, dst, acc, in, n, post, ldE4m3, stE4m3); break;
    case ncclFloat8e5m2: narrowFloat(op, dst, acc, in, n, post, ldE5m2, stE5m2); break;
  }
}

/* The kernels apply PRE whenever the op is PreMulSum; an op without PRE is
 * evaluated as plain Sum. */
static struct redOp effective(const struct redOp *op, int flags) {
  struct redOp e = *op;
  if (e.kind == redPreMulSum && !(flags & REDUCE_PRE)) e.kind = redSum;
  return e;
}

void reduceCopy(const struct redOp *op, void *dst, const void *in, size_t n, int flags) {
  struct redOp e = effective(op, flags);
  if (reduceCopyIsPlain(&e, flags)) {
    if (dst != in) memcpy(dst, in, n * dtypeSize(op->dtype));
    return;
  }
  dispatch(&e, dst, NULL, in, n, flags & REDUCE_POST);
}

void reduceTwo(const struct redOp *op, void *dst, const void *acc, const void *in, size_t n, int flags) {
  struct redOp e = effective(op, flags);
  dispatch(&e, dst, acc, in, n, flags & REDUCE_POST);
}

/* copyStreaming without its closing fence, for callers that store more. */
static void streamStores(void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
  char *d = dst;
  const char *s = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15; /* the stores need 16-byte alignment */
  if (head > bytes) head = bytes;
  memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) { /* a cache line at a time (SSE2: every x86-64 has it) */
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i)), b = _mm_loadu_si128((const __m128i *)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32)), e = _mm_loadu_si128((const __m128i *)(s + i + 48));
    _mm_stream_si128((__m128i *)(d + i), a);
    _mm_stream_si128((__m128i *)(d + i + 16), b);
    _mm_stream_si128((__m128i *)(d + i + 32), c);
    _mm_stream_si128((__m128i *)(d + i + 48), e);
  }
  memcpy(d + i, s + i, bytes - i);
#else
  memcpy(dst, src, bytes);
#endif
}

static void streamFence(void) {
#if defined(__x86_64__)
  _mm_sfence(); /* ordered before whatever says the data is there (a FIFO counter, the call's return) */
#endif
}

void copyStreaming(void *dst, const void *src, size_t bytes) {
  streamStores(dst, src, bytes);
  streamFence();
}

/* A block at a time through a buffer that stays in L1: the kernels keep
 * their vector loops, and each result line is stored once into each
 * output (past the cache with stream). */
static void reduceThroughL1(const struct redOp *op, void *dst, void *dst2, const void *acc, const void *in, size_t n,
                            int flags, int stream, int stream2) {
  enum { blockBytes = 8192 };
  _Alignas(64) char block[blockBytes];
  size_t esz = dtypeSize(op->dtype), per = blockBytes / (esz ? esz : 1);
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per, at = i * esz;
    reduceTwo(op, block, (const char *)acc + at, (const char *)in + at, m, flags);
    for (int k = 0; k < 2; k++) {
      char *out = (char *)(k ? dst2 : dst);
      if (out && (k ? stream2 : stream)) streamStores(out + at, block, m * esz);
      else if (out) memcpy(out + at, block, m * esz);
    }
  }
  if (stream || stream2) streamFence();
}

void reduceTwoStreaming(const struct redOp *op, void *dst, const void *acc, const void *in, size_t n, int flags) {
  reduceThroughL1(op, dst, NULL, acc, in, n, flags, 1, 0);
}

void reduceTwoBoth(const struct redOp *op, void *dst, void *dst2, const void *acc, const void *in, size_t n, int flags,
                   int stream) {
  reduceThroughL1(op, dst, dst2, acc, in, n, flags, stream, stream);
}

void reduceTwoAndSlot(const struct redOp *op, void *dst, void *slot, const void *acc, const void *in, size_t n,
                      int flags, int stream, int slotStream) {
  reduceThroughL1(op, dst, slot, acc, in, n, flags, stream, slotStream);
}
