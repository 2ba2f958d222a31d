/* chorus's host-CUDA shim: CUDA's 16-bit float, __half, for host code.
 * NCCL's nccl.h includes cuda_fp16.h, so programs written for NCCL declare
 * __half buffers and fill them with __float2half on the host; this header
 * gives them the type (IEEE binary16, as ncclFloat16 is) and the host
 * conversions, rounding to nearest even as CUDA's do; in C++, arithmetic
 * goes through float. Device intrinsics and __half2 are not here. */
#ifndef CHORUS_HOST_CUDA_FP16_H
#define CHORUS_HOST_CUDA_FP16_H
#pragma GCC system_header /* as a toolkit's headers: no -pedantic or -Wold-style-cast noise in the user's build */
#include <stdint.h>
#include <string.h> /* memcpy, which CUDA's cuda_fp16.hpp brings in too */

/* C: static inline. C++: inline, so that the types' member functions
 * (inline, external linkage) call nothing with internal linkage. */
#ifdef __cplusplus
#define CHORUS_HC_INLINE inline
#else
#define CHORUS_HC_INLINE static inline
#endif

typedef struct __half_raw {
  unsigned short x;
} __half_raw;

CHORUS_HC_INLINE unsigned short chorusFloatToHalfBits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN stays NaN */
  if (a >= 0x47800000u) return (unsigned short)(sign | 0x7c00u);                      /* 2^16 and up: inf */
  uint32_t h, rem, half;
  if (a >= 0x38800000u) { /* a normal half: drop 13 mantissa bits */
    h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
    rem = a & 0x1fffu;
    half = 0x1000u;
  } else if (a >= 0x33000000u) { /* a subnormal half: units of 2^-24 */
    uint32_t shift = 126u - (a >> 23), mant = (a & 0x7fffffu) | 0x800000u;
    h = mant >> shift;
    rem = mant & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
  } else {
    return (unsigned short)sign; /* below 2^-25: zero */
  }
  if (rem > half || (rem == half && (h & 1u))) h++; /* a carry rounds up into the exponent, or to inf */
  return (unsigned short)(sign | h);
}

CHORUS_HC_INLINE float chorusHalfBitsToFloat(unsigned short h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0) {
    float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    return sign ? -v : v;
  }
  x = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

/* A double (or a wide integer) to float, rounded to odd: truncated, with
 * the last bit set where that dropped anything. Rounding that float to the
 * nearest 16-bit value then gives the double's nearest one (the float has
 * more than two bits beyond the 16-bit type's), where rounding to nearest
 * twice could land on the wrong side of a tie. */
CHORUS_HC_INLINE float chorusDoubleToFloatOdd(double d) {
  float f = (float)d;
  if (!(f == f) || (double)f == d) return f; /* NaN, or exact */
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if (d > 0 ? (double)f > d : (double)f < d) x -= 1; /* rounded away from zero (inf included): one step back */
  x |= 1u;
  memcpy(&f, &x, sizeof f);
  return f;
}

#ifdef __cplusplus
/* The members __half and __nv_bfloat16 (cuda_bf16.h) share, as CUDA's on
 * the host: conversions from every arithmetic type (a double or a wide
 * integer through a float rounded to odd, so it rounds once), from and to
 * the raw type, to float, and compound assignment through float. */
#define CHORUS_HC_16BIT_MEMBERS(T, Raw, toBits, toFloat)                            \
  unsigned short __x;                                                               \
  T() = default;                                                                    \
  T(float f) : __x(toBits(f)) {}                                                    \
  T(double d) : __x(toBits(chorusDoubleToFloatOdd(d))) {}                           \
  T(short i) : T((double)i) {}                                                      \
  T(unsigned short i) : T((double)i) {}                                             \
  T(int i) : T((double)i) {}                                                        \
  T(unsigned int i) : T((double)i) {}                                               \
  T(long i) : T((double)i) {}                                                       \
  T(unsigned long i) : T((double)i) {}                                              \
  T(long long i) : T((double)i) {}                                                  \
  T(unsigned long long i) : T((double)i) {}                                         \
  T(const Raw &r) : __x(r.x) {}                                                     \
  operator float() const { return toFloat(__x); }                                   \
  operator Raw() const { return Raw{__x}; }                                         \
  T &operator+=(const T &o) { return *this = T(float(*this) + float(o)); }          \
  T &operator-=(const T &o) { return *this = T(float(*this) - float(o)); }          \
  T &operator*=(const T &o) { return *this = T(float(*this) * float(o)); }          \
  T &operator/=(const T &o) { return *this = T(float(*this) / float(o)); }

struct __half {
  CHORUS_HC_16BIT_MEMBERS(__half, __half_raw, chorusFloatToHalfBits, chorusHalfBitsToFloat)
};
typedef __half half;
#else
typedef struct __half {
  unsigned short __x;
} __half;
#endif

CHORUS_HC_INLINE __half __float2half(float f) {
  __half h;
  h.__x = chorusFloatToHalfBits(f);
  return h;
}
CHORUS_HC_INLINE __half __float2half_rn(float f) { return __float2half(f); }
CHORUS_HC_INLINE float __half2float(__half h) { return chorusHalfBitsToFloat(h.__x); }
CHORUS_HC_INLINE unsigned short __half_as_ushort(__half h) { return h.__x; }
CHORUS_HC_INLINE __half __ushort_as_half(unsigned short x) {
  __half h;
  h.__x = x;
  return h;
}

#endif
