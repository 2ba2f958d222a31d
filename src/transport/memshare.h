/* Memory that ranks on one host can map (ncclMemAlloc's): each allocation
 * is a memfd of its own, mapped shared, so that a local peer given the
 * descriptor (the shared-memory transport hands it over, once) reads the
 * data where it lies at memory speed: one copy instead of the FIFO's two,
 * without the kernel's (CMA) and where the kernel forbids CMA. Every
 * allocation has an id never used again in this process, so a peer's
 * mapping of a freed allocation is never taken for a later one at the same
 * address. A forked child gets private copies (memfds of its own), as
 * with malloc'd memory. */
#ifndef CHORUS_TRANSPORT_MEMSHARE_H
#define CHORUS_TRANSPORT_MEMSHARE_H
#include <stddef.h>
#include <stdint.h>

struct shareRegion {
  uint64_t id; /* never 0 */
  uintptr_t base;
  size_t bytes;
};

/* bytes of zeroed memory that local peers can map (whole pages), or NULL
 * when no memfd can be had (errno says why), or when a quarter of the
 * process's descriptors (at most 1024) already hold such memory. */
void *shareAlloc(size_t bytes);
/* Frees what shareAlloc gave: 1; 0 when p is not such memory. Peers told
 * of it are told it is gone (shareForgetHook). */
int shareFree(void *p);
/* 1 with *r set when [p, p + bytes) lies in one allocation of shareAlloc. */
int shareFind(const void *p, size_t bytes, struct shareRegion *r);
/* A new descriptor of allocation id (the caller closes it), or -1 when it
 * is gone. */
int shareDupFd(uint64_t id);
/* Called by shareFree with the id of the allocation freed (after it is
 * unmapped, outside any lock of this file): the shared-memory transport
 * tells the peers it handed it to. One hook per process. */
void shareSetForgetHook(void (*hook)(uint64_t id));

#endif
