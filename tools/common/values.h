/* Typed values for the tests and the perf tools, written independently of
 * the library's kernels: encode exactly representable values (small
 * integers) in any datatype, and read any datatype back as double. */
#ifndef CHORUS_TOOLS_VALUES_H
#define CHORUS_TOOLS_VALUES_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nccl.h"

static inline size_t typeSize(int t) {
  static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return s[t];
}
static inline int typeIsFloat(int t) { return t >= ncclFloat16; }
static inline int typeIsFp8(int t) { return t == ncclFloat8e4m3 || t == ncclFloat8e5m2; }

/* Encodes a small non-negative integer (or a value exactly representable)
 * as the datatype. */
static inline void putValue(int t, void *buf, size_t i, double v) {
  switch (t) {
    case ncclInt8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case ncclFloat16: ((_Float16 *)buf)[i] = (_Float16)v; break;
    case ncclFloat32: ((float *)buf)[i] = (float)v; break;
    case ncclFloat64: ((double *)buf)[i] = v; break;
    case ncclBfloat16: {
      float f = (float)v;
      uint32_t u;
      memcpy(&u, &f, 4);
      ((uint16_t *)buf)[i] = (uint16_t)(u >> 16); /* exact for the values used */
      break;
    }
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: {
      extern uint8_t fp8Encode(int t, double v);
      ((uint8_t *)buf)[i] = fp8Encode(t, v);
      break;
    }
  }
}

static inline double getValue(int t, const void *buf, size_t i) {
  switch (t) {
    case ncclInt8: return ((const int8_t *)buf)[i];
    case ncclUint8: return ((const uint8_t *)buf)[i];
    case ncclInt32: return ((const int32_t *)buf)[i];
    case ncclUint32: return ((const uint32_t *)buf)[i];
    case ncclInt64: return (double)((const int64_t *)buf)[i];
    case ncclUint64: return (double)((const uint64_t *)buf)[i];
    case ncclFloat16: return (double)((const _Float16 *)buf)[i];
    case ncclFloat32: return ((const float *)buf)[i];
    case ncclFloat64: return ((const double *)buf)[i];
    case ncclBfloat16: {
      uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
      float f;
      memcpy(&f, &u, 4);
      return f;
    }
    default: {
      extern double fp8Decode(int t, uint8_t c);
      return fp8Decode(t, ((const uint8_t *)buf)[i]);
    }
  }
}
#endif
