/* What identifies the machine a process runs on, below anything that
 * names a host: the running kernel's boot id, the same in every network
 * namespace and container of one machine. */
#ifndef CHORUS_CORE_MACHINE_H
#define CHORUS_CORE_MACHINE_H
#include <stdint.h>

#include "core/hash.h"

/* The kernel's boot id hashed into h (FNV-1a); h unchanged when it cannot
 * be read. */
uint64_t machineBootHash(uint64_t h);
/* This process's pid namespace on this boot of this machine: the boot id
 * and /proc/self/ns/pid's device and inode, hashed; 0 when either cannot
 * be read. Processes with the same value (never 0) see each other's pids
 * as their own (a pid from another container of the same host means
 * nothing here). */
uint64_t machinePidNamespace(void);

#endif
