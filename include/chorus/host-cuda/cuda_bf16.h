/* chorus's host-CUDA shim: CUDA's bfloat16, __nv_bfloat16, for host code
 * (NCCL's nccl.h includes cuda_bf16.h; see cuda_fp16.h): the type, as
 * ncclBfloat16 is, and the host conversions, rounding to nearest even as
 * CUDA's do. */
#ifndef CHORUS_HOST_CUDA_BF16_H
#define CHORUS_HOST_CUDA_BF16_H
#pragma GCC system_header /* see cuda_fp16.h */
#include <stdint.h>
#include <string.h>

#include "cuda_fp16.h" /* chorusDoubleToFloatOdd, CHORUS_HC_16BIT_MEMBERS */

typedef struct __nv_bfloat16_raw {
  unsigned short x;
} __nv_bfloat16_raw;

CHORUS_HC_INLINE unsigned short chorusFloatToBf16Bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u); /* NaN stays (quiet) NaN */
  x += 0x7fffu + ((x >> 16) & 1u);                                                 /* to nearest, ties to even */
  return (unsigned short)(x >> 16);
}

CHORUS_HC_INLINE float chorusBf16BitsToFloat(unsigned short b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

#ifdef __cplusplus
struct __nv_bfloat16 {
  CHORUS_HC_16BIT_MEMBERS(__nv_bfloat16, __nv_bfloat16_raw, chorusFloatToBf16Bits, chorusBf16BitsToFloat)
};
typedef __nv_bfloat16 nv_bfloat16;
#else
typedef struct __nv_bfloat16 {
  unsigned short __x;
} __nv_bfloat16;
#endif

CHORUS_HC_INLINE __nv_bfloat16 __float2bfloat16(float f) {
  __nv_bfloat16 b;
  b.__x = chorusFloatToBf16Bits(f);
  return b;
}
CHORUS_HC_INLINE __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
CHORUS_HC_INLINE float __bfloat162float(__nv_bfloat16 b) { return chorusBf16BitsToFloat(b.__x); }
CHORUS_HC_INLINE unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
CHORUS_HC_INLINE __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) {
  __nv_bfloat16 b;
  b.__x = x;
  return b;
}

#endif
