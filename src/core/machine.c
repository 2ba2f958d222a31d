#include "core/machine.h"

#include <stdio.h>
#include <sys/stat.h>

uint64_t machineBootHash(uint64_t h) {
  char boot[64] = "";
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (!f) return h;
  if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
  fclose(f);
  return fnv1a(h, boot);
}

uint64_t machinePidNamespace(void) {
  struct stat st;
  uint64_t boot = machineBootHash(FNV1A_INIT);
  if (boot == FNV1A_INIT || stat("/proc/self/ns/pid", &st) != 0) return 0;
  uint64_t ids[2] = {(uint64_t)st.st_dev, (uint64_t)st.st_ino};
  uint64_t h = fnv1aBytes(boot, ids, sizeof ids);
  return h ? h : 1;
}
