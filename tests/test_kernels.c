/* The element kernels and conversions, bit for bit, against references
 * written here from the formats' definitions (IEEE 754 binary16, bfloat16,
 * OCP fp8 e4m3/e5m2 with saturation as NCCL's __NV_SATFINITE): every code
 * decoded; every code, every midpoint between neighbours (the ties), one
 * float ulp either side of both, subnormals, overflow and specials encoded,
 * plus a million random floats; every reduction of every narrow type over
 * pairs (all of them for 8-bit types), with PreMulSum/avg scaling rounded
 * as the type rounds; integer wrap-around, integer avg and the bitwise
 * reductions; odd lengths and unaligned starts so that vector bodies and
 * tails both run.
 *   test_kernels            (the build's kernels: target_clones picks AVX2/AVX-512)
 *   test_kernels_portable   (the same sources built with CHORUS_NO_CLONES)
 * A failure prints the inputs, the result and the expected bits. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/floatconv.h"
#include "reduce/reduce.h"

static int failures;
#define FAIL(...)                         \
  do {                                    \
    if (failures++ < 20) {                \
      fprintf(stderr, __VA_ARGS__);       \
      fprintf(stderr, "\n");              \
    }                                     \
  } while (0)

/* ---- the reference: a binary float format from its definition ---- */
struct fmt {
  const char *name;
  int ebits, mbits, bias;
  int ieee;   /* all-ones exponent: infinity (mantissa 0) or NaN; else only S.1111.111 is NaN (e4m3) */
  int satfinite; /* out of range (infinity included) gives the largest finite value */
  int dtype;  /* ncclDataType_t */
};
static const struct fmt half = {"half", 5, 10, 15, 1, 0, ncclFloat16};
static const struct fmt bf16 = {"bfloat16", 8, 7, 127, 1, 0, ncclBfloat16};
static const struct fmt e4m3 = {"e4m3", 4, 3, 7, 0, 1, ncclFloat8e4m3};
static const struct fmt e5m2 = {"e5m2", 5, 2, 15, 1, 1, ncclFloat8e5m2};

static uint32_t codeCount(const struct fmt *f) { return 1u << (1 + f->ebits + f->mbits); }
static uint32_t signBit(const struct fmt *f) { return 1u << (f->ebits + f->mbits); }
static uint32_t maxFiniteCode(const struct fmt *f) {
  uint32_t emax = (1u << f->ebits) - 1;
  return f->ieee ? ((emax << f->mbits) - 1) : ((emax << f->mbits) | ((1u << f->mbits) - 2));
}
static int isNanCode(const struct fmt *f, uint32_t c) {
  c &= signBit(f) - 1;
  uint32_t emax = (1u << f->ebits) - 1, e = c >> f->mbits, m = c & ((1u << f->mbits) - 1);
  return f->ieee ? (e == emax && m != 0) : (e == emax && m == (1u << f->mbits) - 1);
}

static double refDecode(const struct fmt *f, uint32_t c) {
  int s = (c & signBit(f)) != 0;
  uint32_t mag = c & (signBit(f) - 1), emax = (1u << f->ebits) - 1;
  uint32_t e = mag >> f->mbits, m = mag & ((1u << f->mbits) - 1);
  if (isNanCode(f, c)) return NAN;
  double v;
  if (f->ieee && e == emax) v = INFINITY;
  else if (e == 0) v = ldexp((double)m, 1 - f->bias - f->mbits);
  else v = ldexp((double)(m | (1u << f->mbits)), (int)e - f->bias - f->mbits);
  return s ? -v : v;
}

/* Round to nearest, ties to even; x must be exact in double (sums and
 * products of two narrow values, floats). */
