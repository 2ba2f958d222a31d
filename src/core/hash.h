/* FNV-1a, the one hash chorus uses for identities (a communicator's id, a
 * host, a set of unique ids): cheap, and the same on every rank. */
#ifndef CHORUS_CORE_HASH_H
#define CHORUS_CORE_HASH_H
#include <stddef.h>
#include <stdint.h>

#define FNV1A_INIT 0xcbf29ce484222325ull

/* The n bytes at p hashed into h (FNV1A_INIT to start). */
static inline uint64_t fnv1aBytes(uint64_t h, const void *p, size_t n) {
  for (const unsigned char *c = p; n > 0; n--, c++) h = (h ^ *c) * 0x100000001b3ull;
  return h;
}

/* The string s (without its terminator) hashed into h. */
static inline uint64_t fnv1a(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

#endif
