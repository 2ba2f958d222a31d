/* chorus-info: what this build is and which parameters are in effect.
 *   chorus-info [--params] */
#include <stdio.h>
#include <string.h>

#include "chorus.h"
#include "core/param.h"

int main(int argc, char **argv) {
  int v, c;
  ncclGetVersion(&v);
  chorusGetVersion(&c);
  printf("chorus %d.%d.%d, NCCL API %d\n", c / 10000, c / 100 % 100, c % 100, v);
  if (argc > 1 && strcmp(argv[1], "--params") == 0) paramPrintAll(stdout);
  return 0;
}
