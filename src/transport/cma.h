/* Cross-memory attach (CMA): copying between this process and another
 * one's memory with one system call, process_vm_readv / process_vm_writev,
 * where the kernel allows it (the same user, ptrace's rules; containers
 * often forbid it). The shared-memory transport reads a local peer's
 * buffers with it (single copy), and a waiting sender writes part of what
 * its reader reads (shm.c: the offer). */
#ifndef CHORUS_TRANSPORT_CMA_H
#define CHORUS_TRANSPORT_CMA_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Copies bytes at addr in process pid into dst; 0 or the errno of the
 * failed call (ESRCH: the process is gone; EPERM: not allowed). */
int cmaRead(pid_t pid, void *dst, uint64_t addr, size_t bytes);
/* Copies bytes at src here to addr in process pid; the same results. */
int cmaWrite(pid_t pid, uint64_t addr, const void *src, size_t bytes);

#endif