static uint32_t refEncode(const struct fmt *f, double x) {
  uint32_t sign = signbit(x) ? signBit(f) : 0;
  if (isnan(x)) return maxFiniteCode(f) + (f->ieee ? 2 : 1); /* a NaN code */
  double a = fabs(x);
  uint32_t infCode = ((1u << f->ebits) - 1) << f->mbits;
  if (isinf(a)) return sign | (f->satfinite || !f->ieee ? maxFiniteCode(f) : infCode);
  if (a == 0) return sign;
  int eMin = 1 - f->bias, e;
  frexp(a, &e);
  e -= 1; /* a in [2^e, 2^(e+1)) */
  if (e < eMin) e = eMin;
  double q = ldexp(1.0, e - f->mbits);
  double n = nearbyint(a / q); /* a / q is exact: a power-of-two scale */
  uint64_t code = ((uint64_t)(e - eMin) << f->mbits) + (uint64_t)n;
  if (code > maxFiniteCode(f)) return sign | (f->satfinite || !f->ieee ? maxFiniteCode(f) : infCode);
  return sign | (uint32_t)code;
}

/* ---- the implementation under test, one element at a time ---- */
static float implDecode(const struct fmt *f, uint32_t c) {
  switch (f->dtype) {
    case ncclFloat16: return halfToFloat((uint16_t)c);
    case ncclBfloat16: return bf16ToFloat((uint16_t)c);
    default: return fp8ToFloat((uint8_t)c, f->dtype == ncclFloat8e4m3);
  }
}
static uint32_t implEncode(const struct fmt *f, float x) {
  switch (f->dtype) {
    case ncclFloat16: return floatToHalf(x);
    case ncclBfloat16: return floatToBf16(x);
    default: return floatToFp8(x, f->dtype == ncclFloat8e4m3);
  }
}

static int sameCode(const struct fmt *f, uint32_t got, uint32_t want) {
  if (isNanCode(f, want)) return isNanCode(f, got);
  return got == want;
}

static void checkDecode(const struct fmt *f) {
  for (uint32_t c = 0; c < codeCount(f); c++) {
    double want = refDecode(f, c);
    float got = implDecode(f, c);
    if (isnan(want) ? !isnan(got) : (got != (float)want || !signbit(got) != !signbit(want)))
      FAIL("%s decode 0x%x: got %a want %a", f->name, c, got, want);
  }
}

static void checkEncodeOne(const struct fmt *f, float x) {
  uint32_t got = implEncode(f, x), want = refEncode(f, x);
  if (!sameCode(f, got, want)) FAIL("%s encode %a (%g): got 0x%x want 0x%x", f->name, x, x, got, want);
}

static void checkEncode(const struct fmt *f) {
  uint32_t mag = signBit(f);
  for (uint32_t c = 0; c + 1 < mag; c++) {
    if (isNanCode(f, c) || isNanCode(f, c + 1)) continue;
    double lo = refDecode(f, c), hi = refDecode(f, c + 1);
    if (isinf(hi)) hi = lo + (lo - refDecode(f, c - 1)); /* the next value the format would have */
    double mid = (lo + hi) / 2;                         /* the tie */
    float pts[] = {(float)lo, (float)mid, (float)hi};
    for (int s = 0; s < 2; s++)
      for (int k = 0; k < 3; k++) {
        float v = s ? -pts[k] : pts[k];
        if ((double)fabsf(v) != fabs(k == 0 ? lo : k == 1 ? mid : hi) && k == 1) continue; /* tie not a float */
        checkEncodeOne(f, v);
        checkEncodeOne(f, nextafterf(v, INFINITY));
        checkEncodeOne(f, nextafterf(v, -INFINITY));
      }
  }
  float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN,
                      FLT_TRUE_MIN, -FLT_TRUE_MIN, 1e-30f, 1e30f, 65504.0f, 65520.0f, 65519.99f, 448.0f,
                      464.0f, 480.0f, 57344.0f, 61440.0f, 1e-8f, 5.96e-8f, 2.98e-8f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) checkEncodeOne(f, specials[i]);
  uint64_t state = 0x9e3779b97f4a7c15ull ^ (uint64_t)f->dtype;
  for (int i = 0; i < 1000000; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t bits = (uint32_t)(state >> 32);
    checkEncodeOne(f, bitsToFloat(bits));
  }
}

