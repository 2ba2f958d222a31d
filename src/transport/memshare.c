#define _GNU_SOURCE
#include "transport/memshare.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

struct shareEntry {
  struct shareRegion r;
  int fd;
};

static pthread_mutex_t shareLock = PTHREAD_MUTEX_INITIALIZER;
static struct shareEntry *entries;
static int nentries, capEntries;
static uint64_t nextId = 1;
static void (*forgetHook)(uint64_t id);
static pthread_once_t atforkOnce = PTHREAD_ONCE_INIT;

/* In a forked child (one thread; the parent's lock is taken around fork):
 * each allocation moves to a memfd of the child's own, with the same
 * contents at the same address, so that parent and child no longer share
 * it (malloc's semantics), and the child's peers can still map it. Where
 * that cannot be had (no memory), the child's view becomes private copy on
 * write (its writes stay its own; the parent's show through only on pages
 * the child has not written), which it no longer hands to peers. The parent's
 * communicators are not the child's: no hook until the child makes one. */
static int sharePrivatize(struct shareEntry *e) {
  int fd = memfd_create("chorus-mem", MFD_CLOEXEC);
  if (fd < 0) return 0;
  void *p = ftruncate(fd, (off_t)e->r.bytes) == 0 ? mmap(NULL, e->r.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                                  : MAP_FAILED;
  if (p == MAP_FAILED) {
    close(fd);
    return 0;
  }
  memcpy(p, (void *)e->r.base, e->r.bytes);
  if (mremap(p, e->r.bytes, e->r.bytes, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)e->r.base) == MAP_FAILED) {
    munmap(p, e->r.bytes);
    close(fd);
    return 0;
  }
  close(e->fd);
  e->fd = fd;
  e->r.id = nextId++;
  return 1;
}

static void shareChild(void) {
  forgetHook = NULL;
  for (int i = 0; i < nentries; i++) {
    struct shareEntry *e = &entries[i];
    if (e->fd < 0 || sharePrivatize(e)) continue;
    /* MAP_PRIVATE|MAP_FIXED replaces the shared mapping in one step; the
     * entry stays (without a descriptor) so that ncclMemFree unmaps it. */
    mmap((void *)e->r.base, e->r.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, e->fd, 0);
    close(e->fd);
    e->fd = -1;
  }
  pthread_mutex_unlock(&shareLock);
}
static void sharePrepare(void) { pthread_mutex_lock(&shareLock); }
static void shareParent(void) { pthread_mutex_unlock(&shareLock); }
static void shareAtfork(void) { pthread_atfork(sharePrepare, shareParent, shareChild); }

/* Each allocation keeps its descriptor open (to hand it over later): at
 * most a quarter of the process's descriptors go to them, so that many
 * small allocations never starve its sockets and files; beyond that,
 * ncclMemAlloc gives plain memory. */
static int shareMaxEntries(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1024;
  return rl.rlim_cur / 4 < 1024 ? (int)(rl.rlim_cur / 4) : 1024;
}

void *shareAlloc(size_t bytes) {
  pthread_once(&atforkOnce, shareAtfork);
  if (__atomic_load_n(&nentries, __ATOMIC_RELAXED) >= shareMaxEntries()) {
    errno = EMFILE;
    return NULL;
  }
  long page = sysconf(_SC_PAGESIZE);
  size_t rounded = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
  if (rounded < bytes) {
    errno = ENOMEM;
    return NULL;
  }
  int fd = memfd_create("chorus-mem", MFD_CLOEXEC);
  if (fd < 0) return NULL;
  void *p = ftruncate(fd, (off_t)rounded) == 0 ? mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                               : MAP_FAILED;
  if (p == MAP_FAILED) {
    int err = errno;
    close(fd);
    errno = err;
    return NULL;
  }
  pthread_mutex_lock(&shareLock);
  if (nentries == capEntries) {
    int cap = capEntries ? 2 * capEntries : 16;
    struct shareEntry *grown = realloc(entries, sizeof *grown * (size_t)cap);
    if (!grown) {
      pthread_mutex_unlock(&shareLock);
      munmap(p, rounded);
      close(fd);
      errno = ENOMEM;
      return NULL;
    }
    entries = grown;
    capEntries = cap;
  }
  entries[nentries] = (struct shareEntry){{nextId++, (uintptr_t)p, rounded}, fd};
  __atomic_store_n(&nentries, nentries + 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&shareLock);
  return p;
}

int shareFree(void *p) {
  pthread_mutex_lock(&shareLock);
  int i = 0;
  while (i < nentries && entries[i].r.base != (uintptr_t)p) i++;
  if (i == nentries) {
    pthread_mutex_unlock(&shareLock);
    return 0;
  }
  struct shareEntry e = entries[i];
  entries[i] = entries[nentries - 1];
  __atomic_store_n(&nentries, nentries - 1, __ATOMIC_RELAXED);
  void (*hook)(uint64_t) = forgetHook;
  pthread_mutex_unlock(&shareLock);
  munmap(p, e.r.bytes);
  if (e.fd >= 0) close(e.fd);
  if (hook) hook(e.r.id);
  return 1;
}

int shareFind(const void *p, size_t bytes, struct shareRegion *r) {
  uintptr_t a = (uintptr_t)p;
  int found = 0;
  /* Most processes never call ncclMemAlloc: no lock for them. (An
   * allocation being made cannot hold p: nobody has its address yet.) */
  if (__atomic_load_n(&nentries, __ATOMIC_RELAXED) == 0) return 0;
  pthread_mutex_lock(&shareLock);
  for (int i = 0; i < nentries && !found; i++) {
    const struct shareRegion *e = &entries[i].r;
    if (entries[i].fd >= 0 && a >= e->base && a - e->base <= e->bytes && bytes <= e->bytes - (a - e->base)) {
      *r = *e;
      found = 1;
    }
  }
  pthread_mutex_unlock(&shareLock);
  return found;
}

int shareDupFd(uint64_t id) {
  int fd = -1;
  pthread_mutex_lock(&shareLock);
  for (int i = 0; i < nentries; i++)
    if (entries[i].r.id == id && entries[i].fd >= 0) fd = fcntl(entries[i].fd, F_DUPFD_CLOEXEC, 0);
  pthread_mutex_unlock(&shareLock);
  return fd;
}

void shareSetForgetHook(void (*hook)(uint64_t id)) {
  pthread_mutex_lock(&shareLock);
  forgetHook = hook;
  pthread_mutex_unlock(&shareLock);
}
