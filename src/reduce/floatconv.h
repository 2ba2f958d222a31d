/* Conversions between float and the 16- and 8-bit float formats, rounding to
 * nearest even. fp8 saturates to the largest finite value, as NCCL's
 * reductions do (__NV_SATFINITE). */
#ifndef CHORUS_REDUCE_FLOATCONV_H
#define CHORUS_REDUCE_FLOATCONV_H
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float bitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t floatToBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float halfToFloat(uint16_t h) {
  _Float16 x;
  memcpy(&x, &h, 2);
  return (float)x;
}
static inline uint16_t floatToHalf(float f) {
  _Float16 x = (_Float16)f;
  uint16_t h;
  memcpy(&h, &x, 2);
  return h;
}

static inline float bf16ToFloat(uint16_t b) { return bitsToFloat((uint32_t)b << 16); }
static inline uint16_t floatToBf16(float f) {
  uint32_t u = floatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* fp8: e4m3 (bias 7, no infinity, NaN = S.1111.111, max 448) and
 * e5m2 (bias 15, IEEE-like, max 57344). */
static inline float fp8ToFloat(uint8_t v, int e4m3) {
  int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  int sign = v >> 7, exp = (v >> mbits) & (e4m3 ? 0xf : 0x1f), man = v & ((1 << mbits) - 1);
  float r;
  if (e4m3 && exp == 0xf && man == 7) return NAN;
  if (!e4m3 && exp == 0x1f) return man ? NAN : (sign ? -INFINITY : INFINITY);
  if (exp == 0)
    r = ldexpf((float)man, 1 - bias - mbits);
  else
    r = ldexpf((float)(man | (1 << mbits)), exp - bias - mbits);
  return sign ? -r : r;
}

static inline uint8_t floatToFp8(float f, int e4m3) {
  int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  float maxv = e4m3 ? 448.0f : 57344.0f;
  uint8_t sign = signbit(f) ? 0x80 : 0;
  if (isnan(f)) return e4m3 ? 0x7f : 0x7e;
  float a = fabsf(f);
  if (a >= maxv) return sign | (e4m3 ? 0x7e : 0x7b); /* saturate to finite */
  if (a == 0.0f) return sign;
  int e;
  frexpf(a, &e); /* a = m * 2^e, m in [0.5,1): unbiased exponent e-1 */
  int E = e - 1;
  if (E < 1 - bias) E = 1 - bias; /* subnormal range shares the smallest exponent */
  float q = ldexpf(1.0f, E - mbits);
  float r = nearbyintf(a / q) * q; /* ties to even under the default mode */
  if (r >= maxv) return sign | (e4m3 ? 0x7e : 0x7b);
  if (r == 0.0f) return sign;
  frexpf(r, &e);
  E = e - 1;
  if (E < 1 - bias) { /* subnormal */
    int man = (int)(r / ldexpf(1.0f, 1 - bias - mbits));
    return sign | (uint8_t)man;
  }
  int man = (int)(r / ldexpf(1.0f, E - mbits)) - (1 << mbits);
  return sign | (uint8_t)(((E + bias) << mbits) | man);
}
#endif