/* ---- reductions ---- */
static double refMax(double a, double b) { return isnan(a) ? b : isnan(b) ? a : (a > b ? a : b); }
static double refMin(double a, double b) { return isnan(a) ? b : isnan(b) ? a : (a < b ? a : b); }

static void storeCode(const struct fmt *f, void *p, size_t i, uint32_t c) {
  if (f->ebits + f->mbits == 15) ((uint16_t *)p)[i] = (uint16_t)c;
  else ((uint8_t *)p)[i] = (uint8_t)c;
}
static uint32_t loadCode(const struct fmt *f, const void *p, size_t i) {
  return f->ebits + f->mbits == 15 ? ((const uint16_t *)p)[i] : ((const uint8_t *)p)[i];
}

/* Runs one kernel call over pairs (acc[i], in[i]) and checks every result. */
static void checkPairs(const struct fmt *f, int kind, double scale, const uint32_t *acc, const uint32_t *in,
                       size_t n, int copyMode) {
  size_t esz = dtypeSize(f->dtype);
  char *a = malloc(n * esz + 64), *b = malloc(n * esz + 64), *d = malloc(n * esz + 64);
  size_t skew = n % 7; /* unaligned starts */
  char *ap = a + skew * esz, *bp = b + skew * esz, *dp = d + skew * esz;
  for (size_t i = 0; i < n - skew; i++) {
    storeCode(f, ap, i, acc[i]);
    storeCode(f, bp, i, in[i]);
  }
  size_t m = n - skew;
  struct redOp op = {.dtype = f->dtype, .kind = kind, .scaleF = scale};
  if (copyMode) reduceCopy(&op, dp, bp, m, REDUCE_PRE);
  else reduceTwo(&op, dp, ap, bp, m, kind == redPreMulSum ? REDUCE_PRE : 0);
  double s = (float)scale; /* the scalar as a float, not rounded to the type (1/n of avg) */
  for (size_t i = 0; i < m; i++) {
    double x = refDecode(f, acc[i]), y = refDecode(f, in[i]), r;
    /* The product rounds to a float (exact in double: a narrow mantissa
     * times a float's), then as the type would. */
    if (kind == redPreMulSum) y = refDecode(f, refEncode(f, (float)(y * s)));
    if (copyMode) r = y;
    else if (kind == redProd) r = x * y;
    else if (kind == redMax) r = refMax(x, y);
    else if (kind == redMin) r = refMin(x, y);
    else r = x + y;
    uint32_t want = refEncode(f, r), got = loadCode(f, dp, i);
    if (!sameCode(f, got, want))
      FAIL("%s kind %d%s scale %g: 0x%x, 0x%x -> 0x%x, want 0x%x (%a)", f->name, kind, copyMode ? " (copy)" : "",
           scale, acc[i], in[i], got, want, r);
  }
  free(a);
  free(b);
  free(d);
}

static void checkNarrowReductions(const struct fmt *f) {
  uint32_t codes = codeCount(f);
  size_t n = codes <= 256 ? (size_t)codes * codes : 300000;
  uint32_t *acc = malloc(n * sizeof *acc), *in = malloc(n * sizeof *in);
  uint64_t state = 12345 + (uint64_t)f->dtype;
  for (size_t i = 0; i < n; i++) {
    if (codes <= 256) {
      acc[i] = (uint32_t)(i / codes);
      in[i] = (uint32_t)(i % codes);
    } else {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      acc[i] = (uint32_t)(state >> 40) % codes;
      /* a third of the pairs close in magnitude (cancellations, ties) */
      in[i] = i % 3 ? (uint32_t)(state >> 20) % codes : (acc[i] ^ (uint32_t)(state % 8));
    }
  }
  static const int kinds[] = {redSum, redProd, redMax, redMin};
  for (size_t k = 0; k < 4; k++) checkPairs(f, kinds[k], 1.0, acc, in, n, 0);
  double scales[] = {1.0 / 3, 0.5, 1.0 / 7, 3.0, 0.1};
  for (size_t k = 0; k < 5; k++) {
    checkPairs(f, redPreMulSum, scales[k], acc, in, n, 0);
    checkPairs(f, redPreMulSum, scales[k], acc, in, n, 1);
  }
  free(acc);
  free(in);
}

