#define _GNU_SOURCE
#include "transport/cma.h"

#include <errno.h>
#include <sys/uio.h>

/* The kernel may stop short (at a page it cannot reach yet): go on from
 * there until all is copied or a call fails. */
static int cmaCopy(pid_t pid, char *local, uint64_t remote, size_t bytes, int write) {
  size_t done = 0;
  while (done < bytes) {
    struct iovec l = {local + done, bytes - done}, r = {(void *)(uintptr_t)(remote + done), bytes - done};
    ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0) return n < 0 ? errno : EFAULT;
    done += (size_t)n;
  }
  return 0;
}

int cmaRead(pid_t pid, void *dst, uint64_t addr, size_t bytes) { return cmaCopy(pid, dst, addr, bytes, 0); }

int cmaWrite(pid_t pid, uint64_t addr, const void *src, size_t bytes) {
  return cmaCopy(pid, (char *)(uintptr_t)src, addr, bytes, 1);
}
