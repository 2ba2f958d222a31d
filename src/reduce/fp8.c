/* fp8 conversions: decoding is one table lookup; encoding rounds the float's
 * bits to nearest, ties to even, and saturates above the largest finite
 * value (as NCCL's reductions do). Both agree with the formats' definition
 * (fp8Definition) on every code and on sampled floats of every exponent. */
#include <math.h>
#include <stdint.h>

#include "reduce/floatconv.h"

static float fp8Value[2][256]; /* [e4m3?][code] */
static int fp8Finite[2];       /* finite non-negative codes: 0 .. fp8Finite-1 */

/* The definition of the formats (bias 7 / 15; e4m3 has no infinity and one
 * NaN per sign, e5m2 is IEEE-like). */
static float fp8Definition(uint8_t v, int e4m3) {
  int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  int sign = v >> 7, exp = (v >> mbits) & (e4m3 ? 0xf : 0x1f), man = v & ((1 << mbits) - 1);
  float r;
  if (e4m3 && exp == 0xf && man == 7) return NAN;
  if (!e4m3 && exp == 0x1f) return man ? NAN : (sign ? -INFINITY : INFINITY);
  if (exp == 0) r = ldexpf((float)man, 1 - bias - mbits);
  else r = ldexpf((float)(man | (1 << mbits)), exp - bias - mbits);
  return sign ? -r : r;
}

/* Filled when the library loads, so the conversions are plain lookups. */
__attribute__((constructor)) static void fp8Init(void) {
  for (int k = 0; k < 2; k++) {
    for (int c = 0; c < 256; c++) fp8Value[k][c] = fp8Definition((uint8_t)c, k);
    fp8Finite[k] = k ? 0x7f : 0x7c;
  }
}

float fp8ToFloat(uint8_t v, int e4m3) {
  return fp8Value[e4m3 != 0][v];
}

uint8_t floatToFp8(float f, int e4m3) {
  int k = e4m3 != 0;
  if (isnan(f)) return k ? 0x7f : 0x7e;
  uint8_t sign = signbit(f) ? 0x80 : 0;
  float a = fabsf(f);
  int top = fp8Finite[k] - 1, mbits = k ? 3 : 2, bias = k ? 7 : 15;
  if (a >= fp8Value[k][top]) return sign | (uint8_t)top;
  uint32_t u = floatToBits(a);
  int code;
  if ((int)(u >> 23) - 127 >= 1 - bias) {
    /* Normal: round the float's mantissa to mbits, ties to even; a carry
     * moves into the exponent as it should. Then rebias the exponent. */
    int shift = 23 - mbits;
    uint32_t r = (u + ((1u << (shift - 1)) - 1) + ((u >> shift) & 1)) >> shift;
    code = (int)r - ((127 - bias) << mbits);
  } else {
    /* Subnormal: a count of the smallest step, rounded to nearest even. */
    code = (int)nearbyintf(ldexpf(a, bias - 1 + mbits));
  }
  if (code > top) code = top;
  return sign | (uint8_t)code;
}