/* ---- native types ---- */
#define CHECK_INT(T, DT, WIDE)                                                                             \
  static void checkInt_##T(void) {                                                                         \
    for (size_t n = 1; n <= 4100; n = n * 3 + 1) {                                                         \
      T *a = malloc(n * sizeof(T) + 8), *b = malloc(n * sizeof(T) + 8), *d = malloc(n * sizeof(T) + 8);   \
      uint64_t st = n;                                                                                     \
      for (size_t i = 0; i < n; i++) {                                                                     \
        st = st * 6364136223846793005ull + 1442695040888963407ull;                                         \
        a[i] = (T)(st >> 13);                                                                              \
        b[i] = (T)(st >> 37);                                                                              \
      }                                                                                                    \
      /* Avg divides by the whole rank count, which T need not hold (int8:                              \
       * 200 ranks are -56 in it, 256 are 0): 3, 200, 256 and 70000 ranks. */                             \
      static const int kinds[] = {redSum, redProd, redMax, redMin, redSumPostDiv, redSumPostDiv,          \
                                  redSumPostDiv, redSumPostDiv, redBand, redBor, redBxor};                \
      static const int64_t divisors[] = {3, 3, 3, 3, 3, 200, 256, 70000, 3, 3, 3};                        \
      for (int k = 0; k < 11; k++) {                                                                       \
        struct redOp op = {.dtype = DT, .kind = kinds[k], .divisor = divisors[k]};                        \
        reduceTwo(&op, d, a, b, n, kinds[k] == redSumPostDiv ? REDUCE_POST : 0);                          \
        for (size_t i = 0; i < n; i++) {                                                                   \
          WIDE x = a[i], y = b[i];                                                                         \
          T want;                                                                                          \
          switch (kinds[k]) {                                                                              \
            case redSum: want = (T)((uint64_t)x + (uint64_t)y); break;                                     \
            case redProd: want = (T)((uint64_t)x * (uint64_t)y); break;                                    \
            case redMax: want = x > y ? a[i] : b[i]; break;                                                \
            case redMin: want = x < y ? a[i] : b[i]; break;                                                \
            case redBand: want = (T)(x & y); break;                                                        \
            case redBor: want = (T)(x | y); break;                                                         \
            case redBxor: want = (T)(x ^ y); break;                                                        \
            default: want = (T)((WIDE)(T)((uint64_t)x + (uint64_t)y) / (WIDE)divisors[k]); break;           \
          }                                                                                                \
          if (d[i] != want) FAIL(#T " kind %d (divisor %lld) n=%zu i=%zu: got %lld want %lld", kinds[k],  \
                                 (long long)divisors[k], n, i, (long long)d[i], (long long)want);         \
        }                                                                                                  \
      }                                                                                                    \
      free(a);                                                                                             \
      free(b);                                                                                             \
      free(d);                                                                                             \
    }                                                                                                      \
  }
CHECK_INT(int8_t, ncclInt8, int64_t)
CHECK_INT(uint8_t, ncclUint8, uint64_t)
CHECK_INT(int32_t, ncclInt32, int64_t)
CHECK_INT(uint32_t, ncclUint32, uint64_t)
CHECK_INT(int64_t, ncclInt64, int64_t)
CHECK_INT(uint64_t, ncclUint64, uint64_t)

/* float and double: the sum and product rounded once (exact in the wider
 * type for float), max/min as NCCL's (the non-NaN one), PreMulSum as a
 * product rounded to the type, then the sum. */
