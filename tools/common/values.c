#include "values.h"

/* Decodes an fp8 code from its definition: e4m3 (bias 7, S.1111.111 = NaN,
 * no infinities) and e5m2 (bias 15, IEEE-style). */
double fp8Decode(int t, uint8_t c) {
  int e4 = t == ncclFloat8e4m3;
  int mb = e4 ? 3 : 2, eb = e4 ? 4 : 5, bias = e4 ? 7 : 15;
  int s = c >> 7, e = (c >> mb) & ((1 << eb) - 1), m = c & ((1 << mb) - 1);
  double v;
  if (e4 && e == 15 && m == 7) return NAN;
  if (!e4 && e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
  if (e == 0) v = ldexp(m, 1 - bias - mb);
  else v = ldexp((1 << mb) + m, e - bias - mb);
  return s ? -v : v;
}

/* Finds the code of an exactly representable value by searching all 256
 * codes (obviously right), caching the small integers the tests use. */
uint8_t fp8Encode(int t, double v) {
  static int ready[2];
  static uint8_t cache[2][65];
  int k = t == ncclFloat8e4m3 ? 0 : 1;
  if (!ready[k]) {
    for (int x = 0; x <= 64; x++)
      for (int c = 0; c < 128; c++)
        if (fp8Decode(t, (uint8_t)c) == x) {
          cache[k][x] = (uint8_t)c;
          break;
        }
    ready[k] = 1;
  }
  if (v >= 0 && v <= 64 && v == (int)v) return cache[k][(int)v];
  for (int c = 0; c < 256; c++)
    if (fp8Decode(t, (uint8_t)c) == v) return (uint8_t)c;
  return 0x7f;
}
