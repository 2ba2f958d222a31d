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
 * e5m2 (bias 15, IEEE-like, max 57344); table-driven, in fp8.c. */
float fp8ToFloat(uint8_t v, int e4m3);
uint8_t floatToFp8(float f, int e4m3);
#endif
