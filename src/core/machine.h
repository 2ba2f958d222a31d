/* What identifies the machine a process runs on, below anything that
 * names a host: the running kernel's boot id, the same in every network
 * namespace and container of one machine. */
#ifndef CHORUS_CORE_MACHINE_H
#define CHORUS_CORE_MACHINE_H
#include <stdint.h>

#define FNV1A_INIT 0xcbf29ce484222325ull
/* FNV-1a of the string s, continuing from h (FNV1A_INIT to start). */
static inline uint64_t fnv1a(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* The kernel's boot id hashed into h (FNV-1a); h unchanged when it cannot
 * be read. */
uint64_t machineBootHash(uint64_t h);

#endif