#define CHECK_FLOAT(T, DT, WIDE)                                                                           \
  static void checkFloat_##T(void) {                                                                       \
    for (size_t n = 1; n <= 4100; n = n * 3 + 1) {                                                         \
      T *a = malloc(n * sizeof(T) + 8), *b = malloc(n * sizeof(T) + 8), *d = malloc(n * sizeof(T) + 8);   \
      uint64_t st = n * 7;                                                                                 \
      for (size_t i = 0; i < n; i++) {                                                                     \
        st = st * 6364136223846793005ull + 1442695040888963407ull;                                         \
        a[i] = (T)ldexp((double)(int32_t)(st >> 32), (int)(st % 40) - 20);                                 \
        b[i] = i % 17 == 0 ? (T)NAN : i % 19 == 0 ? (T)INFINITY : (T)ldexp((double)(int32_t)st, (int)(st % 30) - 15); \
      }                                                                                                    \
      static const int kinds[] = {redSum, redProd, redMax, redMin, redPreMulSum};                         \
      for (int k = 0; k < 5; k++) {                                                                        \
        struct redOp op = {.dtype = DT, .kind = kinds[k], .scaleF = 1.0 / 3};                             \
        reduceTwo(&op, d, a, b, n, kinds[k] == redPreMulSum ? REDUCE_PRE : 0);                            \
        for (size_t i = 0; i < n; i++) {                                                                   \
          WIDE x = a[i], y = b[i];                                                                         \
          T want, s = (T)(1.0 / 3);                                                                        \
          switch (kinds[k]) {                                                                              \
            case redSum: want = (T)(x + y); break;                                                         \
            case redProd: want = (T)(x * y); break;                                                        \
            case redMax: want = (T)refMax(x, y); break;                                                    \
            case redMin: want = (T)refMin(x, y); break;                                                    \
            default: want = (T)(x + (WIDE)(T)(y * s)); break;                                              \
          }                                                                                                \
          if (memcmp(&d[i], &want, sizeof(T)) != 0 && !(isnan(d[i]) && isnan(want)))                     \
            FAIL(#T " kind %d n=%zu i=%zu: %a, %a -> %a want %a", kinds[k], n, i, (double)a[i], (double)b[i], \
                 (double)d[i], (double)want);                                                              \
        }                                                                                                  \
      }                                                                                                    \
      free(a);                                                                                             \
      free(b);                                                                                             \
      free(d);                                                                                             \
    }                                                                                                      \
  }
CHECK_FLOAT(float, ncclFloat32, double)
CHECK_FLOAT(double, ncclFloat64, double)

/* copyStreaming is memcpy: every length up to a few lines and beyond, at
 * every alignment of source and destination, nothing written outside. */
static void checkCopyStreaming(void) {
  enum { MAXLEN = 600, GUARD = 64 };
  unsigned char src[MAXLEN + 64], dst[MAXLEN + 64 + 2 * GUARD];
  for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 7 + 3);
  for (size_t len = 0; len <= MAXLEN; len += len < 200 ? 1 : 37)
    for (size_t so = 0; so < 20; so++)
      for (size_t dof = 0; dof < 20; dof++) {
        memset(dst, 0xa5, sizeof dst);
        copyStreaming(dst + GUARD + dof, src + so, len);
        for (size_t i = 0; i < sizeof dst; i++) {
          size_t at = GUARD + dof;
          unsigned char want = i >= at && i < at + len ? src[so + i - at] : 0xa5;
          if (dst[i] != want) {
            FAIL("copyStreaming len %zu src+%zu dst+%zu: byte %zu is %u, want %u", len, so, dof, i, dst[i], want);
            return;
          }
        }
      }
}

/* reduceTwoStreaming and reduceTwoBoth (streaming or not) give reduceTwo's
 * bytes exactly, in each output, for every type and reduction, at lengths
 * around their block (8 KiB), with the output at every alignment, out of
 * place and in place (dst = acc; for reduceTwoBoth's second output, dst2 =
 * acc: a peer's input that gets its result in place), and write nothing
 * outside their outputs. Inputs are finite (the exponent's top bit
 * cleared): NaN payloads are not the question here. */
