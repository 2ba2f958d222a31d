/* File names from patterns, as NCCL_DEBUG_FILE takes them: %h the host name
 * (up to its first dot), %p the pid, %r the rank (when rank >= 0; else
 * left as it is), %% a %. Used by the log, the flight recorder and the trace. */
#ifndef CHORUS_CORE_PATHFMT_H
#define CHORUS_CORE_PATHFMT_H
#include <stddef.h>

void pathExpand(const char *pattern, int rank, char *out, size_t len);

#endif
