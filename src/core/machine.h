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

#endif