static void checkReduceTwoStreaming(void) {
  enum { MAXB = 3 * 8192 + 256, GUARD = 64, SPAN = MAXB + 2 * GUARD + 64 };
  static unsigned char acc[MAXB], in[MAXB], want[SPAN], got[SPAN], want2[SPAN], got2[SPAN];
  const int kinds[] = {redSum, redProd, redMax, redMin, redPreMulSum, redSumPostDiv, redBand, redBor, redBxor};
  const int flagsOf[] = {0, 0, 0, 0, REDUCE_PRE, REDUCE_POST, 0, 0, 0};
  const char *ways[] = {"reduceTwoStreaming", "reduceTwoBoth streaming", "reduceTwoBoth"};
  srand(7);
  for (int dt = 0; dt < ncclNumTypes; dt++) {
    size_t esz = dtypeSize(dt);
    for (size_t i = 0; i < MAXB; i++) acc[i] = (unsigned char)rand(), in[i] = (unsigned char)rand();
    if (dtypeIsFloat(dt)) /* clear the exponent's top bit: no infinities or NaNs */
      for (size_t i = 0; i + esz <= MAXB; i += esz) acc[i + esz - 1] &= 0xbf, in[i + esz - 1] &= 0xbf;
    for (int k = 0; k < 9; k++) {
      if (kinds[k] == redSumPostDiv && dtypeIsFloat(dt)) continue; /* float avg is PreMulSum */
      if (kinds[k] >= redBand && dtypeIsFloat(dt)) continue;       /* bitwise: integers only */
      struct redOp op = {.dtype = dt, .kind = kinds[k], .scaleF = 0.375, .scaleI = 3, .divisor = 3};
      const size_t lens[] = {0, 1, 7, 8192 / esz - 1, 8192 / esz, 8192 / esz + 1, 2 * 8192 / esz + 13, MAXB / esz};
      for (int l = 0; l < 8; l++)
        for (size_t dof = 0; dof < 64; dof += dof < 16 ? esz : 16)
          for (int way = 0; way < 3; way++) {
            size_t n = lens[l], nb = n * esz, at = GUARD + dof, at2 = GUARD + (64 - dof) % 64;
            for (int inPlace = 0; inPlace < 2; inPlace++) {
              memset(want, 0xa5, sizeof want), memset(got, 0xa5, sizeof got);
              memset(want2, 0x5a, sizeof want2), memset(got2, 0x5a, sizeof got2);
              /* in place: the first output is acc (way 0 and 1), or the second is (way 2) */
              unsigned char *accGot = inPlace ? (way == 2 ? got2 + at2 : got + at) : acc;
              if (inPlace) memcpy(accGot, acc, nb);
              reduceTwo(&op, want + at, acc, in, n, flagsOf[k]);
              if (way) reduceTwo(&op, want2 + at2, acc, in, n, flagsOf[k]);
              if (way == 0) reduceTwoStreaming(&op, got + at, accGot, in, n, flagsOf[k]);
              else reduceTwoBoth(&op, got + at, got2 + at2, accGot, in, n, flagsOf[k], way == 1);
              for (int o = 0; o < 2; o++) {
                const unsigned char *w = o ? want2 : want, *g = o ? got2 : got;
                if (memcmp(w, g, SPAN) != 0) {
                  size_t i = 0;
                  while (w[i] == g[i]) i++;
                  FAIL("%s %s kind %d n %zu dst+%zu%s: output %d's byte %zu is %u, want %u", ways[way],
                       dtypeName(dt), kinds[k], n, dof, inPlace ? " in place" : "", o + 1, i, g[i], w[i]);
                  return;
                }
              }
            }
          }
    }
  }
}

int main(void) {
  checkCopyStreaming();
  checkReduceTwoStreaming();
  const struct fmt *fmts[] = {&half, &bf16, &e4m3, &e5m2};
  for (int i = 0; i < 4; i++) {
    checkDecode(fmts[i]);
    checkEncode(fmts[i]);
    checkNarrowReductions(fmts[i]);
  }
  checkInt_int8_t();
  checkInt_uint8_t();
  checkInt_int32_t();
  checkInt_uint32_t();
  checkInt_int64_t();
  checkInt_uint64_t();
  checkFloat_float();
  checkFloat_double();
  printf("test_kernels: %s (%d mismatches)\n", failures ? "FAILED" : "passed", failures);
  return failures != 0;
}
