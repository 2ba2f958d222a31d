#include "core/machine.h"

#include <stdio.h>

uint64_t machineBootHash(uint64_t h) {
  char boot[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return h;
  if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
  fclose(f);
  return fnv1a(h, boot);
}
